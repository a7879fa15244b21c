/* End to end through the `utrain` program: example configs, config errors,
 * run directory contents, exact resume (mid-epoch, across epochs, after
 * SIGTERM), gradient accumulation, corrupt checkpoints, test mode. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "test.h"
#include "utrain/utrain.h"

static char tmp[256];

/* A fast config: a small MLP on Fashion-MNIST, dropout on (so the RNG state
 * matters), a schedule that does not depend on max_steps (so runs of
 * different lengths agree step for step). */
static const char *write_config(const char *name, const char *extra) {
    static char paths[4][512];
    static int k;
    char *path = paths[k = (k + 1) % 4];
    snprintf(path, sizeof paths[0], "%s/%s.yml", tmp, name);
    FILE *f = fopen(path, "w");
    fprintf(f,
            "experiment_name: %s\noutput_dir: %s/runs\nseed: 7\n"
            "model: {name: mlp, sizes: [784, 64, 10], dropout: 0.1}\n"
            "data: {name: idx_images, dev_size: 59000}\n"
            "train: {batch_size: 32, log_interval: 1, eval_strategy: \"no\", save_strategy: steps,\n"
            "        save_interval: 10, save_total_limit: 0, progress: lines}\n"
            "optim: {name: adamw, lr: 2.0e-3, schedule: step, step_size: 7, gamma: 0.5, warmup_steps: 3}\n%s",
            name, tmp, extra ? extra : "");
    fclose(f);
    return path;
}

static void check_same_losses(const char *ma, const char *mb, int from, int to) {
    for (int s = from; s <= to; s++) {
        char a[64] = "?", b[64] = "?";
        CHECK(tp_loss_at(ma, "train", s, a, sizeof a) && tp_loss_at(mb, "train", s, b, sizeof b) && !strcmp(a, b),
              "step %d: loss %s uninterrupted, %s resumed", s, a, b);
    }
}

/* ---- a minimal JSON validator for metrics.jsonl and the result files ---- */
static const char *json_value(const char *p);
static const char *ws(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    return p;
}
static const char *json_string(const char *p) {
    if (*p++ != '"') return NULL;
    while (*p && *p != '"') p += *p == '\\' ? 2 : 1;
    return *p ? p + 1 : NULL;
}
static const char *json_value(const char *p) {
    p = ws(p);
    if (*p == '"') return json_string(p);
    if (*p == '{') {
        p = ws(p + 1);
        if (*p == '}') return p + 1;
        for (;;) {
            if (!(p = json_string(ws(p)))) return NULL;
            p = ws(p);
            if (*p++ != ':' || !(p = json_value(p))) return NULL;
            p = ws(p);
            if (*p == '}') return p + 1;
            if (*p++ != ',') return NULL;
        }
    }
    if (!strncmp(p, "null", 4) || !strncmp(p, "true", 4)) return p + 4;
    if (!strncmp(p, "false", 5)) return p + 5;
    char *end;
    strtod(p, &end);
    return end == p ? NULL : end;
}
static bool valid_json_object(const char *s) {
    const char *e = *ws(s) == '{' ? json_value(s) : NULL;
    return e && !*ws(e);
}

/* ---- tests ---- */
static void test_config_errors(void) {
    const char *bad = tp_path(tmp, "bad.yml"), *out = tp_path(tmp, "bad.out");
    FILE *f = fopen(bad, "w");
    fprintf(f, "model:\n  name: cnn\ntrain:\n  batch_sise: 3\n");
    fclose(f);
    CHECK(tp_run((const char *[]){"train", bad, NULL}, out) == 1, "unknown key exits 1");
    char *s = tp_slurp(out);
    CHECK(s && strstr(s, "bad.yml:4") && strstr(s, "train.batch_sise") && strstr(s, "did you mean train.batch_size"),
          "message: %s", s);
    free(s);
    CHECK(tp_run((const char *[]){"train", write_config("cfgerr", NULL), "--set", "train.epochs=two", NULL}, out) == 1,
          "bad --set exits 1");
    s = tp_slurp(out);
    CHECK(s && strstr(s, "--set") && strstr(s, "train.epochs") && strstr(s, "two"), "message: %s", s);
    free(s);
    CHECK(tp_run((const char *[]){"train", tp_path(tmp, "missing.yml"), NULL}, out) == 1, "missing file exits 1");
    s = tp_slurp(out);
    CHECK(s && strstr(s, "missing.yml"), "message: %s", s);
    free(s);
    CHECK(tp_run((const char *[]){"train", NULL}, out) == 2, "no config: usage error");
}

static void test_run_directory_and_test_mode(void) {
    const char *cfg = write_config("rundir", NULL);
    char out[512];
    snprintf(out, sizeof out, "%s/rundir.out", tmp);
    int rc = tp_run((const char *[]){"train", cfg, "--set", "train.max_steps=20", "--set", "train.eval_strategy=steps",
                                  "--set", "train.eval_interval=10", "--set", "train.best_metric=dev/accuracy", NULL},
                 out);
    char *s = tp_slurp(out);
    CHECK(rc == 0, "train exits 0: %s", s);
    CHECK(s && strstr(s, "Total optimization steps = 20") && strstr(s, "Num examples = 1000"), "summary: %s", s);
    free(s);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/runs/rundir", tmp);
    const char *files[] = {"config.yml", "metrics.jsonl", "logger_logs/training_0.log",
                           "checkpoints/step_00000020.safetensors"};
    for (int i = 0; i < 4; i++) CHECK(access(tp_path(dir, files[i]), R_OK) == 0, "%s exists", files[i]);
    DIR *d = opendir(tp_path(dir, "tensorboard"));
    int events = 0;
    for (struct dirent *e; d && (e = readdir(d));) events += strstr(e->d_name, "tfevents") != NULL;
    if (d) closedir(d);
    CHECK(events == 1, "one TensorBoard event file, found %d", events);

    s = tp_slurp(tp_path(dir, "metrics.jsonl"));
    int lines = 0, dev = 0;
    for (char *line = s, *nl; line && *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) break;
        *nl = 0;
        lines++;
        CHECK(valid_json_object(line) && strstr(line, "\"step\": ") && strstr(line, "\"epoch\": ") &&
                  strstr(line, "\"loss\": "), "metrics line: %s", line);
        if (strstr(line, "\"split\": \"train\"")) CHECK(strstr(line, "\"lr\": ") != NULL, "train line has lr");
        dev += strstr(line, "\"split\": \"dev\"") && strstr(line, "\"accuracy\": ");
    }
    free(s);
    CHECK(lines == 22 && dev == 2, "%d lines, %d dev lines", lines, dev);

    rc = tp_run((const char *[]){"test", dir, NULL}, out);
    s = tp_slurp(out);
    CHECK(rc == 0, "test exits 0: %s", s);
    free(s);
    for (int i = 0; i < 2; i++) {
        s = tp_slurp(tp_path(dir, i ? "test_results.json" : "dev_results.json"));
        CHECK(s && valid_json_object(s) && strstr(s, "\"loss\"") && strstr(s, "\"accuracy\"") &&
                  strstr(s, "\"checkpoint\"") && strstr(s, "\"step\": "), "results: %s", s);
        free(s);
    }
}

/* 17 steps, stop, resume to 40 (the epoch of 1000 examples has 32 batches, so
 * the stop is mid-epoch and the resumed run crosses an epoch) = 40 straight. */
static void test_exact_resume(void) {
    const char *a = write_config("straight", NULL), *b = write_config("resumed", NULL);
    const char *out = tp_path(tmp, "resume.out");
    CHECK(tp_run_shown((const char *[]){"train", a, "--set", "train.max_steps=40", NULL}, out, 0, NULL) == 0,
          "straight run");
    CHECK(tp_run_shown((const char *[]){"train", b, "--set", "train.max_steps=17", NULL}, out, 0, NULL) == 0,
          "first half");
    int rc = tp_run((const char *[]){"train", b, "--set", "train.max_steps=40", "--set", "continue_training=true", NULL}, out);
    char *s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, "Resuming from") && strstr(s, "step 17"), "resumed: %s", s);
    free(s);
    char ra[512], rb[512];
    snprintf(ra, sizeof ra, "%s/runs/straight", tmp);
    snprintf(rb, sizeof rb, "%s/runs/resumed", tmp);
    CHECK(tp_same_weights(tp_path(ra, "checkpoints/step_00000040.safetensors"),
                       tp_path(rb, "checkpoints/step_00000040.safetensors")), "bit-identical final weights");
    check_same_losses(tp_path(ra, "metrics.jsonl"), tp_path(rb, "metrics.jsonl"), 18, 40);
}

