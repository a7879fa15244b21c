/* The CUDA backend's table: device memory (cudaMalloc), copies and memsets
 * on the one compute stream, conversions and flat-buffer math (flat.cu), the
 * op table (table.c), and whether this machine has a GPU at all.
 *
 * Ordering: every kernel, memset and copy of the process goes on one compute
 * stream, so they run in the order they were queued. A copy to host memory
 * waits for the stream before it returns (the host reads the result next); a
 * copy from host memory returns once the host buffer has been consumed. */
#include <pthread.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "vocab.h"
#include "embedding.h"
#include "flat.h"
#include "softmax.h"
#include "attention.h"
#include "flash_attention.h"

static cudaStream_t g_stream;

static void check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) ut_abort(__FILE__, __LINE__, "CUDA %s: %s", what, cudaGetErrorString(e));
}

/* Made once, whichever thread asks first (dp's workers may ask together). */
static void make_stream(void) { check(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "stream create"); }
static pthread_once_t g_stream_once = PTHREAD_ONCE_INIT;

void *ut_cuda_stream(void) {
    if (!g_stream) pthread_once(&g_stream_once, make_stream);
    return g_stream;
}

void ut_cuda_launched(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) ut_abort(__FILE__, __LINE__, "CUDA kernel %s: %s", what, cudaGetErrorString(e));
}

/* The environment switches the CUDA backend reads (docs/gpu.md) and the
 * values each takes (besides unset or empty: the default). A value it does
 * not know is refused before anything runs, rather than quietly ignored. */
static int switches_ok(char *err, size_t n) {
    static const struct {
        const char *var, *values[5];
    } sw[] = {
        {"UT_CUDA_ATTN", {"fp32", "wmma", "unfused", "cudnn", "mma"}},
        {"UT_CUDA_CONV", {"cudnn", "im2col"}},
        {"UT_CUDA_GEMM", {"cublas"}},
        {"UT_CUDA_LN_BWD", {"fused", "two"}},
        {"UT_CUDA_LT_FUSED", {"0", "1"}},
        {"UT_CUDA_LT_PAD", {"0", "1"}},
        {"UT_CUDA_TF32", {"0", "1"}},
    };
    for (size_t i = 0; i < sizeof sw / sizeof sw[0]; i++) {
        const char *e = getenv(sw[i].var);
        if (!e || !*e) continue;
        bool known = false;
        char list[96] = "";
        size_t used = 0;
        for (int j = 0; j < 5 && sw[i].values[j]; j++) {
            known = known || !strcmp(e, sw[i].values[j]);
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", j ? ", " : "", sw[i].values[j]);
        }
        if (!known) {
            snprintf(err, n, "%s=%.64s is not a value utrain knows (%s; unset it for the default: docs/gpu.md)",
                     sw[i].var, e, list);
            return -1;
        }
    }
    return 0;
}

static int available(char *err, size_t n) {
    if (switches_ok(err, n)) return -2;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(err, n, "no usable GPU on this machine (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the CUDA driver sees no device");
        cudaGetLastError(); /* clear the sticky error */
        return -1;
    }
    return 0;
}

static int device_count(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count;
}

static size_t device_memory(void) {
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return total;
}

static int g_device = -1; /* chosen by select_device; -1: the runtime's default, GPU 0 */

static int select_device(int index, char *err, size_t n) {
    if (available(err, n)) return -1;
    int count = 0, cur = -1;
    check(cudaGetDeviceCount(&count), "device count");
    if (index < 0 || index >= count) {
        if (count == 1) snprintf(err, n, "there is no GPU number %d on this machine (it has one: cuda:0)", index);
        else snprintf(err, n, "there is no GPU number %d on this machine (it has %d: cuda:0 to cuda:%d)", index, count, count - 1);
        return -1;
    }
    check(cudaGetDevice(&cur), "current device");
    if (cur == index) return 0;
    if (g_stream) {
        snprintf(err, n, "GPU %d already holds this process's work; a process uses one GPU", cur);
        return -1;
    }
    check(cudaSetDevice(index), "set device");
    g_device = index;
    return 0;
}

/* Calls from another host thread (the data loader's: page-locked buffers,
 * its wait on an upload's event) act on this process's GPU, not GPU 0, the
 * current device of a thread that never chose one. */
static void bind_thread(void) {
    if (g_device > 0) check(cudaSetDevice(g_device), "set device");
}

/* ---- data errors found by kernels ---- */
static int *g_err;

int *ut_cuda_error_flag(void) {
    if (!g_err) {
        check(cudaMalloc((void **)&g_err, sizeof(int)), "error flag");
        check(cudaMemsetAsync(g_err, 0, sizeof(int), ut_cuda_stream()), "error flag");
    }
    return g_err;
}

