/* CUDA op glue of the embedding lookup, with the CPU kernels' semantics
 * (src/backend/cpu/embedding.c), including padding_idx (that row is looked up
 * but takes no gradient). The kernels are in embedding.cu.
 *
 * Difference from the CPU: an id outside [0, V) cannot be reported
 * synchronously (the ids are device memory). The forward writes a zero row
 * for it and raises UT_CUDA_ERR_EMBEDDING_INDEX in the device error flag
 * (ut_cuda_error_flag), which the backend reports at the next host read;
 * backward skips it. */
#include "cuda.h"
#include "embedding.h"
#include "../../ops/params.h"


void ut_embedding_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *idx = t->src[0], *table = t->src[1];
    int64_t V = table->ne[0], vocab = ut_embedding_vocab(t) ? ut_embedding_vocab(t) : V;
    ut_cuda_embedding_fwd((float *)t->data, (const int32_t *)idx->data, (const float *)table->data, ut_nelem(idx),
                          V, table->ne[1], ut_embedding_offset(t), vocab, ut_cuda_error_flag());
}

void ut_embedding_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *idx = t->src[0], *table = t->src[1];
    if (!table->requires_grad) return;
    int64_t N = ut_nelem(idx), V = table->ne[0];
    void *scratch = ut_kalloc(k, ut_cuda_embedding_bwd_scratch_bytes(N, V));
    ut_cuda_embedding_bwd(table->grad, t->grad, (const int32_t *)idx->data, N, V, table->ne[1],
                          ut_embedding_padding_idx(t), ut_embedding_offset(t), scratch);
}
