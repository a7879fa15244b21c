/* The CUDA backend against the CPU backend, op by op: every gradcheck row
 * (tests/unit/gradcheck_*.c) is built twice from the same inputs, on a CPU
 * context and on a CUDA context, and the output and every input's gradient
 * of L = sum(out * R) must agree within float32 tolerance; then larger
 * shapes of the ops GPT-2, BERT and the CNN use, two same-seed runs to the
 * bit, and device memory a backward leaves. Without a GPU (or a build
 * without the CUDA backend) every test skips with the reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/backend/backend.h"
#include "../../src/backend/cuda/attention.h"
#include "../../src/backend/cuda/cudnn_attn.h"
#include "../../src/backend/cuda/cudnn_conv.h"
#include "devcompare.h"
#include "test.h"
#include "utrain/base.h"
#include "utrain/nn.h"
#include "utrain/ops.h"
#include "utrain/optim.h"
#include "utrain/tensor.h"

#define GC_FAMILIES(X) X(core) X(unary) X(loss) X(nn)
#define DECLARE(f) extern const gc_row gc_rows_##f[]; extern const int gc_nrows_##f;
GC_FAMILIES(DECLARE)

/* fp32 on both sides; the products' summation orders differ (OpenBLAS,
 * cuBLASLt), so not to the bit */
#define TOL 2e-5

static char skip_why[256];
static bool have_gpu(void) { return ut_backend_check(UT_CUDA, skip_why, sizeof skip_why) == 0; }

/* UT_GPU_TEST_ROWS=text: only the rows whose name holds text (for running
 * a few under compute-sanitizer); UT_GPU_TEST_SKIP=text: not those (make
 * test-emu leaves out the longest sequences, slow on the CUDA emulator) */
static bool selected(const gc_row *row) {
    const char *f = getenv("UT_GPU_TEST_ROWS"), *x = getenv("UT_GPU_TEST_SKIP");
    if (x && *x && strstr(row->name, x)) return false;
    return !f || !*f || strstr(row->name, f);
}

static void run_family(const char *fam, const gc_row *rows, int n) {
    for (int i = 0; i < n; i++) {
        if (!selected(&rows[i])) continue;
        if (dc_compare_row(fam, &rows[i], UT_CUDA, TOL)) t_failed++;
        else t_passed++;
        fflush(stdout);
    }
}

/* ---- larger shapes: the sizes of GPT-2 124M's ops, scaled down in batch ---- */
static ut_tensor *b_ln(ut_ctx *c, ut_tensor **in) { return ut_layernorm(c, in[0], in[1], in[2], 1e-5f); }
static ut_tensor *b_rms(ut_ctx *c, ut_tensor **in) { return ut_rms_norm(c, in[0], in[1], 1e-6f); }
static ut_tensor *b_mlp(ut_ctx *c, ut_tensor **in) {
    return ut_linear(c, ut_gelu(c, ut_linear(c, in[0], in[1], in[2])), in[3], NULL);
}
/* the same MLP with its first linear and GELU one op (ut_linear_gelu:
 * cuBLASLt's GELU epilogue under autocast where the output's rows allow) */
static ut_tensor *b_mlp_fused(ut_ctx *c, ut_tensor **in) {
    return ut_linear(c, ut_linear_gelu(c, in[0], in[1], in[2]), in[3], NULL);
}
static ut_tensor *b_lin_gelu(ut_ctx *c, ut_tensor **in) { return ut_linear_gelu(c, in[0], in[1], in[2]); }
static ut_tensor *b_lin_gelu_nob(ut_ctx *c, ut_tensor **in) { return ut_linear_gelu(c, in[0], in[1], NULL); }
static ut_tensor *b_attn(ut_ctx *c, ut_tensor **in) { return ut_attention(c, in[0], 12); }
static ut_tensor *b_xent(ut_ctx *c, ut_tensor **in) {
    int64_t ne[1] = {1};
    return ut_reshape(c, ut_cross_entropy(c, in[0], in[1], -100), 1, ne);
}
static ut_tensor *b_emb(ut_ctx *c, ut_tensor **in) { return ut_embedding(c, in[0], in[1]); }
static ut_tensor *b_softmax(ut_ctx *c, ut_tensor **in) { return ut_softmax(c, in[0]); }
static ut_tensor *b_conv(ut_ctx *c, ut_tensor **in) {
    return ut_max_pool2d(c, ut_relu(c, ut_conv2d(c, in[0], in[1], in[2], 1, 1)), 2, 2);
}
static ut_tensor *b_bmm(ut_ctx *c, ut_tensor **in) { return ut_matmul(c, in[0], in[1]); }
/* adds and products with a product's output: under autocast it is 16-bit,
 * so the binary kernels mix 16-bit and float32 tensors (and their
 * gradients), broadcast or not, and x * x takes both terms of a 16-bit
 * gradient */
static ut_tensor *b_resid(ut_ctx *c, ut_tensor **in) {
    return ut_add(c, in[0], ut_linear(c, in[0], in[1], NULL));
}
static ut_tensor *b_lin_bias(ut_ctx *c, ut_tensor **in) {
    return ut_add(c, ut_linear(c, in[0], in[1], NULL), in[2]);
}
static ut_tensor *b_linear(ut_ctx *c, ut_tensor **in) { return ut_linear(c, in[0], in[1], in[2]); }
static ut_tensor *b_lin_scale(ut_ctx *c, ut_tensor **in) {
    return ut_mul(c, ut_linear(c, in[0], in[1], NULL), in[2]);
}
static ut_tensor *b_lin_square(ut_ctx *c, ut_tensor **in) {
    ut_tensor *l = ut_linear(c, in[0], in[1], NULL);
    return ut_add(c, ut_mul(c, l, l), ut_mul(c, in[0], l));
}
/* layernorm of a product's output: under autocast its input is 16-bit too */
static ut_tensor *b_lin_ln(ut_ctx *c, ut_tensor **in) {
    return ut_layernorm(c, ut_linear(c, in[0], in[1], NULL), in[2], in[3], 1e-5f);
}
/* dropout of a product's output joining the residual stream (BERT's
 * hidden-state dropout): under autocast the dropout reads and writes 16
 * bits; 3 x 77 leaves a tail past the groups of four */
static ut_tensor *b_lin_drop(ut_ctx *c, ut_tensor **in) {
    return ut_add(c, in[0], ut_dropout(c, ut_linear(c, in[0], in[1], NULL), 0.1f));
}

/* cross-entropy with label smoothing over a product's logits (16-bit under
 * autocast), rows of a warp (V 1000) and of a block (V 3000) */
static ut_tensor *b_lin_xent_smooth(ut_ctx *c, ut_tensor **in) {
    int64_t ne[1] = {1};
    return ut_reshape(c, ut_cross_entropy_smoothed(c, ut_linear(c, in[0], in[1], NULL), in[2], -100, 0.1f), 1, ne);
}

/* ut_linear_cross_entropy (matmul.c): the logits in the products' rows,
 * the gradient written over them; with a bias (in[3]) or without, and with
 * the context's label smoothing 0.1 */
static ut_tensor *b_lin_ce(ut_ctx *c, ut_tensor **in) {
    int64_t ne[1] = {1};
    return ut_reshape(c, ut_linear_cross_entropy(c, in[0], in[1], in[3], in[2], -100), 1, ne);
}
static ut_tensor *b_lin_ce_smooth(ut_ctx *c, ut_tensor **in) {
    float old = ut_ctx_set_label_smoothing(c, 0.1f);
    ut_tensor *r = b_lin_ce(c, in);
    ut_ctx_set_label_smoothing(c, old);
    return r;
}