/* SIGTERM mid-run: checkpoint and exit 75; resuming finishes like an uninterrupted run. */
static void test_sigterm_then_resume(void) {
    const char *cfg = write_config("preempt", NULL), *ref = write_config("preempt_ref", NULL);
    const char *out = tp_path(tmp, "preempt.out");
    char metrics[512];
    snprintf(metrics, sizeof metrics, "%s/runs/preempt/metrics.jsonl", tmp);
    pid_t pid = tp_spawn((const char *[]){"train", cfg, "--set", "train.max_steps=3000", NULL}, out);
    for (int i = 0; i < 3000 && tp_count_lines(metrics) < 25; i++) usleep(2000);
    kill(pid, SIGTERM);
    int rc = tp_wait(pid);
    char *s = tp_slurp(out);
    CHECK(rc == UT_EXIT_PREEMPTED && s && strstr(s, "Stopped by signal"), "exit %d: %s", rc, s);
    free(s);
    int stopped = tp_count_lines(metrics);
    CHECK(stopped >= 25 && stopped < 3000, "stopped at step %d", stopped);
    CHECK(tp_run_shown((const char *[]){"train", cfg, "--set", "train.max_steps=60", "--set", "continue_training=true",
                                        NULL},
                       out, 0, NULL) == 0 || stopped >= 60,
          "resume to 60");
    if (stopped < 60) {
        CHECK(tp_run_shown((const char *[]){"train", ref, "--set", "train.max_steps=60", NULL}, out, 0, NULL) == 0,
              "reference");
        char ra[512], rb[512];
        snprintf(ra, sizeof ra, "%s/runs/preempt_ref/checkpoints/step_00000060.safetensors", tmp);
        snprintf(rb, sizeof rb, "%s/runs/preempt/checkpoints/step_00000060.safetensors", tmp);
        CHECK(tp_same_weights(ra, rb), "weights after SIGTERM + resume equal the uninterrupted run's");
    }
}

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) ? -1 : (long)sb.st_size;
}

/* train.save_only_model (Hugging Face's save_only_model): checkpoints of the
 * weights alone, which utrain test reads and no run resumes from (refused,
 * not a step back to an older one); a stop signal's checkpoint is whole and
 * resumes. */
static void test_save_only_model(void) {
    const char *cfg = write_config("modelonly", NULL), *full = write_config("modelfull", NULL);
    const char *out = tp_path(tmp, "modelonly.out");
    CHECK(tp_run_shown((const char *[]){"train", cfg, "--set", "train.max_steps=20", "--set", "save_only_model=true",
                                        NULL},
                       out, 0, NULL) == 0,
          "train");
    CHECK(tp_run_shown((const char *[]){"train", full, "--set", "train.max_steps=20", NULL}, out, 0, NULL) == 0,
          "train whole");
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/runs/modelonly/checkpoints/step_00000020.safetensors", tmp);
    snprintf(b, sizeof b, "%s/runs/modelfull/checkpoints/step_00000020.safetensors", tmp);
    long sa = file_size(a), sb = file_size(b);
    CHECK(ut_ckpt_model_only(a) && !ut_ckpt_model_only(b), "model only: %d, whole: %d", ut_ckpt_model_only(a),
          ut_ckpt_model_only(b));
    CHECK(sa > 0 && sb > 2 * sa && sb < 4 * sa, "sizes: weights alone %ld, with AdamW's moments %ld", sa, sb);
    CHECK(tp_weights_rel_diff(a, b) == 0, "the same weights either way: %g", tp_weights_rel_diff(a, b));
    CHECK(tp_run_shown((const char *[]){"test", cfg, NULL}, out, 0, NULL) == 0, "utrain test reads it");
    int rc = tp_run((const char *[]){"train", cfg, "--set", "train.max_steps=30", "--set", "save_only_model=true",
                                  "--set", "continue_training=true", NULL},
                    out);
    char *s = tp_slurp(out);
    CHECK(rc == 1 && s && strstr(s, "step_00000020.safetensors holds the model's weights alone") &&
              strstr(s, "load_dir: "),
          "resume refused: exit %d: %s", rc, s ? s : "");
    free(s);
    /* a stop signal: the checkpoint it writes resumes */
    const char *stop = write_config("modelstop", NULL);
    char metrics[512], dir[512];
    snprintf(metrics, sizeof metrics, "%s/runs/modelstop/metrics.jsonl", tmp);
    snprintf(dir, sizeof dir, "%s/runs/modelstop/checkpoints", tmp);
    pid_t pid = tp_spawn((const char *[]){"train", stop, "--set", "train.max_steps=3000", "--set",
                                          "save_only_model=true", NULL},
                         out);
    for (int i = 0; i < 3000 && tp_count_lines(metrics) < 25; i++) usleep(2000);
    kill(pid, SIGTERM);
    rc = tp_wait(pid);
    int64_t steps[8];
    int k = ut_ckpt_list(dir, steps, 8);
    char last[600];
    if (k > 0) ut_ckpt_path(last, sizeof last, dir, steps[0]);
    CHECK(rc == UT_EXIT_PREEMPTED && k > 0 && !ut_ckpt_model_only(last), "stopped (exit %d), newest checkpoint "
          "whole", rc);
    CHECK(k > 0 && tp_run_shown((const char *[]){"train", stop, "--set", ut_fmt("train.max_steps=%lld",
                                                                               (long long)steps[0] + 3),
                                                 "--set", "save_only_model=true", "--set", "continue_training=true",
                                                 NULL},
                                out, 0, NULL) == 0,
          "resumed from the stop's checkpoint");
}

static void flip_byte(const char *path, long from_end) {
    FILE *f = fopen(path, "r+b");
    fseek(f, -from_end, SEEK_END);
    int c = fgetc(f);
    fseek(f, -from_end, SEEK_END);
    fputc(c ^ 0x10, f);
    fclose(f);
}

/* A bit-flipped or truncated newest checkpoint is reported and the one before used. */
static void test_corrupt_checkpoint_falls_back(void) {
    const char *out = tp_path(tmp, "corrupt.out");
    for (int mode = 0; mode < 2; mode++) {
        const char *name = mode ? "truncated" : "flipped";
        const char *cfg = write_config(name, NULL);
        CHECK(tp_run_shown((const char *[]){"train", cfg, "--set", "train.max_steps=20", NULL}, out, 0, NULL) == 0,
              "%s: train", name);
        char ck[512];
        snprintf(ck, sizeof ck, "%s/runs/%s/checkpoints/step_00000020.safetensors", tmp, name);
        if (mode) CHECK(truncate(ck, 5000) == 0, "truncate");
        else flip_byte(ck, 100);
        int rc = tp_run((const char *[]){"train", cfg, "--set", "train.max_steps=25", "--set", "continue_training=true", NULL}, out);
        char *s = tp_slurp(out);
        CHECK(rc == 0 && s && strstr(s, "cannot resume from") && strstr(s, "step_00000020") &&
                  strstr(s, "Resuming from") && strstr(s, "step_00000010"), "%s: %s", name, s);
        free(s);
        /* steps 11-20 were lost with the bad checkpoint and trained again:
         * metrics.jsonl has every step once, the second training's */
        char metrics[512];
        snprintf(metrics, sizeof metrics, "%s/runs/%s/metrics.jsonl", tmp, name);
        s = tp_slurp(metrics);
        for (int step = 1; step <= 25; step++) {
            char want[64];
            int times = 0;
            snprintf(want, sizeof want, "{\"step\": %d, ", step);
            for (const char *p = s; p && (p = strstr(p, want)); p++) times++;
            CHECK(times == 1, "%s: step %d has %d lines in metrics.jsonl", name, step, times);
        }
        free(s);
        /* TensorBoard too: the resumed run's event file drops them (read as
         * TensorBoard reads it, by the committed stdlib reader) */
        if (!access("tests/tools/read_tfevents.py", R_OK) && !system("python3 -c '' 2>/dev/null")) {
            char cmd[700];
            snprintf(cmd, sizeof cmd, "python3 tests/tools/read_tfevents.py --tag train/loss %s/runs/%s/tensorboard "
                     "> %s/%s.tb", tmp, name, tmp, name);
            CHECK(system(cmd) == 0, "%s: %s", name, cmd);
            snprintf(cmd, sizeof cmd, "%s/%s.tb", tmp, name);
            s = tp_slurp(cmd);
            int lines = 0, last = 0;
            for (const char *p = s; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL, lines++) {
                int step = atoi(p);
                CHECK(step == last + 1, "%s: TensorBoard step %d after %d", name, step, last);
                last = step;
            }
            CHECK(lines == 25, "%s: %d train/loss scalars in TensorBoard, want 25:\n%s", name, lines, s);
            free(s);
        }
    }
}

/* Accumulating 2 micro-batches of 16 equals one batch of 32. With SGD the
 * weights are linear in the gradients, so summation-order differences stay at
 * float rounding (AdamW would magnify them where gradients are near zero). */
