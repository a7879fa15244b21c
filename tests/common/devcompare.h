/* One gradcheck row (tests/unit/gradcheck_*.c) run on two devices from the
 * same inputs: the output and every input's gradient of L = sum(out * R),
 * compared. The CUDA test (tolerance) and the sim device test (to the bit)
 * use it.
 * defines: dc_result, dc_run_row, dc_result_free, dc_rel_err, dc_compare_row, dc_autocast, dc_no_grad,
 *          dc_through. */
#ifndef UTRAIN_TEST_DEVCOMPARE_H
#define UTRAIN_TEST_DEVCOMPARE_H

#include "gradcheck.h"
#include "utrain/tensor.h"

/* What one run of a row gives: the output and each input's gradient, on the host. */
typedef struct {
    float *out;
    long long nout;
    float *grad[4];
    char err[512];
} dc_result;

/* the autocast dtype the rows run under (F32: off) */
extern ut_dtype dc_autocast;
/* true: dc_run_row's inputs take no gradient (a forward without one, R NULL) */
extern bool dc_no_grad;
/* true: each input that takes a gradient reaches the row through
 * ut_scale(x, 1), so the row's ops see op outputs, whose gradients backward
 * may hand them unzeroed to write (backend.h, UT_KCAP_FRESH_GRAD), not
 * leaves, whose gradients are zeroed and added to */
extern bool dc_through;

/* Runs row on dev from the host inputs; with R (nR floats, the output's
 * size) also backward of sum(out * R). 0, or -1 with res->err. */
int dc_run_row(ut_device dev, const gc_row *row, void *const *host, const float *R, long long nR, dc_result *res);
void dc_result_free(dc_result *r);
/* max |a - b| / max(max |b|, 1e-6); the element where it is largest in *where */
double dc_rel_err(const float *a, const float *b, long long n, long long *where);
/* The row on the CPU and on dev; prints ok/FAIL and returns 0 when every
 * output and gradient agrees within tol (0: to the bit). */
int dc_compare_row(const char *fam, const gc_row *row, ut_device dev, double tol);

#endif
