/* End to end through the `utrain` program: test mode's predictions files
 * (values against the results, one rank against two), train.metrics'
 * classification scores against the predictions (and refused where the data
 * cannot give them), a fraction of epochs, unlabeled GLUE test
 * files, one checkpoint per epoch by default, and what a resumed run writes
 * (epoch table, TensorBoard, log lines); the progress display under --nproc. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "test.h"

static char tmp[256];

/* utrain CMD configs/sst2_bow.yml with output_dir in tmp and up to 10 more
 * --set values; stdout and stderr into tmp/NAME.out, shown if the exit code
 * is not expect. */
static int run_sst2x(const char *cmd, const char *name, const char *const *sets, const char *nproc, int expect) {
    char outdir[400], exp[128];
    snprintf(outdir, sizeof outdir, "output_dir=%s/runs", tmp);
    snprintf(exp, sizeof exp, "experiment_name=%s", name);
    const char *argv[32] = {cmd, "configs/sst2_bow.yml", "--set", outdir, "--set", exp};
    int n = 6;
    for (int i = 0; sets && sets[i] && n < 26; i++) argv[n++] = "--set", argv[n++] = sets[i];
    if (nproc) argv[n++] = "--nproc", argv[n++] = nproc;
    argv[n] = NULL;
    char out[400];
    snprintf(out, sizeof out, "%s/%s.out", tmp, name);
    char label[200];
    snprintf(label, sizeof label, "utrain %s %s", cmd, name);
    return tp_run_shown(argv, out, expect, label);
}

static int run_sst2(const char *cmd, const char *name, const char *const *sets, const char *nproc) {
    return run_sst2x(cmd, name, sets, nproc, 0);
}

static char *run_dir(const char *name) {
    static char d[512];
    snprintf(d, sizeof d, "%s/runs/%s", tmp, name);
    return d;
}

/* The labels of a labeled TSV in file order (column after the tab). */
static int read_labels(const char *path, int *labels, int max) {
    char *s = tp_slurp(path);
    int k = 0;
    for (char *line = s ? strchr(s, '\n') : NULL; line && line[1] && k < max; line = strchr(line + 1, '\n'))
        labels[k++] = atoi(strchr(line + 1, '\t') + 1);
    free(s);
    return k;
}

typedef struct {
    long long index;
    int pred;
    double prob[2];
} pred_row;

/* Rows of a two-class predictions file; -1 if the header is not as documented. */
static int read_predictions(const char *path, pred_row *rows, int max) {
    char *s = tp_slurp(path);
    if (!s || strncmp(s, "index\tprediction\tprob_0\tprob_1\n", 31)) {
        free(s);
        return -1;
    }
    int k = 0;
    for (char *p = s + 31; *p && k < max; k++) {
        pred_row *r = &rows[k];
        if (sscanf(p, "%lld\t%d\t%lf\t%lf", &r->index, &r->pred, &r->prob[0], &r->prob[1]) != 4) break;
        p = strchr(p, '\n');
        if (!p) break;
        p++;
    }
    free(s);
    return k;
}

static int count_checkpoints(const char *name) {
    int n = 0;
    for (int s = 1; s <= 200; s++) {
        char f[64];
        snprintf(f, sizeof f, "checkpoints/step_%08d.safetensors", s);
        n += access(tp_path(run_dir(name), f), R_OK) == 0;
    }
    return n;
}

/* The 60 labels of data/sst2_sample/SPLIT.tsv and the 60 rows of run
 * NAME's SPLIT_predictions.tsv (at most 100 each); the rows read of both */
static int read_split(const char *name, const char *split, int *labels, pred_row *rows) {
    char tsv[64], pf[64];
    snprintf(tsv, sizeof tsv, "data/sst2_sample/%s.tsv", split);
    snprintf(pf, sizeof pf, "%s_predictions.tsv", split);
    int nl = read_labels(tsv, labels, 100), np = read_predictions(tp_path(run_dir(name), pf), rows, 100);
    CHECK(nl == 60 && np == 60, "%s: %d labels, %d predictions", split, nl, np);
    return nl < np ? nl : np;
}

/* ---- tests ---- */
/* 3 epochs of 15 steps with the defaults leave 3 checkpoints; test mode
 * writes predictions that agree with the accuracy it reports. */
