/* The MPI backend (OpenMPI). Each communicator (the world, and every process
 * group split from it) has one communication thread that makes its MPI
 * calls: callers put operations in a fixed ring of UT_COMM_QUEUE slots
 * (allocated once; a full ring blocks the caller until the thread finishes
 * one), and the thread starts them in issue order, collectives as blocking
 * calls on the communicator's duplicate of MPI_COMM_WORLD (or the group's),
 * sends and receives as non-blocking ones that it completes by polling, so a
 * send queued before a receive on both ranks cannot deadlock. Groups run
 * their threads side by side (MPI_THREAD_MULTIPLE). A watchdog thread ends every
 * rank (MPI_Abort) when one operation runs longer than the timeout, naming the
 * operation and its sequence number, and, asking the other ranks' watchdogs
 * over a communicator of their own, which rank did not arrive. Besides
 * MPI_Abort (from the watchdog or ut_abort) that side channel is the one use
 * of MPI outside the comm thread: it needs MPI_THREAD_MULTIPLE, which is
 * asked for; where MPI gives less the report names the operation only. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_internal.h"
#include "../backend/backend.h"

/* MPI counts are int: one call moves at most this many elements. */
#define UT_COMM_CHUNK_MAX ((int64_t)(INT32_MAX / 2))

typedef struct mpi_impl {
    MPI_Comm comm;
    MPI_Comm side; /* the watchdogs' status queries (MPI_COMM_NULL: none) */
    bool own_mpi;  /* this process's MPI_Init was ours: finalize calls MPI_Finalize */
    int64_t chunk; /* elements per MPI call (UT_COMM_CHUNK overrides, for tests) */
    ut_comm_queue q;     /* the operations; its mutex also guards the fields below */
    pthread_cond_t tick; /* to the watchdog: stop (timed waits on CLOCK_MONOTONIC) */
    uint64_t running;               /* seq of the blocking collective inside MPI now, 0 if none */
    struct timespec running_since;
    /* sends and receives in flight: their seqs, when each started, and its
     * MPI requests (two: the whole chunks, the rest) */
    uint64_t pend[UT_COMM_QUEUE];
    int npend;
    struct timespec pend_since[UT_COMM_QUEUE];
    MPI_Request preq[UT_COMM_QUEUE][2];
    int *cnt, *dsp; /* per-rank counts and offsets of one v-operation window */
    pthread_t thread, watchdog;
    bool has_watchdog;
} mpi_impl;

// --- checked MPI calls ------------------------------------------------------

/* The last failed call's text ("MPI_Allreduce(...) at file:line: message"),
 * per thread: the comm thread's, or the initialising thread's. */
static _Thread_local char mpi_err[400];

static int mpi_check(int rc, const char *expr, const char *file, int line) {
    if (rc == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    snprintf(mpi_err, sizeof mpi_err, "%s at %s:%d: %s", expr, file, line, msg);
    return -1;
}
#define UT_CHECK_MPI(call) mpi_check((call), #call, __FILE__, __LINE__)

/* Any ut_abort (UT_ASSERT, allocation failure) on an MPI rank ends the job. */
static void mpi_abort_handler(void) {
    int init = 0, fin = 0;
    if (MPI_Initialized(&init) != MPI_SUCCESS || !init) return;
    if (MPI_Finalized(&fin) != MPI_SUCCESS || fin) return;
    MPI_Abort(MPI_COMM_WORLD, 1);
}

// --- the collectives, in chunks of at most m->chunk elements ------------------

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int allreduce_op(mpi_impl *m, void *buf, int64_t n, MPI_Datatype dt, size_t esz, MPI_Op op) {
    char *p = buf;
    for (int64_t o = 0; o < n; o += m->chunk) {
        int k = (int)min64(m->chunk, n - o);
        if (UT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, p + o * esz, k, dt, op, m->comm)))
            return -1;
    }
    return 0;
}

static int allreduce_sum(mpi_impl *m, void *buf, int64_t n, MPI_Datatype dt, size_t esz) {
    return allreduce_op(m, buf, n, dt, esz, MPI_SUM);
}

/* The typed reductions (ut_comm_iallreduce_typed) as MPI user operations
 * over float32, bf16 and f16 (16-bit as MPI_UINT16_T bit patterns), each
 * ut_comm_combine; AVG reduces as a sum and divides afterwards
 * (ut_comm_average). */
#define USER_OP(name, dt, op)                                                \
    static void name(void *in, void *inout, int *len, MPI_Datatype *type) { \
        (void)type;                                                          \
        ut_comm_combine(in, inout, *len, dt, op);                            \
    }
