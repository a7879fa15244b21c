/* The gradient-bucket engine (bucketer.h): start, stage, post in order,
 * complete in order. */
#include "bucketer.h"

#include <string.h>

#include "utrain/base.h"
#include "../backend/backend.h"

enum { IDLE, COPYING, POSTED, LANDED };

typedef struct {
    ut_bucket_span span;
    float *out;           /* device memory of the result; NULL: in place (the span) */
    int64_t out_n;
    int pending;          /* parameters not yet complete */
    int state;
    ut_comm_req *req;
    float *hin, *hout;    /* the collective's host memory */
    float *host;          /* ut_bucket_io.host_out[k] or ut_bucketer_set_host's; NULL: none */
    int64_t host_at, host_n; /* the output's elements [host_at, +host_n) go there */
    ut_stage in, outs;    /* host memory path: stages that copy nothing on the CPU */
    void *ready, *copied; /* device memory path: backward done with it; its host copy (direct: its
                           * collective) done */
} bucket;

struct ut_bucketer {
    ut_comm *comm;
    ut_params *p;
    const ut_backend *be;
    ut_bucket_io io;
    bucket *b;
    int nb;
    int *bucket_of; /* parameter index -> bucket */
    int *order;     /* buckets in the order they were started */
    int nstarted, nposted, nlanded;
    int rc;         /* -1 once a collective failed this pass */
    /* device memory: the communicator's communication stream, the page-locked host copies */
    void *stream;
    float *pinned;
};

static int64_t span_n(const bucket *bk) { return bk->span.hi - bk->span.lo; }
static int64_t out_n(const bucket *bk) { return bk->out ? bk->out_n : span_n(bk); }
static float *out_dev(const ut_bucketer *b, const bucket *bk) {
    return bk->out ? bk->out : b->p->flat_grad + bk->span.lo;
}

ut_bucketer *ut_bucketer_new(ut_comm *c, ut_params *p, const ut_bucket_span *spans, int nb, const int *bucket_of,
                             float *const *out, const int64_t *outn, ut_bucket_io io) {
    ut_bucketer *b = ut_calloc_check(1, sizeof *b);
    b->comm = c, b->p = p, b->io = io, b->nb = nb;
    b->be = ut_backend_get(p->device);
    b->b = ut_calloc_check((size_t)(nb ? nb : 1), sizeof *b->b);
    b->order = ut_calloc_check((size_t)(nb ? nb : 1), sizeof(int));
    b->bucket_of = ut_calloc_check((size_t)(p->n ? p->n : 1), sizeof(int));
    for (int i = 0; i < p->n; i++) b->bucket_of[i] = bucket_of[i];
    int64_t host = 0;
    for (int k = 0; k < nb; k++) {
        bucket *bk = &b->b[k];
        bk->span = spans[k];
        if (out) bk->out = out[k], bk->out_n = outn[k];
        if (io.host_out) bk->host = io.host_out[k], bk->host_at = 0, bk->host_n = out_n(bk);
        host += span_n(bk) + (bk->out && !bk->host ? bk->out_n : 0);
    }
    b->io.host_out = NULL; /* the caller's array: each bucket keeps its own pointer */
    if (io.direct) {
        UT_ASSERT(io.post_direct && ut_comm_direct(c, p->device));
        b->stream = ut_comm_stream(c, p->device);
        for (int k = 0; k < nb; k++) {
            b->b[k].ready = ut_event_new(b->be);
            b->b[k].copied = ut_event_new(b->be);
        }
    } else if (!ut_comm_accepts_device_memory(c, p->device)) {
        b->pinned = ut_host_alloc(b->be, (size_t)(host ? host : 1) * sizeof(float));
        b->stream = ut_comm_stream(c, p->device);
        float *h = b->pinned;
        for (int k = 0; k < nb; k++) {
            bucket *bk = &b->b[k];
            bk->hin = h, h += span_n(bk);
            bk->hout = bk->hin;
            if (bk->host) bk->hout = bk->host; /* the collective writes the host's copy itself */
            else if (bk->out) bk->hout = h, h += bk->out_n;
            bk->ready = ut_event_new(b->be);
            bk->copied = ut_event_new(b->be);
        }
    }
    return b;
}