static const gc_row big_rows[] = {
    {"layernorm 512 x 768", 3, {{2, {512, 768}}, {1, {768}}, {1, {768}}}, b_ln},
    {"mlp 256 x 768 -> 3072 -> 768", 4, {{2, {256, 768}}, {2, {3072, 768}}, {1, {3072}}, {2, {768, 3072}}}, b_mlp},
    {"causal attention 2 x 128 x 768, 12 heads", 1, {{3, {2, 128, 2304}}}, b_attn},
    {"cross-entropy 64 x 50257", 2, {{2, {64, 50257}}, {1, {64}, GC_INDEX, 50257}}, b_xent},
    {"embedding 50257 x 768, 512 ids", 2, {{1, {512}, GC_INDEX, 50257}, {2, {50257, 768}}}, b_emb},
    {"softmax 256 x 1024", 1, {{2, {256, 1024}}}, b_softmax},
    {"conv 3x3 + relu + pool, 8 x 16 x 28 x 28", 3, {{4, {8, 16, 28, 28}}, {4, {32, 16, 3, 3}}, {1, {32}}}, b_conv},
    {"batched matmul 24 x 128 x 64 @ 64 x 128", 2, {{3, {24, 128, 64}}, {3, {24, 64, 128}}}, b_bmm},
    /* the fused attention's tiles (64 x 64): a long sequence, T not a multiple
     * of 64, heads of 16 and 128, and rows not a multiple of 4 floats */
    {"causal attention 1 x 1024 x 768, 12 heads", 1, {{3, {1, 1024, 2304}}}, b_attn},
    {"causal attention 3 x 77 x 768, 12 heads", 1, {{3, {3, 77, 2304}}}, b_attn},
    {"causal attention 3 x 77 x 192, 12 heads of 16", 1, {{3, {3, 77, 576}}}, b_attn},
    {"causal attention 2 x 70 x 120, 12 heads of 10", 1, {{3, {2, 70, 360}}}, b_attn},
    {"causal attention 1 x 130 x 1536, 12 heads of 128", 1, {{3, {1, 130, 4608}}}, b_attn},
    /* rms_norm (T5): a warp per row (C <= 1024), then a block per row with
     * rows that fill no whole warp block and three dw chunks */
    {"rms_norm 512 x 768", 2, {{2, {512, 768}}, {1, {768}}}, b_rms},
    {"rms_norm 301 x 4100", 2, {{2, {301, 4100}}, {1, {4100}}}, b_rms},
    /* a warp per row (768) and a block per row (2500) */
    {"linear -> layernorm 256 x 768", 4, {{2, {256, 768}}, {2, {768, 768}}, {1, {768}}, {1, {768}}}, b_lin_ln},
    {"linear -> layernorm 64 x 2500", 4, {{2, {64, 512}}, {2, {2500, 512}}, {1, {2500}}, {1, {2500}}}, b_lin_ln},
    {"x + linear(x) 256 x 768", 2, {{2, {256, 768}}, {2, {768, 768}}}, b_resid},
    {"linear(x) + bias 256 x 768", 3, {{2, {256, 512}}, {2, {768, 512}}, {1, {768}}}, b_lin_bias},
    /* 1001 outputs: rows not 16 bytes apart, so the products run on aligned copies (matmul.c, ld16) */
    {"linear(x) + bias 40 x 1001", 3, {{2, {40, 64}}, {2, {1001, 64}}, {1, {1001}}}, b_lin_bias},
    {"linear(x) * scale 256 x 768", 3, {{2, {256, 512}}, {2, {768, 512}}, {1, {768}}}, b_lin_scale},
    {"l * l + x * l, l = linear(x), 128 x 256", 2, {{2, {128, 256}}, {2, {256, 256}}}, b_lin_square},
    {"x + dropout(linear(x)) 256 x 768, p 0.1", 2, {{2, {256, 768}}, {2, {768, 768}}}, b_lin_drop, .training = true},
    {"x + dropout(linear(x)) 3 x 77, p 0.1", 2, {{2, {3, 77}}, {2, {77, 77}}}, b_lin_drop, .training = true},
    {"cross-entropy of linear 48 x 1000, label smoothing 0.1", 3,
     {{2, {48, 64}}, {2, {1000, 64}}, {1, {48}, GC_INDEX, 1000}}, b_lin_xent_smooth},
    {"cross-entropy of linear 16 x 3000, label smoothing 0.1", 3,
     {{2, {16, 64}}, {2, {3000, 64}}, {1, {16}, GC_INDEX, 3000}}, b_lin_xent_smooth},
    /* wide outputs not a multiple of 128: under autocast the products run
     * padded to the next one (matmul.c, padded_oc), with a bias and into a
     * cross-entropy as GPT-2's head */
    {"linear(x) + bias 24 x 4100", 3, {{2, {24, 64}}, {2, {4100, 64}}, {1, {4100}}}, b_lin_bias},
    {"cross-entropy of linear 8 x 5001, label smoothing 0.1", 3,
     {{2, {8, 64}}, {2, {5001, 64}}, {1, {8}, GC_INDEX, 5001}}, b_lin_xent_smooth},
    /* linear's bias gradient over 1100 rows: 18 blocks of rows (flat.cu's
     * column sums), more than the 8 lanes that add them up; 96 and 97
     * columns take the 16-byte and the one-column-a-thread sums */
    {"linear with bias 1100 x 96", 3, {{2, {1100, 32}}, {2, {96, 32}}, {1, {96}}}, b_linear},
    {"linear with bias 1100 x 97", 3, {{2, {1100, 32}}, {2, {97, 32}}, {1, {97}}}, b_linear},
    /* norms' weight gradients over 1200 rows: 10 chunks of 128, more than
     * the 8 lanes that add the chunks' sums (norm.cu) */
    {"layernorm 1200 x 40", 3, {{2, {1200, 40}}, {1, {40}}, {1, {40}}}, b_ln},
    {"rms_norm 1200 x 40", 2, {{2, {1200, 40}}, {1, {40}}}, b_rms},
    /* ut_linear_gelu (matmul.c): GPT-2's MLP; a bias-less one (the
     * epilogue without its bias); 1001 outputs (rows not a multiple of 8:
     * the product, then utrain's GELU kernel) and 4100 (padded: the same) */
    {"mlp fused 256 x 768 -> 3072 -> 768", 4, {{2, {256, 768}}, {2, {3072, 768}}, {1, {3072}}, {2, {768, 3072}}},
     b_mlp_fused},
    {"linear gelu no bias 64 x 768", 2, {{2, {64, 256}}, {2, {768, 256}}}, b_lin_gelu_nob},
    {"linear gelu 40 x 1001", 3, {{2, {40, 64}}, {2, {1001, 64}}, {1, {1001}}}, b_lin_gelu},
    {"linear gelu 24 x 4100", 3, {{2, {24, 64}}, {2, {4100, 64}}, {1, {4100}}}, b_lin_gelu},
    /* ut_linear_cross_entropy: rows of a warp (1000); 1001 columns (rows
     * ld16 apart, the columns past V never read); a block per row (3000)
     * with a bias; 5001 padded to 5120 as GPT-2's head. The last row, with
     * a bias over 1001 columns (their sums taken over the ld16 columns),
     * is not among the autocast rows: these logits are large (C 64 of
     * normal values), and the GPU adds the bias in float32 where the CPU
     * adds it rounded, so a bf16 logit's rounding can move by a unit (1/8
     * at 16) and the softmax with it */
    {"linear cross-entropy 48 x 1000", 3, {{2, {48, 64}}, {2, {1000, 64}}, {1, {48}, GC_INDEX, 1000}}, b_lin_ce},
    {"linear cross-entropy 40 x 1001, label smoothing 0.1", 3,
     {{2, {40, 64}}, {2, {1001, 64}}, {1, {40}, GC_INDEX, 1001}}, b_lin_ce_smooth},
    {"linear cross-entropy 16 x 3000", 4, {{2, {16, 64}}, {2, {3000, 64}}, {1, {16}, GC_INDEX, 3000}, {1, {3000}}},
     b_lin_ce},
    {"linear cross-entropy 8 x 5001 no bias", 3, {{2, {8, 64}}, {2, {5001, 64}}, {1, {8}, GC_INDEX, 5001}},
     b_lin_ce},
    {"linear cross-entropy with bias 40 x 1001", 4,
     {{2, {40, 64}}, {2, {1001, 64}}, {1, {40}, GC_INDEX, 1001}, {1, {1001}}}, b_lin_ce},
};

static void same_bits(const gc_row *row);

/* ---- masked attention (ATTENTION_MASKED) at BERT's and BART's sizes ---- */

/* a padding mask (B, T): example b's last b T / 4 + 1 keys masked as
 * Hugging Face masks them (finfo(float32).min); with none, the last
 * example's every key at -inf (a row of padding only under autocast, which
 * attends nowhere) */
static ut_tensor *key_mask(ut_ctx *c, int64_t B, int64_t T, bool none) {
    float *h = calloc((size_t)(B * T), sizeof *h);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = T - 1 - b * T / 4; t < T; t++) h[b * T + t] = -3.4028234663852886e38f;
    if (none)
        for (int64_t t = 0; t < T; t++) h[(B - 1) * T + t] = -INFINITY;
    ut_tensor *m = ut_tensor_from(c, UT_F32, 2, (int64_t[]){B, T}, h);
    free(h);
    return m;
}
static ut_tensor *b_mha_pad(ut_ctx *c, ut_tensor **in) {
    return ut_attention_masked(c, in[0], in[1], in[2], key_mask(c, in[1]->ne[0], in[1]->ne[1], false), 12, 0.0f);
}
static ut_tensor *b_mha_pad_drop(ut_ctx *c, ut_tensor **in) {
    return ut_attention_masked(c, in[0], in[1], in[2], key_mask(c, in[1]->ne[0], in[1]->ne[1], false), 12, 0.1f);
}
static ut_tensor *b_mha_none(ut_ctx *c, ut_tensor **in) {
    return ut_attention_masked(c, in[0], in[1], in[2], key_mask(c, in[1]->ne[0], in[1]->ne[1], true), 12, 0.0f);
}
static ut_tensor *b_mha_drop(ut_ctx *c, ut_tensor **in) {
    return ut_attention_masked(c, in[0], in[1], in[2], NULL, 12, 0.1f);
}
static ut_tensor *b_mha_causal_pad_drop(ut_ctx *c, ut_tensor **in) {
    return ut_attention_qkv(c, in[0], in[1], in[2], key_mask(c, in[1]->ne[0], in[1]->ne[1], false), 12, true,
                            0.1f);
}
/* heads [4, 8) of 12 (a tensor-parallel rank's part): its dropout draws are
 * the whole attention's draws of those heads */
static ut_tensor *b_mha_part_drop(ut_ctx *c, ut_tensor **in) {
    return ut_attention_qkv_heads(c, in[0], in[1], in[2], key_mask(c, in[1]->ne[0], in[1]->ne[1], false), 4, false,
                                  0.1f, 4, 12);
}

/* ATTENTION_VARLEN (unpadded BERT, packed BART): sequences of lengths 37,
 * 128, 5, 64, 90, 1 and 70 (N = 395), tiles holding several of them */