USER_OP(sum_bf16, UT_BF16, UT_REDUCE_SUM)
USER_OP(sum_f16, UT_F16, UT_REDUCE_SUM)
USER_OP(max_f32, UT_F32, UT_REDUCE_MAX)
USER_OP(max_bf16, UT_BF16, UT_REDUCE_MAX)
USER_OP(max_f16, UT_F16, UT_REDUCE_MAX)
#undef USER_OP

/* The MPI datatype and operation of (dt, op), user operations made once per
 * process (MPI_Op_create after MPI_Init; communication threads of several
 * communicators may ask at once, so under a lock). float32 sums are MPI's
 * own MPI_SUM. */
static int typed_op(ut_dtype dt, ut_reduce_op op, MPI_Datatype *type, MPI_Op *out) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static MPI_Op made[3][2] = {{MPI_OP_NULL, MPI_OP_NULL}, {MPI_OP_NULL, MPI_OP_NULL}, {MPI_OP_NULL, MPI_OP_NULL}};
    static MPI_User_function *const fns[3][2] = {{NULL, max_f32}, {sum_bf16, max_bf16}, {sum_f16, max_f16}};
    int d = dt == UT_F32 ? 0 : dt == UT_BF16 ? 1 : 2, o = op == UT_REDUCE_MAX ? 1 : 0, rc = 0;
    *type = d == 0 ? MPI_FLOAT : MPI_UINT16_T;
    if (!fns[d][o]) {
        *out = MPI_SUM;
        return 0;
    }
    UT_CHECK_PTHREAD(pthread_mutex_lock(&mu));
    if (made[d][o] == MPI_OP_NULL) rc = UT_CHECK_MPI(MPI_Op_create(fns[d][o], 1, &made[d][o]));
    *out = made[d][o];
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&mu));
    return rc;
}

static int allreduce_typed(mpi_impl *m, int size, void *buf, int64_t n, ut_dtype dt, ut_reduce_op op) {
    MPI_Datatype type;
    MPI_Op mop;
    if (typed_op(dt, op, &type, &mop) || allreduce_op(m, buf, n, type, ut_dtype_size(dt), mop)) return -1;
    if (op == UT_REDUCE_AVG) ut_comm_average(buf, n, dt, size);
    return 0;
}

/* out[0, n) = op over ranks of in[rank*n, (rank+1)*n). Up to one chunk, one
 * MPI_Reduce_scatter_block; past it, each rank's part is reduced to it with
 * MPI_Reduce a chunk at a time: OpenMPI rejects reductions on the strided
 * datatype a chunked MPI_Reduce_scatter_block would need (MPI_ERR_OP). */
static int reduce_scatter_typed(mpi_impl *m, int rank, int size, const void *in, void *out, int64_t n, ut_dtype dt,
                                ut_reduce_op op) {
    MPI_Datatype type;
    MPI_Op mop;
    if (typed_op(dt, op, &type, &mop)) return -1;
    size_t esz = ut_dtype_size(dt);
    const char *src = in;
    char *dst = out;
    if (n <= m->chunk) {
        if (UT_CHECK_MPI(MPI_Reduce_scatter_block(in, out, (int)n, type, mop, m->comm))) return -1;
        if (op == UT_REDUCE_AVG) ut_comm_average(out, n, dt, size);
        return 0;
    }
    for (int64_t o = 0; o < n; o += m->chunk) {
        int k = (int)min64(m->chunk, n - o);
        for (int r = 0; r < size; r++)
            if (UT_CHECK_MPI(MPI_Reduce(src + (size_t)(r * n + o) * esz, r == rank ? dst + (size_t)o * esz : NULL, k,
                                        type, mop, r, m->comm)))
                return -1;
    }
    if (op == UT_REDUCE_AVG) ut_comm_average(out, n, dt, size);
    return 0;
}

/* k elements of dt, spaced stride bytes apart from one rank's block to the
 * next: one rank's part of a chunk inside buffers laid out [rank][n] (for
 * data movement only: OpenMPI's reductions reject such types). */
static int block_type(MPI_Datatype dt, int k, MPI_Aint stride, MPI_Datatype *t) {
    MPI_Datatype c;
    if (UT_CHECK_MPI(MPI_Type_contiguous(k, dt, &c))) return -1;
    int rc = UT_CHECK_MPI(MPI_Type_create_resized(c, 0, stride, t));
    if (UT_CHECK_MPI(MPI_Type_free(&c))) rc = -1;
    if (!rc && UT_CHECK_MPI(MPI_Type_commit(t))) rc = -1;
    return rc;
}

