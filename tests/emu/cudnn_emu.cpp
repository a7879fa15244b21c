/* cuDNN's convolution API on the CUDA emulator (declarations:
 * cudnn_emu.h), so that src/backend/cuda/cudnn.c runs there as it is:
 * descriptors, the algorithm lists and cudnn.c's choice among them, the
 * workspace, math types and its fallbacks.
 *
 * The arithmetic: plain loops in float32 with fused multiply-adds, each
 * output summed over (channel, kernel row, kernel column) in order; the
 * operands rounded to TF32 unless the math type is CUDNN_FMA_MATH (as a
 * GPU of compute capability 8.0 or later may do under the others); then
 * out = alpha sum + beta out, out not read when beta is 0.
 *
 * The algorithm lists imitate what cuDNN 9 reports, in its order: entries
 * that cudnn.c must pass over first (FFT and Winograd, which are not exact;
 * the backward passes' nondeterministic ALGO_0 and ALGO_3; DIRECT, which
 * cuDNN lists as not supported), then the implicit-GEMM family and the
 * deterministic ALGO_1, each with the workspace it needs.
 *
 * The contract checked on every call (a broken one returns the documented
 * status and says why on stderr): NCHW float descriptors with positive
 * sizes, paddings >= 0, strides and dilations >= 1, tensors whose shapes
 * agree with the convolution (the output size cudnnGetConvolution2d-
 * ForwardOutputDim gives), an algorithm the lists report as runnable for
 * the shape, and at least its workspace. */
#include "cudnn_emu.h"
#include "cuda_emu.h"

#include <stdarg.h>

#include <vector>

struct utemu_cudnn {
    cudaStream_t stream;
};
struct utemu_cudnn_tensor {
    bool set;
    int n, c, h, w;
};
struct utemu_cudnn_filter {
    bool set;
    int k, c, h, w;
};
struct utemu_cudnn_conv {
    bool set;
    int ph, pw, sh, sw, dh, dw;
    cudnnMathType_t math;
};

namespace {

cudnnStatus_t fail(cudnnStatus_t s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "utemu: cuDNN: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (status %d)\n", (int)s);
    va_end(ap);
    return s;
}

enum pass { FWD, BWD_DATA, BWD_FILTER };

/* the shapes agree: w's channels x's, y (n, k, OH, OW) what the convolution gives */
cudnnStatus_t check_shapes(const utemu_cudnn_tensor *x, const utemu_cudnn_filter *w, const utemu_cudnn_conv *cv,
                           const utemu_cudnn_tensor *y, const char *call) {
    if (!x || !w || !cv || !y || !x->set || !w->set || !cv->set || !y->set)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: a descriptor is NULL or was never set", call);
    int oh = (x->h + 2 * cv->ph - ((w->h - 1) * cv->dh + 1)) / cv->sh + 1;
    int ow = (x->w + 2 * cv->pw - ((w->w - 1) * cv->dw + 1)) / cv->sw + 1;
    if (w->c != x->c || y->n != x->n || y->c != w->k || y->h != oh || y->w != ow || oh < 1 || ow < 1)
        return fail(CUDNN_STATUS_BAD_PARAM,
                    "%s: x %dx%dx%dx%d, w %dx%dx%dx%d (pad %d,%d stride %d,%d dilation %d,%d) give y "
                    "%dx%dx%dx%d, not %dx%dx%dx%d",
                    call, x->n, x->c, x->h, x->w, w->k, w->c, w->h, w->w, cv->ph, cv->pw, cv->sh, cv->sw, cv->dh,
                    cv->dw, x->n, w->k, oh, ow, y->n, y->c, y->h, y->w);
    return CUDNN_STATUS_SUCCESS;
}

struct entry {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnDeterminism_t det;
};