static void test_epoch_checkpoints_and_predictions(void) {
    CHECK(run_sst2("train", "base", (const char *[]){"train.epochs=3", NULL}, NULL) == 0, "train");
    CHECK(count_checkpoints("base") == 3, "%d checkpoints after 3 epochs", count_checkpoints("base"));
    for (int s = 15; s <= 45; s += 15) {
        char f[64];
        snprintf(f, sizeof f, "checkpoints/step_%08d.safetensors", s);
        CHECK(access(tp_path(run_dir("base"), f), R_OK) == 0, "%s", f);
    }
    CHECK(run_sst2("test", "base", NULL, NULL) == 0, "test");
    const char *split[2] = {"dev", "test"};
    for (int i = 0; i < 2; i++) {
        char res[64], pf[64];
        snprintf(res, sizeof res, "%s_results.json", split[i]);
        snprintf(pf, sizeof pf, "%s_predictions.tsv", split[i]);
        int labels[100];
        pred_row rows[100];
        int n = read_split("base", split[i], labels, rows), hits = 0;
        for (int k = 0; k < n; k++) {
            pred_row *r = &rows[k];
            CHECK(r->index == k, "%s row %d: index %lld", split[i], k, r->index);
            CHECK_NEAR(r->prob[0] + r->prob[1], 1.0, 2e-6);
            CHECK(r->pred == (r->prob[1] > r->prob[0]), "%s row %d: prediction %d, probabilities %g %g", split[i],
                  k, r->pred, r->prob[0], r->prob[1]);
            hits += r->pred == labels[k];
        }
        char *s = tp_slurp(tp_path(run_dir("base"), res));
        double acc = tp_json_number(s, "accuracy");
        CHECK_NEAR(acc, (double)hits / 60.0, 1e-6);
        CHECK(s && strstr(s, "\"predictions\": \"") && strstr(s, pf), "%s", s);
        free(s);
    }
}

/* The two-class scores from the predictions file and the labels, by their
 * two-class formulas (src/train/classmetrics.c computes them from the
 * confusion matrix by the general ones) */
typedef struct {
    double precision, recall, f1, f1_macro, f1_weighted, mcc;
} two_class;

static two_class scores_of(const pred_row *rows, const int *labels, int n) {
    double tp = 0, fp = 0, fn = 0, tn = 0;
    for (int k = 0; k < n; k++) {
        bool p = rows[k].pred == 1, y = labels[k] == 1;
        tp += p && y, fp += p && !y, fn += !p && y, tn += !p && !y;
    }
    two_class s = {.precision = tp / (tp + fp), .recall = tp / (tp + fn)};
    s.f1 = 2 * s.precision * s.recall / (s.precision + s.recall);
    double f1_neg = 2 * tn / (2 * tn + fn + fp);
    s.f1_macro = (s.f1 + f1_neg) / 2;
    s.f1_weighted = (s.f1 * (tp + fn) + f1_neg * (tn + fp)) / n;
    s.mcc = (tp * tn - fp * fn) / sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn));
    return s;
}

/* train.metrics and a best metric from the confusion matrix: the scores in
 * the log, metrics.jsonl and the results files, equal to the predictions'
 * (two epochs: a model that still errs both ways) */
static void test_class_metrics(void) {
    const char *const sets[] = {"train.epochs=2", "train.metrics=precision, recall,f1,f1_macro,f1_weighted",
                                "train.best_metric=dev/matthews_correlation", NULL};
    CHECK(run_sst2("train", "cls", sets, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "cls.out"));
    CHECK(s && strstr(s, "best dev/matthews_correlation ") && strstr(s, " f1_weighted ") &&
              strstr(s, "dev/matthews_correlation"), "%s", s ? s : "");
    free(s);
    s = tp_slurp(tp_path(run_dir("cls"), "metrics.jsonl"));
    CHECK(s && strstr(s, "\"split\": \"dev\", \"loss\": ") && strstr(s, "\"precision\": ") &&
              strstr(s, "\"f1\": ") && strstr(s, "\"matthews_correlation\": "), "%s", s ? s : "");
    free(s);
    CHECK(run_sst2("test", "cls", sets, NULL) == 0, "test");
    const char *split[2] = {"dev", "test"};
    for (int i = 0; i < 2; i++) {
        char res[64];
        snprintf(res, sizeof res, "%s_results.json", split[i]);
        int labels[100];
        pred_row rows[100];
        if (read_split("cls", split[i], labels, rows) != 60) continue;
        two_class want = scores_of(rows, labels, 60);
        CHECK(i || (want.precision < 1 && want.recall < 1), "dev: the model errs both ways (precision %g, recall %g)",
              want.precision, want.recall);
        s = tp_slurp(tp_path(run_dir("cls"), res));
        CHECK_NEAR(tp_json_number(s, "precision"), want.precision, 1e-8);
        CHECK_NEAR(tp_json_number(s, "recall"), want.recall, 1e-8);
        CHECK_NEAR(tp_json_number(s, "f1"), want.f1, 1e-8);
        CHECK_NEAR(tp_json_number(s, "f1_macro"), want.f1_macro, 1e-8);
        CHECK_NEAR(tp_json_number(s, "f1_weighted"), want.f1_weighted, 1e-8);
        CHECK_NEAR(tp_json_number(s, "matthews_correlation"), want.mcc, 1e-8);
        free(s);
    }
}

