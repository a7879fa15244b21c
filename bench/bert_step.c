/* BERT-base-sized sequence-classification training-step benchmark.
 *
 * Builds "bert" through the registry with random weights (BERT-base: 12
 * layers, hidden 768, 12 heads, intermediate 3072, vocab 30522, 512
 * positions, 2 token types; 2 labels; dropout 0.1 on, as in training),
 * batch 32 x 128 random tokens (token types 0, attention mask all ones)
 * with random 0/1 labels from a fixed seed, AdamW (lr 5e-5, weight decay
 * 0.01, none on biases and LayerNorm weights), and times full training steps:
 * forward + loss + backward + optimizer step with zero grad + ctx reset,
 * after 2 warm-up steps.
 *
 *   bert_step [--steps N] [--threads N] [--batch B] [--seq T] [--bf16] [--tf32] [--mlm]
 *             [--device cpu|cuda|sim] [--json]
 *
 * --mlm: the masked-LM step instead (model.task masked_lm: BertForMaskedLM's
 * head with the decoder tied to the word embedding): 15% of the positions
 * (drawn from a fixed seed) labeled with their token, -100 elsewhere, the
 * step as the trainer runs it (ut_model_forward_loss: the labeled rows
 * alone through the head, the decoder fused into the loss).
 *
 * --bf16 runs the step under bf16 autocast (train.precision: bf16); --tf32
 * the float32 products in TF32 (UT_CUDA_TF32=1, the GPU only). --device
 * builds the model, its optimizer and the batch on that device; a step then
 * ends when the device has finished it (and the phase times only say when
 * the host queued each phase: the loss read after backward waits for the
 * device, the rest is queued). The peak of the step's activation memory
 * (ut_ctx_peak_bytes) is reported too.
 * Prints median/min step time, tokens/s and the medians of the phases:
 * forward (forward + loss), backward, optimizer (step + zero grad + reset). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "bench_util.h"

#include "utrain/utrain.h"

enum { WARMUP = 2, V = 30522 };

typedef struct {
    long steps, threads, B, T;
    bool bf16, tf32, json, mlm;
    ut_device dev;
} opts;

static void usage(FILE *f) {
    fprintf(f, "usage: bert_step [--steps N] [--threads N] [--batch B] [--seq T] [--bf16] [--tf32] [--mlm] "
               "[--device cpu|cuda|sim] [--json]\n");
}

/* 0 ok, 1 help printed, 2 bad usage */
static int parse_args(int argc, char **argv, opts *o) {
    *o = (opts){.steps = 5, .B = 32, .T = 128};
    static const char *const num[] = {"--steps", "--threads", "--batch", "--seq"};
    for (int i = 1; i < argc; i++) {
        long *dst[] = {&o->steps, &o->threads, &o->B, &o->T};
        int k = 0;
        while (k < 4 && strcmp(argv[i], num[k])) k++;
        if (k < 4) {
            if (bench_parse_pos("bert_step", argv[i], i + 1 < argc ? argv[i + 1] : NULL, dst[k])) return 2;
            i++;
        } else if (!strcmp(argv[i], "--bf16")) {
            o->bf16 = true;
        } else if (!strcmp(argv[i], "--tf32")) {
            o->tf32 = true;
        } else if (!strcmp(argv[i], "--mlm")) {
            o->mlm = true;
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "cpu")) o->dev = UT_CPU;
            else if (!strcmp(v, "cuda")) o->dev = UT_CUDA;
            else if (!strcmp(v, "sim")) o->dev = UT_SIM;
            else {
                fprintf(stderr, "bert_step: --device is cpu, cuda or sim, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(argv[i], "--json")) {
            o->json = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 1;
        } else {
            fprintf(stderr, "bert_step: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (o->T > 512) {
        fprintf(stderr, "bert_step: --seq %ld is above max_position_embeddings 512\n", o->T);
        return 2;
    }
    return 0;
}

static ut_model *build_bert(ut_device dev, bool mlm) {
    ut_kv *kv = ut_kv_new();
    if (!mlm) ut_kv_set(kv, "num_labels", "2");
    ut_kv_set(kv, "task", mlm ? "masked_lm" : "sequence_classification");
    char err[512];
    ut_model *m = ut_model_create_on("bert", kv, 1234, dev, err, sizeof err); /* BERT-base defaults */
    ut_kv_free(kv);
    if (!m) fprintf(stderr, "bert_step: %s\n", err);
    return m;
}

/* x (B, 3, T): random ids, token types 0, mask 1; y (B) random 0/1, or
 * (mlm) y (B, T): a random id at 15% of the positions, -100 elsewhere */
static void make_batch(int32_t *x, int32_t *y, long B, long T, bool mlm) {
    ut_rng rng;
    ut_rng_seed(&rng, 42);
    for (long b = 0; b < B; b++) {
        for (long t = 0; t < T; t++) {
            x[(b * 3) * T + t] = (int32_t)(ut_rng_u64(&rng) % (uint64_t)V);
            x[(b * 3 + 1) * T + t] = 0;
            x[(b * 3 + 2) * T + t] = 1;
            if (mlm) y[b * T + t] = ut_rng_u64(&rng) % 100u < 15 ? (int32_t)(ut_rng_u64(&rng) % (uint64_t)V) : -100;
        }
        if (!mlm) y[b] = (int32_t)(ut_rng_u64(&rng) % 2u);
    }
}

typedef struct {
    double *step, *fwd, *bwd, *opt;
    float first, last;
    size_t peak;
} timings;

/* one training step; its phase times go to tm at index i (i < 0: warm-up) */
static int step(ut_model *m, ut_ctx *ctx, ut_optim *opt, float lr, int32_t *x, int32_t *y,
                const opts *o, timings *tm, int i) {
    ut_ctx_reset_peak(ctx);
    double t0 = bench_now();
    /* host arrays are wrapped on the CPU, copied in on a device */
    bool cpu = o->dev == UT_CPU;
    ut_tensor *xt = cpu ? ut_tensor_wrap(ctx, UT_I32, 3, (int64_t[]){o->B, 3, o->T}, x)
                        : ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){o->B, 3, o->T}, x);
    int64_t yne[2] = {o->B, o->T};
    int yd = o->mlm ? 2 : 1;
    ut_tensor *yt = cpu ? ut_tensor_wrap(ctx, UT_I32, yd, yne, y) : ut_tensor_from(ctx, UT_I32, yd, yne, y);
    ut_tensor *loss = o->mlm ? ut_model_forward_loss(m, ctx, xt, yt, NULL)
                             : ut_model_loss(m, ctx, ut_model_forward(m, ctx, xt), yt);
    if (!loss) return fprintf(stderr, "bert_step: %s\n", ut_ctx_error(ctx)), -1;
    double t1 = bench_now();
    if (ut_backward(ctx, loss)) return fprintf(stderr, "bert_step: %s\n", ut_ctx_error(ctx)), -1;
    double t2 = bench_now();
    ut_tensor_get(loss, &tm->last, sizeof tm->last);
    if (i == -WARMUP) tm->first = tm->last;
    size_t pk = ut_ctx_peak_bytes(ctx);
    if (pk > tm->peak) tm->peak = pk;
    ut_optim_step_zero(opt, lr);
    ut_ctx_reset(ctx);
    if (!cpu) ut_backend_get(o->dev)->stream_sync(NULL); /* the optimizer's kernels done */
    double t3 = bench_now();
    if (i >= 0) {
        tm->step[i] = t3 - t0;
        tm->fwd[i] = t1 - t0;
        tm->bwd[i] = t2 - t1;
        tm->opt[i] = t3 - t2;
    }
    return 0;
}

