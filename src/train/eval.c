/* Default hooks, the forward step through them, batch metrics, and evaluation
 * of a whole dataset. */
#include <math.h>
#include <string.h>

#include "run_internal.h"

/* ---- default hooks ---- */
/* Token planes (count, 3, max_len) copied into the step's arena and padded
 * to the longest attention mask of the batch (the loader's buffer, which a
 * stand-in batch reuses, is left as it is). */
static ut_tensor *collate_token_planes(ut_ctx *ctx, const ut_dataset *ds, const ut_batch *b) {
    size_t bytes = (size_t)(b->count * 3 * ds->x_ne[1]) * sizeof(int32_t);
    ut_batch copy = *b;
    copy.x = ut_ctx_alloc(ctx, bytes);
    memcpy(copy.x, b->x, bytes);
    int64_t L = ut_tok_batch_trim(&copy, ds->x_ne[1]);
    return ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){b->count, 3, L}, copy.x);
}

/* b's y (count, y_ne...) on ctx's device: from a loader's page-locked
 * buffer with an asynchronous copy (ut_forward_batch fences it), else copied
 * at once. */
static ut_tensor *collate_y(ut_ctx *ctx, const ut_dataset *ds, const ut_batch *b) {
    int64_t ne[4] = {b->count};
    for (int i = 0; i < ds->y_ndim; i++) ne[1 + i] = ds->y_ne[i];
    if (b->y_len) ne[1] = b->y_len; /* a trimmed seq2seq batch */
    return b->inputs ? ut_tensor_from_async(ctx, ds->y_dtype, 1 + ds->y_ndim, ne, b->y)
                     : ut_tensor_from(ctx, ds->y_dtype, 1 + ds->y_ndim, ne, b->y);
}

static int default_collate(void *user, ut_ctx *ctx, const ut_dataset *ds, const ut_batch *b,
                           ut_tensor **x, ut_tensor **y) {
    (void)user;
    int64_t xne[4] = {b->count};
    for (int i = 0; i < ds->x_ndim; i++) xne[1 + i] = ds->x_ne[i];
    if (b->x_len) xne[2] = b->x_len; /* a trimmed seq2seq batch */
    if (ut_tok_planes(ds)) *x = collate_token_planes(ctx, ds, b);
    else if (b->inputs) *x = ut_tensor_from_async(ctx, ds->x_dtype, 1 + ds->x_ndim, xne, b->x);
    else *x = ut_tensor_from(ctx, ds->x_dtype, 1 + ds->x_ndim, xne, b->x);
    *y = collate_y(ctx, ds, b);
    return *x && *y ? 0 : -1;
}

static ut_tensor *default_loss(void *user, ut_ctx *ctx, ut_model *m, ut_tensor *output, ut_tensor *y) {
    (void)user;
    return ut_model_loss(m, ctx, output, y);
}

static int default_forward(void *user, ut_ctx *ctx, ut_model *m, ut_tensor *x, ut_tensor *y,
                           ut_step_outputs *out);

void ut_hooks_resolve(ut_hooks *out, const ut_hooks *user) {
    memset(out, 0, sizeof *out);
    if (user) *out = *user;
    if (!out->collate) out->collate = default_collate;
    if (!out->compute_loss) out->compute_loss = default_loss;
    if (!out->forward_step) out->forward_step = default_forward;
}

/* Default forward_step: the model, then the (resolved) compute_loss hook;
 * ut_forward_batch passes the resolved hook table as `user` for it. */
static int default_forward(void *user, ut_ctx *ctx, ut_model *m, ut_tensor *x, ut_tensor *y,
                           ut_step_outputs *out) {
    const ut_hooks *h = user;
    out->output = ut_model_forward(m, ctx, x);
    out->loss = h->compute_loss(h->user, ctx, m, out->output, y);
    return out->loss ? 0 : -1;
}

/* Whether the model's prepare runs on the loader thread: it has one, and the
 * hooks that would see the collated x are the defaults. */
static bool prepares(const ut_hooks *h, const ut_model *m) {
    return m->prepare && h->collate == default_collate && h->forward_step == default_forward;
}

/* Whether nothing but the loss is read of a forward step's output: the
 * default loss and no metrics hook, and neither classes nor scores (whose
 * metrics and stored predictions read the output). The model may then skip
 * making its output (ut_model_forward_loss_inputs). */
static bool loss_alone(const ut_hooks *h, const ut_dataset *ds, const ut_ctx *ctx) {
    /* a masked language model's accuracy is an evaluation's (training reports the loss) */
    return h->compute_loss == default_loss && !h->metrics && ut_dataset_outputs(ds) == 0 &&
           !(ds->masked_lm && !ut_ctx_training(ctx));
}

