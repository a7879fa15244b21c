/* End to end through the `utrain` program with the RoBERTa and GPT-2
 * sequence-classification fixtures of tests/parity/make_hf_cls_fixtures.py
 * (their tokenizer files as the tokenizer: RoBERTa's tokenizer.json, GPT-2's
 * vocab.json + merges.txt) on data/sst2_sample: train mode for 3 epochs with
 * dynamic padding (finite losses; the tiny random models learn little on 240
 * sentences, so no accuracy is asserted), then test mode writing dev/test
 * results and predictions, then `utrain export --format hf` of the best
 * checkpoint, whose head has moved from the fixture's; DDP on 2 ranks x 8
 * giving the GPT-2 classifier's one-process losses; a GPT-2 classifier
 * on token shards refused; and regression (model.num_labels 1) on pairs
 * with scores in GLUE's STS-B layout made from the same sentences: BERT
 * learns them (Pearson above 0.8), test mode's scores agree with its
 * predictions file, 2 ranks give one process's numbers, the GPT-2
 * classifier regresses too, and what cannot apply is refused. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* ---- labels that are names ---- */
/* tmp/names_SPLIT.tsv: data/sst2_sample's SPLIT with its labels written as
 * names (negative, positive) */
static void write_named(const char *split) {
    char out[64], (*text)[256];
    int *label, n = hfe_read_sst2(split, &text, &label);
    snprintf(out, sizeof out, "names_%s.tsv", split);
    FILE *o = fopen(tp_path(tmp, out), "w");
    CHECK(o, "%s", out);
    if (!o) return;
    fprintf(o, "sentence\tlabel\n");
    for (int i = 0; i < n; i++) fprintf(o, "%s\t%s\n", text[i], label[i] ? "positive" : "negative");
    fclose(o);
}

/* Names sort as the classes they stand for (negative 0, positive 1): the
 * run is the integer labels' run, and test mode writes the names; a
 * checkpoint whose id2label names them in the other order (POSITIVE 0) gets
 * that order, as run_glue takes a checkpoint's label2id, so the untrained
 * head's accuracy is the complement */
