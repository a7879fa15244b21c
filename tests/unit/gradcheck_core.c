/* Gradcheck rows: matrix products, broadcasting binary ops, reductions, views,
 * checkpointing, collectives. */
#include "gradcheck.h"
#include "../../src/backend/backend.h"

static ut_tensor *b_linear(ut_ctx *c, ut_tensor **in) { return ut_linear(c, in[0], in[1], in[2]); }
static ut_tensor *b_linear_nob(ut_ctx *c, ut_tensor **in) { return ut_linear(c, in[0], in[1], NULL); }
static ut_tensor *b_linear_gelu(ut_ctx *c, ut_tensor **in) { return ut_linear_gelu(c, in[0], in[1], in[2]); }
static ut_tensor *b_linear_gelu_nob(ut_ctx *c, ut_tensor **in) { return ut_linear_gelu(c, in[0], in[1], NULL); }
static ut_tensor *b_matmul(ut_ctx *c, ut_tensor **in) { return ut_matmul(c, in[0], in[1]); }
static ut_tensor *b_add(ut_ctx *c, ut_tensor **in) { return ut_add(c, in[0], in[1]); }
static ut_tensor *b_mul(ut_ctx *c, ut_tensor **in) { return ut_mul(c, in[0], in[1]); }
static ut_tensor *b_sum(ut_ctx *c, ut_tensor **in) { return ut_sum(c, in[0]); }
static ut_tensor *b_mean(ut_ctx *c, ut_tensor **in) { return ut_mean(c, in[0]); }
static ut_tensor *b_reshape(ut_ctx *c, ut_tensor **in) {
    int64_t ne[2] = {-1, 6};
    return ut_reshape(c, in[0], 2, ne);
}
static ut_tensor *b_permute(ut_ctx *c, ut_tensor **in) {
    int perm[3] = {2, 0, 1};
    return ut_permute(c, in[0], perm);
}
/* a view of a view, then a copy and an op that reads it */
static ut_tensor *b_slice_transpose(ut_ctx *c, ut_tensor **in) {
    ut_tensor *v = ut_slice(c, ut_transpose(c, in[0], 0, 2), 1, 1, 3);
    return ut_mul(c, ut_contiguous(c, v), ut_contiguous(c, v));
}
static ut_tensor *block(ut_ctx *c, void *user, ut_tensor **in, int n) {
    (void)user;
    (void)n;
    return ut_mul(c, ut_linear(c, in[0], in[1], NULL), ut_linear(c, in[0], in[1], NULL));
}
static ut_tensor *b_checkpoint(ut_ctx *c, ut_tensor **in) {
    ut_tensor *x = ut_checkpoint(c, block, NULL, in, 2);
    return ut_add(c, x, in[0]);
}

/* What an all-reduce over two ranks that hold the same values does: doubles
 * them, forward and backward. */
static int twice(void *user, ut_device dev, float *buf, int64_t n, char *err, size_t errn) {
    (void)user, (void)err, (void)errn;
    ut_backend_get(dev)->scale(buf, n, 2.0f);
    return 0;
}
static ut_tensor *b_collective(ut_ctx *c, ut_tensor **in) {
    ut_tensor *y = ut_collective(c, ut_transpose(c, in[0], 0, 1), twice, twice, NULL, "twice");
    return ut_mul(c, y, ut_collective(c, in[1], NULL, NULL, NULL, NULL));
}

/* What an all-gather over two ranks holding the same values does (the
 * output twice the input), and its adjoint (the two halves' gradients
 * summed); gradcheck proves the pair adjoint. */
static int gather2(void *user, ut_device dev, const float *in, int64_t in_n, float *out, int64_t out_n, char *err,
                   size_t errn) {
    (void)user, (void)out_n, (void)err, (void)errn;
    const ut_backend *be = ut_backend_get(dev);
    be->copy(out, in, (size_t)in_n * sizeof(float), UT_COPY_D2D);
    be->copy(out + in_n, in, (size_t)in_n * sizeof(float), UT_COPY_D2D);
    return 0;
}
static int gather2_bwd(void *user, ut_device dev, const float *in, int64_t in_n, float *out, int64_t out_n, char *err,
                       size_t errn) {
    (void)user, (void)in_n, (void)err, (void)errn;
    const ut_backend *be = ut_backend_get(dev);
    be->copy(out, in, (size_t)out_n * sizeof(float), UT_COPY_D2D);
    const float *second = in + out_n;
    be->accumulate(out, (float *const *)&second, 1, out_n, false);
    return 0;
}
static ut_tensor *b_collective_to(ut_ctx *c, ut_tensor **in) {
    ut_tensor *y = ut_collective_to(c, ut_transpose(c, in[0], 0, 1), 2, (int64_t[]){8, 3}, gather2, gather2_bwd, NULL,
                                    "gather2");
    return ut_mul(c, y, in[1]);
}

/* the rows of a strided view and of a plain tensor, then an op that reads them */
static ut_tensor *b_concat_rows(ut_ctx *c, ut_tensor **in) {
    ut_tensor *y = ut_concat_rows(c, ut_transpose(c, in[0], 0, 1), in[1]);
    return ut_mul(c, y, y);
}

const gc_row gc_rows_core[] = {
    {"linear", 3, {{2, {5, 7}}, {2, {4, 7}}, {1, {4}}}, b_linear},
    {"linear 3-D no bias", 2, {{3, {2, 3, 7}}, {2, {4, 7}}}, b_linear_nob},
    /* ut_linear_gelu: GELU (tanh form) inside the linear op */
    {"linear gelu", 3, {{2, {5, 7}}, {2, {4, 7}}, {1, {4}}}, b_linear_gelu},
    {"linear gelu 3-D no bias", 2, {{3, {2, 3, 7}}, {2, {4, 7}}}, b_linear_gelu_nob},
    {"matmul 2-D", 2, {{2, {5, 3}}, {2, {3, 4}}}, b_matmul},
    {"matmul batched", 2, {{3, {2, 5, 3}}, {3, {2, 3, 4}}}, b_matmul},
    {"matmul shared b", 2, {{3, {2, 5, 3}}, {2, {3, 4}}}, b_matmul},
    {"add same", 2, {{2, {3, 4}}, {2, {3, 4}}}, b_add},
    {"add bias", 2, {{3, {2, 3, 4}}, {1, {4}}}, b_add},
    {"add conv bias", 2, {{4, {2, 3, 2, 2}}, {3, {3, 1, 1}}}, b_add},
    {"mul same", 2, {{2, {3, 4}}, {2, {3, 4}}}, b_mul},
    {"mul row scale", 2, {{2, {3, 4}}, {2, {3, 1}}}, b_mul},
    {"sum", 1, {{2, {3, 4}}}, b_sum},
    {"mean", 1, {{3, {2, 3, 4}}}, b_mean},
    {"reshape", 1, {{3, {2, 3, 4}}}, b_reshape},
    {"permute", 1, {{3, {2, 3, 4}}}, b_permute},
    {"slice of transpose", 1, {{3, {2, 3, 4}}}, b_slice_transpose},
    {"checkpoint", 2, {{2, {3, 4}}, {2, {4, 4}}}, b_checkpoint},
    {"collective", 2, {{2, {3, 4}}, {2, {4, 3}}}, b_collective},
    {"concat_rows", 2, {{3, {3, 2, 4}}, {3, {1, 3, 4}}}, b_concat_rows},
    {"collective_to", 2, {{2, {3, 4}}, {2, {8, 3}}}, b_collective_to},
};
const int gc_nrows_core = sizeof gc_rows_core / sizeof gc_rows_core[0];
