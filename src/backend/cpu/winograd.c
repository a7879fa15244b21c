/* Winograd convolution F(2x2, 3x3) for 3x3 stride-1 layers (Lavin and Gray,
 * "Fast Algorithms for Convolutional Neural Networks", 2015): each 2x2 block
 * of the output comes from a 4x4 tile of the input in 16 products instead of
 * 36, so the three products of a layer (forward, input gradient, weight
 * gradient) become 16 matrix products each over the transformed tiles, 2.25
 * times fewer multiplications than im2col's, on well-shaped sgemm calls:
 *
 *   U = G g G^T       the kernel, (16, OC, C)
 *   V = B^T d B       the input tiles, (16, C, tiles)
 *   M = U V           per position xi of the 4x4: (OC, C) @ (C, tiles)
 *   y = A^T M A       each tile's 2x2 outputs
 *
 * and backward dM = A dy A^T, dV = U^T dM (then dx += B dV B^T over the
 * overlapping tiles), dU = sum over images of dM V^T (then dg = G^T dU G).
 * A group of up to WINO_GROUP images of one thread shares a call (their
 * tiles side by side as columns); a column's sums run over channels only,
 * so an image's results do not depend on the images beside it. The weight
 * gradient is summed in the same fixed chunks of the batch as im2col's
 * (UT_CONV_DW_CHUNKS). Which layers take this path: ut_winograd_applies,
 * the rule measured in docs/performance.md. */
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "gemm.h"

#define WINO_GROUP 4 /* images per matrix product */

/* UTRAIN_CONV=im2col keeps every layer on im2col + sgemm (comparisons). */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static bool im2col_only;
static void read_env(void) {
    const char *e = getenv("UTRAIN_CONV");
    im2col_only = e && !strcmp(e, "im2col");
}

bool ut_winograd_applies(const ut_conv2d_shape *d) {
    pthread_once(&env_once, read_env);
    return !im2col_only && d->KH == 3 && d->KW == 3 && d->S == 1 && d->P <= 2 && d->C >= 8 && d->OC >= 8 &&
           d->OH >= 2 && d->OW >= 2;
}

static int64_t tiles_of(const ut_conv2d_shape *d) { return ((d->OH + 1) / 2) * ((d->OW + 1) / 2); }

/* The 16 matrices of a transform lie XPAD floats apart more than their
 * size: at a multiple of 4 KiB apart, the 16 streams a tile's values go to
 * would share the L1's sets (8 ways) and evict each other. */
#define XPAD 16
static int64_t xs(int64_t rows, int64_t N) { return rows * N + XPAD; }

/* per thread: V and M (or V, dM and dV), then the transforms' scratch */
static int64_t scratch_floats(const ut_conv2d_shape *d) {
    int64_t TW = (d->OW + 1) / 2, TH = (d->OH + 1) / 2;
    return (2 * TH + 2) * (2 * TW + 2) + 16 * TW + 4 * (2 * TW + 2);
}

size_t ut_winograd_thread_floats(const ut_conv2d_shape *d) {
    int64_t N = WINO_GROUP * tiles_of(d);
    return (size_t)(16 * (2 * xs(d->C, N) + xs(d->OC, N)) + scratch_floats(d));
}

/* U (16, OC, C) = G g G^T of each 3x3 kernel g of w (OC, C, 3, 3) */
static void kernel_transform(float *U, const float *w, const ut_conv2d_shape *d) {
    int64_t OC = d->OC, C = d->C, P = OC * C;
#pragma omp parallel for schedule(static)
    for (int64_t kc = 0; kc < P; kc++) {
        const float *g = w + kc * 9;
        float t[4][3], u[4][4];
        for (int j = 0; j < 3; j++) { /* G g: the rows of the 4x3 */
            t[0][j] = g[j];
            t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
            t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
            t[3][j] = g[6 + j];
        }
        for (int i = 0; i < 4; i++) { /* (G g) G^T */
            u[i][0] = t[i][0];
            u[i][1] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
            u[i][2] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
            u[i][3] = t[i][2];
        }
        for (int x = 0; x < 16; x++) U[x * P + kc] = u[x / 4][x % 4];
    }
}

