/* GPT-2 124M training step on one device, built from utrain's ops: the
 * graph of utrain's "gpt2" model (learned positions, pre-LN blocks, fused
 * qkv, causal attention, GELU (tanh), head tied to the token embedding,
 * mean cross-entropy; the MLP's linear with its GELU and the head with its
 * loss each one op, as the model and the trainer run them:
 * UT_LINEAR_GELU=0 and UT_LINEAR_CE=0 make them two), parameters and
 * gradients in one flat buffer of the
 * device, AdamW over the whole buffer (weight decay on every parameter; the
 * step's time does not depend on which) that also zeroes the gradients.
 *
 *   gpu_gpt2_step [--device cuda|cpu|sim] [--batch B] [--seq T] [--layers L] [--steps N] [--tf32] [--bf16] [--json]
 *
 * --bf16 runs the step under bf16 autocast (train.precision: bf16), with
 * AdamW writing the weights' bf16 copies for the next forward as the
 * trainer has it do (ut_optim_set_copies16).
 *
 * The CUDA backend's bare step, measured against PyTorch's
 * (bench/torch_gpu_gpt2_step.py, the same graph and shapes) and against the
 * trainer's own step (scripts/gpu-check.sh trainer). Timing: 2 warm-up steps, then the median over N
 * steps, each ending when the loss has been read back to the host. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/backend/backend.h"
#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/tensor.h"

#define WARMUP 2
enum { V = 50257, C = 768, NH = 12, BLOCK = 1024 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* one parameter: its place in the flat buffers and its shape */
typedef struct { int64_t off, ne[2]; int ndim; float std; } pdesc;
typedef struct { pdesc ln1w, ln1b, qkvw, qkvb, pw, pb, ln2w, ln2b, fcw, fcb, f2w, f2b; } blockp;

static int64_t total;
static pdesc add(int ndim, int64_t a, int64_t b, float std) {
    pdesc p = {.off = total, .ndim = ndim, .ne = {a, b}, .std = std};
    total += ndim == 1 ? a : a * b;
    return p;
}

static float *g_p, *g_g; /* device flat parameters and gradients */
static ut_tensor *param(ut_ctx *ctx, const pdesc *d) {
    ut_tensor *t = ut_tensor_wrap(ctx, UT_F32, d->ndim, d->ne, g_p + d->off);
    t->grad = g_g + d->off;
    ut_tensor_set_requires_grad(t, true);
    return t;
}

