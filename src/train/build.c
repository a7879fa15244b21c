/* Datasets and the model as the config describes them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "run_internal.h"
#include "utrain/io.h"

/* ---- a contiguous range of another dataset (dev carved from train) ---- */
typedef struct {
    ut_dataset *parent;
    int64_t lo;
    int *refs;                 /* shared by the subsets of one parent */
} subset;

static int subset_get(ut_dataset *ds, int64_t i, void *x, void *y, char *err, size_t n) {
    subset *s = ds->impl;
    return s->parent->get(s->parent, s->lo + i, x, y, err, n);
}

static const char *subset_text(const ut_dataset *ds, int64_t i, int which) {
    const subset *s = ds->impl;
    return i >= 0 && i < ds->n ? s->parent->text(s->parent, s->lo + i, which) : NULL;
}

static const char *const *subset_words(const ut_dataset *ds, int64_t i, int64_t *n) {
    const subset *s = ds->impl;
    if (n) *n = 0;
    return i >= 0 && i < ds->n ? s->parent->words(s->parent, s->lo + i, n) : NULL;
}

/* the parent's collator on the batch, its examples by their parent's
 * indices (so a carved or cut dataset draws the masks the whole one would) */
static int subset_collate(const ut_dataset *ds, ut_batch *b, char *err, size_t n) {
    const subset *s = ds->impl;
    int64_t *idx = ut_malloc_check((size_t)(b->count > 0 ? b->count : 1) * sizeof *idx);
    for (int64_t k = 0; k < b->count; k++) idx[k] = s->lo + b->idx[k];
    ut_batch pb = *b;
    pb.idx = idx;
    int rc = s->parent->collate(s->parent, &pb, err, n);
    ut_free(idx);
    return rc;
}

static void subset_free(ut_dataset *ds) {
    subset *s = ds->impl;
    if (--*s->refs == 0) {
        ut_dataset_free(s->parent);
        ut_free(s->refs);
    }
    ut_free(s);
    ut_free(ds);
}

static ut_dataset *subset_new(ut_dataset *parent, int *refs, int64_t lo, int64_t hi) {
    ut_dataset *ds = ut_malloc_check(sizeof *ds);
    *ds = *parent;
    subset *s = ut_malloc_check(sizeof *s);
    *s = (subset){.parent = parent, .lo = lo, .refs = refs};
    (*refs)++;
    ds->n = hi - lo;
    ds->example_id = parent->example_id ? parent->example_id + lo : NULL;
    ds->impl = s;
    ds->get = subset_get;
    ds->free = subset_free;
    ds->text = parent->text ? subset_text : NULL;
    ds->words = parent->words ? subset_words : NULL;
    ds->collate = parent->collate ? subset_collate : NULL;
    return ds;
}

/* Splits full into [0, n - dev) and [n - dev, n). */
static int carve(ut_dataset *full, int64_t dev_size, ut_dataset **train, ut_dataset **dev,
                 char *err, size_t n) {
    if (dev_size >= full->n) {
        snprintf(err, n, "data.dev_size %lld leaves no training examples (%s has %lld)",
                 (long long)dev_size, full->name, (long long)full->n);
        ut_dataset_free(full);
        return -1;
    }
    int *refs = ut_calloc_check(1, sizeof(int));
    *train = subset_new(full, refs, 0, full->n - dev_size);
    if (dev) *dev = subset_new(full, refs, full->n - dev_size, full->n);
    return 0;
}

/* ---- per data.name ---- */
static int open_idx(const ut_config *c, ut_dataset **train, ut_dataset **dev, ut_dataset **test,
                    char *err, size_t n) {
    if (test && c->test_images[0] &&
        !(*test = ut_idx_dataset_open(c->test_images, c->test_labels, c->mean, c->std, 0, -1, err, n)))
        return -1;
    if (!train && !dev) return 0;
    if (dev && c->dev_images[0]) {
        if (!(*dev = ut_idx_dataset_open(c->dev_images, c->dev_labels, c->mean, c->std, 0, -1, err, n)))
            return -1;
        dev = NULL;
    }
    ut_dataset *full = ut_idx_dataset_open(c->train_images, c->train_labels, c->mean, c->std, 0, -1, err, n);
    if (!full) return -1;
    ut_dataset *tr = NULL;
    if (dev && c->dev_size > 0) {
        if (carve(full, c->dev_size, &tr, dev, err, n)) return -1;
    } else tr = full;
    if (train) *train = tr;
    else ut_dataset_free(tr);
    return 0;
}

/* The model's vocabulary (token ids must be below it): model.vocab_size,
 * else the model.pretrained directory's config.json's, else GPT-2's 50257;
 * -1 with a message naming where it came from when that is not a count of
 * at least 1. */
static int64_t model_vocab(const ut_config *c, char *err, size_t n) {
    long long v = 50257;
    char e[1024];
    const char *dir = ut_kv_get(c->model_opts, "pretrained");
    ut_kv *hf = NULL;
    if (dir && !ut_kv_get(c->model_opts, "vocab_size") && !(hf = ut_hf_config_read(dir, e, sizeof e)))
        return ut_errorf(err, n, "model.pretrained: %s", e), -1;
    int rc = ut_kv_int(hf ? hf : c->model_opts, "vocab_size", 50257, &v, e, sizeof e);
    bool from_dir = hf != NULL;
    ut_kv_free(hf);
    if (!rc && v < 1) rc = -1, snprintf(e, sizeof e, "vocab_size %lld is not a count of at least 1", v);
    if (rc && from_dir) return ut_errorf(err, n, "model.pretrained: %s/config.json: %s", dir, e), -1;
    if (rc) return ut_errorf(err, n, "model: %s", e), -1;
    return v;
}

static int open_tokens(const ut_config *c, ut_dataset **train, ut_dataset **dev, ut_dataset **test,
                       char *err, size_t n) {
    int64_t V = model_vocab(c, err, n);
    if (V < 0) return -1;
    const char *paths[3] = {c->train_path, c->dev_path, c->test_path};
    ut_dataset **out[3] = {train, dev, test};
    for (int i = 0; i < 3; i++)
        if (out[i] && paths[i][0] && !(*out[i] = ut_token_dataset_open(paths[i], c->seq_len, V, err, n)))
            return -1;
    return 0;
}

