/* Classification scores from a confusion matrix (src/train/classmetrics.c)
 * against scikit-learn's (tests/parity/make_classmetric_fixtures.py writes
 * the expected values: random and edge-case matrices of 2 to 10 classes),
 * each score alone and together, the empty matrix; a regression's Pearson
 * and Spearman correlations against scipy's
 * (tests/parity/make_regmetric_fixtures.py: random, tied and edge cases),
 * and where they are undefined; a multi-label task's scores against
 * scikit-learn's (tests/parity/make_multilabel_metric_fixtures.py: random
 * label sets of 2 to 28 labels, edge cases); train.metrics' names (spaces, duplicates,
 * refusals with a suggestion) and the data each score needs; a token
 * classifier's entities against seqeval's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "../../src/train/run_internal.h"

#define FIXTURE "tests/parity/fixtures/classmetrics.tsv"
#define REG_FIXTURE "tests/parity/fixtures/regmetrics.tsv"
#define MULTI_FIXTURE "tests/parity/fixtures/multilabel_metrics.tsv"
#define ALL (UT_CLS_PRECISION | UT_CLS_RECALL | UT_CLS_F1 | UT_CLS_F1_MACRO | UT_CLS_F1_WEIGHTED | UT_CLS_MCC)

static const char *const score_names[6] = {"precision", "recall", "f1", "f1_macro", "f1_weighted",
                                           "matthews_correlation"};

/* r's value of name; NAN when r has none */
static double value_of(const ut_cls_result *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->names[i], name)) return r->values[i];
    return NAN;
}

static void test_against_sklearn(void) {
    FILE *f = fopen(FIXTURE, "r");
    CHECK(f != NULL, "%s: cannot open", FIXTURE);
    if (!f) return;
    char line[8192];
    int cases = 0, binary = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char *save = NULL, *field[8];
        int nf = 0;
        for (char *t = strtok_r(line, "\t\n", &save); t && nf < 8; t = strtok_r(NULL, "\t\n", &save)) field[nf++] = t;
        CHECK(nf == 8, "case %d: %d fields", cases, nf);
        if (nf != 8) break;
        int64_t C = atoi(field[0]);
        double cm[100];
        char *p = field[1];
        for (int64_t i = 0; i < C * C; i++) cm[i] = strtod(p, &p);
        ut_cls_result r;
        ut_cls_scores(cm, C, ALL, &r);
        CHECK(r.n == (C == 2 ? 6 : 3), "case %d (%lld classes): %d scores", cases, (long long)C, r.n);
        for (int k = 0; k < 6; k++) {
            if (!strcmp(field[2 + k], "-")) {
                CHECK(isnan(value_of(&r, score_names[k])), "case %d: %s given for %lld classes", cases,
                      score_names[k], (long long)C);
                continue;
            }
            double want = strtod(field[2 + k], NULL), got = value_of(&r, score_names[k]);
            CHECK(fabs(got - want) <= 1e-12, "case %d (%lld classes): %s %.17g, scikit-learn %.17g", cases,
                  (long long)C, score_names[k], got, want);
            /* each score alone gives the same value */
            ut_cls_result one;
            ut_cls_scores(cm, C, 1u << k, &one);
            CHECK(one.n == 1 && !strcmp(one.names[0], score_names[k]) && one.values[0] == got,
                  "case %d: %s alone", cases, score_names[k]);
        }
        binary += C == 2;
        cases++;
    }
    fclose(f);
    CHECK(cases == 46 && binary == 15, "%d cases, %d of two classes", cases, binary);
}

/* Each case's label and prediction sets counted as an evaluation counts
 * them (each label's true positives, false positives, false negatives),
 * then scored. The accuracy column (every label of an example right) is
 * checked against the same sets, as the evaluation's batches count it. */
