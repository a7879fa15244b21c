/* Multi-label classification end to end through the `utrain` program
 * (model.problem_type: multi_label_classification): pairs of reviews from
 * data/sst2_sample, each labeled with the list of what holds of it
 * ("first" when the first review is positive, "second" when the second
 * is, "both" when both are; an empty list when neither is). The tiny BERT
 * learns them (dev loss and micro F1); test mode's accuracy and F1 are the
 * ones its predictions file gives; 2 ranks give one process's results and
 * losses, and so do 2 pipeline stages; the export says
 * multi_label_classification with the labels' names and fine-tuning it
 * again needs no problem_type; the GPT-2 classifier trains on GoEmotions' own layout
 * (headerless, lists of integers, an id column); what cannot apply is
 * refused; the same files as JSON Lines and CSV train alike. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "hf_e2e.h"

static char tmp[256];
static const char *const kNames[3] = {"first", "second", "both"};
/* the model's outputs: the train file's names sorted */
static const int kColumn[3] = {1, 2, 0};
/* each dev and test example's labels: bit k for kNames[k] */
static unsigned g_truth[2][64];
static int g_rows[2];

/* tmp/ml_SPLIT.tsv (idx, sentence1, sentence2, labels) from data/sst2_sample's
 * SPLIT, each review paired with another; with goemotions, tmp/go_SPLIT.tsv
 * in GoEmotions' layout (no header: the pair as one text, the labels as
 * integers 0, 1, 2, an id); truth (may be NULL) gets the label sets */
static int write_split(const char *split, unsigned *truth, int max) {
    char (*text)[256];
    int *label, n = hfe_read_sst2(split, &text, &label);
    if (!n) return 0;
    char name[64];
    snprintf(name, sizeof name, "ml_%s.tsv", split);
    FILE *o = fopen(tp_path(tmp, name), "w");
    snprintf(name, sizeof name, "go_%s.tsv", split);
    FILE *g = fopen(tp_path(tmp, name), "w");
    snprintf(name, sizeof name, "ml_%s.jsonl", split);
    FILE *js = fopen(tp_path(tmp, name), "w");
    snprintf(name, sizeof name, "ml_%s.csv", split);
    FILE *cs = fopen(tp_path(tmp, name), "w");
    fprintf(cs, "idx,sentence1,sentence2,labels\r\n");
    fprintf(o, "idx\tsentence1\tsentence2\tlabels\n");
    for (int i = 0; i < n && i < max; i++) {
        int j = (i * 7 + 3) % n;
        unsigned set = (unsigned)(label[i] | label[j] << 1 | (label[i] & label[j]) << 2);
        if (truth) truth[i] = set;
        fprintf(o, "%d\t%s\t%s\t", i, text[i], text[j]);
        fprintf(g, "%s %s\t%s", text[i], text[j], set ? "" : "0");
        for (int k = 0, any = 0; k < 3; k++)
            if (set >> k & 1) {
                fprintf(o, "%s%s", any ? "," : "", kNames[k]);
                fprintf(g, "%s%d", any++ ? "," : "", k + 1);
            }
        fprintf(o, "\n");
        fprintf(g, "\tid%04d\n", i);
        /* the same as datasets' to_json and to_csv write it (the reviews hold no quotes) */
        fprintf(js, "{\"idx\": %d, \"sentence1\": \"%s\", \"sentence2\": \"%s\", \"labels\": [", i, text[i], text[j]);
        fprintf(cs, "%d,\"%s\",\"%s\",\"", i, text[i], text[j]);
        for (int k = 0, any = 0; k < 3; k++)
            if (set >> k & 1) {
                fprintf(js, "%s\"%s\"", any ? ", " : "", kNames[k]);
                fprintf(cs, "%s%s", any++ ? "," : "", kNames[k]);
            }
        fprintf(js, "]}\n");
        fprintf(cs, "\"\r\n");
    }
    fclose(o);
    fclose(g);
    fclose(js);
    fclose(cs);
    return n;
}