static void test_gradient_accumulation(void) {
    const char *out = tp_path(tmp, "accum.out");
    const char *a = write_config("accum1", NULL), *b = write_config("accum2", NULL);
    const char *common[] = {"--set", "train.max_steps=6", "--set", "data.shuffle=false", "--set", "model.dropout=0",
                            "--set", "optim.name=sgd", "--set", "optim.momentum=0.9"};
#define COMMON common[0], common[1], common[2], common[3], common[4], common[5], common[6], common[7], common[8], common[9]
    CHECK(tp_run_shown((const char *[]){"train", a, COMMON, NULL}, out, 0, NULL) == 0, "batch 32");
    CHECK(tp_run_shown((const char *[]){"train", b, COMMON, "--set", "train.batch_size=16", "--set",
                                        "train.gradient_accumulation_steps=2", NULL},
                       out, 0, NULL) == 0,
          "2 x 16");
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/runs/accum1/checkpoints/step_00000006.safetensors", tmp);
    snprintf(pb, sizeof pb, "%s/runs/accum2/checkpoints/step_00000006.safetensors", tmp);
    double worst = tp_weights_rel_diff(pa, pb);
    CHECK(worst >= 0 && worst < 1e-5, "weights differ by %.3g (relative)", worst);
}

/* Every example config runs a few steps. */
static void test_example_configs(void) {
    const char *out = tp_path(tmp, "examples.out");
    char runs[512], kjv[512], opt[3][600];
    snprintf(runs, sizeof runs, "output_dir=%s/examples", tmp);
    int rc = tp_run((const char *[]){"train", "configs/fmnist_cnn.yml", "--set", runs, "--set", "train.max_steps=3",
                                  "--set", "data.dev_size=200", "--set", "train.eval_strategy=steps",
                                  "--set", "train.eval_interval=3", NULL}, out);
    char *s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, "dev/accuracy"), "fmnist_cnn: %s", s);
    free(s);

    snprintf(kjv, sizeof kjv, "scripts/prepare-kjv.sh %s/kjv %s > %s 2>&1", tmp, tp_program(), out);
    CHECK(system(kjv) == 0, "prepare-kjv.sh");
    const char *split[3] = {"train", "dev", "test"};
    for (int i = 0; i < 3; i++) snprintf(opt[i], sizeof opt[i], "data.%s_path=%s/kjv/%s.bin", split[i], tmp, split[i]);
    rc = tp_run((const char *[]){"train", "configs/gpt2_kjv.yml", "--set", runs, "--set", "train.max_steps=3", "--set",
                              opt[0], "--set", opt[1], "--set", opt[2], "--set", "train.eval_interval=3", "--set", "optim.warmup_steps=1", NULL}, out);
    s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, "perplexity"), "gpt2_kjv: %s", s);
    free(s);

    rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", "train.max_steps=5",
                              "--set", "train.eval_strategy=steps", "--set", "train.eval_interval=5", NULL}, out);
    s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, "accuracy"), "sst2_bow: %s", s);
    free(s);
}

/* train.label_smoothing (Hugging Face's label_smoothing_factor) reaches the
 * run's loss in training and evaluation and utrain test's: the run says so,
 * its first loss differs from the plain run's, and test mode's dev loss is
 * the smoothed one the last evaluation logged (the op's values are
 * test_ops_values'). */
static void test_label_smoothing(void) {
    const char *out = tp_path(tmp, "smooth.out");
    char runs[512], metrics[2][700], a[64], b[64], dev[64];
    snprintf(runs, sizeof runs, "output_dir=%s/smooth", tmp);
    const char *names[2] = {"plain", "smoothed"};
    for (int i = 0; i < 2; i++) {
        char exp[64];
        snprintf(exp, sizeof exp, "experiment_name=%s", names[i]);
        int rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", exp, "--set",
                                      "train.max_steps=4", "--set", "train.eval_strategy=steps", "--set",
                                      "train.eval_interval=4", "--set", "train.log_interval=1", "--set",
                                      i ? "label_smoothing_factor=0.2" : "train.label_smoothing=0", NULL},
                        out);
        char *s = tp_slurp(out);
        CHECK(rc == 0 && s && (strstr(s, "Label smoothing = 0.2") != NULL) == (i == 1), "%s: %s", names[i], s);
        free(s);
        snprintf(metrics[i], sizeof metrics[i], "%s/smooth/%s/metrics.jsonl", tmp, names[i]);
    }
    CHECK(tp_loss_at(metrics[0], "train", 1, a, sizeof a) && tp_loss_at(metrics[1], "train", 1, b, sizeof b) &&
              strcmp(a, b),
          "the first losses: plain %s, smoothed %s", a, b);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/smooth/smoothed", tmp);
    CHECK(tp_run((const char *[]){"test", dir, NULL}, out) == 0, "utrain test");
    char *r = tp_slurp(tp_path(tmp, "smooth/smoothed/dev_results.json"));
    const char *l = r ? strstr(r, "\"loss\": ") : NULL;
    CHECK(l && tp_loss_at(metrics[1], "dev", 4, dev, sizeof dev) && fabs(strtod(l + 8, NULL) - strtod(dev, NULL)) < 1e-6,
          "test mode's dev loss %s, the run's last evaluation %s", l ? l + 8 : "?", dev);
    free(r);
}

/* train.neftune_alpha (Hugging Face's neftune_noise_alpha) on a small GPT-2:
 * the run says so; the untrained model's dev loss (eval_on_start) is the
 * plain run's, since evaluation adds no noise; the first training loss is
 * not, since training does; two runs with the noise are bit-identical (the
 * noise comes from the seeded Philox streams). A model without token
 * embeddings refuses the key (test_config). */
/* A small GPT-2 on the byte tokens of the SST-2 sample (batch 4 x 16
 * tokens), runs in TMP/NAME, as TMP/NAME.yml with train's settings
 * train_keys; its path (static). */
static const char *tiny_gpt2(const char *name, const char *train_keys) {
    static char cfg[600];
    char shard[512];
    if (!tp_tokenize_sample(tmp, shard, sizeof shard)) return NULL;
    snprintf(cfg, sizeof cfg, "%s/%s.yml", tmp, name);
    FILE *f = fopen(cfg, "w");
    if (!f) return NULL;
    fprintf(f,
            "experiment_name: plain\noutput_dir: %s/%s\nseed: 3\n"
            "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 16}\n"
            "data: {name: tokens, train_path: %s, dev_path: %s, seq_len: 16}\n"
            "train: {batch_size: 4, progress: lines, %s}\n"
            "optim: {name: adamw, lr: 1.0e-3}\ndist: {timeout_s: 120}\n",
            tmp, name, shard, shard, train_keys);
    fclose(f);
    return cfg;
}

static void test_neftune(void) {
    char runs[512];
    const char *cfg = tiny_gpt2("neft", "max_steps: 3, log_interval: 1, eval_strategy: steps, eval_interval: 3, "
                                        "eval_on_start: true, save_strategy: \"no\"");
    if (!cfg) {
        CHECK(0, "config");
        return;
    }
    snprintf(runs, sizeof runs, "%s/neft", tmp);
    const char *out = tp_path(tmp, "neft.out");
    const char *names[3] = {"plain", "noisy", "noisy2"};
    char metrics[3][700];
    for (int i = 0; i < 3; i++) {
        char exp[64];
        snprintf(exp, sizeof exp, "experiment_name=%s", names[i]);
        int rc = tp_run((const char *[]){"train", cfg, "--set", exp, "--set",
                                      i ? "neftune_noise_alpha=5" : "train.neftune_alpha=0", NULL},
                        out);
        char *s = tp_slurp(out);
        CHECK(rc == 0 && s && (strstr(s, "NEFTune = alpha 5") != NULL) == (i > 0), "%s: %s", names[i], s);
        free(s);
        snprintf(metrics[i], sizeof metrics[i], "%s/%s/metrics.jsonl", runs, names[i]);
    }
    char a[64], b[64], c[64], d[64];
    CHECK(tp_loss_at(metrics[0], "dev", 0, a, sizeof a) && tp_loss_at(metrics[1], "dev", 0, b, sizeof b) &&
              !strcmp(a, b),
          "dev loss before training: plain %s, noisy %s (evaluation adds no noise)", a, b);
    CHECK(tp_loss_at(metrics[0], "train", 1, a, sizeof a) && tp_loss_at(metrics[1], "train", 1, b, sizeof b) &&
              strcmp(a, b),
          "first training loss: plain %s, noisy %s (training adds noise)", a, b);
    CHECK(tp_loss_at(metrics[1], "train", 3, c, sizeof c) && tp_loss_at(metrics[2], "train", 3, d, sizeof d) &&
              !strcmp(c, d),
          "two noisy runs: step 3 losses %s and %s", c, d);
}

/* Trains TMP/NAME.yml, body (a format of tmp then the token shard's path)
 * written there, and checks that the run's summary has the line `says` and
 * that its train lines' rates are want[0..n), within tol; the run's
 * metrics are in TMP/RUN/metrics.jsonl. */
