/* 2-D convolution as torch.nn.functional.conv2d (groups 1, dilation 1).
 * 3x3 stride-1 layers of 8 channels or more go through Winograd F(2x2, 3x3)
 * (winograd.c, ut_winograd_applies); the others through
 * im2col per image and one sgemm per image, parallel over the batch with a
 * column buffer per thread (OpenBLAS runs single-threaded inside the region).
 * Each image's result is computed alone, so it does not depend on how many
 * images a process holds: a batch split over N ranks gives one process's bits.
 * oneDNN's direct convolution (dnnl_conv.c) is 10-18% faster on the CNN's
 * second layer (bench/conv_dnnl.c) but its sums depend on the minibatch size
 * (4 ranks of a batch drift 1e-4 from one process in tests/dist/
 * test_strategies), so it is not used here; docs/performance.md.
 * Parameters: ut_conv2d_stride, ut_conv2d_padding (src/ops/params.h). */
#include <omp.h>

#include "conv.h"
#include "gemm.h"
#include "cpu.h"
#include "../../ops/params.h"

/* The bias gradient of one output channel adds pixel p of every image's plane
 * into lane p % CONV_DB_LANES (independent chains, so the loop vectorises
 * without reassociation), then folds the lanes in a fixed halving tree: the
 * result depends on neither the thread count nor the vector width. */
#define CONV_DB_LANES 16

/* The output columns [*ow0, *ow1) of a stride-1 row with kernel column kw read
 * input columns ow - P + kw inside [0, W); the others cover padding. */
static void valid_cols_s1(int64_t *ow0, int64_t *ow1, int64_t kw, const ut_conv2d_shape *d) {
    int64_t lo = d->P - kw, hi = d->W + d->P - kw;
    *ow0 = lo > 0 ? lo : 0;
    *ow1 = hi < d->OW ? hi : d->OW;
    if (*ow1 < *ow0) *ow1 = *ow0;
}

/* col (C*KH*KW, OH*OW) from one image x (C, H, W); zero where the window
 * covers padding. Stride 1 copies each row's valid span in one piece (it is
 * contiguous in x); other strides gather element by element. */
static void im2col(float *col, const float *x, const ut_conv2d_shape *d) {
    int64_t OHW = d->OH * d->OW;
    for (int64_t c = 0; c < d->C; c++)
        for (int64_t kh = 0; kh < d->KH; kh++)
            for (int64_t kw = 0; kw < d->KW; kw++) {
                float *row = col + ((c * d->KH + kh) * d->KW + kw) * OHW;
                int64_t ow0 = 0, ow1 = 0;
                if (d->S == 1) valid_cols_s1(&ow0, &ow1, kw, d);
                for (int64_t oh = 0; oh < d->OH; oh++) {
                    int64_t ih = oh * d->S - d->P + kh;
                    float *r = row + oh * d->OW;
                    if (ih < 0 || ih >= d->H) {
                        memset(r, 0, (size_t)d->OW * sizeof(float));
                        continue;
                    }
                    const float *xr = x + (c * d->H + ih) * d->W;
                    if (d->S == 1) {
                        /* rows are short (OW floats): an inline vector copy,
                         * no library call per row */
                        int64_t shift = kw - d->P;
                        for (int64_t ow = 0; ow < ow0; ow++) r[ow] = 0.0f;
#pragma omp simd
                        for (int64_t ow = ow0; ow < ow1; ow++) r[ow] = xr[ow + shift];
                        for (int64_t ow = ow1; ow < d->OW; ow++) r[ow] = 0.0f;
                        continue;
                    }
                    for (int64_t ow = 0; ow < d->OW; ow++) {
                        int64_t iw = ow * d->S - d->P + kw;
                        r[ow] = iw >= 0 && iw < d->W ? xr[iw] : 0.0f;
                    }
                }
            }
}

/* dx row xr (W) += the valid span of col row r for kernel column kw (stride 1) */
static void add_row_s1(float *restrict xr, const float *restrict r, int64_t kw,
                       const ut_conv2d_shape *d) {
    int64_t ow0, ow1;
    valid_cols_s1(&ow0, &ow1, kw, d);
    int64_t shift = kw - d->P;
#pragma omp simd
    for (int64_t ow = ow0; ow < ow1; ow++) xr[ow + shift] += r[ow];
}

