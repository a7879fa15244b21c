/* Sequence-to-sequence benchmark: a training step and generation speed of a
 * T5-small-sized or BART-base-sized model with random weights.
 *
 *   seq2seq_step --model t5|bart [--steps N] [--threads N] [--batch B] [--src S] [--tgt T]
 *                [--new K] [--beams N] [--json]
 *
 * t5: T5 v1.0 small (d_model 512, 6 + 6 layers, 8 heads of 64, d_ff 2048,
 * ReLU, vocab 32128, 32 buckets); bart: BART-base (d_model 768, 6 + 6
 * layers, 12 heads, ffn 3072, vocab 50265). Dropout 0.1 on while training.
 * Training: batch B of random sources of S tokens and targets of T tokens
 * (no padding), AdamW (lr 1e-4, weight decay 0.01), forward + loss +
 * backward + optimizer step, median of N steps after 2 warm-up ones.
 * Generation: the same B sources, K new tokens each (end of sequence banned
 * until then: min_new_tokens K), greedy (--beams 1) or beam search, with
 * the key/value cache; the median of N generations after one warm-up;
 * tokens/s = B * K / time. Prints one JSON line with --json. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#include "utrain/utrain.h"

enum { WARMUP = 2 };

typedef struct {
    long steps, threads, B, S, T, K, beams;
    bool t5, json;
} opts;

static void usage(FILE *f) {
    fprintf(f, "usage: seq2seq_step --model t5|bart [--steps N] [--threads N] [--batch B] [--src S] [--tgt T] "
               "[--new K] [--beams N] [--json]\n");
}

static int parse_args(int argc, char **argv, opts *o) {
    *o = (opts){.steps = 5, .B = 8, .S = 128, .T = 32, .K = 32, .beams = 1, .t5 = true};
    static const char *const num[] = {"--steps", "--threads", "--batch", "--src", "--tgt", "--new", "--beams"};
    for (int i = 1; i < argc; i++) {
        long *dst[] = {&o->steps, &o->threads, &o->B, &o->S, &o->T, &o->K, &o->beams};
        int k = 0;
        while (k < 7 && strcmp(argv[i], num[k])) k++;
        if (k < 7) {
            if (bench_parse_pos("seq2seq_step", argv[i], i + 1 < argc ? argv[i + 1] : NULL, dst[k])) return 2;
            i++;
        } else if (!strcmp(argv[i], "--model") && i + 1 < argc && (!strcmp(argv[i + 1], "t5") || !strcmp(argv[i + 1], "bart"))) {
            o->t5 = !strcmp(argv[++i], "t5");
        } else if (!strcmp(argv[i], "--json")) {
            o->json = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 1;
        } else {
            fprintf(stderr, "seq2seq_step: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    return 0;
}

static ut_model *build(const opts *o) {
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "task", "seq2seq");
    if (!o->t5) ut_kv_set(kv, "dropout", "0.1"); /* BART-base's defaults otherwise */
    char err[512];
    ut_model *m = ut_model_create(o->t5 ? "t5" : "bart", kv, 1234, err, sizeof err);
    ut_kv_free(kv);
    if (!m) fprintf(stderr, "seq2seq_step: %s\n", err);
    return m;
}

/* x (B, 4, L): random source ids (S), mask, target ids (T), mask; y (B, T) */
static void make_batch(const opts *o, int64_t V, int64_t L, int32_t *x, int32_t *y) {
    ut_rng rng;
    ut_rng_seed(&rng, 42);
    for (long b = 0; b < o->B; b++)
        for (long t = 0; t < L; t++) {
            int32_t s = (int32_t)(3 + ut_rng_u64(&rng) % (uint64_t)(V - 3)), g = (int32_t)(3 + ut_rng_u64(&rng) % (uint64_t)(V - 3));
            x[(b * 4) * L + t] = t < o->S ? s : 0;
            x[(b * 4 + 1) * L + t] = t < o->S;
            x[(b * 4 + 2) * L + t] = t < o->T ? g : 0;
            x[(b * 4 + 3) * L + t] = t < o->T;
            if (t < o->T) y[b * o->T + t] = g;
        }
}

