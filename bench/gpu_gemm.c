/* The GPT-2 124M training step's matrix products alone, on the GPU, one
 * shape at a time: for each kind of linear layer (attention's qkv and
 * projection, the MLP's up and down, the tied head over 50257 tokens) its
 * three products of a step (forward, input gradient, weight gradient) at N =
 * batch x seq rows, through the calls the linear op makes (matmul.c: under
 * autocast ut_cuda_gemm16, 16-bit operands with float32 accumulation and
 * output; else ut_cuda_sgemm, float32 or TF32), timed by the GPU's timing
 * events over reps. Prints TFLOP/s per product and the step's product time
 * (twelve blocks' worth of each block layer, plus the head), to set beside
 * the linear op's share of UT_PROFILE_OPS=gpu: what the products cost and
 * what the op adds around them. The head runs three times: on rows 50257
 * elements apart, as stored; 50264 apart (16 bytes, matmul.c's ld16, what
 * UT_CUDA_LT_PAD=0 runs); and padded to 50304 rows (the zero-padded copies
 * the linear op makes by default, matmul.c's padded_oc), which the step's
 * sum counts.
 *
 *   gpu_gemm [--batch B] [--seq T] [--reps R] [--precision bf16|fp16|tf32|fp32] [--json]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "utrain/base.h"

/* the CUDA backend's products (src/backend/cuda/cuda.h, whose other
 * declarations need core's private header) */
void ut_cuda_sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                   int64_t lda, int64_t sA, const float *B, int64_t ldb, int64_t sB, float beta, float *C,
                   int64_t ldc, int64_t sC, int64_t batch);
void ut_cuda_set_tf32(bool on);
void ut_cuda_gemm16(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                    int64_t lda, const void *B, int64_t ldb, float beta, float *C, int64_t ldc, int dt);

typedef struct {
    const char *name;
    long oc, c, layers;
    long ld; /* the row stride of the OC-wide operand and result (0: OC) */
} shape;

static const ut_backend *be;

/* n random values in [-1, 1) in device memory of dt */
static void *random_dev(int64_t n, ut_dtype dt, unsigned seed) {
    float *h = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    }
    float *d = be->alloc((size_t)n * sizeof(float));
    be->copy(d, h, (size_t)n * sizeof(float), UT_COPY_H2D);
    free(h);
    if (dt == UT_F32) return d;
    void *d16 = be->alloc((size_t)n * 2);
    be->convert(d16, dt, d, UT_F32, n);
    be->free(d);
    return d16;
}

