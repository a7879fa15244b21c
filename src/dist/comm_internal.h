/* The communicator's insides, shared by the interface (comm.c), its
 * backends (comm_mpi.c, comm_tcp.c) and the direct collectives
 * (comm_device.c).
 * defines: UT_CHECK_PTHREAD, ut_comm (the struct), ut_comm_op, ut_comm_kind, ut_comm_vtable,
 *          ut_comm_op_name, ut_comm_op_describe, ut_comm_combine, ut_comm_average, ut_comm_queue (and its
 *          _init, _destroy, _submit, _wait, _test, _done),
 *          ut_comm_mpi_init, ut_comm_tcp_init, ut_comm_tcp_launched, ut_comm_direct_free_all. */
#ifndef UTRAIN_COMM_INTERNAL_H
#define UTRAIN_COMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/dist.h"

/* pthread calls return an error number; failing is fatal (through ut_abort,
 * so under MPI every rank goes down). */
#define UT_CHECK_PTHREAD(call)                                                            \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_) ut_abort(__FILE__, __LINE__, "%s failed: %s", #call, strerror(rc_));     \
    } while (0)

/* Every operation, blocking or not, is one of these. */
enum ut_comm_kind {
    UT_COMM_ALLREDUCE_F32,      /* out[0, n) summed in place (in unused) */
    UT_COMM_REDUCE_SCATTER_F32, /* in[size*n] -> out[n] */
    UT_COMM_ALLGATHER_F32,      /* in[n] -> out[size*n]; in == out + rank*n is in place */
    UT_COMM_ALLREDUCE_F64,      /* out[0, n) summed in place */
    UT_COMM_ALLREDUCE_I64,      /* out[0, n) summed in place */
    UT_COMM_ALLGATHER_U64,      /* in[n] -> out[size*n] (check_same) */
    UT_COMM_REDUCE_SCATTERV_F32, /* in[sum counts] -> out[counts[rank]] */
    UT_COMM_ALLGATHERV_F32,     /* out[sum counts], rank r's part at its offset, in place */
    UT_COMM_BCAST,              /* out[0, n) bytes from root */
    UT_COMM_BARRIER,
    UT_COMM_SPLIT,              /* a process group (color, key); out: the backend's result */
    UT_COMM_SEND_F32,           /* in[0, n) to rank peer */
    UT_COMM_RECV_F32,           /* out[0, n) from rank peer */
    UT_COMM_ALLREDUCE,          /* out[0, n) of dt combined with redop in place (ut_comm_iallreduce_typed) */
    UT_COMM_REDUCE_SCATTER,     /* in[size*n] -> out[n] of dt, combined with redop */
};

/* One queued operation. seq is the communicator's sequence number (#1, #2, ...),
 * the same on every rank as long as ranks issue the same collectives. */
typedef struct ut_comm_op {
    enum ut_comm_kind kind;
    uint64_t seq;
    const void *in;
    void *out;
    int64_t n; /* elements (bytes for bcast); the v-operations: sum of counts */
    const int64_t *counts; /* the v-operations: elements per rank, in rank order */
    int root;
    int peer;              /* send, recv: the other rank */
    int color, key;        /* split */
    ut_dtype dt;           /* the typed operations: F32, BF16, F16 */
    ut_reduce_op redop;
} ut_comm_op;

/* The operations a backend's thread takes in issue order, from the
 * callers' submit to done, in a fixed ring of UT_COMM_QUEUE slots (a full
 * ring blocks the caller until an operation finishes): op seq lives in
 * ring[seq % UT_COMM_QUEUE]. Collectives finish in order; a send or
 * receive may finish later than operations after it (done[] holds those
 * until the frontier `finished` passes them). The first failure's seq
 * stays in `failed`: that operation and every later one fail. */
#define UT_COMM_QUEUE 256
typedef struct ut_comm_queue {
    pthread_mutex_t mu;
    pthread_cond_t work;    /* to the backend's thread: queued or stop (timed waits on CLOCK_MONOTONIC) */
    pthread_cond_t done_cv; /* to callers: an operation finished (slot free, seq done) */
    ut_comm_op ring[UT_COMM_QUEUE];
    uint64_t queued, started; /* last seq queued, last seq the backend took */
    uint64_t finished;        /* every seq up to this one is done */
    uint64_t failed;          /* first seq that failed, 0 if none */
    bool done[UT_COMM_QUEUE]; /* seq > finished done out of order (a send or receive) */
    bool stop;
} ut_comm_queue;
void ut_comm_queue_init(ut_comm_queue *q);
void ut_comm_queue_destroy(ut_comm_queue *q);
/* the vtable's submit, wait and test over q */
void ut_comm_queue_submit(ut_comm_queue *q, const ut_comm_op *op);
int ut_comm_queue_wait(ut_comm_queue *q, uint64_t seq);
int ut_comm_queue_test(ut_comm_queue *q, uint64_t seq);
/* seq is done: the frontier moves past every done seq after it, callers
 * wake. Called with q->mu held. */
