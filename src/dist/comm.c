/* The communicator interface: backend choice, the world communicator, request
 * handles and sequence numbers, statistics, start-up agreement checks, and the
 * single-process backend (collectives are copies or nothing, done at once).
 * Requests are handles that carry the operation's sequence number: backends
 * start operations in issue order and finish collectives in that order (a
 * send or receive may finish later), so a request needs no slot of its own
 * once it has run. Process groups (ut_comm_split) are communicators of their
 * own, each with its own queue and thread. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_internal.h"
#include "../backend/backend.h"
#include "utrain/base.h"

// --- names and descriptions -----------------------------------------------

const char *ut_comm_op_name(enum ut_comm_kind k) {
    switch (k) {
    case UT_COMM_ALLREDUCE_F32: return "allreduce";
    case UT_COMM_REDUCE_SCATTER_F32: return "reduce_scatter";
    case UT_COMM_ALLGATHER_F32: return "allgather";
    case UT_COMM_ALLREDUCE_F64: return "allreduce_f64";
    case UT_COMM_ALLREDUCE_I64: return "allreduce_i64";
    case UT_COMM_ALLGATHER_U64: return "check_same";
    case UT_COMM_REDUCE_SCATTERV_F32: return "reduce_scatterv";
    case UT_COMM_ALLGATHERV_F32: return "allgatherv";
    case UT_COMM_BCAST: return "bcast";
    case UT_COMM_BARRIER: return "barrier";
    case UT_COMM_SPLIT: return "split";
    case UT_COMM_SEND_F32: return "send";
    case UT_COMM_RECV_F32: return "recv";
    case UT_COMM_ALLREDUCE: return "allreduce";
    case UT_COMM_REDUCE_SCATTER: return "reduce_scatter";
    }
    return "?";
}

void ut_comm_op_describe(const ut_comm_op *op, char *buf, size_t n) {
    const char *name = ut_comm_op_name(op->kind);
    if (op->kind == UT_COMM_BARRIER)
        snprintf(buf, n, "%s #%" PRIu64, name, op->seq);
    else if (op->kind == UT_COMM_SPLIT)
        snprintf(buf, n, "%s #%" PRIu64 " (color %d)", name, op->seq, op->color);
    else if (op->kind == UT_COMM_SEND_F32 || op->kind == UT_COMM_RECV_F32)
        snprintf(buf, n, "%s #%" PRIu64 " (%" PRId64 " elements %s rank %d)", name, op->seq, op->n,
                 op->kind == UT_COMM_SEND_F32 ? "to" : "from", op->peer);
    else if (op->kind == UT_COMM_ALLREDUCE || op->kind == UT_COMM_REDUCE_SCATTER)
        snprintf(buf, n, "%s #%" PRIu64 " (%" PRId64 " elements, %s %s)", name, op->seq, op->n, ut_dtype_name(op->dt),
                 ut_reduce_op_name(op->redop));
    else if (op->kind == UT_COMM_BCAST)
        snprintf(buf, n, "%s #%" PRIu64 " (%" PRId64 " bytes from rank %d)", name, op->seq, op->n,
                 op->root);
    else
        snprintf(buf, n, "%s #%" PRIu64 " (%" PRId64 " elements)", name, op->seq, op->n);
}

// --- the single-process backend ---------------------------------------------

/* World size 1: a reduction is the identity, a scatter or gather a copy
 * (memmove: an in-place all-gather passes in == out). */
static void single_submit(ut_comm *c, const ut_comm_op *op) {
    (void)c;
    switch (op->kind) {
    case UT_COMM_REDUCE_SCATTER_F32:
    case UT_COMM_ALLGATHER_F32:
        if (op->n) memmove(op->out, op->in, (size_t)op->n * sizeof(float));
        break;
    case UT_COMM_ALLGATHER_U64:
        if (op->n) memmove(op->out, op->in, (size_t)op->n * sizeof(uint64_t));
        break;
    case UT_COMM_REDUCE_SCATTERV_F32:
        if (op->counts[0]) memmove(op->out, op->in, (size_t)op->counts[0] * sizeof(float));
        break;
    case UT_COMM_REDUCE_SCATTER: /* sum, max and average of one value: the value */
        if (op->n) memmove(op->out, op->in, (size_t)op->n * ut_dtype_size(op->dt));
        break;
    default: break; /* allreduce, bcast from rank 0, barrier: nothing to do */
    }
}

