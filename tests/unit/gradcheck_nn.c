/* Gradcheck rows: layernorm, rms_norm, embedding, conv2d, max_pool2d, attention,
 * attention_masked (self, cross, causal), attention_varlen. The "twice" rows use an op's inputs in two calls, so a
 * backward that overwrote src->grad instead of adding into it would fail. */
#include <stdlib.h>

#include "gradcheck.h"

static ut_tensor *b_ln(ut_ctx *c, ut_tensor **in) { return ut_layernorm(c, in[0], in[1], in[2], 1e-5f); }
static ut_tensor *b_ln_twice(ut_ctx *c, ut_tensor **in) {
    return ut_add(c, ut_layernorm(c, in[0], in[1], in[2], 1e-5f),
                  ut_layernorm(c, ut_mul(c, in[0], in[0]), in[1], in[2], 1e-5f));
}
/* a strided input: layernorm over dim 1 of a transposed (C, N) tensor */
static ut_tensor *b_ln_transposed(ut_ctx *c, ut_tensor **in) {
    return ut_layernorm(c, ut_transpose(c, in[0], 0, 1), in[1], in[2], 1e-5f);
}

static ut_tensor *b_rms(ut_ctx *c, ut_tensor **in) { return ut_rms_norm(c, in[0], in[1], 1e-6f); }
static ut_tensor *b_rms_twice(ut_ctx *c, ut_tensor **in) {
    return ut_add(c, ut_rms_norm(c, in[0], in[1], 1e-6f), ut_rms_norm(c, ut_mul(c, in[0], in[0]), in[1], 1e-6f));
}
/* a strided input: rms_norm over dim 1 of a transposed (C, N) tensor */
static ut_tensor *b_rms_transposed(ut_ctx *c, ut_tensor **in) {
    return ut_rms_norm(c, ut_transpose(c, in[0], 0, 1), in[1], 1e-6f);
}

static ut_tensor *b_emb(ut_ctx *c, ut_tensor **in) { return ut_embedding(c, in[0], in[1]); }
/* padding_idx 4 of a table of 5 rows with indices below 4: the other rows' gradients */
static ut_tensor *b_emb_pad(ut_ctx *c, ut_tensor **in) { return ut_embedding_pad(c, in[0], in[1], 4); }
static ut_tensor *b_emb_twice(ut_ctx *c, ut_tensor **in) {
    return ut_mul(c, ut_embedding(c, in[0], in[1]), ut_embedding(c, in[0], in[1]));
}

static ut_tensor *b_conv_s1p0(ut_ctx *c, ut_tensor **in) { return ut_conv2d(c, in[0], in[1], in[2], 1, 0); }
static ut_tensor *b_conv_s1p1(ut_ctx *c, ut_tensor **in) { return ut_conv2d(c, in[0], in[1], in[2], 1, 1); }
static ut_tensor *b_conv_s1p2(ut_ctx *c, ut_tensor **in) { return ut_conv2d(c, in[0], in[1], in[2], 1, 2); }
static ut_tensor *b_conv_s2p1_nob(ut_ctx *c, ut_tensor **in) { return ut_conv2d(c, in[0], in[1], NULL, 2, 1); }
static ut_tensor *b_conv_s2p0_nob(ut_ctx *c, ut_tensor **in) { return ut_conv2d(c, in[0], in[1], NULL, 2, 0); }
static ut_tensor *b_conv_relu_s1p0(ut_ctx *c, ut_tensor **in) { return ut_conv2d_relu(c, in[0], in[1], in[2], 1, 0); }
static ut_tensor *b_conv_relu_s1p1(ut_ctx *c, ut_tensor **in) { return ut_conv2d_relu(c, in[0], in[1], in[2], 1, 1); }
static ut_tensor *b_conv_relu_pool_s1p0(ut_ctx *c, ut_tensor **in) {
    return ut_conv2d_relu_maxpool2(c, in[0], in[1], in[2], 1, 0);
}
static ut_tensor *b_conv_relu_pool_s1p1(ut_ctx *c, ut_tensor **in) {
    return ut_conv2d_relu_maxpool2(c, in[0], in[1], in[2], 1, 1);
}
static ut_tensor *b_conv_twice(ut_ctx *c, ut_tensor **in) {
    return ut_mul(c, ut_conv2d(c, in[0], in[1], in[2], 1, 1), ut_conv2d(c, in[0], in[1], in[2], 1, 1));
}

