/* The CUDA op table, generated from the op list (src/core/ops.def). Each
 * entry goes through a thunk that first tells the products which autocast
 * dtype the op runs under (ut_cuda_gemm_rounded), so no kernel's glue has to
 * and none can leave a stale setting for the next op. */
#include "cuda.h"

#define UT_OP(E, stem)                                  \
    static void stem##_fwd(ut_tensor *t) {              \
        ut_cuda_gemm_rounded((int)t->autocast);         \
        ut_##stem##_fwd_cuda(t);                        \
    }                                                   \
    static void stem##_bwd(ut_tensor *t) {              \
        ut_cuda_gemm_rounded((int)t->autocast);         \
        ut_##stem##_bwd_cuda(t);                        \
    }
#define UT_OP_ANY(E, stem)
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP

const ut_op_vtable ut_ops_cuda[UT_OP_COUNT] = {
    [UT_OP_NONE] = {NULL, NULL},
#define UT_OP(E, stem) [UT_OP_##E] = {stem##_fwd, stem##_bwd},
#define UT_OP_ANY(E, stem) [UT_OP_##E] = {ut_##stem##_fwd, ut_##stem##_bwd},
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP
};
