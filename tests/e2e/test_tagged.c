/* Token classification end to end (`utrain train`, `test`, `export`): bert
 * and roberta tagging the words of data/sst2_sample's sentences (WORK for
 * film, movie, story; PER for director, actors, cast; B- then I- for a run
 * of one type), read as run_ner's JSON Lines and as CoNLL text; the dev
 * scores as seqeval's (precision, recall, f1, accuracy), the best
 * checkpoint by dev/f1, test mode's predictions a tag per word, the
 * Hugging Face export a BertForTokenClassification with the tags as
 * id2label; run_ner's own argument file; a dev set carved from the train
 * file; the simulated device as the CPU; two ranks of half the batch, two
 * pipeline stages and tensor parallelism over 2 ranks as one process (the loss a mean over the labeled tokens of the whole batch);
 * and the refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "hf_e2e.h"

static char tmp[256];

static const char *tag_of(const char *w) {
    static const char *const work[] = {"film", "movie", "story"}, *const per[] = {"director", "actors", "cast"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(w, work[i])) return "WORK";
    for (int i = 0; i < 3; i++)
        if (!strcmp(w, per[i])) return "PER";
    return NULL;
}

/* split's sentences (at most max) as JSON Lines or CoNLL: their words and
 * tags; returns the count of sentences */
static int write_split(const char *split, const char *path, bool conll, int max) {
    char (*text)[256];
    int *label;
    int n = hfe_read_sst2(split, &text, &label);
    FILE *f = fopen(path, "w");
    UT_ASSERT(f);
    if (conll) fprintf(f, "-DOCSTART- -X- O O\n\n");
    for (int i = 0; i < n && i < max; i++) {
        char words[64][64];
        int k = 0;
        for (char *w = strtok(text[i], " "); w && k < 64; w = strtok(NULL, " ")) snprintf(words[k++], 64, "%s", w);
        const char *prev = NULL;
        char tags[64][16];
        for (int j = 0; j < k; j++) {
            const char *t = tag_of(words[j]);
            if (t) snprintf(tags[j], 16, "%s-%s", prev && !strcmp(prev, t) ? "I" : "B", t);
            else snprintf(tags[j], 16, "O");
            prev = t;
        }
        if (conll) {
            for (int j = 0; j < k; j++) fprintf(f, "%s\t%s\n", words[j], tags[j]);
            fprintf(f, "\n");
            continue;
        }
        fprintf(f, "{\"id\": \"%d\", \"tokens\": [", i);
        for (int j = 0; j < k; j++) fprintf(f, "%s\"%s\"", j ? ", " : "", words[j]); /* sst2's words need no escapes */
        fprintf(f, "], \"ner_tags\": [");
        for (int j = 0; j < k; j++) fprintf(f, "%s\"%s\"", j ? ", " : "", tags[j]);
        fprintf(f, "]}\n");
    }
    fclose(f);
    return n < max ? n : max;
}

static void write_config(const char *name, const char *model, const char *fixture, int epochs) {
    char file[64];
    snprintf(file, sizeof file, "%s.yml", name);
    FILE *f = fopen(tp_path(tmp, file), "w");
    UT_ASSERT(f);
    fprintf(f, "experiment_name: %s\noutput_dir: %s/runs\nseed: 3\n"
               "model:\n  name: %s\n  pretrained: tests/parity/fixtures/%s\n  ignore_mismatched_sizes: true\n"
               "data:\n  name: tagged_text\n  train_path: %s/train.jsonl\n  dev_path: %s/dev.jsonl\n"
               "  test_path: %s/test.conll\n  max_len: 64\n"
               "train:\n  epochs: %d\n  batch_size: 16\n  log_interval: 1\n  eval_strategy: epoch\n"
               "  save_strategy: epoch\n  best_metric: dev/f1\n"
               "optim:\n  name: adamw\n  lr: 5.0e-3\n  schedule: linear\n",
            name, tmp, model, fixture, tmp, tmp, tmp, epochs);
    fclose(f);
}

/* bert learns the tags (dev f1 1 by the last epoch), keeps the best
 * checkpoint by dev/f1, tests with a tag per word and exports */