void ut_bucketer_set_host(ut_bucketer *b, int k, float *host, int64_t at, int64_t n) {
    bucket *bk = &b->b[k];
    UT_ASSERT(k >= 0 && k < b->nb && host && at >= 0 && n > 0 && at + n <= out_n(bk) && bk->state == IDLE);
    bk->host = host, bk->host_at = at, bk->host_n = n;
}

void ut_bucketer_free(ut_bucketer *b) {
    if (!b) return;
    if (b->io.direct) {
        b->be->stream_sync(b->stream);
        for (int k = 0; k < b->nb; k++) {
            ut_event_free(b->be, b->b[k].ready);
            ut_event_free(b->be, b->b[k].copied);
        }
    }
    if (b->pinned) {
        b->be->stream_sync(b->stream); /* the communicator's: it outlives the engine */
        b->be->stream_sync(NULL);      /* the copies back read the host memory */
        for (int k = 0; k < b->nb; k++) {
            ut_event_free(b->be, b->b[k].ready);
            ut_event_free(b->be, b->b[k].copied);
        }
        ut_host_free(b->be, b->pinned);
    }
    ut_free(b->b);
    ut_free(b->order);
    ut_free(b->bucket_of);
    ut_free(b);
}


static void post(ut_bucketer *b, int k) {
    bucket *bk = &b->b[k];
    bk->req = b->io.post(b->io.user, k, bk->hin, bk->hout);
    bk->state = POSTED;
    b->nposted++;
}

/* The result goes back to the device: a copy queued on the compute stream
 * (device memory), or the stages closed (the CPU: nothing moves). */
static void land(ut_bucketer *b, int k) {
    bucket *bk = &b->b[k];
    if (b->io.landed) b->io.landed(b->io.user, k, bk->hout);
    if (b->pinned) {
        ut_copy_async(b->be, out_dev(b, bk), bk->hout, (size_t)out_n(bk) * sizeof(float), UT_COPY_H2D, NULL);
    } else if (bk->out) {
        ut_stage_end(&bk->in, false);
        ut_stage_end(&bk->outs, true);
    } else {
        ut_stage_end(&bk->in, true);
    }
    /* the host's part: copied out of the collective's host memory unless the
     * collective wrote it there itself; on the CPU (host memory both) out of
     * the result */
    if (bk->host && bk->hout != bk->host)
        memcpy(bk->host, (b->pinned ? bk->hout : out_dev(b, bk)) + bk->host_at, (size_t)bk->host_n * sizeof(float));
    bk->state = LANDED;
    b->nlanded++;
    if (b->io.done) b->io.done(b->io.user, k);
}

/* Posts the started buckets not posted yet, in start order, each once its
 * host copy is done. Only at points every rank reaches in the same order
 * with the same buckets started (a bucket's start, the finish): the
 * communicator numbers collectives in the order they are posted, and other
 * collectives (ZeRO-3's parameter gathers) are posted between buckets, so a
 * bucket posted whenever its copy happened to be done would get a different
 * number on different ranks. */
static void post_started(ut_bucketer *b) {
    while (b->nposted < b->nstarted) {
        bucket *bk = &b->b[b->order[b->nposted]];
        if (b->pinned) ut_event_sync(b->be, bk->copied);
        post(b, b->order[b->nposted]);
    }
}

/* Lands, in post order, the buckets whose collectives are done (posts
 * nothing, so it may run whenever); wait: all of them, waiting. */
static void progress(ut_bucketer *b, bool wait) {
    while (b->nlanded < b->nposted) {
        bucket *bk = &b->b[b->order[b->nlanded]];
        int t = wait ? (ut_comm_wait(b->comm, bk->req) ? -1 : 1) : ut_comm_test(b->comm, bk->req);
        if (t == 0) return;
        if (t < 0) {
            if (!wait) return; /* reported by the final wait */
            b->rc = -1;
        }
        land(b, b->order[b->nlanded]);
    }
}

/* The direct path: the collective on the span, on the communicator's
 * stream after the compute stream's work so far. */
