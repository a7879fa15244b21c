/* Masked language modeling end to end (`utrain train`, `test`, `export`,
 * `plan`): bert and roberta continuing their pretraining on data/sst2_sample's
 * sentences (a text file, a line each; JSON Lines for the test split),
 * their masks drawn as DataCollatorForLanguageModeling draws them; the dev
 * loss, accuracy over the masked tokens and perplexity; the best checkpoint
 * by dev/loss; test mode; the Hugging Face export a BertForMaskedLM;
 * run_mlm's own argument file (line_by_line, mlm_probability,
 * validation_split_percentage); the masks the same in two runs, other ones
 * under another data.seed; a run resumed mid-epoch and two ranks of half
 * the batch as one straight process of the whole (the masks depend on
 * neither), two pipeline stages and tensor parallelism over 2 ranks as one
 * process; the simulated device as the CPU; and the refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "hf_e2e.h"

static char tmp[256];

/* split's sentences (at most max) as a text file, or JSON Lines {"text": ...} */
static int write_split(const char *split, const char *path, bool json, int max) {
    char (*text)[256];
    int *label;
    int n = hfe_read_sst2(split, &text, &label);
    FILE *f = fopen(path, "w");
    UT_ASSERT(f);
    for (int i = 0; i < n && i < max; i++) {
        if (json) fprintf(f, "{\"id\": %d, \"text\": \"%s\"}\n", i, text[i]); /* sst2's sentences need no escapes */
        else fprintf(f, "%s\n", text[i]);
    }
    fclose(f);
    return n < max ? n : max;
}

static void write_config(const char *name, const char *model, const char *fixture, int epochs, const char *extra) {
    char file[64];
    snprintf(file, sizeof file, "%s.yml", name);
    FILE *f = fopen(tp_path(tmp, file), "w");
    UT_ASSERT(f);
    fprintf(f, "experiment_name: %s\noutput_dir: %s/runs\nseed: 3\n"
               "model:\n  name: %s\n  pretrained: tests/parity/fixtures/%s\n"
               "data:\n  name: mlm_text\n  train_path: %s/train.txt\n  dev_path: %s/dev.txt\n"
               "  test_path: %s/test.jsonl\n  max_len: 32\n%s"
               "train:\n  epochs: %d\n  batch_size: 8\n  log_interval: 1\n  eval_strategy: epoch\n"
               "  save_strategy: epoch\n  best_metric: dev/loss\n"
               "optim:\n  name: adamw\n  lr: 2.0e-3\n",
            name, tmp, model, fixture, tmp, tmp, tmp, extra, epochs);
    fclose(f);
}

/* the train and dev lines' step numbers: 70 blocks of 32 tokens, 9 steps an epoch */
enum { SPE = 9 };

/* bert learns (the dev loss falls, accuracy rises; perplexity is exp of the
 * loss), keeps the best checkpoint by dev/loss, tests and exports */
