/* The CUDA emulator's scheduler (cuda_emu.h): a block's threads as fibers
 * on one host thread, barriers that open when every live thread of their
 * warp or block has reached one, and the checks the header lists. */
#include "cuda_emu.h"

#include <setjmp.h>
#include <stdarg.h>
#include <ucontext.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace utemu {

namespace {
std::map<std::string, long> *g_tally; /* UT_EMU_LAUNCHES: what was queued, by name */

void print_tally() {
    long total = 0;
    std::vector<std::pair<long, std::string>> rows;
    for (auto &e : *g_tally) {
        total += e.second;
        rows.push_back({e.second, e.first});
    }
    std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
    fprintf(stderr, "emulated GPU: %ld launches and copies\n", total);
    for (auto &r : rows) fprintf(stderr, "  %8ld  %s\n", r.first, r.second.c_str());
}
} // namespace

/* Any thread may queue (a loader thread's copies): the switch is read once
 * (a function's static: initialised once, whichever thread comes first) and
 * the counts kept under a lock. */
void tally(const char *what) {
    static const bool on = [] {
        const char *e = getenv("UT_EMU_LAUNCHES");
        if (!e || !*e || !strcmp(e, "0")) return false;
        g_tally = new std::map<std::string, long>;
        atexit(print_tally);
        return true;
    }();
    if (!on) return;
    static std::mutex lock;
    std::lock_guard<std::mutex> hold(lock);
    (*g_tally)[what]++;
}

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda emulator: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

