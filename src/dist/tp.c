/* Tensor parallelism's conjugate operators as ops (Megatron-LM's f and g):
 * inside a tensor-parallel region each rank of the group holds a part of a
 * layer (a column-parallel linear's output columns, a row-parallel linear's
 * input rows), and these two ops are where the parts meet:
 *   ut_tp_copy    forward: the identity (every rank has the whole input);
 *                 backward: the gradient summed over the group (each rank's
 *                 part of the layer contributed a part of it)
 *   ut_tp_reduce  forward: the sum over the group (the partial outputs of a
 *                 row-parallel linear); backward: the identity
 * Both are ut_collective ops, so a model that uses them needs no backward of
 * its own. The sum is an all-reduce on the group's communicator: direct on
 * the device's memory where the group has the direct path (dist.h; queued
 * between the compute stream's work, no host wait), else through host
 * memory (a stage) on a device whose memory the communicator cannot take. */
#include <stdio.h>
#include <string.h>

#include "utrain/dist.h"
#include "utrain/ops.h"
#include "../backend/backend.h"

static int allreduce(void *user, ut_device dev, float *buf, int64_t n, char *err, size_t errn) {
    ut_comm *c = user;
    if (ut_comm_size(c) == 1) return 0;
    if (ut_comm_direct(c, dev)) { /* on the device's memory, between the compute stream's work */
        int rc = ut_comm_direct_allreduce_ordered(c, dev, buf, n, UT_F32, UT_REDUCE_SUM);
        if (rc) snprintf(err, errn, "%s", ut_comm_error(c));
        return rc;
    }
    const ut_backend *be = ut_backend_get(dev);
    ut_stage st;
    float *h = ut_comm_accepts_device_memory(c, dev) ? buf : ut_stage_begin(&st, be, buf, (size_t)n * sizeof(float), true);
    int rc = ut_comm_wait(c, ut_comm_iallreduce(c, h, n));
    if (rc) snprintf(err, errn, "%s", ut_comm_error(c));
    if (h != buf) ut_stage_end(&st, true);
    return rc;
}

ut_tensor *ut_tp_copy(ut_ctx *ctx, ut_tensor *x, ut_comm *group) {
    return ut_collective(ctx, x, NULL, allreduce, group, "tp_copy");
}

ut_tensor *ut_tp_reduce(ut_ctx *ctx, ut_tensor *x, ut_comm *group) {
    return ut_collective(ctx, x, allreduce, NULL, group, "tp_reduce");
}

/* this rank's part of the vocabulary: [v0, v0 + Vp) */
static bool vocab_part(ut_ctx *ctx, const char *what, int64_t Vp, int64_t vocab, ut_comm *group, int64_t *v0) {
    int p = ut_comm_size(group), r = ut_comm_rank(group);
    if (Vp * p != vocab) {
        ut_ctx_set_error(ctx, "%s: a part of %lld ids on each of %d ranks is not a vocabulary of %lld", what,
                         (long long)Vp, p, (long long)vocab);
        return false;
    }
    *v0 = (int64_t)r * Vp;
    return true;
}

ut_tensor *ut_tp_embedding(ut_ctx *ctx, ut_tensor *ids, ut_tensor *table, int64_t vocab, int padding_idx,
                           ut_comm *group) {
    int64_t v0;
    if (!ids || !table || ut_ctx_error(ctx)) return NULL;
    if (table->ndim != 2 || !vocab_part(ctx, "tp_embedding", table->ne[0], vocab, group, &v0)) return NULL;
    return ut_tp_reduce(ctx, ut_embedding_part(ctx, ids, table, v0, vocab, padding_idx), group);
}

ut_tensor *ut_tp_cross_entropy(ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets, int64_t vocab, int ignore_index,
                               ut_comm *group) {
    int64_t v0;
    if (!logits || !targets || ut_ctx_error(ctx)) return NULL;
    if (ut_ctx_label_smoothing(ctx) > 0.0f) {
        ut_ctx_set_error(ctx, "tp_cross_entropy: label smoothing %g: the loss over a vocabulary split between "
                              "ranks has none (train.label_smoothing needs dist.tensor_parallel 1)",
                         (double)ut_ctx_label_smoothing(ctx));
        return NULL;
    }
    if (logits->ndim < 1 || !vocab_part(ctx, "tp_cross_entropy", logits->ne[logits->ndim - 1], vocab, group, &v0))
        return NULL;
    ut_tensor *p = ut_vocab_partials(ctx, logits, targets, v0, vocab, ut_comm_rank(group), ut_comm_size(group),
                                     ignore_index);
    return ut_vocab_ce(ctx, ut_tp_reduce(ctx, p, group), targets, vocab, ignore_index);
}