static void test_bert_train_test_export(void) {
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ner.yml"), "ner.out", NULL, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "ner.out"));
    CHECK(s && strstr(s, "train.jsonl: words 'tokens', tags 'ner_tags'") && strstr(s, "best dev/f1 1.0000"), "%s", s);
    free(s);
    const char *metrics = tp_path(tmp, "runs/ner/metrics.jsonl");
    double f1 = hfe_dev_metric(metrics, 65, "f1"), acc = hfe_dev_metric(metrics, 65, "accuracy"),
           p = hfe_dev_metric(metrics, 65, "precision"), r = hfe_dev_metric(metrics, 65, "recall");
    CHECK(f1 == 1 && acc == 1 && p == 1 && r == 1, "dev at the end: f1 %g accuracy %g precision %g recall %g", f1, acc,
          p, r);
    /* before the model finds any entity: precision, recall and f1 0 (seqeval's), token accuracy the O share */
    double f0 = hfe_dev_metric(metrics, 13, "f1"), a0 = hfe_dev_metric(metrics, 13, "accuracy");
    CHECK(f0 == 0 && a0 > 0.95 && a0 < 1, "dev after epoch 1: f1 %g accuracy %g", f0, a0);
    s = tp_slurp(tp_path(tmp, "runs/ner/labels.txt"));
    CHECK(s && !strcmp(s, "B-PER\nB-WORK\nO\n"), "labels.txt: %s", s);
    free(s);
    CHECK(hfe_utrain(tmp, "test", tp_path(tmp, "runs/ner"), "ner_test.out", NULL, NULL) == 0, "test");
    s = tp_slurp(tp_path(tmp, "ner_test.out"));
    CHECK(s && strstr(s, "test.conll: CoNLL") && strstr(s, "precision 1.0000  recall 1.0000  f1 1.0000  accuracy 1.0000"
                                                           "  -> test_predictions.tsv"), "%s", s);
    free(s);
    /* each entity type's scores too (run_ner's return_entity_level_metrics) */
    const char *types[] = {"train.entity_metrics=true", NULL};
    CHECK(hfe_utrain(tmp, "test", tp_path(tmp, "runs/ner"), "ner_types.out", types, NULL) == 0, "test by type");
    s = tp_slurp(tp_path(tmp, "ner_types.out"));
    CHECK(s && strstr(s, "accuracy 1.0000  PER_precision ") &&
              strstr(s, "WORK_precision 1.0000  WORK_recall 1.0000  WORK_f1 1.0000  -> test_predictions.tsv"), "%s", s);
    free(s);
    s = tp_slurp(tp_path(tmp, "runs/ner/test_results.json"));
    CHECK(s && strstr(s, "\"WORK_f1\": 1"), "%s", s);
    free(s);
    s = tp_slurp(tp_path(tmp, "runs/ner/test_predictions.tsv"));
    CHECK(s && !strncmp(s, "index\twords\tprediction\n0\t", 24) && strstr(s, "\tO O B-WORK O O O O\n"), "%s", s);
    free(s);
    CHECK(tp_count_lines(tp_path(tmp, "runs/ner/dev_predictions.tsv")) == 61, "dev predictions: header and 60 rows");
    const char *argv[] = {"export", tp_path(tmp, "runs/ner"), "--format", "hf", tp_path(tmp, "ner_hf"), NULL};
    CHECK(tp_run(argv, tp_path(tmp, "export.out")) == 0, "export");
    s = tp_slurp(tp_path(tmp, "ner_hf/config.json"));
    CHECK(s && strstr(s, "\"BertForTokenClassification\"") && strstr(s, "\"1\":\t\"B-WORK\""), "%s", s);
    free(s);
}

/* roberta (its pieces of a word after a space) learns them too */
static void test_roberta(void) {
    write_config("ner_rob", "roberta", "hf_roberta_tok_tiny", 10);
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ner_rob.yml"), "rob.out", NULL, NULL) == 0, "train");
    double f1 = hfe_dev_metric(tp_path(tmp, "runs/ner_rob/metrics.jsonl"), 130, "f1");
    CHECK(f1 > 0.9, "roberta dev f1 %g", f1);
}

/* a dev set carved from the train file (data.dev_fraction) and the first
 * examples (max_train_samples): the dev predictions of the test at the end
 * keep the words */