static void test_label_names(void) {
    const char *splits[3] = {"train", "dev", "test"};
    for (int i = 0; i < 3; i++) write_named(splits[i]);
    char sets[3][600];
    for (int i = 0; i < 3; i++) snprintf(sets[i], sizeof sets[i], "data.%s_path=%s/names_%s.tsv", splits[i], tmp, splits[i]);
    const char *names[] = {"experiment_name=roberta_names", sets[0], sets[1], sets[2], NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "roberta.yml"), "names.out", names, NULL) == 0, "train");
    hfe_check_same_losses(tp_path(tmp, "runs/roberta/metrics.jsonl"), tp_path(tmp, "runs/roberta_names/metrics.jsonl"),
                          1, 45, 11, "names as the integer labels");
    CHECK(hfe_utrain(tmp, "test", tp_path(tmp, "runs/roberta_names"), "names.test.out", NULL, NULL) == 0, "test");
    char *s = tp_slurp(tp_path(tmp, "runs/roberta_names/dev_predictions.tsv"));
    int named = 0;
    for (char *p = s ? strchr(s, '\n') : NULL; p && p[1]; p = strchr(p + 1, '\n')) {
        char *tab = strchr(p + 1, '\t');
        named += tab && (!strncmp(tab, "\tpositive\t", 10) || !strncmp(tab, "\tnegative\t", 10));
    }
    CHECK(named == 60, "%d of 60 predictions are names: %.200s", named, s);
    free(s);
    /* the checkpoint's order */
    char rev[1024], from[600], to[600];
    snprintf(rev, sizeof rev, "%s", tp_path(tmp, "roberta_rev"));
    mkdir(rev, 0755);
    snprintf(from, sizeof from, "tests/parity/fixtures/hf_roberta_tiny/model.safetensors");
    snprintf(to, sizeof to, "%s/model.safetensors", rev);
    CHECK(tp_copy_file(from, to), "copy");
    snprintf(to, sizeof to, "%s/tokenizer.json", rev);
    CHECK(tp_copy_file("tests/parity/fixtures/hf_roberta_tiny/tokenizer.json", to), "copy");
    char *cfg = tp_slurp("tests/parity/fixtures/hf_roberta_tiny/config.json");
    snprintf(to, sizeof to, "%s/config.json", rev);
    FILE *f = fopen(to, "w");
    char *brace = cfg ? strchr(cfg, '{') : NULL;
    if (f && brace) fprintf(f, "{\"id2label\": {\"0\": \"POSITIVE\", \"1\": \"NEGATIVE\"},%s", brace + 1);
    if (f) fclose(f);
    free(cfg);
    char pre[1100];
    snprintf(pre, sizeof pre, "model.pretrained=%s", rev);
    double acc[2];
    for (int k = 0; k < 2; k++) {
        const char *st[] = {k ? "experiment_name=names_rev" : "experiment_name=names_sorted",
                            k ? pre : "model.hidden_dropout_prob=0", sets[0], sets[1], sets[2], "train.max_steps=1",
                            "train.eval_on_start=true", NULL};
        CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "roberta.yml"), "names_order.out", st, NULL) == 0, "order %d", k);
        char m[128];
        snprintf(m, sizeof m, "runs/%s/metrics.jsonl", k ? "names_rev" : "names_sorted");
        s = tp_slurp(tp_path(tmp, m));
        acc[k] = tp_json_number(s ? strstr(s, "\"split\": \"dev\"") : NULL, "accuracy");
        free(s);
    }
    CHECK(fabs(acc[0] + acc[1] - 1) < 1e-9 && acc[0] != acc[1], "dev accuracy before training %g sorted, %g in the "
          "checkpoint's order", acc[0], acc[1]);
    /* the export's id2label: the run's names (labels.txt), in the order of its outputs */
    const char *runs[2] = {"runs/roberta_names", "runs/names_rev"}, *want[2] = {"negative", "positive"};
    for (int k = 0; k < 2; k++) {
        char run[1024], hf[1024];
        snprintf(run, sizeof run, "%s", tp_path(tmp, runs[k]));
        snprintf(hf, sizeof hf, "%s_hf", run);
        CHECK(tp_run_shown((const char *[]){"export", run, "--format", "hf", hf, NULL}, tp_path(tmp, "names.export.out"),
                           0, NULL) == 0, "export %s", runs[k]);
        s = tp_slurp(tp_path(hf, "config.json"));
        char id2[128];
        snprintf(id2, sizeof id2, "\"id2label\":\t{\n\t\t\"0\":\t\"%s\",\n\t\t\"1\":\t\"%s\"", want[k], want[1 - k]);
        CHECK(s && strstr(s, id2) && strstr(s, k ? "\"positive\":\t0" : "\"positive\":\t1"), "%s: %s", runs[k], s);
        free(s);
    }
    /* a labels.txt that is not the checkpoint's head, or has an empty line: refused */
    const char *bad[2][2] = {{"a\nb\nc\n", "the classifier has 2 outputs, and the run's labels.txt names 3 labels (a, ...)"},
                             {"a\n\n", "labels.txt:2: an empty label name"}};
    for (int k = 0; k < 2; k++) {
        FILE *lf = fopen(tp_path(tmp, "runs/names_sorted/labels.txt"), "w");
        fputs(bad[k][0], lf);
        fclose(lf);
        char run[1024], hf[1024];
        snprintf(run, sizeof run, "%s", tp_path(tmp, "runs/names_sorted"));
        snprintf(hf, sizeof hf, "%s_hf", run);
        CHECK(tp_run((const char *[]){"export", run, "--format", "hf", hf, NULL}, tp_path(tmp, "refused.out")) == 1,
              "exit 1");
        s = tp_slurp(tp_path(tmp, "refused.out"));
        CHECK(s && strstr(s, bad[k][1]), "%s", s);
        free(s);
    }
    /* integer labels beyond model.num_labels: the train file's first such line */
    FILE *three = fopen(tp_path(tmp, "three.tsv"), "w");
    fprintf(three, "sentence\tlabel\ngood\t0\nbad\t1\nso so\t2\n");
    fclose(three);
    char three_set[600];
    snprintf(three_set, sizeof three_set, "data.train_path=%s/three.tsv", tmp);
    const char *argv3[] = {"train", tp_path(tmp, "roberta.yml"), "--set", three_set, "--set", "model.num_labels=2",
                           "--set", "experiment_name=refused", NULL};
    CHECK(tp_run(argv3, tp_path(tmp, "refused.out")) == 1, "exit 1");
    s = tp_slurp(tp_path(tmp, "refused.out"));
    CHECK(s && strstr(s, "three.tsv:4: label 2 >= num_classes 2"), "%s", s);
    free(s);
    const char *refused[][2] = {{"model.num_labels=3", "model.num_labels 3: the train file"}};
    const char *st[] = {sets[0], sets[1], NULL};
    for (int i = 0; i < 1; i++) {
        const char *argv[] = {"train", tp_path(tmp, "roberta.yml"), "--set", st[0], "--set", st[1], "--set",
                              refused[i][0], "--set", "experiment_name=refused", NULL};
        CHECK(tp_run(argv, tp_path(tmp, "refused.out")) == 1, "exit 1");
        s = tp_slurp(tp_path(tmp, "refused.out"));
        CHECK(s && strstr(s, refused[i][1]) && strstr(s, "has 2 label names (negative, positive)"), "%s", s);
        free(s);
    }
}