ut_tensor *ut_tp_gather_last(ut_ctx *ctx, ut_tensor *x, ut_comm *group) {
    if (!x || ut_ctx_error(ctx)) return NULL;
    int P = ut_comm_size(group);
    if (P == 1) return x;
    x = ut_contiguous(ctx, x);
    if (!x) return NULL;
    int64_t n = ut_nelem(x), w = x->ne[x->ndim - 1], rows = w ? n / w : 0;
    float *mine = ut_malloc_check((size_t)(n + 1) * sizeof(float)), *all = ut_malloc_check((size_t)(n * P + 1) * sizeof(float));
    ut_tensor *out = NULL;
    if (x->dtype != UT_F32 && !(x = ut_tensor_to(ctx, x, UT_F32))) goto done;
    if (ut_tensor_get(x, mine, (size_t)n * sizeof(float))) {
        ut_ctx_set_error(ctx, "tp_gather: reading this rank's part");
        goto done;
    }
    if (ut_comm_wait(group, ut_comm_iallgather(group, mine, all, n))) {
        ut_ctx_set_error(ctx, "tp_gather over the tensor-parallel group: %s", ut_comm_error(group));
        goto done;
    }
    { /* rank q's part of row r: columns [q w, (q + 1) w) of it */
        float *whole = ut_malloc_check((size_t)(n * P + 1) * sizeof(float));
        for (int64_t r = 0; r < rows; r++)
            for (int q = 0; q < P; q++)
                memcpy(whole + (r * P + q) * w, all + (int64_t)q * n + r * w, (size_t)w * sizeof(float));
        int64_t ne[UT_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++) ne[d] = x->ne[d];
        ne[x->ndim - 1] = w * P;
        out = ut_tensor_from(ctx, UT_F32, x->ndim, ne, whole);
        ut_free(whole);
    }
done:
    ut_free(mine);
    ut_free(all);
    return out;
}


// --- sequence parallelism: the sequence dimension split over the group -------------
/* A tensor (B, T, ...) seen as (B, T, R); in a sequence-parallel region each
 * rank holds (B, T / p, R), the rows [q T/p, (q + 1) T/p) of each sequence
 * (Megatron-LM's sequence parallelism). The collectives run through host
 * memory: a device's buffers are staged. */
typedef struct {
    ut_comm *group;
    int64_t B, T, R; /* the whole tensor's */
} seq_rec;

/* host copies of device memory, and back */
static float *to_host(ut_device dev, const float *x, int64_t n) {
    float *h = ut_malloc_check((size_t)(n + 1) * sizeof(float));
    ut_backend_get(dev)->copy(h, x, (size_t)n * sizeof(float), UT_COPY_D2H);
    return h;
}
static void from_host(ut_device dev, float *x, const float *h, int64_t n) {
    ut_backend_get(dev)->copy(x, h, (size_t)n * sizeof(float), UT_COPY_H2D);
}

/* (B, T/p, R) of every rank -> (B, T, R) on every rank */
static int seq_all_gather(void *user, ut_device dev, const float *in, int64_t in_n, float *out, int64_t out_n,
                          char *err, size_t errn) {
    const seq_rec *s = user;
    int p = ut_comm_size(s->group);
    int64_t Tp = s->T / p, piece = Tp * s->R;
    float *mine = to_host(dev, in, in_n), *all = ut_malloc_check((size_t)(out_n + 1) * sizeof(float)),
          *whole = ut_malloc_check((size_t)(out_n + 1) * sizeof(float));
    int rc = ut_comm_wait(s->group, ut_comm_iallgather(s->group, mine, all, in_n));
    if (rc) snprintf(err, errn, "%s", ut_comm_error(s->group));
    for (int64_t b = 0; !rc && b < s->B; b++)
        for (int q = 0; q < p; q++)
            memcpy(whole + (b * s->T + (int64_t)q * Tp) * s->R, all + (int64_t)q * in_n + b * piece,
                   (size_t)piece * sizeof(float));
    if (!rc) from_host(dev, out, whole, out_n);
    ut_free(mine), ut_free(all), ut_free(whole);
    return rc ? -1 : 0;
}

