/* CUDA kernels run on the CUDA emulator (tests/emu/cuda_emu.h), without a
 * GPU, against references computed here in double precision: the kernels
 * written in sessions that had no GPU, before a GPU ever runs them.
 *   - attention on the tensor cores (flash_attention_tc.cu), bf16 and fp16,
 *     forward (out, its copy, L) and backward (dq, dk, dv added into dqkv),
 *     T a multiple of 64 and not, one and several heads and examples; and
 *     all three kinds (causal, masked, packed sequences) on tensors stored
 *     in 16 bits, against the float32 forms to the bit;
 *   - layer norm with 16-bit x and out (norm.cu): out, mean, rstd; dx added
 *     into a 16-bit gradient, dw and db into float32;
 *   - add and mul with 16-bit and float32 operands, broadcast or not
 *     (binary.cu), forward and both gradients;
 *   - both gelus with 16-bit input, output and gradients (unary.cu);
 *   - cross-entropy reading 16-bit logits and writing their 16-bit gradient
 *     (softmax.cu), with an ignored and an out-of-range target;
 *   - rms_norm (norm.cu): a warp per row and a block per row.
 * The emulator also checks the barriers, the WMMA tiles' alignment and
 * strides, and the grid and shared memory against a GPU's limits (it stops
 * the program, naming the kernel, where they are broken), and runs blocks
 * and threads in varying orders so that races change results;
 * test_emulator_checks proves each check on kernels that break the rule
 * (tests/emu/broken.cu). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/backend/cuda/ew.h"
#include "../../src/backend/cuda/flash_attention.h"
#include "../../src/backend/cuda/norm.h"
#include "../../src/backend/cuda/softmax.h"
#include "../common/test.h"

/* what the kernel files call in the CUDA backend, here */
void *ut_cuda_stream(void) { return NULL; }
void ut_cuda_launched(const char *what) { (void)what; }

/* D (B, NH, T) = rowsum(dout * out) per head, as flash_attention.cu's
 * kernel does, in its order (that file's copies are inline assembly the
 * emulator does not run) */
void ut_cuda_flash_attn_rowdot(float *Dg, const float *dout, const float *out, int64_t B, int64_t T, int64_t C,
                               int64_t NH) {
    int64_t hs = C / NH;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < NH; h++) {
                float s = 0.0f;
                for (int64_t d = 0; d < hs; d++)
                    s = fmaf(out[(b * T + t) * C + h * hs + d], dout[(b * T + t) * C + h * hs + d], s);
                Dg[(b * NH + h) * T + t] = s;
            }
}

/* ---- values: a fixed generator, and rounding to the 16-bit types ---- */
static uint64_t g_rng = 88172645463325252ull;
static double uniform(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}
static float normal(void) { return (float)(sqrt(-2.0 * log(uniform() + 1e-300)) * cos(6.283185307179586 * uniform())); }

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* fp16 of a float in the normal range (the tests' values are) */
static uint16_t to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(f);
    if (a >= 65520.0f) return (uint16_t)(s | 0x7c00u); /* past the largest half: inf */
    if (a < 6.103515625e-05f) return (uint16_t)(s | (uint16_t)lrintf(a * 16777216.0f));
    memcpy(&u, &a, 4);
    uint32_t e = (u >> 23) - 112u, m = u & 0x7fffffu, v = (e << 10) | (m >> 13), rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (v & 1u))) v++;
    return (uint16_t)(s | v);
}
static float from_f16(uint16_t h) {
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float v = e == 31 ? INFINITY : e ? ldexpf((float)(m | 0x400u), (int)e - 25) : ldexpf((float)m, -24);
    return h & 0x8000u ? -v : v;
}
/* f rounded to dt (1 bf16, 2 fp16) */
static float round_to(float f, int dt) { return dt == 1 ? from_bf16(to_bf16(f)) : dt == 2 ? from_f16(to_f16(f)) : f; }
static float load16(const void *p, int dt, int64_t i) {
    if (dt == 1) return from_bf16(((const uint16_t *)p)[i]);
    if (dt == 2) return from_f16(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}
static void store16(void *p, int dt, int64_t i, float v) {
    if (dt == 1) ((uint16_t *)p)[i] = to_bf16(v);
    else if (dt == 2) ((uint16_t *)p)[i] = to_f16(v);
    else ((float *)p)[i] = v;
}
static size_t dt_size(int dt) { return dt ? 2 : 4; }

/* the largest |got - want| over n, relative to the largest |want| */
static double rel_err(const float *got, const double *want, int64_t n) {
    double e = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= e)) e = d; /* NaN wins */
        if (fabs(want[i]) > m) m = fabs(want[i]);
    }
    return e / m;
}

/* ---- attention ---- */

/* out, L and dqkv (the gradient of sum(out * G)) of causal attention in double */
static void attention_ref(const float *qkv, const float *G, int B, int T, int C, int NH, double *out, double *L,
                          double *dqkv) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *P = malloc(sizeof(double) * (size_t)T), *dP = malloc(sizeof(double) * (size_t)T);
    memset(dqkv, 0, sizeof(double) * (size_t)B * T * 3 * C);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *q = qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0, D = 0;
                for (int j = 0; j <= i; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)q[d] * k[d];
                    P[j] = s * scale;
                    if (P[j] > mx) mx = P[j];
                }
                for (int j = 0; j <= i; j++) sum += (P[j] = exp(P[j] - mx));
                L[((size_t)b * NH + h) * T + i] = mx + log(sum);
                const float *g = G + ((size_t)b * T + i) * C + h * hs;
                double *o = out + ((size_t)b * T + i) * C + h * hs;
                for (int d = 0; d < hs; d++) o[d] = 0;
                for (int j = 0; j <= i; j++) {
                    P[j] /= sum;
                    const float *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    double dp = 0;
                    for (int d = 0; d < hs; d++) o[d] += P[j] * v[d], dp += (double)g[d] * v[d];
                    dP[j] = dp;
                    D += P[j] * dp;
                }
                double *dq = dqkv + ((size_t)b * T + i) * 3 * C + h * hs;
                for (int j = 0; j <= i; j++) {
                    double ds = P[j] * (dP[j] - D) * scale;
                    const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double *dk = dqkv + ((size_t)b * T + j) * 3 * C + C + h * hs, *dv = dk + C;
                    for (int d = 0; d < hs; d++) {
                        dq[d] += ds * k[d];
                        dk[d] += ds * q[d];
                        dv[d] += P[j] * g[d];
                    }
                }
            }
    free(P);
    free(dP);
}