/* dx (C, H, W) of one image += col (C*KH*KW, OH*OW) folded back (adjoint of
 * im2col). Every dx element receives its terms in (kh, kw) order on both
 * paths, so they give the same bits. Stride 1 goes row by row of dx (which
 * stays in L1 while its KH*KW source rows are added, each a contiguous
 * vectorised span); other strides scatter element by element. */
static void col2im_add(float *dx, const float *col, const ut_conv2d_shape *d) {
    int64_t OHW = d->OH * d->OW;
    if (d->S == 1) {
        for (int64_t c = 0; c < d->C; c++)
            for (int64_t ih = 0; ih < d->H; ih++) {
                float *xr = dx + (c * d->H + ih) * d->W;
                for (int64_t kh = 0; kh < d->KH; kh++) {
                    int64_t oh = ih + d->P - kh;
                    if (oh < 0 || oh >= d->OH) continue;
                    for (int64_t kw = 0; kw < d->KW; kw++)
                        add_row_s1(xr, col + ((c * d->KH + kh) * d->KW + kw) * OHW + oh * d->OW,
                                   kw, d);
                }
            }
        return;
    }
    for (int64_t c = 0; c < d->C; c++)
        for (int64_t kh = 0; kh < d->KH; kh++)
            for (int64_t kw = 0; kw < d->KW; kw++) {
                const float *row = col + ((c * d->KH + kh) * d->KW + kw) * OHW;
                for (int64_t oh = 0; oh < d->OH; oh++) {
                    int64_t ih = oh * d->S - d->P + kh;
                    if (ih < 0 || ih >= d->H) continue;
                    const float *r = row + oh * d->OW;
                    float *xr = dx + (c * d->H + ih) * d->W;
                    for (int64_t ow = 0; ow < d->OW; ow++) {
                        int64_t iw = ow * d->S - d->P + kw;
                        if (iw >= 0 && iw < d->W) xr[iw] += r[ow];
                    }
                }
            }
}

/* out (B, OC, OH*OW) = w (OC, C*KH*KW) @ im2col(x[b]) + b (OC) per image, on nthr
 * threads. cols: nthr buffers of C*KH*KW * OH*OW floats. */
void ut_conv2d_forward_cpu(float *out, float *cols, const float *x, const float *w,
                           const float *b, const ut_conv2d_shape *d, int nthr) {
    int64_t K = d->C * d->KH * d->KW, OHW = d->OH * d->OW;
#pragma omp parallel num_threads(nthr)
    {
        float *col = cols + (int64_t)omp_get_thread_num() * K * OHW;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < d->B; n++) {
            float *o = out + n * d->OC * OHW;
            im2col(col, x + n * d->C * d->H * d->W, d);
            if (b)
                for (int64_t oc = 0; oc < d->OC; oc++)
                    for (int64_t p = 0; p < OHW; p++) o[oc * OHW + p] = b[oc];
            ut_gemm(false, false, d->OC, OHW, K, 1.0f, w, col, b ? 1.0f : 0.0f, o);
            if (d->relu)
#pragma omp simd
                for (int64_t i = 0; i < d->OC * OHW; i++) o[i] = o[i] > 0.0f ? o[i] : 0.0f;
        }
    }
}

/* Row h (0 <= h < OH) of the gradient that reaches a convolution through a
 * fused ReLU and 2x2 max pooling (d->pool), width (>= OW) floats into buf:
 * the pooled gradient gp at its window's max (arg: 0 to 3, row-major) where
 * the pooled output op is > 0, zeros elsewhere and past OW. gp, op, arg:
 * one output channel's (OH/2, OW/2) planes. What max_pool2d's and relu's
 * backward give, value for value. */
static void pooled_grad_row(float *buf, int64_t width, int64_t h, const float *gp, const float *op,
                                             const uint8_t *arg, const ut_conv2d_shape *d) {
    int64_t PH = d->OH / 2, PW = d->OW / 2, pi = h / 2, ai = 2 * (h % 2), j0 = 0;
    if (pi < PH) {
        const float *g = gp + pi * PW, *o = op + pi * PW;
        const uint8_t *a = arg + pi * PW;
#pragma omp simd
        for (int64_t pj = 0; pj < PW; pj++) {
            float v = o[pj] > 0.0f ? g[pj] : 0.0f;
            buf[2 * pj] = a[pj] == ai ? v : 0.0f;
            buf[2 * pj + 1] = a[pj] == ai + 1 ? v : 0.0f;
        }
        j0 = 2 * PW;
    }
    for (int64_t j = j0; j < width; j++) buf[j] = 0.0f;
}

