/* Test mode: evaluate a run's best (or a given) checkpoint on dev and test
 * and write dev_results.json and test_results.json, and for classification
 * data dev_predictions.tsv and test_predictions.tsv, into the run directory. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "trainer_internal.h"

int ut_best_checkpoint(const char *dir, ut_model *m, char *path, size_t pn, char *err, size_t n) {
    int64_t steps[256];
    int k = ut_ckpt_list(dir, steps, 256);
    if (k <= 0) {
        snprintf(err, n, "%s: no checkpoints (train first, or name one)", dir);
        return -1;
    }
    ut_train_state st;
    ut_ckpt_path(path, pn, dir, steps[0]);
    /* the newest one's training state names the best (its weights are not read) */
    ut_ckpt_reader *r = ut_ckpt_reader_open(path, m ? m->type : NULL, &st, err, n);
    if (!r) return -1;
    ut_ckpt_reader_close(r);
    for (int i = 0; i < k; i++)
        if (steps[i] == st.best_step) {
            ut_ckpt_path(path, pn, dir, st.best_step);
            break;
        }
    return 0;
}

int ut_run_group_by_length(const ut_config *c, ut_dataset *ds, ut_sampler *s, int64_t world, char *err,
                           size_t n) {
    int32_t *len = ut_malloc_check((size_t)(ds->n > 0 ? ds->n : 1) * sizeof *len);
    char why[512];
    if (ut_dataset_lengths(ds, len, why, sizeof why)) {
        ut_free(len);
        return ut_errorf(err, n, "data.group_by_length: %s", why);
    }
    /* transformers' megabatch: up to 50 optimizer batches, fewer for a small set */
    int64_t batch = c->batch_size * world * c->gradient_accumulation_steps;
    int64_t mult = ds->n / (batch * 4) < 50 ? ds->n / (batch * 4) : 50;
    ut_sampler_group_by_length(s, len, (mult > 0 ? mult : 1) * batch);
    ut_free(len);
    return 0;
}

int ut_run_checkpoint(const ut_config *c, const char *dir, ut_model *m, char *path, size_t pn, char *err, size_t n) {
    if (c->load_best_at_end) return ut_best_checkpoint(dir, m, path, pn, err, n);
    int64_t steps[1];
    if (ut_ckpt_list(dir, steps, 1) <= 0) return ut_errorf(err, n, "%s: no checkpoints (train first, or name one)", dir);
    ut_ckpt_path(path, pn, dir, steps[0]);
    return 0;
}

/* dev_results.json / test_results.json. An unlabeled split has no loss or
 * accuracy: the file says so instead of giving numbers. */
static int write_results(const char *dir, const char *split, const ut_eval_result *r, bool labeled,
                         bool predictions, const char *ckpt, int64_t step, char *err, size_t n) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s_results.json", dir, split);
    FILE *f = ut_fopen_write(path, false, err, n);
    if (!f) return -1;
    fprintf(f, "{\n");
    for (int i = 0; labeled && i < r->n; i++) {
        if (isfinite(r->values[i])) fprintf(f, "  \"%s\": %.9g,\n", r->names[i], r->values[i]);
        else fprintf(f, "  \"%s\": null,\n", r->names[i]);
    }
    if (!labeled)
        fprintf(f, "  \"labeled\": false,\n  \"note\": \"the %s file has no label column: no loss or "
                   "accuracy, predictions only\",\n", split);
    if (predictions) fprintf(f, "  \"predictions\": \"%s_predictions.tsv\",\n", split);
    fprintf(f, "  \"examples\": %lld,\n  \"checkpoint\": \"%s\",\n  \"step\": %lld\n}\n",
            (long long)r->examples, ckpt, (long long)step);
    if (fclose(f)) return ut_errorf(err, n, "%s: write failed", path);
    return 0;
}

/* One prediction row: the example's id, the arg-max class (its name where
 * the labels are names) and the softmax probabilities of its logits. */
static void write_prediction(FILE *f, int64_t id, const double *logits, int64_t C, const char *const *names) {
    int64_t best = 0;
    double sum = 0;
    for (int64_t c = 1; c < C; c++)
        if (logits[c] > logits[best]) best = c;
    for (int64_t c = 0; c < C; c++) sum += exp(logits[c] - logits[best]);
    if (names) fprintf(f, "%lld\t%s", (long long)id, names[best]);
    else fprintf(f, "%lld\t%lld", (long long)id, (long long)best);
    for (int64_t c = 0; c < C; c++) fprintf(f, "\t%.6f", exp(logits[c] - logits[best]) / sum);
    fputc('\n', f);
}

