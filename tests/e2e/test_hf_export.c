/* `utrain export RUN_DIR --format hf OUT_DIR` round trip: a run directory
 * whose checkpoint holds the Hugging Face fixtures' weights (GPT-2 and BERT,
 * from tests/parity/make_hf_gpt2_fixtures.py and make_hf_fixtures.py) is
 * exported, and utrain loading OUT_DIR as model.pretrained gives the
 * fixtures' transformers logits (1e-5); the tokenizer files are copied, the
 * Conv1D weights are stored (in, out) again, the best checkpoint is chosen,
 * and bad requests are refused. Also: the GPT-2 fixture fine-tuned by
 * `utrain train` on token shards exports to its best checkpoint's weights. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proc.h"
#include "test.h"
#include "parity.h"
#include "utrain/utrain.h"

#define FIX "tests/parity/fixtures/"

static char tmp[256];

static const char *task; /* model.task of the next load, or NULL */

static ut_model *load(const char *name, const char *dir, char *err, size_t n) {
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "pretrained", dir);
    if (task) ut_kv_set(kv, "task", task);
    ut_model *m = ut_model_create(name, kv, 7, err, n);
    ut_kv_free(kv);
    return m;
}

/* RUN/config.yml for model NAME from fixture DIR, and checkpoints at steps 1
 * (the best: the fixture's weights) and 2 (the newest: weights scaled by 2). */
static void make_run(const char *run, const char *name, const char *dir, const char *data) {
    char err[1024];
    UT_ASSERT(mkdir(run, 0777) == 0 && mkdir(tp_path(run, "checkpoints"), 0777) == 0);
    FILE *f = fopen(tp_path(run, "config.yml"), "w");
    UT_ASSERT(f);
    fprintf(f, "experiment_name: x\noutput_dir: %s\nmodel:\n  name: %s\n  pretrained: %s\n%s%s%sdata:\n%s", tmp,
            name, dir, task ? "  task: " : "", task ? task : "", task ? "\n" : "", data);
    fclose(f);
    ut_model *m = load(name, dir, err, sizeof err);
    CHECK(m, "%s", err);
    if (!m) return;
    ut_train_state st = {0};
    st.step = 1, st.best_step = 1;
    char path[1200];
    ut_ckpt_path(path, sizeof path, tp_path(run, "checkpoints"), 1);
    CHECK(ut_ckpt_save(path, m, NULL, &st, err, sizeof err) == 0, "%s", err);
    for (int64_t i = 0; i < m->params.numel; i++) m->params.flat[i] *= 2;
    st.step = 2;
    ut_ckpt_path(path, sizeof path, tp_path(run, "checkpoints"), 2);
    CHECK(ut_ckpt_save(path, m, NULL, &st, err, sizeof err) == 0, "%s", err);
    ut_model_free(m);
}

static int export_run(const char *run, const char *out, const char *name) {
    const char *argv[] = {"export", run, "--format", "hf", out, NULL};
    return tp_run_shown(argv, tp_path(tmp, name), 0, NULL);
}

/* utrain on OUT gives the fixture batch's transformers logits */
static void same_logits(const char *name, const char *out, const char *batch) {
    char err[1024];
    ut_model *m = load(name, out, err, sizeof err);
    CHECK(m, "%s", err);
    ut_st_file *f = ut_st_open(batch, err, sizeof err);
    CHECK(f, "%s", err);
    if (m && f) {
        ut_ctx *ctx = ut_ctx_new(NULL);
        ut_ctx_set_training(ctx, false);
        ut_tensor *y = ut_model_forward(m, ctx, pt_stored(ctx, ut_st_get(f, "input")));
        const ut_st_tensor *ref = ut_st_get(f, "logits");
        CHECK(y && ut_nelem(y) == ut_st_numel(ref), "%s: logits", out);
        double e = 0, mx = 0;
        for (int64_t i = 0; y && i < ut_nelem(y); i++) {
            double r = ((const float *)ref->data)[i];
            e = fmax(e, fabs(ut_f32(y)[i] - r));
            mx = fmax(mx, fabs(r));
        }
        CHECK(e <= 1e-5 * mx, "%s: logits differ by %g (largest %g)", out, e, mx);
        ut_ctx_free(ctx);
    }
    ut_st_close(f);
    ut_model_free(m);
}

