/* The CPU op table, generated from the op list (src/core/ops.def). */
#include "cpu.h"

/* What each kernel does with 16-bit data itself (backend.h, UT_KCAP_*):
 * cross-entropy reads 16-bit logits a row at a time; linear writes its 16-bit
 * output a block of rows at a time (matmul.c); the rest get float32 copies.
 * Every op has CAPS_<OP> = 0 from the enum; a #define of that name after it
 * gives an op its capabilities. */
enum {
#define UT_OP(E, stem, props) CAPS_##E = 0,
#define UT_OP_ANY(E, stem, props)
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP
};
#define CAPS_CROSS_ENTROPY UT_KCAP_READS_16
#define CAPS_LINEAR UT_KCAP_WRITES_16

const ut_op_vtable ut_ops_cpu[UT_OP_COUNT] = {
    [UT_OP_NONE] = {NULL, NULL, 0},
#define UT_OP(E, stem, props) [UT_OP_##E] = {ut_##stem##_fwd_cpu, ut_##stem##_bwd_cpu, CAPS_##E},
#define UT_OP_ANY(E, stem, props) [UT_OP_##E] = {ut_##stem##_fwd, ut_##stem##_bwd, 0},
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP
};