static int single_wait(ut_comm *c, uint64_t seq) {
    (void)c;
    (void)seq;
    return 0;
}

static int single_test(ut_comm *c, uint64_t seq) {
    (void)c;
    (void)seq;
    return 1;
}

static void single_finalize(ut_comm *c) { (void)c; }

const char *ut_comm_who(const ut_comm *c, char *buf, size_t n) {
    if (!strcmp(c->name, "world")) snprintf(buf, n, "rank %d", c->rank);
    else snprintf(buf, n, "%s rank %d (world rank %d)", c->name, c->rank, c->world_rank);
    return buf;
}

const char *ut_comm_peer_name(const ut_comm *c, int r, char *buf, size_t n) {
    if (!strcmp(c->name, "world")) snprintf(buf, n, "rank %d", r);
    else snprintf(buf, n, "%s rank %d", c->name, r);
    return buf;
}

static const ut_comm_vtable single_backend = {.name = "single",
                                              .submit = single_submit,
                                              .wait = single_wait,
                                              .test = single_test,
                                              .finalize = single_finalize};

// --- the operation queue the threaded backends share -------------------------

void ut_comm_queue_init(ut_comm_queue *q) {
    memset(q, 0, sizeof *q);
    pthread_condattr_t mono;
    UT_CHECK_PTHREAD(pthread_condattr_init(&mono));
    UT_CHECK_PTHREAD(pthread_condattr_setclock(&mono, CLOCK_MONOTONIC));
    UT_CHECK_PTHREAD(pthread_mutex_init(&q->mu, NULL));
    UT_CHECK_PTHREAD(pthread_cond_init(&q->work, &mono));
    UT_CHECK_PTHREAD(pthread_cond_init(&q->done_cv, NULL));
    UT_CHECK_PTHREAD(pthread_condattr_destroy(&mono));
}

void ut_comm_queue_destroy(ut_comm_queue *q) {
    UT_CHECK_PTHREAD(pthread_cond_destroy(&q->work));
    UT_CHECK_PTHREAD(pthread_cond_destroy(&q->done_cv));
    UT_CHECK_PTHREAD(pthread_mutex_destroy(&q->mu));
}

void ut_comm_queue_submit(ut_comm_queue *q, const ut_comm_op *op) {
    UT_CHECK_PTHREAD(pthread_mutex_lock(&q->mu));
    UT_ASSERT(op->seq == q->queued + 1 && !q->stop);
    while (q->queued - q->finished >= UT_COMM_QUEUE) UT_CHECK_PTHREAD(pthread_cond_wait(&q->done_cv, &q->mu));
    q->ring[op->seq % UT_COMM_QUEUE] = *op;
    q->queued = op->seq;
    UT_CHECK_PTHREAD(pthread_cond_signal(&q->work));
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&q->mu));
}

int ut_comm_queue_wait(ut_comm_queue *q, uint64_t seq) {
    UT_CHECK_PTHREAD(pthread_mutex_lock(&q->mu));
    while (q->finished < seq && !q->done[seq % UT_COMM_QUEUE]) UT_CHECK_PTHREAD(pthread_cond_wait(&q->done_cv, &q->mu));
    int rc = q->failed && seq >= q->failed ? -1 : 0;
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&q->mu));
    return rc;
}

int ut_comm_queue_test(ut_comm_queue *q, uint64_t seq) {
    UT_CHECK_PTHREAD(pthread_mutex_lock(&q->mu));
    bool done = q->finished >= seq || q->done[seq % UT_COMM_QUEUE];
    int rc = !done ? 0 : q->failed && seq >= q->failed ? -1 : 1;
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&q->mu));
    return rc;
}