int main(int argc, char **argv) {
    ut_blas_select_kernels(argv);
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : 2;
    if (o.threads > 0) omp_set_num_threads((int)o.threads);
    ut_model *m = build(&o);
    if (!m) return 1;
    int64_t V = m->tokens.vocab, L = o.S > o.T ? o.S : o.T;
    int32_t *x = malloc(sizeof(int32_t) * (size_t)(o.B * 4 * L)), *y = malloc(sizeof(int32_t) * (size_t)(o.B * o.T));
    int32_t *src = malloc(sizeof(int32_t) * (size_t)(o.B * o.S)), *mask = malloc(sizeof(int32_t) * (size_t)(o.B * o.S));
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(o.B * o.K));
    int64_t *lens = malloc(sizeof(int64_t) * (size_t)o.B);
    double *st = calloc((size_t)o.steps, sizeof(double)), *gt = calloc((size_t)o.steps, sizeof(double));
    if (!x || !y || !src || !mask || !out || !lens || !st || !gt) abort();
    make_batch(&o, V, L, x, y);
    for (long b = 0; b < o.B; b++)
        for (long t = 0; t < o.S; t++) src[b * o.S + t] = x[(b * 4) * L + t], mask[b * o.S + t] = 1;
    ut_optim *opt = bench_adamw(m, 1e-4f, 0.01f);
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = 1});
    ut_ctx_set_training(ctx, true);
    float first = 0, last = 0;
    for (int i = -WARMUP; i < (int)o.steps && !rc; i++) {
        double t0 = bench_now();
        ut_tensor *xt = ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){o.B, 4, L}, x);
        ut_tensor *yt = ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){o.B, o.T}, y);
        ut_tensor *loss = ut_model_loss(m, ctx, ut_model_forward(m, ctx, xt), yt);
        if (!loss || ut_backward(ctx, loss)) {
            fprintf(stderr, "seq2seq_step: %s\n", ut_ctx_error(ctx));
            rc = 1;
            break;
        }
        ut_tensor_get(loss, &last, sizeof last);
        if (i == -WARMUP) first = last;
        ut_optim_step_zero(opt, 1e-4f);
        ut_ctx_reset(ctx);
        if (i >= 0) st[i] = bench_now() - t0;
    }
    ut_gen_opts g;
    ut_gen_opts_init(&g);
    g.max_new_tokens = g.min_new_tokens = o.K;
    g.num_beams = (int)o.beams;
    char err[512];
    for (int i = -1; i < (int)o.steps && !rc; i++) {
        double t0 = bench_now();
        if (ut_generate(m, &g, src, mask, o.B, o.S, out, lens, err, sizeof err)) {
            fprintf(stderr, "seq2seq_step: %s\n", err);
            rc = 1;
        }
        if (i >= 0) gt[i] = bench_now() - t0;
    }
    if (!rc && !isfinite(last)) {
        fprintf(stderr, "seq2seq_step: loss is not finite (%g)\n", (double)last);
        rc = 1;
    }
    if (!rc) {
        int n = (int)o.steps;
        double sm = bench_median(st, n), gm = bench_median(gt, n);
        double tps = (double)(o.B * o.K) / gm;
        if (o.json)
            printf("{\"impl\":\"utrain\",\"model\":\"%s\",\"threads\":%d,\"batch\":%ld,\"src\":%ld,\"tgt\":%ld,"
                   "\"new\":%ld,\"beams\":%ld,\"params\":%lld,\"step_s\":%.6f,\"gen_s\":%.6f,\"gen_tokens_per_s\":%.1f,"
                   "\"loss_first\":%.4f,\"loss_last\":%.4f}\n",
                   o.t5 ? "t5" : "bart", omp_get_max_threads(), o.B, o.S, o.T, o.K, o.beams,
                   (long long)m->params.numel, sm, gm, tps, (double)first, (double)last);
        else
            printf("utrain %s (%lld parameters), threads %d: step %.1f ms (batch %ld, %ld + %ld tokens), "
                   "generation %.1f ms for %ld x %ld tokens (%ld beams): %.1f tokens/s; loss %.4f -> %.4f\n",
                   o.t5 ? "t5-small" : "bart-base", (long long)m->params.numel, omp_get_max_threads(), 1e3 * sm,
                   o.B, o.S, o.T, 1e3 * gm, o.B, o.K, o.beams, tps, (double)first, (double)last);
    }
    free(x), free(y), free(src), free(mask), free(out), free(lens), free(st), free(gt);
    ut_ctx_free(ctx);
    ut_optim_free(opt);
    ut_model_free(m);
    return rc ? 1 : 0;
}