static void check_rates(const char *name, const char *body, const char *run, const char *says, const double *want,
                        int n, double tol) {
    char shard[512], cfg[600], out[600], m[700];
    if (!tp_tokenize_sample(tmp, shard, sizeof shard)) {
        CHECK(0, "tokenize");
        return;
    }
    snprintf(cfg, sizeof cfg, "%s/%s.yml", tmp, name);
    snprintf(out, sizeof out, "%s/%s.out", tmp, name);
    FILE *f = fopen(cfg, "w");
    fprintf(f, body, tmp, shard);
    fclose(f);
    int rc = tp_run((const char *[]){"train", cfg, NULL}, out);
    char *s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, says), "%s: %s", name, s ? s : "");
    free(s);
    snprintf(m, sizeof m, "%s/%s/metrics.jsonl", tmp, run);
    char *t = tp_slurp(m);
    for (int k = 0; k < n; k++) {
        char key[64];
        snprintf(key, sizeof key, "{\"step\": %d, ", k + 1);
        const char *line = t ? strstr(t, key) : NULL, *l = line ? strstr(line, "\"lr\": ") : NULL;
        double got = l ? strtod(l + 6, NULL) : -1;
        CHECK(fabs(got - want[k]) < tol, "%s step %d: lr %.9g, want %.9g", name, k + 1, got, want[k]);
    }
    free(t);
}

/* A file of FlagAI's Trainer arguments trains with its Trainer's recipe:
 * warm_up's AnnealingLR stepped per micro-batch (2 per step here: W = 0.25 x
 * 16 iterations = 4, rates lr i/W, then its cosine decay
 * lr (0.1 + 0.45 (1 + cos(pi (i - W)/16))) at the step's last micro-batch
 * i), and the run says which defaults it applied. */
static void test_flagai_recipe(void) {
    const double want[8] = {2.5e-3,          7.5e-3,          9.913533762e-3, 9.241613255e-3,
                            8.000066049e-3, 6.377906449e-3, 4.622093551e-3, 2.999933951e-3};
    check_rates("flagai",
                "env_type: pytorch\nexperiment_name: fa\noutput_dir: %s/fa\nbatch_size: 2\nlog_interval: 1\n"
                "lr: 1.0e-2\nwarm_up: 0.25\ngradient_accumulation_steps: 2\npytorch_device: cpu\nload_dir: None\n"
                "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 16}\n"
                "data: {name: tokens, train_path: %s, seq_len: 16}\ntrain: {max_steps: 8, progress: lines}\n",
                "fa/fa",
                "FlagAI's Trainer defaults (a file of its arguments that does not say otherwise): weight decay 0.1, "
                "gradient clipping at 1.0, seed 1234, eval_interval 100 (with dev data), save_interval 1000\n",
                want, 8, 1e-9);
}

/* A file of TrainingArguments fields warms up as transformers does: from
 * rate 0 over ceil(0.15 x 10) = 2 steps, then the linear decay (rates 0,
 * lr/2, lr, 7/8 lr, ...), and the run names the defaults it applied. */
static void test_hf_warmup(void) {
    const double want[5] = {0, 5e-4, 1e-3, 8.75e-4, 7.5e-4};
    check_rates("hfw",
                "output_dir: %s/hfw\nexperiment_name: w\nper_device_train_batch_size: 4\nlearning_rate: 1.0e-3\n"
                "warmup_ratio: 0.15\nmax_steps: 10\nlogging_steps: 1\nsave_strategy: \"no\"\n"
                "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 16}\n"
                "data: {name: tokens, train_path: %s, seq_len: 16}\n",
                "hfw/w",
                "TrainingArguments' defaults (a file of its fields that does not say otherwise): weight_decay 0, "
                "lr_scheduler_type linear, max_grad_norm 1.0, per_device_eval_batch_size 8, warmup from rate 0, "
                "eval_strategy no, load_best_model_at_end false (the run's model is its last)\n",
                want, 5, 1e-10);
}

/* num_input_tokens_seen of run TMP/DIR/NAME's train line at step (-1: none). */
static double tokens_seen(const char *dir, const char *name, int step) {
    char m[700], key[64];
    snprintf(m, sizeof m, "%s/%s/%s/metrics.jsonl", tmp, dir, name);
    snprintf(key, sizeof key, "{\"step\": %d, ", step);
    char *s = tp_slurp(m);
    double v = -1;
    for (char *line = s ? strstr(s, key) : NULL; line; line = strstr(line + 1, key)) {
        char *end = strchr(line, '\n'), *at = strstr(line, "\"num_input_tokens_seen\": ");
        if (at && (!end || at < end) && strstr(line, "\"split\": \"train\"") < end) {
            v = strtod(at + 25, NULL);
            break;
        }
    }
    free(s);
    return v;
}

/* A number of run TMP/DIR/NAME's train_results.json (NAN: no file or key). */
static double train_result(const char *dir, const char *name, const char *key) {
    char path[700], k[64];
    snprintf(path, sizeof path, "%s/%s/%s/train_results.json", tmp, dir, name);
    snprintf(k, sizeof k, "\"%s\": ", key);
    char *s = tp_slurp(path), *at = s ? strstr(s, k) : NULL;
    double v = at ? strtod(at + strlen(k), NULL) : NAN;
    free(s);
    return v;
}

/* The train loss logged at step of run TMP/DIR/NAME (NAN: none). */
static double logged_loss(const char *dir, const char *name, int step) {
    char m[700], v[64];
    snprintf(m, sizeof m, "%s/%s/%s/metrics.jsonl", tmp, dir, name);
    return tp_loss_at(m, "train", step, v, sizeof v) ? strtod(v, NULL) : NAN;
}

/* train_results.json (transformers' train metrics, as its examples save
 * them) of the runs below: total_flos is 6 x the tiny GPT-2's 25472
 * non-embedding parameters (transformers' num_parameters(exclude_embeddings
 * =True) of that configuration; wte and wpe left out) x 256 tokens, whether
 * or not the tokens are counted for the log, and across a resume (the
 * checkpoint keeps the count); train_loss is the mean of the run's step
 * losses: (3 x the line at step 3 + step 4's) / 4, and for the resumed run
 * its own two steps; a run without train lines (log_interval 0) has one
 * too. */
static void check_train_results(void) {
    const double flos = 6.0 * 25472 * 256;
    const char *runs[4] = {"straight", "halves", "off", "quiet"};
    for (int i = 0; i < 4; i++) {
        double f = train_result("seen", runs[i], "total_flos");
        CHECK(f == flos, "%s: total_flos %.17g, want %.17g", runs[i], f, flos);
        CHECK(train_result("seen", runs[i], "epoch") > 0 && train_result("seen", runs[i], "train_runtime") > 0 &&
                  train_result("seen", runs[i], "train_samples_per_second") > 0 &&
                  train_result("seen", runs[i], "train_steps_per_second") > 0,
              "%s: epoch, runtime and speeds", runs[i]);
    }
    double want = (3 * logged_loss("seen", "straight", 3) + logged_loss("seen", "straight", 4)) / 4;
    double got = train_result("seen", "straight", "train_loss");
    CHECK(fabs(got - want) <= 1e-6 * fabs(want), "straight: train_loss %.9g, want %.9g", got, want);
    want = (logged_loss("seen", "halves", 3) + logged_loss("seen", "halves", 4)) / 2;
    got = train_result("seen", "halves", "train_loss");
    CHECK(fabs(got - want) <= 1e-6 * fabs(want), "halves (resumed at 2): train_loss %.9g, want %.9g", got, want);
    got = train_result("seen", "quiet", "train_loss");
    double ref = train_result("seen", "off", "train_loss");
    CHECK(fabs(got - ref) <= 1e-6 * fabs(ref), "quiet: train_loss %.9g, the logged run's %.9g", got, ref);
}

/* A train line's number key of run TMP/DIR/NAME at step (NAN: none). */
static double train_metric(const char *dir, const char *name, int step, const char *key) {
    char m[700], k[64], skey[64];
    snprintf(m, sizeof m, "%s/%s/%s/metrics.jsonl", tmp, dir, name);
    snprintf(skey, sizeof skey, "{\"step\": %d, ", step);
    snprintf(k, sizeof k, "\"%s\": ", key);
    char *s = tp_slurp(m);
    double v = NAN;
    for (char *line = s ? strstr(s, skey) : NULL; line; line = strstr(line + 1, skey)) {
        char *end = strchr(line, '\n'), *at = strstr(line, k);
        if (end && strstr(line, "\"split\": \"train\"") < end) {
            if (at && at < end) v = strtod(at + strlen(k), NULL);
            break;
        }
    }
    free(s);
    return v;
}

/* Throughput in model FLOPs (src/core/flops.c): the tiny GPT-2's example
 * of 16 tokens is 3 x (16 x 2 x (2 layers x 32 x 384 + 32 x 256) + 2 layers
 * x 4 x 136 pairs x 32) = 3250176 FLOPs forward and backward, so a train
 * line's tflops over its samples_per_s is that (the evaluation after every
 * step is neither training time nor training FLOPs); mfu is tflops over
 * train.peak_tflops; without a peak (the CPU's is not known) no mfu. */