void ut_comm_queue_done(ut_comm_queue *q, uint64_t seq) {
    q->done[seq % UT_COMM_QUEUE] = true;
    while (q->finished < q->started && q->done[(q->finished + 1) % UT_COMM_QUEUE]) {
        q->done[(q->finished + 1) % UT_COMM_QUEUE] = false;
        q->finished++;
    }
    UT_CHECK_PTHREAD(pthread_cond_broadcast(&q->done_cv));
}

// --- construction and the world ---------------------------------------------

static pthread_mutex_t world_mu = PTHREAD_MUTEX_INITIALIZER;
static ut_comm *world;
static ut_comm single_world; /* ut_comm_world() before (or without) ut_comm_init */

static void comm_setup(ut_comm *c, double timeout_s) {
    memset(c, 0, sizeof *c);
    atomic_init(&c->seq, 0);
    c->timeout_s = timeout_s;
    c->be = &single_backend;
    c->size = 1;
    snprintf(c->name, sizeof c->name, "world");
    UT_CHECK_PTHREAD(pthread_mutex_init(&c->issue_mu, NULL));
    UT_CHECK_PTHREAD(pthread_mutex_init(&c->stats_mu, NULL));
    UT_CHECK_PTHREAD(pthread_mutex_init(&c->stream_mu, NULL));
}

static void comm_teardown(ut_comm *c) {
    for (int d = 0; d < UT_DEVICE_COUNT; d++)
        if (c->streams[d]) { /* its last copies finish first */
            const ut_backend *be = ut_backend_get((ut_device)d);
            be->stream_sync(c->streams[d]);
            be->stream_free(c->streams[d]);
            c->streams[d] = NULL;
        }
    UT_CHECK_PTHREAD(pthread_mutex_destroy(&c->issue_mu));
    UT_CHECK_PTHREAD(pthread_mutex_destroy(&c->stats_mu));
    UT_CHECK_PTHREAD(pthread_mutex_destroy(&c->stream_mu));
}

void *ut_comm_stream(ut_comm *c, ut_device dev) {
    const ut_backend *be = ut_backend_get(dev);
    if (!be) return NULL;
    UT_CHECK_PTHREAD(pthread_mutex_lock(&c->stream_mu));
    if (!c->streams[dev]) c->streams[dev] = be->stream_new(UT_STREAM_COMM);
    void *s = c->streams[dev];
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&c->stream_mu));
    return s;
}

static bool under_launcher(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

bool ut_comm_launched(void) {
    const char *sup = getenv("UTRAIN_SUPERVISOR");
    return under_launcher() || ut_comm_tcp_launched() || (sup && *sup);
}

ut_comm *ut_comm_init(int *argc, char ***argv, bool force_mpi, double timeout_s, char *err,
                      size_t n) {
    if (!(timeout_s >= 0)) {
        snprintf(err, n, "communicator timeout must be >= 0 seconds, got %g", timeout_s);
        return NULL;
    }
    ut_comm *c = ut_malloc_check(sizeof *c);
    comm_setup(c, timeout_s);
    bool mpi = force_mpi || under_launcher();
    if ((mpi && ut_comm_mpi_init(c, argc, argv, err, n)) || (!mpi && ut_comm_tcp_launched() && ut_comm_tcp_init(c, err, n))) {
        comm_teardown(c);
        ut_free(c);
        return NULL;
    }
    c->world_rank = c->rank;
    UT_CHECK_PTHREAD(pthread_mutex_lock(&world_mu));
    if (!world || world->is_static) world = c;
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&world_mu));
    return c;
}

ut_comm *ut_comm_world(void) {
    UT_CHECK_PTHREAD(pthread_mutex_lock(&world_mu));
    if (!world) {
        comm_setup(&single_world, 0);
        single_world.is_static = true;
        world = &single_world;
    }
    ut_comm *c = world;
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&world_mu));
    return c;
}

