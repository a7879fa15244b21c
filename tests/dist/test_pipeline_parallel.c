/* Pipeline parallelism through the trainer (dist.pipeline_parallel,
 * dist.pipeline_schedule): a small BERT in 2 stages (and x tp 2) against
 * the whole model, and a 4-block GPT-2 with clipping and 4 micro-batches
 * per step, split into 2, 3 and 4 stages (1F1B and GPipe) against the whole
 * model in one process, 2 stages x 2 tensor-parallel ranks against it too
 * (and with 2 data-parallel ranks more, 8 in all, against ddp on 2),
 * and 2 stages x 2 data-parallel ranks (ddp, zero1-3, ZeRO-Offload) against ddp on 2 ranks: without dropout each stage computes what the whole model does,
 * so losses, dev losses and weights agree to rounding. With dropout the two
 * schedules give the same bits, a stopped run resumes bit-exact, and a
 * pipeline's checkpoint (the whole model's) goes on in one process; layouts
 * that cannot work are refused with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "utrain/io.h"
#include "utrain/train.h"
#include "test.h"
#include "split_runs.h"

static char shard[512];

/* Run `name` against `ref` over 16 steps: train losses, weights and
 * momentum (split_agrees), and the dev loss at step 16. */
static void agrees(const char *name, const char *ref) {
    split_agrees(name, ref, 16);
    split_same_dev_loss(name, ref, 16);
}

/* The MiB rank 0 moved, from its "communication:" line in run NAME's log */
static double moved_mib(const char *name) {
    char log[700];
    snprintf(log, sizeof log, "%s/runs/%s/logger_logs/training_0.log", split_dir, name);
    char *s = tp_slurp(log), *at = s ? strstr(s, " moved ") : NULL;
    double v = at ? atof(at + 7) : -1;
    free(s);
    return v;
}

/* Under train.precision bf16 the stages send each other 16-bit values:
 * half pp2's traffic between them, and losses near the whole model's bf16
 * run (rounding the stage boundary is the only difference) */
static void test_bf16_transfers(void) {
    CHECK(split_train("wholebf16", 1, "train.precision=bf16") == 0, "the whole model in bf16");
    CHECK(split_train("pp2bf16", 2, "dist.pipeline_parallel=2 train.precision=bf16") == 0, "2 stages in bf16");
    double l = tp_loss_diff(tp_run_file(split_dir, "wholebf16", "metrics.jsonl"),
                            tp_run_file(split_dir, "pp2bf16", "metrics.jsonl"), 16);
    CHECK(l >= 0 && l < 2e-2, "bf16 stages' losses within %.2g of the whole model's bf16 run (2e-2)", l);
    /* stage 0 sends 64 activations of 4 x 16 x 32 values (16 steps of 4
     * micro-batches) and, evaluating at step 16, the dev set's 544 sequences
     * of 16 x 32 (the dev set is the training shard): 1.56 MiB in float32,
     * 0.78 in bf16; the rest of its traffic (the embedding's gradient, the
     * shared losses, the checkpoints' tensors) is the same */
    double a = moved_mib("pp2"), b = moved_mib("pp2bf16");
    CHECK(a > 0 && b > 0 && a - b > 0.65 && a - b < 0.9,
          "rank 0 moved %.2f MiB in bf16 against %.2f MiB in float32 (0.78 MiB less expected)", b, a);
}

