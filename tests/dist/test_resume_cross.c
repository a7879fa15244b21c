/* Checkpoints across strategies and world sizes. A reference run (1
 * process, ddp) trains a tiny GPT-2 for 30 steps with checkpoints at 10, 20
 * and 30. Its step-10 checkpoint goes on under zero3 on 4 ranks to 30; that
 * run's step-20 checkpoint goes on under ddp on 2 ranks, and under zero2 on 1
 * process, to 30. Each continuation must reach the reference's weights and
 * optimizer state (within 1e-5: only the summation order differs), which also
 * shows the data position carried over as a global cursor: the same global
 * batches, none skipped or repeated. Resuming under the same strategy and
 * world size is bit-exact. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proc.h"
#include "test.h"

static char tmp[256], shard[512];

static const char *ckpt(const char *run, int step) {
    static char buf[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/runs/%s/checkpoints/step_%08d.safetensors", tmp, run, step);
    return buf[k];
}

/* Runs NAME (continuing from the checkpoint of run FROM at step AT, copied
 * into NAME's run directory, when from is set) to step 30. */
static int run(const char *name, const char *strategy, int nproc, const char *from, int at) {
    char cfg[512], out[512];
    if (from && !tp_plant_checkpoint(ckpt(from, at), tp_path(tp_path(tmp, "runs"), name))) return -1;
    snprintf(cfg, sizeof cfg, "%s/%s.yml", tmp, name);
    snprintf(out, sizeof out, "%s/%s.out", tmp, name);
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "experiment_name: %s\noutput_dir: %s/runs\nseed: 5\ncontinue_training: true\n"
            "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 16}\n"
            "data: {name: tokens, train_path: %s, seq_len: 16}\n"
            "train: {max_steps: 30, batch_size: %d, log_interval: 1, eval_strategy: \"no\",\n"
            "        save_strategy: steps, save_interval: 10, save_total_limit: 0, progress: lines}\n"
            "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
            "dist: {strategy: %s, timeout_s: 120}\n",
            name, tmp, shard, 16 / nproc, strategy);
    fclose(f);
    char np[8];
    snprintf(np, sizeof np, "%d", nproc);
    int rc = tp_run_shown((const char *[]){"train", cfg, "--nproc", np, NULL}, out, 0, name);
    if (!rc && from) {
        char *s = tp_slurp(out);
        CHECK(s && strstr(s, "Resuming from"), "%s resumed from its copied checkpoint", name);
        free(s);
    }
    return rc;
}

static void same_state(const char *a, int sa, const char *b, int sb, double tol) {
    double w = tp_tensors_rel_diff(ckpt(a, sa), ckpt(b, sb), "model.");
    double o = tp_tensors_rel_diff(ckpt(a, sa), ckpt(b, sb), "optim.");
    CHECK(w >= 0 && w <= tol, "%s@%d vs %s@%d: weights differ by %.3g", a, sa, b, sb, w);
    CHECK(o >= 0 && o <= tol, "%s@%d vs %s@%d: optimizer state differs by %.3g", a, sa, b, sb, o);
    printf("     %s@%d vs %s@%d: weights %.2g, optimizer %.2g\n", a, sa, b, sb, w, o);
}

static void test_across_strategies_and_sizes(void) {
    if (run("ref", "ddp", 1, NULL, 0) || run("z3x4", "zero3", 4, "ref", 10) ||
        run("ddpx2", "ddp", 2, "z3x4", 20) || run("z2x1", "zero2", 1, "z3x4", 20)) {
        CHECK(0, "every run finished");
        return;
    }
    same_state("ref", 20, "z3x4", 20, 1e-5);
    same_state("ref", 30, "z3x4", 30, 1e-5);
    same_state("ref", 30, "ddpx2", 30, 1e-5);
    same_state("ref", 30, "z2x1", 30, 1e-5);
}

static void test_same_size_is_exact(void) {
    if (run("z1x2", "zero1", 2, NULL, 0) || run("z1x2_resumed", "zero1", 2, "z1x2", 10)) {
        CHECK(0, "every run finished");
        return;
    }
    CHECK(tp_same_weights(ckpt("z1x2", 30), ckpt("z1x2_resumed", 30)),
          "zero1 on 2 ranks resumed at step 10 is bit-identical at step 30");
}

static void test_other_global_batch_is_refused(void) {
    char cfg[512], out[512];
    snprintf(cfg, sizeof cfg, "%s/ref.yml", tmp);
    snprintf(out, sizeof out, "%s/refused.out", tmp);
    /* 4 ranks of batch 16 is a global batch of 64, not 16 */
    int rc = tp_run((const char *[]){"train", cfg, "--nproc", "4", "--set", "train.batch_size=16",
                                     "--set", "max_steps=40", NULL},
                    out);
    char *s = tp_slurp(out);
    CHECK(rc == 1 && s && strstr(s, "global batch") && strstr(s, "64 = batch_size 16 x 4 processes"),
          "a different global batch is refused with a clear message (exit %d):\n%s", rc, s ? s : "");
    free(s);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-xresume")) return 1;
    tp_mpi_env(true);
    char runs[300];
    snprintf(runs, sizeof runs, "%s/runs", tmp);
    mkdir(runs, 0755);
    if (!tp_tokenize_sample(tmp, shard, sizeof shard)) return 1;
    RUN(test_across_strategies_and_sizes);
    RUN(test_same_size_is_exact);
    RUN(test_other_global_batch_is_refused);
    return tp_finish(TEST_SUMMARY(), tmp);
}
