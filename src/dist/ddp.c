/* DDP: the flat gradient buffer cut into buckets, each all-reduced as soon as
 * backward has completed every parameter in it, so communication overlaps the
 * rest of backward. The buckets' starting, staging, ordering and return are
 * the bucket engine's (bucketer.h), shared with ZeRO; this file is the
 * all-reduce and its compression. */
#include "utrain/base.h"
#include "utrain/dist.h"
#include "../backend/backend.h"
#include "bucketer.h"

struct ut_ddp {
    ut_comm *comm;
    ut_device dev;
    bool direct;             /* the buckets' all-reduce on device memory (ut_comm_direct) */
    ut_bucketer *eng;
    ut_bucket_span *span;
    int nb;
    ut_dtype wire_dt;        /* UT_BF16 or UT_F16 with compression, else UT_F32 */
    uint16_t *wire;          /* compression: every bucket's 16-bit buffer, one allocation (device
                              * memory on the direct path) */
    uint16_t **wire_of;      /* per bucket: its part of wire */
};

static int64_t span_n(const ut_bucket_span *s) { return s->hi - s->lo; }

/* The bucket's all-reduce, in place on its host memory; compressed: rounded
 * to 16 bits for the wire. */
static ut_comm_req *post(void *user, int k, float *in, float *out) {
    ut_ddp *d = user;
    (void)out; /* in place */
    int64_t n = span_n(&d->span[k]);
    if (d->wire_dt == UT_F32) return ut_comm_iallreduce(d->comm, in, n);
    ut_backend_get(UT_CPU)->convert(d->wire_of[k], d->wire_dt, in, UT_F32, n);
    return ut_comm_iallreduce16(d->comm, d->wire_of[k], n, d->wire_dt);
}

/* Compressed: the summed 16-bit bucket widened back. */
static void landed(void *user, int k, float *out) {
    ut_ddp *d = user;
    if (d->wire_dt != UT_F32)
        ut_backend_get(UT_CPU)->convert(out, UT_F32, d->wire_of[k], d->wire_dt, span_n(&d->span[k]));
}

/* The direct path (bucketer.h): the compressed copy made on the compute
 * stream, the all-reduce queued on the communicator's stream, the sum
 * widened back on the compute stream. */
static void prepare_direct(void *user, int k, float *in) {
    ut_ddp *d = user;
    if (d->wire_dt != UT_F32)
        ut_backend_get(d->dev)->convert(d->wire_of[k], d->wire_dt, in, UT_F32, span_n(&d->span[k]));
}

static int post_direct(void *user, int k, float *in, float *out) {
    ut_ddp *d = user;
    (void)out; /* in place */
    int64_t n = span_n(&d->span[k]);
    if (d->wire_dt == UT_F32) return ut_comm_direct_allreduce(d->comm, d->dev, in, n, UT_F32, UT_REDUCE_SUM);
    return ut_comm_direct_allreduce(d->comm, d->dev, d->wire_of[k], n, d->wire_dt, UT_REDUCE_SUM);
}

static void landed_direct(void *user, int k, float *out) {
    ut_ddp *d = user;
    if (d->wire_dt != UT_F32)
        ut_backend_get(d->dev)->convert(out, UT_F32, d->wire_of[k], d->wire_dt, span_n(&d->span[k]));
}

/* Buckets of about bucket_mb (buckets.h). */
ut_ddp *ut_ddp_new(ut_comm *c, ut_params *p, double bucket_mb) {
    ut_ddp *d = ut_calloc_check(1, sizeof *d);
    d->comm = c;
    d->dev = p->device;
    d->direct = ut_comm_direct(c, p->device);
    int n = p->n ? p->n : 1;
    int *bucket_of = ut_calloc_check((size_t)n, sizeof(int));
    d->span = ut_calloc_check((size_t)n, sizeof *d->span);
    d->nb = ut_bucket_layout(p, bucket_mb, d->span, bucket_of);
    d->wire_of = ut_calloc_check((size_t)n, sizeof *d->wire_of);
    ut_bucket_io io = {.post = post, .landed = landed, .user = d};
    if (d->direct)
        io = (ut_bucket_io){.direct = true, .prepare = prepare_direct, .post_direct = post_direct,
                            .landed = landed_direct, .user = d};
    d->eng = ut_bucketer_new(c, p, d->span, d->nb, bucket_of, NULL, NULL, io);
    ut_free(bucket_of);
    return d;
}

static void wire_free(ut_ddp *d) {
    if (d->wire && d->direct) ut_backend_get(d->dev)->free(d->wire);
    else ut_free(d->wire);
    d->wire = NULL;
}

void ut_ddp_set_compression(ut_ddp *d, ut_dtype dt) {
    UT_ASSERT(dt == UT_F32 || dt == UT_BF16 || dt == UT_F16);
    wire_free(d);
    d->wire_dt = dt;
    if (dt == UT_F32) return;
    int64_t total = 0;
    for (int k = 0; k < d->nb; k++) total += span_n(&d->span[k]);
    size_t bytes = (size_t)(total ? total : 1) * sizeof(uint16_t);
    d->wire = d->direct ? ut_backend_get(d->dev)->alloc(bytes) : ut_malloc_check(bytes);
    for (int64_t k = 0, off = 0; k < d->nb; off += span_n(&d->span[k]), k++) d->wire_of[k] = d->wire + off;
}

void ut_ddp_free(ut_ddp *d) {
    if (!d) return;
    ut_bucketer_free(d->eng);
    wire_free(d);
    ut_free(d->wire_of);
    ut_free(d->span);
    ut_free(d);
}

void ut_ddp_set_host_grad(ut_ddp *d, float *host, int64_t lo, int64_t hi) {
    UT_ASSERT(d->wire_dt == UT_F32); /* a compressed bucket is widened after its collective */
    for (int k = 0; k < d->nb; k++) {
        int64_t a = d->span[k].lo > lo ? d->span[k].lo : lo, e = d->span[k].hi < hi ? d->span[k].hi : hi;
        if (a < e) ut_bucketer_set_host(d->eng, k, host + (a - lo), a - d->span[k].lo, e - a);
    }
}

int ut_ddp_nbuckets(const ut_ddp *d) { return d->nb; }

void ut_ddp_arm(ut_ddp *d, ut_ctx *ctx) { ut_bucketer_arm(d->eng, ctx); }

/* Buckets are started in the same order on every rank: the tape's order
 * during backward (the same model on every rank), then the unfinished ones in
 * bucket order. MPI needs that agreement; a model whose control flow depends
 * on the data would break it. */
int ut_ddp_finish(ut_ddp *d, ut_ctx *ctx) { return ut_bucketer_finish(d->eng, ctx); }
