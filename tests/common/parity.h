/* What the parity tests (tests/parity/test_*.c) measure against their
 * reference fixtures.
 * Include after test.h: pt_open_fixture records a failure with CHECK.
 * defines: pt_rel_err, pt_open_fixture, pt_stored, pt_model. */
#ifndef UTRAIN_TEST_PARITY_H
#define UTRAIN_TEST_PARITY_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "utrain/base.h"
#include "utrain/io.h"
#include "utrain/nn.h"
#include "utrain/tensor.h"

/* max |a - b| / max |b| (the max-abs error when b is all zeros); b is the
 * reference, and a NaN in a counts as an infinite error. */
static inline double pt_rel_err(const float *a, const float *b, int64_t n) {
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= err)) err = d;
        if (fabs((double)b[i]) > ref) ref = fabs((double)b[i]);
    }
    return ref > 0 ? err / ref : err;
}

/* tests/parity/fixtures/NAME.safetensors (NULL, with a failed check, when it
 * cannot be read) */
static inline ut_st_file *pt_open_fixture(const char *name) {
    char path[256], err[512];
    snprintf(path, sizeof path, "tests/parity/fixtures/%s.safetensors", name);
    ut_st_file *f = ut_st_open(path, err, sizeof err);
    CHECK(f, "%s", err);
    return f;
}

/* A tensor of ctx holding a copy of a fixture's F32 or I32 tensor */
static inline ut_tensor *pt_stored(ut_ctx *ctx, const ut_st_tensor *t) {
    UT_ASSERT(t && t->ndim <= UT_MAX_DIMS && (t->dtype == UT_ST_F32 || t->dtype == UT_ST_I32));
    int64_t ne[UT_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) ne[d] = t->shape[d];
    return ut_tensor_from(ctx, t->dtype == UT_ST_F32 ? UT_F32 : UT_I32, t->ndim, ne, t->data);
}

/* model NAME from seed with the options opts (key, value, ..., NULL); NULL,
 * with a failed check, when it is refused */
static inline ut_model *pt_model(const char *name, const char *const *opts, uint64_t seed) {
    ut_kv *kv = ut_kv_new();
    for (int i = 0; opts[i]; i += 2) ut_kv_set(kv, opts[i], opts[i + 1]);
    char err[512];
    ut_model *m = ut_model_create(name, kv, seed, err, sizeof err);
    ut_kv_free(kv);
    CHECK(m, "%s: %s", name, err);
    return m;
}
#endif
