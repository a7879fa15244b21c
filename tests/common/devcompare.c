/* One gradcheck row on two devices, compared (devcompare.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devcompare.h"
#include "utrain/base.h"
#include "utrain/ops.h"


void dc_result_free(dc_result *r) {
    free(r->out);
    for (int i = 0; i < 4; i++) free(r->grad[i]);
    memset(r, 0, sizeof *r);
}

ut_dtype dc_autocast = UT_F32;
bool dc_no_grad = false;
bool dc_through = false;

int dc_run_row(ut_device dev, const gc_row *row, void *const *host, const float *R, long long nR, dc_result *res) {
    memset(res, 0, sizeof *res);
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.arena_bytes = 1 << 20, .seed = 1234, .device = dev});
    ut_ctx_set_training(ctx, row->training);
    ut_ctx_set_autocast(ctx, dc_autocast);
    ut_tensor *in[4] = {0}, *use[4] = {0};
    for (int i = 0; i < row->nin; i++) {
        const gc_input *gi = &row->in[i];
        int64_t ne[4];
        for (int d = 0; d < gi->ndim; d++) ne[d] = gi->ne[d];
        in[i] = ut_tensor_from(ctx, gi->kind == GC_INDEX ? UT_I32 : UT_F32, gi->ndim, ne, host[i]);
        ut_tensor_set_requires_grad(in[i], !dc_no_grad && gi->kind != GC_INDEX && gi->kind != GC_CONST);
        use[i] = dc_through && in[i]->requires_grad ? ut_scale(ctx, in[i], 1.0f) : in[i];
    }
    ut_tensor *out = row->build(ctx, use);
    ut_tensor *oc = out ? ut_contiguous(ctx, out) : NULL;
    if (oc && oc->dtype != UT_F32) oc = ut_tensor_to(ctx, oc, UT_F32); /* a 16-bit output under autocast */
    int rc = -1;
    if (!oc) goto done;
    res->nout = ut_nelem(oc);
    res->out = malloc(sizeof(float) * (size_t)res->nout);
    if (ut_tensor_get(oc, res->out, sizeof(float) * (size_t)res->nout)) goto done;
    if (R) {
        if (nR != res->nout) goto done;
        ut_tensor *Rt = ut_tensor_from(ctx, UT_F32, out->ndim, out->ne, R);
        ut_tensor *L = ut_sum(ctx, ut_mul(ctx, out, Rt));
        if (!L || ut_backward(ctx, L)) goto done;
        for (int i = 0; i < row->nin; i++) {
            if (!in[i]->requires_grad) continue;
            size_t b = sizeof(float) * (size_t)gc_count(&row->in[i]);
            res->grad[i] = malloc(b);
            if (ut_tensor_get_grad(in[i], res->grad[i], b)) goto done;
        }
    }
    rc = 0;
done:
    if (ut_ctx_error(ctx)) snprintf(res->err, sizeof res->err, "%s", ut_ctx_error(ctx));
    ut_ctx_free(ctx);
    return rc;
}

/* max |a - b| / max(max |b|, 1e-6) */
double dc_rel_err(const float *a, const float *b, long long n, long long *where) {
    double m = 0, s = 1e-6;
    *where = 0;
    for (long long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || d != d) m = d != d ? INFINITY : d, *where = i;
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return m / s;
}

int dc_compare_row(const char *fam, const gc_row *row, ut_device dev, double tol) {
    const char *dn = ut_device_name(dev);
    ut_rng r;
    ut_rng_seed(&r, 42);
    void *host[4] = {0};
    for (int i = 0; i < row->nin; i++) {
        host[i] = malloc(sizeof(float) * (size_t)gc_count(&row->in[i]));
        gc_fill(&row->in[i], host[i], &r);
    }
    dc_result c, g;
    int bad = 0;
    /* the output's size first, for R */
    if (dc_run_row(UT_CPU, row, host, NULL, 0, &c)) {
        printf("FAIL %s/%s: cpu: %s\n", fam, row->name, c.err);
        bad = 1;
    }
    long long nR = c.nout;
    dc_result_free(&c);
    float *R = malloc(sizeof(float) * (size_t)(nR ? nR : 1));
    for (long long i = 0; i < nR; i++) R[i] = ut_rng_normal(&r);
    if (!bad && dc_run_row(UT_CPU, row, host, R, nR, &c)) {
        printf("FAIL %s/%s: cpu: %s\n", fam, row->name, c.err);
        bad = 1;
    }
    if (!bad && dc_run_row(dev, row, host, R, nR, &g)) {
        printf("FAIL %s/%s: %s: %s\n", fam, row->name, dn, g.err);
        bad = 1;
        dc_result_free(&g);
    }
    if (!bad) {
        long long w;
        double e = dc_rel_err(g.out, c.out, c.nout, &w);
        if (e > tol) {
            printf("FAIL %s/%s: output differs: rel %.3g (element %lld: %s %.8g, cpu %.8g)\n", fam, row->name,
                   e, w, dn, g.out[w], c.out[w]);
            bad = 1;
        }
        for (int i = 0; i < row->nin && !bad; i++) {
            if (!c.grad[i]) continue;
            e = dc_rel_err(g.grad[i], c.grad[i], gc_count(&row->in[i]), &w);
            if (e > tol) {
                printf("FAIL %s/%s: input %d gradient differs: rel %.3g (element %lld: %s %.8g, cpu %.8g)\n",
                       fam, row->name, i, e, w, dn, g.grad[i][w], c.grad[i][w]);
                bad = 1;
            }
        }
        if (!bad) printf("ok   %s/%s\n", fam, row->name);
        dc_result_free(&g);
    }
    dc_result_free(&c);
    free(R);
    for (int i = 0; i < 4; i++) free(host[i]);
    return bad;
}

