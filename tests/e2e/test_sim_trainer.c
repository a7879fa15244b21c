/* The trainer on the simulated device (device: sim), whose memory the host
 * cannot read: every run here is made twice, on sim and on the CPU, and
 * must give the same checkpoint to the bit (weights, optimizer state and
 * training state) and the same metrics. Covered: the CNN with evaluation
 * and checkpoints, the tiny GPT-2 with dropout in fp32, bf16 and fp16, the
 * bag-of-words classifier and `utrain test` on it, the dp strategy's worker
 * threads, ddp (direct and staged collectives) and zero3 on two ranks, a
 * resume on sim, and a checkpoint
 * written on the CPU resumed on sim. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "test.h"

static char tmp[256], shard[512];

static const char *run_file(const char *run, const char *leaf) { return tp_run_file(tmp, run, leaf); }

static int train(const char *name, const char *body, const char *device, const char *sets, int nproc) {
    return tp_train_in(tmp, name, body, device, sets, nproc);
}

/* The same run on both devices; their checkpoint at step and metrics agree. */
static void both(const char *name, const char *body, const char *sets, int nproc, int step) {
    char a[64], b[64], leaf[64];
    snprintf(a, sizeof a, "%s_cpu", name);
    snprintf(b, sizeof b, "%s_sim", name);
    int ra = train(a, body, "cpu", sets, nproc), rb = train(b, body, "sim", sets, nproc);
    CHECK(ra == 0 && rb == 0, "%s: cpu exit %d, sim exit %d", name, ra, rb);
    snprintf(leaf, sizeof leaf, "checkpoints/step_%08d.safetensors", step);
    CHECK(tp_same_file(run_file(a, leaf), run_file(b, leaf)), "%s: the checkpoints at step %d differ", name, step);
    /* metrics.jsonl's losses (the lines also carry times, which differ) */
    for (int s = 1; s <= step; s++) {
        char la[64] = "", lb[64] = "";
        bool ha = tp_loss_at(run_file(a, "metrics.jsonl"), "train", s, la, sizeof la);
        bool hb = tp_loss_at(run_file(b, "metrics.jsonl"), "train", s, lb, sizeof lb);
        CHECK(ha == hb && !strcmp(la, lb), "%s: step %d loss %s on cpu, %s on sim", name, s, la, lb);
    }
}

static const char *cnn =
    "model: {name: cnn}\n"
    "data: {name: idx_images, dev_size: 200}\n"
    "train: {max_steps: 6, batch_size: 8, log_interval: 1, eval_strategy: steps, eval_interval: 3,\n"
    "        save_strategy: steps, save_interval: 3, progress: lines}\n";

static char gpt2[1024];

static void test_cnn(void) { both("cnn", cnn, "", 1, 6); }

static void test_gpt2_precisions(void) {
    const char *p[3] = {"fp32", "bf16", "fp16"};
    for (int i = 0; i < 3; i++) {
        char name[32], set[64];
        snprintf(name, sizeof name, "gpt2_%s", p[i]);
        snprintf(set, sizeof set, "train.precision=%s", p[i]);
        both(name, gpt2, set, 1, 8);
    }
}

/* GPT-2's training step takes its head and loss as one op (the model's
 * forward_loss, ut_linear_cross_entropy); the same bf16 run with the two
 * ops (UT_LINEAR_CE=0) reaches the same checkpoint and losses, bit for
 * bit (after test_gpt2_precisions, whose run it repeats) */
static void test_head_loss_fused(void) {
    setenv("UT_LINEAR_CE", "0", 1);
    int rc = train("gpt2_bf16_two_ops", gpt2, "sim", "train.precision=bf16", 1);
    unsetenv("UT_LINEAR_CE");
    CHECK(rc == 0, "the run with UT_LINEAR_CE=0: exit %d", rc);
    CHECK(tp_same_file(run_file("gpt2_bf16_sim", "checkpoints/step_00000008.safetensors"),
                       run_file("gpt2_bf16_two_ops", "checkpoints/step_00000008.safetensors")),
          "the checkpoints at step 8 differ");
    for (int s = 1; s <= 8; s++) {
        char la[64] = "", lb[64] = "";
        bool ha = tp_loss_at(run_file("gpt2_bf16_sim", "metrics.jsonl"), "train", s, la, sizeof la);
        bool hb = tp_loss_at(run_file("gpt2_bf16_two_ops", "metrics.jsonl"), "train", s, lb, sizeof lb);
        CHECK(ha && hb && !strcmp(la, lb), "step %d loss %s fused, %s as two ops", s, la, lb);
    }
}