/* ---- regression ---- */
/* tmp/stsb_SPLIT.tsv: GLUE's STS-B layout (index, genre, sentence1, sentence2,
 * score) from data/sst2_sample's SPLIT, each review paired with another, the
 * score 1 + 2 x the first's label + 1.5 x the second's; labels[i] the scores */
static int write_scores(const char *split, double *labels, int max) {
    char out[64];
    snprintf(out, sizeof out, "stsb_%s.tsv", split);
    char (*text)[256];
    int *label, n = hfe_read_sst2(split, &text, &label);
    if (!n) return 0;
    FILE *o = fopen(tp_path(tmp, out), "w");
    fprintf(o, "index\tgenre\tsentence1\tsentence2\tscore\n");
    for (int i = 0; i < n && i < max; i++) {
        int j = (i * 7 + 3) % n;
        labels[i] = 1.0 + 2.0 * label[i] + 1.5 * label[j];
        fprintf(o, "%d\treviews\t%s\t%s\t%.3f\n", i, text[i], text[j], labels[i]);
    }
    fclose(o);
    return n;
}

static double g_dev_scores[64];
static int g_dev_n;

static void write_regression_config(void) {
    double scratch[256];
    write_scores("train", scratch, 256);
    g_dev_n = write_scores("dev", g_dev_scores, 64);
    write_scores("test", scratch, 256);
    FILE *f = fopen(tp_path(tmp, "reg.yml"), "w");
    fprintf(f, "experiment_name: reg\noutput_dir: %s/runs\nseed: 3\nmodel:\n  name: bert\n"
               "  pretrained: tests/parity/fixtures/hf_bert_tiny_base\n  num_labels: 1\n  hidden_dropout_prob: 0\n"
               "data:\n  name: tsv_text\n  tokenizer: tests/parity/fixtures/hf_bert_tiny\n"
               "  train_path: %s/stsb_train.tsv\n  dev_path: %s/stsb_dev.tsv\n  test_path: %s/stsb_test.tsv\n"
               "  max_len: 48\ntrain:\n  epochs: 12\n  batch_size: 16\n  log_interval: 1\n  eval_strategy: epoch\n"
               "  save_strategy: epoch\n  save_total_limit: 2\n  best_metric: dev/pearson\n"
               "optim:\n  name: adamw\n  lr: 5.0e-3\n  weight_decay: 0.01\n  schedule: linear\n",
            tmp, tmp, tmp, tmp);
    fclose(f);
}

/* Labels that are real numbers with nothing saying the task (reg.yml
 * without num_labels: 1; the base checkpoint has no labels): a regression,
 * as run_glue infers it, the same run as num_labels: 1 gives, and the log
 * says so; single_label_classification refuses them */
static void test_regression_inferred(void) {
    char *yml = tp_slurp(tp_path(tmp, "reg.yml")), *at = yml ? strstr(yml, "  num_labels: 1\n") : NULL;
    CHECK(at, "reg.yml has num_labels: 1");
    if (!at) {
        free(yml);
        return;
    }
    memmove(at, at + 16, strlen(at + 16) + 1);
    FILE *f = fopen(tp_path(tmp, "reg_inferred.yml"), "w");
    fputs(yml, f);
    fclose(f);
    free(yml);
    const char *said[] = {"experiment_name=reg_said", "train.epochs=2", NULL},
               *inferred[] = {"experiment_name=reg_inferred", "train.epochs=2", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "reg.yml"), "reg_said.out", said, NULL) == 0, "train (num_labels 1)");
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "reg_inferred.yml"), "reg_inferred.out", inferred, NULL) == 0,
          "train (inferred)");
    char *s = tp_slurp(tp_path(tmp, "reg_inferred.out"));
    CHECK(s && strstr(s, "stsb_train.tsv: the labels are real numbers: a regression (one output, mean squared error)") &&
              strstr(s, "dev/pearson"), "%s", s);
    free(s);
    hfe_check_same_losses(tp_path(tmp, "runs/reg_said/metrics.jsonl"), tp_path(tmp, "runs/reg_inferred/metrics.jsonl"),
                          1, 30, 1, "inferred regression");
    double a = hfe_dev_metric(tp_path(tmp, "runs/reg_said/metrics.jsonl"), 30, "pearson"),
           b = hfe_dev_metric(tp_path(tmp, "runs/reg_inferred/metrics.jsonl"), 30, "pearson");
    CHECK(!isnan(a) && a == b, "dev Pearson %g vs %g", a, b);
    /* test mode infers it too */
    CHECK(hfe_utrain(tmp, "test", tp_path(tmp, "runs/reg_inferred"), "reg_inferred.test.out", NULL, NULL) == 0, "test");
    s = tp_slurp(tp_path(tmp, "runs/reg_inferred/dev_results.json"));
    CHECK(s && strstr(s, "pearson") && !strstr(s, "accuracy"), "%s", s);
    free(s);
    static const char *const refused[][2] = {
        {"model.problem_type=single_label_classification", "bad label '"},
    };
    hfe_check_refused(tmp, "reg_inferred.yml", refused, 1);
}

