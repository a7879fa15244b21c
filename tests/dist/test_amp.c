/* Mixed precision end to end, on a small GPT-2: bf16 runs are deterministic
 * and resume bit-exactly (fp16 too, loss scaler included); fp16 steps whose
 * gradients overflow are skipped on every rank under ddp and zero2 (weights
 * and optimizer state untouched, the scale halved); the scale grows after
 * growth_interval clean steps; a skipped step holds the learning-rate
 * schedule; a bf16 checkpoint resumes in fp32 and fp16;
 * bf16 under ddp and zero3 on 2 processes matches one process. */
#include <math.h>
#include <string.h>

#include "proc.h"
#include "test.h"
#include "utrain/utrain.h"

static char tmp[256], gpt2_yaml[1024];

/* Runs NAME (a config written on first use) with the space-separated
 * key=value settings in sets, on nproc processes. */
static int train(const char *name, int nproc, const char *sets_in) {
    char cfg[512], out[512], np[8], sets[512];
    snprintf(cfg, sizeof cfg, "%s/%s.yml", tmp, name);
    snprintf(out, sizeof out, "%s/%s.out", tmp, name);
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "experiment_name: %s\noutput_dir: %s/runs\nseed: 3\n%s"
            "train: {batch_size: 4, log_interval: 1, eval_strategy: \"no\", save_strategy: steps,\n"
            "        save_interval: 10, save_total_limit: 0, progress: lines}\n"
            "optim: {name: adamw, lr: 1.0e-3}\ndist: {timeout_s: 120}\n",
            name, tmp, gpt2_yaml);
    fclose(f);
    snprintf(np, sizeof np, "%d", nproc);
    snprintf(sets, sizeof sets, "%s", sets_in);
    const char *argv[32] = {"train", cfg, "--nproc", np};
    tp_push_sets(argv, 4, 32, sets);
    return tp_run_shown(argv, out, 0, name);
}

/* tmp/runs/NAME/LEAF */
static const char *path(const char *name, const char *leaf) {
    char run[600];
    snprintf(run, sizeof run, "%s/runs/%s", tmp, name);
    return tp_path(run, leaf);
}

static const char *ckpt(const char *name, int step) {
    char leaf[64];
    snprintf(leaf, sizeof leaf, "checkpoints/step_%08d.safetensors", step);
    return path(name, leaf);
}

/* Metadata key of a checkpoint (copied), "" if missing. */
static const char *meta(const char *file, const char *key) {
    static char v[8][64];
    static int k;
    k = (k + 1) % 8;
    v[k][0] = 0;
    char err[256];
    ut_st_file *f = ut_st_open(file, err, sizeof err);
    const char *s = f ? ut_st_meta(f, key) : NULL;
    if (s) snprintf(v[k], sizeof v[k], "%s", s);
    ut_st_close(f);
    return v[k];
}

/* Every optim.* tensor of a checkpoint all zeros (AdamW never stepped). */
static bool optim_all_zero(const char *file) {
    char err[256];
    ut_st_file *f = ut_st_open(file, err, sizeof err);
    if (!f) return false;
    int nopt = 0;
    bool zero = true;
    for (int i = 0; i < ut_st_count(f); i++) {
        if (strncmp(ut_st_name(f, i), "optim.", 6)) continue;
        const ut_st_tensor *t = ut_st_get(f, ut_st_name(f, i));
        const unsigned char *b = t->data;
        for (size_t j = 0; j < t->nbytes; j++) zero &= b[j] == 0;
        nopt++;
    }
    ut_st_close(f);
    return zero && nopt == 2;
}

/* Largest relative difference of the train losses of steps 1..n. */
static double loss_diff(const char *a, const char *b, int n) {
    double worst = 0;
    for (int s = 1; s <= n; s++) {
        char x[64], y[64];
        if (!tp_loss_at(path(a, "metrics.jsonl"), "train", s, x, sizeof x) ||
            !tp_loss_at(path(b, "metrics.jsonl"), "train", s, y, sizeof y))
            return INFINITY;
        worst = fmax(worst, fabs(atof(x) - atof(y)) / fabs(atof(x)));
    }
    return worst;
}