static void test_multi_label_against_sklearn(void) {
    FILE *f = fopen(MULTI_FIXTURE, "r");
    CHECK(f != NULL, "%s: cannot open", MULTI_FIXTURE);
    if (!f) return;
    static char line[1 << 16];
    int cases = 0;
    static const char *const names[5] = {"precision", "recall", "f1", "f1_macro", "f1_weighted"};
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char *save = NULL, *field[10];
        int nf = 0;
        for (char *t = strtok_r(line, "\t\n", &save); t && nf < 10; t = strtok_r(NULL, "\t\n", &save)) field[nf++] = t;
        CHECK(nf == 10, "case %d: %d fields", cases, nf);
        if (nf != 10) break;
        int64_t K = atoi(field[0]), n = atoi(field[1]), exact = 0;
        double counts[3 * 28] = {0};
        const char *y = field[2], *p = field[3];
        for (int64_t i = 0; i < n; i++, y++, p++) { /* each row's K digits, then a space */
            bool all = true;
            for (int64_t k = 0; k < K; k++, y++, p++) {
                bool t = *y == '1', q = *p == '1';
                all &= t == q;
                if (t || q) counts[3 * k + (t && q ? 0 : q ? 1 : 2)] += 1;
            }
            exact += all;
        }
        double acc = strtod(field[4], NULL);
        CHECK(fabs((double)exact / (double)n - acc) <= 1e-12, "case %d: accuracy %g, scikit-learn %g", cases,
              (double)exact / (double)n, acc);
        ut_cls_result r;
        ut_cls_scores_multi(counts, K, ALL & ~UT_CLS_MCC, &r);
        CHECK(r.n == 5, "case %d: %d scores", cases, r.n);
        for (int k = 0; k < 5; k++) {
            double want = strtod(field[5 + k], NULL), got = value_of(&r, names[k]);
            CHECK(fabs(got - want) <= 1e-12, "case %d (%lld labels, %lld examples): %s %.17g, scikit-learn %.17g",
                  cases, (long long)K, (long long)n, names[k], got, want);
            ut_cls_result one;
            ut_cls_scores_multi(counts, K, 1u << k, &one);
            CHECK(one.n == 1 && !strcmp(one.names[0], names[k]) && one.values[0] == got, "case %d: %s alone", cases,
                  names[k]);
        }
        cases++;
    }
    fclose(f);
    CHECK(cases == 38, "%d cases", cases);
}

/* space-separated numbers into v (at most max); how many */
static int64_t read_numbers(char *s, double *v, int64_t max) {
    int64_t k = 0;
    for (char *end; k < max; s = end) {
        double x = strtod(s, &end);
        if (end == s) break;
        v[k++] = x;
    }
    return k;
}

static void test_regression_against_scipy(void) {
    FILE *f = fopen(REG_FIXTURE, "r");
    CHECK(f != NULL, "%s: cannot open", REG_FIXTURE);
    if (!f) return;
    static char line[1 << 16];
    static double pred[512], label[512];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char *save = NULL, *field[5];
        int nf = 0;
        for (char *t = strtok_r(line, "\t\n", &save); t && nf < 5; t = strtok_r(NULL, "\t\n", &save)) field[nf++] = t;
        CHECK(nf == 5, "case %d: %d fields", cases, nf);
        if (nf != 5) break;
        int64_t n = atoi(field[0]);
        CHECK(read_numbers(field[1], pred, 512) == n && read_numbers(field[2], label, 512) == n, "case %d: %lld values",
              cases, (long long)n);
        ut_cls_result r;
        ut_reg_scores(pred, label, n, &r);
        double want_p = strtod(field[3], NULL), want_s = strtod(field[4], NULL);
        CHECK(r.n == 3 && !strcmp(r.names[0], "pearson") && !strcmp(r.names[1], "spearmanr") &&
                  !strcmp(r.names[2], "combined_score"), "case %d: names", cases);
        CHECK(fabs(r.values[0] - want_p) <= 1e-12, "case %d (n %lld): pearson %.17g, scipy %.17g", cases, (long long)n,
              r.values[0], want_p);
        CHECK(fabs(r.values[1] - want_s) <= 1e-12, "case %d (n %lld): spearmanr %.17g, scipy %.17g", cases,
              (long long)n, r.values[1], want_s);
        CHECK(fabs(r.values[2] - (want_p + want_s) / 2) <= 1e-12, "case %d: combined_score %.17g", cases, r.values[2]);
        cases++;
    }
    fclose(f);
    CHECK(cases == 30, "%d cases", cases);
}