static void test_stages_train_as_the_whole_model(void) {
    CHECK(split_train("whole", 1, "") == 0, "the whole model in one process");
    CHECK(split_train("pp2", 2, "dist.pipeline_parallel=2") == 0, "2 stages");
    CHECK(split_train("pp3", 3, "dist.pipeline_parallel=3") == 0, "3 stages (blocks 1, 1, 2)");
    CHECK(split_train("pp4", 4, "dist.pipeline_parallel=4 dist.pipeline_schedule=gpipe") == 0, "4 stages, GPipe");
    CHECK(split_train("pp2list", 2, "dist.pipeline_parallel=2 dist.pipeline_blocks=3,1") == 0, "2 stages of 3 and 1 blocks");
    agrees("pp2", "whole");
    agrees("pp2list", "whole");
    /* each stage recomputes its blocks' activations in backward */
    CHECK(split_train("pp2ckpt", 2, "dist.pipeline_parallel=2 train.checkpoint_activations=true") == 0,
          "2 stages with activation checkpointing");
    agrees("pp2ckpt", "whole");
    agrees("pp3", "whole");
    agrees("pp4", "whole");
    /* over TCP (dist.launcher: tcp) the stages' sends and receives take the
     * tcp communicator's own thread: the same run, to the bit */
    CHECK(split_train("pp2tcp", 2, "dist.pipeline_parallel=2 dist.launcher=tcp") == 0, "2 stages over TCP");
    CHECK(tp_same_file(tp_ckpt_file(split_dir, "pp2tcp", 16), tp_ckpt_file(split_dir, "pp2", 16)),
          "2 stages over TCP: another checkpoint than over MPI");
    char *s = split_output("pp2");
    CHECK(s && strstr(s, "Pipeline parallel = 2 stages (blocks balanced by compute)") &&
              strstr(s, "1F1B schedule, 4 micro-batches per step"),
          "the summary names the stages and the schedule:\n%s", s ? s : "");
    free(s);
    char log[700];
    snprintf(log, sizeof log, "%s/runs/pp2list/logger_logs/training_1.log", split_dir);
    s = tp_slurp(log);
    CHECK(s && strstr(s, "this rank: stage 1 of 2, blocks 3 to 3"), "rank 1's log names its blocks:\n%s",
          s ? s : "");
    free(s);
}

static void test_stages_with_data_parallel(void) {
    CHECK(split_train("ddp2", 2, "") == 0, "ddp on 2 ranks");
    CHECK(split_train("pp2dp2", 4, "dist.pipeline_parallel=2") == 0, "2 stages x 2 data-parallel ranks");
    agrees("pp2dp2", "ddp2");
    static const char *const zero[] = {"zero1", "zero2", "zero3"};
    for (int z = 0; z < 3; z++) {
        char name[32], sets[96];
        snprintf(name, sizeof name, "pp2%s", zero[z]);
        snprintf(sets, sizeof sets, "dist.pipeline_parallel=2 dist.strategy=%s", zero[z]);
        CHECK(split_train(name, 4, sets) == 0, "2 stages x %s over 2 data-parallel ranks", zero[z]);
        agrees(name, "ddp2");
    }
    CHECK(split_train("pp2offload", 4, "dist.pipeline_parallel=2 dist.strategy=zero2 dist.offload_optimizer=cpu") == 0,
          "2 stages x zero2 with ZeRO-Offload over 2 data-parallel ranks");
    agrees("pp2offload", "ddp2");
}

/* Hybrid sharding over the data-parallel ranks of a split model: 4 of them
 * in 2 shard groups of 2, under 2 stages (zero3) and under tp 2 (zero2),
 * 8 ranks each, against ddp on 4. */
static void test_hybrid_sharding_of_split_models(void) {
    CHECK(split_train("ddp4", 4, "") == 0, "ddp on 4 ranks");
    CHECK(split_train("pp2hyb", 8, "dist.pipeline_parallel=2 dist.strategy=zero3 dist.shard_size=2") == 0,
          "2 stages x zero3 in 2 groups of 2 data-parallel ranks");
    agrees("pp2hyb", "ddp4");
    CHECK(split_train("tp2hyb", 8, "dist.tensor_parallel=2 dist.strategy=zero2 dist.shard_size=2") == 0,
          "tp 2 x zero2 in 2 groups of 2 data-parallel ranks");
    agrees("tp2hyb", "ddp4");
    char log[700];
    snprintf(log, sizeof log, "%s/runs/pp2hyb/logger_logs/training_0.log", split_dir);
    char *s = tp_slurp(log);
    CHECK(s && strstr(s, "Hybrid sharding: zero3 over 2 groups of 2 ranks"), "%s", s ? s : "no log");
    free(s);
}