/* out[r*n, (r+1)*n) = in[0, n) of rank r; in == out + rank*n is in place */
static int allgather(mpi_impl *m, int rank, const void *in, void *out, int64_t n, MPI_Datatype dt,
                     size_t esz) {
    const char *src = in;
    char *dst = out;
    bool in_place = src == dst + (size_t)rank * (size_t)n * esz;
    if (n <= m->chunk)
        return UT_CHECK_MPI(MPI_Allgather(in_place ? MPI_IN_PLACE : in, (int)n, dt, out, (int)n, dt,
                                          m->comm));
    for (int64_t o = 0; o < n; o += m->chunk) {
        int k = (int)min64(m->chunk, n - o);
        MPI_Datatype t;
        if (block_type(dt, k, (MPI_Aint)(n * (int64_t)esz), &t)) return -1;
        const void *s = in_place ? MPI_IN_PLACE : (const void *)(src + o * esz);
        int rc = UT_CHECK_MPI(MPI_Allgather(s, k, dt, dst + o * esz, 1, t, m->comm));
        if (UT_CHECK_MPI(MPI_Type_free(&t))) rc = -1;
        if (rc) return -1;
    }
    return 0;
}

/* The window [o, o+k) of a buffer whose rank parts are given by counts:
 * each rank's count and offset inside the window, into cnt/dsp (ints). */
static void window_parts(int size, const int64_t *counts, int64_t o, int64_t k, int *cnt,
                         int *dsp) {
    int64_t at = 0;
    for (int r = 0; r < size; r++) {
        int64_t b = at > o ? at : o, e = min64(at + counts[r], o + k);
        cnt[r] = e > b ? (int)(e - b) : 0;
        dsp[r] = e > b ? (int)(b - o) : 0;
        at += counts[r];
    }
}

/* out[0, counts[rank]) = sum over ranks of rank's part of in[0, n), window by
 * window of at most m->chunk elements. */
static int reduce_scatterv_sum(mpi_impl *m, int rank, int size, const float *in, float *out,
                               const int64_t *counts, int64_t n) {
    int64_t mine = 0;
    for (int r = 0; r < rank; r++) mine += counts[r];
    for (int64_t o = 0; o < n; o += m->chunk) {
        int64_t k = min64(m->chunk, n - o);
        window_parts(size, counts, o, k, m->cnt, m->dsp);
        int64_t b = mine > o ? mine : o; /* where this rank's part of the window starts */
        float *dst = out + (b - mine);
        if (UT_CHECK_MPI(MPI_Reduce_scatter(in + o, dst, m->cnt, MPI_FLOAT, MPI_SUM, m->comm)))
            return -1;
    }
    return 0;
}

/* Every rank's part of buf[0, n) from that rank, in place, window by window. */
static int allgatherv(mpi_impl *m, int size, float *buf, const int64_t *counts, int64_t n) {
    for (int64_t o = 0; o < n; o += m->chunk) {
        int64_t k = min64(m->chunk, n - o);
        window_parts(size, counts, o, k, m->cnt, m->dsp);
        if (UT_CHECK_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf + o, m->cnt, m->dsp,
                                        MPI_FLOAT, m->comm)))
            return -1;
    }
    return 0;
}

static int bcast(mpi_impl *m, void *buf, int64_t bytes, int root) {
    char *p = buf;
    for (int64_t o = 0; o < bytes; o += m->chunk) {
        int k = (int)min64(m->chunk, bytes - o);
        if (UT_CHECK_MPI(MPI_Bcast(p + o, k, MPI_BYTE, root, m->comm))) return -1;
    }
    return 0;
}

/* What a split hands to the child: the group's communicators, this rank's
 * place in it. */
typedef struct {
    MPI_Comm comm, side;
    int rank, size;
} split_result;
_Static_assert(sizeof(split_result) <= UT_COMM_SPLIT_RESULT, "split result too large");

static int split(mpi_impl *m, const ut_comm_op *op) {
    split_result *r = op->out;
    r->comm = r->side = MPI_COMM_NULL;
    if (m->side == MPI_COMM_NULL) return 0; /* no MPI_THREAD_MULTIPLE: the child refuses, on every rank */
    if (UT_CHECK_MPI(MPI_Comm_split(m->comm, op->color, op->key, &r->comm)) ||
        UT_CHECK_MPI(MPI_Comm_set_errhandler(r->comm, MPI_ERRORS_RETURN)) ||
        UT_CHECK_MPI(MPI_Comm_rank(r->comm, &r->rank)) || UT_CHECK_MPI(MPI_Comm_size(r->comm, &r->size)))
        return -1;
    if (m->side != MPI_COMM_NULL && (UT_CHECK_MPI(MPI_Comm_dup(r->comm, &r->side)) ||
                                     UT_CHECK_MPI(MPI_Comm_set_errhandler(r->side, MPI_ERRORS_RETURN))))
        return -1;
    return 0;
}

/* Posts a send or receive as MPI requests in preq[slot]: the whole chunks as
 * one message of a contiguous type, the rest as another (every message
 * between two ranks matches in order, so the receiver's two meet the
 * sender's two). */