/* Scores the data cannot give are refused before training starts: a
 * two-class score of three classes, any of them on language-model data, a
 * name utrain does not know */
static void test_class_metrics_refused(void) {
    const char *three = tp_path(tmp, "three.tsv");
    FILE *f = fopen(three, "w");
    fprintf(f, "sentence\tlabel\n");
    for (int k = 0; k < 30; k++) fprintf(f, "film number %d\t%d\n", k, k % 3);
    fclose(f);
    char train[600], dev[600];
    snprintf(train, sizeof train, "data.train_path=%s", three);
    snprintf(dev, sizeof dev, "data.dev_path=%s", three);
    CHECK(run_sst2x("train", "three", (const char *[]){train, dev, "train.metrics=f1_macro,recall", NULL}, NULL, 1) ==
              1, "recall of three classes: exit 1");
    char *s = tp_slurp(tp_path(tmp, "three.out"));
    CHECK(s && strstr(s, "train.metrics: recall is the positive class's (label 1) score of a two-class task, and "
                         "the data (") && strstr(s, "has 3 classes; write f1_macro or f1_weighted"), "%s", s ? s : "");
    CHECK(s && !strstr(s, "step "), "trained before refusing: %s", s ? s : "");
    free(s);
    CHECK(run_sst2x("train", "three2", (const char *[]){train, dev, "train.metrics=f1_macro",
                    "train.best_metric=dev/f1", NULL}, NULL, 1) == 1, "best dev/f1 of three classes: exit 1");
    s = tp_slurp(tp_path(tmp, "three2.out"));
    CHECK(s && strstr(s, "train.best_metric: f1 is the positive class's"), "%s", s ? s : "");
    free(s);
    CHECK(run_sst2x("train", "three4", (const char *[]){train, dev, "train.metrics=precision",
                    "train.best_metric=dev/f1_macro", NULL}, NULL, 1) == 1, "precision of three classes: exit 1");
    s = tp_slurp(tp_path(tmp, "three4.out"));
    CHECK(s && strstr(s, "train.metrics: precision is the positive class's"), "%s", s ? s : "");
    free(s);
    CHECK(run_sst2x("train", "three3", (const char *[]){train, dev, "train.metrics=f1_weighted,matthews_correlation",
                    "train.epochs=1", NULL}, NULL, 0) == 0, "averaged scores of three classes");
    s = tp_slurp(tp_path(tmp, "three3.out"));
    CHECK(s && strstr(s, " f1_weighted ") && strstr(s, " matthews_correlation "), "%s", s ? s : "");
    free(s);
    /* a token file (llm.c's layout: 256 int32 of header, then uint16 ids) */
    const char *bin = tp_path(tmp, "tokens.bin");
    f = fopen(bin, "wb");
    int32_t h[256] = {20240520, 1, 4096};
    fwrite(h, sizeof h, 1, f);
    for (int k = 0; k < 4096; k++) fputc(k % 200, f), fputc(0, f);
    fclose(f);
    char outdir[400], tp[600];
    snprintf(outdir, sizeof outdir, "output_dir=%s/runs", tmp);
    snprintf(tp, sizeof tp, "data.train_path=%s", bin);
    const char *argv[] = {"train", "configs/gpt2_kjv.yml", "--set", outdir, "--set", tp, "--set", "data.dev_path=",
                          "--set", "data.test_path=", "--set", "train.metrics=matthews_correlation", NULL};
    char out[400];
    snprintf(out, sizeof out, "%s/lm.out", tmp);
    CHECK(tp_run_shown(argv, out, 1, "utrain train gpt2 tokens") == 1, "matthews_correlation on tokens: exit 1");
    s = tp_slurp(out);
    CHECK(s && strstr(s, "train.metrics: matthews_correlation scores a classifier's predictions against labels, and "
                         "the data (") && strstr(s, "has no classes (language-model data"), "%s", s ? s : "");
    free(s);
    /* and test mode checks the same */
    CHECK(run_sst2x("test", "cls", (const char *[]){"train.metrics=f1,f3", NULL}, NULL, 1) == 1, "f3: exit 1");
    s = tp_slurp(tp_path(tmp, "cls.out"));
    CHECK(s && strstr(s, "train.metrics: 'f3' is not a metric utrain computes (did you mean f1?)"), "%s", s ? s : "");
    free(s);
}

