/* The simulated device (device: sim): the CPU's kernels behind a table whose
 * memory the host cannot read. It exists to prove the device seam on
 * machines without a GPU: everything above src/backend must treat its
 * pointers as device memory (copies, stages, ut_tensor_get), and a host
 * dereference anywhere else faults (SIGSEGV) instead of passing silently.
 *
 * Memory: one reserved mapping (SIM_RESERVE bytes of address space,
 * PROT_NONE, no commit) from which every allocation is cut: a bump pointer
 * plus exact-size free lists (an arena's chunks and a step's buffers come
 * back in the same sizes). Whole pages for the flat buffers are cut at page
 * boundaries, so pages_release can give them back with madvise. The device
 * has the whole reservation unless UTRAIN_SIM_MEMORY gives it fewer bytes;
 * past them an allocation fails as a GPU's does (ut_fail_oom).
 *
 * The window: every piece of work of this backend (a queued kernel, copy,
 * memset or flat-math call as a stream's worker runs it, and the calls the
 * host makes itself: a copy to host memory, sum_sq, zeroing new pages) opens
 * the mapping for reading and writing for its duration and closes it after
 * (mprotect), counted, so several threads at once (the streams' workers,
 * the dp strategy's host threads) keep it open until the last one leaves.
 * Host code that reads device memory outside this backend therefore faults
 * whenever no stream is running work; the tests wait for the streams before
 * they try.
 *
 * Streams: every kernel, memset, device-side copy, conversion and flat-math
 * call is queued on a stream (the compute stream unless a stream is named)
 * and run, in order, by that stream's worker thread while the host goes on,
 * as a GPU runs what its host launched. What a GPU would make the host wait
 * for waits here too (a copy to host memory, sum_sq, data_error, a stream or
 * event sync), and nothing else does, so a host read that forgets to wait,
 * or a copy from a host buffer the host changes before the stream reached
 * it, gives a wrong result here instead of passing by luck:
 *   - copy from host memory (H2D) takes a copy of the host bytes when it is
 *     called (CUDA's pageable copy); copy_async does not: the host buffer
 *     must stay as it is until the stream gets there (an event says when);
 *   - free is ordered on the compute stream (cudaFreeAsync): a block is
 *     handed out again only after the work queued before its free has run;
 *   - a kernel is queued with a copy of its tensor headers (data, gradient,
 *     dtype, shape, sources) as they are at launch, because core changes
 *     some of them right after (autocast points a tensor at float32 copies
 *     for one launch); what the kernel saves for backward (aux, and the
 *     integer and float parameters it sets) is written back to the real
 *     header when it has run, on the worker, and read from there by the
 *     backward's kernel, which runs later on the same worker;
 *   - a kernel's data errors are kept by its stream and reported by
 *     data_error (core asks at every read of results); once a stream has
 *     one, its later kernels are skipped until it is reported;
 *   - a kernel's scratch (ut_kscratch) is the worker's own.
 * Events mark a point in a stream: event_sync waits for it on the host,
 * event_wait makes another stream's later work wait for it. */
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../cpu/caps.h"
#include "../cpu/cpu.h"
#include "../cpu/gemm.h"
#include "../cpu/conv.h"
#include "utrain/base.h"

#define SIM_RESERVE ((size_t)64 << 30) /* address space, not memory */
#define SIM_ALIGN 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *base;       /* the reserved mapping */
static size_t top;       /* bytes cut from it so far */
static size_t cap = SIM_RESERVE; /* the device's memory: UTRAIN_SIM_MEMORY bytes, or the reservation */
static int depth;        /* calls of this backend in progress */

/* free blocks of one size (a short list of sizes: the sizes a run uses are few) */
enum { NBUCKET = 256 };
static struct {
    size_t bytes;
    void **ptrs;
    int n, cap;
} freelist[NBUCKET];
static int nfree_sizes;
/* every allocation's size, to free it by pointer: a sorted table would do,
 * an open hash of pointer -> size is simpler to keep right */
typedef struct {
    void *p;
    size_t bytes;
} live;
static live *table;
static size_t table_cap, table_n;

/* The device's memory: the reservation, or fewer bytes from
 * UTRAIN_SIM_MEMORY (to run out of memory on purpose), read once. */
static pthread_once_t cap_once = PTHREAD_ONCE_INIT;
static size_t cap_bytes;

static void read_cap(void) {
    cap_bytes = SIM_RESERVE;
    const char *e = getenv("UTRAIN_SIM_MEMORY");
    if (!e || !*e) return;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(e, &end, 10);
    if (errno || *end || v == 0 || v > SIM_RESERVE || *e == '-')
        ut_fail_exit("UTRAIN_SIM_MEMORY: '%s' is not a number of bytes from 1 to %zu (the sim device's memory)", e,
                     (size_t)SIM_RESERVE);
    cap_bytes = (size_t)v;
}

