/* Helpers shared by the benchmark programs: a monotonic clock, medians,
 * filled 64-byte-aligned buffers, a row-major sgemm with ut_gemm's
 * conventions, positive integer arguments and a model's AdamW.
 * defines: bench_now, bench_median, bench_buf, bench_gemm, bench_parse_pos, bench_repeats_threads,
 *          bench_adamw, bench_adamw_on, bench_gpt2_124m, bench_gpt2_124m_on. */
#ifndef UTRAIN_BENCH_UTIL_H
#define UTRAIN_BENCH_UTIL_H

#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "utrain/nn.h"
#include "utrain/optim.h"

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* max |a - b| / max |a| over n floats (two paths' results compared) */
static inline double bench_rel_diff(const float *a, const float *b, size_t n) {
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i], v = a[i];
        m = d > m ? d : -d > m ? -d : m;
        s = v > s ? v : -v > s ? -v : s;
    }
    return s > 0 ? m / s : m;
}

/* n floats in [-0.5, 0.5), a fixed pattern; exits on allocation failure. */
static inline float *bench_buf(size_t n) {
    float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!p) {
        fprintf(stderr, "bench: out of memory for %zu floats\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

/* row-major C (M, Nc) = op(A) op(Bm) + beta C, as ut_gemm (ta: A stored (K, M); tb: Bm stored (Nc, K)) */
static inline void bench_gemm(bool ta, bool tb, int M, int Nc, int K, const float *A, const float *Bm,
                              float beta, float *Cm) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, Nc,
                K, 1.0f, A, ta ? M : K, Bm, tb ? K : Nc, beta, Cm, Nc);
}

/* *out = v, a positive integer given to flag (v NULL: missing); else -1 and
 * "PROG: FLAG needs a positive integer, got 'V'" on stderr. */
static inline int bench_parse_pos(const char *prog, const char *flag, const char *v, long *out) {
    char *end;
    *out = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || *out <= 0) {
        fprintf(stderr, "%s: %s needs a positive integer, got '%s'\n", prog, flag, v ? v : "");
        return -1;
    }
    return 0;
}

/* --repeats N or --threads N at argv[*i] (N into repeats or threads, *i moved
 * past it): 1; a bad N: -1 with the message; another argument: 0. */
static inline int bench_repeats_threads(const char *prog, int argc, char **argv, int *i, long *repeats,
                                        long *threads) {
    bool r = !strcmp(argv[*i], "--repeats");
    if (!r && strcmp(argv[*i], "--threads")) return 0;
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (bench_parse_pos(prog, argv[*i], v, r ? repeats : threads)) return -1;
    ++*i;
    return 1;
}

/* GPT-2 124M (12 layers of 768, 12 heads, 50257 tokens, 1024 positions)
 * with random weights from seed; NULL after "PROG: why" on stderr. */
static inline ut_model *bench_gpt2_124m_on(const char *prog, uint64_t seed, ut_device dev) {
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "n_layer", "12");
    ut_kv_set(kv, "n_head", "12");
    ut_kv_set(kv, "n_embd", "768");
    ut_kv_set(kv, "vocab_size", "50257");
    ut_kv_set(kv, "block_size", "1024");
    char err[512];
    ut_model *m = ut_model_create_on("gpt2", kv, seed, dev, err, sizeof err);
    ut_kv_free(kv);
    if (!m) fprintf(stderr, "%s: %s\n", prog, err);
    return m;
}

static inline ut_model *bench_gpt2_124m(const char *prog, uint64_t seed) { return bench_gpt2_124m_on(prog, seed, UT_CPU); }

/* AdamW (the library's defaults but lr and weight decay wd) over m's flat
 * parameter and gradient buffers. */
static inline ut_optim *bench_adamw_on(ut_model *m, float lr, float wd, ut_device dev) {
    ut_optim_config oc = ut_optim_defaults(UT_OPTIM_ADAMW);
    oc.lr = lr;
    oc.weight_decay = wd;
    oc.device = dev;
    return ut_optim_new(&oc, m->params.flat, m->params.flat_grad, m->params.segs, m->params.n, 0, m->params.numel);
}
static inline ut_optim *bench_adamw(ut_model *m, float lr, float wd) { return bench_adamw_on(m, lr, wd, UT_CPU); }
#endif
