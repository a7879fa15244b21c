/* The CUDA op table, generated from the op list (src/core/ops.def). */
#include "cuda.h"

const ut_op_vtable ut_ops_cuda[UT_OP_COUNT] = {
    [UT_OP_NONE] = {NULL, NULL},
#define UT_OP(E, stem) [UT_OP_##E] = {ut_##stem##_fwd_cuda, ut_##stem##_bwd_cuda},
#define UT_OP_ANY(E, stem) [UT_OP_##E] = {ut_##stem##_fwd, ut_##stem##_bwd},
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP
};
