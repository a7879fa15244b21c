/* End to end through the `utrain` program with a Hugging Face BART directory
 * (the tiny fixture of tests/parity/make_hf_bart_fixtures.py, its byte-level
 * BPE tokenizer.json as the tokenizer) on data/sst2_sample: train mode for
 * one epoch, then test mode writing dev/test results and predictions, export
 * to a Hugging Face directory that loads back to the best checkpoint's
 * weights, bad settings refused, and DDP and ZeRO-3 on two ranks giving one
 * process's losses and weights. */
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "test.h"
#include "utrain/io.h"

static char tmp[256];

static const char *path_in(const char *a, const char *b) {
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", a, b);
    return buf[k];
}

static void write_config(void) {
    FILE *f = fopen(path_in(tmp, "bart.yml"), "w");
    fprintf(f, "experiment_name: bart\noutput_dir: %s/runs\nseed: 3\n"
               "model:\n  name: bart\n  pretrained: tests/parity/fixtures/hf_bart_tiny\n"
               "  task: sequence_classification\n  dropout: 0\n"
               "data:\n  name: tsv_text\n  train_path: data/sst2_sample/train.tsv\n"
               "  dev_path: data/sst2_sample/dev.tsv\n  test_path: data/sst2_sample/test.tsv\n  max_len: 24\n"
               "train:\n  epochs: 1\n  batch_size: 16\n  log_interval: 1\n  eval_strategy: epoch\n"
               "  save_strategy: epoch\n  best_metric: dev/accuracy\n"
               "optim:\n  name: adamw\n  lr: 2.0e-3\n  weight_decay: 0.01\n  schedule: linear\n", tmp);
    fclose(f);
}

/* utrain CMD ARG with --set values (NULL-terminated) and --nproc; output in tmp/NAME.out */
static int run(const char *cmd, const char *arg, const char *name, const char *const *sets, const char *nproc) {
    const char *argv[24] = {cmd, arg};
    int n = 2;
    for (int i = 0; sets && sets[i] && n < 18; i++) argv[n++] = "--set", argv[n++] = sets[i];
    if (nproc) argv[n++] = "--nproc", argv[n++] = nproc;
    argv[n] = NULL;
    int rc = tp_run(argv, path_in(tmp, name));
    if (rc) {
        char *s = tp_slurp(path_in(tmp, name));
        fprintf(stderr, "  utrain %s exited %d:\n%s\n", cmd, rc, s ? s : "");
        free(s);
    }
    return rc;
}

static void test_train_then_test(void) {
    CHECK(run("train", path_in(tmp, "bart.yml"), "train.out", NULL, NULL) == 0, "train");
    const char *dir = path_in(tmp, "runs/bart");
    char d[1024];
    snprintf(d, sizeof d, "%s", dir);
    CHECK(run("test", d, "test.out", NULL, NULL) == 0, "test");
    const char *splits[2] = {"dev", "test"};
    for (int i = 0; i < 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s_results.json", splits[i]);
        char *s = tp_slurp(path_in(d, name));
        CHECK(s && strstr(s, "\"examples\": 60") && strstr(s, "\"accuracy\"") && strstr(s, "\"loss\""), "%s: %s",
              name, s);
        free(s);
        snprintf(name, sizeof name, "%s_predictions.tsv", splits[i]);
        CHECK(tp_count_lines(path_in(d, name)) == 61, "%s: header and 60 rows", name);
    }
    char *s = tp_slurp(path_in(tmp, "train.out"));
    CHECK(s && strstr(s, "Model = bart"), "train output: %s", s);
    free(s);
}

/* utrain export of the run: config.json (model_type bart, the sizes),
 * model.safetensors under transformers' names, the tokenizer; loading the
 * export gives the best checkpoint's weights */
static void test_export(void) {
    char d[1024], out[1024], err[512];
    snprintf(d, sizeof d, "%s", path_in(tmp, "runs/bart"));
    snprintf(out, sizeof out, "%s", path_in(tmp, "export"));
    const char *argv[] = {"export", d, "--format", "hf", out, NULL};
    CHECK(tp_run(argv, path_in(tmp, "export.out")) == 0, "export");
    ut_kv *cfg = ut_hf_config_read(out, err, sizeof err);
    CHECK(cfg, "%s", err);
    const char *want[][2] = {{"model_type", "bart"}, {"d_model", "32"}, {"decoder_layers", "2"},
                             {"encoder_attention_heads", "4"}, {"max_position_embeddings", "64"},
                             {"scale_embedding", "true"}, {"num_labels", "2"}, {"dropout", "0"}};
    for (int i = 0; cfg && i < 8; i++) {
        const char *v = ut_kv_get(cfg, want[i][0]);
        CHECK(v && !strcmp(v, want[i][1]), "config.json %s: %s, expected %s", want[i][0], v ? v : "none",
              want[i][1]);
    }
    ut_kv_free(cfg);
    CHECK(tp_count_lines(path_in(out, "tokenizer.json")) > 0, "tokenizer.json copied");
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "pretrained", out);
    ut_model *m = ut_model_create("bart", kv, 1, err, sizeof err);
    ut_kv_free(kv);
    CHECK(m, "%s", err);
    char *said = tp_slurp(path_in(tmp, "export.out")), ckpt[1024] = "";
    const char *at = said ? strstr(said, "exported ") : NULL;
    if (at) sscanf(at + 9, "%1023s", ckpt);
    free(said);
    ut_st_file *best = ut_st_open(ckpt, err, sizeof err);
    CHECK(best && strstr(ckpt, "step_"), "%s: %s", ckpt, err);
    int same = 0;
    for (int p = 0; m && best && p < m->params.n; p++) {
        char name[300];
        snprintf(name, sizeof name, "model.%s", m->params.names[p]);
        const ut_st_tensor *t = ut_st_get(best, name);
        same += t && t->nbytes == (size_t)ut_nelem(m->params.t[p]) * sizeof(float) &&
                !memcmp(t->data, ut_f32(m->params.t[p]), t->nbytes);
    }
    CHECK(m && same == m->params.n && same == 95, "%d of 95 tensors equal to the best checkpoint's", same);
    ut_st_close(best);
    ut_model_free(m);
}