static const char *data_error_text(int code) {
    return code == UT_CUDA_ERR_EMBEDDING_INDEX ? "embedding: an index is outside the table's rows"
           : code == UT_CUDA_ERR_CROSS_ENTROPY_TARGET
               ? "cross_entropy: a target is outside [0, classes) and is not ignore_index"
           : code == UT_CUDA_ERR_NLL_LOSS_TARGET ? "nll_loss: a target is outside [0, classes) and is not ignore_index"
           : code == UT_CUDA_ERR_VOCAB_TARGET
               ? "vocab_partials / vocab_ce: a target is outside [0, vocab) and is not ignore_index"
           : code == UT_CUDA_ERR_VARLEN_OFFSETS
               ? "attention_varlen: the offsets break 0 = offsets[0] < offsets[1] < ... < offsets[S] = N"
               : "a kernel found bad data";
}

/* The flag's copy in page-locked memory, the event recorded after the copy
 * that fills it, and whether one is on its way: a look without waiting
 * (backward's end) reads the copy an earlier look queued once it has
 * landed, and queues the next, so the step goes on while the device
 * reports. */
static int *g_err_seen;
static cudaEvent_t g_err_ev;
static bool g_err_queued;

static void queue_flag_copy(cudaStream_t s) {
    if (!g_err_seen) {
        check(cudaHostAlloc((void **)&g_err_seen, sizeof(int), cudaHostAllocPortable), "error flag copy");
        check(cudaEventCreateWithFlags(&g_err_ev, cudaEventDisableTiming), "error flag event");
    }
    check(cudaMemcpyAsync(g_err_seen, g_err, sizeof(int), cudaMemcpyDeviceToHost, s), "error flag read");
    check(cudaEventRecord(g_err_ev, s), "error flag read");
    g_err_queued = true;
}

/* whether the queued copy has landed (then its value is in *code) */
static bool flag_copy_landed(int *code) {
    cudaError_t q = cudaEventQuery(g_err_ev);
    if (q == cudaErrorNotReady) return false;
    check(q, "error flag read");
    g_err_queued = false;
    *code = *g_err_seen;
    return true;
}

static int data_error(bool wait, char *err, size_t n) {
    if (!g_err) return 0; /* no kernel that checks data has run */
    cudaStream_t s = ut_cuda_stream();
    int code = 0;
    if (wait) {
        queue_flag_copy(s);
        check(cudaEventSynchronize(g_err_ev), "error flag read");
        flag_copy_landed(&code);
    } else {
        if (g_err_queued && !flag_copy_landed(&code)) return 0; /* an earlier look's copy is on its way */
        if (!code) { /* look again at what is queued by now; report it at once if it is in already */
            queue_flag_copy(s);
            if (!flag_copy_landed(&code)) return 0;
        }
    }
    if (!code) return 0;
    check(cudaMemsetAsync(g_err, 0, sizeof(int), s), "error flag clear");
    snprintf(err, n, "%s (found on the GPU; run on device cpu for its position)", data_error_text(code));
    return -1;
}

/* ---- memory ---- */
/* Device memory, for every allocation of the backend (the arenas, the
 * kernel files' scratch). Running out is the user's to fix (a batch too
 * large for the GPU), so it ends the run with exit status 1 and what to
 * change, not with an abort: the message says what was asked and for what,
 * what the GPU has free, and the settings that make a step smaller. */
void *ut_cuda_malloc(size_t bytes, const char *what) {
    void *p = NULL;
    if (!bytes) bytes = 64;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        size_t free_b = 0, total = 0;
        if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) (void)cudaGetLastError();
        char a[32], f[32], t[32];
        ut_fail_oom("device cuda:%d is out of memory: %s more asked (%s), %s of its %s free. Make a step "
                     "smaller: lower train.batch_size (train.gradient_accumulation_steps keeps the batch the "
                     "optimizer sees), or set train.checkpoint_activations: true, train.precision: bf16, or "
                     "dist.strategy: zero2 or zero3 over more GPUs; `utrain plan CONFIG --world-size N` gives the "
                     "memory each rank needs",
                     g_device < 0 ? 0 : g_device, ut_fmt_bytes((double)bytes, a, sizeof a), what,
                     ut_fmt_bytes((double)free_b, f, sizeof f), ut_fmt_bytes((double)total, t, sizeof t));
    }
    if (e != cudaSuccess)
        ut_abort(__FILE__, __LINE__, "CUDA: allocating %zu bytes of device memory (%s) failed: %s", bytes, what,
                 cudaGetErrorString(e));
    return p;
}