/* ||a - b|| / ||a|| over all model.* tensors together (f32). */
static double global_weight_diff(const char *fa, const char *fb) {
    char err[256];
    ut_st_file *a = ut_st_open(fa, err, sizeof err), *b = ut_st_open(fb, err, sizeof err);
    double d = 0, na = 0;
    for (int i = 0; a && b && i < ut_st_count(a); i++) {
        const char *name = ut_st_name(a, i);
        const ut_st_tensor *x = ut_st_get(a, name), *y = ut_st_get(b, name);
        if (strncmp(name, "model.", 6) || !y || y->nbytes != x->nbytes) continue;
        const float *p = x->data, *q = y->data;
        for (size_t k = 0; k < x->nbytes / 4; k++) d += ((double)p[k] - q[k]) * ((double)p[k] - q[k]), na += (double)p[k] * p[k];
    }
    bool ok = a && b;
    ut_st_close(a);
    ut_st_close(b);
    return ok && na > 0 ? sqrt(d / na) : INFINITY;
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s ? strstr(s, what) : NULL; p; p = strstr(p + 1, what)) n++;
    return n;
}

static void test_bf16_deterministic(void) {
    bool ok = !train("bf16_a", 1, "precision=bf16 train.max_steps=10") &
              !train("bf16_b", 1, "precision=bf16 train.max_steps=10") &
              !train("fp32_a", 1, "train.max_steps=10");
    CHECK(ok, "runs");
    CHECK(tp_same_weights(ckpt("bf16_a", 10), ckpt("bf16_b", 10)), "two bf16 runs bit-identical");
    double d = loss_diff("fp32_a", "bf16_a", 10);
    CHECK(d > 0 && d < 1e-3, "bf16 losses differ from fp32 by %.3g (rounded, and training the same)", d);
}

/* 10 steps, stop, resume to 20 = 20 straight, bit for bit. */
static void check_resume(const char *prec, const char *extra) {
    char straight[64], halves[64], s20[256], s10[256], s20r[256];
    snprintf(straight, sizeof straight, "%s_straight", prec);
    snprintf(halves, sizeof halves, "%s_halves", prec);
    snprintf(s20, sizeof s20, "precision=%s train.max_steps=20 %s", prec, extra);
    snprintf(s10, sizeof s10, "precision=%s train.max_steps=10 %s", prec, extra);
    snprintf(s20r, sizeof s20r, "%s continue_training=true", s20);
    bool ok = !train(straight, 1, s20) & !train(halves, 1, s10) & !train(halves, 1, s20r);
    CHECK(ok, "%s runs", prec);
    CHECK(tp_same_weights(ckpt(straight, 20), ckpt(halves, 20)), "%s: resume is bit-exact", prec);
}

static void test_resume_bf16(void) { check_resume("bf16", ""); }
/* growth_interval 3: the scale grows across the stop, so its state must resume */
static void test_resume_fp16(void) {
    check_resume("fp16", "train.growth_interval=3");
    CHECK(strcmp(meta(ckpt("fp16_halves", 10), "amp.scale"), "") != 0, "scale in the checkpoint");
}

/* An initial scale of 1e30 overflows the first 3 steps: skipped on every
 * rank (1 process, ddp and zero2 on 2): weights as an lr 0 run leaves them,
 * AdamW's moments and step count zero, the scale halved 3 times. */
