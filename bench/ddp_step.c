/* DDP training-step benchmark on N ranks (written for mpirun -np 2).
 *
 * Builds "gpt2" through the registry as bench/gpt2_step.c does (by default
 * GPT-2 124M: 12 layers, 12 heads, n_embd 768, vocab 50257, block 1024; the
 * size can be lowered with --layers/--embd/--heads/--vocab), creates the
 * communicator (ut_comm_init) and a ut_ddp over the model's parameters, and
 * times full training steps in two modes, interleaved step by step:
 *
 *   overlap     ut_ddp_arm before backward: each bucket's all-reduce starts
 *               on the communication thread as soon as backward has completed
 *               it; ut_ddp_finish starts the rest and waits.
 *   no overlap  backward with no hook, then ut_ddp_arm + ut_ddp_finish: every
 *               bucket starts after backward, back to back. (ut_ddp_finish
 *               alone, without an arm since the last finish, would find the
 *               previous step's requests and start nothing: the arm resets
 *               them.)
 *
 * A step is forward + loss (scaled by 1/ranks, as the trainer does) +
 * backward + ut_ddp_finish + AdamW step with zero grad + ctx reset; the
 * table splits ut_ddp_finish into waiting for the other ranks' backward and
 * the time after the last one (from CLOCK_MONOTONIC, shared by the ranks of
 * one machine). Each rank
 * trains on its own random tokens; at the end the ranks check that their
 * parameters are bit-identical (they are only if every step's gradients were
 * summed).
 *
 * Then the all-reduce bandwidth of the gradient buffer, measured separately
 * (back-to-back runs on the real m->params.flat_grad, MPI_Barrier before each, the
 * time of a run = the slowest rank's), each variant repeated --reps times and
 * interleaved with the others:
 *   utrain, buckets    ut_comm_iallreduce of every ut_ddp bucket, in the
 *                      order ut_ddp_finish issues them, then ut_comm_wait
 *   utrain, one call   ut_comm_iallreduce of the whole range + wait
 *   bare, buckets      MPI_Allreduce(MPI_IN_PLACE) of each bucket, from main
 *   bare, one call     MPI_Allreduce(MPI_IN_PLACE) of the whole range
 * The bare calls use MPI_COMM_WORLD from the main thread, only while the
 * communication thread is idle (every request waited), so MPI sees one
 * caller at a time even at MPI_THREAD_SERIALIZED.
 * The bucket variants also run on ut_ddp's buckets cut into pieces of at
 * most --bucket-mb (a bucket holding one large parameter, GPT-2's tied wte,
 * is larger), and --sweep-mb LIST repeats them for other bucket sizes.
 *
 *   mpirun -np 2 ddp_step [--layers L] [--embd C] [--heads H] [--vocab V]
 *       [--batch B] [--seq T] [--steps N] [--warmup W] [--threads N]
 *       [--bucket-mb MB] [--reps R] [--sweep-mb MB,MB,...] [--json FILE]
 *   ddp_step --core      prints OpenBLAS's kernel set (no MPI)
 *
 * Rank 0 prints the table; --json FILE writes its figures as one JSON line. */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#include "utrain/utrain.h"

char *openblas_get_corename(void);

#define MAX_SWEEP 16

typedef struct {
    long layers, embd, heads, vocab, batch, seq, steps, warmup, threads, reps;
    double bucket_mb;
    double sweep[MAX_SWEEP];
    int nsweep;
    const char *json;
} opts;

/* ---- command line ---- */

static int parse_mb(const char *flag, const char *v, double *out) {
    char *end;
    *out = v ? strtod(v, &end) : 0;
    if (!v || end == v || *end || !(*out > 0)) {
        fprintf(stderr, "ddp_step: %s needs a positive number of MiB, got '%s'\n", flag, v ? v : "");
        return -1;
    }
    return 0;
}

static int parse_sweep(const char *v, opts *o) {
    if (!v || !*v) {
        fprintf(stderr, "ddp_step: --sweep-mb needs a list like 5,25,100\n");
        return -1;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    o->nsweep = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->nsweep == MAX_SWEEP) {
            fprintf(stderr, "ddp_step: --sweep-mb takes at most %d sizes\n", MAX_SWEEP);
            return -1;
        }
        if (parse_mb("--sweep-mb", t, &o->sweep[o->nsweep++])) return -1;
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: mpirun -np 2 ddp_step [--layers L] [--embd C] [--heads H] [--vocab V]\n"
               "         [--batch B] [--seq T] [--steps N] [--warmup W] [--threads N]\n"
               "         [--bucket-mb MB] [--reps R] [--sweep-mb MB,MB,...] [--json FILE]\n"
               "       ddp_step --core\n");
}