static ut_tensor *seq_offsets(ut_ctx *c) {
    int32_t off[8] = {0, 37, 165, 170, 234, 324, 325, 395};
    return ut_tensor_from(c, UT_I32, 1, (int64_t[]){8}, off);
}
static ut_tensor *b_var_drop(ut_ctx *c, ut_tensor **in) {
    return ut_attention_varlen(c, in[0], in[1], in[2], seq_offsets(c), 12, false, 0.1f);
}
/* heads of 64, six of them (the CUDA emulator runs these rows in every make test) */
static ut_tensor *b_var6(ut_ctx *c, ut_tensor **in) {
    return ut_attention_varlen(c, in[0], in[1], in[2], seq_offsets(c), 6, false, 0.0f);
}
static ut_tensor *b_var6_drop(ut_ctx *c, ut_tensor **in) {
    return ut_attention_varlen(c, in[0], in[1], in[2], seq_offsets(c), 6, false, 0.1f);
}
static ut_tensor *b_var_causal_drop(ut_ctx *c, ut_tensor **in) {
    return ut_attention_varlen(c, in[0], in[1], in[2], seq_offsets(c), 12, true, 0.1f);
}
static ut_tensor *b_var_part_drop(ut_ctx *c, ut_tensor **in) {
    return ut_attention_varlen_heads(c, in[0], in[1], in[2], seq_offsets(c), 4, true, 0.1f, 4, 12);
}

#define QKV3(B, Tq, Tk, C) {{3, {B, Tq, C}}, {3, {B, Tk, C}}, {3, {B, Tk, C}}}
#define QKV2(N, C) {{2, {N, C}}, {2, {N, C}}, {2, {N, C}}}
static const gc_row masked_rows[] = {
    {"masked attention 2 x 128 x 768, 12 heads, padding", 3, QKV3(2, 128, 128, 768), b_mha_pad},
    {"masked attention 2 x 128 x 768, 12 heads, padding, dropout 0.1", 3, QKV3(2, 128, 128, 768), b_mha_pad_drop,
     .training = true},
    {"cross-attention 2 x 77 from 130 x 768, 12 heads, padded keys", 3, QKV3(2, 77, 130, 768), b_mha_pad},
    {"masked attention 3 x 77 x 192, 12 heads of 16, one example all -inf", 3, QKV3(3, 77, 77, 192), b_mha_none},
    {"causal masked attention 2 x 70 x 120, 12 heads of 10, padding, dropout 0.1", 3, QKV3(2, 70, 70, 120),
     b_mha_causal_pad_drop, .training = true},
    {"masked attention 1 x 130 x 1536, 12 heads of 128, dropout 0.1", 3, QKV3(1, 130, 130, 1536), b_mha_drop,
     .training = true},
    {"masked attention heads 4..7 of 12, 2 x 100 x 256, dropout 0.1", 3, QKV3(2, 100, 100, 256), b_mha_part_drop,
     .training = true},
    {"packed-sequence attention 395 x 384, 6 heads", 3, QKV2(395, 384), b_var6},
    {"packed-sequence attention 395 x 384, 6 heads, dropout 0.1", 3, QKV2(395, 384), b_var6_drop,
     .training = true},
    {"packed-sequence attention 395 x 120, 12 heads of 10, causal, dropout 0.1", 3, QKV2(395, 120), b_var_causal_drop,
     .training = true},
    {"packed-sequence attention 395 x 1536, 12 heads of 128, dropout 0.1", 3, QKV2(395, 1536), b_var_drop,
     .training = true},
    {"packed-sequence attention heads 4..7 of 12, 395 x 256, causal, dropout 0.1", 3, QKV2(395, 256), b_var_part_drop,
     .training = true},
    /* k and v constants: only the dq kernel runs */
    {"masked attention 2 x 64 x 768, gradient of q only, dropout 0.1", 3,
     {{3, {2, 64, 768}}, {3, {2, 64, 768}, GC_CONST}, {3, {2, 64, 768}, GC_CONST}}, b_mha_pad_drop,
     .training = true},
    {"masked attention 3 x 77 x 768, 12 heads, one example all -inf", 3, QKV3(3, 77, 77, 768), b_mha_none},
};
#undef QKV3
#undef QKV2
#define N_MASKED (int)(sizeof masked_rows / sizeof masked_rows[0])

/* ATTENTION_MASKED and ATTENTION_VARLEN at real sizes: the fused kernels
 * against the CPU (fp32, and under bf16 and fp16 autocast on the tensor
 * cores, and bf16 on the float32 kernels), the materialised paths too
 * (UT_CUDA_ATTN=unfused, with the small rows of the nn family), the same
 * bits twice, and bad offsets reported through the device error flag */
static void test_masked_attention(void) {
    for (int u = 0; u < 2; u++) {
        if (u) setenv("UT_CUDA_ATTN", "unfused", 1);
        for (int i = 0; i < N_MASKED; i++) {
            if (!selected(&masked_rows[i])) continue;
            if (dc_compare_row(u ? "unfused" : "fused", &masked_rows[i], UT_CUDA, 1e-4)) t_checks_failed++;
            fflush(stdout);
        }
        if (u)
            for (int i = 0; i < gc_nrows_nn; i++)
                if ((strstr(gc_rows_nn[i].name, "attention_masked") ||
                     strstr(gc_rows_nn[i].name, "attention_varlen")) &&
                    selected(&gc_rows_nn[i]) &&
                    dc_compare_row("unfused", &gc_rows_nn[i], UT_CUDA, TOL))
                    t_checks_failed++;
        unsetenv("UT_CUDA_ATTN");
    }
    /* under autocast, head size 64: the tensor-core kernels in bf16 (every
     * kind of mask) and fp16 (dropout, padded and packed), then the float32
     * ones (UT_CUDA_ATTN=fp32) */
    static const struct {
        ut_dtype dt;
        const char *path, *fam;
        int rows[8], n;
    } passes[] = {
        {UT_BF16, NULL, "tensor cores bf16", {0, 1, 2, 6, 7, 8, 11, 13}, 8},
        {UT_F16, NULL, "tensor cores f16", {1, 8}, 2},
        {UT_BF16, "wmma", "tensor cores wmma bf16", {1, 2, 8, 11}, 4},
        {UT_BF16, "fp32", "fused fp32 bf16", {0, 1, 2}, 3},
    };
    for (size_t p = 0; p < sizeof passes / sizeof passes[0]; p++) {
        if (passes[p].path) setenv("UT_CUDA_ATTN", passes[p].path, 1);
        dc_autocast = passes[p].dt;
        for (int i = 0; i < passes[p].n; i++)
            if (selected(&masked_rows[passes[p].rows[i]]) &&
                dc_compare_row(passes[p].fam, &masked_rows[passes[p].rows[i]], UT_CUDA, 1e-2))
                t_checks_failed++;
        unsetenv("UT_CUDA_ATTN");
    }
    const int twice[] = {1, 2, 8, 11};
    dc_autocast = UT_BF16;
    for (int i = 0; i < 2; i++)
        if (selected(&masked_rows[twice[i * 2]])) same_bits(&masked_rows[twice[i * 2]]);
    dc_autocast = UT_F32;
    for (int i = 0; i < 4; i++)
        if (selected(&masked_rows[twice[i]])) same_bits(&masked_rows[twice[i]]);
    /* offsets that end before N: the fused forward's plan raises the error
     * flag, the read reports it, and a good call reads fine afterwards */
    for (int good = 0; good < 2; good++) {
        ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_CUDA});
        int32_t off[3] = {0, 3, good ? 8 : 7};
        ut_tensor *x = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){8, 64});
        ut_tensor *o = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){3}, off);
        ut_tensor *y = ut_attention_varlen(ctx, x, x, x, o, 2, false, 0.0f);
        float v[8 * 64];
        int rc = y ? ut_tensor_get(y, v, sizeof v) : -1;
        const char *err = ut_ctx_error(ctx);
        if (good) CHECK(rc == 0, "good offsets after bad ones: %s", err ? err : "");
        else CHECK(rc == -1 && err && strstr(err, "attention_varlen"), "offsets ending at 7 of 8 rows: %s",
                   err ? err : "(read fine)");
        ut_ctx_free(ctx);
    }
}

static void test_large_shapes(void) {
    for (size_t i = 0; i < sizeof big_rows / sizeof big_rows[0]; i++) {
        if (!selected(&big_rows[i])) continue;
        if (dc_compare_row("large", &big_rows[i], UT_CUDA, 1e-4)) t_failed++;
        else t_passed++;
        fflush(stdout);
    }
}

/* Two runs of a row on the GPU give the same bits (no atomics in
 * reductions, one algorithm per product), under the autocast dc_autocast
 * says. */
static void same_bits_env(const gc_row *row, const char *var, const char *va, const char *vb);
static void same_bits(const gc_row *row) { same_bits_env(row, NULL, NULL, NULL); }

/* the same with var=va for the first run and var=vb for the second (NULL:
 * unset), var unset afterwards */
static void set_or_unset(const char *var, const char *v) {
    if (!var) return;
    if (v) setenv(var, v, 1);
    else unsetenv(var);
}
/* row's inputs in host (malloc'd), drawn from r seeded 7; r goes on */
static void row_inputs(const gc_row *row, ut_rng *r, void *host[4]) {
    ut_rng_seed(r, 7);
    for (int i = 0; i < 4; i++) host[i] = NULL;
    for (int i = 0; i < row->nin; i++) {
        host[i] = malloc(sizeof(float) * (size_t)gc_count(&row->in[i]));
        gc_fill(&row->in[i], host[i], r);
    }
}