static void write_config(void) {
    write_split("train", NULL, 256);
    g_rows[0] = write_split("dev", g_truth[0], 64);
    g_rows[1] = write_split("test", g_truth[1], 64);
    FILE *f = fopen(tp_path(tmp, "ml.yml"), "w");
    fprintf(f, "experiment_name: ml\noutput_dir: %s/runs\nseed: 3\nmodel:\n  name: bert\n"
               "  pretrained: tests/parity/fixtures/hf_bert_tiny_base\n  problem_type: multi_label_classification\n"
               "  hidden_dropout_prob: 0\ndata:\n  name: tsv_text\n  tokenizer: tests/parity/fixtures/hf_bert_tiny\n"
               "  train_path: %s/ml_train.tsv\n  dev_path: %s/ml_dev.tsv\n  test_path: %s/ml_test.tsv\n"
               "  max_len: 48\ntrain:\n  epochs: 12\n  batch_size: 16\n  log_interval: 1\n  eval_strategy: epoch\n"
               "  save_strategy: epoch\n  save_total_limit: 2\n  metrics: f1, f1_macro, f1_weighted, precision, recall\n"
               "  best_metric: dev/f1\noptim:\n  name: adamw\n  lr: 5.0e-3\n  weight_decay: 0.01\n"
               "  schedule: linear\n", tmp, tmp, tmp, tmp);
    fclose(f);
}

/* the predictions file of split s (0 dev, 1 test) against its labels:
 * every label whose probability is above 0.5 listed, by name; the subset
 * accuracy and micro F1 they give into *acc, *f1 */
static void score_predictions(const char *run, int s, double *acc, double *f1) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s_predictions.tsv", run, s ? "test" : "dev");
    FILE *f = fopen(path, "r");
    char line[512];
    CHECK(f && fgets(line, sizeof line, f) && !strcmp(line, "index\tprediction\tprob_0\tprob_1\tprob_2\n"), "header: %s",
          line);
    int n = 0, exact = 0, tp = 0, fp = 0, fn = 0;
    while (f && fgets(line, sizeof line, f) && n < 64) {
        int id;
        char labels[64] = "";
        double p[3];
        char *tab = strchr(line, '\t'), *tab2 = tab ? strchr(tab + 1, '\t') : NULL;
        CHECK(tab && tab2 && sscanf(line, "%d", &id) == 1 && id == n &&
                  sscanf(tab2 + 1, "%lf\t%lf\t%lf", &p[0], &p[1], &p[2]) == 3, "row %d: %s", n, line);
        if (!tab || !tab2) break;
        snprintf(labels, sizeof labels, "%.*s", (int)(tab2 - tab - 1), tab + 1);
        unsigned got = 0;
        for (char *save = NULL, *t = strtok_r(labels, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            int k = 0;
            while (k < 3 && strcmp(t, kNames[k])) k++;
            CHECK(k < 3, "row %d: label '%s'", n, t);
            got |= 1u << k;
        }
        for (int k = 0; k < 3; k++) {
            bool on = got >> k & 1, truth = g_truth[s][n] >> k & 1;
            double q = p[kColumn[k]];
            CHECK(on == (q > 0.5), "row %d: %s listed %d with probability %g", n, kNames[k], on, q);
            tp += on && truth, fp += on && !truth, fn += !on && truth;
        }
        exact += got == g_truth[s][n];
        n++;
    }
    if (f) fclose(f);
    CHECK(n == g_rows[s] && n == 60, "%d rows of %d", n, g_rows[s]);
    *acc = (double)exact / n;
    *f1 = 2.0 * tp / (2.0 * tp + fp + fn);
}

