/* GPT-2 124M training-step benchmark.
 *
 * Builds "gpt2" through the registry (12 layers, 12 heads, n_embd 768, vocab
 * 50257, block 1024), batch 4 x sequence 64 of random tokens with next-token
 * targets from a fixed seed, AdamW (lr 3e-4, weight decay 0.1), and times full
 * training steps: forward + loss + backward + optimizer step with zero grad
 * (ut_optim_step_zero) + ctx reset, after 2 warm-up steps.
 *
 *   gpt2_step [--steps N] [--threads N] [--seq T] [--checkpoint] [--precision fp32|bf16|fp16]
 *             [--json]
 *
 * --seq sets the sequence length (default 64, at most the block size 1024).
 * --precision bf16 / fp16 runs the step under that autocast (train.precision;
 * no loss scaling: the step time is the same); --bf16 is --precision bf16.
 * The output names the path the low-precision matrix products take.
 *
 * Prints median/min step time, tokens/s, the peak activation memory of a step
 * (ut_ctx_peak_bytes after ut_ctx_reset_peak; under bf16/fp16 also autocast's
 * conversion scratch, ut_ctx_autocast_scratch_bytes, which lives outside the
 * arena, and the two added up) and the medians of the phases:
 * forward (forward + loss), backward, optimizer (step + zero grad + reset). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

#include "utrain/utrain.h"

enum { B = 4, WARMUP = 2 };

static double minimum(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

static void usage(FILE *f) {
    fprintf(f, "usage: gpt2_step [--steps N] [--threads N] [--seq T] [--checkpoint] "
               "[--precision fp32|bf16|fp16] [--json]\n");
}

int main(int argc, char **argv) {
    ut_blas_select_kernels(argv); /* may re-exec with OPENBLAS_CORETYPE set */
    long steps = 10, threads = 0, T = 64;
    bool checkpoint = false, json = false;
    ut_dtype prec = UT_F32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") || !strcmp(argv[i], "--threads") ||
            !strcmp(argv[i], "--seq")) {
            long *dst = !strcmp(argv[i], "--steps") ? &steps : !strcmp(argv[i], "--seq") ? &T : &threads;
            if (bench_parse_pos("gpt2_step", argv[i], i + 1 < argc ? argv[i + 1] : NULL, dst)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--bf16")) {
            prec = UT_BF16;
        } else if (!strcmp(argv[i], "--precision")) {
            const char *v = i + 1 < argc ? argv[++i] : "";
            prec = !strcmp(v, "fp32") ? UT_F32 : !strcmp(v, "bf16") ? UT_BF16 : !strcmp(v, "fp16") ? UT_F16 : UT_I32;
            if (prec == UT_I32) {
                fprintf(stderr, "gpt2_step: --precision takes fp32, bf16 or fp16, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(argv[i], "--checkpoint")) {
            checkpoint = true;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "gpt2_step: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (T > 1024) {
        fprintf(stderr, "gpt2_step: --seq %ld is above the block size 1024\n", T);
        return 2;
    }
    if (threads > 0) omp_set_num_threads((int)threads);
    int nthreads = omp_get_max_threads();

    ut_model *m = bench_gpt2_124m("gpt2_step", 1234);
    if (!m) return 1;
    m->checkpoint_activations = checkpoint;

    const float lr = 3e-4f;
    ut_optim *opt = bench_adamw(m, lr, 0.1f);
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = 1});
    ut_ctx_set_autocast(ctx, prec);
    const char *pname = prec == UT_BF16 ? "bf16" : prec == UT_F16 ? "fp16" : "fp32";
    const char *path = prec == UT_F32 ? "fp32 sgemm" : ut_autocast_matmul_path(UT_CPU, prec);

    /* random token stream: inputs are tokens [0, T), targets tokens [1, T] */
    ut_rng rng;
    ut_rng_seed(&rng, 42);
    int32_t *x = malloc(sizeof(int32_t) * B * T), *y = malloc(sizeof(int32_t) * B * T);
    int32_t *stream = malloc(sizeof(int32_t) * (T + 1));
    if (!x || !y || !stream) abort();
    for (int b = 0; b < B; b++) {
        for (int t = 0; t <= T; t++) stream[t] = (int32_t)(ut_rng_u64(&rng) % 50257u);
        memcpy(x + b * T, stream, sizeof(int32_t) * T);
        memcpy(y + b * T, stream + 1, sizeof(int32_t) * T);
    }
    free(stream);

    int total = WARMUP + (int)steps;
    double *t_step = calloc((size_t)steps, sizeof(double));
    double *t_fwd = calloc((size_t)steps, sizeof(double));
    double *t_bwd = calloc((size_t)steps, sizeof(double));
    double *t_opt = calloc((size_t)steps, sizeof(double));
    if (!t_step || !t_fwd || !t_bwd || !t_opt) abort();
    size_t peak = 0;
    float first_loss = 0, last_loss = 0;
    for (int s = 0; s < total; s++) {
        ut_ctx_reset_peak(ctx);
        double t0 = bench_now();
        ut_tensor *xt = ut_tensor_wrap(ctx, UT_I32, 2, (int64_t[]){B, T}, x);
        ut_tensor *yt = ut_tensor_wrap(ctx, UT_I32, 2, (int64_t[]){B, T}, y);
        /* the head and its loss as the trainer runs them: one op (UT_LINEAR_CE=0: two) */
        ut_tensor *loss = ut_model_forward_loss(m, ctx, xt, yt, NULL);
        if (!loss) {
            fprintf(stderr, "gpt2_step: %s\n", ut_ctx_error(ctx));
            return 1;
        }
        double t1 = bench_now();
        if (ut_backward(ctx, loss)) {
            fprintf(stderr, "gpt2_step: %s\n", ut_ctx_error(ctx));
            return 1;
        }
        double t2 = bench_now();
        ut_tensor_get(loss, &last_loss, sizeof last_loss);
        if (s == 0) first_loss = last_loss;
        size_t pk = ut_ctx_peak_bytes(ctx);
        ut_optim_step_zero(opt, lr); /* update, and zero the grads in the same pass */
        ut_ctx_reset(ctx);
        double t3 = bench_now();
        if (s == WARMUP - 1) ut_profile_ops_reset(); /* UT_PROFILE_OPS: the timed steps alone */
        if (s >= WARMUP) {
            int i = s - WARMUP;
            t_step[i] = t3 - t0;
            t_fwd[i] = t1 - t0;
            t_bwd[i] = t2 - t1;
            t_opt[i] = t3 - t2;
            if (pk > peak) peak = pk;
        }
    }
    if (!isfinite(last_loss)) {
        fprintf(stderr, "gpt2_step: loss is not finite (%g)\n", (double)last_loss);
        return 1;
    }

    size_t scratch = ut_ctx_autocast_scratch_bytes(ctx);
    int n = (int)steps;
    double med = bench_median(t_step, n), mn = minimum(t_step, n);
    double fwd = bench_median(t_fwd, n), bwd = bench_median(t_bwd, n), op = bench_median(t_opt, n);
    double toks = (double)(B * T) / med;
    long long nparams = (long long)m->params.numel;
    if (json) {
        printf("{\"impl\":\"utrain\",\"precision\":\"%s\",\"matmul_path\":\"%s\",\"threads\":%d,"
               "\"checkpoint\":%s,\"batch\":%d,\"seq\":%ld,"
               "\"steps\":%ld,\"params\":%lld,\"median_s\":%.6f,\"min_s\":%.6f,"
               "\"tokens_per_s\":%.1f,\"fwd_s\":%.6f,\"bwd_s\":%.6f,\"opt_s\":%.6f,"
               "\"peak_act_bytes\":%zu,\"autocast_scratch_bytes\":%zu,\"loss_first\":%.4f,\"loss_last\":%.4f}\n",
               pname, path, nthreads, checkpoint ? "true" : "false", B, T, steps, nparams, med, mn, toks, fwd,
               bwd, op, peak, scratch, (double)first_loss, (double)last_loss);
    } else {
        printf("utrain gpt2 124M step: %lld parameters, batch %d x seq %ld, AdamW, threads %d, %s%s\n",
               nparams, B, T, nthreads, pname, checkpoint ? ", activation checkpointing" : "");
        printf("  %s matmul: %s\n", pname, path);
        printf("  steps %ld (after %d warm-up)\n", steps, WARMUP);
        printf("  step median %8.1f ms   min %8.1f ms   %.0f tokens/s\n", 1e3 * med, 1e3 * mn, toks);
        printf("  forward+loss %6.1f ms   backward %6.1f ms   optim+zero+reset %6.1f ms (medians)\n",
               1e3 * fwd, 1e3 * bwd, 1e3 * op);
        printf("  peak activation memory %.1f MiB (%zu bytes)\n", (double)peak / (1 << 20), peak);
        if (scratch)
            printf("  autocast conversion scratch %.1f MiB; with the activations %.1f MiB\n",
                   (double)scratch / (1 << 20), (double)(peak + scratch) / (1 << 20));
        printf("  loss %.4f -> %.4f\n", (double)first_loss, (double)last_loss);
    }
    free(x);
    free(y);
    free(t_step);
    free(t_fwd);
    free(t_bwd);
    free(t_opt);
    ut_ctx_free(ctx);
    ut_optim_free(opt);
    ut_model_free(m);
    return 0;
}
