/* NCCL on the CUDA emulator (declarations: nccl_emu.h), so that
 * src/backend/cuda/nccl.c runs there as it is, with ranks in separate
 * processes, each with its own emulated GPU (UT_EMU_GPUS=2 gives a machine
 * two, so that two ranks do not share one and go direct).
 *
 * A communicator is a POSIX shared-memory segment named in the unique id
 * (rank 0's ncclGetUniqueId makes the name; every rank maps it in
 * ncclCommInitRank): a header, a signature row per rank and a staging slot
 * per rank. An operation runs when it is called (the emulator's streams run
 * in program order), in chunks of the slot's size: every rank copies its
 * part into its slot, all meet at a barrier, each reads what it needs from
 * the others' slots (reductions summed in rank order in float32, 16-bit
 * values widened exactly and rounded once; avg is the sum divided by the
 * ranks), and all meet again. Operations inside ncclGroupStart/End are
 * queued and run at the end, in order.
 *
 * The contract checked (a broken one returns the documented result and
 * says why through ncclGetLastError): a communicator from this id and rank
 * range, known types and operations, a root in range, buffers for a
 * non-empty count, and every rank issuing the same operation (kind, count,
 * type, operation, root) at the same point: ranks out of step fail with a
 * message naming both, where NCCL would hang or mix data. A rank that waits
 * at a barrier longer than UT_EMU_NCCL_TIMEOUT seconds (default 300) fails
 * with ncclSystemError and the communicator's asynchronous error becomes
 * ncclRemoteError. */
#include "nccl_emu.h"
#include "cuda_emu.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <vector>

namespace {

const char ID_MAGIC[] = "utemu-nccl:";
const size_t SLOT = (size_t)4 << 20;

struct header {
    std::atomic<uint32_t> joined, count, gen;
};
/* what a rank is about to do, compared across ranks before any data moves */
struct signature {
    uint32_t kind, dtype, op, root;
    uint64_t count, seq;
};
enum { ALLREDUCE = 1, REDUCE, BROADCAST };
const char *kind_name(uint32_t k) { return k == ALLREDUCE ? "all-reduce" : k == REDUCE ? "reduce" : "broadcast"; }

thread_local char g_last[320];

} // namespace

struct utemu_nccl {
    int rank, nranks;
    header *h;
    signature *sig;
    char *slots;
    size_t bytes;
    uint64_t seq;
    ncclResult_t async;
    char last[320];
};

namespace {

ncclResult_t fail(utemu_nccl *c, ncclResult_t r, const char *fmt, ...) {
    char *to = c ? c->last : g_last;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(to, sizeof g_last, fmt, ap);
    va_end(ap);
    if (c) snprintf(g_last, sizeof g_last, "%s", c->last);
    return r;
}

double now_s() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double timeout_s() {
    const char *e = getenv("UT_EMU_NCCL_TIMEOUT");
    double t = e && *e ? atof(e) : 300.0;
    return t > 0 ? t : 300.0;
}

/* every rank of c meets here; false after the timeout */
bool barrier(utemu_nccl *c, const char *what) {
    if (c->nranks == 1) return true;
    header *h = c->h;
    uint32_t gen = h->gen.load();
    if (h->count.fetch_add(1) + 1 == (uint32_t)c->nranks) {
        h->count.store(0);
        h->gen.fetch_add(1);
        return true;
    }
    double t0 = now_s(), limit = timeout_s();
    for (unsigned spin = 0; h->gen.load() == gen; spin++) {
        if (spin > 64) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, nullptr);
        } else {
            sched_yield();
        }
        if ((spin & 1023) == 0 && now_s() - t0 > limit) {
            c->async = ncclRemoteError;
            fail(c, ncclSystemError, "emulated NCCL: rank %d waited %.0f s in %s #%llu for the other ranks", c->rank,
                 limit, what, (unsigned long long)c->seq);
            return false;
        }
    }
    return true;
}