/* BERT learns the scores; test mode's results are its predictions' scores */
static void test_regression(void) {
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "reg.yml"), "reg.out", NULL, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "reg.out"));
    CHECK(s && strstr(s, "dev/pearson") && strstr(s, "dev/spearmanr") && strstr(s, "dev/combined_score") &&
              strstr(s, "best dev/pearson"), "%s", s);
    free(s);
    const char *metrics = tp_path(tmp, "runs/reg/metrics.jsonl");
    double first = hfe_dev_metric(metrics, 15, "loss"), last = hfe_dev_metric(metrics, 180, "loss"),
           r = hfe_dev_metric(metrics, 180, "pearson");
    CHECK(first > 1.0 && last < 0.6 && r > 0.8, "dev mean squared error %g at the first epoch, %g at the last; "
                                                "Pearson %g", first, last, r);
    CHECK(isnan(hfe_dev_metric(metrics, 180, "accuracy")), "a regression has no accuracy");
    CHECK(hfe_utrain(tmp, "test", tp_path(tmp, "runs/reg"), "reg.test.out", NULL, NULL) == 0, "test");
    s = tp_slurp(tp_path(tmp, "runs/reg/dev_results.json"));
    double loss = tp_json_number(s, "loss"), pearson = tp_json_number(s, "pearson"), spear = tp_json_number(s, "spearmanr"),
           comb = tp_json_number(s, "combined_score");
    CHECK(s && strstr(s, "\"examples\": 60") && !strstr(s, "accuracy") && pearson > 0.8 &&
              fabs(comb - (pearson + spear) / 2) < 1e-6, "%s", s);
    free(s);
    /* the predictions file: the scores, in the file's order, their error and correlation as reported */
    FILE *f = fopen(tp_path(tmp, "runs/reg/dev_predictions.tsv"), "r");
    char line[256];
    int n = 0;
    double p[64], sp = 0, sl = 0, spp = 0, sll = 0, spl = 0, se = 0;
    CHECK(f && fgets(line, sizeof line, f) && !strcmp(line, "index\tprediction\n"), "header");
    while (f && n < 64 && fgets(line, sizeof line, f)) {
        int id;
        CHECK(sscanf(line, "%d\t%lf", &id, &p[n]) == 2 && id == n, "row %d: %s", n, line);
        double y = g_dev_scores[n];
        sp += p[n], sl += y, spp += p[n] * p[n], sll += y * y, spl += p[n] * y, se += (p[n] - y) * (p[n] - y);
        n++;
    }
    if (f) fclose(f);
    CHECK(n == 60 && g_dev_n == 60, "%d rows, %d labels", n, g_dev_n);
    double r1 = (n * spl - sp * sl) / sqrt((n * spp - sp * sp) * (n * sll - sl * sl));
    CHECK(fabs(r1 - pearson) < 1e-4 && fabs(se / n - loss) < 1e-4 * loss, "from the predictions: Pearson %g (reported "
          "%g), mean squared error %g (reported %g)", r1, pearson, se / n, loss);
    /* exported, its config.json says regression: fine-tuning it further needs no num_labels */
    char hf[1024], run[1024];
    snprintf(hf, sizeof hf, "%s", tp_path(tmp, "reg_hf"));
    snprintf(run, sizeof run, "%s", tp_path(tmp, "runs/reg"));
    CHECK(tp_run_shown((const char *[]){"export", run, "--format", "hf", hf, NULL}, tp_path(tmp, "reg.export.out"), 0,
                       NULL) == 0, "export");
    s = tp_slurp(tp_path(hf, "config.json"));
    CHECK(s && strstr(s, "\"problem_type\":\t\"regression\"") && strstr(s, "BertForSequenceClassification"), "%s", s);
    free(s);
    char *cfg = tp_slurp(tp_path(tmp, "reg.yml"));
    const char *drop = "  num_labels: 1\n";
    char *at = cfg ? strstr(cfg, drop) : NULL;
    if (at) memmove(at, at + strlen(drop), strlen(at + strlen(drop)) + 1);
    f = fopen(tp_path(tmp, "reg_again.yml"), "w");
    fputs(cfg ? cfg : "", f);
    fclose(f);
    free(cfg);
    char pre[1100];
    snprintf(pre, sizeof pre, "model.pretrained=%s", hf);
    const char *sets[] = {"experiment_name=reg_again", pre, "train.epochs=1", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "reg_again.yml"), "reg_again.out", sets, NULL) == 0, "again");
    double again = hfe_dev_metric(tp_path(tmp, "runs/reg_again/metrics.jsonl"), 15, "pearson");
    CHECK(again > 0.8, "fine-tuned from the export (a regression by its config.json): Pearson %g", again);
}

