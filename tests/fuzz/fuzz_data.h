/* For the dataset fuzz targets: reads the first and last example of an
 * opened dataset into buffers of the sizes it declares (ASan checks that get
 * stays inside them and inside the file), then frees it.
 * defines: fz_read_ends. */
#ifndef UTRAIN_FUZZ_DATA_H
#define UTRAIN_FUZZ_DATA_H

#include "fuzz.h"
#include "utrain/base.h"
#include "utrain/data.h"

/* Bytes of one x or y: every dataset here yields f32 or i32 elements. */
static inline size_t fz_example_bytes(int ndim, const int64_t *ne) {
    size_t k = 4;
    for (int d = 0; d < ndim; d++) k *= (size_t)ne[d];
    return k;
}

static inline void fz_read_ends(ut_dataset *ds) {
    if (ds->n <= 0) abort();
    void *x = ut_malloc_check(fz_example_bytes(ds->x_ndim, ds->x_ne));
    void *y = ut_malloc_check(fz_example_bytes(ds->y_ndim, ds->y_ne));
    char err[512];
    if (ds->get(ds, 0, x, y, err, sizeof err) || ds->get(ds, ds->n - 1, x, y, err, sizeof err)) {
        fprintf(stderr, "get failed on an opened dataset: %s\n", err);
        abort();
    }
    if (!ds->get(ds, ds->n, x, y, err, sizeof err)) abort();   /* out of range */
    ut_free(x);
    ut_free(y);
    ut_dataset_free(ds);
}

#endif
