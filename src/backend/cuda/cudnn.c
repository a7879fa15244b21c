/* cuDNN's convolutions for CONV2D on the GPU (cudnn_conv.h; conv.c calls
 * them and keeps its own im2col kernels for what cuDNN does not take).
 *
 * The library is opened at the first convolution (dlopen of libcudnn.so.9:
 * on the loader's path, else beside the cuDNN the build found), as NCCL is
 * (nccl.c): a build runs where it is missing, convolving with utrain's own
 * kernels, and a process that never convolves does not load it. Only the
 * header is needed to build (UT_WITH_CUDNN, set by the Makefile where it
 * finds cudnn.h). The calls are cuDNN's "legacy" convolution API (handle,
 * tensor / filter / convolution descriptors, cudnnConvolution*), which cuDNN
 * 9 keeps.
 *
 * One handle per process, on the compute stream. Each shape's descriptors
 * and chosen algorithm are kept (a small table, replaced in turn when full):
 * the algorithm is the first of cudnnGetConvolution*Algorithm_v7's list, in
 * its order of expected speed, that is deterministic, of the exact families
 * (cudnn_conv.h), and whose workspace fits WS_MAX; if cuDNN then refuses to
 * run it, the next one is tried. Workspace comes from the op's device arena
 * (ut_kalloc), so it lives as long as the step's other scratch. */
#include "utrain/base.h"
#include "cudnn_conv.h"
#include "cudnn_attn.h"
#include "cuda.h"
#include "dl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef UT_WITH_CUDNN

bool ut_cuda_cudnn_conv(ut_cudnn_pass pass, const ut_cuda_conv_shape *d, const float *a, const float *b, float *out,
                        float beta, const ut_kctx *k) {
    (void)pass, (void)d, (void)a, (void)b, (void)out, (void)beta;
    const char *e = getenv("UT_CUDA_CONV");
    if (!e || strcmp(e, "cudnn")) return false;
    /* the step stops with this; nothing is left for the caller to compute */
    ut_kfail(k, "UT_CUDA_CONV=cudnn, but this build has no cuDNN (its header was not found: install "
             "cuDNN 9 and rebuild, or unset UT_CUDA_CONV)");
    return true;
}

int ut_cuda_cudnn_probe(char *what, size_t wn, char *err, size_t n) {
    if (wn) what[0] = 0;
    snprintf(err, n, "built without cuDNN (`make CUDNN=0`, or cudnn.h was not found: `make nccl-info` says where the build looked)");
    return 1;
}

int ut_cuda_cudnn_lib(void **dl, void **h, char *err, size_t n) {
    *dl = NULL;
    if (h) *h = NULL;
    snprintf(err, n, "built without cuDNN (`make CUDNN=0`, or cudnn.h was not found: `make nccl-info` says where the build looked)");
    return -1;
}

#else

#include <cuda_runtime.h>
#include <cudnn.h>
#include <limits.h>
#include <pthread.h>

/* a pass's workspace is at most this (the algorithms that want more are passed over) */
#define WS_MAX ((size_t)256 << 20)
/* shapes whose descriptors and algorithm are kept */
#define NKEEP 32
/* algorithms a pass can list (the forward has the most: 8) */
#define NALGO 8