static int start_p2p(mpi_impl *m, const ut_comm_op *op, MPI_Request req[2]) {
    req[0] = req[1] = MPI_REQUEST_NULL;
    bool send = op->kind == UT_COMM_SEND_F32;
    float *buf = send ? (float *)op->in : op->out;
    int64_t whole = op->n / m->chunk, rest = op->n % m->chunk;
    MPI_Datatype t = MPI_FLOAT;
    if (whole && (UT_CHECK_MPI(MPI_Type_contiguous((int)m->chunk, MPI_FLOAT, &t)) || UT_CHECK_MPI(MPI_Type_commit(&t))))
        return -1;
    int rc = 0;
    if (whole)
        rc = send ? UT_CHECK_MPI(MPI_Isend(buf, (int)whole, t, op->peer, 0, m->comm, &req[0]))
                  : UT_CHECK_MPI(MPI_Irecv(buf, (int)whole, t, op->peer, 0, m->comm, &req[0]));
    if (whole && UT_CHECK_MPI(MPI_Type_free(&t))) rc = -1; /* freed once the requests are done */
    if (!rc && (rest || !whole)) {
        float *p = buf + whole * m->chunk;
        rc = send ? UT_CHECK_MPI(MPI_Isend(p, (int)rest, MPI_FLOAT, op->peer, 0, m->comm, &req[1]))
                  : UT_CHECK_MPI(MPI_Irecv(p, (int)rest, MPI_FLOAT, op->peer, 0, m->comm, &req[1]));
    }
    return rc;
}

static int run_op(ut_comm *c, mpi_impl *m, const ut_comm_op *op) {
    if (op->n == 0 && op->kind != UT_COMM_BARRIER && op->kind != UT_COMM_SPLIT) return 0; /* the same on every rank */
    switch (op->kind) {
    case UT_COMM_ALLREDUCE_F32: return allreduce_sum(m, op->out, op->n, MPI_FLOAT, 4);
    case UT_COMM_ALLREDUCE_F64: return allreduce_sum(m, op->out, op->n, MPI_DOUBLE, 8);
    case UT_COMM_ALLREDUCE_I64: return allreduce_sum(m, op->out, op->n, MPI_INT64_T, 8);
    case UT_COMM_ALLREDUCE: return allreduce_typed(m, c->size, op->out, op->n, op->dt, op->redop);
    case UT_COMM_REDUCE_SCATTER:
        return reduce_scatter_typed(m, c->rank, c->size, op->in, op->out, op->n, op->dt, op->redop);
    case UT_COMM_REDUCE_SCATTER_F32:
        return reduce_scatter_typed(m, c->rank, c->size, op->in, op->out, op->n, UT_F32, UT_REDUCE_SUM);
    case UT_COMM_ALLGATHER_F32: return allgather(m, c->rank, op->in, op->out, op->n, MPI_FLOAT, 4);
    case UT_COMM_ALLGATHER_U64:
        return allgather(m, c->rank, op->in, op->out, op->n, MPI_UINT64_T, 8);
    case UT_COMM_REDUCE_SCATTERV_F32:
        return reduce_scatterv_sum(m, c->rank, c->size, op->in, op->out, op->counts, op->n);
    case UT_COMM_ALLGATHERV_F32: return allgatherv(m, c->size, op->out, op->counts, op->n);
    case UT_COMM_BCAST: return bcast(m, op->out, op->n, op->root);
    case UT_COMM_BARRIER: return UT_CHECK_MPI(MPI_Barrier(m->comm));
    case UT_COMM_SPLIT: return split(m, op);
    case UT_COMM_SEND_F32:
    case UT_COMM_RECV_F32: break; /* started by start_p2p */
    }
    snprintf(mpi_err, sizeof mpi_err, "unknown operation kind %d", (int)op->kind);
    return -1;
}

// --- the communication thread -----------------------------------------------

static double since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) + (t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static struct timespec after(double s) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    int64_t ns = t.tv_nsec + (int64_t)(s * 1e9);
    t.tv_sec += ns / 1000000000;
    t.tv_nsec = ns % 1000000000;
    return t;
}

/* The first failure makes the communicator unusable; its message stays. */
static void mark_failed(ut_comm *c, mpi_impl *m, const ut_comm_op *op) {
    if (m->q.failed) return;
    char what[160], who[80];
    ut_comm_op_describe(op, what, sizeof what);
    snprintf(c->err, sizeof c->err, "%s: %s failed: %s", ut_comm_who(c, who, sizeof who), what, mpi_err);
    m->q.failed = op->seq;
}

/* Tests the sends and receives in flight (MPI calls without the lock: only
 * this thread touches their requests); true when one finished. */