/* A multi-label prediction row: the example's id, its predicted labels
 * (an output above 0: a probability above 0.5), comma-separated, names
 * where the labels are names (none: an empty field), and each label's
 * probability, the sigmoid of its logit. */
static void write_multi_prediction(FILE *f, int64_t id, const double *logits, int64_t K, const char *const *names) {
    fprintf(f, "%lld\t", (long long)id);
    for (int64_t k = 0, any = 0; k < K; k++)
        if (logits[k] > 0) {
            if (any++) fputc(',', f);
            if (names) fputs(names[k], f);
            else fprintf(f, "%lld", (long long)k);
        }
    for (int64_t k = 0; k < K; k++) fprintf(f, "\t%.6f", 1 / (1 + exp(-logits[k])));
    fputc('\n', f);
}

/* <split>_predictions.tsv: a header, then one row per example in dataset
 * order; a regression's rows are the id and the predicted score, a
 * multi-label task's the id, the predicted labels and their probabilities. */
static int write_predictions(const char *dir, const char *split, const ut_dataset *ds,
                             const double *logits, char *err, size_t n) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s_predictions.tsv", dir, split);
    FILE *f = ut_fopen_write(path, false, err, n);
    if (!f) return -1;
    int64_t C = ds->num_classes;
    fprintf(f, "index\tprediction");
    for (int64_t c = 0; c < C; c++) fprintf(f, "\tprob_%lld", (long long)c);
    fputc('\n', f);
    for (int64_t i = 0; i < ds->n; i++) {
        int64_t id = ds->example_id ? ds->example_id[i] : i;
        if (ds->regression) fprintf(f, "%lld\t%.6f\n", (long long)id, logits[i]);
        else if (ds->multi_label) write_multi_prediction(f, id, logits + i * C, C, ds->label_names);
        else write_prediction(f, id, logits + i * C, C, ds->label_names);
    }
    if (fclose(f)) return ut_errorf(err, n, "%s: write failed", path);
    return 0;
}

/* A token classifier's <split>_predictions.tsv: a header, then per example
 * in dataset order its id, its words and a predicted tag for each word
 * that kept a piece (space-separated; words cut at data.max_len have
 * none). pred: ut_evaluate_outputs' classes + 1 (ds->n x max_len). */
static void put_field(FILE *f, const char *s);

static int write_tag_predictions(const char *dir, const char *split, const ut_dataset *ds, const double *pred,
                                 char *err, size_t n) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s_predictions.tsv", dir, split);
    FILE *f = ut_fopen_write(path, false, err, n);
    if (!f) return -1;
    int64_t L = ds->x_ne[1], K = ds->num_classes;
    fprintf(f, "index\twords\tprediction\n");
    for (int64_t i = 0; i < ds->n; i++) {
        int64_t nw = 0;
        const char *const *w = ut_tagged_words(ds, i, &nw);
        fprintf(f, "%lld\t", (long long)(ds->example_id ? ds->example_id[i] : i));
        for (int64_t k = 0; w && k < nw; k++) {
            if (k) fputc(' ', f);
            put_field(f, w[k]);
        }
        fputc('\t', f);
        int any = 0;
        for (int64_t t = 0; t < L; t++) {
            int64_t c = (int64_t)pred[i * L + t] - 1;
            if (c < 0 || c >= K) continue;
            if (any++) fputc(' ', f);
            if (ds->label_names) put_field(f, ds->label_names[c]);
            else fprintf(f, "%lld", (long long)c);
        }
        fputc('\n', f);
    }
    if (fclose(f)) return ut_errorf(err, n, "%s: write failed", path);
    return 0;
}

/* <split>_generations.tsv: a header, then source, reference and generated
 * text of each example in dataset order (tabs and newlines inside a text
 * written as spaces, so every example is one row). */
static void put_field(FILE *f, const char *s) {
    for (; s && *s; s++) fputc(*s == '\t' || *s == '\n' || *s == '\r' ? ' ' : *s, f);
}

static int write_generations(const char *dir, const char *split, const ut_dataset *ds, char **texts, char *err,
                             size_t n) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s_generations.tsv", dir, split);
    FILE *f = ut_fopen_write(path, false, err, n);
    if (!f) return -1;
    fprintf(f, "source\treference\tgenerated\n");
    for (int64_t i = 0; i < ds->n; i++) {
        put_field(f, ut_seq2seq_text(ds, i, 0));
        fputc('\t', f);
        put_field(f, ut_seq2seq_text(ds, i, 1));
        fputc('\t', f);
        put_field(f, texts[i]);
        fputc('\n', f);
    }
    if (fclose(f)) return ut_errorf(err, n, "%s: write failed", path);
    return 0;
}