static int prepare_thunk(void *user, const ut_host_array *x, ut_inputs *in, char *err, size_t n) {
    const ut_model *m = user;
    return m->prepare(m, x, in, err, n);
}

ut_loader *ut_run_loader(const ut_hooks *h, ut_model *m, ut_dataset *ds, ut_sampler *s, int prefetch) {
    bool p = prepares(h, m);
    return ut_loader_new_opts(ds, s, prefetch, &(ut_loader_opts){.prepare = p ? prepare_thunk : NULL,
                                                                 .user = p ? m : NULL,
                                                                 .device = m->params.device});
}

int ut_forward_batch(const ut_hooks *h, ut_ctx *ctx, ut_model *m, const ut_dataset *ds,
                     const ut_batch *b, ut_step_outputs *out, ut_tensor **y, char *err, size_t n) {
    ut_tensor *x = NULL;
    memset(out, 0, sizeof *out);
    int rc = 0;
    if (b->inputs && b->inputs->n > 0 && prepares(h, m)) {
        /* the loader prepared the model's arrays: y and each of them go up
         * with one asynchronous copy, and the model does no host work */
        *y = collate_y(ctx, ds, b);
        if (*y && loss_alone(h, ds, ctx)) { /* the head and loss in one op where the model has them */
            out->loss = ut_model_forward_loss_inputs(m, ctx, b->inputs, *y, &out->output);
        } else {
            out->output = *y ? ut_model_forward_inputs(m, ctx, b->inputs) : NULL;
            out->loss = out->output ? h->compute_loss(h->user, ctx, m, out->output, *y) : NULL;
        }
    } else {
        rc = h->collate(h->user, ctx, ds, b, &x, y);
        if (b->inputs) ut_inputs_fence(ctx, b->inputs); /* the loader's buffers are read until here */
        if (!rc && h->forward_step == default_forward && loss_alone(h, ds, ctx)) {
            /* the head and loss in one op where the model has them */
            out->loss = ut_model_forward_loss(m, ctx, x, *y, &out->output);
            rc = out->loss ? 0 : -1;
        } else if (!rc) {
            /* the default forward step reads the other resolved hooks */
            void *u = h->forward_step == default_forward ? (void *)h : h->user;
            rc = h->forward_step(u, ctx, m, x, *y, out);
        }
    }
    if (rc || !out->loss || ut_ctx_error(ctx)) {
        snprintf(err, n, "forward step failed: %s",
                 ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "a hook returned an error");
        return -1;
    }
    if (ut_nelem(out->loss) != 1) {
        snprintf(err, n, "forward step: the loss must be a scalar");
        return -1;
    }
    return 0;
}

/* ---- the stand-in for an empty share ---- */
int ut_standin_batch(ut_dataset *ds, ut_batch *b, char *err, size_t n) {
    if (b->count == 1 && b->x) return 0; /* made by an earlier call */
    size_t xb = ut_dtype_size(ds->x_dtype), yb = ut_dtype_size(ds->y_dtype);
    for (int i = 0; i < ds->x_ndim; i++) xb *= (size_t)ds->x_ne[i];
    for (int i = 0; i < ds->y_ndim; i++) yb *= (size_t)ds->y_ne[i];
    *b = (ut_batch){.count = 1, .x = ut_calloc_check(1, xb), .y = ut_calloc_check(1, yb)};
    if (ds->n < 1 || ds->get(ds, 0, b->x, b->y, err, n)) {
        if (ds->n < 1) snprintf(err, n, "%s: no example to stand in for an empty share", ds->name);
        ut_standin_free(b);
        return -1;
    }
    if (ut_seq2seq_planes(ds)) ut_seq2seq_batch_trim(b, ds->x_ne[1]); /* as the loader's batches are */
    else if (ut_tok_labels(ds)) ut_tok_labels_trim(b, ds->x_ne[1]);
    return 0;
}

void ut_standin_free(ut_batch *b) {
    ut_free(b->x);
    ut_free(b->y);
    *b = (ut_batch){0};
}

/* ---- metrics ---- */
/* o itself, or (stored in bf16/fp16 by autocast) a float32 copy of it. */
static const ut_tensor *as_f32(const ut_tensor *o) {
    if ((o->dtype != UT_BF16 && o->dtype != UT_F16) || !o->ctx) return o;
    const ut_tensor *f = ut_tensor_to(o->ctx, o, UT_F32);
    return f ? f : o;
}

/* A host copy of a contiguous tensor's contents (ut_free it); NULL if it
 * cannot be read. */