static void *alloc(size_t bytes) { return ut_cuda_malloc(bytes, "tensors and saved activations"); }

static void dfree(void *p) {
    if (!p) return;
    /* memory the stream may still use: let queued work finish first */
    check(cudaStreamSynchronize(ut_cuda_stream()), "synchronize before free");
    check(cudaFree(p), "free");
}

static void *host_alloc(size_t bytes) {
    void *p = NULL;
    bind_thread();
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 64, cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        char a[32];
        ut_fail_oom("cannot page-lock %s more of host memory (batches on their way to the GPU, gradients "
                     "and parameters staged for other ranks, ZeRO-Offload's optimizer state): the machine's "
                     "memory, or the locked-memory limit (ulimit -l), is too small for it; `utrain plan CONFIG "
                     "--world-size N` gives the host memory each rank needs",
                     ut_fmt_bytes((double)bytes, a, sizeof a));
    }
    if (e != cudaSuccess)
        ut_abort(__FILE__, __LINE__, "CUDA: cannot page-lock %zu bytes of host memory (%s)", bytes,
                 cudaGetErrorString(e));
    return p;
}

static void host_free(void *p) {
    if (!p) return;
    bind_thread();
    check(cudaStreamSynchronize(ut_cuda_stream()), "synchronize before free");
    check(cudaFreeHost(p), "free host");
}

static void dmemset(void *p, int v, size_t bytes) {
    if (bytes) check(cudaMemsetAsync(p, v, bytes, ut_cuda_stream()), "memset");
}

static void *pages_alloc(size_t bytes) {
    void *p = alloc(bytes);
    dmemset(p, 0, bytes);
    return p;
}

/* Zeroes the range; the memory stays allocated (returning pages for real
 * needs the virtual memory management API: docs/engine.md). */
static void pages_release(void *base, size_t off, size_t len) { dmemset((char *)base + off, 0, len); }
static void pages_free(void *p, size_t bytes) {
    (void)bytes;
    dfree(p);
}
static size_t pages_resident(const void *base, size_t bytes) {
    (void)base;
    return bytes;
}

static void copy(void *dst, const void *src, size_t bytes, ut_copy_kind kind) {
    if (!bytes) return;
    static const enum cudaMemcpyKind kinds[] = {cudaMemcpyHostToHost, cudaMemcpyHostToDevice,
                                                 cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
    cudaStream_t s = ut_cuda_stream();
    check(cudaMemcpyAsync(dst, src, bytes, kinds[kind], s), "copy");
    bool wait = kind == UT_COPY_D2H || kind == UT_COPY_H2H;
    if (kind == UT_COPY_H2D) { /* from page-locked memory the copy is not staged: wait for it */
        struct cudaPointerAttributes a;
        if (cudaPointerGetAttributes(&a, src) == cudaSuccess) wait = a.type == cudaMemoryTypeHost;
        else cudaGetLastError();
    }
    if (wait) check(cudaStreamSynchronize(s), "copy wait");
}

static cudaStream_t stream_or_compute(void *s) { return s ? (cudaStream_t)s : (cudaStream_t)ut_cuda_stream(); }
static void copy_async(void *dst, const void *src, size_t bytes, ut_copy_kind kind, void *stream) {
    static const enum cudaMemcpyKind kinds[] = {cudaMemcpyHostToHost, cudaMemcpyHostToDevice,
                                                 cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, kinds[kind], stream_or_compute(stream)), "async copy");
}
static void memset_async(void *p, int v, size_t bytes, void *stream) {
    if (bytes) check(cudaMemsetAsync(p, v, bytes, stream_or_compute(stream)), "async memset");
}

void ut_cuda_upload(void *dst, const void *host, size_t n) { copy(dst, host, n, UT_COPY_H2D); }

static void convert(void *dst, ut_dtype to, const void *src, ut_dtype from, int64_t n) {
    utk_convert(dst, (int)to, src, (int)from, n);
}
static void round16(float *dst, const float *src, int64_t n, ut_dtype dt) { utk_round(dst, src, n, (int)dt); }

static const char *matmul_path(ut_dtype dt) {
    return dt == UT_F16 ? "cuBLASLt fp16 tensor cores, float32 accumulation"
                        : "cuBLASLt bf16 tensor cores, float32 accumulation";
}

/* as the attention glue chooses (attention.c, attention_masked.c,
 * attention_varlen.c; UT_CUDA_ATTN: docs/gpu.md) */