namespace {

constexpr size_t STACK = 256 << 10; /* bytes of stack per emulated thread */

/* A thread's fiber runs on a stack slot of the pool. A slot's context is
 * made and entered once (getcontext, makecontext, setcontext: each a
 * system call for the signal mask); from then on its fiber switches with
 * _setjmp/_longjmp, which save no signal mask, and after a block's body it
 * parks in entry()'s loop until the next block (of any launch) gives it
 * another: no system call per switch or per block. Under AddressSanitizer,
 * which follows stack switches through swapcontext only, every switch is a
 * swapcontext and every block's threads get fresh contexts. */
#if defined(__SANITIZE_ADDRESS__)
#define UTEMU_UCONTEXT_ONLY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UTEMU_UCONTEXT_ONLY 1
#endif
#endif
#ifndef UTEMU_UCONTEXT_ONLY
#define UTEMU_UCONTEXT_ONLY 0
#endif

/* a cp.async copy not landed yet: group -1 while its group is open */
struct async_op {
    void *dst;
    const void *src;
    size_t n, src_n;
    long group;
};

/* a stack of STACK bytes and the context that runs on it */
struct slot {
    char *stack;
    ucontext_t ctx;
    jmp_buf jb; /* where its fiber goes on: after a barrier, or (parked) with the next block's body */
    bool made;  /* ctx made and entered: its fiber is in entry()'s loop (never under AddressSanitizer) */
};

struct fiber {
    slot *s;                    /* from the pool */
    thread_state st;
    std::vector<async_op> ops;  /* this thread's copies in flight */
    long groups;                /* groups it has committed */
};

/* fiber slots, kept from launch to launch (fresh stacks cost a page fault
 * per page, fresh contexts system calls), freed at exit */
struct slot_pool {
    std::vector<slot *> v;
    ~slot_pool() {
        for (slot *p : v) {
            free(p->stack);
            delete p;
        }
    }
} g_slots;
slot *slot_of(size_t i) {
    while (g_slots.v.size() <= i) {
        slot *p = new slot();
        p->stack = (char *)malloc(STACK);
        if (!p->stack) die("no memory for a fiber's stack");
        g_slots.v.push_back(p);
    }
    return g_slots.v[i];
}

struct block_run {
    const char *name;
    dim3 grid, block;
    uint3 bidx;
    std::vector<fiber> f;
    std::vector<uint64_t> slots;
    std::vector<float> tiles;
    bool async_lazy; /* cp.async copies land at the wait (else at issue) */
    void *smem;
    size_t smem_bytes;
    ucontext_t main;
    jmp_buf main_jb;
    int cur;
    const std::function<void()> *body;
};

block_run *g_run;
uint3 g_none_idx;
dim3 g_none_dim;
thread_state g_host_thread;


/* from the running fiber back to the scheduler */
void to_scheduler(block_run *r) {
    fiber &me = r->f[(size_t)r->cur];
    if (UTEMU_UCONTEXT_ONLY) swapcontext(&me.s->ctx, &r->main);
    else if (!_setjmp(me.s->jb)) _longjmp(r->main_jb, 1);
}

/* from the scheduler into fiber x */
void to_fiber(block_run *r, fiber &x) {
    if (UTEMU_UCONTEXT_ONLY) {
        swapcontext(&r->main, &x.s->ctx);
    } else if (!_setjmp(r->main_jb)) {
        if (!x.s->made) {
            x.s->made = true;
            setcontext(&x.s->ctx);
        }
        _longjmp(x.s->jb, 1);
    }
}

/* a slot's fiber: the body of each block it is given, in turn */
void entry() {
    for (;;) {
        block_run *r = g_run;
        (*r->body)();
        fiber &me = r->f[(size_t)r->cur];
        me.st.done = true;
        if (UTEMU_UCONTEXT_ONLY) swapcontext(&me.s->ctx, &r->main); /* not resumed: a fresh context next */
        else if (!_setjmp(me.s->jb)) _longjmp(r->main_jb, 1);      /* parked until its next block */
    }
}

/* opens the barriers every live thread of their group has reached; false
 * when some thread waits and none can go on */
bool open_barriers(block_run *r) {
    size_t n = r->f.size();
    bool any_wait = false, opened = false;
    /* the block: every live thread at a block barrier */
    size_t live = 0, at_block = 0;
    for (auto &x : r->f) {
        if (x.st.done) continue;
        live++;
        if (x.st.wait == 2) at_block++;
        if (x.st.wait) any_wait = true;
    }
    if (live && at_block == live) {
        for (auto &x : r->f) x.st.wait = 0;
        return true;
    }
    /* each warp: every live thread of it at a warp barrier */
    for (size_t w0 = 0; w0 < n; w0 += 32) {
        size_t wl = 0, ww = 0;
        for (size_t i = w0; i < n && i < w0 + 32; i++) {
            if (r->f[i].st.done) continue;
            wl++;
            if (r->f[i].st.wait == 1) ww++;
        }
        if (wl && ww == wl) {
            for (size_t i = w0; i < n && i < w0 + 32; i++) {
                const char *what = r->f[i].st.whole;
                if (what && (wl < 32))
                    die("%s: block (%u, %u, %u): %s in a warp of %zu live lanes of 32 (%s)", r->name, r->bidx.x,
                        r->bidx.y, r->bidx.z, what, wl,
                        w0 + 32 > n ? "a block size that leaves its last warp short" : "the others have exited");
            }
            for (size_t i = w0; i < n && i < w0 + 32; i++) r->f[i].st.wait = 0, r->f[i].st.whole = nullptr;
            opened = true;
        }
    }
    return opened || !any_wait;
}

/* x made ready to run the block's body as thread t (getcontext returns
 * twice: it is kept apart from the callers' loops) */
__attribute__((noinline)) void start_fiber(fiber &x, unsigned t, dim3 block) {
    x.st.tid = uint3{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
    x.st.wait = 0;
    x.st.done = false;
    x.st.whole = nullptr;
    x.ops.clear();
    x.groups = 0;
    if (x.s->made) return; /* parked in entry(): the next switch gives it this block */
    getcontext(&x.s->ctx);
    x.s->ctx.uc_stack.ss_sp = x.s->stack;
    x.s->ctx.uc_stack.ss_size = STACK;
    x.s->ctx.uc_link = nullptr;
    makecontext(&x.s->ctx, entry, 0);
}

/* The order of the grid's blocks and of a block's threads. On a GPU the
 * blocks run in any order, at once, and a block's threads between two
 * barriers in any interleaving; a kernel that is right gives the same
 * results whatever the order. So the emulator varies it (UT_EMU_ORDER=fixed
 * runs blocks and threads in index order instead): launches take their
 * blocks in ascending, descending or interleaved (odd, then even) order in
 * turn, and each block runs its threads, at every barrier phase, in
 * ascending order, descending order, or a permutation drawn from the
 * block's index and the phase, by the block's index and the launch's. A
 * race that the barriers do not order (a thread reading what another
 * writes in the same phase, a block reading what another block writes)
 * then gives different values in different blocks, which the tests'
 * comparisons with the CPU see; reads before any write of dynamic shared
 * memory give NaN. The orders are fixed by the indices: a run repeats. */
uint64_t g_launches;

bool vary_order() {
    const char *e = getenv("UT_EMU_ORDER"); /* at each launch: a test may set it */
    return !(e && !strcmp(e, "fixed"));
}

/* the k-th block a launch runs, of n */
uint64_t block_at(uint64_t k, uint64_t n, uint64_t launch_no) {
    switch (launch_no % 3) {
    case 0: return k;
    case 1: return n - 1 - k;
    default: { /* odd indices, then even */
        uint64_t odd = n / 2;
        return k < odd ? 2 * k + 1 : 2 * (k - odd);
    }
    }
}

/* order = the threads' indices in the order a phase runs them (kind 0
 * ascending, 1 descending, 2 a permutation drawn from seed) */
void thread_order(std::vector<unsigned> &order, uint64_t seed, uint64_t kind) {
    const unsigned n = (unsigned)order.size();
    for (unsigned t = 0; t < n; t++) order[t] = kind == 1 ? n - 1 - t : t;
    if (kind != 2) return;
    uint64_t x = seed | 1;
    for (unsigned t = n; t > 1; t--) { /* Fisher-Yates with xorshift64 */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned j = (unsigned)(x % t);
        unsigned tmp = order[t - 1];
        order[t - 1] = order[j];
        order[j] = tmp;
    }
}

} // namespace

uint3 &block_idx() { return g_run ? g_run->bidx : g_none_idx; }
dim3 &grid_dim() { return g_run ? g_run->grid : g_none_dim; }
dim3 &block_dim() { return g_run ? g_run->block : g_none_dim; }
thread_state &current() { return g_run ? g_run->f[(size_t)g_run->cur].st : g_host_thread; }
void *dyn_smem() { return g_run ? g_run->smem : nullptr; }
uint64_t *shuffle_slots() { return g_run->slots.data(); }
float *warp_tile() {
    const thread_state &t = current();
    unsigned i = t.tid.x + g_run->block.x * (t.tid.y + g_run->block.y * t.tid.z);
    return g_run->tiles.data() + (size_t)(i / 32) * 256;
}

namespace {
void land(const async_op &o) {
    memcpy(o.dst, o.src, o.src_n);
    memset((char *)o.dst + o.src_n, 0, o.n - o.src_n);
}
} // namespace

void async_copy(void *dst, const void *src, size_t n, size_t src_n) {
    if (!g_run) die("cp.async outside a kernel");
    if ((uintptr_t)dst % n || (uintptr_t)src % n)
        die("%s: a %zu-byte cp.async from %p to %p, not %zu-byte aligned (a misaligned address on a GPU)",
            g_run->name, n, src, dst, n);
    if (src_n > n) die("%s: a cp.async reading %zu of %zu bytes", g_run->name, src_n, n);
    async_op o{dst, src, n, src_n, -1};
    if (!g_run->async_lazy) land(o);
    else g_run->f[(size_t)g_run->cur].ops.push_back(o);
}

void async_commit() {
    if (!g_run) die("cp.async.commit_group outside a kernel");
    fiber &me = g_run->f[(size_t)g_run->cur];
    for (async_op &o : me.ops)
        if (o.group < 0) o.group = me.groups;
    me.groups++;
}

void async_wait(int pending) {
    if (!g_run) die("cp.async.wait_group outside a kernel");
    fiber &me = g_run->f[(size_t)g_run->cur];
    size_t k = 0;
    for (const async_op &o : me.ops) {
        if (o.group >= 0 && o.group < me.groups - pending) land(o);
        else me.ops[k++] = o;
    }
    me.ops.resize(k);
}

void check_bounds(long max_threads, const char *kernel) {
    if (!g_run) die("%s: __launch_bounds__ checked outside a kernel", kernel);
    long nt = (long)g_run->block.x * g_run->block.y * g_run->block.z;
    if (nt > max_threads)
        die("%s (%s): a block of %ld threads, past its __launch_bounds__ of %ld (the GPU refuses the launch)",
            g_run->name, kernel, nt, max_threads);
}

void barrier_whole(const char *what) {
    if (!g_run) die("%s outside a kernel", what);
    g_run->f[(size_t)g_run->cur].st.whole = what;
    barrier(1);
}

void barrier(int kind) {
    if (!g_run) die("a barrier outside a kernel");
    g_run->f[(size_t)g_run->cur].st.wait = kind;
    to_scheduler(g_run);
}

void run_grid(const char *name, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
    tally(name);
    unsigned nt = block.x * block.y * block.z;
    if (nt == 0 || nt > 1024) die("%s: a block of %u threads (1 to 1024)", name, nt);
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
        die("%s: a grid of %u x %u x %u (x >= 1; y, z 1 to 65535)", name, grid.x, grid.y, grid.z);
    if (smem > 232448) die("%s: %zu bytes of dynamic shared memory, more than an H100 has", name, smem);
    block_run r;
    r.name = name;
    r.grid = grid;
    r.block = block;
    r.f.resize(nt);
    r.slots.assign(nt, 0);
    r.tiles.assign((size_t)(nt + 31) / 32 * 256, 0.0f);
    r.smem_bytes = smem;
    r.smem = smem ? aligned_alloc(128, (smem + 127) / 128 * 128) : nullptr;
    r.body = &body;
    block_run *outer = g_run;
    /* a launch from inside a kernel (none today) would need stacks of its own */
    size_t base = outer ? outer->f.size() : 0;
    for (size_t i = 0; i < r.f.size(); i++) r.f[i].s = slot_of(base + i);
    g_run = &r;
    const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    const bool vary = vary_order();
    const uint64_t launch_no = g_launches++;
    std::vector<unsigned> order(nt);
    for (uint64_t k = 0; k < nblocks; k++) {
        uint64_t b = vary ? block_at(k, nblocks, launch_no) : k;
        unsigned bx = (unsigned)(b % grid.x), by = (unsigned)(b / grid.x % grid.y),
                 bz = (unsigned)(b / ((uint64_t)grid.x * grid.y));
        r.bidx = uint3{bx, by, bz};
        r.async_lazy = vary && (b + launch_no) % 2 == 1;
        if (r.smem) memset(r.smem, 0xff, smem); /* NaN floats: reads before writes show */
        for (unsigned t = 0; t < nt; t++) start_fiber(r.f[t], t, block);
        for (uint64_t round = 0;; round++) {
            thread_order(order, vary ? b * 0x9e3779b97f4a7c15ull + round : 0, vary ? (b + launch_no) % 3 : 0);
            bool all_done = true;
            for (unsigned t : order) {
                fiber &x = r.f[t];
                if (x.st.done) continue;
                all_done = false;
                if (x.st.wait) continue;
                r.cur = (int)t;
                to_fiber(&r, x);
            }
            if (all_done) break;
            if (!open_barriers(&r))
                die("%s: block (%u, %u, %u): threads wait at barriers that cannot open (a barrier only "
                    "some threads of a warp or block reach)",
                    name, bx, by, bz);
        }
    }
    g_run = outer;
    free(r.smem);
}

} // namespace utemu

