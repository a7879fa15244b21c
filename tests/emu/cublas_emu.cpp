/* cuBLAS and cuBLASLt on the CUDA emulator (declarations: cublas_emu.h), so
 * that src/backend/cuda/gemm.cu runs there as it is, descriptors, layouts,
 * operand swaps and fallbacks included.
 *
 * The arithmetic: each entry of D summed along k in order with fused
 * multiply-adds in float32 (the order the GPU's and OpenBLAS's kernels
 * accumulate in; other orders drift from the CPU backend by float rounding,
 * which a few AdamW steps amplify), operands widened exactly from 16 bits or
 * rounded to TF32 under CUBLAS_COMPUTE_32F_FAST_TF32 (and cuBLAS's
 * CUBLAS_TF32_TENSOR_OP_MATH), then D = alpha acc + beta C + bias, rounded
 * once to D's type; C is not read when beta is 0.
 *
 * The contract, from NVIDIA's headers and documentation, checked on every
 * call (a broken one returns the status the library documents and says why
 * on stderr):
 *   - attribute buffers of exactly the attribute's size;
 *   - a layout's leading dimension at least its rows (column-major);
 *   - op(A) m x k, op(B) k x n, C and D m x n, the same batch count on all
 *     four, D's batch entries not overlapping;
 *   - the types cuBLASLt has kernels for: float32 throughout, or bf16 or
 *     fp16 A and B with C = D in the same 16-bit type or in float32; TF32
 *     compute only on float32 operands; C's type D's type;
 *   - the epilogues DEFAULT and BIAS, and GELU, GELU_BIAS, GELU_AUX and
 *     GELU_AUX_BIAS (GELU in its tanh form, of the float32 sum with the
 *     bias; the AUX forms store that sum, rounded to D's type, in the aux
 *     matrix: its pointer and a leading dimension a multiple of 8 and at
 *     least D's rows, as the headers ask); a BIAS form needs its pointer,
 *     and its type is D's (the default) or float32. (The headers document D's type for a
 *     16-bit D; float32 is accepted here so that gemm.cu's fused path with a
 *     float32 bias runs. On a GPU whose cuBLASLt refuses it, the heuristic
 *     finds nothing and gemm.cu falls back to its rounding pass:
 *     UT_EMU_LT_STRICT_BIAS=1 refuses it here too, for testing that.)
 *   - an algorithm is used only for the problem it was found for;
 *   - alignment: the heuristic assumes the operands are aligned as the
 *     preference says (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, 256 by
 *     default) and the bias as its pointer is; cublasLtMatmul refuses
 *     (CUBLAS_STATUS_NOT_SUPPORTED) an operand less aligned than that, up to
 *     16 bytes (what vectorised kernels load);
 *   - the workspace the algorithm asked for (1 MiB where the preference
 *     allows it and k >= 256, as split-k algorithms do);
 *   - in place (C == D): Cdesc and Ddesc describe the same layout.
 * Streams run in program order (cuda_runtime_emu.h): a call's work is done
 * when it returns. */
#include "cublas_emu.h"
#include "cuda_emu.h"

#include <stdarg.h>

#include <vector>

struct utemu_lt {};
struct utemu_cublas {
    cublasMath_t math;
};
struct utemu_lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
};
struct utemu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t ta, tb;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type;
    void *aux;
    int64_t aux_ld;
};
struct utemu_lt_pref {
    uint64_t max_ws;
    uint32_t align[4];
};

namespace {

cublasStatus_t fail(cublasStatus_t s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "utemu: cuBLASLt: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (status %d)\n", (int)s);
    va_end(ap);
    return s;
}

bool known_type(int t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }

float load(const void *p, int t, int64_t i) {
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (t == CUDA_R_16F) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

void store(void *p, int t, int64_t i, float v) {
    if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (t == CUDA_R_16F) ((__half *)p)[i] = __float2half_rn(v);
    else ((float *)p)[i] = v;
}

/* a column-major operand: element (r, c) of op(X) at r + c ld, or c + r ld transposed */
struct operand {
    const void *p;
    int type;
    int64_t ld, stride;
    bool trans;
    float at(int64_t b, int64_t r, int64_t c) const {
        return load(p, type, b * stride + (trans ? c + r * ld : r + c * ld));
    }
};

/* the GELU epilogues' GELU: the tanh form, in float32 */
float gelu_tanh(float v) { return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))); }