/* The transforms run a row of tiles at a time: the tiles of row ti are the
 * columns [ti TW, (ti + 1) TW) of each of the 16 matrices, so each of the 16
 * values of a tile is stored (or loaded) at consecutive addresses across
 * the row, and the loops over tj vectorise. The input rows a tile row reads
 * are first copied into a zero-padded buffer (pad: 4 rows of 2 TW + 2). */

/* V (16, C, N) columns [col0, col0 + T) = B^T d B of image x's (C, H, W) tiles */
static void input_transform(float *V, int64_t N, int64_t col0, const float *x, float *pad, const ut_conv2d_shape *d) {
    int64_t TW = (d->OW + 1) / 2, TH = (d->OH + 1) / 2, CN = xs(d->C, N), WP = 2 * TW + 2;
    for (int64_t c = 0; c < d->C; c++) {
        const float *xc = x + c * d->H * d->W;
        for (int64_t ti = 0; ti < TH; ti++) {
            for (int a = 0; a < 4; a++) { /* padded row 2 ti - P + a: column j is input column j - P */
                float *r = pad + a * WP;
                int64_t h = 2 * ti - d->P + a, n = d->W < WP - d->P ? d->W : WP - d->P;
                if (h < 0 || h >= d->H) {
                    memset(r, 0, (size_t)WP * sizeof(float));
                    continue;
                }
                memset(r, 0, (size_t)d->P * sizeof(float));
                memcpy(r + d->P, xc + h * d->W, (size_t)n * sizeof(float));
                if (d->P + n < WP) memset(r + d->P + n, 0, (size_t)(WP - d->P - n) * sizeof(float));
            }
            const float *r0 = pad, *r1 = pad + WP, *r2 = pad + 2 * WP, *r3 = pad + 3 * WP;
            float *v = V + c * N + col0 + ti * TW;
#pragma omp simd
            for (int64_t tj = 0; tj < TW; tj++) {
                float t[4][4], u[4][4];
                for (int b = 0; b < 4; b++) {
                    t[0][b] = r0[2 * tj + b];
                    t[1][b] = r1[2 * tj + b];
                    t[2][b] = r2[2 * tj + b];
                    t[3][b] = r3[2 * tj + b];
                }
                for (int b = 0; b < 4; b++) { /* B^T t */
                    u[0][b] = t[0][b] - t[2][b];
                    u[1][b] = t[1][b] + t[2][b];
                    u[2][b] = t[2][b] - t[1][b];
                    u[3][b] = t[1][b] - t[3][b];
                }
                for (int q = 0; q < 4; q++) { /* (B^T t) B */
                    v[(4 * q + 0) * CN + tj] = u[q][0] - u[q][2];
                    v[(4 * q + 1) * CN + tj] = u[q][1] + u[q][2];
                    v[(4 * q + 2) * CN + tj] = u[q][2] - u[q][1];
                    v[(4 * q + 3) * CN + tj] = u[q][1] - u[q][3];
                }
            }
        }
    }
}

