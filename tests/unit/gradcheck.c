/* Gradient check harness (see gradcheck.h). */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utrain/base.h"

#define SEED 1234

typedef struct {
    ut_ctx *ctx;
    const gc_row *row;
    void *host[4];     /* input values, host copies */
    double *R;         /* loss weights */
    long long nout;
} gc_state;

long long gc_count(const gc_input *in) {
    long long n = 1;
    for (int i = 0; i < in->ndim; i++) n *= in->ne[i];
    return n;
}

void gc_fill(const gc_input *in, void *dst, ut_rng *r) {
    long long n = gc_count(in);
    if (in->kind == GC_INDEX) {
        for (long long i = 0; i < n; i++) ((int *)dst)[i] = (int)(ut_rng_u64(r) % in->hi);
        return;
    }
    float *x = dst;
    for (long long i = 0; i < n; i++) {
        float v = ut_rng_normal(r);
        if (in->kind == GC_AWAY0) v = v >= 0 ? v + 0.1f : v - 0.1f;
        if (in->kind == GC_POSITIVE) v = 0.5f + ut_rng_uniform(r);
        if (in->kind == GC_DISTINCT) v = 0.05f * (float)i - 0.025f * (float)n;
        x[i] = v;
    }
    if (in->kind == GC_DISTINCT) /* shuffle */
        for (long long i = n - 1; i > 0; i--) {
            long long j = (long long)(ut_rng_u64(r) % (unsigned long long)(i + 1));
            float t = x[i];
            x[i] = x[j];
            x[j] = t;
        }
}

/* Builds the row's output from the host inputs; grad tracking on request. */
static ut_tensor *forward(gc_state *s, ut_tensor **in, bool track) {
    ut_ctx_reset(s->ctx);
    ut_ctx_seed(s->ctx, SEED); /* same dropout mask every time */
    ut_ctx_set_grad_enabled(s->ctx, track);
    ut_ctx_set_training(s->ctx, s->row->training);
    for (int i = 0; i < s->row->nin; i++) {
        const gc_input *gi = &s->row->in[i];
        int64_t ne[4];
        for (int d = 0; d < gi->ndim; d++) ne[d] = gi->ne[d];
        in[i] = ut_tensor_from(s->ctx, gi->kind == GC_INDEX ? UT_I32 : UT_F32, gi->ndim, ne,
                               s->host[i]);
        ut_tensor_set_requires_grad(in[i], gi->kind != GC_INDEX && gi->kind != GC_CONST);
    }
    return s->row->build(s->ctx, in);
}

static double loss_of(gc_state *s, const ut_tensor *out) {
    float *o = malloc(sizeof(float) * (size_t)s->nout);
    /* outputs may be views: read through strides */
    long long n = s->nout, idx = 0;
    int64_t ne4[4] = {1, 1, 1, 1}, nb4[4] = {0, 0, 0, 0};
    for (int i = 0; i < out->ndim; i++) {
        ne4[4 - out->ndim + i] = out->ne[i];
        nb4[4 - out->ndim + i] = out->nb[i];
    }
    const float *d = out->data;
    for (int64_t a = 0; a < ne4[0]; a++)
        for (int64_t b = 0; b < ne4[1]; b++)
            for (int64_t c = 0; c < ne4[2]; c++)
                for (int64_t e = 0; e < ne4[3]; e++)
                    o[idx++] = d[a * nb4[0] + b * nb4[1] + c * nb4[2] + e * nb4[3]];
    double L = 0;
    for (long long i = 0; i < n; i++) L += (double)o[i] * s->R[i];
    free(o);
    return L;
}

int gc_run(const gc_row *row, bool *seen, char *msg, int msglen) {
    gc_state s = {.row = row};
    ut_ctx_opts o = {.arena_bytes = 1 << 20, .seed = SEED};
    s.ctx = ut_ctx_new(&o);
    ut_rng r;
    ut_rng_seed(&r, 42);
    for (int i = 0; i < row->nin; i++) {
        s.host[i] = malloc(sizeof(float) * (size_t)gc_count(&row->in[i]));
        gc_fill(&row->in[i], s.host[i], &r);
    }
    int rc = 0;
    ut_tensor *in[4] = {0};
    ut_tensor *out = forward(&s, in, true);
    if (!out) {
        snprintf(msg, msglen, "forward failed: %s", ut_ctx_error(s.ctx));
        rc = 1;
        goto done;
    }
    s.nout = ut_nelem(out);
    s.R = malloc(sizeof(double) * (size_t)s.nout);
    for (long long i = 0; i < s.nout; i++) s.R[i] = ut_rng_normal(&r);

    /* analytic: backward of sum(out * R) */
    float *Rf = malloc(sizeof(float) * (size_t)s.nout);
    for (long long i = 0; i < s.nout; i++) Rf[i] = (float)s.R[i];
    ut_tensor *Rt = ut_tensor_from(s.ctx, UT_F32, out->ndim, out->ne, Rf);
    free(Rf);
    ut_tensor *L = ut_sum(s.ctx, ut_mul(s.ctx, out, Rt));
    for (int i = 0; i < ut_ctx_tape_len(s.ctx); i++) seen[ut_ctx_tape_at(s.ctx, i)->op] = true;
    if (ut_backward(s.ctx, L) != 0) {
        snprintf(msg, msglen, "backward failed: %s", ut_ctx_error(s.ctx));
        rc = 1;
        goto done;
    }
    float *ana[4] = {0};
    for (int i = 0; i < row->nin; i++) {
        if (row->in[i].kind == GC_INDEX || row->in[i].kind == GC_CONST) continue;
        long long n = gc_count(&row->in[i]);
        ana[i] = malloc(sizeof(float) * (size_t)n);
        if (in[i]->grad) memcpy(ana[i], in[i]->grad, sizeof(float) * (size_t)n);
        else memset(ana[i], 0, sizeof(float) * (size_t)n);
    }

    /* numeric, input by input */
    float eps = row->eps > 0 ? row->eps : 1e-2f, tol = row->tol > 0 ? row->tol : 1e-2f;
    for (int i = 0; i < row->nin && !rc; i++) {
        if (!ana[i]) continue;
        long long n = gc_count(&row->in[i]);
        float *x = s.host[i];
        double maxerr = 0, maxana = 0;
        long long worst = -1;
        double worst_num = 0;
        for (long long j = 0; j < n; j++) {
            float keep = x[j];
            x[j] = keep + eps;
            double lp = loss_of(&s, forward(&s, in, false));
            x[j] = keep - eps;
            double lm = loss_of(&s, forward(&s, in, false));
            x[j] = keep;
            double num = (lp - lm) / (2.0 * eps);
            double err = fabs(num - ana[i][j]);
            if (fabs(ana[i][j]) > maxana) maxana = fabs(ana[i][j]);
            if (fabs(num) > maxana) maxana = fabs(num);
            if (err > maxerr) {
                maxerr = err;
                worst = j;
                worst_num = num;
            }
        }
        double rel = maxerr / (maxana > 1e-3 ? maxana : 1e-3);
        if (rel > tol) {
            snprintf(msg, msglen,
                     "input %d: max |num - ana| / max |grad| = %.3g > %.3g (element %lld: "
                     "numeric %.6g, analytic %.6g)",
                     i, rel, tol, worst, worst_num, ana[i][worst]);
            rc = 1;
        }
    }
    for (int i = 0; i < 4; i++) free(ana[i]);
done:
    for (int i = 0; i < row->nin; i++) free(s.host[i]);
    free(s.R);
    ut_ctx_free(s.ctx);
    return rc;
}