/* D (m x n, column-major) = alpha op(A) op(B) + beta C + bias[row], for each
 * batch entry; with gelu, GELU of that, and with aux the value before GELU
 * stored there too (D's type, leading dimension aux_ld) */
void product(int64_t m, int64_t n, int64_t k, int64_t batch, float alpha, const operand &A, const operand &B,
             float beta, const void *C, int ctype, int64_t ldc, int64_t sc, void *D, int dtype, int64_t ldd,
             int64_t sd, const void *bias, int bias_type, bool round_tf32, bool gelu = false, void *aux = nullptr,
             int64_t aux_ld = 0) {
    std::vector<float> a((size_t)(m * k)), bt((size_t)(k * n)), acc((size_t)n);
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < k; p++) {
                float v = A.at(b, i, p);
                a[(size_t)(i * k + p)] = round_tf32 ? utemu_tf32(v) : v;
            }
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < n; j++) {
                float v = B.at(b, p, j);
                bt[(size_t)(p * n + j)] = round_tf32 ? utemu_tf32(v) : v;
            }
        for (int64_t i = 0; i < m; i++) {
            float *c = acc.data();
            for (int64_t j = 0; j < n; j++) c[j] = 0.0f;
            for (int64_t p = 0; p < k; p++) {
                const float x = a[(size_t)(i * k + p)], *y = &bt[(size_t)(p * n)];
                for (int64_t j = 0; j < n; j++) c[j] = fmaf(x, y[j], c[j]);
            }
            float bi = bias ? load(bias, bias_type, i) : 0.0f;
            for (int64_t j = 0; j < n; j++) {
                float v = alpha * c[j];
                if (beta != 0.0f) v += beta * load(C, ctype, b * sc + i + j * ldc);
                v += bi;
                if (aux) store(aux, dtype, i + j * aux_ld, v);
                store(D, dtype, b * sd + i + j * ldd, gelu ? gelu_tanh(v) : v);
            }
        }
    }
}

/* what an algorithm from the heuristic records: the problem it was found for and what it assumed */
enum { ALGO_MAGIC = 0x75746c74, A_SIG = 1, A_ALIGN = 2, A_WS = 3 };

uint64_t signature(const utemu_lt_desc *d, const utemu_lt_layout *a, const utemu_lt_layout *b,
                   const utemu_lt_layout *c, const utemu_lt_layout *dd) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix((uint64_t)d->compute), mix((uint64_t)d->ta), mix((uint64_t)d->tb), mix(d->epilogue);
    mix((uint64_t)d->bias_type), mix((uint64_t)d->aux_ld);
    for (const utemu_lt_layout *l : {a, b, c, dd}) {
        mix((uint64_t)l->type), mix(l->rows), mix(l->cols), mix((uint64_t)l->ld), mix((uint64_t)l->batch);
        mix((uint64_t)l->stride);
    }
    return h;
}