static const char *attention_path(ut_dtype dt) {
    const char *e = getenv("UT_CUDA_ATTN");
    if (e && !strcmp(e, "unfused"))
        return "materialised (UT_CUDA_ATTN=unfused): the products through cuBLAS, the probabilities stored";
    if (dt == UT_F32 || (e && !strcmp(e, "fp32")))
        return "utrain's fused flash attention in float32 (heads up to 128; larger ones materialised)";
    if (e && !strcmp(e, "cudnn"))
        return "cuDNN's fused flash attention for causal self-attention (UT_CUDA_ATTN=cudnn); utrain's tensor-core "
               "kernels for masked and packed-sequence attention (heads of 64; others float32)";
    if (e && !strcmp(e, "wmma"))
        return "utrain's fused flash attention on the tensor cores, WMMA form (UT_CUDA_ATTN=wmma; heads of 64, "
               "others float32)";
    char why[256];
    if (!(e && !strcmp(e, "mma")) && ut_cuda_cudnn_attn_default(why, sizeof why))
        return "cuDNN's fused flash attention for causal self-attention in training and at the shapes trained on "
               "(heads a multiple of 8; UT_CUDA_ATTN=mma: utrain's kernels); utrain's fused flash attention on the "
               "tensor cores (mma.sync) for other shapes (generation), masked and packed-sequence attention (heads "
               "of 64; others float32)";
    return "utrain's fused flash attention on the tensor cores (mma.sync, 16-bit tensors as stored; heads of 64, "
           "others float32)";
}

/* ---- flat math ---- */
static double sum_sq(const float *x, int64_t n) { return utk_sum_sq(x, n); }
static void sum_sq_to(double *dst, const float *x, int64_t n) { utk_sum_sq_to(dst, x, n); }
static void scale(float *x, int64_t n, float s) { utk_scale(x, n, s); }
static void accumulate(float *dst, float *const *src, int nsrc, int64_t n, bool zero_src) {
    /* one pass per source, in source order: each element's sum is rounded as
     * the CPU's running sum is */
    for (int k = 0; k < nsrc; k++) utk_add_into(dst, src[k], n, zero_src);
}
/* One launch per run (a run is a stretch of parameters with one decay), and
 * one memset per gap when the gradients are zeroed, all on the compute
 * stream; the step's scalars and the 16-bit copies go to every launch. */
static void optim_step(const ut_optim_buffers *o, const ut_optim_consts *k, bool zero) {
    if (k->adafactor) { /* every parameter in six launches (adafactor.cu), then the gradients zeroed */
        static utk_af_param *ps; /* grown to the largest list seen (steps run on one thread) */
        static int cap;
        if (o->nsegs > cap) {
            ut_free(ps);
            ps = ut_malloc_check(sizeof *ps * (size_t)o->nsegs);
            cap = o->nsegs;
        }
        int n = 0;
        for (int i = 0; i < o->nsegs; i++) {
            const ut_param_seg *s = &o->segs[i];
            if (s->numel <= 0) continue;
            ps[n++] = (utk_af_param){
                .p = o->params + (s->offset - o->pbase), .g = o->grads + (s->offset - o->gbase),
                .st = o->state[0] + o->soff[i], .m = o->nstate > 1 ? o->state[1] + (s->offset - o->lo) : NULL,
                .p16 = o->p16 ? (void *)((uint16_t *)o->p16 + (s->offset - o->pbase)) : NULL,
                .numel = s->numel, .rows = s->rows, .cols = s->cols, .decay = s->decay};
        }
        utk_adafactor(ps, n, UT_ADAFACTOR_BLOCK, o->scalars, k->lr, k->eps, k->eps2, k->clip, k->rho, k->one_m_rho,
                      k->beta1, k->one_m_b1, k->wd, k->scale_parameter, (int)o->p16_dtype);
        if (zero) dmemset(o->grads + (o->lo - o->gbase), 0, (size_t)(o->hi - o->lo) * sizeof(float));
        return;
    }
    int64_t done = o->lo;
    int p16_dt = (int)o->p16_dtype;
    for (int r = 0; r < o->nruns; r++) {
        int64_t s = o->runs[r].begin, e = o->runs[r].end;
        if (zero && done < s) dmemset(o->grads + (done - o->gbase), 0, (size_t)(s - done) * sizeof(float));
        float *p = o->params + (s - o->pbase), *g = o->grads + (s - o->gbase);
        void *p16 = o->p16 ? (void *)((uint16_t *)o->p16 + (s - o->pbase)) : NULL;
        int64_t off = s - o->lo;
        bool decay = o->runs[r].decay;
        if (k->lion)
            utk_lion(p, g, o->state[0] + off, e - s, decay ? k->decay_mul : 1.0f, k->beta1, k->one_m_b1, k->beta2,
                     k->one_m_b2, k->lr, zero, o->scalars, p16, p16_dt);
        else if (k->adamw)
            utk_adamw(p, g, o->state[0] + off, o->state[1] + off, e - s, decay ? k->decay_mul : 1.0f, k->one_m_b1,
                      k->beta2, k->one_m_b2, k->step_size, k->inv_bc2_sqrt, k->eps, zero, o->scalars, p16, p16_dt);
        else
            utk_sgd(p, g, o->nstate ? o->state[0] + off : NULL, e - s, decay ? k->wd : 0.0f, k->lr, k->momentum,
                    k->one_m_damp, k->use_momentum, k->first, k->nesterov, zero, o->scalars, p16, p16_dt);
        done = e;
    }
    if (zero && done < o->hi) dmemset(o->grads + (done - o->gbase), 0, (size_t)(o->hi - done) * sizeof(float));
}