static ut_tensor *b_pool_k2s2(ut_ctx *c, ut_tensor **in) { return ut_max_pool2d(c, in[0], 2, 2); }
static ut_tensor *b_pool_k3s2(ut_ctx *c, ut_tensor **in) { return ut_max_pool2d(c, in[0], 3, 2); }
static ut_tensor *b_pool_k2s1(ut_ctx *c, ut_tensor **in) { return ut_max_pool2d(c, in[0], 2, 1); }

static ut_tensor *b_att1(ut_ctx *c, ut_tensor **in) { return ut_attention(c, in[0], 1); }
static ut_tensor *b_att2(ut_ctx *c, ut_tensor **in) { return ut_attention(c, in[0], 2); }
static ut_tensor *b_att_twice(ut_ctx *c, ut_tensor **in) {
    return ut_add(c, ut_attention(c, in[0], 2), ut_attention(c, in[0], 1));
}

/* attention_masked: a padding mask (B, T) with the last keys of example 0
 * masked as Hugging Face masks them (finfo(float32).min), or an arbitrary
 * additive mask, or none */
static ut_tensor *pad_mask(ut_ctx *c, int64_t B, int64_t T) {
    float *h = calloc((size_t)(B * T), sizeof *h); /* built on the host: the row also runs on a GPU */
    for (int64_t t = T / 2 + 1; t < T; t++) h[t] = -3.4028234663852886e38f;
    ut_tensor *m = ut_tensor_from(c, UT_F32, 2, (int64_t[]){B, T}, h);
    free(h);
    return m;
}
static ut_tensor *b_attm2(ut_ctx *c, ut_tensor **in) {
    return ut_attention_masked(c, in[0], in[1], in[2], pad_mask(c, in[0]->ne[0], in[0]->ne[1]), 2, 0.0f);
}
static ut_tensor *b_attm1_nomask(ut_ctx *c, ut_tensor **in) {
    return ut_attention_masked(c, in[0], in[1], in[2], NULL, 1, 0.0f);
}
static ut_tensor *b_attm_additive(ut_ctx *c, ut_tensor **in) {
    return ut_attention_masked(c, in[0], in[1], in[2], in[3], 2, 0.0f);
}
/* dropout of the probabilities (training mode): the same mask every evaluation */
static ut_tensor *b_attm_dropout(ut_ctx *c, ut_tensor **in) {
    return ut_attention_masked(c, in[0], in[1], in[2], pad_mask(c, in[0]->ne[0], in[0]->ne[1]), 2, 0.3f);
}
/* q, k and v the same tensor, and used again outside: every path adds */
static ut_tensor *b_attm_shared(ut_ctx *c, ut_tensor **in) {
    return ut_add(c, ut_attention_masked(c, in[0], in[0], in[0], pad_mask(c, 2, 5), 2, 0.0f), in[0]);
}
/* cross-attention (keys of another length, their padding masked), causal
 * self-attention with and without padding, causal with dropout */
static ut_tensor *b_attm_cross(ut_ctx *c, ut_tensor **in) {
    return ut_attention_qkv(c, in[0], in[1], in[2], pad_mask(c, in[1]->ne[0], in[1]->ne[1]), 2, false, 0.0f);
}
static ut_tensor *b_attm_causal(ut_ctx *c, ut_tensor **in) {
    return ut_attention_qkv(c, in[0], in[1], in[2], NULL, 2, true, 0.0f);
}
static ut_tensor *b_attm_causal_pad(ut_ctx *c, ut_tensor **in) {
    return ut_attention_qkv(c, in[0], in[1], in[2], pad_mask(c, in[0]->ne[0], in[0]->ne[1]), 2, true, 0.0f);
}
static ut_tensor *b_attm_causal_drop(ut_ctx *c, ut_tensor **in) {
    return ut_attention_qkv(c, in[0], in[1], in[2], NULL, 1, true, 0.3f);
}

/* causal under a padding mask with dropout (GPT-2's classifier in training) */
static ut_tensor *b_attm_causal_pad_drop(ut_ctx *c, ut_tensor **in) {
    return ut_attention_qkv(c, in[0], in[1], in[2], pad_mask(c, in[0]->ne[0], in[0]->ne[1]), 2, true, 0.3f);
}

