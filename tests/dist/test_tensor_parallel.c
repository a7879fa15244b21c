/* Tensor parallelism through the trainer (dist.tensor_parallel, FlagAI's
 * model_parallel_size): a tiny GPT-2 with dropout, momentum and clipping,
 * trained split over 2 and 4 ranks, against the same model trained whole in
 * one process; split over 2 with 2 data-parallel ranks (4 in all) against
 * ddp on 2 ranks. Only the order of sums differs (a row-parallel layer's
 * partial products are added over the group), so losses and weights agree to
 * rounding; so do ZeRO-1/2/3 (and ZeRO-Offload) over the data-parallel
 * ranks of a split model. Split runs resume bit-exact, their checkpoints are the whole
 * model's (a split run's checkpoint goes on in one process, and `utrain
 * test` reads it), and layouts that cannot work are refused with a
 * message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "test.h"
#include "split_runs.h"

static char shard[512];

static void test_split_runs_train_as_the_whole_model(void) {
    CHECK(split_train("whole", 1, "") == 0, "the whole model trains in one process");
    CHECK(split_train("tp2", 2, "dist.tensor_parallel=2") == 0, "split over 2 ranks");
    CHECK(split_train("tp4", 4, "dist.tensor_parallel=4") == 0, "split over 4 ranks");
    split_agrees("tp2", "whole", 24);
    split_agrees("tp4", "whole", 24);
    /* over TCP (dist.launcher: tcp): the same run, to the bit */
    CHECK(split_train("tp2tcp", 2, "dist.tensor_parallel=2 dist.launcher=tcp") == 0, "split over 2 ranks over TCP");
    CHECK(tp_same_file(tp_ckpt_file(split_dir, "tp2tcp", 24), tp_ckpt_file(split_dir, "tp2", 24)),
          "tp2 over TCP: another checkpoint than over MPI");
    char *s = split_output("tp2");
    CHECK(s && strstr(s, "Tensor parallel = 2 ranks per model"), "the summary names the split:\n%s", s ? s : "");
    free(s);
}

static void test_split_with_data_parallel(void) {
    CHECK(split_train("ddp2", 2, "") == 0, "ddp on 2 ranks");
    CHECK(split_train("tp2dp2", 4, "dist.tensor_parallel=2") == 0, "split over 2 ranks, 2 data-parallel ranks");
    split_agrees("tp2dp2", "ddp2", 24);
    /* ZeRO over the data-parallel ranks: each part's state sharded */
    static const char *const zero[] = {"zero1", "zero2", "zero3"};
    for (int z = 0; z < 3; z++) {
        char name[32], sets[128];
        snprintf(name, sizeof name, "tp2%s", zero[z]);
        snprintf(sets, sizeof sets, "dist.tensor_parallel=2 dist.strategy=%s", zero[z]);
        CHECK(split_train(name, 4, sets) == 0, "split over 2 ranks, %s over 2 data-parallel ranks", zero[z]);
        split_agrees(name, "ddp2", 24);
    }
    /* ZeRO-Offload: each part's optimizer on the host */
    CHECK(split_train("tp2offload", 4, "dist.tensor_parallel=2 dist.strategy=zero2 dist.offload_optimizer=cpu") == 0,
          "split over 2 ranks, zero2 with ZeRO-Offload over 2 data-parallel ranks");
    split_agrees("tp2offload", "ddp2", 24);
    char *s = split_output("tp2dp2");
    CHECK(s && strstr(s, "2 data-parallel ranks") && strstr(s, "Total train batch size (w. parallel, distributed "
                                                              "& accumulation) = 16"),
          "two data-parallel ranks, global batch 16:\n%s", s ? s : "");
    free(s);
}

/* Sequence parallelism (dropout on): split over 2 and 4 ranks, and over 2
 * with zero2 over 2 data-parallel ranks, each rank holding its rows of the
 * sequence in the norm and dropout regions, trains as the whole model (and
 * as the plain split) does; bad combinations are refused. */
