/* Hostile inputs through the `utrain` program: each must end in a clear
 * error (exit status 1, a message naming the file, line or key) and never in
 * a crash, an abort or a silent default. Every case here once crashed or was
 * accepted; the small sst2 bag-of-words run is the vehicle. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <unistd.h>

#include "proc.h"
#include "test.h"
#include "utrain/utrain.h"

static char tmp[256], cfg[512];

static const char *path_in(const char *name) { return tp_path(tmp, name); }

static void write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len) perror(path);
    if (f) fclose(f);
}

static void write_text(const char *path, const char *s) { write_file(path, s, strlen(s)); }

/* Runs utrain with args; its output (malloc'd) into *out, exit code back. */
static int run(const char *const *args, char **out) {
    int rc = tp_run(args, path_in("out.txt"));
    *out = tp_slurp(path_in("out.txt"));
    /* under the sanitizers an error path that leaks or misreads still exits 1 */
    CHECK(!*out || !strstr(*out, "Sanitizer"), "%s", *out);
    return rc;
}

/* utrain train on the sst2 config with one --set; expects exit 1 and msg. */
static void expect_train_error(const char *set, const char *msg) {
    char *s;
    int rc = run((const char *[]){"train", cfg, "--set", set, NULL}, &s);
    CHECK(rc == 1 && s && strstr(s, msg), "--set %s: exit %d, output: %s (want '%s')", set, rc, s, msg);
    free(s);
}

static void write_config(void) {
    snprintf(cfg, sizeof cfg, "%s/sst2.yml", tmp);
    FILE *f = fopen(cfg, "w");
    fprintf(f, "experiment_name: bad\noutput_dir: %s/runs\nseed: 1\nthreads: 1\n"
               "model: {name: bow, n_embd: 8, hidden: 8}\n"
               "data: {name: tsv_text, train_path: data/sst2_sample/train.tsv,\n"
               "       dev_path: data/sst2_sample/dev.tsv, max_len: 16}\n"
               "train: {epochs: 1, batch_size: 16, progress: \"off\"}\n"
               "optim: {name: adamw, lr: 1.0e-3}\n", tmp);
    fclose(f);
}

/* "key=value" in a static buffer (two alternating) */
static const char *kv(const char *key, const char *value) {
    static char buf[2][600];
    static int k;
    k = !k;
    snprintf(buf[k], sizeof buf[k], "%s=%s", key, value);
    return buf[k];
}

/* ---- data files ---- */

static void test_tsv_nul_byte(void) {
    static const char text[] = "sentence\tlabel\ngood\t1\nbad\t0\na\0b\t1\n";
    write_file(path_in("nul.tsv"), text, sizeof text - 1);
    expect_train_error(kv("data.train_path", path_in("nul.tsv")),
                       "nul.tsv:4: NUL byte at byte offset 29");
}

/* A FIFO where a data file or a checkpoint should be is refused at once
 * (opening it for reading would wait for a writer forever): as a data
 * path it is an error naming it; named like the newest checkpoint it is
 * skipped with a warning and the one before it is used. */
static void test_fifo_is_refused_not_waited_on(void) {
    const char *fifo = path_in("train.fifo");
    CHECK(mkfifo(fifo, 0644) == 0, "mkfifo %s", fifo);
    double t0 = tp_now_s();
    expect_train_error(kv("data.train_path", fifo), "train.fifo: not a regular file");
    CHECK(tp_now_s() - t0 < 20, "refused at once (%.1f s)", tp_now_s() - t0);
    char *s;
    int rc = run((const char *[]){"train", cfg, "--set", "experiment_name=fifo", "--set", "train.max_steps=2",
                                  "--set", "train.save_strategy=steps", "--set", "train.save_interval=1", NULL},
                 &s);
    CHECK(rc == 0, "training: exit %d: %s", rc, s);
    free(s);
    const char *ck = path_in("runs/fifo/checkpoints/step_00000003.safetensors");
    CHECK(mkfifo(ck, 0644) == 0, "mkfifo %s", ck);
    rc = run((const char *[]){"train", cfg, "--set", "experiment_name=fifo", "--set", "train.max_steps=4",
                              "--set", "continue_training=true", NULL},
             &s);
    CHECK(rc == 0 && s && strstr(s, "step_00000003.safetensors: not a regular file") &&
              strstr(s, "Resuming from") && strstr(s, "(step 2,"),
          "the FIFO checkpoint is skipped (exit %d): %s", rc, s);
    free(s);
}