static bool poll_p2p(ut_comm *c, mpi_impl *m) {
    uint64_t seqs[UT_COMM_QUEUE];
    int n = m->npend;
    memcpy(seqs, m->pend, (size_t)n * sizeof *seqs);
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
    bool fin[UT_COMM_QUEUE];
    int bad[UT_COMM_QUEUE];
    for (int i = 0; i < n; i++) {
        int flag = 0;
        bad[i] = UT_CHECK_MPI(MPI_Testall(2, m->preq[seqs[i] % UT_COMM_QUEUE], &flag, MPI_STATUSES_IGNORE));
        fin[i] = flag || bad[i];
    }
    UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
    bool any = false;
    for (int i = 0, k = 0; i < n; i++) {
        if (!fin[i]) {
            m->pend[k++] = seqs[i];
            continue;
        }
        any = true;
        if (bad[i]) mark_failed(c, m, &m->q.ring[seqs[i] % UT_COMM_QUEUE]);
        ut_comm_queue_done(&m->q, seqs[i]);
    }
    int k = 0;
    for (int i = 0; i < n; i++) k += !fin[i];
    m->npend = k; /* only this thread adds to the list */
    return any;
}

/* Starts queued operations in order until stopped with the queue empty and
 * nothing in flight: a collective runs to its end, a send or receive is
 * posted and then polled between operations (backing off from 20 us to 1 ms
 * while nothing else is queued). After a failure the communicator is
 * unusable: later operations fail without calling MPI (a collective
 * half-done on some ranks cannot be resumed). */
static void *comm_thread(void *arg) {
    ut_comm *c = arg;
    mpi_impl *m = c->impl;
    long idle_us = 20;
    UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
    for (;;) {
        while (m->q.started == m->q.queued && !m->npend && !m->q.stop)
            UT_CHECK_PTHREAD(pthread_cond_wait(&m->q.work, &m->q.mu));
        if (m->q.started == m->q.queued && !m->npend) break; /* stopped and drained */
        if (m->q.started < m->q.queued) {
            ut_comm_op op = m->q.ring[(m->q.started + 1) % UT_COMM_QUEUE];
            m->q.started = op.seq;
            bool skip = m->q.failed != 0, p2p = op.kind == UT_COMM_SEND_F32 || op.kind == UT_COMM_RECV_F32;
            struct timespec t0;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            if (!p2p) m->running = op.seq, m->running_since = t0;
            UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
            int rc = skip ? -1 : p2p ? start_p2p(m, &op, m->preq[op.seq % UT_COMM_QUEUE]) : run_op(c, m, &op);
            UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
            m->running = 0;
            if (rc && !skip) mark_failed(c, m, &op);
            if (p2p && !rc) {
                m->pend_since[op.seq % UT_COMM_QUEUE] = t0;
                m->pend[m->npend++] = op.seq;
            } else {
                ut_comm_queue_done(&m->q, op.seq);
            }
            idle_us = 20;
        }
        if (m->npend && poll_p2p(c, m)) idle_us = 20;
        else if (m->npend && m->q.started == m->q.queued) { /* stopping too: wait, do not spin */
            struct timespec until = after(idle_us * 1e-6);
            int rc = pthread_cond_timedwait(&m->q.work, &m->q.mu, &until);
            if (rc && rc != ETIMEDOUT) UT_CHECK_PTHREAD(rc);
            idle_us = idle_us < 1000 ? 2 * idle_us : 1000;
        }
    }
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
    return NULL;
}

// --- the watchdog and its side channel -----------------------------------------
/* When an operation times out, the rank's watchdog asks every other rank's
 * watchdog, over m->side, where its rank is: the last operation it issued and
 * finished, and whether it is inside MPI. A rank whose main thread never
 * reached the collective still answers (its watchdog is a thread of its own);
 * a stopped or wedged process does not, and the report says so. */

enum { TAG_QUERY = 1, TAG_REPLY = 2 };

typedef struct status_reply {
    uint64_t queued, finished, running;
    char last[120]; /* the newest operation issued, described */
} status_reply;

/* This rank's progress; called with m->q.mu held. */
static void own_status(mpi_impl *m, status_reply *r) {
    memset(r, 0, sizeof *r);
    r->queued = m->q.queued;
    r->finished = m->q.finished;
    r->running = m->running;
    if (m->q.queued) ut_comm_op_describe(&m->q.ring[m->q.queued % UT_COMM_QUEUE], r->last, sizeof r->last);
}

/* Answers the queries that arrived (the receive is re-posted after each). */
static void answer_queries(mpi_impl *m, MPI_Request *req, int *from) {
    for (;;) {
        int got = 0;
        MPI_Status st;
        if (MPI_Test(req, &got, &st) != MPI_SUCCESS || !got) return;
        status_reply r;
        UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
        own_status(m, &r);
        UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
        MPI_Send(&r, (int)sizeof r, MPI_BYTE, st.MPI_SOURCE, TAG_REPLY, m->side);
        if (MPI_Irecv(from, 1, MPI_INT, MPI_ANY_SOURCE, TAG_QUERY, m->side, req) != MPI_SUCCESS) {
            *req = MPI_REQUEST_NULL;
            return;
        }
    }
}