/* tmp/LABELrun of model NAME from fixture DIR (data lines DATA) exported to
 * tmp/LABELhf (its path into out): utrain on it gives DIR_batch's logits */
static void export_case(const char *label, const char *name, const char *dir, const char *data, char *out, size_t n) {
    char run[512], log[64], batch[512];
    snprintf(run, sizeof run, "%s/%srun", tmp, label), snprintf(out, n, "%s/%shf", tmp, label);
    snprintf(log, sizeof log, "%s.out", label), snprintf(batch, sizeof batch, "%s_batch.safetensors", dir);
    make_run(run, name, dir, data);
    CHECK(export_run(run, out, log) == 0, "export %s", label);
    same_logits(name, out, batch);
}

static void test_gpt2(void) {
    char out[512];
    export_case("gpt2", "gpt2", FIX "hf_gpt2_tiny", "  name: tokens\n  train_path: none.bin\n", out, sizeof out);
    char err[1024];
    ut_st_file *f = ut_st_open(tp_path(out, "model.safetensors"), err, sizeof err);
    CHECK(f, "%s", err);
    const ut_st_tensor *fc = f ? ut_st_get(f, "transformer.h.0.mlp.c_fc.weight") : NULL;
    CHECK(fc && fc->shape[0] == 32 && fc->shape[1] == 128, "c_fc stored (in, out) = (32, 128)");
    CHECK(f && !strcmp(ut_st_meta(f, "format") ? ut_st_meta(f, "format") : "", "pt"), "format pt");
    ut_st_close(f);
    char *cfg = tp_slurp(tp_path(out, "config.json"));
    CHECK(cfg && strstr(cfg, "\"GPT2LMHeadModel\"") && strstr(cfg, "\"n_head\":\t2"), "config.json: %s",
          cfg ? cfg : "(none)");
    free(cfg);
}

static void test_bert(void) {
    char out[512];
    export_case("bert", "bert", FIX "hf_bert_tiny", "  name: tsv_text\n  train_path: data/sst2_sample/train.tsv\n", out, sizeof out);
    CHECK(tp_count_lines(tp_path(out, "vocab.txt")) == 100, "vocab.txt copied");
}

/* RoBERTa through model.name bert: config.json says roberta, the tokenizer.json is copied */
static void test_roberta(void) {
    char out[512];
    export_case("rob", "bert", FIX "hf_roberta_tiny", "  name: tsv_text\n  train_path: data/sst2_sample/train.tsv\n", out, sizeof out);
    char *cfg = tp_slurp(tp_path(out, "config.json"));
    CHECK(cfg && strstr(cfg, "\"RobertaForSequenceClassification\"") && strstr(cfg, "\"model_type\":\t\"roberta\"") &&
              strstr(cfg, "\"pad_token_id\":\t1"),
          "config.json: %s", cfg ? cfg : "(none)");
    free(cfg);
    struct stat st;
    CHECK(stat(tp_path(out, "tokenizer.json"), &st) == 0 && st.st_size > 1000, "tokenizer.json copied");
}

/* GPT2ForSequenceClassification: score.weight without "transformer.", pad_token_id kept */
static void test_gpt2_classifier(void) {
    char out[512], err[1024];
    task = "sequence_classification";
    export_case("g2c", "gpt2", FIX "hf_gpt2_cls_tiny", "  name: tsv_text\n  train_path: data/sst2_sample/train.tsv\n", out, sizeof out);
    task = NULL;
    ut_st_file *f = ut_st_open(tp_path(out, "model.safetensors"), err, sizeof err);
    CHECK(f && ut_st_get(f, "score.weight") && ut_st_get(f, "transformer.wte.weight"), "%s", err);
    ut_st_close(f);
    char *cfg = tp_slurp(tp_path(out, "config.json"));
    CHECK(cfg && strstr(cfg, "\"GPT2ForSequenceClassification\"") && strstr(cfg, "\"pad_token_id\":\t299") &&
              strstr(cfg, "\"LABEL_1\""),
          "config.json: %s", cfg ? cfg : "(none)");
    free(cfg);
    CHECK(tp_count_lines(tp_path(out, "merges.txt")) > 10, "merges.txt copied");
}

