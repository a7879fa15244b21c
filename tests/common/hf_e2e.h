/* Helpers shared by the end-to-end tests that run the `utrain` program on a
 * Hugging Face fixture directory (tests/e2e/test_hf_*.c): a config for
 * data/sst2_sample, runs whose output is shown when they fail, the files
 * test mode writes, refused settings, and train losses and weights of two
 * runs compared.
 * Include after test.h: the checks record failures with CHECK.
 * defines: hfe_write_config, hfe_utrain, hfe_check_results,
 *          hfe_train_then_test, hfe_read_sst2, hfe_dev_metric, hfe_check_refused, hfe_check_same_losses,
 *          hfe_check_two_ranks. */
#ifndef UTRAIN_TEST_HF_E2E_H
#define UTRAIN_TEST_HF_E2E_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "utrain/base.h"
#include "utrain/io.h"

/* DIR/NAME.yml: experiment NAME, model MODEL from tests/parity/fixtures/FIXTURE
 * (then the model lines EXTRA), sst2_sample with max_len, EPOCHS of batches of
 * 16 evaluated and saved each epoch, AdamW lr 2e-3 with a linear schedule */
static inline void hfe_write_config(const char *dir, const char *name, const char *model, const char *fixture,
                                    const char *extra, int max_len, int epochs) {
    char file[64];
    snprintf(file, sizeof file, "%s.yml", name);
    FILE *f = fopen(tp_path(dir, file), "w");
    UT_ASSERT(f);
    fprintf(f, "experiment_name: %s\noutput_dir: %s/runs\nseed: 3\n"
               "model:\n  name: %s\n  pretrained: tests/parity/fixtures/%s\n%s"
               "data:\n  name: tsv_text\n  train_path: data/sst2_sample/train.tsv\n"
               "  dev_path: data/sst2_sample/dev.tsv\n  test_path: data/sst2_sample/test.tsv\n  max_len: %d\n"
               "train:\n  epochs: %d\n  batch_size: 16\n  log_interval: 1\n  eval_strategy: epoch\n"
               "  save_strategy: epoch\n  best_metric: dev/accuracy\n"
               "optim:\n  name: adamw\n  lr: 2.0e-3\n  weight_decay: 0.01\n  schedule: linear\n",
            name, dir, model, fixture, extra, max_len, epochs);
    fclose(f);
}

/* utrain CMD ARG with --set values (NULL-terminated) and --nproc; output in DIR/OUT */
static inline int hfe_utrain(const char *dir, const char *cmd, const char *arg, const char *out,
                             const char *const *sets, const char *nproc) {
    const char *argv[24] = {cmd, arg};
    int n = 2;
    for (int i = 0; sets && sets[i] && n < 18; i++) argv[n++] = "--set", argv[n++] = sets[i];
    if (nproc) argv[n++] = "--nproc", argv[n++] = nproc;
    argv[n] = NULL;
    return tp_run_shown(argv, tp_path(dir, out), 0, NULL);
}

/* test mode's files in RUN_DIR: dev and test results of 60 examples with
 * accuracy and loss, predictions with a header and 60 rows */
static inline void hfe_check_results(const char *run_dir, const char *label) {
    const char *splits[2] = {"dev", "test"};
    for (int i = 0; i < 2; i++) {
        char file[64];
        snprintf(file, sizeof file, "%s_results.json", splits[i]);
        char *s = tp_slurp(tp_path(run_dir, file));
        CHECK(s && strstr(s, "\"examples\": 60") && strstr(s, "\"accuracy\"") && strstr(s, "\"loss\""), "%s %s: %s",
              label, file, s);
        free(s);
        snprintf(file, sizeof file, "%s_predictions.tsv", splits[i]);
        CHECK(tp_count_lines(tp_path(run_dir, file)) == 61, "%s %s: header and 60 rows", label, file);
    }
}

/* utrain train DIR/NAME.yml (its output naming model NAME), then utrain test
 * of DIR/runs/NAME writing hfe_check_results' files */
static inline void hfe_train_then_test(const char *dir, const char *name) {
    char yml[64], run[1024];
    snprintf(yml, sizeof yml, "%s.yml", name);
    CHECK(hfe_utrain(dir, "train", tp_path(dir, yml), "train.out", NULL, NULL) == 0, "train");
    snprintf(run, sizeof run, "%s/runs/%s", dir, name);
    CHECK(hfe_utrain(dir, "test", run, "test.out", NULL, NULL) == 0, "test");
    hfe_check_results(run, name);
    char *s = tp_slurp(tp_path(dir, "train.out")), want[80];
    snprintf(want, sizeof want, "Model = %s", name);
    CHECK(s && strstr(s, want), "train output: %s", s);
    free(s);
}

/* data/sst2_sample/SPLIT.tsv's sentences and labels, in file order, into
 * text and label (at most 256; the arrays are static, overwritten by the
 * next call); their count, 0 with a failed check when the file is missing */
static inline int hfe_read_sst2(const char *split, char (**text)[256], int **label) {
    static char texts[256][256];
    static int labels[256];
    char in[128], line[512];
    snprintf(in, sizeof in, "data/sst2_sample/%s.tsv", split);
    FILE *f = fopen(in, "r");
    CHECK(f, "%s", in);
    *text = texts, *label = labels;
    if (!f) return 0;
    int n = 0;
    while (fgets(line, sizeof line, f) && n < 256) {
        char *tab = strrchr(line, '\t');
        if (!tab || !strncmp(line, "sentence\t", 9)) continue;
        *tab = 0;
        snprintf(texts[n], sizeof texts[n], "%s", line);
        labels[n++] = atoi(tab + 1);
    }
    fclose(f);
    return n;
}