static void test_mfu(void) {
    const char *cfg = tiny_gpt2("mfu", "max_steps: 4, log_interval: 2, eval_strategy: steps, eval_interval: 1, "
                                       "save_strategy: \"no\"");
    const char *out = tp_path(tmp, "mfu.out");
    bool ok = cfg && !tp_run((const char *[]){"train", cfg, "--set", "experiment_name=peak", "--set",
                                              "train.peak_tflops=0.5", NULL}, out);
    char *said = tp_slurp(out);
    CHECK(ok && said && strstr(said, "MFU = the products' model FLOPs over 0.5 TFLOP/s (train.peak_tflops)") &&
              strstr(said, "TFLOP/s  mfu "),
          "run with a peak: %s", said ? said : "");
    free(said);
    ok = cfg && !tp_run((const char *[]){"train", cfg, "--set", "experiment_name=nopeak", NULL}, out);
    CHECK(ok, "run without a peak");
    for (int step = 2; step <= 4; step += 2) {
        double tf = train_metric("mfu", "peak", step, "tflops"), sps = train_metric("mfu", "peak", step, "samples_per_s");
        double per = tf * 1e12 / sps, mfu = train_metric("mfu", "peak", step, "mfu");
        CHECK(fabs(per - 3250176) <= 1e-6 * 3250176, "step %d: %.9g FLOPs per example (tflops %g, %g samples/s)",
              step, per, tf, sps);
        CHECK(fabs(mfu - tf / 0.5) <= 1e-6 * mfu, "step %d: mfu %g, tflops %g over 0.5", step, mfu, tf);
        CHECK(train_metric("mfu", "nopeak", step, "tflops") > 0 && isnan(train_metric("mfu", "nopeak", step, "mfu")),
              "step %d without a peak: tflops %g, mfu %g", step, train_metric("mfu", "nopeak", step, "tflops"),
              train_metric("mfu", "nopeak", step, "mfu"));
    }
}

/* train.profile_step (DeepSpeed's flops_profiler): the step after one is
 * profiled: its model FLOPs (4 examples x 3250176), the latencies and rates,
 * and every op's line unless train.profile_detailed is false; into
 * train.profile_file when given; a DeepSpeed file's flops_profiler does the
 * same; UT_PROFILE_OPS (a whole-run profile) and an unwritable file are
 * refused before training. */
static void test_step_profile(void) {
    const char *cfg = tiny_gpt2("prof", "max_steps: 3, log_interval: 1, eval_strategy: \"no\", save_strategy: \"no\"");
    const char *out = tp_path(tmp, "prof.out");
    char file[600], ds[600], dsset[700];
    snprintf(file, sizeof file, "train.profile_file=%s/prof.txt", tmp);
    snprintf(ds, sizeof ds, "%s/ds.json", tmp);
    snprintf(dsset, sizeof dsset, "deepspeed_config=%s", ds);
    FILE *f = fopen(ds, "w");
    if (f) {
        fputs("{\"train_micro_batch_size_per_gpu\": 4, \"flops_profiler\": {\"enabled\": true, \"profile_step\": 2,"
              " \"module_depth\": -1, \"top_modules\": 1, \"detailed\": false, \"output_file\": null}}\n", f);
        fclose(f);
    }
    const char *sets[4][2] = {{"train.profile_step=1", "experiment_name=a"},
                              {"train.profile_step=1", "train.profile_detailed=false"},
                              {"train.profile_step=0", file},
                              {dsset, "experiment_name=ds"}};
    for (int i = 0; i < 4; i++) {
        int rc = cfg ? tp_run((const char *[]){"train", cfg, "--set", sets[i][0], "--set", sets[i][1], NULL}, out) : -1;
        char *said = tp_slurp(out);
        char *prof = i == 2 ? tp_slurp(tp_path(tmp, "prof.txt")) : said ? strdup(said) : NULL;
        const char *step = i == 2 ? "Step 1 (after 0 steps)" : i == 3 ? "Step 3 (after 2 steps)" : "Step 2 (after 1 step)";
        bool detailed = i == 0 || i == 2;
        CHECK(rc == 0 && prof && strstr(prof, step) && strstr(prof, "model FLOPs of the step         0.013 G") &&
                  strstr(prof, "forward FLOPs                   0.004334 G") &&
                  strstr(prof, "backward FLOPs                  0.008667 G") && strstr(prof, "step latency") &&
                  (strstr(prof, "Per op (forward, backward)") != NULL) == detailed &&
                  (!detailed || strstr(prof, "  linear ")),
              "profile %d (%s, %s): rc %d\n%s", i, sets[i][0], sets[i][1], rc, prof ? prof : "(none)");
        CHECK(i != 2 || (said && strstr(said, "Step profile (train.profile_step): written to ") &&
                         !strstr(said, "model FLOPs of the step")),
              "with train.profile_file the console says where it went: %s", said ? said : "");
        free(said);
        free(prof);
    }
    /* a run that never reaches its profiled step leaves the file as it was */
    snprintf(file, sizeof file, "train.profile_file=%s/prof.txt", tmp);
    int rc = cfg ? tp_run((const char *[]){"train", cfg, "--set", "train.profile_step=5", "--set", file, NULL}, out) : -1;
    char *kept = tp_slurp(tp_path(tmp, "prof.txt"));
    CHECK(rc == 0 && kept && strstr(kept, "Step 1 (after 0 steps)"), "the earlier profile was not kept: rc %d, %s", rc,
          kept ? kept : "(no file)");
    free(kept);
    setenv("UT_PROFILE_OPS", "1", 1);
    rc = cfg ? tp_run((const char *[]){"train", cfg, "--set", "train.profile_step=1", NULL}, out) : -1;
    unsetenv("UT_PROFILE_OPS");
    char *said = tp_slurp(out);
    CHECK(rc == 1 && said && strstr(said, "train.profile_step: UT_PROFILE_OPS is set, which profiles the whole run; "
                                          "unset one of them"),
          "UT_PROFILE_OPS and train.profile_step: rc %d, %s", rc, said ? said : "");
    free(said);
    snprintf(file, sizeof file, "train.profile_file=%s/no/such/dir/p.txt", tmp);
    rc = cfg ? tp_run((const char *[]){"train", cfg, "--set", "train.profile_step=1", "--set", file, NULL}, out) : -1;
    said = tp_slurp(out);
    CHECK(rc == 1 && said && strstr(said, "/no/such/dir/p.txt: cannot write it (No such file or directory)"),
          "an unwritable train.profile_file: rc %d, %s", rc, said ? said : "");
    free(said);
}

/* train.wall_clock_breakdown (DeepSpeed's): after each train line, the
 * interval's mean time per step in forward, backward, the reduction and the
 * optimizer step; a DeepSpeed file's wall_clock_breakdown: true sets it. */
static void test_wall_clock_breakdown(void) {
    const char *cfg = tiny_gpt2("wcb", "max_steps: 3, log_interval: 1, eval_strategy: \"no\", save_strategy: \"no\"");
    const char *out = tp_path(tmp, "wcb.out");
    char ds[600], dsset[700];
    snprintf(ds, sizeof ds, "%s/wcb.json", tmp);
    snprintf(dsset, sizeof dsset, "deepspeed_config=%s", ds);
    FILE *f = fopen(ds, "w");
    if (f) {
        fputs("{\"wall_clock_breakdown\": true}\n", f);
        fclose(f);
    }
    const char *sets[2] = {"train.wall_clock_breakdown=true", dsset};
    for (int i = 0; i < 2; i++) {
        int rc = cfg ? tp_run((const char *[]){"train", cfg, "--set", sets[i], NULL}, out) : -1;
        char *said = tp_slurp(out);
        int lines = 0;
        double fwd = 0, bwd = 0, step = 0;
        for (char *p = said; p && (p = strstr(p, "\ntime (ms) per step | forward: ")); p++) {
            lines++;
            fwd = strtod(p + 31, NULL);
            char *b = strstr(p, "| backward: "), *st = strstr(p, "| step: ");
            bwd = b ? strtod(b + 12, NULL) : -1;
            step = st ? strtod(st + 8, NULL) : -1;
        }
        CHECK(rc == 0 && lines == 3 && fwd > 0 && bwd > 0 && step >= 0 && strstr(said, "| backward_allreduce: "),
              "%s: rc %d, %d lines (forward %g, backward %g, step %g): %s", sets[i], rc, lines, fwd, bwd, step,
              said ? said : "");
        free(said);
    }
}

/* train.count_input_tokens (Hugging Face's include_num_input_tokens_seen):
 * batches of 4 x 16 tokens are 64 a step, counted into every train line;
 * logged every 3 steps with checkpoints every 2, the count in a checkpoint
 * (train.input_tokens_seen) includes the steps not yet logged, and a run
 * resumed from step 2 goes on from there; off, no count is logged. */
