/* The per-step context: arenas, tape, modes, errors, tensor constructors. */
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#include "internal.h"

const char *ut_dtype_name(ut_dtype dt) {
    static const char *names[] = {"f32", "bf16", "f16", "i32"};
    return (unsigned)dt < UT_DTYPE_COUNT ? names[dt] : "?";
}

size_t ut_dtype_size(ut_dtype dt) {
    static const size_t sizes[] = {4, 2, 2, 4};
    return (unsigned)dt < UT_DTYPE_COUNT ? sizes[dt] : 0;
}

const char *ut_device_name(ut_device dev) {
    static const char *const names[UT_DEVICE_COUNT] = {[UT_CPU] = "cpu", [UT_CUDA] = "cuda", [UT_SIM] = "sim"};
    return (unsigned)dev < UT_DEVICE_COUNT ? names[dev] : "?";
}

/* ---- the kernel context: this context's services, as kernels see them ---- */
static ut_ctx *owner(const ut_kctx *k) { return k->owner; }
static void lock(ut_ctx *ctx) {
    if (ctx->locked) pthread_mutex_lock(&ctx->mu);
}
static void unlock(ut_ctx *ctx) {
    if (ctx->locked) pthread_mutex_unlock(&ctx->mu);
}
static void *arena_take(ut_ctx *ctx, ut_arena *a, size_t bytes);
static void *k_dalloc(const ut_kctx *k, size_t bytes) { return arena_take(owner(k), k->arena, bytes); }
static void *k_halloc(const ut_kctx *k, size_t bytes) { return ut_ctx_alloc(owner(k), bytes); }
static void k_fail(const ut_kctx *k, const char *msg) { ut_ctx_set_error(owner(k), "%s", msg); }
static float *k_scratch(const ut_kctx *k, size_t bytes) { return ut_autocast_scratch(owner(k), bytes); }
static void k_scratch_release(const ut_kctx *k) { ut_autocast_release(owner(k)); }
static const void *k_round16(const ut_kctx *k, const ut_tensor *s, int64_t n, ut_dtype dt, bool backward) {
    return ut_autocast_round16(owner(k), s, n, dt, backward);
}

/* The index among values (n of them) of the environment variable name's
 * value; dflt where it is unset or empty, and where it is none of them,
 * which sets ctx's error naming it and the values it takes. */
static int env_choice(ut_ctx *ctx, const char *name, const char *const *values, int n, int dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char list[64] = "";
    for (int i = 0; i < n; i++) {
        if (!strcmp(v, values[i])) return i;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", values[i]);
    }
    if (!ctx->has_err) ut_ctx_set_error(ctx, "%s=%s is not a value it takes (%s; docs/engine.md)", name, v, list);
    return dflt;
}

/* ---- context lifecycle and modes ---- */
ut_ctx *ut_ctx_new(const ut_ctx_opts *opts) {
    ut_ctx_opts o = opts ? *opts : (ut_ctx_opts){0};
    ut_ctx *ctx = ut_calloc_check(1, sizeof *ctx);
    char why[256];
    if (ut_backend_check(o.device, why, sizeof why)) { /* every op will fail with this */
        ut_ctx_set_error(ctx, "%s", why);
        o.device = UT_CPU;
    }
    ctx->be = ut_backend_get(o.device);
    size_t first = o.arena_bytes ? o.arena_bytes : (64u << 20);
    if (ctx->be->host_memory) {
        ut_arena_init(&ctx->main, first);
        ut_arena_init(&ctx->scratch, 0);
    } else { /* headers and records on the host, data on the device */
        ut_arena_init(&ctx->main, 1u << 20);
        ut_arena_init(&ctx->scratch, 0);
        ut_arena_init_device(&ctx->dmain, first, ctx->be);
        ut_arena_init_device(&ctx->dscratch, 0, ctx->be);
    }
    ut_ctx_use_scratch(ctx, false);
    ctx->grad_enabled = true;
    ctx->training = true;
    /* docs/engine.md: gradients written by their first consumer (1, the
     * default), every one zeroed (0), or written over NaNs (nan) */
    ctx->fresh_grads = env_choice(ctx, "UT_FRESH_GRADS", (const char *const[]){"0", "1", "nan"}, 3, 1);
    /* docs/engine.md: ut_linear_gelu one op (1, the default) or two (0) */
    ctx->fuse_linear_gelu = env_choice(ctx, "UT_LINEAR_GELU", (const char *const[]){"0", "1"}, 2, 1) == 1;
    /* docs/engine.md: ut_linear_cross_entropy one op (1, the default) or two (0) */
    ctx->fuse_linear_ce = env_choice(ctx, "UT_LINEAR_CE", (const char *const[]){"0", "1"}, 2, 1) == 1;
    ctx->device = o.device;
    ut_philox_seed(&ctx->rng, o.seed);
    ctx->locked = !ctx->be->host_memory;
    pthread_mutex_init(&ctx->mu, NULL);
    ctx->kctx = (ut_kctx){.owner = ctx, .dalloc = k_dalloc, .halloc = k_halloc, .fail = k_fail,
                          .scratch = k_scratch, .scratch_release = k_scratch_release, .round16 = k_round16};
    return ctx;
}

