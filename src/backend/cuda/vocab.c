/* CUDA op glue of the vocabulary-parallel cross-entropy (src/ops/vocab.c),
 * with the CPU kernels' semantics (src/backend/cpu/vocab.c). As for
 * cross_entropy, a bad target is not reported synchronously: the kernels
 * count it as ignored and raise UT_CUDA_ERR_VOCAB_TARGET in the device
 * error flag, and vocab_ce counts its targets on the device (kept in
 * ut_vocab_ce_dcount for backward). */
#include "cuda.h"
#include "vocab.h"
#include "../../ops/params.h"

void ut_vocab_partials_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    ut_cuda_vocab_partials_fwd((float *)t->data, (const float *)x->data, (const int32_t *)tg->data, ut_nelem(tg),
                               x->ne[x->ndim - 1], ut_vocab_partials_v0(t), ut_vocab_partials_vocab(t),
                               ut_vocab_partials_part(t), ut_vocab_partials_parts(t),
                               (int)ut_vocab_partials_ignore_index(t), ut_cuda_error_flag());
}

void ut_vocab_partials_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    if (!x->requires_grad) return;
    ut_cuda_vocab_partials_bwd(x->grad, t->grad, (const float *)t->data, (const float *)x->data,
                               (const int32_t *)tg->data, ut_nelem(tg), x->ne[x->ndim - 1], ut_vocab_partials_v0(t),
                               ut_vocab_partials_part(t), ut_vocab_partials_parts(t),
                               (int)ut_vocab_partials_ignore_index(t));
}

void ut_vocab_ce_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *p = t->src[0], *tg = t->src[1];
    int64_t N = p->ne[0];
    double *rowloss = ut_kalloc(k, (size_t)(N > 0 ? N : 1) * sizeof(double));
    int64_t *count = ut_kalloc(k, sizeof(int64_t));
    ut_cuda_vocab_ce_fwd((float *)t->data, count, rowloss, (const float *)p->data, (const int32_t *)tg->data, N,
                         p->ne[1], ut_vocab_ce_vocab(t), (int)ut_vocab_ce_ignore_index(t), ut_cuda_error_flag());
    ut_vocab_ce_set_dcount(t, count);
}

void ut_vocab_ce_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *p = t->src[0], *tg = t->src[1];
    if (!p->requires_grad) return;
    ut_cuda_vocab_ce_bwd(p->grad, (const float *)p->data, (const int32_t *)tg->data, t->grad, ut_vocab_ce_dcount(t),
                         p->ne[0], p->ne[1], ut_vocab_ce_vocab(t), (int)ut_vocab_ce_ignore_index(t));
}