/* 2.5 epochs (transformers' num_train_epochs: 2.5) of 15 steps train
 * ceil(37.5) = 38 steps: two whole epochs, then 8 steps of the third,
 * whose end is evaluated too (eval_strategy epoch, as the Trainer's epoch
 * end after its last step); a resumed run that has nothing left to train
 * does not evaluate again */
static void test_fraction_of_epochs(void) {
    CHECK(run_sst2("train", "frac", (const char *[]){"train.epochs=2.5", NULL}, NULL) == 0, "train 2.5 epochs");
    char *s = tp_slurp(tp_path(tmp, "frac.out"));
    CHECK(s && strstr(s, "  Num epochs = 2.5\n") && strstr(s, "  Total optimization steps = 38\n") &&
              strstr(s, "eval  step 15  dev:") && strstr(s, "eval  step 30  dev:") &&
              strstr(s, "eval  step 38  dev:") && strstr(s, "Training done: 38 steps") &&
              strstr(s, "\n2      ") && strstr(s, "\n2.53   "), "%s", s ? s : ""); /* the partial epoch's row */
    free(s);
    CHECK(run_sst2("train", "frac", (const char *[]){"train.epochs=2.5", "continue_training=true", NULL}, NULL) == 0,
          "again, finished");
    s = tp_slurp(tp_path(tmp, "frac.out"));
    CHECK(s && !strstr(s, "eval  step"), "a finished run evaluated again: %s", s ? s : "");
    free(s);
    s = tp_slurp(tp_path(run_dir("frac"), "train_results.json"));
    CHECK_NEAR(tp_json_number(s, "epoch"), 38.0 / 15.0, 1e-8);
    free(s);
    CHECK(count_checkpoints("frac") == 3 &&
              access(tp_path(run_dir("frac"), "checkpoints/step_00000038.safetensors"), R_OK) == 0,
          "%d checkpoints, the last at step 38", count_checkpoints("frac"));
}

/* Intervals as fractions of the run's steps (transformers' logging_steps,
 * eval_steps, save_steps under 1): 2.5 epochs are 38 steps, so 0.25 logs
 * every ceil(9.5) = 10 steps, 0.3 evaluates every ceil(11.4) = 12, 0.5 saves
 * every 19 */
static void test_fraction_intervals(void) {
    CHECK(run_sst2("train", "fracint", (const char *[]){"train.epochs=2.5", "train.log_steps_fraction=0.25",
                                                        "train.eval_steps_fraction=0.3", "train.save_steps_fraction=0.5",
                                                        "train.eval_strategy=steps", "train.save_strategy=steps",
                                                        NULL}, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "fracint.out"));
    CHECK(s && strstr(s, "step 10/38 ") && strstr(s, "step 30/38 ") && !strstr(s, "step 15/38 ") &&
              strstr(s, "eval  step 12  dev:") && strstr(s, "eval  step 24  dev:") && strstr(s, "eval  step 36  dev:") &&
              !strstr(s, "eval  step 15  dev:"), "%s", s ? s : "");
    free(s);
    /* every 19 steps, besides the best evaluation's (steps 12, 24, 36 improved) */
    CHECK(count_checkpoints("fracint") == 5 &&
              access(tp_path(run_dir("fracint"), "checkpoints/step_00000019.safetensors"), R_OK) == 0 &&
              access(tp_path(run_dir("fracint"), "checkpoints/step_00000038.safetensors"), R_OK) == 0 &&
              access(tp_path(run_dir("fracint"), "checkpoints/step_00000036.safetensors"), R_OK) == 0,
          "%d checkpoints, at steps 19 and 38 and the best evaluations'", count_checkpoints("fracint"));
}