/* Sequence to sequence: every example generated (generate.* options), the
 * scores added to r and, on rank 0, <split>_generations.tsv written. */
static int test_generation(ut_runlog *log, ut_comm *comm, ut_model *m, ut_dataset *ds, const char *split,
                           const ut_config *c, const ut_hooks *h, int64_t bs, ut_eval_result *r, char *err,
                           size_t n) {
    ut_tokenizer *tok = ut_run_tokenizer(c, err, n);
    if (!tok) return -1;
    ut_gen_opts o;
    ut_gen_opts_from_config(c, &o);
    char **texts = NULL;
    int rc = ut_evaluate_generation(comm, m, ds, bs, &o, tok, h, r, &texts, err, n);
    if (!rc && log->rank == 0) rc = write_generations(log->dir, split, ds, texts, err, n);
    for (int64_t i = 0; texts && i < ds->n; i++) ut_free(texts[i]);
    ut_free(texts);
    ut_tokenizer_free(tok);
    return rc;
}

/* What test mode says about a split on the console and in the log. */
static void report_split(ut_runlog *log, const char *split, const ut_eval_result *r, bool labeled,
                         bool predictions) {
    char line[512] = "";
    size_t k = 0;
    for (int i = 0; labeled && i < r->n; i++)
        k += (size_t)snprintf(line + k, sizeof line - k, "  %s %.4f", r->names[i], r->values[i]);
    if (!labeled) snprintf(line, sizeof line, "  no labels: predictions only");
    ut_say(log, "%s (%lld examples):%s%s%s%s\n", split, (long long)r->examples, line,
           predictions ? "  -> " : "", predictions ? split : "", predictions ? "_predictions.tsv" : "");
}

/* How test mode evaluates: over comm's ranks (the data-parallel ones) on
 * ctx, or by ev(ev_arg, ...) when set (a split model's parts). */
typedef struct {
    ut_comm *comm;
    ut_ctx *ctx;
    ut_model *m;
    ut_eval_fn ev;
    void *ev_arg;
} test_on;

/* Evaluates one split; classification data (num_classes > 0) and a
 * regression's scores also get their predictions. Language-model data (token shards) gets none: a row per
 * token would be a file many times the size of the data. */
static int test_split(ut_runlog *log, const test_on *on, ut_dataset *ds, const char *split, const ut_config *c,
                      const ut_hooks *h, const char *ckpt, int64_t step, char *err, size_t n) {
    if (!ds) {
        ut_say(log, "%s: no %s data configured; skipped\n", split, split);
        return 0;
    }
    ut_eval_result r;
    int64_t bs = c->eval_batch_size > 0 ? c->eval_batch_size : c->batch_size;
    bool tags = ut_tok_tags(ds); /* a token classifier's: a class per position */
    int64_t K = tags ? ds->x_ne[1] : ut_dataset_outputs(ds);
    bool classify = K > 0, have = false, labeled = !ds->unlabeled;
    double *logits = classify ? ut_calloc_check((size_t)(ds->n * K), sizeof(double)) : NULL;
    int rc = on->ev ? on->ev(on->ev_arg, ds, bs, &r, logits, &have, err, n)
                    : ut_evaluate_outputs(on->comm, on->ctx, on->m, ds, bs, h, ut_cls_wanted(c), &r, logits, &have, err,
                                          n);
    bool gen = ut_seq2seq_planes(ds);
    if (!rc && gen) rc = test_generation(log, on->comm, on->m, ds, split, c, h, bs, &r, err, n);
    if (!rc && h->on_log && labeled) {
        const char *names[UT_MAX_METRICS];
        for (int i = 0; i < r.n; i++) names[i] = r.names[i];
        h->on_log(h->user, split, step, r.n, names, r.values);
    }
    if (!rc) report_split(log, split, &r, labeled, have);
    if (!rc && gen) ut_say(log, "%s: generations -> %s_generations.tsv\n", split, split);
    if (!rc && classify && !have)
        ut_say(log, "%s: no predictions written: the model's output is not (batch, %s%lld %s)\n", split,
               tags ? "tokens, " : "", (long long)(tags ? ds->num_classes : K),
               ds->regression ? "score" : ds->multi_label ? "labels" : "classes");
    if (!rc && log->rank == 0)
        rc = write_results(log->dir, split, &r, labeled, have, ckpt, step, err, n) ||
             (have && (tags ? write_tag_predictions(log->dir, split, ds, logits, err, n)
                            : write_predictions(log->dir, split, ds, logits, err, n)));
    ut_free(logits);
    return rc ? -1 : 0;
}

