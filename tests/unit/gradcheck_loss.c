/* Gradcheck rows: classification losses (cross_entropy, nll_loss) with and
 * without ignored targets, mse, and a classifier's loss of scores (the
 * regression head's: logits (N, 1) against float targets) and of 0/1
 * labels (a multi-label head's binary cross-entropy with logits). */
#include "gradcheck.h"
#include "utrain/nn.h"

static ut_tensor *b_ce(ut_ctx *c, ut_tensor **in) { return ut_cross_entropy(c, in[0], in[1], -100); }
/* ignore_index 0 with targets drawn from [0, hi): some targets are ignored */
static ut_tensor *b_ce_ignore0(ut_ctx *c, ut_tensor **in) {
    return ut_cross_entropy(c, in[0], in[1], 0);
}
/* cross_entropy owns its logits' gradient while the logits have none yet
 * (ut_op_owns_src0_grad). Here the logits are an op's output (the scale's
 * backward reads the gradient cross_entropy handed over) and feed two losses:
 * the later one, first in backward, takes over the gradient buffer (ignored
 * rows zeroed), the earlier one must add to it. */
static ut_tensor *b_ce_twice(ut_ctx *c, ut_tensor **in) {
    ut_tensor *x = ut_scale(c, in[0], 1.5f);
    return ut_add(c, ut_cross_entropy(c, x, in[1], -100), ut_cross_entropy(c, x, in[1], 0));
}
static ut_tensor *b_nll(ut_ctx *c, ut_tensor **in) { return ut_nll_loss(c, in[0], in[1], -100); }
/* label smoothing (torch's label_smoothing): every class's logit in the gradient */
static ut_tensor *b_ce_smooth(ut_ctx *c, ut_tensor **in) { return ut_cross_entropy_smoothed(c, in[0], in[1], 0, 0.2f); }
static ut_tensor *b_nll_smooth(ut_ctx *c, ut_tensor **in) {
    return ut_nll_loss_smoothed(c, ut_log_softmax(c, in[0]), in[1], 0, 0.3f);
}
static ut_tensor *b_nll_ignore0(ut_ctx *c, ut_tensor **in) { return ut_nll_loss(c, in[0], in[1], 0); }
/* the unfused composition cross_entropy replaces */
static ut_tensor *b_nll_of_log_softmax(ut_ctx *c, ut_tensor **in) {
    return ut_nll_loss(c, ut_log_softmax(c, in[0]), in[1], -100);
}
static ut_tensor *b_mse(ut_ctx *c, ut_tensor **in) { return ut_mse(c, in[0], in[1]); }
/* ut_model_class_loss of float targets: the mean squared error of the (N, 1) logits */
static ut_tensor *b_class_loss_scores(ut_ctx *c, ut_tensor **in) {
    static ut_model m = {.type = "gradcheck"};
    return ut_model_class_loss(&m, c, ut_scale(c, in[0], 2.0f), in[1]);
}
/* ut_model_class_loss of 0/1 targets (N, K): the mean binary cross-entropy with logits */
static ut_tensor *b_class_loss_multi(ut_ctx *c, ut_tensor **in) {
    static ut_model m = {.type = "gradcheck"};
    return ut_model_class_loss(&m, c, ut_scale(c, in[0], 1.5f), in[1]);
}
/* vocabulary-parallel cross-entropy: part 1 of 2 (ids [4, 8) of 8) alone,
 * both of its output columns weighted by the harness; the combination over
 * given parts (every slot filled, as after the sum over ranks), with and
 * without ignored targets; and one part holding the whole vocabulary, the
 * pair that equals cross_entropy */
static ut_tensor *b_vocab_partials(ut_ctx *c, ut_tensor **in) {
    return ut_vocab_partials(c, in[0], in[1], 4, 8, 1, 2, -100);
}
static ut_tensor *b_vocab_ce(ut_ctx *c, ut_tensor **in) { return ut_vocab_ce(c, in[0], in[1], 8, -100); }
static ut_tensor *b_vocab_ce_ignore0(ut_ctx *c, ut_tensor **in) { return ut_vocab_ce(c, in[0], in[1], 8, 0); }
static ut_tensor *b_vocab_whole(ut_ctx *c, ut_tensor **in) {
    return ut_vocab_ce(c, ut_vocab_partials(c, in[0], in[1], 0, 5, 0, 1, 0), in[1], 5, 0);
}

/* linear with cross-entropy in one op (ut_linear_cross_entropy): with and
 * without a bias, ignored targets, the context's label smoothing; and x
 * used again after it (its gradient added to, not written) */
