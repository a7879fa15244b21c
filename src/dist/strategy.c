/* The data-parallel strategies over the flat parameter and gradient buffers:
 * ddp (all-reduce buckets), zero1 (optimizer state sharded), zero2 (gradients
 * reduce-scattered into the shard too) and zero3 (parameters sharded as well,
 * gathered unit by unit as ops reach them).
 *
 * Layout: rank r owns elements [r*S, (r+1)*S) of the flat buffers (clipped to
 * the parameter count). The flat buffers are page mappings (ut_pages_alloc):
 * zero2/zero3 hand a gradient bucket's pages back as soon as its
 * reduce-scatter is done, and zero3 hands a unit's parameter pages back when
 * the unit is no longer needed; the addresses stay valid, so views and the
 * model's tensors never move.
 *
 * The buffers belong to the model's device (its params' backend): copies,
 * memsets and residency go through its calls, and the communicator, which
 * works on host memory, gets each collective's buffers through host memory
 * (the buffers themselves on the CPU backend). The gradient buckets (ddp's
 * all-reduce, zero2/zero3's reduce-scatter) are the bucket engine's
 * (bucketer.h), which on a device copies them on a communication stream
 * while backward goes on. With the direct path (dist.h, ut_comm_direct) every
 * collective runs on the device's memory instead, on the communicator's
 * stream, ordered with the compute stream by events (zero3's prefetched
 * units: the compute stream waits for a unit's gather when an op first
 * reads it). Otherwise the parameter gathers (zero1/zero2 after the step,
 * zero3's units) go through one page-locked host copy of the flat layout
 * (`pin`): this rank's shard goes down once per step (the one wait: the
 * gathers need the step's result), each collective fills the rest in host
 * memory, and the results go up with copies queued on the compute stream
 * that the host does not wait for. A zero3 unit gathered once in a step
 * stays valid in `pin` until the parameters change, so gathering it again
 * (backward after a reshard, evaluation) is an upload only, no collective:
 * every rank makes the same choice, since every rank reaches its units in
 * the same order. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/dist.h"
#include "../backend/backend.h"
#include "bucketer.h"

typedef struct {
    int64_t lo, hi;       /* range of the flat buffer */
    int64_t *counts;      /* per rank: elements of [lo, hi) in its shard */
    int nparams;
    ut_comm_req *req;     /* zero3 units: the gather */
    ut_stage in;          /* zero3 units: host view of the gather's buffer while it runs */
} range;

enum { RELEASED, INFLIGHT, GATHERED };

struct ut_dist {
    ut_dist_kind kind;
    ut_comm *comm;
    ut_model *m;
    ut_params *p;
    int rank, world;
    int64_t S, lo, hi;    /* shard size, this rank's part [lo, hi) */
    int64_t *all_counts;  /* per rank: elements of the whole buffer it owns */
    ut_optim *o;
    ut_ddp *ddp;          /* ddp, zero1 */
    float *shard_grad;    /* zero2, zero3: S floats */
    float *shard_param;   /* zero3: S floats */
    /* zero2, zero3: reduce-scatter buckets (their ranges and counts), run by the bucket engine */
    range *b;
    int nb;
    ut_bucketer *eng;
    /* zero3: units */
    range *u;
    int nu, *unit_of, *ustate, recent[2], prefetched;
    bool backward, reshard_after_forward;
    /* parameter gathers through host memory (the communicator does not take
     * the device's memory): the flat layout's page-locked copy; own_fresh:
     * its [lo, hi) holds this rank's current shard; host_valid[u]: unit u's
     * whole range is current there (zero3) */
    float *pin;
    bool own_fresh;
    bool *host_valid;
    /* the direct path (ut_comm_direct): the collectives on the device's
     * memory, on the communicator's stream; uev[u]: unit u's gather done */
    bool direct;
    void **uev;
    size_t params_peak, grads_peak;
    const ut_backend *be; /* the flat buffers' */
    /* ZeRO-Offload: the optimizer on the CPU backend over host copies of the
     * shard [lo, hi): master parameters and the gradient (host memory from
     * the device's host_alloc) */
    bool offload;
    float *h_param, *h_grad;
    /* the bucket engine puts the shard's gradient in h_grad as its buckets
     * land (zero2, and zero1 on ranks with uncompressed buckets; neither
     * with replicas), rather than the step copying it down */
    bool streamed;
    /* elements a piece of the host update: each piece's parameters go back
     * to the device while the next is updated (a bucket's size) */
    int64_t piece;
    const ut_backend *obe; /* the optimizer state's: be, or the CPU's when offloaded */
    /* hybrid sharding: the ranks holding this rank's shard in the other
     * shard groups (ut_dist_opts.replicas); NULL: none */
    ut_comm *rep;
    ut_comm *failed; /* the communicator of the last failed collective (ut_dist_failed) */
};

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Elements of [lo, hi) in each rank's shard. */
static int64_t *rank_counts(const ut_dist *d, int64_t lo, int64_t hi) {
    int64_t *c = ut_calloc_check((size_t)d->world, sizeof *c);
    for (int r = 0; r < d->world; r++) {
        int64_t a = max64(lo, r * d->S), e = min64(hi, min64((r + 1) * d->S, d->p->numel));
        c[r] = e > a ? e - a : 0;
    }
    return c;
}

