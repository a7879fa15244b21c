/* oneDNN in the CPU backend: its convolution against utrain's im2col +
 * sgemm path (every direction, plain and blocked layouts, strides and
 * padding; the same bits twice); the bf16 instruction detection against /proc/cpuinfo; the bf16
 * matmul path forced on (oneDNN's bf16 product against sgemm within bf16
 * tolerance where oneDNN runs bf16 on this CPU, else a clean refusal and the
 * sgemm fallback), the same bits from two runs, and the path the log names. */
#include <stdint.h>
#include <string.h>

#include "../../src/backend/cpu/conv.h"
#include "../../src/backend/cpu/gemm.h"
#include "test.h"
#include "utrain/ops.h"
#include "utrain/tensor.h"

static uint64_t lcg(uint64_t *s) { return *s = *s * 6364136223846793005ull + 1442695040888963407ull; }
static float unif(uint64_t *s) { return (float)((lcg(s) >> 40) * 0x1p-24) * 2.0f - 1.0f; }

static float *rand_buf(int64_t n, uint64_t seed) {
    float *p = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = unif(&seed);
    return p;
}

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const float *b, int64_t n) {
    double m = 0, s = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i])), s = fmax(s, fabs((double)b[i]));
    return m / (s > 0 ? s : 1);
}

/* ---- convolution: oneDNN against im2col + sgemm ---- */

static ut_conv2d_shape conv_shape(int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH,
                                  int64_t KW, int64_t S, int64_t P) {
    return (ut_conv2d_shape){.B = B, .C = C, .H = H, .W = W, .OC = OC, .KH = KH, .KW = KW, .S = S, .P = P,
                             .OH = (H + 2 * P - KH) / S + 1, .OW = (W + 2 * P - KW) / S + 1};
}

static void conv_case(const ut_conv2d_shape *d, ut_dnnl_layout lay) {
    int64_t nx = d->B * d->C * d->H * d->W, nw = d->OC * d->C * d->KH * d->KW;
    int64_t ny = d->B * d->OC * d->OH * d->OW, col = d->C * d->KH * d->KW * d->OH * d->OW;
    float *x = rand_buf(nx, 1), *w = rand_buf(nw, 2), *b = rand_buf(d->OC, 3), *g = rand_buf(ny, 4);
    float *cols = calloc((size_t)(2 * col), sizeof(float)), *part = calloc((size_t)(UT_CONV_DW_CHUNKS * nw), sizeof(float));
    float *y0 = calloc((size_t)ny, 4), *y1 = calloc((size_t)ny, 4), *dx0 = calloc((size_t)nx, 4), *dx1 = calloc((size_t)nx, 4);
    float *dw0 = calloc((size_t)nw, 4), *dw1 = calloc((size_t)nw, 4), *db0 = calloc((size_t)d->OC, 4), *db1 = calloc((size_t)d->OC, 4);
    ut_conv2d_forward_cpu(y0, cols, x, w, b, d, 1);
    ut_conv2d_backward_cpu(dx0, dw0, db0, cols, part, g, NULL, NULL, x, w, d, 1);
    CHECK(ut_dnnl_conv2d_forward(y1, x, w, b, d, lay) == 0, "oneDNN forward C %lld layout %d", (long long)d->C, lay);
    CHECK(ut_dnnl_conv2d_backward_data(dx1, g, w, d, lay) == 0, "oneDNN backward data");
    CHECK(ut_dnnl_conv2d_backward_weights(dw1, db1, g, x, d, lay) == 0, "oneDNN backward weights");
    float *again = calloc((size_t)(nx > ny ? nx : ny), 4);
    CHECK(ut_dnnl_conv2d_forward(again, x, w, b, d, lay) == 0 && !memcmp(again, y1, (size_t)ny * 4),
          "oneDNN forward gives the same bits twice");
    CHECK(ut_dnnl_conv2d_backward_data(again, g, w, d, lay) == 0 && !memcmp(again, dx1, (size_t)nx * 4),
          "oneDNN backward data gives the same bits twice");
    free(again);
    const char *what[] = {"forward", "dx", "dw", "db"};
    double e[] = {rel_diff(y1, y0, ny), rel_diff(dx1, dx0, nx), rel_diff(dw1, dw0, nw), rel_diff(db1, db0, d->OC)};
    for (int i = 0; i < 4; i++)
        CHECK(e[i] < 1e-5, "%s: C %lld S %lld P %lld layout %d: rel diff %.3g", what[i], (long long)d->C,
              (long long)d->S, (long long)d->P, lay, e[i]);
    float *p[] = {x, w, b, g, cols, part, y0, y1, dx0, dx1, dw0, dw1, db0, db1};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

static void test_conv_matches_im2col(void) {
    ut_conv2d_shape shapes[] = {
        conv_shape(3, 8, 7, 6, 5, 3, 3, 1, 1),  conv_shape(2, 9, 9, 8, 4, 3, 2, 2, 1),
        conv_shape(2, 1, 6, 6, 3, 3, 3, 1, 0),  conv_shape(4, 16, 5, 5, 8, 5, 5, 1, 2),
        conv_shape(1, 32, 12, 12, 16, 3, 3, 2, 0),
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        conv_case(&shapes[i], UT_DNNL_PLAIN);
        conv_case(&shapes[i], UT_DNNL_BLOCKED);
    }
}

/* ---- bf16 ---- */
/* Whether /proc/cpuinfo's first flags line lists flag (a whole word). */
static bool cpuinfo_has(const char *flag) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    bool found = false;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5)) continue;
        for (char *tok = strtok(line + 5, " \t\n:"); tok; tok = strtok(NULL, " \t\n"))
            found |= !strcmp(tok, flag);
        break;
    }
    if (f) fclose(f);
    return found;
}