/* Stages split Megatron-style too: 2 stages x 2 tensor-parallel ranks. */
static void test_stages_with_tensor_parallel(void) {
    CHECK(split_train("pp2tp2", 4, "dist.pipeline_parallel=2 dist.tensor_parallel=2") == 0, "2 stages x tp 2");
    agrees("pp2tp2", "whole");
    /* the 3-D mesh: 2 stages x tp 2 x 2 data-parallel ranks (zero1), 8 ranks */
    CHECK(split_train("mesh8", 8, "dist.pipeline_parallel=2 dist.tensor_parallel=2 dist.strategy=zero1") == 0,
          "2 stages x tp 2 x zero1 over 2 data-parallel ranks");
    agrees("mesh8", "ddp2");
}

/* BERT from scratch (MiniLM's WordPiece vocabulary) in 2 stages, and 2 stages
 * x tp 2, against the whole model; without dropout (each stage draws its
 * own masks). Weights compared as one vector: the key bias's gradient is
 * rounding noise in any run. */
static void test_bert_stages(void) {
    static const char bert[] =
        "model: {name: bert, vocab_size: 30522, hidden_size: 32, num_hidden_layers: 4, num_attention_heads: 4,\n"
        "        intermediate_size: 64, max_position_embeddings: 64, hidden_dropout_prob: 0,\n"
        "        attention_probs_dropout_prob: 0}\n"
        "data: {name: tsv_text, train_path: data/sst2_sample/train.tsv, dev_path: data/sst2_sample/dev.tsv,\n"
        "       max_len: 32, tokenizer: data/pretrained/all-MiniLM-L6-v2}\n"
        "train: {max_steps: 8, batch_size: 8, gradient_accumulation_steps: 2, log_interval: 1,\n"
        "        eval_strategy: steps, eval_interval: 8, grad_clip: 0.5, save_strategy: steps, save_interval: 8,\n"
        "        save_total_limit: 0, progress: lines}\n"
        "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
        "dist: {timeout_s: 60}\n";
    CHECK(tp_train_in(split_dir, "bertwhole", bert, split_device(), "threads=1", 1) == 0, "a small BERT whole");
    CHECK(tp_train_in(split_dir, "bertpp2", bert, split_device(), "threads=1 dist.pipeline_parallel=2", 2) == 0,
          "in 2 stages");
    CHECK(tp_train_in(split_dir, "bertpp2tp2", bert, split_device(),
                      "threads=1 dist.pipeline_parallel=2 dist.tensor_parallel=2", 4) == 0,
          "in 2 stages x tp 2");
    static const char *const runs[] = {"bertpp2", "bertpp2tp2"};
    for (int r = 0; r < 2; r++) {
        double l = tp_loss_diff(tp_run_file(split_dir, "bertwhole", "metrics.jsonl"),
                                tp_run_file(split_dir, runs[r], "metrics.jsonl"), 8);
        double all = -1;
        tp_tensors_diff(tp_ckpt_file(split_dir, "bertwhole", 8), tp_ckpt_file(split_dir, runs[r], 8), "model.", &all,
                        NULL, 0);
        CHECK(l < 1e-5 && all >= 0 && all < 1e-5, "%s: losses within %.2g, the weights as one vector within %.2g of "
              "the whole model's (1e-5)", runs[r], l, all);
        /* the stages' checkpoint is the whole model's, its flat optimizer state too */
        char worst[128] = "";
        double o = tp_tensors_diff(tp_ckpt_file(split_dir, "bertwhole", 8), tp_ckpt_file(split_dir, runs[r], 8),
                                   "optim.", NULL, worst, sizeof worst);
        CHECK(o >= 0 && o < 1e-4, "%s: the optimizer state within %.2g of the whole model's (1e-4; worst %s)", runs[r],
              o, worst);
        split_same_dev_loss(runs[r], "bertwhole", 8);
        printf("     %s against bertwhole: losses %.2g, weights %.2g\n", runs[r], l, all);
    }
}