static void headers_released(const ut_ctx *ctx) {
    if (ctx->be->headers_released) ctx->be->headers_released();
}

void ut_ctx_free(ut_ctx *ctx) {
    if (!ctx) return;
    headers_released(ctx);
    ut_autocast_free(ctx);
    ut_arena_free(&ctx->main);
    ut_arena_free(&ctx->scratch);
    ut_arena_free(&ctx->dmain);
    ut_arena_free(&ctx->dscratch);
    ut_free(ctx->tape);
    ut_free(ctx->first_use);
    ut_free(ctx->collected);
    pthread_mutex_destroy(&ctx->mu);
    ut_free(ctx);
}

ut_kctx ut_ctx_launch(ut_ctx *ctx, int op) {
    ut_kctx k = ctx->kctx;
    k.arena = ctx->darena;
    k.threads = omp_get_max_threads();
    if (ut_op_is(op, UT_OPP_RANDOM)) {
        k.rng = ctx->rng;
        ctx->rng.offset += UT_RNG_LAUNCH_DRAWS;
    }
    return k;
}

/* An arena reset may free device chunks: on sim that is queued behind the
 * work still using them (the backend's free is stream-ordered), so it needs
 * no wait for that, only the lock against a kernel allocating at the same
 * time. The host arenas hold the headers of launched ops, which sim's queued
 * kernels still read and write back: the backend waits for those first
 * (headers_released). */
void ut_ctx_reset(ut_ctx *ctx) {
    headers_released(ctx);
    lock(ctx);
    ut_arena_reset(&ctx->main);
    ut_arena_reset(&ctx->scratch);
    if (!ctx->be->host_memory) {
        ut_arena_reset(&ctx->dmain);
        ut_arena_reset(&ctx->dscratch);
    }
    unlock(ctx);
    ut_ctx_use_scratch(ctx, false);
    ctx->tape_len = 0;
    ut_autocast_forget(ctx);
    ut_flops_forget_uploads(ctx);
}

bool ut_ctx_set_grad_enabled(ut_ctx *ctx, bool on) {
    bool old = ctx->grad_enabled;
    ctx->grad_enabled = on;
    return old;
}
bool ut_ctx_grad_enabled(const ut_ctx *ctx) { return ctx->grad_enabled; }
bool ut_ctx_set_training(ut_ctx *ctx, bool on) {
    bool old = ctx->training;
    ctx->training = on;
    return old;
}
bool ut_ctx_training(const ut_ctx *ctx) { return ctx->training; }
ut_device ut_ctx_device(const ut_ctx *ctx) { return ctx->device; }
void ut_ctx_seed(ut_ctx *ctx, uint64_t seed) { ut_philox_seed(&ctx->rng, seed); }

float ut_ctx_set_label_smoothing(ut_ctx *ctx, float eps) {
    float old = ctx->label_smoothing;
    UT_ASSERT(eps >= 0.0f && eps <= 1.0f);
    ctx->label_smoothing = eps;
    return old;
}

float ut_ctx_label_smoothing(const ut_ctx *ctx) { return ctx->label_smoothing; }

float ut_ctx_set_neftune(ut_ctx *ctx, float alpha) {
    float old = ctx->neftune_alpha;
    UT_ASSERT(alpha >= 0.0f && !isinf(alpha));
    ctx->neftune_alpha = alpha;
    return old;
}

float ut_ctx_neftune(const ut_ctx *ctx) { return ctx->neftune_alpha; }

void ut_ctx_rng_stream(ut_ctx *ctx, uint64_t stream) {
    ctx->rng.stream = stream;
    ctx->rng.offset = 0;
}
void ut_ctx_rng_region(ut_ctx *ctx, int64_t k) { ctx->rng.offset = (uint64_t)k << 40; }

void ut_ctx_rng_get(const ut_ctx *ctx, uint64_t state[4]) {
    state[0] = ctx->rng.key;
    state[1] = ctx->rng.stream;
    state[2] = ctx->rng.offset;
    state[3] = 0;
}

void ut_ctx_set_param_hook(ut_ctx *ctx, ut_param_use_fn fn, void *user) {
    ctx->param_hook = fn;
    ctx->param_hook_user = user;
}

void ut_ctx_set_grad_hook(ut_ctx *ctx, ut_grad_ready_fn fn, void *user) {
    ctx->grad_hook = fn;
    ctx->grad_hook_user = user;
}