static void step_scalars(float *dst, const double *sq, double max_norm, float scale) {
    utk_step_scalars(dst, sq, max_norm, scale);
}

/* ---- streams: the process's compute stream, and streams of their own for
 * the other kinds (a communicator's) ---- */
static void *stream_new(ut_stream_kind kind) {
    if (kind == UT_STREAM_COMPUTE) return ut_cuda_stream();
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream create");
    return s;
}
static void stream_sync(void *s) { check(cudaStreamSynchronize(stream_or_compute(s)), "stream sync"); }
static void stream_free(void *s) {
    if (s && s != g_stream) check(cudaStreamDestroy((cudaStream_t)s), "stream destroy");
}
static void *event_new(void) {
    cudaEvent_t e;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event create");
    return e;
}
static void event_record(void *ev, void *s) { check(cudaEventRecord((cudaEvent_t)ev, stream_or_compute(s)), "event record"); }
static void event_wait(void *s, void *ev) {
    check(cudaStreamWaitEvent(stream_or_compute(s), (cudaEvent_t)ev, 0), "event wait");
}
static void event_sync(void *ev) {
    bind_thread();
    check(cudaEventSynchronize((cudaEvent_t)ev), "event sync");
}
static bool event_done(void *ev) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaErrorNotReady) return false;
    check(e, "event query");
    return true;
}
static void event_free(void *ev) { check(cudaEventDestroy((cudaEvent_t)ev), "event destroy"); }
static void *timer_new(void) {
    cudaEvent_t e;
    check(cudaEventCreate(&e), "timing event create");
    return e;
}
static double timer_ms(void *a, void *b) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return ms;
}

/* This process's GPU by its PCI bus id: ranks on one host with the same id
 * share a GPU (NCCL takes one GPU per rank). */
static int device_key(char *buf, size_t n) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(buf, (int)n, dev) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return 0;
}

#ifdef UT_WITH_NCCL
extern const ut_device_coll ut_cuda_nccl; /* nccl.c */
#define CUDA_COLL (&ut_cuda_nccl)
#else
#define CUDA_COLL NULL
#endif

const ut_backend ut_backend_cuda = {
    .name = "cuda",
    .device = UT_CUDA,
    .host_memory = false,
    .available = available,
    .select = select_device,
    .count = device_count,
    .memory = device_memory,
    .peak_flops = ut_cuda_peak_flops,
    .data_error = data_error,
    .host_alloc = host_alloc,
    .host_free = host_free,
    .alloc = alloc,
    .free = dfree,
    .pages_alloc = pages_alloc,
    .pages_release = pages_release,
    .pages_free = pages_free,
    .pages_resident = pages_resident,
    .memset = dmemset,
    .copy = copy,
    .convert = convert,
    .round = round16,
    .ops = ut_ops_cuda,
    .matmul_path = matmul_path,
    .attention_path = attention_path,
    .linear_gelu = true,
    .set_tf32 = ut_cuda_set_tf32,
    .sum_sq = sum_sq,
    .sum_sq_to = sum_sq_to,
    .scale = scale,
    .accumulate = accumulate,
    .optim_step = optim_step,
    .step_scalars = step_scalars,
    .stream_new = stream_new,
    .stream_sync = stream_sync,
    .stream_free = stream_free,
    .copy_async = copy_async,
    .memset_async = memset_async,
    .event_new = event_new,
    .event_record = event_record,
    .event_wait = event_wait,
    .event_sync = event_sync,
    .event_done = event_done,
    .event_free = event_free,
    .timer_new = timer_new,
    .timer_ms = timer_ms,
    .coll = CUDA_COLL,
    .device_key = device_key,
};