static void attention_case(int dt, int B, int T, int NH, double tol_out, double tol_grad) {
    int C = 64 * NH;
    int64_t nx = (int64_t)B * T * 3 * C, no = (int64_t)B * T * C, nl = (int64_t)B * NH * T;
    float *qkv = calloc((size_t)nx, sizeof(float)), *G = calloc((size_t)no, sizeof(float));
    float *dqkv = calloc((size_t)nx, sizeof(float));
    float *out = malloc(sizeof(float) * no), *out2 = malloc(sizeof(float) * no), *L = malloc(sizeof(float) * nl);
    float *Dg = malloc(sizeof(float) * nl);
    double *rout = malloc(sizeof(double) * no), *rL = malloc(sizeof(double) * nl), *rd = malloc(sizeof(double) * nx);
    /* autocast's operands: values exact in dt; the outputs' gradient too */
    for (int64_t i = 0; i < nx; i++) qkv[i] = round_to(normal(), dt);
    for (int64_t i = 0; i < no; i++) G[i] = round_to(normal(), dt);
    for (int64_t i = 0; i < nx; i++) dqkv[i] = 0.25f; /* the kernels add to what is there */
    ut_cuda_flash_attn_tc_fwd(out, out2, L, qkv, B, T, C, NH, dt);
    ut_cuda_flash_attn_tc_bwd(dqkv, Dg, G, out, qkv, L, B, T, C, NH, dt);
    attention_ref(qkv, G, B, T, C, NH, rout, rL, rd);
    for (int64_t i = 0; i < nx; i++) dqkv[i] -= 0.25f;
    double eo = rel_err(out, rout, no), el = rel_err(L, rL, nl);
    CHECK(eo <= tol_out, "dt %d B %d T %d NH %d: out off by %.3g of its largest value (tol %.3g)", dt, B, T, NH, eo,
          tol_out);
    CHECK(!memcmp(out, out2, sizeof(float) * no), "dt %d B %d T %d NH %d: out's copy differs", dt, B, T, NH);
    CHECK(el <= 1e-5, "dt %d B %d T %d NH %d: L off by %.3g", dt, B, T, NH, el);
    /* q, k, v gradients apart: each relative to its own largest value */
    const char *names[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++) {
        int64_t n = (int64_t)B * T * C;
        float *got = malloc(sizeof(float) * n);
        double *want = malloc(sizeof(double) * n);
        for (int64_t r = 0; r < (int64_t)B * T; r++)
            for (int c = 0; c < C; c++) {
                got[r * C + c] = dqkv[r * 3 * C + part * C + c];
                want[r * C + c] = rd[r * 3 * C + part * C + c];
            }
        double e = rel_err(got, want, n);
        CHECK(e <= tol_grad, "dt %d B %d T %d NH %d: %s off by %.3g of its largest value (tol %.3g)", dt, B, T, NH,
              names[part], e, tol_grad);
        free(got);
        free(want);
    }
    free(qkv), free(G), free(dqkv), free(out), free(out2), free(L), free(Dg), free(rout), free(rL), free(rd);
}

/* P and dS rounded to the 16-bit type set the tolerances: bf16 has 8 bits
 * of precision, fp16 11. Both kernel families: mma.sync (the default) and
 * WMMA (UT_CUDA_ATTN=wmma). */
static void test_attention_tc(void) {
    CHECK(ut_cuda_flash_attn_tc_ok(2, 77, 128, 2), "head size 64 is taken");
    CHECK(!ut_cuda_flash_attn_tc_ok(2, 77, 96, 2), "head size 48 is not");
    int shapes[][3] = {{1, 64, 1}, {2, 77, 2}, {1, 130, 1}};
    for (int fam = 0; fam < 2; fam++) {
        if (fam) setenv("UT_CUDA_ATTN", "wmma", 1);
        for (int s = 0; s < 3; s++) {
            attention_case(1, shapes[s][0], shapes[s][1], shapes[s][2], 4e-3, 8e-3);
            attention_case(2, shapes[s][0], shapes[s][1], shapes[s][2], 5e-4, 1.5e-3);
        }
        unsetenv("UT_CUDA_ATTN");
    }
}

/* The mma.sync kernels on tensors stored in 16 bits (what ATTENTION's
 * UT_KCAP_NATIVE_16 runs: ut_cuda_flash_attn_tc_fwd16 / bwd16): the bits of
 * the float32 forms on float32 copies: out rounded once, its float32 copy
 * and L the same, each dqkv element (16-bit, not zero) widened, added to and
 * rounded once; and with qkv in float32 (rounded as read). */
