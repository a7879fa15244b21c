/* Collectives on device memory (dist.h, "direct collectives"): how the
 * ranks of a communicator whose model lives on a device exchange its data.
 *
 * Two ways, chosen once per communicator and device by
 * ut_comm_device_setup, the same on every rank:
 *   - through host memory: the callers stage (page-locked copies on the
 *     communication stream, ut_stage_*) and the host communicator (MPI,
 *     TCP) moves the bytes;
 *   - direct: the device's own library reads and writes device memory in
 *     the order of the communicator's communication stream. On cuda that is
 *     NCCL (src/backend/cuda/nccl.c), one GPU per rank. On sim it is a
 *     communicator of the same ranks (a split of this one, used by nothing
 *     else) that the stream's worker runs at its point in the stream, on the
 *     device's memory: the callers see what they see with NCCL (work queued
 *     on a stream, ordered by events, results when the stream gets there),
 *     so the direct paths of the trainer are tested on machines without a
 *     GPU, and give the staged path's bits (the same host arithmetic).
 *
 * A failure found after an operation was queued (a peer gone, a timeout)
 * stays with the communicator: later operations are skipped and
 * ut_comm_direct_status reports it. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "comm_internal.h"
#include "../backend/backend.h"

_Static_assert(UT_REDUCE_SUM == 0 && UT_REDUCE_MAX == 1 && UT_REDUCE_AVG == 2,
               "ut_device_coll's op numbers are ut_reduce_op's");

struct ut_direct {
    const ut_backend *be;
    const ut_device_coll *coll; /* NCCL; NULL: sim's host communicator */
    void *g;                    /* the library's communicator */
    ut_comm *hc;                /* sim: the communicator its stream runs */
    void *ev_in, *ev_out;       /* ut_comm_direct_allreduce_ordered's */
    pthread_mutex_t mu;
    bool failed;
    char err[512];
};

int ut_devcomm_parse(const char *s, ut_devcomm_mode *m) {
    static const char *names[] = {"auto", "direct", "host"};
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, names[i])) {
            *m = (ut_devcomm_mode)i;
            return 0;
        }
    return -1;
}

bool ut_comm_direct(const ut_comm *c, ut_device dev) {
    return (unsigned)dev < UT_DEVICE_COUNT && c->direct[dev] != NULL;
}

