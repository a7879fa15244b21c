/* Layers: parameter registration with PyTorch-style names and inits, and
 * forward functions composed of ops (autograd does the backward). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/nn.h"

static const char *pname(char *buf, size_t n, const char *prefix, const char *leaf) {
    if ((size_t)snprintf(buf, n, "%s.%s", prefix, leaf) >= n)
        ut_abort(__FILE__, __LINE__, "parameter name '%s.%s' is too long", prefix, leaf);
    return buf;
}

/* ---- linear ---- */
void ut_linear_layer_init(ut_model *m, ut_linear_layer *l, const char *prefix, int64_t in,
                          int64_t out, bool bias) {
    char buf[256];
    float bound = 1.0f / sqrtf((float)in);
    int64_t wne[2] = {out, in};
    l->w = ut_param_add(m, pname(buf, sizeof buf, prefix, "weight"), 2, wne,
                        (ut_init){UT_INIT_UNIFORM, bound});
    l->b = bias ? ut_param_add(m, pname(buf, sizeof buf, prefix, "bias"), 1, &out,
                               (ut_init){UT_INIT_UNIFORM, bound})
                : NULL;
}

ut_tensor *ut_linear_layer_forward(ut_ctx *ctx, const ut_linear_layer *l, ut_tensor *x) {
    return ut_linear(ctx, x, l->w, l->b);
}

ut_tensor *ut_linear_layer_forward_gelu(ut_ctx *ctx, const ut_linear_layer *l, ut_tensor *x) {
    return ut_linear_gelu(ctx, x, l->w, l->b);
}

/* Hugging Face style: weight N(0, std), bias zero */
void ut_linear_layer_init_normal(ut_model *m, ut_linear_layer *l, const char *prefix, int64_t in,
                                 int64_t out, float std) {
    char buf[256];
    int64_t wne[2] = {out, in};
    l->w = ut_param_add(m, pname(buf, sizeof buf, prefix, "weight"), 2, wne,
                        (ut_init){UT_INIT_NORMAL, std});
    l->b = ut_param_add(m, pname(buf, sizeof buf, prefix, "bias"), 1, &out,
                        (ut_init){UT_INIT_ZEROS, 0});
}

/* ---- conv2d ---- */
void ut_conv2d_layer_init(ut_model *m, ut_conv2d_layer *l, const char *prefix, int64_t in_ch,
                          int64_t out_ch, int k, int stride, int padding) {
    char buf[256];
    float bound = 1.0f / sqrtf((float)(in_ch * k * k));
    int64_t wne[4] = {out_ch, in_ch, k, k};
    l->w = ut_param_add(m, pname(buf, sizeof buf, prefix, "weight"), 4, wne,
                        (ut_init){UT_INIT_UNIFORM, bound});
    l->b = ut_param_add(m, pname(buf, sizeof buf, prefix, "bias"), 1, &out_ch,
                        (ut_init){UT_INIT_UNIFORM, bound});
    l->stride = stride;
    l->padding = padding;
}

ut_tensor *ut_conv2d_layer_forward(ut_ctx *ctx, const ut_conv2d_layer *l, ut_tensor *x) {
    return ut_conv2d(ctx, x, l->w, l->b, l->stride, l->padding);
}

ut_tensor *ut_conv2d_layer_forward_relu(ut_ctx *ctx, const ut_conv2d_layer *l, ut_tensor *x) {
    return ut_conv2d_relu(ctx, x, l->w, l->b, l->stride, l->padding);
}

/* ---- layernorm ---- */
void ut_layernorm_layer_init(ut_model *m, ut_layernorm_layer *l, const char *prefix, int64_t C) {
    char buf[256];
    l->w = ut_param_add(m, pname(buf, sizeof buf, prefix, "weight"), 1, &C, (ut_init){UT_INIT_ONES, 0});
    l->b = ut_param_add(m, pname(buf, sizeof buf, prefix, "bias"), 1, &C, (ut_init){UT_INIT_ZEROS, 0});
    l->eps = 1e-5f;
}

ut_tensor *ut_layernorm_layer_forward(ut_ctx *ctx, const ut_layernorm_layer *l, ut_tensor *x) {
    return ut_layernorm(ctx, x, l->w, l->b, l->eps);
}