void ut_comm_finalize(ut_comm *c) {
    if (!c) return;
    ut_comm_direct_free_all(c);
    c->be->finalize(c);
    UT_CHECK_PTHREAD(pthread_mutex_lock(&world_mu));
    if (world == c) world = NULL;
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&world_mu));
    comm_teardown(c);
    if (!c->is_static) ut_free(c);
}

int ut_comm_rank(const ut_comm *c) { return c->rank; }
int ut_comm_world_rank(const ut_comm *c) { return c->world_rank; }
const char *ut_comm_name(const ut_comm *c) { return c->name; }
int ut_comm_size(const ut_comm *c) { return c->size; }
const char *ut_comm_backend(const ut_comm *c) { return c->be->name; }
const char *ut_comm_error(const ut_comm *c) { return c->err; }

// --- issuing and waiting ----------------------------------------------------

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Payload bytes this rank hands to the collective; nothing moves at size 1. */
static double op_bytes(const ut_comm *c, const ut_comm_op *op) {
    if (c->size == 1) return 0;
    double n = (double)op->n;
    switch (op->kind) {
    case UT_COMM_ALLREDUCE_F32: return n * 4;
    case UT_COMM_REDUCE_SCATTER_F32:
    case UT_COMM_ALLGATHER_F32: return n * 4 * c->size;
    case UT_COMM_REDUCE_SCATTERV_F32:
    case UT_COMM_ALLGATHERV_F32: return n * 4;
    case UT_COMM_ALLREDUCE_F64:
    case UT_COMM_ALLREDUCE_I64: return n * 8;
    case UT_COMM_ALLREDUCE: return n * (double)ut_dtype_size(op->dt);
    case UT_COMM_REDUCE_SCATTER: return n * (double)ut_dtype_size(op->dt) * c->size;
    case UT_COMM_ALLGATHER_U64: return n * 8 * c->size;
    case UT_COMM_BCAST: return n;
    case UT_COMM_SEND_F32: return n * 4;
    case UT_COMM_BARRIER:
    case UT_COMM_SPLIT:
    case UT_COMM_RECV_F32: return 0;
    }
    return 0;
}

static uint64_t issue_op(ut_comm *c, ut_comm_op op) {
    UT_ASSERT(op.n >= 0);
    UT_CHECK_PTHREAD(pthread_mutex_lock(&c->issue_mu));
    op.seq = atomic_fetch_add(&c->seq, 1) + 1;
    c->be->submit(c, &op); /* may block while the MPI queue is full */
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&c->issue_mu));
    double bytes = op_bytes(c, &op);
    UT_CHECK_PTHREAD(pthread_mutex_lock(&c->stats_mu));
    c->bytes += bytes;
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&c->stats_mu));
    return op.seq;
}

static uint64_t issue(ut_comm *c, enum ut_comm_kind kind, const void *in, void *out, int64_t n,
                      int root) {
    return issue_op(c, (ut_comm_op){.kind = kind, .in = in, .out = out, .n = n, .root = root});
}

static int64_t sum_counts(const ut_comm *c, const int64_t *counts) {
    int64_t n = 0;
    for (int r = 0; r < c->size; r++) {
        UT_ASSERT(counts[r] >= 0);
        n += counts[r];
    }
    return n;
}

static int wait_seq(ut_comm *c, uint64_t seq) {
    double t0 = now_s();
    int rc = c->be->wait(c, seq);
    double dt = now_s() - t0;
    UT_CHECK_PTHREAD(pthread_mutex_lock(&c->stats_mu));
    c->wait_s += dt;
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&c->stats_mu));
    return rc;
}

static ut_comm_req *handle(uint64_t seq) { return (ut_comm_req *)(uintptr_t)seq; }

