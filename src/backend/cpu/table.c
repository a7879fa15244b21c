/* The CPU op table, generated from the op list (src/core/ops.def). */
#include "cpu.h"

const ut_op_vtable ut_ops_cpu[UT_OP_COUNT] = {
    [UT_OP_NONE] = {NULL, NULL},
#define UT_OP(E, stem) [UT_OP_##E] = {ut_##stem##_fwd_cpu, ut_##stem##_bwd_cpu},
#define UT_OP_ANY(E, stem) [UT_OP_##E] = {ut_##stem##_fwd, ut_##stem##_bwd},
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP
};

/* cross-entropy reads 16-bit logits a row at a time; linear writes its
 * 16-bit output a block of rows at a time (matmul.c) */
const bool ut_cpu_reads_16[UT_OP_COUNT] = {[UT_OP_CROSS_ENTROPY] = true};
const bool ut_cpu_writes_16[UT_OP_COUNT] = {[UT_OP_LINEAR] = true};