/* 0 ok, 1 exit 0 (help), -1 exit 2 */
static int parse_args(int argc, char **argv, opts *o) {
    *o = (opts){.layers = 12, .embd = 768, .heads = 0, .vocab = 50257, .batch = 4, .seq = 64,
                .steps = 6, .warmup = 1, .threads = 1, .reps = 5, .bucket_mb = 25};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        struct {
            const char *flag;
            long *dst;
        } longs[] = {{"--layers", &o->layers}, {"--embd", &o->embd},     {"--heads", &o->heads},
                     {"--vocab", &o->vocab},   {"--batch", &o->batch},   {"--seq", &o->seq},
                     {"--steps", &o->steps},   {"--warmup", &o->warmup}, {"--threads", &o->threads},
                     {"--reps", &o->reps}};
        bool done = false;
        for (size_t k = 0; k < sizeof longs / sizeof longs[0]; k++)
            if (!strcmp(a, longs[k].flag)) {
                if (bench_parse_pos("ddp_step", a, v, longs[k].dst)) return -1;
                i++;
                done = true;
                break;
            }
        if (done) continue;
        if (!strcmp(a, "--bucket-mb")) {
            if (parse_mb(a, v, &o->bucket_mb)) return -1;
            i++;
        } else if (!strcmp(a, "--sweep-mb")) {
            if (parse_sweep(v, o)) return -1;
            i++;
        } else if (!strcmp(a, "--json")) {
            if (!v) {
                fprintf(stderr, "ddp_step: --json needs a file name\n");
                return -1;
            }
            o->json = v;
            i++;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else {
            fprintf(stderr, "ddp_step: unknown option '%s'\n", a);
            usage(stderr);
            return -1;
        }
    }
    /* GPT-2's head size is 64: by default n_head = n_embd / 64 (12 for 768) */
    if (!o->heads) o->heads = o->embd % 64 == 0 ? o->embd / 64 : 1;
    if (o->seq > 1024) {
        fprintf(stderr, "ddp_step: --seq %ld is above the block size 1024\n", o->seq);
        return -1;
    }
    return 0;
}

/* ---- buckets: the same ranges ut_ddp_new forms (src/dist/ddp.c) ---- */

typedef struct {
    int nb;
    int64_t *lo, *n;      /* element ranges of the flat gradient buffer, issue order */
    int64_t total;        /* sum of n */
    int64_t span_lo, span_hi; /* the smallest range holding them all */
} buckets;

/* From the last parameter backwards, closing a bucket once it reaches
 * bucket_mb MiB; bucket 0 (the last layers) is the first backward completes
 * and the first ut_ddp_finish issues without overlap. */
static buckets make_buckets(const ut_params *p, double bucket_mb) {
    buckets b = {0};
    b.lo = calloc((size_t)(p->n ? p->n : 1), sizeof *b.lo);
    b.n = calloc((size_t)(p->n ? p->n : 1), sizeof *b.n);
    if (!b.lo || !b.n) abort();
    int64_t cap = (int64_t)(bucket_mb * 1048576.0 / sizeof(float));
    if (cap < 1) cap = 1;
    int64_t hi = 0;
    int nparams = 0;
    for (int i = p->n - 1; i >= 0; i--) {
        if (nparams == 0) hi = p->segs[i].offset + p->segs[i].numel;
        int64_t lo = p->segs[i].offset;
        nparams++;
        if (hi - lo >= cap || i == 0) {
            b.lo[b.nb] = lo;
            b.n[b.nb] = hi - lo;
            b.nb++;
            nparams = 0;
        }
    }
    b.span_lo = b.nb ? b.lo[b.nb - 1] : 0;
    b.span_hi = b.nb ? b.lo[0] + b.n[0] : 0;
    for (int k = 0; k < b.nb; k++) b.total += b.n[k];
    return b;
}

