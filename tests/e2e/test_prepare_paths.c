/* The trainer's two ways into a model that prepares its inputs on the host
 * (ut_model.prepare): by default the loader thread prepares each batch and
 * the trainer uploads the arrays with asynchronous copies; a custom collate
 * hook instead hands the model the batch as a tensor, which
 * ut_model_forward reads back and prepares on the calling thread. Both must
 * train to the same checkpoint, byte for byte: the RoBERTa (with dropout),
 * GPT-2 and BART classifier fixtures on data/sst2_sample, on the CPU and on
 * the simulated device (or UTRAIN_DEVICE's, e.g. cuda on a GPU machine). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "hf_e2e.h"
#include "utrain/train.h"

static char tmp[256];

/* the default collate's result by hand: x padded to the batch's longest mask */
static int my_collate(void *user, ut_ctx *ctx, const ut_dataset *ds, const ut_batch *b, ut_tensor **x,
                      ut_tensor **y) {
    (void)user;
    size_t bytes = (size_t)(b->count * 3 * ds->x_ne[1]) * sizeof(int32_t);
    ut_batch copy = *b;
    copy.x = ut_malloc_check(bytes);
    memcpy(copy.x, b->x, bytes);
    int64_t L = ut_tok_batch_trim(&copy, ds->x_ne[1]);
    *x = ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){b->count, 3, L}, copy.x);
    *y = ut_tensor_from(ctx, ds->y_dtype, 1, (int64_t[]){b->count}, b->y);
    ut_free(copy.x);
    return *x && *y ? 0 : -1;
}

static int train_with(const char *name, const char *exp, const char *device, const ut_hooks *hooks,
                      const char *const *more) {
    char yml[64], set[128], err[512] = "";
    snprintf(yml, sizeof yml, "%s.yml", name);
    ut_config c;
    ut_config_init(&c);
    const char *sets[] = {"train.max_steps=3", "train.save_strategy=steps", "train.save_interval=3",
                          "train.eval_strategy=no", "train.progress=off", NULL};
    int rc = ut_config_load(&c, tp_path(tmp, yml), err, sizeof err);
    snprintf(set, sizeof set, "experiment_name=%s", exp);
    if (!rc) rc = ut_config_set(&c, set, err, sizeof err);
    snprintf(set, sizeof set, "device=%s", device);
    if (!rc) rc = ut_config_set(&c, set, err, sizeof err);
    for (int i = 0; !rc && sets[i]; i++) rc = ut_config_set(&c, sets[i], err, sizeof err);
    for (int i = 0; !rc && more && more[i]; i++) rc = ut_config_set(&c, more[i], err, sizeof err);
    if (!rc) rc = ut_config_validate(&c, err, sizeof err);
    CHECK(!rc, "%s: %s", exp, err);
    if (!rc) rc = ut_trainer_run(&c, NULL, NULL, NULL, hooks);
    ut_config_free(&c);
    return rc;
}

static int train(const char *name, const char *exp, const char *device, const ut_hooks *hooks) {
    return train_with(name, exp, device, hooks, NULL);
}

static void both_paths(const char *name) {
    /* the second device: sim, or the suite's (UTRAIN_DEVICE=cuda on a GPU machine) */
    const char *env = getenv("UTRAIN_DEVICE");
    const char *devices[2] = {"cpu", env && *env && strcmp(env, "cpu") ? env : "sim"};
    ut_hooks custom = {.collate = my_collate};
    for (int d = 0; d < 2; d++) {
        char a[64], b[64], fa[512], fb[512];
        snprintf(a, sizeof a, "%s_%s_loader", name, devices[d]);
        snprintf(b, sizeof b, "%s_%s_hook", name, devices[d]);
        int ra = train(name, a, devices[d], NULL), rb = train(name, b, devices[d], &custom);
        CHECK(ra == 0 && rb == 0, "%s on %s: exit %d (loader), %d (hook)", name, devices[d], ra, rb);
        snprintf(fa, sizeof fa, "%s/runs/%s/checkpoints/step_00000003.safetensors", tmp, a);
        snprintf(fb, sizeof fb, "%s/runs/%s/checkpoints/step_00000003.safetensors", tmp, b);
        CHECK(tp_same_file(fa, fb), "%s on %s: prepared on the loader and through the hook differ", name,
              devices[d]);
    }
}

