/* Test mode: evaluate a run's best (or a given) checkpoint on dev and test
 * and write dev_results.json and test_results.json into the run directory. */
#include <math.h>
#include <string.h>

#include "run_internal.h"

int ut_best_checkpoint(const char *dir, ut_model *m, char *path, size_t pn, char *err, size_t n) {
    int64_t steps[256];
    int k = ut_ckpt_list(dir, steps, 256);
    if (k <= 0) {
        snprintf(err, n, "%s: no checkpoints (train first, or name one)", dir);
        return -1;
    }
    ut_train_state st;
    ut_ckpt_path(path, pn, dir, steps[0]);
    if (ut_ckpt_load(path, m, NULL, &st, err, n)) return -1;
    for (int i = 0; i < k; i++)
        if (steps[i] == st.best_step) {
            ut_ckpt_path(path, pn, dir, st.best_step);
            break;
        }
    return 0;
}

static int write_results(const char *dir, const char *split, const ut_eval_result *r,
                         const char *ckpt, int64_t step, char *err, size_t n) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s_results.json", dir, split);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, n, "%s: cannot write", path);
        return -1;
    }
    fprintf(f, "{\n");
    for (int i = 0; i < r->n; i++) {
        if (isfinite(r->values[i])) fprintf(f, "  \"%s\": %.9g,\n", r->names[i], r->values[i]);
        else fprintf(f, "  \"%s\": null,\n", r->names[i]);
    }
    fprintf(f, "  \"examples\": %lld,\n  \"checkpoint\": \"%s\",\n  \"step\": %lld\n}\n",
            (long long)r->examples, ckpt, (long long)step);
    if (fclose(f)) {
        snprintf(err, n, "%s: write failed", path);
        return -1;
    }
    return 0;
}

static int test_split(ut_runlog *log, ut_ctx *ctx, ut_model *m, ut_dataset *ds, const char *split,
                      const ut_config *c, const ut_hooks *h, const char *ckpt, int64_t step,
                      char *err, size_t n) {
    if (!ds) {
        ut_say(log, "%s: no %s data configured; skipped\n", split, split);
        return 0;
    }
    ut_eval_result r;
    int64_t bs = c->eval_batch_size > 0 ? c->eval_batch_size : c->batch_size;
    if (ut_evaluate(ut_comm_world(), ctx, m, ds, bs, h, &r, err, n)) return -1;
    if (h->on_log) {
        const char *names[UT_MAX_METRICS];
        for (int i = 0; i < r.n; i++) names[i] = r.names[i];
        h->on_log(h->user, split, step, r.n, names, r.values);
    }
    char line[512];
    size_t k = 0;
    for (int i = 0; i < r.n; i++)
        k += (size_t)snprintf(line + k, sizeof line - k, "  %s %.4f", r.names[i], r.values[i]);
    ut_say(log, "%s (%lld examples):%s\n", split, (long long)r.examples, line);
    return log->rank == 0 ? write_results(log->dir, split, &r, ckpt, step, err, n) : 0;
}

int ut_trainer_test(const ut_config *cfg, const char *ckpt_path, ut_model *model, ut_dataset *dev,
                    ut_dataset *test, const ut_hooks *hooks) {
    char err[1024] = "", path[1400], dir[1280];
    ut_runlog log;
    ut_hooks h;
    ut_hooks_resolve(&h, hooks);
    bool own_data = !dev && !test, own_m = !model;
    ut_ctx *ctx = NULL;
    int rc = UT_EXIT_ERROR;
    if (ut_runlog_open(&log, cfg, ut_comm_rank(ut_comm_world()), false, err, sizeof err)) goto out;
    if (own_data && ut_datasets_open(cfg, log.dir, NULL, &dev, &test, err, sizeof err)) goto out;
    if (own_m && !(model = ut_model_from_config(cfg, dev ? dev : test, err, sizeof err))) goto out;
    snprintf(dir, sizeof dir, "%s/checkpoints", log.dir);
    if (ckpt_path) snprintf(path, sizeof path, "%s", ckpt_path);
    else if (ut_best_checkpoint(dir, model, path, sizeof path, err, sizeof err)) goto out;
    ut_train_state st;
    if (ut_ckpt_load(path, model, NULL, &st, err, sizeof err)) goto out;
    ut_say(&log, "Testing %s (step %lld)\n", path, (long long)st.step);
    ctx = ut_ctx_new(&(ut_ctx_opts){.seed = (uint64_t)cfg->seed});
    if (test_split(&log, ctx, model, dev, "dev", cfg, &h, path, st.step, err, sizeof err) ||
        test_split(&log, ctx, model, test, "test", cfg, &h, path, st.step, err, sizeof err))
        goto out;
    rc = UT_EXIT_OK;
out:
    if (rc != UT_EXIT_OK) fprintf(stderr, "utrain: error: %s\n", err);
    if (ctx) ut_ctx_free(ctx);
    if (own_m && model) ut_model_free(model);
    if (own_data && dev) ut_dataset_free(dev);
    if (own_data && test) ut_dataset_free(test);
    ut_runlog_close(&log);
    return rc;
}
