/* Sequence-to-sequence fine-tuning through the trainer (data.name
 * seq2seq_text, FlagAI's parallel source/target files): the tiny
 * BartForConditionalGeneration of tests/parity/fixtures/hf_bart_gen_tiny
 * learns to copy a sentence's first four words; its loss is the mean over
 * target tokens, so ddp and zero3 on 2 ranks (and gradient accumulation)
 * reach the weights of one process, as dp's 2 worker threads do and BART split over 2 ranks (tensor
 * parallel, its vocabulary-parallel head and loss) does, with the same global batch even though
 * the ranks' batches hold different numbers of target tokens; evaluation by
 * generation scores the dev set (bleu, rougeL, exact_match) and picks the
 * best checkpoint; test mode writes each example's generation; BART in
 * pipeline stages agrees with one process too, and generates as it; a T5 from
 * scratch with T5's Unigram tokenizer agrees across ranks and pipeline
 * stages too; bad pairs
 * are refused naming the files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "test.h"
#include "split_runs.h"

/* The model's head and loss are one op in training (forward_loss,
 * ut_linear_cross_entropy); with UT_LINEAR_CE=0 they are two, and the run
 * `name` reaches `ref`'s checkpoint at step, bit for bit */
static void two_ops_same(const char *name, const char *ref, int step) {
    setenv("UT_LINEAR_CE", "0", 1);
    int rc = split_train(name, 1, "");
    unsetenv("UT_LINEAR_CE");
    CHECK(rc == 0, "%s: the head and loss as two ops", name);
    CHECK(tp_same_file(tp_ckpt_file(split_dir, ref, step), tp_ckpt_file(split_dir, name, step)),
          "%s: the checkpoint at step %d differs from %s's", name, step, ref);
}

/* ddp and zero3 on 2 ranks, and 2 micro-batches of 4, against batches of 8 */
static void test_ranks_agree(void) {
    CHECK(split_train("whole", 1, "") == 0, "one process");
    two_ops_same("two", "whole", 16);
    CHECK(split_train("ddp2", 2, "train.batch_size=4") == 0, "ddp on 2 ranks");
    CHECK(split_train("zero3", 2, "train.batch_size=4 dist.strategy=zero3") == 0, "zero3 on 2 ranks");
    CHECK(split_train("accum", 1, "train.batch_size=4 train.gradient_accumulation_steps=2") == 0,
          "2 micro-batches of 4");
    CHECK(split_train("tp2", 2, "dist.tensor_parallel=2 generate.eval=true generate.max_new_tokens=4") == 0,
          "split over 2 ranks (tensor parallel), generating on its parts");
    CHECK(split_train("wholegen", 1, "generate.eval=true generate.max_new_tokens=4") == 0,
          "one process, generating");
    split_agrees("tp2", "whole", 16);
    split_same_dev_loss("tp2", "whole", 16);
    /* the same dev generations: the same scores, to the printed digit */
    char *tp = split_output("tp2"), *wg = split_output("wholegen");
    const char *a = tp ? strstr(tp, "eval  step 16  dev:") : NULL, *b = wg ? strstr(wg, "eval  step 16  dev:") : NULL;
    CHECK(a && b && strstr(a, "bleu") && !strncmp(strstr(a, "bleu"), strstr(b, "bleu"), strcspn(strstr(b, "bleu"), "\n")),
          "the split run's dev generations score as one process's:\n%s\n%s", a ? a : "", b ? b : "");
    free(tp);
    free(wg);
    split_agrees("ddp2", "whole", 16);
    split_agrees("zero3", "whole", 16);
    split_agrees("accum", "whole", 16);
    split_same_dev_loss("ddp2", "whole", 16);
    /* dp: 2 worker threads in one process, each share's loss weighed by
     * its target tokens; and with 2 micro-batches a window */
    CHECK(split_train("dp2", 2, "dist.strategy=dp train.batch_size=4") == 0, "dp with 2 workers");
    char *said = split_output("dp2");
    CHECK(said && strstr(said, "DataParallel workers = 2"), "dp2 names its 2 workers: %s", said ? said : "");
    free(said);
    split_agrees("dp2", "whole", 16);
    CHECK(split_train("dp2accum", 2, "dist.strategy=dp train.batch_size=2 train.gradient_accumulation_steps=2") == 0,
          "dp with 2 workers, 2 micro-batches");
    split_agrees("dp2accum", "whole", 16);
}