static size_t sim_cap(void) {
    pthread_once(&cap_once, read_cap);
    return cap_bytes;
}

static void reserve(void) {
    if (base) return;
    void *p = mmap(NULL, SIM_RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        ut_abort(__FILE__, __LINE__, "sim device: cannot reserve %zu bytes of address space: %s", SIM_RESERVE,
                 strerror(errno));
    base = p;
    cap = sim_cap();
}

static void protect(int prot) {
    if (top && mprotect(base, top, prot))
        ut_abort(__FILE__, __LINE__, "sim device: mprotect: %s", strerror(errno));
}

/* The window: open for the duration of one call of this backend. */
static void enter(void) {
    pthread_mutex_lock(&mu);
    if (depth++ == 0) protect(PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&mu);
}
static void leave(void) {
    pthread_mutex_lock(&mu);
    if (--depth == 0) protect(PROT_NONE);
    pthread_mutex_unlock(&mu);
}

static size_t hash(const void *p) { return ((uintptr_t)p >> 6) * 0x9E3779B97F4A7C15ULL; }

static void table_put(void *p, size_t bytes);
static void table_grow(void) {
    live *old = table;
    size_t cap = table_cap;
    table_cap = cap ? 2 * cap : 1024;
    table = ut_calloc_check(table_cap, sizeof *table);
    table_n = 0;
    for (size_t i = 0; i < cap; i++)
        if (old[i].p) table_put(old[i].p, old[i].bytes);
    ut_free(old);
}
static void table_put(void *p, size_t bytes) {
    if (2 * (table_n + 1) > table_cap) table_grow();
    size_t i = hash(p) & (table_cap - 1);
    while (table[i].p) i = (i + 1) & (table_cap - 1);
    table[i] = (live){p, bytes};
    table_n++;
}
/* Removes p; its size, or 0 if p is not a live allocation. */
static size_t table_take(void *p) {
    if (!table_cap) return 0;
    size_t i = hash(p) & (table_cap - 1);
    while (table[i].p && table[i].p != p) i = (i + 1) & (table_cap - 1);
    if (!table[i].p) return 0;
    size_t bytes = table[i].bytes;
    table[i].p = NULL;
    table_n--;
    /* re-insert the rest of the cluster (linear probing) */
    for (size_t j = (i + 1) & (table_cap - 1); table[j].p; j = (j + 1) & (table_cap - 1)) {
        live e = table[j];
        table[j].p = NULL;
        table_n--;
        table_put(e.p, e.bytes);
    }
    return bytes;
}

static void *cut(size_t bytes, size_t align) {
    size_t at = (top + align - 1) / align * align;
    if (at + bytes > cap)
        ut_fail_oom("sim device: out of memory (%zu bytes asked, %zu of %zu in use). Make a step smaller: lower "
                    "train.batch_size", bytes, top, cap);
    top = at + bytes;
    /* new memory joins the window if it is open */
    if (depth && mprotect(base, top, PROT_READ | PROT_WRITE))
        ut_abort(__FILE__, __LINE__, "sim device: mprotect: %s", strerror(errno));
    return base + at;
}

static void *alloc_aligned(size_t bytes, size_t align) {
    bytes = (bytes ? bytes : 1);
    bytes = (bytes + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN;
    pthread_mutex_lock(&mu);
    reserve();
    void *p = NULL;
    for (int i = 0; i < nfree_sizes && !p; i++)
        if (freelist[i].bytes == bytes && freelist[i].n) {
            p = freelist[i].ptrs[--freelist[i].n];
            if ((uintptr_t)p % align) {
                freelist[i].n++;
                p = NULL;
                break;
            }
        }
    if (!p) p = cut(bytes, align);
    table_put(p, bytes);
    pthread_mutex_unlock(&mu);
    return p;
}

static void *sim_alloc(size_t bytes) { return alloc_aligned(bytes, SIM_ALIGN); }

static void free_now(void *p) {
    if (!p) return;
    pthread_mutex_lock(&mu);
    size_t bytes = table_take(p);
    if (!bytes) ut_abort(__FILE__, __LINE__, "sim device: free of %p, which is not sim device memory", p);
    int i = 0;
    while (i < nfree_sizes && freelist[i].bytes != bytes) i++;
    if (i == nfree_sizes) {
        if (nfree_sizes == NBUCKET) { /* too many sizes: leave this block unused */
            pthread_mutex_unlock(&mu);
            return;
        }
        freelist[nfree_sizes++].bytes = bytes;
    }
    if (freelist[i].n == freelist[i].cap) {
        freelist[i].cap = freelist[i].cap ? 2 * freelist[i].cap : 16;
        freelist[i].ptrs = ut_realloc_check(freelist[i].ptrs, (size_t)freelist[i].cap * sizeof(void *));
    }
    freelist[i].ptrs[freelist[i].n++] = p;
    pthread_mutex_unlock(&mu);
}

// --- streams: a queue of work and the worker thread that runs it -------------

typedef struct sim_stream sim_stream;

/* One event: the point of its stream when it was recorded (done once the
 * stream has finished that many items). Never recorded: already done. */
typedef struct {
    sim_stream *s;
    uint64_t seq;
} sim_event;

enum { IT_KERNEL, IT_COPY, IT_MEMSET, IT_CONVERT, IT_ROUND, IT_SCALE, IT_SUM_SQ, IT_ACCUMULATE, IT_OPTIM, IT_RELEASE,
       IT_FREE, IT_WAIT, IT_SCALARS, IT_HOST, IT_STAMP };

typedef struct sim_item sim_item;
struct sim_item {
    int kind;
    sim_item *next;
    union {
        struct { /* a kernel with its headers as they were at launch */
            ut_op_fn fn;
            ut_tensor *orig, *orig_src[UT_MAX_SRC];
            ut_tensor snap, srcs[UT_MAX_SRC];
            ut_kctx k;
        } kern;
        struct {
            void *dst;
            const void *src;
            size_t bytes;
            void *owned; /* host bytes taken at the call, freed once copied */
        } copy;
        struct {
            void *p;
            int v;
            size_t bytes;
        } set;
        struct {
            void *dst;
            const void *src;
            ut_dtype to, from;
            int64_t n;
        } conv;
        struct {
            float *x;
            int64_t n;
            float s;
            double *sq; /* IT_SUM_SQ: where the sum goes; IT_SCALARS: what it reads */
            double max_norm; /* IT_SCALARS (x: the two scalars, s: the loss scale) */
        } scale;
        struct {
            float *dst;
            float **src; /* owned */
            int nsrc;
            int64_t n;
            bool zero;
        } acc;
        struct {
            ut_optim_buffers b;
            ut_optim_run *runs; /* owned */
            ut_param_seg *segs; /* owned (Adafactor) */
            int64_t *soff;
            ut_optim_consts k;
            bool zero;
        } opt;
        struct {
            void *base;
            size_t off, len;
        } rel;
        sim_event wait;
        struct { /* IT_HOST: a host function the stream runs in order */
            void (*fn)(void *);
            void *arg;
        } host;
    } u;
};

struct sim_stream {
    pthread_mutex_t mu;
    pthread_cond_t work, done_cv;
    sim_item *head, *tail;
    uint64_t queued, done;
    bool stop;
    pthread_t thread;
    char err[512]; /* the first data error a kernel found since data_error */
    bool has_err;
    /* the worker's kernel scratch: one buffer taken from in turn, what does
     * not fit apart, all given back when the kernel ends */
    char *pool;
    size_t cap, used, need;
    void *spill[2 * UT_MAX_SRC + 8];
    int nspill;
};

static __thread sim_stream *t_worker; /* the stream whose worker this thread is */
static sim_stream *g_compute;
static pthread_once_t compute_once = PTHREAD_ONCE_INIT;

static void run_item(sim_stream *s, sim_item *it);

static void *worker(void *arg) {
    sim_stream *s = arg;
    t_worker = s;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
        sim_item *it = s->head;
        if (!it) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        pthread_mutex_unlock(&s->mu);
        run_item(s, it);
        pthread_mutex_lock(&s->mu);
        s->head = it->next;
        if (!s->head) s->tail = NULL;
        s->done++;
        pthread_cond_broadcast(&s->done_cv);
        pthread_mutex_unlock(&s->mu);
        ut_free(it);
    }
}

static sim_stream *stream_make(void) {
    sim_stream *s = ut_calloc_check(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    if (pthread_create(&s->thread, NULL, worker, s))
        ut_abort(__FILE__, __LINE__, "sim device: cannot start a stream's worker thread");
    return s;
}

/* Waits until s has run seq items (its point when seq were queued). */
static void wait_point(sim_stream *s, uint64_t seq) {
    pthread_mutex_lock(&s->mu);
    while (s->done < seq) pthread_cond_wait(&s->done_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* Waits until everything queued on s so far has run. */
static void drain(sim_stream *s) {
    if (t_worker == s)
        ut_abort(__FILE__, __LINE__, "sim device: a stream's own worker waited for its stream (a kernel called "
                                     "a backend function that waits)");
    pthread_mutex_lock(&s->mu);
    uint64_t want = s->queued;
    pthread_mutex_unlock(&s->mu);
    wait_point(s, want);
}

static void drain_compute_at_exit(void) { drain(g_compute); }
static void compute_init(void) {
    g_compute = stream_make();
    atexit(drain_compute_at_exit); /* queued work finishes before the process's memory goes */
}
static sim_stream *compute(void) {
    pthread_once(&compute_once, compute_init);
    return g_compute;
}
static sim_stream *stream_of(void *s) { return s ? s : compute(); }

static sim_item *item(int kind) {
    sim_item *it = ut_calloc_check(1, sizeof *it);
    it->kind = kind;
    return it;
}
static void push(sim_stream *s, sim_item *it) {
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = it;
    else s->head = it;
    s->tail = it;
    s->queued++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

// --- what the worker runs ------------------------------------------------------

/* The worker's kernel context: the launch's, with this stream's error flag
 * and scratch. */
static void w_fail(const ut_kctx *k, const char *msg) {
    (void)k;
    sim_stream *s = t_worker;
    pthread_mutex_lock(&s->mu);
    if (!s->has_err) {
        snprintf(s->err, sizeof s->err, "%s", msg);
        s->has_err = true;
    }
    pthread_mutex_unlock(&s->mu);
}
static float *w_scratch(const ut_kctx *k, size_t bytes) {
    (void)k;
    sim_stream *s = t_worker;
    bytes = (bytes + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN;
    s->need += bytes;
    if (s->used + bytes <= s->cap) {
        void *p = s->pool + s->used;
        s->used += bytes;
        return p;
    }
    if (s->nspill == (int)(sizeof s->spill / sizeof *s->spill))
        ut_abort(__FILE__, __LINE__, "sim device: a kernel took scratch more than %d times", s->nspill);
    return s->spill[s->nspill++] = alloc_aligned(bytes, SIM_ALIGN);
}
static void w_scratch_release(const ut_kctx *k) {
    (void)k;
    sim_stream *s = t_worker;
    for (int i = 0; i < s->nspill; i++) free_now(s->spill[i]);
    if (s->need > s->cap) {
        free_now(s->pool);
        s->pool = alloc_aligned(s->need, SIM_ALIGN);
        s->cap = s->need;
    }
    s->nspill = 0, s->used = 0, s->need = 0;
}
static const void *w_round16(const ut_kctx *k, const ut_tensor *s, int64_t n, ut_dtype dt, bool backward) {
    (void)k, (void)s, (void)n, (void)dt, (void)backward;
    ut_abort(__FILE__, __LINE__, "sim device: a kernel asked for kept 16-bit parameter copies (ut_kround16), "
                                 "which core keeps on the host; the CPU's kernels do not");
}

/* What a kernel saves in its tensor's header (saved buffers, the integer
 * and float parameters it sets) goes to the real header, slot by slot where
 * it changed, and comes from it when a later kernel reads it. */
static void take_saved(ut_tensor *snap, const ut_tensor *orig) {
    memcpy(snap->aux, orig->aux, sizeof snap->aux);
    memcpy(snap->ip, orig->ip, sizeof snap->ip);
    memcpy(snap->fp, orig->fp, sizeof snap->fp);
}
static void give_saved(ut_tensor *orig, const ut_tensor *before, const ut_tensor *after) {
    for (int i = 0; i < UT_MAX_AUX; i++)
        if (after->aux[i] != before->aux[i]) orig->aux[i] = after->aux[i];
    for (int i = 0; i < UT_MAX_IPARAMS; i++)
        if (after->ip[i] != before->ip[i]) orig->ip[i] = after->ip[i];
    for (int i = 0; i < UT_MAX_FPARAMS; i++)
        if (memcmp(&after->fp[i], &before->fp[i], sizeof(float))) orig->fp[i] = after->fp[i];
}

static void run_kernel(sim_stream *s, sim_item *it) {
    pthread_mutex_lock(&s->mu);
    bool skip = s->has_err;
    pthread_mutex_unlock(&s->mu);
    if (skip) return;
    ut_tensor *t = &it->u.kern.snap;
    take_saved(t, it->u.kern.orig);
    for (int i = 0; i < UT_MAX_SRC; i++)
        if (it->u.kern.orig_src[i] && t->src[i] == &it->u.kern.srcs[i])
            take_saved(&it->u.kern.srcs[i], it->u.kern.orig_src[i]);
    ut_tensor before = *t;
    ut_kctx k = it->u.kern.k;
    k.fail = w_fail, k.scratch = w_scratch, k.scratch_release = w_scratch_release, k.round16 = w_round16;
    if (omp_get_max_threads() != ut_kthreads(&k)) omp_set_num_threads(ut_kthreads(&k)); /* the launch's count */
    enter();
    it->u.kern.fn(t, &k);
    leave();
    w_scratch_release(&k);
    give_saved(it->u.kern.orig, &before, t);
}

static double stamp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_item(sim_stream *s, sim_item *it) {
    if (it->kind == IT_KERNEL) {
        run_kernel(s, it);
        return;
    }
    if (it->kind == IT_WAIT) {
        sim_event e = it->u.wait;
        if (e.s && e.s != s) wait_point(e.s, e.seq);
        return;
    }
    if (it->kind == IT_FREE) {
        free_now(it->u.set.p);
        return;
    }
    enter();
    switch (it->kind) {
    case IT_COPY: memcpy(it->u.copy.dst, it->u.copy.src, it->u.copy.bytes); break;
    case IT_MEMSET: ut_cpu_memset(it->u.set.p, it->u.set.v, it->u.set.bytes); break;
    case IT_CONVERT: ut_cpu_convert(it->u.conv.dst, it->u.conv.to, it->u.conv.src, it->u.conv.from, it->u.conv.n); break;
    case IT_ROUND: ut_cpu_round(it->u.conv.dst, it->u.conv.src, it->u.conv.n, it->u.conv.to); break;
    case IT_SCALE: ut_cpu_scale(it->u.scale.x, it->u.scale.n, it->u.scale.s); break;
    case IT_SUM_SQ: ut_cpu_sum_sq_to(it->u.scale.sq, it->u.scale.x, it->u.scale.n); break;
    case IT_SCALARS: ut_cpu_step_scalars(it->u.scale.x, it->u.scale.sq, it->u.scale.max_norm, it->u.scale.s); break;
    case IT_ACCUMULATE:
        ut_cpu_accumulate(it->u.acc.dst, it->u.acc.src, it->u.acc.nsrc, it->u.acc.n, it->u.acc.zero);
        break;
    case IT_OPTIM: ut_cpu_optim_step(&it->u.opt.b, &it->u.opt.k, it->u.opt.zero); break;
    case IT_RELEASE: ut_cpu_pages_release(it->u.rel.base, it->u.rel.off, it->u.rel.len); break;
    case IT_HOST: it->u.host.fn(it->u.host.arg); break;
    case IT_STAMP: *(double *)it->u.host.arg = stamp_now(); break;
    default: ut_abort(__FILE__, __LINE__, "sim device: unknown work item %d", it->kind);
    }
    leave();
    if (it->kind == IT_COPY) ut_free(it->u.copy.owned);
    if (it->kind == IT_ACCUMULATE) ut_free(it->u.acc.src);
    if (it->kind == IT_OPTIM) ut_free(it->u.opt.runs), ut_free(it->u.opt.segs), ut_free(it->u.opt.soff);
}

// --- memory calls ------------------------------------------------------------

/* Ordered on the compute stream: the block is reused only after the work
 * queued before it has run. A stream's worker frees its own scratch now. */
static void sim_free(void *p) {
    if (!p) return;
    if (t_worker) {
        free_now(p);
        return;
    }
    sim_item *it = item(IT_FREE);
    it->u.set.p = p;
    push(compute(), it);
}

static size_t page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static void *sim_pages_alloc(size_t bytes) {
    size_t pg = page(), b = ((bytes ? bytes : 1) + pg - 1) / pg * pg;
    void *p = alloc_aligned(b, pg);
    enter(); /* zeroed, as pages_alloc promises (a reused block holds old data;
              * nothing queued can still use it: frees are ordered) */
    memset(p, 0, b);
    leave();
    return p;
}
static void sim_pages_free(void *p, size_t bytes) {
    (void)bytes;
    sim_free(p);
}
static void sim_pages_release(void *b, size_t off, size_t len) {
    sim_item *it = item(IT_RELEASE);
    it->u.rel.base = b, it->u.rel.off = off, it->u.rel.len = len;
    push(compute(), it);
}
static size_t sim_pages_resident(const void *b, size_t bytes) {
    drain(compute());
    return ut_cpu_pages_resident(b, bytes);
}

static void memset_on(void *stream, void *p, int v, size_t bytes) {
    sim_item *it = item(IT_MEMSET);
    it->u.set.p = p, it->u.set.v = v, it->u.set.bytes = bytes;
    push(stream_of(stream), it);
}
static void sim_memset(void *p, int v, size_t bytes) { memset_on(NULL, p, v, bytes); }
static void sim_memset_async(void *p, int v, size_t bytes, void *stream) { memset_on(stream, p, v, bytes); }

/* A copy queued on stream; keep: the host bytes of an H2D copy are taken now. */
static void copy_on(void *stream, void *dst, const void *src, size_t bytes, ut_copy_kind kind, bool keep) {
    sim_item *it = item(IT_COPY);
    it->u.copy.dst = dst, it->u.copy.src = src, it->u.copy.bytes = bytes;
    if (keep && kind == UT_COPY_H2D) {
        it->u.copy.owned = ut_malloc_check(bytes ? bytes : 1);
        memcpy(it->u.copy.owned, src, bytes);
        it->u.copy.src = it->u.copy.owned;
    }
    push(stream_of(stream), it);
}
/* Reads of device memory by the host (synchronous D2H copies, sum_sq),
 * counted for tests/unit/test_sim.c: a model's forward on prepared inputs
 * makes none. */
static _Atomic unsigned long host_reads;
unsigned long ut_sim_host_reads(void);
unsigned long ut_sim_host_reads(void) { return host_reads; }

static void sim_copy(void *dst, const void *src, size_t bytes, ut_copy_kind kind) {
    if (kind == UT_COPY_H2H) {
        memcpy(dst, src, bytes);
    } else if (kind == UT_COPY_D2H) { /* the host reads the result next */
        host_reads++;
        drain(compute());
        enter();
        memcpy(dst, src, bytes);
        leave();
    } else {
        copy_on(NULL, dst, src, bytes, kind, true);
    }
}
static void sim_copy_async(void *dst, const void *src, size_t bytes, ut_copy_kind kind, void *stream) {
    copy_on(stream, dst, src, bytes, kind, false);
}

static void sim_convert(void *dst, ut_dtype to, const void *src, ut_dtype from, int64_t n) {
    sim_item *it = item(IT_CONVERT);
    it->u.conv.dst = dst, it->u.conv.to = to, it->u.conv.src = src, it->u.conv.from = from, it->u.conv.n = n;
    push(compute(), it);
}
static void sim_round(float *dst, const float *src, int64_t n, ut_dtype dt) {
    sim_item *it = item(IT_ROUND);
    it->u.conv.dst = dst, it->u.conv.src = src, it->u.conv.n = n, it->u.conv.to = dt;
    push(compute(), it);
}
static double sim_sum_sq(const float *x, int64_t n) {
    host_reads++;
    drain(compute());
    enter();
    double s = ut_cpu_sum_sq(x, n);
    leave();
    return s;
}
static void sim_sum_sq_to(double *dst, const float *x, int64_t n) {
    sim_item *it = item(IT_SUM_SQ);
    it->u.scale.x = (float *)x, it->u.scale.n = n, it->u.scale.sq = dst;
    push(compute(), it);
}
static void sim_step_scalars(float *dst, const double *sq, double max_norm, float scale) {
    sim_item *it = item(IT_SCALARS);
    it->u.scale.x = dst, it->u.scale.sq = (double *)sq, it->u.scale.max_norm = max_norm, it->u.scale.s = scale;
    push(compute(), it);
}
static void sim_scale(float *x, int64_t n, float s) {
    sim_item *it = item(IT_SCALE);
    it->u.scale.x = x, it->u.scale.n = n, it->u.scale.s = s;
    push(compute(), it);
}
static void sim_accumulate(float *dst, float *const *src, int nsrc, int64_t n, bool zero_src) {
    sim_item *it = item(IT_ACCUMULATE);
    it->u.acc.dst = dst, it->u.acc.nsrc = nsrc, it->u.acc.n = n, it->u.acc.zero = zero_src;
    it->u.acc.src = ut_malloc_check((size_t)(nsrc ? nsrc : 1) * sizeof(float *));
    memcpy(it->u.acc.src, src, (size_t)nsrc * sizeof(float *));
    push(compute(), it);
}
static void sim_optim_step(const ut_optim_buffers *b, const ut_optim_consts *k, bool zero) {
    sim_item *it = item(IT_OPTIM);
    it->u.opt.b = *b, it->u.opt.k = *k, it->u.opt.zero = zero;
    it->u.opt.runs = ut_malloc_check((size_t)(b->nruns ? b->nruns : 1) * sizeof *b->runs);
    memcpy(it->u.opt.runs, b->runs, (size_t)b->nruns * sizeof *b->runs);
    it->u.opt.b.runs = it->u.opt.runs;
    if (b->nsegs) { /* Adafactor's parameters, kept with the item until it runs */
        it->u.opt.segs = ut_malloc_check((size_t)b->nsegs * sizeof *b->segs);
        it->u.opt.soff = ut_malloc_check((size_t)b->nsegs * sizeof *b->soff);
        memcpy(it->u.opt.segs, b->segs, (size_t)b->nsegs * sizeof *b->segs);
        memcpy(it->u.opt.soff, b->soff, (size_t)b->nsegs * sizeof *b->soff);
        it->u.opt.b.segs = it->u.opt.segs, it->u.opt.b.soff = it->u.opt.soff;
    }
    push(compute(), it);
}

/* Data errors the compute stream's kernels found: waits for it first, also
 * when not asked to (the stream's worker reports them as it runs). */
static int sim_data_error(bool wait, char *err, size_t n) {
    (void)wait;
    sim_stream *s = compute();
    drain(s);
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->has_err) {
        snprintf(err, n, "%s", s->err);
        s->has_err = false;
        rc = -1;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Whether p (NULL: no buffer) is memory of this device. */
static bool on_device(const void *p) {
    if (!p) return true;
    pthread_mutex_lock(&mu);
    bool in = base && (const char *)p >= base && (const char *)p < base + top;
    pthread_mutex_unlock(&mu);
    return in;
}

/* Every buffer a kernel of t reads or writes is memory of this device: a
 * tensor over host memory (what ut_tensor_wrap of a host array makes) would
 * be an invalid pointer on a real device, so it is an error naming the op
 * and the tensor, not a kernel that happens to work. */
static bool buffers_on_device(ut_tensor *t, const ut_kctx *k, bool backward) {
    char bad[32] = "";
    if (!on_device(t->data) || (backward && !on_device(t->grad))) snprintf(bad, sizeof bad, "its output");
    for (int i = 0; !*bad && i < UT_MAX_SRC; i++)
        if (t->src[i] && (!on_device(t->src[i]->data) || (backward && !on_device(t->src[i]->grad))))
            snprintf(bad, sizeof bad, "input %d", i);
    if (!*bad) return true;
    ut_kfail(k, "%s: %s holds host memory, not sim device memory (a tensor made over a host array "
                             "reached a device kernel: copy inputs in with ut_tensor_from)",
                     ut_op_name(t->op), bad);
    return false;
}

/* Queues fn on t, with copies of t's header and its sources' as they are
 * now. A backward that may set src[0]'s gradient itself
 * (UT_OPP_OWNS_SRC0_GRAD) gets a zeroed one now instead: the host launches
 * the next backward before this one has run, and that one reads it. */
static void launch(ut_op_fn fn, ut_tensor *t, const ut_kctx *k, bool backward) {
    if (!buffers_on_device(t, k, backward)) return;
    if (backward && ut_op_is(t->op, UT_OPP_OWNS_SRC0_GRAD) && t->src[0] && t->src[0]->requires_grad)
        ut_grad(t->src[0]);
    sim_item *it = item(IT_KERNEL);
    it->u.kern.fn = fn;
    it->u.kern.orig = t;
    it->u.kern.snap = *t;
    it->u.kern.k = *k;
    for (int i = 0; i < UT_MAX_SRC; i++) {
        ut_tensor *s = t->src[i];
        if (!s) continue;
        int j = 0;
        while (j < i && t->src[j] != s) j++;
        if (j < i) { /* the same source twice: one copy, as the kernel may compare them */
            it->u.kern.snap.src[i] = it->u.kern.snap.src[j];
            continue;
        }
        it->u.kern.orig_src[i] = s;
        it->u.kern.srcs[i] = *s;
        it->u.kern.snap.src[i] = &it->u.kern.srcs[i];
    }
    push(stream_of(k->stream), it);
}

/* The op table: each CPU kernel queued, after its buffers are checked;
 * core's own ops (the checkpoint) run ops of this table themselves. */
#define UT_OP(E, stem, props)                                                                                  \
    static void stem##_fwd(ut_tensor *t, const ut_kctx *k) { launch(ut_##stem##_fwd_cpu, t, k, false); }     \
    static void stem##_bwd(ut_tensor *t, const ut_kctx *k) { launch(ut_##stem##_bwd_cpu, t, k, true); }
#define UT_OP_ANY(E, stem, props)
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP

/* The kernels are the CPU's, and so are their 16-bit capabilities
 * (src/backend/cpu/caps.h). */
static const ut_op_vtable ops[UT_OP_COUNT] = {
    [UT_OP_NONE] = {NULL, NULL, 0},
#define UT_OP(E, stem, props) [UT_OP_##E] = {stem##_fwd, stem##_bwd, CAPS_##E},
#define UT_OP_ANY(E, stem, props) [UT_OP_##E] = {ut_##stem##_fwd, ut_##stem##_bwd, 0},
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP
};

// --- streams and events --------------------------------------------------------

/* The compute stream is the one every context shares (as CUDA's backend has
 * one per process); any other kind gets a stream and a worker of its own. */
static void *sim_stream_new(ut_stream_kind kind) { return kind == UT_STREAM_COMPUTE ? compute() : stream_make(); }
static void sim_stream_sync(void *s) { drain(stream_of(s)); }
static void sim_stream_free(void *p) {
    sim_stream *s = p;
    if (!s || s == g_compute) return;
    drain(s);
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    free_now(s->pool);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done_cv);
    ut_free(s);
}

/* Queued kernels read and write back their tensors' headers when they run. */
static void sim_headers_released(void) {
    if (g_compute) drain(g_compute);
}

/* An event; a timer (timer_new) also keeps when its stream's worker reached
 * it (the host's clock: sim's "device time" is the worker's). */
typedef struct {
    sim_event e; /* first: the streams read an event as a sim_event */
    bool timed;
    double t;
} sim_timer;

static void *sim_event_new(void) { return ut_calloc_check(1, sizeof(sim_timer)); }
static void *sim_timer_new(void) {
    sim_timer *t = ut_calloc_check(1, sizeof *t);
    t->timed = true;
    return t;
}
static double sim_timer_ms(void *a, void *b) { return 1e3 * (((sim_timer *)b)->t - ((sim_timer *)a)->t); }
static void sim_event_free(void *e) { ut_free(e); }
static void sim_event_record(void *ev, void *stream) {
    sim_event *e = ev;
    sim_stream *s = stream_of(stream);
    if (((sim_timer *)ev)->timed) { /* the stamp, then the point after it */
        sim_item *it = item(IT_STAMP);
        it->u.host.arg = &((sim_timer *)ev)->t;
        push(s, it);
    }
    pthread_mutex_lock(&s->mu);
    e->s = s, e->seq = s->queued;
    pthread_mutex_unlock(&s->mu);
}
static void sim_event_sync(void *ev) {
    sim_event e = *(sim_event *)ev;
    if (!e.s) return;
    if (t_worker == e.s) ut_abort(__FILE__, __LINE__, "sim device: a stream's worker waited for its own event");
    wait_point(e.s, e.seq);
}
static bool sim_event_done(void *ev) {
    sim_event e = *(sim_event *)ev;
    if (!e.s) return true;
    pthread_mutex_lock(&e.s->mu);
    bool done = e.s->done >= e.seq;
    pthread_mutex_unlock(&e.s->mu);
    return done;
}
static void sim_event_wait(void *stream, void *ev) {
    sim_item *it = item(IT_WAIT);
    it->u.wait = *(sim_event *)ev;
    push(stream_of(stream), it);
}

/* The simulated device's memory: its reserved address space, or
 * UTRAIN_SIM_MEMORY bytes. */
static size_t sim_memory(void) { return sim_cap(); }

/* The direct collectives' host function (src/dist/comm_device.c): run by the
 * stream's worker in order, the window open, so the host communicator it
 * calls reads and writes the device's memory as a GPU's library would. */
static void sim_enqueue_host(void *stream, void (*fn)(void *), void *arg) {
    sim_item *it = item(IT_HOST);
    it->u.host.fn = fn, it->u.host.arg = arg;
    push(stream_of(stream), it);
}

/* Every process has a simulated device of its own. */
static int sim_device_key(char *buf, size_t n) {
    snprintf(buf, n, "sim-%ld", (long)getpid());
    return 0;
}

const ut_backend ut_backend_sim = {
    .name = "sim",
    .device = UT_SIM,
    .host_memory = false,
    .memory = sim_memory,
    .data_error = sim_data_error,
    .alloc = sim_alloc,
    .free = sim_free,
    .pages_alloc = sim_pages_alloc,
    .pages_release = sim_pages_release,
    .pages_free = sim_pages_free,
    .pages_resident = sim_pages_resident,
    .memset = sim_memset,
    .copy = sim_copy,
    .copy_async = sim_copy_async,
    .memset_async = sim_memset_async,
    .convert = sim_convert,
    .round = sim_round,
    .ops = ops,
    .matmul_path = ut_cpu_matmul_path,
    .conv2d_path = ut_cpu_conv2d_path, /* sim runs the CPU's kernels */
    .conv2d_relu = true,
    .linear_gelu = true,
    .sum_sq = sim_sum_sq,
    .sum_sq_to = sim_sum_sq_to,
    .scale = sim_scale,
    .accumulate = sim_accumulate,
    .optim_step = sim_optim_step,
    .step_scalars = sim_step_scalars,
    .stream_new = sim_stream_new,
    .stream_sync = sim_stream_sync,
    .stream_free = sim_stream_free,
    .headers_released = sim_headers_released,
    .event_new = sim_event_new,
    .event_record = sim_event_record,
    .event_wait = sim_event_wait,
    .event_sync = sim_event_sync,
    .event_done = sim_event_done,
    .event_free = sim_event_free,
    .timer_new = sim_timer_new,
    .timer_ms = sim_timer_ms,
    .enqueue_host = sim_enqueue_host,
    .device_key = sim_device_key,
};
