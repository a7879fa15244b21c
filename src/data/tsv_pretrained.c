/* TSV text classification with a pretrained tokenizer: each example is the
 * encoded sentence (or sentence pair, GLUE's sentence1 / sentence2) with its
 * special tokens, token type ids and attention mask, padded to max_len; and
 * the batch trim that makes padding dynamic (to the longest in the batch). */
#include <string.h>

#include "data_internal.h"
#include "utrain/base.h"

typedef struct {
    int32_t *x, *labels;     /* x: (n, 3, max_len) ids, type ids, mask */
    float *scores;           /* a regression's labels (labels NULL), else NULL */
    int64_t *index;          /* the index column, or NULL */
    int64_t max_len;
} ptsv_impl;

static int ptsv_get(ut_dataset *ds, int64_t i, void *x, void *y, char *err, size_t n) {
    ptsv_impl *m = ds->impl;
    if (i < 0 || i >= ds->n)
        return ut_errorf(err, n, "%s: example %lld out of range [0, %lld)", ds->name, (long long)i,
                         (long long)ds->n);
    memcpy(x, m->x + i * 3 * m->max_len, (size_t)(3 * m->max_len) * sizeof(int32_t));
    if (m->scores) *(float *)y = m->scores[i];
    else *(int32_t *)y = m->labels[i];
    return 0;
}

static void ptsv_free(ut_dataset *ds) {
    ptsv_impl *m = ds->impl;
    ut_free(m->x);
    ut_free(m->labels);
    ut_free(m->scores);
    ut_free(m->index);
    ut_free(m);
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
        else m->labels[k] = (int32_t)t->label[k];
    }
    ut_tok_encoding_free(&e);
    return rc;
}

ut_dataset *ut_tsv_dataset_open_pretrained(const char *path, ut_tokenizer *tok, int64_t max_len,
                                           int64_t num_classes, char *err, size_t n) {
    if (max_len < 2 || max_len > 1000000000) {
        ut_errorf(err, n, "%s: max_len must be in [2, 1e9] (got %lld)", path, (long long)max_len);
        return NULL;
    }
    bool regression = num_classes == 1;
    ut__tsv t;
    if (ut__tsv_read(path, regression, &t, err, n)) return NULL;
    int64_t classes = regression ? 0 : num_classes > 0 ? num_classes : t.max_label + 1;
    for (int64_t k = 0; t.labeled && !regression && k < t.n; k++)
        if (t.label[k] >= classes) {
            ut_errorf(err, n, "%s:%lld: label %lld >= num_classes %lld (from the train file)", path,
                      (long long)t.line[k], (long long)t.label[k], (long long)classes);
            ut__tsv_free(&t);
            return NULL;
        }
    if (ut_memory_check(12.0 * (double)t.n * (double)max_len,
                        ut_fmt("%s: max_len %lld (ids, type ids and masks of %lld examples)", path,
                               (long long)max_len, (long long)t.n), err, n)) {
        ut__tsv_free(&t);
        return NULL;
    }
    ptsv_impl *m = ut_malloc_check(sizeof *m);
    m->max_len = max_len;
    m->x = ut_malloc_check((size_t)(t.n * 3 * max_len) * sizeof(int32_t));
    m->labels = regression ? NULL : ut_malloc_check((size_t)t.n * sizeof(int32_t));
    m->scores = regression ? ut_malloc_check((size_t)t.n * sizeof(float)) : NULL;
    m->index = NULL;
    if (t.has_index) {
        m->index = ut_malloc_check((size_t)t.n * sizeof *m->index);
        memcpy(m->index, t.index, (size_t)t.n * sizeof *m->index);
    }
    ut_dataset *ds = ut_calloc_check(1, sizeof *ds);
    *ds = (ut_dataset){.name = ut__data_strdup(path), .n = t.n, .x_ndim = 2, .x_ne = {3, max_len},
                       .y_ndim = 0, .x_dtype = UT_I32, .y_dtype = regression ? UT_F32 : UT_I32,
                       .num_classes = classes, .regression = regression,
                       .vocab_size = ut_tokenizer_vocab_size(tok), .unlabeled = !t.labeled,
                       .token_planes = true, .example_id = m->index, .get = ptsv_get, .free = ptsv_free,
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