static void test_carved_dev(void) {
    const char *sets[] = {"experiment_name=ner_carved", "data.dev_path=", "data.dev_fraction=0.1", "train.epochs=1",
                          "data.max_train_samples=100", "train.test_at_end=true", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ner.yml"), "carved.out", sets, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "carved.out"));
    CHECK(s && strstr(s, "Num examples = 100") && strstr(s, "dev (20 examples):"), "%s", s);
    free(s);
    s = tp_slurp(tp_path(tmp, "runs/ner_carved/dev_predictions.tsv"));
    CHECK(s && strstr(s, "index\twords\tprediction\n0\tthe camera work was dreadful .\tO O O O O O\n") && tp_count_lines(tp_path(tmp, "runs/ner_carved/dev_predictions.tsv")) == 21,
          "%s", s);
    free(s);
}

/* run_ner's argument file: tagged text by its keys, seqeval's scores */
static void test_run_ner_arguments(void) {
    FILE *f = fopen(tp_path(tmp, "ner_args.json"), "w");
    fprintf(f, "{\"model_name_or_path\": \"tests/parity/fixtures/hf_bert_tok_tiny\", \"task_name\": \"ner\",\n"
               " \"train_file\": \"%s/train.jsonl\", \"validation_file\": \"%s/dev.jsonl\",\n"
               " \"ignore_mismatched_sizes\": true, \"label_all_tokens\": false, \"return_entity_level_metrics\": false,\n"
               " \"do_train\": true, \"do_eval\": true, \"max_seq_length\": 64, \"per_device_train_batch_size\": 16,\n"
               " \"learning_rate\": 5e-3, \"num_train_epochs\": 2, \"eval_strategy\": \"epoch\",\n"
               " \"metric_for_best_model\": \"f1\", \"output_dir\": \"%s/ner_args_out\"}\n", tmp, tmp, tmp);
    fclose(f);
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ner_args.json"), "args.out", NULL, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "args.out"));
    CHECK(s && strstr(s, "train_file: words with a tag each (data.name tagged_text)") &&
              strstr(s, "'classifier.weight' (5, 32) in the checkpoint, (3, 32) in the model"), "%s", s);
    free(s);
    double f1 = hfe_dev_metric(tp_path(tmp, "ner_args_out/default/metrics.jsonl"), 26, "f1");
    CHECK(!isnan(f1), "dev f1 of run_ner's arguments: %g", f1);
}

/* two ranks of 8 train as one process of 16: the loss and gradient are the
 * means over the labeled tokens of all 16 sentences; two pipeline stages
 * as the whole model */
static void test_two_ranks(void) {
    write_config("ner_nodrop", "bert", "hf_bert_tok_tiny", 1);
    FILE *f = fopen(tp_path(tmp, "ner_nodrop.yml"), "a");
    fprintf(f, "dist:\n  strategy: ddp\n");
    fclose(f);
    /* no dropout: the masks of a sentence are drawn by its position in a rank's batch */
    const char *nodrop[] = {"model.hidden_dropout_prob=0", "model.attention_probs_dropout_prob=0", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ner_nodrop.yml"), "one.out", nodrop, NULL) == 0, "one process");
    const char *two[] = {"model.hidden_dropout_prob=0", "model.attention_probs_dropout_prob=0",
                         "experiment_name=ner_two", "train.batch_size=8", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ner_nodrop.yml"), "two.out", two, "2") == 0, "two ranks");
    hfe_check_same_losses(tp_path(tmp, "runs/ner_nodrop/metrics.jsonl"), tp_path(tmp, "runs/ner_two/metrics.jsonl"), 1,
                          13, 3, "2 ranks");
    double a = hfe_dev_metric(tp_path(tmp, "runs/ner_nodrop/metrics.jsonl"), 13, "loss"),
           b = hfe_dev_metric(tp_path(tmp, "runs/ner_two/metrics.jsonl"), 13, "loss");
    CHECK(fabs(a - b) <= 1e-5 * a, "dev loss %g vs %g", a, b);
    /* two pipeline stages (a layer each, the head on the second) train as the whole model */
    const char *staged[] = {"model.hidden_dropout_prob=0", "model.attention_probs_dropout_prob=0",
                            "experiment_name=ner_pp2", "dist.pipeline_parallel=2", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ner_nodrop.yml"), "pp2.out", staged, "2") == 0, "two stages");
    hfe_check_same_losses(tp_path(tmp, "runs/ner_nodrop/metrics.jsonl"), tp_path(tmp, "runs/ner_pp2/metrics.jsonl"), 1,
                          13, 3, "2 stages");
    b = hfe_dev_metric(tp_path(tmp, "runs/ner_pp2/metrics.jsonl"), 13, "loss");
    CHECK(fabs(a - b) <= 1e-5 * a, "dev loss %g vs %g (2 stages)", a, b);
}

/* tensor parallelism over 2 ranks (each rank half the heads and features,
 * the token head whole) trains as one process: a BERT from scratch with
 * sizes that split (the fixtures' intermediate size 37 does not) */
static void test_tensor_parallel(void) {
    FILE *f = fopen(tp_path(tmp, "ner_tp.yml"), "w");
    UT_ASSERT(f);
    fprintf(f, "experiment_name: ner_tp1\noutput_dir: %s/runs\nseed: 3\n"
               "model:\n  name: bert\n  vocab_size: 100\n  hidden_size: 32\n  num_hidden_layers: 2\n"
               "  num_attention_heads: 2\n  intermediate_size: 64\n  max_position_embeddings: 64\n"
               "  hidden_dropout_prob: 0\n  attention_probs_dropout_prob: 0\n"
               "data:\n  name: tagged_text\n  tokenizer: tests/parity/fixtures/hf_bert_tiny\n"
               "  train_path: %s/train.jsonl\n  dev_path: %s/dev.jsonl\n  max_len: 64\n"
               "train:\n  epochs: 1\n  batch_size: 16\n  log_interval: 1\n  eval_strategy: epoch\n"
               "optim:\n  name: adamw\n  lr: 5.0e-3\n", tmp, tmp, tmp);
    fclose(f);
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ner_tp.yml"), "tp1.out", NULL, NULL) == 0, "one process");
    const char *tp[] = {"experiment_name=ner_tp2", "dist.tensor_parallel=2", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ner_tp.yml"), "tp2.out", tp, "2") == 0, "tensor parallel 2");
    hfe_check_same_losses(tp_path(tmp, "runs/ner_tp1/metrics.jsonl"), tp_path(tmp, "runs/ner_tp2/metrics.jsonl"), 1, 13,
                          3, "tensor parallel");
    double a = hfe_dev_metric(tp_path(tmp, "runs/ner_tp1/metrics.jsonl"), 13, "loss"),
           b = hfe_dev_metric(tp_path(tmp, "runs/ner_tp2/metrics.jsonl"), 13, "loss");
    CHECK(fabs(a - b) <= 1e-5 * a, "dev loss %g vs %g (tensor parallel)", a, b);
}

/* the simulated device (the device seam: logits read back through the
 * backend for the scores) trains as the CPU does */
static void test_sim_device(void) {
    write_config("ner_cpu", "bert", "hf_bert_tok_tiny", 1);
    const char *cpu[] = {"model.hidden_dropout_prob=0", "model.attention_probs_dropout_prob=0", NULL};
    const char *sim[] = {"model.hidden_dropout_prob=0", "model.attention_probs_dropout_prob=0", "device=sim",
                         "experiment_name=ner_sim", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ner_cpu.yml"), "cpu.out", cpu, NULL) == 0, "cpu");
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "ner_cpu.yml"), "sim.out", sim, NULL) == 0, "sim");
    hfe_check_same_losses(tp_path(tmp, "runs/ner_cpu/metrics.jsonl"), tp_path(tmp, "runs/ner_sim/metrics.jsonl"), 1, 13,
                          4, "sim");
    double a = hfe_dev_metric(tp_path(tmp, "runs/ner_cpu/metrics.jsonl"), 13, "loss"),
           b = hfe_dev_metric(tp_path(tmp, "runs/ner_sim/metrics.jsonl"), 13, "loss"),
           fa = hfe_dev_metric(tp_path(tmp, "runs/ner_cpu/metrics.jsonl"), 13, "accuracy"),
           fb = hfe_dev_metric(tp_path(tmp, "runs/ner_sim/metrics.jsonl"), 13, "accuracy");
    CHECK(fabs(a - b) <= 1e-5 * a && fa == fb, "dev loss %g vs %g, accuracy %g vs %g", a, b, fa, fb);
}

/* utrain plan measures a tagged batch (labels trimmed with the planes) */
static void test_plan(void) {
    const char *argv[] = {"plan", tp_path(tmp, "ner.yml"), NULL};
    CHECK(tp_run(argv, tp_path(tmp, "plan.out")) == 0, "plan");
    char *s = tp_slurp(tp_path(tmp, "plan.out"));
    CHECK(s && strstr(s, "GFLOP per micro-batch") && strstr(s, "\nzero3 "), "%s", s);
    free(s);
}

static void test_refused(void) {
    static const char *const cases[][2] = {
        {"model.name=bow", "data.name tagged_text: words with a tag each are classified token by token by bert and "
                           "roberta (model.task: token_classification), not model.name bow"},
        {"model.task=sequence_classification", "model.task: sequence_classification, but data.name tagged_text trains "
                                               "a token classifier"},
        {"train.metrics=f1_macro", "train.metrics: f1_macro is not a token classifier's score"},
        {"model.num_labels=4", "model.num_labels 4: the train file"},
        {"data.text_pair_column=x", "data.text_pair_column: read by data.name tsv_text only (data.name is tagged_text)"},
    };
    hfe_check_refused(tmp, "ner.yml", cases, (int)(sizeof cases / sizeof cases[0]));
    /* train files whose tags cannot be the classes */
    FILE *f = fopen(tp_path(tmp, "untagged.jsonl"), "w");
    fprintf(f, "{\"tokens\": [\"a\", \"film\"]}\n");
    fclose(f);
    f = fopen(tp_path(tmp, "one_tag.conll"), "w");
    fprintf(f, "a O\nfilm O\n\nthe O\n");
    fclose(f);
    char untagged[600], one[600];
    snprintf(untagged, sizeof untagged, "data.train_path=%s", tp_path(tmp, "untagged.jsonl"));
    snprintf(one, sizeof one, "data.train_path=%s", tp_path(tmp, "one_tag.conll"));
    const char *const files[][2] = {
        {untagged, "untagged.jsonl: no tags: the train file's tags are the classes"},
        {one, "one_tag.conll: every word has the tag O: a token classifier needs at least two"},
        {"data.train_path=", "data.train_path: required when data.name is tagged_text"},
    };
    hfe_check_refused(tmp, "ner.yml", files, 3);
    static const char *const tsv[][2] = {
        {"data.label_all_tokens=true", "data.label_all_tokens: read by data.name tagged_text only"},
        {"model.task=token_classification", "model.task: token_classification tags each word of tagged text: set "
                                            "data.name: tagged_text"},
    };
    hfe_write_config(tmp, "sst", "bert", "hf_bert_tiny", "", 32, 1);
    hfe_check_refused(tmp, "sst.yml", tsv, 2);
    static const char *const types[][2] = {
        {"train.entity_metrics=true", "train.entity_metrics: scores entity types of tagged text (data.name "
                                      "tagged_text), and the data"},
    };
    hfe_check_refused(tmp, "sst.yml", types, 1);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "ut-tagged")) return 1;
    CHECK(write_split("train", tp_path(tmp, "train.jsonl"), false, 200) == 200, "train sentences");
    CHECK(write_split("dev", tp_path(tmp, "dev.jsonl"), false, 100) == 60, "dev sentences");
    CHECK(write_split("test", tp_path(tmp, "test.conll"), true, 100) == 60, "test sentences");
    write_config("ner", "bert", "hf_bert_tiny", 5);
    RUN(test_bert_train_test_export);
    RUN(test_roberta);
    RUN(test_carved_dev);
    RUN(test_run_ner_arguments);
    RUN(test_sim_device);
    RUN(test_plan);
    RUN(test_refused);
    /* under mpirun last: its environment turns LeakSanitizer off */
    tp_mpi_env(true);
    RUN(test_two_ranks);
    RUN(test_tensor_parallel);
    return tp_finish(TEST_SUMMARY(), tmp);
}