// --- memory accounting --------------------------------------------------------

/* Bytes of buf[0, n) floats that hold memory now (the backend's page count). */
static size_t resident(ut_dist *d, const float *buf, int64_t n) {
    return d->be->pages_resident(buf, (size_t)(n > 0 ? n : 1) * sizeof(float));
}

void ut_dist_memory(ut_dist *d, ut_dist_mem *out) {
    size_t shard = (size_t)d->S * sizeof(float);
    out->params = resident(d, d->p->flat, d->p->numel) + (d->shard_param ? shard : 0);
    out->grads = resident(d, d->p->flat_grad, d->p->numel) + (d->shard_grad ? shard : 0);
    out->optim = d->offload ? 0 : ut_optim_state_bytes(d->o);
    out->host = d->offload ? ut_optim_state_bytes(d->o) + 2 * (size_t)(d->hi - d->lo) * sizeof(float) : 0;
    out->host_streamed = d->streamed;
    out->host_piece = d->offload ? (size_t)min64(d->piece, d->hi - d->lo) * sizeof(float) : 0;
    out->gather_host = d->pin ? (size_t)d->p->numel * sizeof(float) : 0;
    if (out->params > d->params_peak) d->params_peak = out->params;
    if (out->grads > d->grads_peak) d->grads_peak = out->grads;
    out->params_peak = d->params_peak;
    out->grads_peak = d->grads_peak;
}

void ut_dist_reset_peak(ut_dist *d) { d->params_peak = d->grads_peak = 0; }

/* Samples the peaks (only when sharded memory comes and goes). */
static void sample(ut_dist *d) {
    ut_dist_mem m;
    if (d->kind == UT_DIST_ZERO2 || d->kind == UT_DIST_ZERO3) ut_dist_memory(d, &m);
}

// --- zero2/zero3 gradient buckets: reduce-scatter, then hand the pages back ---

/* The bucket's gradients, summed over ranks, into each rank's part of its
 * shard. */
static ut_comm_req *bucket_post(void *user, int k, float *in, float *out) {
    ut_dist *d = user;
    sample(d);
    return ut_comm_ireduce_scatterv(d->comm, in, out, d->b[k].counts);
}

/* The same on the device's memory (the direct path), queued on the
 * communicator's stream. */
static int bucket_post_direct(void *user, int k, float *in, float *out) {
    ut_dist *d = user;
    sample(d);
    return ut_comm_direct_reduce_scatterv(d->comm, d->p->device, in, out, d->b[k].counts);
}

/* Done with the bucket's span of the flat gradient: its pages go back. */
static void bucket_done(void *user, int k) {
    ut_dist *d = user;
    ut_pages_release(d->be, d->p->flat_grad, d->b[k].lo, d->b[k].hi);
}

static void make_buckets(ut_dist *d, double bucket_mb) {
    ut_params *p = d->p;
    int n = p->n ? p->n : 1;
    d->b = ut_calloc_check((size_t)n, sizeof *d->b);
    int *bucket_of = ut_calloc_check((size_t)n, sizeof(int));
    ut_bucket_span *span = ut_calloc_check((size_t)n, sizeof *span);
    float **out = ut_calloc_check((size_t)n, sizeof *out);
    int64_t *out_n = ut_calloc_check((size_t)n, sizeof *out_n);
    d->nb = ut_bucket_layout(p, bucket_mb, span, bucket_of);
    /* the first bucket (last parameters) also covers the padding at the end */
    if (d->nb) span[0].hi = max64(span[0].hi, p->numel);
    for (int k = 0; k < d->nb; k++) {
        range *bk = &d->b[k];
        *bk = (range){.lo = span[k].lo, .hi = span[k].hi, .nparams = span[k].nparams};
        bk->counts = rank_counts(d, bk->lo, bk->hi);
        out_n[k] = bk->counts[d->rank];
        out[k] = out_n[k] ? d->shard_grad + (max64(bk->lo, d->lo) - d->lo) : d->shard_grad;
    }
    ut_bucket_io io = {.post = bucket_post, .done = bucket_done, .user = d};
    if (d->direct)
        io = (ut_bucket_io){.direct = true, .post_direct = bucket_post_direct, .done = bucket_done, .user = d};
    /* ZeRO-Offload: each bucket's part of the shard lands in host memory too,
     * during backward. Not with replicas: their sum comes after the buckets. */
    float **host = NULL;
    if (d->offload && d->kind == UT_DIST_ZERO2 && !d->rep) {
        host = ut_calloc_check((size_t)n, sizeof *host);
        for (int k = 0; k < d->nb; k++) host[k] = d->h_grad + (out[k] - d->shard_grad);
        io.host_out = host;
        d->streamed = true;
    }
    d->eng = ut_bucketer_new(d->comm, p, span, d->nb, bucket_of, out, out_n, io);
    ut_free(host);
    ut_free(span);
    ut_free(bucket_of);
    ut_free(out);
    ut_free(out_n);
}