/* A token shard (llm.c layout) of n ids below 100 */
static void write_shard(const char *path, int n, unsigned seed) {
    FILE *f = fopen(path, "wb");
    UT_ASSERT(f);
    int32_t hdr[256] = {20240520, 1, n};
    fwrite(hdr, sizeof hdr, 1, f);
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        uint16_t t = (uint16_t)((seed >> 16) % 100);
        fwrite(&t, sizeof t, 1, f);
    }
    fclose(f);
}

/* Fine-tune the GPT-2 fixture with `utrain train` on token shards, export,
 * and load the export: its weights are the best checkpoint's exactly. */
static void test_gpt2_train_then_export(void) {
    write_shard(tp_path(tmp, "train.bin"), 3000, 1);
    write_shard(tp_path(tmp, "dev.bin"), 500, 2);
    FILE *f = fopen(tp_path(tmp, "ft.yml"), "w");
    UT_ASSERT(f);
    fprintf(f, "experiment_name: ft\noutput_dir: %s/runs\nseed: 1\nmodel:\n  name: gpt2\n"
               "  pretrained: " FIX "hf_gpt2_tiny\n  task: causal_lm\n  dropout: 0\n"
               "data:\n  name: tokens\n  train_path: %s/train.bin\n  dev_path: %s/dev.bin\n  seq_len: 16\n"
               "train:\n  max_steps: 10\n  batch_size: 4\n  eval_strategy: steps\n  eval_interval: 5\n"
               "  save_strategy: steps\n  save_interval: 5\n  best_metric: dev/loss\n"
               "optim:\n  name: adamw\n  lr: 1.0e-3\n", tmp, tmp, tmp);
    fclose(f);
    const char *tr[] = {"train", tp_path(tmp, "ft.yml"), NULL};
    CHECK(tp_run_shown(tr, tp_path(tmp, "ft.out"), 0, NULL) == 0, "train");
    char run[512], out[512], err[1024];
    snprintf(run, sizeof run, "%s/runs/ft", tmp), snprintf(out, sizeof out, "%s/fthf", tmp);
    CHECK(export_run(run, out, "ftexport.out") == 0, "export");
    char *said = tp_slurp(tp_path(tmp, "ftexport.out"));
    const char *ck = said ? strstr(said, "exported ") : NULL;
    char ckpt[1024] = "";
    if (ck) sscanf(ck + 9, "%1023s", ckpt);
    free(said);
    ut_model *a = load("gpt2", out, err, sizeof err), *b = load("gpt2", FIX "hf_gpt2_tiny", err, sizeof err);
    CHECK(a && b && ckpt[0] && ut_ckpt_load(ckpt, b, NULL, NULL, err, sizeof err) == 0, "%s", err);
    if (a && b) {
        double d = 0, moved = 0;
        ut_model *orig = load("gpt2", FIX "hf_gpt2_tiny", err, sizeof err);
        for (int64_t i = 0; orig && i < a->params.numel; i++) {
            d = fmax(d, fabs(a->params.flat[i] - b->params.flat[i]));
            moved = fmax(moved, fabs(a->params.flat[i] - orig->params.flat[i]));
        }
        CHECK(d == 0, "export of %s differs from it by %g", ckpt, d);
        CHECK(moved > 1e-4, "training moved the weights (%g)", moved);
        ut_model_free(orig);
    }
    ut_model_free(a);
    ut_model_free(b);
}

static void test_refusals(void) {
    const char *a1[] = {"export", tmp, "--format", "onnx", tp_path(tmp, "x"), NULL};
    CHECK(tp_run(a1, tp_path(tmp, "r1.out")) == 2, "format onnx refused");
    const char *a2[] = {"export", tp_path(tmp, "nowhere"), "--format", "hf", tp_path(tmp, "x"), NULL};
    CHECK(tp_run(a2, tp_path(tmp, "r2.out")) == 1, "no run directory");
    char *s = tp_slurp(tp_path(tmp, "r2.out"));
    CHECK(s && strstr(s, "nowhere/config.yml"), "message names the file: %s", s ? s : "");
    free(s);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    UT_ASSERT(tp_make_tmpdir(tmp, sizeof tmp, "hfexport"));
    RUN(test_gpt2);
    RUN(test_bert);
    RUN(test_roberta);
    RUN(test_gpt2_classifier);
    RUN(test_gpt2_train_then_export);
    RUN(test_refusals);
    return tp_finish(TEST_SUMMARY(), tmp);
}