static void native16_case(int dt, int B, int T, int NH) {
    int C = 64 * NH;
    int64_t nx = (int64_t)B * T * 3 * C, no = (int64_t)B * T * C, nl = (int64_t)B * NH * T;
    float *qkv = malloc(sizeof(float) * nx), *G = malloc(sizeof(float) * no), *dq = malloc(sizeof(float) * nx);
    float *out = malloc(sizeof(float) * no), *out2 = malloc(sizeof(float) * no), *L = malloc(sizeof(float) * nl);
    float *Dg = malloc(sizeof(float) * nl), *c2 = malloc(sizeof(float) * no), *L2 = malloc(sizeof(float) * nl);
    uint16_t *x16 = malloc(2 * nx), *g16 = malloc(2 * no), *d16 = malloc(2 * nx), *o16 = malloc(2 * no);
    for (int64_t i = 0; i < nx; i++) qkv[i] = round_to(normal(), dt), dq[i] = round_to(0.1f * normal(), dt);
    for (int64_t i = 0; i < no; i++) G[i] = round_to(normal(), dt);
    for (int64_t i = 0; i < nx; i++) store16(x16, dt, i, qkv[i]), store16(d16, dt, i, dq[i]);
    for (int64_t i = 0; i < no; i++) store16(g16, dt, i, G[i]);
    for (int x = 0; x < 2; x++) { /* qkv stored in 16 bits, then in float32 */
        ut_cuda_flash_attn_tc_fwd(out, out2, L, qkv, B, T, C, NH, dt);
        ut_cuda_flash_attn_tc_bwd(dq, Dg, G, out2, qkv, L, B, T, C, NH, dt);
        ut_cuda_flash_attn_tc_fwd16(o16, 1, c2, L2, x ? (const void *)qkv : x16, !x, B, T, C, NH, dt);
        int bad_o = 0, bad_d = 0;
        for (int64_t i = 0; i < no; i++) bad_o += load16(o16, dt, i) != round_to(out[i], dt) || c2[i] != out2[i];
        CHECK(!bad_o && !memcmp(L, L2, sizeof(float) * nl), "dt %d B %d T %d NH %d qkv %s: %d of out differ", dt, B,
              T, NH, x ? "float32" : "16-bit", bad_o);
        if (!x) { /* the 16-bit gradient buffer: 16-bit qkv only */
            ut_cuda_flash_attn_tc_bwd16(d16, 1, Dg, g16, 1, c2, x16, 1, L2, B, T, C, NH, dt);
            for (int64_t i = 0; i < nx; i++) bad_d += load16(d16, dt, i) != round_to(dq[i], dt);
            CHECK(!bad_d, "dt %d B %d T %d NH %d: %d of dqkv differ from the float32 form's, rounded", dt, B, T, NH,
                  bad_d);
        }
    }
    free(qkv), free(G), free(dq), free(out), free(out2), free(L), free(Dg), free(c2), free(L2);
    free(x16), free(g16), free(d16), free(o16);
}

static void test_attention_native16(void) {
    int shapes[][3] = {{1, 64, 1}, {2, 77, 2}, {1, 130, 1}};
    for (int s = 0; s < 3; s++)
        for (int dt = 1; dt <= 2; dt++) native16_case(dt, shapes[s][0], shapes[s][1], shapes[s][2]);
}

/* ATTENTION_MASKED and ATTENTION_VARLEN on tensors stored in 16 bits
 * (ut_cuda_flash_attn_tc_masked_fwd16 / bwd16): the bits of the float32
 * forms on the float32 copies core would make, the mask among them (rounded
 * to dt: fp16 takes Hugging Face's finfo(float32).min to -inf, so the
 * example whose keys are all masked attends nowhere), with dropout; q, k,
 * v, out, dout and the gradients in 16 bits, and q, k, v in float32.
 * varlen: B sequences of lengths Tq, Tq - 5, ... packed one after another
 * (Tk unused). */