/* a pass's list, in the order reported */
std::vector<entry> list(pass p, const utemu_cudnn_tensor *x, const utemu_cudnn_filter *w, const utemu_cudnn_conv *cv,
                        const utemu_cudnn_tensor *y) {
    bool wino = w->h == 3 && w->w == 3 && cv->sh == 1 && cv->sw == 1 && cv->dh == 1 && cv->dw == 1;
    bool unit = cv->sh == 1 && cv->sw == 1 && cv->dh == 1 && cv->dw == 1;
    size_t cols = (size_t)x->c * w->h * w->w * y->h * y->w * sizeof(float); /* one image's im2col */
    size_t fft = (size_t)(x->n + w->k) * x->c * (x->h + w->h) * (x->w + w->w) * 2 * sizeof(float);
    cudnnStatus_t ok = CUDNN_STATUS_SUCCESS, no = CUDNN_STATUS_NOT_SUPPORTED;
    const cudnnDeterminism_t D = CUDNN_DETERMINISTIC, N = CUDNN_NON_DETERMINISTIC;
    switch (p) {
    case FWD:
        return {{CUDNN_CONVOLUTION_FWD_ALGO_FFT, unit ? ok : no, fft, D},
                {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, wino ? ok : no, cols, D},
                {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, ok, (size_t)w->h * w->w * x->c * 8 + 256, D},
                {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, ok, 0, D},
                {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ok, cols, D},
                {CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, no, 0, D}};
    case BWD_DATA:
        return {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, ok, 0, N},
                {CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED, wino ? ok : no, cols, D},
                {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, ok, 0, D},
                {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, unit ? ok : no, fft, D}};
    case BWD_FILTER:
        return {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, ok, 0, N},
                {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, ok, cols, N},
                {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ok, (size_t)w->k * w->c * w->h * w->w * 4 + 512, D},
                {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, unit ? ok : no, fft, D}};
    }
    return {};
}

