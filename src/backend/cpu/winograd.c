/* Winograd convolution F(2x2, 3x3) for 3x3 stride-1 layers (Lavin and Gray,
 * "Fast Algorithms for Convolutional Neural Networks", 2015): each 2x2 block
 * of the output comes from a 4x4 tile of the input in 16 products instead of
 * 36, so the three products of a layer (forward, input gradient, weight
 * gradient) become 16 matrix products each over the transformed tiles, 2.25
 * times fewer multiplications than im2col's:
 *
 *   U = G g G^T       the kernel, (16, OC, C)
 *   V = B^T d B       the input tiles, (16, C, tiles)
 *   M = U V           per position xi of the 4x4: (OC, C) @ (C, tiles)
 *   y = A^T M A       each tile's 2x2 outputs
 *
 * and backward dM = A dy A^T, dV = U^T dM (then dx += B dV B^T over the
 * overlapping tiles), dU = sum over images of dM V^T (then dg = G^T dU G).
 *
 * The work goes an image at a time, in blocks of whole rows of tiles small
 * enough that a block's transformed tiles and products stay in the core's
 * L2 cache from the transform that writes them to the one that reads them
 * (BLOCK_BYTES). The products are small (a block is at most a few hundred
 * tiles wide) and already in cache, so they run through libxsmm's kernels,
 * generated for each shape, which read the operands where they lie; OpenBLAS
 * would copy both into its packed layouts first, and that copy costs half
 * as much as the arithmetic here. Where libxsmm has no kernel for the CPU,
 * or UTRAIN_SMALL_GEMM=blas, the same products go through OpenBLAS.
 *
 * A column's sums run over channels only, so an image's results do not
 * depend on the images beside it. The weight gradient is summed in the same
 * fixed chunks of the batch as im2col's (UT_CONV_DW_CHUNKS). Which layers
 * take this path: ut_winograd_applies, the rule measured in
 * docs/performance.md. */
#include <libxsmm.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "gemm.h"

/* A block's V, M (or dM, dV and V^T) fit in this many bytes: the L2 of the
 * smallest core we measure on is 1 MiB (docs/performance.md). */
#define BLOCK_BYTES (768 * 1024)

/* UTRAIN_CONV=im2col keeps every layer on im2col + sgemm (read once), and
 * UTRAIN_SMALL_GEMM=blas the Winograd products on OpenBLAS (read at each
 * call: comparisons, and the tests of the fallback). */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static bool im2col_only;
static void read_env(void) {
    const char *e = getenv("UTRAIN_CONV");
    im2col_only = e && !strcmp(e, "im2col");
    libxsmm_init();
}

bool ut_winograd_applies(const ut_conv2d_shape *d) {
    pthread_once(&env_once, read_env);
    return !im2col_only && d->KH == 3 && d->KW == 3 && d->S == 1 && d->P <= 2 && d->C >= 8 && d->OC >= 8 &&
           d->OH >= 2 && d->OW >= 2;
}

/* ---- small row-major products ---- */

/* Row-major C (M, N) = A (M, K) @ B (K, N) + beta C, all three with their
 * own leading dimensions. libxsmm is column-major: the same product is
 * C^T = B^T A^T there, so its m, n are our N, M and the operands swap. */
typedef struct {
    libxsmm_smmfunction f; /* NULL: OpenBLAS */
    int64_t M, N, K, lda, ldb, ldc;
    float beta;
} rm_gemm;

static rm_gemm rm_gemm_make(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, float beta,
                           bool blas_only) {
    rm_gemm g = {NULL, M, N, K, lda, ldb, ldc, beta};
    pthread_once(&env_once, read_env);
    if (!blas_only) {
        libxsmm_blasint la = (libxsmm_blasint)ldb, lb = (libxsmm_blasint)lda, lc = (libxsmm_blasint)ldc;
        float alpha = 1.0f;
        int flags = LIBXSMM_GEMM_FLAGS('N', 'N');
        g.f = libxsmm_smmdispatch((libxsmm_blasint)N, (libxsmm_blasint)M, (libxsmm_blasint)K, &la, &lb, &lc, &alpha,
                                  &beta, &flags, NULL);
    }
    return g;
}