static void *host_copy(const ut_tensor *t) {
    size_t bytes = (size_t)ut_nelem(t) * ut_dtype_size(t->dtype);
    void *v = ut_malloc_check(bytes ? bytes : 1);
    if (ut_tensor_get(t, v, bytes)) {
        ut_free(v);
        return NULL;
    }
    return v;
}

/* Rows whose largest output is the label (the first largest on ties); with
 * cm (C x C) each row counted at (label, prediction) too. */
static int64_t correct_predictions(const ut_tensor *out, const ut_tensor *y, double *cm) {
    out = as_f32(out);
    int64_t rows = out->ne[0], C = out->ne[out->ndim - 1], hits = 0;
    float *o = host_copy(out);
    int32_t *label = host_copy(y);
    for (int64_t r = 0; o && label && r < rows; r++) {
        int64_t best = 0;
        for (int64_t c = 1; c < C; c++)
            if (o[r * C + c] > o[r * C + best]) best = c;
        hits += best == label[r];
        if (cm && label[r] >= 0 && label[r] < C) cm[label[r] * C + best] += 1;
    }
    ut_free(o);
    ut_free(label);
    return hits;
}

/* A multi-label batch: the examples whose predicted labels (an output
 * above 0, a probability above 0.5) are exactly their labels, as
 * scikit-learn's accuracy_score takes multi-label data; with counts (K x 3)
 * each label's true positives, false positives and false negatives added. */
static int64_t exact_label_sets(const ut_tensor *out, const ut_tensor *y, double *counts) {
    out = as_f32(out);
    int64_t rows = out->ne[0], K = out->ne[1], hits = 0;
    float *o = host_copy(out);
    int32_t *label = host_copy(y);
    for (int64_t r = 0; o && label && r < rows; r++) {
        bool all = true;
        for (int64_t k = 0; k < K; k++) {
            bool p = o[r * K + k] > 0, t = label[r * K + k] != 0;
            all &= p == t;
            if (counts) counts[k * 3 + (p && t ? 0 : p ? 1 : 2)] += p || t;
        }
        hits += all;
    }
    ut_free(o);
    ut_free(label);
    return hits;
}

/* A masked language model's batch: its predictions (the first largest
 * logit) of the labeled positions' tokens (targets y (B, T) other than
 * -100) right into *right, of *count; out is the logits of every position
 * (B, T, V) or of the labeled ones alone, in order (M, V: bert's rows,
 * one ignored row when none is labeled). false if the shapes are not those. */
static bool mlm_batch(const ut_tensor *out, const ut_tensor *y, int64_t *right, int64_t *count) {
    if (!out || !ut_is_contiguous(out) || !y || y->ndim != 2 || y->dtype != UT_I32 || !ut_is_contiguous(y) ||
        (out->ndim != 2 && out->ndim != 3) || (out->ndim == 3 && (out->ne[0] != y->ne[0] || out->ne[1] != y->ne[1])))
        return false;
    out = as_f32(out);
    int64_t rows = out->ndim == 3 ? out->ne[0] * out->ne[1] : out->ne[0], V = out->ne[out->ndim - 1];
    int64_t N = y->ne[0] * y->ne[1], labeled = 0;
    int32_t *label = host_copy(y);
    for (int64_t i = 0; label && i < N; i++) labeled += label[i] != -100;
    if (!label || (out->ndim == 2 && rows != labeled && !(labeled == 0 && rows == 1))) {
        ut_free(label);
        return false;
    }
    float *o = host_copy(out);
    *right = *count = 0;
    for (int64_t i = 0, r = 0; o && i < N; i++) {
        if (label[i] == -100) continue;
        const float *row = o + (out->ndim == 3 ? i : r++) * V;
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        *right += best == label[i];
        ++*count;
    }
    bool ok = o != NULL;
    ut_free(o);
    ut_free(label);
    return ok;
}

/* A token classifier's batch, logits (B, T, K) and targets (B, T): per
 * sentence, the labeled tokens' (targets other than -100) predicted
 * classes (the first largest logit) against the gold ones. c[0..2] +=
 * the entities (gold, predicted, both: seqeval's, from s, the class
 * names' scheme), c[3] += the tokens right, c[4] += the tokens; by_type
 * (may be NULL) the entities of each of s's types; pred (may be NULL) gets
 * each position's predicted class + 1, 0 where the target is -100. false
 * if the shapes are not those. */