namespace nvcuda {
namespace wmma {
void utemu_check_tile(const void *p, unsigned ldm, size_t elem, const char *what) {
    if ((uintptr_t)p % 32) utemu::die("%s: a pointer %p not 32-byte aligned", what, p);
    if ((ldm * elem) % 16)
        utemu::die("%s: a leading dimension of %u elements of %zu bytes, not a multiple of 16 bytes", what, ldm, elem);
    utemu::barrier_whole(what);
}
} // namespace wmma
} // namespace nvcuda

/* ---- the runtime API (cuda_runtime_emu.h) ---- */
#include <algorithm>
#include <map>
#include <mutex>
#include <set>

namespace utemu {
namespace {
std::mutex g_smem_mu;
std::map<const void *, int> g_smem_limit; /* kernel -> bytes cudaFuncSetAttribute allowed */
} // namespace

void set_smem_limit(const void *kernel, int bytes) {
    std::lock_guard<std::mutex> l(g_smem_mu);
    g_smem_limit[kernel] = bytes;
}

void check_smem_limit(const char *name, const void *kernel, size_t smem) {
    if (smem <= 49152) return;
    std::lock_guard<std::mutex> l(g_smem_mu);
    auto it = g_smem_limit.find(kernel);
    int allowed = it == g_smem_limit.end() ? 49152 : it->second;
    if (smem > (size_t)allowed)
        die("%s: a launch with %zu bytes of dynamic shared memory, past the %d its "
            "cudaFuncAttributeMaxDynamicSharedMemorySize allows (the GPU refuses it)",
            name, smem, allowed);
}
} // namespace utemu