static void masked_native16_case(int dt, int B, int Tq, int Tk, int NH, bool causal, bool varlen) {
    int C = 64 * NH, S = B;
    int32_t off[8] = {0};
    int64_t poff[8] = {0};
    int bad = 0;
    if (varlen) {
        for (int s = 0; s < S; s++) off[s + 1] = off[s] + Tq - 5 * s;
        for (int s = 0; s < S; s++) {
            int64_t L = off[s + 1] - off[s];
            poff[s + 1] = poff[s] + NH * L * L;
        }
        Tq = Tk = off[S], B = 1;
    }
    int64_t nq = (int64_t)B * Tq * C, nk = (int64_t)B * Tk * C, nl = (int64_t)B * NH * Tq;
    float *x[3], *d[3], *m = malloc(sizeof(float) * B * Tk), *mr = malloc(sizeof(float) * B * Tk);
    uint16_t *x16[3], *d16[3];
    for (int i = 0; i < 3; i++) {
        int64_t n = i ? nk : nq;
        x[i] = malloc(sizeof(float) * n), d[i] = malloc(sizeof(float) * n);
        x16[i] = malloc(2 * n), d16[i] = malloc(2 * n);
        for (int64_t j = 0; j < n; j++) {
            x[i][j] = round_to(normal(), dt), d[i][j] = round_to(0.1f * normal(), dt);
            store16(x16[i], dt, j, x[i][j]), store16(d16[i], dt, j, d[i][j]);
        }
    }
    for (int b = 0; b < B; b++) /* example b's last b Tk / 4 + 1 keys masked; the last example's every key */
        for (int j = 0; j < Tk; j++)
            m[b * Tk + j] = (b == B - 1 && B > 1) || j >= Tk - 1 - b * Tk / 4 ? -3.4028234663852886e38f : 0.0f;
    for (int j = 0; j < B * Tk; j++) mr[j] = round_to(m[j], dt);
    float *G = malloc(sizeof(float) * nq), *out = malloc(sizeof(float) * nq), *out2 = malloc(sizeof(float) * nq);
    float *c2 = malloc(sizeof(float) * nq), *L = malloc(sizeof(float) * nl), *L2 = malloc(sizeof(float) * nl);
    float *Dg = malloc(sizeof(float) * nl);
    uint16_t *g16 = malloc(2 * nq), *o16 = malloc(2 * nq);
    for (int64_t j = 0; j < nq; j++) G[j] = round_to(normal(), dt), store16(g16, dt, j, G[j]);
    ut_flash_masking mk = {.causal = causal};
    mk.drop = (ut_flash_drop){.p = 0.1f, .ks = 1.0f / 0.9f, .key = 11, .stream = 3, .offset = 1000};
    if (varlen) mk.off = off, mk.poff = poff, mk.bad = &bad, mk.S = S;
    ut_flash_masking mref = mk, mnat = mk;
    if (!varlen) mref.mask = mr, mnat.mask = m;
    char what[96];
    snprintf(what, sizeof what, "%s dt %d B %d Tq %d Tk %d NH %d%s", varlen ? "varlen" : "masked", dt, B, Tq, Tk, NH,
             causal ? " causal" : "");
    ut_cuda_flash_attn_tc_masked_fwd(out, out2, L, x[0], x[1], x[2], B, Tq, Tk, C, NH, &mref, dt);
    ut_cuda_flash_attn_tc_masked_bwd(d[0], d[1], d[2], Dg, G, out2, x[0], x[1], x[2], L, B, Tq, Tk, C, NH, &mref, dt);
    for (int xf = 0; xf < 2; xf++) { /* q, k, v stored in 16 bits, then in float32 */
        const void *q = xf ? (const void *)x[0] : x16[0], *k = xf ? (const void *)x[1] : x16[1];
        const void *v = xf ? (const void *)x[2] : x16[2];
        ut_cuda_flash_attn_tc_masked_fwd16(o16, 1, c2, L2, q, k, v, !xf, B, Tq, Tk, C, NH, &mnat, dt);
        int bad_o = 0;
        for (int64_t j = 0; j < nq; j++) bad_o += load16(o16, dt, j) != round_to(out[j], dt) || c2[j] != out2[j];
        CHECK(!bad_o && !memcmp(L, L2, sizeof(float) * nl), "%s, q k v %s: %d of out differ", what,
              xf ? "float32" : "16-bit", bad_o);
    }
    ut_cuda_flash_attn_tc_masked_bwd16(d16[0], d16[1], d16[2], 1, Dg, g16, 1, c2, x16[0], x16[1], x16[2], 1, L2, B,
                                       Tq, Tk, C, NH, &mnat, dt);
    for (int i = 0; i < 3; i++) {
        int64_t n = i ? nk : nq;
        int bad_d = 0;
        for (int64_t j = 0; j < n; j++) bad_d += load16(d16[i], dt, j) != round_to(d[i][j], dt);
        CHECK(!bad_d, "%s: %d of d%c differ from the float32 form's, rounded", what, bad_d, "qkv"[i]);
    }
    /* the fully masked example attends nowhere under fp16 (its out is 0) */
    if (!varlen && dt == 2 && B > 1) {
        int nz = 0;
        for (int64_t j = (int64_t)(B - 1) * Tq * C; j < nq; j++) nz += load16(o16, dt, j) != 0.0f;
        CHECK(!nz, "%s: the example with every key masked has %d nonzero outputs", what, nz);
    }
    for (int i = 0; i < 3; i++) free(x[i]), free(d[i]), free(x16[i]), free(d16[i]);
    free(m), free(mr), free(G), free(out), free(out2), free(c2), free(L), free(L2), free(Dg), free(g16), free(o16);
}

static void test_masked_native16(void) {
    for (int dt = 1; dt <= 2; dt++) {
        masked_native16_case(dt, 2, 77, 77, 2, false, false); /* BERT's padded self-attention */
        masked_native16_case(dt, 3, 70, 130, 1, false, false); /* BART's cross-attention */
        masked_native16_case(dt, 2, 64, 64, 1, true, false);  /* BART's decoder */
        masked_native16_case(dt, 3, 40, 0, 2, false, true);  /* unpadded BERT: 3 sequences */
        masked_native16_case(dt, 2, 70, 0, 1, true, true);   /* packed, causal */
    }
}