// --- zero3 units: gathered on first use, handed back when out of use ---------

/* The parameters changed (a step, a load): the host copy is stale. */
static void pin_stale(ut_dist *d) {
    d->own_fresh = false;
    for (int k = 0; d->host_valid && k < d->nu; k++) d->host_valid[k] = false;
}

/* This rank's current shard (src: its device memory) into pin[lo, hi), once
 * per change of the parameters. The wait covers the compute stream up to
 * here, so the uploads queued from pin before (earlier gathers) have read
 * it too and the collectives may write it. */
static void pin_own(ut_dist *d, const float *src) {
    if (d->own_fresh) return;
    ut_copy_async(d->be, d->pin + d->lo, src, (size_t)(d->hi - d->lo) * sizeof(float), UT_COPY_D2H, NULL);
    d->be->stream_sync(NULL);
    d->own_fresh = true;
}

/* pin[lo, hi) up into the flat parameters, queued on the compute stream (the
 * next collective on pin comes after pin_own's wait) */
static void pin_upload(ut_dist *d, int64_t lo, int64_t hi) {
    if (hi > lo)
        ut_copy_async(d->be, d->p->flat + lo, d->pin + lo, (size_t)(hi - lo) * sizeof(float), UT_COPY_H2D, NULL);
}

static void unit_issue(ut_dist *d, int u) {
    range *un = &d->u[u];
    if (d->direct) { /* the own part in place, the others' by the collective after it */
        int64_t a = max64(un->lo, d->lo), e = min64(un->hi, d->hi);
        if (e > a)
            d->be->copy(d->p->flat + a, d->shard_param + (a - d->lo), (size_t)(e - a) * sizeof(float),
                        UT_COPY_D2D);
        ut_comm_direct_after_compute(d->comm, d->p->device);
        if (ut_comm_direct_allgatherv(d->comm, d->p->device, d->p->flat + un->lo, un->counts))
            ut_abort(__FILE__, __LINE__, "zero3: gathering parameters: %s", ut_comm_error(d->comm));
        ut_comm_direct_record(d->comm, d->p->device, d->uev[u]);
        un->req = NULL;
        d->ustate[u] = INFLIGHT;
        return;
    }
    if (d->pin) {
        if (d->host_valid[u]) { /* gathered this step already: upload only */
            pin_upload(d, un->lo, un->hi);
            un->req = NULL;
        } else {
            pin_own(d, d->shard_param);
            un->req = ut_comm_iallgatherv(d->comm, d->pin + un->lo, un->counts);
        }
        d->ustate[u] = INFLIGHT;
        return;
    }
    int64_t a = max64(un->lo, d->lo), e = min64(un->hi, d->hi);
    if (e > a)
        d->be->copy(d->p->flat + a, d->shard_param + (a - d->lo), (size_t)(e - a) * sizeof(float),
                    UT_COPY_D2D);
    float *host = ut_stage_begin(&un->in, d->be, d->p->flat + un->lo,
                                 (size_t)(un->hi - un->lo) * sizeof(float), true);
    un->req = ut_comm_iallgatherv(d->comm, host, un->counts);
    d->ustate[u] = INFLIGHT;
}