static void test_bert_train_test_export(void) {
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "mlm.out", NULL, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "mlm.out"));
    CHECK(s && strstr(s, "  Num examples = 70\n") && strstr(s, "best dev/loss"), "%s", s);
    free(s);
    const char *metrics = tp_path(tmp, "runs/mlm/metrics.jsonl");
    double l1 = hfe_dev_metric(metrics, SPE, "loss"), l4 = hfe_dev_metric(metrics, 4 * SPE, "loss"),
           a1 = hfe_dev_metric(metrics, SPE, "accuracy"), a4 = hfe_dev_metric(metrics, 4 * SPE, "accuracy"),
           p4 = hfe_dev_metric(metrics, 4 * SPE, "perplexity");
    CHECK(l4 < l1 - 0.3 && a4 >= a1 && a4 > 0.05 && a4 < 1, "dev loss %g -> %g, accuracy %g -> %g", l1, l4, a1, a4);
    CHECK(fabs(p4 - exp(l4)) <= 1e-3 * p4, "perplexity %g, exp(loss) %g", p4, exp(l4));
    CHECK(hfe_utrain(tmp, "test", tp_path(tmp, "runs/mlm"), "mlm_test.out", NULL, NULL) == 0, "test");
    s = tp_slurp(tp_path(tmp, "mlm_test.out"));
    CHECK(s && strstr(s, "test.jsonl: text 'text'") && strstr(s, "test (17 examples):  loss ") && strstr(s, "  perplexity "), "%s", s);
    free(s);
    s = tp_slurp(tp_path(tmp, "runs/mlm/test_results.json"));
    CHECK(s && strstr(s, "\"accuracy\"") && strstr(s, "\"perplexity\""), "%s", s);
    /* the same masks as the evaluation during training drew: test mode's dev loss is the best checkpoint's */
    free(s);
    const char *argv[] = {"export", tp_path(tmp, "runs/mlm"), "--format", "hf", tp_path(tmp, "mlm_hf"), NULL};
    CHECK(tp_run(argv, tp_path(tmp, "export.out")) == 0, "export");
    s = tp_slurp(tp_path(tmp, "mlm_hf/config.json"));
    /* written once: transformers' own config.json had it too */
    const char *tie = s ? strstr(s, "\"tie_word_embeddings\":\ttrue") : NULL;
    CHECK(s && strstr(s, "\"BertForMaskedLM\"") && tie && !strstr(tie + 5, "tie_word_embeddings") &&
              !strstr(s, "id2label"), "%s", s);
    free(s);
    char err[512];
    ut_st_file *f = ut_st_open(tp_path(tmp, "mlm_hf/model.safetensors"), err, sizeof err);
    CHECK(f && ut_st_get(f, "cls.predictions.bias") && ut_st_get(f, "cls.predictions.transform.LayerNorm.weight") &&
              !ut_st_get(f, "cls.predictions.decoder.weight") && !ut_st_get(f, "bert.pooler.dense.weight"), "%s", err);
    ut_st_close(f);
    /* the export trains on as model.pretrained: its first dev loss is the run's best */
    char pre[400];
    snprintf(pre, sizeof pre, "model.pretrained=%s", tp_path(tmp, "mlm_hf"));
    const char *again[] = {pre, "experiment_name=mlm_again", "train.epochs=1", "train.eval_on_start=true", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "again.out", again, NULL) == 0, "from the export");
    double l0 = hfe_dev_metric(tp_path(tmp, "runs/mlm_again/metrics.jsonl"), 0, "loss");
    CHECK(fabs(l0 - l4) <= 1e-4 * l4, "the export's dev loss %g, the run's %g", l0, l4);
}

static void test_roberta(void) {
    write_config("mlm_rob", "roberta", "hf_roberta_mlm_tiny", 3, "");
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm_rob.yml"), "rob.out", NULL, NULL) == 0, "train");
    const char *metrics = tp_path(tmp, "runs/mlm_rob/metrics.jsonl");
    char *s = tp_slurp(tp_path(tmp, "rob.out"));
    int spe = 0;
    const char *at = s ? strstr(s, "Total optimization steps = ") : NULL;
    if (at) spe = atoi(at + 27) / 3;
    free(s);
    double l1 = hfe_dev_metric(metrics, spe, "loss"), l3 = hfe_dev_metric(metrics, 3 * spe, "loss");
    CHECK(spe > 0 && l3 < l1, "roberta dev loss %g -> %g (%d steps an epoch)", l1, l3, spe);
}

/* the masks: the same in two runs of one seed; others under another data.seed */
static void test_masks_by_seed(void) {
    const char *a[] = {"experiment_name=seed_a", "train.epochs=1", NULL},
               *b[] = {"experiment_name=seed_b", "train.epochs=1", NULL},
               *c[] = {"experiment_name=seed_c", "train.epochs=1", "data.seed=11", "data.shuffle=true", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "a.out", a, NULL) == 0, "a");
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "b.out", b, NULL) == 0, "b");
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "c.out", c, NULL) == 0, "c");
    char la[64] = "", lb[64] = "", lc[64] = "";
    const char *ma = tp_path(tmp, "runs/seed_a/metrics.jsonl");
    CHECK(tp_loss_at(ma, "train", 1, la, sizeof la) &&
              tp_loss_at(tp_path(tmp, "runs/seed_b/metrics.jsonl"), "train", 1, lb, sizeof lb) &&
              tp_loss_at(tp_path(tmp, "runs/seed_c/metrics.jsonl"), "train", 1, lc, sizeof lc), "losses");
    CHECK(!strcmp(la, lb) && strcmp(la, lc), "step 1 losses: %s, %s, data.seed 11: %s", la, lb, lc);
}

/* a run stopped after 5 steps (mid-epoch) and resumed trains as a straight
 * one: the masks of an example depend on the epoch and the example alone */
