/* cnn: the classic PyTorch MNIST example network.
 *   conv1 (C->32, 3x3) relu, conv2 (32->64, 3x3) relu, max_pool 2, dropout 0.25,
 *   flatten, fc1 (64*12*12 -> 128) relu, dropout 0.5, fc2 (128 -> classes), log_softmax.
 * Options: in_channels (1), image_size (28), num_classes (10), dropout1 (0.25),
 * dropout2 (0.5). Input (B, C, S, S); output log-probabilities (B, classes);
 * loss nll. */
#include <stdio.h>

#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/nn.h"

typedef struct {
    ut_conv2d_layer conv1, conv2;
    ut_linear_layer fc1, fc2;
    float dropout1, dropout2;
} cnn;

static ut_tensor *cnn_forward(ut_model *m, ut_ctx *ctx, ut_tensor *x) {
    const cnn *net = m->impl;
    x = ut_conv2d_layer_forward_relu(ctx, &net->conv1, x);
    /* conv2, its ReLU and the pooling in one op: the 24x24 activation is never stored */
    const ut_conv2d_layer *c2 = &net->conv2;
    x = ut_dropout(ctx, ut_conv2d_relu_maxpool2(ctx, x, c2->w, c2->b, c2->stride, c2->padding), net->dropout1);
    x = ut_relu(ctx, ut_linear_layer_forward(ctx, &net->fc1, ut_flatten(ctx, x, 1)));
    x = ut_dropout(ctx, x, net->dropout2);
    return ut_log_softmax(ctx, ut_linear_layer_forward(ctx, &net->fc2, x));
}

static ut_tensor *cnn_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logp, ut_tensor *targets) {
    (void)m;
    return ut_nll_loss(ctx, logp, targets, -100);
}

ut_model *ut_cnn_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    static const char *const known[] = {"in_channels", "image_size", "num_classes",
                                        "dropout1",    "dropout2",   NULL};
    long long in_ch, size, classes;
    double d1, d2;
    if (ut_kv_check_keys(opts, known, "model cnn", err, n) ||
        ut_kv_int(opts, "in_channels", 1, &in_ch, err, n) ||
        ut_kv_int(opts, "image_size", 28, &size, err, n) ||
        ut_kv_int(opts, "num_classes", 10, &classes, err, n) ||
        ut_kv_float(opts, "dropout1", 0.25, &d1, err, n) ||
        ut_kv_float(opts, "dropout2", 0.5, &d2, err, n))
        return NULL;
    if (in_ch < 1 || classes < 1) return snprintf(err, n, "cnn: in_channels and num_classes must be >= 1"), NULL;
    if (size < 6) return snprintf(err, n, "option 'image_size': %lld is too small (at least 6)", size), NULL;
    if (d1 < 0 || d1 >= 1 || d2 < 0 || d2 >= 1) return snprintf(err, n, "cnn: dropout must be in [0, 1)"), NULL;
    int64_t pooled = (size - 4) / 2;

    double numel = 288.0 * in_ch + 18528 + 8192.0 * pooled * pooled + 129.0 * classes;
    if (ut_memory_check(8 * numel, ut_fmt("cnn (in_channels %lld, image_size %lld, num_classes "
                                         "%lld: %.3g parameters)", in_ch, size, classes, numel),
                        err, n))
        return NULL;
    ut_model *m = ut_model_new("cnn");
    cnn *net = ut_calloc_check(1, sizeof *net);
    ut_conv2d_layer_init(m, &net->conv1, "conv1", in_ch, 32, 3, 1, 0);
    ut_conv2d_layer_init(m, &net->conv2, "conv2", 32, 64, 3, 1, 0);
    ut_linear_layer_init(m, &net->fc1, "fc1", 64 * pooled * pooled, 128, true);
    ut_linear_layer_init(m, &net->fc2, "fc2", 128, classes, true);
    net->dropout1 = (float)d1;
    net->dropout2 = (float)d2;
    m->impl = net;
    m->free_impl = ut_free;
    m->forward = cnn_forward;
    m->loss = cnn_loss;
    ut_model_finalize(m, seed);
    return m;
}
