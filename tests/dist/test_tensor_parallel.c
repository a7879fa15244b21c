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

static char tmp[256], shard[512], body[2048];

static const char *device(void) {
    const char *d = getenv("UTRAIN_DEVICE");
    return d && *d ? d : "cpu";
}

/* NAME: 24 steps of the tiny GPT-2 on nproc ranks with extra settings. */
static int train(const char *name, int nproc, const char *sets) {
    char all[512];
    snprintf(all, sizeof all, "threads=1 %s", sets);
    return tp_train_in(tmp, name, body, device(), all, nproc);
}

static char *output_of(const char *name) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.out", tmp, name);
    return tp_slurp(path);
}

/* Split run `name` against whole run `ref`: train losses over 24 steps and
 * the final weights and optimizer state. (SGD with momentum: AdamW turns the
 * rounding noise of a gradient that is zero in exact arithmetic, as the key
 * bias's is, into whole steps of lr, so its weights agree only to 1e-4.) */
static void agrees_at(const char *name, const char *ref, int steps) {
    double l = tp_loss_diff(tp_run_file(tmp, ref, "metrics.jsonl"), tp_run_file(tmp, name, "metrics.jsonl"), steps);
    CHECK(l < 1e-5, "%s: train losses within %.2g of %s's (1e-5)", name, l, ref);
    char worst[128] = "";
    double w = tp_tensors_diff(tp_ckpt_file(tmp, ref, steps), tp_ckpt_file(tmp, name, steps), "model.", NULL, worst,
                               sizeof worst);
    CHECK(w >= 0 && w < 1e-5, "%s: weights at step %d within %.2g of %s's (1e-5; worst %s)", name, steps, w, ref,
          worst);
    double o = tp_tensors_diff(tp_ckpt_file(tmp, ref, steps), tp_ckpt_file(tmp, name, steps), "optim.", NULL, worst,
                               sizeof worst);
    CHECK(o >= 0 && o < 1e-4, "%s: optimizer state at step %d within %.2g of %s's (1e-4; worst %s)", name, steps, o,
          ref, worst);
    printf("     %s against %s: losses %.2g, weights %.2g, optimizer state %.2g\n", name, ref, l, w, o);
}

static void agrees(const char *name, const char *ref) { agrees_at(name, ref, 24); }

static void test_split_runs_train_as_the_whole_model(void) {
    CHECK(train("whole", 1, "") == 0, "the whole model trains in one process");
    CHECK(train("tp2", 2, "dist.tensor_parallel=2") == 0, "split over 2 ranks");
    CHECK(train("tp4", 4, "dist.tensor_parallel=4") == 0, "split over 4 ranks");
    agrees("tp2", "whole");
    agrees("tp4", "whole");
    char *s = output_of("tp2");
    CHECK(s && strstr(s, "Tensor parallel = 2 ranks per model"), "the summary names the split:\n%s", s ? s : "");
    free(s);
}

static void test_split_with_data_parallel(void) {
    CHECK(train("ddp2", 2, "") == 0, "ddp on 2 ranks");
    CHECK(train("tp2dp2", 4, "dist.tensor_parallel=2") == 0, "split over 2 ranks, 2 data-parallel ranks");
    agrees("tp2dp2", "ddp2");
    /* ZeRO over the data-parallel ranks: each part's state sharded */
    static const char *const zero[] = {"zero1", "zero2", "zero3"};
    for (int z = 0; z < 3; z++) {
        char name[32], sets[128];
        snprintf(name, sizeof name, "tp2%s", zero[z]);
        snprintf(sets, sizeof sets, "dist.tensor_parallel=2 dist.strategy=%s", zero[z]);
        CHECK(train(name, 4, sets) == 0, "split over 2 ranks, %s over 2 data-parallel ranks", zero[z]);
        agrees(name, "ddp2");
    }
    /* ZeRO-Offload: each part's optimizer on the host */
    CHECK(train("tp2offload", 4, "dist.tensor_parallel=2 dist.strategy=zero2 dist.offload_optimizer=cpu") == 0,
          "split over 2 ranks, zero2 with ZeRO-Offload over 2 data-parallel ranks");
    agrees("tp2offload", "ddp2");
    char *s = output_of("tp2dp2");
    CHECK(s && strstr(s, "2 data-parallel ranks") && strstr(s, "Total train batch size (w. parallel, distributed "
                                                              "& accumulation) = 16"),
          "two data-parallel ranks, global batch 16:\n%s", s ? s : "");
    free(s);
}

/* FlagAI's spelling: env_type deepspeed+mpu with model_parallel_size. */
static void test_flagai_keys(void) {
    CHECK(train("flagai", 2, "env_type=deepspeed+mpu model_parallel_size=2") == 0, "FlagAI's keys are taken");
    CHECK(tp_same_weights(tp_ckpt_file(tmp, "tp2", 24), tp_ckpt_file(tmp, "flagai", 24)),
          "and mean dist.tensor_parallel: 2 (the same weights, bit for bit)");
}