/* The pretrained tokenizer's directory for tsv_text, or NULL for the word
 * and byte tokenizers: data.tokenizer names it, or (left at word) the
 * model.pretrained directory. */
static const char *pretrained_tokenizer(const ut_config *c) {
    const char *model_dir = ut_kv_get(c->model_opts, "pretrained");
    if (!strcmp(c->tokenizer, "word")) return model_dir;
    return strcmp(c->tokenizer, "byte") ? c->tokenizer : NULL;
}

/* data.text_column and the others as the text readers take them */
static ut_text_columns text_columns(const ut_config *c) {
    return (ut_text_columns){.text = c->text_column, .text_pair = c->text_pair_column, .label = c->label_column,
                             .delimiter = c->text_column_delimiter};
}

/* The label column's name in a message: data.label_column's, else what the reader looks for */
static const char *label_column(const ut_config *c, const char *found) {
    return c->label_column[0] ? c->label_column : found;
}

/* training reads the dev labels; an unlabeled file is for test mode */
static int check_dev_labeled(const ut_config *c, ut_dataset **train, ut_dataset **dev, char *err, size_t n) {
    if (train && dev && *dev && (*dev)->unlabeled)
        return ut_errorf(err, n, "%s:1: no '%s' column: training evaluates on data.dev_path and "
                                 "needs its labels (an unlabeled file can be data.test_path)", c->dev_path,
                         label_column(c, "label"));
    return 0;
}

/* What the classifier's task is (ut_problem), as Hugging Face decides it:
 * model.problem_type (regression, single_label_classification,
 * multi_label_classification), else model.num_labels (or num_classes) 1
 * is a regression; without either the model.pretrained directory's
 * config.json says, by its problem_type or a single label. *said (may be
 * NULL): one of them (or do_regression: false) said it; else the
 * single-label task is only the default. -1 with a message naming the key
 * for what is refused. */
static int problem_task(const ut_config *c, bool *said, char *err, size_t n) {
    bool opts_said, unused;
    ut_problem type;
    if (!said) said = &unused;
    *said = true;
    if (ut_model_problem_type(c->model_opts, &type, &opts_said, err, n)) return -1;
    if (opts_said) return (int)type;
    char e[256];
    const char *dir = ut_kv_get(c->model_opts, "pretrained");
    ut_kv *hf = dir ? ut_hf_config_read(dir, e, sizeof e) : NULL; /* a bad directory: the model says */
    *said = c->hf_classify || (hf && (ut_kv_get(hf, "problem_type") || ut_kv_get(hf, "num_labels") ||
                                      ut_kv_get(hf, "id2label.0")));
    if (!hf) return UT_PROBLEM_SINGLE_LABEL;
    const char *pt = ut_kv_get(hf, "problem_type");
    const char *labels = ut_kv_get(hf, "num_labels");
    int r = pt && !strcmp(pt, "multi_label_classification") ? UT_PROBLEM_MULTI_LABEL
            : (pt ? !strcmp(pt, "regression") : labels && !strcmp(labels, "1")) ? UT_PROBLEM_REGRESSION
                                                                             : UT_PROBLEM_SINGLE_LABEL;
    ut_kv_free(hf);
    return r;
}

/* Where nothing said the task (problem_task's said), the train file's
 * labels do, as transformers' run_glue and run_classification read the
 * label column's type: real numbers (floats) a regression, JSON arrays a
 * multi-label task (into *task). Returns the labels' kind
 * (ut_tsv_label_kind), -1 when they were not read (the task said, no train
 * file, or it does not read: the open says why). */
static int labels_task(const ut_config *c, bool said, int *task) {
    if (said || *task != UT_PROBLEM_SINGLE_LABEL || !c->train_path[0]) return -1;
    ut_text_columns cols = text_columns(c);
    char e[256];
    int kind = ut_tsv_label_kind(c->train_path, &cols, e, sizeof e);
    if (kind == UT_LABELS_SCORES) *task = UT_PROBLEM_REGRESSION;
    if (kind == UT_LABELS_LISTS) *task = UT_PROBLEM_MULTI_LABEL;
    return kind;
}

int ut_run_problem(const ut_config *c, char *err, size_t n) {
    if (strcmp(c->data_name, "tsv_text")) return UT_PROBLEM_SINGLE_LABEL;
    bool said;
    int task = problem_task(c, &said, err, n);
    if (task >= 0) labels_task(c, said, &task);
    return task;
}

/* Opens path as the task reads its labels: names (count of them), else
 * count the classes (0: from the file; a regression's 1). */
static ut_dataset *open_task(const ut_config *c, int task, const char *path, ut_tokenizer *tok,
                             const char *const *names, int64_t count, char *err, size_t n) {
    ut_text_columns cols = text_columns(c);
    if (task == UT_PROBLEM_MULTI_LABEL)
        return ut_tsv_dataset_open_multilabel(path, &cols, tok, c->max_len, names, count, err, n);
    return names ? ut_tsv_dataset_open_named(path, &cols, tok, c->max_len, names, count, err, n)
                 : ut_tsv_dataset_open_pretrained(path, &cols, tok, c->max_len, count, err, n);
}

/* The model.pretrained checkpoint's id2label order of the count names
 * (letter case aside when fold), into order; false when the checkpoint has
 * no id2label of exactly those names. */
static bool checkpoint_order(const ut_config *c, const char *const *names, int64_t count, bool fold,
                             const char **order) {
    const char *dir = ut_kv_get(c->model_opts, "pretrained");
    char e[256];
    ut_kv *hf = dir ? ut_hf_config_read(dir, e, sizeof e) : NULL;
    bool same = hf != NULL;
    for (int64_t k = 0; k < count && same; k++) {
        char key[40];
        snprintf(key, sizeof key, "id2label.%lld", (long long)k);
        const char *v = ut_kv_get(hf, key);
        int64_t j = 0;
        while (v && j < count && (fold ? strcasecmp(names[j], v) : strcmp(names[j], v))) j++;
        same = v && j < count;
        if (same) order[k] = names[j];
    }
    const char *labels = hf ? ut_kv_get(hf, "num_labels") : NULL;
    same = same && labels && atoll(labels) == count;
    ut_kv_free(hf);
    return same;
}