/* ---- errors ---- */
const char *ut_ctx_error(const ut_ctx *ctx) { return ctx->has_err ? ctx->err : NULL; }
void ut_ctx_clear_error(ut_ctx *ctx) { ctx->has_err = false; ctx->err[0] = 0; }

void ut_ctx_set_error(ut_ctx *ctx, const char *fmt, ...) {
    if (ctx->has_err) return; /* keep the first: it names the cause */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
    ctx->has_err = true;
}

/* ---- memory ---- */
static size_t in_use(const ut_ctx *ctx) {
    return ut_arena_in_use(&ctx->main) + ut_arena_in_use(&ctx->scratch) +
           ut_arena_in_use(&ctx->dmain) + ut_arena_in_use(&ctx->dscratch);
}
size_t ut_ctx_bytes_in_use(const ut_ctx *ctx) { return in_use(ctx); }
size_t ut_ctx_peak_bytes(const ut_ctx *ctx) { return ctx->peak; }
void ut_ctx_reset_peak(ut_ctx *ctx) { ctx->peak = in_use(ctx); }
int ut_ctx_tape_len(const ut_ctx *ctx) { return ctx->tape_len; }
ut_tensor *ut_ctx_tape_at(const ut_ctx *ctx, int i) {
    return i >= 0 && i < ctx->tape_len ? ctx->tape[i] : NULL;
}

static void *arena_take(ut_ctx *ctx, ut_arena *a, size_t bytes) {
    lock(ctx);
    void *p = ut_arena_alloc(a, bytes);
    size_t u = in_use(ctx);
    if (u > ctx->peak) ctx->peak = u;
    unlock(ctx);
    return p;
}

void *ut_ctx_alloc(ut_ctx *ctx, size_t bytes) { return arena_take(ctx, ctx->arena, bytes); }
void *ut_ctx_dalloc(ut_ctx *ctx, size_t bytes) { return arena_take(ctx, ctx->darena, bytes); }

void ut_ctx_reset_scratch(ut_ctx *ctx) {
    headers_released(ctx);
    lock(ctx);
    ut_arena_reset(&ctx->scratch);
    if (!ctx->be->host_memory) ut_arena_reset(&ctx->dscratch);
    unlock(ctx);
}

void ut_ctx_use_scratch(ut_ctx *ctx, bool scratch) {
    ctx->arena = scratch ? &ctx->scratch : &ctx->main;
    if (ctx->be->host_memory) ctx->darena = ctx->arena;
    else ctx->darena = scratch ? &ctx->dscratch : &ctx->dmain;
}

/* ---- per-op time (UT_PROFILE_OPS=1, or gpu) ---- */
static int prof_state = 0; /* 0 off, 1 host clock around waits, 2 the device's timing events */
static int prof_mode = -1; /* UT_PROFILE_OPS's: -1 not read yet, else as prof_state (for the whole run) */
static double prof_time[UT_OP_COUNT][2];
static double prof_bytes[UT_OP_COUNT][2]; /* nominal traffic (prof_traffic) */
static double prof_flops[UT_OP_COUNT][2]; /* model FLOPs (ut_op_flops) */
static long prof_calls[UT_OP_COUNT][2];
static pthread_mutex_t prof_mu = PTHREAD_MUTEX_INITIALIZER;
/* mode 2: the ops whose events are not read yet, and spare events */
typedef struct {
    void *a, *b;
    int op, dir;
    double bytes, flops;
} prof_pair;
static const ut_backend *prof_be;
static prof_pair *prof_pend;
static int prof_npend, prof_cap;
static void **prof_spare;
static int prof_nspare, prof_spare_cap;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void prof_spare_put(void *ev) {
    if (prof_nspare == prof_spare_cap) {
        prof_spare_cap = prof_spare_cap ? 2 * prof_spare_cap : 256;
        prof_spare = ut_realloc_check(prof_spare, (size_t)prof_spare_cap * sizeof *prof_spare);
    }
    prof_spare[prof_nspare++] = ev;
}

/* Reads the pending pairs' times (waiting for the last one) and gives their
 * events back. Called with prof_mu held. */
static void prof_resolve(void) {
    if (!prof_npend) return;
    prof_be->event_sync(prof_pend[prof_npend - 1].b);
    for (int i = 0; i < prof_npend; i++) {
        prof_pair *q = &prof_pend[i];
        double ms = prof_be->timer_ms(q->a, q->b);
        if (ms >= 0) prof_time[q->op][q->dir] += ms * 1e-3;
        prof_bytes[q->op][q->dir] += q->bytes;
        prof_flops[q->op][q->dir] += q->flops;
        prof_calls[q->op][q->dir]++;
        prof_spare_put(q->a);
        prof_spare_put(q->b);
    }
    prof_npend = 0;
}

/* A timing event: a spare one, else a new one. Called with prof_mu held. */
static void *prof_event(void) { return prof_nspare ? prof_spare[--prof_nspare] : prof_be->timer_new(); }