/* out (OC, OH, OW) of one image = A^T M A of its columns [col0, col0 + T) of M (16, OC, N), plus b */
static void output_transform(float *out, const float *M, int64_t N, int64_t col0, const float *b, float *pad,
                             const ut_conv2d_shape *d) {
    int64_t TW = (d->OW + 1) / 2, TH = (d->OH + 1) / 2, KN = xs(d->OC, N), WP = 2 * TW + 2;
    for (int64_t k = 0; k < d->OC; k++) {
        float *ok = out + k * d->OH * d->OW, bias = b ? b[k] : 0.0f;
        for (int64_t ti = 0; ti < TH; ti++) {
            const float *m = M + k * N + col0 + ti * TW;
            float *y0 = pad, *y1 = pad + WP; /* the two output rows, 2 TW wide */
#pragma omp simd
            for (int64_t tj = 0; tj < TW; tj++) {
                float s[2][4];
                for (int j = 0; j < 4; j++) { /* A^T m */
                    float m0 = m[(0 + j) * KN + tj], m1 = m[(4 + j) * KN + tj], m2 = m[(8 + j) * KN + tj],
                          m3 = m[(12 + j) * KN + tj];
                    s[0][j] = m0 + m1 + m2;
                    s[1][j] = m1 - m2 - m3;
                }
                y0[2 * tj] = s[0][0] + s[0][1] + s[0][2] + bias; /* (A^T m) A */
                y0[2 * tj + 1] = s[0][1] - s[0][2] - s[0][3] + bias;
                y1[2 * tj] = s[1][0] + s[1][1] + s[1][2] + bias;
                y1[2 * tj + 1] = s[1][1] - s[1][2] - s[1][3] + bias;
            }
            memcpy(ok + 2 * ti * d->OW, y0, (size_t)d->OW * sizeof(float));
            if (2 * ti + 1 < d->OH) memcpy(ok + (2 * ti + 1) * d->OW, y1, (size_t)d->OW * sizeof(float));
        }
    }
}

/* dM (16, OC, N) columns [col0, col0 + T) = A dy A^T of one image's output gradient g (OC, OH, OW) */
static void grad_transform(float *dM, int64_t N, int64_t col0, const float *g, float *pad, const ut_conv2d_shape *d) {
    int64_t TW = (d->OW + 1) / 2, TH = (d->OH + 1) / 2, KN = xs(d->OC, N), WP = 2 * TW + 2;
    for (int64_t k = 0; k < d->OC; k++) {
        const float *gk = g + k * d->OH * d->OW;
        for (int64_t ti = 0; ti < TH; ti++) {
            float *y0 = pad, *y1 = pad + WP; /* rows 2 ti and 2 ti + 1, zero past the output */
            for (int i = 0; i < 2; i++) {
                float *r = i ? y1 : y0;
                int64_t h = 2 * ti + i;
                if (h < d->OH) {
                    memcpy(r, gk + h * d->OW, (size_t)d->OW * sizeof(float));
                    if (d->OW < 2 * TW) r[d->OW] = 0.0f;
                } else {
                    memset(r, 0, (size_t)(2 * TW) * sizeof(float));
                }
            }
            float *m = dM + k * N + col0 + ti * TW;
#pragma omp simd
            for (int64_t tj = 0; tj < TW; tj++) {
                float y[2][2] = {{y0[2 * tj], y0[2 * tj + 1]}, {y1[2 * tj], y1[2 * tj + 1]}}, q[4][2];
                for (int j = 0; j < 2; j++) { /* A y */
                    q[0][j] = y[0][j];
                    q[1][j] = y[0][j] + y[1][j];
                    q[2][j] = y[0][j] - y[1][j];
                    q[3][j] = -y[1][j];
                }
                for (int i = 0; i < 4; i++) { /* (A y) A^T */
                    m[(4 * i + 0) * KN + tj] = q[i][0];
                    m[(4 * i + 1) * KN + tj] = q[i][0] + q[i][1];
                    m[(4 * i + 2) * KN + tj] = q[i][0] - q[i][1];
                    m[(4 * i + 3) * KN + tj] = -q[i][1];
                }
            }
        }
    }
}

/* dx (C, H, W) of one image += B dV B^T of its columns [col0, col0 + T) of dV
 * (16, C, N). Each tile's 4x4 goes into a padded plane (acc: 2 TH + 2 rows
 * of 2 TW + 2), row of tiles by row, each of its 16 values in a fixed order
 * (the tile rows in order, within one the 4x4's rows, then its columns
 * b = 0..3 across the row of tiles), then the plane's inside into dx. */