/* The 2x2 max of a, b (the window's top row) and c, e (its bottom row), and
 * its place, by max_pool2d's rule: the first element starts the max, a
 * later one takes it when greater or NaN (pool.c). */
static inline float max4(float a, float b, float c, float e, uint8_t *at) {
    float m = a;
    int i = 0;
    bool t = (b > m) | (b != b); /* | and ?: rather than || and if: the loops over windows vectorise */
    m = t ? b : m, i = t ? 1 : i;
    t = (c > m) | (c != c);
    m = t ? c : m, i = t ? 2 : i;
    t = (e > m) | (e != e);
    m = t ? e : m, i = t ? 3 : i;
    *at = (uint8_t)i;
    return m;
}

/* out, arg (B, OC, OH/2, OW/2) = 2x2 max pooling of relu(conv): each
 * image's convolution into the thread's buffer, clamped, then pooled. */
void ut_conv2d_forward_pool_cpu(float *out, uint8_t *arg, float *cols, const float *x, const float *w,
                                const float *b, const ut_conv2d_shape *d, int nthr) {
    int64_t K = d->C * d->KH * d->KW, OHW = d->OH * d->OW, PH = d->OH / 2, PW = d->OW / 2;
#pragma omp parallel num_threads(nthr)
    {
        float *col = cols + (int64_t)omp_get_thread_num() * (int64_t)ut_conv2d_cols_floats(d), *o = col + 2 * K * OHW;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < d->B; n++) {
            im2col(col, x + n * d->C * d->H * d->W, d);
            if (b)
                for (int64_t oc = 0; oc < d->OC; oc++)
                    for (int64_t p = 0; p < OHW; p++) o[oc * OHW + p] = b[oc];
            ut_gemm(false, false, d->OC, OHW, K, 1.0f, w, col, b ? 1.0f : 0.0f, o);
            for (int64_t oc = 0; oc < d->OC; oc++)
                for (int64_t pi = 0; pi < PH; pi++) {
                    const float *r0 = o + oc * OHW + 2 * pi * d->OW, *r1 = r0 + d->OW;
                    float *po = out + ((n * d->OC + oc) * PH + pi) * PW;
                    uint8_t *pa = arg + ((n * d->OC + oc) * PH + pi) * PW;
#pragma omp simd
                    for (int64_t pj = 0; pj < PW; pj++) {
                        float a = r0[2 * pj], bb = r0[2 * pj + 1], c = r1[2 * pj], e = r1[2 * pj + 1];
                        a = a > 0.0f ? a : 0.0f, bb = bb > 0.0f ? bb : 0.0f;
                        c = c > 0.0f ? c : 0.0f, e = e > 0.0f ? e : 0.0f;
                        po[pj] = max4(a, bb, c, e, &pa[pj]);
                    }
                }
        }
    }
}

/* dout where out > 0, else 0: the gradient through a fused ReLU (g: n floats) */
static inline float relu_grad(float g, float out) { return out > 0.0f ? g : 0.0f; }

/* per thread: im2col's columns, their gradient, and with a fused ReLU an
 * image's masked dout (or, pooling, its convolution) */
size_t ut_conv2d_cols_floats(const ut_conv2d_shape *d) {
    size_t col = (size_t)(d->C * d->KH * d->KW * d->OH * d->OW);
    return 2 * col + (d->relu ? (size_t)(d->OC * d->OH * d->OW) : 0);
}

/* image n's gradient at the convolution's output (OC, OH, OW) into g, from
 * the pooled gradient, output and places of a fused ReLU and pooling */
static void unpool_grad(float *g, const float *dout, const float *out, const uint8_t *arg, int64_t n,
                        const ut_conv2d_shape *d) {
    int64_t PHW = (d->OH / 2) * (d->OW / 2);
    for (int64_t oc = 0; oc < d->OC; oc++) {
        int64_t p = (n * d->OC + oc) * PHW;
        for (int64_t h = 0; h < d->OH; h++)
            pooled_grad_row(g + (oc * d->OH + h) * d->OW, d->OW, h, dout + p, out + p, arg + p, d);
    }
}

