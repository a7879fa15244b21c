/* One optimizer step over GPT-2 124M's parameters (their shapes and
 * weight-decay flags, random values and gradients), for each optimizer
 * utrain has: AdamW, Lion, Adafactor as the Hugging Face Trainer builds it
 * (no parameter scale, no first moment) and with a first moment, SGD with
 * momentum. The step is memory-bound: its time is the passes over the
 * parameters, gradients and state. Prints a JSON line per optimizer with the
 * median step time; bench/torch_optim_step.py times PyTorch's on the same
 * shapes (bench/run_optim_step.sh runs both). --device cuda runs the steps on
 * the GPU (the model built there; each step timed to the end of its work on
 * the compute stream): scripts/gpu-check.sh's profile step runs it.
 *
 *   optim_step [--steps N] [--threads N] [--device cpu|cuda] */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "bench_util.h"
#include "utrain/base.h"
#include "utrain/nn.h"

int main(int argc, char **argv) {
    long steps = 10, threads = 2;
    ut_device dev = UT_CPU;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device")) {
            const char *d = i + 1 < argc ? argv[++i] : "";
            if (strcmp(d, "cpu") && strcmp(d, "cuda")) {
                fprintf(stderr, "optim_step: --device takes cpu or cuda, not '%s'\n", d);
                return 2;
            }
            dev = !strcmp(d, "cuda") ? UT_CUDA : UT_CPU;
            continue;
        }
        long *v = !strcmp(argv[i], "--steps") ? &steps : !strcmp(argv[i], "--threads") ? &threads : NULL;
        if (!v) {
            fprintf(stderr, "optim_step: unexpected argument '%s' (usage: optim_step [--steps N] [--threads N] "
                            "[--device cpu|cuda])\n",
                    argv[i]);
            return 2;
        }
        if (bench_parse_pos("optim_step", argv[i], i + 1 < argc ? argv[i + 1] : NULL, v)) return 2;
        i++;
    }
    omp_set_num_threads((int)threads);
    char why[512];
    if (ut_backend_check(dev, why, sizeof why)) {
        fprintf(stderr, "optim_step: %s\n", why);
        return 1;
    }
    const ut_backend *be = ut_backend_get(dev);
    ut_model *m = bench_gpt2_124m_on("optim_step", 1, dev);
    if (!m) return 1;
    int64_t n = m->params.numel;
    size_t bytes = sizeof(float) * (size_t)n;
    float *h = malloc(bytes), *p0 = malloc(bytes);
    for (int64_t i = 0; i < n; i++) h[i] = 1e-3f * (float)((i * 2654435761u) % 1000) - 0.5f;
    be->copy(p0, m->params.flat, bytes, UT_COPY_D2H);
    static const struct {
        const char *name;
        ut_optim_kind kind;
        float beta1;
        bool scale;
    } runs[] = {{"adamw", UT_OPTIM_ADAMW, 0.9f, false},
                {"lion", UT_OPTIM_LION, 0.9f, false},
                {"adafactor", UT_OPTIM_ADAFACTOR, 0, false},
                {"adafactor_beta1", UT_OPTIM_ADAFACTOR, 0.9f, true},
                {"sgd_momentum", UT_OPTIM_SGD, 0, false}};
    double *t = malloc(sizeof(double) * (size_t)steps);
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        be->copy(m->params.flat, p0, bytes, UT_COPY_H2D);
        be->copy(m->params.flat_grad, h, bytes, UT_COPY_H2D);
        ut_optim_config oc = ut_optim_defaults(runs[r].kind);
        oc.lr = 1e-4f;
        oc.weight_decay = 0.01f;
        if (runs[r].kind == UT_OPTIM_ADAFACTOR) oc.beta1 = runs[r].beta1, oc.scale_parameter = runs[r].scale;
        if (runs[r].kind == UT_OPTIM_SGD) oc.momentum = 0.9f;
        oc.device = dev;
        ut_optim *o = ut_optim_new(&oc, m->params.flat, m->params.flat_grad, m->params.segs, m->params.n, 0, n);
        for (int w = 0; w < 2; w++) ut_optim_step(o, 1e-4f);
        be->stream_sync(NULL);
        for (long s = 0; s < steps; s++) {
            double t0 = bench_now();
            ut_optim_step(o, 1e-4f);
            be->stream_sync(NULL);
            t[s] = bench_now() - t0;
        }
        double state = (double)ut_optim_state_bytes(o) / (1 << 20);
        printf("{\"optimizer\": \"%s\", \"device\": \"%s\", \"params\": %lld, \"threads\": %ld, "
               "\"step_ms\": %.3f, \"state_mib\": %.1f}\n",
               runs[r].name, dev == UT_CUDA ? "cuda" : "cpu", (long long)n, threads,
               1e3 * bench_median(t, (int)steps), state);
        ut_optim_free(o);
    }
    free(t);
    free(p0);
    free(h);
    ut_model_free(m);
    return 0;
}