static void start_direct(ut_bucketer *b, int k) {
    bucket *bk = &b->b[k];
    float *g = b->p->flat_grad + bk->span.lo;
    b->order[b->nstarted++] = k;
    if (b->io.prepare) b->io.prepare(b->io.user, k, g);
    ut_event_record(b->be, bk->ready, NULL);
    ut_event_wait(b->be, b->stream, bk->ready);
    if (b->io.post_direct(b->io.user, k, g, out_dev(b, bk))) b->rc = -1;
    if (bk->host) /* after the collective on its stream: done by the finish's wait */
        ut_copy_async(b->be, bk->host, out_dev(b, bk) + bk->host_at, (size_t)bk->host_n * sizeof(float),
                      UT_COPY_D2H, b->stream);
    ut_event_record(b->be, bk->copied, b->stream);
    bk->state = POSTED;
    b->nposted++;
}

/* The direct path's finish: the compute stream after every collective, the
 * host after the last (so a failure is this step's), then landed and done
 * in post order. */
static void finish_direct(ut_bucketer *b) {
    for (int i = 0; i < b->nposted; i++) ut_event_wait(b->be, NULL, b->b[b->order[i]].copied);
    if (b->nposted) ut_event_sync(b->be, b->b[b->order[b->nposted - 1]].copied);
    if (ut_comm_direct_status(b->comm, b->p->device)) b->rc = -1;
    for (int i = 0; i < b->nposted; i++) {
        int k = b->order[i];
        if (b->io.landed) b->io.landed(b->io.user, k, out_dev(b, &b->b[k]));
        b->b[k].state = LANDED;
        if (b->io.done) b->io.done(b->io.user, k);
    }
    b->nlanded = b->nposted;
}

static void start(ut_bucketer *b, int k) {
    if (b->io.direct) {
        start_direct(b, k);
        return;
    }
    bucket *bk = &b->b[k];
    float *g = b->p->flat_grad + bk->span.lo;
    size_t bytes = (size_t)span_n(bk) * sizeof(float);
    post_started(b); /* the buckets before it: their copies have had a bucket's backward to run */
    b->order[b->nstarted++] = k;
    if (!b->pinned) { /* in place: stages that copy nothing */
        bk->hin = ut_stage_begin(&bk->in, b->be, g, bytes, true);
        bk->hout = bk->out ? ut_stage_begin(&bk->outs, b->be, bk->out, (size_t)bk->out_n * sizeof(float), false)
                           : bk->hin;
        post(b, k);
    } else { /* the communication stream copies it once backward's kernels so far have run */
        bk->state = COPYING;
        ut_event_record(b->be, bk->ready, NULL);
        ut_event_wait(b->be, b->stream, bk->ready);
        ut_copy_async(b->be, bk->hin, g, bytes, UT_COPY_D2H, b->stream);
        ut_event_record(b->be, bk->copied, b->stream);
    }
    progress(b, false);
}

/* The gradient-ready hook: a bucket's last parameter starts it; every call
 * moves the others on. */
static void on_ready(void *user, int param_index) {
    ut_bucketer *b = user;
    int k = b->bucket_of[param_index];
    if (--b->b[k].pending == 0) start(b, k);
    else if (!b->io.direct) progress(b, false);
}

void ut_bucketer_arm(ut_bucketer *b, ut_ctx *ctx) {
    for (int k = 0; k < b->nb; k++) {
        b->b[k].pending = b->b[k].span.nparams;
        b->b[k].state = IDLE;
        b->b[k].req = NULL;
    }
    b->nstarted = b->nposted = b->nlanded = 0;
    b->rc = 0;
    ut_ctx_set_grad_hook(ctx, on_ready, b);
}

int ut_bucketer_finish(ut_bucketer *b, ut_ctx *ctx) {
    ut_ctx_set_grad_hook(ctx, NULL, NULL);
    for (int k = 0; k < b->nb; k++)
        if (b->b[k].state == IDLE) start(b, k);
    if (b->io.direct) {
        finish_direct(b);
    } else {
        post_started(b);
        progress(b, true);
    }
    int rc = b->rc;
    /* a finish without a new arm starts every bucket again */
    for (int k = 0; k < b->nb; k++) b->b[k].state = IDLE;
    b->nstarted = b->nposted = b->nlanded = 0;
    b->rc = 0;
    return rc;
}