static void append(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t n, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

/* Asks every rank where it is (answering the others' questions meanwhile,
 * for up to wait_s) and writes what the answers say about operation seq
 * into buf. *defer is set when a lower rank waits in the same operation:
 * its watchdog reports, so this one's line would only repeat it. */
static void pause_10ms(void) {
    struct timespec t = {0, 10 * 1000 * 1000};
    nanosleep(&t, NULL);
}

/* "tp " for a group's ranks, "" for the world's */
static const char *grp(const ut_comm *c) { return strcmp(c->name, "world") ? ut_fmt("%s ", c->name) : ""; }

static void ask_the_ranks(ut_comm *c, mpi_impl *m, uint64_t seq, const char *what, int peer, double wait_s,
                          MPI_Request *query, int *from, char *buf, size_t n, bool *defer) {
    char g[40];
    snprintf(g, sizeof g, "%s", grp(c));
    int size = c->size;
    status_reply *rep = ut_calloc_check((size_t)size, sizeof *rep);
    MPI_Request *req = ut_calloc_check((size_t)size * 2, sizeof *req);
    bool *got = ut_calloc_check((size_t)size, sizeof *got);
    int me = c->rank;
    for (int r = 0; r < size; r++) {
        req[2 * r] = req[2 * r + 1] = MPI_REQUEST_NULL;
        if (r == me) continue;
        MPI_Irecv(&rep[r], (int)sizeof rep[r], MPI_BYTE, r, TAG_REPLY, m->side, &req[2 * r]);
        MPI_Isend(&me, 1, MPI_INT, r, TAG_QUERY, m->side, &req[2 * r + 1]);
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int left = size - 1; left > 0 && since(&t0) < wait_s;) {
        answer_queries(m, query, from);
        for (int r = 0; r < size; r++) {
            int done = 0;
            if (r == me || got[r] || req[2 * r] == MPI_REQUEST_NULL) continue;
            if (MPI_Test(&req[2 * r], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) got[r] = true, left--;
        }
        pause_10ms();
    }
    *defer = false;
    if (peer >= 0) { /* a send or receive: what its partner is doing */
        const status_reply *x = &rep[peer];
        if (!got[peer])
            append(buf, n, "; %srank %d did not answer within %g s (stopped, or the process is stuck)", g, peer,
                   wait_s);
        else
            append(buf, n, "; %srank %d has not posted its match (its newest operation: %s, %s)", g, peer,
                   x->queued ? x->last : "none", x->finished == x->queued ? "done" : "in progress");
        ut_free(got);
        ut_free(req);
        ut_free(rep);
        return;
    }
    /* the ranks that never reached seq, those in another operation #seq,
     * those that did not answer; the ones waiting in it */
    char waiting[200] = "", silent[200] = "";
    int nwait = 0, nsilent = 0;
    for (int r = 0; r < size; r++) {
        if (r == me) {
            append(waiting, sizeof waiting, "%s%d", nwait++ ? ", " : "", r);
            continue;
        }
        if (!got[r]) {
            append(silent, sizeof silent, "%s%d", nsilent++ ? ", " : "", r);
            continue;
        }
        const status_reply *x = &rep[r];
        if (x->queued < seq)
            append(buf, n, "; %srank %d has not reached it (its last operation: %s, %s)", g, r,
                   x->queued ? rep[r].last : "none", x->finished == x->queued ? "done" : "in progress");
        else if (x->running == seq || (x->finished < seq && x->queued >= seq)) {
            /* the reply's description is cut to its field: compare that much */
            if (x->queued == seq && strncmp(rep[r].last, what, sizeof rep[r].last - 1))
                append(buf, n, "; %srank %d is in %s instead", g, r, rep[r].last);
            else {
                append(waiting, sizeof waiting, "%s%d", nwait++ ? ", " : "", r);
                if (r < me) *defer = true;
            }
        } else
            append(buf, n, "; %srank %d has finished it (its newest operation: %s)", g, r, rep[r].last);
    }
    if (nsilent)
        append(buf, n, "; %srank%s %s did not answer within %g s (stopped, or the process is stuck)", g,
               nsilent > 1 ? "s" : "", silent, wait_s);
    append(buf, n, "; %srank%s %s wait%s in it", g, nwait > 1 ? "s" : "", waiting, nwait > 1 ? "" : "s");
    /* unanswered requests are left to MPI_Abort */
    ut_free(got);
    ut_free(req);
    ut_free(rep);
}

/* Wakes a few times per timeout; an operation running past it ends the job,
 * after asking the other ranks which of them did not arrive. Between times
 * it answers the other watchdogs' questions. */
static void *watchdog_thread(void *arg) {
    ut_comm *c = arg;
    mpi_impl *m = c->impl;
    double period = c->timeout_s / 8 < 0.25 ? c->timeout_s / 8 : 0.25;
    int from = 0;
    MPI_Request query = MPI_REQUEST_NULL;
    if (m->side != MPI_COMM_NULL && c->size > 1 &&
        MPI_Irecv(&from, 1, MPI_INT, MPI_ANY_SOURCE, TAG_QUERY, m->side, &query) != MPI_SUCCESS)
        query = MPI_REQUEST_NULL;
    UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
    while (!m->q.stop) {
        /* the blocking collective, else the oldest send or receive, past the timeout */
        uint64_t seq = m->running && since(&m->running_since) > c->timeout_s ? m->running : 0;
        for (int i = 0; !seq && i < m->npend; i++)
            if (since(&m->pend_since[m->pend[i] % UT_COMM_QUEUE]) > c->timeout_s) seq = m->pend[i];
        if (seq) {
            const ut_comm_op *op = &m->q.ring[seq % UT_COMM_QUEUE];
            int peer = op->kind == UT_COMM_SEND_F32 || op->kind == UT_COMM_RECV_F32 ? op->peer : -1;
            char what[160], report[1200] = "", who[80];
            ut_comm_op_describe(op, what, sizeof what);
            UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
            bool defer = false;
            double wait_s = c->timeout_s < 2 ? c->timeout_s : 2;
            if (query != MPI_REQUEST_NULL)
                ask_the_ranks(c, m, seq, what, peer, wait_s, &query, &from, report, sizeof report, &defer);
            /* a lower rank waiting in the same operation reports; this one
             * keeps answering, and reports itself if that does not end the job */
            for (struct timespec t0 = after(0); defer && since(&t0) < 4 * wait_s;) {
                answer_queries(m, &query, &from);
                pause_10ms();
            }
            fprintf(stderr, "utrain: %s: timeout after %g s in %s%s\n", ut_comm_who(c, who, sizeof who),
                    c->timeout_s, what, report);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1);
            abort(); /* MPI_Abort does not return */
        }
        UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
        if (query != MPI_REQUEST_NULL) answer_queries(m, &query, &from);
        UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
        if (m->q.stop) break;
        struct timespec until = after(period);
        int rc = pthread_cond_timedwait(&m->tick, &m->q.mu, &until);
        if (rc && rc != ETIMEDOUT) UT_CHECK_PTHREAD(rc);
    }
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
    if (query != MPI_REQUEST_NULL) {
        MPI_Cancel(&query);
        MPI_Wait(&query, MPI_STATUS_IGNORE);
    }
    return NULL;
}

// --- the backend's entry points ---------------------------------------------

static void mpi_submit(ut_comm *c, const ut_comm_op *op) { ut_comm_queue_submit(&((mpi_impl *)c->impl)->q, op); }
static int mpi_wait(ut_comm *c, uint64_t seq) { return ut_comm_queue_wait(&((mpi_impl *)c->impl)->q, seq); }
static int mpi_test(ut_comm *c, uint64_t seq) { return ut_comm_queue_test(&((mpi_impl *)c->impl)->q, seq); }

static void mpi_finalize(ut_comm *c) {
    mpi_impl *m = c->impl;
    char who[80];
    UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
    m->q.stop = true;
    UT_CHECK_PTHREAD(pthread_cond_signal(&m->q.work));
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
    /* the comm thread drains the queue before it ends; the watchdog keeps
     * watching until then */
    UT_CHECK_PTHREAD(pthread_join(m->thread, NULL));
    if (m->has_watchdog) {
        UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
        UT_CHECK_PTHREAD(pthread_cond_signal(&m->tick));
        UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
        UT_CHECK_PTHREAD(pthread_join(m->watchdog, NULL));
    }
    if (UT_CHECK_MPI(MPI_Comm_free(&m->comm)))
        fprintf(stderr, "utrain: %s: warning: %s\n", ut_comm_who(c, who, sizeof who), mpi_err);
    if (m->side != MPI_COMM_NULL && UT_CHECK_MPI(MPI_Comm_free(&m->side)))
        fprintf(stderr, "utrain: %s: warning: %s\n", ut_comm_who(c, who, sizeof who), mpi_err);
    if (m->own_mpi) {
        if (UT_CHECK_MPI(MPI_Finalize()))
            fprintf(stderr, "utrain: %s: warning: %s\n", ut_comm_who(c, who, sizeof who), mpi_err);
        ut_set_abort_handler(NULL);
    }
    UT_CHECK_PTHREAD(pthread_cond_destroy(&m->tick));
    ut_comm_queue_destroy(&m->q);
    ut_free(m->cnt);
    ut_free(m->dsp);
    ut_free(m);
    c->impl = NULL;
}

static int mpi_child(ut_comm *parent, ut_comm *c, const void *result, char *err, size_t n);

static const ut_comm_vtable mpi_backend = {
    .name = "mpi", .submit = mpi_submit, .wait = mpi_wait, .test = mpi_test,
    .finalize = mpi_finalize, .child = mpi_child};

// --- initialisation ---------------------------------------------------------

static int64_t chunk_from_env(void) {
    const char *s = getenv("UT_COMM_CHUNK");
    if (!s || !*s) return UT_COMM_CHUNK_MAX;
    long long v = strtoll(s, NULL, 10);
    return v >= 1 && v <= UT_COMM_CHUNK_MAX ? (int64_t)v : UT_COMM_CHUNK_MAX;
}

/* MPI itself: initialised here unless the program did it, at a thread level
 * that lets the comm thread call MPI while the caller computes. */
static int mpi_start(mpi_impl *m, int *argc, char ***argv, char *err, size_t n) {
    int init = 0, provided = 0;
    m->side = MPI_COMM_NULL;
    if (UT_CHECK_MPI(MPI_Initialized(&init))) goto fail;
    if (!init) {
        if (UT_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided))) goto fail;
        m->own_mpi = true;
    } else if (UT_CHECK_MPI(MPI_Query_thread(&provided))) {
        goto fail;
    }
    ut_set_abort_handler(mpi_abort_handler);
    if (provided < MPI_THREAD_SERIALIZED) {
        snprintf(err, n, "MPI gives thread level %d; utrain needs MPI_THREAD_SERIALIZED (%d) or more",
                 provided, MPI_THREAD_SERIALIZED);
        return -1;
    }
    if (UT_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) ||
        UT_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &m->comm)) ||
        UT_CHECK_MPI(MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN)))
        goto fail;
    if (provided >= MPI_THREAD_MULTIPLE &&
        (UT_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &m->side)) ||
         UT_CHECK_MPI(MPI_Comm_set_errhandler(m->side, MPI_ERRORS_RETURN))))
        goto fail;
    return 0;