/* one product: C (m x n) = opA(A) opB(B), k inner, beta into C */
static void product(int prec, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                    const void *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (prec == UT_BF16 || prec == UT_F16)
        ut_cuda_gemm16(ta, tb, m, n, k, 1.0f, A, lda, B, ldb, beta, C, ldc, prec);
    else
        ut_cuda_sgemm(ta, tb, m, n, k, 1.0f, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

int main(int argc, char **argv) {
    long B = 8, T = 1024, reps = 20;
    const char *precision = "bf16";
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--batch")) B = atol(v), i++;
        else if (!strcmp(a, "--seq")) T = atol(v), i++;
        else if (!strcmp(a, "--reps")) reps = atol(v), i++;
        else if (!strcmp(a, "--precision")) precision = v, i++;
        else if (!strcmp(a, "--json")) json = true;
        else {
            fprintf(stderr, "usage: gpu_gemm [--batch B] [--seq T] [--reps R] [--precision bf16|fp16|tf32|fp32] "
                            "[--json]\n");
            return 2;
        }
    }
    int prec = !strcmp(precision, "bf16") ? UT_BF16 : !strcmp(precision, "fp16") ? UT_F16 : UT_F32;
    if (B < 1 || T < 1 || reps < 1 || (prec == UT_F32 && strcmp(precision, "fp32") && strcmp(precision, "tf32"))) {
        fprintf(stderr, "gpu_gemm: batch, seq and reps must be positive, precision bf16, fp16, tf32 or fp32\n");
        return 2;
    }
    char why[256];
    if (ut_backend_check(UT_CUDA, why, sizeof why)) {
        fprintf(stderr, "gpu_gemm: %s\n", why);
        return 1;
    }
    be = ut_backend_get(UT_CUDA);
    ut_cuda_set_tf32(!strcmp(precision, "tf32"));
    const shape shapes[] = {{"qkv", 2304, 768, 12, 0},         {"attn proj", 768, 768, 12, 0},
                            {"mlp up", 3072, 768, 12, 0},      {"mlp down", 768, 3072, 12, 0},
                            {"head ld OC", 50257, 768, 0, 0}, {"head ld16", 50257, 768, 0, 50264},
                            {"head pad", 50304, 768, 1, 50304}};
    int64_t N = (int64_t)B * T;
    ut_dtype opd = prec == UT_F32 ? UT_F32 : (ut_dtype)prec;
    void *t0 = be->timer_new(), *t1 = be->timer_new();
    double step_ms = 0, step_flop = 0;
    if (!json)
        printf("GPT-2 124M products, %s, N = %lld rows (batch %ld x seq %ld), median of 3 runs of %ld reps\n",
               precision, (long long)N, B, T, reps);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        int64_t OC = sh->oc, C = sh->c, L = sh->ld ? sh->ld : OC;
        void *x = random_dev(N * C, opd, 1), *w = random_dev(OC * C, opd, 2), *g = random_dev(N * L, opd, 3);
        float *y = be->alloc((size_t)(N * (L > C ? L : C)) * sizeof(float));
        float *dw = be->alloc((size_t)(OC * C) * sizeof(float));
        be->memset(dw, 0, (size_t)(OC * C) * sizeof(float));
        const char *what[3] = {"forward", "input grad", "weight grad"};
        double ms[3];
        for (int p = 0; p < 3; p++) {
            double runs[3];
            for (int r = 0; r < 4; r++) { /* the first run warms up (and picks cuBLASLt's algorithm) */
                be->event_record(t0, NULL);
                for (long i = 0; i < reps; i++) {
                    if (p == 0) product(prec, false, true, N, OC, C, x, C, w, C, 0.0f, y, L);
                    else if (p == 1) product(prec, false, false, N, C, OC, g, L, w, C, 0.0f, y, C);
                    else product(prec, true, false, OC, C, N, g, L, x, C, 1.0f, dw, C);
                }
                be->event_record(t1, NULL);
                be->event_sync(t1);
                if (r) runs[r - 1] = be->timer_ms(t0, t1) / (double)reps;
            }
            /* the median of the three */
            double a = runs[0], b = runs[1], c = runs[2];
            ms[p] = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
            double flop = 2.0 * (double)N * (double)OC * (double)C;
            step_ms += ms[p] * (double)sh->layers;
            step_flop += flop * (double)sh->layers;
            if (!json)
                printf("  %-10s %5lld x %-5lld %-11s %8.3f ms %7.1f TFLOP/s\n", sh->name, (long long)OC,
                       (long long)C, what[p], ms[p], flop / (ms[p] * 1e-3) / 1e12);
        }
        be->free(x);
        be->free(w);
        be->free(g);
        be->free(y);
        be->free(dw);
    }
    be->event_free(t0);
    be->event_free(t1);
    double tflops = step_flop / (step_ms * 1e-3) / 1e12;
    if (json)
        printf("{\"bench\":\"gpu_gemm\",\"precision\":\"%s\",\"batch\":%ld,\"seq\":%ld,\"step_products_ms\":%.3f,"
               "\"tflops\":%.1f}\n",
               precision, B, T, step_ms, tflops);
    else
        printf("  the step's products (12 blocks + head): %.2f ms, %.1f TFLOP/s\n", step_ms, tflops);
    return 0;
}