/* the dev line of STEP in a metrics.jsonl: its KEY (NaN without one) */
static inline double hfe_dev_metric(const char *metrics, int step, const char *key) {
    char *s = tp_slurp(metrics), want[64];
    snprintf(want, sizeof want, "{\"step\": %d, ", step);
    double v = NAN;
    for (char *line = s ? strstr(s, want) : NULL; line && isnan(v); line = strstr(line + 1, want)) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        if (strstr(line, "\"split\": \"dev\"")) v = tp_json_number(line, key);
        if (end) *end = '\n';
    }
    free(s);
    return v;
}

/* train DIR/YML with each cases[i][0] set: exit 1 and cases[i][1] in the output */
static inline void hfe_check_refused(const char *dir, const char *yml, const char *const (*cases)[2], int n) {
    for (int i = 0; i < n; i++) {
        const char *argv[] = {"train", tp_path(dir, yml), "--set", "experiment_name=refused", "--set",
                              cases[i][0], NULL};
        CHECK(tp_run(argv, tp_path(dir, "refused.out")) == 1, "%s: exit 1", cases[i][0]);
        char *s = tp_slurp(tp_path(dir, "refused.out"));
        CHECK(s && strstr(s, cases[i][1]), "%s: %s", cases[i][0], s);
        free(s);
    }
}

/* the train losses of two metrics.jsonl files at steps first, first + stride,
 * ... up to last: within 1e-5 relative */
static inline void hfe_check_same_losses(const char *ma, const char *mb, int first, int last, int stride,
                                         const char *label) {
    for (int step = first; step <= last; step += stride) {
        char a[64] = "", b[64] = "";
        bool ok = tp_loss_at(ma, "train", step, a, sizeof a) && tp_loss_at(mb, "train", step, b, sizeof b);
        CHECK(ok && fabs(atof(a) - atof(b)) <= 1e-5 * fabs(atof(a)), "%s step %d: loss %s vs %s", label, step, a,
              b);
    }
}

/* The "model." tensors of two checkpoints within 1e-5 relative (L2), those
 * whose names contain skip aside; returns how many were compared. */
static inline int hfe_compare_weights(const char *ca, const char *cb, const char *skip, const char *label) {
    char err[512];
    ut_st_file *a = ut_st_open(ca, err, sizeof err), *b = a ? ut_st_open(cb, err, sizeof err) : NULL;
    CHECK(a && b, "%s", err);
    int compared = 0;
    for (int i = 0; a && b && i < ut_st_count(a); i++) {
        const char *name = ut_st_name(a, i);
        if (strncmp(name, "model.", 6) || strstr(name, skip)) continue;
        const ut_st_tensor *x = ut_st_get(a, name), *y = ut_st_get(b, name);
        CHECK(y && y->nbytes == x->nbytes, "%s", name);
        if (!y || y->nbytes != x->nbytes) continue;
        double d2 = 0, n2 = 0;
        for (int64_t k = 0; k < ut_st_numel(x); k++) {
            double u = ((const float *)x->data)[k], v = ((const float *)y->data)[k];
            d2 += (u - v) * (u - v);
            n2 += u * u;
        }
        CHECK(sqrt(d2) <= 1e-5 * sqrt(n2), "%s %s: relative difference %g", label, name,
              sqrt(d2 / (n2 > 0 ? n2 : 1)));
        compared++;
    }
    if (a) ut_st_close(a);
    if (b) ut_st_close(b);
    return compared;
}

/* STRATEGY (ddp, zero3) on 2 ranks x 8 examples of DIR/NAME.yml against the
 * one-process run DIR/runs/NAME of 16: the same train losses at steps 1, 8,
 * 15 and the same weights at step 15 (names containing skip aside: a key
 * bias's gradient is rounding noise, which AdamW scales up), want tensors
 * compared. The config turns dropout off: each rank draws its own masks. */
static inline void hfe_check_two_ranks(const char *dir, const char *name, const char *strategy, const char *skip,
                                       int want) {
    char yml[64], exp[64], strat[64], run[128], out[64], mine[128], ckpt[256];
    snprintf(yml, sizeof yml, "%s.yml", name);
    snprintf(exp, sizeof exp, "experiment_name=%s_%s", name, strategy);
    snprintf(strat, sizeof strat, "dist.strategy=%s", strategy);
    snprintf(out, sizeof out, "%s.out", strategy);
    const char *sets[] = {exp, "train.batch_size=8", strat, NULL};
    CHECK(hfe_utrain(dir, "train", tp_path(dir, yml), out, sets, "2") == 0, "%s on 2 ranks", strategy);
    snprintf(run, sizeof run, "runs/%s_%s/metrics.jsonl", name, strategy);
    snprintf(mine, sizeof mine, "runs/%s/metrics.jsonl", name);
    hfe_check_same_losses(tp_path(dir, mine), tp_path(dir, run), 1, 15, 7, strategy);
    snprintf(run, sizeof run, "runs/%s_%s/checkpoints/step_00000015.safetensors", name, strategy);
    snprintf(mine, sizeof mine, "runs/%s/checkpoints/step_00000015.safetensors", name);
    snprintf(ckpt, sizeof ckpt, "%s", tp_path(dir, mine));
    int compared = hfe_compare_weights(ckpt, tp_path(dir, run), skip, strategy);
    CHECK(compared == want, "%s: %d tensors compared", strategy, compared);
}
#endif