/* Labels that are names (MNLI's entailment, ...): the train file's names in
 * the order of the model.pretrained checkpoint's id2label when those are
 * the same names (letter case aside), as transformers' run_glue takes a
 * checkpoint's label2id; otherwise sorted (the dataset's own order).
 * model.num_labels, when given, must be their count. *tr is opened again
 * in the checkpoint's order. */
static int named_classes(const ut_config *c, int task, ut_tokenizer *tok, ut_dataset **tr, long long classes,
                         char *err, size_t n) {
    int64_t count = (*tr)->num_classes;
    const char *const *names = (*tr)->label_names;
    if (classes && classes != count)
        return ut_errorf(err, n, "model.num_labels %lld: the train file (%s) has %lld label names (%s, %s%s)", classes,
                         c->train_path, (long long)count, names[0], count > 1 ? names[1] : "",
                         count > 2 ? ", ..." : "");
    const char **order = ut_calloc_check((size_t)count, sizeof *order);
    bool moved = false;
    if (checkpoint_order(c, names, count, true, order))
        for (int64_t k = 0; k < count; k++) moved |= order[k] != names[k];
    int rc = 0;
    if (moved) {
        ut_dataset *again = open_task(c, task, c->train_path, tok, order, count, err, n);
        if (again) {
            ut_dataset_free(*tr);
            *tr = again;
        } else {
            rc = -1;
        }
    }
    ut_free(order);
    return rc;
}

/* tsv_text with a pretrained tokenizer: classes from the train file (or
 * model.num_labels / num_classes), the same for dev and test; a
 * regression's scores or a multi-label task's lists (problem_task) */
static int open_tsv_pretrained(const ut_config *c, const char *dir, bool lead, ut_dataset **train, ut_dataset **dev,
                               ut_dataset **test, char *err, size_t n) {
    if (c->max_len < 2)
        return ut_errorf(err, n, "data.max_len: %lld leaves no room for [CLS] and [SEP] (at least 2)",
                         (long long)c->max_len);
    char why[1024];
    ut_tokenizer *tok = ut_tokenizer_load(dir, why, sizeof why);
    if (!tok)
        return ut_errorf(err, n, "%s: %s", strcmp(c->tokenizer, "word") ? "data.tokenizer" : "model.pretrained (its tokenizer)",
                         why);
    long long classes = 0;
    char e[128];
    if (ut_kv_int(c->model_opts, "num_labels", 0, &classes, e, sizeof e) || classes < 1)
        ut_kv_int(c->model_opts, "num_classes", 0, &classes, e, sizeof e);
    if (classes < 1) classes = 0;
    bool said;
    int task = problem_task(c, &said, err, n);
    if (task < 0) {
        ut_tokenizer_free(tok);
        return -1;
    }
    int kind = labels_task(c, said, &task);
    if (lead && kind == UT_LABELS_SCORES)
        fprintf(stderr, "utrain: %s: the labels are real numbers: a regression (one output, mean squared error), as "
                        "transformers' run_glue and run_classification read a column of floats; model.problem_type: "
                        "single_label_classification refuses them\n", c->train_path);
    if (lead && kind == UT_LABELS_LISTS)
        fprintf(stderr, "utrain: %s: the labels are lists: a multi-label task (an output a label, binary "
                        "cross-entropy), as run_classification reads a column of lists; model.problem_type: "
                        "single_label_classification refuses them\n", c->train_path);
    bool multi = task == UT_PROBLEM_MULTI_LABEL;
    if (task == UT_PROBLEM_REGRESSION) classes = 1; /* the datasets' regression */
    const char *paths[3] = {c->train_path, c->dev_path, c->test_path};
    ut_dataset **out[3] = {train, dev, test};
    int rc = 0;
    /* the train file first: without num_labels its labels give the class count, even in test mode, and labels
     * that are names their classes (dev and test take the train file's names) */
    ut_dataset *tr = NULL;
    bool first = task != UT_PROBLEM_REGRESSION && c->train_path[0];
    if (first) {
        tr = open_task(c, task, c->train_path, tok, NULL, 0, err, n);
        if (!tr) rc = -1;
        else if (tr->unlabeled)
            rc = ut_errorf(err, n, "%s:1: no '%s' column: the train file's labels give the classes", c->train_path,
                           label_column(c, multi ? "labels" : "label"));
        else if (tr->label_names)
            rc = named_classes(c, task, tok, &tr, classes, err, n);
        else if (!classes && tr->num_classes < 2)
            rc = multi ? ut_errorf(err, n, "%s: every label is 0: a multi-label classifier needs at least two labels "
                                           "(set model.num_labels to their number when the others have no example "
                                           "here)", c->train_path)
                       : ut_errorf(err, n, "%s: every label is 0: a classifier needs at least two classes (set "
                                           "model.num_labels to their number when the others have no example here; "
                                           "model.num_labels: 1 trains on the labels as scores, a regression)",
                                   c->train_path);
        else if (classes && (tr->num_classes > classes || (multi && tr->num_classes != classes))) {
            /* opened again: for the line of the first label too large, or a multi-label's width */
            ut_dataset_free(tr);
            tr = open_task(c, task, c->train_path, tok, NULL, classes, err, n);
            rc = tr ? 0 : -1;
        } else if (classes) {
            tr->num_classes = classes;
        }
        if (tr && !rc) classes = tr->num_classes;
        out[0] = NULL;
    }
    const char *const *names = tr && !rc ? tr->label_names : NULL;
    for (int i = 0; i < 3 && !rc; i++)
        if (out[i] && paths[i][0] && !(*out[i] = open_task(c, task, paths[i], tok, names, classes, err, n)))
            rc = -1;
    if (first && train && !rc) *train = tr; /* the names of dev's and test's datasets are their own copies */
    else if (first) ut_dataset_free(tr);
    ut_tokenizer_free(tok);
    return rc ? rc : check_dev_labeled(c, train, dev, err, n);
}

/* RUN_DIR/labels.txt: the names of the train set's labels, one a line in
 * the order of the model's outputs, for `utrain export` to write into
 * config.json's id2label (removed where the labels are integers) */
