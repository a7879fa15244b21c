/* examples/custom: your own model, your own data, your own metrics, trained
 * by the utrain library. Everything the `utrain` program does from a YAML
 * file (run directory, checkpoints, metrics.jsonl, TensorBoard, evaluation,
 * resume) happens here too; we only supply the parts that are ours.
 *
 *   usage: custom [OUTPUT_DIR]      (default /tmp/utrain-custom)
 *
 * The task: three noisy concentric rings in the plane, one class per ring.
 * No straight line separates them, so the network has to learn radii. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utrain/utrain.h>

#define NUM_CLASSES 3

/* ---- 1. the dataset: fill a ut_dataset (shapes, dtypes, get, free) ---- */
typedef struct { float *x; int32_t *y; } rings;

/* get copies example i into the loader's buffers: x is (2) f32, y one i32. */
static int rings_get(ut_dataset *ds, int64_t i, void *x, void *y, char *err, size_t n) {
    (void)err, (void)n;   /* in-memory data cannot fail; a file reader would report here */
    const rings *r = ds->impl;
    float *xf = x;
    xf[0] = r->x[2 * i], xf[1] = r->x[2 * i + 1];
    *(int32_t *)y = r->y[i];
    return 0;
}

static void rings_free(ut_dataset *ds) {
    rings *r = ds->impl;
    free(r->x), free(r->y), free(r), free(ds);
}

/* n points, generated from seed alone, so every run (and a resumed run)
 * sees the same data. Class k lies on radius k + 1, with noise. */
static ut_dataset *rings_new(const char *name, int64_t n, uint64_t seed) {
    rings *r = malloc(sizeof *r);
    r->x = malloc((size_t)n * 2 * sizeof(float));
    r->y = malloc((size_t)n * sizeof(int32_t));
    ut_rng rng;
    ut_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n; i++) {
        int k = (int)(i % NUM_CLASSES);
        float angle = 6.2831853f * ut_rng_uniform(&rng);
        float radius = (float)(k + 1) + 0.2f * ut_rng_normal(&rng);
        r->x[2 * i] = radius * cosf(angle), r->x[2 * i + 1] = radius * sinf(angle);
        r->y[i] = k;
    }
    ut_dataset *ds = calloc(1, sizeof *ds);
    *ds = (ut_dataset){.name = name, .n = n, .x_ndim = 1, .x_ne = {2}, .y_ndim = 0,
                       .x_dtype = UT_F32, .y_dtype = UT_I32,
                       /* num_classes > 0 turns on the built-in accuracy metric */
                       .num_classes = NUM_CLASSES,
                       .get = rings_get, .free = rings_free, .impl = r};
    return ds;
}

/* ---- 2. the model: parameters + a forward made of ops (no backward code) ----
 * h = tanh(W1 x + b1); h = h + sigmoid(Wg h + bg) * tanh(W2 h + b2);
 * logits = W3 h + b3. The gated residual unit lets the second layer add to
 * the first one's features only where its gate opens. */
typedef struct { ut_tensor *w1, *b1, *wg, *bg, *w2, *b2, *w3, *b3; } my_net;

static ut_tensor *my_forward(ut_model *m, ut_ctx *ctx, ut_tensor *x) {
    const my_net *p = m->impl;
    ut_tensor *h = ut_tanh(ctx, ut_linear(ctx, x, p->w1, p->b1));
    ut_tensor *gate = ut_sigmoid(ctx, ut_linear(ctx, h, p->wg, p->bg));
    ut_tensor *update = ut_tanh(ctx, ut_linear(ctx, h, p->w2, p->b2));
    h = ut_add(ctx, h, ut_mul(ctx, gate, update));
    /* ops pass NULL along after an error, so one check (by the trainer) suffices */
    return ut_linear(ctx, h, p->w3, p->b3);
}

static ut_tensor *my_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *y) {
    (void)m;
    return ut_cross_entropy(ctx, logits, y, -1);   /* -1: no label is ignored */
}

/* Registered under "my_model": the trainer calls this with the config's
 * model.* keys (here model.hidden) and the run's seed. */
static ut_model *my_model_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    static const char *const known[] = {"hidden", NULL};
    long long H;
    if (ut_kv_check_keys(opts, known, "model my_model", err, n) ||
        ut_kv_int(opts, "hidden", 32, &H, err, n))
        return NULL;
    if (H < 1) return snprintf(err, n, "option 'hidden': must be >= 1"), NULL;
    ut_model *m = ut_model_new("my_model");
    my_net *p = calloc(1, sizeof *p);
    /* PyTorch's default: uniform in +-1/sqrt(fan_in). Names become the
     * checkpoint's tensor names (model.fc1.weight, ...). */
    ut_init in2 = {UT_INIT_UNIFORM, 1 / sqrtf(2)}, inH = {UT_INIT_UNIFORM, 1 / sqrtf((float)H)};
    p->w1 = ut_param_add(m, "fc1.weight", 2, (int64_t[]){H, 2}, in2);
    p->b1 = ut_param_add(m, "fc1.bias", 1, (int64_t[]){H}, in2);
    p->wg = ut_param_add(m, "gate.weight", 2, (int64_t[]){H, H}, inH);
    p->bg = ut_param_add(m, "gate.bias", 1, (int64_t[]){H}, inH);
    p->w2 = ut_param_add(m, "fc2.weight", 2, (int64_t[]){H, H}, inH);
    p->b2 = ut_param_add(m, "fc2.bias", 1, (int64_t[]){H}, inH);
    p->w3 = ut_param_add(m, "head.weight", 2, (int64_t[]){NUM_CLASSES, H}, inH);
    p->b3 = ut_param_add(m, "head.bias", 1, (int64_t[]){NUM_CLASSES}, inH);
    m->impl = p;
    m->free_impl = free;
    m->forward = my_forward;
    m->loss = my_loss;
    ut_model_finalize(m, seed);   /* allocates the flat buffers, draws the init */
    return m;
}