static bool tag_batch(const ut_tag_scheme *s, const ut_tensor *out, const ut_tensor *y, double c[5], double *by_type,
                      int32_t *pred) {
    if (!out || !ut_is_contiguous(out) || out->ndim != 3 || !y || y->ndim != 2 || y->dtype != UT_I32 ||
        !ut_is_contiguous(y) || out->ne[0] != y->ne[0] || out->ne[1] != y->ne[1] || out->ne[2] != s->K)
        return false;
    out = as_f32(out);
    int64_t B = out->ne[0], T = out->ne[1], K = out->ne[2];
    float *o = host_copy(out);
    int32_t *label = host_copy(y), *g = ut_malloc_check((size_t)T * sizeof *g), *p = ut_malloc_check((size_t)T * sizeof *p);
    bool ok = o && label;
    for (int64_t b = 0; ok && b < B; b++) {
        int64_t m = 0;
        for (int64_t t = 0; t < T; t++) {
            int32_t l = label[b * T + t];
            if (pred) pred[b * T + t] = 0;
            if (l == -100) continue;
            const float *row = o + (b * T + t) * K;
            int32_t best = 0;
            for (int64_t k = 1; k < K; k++)
                if (row[k] > row[best]) best = (int32_t)k;
            if (pred) pred[b * T + t] = best + 1;
            g[m] = l, p[m++] = best;
            c[3] += best == l;
        }
        c[4] += (double)m;
        ut_tag_count(s, g, p, m, c, by_type);
    }
    ut_free(o);
    ut_free(label);
    ut_free(g);
    ut_free(p);
    return ok;
}

/* A token classifier's scores of a batch into mets (at most max): seqeval's
 * overall ones, as sums and counts (precision over the predicted entities,
 * recall over the gold, F1 = 2 both / (predicted + gold), accuracy over the
 * labeled tokens), and with types (train.entity_metrics) each entity
 * type's precision, recall and f1 (<type>_precision, ...; type "_", of
 * tags without one, aside), in the same order in every batch; pred (may be
 * NULL) as tag_batch fills it. */
static int tag_metrics(const ut_dataset *ds, const ut_tensor *o, const ut_tensor *y, bool types, ut_metric *mets,
                       int max, int32_t *pred) {
    ut_tag_scheme s;
    if (ut_tag_scheme_init(&s, ds->label_names, ds->num_classes)) return 0;
    double c[5] = {0}, *by = types ? ut_calloc_check((size_t)(3 * s.ntypes), sizeof *by) : NULL;
    int k = 0;
    if (tag_batch(&s, o, y, c, by, pred)) {
        const char *names[4] = {"precision", "recall", "f1", "accuracy"};
        double sum[4] = {c[2], c[2], 2 * c[2], c[3]}, count[4] = {c[1], c[0], c[0] + c[1], c[4]};
        for (int i = 0; i < 4 && k < max; i++) {
            mets[k] = (ut_metric){.sum = sum[i], .count = count[i]};
            snprintf(mets[k++].name, sizeof mets[0].name, "%s", names[i]);
        }
        for (int32_t t = 1; by && t < s.ntypes && t <= UT_TAG_MAX_TYPES; t++) {
            const double *b = by + 3 * t; /* gold, predicted, both */
            const char *what[3] = {"precision", "recall", "f1"};
            double ts[3] = {b[2], b[2], 2 * b[2]}, tc[3] = {b[1], b[0], b[0] + b[1]};
            for (int i = 0; i < 3 && k < max; i++) {
                mets[k] = (ut_metric){.sum = ts[i], .count = tc[i]};
                snprintf(mets[k++].name, sizeof mets[0].name, "%.20s_%s", s.types[t], what[i]);
            }
        }
    }
    ut_free(by);
    ut_tag_scheme_free(&s);
    return k;
}

/* ut_batch_metrics, and with cm (C x C, C the data's classes; a
 * multi-label's K x 3 counts) the predictions counted into it where
 * accuracy takes them; cls's UT_TAG_TYPES: a token classifier's scores of
 * each entity type too, and its predictions into tags (may be NULL; (B, T),
 * tag_batch's) */