static void test_resume_mid_epoch(void) {
    const char *straight[] = {"experiment_name=straight", "train.max_steps=14", "train.save_strategy=no",
                              "train.eval_strategy=no", NULL};
    const char *first[] = {"experiment_name=resumed", "train.max_steps=5", "train.save_strategy=steps",
                           "train.save_interval=5", "train.eval_strategy=no", NULL};
    const char *second[] = {"experiment_name=resumed", "train.max_steps=14", "train.save_strategy=steps",
                            "train.save_interval=5", "train.eval_strategy=no", "continue_training=true", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "straight.out", straight, NULL) == 0, "straight");
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "first.out", first, NULL) == 0, "first 5 steps");
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "second.out", second, NULL) == 0, "resumed");
    char *s = tp_slurp(tp_path(tmp, "second.out"));
    CHECK(s && strstr(s, "(step 5, epoch 0, 40 examples into the epoch)"), "%s", s);
    free(s);
    for (int step = 6; step <= 14; step++) {
        char a[64] = "", b[64] = "";
        CHECK(tp_loss_at(tp_path(tmp, "runs/straight/metrics.jsonl"), "train", step, a, sizeof a) &&
                  tp_loss_at(tp_path(tmp, "runs/resumed/metrics.jsonl"), "train", step, b, sizeof b) && !strcmp(a, b),
              "step %d: straight %s, resumed %s", step, a, b);
    }
}

/* run_mlm's argument file: line by line, a dev set carved by
 * validation_split_percentage, its mlm_probability */
static void test_run_mlm_arguments(void) {
    FILE *f = fopen(tp_path(tmp, "mlm_args.json"), "w");
    fprintf(f, "{\"model_name_or_path\": \"tests/parity/fixtures/hf_bert_mlm_tiny\",\n"
               " \"train_file\": \"%s/train.txt\", \"line_by_line\": true, \"mlm_probability\": 0.2,\n"
               " \"validation_split_percentage\": 10, \"max_seq_length\": 32, \"do_train\": true, \"do_eval\": true,\n"
               " \"per_device_train_batch_size\": 8, \"learning_rate\": 2e-3, \"num_train_epochs\": 1,\n"
               " \"eval_strategy\": \"epoch\", \"output_dir\": \"%s/mlm_args_out\"}\n",
            tmp, tmp);
    fclose(f);
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm_args.json"), "args.out", NULL, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "args.out"));
    /* 240 lines, one example each: 24 of them the dev set, 216 to train on (27 steps) */
    CHECK(s && strstr(s, "train_file: texts for a masked language model (data.name mlm_text)") &&
              strstr(s, "validation_split_percentage 10: data.dev_fraction 0.10000000000000001") &&
              strstr(s, "  Num examples = 216\n"), "%s", s);
    free(s);
    double acc = hfe_dev_metric(tp_path(tmp, "mlm_args_out/default/metrics.jsonl"), 27, "accuracy");
    CHECK(acc >= 0 && acc <= 1, "dev accuracy of run_mlm's arguments: %g", acc);
}

/* two ranks of 4 train as one process of 8 (no dropout: dropout's masks
 * are drawn by a rank's batch) */
static void test_two_ranks(void) {
    const char *one[] = {"experiment_name=mlm_one", "model.hidden_dropout_prob=0",
                         "model.attention_probs_dropout_prob=0", "train.epochs=1", NULL};
    const char *two[] = {"experiment_name=mlm_two", "model.hidden_dropout_prob=0",
                         "model.attention_probs_dropout_prob=0", "train.epochs=1", "train.batch_size=4", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "one.out", one, NULL) == 0, "one process");
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "two.out", two, "2") == 0, "two ranks");
    hfe_check_same_losses(tp_path(tmp, "runs/mlm_one/metrics.jsonl"), tp_path(tmp, "runs/mlm_two/metrics.jsonl"), 1,
                          SPE, 2, "2 ranks");
    const char *m1 = tp_path(tmp, "runs/mlm_one/metrics.jsonl");
    double a = hfe_dev_metric(m1, SPE, "loss"), b = hfe_dev_metric(tp_path(tmp, "runs/mlm_two/metrics.jsonl"), SPE, "loss"),
           c = hfe_dev_metric(m1, SPE, "accuracy"),
           d = hfe_dev_metric(tp_path(tmp, "runs/mlm_two/metrics.jsonl"), SPE, "accuracy");
    CHECK(fabs(a - b) <= 1e-5 * a && c == d, "dev loss %g vs %g, accuracy %g vs %g", a, b, c, d);
    /* two pipeline stages (a layer each; the last holds the tied word embedding's copy) as the whole model */
    const char *staged[] = {"experiment_name=mlm_pp2", "model.hidden_dropout_prob=0",
                            "model.attention_probs_dropout_prob=0", "train.epochs=1", "dist.pipeline_parallel=2", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "pp2.out", staged, "2") == 0, "two stages");
    hfe_check_same_losses(m1, tp_path(tmp, "runs/mlm_pp2/metrics.jsonl"), 1, SPE, 2, "2 stages");
    b = hfe_dev_metric(tp_path(tmp, "runs/mlm_pp2/metrics.jsonl"), SPE, "loss");
    d = hfe_dev_metric(tp_path(tmp, "runs/mlm_pp2/metrics.jsonl"), SPE, "accuracy");
    CHECK(fabs(a - b) <= 1e-5 * a && c == d, "2 stages: dev loss %g vs %g, accuracy %g vs %g", a, b, c, d);
}