static void test_bf16_isa_detection(void) {
    ut_bf16_isa isa = ut_cpu_bf16_isa();
    bool amx = cpuinfo_has("amx_bf16") && cpuinfo_has("amx_tile"), avx = cpuinfo_has("avx512_bf16");
    CHECK(isa == (amx && cpuinfo_has("avx512f") ? UT_BF16_ISA_AMX : avx ? UT_BF16_ISA_AVX512 : UT_BF16_ISA_NONE),
          "cpuid says %d; /proc/cpuinfo: amx_bf16+amx_tile %d, avx512_bf16 %d", (int)isa, amx, avx);
    const char *path = ut_autocast_matmul_path(UT_CPU, UT_BF16);
    printf("     bf16 matmul: %s\n", path);
    if (isa == UT_BF16_ISA_NONE)
        CHECK(!strcmp(path, "fp32 sgemm on bf16-rounded inputs (CPU has no bf16 instructions)"), "%s", path);
    else CHECK(strstr(path, "oneDNN") || strstr(path, "oneDNN has no bf16 matmul"), "%s", path);
    CHECK(strstr(ut_autocast_matmul_path(UT_CPU, UT_F16), "fp32 sgemm on fp16-rounded inputs"), "fp16 path");
}

/* x rounded to bf16 values (kept as float), as autocast hands them over */
static void round_bf16(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&x[i], &u, 4);
    }
}

/* oneDNN's bf16 product forced on: equal to sgemm's within bf16 accumulation
 * tolerance where oneDNN runs bf16 here, else -1 with C untouched. */
static void test_dnnl_gemm_bf16(void) {
    const int64_t M = 37, N = 29, K = 70;
    bool trans[][2] = {{false, false}, {false, true}, {true, false}};
    int ran = 0;
    for (int t = 0; t < 3; t++)
        for (int beta = 0; beta < 2; beta++) {
            float *A = rand_buf(M * K, 5), *B = rand_buf(K * N, 6), *C0 = rand_buf(M * N, 7), *C1 = malloc(M * N * 4);
            uint16_t *scratch = malloc((size_t)(M * K + K * N) * 2);
            round_bf16(A, M * K), round_bf16(B, K * N);
            memcpy(C1, C0, M * N * 4);
            int rc = ut_dnnl_gemm_bf16(trans[t][0], trans[t][1], M, N, K, A, B, (float)beta, C1, scratch);
            ut_gemm(trans[t][0], trans[t][1], M, N, K, 1.0f, A, B, (float)beta, C0);
            if (rc == 0) {
                ran++;
                CHECK(rel_diff(C1, C0, M * N) < 1e-5, "ta %d tb %d beta %d: rel diff %.3g", trans[t][0],
                      trans[t][1], beta, rel_diff(C1, C0, M * N));
            } else {
                CHECK(rc == -1, "rc %d", rc);
                float *orig = rand_buf(M * N, 7);
                CHECK(!memcmp(C1, orig, M * N * 4), "a refused product leaves C untouched");
                free(orig);
            }
            free(A), free(B), free(C0), free(C1), free(scratch);
        }
    printf("     oneDNN bf16 matmul on this CPU: %s\n", ran ? "runs" : "refused (sgemm fallback)");
    CHECK(ran == 0 || ran == 6, "oneDNN ran %d of 6 products", ran);
    if (ut_cpu_bf16_isa() != UT_BF16_ISA_NONE) CHECK(ran == 6, "a CPU with bf16 instructions runs oneDNN bf16");
}