/* The table, to f: the seconds, calls, memory and FLOP rates per op and
 * direction. Called with prof_mu held. */
static void prof_table(FILE *f, const char *title) {
    if (prof_state == 2) prof_resolve();
    double total = 0;
    for (int op = 0; op < UT_OP_COUNT; op++) total += prof_time[op][0] + prof_time[op][1];
    fprintf(f, "%s: %.3f s in kernels%s\n", title, total,
            prof_state == 2 ? " (the device's timing events)" : "");
    fprintf(f, "  %-20s %10s %8s %8s %8s %10s %8s %8s %8s %6s\n", "op", "fwd s", "calls", "GB/s", "TFLOP/s",
            "bwd s", "calls", "GB/s", "TFLOP/s", "share");
    for (int op = 1; op < UT_OP_COUNT; op++) {
        double s = prof_time[op][0] + prof_time[op][1];
        if (prof_calls[op][0] + prof_calls[op][1] == 0) continue;
        char rate[2][16], fl[2][16];
        for (int d = 0; d < 2; d++) {
            if (prof_time[op][d] > 0 && prof_bytes[op][d] > 0)
                snprintf(rate[d], sizeof rate[d], "%.3g", prof_bytes[op][d] / prof_time[op][d] * 1e-9);
            else snprintf(rate[d], sizeof rate[d], "-");
            if (prof_time[op][d] > 0 && prof_flops[op][d] > 0)
                snprintf(fl[d], sizeof fl[d], "%.3g", prof_flops[op][d] / prof_time[op][d] * 1e-12);
            else snprintf(fl[d], sizeof fl[d], "-");
        }
        fprintf(f, "  %-20s %10.4f %8ld %8s %8s %10.4f %8ld %8s %8s %5.1f%%\n", ut_op_name(op),
                prof_time[op][0], prof_calls[op][0], rate[0], fl[0], prof_time[op][1], prof_calls[op][1], rate[1],
                fl[1], total > 0 ? 100 * s / total : 0);
    }
    fprintf(f, "  (GB/s: the bytes of the op's inputs and output, backward its output's gradient, inputs and\n"
                    "   their gradients read and written, over its time: a nominal rate to hold against the\n"
                    "   device's memory bandwidth; views move nothing. TFLOP/s: the products' model FLOPs\n"
                    "   (src/core/flops.c) over their time, a recompute's forward included)\n");
}

static void prof_report(void) {
    pthread_mutex_lock(&prof_mu);
    prof_table(stderr,
               prof_mode == 2 ? "utrain op profile (UT_PROFILE_OPS=gpu)" : "utrain op profile (UT_PROFILE_OPS=1)");
    pthread_mutex_unlock(&prof_mu);
}

/* The environment's choice, read once: 0 off, 1, 2 (gpu) */
static int prof_env(const ut_ctx *ctx) {
    if (prof_mode < 0) {
        const char *e = getenv("UT_PROFILE_OPS");
        prof_mode = !e ? 0 : !strcmp(e, "1") ? 1 : !strcmp(e, "gpu") ? 2 : 0;
        if (prof_mode == 2 && !ctx->be->timer_new) {
            fprintf(stderr, "utrain: UT_PROFILE_OPS=gpu: device %s has no clock of its own; timing on the host "
                            "around waits (UT_PROFILE_OPS=1)\n", ctx->be->name);
            prof_mode = 1;
        }
        if (prof_mode == 2) prof_be = ctx->be;
        if (prof_mode) atexit(prof_report);
        prof_state = prof_mode;
    }
    return prof_mode;
}

bool ut_profile_ops_env(const ut_ctx *ctx) { return prof_env(ctx) != 0; }

int ut_profile_ops_start(const ut_ctx *ctx) {
    if (prof_env(ctx)) return -1; /* UT_PROFILE_OPS profiles the whole run */
    pthread_mutex_lock(&prof_mu);
    if (prof_state == 2) prof_resolve();
    prof_state = ctx->be->timer_new ? 2 : 1;
    prof_be = ctx->be;
    memset(prof_time, 0, sizeof prof_time);
    memset(prof_bytes, 0, sizeof prof_bytes);
    memset(prof_flops, 0, sizeof prof_flops);
    memset(prof_calls, 0, sizeof prof_calls);
    pthread_mutex_unlock(&prof_mu);
    return 0;
}

void ut_profile_ops_stop(ut_profile_sums *sums, FILE *f, const char *title) {
    pthread_mutex_lock(&prof_mu);
    if (prof_state == 2) prof_resolve();
    if (sums) {
        memset(sums, 0, sizeof *sums);
        for (int op = 0; op < UT_OP_COUNT; op++)
            for (int d = 0; d < 2; d++) sums->seconds[d] += prof_time[op][d], sums->flops[d] += prof_flops[op][d];
    }
    if (f) prof_table(f, title);
    if (!prof_mode) prof_state = 0;
    pthread_mutex_unlock(&prof_mu);
}