static int batch_metrics(const ut_hooks *h, const ut_dataset *ds, const ut_step_outputs *out, ut_tensor *y,
                         ut_metric *mets, int max, double *cm, unsigned cls, int32_t *tags) {
    int k = 0;
    const ut_tensor *o = out->output;
    int64_t right, count;
    if (ut_tok_tags(ds)) {
        k = tag_metrics(ds, o, y, cls & UT_TAG_TYPES, mets, max, tags);
    } else if (ds->masked_lm && o && max > 0 && mlm_batch(o, y, &right, &count)) {
        mets[k] = (ut_metric){.name = "accuracy", .sum = (double)right, .count = (double)count};
        k++;
    } else if (ds->multi_label && o && o->ndim == 2 && ut_is_contiguous(o) && y->ndim == 2 && y->dtype == UT_I32 &&
        o->ne[0] == y->ne[0] && o->ne[1] == y->ne[1] && ut_is_contiguous(y) && max > 0) {
        mets[k] = (ut_metric){.name = "accuracy"};
        mets[k].sum = (double)exact_label_sets(o, y, o->ne[1] == ds->num_classes ? cm : NULL);
        mets[k++].count = (double)y->ne[0];
    } else if (ds->num_classes > 0 && !ds->multi_label && o && o->ndim == 2 && ut_is_contiguous(o) && y->ndim == 1 &&
        y->dtype == UT_I32 && o->ne[0] == y->ne[0] && max > 0) {
        mets[k] = (ut_metric){.name = "accuracy"};
        mets[k].sum = (double)correct_predictions(o, y, o->ne[1] == ds->num_classes ? cm : NULL);
        mets[k++].count = (double)y->ne[0];
    }
    if (h->metrics) k += h->metrics(h->user, out, y, mets + k, max - k);
    return k;
}

int ut_batch_metrics(const ut_hooks *h, const ut_dataset *ds, const ut_step_outputs *out,
                     ut_tensor *y, ut_metric *mets, int max) {
    return batch_metrics(h, ds, out, y, mets, max, NULL, 0, NULL);
}

double ut_eval_get(const ut_eval_result *res, const char *name) {
    for (int i = 0; i < res->n; i++)
        if (!strcmp(res->names[i], name)) return res->values[i];
    return NAN;
}

static void add_metric(ut_eval_result *res, const char *name, double v) {
    if (res->n == UT_MAX_METRICS) return;
    snprintf(res->names[res->n], sizeof res->names[0], "%s", name);
    res->values[res->n++] = v;
}

/* ---- evaluation ---- */
/* Sums (loss, its weight, examples, each metric's sum and count) over the ranks. */
static int reduce_eval(ut_comm *comm, double *loss_sum, double *weight, int64_t *examples, ut_metric *acc,
                       int nacc, char *err, size_t n) {
    if (ut_comm_size(comm) == 1) return 0;
    double v[3 + 2 * UT_MAX_METRICS] = {*loss_sum, *weight, (double)*examples};
    for (int i = 0; i < nacc; i++) v[3 + 2 * i] = acc[i].sum, v[4 + 2 * i] = acc[i].count;
    if (ut_comm_allreduce_f64(comm, v, 3 + 2 * UT_MAX_METRICS)) {
        snprintf(err, n, "reducing evaluation over ranks: %s", ut_comm_error(comm));
        return -1;
    }
    *loss_sum = v[0], *weight = v[1], *examples = (int64_t)v[2];
    for (int i = 0; i < nacc; i++) acc[i].sum = v[3 + 2 * i], acc[i].count = v[4 + 2 * i];
    return 0;
}

int64_t ut_batch_weight(const ut_dataset *ds, const ut_batch *b) {
    if (!(ut_seq2seq_planes(ds) || ut_tok_labels(ds)) || !b->y) return b->count;
    int64_t T = b->y_len ? b->y_len : ds->y_ne[0], w = 0;
    const int32_t *y = b->y;
    for (int64_t i = 0; i < b->count * T; i++) w += y[i] != -100;
    return w;
}

int64_t ut_batch_tokens(const ut_dataset *ds, const ut_batch *b) {
    if (ds->vocab_size <= 0) return 0;
    if (ut_seq2seq_planes(ds)) return b->count * (b->x_len ? b->x_len : ds->x_ne[1]);
    if (!ut_tok_planes(ds)) return b->count * ds->x_ne[0];
    /* b holds the loader's untrimmed planes (count, 3, max_len); the mask is the third */
    int64_t L = ds->x_ne[1], longest = 1;
    const int32_t *x = b->x;
    for (int64_t k = 0; k < b->count; k++) {
        int64_t len = ut_mask_len(x + (k * 3 + 2) * L, L);
        if (len > longest) longest = len;
    }
    return b->count * longest;
}

int64_t ut_batch_real_tokens(const ut_dataset *ds, const ut_batch *b) {
    if (ds->vocab_size <= 0) return 0;
    bool s2s = ut_seq2seq_planes(ds);
    if (!s2s && !ut_tok_planes(ds)) return b->count * ds->x_ne[0];
    /* the mask planes: the text planes' third of (count, 3, L), the source's
     * second of the pairs' (count, 4, L) (L their width as the batch holds
     * them: a trimmed pair batch's x_len) */
    int64_t planes = s2s ? 4 : 3, mask = s2s ? 1 : 2, L = s2s && b->x_len ? b->x_len : ds->x_ne[1], n = 0;
    const int32_t *x = b->x;
    for (int64_t k = 0; k < b->count; k++)
        for (int64_t i = 0; i < L; i++) n += x[(k * planes + mask) * L + i] != 0;
    return n;
}