template <typename PERF>
cudnnStatus_t report(pass p, cudnnHandle_t h, const utemu_cudnn_tensor *x, const utemu_cudnn_filter *w,
                     const utemu_cudnn_conv *cv, const utemu_cudnn_tensor *y, int requested, int *returned,
                     PERF *perf, const char *call) {
    if (!h || !returned || !perf || requested < 1)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: a NULL handle or result, or no result requested", call);
    cudnnStatus_t s = check_shapes(x, w, cv, y, call);
    if (s) return s;
    std::vector<entry> l = list(p, x, w, cv, y);
    int n = 0;
    for (const entry &e : l) {
        if (n == requested) break;
        PERF r;
        memset(&r, 0, sizeof r);
        r.algo = (decltype(r.algo))e.algo;
        r.status = e.status;
        r.time = e.status ? -1.0f : 0.1f * (float)(n + 1);
        r.memory = e.memory;
        r.determinism = e.det;
        r.mathType = cv->math;
        perf[n++] = r;
    }
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

/* the checks of a pass's call: shapes, the algorithm runnable for them, its workspace */
cudnnStatus_t check_run(pass p, cudnnHandle_t h, const utemu_cudnn_tensor *x, const utemu_cudnn_filter *w,
                        const utemu_cudnn_conv *cv, const utemu_cudnn_tensor *y, int algo, const void *alpha,
                        const void *beta, const void *a, const void *b, const void *out, const void *ws,
                        size_t wsn, const char *call) {
    if (!h) return fail(CUDNN_STATUS_BAD_PARAM, "%s: no handle", call);
    if (!alpha || !beta || !a || !b || !out) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: a NULL pointer", call);
    cudnnStatus_t s = check_shapes(x, w, cv, y, call);
    if (s) return s;
    for (const entry &e : list(p, x, w, cv, y))
        if (e.algo == algo) {
            if (e.status) return e.status; /* not for this shape: a normal answer */
            if (e.memory && (!ws || wsn < e.memory))
                return fail(CUDNN_STATUS_BAD_PARAM, "%s: algorithm %d needs %zu bytes of workspace, %zu given at %p",
                            call, algo, e.memory, wsn, ws);
            return CUDNN_STATUS_SUCCESS;
        }
    return fail(CUDNN_STATUS_BAD_PARAM, "%s: algorithm %d is not one of this pass's", call, algo);
}

/* Every product of a convolution, in one order for all three passes:
 * f(x index, y index, w index) for each image n, output channel k, input
 * channel c, kernel tap (i, j) and output position (oh, ow) that reads
 * inside x. Each output element of each pass so receives its terms in the
 * same order: y over (c, i, j), x over (k, i, j), w over (n, oh, ow). */
template <typename F>
void taps(const utemu_cudnn_tensor &x, const utemu_cudnn_filter &w, const utemu_cudnn_conv &cv,
          const utemu_cudnn_tensor &y, F f) {
    for (int n = 0; n < y.n; n++)
        for (int k = 0; k < y.c; k++)
            for (int c = 0; c < x.c; c++)
                for (int i = 0; i < w.h; i++)
                    for (int j = 0; j < w.w; j++) {
                        size_t wi = (((size_t)k * w.c + c) * w.h + i) * w.w + j;
                        size_t xc = ((size_t)n * x.c + c) * x.h * x.w, yk = ((size_t)n * y.c + k) * y.h * y.w;
                        for (int oh = 0; oh < y.h; oh++) {
                            int ih = oh * cv.sh - cv.ph + i * cv.dh;
                            if (ih < 0 || ih >= x.h) continue;
                            for (int ow = 0; ow < y.w; ow++) {
                                int iw = ow * cv.sw - cv.pw + j * cv.dw;
                                if (iw >= 0 && iw < x.w)
                                    f(xc + (size_t)ih * x.w + iw, yk + (size_t)oh * y.w + ow, wi);
                            }
                        }
                    }
}

template <typename T>
cudnnStatus_t create(T **d) {
    if (!d) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    *d = new T{};
    return CUDNN_STATUS_SUCCESS;
}
template <typename T>
cudnnStatus_t destroy(T *d) {
    delete d;
    return CUDNN_STATUS_SUCCESS;
}
/* a tensor's or filter's four sizes: NCHW float32, each at least 1 */
template <typename T>
cudnnStatus_t set4d(T *d, cudnnTensorFormat_t f, cudnnDataType_t t, int a, int b, int c, int e, const char *what) {
    if (!d) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    if (f != CUDNN_TENSOR_NCHW || t != CUDNN_DATA_FLOAT)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "%s: only NCHW float32 is emulated", what);
    if (a < 1 || b < 1 || c < 1 || e < 1) return fail(CUDNN_STATUS_BAD_PARAM, "%s %dx%dx%dx%d", what, a, b, c, e);
    *d = T{true, a, b, c, e};
    return CUDNN_STATUS_SUCCESS;
}

std::vector<float> take(const float *p, size_t n, bool round) {
    std::vector<float> v(p, p + n);
    if (round)
        for (float &f : v) f = utemu_tf32(f);
    return v;
}

void finish(float *out, const std::vector<float> &acc, float alpha, float beta) {
    for (size_t i = 0; i < acc.size(); i++) out[i] = alpha * acc[i] + (beta != 0.0f ? beta * out[i] : 0.0f);
}