/* ---- embedding ---- */
ut_tensor *ut_neftune(ut_ctx *ctx, ut_tensor *e, int64_t seq_len) {
    float alpha = ut_ctx_neftune(ctx);
    if (!e || alpha <= 0.0f || !ut_ctx_training(ctx)) return e;
    int64_t d = e->ne[e->ndim - 1], L = seq_len > 0 ? seq_len : e->ndim >= 2 ? e->ne[e->ndim - 2] : 1;
    /* transformers: alpha / sqrt(L * d), the root of an integer in float32 */
    return ut_uniform_noise(ctx, e, alpha / sqrtf((float)(L * d)));
}

void ut_embedding_layer_init(ut_model *m, ut_embedding_layer *l, const char *prefix, int64_t V,
                             int64_t C, float std) {
    char buf[256];
    int64_t ne[2] = {V, C};
    l->w = ut_param_add(m, pname(buf, sizeof buf, prefix, "weight"), 2, ne,
                        (ut_init){UT_INIT_NORMAL, std});
}

ut_tensor *ut_embedding_layer_forward(ut_ctx *ctx, const ut_embedding_layer *l, ut_tensor *idx) {
    return ut_embedding(ctx, idx, l->w);
}

/* ---- attention: c_attn (C -> 3C), fused causal attention, c_proj ---- */
void ut_attention_layer_init(ut_model *m, ut_attention_layer *l, const char *prefix, int64_t C,
                             int n_head, float proj_std, float dropout) {
    char buf[256];
    ut_linear_layer_init_normal(m, &l->c_attn, pname(buf, sizeof buf, prefix, "c_attn"), C, 3 * C, 0.02f);
    ut_linear_layer_init_normal(m, &l->c_proj, pname(buf, sizeof buf, prefix, "c_proj"), C, C, proj_std);
    l->n_head = n_head;
    l->head0 = 0, l->heads_all = n_head;
    l->dropout = dropout;
}

ut_tensor *ut_attention_layer_forward(ut_ctx *ctx, const ut_attention_layer *l, ut_tensor *x) {
    ut_tensor *qkv = ut_linear(ctx, x, l->c_attn.w, l->c_attn.b);
    ut_tensor *y = ut_attention(ctx, qkv, l->n_head);
    y = ut_linear(ctx, y, l->c_proj.w, l->c_proj.b);
    return l->dropout > 0 ? ut_dropout(ctx, y, l->dropout) : y;
}

/* ---- mlp: c_fc (C -> 4C), gelu, c_proj (4C -> C) ---- */
void ut_mlp_layer_init(ut_model *m, ut_mlp_layer *l, const char *prefix, int64_t C,
                       float proj_std, float dropout) {
    char buf[256];
    ut_linear_layer_init_normal(m, &l->c_fc, pname(buf, sizeof buf, prefix, "c_fc"), C, 4 * C, 0.02f);
    ut_linear_layer_init_normal(m, &l->c_proj, pname(buf, sizeof buf, prefix, "c_proj"), 4 * C, C, proj_std);
    l->dropout = dropout;
}

ut_tensor *ut_mlp_layer_forward(ut_ctx *ctx, const ut_mlp_layer *l, ut_tensor *x) {
    ut_tensor *h = ut_linear_gelu(ctx, x, l->c_fc.w, l->c_fc.b);
    h = ut_linear(ctx, h, l->c_proj.w, l->c_proj.b);
    return l->dropout > 0 ? ut_dropout(ctx, h, l->dropout) : h;
}

/* ---- transformer block ---- */
void ut_block_layer_init(ut_model *m, ut_block_layer *l, const char *prefix, int64_t C, int n_head,
                         float proj_std, float dropout) {
    char buf[256];
    l->seq = false, l->seq_rank = 0, l->seq_size = 1;
    ut_layernorm_layer_init(m, &l->ln_1, pname(buf, sizeof buf, prefix, "ln_1"), C);
    ut_attention_layer_init(m, &l->attn, pname(buf, sizeof buf, prefix, "attn"), C, n_head,
                            proj_std, dropout);
    ut_layernorm_layer_init(m, &l->ln_2, pname(buf, sizeof buf, prefix, "ln_2"), C);
    ut_mlp_layer_init(m, &l->mlp, pname(buf, sizeof buf, prefix, "mlp"), C, proj_std, dropout);
    l->tp = (ut_tp_hooks){0}; /* not split */
}