static inline void rm_gemm_run(const rm_gemm *g, const float *A, const float *B, float *C) {
    if (g->f)
        g->f(B, A, C);
    else
        ut_gemm_ld(false, false, g->M, g->N, g->K, 1.0f, A, g->lda, B, g->ldb, g->beta, C, g->ldc);
}

/* ---- blocks of tile rows ---- */

/* The 16 matrices of a transform lie XPAD floats apart more than their
 * size: at a multiple of 4 KiB apart, the 16 streams a tile's values go to
 * would share the L1's sets (8 ways) and evict each other. */
#define XPAD 16

typedef struct {
    int64_t TW, TH; /* tiles per row, rows of tiles */
    int64_t rows;   /* tile rows per block */
    int64_t nb;     /* columns of a full block (rows * TW): every matrix's leading dimension */
    int64_t sv, sm; /* floats from one xi's V (C rows) / M (OC rows) to the next */
} wblocks;

static wblocks blocks_of(const ut_conv2d_shape *d) {
    wblocks b = {.TW = (d->OW + 1) / 2, .TH = (d->OH + 1) / 2};
    /* backward holds V, V^T, dV (C rows each) and dM (OC rows) per column */
    int64_t per_row = 16 * (3 * d->C + d->OC) * b.TW * (int64_t)sizeof(float);
    b.rows = BLOCK_BYTES / per_row;
    if (b.rows < 1) b.rows = 1;
    if (b.rows > b.TH) b.rows = b.TH;
    b.nb = b.rows * b.TW;
    b.sv = d->C * b.nb + XPAD;
    b.sm = d->OC * b.nb + XPAD;
    return b;
}

/* per thread: V, M/dM, dV, V^T, then the transforms' scratch (a padded
 * plane of a block: 2 rows + 2 per tile row, 2 TW + 2 wide; 16 rows of nb) */
size_t ut_winograd_thread_floats(const ut_conv2d_shape *d) {
    wblocks b = blocks_of(d);
    int64_t plane = (2 * b.rows + 2) * (2 * b.TW + 2);
    return (size_t)(16 * (3 * b.sv + b.sm) + plane + 16 * b.nb);
}

/* U (16, OC, C) = G g G^T of each 3x3 kernel g of w (OC, C, 3, 3); with
 * transposed, U^T (16, C, OC) */
static void kernel_transform(float *U, const float *w, const ut_conv2d_shape *d, bool transposed) {
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
        int64_t at = transposed ? (kc % C) * OC + kc / C : kc;
        for (int x = 0; x < 16; x++) U[x * P + at] = u[x / 4][x % 4];
    }
}

/* The transforms run a row of tiles at a time: the tiles of row ti of a
 * block starting at tile row r0 are the columns [(ti - r0) TW, (ti - r0 + 1)
 * TW) of each of the 16 matrices, so each of the 16 values of a tile is
 * stored (or loaded) at consecutive addresses across the row, and the loops
 * over tj vectorise. The input rows a tile row reads are first copied into
 * a zero-padded buffer (pad: 4 rows of 2 TW + 2). */

/* Row h of plane xc (H rows of W) seen with the padding: column j of the
 * result is input column j - P, WP wide, zeros outside the input. The
 * input's own row where no column falls outside it, else a copy in buf. */
static const float *padded_row(const float *xc, int64_t h, float *buf, const ut_conv2d_shape *d, int64_t WP) {
    bool inside = h >= 0 && h < d->H;
    if (inside && d->P == 0 && d->W >= WP) return xc + h * d->W;
    const float *src = xc + (inside ? h : 0) * d->W;
#pragma omp simd
    for (int64_t j = 0; j < WP; j++) {
        int64_t iw = j - d->P;
        buf[j] = inside && iw >= 0 && iw < d->W ? src[iw] : 0.0f;
    }
    return buf;
}