static void input_grad_transform(float *dx, const float *dV, int64_t N, int64_t col0, float *acc, float *tmp,
                                 const ut_conv2d_shape *d) {
    int64_t TW = (d->OW + 1) / 2, TH = (d->OH + 1) / 2, CN = xs(d->C, N), WP = 2 * TW + 2, HP = 2 * TH + 2;
    for (int64_t c = 0; c < d->C; c++) {
        memset(acc, 0, (size_t)(HP * WP) * sizeof(float));
        for (int64_t ti = 0; ti < TH; ti++) {
            const float *v = dV + c * N + col0 + ti * TW;
#pragma omp simd
            for (int64_t tj = 0; tj < TW; tj++) { /* tmp[(4 a + b) TW + tj] = (B v B^T)[a][b] */
                float r[4][4];
                for (int j = 0; j < 4; j++) { /* B v */
                    float v0 = v[(0 + j) * CN + tj], v1 = v[(4 + j) * CN + tj], v2 = v[(8 + j) * CN + tj],
                          v3 = v[(12 + j) * CN + tj];
                    r[0][j] = v0;
                    r[1][j] = v1 - v2 + v3;
                    r[2][j] = -v0 + v1 + v2;
                    r[3][j] = -v3;
                }
                for (int i = 0; i < 4; i++) { /* (B v) B^T */
                    tmp[(4 * i + 0) * TW + tj] = r[i][0];
                    tmp[(4 * i + 1) * TW + tj] = r[i][1] - r[i][2] + r[i][3];
                    tmp[(4 * i + 2) * TW + tj] = -r[i][0] + r[i][1] + r[i][2];
                    tmp[(4 * i + 3) * TW + tj] = -r[i][3];
                }
            }
            for (int a = 0; a < 4; a++) {
                float *row = acc + (2 * ti + a) * WP;
                for (int b = 0; b < 4; b++) {
                    const float *t = tmp + (4 * a + b) * TW;
#pragma omp simd
                    for (int64_t tj = 0; tj < TW; tj++) row[2 * tj + b] += t[tj];
                }
            }
        }
        /* plane row j, column i is input row j - P, column i - P */
        float *xc = dx + c * d->H * d->W;
        for (int64_t h = 0; h < d->H; h++) {
            int64_t j = h + d->P;
            if (j >= HP) break;
            const float *row = acc + j * WP;
            int64_t w1 = d->W < WP - d->P ? d->W : WP - d->P;
#pragma omp simd
            for (int64_t w = 0; w < w1; w++) xc[h * d->W + w] += row[w + d->P];
        }
    }
}

/* dw (OC, C, 3, 3) += G^T dU G of dU (16, OC, C) */
static void kernel_grad_transform(float *dw, const float *dU, const ut_conv2d_shape *d) {
    int64_t P = d->OC * d->C;
#pragma omp parallel for schedule(static)
    for (int64_t kc = 0; kc < P; kc++) {
        float u[4][4], t[3][4];
        for (int x = 0; x < 16; x++) u[x / 4][x % 4] = dU[x * P + kc];
        for (int j = 0; j < 4; j++) { /* G^T u */
            t[0][j] = u[0][j] + 0.5f * (u[1][j] + u[2][j]);
            t[1][j] = 0.5f * (u[1][j] - u[2][j]);
            t[2][j] = 0.5f * (u[1][j] + u[2][j]) + u[3][j];
        }
        float *g = dw + kc * 9;
        for (int i = 0; i < 3; i++) { /* (G^T u) G */
            g[3 * i + 0] += t[i][0] + 0.5f * (t[i][1] + t[i][2]);
            g[3 * i + 1] += 0.5f * (t[i][1] - t[i][2]);
            g[3 * i + 2] += 0.5f * (t[i][1] + t[i][2]) + t[i][3];
        }
    }
}

