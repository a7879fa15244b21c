/* What the split-model tests (tests/dist/test_tensor_parallel.c,
 * test_pipeline_parallel.c) share: runs of one config body in a test
 * directory, and their comparisons. The including program defines
 * split_dir (its directory) and split_body (the config after the run's
 * name), and includes proc.h and test.h first.
 * defines: split_device, split_train, split_output, split_agrees,
 *          split_same_dev_loss, split_refused. */
#ifndef UTRAIN_TEST_SPLIT_RUNS_H
#define UTRAIN_TEST_SPLIT_RUNS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static char split_dir[256], split_body[2048];

/* UTRAIN_DEVICE, or the CPU */
static const char *split_device(void) {
    const char *d = getenv("UTRAIN_DEVICE");
    return d && *d ? d : "cpu";
}

/* Run NAME of split_body on nproc ranks, one thread each, with the
 * space-separated settings sets; its exit code. */
static int split_train(const char *name, int nproc, const char *sets) {
    char all[512];
    snprintf(all, sizeof all, "threads=1 %s", sets);
    return tp_train_in(split_dir, name, split_body, split_device(), all, nproc);
}

/* NAME's captured output (malloc'd, NULL if unreadable). */
static char *split_output(const char *name) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.out", split_dir, name);
    return tp_slurp(path);
}

/* Run `name` against run `ref` at step `steps`: train losses within 1e-5,
 * each weight tensor within 1e-5 and the optimizer's state within 1e-4
 * (relative). Tests use SGD with momentum: AdamW turns the rounding noise
 * of a gradient that is zero in exact arithmetic (an attention's key bias)
 * into whole steps of lr. */
static void split_agrees(const char *name, const char *ref, int steps) {
    double l = tp_loss_diff(tp_run_file(split_dir, ref, "metrics.jsonl"), tp_run_file(split_dir, name, "metrics.jsonl"),
                            steps);
    CHECK(l < 1e-5, "%s: train losses within %.2g of %s's (1e-5)", name, l, ref);
    char worst[128] = "";
    double w = tp_tensors_diff(tp_ckpt_file(split_dir, ref, steps), tp_ckpt_file(split_dir, name, steps), "model.",
                               NULL, worst, sizeof worst);
    CHECK(w >= 0 && w < 1e-5, "%s: weights at step %d within %.2g of %s's (1e-5; worst %s)", name, steps, w, ref,
          worst);
    double o = tp_tensors_diff(tp_ckpt_file(split_dir, ref, steps), tp_ckpt_file(split_dir, name, steps), "optim.",
                               NULL, worst, sizeof worst);
    CHECK(o >= 0 && o < 1e-4, "%s: optimizer state at step %d within %.2g of %s's (1e-4; worst %s)", name, steps, o,
          ref, worst);
    printf("     %s against %s: losses %.2g, weights %.2g, optimizer state %.2g\n", name, ref, l, w, o);
}

/* The dev losses of two runs at step, within 1e-5 (relative). */
static void split_same_dev_loss(const char *name, const char *ref, int step) {
    char a[64] = "", b[64] = "";
    CHECK(tp_loss_at(tp_run_file(split_dir, ref, "metrics.jsonl"), "dev", step, a, sizeof a) &&
              tp_loss_at(tp_run_file(split_dir, name, "metrics.jsonl"), "dev", step, b, sizeof b) &&
              fabs(atof(a) - atof(b)) <= 1e-5 * fabs(atof(a)),
          "%s: the dev loss at step %d: %s, %s's %s", name, step, b, ref, a);
}

/* split_body on nproc ranks with sets exits 1 saying want. */
static void split_refused(const char *name, int nproc, const char *sets, const char *want) {
    char all[512], out[600], cfg[512], np[8];
    snprintf(all, sizeof all, "threads=1 %s", sets);
    snprintf(out, sizeof out, "%s/%s.out", split_dir, name);
    snprintf(cfg, sizeof cfg, "%s/%s.yml", split_dir, name);
    FILE *f = fopen(cfg, "w");
    if (!f) return;
    fprintf(f, "experiment_name: %s\noutput_dir: %s/runs\nseed: 5\n%s", name, split_dir, split_body);
    fclose(f);
    snprintf(np, sizeof np, "%d", nproc);
    const char *argv[32] = {"train", cfg, "--nproc", np};
    tp_push_sets(argv, 4, 32, all);
    int rc = tp_run(argv, out);
    char *s = tp_slurp(out);
    CHECK(rc == 1 && s && strstr(s, want), "%s: exit 1 saying \"%s\" (exit %d):\n%s", name, want, rc, s ? s : "");
    free(s);
}
#endif