/* A linear split over the block's tensor-parallel group: the part's weight
 * (out, in) of the full (full_out, full_in), cut along dim (0: output
 * features, column-parallel; 1: input features, row-parallel) in blocks;
 * the bias follows the output features (cut when dim is 0, whole when 1). */
int ut_linear_layer_init_part(ut_model *m, ut_linear_layer *l, const char *prefix, int64_t in, int64_t out,
                              float std, int dim, int rank, int size, int blocks, char *err, size_t n) {
    char buf[256];
    l->w = ut_param_add_part(m, pname(buf, sizeof buf, prefix, "weight"), 2, (int64_t[]){out, in},
                             (ut_init){UT_INIT_NORMAL, std}, dim, size, rank, blocks, err, n);
    l->b = dim == 0 ? ut_param_add_part(m, pname(buf, sizeof buf, prefix, "bias"), 1, &out,
                                        (ut_init){UT_INIT_ZEROS, 0}, 0, size, rank, blocks, err, n)
                    : ut_param_add(m, pname(buf, sizeof buf, prefix, "bias"), 1, &out, (ut_init){UT_INIT_ZEROS, 0});
    return l->w && l->b ? 0 : -1;
}

int ut_block_layer_init_tp(ut_model *m, ut_block_layer *l, const char *prefix, int64_t C, int n_head,
                           float proj_std, float dropout, int tp_rank, int tp_size, ut_tp_hooks hooks, char *err,
                           size_t n) {
    if (tp_size < 1 || n_head % tp_size) {
        snprintf(err, n, "%s: %d attention heads cannot be split over %d tensor-parallel ranks", prefix, n_head,
                 tp_size);
        return -1;
    }
    char buf[256], sub[256];
    l->seq = false, l->seq_rank = 0, l->seq_size = 1;
    ut_layernorm_layer_init(m, &l->ln_1, pname(buf, sizeof buf, prefix, "ln_1"), C);
    pname(sub, sizeof sub, prefix, "attn");
    if (ut_linear_layer_init_part(m, &l->attn.c_attn, pname(buf, sizeof buf, sub, "c_attn"), C, 3 * C, 0.02f, 0, tp_rank,
                    tp_size, 3, err, n) ||
        ut_linear_layer_init_part(m, &l->attn.c_proj, pname(buf, sizeof buf, sub, "c_proj"), C, C, proj_std, 1, tp_rank, tp_size,
                    1, err, n))
        return -1;
    l->attn.n_head = n_head / tp_size;
    l->attn.head0 = tp_rank * l->attn.n_head, l->attn.heads_all = n_head;
    l->attn.dropout = dropout;
    ut_layernorm_layer_init(m, &l->ln_2, pname(buf, sizeof buf, prefix, "ln_2"), C);
    pname(sub, sizeof sub, prefix, "mlp");
    if (ut_linear_layer_init_part(m, &l->mlp.c_fc, pname(buf, sizeof buf, sub, "c_fc"), C, 4 * C, 0.02f, 0, tp_rank, tp_size, 1,
                    err, n) ||
        ut_linear_layer_init_part(m, &l->mlp.c_proj, pname(buf, sizeof buf, sub, "c_proj"), 4 * C, C, proj_std, 1, tp_rank,
                    tp_size, 1, err, n))
        return -1;
    l->mlp.dropout = dropout;
    l->tp = hooks;
    return 0;
}

ut_tensor *ut_tp_row_out(ut_ctx *ctx, const ut_tp_hooks *tp, ut_tensor *x, const ut_linear_layer *lin) {
    if (!tp->reduce) return ut_linear(ctx, x, lin->w, lin->b);
    return ut_add(ctx, tp->reduce(ctx, ut_linear(ctx, x, lin->w, NULL), tp->group), lin->b);
}

ut_tensor *ut_tp_col_in(ut_ctx *ctx, const ut_tp_hooks *tp, ut_tensor *x) {
    return tp->copy ? tp->copy(ctx, x, tp->group) : x;
}