static void test_distributed(void) {
    both("dp", gpt2, "dist.strategy=dp dist.nproc_per_node=2", 1, 8);
    both("ddp", gpt2, "dist.strategy=ddp", 2, 8);
    /* ddp on sim takes the direct path by default (dist.device_comm: auto),
     * the staged one when asked: both give the CPU's bits */
    both("ddp_host", gpt2, "dist.strategy=ddp dist.device_comm=host", 2, 8);
    both("ddp_tcp", gpt2, "dist.strategy=ddp dist.launcher=tcp", 2, 8); /* the direct path's group over TCP */
    /* tensor parallelism's sums and a pipeline's tied embedding, direct on sim */
    both("tp2", gpt2, "dist.tensor_parallel=2", 2, 8);
    both("pp2", gpt2, "dist.pipeline_parallel=2", 2, 8);
    both("zero2", gpt2, "dist.strategy=zero2", 2, 8);
    both("zero3", gpt2, "dist.strategy=zero3", 2, 8);
    const char *paths[4][2] = {{"ddp_sim", "(device sim): direct, the simulated device's collectives on the device's "
                                           "memory; each gradient bucket is all-reduced on the device's memory"},
                               {"zero3_sim", "each gradient bucket is reduce-scattered on the device's memory, on the "
                                             "communicator's stream, as backward completes it, and the parameters "
                                             "are gathered there too"},
                               {"tp2_sim", "Tensor-parallel sums (device sim): direct, the simulated device's "
                                           "collectives"},
                               {"ddp_host_sim", "(device sim): mpi (through host memory (dist.device_comm: host)): "
                                                "each gradient bucket is copied into page-locked host memory"}};
    for (int i = 0; i < 4; i++) {
        char *log = tp_slurp(run_file(paths[i][0], "logger_logs/training_0.log"));
        CHECK(log && strstr(log, paths[i][1]), "%s: the log does not say '%s'", paths[i][0], paths[i][1]);
        free(log);
    }
    /* staged through host memory (dist.device_comm: host), the sharded
     * strategies gather parameters through a page-locked host copy; direct
     * (the default on sim) and on the CPU, on the buffers themselves */
    both("zero2_host", gpt2, "dist.strategy=zero2 dist.device_comm=host", 2, 8);
    both("zero3_host", gpt2, "dist.strategy=zero3 dist.device_comm=host", 2, 8);
    const char *runs[6] = {"zero2_host_sim", "zero3_host_sim", "zero2_sim", "zero3_sim", "zero2_cpu", "zero3_cpu"};
    for (int i = 0; i < 6; i++) {
        char *log = tp_slurp(run_file(runs[i], "logger_logs/training_1.log"));
        bool pinned = log && strstr(log, "parameter gathers rank 1: through a page-locked host copy");
        CHECK(log && pinned == (i < 2), "%s: %s the page-locked gather path", runs[i],
              i < 2 ? "takes" : "does not take");
        free(log);
    }
}

/* DDP's gradient compression (dist.comm_hook): on sim and on the CPU the same
 * bits; against the uncompressed ddp run, near but not equal (the gradients
 * were rounded to bf16 / fp16 on the way). */
static void test_comm_hook(void) {
    const char *hooks[2] = {"bf16", "fp16"};
    for (int i = 0; i < 2; i++) {
        char name[32], set[64];
        snprintf(name, sizeof name, "ddp_%s", hooks[i]);
        snprintf(set, sizeof set, "dist.strategy=ddp dist.comm_hook=%s", hooks[i]);
        both(name, gpt2, set, 2, 8);
        char a[64];
        snprintf(a, sizeof a, "%s_cpu", name);
        CHECK(!tp_same_file(run_file(a, "checkpoints/step_00000008.safetensors"),
                         run_file("ddp_cpu", "checkpoints/step_00000008.safetensors")),
              "%s: the compressed run equals the uncompressed one: nothing was rounded", hooks[i]);
        double worst = tp_loss_diff(run_file("ddp_cpu", "metrics.jsonl"), run_file(a, "metrics.jsonl"), 8);
        printf("     %s compression: losses within %.2e of uncompressed ddp\n", hooks[i], worst);
        CHECK(worst < 1e-2, "%s: losses %.3g from uncompressed ddp", hooks[i], worst);
    }
}