static void unit_wait(ut_dist *d, int u) {
    range *un = &d->u[u];
    if (d->direct) { /* the compute stream's later work after the gather; no host wait */
        ut_event_wait(d->be, NULL, d->uev[u]);
        d->ustate[u] = GATHERED;
        return;
    }
    if (un->req && ut_comm_wait(d->comm, un->req))
        ut_abort(__FILE__, __LINE__, "zero3: gathering parameters: %s", ut_comm_error(d->comm));
    if (d->pin && un->req) {
        pin_upload(d, un->lo, un->hi);
        d->host_valid[u] = true;
    } else if (!d->pin) {
        ut_stage_end(&un->in, true);
    }
    un->req = NULL;
    d->ustate[u] = GATHERED;
}

static void unit_release(ut_dist *d, int u) {
    if (d->ustate[u] == INFLIGHT) unit_wait(d, u);
    if (d->ustate[u] == RELEASED) return;
    ut_pages_release(d->be, d->p->flat, d->u[u].lo, d->u[u].hi);
    d->ustate[u] = RELEASED;
}

/* The parameter hook: the unit of a parameter an op is about to read is
 * brought in (waiting for its prefetch, or gathering it now); the two units
 * used last stay (an op may read parameters of two units) and the next unit
 * in the direction of the pass is prefetched; the rest go. */
static void on_param_use(void *user, int pi) {
    ut_dist *d = user;
    int u = d->unit_of[pi];
    if (u == d->recent[0] && d->ustate[u] == GATHERED) return;
    if (d->ustate[u] == RELEASED) unit_issue(d, u);
    if (d->ustate[u] == INFLIGHT) unit_wait(d, u);
    if (u != d->recent[0]) {
        d->recent[1] = d->recent[0];
        d->recent[0] = u;
    }
    int next = d->backward ? u - 1 : u + 1;
    if (next >= 0 && next < d->nu && d->ustate[next] == RELEASED) unit_issue(d, next);
    d->prefetched = next;
    sample(d);
    if (!d->backward && !d->reshard_after_forward) return;
    for (int k = 0; k < d->nu; k++)
        if (k != d->recent[0] && k != d->recent[1] && k != d->prefetched && d->ustate[k] != RELEASED)
            unit_release(d, k);
}

void ut_dist_release(ut_dist *d) {
    if (d->kind != UT_DIST_ZERO3) return;
    for (int k = 0; k < d->nu; k++) unit_release(d, k);
    d->recent[0] = d->recent[1] = d->prefetched = -1;
}

int ut_dist_gather_params(ut_dist *d) {
    if (d->kind != UT_DIST_ZERO3) return 0;
    for (int k = 0; k < d->nu; k++)
        if (d->ustate[k] == RELEASED) unit_issue(d, k);
    for (int k = 0; k < d->nu; k++)
        if (d->ustate[k] == INFLIGHT) unit_wait(d, k);
    sample(d);
    return 0;
}

static int make_units(ut_dist *d, const char *wrap, char *err, size_t n) {
    ut_params *p = d->p;
    d->unit_of = ut_calloc_check((size_t)(p->n ? p->n : 1), sizeof(int));
    d->nu = ut_wrap_units(p, wrap ? wrap : "block", d->unit_of, err, n);
    if (d->nu < 0) return -1;
    d->u = ut_calloc_check((size_t)(d->nu ? d->nu : 1), sizeof *d->u);
    d->ustate = ut_calloc_check((size_t)(d->nu ? d->nu : 1), sizeof(int));
    for (int i = 0; i < p->n; i++) {
        range *un = &d->u[d->unit_of[i]];
        if (un->nparams++ == 0) un->lo = p->segs[i].offset;
        un->hi = p->segs[i].offset + p->segs[i].numel;
    }
    for (int k = 0; k < d->nu; k++) d->u[k].counts = rank_counts(d, d->u[k].lo, d->u[k].hi);
    d->host_valid = ut_calloc_check((size_t)(d->nu ? d->nu : 1), sizeof(bool));
    if (d->direct) {
        d->uev = ut_calloc_check((size_t)(d->nu ? d->nu : 1), sizeof(void *));
        for (int k = 0; k < d->nu; k++) d->uev[k] = ut_event_new(d->be);
    }
    d->recent[0] = d->recent[1] = d->prefetched = -1;
    return 0;
}

// --- construction -----------------------------------------------------------