static int save_label_names(const ut_dataset *tr, const char *run_dir, char *err, size_t n) {
    char path[1280];
    snprintf(path, sizeof path, "%s/labels.txt", run_dir);
    if (!tr->label_names) return unlink(path) && errno != ENOENT ? ut_errorf(err, n, "%s: cannot remove: %s", path,
                                                                            strerror(errno)) : 0;
    FILE *f = ut_fopen_write(path, false, err, n);
    if (!f) return -1;
    for (int64_t k = 0; k < tr->num_classes; k++) fprintf(f, "%s\n", tr->label_names[k]);
    return fclose(f) ? ut_errorf(err, n, "%s: write failed", path) : 0;
}

/* tsv_text; carving: test mode opens the train file to carve its dev set
 * (the word and byte tokenizers' vocabulary is the run's, read back) */
static int open_tsv(const ut_config *c, const char *run_dir, bool lead, bool carving, ut_dataset **train,
                    ut_dataset **dev, ut_dataset **test, char *err, size_t n) {
    const char *dir = pretrained_tokenizer(c);
    if (dir) {
        int rc = open_tsv_pretrained(c, dir, lead, train, dev, test, err, n);
        return rc || !train || !*train || !lead ? rc : save_label_names(*train, run_dir, err, n);
    }
    int task = problem_task(c, NULL, err, n);
    if (task)
        return task < 0 ? -1
                        : ut_errorf(err, n, "%s is for the Hugging Face classifiers (bert, roberta, bart, gpt2), which "
                                            "read their text with a pretrained tokenizer (model.pretrained or "
                                            "data.tokenizer); the %s tokenizer's models classify one class per example",
                                    task == UT_PROBLEM_REGRESSION ? "model.num_labels 1 (a regression: scores, not "
                                                                    "classes)"
                                                                  : "model.problem_type: multi_label_classification",
                                    c->tokenizer);
    char vpath[1280];
    snprintf(vpath, sizeof vpath, "%s/vocab.txt", run_dir);
    /* training builds the vocabulary and keeps it in the run; test mode reads it back */
    ut_text_columns cols = text_columns(c);
    bool build = train && !carving;
    ut_vocab *v = build ? ut_vocab_build(c->tokenizer, c->train_path, &cols, c->min_freq, err, n)
                        : ut_vocab_load(vpath, err, n);
    if (!v || (build && lead && ut_vocab_save(v, vpath, err, n))) {
        ut_vocab_free(v);
        return -1;
    }
    int64_t first, missing = build ? ut_vocab_missing_classes(v, &first) : 0;
    if (missing && lead)
        fprintf(stderr, "utrain: warning: %s: %lld of the %lld classes (labels 0..%lld) have no "
                        "example, the first is %lld; the model still has an output for each\n",
                c->train_path, (long long)missing, (long long)ut_vocab_num_classes(v),
                (long long)ut_vocab_num_classes(v) - 1, (long long)first);
    const char *paths[3] = {c->train_path, c->dev_path, c->test_path};
    ut_dataset **out[3] = {train, dev, test};
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++)
        if (out[i] && paths[i][0] && !(*out[i] = ut_tsv_dataset_open(paths[i], &cols, v, c->max_len, err, n)))
            rc = -1;
    if (!rc) rc = check_dev_labeled(c, train, dev, err, n);
    ut_vocab_free(v);
    return rc;
}

ut_tokenizer *ut_run_tokenizer(const ut_config *c, char *err, size_t n) {
    const char *dir = pretrained_tokenizer(c);
    if (!dir)
        return ut_errorf(err, n, "data.name %s: needs a pretrained tokenizer: set model.pretrained (a Hugging "
                                 "Face model directory) or data.tokenizer (a tokenizer directory or file)",
                         c->data_name), NULL;
    char why[1024];
    ut_tokenizer *tok = ut_tokenizer_load(dir, why, sizeof why);
    if (!tok)
        ut_errorf(err, n, "%s: %s", strcmp(c->tokenizer, "word") ? "data.tokenizer" : "model.pretrained (its tokenizer)",
                  why);
    return tok;
}

/* seq2seq_text: pairs read with the pretrained tokenizer (data.tokenizer, or
 * model.pretrained's); a warning for texts cut to the length limits */
static int open_seq2seq(const ut_config *c, bool lead, ut_dataset **train, ut_dataset **dev, ut_dataset **test,
                        char *err, size_t n) {
    ut_tokenizer *tok = ut_run_tokenizer(c, err, n);
    if (!tok) return -1;
    ut_seq2seq_opts o = {.max_source_len = c->max_source_len, .max_target_len = c->max_target_len,
                         /* the defaults: those names, else run_summarization's first two columns */
                         .source_field = strcmp(c->source_field, "source") ? c->source_field : NULL,
                         .target_field = strcmp(c->target_field, "target") ? c->target_field : NULL,
                         .source_prefix = c->source_prefix[0] ? c->source_prefix : NULL, .lowercase = c->lowercase};
    const char *paths[3] = {c->train_path, c->dev_path, c->test_path};
    const char *targets[3] = {c->train_target_path, c->dev_target_path, c->test_target_path};
    const char *keys[3] = {"data.train_path", "data.dev_path", "data.test_path"};
    ut_dataset **out[3] = {train, dev, test};
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        if (!out[i] || !paths[i][0]) {
            if (out[i] && i == 0) rc = ut_errorf(err, n, "data.train_path: seq2seq_text needs the training pairs");
            continue;
        }
        if (!(*out[i] = ut_seq2seq_dataset_open(paths[i], targets[i][0] ? targets[i] : NULL, tok, &o, err, n))) {
            rc = -1;
            break;
        }
        int64_t cut[2] = {ut_seq2seq_truncated(*out[i], 0), ut_seq2seq_truncated(*out[i], 1)};
        if (lead && (cut[0] || cut[1]))
            fprintf(stderr, "utrain: warning: %s (%s): %lld of %lld sources cut to data.max_source_len %lld, %lld "
                            "targets to data.max_target_len %lld\n", paths[i], keys[i], (long long)cut[0],
                    (long long)(*out[i])->n, (long long)c->max_source_len, (long long)cut[1],
                    (long long)c->max_target_len);
    }
    ut_tokenizer_free(tok);
    return rc;
}

/* tagged_text: words and their tags read with the pretrained tokenizer. The
 * train file's tags are the classes (in test mode too), sorted, or in the
 * model.pretrained checkpoint's id2label order when it has exactly those
 * tags (run_ner's rule); dev and test take them; RUN_DIR/labels.txt keeps
 * them for `utrain export`. A warning for sentences cut at data.max_len. */