/* linear + batched matmul under bf16 autocast, forward and backward: the
 * output and every gradient, flattened into out (n floats). */
static int64_t bf16_block(float *out) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_autocast(ctx, UT_BF16);
    uint64_t s = 9;
    int64_t nx[] = {2, 6, 40}, nw[] = {24, 40}, nb[] = {24}, nm[] = {2, 4, 6};
    ut_tensor *in[] = {ut_tensor_new(ctx, UT_F32, 3, nx), ut_tensor_new(ctx, UT_F32, 2, nw),
                       ut_tensor_new(ctx, UT_F32, 1, nb), ut_tensor_new(ctx, UT_F32, 3, nm)};
    for (int i = 0; i < 4; i++) {
        for (int64_t k = 0; k < ut_nelem(in[i]); k++) ut_f32(in[i])[k] = unif(&s);
        ut_tensor_set_requires_grad(in[i], true);
    }
    ut_tensor *h = ut_linear(ctx, in[0], in[1], in[2]);     /* (2, 6, 24) */
    ut_tensor *y = ut_matmul(ctx, in[3], h);                 /* (2, 4, 24) */
    int rc = ut_backward(ctx, ut_sum(ctx, ut_mul(ctx, y, y)));
    CHECK(rc == 0, "backward: %s", ut_ctx_error(ctx));
    CHECK(y->dtype == UT_BF16, "the product is stored in bf16");
    if (rc) return ut_ctx_free(ctx), 0;
    ut_tensor *yf = ut_tensor_to(ctx, y, UT_F32);
    int64_t n = 0;
    for (int64_t k = 0; k < ut_nelem(yf); k++) out[n++] = ut_f32(yf)[k];
    for (int i = 0; i < 4; i++)
        for (int64_t k = 0; k < ut_nelem(in[i]); k++) out[n++] = in[i]->grad[k];
    ut_ctx_free(ctx);
    return n;
}

static void test_bf16_ops_forced(void) {
    enum { MAXN = 4096 };
    static float ref[MAXN], a[MAXN], b[MAXN];
    ut_bf16_force_dnnl(0);
    int64_t n = bf16_block(ref);
    ut_bf16_force_dnnl(1);
    CHECK(ut_bf16_use_dnnl(), "forced on, bf16 products try oneDNN");
    bf16_block(a);
    bf16_block(b);
    ut_bf16_force_dnnl(-1);
    CHECK(ut_bf16_use_dnnl() == !strncmp(ut_autocast_matmul_path(UT_CPU, UT_BF16), "oneDNN", 6),
          "back to the detection: the logged path and the path taken agree");
    CHECK(n > 0 && n <= MAXN, "n %lld", (long long)n);
    CHECK(!memcmp(a, b, (size_t)n * 4), "two runs of the oneDNN path give the same bits");
    double e = rel_diff(a, ref, n);
    /* oneDNN rounds its fp32 output like sgemm's; only the order of the
     * fp32 sums differs, which can flip a bf16 rounding of a stored output */
    CHECK(e < 2e-2, "oneDNN bf16 path vs sgemm path: rel diff %.3g", e);
    if (ut_cpu_bf16_isa() == UT_BF16_ISA_NONE)
        CHECK(e == 0, "no bf16 instructions: the forced path falls back to sgemm (rel diff %.3g)", e);
}

int main(void) {
    RUN(test_conv_matches_im2col);
    RUN(test_bf16_isa_detection);
    RUN(test_dnnl_gemm_bf16);
    RUN(test_bf16_ops_forced);
    return TEST_SUMMARY();
}