ut_dist *ut_dist_new(ut_comm *c, ut_model *m, const ut_optim_config *cfg, const ut_dist_opts *o,
                     char *err, size_t n) {
    if (o->kind == UT_DIST_DP) {
        ut_errorf(err, n, "dist.strategy dp runs in one process (worker threads), not on ranks");
        return NULL;
    }
    ut_dist *d = ut_calloc_check(1, sizeof *d);
    ut_optim_config on_device = *cfg; /* the optimizer's state lives beside the model's buffers */
    on_device.device = m->params.device;
    if (o->offload_optimizer && o->kind != UT_DIST_ZERO1 && o->kind != UT_DIST_ZERO2) {
        ut_errorf(err, n, "optimizer offload runs with zero1 or zero2, not %s", ut_dist_name(o->kind));
        return NULL;
    }
    if (o->offload_optimizer) on_device.device = UT_CPU; /* ... unless it is offloaded */
    cfg = &on_device;
    d->kind = o->kind;
    d->be = ut_backend_get(m->params.device);
    d->obe = ut_backend_get(cfg->device);
    d->offload = o->offload_optimizer;
    d->piece = (int64_t)(o->bucket_mb * 1048576.0 / sizeof(float));
    if (d->piece < 4096) d->piece = 4096;
    d->comm = c;
    d->m = m;
    d->p = &m->params;
    d->rank = ut_comm_rank(c);
    d->world = ut_comm_size(c);
    d->reshard_after_forward = o->reshard_after_forward;
    if (o->replicas && ut_comm_size(o->replicas) > 1) {
        if (o->kind == UT_DIST_DDP) {
            ut_errorf(err, n, "hybrid sharding (replicas of a shard group) runs with zero1, zero2 or zero3, not ddp");
            ut_free(d);
            return NULL;
        }
        d->rep = o->replicas;
    }
    ut_params *p = d->p;
    bool sharded = o->kind != UT_DIST_DDP;
    d->S = sharded ? ut_shard_size(p->numel, d->world) : p->numel;
    d->lo = sharded ? min64((int64_t)d->rank * d->S, p->numel) : 0;
    d->hi = sharded ? min64(d->lo + d->S, p->numel) : p->numel;
    d->all_counts = rank_counts(d, 0, p->numel);
    d->direct = sharded && d->world > 1 && ut_comm_direct(c, p->device);
    if (sharded && d->world > 1 && !d->direct && !ut_comm_accepts_device_memory(c, p->device))
        d->pin = ut_host_alloc(d->be, (size_t)(p->numel ? p->numel : 1) * sizeof(float));
    if (o->kind == UT_DIST_ZERO3 && make_units(d, o->wrap, err, n)) {
        ut_dist_free(d);
        return NULL;
    }
    if (d->offload) { /* ZeRO-Offload: the optimizer over host copies of the shard */
        size_t bytes = (size_t)(d->hi - d->lo) * sizeof(float);
        d->h_param = ut_host_alloc(d->be, bytes);
        d->h_grad = ut_host_alloc(d->be, bytes);
        d->be->copy(d->h_param, p->flat + d->lo, bytes, UT_COPY_D2H);
        memset(d->h_grad, 0, bytes);
    }
    /* the optimizer's parameters and gradients: the flat buffers, or the
     * rank's shard buffers (based at lo) */
    float *op = p->flat, *og = p->flat_grad;
    int64_t pbase = 0, gbase = 0;
    switch (o->kind) {
    case UT_DIST_DDP:
    case UT_DIST_ZERO1:
        if (d->world > 1) d->ddp = ut_ddp_new(c, p, o->bucket_mb);
        if (d->ddp && ut_dtype_is16(o->comm_hook)) ut_ddp_set_compression(d->ddp, o->comm_hook);
        /* ZeRO-Offload: the shard's part of each bucket to the host as its
         * all-reduce lands (not with replicas, whose sum comes after the
         * buckets, nor compressed buckets, widened after theirs) */
        if (d->ddp && d->offload && !d->rep && !ut_dtype_is16(o->comm_hook)) {
            ut_ddp_set_host_grad(d->ddp, d->h_grad, d->lo, d->hi);
            d->streamed = true;
        }
        break;
    case UT_DIST_ZERO2:
        d->shard_grad = ut_pages_alloc(d->be, d->S);
        make_buckets(d, o->bucket_mb);
        og = d->shard_grad, gbase = d->lo;
        break;
    case UT_DIST_ZERO3:
        d->shard_grad = ut_pages_alloc(d->be, d->S);
        d->shard_param = ut_pages_alloc(d->be, d->S);
        d->be->copy(d->shard_param, p->flat + d->lo, (size_t)(d->hi - d->lo) * sizeof(float),
                    UT_COPY_D2D);
        ut_pages_release(d->be, p->flat, 0, p->numel);
        make_buckets(d, o->bucket_mb);
        op = d->shard_param, pbase = d->lo, og = d->shard_grad, gbase = d->lo;
        break;
    case UT_DIST_DP: break;
    }
    if (d->offload) op = d->h_param, pbase = d->lo, og = d->h_grad, gbase = d->lo;
    d->o = ut_optim_new_view(cfg, op, pbase, og, gbase, p->segs, p->n, d->lo, d->hi);
    return d;
}