static void test_sequence_parallel(void) {
    CHECK(split_train("sp2", 2, "dist.tensor_parallel=2 dist.sequence_parallel=true") == 0,
          "split over 2 ranks, sequence parallel");
    CHECK(split_train("sp4", 4, "dist.tensor_parallel=4 dist.sequence_parallel=true") == 0,
          "split over 4 ranks, sequence parallel");
    CHECK(split_train("sp2zero2", 4, "dist.tensor_parallel=2 dist.sequence_parallel=true dist.strategy=zero2") == 0,
          "split over 2 ranks, sequence parallel, zero2 over 2 data-parallel ranks");
    split_agrees("sp2", "whole", 24);
    split_agrees("sp4", "whole", 24);
    split_agrees("sp2zero2", "ddp2", 24);
    char *s = split_output("sp2");
    CHECK(s && strstr(s, "sequence parallel"), "the summary says so:\n%s", s ? s : "");
    free(s);
    split_refused("spalone", 1, "dist.sequence_parallel=true", "set dist.tensor_parallel (2 or more)");
    split_refused("sppp", 4, "dist.tensor_parallel=2 dist.pipeline_parallel=2 dist.sequence_parallel=true",
                  "sequence parallelism runs without pipeline stages");
    split_refused("spodd", 4, "dist.tensor_parallel=4 dist.sequence_parallel=true data.seq_len=14",
                  "does not split over 4 ranks");
}

/* FlagAI's spelling: env_type deepspeed+mpu with model_parallel_size. */
static void test_flagai_keys(void) {
    CHECK(split_train("flagai", 2, "env_type=deepspeed+mpu model_parallel_size=2") == 0, "FlagAI's keys are taken");
    CHECK(tp_same_weights(tp_ckpt_file(split_dir, "tp2", 24), tp_ckpt_file(split_dir, "flagai", 24)),
          "and mean dist.tensor_parallel: 2 (the same weights, bit for bit)");
}

/* Stopped at step 12 and resumed at the same split: bit-exact; resumed in
 * one process from the split run's checkpoint: the whole run's weights. */
static void test_resume(void) {
    CHECK(split_train("part", 2, "dist.tensor_parallel=2 train.max_steps=12") == 0, "a split run stops at step 12");
    CHECK(split_train("part", 2, "dist.tensor_parallel=2 continue_training=true") == 0, "and goes on to 24");
    CHECK(tp_same_weights(tp_ckpt_file(split_dir, "tp2", 24), tp_ckpt_file(split_dir, "part", 24)),
          "resumed at the same split: the same checkpoint, bit for bit");
    CHECK(split_train("partz3", 4, "dist.tensor_parallel=2 dist.strategy=zero3 train.max_steps=12") == 0,
          "a split zero3 run stops at step 12");
    CHECK(split_train("partz3", 4, "dist.tensor_parallel=2 dist.strategy=zero3 continue_training=true") == 0,
          "and goes on to 24");
    CHECK(tp_same_weights(tp_ckpt_file(split_dir, "tp2zero3", 24), tp_ckpt_file(split_dir, "partz3", 24)),
          "resumed split under zero3: the same checkpoint, bit for bit");
    CHECK(tp_plant_checkpoint(tp_ckpt_file(split_dir, "tp4", 12), tp_path(tp_path(split_dir, "runs"), "moved")),
          "tp4's step-12 checkpoint copied");
    CHECK(split_train("moved", 1, "continue_training=true") == 0, "it goes on in one process");
    double w = tp_tensors_diff(tp_ckpt_file(split_dir, "whole", 24), tp_ckpt_file(split_dir, "moved", 24), "model.", NULL, NULL, 0);
    CHECK(w >= 0 && w < 1e-5, "to the whole run's weights (%.2g)", w);
    CHECK(tp_plant_checkpoint(tp_ckpt_file(split_dir, "whole", 12), tp_path(tp_path(split_dir, "runs"), "split")),
          "the whole run's step-12 checkpoint copied");
    CHECK(split_train("split", 2, "dist.tensor_parallel=2 continue_training=true") == 0, "it goes on split over 2");
    w = tp_tensors_diff(tp_ckpt_file(split_dir, "whole", 24), tp_ckpt_file(split_dir, "split", 24), "model.", NULL, NULL, 0);
    CHECK(w >= 0 && w < 1e-5, "to the whole run's weights (%.2g)", w);
    char out[600];
    snprintf(out, sizeof out, "%s/test_tp2.out", split_dir);
    int rc = tp_run_shown((const char *[]){"test", tp_path(tp_path(split_dir, "runs"), "tp2"), NULL}, out, 0, "test tp2");
    CHECK(rc == 0, "utrain test reads the split run in one process");
}