static int open_tagged(const ut_config *c, const char *run_dir, bool lead, ut_dataset **train, ut_dataset **dev,
                       ut_dataset **test, char *err, size_t n) {
    long long classes = 0; /* (data.train_path is required: config validation) */
    char e[128];
    if (ut_kv_int(c->model_opts, "num_labels", 0, &classes, e, sizeof e) || classes < 1)
        ut_kv_int(c->model_opts, "num_classes", 0, &classes, e, sizeof e);
    ut_tokenizer *tok = ut_run_tokenizer(c, err, n);
    if (!tok) return -1;
    ut_tagged_opts o = {.words = c->text_column[0] ? c->text_column : NULL,
                        .tags = c->label_column[0] ? c->label_column : NULL, .max_len = c->max_len,
                        .label_all_tokens = c->label_all_tokens};
    ut_dataset *tr = ut_tagged_dataset_open(c->train_path, tok, &o, err, n);
    int rc = tr ? 0 : -1;
    if (tr && tr->unlabeled)
        rc = ut_errorf(err, n, "%s: no tags: the train file's tags are the classes", c->train_path);
    else if (tr && tr->num_classes < 2)
        rc = ut_errorf(err, n, "%s: every word has the tag %s: a token classifier needs at least two", c->train_path,
                       tr->label_names[0]);
    else if (tr && classes > 0 && classes != tr->num_classes)
        rc = ut_errorf(err, n, "model.num_labels %lld: the train file (%s) has %lld tags (%s, %s%s)", classes,
                       c->train_path, (long long)tr->num_classes, tr->label_names[0], tr->label_names[1],
                       tr->num_classes > 2 ? ", ..." : "");
    const char **order = !rc ? ut_calloc_check((size_t)tr->num_classes, sizeof *order) : NULL;
    bool moved = false;
    if (!rc && checkpoint_order(c, tr->label_names, tr->num_classes, false, order))
        for (int64_t k = 0; k < tr->num_classes; k++) moved |= order[k] != tr->label_names[k];
    if (moved) { /* opened again in the checkpoint's order */
        o.names = order, o.nnames = tr->num_classes;
        ut_dataset *again = ut_tagged_dataset_open(c->train_path, tok, &o, err, n);
        ut_dataset_free(tr);
        tr = again;
        rc = tr ? 0 : -1;
    }
    ut_free(order);
    if (!rc) o.names = tr->label_names, o.nnames = tr->num_classes;
    const char *paths[3] = {c->train_path, c->dev_path, c->test_path};
    const char *keys[3] = {"data.train_path", "data.dev_path", "data.test_path"};
    ut_dataset **out[3] = {train, dev, test};
    for (int i = 0; i < 3 && !rc; i++) {
        if (!out[i] || !paths[i][0]) continue;
        if (i > 0 && !(*out[i] = ut_tagged_dataset_open(paths[i], tok, &o, err, n))) rc = -1;
        const ut_dataset *ds = i == 0 ? tr : *out[i];
        if (!rc && lead && ut_tagged_truncated(ds))
            fprintf(stderr, "utrain: warning: %s (%s): %lld of %lld sentences cut at data.max_len %lld (the words "
                            "past the cut are not scored and get no prediction)\n", paths[i], keys[i],
                    (long long)ut_tagged_truncated(ds), (long long)ds->n, (long long)c->max_len);
    }
    if (!rc && train) {
        *train = tr;
        if (lead) rc = save_label_names(tr, run_dir, err, n);
    } else {
        ut_dataset_free(tr);
    }
    ut_tokenizer_free(tok);
    return rc ? rc : check_dev_labeled(c, train, dev, err, n);
}

/* mlm_text: texts for a masked language model, read with the pretrained
 * tokenizer; the masks are drawn from data.seed (else seed), the epoch, the
 * example and the position (ut_mlm_dataset_open) */
static int open_mlm(const ut_config *c, ut_dataset **train, ut_dataset **dev, ut_dataset **test, char *err,
                    size_t n) {
    ut_tokenizer *tok = ut_run_tokenizer(c, err, n);
    if (!tok) return -1;
    ut_mlm_opts o = {.max_len = c->max_len, .line_by_line = c->line_by_line,
                     .text_column = c->text_column[0] ? c->text_column : NULL, .probability = c->mlm_probability,
                     .seed = (uint64_t)(c->data_seed >= 0 ? c->data_seed : c->seed)};
    const char *paths[3] = {c->train_path, c->dev_path, c->test_path};
    ut_dataset **out[3] = {train, dev, test};
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++)
        if (out[i] && paths[i][0] && !(*out[i] = ut_mlm_dataset_open(paths[i], tok, &o, err, n))) rc = -1;
    ut_tokenizer_free(tok);
    return rc;
}

/* clm_text: texts for a causal language model (GPT-2), read with the
 * pretrained tokenizer into blocks of data.seq_len. A model from scratch
 * takes the tokenizer's vocabulary size unless model.vocab_size says (then
 * it must hold the tokenizer's ids; a pretrained one is checked where the
 * model is built). */
static int open_clm(const ut_config *c, ut_dataset **train, ut_dataset **dev, ut_dataset **test, char *err,
                    size_t n) {
    ut_tokenizer *tok = ut_run_tokenizer(c, err, n);
    if (!tok) return -1;
    int rc = 0;
    long long V = 0;
    char e[256];
    if (!ut_kv_get(c->model_opts, "pretrained") && ut_kv_get(c->model_opts, "vocab_size") &&
        !ut_kv_int(c->model_opts, "vocab_size", 0, &V, e, sizeof e) && ut_tokenizer_vocab_size(tok) > V)
        rc = ut_errorf(err, n, "model.vocab_size: %lld, but the tokenizer has %lld tokens: its ids would be outside "
                               "the model's embedding", V, (long long)ut_tokenizer_vocab_size(tok));
    ut_clm_opts o = {.block_size = c->seq_len, .keep_linebreaks = c->keep_linebreaks,
                     .text_column = c->text_column[0] ? c->text_column : NULL};
    const char *paths[3] = {c->train_path, c->dev_path, c->test_path};
    ut_dataset **out[3] = {train, dev, test};
    for (int i = 0; i < 3 && !rc; i++)
        if (out[i] && paths[i][0] && !(*out[i] = ut_clm_dataset_open(paths[i], tok, &o, err, n))) rc = -1;
    ut_tokenizer_free(tok);
    return rc;
}

