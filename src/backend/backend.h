/* The backend interface: what a device provides. One table per device, chosen
 * by the context's device (ut_backend_get); core, ops and the layers above
 * reach device memory and kernels only through it.
 * defines: ut_copy_kind, ut_kctx (ut_kalloc, ut_khost, ut_kfail, ut_kscratch*, ut_kround16), ut_op_fn, ut_op_vtable, ut_stream_kind, ut_optim_consts, ut_optim_run,
 *          ut_optim_buffers, ut_backend,
 *          ut_backend_get, ut_backend_check, ut_pages_* (page buffers), ut_stage (host staging). */
#ifndef UTRAIN_BACKEND_H
#define UTRAIN_BACKEND_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "utrain/base.h"
#include "utrain/optim.h"
#include "utrain/tensor.h"

typedef struct ut_kctx ut_kctx;

/* Direction of a copy: H = host memory, D = the backend's device memory. On
 * the CPU backend every kind is a memcpy. */
typedef enum { UT_COPY_H2H = 0, UT_COPY_H2D, UT_COPY_D2H, UT_COPY_D2D } ut_copy_kind;

/* What a kernel gets besides its op's tensors: the services of the context
 * the op runs in, so that no kernel reaches into t->ctx (the check
 * tools/check_kernel_ctx.sh holds src/backend to it). Core fills one per
 * context (src/core/ctx.c) and passes it to every kernel; the owner is
 * opaque to kernels.
 * Core makes one per launch (ut_op_run, backward) by value, so a backend
 * that runs kernels later (sim's worker thread) keeps a copy of what held at
 * launch:
 *   ut_kalloc(k, bytes)   device memory of the op's device (saved buffers,
 *                         scratch), 64-byte aligned, from the arena in use at
 *                         launch (k->arena), until that arena resets; safe to
 *                         call from a backend's own worker thread
 *   ut_khost(k, bytes)    host memory, the same lifetime
 *   ut_kfail(k, fmt, ...) a data error (an index out of range): the message
 *                         names the op; the step stops with it
 *   k->rng                this launch's own window of random draws (key,
 *                         stream, offset) for the ops marked UT_OPP_RANDOM:
 *                         a kernel draws from a copy of it (ut_philox g =
 *                         k->rng), so where its masks come from is fixed when
 *                         the op is launched, not when the kernel runs
 *   k->stream             the stream the op's work goes on (NULL: the
 *                         backend's compute stream)
 *   ut_kthreads(k)        the host threads a CPU kernel may use: the
 *                         launching thread's OpenMP thread count (a backend
 *                         that runs kernels on a thread of its own gives
 *                         that thread this count first, as sim does), for
 *                         sizing per-thread scratch
 *   ut_kscratch(k, bytes), ut_kscratch_release(k), ut_kround16(k, s, n, dt, bwd)
 *                         autocast's scratch and kept 16-bit parameter copies,
 *                         for kernels that do autocast themselves
 *                         (UT_KCAP_NATIVE_16, UT_KCAP_READS_16)
 *   ut_kfresh(k, i)       in a backward of an op marked UT_KCAP_FRESH_GRAD:
 *                         src[i]->grad was made for this backward and holds no
 *                         values yet (not even zeros): the kernel writes every
 *                         element of it rather than adding (ut_kbeta(k, i):
 *                         a product's beta, 0 or 1)
 *   ut_kpassed(k, i)      in a backward of an op marked UT_KCAP_PASS_GRAD:
 *                         src[i]->grad is t->grad itself, handed over by
 *                         core; the kernel leaves that source alone */