static void test_fp16_overflow_skipped(void) {
    CHECK(!train("lr0", 1, "train.max_steps=3 optim.lr=0"), "lr 0 run");
    const char *names[3] = {"skip_1", "skip_ddp_2", "skip_zero2_2"};
    const char *strat[3] = {"ddp", "ddp", "zero2"};
    for (int i = 0; i < 3; i++) {
        char sets[256];
        snprintf(sets, sizeof sets, "precision=fp16 init_scale=1e30 train.max_steps=3 dist.strategy=%s",
                 strat[i]);
        int np = i ? 2 : 1;
        if (train(names[i], np, sets)) {
            CHECK(0, "%s ran", names[i]);
            continue;
        }
        const char *c = ckpt(names[i], 3);
        CHECK(tp_weights_rel_diff(ckpt("lr0", 3), c) == 0, "%s: weights unchanged", names[i]);
        CHECK(optim_all_zero(c), "%s: optimizer moments unchanged (zero)", names[i]);
        CHECK(!strcmp(meta(c, "optim.steps"), "0"), "%s: optim.steps %s", names[i], meta(c, "optim.steps"));
        CHECK(fabs(atof(meta(c, "amp.scale")) - 1.25e29) < 1e23, "%s: scale %s", names[i],
              meta(c, "amp.scale"));
        for (int r = 0; r < np; r++) {
            char *log = tp_slurp(path(names[i], r ? "logger_logs/training_1.log" : "logger_logs/training_0.log"));
            CHECK(count(log, "step skipped") == 3, "%s rank %d: %d skips", names[i], r, count(log, "step skipped"));
            free(log);
        }
    }
}

/* 5 clean steps with growth_interval 2: the scale doubles twice (1024 ->
 * 4096) and one clean step is counted towards the next doubling. */
static void test_fp16_growth(void) {
    CHECK(!train("growth", 1, "precision=fp16 init_scale=1024 growth_interval=2 train.max_steps=5"), "run");
    const char *c = ckpt("growth", 5);
    CHECK(!strcmp(meta(c, "amp.scale"), "4096") && !strcmp(meta(c, "amp.growth_tracker"), "1") &&
              !strcmp(meta(c, "optim.steps"), "5"),
          "scale %s tracker %s steps %s", meta(c, "amp.scale"), meta(c, "amp.growth_tracker"),
          meta(c, "optim.steps"));
}

/* DeepSpeed's hysteresis and floor: with train.loss_scale_hysteresis 3 the
 * first two overflows only skip their steps and the third halves the scale;
 * the tolerance left is in the checkpoint and resumes (a run stopped after
 * two overflows halves at its next one, as the uninterrupted run does); the
 * scale never backs off below train.min_loss_scale. */
static void test_fp16_hysteresis(void) {
    const char *base = "precision=fp16 train.init_scale=1e30 train.loss_scale_hysteresis=3";
    char sets[256];
    snprintf(sets, sizeof sets, "%s train.max_steps=2", base);
    CHECK(!train("hyst", 1, sets), "run to step 2");
    const char *c = ckpt("hyst", 2);
    CHECK(atof(meta(c, "amp.scale")) == (double)1e30f && !strcmp(meta(c, "amp.hysteresis"), "1"),
          "two overflows tolerated: scale %s, hysteresis left %s", meta(c, "amp.scale"), meta(c, "amp.hysteresis"));
    snprintf(sets, sizeof sets, "%s train.max_steps=3 continue_training=true", base);
    CHECK(!train("hyst", 1, sets), "resume to step 3");
    snprintf(sets, sizeof sets, "%s train.max_steps=3", base);
    CHECK(!train("hyst_ref", 1, sets), "uninterrupted run");
    const char *r = ckpt("hyst_ref", 3);
    c = ckpt("hyst", 3);
    CHECK(fabs(atof(meta(r, "amp.scale")) - 5e29) < 1e23 && !strcmp(meta(c, "amp.scale"), meta(r, "amp.scale")) &&
              !strcmp(meta(c, "amp.hysteresis"), "1"),
          "third overflow halves: resumed %s, uninterrupted %s", meta(c, "amp.scale"), meta(r, "amp.scale"));
    char *log = tp_slurp(path("hyst_ref", "logger_logs/training_0.log"));
    CHECK(count(log, "step skipped") == 3, "%d skips", count(log, "step skipped"));
    free(log);
    CHECK(!train("floor", 1, "precision=fp16 train.init_scale=1e30 train.min_loss_scale=4e29 train.max_steps=3"),
          "floor run");
    c = ckpt("floor", 3);
    CHECK(fabs(atof(meta(c, "amp.scale")) - 4e29) < 1e23 && !*meta(c, "amp.hysteresis"),
          "1e30 halved to 5e29, then held at 4e29: %s", meta(c, "amp.scale"));
}