/* 2 ranks: test mode's scores from the predictions gathered over the ranks
 * are one process's; ddp on 2 ranks x 8 trains as 1 process x 16 (at a
 * lower rate: Adam's first steps make the sums' rounding grow at 5e-3) */
static void test_regression_ddp(void) {
    char *one = tp_slurp(tp_path(tmp, "runs/reg/dev_results.json"));
    CHECK(hfe_utrain(tmp, "test", tp_path(tmp, "runs/reg"), "reg_test2.out", NULL, "2") == 0, "test on 2 ranks");
    char *two = tp_slurp(tp_path(tmp, "runs/reg/dev_results.json"));
    const char *keys[4] = {"loss", "pearson", "spearmanr", "combined_score"};
    for (int k = 0; k < 4; k++) {
        double a = tp_json_number(one, keys[k]), b = tp_json_number(two, keys[k]);
        CHECK(fabs(a - b) <= 1e-5 * fabs(a), "test mode's %s: %.9g on one process, %.9g on 2 ranks", keys[k], a, b);
    }
    free(one);
    free(two);
    const char *sets1[] = {"experiment_name=reg_one", "optim.lr=1e-3", "train.epochs=2", NULL},
               *sets2[] = {"experiment_name=reg_ddp", "optim.lr=1e-3", "train.epochs=2", "train.batch_size=8",
                           "dist.strategy=ddp", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "reg.yml"), "reg_one.out", sets1, NULL) == 0, "one process");
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "reg.yml"), "reg_ddp.out", sets2, "2") == 0, "ddp on 2 ranks");
    const char *a = tp_path(tmp, "runs/reg_one/metrics.jsonl");
    char b[1024];
    snprintf(b, sizeof b, "%s", tp_path(tmp, "runs/reg_ddp/metrics.jsonl"));
    hfe_check_same_losses(a, b, 1, 1, 1, "regression ddp, step 1");
    for (int step = 2; step <= 30; step++) {
        char x[64] = "", y[64] = "";
        bool ok = tp_loss_at(a, "train", step, x, sizeof x) && tp_loss_at(b, "train", step, y, sizeof y);
        CHECK(ok && fabs(atof(x) - atof(y)) <= 3e-4 * atof(x), "step %d: loss %s on one process, %s on 2 ranks", step,
              x, y);
    }
    for (int step = 15; step <= 30; step += 15) {
        double x = hfe_dev_metric(a, step, "loss"), y = hfe_dev_metric(b, step, "loss");
        CHECK(fabs(x - y) <= 1e-4 * x && !isnan(hfe_dev_metric(b, step, "pearson")), "dev loss at %d: %g, %g", step, x, y);
    }
}

/* 2 pipeline stages: the last stage's predictions reach every stage; test
 * mode on the stages (2 processes) scores as the whole model in one */
static void test_regression_pipeline(void) {
    const char *sets[] = {"experiment_name=reg_pp", "dist.pipeline_parallel=2", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "reg.yml"), "reg_pp.out", sets, "2") == 0, "2 stages");
    const char *a = tp_path(tmp, "runs/reg/metrics.jsonl");
    char b[1024];
    snprintf(b, sizeof b, "%s", tp_path(tmp, "runs/reg_pp/metrics.jsonl"));
    for (int step = 1; step <= 7; step += 3) { /* later, Adam at 5e-3 makes the sums' rounding grow */
        char x[64] = "", y[64] = "";
        bool ok = tp_loss_at(a, "train", step, x, sizeof x) && tp_loss_at(b, "train", step, y, sizeof y);
        CHECK(ok && fabs(atof(x) - atof(y)) <= 3e-4 * atof(x), "step %d: loss %s on one process, %s in 2 stages", step,
              x, y);
    }
    double r = hfe_dev_metric(b, 180, "pearson");
    CHECK(r > 0.8, "2 stages learn the scores too: dev Pearson %g", r);
    CHECK(hfe_utrain(tmp, "test", tp_path(tmp, "runs/reg_pp"), "reg_pp_test1.out", NULL, NULL) == 0, "test, whole");
    char *one = tp_slurp(tp_path(tmp, "runs/reg_pp/test_results.json"));
    char whole[1024];
    snprintf(whole, sizeof whole, "%s", tp_path(tmp, "whole_predictions.tsv"));
    CHECK(tp_copy_file(tp_path(tmp, "runs/reg_pp/test_predictions.tsv"), whole), "copy");
    CHECK(hfe_utrain(tmp, "test", tp_path(tmp, "runs/reg_pp"), "reg_pp_test2.out", NULL, "2") == 0, "test, stages");
    char *two = tp_slurp(tp_path(tmp, "runs/reg_pp/test_results.json")), *out = tp_slurp(tp_path(tmp, "reg_pp_test2.out"));
    CHECK(out && strstr(out, "on the model's parts"), "%s", out);
    const char *keys[3] = {"loss", "pearson", "spearmanr"};
    for (int k = 0; k < 3; k++)
        CHECK(fabs(tp_json_number(one, keys[k]) - tp_json_number(two, keys[k])) <= 1e-5 * fabs(tp_json_number(one, keys[k])),
              "test %s: %g whole, %g in stages", keys[k], tp_json_number(one, keys[k]), tp_json_number(two, keys[k]));
    /* the predictions file (rank 0: the first stage) holds the last stage's scores */
    FILE *fa = fopen(whole, "r"), *fb = fopen(tp_path(tmp, "runs/reg_pp/test_predictions.tsv"), "r");
    char la[128], lb[128];
    int rows = 0;
    double worst = 0;
    while (fa && fb && fgets(la, sizeof la, fa) && fgets(lb, sizeof lb, fb)) {
        int ia, ib;
        double pa, pb;
        if (sscanf(la, "%d\t%lf", &ia, &pa) != 2 || sscanf(lb, "%d\t%lf", &ib, &pb) != 2) continue;
        CHECK(ia == ib, "row %d: index %d, %d", rows, ia, ib);
        worst = fmax(worst, fabs(pa - pb));
        rows++;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    CHECK(rows == 60 && worst < 1e-4, "%d predictions, the largest difference %g", rows, worst);
    free(one);
    free(two);
    free(out);
}