/* The same buckets with every one cut into pieces of at most bucket_mb MiB
 * (GPT-2's tied wte, 147 MiB, is one parameter and so one bucket in ut_ddp). */
static buckets split_buckets(const buckets *in, double bucket_mb) {
    int64_t cap = (int64_t)(bucket_mb * 1048576.0 / sizeof(float));
    if (cap < 1) cap = 1;
    int n = 0;
    for (int k = 0; k < in->nb; k++) n += (int)((in->n[k] + cap - 1) / cap);
    buckets b = *in;
    b.nb = 0;
    b.lo = calloc((size_t)(n ? n : 1), sizeof *b.lo);
    b.n = calloc((size_t)(n ? n : 1), sizeof *b.n);
    if (!b.lo || !b.n) abort();
    for (int k = 0; k < in->nb; k++) {
        int pieces = (int)((in->n[k] + cap - 1) / cap);
        for (int i = 0; i < pieces; i++) { /* near-equal pieces */
            int64_t a = in->n[k] * i / pieces, e = in->n[k] * (i + 1) / pieces;
            b.lo[b.nb] = in->lo[k] + a;
            b.n[b.nb++] = e - a;
        }
    }
    return b;
}

static void free_buckets(buckets *b) {
    free(b->lo);
    free(b->n);
}

/* ---- all-reduce timings ---- */

static void check_mpi(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "ddp_step: %s: %s\n", what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void check_ut(ut_comm *c, int rc, const char *what) {
    if (!rc) return;
    fprintf(stderr, "ddp_step: %s: %s\n", what, ut_comm_error(c));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* The slowest rank's time: a collective is done when every rank is done. */
static double max_over_ranks(double t) {
    double m = t;
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce(max)");
    return m;
}

/* Every call below starts and ends with the communication thread idle (all
 * requests waited), so the main thread may call MPI. */
static double time_ut_buckets(ut_comm *c, float *g, const buckets *b, ut_comm_req **req) {
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    double t0 = bench_now();
    for (int k = 0; k < b->nb; k++) req[k] = ut_comm_iallreduce(c, g + b->lo[k], b->n[k]);
    for (int k = 0; k < b->nb; k++) check_ut(c, ut_comm_wait(c, req[k]), "ut_comm_wait");
    return max_over_ranks(bench_now() - t0);
}

static double time_bare_buckets(float *g, const buckets *b) {
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    double t0 = bench_now();
    for (int k = 0; k < b->nb; k++)
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, g + b->lo[k], (int)b->n[k], MPI_FLOAT, MPI_SUM,
                                MPI_COMM_WORLD),
                  "MPI_Allreduce");
    return max_over_ranks(bench_now() - t0);
}

static double time_ut_one(ut_comm *c, float *g, int64_t n) {
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    double t0 = bench_now();
    check_ut(c, ut_comm_wait(c, ut_comm_iallreduce(c, g, n)), "ut_comm_wait");
    return max_over_ranks(bench_now() - t0);
}

static double time_bare_one(float *g, int64_t n) {
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    double t0 = bench_now();
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    return max_over_ranks(bench_now() - t0);
}

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

/* All ranks on this machine: then they share CLOCK_MONOTONIC. */
static bool same_host(void) {
    char name[MPI_MAX_PROCESSOR_NAME + 1] = {0};
    int len = 0;
    check_mpi(MPI_Get_processor_name(name, &len), "MPI_Get_processor_name");
    long long h[2];
    h[0] = (long long)(fnv1a(name, (size_t)len) >> 1);
    h[1] = -h[0];
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, h, 2, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    return h[0] == -h[1];
}

/* ---- the table ---- */

static double gbps(double bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0; }
static double mib(double bytes) { return bytes / 1048576.0; }

static const char *thread_level_name(int l) {
    switch (l) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    }
    return "?";
}

enum { OVERLAP, NO_OVERLAP, NMODES };
/* PH_SKEW: how long after this rank's backward the last rank's ended;
 * PH_TAIL: from the last rank's end of backward to the end of ut_ddp_finish
 * (both from CLOCK_MONOTONIC, which all ranks on one machine share). */