/* The logged rate of train step `step` of run NAME (copied), "" if none. */
static const char *lr_at(const char *name, int step) {
    static char v[4][40];
    static int k;
    k = (k + 1) % 4;
    v[k][0] = 0;
    char *m = tp_slurp(path(name, "metrics.jsonl")), want[40];
    snprintf(want, sizeof want, "{\"step\": %d,", step);
    for (char *line = m; line && *line;) {
        char *end = strchr(line, '\n'), *l = strstr(line, "\"lr\": ");
        if (end) *end = 0;
        if (!strncmp(line, want, strlen(want)) && strstr(line, "\"split\": \"train\"") && l)
            sscanf(l + 6, "%39[^,}]", v[k]);
        line = end ? end + 1 : NULL;
    }
    free(m);
    return v[k];
}

/* A skipped fp16 step holds the schedule (optim.schedule_on_skip: hold, the
 * default, as transformers' Trainer and DeepSpeed): with an initial scale of
 * 1e7 the first 3 steps overflow, and the first step taken (step 4) has the
 * linear schedule's first rate, step 8 its fifth, where `advance` has moved
 * on by 3. The count of held steps is in the checkpoint and resumes: 4 steps,
 * stop, 4 more = 8 straight, bit for bit. */
static void test_fp16_schedule_holds(void) {
    const char *base = "precision=fp16 train.init_scale=1e7 optim.schedule=linear train.save_interval=4";
    char sets[256];
    snprintf(sets, sizeof sets, "%s train.max_steps=8", base);
    CHECK(!train("hold", 1, sets), "hold run");
    snprintf(sets, sizeof sets, "%s train.max_steps=8 optim.schedule_on_skip=advance", base);
    CHECK(!train("advance", 1, sets), "advance run");
    char *log = tp_slurp(path("hold", "logger_logs/training_0.log"));
    CHECK(count(log, "step skipped") == 3, "%d skips (the test needs 3)", count(log, "step skipped"));
    free(log);
    CHECK(!strcmp(lr_at("hold", 4), lr_at("advance", 1)) && !strcmp(lr_at("hold", 8), lr_at("advance", 5)) &&
              strcmp(lr_at("hold", 8), lr_at("advance", 8)) && *lr_at("advance", 8),
          "hold: step 4 at %s (advance's step 1: %s), step 8 at %s (advance's step 5: %s, step 8: %s)",
          lr_at("hold", 4), lr_at("advance", 1), lr_at("hold", 8), lr_at("advance", 5), lr_at("advance", 8));
    CHECK(!strcmp(meta(ckpt("hold", 4), "train.schedule_held"), "3") && !*meta(ckpt("advance", 4), "train.schedule_held"),
          "held steps in the checkpoint: hold %s, advance '%s'", meta(ckpt("hold", 4), "train.schedule_held"),
          meta(ckpt("advance", 4), "train.schedule_held"));
    CHECK(tp_weights_rel_diff(ckpt("hold", 8), ckpt("advance", 8)) > 0, "the rates changed the weights");
    snprintf(sets, sizeof sets, "%s train.max_steps=4", base);
    bool ok = !train("hold_halves", 1, sets);
    snprintf(sets, sizeof sets, "%s train.max_steps=8 continue_training=true", base);
    ok &= !train("hold_halves", 1, sets);
    CHECK(ok && tp_same_weights(ckpt("hold", 8), ckpt("hold_halves", 8)) &&
              !strcmp(lr_at("hold_halves", 8), lr_at("hold", 8)),
          "resumed: same weights and rate (%s) as straight", lr_at("hold_halves", 8));
}