void ut_comm_queue_done(ut_comm_queue *q, uint64_t seq);

/* A backend starts ops in seq order; collectives finish in that order, a
 * send or receive may finish later than operations issued after it. submit
 * is called with the issue lock held (so queue order is seq order); wait
 * returns 0 once op seq is done, -1 if it failed (message in c->err). */
typedef struct ut_comm_vtable {
    const char *name;
    void (*submit)(ut_comm *c, const ut_comm_op *op);
    int (*wait)(ut_comm *c, uint64_t seq);
    int (*test)(ut_comm *c, uint64_t seq); /* 1 done, 0 running, -1 failed */
    void (*finalize)(ut_comm *c); /* drains, stops threads, frees impl */
    /* After a split op on parent finished with result (the op's out, of
     * UT_COMM_SPLIT_RESULT bytes): makes child the new group's communicator
     * (be, impl, rank, size), with threads of its own. 0, or -1 with err.
     * NULL: the backend has no groups (size 1 only). */
    int (*child)(ut_comm *parent, ut_comm *child, const void *result, char *err, size_t n);
} ut_comm_vtable;
#define UT_COMM_SPLIT_RESULT 64

struct ut_comm {
    const ut_comm_vtable *be;
    void *impl; /* backend state */
    int rank, size;
    double timeout_s;
    pthread_mutex_t issue_mu; /* seq assignment + submit */
    _Atomic uint64_t seq;     /* last issued */
    pthread_mutex_t stats_mu;
    double bytes, wait_s;
    char err[512];
    bool is_static; /* the lazily made single world: never freed */
    char name[32];  /* "world", or the group's name given to ut_comm_split */
    int world_rank; /* this process's rank in the world */
    /* per device: the communication stream copies feeding this
     * communicator's collectives run on (ut_comm_stream), made on first use */
    void *streams[UT_DEVICE_COUNT];
    pthread_mutex_t stream_mu;
    /* per device: the direct collectives (comm_device.c), NULL: through
     * host memory */
    struct ut_direct *direct[UT_DEVICE_COUNT];
};

/* Frees the direct collectives' state of every device (comm_device.c),
 * before the communicator's own backend goes. */
void ut_comm_direct_free_all(ut_comm *c);

/* "rank 3" in the world; "tp rank 1 (world rank 3)" in a group: the prefix
 * of this process's messages. */
const char *ut_comm_who(const ut_comm *c, char *buf, size_t n);
/* How another rank r of c is named: "rank 2", or "tp rank 2". */
const char *ut_comm_peer_name(const ut_comm *c, int r, char *buf, size_t n);

const char *ut_comm_op_name(enum ut_comm_kind k);
/* "sum", "max", "avg" */
const char *ut_reduce_op_name(ut_reduce_op op);
/* "allreduce #12 (1000 elements)" into buf. */
void ut_comm_op_describe(const ut_comm_op *op, char *buf, size_t n);

/* The typed reductions' arithmetic, shared by the backends: inout[i] =
 * op(in[i], inout[i]) for len elements of dt (float32, bf16, f16), 16-bit
 * values widened to float32 and the result rounded back through the CPU
 * backend's conversions. Sum adds; max keeps the larger, and NaN wins. AVG
 * is reduced as a sum; ut_comm_average then divides by the ranks, in
 * float32, rounded once. */
void ut_comm_combine(const void *in, void *inout, int64_t len, ut_dtype dt, ut_reduce_op op);
void ut_comm_average(void *buf, int64_t n, ut_dtype dt, int size);

/* Initialises MPI (or joins an MPI the program initialised itself) and fills c
 * (be, impl, rank, size); starts the communication and watchdog threads.
 * Returns 0, or -1 with a message in err. */
int ut_comm_mpi_init(ut_comm *c, int *argc, char ***argv, char *err, size_t n);

/* Whether this process was started as one rank of several without MPI:
 * RANK and WORLD_SIZE (> 1) are set, as torchrun, Accelerate and
 * Kubernetes' PyTorchJob set them. */
bool ut_comm_tcp_launched(void);

/* Joins the job those variables describe over TCP (comm_tcp.c): fills c
 * (be, impl, rank, size) and starts its threads. 0, or -1 with a message in
 * err naming the variable or the rank that failed. */
int ut_comm_tcp_init(ut_comm *c, char *err, size_t n);

#endif
