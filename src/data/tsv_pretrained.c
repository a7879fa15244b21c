/* TSV text classification with a pretrained tokenizer: each example is the
 * encoded sentence (or sentence pair, GLUE's sentence1 / sentence2) with its
 * special tokens, token type ids and attention mask, padded to max_len; and
 * the batch trim that makes padding dynamic (to the longest in the batch). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "utrain/base.h"

typedef struct {
    int32_t *x, *labels;     /* x: (n, 3, max_len) ids, type ids, mask */
    float *scores;           /* a regression's labels (labels NULL), else NULL */
    int32_t *multi;          /* multi-label: (n, K) 0/1, each example's labels (labels NULL), else NULL */
    int64_t K;               /* multi-label: the labels' count */
    char **names;            /* labels that are names: class k's (nnames), else NULL */
    int64_t nnames;
    int64_t *index;          /* the index column, or NULL */
    int64_t max_len;
    char *columns;           /* ds->columns */
} ptsv_impl;

static int ptsv_get(ut_dataset *ds, int64_t i, void *x, void *y, char *err, size_t n) {
    ptsv_impl *m = ds->impl;
    if (i < 0 || i >= ds->n)
        return ut_errorf(err, n, "%s: example %lld out of range [0, %lld)", ds->name, (long long)i,
                         (long long)ds->n);
    memcpy(x, m->x + i * 3 * m->max_len, (size_t)(3 * m->max_len) * sizeof(int32_t));
    if (m->scores) *(float *)y = m->scores[i];
    else if (m->multi) memcpy(y, m->multi + i * m->K, (size_t)m->K * sizeof(int32_t));
    else *(int32_t *)y = m->labels[i];
    return 0;
}

static void impl_free(ptsv_impl *m);

static void ptsv_free(ut_dataset *ds) {
    impl_free(ds->impl);
    ut_free((char *)ds->name);
    ut_free(ds);
}

/* Encodes every row into m; errors name the file and line. */
static int encode_rows(const char *path, const ut__tsv *t, ut_tokenizer *tok, ptsv_impl *m, char *err,
                       size_t n) {
    ut_tok_encoding e = {0};
    ut_tok_opts o = {.max_len = m->max_len, .pad_to = m->max_len};
    int rc = 0;
    for (int64_t k = 0; k < t->n && !rc; k++) {
        char why[512];
        if (ut_tokenizer_encode(tok, t->sentence[k], t->sentence2 ? t->sentence2[k] : NULL, &o, &e, why,
                                sizeof why)) {
            rc = ut_errorf(err, n, "%s:%lld: %s", path, (long long)t->line[k], why);
            break;
        }
        int32_t *x = m->x + k * 3 * m->max_len;
        memcpy(x, e.ids, (size_t)m->max_len * sizeof *x);
        memcpy(x + m->max_len, e.type_ids, (size_t)m->max_len * sizeof *x);
        memcpy(x + 2 * m->max_len, e.mask, (size_t)m->max_len * sizeof *x);
        if (m->scores) m->scores[k] = (float)t->score[k];
        else if (m->labels) m->labels[k] = (int32_t)t->label[k];
    }
    ut_tok_encoding_free(&e);
    return rc;
}

static void impl_free(ptsv_impl *m) {
    ut_free(m->x);
    ut_free(m->labels);
    ut_free(m->scores);
    ut_free(m->multi);
    for (int64_t k = 0; k < m->nnames; k++) ut_free(m->names[k]);
    ut_free(m->names);
    ut_free(m->index);
    ut_free(m->columns);
    ut_free(m);
}