/* Master weights are fp32 in the file: a bf16 run resumes as fp32, then fp16
 * (its scaler starting from init_scale). */
static void test_bf16_checkpoint_into_fp32(void) {
    CHECK(!train("switch", 1, "precision=bf16 train.max_steps=10"), "bf16");
    CHECK(!train("switch", 1, "precision=fp32 train.max_steps=20 continue_training=true"), "fp32 resume");
    CHECK(!train("switch", 1, "precision=fp16 train.max_steps=30 continue_training=true"), "fp16 resume");
    char *out = tp_slurp(path("switch", "logger_logs/training_0.log"));
    CHECK(count(out, "Resuming from") == 2 && strstr(out, "step 30/30"), "resumed twice");
    free(out);
    CHECK(!strcmp(meta(ckpt("switch", 20), "amp.scale"), "") &&
              !strcmp(meta(ckpt("switch", 30), "amp.scale"), "65536"),
          "scaler only in the fp16 checkpoint: %s", meta(ckpt("switch", 30), "amp.scale"));
}

/* bf16 under ddp and zero3 on 2 processes of batch 2 against 1 of batch 4:
 * the gradients are summed in another order, an fp32 difference of a few
 * ulps that can move a bf16 rounding by one bf16 ulp (2^-8 relative) in the
 * next forward; the losses of 10 steps agree within 1e-3 relative (measured:
 * 3e-5; bf16 against fp32 differs by about 1e-4), and all the weights
 * together within 5e-3 (measured: 1.2e-3). (Per tensor, the zero-initialised attention key bias,
 * whose gradient is nearly zero since softmax ignores a constant shift, gets
 * AdamW steps of normalised noise and differs by 20%; even fp32 ddp moves it
 * 1e-4 from one process.) */
static void test_bf16_distributed(void) {
    bool ok = !train("bf16_ref", 1, "precision=bf16 train.max_steps=10") &
              !train("bf16_ddp", 2, "precision=bf16 train.max_steps=10 dist.strategy=ddp train.batch_size=2") &
              !train("bf16_zero3", 2, "precision=bf16 train.max_steps=10 dist.strategy=zero3 train.batch_size=2");
    CHECK(ok, "runs");
    double la = loss_diff("bf16_ref", "bf16_ddp", 10), lb = loss_diff("bf16_ref", "bf16_zero3", 10);
    double a = global_weight_diff(ckpt("bf16_ref", 10), ckpt("bf16_ddp", 10)),
           b = global_weight_diff(ckpt("bf16_ref", 10), ckpt("bf16_zero3", 10));
    CHECK(la < 1e-3 && lb < 1e-3, "losses: ddp %.3g, zero3 %.3g", la, lb);
    CHECK(a < 5e-3 && b < 5e-3, "weights: ddp %.3g, zero3 %.3g", a, b);
    printf("     bf16 on 2 processes vs 1: losses within %.2g / %.2g, weights within %.2g / %.2g "
           "(ddp / zero3)\n", la, lb, a, b);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-amp")) return 1;
    tp_mpi_env(true);
    char shard[512];
    if (!tp_tokenize_sample(tmp, shard, sizeof shard)) return 1;
    snprintf(gpt2_yaml, sizeof gpt2_yaml,
             "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 16}\n"
             "data: {name: tokens, train_path: %s, seq_len: 16}\n", shard);
    RUN(test_bf16_deterministic);
    RUN(test_resume_bf16);
    RUN(test_resume_fp16);
    RUN(test_fp16_overflow_skipped);
    RUN(test_fp16_growth);
    RUN(test_fp16_hysteresis);
    RUN(test_fp16_schedule_holds);
    RUN(test_bf16_checkpoint_into_fp32);
    RUN(test_bf16_distributed);
    return tp_finish(TEST_SUMMARY(), tmp);
}