namespace {
std::mutex g_host_mu;
std::set<const void *> g_host_allocs; /* cudaHostAlloc's blocks: page-locked host memory */
std::map<const void *, size_t> g_dev_sizes; /* cudaMalloc's blocks and their sizes */
size_t g_dev_used;                          /* their sum */
/* the emulated GPU's memory: 80 GiB, or UT_EMU_MEM_BYTES (so that a test can
 * run it out) */
size_t mem_total() {
    const char *e = getenv("UT_EMU_MEM_BYTES");
    return e && *e ? (size_t)strtoull(e, nullptr, 10) : (size_t)80 << 30;
}
int g_device;
struct utemu_stream_tag {
    int unused;
};
struct utemu_event_tag {
    int unused;
};
bool no_gpu() {
    const char *e = getenv("UT_EMU_NO_GPU");
    return e && e[0] == '1';
}
/* UT_EMU_GPUS=N: the machine has N emulated GPUs (default 1), each its own
 * PCI bus id, so that ranks on GPUs of their own go direct (NCCL) */
int gpus() {
    const char *e = getenv("UT_EMU_GPUS");
    int n = e && *e ? atoi(e) : 1;
    return n >= 1 && n <= 64 ? n : 1;
}
} // namespace

extern "C" {
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory (emulated)";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (emulated)";
    case cudaErrorNotReady: return "device not ready (emulated)";
    default: return "invalid argument (emulated)";
    }
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n) {
    *n = no_gpu() ? 0 : gpus();
    return no_gpu() ? cudaErrorNoDevice : cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= gpus() || no_gpu()) return cudaErrorInvalidValue;
    g_device = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
    *d = g_device;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int) {
    switch (a) { /* an H100 SXM's */
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = 232448; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrClockRate: *v = 1980000; break;
    }
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    if (d < 0 || d >= gpus() || no_gpu()) return cudaErrorInvalidValue;
    snprintf(p->name, sizeof p->name, "utrain CUDA emulator"); /* no published figure: the estimate's path */
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *buf, int n, int d) {
    snprintf(buf, (size_t)n, "0000:%02x:00.0 (emulated)", d);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    std::lock_guard<std::mutex> l(g_host_mu);
    *total = mem_total();
    *free_bytes = *total > g_dev_used ? *total - g_dev_used : 0;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) {
    std::lock_guard<std::mutex> l(g_host_mu);
    if (n > mem_total() - g_dev_used) {
        *p = nullptr;
        return cudaErrorMemoryAllocation;
    }
    *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    if (!*p) return cudaErrorMemoryAllocation;
    g_dev_sizes[*p] = n;
    g_dev_used += n;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    std::lock_guard<std::mutex> l(g_host_mu);
    auto it = g_dev_sizes.find(p);
    if (it != g_dev_sizes.end()) {
        g_dev_used -= it->second;
        g_dev_sizes.erase(it);
    }
    free(p);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) {
    *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    if (!*p) return cudaErrorMemoryAllocation;
    std::lock_guard<std::mutex> l(g_host_mu);
    g_host_allocs.insert(*p);
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    {
        std::lock_guard<std::mutex> l(g_host_mu);
        g_host_allocs.erase(p);
    }
    free(p);
    return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    std::lock_guard<std::mutex> l(g_host_mu);
    memset(a, 0, sizeof *a);
    /* the start of a page-locked block; other pointers count as device memory */
    a->type = g_host_allocs.count(p) ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind, cudaStream_t) {
    utemu::tally("cudaMemcpyAsync");
    if (n) memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) {
    utemu::tally("cudaMemsetAsync");
    if (n) memset(d, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemset2DAsync(void *d, size_t pitch, int v, size_t w, size_t h, cudaStream_t) {
    utemu::tally("cudaMemset2DAsync");
    for (size_t r = 0; r < h; r++) memset((char *)d + r * pitch, v, w);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = (cudaStream_t) new utemu_stream_tag();
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete (utemu_stream_tag *)s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = (cudaEvent_t) new utemu_event_tag();
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t) {
    *ms = 0.0f;
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete (utemu_event_tag *)e;
    return cudaSuccess;
}
}
