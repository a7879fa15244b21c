/* Named op parameters: where each op keeps its parameters in a tensor's
 * ip[] (integers) and fp[] (floats) slots. The op constructors (src/ops) set
 * them and every backend's kernels read them through these accessors, so no
 * file names a bare slot.
 * defines: ut_<op>_<param>(t) getters and ut_<op>_set_<param>(t, v) setters. */
#ifndef UTRAIN_OP_PARAMS_H
#define UTRAIN_OP_PARAMS_H

#include "utrain/tensor.h"

#define UT_PARAM_I(op, name, slot)                                                      \
    static inline int64_t ut_##op##_##name(const ut_tensor *t) { return t->ip[slot]; }  \
    static inline void ut_##op##_set_##name(ut_tensor *t, int64_t v) { t->ip[slot] = v; }
#define UT_PARAM_F(op, name, slot)                                                      \
    static inline float ut_##op##_##name(const ut_tensor *t) { return t->fp[slot]; }    \
    static inline void ut_##op##_set_##name(ut_tensor *t, float v) { t->fp[slot] = v; }

/* views (reshape, permute, slice): gradient strides, one per view dimension
 * (ip[0..3]), map view positions to positions in the source's gradient, which
 * starts at the gradient offset (ip[4]) */
static inline const int64_t *ut_view_grad_strides(const ut_tensor *t) { return t->ip; }
static inline void ut_view_set_grad_strides(ut_tensor *t, int ndim, const int64_t *st) {
    for (int i = 0; i < ndim; i++) t->ip[i] = st[i];
}
UT_PARAM_I(view, grad_offset, 4)

/* add, mul: b's strides in a's shape padded to 4 dims (0 where b broadcasts) */
static inline const int64_t *ut_binary_b_strides(const ut_tensor *t) { return t->ip; }
static inline void ut_binary_set_b_strides(ut_tensor *t, const int64_t *st4) {
    for (int i = 0; i < 4; i++) t->ip[i] = st4[i];
}

/* scale: out = s * x */
UT_PARAM_F(scale, s, 0)
/* dropout: drop probability p and the survivors' factor 1 / (1 - p) */
UT_PARAM_F(dropout, p, 0)
UT_PARAM_F(dropout, keep_scale, 1)
/* layernorm */
UT_PARAM_F(layernorm, eps, 0)
/* conv2d */
UT_PARAM_I(conv2d, stride, 0)
UT_PARAM_I(conv2d, padding, 1)
/* max_pool2d */
UT_PARAM_I(max_pool2d, kernel, 0)
UT_PARAM_I(max_pool2d, stride, 1)
/* attention */
UT_PARAM_I(attention, n_head, 0)
/* attention_masked */
UT_PARAM_I(attention_masked, n_head, 0)
UT_PARAM_I(attention_masked, is_causal, 1)      /* 1: query t also sees no key after t */
UT_PARAM_F(attention_masked, p, 0)            /* dropout of the probabilities (0: none) */
UT_PARAM_F(attention_masked, keep_scale, 1)
/* cross_entropy and nll_loss: the ignored target value, and (set by the
 * forward kernel) the number of targets not ignored, the mean's divisor */
UT_PARAM_I(loss, ignore_index, 0)
UT_PARAM_I(loss, count, 1)

#undef UT_PARAM_I
#undef UT_PARAM_F
#endif