static void report(const opts *o, timings *tm, long long nparams, int nthreads) {
    int n = (int)o->steps;
    double med = bench_median(tm->step, n), mn = tm->step[0]; /* sorted by the median */
    double fwd = bench_median(tm->fwd, n), bwd = bench_median(tm->bwd, n), op = bench_median(tm->opt, n);
    double toks = (double)(o->B * o->T) / med;
    const char *prec = o->bf16 ? "bf16" : o->tf32 ? "tf32" : "fp32";
    if (o->json) {
        printf("{\"impl\":\"utrain\",\"device\":\"%s\",\"precision\":\"%s\",\"threads\":%d,\"batch\":%ld,"
               "\"seq\":%ld,\"steps\":%ld,\"params\":%lld,\"median_s\":%.6f,\"min_s\":%.6f,\"tokens_per_s\":%.1f,"
               "\"fwd_s\":%.6f,\"bwd_s\":%.6f,\"opt_s\":%.6f,\"loss_first\":%.4f,\"loss_last\":%.4f,"
               "\"activation_peak_bytes\":%zu}\n",
               ut_device_name(o->dev), prec, nthreads, o->B, o->T, o->steps, nparams, med, mn, toks, fwd, bwd, op,
               (double)tm->first, (double)tm->last, tm->peak);
        return;
    }
    printf("utrain bert-base %s step (%s, %s): %lld parameters, batch %ld x seq %ld, AdamW, threads %d\n",
           o->mlm ? "masked-LM" : "classification", prec, ut_device_name(o->dev), nparams, o->B, o->T, nthreads);
    printf("  steps %ld (after %d warm-up)\n", o->steps, WARMUP);
    printf("  step median %8.1f ms   min %8.1f ms   %.0f tokens/s\n", 1e3 * med, 1e3 * mn, toks);
    printf("  forward+loss %6.1f ms   backward %6.1f ms   optim+zero+reset %6.1f ms (medians)\n",
           1e3 * fwd, 1e3 * bwd, 1e3 * op);
    printf("  loss %.4f -> %.4f; activation peak %.1f MiB\n", (double)tm->first, (double)tm->last,
           (double)tm->peak / (1 << 20));
}