/* the functions utrain calls, looked up once */
static struct {
    size_t (*get_version)(void);
    const char *(*get_error_string)(cudnnStatus_t);
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*create_tensor)(cudnnTensorDescriptor_t *);
    cudnnStatus_t (*set_tensor4d)(cudnnTensorDescriptor_t, cudnnTensorFormat_t, cudnnDataType_t, int, int, int,
                                  int);
    cudnnStatus_t (*destroy_tensor)(cudnnTensorDescriptor_t);
    cudnnStatus_t (*create_filter)(cudnnFilterDescriptor_t *);
    cudnnStatus_t (*set_filter4d)(cudnnFilterDescriptor_t, cudnnDataType_t, cudnnTensorFormat_t, int, int, int,
                                  int);
    cudnnStatus_t (*destroy_filter)(cudnnFilterDescriptor_t);
    cudnnStatus_t (*create_conv)(cudnnConvolutionDescriptor_t *);
    cudnnStatus_t (*set_conv2d)(cudnnConvolutionDescriptor_t, int, int, int, int, int, int, cudnnConvolutionMode_t,
                                cudnnDataType_t);
    cudnnStatus_t (*set_math)(cudnnConvolutionDescriptor_t, cudnnMathType_t);
    cudnnStatus_t (*destroy_conv)(cudnnConvolutionDescriptor_t);
    cudnnStatus_t (*fwd_algos)(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t,
                               cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, int, int *,
                               cudnnConvolutionFwdAlgoPerf_t *);
    cudnnStatus_t (*bwd_data_algos)(cudnnHandle_t, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t,
                                    cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, int, int *,
                                    cudnnConvolutionBwdDataAlgoPerf_t *);
    cudnnStatus_t (*bwd_filter_algos)(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t,
                                      cudnnConvolutionDescriptor_t, cudnnFilterDescriptor_t, int, int *,
                                      cudnnConvolutionBwdFilterAlgoPerf_t *);
    cudnnStatus_t (*fwd)(cudnnHandle_t, const void *, cudnnTensorDescriptor_t, const void *, cudnnFilterDescriptor_t,
                         const void *, cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgo_t, void *, size_t,
                         const void *, cudnnTensorDescriptor_t, void *);
    cudnnStatus_t (*bwd_data)(cudnnHandle_t, const void *, cudnnFilterDescriptor_t, const void *,
                              cudnnTensorDescriptor_t, const void *, cudnnConvolutionDescriptor_t,
                              cudnnConvolutionBwdDataAlgo_t, void *, size_t, const void *, cudnnTensorDescriptor_t,
                              void *);
    cudnnStatus_t (*bwd_filter)(cudnnHandle_t, const void *, cudnnTensorDescriptor_t, const void *,
                                cudnnTensorDescriptor_t, const void *, cudnnConvolutionDescriptor_t,
                                cudnnConvolutionBwdFilterAlgo_t, void *, size_t, const void *,
                                cudnnFilterDescriptor_t, void *);
    size_t version;
    char err[384];
    int state; /* 0 not tried, 1 loaded, -1 failed (err says why) */
    bool absent; /* the failure is that there is no libcudnn.so.9 */
    cudnnHandle_t handle;
    int handle_state; /* 0 not made, 1 made, -1 failed (err says why) */
} dn;

/* A kept shape: its descriptors and, per pass, the chosen algorithm (-1:
 * not chosen yet, -2: none that cuDNN runs) and its workspace. */
typedef struct {
    bool used;
    ut_cuda_conv_shape d;
    cudnnMathType_t math;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int algo[3];
    size_t ws[3];
} keep;
static keep g_keep[NKEEP];
static int g_next; /* the entry replaced next when all are used */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

#ifdef UT_CUDA_EMU
#define EMU_SYMBOLS utemu_cudnn_symbol /* tests/emu/cudnn_emu.cpp */
#else
#define EMU_SYMBOLS NULL
#endif
#ifndef UT_CUDNN_LIBDIR
#define UT_CUDNN_LIBDIR NULL
#endif
static ut_cuda_lib g_lib;

static void *find(const char *sym) {
    void *f = ut_cuda_lib_find(&g_lib, EMU_SYMBOLS, sym);
    if (!f && !dn.err[0]) snprintf(dn.err, sizeof dn.err, "cuDNN: %s is missing from %s", sym, g_lib.name);
    return f;
}

/* UT_CUDNN_LIBRARY: the cuDNN library file to open (docs/gpu.md); else
 * libcudnn.so.9 from the loader's path, then beside the cuDNN the build found */
