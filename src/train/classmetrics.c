/* Classification scores from an evaluation's confusion matrix
 * (train.metrics, docs/training.md "Classification metrics"): precision,
 * recall and F1 of a two-class task's positive class, F1 averaged over the
 * classes, and the Matthews correlation coefficient, defined as
 * scikit-learn's precision_score / recall_score / f1_score /
 * matthews_corrcoef define them (zero_division=0), which is what the
 * `evaluate` library's GLUE metrics report. A regression's scores (GLUE's
 * STS-B): Pearson's and Spearman's correlations of the predictions with the
 * labels, as scipy's pearsonr and spearmanr. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config_schema.h"
#include "run_internal.h"

static const struct {
    const char *name;
    unsigned bit;
} names[] = {
    {"accuracy", UT_CLS_ACCURACY}, /* reported for every classification task anyway */
    {"precision", UT_CLS_PRECISION},
    {"recall", UT_CLS_RECALL},
    {"f1", UT_CLS_F1},
    {"f1_macro", UT_CLS_F1_MACRO},
    {"f1_weighted", UT_CLS_F1_WEIGHTED},
    {"matthews_correlation", UT_CLS_MCC},
    {"pearson", UT_REG_PEARSON}, /* a regression's, reported for every one anyway */
    {"spearmanr", UT_REG_SPEARMAN},
    {"combined_score", UT_REG_COMBINED},
};
enum { NNAMES = sizeof names / sizeof names[0] };

static int find(const char *name, size_t len) {
    for (int i = 0; i < NNAMES; i++)
        if (strlen(names[i].name) == len && !strncmp(names[i].name, name, len)) return i;
    return -1;
}

bool ut_cls_is_metric(const char *name) {
    int i = find(name, strlen(name));
    return i >= 0 && names[i].bit != UT_CLS_ACCURACY;
}

int ut_cls_parse(const char *list, unsigned *mask, char *err, size_t n) {
    *mask = 0;
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t len = strcspn(p, ",");
        while (len && p[len - 1] == ' ') len--;
        if (!len) break;
        int i = find(p, len);
        if (i < 0) {
            char hint[160];
            const char *cands[NNAMES + 1] = {0};
            for (int k = 0; k < NNAMES; k++) cands[k] = names[k].name;
            ut_cfg_suggest_among(cands, p, len, hint, sizeof hint);
            return ut_errorf(err, n, "train.metrics: '%.*s' is not a metric utrain computes%s (the names: accuracy, "
                                     "precision, recall, f1, f1_macro, f1_weighted, matthews_correlation; a "
                                     "regression's pearson, spearmanr, combined_score)",
                             (int)len, p, hint);
        }
        *mask |= names[i].bit;
        p += strcspn(p, ",");
    }
    return 0;
}

/* train.metrics' bits (none where the config check has refused the list) */
static unsigned listed(const ut_config *c) {
    unsigned mask = 0;
    char e[8];
    return ut_cls_parse(c->metrics, &mask, e, sizeof e) ? 0 : mask;
}

/* train.best_metric's bit: dev/<a score> */
static unsigned best(const ut_config *c) {
    const char *bm = c->best_metric;
    int i = strncmp(bm, "dev/", 4) ? -1 : find(bm + 4, strlen(bm + 4));
    return i < 0 ? 0 : names[i].bit;
}

unsigned ut_cls_wanted(const ut_config *c) {
    return ((listed(c) | best(c)) & UT_CLS_CM) | (c->entity_metrics ? UT_TAG_TYPES : 0);
}

/* the first name of a bit in mask */
static const char *first_name(unsigned mask) {
    for (int i = 0; i < NNAMES; i++)
        if (names[i].bit & mask) return names[i].name;
    return "";
}