int main(int argc, char **argv) {
    ut_blas_select_kernels(argv); /* may re-exec with OPENBLAS_CORETYPE set */
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : 2;
    if (o.threads > 0) omp_set_num_threads((int)o.threads);
    char why[256];
    if (ut_backend_check(o.dev, why, sizeof why)) {
        fprintf(stderr, "bert_step: %s\n", why);
        return 1;
    }
    if (o.tf32) setenv("UT_CUDA_TF32", "1", 1);
    ut_model *m = build_bert(o.dev, o.mlm);
    if (!m) return 1;
    const float lr = 5e-5f;
    ut_optim *opt = bench_adamw_on(m, lr, 0.01f, o.dev);
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = 1, .device = o.dev});
    if (o.bf16) ut_ctx_set_autocast(ctx, UT_BF16);
    ut_ctx_set_training(ctx, true); /* dropout on, as in a training run */
    int32_t *x = malloc(sizeof(int32_t) * (size_t)(o.B * 3 * o.T)), *y = malloc(sizeof(int32_t) * (size_t)(o.B * o.T));
    timings tm = {calloc((size_t)o.steps, sizeof(double)), calloc((size_t)o.steps, sizeof(double)),
                  calloc((size_t)o.steps, sizeof(double)), calloc((size_t)o.steps, sizeof(double)), 0, 0, 0};
    if (!x || !y || !tm.step || !tm.fwd || !tm.bwd || !tm.opt) abort();
    make_batch(x, y, o.B, o.T, o.mlm);
    rc = 0;
    for (int i = -WARMUP; i < (int)o.steps && !rc; i++) {
        if (i == 0) ut_profile_ops_reset(); /* UT_PROFILE_OPS: the timed steps alone */
        rc = step(m, ctx, opt, lr, x, y, &o, &tm, i);
    }
    if (!rc && !isfinite(tm.last)) {
        fprintf(stderr, "bert_step: loss is not finite (%g)\n", (double)tm.last);
        rc = 1;
    }
    if (!rc) report(&o, &tm, (long long)m->params.numel, omp_get_max_threads());
    free(x);
    free(y);
    free(tm.step);
    free(tm.fwd);
    free(tm.bwd);
    free(tm.opt);
    ut_ctx_free(ctx);
    ut_optim_free(opt);
    ut_model_free(m);
    return rc ? 1 : 0;
}