/* BART split into pipeline stages (the encoder's layers, then the
 * decoder's; the last stage with its own copy of the tied embedding for
 * the head): 2 stages, and 2 stages x tp 2, reach one process's weights
 * with the window's loss weighed by target tokens as there; with dropout,
 * 3 stages (GPipe) draw the whole model's masks. Test mode on 2 processes
 * of a staged run tests the whole model in each (it generates) and writes
 * what one process writes; evaluation by generation during a staged run
 * (every rank a copy of the whole model) scores as one process's. */
static void test_pipeline_stages(void) {
    CHECK(split_train("pp2", 2, "dist.pipeline_parallel=2") == 0, "2 stages");
    CHECK(split_train("pp2tp2", 4, "dist.pipeline_parallel=2 dist.tensor_parallel=2") == 0, "2 stages x tp 2");
    split_agrees("pp2", "whole", 16);
    split_agrees("pp2tp2", "whole", 16);
    split_same_dev_loss("pp2", "whole", 16);
    const char *drop = "model.dropout=0.1 model.attention_dropout=0.1 model.activation_dropout=0.1";
    char sets[300];
    CHECK(split_train("wholedrop", 1, drop) == 0, "one process with dropout");
    snprintf(sets, sizeof sets, "%s dist.pipeline_parallel=3 dist.pipeline_schedule=gpipe", drop);
    CHECK(split_train("pp3drop", 3, sets) == 0, "3 stages with dropout");
    double l = tp_loss_diff(tp_run_file(split_dir, "wholedrop", "metrics.jsonl"),
                            tp_run_file(split_dir, "pp3drop", "metrics.jsonl"), 16);
    CHECK(l >= 0 && l < 1e-5, "3 stages with dropout: losses within %.2g of one process's (1e-5)", l);
    /* test mode: 2 processes, each with the whole model, against one */
    char run[600], out[700];
    snprintf(run, sizeof run, "%s/runs/pp2", split_dir);
    snprintf(out, sizeof out, "%s/pp2_test2.out", split_dir);
    CHECK(tp_run((const char *[]){"test", run, "--nproc", "2", "--set", "generate.max_new_tokens=6", NULL}, out) == 0,
          "utrain test --nproc 2 of the staged run: %s", out);
    char *said = tp_slurp(out), *two = tp_slurp(tp_run_file(split_dir, "pp2", "test_generations.tsv"));
    CHECK(said && strstr(said, "on the whole model in each process (test mode generates"), "%s", said ? said : "");
    snprintf(out, sizeof out, "%s/pp2_test1.out", split_dir);
    CHECK(tp_run((const char *[]){"test", run, "--set", "generate.max_new_tokens=6", NULL}, out) == 0,
          "utrain test of the staged run in one process: %s", out);
    char *one = tp_slurp(tp_run_file(split_dir, "pp2", "test_generations.tsv"));
    CHECK(one && two && tp_count_lines(tp_run_file(split_dir, "pp2", "test_generations.tsv")) == 17 && !strcmp(one, two),
          "test_generations.tsv: 2 processes' and one's differ");
    free(said), free(one), free(two);
    /* evaluation by generation during staged runs: each rank's copy of the
     * whole model generates its share of the dev set, which scores as one
     * process's generations; the copy changes nothing of training (the
     * checkpoint is the staged run's without it, to the bit) */
    CHECK(split_train("ppgen", 2, "dist.pipeline_parallel=2 generate.eval=true generate.max_new_tokens=4") == 0,
          "2 stages, generating");
    CHECK(split_train("ppgentp2", 4, "dist.pipeline_parallel=2 dist.tensor_parallel=2 generate.eval=true "
                                     "generate.max_new_tokens=4") == 0, "2 stages x tp 2, generating");
    CHECK(tp_same_file(tp_ckpt_file(split_dir, "pp2", 16), tp_ckpt_file(split_dir, "ppgen", 16)),
          "the staged run's checkpoint changed by generating");
    char *wg = split_output("wholegen");
    const char *b = wg ? strstr(wg, "eval  step 16  dev:") : NULL;
    const char *names[2] = {"ppgen", "ppgentp2"};
    for (int i = 0; i < 2; i++) {
        char *pg = split_output(names[i]);
        const char *a = pg ? strstr(pg, "eval  step 16  dev:") : NULL;
        CHECK(a && b && strstr(a, "bleu") && strstr(b, "bleu") &&
                  !strncmp(strstr(a, "bleu"), strstr(b, "bleu"), strcspn(strstr(b, "bleu"), "\n")),
              "%s's dev generations score as one process's:\n%s\n%s", names[i], a ? a : "", b ? b : "");
        free(pg);
    }
    free(wg);
}