struct ut_kctx {
    void *owner;
    void *arena;    /* the device arena ut_kalloc takes from (opaque) */
    ut_philox rng;  /* this launch's draws */
    void *stream;
    int threads;
    void *(*dalloc)(const ut_kctx *k, size_t bytes);
    void *(*halloc)(const ut_kctx *k, size_t bytes);
    void (*fail)(const ut_kctx *k, const char *msg);
    float *(*scratch)(const ut_kctx *k, size_t bytes);
    void (*scratch_release)(const ut_kctx *k);
    const void *(*round16)(const ut_kctx *k, const ut_tensor *s, int64_t n, ut_dtype dt, bool backward);
    unsigned fresh; /* backward: bit i set when src[i]->grad is to be written, not added to */
    unsigned passed; /* backward: bit i set when src[i]->grad is t->grad (UT_KCAP_PASS_GRAD) */
};
static inline void *ut_kalloc(const ut_kctx *k, size_t bytes) { return k->dalloc(k, bytes); }
static inline void *ut_khost(const ut_kctx *k, size_t bytes) { return k->halloc(k, bytes); }
static inline int ut_kthreads(const ut_kctx *k) { return k->threads > 0 ? k->threads : 1; }
static inline float *ut_kscratch(const ut_kctx *k, size_t bytes) { return k->scratch(k, bytes); }
static inline void ut_kscratch_release(const ut_kctx *k) { k->scratch_release(k); }
static inline const void *ut_kround16(const ut_kctx *k, const ut_tensor *s, int64_t n, ut_dtype dt, bool backward) {
    return k->round16(k, s, n, dt, backward);
}
static inline bool ut_kfresh(const ut_kctx *k, int i) { return (k->fresh >> i) & 1u; }
static inline float ut_kbeta(const ut_kctx *k, int i) { return ut_kfresh(k, i) ? 0.0f : 1.0f; }
static inline bool ut_kpassed(const ut_kctx *k, int i) { return (k->passed >> i) & 1u; }
/* For a kernel that can only add into some of its sources' gradients (bit i
 * of srcs: src[i]): those of them that are fresh zeroed with its backend's
 * memset, so adding into them is right. */
