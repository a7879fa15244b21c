/* The CUDA emulator's scheduler (cuda_emu.h): a block's threads as fibers
 * on one host thread, barriers that open when every live thread of their
 * warp or block has reached one, and the checks the header lists. */
#include "cuda_emu.h"

#include <setjmp.h>
#include <stdarg.h>
#include <ucontext.h>

#include <vector>

namespace utemu {

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

/* A thread's fiber. It starts through its ucontext (setcontext: once) and
 * then switches with _setjmp/_longjmp, which save no signal mask: no system
 * call per switch. Under AddressSanitizer, which follows stack switches
 * through swapcontext only, every switch is a swapcontext. */
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

struct fiber {
    ucontext_t ctx;
    jmp_buf jb;
    bool started;
    thread_state st;
    char *stack; /* STACK bytes from the pool */
};

/* fiber stacks, kept from launch to launch (fresh ones cost a page fault
 * per page), freed at exit */
struct stack_pool {
    std::vector<char *> v;
    ~stack_pool() {
        for (char *p : v) free(p);
    }
} g_stacks;
char *stack_of(size_t i) {
    while (g_stacks.v.size() <= i) g_stacks.v.push_back((char *)malloc(STACK));
    return g_stacks.v[i];
}

struct block_run {
    const char *name;
    dim3 grid, block;
    uint3 bidx;
    std::vector<fiber> f;
    std::vector<uint64_t> slots;
    std::vector<float> tiles;
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
    if (UTEMU_UCONTEXT_ONLY) swapcontext(&me.ctx, &r->main);
    else if (!_setjmp(me.jb)) _longjmp(r->main_jb, 1);
}

/* from the scheduler into fiber x */
void to_fiber(block_run *r, fiber &x) {
    if (UTEMU_UCONTEXT_ONLY) {
        swapcontext(&r->main, &x.ctx);
    } else if (!_setjmp(r->main_jb)) {
        if (!x.started) {
            x.started = true;
            setcontext(&x.ctx);
        }
        _longjmp(x.jb, 1);
    }
}

void entry() {
    block_run *r = g_run;
    (*r->body)();
    r->f[(size_t)r->cur].st.done = true;
    if (UTEMU_UCONTEXT_ONLY) swapcontext(&r->f[(size_t)r->cur].ctx, &r->main);
    else _longjmp(r->main_jb, 1);
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
            for (size_t i = w0; i < n && i < w0 + 32; i++) r->f[i].st.wait = 0;
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
    x.started = false;
    getcontext(&x.ctx);
    x.ctx.uc_stack.ss_sp = x.stack;
    x.ctx.uc_stack.ss_size = STACK;
    x.ctx.uc_link = nullptr;
    makecontext(&x.ctx, entry, 0);
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

void barrier(int kind) {
    if (!g_run) die("a barrier outside a kernel");
    g_run->f[(size_t)g_run->cur].st.wait = kind;
    to_scheduler(g_run);
}

void run_grid(const char *name, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
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
    for (size_t i = 0; i < r.f.size(); i++) r.f[i].stack = stack_of(base + i);
    g_run = &r;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                r.bidx = uint3{bx, by, bz};
                if (r.smem) memset(r.smem, 0xff, smem); /* NaN floats: reads before writes show */
                for (unsigned t = 0; t < nt; t++) start_fiber(r.f[t], t, block);
                for (;;) {
                    bool all_done = true;
                    for (unsigned t = 0; t < nt; t++) {
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
    utemu::barrier(1);
}
} // namespace wmma
} // namespace nvcuda

/* ---- the runtime API (cuda_runtime_emu.h) ---- */
#include <mutex>
#include <set>

namespace {
std::mutex g_host_mu;
std::set<const void *> g_host_allocs; /* cudaHostAlloc's blocks: page-locked host memory */
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
    *v = a == cudaDevAttrMaxSharedMemoryPerBlockOptin ? 232448 : 9;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *buf, int n, int d) {
    snprintf(buf, (size_t)n, "0000:%02x:00.0 (emulated)", d);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    *total = (size_t)80 << 30;
    *free_bytes = *total;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) {
    *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) {
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
    if (n) memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) {
    if (n) memset(d, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemset2DAsync(void *d, size_t pitch, int v, size_t w, size_t h, cudaStream_t) {
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