/* which of the emulated epilogues d's is */
bool has_bias(const utemu_lt_desc *d) {
    return d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
           d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_gelu(const utemu_lt_desc *d) {
    return d->epilogue == CUBLASLT_EPILOGUE_GELU || d->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
           d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux(const utemu_lt_desc *d) {
    return d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

/* UT_EMU_LT_STRICT_BIAS=1: only the bias types the headers document (D's),
 * as a cuBLASLt without a kernel for a float32 bias with a 16-bit D */
bool strict_bias() {
    const char *e = getenv("UT_EMU_LT_STRICT_BIAS");
    return e && e[0] == '1';
}

uint32_t alignment(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a >>= 1;
    return a;
}

/* the problem's checks, shared by the heuristic and the matmul; m, n, k from them */
cublasStatus_t check_problem(const utemu_lt_desc *d, const utemu_lt_layout *A, const utemu_lt_layout *B,
                             const utemu_lt_layout *C, const utemu_lt_layout *D, int64_t *m, int64_t *n,
                             int64_t *k) {
    if (!d || !A || !B || !C || !D) return fail(CUBLAS_STATUS_INVALID_VALUE, "a descriptor or layout is NULL");
    int64_t am = d->ta == CUBLAS_OP_N ? (int64_t)A->rows : (int64_t)A->cols;
    int64_t ak = d->ta == CUBLAS_OP_N ? (int64_t)A->cols : (int64_t)A->rows;
    int64_t bk = d->tb == CUBLAS_OP_N ? (int64_t)B->rows : (int64_t)B->cols;
    int64_t bn = d->tb == CUBLAS_OP_N ? (int64_t)B->cols : (int64_t)B->rows;
    if (ak != bk || (int64_t)C->rows != am || (int64_t)C->cols != bn || D->rows != C->rows || D->cols != C->cols)
        return fail(CUBLAS_STATUS_INVALID_VALUE,
                    "shapes do not match: op(A) %lld x %lld, op(B) %lld x %lld, C %llu x %llu, D %llu x %llu",
                    (long long)am, (long long)ak, (long long)bk, (long long)bn, (unsigned long long)C->rows,
                    (unsigned long long)C->cols, (unsigned long long)D->rows, (unsigned long long)D->cols);
    if (A->batch != B->batch || A->batch != C->batch || A->batch != D->batch)
        return fail(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ: A %d, B %d, C %d, D %d", A->batch, B->batch,
                    C->batch, D->batch);
    /* D's entries one after another, or side by side within a leading dimension */
    if (D->batch > 1 && D->stride < (int64_t)D->cols * D->ld &&
        !(D->stride >= (int64_t)D->rows && (D->batch - 1) * D->stride + (int64_t)D->rows <= D->ld))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "D's batch entries overlap (%d entries %llu x %llu, ld %lld, stride %lld)",
                    D->batch, (unsigned long long)D->rows, (unsigned long long)D->cols, (long long)D->ld,
                    (long long)D->stride);
    bool f32 = A->type == CUDA_R_32F && B->type == CUDA_R_32F;
    bool h16 = A->type == B->type && A->type != CUDA_R_32F;
    if (C->type != D->type) return fail(CUBLAS_STATUS_NOT_SUPPORTED, "C's type is not D's");
    if (d->scale != CUDA_R_32F) return fail(CUBLAS_STATUS_NOT_SUPPORTED, "scale type is not float32");
    if (d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? !f32
        : d->compute == CUBLAS_COMPUTE_32F || d->compute == CUBLAS_COMPUTE_32F_PEDANTIC
            ? !(f32 ? D->type == CUDA_R_32F : h16 && (D->type == CUDA_R_32F || D->type == A->type))
            : true)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* no kernel for the combination: a normal answer */
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && !has_bias(d) && !has_gelu(d)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (has_aux(d)) {
        if (!d->aux) return fail(CUBLAS_STATUS_INVALID_VALUE, "a GELU_AUX epilogue without an aux pointer");
        if (d->aux_ld % 8 || d->aux_ld < (int64_t)D->rows)
            return fail(CUBLAS_STATUS_INVALID_VALUE, "GELU's aux leading dimension %lld: not a multiple of 8 "
                        "or under D's %llu rows", (long long)d->aux_ld, (unsigned long long)D->rows);
        if (D->batch > 1) return CUBLAS_STATUS_NOT_SUPPORTED; /* its batch stride is not emulated */
    }
    if (has_bias(d)) {
        if (!d->bias) return fail(CUBLAS_STATUS_INVALID_VALUE, "a BIAS epilogue without a bias pointer");
        int bt = d->bias_type < 0 ? (int)D->type : d->bias_type;
        if (bt != (int)D->type && (bt != CUDA_R_32F || strict_bias())) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    *m = am, *n = bn, *k = ak;
    return CUBLAS_STATUS_SUCCESS;
}

template <typename T>
cublasStatus_t set(T *field, const void *buf, size_t size, const char *what) {
    if (!buf || size != sizeof(T))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: %zu bytes given, the attribute holds %zu", what, size,
                    sizeof(T));
    memcpy(field, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new utemu_lt{};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    if (!known_type(type)) return fail(CUBLAS_STATUS_NOT_SUPPORTED, "layout of type %d", (int)type);
    if (ld < 0 || (rows > 0 && ld < (int64_t)rows))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "layout %llu x %llu with leading dimension %lld < rows",
                    (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
    *l = new utemu_lt_layout{type, rows, cols, ld, 1, 0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                const void *buf, size_t size) {
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {
        cublasStatus_t s = set(&l->batch, buf, size, "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT");
        if (s == CUBLAS_STATUS_SUCCESS && l->batch < 1) return fail(CUBLAS_STATUS_INVALID_VALUE, "batch count < 1");
        return s;
    }
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: {
        cublasStatus_t s = set(&l->stride, buf, size, "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET");
        if (s == CUBLAS_STATUS_SUCCESS && l->stride < 0)
            return fail(CUBLAS_STATUS_INVALID_VALUE, "negative batch stride");
        return s;
    }
    default:
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "layout attribute %d is not emulated", (int)a);
    }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    *d = new utemu_lt_desc{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1, nullptr, 0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                              const void *buf, size_t size) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t s;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        int32_t *f = a == CUBLASLT_MATMUL_DESC_TRANSA ? &d->ta : &d->tb;
        s = set(f, buf, size, "CUBLASLT_MATMUL_DESC_TRANS[AB]");
        if (s == CUBLAS_STATUS_SUCCESS && *f != CUBLAS_OP_N && *f != CUBLAS_OP_T)
            return fail(CUBLAS_STATUS_INVALID_VALUE, "transpose %d of a real matrix", *f);
        return s;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        return set(&d->epilogue, buf, size, "CUBLASLT_MATMUL_DESC_EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        return set(&d->bias, buf, size, "CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        return set(&d->aux, buf, size, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        return set(&d->aux_ld, buf, size, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        s = set(&d->bias_type, buf, size, "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE");
        if (s == CUBLAS_STATUS_SUCCESS && d->bias_type != -1 && !known_type(d->bias_type))
            return fail(CUBLAS_STATUS_INVALID_VALUE, "bias type %d", d->bias_type);
        return s;
    default:
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "matmul attribute %d is not emulated", (int)a);
    }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    *p = new utemu_lt_pref{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                    size_t size) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        return set(&p->max_ws, buf, size, "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
        uint32_t *f = &p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES];
        cublasStatus_t s = set(f, buf, size, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES");
        if (s == CUBLAS_STATUS_SUCCESS && (*f == 0 || (*f & (*f - 1))))
            return fail(CUBLAS_STATUS_INVALID_VALUE, "alignment %u is not a power of two", *f);
        return s;
    }
    default:
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute %d is not emulated", (int)a);
    }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                              cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t pref,
                                              int requested, cublasLtMatmulHeuristicResult_t *results,
                                              int *returned) {
    if (!h || !pref || !results || !returned || requested < 1)
        return fail(CUBLAS_STATUS_INVALID_VALUE, "heuristic: a NULL argument or no result requested");
    *returned = 0;
    int64_t m = 0, n = 0, k = 0;
    cublasStatus_t s = check_problem(d, A, B, C, D, &m, &n, &k);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    r.algo.data[0] = ALGO_MAGIC;
    r.algo.data[A_SIG] = signature(d, A, B, C, D);
    uint32_t al[6];
    for (int i = 0; i < 4; i++) al[i] = pref->align[i] < 16 ? pref->align[i] : 16;
    al[4] = has_bias(d) ? (alignment(d->bias) < 16 ? alignment(d->bias) : 16) : 1;
    al[5] = has_aux(d) ? (alignment(d->aux) < 16 ? alignment(d->aux) : 16) : 1;
    r.algo.data[A_ALIGN] = 0;
    for (int i = 0; i < 6; i++) r.algo.data[A_ALIGN] |= (uint64_t)al[i] << (8 * i);
    r.workspaceSize = k >= 256 && pref->max_ws >= (1u << 20) ? (size_t)1 << 20 : 0;
    r.algo.data[A_WS] = r.workspaceSize;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    results[0] = r;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *Ap,
                              cublasLtMatrixLayout_t A, const void *Bp, cublasLtMatrixLayout_t B, const void *beta,
                              const void *Cp, cublasLtMatrixLayout_t C, void *Dp, cublasLtMatrixLayout_t D,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_size, cudaStream_t) {
    utemu::tally("cublasLtMatmul");
    if (!h || !alpha || !beta || !Ap || !Bp || !Dp)
        return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: a NULL handle, scalar or matrix");
    int64_t m = 0, n = 0, k = 0;
    cublasStatus_t s = check_problem(d, A, B, C, D, &m, &n, &k);
    if (s != CUBLAS_STATUS_SUCCESS) return s == CUBLAS_STATUS_NOT_SUPPORTED ? fail(s, "matmul: no kernel") : s;
    if (!algo || algo->data[0] != ALGO_MAGIC)
        return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: no algorithm from the heuristic");
    if (algo->data[A_SIG] != signature(d, A, B, C, D))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: the algorithm was found for another problem");
    float fb;
    memcpy(&fb, beta, 4);
    if (fb != 0.0f && !Cp) return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: beta != 0 and no C");
    const void *ptr[6] = {Ap, Bp, Cp ? Cp : Dp, Dp, d->bias, d->aux};
    static const char *name[6] = {"A", "B", "C", "D", "the bias", "GELU's aux"};
    for (int i = 0; i < 6; i++) {
        uint32_t need = (uint32_t)(algo->data[A_ALIGN] >> (8 * i)) & 0xffu;
        if ((i == 4 && !has_bias(d)) || (i == 5 && !has_aux(d))) continue;
        if (alignment(ptr[i]) < need)
            return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                        "matmul: %s (%p) is %u-byte aligned; the algorithm was chosen for %u "
                        "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES; the bias: as its pointer was at the heuristic)",
                        name[i], ptr[i], alignment(ptr[i]), need);
    }
    if (algo->data[A_WS] && (!ws || ws_size < algo->data[A_WS] || alignment(ws) < 16))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: the algorithm needs %llu bytes of workspace, %zu given at %p",
                    (unsigned long long)algo->data[A_WS], ws_size, ws);
    if (Cp == Dp && (C->type != D->type || C->ld != D->ld || C->batch != D->batch || C->stride != D->stride))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: in place (C == D) with layouts that differ");
    float fa;
    memcpy(&fa, alpha, 4);
    operand oa{Ap, (int)A->type, A->ld, A->stride, d->ta == CUBLAS_OP_T};
    operand ob{Bp, (int)B->type, B->ld, B->stride, d->tb == CUBLAS_OP_T};
    bool bias = has_bias(d);
    product(m, n, k, A->batch, fa, oa, ob, fb, Cp, (int)C->type, C->ld, C->stride, Dp, (int)D->type, D->ld,
            D->stride, bias ? d->bias : nullptr, bias && d->bias_type >= 0 ? d->bias_type : (int)D->type,
            d->compute == CUBLAS_COMPUTE_32F_FAST_TF32, has_gelu(d), has_aux(d) ? d->aux : nullptr, d->aux_ld);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLAS's classic API: the strided-batched SGEMM ---- */
cublasStatus_t cublasCreate(cublasHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new utemu_cublas{CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t) {
    return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sA,
                                         const float *B, int ldb, long long sB, const float *beta, float *C, int ldc,
                                         long long sC, int batch) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    int arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
        ldc < (m > 1 ? m : 1))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "SgemmStridedBatched: m %d n %d k %d lda %d ldb %d ldc %d", m, n, k,
                    lda, ldb, ldc);
    if (!m || !n || !batch) return CUBLAS_STATUS_SUCCESS;
    operand oa{A, CUDA_R_32F, lda, sA, ta == CUBLAS_OP_T}, ob{B, CUDA_R_32F, ldb, sB, tb == CUBLAS_OP_T};
    product(m, n, k, batch, *alpha, oa, ob, *beta, C, CUDA_R_32F, ldc, sC, C, CUDA_R_32F, ldc, sC, nullptr, CUDA_R_32F,
            h->math == CUBLAS_TF32_TENSOR_OP_MATH);
    return CUBLAS_STATUS_SUCCESS;
}
}