/* data.max_train_samples / max_eval_samples / max_predict_samples (the
 * example scripts' max_*_samples): the first N examples of each split */
static void test_max_samples(void) {
    CHECK(run_sst2("train", "maxs", (const char *[]){"train.epochs=1", "data.max_train_samples=50",
                                                     "data.max_eval_samples=20", "data.max_predict_samples=7",
                                                     "train.eval_strategy=epoch", NULL}, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "maxs.out"));
    CHECK(s && strstr(s, "Num examples = 50") && strstr(s, "step 4/4 "), "%s", s ? s : "");
    free(s);
    const char *argv[] = {"test", run_dir("maxs"), NULL};
    CHECK(tp_run_shown(argv, tp_path(tmp, "maxs_test.out"), 0, "utrain test maxs") == 0, "test mode");
    s = tp_slurp(tp_path(run_dir("maxs"), "dev_results.json"));
    CHECK(s && strstr(s, "\"examples\": 20"), "dev: %s", s ? s : "");
    free(s);
    s = tp_slurp(tp_path(run_dir("maxs"), "test_results.json"));
    CHECK(s && strstr(s, "\"examples\": 7"), "test: %s", s ? s : "");
    free(s);
    CHECK(tp_count_lines(tp_path(run_dir("maxs"), "test_predictions.tsv")) == 8, "a header and 7 predictions");
}

/* data.dev_fraction: test mode carves the same dev set from the train file
 * as training did (the last 20%: 48 of 240), reading the run's vocabulary
 * back (it is not rebuilt: the file is as training wrote it) */
static void test_carved_dev_set(void) {
    CHECK(run_sst2("train", "carved", (const char *[]){"train.epochs=1", "data.dev_path=", "data.dev_fraction=0.2",
                                                       "train.eval_strategy=epoch", NULL}, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "carved.out"));
    CHECK(s && strstr(s, "Num examples = 192"), "%s", s ? s : "");
    free(s);
    char *vocab = tp_slurp(tp_path(run_dir("carved"), "vocab.txt"));
    const char *argv[] = {"test", run_dir("carved"), NULL};
    CHECK(tp_run_shown(argv, tp_path(tmp, "carved_test.out"), 0, "utrain test carved") == 0, "test mode");
    s = tp_slurp(tp_path(run_dir("carved"), "dev_results.json"));
    CHECK(s && strstr(s, "\"examples\": 48"), "dev: %s", s ? s : "");
    free(s);
    CHECK(tp_count_lines(tp_path(run_dir("carved"), "dev_predictions.tsv")) == 49, "a header and 48 predictions");
    char *after = tp_slurp(tp_path(run_dir("carved"), "vocab.txt"));
    CHECK(vocab && after && !strcmp(vocab, after), "the run's vocabulary changed");
    free(vocab);
    free(after);
}

/* The GLUE test layout (index<TAB>sentence): predictions with the file's
 * ids, results without loss or accuracy; the same predictions as the labeled
 * file with the same sentences. Also the header-named column orders. */