static ut_tensor *row_out(ut_ctx *ctx, const ut_block_layer *l, ut_tensor *x, const ut_linear_layer *lin) {
    return ut_tp_row_out(ctx, &l->tp, x, lin);
}
static ut_tensor *col_in(ut_ctx *ctx, const ut_block_layer *l, ut_tensor *x) { return ut_tp_col_in(ctx, &l->tp, x); }

void ut_block_layer_set_seq(ut_block_layer *l, int rank, int size) {
    l->seq = size > 1;
    l->seq_rank = rank, l->seq_size = size;
}

ut_tensor *ut_dropout_seq(ut_ctx *ctx, ut_tensor *x, float p, int rank, int size) {
    if (!x || p <= 0) return x;
    int64_t B = x->ne[0], w = ut_nelem(x) / (B ? B : 1); /* a row of x: T/p positions */
    ut_tensor *v = ut_reshape(ctx, x, 2, (int64_t[]){B, w});
    return ut_reshape(ctx, ut_dropout_cols(ctx, v, p, (int64_t)rank * w, w * size), x->ndim, x->ne);
}

/* A replicated parameter used on this rank's rows only: its gradient summed
 * over the group (the identity forward; tp_copy's backward). */
static ut_tensor *seq_param(ut_ctx *ctx, const ut_block_layer *l, ut_tensor *w) {
    return l->tp.copy(ctx, w, l->tp.group);
}

static ut_tensor *seq_norm(ut_ctx *ctx, const ut_block_layer *l, const ut_layernorm_layer *ln, ut_tensor *x) {
    return ut_layernorm(ctx, x, seq_param(ctx, l, ln->w), seq_param(ctx, l, ln->b), ln->eps);
}

/* the row-parallel product's partial sums to this rank's rows of their sum, its bias, the dropout */
static ut_tensor *seq_out(ut_ctx *ctx, const ut_block_layer *l, ut_tensor *h, const ut_linear_layer *lin, float p) {
    h = l->tp.seq_reduce_scatter(ctx, ut_linear(ctx, h, lin->w, NULL), l->tp.group);
    h = ut_add(ctx, h, seq_param(ctx, l, lin->b));
    return ut_dropout_seq(ctx, h, p, l->seq_rank, l->seq_size);
}

/* The sequence-parallel block: x (B, T/p, C), this rank's rows */
static ut_tensor *block_seq(ut_ctx *ctx, const ut_block_layer *l, ut_tensor *x) {
    const ut_attention_layer *a = &l->attn;
    const ut_mlp_layer *mlp = &l->mlp;
    ut_tensor *h = l->tp.seq_gather(ctx, seq_norm(ctx, l, &l->ln_1, x), l->tp.group);
    h = ut_attention(ctx, ut_linear(ctx, h, a->c_attn.w, a->c_attn.b), a->n_head);
    x = ut_add(ctx, x, seq_out(ctx, l, h, &a->c_proj, a->dropout));
    h = l->tp.seq_gather(ctx, seq_norm(ctx, l, &l->ln_2, x), l->tp.group);
    h = ut_linear_gelu(ctx, h, mlp->c_fc.w, mlp->c_fc.b);
    return ut_add(ctx, x, seq_out(ctx, l, h, &mlp->c_proj, mlp->dropout));
}

/* The one GPT-2 block, on rows as its inputs lay them out: in = {x (B, T, C)}
 * causal over each row (the fused attention on the packed qkv); {x (B, T, C),
 * mask (B, T)} causal under a padding mask; {x (N, C), offsets I32 (B + 1)}
 * packed sequences, each causal over itself. The last two apply the
 * attention-probability dropout (transformers' attn_pdrop = dropout). */