/* m->names: a copy of names (count of them) */
static void keep_names(ptsv_impl *m, const char *const *names, int64_t count) {
    m->nnames = count;
    m->names = ut_malloc_check((size_t)(count ? count : 1) * sizeof *m->names);
    for (int64_t k = 0; k < count; k++) m->names[k] = ut__data_strdup(names[k]);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The distinct names of v (n of them), sorted, in a new array (ut_free it;
 * the names stay v's); *count of them. */
static char **distinct_names(char *const *v, int64_t n, int64_t *count) {
    char **own = ut_malloc_check((size_t)(n ? n : 1) * sizeof *own);
    if (n) memcpy(own, v, (size_t)n * sizeof *own);
    qsort(own, (size_t)n, sizeof *own, by_name);
    *count = 0;
    for (int64_t k = 0; k < n; k++)
        if (!*count || strcmp(own[*count - 1], own[k])) own[(*count)++] = own[k];
    return own;
}

/* t's labels that are names into class ids: given names (count), or the
 * file's own sorted; m->names gets a copy of them. 0, or -1 naming the line. */
static int name_labels(const char *path, ut__tsv *t, const char *const *names, int64_t count, ptsv_impl *m,
                       char *err, size_t n) {
    char **own = NULL;
    if (!names) { /* the file's distinct names, sorted */
        own = distinct_names(t->label_text, t->n, &count);
        names = (const char *const *)own;
    }
    int rc = 0;
    for (int64_t k = 0; k < t->n && !rc; k++) {
        int64_t id = 0;
        while (id < count && strcmp(names[id], t->label_text[k])) id++;
        if (id == count)
            rc = ut_errorf(err, n, "%s:%lld: label '%.40s' is not one of the %lld label names of the train file (%s%s%s%s)",
                           path, (long long)t->line[k], t->label_text[k], (long long)count, names[0],
                           count > 1 ? ", " : "", count > 1 ? names[1] : "", count > 2 ? ", ..." : "");
        t->label[k] = id;
    }
    keep_names(m, names, count);
    ut_free(own);
    return rc;
}


/* A multi-label row's list, split in place at its commas into its labels
 * (spaces around each trimmed) at lab (at most max); returns their count
 * (none for an empty or blank field), or -1 naming the line for an empty
 * label inside a list ("1,,2", a trailing comma). */
static int64_t split_list(const char *path, int64_t line, char *s, char **lab, int64_t max, char *err, size_t n) {
    s += strspn(s, " ");
    if (!*s) return 0;
    int64_t k = 0;
    for (char *p = s;; p++) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        p += strspn(p, " ");
        size_t len = strlen(p);
        while (len && p[len - 1] == ' ') p[--len] = 0;
        if (!len)
            return ut_errorf(err, n, "%s:%lld: an empty label in the list (labels are separated by commas: 2,6 or "
                                     "anger,joy)", path, (long long)line);
        if (k < max) lab[k] = p;
        k++;
        if (!comma) return k;
        p = comma;
    }
}

/* Multi-label: each row's list of labels (label_text: integers or names,
 * one kind in a file, possibly none) into m->multi (t->n x K, 1 where the
 * example has the label). With names (count) the names take their ids;
 * without, integers take num_classes (0: the largest + 1) and names the
 * file's distinct names sorted (m->names gets them). 0, or -1 naming the
 * line. */
static int multi_labels(const char *path, ut__tsv *t, const char *const *names, int64_t count, int64_t num_classes,
                        ptsv_impl *m, char *err, size_t n) {
    /* every row's labels, split in place: lab[at[k] .. at[k + 1]) */
    int64_t total = 0, *at = ut_malloc_check((size_t)(t->n + 1) * sizeof *at);
    for (int64_t k = 0; k < t->n; k++) { /* at most one more label than commas */
        total++;
        for (const char *p = t->label_text[k]; (p = strchr(p, ',')); p++) total++;
    }
    char **lab = ut_malloc_check((size_t)(total ? total : 1) * sizeof *lab), **own = NULL;
    int rc = 0, kind = -1; /* 1 integers, 0 names */
    int64_t max = -1, used = 0, v, bad = -1;
    for (int64_t k = 0; k < t->n && !rc; k++) {
        at[k] = used;
        int64_t got = split_list(path, t->line[k], t->label_text[k], lab + used, total - used, err, n);
        if (got < 0) {
            rc = -1;
            break;
        }
        for (int64_t j = used; j < used + got && !rc; j++) {
            bool isint = ut__is_class(lab[j], &v);
            char *end;
            (void)strtod(lab[j], &end);
            if (!isint && !*end)
                rc = ut_errorf(err, n, "%s:%lld: bad label '%.40s' (expected an integer >= 0, a class, or a name)", path,
                               (long long)t->line[k], lab[j]);
            else if (kind >= 0 && isint != kind)
                rc = ut_errorf(err, n, "%s:%lld: label '%.40s' where line %lld's is '%.40s': a file's labels are all "
                                       "classes (integers >= 0) or all names (anger, joy, ...)", path,
                               (long long)t->line[k], lab[j], (long long)t->line[bad], lab[0]);
            if (kind < 0) kind = isint, bad = k;
            if (isint && v > max) max = v;
        }
        used += got;
    }
    at[t->n] = used;
    if (!rc && kind == 1 && names)
        rc = ut_errorf(err, n, "%s:%lld: label '%.40s': the train file's labels are names (%s, ...), this file's are "
                               "integers", path, (long long)t->line[bad], lab[0], names[0]);
    else if (!rc && kind == 0 && !names && num_classes > 0)
        rc = ut_errorf(err, n, "%s:%lld: label '%.40s': labels that are names take their classes from the train file's "
                               "names (model.num_labels %lld without them)", path, (long long)t->line[bad], lab[0],
                       (long long)num_classes);
    if (!rc && kind == 0 && !names) { /* the file's distinct names, sorted */
        own = distinct_names(lab, used, &count);
        names = (const char *const *)own;
    }
    int64_t K = names ? count : num_classes > 0 ? num_classes : max + 1;
    if (!rc && K < 1)
        rc = ut_errorf(err, n, "%s: no example has a label: the labels' count is not known (set model.num_labels)",
                       path);
    if (!rc && ut_memory_check(4.0 * (double)t->n * (double)K,
                               ut_fmt("%s: %lld labels (the largest label + 1) of %lld examples", path, (long long)K,
                                      (long long)t->n), err, n))
        rc = -1;
    if (!rc) {
        m->K = K;
        m->multi = ut_calloc_check((size_t)(t->n * K), sizeof *m->multi);
    }
    for (int64_t k = 0; k < t->n && !rc; k++)
        for (int64_t j = at[k]; j < at[k + 1] && !rc; j++) {
            int64_t id = 0;
            if (names)
                while (id < count && strcmp(names[id], lab[j])) id++;
            else
                ut__is_class(lab[j], &id);
            if (names && id == count)
                rc = ut_errorf(err, n, "%s:%lld: label '%.40s' is not one of the %lld label names of the train file "
                                       "(%s%s%s%s)", path, (long long)t->line[k], lab[j], (long long)count, names[0],
                               count > 1 ? ", " : "", count > 1 ? names[1] : "", count > 2 ? ", ..." : "");
            else if (id >= K)
                rc = ut_errorf(err, n, "%s:%lld: label %lld >= num_classes %lld (from the train file)", path,
                               (long long)t->line[k], (long long)id, (long long)K);
            else
                m->multi[k * K + id] = 1;
        }
    if (!rc && names) keep_names(m, names, count);
    ut_free(own);
    ut_free(lab);
    ut_free(at);
    return rc;
}

static ut_dataset *open_tsv(const char *path, const ut_text_columns *cols, ut_tokenizer *tok, int64_t max_len,
                            int64_t num_classes, const char *const *names, int64_t count, bool multi, char *err,
                            size_t n);

ut_dataset *ut_tsv_dataset_open_pretrained(const char *path, const ut_text_columns *cols, ut_tokenizer *tok,
                                           int64_t max_len, int64_t num_classes, char *err, size_t n) {
    return open_tsv(path, cols, tok, max_len, num_classes, NULL, 0, false, err, n);
}

ut_dataset *ut_tsv_dataset_open_named(const char *path, const ut_text_columns *cols, ut_tokenizer *tok, int64_t max_len,
                                      const char *const *names, int64_t count, char *err, size_t n) {
    if (!names || count < 1) return ut_errorf(err, n, "%s: no label names given", path), NULL;
    return open_tsv(path, cols, tok, max_len, count, names, count, false, err, n);
}

ut_dataset *ut_tsv_dataset_open_multilabel(const char *path, const ut_text_columns *cols, ut_tokenizer *tok,
                                           int64_t max_len, const char *const *names, int64_t count, char *err,
                                           size_t n) {
    if (names && count < 1) return ut_errorf(err, n, "%s: no label names given", path), NULL;
    return open_tsv(path, cols, tok, max_len, count > 0 ? count : 0, names, names ? count : 0, true, err, n);
}

static ut_dataset *open_tsv(const char *path, const ut_text_columns *cols, ut_tokenizer *tok, int64_t max_len,
                            int64_t num_classes, const char *const *names, int64_t count, bool multi, char *err,
                            size_t n) {
    if (max_len < 2 || max_len > 1000000000) {
        ut_errorf(err, n, "%s: max_len must be in [2, 1e9] (got %lld)", path, (long long)max_len);
        return NULL;
    }
    bool regression = num_classes == 1 && !names && !multi;
    ut__tsv t;
    if (ut__tsv_read(path, multi ? UT__TSV_MULTI : regression ? UT__TSV_SCORES : UT__TSV_NAMES, cols, &t, err, n))
        return NULL;
    ptsv_impl *m = ut_calloc_check(1, sizeof *m);
    if (multi) {
        if (t.labeled ? multi_labels(path, &t, names, count, num_classes, m, err, n)
                      : (m->K = names ? count : num_classes) < 1 ?
                          ut_errorf(err, n, "%s:1: no 'label' (or 'labels') column: the train file's labels give "
                                            "the classes", path)
                      : 0) {
            impl_free(m);
            ut__tsv_free(&t);
            return NULL;
        }
        if (!t.labeled) m->multi = ut_calloc_check((size_t)(t.n * m->K), sizeof *m->multi);
        if (!t.labeled && names) keep_names(m, names, count);
    }
    if (t.labeled && !t.names && names && !multi) {
        ut_errorf(err, n, "%s:%lld: label '%.40s': the train file's labels are names (%s, ...), this file's are "
                          "integers", path, (long long)t.line[0], t.label_text[0], names[0]);
        impl_free(m);
        ut__tsv_free(&t);
        return NULL;
    }
    if (t.names && num_classes > 0 && !names) {
        ut_errorf(err, n, "%s:%lld: label '%.40s': labels that are names take their classes from the train file's "
                          "names (model.num_labels %lld without them)", path, (long long)t.line[0], t.label_text[0],
                  (long long)num_classes);
        impl_free(m);
        ut__tsv_free(&t);
        return NULL;
    }
    if (t.names && name_labels(path, &t, names, count, m, err, n)) {
        impl_free(m);
        ut__tsv_free(&t);
        return NULL;
    }
    if (names && !t.names && !multi) keep_names(m, names, count); /* an unlabeled (test) file: for its predictions */
    int64_t classes = multi ? m->K : regression ? 0 : m->names ? m->nnames : num_classes > 0 ? num_classes : t.max_label + 1;
    for (int64_t k = 0; t.labeled && !regression && !multi && k < t.n; k++)
        if (t.label[k] >= classes) {
            ut_errorf(err, n, "%s:%lld: label %lld >= num_classes %lld (from the train file)", path,
                      (long long)t.line[k], (long long)t.label[k], (long long)classes);
            impl_free(m);
            ut__tsv_free(&t);
            return NULL;
        }
    if (ut_memory_check(12.0 * (double)t.n * (double)max_len,
                        ut_fmt("%s: max_len %lld (ids, type ids and masks of %lld examples)", path,
                               (long long)max_len, (long long)t.n), err, n)) {
        impl_free(m);
        ut__tsv_free(&t);
        return NULL;
    }
    m->max_len = max_len;
    m->x = ut_malloc_check((size_t)(t.n * 3 * max_len) * sizeof(int32_t));
    m->labels = regression || multi ? NULL : ut_malloc_check((size_t)t.n * sizeof(int32_t));
    m->scores = regression ? ut_malloc_check((size_t)t.n * sizeof(float)) : NULL;
    m->index = NULL;
    if (t.has_index) {
        m->index = ut_malloc_check((size_t)t.n * sizeof *m->index);
        memcpy(m->index, t.index, (size_t)t.n * sizeof *m->index);
    }
    if (t.columns) m->columns = ut__data_strdup(t.columns);
    ut_dataset *ds = ut_calloc_check(1, sizeof *ds);
    *ds = (ut_dataset){.name = ut__data_strdup(path), .n = t.n, .x_ndim = 2, .x_ne = {3, max_len},
                       .y_ndim = multi ? 1 : 0, .y_ne = {multi ? classes : 0}, .x_dtype = UT_I32,
                       .y_dtype = regression ? UT_F32 : UT_I32, .num_classes = classes, .regression = regression,
                       .multi_label = multi,
                       .label_names = (const char *const *)m->names,
                       .vocab_size = ut_tokenizer_vocab_size(tok), .unlabeled = !t.labeled,
                       .token_planes = true, .example_id = m->index, .columns = m->columns, .get = ptsv_get,
                       .free = ptsv_free,
                       .impl = m};
    int rc = encode_rows(path, &t, tok, m, err, n);
    ut__tsv_free(&t);
    if (rc) {
        ut_dataset_free(ds);
        return NULL;
    }
    return ds;
}

int64_t ut_tok_batch_trim(ut_batch *b, int64_t max_len) {
    int32_t *x = b->x;
    int64_t L = 1;
    for (int64_t k = 0; k < b->count; k++) {
        int64_t len = ut_mask_len(x + k * 3 * max_len + 2 * max_len, max_len);
        if (len > L) L = len;
    }
    /* rows move towards the front only, in order, so memmove in place is safe */
    for (int64_t r = 0; r < 3 * b->count; r++) memmove(x + r * L, x + r * max_len, (size_t)L * sizeof *x);
    return L;
}

void ut_tok_labels_trim(ut_batch *b, int64_t max_len) {
    const int32_t *x = b->x;
    int32_t *y = b->y;
    int64_t L = 1;
    for (int64_t k = 0; k < b->count; k++) {
        int64_t len = ut_mask_len(x + k * 3 * max_len + 2 * max_len, max_len);
        if (len > L) L = len;
    }
    for (int64_t r = 0; y && r < b->count; r++) memmove(y + r * L, y + r * max_len, (size_t)L * sizeof *y);
    b->y_len = L;
}

int ut_tsv_label_kind(const char *path, const ut_text_columns *cols, char *err, size_t n) {
    ut__tsv t;
    if (ut__tsv_read(path, UT__TSV_TEXT, cols, &t, err, n)) return -1;
    if (t.label_arrays) {
        ut__tsv_free(&t);
        return UT_LABELS_LISTS;
    }
    bool real = false, numbers = t.labeled;
    for (int64_t k = 0; k < t.n && numbers; k++) {
        const char *s = t.label_text[k];
        char *end;
        double v = strtod(s, &end);
        numbers = end != s && !*end && isfinite(v) && !strpbrk(s, "xXnN"); /* no hex, inf, nan */
        real |= strpbrk(s, ".eE") != NULL;
    }
    ut__tsv_free(&t);
    return numbers && real ? UT_LABELS_SCORES : UT_LABELS_CLASSES;
}