/* IDX images the model cannot take: zero height is refused at open naming
 * the file and offset; 14x14 images meet mlp's 784 inputs with an error
 * naming the file and model.sizes (it was a linear layer's shape error in
 * the first step); cnn takes its image_size from them and trains. */
static void write_idx(const char *path, uint32_t magic, int nd, const uint32_t *dims, size_t data) {
    FILE *f = fopen(path, "wb");
    uint32_t be[4] = {__builtin_bswap32(magic)};
    for (int d = 0; d < nd; d++) be[d + 1] = __builtin_bswap32(dims[d]);
    fwrite(be, 4, (size_t)nd + 1, f);
    for (size_t i = 0; i < data; i++) fputc(0, f);
    fclose(f);
}

static void test_idx_images_against_the_model(void) {
    write_idx(path_in("i14.idx"), 0x803, 3, (uint32_t[]){20, 14, 14}, 20 * 14 * 14);
    write_idx(path_in("i0.idx"), 0x803, 3, (uint32_t[]){20, 0, 28}, 0);
    write_idx(path_in("l.idx"), 0x801, 1, (uint32_t[]){20}, 20);
    const char *yml = path_in("idx.yml");
    FILE *f = fopen(yml, "w");
    fprintf(f, "experiment_name: idx\noutput_dir: %s/runs\nthreads: 1\nmodel: {name: mlp}\n"
               "data: {name: idx_images, train_images: %s, train_labels: %s, dev_size: 0}\n"
               "train: {max_steps: 2, batch_size: 4, eval_strategy: \"no\", progress: \"off\"}\n",
            tmp, path_in("i14.idx"), path_in("l.idx"));
    fclose(f);
    char *s, set[700];
    int rc = run((const char *[]){"train", yml, NULL}, &s);
    CHECK(rc == 1 && s && strstr(s, "model.sizes: the first size (the input) is 784, but") &&
              strstr(s, "i14.idx holds 14x14 images (196 inputs)"), "mlp: exit %d: %s", rc, s);
    free(s);
    snprintf(set, sizeof set, "data.train_images=%s", path_in("i0.idx"));
    rc = run((const char *[]){"train", yml, "--set", set, NULL}, &s);
    CHECK(rc == 1 && s && strstr(s, "i0.idx: byte offset 8: the images have height 0"), "zero height: exit %d: %s",
          rc, s);
    free(s);
    rc = run((const char *[]){"train", yml, "--set", "model.name=cnn", "--set", "model.image_size=28", NULL}, &s);
    CHECK(rc == 1 && s && strstr(s, "model.image_size: 28, but") && strstr(s, "set model.image_size: 14"),
          "cnn with image_size 28: exit %d: %s", rc, s);
    free(s);
    rc = run((const char *[]){"train", yml, "--set", "model.name=cnn", NULL}, &s);
    CHECK(rc == 0 && s && strstr(s, "Training done: 2 steps"), "cnn on 14x14: exit %d: %s", rc, s);
    free(s);
}

/* utrain demo with a batch no machine holds says so (it aborted on the
 * allocation before) */
static void test_demo_huge_batch(void) {
    char *s;
    int rc = run((const char *[]){"demo", "--batch-size", "1000000000000", NULL}, &s);
    CHECK(rc == 2 && s && strstr(s, "--batch-size is at most 4096, got 1000000000000"), "exit %d: %s", rc, s);
    free(s);
    rc = run((const char *[]){"demo", "--steps", "99999999999999999999999", NULL}, &s);
    CHECK(rc == 2 && s && strstr(s, "--steps needs a positive integer"), "exit %d: %s", rc, s);
    free(s);
}