void ut_profile_ops_reset(void) {
    pthread_mutex_lock(&prof_mu);
    if (prof_state == 2) prof_resolve(); /* its pairs' events back to the spares, their times dropped below */
    memset(prof_time, 0, sizeof prof_time);
    memset(prof_bytes, 0, sizeof prof_bytes);
    memset(prof_flops, 0, sizeof prof_flops);
    memset(prof_calls, 0, sizeof prof_calls);
    pthread_mutex_unlock(&prof_mu);
}

/* The bytes a plain kernel of t's op moves: forward, its inputs read and
 * its output written (none for views); backward, the output's gradient and
 * the inputs read, and each input's gradient read and written (gradients
 * are 16-bit where their tensor is: ut_grad). */
static double prof_traffic(const ut_tensor *t, int backward) {
    if (!backward && ut_op_is(t->op, UT_OPP_NO_DATA)) return 0;
    double b = 0;
    for (int k = 0; k < UT_MAX_SRC; k++) {
        const ut_tensor *x = t->src[k];
        if (!x) continue;
        double n = (double)ut_nelem(x);
        b += n * (double)ut_dtype_size(x->dtype);
        if (backward && x->requires_grad) b += 2 * n * (ut_dtype_is16(x->dtype) ? 2 : sizeof(float));
    }
    double n = (double)ut_nelem(t);
    return b + n * (backward ? (ut_dtype_is16(t->dtype) ? 2 : sizeof(float)) : (double)ut_dtype_size(t->dtype));
}

ut_prof_mark ut_prof_begin(const ut_ctx *ctx) {
    if (prof_mode < 0) prof_env(ctx);
    if (!prof_state) return (ut_prof_mark){.t = -1};
    if (prof_state == 2 && ctx->be == prof_be) {
        pthread_mutex_lock(&prof_mu);
        void *ev = prof_event();
        pthread_mutex_unlock(&prof_mu);
        prof_be->event_record(ev, NULL);
        return (ut_prof_mark){.t = 0, .ev = ev};
    }
    if (prof_state == 2) return (ut_prof_mark){.t = -1}; /* another device's ops: not timed */
    ctx->be->stream_sync(NULL);
    return (ut_prof_mark){.t = now_s()};
}

void ut_prof_end(const ut_ctx *ctx, const ut_tensor *t, int backward, ut_prof_mark m) {
    if (m.t < 0) return;
    int op = t->op;
    double bytes = prof_traffic(t, backward), flops = ut_op_flops(t, backward != 0);
    if (m.ev) {
        pthread_mutex_lock(&prof_mu);
        void *ev = prof_event();
        prof_be->event_record(ev, NULL);
        if (prof_npend == prof_cap) {
            prof_cap = prof_cap ? 2 * prof_cap : 1024;
            prof_pend = ut_realloc_check(prof_pend, (size_t)prof_cap * sizeof *prof_pend);
        }
        prof_pend[prof_npend++] =
            (prof_pair){.a = m.ev, .b = ev, .op = op, .dir = backward, .bytes = bytes, .flops = flops};
        if (prof_npend >= 4096) prof_resolve(); /* a wait every few thousand ops, not every op */
        pthread_mutex_unlock(&prof_mu);
        return;
    }
    ctx->be->stream_sync(NULL);
    pthread_mutex_lock(&prof_mu);
    prof_time[op][backward] += now_s() - m.t;
    prof_bytes[op][backward] += bytes;
    prof_flops[op][backward] += flops;
    prof_calls[op][backward]++;
    pthread_mutex_unlock(&prof_mu);
}

/* ---- tensor queries ---- */
int64_t ut_nelem(const ut_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->ne[i];
    return n;
}

void ut_contiguous_strides(int64_t *st, int ndim, const int64_t *ne) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        st[i] = s;
        s *= ne[i];
    }
}

void ut_set_contiguous_strides(ut_tensor *t) { ut_contiguous_strides(t->nb, t->ndim, t->ne); }

bool ut_is_contiguous(const ut_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->ne[i] != 1 && t->nb[i] != s) return false;
        s *= t->ne[i];
    }
    return true;
}

char *ut_shape_str(const ut_tensor *t, char *buf, size_t n) {
    if (!t) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)t->ne[i]);
    if (k < n) snprintf(buf + k, n - k, t->ndim == 1 ? ",)" : ")");
    return buf;
}