static void test_input_tokens_seen(void) {
    const char *cfg = tiny_gpt2("seen", "max_steps: 4, log_interval: 3, eval_strategy: \"no\", save_strategy: steps, "
                                        "save_interval: 2, save_total_limit: 0");
    const char *out = tp_path(tmp, "seen.out");
    bool ok = cfg && !tp_run((const char *[]){"train", cfg, "--set", "experiment_name=straight", "--set",
                                              "include_num_input_tokens_seen=true", NULL}, out);
    ok &= cfg && !tp_run((const char *[]){"train", cfg, "--set", "experiment_name=halves", "--set",
                                          "train.count_input_tokens=all", "--set", "train.max_steps=2", NULL}, out);
    ok &= cfg && !tp_run((const char *[]){"train", cfg, "--set", "experiment_name=halves", "--set",
                                          "train.count_input_tokens=non_padding", "--set", "continue_training=true",
                                          NULL}, out);
    ok &= cfg && !tp_run((const char *[]){"train", cfg, "--set", "experiment_name=off", NULL}, out);
    ok &= cfg && !tp_run((const char *[]){"train", cfg, "--set", "experiment_name=quiet", "--set",
                                          "train.log_interval=0", NULL}, out);
    CHECK(ok, "runs");
    check_train_results();
    CHECK(tokens_seen("seen", "straight", 3) == 192 && tokens_seen("seen", "straight", 4) == 256,
          "logged: %g at step 3, %g at step 4", tokens_seen("seen", "straight", 3), tokens_seen("seen", "straight", 4));
    char ck[700];
    const char *want[2] = {"128", "256"};
    for (int i = 0; i < 2; i++) {
        snprintf(ck, sizeof ck, "%s/seen/straight/checkpoints/step_%08d.safetensors", tmp, 2 * (i + 1));
        char err[256];
        ut_st_file *f = ut_st_open(ck, err, sizeof err);
        const char *v = f ? ut_st_meta(f, "train.input_tokens_seen") : NULL;
        CHECK(v && !strcmp(v, want[i]), "checkpoint at step %d: %s", 2 * (i + 1), v ? v : "(none)");
        ut_st_close(f);
    }
    /* a token stream has no padding: non_padding counts the same */
    CHECK(tokens_seen("seen", "halves", 4) == 256, "resumed: %g at step 4", tokens_seen("seen", "halves", 4));
    CHECK(tokens_seen("seen", "off", 3) == -1, "off: nothing logged");
    /* images hold no tokens: the key is refused, naming the data */
    int rc = tp_run((const char *[]){"train", write_config("seen_img", NULL), "--set", "train.count_input_tokens=all",
                                     "--set", "train.max_steps=1", NULL}, out);
    char *s = tp_slurp(out);
    CHECK(rc == 1 && s && strstr(s, "train.count_input_tokens: all counts tokens; the training data (") &&
              strstr(s, "train-images-idx3-ubyte.gz) holds none: remove the key"),
          "count_input_tokens on images: rc %d: %s", rc, s);
    free(s);
}

/* train.log_first_step (Hugging Face's logging_first_step): step 1 is
 * logged besides every log_interval-th, and the interval after it starts
 * at step 2 */
static void test_log_first_step(void) {
    const char *out = tp_path(tmp, "first.out");
    char runs[512], metrics[600], v[64];
    snprintf(runs, sizeof runs, "output_dir=%s/first", tmp);
    int rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", "train.max_steps=8",
                                  "--set", "train.log_interval=4", "--set", "logging_first_step=true", NULL},
                    out);
    snprintf(metrics, sizeof metrics, "%s/first/sst2_bow/metrics.jsonl", tmp);
    CHECK(rc == 0 && tp_loss_at(metrics, "train", 1, v, sizeof v) && tp_loss_at(metrics, "train", 4, v, sizeof v) &&
              tp_loss_at(metrics, "train", 8, v, sizeof v) && !tp_loss_at(metrics, "train", 2, v, sizeof v),
          "train lines at steps 1, 4 and 8 only");
}

/* data.seed (Hugging Face's data_seed) seeds the training order alone: a
 * run with data_seed equal to its seed is the plain run, another data_seed
 * another order (the same initial weights: seed) */
static void test_data_seed(void) {
    const char *out = tp_path(tmp, "dseed.out");
    const char *sets[3] = {"train.max_steps=2", "data_seed=42", "data_seed=6"}; /* sst2_bow's seed is 42 */
    char runs[512], metrics[3][600], loss[3][64];
    snprintf(runs, sizeof runs, "output_dir=%s/dseed", tmp);
    for (int i = 0; i < 3; i++) {
        char exp[64];
        snprintf(exp, sizeof exp, "experiment_name=d%d", i);
        int rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", exp, "--set",
                                      "train.max_steps=2", "--set", "train.log_interval=1", "--set", sets[i], NULL},
                        out);
        snprintf(metrics[i], sizeof metrics[i], "%s/dseed/d%d/metrics.jsonl", tmp, i);
        CHECK(rc == 0 && tp_loss_at(metrics[i], "train", 1, loss[i], sizeof loss[i]), "run %d (%s)", i, sets[i]);
    }
    CHECK(!strcmp(loss[0], loss[1]) && strcmp(loss[0], loss[2]), "first losses: seed's order %s, data_seed 42 %s, "
          "data_seed 6 %s", loss[0], loss[1], loss[2]);
}

/* The rate a train line of metrics.jsonl logged at step (NAN: none). */
static double lr_at(const char *metrics, int step) {
    char *s = tp_slurp(metrics), key[64];
    snprintf(key, sizeof key, "{\"step\": %d, ", step);
    double lr = NAN;
    for (char *line = s ? strstr(s, key) : NULL; line; line = strstr(line + 1, key)) {
        char *end = strchr(line, '\n'), *l = strstr(line, "\"lr\": ");
        if (l && (!end || l < end) && strstr(line, "\"split\": \"train\"") < (end ? end : line + strlen(line))) {
            lr = strtod(l + 6, NULL);
            break;
        }
    }
    free(s);
    return lr;
}

/* transformers' warmup_stable_decay with its lr_scheduler_kwargs, given on
 * the command line: warmup, lr until the last num_decay_steps, then half a
 * cosine wave down (the rates each step trained with, as logged) */
static void test_wsd_schedule(void) {
    const char *out = tp_path(tmp, "wsd.out");
    char runs[512], metrics[600];
    snprintf(runs, sizeof runs, "output_dir=%s/wsd", tmp);
    int rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", "train.max_steps=8",
                                  "--set", "train.log_interval=1", "--set", "lr_scheduler_type=warmup_stable_decay",
                                  "--set", "lr_scheduler_kwargs.num_decay_steps=3", "--set", "warmup_steps=2",
                                  NULL},
                    out);
    snprintf(metrics, sizeof metrics, "%s/wsd/sst2_bow/metrics.jsonl", tmp);
    const double want[8] = {2.5e-3, 5e-3, 5e-3, 5e-3, 5e-3, 5e-3, 3.75e-3, 1.25e-3};
    CHECK(rc == 0, "the run failed: %s", out);
    for (int s = 1; rc == 0 && s <= 8; s++) {
        double lr = lr_at(metrics, s);
        CHECK(fabs(lr - want[s - 1]) <= 1e-5 * want[s - 1], "step %d: lr %.9g, want %.9g", s, lr, want[s - 1]);
    }
}

/* An evaluation-driven rate (schedule sets, `name` the runs' folder) on the
 * bow model, evaluating every step: a straight run of 8 steps says each of
 * `said` and runs at the rates want; one stopped at 4 and resumed runs at
 * the same rates with the same losses. The step-4 checkpoint's metadata:
 * the keys of `meta` with those (numeric) values. */
static void rate_runs(const char *name, const char *const *sched, const double want[8], const char *const *said_want,
                      const char *const meta[][2]) {
    char out[600], runs[512], straight[700], halves[700], ck[720];
    snprintf(out, sizeof out, "%s/%s.out", tmp, name);
    snprintf(runs, sizeof runs, "output_dir=%s/%s", tmp, name);
    const char *set[] = {"--set", "train.eval_strategy=steps", "--set", "train.eval_interval=1", "--set",
                         "train.log_interval=1", "--set", "train.save_strategy=steps", "--set",
                         "train.save_interval=2", "--set", runs};
    const char *argv[64] = {"train", "configs/sst2_bow.yml"};
    int a = 2;
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++) argv[a++] = set[i];
    for (int i = 0; sched[i]; i++) argv[a++] = "--set", argv[a++] = sched[i];
    int base = a;
    argv[a++] = "--set", argv[a++] = "experiment_name=straight", argv[a++] = "--set", argv[a++] = "train.max_steps=8";
    argv[a] = NULL;
    int rc = tp_run(argv, out);
    char *said = tp_slurp(out);
    for (int i = 0; said_want[i]; i++)
        CHECK(rc == 0 && said && strstr(said, said_want[i]), "%s: straight run, not said: %s\n%s", name, said_want[i],
              said ? said : "");
    free(said);
    a = base;
    argv[a++] = "--set", argv[a++] = "experiment_name=halves", argv[a++] = "--set", argv[a++] = "train.max_steps=4";
    argv[a] = NULL;
    rc |= tp_run(argv, out);
    argv[a - 1] = "train.max_steps=8";
    argv[a++] = "--set", argv[a++] = "continue_training=true";
    argv[a] = NULL;
    rc |= tp_run(argv, out);
    CHECK(rc == 0, "%s: the runs failed: %s", name, out);
    snprintf(straight, sizeof straight, "%s/%s/straight/metrics.jsonl", tmp, name);
    snprintf(halves, sizeof halves, "%s/%s/halves/metrics.jsonl", tmp, name);
    for (int k = 1; rc == 0 && k <= 8; k++)
        CHECK(fabs(lr_at(straight, k) - want[k - 1]) <= 1e-9 && fabs(lr_at(halves, k) - want[k - 1]) <= 1e-9,
              "%s step %d: lr %.9g straight, %.9g resumed, want %.9g", name, k, lr_at(straight, k), lr_at(halves, k),
              want[k - 1]);
    if (rc == 0) check_same_losses(straight, halves, 1, 8);
    /* the checkpoint keeps the evaluations' state */
    snprintf(ck, sizeof ck, "%s/%s/halves/checkpoints/step_00000004.safetensors", tmp, name);
    char err[256];
    ut_st_file *f = ut_st_open(ck, err, sizeof err);
    for (int i = 0; meta[i][0]; i++) {
        const char *v = f ? ut_st_meta(f, meta[i][0]) : NULL;
        bool same = v && strtod(v, NULL) == strtod(meta[i][1], NULL);
        CHECK(same, "%s: checkpoint at step 4: %s is %s, want %s (%s)", name, meta[i][0], v ? v : "-", meta[i][1],
              f ? "" : err);
    }
    ut_st_close(f);
}