/* ---- layer norm with 16-bit x and out ---- */
static void layernorm_case(int dt, int N, int C) {
    size_t es = sizeof(float); /* room for any dtype */
    void *x = malloc(es * N * C), *out = malloc(es * N * C), *dy = malloc(es * N * C), *dx = malloc(es * N * C);
    float *w = malloc(sizeof(float) * C), *b = malloc(sizeof(float) * C), *dw = calloc((size_t)C, sizeof(float));
    float *db = calloc((size_t)C, sizeof(float)), *mean = malloc(sizeof(float) * N), *rstd = malloc(sizeof(float) * N);
    float *got = malloc(sizeof(float) * N * C);
    double *want = malloc(sizeof(double) * N * C), *wdx = malloc(sizeof(double) * N * C);
    double *wdw = calloc((size_t)C, sizeof(double)), *wdb = calloc((size_t)C, sizeof(double));
    for (int64_t i = 0; i < (int64_t)N * C; i++) {
        store16(x, dt, i, 2.0f + normal());
        store16(dy, dt, i, normal());
        store16(dx, dt, i, 0.5f);
    }
    for (int c = 0; c < C; c++) w[c] = 1.0f + 0.1f * normal(), b[c] = 0.1f * normal();
    ut_cuda_layernorm_fwd(out, dt, mean, rstd, x, dt, w, b, N, C, 1e-5f);
    void *scratch = malloc(ut_cuda_layernorm_bwd_scratch_bytes(N, C));
    ut_cuda_layernorm_bwd(dx, true, dw, db, scratch, dy, dt, x, dt, w, mean, rstd, N, C);
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0, sdn = 0, sdnx = 0;
        for (int c = 0; c < C; c++) m += load16(x, dt, (int64_t)n * C + c);
        m /= C;
        for (int c = 0; c < C; c++) v += pow(load16(x, dt, (int64_t)n * C + c) - m, 2);
        double r = 1.0 / sqrt(v / C + 1e-5);
        CHECK(fabs(mean[n] - m) <= 1e-5 * (1 + fabs(m)) && fabs(rstd[n] - r) <= 1e-5 * r, "row %d: mean %g rstd %g, want %g %g",
              n, mean[n], rstd[n], m, r);
        for (int c = 0; c < C; c++) {
            int64_t i = (int64_t)n * C + c;
            double xh = (load16(x, dt, i) - m) * r, g = load16(dy, dt, i);
            want[i] = xh * w[c] + b[c];
            got[i] = load16(out, dt, i);
            sdn += g * w[c], sdnx += g * w[c] * xh;
            wdw[c] += g * xh, wdb[c] += g;
        }
        sdn /= C, sdnx /= C;
        for (int c = 0; c < C; c++) {
            int64_t i = (int64_t)n * C + c;
            double xh = (load16(x, dt, i) - m) * r;
            wdx[i] = 0.5 + r * (load16(dy, dt, i) * w[c] - sdn - xh * sdnx);
        }
    }
    /* one rounding to dt of a value computed in float */
    double tol = dt == 1 ? 6e-3 : 1e-3;
    double e = rel_err(got, want, (int64_t)N * C);
    CHECK(e <= tol, "dt %d %d x %d: out off by %.3g (tol %.3g)", dt, N, C, e, tol);
    for (int64_t i = 0; i < (int64_t)N * C; i++) got[i] = load16(dx, dt, i);
    e = rel_err(got, wdx, (int64_t)N * C);
    CHECK(e <= tol, "dt %d %d x %d: dx off by %.3g (tol %.3g)", dt, N, C, e, tol);
    e = rel_err(dw, wdw, C);
    CHECK(e <= 1e-4, "dt %d %d x %d: dw off by %.3g", dt, N, C, e);
    e = rel_err(db, wdb, C);
    CHECK(e <= 1e-4, "dt %d %d x %d: db off by %.3g", dt, N, C, e);
    free(x), free(out), free(dy), free(dx), free(w), free(b), free(dw), free(db), free(mean), free(rstd), free(got);
    free(want), free(wdx), free(wdw), free(wdb), free(scratch);
}

static void test_layernorm_16(void) {
    for (int dt = 1; dt <= 2; dt++) {
        layernorm_case(dt, 37, 768);  /* a warp per row */
        layernorm_case(dt, 5, 2500);  /* a block per row */
        layernorm_case(dt, 300, 64);  /* dw, db over several row chunks */
    }
}

/* ---- add and mul with mixed storage ---- */
/* out (N, C) = a op b, b (N, C) or (C) broadcast; da, db of sum(out * g) */
/* off: a and da start one element past an aligned address (the kernels
 * then go one element at a time; aligned, four at a time where b allows) */
static void binary_case(int op, int odt, int adt, int bdt, int N, int C, bool bcast, int off) {
    int64_t n = (int64_t)N * C, nb = bcast ? C : n;
    char *abuf = malloc(dt_size(adt) * (n + 1)), *dabuf = malloc(dt_size(adt) * (n + 1));
    void *a = abuf + off * dt_size(adt), *b = malloc(dt_size(bdt) * nb), *out = malloc(dt_size(odt) * n);
    void *g = malloc(dt_size(odt) * n), *da = dabuf + off * dt_size(adt), *dbv = malloc(dt_size(bdt) * nb);
    for (int64_t i = 0; i < n; i++) store16(a, adt, i, normal()), store16(g, odt, i, normal()), store16(da, adt, i, 0.5f);
    for (int64_t i = 0; i < nb; i++) store16(b, bdt, i, normal()), store16(dbv, bdt, i, 0.5f);
    int64_t n4[4] = {1, 1, N, C}, s4[4] = {0, 0, bcast ? 0 : C, 1};
    ut_cuda_binary_fwd(op, out, odt, a, adt, b, bdt, n4, s4);
    if (op == UT_CUDA_BIN_ADD) ut_cuda_acc_dt(da, adt, g, odt, n);
    else ut_cuda_mul_bwd_a(da, adt, g, odt, b, bdt, n4, s4);
    void *scratch = malloc(ut_cuda_bcast_reduce_scratch(n4, s4) + 64);
    ut_cuda_bcast_reduce(dbv, bdt, g, odt, op == UT_CUDA_BIN_ADD ? NULL : a, adt, n4, s4, scratch);
    float *got = malloc(sizeof(float) * n);
    double *want = malloc(sizeof(double) * n), *wda = malloc(sizeof(double) * n), *wdb = calloc((size_t)nb, sizeof(double));
    for (int64_t i = 0; i < nb; i++) wdb[i] = 0.5;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = bcast ? i % C : i;
        double x = load16(a, adt, i), y = load16(b, bdt, j), gv = load16(g, odt, i);
        want[i] = op == UT_CUDA_BIN_ADD ? x + y : x * y;
        got[i] = load16(out, odt, i);
        wda[i] = 0.5 + (op == UT_CUDA_BIN_ADD ? gv : gv * y);
        wdb[j] += op == UT_CUDA_BIN_ADD ? gv : gv * x;
    }
    /* one rounding to the stored type */
    double tol[3] = {1e-6, 6e-3, 1e-3};
    double e = rel_err(got, want, n);
    CHECK(e <= tol[odt], "op %d dts %d %d %d: out off by %.3g", op, odt, adt, bdt, e);
    for (int64_t i = 0; i < n; i++) got[i] = load16(da, adt, i);
    e = rel_err(got, wda, n);
    CHECK(e <= tol[adt], "op %d dts %d %d %d: da off by %.3g", op, odt, adt, bdt, e);
    float *gotb = malloc(sizeof(float) * nb);
    for (int64_t i = 0; i < nb; i++) gotb[i] = load16(dbv, bdt, i);
    e = rel_err(gotb, wdb, nb);
    CHECK(e <= (bdt ? tol[bdt] : 1e-5), "op %d dts %d %d %d%s: db off by %.3g", op, odt, adt, bdt, bcast ? " (broadcast)" : "",
          e);
    free(abuf), free(b), free(out), free(g), free(dabuf), free(dbv), free(scratch), free(got), free(want), free(wda),
        free(wdb);
    free(gotb);
}