/* a regression's data against the run's scores and label smoothing */
static int check_regression(const ut_config *c, const ut_dataset *ds, unsigned list, unsigned mask, char *err,
                            size_t n) {
    unsigned cls = UT_CLS_CM | UT_CLS_ACCURACY;
    if (mask & cls)
        return ut_errorf(err, n, "%s: %s scores a classifier's classes, and the data (%s) holds scores (a "
                                 "regression: model.num_labels 1); its metrics are dev/loss (the mean squared "
                                 "error), dev/pearson, dev/spearmanr and dev/combined_score", list & cls ?
                         "train.metrics" : "train.best_metric", first_name(list & cls ? list & cls : mask & cls),
                         ds->name);
    if (c->label_smoothing > 0)
        return ut_errorf(err, n, "train.label_smoothing: %g smooths class labels, and the data (%s) holds scores "
                                 "(a regression: model.num_labels 1, a mean squared error); remove it",
                         c->label_smoothing, ds->name);
    return 0;
}

int ut_cls_check(const ut_config *c, const ut_dataset *ds, char *err, size_t n) {
    unsigned list = listed(c), mask = list | best(c);
    if (!ds) return 0;
    if (c->entity_metrics && !ut_tok_tags(ds))
        return ut_errorf(err, n, "train.entity_metrics: scores entity types of tagged text (data.name tagged_text), "
                                 "and the data (%s) has none; remove it", ds->name);
    if (ds->masked_lm && (mask & ~UT_CLS_ACCURACY))
        return ut_errorf(err, n, "%s: %s is not a masked language model's score: the data (%s) is texts whose "
                                 "masked tokens are predicted, scored by accuracy over them (always computed) and "
                                 "the loss and perplexity; remove it", list & ~UT_CLS_ACCURACY ? "train.metrics" :
                         "train.best_metric", first_name(list & ~UT_CLS_ACCURACY ? list & ~UT_CLS_ACCURACY :
                                                         mask & ~UT_CLS_ACCURACY), ds->name);
    if (ds->regression) return check_regression(c, ds, list, mask, err, n);
    unsigned tagged = UT_CLS_PRECISION | UT_CLS_RECALL | UT_CLS_F1 | UT_CLS_ACCURACY;
    if (ut_tok_tags(ds) && (mask & ~tagged))
        return ut_errorf(err, n, "%s: %s is not a token classifier's score: the data (%s) has a tag per word, "
                                 "scored as seqeval scores entities (precision, recall, f1, always computed) and "
                                 "accuracy over the tagged words; remove it", list & ~tagged ? "train.metrics" :
                         "train.best_metric", first_name(list & ~tagged ? list & ~tagged : mask & ~tagged), ds->name);
    if (ut_tok_tags(ds)) return 0;
    if (ds->multi_label && (mask & UT_CLS_MCC))
        return ut_errorf(err, n, "%s: matthews_correlation is a single-label classifier's score, and the data (%s) "
                                 "holds lists of labels (model.problem_type multi_label_classification); its scores "
                                 "are accuracy (every label right), precision, recall, f1 (micro-averaged), f1_macro "
                                 "and f1_weighted", list & UT_CLS_MCC ? "train.metrics" : "train.best_metric",
                         ds->name);
    if (ds->multi_label && c->label_smoothing > 0)
        return ut_errorf(err, n, "train.label_smoothing: %g smooths one class per example, and the data (%s) holds "
                                 "lists of labels (a binary cross-entropy each); remove it", c->label_smoothing,
                         ds->name);
    if (mask & UT_REG_ALL)
        return ut_errorf(err, n, "%s: %s scores a regression's predictions (model.num_labels 1, labels that are "
                                 "scores), and the data (%s) has %s; remove it", list & UT_REG_ALL ? "train.metrics"
                         : "train.best_metric", first_name(list & UT_REG_ALL ? list & UT_REG_ALL : mask & UT_REG_ALL),
                         ds->name, ds->num_classes > 0 ? "classes" : "no labels of either kind");
    list &= UT_CLS_CM, mask &= UT_CLS_CM; /* accuracy is there wherever classes are, and not refused elsewhere */
    if (!mask) return 0;
    /* the key that asks for the scores: train.metrics', else the best metric's */
    const char *why = list ? "train.metrics" : "train.best_metric", *m = first_name(list ? list : mask);
    if (ds->num_classes < 2)
        return ut_errorf(err, n, "%s: %s scores a classifier's predictions against labels, and the data (%s) has "
                                 "no classes%s; remove it", why, m, ds->name,
                         ds->vocab_size > 0 ? " (language-model data: dev/loss and dev/perplexity are its metrics)"
                                            : "");
    if (ds->num_classes > UT_CLS_MAX_CLASSES && !ds->multi_label) /* (a multi-label's counts are 3 a label) */
        return ut_errorf(err, n, "%s: %s over %lld classes: the confusion matrix is kept for at most %d classes; "
                                 "remove it", why, m, (long long)ds->num_classes, UT_CLS_MAX_CLASSES);
    unsigned two = UT_CLS_PRECISION | UT_CLS_RECALL | UT_CLS_F1, binary = mask & two;
    if (binary && ds->num_classes != 2 && !ds->multi_label)
        return ut_errorf(err, n, "%s: %s is the positive class's (label 1) score of a two-class task, and the data "
                                 "(%s) has %lld classes; write f1_macro or f1_weighted (averages over the classes) or "
                                 "matthews_correlation instead", list & two ? "train.metrics" : "train.best_metric",
                         first_name(list & two ? list & two : binary), ds->name, (long long)ds->num_classes);
    return 0;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

/* F1 of class k: 2 tp / (2 tp + fp + fn), 0 where the class is never
 * predicted nor true */
static double f1_of(const double *cm, int64_t C, int64_t k, double *support) {
    double tp = cm[k * C + k], row = 0, col = 0;
    for (int64_t j = 0; j < C; j++) row += cm[k * C + j], col += cm[j * C + k];
    *support = row;
    return ratio(2 * tp, row + col);
}

void ut_cls_scores(const double *cm, int64_t C, unsigned mask, ut_cls_result *r) {
    r->n = 0;
    double total = 0;
    for (int64_t i = 0; i < C * C; i++) total += cm[i];
    if (total <= 0) return;
    if (C == 2) { /* the positive class is label 1: rows are labels, columns predictions */
        double tp = cm[3], fp = cm[1], fn = cm[2];
        if (mask & UT_CLS_PRECISION) r->names[r->n] = "precision", r->values[r->n++] = ratio(tp, tp + fp);
        if (mask & UT_CLS_RECALL) r->names[r->n] = "recall", r->values[r->n++] = ratio(tp, tp + fn);
        if (mask & UT_CLS_F1) r->names[r->n] = "f1", r->values[r->n++] = ratio(2 * tp, 2 * tp + fp + fn);
    }
    if (mask & (UT_CLS_F1_MACRO | UT_CLS_F1_WEIGHTED)) {
        /* over the classes that occur as a label or a prediction, as
         * scikit-learn's labels=None takes them */
        double sum = 0, wsum = 0, present = 0;
        for (int64_t k = 0; k < C; k++) {
            double support, col = 0;
            double f = f1_of(cm, C, k, &support);
            for (int64_t j = 0; j < C; j++) col += cm[j * C + k];
            if (support + col == 0) continue;
            present++;
            sum += f;
            wsum += f * support;
        }
        if (mask & UT_CLS_F1_MACRO) r->names[r->n] = "f1_macro", r->values[r->n++] = ratio(sum, present);
        if (mask & UT_CLS_F1_WEIGHTED) r->names[r->n] = "f1_weighted", r->values[r->n++] = ratio(wsum, total);
    }
    if (mask & UT_CLS_MCC) { /* the multi-class form (Gorodkin's R_K), which is phi for two classes */
        double c = 0, tp_sum = 0, t2 = 0, p2 = 0;
        for (int64_t k = 0; k < C; k++) {
            double t = 0, p = 0;
            for (int64_t j = 0; j < C; j++) t += cm[k * C + j], p += cm[j * C + k];
            c += cm[k * C + k];
            tp_sum += t * p;
            t2 += t * t;
            p2 += p * p;
        }
        double den = sqrt((total * total - p2) * (total * total - t2));
        r->names[r->n] = "matthews_correlation";
        r->values[r->n++] = den > 0 ? (c * total - tp_sum) / den : 0.0;
    }
}

void ut_cls_scores_multi(const double *counts, int64_t K, unsigned mask, ut_cls_result *r) {
    r->n = 0;
    double tp = 0, fp = 0, fn = 0, sum = 0, wsum = 0, support = 0;
    for (int64_t k = 0; k < K; k++) {
        const double *c = counts + 3 * k;
        double f = ratio(2 * c[0], 2 * c[0] + c[1] + c[2]);
        tp += c[0], fp += c[1], fn += c[2];
        sum += f;
        wsum += f * (c[0] + c[2]);
        support += c[0] + c[2];
    }
    if (mask & UT_CLS_PRECISION) r->names[r->n] = "precision", r->values[r->n++] = ratio(tp, tp + fp);
    if (mask & UT_CLS_RECALL) r->names[r->n] = "recall", r->values[r->n++] = ratio(tp, tp + fn);
    if (mask & UT_CLS_F1) r->names[r->n] = "f1", r->values[r->n++] = ratio(2 * tp, 2 * tp + fp + fn);
    if (mask & UT_CLS_F1_MACRO) r->names[r->n] = "f1_macro", r->values[r->n++] = ratio(sum, (double)K);
    if (mask & UT_CLS_F1_WEIGHTED) r->names[r->n] = "f1_weighted", r->values[r->n++] = ratio(wsum, support);
}

/* Pearson's r of x and y (n): the two-pass form about the means */
static double pearson(const double *x, const double *y, int64_t n) {
    if (n < 2) return NAN;
    double mx = 0, my = 0;
    for (int64_t i = 0; i < n; i++) mx += x[i], my += y[i];
    mx /= (double)n, my /= (double)n;
    double sxy = 0, sxx = 0, syy = 0;
    for (int64_t i = 0; i < n; i++) {
        double dx = x[i] - mx, dy = y[i] - my;
        sxy += dx * dy, sxx += dx * dx, syy += dy * dy;
    }
    if (!(sxx > 0) || !(syy > 0)) return NAN; /* a constant: undefined, as scipy says */
    double r = sxy / sqrt(sxx * syy);
    return r > 1 ? 1 : r < -1 ? -1 : r;
}

typedef struct {
    double v;
    int64_t i;
} ranked;

static int by_value(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    return x->v < y->v ? -1 : x->v > y->v ? 1 : (x->i > y->i) - (x->i < y->i);
}

/* rank (n) of each v: 1-based, tied values sharing their mean rank */
static void ranks(const double *v, int64_t n, double *rank) {
    ranked *s = ut_malloc_check((size_t)(n ? n : 1) * sizeof *s);
    for (int64_t i = 0; i < n; i++) s[i] = (ranked){v[i], i};
    qsort(s, (size_t)n, sizeof *s, by_value);
    for (int64_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && s[b].v == s[a].v; b++) {}
        double mean = 0.5 * (double)(a + 1 + b); /* of the ranks a+1 .. b */
        for (int64_t k = a; k < b; k++) rank[s[k].i] = mean;
    }
    ut_free(s);
}

void ut_reg_scores(const double *pred, const double *label, int64_t n, ut_cls_result *r) {
    double *rp = ut_malloc_check((size_t)(n ? n : 1) * sizeof *rp), *rl = ut_malloc_check((size_t)(n ? n : 1) * sizeof *rl);
    ranks(pred, n, rp);
    ranks(label, n, rl);
    double p = pearson(pred, label, n), s = pearson(rp, rl, n);
    ut_free(rp);
    ut_free(rl);
    r->n = 3;
    r->names[0] = "pearson", r->values[0] = p;
    r->names[1] = "spearmanr", r->values[1] = s;
    r->names[2] = "combined_score", r->values[2] = (p + s) / 2;
}
