/* What each CPU kernel does with 16-bit data itself (backend.h, UT_KCAP_*):
 * cross-entropy reads 16-bit logits a row at a time; linear writes its 16-bit
 * output a block of rows at a time (matmul.c); the rest get float32 copies.
 * Linear (and linear with cross-entropy), add, gelu, layernorm, scale, relu,
 * tanh, sigmoid and dropout write a gradient no op has written yet rather than add into zeros
 * (UT_KCAP_FRESH_GRAD); add hands its gradient itself to an operand of its
 * shape (UT_KCAP_PASS_GRAD).
 * Every op has CAPS_<OP> = 0 from the enum; a #define of that name after it
 * gives an op its capabilities. The CPU's op table and the sim device's
 * (the same kernels) both read it.
 * defines: CAPS_<OP> for every op of src/core/ops.def. */
#ifndef UTRAIN_CPU_CAPS_H
#define UTRAIN_CPU_CAPS_H

#include "internal.h"

enum {
#define UT_OP(E, stem, props) CAPS_##E = 0,
#define UT_OP_ANY(E, stem, props)
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP
};
#define CAPS_CROSS_ENTROPY UT_KCAP_READS_16
#define CAPS_LINEAR (UT_KCAP_WRITES_16 | UT_KCAP_FRESH_GRAD)
#define CAPS_ADD (UT_KCAP_FRESH_GRAD | UT_KCAP_PASS_GRAD)
#define CAPS_GELU UT_KCAP_FRESH_GRAD
#define CAPS_LAYERNORM UT_KCAP_FRESH_GRAD
#define CAPS_SCALE UT_KCAP_FRESH_GRAD
#define CAPS_RELU UT_KCAP_FRESH_GRAD
#define CAPS_TANH UT_KCAP_FRESH_GRAD
#define CAPS_SIGMOID UT_KCAP_FRESH_GRAD
#define CAPS_DROPOUT UT_KCAP_FRESH_GRAD
#define CAPS_LINEAR_CE UT_KCAP_FRESH_GRAD

#endif
