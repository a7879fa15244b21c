/* Vocabulary-parallel cross-entropy in two ops (include/utrain/ops.h):
 * vocab_partials turns this part's logits into per-row (logsumexp, target
 * logit) in the part's slot of an (N, parts, 2) tensor, and vocab_ce, after
 * a sum over the parts has filled every slot, combines them into the mean
 * loss. Both are smooth functions of their inputs with exact gradients:
 * d partials[n, part, 0] / d logits[n, j] = softmax over the part, and
 * d partials[n, part, 1] = the target's one-hot within the part; so the
 * pair gives cross_entropy's gradient, softmax minus one-hot over the whole
 * vocabulary, part by part.
 * Kernels: src/backend/cpu/vocab.c, src/backend/cuda/vocab.c. */
#include "internal.h"
#include "params.h"

static bool rows_match(const ut_tensor *x, const ut_tensor *targets) {
    bool ok = x->ndim >= 1 && targets->ndim == x->ndim - 1;
    for (int i = 0; ok && i < targets->ndim; i++) ok = targets->ne[i] == x->ne[i];
    return ok;
}

ut_tensor *ut_vocab_partials(ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets, int64_t v0, int64_t vocab,
                             int part, int parts, int ignore_index) {
    ut_tensor *src[2] = {logits, targets};
    if (!ut_op_check(ctx, "vocab_partials", 2, src, 1u << 1)) return NULL;
    if (!rows_match(logits, targets) || !ut_is_contiguous(targets)) {
        ut_op_error(ctx, "vocab_partials", 2, src,
                    "expected logits (..., Vp) and contiguous targets (...) with the same leading dims");
        return NULL;
    }
    int64_t Vp = logits->ne[logits->ndim - 1];
    if (parts < 1 || part < 0 || part >= parts || v0 < 0 || Vp < 1 || v0 + Vp > vocab) {
        ut_op_error(ctx, "vocab_partials", 2, src,
                    ut_fmt("part %d of %d holding ids [%lld, %lld) does not fit a vocabulary of %lld", part, parts,
                           (long long)v0, (long long)(v0 + Vp), (long long)vocab));
        return NULL;
    }
    src[0] = ut_contiguous(ctx, logits);
    if (!src[0]) return NULL;
    int64_t ne[3] = {ut_nelem(targets), parts, 2};
    ut_tensor *t = ut_op_new(ctx, UT_OP_VOCAB_PARTIALS, UT_F32, 3, ne, 2, src);
    if (!t) return NULL;
    ut_vocab_partials_set_v0(t, v0);
    ut_vocab_partials_set_vocab(t, vocab);
    ut_vocab_partials_set_part(t, part);
    ut_vocab_partials_set_parts(t, parts);
    ut_vocab_partials_set_ignore_index(t, ignore_index);
    return ut_op_run(t);
}

ut_tensor *ut_vocab_ce(ut_ctx *ctx, ut_tensor *partials, ut_tensor *targets, int64_t vocab, int ignore_index) {
    ut_tensor *src[2] = {partials, targets};
    if (!ut_op_check(ctx, "vocab_ce", 2, src, 1u << 1)) return NULL;
    if (partials->ndim != 3 || partials->ne[2] != 2 || partials->ne[0] != ut_nelem(targets) ||
        !ut_is_contiguous(targets) || vocab < 1) {
        ut_op_error(ctx, "vocab_ce", 2, src, "expected partials (N, parts, 2) and N contiguous targets");
        return NULL;
    }
    src[0] = ut_contiguous(ctx, partials);
    if (!src[0]) return NULL;
    int64_t one = 1;
    ut_tensor *t = ut_op_new(ctx, UT_OP_VOCAB_CE, UT_F32, 1, &one, 2, src);
    if (!t) return NULL;
    ut_vocab_ce_set_vocab(t, vocab);
    ut_vocab_ce_set_ignore_index(t, ignore_index);
    return ut_op_run(t);
}
