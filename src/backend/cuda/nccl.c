/* NCCL, the GPUs' communication library, behind the backend's device
 * collectives (backend.h, ut_device_coll; used by src/dist/comm_device.c).
 *
 * The library is opened when a run first asks for it (dlopen of
 * libnccl.so.2: on the loader's path, else beside the NCCL the build found),
 * not linked: a process that never uses it starts without loading its 200 MB,
 * and a build runs on machines without it (the run then says NCCL is
 * missing and the ranks go through host memory, or a run that asked for
 * NCCL stops, naming what to install or write). Only the header is needed
 * to build (UT_WITH_NCCL, set by the Makefile where it finds nccl.h).
 *
 * Operations are queued on the stream the caller names (the communicator's
 * communication stream) and read and write device memory when it gets
 * there; NCCL's own errors come back from the call, failures it finds later
 * (a peer that went away) from status. */
#include "utrain/base.h"
#include "../backend.h"

#ifdef UT_WITH_NCCL
#include "dl.h"
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the functions utrain calls, looked up once */
static struct {
    ncclResult_t (*get_version)(int *);
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                           cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*comm_abort)(ncclComm_t);
    const char *(*get_error_string)(ncclResult_t);
    const char *(*get_last_error)(ncclComm_t);
    int version;
    char err[384];
    int state; /* 0 not tried, 1 loaded, -1 failed (err says why) */
} nc;
static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;

#ifdef UT_CUDA_EMU
#define EMU_SYMBOLS utemu_nccl_symbol /* tests/emu/nccl_emu.cpp */
#else
#define EMU_SYMBOLS NULL
#endif
#ifndef UT_NCCL_LIBDIR
#define UT_NCCL_LIBDIR NULL
#endif
static ut_cuda_lib g_lib;

static void *find(const char *sym) {
    void *f = ut_cuda_lib_find(&g_lib, EMU_SYMBOLS, sym);
    if (!f && !nc.err[0]) snprintf(nc.err, sizeof nc.err, "NCCL: %s is missing from %s (too old a NCCL)", sym, g_lib.name);
    return f;
}

/* UT_NCCL_LIBRARY: the NCCL library file to open (docs/gpu.md); else
 * libnccl.so.2 from the loader's path, then beside the NCCL the build found */
static void load_once(void) {
    if (ut_cuda_lib_open(&g_lib, "UT_NCCL_LIBRARY", "libnccl.so.2", UT_NCCL_LIBDIR,
                         "install NCCL (Debian: libnccl2 from NVIDIA's CUDA repository, or pip's nvidia-nccl)", nc.err,
                         sizeof nc.err)) {
        nc.state = -1;
        return;
    }
    *(void **)&nc.get_version = find("ncclGetVersion");
    *(void **)&nc.get_unique_id = find("ncclGetUniqueId");
    *(void **)&nc.comm_init_rank = find("ncclCommInitRank");
    *(void **)&nc.all_reduce = find("ncclAllReduce");
    *(void **)&nc.reduce = find("ncclReduce");
    *(void **)&nc.broadcast = find("ncclBroadcast");
    *(void **)&nc.group_start = find("ncclGroupStart");
    *(void **)&nc.group_end = find("ncclGroupEnd");
    *(void **)&nc.comm_get_async_error = find("ncclCommGetAsyncError");
    *(void **)&nc.comm_destroy = find("ncclCommDestroy");
    *(void **)&nc.comm_abort = find("ncclCommAbort");
    *(void **)&nc.get_error_string = find("ncclGetErrorString");
    *(void **)&nc.get_last_error = find("ncclGetLastError");
    if (nc.err[0]) {
        nc.state = -1;
        return;
    }
    if (nc.get_version(&nc.version) != ncclSuccess) nc.version = 0;
    /* ncclAvg and bfloat16 came with 2.10 */
    if (nc.version < 21000) {
        snprintf(nc.err, sizeof nc.err, "NCCL %d.%d is too old: utrain needs 2.10 or newer", nc.version / 10000,
                 nc.version / 100 % 100);
        nc.state = -1;
        return;
    }
    nc.state = 1;
}

static int nccl_load(char *what, size_t wn, char *err, size_t n) {
    pthread_mutex_lock(&load_mu);
    if (nc.state == 0) load_once();
    pthread_mutex_unlock(&load_mu);
    if (nc.state < 0) {
        snprintf(err, n, "%s", nc.err);
        return -1;
    }
    if (what) snprintf(what, wn, "NCCL %d.%d.%d", nc.version / 10000, nc.version / 100 % 100, nc.version % 100);
    return 0;
}

