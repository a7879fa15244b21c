/* End to end through the `utrain` program with the RoBERTa and GPT-2
 * sequence-classification fixtures of tests/parity/make_hf_cls_fixtures.py
 * (their tokenizer files as the tokenizer: RoBERTa's tokenizer.json, GPT-2's
 * vocab.json + merges.txt) on data/sst2_sample: train mode for 3 epochs with
 * dynamic padding (finite losses; the tiny random models learn little on 240
 * sentences, so no accuracy is asserted), then test mode writing dev/test
 * results and predictions, then `utrain export --format hf` of the best
 * checkpoint, whose head has moved from the fixture's; DDP on 2 ranks x 8
 * giving the GPT-2 classifier's one-process losses; and a GPT-2 classifier
 * on token shards refused. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "hf_e2e.h"

static char tmp[256];

/* the largest difference of tensor NAME between two safetensors files */
static double max_diff(const char *a, const char *b, const char *name) {
    char err[512];
    ut_st_file *fa = ut_st_open(a, err, sizeof err), *fb = ut_st_open(b, err, sizeof err);
    CHECK(fa && fb, "%s", err);
    const ut_st_tensor *x = fa ? ut_st_get(fa, name) : NULL, *y = fb ? ut_st_get(fb, name) : NULL;
    CHECK(x && y && x->nbytes == y->nbytes, "%s in %s and %s", name, a, b);
    double d = -1;
    for (int64_t i = 0; x && y && x->nbytes == y->nbytes && i < ut_st_numel(x); i++)
        d = fmax(d, fabs(((const float *)x->data)[i] - ((const float *)y->data)[i]));
    ut_st_close(fa);
    ut_st_close(fb);
    return d;
}

static void train_test_export(const char *name, const char *arch, const char *fixture, const char *head) {
    char cfg[64], out[64], d[1024], hf[1024];
    snprintf(cfg, sizeof cfg, "%s.yml", name);
    snprintf(out, sizeof out, "%s.train.out", name);
    snprintf(d, sizeof d, "%s/runs/%s", tmp, name);
    snprintf(hf, sizeof hf, "%s/%s_hf", tmp, name);
    CHECK(tp_run_shown((const char *[]){"train", tp_path(tmp, cfg), NULL}, tp_path(tmp, out), 0, NULL) == 0,
          "%s: train", name);
    char first[64] = "", last[64] = "";
    bool ok = tp_loss_at(tp_path(d, "metrics.jsonl"), "train", 1, first, sizeof first) &&
              tp_loss_at(tp_path(d, "metrics.jsonl"), "train", 45, last, sizeof last);
    CHECK(ok && isfinite(atof(first)) && isfinite(atof(last)) && atof(last) > 0.3 && atof(last) < 1.2,
          "%s: train loss %s at step 1, %s at step 45", name, first, last);
    snprintf(out, sizeof out, "%s.test.out", name);
    CHECK(tp_run_shown((const char *[]){"test", d, NULL}, tp_path(tmp, out), 0, NULL) == 0, "%s: test", name);
    hfe_check_results(d, name);
    snprintf(out, sizeof out, "%s.export.out", name);
    CHECK(tp_run_shown((const char *[]){"export", d, "--format", "hf", hf, NULL}, tp_path(tmp, out), 0, NULL) == 0,
          "%s: export", name);
    char *s = tp_slurp(tp_path(hf, "config.json"));
    CHECK(s && strstr(s, arch), "%s: config.json: %s", name, s ? s : "(none)");
    free(s);
    char fix[512];
    snprintf(fix, sizeof fix, "tests/parity/fixtures/%s/model.safetensors", fixture);
    double moved = max_diff(fix, tp_path(hf, "model.safetensors"), head);
    CHECK(moved > 1e-4, "%s: %s moved by %g in training", name, head, moved);
}

static void test_roberta(void) {
    train_test_export("roberta", "RobertaForSequenceClassification", "hf_roberta_tiny", "classifier.out_proj.weight");
}
static void test_gpt2_classifier(void) {
    train_test_export("gpt2cls", "GPT2ForSequenceClassification", "hf_gpt2_cls_tiny", "score.weight");
}

/* ddp on 2 ranks x 8 examples = 1 process x 16 (dropout off in the config) */
static void test_gpt2_classifier_ddp(void) {
    const char *argv[] = {"train", tp_path(tmp, "gpt2cls.yml"), "--set", "experiment_name=gpt2cls_ddp", "--set",
                          "train.batch_size=8", "--set", "dist.strategy=ddp", "--nproc", "2", NULL};
    CHECK(tp_run_shown(argv, tp_path(tmp, "ddp.out"), 0, NULL) == 0, "ddp on 2 ranks");
    hfe_check_same_losses(tp_path(tmp, "runs/gpt2cls/metrics.jsonl"), tp_path(tmp, "runs/gpt2cls_ddp/metrics.jsonl"),
                          1, 45, 22, "ddp");
}