enum { PH_STEP, PH_FWD, PH_BWD, PH_FINISH, PH_SKEW, PH_TAIL, PH_OPT, PH_WAIT, NPH };
static const char *const mode_name[NMODES] = {"overlap", "no_overlap"};

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--core")) { /* for the run script, before any MPI */
            printf("%s\n", openblas_get_corename());
            return 0;
        }
    ut_blas_select_kernels(argv); /* may re-exec with OPENBLAS_CORETYPE set; the script sets it */
    opts o;
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 2;
    omp_set_num_threads((int)o.threads);

    char err[512];
    ut_comm *comm = ut_comm_init(&argc, &argv, true, 0, err, sizeof err);
    if (!comm) {
        fprintf(stderr, "ddp_step: %s\n", err);
        return 1;
    }
    int rank = ut_comm_rank(comm), world = ut_comm_size(comm);
    int level = 0;
    check_mpi(MPI_Query_thread(&level), "MPI_Query_thread");
    if (rank == 0 && world != 2)
        fprintf(stderr, "ddp_step: note: %d rank(s); this benchmark is meant for mpirun -np 2\n", world);

    /* ---- the model, the optimizer, DDP ---- */
    ut_kv *kv = ut_kv_new();
    char v[5][32];
    snprintf(v[0], sizeof v[0], "%ld", o.layers);
    snprintf(v[1], sizeof v[1], "%ld", o.heads);
    snprintf(v[2], sizeof v[2], "%ld", o.embd);
    snprintf(v[3], sizeof v[3], "%ld", o.vocab);
    snprintf(v[4], sizeof v[4], "%d", 1024);
    ut_kv_set(kv, "n_layer", v[0]);
    ut_kv_set(kv, "n_head", v[1]);
    ut_kv_set(kv, "n_embd", v[2]);
    ut_kv_set(kv, "vocab_size", v[3]);
    ut_kv_set(kv, "block_size", v[4]);
    ut_model *m = ut_model_create("gpt2", kv, 1234, err, sizeof err); /* same weights on every rank */
    ut_kv_free(kv);
    if (!m) {
        fprintf(stderr, "ddp_step: %s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const float lr = 3e-4f;
    ut_optim *opt = bench_adamw(m, lr, 0.1f);
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = 1});
    ut_ddp *ddp = ut_ddp_new(comm, &m->params, o.bucket_mb);
    buckets bk = make_buckets(&m->params, o.bucket_mb);
    if (bk.nb != ut_ddp_nbuckets(ddp)) {
        fprintf(stderr, "ddp_step: %d buckets here, %d in ut_ddp: src/dist/ddp.c's rule changed\n", bk.nb,
                ut_ddp_nbuckets(ddp));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    /* each rank its own random tokens: inputs [0, T), targets [1, T] */
    const long B = o.batch, T = o.seq;
    ut_rng rng;
    ut_rng_seed(&rng, 42 + (uint64_t)rank);
    int32_t *x = malloc(sizeof(int32_t) * (size_t)(B * T)), *y = malloc(sizeof(int32_t) * (size_t)(B * T));
    int32_t *stream = malloc(sizeof(int32_t) * (size_t)(T + 1));
    if (!x || !y || !stream) abort();
    for (long b = 0; b < B; b++) {
        for (long t = 0; t <= T; t++) stream[t] = (int32_t)(ut_rng_u64(&rng) % (uint64_t)o.vocab);
        memcpy(x + b * T, stream, sizeof(int32_t) * (size_t)T);
        memcpy(y + b * T, stream + 1, sizeof(int32_t) * (size_t)T);
    }
    free(stream);

    /* ---- training steps, the two modes interleaved ---- */
    const int per_mode = (int)(o.warmup + o.steps);
    double *ph[NMODES][NPH];
    for (int md = 0; md < NMODES; md++)
        for (int k = 0; k < NPH; k++) {
            ph[md][k] = calloc((size_t)o.steps, sizeof(double));
            if (!ph[md][k]) abort();
        }
    double *t2a[NMODES], *t3a[NMODES]; /* absolute times: end of backward, end of ut_ddp_finish */
    for (int md = 0; md < NMODES; md++) {
        t2a[md] = calloc((size_t)o.steps, sizeof(double));
        t3a[md] = calloc((size_t)o.steps, sizeof(double));
        if (!t2a[md] || !t3a[md]) abort();
    }
    double step_bytes[NMODES] = {0};
    int done[NMODES] = {0};
    float first_loss = 0, last_loss = 0;
    for (int s = 0; s < 2 * per_mode; s++) {
        /* pairs alternate which mode goes first: overlap, no, no, overlap, ... */
        int md = (s / 2) % 2 == 0 ? s % 2 : 1 - s % 2;
        double bytes0, wait0, bytes1, wait1;
        ut_comm_stats(comm, &bytes0, &wait0);
        double t0 = bench_now();
        ut_tensor *xt = ut_tensor_wrap(ctx, UT_I32, 2, (int64_t[]){B, T}, x);
        ut_tensor *yt = ut_tensor_wrap(ctx, UT_I32, 2, (int64_t[]){B, T}, y);
        ut_tensor *loss = ut_model_loss(m, ctx, ut_model_forward(m, ctx, xt), yt);
        /* the mean over ranks: summed gradients are those of the global batch */
        ut_tensor *scaled = loss ? ut_scale(ctx, loss, 1.0f / (float)world) : NULL;
        if (!scaled) {
            fprintf(stderr, "ddp_step: %s\n", ut_ctx_error(ctx));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        double t1 = bench_now();
        if (md == OVERLAP) ut_ddp_arm(ddp, ctx);
        if (ut_backward(ctx, scaled)) {
            fprintf(stderr, "ddp_step: %s\n", ut_ctx_error(ctx));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        double t2 = bench_now();
        if (md == NO_OVERLAP) ut_ddp_arm(ddp, ctx); /* resets the buckets; no hook fires any more */
        check_ut(comm, ut_ddp_finish(ddp, ctx), "ut_ddp_finish");
        double t3 = bench_now();
        ut_tensor_get(loss, &last_loss, sizeof last_loss);
        if (s == 0) first_loss = last_loss;
        ut_optim_step_zero(opt, lr);
        ut_ctx_reset(ctx);
        double t4 = bench_now();
        ut_comm_stats(comm, &bytes1, &wait1);
        int k = done[md]++ - (int)o.warmup;
        if (k >= 0) {
            ph[md][PH_STEP][k] = t4 - t0;
            ph[md][PH_FWD][k] = t1 - t0;
            ph[md][PH_BWD][k] = t2 - t1;
            ph[md][PH_FINISH][k] = t3 - t2;
            ph[md][PH_OPT][k] = t4 - t3;
            ph[md][PH_WAIT][k] = wait1 - wait0;
            t2a[md][k] = t2;
            t3a[md][k] = t3;
            step_bytes[md] = bytes1 - bytes0;
        }
    }
    /* skew and tail: every rank's end of backward, step by step (one machine only) */
    bool one_host = same_host();
    double *t2all = malloc(sizeof(double) * (size_t)(NMODES * o.steps * world));
    double *t2mine = malloc(sizeof(double) * (size_t)(NMODES * o.steps));
    if (!t2all || !t2mine) abort();
    for (int md = 0; md < NMODES; md++) memcpy(t2mine + md * o.steps, t2a[md], sizeof(double) * (size_t)o.steps);
    check_mpi(MPI_Allgather(t2mine, (int)(NMODES * o.steps), MPI_DOUBLE, t2all, (int)(NMODES * o.steps),
                            MPI_DOUBLE, MPI_COMM_WORLD),
              "MPI_Allgather");
    for (int md = 0; md < NMODES; md++)
        for (int k = 0; k < (int)o.steps; k++) {
            double last = t2a[md][k];
            for (int r = 0; r < world; r++) {
                double t = t2all[(size_t)r * NMODES * o.steps + md * o.steps + k];
                last = t > last ? t : last;
            }
            ph[md][PH_SKEW][k] = one_host ? last - t2a[md][k] : NAN;
            ph[md][PH_TAIL][k] = one_host ? t3a[md][k] - last : NAN;
        }
    free(t2all);
    free(t2mine);

    /* medians on this rank, then gathered: [rank][mode][phase] */
    double med[NMODES][NPH];
    for (int md = 0; md < NMODES; md++)
        for (int k = 0; k < NPH; k++) med[md][k] = bench_median(ph[md][k], (int)o.steps);
    double *all = malloc(sizeof med * (size_t)world);
    if (!all) abort();
    check_mpi(MPI_Allgather(med, NMODES * NPH, MPI_DOUBLE, all, NMODES * NPH, MPI_DOUBLE, MPI_COMM_WORLD),
              "MPI_Allgather");
#define ALL(r, md, k) all[((r) * NMODES + (md)) * NPH + (k)]

    /* the ranks' parameters must be bit-identical after summed-gradient steps */
    uint64_t h = fnv1a(m->params.flat, sizeof(float) * (size_t)m->params.numel);
    int same = ut_comm_check_same(comm, h, "parameters after the steps", err, sizeof err) == 0;
    if (!same && rank == 0) fprintf(stderr, "ddp_step: %s\n", err);
    bool finite = isfinite(last_loss);

    /* ---- all-reduce bandwidth on the gradient buffer ---- */
    float *g = m->params.flat_grad;
    memset(g, 0, sizeof(float) * (size_t)m->params.numel); /* values do not change the speed; zeros stay zeros */
    /* sets: 0 ut_ddp's buckets, 1 the same split to <= bucket_mb, 2... the sweep */
    int nsets = 2 + o.nsweep;
    double sizes[2 + MAX_SWEEP];
    sizes[0] = sizes[1] = o.bucket_mb;
    for (int i = 0; i < o.nsweep; i++) sizes[2 + i] = o.sweep[i];
    buckets sets[2 + MAX_SWEEP];
    int maxnb = 0;
    for (int i = 0; i < nsets; i++) {
        sets[i] = i == 0 ? bk : i == 1 ? split_buckets(&bk, o.bucket_mb) : make_buckets(&m->params, sizes[i]);
        if (sets[i].nb > maxnb) maxnb = sets[i].nb;
    }
    ut_comm_req **req = calloc((size_t)maxnb, sizeof *req);
    int R = (int)o.reps;
    double *t_utb = calloc((size_t)(R * nsets), sizeof(double));
    double *t_bareb = calloc((size_t)(R * nsets), sizeof(double));
    double *t_ut1 = calloc((size_t)R, sizeof(double)), *t_bare1 = calloc((size_t)R, sizeof(double));
    if (!req || !t_utb || !t_bareb || !t_ut1 || !t_bare1) abort();
    int64_t span = bk.span_hi - bk.span_lo;
    for (int r = -1; r < R; r++) { /* r = -1: warm-up, not kept */
        /* odd runs time utrain first, even runs bare MPI first */
        bool ut_first = r % 2 != 0;
        double a, b;
        if (ut_first) {
            b = time_ut_one(comm, g + bk.span_lo, span);
            a = time_bare_one(g + bk.span_lo, span);
        } else {
            a = time_bare_one(g + bk.span_lo, span);
            b = time_ut_one(comm, g + bk.span_lo, span);
        }
        if (r >= 0) t_bare1[r] = a, t_ut1[r] = b;
        for (int i = 0; i < nsets; i++) {
            double c, d;
            if (ut_first) {
                c = time_ut_buckets(comm, g, &sets[i], req);
                d = time_bare_buckets(g, &sets[i]);
            } else {
                d = time_bare_buckets(g, &sets[i]);
                c = time_ut_buckets(comm, g, &sets[i], req);
            }
            if (r >= 0) t_utb[i * R + r] = c, t_bareb[i * R + r] = d;
        }
    }
    double bare1 = bench_median(t_bare1, R), ut1 = bench_median(t_ut1, R);
    double utb[2 + MAX_SWEEP], bareb[2 + MAX_SWEEP];
    for (int i = 0; i < nsets; i++) {
        utb[i] = bench_median(t_utb + i * R, R);
        bareb[i] = bench_median(t_bareb + i * R, R);
    }

    /* ---- report (rank 0) ---- */
    if (rank == 0) {
        double gbytes = 4.0 * (double)bk.total, span_bytes = 4.0 * (double)span;
        int64_t bmin = bk.n[0], bmax = bk.n[0];
        for (int k = 1; k < bk.nb; k++) {
            if (bk.n[k] < bmin) bmin = bk.n[k];
            if (bk.n[k] > bmax) bmax = bk.n[k];
        }
        printf("== utrain DDP step: gpt2 %ld layers, n_embd %ld, %ld heads, vocab %ld: %lld parameters "
               "(%.1f MiB of gradients)\n",
               o.layers, o.embd, o.heads, o.vocab, (long long)m->params.numel,
               mib(4.0 * (double)m->params.numel));
        printf("   %d ranks x %d OpenMP thread(s), batch %ld x seq %ld per rank, AdamW; OpenBLAS %s; %s\n",
               world, omp_get_max_threads(), B, T, openblas_get_corename(), thread_level_name(level));
        printf("   buckets: %g MiB -> %d buckets (%.1f to %.1f MiB; the last, with wte, is %.1f MiB)\n",
               o.bucket_mb, bk.nb, mib(4.0 * (double)bmin), mib(4.0 * (double)bmax),
               mib(4.0 * (double)bk.n[bk.nb - 1]));
        printf("   %ld steps per mode after %ld warm-up, modes interleaved; loss %.4f -> %.4f; ranks' "
               "parameters %s\n",
               o.steps, o.warmup, (double)first_loss, (double)last_loss,
               same ? "identical" : "DIFFER");
        printf("\n  step phases, medians (ms)          %12s %12s\n", "overlap", "no overlap");
        static const char *const rows[NPH] = {"step", "forward + loss", "backward",
                                              "ut_ddp_finish (after backward)",
                                              "  waiting for the other's backward",
                                              "  after the last rank's backward",
                                              "AdamW + zero grad + ctx reset",
                                              "comm wait (ut_comm_stats)"};
        for (int k = 0; k < NPH; k++) {
            printf("  %-34s", rows[k]);
            for (int md = 0; md < NMODES; md++) printf(" %12.1f", 1e3 * ALL(0, md, k));
            printf("   rank 0\n");
            if (k == PH_STEP || k == PH_SKEW || k == PH_WAIT)
                for (int r = 1; r < world; r++) {
                    printf("  %-34s", "");
                    for (int md = 0; md < NMODES; md++) printf(" %12.1f", 1e3 * ALL(r, md, k));
                    printf("   rank %d\n", r);
                }
        }
        printf("  %-34s %12.1f %12.1f   MiB per rank\n", "all-reduced per step", mib(step_bytes[OVERLAP]),
               mib(step_bytes[NO_OVERLAP]));
        printf("  %-34s %12.2f %12.2f   (bytes / median ut_ddp_finish)\n", "  GB/s seen by the step",
               gbps(step_bytes[OVERLAP], ALL(0, OVERLAP, PH_FINISH)),
               gbps(step_bytes[NO_OVERLAP], ALL(0, NO_OVERLAP, PH_FINISH)));
        printf("  %-34s %12.2f %12.2f   (bytes / median time after the last backward)\n", "",
               gbps(step_bytes[OVERLAP], ALL(0, OVERLAP, PH_TAIL)),
               gbps(step_bytes[NO_OVERLAP], ALL(0, NO_OVERLAP, PH_TAIL)));
        double so = ALL(0, OVERLAP, PH_STEP), sn = ALL(0, NO_OVERLAP, PH_STEP);
        printf("  overlap saves %.1f ms per step (%.1f%% of the no-overlap step)\n", 1e3 * (sn - so),
               100 * (sn - so) / sn);

        printf("\n  all-reduce of the gradient buffer, back to back on the real grad buffer\n"
               "  (median of %d runs, each the slowest rank's time)  %9s %9s %9s\n",
               R, "ms", "GB/s", "vs bare1");
        printf("  %-50s %9.1f %9.2f %9.2f\n", "bare MPI_Allreduce, one call (bare1)", 1e3 * bare1,
               gbps(span_bytes, bare1), 1.0);
        printf("  %-50s %9.1f %9.2f %9.2f\n", "utrain iallreduce + wait, one call", 1e3 * ut1,
               gbps(span_bytes, ut1), bare1 / ut1);
        for (int i = 0; i < nsets; i++) {
            char l1[96], l2[96];
            const char *what = i == 0 ? "buckets of" : i == 1 ? "pieces <=" : "buckets of";
            const char *note = i == 0 ? " (ut_ddp's)" : i == 1 ? " (split)" : " (sweep)";
            snprintf(l1, sizeof l1, "bare MPI_Allreduce, %d %s %g MiB%s", sets[i].nb, what, sizes[i], note);
            snprintf(l2, sizeof l2, "utrain iallreduce, %d %s %g MiB%s", sets[i].nb, what, sizes[i], note);
            double by = 4.0 * (double)sets[i].total;
            printf("  %-50s %9.1f %9.2f %9.2f\n", l1, 1e3 * bareb[i], gbps(by, bareb[i]),
                   gbps(by, bareb[i]) / gbps(span_bytes, bare1));
            printf("  %-50s %9.1f %9.2f %9.2f\n", l2, 1e3 * utb[i], gbps(by, utb[i]),
                   gbps(by, utb[i]) / gbps(span_bytes, bare1));
        }
        double ratio = gbps(gbytes, utb[0]) / gbps(span_bytes, bare1);
        printf("\n  ratio utrain buckets / bare one call     %6.2f   (goal >= 0.90: %s)\n", ratio,
               ratio >= 0.90 ? "met" : "NOT met");
        printf("  ratio utrain buckets / bare buckets      %6.2f   (the communication thread's cost)\n",
               bareb[0] / utb[0]);
        printf("  ratio bare buckets / bare one call       %6.2f   (the bucket size's cost)\n",
               gbps(gbytes, bareb[0]) / gbps(span_bytes, bare1));
        printf("  ratio in the no-overlap step / bare1     %6.2f   (GB/s after the last rank's backward)\n",
               gbps(step_bytes[NO_OVERLAP], ALL(0, NO_OVERLAP, PH_TAIL)) / gbps(span_bytes, bare1));

        if (o.json) {
            FILE *f = fopen(o.json, "w");
            if (!f) {
                perror(o.json);
            } else {
                fprintf(f, "{\"ranks\":%d,\"threads\":%d,\"layers\":%ld,\"embd\":%ld,\"batch\":%ld,\"seq\":%ld,"
                           "\"params\":%lld,\"bucket_mb\":%g,\"buckets\":%d,\"steps\":%ld,\"same\":%s",
                        world, omp_get_max_threads(), o.layers, o.embd, B, T, (long long)m->params.numel,
                        o.bucket_mb, bk.nb, o.steps, same ? "true" : "false");
                static const char *const key[NPH] = {"step", "fwd",  "bwd", "finish",
                                                     "skew", "tail", "opt", "wait"};
                for (int md = 0; md < NMODES; md++)
                    for (int k = 0; k < NPH; k++)
                        for (int r = 0; r < world; r++)
                            fprintf(f, ",\"%s_%s_r%d\":%.6f", mode_name[md], key[k], r,
                                    isnan(ALL(r, md, k)) ? -1.0 : ALL(r, md, k));
                fprintf(f, ",\"step_bytes\":%.0f,\"grad_bytes\":%.0f,\"span_bytes\":%.0f", step_bytes[NO_OVERLAP],
                        gbytes, span_bytes);
                fprintf(f, ",\"bare1_s\":%.6f,\"ut1_s\":%.6f,\"bare_buckets_s\":%.6f,\"ut_buckets_s\":%.6f",
                        bare1, ut1, bareb[0], utb[0]);
                fprintf(f, ",\"split_nb\":%d,\"split_bare_s\":%.6f,\"split_ut_s\":%.6f", sets[1].nb, bareb[1],
                        utb[1]);
                for (int i = 2; i < nsets; i++)
                    fprintf(f, ",\"sweep_%g_nb\":%d,\"sweep_%g_bare_s\":%.6f,\"sweep_%g_ut_s\":%.6f", sizes[i],
                            sets[i].nb, sizes[i], bareb[i], sizes[i], utb[i]);
                fprintf(f, ",\"ratio\":%.4f}\n", ratio);
                fclose(f);
            }
        }
        fflush(stdout);
    }
#undef ALL

    for (int i = 0; i < nsets; i++) free_buckets(&sets[i]);
    free(req);
    free(t_utb);
    free(t_bareb);
    free(t_ut1);
    free(t_bare1);
    free(all);
    for (int md = 0; md < NMODES; md++)
        for (int k = 0; k < NPH; k++) free(ph[md][k]);
    for (int md = 0; md < NMODES; md++) {
        free(t2a[md]);
        free(t3a[md]);
    }
    free(x);
    free(y);
    ut_ddp_free(ddp);
    ut_ctx_free(ctx);
    ut_optim_free(opt);
    ut_model_free(m);
    ut_comm_finalize(comm);
    return same && finite ? 0 : 1;
}
