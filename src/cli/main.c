/* utrain command line. For now: `utrain demo` (the CNN on synthetic batches)
 * and `utrain version`; the trainer subcommands join here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "utrain/utrain.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: utrain <command> [options]\n"
            "\n"
            "commands:\n"
            "  demo [--steps N] [--batch-size B] [--seed S]\n"
            "          train the MNIST CNN on synthetic 28x28 images (10 classes, each a\n"
            "          fixed random pattern plus noise) and print the falling loss\n"
            "  version print the version\n"
            "  help    this text\n");
}

/* Synthetic classification data: class k is template k plus N(0, 0.5) noise. */
typedef struct {
    float *templates; /* (10, 28*28) */
    ut_rng rng;
} synth;

static void synth_batch(synth *s, float *x, int32_t *y, int B) {
    for (int b = 0; b < B; b++) {
        int k = (int)(ut_rng_u64(&s->rng) % 10);
        y[b] = k;
        for (int i = 0; i < 784; i++) x[b * 784 + i] = s->templates[k * 784 + i] + 0.5f * ut_rng_normal(&s->rng);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_int(const char *flag, const char *v, long *out) {
    char *end;
    *out = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || *out <= 0) {
        fprintf(stderr, "utrain demo: %s needs a positive integer, got '%s'\n", flag, v ? v : "");
        return -1;
    }
    return 0;
}

static int demo(int argc, char **argv) {
    long steps = 60, B = 32, seed = 1;
    for (int i = 0; i < argc; i++) {
        long *dst = !strcmp(argv[i], "--steps") ? &steps
                  : !strcmp(argv[i], "--batch-size") ? &B
                  : !strcmp(argv[i], "--seed") ? &seed : NULL;
        if (!dst) {
            fprintf(stderr, "utrain demo: unknown option '%s'\n", argv[i]);
            return 2;
        }
        if (parse_int(argv[i], i + 1 < argc ? argv[i + 1] : NULL, dst)) return 2;
        i++;
    }
    char err[512];
    ut_model *m = ut_model_create("cnn", NULL, (uint64_t)seed, err, sizeof err);
    if (!m) {
        fprintf(stderr, "utrain demo: %s\n", err);
        return 1;
    }
    ut_optim_config oc = ut_optim_defaults(UT_OPTIM_ADAMW);
    oc.lr = 1e-3f;
    ut_optim *opt = ut_optim_new(&oc, m->params.data, m->params.grad, m->params.segs, m->params.n, 0,
                                 m->params.numel);
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = (uint64_t)seed});
    synth s;
    ut_rng_seed(&s.rng, (uint64_t)seed + 1);
    s.templates = ut_malloc_check(10 * 784 * sizeof(float));
    for (int i = 0; i < 10 * 784; i++) s.templates[i] = ut_rng_normal(&s.rng);
    float *x = ut_malloc_check((size_t)B * 784 * sizeof(float));
    int32_t *y = ut_malloc_check((size_t)B * sizeof(int32_t));

    printf("utrain demo: cnn (%lld parameters) on synthetic 28x28 images, batch %ld, %ld steps, AdamW lr %g\n",
           (long long)m->params.numel, B, steps, (double)oc.lr);
    double t0 = now(), first = 0, last = 0;
    int rc = 0;
    for (long step = 0; step < steps; step++) {
        synth_batch(&s, x, y, (int)B);
        ut_tensor *xt = ut_tensor_wrap(ctx, UT_F32, 4, (int64_t[]){B, 1, 28, 28}, x);
        ut_tensor *yt = ut_tensor_wrap(ctx, UT_I32, 1, (int64_t[]){B}, y);
        ut_tensor *loss = ut_model_loss(m, ctx, ut_model_forward(m, ctx, xt), yt);
        if (!loss || ut_backward(ctx, loss)) {
            fprintf(stderr, "utrain demo: %s\n", ut_ctx_error(ctx));
            rc = 1;
            break;
        }
        last = ut_f32(loss)[0];
        if (step == 0) first = last;
        ut_optim_step_zero(opt, oc.lr); /* update, and zero the grads in the same pass */
        ut_ctx_reset(ctx);
        if (step % 10 == 0 || step == steps - 1)
            printf("step %4ld  loss %.4f  (%.1f ms/step)\n", step, last, 1e3 * (now() - t0) / (step + 1));
    }
    if (!rc) printf("loss %.4f -> %.4f\n", first, last);
    ut_free(x);
    ut_free(y);
    ut_free(s.templates);
    ut_ctx_free(ctx);
    ut_optim_free(opt);
    ut_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    ut_blas_select_kernels(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("utrain %s\n", UT_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "demo")) return demo(argc - 2, argv + 2);
    fprintf(stderr, "utrain: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