/* bad settings: exit 1 with the key and the reason */
static void test_refused(void) {
    const char *cases[][2] = {
        {"data.max_len=100", "data.max_len: 100 is more than the model's max_position_embeddings 64"},
        {"model.pretrained=/nonexistent/dir", "model.pretrained (its tokenizer): /nonexistent/dir"},
        {"model.decoder_layers=4", "model.decoder_layers: set by model.pretrained"},
        {"model.task=causal_lm", "model.task: 'causal_lm' is not available for bart"},
    };
    for (int i = 0; i < 4; i++) {
        const char *argv[] = {"train", path_in(tmp, "bart.yml"), "--set", "experiment_name=refused", "--set",
                              cases[i][0], NULL};
        CHECK(tp_run(argv, path_in(tmp, "refused.out")) == 1, "%s: exit 1", cases[i][0]);
        char *s = tp_slurp(path_in(tmp, "refused.out"));
        CHECK(s && strstr(s, cases[i][1]), "%s: %s", cases[i][0], s);
        free(s);
    }
}

/* ddp and zero3 on 2 ranks x 8 examples = 1 process x 16: the same train
 * losses and weights (the config turns dropout off: each rank draws its own
 * masks) */
static void check_two_ranks(const char *strategy) {
    char exp[64], strat[64], run_name[64], out[64], ckpt[128];
    snprintf(exp, sizeof exp, "experiment_name=bart_%s", strategy);
    snprintf(strat, sizeof strat, "dist.strategy=%s", strategy);
    snprintf(run_name, sizeof run_name, "runs/bart_%s/metrics.jsonl", strategy);
    snprintf(out, sizeof out, "%s.out", strategy);
    const char *sets[] = {exp, "train.batch_size=8", strat, NULL};
    CHECK(run("train", path_in(tmp, "bart.yml"), out, sets, "2") == 0, "%s on 2 ranks", strategy);
    for (int step = 1; step <= 15; step += 7) {
        char a[64] = "", b[64] = "";
        bool ok = tp_loss_at(path_in(tmp, "runs/bart/metrics.jsonl"), "train", step, a, sizeof a) &&
                  tp_loss_at(path_in(tmp, run_name), "train", step, b, sizeof b);
        CHECK(ok && fabs(atof(a) - atof(b)) <= 1e-5 * fabs(atof(a)), "%s step %d: loss %s vs %s", strategy, step,
              a, b);
    }
    char err[512];
    snprintf(ckpt, sizeof ckpt, "runs/bart_%s/checkpoints/step_00000015.safetensors", strategy);
    ut_st_file *a = ut_st_open(path_in(tmp, "runs/bart/checkpoints/step_00000015.safetensors"), err, sizeof err);
    ut_st_file *b = ut_st_open(path_in(tmp, ckpt), err, sizeof err);
    CHECK(a && b, "%s", err);
    int compared = 0;
    for (int i = 0; a && b && i < ut_st_count(a); i++) {
        const char *name = ut_st_name(a, i);
        /* the key bias's gradient is rounding noise (softmax ignores it), which AdamW scales up */
        if (strncmp(name, "model.", 6) || strstr(name, "k_proj.bias")) continue;
        const ut_st_tensor *x = ut_st_get(a, name), *y = ut_st_get(b, name);
        CHECK(y && y->nbytes == x->nbytes, "%s", name);
        if (!y || y->nbytes != x->nbytes) continue;
        double d2 = 0, n2 = 0;
        for (int64_t k = 0; k < ut_st_numel(x); k++) {
            double u = ((const float *)x->data)[k], v = ((const float *)y->data)[k];
            d2 += (u - v) * (u - v);
            n2 += u * u;
        }
        CHECK(sqrt(d2) <= 1e-5 * sqrt(n2), "%s %s: relative difference %g", strategy, name,
              sqrt(d2 / (n2 > 0 ? n2 : 1)));
        compared++;
    }
    CHECK(compared == 89, "%s: %d tensors compared", strategy, compared);
    ut_st_close(a);
    ut_st_close(b);
}

static void test_ddp_two_ranks(void) { check_two_ranks("ddp"); }
static void test_zero3_two_ranks(void) { check_two_ranks("zero3"); }

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "ut-hfbart")) return 1;
    write_config();
    RUN(test_train_then_test);
    RUN(test_export);
    RUN(test_refused);
    /* the jobs under mpirun last: their environment turns LeakSanitizer off */
    tp_mpi_env(true);
    RUN(test_ddp_two_ranks);
    RUN(test_zero3_two_ranks);
    return tp_finish(TEST_SUMMARY(), tmp);
}