int ut_trainer_test(const ut_config *cfg, const char *ckpt_path, ut_model *model, ut_dataset *dev,
                    ut_dataset *test, const ut_hooks *hooks) {
    return ut_trainer_test_on(cfg, ut_comm_world(), ckpt_path, model, dev, test, hooks);
}

int ut_trainer_test_on(const ut_config *cfg, ut_comm *comm, const char *ckpt_path, ut_model *model,
                       ut_dataset *dev, ut_dataset *test, const ut_hooks *hooks) {
    char err[1024] = "", path[1400], dir[1280];
    ut_runlog log;
    ut_hooks h;
    ut_hooks_resolve(&h, hooks);
    bool own_data = !dev && !test, own_m = !model;
    ut_ctx *ctx = NULL;
    ut_trainer *split = NULL;
    int rc = UT_EXIT_ERROR;
    if (ut_runlog_open(&log, cfg, comm, false, err, sizeof err)) goto out;
    if (own_data && ut_datasets_open(cfg, log.dir, log.rank == 0, NULL, &dev, &test, err, sizeof err)) goto out;
    /* a split run under as many processes as its split takes (or a multiple)
     * tests on its parts; otherwise each process holds the whole model */
    int parts = (int)(cfg->tensor_parallel * cfg->pipeline_parallel), W = ut_comm_size(comm);
    /* sequence-to-sequence test mode generates, which needs every layer of
     * the decoder: pipeline stages hold some, so each process takes the whole */
    ut_dataset *any = dev ? dev : test;
    if (ut_cls_check(cfg, any, err, sizeof err)) goto out;
    bool staged_gen = cfg->pipeline_parallel > 1 && any && ut_seq2seq_planes(any);
    if (own_m && parts > 1 && W > 1 && W % parts == 0 && !staged_gen) {
        if (!(split = ut_split_test_open(cfg, comm, dev ? dev : test, &h, err, sizeof err))) goto out;
        model = ut_split_test_model(split);
        own_m = false;
    } else if (own_m && !(model = ut_model_from_config(cfg, dev ? dev : test, err, sizeof err))) {
        goto out;
    }
    snprintf(dir, sizeof dir, "%s/checkpoints", log.dir);
    if (ckpt_path) snprintf(path, sizeof path, "%s", ckpt_path);
    else if (ut_run_checkpoint(cfg, dir, model, path, sizeof path, err, sizeof err)) goto out;
    ut_train_state st;
    if (split ? ut_split_test_load(split, path, &st, err, sizeof err) : ut_ckpt_load(path, model, NULL, &st, err, sizeof err))
        goto out;
    char how[160] = "";
    if (split)
        snprintf(how, sizeof how, " on the model's parts (tensor parallel %lld, %lld pipeline stage%s)",
                 (long long)cfg->tensor_parallel, (long long)cfg->pipeline_parallel, cfg->pipeline_parallel > 1 ? "s" : "");
    if (staged_gen && W > 1)
        snprintf(how, sizeof how, " on the whole model in each process (test mode generates, and the %lld pipeline "
                 "stages each hold a part of the decoder)", (long long)cfg->pipeline_parallel);
    ut_say(&log, "Testing %s (step %lld)%s\n", path, (long long)st.step, how);
    ctx = ut_ctx_new(&(ut_ctx_opts){.seed = (uint64_t)cfg->seed, .device = model->params.device});
    ut_run_ctx_setup(ctx, cfg);
    ut_ctx_set_autocast(ctx, ut_run_eval_precision(cfg)); /* train.eval_precision */
    test_on on = {split ? ut_split_test_dcomm(split) : comm, ctx, model, split ? ut_split_test_eval : NULL, split};
    if (test_split(&log, &on, dev, "dev", cfg, &h, path, st.step, err, sizeof err) ||
        test_split(&log, &on, test, "test", cfg, &h, path, st.step, err, sizeof err))
        goto out;
    rc = UT_EXIT_OK;
out:
    if (rc != UT_EXIT_OK) fprintf(stderr, "utrain: error: %s\n", err);
    if (ctx) ut_ctx_free(ctx);
    ut_split_test_free(split);
    if (own_m && model) ut_model_free(model);
    if (own_data && dev) ut_dataset_free(dev);
    if (own_data && test) ut_dataset_free(test);
    ut_runlog_close(&log);
    return rc;
}