/* Adds one batch's metrics into the running sums (matched by name). */
static void add_batch_metrics(ut_metric *acc, int *nacc, const ut_metric *mets, int k) {
    for (int i = 0; i < k; i++) {
        int j = 0;
        while (j < *nacc && strcmp(acc[j].name, mets[i].name)) j++;
        if (j == *nacc) acc[(*nacc)++] = (ut_metric){.sum = 0};
        memcpy(acc[j].name, mets[i].name, sizeof acc[j].name);
        acc[j].sum += mets[i].sum;
        acc[j].count += mets[i].count;
    }
}

/* Copies each example's output row (batch, C) to row idx of outputs; false
 * if the output does not have that shape. */
static bool store_outputs(const ut_tensor *o, const ut_batch *b, int64_t C, double *outputs) {
    if (o && ut_is_contiguous(o)) o = as_f32(o);
    if (!o || o->ndim != 2 || o->dtype != UT_F32 || !ut_is_contiguous(o) || o->ne[0] != b->count ||
        o->ne[1] != C)
        return false;
    float *v = host_copy(o);
    bool ok = v != NULL;
    for (int64_t r = 0; ok && r < b->count; r++)
        for (int64_t c = 0; c < C; c++) outputs[b->idx[r] * C + c] = v[r * C + c];
    ut_free(v);
    return ok;
}

/* A token classifier's batch: pred (count, T), as the batch's scores left
 * it (each position's predicted class + 1, 0 where the target is -100;
 * pred[0] still -1 when the output did not have the shape) into row idx of
 * outputs (the dataset's max_len a row); false without predictions. */
static bool store_tags(const ut_dataset *ds, const int32_t *pred, int64_t T, const ut_batch *b, double *outputs) {
    int64_t L = ds->x_ne[1];
    if (!pred || pred[0] < 0 || T > L) return false;
    for (int64_t r = 0; r < b->count; r++)
        for (int64_t t = 0; t < L; t++) outputs[b->idx[r] * L + t] = t < T ? pred[r * T + t] : 0;
    return true;
}

/* A regression's batch: each example's prediction (the output (count, 1))
 * and label at its index, into pred and label (the dataset's n each);
 * false if the output or labels do not have that shape. */
static bool store_scores(const ut_tensor *o, const ut_tensor *y, const ut_batch *b, double *pred, double *label) {
    if (o && ut_is_contiguous(o)) o = as_f32(o);
    if (!o || o->ndim != 2 || o->dtype != UT_F32 || !ut_is_contiguous(o) || o->ne[0] != b->count || o->ne[1] != 1 ||
        !y || y->dtype != UT_F32 || ut_nelem(y) != b->count || !ut_is_contiguous(y))
        return false;
    float *v = host_copy(o), *l = host_copy(y);
    bool ok = v && l;
    for (int64_t r = 0; ok && r < b->count; r++) pred[b->idx[r]] = v[r], label[b->idx[r]] = l[r];
    ut_free(v);
    ut_free(l);
    return ok;
}

/* v (count doubles) summed over the ranks, in pieces of 2^20 */
static int sum_over_ranks(ut_comm *comm, double *v, int64_t count, const char *what, char *err, size_t n) {
    int rc = 0;
    for (int64_t at = 0; !rc && at < count && ut_comm_size(comm) > 1; at += 1 << 20)
        rc = ut_comm_allreduce_f64(comm, v + at, (int)(count - at < (1 << 20) ? count - at : 1 << 20));
    if (rc) snprintf(err, n, "summing %s over ranks: %s", what, ut_comm_error(comm));
    return rc ? -1 : 0;
}

/* Every rank's rows of outputs (zero elsewhere) summed, so every rank has all
 * of them; *ok becomes false if any rank had an output of another shape. */
static int gather_outputs(ut_comm *comm, double *outputs, int64_t count, bool *ok, char *err, size_t n) {
    if (ut_comm_size(comm) == 1) return 0;
    int64_t bad = !*ok;
    if (ut_comm_allreduce_i64(comm, &bad, 1)) {
        snprintf(err, n, "gathering predictions over ranks: %s", ut_comm_error(comm));
        return -1;
    }
    if (sum_over_ranks(comm, outputs, count, "the predictions", err, n)) return -1;
    *ok = bad == 0;
    return 0;
}

typedef struct {
    ut_eval_stage_fn fn;
    void *arg;
} stage_of;