static void test_binary_mixed(void) {
    /* the residual add (float32 + bf16 -> float32), a 16-bit bias add, a
     * scale, all float32 (the ALL32 kernels), and fp16 everywhere */
    int cases[][3] = {{0, 0, 1}, {0, 1, 0}, {1, 1, 1}, {0, 0, 0}, {2, 2, 2}, {0, 2, 0}};
    for (int op = 0; op < 2; op++)
        for (int k = 0; k < 6; k++) {
            binary_case(op, cases[k][0], cases[k][1], cases[k][2], 33, 200, false, 0);
            binary_case(op, cases[k][0], cases[k][1], cases[k][2], 300, 70, true, 0);
            /* four at a time: a tail of 3, a broadcast row of 64; then one at a time */
            binary_case(op, cases[k][0], cases[k][1], cases[k][2], 7, 13, false, 0);
            binary_case(op, cases[k][0], cases[k][1], cases[k][2], 30, 64, true, 0);
            binary_case(op, cases[k][0], cases[k][1], cases[k][2], 33, 200, false, 1);
        }
}

/* ---- the gelus, every tensor as stored ---- */
static double gelu_ref(double x, bool erf_form, double *deriv) {
    if (erf_form) {
        double cdf = 0.5 * (1.0 + erf(x / sqrt(2.0)));
        *deriv = cdf + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
        return x * cdf;
    }
    const double k0 = sqrt(2.0 / M_PI), k1 = 0.044715;
    double u = k0 * (x + k1 * x * x * x), t = tanh(u);
    *deriv = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k0 * (1.0 + 3.0 * k1 * x * x);
    return 0.5 * x * (1.0 + t);
}

static void test_gelu_16(void) {
    double tol[3] = {2e-6, 6e-3, 1e-3};
    /* four at a time with a tail of 3; x one element past alignment (one at a time) */
    const int64_t sizes[2] = {5003, 1001};
    for (int form = 0; form < 4; form++)
        for (int dt = 0; dt <= 2; dt++) {
            const int64_t n = sizes[form / 2], off = form / 2;
            char *xbuf = malloc(4 * (n + 1));
            void *x = xbuf + off * dt_size(dt), *out = malloc(4 * n), *dy = malloc(4 * n), *dx = malloc(4 * n);
            float *got = malloc(sizeof(float) * n);
            double *want = malloc(sizeof(double) * n), *wdx = malloc(sizeof(double) * n);
            for (int64_t i = 0; i < n; i++) {
                store16(x, dt, i, 3.0f * normal());
                store16(dy, dt, i, normal());
                store16(dx, dt, i, 0.25f);
            }
            if (form % 2) {
                ut_cuda_gelu_erf_fwd(out, dt, x, dt, n);
                ut_cuda_gelu_erf_bwd(dx, dt, dy, dt, x, dt, n, true);
            } else {
                ut_cuda_gelu_fwd(out, dt, x, dt, n);
                ut_cuda_gelu_bwd(dx, dt, dy, dt, x, dt, n, true);
            }
            for (int64_t i = 0; i < n; i++) {
                double d;
                want[i] = gelu_ref(load16(x, dt, i), form % 2, &d);
                wdx[i] = 0.25 + load16(dy, dt, i) * d;
                got[i] = load16(out, dt, i);
            }
            double e = rel_err(got, want, n);
            CHECK(e <= tol[dt], "gelu%s dt %d n %ld: out off by %.3g (tol %.3g)", form % 2 ? "_erf" : "", dt, (long)n,
                  e, tol[dt]);
            for (int64_t i = 0; i < n; i++) got[i] = load16(dx, dt, i);
            e = rel_err(got, wdx, n);
            CHECK(e <= tol[dt], "gelu%s dt %d n %ld: dx off by %.3g (tol %.3g)", form % 2 ? "_erf" : "", dt, (long)n,
                  e, tol[dt]);
            free(xbuf), free(out), free(dy), free(dx), free(got), free(want), free(wdx);
        }
}