/* V (16, C, nb) = B^T d B of the tiles in rows [r0, r1) of image x (C, H, W) */
static void input_transform(float *V, const wblocks *bl, int64_t r0, int64_t r1, const float *x, float *pad,
                            const ut_conv2d_shape *d) {
    int64_t TW = bl->TW, WP = 2 * TW + 2, N = bl->nb, SV = bl->sv;
    for (int64_t c = 0; c < d->C; c++) {
        const float *xc = x + c * d->H * d->W;
        for (int64_t ti = r0; ti < r1; ti++) {
            const float *r0p = padded_row(xc, 2 * ti - d->P, pad, d, WP),
                        *r1p = padded_row(xc, 2 * ti - d->P + 1, pad + WP, d, WP),
                        *r2p = padded_row(xc, 2 * ti - d->P + 2, pad + 2 * WP, d, WP),
                        *r3p = padded_row(xc, 2 * ti - d->P + 3, pad + 3 * WP, d, WP);
            float *v = V + c * N + (ti - r0) * TW;
#pragma omp simd
            for (int64_t tj = 0; tj < TW; tj++) {
                float t[4][4], u[4][4];
                for (int b = 0; b < 4; b++) {
                    t[0][b] = r0p[2 * tj + b];
                    t[1][b] = r1p[2 * tj + b];
                    t[2][b] = r2p[2 * tj + b];
                    t[3][b] = r3p[2 * tj + b];
                }
                for (int b = 0; b < 4; b++) { /* B^T t */
                    u[0][b] = t[0][b] - t[2][b];
                    u[1][b] = t[1][b] + t[2][b];
                    u[2][b] = t[2][b] - t[1][b];
                    u[3][b] = t[1][b] - t[3][b];
                }
                for (int q = 0; q < 4; q++) { /* (B^T t) B */
                    v[(4 * q + 0) * SV + tj] = u[q][0] - u[q][2];
                    v[(4 * q + 1) * SV + tj] = u[q][1] + u[q][2];
                    v[(4 * q + 2) * SV + tj] = u[q][2] - u[q][1];
                    v[(4 * q + 3) * SV + tj] = u[q][1] - u[q][3];
                }
            }
        }
    }
}

/* The output rows y0, y1 (2 TW wide) of a row of tiles m: A^T m A plus
 * bias, clamped at 0 with relu. Inlined with relu a constant at each call,
 * so that the loop has no branch and vectorises. */
static inline void tile_row_outputs(float *y0, float *y1, const float *m, int64_t SM, int64_t TW, float bias,
                                    const bool relu) {
#pragma omp simd
    for (int64_t tj = 0; tj < TW; tj++) {
        float s[2][4];
        for (int j = 0; j < 4; j++) { /* A^T m */
            float m0 = m[(0 + j) * SM + tj], m1 = m[(4 + j) * SM + tj], m2 = m[(8 + j) * SM + tj],
                  m3 = m[(12 + j) * SM + tj];
            s[0][j] = m0 + m1 + m2;
            s[1][j] = m1 - m2 - m3;
        }
        float o00 = s[0][0] + s[0][1] + s[0][2] + bias, o01 = s[0][1] - s[0][2] - s[0][3] + bias; /* (A^T m) A */
        float o10 = s[1][0] + s[1][1] + s[1][2] + bias, o11 = s[1][1] - s[1][2] - s[1][3] + bias;
        if (relu) {
            o00 = o00 > 0.0f ? o00 : 0.0f, o01 = o01 > 0.0f ? o01 : 0.0f;
            o10 = o10 > 0.0f ? o10 : 0.0f, o11 = o11 > 0.0f ? o11 : 0.0f;
        }
        y0[2 * tj] = o00, y0[2 * tj + 1] = o01, y1[2 * tj] = o10, y1[2 * tj + 1] = o11;
    }
}