/* optim.schedule: plateau (torch's ReduceLROnPlateau) lowers the rate
 * after evaluations: with an improvement that no metric can make (an
 * absolute threshold of 1e9 in mode max) every evaluation after the first
 * is a bad one, so with patience 1 the rate halves after the 3rd, 5th and
 * 7th (the logged rate is the one a step trained at). A run stopped at step
 * 4 and resumed goes on at the rate and count of bad evaluations its
 * checkpoint kept. */
static void test_plateau_schedule(void) {
    const char *sched[] = {"optim.schedule=plateau", "optim.plateau_mode=max", "optim.plateau_threshold_mode=abs",
                           "optim.plateau_threshold=1e9", "optim.plateau_patience=1", "optim.plateau_factor=0.5", NULL};
    const double want[8] = {5e-3, 5e-3, 5e-3, 2.5e-3, 2.5e-3, 1.25e-3, 1.25e-3, 6.25e-4};
    const char *said[] = {"plateau: dev/accuracy has not improved for 2 evaluations: learning rate 0.005 -> 0.0025",
                          NULL};
    const char *const meta[][2] = {{"optim.plateau_lr", "0.0025"}, {"optim.plateau_bad_evals", "1"}, {NULL, NULL}};
    rate_runs("plateau", sched, want, said, meta);
}

/* optim.schedule greedy, patience 0: the first evaluation improves on
 * nothing and doubles the rate; none beats the threshold after it, so each
 * halves it, down to the floor 0.002; the second fall there (reset_start 2)
 * starts again from 0.005, whose first evaluation doubles it again. The
 * smoothing window's two metrics are in the checkpoint. */
static void test_greedy_schedule(void) {
    const char *sched[] = {"optim.schedule=greedy", "optim.greedy_mode=max", "optim.greedy_threshold=1e9",
                           "optim.greedy_patience=0", "optim.greedy_factor=0.5", "optim.min_lr=0.002",
                           "optim.greedy_reset_start=2", "optim.greedy_smooth=true", "optim.greedy_window_size=2",
                           NULL};
    const double want[8] = {5e-3, 1e-2, 5e-3, 2.5e-3, 2e-3, 5e-3, 1e-2, 5e-3};
    const char *said[] = {"greedy: dev/accuracy has improved 1 evaluation in a row: learning rate 0.005 -> 0.01",
                          "greedy: dev/accuracy has not improved for 1 evaluation: learning rate 0.005 -> 0.0025",
                          "greedy: 2 falls at the floor optim.min_lr: learning rate 0.002 -> 0.005 (the start)", NULL};
    const char *const meta[][2] = {{"optim.plateau_lr", "0.002"}, {"optim.greedy_reset_left", "1"},
                                   {"optim.greedy_good_evals", "0"}, {"optim.greedy_warmup_left", "0"},
                                   {NULL, NULL}};
    rate_runs("greedy", sched, want, said, meta);
    char ck[720], err[256];
    snprintf(ck, sizeof ck, "%s/greedy/halves/checkpoints/step_00000004.safetensors", tmp);
    ut_st_file *f = ut_st_open(ck, err, sizeof err);
    const char *w = f ? ut_st_meta(f, "optim.greedy_window") : NULL;
    int commas = 0;
    for (const char *p = w; p && *p; p++) commas += *p == ',';
    CHECK(w && strchr(w, ';') && commas == 1, "the window in the checkpoint: %s (%s)", w ? w : "-", f ? "" : err);
    ut_st_close(f);
    /* a metric the evaluations do not give stops the run at the first,
     * naming those they do (transformers' Trainer raises a KeyError) */
    char runs[512], out[600];
    snprintf(runs, sizeof runs, "output_dir=%s/greedy", tmp);
    snprintf(out, sizeof out, "%s/greedy_auc.out", tmp);
    int rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", "experiment_name=auc",
                                     "--set", "optim.schedule=greedy", "--set", "train.eval_strategy=steps", "--set",
                                     "train.eval_interval=1", "--set", "train.best_metric=dev/auc", "--set",
                                     "train.max_steps=2", NULL},
                    out);
    char *o = tp_slurp(out);
    CHECK(rc == 1 && o && strstr(o, "optim.schedule greedy: train.best_metric dev/auc is not among the "
                                    "evaluation's metrics (dev/loss, dev/accuracy)"),
          "a missing metric: exit %d:\n%s", rc, o ? o : "");
    free(o);
}

/* The dev loss a dev line of metrics.jsonl logged at step (NAN: none). */
static double dev_loss_at(const char *metrics, int step) {
    char v[64];
    return tp_loss_at(metrics, "dev", step, v, sizeof v) ? strtod(v, NULL) : NAN;
}

/* eval_on_start evaluates before the first step without touching training
 * (the same losses) or the best checkpoint; bf16_full_eval evaluates under
 * bf16 autocast (a dev loss near the float32 one, not equal) */
static void test_eval_on_start(void) {
    const char *out = tp_path(tmp, "eos.out");
    const char *extra[2][2] = {{"eval_on_start=false", "bf16_full_eval=false"},
                               {"eval_on_start=true", "bf16_full_eval=true"}};
    char runs[512], exp[2][64], metrics[2][600];
    snprintf(runs, sizeof runs, "output_dir=%s/eos", tmp);
    for (int i = 0; i < 2; i++) {
        snprintf(exp[i], sizeof exp[i], "experiment_name=e%d", i);
        int rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", exp[i], "--set",
                                      "train.max_steps=4", "--set", "train.eval_strategy=steps", "--set",
                                      "train.eval_interval=2", "--set", "train.best_metric=dev/loss", "--set",
                                      "greater_is_better=true", "--set", "train.log_interval=1", "--set", extra[i][0],
                                      "--set", extra[i][1], NULL},
                        out);
        snprintf(metrics[i], sizeof metrics[i], "%s/eos/e%d/metrics.jsonl", tmp, i);
        CHECK(rc == 0, "run %d", i);
    }
    check_same_losses(metrics[0], metrics[1], 1, 4);
    double before = dev_loss_at(metrics[1], 0), plain = dev_loss_at(metrics[0], 2), bf16 = dev_loss_at(metrics[1], 2);
    CHECK(isnan(dev_loss_at(metrics[0], 0)) && !isnan(before), "a dev line at step 0 only with eval_on_start");
    CHECK(bf16 != plain && fabs(bf16 - plain) < 1e-3, "dev loss at step 2: float32 %.9g, bf16 %.9g", plain, bf16);
    /* the highest dev loss is the untrained model's, at the start; with
     * greater_is_better it would be the best if the start counted */
    CHECK(before > bf16, "dev loss at the start %.9g, at step 2 %.9g", before, bf16);
    char *s = tp_slurp(out);
    CHECK(s && strstr(s, "Evaluation precision = bf16") && strstr(s, "eval  step 0  dev:") &&
              !strstr(s, "at step 0") && strstr(s, "best dev/loss"),
          "log: %s", s ? s : "");
    free(s);
}

/* eval_delay: no evaluation before step 3 (evaluations every 2 steps: at 4
 * and 6 only); load_best_model_at_end: false makes the last checkpoint the
 * run's model, which do_predict tests, though the best is another */