/* ---- cross-entropy over 16-bit logits ---- */
static void cross_entropy_case(int dt, int N, int V) {
    void *lg = malloc(4 * (size_t)N * V), *dl = malloc(4 * (size_t)N * V);
    int32_t *tg = malloc(sizeof(int32_t) * N);
    double *rowloss = malloc(sizeof(double) * N);
    float *rmax = malloc(sizeof(float) * N), *inv = malloc(sizeof(float) * N), mean = 0, dloss = 1.0f;
    int64_t count = 0;
    int err = 0;
    for (int64_t i = 0; i < (int64_t)N * V; i++) store16(lg, dt, i, 4.0f * normal()), store16(dl, dt, i, 0.125f);
    for (int n = 0; n < N; n++) tg[n] = (int32_t)(uniform() * V);
    tg[1] = -100;   /* ignored */
    tg[2] = V + 3;  /* out of range: an error, counted as ignored */
    ut_cuda_cross_entropy_fwd(rowloss, rmax, inv, lg, dt, tg, -100, 0.0f, N, V, V, &err);
    ut_cuda_loss_mean(&mean, &count, rowloss, tg, -100, N, V);
    ut_cuda_cross_entropy_bwd(dl, 0, lg, dt, rmax, inv, tg, -100, 0.0f, &dloss, &count, N, V, V);
    CHECK(err == UT_CUDA_ERR_CROSS_ENTROPY_TARGET, "the out-of-range target set error %d", err);
    CHECK(count == N - 2, "count %lld, want %d", (long long)count, N - 2);
    double total = 0;
    float *got = malloc(sizeof(float) * (size_t)N * V);
    double *want = malloc(sizeof(double) * (size_t)N * V);
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, load16(lg, dt, (int64_t)n * V + v));
        for (int v = 0; v < V; v++) s += exp(load16(lg, dt, (int64_t)n * V + v) - mx);
        bool counted = tg[n] >= 0 && tg[n] < V;
        double loss = counted ? mx + log(s) - load16(lg, dt, (int64_t)n * V + tg[n]) : 0;
        total += loss;
        CHECK(fabs(rowloss[n] - loss) <= 1e-5 * (1 + fabs(loss)), "row %d: loss %g, want %g", n, rowloss[n], loss);
        for (int v = 0; v < V; v++) {
            int64_t i = (int64_t)n * V + v;
            double g = counted ? (exp(load16(lg, dt, i) - mx) / s - (v == tg[n])) / (N - 2) : 0;
            want[i] = 0.125 + g;
            got[i] = load16(dl, dt, i);
        }
    }
    CHECK(fabs(mean - total / (N - 2)) <= 1e-5 * (1 + fabs(mean)), "mean %g, want %g", mean, total / (N - 2));
    double tol[3] = {1e-6, 6e-3, 1e-3};
    double e = rel_err(got, want, (int64_t)N * V);
    CHECK(e <= tol[dt], "dt %d %d x %d: the logits' gradient off by %.3g (tol %.3g)", dt, N, V, e, tol[dt]);
    free(lg), free(dl), free(tg), free(rowloss), free(rmax), free(inv), free(got), free(want);
}

static void test_cross_entropy_16(void) {
    for (int dt = 0; dt <= 2; dt++) {
        cross_entropy_case(dt, 6, 50);
        cross_entropy_case(dt, 5, 5000);
    }
}

/* ---- rms_norm ---- */
static void rms_case(int N, int C) {
    float *x = malloc(sizeof(float) * N * C), *out = malloc(sizeof(float) * N * C), *dy = malloc(sizeof(float) * N * C);
    float *dx = malloc(sizeof(float) * N * C), *w = malloc(sizeof(float) * C), *dw = malloc(sizeof(float) * C);
    float *rstd = malloc(sizeof(float) * N);
    double *want = malloc(sizeof(double) * N * C), *wdx = malloc(sizeof(double) * N * C), *wdw = malloc(sizeof(double) * C);
    for (int64_t i = 0; i < (int64_t)N * C; i++) x[i] = normal(), dy[i] = normal(), dx[i] = 0.5f;
    for (int c = 0; c < C; c++) w[c] = 1.0f + 0.1f * normal(), dw[c] = 0.5f, wdw[c] = 0.5;
    ut_cuda_rms_norm_fwd(out, rstd, x, w, N, C, 1e-6f);
    void *scratch = malloc(ut_cuda_rms_norm_bwd_scratch_bytes(N, C));
    ut_cuda_rms_norm_bwd(dx, dw, scratch, dy, x, w, rstd, N, C);
    for (int n = 0; n < N; n++) {
        double ss = 0, sdnx = 0;
        for (int c = 0; c < C; c++) ss += (double)x[n * C + c] * x[n * C + c];
        double r = 1.0 / sqrt(ss / C + 1e-6);
        CHECK(fabs(rstd[n] - r) <= 1e-5 * r, "row %d: rstd %g, want %g", n, rstd[n], r);
        for (int c = 0; c < C; c++) {
            double xh = x[n * C + c] * r;
            want[n * C + c] = xh * w[c];
            sdnx += dy[n * C + c] * w[c] * xh;
            wdw[c] += dy[n * C + c] * xh;
        }
        sdnx /= C;
        for (int c = 0; c < C; c++)
            wdx[n * C + c] = 0.5 + r * (dy[n * C + c] * w[c] - x[n * C + c] * r * sdnx);
    }
    double e = rel_err(out, want, (int64_t)N * C);
    CHECK(e <= 1e-5, "%d x %d: out off by %.3g", N, C, e);
    e = rel_err(dx, wdx, (int64_t)N * C);
    CHECK(e <= 1e-5, "%d x %d: dx off by %.3g", N, C, e);
    e = rel_err(dw, wdw, C);
    CHECK(e <= 1e-5, "%d x %d: dw off by %.3g", N, C, e);
    free(x), free(out), free(dy), free(dx), free(w), free(dw), free(rstd), free(want), free(wdx), free(wdw), free(scratch);
}

static void test_rms_norm(void) {
    rms_case(33, 512);  /* a warp per row */
    rms_case(7, 4100);  /* a block per row */
    rms_case(300, 40);  /* dw over several row chunks */
}

/* ---- the emulator's own checks, on kernels that break a GPU's rules
 * (tests/emu/broken.cu) ---- */
void utemu_broken_race(float *out, int blocks, int sync);
void utemu_broken_block_race(int *cell, int *out, int blocks);
void utemu_broken_barrier(int *out);
void utemu_broken_smem(float *out, int allow);
void utemu_broken_async(float *out, const float *src, int blocks, int wait);
void utemu_broken_async_align(const float *src);
void utemu_broken_bounds(int *out, int threads);
void utemu_broken_partial_warp(float *out, int threads, int exit_odd);

