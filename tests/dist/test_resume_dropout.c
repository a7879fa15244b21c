/* Exact resume with dropout on several ranks and workers, over uneven data.
 * A tiny GPT-2 with dropout 0.1 trains on 44 examples, a number no global
 * batch here divides: each epoch ends with a short batch in which the last
 * ranks (or dp workers) have an empty share and run a stand-in instead, so
 * ranks draw different numbers of dropout masks. A straight run to step 20
 * writes checkpoints every 4 steps; a second run starts from its step-12
 * checkpoint (in the second or third epoch, after short batches) and must
 * reach the straight run's step-20 weights and optimizer state bit for bit.
 * Covered: ddp, zero1, zero2, zero3 on 2 and 4 ranks in fp32, bf16 and
 * fp16, and the dp strategy's worker threads. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc.h"
#include "test.h"

static char tmp[256], shard[512];

enum { WINDOWS = 44, SEQ = 16 };

/* WINDOWS examples of SEQ + 1 tokens from the SST-2 sample's bytes, as a
 * tokens shard (the data.md format). */
static bool write_shard(void) {
    char *text = tp_slurp("data/sst2_sample/train.tsv");
    snprintf(shard, sizeof shard, "%s/uneven.bin", tmp);
    FILE *f = fopen(shard, "wb");
    bool ok = text && f && strlen(text) >= WINDOWS * (SEQ + 1);
    int32_t head[256] = {20240520, 1, WINDOWS * (SEQ + 1)};
    ok = ok && fwrite(head, sizeof head, 1, f) == 1;
    for (int i = 0; ok && i < WINDOWS * (SEQ + 1); i++) {
        uint16_t tok = (uint8_t)text[i];
        ok = fwrite(&tok, sizeof tok, 1, f) == 1;
    }
    if (f && fclose(f)) ok = false;
    free(text);
    return ok;
}

static const char *ckpt(const char *run, int step) {
    static char buf[2][700];
    static int k;
    k ^= 1;
    snprintf(buf[k], sizeof buf[k], "%s/runs/%s/checkpoints/step_%08d.safetensors", tmp, run, step);
    return buf[k];
}

/* Runs NAME to step 20 (from run FROM's step-12 checkpoint when from is
 * set): strategy on nproc processes (dp: one process, nproc workers),
 * batch per rank or worker, precision. */
static int run(const char *name, const char *strategy, int nproc, int batch, const char *precision,
               const char *from) {
    char cfg[512], out[512], np[8];
    if (from && !tp_plant_checkpoint(ckpt(from, 12), tp_path(tp_path(tmp, "runs"), name))) return -1;
    snprintf(cfg, sizeof cfg, "%s/%s.yml", tmp, name);
    snprintf(out, sizeof out, "%s/%s.out", tmp, name);
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "experiment_name: %s\noutput_dir: %s/runs\nseed: 3\ncontinue_training: true\nthreads: 1\n"
            "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 16,\n"
            "        dropout: 0.1}\n"
            "data: {name: tokens, train_path: %s, seq_len: %d}\n"
            "train: {max_steps: 20, batch_size: %d, log_interval: 1, eval_strategy: \"no\",\n"
            "        save_strategy: steps, save_interval: 4, save_total_limit: 0, progress: lines,\n"
            "        precision: %s}\n"
            "optim: {name: adamw, lr: 0.003}\n"
            "dist: {strategy: %s, timeout_s: 120}\n",
            name, tmp, shard, SEQ, batch, precision, strategy);
    fclose(f);
    snprintf(np, sizeof np, "%d", nproc);
    int rc = tp_run_shown((const char *[]){"train", cfg, "--nproc", np, NULL}, out, 0, name);
    char *s = rc ? NULL : tp_slurp(out);
    if (!rc && from) CHECK(s && strstr(s, "Resuming from"), "%s resumed from step 12", name);
    if (!rc && !from) /* continue_training with nothing to resume says so */
        CHECK(s && strstr(s, "continue_training: no checkpoint in"), "%s says it starts at step 0", name);
    if (!rc && strcmp(strategy, "dp")) { /* more processes than cores: said, not refused */
        char note[64];
        snprintf(note, sizeof note, "note: %d processes on %ld cores", nproc, sysconf(_SC_NPROCESSORS_ONLN));
        bool over = nproc > sysconf(_SC_NPROCESSORS_ONLN);
        CHECK(s && (strstr(s, note) != NULL) == over, "%s: the note on %d processes is %s", name, nproc,
              over ? "missing" : "there without cause");
    }
    free(s);
    return rc;
}

static void resume_is_exact(const char *strategy, int nproc, int batch, const char *precision) {
    char a[64], b[80];
    snprintf(a, sizeof a, "%s_x%d_%s", strategy, nproc, precision);
    snprintf(b, sizeof b, "%s_resumed", a);
    if (run(a, strategy, nproc, batch, precision, NULL) || run(b, strategy, nproc, batch, precision, a)) {
        CHECK(0, "%s: every run finished", a);
        return;
    }
    bool same = tp_same_weights(ckpt(a, 20), ckpt(b, 20));
    CHECK(same, "%s: resumed at step 12, step 20 is bit-identical to the straight run "
                "(weights differ by %.3g)", a, tp_weights_rel_diff(ckpt(a, 20), ckpt(b, 20)));
    if (same) printf("     %s: resumed run bit-identical at step 20\n", a);
}

/* 44 examples, global batch 6 (2 x 3): batches of 6, the last of 2, which
 * rank 1 has no share of */
static void test_ddp_2_ranks(void) { resume_is_exact("ddp", 2, 3, "fp32"); }
static void test_zero2_2_ranks_bf16(void) { resume_is_exact("zero2", 2, 3, "bf16"); }
static void test_zero1_2_ranks_fp16(void) { resume_is_exact("zero1", 2, 3, "fp16"); }
/* global batch 12 (4 x 3): the last batch of 8 leaves rank 3 empty */
static void test_zero3_4_ranks(void) { resume_is_exact("zero3", 4, 3, "fp32"); }
static void test_ddp_4_ranks_fp16(void) { resume_is_exact("ddp", 4, 3, "fp16"); }
static void test_zero1_4_ranks_bf16(void) { resume_is_exact("zero1", 4, 3, "bf16"); }
/* dp: 3 workers of 2 in one process */
static void test_dp_workers(void) { resume_is_exact("dp", 3, 2, "fp32"); }

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-dropresume")) return 1;
    tp_mpi_env(true);
    mkdir(tp_path(tmp, "runs"), 0755);
    if (!write_shard()) {
        fprintf(stderr, "cannot write the token shard in %s\n", tmp);
        return 1;
    }
    RUN(test_ddp_2_ranks);
    RUN(test_zero2_2_ranks_bf16);
    RUN(test_zero1_2_ranks_fp16);
    RUN(test_zero3_4_ranks);
    RUN(test_ddp_4_ranks_fp16);
    RUN(test_zero1_4_ranks_bf16);
    RUN(test_dp_workers);
    return tp_finish(TEST_SUMMARY(), tmp);
}