/* the GPT-2 classifier's head regresses too (a new score head on the bare model) */
static void test_regression_gpt2(void) {
    FILE *f = fopen(tp_path(tmp, "reg_gpt2.yml"), "w");
    fprintf(f, "experiment_name: reg_gpt2\noutput_dir: %s/runs\nseed: 3\nmodel:\n  name: gpt2\n"
               "  task: sequence_classification\n  num_labels: 1\n  n_layer: 2\n  n_head: 2\n  n_embd: 32\n"
               "  block_size: 64\n  pad_token_id: 0\ndata:\n  name: tsv_text\n"
               "  tokenizer: tests/parity/fixtures/hf_gpt2_cls_tiny\n  train_path: %s/stsb_train.tsv\n"
               "  dev_path: %s/stsb_dev.tsv\n  max_len: 48\ntrain:\n  epochs: 2\n  batch_size: 16\n"
               "  eval_strategy: epoch\noptim:\n  name: adamw\n  lr: 1.0e-3\n", tmp, tmp, tmp);
    fclose(f);
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "reg_gpt2.yml"), "reg_gpt2.out", NULL, NULL) == 0, "gpt2 regression");
    double a = hfe_dev_metric(tp_path(tmp, "runs/reg_gpt2/metrics.jsonl"), 30, "loss"),
           r = hfe_dev_metric(tp_path(tmp, "runs/reg_gpt2/metrics.jsonl"), 30, "pearson");
    CHECK(isfinite(a) && a > 0 && !isnan(r), "gpt2: dev loss %g, Pearson %g", a, r);
}

/* a checkpoint with a two-class head: refused for a regression's one
 * output, unless model.ignore_mismatched_sizes starts the head anew (as
 * transformers' ignore_mismatched_sizes); the rest is the bare encoder's
 * (tests/parity/test_hf_bert.c), so the run is the bare encoder's run */
static void test_regression_from_classifier(void) {
    const char *refused[][2] = {
        {"model.pretrained=tests/parity/fixtures/hf_bert_tiny",
         "tensor 'classifier.weight' has shape (2, 32), the model needs (1, 32) (a head of another size: "
         "model.ignore_mismatched_sizes: true starts it anew"},
    };
    hfe_check_refused(tmp, "reg.yml", refused, 1);
    const char *sets[] = {"experiment_name=reg_mm", "model.pretrained=tests/parity/fixtures/hf_bert_tiny",
                          "model.ignore_mismatched_sizes=true", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "reg.yml"), "reg_mm.out", sets, NULL) == 0, "ignore_mismatched_sizes");
    char *s = tp_slurp(tp_path(tmp, "reg_mm.out"));
    CHECK(s && strstr(s, "2 tensor(s) of another shape than the model's left out (model.ignore_mismatched_sizes), "
                         "newly initialised: the first 'classifier.weight' (2, 32) in the checkpoint, (1, 32) in the "
                         "model"), "%s", s);
    free(s);
    hfe_check_same_losses(tp_path(tmp, "runs/reg/metrics.jsonl"), tp_path(tmp, "runs/reg_mm/metrics.jsonl"), 1, 180, 19,
                          "new head on the classifier's encoder");
}