/* Fewer than two examples, or a constant side: undefined (NaN), as scipy says */
static void test_regression_undefined(void) {
    double p[3] = {1, 2, 3}, c[3] = {2, 2, 2};
    ut_cls_result r;
    ut_reg_scores(p, c, 3, &r);
    CHECK(r.n == 3 && isnan(r.values[0]) && isnan(r.values[1]) && isnan(r.values[2]), "constant labels");
    ut_reg_scores(c, p, 3, &r);
    CHECK(r.n == 3 && isnan(r.values[0]) && isnan(r.values[1]), "constant predictions");
    ut_reg_scores(p, p, 1, &r);
    CHECK(r.n == 3 && isnan(r.values[0]) && isnan(r.values[1]), "one example");
    ut_reg_scores(p, p, 0, &r);
    CHECK(r.n == 3 && isnan(r.values[0]), "none");
    ut_reg_scores(p, p, 3, &r);
    CHECK(r.values[0] == 1 && r.values[1] == 1 && r.values[2] == 1, "the same values: %g %g", r.values[0], r.values[1]);
}

/* No example counted: no score (the metric is missing, not 0 or NaN). */
static void test_empty(void) {
    double cm[9] = {0};
    ut_cls_result r = {.n = 7};
    ut_cls_scores(cm, 3, ALL, &r);
    CHECK(r.n == 0, "%d scores of an empty matrix", r.n);
    ut_cls_scores(cm, 2, ALL, &r);
    CHECK(r.n == 0, "%d scores of an empty matrix", r.n);
}

static void test_names(void) {
    unsigned m;
    char err[512];
    CHECK(ut_cls_parse("", &m, err, sizeof err) == 0 && m == 0, "empty list");
    CHECK(ut_cls_parse("accuracy", &m, err, sizeof err) == 0 && m == UT_CLS_ACCURACY, "accuracy: %u", m);
    CHECK(ut_cls_parse("pearson,spearmanr, combined_score", &m, err, sizeof err) == 0 && m == UT_REG_ALL,
          "a regression's: %u", m);
    CHECK(ut_cls_parse("f1, matthews_correlation ,f1", &m, err, sizeof err) == 0 && m == (UT_CLS_F1 | UT_CLS_MCC),
          "spaces and a repeat: %u", m);
    CHECK(ut_cls_parse("precision,recall,f1,f1_macro,f1_weighted,matthews_correlation,accuracy", &m, err,
                       sizeof err) == 0 && m == (ALL | UT_CLS_ACCURACY), "every name: %u", m);
    CHECK(ut_cls_parse("f1,f2", &m, err, sizeof err) == -1 &&
              !strcmp(err, "train.metrics: 'f2' is not a metric utrain computes (did you mean f1?) (the names: "
                           "accuracy, precision, recall, f1, f1_macro, f1_weighted, matthews_correlation; a "
                           "regression's pearson, spearmanr, combined_score)"),
          "%s", err);
    CHECK(ut_cls_parse("mcc", &m, err, sizeof err) == -1 && strstr(err, "'mcc' is not a metric") &&
              !strstr(err, "did you mean"), "%s", err);
    CHECK(ut_cls_parse("f1_macr", &m, err, sizeof err) == -1 && strstr(err, "did you mean f1_macro?"), "%s", err);
    CHECK(ut_cls_parse("spearman", &m, err, sizeof err) == -1 && strstr(err, "did you mean spearmanr?"), "%s", err);
    CHECK(ut_cls_is_metric("pearson") && ut_cls_is_metric("combined_score"), "a regression's are evaluations'");
    CHECK(ut_cls_is_metric("f1") && ut_cls_is_metric("matthews_correlation") && !ut_cls_is_metric("accuracy") &&
              !ut_cls_is_metric("loss") && !ut_cls_is_metric("f1x"), "ut_cls_is_metric");
}