/* data.dev_fraction: the last fraction of the training examples (at least
 * one, not all) as the dev set, for text data without a dev file */
static int carve_fraction(const ut_config *c, ut_dataset **train, ut_dataset **dev, char *err, size_t n) {
    if (!(c->dev_fraction > 0) || !train || !*train || !dev || *dev) return 0;
    int64_t N = (*train)->n, k = (int64_t)((double)N * c->dev_fraction + 0.5);
    if (k < 1) k = 1;
    if (k >= N)
        return ut_errorf(err, n, "data.dev_fraction %g of %s's %lld examples leaves none to train on", c->dev_fraction,
                         (*train)->name, (long long)N);
    ut_dataset *full = *train;
    *train = NULL;
    return carve(full, k, train, dev, err, n);
}

int ut_datasets_open(const ut_config *cfg, const char *run_dir, bool lead, ut_dataset **train,
                     ut_dataset **dev, ut_dataset **test, char *err, size_t n) {
    /* test mode (no train set asked for) with a dev set carved from the train file: the train file is read to
     * carve it as training did */
    ut_dataset *whole = NULL;
    bool carve_test = !train && dev && cfg->dev_fraction > 0 && !cfg->dev_path[0] && cfg->train_path[0] &&
                      strcmp(cfg->data_name, "idx_images");
    if (carve_test) train = &whole;
    bool say = lead && !carve_test; /* the openers' warnings; the run's labels.txt stays as training wrote it */
    ut_dataset **all[3] = {train, dev, test};
    for (int i = 0; i < 3; i++)
        if (all[i]) *all[i] = NULL;
    int rc;
    if (!strcmp(cfg->data_name, "idx_images")) rc = open_idx(cfg, train, dev, test, err, n);
    else if (!strcmp(cfg->data_name, "tokens")) rc = open_tokens(cfg, train, dev, test, err, n);
    else if (!strcmp(cfg->data_name, "tsv_text")) rc = open_tsv(cfg, run_dir, say, carve_test, train, dev, test, err, n);
    else if (!strcmp(cfg->data_name, "seq2seq_text")) rc = open_seq2seq(cfg, say, train, dev, test, err, n);
    else if (!strcmp(cfg->data_name, "tagged_text")) rc = open_tagged(cfg, run_dir, say, train, dev, test, err, n);
    else if (!strcmp(cfg->data_name, "mlm_text")) rc = open_mlm(cfg, train, dev, test, err, n);
    else if (!strcmp(cfg->data_name, "clm_text")) rc = open_clm(cfg, train, dev, test, err, n);
    else {
        snprintf(err, n, "data.name: unknown dataset '%s'", cfg->data_name);
        rc = -1;
    }
    /* which columns a text file's examples came from: the first file's (train's; in test mode dev's), another's
     * where they differ */
    const char *first = NULL;
    for (int i = 0; !rc && lead && i < 3; i++) {
        const ut_dataset *d = all[i] ? *all[i] : NULL;
        if (!d || !d->columns || (first && !strcmp(d->columns, first))) continue;
        fprintf(stderr, "utrain: %s: %s\n", d->name, d->columns);
        if (!first) first = d->columns;
    }
    if (!rc && strcmp(cfg->data_name, "idx_images")) rc = carve_fraction(cfg, train, dev, err, n);
    if (carve_test) { /* the train part is not wanted */
        ut_dataset_free(whole);
        all[0] = NULL;
    }
    /* the first N examples of each (the example scripts' max_*_samples: select(range(N))) */
    const int64_t most[3] = {cfg->max_train_samples, cfg->max_eval_samples, cfg->max_predict_samples};
    for (int i = 0; !rc && i < 3; i++)
        if (all[i] && *all[i] && most[i] > 0 && (*all[i])->n > most[i]) (*all[i])->n = most[i];
    if (rc)
        for (int i = 0; i < 3; i++)
            if (all[i] && *all[i]) {
                ut_dataset_free(*all[i]);
                *all[i] = NULL;
            }
    return rc;
}

/* ---- model ---- */
/* The most tokens a BERT, RoBERTa or BART row can hold (0: not one of them):
 * BART's table less its 2 offset rows;
 * max_position_embeddings, less pad_token_id + 1 for RoBERTa, whose
 * positions start after pad_token_id (model.pad_token_id, config.json's, or 1) */
static int64_t position_room(const ut_config *cfg, const ut_model *m) {
    ut_tensor *b = ut_model_param(m, "bert.embeddings.position_embeddings.weight"),
              *r = ut_model_param(m, "roberta.embeddings.position_embeddings.weight");
    ut_tensor *bart = ut_model_param(m, "model.encoder.embed_positions.weight");
    if (bart) return bart->ne[0] - 2; /* BART's table has 2 rows before position 0 */
    if (b || !r) return b ? b->ne[0] : 0;
    const char *dir = ut_kv_get(cfg->model_opts, "pretrained"), *v = ut_kv_get(cfg->model_opts, "pad_token_id");
    char why[512];
    ut_kv *kv = dir ? ut_hf_config_read(dir, why, sizeof why) : NULL;
    if (kv && ut_kv_get(kv, "pad_token_id")) v = ut_kv_get(kv, "pad_token_id");
    long long pad = v ? atoll(v) : 1;
    ut_kv_free(kv);
    return r->ne[0] - pad - 1;
}

/* The image models against the images (idx_images: x is (C, H, W)): cnn
 * takes image_size and in_channels from them unless given, and a given
 * size or mlp's first size that does not match is refused here, naming the
 * files, instead of failing as a linear layer's shape in the first step. */
