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
 * boundaries, so pages_release can give them back with madvise.
 *
 * The window: every call of this backend (a kernel, a copy, a memset, the
 * flat math) opens the mapping for reading and writing for its duration and
 * closes it after (mprotect), counted, so nested calls (a kernel that
 * allocates its scratch) and calls from several host threads at once (the
 * dp strategy's workers) keep it open until the last one leaves. Host code
 * that reads device memory outside a call of this backend therefore faults
 * whenever no other thread is inside one; the tests run it single-threaded
 * where it matters.
 *
 * Work is synchronous (streams are NULL), as on the CPU: the streams and
 * events of the device-seam work queue it on a worker thread later. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../cpu/caps.h"
#include "../cpu/cpu.h"
#include "../cpu/gemm.h"
#include "utrain/base.h"

#define SIM_RESERVE ((size_t)64 << 30) /* address space, not memory */
#define SIM_ALIGN 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *base;       /* the reserved mapping */
static size_t top;       /* bytes cut from it so far */
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

static void reserve(void) {
    if (base) return;
    void *p = mmap(NULL, SIM_RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        ut_abort(__FILE__, __LINE__, "sim device: cannot reserve %zu bytes of address space: %s", SIM_RESERVE,
                 strerror(errno));
    base = p;
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
    if (at + bytes > SIM_RESERVE)
        ut_abort(__FILE__, __LINE__, "sim device: out of memory (%zu bytes asked, %zu of %zu in use)", bytes, top,
                 SIM_RESERVE);
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

static void sim_free(void *p) {
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

static size_t page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static void *sim_pages_alloc(size_t bytes) {
    size_t pg = page(), b = ((bytes ? bytes : 1) + pg - 1) / pg * pg;
    void *p = alloc_aligned(b, pg);
    enter(); /* zeroed, as pages_alloc promises (a reused block holds old data) */
    memset(p, 0, b);
    leave();
    return p;
}
static void sim_pages_free(void *p, size_t bytes) {
    (void)bytes;
    sim_free(p);
}
static void sim_pages_release(void *b, size_t off, size_t len) {
    enter();
    ut_cpu_pages_release(b, off, len);
    leave();
}
static size_t sim_pages_resident(const void *b, size_t bytes) { return ut_cpu_pages_resident(b, bytes); }

// --- every other call: the CPU's, inside the window ------------------------

static void sim_memset(void *p, int v, size_t bytes) {
    enter();
    ut_cpu_memset(p, v, bytes);
    leave();
}
static void sim_copy(void *dst, const void *src, size_t bytes, ut_copy_kind kind) {
    enter();
    ut_cpu_copy(dst, src, bytes, kind);
    leave();
}
static void sim_convert(void *dst, ut_dtype to, const void *src, ut_dtype from, int64_t n) {
    enter();
    ut_cpu_convert(dst, to, src, from, n);
    leave();
}
static void sim_round(float *dst, const float *src, int64_t n, ut_dtype dt) {
    enter();
    ut_cpu_round(dst, src, n, dt);
    leave();
}
static double sim_sum_sq(const float *x, int64_t n) {
    enter();
    double s = ut_cpu_sum_sq(x, n);
    leave();
    return s;
}
static void sim_scale(float *x, int64_t n, float s) {
    enter();
    ut_cpu_scale(x, n, s);
    leave();
}
static void sim_accumulate(float *dst, float *const *src, int nsrc, int64_t n, bool zero_src) {
    enter();
    ut_cpu_accumulate(dst, src, nsrc, n, zero_src);
    leave();
}
static void sim_optim_step(const ut_optim_buffers *b, const ut_optim_consts *k, bool zero) {
    enter();
    ut_cpu_optim_step(b, k, zero);
    leave();
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

/* The op table: each CPU kernel inside the window, after its buffers are
 * checked; core's own ops (the checkpoint) run ops of this table themselves. */
#define UT_OP(E, stem, props)                                                                                  \
    static void stem##_fwd(ut_tensor *t, const ut_kctx *k) {                                                   \
        if (!buffers_on_device(t, k, false)) return;                                                           \
        enter();                                                                                               \
        ut_##stem##_fwd_cpu(t, k);                                                                             \
        leave();                                                                                               \
    }                                                                                                          \
    static void stem##_bwd(ut_tensor *t, const ut_kctx *k) {                                                   \
        if (!buffers_on_device(t, k, true)) return;                                                            \
        enter();                                                                                               \
        ut_##stem##_bwd_cpu(t, k);                                                                             \
        leave();                                                                                               \
    }
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

static void *stream_new(ut_stream_kind kind) {
    (void)kind;
    return NULL;
}
static void stream_noop(void *s) { (void)s; }

/* The simulated device's memory: its reserved address space. */
static size_t sim_memory(void) { return SIM_RESERVE; }

const ut_backend ut_backend_sim = {
    .name = "sim",
    .device = UT_SIM,
    .host_memory = false,
    .memory = sim_memory,
    .alloc = sim_alloc,
    .free = sim_free,
    .pages_alloc = sim_pages_alloc,
    .pages_release = sim_pages_release,
    .pages_free = sim_pages_free,
    .pages_resident = sim_pages_resident,
    .memset = sim_memset,
    .copy = sim_copy,
    .convert = sim_convert,
    .round = sim_round,
    .ops = ops,
    .matmul_path = ut_cpu_matmul_path,
    .sum_sq = sim_sum_sq,
    .scale = sim_scale,
    .accumulate = sim_accumulate,
    .optim_step = sim_optim_step,
    .stream_new = stream_new,
    .stream_sync = stream_noop,
    .stream_free = stream_noop,
};