static void test_unlabeled_test_file(void) {
    const char *glue = tp_path(tmp, "glue_test.tsv");
    FILE *f = fopen(glue, "w");
    char *src = tp_slurp("data/sst2_sample/test.tsv");
    fprintf(f, "index\tsentence\n");
    int k = 0;
    for (char *line = src ? strchr(src, '\n') + 1 : NULL; line && *line; k++) {
        char *tab = strchr(line, '\t'), *nl = strchr(line, '\n');
        fprintf(f, "%d\t%.*s\n", 1000 + 3 * k, (int)(tab - line), line);
        line = nl ? nl + 1 : NULL;
    }
    free(src);
    fclose(f);
    char set[600];
    snprintf(set, sizeof set, "data.test_path=%s", glue);
    CHECK(run_sst2("test", "base", (const char *[]){set, NULL}, NULL) == 0, "test with an unlabeled file");
    char *s = tp_slurp(tp_path(run_dir("base"), "test_results.json"));
    CHECK(s && strstr(s, "\"labeled\": false") && strstr(s, "no label column") && !strstr(s, "\"loss\"") &&
              !strstr(s, "\"accuracy\"") && strstr(s, "\"examples\": 60"), "%s", s);
    free(s);
    s = tp_slurp(tp_path(tmp, "base.out"));
    CHECK(s && strstr(s, "test (60 examples):  no labels: predictions only  -> test_predictions.tsv"), "%s", s);
    free(s);
    pred_row rows[100], ref[100];
    int n = read_predictions(tp_path(run_dir("base"), "test_predictions.tsv"), rows, 100);
    CHECK(n == 60 && k == 60, "%d predictions of %d", n, k);
    /* the labeled file again, for the reference predictions */
    CHECK(run_sst2("test", "base", NULL, NULL) == 0, "test, labeled");
    CHECK(read_predictions(tp_path(run_dir("base"), "test_predictions.tsv"), ref, 100) == 60, "reference");
    for (int i = 0; i < n; i++)
        CHECK(rows[i].index == 1000 + 3 * i && rows[i].pred == ref[i].pred && rows[i].prob[0] == ref[i].prob[0],
              "row %d: %lld %d %g vs %d %g", i, rows[i].index, rows[i].pred, rows[i].prob[0], ref[i].pred,
              ref[i].prob[0]);
}

/* An unlabeled train or dev file cannot train: exit 1 naming the file. */
static void test_unlabeled_refused_for_training(void) {
    const char *glue = tp_path(tmp, "glue_dev.tsv");
    FILE *f = fopen(glue, "w");
    fprintf(f, "index\tsentence\n0\ta fine film .\n1\ta dull film .\n");
    fclose(f);
    const char *key[2] = {"data.dev_path", "data.train_path"};
    for (int i = 0; i < 2; i++) {
        char set[600], name[32];
        snprintf(set, sizeof set, "%s=%s", key[i], glue);
        snprintf(name, sizeof name, "refused%d", i);
        CHECK(run_sst2x("train", name, (const char *[]){set, NULL}, NULL, 1) == 1, "%s unlabeled: exit 1", key[i]);
        char *s = tp_slurp(tp_path(tmp, i ? "refused1.out" : "refused0.out"));
        CHECK(s && strstr(s, "glue_dev.tsv:1: no 'label' column") && strstr(s, "data.test_path"), "%s", s);
        free(s);
    }
}

/* Two ranks, a batch that does not divide the split: the same files. */
static void test_predictions_two_ranks(void) {
    char *one = tp_slurp(tp_path(run_dir("base"), "dev_predictions.tsv"));
    CHECK(run_sst2("test", "base", (const char *[]){"train.eval_batch_size=7", NULL}, "2") == 0, "--nproc 2");
    char *two = tp_slurp(tp_path(run_dir("base"), "dev_predictions.tsv"));
    CHECK(one && two && !strcmp(one, two), "1 rank and 2 ranks differ");
    free(one);
    free(two);
    char *s = tp_slurp(tp_path(run_dir("base"), "dev_results.json"));
    CHECK(s && strstr(s, "\"examples\": 60"), "%s", s);
    free(s);
    /* the confusion matrix summed over the ranks: the same scores */
    char *r1 = tp_slurp(tp_path(run_dir("cls"), "dev_results.json"));
    CHECK(run_sst2("test", "cls", (const char *[]){"train.eval_batch_size=7", "train.metrics=precision,recall,f1,"
                   "f1_macro,f1_weighted,matthews_correlation", NULL}, "2") == 0, "--nproc 2");
    char *r2 = tp_slurp(tp_path(run_dir("cls"), "dev_results.json"));
    const char *keys[] = {"accuracy", "precision", "recall", "f1", "f1_macro", "f1_weighted", "matthews_correlation"};
    for (int i = 0; i < 7; i++) {
        double a = tp_json_number(r1, keys[i]), b = tp_json_number(r2, keys[i]);
        CHECK(!isnan(a) && a == b, "%s: %g on one rank, %g on two", keys[i], a, b);
    }
    free(r1);
    free(r2);
}

/* train 2 epochs, resume to 4: the table starts at epoch 3 without a NaN row,
 * the step of the resume is evaluated (and sent to TensorBoard) once, and
 * every line of the log file starts with its timestamp. Also with evaluation
 * and saving by steps that fall on the epoch's end, and with drop_last (the
 * epoch ends short of the last examples). */