/* a random GPT-2 classifier with GPT-2's own BPE files
 * (data/pretrained/gpt2-bpe, scripts/fetch-pretrained.sh): ids up to 50256,
 * padded with <|endoftext|>, which model.pad_token_id names; without it the
 * first step is refused */
static void test_gpt2_real_bpe(void) {
    const char *bpe = "data/pretrained/gpt2-bpe/encoder.json";
    FILE *probe = fopen(bpe, "r");
    CHECK(probe, "%s is missing: run scripts/fetch-pretrained.sh", bpe);
    if (!probe) return;
    fclose(probe);
    FILE *f = fopen(tp_path(tmp, "bpe.yml"), "w");
    fprintf(f, "experiment_name: bpe\noutput_dir: %s/runs\nseed: 3\nmodel:\n  name: gpt2\n"
               "  task: sequence_classification\n  n_layer: 1\n  n_head: 2\n  n_embd: 16\n  block_size: 32\n"
               "  pad_token_id: 50256\ndata:\n  name: tsv_text\n  tokenizer: data/pretrained/gpt2-bpe\n"
               "  train_path: data/sst2_sample/train.tsv\n  dev_path: data/sst2_sample/dev.tsv\n"
               "  test_path: data/sst2_sample/test.tsv\n  max_len: 24\n"
               "train:\n  max_steps: 4\n  batch_size: 16\noptim:\n  name: adamw\n  lr: 1.0e-3\n", tmp);
    fclose(f);
    CHECK(tp_run_shown((const char *[]){"train", tp_path(tmp, "bpe.yml"), NULL}, tp_path(tmp, "bpe.out"), 0, NULL) == 0,
          "train");
    CHECK(tp_run_shown((const char *[]){"test", tp_path(tmp, "runs/bpe"), NULL}, tp_path(tmp, "bpe.test.out"), 0,
                       NULL) == 0,
          "test");
    char *s = tp_slurp(tp_path(tmp, "runs/bpe/test_results.json"));
    CHECK(s && strstr(s, "\"examples\": 60"), "%s", s);
    free(s);
    f = fopen(tp_path(tmp, "nopad.yml"), "w");
    char *cfg = tp_slurp(tp_path(tmp, "bpe.yml"));
    const char *line = "  pad_token_id: 50256\n";
    char *at = cfg ? strstr(cfg, line) : NULL;
    if (at) memmove(at, at + strlen(line), strlen(at + strlen(line)) + 1);
    fputs(cfg ? cfg : "", f);
    fclose(f);
    free(cfg);
    CHECK(tp_run((const char *[]){"train", tp_path(tmp, "nopad.yml"), "--set", "experiment_name=nopad", NULL},
                 tp_path(tmp, "nopad.out")) == 1, "exit 1 without pad_token_id");
    s = tp_slurp(tp_path(tmp, "nopad.out"));
    CHECK(s && strstr(s, "pad_token_id is not set") && strstr(s, "50256"), "%s", s);
    free(s);
}

static void test_refused(void) {
    /* hf_roberta_tiny: 66 positions, pad_token_id 1: 64 tokens at most */
    const char *argv[] = {"train", tp_path(tmp, "roberta.yml"), "--set", "experiment_name=long", "--set",
                          "data.max_len=65", NULL};
    CHECK(tp_run(argv, tp_path(tmp, "long.out")) == 1, "max_len 65: exit 1");
    char *s = tp_slurp(tp_path(tmp, "long.out"));
    CHECK(s && strstr(s, "data.max_len: 65 is more than the model's 64 positions (max_position_embeddings 66 "
                         "less pad_token_id + 1)"), "%s", s);
    free(s);
    FILE *f = fopen(tp_path(tmp, "tok.yml"), "w");
    fprintf(f, "experiment_name: tok\noutput_dir: %s/runs\nmodel:\n  name: gpt2\n  task: sequence_classification\n"
               "data:\n  name: tokens\n  train_path: x.bin\n", tmp);
    fclose(f);
    CHECK(tp_run((const char *[]){"train", tp_path(tmp, "tok.yml"), NULL}, tp_path(tmp, "tok.out")) == 1, "exit 1");
    s = tp_slurp(tp_path(tmp, "tok.out"));
    CHECK(s && strstr(s, "model.task: sequence_classification") && strstr(s, "tsv_text"), "%s", s);
    free(s);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "ut-hfcls")) return 1;
    hfe_write_config(tmp, "roberta", "bert", "hf_roberta_tiny", "  hidden_dropout_prob: 0\n", 32, 3);
    hfe_write_config(tmp, "gpt2cls", "gpt2", "hf_gpt2_cls_tiny", "  task: sequence_classification\n  dropout: 0\n", 32,
                     3);
    RUN(test_roberta);
    RUN(test_gpt2_classifier);
    RUN(test_gpt2_real_bpe);
    RUN(test_refused);
    /* under mpirun last: its environment turns LeakSanitizer off */
    tp_mpi_env(true);
    RUN(test_gpt2_classifier_ddp);
    return tp_finish(TEST_SUMMARY(), tmp);
}