/* Fine-tunes the model section `model` for 12 steps on the SST-2 sample,
 * whole (run NAME_whole) and split over 2 ranks (NAME_tp2): the same losses,
 * weights and dev loss. */
static void fine_tune_split(const char *name, const char *model) {
    char body[1024], whole[64], split[64];
    snprintf(body, sizeof body,
             "%s"
             "data: {name: tsv_text, train_path: data/sst2_sample/train.tsv, dev_path: data/sst2_sample/dev.tsv,\n"
             "       max_len: 32}\n"
             "train: {max_steps: 12, batch_size: 8, log_interval: 1, eval_strategy: steps, eval_interval: 12,\n"
             "        grad_clip: 0.5, save_strategy: steps, save_interval: 12, save_total_limit: 0, progress: lines}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
             "dist: {timeout_s: 60}\n",
             model);
    snprintf(whole, sizeof whole, "%s_whole", name);
    snprintf(split, sizeof split, "%s_tp2", name);
    CHECK(tp_train_in(split_dir, whole, body, split_device(), "threads=1", 1) == 0, "%s fine-tunes whole", name);
    CHECK(tp_train_in(split_dir, split, body, split_device(), "threads=1 dist.tensor_parallel=2", 2) == 0,
          "%s fine-tunes split over 2 ranks", name);
    split_agrees(split, whole, 12);
    split_same_dev_loss(split, whole, 12);
}

/* A pretrained Hugging Face directory loads into the parts, each rank
 * taking its rows of the whole tensors, and fine-tunes as the whole model
 * does: the tiny BART classifier, and GPT2ForSequenceClassification (the
 * blocks split, the score head whole, attention dropout on: each rank draws
 * its heads' slices of the masks). */
/* The "loss" of a results file (dev_results.json), NAN if none */
static double results_loss(const char *path) {
    char *s = tp_slurp(path), *at = s ? strstr(s, "\"loss\": ") : NULL;
    double v = at ? atof(at + 8) : NAN;
    free(s);
    return v;
}

static void test_pretrained_split(void) {
    fine_tune_split("bart", "model: {name: bart, pretrained: tests/parity/fixtures/hf_bart_tiny, "
                            "task: sequence_classification}\n");
    /* test mode on the parts (`--nproc 2` of the split run) against one
     * process holding the whole model: the same dev loss and predictions */
    char run[600], out[700];
    snprintf(run, sizeof run, "%s/runs/bart_tp2", split_dir);
    snprintf(out, sizeof out, "%s/bart_tp2_test.out", split_dir);
    CHECK(tp_run_shown((const char *[]){"test", run, "--nproc", "2", NULL}, out, 0, "utrain test --nproc 2") == 0,
          "test mode on the 2 parts");
    char *said = tp_slurp(out);
    CHECK(said && strstr(said, "on the model's parts (tensor parallel 2, 1 pipeline stage)"), "%s", said ? said : "");
    free(said);
    double parts = results_loss(tp_run_file(split_dir, "bart_tp2", "dev_results.json"));
    int lines = tp_count_lines(tp_run_file(split_dir, "bart_tp2", "dev_predictions.tsv"));
    CHECK(tp_run_shown((const char *[]){"test", run, NULL}, out, 0, "utrain test") == 0, "test mode in one process");
    double whole = results_loss(tp_run_file(split_dir, "bart_tp2", "dev_results.json"));
    CHECK(isfinite(parts) && fabs(parts - whole) <= 1e-5 * fabs(whole) && lines > 10 &&
              lines == tp_count_lines(tp_run_file(split_dir, "bart_tp2", "dev_predictions.tsv")),
          "dev loss %.9g on the parts, %.9g whole; %d prediction lines", parts, whole, lines);
    fine_tune_split("gpt2cls", "model: {name: gpt2, pretrained: tests/parity/fixtures/hf_gpt2_cls_tiny, "
                               "task: sequence_classification, dropout: 0.2}\n");
}

