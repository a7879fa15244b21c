/* Gradient check harness: one row per op configuration. Each row builds an
 * output from random inputs; the harness compares the analytic gradient of
 * L = sum(out * R) (R fixed random) with central finite differences computed
 * around the float32 kernels with L accumulated in double.
 * defines: gc_input, gc_row, gc_run, gc_seen_ops. */
#ifndef UTRAIN_GRADCHECK_H
#define UTRAIN_GRADCHECK_H
#include <stdbool.h>

#include "utrain/base.h"
#include "utrain/ops.h"

enum gc_kind {
    GC_NORMAL = 0, /* N(0,1) */
    GC_AWAY0,      /* N(0,1) with |x| >= 0.1: for kinks at 0 (relu) */
    GC_POSITIVE,   /* uniform (0.5, 1.5) */
    GC_DISTINCT,   /* a shuffled grid with gaps of 0.05: for max, sort-like ops */
    GC_INDEX,      /* I32 in [0, hi) */
    GC_CONST,      /* N(0,1), no gradient checked */
};

typedef struct {
    int ndim;
    long long ne[4];
    int kind;
    int hi;        /* GC_INDEX: exclusive upper bound */
} gc_input;

typedef struct {
    const char *name;
    int nin;
    gc_input in[4];
    ut_tensor *(*build)(ut_ctx *ctx, ut_tensor **in);
    bool training;   /* dropout active */
    float eps;       /* finite-difference step (0: 1e-2) */
    float tol;       /* max |num - ana| / max |ana| (0: 1e-2) */
} gc_row;

/* Elements of an input; its values drawn from r by kind (I32 for
 * GC_INDEX, else float32), as the harness draws them. */
long long gc_count(const gc_input *in);
void gc_fill(const gc_input *in, void *dst, ut_rng *r);

/* 0 if the row passes; otherwise 1 with a message in msg. Marks the op ids on
 * the row's tape in seen[] (size ut_op_count()). */
int gc_run(const gc_row *row, bool *seen, char *msg, int msglen);

#endif