static void test_regression_refused(void) {
    static const char *const cases[][2] = {
        {"train.metrics=accuracy", "train.metrics: accuracy scores a classifier's classes, and the data"},
        {"train.best_metric=dev/f1", "train.best_metric: f1 scores a classifier's classes"},
        {"train.label_smoothing=0.1", "train.label_smoothing: 0.1 smooths class labels"},
        {"model.problem_type=multi_label_classification", "multi_label_classification with model.num_labels 1: one "
                                                          "label that an example has or not is a two-class task"},
        {"model.problem_type=single_label_classification", "single_label_classification with model.num_labels 1"},
        {"model.problem_type=ordinal", "model.problem_type: 'ordinal' is not a problem type"},
        {"model.num_labels=2", "set model.num_labels: 1"},
    };
    hfe_check_refused(tmp, "reg.yml", cases, (int)(sizeof cases / sizeof cases[0]));
    /* problem_type regression without num_labels: a regression too; with 2 labels refused */
    char *cfg = tp_slurp(tp_path(tmp, "reg.yml"));
    const char *line = "  num_labels: 1\n";
    char *at = cfg ? strstr(cfg, line) : NULL;
    if (at) memmove(at, at + strlen(line), strlen(at + strlen(line)) + 1);
    FILE *f = fopen(tp_path(tmp, "reg_nolabels.yml"), "w");
    fputs(cfg ? cfg : "", f);
    fclose(f);
    free(cfg);
    const char *sets[] = {"experiment_name=reg_pt", "model.problem_type=regression", "train.epochs=1", NULL};
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "reg_nolabels.yml"), "reg_pt.out", sets, NULL) == 0,
          "problem_type regression");
    CHECK(!isnan(hfe_dev_metric(tp_path(tmp, "runs/reg_pt/metrics.jsonl"), 15, "pearson")), "problem_type: a regression");
    const char *cases2[][2] = {
        {"model.num_labels=2", "model.problem_type: regression predicts one score per example, and model.num_labels "
                               "is 2"},
    };
    const char *sets2[] = {"experiment_name=refused", "model.problem_type=regression", "model.num_labels=2", NULL};
    CHECK(tp_run((const char *[]){"train", tp_path(tmp, "reg_nolabels.yml"), "--set", sets2[0], "--set", sets2[1],
                                  "--set", sets2[2], NULL}, tp_path(tmp, "refused.out")) == 1, "exit 1");
    char *s = tp_slurp(tp_path(tmp, "refused.out"));
    CHECK(s && strstr(s, cases2[0][1]), "%s", s);
    free(s);
    /* the word tokenizer's models classify */
    f = fopen(tp_path(tmp, "reg_word.yml"), "w");
    fprintf(f, "experiment_name: reg_word\noutput_dir: %s/runs\nmodel:\n  name: bow\n  num_labels: 1\ndata:\n"
               "  name: tsv_text\n  train_path: %s/stsb_train.tsv\n", tmp, tmp);
    fclose(f);
    CHECK(tp_run((const char *[]){"train", tp_path(tmp, "reg_word.yml"), NULL}, tp_path(tmp, "refused.out")) == 1,
          "exit 1");
    s = tp_slurp(tp_path(tmp, "refused.out"));
    CHECK(s && strstr(s, "model.num_labels 1 (a regression: scores, not classes) is for the Hugging Face classifiers"),
          "%s", s);
    free(s);
}

/* transformers' run_glue.py argument file as its users write it: it trains */
static void test_run_glue_arguments(void) {
    FILE *f = fopen(tp_path(tmp, "run_glue_args.json"), "w");
    fprintf(f, "{\"model_name_or_path\": \"tests/parity/fixtures/hf_bert_tiny\",\n"
               " \"train_file\": \"data/sst2_sample/train.tsv\", \"validation_file\": \"data/sst2_sample/dev.tsv\",\n"
               " \"do_train\": true, \"do_eval\": true, \"max_seq_length\": 32, \"per_device_train_batch_size\": 16,\n"
               " \"learning_rate\": 2e-3, \"num_train_epochs\": 1, \"max_train_samples\": 64,\n"
               " \"eval_strategy\": \"epoch\", \"pad_to_max_length\": true, \"overwrite_cache\": false,\n"
               " \"output_dir\": \"%s/glue_out\"}\n", tmp);
    fclose(f);
    CHECK(hfe_utrain(tmp, "train", tp_path(tmp, "run_glue_args.json"), "run_glue.out", NULL, NULL) == 0, "train");
    char *s = tp_slurp(tp_path(tmp, "run_glue.out"));
    CHECK(s && strstr(s, "Num examples = 64") && strstr(s, "Model = bert") && strstr(s, "eval  step 4  dev:") &&
              strstr(s, "train_file: texts to classify (data.name tsv_text)"), "%s", s);
    free(s);
}