static void same_bits_env(const gc_row *row, const char *var, const char *va, const char *vb) {
    ut_rng r;
    void *host[4];
    row_inputs(row, &r, host);
    dc_result a, b;
    dc_run_row(UT_CUDA, row, host, NULL, 0, &a);
    long long n = a.nout;
    dc_result_free(&a);
    float *R = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (long long i = 0; i < n; i++) R[i] = ut_rng_normal(&r);
    set_or_unset(var, va);
    int ra = dc_run_row(UT_CUDA, row, host, R, n, &a);
    set_or_unset(var, vb);
    int rb = dc_run_row(UT_CUDA, row, host, R, n, &b);
    set_or_unset(var, NULL);
    CHECK(ra == 0 && rb == 0, "%s: %s %s", row->name, a.err, b.err);
    if (ra == 0 && rb == 0) {
        CHECK(!memcmp(a.out, b.out, sizeof(float) * (size_t)n), "%s: outputs differ between runs%s%s", row->name,
              var ? " with " : "", var ? var : "");
        for (int i = 0; i < row->nin; i++)
            if (a.grad[i])
                CHECK(!memcmp(a.grad[i], b.grad[i], sizeof(float) * (size_t)gc_count(&row->in[i])),
                      "%s: input %d gradient differs between runs%s%s", row->name, i, var ? " with " : "",
                      var ? var : "");
    }
    dc_result_free(&a);
    dc_result_free(&b);
    free(R);
    for (int i = 0; i < 4; i++) free(host[i]);
}

static void test_same_bits_twice(void) {
    const gc_row *rows[] = {&big_rows[1], &big_rows[2], &big_rows[3], &big_rows[4], &big_rows[6],
                            &big_rows[8], &big_rows[9], &big_rows[11], &big_rows[13], &big_rows[14]};
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
        if (selected(rows[k])) same_bits(rows[k]);
}

/* rows under bf16 and then fp16 autocast against the CPU's autocast, within
 * 1e-2 of the largest value, as "<what> <dtype>" */
static void autocast_rows(const char *what, const gc_row *const *rows, size_t n) {
    ut_dtype dts[2] = {UT_BF16, UT_F16};
    for (int d = 0; d < 2; d++) {
        dc_autocast = dts[d];
        for (size_t k = 0; k < n; k++) {
            if (!selected(rows[k])) continue;
            char fam[64];
            snprintf(fam, sizeof fam, "%s %s", what, ut_dtype_name(dts[d]));
            if (dc_compare_row(fam, rows[k], UT_CUDA, 1e-2)) t_checks_failed++;
            fflush(stdout);
        }
    }
    dc_autocast = UT_F32;
}

/* Causal attention on cuDNN's fused flash attention (UT_CUDA_ATTN=cudnn,
 * src/backend/cuda/cudnn_attn.cpp) against the CPU's autocast in bf16 and
 * fp16, with the tensor-core kernels' tolerance: T a multiple of 64 and
 * not, heads of 16, 64 and 128 (qkv float32 here, rounded by the glue;
 * qkv's gradient added to a float32 one). cuDNN must take every row: a
 * refusal fails the op. Then, its backward being cuDNN's deterministic
 * algorithm, the same bits twice. Says why when this build has no frontend
 * or cuDNN cannot be opened. */
static void test_cudnn_attention(void) {
    char what[64], why[768];
    size_t ws;
    ut_cudnn_attn probe = {1, 64, 64, 1, 1};
    if (!ut_cuda_cudnn_attn_built()) {
        ut_cuda_cudnn_attn_plan(&probe, UT_CUDNN_ATTN_TRAIN, &ws, why, sizeof why);
        printf("  skip: %s\n", why);
        /* asked for all the same, the op fails saying why and what to do */
        setenv("UT_CUDA_ATTN", "cudnn", 1);
        dc_autocast = UT_BF16;
        const gc_row *row = &big_rows[9];
        ut_rng r;
        ut_rng_seed(&r, 3);
        float *x = malloc(sizeof(float) * (size_t)gc_count(&row->in[0]));
        gc_fill(&row->in[0], x, &r);
        void *host[1] = {x};
        dc_result a;
        int rc = dc_run_row(UT_CUDA, row, host, NULL, 0, &a);
        CHECK(rc == -1 && strstr(a.err, "UT_CUDA_ATTN=cudnn") && strstr(a.err, "unset UT_CUDA_ATTN"),
              "UT_CUDA_ATTN=cudnn without cuDNN's fused attention: rc %d, %s", rc, rc ? a.err : "ran");
        if (rc == 0) dc_result_free(&a);
        free(x);
        unsetenv("UT_CUDA_ATTN");
        dc_autocast = UT_F32;
        return;
    }
    if (ut_cuda_cudnn_probe(what, sizeof what, why, sizeof why)) {
        printf("  skip: %s\n", why);
        return;
    }
    const gc_row *rows[] = {&big_rows[2], &big_rows[8], &big_rows[9], &big_rows[10], &big_rows[12]};
    setenv("UT_CUDA_ATTN", "cudnn", 1);
    autocast_rows("attention cudnn", rows, sizeof rows / sizeof rows[0]);
    dc_autocast = UT_BF16;
    for (size_t k = 1; k < 3; k++)
        if (selected(rows[k])) same_bits(rows[k]);
    unsetenv("UT_CUDA_ATTN");
    dc_autocast = UT_F32;
}

/* Attention under autocast with head size 64 runs on the tensor cores
 * (flash_attention_tc.cu): against the CPU's autocast at both 16-bit types,
 * T a multiple of 64 and not, then again on the float32 kernels
 * (UT_CUDA_ATTN=fp32) and on the WMMA tensor-core kernels (UT_CUDA_ATTN=wmma;
 * the default is their mma.sync form); and the same bits twice. */
static void test_attention_paths(void) {
    const gc_row *rows[] = {&big_rows[2], &big_rows[8], &big_rows[9]};
    const char *paths[3] = {"tensor cores", "fp32", "wmma"};
    for (int p = 0; p < 3; p++) {
        if (p) setenv("UT_CUDA_ATTN", paths[p], 1);
        char what[48];
        snprintf(what, sizeof what, "attention %s", paths[p]);
        autocast_rows(what, rows, sizeof rows / sizeof rows[0]);
        unsetenv("UT_CUDA_ATTN");
    }
    dc_autocast = UT_BF16;
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
        if (selected(rows[k])) same_bits(rows[k]);
    dc_autocast = UT_F32;
}

/* Under bf16 and fp16 autocast both devices round the same operands and
 * accumulate in float32 (the GPU on TF32 tensor cores, exact for such
 * operands), so they differ by the float32 sums' order, which can move a
 * 16-bit rounding by one unit: 1e-2 of the largest value. */
static void test_autocast_rows(void) {
    const gc_row *rows[] = {&big_rows[0],  &big_rows[1],  &big_rows[2],  &big_rows[3],  &big_rows[6],
                            &big_rows[7],  &big_rows[13], &big_rows[15], &big_rows[16], &big_rows[17],
                            &big_rows[18], &big_rows[19], &big_rows[20], &big_rows[21], &big_rows[22],
                            &big_rows[23], &big_rows[24], &big_rows[25], &big_rows[26], &big_rows[27],
                            &big_rows[28], &big_rows[29], &big_rows[30], &big_rows[32], &big_rows[33],
                            &big_rows[34], &big_rows[35], &big_rows[36], &big_rows[37], &big_rows[38],
                            &big_rows[39]};
    autocast_rows("autocast", rows, sizeof rows / sizeof rows[0]);
    /* the wide outputs again at OC (rows ld16 apart) instead of padded */
    const gc_row *wide[] = {&big_rows[26], &big_rows[27], &big_rows[39]};
    setenv("UT_CUDA_LT_PAD", "0", 1);
    autocast_rows("autocast, UT_CUDA_LT_PAD=0", wide, 3);
    unsetenv("UT_CUDA_LT_PAD");
}

/* Causal attention in training takes cuDNN's fused attention by default
 * where it runs (the same bits as UT_CUDA_ATTN=cudnn), else utrain's
 * mma.sync kernels (the same bits as UT_CUDA_ATTN=mma); T a multiple of 64
 * and not, heads of 64 and 16, bf16. Then forwards without a gradient: of
 * the shapes trained on, cuDNN's again (or utrain's); of a shape never
 * trained on, utrain's kernels. */
static void forward_bits_env(const gc_row *row, const char *var, const char *va, const char *vb) {
    ut_rng r;
    void *host[4];
    row_inputs(row, &r, host);
    dc_result a, b;
    dc_no_grad = true;
    set_or_unset(var, va);
    int ra = dc_run_row(UT_CUDA, row, host, NULL, 0, &a);
    set_or_unset(var, vb);
    int rb = dc_run_row(UT_CUDA, row, host, NULL, 0, &b);
    set_or_unset(var, NULL);
    dc_no_grad = false;
    CHECK(ra == 0 && rb == 0, "%s without gradients: %s %s", row->name, a.err, b.err);
    if (ra == 0 && rb == 0)
        CHECK(a.nout == b.nout && !memcmp(a.out, b.out, sizeof(float) * (size_t)a.nout),
              "%s without gradients: outputs differ with %s=%s", row->name, var, vb ? vb : "(unset)");
    dc_result_free(&a);
    dc_result_free(&b);
    for (int i = 0; i < 4; i++) free(host[i]);
}

static void test_attention_default(void) {
    char why[512];
    bool cudnn = ut_cuda_cudnn_attn_default(why, sizeof why);
    printf("  default causal attention in training: %s%s\n", cudnn ? "cuDNN's fused attention" : "utrain's: ",
           cudnn ? "" : why);
    const gc_row *rows[] = {&big_rows[2], &big_rows[9], &big_rows[10]};
    dc_autocast = UT_BF16;
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
        if (selected(rows[k])) same_bits_env(rows[k], "UT_CUDA_ATTN", NULL, cudnn ? "cudnn" : "mma");
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
        if (selected(rows[k])) forward_bits_env(rows[k], "UT_CUDA_ATTN", NULL, cudnn ? "cudnn" : "mma");
    /* a shape no training took (2 x 70 x 768 heads of 64): utrain's kernels */
    static const gc_row fresh = {"causal attention 2 x 70 x 768, 12 heads", 1, {{3, {2, 70, 2304}}}, b_attn};
    forward_bits_env(&fresh, "UT_CUDA_ATTN", NULL, "mma");
    dc_autocast = UT_F32;
}

