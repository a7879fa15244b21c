/* Embedding lookup: out[..., :] = table[idx[...], :], as torch.nn.functional.embedding.
 * An index outside [0, V) fails the forward with an error naming it and its place.
 * With a padding_idx (ut_embedding_pad) that row is looked up as any other but
 * takes no gradient, as torch's nn.Embedding(padding_idx=...).
 * Parameter: ut_embedding_padding_idx (-1: none; src/ops/params.h).
 * A vocabulary-parallel part (ut_embedding_part: the table holds ids
 * [offset, offset + V) of a vocabulary of `vocab`) gives zero rows for the
 * ids of other parts, and those take no gradient; an id outside [0, vocab)
 * is the error.
 * Kernels: src/backend/cpu/embedding.c. */
#include "internal.h"
#include "params.h"

/* A contiguous copy of an I32 tensor, by the contiguous op's kernel (index
 * tensors take no gradient: nothing is recorded). */
static ut_tensor *contiguous_i32(ut_ctx *ctx, ut_tensor *a) {
    if (ut_is_contiguous(a)) return a;
    return ut_op_run(ut_op_new(ctx, UT_OP_CONTIGUOUS, UT_I32, a->ndim, a->ne, 1, &a));
}

ut_tensor *ut_embedding(ut_ctx *ctx, ut_tensor *idx, ut_tensor *table) {
    return ut_embedding_pad(ctx, idx, table, -1);
}

static ut_tensor *embedding_new(ut_ctx *ctx, ut_tensor *idx, ut_tensor *table, int padding_idx, int64_t offset,
                                int64_t vocab) {
    ut_tensor *src[2] = {idx, table};
    if (!ut_op_check(ctx, "embedding", 2, src, 1u)) return NULL;
    if (table->ndim != 2 || idx->ndim + 1 > UT_MAX_DIMS) {
        ut_op_error(ctx, "embedding", 2, src,
                    ut_fmt("expected idx I32 (...) with at most %d dims, table (V, C)",
                           UT_MAX_DIMS - 1));
        return NULL;
    }
    src[0] = contiguous_i32(ctx, idx);
    src[1] = ut_contiguous(ctx, table);
    int64_t ne[UT_MAX_DIMS];
    for (int i = 0; i < idx->ndim; i++) ne[i] = idx->ne[i];
    ne[idx->ndim] = table->ne[1];
    ut_tensor *t = ut_op_new(ctx, UT_OP_EMBEDDING, UT_F32, idx->ndim + 1, ne, 2, src);
    if (!t) return NULL;
    ut_embedding_set_padding_idx(t, padding_idx);
    ut_embedding_set_offset(t, offset);
    ut_embedding_set_vocab(t, vocab);
    return ut_op_run(t);
}

ut_tensor *ut_embedding_pad(ut_ctx *ctx, ut_tensor *idx, ut_tensor *table, int padding_idx) {
    return embedding_new(ctx, idx, table, padding_idx, 0, 0);
}

ut_tensor *ut_embedding_part(ut_ctx *ctx, ut_tensor *idx, ut_tensor *table, int64_t offset, int64_t vocab,
                             int padding_idx) {
    if (table && (offset < 0 || table->ndim != 2 || offset + table->ne[0] > vocab)) {
        ut_tensor *src[2] = {idx, table};
        ut_op_error(ctx, "embedding", 2, src,
                    ut_fmt("a part of rows [%lld, %lld + rows) must lie inside a vocabulary of %lld", (long long)offset,
                           (long long)offset, (long long)vocab));
        return NULL;
    }
    return embedding_new(ctx, idx, table, padding_idx, offset, vocab);
}
