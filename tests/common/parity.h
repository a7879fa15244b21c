/* What the parity tests (tests/parity/test_*.c) measure against their
 * reference fixtures.
 * Include after test.h: pt_open_fixture records a failure with CHECK.
 * defines: pt_rel_err, pt_open_fixture. */
#ifndef UTRAIN_TEST_PARITY_H
#define UTRAIN_TEST_PARITY_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "utrain/io.h"

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
#endif