/* rows [2 r0, 2 r1) of out (OC, OH, OW) of one image = A^T M A of M (16, OC, nb), plus b;
 * with d->relu, clamped at 0. With d->pool, out is the image's pooled
 * (OC, OH/2, OW/2) and arg their places: a tile's 2x2 outputs are a
 * pooling window (a last, cut row or column of tiles is no window). The
 * loops over tiles are written so that they vectorise (selects, and no
 * bool or 8-bit temporaries among the floats). */
static void output_transform(float *out, uint8_t *arg, const float *M, const wblocks *bl, int64_t r0, int64_t r1,
                             const float *b, float *pad, const ut_conv2d_shape *d) {
    int64_t TW = bl->TW, WP = 2 * TW + 2, N = bl->nb, SM = bl->sm, PH = d->OH / 2, PW = d->OW / 2;
    const bool relu = d->relu;
    for (int64_t k = 0; k < d->OC; k++) {
        float bias = b ? b[k] : 0.0f;
        if (d->pool) { /* relu too: no NaN is left, so max_pool2d's rule is "a later element wins when greater" */
            /* where every tile of the block is a window (OW even, the rows inside
             * the pooled output), the block's tiles and its pooled outputs are in
             * the same order: one loop over all of them (whole vectors), else a
             * row of tiles at a time */
            bool whole = PW == TW && r1 <= PH;
            for (int64_t ti = r0; ti < (whole ? r0 + 1 : r1 < PH ? r1 : PH); ti++) {
                const float *m = M + k * N + (ti - r0) * TW;
                float *po = out + (k * PH + ti) * PW;
                uint8_t *pa = arg + (k * PH + ti) * PW;
                int64_t n = whole ? (r1 - r0) * TW : PW;
#pragma omp simd
                for (int64_t tj = 0; tj < n; tj++) {
                    /* A^T m A as in tile_row_outputs, written out again: gcc
                     * vectorises neither loop once this is a shared inline function */
                    float s[2][4];
                    for (int j = 0; j < 4; j++) { /* A^T m */
                        float m0 = m[(0 + j) * SM + tj], m1 = m[(4 + j) * SM + tj], m2 = m[(8 + j) * SM + tj],
                              m3 = m[(12 + j) * SM + tj];
                        s[0][j] = m0 + m1 + m2;
                        s[1][j] = m1 - m2 - m3;
                    }
                    float o0 = s[0][0] + s[0][1] + s[0][2] + bias, o1 = s[0][1] - s[0][2] - s[0][3] + bias;
                    float o2 = s[1][0] + s[1][1] + s[1][2] + bias, o3 = s[1][1] - s[1][2] - s[1][3] + bias;
                    o0 = o0 > 0.0f ? o0 : 0.0f, o1 = o1 > 0.0f ? o1 : 0.0f;
                    o2 = o2 > 0.0f ? o2 : 0.0f, o3 = o3 > 0.0f ? o3 : 0.0f;
                    float mx = o0, at = 0.0f;
                    at = o1 > mx ? 1.0f : at, mx = o1 > mx ? o1 : mx;
                    at = o2 > mx ? 2.0f : at, mx = o2 > mx ? o2 : mx;
                    at = o3 > mx ? 3.0f : at, mx = o3 > mx ? o3 : mx;
                    po[tj] = mx;
                    pa[tj] = (uint8_t)at;
                }
            }
            continue;
        }
        float *ok = out + k * d->OH * d->OW;
        for (int64_t ti = r0; ti < r1; ti++) {
            const float *m = M + k * N + (ti - r0) * TW;
            /* the two output rows, 2 TW wide: in place where they fit */
            bool fit = d->OW == 2 * TW;
            float *y0 = fit ? ok + 2 * ti * d->OW : pad, *y1 = fit && 2 * ti + 1 < d->OH ? ok + (2 * ti + 1) * d->OW : pad + WP;
            if (relu) tile_row_outputs(y0, y1, m, SM, TW, bias, true);
            else tile_row_outputs(y0, y1, m, SM, TW, bias, false);
            if (fit) continue;
            float *o0 = ok + 2 * ti * d->OW, *o1 = o0 + d->OW;
#pragma omp simd
            for (int64_t j = 0; j < d->OW; j++) o0[j] = y0[j];
            if (2 * ti + 1 < d->OH)
#pragma omp simd
                for (int64_t j = 0; j < d->OW; j++) o1[j] = y1[j];
        }
    }
}