fail:
    snprintf(err, n, "cannot start MPI: %s", mpi_err);
    return -1;
}

static void impl_start(ut_comm *c, mpi_impl *m);

int ut_comm_mpi_init(ut_comm *c, int *argc, char ***argv, char *err, size_t n) {
    mpi_impl *m = ut_calloc_check(1, sizeof *m);
    m->chunk = chunk_from_env();
    if (mpi_start(m, argc, argv, err, n)) {
        /* MPI may be half up: leave it to the process exit (MPI_Finalize
         * could wait for ranks that will never come) */
        ut_free(m);
        return -1;
    }
    if (UT_CHECK_MPI(MPI_Comm_rank(m->comm, &c->rank)) ||
        UT_CHECK_MPI(MPI_Comm_size(m->comm, &c->size))) {
        snprintf(err, n, "cannot start MPI: %s", mpi_err);
        ut_free(m);
        return -1;
    }
    impl_start(c, m);
    return 0;
}

/* A group's communicator over the communicators the split made. */
static int mpi_child(ut_comm *parent, ut_comm *c, const void *result, char *err, size_t n) {
    const split_result *r = result;
    const mpi_impl *pm = parent->impl;
    if (r->comm == MPI_COMM_NULL) {
        char who[80];
        return ut_errorf(err, n, "%s: process groups need MPI_THREAD_MULTIPLE (each group's thread calls MPI); "
                                 "this MPI gives less", ut_comm_who(parent, who, sizeof who));
    }
    mpi_impl *m = ut_calloc_check(1, sizeof *m);
    m->chunk = pm->chunk;
    m->comm = r->comm;
    m->side = r->side;
    c->rank = r->rank;
    c->size = r->size;
    impl_start(c, m);
    return 0;
}

/* The rest of a communicator's state, and its threads. */
static void impl_start(ut_comm *c, mpi_impl *m) {
    m->cnt = ut_calloc_check((size_t)c->size, sizeof(int));
    m->dsp = ut_calloc_check((size_t)c->size, sizeof(int));
    ut_comm_queue_init(&m->q);
    pthread_condattr_t mono;
    UT_CHECK_PTHREAD(pthread_condattr_init(&mono));
    UT_CHECK_PTHREAD(pthread_condattr_setclock(&mono, CLOCK_MONOTONIC));
    UT_CHECK_PTHREAD(pthread_cond_init(&m->tick, &mono));
    UT_CHECK_PTHREAD(pthread_condattr_destroy(&mono));
    c->impl = m;
    c->be = &mpi_backend;
    UT_CHECK_PTHREAD(pthread_create(&m->thread, NULL, comm_thread, c));
    if (c->timeout_s > 0) {
        UT_CHECK_PTHREAD(pthread_create(&m->watchdog, NULL, watchdog_thread, c));
        m->has_watchdog = true;
    }
}