static ut_tensor *block_fn(ut_ctx *ctx, void *user, ut_tensor **in, int n) {
    const ut_block_layer *l = user;
    const ut_attention_layer *a = &l->attn;
    ut_tensor *x = in[0];
    if (l->seq) {
        if (n >= 2 && in[1]) {
            ut_ctx_set_error(ctx, "a sequence-parallel block runs on whole (batch, sequence) rows without a mask");
            return NULL;
        }
        return block_seq(ctx, l, x);
    }
    ut_tensor *qkv = ut_linear(ctx, col_in(ctx, l, ut_layernorm_layer_forward(ctx, &l->ln_1, x)), a->c_attn.w,
                               a->c_attn.b);
    ut_tensor *y;
    if (!qkv) return NULL;
    if (n < 2 || !in[1]) {
        y = ut_attention(ctx, qkv, a->n_head);
    } else {
        int d = x->ndim - 1;
        int64_t C = qkv->ne[d] / 3; /* this rank's heads' width */
        ut_tensor *q = ut_slice(ctx, qkv, d, 0, C), *k = ut_slice(ctx, qkv, d, C, 2 * C),
                  *v = ut_slice(ctx, qkv, d, 2 * C, 3 * C);
        /* split: this rank's heads draw their slices of the whole attention's masks */
        y = x->ndim == 2 ? ut_attention_varlen_heads(ctx, q, k, v, in[1], a->n_head, true, a->dropout, a->head0,
                                                     a->heads_all)
                         : ut_attention_qkv_heads(ctx, q, k, v, in[1], a->n_head, true, a->dropout, a->head0,
                                                  a->heads_all);
    }
    y = row_out(ctx, l, y, &a->c_proj);
    x = ut_add(ctx, x, a->dropout > 0 ? ut_dropout(ctx, y, a->dropout) : y);
    const ut_mlp_layer *mlp = &l->mlp;
    ut_tensor *h = col_in(ctx, l, ut_layernorm_layer_forward(ctx, &l->ln_2, x));
    h = row_out(ctx, l, ut_linear_gelu(ctx, h, mlp->c_fc.w, mlp->c_fc.b), &mlp->c_proj);
    return ut_add(ctx, x, mlp->dropout > 0 ? ut_dropout(ctx, h, mlp->dropout) : h);
}

ut_tensor *ut_block_layer_forward(ut_ctx *ctx, const ut_block_layer *l, ut_tensor *x, bool checkpoint) {
    return ut_block_layer_forward_rows(ctx, l, x, NULL, checkpoint);
}

ut_tensor *ut_block_layer_forward_rows(ut_ctx *ctx, const ut_block_layer *l, ut_tensor *x, ut_tensor *rows,
                                       bool checkpoint) {
    ut_tensor *in[2] = {x, rows};
    int n = rows ? 2 : 1;
    return checkpoint ? ut_checkpoint(ctx, block_fn, (void *)l, in, n) : block_fn(ctx, (void *)l, in, n);
}

void ut_linear_layer_init_layout(ut_model *m, ut_linear_layer *l, const char *prefix, int64_t in, int64_t out,
                                 float std, int dim, const ut_model_layout *lay) {
    char err[256];
    if (lay && lay->tp_size > 1)
        UT_ASSERT(ut_linear_layer_init_part(m, l, prefix, in, out, std, dim, lay->tp_rank, lay->tp_size, 1, err,
                                            sizeof err) == 0);
    else
        ut_linear_layer_init_normal(m, l, prefix, in, out, std);
}

void ut_embedding_layer_init_layout(ut_model *m, ut_embedding_layer *l, const char *prefix, int64_t V, int64_t C,
                                    float std, const ut_model_layout *lay) {
    if (!lay || lay->tp_size <= 1) {
        ut_embedding_layer_init(m, l, prefix, V, C, std);
        return;
    }
    char buf[256], err[256];
    l->w = ut_param_add_part(m, pname(buf, sizeof buf, prefix, "weight"), 2, (int64_t[]){V, C},
                             (ut_init){UT_INIT_NORMAL, std}, 0, lay->tp_size, lay->tp_rank, 1, err, sizeof err);
    UT_ASSERT(l->w); /* the build checked that the vocabulary divides */
    m->tp_size = lay->tp_size;
}

void ut_embedding_layer_zero_row(const ut_embedding_layer *l, int64_t id, const ut_model_layout *lay) {
    ut_tensor *w = l->w;
    int64_t rows = w->ne[0], C = w->ne[1], row = id - (lay && lay->tp_size > 1 ? (int64_t)lay->tp_rank * rows : 0);
    if (row < 0 || row >= rows) return;
    size_t bytes = (size_t)ut_nelem(w) * sizeof(float);
    float *h = ut_malloc_check(bytes);
    if (!ut_tensor_get(w, h, bytes)) {
        memset(h + row * C, 0, (size_t)C * sizeof *h);
        ut_tensor_set(w, h, bytes);
    }
    ut_free(h);
}
