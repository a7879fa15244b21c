/* The CPU op table, generated from the op list (src/core/ops.def). */
#include "caps.h"
#include "cpu.h"

const ut_op_vtable ut_ops_cpu[UT_OP_COUNT] = {
    [UT_OP_NONE] = {NULL, NULL, 0},
#define UT_OP(E, stem, props) [UT_OP_##E] = {ut_##stem##_fwd_cpu, ut_##stem##_bwd_cpu, CAPS_##E},
#define UT_OP_ANY(E, stem, props) [UT_OP_##E] = {ut_##stem##_fwd, ut_##stem##_bwd, 0},
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP
};