/* "NCCL: <what> failed: <NCCL's words> (<its last message>)" */
static int fail(ncclComm_t c, ncclResult_t r, const char *what, char *err, size_t n) {
    const char *last = nc.get_last_error ? nc.get_last_error(c) : NULL;
    snprintf(err, n, "NCCL: %s failed: %s%s%s%s", what, nc.get_error_string(r), last && last[0] ? " (" : "",
             last && last[0] ? last : "", last && last[0] ? ")" : "");
    return -1;
}

static int nccl_make_id(void *id, char *err, size_t n) {
    ncclResult_t r = nc.get_unique_id((ncclUniqueId *)id);
    return r == ncclSuccess ? 0 : fail(NULL, r, "making the group's id (ncclGetUniqueId)", err, n);
}

static void *nccl_comm_new(const void *id, int rank, int size, char *err, size_t n) {
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t c = NULL;
    ncclResult_t r = nc.comm_init_rank(&c, size, u, rank);
    if (r != ncclSuccess) {
        fail(NULL, r, "joining the group (ncclCommInitRank)", err, n);
        if (c) nc.comm_abort(c);
        return NULL;
    }
    return c;
}

static int nccl_allreduce(void *g, void *buf, int64_t count, ut_dtype dt, int op, void *stream, char *err,
                          size_t n) {
    ncclDataType_t t = dt == UT_BF16 ? ncclBfloat16 : dt == UT_F16 ? ncclFloat16 : ncclFloat32;
    ncclRedOp_t o = op == 1 ? ncclMax : op == 2 ? ncclAvg : ncclSum;
    ncclResult_t r = nc.all_reduce(buf, buf, (size_t)count, t, o, (ncclComm_t)g, (cudaStream_t)stream);
    return r == ncclSuccess ? 0 : fail((ncclComm_t)g, r, "all-reduce (ncclAllReduce)", err, n);
}

/* Uneven parts: one reduce (or broadcast) per rank's part, rooted at that
 * rank, fused into one group so NCCL runs them together. */
static int nccl_reduce_scatterv(void *g, const float *in, float *out, const int64_t *counts, int size, void *stream,
                                char *err, size_t n) {
    ncclResult_t r = nc.group_start();
    int64_t off = 0;
    for (int q = 0; q < size && r == ncclSuccess; off += counts[q], q++)
        if (counts[q] > 0)
            r = nc.reduce(in + off, out, (size_t)counts[q], ncclFloat32, ncclSum, q, (ncclComm_t)g,
                          (cudaStream_t)stream);
    ncclResult_t e = nc.group_end();
    if (r == ncclSuccess) r = e;
    return r == ncclSuccess ? 0 : fail((ncclComm_t)g, r, "reduce-scatter (grouped ncclReduce)", err, n);
}

static int nccl_allgatherv(void *g, float *buf, const int64_t *counts, int size, void *stream, char *err, size_t n) {
    ncclResult_t r = nc.group_start();
    int64_t off = 0;
    for (int q = 0; q < size && r == ncclSuccess; off += counts[q], q++)
        if (counts[q] > 0)
            r = nc.broadcast(buf + off, buf + off, (size_t)counts[q], ncclFloat32, q, (ncclComm_t)g,
                             (cudaStream_t)stream);
    ncclResult_t e = nc.group_end();
    if (r == ncclSuccess) r = e;
    return r == ncclSuccess ? 0 : fail((ncclComm_t)g, r, "all-gather (grouped ncclBroadcast)", err, n);
}

static int nccl_status(void *g, char *err, size_t n) {
    ncclResult_t a = ncclSuccess;
    ncclResult_t r = nc.comm_get_async_error((ncclComm_t)g, &a);
    if (r != ncclSuccess) return fail((ncclComm_t)g, r, "asking for errors (ncclCommGetAsyncError)", err, n);
    if (a != ncclSuccess && a != ncclInProgress) return fail((ncclComm_t)g, a, "a queued operation", err, n);
    return 0;
}

/* A communicator with a failure is aborted (a destroy would wait for the
 * operations that cannot finish). */
static void nccl_comm_free(void *g) {
    if (!g) return;
    ncclResult_t a = ncclSuccess;
    if (nc.comm_get_async_error((ncclComm_t)g, &a) != ncclSuccess || (a != ncclSuccess && a != ncclInProgress))
        nc.comm_abort((ncclComm_t)g);
    else
        nc.comm_destroy((ncclComm_t)g);
}

const ut_device_coll ut_cuda_nccl = {
    .id_bytes = sizeof(ncclUniqueId),
    .load = nccl_load,
    .make_id = nccl_make_id,
    .comm_new = nccl_comm_new,
    .allreduce = nccl_allreduce,
    .reduce_scatterv = nccl_reduce_scatterv,
    .allgatherv = nccl_allgatherv,
    .status = nccl_status,
    .comm_free = nccl_comm_free,
};
#endif