void ut_dist_free(ut_dist *d) {
    if (!d) return;
    if (d->direct) d->be->stream_sync(ut_comm_stream(d->comm, d->p->device)); /* gathers still queued */
    for (int k = 0; d->uev && k < d->nu; k++) ut_event_free(d->be, d->uev[k]);
    ut_free(d->uev);
    if (d->o) ut_optim_free(d->o);
    ut_ddp_free(d->ddp);
    ut_bucketer_free(d->eng);
    ut_pages_free(d->be, d->shard_grad, d->S);
    ut_pages_free(d->be, d->shard_param, d->S);
    if (d->pin) {
        d->be->stream_sync(NULL); /* queued uploads read it */
        ut_host_free(d->be, d->pin);
    }
    ut_free(d->host_valid);
    if (d->h_param) {
        d->be->stream_sync(NULL); /* the last step's upload reads it */
        ut_host_free(d->be, d->h_param);
    }
    if (d->h_grad) ut_host_free(d->be, d->h_grad);
    for (int k = 0; k < d->nb; k++) ut_free(d->b[k].counts);
    for (int k = 0; k < d->nu; k++) ut_free(d->u[k].counts);
    ut_free(d->b);
    ut_free(d->u);
    ut_free(d->unit_of);
    ut_free(d->ustate);
    ut_free(d->all_counts);
    ut_free(d);
}

ut_dist_kind ut_dist_kind_of(const ut_dist *d) { return d->kind; }
ut_optim *ut_dist_optim(ut_dist *d) { return d->o; }
void ut_dist_shard(const ut_dist *d, int64_t *lo, int64_t *hi) {
    *lo = d->lo;
    *hi = d->hi;
}
int ut_dist_nbuckets(const ut_dist *d) { return d->ddp ? ut_ddp_nbuckets(d->ddp) : d->nb; }

void ut_dist_attach(ut_dist *d, ut_ctx *ctx) {
    if (d->kind == UT_DIST_ZERO3) ut_ctx_set_param_hook(ctx, on_param_use, d);
}

void ut_dist_detach(ut_dist *d, ut_ctx *ctx) {
    if (d->kind == UT_DIST_ZERO3) ut_ctx_set_param_hook(ctx, NULL, NULL);
}

// --- the step -----------------------------------------------------------------

void ut_dist_backward_begin(ut_dist *d, ut_ctx *ctx, bool sync) {
    d->backward = true;
    if (!sync) return;
    if (d->ddp) {
        ut_ddp_arm(d->ddp, ctx);
    } else if (d->eng) {
        ut_bucketer_arm(d->eng, ctx);
    }
}

/* Hybrid sharding: this rank's shard of the gradient (summed over its shard
 * group) summed over the replicas that hold the same shard. On the
 * device's memory where the replicas' communicator takes it directly
 * (queued between the compute stream's work), else through host memory. */
static int replicate_sum(ut_dist *d) {
    float *g = d->shard_grad ? d->shard_grad : d->p->flat_grad + d->lo;
    int64_t n = d->hi - d->lo; /* the same on every replica: the same shard */
    if (n == 0) return 0;
    if (ut_comm_direct(d->rep, d->p->device))
        return ut_comm_direct_allreduce_ordered(d->rep, d->p->device, g, n, UT_F32, UT_REDUCE_SUM) ? -1 : 0;
    ut_stage st;
    float *h = ut_comm_accepts_device_memory(d->rep, d->p->device)
                   ? g
                   : ut_stage_begin(&st, d->be, g, (size_t)n * sizeof(float), true);
    int rc = ut_comm_wait(d->rep, ut_comm_iallreduce(d->rep, h, n)) ? -1 : 0;
    if (h != g) ut_stage_end(&st, true);
    return rc;
}

int ut_dist_backward_end(ut_dist *d, ut_ctx *ctx, bool sync) {
    d->backward = false;
    int rc = 0;
    d->failed = NULL;
    if (sync && d->ddp) {
        rc = ut_ddp_finish(d->ddp, ctx);
    } else if (sync && d->eng) {
        rc = ut_bucketer_finish(d->eng, ctx);
    }
    if (rc) d->failed = d->comm;
    if (!rc && sync && d->rep && replicate_sum(d)) rc = -1, d->failed = d->rep;
    ut_dist_release(d); /* zero3: units are gathered again by the next pass */
    return rc;
}

ut_comm *ut_dist_failed(const ut_dist *d) { return d->failed ? d->failed : d->comm; }