/* GPT2ForSequenceClassification (the tiny pretrained fixture, dropout on)
 * in 2 stages, and 2 stages x tp 2: the first stage embeds, the last has
 * ln_f and the score head (no copy of wte: the head is not tied); packed
 * rows travel between the stages; each block draws the whole model's
 * masks. Against one process, train.metrics' scores from the last stage too. */
static void test_gpt2_classifier_stages(void) {
    char saved[sizeof split_body];
    memcpy(saved, split_body, sizeof saved);
    snprintf(split_body, sizeof split_body,
             "model: {name: gpt2, pretrained: tests/parity/fixtures/hf_gpt2_cls_tiny, task: sequence_classification,\n"
             "        dropout: 0.2}\n"
             "data: {name: tsv_text, train_path: data/sst2_sample/train.tsv, dev_path: data/sst2_sample/dev.tsv,\n"
             "       max_len: 32}\n"
             "train: {max_steps: 8, batch_size: 8, gradient_accumulation_steps: 2, log_interval: 1,\n"
             "        eval_strategy: steps, eval_interval: 8, grad_clip: 0.5, save_strategy: steps, save_interval: 8,\n"
             "        save_total_limit: 0, progress: lines, metrics: [f1, matthews_correlation]}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
             "dist: {timeout_s: 60}\n");
    CHECK(split_train("gclswhole", 1, "") == 0, "the GPT-2 classifier whole");
    CHECK(split_train("gclspp2", 2, "dist.pipeline_parallel=2") == 0, "in 2 stages");
    CHECK(split_train("gclspp2tp2", 4, "dist.pipeline_parallel=2 dist.tensor_parallel=2") == 0, "in 2 stages x tp 2");
    split_agrees("gclspp2", "gclswhole", 8);
    split_agrees("gclspp2tp2", "gclswhole", 8);
    split_same_dev_loss("gclspp2", "gclswhole", 8);
    /* the last stage's confusion matrix: the scores one process reports */
    char *whole = split_output("gclswhole");
    const char *w = whole ? strstr(whole, "eval  step 8  dev:") : NULL, *wf = w ? strstr(w, "  f1 ") : NULL;
    const char *names[2] = {"gclspp2", "gclspp2tp2"};
    for (int i = 0; i < 2; i++) {
        char *o = split_output(names[i]);
        const char *e = o ? strstr(o, "eval  step 8  dev:") : NULL, *f = e ? strstr(e, "  f1 ") : NULL;
        CHECK(wf && f && strstr(f, "matthews_correlation") && !strncmp(f, wf, strcspn(wf, "\n")),
              "%s's dev scores against one process's:\n%s\n%s", names[i], e ? e : "", w ? w : "");
        free(o);
    }
    free(whole);
    memcpy(split_body, saved, sizeof saved);
}

/* With dropout: each stage draws its own masks per micro-batch, whatever
 * the schedule; a resumed run draws what a straight one does. */
/* With dropout, 2 stages draw the whole model's masks (each block draws in
 * its own region of the micro-batch's stream, whichever stage runs it):
 * the same training as one process */
static void test_dropout_as_the_whole_model(void) {
    CHECK(split_train("dwhole", 1, "model.dropout=0.1") == 0, "the whole model with dropout");
    CHECK(split_train("dpp2", 2, "dist.pipeline_parallel=2 model.dropout=0.1") == 0, "2 stages with dropout");
    CHECK(split_train("dpp4", 4, "dist.pipeline_parallel=4 model.dropout=0.1") == 0, "4 stages with dropout");
    agrees("dpp2", "dwhole");
    agrees("dpp4", "dwhole");
}