/* checkpoint_activations on a model without blocks is refused, not ignored */
static void test_checkpoint_activations_without_blocks(void) {
    expect_train_error("train.checkpoint_activations=true",
                       "train.checkpoint_activations: model bow has no transformer blocks to recompute");
}

static void test_tsv_huge_label(void) {
    write_text(path_in("huge.tsv"), "sentence\tlabel\ngood\t1\nbad\t0\nodd\t2000000000\n");
    expect_train_error(kv("data.train_path", path_in("huge.tsv")),
                       "huge.tsv:4: label 2000000000 makes 2000000001 classes but the file has only 3 examples");
}

/* a hole in the label set (no example of class 1) is reported, and the run goes on */
static void test_tsv_label_hole(void) {
    write_text(path_in("hole.tsv"), "sentence\tlabel\ngood\t2\nbad\t0\nfine\t2\n");
    char *s;
    int rc = run((const char *[]){"train", cfg, "--set", kv("data.train_path", path_in("hole.tsv")),
                                  "--set", "data.dev_path=", "--set", "experiment_name=hole", NULL}, &s);
    CHECK(rc == 0 && s && strstr(s, "hole.tsv: 1 of the 3 classes (labels 0..2) have no example, the first is 1"),
          "exit %d: %s", rc, s);
    free(s);
}

/* on 2 ranks the warning is printed once (rank 0), not by every rank */
static void test_tsv_label_hole_two_ranks(void) {
    char *s;
    int rc = run((const char *[]){"train", cfg, "--nproc", "2", "--set", kv("data.train_path", path_in("hole.tsv")),
                                  "--set", "data.dev_path=", "--set", "experiment_name=hole2", NULL}, &s);
    const char *first = s ? strstr(s, "have no example") : NULL;
    CHECK(rc == 0 && first, "exit %d: %s", rc, s ? s : "(no output)");
    CHECK(first && !strstr(first + 1, "have no example"), "the warning came more than once: %s", s ? s : "");
    free(s);
}

/* ---- sizes that would need absurd memory ---- */

static void test_absurd_sizes(void) {
    expect_train_error("model.n_embd=2000000000", "bow (vocab_size");
    expect_train_error("model.n_embd=2000000000", "GiB of memory");
    expect_train_error("data.max_len=1000000000", "max_len 1000000000 (token ids of");
    expect_train_error("model.num_classes=300000000000", "num_classes 300000000000");
    /* counts whose products would overflow */
    expect_train_error("train.epochs=9223372036854775807", "train.epochs: must be >= 0 and <= 1e+09");
    expect_train_error("train.gradient_accumulation_steps=9223372036854775807",
                       "train.gradient_accumulation_steps: must be >= 1 and <= 1e+06");
    expect_train_error("data.max_len=9223372036854775807", "data.max_len: must be >= 1 and <= 1e+09");
}

/* A GPT-2 vocabulary that is no count is refused as the model's, not passed
 * to the token file's check (which blamed the data file). */
static void test_vocab_not_a_count(void) {
    int32_t head[256] = {20240520, 1, 64};
    uint16_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = (uint16_t)(i % 50);
    char data[sizeof head + sizeof toks];
    memcpy(data, head, sizeof head);
    memcpy(data + sizeof head, toks, sizeof toks);
    write_file(path_in("toks.bin"), data, sizeof data);
    char yml[1200];
    snprintf(yml, sizeof yml,
             "experiment_name: vocab\noutput_dir: %s/runs\nthreads: 1\n"
             "model: {name: gpt2, n_layer: 1, n_head: 2, n_embd: 8, block_size: 8}\n"
             "data: {name: tokens, train_path: %s, seq_len: 8}\ntrain: {max_steps: 1, progress: \"off\"}\n",
             tmp, path_in("toks.bin"));
    write_text(path_in("gpt2_vocab.yml"), yml);
    const char *sets[2] = {"model.vocab_size=-5", "model.vocab_size=abc"};
    const char *want[2] = {"model: vocab_size -5 is not a count of at least 1",
                           "model: option 'vocab_size': 'abc' is not an integer"};
    for (int i = 0; i < 2; i++) {
        char *s;
        int rc = run((const char *[]){"train", path_in("gpt2_vocab.yml"), "--set", sets[i], NULL}, &s);
        CHECK(rc == 1 && s && strstr(s, want[i]), "--set %s: exit %d, output: %s (want '%s')", sets[i], rc, s,
              want[i]);
        free(s);
    }
}