/* ZeRO-Offload: the optimizer's state and update on the host, the model on
 * sim; the same checkpoints as zero2 and zero1 without it, to the bit, with a
 * resume in the middle; the log says where the state is. */
static void test_offload(void) {
    CHECK(train("z2off", gpt2, "sim", "dist.strategy=zero2 dist.offload_optimizer=cpu train.max_steps=4", 2) == 0,
          "zero2 with offload, first half");
    CHECK(train("z2off", gpt2, "sim", "dist.strategy=zero2 dist.offload_optimizer=cpu continue_training=true", 2) == 0,
          "zero2 with offload, resumed");
    CHECK(tp_same_file(run_file("z2off", "checkpoints/step_00000008.safetensors"),
                    run_file("zero2_cpu", "checkpoints/step_00000008.safetensors")),
          "zero2 with the optimizer offloaded differs from zero2");
    char *log = tp_slurp(run_file("z2off", "logger_logs/training_0.log"));
    CHECK(log && strstr(log, "optimizer offload rank 0:") && strstr(log, "optimizer 0.000 MiB") &&
              strstr(log, "reaches it bucket by bucket during backward"),
          "the log says the optimizer is on the host, fed bucket by bucket:\n%s", log ? log : "(no log)");
    free(log);
    /* a run without offload goes on with it (the checkpoint is the same file either way) */
    CHECK(train("z2mix", gpt2, "sim", "dist.strategy=zero2 train.max_steps=4", 2) == 0, "zero2, first half");
    CHECK(train("z2mix", gpt2, "sim", "dist.strategy=zero2 dist.offload_optimizer=cpu continue_training=true", 2) == 0,
          "zero2 resumed with offload");
    CHECK(tp_same_file(run_file("z2mix", "checkpoints/step_00000008.safetensors"),
                    run_file("zero2_cpu", "checkpoints/step_00000008.safetensors")),
          "zero2 resumed with the optimizer offloaded differs from zero2");
    /* fp16 loss scaling, clipping and accumulation around the offloaded
     * step on 2 ranks: zero1 (the shard's part of each all-reduced bucket)
     * and zero2 (each bucket's reduce-scatter), both bucket by bucket and
     * scaled on the host; then each on one process (the gradient copied down
     * after backward: one process has no buckets for zero1) */
    const char *kinds[2] = {"zero1", "zero2"};
    for (int i = 0; i < 2; i++) {
        char sets[256], ref[32], off[32], one[32];
        snprintf(ref, sizeof ref, "%sref", kinds[i]);
        snprintf(off, sizeof off, "%sfp16off", kinds[i]);
        snprintf(one, sizeof one, "%soff1", kinds[i]);
        snprintf(sets, sizeof sets,
                 "dist.strategy=%s train.precision=fp16 train.grad_clip=0.05 train.gradient_accumulation_steps=2",
                 kinds[i]);
        CHECK(train(ref, gpt2, "cpu", sets, 2) == 0, "%s fp16 on the CPU", kinds[i]);
        /* small buckets: many land one after another (the sums per element are the same) */
        snprintf(sets + strlen(sets), sizeof sets - strlen(sets), " dist.offload_optimizer=cpu dist.bucket_mb=0.02");
        CHECK(train(off, gpt2, "sim", sets, 2) == 0, "%s fp16 with offload", kinds[i]);
        CHECK(tp_same_file(run_file(off, "checkpoints/step_00000008.safetensors"),
                           run_file(ref, "checkpoints/step_00000008.safetensors")),
              "%s fp16 with clipping and accumulation, offloaded, differs from the CPU's run", kinds[i]);
        char *l2 = tp_slurp(run_file(off, "logger_logs/training_0.log"));
        CHECK(l2 && strstr(l2, "the gradient reaches it bucket by bucket during backward"),
              "%s on 2 ranks: the log does not say the gradient streams to the host:\n%s", kinds[i],
              l2 ? l2 : "(no log)");
        free(l2);
        snprintf(sets, sizeof sets, "dist.strategy=%s dist.offload_optimizer=cpu dist.bucket_mb=0.02", kinds[i]);
        CHECK(train(one, gpt2, "sim", sets, 1) == 0, "%s with offload", kinds[i]);
        CHECK(tp_same_file(run_file(one, "checkpoints/step_00000008.safetensors"),
                           run_file("gpt2_fp32_cpu", "checkpoints/step_00000008.safetensors")),
              "%s with the optimizer offloaded, one process, differs from plain training", kinds[i]);
        /* the update in pieces of a bucket's size (0.02 MiB: many), each sent back as it is done */
        char *l1 = tp_slurp(run_file(one, "logger_logs/training_0.log"));
        CHECK(l1 && strstr(l1, "the updated parameters go back in pieces of 0.020 MiB, each while the next is updated"),
              "%s: the log does not give the update's pieces:\n%s", kinds[i], l1 ? l1 : "(no log)");
        free(l1);
    }
}