/* Stopped at step 12 and resumed at the same split: bit-exact; resumed in
 * one process from the split run's checkpoint: the whole run's weights. */
static void test_resume(void) {
    CHECK(train("part", 2, "dist.tensor_parallel=2 train.max_steps=12") == 0, "a split run stops at step 12");
    CHECK(train("part", 2, "dist.tensor_parallel=2 continue_training=true") == 0, "and goes on to 24");
    CHECK(tp_same_weights(tp_ckpt_file(tmp, "tp2", 24), tp_ckpt_file(tmp, "part", 24)),
          "resumed at the same split: the same checkpoint, bit for bit");
    CHECK(train("partz3", 4, "dist.tensor_parallel=2 dist.strategy=zero3 train.max_steps=12") == 0,
          "a split zero3 run stops at step 12");
    CHECK(train("partz3", 4, "dist.tensor_parallel=2 dist.strategy=zero3 continue_training=true") == 0,
          "and goes on to 24");
    CHECK(tp_same_weights(tp_ckpt_file(tmp, "tp2zero3", 24), tp_ckpt_file(tmp, "partz3", 24)),
          "resumed split under zero3: the same checkpoint, bit for bit");
    CHECK(tp_plant_checkpoint(tp_ckpt_file(tmp, "tp4", 12), tp_path(tp_path(tmp, "runs"), "moved")),
          "tp4's step-12 checkpoint copied");
    CHECK(train("moved", 1, "continue_training=true") == 0, "it goes on in one process");
    double w = tp_tensors_diff(tp_ckpt_file(tmp, "whole", 24), tp_ckpt_file(tmp, "moved", 24), "model.", NULL, NULL, 0);
    CHECK(w >= 0 && w < 1e-5, "to the whole run's weights (%.2g)", w);
    CHECK(tp_plant_checkpoint(tp_ckpt_file(tmp, "whole", 12), tp_path(tp_path(tmp, "runs"), "split")),
          "the whole run's step-12 checkpoint copied");
    CHECK(train("split", 2, "dist.tensor_parallel=2 continue_training=true") == 0, "it goes on split over 2");
    w = tp_tensors_diff(tp_ckpt_file(tmp, "whole", 24), tp_ckpt_file(tmp, "split", 24), "model.", NULL, NULL, 0);
    CHECK(w >= 0 && w < 1e-5, "to the whole run's weights (%.2g)", w);
    char out[600];
    snprintf(out, sizeof out, "%s/test_tp2.out", tmp);
    int rc = tp_run_shown((const char *[]){"test", tp_path(tp_path(tmp, "runs"), "tp2"), NULL}, out, 0, "test tp2");
    CHECK(rc == 0, "utrain test reads the split run in one process");
}

static void same_dev_loss(const char *name, const char *ref, int step) {
    char a[64] = "", b[64] = "";
    CHECK(tp_loss_at(tp_run_file(tmp, ref, "metrics.jsonl"), "dev", step, a, sizeof a) &&
              tp_loss_at(tp_run_file(tmp, name, "metrics.jsonl"), "dev", step, b, sizeof b) &&
              fabs(atof(a) - atof(b)) < 1e-5 * fabs(atof(a)),
          "%s: the dev loss at step %d: %s whole, %s split", name, step, a, b);
}

/* A pretrained Hugging Face directory (the tiny BART classifier fixture)
 * loads into the parts, each rank taking its rows of the whole tensors, and
 * fine-tunes as the whole model does; dev accuracy and loss equal too. */