static int match_images(const ut_config *cfg, const ut_dataset *data, ut_kv *opts, char *err, size_t n) {
    if (!data || strcmp(cfg->data_name, "idx_images") || data->x_ndim != 3) return 0;
    int64_t C = data->x_ne[0], H = data->x_ne[1], W = data->x_ne[2];
    char num[32];
    if (!strcmp(cfg->model_name, "mlp")) {
        long long sizes[64];
        int count = 0;
        char why[256];
        if (ut_kv_get(opts, "sizes") && ut_kv_ints(opts, "sizes", sizes, 64, &count, why, sizeof why))
            return 0; /* a malformed list: the model reports it */
        long long first = count ? (long long)sizes[0] : 784; /* mlp's default sizes start at 784 */
        if (first != C * H * W)
            return ut_errorf(err, n, "model.sizes: the first size (the input) is %lld, but %s holds %lldx%lld "
                                     "images (%lld inputs): start model.sizes with %lld",
                             first, cfg->train_images, (long long)H, (long long)W, (long long)(C * H * W),
                             (long long)(C * H * W));
    } else if (!strcmp(cfg->model_name, "cnn")) {
        if (H != W)
            return ut_errorf(err, n, "model cnn takes square images; %s holds %lldx%lld images", cfg->train_images,
                             (long long)H, (long long)W);
        const char *keys[2] = {"image_size", "in_channels"};
        int64_t have[2] = {H, C};
        for (int k = 0; k < 2; k++) {
            const char *v = ut_kv_get(opts, keys[k]);
            if (v && atoll(v) != have[k])
                return ut_errorf(err, n, "model.%s: %s, but %s holds %lldx%lld images with %lld channel(s): set "
                                         "model.%s: %lld or remove it", keys[k], v, cfg->train_images,
                                 (long long)H, (long long)W, (long long)C, keys[k], (long long)have[k]);
            if (!v) {
                snprintf(num, sizeof num, "%lld", (long long)have[k]);
                ut_kv_set(opts, keys[k], num);
            }
        }
    }
    return 0;
}

ut_model *ut_model_from_config(const ut_config *cfg, const ut_dataset *data, char *err, size_t n) {
    return ut_model_from_config_layout(cfg, data, NULL, err, n);
}

/* dist.pipeline_blocks as counts into out[0, P); 0, or -1 with a message
 * when it does not hold P positive counts. */
int ut_pipeline_blocks(const ut_config *cfg, int P, int *out, char *err, size_t n) {
    const char *p = cfg->pipeline_blocks;
    for (int s = 0; s < P; s++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1 << 20 || (s < P - 1 ? *end != ',' : *end != 0))
            return ut_errorf(err, n, "dist.pipeline_blocks: '%s' is not %d block counts >= 1 separated by commas "
                                     "(one per stage of dist.pipeline_parallel %d), e.g. \"%s\"",
                             cfg->pipeline_blocks, P, P, P == 2 ? "9,3" : P == 3 ? "5,4,3" : "4,3,3,2");
        out[s] = (int)v;
        p = end + 1;
    }
    return 0;
}