static void test_resume_outputs(void) {
    static const struct {
        const char *name, *sets[4];
        int steps_per_epoch;
    } cases[] = {
        {"resume", {NULL}, 15},
        {"resume_steps", {"train.eval_strategy=steps", "train.eval_interval=15", "train.save_strategy=steps",
                          "train.save_interval=15"}, 15},
        {"resume_drop", {"train.batch_size=7", "data.drop_last=true", NULL}, 34},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *name = cases[c].name, *const *x = cases[c].sets;
        int spe = cases[c].steps_per_epoch;
        const char *first[8] = {"train.epochs=2"}, *second[8] = {"train.epochs=4", "continue_training=true"};
        for (int k = 0; k < 4 && x[k]; k++) first[1 + k] = x[k], second[2 + k] = x[k];
        CHECK(run_sst2("train", name, first, NULL) == 0, "%s: 2 epochs", name);
        CHECK(run_sst2("train", name, second, NULL) == 0, "%s: resume to 4", name);
        char want[128], eval[64], out[600], cmd[1400];
        snprintf(want, sizeof want, "(step %d, epoch 2, 0 examples into the epoch)", 2 * spe);
        snprintf(eval, sizeof eval, "eval  step %d ", 2 * spe);
        snprintf(out, sizeof out, "%s/%s.out", tmp, name);
        char *s = tp_slurp(out);
        const char *shown = s ? s : "(no output)";
        CHECK(s && strstr(s, want), "%s: %s", name, shown);
        CHECK(s && !strstr(s, "nan") && !strstr(s, eval) && strstr(s, "\n3      0.") && !strstr(s, "\n2      "),
              "%s: %s", name, shown);
        free(s);
        snprintf(out, sizeof out, "%s/tb.out", tmp);
        snprintf(cmd, sizeof cmd, "python3 tests/tools/read_tfevents.py %s/tensorboard --tag dev/accuracy > %s",
                 run_dir(name), out);
        CHECK(system(cmd) == 0, "%s", cmd);
        s = tp_slurp(out);
        int at = 0, lines = 0;
        for (char *p = s; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
            lines++;
            at += atoi(p) == 2 * spe;
        }
        CHECK(at == 1 && lines == 4, "%s: dev/accuracy: %d points, %d at step %d:\n%s", name, lines, at, 2 * spe, s);
        free(s);
        s = tp_slurp(tp_path(run_dir(name), "logger_logs/training_0.log"));
        int bad = 0;
        for (char *p = s; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
            if (*p != '\n' && strncmp(p, "[20", 3)) bad++;
        CHECK(s && bad == 0, "%s: %d log lines without a timestamp", name, bad);
        snprintf(want, sizeof want, "] Training done: %d steps in ", 4 * spe);
        CHECK(s && strstr(s, want) && strstr(s, " s; best dev/accuracy "), "%s: end line split", name);
        free(s);
    }
}

/* --nproc 2 with progress auto and the output in a file: lines, no bar. */
static void test_progress_under_nproc(void) {
    CHECK(run_sst2("train", "nproc", (const char *[]){"train.epochs=1", "train.batch_size=8", "train.log_interval=5",
                                                      NULL}, "2") == 0, "train --nproc 2");
    char *s = tp_slurp(tp_path(tmp, "nproc.out"));
    CHECK(s && !strchr(s, '\r') && !strstr(s, "\033[K") && strstr(s, "step 15/15"), "%s", s);
    free(s);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-testmode")) return 1;
    RUN(test_epoch_checkpoints_and_predictions);
    RUN(test_class_metrics);
    RUN(test_class_metrics_refused);
    RUN(test_fraction_of_epochs);
    RUN(test_fraction_intervals);
    RUN(test_carved_dev_set);
    RUN(test_max_samples);
    RUN(test_unlabeled_test_file);
    RUN(test_unlabeled_refused_for_training);
    RUN(test_resume_outputs);
    /* the jobs under mpirun last: their environment turns LeakSanitizer off */
    tp_mpi_env(true);
    RUN(test_predictions_two_ranks);
    RUN(test_progress_under_nproc);
    return tp_finish(TEST_SUMMARY(), tmp);
}