static void test_pretrained_split(void) {
    static const char bart[] =
        "model: {name: bart, pretrained: tests/parity/fixtures/hf_bart_tiny, task: sequence_classification}\n"
        "data: {name: tsv_text, train_path: data/sst2_sample/train.tsv, dev_path: data/sst2_sample/dev.tsv,\n"
        "       max_len: 32}\n"
        "train: {max_steps: 12, batch_size: 8, log_interval: 1, eval_strategy: steps, eval_interval: 12,\n"
        "        grad_clip: 0.5, save_strategy: steps, save_interval: 12, save_total_limit: 0, progress: lines}\n"
        "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
        "dist: {timeout_s: 60}\n";
    CHECK(tp_train_in(tmp, "bartwhole", bart, device(), "threads=1", 1) == 0, "the tiny BART fine-tunes whole");
    CHECK(tp_train_in(tmp, "barttp2", bart, device(), "threads=1 dist.tensor_parallel=2", 2) == 0,
          "and split over 2 ranks");
    agrees_at("barttp2", "bartwhole", 12);
    same_dev_loss("barttp2", "bartwhole", 12);
    /* GPT2ForSequenceClassification: the blocks split, the score head whole,
     * attention dropout on (each rank draws its heads' slices of the masks) */
    static const char gpt2cls[] =
        "model: {name: gpt2, pretrained: tests/parity/fixtures/hf_gpt2_cls_tiny, task: sequence_classification,\n"
        "        dropout: 0.2}\n"
        "data: {name: tsv_text, train_path: data/sst2_sample/train.tsv, dev_path: data/sst2_sample/dev.tsv,\n"
        "       max_len: 32}\n"
        "train: {max_steps: 12, batch_size: 8, log_interval: 1, eval_strategy: steps, eval_interval: 12,\n"
        "        grad_clip: 0.5, save_strategy: steps, save_interval: 12, save_total_limit: 0, progress: lines}\n"
        "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
        "dist: {timeout_s: 60}\n";
    CHECK(tp_train_in(tmp, "clswhole", gpt2cls, device(), "threads=1", 1) == 0, "the tiny GPT-2 classifier whole");
    CHECK(tp_train_in(tmp, "clstp2", gpt2cls, device(), "threads=1 dist.tensor_parallel=2", 2) == 0,
          "and split over 2 ranks");
    agrees_at("clstp2", "clswhole", 12);
    same_dev_loss("clstp2", "clswhole", 12);
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
    CHECK(tp_train_in(tmp, "bertwhole", bert, device(), "threads=1", 1) == 0, "a small BERT whole");
    CHECK(tp_train_in(tmp, "berttp2", bert, device(), "threads=1 dist.tensor_parallel=2", 2) == 0,
          "and split over 2 ranks");
    /* the key bias's gradient is zero in exact arithmetic (softmax does not
     * see a shift of every score), so that tensor holds rounding noise of
     * either run: the weights are compared as one vector */
    double l = tp_loss_diff(tp_run_file(tmp, "bertwhole", "metrics.jsonl"), tp_run_file(tmp, "berttp2", "metrics.jsonl"),
                            12);
    double all = -1;
    tp_tensors_diff(tp_ckpt_file(tmp, "bertwhole", 12), tp_ckpt_file(tmp, "berttp2", 12), "model.", &all, NULL, 0);
    CHECK(l < 1e-5 && all >= 0 && all < 1e-5, "berttp2: losses within %.2g, the weights as one vector within %.2g of the "
          "whole model's (1e-5)", l, all);
    same_dev_loss("berttp2", "bertwhole", 12);
}

static void refused(const char *name, int nproc, const char *sets, const char *want) {
    char all[512], out[600];
    snprintf(all, sizeof all, "threads=1 %s", sets);
    snprintf(out, sizeof out, "%s/%s.out", tmp, name);
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/%s.yml", tmp, name);
    FILE *f = fopen(cfg, "w");
    fprintf(f, "experiment_name: %s\noutput_dir: %s/runs\nseed: 5\n%s", name, tmp, body);
    fclose(f);
    char np[8];
    snprintf(np, sizeof np, "%d", nproc);
    const char *argv[32] = {"train", cfg, "--nproc", np};
    tp_push_sets(argv, 4, 32, all);
    int rc = tp_run(argv, out);
    char *s = tp_slurp(out);
    CHECK(rc == 1 && s && strstr(s, want), "%s: exit 1 saying \"%s\" (exit %d):\n%s", name, want, rc, s ? s : "");
    free(s);
}

static void test_bad_layouts_are_refused(void) {
    refused("baddp", 2, "dist.tensor_parallel=2 dist.strategy=dp", "dist.strategy dp (threads of one process)");
    refused("baddiv", 3, "dist.tensor_parallel=2", "world size 3 is not divisible by dist.tensor_parallel 2");
    refused("badheads", 2, "dist.tensor_parallel=2 model.n_head=3 model.n_embd=33",
            "divisible");
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-tp")) return 1;
    tp_mpi_env(true);
    if (!tp_tokenize_sample(tmp, shard, sizeof shard)) return 1;
    snprintf(body, sizeof body,
             "model: {name: gpt2, n_layer: 2, n_head: 4, n_embd: 32, vocab_size: 256, block_size: 16, dropout: 0.1}\n"
             "data: {name: tokens, train_path: %s, seq_len: 16}\n"
             "train: {max_steps: 24, batch_size: 8, log_interval: 1, eval_strategy: \"no\", grad_clip: 0.5,\n"
             "        save_strategy: steps, save_interval: 12, save_total_limit: 0, progress: lines}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.01}\n"
             "dist: {timeout_s: 60}\n",
             shard);
    RUN(test_split_runs_train_as_the_whole_model);
    RUN(test_split_with_data_parallel);
    RUN(test_flagai_keys);
    RUN(test_resume);
    RUN(test_pretrained_split);
    RUN(test_bert_split);
    RUN(test_bad_layouts_are_refused);
    return tp_finish(TEST_SUMMARY(), tmp);
}