/* bow on the SST-2 sample, then `utrain test`: the same results files */
static void test_bow_and_test_mode(void) {
    const char *bow = "model: {name: bow, n_embd: 8, hidden: 8}\n"
                      "data: {name: tsv_text, train_path: data/sst2_sample/train.tsv,\n"
                      "       dev_path: data/sst2_sample/dev.tsv, test_path: data/sst2_sample/dev.tsv, max_len: 16}\n"
                      "train: {epochs: 1, batch_size: 16, log_interval: 1, progress: lines}\n";
    both("bow", bow, "", 1, 15);
    const char *d[2] = {"cpu", "sim"};
    char *res[2];
    for (int i = 0; i < 2; i++) {
        char run[64], out[512];
        snprintf(run, sizeof run, "%s/runs/bow_%s", tmp, d[i]);
        snprintf(out, sizeof out, "%s/test_%s.out", tmp, d[i]);
        CHECK(tp_run((const char *[]){"test", run, NULL}, out) == 0, "utrain test on %s", d[i]);
        res[i] = tp_slurp(run_file(i ? "bow_sim" : "bow_cpu", "dev_predictions.tsv"));
    }
    CHECK(res[0] && res[1] && !strcmp(res[0], res[1]), "the predictions differ");
    free(res[0]);
    free(res[1]);
}

/* UT_PROFILE_OPS: the table of time per op goes to stderr at exit, on the
 * host's clock around waits (1) or from the device's timing events (gpu:
 * sim's are the times its stream's worker reached them), with each op's
 * calls, memory rates and the products' FLOP rates: 4 steps of a 2-layer
 * GPT-2 make 4 of its head-and-loss ops (linear_ce) forward and back. */
static void test_profile(void) {
    const char *modes[2] = {"1", "gpu"};
    for (int i = 0; i < 2; i++) {
        char name[32], out[512], head[96];
        snprintf(name, sizeof name, "prof_%s", modes[i]);
        setenv("UT_PROFILE_OPS", modes[i], 1);
        int rc = train(name, gpt2, "sim", "train.max_steps=4", 1);
        unsetenv("UT_PROFILE_OPS");
        snprintf(out, sizeof out, "%s/%s.out", tmp, name);
        char *o = tp_slurp(out);
        snprintf(head, sizeof head, "utrain op profile (UT_PROFILE_OPS=%s)", modes[i]);
        const char *ce = o ? strstr(o, "  linear_ce ") : NULL;
        long fwd = 0, bwd = 0;
        double fs = -1, bs = -1, fr = -1, br = -1, ff = -1, bf = -1;
        if (ce) sscanf(ce, " linear_ce %lf %ld %lf %lf %lf %ld %lf %lf", &fs, &fwd, &fr, &ff, &bs, &bwd, &br, &bf);
        CHECK(rc == 0 && o && strstr(o, head) && strstr(o, "  linear ") && fwd == 4 && bwd == 4 && fs > 0 && bs > 0,
              "UT_PROFILE_OPS=%s: exit %d, linear_ce %ld / %ld calls, %g / %g s:\n%s", modes[i], rc, fwd, bwd, fs, bs,
              o ? o : "(no output)");
        /* each direction's memory rate, and its products' FLOP rate */
        CHECK(fr > 0 && br > 0 && ff > 0 && bf > 0 && strstr(o, "GB/s"),
              "UT_PROFILE_OPS=%s: linear_ce's rates %g / %g GB/s, %g / %g TFLOP/s", modes[i], fr, br, ff, bf);
        /* a product's FLOP rates (a layer norm has none: "-") */
        const char *li = o ? strstr(o, "  linear ") : NULL, *ln = o ? strstr(o, "  layernorm ") : NULL;
        double lf[8] = {0};
        int got = li ? sscanf(li, " linear %lf %lf %lf %lf %lf %lf %lf %lf", &lf[0], &lf[1], &lf[2], &lf[3], &lf[4],
                              &lf[5], &lf[6], &lf[7])
                     : 0;
        char ln_rate[8] = "";
        if (ln) sscanf(ln, " layernorm %*f %*d %*f %7s", ln_rate);
        CHECK(got == 8 && lf[3] > 0 && lf[7] > 0 && !strcmp(ln_rate, "-"),
              "UT_PROFILE_OPS=%s: linear's TFLOP/s %g / %g (%d fields), layernorm's %s", modes[i], lf[3], lf[7], got,
              ln_rate);
        free(o);
    }
}

