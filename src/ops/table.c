/* The CPU op table and op names, generated from ops.def. */
#include "internal.h"

const ut_op_vtable ut_ops_cpu[UT_OP_COUNT] = {
    [UT_OP_NONE] = {"leaf", NULL, NULL},
#define UT_OP(E, stem) [UT_OP_##E] = {#stem, ut_##stem##_fwd_cpu, ut_##stem##_bwd_cpu},
#include "ops.def"
#undef UT_OP
};

const char *ut_op_name(int op) {
    return op >= 0 && op < UT_OP_COUNT ? ut_ops_cpu[op].name : "?";
}

int ut_op_count(void) { return UT_OP_COUNT; }