/* tensor parallelism over 2 ranks (the vocabulary of the word embedding,
 * the decoder and its bias split; the loss vocabulary-parallel, an
 * evaluation's logits gathered) trains as one process: a BERT from scratch
 * with sizes that split (the fixtures' intermediate size 37 does not) */
static void test_tensor_parallel(void) {
    FILE *f = fopen(tp_path(tmp, "mlm_tp.yml"), "w");
    UT_ASSERT(f);
    fprintf(f, "experiment_name: mlm_tp1\noutput_dir: %s/runs\nseed: 3\n"
               "model:\n  name: bert\n  vocab_size: 100\n  hidden_size: 32\n  num_hidden_layers: 2\n"
               "  num_attention_heads: 2\n  intermediate_size: 64\n  max_position_embeddings: 64\n"
               "  hidden_dropout_prob: 0\n  attention_probs_dropout_prob: 0\n"
               "data:\n  name: mlm_text\n  tokenizer: tests/parity/fixtures/hf_bert_tiny\n"
               "  train_path: %s/train.txt\n  dev_path: %s/dev.txt\n  max_len: 32\n"
               "train:\n  epochs: 1\n  batch_size: 8\n  log_interval: 1\n  eval_strategy: epoch\n"
               "optim:\n  name: adamw\n  lr: 2.0e-3\n", tmp, tmp, tmp);
    fclose(f);
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm_tp.yml"), "tp1.out", NULL, NULL) == 0, "one process");
    const char *tp[] = {"experiment_name=mlm_tp2", "dist.tensor_parallel=2", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm_tp.yml"), "tp2.out", tp, "2") == 0, "tensor parallel 2");
    const char *m1 = tp_path(tmp, "runs/mlm_tp1/metrics.jsonl"), *m2 = tp_path(tmp, "runs/mlm_tp2/metrics.jsonl");
    hfe_check_same_losses(m1, m2, 1, SPE, 2, "tensor parallel");
    double a = hfe_dev_metric(m1, SPE, "loss"), b = hfe_dev_metric(m2, SPE, "loss"),
           c = hfe_dev_metric(m1, SPE, "accuracy"), d = hfe_dev_metric(m2, SPE, "accuracy");
    CHECK(fabs(a - b) <= 1e-5 * a && fabs(c - d) < 1e-9, "dev loss %g vs %g, accuracy %g vs %g (tensor parallel)", a,
          b, c, d);
}

/* the simulated device trains as the CPU does */
static void test_sim_device(void) {
    const char *cpu[] = {"experiment_name=mlm_cpu", "model.hidden_dropout_prob=0",
                         "model.attention_probs_dropout_prob=0", "train.epochs=1", NULL};
    const char *sim[] = {"experiment_name=mlm_sim", "model.hidden_dropout_prob=0",
                         "model.attention_probs_dropout_prob=0", "train.epochs=1", "device=sim", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "cpu.out", cpu, NULL) == 0, "cpu");
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "sim.out", sim, NULL) == 0, "sim");
    hfe_check_same_losses(tp_path(tmp, "runs/mlm_cpu/metrics.jsonl"), tp_path(tmp, "runs/mlm_sim/metrics.jsonl"), 1,
                          SPE, 2, "sim");
    double a = hfe_dev_metric(tp_path(tmp, "runs/mlm_cpu/metrics.jsonl"), SPE, "accuracy"),
           b = hfe_dev_metric(tp_path(tmp, "runs/mlm_sim/metrics.jsonl"), SPE, "accuracy");
    CHECK(a == b, "dev accuracy %g vs %g", a, b);
}