ut_comm_req *ut_comm_iallreduce(ut_comm *c, float *buf, int64_t n) {
    return handle(issue(c, UT_COMM_ALLREDUCE_F32, NULL, buf, n, 0));
}

ut_comm_req *ut_comm_iallreduce16(ut_comm *c, uint16_t *buf, int64_t n, ut_dtype dt) {
    UT_ASSERT(ut_dtype_is16(dt));
    return ut_comm_iallreduce_typed(c, buf, n, dt, UT_REDUCE_SUM);
}

const char *ut_reduce_op_name(ut_reduce_op op) {
    static const char *const names[UT_REDUCE_COUNT] = {"sum", "max", "avg"};
    return (unsigned)op < UT_REDUCE_COUNT ? names[op] : "?";
}

void ut_comm_combine(const void *in, void *inout, int64_t len, ut_dtype dt, ut_reduce_op op) {
    const ut_backend *cpu = ut_backend_get(UT_CPU);
    size_t esz = ut_dtype_size(dt);
    float a[256], b[256];
    for (int64_t o = 0; o < len; o += 256) {
        int64_t k = len - o < 256 ? len - o : 256;
        cpu->convert(a, UT_F32, (const char *)in + (size_t)o * esz, dt, k);
        cpu->convert(b, UT_F32, (char *)inout + (size_t)o * esz, dt, k);
        if (op == UT_REDUCE_MAX)
            for (int64_t i = 0; i < k; i++) b[i] = a[i] != a[i] || a[i] > b[i] ? a[i] : b[i];
        else
            for (int64_t i = 0; i < k; i++) b[i] += a[i];
        cpu->convert((char *)inout + (size_t)o * esz, dt, b, UT_F32, k);
    }
}

void ut_comm_average(void *buf, int64_t n, ut_dtype dt, int size) {
    const ut_backend *cpu = ut_backend_get(UT_CPU);
    size_t esz = ut_dtype_size(dt);
    float a[256];
    for (int64_t o = 0; o < n; o += 256) {
        int64_t k = n - o < 256 ? n - o : 256;
        char *p = (char *)buf + (size_t)o * esz;
        cpu->convert(a, UT_F32, p, dt, k);
        for (int64_t i = 0; i < k; i++) a[i] /= (float)size;
        cpu->convert(p, dt, a, UT_F32, k);
    }
}

static void check_typed(ut_dtype dt, ut_reduce_op op) {
    UT_ASSERT(dt == UT_F32 || dt == UT_BF16 || dt == UT_F16);
    UT_ASSERT((unsigned)op < UT_REDUCE_COUNT);
}

ut_comm_req *ut_comm_iallreduce_typed(ut_comm *c, void *buf, int64_t n, ut_dtype dt, ut_reduce_op op) {
    check_typed(dt, op);
    return handle(issue_op(c, (ut_comm_op){.kind = UT_COMM_ALLREDUCE, .out = buf, .n = n, .dt = dt, .redop = op}));
}

ut_comm_req *ut_comm_ireduce_scatter_typed(ut_comm *c, const void *in, void *out, int64_t n, ut_dtype dt,
                                           ut_reduce_op op) {
    check_typed(dt, op);
    return handle(issue_op(c, (ut_comm_op){.kind = UT_COMM_REDUCE_SCATTER, .in = in, .out = out, .n = n, .dt = dt,
                                           .redop = op}));
}

/* Neither communicator built in reaches device memory: MPI here is not
 * CUDA-aware, and NCCL is not built in yet. */
bool ut_comm_accepts_device_memory(const ut_comm *c, ut_device dev) {
    (void)c;
    return dev == UT_CPU;
}

ut_comm_req *ut_comm_ireduce_scatter(ut_comm *c, const float *in, float *out, int64_t n) {
    return handle(issue(c, UT_COMM_REDUCE_SCATTER_F32, in, out, n, 0));
}

ut_comm_req *ut_comm_iallgather(ut_comm *c, const float *in, float *out, int64_t n) {
    return handle(issue(c, UT_COMM_ALLGATHER_F32, in, out, n, 0));
}