/* BERT from scratch (MiniLM's WordPiece vocabulary, 30522 ids, split by
 * vocabulary), hidden and attention dropout on: split over 2 ranks it
 * trains as the whole model, dev loss included. */
static void test_bert_split(void) {
    static const char bert[] =
        "model: {name: bert, vocab_size: 30522, hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 4,\n"
        "        intermediate_size: 64, max_position_embeddings: 64, hidden_dropout_prob: 0.1,\n"
        "        attention_probs_dropout_prob: 0.1}\n"
        "data: {name: tsv_text, train_path: data/sst2_sample/train.tsv, dev_path: data/sst2_sample/dev.tsv,\n"
        "       max_len: 32, tokenizer: data/pretrained/all-MiniLM-L6-v2}\n"
        "train: {max_steps: 12, batch_size: 8, log_interval: 1, eval_strategy: steps, eval_interval: 12,\n"
        "        grad_clip: 0.5, save_strategy: steps, save_interval: 12, save_total_limit: 0, progress: lines}\n"
        "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
        "dist: {timeout_s: 60}\n";
    CHECK(tp_train_in(split_dir, "bertwhole", bert, split_device(), "threads=1", 1) == 0, "a small BERT whole");
    CHECK(tp_train_in(split_dir, "berttp2", bert, split_device(), "threads=1 dist.tensor_parallel=2", 2) == 0,
          "and split over 2 ranks");
    /* the key bias's gradient is zero in exact arithmetic (softmax does not
     * see a shift of every score), so that tensor holds rounding noise of
     * either run: the weights are compared as one vector */
    double l = tp_loss_diff(tp_run_file(split_dir, "bertwhole", "metrics.jsonl"), tp_run_file(split_dir, "berttp2", "metrics.jsonl"),
                            12);
    double all = -1;
    tp_tensors_diff(tp_ckpt_file(split_dir, "bertwhole", 12), tp_ckpt_file(split_dir, "berttp2", 12), "model.", &all, NULL, 0);
    CHECK(l < 1e-5 && all >= 0 && all < 1e-5, "berttp2: losses within %.2g, the weights as one vector within %.2g of the "
          "whole model's (1e-5)", l, all);
    split_same_dev_loss("berttp2", "bertwhole", 12);
}


static void test_bad_layouts_are_refused(void) {
    split_refused("baddp", 2, "dist.tensor_parallel=2 dist.strategy=dp", "dist.strategy dp (threads of one process)");
    split_refused("baddiv", 3, "dist.tensor_parallel=2", "world size 3 is not divisible by dist.tensor_parallel 2");
    split_refused("badheads", 2, "dist.tensor_parallel=2 model.n_head=3 model.n_embd=33",
            "divisible");
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(split_dir, sizeof split_dir, "utrain-tp")) return 1;
    tp_mpi_env(true);
    if (!tp_tokenize_sample(split_dir, shard, sizeof shard)) return 1;
    snprintf(split_body, sizeof split_body,
             "model: {name: gpt2, n_layer: 2, n_head: 4, n_embd: 32, vocab_size: 256, block_size: 16, dropout: 0.1}\n"
             "data: {name: tokens, train_path: %s, seq_len: 16}\n"
             "train: {max_steps: 24, batch_size: 8, log_interval: 1, eval_strategy: \"no\", grad_clip: 0.5,\n"
             "        save_strategy: steps, save_interval: 12, save_total_limit: 0, progress: lines}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.01}\n"
             "dist: {timeout_s: 60}\n",
             shard);
    RUN(test_split_runs_train_as_the_whole_model);
    RUN(test_split_with_data_parallel);
    RUN(test_sequence_parallel); /* after whole and ddp2, its references */
    RUN(test_flagai_keys);
    RUN(test_resume);
    RUN(test_pretrained_split);
    RUN(test_bert_split);
    RUN(test_bad_layouts_are_refused);
    return tp_finish(TEST_SUMMARY(), split_dir);
}