/* row's output from a forward whose inputs take gradients (what it saves
 * for a backward) and from one whose inputs take none: the same bits */
static void same_without_grad(const gc_row *row) {
    ut_rng r;
    void *host[4];
    row_inputs(row, &r, host);
    dc_result a, b;
    int ra = dc_run_row(UT_CUDA, row, host, NULL, 0, &a);
    dc_no_grad = true;
    int rb = dc_run_row(UT_CUDA, row, host, NULL, 0, &b);
    dc_no_grad = false;
    CHECK(ra == 0 && rb == 0, "%s: %s %s", row->name, a.err, b.err);
    if (ra == 0 && rb == 0)
        CHECK(a.nout == b.nout && !memcmp(a.out, b.out, sizeof(float) * (size_t)a.nout),
              "%s: the output without gradients differs from the output with them", row->name);
    if (ra == 0) dc_result_free(&a);
    if (rb == 0) dc_result_free(&b);
    for (int k = 0; k < 4; k++) free(host[k]);
}

/* ut_linear_gelu under bf16 autocast (the big rows named "linear gelu" and
 * "mlp fused"): two runs give the same bits, and a forward without
 * gradients (cuBLASLt's GELU epilogue alone, the pre-activation not kept,
 * or the product into scratch and utrain's GELU kernel out of it) the
 * output a forward with them gives (the epilogue writing the
 * pre-activation too, or the product into it and GELU out of it). */
static void test_linear_gelu_paths(void) {
    dc_autocast = UT_BF16;
    for (size_t i = 0; i < sizeof big_rows / sizeof big_rows[0]; i++) {
        const gc_row *row = &big_rows[i];
        if (!selected(row) || (strncmp(row->name, "linear gelu", 11) && strncmp(row->name, "mlp fused", 9))) continue;
        same_bits(row);
        same_without_grad(row);
    }
    dc_autocast = UT_F32;
}

/* ut_linear_cross_entropy under bf16 autocast: two runs give the same
 * bits, the loss without gradients (the logits in scratch, no saved
 * buffers) is the loss with them, and both are linear then cross_entropy's
 * (UT_LINEAR_CE=0) to the bit: the same products into the same rows and
 * the same row kernels. */
static void test_linear_ce_paths(void) {
    dc_autocast = UT_BF16;
    for (size_t i = 0; i < sizeof big_rows / sizeof big_rows[0]; i++) {
        const gc_row *row = &big_rows[i];
        if (!selected(row) || strncmp(row->name, "linear cross-entropy", 20)) continue;
        same_bits(row);
        same_bits_env(row, "UT_LINEAR_CE", NULL, "0");
        forward_bits_env(row, "UT_LINEAR_CE", NULL, "0");
        same_without_grad(row);
    }
    dc_autocast = UT_F32;
}

/* body in a child process whose environment has var=val from its start
 * (cuDNN and cuBLASLt read their switches once per process), skipping
 * without a GPU; its failures are the caller's. Called before this process
 * starts CUDA: a child forked after that could not use the GPU. */
static void in_child(const char *var, const char *val, void (*body)(void)) {
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0) {
        setenv(var, val, 1);
        if (!have_gpu()) printf("  skip: %s\n", skip_why);
        else body();
        fflush(stdout);
        _exit(t_checks_failed ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child with %s=%s failed (status %d)", var, val, st);
}

/* The autocast rows again with UT_CUDA_LT_FUSED=0: linear's 16-bit
 * outputs and gradients through float32 scratch and the backend's own
 * rounding pass (the path taken where cuBLASLt has no kernel writing them),
 * against the CPU as above. In a child process: gemm.cu reads its switches
 * once, and the other tests run with the fused form. */
static void test_autocast_unfused(void) { in_child("UT_CUDA_LT_FUSED", "0", test_autocast_rows); }

/* cuDNN opens here and has every function utrain calls (this runs without
 * a GPU: a misspelt name or a library too old fails on the build machine);
 * where it is missing, the convolutions' own kernels are what runs, and
 * this says so. */
static void test_cudnn_library(void) {
    char what[64] = "", why[512] = "";
    int r = ut_cuda_cudnn_probe(what, sizeof what, why, sizeof why);
    CHECK(r >= 0, "%s", why);
    if (r == 0) printf("  %s\n", what);
    else printf("  skip: %s\n", why);
}

/* UT_CUDA_CONV=cudnn where cuDNN cannot be opened (UT_CUDNN_LIBRARY names a
 * file that is not there): the convolution fails, naming the setting, the
 * library and what to write instead; without UT_CUDA_CONV it runs on
 * utrain's own kernels, and so does causal attention in training (cuDNN's
 * by default). In a child process: cuDNN is opened once per process, and
 * the other tests open the real one. */
static void cudnn_refused(void) {
    for (int m = 0; m < 2; m++) {
        if (m == 0) setenv("UT_CUDA_CONV", "cudnn", 1);
        else unsetenv("UT_CUDA_CONV");
        ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_CUDA});
        float ones[50], halves[54];
        for (int i = 0; i < 50; i++) ones[i] = 1.0f;
        for (int i = 0; i < 54; i++) halves[i] = 0.5f;
        ut_tensor *x = ut_tensor_from(ctx, UT_F32, 4, (int64_t[]){1, 2, 5, 5}, ones);
        ut_tensor *w = ut_tensor_from(ctx, UT_F32, 4, (int64_t[]){3, 2, 3, 3}, halves);
        ut_tensor *y = ut_conv2d(ctx, x, w, NULL, 1, 1);
        float out[75];
        int rc = y ? ut_tensor_get(y, out, sizeof out) : -1;
        const char *err = ut_ctx_error(ctx);
        if (m == 0) {
            CHECK(rc == -1, "UT_CUDA_CONV=cudnn ran without cuDNN");
            CHECK(err && strstr(err, "UT_CUDA_CONV=cudnn") && strstr(err, "UT_CUDNN_LIBRARY=/nonexistent") &&
                      strstr(err, "unset UT_CUDA_CONV"),
                  "%s", err ? err : "(no error)");
        } else {
            /* the centre of a 3x3 window over ones: 2 channels x 9 x 0.5 */
            CHECK(rc == 0 && out[12] == 9.0f && out[0] == 4 * 2 * 0.5f, "auto without cuDNN: rc %d, %s, "
                  "out[12] %g, out[0] %g", rc, err ? err : "", (double)out[12], (double)out[0]);
        }
        ut_ctx_free(ctx);
    }
    /* causal attention in training, cuDNN's by default, runs utrain's
     * kernels where cuDNN cannot be opened: the bits of UT_CUDA_ATTN=mma */
    char why[512];
    CHECK(!ut_cuda_cudnn_attn_default(why, sizeof why), "cuDNN's attention is the default without cuDNN");
    dc_autocast = UT_BF16;
    same_bits_env(&big_rows[2], "UT_CUDA_ATTN", NULL, "mma");
    dc_autocast = UT_F32;
}
static void test_cudnn_refused(void) { in_child("UT_CUDNN_LIBRARY", "/nonexistent/libcudnn.so.9", cudnn_refused); }

/* A switch set to a value utrain does not know (a typo that would quietly
 * run the default) is refused, naming it and the values it takes; with or
 * without a GPU. In a child process: it must see the value from its start. */