/* ---- constructors ---- */
static ut_tensor *header(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne) {
    if (ndim < 0 || ndim > UT_MAX_DIMS) {
        ut_ctx_set_error(ctx, "tensor: %d dimensions asked for, at most %d supported", ndim,
                         UT_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (ne[i] < 0) {
            ut_ctx_set_error(ctx, "tensor: negative size %lld in dimension %d", (long long)ne[i], i);
            return NULL;
        }
    ut_tensor *t = ut_ctx_alloc(ctx, sizeof *t);
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->device = ctx->device;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->ne[i] = ne[i];
    ut_set_contiguous_strides(t);
    t->param_index = -1;
    t->ctx = ctx;
    return t;
}

ut_tensor *ut_tensor_wrap(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne, void *data) {
    ut_tensor *t = header(ctx, dt, ndim, ne);
    if (t) t->data = data;
    return t;
}

ut_tensor *ut_tensor_new(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne) {
    ut_tensor *t = header(ctx, dt, ndim, ne);
    if (t) t->data = ut_ctx_dalloc(ctx, (size_t)ut_nelem(t) * ut_dtype_size(dt));
    return t;
}

ut_tensor *ut_tensor_new2(ut_ctx *ctx, ut_dtype dt, int64_t n0, int64_t n1) {
    int64_t ne[2] = {n0, n1};
    return ut_tensor_new(ctx, dt, 2, ne);
}

static size_t nbytes(const ut_tensor *t) { return (size_t)ut_nelem(t) * ut_dtype_size(t->dtype); }

ut_tensor *ut_tensor_zeros(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne) {
    ut_tensor *t = ut_tensor_new(ctx, dt, ndim, ne);
    if (t) ut_backend_get(t->device)->memset(t->data, 0, nbytes(t));
    return t;
}

ut_tensor *ut_tensor_from(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne, const void *data) {
    ut_tensor *t = ut_tensor_new(ctx, dt, ndim, ne);
    if (t) ut_backend_get(t->device)->copy(t->data, data, nbytes(t), UT_COPY_H2D);
    return t;
}

/* Checks a whole-tensor copy of bytes; -1 with the context's error set (when
 * t has a context) on a mismatch. */
static int check_copy(const ut_tensor *t, size_t bytes, const char *what) {
    char shape[64];
    const char *why = NULL;
    if (!t->data) why = "the tensor has no storage";
    else if (!ut_is_contiguous(t)) why = "the tensor is not contiguous (ut_contiguous first)";
    else if (bytes != nbytes(t))
        why = ut_fmt("%zu bytes given, the tensor holds %zu", bytes, nbytes(t));
    if (!why) return 0;
    if (t->ctx)
        ut_ctx_set_error(t->ctx, "%s: %s %s %s: %s", what, t->name ? t->name : "tensor",
                         ut_dtype_name(t->dtype), ut_shape_str(t, shape, sizeof shape), why);
    return -1;
}

int ut_tensor_set(ut_tensor *t, const void *host, size_t bytes) {
    if (!t || check_copy(t, bytes, "tensor_set")) return -1;
    ut_backend_get(t->device)->copy(t->data, host, bytes, UT_COPY_H2D);
    return 0;
}

int ut_ctx_device_errors(ut_ctx *ctx, bool wait) {
    char why[256];
    if (!ctx || !ctx->be->data_error || ctx->be->data_error(wait, why, sizeof why) == 0) return 0;
    ut_ctx_set_error(ctx, "%s", why);
    return -1;
}

int ut_ctx_device_check(ut_ctx *ctx) { return ut_ctx_device_errors(ctx, true); }

int ut_tensor_get(const ut_tensor *t, void *host, size_t bytes) {
    if (!t || check_copy(t, bytes, "tensor_get")) return -1;
    ut_backend_get(t->device)->copy(host, t->data, bytes, UT_COPY_D2H);
    return ut_ctx_device_errors(t->ctx, true);
}

int ut_tensor_copy_to(const ut_tensor *t, void *dst, size_t bytes) {
    if (!t || check_copy(t, bytes, "tensor_copy_to")) return -1;
    ut_backend_get(t->device)->copy(dst, t->data, bytes, UT_COPY_D2D);
    return 0;
}

int ut_tensor_copy_into(ut_tensor *dst, int64_t first, const ut_tensor *src) {
    if (!dst || !src) return -1;
    int64_t n = ut_nelem(src);
    if (dst->dtype != src->dtype || dst->device != src->device || !ut_is_contiguous(dst) || first < 0 ||
        first + n > ut_nelem(dst)) {
        char a[64], b[64];
        ut_ctx *c = src->ctx ? src->ctx : dst->ctx;
        if (c)
            ut_ctx_set_error(c, "tensor_copy_into: %s %s into %s %s at element %lld does not fit",
                             ut_dtype_name(src->dtype), ut_shape_str(src, a, sizeof a), ut_dtype_name(dst->dtype),
                             ut_shape_str(dst, b, sizeof b), (long long)first);
        return -1;
    }
    size_t es = ut_dtype_size(dst->dtype);
    return ut_tensor_copy_to(src, (char *)dst->data + (size_t)first * es, (size_t)n * es);
}

ut_tensor *ut_tensor_share(ut_ctx *ctx, const ut_tensor *t) {
    if (!t) return NULL;
    if (!ut_is_contiguous(t) || t->device != ut_ctx_device(ctx)) {
        char a[64];
        ut_ctx_set_error(ctx, "tensor_share: %s %s must be contiguous and on the context's device",
                         ut_dtype_name(t->dtype), ut_shape_str(t, a, sizeof a));
        return NULL;
    }
    return ut_tensor_wrap(ctx, t->dtype, t->ndim, t->ne, t->data);
}

int ut_tensor_get_grad(const ut_tensor *t, float *host, size_t bytes) {
    if (!t) return -1;
    size_t want = (size_t)ut_nelem(t) * sizeof(float);
    if (ut_dtype_is16(t->dtype) || bytes != want) {
        char shape[64];
        if (t->ctx)
            ut_ctx_set_error(t->ctx, "tensor_get_grad: %s %s %s: %s", t->name ? t->name : "tensor",
                             ut_dtype_name(t->dtype), ut_shape_str(t, shape, sizeof shape),
                             bytes != want ? ut_fmt("%zu bytes given, the gradient holds %zu", bytes, want)
                                           : "16-bit tensors keep 16-bit gradients");
        return -1;
    }
    if (!t->grad) memset(host, 0, bytes);
    else ut_backend_get(t->device)->copy(host, t->grad, bytes, UT_COPY_D2H);
    return 0;
}

static bool is_float(ut_dtype dt) { return dt == UT_F32 || dt == UT_BF16 || dt == UT_F16; }

ut_tensor *ut_tensor_to(ut_ctx *ctx, const ut_tensor *t, ut_dtype dt) {
    if (!t) return NULL;
    char shape[64];
    if (!is_float(t->dtype) || !is_float(dt) || !ut_is_contiguous(t)) {
        ut_ctx_set_error(ctx, "tensor_to: cannot convert %s %s%s to %s (f32, bf16, f16 only)",
                         ut_dtype_name(t->dtype), ut_shape_str(t, shape, sizeof shape),
                         ut_is_contiguous(t) ? "" : " (strided: ut_contiguous first)",
                         ut_dtype_name(dt));
        return NULL;
    }
    ut_tensor *out = ut_tensor_new(ctx, dt, t->ndim, t->ne);
    if (out) ut_backend_get(t->device)->convert(out->data, dt, t->data, t->dtype, ut_nelem(t));
    return out;
}

ut_tensor *ut_tensor_alias(ut_ctx *ctx, ut_tensor *a, int ndim, const int64_t *ne) {
    return ut_tensor_wrap(ctx, a->dtype, ndim, ne, a->data);
}

void ut_tensor_bind(ut_tensor *t, void *data, float *grad) {
    UT_ASSERT(t && !t->ctx);
    t->data = data;
    t->grad = grad;
}

void ut_tensor_set_requires_grad(ut_tensor *t, bool on) { t->requires_grad = on; }

/* ---- op construction ---- */
void ut_op_error(ut_ctx *ctx, const char *op, int n, ut_tensor *const *src, const char *why) {
    char shapes[256] = "", buf[64];
    size_t k = 0;
    for (int i = 0; i < n && k < sizeof shapes; i++)
        k += (size_t)snprintf(shapes + k, sizeof shapes - k, "%s%s %s", i ? ", " : "",
                              src[i] ? ut_dtype_name(src[i]->dtype) : "",
                              ut_shape_str(src[i], buf, sizeof buf));
    ut_ctx_set_error(ctx, "%s: %s (inputs: %s)", op, why, shapes);
}

bool ut_op_check(ut_ctx *ctx, const char *op, int n, ut_tensor *const *src, unsigned i32_mask) {
    if (ctx->has_err) return false;
    for (int i = 0; i < n; i++) {
        if (!src[i]) {
            ut_op_error(ctx, op, n, src, ut_fmt("input %d is NULL", i));
            return false;
        }
        ut_dtype want = (i32_mask >> i & 1) ? UT_I32 : UT_F32, dt = src[i]->dtype;
        if (want == UT_F32 && ut_dtype_is16(dt)) dt = UT_F32; /* read as f32 */
        if (dt != want) {
            ut_op_error(ctx, op, n, src,
                        ut_fmt("input %d has dtype %s, expected %s", i,
                               ut_dtype_name(src[i]->dtype), ut_dtype_name(want)));
            return false;
        }
        if (src[i]->device != ctx->device) {
            ut_op_error(ctx, op, n, src,
                        ut_fmt("input %d is on %s, the context runs on %s", i,
                               ut_device_name(src[i]->device), ut_device_name(ctx->device)));
            return false;
        }
    }
    return true;
}

void ut_note_param(ut_ctx *ctx, const ut_tensor *t) {
    for (int i = 0; i < ctx->ncollected; i++)
        if (ctx->collected[i] == t->param_index) return;
    if (ctx->ncollected == ctx->collected_cap) {
        ctx->collected_cap = ctx->collected_cap ? 2 * ctx->collected_cap : 32;
        ctx->collected = ut_realloc_check(ctx->collected, ctx->collected_cap * sizeof(int));
    }
    ctx->collected[ctx->ncollected++] = t->param_index;
}

ut_tensor *ut_op_new(ut_ctx *ctx, int op, ut_dtype dt, int ndim, const int64_t *ne, int nsrc,
                     ut_tensor *const *src) {
    ut_tensor *t = ut_tensor_new(ctx, ut_autocast_dtype(ctx, op, dt, nsrc, src), ndim, ne);
    if (!t) return NULL;
    t->op = op;
    bool rg = false;
    for (int i = 0; i < nsrc; i++) {
        t->src[i] = src[i];
        if (src[i] && src[i]->requires_grad) rg = true;
        if (ctx->collecting && src[i] && src[i]->param_index >= 0) ut_note_param(ctx, src[i]);
    }
    t->requires_grad = rg && ctx->grad_enabled;
    ut_autocast_mark(ctx, t);
    ut_param_use(ctx, src, nsrc);
    return t;
}

ut_tensor *ut_view_new(ut_ctx *ctx, int op, ut_tensor *src, int ndim, const int64_t *ne,
                       const int64_t *nb, int64_t off) {
    ut_tensor *t = header(ctx, src->dtype, ndim, ne);
    if (!t) return NULL;
    for (int i = 0; i < ndim; i++) t->nb[i] = nb[i];
    t->data = (char *)src->data + off * (int64_t)ut_dtype_size(src->dtype);
    t->op = op;
    t->src[0] = src;
    t->requires_grad = src->requires_grad && ctx->grad_enabled;
    if (ctx->collecting && src->param_index >= 0) ut_note_param(ctx, src);
    ut_param_use(ctx, &t->src[0], 1);
    return t;
}

void ut_tape_push(ut_ctx *ctx, ut_tensor *t) {
    if (ctx->tape_len == ctx->tape_cap) {
        ctx->tape_cap = ctx->tape_cap ? 2 * ctx->tape_cap : 1024;
        ctx->tape = ut_realloc_check(ctx->tape, ctx->tape_cap * sizeof *ctx->tape);
    }
    ctx->tape[ctx->tape_len++] = t;
}

const ut_op_vtable *ut_op_table(ut_device dev) {
    const ut_backend *b = ut_backend_get(dev);
    UT_ASSERT(b); /* ut_ctx_new only makes contexts for devices with a backend */
    return b->ops;
}

/* ---- op names, from the op list (no backend needed) ---- */
static const char *const op_names[UT_OP_COUNT] = {
    [UT_OP_NONE] = "leaf",
#define UT_OP(E, stem, props) [UT_OP_##E] = #stem,
#include "ops.def"
#undef UT_OP
};

const unsigned ut_op_props[UT_OP_COUNT] = {
#define UT_OP(E, stem, props) [UT_OP_##E] = (props),
#include "ops.def"
#undef UT_OP
};

const char *ut_op_name(int op) { return op >= 0 && op < UT_OP_COUNT ? op_names[op] : "?"; }
int ut_op_count(void) { return UT_OP_COUNT; }

ut_tensor *ut_op_run(ut_tensor *t) {
    if (!t) return NULL;
    const ut_op_vtable *ops = ut_op_table(t->device);
    ut_op_fn fwd = ops[t->op].forward;
    ut_prof_mark t0 = ut_prof_begin(t->ctx);
    ut_kctx k = ut_ctx_launch(t->ctx, t->op);
    if (fwd && ut_lowp_needed(t, false)) ut_lowp_forward(t, fwd, &k);
    else if (fwd) fwd(t, &k);
    ut_prof_end(t->ctx, t, 0, t0);
    if (t->ctx->has_err) return NULL; /* a kernel found bad data (e.g. an index) */
    ut_flops_count(t->ctx, t, false);
    if (t->requires_grad) ut_tape_push(t->ctx, t);
    return t;
}

static size_t grad_bytes(const ut_tensor *t) {
    return (size_t)ut_nelem(t) * (ut_dtype_is16(t->dtype) ? 2 : sizeof(float));
}

float *ut_grad(ut_tensor *t) {
    if (!t->grad) {
        size_t bytes = grad_bytes(t);
        t->grad = ut_ctx_dalloc(t->ctx, bytes);
        ut_backend_get(t->device)->memset(t->grad, 0, bytes);
    }
    return t->grad;
}

void ut_grad_unzeroed(ut_tensor *t, bool poison) {
    size_t bytes = grad_bytes(t);
    t->grad = ut_ctx_dalloc(t->ctx, bytes);
    if (poison) ut_backend_get(t->device)->memset(t->grad, 0xff, bytes); /* NaN in every float type */
}