/* FNV-1a of the host's name and the device's, never 0 (0 says "cannot") */
static uint64_t place_hash(const char *dev_key) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint64_t h = 1469598103934665603ULL;
    for (const char *s = host; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    h = (h ^ '/') * 1099511628211ULL;
    for (const char *s = dev_key; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    h &= INT64_MAX;
    return h ? h : 1;
}

int ut_comm_device_places(ut_comm *c, const char *dev_key, int64_t *all) {
    memset(all, 0, (size_t)c->size * sizeof *all);
    all[c->rank] = dev_key ? (int64_t)place_hash(dev_key) : 0;
    return c->size > 1 ? ut_comm_allreduce_i64(c, all, c->size) : 0;
}

static struct ut_direct *direct_new(const ut_backend *be) {
    struct ut_direct *d = ut_calloc_check(1, sizeof *d);
    d->be = be;
    UT_CHECK_PTHREAD(pthread_mutex_init(&d->mu, NULL));
    return d;
}

static void direct_free(ut_comm *c, ut_device dev) {
    struct ut_direct *d = c->direct[dev];
    if (!d) return;
    if (c->streams[dev]) d->be->stream_sync(c->streams[dev]); /* what is queued runs first */
    if (d->coll && d->g) d->coll->comm_free(d->g);
    if (d->hc) ut_comm_finalize(d->hc);
    if (d->ev_in) ut_event_free(d->be, d->ev_in);
    if (d->ev_out) ut_event_free(d->be, d->ev_out);
    UT_CHECK_PTHREAD(pthread_mutex_destroy(&d->mu));
    ut_free(d);
    c->direct[dev] = NULL;
}

void ut_comm_direct_free_all(ut_comm *c) {
    for (int dev = 0; dev < UT_DEVICE_COUNT; dev++) direct_free(c, (ut_device)dev);
}

/* NCCL's communicator over c's ranks: rank 0 makes the id, the host
 * communicator carries it (with whether rank 0 could), every rank joins. */
static int nccl_join(ut_comm *c, struct ut_direct *d, char *err, size_t n) {
    size_t idn = d->coll->id_bytes;
    unsigned char *msg = ut_calloc_check(1, idn + 1);
    char why[384] = "";
    if (c->rank == 0) msg[0] = d->coll->make_id(msg + 1, why, sizeof why) == 0;
    int rc = ut_comm_bcast(c, msg, idn + 1, 0);
    if (rc) snprintf(err, n, "%s", ut_comm_error(c));
    else if (!msg[0]) snprintf(err, n, "rank 0: %s", c->rank == 0 ? why : "NCCL could not make the group's id");
    else if (!(d->g = d->coll->comm_new(msg + 1, c->rank, c->size, err, n))) rc = -1;
    bool made = msg[0];
    ut_free(msg);
    return rc || !made ? -1 : 0;
}

int ut_comm_device_setup(ut_comm *c, ut_device dev, ut_devcomm_mode mode, char *path, size_t pn, char *err,
                         size_t n) {
    const ut_backend *be = ut_backend_get(dev);
    UT_ASSERT(be);
    if (c->direct[dev]) { /* a second trainer over the same ranks */
        snprintf(path, pn, "direct (set up before)");
        return 0;
    }
    if (be->host_memory) {
        snprintf(path, pn, "in place (the model is in host memory)");
        return 0;
    }
    if (mode == UT_DEVCOMM_HOST) {
        snprintf(path, pn, "through host memory (dist.device_comm: host)");
        return 0;
    }
    if (c->size == 1 && mode == UT_DEVCOMM_AUTO) {
        snprintf(path, pn, "none (one rank)");
        return 0;
    }
    /* what this rank can do: a library that loads, or sim's stream-run host
     * communicator; and where it computes */
    char what[64] = "", mine[384] = "", key[128] = "";
    bool can = false;
    if (be->coll) can = be->coll->load(what, sizeof what, mine, sizeof mine) == 0;
    else if (be->enqueue_host) can = true, snprintf(what, sizeof what, "the simulated device's collectives");
    else snprintf(mine, sizeof mine, "this build has no collectives on %s memory (NCCL was not found when it "
                                    "was built)", be->name);
    if (can && (!be->device_key || be->device_key(key, sizeof key))) snprintf(key, sizeof key, "rank-%d", c->rank);
    /* every rank's place (0: cannot) */
    int64_t *all = ut_calloc_check((size_t)c->size, sizeof *all);
    if (ut_comm_device_places(c, can ? key : NULL, all)) {
        snprintf(err, n, "choosing how ranks exchange %s memory: %s", be->name, ut_comm_error(c));
        ut_free(all);
        return -1;
    }
    int cannot = -1, sa = -1, sb = -1;
    for (int r = 0; r < c->size && cannot < 0 && sa < 0; r++) {
        if (!all[r]) cannot = r;
        for (int q = 0; q < r && sa < 0; q++)
            if (all[q] == all[r]) sa = q, sb = r;
    }
    ut_free(all);
    char no[512] = "";
    if (cannot >= 0)
        snprintf(no, sizeof no, "rank %d cannot use them: %s", cannot,
                 cannot == c->rank ? mine : "its log says why");
    else if (sa >= 0)
        snprintf(no, sizeof no, "ranks %d and %d share one %s device%s%s (%s takes one per rank)", sa, sb, be->name,
                 sa == c->rank || sb == c->rank ? " " : "", sa == c->rank || sb == c->rank ? key : "", what);
    if (no[0]) {
        if (mode == UT_DEVCOMM_DIRECT) {
            snprintf(err, n, "dist.device_comm: direct: %s; write dist.device_comm: host (or auto)", no);
            return -1;
        }
        snprintf(path, pn, "through host memory: %s", no);
        return 0;
    }
    struct ut_direct *d = direct_new(be);
    d->ev_in = ut_event_new(be);
    d->ev_out = ut_event_new(be);
    int rc;
    if (be->coll) {
        d->coll = be->coll;
        rc = nccl_join(c, d, err, n);
    } else { /* a group of the same ranks, for the stream's worker alone */
        char name[sizeof c->name];
        snprintf(name, sizeof name, "%s", strcmp(c->name, "world") ? c->name : "world-direct");
        d->hc = ut_comm_split(c, 0, c->rank, name, err, n);
        rc = d->hc ? 0 : -1;
    }
    c->direct[dev] = d;
    if (rc) {
        direct_free(c, dev);
        return -1;
    }
    snprintf(path, pn, "direct, %s on the device's memory", what);
    return 0;
}

/* ---- sim: the host communicator at the stream's point ---- */
enum { OP_ALLREDUCE, OP_REDUCE_SCATTERV, OP_ALLGATHERV };
typedef struct {
    struct ut_direct *d;
    int kind;
    void *buf;       /* allreduce, allgatherv: in place; reduce_scatterv: the input */
    float *out;      /* reduce_scatterv */
    int64_t n;
    ut_dtype dt;
    ut_reduce_op op;
    int64_t *counts; /* the v-forms: a copy, freed with the op */
} host_op;

/* The calls the staged path makes for the same operation, so both give
 * the same bits. */
static void run_host_op(void *arg) {
    host_op *o = arg;
    struct ut_direct *d = o->d;
    UT_CHECK_PTHREAD(pthread_mutex_lock(&d->mu));
    bool failed = d->failed;
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&d->mu));
    if (!failed) {
        ut_comm_req *r = o->kind == OP_REDUCE_SCATTERV ? ut_comm_ireduce_scatterv(d->hc, o->buf, o->out, o->counts)
                         : o->kind == OP_ALLGATHERV    ? ut_comm_iallgatherv(d->hc, o->buf, o->counts)
                         : o->op != UT_REDUCE_SUM      ? ut_comm_iallreduce_typed(d->hc, o->buf, o->n, o->dt, o->op)
                         : o->dt == UT_F32             ? ut_comm_iallreduce(d->hc, o->buf, o->n)
                                                       : ut_comm_iallreduce16(d->hc, o->buf, o->n, o->dt);
        if (ut_comm_wait(d->hc, r)) {
            UT_CHECK_PTHREAD(pthread_mutex_lock(&d->mu));
            d->failed = true;
            snprintf(d->err, sizeof d->err, "%s", ut_comm_error(d->hc));
            UT_CHECK_PTHREAD(pthread_mutex_unlock(&d->mu));
        }
    }
    ut_free(o->counts);
    ut_free(o);
}