static int evaluate(ut_comm *comm, ut_ctx *ctx, ut_model *m, ut_dataset *ds, int64_t batch,
                    const ut_hooks *h, unsigned cls, bool (*stop)(void *), void *arg, const stage_of *stage,
                    ut_eval_result *res, double *outputs, bool *have_outputs, char *err, size_t n);

int ut_evaluate(ut_comm *comm, ut_ctx *ctx, ut_model *m, ut_dataset *ds, int64_t batch,
                const ut_hooks *h, ut_eval_result *res, char *err, size_t n) {
    return evaluate(comm, ctx, m, ds, batch, h, 0, NULL, NULL, NULL, res, NULL, NULL, err, n);
}

int ut_evaluate_until(ut_comm *comm, ut_ctx *ctx, ut_model *m, ut_dataset *ds, int64_t batch,
                      const ut_hooks *h, unsigned cls, bool (*stop)(void *), void *arg, ut_eval_result *res,
                      char *err, size_t n) {
    return evaluate(comm, ctx, m, ds, batch, h, cls, stop, arg, NULL, res, NULL, NULL, err, n);
}

int ut_evaluate_outputs(ut_comm *comm, ut_ctx *ctx, ut_model *m, ut_dataset *ds, int64_t batch,
                        const ut_hooks *h, unsigned cls, ut_eval_result *res, double *outputs, bool *have_outputs,
                        char *err, size_t n) {
    return evaluate(comm, ctx, m, ds, batch, h, cls, NULL, NULL, NULL, res, outputs, have_outputs, err, n);
}

int ut_evaluate_stage(ut_comm *comm, ut_ctx *ctx, ut_model *m, ut_dataset *ds, int64_t batch, const ut_hooks *h,
                      unsigned cls, bool (*stop)(void *), void *arg, ut_eval_stage_fn stage, void *stage_arg,
                      ut_eval_result *res, double *outputs, bool *have_outputs, char *err, size_t n) {
    stage_of so = {stage, stage_arg};
    return evaluate(comm, ctx, m, ds, batch, h, cls, stop, arg, &so, res, outputs, have_outputs, err, n);
}

/* A pipeline stage's part of a batch before the model's forward: 1 when
 * the stage is done with it (not the last), 0 to go on, -1 on failure. */
static int run_stage(const stage_of *stage, ut_ctx *ctx, ut_model *m, const ut_batch *b, char *err, size_t n) {
    if (!stage) return 0;
    int r = stage->fn(stage->arg, ctx, m, b, err, n);
    if (r == 1) ut_ctx_reset(ctx);
    return r;
}

/* The four above in one: stop (may be NULL) is asked before each batch,
 * stage (may be NULL) runs before each forward, outputs (may be NULL)
 * receives each example's output row. */