static void load_once(void) {
    if (ut_cuda_lib_open(&g_lib, "UT_CUDNN_LIBRARY", "libcudnn.so.9", UT_CUDNN_LIBDIR,
                         "install cuDNN 9 (Debian: libcudnn9-cuda-13 from NVIDIA's repository, or pip's nvidia-cudnn)",
                         dn.err, sizeof dn.err)) {
        dn.state = -1;
        dn.absent = true;
        return;
    }
    *(void **)&dn.get_version = find("cudnnGetVersion");
    *(void **)&dn.get_error_string = find("cudnnGetErrorString");
    *(void **)&dn.create = find("cudnnCreate");
    *(void **)&dn.set_stream = find("cudnnSetStream");
    *(void **)&dn.create_tensor = find("cudnnCreateTensorDescriptor");
    *(void **)&dn.set_tensor4d = find("cudnnSetTensor4dDescriptor");
    *(void **)&dn.destroy_tensor = find("cudnnDestroyTensorDescriptor");
    *(void **)&dn.create_filter = find("cudnnCreateFilterDescriptor");
    *(void **)&dn.set_filter4d = find("cudnnSetFilter4dDescriptor");
    *(void **)&dn.destroy_filter = find("cudnnDestroyFilterDescriptor");
    *(void **)&dn.create_conv = find("cudnnCreateConvolutionDescriptor");
    *(void **)&dn.set_conv2d = find("cudnnSetConvolution2dDescriptor");
    *(void **)&dn.set_math = find("cudnnSetConvolutionMathType");
    *(void **)&dn.destroy_conv = find("cudnnDestroyConvolutionDescriptor");
    *(void **)&dn.fwd_algos = find("cudnnGetConvolutionForwardAlgorithm_v7");
    *(void **)&dn.bwd_data_algos = find("cudnnGetConvolutionBackwardDataAlgorithm_v7");
    *(void **)&dn.bwd_filter_algos = find("cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    *(void **)&dn.fwd = find("cudnnConvolutionForward");
    *(void **)&dn.bwd_data = find("cudnnConvolutionBackwardData");
    *(void **)&dn.bwd_filter = find("cudnnConvolutionBackwardFilter");
    if (dn.err[0]) {
        dn.state = -1;
        return;
    }
    dn.version = dn.get_version();
    /* the build's header is 9.x; an older library has other ABI */
    if (dn.version < 90000) {
        snprintf(dn.err, sizeof dn.err, "cuDNN %zu.%zu is too old: utrain needs cuDNN 9", dn.version / 10000,
                 dn.version / 100 % 100);
        dn.state = -1;
        return;
    }
    dn.state = 1;
}

/* loads once; 0 when usable (err untouched), -1 with why */
static int load(char *err, size_t n) {
    if (dn.state == 0) load_once();
    if (dn.state < 0) snprintf(err, n, "%s", dn.err);
    return dn.state < 0 ? -1 : 0;
}

int ut_cuda_cudnn_probe(char *what, size_t wn, char *err, size_t n) {
    pthread_mutex_lock(&g_mu);
    int r = load(err, n);
    pthread_mutex_unlock(&g_mu);
    if (r) return dn.absent ? 1 : -1;
    if (wn) snprintf(what, wn, "cuDNN %zu.%zu.%zu", dn.version / 10000, dn.version / 100 % 100, dn.version % 100);
    return 0;
}

/* the handle, made on the first convolution, on the compute stream */
static int handle(char *err, size_t n) {
    if (load(err, n)) return -1;
    if (dn.handle_state == 0) {
        cudnnStatus_t s = dn.create(&dn.handle);
        if (s == CUDNN_STATUS_SUCCESS) s = dn.set_stream(dn.handle, (cudaStream_t)ut_cuda_stream());
        if (s != CUDNN_STATUS_SUCCESS) {
            snprintf(dn.err, sizeof dn.err, "cuDNN: making its handle failed: %s", dn.get_error_string(s));
            dn.handle_state = -1;
        } else {
            dn.handle_state = 1;
        }
    }
    if (dn.handle_state < 0) snprintf(err, n, "%s", dn.err);
    return dn.handle_state < 0 ? -1 : 0;
}

int ut_cuda_cudnn_lib(void **dl, void **h, char *err, size_t n) {
    pthread_mutex_lock(&g_mu);
    int r = h ? handle(err, n) : load(err, n);
    if (!r && g_lib.emulated) {
        snprintf(err, n, "the CUDA emulator's cuDNN has no graph API (fused attention)");
        r = -1;
    }
    *dl = r ? NULL : g_lib.handle;
    if (h) *h = r ? NULL : (void *)dn.handle;
    pthread_mutex_unlock(&g_mu);
    return r;
}

static bool fits_int(const ut_cuda_conv_shape *d) {
    int64_t dims[] = {d->B, d->C, d->H, d->W, d->OC, d->KH, d->KW, d->S, d->P, d->OH, d->OW};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i] < 0 || dims[i] > INT_MAX) return false;
    /* cuDNN's tensors address at most 2^31 - 1 elements */
    return d->B * d->C * d->H * d->W <= INT_MAX && d->B * d->OC * d->OH * d->OW <= INT_MAX &&
           d->OC * d->C * d->KH * d->KW <= INT_MAX;
}