/* BERT learns the label sets; test mode's scores are its predictions' */
static void test_train_and_test(void) {
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ml.yml"), "ml.out", NULL, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "ml.out"));
    CHECK(s && strstr(s, "dev/f1_macro") && strstr(s, "dev/accuracy") && strstr(s, "best dev/f1"), "%s", s);
    free(s);
    const char *metrics = tp_path(tmp, "runs/ml/metrics.jsonl");
    double first = hfe_dev_metric(metrics, 15, "loss"), last = hfe_dev_metric(metrics, 180, "loss"),
           f1 = hfe_dev_metric(metrics, 180, "f1");
    CHECK(first > 0.6 && last < 0.45 && f1 > 0.75, "dev binary cross-entropy %g at the first epoch, %g at the last; "
                                                  "micro F1 %g", first, last, f1);
    CHECK(isnan(hfe_dev_metric(metrics, 180, "perplexity")) && !isnan(hfe_dev_metric(metrics, 180, "f1_weighted")),
          "no perplexity for token inputs with label lists");
    CHECK(hfe_utrain(tmp, "test", tp_path(tmp, "runs/ml"), "ml.test.out", NULL, NULL) == 0, "test");
    for (int split = 0; split < 2; split++) {
        s = tp_slurp(tp_path(tmp, split ? "runs/ml/test_results.json" : "runs/ml/dev_results.json"));
        double acc, pf1;
        score_predictions(tp_path(tmp, "runs/ml"), split, &acc, &pf1);
        CHECK(s && strstr(s, "\"examples\": 60") && fabs(tp_json_number(s, "accuracy") - acc) < 1e-6 &&
                  fabs(tp_json_number(s, "f1") - pf1) < 1e-6,
              "%s: from the predictions accuracy %g, f1 %g; reported %s", split ? "test" : "dev", acc, pf1, s);
        free(s);
    }
}

/* the plan-mode directories in /tmp (utrain plan opens the data in one, and removes it) */
static int plan_dirs(void) {
    DIR *d = opendir("/tmp");
    int k = 0;
    for (struct dirent *e; d && (e = readdir(d));) k += !strncmp(e->d_name, "utrain-plan-", 12);
    if (d) closedir(d);
    return k;
}

/* utrain plan of the run: its data's label names go to a temporary directory, which it removes */
static void test_plan(void) {
    int before = plan_dirs();
    CHECK(hfe_utrain(tmp, "plan", tp_path(tmp, "ml.yml"), "ml_plan.out", NULL, NULL) == 0, "plan");
    CHECK(plan_dirs() == before, "utrain plan left %d directories in /tmp", plan_dirs() - before);
}

/* the train losses of runs/A and runs/B at steps 1, 4, 7 within 3e-4 relative
 * (later, Adam at 5e-3 makes the sums' rounding grow) */
static void same_early_losses(const char *a, const char *b, const char *label) {
    char ma[1024], mb[1024];
    snprintf(ma, sizeof ma, "%s/runs/%s/metrics.jsonl", tmp, a);
    snprintf(mb, sizeof mb, "%s/runs/%s/metrics.jsonl", tmp, b);
    for (int step = 1; step <= 7; step += 3) {
        char x[64] = "", y[64] = "";
        bool ok = tp_loss_at(ma, "train", step, x, sizeof x) && tp_loss_at(mb, "train", step, y, sizeof y);
        CHECK(ok && fabs(atof(x) - atof(y)) <= 3e-4 * atof(x), "%s step %d: loss %s on one process, %s", label, step, x,
              y);
    }
}

/* 2 ranks: test mode's counts summed over the ranks are one process's;
 * ddp 2 x 8 and 2 pipeline stages train as 1 x 16 */