static inline void ut_kzero_fresh(const ut_kctx *k, ut_tensor *t, unsigned srcs,
                                  void (*zero)(void *p, int v, size_t bytes)) {
    for (int i = 0; i < UT_MAX_SRC; i++)
        if ((srcs >> i) & 1u && ut_kfresh(k, i) && t->src[i] && t->src[i]->grad)
            zero(t->src[i]->grad, 0, (size_t)ut_nelem(t->src[i]) * (ut_dtype_is16(t->src[i]->dtype) ? 2 : sizeof(float)));
}
void ut_kfail(const ut_kctx *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An op's kernels on one device. forward computes t's data from t->src;
 * backward ADDS into src[i]->grad from t->grad (UT_OPP_OWNS_SRC0_GRAD in
 * src/core/internal.h is the one exception). NULL: nothing to do. caps says
 * what the kernels do with 16-bit data themselves (0: nothing; every op
 * under autocast then gets float32 copies, src/core/autocast.c):
 *   UT_KCAP_READS_16   reads a 16-bit src[0] and writes its 16-bit gradient
 *                      (the CPU's cross-entropy)
 *   UT_KCAP_WRITES_16  writes its 16-bit output and reads that output's
 *                      16-bit gradient (the CPU's linear, a block of rows at
 *                      a time)
 *   UT_KCAP_NATIVE_16  takes every tensor of its op in its storage dtype and
 *                      rounds float32 sources to t->autocast itself; core
 *                      converts nothing around it. It may take
 *                      ut_autocast_scratch and then must call
 *                      ut_autocast_release before it returns (CUDA's linear)
 * and what its backward does with gradients that hold nothing yet:
 *   UT_KCAP_FRESH_GRAD backward honours k->fresh (ut_kfresh): a source's
 *                      gradient that no op has written yet is handed over
 *                      unzeroed, and the kernel writes it whole (zeroing it
 *                      first itself where it can only add, e.g. a broadcast
 *                      operand's sum). Core then skips the memset and the
 *                      kernel the read of zeros: two passes over every such
 *                      gradient (src/core/autograd.c). An op without it gets
 *                      zeroed gradients and adds, as before.
 *   UT_KCAP_PASS_GRAD  (with UT_KCAP_FRESH_GRAD) the op's gradient for a
 *                      source of its own shape and dtype is its own
 *                      gradient, unchanged (add): where such a source's
 *                      gradient would be fresh, core makes it t->grad
 *                      itself, for one source at most (two sharing one
 *                      buffer would add into each other), and sets bit i
 *                      of k->passed (ut_kpassed); the kernel skips it.
 *                      t's gradient is final when t's backward runs and
 *                      nothing reads it afterwards, so the buffer moves on
 *                      instead of being copied (src/core/autograd.c). */
typedef void (*ut_op_fn)(ut_tensor *t, const ut_kctx *k);
/* A kernel's context parameter, named k, in its definition:
 *   void ut_relu_fwd_cpu(ut_tensor *t, UT_KCTX) { ... }
 * (kernels that need nothing of it leave it unused without a warning) */
#define UT_KCTX const ut_kctx *k __attribute__((unused))
enum {
    UT_KCAP_READS_16 = 1 << 0,
    UT_KCAP_WRITES_16 = 1 << 1,
    UT_KCAP_NATIVE_16 = 1 << 2,
    UT_KCAP_FRESH_GRAD = 1 << 3,
    UT_KCAP_PASS_GRAD = 1 << 4,
};
typedef struct {
    ut_op_fn forward;
    ut_op_fn backward;
    unsigned caps;
} ut_op_vtable;

/* Streams: the compute stream ops run on, and the communication stream that
 * collectives overlap on. */
typedef enum { UT_STREAM_COMPUTE = 0, UT_STREAM_COMM } ut_stream_kind;

/* One optimizer step's scalars, computed by src/optim and rounded to float
 * the way torch hands its Python scalars to float kernels. */
typedef struct {
    bool adamw, lion, adafactor;
    float decay_mul;        /* AdamW, Lion: 1 - lr*wd */
    float one_m_b1, beta2, one_m_b2, step_size, inv_bc2_sqrt, eps;
    float beta1;            /* Lion; Adafactor (0: no first moment) */
    /* Adafactor: rho = 1 - t^decay_rate and 1 - rho, eps (eps1), eps2, the
     * clip threshold, the weight decay, and lr (above) */
    float rho, one_m_rho, eps2, clip;
    bool scale_parameter;
    float lr, wd;           /* SGD */
    float momentum, one_m_damp;
    bool use_momentum, first, nesterov;
} ut_optim_consts;

/* One optimizer step's buffers (device memory) and runs: element i of the
 * optimizer's range [lo, hi) is params[i - pbase], grads[i - gbase] and
 * state[k][i - lo]; runs (in order, inside [lo, hi)) are the stretches that
 * hold parameters, each with or without weight decay. The gaps between them
 * are padding: nothing is updated there, and with zero their gradients are
 * zeroed too. */
typedef struct {
    int64_t begin, end;
    bool decay;
} ut_optim_run;
typedef struct {
    float *params, *grads, *state[2];
    int64_t pbase, gbase, lo, hi;
    const ut_optim_run *runs;
    int nruns;
    int nstate;
    /* The step's device scalars (NULL: none), written on the device by
     * step_scalars: every gradient is read as g[i] * scalars[0] (unscaling
     * and clipping; g itself is left as it was, or zeroed), and scalars[1]
     * nonzero skips the update (parameters and state stay; with zero the
     * gradients are still zeroed). So the step launches before the host has
     * read the norm. */
    const float *scalars;
    /* 16-bit copies of the parameters (NULL: none): p16[i - pbase] =
     * params[i - pbase] rounded to p16_dtype (nearest even), written in the
     * same pass, skipped step or not, for autocast's products to read
     * (ut_ctx_set_param_copies). */
    void *p16;
    ut_dtype p16_dtype;
    /* Adafactor: the parameters in [lo, hi) (whole), where each one's
     * second moment starts in state[0] (soff), and scratch in the
     * device's memory for one parameter's per-row sums at a time
     * (ut_optim_adafactor_scratch doubles: the CPU's; the CUDA backend,
     * which steps every parameter at once, keeps its own) */
    const ut_param_seg *segs;
    const int64_t *soff;
    int nsegs;
    double *scratch;
} ut_optim_buffers;

/* Adafactor sums a vector's elements in blocks of this many (its rows). */
#define UT_ADAFACTOR_BLOCK 4096
/* Doubles of scratch Adafactor's step over s takes: a sum per row (or per
 * block of a vector) twice, one per column, and a few scalars. */
static inline int64_t ut_optim_adafactor_scratch(const ut_param_seg *s) {
    if (s->rows > 0 && s->cols > 0) {
        int64_t lead = s->numel / (s->rows * s->cols);
        return 2 * lead * (s->rows + s->cols) + 4;
    }
    return 2 * (s->numel / UT_ADAFACTOR_BLOCK + 1) + 4;
}

/* Collectives on a device's own memory and streams, by the device's
 * communication library (NCCL on CUDA), loaded when first asked for. A
 * group's communicator is made on every rank from the id rank 0 made (the
 * caller passes it over the host communicator); its operations are queued
 * on a stream and read and write device memory when that stream reaches
 * them. Reduction ops: 0 sum, 1 max, 2 average (ut_reduce_op's order). */
typedef struct ut_device_coll {
    size_t id_bytes;
    /* 0 when the library is there (its name and version into what: "NCCL
     * 2.28.3"); else -1 with the reason in err */
    int (*load)(char *what, size_t wn, char *err, size_t n);
    int (*make_id)(void *id, char *err, size_t n);
    /* collective over the size ranks; NULL with the library's message */
    void *(*comm_new)(const void *id, int rank, int size, char *err, size_t n);
    /* buf[0, n) of dt (F32, BF16, F16) combined over the ranks in place */
    int (*allreduce)(void *g, void *buf, int64_t n, ut_dtype dt, int op, void *stream, char *err, size_t en);
    /* The ZeRO strategies' uneven forms over consecutive per-rank parts
     * (counts[r] float32 elements of rank r, of size ranks):
     * reduce_scatterv: out[0, counts[rank]) = the sum over ranks of
     * rank's part of in; allgatherv: every rank's part of buf from that
     * rank, in place */
    int (*reduce_scatterv)(void *g, const float *in, float *out, const int64_t *counts, int size, void *stream,
                           char *err, size_t en);
    int (*allgatherv)(void *g, float *buf, const int64_t *counts, int size, void *stream, char *err, size_t en);
    /* a failure found after the operation was queued: -1 with the message */
    int (*status)(void *g, char *err, size_t n);
    void (*comm_free)(void *g);
} ut_device_coll;

/* The products a peak rate is for: float32 on the CUDA cores, TF32 on the
 * tensor cores, bf16/fp16 with float32 accumulation on the tensor cores. */
typedef enum { UT_PEAK_FP32, UT_PEAK_TF32, UT_PEAK_16 } ut_peak_kind;

typedef struct ut_backend {
    const char *name;
    ut_device device;
    /* true when the device's memory is host memory (the CPU): host code that
     * must see device contents (the communicator, parameter initialisation,
     * checkpoint files) uses device pointers in place; false: it stages
     * through host buffers (ut_stage_begin / ut_stage_end). */
    bool host_memory;
    /* 0 when this machine can run the backend; else -1 with the reason in
     * err (no GPU, no driver), or -2 when the backend's own settings are
     * wrong (an environment switch with a value it does not know: err
     * names it). NULL: always available. */
    int (*available)(char *err, size_t n);
    /* Makes this machine's device number index (of several GPUs, say) the
     * one this process's memory and work go to; before the first
     * allocation. 0, or -1 with the reason in err (no such device). NULL:
     * the backend has one device. */
    int (*select)(int index, char *err, size_t n);
    /* How many such devices this machine has (0: none usable). NULL: one. */
    int (*count)(void);
    /* The selected device's memory in bytes (what `utrain plan` checks
     * against). NULL: host memory (the CPU). */
    size_t (*memory)(void);
    /* The selected device's dense peak rate in FLOP/s for products of kind
     * (ut_peak_kind), the denominator of the trainer's MFU, and in what
     * (n bytes) the device and where the figure comes from ("NVIDIA H100
     * 80GB HBM3: NVIDIA's published bf16/fp16 dense peak"); 0 when not known
     * (what then says why). NULL: not known (the CPU: its clock and vector
     * units vary too much to guess; train.peak_tflops gives it). */
    double (*peak_flops)(int kind, char *what, size_t n);

    /* Data errors kernels found since the last call (an index out of range),
     * on a device whose kernels cannot stop the host when they find one:
     * -1 with a message naming the op, or 0. wait: after the queued work
     * (core asks so at every host read of results, ut_tensor_get and
     * ut_ctx_device_check); !wait: without waiting, what the device has
     * reported so far (an error not yet in is reported by a later call;
     * core asks so at backward's end, which must not stall the step). NULL:
     * kernels report data errors synchronously (the CPU). */
    int (*data_error)(bool wait, char *err, size_t n);

    /* Host memory the device copies to and from fastest (page-locked; CUDA's
     * cudaHostAlloc), for buffers that cross every step (ZeRO-Offload's).
     * NULL: ordinary host memory is as good (ut_aligned_alloc_check). */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);

    /* ---- memory: device memory is opaque to callers outside src/backend ---- */
    void *(*alloc)(size_t bytes);                 /* 64-byte aligned; aborts when out of memory */
    void (*free)(void *p);
    /* Whole pages of their own, zeroed: the flat parameter and gradient
     * buffers. pages_release zeroes bytes [off, off + len) of the buffer at
     * base and gives the whole pages inside back (they read as zeros). */
    void *(*pages_alloc)(size_t bytes);
    void (*pages_release)(void *base, size_t off, size_t len);
    void (*pages_free)(void *p, size_t bytes);
    /* bytes of the page mapping [base, base + bytes) that hold memory now
     * (ZeRO's memory accounting) */
    size_t (*pages_resident)(const void *base, size_t bytes);
    void (*memset)(void *p, int v, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes, ut_copy_kind kind);
    /* n elements of src (dtype from) into dst (dtype to), both device
     * memory; F32, BF16, F16 in any pair, rounding to nearest even. */
    void (*convert)(void *dst, ut_dtype to, const void *src, ut_dtype from, int64_t n);
    /* dst[i] = src[i] rounded to the nearest value of dt (BF16 or F16; F32
     * copies), kept as float32: the operands autocast hands to a matmul.
     * dst may equal src. */
    void (*round)(float *dst, const float *src, int64_t n, ut_dtype dt);

    /* ---- kernels: UT_OP_COUNT entries, generated from src/core/ops.def,
     * each with its 16-bit capabilities ---- */
    const ut_op_vtable *ops;
    /* What autocast's matrix products in dt (BF16, F16) run on, in a few
     * words for the run log ("oneDNN AMX", "fp32 sgemm on bf16-rounded
     * inputs (CPU has no bf16 instructions)"). */
    const char *(*matmul_path)(ut_dtype dt);
    /* What the attention ops run on under dt (F32, BF16, F16), for the run
     * log; NULL: not said. */
    const char *(*attention_path)(ut_dtype dt);
    /* Which algorithm a 2-D convolution of this shape runs on ("Winograd
     * F(2x2, 3x3)", "im2col + sgemm"), for `utrain plan`; NULL: not said. */
    const char *(*conv2d_path)(int64_t C, int64_t OC, int64_t KH, int64_t KW, int64_t stride, int64_t padding,
                               int64_t OH, int64_t OW);
    /* Its conv2d kernels apply a ReLU in the same pass (the fused_relu parameter
     * of src/ops/params.h, ut_conv2d_relu); false: ut_conv2d_relu is a
     * conv2d and a relu. */
    bool conv2d_relu;
    /* Its linear kernels apply the tanh-form GELU in the same op (the act
     * parameter and the saved pre-activation of src/ops/params.h,
     * ut_linear_gelu); false: ut_linear_gelu is a linear and a gelu. */
    bool linear_gelu;

    /* Float32 products (linear, matmul, convolutions) on the tensor cores in
     * TF32 (operands rounded to 10 mantissa bits, float32 accumulation), or
     * exact; for the whole process, as PyTorch's allow_tf32. NULL: the device
     * has no such mode. */
    void (*set_tf32)(bool on);

    /* ---- flat-buffer math (optimizers, clipping, dist) ---- */
    /* sum of x[i]^2 in double, the same bits whatever the thread count */
    double (*sum_sq)(const float *x, int64_t n);
    /* The same sum into device memory at dst, queued without a host wait:
     * read back later with other scalars of the step in one copy. NULL:
     * ut_sum_sq_to (below) takes sum_sq and copies the result there. */
    void (*sum_sq_to)(double *dst, const float *x, int64_t n);
    void (*scale)(float *x, int64_t n, float s);  /* x *= s */
    /* dst[i] += src[0][i] + ... + src[nsrc-1][i], added in that order (the
     * same bits whatever the thread count); zero_src: also src[k][i] = 0 */
    void (*accumulate)(float *dst, float *const *src, int nsrc, int64_t n, bool zero_src);
    /* One optimizer step over every run of b, as torch's single-tensor AdamW
     * (k->adamw; state exp_avg, exp_avg_sq), lion-pytorch's Lion (k->lion;
     * state exp_avg) or SGD (state: the momentum buffer, or none), with the run's weight decay (k->decay_mul, k->wd)
     * where its decay flag is set; zero: also store g[i] = 0 once read, in
     * the gaps too. One call per step: the backend splits the work (threads,
     * kernel launches) itself. */
    void (*optim_step)(const ut_optim_buffers *b, const ut_optim_consts *k, bool zero);
    /* The step's scalars on the device, from the gradient's square sum *sq
     * (of gradients multiplied by the loss scale `scale`; 1 without one):
     * dst[1] = 1 when sqrt(*sq) is inf or NaN (the step is skipped), else 0;
     * dst[0] = 1/scale, times max_norm / (norm + 1e-6) when max_norm > 0 and
     * the unscaled norm sqrt(*sq) / scale exceeds it (torch's unscale, then
     * clip_grad_norm_). Computed in double exactly as the trainer computes
     * them on the host from the same *sq, so both see the same decision. */
    void (*step_scalars)(float *dst, const double *sq, double max_norm, float scale);

    /* ---- streams and events (CPU: NULL streams, everything synchronous) ----
     * Work a backend queues runs in the order it was queued on its stream;
     * NULL is the compute stream, where kernels and every call above without
     * a stream go. copy (above) returns when the host may use its host
     * buffer again: a D2H copy waits for the stream, an H2D copy has taken
     * the host bytes. copy_async does neither: the host buffer of an H2D copy
     * must stay unchanged, and that of a D2H copy unread, until the stream
     * has got there (an event recorded after it says when). Prefer the
     * wrappers ut_copy_async, ut_event_* (below), which also serve a backend
     * without streams. */
    void *(*stream_new)(ut_stream_kind kind);     /* COMPUTE: the compute stream itself */
    void (*stream_sync)(void *s);                 /* waits for work queued on s */
    void (*stream_free)(void *s);
    void (*copy_async)(void *dst, const void *src, size_t bytes, ut_copy_kind kind, void *stream);
    void (*memset_async)(void *p, int v, size_t bytes, void *stream);
    /* Core is about to reuse the memory of tensor headers of ops launched so
     * far (a context's host arena resets, or the context is freed): a
     * backend whose queued kernels still read and write their headers waits
     * for them here. NULL: kernels take what they need from the headers at
     * launch (the CPU, CUDA). */
    void (*headers_released)(void);
    void *(*event_new)(void);
    void (*event_record)(void *ev, void *stream); /* marks the work queued on stream so far */
    void (*event_wait)(void *stream, void *ev);   /* work queued on stream later waits for ev */
    void (*event_sync)(void *ev);                 /* the host waits for ev */
    bool (*event_done)(void *ev);                 /* whether ev is done, without waiting */
    void (*event_free)(void *ev);
    /* Events that also keep the time the device reached them (recorded,
     * waited for and freed as the others): timer_ms is the device's time
     * between two of them once both are done, in milliseconds (-1: not
     * known). For UT_PROFILE_OPS=gpu; NULL: the device has no such clock. */
    void *(*timer_new)(void);
    double (*timer_ms)(void *start, void *end);

    /* ---- collectives on device memory (src/dist/comm_device.c) ---- */
    /* The device's communication library (NULL: none built in) */
    const ut_device_coll *coll;
    /* Runs fn(arg) on the host when stream gets there, with the device's
     * memory open to it for the duration: the simulated device, whose
     * memory is host memory the host may not touch otherwise, runs its
     * direct collectives through the host communicator this way. NULL: none
     * (a GPU). */
    void (*enqueue_host)(void *stream, void (*fn)(void *arg), void *arg);
    /* The device this process computes on, named uniquely on this machine
     * (a GPU's PCI bus id; sim: one device per process): ranks on one
     * host with the same name share a device. 0, or -1 (not known). NULL:
     * devices are not shared (the CPU). */
    int (*device_key)(char *buf, size_t n);
} ut_backend;

/* The backend of dev, or NULL when this build has none for it
 * (src/backend/backends.def lists the ones built in). */
const ut_backend *ut_backend_get(ut_device dev);
/* 0 when dev has a backend; else -1 with a message in err naming the device
 * and the backends this build has. */
int ut_backend_check(ut_device dev, char *err, size_t n);

/* Float buffers in whole pages of their own on be's device, zeroed (the
 * backend's pages_alloc). The flat parameter and gradient buffers live in
 * these so a sharding strategy can hand the memory of a range back while the
 * addresses stay valid: ut_pages_release zeroes floats [lo, hi) and gives
 * back the whole pages inside (they read as zeros, and take memory again
 * when written). Aborts when the allocation fails. */
float *ut_pages_alloc(const ut_backend *be, int64_t nfloats);
void ut_pages_free(const ut_backend *be, float *p, int64_t nfloats);
void ut_pages_release(const ut_backend *be, float *p, int64_t lo, int64_t hi);

/* Streams and events through be, also where it has none (the CPU: the
 * copy is done when the call returns; events are done when recorded). */
void ut_copy_async(const ut_backend *be, void *dst, const void *src, size_t bytes, ut_copy_kind kind, void *stream);
void ut_memset_async(const ut_backend *be, void *p, int v, size_t bytes, void *stream);
void *ut_event_new(const ut_backend *be);
void ut_event_record(const ut_backend *be, void *ev, void *stream);
void ut_event_wait(const ut_backend *be, void *stream, void *ev);
void ut_event_sync(const ut_backend *be, void *ev);
bool ut_event_done(const ut_backend *be, void *ev);
void ut_event_free(const ut_backend *be, void *ev);

/* be's sum_sq_to, also where it has none */
void ut_sum_sq_to(const ut_backend *be, double *dst, const float *x, int64_t n);
/* be's step_scalars, also where it has none (then the host reads *sq) */
void ut_step_scalars(const ut_backend *be, float *dst, const double *sq, double max_norm, float scale);
/* step_scalars' rule (backend.h), for the host and the CPU kernels, from
 * the norm of the scaled gradients (sqrt of their square sum): returns true
 * to skip (a non-finite norm); *coef: the gradients' multiplier; *norm: the
 * unscaled norm. The CUDA kernel repeats it in flat.cu. */
static inline bool ut_step_scalars_rule(double scaled_norm, double max_norm, float scale, float *coef,
                                        double *norm) {
    double nrm = scaled_norm;
    *norm = nrm;
    *coef = 0.0f;
    if (!isfinite(nrm)) return true;
    nrm /= scale; /* exact for a power-of-two loss scale */
    *norm = nrm;
    float unscale = 1.0f / scale;
    *coef = unscale;
    /* scaling by a power of two is exact, so g * (c / S) rounds as (g / S) * c
     * does (torch's unscale, then clip), short of results below float's
     * normal range */
    if (max_norm > 0 && nrm > max_norm) *coef = (float)(max_norm / (nrm + 1e-6)) * unscale;
    return false;
}

/* Host memory that be's device copies to and from fastest (its host_alloc,
 * else ordinary 64-byte aligned memory); aborts when out of memory. */
void *ut_host_alloc(const ut_backend *be, size_t bytes);
void ut_host_free(const ut_backend *be, void *p);

/* Host access to device memory, for code that computes on the host. On a
 * backend with host_memory the host pointer is dev itself and nothing is
 * copied or allocated; otherwise ut_stage_begin allocates a host buffer of
 * bytes and, when read, fills it from dev (D2H); ut_stage_end copies it back
 * to dev (H2D) when write, and frees it. A stage may stay open across an
 * asynchronous collective; ut_stage_end on a stage not open does nothing. */
typedef struct {
    const ut_backend *be;
    void *dev, *host;
    size_t bytes;
    bool open;
} ut_stage;
void *ut_stage_begin(ut_stage *s, const ut_backend *be, void *dev, size_t bytes, bool read);
void ut_stage_end(ut_stage *s, bool write);

#endif