/* ---- 3. hooks ----
 * metrics: per-class recall. The trainer sums (sum, count) over batches and
 * reports sum / count as dev/recall_<k>, in metrics.jsonl and the results.
 * The other hooks, left NULL here, take the defaults: collate (batch ->
 * tensors), forward_step (model forward + compute_loss, e.g. for extra
 * outputs) and compute_loss (defaults to the model's loss). */
static int recall_metrics(void *user, const ut_step_outputs *out, ut_tensor *y, ut_metric *mets,
                          int max) {
    (void)user;
    if (max < NUM_CLASSES) return 0;
    /* Tensors may live on a device: copy them to the host with ut_tensor_get,
     * the logits converted to float32 first (they are bf16 under
     * train.precision: bf16). */
    int64_t B = y->ne[0];
    ut_tensor *out32 = ut_tensor_to(out->output->ctx, out->output, UT_F32);
    float *logits = malloc(sizeof(float) * (size_t)(B * NUM_CLASSES));
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)B);
    int n = 0;
    if (out32 && logits && labels &&
        !ut_tensor_get(out32, logits, sizeof(float) * (size_t)(B * NUM_CLASSES)) &&
        !ut_tensor_get(y, labels, sizeof(int32_t) * (size_t)B)) {
        n = NUM_CLASSES;
        for (int k = 0; k < NUM_CLASSES; k++) {
            mets[k] = (ut_metric){.sum = 0};
            snprintf(mets[k].name, sizeof mets[k].name, "recall_%d", k);
        }
        for (int64_t i = 0; i < B; i++) {
            const float *row = logits + i * NUM_CLASSES;
            int best = 0;
            for (int k = 1; k < NUM_CLASSES; k++) best = row[k] > row[best] ? k : best;
            mets[labels[i]].count += 1;
            mets[labels[i]].sum += best == labels[i];
        }
    }
    free(logits);
    free(labels);
    return n;
}

/* on_log sees every logged line (train, dev, and test mode's splits); `user`
 * carries our own state: here the best dev accuracy so far. */
typedef struct { double best_dev_accuracy; } log_state;

static void print_dev(void *user, const char *split, int64_t step, int n,
                      const char *const *names, const double *values) {
    log_state *st = user;
    if (strcmp(split, "dev")) return;   /* evaluations only, not the train loss lines */
    printf("  [on_log] step %lld %s:", (long long)step, split);
    for (int i = 0; i < n; i++) {
        printf(" %s=%.3f", names[i], values[i]);
        if (!strcmp(names[i], "accuracy") && values[i] > st->best_dev_accuracy)
            st->best_dev_accuracy = values[i];
    }
    printf("\n");
}

/* ---- 4. main: a config in code, then train and test ---- */
int main(int argc, char **argv) {
    /* Register before the config names it; "mlp", "cnn", "gpt2" are built in. */
    ut_model_register("my_model", my_model_build);

    char err[512], out_dir[600];
    snprintf(out_dir, sizeof out_dir, "output_dir=%s", argc > 1 ? argv[1] : "/tmp/utrain-custom");
    /* The same keys a YAML file or `--set` takes (docs/config.md). The data.*
     * keys are not needed: datasets passed to ut_trainer_run replace them. */
    const char *settings[] = {
        "experiment_name=rings", out_dir, "seed=7", "model.name=my_model", "model.hidden=32",
        "threads=1",   /* a model this small only loses time to thread synchronisation */
        "train.epochs=10", "train.batch_size=32", "train.eval_strategy=epoch",
        "train.best_metric=dev/accuracy", "train.log_interval=100", "train.progress=lines",
        "optim.name=adamw", "optim.lr=0.01", "optim.weight_decay=0",
    };
    ut_config cfg;
    ut_config_init(&cfg);
    for (size_t i = 0; i < sizeof settings / sizeof *settings; i++)
        if (ut_config_set(&cfg, settings[i], err, sizeof err)) goto config_error;
    if (ut_config_validate(&cfg, err, sizeof err)) goto config_error;

    /* Three splits from different seeds. We own them: the trainer frees only
     * datasets it opened itself from data.* keys. */
    ut_dataset *train = rings_new("rings/train", 3000, 1), *dev = rings_new("rings/dev", 600, 2),
               *test = rings_new("rings/test", 600, 3);
    log_state st = {0};
    ut_hooks hooks = {.user = &st, .metrics = recall_metrics, .on_log = print_dev};

    /* model NULL: the trainer builds cfg.model_name ("my_model") from the
     * registry with the model.* options, and frees it at the end. */
    int rc = ut_trainer_run(&cfg, NULL, train, dev, &hooks);
    /* Test mode reloads the best checkpoint (by dev/accuracy) and writes
     * dev_results.json and test_results.json into the run directory. */
    if (rc == UT_EXIT_OK) rc = ut_trainer_test(&cfg, NULL, NULL, dev, test, &hooks);
    if (rc == UT_EXIT_OK)
        printf("best dev accuracy %.4f (chance: %.2f)\n", st.best_dev_accuracy, 1.0 / NUM_CLASSES);

    ut_dataset_free(train), ut_dataset_free(dev), ut_dataset_free(test);
    ut_config_free(&cfg);
    return rc;

config_error:
    fprintf(stderr, "custom: config: %s\n", err);
    ut_config_free(&cfg);
    return UT_EXIT_ERROR;
}