/* dx (B, C, H, W) += col2im(w^T @ dout[b]); dw (OC, C*KH*KW) += sum_b dout[b] @ im2col(x[b])^T;
 * db (OC) += sum over b and pixels of dout. dx, dw, db may be NULL. Runs on nthr threads.
 * cols: nthr buffers of ut_conv2d_cols_floats; dw_part: UT_CONV_DW_CHUNKS * OC*C*KH*KW.
 * With d->relu, dout is masked by out > 0 as it is read (an image at a time);
 * with d->pool, dout, out and arg are the pooled ones (unpool_grad). */
void ut_conv2d_backward_cpu(float *dx, float *dw, float *db, float *cols, float *dw_part,
                            const float *dout, const float *out, const uint8_t *arg, const float *x,
                            const float *w, const ut_conv2d_shape *d, int nthr) {
    int64_t K = d->C * d->KH * d->KW, OHW = d->OH * d->OW, NW = d->OC * K;
    int64_t nch = d->B < UT_CONV_DW_CHUNKS ? d->B : UT_CONV_DW_CHUNKS;
    if (dx || dw) {
#pragma omp parallel num_threads(nthr)
        {
            float *col = cols + (int64_t)omp_get_thread_num() * (int64_t)ut_conv2d_cols_floats(d), *dcol = col + K * OHW;
            float *masked = dcol + K * OHW;
#pragma omp for schedule(static)
            for (int64_t ch = 0; ch < nch; ch++) {
                float *pw = dw ? dw_part + ch * NW : NULL;
                for (int64_t n = ch * d->B / nch; n < (ch + 1) * d->B / nch; n++) {
                    const float *g = dout + n * d->OC * OHW;
                    if (d->pool) {
                        unpool_grad(masked, dout, out, arg, n, d);
                        g = masked;
                    } else if (d->relu) {
                        const float *o = out + n * d->OC * OHW;
#pragma omp simd
                        for (int64_t i = 0; i < d->OC * OHW; i++) masked[i] = relu_grad(g[i], o[i]);
                        g = masked;
                    }
                    if (dw) {
                        bool first = n == ch * d->B / nch;
                        im2col(col, x + n * d->C * d->H * d->W, d);
                        ut_gemm(false, true, d->OC, K, OHW, 1.0f, g, col, first ? 0.0f : 1.0f, pw);
                    }
                    if (dx) {
                        ut_gemm(true, false, K, OHW, d->OC, 1.0f, w, g, 0.0f, dcol);
                        col2im_add(dx + n * d->C * d->H * d->W, dcol, d);
                    }
                }
            }
        }
    }
    if (dw) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < NW; i++) {
            float s = 0.0f;
            for (int64_t ch = 0; ch < nch; ch++) s += dw_part[ch * NW + i];
            dw[i] += s;
        }
    }
    if (db) { /* with a fused ReLU dout counts where out > 0; pooled, each window's share once */
        int64_t plane = d->pool ? (d->OH / 2) * (d->OW / 2) : OHW;
#pragma omp parallel for schedule(static)
        for (int64_t oc = 0; oc < d->OC; oc++) {
            float acc[CONV_DB_LANES] = {0};
            for (int64_t n = 0; n < d->B; n++) {
                const float *g = dout + (n * d->OC + oc) * plane, *o = out ? out + (n * d->OC + oc) * plane : NULL;
                int64_t p = 0;
                for (; p + CONV_DB_LANES <= plane; p += CONV_DB_LANES)
                    for (int j = 0; j < CONV_DB_LANES; j++) acc[j] += o ? relu_grad(g[p + j], o[p + j]) : g[p + j];
                for (int j = 0; p + j < plane; j++) acc[j] += o ? relu_grad(g[p + j], o[p + j]) : g[p + j];
            }
            for (int w = CONV_DB_LANES / 2; w > 0; w /= 2)
                for (int j = 0; j < w; j++) acc[j] += acc[j + w];
            db[oc] += acc[0];
        }
    }
}

const char *ut_cpu_conv2d_path(int64_t C, int64_t OC, int64_t KH, int64_t KW, int64_t stride, int64_t padding,
                               int64_t OH, int64_t OW) {
    ut_conv2d_shape d = {.B = 1, .C = C, .OC = OC, .KH = KH, .KW = KW, .S = stride, .P = padding, .OH = OH, .OW = OW};
    return ut_winograd_applies(&d) ? "Winograd F(2x2, 3x3)" : "im2col + sgemm";
}