/* The run's scores: train.metrics' and train.best_metric's dev/<name> */
static void test_wanted(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(ut_cls_wanted(&c) == 0, "defaults: %u", ut_cls_wanted(&c));
    char err[256];
    CHECK(ut_config_set(&c, "metric_for_best_model=eval_f1", err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(c.best_metric, "dev/f1") && ut_cls_wanted(&c) == UT_CLS_F1, "%s: %u", c.best_metric,
          ut_cls_wanted(&c));
    CHECK(ut_config_set(&c, "train.metrics=f1_macro,accuracy", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_wanted(&c) == (UT_CLS_F1 | UT_CLS_F1_MACRO), "%u", ut_cls_wanted(&c));
    CHECK(ut_config_set(&c, "train.best_metric=dev/accuracy", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_wanted(&c) == UT_CLS_F1_MACRO, "%u", ut_cls_wanted(&c));
    /* a regression's scores are computed whatever is asked: no confusion matrix for them */
    CHECK(ut_config_set(&c, "train.metrics=pearson,spearmanr", err, sizeof err) == 0, "%s", err);
    CHECK(ut_config_set(&c, "train.best_metric=dev/combined_score", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_wanted(&c) == 0 && c.greater_is_better, "%u", ut_cls_wanted(&c));
    ut_config_free(&c);
}

/* The data a run's scores need: classes, at most UT_CLS_MAX_CLASSES, two for a two-class score */
static void test_check(void) {
    ut_config c;
    ut_config_init(&c);
    char err[512];
    ut_dataset ds = {.name = "tsv_text", .num_classes = 2000};
    CHECK(ut_cls_check(&c, &ds, err, sizeof err) == 0, "no score asked: %s", err);
    CHECK(ut_config_set(&c, "train.metrics=f1_macro", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &ds, err, sizeof err) == -1 &&
              !strcmp(err, "train.metrics: f1_macro over 2000 classes: the confusion matrix is kept for at most 1024 "
                           "classes; remove it"), "%s", err);
    ds.num_classes = 1024;
    CHECK(ut_cls_check(&c, &ds, err, sizeof err) == 0, "1024 classes: %s", err);
    CHECK(ut_config_set(&c, "train.best_metric=dev/recall", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &ds, err, sizeof err) == -1 &&
              strstr(err, "train.best_metric: recall is the positive class's (label 1) score of a two-class task, and "
                          "the data (tsv_text) has 1024 classes"), "%s", err);
    ds.num_classes = 2;
    CHECK(ut_cls_check(&c, &ds, err, sizeof err) == 0, "two classes: %s", err);
    ds.num_classes = 0;
    CHECK(ut_cls_check(&c, &ds, err, sizeof err) == -1 &&
              strstr(err, "train.metrics: f1_macro scores a classifier's predictions against labels, and the data "
                          "(tsv_text) has no classes; remove it"), "%s", err);
    ut_config_free(&c);
}

/* A regression's data (scores): its own scores, no classifier's, no label smoothing */
static void test_check_regression(void) {
    ut_config c;
    ut_config_init(&c);
    char err[512];
    ut_dataset reg = {.name = "stsb.tsv", .regression = true}, cls = {.name = "sst2.tsv", .num_classes = 2};
    CHECK(ut_cls_check(&c, &reg, err, sizeof err) == 0, "defaults: %s", err);
    CHECK(ut_config_set(&c, "train.metrics=pearson,combined_score", err, sizeof err) == 0, "%s", err);
    CHECK(ut_config_set(&c, "train.best_metric=dev/spearmanr", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &reg, err, sizeof err) == 0, "a regression's scores: %s", err);
    CHECK(ut_cls_check(&c, &cls, err, sizeof err) == -1 &&
              !strcmp(err, "train.metrics: pearson scores a regression's predictions (model.num_labels 1, labels that "
                           "are scores), and the data (sst2.tsv) has classes; remove it"), "%s", err);
    CHECK(ut_config_set(&c, "train.metrics=", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &cls, err, sizeof err) == -1 && strstr(err, "train.best_metric: spearmanr scores"),
          "%s", err);
    CHECK(ut_config_set(&c, "train.metrics=accuracy", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &reg, err, sizeof err) == -1 &&
              !strcmp(err, "train.metrics: accuracy scores a classifier's classes, and the data (stsb.tsv) holds "
                           "scores (a regression: model.num_labels 1); its metrics are dev/loss (the mean squared "
                           "error), dev/pearson, dev/spearmanr and dev/combined_score"), "%s", err);
    CHECK(ut_config_set(&c, "train.metrics=", err, sizeof err) == 0, "%s", err);
    CHECK(ut_config_set(&c, "train.best_metric=dev/f1", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &reg, err, sizeof err) == -1 && strstr(err, "train.best_metric: f1 scores a classifier's"),
          "%s", err);
    CHECK(ut_config_set(&c, "train.best_metric=dev/loss", err, sizeof err) == 0, "%s", err);
    CHECK(ut_config_set(&c, "train.label_smoothing=0.1", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &reg, err, sizeof err) == -1 &&
              strstr(err, "train.label_smoothing: 0.1 smooths class labels, and the data (stsb.tsv) holds scores"),
          "%s", err);
    CHECK(ut_cls_check(&c, &cls, err, sizeof err) == 0, "label smoothing of classes: %s", err);
    ut_config_free(&c);
}

/* A multi-label task's data: no matthews_correlation, no label smoothing;
 * the two-class names are micro averages there; any number of labels */
static void test_check_multi_label(void) {
    ut_config c;
    ut_config_init(&c);
    char err[512];
    ut_dataset ml = {.name = "goemotions.tsv", .num_classes = 28, .multi_label = true};
    CHECK(ut_config_set(&c, "train.metrics=precision,recall,f1,f1_macro,f1_weighted", err, sizeof err) == 0, "%s", err);
    CHECK(ut_config_set(&c, "train.best_metric=dev/f1", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &ml, err, sizeof err) == 0, "micro-averaged scores of 28 labels: %s", err);
    ml.num_classes = 5000;
    CHECK(ut_cls_check(&c, &ml, err, sizeof err) == 0, "5000 labels: %s", err);
    CHECK(ut_config_set(&c, "train.metrics=matthews_correlation", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &ml, err, sizeof err) == -1 &&
              strstr(err, "train.metrics: matthews_correlation is a single-label classifier's score, and the data "
                          "(goemotions.tsv) holds lists of labels"), "%s", err);
    CHECK(ut_config_set(&c, "train.metrics=pearson", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &ml, err, sizeof err) == -1 && strstr(err, "train.metrics: pearson scores a regression's"),
          "%s", err);
    CHECK(ut_config_set(&c, "train.metrics=f1", err, sizeof err) == 0, "%s", err);
    CHECK(ut_config_set(&c, "train.label_smoothing=0.1", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &ml, err, sizeof err) == -1 &&
              strstr(err, "train.label_smoothing: 0.1 smooths one class per example, and the data (goemotions.tsv) "
                          "holds lists of labels"), "%s", err);
    ut_config_free(&c);
}

/* Token classification's entities (tagmetrics.c) against seqeval's
 * (tests/parity/make_hf_token_fixtures.py: 400 random sentences over IOB2,
 * IOB1, IOBES and stray tags, empty ones too): each line's gold,
 * predicted and shared entity counts. */
#define TAG_FIXTURE "tests/parity/fixtures/seqeval_cases.tsv"

/* the class of tag among names (added when new); words split on spaces */
static int64_t split_tags(char *s, char **names, int64_t *nnames, int32_t *out) {
    int64_t n = 0;
    for (char *t = strtok(s, " "); t; t = strtok(NULL, " ")) {
        int64_t k = 0;
        while (k < *nnames && strcmp(names[k], t)) k++;
        if (k == *nnames) names[(*nnames)++] = t;
        out[n++] = (int32_t)k;
    }
    return n;
}

static void test_entities_against_seqeval(void) {
    FILE *f = fopen(TAG_FIXTURE, "r");
    CHECK(f, "%s", TAG_FIXTURE);
    if (!f) return;
    char line[1024];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char *gold = line, *tab = strchr(gold, '\t');
        UT_ASSERT(tab);
        *tab = 0;
        char *pred = tab + 1, *tab2 = strchr(pred, '\t');
        UT_ASSERT(tab2);
        *tab2 = 0;
        long want[3];
        UT_ASSERT(sscanf(tab2 + 1, "%ld %ld %ld", &want[0], &want[1], &want[2]) == 3);
        char *names[64];
        int64_t nnames = 0;
        int32_t g[32], p[32];
        int64_t ng = split_tags(gold, names, &nnames, g), np = split_tags(pred, names, &nnames, p);
        UT_ASSERT(ng == np);
        if (!nnames) names[nnames++] = "O";
        ut_tag_scheme sc;
        UT_ASSERT(ut_tag_scheme_init(&sc, (const char *const *)names, nnames) == 0);
        double c[3] = {0};
        double *by = ut_calloc_check((size_t)(3 * sc.ntypes), sizeof *by);
        ut_tag_count(&sc, g, p, ng, c, by);
        double sum[3] = {0};
        for (int32_t t = 0; t < sc.ntypes; t++) sum[0] += by[3 * t], sum[1] += by[3 * t + 1], sum[2] += by[3 * t + 2];
        CHECK(sum[0] == c[0] && sum[1] == c[1] && sum[2] == c[2], "case %d: the types' counts add up", cases);
        ut_free(by);
        CHECK(c[0] == want[0] && c[1] == want[1] && c[2] == want[2], "case %d: %g %g %g, seqeval %ld %ld %ld", cases,
              c[0], c[1], c[2], want[0], want[1], want[2]);
        ut_tag_scheme_free(&sc);
        cases++;
    }
    fclose(f);
    CHECK(cases == 400, "%d cases", cases);
}

/* A token classifier's data: precision, recall, f1 and accuracy (its
 * entity scores); none of the confusion matrix's others */
static void test_check_tagged(void) {
    ut_config c;
    ut_config_init(&c);
    char err[512];
    ut_dataset tg = {.name = "ner.jsonl", .num_classes = 9, .token_labels = true, .token_planes = true, .y_ndim = 1,
                     .y_dtype = UT_I32};
    CHECK(ut_config_set(&c, "train.metrics=precision,recall,f1,accuracy", err, sizeof err) == 0, "%s", err);
    CHECK(ut_config_set(&c, "train.best_metric=dev/f1", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &tg, err, sizeof err) == 0, "entity scores of 9 tags: %s", err);
    CHECK(ut_config_set(&c, "train.metrics=f1,f1_macro", err, sizeof err) == 0, "%s", err);
    CHECK(ut_cls_check(&c, &tg, err, sizeof err) == -1 &&
              strstr(err, "train.metrics: f1_macro is not a token classifier's score: the data (ner.jsonl)"), "%s", err);
    ut_config_free(&c);
}

int main(void) {
    RUN(test_entities_against_seqeval);
    RUN(test_check_tagged);
    RUN(test_against_sklearn);
    RUN(test_regression_against_scipy);
    RUN(test_regression_undefined);
    RUN(test_empty);
    RUN(test_names);
    RUN(test_wanted);
    RUN(test_check);
    RUN(test_check_regression);
    RUN(test_multi_label_against_sklearn);
    RUN(test_check_multi_label);
    return TEST_SUMMARY();
}