static void keep_free(keep *e) {
    if (!e->used) return;
    if (e->x) dn.destroy_tensor(e->x);
    if (e->y) dn.destroy_tensor(e->y);
    if (e->w) dn.destroy_filter(e->w);
    if (e->conv) dn.destroy_conv(e->conv);
    memset(e, 0, sizeof *e);
}

/* the kept entry of shape d under math, made when new; NULL when cuDNN
 * refuses the descriptors (err says why) */
static keep *keep_of(const ut_cuda_conv_shape *d, cudnnMathType_t math, char *err, size_t n) {
    for (int i = 0; i < NKEEP; i++)
        if (g_keep[i].used && g_keep[i].math == math && !memcmp(&g_keep[i].d, d, sizeof *d)) return &g_keep[i];
    keep *e = &g_keep[g_next];
    g_next = (g_next + 1) % NKEEP;
    keep_free(e);
    e->used = true;
    e->d = *d;
    e->math = math;
    e->algo[0] = e->algo[1] = e->algo[2] = -1;
    cudnnStatus_t s = dn.create_tensor(&e->x);
    if (!s) s = dn.set_tensor4d(e->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)d->B, (int)d->C, (int)d->H, (int)d->W);
    if (!s) s = dn.create_tensor(&e->y);
    if (!s)
        s = dn.set_tensor4d(e->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)d->B, (int)d->OC, (int)d->OH, (int)d->OW);
    if (!s) s = dn.create_filter(&e->w);
    if (!s)
        s = dn.set_filter4d(e->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)d->OC, (int)d->C, (int)d->KH, (int)d->KW);
    if (!s) s = dn.create_conv(&e->conv);
    if (!s)
        s = dn.set_conv2d(e->conv, (int)d->P, (int)d->P, (int)d->S, (int)d->S, 1, 1, CUDNN_CROSS_CORRELATION,
                          CUDNN_DATA_FLOAT);
    if (!s) s = dn.set_math(e->conv, math);
    if (s) {
        snprintf(err, n, "cuDNN: describing the convolution failed: %s", dn.get_error_string(s));
        keep_free(e);
        return NULL;
    }
    return e;
}

/* the exact families (cudnn_conv.h) */
static bool exact_algo(ut_cudnn_pass pass, int algo) {
    switch (pass) {
    case UT_CUDNN_FWD:
        return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM || algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
    case UT_CUDNN_BWD_DATA: return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    case UT_CUDNN_BWD_FILTER: return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    }
    return false;
}

/* the candidates of a pass in cuDNN's order: algorithms and workspaces; their count */
static int candidates(ut_cudnn_pass pass, keep *e, int *algo, size_t *ws) {
    int got = 0, m = 0;
    cudnnStatus_t s;
    if (pass == UT_CUDNN_FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[NALGO];
        s = dn.fwd_algos(dn.handle, e->x, e->w, e->conv, e->y, NALGO, &got, p);
        for (int i = 0; !s && i < got; i++)
            if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].determinism == CUDNN_DETERMINISTIC &&
                p[i].memory <= WS_MAX && exact_algo(pass, p[i].algo))
                algo[m] = p[i].algo, ws[m++] = p[i].memory;
    } else if (pass == UT_CUDNN_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[NALGO];
        s = dn.bwd_data_algos(dn.handle, e->w, e->y, e->conv, e->x, NALGO, &got, p);
        for (int i = 0; !s && i < got; i++)
            if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].determinism == CUDNN_DETERMINISTIC &&
                p[i].memory <= WS_MAX && exact_algo(pass, p[i].algo))
                algo[m] = p[i].algo, ws[m++] = p[i].memory;
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[NALGO];
        s = dn.bwd_filter_algos(dn.handle, e->x, e->y, e->conv, e->w, NALGO, &got, p);
        for (int i = 0; !s && i < got; i++)
            if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].determinism == CUDNN_DETERMINISTIC &&
                p[i].memory <= WS_MAX && exact_algo(pass, p[i].algo))
                algo[m] = p[i].algo, ws[m++] = p[i].memory;
    }
    return s ? 0 : m;
}