static void test_dropout_schedules_and_resume(void) {
    CHECK(split_train("d1f1b", 2, "dist.pipeline_parallel=2 model.dropout=0.1") == 0, "1F1B with dropout");
    CHECK(split_train("dgpipe", 2, "dist.pipeline_parallel=2 model.dropout=0.1 dist.pipeline_schedule=gpipe") == 0,
          "GPipe with dropout");
    CHECK(tp_same_weights(tp_ckpt_file(split_dir, "d1f1b", 16), tp_ckpt_file(split_dir, "dgpipe", 16)),
          "the two schedules: the same checkpoint, bit for bit");
    CHECK(split_train("dpart", 2, "dist.pipeline_parallel=2 model.dropout=0.1 train.max_steps=8") == 0,
          "a run stops at step 8");
    CHECK(split_train("dpart", 2, "dist.pipeline_parallel=2 model.dropout=0.1 continue_training=true") == 0,
          "and goes on to 16");
    CHECK(tp_same_weights(tp_ckpt_file(split_dir, "d1f1b", 16), tp_ckpt_file(split_dir, "dpart", 16)),
          "resumed: the same checkpoint, bit for bit");
    CHECK(tp_plant_checkpoint(tp_ckpt_file(split_dir, "pp4", 8), tp_path(tp_path(split_dir, "runs"), "moved")),
          "the 4-stage run's step-8 checkpoint copied");
    CHECK(split_train("moved", 1, "continue_training=true") == 0, "it goes on in one process");
    double w = tp_tensors_diff(tp_ckpt_file(split_dir, "whole", 16), tp_ckpt_file(split_dir, "moved", 16), "model.", NULL, NULL, 0);
    CHECK(w >= 0 && w < 1e-5, "to the whole run's weights (%.2g)", w);
}

/* One checkpoint through three layouts: 2 stages x tp 2 at step 8, one
 * process to step 12, 4 stages to step 16: the whole run's weights and
 * momentum. */
static void test_checkpoint_across_layouts(void) {
    CHECK(tp_plant_checkpoint(tp_ckpt_file(split_dir, "pp2tp2", 8), tp_path(tp_path(split_dir, "runs"), "chain1")),
          "the pp2 x tp2 run's step-8 checkpoint copied");
    CHECK(split_train("chain1", 1, "continue_training=true train.max_steps=12 train.save_interval=4") == 0,
          "one process goes on to step 12");
    CHECK(tp_plant_checkpoint(tp_ckpt_file(split_dir, "chain1", 12), tp_path(tp_path(split_dir, "runs"), "chain2")),
          "its step-12 checkpoint copied");
    CHECK(split_train("chain2", 4, "continue_training=true dist.pipeline_parallel=4") == 0, "4 stages go on to step 16");
    double w = tp_tensors_diff(tp_ckpt_file(split_dir, "whole", 16), tp_ckpt_file(split_dir, "chain2", 16), "model.", NULL, NULL, 0);
    double o = tp_tensors_diff(tp_ckpt_file(split_dir, "whole", 16), tp_ckpt_file(split_dir, "chain2", 16), "optim.", NULL, NULL, 0);
    CHECK(w >= 0 && w < 1e-5 && o >= 0 && o < 1e-4, "the whole run's weights (%.2g) and momentum (%.2g)", w, o);
}


/* The tiny pretrained BART classifier (2 encoder and 2 decoder layers) with
 * every dropout on, in 2 stages (the encoder's layers, then the decoder's),
 * 3 stages (a boundary inside each half) and 2 stages x tp 2, against the
 * whole model: the two streams travel between the stages as one tensor,
 * and the checkpoints are the whole model's, optimizer state included. */