/* attention_varlen: packed sequences of lengths 3, 1 and 3 (N = 7), or one
 * sequence of all the rows */
static ut_tensor *offsets(ut_ctx *c, int n, const int32_t *at) {
    return ut_tensor_from(c, UT_I32, 1, (int64_t[]){n}, at);
}
static ut_tensor *b_attv3(ut_ctx *c, ut_tensor **in) {
    return ut_attention_varlen(c, in[0], in[1], in[2], offsets(c, 4, (int32_t[]){0, 3, 4, 7}), 2, false, 0.0f);
}
static ut_tensor *b_attv_one(ut_ctx *c, ut_tensor **in) {
    return ut_attention_varlen(c, in[0], in[1], in[2], offsets(c, 2, (int32_t[]){0, (int32_t)in[0]->ne[0]}), 1,
                               false, 0.0f);
}
static ut_tensor *b_attv_dropout(ut_ctx *c, ut_tensor **in) {
    return ut_attention_varlen(c, in[0], in[1], in[2], offsets(c, 4, (int32_t[]){0, 3, 4, 7}), 2, false, 0.3f);
}
static ut_tensor *b_attv_causal(ut_ctx *c, ut_tensor **in) {
    return ut_attention_varlen(c, in[0], in[1], in[2], offsets(c, 4, (int32_t[]){0, 3, 4, 7}), 2, true, 0.0f);
}
static ut_tensor *b_attv_causal_drop(ut_ctx *c, ut_tensor **in) {
    return ut_attention_varlen(c, in[0], in[1], in[2], offsets(c, 3, (int32_t[]){0, 4, 7}), 1, true, 0.3f);
}
static ut_tensor *b_attv_shared(ut_ctx *c, ut_tensor **in) {
    ut_tensor *o = offsets(c, 3, (int32_t[]){0, 2, 5});
    return ut_add(c, ut_attention_varlen(c, in[0], in[0], in[0], o, 2, false, 0.0f), in[0]);
}