/* Row h of an output gradient plane gk (OH rows of OW), 2 TW wide with
 * zeros past the output: the plane's own row where it is whole, else a copy
 * in buf. With a fused ReLU (ok: the output's plane), the copy counts the
 * gradient where the output is > 0 only. */
static const float *output_row(const float *gk, const float *ok, int64_t h, float *buf, const ut_conv2d_shape *d,
                               int64_t TW) {
    bool inside = h < d->OH;
    if (inside && d->OW == 2 * TW && !ok) return gk + h * d->OW;
    int64_t r = (inside ? h : 0) * d->OW;
    const float *src = gk + r;
    if (ok) {
        const float *o = ok + r;
#pragma omp simd
        for (int64_t j = 0; j < 2 * TW; j++) buf[j] = inside && j < d->OW && o[j] > 0.0f ? src[j] : 0.0f;
        return buf;
    }
#pragma omp simd
    for (int64_t j = 0; j < 2 * TW; j++) buf[j] = inside && j < d->OW ? src[j] : 0.0f;
    return buf;
}

/* dM (16, OC, nb) = A dy A^T of tile rows [r0, r1) of one image's output
 * gradient g (OC, OH, OW); with a fused ReLU (out: the image's output, else
 * NULL) dy is g where out > 0; with d->pool, g, out and arg are the image's
 * pooled ones, as conv.c's pooled_grad_row reads them */
/* dM's 16 values of tile tj (matrices SM apart) = A y A^T of its 2x2 output gradient y */
static inline void tile_grad(float *m, int64_t SM, int64_t tj, float y00, float y01, float y10, float y11) {
    float y[2][2] = {{y00, y01}, {y10, y11}}, q[4][2];
    for (int j = 0; j < 2; j++) { /* A y */
        q[0][j] = y[0][j];
        q[1][j] = y[0][j] + y[1][j];
        q[2][j] = y[0][j] - y[1][j];
        q[3][j] = -y[1][j];
    }
    for (int i = 0; i < 4; i++) { /* (A y) A^T */
        m[(4 * i + 0) * SM + tj] = q[i][0];
        m[(4 * i + 1) * SM + tj] = q[i][0] + q[i][1];
        m[(4 * i + 2) * SM + tj] = q[i][0] - q[i][1];
        m[(4 * i + 3) * SM + tj] = -q[i][1];
    }
}

static void grad_transform(float *dM, const wblocks *bl, int64_t r0, int64_t r1, const float *g, const float *out,
                           const uint8_t *arg, float *pad, const ut_conv2d_shape *d) {
    int64_t TW = bl->TW, WP = 2 * TW + 2, N = bl->nb, SM = bl->sm, PH = d->OH / 2, PW = d->OW / 2;
    for (int64_t k = 0; k < d->OC; k++) {
        if (d->pool) { /* a tile's gradient is the pooled one at its max, where the pooled output is > 0 */
            bool whole = PW == TW && r1 <= PH; /* as output_transform: one loop over the block */
            for (int64_t ti = r0; ti < (whole ? r0 + 1 : r1); ti++) {
                float *m = dM + k * N + (ti - r0) * TW;
                int64_t n = whole ? (r1 - r0) * TW : ti < PH ? PW : 0, at = (k * PH + (ti < PH ? ti : 0)) * PW;
                const float *gp = g + at, *op = out + at;
                const uint8_t *ap = arg + at;
#pragma omp simd
                for (int64_t tj = 0; tj < n; tj++) {
                    float v = gp[tj], o = op[tj];
                    int a = ap[tj];
                    v = o > 0.0f ? v : 0.0f;
                    tile_grad(m, SM, tj, a == 0 ? v : 0.0f, a == 1 ? v : 0.0f, a == 2 ? v : 0.0f, a == 3 ? v : 0.0f);
                }
                for (int64_t tj = n; tj < TW; tj++) tile_grad(m, SM, tj, 0.0f, 0.0f, 0.0f, 0.0f);
            }
            continue;
        }
        const float *gk = g + k * d->OH * d->OW, *ok = out ? out + k * d->OH * d->OW : NULL;
        for (int64_t ti = r0; ti < r1; ti++) {
            /* rows 2 ti and 2 ti + 1, 2 TW wide, zero past the output */
            const float *y0 = output_row(gk, ok, 2 * ti, pad, d, TW), *y1 = output_row(gk, ok, 2 * ti + 1, pad + WP, d, TW);
            float *m = dM + k * N + (ti - r0) * TW;
#pragma omp simd
            for (int64_t tj = 0; tj < TW; tj++) tile_grad(m, SM, tj, y0[2 * tj], y0[2 * tj + 1], y1[2 * tj], y1[2 * tj + 1]);
        }
    }
}