/* A resume on sim reaches the straight run's step-8 checkpoint, and so does
 * a run that resumes on sim from the CPU run's step-4 checkpoint. */
static void test_resume(void) {
    CHECK(train("r_sim", gpt2, "sim", "train.max_steps=4", 1) == 0, "the first half");
    CHECK(train("r_sim", gpt2, "sim", "continue_training=true", 1) == 0, "the resume");
    CHECK(tp_same_file(run_file("r_sim", "checkpoints/step_00000008.safetensors"),
                    run_file("gpt2_fp32_cpu", "checkpoints/step_00000008.safetensors")),
          "stop at 4 and resume on sim differs from the straight run");
    char run[600];
    snprintf(run, sizeof run, "%s/runs/x_sim", tmp);
    CHECK(tp_plant_checkpoint(run_file("gpt2_fp32_cpu", "checkpoints/step_00000004.safetensors"), run), "plant");
    CHECK(train("x_sim", gpt2, "sim", "continue_training=true", 1) == 0, "the cross-device resume");
    CHECK(tp_same_file(run_file("x_sim", "checkpoints/step_00000008.safetensors"),
                    run_file("gpt2_fp32_cpu", "checkpoints/step_00000008.safetensors")),
          "a CPU checkpoint resumed on sim differs from the straight run");
}

/* train.auto_find_batch_size on a device of 100 MB (UTRAIN_SIM_MEMORY):
 * the tiny GPT-2 at a batch of 1024 x 16 tokens runs out of memory, and so
 * does 512; the run starts again at 256 and trains there. Without the key
 * the first failure ends the run (exit 1, saying what to lower, no crash);
 * on a device too small for any batch the search ends at 1, saying so;
 * a run with checkpoints is not started again. */