static void test_bad_switch(void) {
    const char *vars[3] = {"UT_CUDA_ATTN", "UT_CUDA_LT_FUSED", "UT_CUDA_LN_BWD"}, *vals[3] = {"cuDNN", "no", "2"};
    const char *lists[3] = {"fp32, wmma, unfused, cudnn", "0, 1", "fused, two"};
    for (int i = 0; i < 3; i++) {
        fflush(stdout);
        pid_t pid = fork();
        CHECK(pid >= 0, "fork failed");
        if (pid == 0) {
            setenv(vars[i], vals[i], 1);
            char why[512] = "";
            int r = ut_backend_check(UT_CUDA, why, sizeof why);
            char want[64];
            snprintf(want, sizeof want, "%s=%s is not a value", vars[i], vals[i]);
            bool ok = r != 0 && strstr(why, want) && strstr(why, lists[i]);
            if (!ok) fprintf(stderr, "  %s=%s: check %d, %s\n", vars[i], vals[i], r, why);
            _exit(ok ? 0 : 1);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s=%s was not refused as it should be", vars[i], vals[i]);
    }
}

/* Every convolution row twice more: once with UT_CUDA_CONV=cudnn (cuDNN must
 * take each pass of each row, or the op fails) and once with
 * UT_CUDA_CONV=im2col (utrain's own kernels), both against the CPU. The
 * default run of the rows above is cuDNN where it takes them. */
static void test_conv_paths(void) {
    char what[64], why[512];
    bool have = ut_cuda_cudnn_probe(what, sizeof what, why, sizeof why) == 0;
    const char *modes[] = {"cudnn", "im2col"};
    for (int m = 0; m < 2; m++) {
        if (m == 0 && !have) {
            printf("  no cudnn here (im2col only): %s\n", why);
            continue;
        }
        setenv("UT_CUDA_CONV", modes[m], 1);
        char fam[32];
        snprintf(fam, sizeof fam, "conv %s", modes[m]);
        for (int i = 0; i < gc_nrows_nn; i++)
            if (strstr(gc_rows_nn[i].name, "conv") && selected(&gc_rows_nn[i]))
                if (dc_compare_row(fam, &gc_rows_nn[i], UT_CUDA, TOL)) t_checks_failed++;
        if (selected(&big_rows[6]) && dc_compare_row(fam, &big_rows[6], UT_CUDA, 1e-4)) t_checks_failed++;
        fflush(stdout);
    }
    unsetenv("UT_CUDA_CONV");
}

/* A bad index found by a kernel is reported at the next host read, naming
 * the op, and the read fails. */
static void test_bad_index(void) {
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_CUDA});
    int ids[3] = {0, 7, 2}, tg[2] = {1, 9};
    float out[12];
    ut_tensor *w = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){5, 4});
    ut_tensor *x = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){3}, ids);
    ut_tensor *e = ut_embedding(ctx, x, w);
    CHECK(e && ut_tensor_get(e, out, sizeof out) == -1, "embedding with id 7 of 5 rows was read");
    const char *err = ut_ctx_error(ctx);
    CHECK(err && strstr(err, "embedding"), "%s", err ? err : "(no error)");
    ut_ctx_free(ctx);
    ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_CUDA});
    ut_tensor *lg = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){2, 4});
    ut_tensor *t = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){2}, tg);
    ut_tensor *l = ut_cross_entropy(ctx, lg, t, -100);
    float lv;
    CHECK(l && ut_tensor_get(l, &lv, sizeof lv) == -1, "cross-entropy with target 9 of 4 classes was read");
    err = ut_ctx_error(ctx);
    CHECK(err && strstr(err, "cross_entropy"), "%s", err ? err : "(no error)");
    ut_ctx_free(ctx);
    /* in a training step: backward looks without waiting (the emulator's
     * copies land at once, a GPU's may not yet), and the check after it,
     * which waits, reports it if backward did not; then the flag is clear */
    ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_CUDA});
    lg = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){2, 4});
    ut_tensor_set_requires_grad(lg, true);
    l = ut_cross_entropy(ctx, lg, ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){2}, tg), -100);
    int rb = l ? ut_backward(ctx, l) : -1, rc = rb ? rb : ut_ctx_device_check(ctx);
    err = ut_ctx_error(ctx);
    CHECK(rc == -1 && err && strstr(err, "cross_entropy"), "backward with target 9 of 4 classes: %d, %s", rc,
          err ? err : "(no error)");
    printf("  a bad target in backward: reported by %s\n", rb ? "backward" : "the check after it");
    ut_ctx_clear_error(ctx);
    CHECK(ut_ctx_device_check(ctx) == 0, "the flag was cleared: %s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
    ut_ctx_free(ctx);
    /* the flag was cleared: a good lookup reads fine afterwards */
    ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_CUDA});
    ids[1] = 4;
    w = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){5, 4});
    e = ut_embedding(ctx, ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){3}, ids), w);
    CHECK(e && ut_tensor_get(e, out, sizeof out) == 0, "%s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
    ut_ctx_free(ctx);
}

/* Streams and events: a communication stream that waits on an event recorded
 * after the compute stream's write reads the written value; copy_async to
 * page-locked host memory holds the value once its event is done; a copy
 * from page-locked memory through copy is done when copy returns (the host
 * may change the buffer at once). */
static void test_streams_events(void) {
    const ut_backend *be = ut_backend_get(UT_CUDA);
    enum { N = 1 << 20 };
    float *x = be->alloc(N * sizeof(float)), *y = be->alloc(N * sizeof(float));
    float *h = ut_host_alloc(be, N * sizeof(float));
    void *side = be->stream_new(UT_STREAM_COMM), *ev = ut_event_new(be);
    CHECK(side && side != be->stream_new(UT_STREAM_COMPUTE), "a communication stream of its own");
    for (int i = 0; i < N; i++) h[i] = (float)(i % 251);
    be->copy(x, h, N * sizeof(float), UT_COPY_H2D);
    for (int i = 0; i < N; i++) h[i] = -1; /* copy has consumed the page-locked buffer */
    be->scale(x, N, 2.0f);                  /* queued on the compute stream */
    ut_event_record(be, ev, NULL);
    ut_event_wait(be, side, ev);
    ut_copy_async(be, y, x, N * sizeof(float), UT_COPY_D2D, side);
    ut_event_record(be, ev, side);
    ut_event_wait(be, NULL, ev);
    ut_copy_async(be, h, y, N * sizeof(float), UT_COPY_D2H, NULL);
    ut_event_record(be, ev, NULL);
    ut_event_sync(be, ev);
    CHECK(ut_event_done(be, ev), "a synchronised event is done");
    int bad = 0;
    for (int i = 0; i < N; i++) bad += h[i] != 2.0f * (float)(i % 251);
    CHECK(bad == 0, "%d of %d values wrong after the side stream's copy", bad, N);
    ut_event_free(be, ev);
    be->stream_free(side);
    ut_host_free(be, h);
    be->free(x);
    be->free(y);
}

/* A model built on the GPU: its parameters and flat buffers are device
 * memory holding exactly the CPU model's initial values (initialisation is
 * by name and element), its gradients start at zero, and an optimizer step
 * over them runs on the device and moves every parameter as on the CPU. */
static void test_model_on_device(void) {
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "n_layer", "1");
    ut_kv_set(kv, "n_head", "2");
    ut_kv_set(kv, "n_embd", "16");
    ut_kv_set(kv, "vocab_size", "50");
    ut_kv_set(kv, "block_size", "8");
    char err[256] = "";
    ut_model *c = ut_model_create_on("gpt2", kv, 5, UT_CPU, err, sizeof err);
    ut_model *g = ut_model_create_on("gpt2", kv, 5, UT_CUDA, err, sizeof err);
    ut_kv_free(kv);
    CHECK(c && g && g->params.device == UT_CUDA && g->params.t[0]->device == UT_CUDA, "%s", err);
    if (!c || !g) return;
    int64_t n = c->params.numel;
    float *hc = malloc((size_t)n * sizeof(float)), *hg = malloc((size_t)n * sizeof(float));
    const ut_backend *be = ut_backend_get(UT_CUDA);
    be->copy(hg, g->params.flat, (size_t)n * sizeof(float), UT_COPY_D2H);
    memcpy(hc, c->params.flat, (size_t)n * sizeof(float));
    CHECK(!memcmp(hc, hg, (size_t)n * sizeof(float)), "the GPU model's initial values differ from the CPU's");
    /* the same gradient on both, one step each of AdamW, Lion (its steps
     * are +-lr: the same signs give the same bits) and Adafactor with a first
     * moment (its row sums are a tree on the GPU, in order on the CPU) */
    static const ut_optim_kind kinds[] = {UT_OPTIM_ADAMW, UT_OPTIM_LION, UT_OPTIM_ADAFACTOR};
    static const char *const names[] = {"AdamW", "Lion", "Adafactor"};
    for (int k = 0; k < 3; k++) {
        for (int64_t i = 0; i < n; i++) hc[i] = 0.001f * (float)(i % 13) - 0.006f;
        memcpy(c->params.flat_grad, hc, (size_t)n * sizeof(float));
        be->copy(g->params.flat_grad, hc, (size_t)n * sizeof(float), UT_COPY_H2D);
        ut_optim_config oc = ut_optim_defaults(kinds[k]);
        oc.weight_decay = 0.1f;
        if (kinds[k] == UT_OPTIM_ADAFACTOR) oc.beta1 = 0.9f, oc.lr = 0.05f; /* moves the weights by ~1e-3 */
        ut_optim *oa = ut_optim_new(&oc, c->params.flat, c->params.flat_grad, c->params.segs, c->params.n, 0, n);
        oc.device = UT_CUDA;
        ut_optim *ob = ut_optim_new(&oc, g->params.flat, g->params.flat_grad, g->params.segs, g->params.n, 0, n);
        ut_optim_step_zero(oa, 1e-3f);
        ut_optim_step_zero(ob, 1e-3f);
        be->copy(hg, g->params.flat, (size_t)n * sizeof(float), UT_COPY_D2H);
        double worst = 0;
        for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)hg[i] - c->params.flat[i]));
        CHECK(worst <= (k == 2 ? 1e-6 : 1e-7), "after a %s step the GPU parameters differ by %g", names[k], worst);
        be->copy(hg, g->params.flat_grad, (size_t)n * sizeof(float), UT_COPY_D2H);
        bool zero = true;
        for (int64_t i = 0; i < n; i++) zero = zero && hg[i] == 0.0f;
        CHECK(zero, "the %s step did not zero the GPU gradients", names[k]);
        ut_optim_free(oa);
        ut_optim_free(ob);
    }
    free(hc);
    free(hg);
    ut_model_free(c);
    ut_model_free(g);
}

/* Adafactor over parameters the GPT-2 test above does not have: a matrix of
 * 600 rows (a row sum and a column sum over more rows than a block has
 * threads, the columns in three chunks), matrices with leading entries
 * (2 x 300 x 5), a vector of two blocks and a tail (9000), a single
 * element, and a padding gap, with and without decay, scale_parameter
 * and clipping active, a first moment, 16-bit copies; three steps, the
 * third skipped by its device scalars. Against the CPU at 1e-6, and the
 * copies the parameters rounded. */
