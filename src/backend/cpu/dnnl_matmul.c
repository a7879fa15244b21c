/* bf16 matrix products on the CPU's bf16 instructions through oneDNN, and
 * the choice of the path autocast's bf16 products take.
 *
 * Autocast hands a product float32 operands that hold bf16 values (rounded
 * by ut_lowp_forward / ut_lowp_backward). Where the CPU has AMX-BF16 or
 * AVX512_BF16 and oneDNN creates a bf16 matmul, the operands are stored as
 * bf16 (exactly: they are bf16 values) and multiplied by oneDNN with fp32
 * accumulation and fp32 output, as PyTorch's CPU autocast does. Elsewhere
 * (AVX2 machines: oneDNN 2.6 has no bf16 matmul without AVX-512) the same
 * operands go to OpenBLAS sgemm: the same products, without the speed. */
#include <cpuid.h>
#include <stdio.h>

#include "cpu.h"
#include "dnnl_glue.h"
#include "gemm.h"

/* ---- what the CPU has: cpuid, and XCR0 for the register state the OS saves ---- */
static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

ut_bf16_isa ut_cpu_bf16_isa(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return UT_BF16_ISA_NONE; /* OSXSAVE */
    uint64_t x = xcr0();
    unsigned b7 = 0, d7 = 0, a71 = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) b7 = b, d7 = d;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) a71 = a;
    bool amx = (d7 & (1u << 22)) && (d7 & (1u << 24)) && (x & 0x60000) == 0x60000; /* AMX-BF16, AMX-TILE */
    bool avx512 = (b7 & (1u << 16)) && (x & 0xe6) == 0xe6;                          /* AVX512F, ZMM state */
    if (amx && avx512) return UT_BF16_ISA_AMX;
    if (avx512 && (a71 & (1u << 5))) return UT_BF16_ISA_AVX512; /* AVX512_BF16 */
    return UT_BF16_ISA_NONE;
}

/* ---- the oneDNN product ---- */
/* A 2-D float or bf16 matrix (rows, cols) stored row-major, or transposed
 * (stored (cols, rows)) when t. */
static void matrix_md(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, bool t, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols}, strides = {t ? 1 : cols, t ? rows : 1};
    dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

int ut_dnnl_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
                      float beta, float *C, uint16_t *scratch) {
    UT_ASSERT(beta == 0.0f || beta == 1.0f);
    dnnl_memory_desc_t a, b, c;
    matrix_md(&a, M, K, ta, dnnl_bf16);
    matrix_md(&b, K, N, tb, dnnl_bf16);
    matrix_md(&c, M, N, false, dnnl_f32);
    dnnl_matmul_desc_t od;
    if (dnnl_matmul_desc_init(&od, &a, &b, NULL, &c) != dnnl_success) return -1;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (beta == 1.0f) { /* C += A @ B: a sum post-op */
        if (dnnl_primitive_attr_create(&attr) || dnnl_post_ops_create(&po) || dnnl_post_ops_append_sum(po, 1.0f) ||
            dnnl_primitive_attr_set_post_ops(attr, po))
            ut_abort(__FILE__, __LINE__, "oneDNN: could not set up a sum post-op");
    }
    dnnl_primitive_desc_t pd = ut_dnnl_pd(&od, attr, NULL);
    int rc = -1;
    if (pd) { /* convert only once oneDNN has said yes */
        dnnl_primitive_desc_destroy(pd);
        uint16_t *a16 = scratch, *b16 = scratch + M * K;
        ut_f32_to_bf16_cpu(a16, A, M * K);
        ut_f32_to_bf16_cpu(b16, B, K * N);
        int ids[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
        void *ptrs[] = {a16, b16, C};
        rc = ut_dnnl_run(&od, attr, NULL, 3, ids, ptrs, NULL, NULL, 0);
    }
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return rc;
}

/* ---- the path bf16 products take: decided once, at first use ---- */
static int force_dnnl = -1; /* ut_bf16_force_dnnl: -1 none, else its value */

void ut_bf16_force_dnnl(int on) { force_dnnl = on; }

/* Whether oneDNN creates a bf16 matmul on this CPU (a small probe). */
static bool dnnl_has_bf16_matmul(void) {
    dnnl_memory_desc_t a, c;
    matrix_md(&a, 16, 16, false, dnnl_bf16);
    matrix_md(&c, 16, 16, false, dnnl_f32);
    dnnl_matmul_desc_t od;
    if (dnnl_matmul_desc_init(&od, &a, &a, NULL, &c) != dnnl_success) return false;
    dnnl_primitive_desc_t pd = ut_dnnl_pd(&od, NULL, NULL);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return pd != NULL;
}

bool ut_bf16_use_dnnl(void) {
    static int use = -1; /* benign race: every thread computes the same answer */
    if (force_dnnl >= 0) return force_dnnl;
    if (use < 0) use = ut_cpu_bf16_isa() != UT_BF16_ISA_NONE && dnnl_has_bf16_matmul();
    return use;
}

const char *ut_cpu_matmul_path(ut_dtype dt) {
    if (dt == UT_F16) return "fp32 sgemm on fp16-rounded inputs (no fp16 matmul kernel on the CPU backend)";
    if (dt != UT_BF16) return "fp32 sgemm";
    ut_bf16_isa isa = ut_cpu_bf16_isa();
    if (isa == UT_BF16_ISA_NONE) return "fp32 sgemm on bf16-rounded inputs (CPU has no bf16 instructions)";
    if (!ut_bf16_use_dnnl()) return "fp32 sgemm on bf16-rounded inputs (oneDNN has no bf16 matmul on this CPU)";
    return isa == UT_BF16_ISA_AMX ? "oneDNN AMX" : "oneDNN AVX512_BF16";
}