/* (B, T, R) partial sums on every rank -> this rank's (B, T/p, R) of their sum */
static int seq_reduce_scatter(void *user, ut_device dev, const float *in, int64_t in_n, float *out, int64_t out_n,
                              char *err, size_t errn) {
    const seq_rec *s = user;
    int p = ut_comm_size(s->group);
    int64_t Tp = s->T / p, piece = Tp * s->R;
    float *h = to_host(dev, in, in_n), *byrank = ut_malloc_check((size_t)(in_n + 1) * sizeof(float)),
          *mine = ut_malloc_check((size_t)(out_n + 1) * sizeof(float));
    for (int64_t b = 0; b < s->B; b++)
        for (int q = 0; q < p; q++)
            memcpy(byrank + (int64_t)q * out_n + b * piece, h + (b * s->T + (int64_t)q * Tp) * s->R,
                   (size_t)piece * sizeof(float));
    int rc = ut_comm_wait(s->group, ut_comm_ireduce_scatter(s->group, byrank, mine, out_n));
    if (rc) snprintf(err, errn, "%s", ut_comm_error(s->group));
    else from_host(dev, out, mine, out_n);
    ut_free(h), ut_free(byrank), ut_free(mine);
    return rc ? -1 : 0;
}

/* (B, T, R) the same on every rank -> this rank's (B, T/p, R) (no communication) */
static int seq_take(void *user, ut_device dev, const float *in, int64_t in_n, float *out, int64_t out_n, char *err,
                    size_t errn) {
    (void)in_n, (void)out_n, (void)err, (void)errn;
    const seq_rec *s = user;
    int p = ut_comm_size(s->group), q = ut_comm_rank(s->group);
    int64_t Tp = s->T / p, piece = Tp * s->R;
    const ut_backend *be = ut_backend_get(dev);
    for (int64_t b = 0; b < s->B; b++)
        be->copy(out + b * piece, in + (b * s->T + (int64_t)q * Tp) * s->R, (size_t)piece * sizeof(float), UT_COPY_D2D);
    return 0;
}

/* the op: x (B, Tin, ...) to (B, Tout, ...) with the record of the whole T */
static ut_tensor *seq_op(ut_ctx *ctx, ut_tensor *x, ut_comm *group, bool gathers, ut_collective_to_fn fwd,
                         ut_collective_to_fn bwd, const char *name) {
    if (!x || ut_ctx_error(ctx)) return NULL;
    int p = ut_comm_size(group);
    if (x->ndim < 2) {
        ut_ctx_set_error(ctx, "%s: a (batch, sequence, ...) tensor is needed, not %d-dimensional", name, x->ndim);
        return NULL;
    }
    int64_t T = gathers ? x->ne[1] * p : x->ne[1];
    if (T % p) {
        ut_ctx_set_error(ctx, "%s: the sequence of %lld positions does not split over %d ranks (make the sequence "
                              "length a multiple of dist.tensor_parallel)", name, (long long)T, p);
        return NULL;
    }
    seq_rec *r = ut_ctx_alloc(ctx, sizeof *r);
    int64_t rows = x->ne[0] * x->ne[1];
    *r = (seq_rec){group, x->ne[0], T, rows > 0 ? ut_nelem(x) / rows : 0};
    int64_t ne[UT_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) ne[d] = x->ne[d];
    ne[1] = gathers ? T : T / p;
    return ut_collective_to(ctx, x, x->ndim, ne, fwd, bwd, r, name);
}