/* the first word of each non-header row's column col (0-based) of a TSV into out */
static int first_words(const char *tsv, int col, char out[][64], int most) {
    char *s = tp_slurp(tsv);
    int n = 0;
    char *save = NULL;
    for (char *line = s ? strtok_r(s, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        if (line == s) continue; /* the header */
        char *f = line;
        for (int c = 0; c < col && f; c++) f = strchr(f, '\t') ? strchr(f, '\t') + 1 : NULL;
        if (n == most) break;
        out[n][0] = 0;
        if (f) sscanf(f, "%63s", out[n]);
        n++;
    }
    free(s);
    return n;
}

/* trained longer with Adam, it copies: generation evaluated on dev picks the
 * best checkpoint by bleu, and test mode writes the generations */
static void test_learns_and_generates(void) {
    CHECK(split_train("learn", 1,
                      "train.max_steps=0 train.epochs=60 optim.name=adamw optim.lr=1e-2 optim.weight_decay=0 "
                      "train.eval_strategy=steps train.eval_interval=160 train.best_metric=dev/bleu "
                      "train.greater_is_better=true generate.eval=true generate.max_new_tokens=10") == 0,
          "60 epochs with generation evaluated");
    char *s = split_output("learn");
    CHECK(s && strstr(s, "bleu") && strstr(s, "rougeL") && strstr(s, "exact_match"),
          "evaluation by generation is reported:\n%s", s ? s : "");
    free(s);
    char cfg[700], out[700];
    snprintf(cfg, sizeof cfg, "%s/runs/learn", split_dir);
    snprintf(out, sizeof out, "%s/learn_test.out", split_dir);
    CHECK(tp_run((const char *[]){"test", cfg, NULL}, out) == 0, "utrain test");
    const char *gens = tp_run_file(split_dir, "learn", "test_generations.tsv");
    CHECK(tp_count_lines(gens) == 17, "a header and 16 generations: %d lines", tp_count_lines(gens));
    char src[16][64], hyp[16][64];
    int n = first_words(gens, 0, src, 16), m = first_words(gens, 2, hyp, 16), same = 0;
    for (int i = 0; i < n && i < m; i++) same += !strcmp(src[i], hyp[i]);
    CHECK(n == 16 && m == 16 && same >= 10, "%d of %d generations start with their source's first word", same, n);
    char *r = tp_slurp(tp_run_file(split_dir, "learn", "test_results.json"));
    double bleu = r && strstr(r, "\"bleu\":") ? atof(strstr(r, "\"bleu\":") + 7) : -1;
    CHECK(bleu > 8, "test bleu %g", bleu);
    free(r);
}

/* Run name on nproc ranks with sets: it trains as run ref did (split_agrees, 16 steps). */
static void trains_as(const char *name, int nproc, const char *sets, const char *ref) {
    CHECK(split_train(name, nproc, sets) == 0, "%s: %s on %d ranks", name, sets, nproc);
    split_agrees(name, ref, 16);
}

/* T5 from scratch (gated GELU, relative positions) with T5's Unigram
 * tokenizer and a source prefix: ddp on 2 ranks, the model split over 2
 * ranks (tensor parallel, with and without dropout, with NEFTune's noise)
 * and in pipeline stages reach one process's weights, activation
 * checkpointing changes nothing, and test mode generates */
static void test_t5(void) {
    char saved[sizeof split_body];
    memcpy(saved, split_body, sizeof saved);
    snprintf(split_body, sizeof split_body,
             "model: {name: t5, vocab_size: 2004, d_model: 32, d_kv: 8, d_ff: 64, num_layers: 2, num_heads: 4,\n"
             "        feed_forward_proj: gated-gelu, dropout_rate: 0}\n"
             "data: {name: seq2seq_text, tokenizer: tests/parity/fixtures/t5_unigram, source_prefix: \"first words: \",\n"
             "       train_path: %s/train_inputs.txt, train_target_path: %s/train_targets.txt,\n"
             "       test_path: %s/dev_inputs.txt, test_target_path: %s/dev_targets.txt,\n"
             "       max_source_len: 48, max_target_len: 16}\n"
             "train: {max_steps: 16, batch_size: 8, log_interval: 1, eval_strategy: no,\n"
             "        save_strategy: steps, save_interval: 16, progress: lines}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.01}\n"
             "generate: {max_new_tokens: 8, num_beams: 2}\n"
             "dist: {timeout_s: 60}\n",
             split_dir, split_dir, split_dir, split_dir);
    CHECK(split_train("t5whole", 1, "") == 0, "T5 in one process");
    two_ops_same("t5two", "t5whole", 16);
    CHECK(split_train("t5ddp2", 2, "train.batch_size=4") == 0, "T5 with ddp on 2 ranks");
    split_agrees("t5ddp2", "t5whole", 16);
    /* split over 2 ranks: 2 of the 4 heads, half the features and the vocabulary each */
    CHECK(split_train("t5tp2", 2, "dist.tensor_parallel=2") == 0, "T5 split over 2 ranks");
    split_agrees("t5tp2", "t5whole", 16);
    /* with dropout: the parts draw the whole model's masks */
    CHECK(split_train("t5dwhole", 1, "model.dropout_rate=0.1") == 0, "T5 with dropout in one process");
    CHECK(split_train("t5dtp2", 2, "dist.tensor_parallel=2 model.dropout_rate=0.1") == 0,
          "T5 with dropout split over 2 ranks");
    split_agrees("t5dtp2", "t5dwhole", 16);
    /* each block's activations recomputed in backward (its dropout masks drawn again alike) */
    CHECK(split_train("t5dckpt", 1, "model.dropout_rate=0.1 train.checkpoint_activations=true") == 0,
          "T5 with dropout and activation checkpointing");
    split_agrees("t5dckpt", "t5dwhole", 16);
    /* NEFTune's noise on both stacks' embeddings: the parts add the whole
     * model's noise (the loss moves off the plain run's from the first step) */
    CHECK(split_train("t5nwhole", 1, "train.neftune_alpha=5") == 0, "T5 with NEFTune in one process");
    CHECK(split_train("t5ntp2", 2, "dist.tensor_parallel=2 train.neftune_alpha=5") == 0,
          "T5 with NEFTune split over 2 ranks");
    split_agrees("t5ntp2", "t5nwhole", 16);
    /* in pipeline stages: 1, 2 and 1 blocks (the middle stage runs the
     * encoder's last block and the decoder's first, so it holds both
     * relative-position tables, each also on another stage; the last holds
     * its copy of the tied embedding), with and without dropout, and x zero2
     * over 2 data-parallel ranks (the copies summed before the gradients are
     * sharded), and x tp 2 (each rank's heads' columns of the tables
     * summed over its stages); T5 v1.1's untied head in 2 stages */
    /* (clipped: the norm counts each table and the embedding once, whichever stages hold copies) */
    CHECK(split_train("t5cwhole", 1, "train.grad_clip=0.5") == 0, "T5 clipped in one process");
    trains_as("t5pp3", 3, "train.grad_clip=0.5 dist.pipeline_parallel=3 dist.pipeline_blocks=1,2,1", "t5cwhole");
    trains_as("t5dpp3", 3, "dist.pipeline_parallel=3 dist.pipeline_blocks=1,2,1 model.dropout_rate=0.1 "
                           "dist.pipeline_schedule=gpipe", "t5dwhole");
    trains_as("t5pp3tp2", 6, "train.grad_clip=0.5 dist.pipeline_parallel=3 dist.pipeline_blocks=1,2,1 "
                             "dist.tensor_parallel=2", "t5cwhole");
    trains_as("t5pp3z2", 6, "dist.pipeline_parallel=3 dist.pipeline_blocks=1,2,1 dist.strategy=zero2 "
                            "train.batch_size=4", "t5whole");
    /* Adafactor, T5's optimizer, in the 3 stages: each stage's factored state (the tables' copies updated
     * alike), and the checkpoint the one process writes */
    const char *af = "optim.name=adafactor optim.lr=0.01 optim.adafactor_beta1=0.9 optim.adafactor_scale_parameter=false";
    char sets[512];
    CHECK(split_train("t5afwhole", 1, af) == 0, "T5 with Adafactor in one process");
    snprintf(sets, sizeof sets, "%s dist.pipeline_parallel=3 dist.pipeline_blocks=1,2,1", af);
    trains_as("t5afpp3", 3, sets, "t5afwhole");
    /* stopped at step 8 and resumed in stages: each stage reads its parameters' factored state back */
    snprintf(sets, sizeof sets, "%s dist.pipeline_parallel=3 dist.pipeline_blocks=1,2,1 train.max_steps=8 "
                                "train.save_interval=8", af);
    CHECK(split_train("t5afpp3r", 3, sets) == 0, "T5 with Adafactor in 3 stages, 8 steps");
    snprintf(sets, sizeof sets, "%s dist.pipeline_parallel=3 dist.pipeline_blocks=1,2,1 continue_training=true", af);
    trains_as("t5afpp3r", 3, sets, "t5afwhole");
    for (int rank = 0; rank < 3; rank++) {
        char leaf[64];
        snprintf(leaf, sizeof leaf, "logger_logs/training_%d.log", rank);
        char *log = tp_slurp(tp_run_file(split_dir, "t5afpp3r", leaf));
        CHECK(log && strstr(log, "Resuming from") && strstr(log, "(step 8,"), "rank %d resumed at step 8", rank);
        free(log);
    }
    CHECK(split_train("t5uwhole", 1, "model.tie_word_embeddings=false") == 0, "T5 v1.1's head in one process");
    trains_as("t5upp2", 2, "model.tie_word_embeddings=false dist.pipeline_parallel=2", "t5uwhole");
    char plain1[64] = "", noisy1[64] = "";
    CHECK(tp_loss_at(tp_run_file(split_dir, "t5whole", "metrics.jsonl"), "train", 1, plain1, sizeof plain1) &&
              tp_loss_at(tp_run_file(split_dir, "t5nwhole", "metrics.jsonl"), "train", 1, noisy1, sizeof noisy1) &&
              strcmp(plain1, noisy1),
          "T5's first loss: plain %s, with NEFTune %s", plain1, noisy1);
    char run[700], out[700];
    snprintf(run, sizeof run, "%s/runs/t5whole", split_dir);
    snprintf(out, sizeof out, "%s/t5_test.out", split_dir);
    CHECK(tp_run((const char *[]){"test", run, NULL}, out) == 0, "utrain test on the T5 run");
    CHECK(tp_count_lines(tp_run_file(split_dir, "t5whole", "test_generations.tsv")) == 17,
          "T5's test generations: a header and 16 rows");
    /* the split run's test mode on its 2 parts generates what one process
     * holding the whole model generates */
    snprintf(run, sizeof run, "%s/runs/t5tp2", split_dir);
    CHECK(tp_run((const char *[]){"test", run, "--nproc", "2", NULL}, out) == 0, "utrain test --nproc 2 on the split T5");
    char *said = tp_slurp(out), *parts = tp_slurp(tp_run_file(split_dir, "t5tp2", "test_generations.tsv"));
    CHECK(said && strstr(said, "on the model's parts"), "%s", said ? said : "");
    CHECK(tp_run((const char *[]){"test", run, NULL}, out) == 0, "utrain test on the split T5 in one process");
    char *whole = tp_slurp(tp_run_file(split_dir, "t5tp2", "test_generations.tsv"));
    CHECK(parts && whole && tp_count_lines(tp_run_file(split_dir, "t5tp2", "test_generations.tsv")) == 17 &&
              !strcmp(parts, whole), "the parts' generations:\n%s\nthe whole model's:\n%s", parts ? parts : "",
          whole ? whole : "");
    free(said), free(parts), free(whole);
    /* the staged run's test mode: the whole model generates in one process, as the whole run's does */
    snprintf(run, sizeof run, "%s/runs/t5pp3", split_dir);
    CHECK(tp_run((const char *[]){"test", run, NULL}, out) == 0, "utrain test on the staged T5");
    char *staged = tp_slurp(tp_run_file(split_dir, "t5pp3", "test_generations.tsv"));
    CHECK(staged && tp_count_lines(tp_run_file(split_dir, "t5pp3", "test_generations.tsv")) == 17,
          "the staged T5's test generations: a header and 16 rows");
    free(staged);
    memcpy(split_body, saved, sizeof saved);
}

/* FlagAI's split: one pair of files, its last 20% the dev set
 * (data.dev_fraction): 13 of 64 pairs evaluated, by loss and by generation,
 * in training and in test mode */
static void test_dev_fraction(void) {
    CHECK(split_train("frac", 1, "data.dev_path= data.dev_target_path= data.dev_fraction=0.2 generate.eval=true "
                                 "generate.max_new_tokens=4") == 0,
          "a dev set carved from the training pairs");
    char *s = split_output("frac");
    CHECK(s && strstr(s, "Num examples = 51") && strstr(s, "dev:") && strstr(s, "bleu"),
          "51 pairs trained, the other 13 evaluated:\n%s", s ? s : "");
    free(s);
    /* test mode carves the same dev set: the 13 pairs generated (the run's config keeps dev_fraction) */
    char run[700], out[700];
    snprintf(run, sizeof run, "%s/runs/frac", split_dir);
    snprintf(out, sizeof out, "%s/frac_test.out", split_dir);
    CHECK(tp_run((const char *[]){"test", run, NULL}, out) == 0, "utrain test on the carved run");
    s = tp_slurp(out);
    CHECK(s && strstr(s, "dev (13 examples):") && strstr(s, "dev: generations -> dev_generations.tsv"), "%s",
          s ? s : "");
    free(s);
    CHECK(tp_count_lines(tp_run_file(split_dir, "frac", "dev_generations.tsv")) == 14,
          "the carved dev set's generations: a header and 13 rows");
    split_refused("fracdev", 1, "data.dev_fraction=0.2", "either that file or a carved fraction");
    split_refused("fracsize", 1, "data.dev_size=10", "data.dev_fraction");
}

/* pairs that cannot be read are refused, naming the files */
static void test_bad_pairs(void) {
    char bad[700];
    snprintf(bad, sizeof bad, "%s/short_targets.txt", split_dir);
    FILE *f = fopen(bad, "w");
    if (f) {
        fprintf(f, "one\ntwo\n");
        fclose(f);
    }
    char sets[900];
    snprintf(sets, sizeof sets, "data.train_target_path=%s", bad);
    split_refused("badcount", 1, sets, "short_targets.txt");
    split_refused("baddata", 1, "data.name=tsv_text", "only data.name seq2seq_text reads target files");
    split_refused("badtask", 1, "model.task=sequence_classification", "model.task");
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(split_dir, sizeof split_dir, "utrain-s2s")) return 1;
    tp_mpi_env(true);
    if (!tp_write_pairs(split_dir, "train", 64) || !tp_write_pairs(split_dir, "dev", 16)) return 1;
    snprintf(split_body, sizeof split_body,
             "model: {name: bart, pretrained: tests/parity/fixtures/hf_bart_gen_tiny, dropout: 0}\n"
             "data: {name: seq2seq_text, train_path: %s/train_inputs.txt, train_target_path: %s/train_targets.txt,\n"
             "       dev_path: %s/dev_inputs.txt, dev_target_path: %s/dev_targets.txt,\n"
             "       test_path: %s/dev_inputs.txt, test_target_path: %s/dev_targets.txt,\n"
             "       max_source_len: 32, max_target_len: 16, shuffle: true}\n"
             "train: {max_steps: 16, batch_size: 8, log_interval: 1, eval_strategy: steps, eval_interval: 16,\n"
             "        save_strategy: steps, save_interval: 16, progress: lines}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.01}\n"
             "dist: {timeout_s: 60}\n",
             split_dir, split_dir, split_dir, split_dir, split_dir, split_dir);
    RUN(test_ranks_agree);
    RUN(test_pipeline_stages); /* after whole, its reference */
    RUN(test_learns_and_generates);
    RUN(test_t5);
    RUN(test_dev_fraction);
    RUN(test_bad_pairs);
    return tp_finish(TEST_SUMMARY(), split_dir);
}
