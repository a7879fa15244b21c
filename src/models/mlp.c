/* mlp: fully connected layers fc0..fcK with an activation between them.
 * Options: sizes (e.g. "784,128,10"), activation (relu|gelu|tanh|sigmoid),
 * dropout (after each hidden activation). Input (B, ...) is flattened from
 * dim 1; output logits (B, sizes[-1]); loss cross-entropy. */
#include <stdio.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/nn.h"

#define MLP_MAX_LAYERS 16

typedef struct {
    int nlayers;
    ut_linear_layer fc[MLP_MAX_LAYERS];
    ut_tensor *(*act)(ut_ctx *, ut_tensor *);
    float dropout;
} mlp;

static ut_tensor *mlp_forward(ut_model *m, ut_ctx *ctx, ut_tensor *x) {
    const mlp *net = m->impl;
    if (x && x->ndim > 2) x = ut_flatten(ctx, x, 1);
    for (int i = 0; i < net->nlayers; i++) {
        x = ut_linear_layer_forward(ctx, &net->fc[i], x);
        if (i + 1 < net->nlayers) {
            x = net->act(ctx, x);
            if (net->dropout > 0) x = ut_dropout(ctx, x, net->dropout);
        }
    }
    return x;
}

ut_model *ut_mlp_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    static const char *const known[] = {"sizes", "activation", "dropout", NULL};
    long long sizes[MLP_MAX_LAYERS + 1];
    int count;
    double dropout;
    if (ut_kv_check_keys(opts, known, "model mlp", err, n) ||
        ut_kv_ints(opts, "sizes", sizes, MLP_MAX_LAYERS + 1, &count, err, n) ||
        ut_kv_float(opts, "dropout", 0.0, &dropout, err, n))
        return NULL;
    if (count == 0) {
        sizes[0] = 784, sizes[1] = 128, sizes[2] = 10;
        count = 3;
    }
    if (count < 2) return snprintf(err, n, "option 'sizes': need at least 2 sizes (input, output)"), NULL;
    for (int i = 0; i < count; i++)
        if (sizes[i] <= 0) return snprintf(err, n, "option 'sizes': sizes must be positive"), NULL;
    if (dropout < 0 || dropout >= 1) return snprintf(err, n, "option 'dropout': must be in [0, 1)"), NULL;
    const char *act = ut_kv_get(opts, "activation");
    ut_tensor *(*fn)(ut_ctx *, ut_tensor *) = ut_relu;
    if (act && !strcmp(act, "gelu")) fn = ut_gelu;
    else if (act && !strcmp(act, "tanh")) fn = ut_tanh;
    else if (act && !strcmp(act, "sigmoid")) fn = ut_sigmoid;
    else if (act && strcmp(act, "relu"))
        return snprintf(err, n, "option 'activation': '%s' is not relu, gelu, tanh or sigmoid", act), NULL;

    double numel = 0;
    for (int i = 0; i + 1 < count; i++) numel += (double)sizes[i] * sizes[i + 1] + sizes[i + 1];
    if (ut_memory_check(8 * numel, ut_fmt("mlp (sizes: %.3g parameters)", numel), err, n))
        return NULL;
    ut_model *m = ut_model_new("mlp");
    mlp *net = ut_calloc_check(1, sizeof *net);
    net->nlayers = count - 1;
    net->act = fn;
    net->dropout = (float)dropout;
    for (int i = 0; i < net->nlayers; i++) {
        char name[32];
        snprintf(name, sizeof name, "fc%d", i);
        ut_linear_layer_init(m, &net->fc[i], name, sizes[i], sizes[i + 1], true);
    }
    m->impl = net;
    m->free_impl = ut_free;
    m->forward = mlp_forward;
    m->loss = ut_model_class_loss;
    ut_model_finalize(m, seed);
    return m;
}