ut_tensor *ut_tp_seq_split(ut_ctx *ctx, ut_tensor *x, ut_comm *group) {
    return seq_op(ctx, x, group, false, seq_take, seq_all_gather, "tp_seq_split");
}
ut_tensor *ut_tp_seq_gather(ut_ctx *ctx, ut_tensor *x, ut_comm *group) {
    return seq_op(ctx, x, group, true, seq_all_gather, seq_reduce_scatter, "tp_seq_gather");
}
ut_tensor *ut_tp_seq_reduce_scatter(ut_ctx *ctx, ut_tensor *x, ut_comm *group) {
    return seq_op(ctx, x, group, false, seq_reduce_scatter, seq_all_gather, "tp_seq_reduce_scatter");
}
static ut_tensor *hook_seq_split(ut_ctx *ctx, ut_tensor *x, void *group) { return ut_tp_seq_split(ctx, x, group); }
static ut_tensor *hook_seq_gather(ut_ctx *ctx, ut_tensor *x, void *group) { return ut_tp_seq_gather(ctx, x, group); }
static ut_tensor *hook_seq_rs(ut_ctx *ctx, ut_tensor *x, void *group) { return ut_tp_seq_reduce_scatter(ctx, x, group); }

static ut_tensor *hook_copy(ut_ctx *ctx, ut_tensor *x, void *group) { return ut_tp_copy(ctx, x, group); }
static ut_tensor *hook_gather(ut_ctx *ctx, ut_tensor *x, void *group) { return ut_tp_gather_last(ctx, x, group); }
static ut_tensor *hook_reduce(ut_ctx *ctx, ut_tensor *x, void *group) { return ut_tp_reduce(ctx, x, group); }

static ut_tensor *hook_embedding(ut_ctx *ctx, ut_tensor *ids, ut_tensor *table, int64_t vocab, int padding_idx,
                                 void *group) {
    return ut_tp_embedding(ctx, ids, table, vocab, padding_idx, group);
}
static ut_tensor *hook_cross_entropy(ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets, int64_t vocab,
                                     int ignore_index, void *group) {
    return ut_tp_cross_entropy(ctx, logits, targets, vocab, ignore_index, group);
}

ut_tp_hooks ut_tp_hooks_of(ut_comm *group) {
    return (ut_tp_hooks){.copy = hook_copy,
                         .reduce = hook_reduce,
                         .embedding = hook_embedding,
                         .cross_entropy = hook_cross_entropy,
                         .gather = hook_gather,
                         .seq_split = hook_seq_split,
                         .seq_gather = hook_seq_gather,
                         .seq_reduce_scatter = hook_seq_rs,
                         .group = group};
}

// --- a split model's parameters: norm, gather, scatter -----------------------------

int64_t ut_tp_full_numel(const ut_params *p, int i) {
    const ut_tensor *t = p->t[i];
    const ut_partition *pt = &p->part[i];
    if (pt->parts <= 1) return ut_nelem(t);
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= pt->full_ne[d];
    return n;
}

/* Elements of one row of parameter i's part (ut_partition_full_row): the
 * dimensions after the split one. */
static int64_t row_elems(const ut_tensor *t, const ut_partition *pt) {
    int64_t inner = 1;
    for (int d = pt->dim + 1; d < t->ndim; d++) inner *= t->ne[d];
    return inner;
}

int ut_tp_grad_norm_sq(const ut_params *p, ut_comm *group, double *sq, char *err, size_t n) {
    const ut_backend *be = ut_backend_get(p->device);
    double s[2] = {0, 0}; /* split parts, whole parameters */
    for (int i = 0; i < p->n; i++)
        s[p->part[i].parts > 1 ? 0 : 1] += be->sum_sq(p->flat_grad + p->segs[i].offset, p->segs[i].numel);
    if (ut_comm_size(group) > 1 && ut_comm_allreduce_f64(group, s, 1)) {
        snprintf(err, n, "gradient norm over the tensor-parallel group: %s", ut_comm_error(group));
        return -1;
    }
    *sq = s[0] + s[1];
    return 0;
}