bool ut_dist_norm_local(const ut_dist *d) { return d->kind == UT_DIST_DDP || d->world == 1; }

void ut_dist_grad_sq_to(ut_dist *d, double *dst) {
    const float *g = d->shard_grad ? d->shard_grad : d->p->flat_grad + d->lo;
    ut_sum_sq_to(d->be, dst, g, d->hi - d->lo);
}

int ut_dist_grad_norm(ut_dist *d, double *norm) {
    const float *g = d->shard_grad ? d->shard_grad : d->p->flat_grad + d->lo;
    double sq = ut_grad_norm_sq(d->p->device, g, d->hi - d->lo);
    if (d->kind != UT_DIST_DDP && d->world > 1 && ut_comm_allreduce_f64(d->comm, &sq, 1)) return -1;
    *norm = sqrt(sq);
    return 0;
}

int ut_dist_grad_sq_split(ut_dist *d, const bool *skip, double sq[2]) {
    const ut_params *p = d->p;
    const float *g = d->shard_grad ? d->shard_grad : p->flat_grad + d->lo;
    sq[0] = sq[1] = 0;
    for (int i = 0; i < p->n; i++) { /* this rank's range of each parameter */
        if (skip && skip[i]) continue;
        int64_t a = max64(p->segs[i].offset, d->lo), b = min64(p->segs[i].offset + p->segs[i].numel, d->hi);
        if (a < b) sq[p->part[i].parts > 1 ? 0 : 1] += ut_grad_norm_sq(p->device, g + (a - d->lo), b - a);
    }
    if (d->kind != UT_DIST_DDP && d->world > 1 && ut_comm_allreduce_f64(d->comm, sq, 2)) return -1;
    return 0;
}

void ut_dist_scale_grads(ut_dist *d, float s) {
    if (d->streamed) { /* the step reads the host's copy, already made: scaled there */
        d->be->stream_sync(NULL); /* the copies back to the device that read it */
        ut_grad_scale(UT_CPU, d->h_grad, d->hi - d->lo, s);
        return;
    }
    float *g = d->shard_grad ? d->shard_grad : d->p->flat_grad + d->lo;
    ut_grad_scale(d->p->device, g, d->hi - d->lo, s);
}

/* zero1: the gradient outside this rank's shard (the all-reduce filled it) */
static void zero_outside_shard(ut_dist *d) {
    ut_params *p = d->p;
    d->be->memset(p->flat_grad, 0, (size_t)d->lo * sizeof(float));
    d->be->memset(p->flat_grad + d->hi, 0, (size_t)(p->numel - d->hi) * sizeof(float));
}

/* buf (the whole flat layout, memory of be's device) all-gathered from every
 * rank's shard */
static int gather_all(ut_dist *d, const ut_backend *be, float *buf) {
    ut_stage st;
    float *host = ut_stage_begin(&st, be, buf, (size_t)d->p->numel * sizeof(float), true);
    int rc = ut_comm_wait(d->comm, ut_comm_iallgatherv(d->comm, host, d->all_counts)) ? -1 : 0;
    ut_stage_end(&st, true);
    return rc;
}

void ut_dist_zero_grads(ut_dist *d) {
    ut_params *p = d->p;
    float *g = d->shard_grad ? d->shard_grad : p->flat_grad + d->lo;
    d->be->memset(g, 0, (size_t)(d->hi - d->lo) * sizeof(float));
    if (d->kind == UT_DIST_ZERO1) zero_outside_shard(d);
}

/* A piece [a, b) of the shard updated on the host: its parameters queued
 * for the device on the compute stream, ahead of the next forward, without
 * a host wait (h_param[a, b) is written again only by the next step's
 * update, which comes after a wait for that stream), so the copy runs while
 * the host updates the next piece. */
static void upload_piece(void *arg, int64_t a, int64_t b) {
    ut_dist *d = arg;
    ut_copy_async(d->be, d->p->flat + a, d->h_param + (a - d->lo), (size_t)(b - a) * sizeof(float), UT_COPY_H2D,
                  NULL);
}

/* ZeRO-Offload's step: the shard's gradient to the host (streamed: there
 * since its buckets landed), the update there piece by piece, each piece
 * back to the device as it is done; the device's gradient zeroed. */
static void offloaded_step(ut_dist *d, float lr) {
    size_t bytes = (size_t)(d->hi - d->lo) * sizeof(float);
    float *g = d->shard_grad ? d->shard_grad : d->p->flat_grad + d->lo;
    /* streamed: the copies back to the device read h_grad, the last step's
     * upload h_param; else the copy down waits for the stream */
    if (d->streamed) d->be->stream_sync(NULL);
    else d->be->copy(d->h_grad, g, bytes, UT_COPY_D2H);
    ut_optim_step_zero_pieces(d->o, lr, d->piece, upload_piece, d);
    d->be->memset(g, 0, bytes);
}

