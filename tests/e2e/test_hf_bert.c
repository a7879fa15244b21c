/* End to end through the `utrain` program with a Hugging Face BERT directory
 * (the tiny fixture of tests/parity/make_hf_fixtures.py, its vocab.txt as the
 * tokenizer) on data/sst2_sample: train mode for one epoch, then test mode
 * writing dev/test results and predictions, an unlabeled GLUE test file, bad
 * settings refused, and DDP and ZeRO-3 on two ranks giving one process's
 * losses and weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test.h"
#include "hf_e2e.h"

static char tmp[256];

static void test_train_then_test(void) { hfe_train_then_test(tmp, "bert"); }

/* an unlabeled test file (index, sentence) gives predictions under its ids */
static void test_unlabeled_test_file(void) {
    FILE *f = fopen(tp_path(tmp, "glue_test.tsv"), "w");
    fprintf(f, "index\tsentence\n7\ta beautiful film , truly clever .\n9\tthe plot was boring .\n");
    fclose(f);
    char set[600], d[1024];
    snprintf(set, sizeof set, "data.test_path=%s", tp_path(tmp, "glue_test.tsv"));
    snprintf(d, sizeof d, "%s", tp_path(tmp, "runs/bert"));
    CHECK(hfe_utrain(tmp, "test", d, "unlabeled.out", (const char *[]){set, NULL}, NULL) == 0, "test, unlabeled");
    char *s = tp_slurp(tp_path(d, "test_predictions.tsv"));
    CHECK(s && strstr(s, "\n7\t") && strstr(s, "\n9\t") && tp_count_lines(tp_path(d, "test_predictions.tsv")) == 3,
          "%s", s);
    free(s);
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) || rc ? -1 : 0;
}

/* bad settings: exit 1 with the key and the reason */
static void test_refused(void) {
    const char *const cases[][2] = {
        {"data.max_len=100", "data.max_len: 100 is more than the model's max_position_embeddings 64"},
        {"model.pretrained=/nonexistent/dir", "model.pretrained (its tokenizer): /nonexistent/dir"},
        {"model.num_hidden_layers=4", "model.num_hidden_layers: set by model.pretrained"},
        {"model.task=causal_lm", "model.task: 'causal_lm' is not available for bert"},
    };
    hfe_check_refused(tmp, "bert.yml", cases, 4);
    /* a model whose embedding has fewer rows (50) than its tokenizer has ids (100): refused at
     * start, naming both, not at the first batch that holds an id of 50 or above */
    char dir[600], set[700];
    snprintf(dir, sizeof dir, "%s/small_vocab", tmp);
    char *cfg = tp_slurp("tests/parity/fixtures/hf_bert_tiny/config.json");
    char *vocab = tp_slurp("tests/parity/fixtures/hf_bert_tiny/vocab.txt");
    char *at = cfg ? strstr(cfg, "\"vocab_size\": 100") : NULL;
    CHECK(at && vocab, "the fixture's config.json names vocab_size 100, and its vocab.txt");
    if (at && vocab) {
        memcpy(at, "\"vocab_size\":  50", strlen("\"vocab_size\": 100"));
        CHECK(mkdir(dir, 0755) == 0 && write_text(tp_path(dir, "config.json"), cfg) == 0 &&
                  write_text(tp_path(dir, "vocab.txt"), vocab) == 0,
              "the copy in %s", dir);
        snprintf(set, sizeof set, "model.pretrained=%s", dir);
        const char *const small[][2] = {{set, "config.json's vocab_size is 50, but the tokenizer"}};
        hfe_check_refused(tmp, "bert.yml", small, 1);
        /* a vocabulary size that is no count: refused naming the file, not taken as one */
        memcpy(at, "\"vocab_size\":  -5", strlen("\"vocab_size\": 100"));
        CHECK(write_text(tp_path(dir, "config.json"), cfg) == 0, "the copy in %s", dir);
        char want[768];
        snprintf(want, sizeof want, "model.pretrained: %s/config.json: vocab_size -5 is not a count of at least 1",
                 dir);
        const char *const neg[][2] = {{set, want}};
        hfe_check_refused(tmp, "bert.yml", neg, 1);
    }
    free(cfg);
    free(vocab);
}

/* data.group_by_length (transformers' group_by_length): batches of similar
 * lengths, other losses than the shuffled order's; the same global order on
 * 2 ranks of 8 as on 1 of 16, so the same losses */
static void test_group_by_length(void) {
    const char *sets[] = {"experiment_name=bert_grouped", "group_by_length=true", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "bert.yml"), "grouped.out", sets, NULL) == 0, "grouped run");
    char *s = tp_slurp(tp_path(tmp, "grouped.out"));
    CHECK(s && strstr(s, "Batches grouped by length (data.group_by_length: megabatches of 48 examples"), "%s",
          s ? s : "");
    free(s);
    char a[64] = "", b[64] = "";
    CHECK(tp_loss_at(tp_path(tmp, "runs/bert/metrics.jsonl"), "train", 1, a, sizeof a) &&
              tp_loss_at(tp_path(tmp, "runs/bert_grouped/metrics.jsonl"), "train", 1, b, sizeof b) && strcmp(a, b),
          "first losses: shuffled %s, grouped %s", a, b);
}