/* dx (C, H, W) of one image += B dV B^T of tile rows [r0, r1) of dV (16, C,
 * nb), a channel at a time. First the 16 values T[a][b] of every tile of
 * the block, a plane of the block's columns each (tmp: 16 nb), in one pass
 * over whole vectors. Tiles overlap by 2: plane position (2 p + e, 2 q + f)
 * (e, f in {0, 1}, p a tile row of the block) is the sum of four tiles'
 * values, T[e][f] of tile (p, q), T[e+2][f] of (p-1, q), T[e][f+2] of
 * (p, q-1) and T[e+2][f+2] of (p-1, q-1), each added in that order where
 * the tile is in the block. Each such row goes into a row buffer (rowbuf:
 * 2 TW + 2), then its inside into dx's row: position (j, i) is input row
 * 2 r0 + j - P, column i - P. Rows 2 r1 and 2 r1 + 1 get the last tile row's
 * share here and the next block's first tile row's there. */
static void input_grad_transform(float *dx, const float *dV, const wblocks *bl, int64_t r0, int64_t r1, float *rowbuf,
                                 float *tmp, const ut_conv2d_shape *d) {
    int64_t TW = bl->TW, N = bl->nb, SV = bl->sv, rows = r1 - r0, cols = rows * TW;
    for (int64_t c = 0; c < d->C; c++) {
        const float *v = dV + c * N;
#pragma omp simd
        for (int64_t t = 0; t < cols; t++) { /* tmp[(4 a + b) nb + t] = (B v B^T)[a][b] of tile t */
            float r[4][4];
            for (int j = 0; j < 4; j++) { /* B v */
                float v0 = v[(0 + j) * SV + t], v1 = v[(4 + j) * SV + t], v2 = v[(8 + j) * SV + t],
                      v3 = v[(12 + j) * SV + t];
                r[0][j] = v0;
                r[1][j] = v1 - v2 + v3;
                r[2][j] = -v0 + v1 + v2;
                r[3][j] = -v3;
            }
            for (int i = 0; i < 4; i++) { /* (B v) B^T */
                tmp[(4 * i + 0) * N + t] = r[i][0];
                tmp[(4 * i + 1) * N + t] = r[i][1] - r[i][2] + r[i][3];
                tmp[(4 * i + 2) * N + t] = -r[i][0] + r[i][1] + r[i][2];
                tmp[(4 * i + 3) * N + t] = -r[i][3];
            }
        }
        float *xc = dx + c * d->H * d->W;
        for (int64_t p = 0; p <= rows; p++)
            for (int e = 0; e < 2; e++) {
                int64_t h = 2 * (r0 + p) + e - d->P;
                if (h < 0 || h >= d->H) continue;
                /* this tile row's T[e][.] (p < rows) and the previous one's T[e+2][.] (p > 0) */
                const float *cur = p < rows ? tmp + 4 * e * N + p * TW : NULL;
                const float *prev = p > 0 ? tmp + 4 * (e + 2) * N + (p - 1) * TW : NULL;
                float *sum[2] = {rowbuf, rowbuf + TW + 1};
                for (int f = 0; f < 2; f++) {
                    /* column 2 q + f, q in [0, TW]: b = f of tile q, b = f + 2 of tile q - 1 */
                    float *sf = sum[f];
#pragma omp simd
                    for (int64_t q = 0; q <= TW; q++) {
                        float s = 0.0f;
                        if (cur && q < TW) s += cur[f * N + q];
                        if (prev && q < TW) s += prev[f * N + q];
                        if (cur && q > 0) s += cur[(f + 2) * N + q - 1];
                        if (prev && q > 0) s += prev[(f + 2) * N + q - 1];
                        sf[q] = s;
                    }
                }
                /* dx column 2 q + f - P; [q0, q1): both columns inside, interleaved as vectors */
                float *xr = xc + h * d->W, *s0 = sum[0], *s1 = sum[1];
                int64_t q0 = (d->P + 1) / 2, q1 = (d->W + d->P) / 2;
                if (q1 > TW + 1) q1 = TW + 1;
                for (int64_t q = 0; q <= TW; q++) {
                    if (q == q0 && q0 < q1) {
                        float *x0 = xr + 2 * q0 - d->P;
#pragma omp simd
                        for (int64_t i = 0; i < q1 - q0; i++) {
                            x0[2 * i] += s0[q0 + i];
                            x0[2 * i + 1] += s1[q0 + i];
                        }
                        q = q1 - 1;
                        continue;
                    }
                    int64_t w = 2 * q - d->P;
                    if (w >= 0 && w < d->W) xr[w] += s0[q];
                    if (w + 1 >= 0 && w + 1 < d->W) xr[w + 1] += s1[q];
                }
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

/* The three products of a block of cols columns (a full block or the last,
 * shorter one): forward M = U V, input gradient dV = U^T dM, weight gradient
 * dU += dM V^T (V^T: cols rows of C). */
typedef struct {
    rm_gemm fwd, bwd_data, bwd_weights;
} wgemms;

static wgemms gemms_for(const ut_conv2d_shape *d, const wblocks *bl, int64_t cols) {
    const char *e = getenv("UTRAIN_SMALL_GEMM");
    bool blas = e && !strcmp(e, "blas");
    return (wgemms){
        .fwd = rm_gemm_make(d->OC, cols, d->C, d->C, bl->nb, bl->nb, 0.0f, blas),
        .bwd_data = rm_gemm_make(d->C, cols, d->OC, d->OC, bl->nb, bl->nb, 0.0f, blas),
        .bwd_weights = rm_gemm_make(d->OC, d->C, cols, bl->nb, d->C, d->C, 1.0f, blas),
    };
}

void ut_winograd_forward(float *out, uint8_t *arg, float *U, float *ws, const float *x, const float *w,
                         const float *b, const ut_conv2d_shape *d, int nthr) {
    wblocks bl = blocks_of(d);
    int64_t CHW = d->C * d->H * d->W, YHW = d->OC * (d->pool ? (d->OH / 2) * (d->OW / 2) : d->OH * d->OW), KC = d->OC * d->C;
    int64_t last = bl.TH % bl.rows ? bl.TH % bl.rows : bl.rows;
    wgemms full = gemms_for(d, &bl, bl.nb), tail = gemms_for(d, &bl, last * bl.TW);
    kernel_transform(U, w, d, false);
#pragma omp parallel num_threads(nthr)
    {
        float *V = ws + (size_t)omp_get_thread_num() * ut_winograd_thread_floats(d), *M = V + 16 * bl.sv;
        float *pad = M + 16 * bl.sm;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < d->B; n++)
            for (int64_t r0 = 0; r0 < bl.TH; r0 += bl.rows) {
                int64_t r1 = r0 + bl.rows < bl.TH ? r0 + bl.rows : bl.TH;
                const rm_gemm *g = r1 - r0 == bl.rows ? &full.fwd : &tail.fwd;
                input_transform(V, &bl, r0, r1, x + n * CHW, pad, d);
                for (int xi = 0; xi < 16; xi++) rm_gemm_run(g, U + xi * KC, V + xi * bl.sv, M + xi * bl.sm);
                output_transform(out + n * YHW, arg ? arg + n * YHW : NULL, M, &bl, r0, r1, b, pad, d);
            }
    }
}

/* V (16, C, nb) columns [0, cols) -> V^T (16, cols, C), by libxsmm's
 * transposition (column-major: V's (cols, C) to V^T's (C, cols)) */
static void transpose_tiles(float *Vt, const float *V, const wblocks *bl, int64_t cols, const ut_conv2d_shape *d) {
    for (int xi = 0; xi < 16; xi++)
        libxsmm_otrans(Vt + xi * bl->sv, V + xi * bl->sv, sizeof(float), (libxsmm_blasint)cols,
                       (libxsmm_blasint)d->C, (libxsmm_blasint)bl->nb, (libxsmm_blasint)d->C);
}

void ut_winograd_backward(float *dx, float *dw, float *U, float *ws, float *dU_part, const float *dout,
                          const float *out, const uint8_t *arg, const float *x, const float *w,
                          const ut_conv2d_shape *d, int nthr) {
    wblocks bl = blocks_of(d);
    int64_t KC = d->OC * d->C, CHW = d->C * d->H * d->W, YHW = d->OC * (d->pool ? (d->OH / 2) * (d->OW / 2) : d->OH * d->OW); /* an image of the output */
    int64_t nch = d->B < UT_CONV_DW_CHUNKS ? d->B : UT_CONV_DW_CHUNKS;
    int64_t last = bl.TH % bl.rows ? bl.TH % bl.rows : bl.rows;
    wgemms full = gemms_for(d, &bl, bl.nb), tail = gemms_for(d, &bl, last * bl.TW);
    if (dx) kernel_transform(U, w, d, true); /* U^T */
#pragma omp parallel num_threads(nthr)
    {
        float *V = ws + (size_t)omp_get_thread_num() * ut_winograd_thread_floats(d), *dM = V + 16 * bl.sv;
        float *dV = dM + 16 * bl.sm, *Vt = dV + 16 * bl.sv, *pad = Vt + 16 * bl.sv;
        float *tmp = pad + (2 * bl.rows + 2) * (2 * bl.TW + 2);
#pragma omp for schedule(static)
        for (int64_t ch = 0; ch < nch; ch++) {
            float *pu = dw ? dU_part + ch * 16 * KC : NULL;
            if (pu) memset(pu, 0, (size_t)(16 * KC) * sizeof(float));
            for (int64_t n = ch * d->B / nch; n < (ch + 1) * d->B / nch; n++)
                for (int64_t r0 = 0; r0 < bl.TH; r0 += bl.rows) {
                    int64_t r1 = r0 + bl.rows < bl.TH ? r0 + bl.rows : bl.TH, cols = (r1 - r0) * bl.TW;
                    const wgemms *g = r1 - r0 == bl.rows ? &full : &tail;
                    grad_transform(dM, &bl, r0, r1, dout + n * YHW, out ? out + n * YHW : NULL, arg ? arg + n * YHW : NULL,
                                   pad, d);
                    if (dx) {
                        for (int xi = 0; xi < 16; xi++)
                            rm_gemm_run(&g->bwd_data, U + xi * KC, dM + xi * bl.sm, dV + xi * bl.sv);
                        input_grad_transform(dx + n * CHW, dV, &bl, r0, r1, pad, tmp, d);
                    }
                    if (dw) {
                        input_transform(V, &bl, r0, r1, x + n * CHW, pad, d);
                        transpose_tiles(Vt, V, &bl, cols, d);
                        for (int xi = 0; xi < 16; xi++)
                            rm_gemm_run(&g->bwd_weights, dM + xi * bl.sm, Vt + xi * bl.sv, pu + xi * KC);
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