static void adafactor_shapes(bool scale_parameter) {
    static const ut_param_seg segs[] = {
        {.offset = 0, .numel = 600 * 7, .decay = true, .rows = 600, .cols = 7},
        {.offset = 4200, .numel = 3000, .decay = false, .rows = 300, .cols = 5},
        {.offset = 7200, .numel = 9000, .decay = true},
        {.offset = 16200, .numel = 1, .decay = false},
        {.offset = 16205, .numel = 64 * 48, .decay = true, .rows = 64, .cols = 48},
    };
    const int nsegs = (int)(sizeof segs / sizeof segs[0]);
    const int64_t n = 16205 + 64 * 48;
    const char *how = scale_parameter ? "scale_parameter" : "a fixed rate";
    const ut_backend *be = ut_backend_get(UT_CUDA);
    float *hp = malloc((size_t)n * sizeof(float)), *hg = malloc((size_t)n * sizeof(float));
    float *out = malloc((size_t)n * sizeof(float));
    uint16_t *c16 = malloc((size_t)n * 2), *g16 = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) hp[i] = 0.02f * (float)((i * 7919) % 101 - 50) / 50.0f;
    float *dp = be->alloc((size_t)n * sizeof(float)), *dg = be->alloc((size_t)n * sizeof(float));
    void *d16 = be->alloc((size_t)n * 2);
    float *dsc = be->alloc(2 * sizeof(float));
    be->copy(dp, hp, (size_t)n * sizeof(float), UT_COPY_H2D);
    be->memset(d16, 0, (size_t)n * 2);
    memset(c16, 0, (size_t)n * 2);
    ut_optim_config oc = ut_optim_defaults(UT_OPTIM_ADAFACTOR);
    oc.beta1 = 0.9f, oc.lr = scale_parameter ? 0.05f : 1e-3f, oc.weight_decay = 0.1f, oc.clip_threshold = 0.5f;
    oc.scale_parameter = scale_parameter;
    ut_optim *oa = ut_optim_new(&oc, hp, hg, segs, nsegs, 0, n);
    oc.device = UT_CUDA;
    ut_optim *ob = ut_optim_new(&oc, dp, dg, segs, nsegs, 0, n);
    ut_optim_set_copies16(oa, c16, UT_BF16);
    ut_optim_set_copies16(ob, d16, UT_BF16);
    for (int step = 0; step < 3; step++) {
        for (int64_t i = 0; i < n; i++) { /* larger past row 256 in some columns: each chunk of a column counts */
            float w = i < 4200 && i % 7 < 3 && i / 7 >= 256 ? 4.0f : 1.0f;
            hg[i] = w * (0.001f * (float)((i * 31 + step * 17) % 29) - 0.014f);
        }
        be->copy(dg, hg, (size_t)n * sizeof(float), UT_COPY_H2D);
        if (step < 2) {
            ut_optim_step_zero(oa, oc.lr);
            ut_optim_step_zero(ob, oc.lr);
        } else { /* skipped: the parameters, state and copies stay */
            float sc[2] = {1.0f, 1.0f};
            be->copy(dsc, sc, sizeof sc, UT_COPY_H2D);
            ut_optim_step_zero_scaled(ob, oc.lr, dsc);
        }
        be->copy(out, dp, (size_t)n * sizeof(float), UT_COPY_D2H);
        double worst = 0;
        for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)out[i] - hp[i]));
        CHECK(worst <= 1e-7, "Adafactor (%s) step %d: the GPU parameters differ from the CPU's by %g", how,
              step + 1, worst);
        be->copy(g16, d16, (size_t)n * 2, UT_COPY_D2H);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
            bool in = false;
            for (int s = 0; s < nsegs; s++) in = in || (i >= segs[s].offset && i < segs[s].offset + segs[s].numel);
            uint32_t u; /* out[i] rounded to bf16, nearest even (no NaNs here) */
            memcpy(&u, &out[i], 4);
            uint16_t want = in ? (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) : 0;
            if (g16[i] != want) bad = i;
        }
        CHECK(bad < 0, "Adafactor (%s) step %d: the bf16 copy of element %lld is wrong", how, step + 1,
              (long long)bad);
        be->copy(out, dg, (size_t)n * sizeof(float), UT_COPY_D2H);
        bool zero = true;
        for (int64_t i = 0; i < n; i++) zero = zero && out[i] == 0.0f;
        CHECK(zero, "Adafactor (%s) step %d did not zero the GPU gradients", how, step + 1);
    }
    ut_optim_free(oa);
    ut_optim_free(ob);
    be->free(dp), be->free(dg), be->free(d16), be->free(dsc);
    free(hp), free(hg), free(out), free(c16), free(g16);
}

static void test_adafactor_shapes(void) {
    adafactor_shapes(false);
    adafactor_shapes(true);
}

/* Linear's fused GELU backward with its bias gradient (flat.cu,
 * utk_gelu_bwd_col_sum) gives the bits of the gelu kernel followed by the
 * column sums (ut_cuda_gelu_bwd, utk_col_sum_add): 1100 rows (18 row
 * blocks, more than the 8 lanes that add them), 96 and 4096 columns, bf16
 * and fp16; 97 columns (rows not whole 16-byte groups) are refused. Then
 * again with the partial sums' buffer bounded to 5 parts' worth (each part
 * 220 rows, as a biased head's 50304 columns at 64 x 1024 rows take more
 * than 64 rows a part): the sums still those of dx, within rounding. */
bool utk_gelu_bwd_col_sum(void *dx, const void *dy, const void *x, int dt, float *db, int64_t rows,
                          int64_t cols); /* src/backend/cuda/flat.h */
void utk_col_sum_add(float *db, const void *g, int g_dt, int64_t rows, int64_t cols);
void utk_col_parts_cap(size_t bytes);
void ut_cuda_gelu_bwd(void *dx, int dtd, const void *dy, int dtg, const void *x, int dtx, int64_t n, bool acc);
static void test_gelu_col_sum(void) {
    const ut_backend *be = ut_backend_get(UT_CUDA);
    const int64_t rows = 1100, colss[2] = {96, 4096};
    ut_rng r;
    ut_rng_seed(&r, 5);
    for (int capped = 0; capped < 2; capped++)
    for (int dt = 1; dt <= 2; dt++)
        for (int c = 0; c < 2; c++) {
            int64_t cols = colss[c], n = rows * cols;
            utk_col_parts_cap(capped ? (size_t)(5 * cols * sizeof(float)) : 0);
            float *h = malloc((size_t)n * sizeof(float)), *db0 = malloc((size_t)cols * sizeof(float));
            void *dy = be->alloc((size_t)n * 2), *x = be->alloc((size_t)n * 2), *dxa = be->alloc((size_t)n * 2),
                 *dxb = be->alloc((size_t)n * 2);
            float *f = be->alloc((size_t)n * sizeof(float)), *dba = be->alloc((size_t)cols * sizeof(float)),
                  *dbb = be->alloc((size_t)cols * sizeof(float));
            for (int k = 0; k < 2; k++) { /* dy, then x (GELU's bend: N(0, 2)) */
                for (int64_t i = 0; i < n; i++) h[i] = (k ? 2.0f : 1.0f) * ut_rng_normal(&r);
                be->copy(f, h, (size_t)n * sizeof(float), UT_COPY_H2D);
                be->convert(k ? x : dy, (ut_dtype)dt, f, UT_F32, n);
            }
            for (int64_t j = 0; j < cols; j++) db0[j] = 0.25f * (float)(j % 7);
            be->copy(dba, db0, (size_t)cols * sizeof(float), UT_COPY_H2D);
            be->copy(dbb, db0, (size_t)cols * sizeof(float), UT_COPY_H2D);
            ut_cuda_gelu_bwd(dxa, dt, dy, dt, x, dt, n, false);
            utk_col_sum_add(dba, dxa, dt, rows, cols);
            bool ok = utk_gelu_bwd_col_sum(dxb, dy, x, dt, dbb, rows, cols);
            CHECK(ok, "dtype %d, %lld columns: refused", dt, (long long)cols);
            uint16_t *ha = malloc((size_t)n * 2), *hb = malloc((size_t)n * 2);
            float *ga = malloc((size_t)cols * sizeof(float)), *gb = malloc((size_t)cols * sizeof(float));
            be->copy(ha, dxa, (size_t)n * 2, UT_COPY_D2H);
            be->copy(hb, dxb, (size_t)n * 2, UT_COPY_D2H);
            be->copy(ga, dba, (size_t)cols * sizeof(float), UT_COPY_D2H);
            be->copy(gb, dbb, (size_t)cols * sizeof(float), UT_COPY_D2H);
            if (ok) {
                CHECK(!memcmp(ha, hb, (size_t)n * 2), "dtype %d, %lld columns: dx differs", dt, (long long)cols);
                CHECK(!memcmp(ga, gb, (size_t)cols * sizeof(float)), "dtype %d, %lld columns: db differs", dt,
                      (long long)cols);
                CHECK(memcmp(ga, db0, (size_t)cols * sizeof(float)), "dtype %d: db unchanged", dt);
                /* db - db0 against dx's column sums in double */
                be->convert(f, UT_F32, dxa, (ut_dtype)dt, n);
                be->copy(h, f, (size_t)n * sizeof(float), UT_COPY_D2H);
                double worst = 0;
                for (int64_t j = 0; j < cols; j++) {
                    double want = 0, mag = 0;
                    for (int64_t i = 0; i < rows; i++) want += h[i * cols + j], mag += fabs(h[i * cols + j]);
                    double e = fabs((double)ga[j] - (double)db0[j] - want) / (mag + 1e-6);
                    if (e > worst) worst = e;
                }
                CHECK(worst < 1e-5, "dtype %d, %lld columns%s: column sums off by %.3g of their magnitude", dt,
                      (long long)cols, capped ? ", 5 parts" : "", worst);
            }
            CHECK(!utk_gelu_bwd_col_sum(dxb, dy, x, dt, dbb, rows * cols / 97, 97),
                  "dtype %d: 97 columns were taken", dt);
            free(h), free(db0), free(ha), free(hb), free(ga), free(gb);
            be->free(dy), be->free(x), be->free(dxa), be->free(dxb), be->free(f), be->free(dba), be->free(dbb);
        }
    utk_col_parts_cap(0);
}