float scalar(const void *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* One pass: its output (y forward, x backward data, w backward filter) =
 * alpha (the products of the other two summed over the taps) + beta output;
 * the two inputs given, the third pointer NULL. */
cudnnStatus_t convolve(pass p, cudnnHandle_t h, const utemu_cudnn_tensor *xd, const utemu_cudnn_filter *wd,
                       const utemu_cudnn_conv *cv, const utemu_cudnn_tensor *yd, int algo, const void *alpha,
                       const void *beta, const void *xp, const void *wp, const void *yp, void *out, void *ws,
                       size_t wsn, const char *call) {
    const void *a = p == BWD_DATA ? wp : xp, *b = p == FWD ? wp : yp;
    cudnnStatus_t s = check_run(p, h, xd, wd, cv, yd, algo, alpha, beta, a, b, out, ws, wsn, call);
    if (s) return s;
    const utemu_cudnn_tensor &x = *xd, &y = *yd;
    const utemu_cudnn_filter &w = *wd;
    bool r = cv->math != CUDNN_FMA_MATH;
    size_t nx = (size_t)x.n * x.c * x.h * x.w, nw = (size_t)w.k * w.c * w.h * w.w, ny = (size_t)y.n * y.c * y.h * y.w;
    std::vector<float> X = p == BWD_DATA ? std::vector<float>() : take((const float *)xp, nx, r);
    std::vector<float> W = p == BWD_FILTER ? std::vector<float>() : take((const float *)wp, nw, r);
    std::vector<float> Y = p == FWD ? std::vector<float>() : take((const float *)yp, ny, r);
    std::vector<float> acc(p == FWD ? ny : p == BWD_DATA ? nx : nw, 0.0f);
    if (p == FWD) taps(x, w, *cv, y, [&](size_t xi, size_t yi, size_t wi) { acc[yi] = fmaf(W[wi], X[xi], acc[yi]); });
    else if (p == BWD_DATA)
        taps(x, w, *cv, y, [&](size_t xi, size_t yi, size_t wi) { acc[xi] = fmaf(W[wi], Y[yi], acc[xi]); });
    else taps(x, w, *cv, y, [&](size_t xi, size_t yi, size_t wi) { acc[wi] = fmaf(Y[yi], X[xi], acc[wi]); });
    finish((float *)out, acc, scalar(alpha), scalar(beta));
    return CUDNN_STATUS_SUCCESS;
}

} // namespace

extern "C" {

static size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
static const char *cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    default: return "CUDNN_STATUS (emulated: unknown)";
    }
}
static cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
    int n = 0;
    if (!h) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return CUDNN_STATUS_NOT_INITIALIZED;
    *h = new utemu_cudnn{nullptr};
    return CUDNN_STATUS_SUCCESS;
}
static cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}
static cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) { return create(d); }
static cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t,
                                                int n, int c, int h, int w) {
    return set4d(d, f, t, n, c, h, w, "tensor");
}
static cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return destroy(d); }
static cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) { return create(d); }
static cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f,
                                                int k, int c, int h, int w) {
    return set4d(d, f, t, k, c, h, w, "filter");
}
static cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return destroy(d); }
static cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
    cudnnStatus_t s = create(d);
    if (!s) (*d)->math = CUDNN_DEFAULT_MATH;
    return s;
}
static cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int u, int v,
                                                     int dh, int dw, cudnnConvolutionMode_t mode,
                                                     cudnnDataType_t t) {
    if (!d) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    if (ph < 0 || pw < 0 || u < 1 || v < 1 || dh < 1 || dw < 1)
        return fail(CUDNN_STATUS_BAD_PARAM, "convolution: pad %d,%d stride %d,%d dilation %d,%d", ph, pw, u, v, dh, dw);
    if (mode != CUDNN_CROSS_CORRELATION || t != CUDNN_DATA_FLOAT)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "convolution: only cross-correlation in float32 is emulated");
    cudnnMathType_t m = d->math;
    *d = utemu_cudnn_conv{true, ph, pw, u, v, dh, dw, m};
    return CUDNN_STATUS_SUCCESS;
}
static cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
    if (!d) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    if (m != CUDNN_DEFAULT_MATH && m != CUDNN_TENSOR_OP_MATH && m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
        m != CUDNN_FMA_MATH)
        return fail(CUDNN_STATUS_BAD_PARAM, "math type %d", (int)m);
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}
static cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) { return destroy(d); }

static cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                            cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t cv,
                                                            cudnnTensorDescriptor_t y, int req, int *ret,
                                                            cudnnConvolutionFwdAlgoPerf_t *perf) {
    return report(FWD, h, x, w, cv, y, req, ret, perf, "cudnnGetConvolutionForwardAlgorithm_v7");
}
static cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                                 cudnnTensorDescriptor_t dy,
                                                                 cudnnConvolutionDescriptor_t cv,
                                                                 cudnnTensorDescriptor_t dx, int req, int *ret,
                                                                 cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    return report(BWD_DATA, h, dx, w, cv, dy, req, ret, perf, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
}
static cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                                   cudnnTensorDescriptor_t dy,
                                                                   cudnnConvolutionDescriptor_t cv,
                                                                   cudnnFilterDescriptor_t dw, int req, int *ret,
                                                                   cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    return report(BWD_FILTER, h, x, dw, cv, dy, req, ret, perf, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
}

static cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                             const void *xp, cudnnFilterDescriptor_t wd, const void *wp,
                                             cudnnConvolutionDescriptor_t cv, cudnnConvolutionFwdAlgo_t algo, void *ws,
                                             size_t wsn, const void *beta, cudnnTensorDescriptor_t yd, void *yp) {
    return convolve(FWD, h, xd, wd, cv, yd, algo, alpha, beta, xp, wp, nullptr, yp, ws, wsn, "cudnnConvolutionForward");
}
static cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, cudnnFilterDescriptor_t wd,
                                                  const void *wp, cudnnTensorDescriptor_t dyd, const void *dyp,
                                                  cudnnConvolutionDescriptor_t cv, cudnnConvolutionBwdDataAlgo_t algo,
                                                  void *ws, size_t wsn, const void *beta, cudnnTensorDescriptor_t dxd,
                                                  void *dxp) {
    return convolve(BWD_DATA, h, dxd, wd, cv, dyd, algo, alpha, beta, nullptr, wp, dyp, dxp, ws, wsn,
                    "cudnnConvolutionBackwardData");
}
static cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                                    const void *xp, cudnnTensorDescriptor_t dyd, const void *dyp,
                                                    cudnnConvolutionDescriptor_t cv,
                                                    cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t wsn,
                                                    const void *beta, cudnnFilterDescriptor_t dwd, void *dwp) {
    return convolve(BWD_FILTER, h, xd, dwd, cv, dyd, algo, alpha, beta, xp, nullptr, dyp, dwp, ws, wsn,
                    "cudnnConvolutionBackwardFilter");
}

void *utemu_cudnn_symbol(const char *name) {
#define SYM(f) {#f, (void *)f}
    static const struct {
        const char *name;
        void *f;
    } table[] = {SYM(cudnnGetVersion),
                 SYM(cudnnGetErrorString),
                 SYM(cudnnCreate),
                 SYM(cudnnSetStream),
                 SYM(cudnnCreateTensorDescriptor),
                 SYM(cudnnSetTensor4dDescriptor),
                 SYM(cudnnDestroyTensorDescriptor),
                 SYM(cudnnCreateFilterDescriptor),
                 SYM(cudnnSetFilter4dDescriptor),
                 SYM(cudnnDestroyFilterDescriptor),
                 SYM(cudnnCreateConvolutionDescriptor),
                 SYM(cudnnSetConvolution2dDescriptor),
                 SYM(cudnnSetConvolutionMathType),
                 SYM(cudnnDestroyConvolutionDescriptor),
                 SYM(cudnnGetConvolutionForwardAlgorithm_v7),
                 SYM(cudnnGetConvolutionBackwardDataAlgorithm_v7),
                 SYM(cudnnGetConvolutionBackwardFilterAlgorithm_v7),
                 SYM(cudnnConvolutionForward),
                 SYM(cudnnConvolutionBackwardData),
                 SYM(cudnnConvolutionBackwardFilter)};
#undef SYM
    for (const auto &e : table)
        if (!strcmp(e.name, name)) return e.f;
    return nullptr;
}
}