static void test_bart_stages(void) {
    static const char bart[] =
        "model: {name: bart, pretrained: tests/parity/fixtures/hf_bart_tiny, task: sequence_classification,\n"
        "        dropout: 0.1, attention_dropout: 0.1, activation_dropout: 0.1, classifier_dropout: 0.1}\n"
        "data: {name: tsv_text, train_path: data/sst2_sample/train.tsv, dev_path: data/sst2_sample/dev.tsv,\n"
        "       max_len: 32}\n"
        "train: {max_steps: 8, batch_size: 8, gradient_accumulation_steps: 2, log_interval: 1,\n"
        "        eval_strategy: steps, eval_interval: 8, grad_clip: 0.5, save_strategy: steps, save_interval: 8,\n"
        "        save_total_limit: 0, progress: lines}\n"
        "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
        "dist: {timeout_s: 60}\n";
    CHECK(tp_train_in(split_dir, "bartwhole", bart, split_device(), "threads=1", 1) == 0, "the BART classifier whole");
    CHECK(tp_train_in(split_dir, "bartpp2", bart, split_device(), "threads=1 dist.pipeline_parallel=2", 2) == 0,
          "in 2 stages");
    CHECK(tp_train_in(split_dir, "bartpp3", bart, split_device(),
                      "threads=1 dist.pipeline_parallel=3 dist.pipeline_schedule=gpipe", 3) == 0, "in 3 stages");
    CHECK(tp_train_in(split_dir, "bartpp2tp2", bart, split_device(),
                      "threads=1 dist.pipeline_parallel=2 dist.tensor_parallel=2", 4) == 0, "in 2 stages x tp 2");
    static const char *const runs[] = {"bartpp2", "bartpp3", "bartpp2tp2"};
    for (int r = 0; r < 3; r++) {
        double l = tp_loss_diff(tp_run_file(split_dir, "bartwhole", "metrics.jsonl"),
                                tp_run_file(split_dir, runs[r], "metrics.jsonl"), 8);
        double all = -1;
        tp_tensors_diff(tp_ckpt_file(split_dir, "bartwhole", 8), tp_ckpt_file(split_dir, runs[r], 8), "model.", &all,
                        NULL, 0);
        CHECK(l < 1e-5 && all >= 0 && all < 1e-5, "%s: losses within %.2g, the weights as one vector within %.2g of "
              "the whole model's (1e-5)", runs[r], l, all);
        /* the stages' checkpoint lists the tensors in the whole model's order
         * (the embeddings' layer norms after the encoder's layers), so its
         * flat optimizer state is the whole run's, place for place */
        char worst[128] = "";
        double o = tp_tensors_diff(tp_ckpt_file(split_dir, "bartwhole", 8), tp_ckpt_file(split_dir, runs[r], 8),
                                   "optim.", NULL, worst, sizeof worst);
        CHECK(o >= 0 && o < 1e-4, "%s: the optimizer state within %.2g of the whole model's (1e-4; worst %s)", runs[r],
              o, worst);
        split_same_dev_loss(runs[r], "bartwhole", 8);
        printf("     %s against bartwhole: losses %.2g, weights %.2g\n", runs[r], l, all);
    }
    /* test mode on the parts: `utrain test --nproc 2` of the 2-stage run goes
     * through its stages and writes what one process holding the whole
     * model writes (the stages run the same arithmetic: the same bytes) */
    char run[600], out[700], *parts_pred = NULL, *parts_res = NULL;
    snprintf(run, sizeof run, "%s/runs/bartpp2", split_dir);
    snprintf(out, sizeof out, "%s/bart_test_parts.out", split_dir);
    CHECK(tp_run_shown((const char *[]){"test", run, "--nproc", "2", NULL}, out, 0, "utrain test --nproc 2") == 0,
          "test mode on the 2 stages");
    char *said = tp_slurp(out);
    CHECK(said && strstr(said, "on the model's parts (tensor parallel 1, 2 pipeline stages)"), "%s", said ? said : "");
    free(said);
    parts_pred = tp_slurp(tp_run_file(split_dir, "bartpp2", "dev_predictions.tsv"));
    parts_res = tp_slurp(tp_run_file(split_dir, "bartpp2", "dev_results.json"));
    snprintf(out, sizeof out, "%s/bart_test_whole.out", split_dir);
    CHECK(tp_run_shown((const char *[]){"test", run, NULL}, out, 0, "utrain test") == 0, "test mode in one process");
    char *whole_pred = tp_slurp(tp_run_file(split_dir, "bartpp2", "dev_predictions.tsv")),
         *whole_res = tp_slurp(tp_run_file(split_dir, "bartpp2", "dev_results.json"));
    CHECK(parts_pred && whole_pred && tp_count_lines(tp_run_file(split_dir, "bartpp2", "dev_predictions.tsv")) > 10 &&
              !strcmp(parts_pred, whole_pred), "dev_predictions.tsv: the parts' and the whole model's differ");
    CHECK(parts_res && whole_res && !strcmp(parts_res, whole_res), "dev_results.json: the parts'\n%s\nthe whole's\n%s",
          parts_res ? parts_res : "", whole_res ? whole_res : "");
    free(parts_pred), free(parts_res), free(whole_pred), free(whole_res);
}