int ut_tp_gather_values(const ut_params *p, int i, ut_device dev, const float *vals, ut_comm *group, float *full,
                        char *err, size_t n) {
    const ut_tensor *t = p->t[i];
    const ut_partition *pt = &p->part[i];
    const ut_backend *be = ut_backend_get(dev);
    int64_t k = ut_nelem(t);
    if (pt->parts <= 1) {
        be->copy(full, vals, (size_t)k * sizeof(float), UT_COPY_D2H);
        return 0;
    }
    if (pt->parts != ut_comm_size(group) || pt->part != ut_comm_rank(group)) {
        snprintf(err, n, "%s: part %d of %d does not match rank %d of a group of %d", p->names[i], pt->part,
                 pt->parts, ut_comm_rank(group), ut_comm_size(group));
        return -1;
    }
    float *mine = ut_malloc_check((size_t)k * sizeof(float)), *all = ut_malloc_check((size_t)k * pt->parts * sizeof(float));
    be->copy(mine, vals, (size_t)k * sizeof(float), UT_COPY_D2H);
    int rc = ut_comm_wait(group, ut_comm_iallgather(group, mine, all, k));
    if (rc) snprintf(err, n, "gathering %s: %s", p->names[i], ut_comm_error(group));
    int64_t inner = row_elems(t, pt);
    for (int q = 0; !rc && q < pt->parts; q++)
        for (int64_t r = 0; r < k / inner; r++)
            memcpy(full + ut_partition_full_row(t, pt, q, r) * inner, all + (int64_t)q * k + r * inner,
                   (size_t)inner * sizeof(float));
    ut_free(mine);
    ut_free(all);
    return rc ? -1 : 0;
}

int ut_tp_gather_param(const ut_params *p, int i, ut_comm *group, float *full, char *err, size_t n) {
    return ut_tp_gather_values(p, i, p->device, p->flat + p->segs[i].offset, group, full, err, n);
}

void ut_tp_part_values(const ut_params *p, int i, const float *full, float *mine) {
    const ut_tensor *t = p->t[i];
    const ut_partition *pt = &p->part[i];
    int64_t k = ut_nelem(t);
    if (pt->parts <= 1) {
        memcpy(mine, full, (size_t)k * sizeof(float));
        return;
    }
    int64_t inner = row_elems(t, pt);
    for (int64_t r = 0; r < k / inner; r++)
        memcpy(mine + r * inner, full + ut_partition_full_row(t, pt, pt->part, r) * inner, (size_t)inner * sizeof(float));
}

void ut_tp_scatter_values(const ut_params *p, int i, ut_device dev, float *vals, const float *full) {
    int64_t k = ut_nelem(p->t[i]);
    float *mine = ut_malloc_check((size_t)(k ? k : 1) * sizeof(float));
    ut_tp_part_values(p, i, full, mine);
    ut_backend_get(dev)->copy(vals, mine, (size_t)k * sizeof(float), UT_COPY_H2D);
    ut_free(mine);
}

void ut_tp_scatter_param(ut_params *p, int i, const float *full) {
    ut_tp_scatter_values(p, i, p->device, p->flat + p->segs[i].offset, full);
}

// --- the 3-D mesh ------------------------------------------------------------------

int ut_mesh_init(ut_mesh *m, ut_comm *world, int tp, int pp, char *err, size_t n) {
    *m = (ut_mesh){0};
    int W = ut_comm_size(world), r = ut_comm_rank(world);
    if (tp < 1 || pp < 1 || W % tp || W % (tp * pp)) {
        snprintf(err, n, "world size %d is not divisible by dist.tensor_parallel %d x dist.pipeline_parallel %d", W,
                 tp, pp);
        return -1;
    }
    m->tp = tp, m->pp = pp, m->dp = W / (tp * pp);
    m->tp_rank = r % tp, m->dp_rank = (r / tp) % m->dp, m->pp_rank = r / (tp * m->dp);
    /* colour: the coordinates the group shares; key: the rank's place in it */
    m->tp_group = ut_comm_split(world, m->pp_rank * m->dp + m->dp_rank, m->tp_rank, "tp", err, n);
    m->dp_group = m->tp_group ? ut_comm_split(world, m->pp_rank * tp + m->tp_rank, m->dp_rank, "dp", err, n) : NULL;
    m->pp_group = m->dp_group ? ut_comm_split(world, m->dp_rank * tp + m->tp_rank, m->pp_rank, "pp", err, n) : NULL;
    if (!m->pp_group) {
        ut_mesh_free(m);
        return -1;
    }
    return 0;
}

void ut_mesh_free(ut_mesh *m) {
    if (m->pp_group) ut_comm_finalize(m->pp_group);
    if (m->dp_group) ut_comm_finalize(m->dp_group);
    if (m->tp_group) ut_comm_finalize(m->tp_group);
    *m = (ut_mesh){0};
}