size_t esize(int dt) { return dt == ncclFloat32 ? 4 : 2; }
float load(const char *p, int dt, size_t i) {
    if (dt == ncclBfloat16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == ncclFloat16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}
void store(char *p, int dt, size_t i, float v) {
    if (dt == ncclBfloat16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (dt == ncclFloat16) ((__half *)p)[i] = __float2half_rn(v);
    else ((float *)p)[i] = v;
}

struct op {
    uint32_t kind;
    const void *send;
    void *recv;
    size_t count;
    int dtype, redop, root;
    utemu_nccl *comm;
};
thread_local int g_depth;
thread_local std::vector<op> g_queue;

ncclResult_t check(const op &o) {
    utemu_nccl *c = o.comm;
    if (!c) return fail(nullptr, ncclInvalidArgument, "emulated NCCL: %s on a NULL communicator", kind_name(o.kind));
    if (o.dtype != ncclFloat32 && o.dtype != ncclFloat16 && o.dtype != ncclBfloat16)
        return fail(c, ncclInvalidArgument, "emulated NCCL: %s of data type %d (not emulated)", kind_name(o.kind),
                    o.dtype);
    if (o.kind != BROADCAST && (o.redop < ncclSum || o.redop > ncclAvg || o.redop == ncclProd || o.redop == ncclMin))
        return fail(c, ncclInvalidArgument, "emulated NCCL: %s with operation %d (not emulated)", kind_name(o.kind),
                    o.redop);
    if (o.kind != ALLREDUCE && (o.root < 0 || o.root >= c->nranks))
        return fail(c, ncclInvalidArgument, "emulated NCCL: %s rooted at rank %d of %d", kind_name(o.kind), o.root,
                    c->nranks);
    bool needs_recv = o.kind == ALLREDUCE || c->rank == o.root || o.kind == BROADCAST;
    bool needs_send = o.kind != BROADCAST || c->rank == o.root;
    if (o.count && ((needs_send && !o.send) || (needs_recv && !o.recv)))
        return fail(c, ncclInvalidArgument, "emulated NCCL: %s of %zu elements with a NULL buffer", kind_name(o.kind),
                    o.count);
    return ncclSuccess;
}

ncclResult_t run(const op &o) {
    utemu_nccl *c = o.comm;
    c->seq++;
    /* the ranks agree on what they are doing */
    c->sig[c->rank] = signature{o.kind, (uint32_t)o.dtype, o.kind == BROADCAST ? 0u : (uint32_t)o.redop,
                                o.kind == ALLREDUCE ? 0u : (uint32_t)o.root, o.count, c->seq};
    if (!barrier(c, kind_name(o.kind))) return ncclSystemError;
    for (int r = 0; r < c->nranks; r++) {
        const signature &a = c->sig[c->rank], &b = c->sig[r];
        if (memcmp(&a, &b, sizeof a))
            return fail(c, ncclInvalidUsage,
                        "emulated NCCL: ranks out of step at operation #%llu: rank %d issued %s of %llu elements "
                        "(type %u, op %u, root %u), rank %d %s of %llu (type %u, op %u, root %u) as its #%llu",
                        (unsigned long long)a.seq, c->rank, kind_name(a.kind), (unsigned long long)a.count, a.dtype,
                        a.op, a.root, r, kind_name(b.kind), (unsigned long long)b.count, b.dtype, b.op, b.root,
                        (unsigned long long)b.seq);
    }
    if (!barrier(c, kind_name(o.kind))) return ncclSystemError; /* before the signatures are written again */
    size_t es = esize(o.dtype), chunk = SLOT / es;
    char *mine = c->slots + (size_t)c->rank * SLOT;
    for (size_t off = 0; off < o.count; off += chunk) {
        size_t n = o.count - off < chunk ? o.count - off : chunk;
        bool sends = o.kind != BROADCAST || c->rank == o.root;
        if (sends) memcpy(mine, (const char *)o.send + off * es, n * es);
        if (!barrier(c, kind_name(o.kind))) return ncclSystemError;
        char *out = (char *)o.recv + off * es;
        if (o.kind == BROADCAST) {
            if (c->rank != o.root) memcpy(out, c->slots + (size_t)o.root * SLOT, n * es);
            else if (o.recv != o.send) memcpy(out, mine, n * es);
        } else if (o.kind == ALLREDUCE || c->rank == o.root) {
            for (size_t i = 0; i < n; i++) {
                float acc = load(c->slots, o.dtype, i);
                for (int r = 1; r < c->nranks; r++) {
                    float v = load(c->slots + (size_t)r * SLOT, o.dtype, i);
                    acc = o.redop == ncclMax ? (v > acc || v != v ? v : acc) : acc + v;
                }
                if (o.redop == ncclAvg) acc /= (float)c->nranks;
                store(out, o.dtype, i, acc);
            }
        }
        if (!barrier(c, kind_name(o.kind))) return ncclSystemError;
    }
    return ncclSuccess;
}

ncclResult_t submit(const op &o) {
    ncclResult_t r = check(o);
    if (r != ncclSuccess) return r;
    if (g_depth > 0) {
        g_queue.push_back(o);
        return ncclSuccess;
    }
    return run(o);
}

} // namespace

extern "C" {

static ncclResult_t ncclGetVersion(int *v) {
    if (!v) return ncclInvalidArgument;
    *v = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
    return ncclSuccess;
}
static ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static std::atomic<unsigned> made{0};
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "%s/utemu-nccl-%d-%u-%lx", ID_MAGIC, (int)getpid(), made.fetch_add(1),
             (unsigned long)(now_s() * 1e6));
    return ncclSuccess;
}
static ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    if (!out) return fail(nullptr, ncclInvalidArgument, "emulated NCCL: ncclCommInitRank without a result");
    *out = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(nullptr, ncclInvalidArgument, "emulated NCCL: rank %d of %d", rank, nranks);
    if (strncmp(id.internal, ID_MAGIC, strlen(ID_MAGIC)))
        return fail(nullptr, ncclInvalidArgument, "emulated NCCL: the unique id did not come from ncclGetUniqueId");
    const char *name = id.internal + strlen(ID_MAGIC);
    size_t bytes = 64 + (size_t)nranks * sizeof(signature) + (size_t)nranks * SLOT;
    int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
        if (fd >= 0) close(fd);
        return fail(nullptr, ncclSystemError, "emulated NCCL: shared memory %s: %s", name, strerror(errno));
    }
    void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return fail(nullptr, ncclSystemError, "emulated NCCL: mmap: %s", strerror(errno));
    utemu_nccl *c = new utemu_nccl{};
    c->rank = rank, c->nranks = nranks, c->bytes = bytes;
    c->h = (header *)m;
    c->sig = (signature *)((char *)m + 64);
    c->slots = (char *)m + 64 + (size_t)nranks * sizeof(signature);
    c->h->joined.fetch_add(1);
    double t0 = now_s();
    while (c->h->joined.load() < (uint32_t)nranks) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, nullptr);
        if (now_s() - t0 > timeout_s()) {
            munmap(m, bytes);
            delete c;
            return fail(nullptr, ncclSystemError, "emulated NCCL: rank %d waited %.0f s for the other %d ranks to join",
                        rank, timeout_s(), nranks - 1);
        }
    }
    /* every rank has it mapped: the name is not needed any more */
    if (!barrier(c, "ncclCommInitRank")) {
        ncclResult_t r = fail(nullptr, ncclSystemError, "%s", c->last);
        munmap(m, bytes);
        delete c;
        return r;
    }
    if (rank == 0) shm_unlink(name);
    *out = c;
    return ncclSuccess;
}
static ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t o,
                                  ncclComm_t c, cudaStream_t) {
    return submit(op{ALLREDUCE, send, recv, count, (int)dt, (int)o, 0, c});
}
static ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t o, int root,
                               ncclComm_t c, cudaStream_t) {
    return submit(op{REDUCE, send, recv, count, (int)dt, (int)o, root, c});
}
static ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                                  ncclComm_t c, cudaStream_t) {
    return submit(op{BROADCAST, send, recv, count, (int)dt, 0, root, c});
}
static ncclResult_t ncclGroupStart(void) {
    g_depth++;
    return ncclSuccess;
}
static ncclResult_t ncclGroupEnd(void) {
    if (g_depth == 0) return fail(nullptr, ncclInvalidUsage, "emulated NCCL: ncclGroupEnd without ncclGroupStart");
    if (--g_depth > 0) return ncclSuccess;
    ncclResult_t r = ncclSuccess;
    std::vector<op> q;
    q.swap(g_queue);
    for (const op &o : q)
        if (r == ncclSuccess) r = run(o);
    return r;
}
static ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) {
    if (!c || !e) return ncclInvalidArgument;
    *e = c->async;
    return ncclSuccess;
}
static ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    munmap(c->h, c->bytes);
    delete c;
    return ncclSuccess;
}
static ncclResult_t ncclCommAbort(ncclComm_t c) { return c ? ncclCommDestroy(c) : ncclSuccess; }
static const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}
static const char *ncclGetLastError(ncclComm_t c) { return c ? c->last : g_last; }

void *utemu_nccl_symbol(const char *name) {
#define SYM(f) {#f, (void *)f}
    static const struct {
        const char *name;
        void *f;
    } table[] = {SYM(ncclGetVersion),    SYM(ncclGetUniqueId),       SYM(ncclCommInitRank), SYM(ncclAllReduce),
                 SYM(ncclReduce),        SYM(ncclBroadcast),         SYM(ncclGroupStart),   SYM(ncclGroupEnd),
                 SYM(ncclCommGetAsyncError), SYM(ncclCommDestroy),   SYM(ncclCommAbort),    SYM(ncclGetErrorString),
                 SYM(ncclGetLastError)};
#undef SYM
    for (const auto &e : table)
        if (!strcmp(e.name, name)) return e.f;
    return nullptr;
}
}