static void test_eval_delay_and_last_model(void) {
    const char *out = tp_path(tmp, "delay.out");
    char runs[512], metrics[600];
    snprintf(runs, sizeof runs, "output_dir=%s/delay", tmp);
    int rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", "train.max_steps=6",
                                  "--set", "train.eval_strategy=steps", "--set", "train.eval_interval=2", "--set",
                                  "eval_delay=3", "--set", "train.best_metric=dev/loss", "--set",
                                  "greater_is_better=true", "--set", "load_best_model_at_end=false", "--set",
                                  "do_predict=true", NULL},
                    out);
    snprintf(metrics, sizeof metrics, "%s/delay/sst2_bow/metrics.jsonl", tmp);
    CHECK(rc == 0, "run: exit %d", rc);
    CHECK(isnan(dev_loss_at(metrics, 2)) && !isnan(dev_loss_at(metrics, 4)) && !isnan(dev_loss_at(metrics, 6)),
          "evaluations at steps 4 and 6 only");
    char *s = tp_slurp(out);
    CHECK(s && strstr(s, "best dev/loss") && strstr(s, "at step 4") && strstr(s, "step_00000006.safetensors (step 6)"),
          "best at step 4, the last (6) tested: %s", s ? s : "");
    free(s);
    /* utrain test of the run reads its config.yml: the last checkpoint too */
    char run[600];
    snprintf(run, sizeof run, "%s/delay/sst2_bow", tmp);
    rc = tp_run((const char *[]){"test", run, NULL}, out);
    s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, "step_00000006.safetensors (step 6)"), "utrain test: %s", s ? s : "");
    free(s);
}

/* Files in dir whose names start with prefix. */
static int count_files(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int k = 0;
    for (struct dirent *e; d && (e = readdir(d));) k += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d) closedir(d);
    return k;
}

/* logging_dir (train.logging_dir): TensorBoard's event files go there */
static void test_logging_dir(void) {
    char runs[512], logdir[600];
    snprintf(runs, sizeof runs, "output_dir=%s/lgd", tmp);
    snprintf(logdir, sizeof logdir, "logging_dir=%s/lgd_tb/run1", tmp);
    int rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", logdir, "--set",
                                  "train.max_steps=2", NULL},
                    tp_path(tmp, "lgd.out"));
    CHECK(rc == 0 && count_files(tp_path(tmp, "lgd_tb/run1"), "events.out.tfevents.") == 1 &&
              count_files(tp_path(tmp, "lgd/sst2_bow/tensorboard"), "events.out.tfevents.") == 0,
          "event files in logging_dir, none in RUN/tensorboard");
}

/* train.test_at_end (Hugging Face's do_predict): after training, the best
 * checkpoint is tested as `utrain test` tests it; a stopped run is not
 * tested; do_train: false is test mode. */
static void test_test_at_end(void) {
    const char *out = tp_path(tmp, "atend.out");
    char runs[512];
    snprintf(runs, sizeof runs, "output_dir=%s/atend", tmp);
    int rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", "train.max_steps=3",
                                  "--set", "do_predict=true", NULL},
                    out);
    char *s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, "Training done") && strstr(s, "Testing ") && strstr(s, "test (60 examples)"),
          "train, then test: %s", s ? s : "");
    free(s);
    char *r = tp_slurp(tp_path(tmp, "atend/sst2_bow/test_results.json"));
    CHECK(r && strstr(r, "\"accuracy\"") && strstr(r, "\"step\": 3"), "test_results.json: %s", r ? r : "(none)");
    free(r);
    unlink(tp_path(tmp, "atend/sst2_bow/test_results.json"));
    /* the same file with do_train: false tests the run again (`utrain CFG` follows its mode) */
    rc = tp_run((const char *[]){"configs/sst2_bow.yml", "--set", runs, "--set", "do_train=false", NULL}, out);
    r = tp_slurp(tp_path(tmp, "atend/sst2_bow/test_results.json"));
    CHECK(rc == 0 && r && strstr(r, "\"step\": 3"), "do_train: false tests the run: %s", r ? r : "(none)");
    free(r);
}

/* load_dir starts a new run from another run's best weights. */
static void test_load_dir(void) {
    const char *out = tp_path(tmp, "loaddir.out");
    char runs[512], from[600];
    snprintf(runs, sizeof runs, "output_dir=%s/ft", tmp);
    snprintf(from, sizeof from, "load_dir=%s/ft/sst2_bow", tmp);
    CHECK(tp_run_shown((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", "train.epochs=2",
                                        NULL},
                       out, 0, NULL) == 0,
          "base run");
    int rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", "experiment_name=tuned",
                                  "--set", from, "--set", "train.epochs=1", NULL}, out);
    char *s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, "Initial weights from") && strstr(s, "sst2_bow/checkpoints/step_"),
          "fine-tune: %s", s);
    free(s);
    /* the run's checkpoints/ folder, or one checkpoint file (the step-15 one,
     * not the best), load as well; a path that is not there is named */
    const char *forms[3] = {"/checkpoints", "/checkpoints/step_00000015.safetensors", "/nothing"};
    const char *want[3] = {"Initial weights from", "Initial weights from", "/nothing: No such file or directory"};
    for (int k = 0; k < 3; k++) {
        char exp[80], from_k[700];
        snprintf(exp, sizeof exp, "experiment_name=tuned%d", k);
        snprintf(from_k, sizeof from_k, "%s%s", from, forms[k]);
        rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", exp, "--set", from_k,
                                     "--set", "train.epochs=1", NULL}, out);
        s = tp_slurp(out);
        CHECK(rc == (k < 2 ? 0 : 1) && s && strstr(s, want[k]) && (k != 1 || strstr(s, "step_00000015")),
              "load_dir=...%s: %s", forms[k], s);
        free(s);
    }
    /* load_type: latest (FlagAI's) takes the run's newest checkpoint */
    char dir[700], leaf[64];
    int64_t newest[1];
    snprintf(dir, sizeof dir, "%s/ft/sst2_bow/checkpoints", tmp);
    CHECK(ut_ckpt_list(dir, newest, 1) >= 1, "checkpoints in %s", dir);
    snprintf(leaf, sizeof leaf, "sst2_bow/checkpoints/step_%08lld", (long long)newest[0]);
    rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", "experiment_name=latest",
                                 "--set", from, "--set", "load_type=latest", "--set", "train.epochs=1", NULL}, out);
    s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, "Initial weights from") && strstr(s, leaf), "load_type latest (%s): %s", leaf, s);
    free(s);
    /* a run without checkpoints has no newest one: said, naming the folder */
    char bare[700], from_bare[720];
    snprintf(bare, sizeof bare, "%s/ft_bare", tmp);
    CHECK(mkdir(bare, 0777) == 0 && mkdir(tp_path(bare, "checkpoints"), 0777) == 0, "mkdir %s", bare);
    snprintf(from_bare, sizeof from_bare, "load_dir=%s/ft_bare", tmp);
    rc = tp_run((const char *[]){"train", "configs/sst2_bow.yml", "--set", runs, "--set", "experiment_name=bare",
                                 "--set", from_bare, "--set", "load_type=latest", "--set", "train.epochs=1", NULL},
                out);
    s = tp_slurp(out);
    CHECK(rc == 1 && s && strstr(s, "ft_bare/checkpoints: no checkpoints (train first, or name one)"),
          "load_type latest without checkpoints: rc %d: %s", rc, s);
    free(s);
}

/* With a zero learning rate nothing improves: patience 2 stops after 3 evaluations. */
static void test_early_stopping(void) {
    const char *out = tp_path(tmp, "early.out");
    int rc = tp_run((const char *[]){"train", write_config("early", NULL), "--set", "train.max_steps=100", "--set",
                                  "optim.lr=0", "--set", "train.eval_strategy=steps", "--set", "train.eval_interval=5",
                                  "--set", "train.early_stopping_patience=2", "--set", "data.dev_size=59800", NULL},
                 out);
    char *s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, "Early stopping") && strstr(s, "Training done: 15 steps"), "%s", s);
    free(s);
}

/* train.progress: bar draws a bar with carriage returns even off a terminal. */
static void test_progress_bar(void) {
    const char *out = tp_path(tmp, "bar.out");
    int rc = tp_run((const char *[]){"train", write_config("bar", NULL), "--set", "train.max_steps=5", "--set",
                                  "train.progress=bar", NULL}, out);
    char *s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, "\rtrain [") && strstr(s, "5/5") && strstr(s, "samples/s") && strstr(s, "eta"),
          "%s", s);
    free(s);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-e2e")) return 1;
    RUN(test_config_errors);
    RUN(test_run_directory_and_test_mode);
    RUN(test_exact_resume);
    RUN(test_sigterm_then_resume);
    RUN(test_save_only_model);
    RUN(test_corrupt_checkpoint_falls_back);
    RUN(test_gradient_accumulation);
    RUN(test_example_configs);
    RUN(test_label_smoothing);
    RUN(test_neftune);
    RUN(test_input_tokens_seen);
    RUN(test_mfu);
    RUN(test_step_profile);
    RUN(test_wall_clock_breakdown);
    RUN(test_flagai_recipe);
    RUN(test_hf_warmup);
    RUN(test_test_at_end);
    RUN(test_log_first_step);
    RUN(test_data_seed);
    RUN(test_wsd_schedule);
    RUN(test_plateau_schedule);
    RUN(test_greedy_schedule);
    RUN(test_eval_on_start);
    RUN(test_eval_delay_and_last_model);
    RUN(test_logging_dir);
    RUN(test_load_dir);
    RUN(test_early_stopping);
    RUN(test_progress_bar);
    return tp_finish(TEST_SUMMARY(), tmp);
}