/* a batch or prefetch larger than the data set is capped, not allocated */
static void test_huge_batch_trains(void) {
    const char *sets[] = {"train.batch_size=2000000000", "train.eval_batch_size=2000000000",
                          "data.prefetch=2000000000"};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "experiment_name=big%d", i);
        char *s;
        int rc = run((const char *[]){"train", cfg, "--set", sets[i], "--set", name, NULL}, &s);
        CHECK(rc == 0 && s && strstr(s, "Training done"), "%s: exit %d: %s", sets[i], rc, s);
        free(s);
    }
}

/* ---- checkpoints with a valid checksum but impossible metadata ---- */

/* Rewrites the run's step-15 checkpoint with edit applied to its training
 * state (through the library, so the checksum stays valid). */
static bool rewrite_checkpoint(const char *run, void (*edit)(ut_train_state *)) {
    char path[600], vocab[600], err[512];
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", run);
    snprintf(path, sizeof path, "%s/checkpoints/step_00000015.safetensors", run);
    char *v = tp_slurp(vocab), *size = v ? strstr(v, "size=") : NULL;
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "vocab_size", size ? ut_fmt("%lld", atoll(size + 5)) : "0");
    ut_kv_set(kv, "n_embd", "8");
    ut_kv_set(kv, "hidden", "8");
    free(v);
    ut_model *m = ut_model_create("bow", kv, 1, err, sizeof err);
    ut_kv_free(kv);
    if (!m) return false;
    ut_optim_config oc = ut_optim_defaults(UT_OPTIM_ADAMW);
    ut_optim *o = ut_optim_new(&oc, m->params.flat, m->params.flat_grad, m->params.segs, m->params.n, 0,
                               m->params.numel);
    ut_train_state st;
    bool ok = !ut_ckpt_load(path, m, o, &st, err, sizeof err);
    if (ok) edit(&st);
    ok = ok && !ut_ckpt_save(path, m, o, &st, err, sizeof err);
    if (!ok) fprintf(stderr, "%s\n", err);
    ut_optim_free(o);
    ut_model_free(m);
    return ok;
}

static void cursor_past_end(ut_train_state *st) { st->cursor = 100000; }
static void negative_step(ut_train_state *st) { st->step = -7, st->best_step = -1; }

static void test_impossible_checkpoint(void) {
    char *s;
    char dir[600];
    snprintf(dir, sizeof dir, "%s", path_in("runs/ckpt"));
    int rc = run((const char *[]){"train", cfg, "--set", "experiment_name=ckpt", NULL}, &s);
    CHECK(rc == 0, "training: exit %d: %s", rc, s);
    free(s);
    CHECK(rewrite_checkpoint(dir, cursor_past_end), "cannot rewrite the checkpoint");
    rc = run((const char *[]){"train", cfg, "--set", "experiment_name=ckpt", "--set", "continue_training=true",
                              "--set", "train.epochs=2", NULL}, &s);
    CHECK(rc == 1 && s && strstr(s, "\"train.cursor\" is 100000, past the end of the epoch (the training set has 240"),
          "resume: exit %d: %s", rc, s);
    free(s);
    CHECK(rewrite_checkpoint(dir, negative_step), "cannot rewrite the checkpoint");
    rc = run((const char *[]){"test", dir, NULL}, &s);
    CHECK(rc == 1 && s && strstr(s, "\"train.step\" is -7") && !strstr(s, "step -7)"), "test: exit %d: %s", rc, s);
    free(s);
}

/* ---- config files ---- */