ut_comm_req *ut_comm_ireduce_scatterv(ut_comm *c, const float *in, float *out,
                                      const int64_t *counts) {
    return handle(issue_op(c, (ut_comm_op){.kind = UT_COMM_REDUCE_SCATTERV_F32, .in = in,
                                           .out = out, .n = sum_counts(c, counts),
                                           .counts = counts}));
}

ut_comm_req *ut_comm_iallgatherv(ut_comm *c, float *buf, const int64_t *counts) {
    return handle(issue_op(c, (ut_comm_op){.kind = UT_COMM_ALLGATHERV_F32, .in = buf, .out = buf,
                                           .n = sum_counts(c, counts), .counts = counts}));
}

/* A send to or receive from peer: NULL with a message when peer is not
 * another rank of c. */
static ut_comm_req *p2p(ut_comm *c, enum ut_comm_kind kind, const float *in, float *out, int64_t n, int peer) {
    char who[80];
    const char *what = kind == UT_COMM_SEND_F32 ? "send" : "recv";
    if (peer < 0 || peer >= c->size || peer == c->rank) {
        snprintf(c->err, sizeof c->err, "%s: %s: peer %d is %s", ut_comm_who(c, who, sizeof who), what, peer,
                 peer == c->rank ? "this rank itself" : ut_fmt("not a rank of %s (size %d)", c->name, c->size));
        return NULL;
    }
    if (n < 0) {
        snprintf(c->err, sizeof c->err, "%s: %s: %lld elements", ut_comm_who(c, who, sizeof who), what,
                 (long long)n);
        return NULL;
    }
    return handle(issue_op(c, (ut_comm_op){.kind = kind, .in = in, .out = out, .n = n, .peer = peer}));
}

ut_comm_req *ut_comm_isend(ut_comm *c, const float *buf, int64_t n, int peer) {
    return p2p(c, UT_COMM_SEND_F32, buf, NULL, n, peer);
}

ut_comm_req *ut_comm_irecv(ut_comm *c, float *buf, int64_t n, int peer) {
    return p2p(c, UT_COMM_RECV_F32, NULL, buf, n, peer);
}

ut_comm *ut_comm_split(ut_comm *parent, int color, int key, const char *name, char *err, size_t n) {
    if (!name || !*name || strlen(name) >= sizeof parent->name || !strcmp(name, "world")) {
        snprintf(err, n, "ut_comm_split: the group needs a name of 1 to %zu characters other than 'world'",
                 sizeof parent->name - 1);
        return NULL;
    }
    if (color < 0) {
        snprintf(err, n, "ut_comm_split: color %d (must be >= 0)", color);
        return NULL;
    }
    ut_comm *c = ut_malloc_check(sizeof *c);
    comm_setup(c, parent->timeout_s);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->world_rank = parent->world_rank;
    if (parent->size == 1 || !parent->be->child) return c; /* a group of one */
    unsigned char result[UT_COMM_SPLIT_RESULT] __attribute__((aligned(16)));
    uint64_t seq = issue_op(parent, (ut_comm_op){.kind = UT_COMM_SPLIT, .out = result, .color = color, .key = key});
    if (wait_seq(parent, seq) || parent->be->child(parent, c, result, err, n)) {
        if (wait_seq(parent, seq)) snprintf(err, n, "%s", parent->err);
        comm_teardown(c);
        ut_free(c);
        return NULL;
    }
    return c;
}

static int check_req(ut_comm *c, ut_comm_req *r, const char *fn) {
    if (!r) return -1; /* the call that made it failed and said why in c->err */
    uint64_t seq = (uint64_t)(uintptr_t)r;
    if (seq == 0 || seq > atomic_load(&c->seq)) {
        snprintf(c->err, sizeof c->err, "%s: not a request of this communicator", fn);
        return -1;
    }
    return 0;
}