int main(int argc, char **argv) {
    long B = 8, T = 1024, L = 12, steps = 10;
    bool json = false, tf32 = false, bf16 = false;
    ut_device dev = UT_CUDA;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--batch")) B = atol(v), i++;
        else if (!strcmp(a, "--seq")) T = atol(v), i++;
        else if (!strcmp(a, "--layers")) L = atol(v), i++;
        else if (!strcmp(a, "--steps")) steps = atol(v), i++;
        else if (!strcmp(a, "--device")) dev = !strcmp(v, "cpu") ? UT_CPU : !strcmp(v, "sim") ? UT_SIM : UT_CUDA, i++;
        else if (!strcmp(a, "--tf32")) tf32 = true;
        else if (!strcmp(a, "--bf16")) bf16 = true;
        else if (!strcmp(a, "--json")) json = true;
        else {
            fprintf(stderr, "usage: gpu_gpt2_step [--device cuda|cpu|sim] [--batch B] [--seq T] [--layers L] "
                            "[--steps N] [--tf32] [--bf16] [--json]\n");
            return 2;
        }
    }
    if (B < 1 || T < 1 || T > BLOCK || L < 1 || steps < 1) {
        fprintf(stderr, "gpu_gpt2_step: batch, layers and steps must be positive and seq in 1..%d\n", BLOCK);
        return 2;
    }
    char why[256];
    if (ut_backend_check(dev, why, sizeof why)) {
        fprintf(stderr, "gpu_gpt2_step: %s\n", why);
        return 1;
    }
    if (tf32) setenv("UT_CUDA_TF32", "1", 1);
    const ut_backend *be = ut_backend_get(dev);

    float proj_std = 0.02f / sqrtf(2.0f * (float)L);
    pdesc wte = add(2, V, C, 0.02f), wpe = add(2, BLOCK, C, 0.02f);
    blockp *bp = calloc((size_t)L, sizeof *bp);
    for (long l = 0; l < L; l++) {
        bp[l].ln1w = add(1, C, 0, -1), bp[l].ln1b = add(1, C, 0, 0);
        bp[l].qkvw = add(2, 3 * C, C, 0.02f), bp[l].qkvb = add(1, 3 * C, 0, 0);
        bp[l].pw = add(2, C, C, proj_std), bp[l].pb = add(1, C, 0, 0);
        bp[l].ln2w = add(1, C, 0, -1), bp[l].ln2b = add(1, C, 0, 0);
        bp[l].fcw = add(2, 4 * C, C, 0.02f), bp[l].fcb = add(1, 4 * C, 0, 0);
        bp[l].f2w = add(2, C, 4 * C, proj_std), bp[l].f2b = add(1, C, 0, 0);
    }
    pdesc lnfw = add(1, C, 0, -1), lnfb = add(1, C, 0, 0);

    /* initial values on the host: normal(0, std), ones (std -1), zeros (std 0) */
    float *h = malloc(sizeof(float) * (size_t)total);
    ut_rng rng;
    ut_rng_seed(&rng, 1234);
    const pdesc *all[] = {&wte, &wpe};
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < all[k]->ne[0] * all[k]->ne[1]; i++) h[all[k]->off + i] = 0.02f * ut_rng_normal(&rng);
    for (long l = 0; l < L; l++) {
        pdesc *ps = &bp[l].ln1w;
        for (int k = 0; k < 12; k++) {
            int64_t n = ps[k].ndim == 1 ? ps[k].ne[0] : ps[k].ne[0] * ps[k].ne[1];
            for (int64_t i = 0; i < n; i++)
                h[ps[k].off + i] = ps[k].std < 0 ? 1.0f : ps[k].std == 0 ? 0.0f : ps[k].std * ut_rng_normal(&rng);
        }
    }
    for (int64_t i = 0; i < C; i++) h[lnfw.off + i] = 1.0f, h[lnfb.off + i] = 0.0f;
    size_t bytes = sizeof(float) * (size_t)total;
    g_p = be->pages_alloc(bytes);
    g_g = be->pages_alloc(bytes);
    float *m = be->pages_alloc(bytes), *v2 = be->pages_alloc(bytes);
    be->copy(g_p, h, bytes, UT_COPY_H2D);
    free(h);

    /* tokens: inputs [0, T), targets [1, T] of random streams; positions 0..T-1 */
    int32_t *x = malloc(sizeof(int32_t) * (size_t)(B * T)), *y = malloc(sizeof(int32_t) * (size_t)(B * T));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T);
    ut_rng_seed(&rng, 42);
    for (long b = 0; b < B; b++) {
        int32_t prev = (int32_t)(ut_rng_u64(&rng) % V);
        for (long t = 0; t < T; t++) {
            int32_t nx = (int32_t)(ut_rng_u64(&rng) % V);
            x[b * T + t] = prev, y[b * T + t] = nx, prev = nx;
        }
    }
    for (long t = 0; t < T; t++) pos[t] = (int32_t)t;

    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = 1, .device = dev});
    if (bf16) ut_ctx_set_autocast(ctx, UT_BF16);
    uint16_t *p16 = bf16 ? be->alloc((size_t)total * sizeof(uint16_t)) : NULL;
    const char *prec = bf16 ? "bf16" : tf32 ? "tf32" : "fp32";
    ut_optim_consts k = {.adamw = true, .one_m_b1 = 0.1f, .beta2 = 0.999f, .one_m_b2 = 0.001f, .eps = 1e-8f};
    const float lr = 3e-4f, wd = 0.1f;
    int total_steps = WARMUP + (int)steps;
    double *ts = calloc((size_t)steps, sizeof(double));
    float first = 0, last = 0;
    size_t peak = 0;
    double step_flops = 0; /* utrain's count of a step's model FLOPs (ut_ctx_flops) */
    for (int s = 0; s < total_steps; s++) {
        ut_ctx_reset_peak(ctx);
        double t0 = now(), f0 = ut_ctx_flops(ctx);
        ut_tensor *xt = ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){B, T}, x);
        ut_tensor *yt = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){B * T}, y);
        ut_tensor *pt = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){T}, pos);
        ut_tensor *W = param(ctx, &wte);
        ut_tensor *hcur = ut_add(ctx, ut_embedding(ctx, xt, W), ut_embedding(ctx, pt, param(ctx, &wpe)));
        for (long l = 0; l < L; l++) {
            blockp *q = &bp[l];
            ut_tensor *a = ut_layernorm(ctx, hcur, param(ctx, &q->ln1w), param(ctx, &q->ln1b), 1e-5f);
            a = ut_attention(ctx, ut_linear(ctx, a, param(ctx, &q->qkvw), param(ctx, &q->qkvb)), NH);
            hcur = ut_add(ctx, hcur, ut_linear(ctx, a, param(ctx, &q->pw), param(ctx, &q->pb)));
            ut_tensor *f = ut_layernorm(ctx, hcur, param(ctx, &q->ln2w), param(ctx, &q->ln2b), 1e-5f);
            f = ut_linear_gelu(ctx, f, param(ctx, &q->fcw), param(ctx, &q->fcb)); /* one op (UT_LINEAR_GELU) */
            hcur = ut_add(ctx, hcur, ut_linear(ctx, f, param(ctx, &q->f2w), param(ctx, &q->f2b)));
        }
        ut_tensor *o = ut_layernorm(ctx, hcur, param(ctx, &lnfw), param(ctx, &lnfb), 1e-5f);
        /* the tied head and the loss in one op, as the trainer runs GPT-2 (UT_LINEAR_CE) */
        ut_tensor *loss = ut_linear_cross_entropy(ctx, ut_reshape(ctx, o, 2, (int64_t[]){B * T, C}), W, NULL, yt, -100);
        if (!loss || ut_backward(ctx, loss)) {
            fprintf(stderr, "gpu_gpt2_step: %s\n", ut_ctx_error(ctx));
            return 1;
        }
        float lv = 0;
        ut_tensor_get(loss, &lv, sizeof lv);
        size_t pk = ut_ctx_peak_bytes(ctx);
        /* AdamW step t = s + 1 over the whole buffer, zeroing the gradients */
        double bc1 = 1.0 - pow(0.9, s + 1), bc2 = 1.0 - pow(0.999, s + 1);
        k.step_size = (float)(lr / bc1), k.inv_bc2_sqrt = (float)(1.0 / sqrt(bc2));
        ut_optim_run all = {0, total, true};
        /* under autocast the step writes the weights' bf16 copies, which the
         * next forward reads (the trainer's way: train.precision bf16) */
        ut_optim_buffers ob = {.params = g_p, .grads = g_g, .state = {m, v2}, .lo = 0, .hi = total,
                               .runs = &all, .nruns = 1, .nstate = 2, .p16 = p16, .p16_dtype = UT_BF16};
        k.decay_mul = 1.0f - lr * wd;
        be->optim_step(&ob, &k, true);
        if (p16) ut_ctx_set_param_copies(ctx, g_p, total, p16, UT_BF16);
        ut_ctx_reset(ctx);
        be->stream_sync(NULL);
        double t1 = now();
        if (s == 0) first = lv;
        step_flops = ut_ctx_flops(ctx) - f0;
        last = lv;
        if (s >= WARMUP) ts[s - WARMUP] = t1 - t0, peak = pk > peak ? pk : peak;
        if (s == WARMUP - 1) ut_profile_ops_reset(); /* UT_PROFILE_OPS: the timed steps alone */
    }
    qsort(ts, (size_t)steps, sizeof *ts, cmpd);
    double med = steps % 2 ? ts[steps / 2] : 0.5 * (ts[steps / 2 - 1] + ts[steps / 2]);
    /* FLOPs as the usual MFU count: 6 per parameter per token (position embeddings left out,
     * the tied head counted through wte) plus attention's 12 L T C per token */
    double tok = (double)(B * T), flops = 6.0 * (double)(total - BLOCK * C) * tok + 12.0 * L * T * C * tok;
    if (!isfinite(last)) {
        fprintf(stderr, "gpu_gpt2_step: loss is not finite (%g)\n", (double)last);
        return 1;
    }
    /* MFU as the trainer logs it: the counted FLOPs (causal attention's pairs, not T^2) over the
     * device's peak for these products */
    char peak_what[256] = "no peak known";
    double peak_rate = be->peak_flops ? be->peak_flops(bf16 ? UT_PEAK_16 : tf32 ? UT_PEAK_TF32 : UT_PEAK_FP32,
                                                       peak_what, sizeof peak_what)
                                      : 0;
    double mfu = peak_rate > 0 ? step_flops / med / peak_rate : 0;
    if (json)
        printf("{\"impl\":\"utrain\",\"device\":\"%s\",\"precision\":\"%s\",\"batch\":%ld,\"seq\":%ld,\"layers\":%ld,"
               "\"params\":%lld,\"steps\":%ld,\"median_s\":%.6f,\"tokens_per_s\":%.1f,\"tflops\":%.2f,"
               "\"model_tflops\":%.2f,\"mfu\":%.4f,\"peak_act_bytes\":%zu,\"loss_first\":%.4f,\"loss_last\":%.4f}\n",
               ut_device_name(dev), prec, B, T, L, (long long)total, steps, med, tok / med,
               flops / med * 1e-12, step_flops / med * 1e-12, mfu, peak, (double)first, (double)last);
    else
        printf("utrain gpt2 step on %s (%s): batch %ld x seq %ld, %ld layers, %lld parameters\n"
               "  step median %.1f ms, %.0f tokens/s, %.1f TFLOP/s, peak activations %.2f GiB, loss %.4f -> %.4f\n"
               "  model FLOPs as the trainer counts them: %.1f TFLOP/s, MFU %.1f%% (%s)\n",
               ut_device_name(dev), prec, B, T, L, (long long)total, 1e3 * med, tok / med,
               flops / med * 1e-12, (double)peak / (1 << 30), (double)first, (double)last,
               step_flops / med * 1e-12, 100 * mfu, peak_what);
    ut_ctx_free(ctx);
    be->pages_free(g_p, bytes), be->pages_free(g_g, bytes), be->pages_free(m, bytes), be->pages_free(v2, bytes);
    if (p16) be->free(p16);
    free(x), free(y), free(pos), free(ts), free(bp);
    return 0;
}