static ut_conv2d_shape shape_of(const ut_tensor *t) {
    const ut_tensor *x = t->src[0], *w = t->src[1];
    int64_t hw[2];
    ut_conv2d_out_hw(t, hw); /* the convolution's own size: t is pooled with fused_pool */
    return (ut_conv2d_shape){.B = x->ne[0], .C = x->ne[1], .H = x->ne[2], .W = x->ne[3],
                             .OC = w->ne[0], .KH = w->ne[2], .KW = w->ne[3],
                             .S = ut_conv2d_stride(t), .P = ut_conv2d_padding(t), .OH = hw[0], .OW = hw[1],
                             .relu = ut_conv2d_fused_relu(t) != 0, .pool = ut_conv2d_fused_pool(t) != 0};
}

/* Threads for n independent work items: no more than items, so that column
 * buffers (one per thread) are not allocated for idle threads. */
static int threads_for(int64_t n, const ut_kctx *k) {
    int m = ut_kthreads(k);
    return n < m ? (n > 0 ? (int)n : 1) : m;
}

void ut_conv2d_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_conv2d_shape d = shape_of(t);
    ut_tensor *b = t->src[2];
    const float *x = ut_f32(t->src[0]), *w = ut_f32(t->src[1]), *bias = b ? ut_f32(b) : NULL;
    uint8_t *arg = NULL;
    if (d.pool) {
        arg = ut_kalloc(k, (size_t)ut_nelem(t));
        ut_conv2d_set_pool_arg(t, arg);
    }
    if (ut_winograd_applies(&d)) {
        int nthr = threads_for(d.B, k);
        float *U = ut_kalloc(k, (size_t)(16 * d.OC * d.C) * sizeof(float));
        float *ws = ut_kalloc(k, (size_t)nthr * ut_winograd_thread_floats(&d) * sizeof(float));
        ut_winograd_forward(ut_f32(t), arg, U, ws, x, w, bias, &d, nthr);
        return;
    }
    int nthr = threads_for(d.B, k);
    float *cols = ut_kalloc(k, (size_t)nthr * ut_conv2d_cols_floats(&d) * sizeof(float));
    if (d.pool) ut_conv2d_forward_pool_cpu(ut_f32(t), arg, cols, x, w, bias, &d, nthr);
    else ut_conv2d_forward_cpu(ut_f32(t), cols, x, w, bias, &d, nthr);
}

void ut_conv2d_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    ut_conv2d_shape d = shape_of(t);
    float *dx = x->requires_grad ? x->grad : NULL, *dw = w->requires_grad ? w->grad : NULL;
    const float *out = d.relu ? ut_f32(t) : NULL;
    const uint8_t *arg = d.pool ? ut_conv2d_pool_arg(t) : NULL;
    bool db = b && b->requires_grad;
    size_t nw = (size_t)(d.OC * d.C * d.KH * d.KW);
    int nthr = threads_for(d.B < UT_CONV_DW_CHUNKS ? d.B : UT_CONV_DW_CHUNKS, k);
    float *cols = NULL, *dw_part = NULL;
    if ((dx || dw) && ut_winograd_applies(&d)) {
        float *U = ut_kalloc(k, (size_t)(16 * d.OC * d.C) * sizeof(float));
        float *ws = ut_kalloc(k, (size_t)nthr * ut_winograd_thread_floats(&d) * sizeof(float));
        float *dU = dw ? ut_kalloc(k, (size_t)(UT_CONV_DW_CHUNKS + 1) * 16 * (size_t)(d.OC * d.C) * sizeof(float)) : NULL;
        ut_winograd_backward(dx, dw, U, ws, dU, t->grad, out, arg, ut_f32(x), ut_f32(w), &d, nthr);
        dx = dw = NULL; /* done: the bias gradient below */
    }
    if (dx || dw) cols = ut_kalloc(k, (size_t)nthr * ut_conv2d_cols_floats(&d) * sizeof(float));
    if (dw) dw_part = ut_kalloc(k, UT_CONV_DW_CHUNKS * nw * sizeof(float));
    ut_conv2d_backward_cpu(dx, dw, db ? b->grad : NULL, cols, dw_part, t->grad, out, arg, ut_f32(x), ut_f32(w), &d,
                           nthr);
}