/* Reads of device memory by the host on sim (src/backend/sim/sim.c). */
unsigned long ut_sim_host_reads(void);

/* A training step reads the device once for its scalars, whatever the
 * accumulation: the window's losses and the gradient's square sum come
 * back together, and backward seeds the loss's gradient on the device. The
 * classifier's accuracy reads each micro-batch's logits and labels (two
 * reads). So four steps more of two micro-batches each make 4 x (1 + 2 x 2)
 * reads more; before the batched read it was 4 x (1 + 2 x 4). */
static void test_one_read_per_step(void) {
    unsigned long r[2];
    const char *steps[2] = {"train.max_steps=2", "train.max_steps=6"};
    for (int i = 0; i < 2; i++) {
        char exp[32];
        snprintf(exp, sizeof exp, "reads_%d", i);
        const char *more[] = {steps[i], "train.gradient_accumulation_steps=2", "train.log_interval=100",
                              "train.save_strategy=no", NULL};
        unsigned long before = ut_sim_host_reads();
        CHECK(train_with("gpt2cls", exp, "sim", NULL, more) == 0, "%s", exp);
        r[i] = ut_sim_host_reads() - before;
    }
    CHECK(r[1] - r[0] == 4 * (1 + 2 * 2), "host reads: %lu in 2 steps, %lu in 6 (want 20 more)", r[0], r[1]);
}

/* A rank of the --nproc launcher gets each stop twice (mpirun forwards it,
 * the launcher sends it too); a copy arriving after the trainer is done must
 * not end the process, whichever thread it reaches (the trainer's run made
 * threads with it unblocked: sim's streams, OpenMP's). Such a rank
 * (UTRAIN_SUPERVISOR set) ignores SIGUSR1 after the trainer; any other
 * program gets its own disposition back. */
static void test_late_stop_copy(void) {
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getppid());
    for (int sup = 0; sup < 2; sup++) {
        if (sup) setenv("UTRAIN_SUPERVISOR", pid, 1);
        char exp[32];
        snprintf(exp, sizeof exp, "late_stop_%d", sup);
        const char *more[] = {"train.max_steps=1", "train.save_strategy=no", NULL};
        CHECK(train_with("gpt2cls", exp, "sim", NULL, more) == 0, "%s", exp);
        unsetenv("UTRAIN_SUPERVISOR");
        struct sigaction cur;
        sigaction(SIGUSR1, NULL, &cur);
        CHECK(cur.sa_handler == (sup ? SIG_IGN : SIG_DFL), "after the trainer%s: SIGUSR1 %s", sup ? ", supervised" : "",
              cur.sa_handler == SIG_IGN ? "ignored" : cur.sa_handler == SIG_DFL ? "default" : "caught");
        if (sup && cur.sa_handler == SIG_IGN) { /* the copy itself: the process goes on (else it ends with 138) */
            kill(getpid(), SIGUSR1);
            usleep(100000);
            signal(SIGUSR1, SIG_DFL);
        }
    }
}

static void test_roberta(void) { both_paths("roberta"); }
static void test_gpt2_classifier(void) { both_paths("gpt2cls"); }
static void test_bart(void) { both_paths("bart"); }

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "ut-prep")) return 1;
    hfe_write_config(tmp, "roberta", "bert", "hf_roberta_tiny", "", 32, 1);
    hfe_write_config(tmp, "gpt2cls", "gpt2", "hf_gpt2_cls_tiny", "  task: sequence_classification\n", 32, 1);
    hfe_write_config(tmp, "bart", "bart", "hf_bart_tiny", "  task: sequence_classification\n", 24, 1);
    RUN(test_roberta);
    RUN(test_gpt2_classifier);
    RUN(test_bart);
    RUN(test_one_read_per_step);
    RUN(test_late_stop_copy);
    return tp_finish(TEST_SUMMARY(), tmp);
}