static int evaluate(ut_comm *comm, ut_ctx *ctx, ut_model *m, ut_dataset *ds, int64_t batch,
                    const ut_hooks *h, unsigned cls, bool (*stop)(void *), void *arg, const stage_of *stage,
                    ut_eval_result *res, double *outputs, bool *have_outputs, char *err, size_t n) {
    memset(res, 0, sizeof *res);
    /* K: the outputs kept per example; a token classifier's, a class per position */
    int64_t C = ds->num_classes, K = ut_tok_tags(ds) ? ds->x_ne[1] : ut_dataset_outputs(ds), cm_len = ds->multi_label ? 3 * C : C * C;
    /* (a token classifier's scores are its entities', tag_batch's) */
    double *cm = cls && C >= 2 && (C <= UT_CLS_MAX_CLASSES || ds->multi_label) && !ut_tok_tags(ds)
                     ? ut_calloc_check((size_t)cm_len, sizeof(double)) : NULL;
    /* a regression: every prediction and label (their correlations are not sums) */
    double *scores = ds->regression ? ut_calloc_check((size_t)(2 * ds->n), sizeof(double)) : NULL;
    bool scores_ok = scores != NULL;
    ut_sampler s;
    ut_sampler_init(&s, ds->n, batch, ut_comm_rank(comm), ut_comm_size(comm), 0, false, false);
    ut_loader *l = ut_run_loader(h, m, ds, &s, 2);
    bool grad = ut_ctx_set_grad_enabled(ctx, false), train = ut_ctx_set_training(ctx, false);
    bool outputs_ok = outputs != NULL;
    double loss_sum = 0, weight = 0;
    ut_metric acc[UT_MAX_METRICS];
    int nacc = 0;
    ut_batch b, standin = {0};
    int rc;
    while ((rc = ut_loader_next(l, &b, err, n)) == 1) {
        /* asked before every batch, on every rank alike (stop may agree over ranks) */
        if (stop && stop(arg)) {
            rc = 2;
            break;
        }
        ut_step_outputs out;
        ut_tensor *y;
        if (b.count == 0) { /* this rank's share of the short last batch is empty */
            if (ut_comm_size(comm) == 1 && !stage) continue;
            int sr = ut_standin_batch(ds, &standin, err, n) ? -1 : run_stage(stage, ctx, m, &standin, err, n);
            if (sr < 0 || (sr == 0 && ut_forward_batch(h, ctx, m, ds, &standin, &out, &y, err, n))) {
                rc = -1;
                break;
            }
            m->stage_input = NULL;
            ut_ctx_reset(ctx);
            continue;
        }
        int sr = run_stage(stage, ctx, m, &b, err, n);
        if (sr == 1) continue;
        if (sr < 0 || ut_forward_batch(h, ctx, m, ds, &b, &out, &y, err, n)) {
            rc = -1;
            break;
        }
        m->stage_input = NULL;
        float lv;
        if (ut_tensor_get(out.loss, &lv, sizeof lv)) {
            snprintf(err, n, "reading the loss: %s", ut_ctx_error(ctx));
            rc = -1;
            break;
        }
        int64_t w = ut_batch_weight(ds, &b); /* seq2seq, token labels: the mean over labeled tokens */
        loss_sum += (double)lv * (double)w;
        weight += (double)w;
        ut_metric mets[UT_MAX_METRICS];
        /* a token classifier's predictions come from the pass that scores them */
        bool tagged = ut_tok_tags(ds) && y->ndim == 2 && y->ne[0] == b.count;
        int64_t T = tagged ? y->ne[1] : 0;
        int32_t *tags = outputs_ok && tagged ? ut_malloc_check((size_t)(b.count * T) * sizeof *tags) : NULL;
        if (tags) tags[0] = -1;
        add_batch_metrics(acc, &nacc, mets, batch_metrics(h, ds, &out, y, mets, UT_MAX_METRICS, cm, cls, tags));
        if (outputs_ok)
            outputs_ok = ut_tok_tags(ds) ? store_tags(ds, tags, T, &b, outputs)
                                           : store_outputs(out.output, &b, K, outputs);
        ut_free(tags);
        if (scores_ok) scores_ok = store_scores(out.output, y, &b, scores, scores + ds->n);
        res->examples += b.count;
        ut_ctx_reset(ctx);
    }
    ut_ctx_set_grad_enabled(ctx, grad);
    ut_ctx_set_training(ctx, train);
    ut_loader_free(l);
    ut_sampler_free(&s);
    ut_standin_free(&standin);
    if (rc == 2 || rc < 0 || reduce_eval(comm, &loss_sum, &weight, &res->examples, acc, nacc, err, n) ||
        (cm && sum_over_ranks(comm, cm, cm_len, "the confusion matrix", err, n)) ||
        (scores && gather_outputs(comm, scores, 2 * ds->n, &scores_ok, err, n)) ||
        (outputs && gather_outputs(comm, outputs, ds->n * K, &outputs_ok, err, n))) {
        ut_free(cm);
        ut_free(scores);
        return rc == 2 ? 1 : -1; /* abandoned (res holds nothing), or failed */
    }
    if (have_outputs) *have_outputs = outputs && outputs_ok;
    double loss = weight > 0 ? loss_sum / weight : NAN;
    add_metric(res, "loss", loss);
    /* a token classifier's scores with nothing to count are 0, as seqeval's (no entity predicted: precision 0) */
    double none = ut_tok_tags(ds) ? 0 : NAN;
    for (int i = 0; i < nacc; i++) add_metric(res, acc[i].name, acc[i].count ? acc[i].sum / acc[i].count : none);
    if (cm) {
        ut_cls_result r;
        if (ds->multi_label) ut_cls_scores_multi(cm, C, cls, &r);
        else ut_cls_scores(cm, C, cls, &r);
        for (int i = 0; i < r.n; i++) add_metric(res, r.names[i], r.values[i]);
        ut_free(cm);
    }
    if (scores) { /* NaN where the model's output was not one score an example (a custom hook's) */
        ut_cls_result r;
        ut_reg_scores(scores, scores + ds->n, scores_ok ? ds->n : 0, &r);
        for (int i = 0; i < r.n; i++) add_metric(res, r.names[i], r.values[i]);
        ut_free(scores);
    }
    if (ds->vocab_size > 0 && ds->y_ndim > 0 && !ds->multi_label && !ut_tok_tags(ds)) add_metric(res, "perplexity", exp(loss));
    return 0;
}