/* utrain plan measures a masked batch */
static void test_plan(void) {
    const char *argv[] = {"plan", tp_path(tmp, "mlm.yml"), NULL};
    CHECK(tp_run(argv, tp_path(tmp, "plan.out")) == 0, "plan");
    char *s = tp_slurp(tp_path(tmp, "plan.out"));
    CHECK(s && strstr(s, "GFLOP per micro-batch") && strstr(s, "\nzero3 "), "%s", s);
    free(s);
}

static void test_refused(void) {
    static const char *const cases[][2] = {
        {"model.name=gpt2", "data.name mlm_text: masked language modeling trains bert and roberta (model.task: "
                            "masked_lm), not model.name gpt2 (a causal language model"},
        {"model.task=sequence_classification", "model.task: sequence_classification, but data.name mlm_text trains "
                                               "a masked language model"},
        {"train.metrics=f1", "train.metrics: f1 is not a masked language model's score"},
        {"data.label_all_tokens=true", "data.label_all_tokens: read by data.name tagged_text only (data.name is "
                                       "mlm_text)"},
        {"data.mlm_probability=1", "data.mlm_probability"},
        {"data.tokenizer=data/pretrained/gpt2-bpe", "has no mask token"},
        {"data.max_len=100", "data.max_len: 100 is more than the model's max_position_embeddings 64"},
    };
    hfe_check_refused(tmp, "mlm.yml", cases, (int)(sizeof cases / sizeof cases[0]));
    static const char *const tsv[][2] = {
        {"data.line_by_line=true", "data.line_by_line: read by data.name mlm_text only"},
        {"model.task=masked_lm", "model.task: masked_lm predicts the masked tokens of texts: set data.name: mlm_text"},
    };
    hfe_write_config(tmp, "sst", "bert", "hf_bert_tiny", "", 32, 1);
    hfe_check_refused(tmp, "sst.yml", tsv, 2);
    /* a sequence classifier's save: the masked-LM head newly initialised, and the run says so */
    const char *cls[] = {"experiment_name=mlm_from_cls", "model.pretrained=tests/parity/fixtures/hf_bert_tiny",
                         "train.max_steps=1", "train.eval_strategy=no", "train.save_strategy=no", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "mlm.yml"), "from_cls.out", cls, NULL) == 0, "from a classifier");
    char *s = tp_slurp(tp_path(tmp, "from_cls.out"));
    CHECK(s && strstr(s, "hf_bert_tiny/model.safetensors has no 5 of the model's tensors, newly initialised (a new "
                         "head, to train): the first 'cls.predictions.transform.dense.weight'"), "%s", s);
    free(s);
}

/* GPT-2 on texts as run_clm trains it (data.name clm_text: GPT-2's BPE,
 * blocks of data.seq_len, the line ends kept): the dev loss falls, the run
 * generates; run_clm's argument file; the refusals */