/* The peak rates MFU divides by (src/backend/cuda/peak.c): the published
 * figures by the device's name (a word of it: "A10" is not "A100"; PCIe and
 * NVL parts before the SXM ones), else the estimate from multiprocessors x
 * clock x the architecture's rate; nothing for what it does not know. */
double ut_cuda_peak_of(const char *name, int major, int minor, int sms, int clock_khz, int kind, char *what,
                       size_t n); /* src/backend/cuda/cuda.h */
static void test_peak_rates(void) {
    struct {
        const char *name;
        int major, minor, kind;
        double tflops;
        const char *says;
    } rows[] = {
        {"NVIDIA H100 80GB HBM3", 9, 0, UT_PEAK_16, 989.4, "(H100 SXM): NVIDIA's published bf16/fp16 dense peak"},
        {"NVIDIA H100 PCIe", 9, 0, UT_PEAK_TF32, 378.0, "(H100 PCIe): NVIDIA's published TF32"},
        {"NVIDIA H200 NVL", 9, 0, UT_PEAK_16, 835.5, "(H200 NVL)"},
        {"NVIDIA H200", 9, 0, UT_PEAK_FP32, 66.9, "(H200 SXM): NVIDIA's published float32"},
        {"NVIDIA GH200 480GB", 9, 0, UT_PEAK_16, 989.4, "(GH200)"},
        {"NVIDIA A100-SXM4-80GB", 8, 0, UT_PEAK_16, 312.0, "(A100)"},
        {"NVIDIA A100 80GB PCIe", 8, 0, UT_PEAK_TF32, 156.0, "(A100)"},
        {"NVIDIA A10", 8, 6, UT_PEAK_16, 125.0, "(A10)"},
        {"NVIDIA L4", 8, 9, UT_PEAK_16, 121.0, "(L4)"},
        {"NVIDIA L40S", 8, 9, UT_PEAK_16, 362.05, "(L40S)"},
        /* not in the table: 100 multiprocessors at 1.5 GHz */
        {"NVIDIA A10G", 8, 6, UT_PEAK_16, 100 * 1.5e9 * 1024 * 1e-12, "estimated as 100 multiprocessors x 1.50 GHz"},
        {"NVIDIA L40", 8, 9, UT_PEAK_TF32, 100 * 1.5e9 * 512 * 1e-12, "TF32 dense peak estimated"},
        {"some sm_80 part", 8, 0, UT_PEAK_FP32, 100 * 1.5e9 * 128 * 1e-12, "float32 dense peak estimated"},
        {"some sm_90 part", 9, 0, UT_PEAK_16, 100 * 1.5e9 * 4096 * 1e-12, "x 4096 FLOPs per clock"},
        {"NVIDIA B200", 10, 0, UT_PEAK_16, 0, "compute capability 10.0): utrain knows no peak rate for it; give "
                                             "train.peak_tflops"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char what[256] = "";
        double r = ut_cuda_peak_of(rows[i].name, rows[i].major, rows[i].minor, 100, 1500000, rows[i].kind, what,
                                   sizeof what);
        CHECK(fabs(r - rows[i].tflops * 1e12) <= 1e-9 * rows[i].tflops * 1e12 && strstr(what, rows[i].says),
              "%s: %.6g TFLOP/s, want %.6g; said \"%s\"", rows[i].name, r * 1e-12, rows[i].tflops, what);
    }
    char what[256] = "";
    CHECK(ut_cuda_peak_of("x", 9, 0, 0, 0, UT_PEAK_16, what, sizeof what) == 0 && strstr(what, "train.peak_tflops"),
          "no multiprocessor count: %s", what);
}

/* The selected GPU's own figures: 16-bit above TF32 above float32 (the
 * emulator, named as no part is, gets an H100 SXM's estimate from its 132
 * multiprocessors at 1.98 GHz). */
static void test_device_peak(void) {
    const ut_backend *be = ut_backend_get(UT_CUDA);
    char w16[256] = "", wtf[256] = "", w32[256] = "";
    double p16 = be->peak_flops(UT_PEAK_16, w16, sizeof w16), ptf = be->peak_flops(UT_PEAK_TF32, wtf, sizeof wtf),
           p32 = be->peak_flops(UT_PEAK_FP32, w32, sizeof w32);
    printf("  peak: %.4g / %.4g / %.4g TFLOP/s (%s)\n", p16 * 1e-12, ptf * 1e-12, p32 * 1e-12, w16);
    CHECK(p16 > ptf && ptf > p32 && p32 > 0, "peaks %g, %g, %g: %s", p16, ptf, p32, w16);
    if (strstr(w16, "utrain CUDA emulator"))
        CHECK(p16 == 132 * 1.98e9 * 4096, "the emulator's estimate %.6g", p16);
}

/* Layer norm's backward both ways (UT_CUDA_LN_BWD=two: the dx kernel and
 * the partial sums' kernel where the one-pass backward runs by default;
 * norm.cu), the layer norm rows in float32 and under autocast against the
 * CPU: the GPU run can time either (scripts/gpu-check.sh bench). */
static void test_ln_bwd_paths(void) {
    static const char *const names[] = {"layernorm 512 x 768", "linear -> layernorm 256 x 768", "layernorm 1200 x 40",
                                        "linear -> layernorm 64 x 2500"};
    const gc_row *rows[4];
    size_t n = 0;
    for (size_t i = 0; i < sizeof big_rows / sizeof big_rows[0]; i++)
        for (size_t j = 0; j < 4; j++)
            if (!strcmp(big_rows[i].name, names[j]) && n < 4) rows[n++] = &big_rows[i];
    CHECK(n == 4, "found %zu of the rows", n);
    setenv("UT_CUDA_LN_BWD", "two", 1);
    for (size_t k = 0; k < n; k++) {
        if (!selected(rows[k])) continue;
        if (dc_compare_row("ln two kernels", rows[k], UT_CUDA, TOL)) t_failed++;
        else t_passed++;
    }
    autocast_rows("ln two kernels", rows, n);
    unsetenv("UT_CUDA_LN_BWD");
}

/* Gradients written whole where no op has written them yet (backend.h,
 * UT_KCAP_FRESH_GRAD): every row again with its inputs behind an op
 * (dc_through), so its ops' input gradients are handed over unzeroed, in
 * float32 and bf16 autocast. UT_FRESH_GRADS=nan fills those with NaNs first
 * (on both devices): a kernel that adds into one instead of writing it
 * fails its row. Mutation-checked: gelu's backward adding where told to
 * write fails the gelu rows here. */
static void test_fresh_grads(void) {
    setenv("UT_FRESH_GRADS", "nan", 1);
    dc_through = true;
#define RUNF_THROUGH(f) run_family(#f " through", gc_rows_##f, gc_nrows_##f);
    GC_FAMILIES(RUNF_THROUGH)
    /* the GPT-2 block's ops under autocast (16-bit gradients; cuDNN's
     * attention writing qkv's gradient in place where it runs) */
    static const char *const names[] = {"layernorm 512 x 768", "mlp 256", "causal attention 2 x 128 x 768",
                                        "linear -> layernorm 256", "x + linear(x) 256", "x + dropout(linear(x)) 256",
                                        "linear(x) + bias 24 x 4100", "mlp fused 256", "linear gelu 40 x 1001",
                                        "linear cross-entropy 8 x 5001", "linear cross-entropy 40 x 1001"};
    const gc_row *rows[sizeof names / sizeof names[0]];
    size_t n = 0;
    for (size_t i = 0; i < sizeof big_rows / sizeof big_rows[0]; i++)
        for (size_t j = 0; j < sizeof names / sizeof names[0]; j++)
            if (!strncmp(big_rows[i].name, names[j], strlen(names[j])) && n < sizeof rows / sizeof rows[0])
                rows[n++] = &big_rows[i];
    CHECK(n == sizeof rows / sizeof rows[0], "found %zu of the rows", n);
    autocast_rows("through", rows, n);
    dc_through = false;
    unsetenv("UT_FRESH_GRADS");
}

int main(void) {
    /* first: these fork, and CUDA must not be initialised before */
    RUN(test_cudnn_refused);
    RUN(test_bad_switch);
    RUN(test_autocast_unfused);
    RUN(test_cudnn_library);
    RUN(test_peak_rates);
    if (!have_gpu()) {
        printf("skip: %s\n", skip_why);
        return TEST_SUMMARY();
    }
#define RUNF(f) run_family(#f, gc_rows_##f, gc_nrows_##f);
    GC_FAMILIES(RUNF)
    RUN(test_large_shapes);
    RUN(test_conv_paths);
    RUN(test_same_bits_twice);
    RUN(test_autocast_rows);
    RUN(test_attention_paths);
    RUN(test_cudnn_attention);
    RUN(test_attention_default);
    RUN(test_linear_gelu_paths);
    RUN(test_linear_ce_paths);
    RUN(test_masked_attention);
    RUN(test_bad_index);
    RUN(test_streams_events);
    RUN(test_model_on_device);
    RUN(test_adafactor_shapes);
    RUN(test_gelu_col_sum);
    RUN(test_device_peak);
    RUN(test_fresh_grads);
    RUN(test_ln_bwd_paths);
    return TEST_SUMMARY();
}