static void test_config_files(void) {
    struct { const char *text, *msg; } cases[] = {
        {"", "empty.yml: no keys (the file is empty"},
        {"optim: {lr: \"0.001\"}\n", "empty.yml:1: optim.lr: \"0.001\" is a string in YAML (quoted)"},
        {"seed: !!str 1\n", "empty.yml:1: seed: '1' is a string in YAML (tagged !!str)"},
        {"experiment_name: \"x\nseed: 1\nmodel: {name: cnn}\ntrain: {epochs: 1} # \"\n",
         "empty.yml:1: experiment_name: the quoted value runs from line 1 to line 4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(path_in("empty.yml"), cases[i].text);
        char *s;
        int rc = run((const char *[]){"train", path_in("empty.yml"), NULL}, &s);
        CHECK(rc == 1 && s && strstr(s, cases[i].msg), "case %zu: exit %d: %s", i, rc, s);
        free(s);
    }
}

/* ---- run files ---- */

static int count(const char *s, const char *what) {
    int k = 0;
    for (const char *p = s; p && (p = strstr(p, what)); p++) k++;
    return k;
}

/* a torn last line of metrics.jsonl is cut off on resume, not merged into */
static void test_torn_metrics_line(void) {
    char *s, metrics[600];
    snprintf(metrics, sizeof metrics, "%s", path_in("runs/torn/metrics.jsonl"));
    int rc = run((const char *[]){"train", cfg, "--set", "experiment_name=torn", NULL}, &s);
    CHECK(rc == 0, "training: exit %d: %s", rc, s);
    free(s);
    int lines = tp_count_lines(metrics);
    FILE *f = fopen(metrics, "a");
    if (f) fputs("{\"step\": 16, \"epo", f), fclose(f);
    rc = run((const char *[]){"train", cfg, "--set", "experiment_name=torn", "--set", "continue_training=true",
                              "--set", "train.epochs=2", NULL}, &s);
    CHECK(rc == 0 && s && strstr(s, "metrics.jsonl: cut off a torn last line (17 bytes)"), "resume: exit %d: %s", rc, s);
    free(s);
    char *m = tp_slurp(metrics);
    CHECK(m && tp_count_lines(metrics) > lines && !strstr(m, "\"epo{") && count(m, "{") == count(m, "}\n"),
          "metrics.jsonl: %s", m);
    free(m);
}

/* Puts a full-disk device where path was: a node like /dev/full (writes fail
 * with ENOSPC), not a link to it, since links are refused. Needs CAP_MKNOD. */
static bool plant_full_disk(const char *path) {
    unlink(path);
    if (mknod(path, S_IFCHR | 0666, makedev(1, 7)) == 0) return true;
    printf("  skipped: mknod %s: needs CAP_MKNOD (root)\n", path);
    return false;
}

/* metrics.jsonl failing to write is reported once, and training goes on */
static void test_metrics_write_fails_once(void) {
    char *s;
    CHECK(tp_run((const char *[]){"train", cfg, "--set", "experiment_name=full", "--set", "train.max_steps=1", NULL},
                 path_in("out.txt")) == 0, "first run failed");
    if (!plant_full_disk(path_in("runs/full/metrics.jsonl"))) return;
    int rc = run((const char *[]){"train", cfg, "--set", "experiment_name=full", "--set", "continue_training=true",
                                  "--set", "train.log_interval=1", "--set", "train.max_steps=6", NULL}, &s);
    CHECK(rc == 0 && s && count(s, "metrics.jsonl failed") == 1 && strstr(s, "Training done") &&
              strstr(s, "the console, the log file, TensorBoard go on"),
          "exit %d: %s", rc, s);
    free(s);
    /* the log file too: reported once, naming what is left */
    if (!plant_full_disk(path_in("runs/full/logger_logs/training_0.log"))) return;
    rc = run((const char *[]){"train", cfg, "--set", "experiment_name=full", "--set", "continue_training=true",
                              "--set", "train.log_interval=1", "--set", "train.max_steps=9", NULL}, &s);
    CHECK(rc == 0 && s && count(s, "training_0.log failed") == 1 && strstr(s, "Training done") &&
              strstr(s, "it stops there, the console, TensorBoard go on"),
          "exit %d: %s", rc, s);
    free(s);
}

/* A symbolic link planted in a run directory is refused, naming it, and the
 * file it points to is left as it was: the run's own files (log, metrics,
 * lock, resolved config, results), its subdirectories, and the temporary
 * file of a metrics rewind. */
static void test_planted_links_refused(void) {
    char *s;
    CHECK(tp_run((const char *[]){"train", cfg, "--set", "experiment_name=links", "--set", "train.max_steps=2",
                                  NULL}, path_in("out.txt")) == 0, "first run failed");
    write_text(path_in("victim.txt"), "keep me\n");
    const char *files[] = {"metrics.jsonl", "logger_logs/training_0.log", ".lock", "config.yml",
                           "metrics.jsonl.tmp", "checkpoints", "tensorboard", "logger_logs"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char rel[300], moved[300];
        snprintf(rel, sizeof rel, "runs/links/%s", files[i]);
        snprintf(moved, sizeof moved, "runs/links/%s.saved", files[i]);
        bool dir = i >= 5;
        if (dir) CHECK(rename(path_in(rel), path_in(moved)) == 0, "%s: rename", rel);
        else unlink(path_in(rel));
        CHECK(symlink(path_in("victim.txt"), path_in(rel)) == 0, "symlink %s", rel);
        /* a resume that would rewind metrics.jsonl: the first run went to step 2 */
        int rc = run((const char *[]){"train", cfg, "--set", "experiment_name=links", "--set",
                                      "continue_training=true", "--set", "train.max_steps=4", NULL}, &s);
        char want[400];
        snprintf(want, sizeof want, "%s is a symbolic link", files[i]);
        if (!strcmp(files[i], "metrics.jsonl.tmp"))
            CHECK(rc == 0 || (rc == 1 && s && strstr(s, want)), "%s: exit %d: %s", rel, rc, s);
        else
            CHECK(rc == 1 && s && strstr(s, want), "%s: exit %d: %s", rel, rc, s);
        free(s);
        char *v = tp_slurp(path_in("victim.txt"));
        CHECK(v && !strcmp(v, "keep me\n"), "%s: the link's target was written: %s", rel, v);
        free(v);
        unlink(path_in(rel));
        if (dir) CHECK(rename(path_in(moved), path_in(rel)) == 0, "%s: rename back", rel);
    }
    /* evaluation's results file, and the export directory */
    CHECK(symlink(path_in("victim.txt"), path_in("runs/links/dev_results.json")) == 0, "symlink");
    int rc = run((const char *[]){"test", path_in("runs/links"), NULL}, &s);
    CHECK(rc == 1 && s && strstr(s, "dev_results.json is a symbolic link"), "test: exit %d: %s", rc, s);
    free(s);
    char *v = tp_slurp(path_in("victim.txt"));
    CHECK(v && !strcmp(v, "keep me\n"), "test wrote through the link: %s", v);
    free(v);
}

/* ---- signals during evaluation ---- */

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* A dev set that takes tens of seconds to evaluate with a wide model. */
static void write_big_dev(void) {
    FILE *f = fopen(path_in("bigdev.tsv"), "w");
    const char *w[] = {"good", "bad", "fine", "dull", "great", "awful"};
    fputs("sentence\tlabel\n", f);
    for (int i = 0; i < 100000; i++)
        fprintf(f, "%s %s %s movie\t%d\n", w[i % 6], w[i / 6 % 6], w[i / 36 % 6], i % 2);
    fclose(f);
}

/* utrain train (experiment name, dev file), 3 steps, an evaluation after each */
static pid_t spawn_eval_run(const char *name, const char *dev, bool resume, const char *out) {
    static char sets[3][600];
    snprintf(sets[0], sizeof sets[0], "experiment_name=%s", name);
    snprintf(sets[1], sizeof sets[1], "data.dev_path=%s", dev);
    snprintf(sets[2], sizeof sets[2], "continue_training=%s", resume ? "true" : "false");
    const char *args[] = {"train", cfg, "--set", sets[0], "--set", sets[1], "--set", sets[2],
                          "--set", "model.n_embd=2048", "--set", "model.hidden=2048",
                          "--set", "train.max_steps=3", "--set", "train.eval_strategy=steps",
                          "--set", "train.eval_interval=1", "--set", "train.eval_batch_size=64",
                          "--set", "train.log_interval=1", "--set", "train.progress=lines", NULL};
    return tp_spawn(args, out);
}

/* Waits (up to 60 s) until the output file shows text. */
static bool wait_for(const char *out, const char *text) {
    for (int i = 0; i < 6000; i++) {
        char *s = tp_slurp(out);
        bool found = s && strstr(s, text);
        free(s);
        if (found) return true;
        usleep(10000);
    }
    return false;
}

/* SIGTERM during a long evaluation stops within a batch, writes the
 * checkpoint of the step before it, and the resumed run ends with the same
 * weights as a run never stopped. */
static void test_sigterm_abandons_eval(void) {
    char out[600], dev[600], big[600];
    snprintf(out, sizeof out, "%s", path_in("sig.out"));
    snprintf(big, sizeof big, "%s", path_in("bigdev.tsv"));
    snprintf(dev, sizeof dev, "data/sst2_sample/dev.tsv");
    pid_t pid = spawn_eval_run("sig", big, false, out);
    CHECK(wait_for(out, "step 1/3"), "the run did not reach step 1");
    usleep(300000); /* well into the evaluation */
    double t0 = now_s();
    kill(pid, SIGTERM);
    int rc = tp_wait(pid);
    double secs = now_s() - t0;
    char *s = tp_slurp(out);
    CHECK(rc == 75 && secs < 3 && s && strstr(s, "eval  step 1  abandoned: stop signal"),
          "exit %d after %.1f s: %s", rc, secs, s);
    free(s);
    CHECK(tp_wait(spawn_eval_run("sig", dev, true, out)) == 0, "resume failed: %s", out);
    CHECK(tp_wait(spawn_eval_run("straight", dev, false, out)) == 0, "straight run failed");
    char a[700], b[700];
    snprintf(a, sizeof a, "%s", path_in("runs/sig/checkpoints/step_00000003.safetensors"));
    snprintf(b, sizeof b, "%s", path_in("runs/straight/checkpoints/step_00000003.safetensors"));
    CHECK(tp_same_weights(a, b), "stopped + resumed differs from straight: %s %s", a, b);
}

/* A second Ctrl-C exits at once (130) without waiting for a boundary. */
static void test_second_signal_exits_now(void) {
    char out[600];
    snprintf(out, sizeof out, "%s", path_in("sig2.out"));
    pid_t pid = spawn_eval_run("sig2", path_in("bigdev.tsv"), false, out);
    CHECK(wait_for(out, "step 1/3"), "the run did not reach step 1");
    usleep(300000);
    kill(pid, SIGINT);
    usleep(20000);
    kill(pid, SIGINT);
    int rc = tp_wait(pid);
    char *s = tp_slurp(out);
    CHECK(rc == 130 && s && strstr(s, "second signal: exiting now, without a checkpoint"), "exit %d: %s", rc, s);
    free(s);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-badinput")) return 1;
    write_config();
    RUN(test_config_files);
    RUN(test_vocab_not_a_count);
    RUN(test_tsv_nul_byte);
    RUN(test_fifo_is_refused_not_waited_on);
    RUN(test_idx_images_against_the_model);
    RUN(test_checkpoint_activations_without_blocks);
    RUN(test_demo_huge_batch);
    RUN(test_tsv_huge_label);
    RUN(test_tsv_label_hole);
    RUN(test_absurd_sizes);
    RUN(test_huge_batch_trains);
    RUN(test_impossible_checkpoint);
    RUN(test_torn_metrics_line);
    RUN(test_metrics_write_fails_once);
    RUN(test_planted_links_refused);
    write_big_dev();
    RUN(test_sigterm_abandons_eval);
    RUN(test_second_signal_exits_now);
    /* the job under mpirun last: its environment turns LeakSanitizer off */
    tp_mpi_env(true);
    RUN(test_tsv_label_hole_two_ranks);
    return tp_finish(TEST_SUMMARY(), tmp);
}