/* data/sst2_sample's SPLIT as CSV under other column names: "id,stars,review"
 * (named) or "review,label" (found by run_glue's rule), texts quoted */
static void write_sst2_csv(const char *path, const char *split, bool named) {
    char (*text)[256];
    int *label, n = hfe_read_sst2(split, &text, &label);
    FILE *f = fopen(path, "w");
    CHECK(f && n > 0, "%s", path);
    if (!f) return;
    fprintf(f, named ? "id,stars,review\r\n" : "review,label\r\n");
    for (int k = 0; k < n; k++) {
        if (named) fprintf(f, "%d,%d,", 1000 + k, label[k]);
        fputc('"', f);
        for (const char *c = text[k]; *c; c++) fputs(*c == '"' ? "\"\"" : (char[2]){*c, 0}, f);
        fputc('"', f);
        if (!named) fprintf(f, ",%d", label[k]);
        fprintf(f, "\r\n");
    }
    fclose(f);
}

/* run_classification's text_column_names / label_column_name on CSV files
 * of other column names, and run_glue's rule without them: the same run as
 * the TSVs' (test_run_glue_arguments, run first), and the log says which
 * columns were read */
static void test_named_columns(void) {
    for (int named = 1; named >= 0; named--) {
        char train[64], dev[64], out[64], args[64];
        snprintf(train, sizeof train, "cols%d_train.csv", named);
        snprintf(dev, sizeof dev, "cols%d_dev.csv", named);
        snprintf(out, sizeof out, "cols%d.out", named);
        snprintf(args, sizeof args, "cols%d.json", named);
        write_sst2_csv(tp_path(tmp, train), "train", named);
        write_sst2_csv(tp_path(tmp, dev), "dev", named);
        FILE *f = fopen(tp_path(tmp, args), "w");
        fprintf(f, "{\"model_name_or_path\": \"tests/parity/fixtures/hf_bert_tiny\",\n"
                   " \"train_file\": \"%s/%s\", \"validation_file\": \"%s/%s\",\n%s"
                   " \"do_train\": true, \"do_eval\": true, \"max_seq_length\": 32, \"per_device_train_batch_size\": 16,\n"
                   " \"learning_rate\": 2e-3, \"num_train_epochs\": 1, \"max_train_samples\": 64,\n"
                   " \"eval_strategy\": \"epoch\", \"output_dir\": \"%s/cols%d_out\"}\n", tmp, train, tmp, dev,
                named ? " \"text_column_names\": \"review\", \"label_column_name\": \"stars\",\n" : "", tmp, named);
        fclose(f);
        CHECK(hfe_utrain(tmp, "train", tp_path(tmp, args), out, NULL, NULL) == 0, "train %s", args);
        char *s = tp_slurp(tp_path(tmp, out));
        CHECK(s && strstr(s, "Num examples = 64") &&
                  strstr(s, named ? "cols1_train.csv: text 'review', label 'stars'\n"
                                  : "cols0_train.csv: text 'review', label 'label' (no column has a known text name: "
                                    "the first beside the label, as run_glue takes them"),
              "%s", s);
        free(s);
        char ma[256], mb[256];
        snprintf(ma, sizeof ma, "%s/glue_out/default/metrics.jsonl", tmp);
        snprintf(mb, sizeof mb, "%s/cols%d_out/default/metrics.jsonl", tmp, named);
        hfe_check_same_losses(ma, mb, 4, 4, 1, named ? "text_column_names" : "run_glue's columns");
        double da = hfe_dev_metric(ma, 4, "accuracy"), db = hfe_dev_metric(mb, 4, "accuracy");
        CHECK(!isnan(da) && da == db, "dev accuracy %g vs %g", da, db);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "ut-hfcls")) return 1;
    hfe_write_config(tmp, "roberta", "bert", "hf_roberta_tiny", "  hidden_dropout_prob: 0\n", 32, 3);
    hfe_write_config(tmp, "gpt2cls", "gpt2", "hf_gpt2_cls_tiny", "  task: sequence_classification\n  dropout: 0\n", 32,
                     3);
    RUN(test_roberta);
    RUN(test_label_names);
    RUN(test_gpt2_classifier);
    RUN(test_gpt2_real_bpe);
    RUN(test_refused);
    RUN(test_run_glue_arguments);
    RUN(test_named_columns);
    write_regression_config();
    RUN(test_regression);
    RUN(test_regression_inferred);
    RUN(test_regression_gpt2);
    RUN(test_regression_refused);
    RUN(test_regression_from_classifier);
    /* under mpirun last: its environment turns LeakSanitizer off */
    tp_mpi_env(true);
    RUN(test_gpt2_classifier_ddp);
    RUN(test_regression_ddp);
    RUN(test_regression_pipeline);
    return tp_finish(TEST_SUMMARY(), tmp);
}
