/* The CUDA op table, generated from the op list (src/core/ops.def). Each
 * entry goes through a thunk that first tells the products which autocast
 * dtype the op runs under (ut_cuda_gemm_rounded), so no kernel's glue has to
 * and none can leave a stale setting for the next op. */
#include "cuda.h"

#define UT_OP(E, stem, props)                                  \
    static void stem##_fwd(ut_tensor *t, const ut_kctx *k) { \
        ut_cuda_gemm_rounded((int)t->autocast);                \
        ut_##stem##_fwd_cuda(t, k);                            \
    }                                                          \
    static void stem##_bwd(ut_tensor *t, const ut_kctx *k) { \
        ut_cuda_gemm_rounded((int)t->autocast);                \
        ut_##stem##_bwd_cuda(t, k);                            \
    }
#define UT_OP_ANY(E, stem, props)
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP

/* What each kernel does with 16-bit data itself (backend.h, UT_KCAP_*):
 * linear (and linear with cross-entropy) does autocast itself (matmul.c),
 * cross-entropy reads 16-bit logits
 * and writes their 16-bit gradient (softmax.cu), the gelus (unary.cu) and
 * layernorm (norm.c), add and mul (binary.c) and dropout (unary.c) read and
 * write every tensor as stored; every other op under autocast gets
 * float32 copies from core. The ops marked UT_KCAP_FRESH_GRAD write a
 * gradient no op has written yet instead of adding into zeros (linear's
 * input gradient with beta 0, cuDNN attention's dqkv in place); add hands
 * its own gradient to an operand of its shape (UT_KCAP_PASS_GRAD). Every op
 * has CAPS_<OP> = 0 from the enum; a #define of that name after it gives an
 * op its capabilities. */
enum {
#define UT_OP(E, stem, props) CAPS_##E = 0,
#define UT_OP_ANY(E, stem, props)
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP
};
#define CAPS_LINEAR (UT_KCAP_NATIVE_16 | UT_KCAP_FRESH_GRAD)
#define CAPS_CROSS_ENTROPY UT_KCAP_READS_16
#define CAPS_GELU (UT_KCAP_NATIVE_16 | UT_KCAP_FRESH_GRAD)
#define CAPS_GELU_ERF (UT_KCAP_NATIVE_16 | UT_KCAP_FRESH_GRAD)
#define CAPS_LAYERNORM (UT_KCAP_NATIVE_16 | UT_KCAP_FRESH_GRAD)
#define CAPS_ADD (UT_KCAP_NATIVE_16 | UT_KCAP_FRESH_GRAD | UT_KCAP_PASS_GRAD)
#define CAPS_MUL UT_KCAP_NATIVE_16
#define CAPS_DROPOUT (UT_KCAP_NATIVE_16 | UT_KCAP_FRESH_GRAD)
#define CAPS_ATTENTION (UT_KCAP_NATIVE_16 | UT_KCAP_FRESH_GRAD)
#define CAPS_SCALE UT_KCAP_FRESH_GRAD
#define CAPS_RELU UT_KCAP_FRESH_GRAD
#define CAPS_TANH UT_KCAP_FRESH_GRAD
#define CAPS_SIGMOID UT_KCAP_FRESH_GRAD
#define CAPS_ATTENTION_MASKED UT_KCAP_NATIVE_16
#define CAPS_ATTENTION_VARLEN UT_KCAP_NATIVE_16
#define CAPS_LINEAR_CE (UT_KCAP_NATIVE_16 | UT_KCAP_FRESH_GRAD)

const ut_op_vtable ut_ops_cuda[UT_OP_COUNT] = {
    [UT_OP_NONE] = {NULL, NULL, 0},
#define UT_OP(E, stem, props) [UT_OP_##E] = {stem##_fwd, stem##_bwd, CAPS_##E},
#define UT_OP_ANY(E, stem, props) [UT_OP_##E] = {ut_##stem##_fwd, ut_##stem##_bwd, 0},
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP
};