static void test_two_ranks(void) {
    char *one = tp_slurp(tp_path(tmp, "runs/ml/test_results.json"));
    CHECK(hfe_utrain(tmp, "test", tp_path(tmp, "runs/ml"), "ml_test2.out", NULL, "2") == 0, "test on 2 ranks");
    char *two = tp_slurp(tp_path(tmp, "runs/ml/test_results.json"));
    const char *keys[5] = {"loss", "accuracy", "f1", "f1_macro", "recall"};
    for (int k = 0; k < 5; k++)
        CHECK(one && two && fabs(tp_json_number(one, keys[k]) - tp_json_number(two, keys[k])) <= 1e-6,
              "test %s: %g on one process, %g on 2 ranks", keys[k], tp_json_number(one, keys[k]),
              tp_json_number(two, keys[k]));
    free(one);
    free(two);
    const char *ddp[] = {"experiment_name=ml_ddp", "dist.strategy=ddp", "train.batch_size=8", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ml.yml"), "ml_ddp.out", ddp, "2") == 0, "ddp");
    same_early_losses("ml", "ml_ddp", "ddp 2 x 8");
    const char *pp[] = {"experiment_name=ml_pp", "dist.pipeline_parallel=2", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ml.yml"), "ml_pp.out", pp, "2") == 0, "2 pipeline stages");
    same_early_losses("ml", "ml_pp", "2 stages");
}

/* the same files as JSON Lines (train) and CSV (dev): the TSVs' run */
static void test_jsonl_and_csv(void) {
    char tr[600], dv[600];
    snprintf(tr, sizeof tr, "data.train_path=%s/ml_train.jsonl", tmp);
    snprintf(dv, sizeof dv, "data.dev_path=%s/ml_dev.csv", tmp);
    const char *sets[] = {"experiment_name=ml_json", tr, dv, NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ml.yml"), "ml_json.out", sets, NULL) == 0, "JSON Lines and CSV");
    hfe_check_same_losses(tp_path(tmp, "runs/ml/metrics.jsonl"), tp_path(tmp, "runs/ml_json/metrics.jsonl"), 1, 180, 30,
                          "JSON Lines");
    double a = hfe_dev_metric(tp_path(tmp, "runs/ml/metrics.jsonl"), 180, "f1"),
           b = hfe_dev_metric(tp_path(tmp, "runs/ml_json/metrics.jsonl"), 180, "f1");
    CHECK(a == b, "dev f1 %g from the TSV, %g from the CSV", a, b);
}

/* JSON arrays for labels with nothing saying the task (ml.yml without
 * problem_type; the base checkpoint has no labels): multi-label, as
 * run_classification infers it from a column of lists, the same run as
 * problem_type gives; the log says so; its export says
 * multi_label_classification; single_label_classification refuses them */
static void test_inferred_from_lists(void) {
    char *cfg = tp_slurp(tp_path(tmp, "ml.yml"));
    const char *drop = "  problem_type: multi_label_classification\n";
    char *at = cfg ? strstr(cfg, drop) : NULL;
    CHECK(at, "the config's problem_type line");
    if (!at) {
        free(cfg);
        return;
    }
    memmove(at, at + strlen(drop), strlen(at + strlen(drop)) + 1);
    FILE *f = fopen(tp_path(tmp, "ml_infer.yml"), "w");
    fputs(cfg, f);
    fclose(f);
    free(cfg);
    char tr[600];
    snprintf(tr, sizeof tr, "data.train_path=%s/ml_train.jsonl", tmp);
    const char *said[] = {"experiment_name=ml_said", tr, "train.epochs=1", NULL},
               *inferred[] = {"experiment_name=ml_inferred", tr, "train.epochs=1", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ml.yml"), "ml_said.out", said, NULL) == 0, "said");
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ml_infer.yml"), "ml_inferred.out", inferred, NULL) == 0, "inferred");
    char *s = tp_slurp(tp_path(tmp, "ml_inferred.out"));
    CHECK(s && strstr(s, "ml_train.jsonl: the labels are lists: a multi-label task"), "%s", s);
    free(s);
    hfe_check_same_losses(tp_path(tmp, "runs/ml_said/metrics.jsonl"), tp_path(tmp, "runs/ml_inferred/metrics.jsonl"), 1,
                          15, 1, "inferred multi-label");
    double a = hfe_dev_metric(tp_path(tmp, "runs/ml_said/metrics.jsonl"), 15, "f1"),
           b = hfe_dev_metric(tp_path(tmp, "runs/ml_inferred/metrics.jsonl"), 15, "f1");
    CHECK(!isnan(a) && a == b, "dev f1 %g vs %g", a, b);
    char hf[1024];
    snprintf(hf, sizeof hf, "%s", tp_path(tmp, "ml_inferred_hf"));
    CHECK(tp_run_shown((const char *[]){"export", tp_path(tmp, "runs/ml_inferred"), "--format", "hf", hf, NULL},
                       tp_path(tmp, "ml_inferred.export.out"), 0, NULL) == 0, "export");
    s = tp_slurp(tp_path(hf, "config.json"));
    CHECK(s && strstr(s, "\"problem_type\":\t\"multi_label_classification\""), "%s", s);
    free(s);
    const char *refused[][2] = {{"model.problem_type=single_label_classification", "model.problem_type: "
                                                                                   "multi_label_classification"}};
    const char *argv[] = {"train", tp_path(tmp, "ml_infer.yml"), "--set", tr, "--set", "experiment_name=ml_refused",
                          "--set", refused[0][0], NULL};
    CHECK(tp_run(argv, tp_path(tmp, "ml_refused.out")) == 1, "single_label_classification: exit 1");
    s = tp_slurp(tp_path(tmp, "ml_refused.out"));
    CHECK(s && strstr(s, refused[0][1]), "%s", s);
    free(s);
}

/* the export says multi_label_classification: a run from it needs no problem_type */
static void test_export_and_again(void) {
    char hf[1024], run[1024];
    snprintf(hf, sizeof hf, "%s", tp_path(tmp, "ml_hf"));
    snprintf(run, sizeof run, "%s", tp_path(tmp, "runs/ml"));
    CHECK(tp_run_shown((const char *[]){"export", run, "--format", "hf", hf, NULL}, tp_path(tmp, "ml.export.out"), 0,
                       NULL) == 0, "export");
    char *s = tp_slurp(tp_path(hf, "config.json"));
    CHECK(s && strstr(s, "\"problem_type\":\t\"multi_label_classification\"") &&
              strstr(s, "\"id2label\":\t{\n\t\t\"0\":\t\"both\",\n\t\t\"1\":\t\"first\",\n\t\t\"2\":\t\"second\"") &&
              strstr(s, "\"second\":\t2") && strstr(s, "BertForSequenceClassification"), "%s", s);
    free(s);
    char *cfg = tp_slurp(tp_path(tmp, "ml.yml"));
    const char *drop = "  problem_type: multi_label_classification\n";
    char *at = cfg ? strstr(cfg, drop) : NULL;
    CHECK(at, "the config's problem_type line");
    if (at) memmove(at, at + strlen(drop), strlen(at + strlen(drop)) + 1);
    FILE *f = fopen(tp_path(tmp, "ml_again.yml"), "w");
    fputs(cfg ? cfg : "", f);
    fclose(f);
    free(cfg);
    char pre[1100];
    snprintf(pre, sizeof pre, "model.pretrained=%s", hf);
    const char *sets[] = {"experiment_name=ml_again", pre, "train.epochs=1", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ml_again.yml"), "ml_again.out", sets, NULL) == 0, "again");
    double f1 = hfe_dev_metric(tp_path(tmp, "runs/ml_again/metrics.jsonl"), 15, "f1");
    CHECK(f1 > 0.75, "fine-tuned from the export (multi-label by its config.json): micro F1 %g", f1);
}

/* GoEmotions' layout (no header, integer lists, an id column) with the GPT-2 classifier */
static void test_goemotions_gpt2(void) {
    FILE *f = fopen(tp_path(tmp, "go.yml"), "w");
    fprintf(f, "experiment_name: go\noutput_dir: %s/runs\nseed: 3\nmodel:\n  name: gpt2\n"
               "  task: sequence_classification\n  problem_type: multi_label_classification\n  n_layer: 2\n"
               "  n_head: 2\n  n_embd: 32\n  block_size: 64\n  pad_token_id: 0\ndata:\n  name: tsv_text\n"
               "  tokenizer: tests/parity/fixtures/hf_gpt2_cls_tiny\n  train_path: %s/go_train.tsv\n"
               "  dev_path: %s/go_dev.tsv\n  max_len: 64\ntrain:\n  epochs: 2\n  batch_size: 16\n"
               "  eval_strategy: epoch\noptim:\n  name: adamw\n  lr: 1.0e-3\n", tmp, tmp, tmp);
    fclose(f);
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "go.yml"), "go.out", NULL, NULL) == 0, "gpt2 multi-label");
    char *s = tp_slurp(tp_path(tmp, "go.out"));
    CHECK(s && strstr(s, "Num examples = 240"), "%s", s);
    free(s);
    /* labels 0..3 (0: none of the three): four outputs */
    double loss = hfe_dev_metric(tp_path(tmp, "runs/go/metrics.jsonl"), 30, "loss"),
           acc = hfe_dev_metric(tp_path(tmp, "runs/go/metrics.jsonl"), 30, "accuracy");
    CHECK(isfinite(loss) && loss > 0 && loss < 0.75 && acc >= 0 && acc <= 1, "gpt2: dev loss %g, accuracy %g", loss,
          acc);
}

static void test_refused(void) {
    static const char *const cases[][2] = {
        {"train.metrics=matthews_correlation", "train.metrics: matthews_correlation is a single-label classifier's "
                                               "score"},
        {"train.label_smoothing=0.1", "train.label_smoothing: 0.1 smooths one class per example"},
        {"model.num_labels=1", "model.problem_type: multi_label_classification with model.num_labels 1"},
        {"model.num_labels=2", "model.num_labels 2: the train file"},
        {"model.problem_type=single_label_classification", "ml_train.tsv:3: empty label (with labels that are lists, "
                                                           "as elsewhere in the file, an example may have none: a "
                                                           "multi-label task"},
        {"train.best_metric=dev/pearson", "train.best_metric: pearson scores a regression's predictions"},
    };
    hfe_check_refused(tmp, "ml.yml", cases, (int)(sizeof cases / sizeof cases[0]));
    /* GoEmotions' integer lists read as one class each: the way to read them */
    const char *sets[] = {"experiment_name=refused", "model.problem_type=single_label_classification", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "go.yml"), "refused.out", sets, NULL) == 1, "exit 1");
    char *s = tp_slurp(tp_path(tmp, "refused.out"));
    CHECK(s && strstr(s, "go_train.tsv:1: no header, and the first line is an example of (text, a list of labels, an "
                         "id): a multi-label task's file in GoEmotions' layout: set model.problem_type: "
                         "multi_label_classification"), "%s", s);
    free(s);
    /* the word tokenizer's models classify one class an example; the causal LM classifies nothing */
    FILE *f = fopen(tp_path(tmp, "ml_word.yml"), "w");
    fprintf(f, "experiment_name: ml_word\noutput_dir: %s/runs\nmodel:\n  name: bow\n"
               "  problem_type: multi_label_classification\ndata:\n  name: tsv_text\n  train_path: %s/ml_train.tsv\n",
            tmp, tmp);
    fclose(f);
    CHECK(tp_run((const char *[]){"train", tp_path(tmp, "ml_word.yml"), NULL}, tp_path(tmp, "refused.out")) == 1,
          "exit 1");
    s = tp_slurp(tp_path(tmp, "refused.out"));
    CHECK(s && strstr(s, "model.problem_type: multi_label_classification is for the Hugging Face classifiers"), "%s",
          s);
    free(s);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "ut-multilabel")) return 1;
    write_config();
    RUN(test_train_and_test);
    RUN(test_jsonl_and_csv);
    RUN(test_plan);
    RUN(test_export_and_again);
    RUN(test_inferred_from_lists);
    RUN(test_goemotions_gpt2);
    RUN(test_refused);
    /* the jobs under mpirun last: their environment turns LeakSanitizer off */
    tp_mpi_env(true);
    RUN(test_two_ranks);
    return TEST_SUMMARY();
}