ut_model *ut_model_from_config_layout(const ut_config *cfg, const ut_dataset *data, const ut_model_layout *layout,
                                      char *err, size_t n) {
    ut_model_layout lay;
    int blocks[UT_MAX_PIPELINE_STAGES];
    if (layout && layout->pp_size > 1 && cfg->pipeline_blocks[0]) { /* the user's split of the blocks */
        if (layout->pp_size > UT_MAX_PIPELINE_STAGES)
            return ut_errorf(err, n, "dist.pipeline_parallel %d: at most %d stages", layout->pp_size,
                             UT_MAX_PIPELINE_STAGES), NULL;
        if (ut_pipeline_blocks(cfg, layout->pp_size, blocks, err, n)) return NULL;
        lay = *layout;
        lay.pp_blocks = blocks;
        layout = &lay;
    }
    ut_kv *opts = ut_kv_new();
    for (int i = 0; i < ut_kv_len(cfg->model_opts); i++)
        ut_kv_set(opts, ut_kv_key(cfg->model_opts, i), ut_kv_get(cfg->model_opts, ut_kv_key(cfg->model_opts, i)));
    /* the built-ins that read tokens or classify text take their sizes from the data */
    char num[32];
    bool text = !strcmp(cfg->model_name, "bow");
    bool pretrained = ut_kv_get(opts, "pretrained") != NULL;
    if (pretrained && strcmp(cfg->model_name, "bert") && strcmp(cfg->model_name, "gpt2") &&
        strcmp(cfg->model_name, "roberta") && strcmp(cfg->model_name, "bart") && strcmp(cfg->model_name, "t5")) {
        snprintf(err, n, "model.pretrained: model.name is %s; a Hugging Face directory is read by "
                         "model.name: bert (BERT or RoBERTa), roberta, gpt2, bart or t5 (as its config.json's "
                         "model_type)",
                 cfg->model_name);
        ut_kv_free(opts);
        return NULL;
    }
    /* pairs of texts: a model that can read them generates (model.task seq2seq) */
    bool seq2seq = !strcmp(cfg->data_name, "seq2seq_text");
    if (seq2seq && !ut_kv_get(opts, "task")) ut_kv_set(opts, "task", "seq2seq");
    if (seq2seq && strcmp(ut_kv_get(opts, "task"), "seq2seq") && strcmp(ut_kv_get(opts, "task"), "conditional_generation")) {
        snprintf(err, n, "model.task: %s, but data.name seq2seq_text trains a sequence-to-sequence model: set "
                         "model.task: seq2seq (or remove it)", ut_kv_get(opts, "task"));
        ut_kv_free(opts);
        return NULL;
    }
    if (seq2seq && strcmp(cfg->model_name, "bart") && strcmp(cfg->model_name, "t5")) {
        snprintf(err, n, "data.name seq2seq_text: model %s is not a sequence-to-sequence model; use model.name: "
                         "bart or t5 (model.pretrained: a BART or T5 directory)", cfg->model_name);
        ut_kv_free(opts);
        return NULL;
    }
    /* words with a tag each: bert and roberta tag them (config_check refuses the other built-ins) */
    if (!strcmp(cfg->data_name, "tagged_text") && !ut_kv_get(opts, "task")) ut_kv_set(opts, "task", "token_classification");
    /* texts to mask: bert and roberta predict the masked tokens (config_check refuses the other built-ins) */
    if (!strcmp(cfg->data_name, "mlm_text") && !ut_kv_get(opts, "task")) ut_kv_set(opts, "task", "masked_lm");
    /* the tags are the head's classes, over a checkpoint's id2label of others (run_ner passes num_labels; a
     * head of another size loads with model.ignore_mismatched_sizes) */
    if (!strcmp(cfg->data_name, "tagged_text") && data && data->num_classes > 0 && !ut_kv_get(opts, "num_labels")) {
        snprintf(num, sizeof num, "%lld", (long long)data->num_classes);
        ut_kv_set(opts, "num_labels", num);
    }
    /* bert, roberta, bart, gpt2 classifying: the head's size from the data unless
     * model.num_labels (or config.json's id2label) says */
    const char *task = ut_kv_get(opts, "task");
    bool classifier = !strcmp(cfg->model_name, "bert") || !strcmp(cfg->model_name, "roberta") ||
                      (!strcmp(cfg->model_name, "bart") && !seq2seq) ||
                      (!strcmp(cfg->model_name, "gpt2") && task && !strcmp(task, "sequence_classification"));
    if (classifier && data && data->num_classes > 0 && !ut_kv_get(opts, "num_labels") &&
        !ut_kv_get(opts, "num_classes")) {
        snprintf(num, sizeof num, "%lld", (long long)data->num_classes);
        ut_kv_set(opts, "num_classes", num);
    }
    /* a regression's head has one output, whatever a pretrained config.json's labels say */
    if (classifier && data && data->regression && !ut_kv_get(opts, "num_labels")) ut_kv_set(opts, "num_labels", "1");
    if (!classifier && data && data->multi_label) {
        snprintf(err, n, "model.problem_type multi_label_classification (%s holds lists of labels): model %s%s%s "
                         "does not classify them; the classifiers bert, roberta, bart and gpt2 (model.task: "
                         "sequence_classification) do", data->name, cfg->model_name, task ? " with task " : "",
                 task ? task : "");
        ut_kv_free(opts);
        return NULL;
    }
    if (!classifier && data && data->regression) {
        snprintf(err, n, "model.num_labels 1 (a regression: %s holds scores): model %s%s%s does not regress; the "
                         "classifiers bert, roberta, bart and gpt2 (model.task: sequence_classification) do",
                 data->name, cfg->model_name, task ? " with task " : "", task ? task : "");
        ut_kv_free(opts);
        return NULL;
    }
    if (data && data->vocab_size > 0 && (text || (!strcmp(cfg->model_name, "gpt2") && !pretrained)) &&
        !ut_kv_get(opts, "vocab_size")) {
        snprintf(num, sizeof num, "%lld", (long long)data->vocab_size);
        ut_kv_set(opts, "vocab_size", num);
    }
    if (data && data->num_classes > 0 && (text || !strcmp(cfg->model_name, "cnn")) &&
        !ut_kv_get(opts, "num_classes")) {
        snprintf(num, sizeof num, "%lld", (long long)data->num_classes);
        ut_kv_set(opts, "num_classes", num);
    }
    /* A tokenizer with more ids than the model has embedding rows would stop the
     * run at the first batch that holds such an id, perhaps hours in: refused
     * here, before anything runs. */
    if (pretrained && data && data->vocab_size > 0) {
        int64_t V = model_vocab(cfg, err, n);
        if (V < 0) {
            ut_kv_free(opts);
            return NULL;
        }
        if (data->vocab_size > V) {
            const char *tok = pretrained_tokenizer(cfg);
            snprintf(err, n, "model.pretrained %s: config.json's vocab_size is %lld, but the tokenizer (%s) has "
                             "%lld ids: a token from id %lld up would fail at the first batch that holds one; use "
                             "the tokenizer that came with the model",
                     ut_kv_get(opts, "pretrained"), (long long)V, tok ? tok : "data.tokenizer",
                     (long long)data->vocab_size, (long long)V);
            ut_kv_free(opts);
            return NULL;
        }
    }
    if (match_images(cfg, data, opts, err, n)) {
        ut_kv_free(opts);
        return NULL;
    }
    char why[512];
    if (ut_config_use_device(cfg, err, n)) {
        ut_kv_free(opts);
        return NULL;
    }
    ut_model *m = ut_model_create_layout(cfg->model_name, opts, (uint64_t)cfg->seed, ut_config_device(cfg), layout,
                                         why, sizeof why);
    ut_kv_free(opts);
    if (!m) {
        snprintf(err, n, "model: %s", why);
        return NULL;
    }
    /* recomputing activations is done block by block: the transformers have blocks */
    static const char *const blocked[] = {"gpt2", "bert", "roberta", "bart", "t5"};
    bool has_blocks = false;
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++) has_blocks |= !strcmp(cfg->model_name, blocked[i]);
    if (cfg->checkpoint_activations && !has_blocks) {
        snprintf(err, n, "train.checkpoint_activations: model %s has no transformer blocks to recompute "
                         "(it applies to gpt2, bert, roberta, bart and t5); remove it", cfg->model_name);
        ut_model_free(m);
        return NULL;
    }
    m->checkpoint_activations = cfg->checkpoint_activations;
    /* bert, roberta, bart: every example must fit the learned positions */
    if (seq2seq) {
        int64_t pos = position_room(cfg, m);
        const char *key = cfg->max_source_len > pos ? "data.max_source_len" : "data.max_target_len";
        int64_t v = cfg->max_source_len > pos ? cfg->max_source_len : cfg->max_target_len;
        if (pos > 0 && v > pos) {
            snprintf(err, n, "%s: %lld is more than the model's max_position_embeddings %lld", key, (long long)v,
                     (long long)pos);
            ut_model_free(m);
            return NULL;
        }
    }
    int64_t room = strcmp(cfg->data_name, "tsv_text") && strcmp(cfg->data_name, "tagged_text") &&
                           strcmp(cfg->data_name, "mlm_text") ? 0 : position_room(cfg, m);
    const ut_tensor *rob = ut_model_param(m, "roberta.embeddings.position_embeddings.weight");
    if (room > 0 && cfg->max_len > room) {
        if (rob)
            snprintf(err, n, "data.max_len: %lld is more than the model's %lld positions (max_position_embeddings "
                             "%lld less pad_token_id + 1)", (long long)cfg->max_len, (long long)room,
                     (long long)rob->ne[0]);
        else
            snprintf(err, n, "data.max_len: %lld is more than the model's max_position_embeddings %lld",
                     (long long)cfg->max_len, (long long)room);
        ut_model_free(m);
        return NULL;
    }
    return m;
}
