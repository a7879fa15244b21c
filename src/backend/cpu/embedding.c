/* Embedding lookup: out[..., :] = table[idx[...], :], as torch.nn.functional.embedding.
 * An index outside [0, V) fails the forward with an error naming it and its place. */
#include "cpu.h"
#include "../../ops/params.h"

/* Columns per block in the backward scatter: each block walks every row in
 * order, so repeated indices accumulate in a fixed order without atomics. */
#define EMB_COL_BLOCK 16

/* out (N, C) = table (V, C) rows idx (N) - off; indices already checked;
 * an index outside [off, off + V) (another part's) gives a zero row */
void ut_embedding_forward_cpu(float *out, const int32_t *idx, const float *table, int64_t N, int64_t V,
                              int64_t C, int64_t off) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        int64_t r = (int64_t)idx[n] - off;
        if (r >= 0 && r < V) memcpy(out + n * C, table + r * C, (size_t)C * sizeof(float));
        else memset(out + n * C, 0, (size_t)C * sizeof(float));
    }
}

/* dtable (V, C) += dout (N, C) scattered to rows idx (N) - off, except row
 * pad (-1: none) and indices of other parts, which take no gradient */
void ut_embedding_backward_cpu(float *dtable, const float *dout, const int32_t *idx, int64_t N, int64_t V,
                               int64_t C, int64_t pad, int64_t off) {
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += EMB_COL_BLOCK) {
        int64_t nc = C - c0 < EMB_COL_BLOCK ? C - c0 : EMB_COL_BLOCK;
        for (int64_t n = 0; n < N; n++) {
            int64_t r = (int64_t)idx[n] - off;
            if (idx[n] == pad || r < 0 || r >= V) continue;
            float *d = dtable + r * C + c0;
            const float *g = dout + n * C + c0;
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) d[c] += g[c];
        }
    }
}

void ut_embedding_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *idx = t->src[0], *table = t->src[1];
    int64_t N = ut_nelem(idx), Vp = table->ne[0], C = table->ne[1], off = ut_embedding_offset(t);
    int64_t V = ut_embedding_vocab(t) ? ut_embedding_vocab(t) : Vp;
    const int32_t *ix = ut_i32(idx);
    /* serial check first: the error names the first bad index */
    for (int64_t n = 0; n < N; n++) {
        if (ix[n] >= 0 && ix[n] < V) continue;
        char pos[64], si[64], st[64];
        int64_t rem = n;
        int64_t at[UT_MAX_DIMS];
        for (int i = idx->ndim - 1; i >= 0; i--) {
            at[i] = rem % idx->ne[i];
            rem /= idx->ne[i];
        }
        size_t len = 0;
        for (int i = 0; i < idx->ndim && len < sizeof pos; i++)
            len += (size_t)snprintf(pos + len, sizeof pos - len, "%s%lld", i ? ", " : "", (long long)at[i]);
        ut_kfail(k, "embedding: index %d at position [%s] is outside [0, %lld) (idx %s, table %s)", (int)ix[n], pos,
                 (long long)V, ut_shape_str(idx, si, sizeof si), ut_shape_str(table, st, sizeof st));
        return;
    }
    ut_embedding_forward_cpu(ut_f32(t), ix, ut_f32(table), N, Vp, C, off);
}

void ut_embedding_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *idx = t->src[0], *table = t->src[1];
    if (table->requires_grad)
        ut_embedding_backward_cpu(table->grad, t->grad, ut_i32(idx), ut_nelem(idx), table->ne[0], table->ne[1],
                                  ut_embedding_padding_idx(t), ut_embedding_offset(t));
}
