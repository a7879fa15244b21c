/* examples/custom and examples/seq2seq as a user meets them: `make install`
 * into a temporary prefix, build each example with that prefix's pkg-config
 * file, run it, and check the run directory it leaves (checkpoints,
 * metrics.jsonl carrying the example's own metrics, dev and test results
 * well above chance; the seq2seq example's metric over generations). Runs
 * from the repository root, as tests/run.sh does. */
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "test.h"
#include "utrain/utrain.h"

/* Accuracy the example must beat on dev and test: chance is 1/3, it reaches ~0.99. */
#define MIN_ACCURACY 0.9

static char build[1024], tmp[256];

/* Runs a shell command built like printf; returns its exit code (-1: did not run). */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* tmp/name (a rotating buffer of tp_path) */
static const char *in_tmp(const char *name) { return tp_path(tmp, name); }

/* The number after "key": in a results file; -1 if absent. */
static double json_number(const char *json, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = json ? strstr(json, pat) : NULL;
    return p ? strtod(p + strlen(pat), NULL) : -1;
}

static void test_install_build_run(void) {
    /* -o all: install copies exactly the build under test, never rebuilding it */
    int rc = sh("make --no-print-directory -o all install BUILD='%s' PREFIX=%s >%s 2>&1", build,
                tmp, in_tmp("install.log"));
    CHECK(rc == 0, "make install exited %d (see %s)", rc, in_tmp("install.log"));
    CHECK(access(in_tmp("lib/pkgconfig/utrain.pc"), R_OK) == 0, "no utrain.pc installed");

    /* A sanitizer build's library needs the same runtime in the program. */
    const char *cflags = "";
#ifdef __SANITIZE_ADDRESS__
    cflags = "CFLAGS='-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer'";
#endif
    rc = sh("make --no-print-directory -C examples/custom PKG_CONFIG_PATH=%s/lib/pkgconfig "
            "OUT=%s %s >%s 2>&1", tmp, in_tmp("custom"), cflags, in_tmp("build.log"));
    CHECK(rc == 0, "building examples/custom exited %d (see %s)", rc, in_tmp("build.log"));
    if (rc) return;

    rc = sh("%s %s >%s 2>&1", in_tmp("custom"), in_tmp("runs"), in_tmp("run.log"));
    CHECK(rc == 0, "the example exited %d (see %s)", rc, in_tmp("run.log"));

    /* checkpoints: at least the best one and the last one */
    int64_t steps[16];
    int nckpt = ut_ckpt_list(in_tmp("runs/rings/checkpoints"), steps, 16);
    CHECK(nckpt >= 1, "%d checkpoints in runs/rings/checkpoints", nckpt);

    /* metrics.jsonl has dev lines with the recall_<k> metrics of the example's hook */
    char *metrics = tp_slurp(in_tmp("runs/rings/metrics.jsonl"));
    CHECK(metrics && strstr(metrics, "\"split\": \"dev\"") && strstr(metrics, "\"recall_2\""),
          "metrics.jsonl lacks dev lines with recall_2");
    free(metrics);

    /* test mode's results, from the best checkpoint */
    const char *splits[] = {"dev", "test"};
    for (int i = 0; i < 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "runs/rings/%s_results.json", splits[i]);
        char *res = tp_slurp(in_tmp(name));
        double acc = json_number(res, "accuracy");
        CHECK(acc > MIN_ACCURACY, "%s accuracy %.4f (need > %.2f)", splits[i], acc, MIN_ACCURACY);
        CHECK(json_number(res, "recall_0") >= 0, "%s has no recall_0", name);
        free(res);
    }

    /* the on_log hook printed the evaluations */
    char *out = tp_slurp(in_tmp("run.log"));
    CHECK(out && strstr(out, "[on_log] step") && strstr(out, "best dev accuracy"),
          "no on_log lines or summary in %s", in_tmp("run.log"));
    free(out);
}

/* examples/seq2seq (after the install above): its hooks' token_accuracy in
 * the training log and first_word in the dev evaluations and test results */
static void test_seq2seq_example(void) {
    const char *cflags = "";
#ifdef __SANITIZE_ADDRESS__
    cflags = "CFLAGS='-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer'";
#endif
    int rc = sh("make --no-print-directory -C examples/seq2seq PKG_CONFIG_PATH=%s/lib/pkgconfig "
                "OUT=%s %s >%s 2>&1", tmp, in_tmp("seq2seq"), cflags, in_tmp("build2.log"));
    CHECK(rc == 0, "building examples/seq2seq exited %d (see %s)", rc, in_tmp("build2.log"));
    if (rc) return;
    UT_ASSERT(tp_write_pairs(tmp, "train", 64) && tp_write_pairs(tmp, "dev", 16));
    FILE *f = fopen(in_tmp("s2s.yml"), "w");
    UT_ASSERT(f);
    fprintf(f, "experiment_name: s2s\noutput_dir: %s\nthreads: 1\n"
               "model: {name: bart, pretrained: tests/parity/fixtures/hf_bart_gen_tiny}\n"
               "data: {name: seq2seq_text, train_path: %s/train_inputs.txt, train_target_path: %s/train_targets.txt,\n"
               "       dev_path: %s/dev_inputs.txt, dev_target_path: %s/dev_targets.txt,\n"
               "       test_path: %s/dev_inputs.txt, test_target_path: %s/dev_targets.txt, max_source_len: 32, max_target_len: 16}\n"
               "train: {epochs: 40, batch_size: 8, eval_strategy: epoch, log_interval: 8, progress: lines,\n"
               "        best_metric: dev/first_word, greater_is_better: true, save_total_limit: 2}\n"
               "generate: {eval: true, max_new_tokens: 8}\noptim: {lr: 1e-2, weight_decay: 0}\n",
            in_tmp("runs"), tmp, tmp, tmp, tmp, tmp, tmp);
    fclose(f);
    rc = sh("%s %s >%s 2>&1", in_tmp("seq2seq"), in_tmp("s2s.yml"), in_tmp("run2.log"));
    CHECK(rc == 0, "the seq2seq example exited %d (see %s)", rc, in_tmp("run2.log"));
    char *metrics = tp_slurp(in_tmp("runs/s2s/metrics.jsonl"));
    CHECK(metrics && strstr(metrics, "\"token_accuracy\"") && strstr(metrics, "\"first_word\"") &&
              strstr(metrics, "\"hidden_rms\""),
          "metrics.jsonl lacks token_accuracy, hidden_rms or first_word");
    free(metrics);
    char *res = tp_slurp(in_tmp("runs/s2s/test_results.json"));
    double fw = json_number(res, "first_word"), bleu = json_number(res, "bleu");
    CHECK(fw >= 0.5 && bleu > 0, "test first_word %.3f, bleu %.3f", fw, bleu);
    free(res);
}

int main(int argc, char **argv) {
    (void)argc;
    /* BUILD/tests/e2e/test_example_custom -> BUILD */
    snprintf(build, sizeof build, "%s", argv[0]);
    char *cut = strstr(build, "/tests/e2e/");
    if (!cut || access("examples/custom/main.c", R_OK)) {
        fprintf(stderr, "run as BUILD/tests/e2e/test_example_custom from the repository root\n");
        return 1;
    }
    *cut = 0;
    /* the settings of an enclosing `make test ...` must not reach the install
     * or the example's build */
    unsetenv("MAKEFLAGS");
    unsetenv("MAKELEVEL");
    unsetenv("MFLAGS");
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-example")) return 1;
    RUN(test_install_build_run);
    RUN(test_seq2seq_example);
    return tp_finish(TEST_SUMMARY(), tmp);
}
