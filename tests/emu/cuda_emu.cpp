/* The CUDA emulator's scheduler (cuda_emu.h): a block's threads as fibers
 * on one host thread, barriers that open when every live thread of their
 * warp or block has reached one, and the checks the header lists. */
#include "cuda_emu.h"

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

struct fiber {
    ucontext_t ctx;
    thread_state st;
    std::vector<char> stack;
};

struct block_run {
    const char *name;
    dim3 grid, block;
    uint3 bidx;
    std::vector<fiber> f;
    std::vector<uint64_t> slots;
    void *smem;
    size_t smem_bytes;
    ucontext_t main;
    int cur;
    const std::function<void()> *body;
};

block_run *g_run;
uint3 g_none_idx;
dim3 g_none_dim;
thread_state g_host_thread;


void entry() {
    block_run *r = g_run;
    (*r->body)();
    r->f[(size_t)r->cur].st.done = true;
    swapcontext(&r->f[(size_t)r->cur].ctx, &r->main);
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
    getcontext(&x.ctx);
    x.ctx.uc_stack.ss_sp = x.stack.data();
    x.ctx.uc_stack.ss_size = x.stack.size();
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

void barrier(int kind) {
    if (!g_run) die("a barrier outside a kernel");
    fiber &me = g_run->f[(size_t)g_run->cur];
    me.st.wait = kind;
    swapcontext(&me.ctx, &g_run->main);
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
    r.smem_bytes = smem;
    r.smem = smem ? aligned_alloc(128, (smem + 127) / 128 * 128) : nullptr;
    r.body = &body;
    for (auto &x : r.f) x.stack.resize(STACK);
    block_run *outer = g_run;
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
                        swapcontext(&r.main, &x.ctx);
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