/* zero1/zero2 after the step: every rank's updated shard into the flat
 * parameters. Direct: on the device's memory, no host wait. Through pin: the own shard down (the step's one wait), the
 * collective in host memory, the other ranks' parts up without a wait. */
static int gather_params_all(ut_dist *d) {
    if (d->direct) { /* between the compute stream's work: the step before, the next forward after */
        ut_comm_direct_after_compute(d->comm, d->p->device);
        int rc = ut_comm_direct_allgatherv(d->comm, d->p->device, d->p->flat, d->all_counts);
        ut_comm_direct_before_compute(d->comm, d->p->device);
        return rc;
    }
    if (!d->pin) return gather_all(d, d->be, d->p->flat);
    pin_own(d, d->p->flat + d->lo);
    if (ut_comm_wait(d->comm, ut_comm_iallgatherv(d->comm, d->pin, d->all_counts))) return -1;
    pin_upload(d, 0, d->lo);
    pin_upload(d, d->hi, d->p->numel);
    return 0;
}

bool ut_dist_device_scalars(const ut_dist *d) { return ut_dist_norm_local(d) && !d->offload; }

int ut_dist_step_scaled(ut_dist *d, float lr, const float *scalars) {
    UT_ASSERT(ut_dist_device_scalars(d));
    ut_optim_step_zero_scaled(d->o, lr, scalars);
    pin_stale(d);
    if (d->kind == UT_DIST_ZERO1) zero_outside_shard(d); /* world 1: nothing outside */
    return 0;
}

void ut_dist_unstep(ut_dist *d) { ut_optim_unstep(d->o); }

void ut_dist_set_copies16(ut_dist *d, void *copies16, ut_dtype dt) {
    UT_ASSERT(ut_dist_device_scalars(d) && d->lo == 0 && d->hi == d->p->numel);
    ut_optim_set_copies16(d->o, copies16, dt);
}

int ut_dist_step(ut_dist *d, float lr) {
    if (d->offload) offloaded_step(d, lr);
    else ut_optim_step_zero(d->o, lr);
    pin_stale(d);
    if (d->kind == UT_DIST_ZERO1) zero_outside_shard(d); /* outside the shard too */
    if ((d->kind != UT_DIST_ZERO1 && d->kind != UT_DIST_ZERO2) || d->world == 1) return 0;
    return gather_params_all(d);
}

// --- checkpoints ---------------------------------------------------------------

ut_optim *ut_dist_full_optim(ut_dist *d) {
    ut_params *p = d->p;
    ut_optim *full = ut_optim_new(ut_optim_get_config(d->o), p->flat, p->flat_grad, p->segs, p->n,
                                  0, p->numel);
    ut_optim_set_steps(full, ut_optim_steps(d->o));
    for (int i = 0; i < ut_optim_nstate(d->o); i++) {
        float *dst = ut_optim_state(full, i, NULL);
        d->obe->copy(dst + d->lo, ut_optim_state(d->o, i, NULL),
                     (size_t)(d->hi - d->lo) * sizeof(float), UT_COPY_D2D);
        if (d->kind != UT_DIST_DDP && d->world > 1 && gather_all(d, d->obe, dst)) {
            ut_optim_free(full);
            return NULL;
        }
    }
    return full;
}

int ut_dist_load_full(ut_dist *d, ut_optim *full) {
    if (full) ut_optim_set_steps(d->o, ut_optim_steps(full));
    for (int i = 0; full && i < ut_optim_nstate(d->o); i++)
        d->obe->copy(ut_optim_state(d->o, i, NULL), ut_optim_state(full, i, NULL) + d->lo,
                     (size_t)(d->hi - d->lo) * sizeof(float), UT_COPY_D2D);
    if (d->offload) /* the master shard from the parameters just loaded */
        d->be->copy(d->h_param, d->p->flat + d->lo, (size_t)(d->hi - d->lo) * sizeof(float), UT_COPY_D2H);
    pin_stale(d);
    if (d->kind == UT_DIST_ZERO3) {
        d->be->copy(d->shard_param, d->p->flat + d->lo, (size_t)(d->hi - d->lo) * sizeof(float),
                    UT_COPY_D2D);
        for (int k = 0; k < d->nu; k++) d->ustate[k] = GATHERED;
        ut_dist_release(d);
    }
    return 0;
}