static cudnnStatus_t run(ut_cudnn_pass pass, keep *e, int algo, const float *a, const float *b, float *out,
                         float beta, void *ws, size_t wsn) {
    const float one = 1.0f;
    switch (pass) {
    case UT_CUDNN_FWD:
        return dn.fwd(dn.handle, &one, e->x, a, e->w, b, e->conv, (cudnnConvolutionFwdAlgo_t)algo, ws, wsn, &beta,
                      e->y, out);
    case UT_CUDNN_BWD_DATA:
        return dn.bwd_data(dn.handle, &one, e->w, a, e->y, b, e->conv, (cudnnConvolutionBwdDataAlgo_t)algo, ws, wsn,
                           &beta, e->x, out);
    case UT_CUDNN_BWD_FILTER:
        return dn.bwd_filter(dn.handle, &one, e->x, a, e->y, b, e->conv, (cudnnConvolutionBwdFilterAlgo_t)algo, ws,
                             wsn, &beta, e->w, out);
    }
    return CUDNN_STATUS_BAD_PARAM;
}

/* UT_CUDA_CONV: 0 auto (cuDNN where it can), 1 cudnn (required), 2 im2col */
static int mode(void) {
    const char *e = getenv("UT_CUDA_CONV");
    return e && !strcmp(e, "cudnn") ? 1 : e && !strcmp(e, "im2col") ? 2 : 0;
}

/* once per process: why auto mode convolves without cuDNN */
static void say_once(const char *why) {
    static bool said;
    if (said) return;
    said = true;
    fprintf(stderr, "utrain: %s: convolving with utrain's own kernels (im2col and cuBLASLt)\n", why);
}

bool ut_cuda_cudnn_conv(ut_cudnn_pass pass, const ut_cuda_conv_shape *d, const float *a, const float *b, float *out,
                        float beta, const ut_kctx *k) {
    int m = mode();
    if (m == 2) return false;
    char err[512] = "";
    bool done = false;
    pthread_mutex_lock(&g_mu);
    if (!fits_int(d)) {
        snprintf(err, sizeof err, "cuDNN: a %lldx%lldx%lldx%lld convolution is past cuDNN's int sizes",
                 (long long)d->B, (long long)d->C, (long long)d->H, (long long)d->W);
        goto out;
    }
    if (handle(err, sizeof err)) goto out;
    int rdt = ut_cuda_gemm_rounding();
    cudnnMathType_t math = ut_cuda_tf32() || rdt ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    keep *e = keep_of(d, math, err, sizeof err);
    if (!e) goto out;
    if (e->algo[pass] == -2) {
        snprintf(err, sizeof err, "cuDNN runs none of its deterministic, exact algorithms for this convolution");
        goto out;
    }
    int algo[NALGO];
    size_t ws[NALGO];
    int nc = 0;
    if (e->algo[pass] >= 0) {
        algo[0] = e->algo[pass], ws[0] = e->ws[pass];
        nc = 1;
    } else {
        nc = candidates(pass, e, algo, ws);
    }
    cudnnStatus_t s = CUDNN_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < nc && !done; i++) {
        void *w = ws[i] ? ut_kalloc(k, ws[i]) : NULL;
        s = run(pass, e, algo[i], a, b, out, beta, w, ws[i]);
        if (s == CUDNN_STATUS_SUCCESS) {
            e->algo[pass] = algo[i], e->ws[pass] = ws[i];
            done = true;
        }
    }
    if (!done) {
        if (e->algo[pass] < 0) e->algo[pass] = -2;
        snprintf(err, sizeof err, "cuDNN ran none of its deterministic, exact algorithms for a %lldx%lldx%lldx%lld "
                 "convolution (last: %s)", (long long)d->B, (long long)d->C, (long long)d->H, (long long)d->W,
                 dn.get_error_string(s));
    }
out:
    pthread_mutex_unlock(&g_mu);
    if (done) {
        ut_cuda_launched("cuDNN convolution");
        return true;
    }
    if (m == 1) {
        /* the step stops with this; nothing is left for the caller to compute */
        ut_kfail(k, "UT_CUDA_CONV=cudnn: %s (unset UT_CUDA_CONV to fall back to utrain's kernels)", err);
        return true;
    }
    say_once(err);
    return false;
}

#endif