/* A field of the train line of metrics.jsonl at step (NAN: none). */
static double train_field(const char *metrics, int step, const char *field) {
    char *s = tp_slurp(metrics), key[64], f[64];
    snprintf(key, sizeof key, "{\"step\": %d, ", step);
    snprintf(f, sizeof f, "\"%s\": ", field);
    double v = NAN;
    for (char *line = s ? strstr(s, key) : NULL; line; line = strstr(line + 1, key)) {
        char *end = strchr(line, '\n'), *at = strstr(line, f);
        if (at && (!end || at < end) && strstr(line, "\"split\": \"train\"") < end) {
            v = strtod(at + strlen(f), NULL);
            break;
        }
    }
    free(s);
    return v;
}

/* tokens_per_s counts the tokens each batch feeds the model (its longest
 * row's length per example, as transformers counts padded batches), not
 * data.max_len's */
static void test_tokens_per_second(void) {
    const char *m = tp_path(tmp, "runs/bert/metrics.jsonl");
    for (int step = 1; step <= 15; step += 7) {
        double per = train_field(m, step, "tokens_per_s") / train_field(m, step, "samples_per_s");
        CHECK(per >= 1 && per < 24 && fabs(per - round(per)) < 1e-6 * per,
              "step %d: %.9g tokens per example (max_len 24)", step, per);
    }
}

/* train.count_input_tokens: all adds each step's tokens_per_s count (16
 * examples x their longest row); non_padding the attention masks' tokens,
 * fewer, and the same on 2 ranks of 8 as on 1 of 16 (the same examples,
 * whatever each rank's padding) */
static void test_input_tokens_seen(void) {
    const char *all[] = {"experiment_name=bert_seen_all", "train.count_input_tokens=all", NULL};
    const char *np[] = {"experiment_name=bert_seen_np", "include_num_input_tokens_seen=non_padding", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "bert.yml"), "seen_all.out", all, NULL) == 0 &&
              hfe_utrain(tmp, "train", tp_path(tmp, "bert.yml"), "seen_np.out", np, NULL) == 0,
          "runs");
    const char *ma = tp_path(tmp, "runs/bert_seen_all/metrics.jsonl");
    double before = 0;
    for (int step = 1; step <= 3; step++) {
        double seen = train_field(ma, step, "num_input_tokens_seen");
        double per = train_field(ma, step, "tokens_per_s") / train_field(ma, step, "samples_per_s");
        CHECK(fabs(seen - before - 16 * per) < 1e-6 * seen, "step %d: %g seen, %g before, %.9g tokens per example",
              step, seen, before, per);
        before = seen;
    }
    const char *mn = tp_path(tmp, "runs/bert_seen_np/metrics.jsonl");
    double a = train_field(ma, 3, "num_input_tokens_seen"), n1 = train_field(mn, 1, "num_input_tokens_seen"),
           n3 = train_field(mn, 3, "num_input_tokens_seen");
    CHECK(n1 > 0 && n3 > n1 && n3 < a, "non_padding: %g at step 1, %g at 3; all: %g at 3", n1, n3, a);
}

static void test_input_tokens_seen_two_ranks(void) {
    const char *sets[] = {"experiment_name=bert_seen_np2", "include_num_input_tokens_seen=non_padding",
                          "train.batch_size=8", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "bert.yml"), "seen_np2.out", sets, "2") == 0, "2 ranks");
    for (int step = 1; step <= 15; step += 7) {
        double one = train_field(tp_path(tmp, "runs/bert_seen_np/metrics.jsonl"), step, "num_input_tokens_seen"),
               two = train_field(tp_path(tmp, "runs/bert_seen_np2/metrics.jsonl"), step, "num_input_tokens_seen");
        CHECK(one > 0 && one == two, "step %d: 1 process %g, 2 ranks %g", step, one, two);
    }
}

static void test_group_by_length_two_ranks(void) {
    const char *sets[] = {"experiment_name=bert_grouped2", "group_by_length=true", "train.batch_size=8", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "bert.yml"), "grouped2.out", sets, "2") == 0, "grouped, 2 ranks");
    hfe_check_same_losses(tp_path(tmp, "runs/bert_grouped/metrics.jsonl"),
                          tp_path(tmp, "runs/bert_grouped2/metrics.jsonl"), 1, 15, 7, "grouped");
}

static void test_ddp_two_ranks(void) { hfe_check_two_ranks(tmp, "bert", "ddp", "attention.self.key.bias", 39); }
static void test_zero3_two_ranks(void) { hfe_check_two_ranks(tmp, "bert", "zero3", "attention.self.key.bias", 39); }

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "ut-hfbert")) return 1;
    hfe_write_config(tmp, "bert", "bert", "hf_bert_tiny",
                     "  task: sequence_classification\n  hidden_dropout_prob: 0\n  attention_probs_dropout_prob: 0\n",
                     24, 1);
    RUN(test_train_then_test);
    RUN(test_unlabeled_test_file);
    RUN(test_refused);
    RUN(test_group_by_length);
    RUN(test_tokens_per_second);
    RUN(test_input_tokens_seen);
    /* the jobs under mpirun last: their environment turns LeakSanitizer off */
    tp_mpi_env(true);
    RUN(test_ddp_two_ranks);
    RUN(test_zero3_two_ranks);
    RUN(test_group_by_length_two_ranks);
    RUN(test_input_tokens_seen_two_ranks);
    return tp_finish(TEST_SUMMARY(), tmp);
}