static ut_tensor *b_linear_ce(ut_ctx *c, ut_tensor **in) {
    return ut_linear_cross_entropy(c, in[0], in[1], in[3], in[2], -100);
}
static ut_tensor *b_linear_ce_nob(ut_ctx *c, ut_tensor **in) {
    return ut_linear_cross_entropy(c, in[0], in[1], NULL, in[2], 0);
}
static ut_tensor *b_linear_ce_smooth(ut_ctx *c, ut_tensor **in) {
    float old = ut_ctx_set_label_smoothing(c, 0.2f);
    ut_tensor *r = ut_linear_cross_entropy(c, in[0], in[1], in[3], in[2], 0);
    ut_ctx_set_label_smoothing(c, old);
    return r;
}
static ut_tensor *b_linear_ce_reused(ut_ctx *c, ut_tensor **in) {
    ut_tensor *x = ut_scale(c, in[0], 0.7f);
    return ut_add(c, ut_linear_cross_entropy(c, x, in[1], NULL, in[2], -100), ut_mse(c, x, in[3]));
}

const gc_row gc_rows_loss[] = {
    {"linear_cross_entropy", 4, {{2, {5, 7}}, {2, {6, 7}}, {1, {5}, GC_INDEX, 6}, {1, {6}}}, b_linear_ce},
    {"linear_cross_entropy 3-D no bias, ignore_index 0", 3, {{3, {2, 3, 7}}, {2, {5, 7}}, {2, {2, 3}, GC_INDEX, 3}},
     b_linear_ce_nob},
    {"linear_cross_entropy label smoothing 0.2, ignore_index 0", 4,
     {{2, {6, 4}}, {2, {5, 4}}, {1, {6}, GC_INDEX, 3}, {1, {5}}}, b_linear_ce_smooth},
    {"linear_cross_entropy of x also used by mse", 4, {{2, {4, 5}}, {2, {6, 5}}, {1, {4}, GC_INDEX, 6}, {2, {4, 5}}},
     b_linear_ce_reused},
    {"cross_entropy", 2, {{2, {4, 5}}, {1, {4}, GC_INDEX, 5}}, b_ce},
    {"cross_entropy 3-D", 2, {{3, {2, 3, 7}}, {2, {2, 3}, GC_INDEX, 7}}, b_ce},
    {"cross_entropy 3-D ignore_index 0", 2, {{3, {2, 4, 5}}, {2, {2, 4}, GC_INDEX, 3}},
     b_ce_ignore0},
    {"cross_entropy twice on the same logits, one ignoring 0", 2,
     {{2, {6, 5}}, {1, {6}, GC_INDEX, 3}}, b_ce_twice},
    {"nll_loss", 2, {{2, {4, 5}}, {1, {4}, GC_INDEX, 5}}, b_nll},
    {"cross_entropy label smoothing 0.2, ignore_index 0", 2, {{3, {2, 4, 5}}, {2, {2, 4}, GC_INDEX, 3}},
     b_ce_smooth},
    {"nll_loss of log_softmax, label smoothing 0.3, ignore_index 0", 2, {{3, {2, 3, 6}}, {2, {2, 3}, GC_INDEX, 4}},
     b_nll_smooth},
    {"nll_loss 3-D ignore_index 0", 2, {{3, {2, 4, 5}}, {2, {2, 4}, GC_INDEX, 3}}, b_nll_ignore0},
    {"nll_loss of log_softmax", 2, {{3, {2, 3, 6}}, {2, {2, 3}, GC_INDEX, 6}},
     b_nll_of_log_softmax},
    {"mse", 2, {{2, {3, 4}}, {2, {3, 4}}}, b_mse},
    {"vocab_partials, part 1 of 2", 2, {{2, {5, 4}}, {1, {5}, GC_INDEX, 8}}, b_vocab_partials},
    {"vocab_ce over 3 parts", 2, {{3, {4, 3, 2}}, {1, {4}, GC_INDEX, 8}}, b_vocab_ce},
    {"vocab_ce ignore_index 0", 2, {{3, {6, 2, 2}}, {1, {6}, GC_INDEX, 3}}, b_vocab_ce_ignore0},
    {"vocab_partials + vocab_ce, one part, ignore_index 0", 2, {{3, {2, 3, 5}}, {2, {2, 3}, GC_INDEX, 5}},
     b_vocab_whole},
    {"mse 3-D const target", 2, {{3, {2, 3, 4}}, {3, {2, 3, 4}, GC_CONST}}, b_mse},
    {"class loss of scores (regression head)", 2, {{2, {5, 1}}, {1, {5}, GC_CONST}}, b_class_loss_scores},
    {"class loss of 0/1 labels (multi-label head)", 2, {{2, {4, 3}}, {2, {4, 3}, GC_INDEX, 2}}, b_class_loss_multi},
};
const int gc_nrows_loss = sizeof gc_rows_loss / sizeof gc_rows_loss[0];
