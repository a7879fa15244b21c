/* ZeRO memory: per-rank bytes of parameters, gradients and optimizer state
 * on 4 ranks under ddp, zero1, zero2 and zero3, as the library's accounting
 * reports them after a step (each rank's log), against the ZeRO paper's
 * figures worked out for fp32 training with AdamW (docs/distributed.md):
 *   ddp 4Ψ + 4Ψ + 8Ψ, zero1 4Ψ + 4Ψ + 8S, zero2 4Ψ + 4S + 8S, zero3 4S + 4S + 8S
 * (S = Ψ/4 rounded up to 16 floats), each part within 10%. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "test.h"
#include "utrain/dist.h"

static char tmp[256], shard[512];

static int train(const char *strategy) {
    char cfg[512], out[512];
    snprintf(cfg, sizeof cfg, "%s/%s.yml", tmp, strategy);
    snprintf(out, sizeof out, "%s/%s.out", tmp, strategy);
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "experiment_name: %s\noutput_dir: %s/runs\nseed: 1\n"
            "model: {name: gpt2, n_layer: 4, n_head: 4, n_embd: 256, vocab_size: 256, block_size: 16}\n"
            "data: {name: tokens, train_path: %s, seq_len: 16}\n"
            "train: {max_steps: 2, batch_size: 2, eval_strategy: \"no\", save_strategy: \"no\", "
            "progress: lines}\n"
            "optim: {name: adamw, lr: 0.001}\n"
            "dist: {strategy: %s, timeout_s: 120, bucket_mb: 1}\n",
            strategy, tmp, shard, strategy);
    fclose(f);
    return tp_run_shown((const char *[]){"train", cfg, "--nproc", "4", NULL}, out, 0, strategy);
}

static void check_strategy(const char *strategy) {
    if (train(strategy)) {
        CHECK(0, "%s: the run finished", strategy);
        return;
    }
    char path[700];
    snprintf(path, sizeof path, "%s/runs/%s/logger_logs/training_0.log", tmp, strategy);
    char *log0 = tp_slurp(path);
    const char *np = log0 ? strstr(log0, "Number of trainable parameters = ") : NULL;
    CHECK(np, "%s: the summary names the parameter count", strategy);
    if (!np) {
        free(log0);
        return;
    }
    double psi = atof(np + strlen("Number of trainable parameters = "));
    free(log0);
    double S = (double)ut_shard_size((int64_t)psi, 4);
    double want[3]; /* params, grads, optimizer: bytes */
    if (!strcmp(strategy, "ddp")) want[0] = 4 * psi, want[1] = 4 * psi, want[2] = 8 * psi;
    else if (!strcmp(strategy, "zero1")) want[0] = 4 * psi, want[1] = 4 * psi, want[2] = 8 * S;
    else if (!strcmp(strategy, "zero2")) want[0] = 4 * psi, want[1] = 4 * S, want[2] = 8 * S;
    else want[0] = 4 * S, want[1] = 4 * S, want[2] = 8 * S;
    for (int r = 0; r < 4; r++) {
        snprintf(path, sizeof path, "%s/runs/%s/logger_logs/training_%d.log", tmp, strategy, r);
        char *log = tp_slurp(path);
        const char *m = log ? strstr(log, "memory rank ") : NULL;
        double have[3];
        int got = m ? sscanf(strchr(m, ':'), ": params %lf MiB, grads %lf MiB, optimizer %lf MiB",
                             &have[0], &have[1], &have[2])
                    : 0;
        CHECK(got == 3, "%s rank %d: memory line in the log", strategy, r);
        if (got == 3) {
            const char *what[3] = {"params", "grads", "optimizer"};
            double worst = 0;
            for (int i = 0; i < 3; i++) {
                double rel = fabs(have[i] * 1048576.0 - want[i]) / want[i];
                worst = fmax(worst, rel);
                CHECK(rel <= 0.10, "%s rank %d: %s %.3f MiB, theory %.3f MiB", strategy, r, what[i],
                      have[i], want[i] / 1048576.0);
            }
            if (r == 0)
                printf("     %s: params %.2f grads %.2f optim %.2f MiB (theory %.2f %.2f %.2f), "
                       "worst %.1f%%\n",
                       strategy, have[0], have[1], have[2], want[0] / 1048576.0,
                       want[1] / 1048576.0, want[2] / 1048576.0, 100 * worst);
        }
        free(log);
    }
}

static void test_ddp(void) { check_strategy("ddp"); }
static void test_zero1(void) { check_strategy("zero1"); }
static void test_zero2(void) { check_strategy("zero2"); }
static void test_zero3(void) { check_strategy("zero3"); }

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-zeromem")) return 1;
    tp_mpi_env(true);
    if (!tp_tokenize_sample(tmp, shard, sizeof shard)) return 1;
    RUN(test_ddp);
    RUN(test_zero1);
    RUN(test_zero2);
    RUN(test_zero3);
    return tp_finish(TEST_SUMMARY(), tmp);
}