void ut_winograd_forward(float *out, float *U, float *ws, const float *x, const float *w, const float *b,
                         const ut_conv2d_shape *d, int nthr) {
    int64_t T = tiles_of(d), N = WINO_GROUP * T, ngroups = (d->B + WINO_GROUP - 1) / WINO_GROUP;
    int64_t CHW = d->C * d->H * d->W, OHW = d->OC * d->OH * d->OW;
    kernel_transform(U, w, d);
#pragma omp parallel num_threads(nthr)
    {
        float *V = ws + (size_t)omp_get_thread_num() * ut_winograd_thread_floats(d), *M = V + 16 * xs(d->C, N);
        float *pad = M + 16 * xs(d->OC, N);
#pragma omp for schedule(static)
        for (int64_t gi = 0; gi < ngroups; gi++) {
            int64_t n0 = gi * WINO_GROUP, n1 = n0 + WINO_GROUP < d->B ? n0 + WINO_GROUP : d->B, cols = (n1 - n0) * T;
            for (int64_t n = n0; n < n1; n++) input_transform(V, N, (n - n0) * T, x + n * CHW, pad, d);
            for (int xi = 0; xi < 16; xi++)
                ut_gemm_ld(false, false, d->OC, cols, d->C, 1.0f, U + xi * d->OC * d->C, d->C, V + xi * xs(d->C, N), N,
                           0.0f, M + xi * xs(d->OC, N), N);
            for (int64_t n = n0; n < n1; n++) output_transform(out + n * OHW, M, N, (n - n0) * T, b, pad, d);
        }
    }
}

void ut_winograd_backward(float *dx, float *dw, float *U, float *ws, float *dU_part, const float *dout,
                          const float *x, const float *w, const ut_conv2d_shape *d, int nthr) {
    int64_t T = tiles_of(d), N = WINO_GROUP * T, KC = d->OC * d->C;
    int64_t CHW = d->C * d->H * d->W, OHW = d->OC * d->OH * d->OW;
    int64_t nch = d->B < UT_CONV_DW_CHUNKS ? d->B : UT_CONV_DW_CHUNKS;
    if (dx) kernel_transform(U, w, d);
#pragma omp parallel num_threads(nthr)
    {
        float *V = ws + (size_t)omp_get_thread_num() * ut_winograd_thread_floats(d), *dM = V + 16 * xs(d->C, N),
              *dV = dM + 16 * xs(d->OC, N), *pad = dV + 16 * xs(d->C, N);
        int64_t TW = (d->OW + 1) / 2, TH = (d->OH + 1) / 2;
        float *tmp = pad + (2 * TH + 2) * (2 * TW + 2), *rows = tmp + 16 * TW;
#pragma omp for schedule(static)
        for (int64_t ch = 0; ch < nch; ch++) {
            float *pu = dw ? dU_part + ch * 16 * KC : NULL;
            int64_t c0 = ch * d->B / nch, c1 = (ch + 1) * d->B / nch;
            for (int64_t n0 = c0; n0 < c1; n0 += WINO_GROUP) {
                int64_t n1 = n0 + WINO_GROUP < c1 ? n0 + WINO_GROUP : c1, cols = (n1 - n0) * T;
                for (int64_t n = n0; n < n1; n++) grad_transform(dM, N, (n - n0) * T, dout + n * OHW, rows, d);
                if (dw) {
                    for (int64_t n = n0; n < n1; n++) input_transform(V, N, (n - n0) * T, x + n * CHW, rows, d);
                    for (int xi = 0; xi < 16; xi++)
                        ut_gemm_ld(false, true, d->OC, d->C, cols, 1.0f, dM + xi * xs(d->OC, N), N, V + xi * xs(d->C, N), N,
                                   n0 == c0 ? 0.0f : 1.0f, pu + xi * KC, d->C);
                }
                if (dx) {
                    for (int xi = 0; xi < 16; xi++)
                        ut_gemm_ld(true, false, d->C, cols, d->OC, 1.0f, U + xi * KC, d->C, dM + xi * xs(d->OC, N), N,
                                   0.0f, dV + xi * xs(d->C, N), N);
                    for (int64_t n = n0; n < n1; n++)
                        input_grad_transform(dx + n * CHW, dV, N, (n - n0) * T, pad, tmp, d);
                }
            }
        }
    }
    if (dw) { /* the chunks' partials in chunk order, then back to 3x3 */
        float *dU = dU_part + nch * 16 * KC;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < 16 * KC; i++) {
            float s = 0.0f;
            for (int64_t ch = 0; ch < nch; ch++) s += dU_part[ch * 16 * KC + i];
            dU[i] = s;
        }
        kernel_grad_transform(dw, dU, d);
    }
}