const gc_row gc_rows_nn[] = {
    {"layernorm 2-D", 3, {{2, {4, 6}}, {1, {6}}, {1, {6}}}, b_ln},
    {"layernorm 3-D", 3, {{3, {2, 3, 8}}, {1, {8}}, {1, {8}}}, b_ln},
    {"layernorm strided x", 3, {{2, {5, 3}}, {1, {5}}, {1, {5}}}, b_ln_transposed},
    {"layernorm twice", 3, {{2, {3, 5}}, {1, {5}}, {1, {5}}}, b_ln_twice},
    {"rms_norm 2-D", 2, {{2, {4, 6}}, {1, {6}}}, b_rms},
    {"rms_norm 3-D", 2, {{3, {2, 3, 8}}, {1, {8}}}, b_rms},
    {"rms_norm strided x", 2, {{2, {5, 3}}, {1, {5}}}, b_rms_transposed},
    {"rms_norm twice", 2, {{2, {3, 5}}, {1, {5}}}, b_rms_twice},
    {"embedding 2-D idx", 2, {{2, {2, 3}, GC_INDEX, 5}, {2, {5, 4}}}, b_emb},
    {"embedding repeats", 2, {{1, {9}, GC_INDEX, 3}, {2, {3, 4}}}, b_emb},
    {"embedding padding_idx", 2, {{2, {2, 3}, GC_INDEX, 4}, {2, {5, 4}}}, b_emb_pad},
    {"embedding twice", 2, {{2, {2, 4}, GC_INDEX, 4}, {2, {4, 3}}}, b_emb_twice},
    {"conv2d s1 p0 bias", 3, {{4, {2, 3, 5, 5}}, {4, {4, 3, 3, 3}}, {1, {4}}}, b_conv_s1p0},
    /* 8 channels and more: Winograd F(2x2, 3x3); odd outputs (5x4 and 3x3) cut the last tiles */
    {"conv2d winograd p0", 3, {{4, {2, 8, 7, 6}}, {4, {9, 8, 3, 3}}, {1, {9}}}, b_conv_s1p0},
    {"conv2d winograd p1", 3, {{4, {1, 8, 5, 4}}, {4, {8, 8, 3, 3}}, {1, {8}}}, b_conv_s1p1},
    {"conv2d winograd p2", 3, {{4, {5, 8, 1, 3}}, {4, {8, 8, 3, 3}}, {1, {8}}}, b_conv_s1p2},
    {"conv2d s1 p1 bias", 3, {{4, {2, 2, 4, 5}}, {4, {3, 2, 3, 3}}, {1, {3}}}, b_conv_s1p1},
    /* ut_conv2d_relu: the ReLU in the convolution's own kernels (im2col, Winograd);
     * few outputs, so that none lies within eps of the kink (test_nn_ops
     * compares larger ones with relu(conv2d) bit for bit) */
    {"conv2d relu im2col", 3, {{4, {2, 3, 5, 5}}, {4, {4, 3, 3, 3}}, {1, {4}}}, b_conv_relu_s1p0},
    {"conv2d relu winograd", 3, {{4, {1, 8, 2, 3}}, {4, {9, 8, 3, 3}}, {1, {9}}}, b_conv_relu_s1p1},
    /* ut_conv2d_relu_maxpool2: the 2x2 max pooling fused too (odd sizes: a row or column no window takes) */
    {"conv2d relu pool im2col", 3, {{4, {1, 3, 6, 5}}, {4, {4, 3, 3, 3}}, {1, {4}}}, b_conv_relu_pool_s1p0},
    {"conv2d relu pool winograd", 3, {{4, {1, 8, 5, 4}}, {4, {8, 8, 3, 3}}, {1, {8}}}, b_conv_relu_pool_s1p1},
    /* stride-1 fast paths: padding wider than the input, so some kernel
     * columns have no valid output column at all (odd sizes throughout) */
    {"conv2d s1 p2 narrow", 3, {{4, {2, 3, 3, 1}}, {4, {2, 3, 5, 3}}, {1, {2}}}, b_conv_s1p2},
    {"conv2d s1 p1 odd", 3, {{4, {3, 1, 7, 5}}, {4, {3, 1, 3, 3}}, {1, {3}}}, b_conv_s1p1},
    {"conv2d s2 p1 no bias", 2, {{4, {2, 3, 5, 6}}, {4, {2, 3, 3, 3}}}, b_conv_s2p1_nob},
    {"conv2d s2 p0 2x3 kernel", 2, {{4, {1, 2, 6, 7}}, {4, {3, 2, 2, 3}}}, b_conv_s2p0_nob},
    /* more images than dw chunks: chunks of several images */
    {"conv2d batch 18", 3, {{4, {18, 2, 3, 3}}, {4, {2, 2, 2, 2}}, {1, {2}}}, b_conv_s1p0},
    {"conv2d twice", 3, {{4, {1, 2, 4, 4}}, {4, {2, 2, 3, 3}}, {1, {2}}}, b_conv_twice},
    /* 8+ input channels: forward and input gradient go through oneDNN (conv.c) */
    {"conv2d s1 p1 8 channels", 3, {{4, {2, 8, 5, 4}}, {4, {3, 8, 3, 3}}, {1, {3}}}, b_conv_s1p1},
    {"conv2d s2 p1 9 channels", 2, {{4, {2, 9, 5, 6}}, {4, {10, 9, 3, 3}}}, b_conv_s2p1_nob},
    {"conv2d s1 p0 8 channels twice", 3, {{4, {1, 8, 4, 4}}, {4, {2, 8, 3, 3}}, {1, {2}}}, b_conv_twice},
    {"max_pool2d k2 s2", 1, {{4, {2, 3, 4, 4}, GC_DISTINCT}}, b_pool_k2s2},
    {"max_pool2d k3 s2 overlap", 1, {{4, {1, 2, 7, 7}, GC_DISTINCT}}, b_pool_k3s2},
    {"max_pool2d k2 s1 overlap", 1, {{4, {1, 2, 4, 5}, GC_DISTINCT}}, b_pool_k2s1},
    {"max_pool2d floor", 1, {{4, {2, 2, 5, 7}, GC_DISTINCT}}, b_pool_k2s2},
    {"attention T=1 NH=1", 1, {{3, {2, 1, 6}}}, b_att1},
    {"attention T=5 NH=1", 1, {{3, {2, 5, 9}}}, b_att1},
    {"attention T=5 NH=2", 1, {{3, {2, 5, 12}}}, b_att2},
    {"attention T=1 NH=2", 1, {{3, {1, 1, 12}}}, b_att2},
    {"attention T=4 NH=2 hs=4", 1, {{3, {1, 4, 24}}}, b_att2},
    {"attention twice", 1, {{3, {1, 5, 12}}}, b_att_twice},
    {"attention_masked padding NH=2", 3, {{3, {2, 5, 8}}, {3, {2, 5, 8}}, {3, {2, 5, 8}}}, b_attm2},
    {"attention_masked no mask NH=1", 3, {{3, {2, 4, 6}}, {3, {2, 4, 6}}, {3, {2, 4, 6}}}, b_attm1_nomask},
    {"attention_masked T=1", 3, {{3, {2, 1, 4}}, {3, {2, 1, 4}}, {3, {2, 1, 4}}}, b_attm2},
    {"attention_masked additive", 4,
     {{3, {2, 3, 4}}, {3, {2, 3, 4}}, {3, {2, 3, 4}}, {2, {2, 3}, GC_CONST}}, b_attm_additive},
    {"attention_masked q = k = v", 1, {{3, {2, 5, 8}}}, b_attm_shared},
    {"attention_masked dropout 0.3", 3, {{3, {2, 5, 8}}, {3, {2, 5, 8}}, {3, {2, 5, 8}}}, b_attm_dropout,
     .training = true},
    {"attention_masked causal T=1", 3, {{3, {2, 1, 4}}, {3, {2, 1, 4}}, {3, {2, 1, 4}}}, b_attm_causal_pad},
    {"attention_masked causal padding dropout 0.3", 3, {{3, {2, 5, 8}}, {3, {2, 5, 8}}, {3, {2, 5, 8}}},
     b_attm_causal_pad_drop, .training = true},
    {"attention_masked dropout eval", 3, {{3, {2, 4, 8}}, {3, {2, 4, 8}}, {3, {2, 4, 8}}}, b_attm_dropout},
    {"attention_masked cross Tq=3 Tk=5", 3, {{3, {2, 3, 8}}, {3, {2, 5, 8}}, {3, {2, 5, 8}}}, b_attm_cross},
    {"attention_masked cross Tq=6 Tk=2", 3, {{3, {2, 6, 4}}, {3, {2, 2, 4}}, {3, {2, 2, 4}}}, b_attm_cross},
    {"attention_masked causal", 3, {{3, {2, 5, 8}}, {3, {2, 5, 8}}, {3, {2, 5, 8}}}, b_attm_causal},
    {"attention_masked causal + padding", 3, {{3, {2, 5, 8}}, {3, {2, 5, 8}}, {3, {2, 5, 8}}}, b_attm_causal_pad},
    {"attention_masked causal dropout", 3, {{3, {2, 4, 6}}, {3, {2, 4, 6}}, {3, {2, 4, 6}}}, b_attm_causal_drop,
     .training = true},
    {"attention_varlen lengths 3 1 3 NH=2", 3, {{2, {7, 8}}, {2, {7, 8}}, {2, {7, 8}}}, b_attv3},
    {"attention_varlen one sequence NH=1", 3, {{2, {5, 6}}, {2, {5, 6}}, {2, {5, 6}}}, b_attv_one},
    {"attention_varlen one row", 3, {{2, {1, 4}}, {2, {1, 4}}, {2, {1, 4}}}, b_attv_one},
    {"attention_varlen dropout 0.3", 3, {{2, {7, 8}}, {2, {7, 8}}, {2, {7, 8}}}, b_attv_dropout,
     .training = true},
    {"attention_varlen causal lengths 3 1 3", 3, {{2, {7, 8}}, {2, {7, 8}}, {2, {7, 8}}}, b_attv_causal},
    {"attention_varlen causal dropout", 3, {{2, {7, 6}}, {2, {7, 6}}, {2, {7, 6}}}, b_attv_causal_drop,
     .training = true},
    {"attention_varlen q = k = v", 1, {{2, {5, 8}}}, b_attv_shared},
};
const int gc_nrows_nn = sizeof gc_rows_nn / sizeof gc_rows_nn[0];