/* fn(arg) in a child process with stderr into a file: whether the child
 * died of SIGABRT having said want */
static bool child_stops(void (*fn)(int), int arg, const char *want) {
    char path[] = "/tmp/ut-emu-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return false;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        fn(arg);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    char buf[1024] = {0};
    ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    unlink(path);
    bool ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && k > 0 && strstr(buf, want);
    if (!ok) fprintf(stderr, "  child: status %d, said: %s\n", st, buf);
    return ok;
}
static void run_half_barrier(int arg) {
    (void)arg;
    int out[32];
    utemu_broken_barrier(out);
}
static void run_big_smem(int allow) {
    float out[32];
    utemu_broken_smem(out, allow);
}
static void run_bounds(int threads) {
    int out[128];
    utemu_broken_bounds(out, threads);
}
static void run_partial_warp(int threads) {
    float out[64];
    utemu_broken_partial_warp(out, threads, threads == 32);
}
static void run_async_align(int arg) {
    (void)arg;
    static _Alignas(16) float src[8];
    utemu_broken_async_align(src);
}

/* How many of the blocks' rows of out (blocks x 64) differ from row 0, and
 * whether every value is its thread's neighbour's index. */
static int race_rows(const float *out, int blocks, bool *all_right) {
    int differ = 0;
    *all_right = true;
    for (int b = 0; b < blocks; b++) {
        if (memcmp(out + b * 64, out, 64 * sizeof(float))) differ++;
        for (int t = 0; t < 64; t++)
            if (out[b * 64 + t] != (float)((t + 1) % 64)) *all_right = false;
    }
    return differ;
}

static void test_emulator_checks(void) {
    enum { B = 12 };
    float out[B * 64];
    bool right;
    /* a race inside a block: the blocks' threads run in different orders,
     * so some blocks read their neighbours' values and others NaN */
    utemu_broken_race(out, B, 0);
    int differ = race_rows(out, B, &right);
    CHECK(differ > 0 && !right, "a race went unseen: %d of %d blocks differ", differ, B);
    /* the same with the barrier: every block right */
    utemu_broken_race(out, B, 1);
    CHECK(race_rows(out, B, &right) == 0 && right, "the barrier's version is wrong");
    /* a race between blocks: launches take their blocks in different orders */
    int cell[B], seen[3][B];
    for (int k = 0; k < 3; k++) {
        memset(cell, 0, sizeof cell);
        utemu_broken_block_race(cell, seen[k], B);
    }
    CHECK(memcmp(seen[0], seen[1], sizeof seen[0]) || memcmp(seen[1], seen[2], sizeof seen[0]),
          "three launches read the other blocks' cells alike");
    /* cp.async: a tile read before its wait reads the copies in some blocks
     * and NaN in others; waited for, every block is right */
    float src[64];
    for (int t = 0; t < 64; t++) src[t] = (float)t;
    utemu_broken_async(out, src, B, 0);
    differ = race_rows(out, B, &right);
    CHECK(differ > 0 && !right, "a cp.async read before its wait went unseen: %d of %d blocks differ", differ, B);
    utemu_broken_async(out, src, B, 1);
    CHECK(race_rows(out, B, &right) == 0 && right, "the waited cp.async is wrong");
    CHECK(child_stops(run_async_align, 0, "not 16-byte aligned"), "a misaligned cp.async");
    /* barriers that cannot open; shared memory not allowed first */
    CHECK(child_stops(run_half_barrier, 0, "barriers that cannot open"), "the half barrier");
    CHECK(child_stops(run_big_smem, 0, "cudaFuncAttributeMaxDynamicSharedMemorySize"), "64 KiB unallowed");
    /* full-mask shuffles where lanes have left, or in a short last warp;
     * whole warps sum to 32 */
    CHECK(child_stops(run_partial_warp, 32, "the others have exited"), "a shuffle after lanes exit");
    CHECK(child_stops(run_partial_warp, 48, "leaves its last warp short"), "a shuffle in a short warp");
    float pw[64] = {0};
    utemu_broken_partial_warp(pw, 64, 0);
    CHECK(pw[0] == 32.0f && pw[63] == 32.0f, "whole warps: %g %g", pw[0], pw[63]);
    /* a block past the kernel's __launch_bounds__ (64), and one within */
    CHECK(child_stops(run_bounds, 128, "past its __launch_bounds__ of 64"), "128 threads for a bound of 64");
    int ob[64] = {0};
    utemu_broken_bounds(ob, 64);
    CHECK(ob[63] == 63, "64 threads within the bound: %d", ob[63]);
    float o[32];
    utemu_broken_smem(o, 1);
    CHECK(o[0] == 1.0f && o[31] == 1.0f, "64 KiB allowed: %g %g", o[0], o[31]);
    /* UT_EMU_ORDER=fixed runs every block alike (in a child, to leave this
     * process's environment alone) */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("UT_EMU_ORDER", "fixed", 1);
        float o2[B * 64];
        bool r2;
        utemu_broken_race(o2, B, 0);
        _exit(race_rows(o2, B, &r2) == 0 ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "UT_EMU_ORDER=fixed: blocks differ (status %d)", st);
}

int main(void) {
    RUN(test_emulator_checks);
    RUN(test_attention_tc);
    RUN(test_attention_native16);
    RUN(test_masked_native16);
    RUN(test_layernorm_16);
    RUN(test_binary_mixed);
    RUN(test_gelu_16);
    RUN(test_cross_entropy_16);
    RUN(test_rms_norm);
    return TEST_SUMMARY();
}