/* A checkpoint that only one stage cannot read (a NaN in a block of the last
 * stage, under a valid checksum): every rank passes over it and they resume
 * together from the one before, rank 0 saying which rank failed and that
 * rank saying why; the run then ends where a straight one does. */
static void damage(const char *from, const char *to, const char *victim) {
    char err[512] = "";
    ut_train_state st;
    ut_st_file *f = ut_st_open(from, err, sizeof err);
    ut_ckpt_reader *r = f ? ut_ckpt_reader_open(from, NULL, &st, err, sizeof err) : NULL;
    CHECK(f && r, "%s", err);
    if (!f || !r) {
        ut_st_close(f);
        return;
    }
    ut_ckpt_reader_close(r);
    ut_ckpt_entry e[128];
    int n = 0;
    for (int i = 0; i < ut_st_count(f) && n < 128; i++) {
        const char *name = ut_st_name(f, i);
        if (strncmp(name, "model.", 6)) continue;
        const ut_st_tensor *t = ut_st_get(f, name);
        e[n] = (ut_ckpt_entry){.name = name + 6, .ndim = t->ndim};
        memcpy(e[n++].shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
    }
    ut_ckpt_writer *w = ut_ckpt_writer_open(to, ut_st_meta(f, "model.type"), n, e, ut_st_meta(f, "optim.state"),
                                            atoll(ut_st_meta(f, "optim.steps")), &st, err, sizeof err);
    CHECK(w, "%s", err);
    for (int i = 0; w && i < n; i++) { /* file order is the model's */
        char name[300];
        snprintf(name, sizeof name, "model.%s", e[i].name);
        const ut_st_tensor *t = ut_st_get(f, name);
        float *v = malloc(t->nbytes);
        memcpy(v, t->data, t->nbytes);
        if (!strcmp(e[i].name, victim)) v[3] = NAN;
        CHECK(ut_ckpt_writer_put(w, v, (int64_t)(t->nbytes / 4), err, sizeof err) == 0, "%s", err);
        free(v);
    }
    const ut_st_tensor *mom = ut_st_get(f, "optim.momentum_buffer");
    CHECK(w && mom && ut_ckpt_writer_put(w, mom->data, (int64_t)(mom->nbytes / 4), err, sizeof err) == 0, "%s", err);
    CHECK(ut_ckpt_writer_close(w, true, err, sizeof err) == 0, "%s", err);
    ut_st_close(f);
}

static void test_ranks_agree_on_a_damaged_checkpoint(void) {
    char run[600], to[700];
    snprintf(run, sizeof run, "%s/runs/agree", split_dir);
    CHECK(tp_plant_checkpoint(tp_ckpt_file(split_dir, "pp2", 8), run), "pp2's step-8 checkpoint copied");
    snprintf(to, sizeof to, "%s/checkpoints/step_00000016.safetensors", run);
    damage(tp_ckpt_file(split_dir, "pp2", 16), to, "h.3.mlp.c_proj.weight");
    CHECK(split_train("agree", 2, "dist.pipeline_parallel=2 continue_training=true") == 0,
          "2 stages go on past a checkpoint only the second can see is damaged");
    char *log0 = tp_slurp(tp_path(run, "logger_logs/training_0.log")),
         *log1 = tp_slurp(tp_path(run, "logger_logs/training_1.log"));
    CHECK(log0 && strstr(log0, "cannot resume from") && strstr(log0, "1 rank could not read its part of it (rank 1") &&
              strstr(log0, "Resuming from") && strstr(log0, "step_00000008"),
          "rank 0's log: %s", log0 ? log0 : "(none)");
    CHECK(log1 && strstr(log1, "h.3.mlp.c_proj.weight holds nan"), "rank 1's log names the tensor: %s",
          log1 ? log1 : "(none)");
    free(log0);
    free(log1);
    double w = tp_tensors_diff(tp_ckpt_file(split_dir, "pp2", 16), tp_ckpt_file(split_dir, "agree", 16), "model.", NULL,
                               NULL, 0);
    CHECK(w == 0, "resumed from step 8: pp2's weights at step 16 to the bit (%.2g)", w);
}

static void test_bad_layouts_are_refused(void) {
    split_refused("baddp", 2, "dist.pipeline_parallel=2 dist.strategy=dp", "dist.strategy dp (threads of one process)");
    split_refused("baddiv", 3, "dist.pipeline_parallel=2", "world size 3 is not divisible");
    split_refused("baddeep", 2, "dist.pipeline_parallel=2 model.n_layer=1", "cannot make dist.pipeline_parallel 2 stages");
    split_refused("badsum", 2, "dist.pipeline_parallel=2 dist.pipeline_blocks=2,1", "add up to 3, the model has 4");
    split_refused("badlist", 2, "dist.pipeline_parallel=2 dist.pipeline_blocks=4", "is not 2 block counts >= 1");
    split_refused("badnopp", 1, "dist.pipeline_blocks=2,2", "set dist.pipeline_parallel (2 or more)");
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(split_dir, sizeof split_dir, "utrain-pp")) return 1;
    tp_mpi_env(true);
    if (!tp_tokenize_sample(split_dir, shard, sizeof shard)) return 1;
    snprintf(split_body, sizeof split_body,
             "model: {name: gpt2, n_layer: 4, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 16}\n"
             "data: {name: tokens, train_path: %s, dev_path: %s, seq_len: 16}\n"
             "train: {max_steps: 16, batch_size: 4, gradient_accumulation_steps: 4, log_interval: 1,\n"
             "        eval_strategy: steps, eval_interval: 16, grad_clip: 0.5,\n"
             "        save_strategy: steps, save_interval: 8, save_total_limit: 0, progress: lines}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.01}\n"
             "dist: {timeout_s: 60}\n",
             shard, shard);
    RUN(test_stages_train_as_the_whole_model);
    RUN(test_bf16_transfers); /* after pp2, its reference */
    RUN(test_stages_with_data_parallel);
    RUN(test_stages_with_tensor_parallel); /* after ddp2, its reference */
    RUN(test_hybrid_sharding_of_split_models);
    RUN(test_bert_stages);
    RUN(test_bart_stages);
    RUN(test_gpt2_classifier_stages);
    RUN(test_dropout_as_the_whole_model);
    RUN(test_dropout_schedules_and_resume);
    RUN(test_checkpoint_across_layouts);
    RUN(test_ranks_agree_on_a_damaged_checkpoint);
    RUN(test_bad_layouts_are_refused);
    return tp_finish(TEST_SUMMARY(), split_dir);
}