static void enqueue(ut_comm *c, ut_device dev, host_op o, const int64_t *counts) {
    host_op *q = ut_malloc_check(sizeof *q);
    *q = o;
    if (counts) {
        q->counts = ut_malloc_check((size_t)c->size * sizeof *counts);
        memcpy(q->counts, counts, (size_t)c->size * sizeof *counts);
    }
    q->d->be->enqueue_host(ut_comm_stream(c, dev), run_host_op, q);
}

int ut_comm_direct_status(ut_comm *c, ut_device dev) {
    struct ut_direct *d = c->direct[dev];
    UT_ASSERT(d);
    if (d->coll) return d->coll->status(d->g, c->err, sizeof c->err);
    UT_CHECK_PTHREAD(pthread_mutex_lock(&d->mu));
    if (d->failed) snprintf(c->err, sizeof c->err, "%s", d->err);
    bool failed = d->failed;
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&d->mu));
    return failed ? -1 : 0;
}

int ut_comm_direct_allreduce(ut_comm *c, ut_device dev, void *buf, int64_t n, ut_dtype dt, ut_reduce_op op) {
    struct ut_direct *d = c->direct[dev];
    UT_ASSERT(d && (dt == UT_F32 || dt == UT_BF16 || dt == UT_F16) && (unsigned)op < UT_REDUCE_COUNT && n >= 0);
    if (ut_comm_direct_status(c, dev)) return -1;
    if (n == 0) return 0;
    if (d->coll) return d->coll->allreduce(d->g, buf, n, dt, (int)op, ut_comm_stream(c, dev), c->err, sizeof c->err);
    enqueue(c, dev, (host_op){.d = d, .kind = OP_ALLREDUCE, .buf = buf, .n = n, .dt = dt, .op = op}, NULL);
    return 0;
}

int ut_comm_direct_reduce_scatterv(ut_comm *c, ut_device dev, const float *in, float *out, const int64_t *counts) {
    struct ut_direct *d = c->direct[dev];
    UT_ASSERT(d);
    if (ut_comm_direct_status(c, dev)) return -1;
    if (d->coll)
        return d->coll->reduce_scatterv(d->g, in, out, counts, c->size, ut_comm_stream(c, dev), c->err,
                                        sizeof c->err);
    enqueue(c, dev, (host_op){.d = d, .kind = OP_REDUCE_SCATTERV, .buf = (void *)in, .out = out}, counts);
    return 0;
}

int ut_comm_direct_allgatherv(ut_comm *c, ut_device dev, float *buf, const int64_t *counts) {
    struct ut_direct *d = c->direct[dev];
    UT_ASSERT(d);
    if (ut_comm_direct_status(c, dev)) return -1;
    if (d->coll) return d->coll->allgatherv(d->g, buf, counts, c->size, ut_comm_stream(c, dev), c->err, sizeof c->err);
    enqueue(c, dev, (host_op){.d = d, .kind = OP_ALLGATHERV, .buf = buf}, counts);
    return 0;
}

void ut_comm_direct_after_compute(ut_comm *c, ut_device dev) {
    struct ut_direct *d = c->direct[dev];
    UT_ASSERT(d);
    ut_event_record(d->be, d->ev_in, NULL);
    ut_event_wait(d->be, ut_comm_stream(c, dev), d->ev_in);
}

void ut_comm_direct_record(ut_comm *c, ut_device dev, void *ev) {
    ut_event_record(c->direct[dev]->be, ev, ut_comm_stream(c, dev));
}

void ut_comm_direct_before_compute(ut_comm *c, ut_device dev) {
    struct ut_direct *d = c->direct[dev];
    UT_ASSERT(d);
    ut_event_record(d->be, d->ev_out, ut_comm_stream(c, dev));
    ut_event_wait(d->be, NULL, d->ev_out);
}

int ut_comm_direct_allreduce_ordered(ut_comm *c, ut_device dev, void *buf, int64_t n, ut_dtype dt,
                                     ut_reduce_op op) {
    ut_comm_direct_after_compute(c, dev);
    int rc = ut_comm_direct_allreduce(c, dev, buf, n, dt, op);
    ut_comm_direct_before_compute(c, dev);
    return rc;
}
