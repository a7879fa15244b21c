/* DDP: the flat gradient buffer cut into buckets, each all-reduced as soon as
 * backward has completed every parameter in it, so communication overlaps the
 * rest of backward. The communicator works on host memory: a bucket is staged
 * (ut_stage_begin) for the all-reduce and written back when it completes,
 * which on the CPU backend is the buffer itself, with no copy. */
#include "utrain/base.h"
#include "utrain/dist.h"
#include "../backend/backend.h"
#include "buckets.h"

typedef struct {
    ut_bucket_span span;
    int pending;             /* parameters not yet complete */
    ut_comm_req *req;        /* NULL until started */
    ut_stage stage;          /* the bucket's host memory while its all-reduce runs */
    uint16_t *wire;          /* compression: the bucket in 16 bits while its all-reduce runs */
} bucket;

struct ut_ddp {
    ut_comm *comm;
    ut_params *params;
    bucket *b;
    int nb;
    int *bucket_of;          /* parameter index -> bucket */
    int *order;              /* buckets in the order they were started */
    int nstarted;
    ut_dtype wire_dt;        /* UT_BF16 or UT_F16 with compression, else UT_F32 */
    uint16_t *wire;          /* compression: every bucket's 16-bit buffer, one allocation */
};

/* Buckets of about bucket_mb (buckets.h). */
ut_ddp *ut_ddp_new(ut_comm *c, ut_params *p, double bucket_mb) {
    ut_ddp *d = ut_calloc_check(1, sizeof *d);
    d->comm = c;
    d->params = p;
    int n = p->n ? p->n : 1;
    d->b = ut_calloc_check((size_t)n, sizeof *d->b);
    d->bucket_of = ut_calloc_check((size_t)n, sizeof(int));
    d->order = ut_calloc_check((size_t)n, sizeof(int));
    ut_bucket_span *span = ut_calloc_check((size_t)n, sizeof *span);
    d->nb = ut_bucket_layout(p, bucket_mb, span, d->bucket_of);
    for (int k = 0; k < d->nb; k++) d->b[k].span = span[k];
    ut_free(span);
    return d;
}

void ut_ddp_set_compression(ut_ddp *d, ut_dtype dt) {
    UT_ASSERT(dt == UT_F32 || dt == UT_BF16 || dt == UT_F16);
    ut_free(d->wire);
    d->wire = NULL;
    d->wire_dt = dt;
    if (dt == UT_F32) return;
    int64_t total = 0;
    for (int k = 0; k < d->nb; k++) total += d->b[k].span.hi - d->b[k].span.lo;
    d->wire = ut_malloc_check((size_t)(total ? total : 1) * sizeof(uint16_t));
    int64_t off = 0;
    for (int k = 0; k < d->nb; k++) {
        d->b[k].wire = d->wire + off;
        off += d->b[k].span.hi - d->b[k].span.lo;
    }
}

void ut_ddp_free(ut_ddp *d) {
    if (!d) return;
    ut_free(d->wire);
    ut_free(d->b);
    ut_free(d->bucket_of);
    ut_free(d->order);
    ut_free(d);
}

int ut_ddp_nbuckets(const ut_ddp *d) { return d->nb; }

static void start(ut_ddp *d, int k) {
    bucket *bk = &d->b[k];
    int64_t n = bk->span.hi - bk->span.lo;
    float *host = ut_stage_begin(&bk->stage, ut_backend_get(d->params->device), d->params->flat_grad + bk->span.lo,
                                 (size_t)n * sizeof(float), true);
    if (d->wire_dt != UT_F32) { /* compressed: round the bucket to 16 bits for the wire */
        ut_backend_get(UT_CPU)->convert(bk->wire, d->wire_dt, host, UT_F32, n);
        bk->req = ut_comm_iallreduce16(d->comm, bk->wire, n, d->wire_dt);
    } else {
        bk->req = ut_comm_iallreduce(d->comm, host, n);
    }
    d->order[d->nstarted++] = k;
}

/* The gradient-ready hook: the bucket's last parameter starts its all-reduce. */
static void on_ready(void *user, int param_index) {
    ut_ddp *d = user;
    int k = d->bucket_of[param_index];
    if (--d->b[k].pending == 0) start(d, k);
}

void ut_ddp_arm(ut_ddp *d, ut_ctx *ctx) {
    for (int k = 0; k < d->nb; k++) {
        d->b[k].pending = d->b[k].span.nparams;
        d->b[k].req = NULL;
    }
    d->nstarted = 0;
    ut_ctx_set_grad_hook(ctx, on_ready, d);
}

/* Buckets are started in the same order on every rank: the tape's order
 * during backward (the same model on every rank), then the unfinished ones in
 * bucket order. MPI needs that agreement; a model whose control flow depends
 * on the data would break it. */
int ut_ddp_finish(ut_ddp *d, ut_ctx *ctx) {
    ut_ctx_set_grad_hook(ctx, NULL, NULL);
    for (int k = 0; k < d->nb; k++)
        if (!d->b[k].req) start(d, k);
    int rc = 0;
    for (int i = 0; i < d->nstarted; i++) {
        bucket *bk = &d->b[d->order[i]];
        if (ut_comm_wait(d->comm, bk->req)) rc = -1;
        if (d->wire_dt != UT_F32) /* the summed 16-bit bucket widened back */
            ut_backend_get(UT_CPU)->convert(bk->stage.host, UT_F32, bk->wire, d->wire_dt,
                                            bk->span.hi - bk->span.lo);
        ut_stage_end(&bk->stage, true);
    }
    /* done: a finish without a new arm starts every bucket again */
    for (int k = 0; k < d->nb; k++) d->b[k].req = NULL;
    d->nstarted = 0;
    return rc;
}