static void test_auto_find_batch_size(void) {
    setenv("UTRAIN_SIM_MEMORY", "100000000", 1);
    int rc = tp_train_expect(tmp, "afbs", gpt2, "sim",
                             "train.batch_size=1024 train.max_steps=2 train.auto_find_batch_size=true", 1, 0);
    char *o = tp_slurp(tp_path(tmp, "afbs.out")), *cfg = tp_slurp(run_file("afbs", "config.yml"));
    CHECK(rc == 0 && o && strstr(o, "auto_find_batch_size: out of memory at train.batch_size 1024; starting again at 512") &&
              strstr(o, "auto_find_batch_size: out of memory at train.batch_size 512; starting again at 256") &&
              strstr(o, "the run trained at train.batch_size 256") && !strstr(o, "again at 128") &&
              strstr(o, "Training done: 2 steps"),
          "auto_find_batch_size: exit %d:\n%s", rc, o ? o : "(nothing)");
    CHECK(cfg && strstr(cfg, "batch_size: 256"), "the run's config.yml holds the batch it trained at:\n%s",
          cfg ? cfg : "(none)");
    free(o);
    free(cfg);
    rc = tp_train_expect(tmp, "oom", gpt2, "sim", "train.batch_size=1024 train.max_steps=2", 1, 1);
    o = tp_slurp(tp_path(tmp, "oom.out"));
    CHECK(rc == 1 && o && strstr(o, "utrain: error: sim device: out of memory") && strstr(o, "lower train.batch_size") &&
              !strstr(o, "fatal") && !strstr(o, "auto_find"),
          "out of memory without the key: exit %d:\n%s", rc, o ? o : "(nothing)");
    free(o);
    /* an evaluation at its own batch out of memory (8400 dev sequences, all
     * in one batch): lowering the training batch would not help, and the
     * run says what would */
    char sets[600], dev[600];
    snprintf(dev, sizeof dev, "%s", tp_path(tmp, "dev.bin"));
    CHECK(tp_run((const char *[]){"tokenize", "--tokenizer", "byte", "docs/performance.md", dev, NULL},
                 tp_path(tmp, "dev_tokenize.out")) == 0, "tokenize the dev text");
    snprintf(sets, sizeof sets,
             "train.batch_size=256 train.eval_batch_size=8192 train.max_steps=2 train.auto_find_batch_size=true "
             "data.dev_path=%s train.eval_strategy=steps train.eval_interval=1",
             dev);
    rc = tp_train_expect(tmp, "afbse", gpt2, "sim", sets, 1, 1);
    o = tp_slurp(tp_path(tmp, "afbse.out"));
    CHECK(rc == 1 && o && strstr(o, "sim device: out of memory") &&
              strstr(o, "This was an evaluation: its batch is train.eval_batch_size") &&
              strstr(o, "out of memory in an evaluation at train.eval_batch_size 8192: not started again") &&
              strstr(o, "lower train.eval_batch_size") && !strstr(o, "starting again"),
          "an evaluation out of memory: exit %d:\n%s", rc, o ? o : "(nothing)");
    free(o);
    setenv("UTRAIN_SIM_MEMORY", "30000000", 1);
    rc = tp_train_expect(tmp, "afbs1", gpt2, "sim", "train.batch_size=4 train.max_steps=2 train.auto_find_batch_size=true",
                         1, 1);
    o = tp_slurp(tp_path(tmp, "afbs1.out"));
    CHECK(rc == 1 && o && strstr(o, "starting again at 2") && strstr(o, "starting again at 1") &&
              strstr(o, "out of memory at train.batch_size 1: no batch fits"),
          "no batch fits: exit %d:\n%s", rc, o ? o : "(nothing)");
    free(o);
    /* the first run resumed on a device too small for it: its checkpoints
     * hold its batch, so it is not started again at another */
    rc = tp_train_expect(tmp, "afbs", gpt2, "sim",
                         "train.batch_size=256 train.max_steps=4 train.auto_find_batch_size=true continue_training=true",
                         1, 1);
    o = tp_slurp(tp_path(tmp, "afbs.out"));
    CHECK(rc == 1 && o && strstr(o, "out of memory at train.batch_size 256 after the run wrote checkpoints") &&
              strstr(o, "not started again, since they hold its batch") && !strstr(o, "starting again"),
          "a run with checkpoints out of memory: exit %d:\n%s", rc, o ? o : "(nothing)");
    free(o);
    setenv("UTRAIN_SIM_MEMORY", "12abc", 1); /* not a size: said, not ignored */
    rc = tp_train_expect(tmp, "simmem", gpt2, "sim", "train.max_steps=1", 1, 1);
    o = tp_slurp(tp_path(tmp, "simmem.out"));
    CHECK(rc == 1 && o && strstr(o, "UTRAIN_SIM_MEMORY: '12abc' is not a number of bytes"),
          "a bad UTRAIN_SIM_MEMORY: exit %d:\n%s", rc, o ? o : "(nothing)");
    free(o);
    unsetenv("UTRAIN_SIM_MEMORY");
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-sim") || !tp_tokenize_sample(tmp, shard, sizeof shard)) return 1;
    snprintf(gpt2, sizeof gpt2,
             "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 16, dropout: 0.1}\n"
             "data: {name: tokens, train_path: %s, seq_len: 16}\n"
             "train: {max_steps: 8, batch_size: 4, log_interval: 1, eval_strategy: \"no\", save_strategy: steps,\n"
             "        save_interval: 4, save_total_limit: 0, progress: lines}\n"
             "dist: {timeout_s: 120}\n",
             shard);
    RUN(test_cnn);
    RUN(test_gpt2_precisions);
    RUN(test_head_loss_fused);
    RUN(test_bow_and_test_mode);
    RUN(test_resume);
    RUN(test_profile);
    RUN(test_auto_find_batch_size);
    /* jobs under mpirun last: their environment turns LeakSanitizer off */
    tp_mpi_env(true);
    RUN(test_distributed);
    RUN(test_offload);
    RUN(test_comm_hook);
    return tp_finish(TEST_SUMMARY(), tmp);
}