static void test_causal_lm(void) {
    FILE *f = fopen(tp_path(tmp, "clm.yml"), "w");
    UT_ASSERT(f);
    fprintf(f, "experiment_name: clm\noutput_dir: %s/runs\nseed: 3\n"
               "model:\n  name: gpt2\n  n_layer: 2\n  n_head: 2\n  n_embd: 32\n  block_size: 64\n"
               "data:\n  name: clm_text\n  tokenizer: data/pretrained/gpt2-bpe\n  train_path: %s/train.txt\n"
               "  dev_path: %s/dev.txt\n  seq_len: 32\n"
               "train:\n  epochs: 2\n  batch_size: 16\n  log_interval: 1\n  eval_strategy: epoch\n"
               "optim:\n  name: adamw\n  lr: 5.0e-3\n", tmp, tmp, tmp);
    fclose(f);
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "clm.yml"), "clm.out", NULL, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "clm.out"));
    const char *at = s ? strstr(s, "Total optimization steps = ") : NULL;
    int steps = at ? atoi(at + 27) : 0;
    free(s);
    const char *metrics = tp_path(tmp, "runs/clm/metrics.jsonl");
    double l1 = hfe_dev_metric(metrics, steps / 2, "loss"), l2 = hfe_dev_metric(metrics, steps, "loss"),
           p2 = hfe_dev_metric(metrics, steps, "perplexity");
    CHECK(steps > 0 && l2 < l1 && fabs(p2 - exp(l2)) <= 1e-3 * p2, "dev loss %g -> %g, perplexity %g (%d steps)", l1,
          l2, p2, steps);
    f = fopen(tp_path(tmp, "prompts.txt"), "w");
    fprintf(f, "the film\n");
    fclose(f);
    const char *argv[] = {"generate", tp_path(tmp, "runs/clm"), "--input", tp_path(tmp, "prompts.txt"),
                          "--max-new-tokens", "5", NULL};
    CHECK(tp_run(argv, tp_path(tmp, "gen.out")) == 0, "generate");
    s = tp_slurp(tp_path(tmp, "gen.out"));
    /* the prompt continued with the run's tokenizer (the text itself is the model's choice) */
    CHECK(s && strstr(s, "1 sources, greedy, max 5 new tokens"), "%s", s);
    free(s);
    /* run_clm's argument file on the run's export: block_size makes train_file texts to continue */
    const char *ex[] = {"export", tp_path(tmp, "runs/clm"), "--format", "hf", tp_path(tmp, "clm_hf"), NULL};
    CHECK(tp_run(ex, tp_path(tmp, "clm_export.out")) == 0, "export");
    f = fopen(tp_path(tmp, "clm_args.json"), "w");
    fprintf(f, "{\"model_name_or_path\": \"%s/clm_hf\", \"tokenizer_name\": \"data/pretrained/gpt2-bpe\",\n"
               " \"train_file\": \"%s/train.txt\", \"validation_file\": \"%s/dev.txt\", \"block_size\": 32,\n"
               " \"do_train\": true, \"do_eval\": true, \"per_device_train_batch_size\": 16,\n"
               " \"num_train_epochs\": 1, \"eval_strategy\": \"epoch\", \"output_dir\": \"%s/clm_args_out\"}\n",
            tmp, tmp, tmp, tmp);
    fclose(f);
    int rc = hfe_utrain(tmp, "train", tp_path(tmp, "clm_args.json"), "clm_args.out", NULL, NULL);
    s = tp_slurp(tp_path(tmp, "clm_args.out"));
    CHECK(rc == 0 && s && strstr(s, "train_file: texts for a causal language model (data.name clm_text)"), "%s", s);
    free(s);
    /* trained on from the export, its first evaluation continues from the run's last */
    double a1 = hfe_dev_metric(tp_path(tmp, "clm_args_out/default/metrics.jsonl"), steps / 2, "loss");
    CHECK(a1 < l2, "from the export: dev loss %g after an epoch, the run ended at %g", a1, l2);
    static const char *const cases[][2] = {
        {"model.name=bert", "data.name clm_text: texts for a causal language model train gpt2 (model.name: gpt2), not "
                            "model.name bert (bert and roberta learn from texts by masked language modeling"},
        {"model.task=sequence_classification", "model.task: sequence_classification, but data.name clm_text trains a "
                                               "causal language model"},
        {"data.seq_len=1", "the block size must be in [2, 1e9] (got 1)"},
        {"data.line_by_line=true", "data.line_by_line: read by data.name mlm_text only (data.name is clm_text)"},
        {"model.vocab_size=1000", "model.vocab_size: 1000, but the tokenizer has 50257 tokens"},
    };
    hfe_check_refused(tmp, "clm.yml", cases, (int)(sizeof cases / sizeof cases[0]));
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "ut-mlm")) return 1;
    CHECK(write_split("train", tp_path(tmp, "train.txt"), false, 1000) == 240, "train sentences");
    CHECK(write_split("dev", tp_path(tmp, "dev.txt"), false, 1000) == 60, "dev sentences");
    CHECK(write_split("test", tp_path(tmp, "test.jsonl"), true, 1000) == 60, "test sentences");
    write_config("mlm", "bert", "hf_bert_mlm_tiny", 4, "");
    RUN(test_bert_train_test_export);
    RUN(test_roberta);
    RUN(test_masks_by_seed);
    RUN(test_resume_mid_epoch);
    RUN(test_run_mlm_arguments);
    RUN(test_sim_device);
    RUN(test_plan);
    RUN(test_refused);
    RUN(test_causal_lm);
    /* under mpirun last: its environment turns LeakSanitizer off */
    tp_mpi_env(true);
    RUN(test_two_ranks);
    RUN(test_tensor_parallel);
    return tp_finish(TEST_SUMMARY(), tmp);
}
