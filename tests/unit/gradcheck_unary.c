/* Gradcheck rows: elementwise unary ops (scale, relu, gelu, gelu_erf, tanh, sigmoid,
 * dropout, uniform noise) and the softmax / log_softmax pair. */
#include "gradcheck.h"

static ut_tensor *b_scale(ut_ctx *c, ut_tensor **in) { return ut_scale(c, in[0], 0.5f); }
static ut_tensor *b_scale_neg(ut_ctx *c, ut_tensor **in) { return ut_scale(c, in[0], -2.0f); }
static ut_tensor *b_relu(ut_ctx *c, ut_tensor **in) { return ut_relu(c, in[0]); }
static ut_tensor *b_gelu(ut_ctx *c, ut_tensor **in) { return ut_gelu(c, in[0]); }
static ut_tensor *b_gelu_erf(ut_ctx *c, ut_tensor **in) { return ut_gelu_erf(c, in[0]); }
static ut_tensor *b_tanh(ut_ctx *c, ut_tensor **in) { return ut_tanh(c, in[0]); }
static ut_tensor *b_sigmoid(ut_ctx *c, ut_tensor **in) { return ut_sigmoid(c, in[0]); }
static ut_tensor *b_dropout(ut_ctx *c, ut_tensor **in) { return ut_dropout(c, in[0], 0.3f); }
/* columns 3..7 of a tensor of 11 (a tensor-parallel part) */
static ut_tensor *b_dropout_cols(ut_ctx *c, ut_tensor **in) { return ut_dropout_cols(c, in[0], 0.3f, 3, 11); }
static ut_tensor *b_noise(ut_ctx *c, ut_tensor **in) { return ut_uniform_noise(c, in[0], 0.5f); }
static ut_tensor *b_softmax(ut_ctx *c, ut_tensor **in) { return ut_softmax(c, in[0]); }
static ut_tensor *b_log_softmax(ut_ctx *c, ut_tensor **in) { return ut_log_softmax(c, in[0]); }
/* non-contiguous inputs: the op copies them first */
static ut_tensor *b_gelu_transposed(ut_ctx *c, ut_tensor **in) {
    return ut_gelu(c, ut_transpose(c, in[0], 0, 1));
}
static ut_tensor *b_softmax_transposed(ut_ctx *c, ut_tensor **in) {
    return ut_softmax(c, ut_transpose(c, in[0], 1, 2));
}
/* two ops in a chain, as in a classifier head */
static ut_tensor *b_tanh_log_softmax(ut_ctx *c, ut_tensor **in) {
    return ut_log_softmax(c, ut_scale(c, ut_tanh(c, in[0]), 3.0f));
}

const gc_row gc_rows_unary[] = {
    {"scale", 1, {{2, {3, 4}}}, b_scale},
    {"scale 3-D negative", 1, {{3, {2, 3, 4}}}, b_scale_neg},
    {"relu", 1, {{2, {3, 4}, GC_AWAY0}}, b_relu},
    {"relu 4-D", 1, {{4, {2, 2, 3, 4}, GC_AWAY0}}, b_relu},
    {"gelu", 1, {{2, {3, 5}}}, b_gelu},
    {"gelu 3-D", 1, {{3, {2, 3, 4}}}, b_gelu},
    {"gelu transposed", 1, {{2, {4, 3}}}, b_gelu_transposed},
    {"gelu_erf", 1, {{2, {3, 5}}}, b_gelu_erf},
    {"gelu_erf 3-D wide", 1, {{3, {2, 3, 4}}}, b_gelu_erf, .eps = 1e-3f},
    {"tanh", 1, {{2, {3, 4}}}, b_tanh},
    {"tanh 3-D", 1, {{3, {2, 3, 5}}}, b_tanh},
    {"sigmoid", 1, {{2, {3, 4}}}, b_sigmoid},
    {"sigmoid 3-D", 1, {{3, {2, 3, 5}}}, b_sigmoid},
    {"dropout p=0.3", 1, {{2, {6, 8}}}, b_dropout, .training = true},
    {"dropout 3-D p=0.3", 1, {{3, {2, 3, 8}}}, b_dropout, .training = true},
    {"dropout eval (identity)", 1, {{2, {3, 4}}}, b_dropout},
    {"dropout of columns 3..7 of 11", 1, {{2, {6, 5}}}, b_dropout_cols, .training = true},
    {"uniform_noise mag=0.5", 1, {{2, {6, 8}}}, b_noise, .training = true},
    {"uniform_noise 3-D, odd size", 1, {{3, {2, 3, 7}}}, b_noise, .training = true},
    {"uniform_noise eval (identity)", 1, {{2, {3, 4}}}, b_noise},
    {"softmax", 1, {{2, {3, 5}}}, b_softmax},
    {"softmax 3-D", 1, {{3, {2, 3, 7}}}, b_softmax},
    {"softmax transposed", 1, {{3, {2, 4, 3}}}, b_softmax_transposed},
    {"log_softmax", 1, {{2, {3, 5}}}, b_log_softmax},
    {"log_softmax 3-D", 1, {{3, {2, 3, 7}}}, b_log_softmax},
    {"tanh, scale, log_softmax", 1, {{2, {4, 6}}}, b_tanh_log_softmax},
};
const int gc_nrows_unary = sizeof gc_rows_unary / sizeof gc_rows_unary[0];