int ut_comm_wait(ut_comm *c, ut_comm_req *r) {
    if (check_req(c, r, "ut_comm_wait")) return -1;
    return wait_seq(c, (uint64_t)(uintptr_t)r);
}

int ut_comm_test(ut_comm *c, ut_comm_req *r) {
    if (check_req(c, r, "ut_comm_test")) return -1;
    return c->be->test(c, (uint64_t)(uintptr_t)r);
}

int ut_comm_allreduce_f64(ut_comm *c, double *buf, int n) {
    return wait_seq(c, issue(c, UT_COMM_ALLREDUCE_F64, NULL, buf, n, 0));
}

int ut_comm_allreduce_i64(ut_comm *c, int64_t *buf, int n) {
    return wait_seq(c, issue(c, UT_COMM_ALLREDUCE_I64, NULL, buf, n, 0));
}

int ut_comm_bcast(ut_comm *c, void *buf, size_t bytes, int root) {
    if (root < 0 || root >= c->size) {
        snprintf(c->err, sizeof c->err, "bcast: root %d is not a rank (world size %d)", root,
                 c->size);
        return -1;
    }
    return wait_seq(c, issue(c, UT_COMM_BCAST, NULL, buf, (int64_t)bytes, root));
}

int ut_comm_barrier(ut_comm *c) { return wait_seq(c, issue(c, UT_COMM_BARRIER, NULL, NULL, 0, 0)); }

void ut_comm_stats(const ut_comm *c, double *bytes, double *wait_s) {
    ut_comm *m = (ut_comm *)c; /* the lock, not the numbers, changes */
    UT_CHECK_PTHREAD(pthread_mutex_lock(&m->stats_mu));
    if (bytes) *bytes = c->bytes;
    if (wait_s) *wait_s = c->wait_s;
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->stats_mu));
}

// --- start-up agreement -----------------------------------------------------

/* Every rank gathers every rank's value, so all of them see the same
 * disagreement and return the same status and message. */
static int check_same(ut_comm *c, uint64_t value, bool decimal, const char *what, char *err, size_t n);

int ut_comm_check_same(ut_comm *c, uint64_t value, const char *what, char *err, size_t n) {
    return check_same(c, value, false, what, err, n);
}

int ut_comm_check_same_int(ut_comm *c, int64_t value, const char *what, char *err, size_t n) {
    return check_same(c, (uint64_t)value, true, what, err, n);
}

/* One rank's value in a message: a count in decimal, a hash in hex. */
static int put_value(char *err, size_t n, bool decimal, uint64_t v) {
    return decimal ? snprintf(err, n, "%lld", (long long)(int64_t)v) : snprintf(err, n, "%016" PRIx64, v);
}

static int check_same(ut_comm *c, uint64_t value, bool decimal, const char *what, char *err, size_t n) {
    uint64_t *all = ut_malloc_check((size_t)c->size * sizeof *all);
    if (wait_seq(c, issue(c, UT_COMM_ALLGATHER_U64, &value, all, 1, 0))) {
        snprintf(err, n, "%s: cannot compare between ranks: %s", what, c->err);
        ut_free(all);
        return -1;
    }
    int ndiff = 0, len = 0;
    for (int r = 1; r < c->size; r++) {
        if (all[r] == all[0]) continue;
        if (ndiff == 0) {
            len = snprintf(err, n, "%s differs between ranks: rank 0 has ", what);
            if (len >= 0 && (size_t)len < n) len += put_value(err + len, n - len, decimal, all[0]);
        }
        if (ndiff < 4 && len >= 0 && (size_t)len < n) {
            len += snprintf(err + len, n - len, ", rank %d has ", r);
            if (len >= 0 && (size_t)len < n) len += put_value(err + len, n - len, decimal, all[r]);
        }
        ndiff++;
    }
    if (ndiff > 4 && len >= 0 && (size_t)len < n)
        snprintf(err + len, n - len, " (and %d more ranks)", ndiff - 4);
    ut_free(all);
    return ndiff ? -1 : 0;
}
