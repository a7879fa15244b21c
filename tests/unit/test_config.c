/* Configuration: defaults, YAML loading of every type, errors that name the
 * file, line and key, --set, model options, aliases, cross-key validation,
 * write/load round trip, the hash, and docs/config.md kept in step with the
 * schema. `test_config --doc` prints docs/config.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "utrain/config.h"

static char path[64];   /* the file of the last load_text */
static char err[1024];

/* Writes text to a new file /tmp/STEM_XXXXXX, its name into out (n bytes). */
static void write_tmp_as(char *out, size_t n, const char *stem, const char *text) {
    snprintf(out, n, "/tmp/%s_XXXXXX", stem);
    int fd = mkstemp(out);
    if (fd < 0) abort();
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
}

/* Writes text to a new file under /tmp (its name in path). */
static void write_tmp(const char *text) { write_tmp_as(path, sizeof path, "ut_config", text); }

/* ut_config_load of text over c; err holds the message. */
static int load_text(ut_config *c, const char *text) {
    write_tmp(text);
    err[0] = 0;
    int rc = ut_config_load(c, path, err, sizeof err);
    unlink(path);
    return rc;
}

/* Loads text into a fresh config and checks the error is "<path>:<msg>". */
static void check_load_error(const char *text, const char *msg) {
    ut_config c;
    ut_config_init(&c);
    int rc = load_text(&c, text);
    char want[1024];
    snprintf(want, sizeof want, "%s:%s", path, msg);
    CHECK(rc == -1, "loaded: %s", text);
    CHECK(!strcmp(err, want), "got '%s', want '%s'", err, want);
    ut_config_free(&c);
}

static void check_set_error(const char *assignment, const char *msg) {
    ut_config c;
    ut_config_init(&c);
    err[0] = 0;
    CHECK(ut_config_set(&c, assignment, err, sizeof err) == -1, "accepted %s", assignment);
    CHECK(!strcmp(err, msg), "got '%s', want '%s'", err, msg);
    ut_config_free(&c);
}

/* Applies the --set assignments (NULL-terminated) to defaults and checks that
 * validate fails with msg. */
/* The other trainers' defaults a loaded file took (ut_config_defaults_text). */
static const char *hf_took(const ut_config *c) {
    static char buf[800];
    return ut_config_defaults_text(c, UT_CFG_DEFAULTS_HF, buf, sizeof buf);
}
static const char *flagai_took(const ut_config *c) {
    static char buf[800];
    return ut_config_defaults_text(c, UT_CFG_DEFAULTS_FLAGAI, buf, sizeof buf);
}

static void check_invalid(const char *const *sets, const char *msg) {
    ut_config c;
    ut_config_init(&c);
    for (const char *const *s = sets; *s; s++)
        CHECK(ut_config_set(&c, *s, err, sizeof err) == 0, "%s: %s", *s, err);
    err[0] = 0;
    CHECK(ut_config_validate(&c, err, sizeof err) == -1, "valid: %s", sets[0]);
    CHECK(!strcmp(err, msg), "got '%s', want '%s'", err, msg);
    ut_config_free(&c);
}

static const char *opt(const ut_config *c, const char *key) {
    const char *v = ut_kv_get(c->model_opts, key);
    return v ? v : "(absent)";
}

// --- defaults and loading

static void test_defaults(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(!strcmp(c.output_dir, "runs") && !strcmp(c.experiment_name, "default"), "run names");
    CHECK(!strcmp(c.mode, "train") && c.seed == 42 && c.threads == 0, "run");
    CHECK(!strcmp(c.model_name, "cnn") && ut_kv_len(c.model_opts) == 0, "model");
    CHECK(!strcmp(c.data_name, "idx_images"), "%s", c.data_name);
    CHECK(!strcmp(c.train_images, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"),
          "%s", c.train_images);
    CHECK(!strcmp(c.test_labels, "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"),
          "%s", c.test_labels);
    CHECK(c.dev_size == 5000 && c.mean == 0.2860 && c.std == 0.3530, "normalisation");
    CHECK(c.seq_len == 64 && !strcmp(c.tokenizer, "word") && c.max_len == 64 && c.min_freq == 1, "text");
    CHECK(c.shuffle && !c.drop_last && c.prefetch == 2, "loader");
    CHECK(c.epochs == 1 && c.max_steps == 0 && c.batch_size == 64 && c.eval_batch_size == 0, "steps");
    CHECK(c.gradient_accumulation_steps == 1 && c.log_interval == 50, "accum/log");
    CHECK(!strcmp(c.eval_strategy, "epoch") && c.eval_interval == 0, "eval");
    CHECK(!strcmp(c.save_strategy, "epoch") && c.save_interval == 0 && c.save_total_limit == 0, "save");
    CHECK(!strcmp(c.best_metric, "dev/loss") && !c.greater_is_better && !c.greater_is_better_set, "best");
    CHECK(c.grad_clip == 0 && !c.checkpoint_activations && c.early_stopping_patience == 0, "train");
    CHECK(c.early_stopping_threshold == 0 && !strcmp(c.progress, "auto"), "progress");
    CHECK(!strcmp(c.optim_name, "adamw") && c.lr == 1e-3 && c.weight_decay == 0.01, "optim");
    CHECK(c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8, "adam");
    CHECK(c.momentum == 0 && c.dampening == 0 && !c.nesterov, "sgd");
    CHECK(!strcmp(c.schedule, "constant") && c.warmup_steps == 0 && c.step_size == 1, "schedule");
    CHECK(c.min_lr == 0 && c.gamma == 0.1, "schedule values");
    CHECK(ut_config_validate(&c, err, sizeof err) == 0, "%s", err);
    ut_config_free(&c);
}

static const char *const full_yaml =
    "experiment_name: full\n"
    "output_dir: /tmp/runs\n"
    "mode: test\n"
    "continue_training: yes\n"
    "load_dir: ~\n"
    "seed: 7\n"
    "threads: 3\n"
    "model:\n"
    "  name: gpt2\n"
    "  n_layer: 2\n"
    "data:\n"
    "  name: tokens\n"
    "  train_path: \"data/train_*.bin\"\n"
    "  seq_len: 128\n"
    "  mean: 0.5\n"
    "  shuffle: false\n"
    "  prefetch: 4\n"
    "train:\n"
    "  epochs: 3\n"
    "  max_steps: 1000\n"
    "  batch_size: 16\n"
    "  eval_strategy: steps\n"
    "  eval_interval: 100\n"
    "  best_metric: dev/accuracy\n"
    "  grad_clip: 1.0\n"
    "  progress: lines\n"
    "optim:\n"
    "  name: sgd\n"
    "  lr: 3e-4\n"
    "  betas: [0.8, 0.95]\n"
    "  momentum: 0.9\n"
    "  nesterov: true\n"
    "  schedule: cosine\n"
    "  warmup_steps: 10\n";

static void test_full_file(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, full_yaml) == 0, "%s", err);
    CHECK(!strcmp(c.experiment_name, "full") && !strcmp(c.output_dir, "/tmp/runs"), "strings");
    CHECK(!strcmp(c.mode, "test") && c.continue_training && !*c.load_dir, "run");
    CHECK(c.seed == 7 && c.threads == 3, "ints");
    CHECK(!strcmp(c.model_name, "gpt2") && !strcmp(opt(&c, "n_layer"), "2"), "model");
    CHECK(!strcmp(c.data_name, "tokens") && !strcmp(c.train_path, "data/train_*.bin"), "data");
    CHECK(c.seq_len == 128 && c.mean == 0.5 && !c.shuffle && c.prefetch == 4, "data values");
    CHECK(c.epochs == 3 && c.max_steps == 1000 && c.batch_size == 16, "train ints");
    CHECK(!strcmp(c.eval_strategy, "steps") && c.eval_interval == 100, "eval");
    CHECK(!strcmp(c.best_metric, "dev/accuracy") && c.greater_is_better, "metric");
    CHECK(c.grad_clip == 1.0 && !strcmp(c.progress, "lines"), "train");
    CHECK(!strcmp(c.optim_name, "sgd") && c.lr == 3e-4 && c.beta1 == 0.8 && c.beta2 == 0.95, "optim");
    CHECK(c.momentum == 0.9 && c.nesterov && !strcmp(c.schedule, "cosine") && c.warmup_steps == 10,
          "sgd");
    CHECK(ut_config_validate(&c, err, sizeof err) == 0, "%s", err);
    ut_config_free(&c);
}

/* A file without keys would silently train every default: refused. */
static void test_empty_file(void) {
    const char *texts[] = {"", "# only a comment\n", "{}\n", "---\n...\n", "~\n"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        ut_config c;
        ut_config_init(&c);
        CHECK(load_text(&c, texts[i]) == -1, "loaded '%s'", texts[i]);
        CHECK(strstr(err, path) && strstr(err, ": no keys (the file is empty, holds only comments or is {})"),
              "'%s': %s", texts[i], err);
        ut_config_free(&c);
    }
    check_load_error("just a string\n", "1: the top level must be a mapping of keys");
    check_load_error("- a\n- b\n", "1: the top level must be a mapping of keys");
}

// --- load errors

/* YAML's types: a quoted or !!str scalar is a string, refused where a number
 * or boolean belongs; a quote left open is named as such. */
static void test_yaml_types(void) {
    check_load_error("optim:\n  lr: \"0.001\"\n",
                     "2: optim.lr: \"0.001\" is a string in YAML (quoted), but optim.lr takes a number: "
                     "write it without quotes or tag (lr: 0.001)");
    check_load_error("seed: !!str 1\n", "1: seed: '1' is a string in YAML (tagged !!str), but seed takes "
                     "an integer: write it without quotes or tag (seed: 1)");
    check_load_error("train: {batch_size: '3'}\n", "1: train.batch_size: \"3\" is a string in YAML (quoted), but "
                     "train.batch_size takes an integer: write it without quotes or tag (batch_size: 3)");
    check_load_error("data:\n  shuffle: \"false\"\n", "2: data.shuffle: \"false\" is a string in YAML "
                     "(quoted), but data.shuffle takes true or false: write it without quotes or tag "
                     "(shuffle: false)");
    check_load_error("experiment_name: \"abc\nseed: 1\ntrain:\n  epochs: 2 and the rest\"\n",
                     "1: experiment_name: the quoted value runs from line 1 to line 4: a quote left "
                     "open? (close it on the line where it starts)");
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, "experiment_name: \"42\"\ntrain: {eval_strategy: \"no\", epochs: 3}\n") == 0,
          "strings stay strings: %s", err);
    CHECK(!strcmp(c.experiment_name, "42") && c.epochs == 3, "%s %lld", c.experiment_name, (long long)c.epochs);
    ut_config_free(&c);
}

static void test_unknown_key(void) {
    check_load_error("train:\n  epochs: 2\n  batch_sise: 3\n",
                     "3: train.batch_sise: unknown key (did you mean train.batch_size?)");
    check_load_error("trian:\n  epochs: 2\n",
                     "2: trian.epochs: unknown key (did you mean train.epochs?)");
    check_load_error("batchsize: 8\n", "1: batchsize: unknown key (did you mean batch_size?)");
    check_load_error("train:\n  lr: 0.1\n", "2: train.lr: unknown key (did you mean optim.lr?)");
    check_load_error("zzqxv: 1\n", "1: zzqxv: unknown key");
    check_load_error("trian: {}\n", "1: trian: unknown key (did you mean train?)");
    check_load_error("train: 3\n", "1: train: unknown key (train is a section: give one of its keys a value, "
                                    "e.g. train.epochs; utrain config --doc lists them)");
}

static void test_wrong_type(void) {
    check_load_error("seed: 1\ntrain:\n  batch_size: two\n", "3: train.batch_size: 'two' is not an integer");
    check_load_error("seed: 1\ntrain:\n  epochs: two\n", "3: train.epochs: 'two' is not a number");
    check_load_error("optim:\n  lr: fast\n", "2: optim.lr: 'fast' is not a number");
    check_load_error("optim:\n  lr: .nan\n", "2: optim.lr: '.nan' is not a number");
    check_load_error("data:\n  shuffle: maybe\n", "2: data.shuffle: 'maybe' is not true or false");
    check_load_error("train:\n  batch_size: 1.5\n", "2: train.batch_size: '1.5' is not an integer");
    check_load_error("train:\n  epochs: [1, 2]\n",
                     "2: train.epochs: a sequence where a single value belongs");
    check_load_error("optim:\n  lr: {a: 1}\n", "2: optim.lr: a mapping where a single value belongs");
    check_load_error("optim:\n  betas: [0.9]\n",
                     "2: optim.betas: expected a list of 2 numbers, got '0.9'");
    check_load_error("model:\n  sizes: [[1, 2]]\n", "2: model.sizes: a list may only hold single values");
}

static void test_out_of_range(void) {
    check_load_error("train:\n  batch_size: 0\n", "2: train.batch_size: must be >= 1 and <= 1e+12");
    check_load_error("optim:\n  eps: 0\n", "2: optim.eps: must be > 0");
    check_load_error("optim:\n  beta2: 1\n", "2: optim.beta2: must be >= 0 and < 1");
    check_load_error("optim:\n  betas: [0.9, 1.5]\n", "2: optim.betas: must be >= 0 and < 1");
    check_load_error("threads: 99999999999\n", "1: threads: must be >= 0 and <= 4096");
    /* 100000 threads crashed inside libgomp (the embedding kernel's parallel loop) */
    check_load_error("threads: 100000\n", "1: threads: must be >= 0 and <= 4096");
    check_load_error("data:\n  prefetch: 99999999999\n", "2: data.prefetch: must be between -2147483648 and 2147483647");
}

static void test_bad_enum(void) {
    check_load_error("optim:\n  schedule: cosin\n",
                     "2: optim.schedule: 'cosin' is not one of constant, cosine, linear, step, cosine_restarts, "
                     "polynomial, inverse_sqrt, wsd, ds_warmup, ds_warmup_decay, ds_warmup_cosine, "
                     "annealing, plateau, greedy");
    check_load_error("mode: eval\n", "1: mode: 'eval' is not one of train, test");
}

static void test_failed_load_changes_nothing(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, "model:\n  depth: 3\ntrain:\n  epochs: 7\n  batch_size: 0\n") == -1, "loaded");
    CHECK(c.epochs == 1 && ut_kv_len(c.model_opts) == 0, "partly applied: epochs %lld", (long long)c.epochs);
    ut_config_free(&c);
}

static void test_missing_file(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(ut_config_load(&c, "/nonexistent/x.yml", err, sizeof err) == -1, "loaded");
    CHECK(!strcmp(err, "/nonexistent/x.yml: No such file or directory"), "%s", err);
    ut_config_free(&c);
}

static void test_syntax_error(void) {
    check_load_error("train:\n  epochs: 1\n bad: [\n",
                     "3: did not find expected key (while parsing a block mapping)");
    check_load_error("train:\n\tepochs: 1\n",
                     "2: found character that cannot start any token (while scanning for the next token)");
    check_load_error("seed: 1\n---\nseed: 2\n", "2: only one YAML document is supported");
}

static void test_duplicate_key(void) {
    check_load_error("train:\n  epochs: 1\n  epochs: 2\n",
                     "3: train.epochs: duplicate key (first given at line 2)");
    check_load_error("epochs: 1\ntrain:\n  epochs: 2\n",
                     "3: train.epochs: duplicate key (first given at line 1)");
    check_load_error("train:\n  epochs: 1\ntrain:\n  batch_size: 2\n",
                     "3: train: duplicate key (first given at line 1)");
    check_load_error("model: gpt2\nmodel:\n  n_layer: 2\n", "2: model: duplicate key (first given at line 1)");
}

// --- --set, model options, aliases

static void test_set(void) {
    ut_config c;
    ut_config_init(&c);
    const char *sets[] = {"train.batch_size=32", "optim.lr=3e-4", "data.shuffle=false",
                          "optim.schedule=linear", "experiment_name=a b", "optim.betas=[0.5, 0.6]",
                          "model.sizes=[784, 64,10]", "model.act=relu", "load_dir="};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        CHECK(ut_config_set(&c, sets[i], err, sizeof err) == 0, "%s: %s", sets[i], err);
    CHECK(c.batch_size == 32 && c.lr == 3e-4 && !c.shuffle && !strcmp(c.schedule, "linear"), "values");
    CHECK(!strcmp(c.experiment_name, "a b") && c.beta1 == 0.5 && c.beta2 == 0.6, "str, list");
    CHECK(!strcmp(opt(&c, "sizes"), "784,64,10") && !strcmp(opt(&c, "act"), "relu"), "model opts");
    ut_config_free(&c);
    check_set_error("train.batch_size=x", "--set: train.batch_size: 'x' is not an integer");
    check_set_error("train.epoch=2", "--set: train.epoch: unknown key (did you mean train.epochs?)");
    check_set_error("dist=ddp", "--set: dist: unknown key (dist is a section: give one of its keys a value, "
                                "e.g. dist.strategy; utrain config --doc lists them)");
    check_set_error("train.batch_size", "--set: 'train.batch_size' is not key=value");
    check_set_error("=3", "--set: '=3' is not key=value");
    check_set_error("train.eval_strategy=sometimes",
                    "--set: train.eval_strategy: 'sometimes' is not one of no, steps, epoch");
    check_set_error("train.batch_size=-1", "--set: train.batch_size: must be >= 1 and <= 1e+12");
}

static void test_model_options(void) {
    ut_config c;
    ut_config_init(&c);
    const char *text = "model:\n  name: mlp\n  sizes: [784, 128, 10]\n  hidden:\n    - 32\n    - 16\n"
                       "  dropout: 0.1\n  attn:\n    heads: 4\n  bias: true\n";
    CHECK(load_text(&c, text) == 0, "%s", err);
    CHECK(!strcmp(c.model_name, "mlp") && ut_kv_len(c.model_opts) == 5, "%d opts", ut_kv_len(c.model_opts));
    CHECK(!strcmp(opt(&c, "sizes"), "784,128,10"), "%s", opt(&c, "sizes"));
    CHECK(!strcmp(opt(&c, "hidden"), "32,16"), "%s", opt(&c, "hidden"));
    CHECK(!strcmp(opt(&c, "dropout"), "0.1") && !strcmp(opt(&c, "attn.heads"), "4"), "scalars");
    CHECK(!strcmp(opt(&c, "bias"), "true"), "%s", opt(&c, "bias"));
    ut_config_free(&c);
}

/* Option names must survive being written back into config.yml as plain
 * keys (found by the config fuzz target: "model.[x" loaded, then its
 * config.yml did not). */
static void test_model_option_names(void) {
    check_load_error("model:\n  name: mlp\n  \"[sizes\": 3\n",
                     "3: model.[sizes: not a model option name (letters, digits, '_', '-' and '.', "
                     "starting with a letter, digit or '_')");
    check_load_error("model.a b: 1\n", "1: model.a b: not a model option name (letters, digits, "
                                         "'_', '-' and '.', starting with a letter, digit or '_')");
    check_set_error("model.-x=1", "--set: model.-x: not a model option name (letters, digits, '_', '-' and "
                                  "'.', starting with a letter, digit or '_')");
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, "model:\n  n_layer-2.x: 1\n  _a: 2\n") == 0, "%s", err);
    ut_config_free(&c);
}

static void test_aliases(void) {
    ut_config c;
    ut_config_init(&c);
    const char *text = "model: gpt2\nepochs: 5\nbatch_size: 8\ngradient_accumulation_steps: 4\n"
                       "log_interval: 10\neval_interval: 20\ncheckpoint_activations: true\nlr: 0.01\n"
                       "optim: sgd\n";
    CHECK(load_text(&c, text) == 0, "%s", err);
    CHECK(!strcmp(c.model_name, "gpt2") && !strcmp(c.optim_name, "sgd"), "section shorthand");
    CHECK(c.epochs == 5 && c.batch_size == 8 && c.gradient_accumulation_steps == 4, "train");
    CHECK(c.log_interval == 10 && c.eval_interval == 20 && c.checkpoint_activations, "train 2");
    CHECK(c.lr == 0.01, "lr");
    CHECK(ut_config_set(&c, "epochs=6", err, sizeof err) == 0 && c.epochs == 6, "--set alias");
    ut_config_free(&c);
    /* Hugging Face TrainingArguments' names */
    ut_config_init(&c);
    CHECK(load_text(&c, "per_device_train_batch_size: 12\nper_device_eval_batch_size: 24\nnum_train_epochs: 3\n"
                        "evaluation_strategy: steps\neval_steps: 40\nlogging_steps: 7\nsave_steps: 80\n"
                        "save_strategy: steps\nsave_total_limit: 2\nlr_scheduler_type: cosine\n"
                        "adam_beta1: 0.8\nadam_beta2: 0.95\nadam_epsilon: 1.0e-6\nmax_grad_norm: 1.0\n"
                        "greater_is_better: false\n") == 0,
          "%s", err);
    CHECK(c.batch_size == 12 && c.eval_batch_size == 24 && c.epochs == 3 && !strcmp(c.eval_strategy, "steps") &&
              c.eval_interval == 40 && c.log_interval == 7 && c.save_interval == 80 && c.save_total_limit == 2,
          "HF train names");
    CHECK(!strcmp(c.schedule, "cosine") && c.beta1 == 0.8 && c.beta2 == 0.95 && c.eps == 1e-6 && c.grad_clip == 1.0 &&
              !c.greater_is_better, "HF optimizer names");
    ut_config_free(&c);
}

/* A Hugging Face TrainingArguments file (the JSON HfArgumentParser reads; the
 * seed's remove_unused_columns among its fields) loads with the Trainer's
 * meaning; a value utrain cannot honour is refused naming the field. */
/* TrainingArguments files as transformers writes them (to_json_string, every
 * field; tests/parity/make_hf_training_args.py): each loads and passes the
 * checks, with the meaning it has in the Trainer. */
/* Seed 002's TrainingArguments, the fields it names, as YAML: the
 * Trainer's defaults fill what it leaves out (AdamW at 5e-5 without weight
 * decay, a linear decay, clipping at 1.0, no evaluation unless named, a log
 * line and a checkpoint every 500 steps); what it names, or sets through
 * another field (logging_strategy: no), stays; a utrain config takes none. */
static void test_hf_defaults(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, "output_dir: basic-trainer\nper_device_train_batch_size: 64\n"
                        "per_device_eval_batch_size: 64\nnum_train_epochs: 1\nevaluation_strategy: epoch\n"
                        "remove_unused_columns: false\n") == 0,
          "%s", err);
    CHECK(fabs(c.lr - 5e-5) < 1e-12 && c.weight_decay == 0 && !strcmp(c.schedule, "linear") && c.grad_clip == 1.0 &&
              c.epochs == 1 && c.batch_size == 64 && c.eval_batch_size == 64 && !strcmp(c.eval_strategy, "epoch") &&
              c.log_interval == 500 && !strcmp(c.save_strategy, "steps") && c.save_interval == 500,
          "lr %g wd %g %s clip %g epochs %lld batch %lld eval %s log %lld save %s %lld", c.lr, c.weight_decay, c.schedule,
          c.grad_clip, (long long)c.epochs, (long long)c.batch_size, c.eval_strategy, (long long)c.log_interval,
          c.save_strategy, (long long)c.save_interval);
    CHECK(!strcmp(hf_took(&c), "learning_rate 5e-5, weight_decay 0, lr_scheduler_type linear, max_grad_norm 1.0, "
                               "logging_steps 500, save_steps 500, load_best_model_at_end false (the run's model "
                               "is its last)") &&
              !c.load_best_at_end,
          "named: %s", hf_took(&c));
    /* a default the command line changes is no longer one the run took */
    CHECK(ut_config_set(&c, "logging_steps=1", err, sizeof err) == 0 && !strstr(hf_took(&c), "logging_steps") &&
              strstr(hf_took(&c), "save_steps 500"),
          "after --set logging_steps=1: %s", hf_took(&c));
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "learning_rate: 2e-5\nlogging_strategy: \"no\"\nmax_steps: 100\nweight_decay: 0.01\n"
                        "save_strategy: epoch\n") == 0 &&
              fabs(c.lr - 2e-5) < 1e-12 && c.log_interval == 0 && c.max_steps == 100 && c.epochs == 1 &&
              c.weight_decay == 0.01 && !strcmp(c.save_strategy, "epoch") && c.batch_size == 8,
          "named fields stay: lr %g log %lld epochs %lld (%s)", c.lr, (long long)c.log_interval, (long long)c.epochs,
          err);
    ut_config_free(&c);
    /* eval_strategy steps without eval_steps: every logging_steps, as TrainingArguments' __post_init__ */
    ut_config_init(&c);
    CHECK(load_text(&c, "eval_strategy: steps\nlogging_steps: 20\nremove_unused_columns: false\n") == 0 &&
              c.eval_interval == 20 && strstr(hf_took(&c), "eval_steps = logging_steps (20)") &&
              ut_config_validate(&c, err, sizeof err) == 0,
          "eval_steps from logging_steps: %lld, %s (%s)", (long long)c.eval_interval, hf_took(&c), err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "eval_strategy: steps\neval_steps: 7\nremove_unused_columns: false\n") == 0 &&
              c.eval_interval == 7 && !strstr(hf_took(&c), "eval_steps ="),
          "eval_steps given: %lld", (long long)c.eval_interval);
    ut_config_free(&c);
    /* transformers 5: warmup_steps below 1 is a ratio */
    ut_config_init(&c);
    CHECK(load_text(&c, "warmup_steps: 0.05\nnum_train_epochs: 2\n") == 0 && c.warmup_ratio == 0.05 &&
              c.warmup_steps == 0 && c.warmup_from_zero,
          "warmup_steps 0.05: ratio %g, steps %lld (%s)", c.warmup_ratio, (long long)c.warmup_steps, err);
    CHECK(load_text(&c, "warmup_steps: 30\n") == 0 && c.warmup_steps == 30, "warmup_steps 30: %lld",
          (long long)c.warmup_steps);
    CHECK(load_text(&c, "warmup_steps: 40.0\n") == 0 && c.warmup_steps == 40, "warmup_steps 40.0: %lld",
          (long long)c.warmup_steps);
    ut_config_free(&c);
    check_load_error("warmup_steps: 1.5\n", "1: warmup_steps: '1.5': a number of steps, or a fraction of them in "
                                           "(0, 1)");
    /* transformers' constant ignores warmup_steps; constant_with_warmup warms up from 0 */
    ut_config_init(&c);
    CHECK(load_text(&c, "lr_scheduler_type: constant\nwarmup_steps: 10\n") == 0 && c.warmup_steps == 0 &&
              !c.warmup_from_zero && strstr(hf_took(&c), "lr_scheduler_type constant without warmup, ") == hf_took(&c),
          "constant: warmup %lld: %s", (long long)c.warmup_steps, hf_took(&c));
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "lr_scheduler_type: constant_with_warmup\nwarmup_steps: 10\n") == 0 && c.warmup_steps == 10 &&
              c.warmup_from_zero && !strcmp(c.schedule, "constant"),
          "constant_with_warmup: warmup %lld from zero %d", (long long)c.warmup_steps, c.warmup_from_zero);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "optim: {lr: 0.01}\ntrain: {epochs: 2}\n") == 0 && !*hf_took(&c) && c.batch_size == 64 &&
              !strcmp(c.schedule, "constant"),
          "a utrain config: %s", hf_took(&c));
    ut_config_free(&c);
}

static void test_hf_training_arguments_files(void) {
    ut_config c;
    ut_config_init(&c);
    err[0] = 0;
    CHECK(ut_config_load(&c, "tests/parity/fixtures/hf_training_args_default.json", err, sizeof err) == 0 &&
              ut_config_validate(&c, err, sizeof err) == 0,
          "every field at its default: %s", err);
    CHECK(c.epochs == 3 && c.max_steps == 0 && c.batch_size == 8 && fabs(c.lr - 5e-5) < 1e-12 &&
              !strcmp(c.schedule, "linear") && !strcmp(c.optim_name, "adamw") && c.save_interval == 500 &&
              c.log_interval == 500 && !strcmp(c.eval_strategy, "no") && c.seed == 42 && !c.load_best_at_end &&
              !strcmp(c.mode, "test"),
          "defaults: epochs %lld max_steps %lld batch %lld lr %g %s %s save %lld log %lld eval %s mode %s",
          (long long)c.epochs, (long long)c.max_steps, (long long)c.batch_size, c.lr, c.schedule, c.optim_name,
          (long long)c.save_interval, (long long)c.log_interval, c.eval_strategy, c.mode);
    CHECK(!*hf_took(&c), "a whole file names every field: no defaults applied (%s)", hf_took(&c));
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(ut_config_load(&c, "tests/parity/fixtures/hf_training_args_custom.json", err, sizeof err) == 0 &&
              ut_config_validate(&c, err, sizeof err) == 0,
          "a fine-tuning recipe: %s", err);
    CHECK(!strcmp(c.mode, "train") && c.epochs == 2 && c.batch_size == 16 && c.eval_batch_size == 32 &&
              c.gradient_accumulation_steps == 2 && fabs(c.lr - 3e-5) < 1e-12 && fabs(c.weight_decay - 0.01) < 1e-9,
          "recipe's sizes");
    CHECK(!strcmp(c.schedule, "cosine") && c.min_lr == 1e-6 && c.warmup_steps == 20 && c.warmup_from_zero,
          "cosine_with_min_lr: %s %g, warmup from zero %d", c.schedule, c.min_lr, c.warmup_from_zero);
    CHECK(!strcmp(c.eval_strategy, "steps") && c.eval_interval == 50 && c.eval_delay == 100 &&
              c.save_interval == 50 && c.save_total_limit == 2 && !c.load_best_at_end &&
              !strcmp(c.best_metric, "dev/accuracy") && c.log_interval == 10,
          "evaluation and checkpoints");
    CHECK(!c.shuffle && c.seed == 7 && c.data_seed == 11 && c.prefetch == 4 && c.bucket_mb == 50 &&
              c.label_smoothing == 0.1 && fabs(c.grad_clip - 0.5) < 1e-7,
          "sampling %d seed %lld data_seed %lld prefetch %lld bucket %g", c.shuffle, (long long)c.seed,
          (long long)c.data_seed, (long long)c.prefetch, c.bucket_mb);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(ut_config_load(&c, "tests/parity/fixtures/hf_seq2seq_training_args.json", err, sizeof err) == 0 &&
              c.gen_eval && c.gen_max_new_tokens == 63 && c.gen_num_beams == 4 && c.group_by_length && c.epochs == 1,
          "Seq2SeqTrainingArguments: %s", err);
    ut_config_free(&c);
    /* values of those fields that utrain cannot honour are still refused */
    const struct { const char *text, *msg; } bad[] = {
        {"use_liger_kernel: true\n", "use_liger_kernel: 'true': utrain's fused kernels are its own (docs/gpu.md); "
                                     "write false or remove the key"},
        {"include_num_input_tokens_seen: some\n", "include_num_input_tokens_seen: expected no, all, non_padding, "
                                                   "true or false, got 'some'"},
        {"torch_empty_cache_steps: 5\n", "torch_empty_cache_steps: '5': utrain allocates its device memory for the "
                                         "run and reuses it"},
        {"train_sampling_strategy: batch_rebalance\n", "utrain's sampler is random (data.shuffle: true), "
                                                       "sequential"},
        {"fsdp: full_shard offload\n", "fsdp: 'offload': utrain has full_shard (dist.strategy: zero3)"},
        {"average_tokens_across_devices: false\n", "utrain averages the loss over the target tokens"},
        {"accelerator_config: {split_batches: true}\n", "accelerator_config.split_batches: 'true': train.batch_size "
                                                        "is each process's batch"},
        {"local_rank: 0\n", "local_rank: '0': ranks and the world size come from the launcher"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ut_config_init(&c);
        CHECK(load_text(&c, bad[i].text) == -1 && strstr(err, bad[i].msg), "%s: got '%s'", bad[i].text, err);
        ut_config_free(&c);
    }
    ut_config_init(&c);
    CHECK(load_text(&c, "train_sampling_strategy: group_by_length\n") == 0 && c.group_by_length, "grouped: %s", err);
    ut_config_free(&c);
    ut_config_init(&c); /* a fraction of epochs, as the Trainer counts it (the trainer's steps: test_trainer) */
    CHECK(load_text(&c, "num_train_epochs: 2.5\n") == 0 && c.epochs == 2.5, "2.5 epochs: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "fsdp: full_shard auto_wrap\nmax_steps: -1\nreport_to: none\ntf32: null\n"
                        "load_best_model_at_end: true\nactivation_checkpointing: true\n") == 0 &&
              !strcmp(c.dist_strategy, "zero3") && c.max_steps == 0 && c.checkpoint_activations && c.load_best_at_end,
          "fsdp, max_steps -1, report_to none: %s", err);
    ut_config_free(&c);
}

/* logging_steps, eval_steps, save_steps under 1: fractions of the run's
 * steps, as transformers reads them; eval_steps then follows logging_steps'
 * fraction; utrain's own keys stay under 1 and do not mix with the ratios */
/* The example scripts' argument file (python run_glue.py args.json): the
 * model and data arguments map onto utrain's keys, text files make the data
 * tsv_text (pairs to generate from: seq2seq_text), what loads from the Hub is
 * refused, the scripts' own speed knobs change nothing */
static void test_hf_example_script_arguments(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"models/bert\", \"tokenizer_name\": \"models/tok\",\n"
                        " \"train_file\": \"glue/train.csv\", \"validation_file\": \"glue/dev.jsonl\",\n"
                        " \"test_file\": \"glue/test.tsv\", \"max_seq_length\": 128, \"max_train_samples\": 1000,\n"
                        " \"max_eval_samples\": 200, \"max_predict_samples\": 50, \"ignore_mismatched_sizes\": true,\n"
                        " \"do_train\": true, \"cache_dir\": \"/tmp/hf\", \"overwrite_cache\": true,\n"
                        " \"preprocessing_num_workers\": 4, \"pad_to_max_length\": true, \"use_fast_tokenizer\": true,\n"
                        " \"model_revision\": \"main\", \"token\": null, \"trust_remote_code\": false,\n"
                        " \"output_dir\": \"out\"}\n") == 0, "%s", err);
    CHECK(!strcmp(ut_kv_get(c.model_opts, "pretrained"), "models/bert") && !strcmp(c.tokenizer, "models/tok") &&
              !strcmp(c.train_path, "glue/train.csv") && !strcmp(c.dev_path, "glue/dev.jsonl") &&
              !strcmp(c.test_path, "glue/test.tsv") && c.max_len == 128 && c.max_train_samples == 1000 &&
              c.max_eval_samples == 200 && c.max_predict_samples == 50 &&
              !strcmp(ut_kv_get(c.model_opts, "ignore_mismatched_sizes"), "true") && !strcmp(c.data_name, "tsv_text"),
          "mapped: %s %s %s %lld %lld %s", c.tokenizer, c.train_path, c.dev_path, (long long)c.max_len,
          (long long)c.max_train_samples, c.data_name);
    CHECK(strstr(hf_took(&c), "train_file: texts to classify (data.name tsv_text)") &&
              strstr(hf_took(&c), "learning_rate 5e-5"), "%s", hf_took(&c));
    ut_config_free(&c);
    /* run_summarization's: pairs */
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"models/t5\", \"train_file\": \"xsum/train.jsonl\",\n"
                        " \"max_source_length\": 512, \"source_prefix\": \"summarize: \", \"output_dir\": \"out\"}\n") == 0 &&
              !strcmp(c.data_name, "seq2seq_text"), "pairs: %s %s", err, c.data_name);
    ut_config_free(&c);
    /* run_classification's columns; run_summarization's; run_translation's languages */
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"m\", \"train_file\": \"t.csv\", \"text_column_names\": "
                        "\"title,body\", \"text_column_delimiter\": \" | \", \"label_column_name\": \"stars\", "
                        "\"model\": \"bert\", \"output_dir\": \"out\"}\n") == 0 &&
              !strcmp(c.text_column, "title,body") && !strcmp(c.text_column_delimiter, " | ") &&
              !strcmp(c.label_column, "stars") && !strcmp(c.data_name, "tsv_text") &&
              ut_config_validate(&c, err, sizeof err) == 0, "run_classification's columns: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"m\", \"train_file\": \"x.csv\", \"text_column\": \"document\", "
                        "\"summary_column\": \"summary\", \"val_max_target_length\": null, "
                        "\"ignore_pad_token_for_loss\": true, \"lang\": null, \"model\": \"bart\", \"output_dir\": \"out\"}\n") == 0 &&
              !strcmp(c.source_field, "document") && !strcmp(c.target_field, "summary") &&
              !strcmp(c.data_name, "seq2seq_text") && ut_config_validate(&c, err, sizeof err) == 0,
          "run_summarization's columns: %s %s %s", err, c.source_field, c.data_name);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"m\", \"train_file\": \"wmt.json\", \"source_lang\": \"en\", "
                        "\"target_lang\": \"ro\", \"source_prefix\": \"translate English to Romanian: \", "
                        "\"output_dir\": \"out\"}\n") == 0 &&
              !strcmp(c.source_field, "translation.en") && !strcmp(c.target_field, "translation.ro") &&
              !strcmp(c.data_name, "seq2seq_text"), "run_translation's languages: %s %s %s", err, c.source_field,
          c.data_name);
    ut_config_free(&c);
    /* run_classification's metric_name and the arguments that change nothing here */
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"m\", \"metric_name\": \"f1\", \"shuffle_seed\": 7, "
                        "\"remove_columns\": \"id,date\", \"train_split_name\": \"train\", \"remove_splits\": null}\n") == 0 &&
              !strcmp(c.metrics, "f1"), "metric_name f1: %s %s", err, c.metrics);
    ut_config_free(&c);
    static const char *const scripts_refused[][2] = {
        {"metric_name: bleu\n", "metric_name: 'bleu': utrain computes accuracy, f1"},
        {"remove_splits: validation\n", "remove_splits: 'validation': utrain reads the files"},
        {"validation_split_name: dev\n", "validation_split_name: 'dev': it names a Hub dataset's split"},
    };
    for (size_t i = 0; i < sizeof scripts_refused / sizeof scripts_refused[0]; i++) {
        ut_config_init(&c);
        CHECK(load_text(&c, scripts_refused[i][0]) != 0 && strstr(err, scripts_refused[i][1]), "case %zu: %s", i, err);
        ut_config_free(&c);
    }
    /* run_classification's do_regression */
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"m\", \"train_file\": \"t.csv\", \"do_regression\": true}\n") == 0 &&
              !strcmp(ut_kv_get(c.model_opts, "problem_type"), "regression") && !c.hf_classify,
          "do_regression true: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"m\", \"train_file\": \"t.csv\", \"do_regression\": false}\n") == 0 &&
              !ut_kv_get(c.model_opts, "problem_type") && c.hf_classify, "do_regression false: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"m\", \"do_regression\": null}\n") == 0 && !c.hf_classify &&
              !ut_kv_get(c.model_opts, "problem_type"), "do_regression null: %s", err);
    ut_config_free(&c);
    /* each kind of text file's keys are refused for the other data */
    static const char *const other[][2] = {
        {"data: {name: tsv_text, train_path: t.tsv, source_field: doc}\n", "data.source_field: read by data.name "
                                                                          "seq2seq_text only (data.name is tsv_text)"},
        {"data: {name: tsv_text, train_path: t.tsv, lowercase: true}\n", "data.lowercase: read by data.name "
                                                                        "seq2seq_text only"},
        {"data: {name: seq2seq_text, train_path: t.tsv, label_column: y}\n", "data.label_column: read by data.name "
                                                                            "tsv_text and tagged_text only (data.name "
                                                                            "is seq2seq_text)"},
        {"data: {name: tsv_text, train_path: t.tsv, label_all_tokens: true}\n", "data.label_all_tokens: read by "
                                                                                "data.name tagged_text only"},
        {"data: {name: tagged_text, train_path: t.jsonl, source_field: doc}\n", "data.source_field: read by data.name "
                                                                                "seq2seq_text only (data.name is "
                                                                                "tagged_text)"},
        {"data: {name: tokens, train_path: t.bin, text_column_delimiter: x}\n", "data.text_column_delimiter: read by "
                                                                               "data.name tsv_text only"},
        {"data: {name: tsv_text, train_path: t.tsv, text_pair_column: b}\n", "data.text_pair_column: a pair's second "
                                                                            "text; name its first with data.text_column"},
    };
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        ut_config_init(&c);
        CHECK(load_text(&c, other[i][0]) == 0 && ut_config_validate(&c, err, sizeof err) != 0 &&
                  strstr(err, other[i][1]), "case %zu: %s", i, err);
        ut_config_free(&c);
    }
    /* run_ner's arguments: tagged text, the tags' key by task_name, per-type scores refused */
    static const struct { const char *text, *label; bool tagged; } ner[] = {
        {"{\"model_name_or_path\": \"m\", \"train_file\": \"t.json\", \"task_name\": \"ner\"}\n", "", true},
        {"{\"model_name_or_path\": \"m\", \"train_file\": \"t.json\", \"task_name\": \"pos\"}\n", "pos_tags", true},
        {"{\"model_name_or_path\": \"m\", \"train_file\": \"t.json\", \"label_column_name\": \"t\", \"task_name\": "
         "\"chunk\"}\n", "t", true},
        {"{\"model_name_or_path\": \"m\", \"train_file\": \"t.json\", \"text_column_name\": \"w\"}\n", "", true},
        {"{\"model_name_or_path\": \"m\", \"train_file\": \"t.json\", \"label_all_tokens\": true}\n", "", true},
        {"{\"model_name_or_path\": \"m\", \"train_file\": \"t.json\", \"return_entity_level_metrics\": false}\n", "",
         true},
        {"{\"model_name_or_path\": \"m\", \"train_file\": \"t.json\", \"label_column_name\": \"y\"}\n", "y", false},
    };
    for (size_t i = 0; i < sizeof ner / sizeof ner[0]; i++) {
        ut_config_init(&c);
        CHECK(load_text(&c, ner[i].text) == 0 && !strcmp(c.data_name, ner[i].tagged ? "tagged_text" : "tsv_text") &&
                  !strcmp(c.label_column, ner[i].label), "run_ner case %zu: %s %s %s", i, c.data_name, c.label_column,
              err);
        ut_config_free(&c);
    }
    /* run_mlm's arguments: texts to mask, the masking share, a dev set carved by validation_split_percentage
     * unless a validation_file is given (run_mlm ignores it then) */
    static const struct { const char *text; double p, frac; bool by_line; } mlm[] = {
        {"{\"model_name_or_path\": \"m\", \"train_file\": \"t.txt\", \"mlm_probability\": 0.2}\n", 0.2, 0, false},
        {"{\"model_name_or_path\": \"m\", \"train_file\": \"t.txt\", \"line_by_line\": true}\n", 0.15, 0, true},
        {"{\"model_name_or_path\": \"m\", \"train_file\": \"t.txt\", \"validation_split_percentage\": 5}\n", 0.15,
         0.05, false},
        {"{\"model_name_or_path\": \"m\", \"train_file\": \"t.txt\", \"validation_file\": \"d.txt\",\n"
         " \"validation_split_percentage\": 5, \"line_by_line\": false}\n", 0.15, 0, false},
    };
    for (size_t i = 0; i < sizeof mlm / sizeof mlm[0]; i++) {
        ut_config_init(&c);
        CHECK(load_text(&c, mlm[i].text) == 0 && !strcmp(c.data_name, "mlm_text") &&
                  fabs(c.mlm_probability - mlm[i].p) < 1e-12 && fabs(c.dev_fraction - mlm[i].frac) < 1e-12 &&
                  c.line_by_line == mlm[i].by_line,
              "run_mlm case %zu: %s %g %g %s", i, c.data_name, c.mlm_probability, c.dev_fraction, err);
        ut_config_free(&c);
    }
    /* run_clm's: block_size (or keep_linebreaks) makes texts to continue, validation_split_percentage with it */
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"m\", \"train_file\": \"t.txt\", \"block_size\": 128,\n"
                        " \"validation_split_percentage\": 5, \"keep_linebreaks\": false}\n") == 0 &&
              !strcmp(c.data_name, "clm_text") && c.seq_len == 128 && !c.keep_linebreaks &&
              fabs(c.dev_fraction - 0.05) < 1e-12, "run_clm: %s %lld %d %g %s", c.data_name, (long long)c.seq_len,
          c.keep_linebreaks, c.dev_fraction, err);
    ut_config_free(&c);
    /* the scripts' model from scratch: model_type and config_overrides (GPT-2's names as its model keys) */
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_type\": \"gpt2\", \"config_overrides\": \"n_embd=32,n_positions=64,resid_pdrop=0.2,"
                        "embd_pdrop=0.2\", \"train_file\": \"t.txt\", \"block_size\": 32}\n") == 0 &&
              !strcmp(c.model_name, "gpt2") && !strcmp(ut_kv_get(c.model_opts, "n_embd"), "32") &&
              !strcmp(ut_kv_get(c.model_opts, "block_size"), "64") && !strcmp(ut_kv_get(c.model_opts, "dropout"), "0.2"),
          "model_type, config_overrides: %s %s", c.model_name, err);
    ut_config_free(&c);
    static const char *const scratch_bad[][2] = {
        {"{\"model_type\": \"llama\"}\n", "model_type: 'llama' is not one of utrain's models (bert, roberta, gpt2, "
                                           "bart, t5)"},
        {"{\"model_name_or_path\": \"m\", \"config_overrides\": \"n_embd=8\"}\n", "config_overrides: it changes a "
                                                                                "model trained from scratch"},
        {"{\"model_type\": \"gpt2\", \"config_overrides\": \"n_embd\"}\n", "config_overrides: 'n_embd' is not "
                                                                         "key=value"},
        {"{\"config_overrides\": \"n_embd=8\", \"model_name_or_path\": \"m\"}\n", "config_overrides: it changes a "
                                                                                "model trained from scratch"},
        {"{\"model_type\": \"gpt2\", \"config_overrides\": \"resid_pdrop=0.1,attn_pdrop=0.2\"}\n",
         "config_overrides: attn_pdrop=0.2, but another of resid_pdrop, embd_pdrop and attn_pdrop is 0.1"},
    };
    for (size_t i = 0; i < sizeof scratch_bad / sizeof scratch_bad[0]; i++) {
        ut_config_init(&c);
        /* refused as the file loads, or (config_overrides beside model_name_or_path) when it is validated */
        CHECK((load_text(&c, scratch_bad[i][0]) != 0 || ut_config_validate(&c, err, sizeof err) != 0) &&
                  strstr(err, scratch_bad[i][1]), "scratch case %zu: %s", i, err);
        ut_config_free(&c);
    }
    /* an overlong config_overrides is refused, not cut */
    char longer[1300];
    int at = snprintf(longer, sizeof longer, "{\"model_type\": \"gpt2\", \"config_overrides\": \"n_embd=8");
    while (at < 1200) at += snprintf(longer + at, sizeof longer - (size_t)at, ",n_layer=2");
    snprintf(longer + at, sizeof longer - (size_t)at, "\"}\n");
    ut_config_init(&c);
    CHECK(load_text(&c, longer) != 0 && strstr(err, "config_overrides: longer than 1023 bytes"), "%s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "data: {name: tsv_text, train_path: t.tsv, keep_linebreaks: false}\n") == 0 &&
              ut_config_validate(&c, err, sizeof err) != 0 &&
              strstr(err, "data.keep_linebreaks: read by data.name clm_text only"), "%s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"m\", \"validation_split_percentage\": 120}\n") != 0 &&
              strstr(err, "validation_split_percentage: '120' is not a percentage in [0, 100)"), "%s", err);
    ut_config_free(&c);
    static const char *const mlm_bad[][2] = {
        {"data: {name: mlm_text, train_path: t.txt, mlm_probability: 1}\n", "data.mlm_probability"},
        {"data: {name: tsv_text, train_path: t.tsv, line_by_line: true}\n", "data.line_by_line: read by data.name "
                                                                           "mlm_text only (data.name is tsv_text)"},
        {"data: {name: tsv_text, train_path: t.tsv, mlm_probability: 0.3}\n", "data.mlm_probability: read by "
                                                                              "data.name mlm_text only"},
        {"model: {name: gpt2}\ndata: {name: mlm_text, train_path: t.txt}\n", "data.name mlm_text: masked language "
                                                                             "modeling trains bert and roberta"},
        {"model: {name: bert, task: token_classification}\ndata: {name: mlm_text, train_path: t.txt}\n",
         "model.task: token_classification, but data.name mlm_text trains a masked language model"},
        {"model: {name: bert, task: masked_lm}\ndata: {name: tsv_text, train_path: t.tsv}\n", "model.task: masked_lm "
                                                                                             "predicts the masked "
                                                                                             "tokens of texts"},
    };
    for (size_t i = 0; i < sizeof mlm_bad / sizeof mlm_bad[0]; i++) {
        ut_config_init(&c);
        int rc = load_text(&c, mlm_bad[i][0]);
        CHECK((rc != 0 || ut_config_validate(&c, err, sizeof err) != 0) && strstr(err, mlm_bad[i][1]),
              "mlm case %zu: %s", i, err);
        ut_config_free(&c);
    }
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"m\", \"return_entity_level_metrics\": true}\n") == 0 &&
              c.entity_metrics, "return_entity_level_metrics: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"model_name_or_path\": \"m\", \"task_name\": \"mrpc\"}\n") != 0 &&
              strstr(err, "task_name") && strstr(err, "Hugging Face Hub"), "%s", err);
    ut_config_free(&c);
    /* data.name given: kept */
    ut_config_init(&c);
    CHECK(load_text(&c, "data: {name: tokens}\ntrain_file: x.bin\nmodel_name_or_path: gpt2\n") == 0 &&
              !strcmp(c.data_name, "tokens"), "data.name kept: %s %s", err, c.data_name);
    ut_config_free(&c);
    static const char *const refused[][2] = {
        {"task_name: mrpc\n", "task_name: 'mrpc': it loads a GLUE task from the Hugging Face Hub, and utrain reads local files"},
        {"dataset_name: imdb\n", "dataset_name: 'imdb': it loads a dataset from the Hugging Face Hub"},
        {"use_fast_tokenizer: false\n", "use_fast_tokenizer"},
        {"trust_remote_code: true\n", "trust_remote_code"},
        {"model_revision: v2\n", "model_revision"},
        {"val_max_target_length: 60\n", "val_max_target_length: '60': utrain cuts every split's targets to "
                                          "max_target_length"},
        {"ignore_pad_token_for_loss: false\n", "utrain never counts the padding in the loss"},
        {"lang: en_XX\n", "mBART"},
        {"forced_bos_token: ro_RO\n", "mBART"},
        {"resize_position_embeddings: true\n", "keep max_source_length within them"},
        {"source_lang: en.x\n", "source_lang: 'en.x' is not a language code"},
        {"config_name: models/other\n", "config_name"},
        {"max_train_samples: -1\n", "max_train_samples: must be >= 0"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        ut_config_init(&c);
        CHECK(load_text(&c, refused[i][0]) != 0 && strstr(err, refused[i][1]), "case %zu: %s", i, err);
        ut_config_free(&c);
    }
}

static void test_hf_fraction_intervals(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"output_dir\": \"out\", \"logging_steps\": 0.1, \"eval_strategy\": \"steps\",\n"
                        " \"save_steps\": 0.25, \"num_train_epochs\": 2}\n") == 0 &&
              ut_config_validate(&c, err, sizeof err) == 0, "%s", err);
    CHECK(c.log_steps_fraction == 0.1 && c.eval_steps_fraction == 0.1 && c.save_steps_fraction == 0.25 &&
              !strcmp(c.eval_strategy, "steps") && !strcmp(c.save_strategy, "steps"),
          "fractions: log %g eval %g save %g, %s %s", c.log_steps_fraction, c.eval_steps_fraction,
          c.save_steps_fraction, c.eval_strategy, c.save_strategy);
    CHECK(strstr(hf_took(&c), "eval_steps = logging_steps (0.1)"), "%s", hf_took(&c));
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"output_dir\": \"out\", \"logging_steps\": 0.1, \"eval_strategy\": \"steps\",\n"
                        " \"eval_steps\": 0.5}\n") == 0 && c.eval_steps_fraction == 0.5 && c.eval_interval == 0,
          "eval_steps given: %s %g", err, c.eval_steps_fraction);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"output_dir\": \"out\", \"eval_strategy\": \"steps\", \"eval_steps\": 40}\n") == 0 &&
              c.eval_steps_fraction == 0 && c.eval_interval == 40, "a count stays a count: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(ut_config_set(&c, "train.eval_steps_fraction=1", err, sizeof err) == -1 &&
              strstr(err, "train.eval_steps_fraction"), "a fraction of 1: %s", err);
    ut_config_free(&c);
    check_invalid((const char *[]){"train.save_steps_fraction=0.5", "train.save_steps_ratio=2", NULL},
                  "train.save_steps_ratio and train.save_steps_fraction both set (times per epoch, a fraction of the "
                  "run's steps): keep one");
    check_invalid((const char *[]){"train.log_steps_fraction=0.5", "train.log_steps_ratio=2", NULL},
                  "train.log_steps_ratio and train.log_steps_fraction both set (times per epoch, a fraction of the "
                  "run's steps): keep one");
    ut_config_init(&c);
    CHECK(ut_config_set(&c, "train.eval_steps_fraction=0.2", err, sizeof err) == 0 && !strcmp(c.eval_strategy, "steps"),
          "a fraction makes the strategy steps: %s", c.eval_strategy);
    ut_config_free(&c);
}

static void test_hf_training_arguments(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"output_dir\": \"out\", \"per_device_train_batch_size\": 16, \"num_train_epochs\": 2,\n"
                        " \"evaluation_strategy\": \"epoch\", \"load_best_model_at_end\": true,\n"
                        " \"metric_for_best_model\": \"eval_f1\", \"report_to\": [\"tensorboard\"],\n"
                        " \"gradient_checkpointing\": true, \"optim\": \"adamw_torch_fused\", \"tf32\": true,\n"
                        " \"remove_unused_columns\": false, \"ddp_find_unused_parameters\": false,\n"
                        " \"dataloader_drop_last\": true, \"dataloader_num_workers\": 0, \"disable_tqdm\": true,\n"
                        " \"logging_strategy\": \"epoch\", \"resume_from_checkpoint\": true, \"use_cpu\": false,\n"
                        " \"save_safetensors\": true, \"full_determinism\": false, \"torch_compile\": false,\n"
                        " \"label_smoothing_factor\": 0.1, \"run_name\": null, \"push_to_hub\": false,\n"
                        " \"do_train\": true, \"do_eval\": true, \"do_predict\": true, \"data_seed\": 3,\n"
                        " \"ddp_timeout\": 1800, \"eval_on_start\": true, \"bf16_full_eval\": true,\n"
                        " \"half_precision_backend\": \"auto\", \"eval_accumulation_steps\": 4,\n"
                        " \"dataloader_pin_memory\": true, \"fp16_full_eval\": false,\n"
                        " \"neftune_noise_alpha\": 5, \"include_num_input_tokens_seen\": true}\n") == 0,
          "%s", err);
    CHECK(c.batch_size == 16 && c.epochs == 2 && !strcmp(c.eval_strategy, "epoch"), "plain aliases");
    CHECK(!strcmp(c.best_metric, "dev/f1") && c.greater_is_better && !c.greater_is_better_set,
          "metric_for_best_model: %s, greater %d", c.best_metric, c.greater_is_better);
    CHECK(c.checkpoint_activations && c.tf32 && c.drop_last && !strcmp(c.optim_name, "adamw"), "flags");
    CHECK(!strcmp(c.progress, "lines") && c.log_steps_ratio == 1 && c.continue_training, "logging and resume");
    CHECK(!strcmp(c.device, "cpu"), "use_cpu: false leaves the device key's default");
    CHECK(c.label_smoothing == 0.1, "label_smoothing_factor: %g", c.label_smoothing);
    CHECK(!strcmp(c.mode, "train") && c.test_at_end, "do_train, do_predict: %s %d", c.mode, c.test_at_end);
    CHECK(c.eval_on_start && !strcmp(c.eval_precision, "bf16"), "eval_on_start %d, bf16_full_eval: %s",
          c.eval_on_start, c.eval_precision);
    CHECK(c.data_seed == 3 && c.timeout_s == 1800, "data_seed %lld, ddp_timeout %g", (long long)c.data_seed,
          c.timeout_s);
    CHECK(c.neftune_alpha == 5 && !strcmp(c.count_input_tokens, "all"),
          "neftune_noise_alpha %g, include_num_input_tokens_seen true: %s", c.neftune_alpha, c.count_input_tokens);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"include_num_input_tokens_seen\": \"non_padding\"}\n") == 0 &&
              !strcmp(c.count_input_tokens, "non_padding"),
          "include_num_input_tokens_seen non_padding: %s (%s)", c.count_input_tokens, err);
    ut_config_free(&c);
    /* values that set something else */
    ut_config_init(&c);
    CHECK(load_text(&c, "metric_for_best_model: loss\nlogging_strategy: \"no\"\nuse_cpu: true\n"
                        "resume_from_checkpoint: false\noptim: adamw_hf\ndo_train: false\ndo_predict: false\n") == 0,
          "%s", err);
    CHECK(!strcmp(c.mode, "test") && !c.test_at_end, "do_train: false tests: %s", c.mode);
    CHECK(!strcmp(c.best_metric, "dev/loss") && !c.greater_is_better && c.log_interval == 0 &&
              !c.continue_training && !strcmp(c.optim_name, "adamw"), "loss, no logging");
    ut_config_free(&c);
    /* transformers' schedule names */
    const struct { const char *name, *schedule; double min_lr; } sch[] = {
        {"constant_with_warmup", "constant", 0}, {"cosine_with_restarts", "cosine_restarts", 0},
        {"cosine_with_min_lr", "cosine", 0},      {"polynomial", "polynomial", 1e-7},
        {"inverse_sqrt", "inverse_sqrt", 0},      {"warmup_stable_decay", "wsd", 0}};
    for (size_t i = 0; i < sizeof sch / sizeof sch[0]; i++) {
        char text[128];
        snprintf(text, sizeof text, "lr_scheduler_type: %s\n", sch[i].name);
        ut_config_init(&c);
        CHECK(load_text(&c, text) == 0 && !strcmp(c.schedule, sch[i].schedule) && c.min_lr == sch[i].min_lr,
              "%s: %s %g (%s)", sch[i].name, c.schedule, c.min_lr, err);
        ut_config_free(&c);
    }
    ut_config_init(&c);
    CHECK(load_text(&c, "optim: {min_lr: 1.0e-5}\nlr_scheduler_type: polynomial\n") == 0 && c.min_lr == 1e-5,
          "polynomial keeps a given min_lr: %g", c.min_lr);
    ut_config_free(&c);
    /* optim: adafactor (or transformers 4's adafactor: true) in a TrainingArguments file: the
     * Trainer's Adafactor, without the parameter scale; utrain's own key keeps transformers' default */
    static const char *const af_files[] = {"per_device_train_batch_size: 4\noptim: adafactor\n",
                                           "{\"adafactor\": true, \"num_train_epochs\": 1}\n",
                                           "optim: {name: adafactor}\n"};
    for (int i = 0; i < 3; i++) {
        ut_config_init(&c);
        CHECK(load_text(&c, af_files[i]) == 0 && !strcmp(c.optim_name, "adafactor") &&
                  c.adafactor_scale_parameter == (i == 2) && (i == 2 || strstr(hf_took(&c), "scale_parameter False")),
              "%s: %s %s scale %d (%s)", af_files[i], err, c.optim_name, c.adafactor_scale_parameter, hf_took(&c));
        ut_config_free(&c);
    }
    /* optim_args as transformers reads them for optim: sgd, whatever the order, over weight_decay */
    static const char *const sgd_files[] = {
        "per_device_train_batch_size: 4\noptim: sgd\noptim_args: momentum=0.9, nesterov=True,weight_decay=0.05\n"
        "weight_decay: 0.2\n",
        "{\"optim_args\": \"momentum=0.9,nesterov=yes,weight_decay=0.05\", \"weight_decay\": 0.2, \"optim\": \"sgd\"}\n"};
    for (int i = 0; i < 2; i++) {
        ut_config_init(&c);
        CHECK(load_text(&c, sgd_files[i]) == 0 && !strcmp(c.optim_name, "sgd") && c.momentum == 0.9 && c.nesterov &&
                  c.weight_decay == 0.05 && ut_config_validate(&c, err, sizeof err) == 0,
              "optim_args %d: %s: %s momentum %g nesterov %d wd %g", i, err, c.optim_name, c.momentum, c.nesterov,
              c.weight_decay);
        ut_config_free(&c);
    }
    check_load_error("optim: sgd\noptim_args: momentum=0.9,betas=0.8\n",
                     "2: optim_args: 'betas' is not an argument transformers reads for optim sgd (momentum, dampening, "
                     "weight_decay, nesterov)");
    check_load_error("optim: sgd\noptim_args: momentum\n",
                     "2: optim_args: 'momentum' is not key=value (write optim_args: \"momentum=0.9,nesterov=True\")");
    ut_config_init(&c);
    CHECK(load_text(&c, "optim: adamw_torch\noptim_args: momentum=0.9\n") == 0 &&
              ut_config_validate(&c, err, sizeof err) == -1 &&
              strstr(err, "optim_args: 'momentum=0.9': transformers reads them for optim: sgd"),
          "optim_args with AdamW: %s", err);
    ut_config_free(&c);
    /* bitsandbytes' 32-bit Lion, paged or not, is utrain's lion; the betas are adam_beta1/2 */
    for (int paged = 0; paged < 2; paged++) {
        ut_config_init(&c);
        CHECK(load_text(&c, paged ? "optim: paged_lion_32bit\nadam_beta2: 0.99\n" : "optim: lion_32bit\n") == 0 &&
                  !strcmp(c.optim_name, "lion") && c.beta2 == (paged ? 0.99 : 0.999),
              "optim: %slion_32bit: %s %s beta2 %g", paged ? "paged_" : "", err, c.optim_name, c.beta2);
        ut_config_free(&c);
    }
    /* lr_scheduler_kwargs: each argument is an optim key, in either order
     * with lr_scheduler_type; {} is nothing */
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"lr_scheduler_kwargs\": {\"lr_end\": 0, \"power\": 2.5},\n"
                        " \"lr_scheduler_type\": \"polynomial\"}\n") == 0 &&
              !strcmp(c.schedule, "polynomial") && c.min_lr == 0 && c.power == 2.5,
          "polynomial kwargs: %s %g %g (%s)", c.schedule, c.min_lr, c.power, err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "lr_scheduler_type: warmup_stable_decay\nlr_scheduler_kwargs:\n  num_decay_steps: 30\n"
                        "  decay_type: 1-sqrt\n  min_lr_ratio: 0.1\n  warmup_type: linear\n") == 0 &&
              c.decay_steps == 30 && !strcmp(c.decay_type, "1-sqrt") && c.min_lr_ratio == 0.1,
          "wsd kwargs (%s)", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "lr_scheduler_type: cosine_with_min_lr\nlr_scheduler_kwargs: {min_lr_rate: 0.05}\n") ==
                  0 && c.min_lr_ratio == 0.05 && !strcmp(c.schedule, "cosine"), "min_lr_rate (%s)", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "lr_scheduler_type: cosine_with_restarts\nlr_scheduler_kwargs: {num_cycles: 4}\n"
                        "max_steps: 100\n") == 0 && c.num_cycles == 4, "num_cycles (%s)", err);
    CHECK(ut_config_validate(&c, err, sizeof err) == 0, "restarts with cycles: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "{\"lr_scheduler_kwargs\": {}, \"lr_scheduler_type\": \"inverse_sqrt\"}\n") == 0 &&
              !strcmp(c.schedule, "inverse_sqrt"), "empty kwargs (%s)", err);
    ut_config_free(&c);
    /* reduce_lr_on_plateau: torch's ReduceLROnPlateau with torch's mode min
     * unless its kwargs say; no warmup, as transformers' has none */
    ut_config_init(&c);
    CHECK(load_text(&c, "lr_scheduler_type: reduce_lr_on_plateau\neval_strategy: epoch\nwarmup_ratio: 0.1\n"
                        "metric_for_best_model: accuracy\n") == 0 &&
              !strcmp(c.schedule, "plateau") && !strcmp(c.plateau_mode, "min") && c.warmup_ratio == 0 &&
              !strcmp(c.best_metric, "dev/accuracy") && ut_config_validate(&c, err, sizeof err) == 0,
          "reduce_lr_on_plateau: %s mode %s warmup %g (%s)", c.schedule, c.plateau_mode, c.warmup_ratio, err);
    char took[1024];
    ut_config_defaults_text(&c, UT_CFG_DEFAULTS_HF, took, sizeof took);
    CHECK(strstr(took, "lr_scheduler_type reduce_lr_on_plateau without warmup"), "defaults named: %s", took);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "lr_scheduler_kwargs: {mode: max, factor: 0.5, patience: 3, threshold: 0.01, "
                        "threshold_mode: abs, cooldown: 2, min_lr: 1.0e-6, eps: 0}\n"
                        "lr_scheduler_type: reduce_lr_on_plateau\neval_strategy: steps\neval_steps: 10\n") == 0 &&
              !strcmp(c.plateau_mode, "max") && c.plateau_factor == 0.5 && c.plateau_patience == 3 &&
              c.plateau_threshold == 0.01 && !strcmp(c.plateau_threshold_mode, "abs") && c.plateau_cooldown == 2 &&
              c.min_lr == 1e-6 && c.plateau_eps == 0 && ut_config_validate(&c, err, sizeof err) == 0,
          "plateau kwargs before the type: mode %s factor %g (%s)", c.plateau_mode, c.plateau_factor, err);
    ut_config_free(&c);
    /* greedy: transformers' GreedyLR with its defaults (mode min, floor 1e-3
     * above the rate 5e-5), no warmup; its kwargs in either order */
    ut_config_init(&c);
    CHECK(load_text(&c, "lr_scheduler_type: greedy\neval_strategy: epoch\nwarmup_steps: 10\n") == 0 &&
              !strcmp(c.schedule, "greedy") && !strcmp(c.greedy_mode, "min") && c.min_lr == 1e-3 && c.lr == 5e-5 &&
              c.warmup_steps == 0 && c.greedy_factor == 0.95 && !strcmp(c.greedy_threshold_mode, "abs") &&
              ut_config_validate(&c, err, sizeof err) == 0,
          "greedy: %s mode %s min_lr %g warmup %lld (%s)", c.schedule, c.greedy_mode, c.min_lr,
          (long long)c.warmup_steps, err);
    ut_config_defaults_text(&c, UT_CFG_DEFAULTS_HF, took, sizeof took);
    CHECK(strstr(took, "lr_scheduler_type greedy without warmup"), "defaults named: %s", took);
    ut_config_free(&c);
    const char *const greedy_kwargs = "lr_scheduler_kwargs: {mode: max, factor: 0.1, patience: 3, threshold: 0.01, "
                                      "threshold_mode: rel, cooldown: 2, min_lr: 0, eps: 0, warmup: 1, max_lr: 0.5, "
                                      "smooth: true, window_size: 7, reset_start: 9, verbose: true}\n";
    for (int before = 0; before < 2; before++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s%seval_strategy: steps\neval_steps: 10\n", before ? greedy_kwargs : "",
                 "lr_scheduler_type: greedy\n", before ? "" : greedy_kwargs);
        ut_config_init(&c);
        CHECK(load_text(&c, text) == 0 && !strcmp(c.greedy_mode, "max") && c.greedy_factor == 0.1 &&
                  c.greedy_patience == 3 && c.greedy_threshold == 0.01 && !strcmp(c.greedy_threshold_mode, "rel") &&
                  c.greedy_cooldown == 2 && c.min_lr == 0 && c.greedy_eps == 0 && c.greedy_warmup == 1 &&
                  c.greedy_max_lr == 0.5 && c.greedy_smooth && c.greedy_window_size == 7 &&
                  c.greedy_reset_start == 9 && c.plateau_factor == 0.1 && !strcmp(c.plateau_mode, "auto") &&
                  c.plateau_patience == 10 && ut_config_validate(&c, err, sizeof err) == 0,
              "greedy kwargs %s the type: mode %s factor %g patience %lld min_lr %g plateau_factor %g (%s)",
              before ? "before" : "after", c.greedy_mode, c.greedy_factor, (long long)c.greedy_patience, c.min_lr,
              c.plateau_factor, err);
        ut_config_free(&c);
    }
    /* auto_find_batch_size: the launcher halves the batch after an out of memory */
    ut_config_init(&c);
    CHECK(load_text(&c, "auto_find_batch_size: true\nper_device_train_batch_size: 64\n") == 0 &&
              c.auto_find_batch_size && c.batch_size == 64,
          "auto_find_batch_size (%s)", err);
    ut_config_free(&c);
    check_invalid((const char *[]){"train.auto_find_batch_size=true", "dist.nodes=2", NULL},
                  "train.auto_find_batch_size: each node's utrain would start its own ranks again alone; with "
                  "dist.nodes 2 set train.batch_size (`utrain plan CONFIG --world-size N` gives the memory a rank "
                  "needs)");
    /* what utrain cannot do is refused, saying what to write */
    const struct { const char *text, *msg; } bad[] = {
        {"report_to: [tensorboard, wandb]\n", "report_to: 'wandb': utrain reports to TensorBoard"},
        {"overwrite_output_dir: true\n", "overwrite_output_dir: utrain never overwrites"},
        {"resume_from_checkpoint: out/checkpoint-500\n", "write load_dir: out/checkpoint-500"},
        {"logging_strategy: sometimes\n", "logging_strategy: 'sometimes' is not one of steps, epoch, no"},
        {"run_name: first\n", "write experiment_name: first"},
        {"dataloader_num_workers: -1\n", "dataloader_num_workers: expected a number of workers >= 0, got '-1'"},
        {"torch_compile: true\n", "torch_compile: utrain has no graph compiler"},
        {"push_to_hub: true\n", "push_to_hub: utrain does not reach the network"},
        {"save_safetensors: false\n", "save_safetensors: utrain's checkpoints are safetensors files"},
        {"full_determinism: maybe\n", "full_determinism: expected true or false, got 'maybe'"},
        {"optim: adamw_8bit\n", "optim: 'adamw_8bit' is not one of adamw, sgd, lion"},
        {"optim: paged_lion_8bit\n", "optim: 'paged_lion_8bit': utrain keeps Lion's state in 32 bits; write optim: "
                                     "lion_32bit (or optim.name: lion)"},
        {"half_precision_backend: apex\n", "utrain's mixed precision is its own autocast"},
        {"eval_accumulation_steps: 0\n", "eval_accumulation_steps: expected a number of steps >= 1, got '0'"},
        {"dataloader_pin_memory: false\n", "keeps its batches in page-locked memory on a GPU"},
        {"lr_scheduler_kwargs: {factor: 1.5}\n", "lr_scheduler_kwargs.factor (optim.plateau_factor): "},
        {"lr_scheduler_kwargs: {min_lr: -1}\n", "lr_scheduler_kwargs.min_lr (optim.min_lr): "},
        {"lr_scheduler_kwargs: {eta_min: 0.1}\n", "lr_scheduler_kwargs.eta_min: not an argument of utrain's"},
        {"lr_scheduler_kwargs: {verbose: loud}\n", "lr_scheduler_kwargs.verbose: expected true or false, got 'loud'"},
        {"lr_scheduler_kwargs: {min_lr: [0.1, 0.2]}\n",
         "lr_scheduler_kwargs.min_lr: '0.1,0.2' is a value per parameter group; utrain's optimizer has one group"},
        {"lr_scheduler_kwargs: {warmup_type: cosine}\n", "utrain's warmup is linear"},
        {"lr_scheduler_kwargs: {num_stable_steps: 5}\n", "wsd's stable phase is the steps between"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ut_config_init(&c);
        CHECK(load_text(&c, bad[i].text) == -1 && strstr(err, bad[i].msg), "%s: got '%s'", bad[i].text, err);
        ut_config_free(&c);
    }
    /* each schedule's own keys are refused with another schedule */
    check_invalid((const char *[]){"optim.num_cycles=2", "optim.schedule=linear", "train.max_steps=10", NULL},
                  "optim.num_cycles: only the cosine schedules have cycles (optim.schedule is linear); write "
                  "optim.schedule: cosine or cosine_restarts, or remove the key");
    check_invalid((const char *[]){"optim.power=2", "optim.schedule=cosine", "train.max_steps=10", NULL},
                  "optim.power: only optim.schedule: polynomial has a power (it is cosine); remove the key");
    check_invalid((const char *[]){"optim.timescale=9", NULL},
                  "optim.timescale: only optim.schedule: inverse_sqrt has a timescale (it is constant); remove the "
                  "key");
    check_invalid((const char *[]){"optim.plateau_patience=3", NULL},
                  "optim.plateau_patience: belongs to optim.schedule: plateau (it is constant); remove the key");
    check_invalid((const char *[]){"optim.greedy_max_lr=3", "optim.schedule=plateau", "train.eval_strategy=epoch",
                                   NULL},
                  "optim.greedy_max_lr: belongs to optim.schedule: greedy (it is plateau); remove the key");
    check_invalid((const char *[]){"optim.plateau_factor=0.5", "optim.schedule=greedy", "train.eval_strategy=epoch",
                                   NULL},
                  "optim.plateau_factor: belongs to optim.schedule: plateau (it is greedy): greedy's are the "
                  "optim.greedy_* keys; remove the key");
    check_invalid((const char *[]){"optim.schedule=greedy", "train.eval_strategy=epoch",
                                   "optim.greedy_window_size=5", NULL},
                  "optim.greedy_window_size: averages the metrics only with optim.greedy_smooth: true; set that or "
                  "remove the key");
    check_invalid((const char *[]){"optim.schedule=greedy", "train.eval_strategy=no", NULL},
                  "optim.schedule: greedy lowers and raises the rate as the evaluations go, and train.eval_strategy "
                  "is no: set it to steps or epoch (with dev data)");
    check_invalid((const char *[]){"optim.schedule=greedy", "train.eval_strategy=epoch", "optim.warmup_ratio=0.1",
                                   NULL},
                  "optim.schedule: greedy (transformers' GreedyLR) has no warmup: its rate starts at optim.lr; "
                  "remove optim.warmup_ratio");
    check_invalid((const char *[]){"optim.schedule=plateau", "train.eval_strategy=epoch",
                                   "optim.warmup_from_zero=true", NULL},
                  "optim.warmup_from_zero: optim.schedule plateau has no warmup; remove the key");
    check_invalid((const char *[]){"optim.schedule=plateau", "train.eval_strategy=no", NULL},
                  "optim.schedule: plateau lowers the rate when the evaluations stop improving, and "
                  "train.eval_strategy is no: set it to steps or epoch (with dev data)");
    check_invalid((const char *[]){"optim.schedule=plateau", "train.eval_strategy=epoch", "optim.warmup_steps=5",
                                   NULL},
                  "optim.schedule: plateau (torch's ReduceLROnPlateau) has no warmup: its rate starts at optim.lr; "
                  "remove optim.warmup_steps");
    check_invalid((const char *[]){"optim.schedule=plateau", "train.eval_strategy=epoch",
                                   "train.best_metric=train/loss", NULL},
                  "optim.schedule: plateau follows train.best_metric, which must be an evaluation's metric "
                  "(dev/loss, dev/accuracy, ...), not train/loss");
    check_invalid((const char *[]){"optim.decay_type=linear", NULL},
                  "optim.decay_type: belongs to optim.schedule: wsd or annealing (it is constant); remove the key");
    check_invalid((const char *[]){"optim.schedule=wsd", "train.max_steps=10", NULL},
                  "optim.decay_steps: optim.schedule: wsd needs the number of steps its decay takes (>= 1)");
    check_invalid((const char *[]){"optim.schedule=wsd", "train.max_steps=10", "optim.decay_steps=8",
                                   "optim.warmup_steps=3", NULL},
                  "optim.decay_steps: 8 with 3 warmup steps exceed train.max_steps (10)");
    check_invalid((const char *[]){"optim.min_lr=1e-5", "optim.min_lr_ratio=0.1", NULL},
                  "optim.min_lr_ratio: set it or optim.min_lr (1e-05), not both");
    check_invalid((const char *[]){"label_smoothing=0.1", "dist.tensor_parallel=2", NULL},
                  "train.label_smoothing: 0.1 with dist.tensor_parallel 2: the cross-entropy over a vocabulary split "
                  "between ranks has no label smoothing; set one of them to its default (0, 1)");
    check_invalid((const char *[]){"neftune_noise_alpha=5", "model.name=cnn", NULL},
                  "train.neftune_alpha: 5 puts noise on token embeddings; model cnn has none (gpt2, bert, roberta, "
                  "bart and t5 do): remove the key");
    /* tf32 is a GPU's mode: refused on the CPU (and sim) when the run is checked */
    check_invalid((const char *[]){"tf32=true", NULL},
                  "train.tf32: TF32 is a mode of NVIDIA GPUs' tensor cores (device: cuda); on device cpu the float32 "
                  "products are exact: remove tf32 or write device: cuda");
    check_invalid((const char *[]){"tf32=true", "device=sim", NULL},
                  "train.tf32: TF32 is a mode of NVIDIA GPUs' tensor cores (device: cuda); on device sim the float32 "
                  "products are exact: remove tf32 or write device: cuda");
    check_invalid((const char *[]){"train.wall_clock_breakdown=true", "dist.strategy=dp", NULL},
                  "train.wall_clock_breakdown: dist.strategy dp runs its workers' forwards and backwards in threads at "
                  "once; train.profile_step profiles one step there, or remove the key");
    check_invalid((const char *[]){"train.wall_clock_breakdown=true", "dist.pipeline_parallel=2", NULL},
                  "train.wall_clock_breakdown: pipeline stages run their micro-batches' forwards and backwards "
                  "interleaved, so they have no forward and backward time of their own; train.profile_step profiles "
                  "one step there, or remove the key");
}

/* Other trainers' distributed flags map onto dist.strategy or are refused. */
static void test_seed_dist_flags(void) {
    const struct { const char *set, *strategy; } ok[] = {
        {"is_distributed=true", "ddp"},       {"fairscale_oss=true", "zero1"},
        {"fairscale_sdp=true", "zero2"},      {"fairscale_fsdp=true", "zero3"},
        {"sharded_ddp=zero_dp_3", "zero3"},   {"fsdp=shard_grad_op", "zero2"},
        {"zero_stage=1", "zero1"},            {"is_distributed=false", "zero2"}};
    ut_config c;
    ut_config_init(&c);
    CHECK(ut_config_set(&c, "dist.strategy=zero2", err, sizeof err) == 0, "%s", err);
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        if (i == 7) ut_config_set(&c, "dist.strategy=zero2", err, sizeof err);
        CHECK(ut_config_set(&c, ok[i].set, err, sizeof err) == 0 && !strcmp(c.dist_strategy, ok[i].strategy),
              "%s -> %s (got %s, %s)", ok[i].set, ok[i].strategy, c.dist_strategy, err);
    }
    CHECK(load_text(&c, "fairscale_fsdp: true\n") == 0 && !strcmp(c.dist_strategy, "zero3"), "in YAML: %s", err);
    ut_config_free(&c);
    check_set_error("fsdp=offload", "--set: fsdp: 'offload': utrain has full_shard (dist.strategy: zero3), "
                                    "shard_grad_op (zero2), hybrid_shard and hybrid_shard_zero2 (the same within "
                                    "each node: dist.shard_size: -1) and no_shard (ddp), with auto_wrap; parameter "
                                    "offload is not available (dist.offload_optimizer: cpu offloads the optimizer)");
    check_invalid((const char *[]){"dist.device_comm=direct", NULL},
                  "dist.device_comm: direct runs collectives on a device's memory (device: cuda or sim); on the CPU "
                  "the ranks exchange host memory in place: remove it or write dist.device_comm: auto");
    {
        ut_config c;
        ut_config_init(&c);
        CHECK(ut_config_set(&c, "dist.device_comm=nccl", err, sizeof err) == -1 && strstr(err, "dist.device_comm") &&
                  strstr(err, "direct"),
              "dist.device_comm=nccl: %s", err);
        ut_config_free(&c);
    }
    check_invalid((const char *[]){"dist.comm_hook=bf16", "dist.strategy=zero2", NULL},
                  "dist.comm_hook: bf16 compresses ddp's and zero1's gradient all-reduce, not zero2's; set "
                  "dist.strategy: ddp or zero1, or dist.comm_hook: none");
    check_invalid((const char *[]){"dist.offload_optimizer=cpu", NULL},
                  "dist.offload_optimizer: cpu (ZeRO-Offload) runs with dist.strategy zero1 or zero2, not ddp; set "
                  "dist.strategy: zero2 (one process too) or dist.offload_optimizer: none");
    check_set_error("is_distributed=maybe", "--set: is_distributed: expected true or false, got 'maybe'");
    check_set_error("deepspeed=/nonexistent/ds.json",
                    "--set: deepspeed_config /nonexistent/ds.json: cannot open it");
    check_set_error("local_rank=1", "--set: local_rank: '1': ranks and the world size come from the launcher "
                                    "(mpirun, srun) or --nproc N / dist.nproc_per_node, not from the config; "
                                    "write -1 or remove the key");
}

/* pytorch_universal_trainer's parameters.yml (paths adapted), as shipped in configs/. */
static void test_seed_parameters_file(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(ut_config_load(&c, "configs/seed_parameters.yml", err, sizeof err) == 0, "%s", err);
    CHECK(ut_config_validate(&c, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(c.output_dir, "runs") && !strcmp(c.experiment_name, "seed_sst2"), "model_dir: %s %s",
          c.output_dir, c.experiment_name);
    CHECK(!strcmp(c.data_name, "tsv_text") && !strcmp(c.train_path, "data/sst2_sample/train.tsv") &&
              !strcmp(c.dev_path, "data/sst2_sample/dev.tsv") && !strcmp(c.test_path, "data/sst2_sample/test.tsv"),
          "data_dir: %s %s", c.data_name, c.train_path);
    CHECK(!strcmp(c.dist_strategy, "ddp") && !strcmp(c.dist_wrap, "model") && !c.reshard_after_forward,
          "fairscale flags: %s %s", c.dist_strategy, c.dist_wrap);
    /* a data_dir holding the seed's own files (sentiment-train, -dev, -test) and no train.tsv */
    char dir[] = "/tmp/ut_seed_data_XXXXXX", file[64], text[128];
    if (mkdtemp(dir)) {
        const char *names[3] = {"sentiment-train", "sentiment-dev", "sentiment-test"};
        for (int i = 0; i < 3; i++) {
            snprintf(file, sizeof file, "%s/%s", dir, names[i]);
            FILE *f = fopen(file, "w");
            if (f) fputs("a fine film\t1\n", f), fclose(f);
        }
        snprintf(text, sizeof text, "data-params:\n    data_dir: %s\n", dir);
        snprintf(file, sizeof file, "%s/sentiment-train", dir);
        CHECK(load_text(&c, text) == 0 && !strcmp(c.train_path, file) && strstr(c.test_path, "sentiment-test"),
              "the seed's file names: %s %s", c.train_path, err);
        for (int i = 0; i < 3; i++) {
            snprintf(file, sizeof file, "%s/%s", dir, names[i]);
            unlink(file);
        }
        rmdir(dir);
    }
    CHECK(c.nodes == 1 && c.nproc_per_node == 1 && c.current_node == 0 && c.master_port == 29500 &&
              !strcmp(c.master_addr, "127.0.0.1"), "dist-params");
    CHECK(c.epochs == 3 && c.batch_size == 16 && c.max_len == 32 && c.lr == 5e-3, "transformers-params");
    CHECK(!strcmp(opt(&c, "num_classes"), "2") && !strcmp(c.model_name, "bow"), "num_labels");
    CHECK(!strcmp(c.eval_strategy, "epoch") && !strcmp(c.save_strategy, "steps"), "strategies");
    CHECK(c.log_steps_ratio == 5 && c.save_steps_ratio == 1 && c.warmup_ratio == 0.1,
          "ratios: %g %g %g", c.log_steps_ratio, c.save_steps_ratio, c.warmup_ratio);
    /* the seed's recipe where the file does not say otherwise */
    CHECK(!strcmp(c.schedule, "linear") && c.grad_clip == 1.0 && !strcmp(c.best_metric, "dev/accuracy") &&
              c.greater_is_better && strstr(c.seed_recipe, "linear decay") && strstr(c.seed_recipe, "clipping"),
          "seed recipe: %s %g %s (%s)", c.schedule, c.grad_clip, c.best_metric, c.seed_recipe);
    ut_config_free(&c);
    /* a seed-layout file that names its own schedule and clipping keeps them; the other part applies */
    ut_config_init(&c);
    CHECK(load_text(&c, "transformers-params:\n  max_grad_norm: 0.5\n  optim.schedule: cosine\n") == 0, "%s",
          err);
    CHECK(!strcmp(c.schedule, "cosine") && c.grad_clip == 0.5 && !strcmp(c.best_metric, "dev/accuracy") &&
              !strcmp(c.seed_recipe, "best checkpoint by dev accuracy"),
          "own keys: %s %g %s (%s)", c.schedule, c.grad_clip, c.best_metric, c.seed_recipe);
    ut_config_free(&c);
    /* utrain's own layout keeps utrain's defaults */
    ut_config_init(&c);
    CHECK(load_text(&c, "train:\n  epochs: 2\n") == 0 && !strcmp(c.schedule, "constant") && c.grad_clip == 0 &&
              !c.seed_recipe[0], "plain layout: %s %g (%s)", c.schedule, c.grad_clip, c.seed_recipe);
    ut_config_free(&c);
}

/* The seed's own values of the keys utrain maps or refuses. */
static void test_seed_keys(void) {
    ut_config c;
    ut_config_init(&c);
    const char *text = "transformers-params:\n"
                       "    model_dir: '~/pytorch_universal_trainer/models/bart_base_sst_baseline'\n"
                       "    use_fairscale_model_sharding: True\n"
                       "    use_fairscale_autowrap: True\n"
                       "    use_fairscale_reshard_forward: True\n"
                       "data-params:\n    is_dev_file: False\n"
                       "dist-params:\n    nodes: 2\n    gpus: 8\n    current_node: 1\n"
                       "    master_addr: '10.100.69.32'\n    master_port: '1234'\n";
    CHECK(load_text(&c, text) == 0, "%s", err);
    char home_models[512];
    snprintf(home_models, sizeof home_models, "%s/pytorch_universal_trainer/models",
             getenv("HOME") ? getenv("HOME") : "~");
    CHECK(!strcmp(c.output_dir, home_models) && !strcmp(c.experiment_name, "bart_base_sst_baseline"),
          "model_dir (~/ is $HOME): %s | %s", c.output_dir, c.experiment_name);
    CHECK(!strcmp(c.dist_strategy, "zero3") && !strcmp(c.dist_wrap, "block") && c.reshard_after_forward,
          "fsdp flags: %s %s", c.dist_strategy, c.dist_wrap);
    CHECK(!strcmp(c.eval_strategy, "no"), "is_dev_file: %s", c.eval_strategy);
    CHECK(c.nodes == 2 && c.nproc_per_node == 8 && c.current_node == 1 && c.master_port == 1234 &&
              !strcmp(c.master_addr, "10.100.69.32"), "dist-params");
    CHECK(load_text(&c, "use_fairscale_optimizer_sharding: True\n") == 0 && !strcmp(c.dist_strategy, "zero2"),
          "optimizer sharding: %s", c.dist_strategy);
    CHECK(load_text(&c, "model_dir: run7/\ndist: {gpus: 3, nodes: 4}\n") == 0 && !strcmp(c.output_dir, ".") &&
              !strcmp(c.experiment_name, "run7") && c.nproc_per_node == 3 && c.nodes == 4,
          "model_dir without a parent, gpus/nodes under dist: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(!strcmp(c.precision, "fp32") && c.init_scale == 65536 && c.growth_interval == 2000, "defaults");
    CHECK(load_text(&c, "transformers-params:\n    use_native_fp16: True\n") == 0 &&
              !strcmp(c.precision, "fp16"), "use_native_fp16: %s %s", c.precision, err);
    CHECK(load_text(&c, "precision: bf16\nuse_native_fp16: False\n") == 0 && !strcmp(c.precision, "bf16"),
          "use_native_fp16: False leaves precision: %s %s", c.precision, err);
    ut_config_free(&c);
    check_load_error("precision: fp8\n", "1: precision: 'fp8' is not one of fp32, bf16, fp16");
    /* pretrained_model_dir: model.pretrained, and model.name from config.json's model_type */
    ut_config_init(&c);
    CHECK(load_text(&c, "transformers-params:\n    pretrained_model_dir: tests/parity/fixtures/hf_bart_tiny\n") == 0 &&
              !strcmp(c.model_name, "bart") &&
              !strcmp(ut_kv_get(c.model_opts, "pretrained") ? ut_kv_get(c.model_opts, "pretrained") : "",
                      "tests/parity/fixtures/hf_bart_tiny"),
          "pretrained_model_dir: model.name %s, %s", c.model_name, err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "transformers-params:\n    pretrained_model_dir: ''\n") == 0 && !strcmp(c.model_name, "cnn") &&
              !ut_kv_get(c.model_opts, "pretrained"),
          "empty pretrained_model_dir: %s", err);
    ut_config_free(&c);
    /* model.pretrained names the model until model.name is given */
    ut_config_init(&c);
    CHECK(load_text(&c, "model:\n  pretrained: tests/parity/fixtures/hf_bart_tiny\n") == 0 &&
              !strcmp(c.model_name, "bart"), "model.pretrained alone: model.name %s, %s", c.model_name, err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "model:\n  name: bert\n  pretrained: tests/parity/fixtures/hf_bart_tiny\n") == 0 &&
              !strcmp(c.model_name, "bert"), "model.name given: %s, %s", c.model_name, err);
    ut_config_free(&c);
    check_load_error("transformers-params:\n    pretrained_model_dir: '/nonexistent/bart-base'\n",
                     "2: pretrained_model_dir: /nonexistent/bart-base: not a directory (model.pretrained names a "
                     "directory as save_pretrained writes it: config.json, model.safetensors)");
    check_load_error("model_dir: /\n", "1: model_dir: '/' must end in a directory name (the run directory: "
                                        "output_dir/experiment_name)");
    /* a pasted DeepSpeed block points at deepspeed_config and the utrain key */
    check_load_error("zero_optimization:\n  stage: 2\n",
                     "2: zero_optimization.stage: unknown key (a DeepSpeed setting: keep DeepSpeed's JSON in its own "
                     "file and write deepspeed_config: FILE, which sets the utrain keys it means, or write "
                     "dist.strategy: zero1, zero2 or zero3 here; docs/config.md)");
    /* both fairscale shardings true in one file: the seed says one or the other */
    check_load_error("transformers-params:\n    use_fairscale_optimizer_sharding: True\n"
                     "    use_fairscale_model_sharding: True\n",
                     " use_fairscale_optimizer_sharding and use_fairscale_model_sharding are both True: the seed "
                     "shards the optimizer alone (optimizer sharding: dist.strategy zero2) or everything (model "
                     "sharding with optimizer sharding False: zero3); set one of them False");
    /* is_distributed: False with gpus: 2 is the seed's one process with DataParallel over the batch */
    ut_config_init(&c);
    CHECK(load_text(&c, "transformers-params:\n    is_distributed: False\n    batch_size: 32\n"
                        "dist-params:\n    gpus: 2\n") == 0 &&
              !strcmp(c.dist_strategy, "dp") && c.batch_size == 16 && c.nproc_per_node == 2 &&
              strstr(c.seed_recipe, "a step's batch of 32 is 1 accumulation step(s) x 2 worker(s) x 16 (DataParallel"),
          "is_distributed False, gpus 2: %s batch %lld (%s) %s", c.dist_strategy, (long long)c.batch_size,
          c.seed_recipe, err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "transformers-params:\n    is_distributed: False\n    batch_size: 32\n"
                        "dist-params:\n    gpus: 1\n") == 0 && !strcmp(c.dist_strategy, "ddp") && c.batch_size == 32,
          "is_distributed False, gpus 1: plain training: %s %s", c.dist_strategy, err);
    ut_config_free(&c);
    check_load_error("transformers-params:\n    is_distributed: False\n    batch_size: 30\ndist-params:\n    gpus: 4\n",
                     " is_distributed: False makes batch_size 30 the whole batch of a step, split over "
                     "gradient_accumulation_steps 1 and gpus 4, but it does not split evenly: make it a multiple of 4");
    /* one device, accumulation 2: the seed's loader takes batch_size / 2 at a time */
    ut_config_init(&c);
    CHECK(load_text(&c, "transformers-params:\n    is_distributed: False\n    batch_size: 32\n"
                        "    gradient_accumulation_steps: 2\n") == 0 &&
              !strcmp(c.dist_strategy, "ddp") && c.batch_size == 16 && c.gradient_accumulation_steps == 2,
          "is_distributed False, accumulation 2: %s batch %lld %s", c.dist_strategy, (long long)c.batch_size, err);
    ut_config_free(&c);
    /* use_max_length: either value (truncation to max_len; padding does not change the outputs) */
    ut_config_init(&c);
    CHECK(load_text(&c, "data-params:\n    use_max_length: False\n") == 0, "use_max_length: False: %s", err);
    CHECK(load_text(&c, "data-params:\n    use_max_length: True\n") == 0, "use_max_length: True: %s", err);
    ut_config_free(&c);
    check_set_error("num_loader_workers=4", "--set: num_loader_workers: utrain loads batches on one background "
                                           "thread of each process; remove the key (data.prefetch sets how "
                                           "many batches it prepares ahead)");
}

/* FlagAI's Trainer's other arguments, and its defaults where a file of them
 * (env_type) says nothing: what each one sets, or why it is refused. */
static void test_flagai_trainer_args(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, "env_type: pytorch\nwarm_up: 0.05\nclip_grad: 0.5\nweight_decay: 0.01\nseed: 7\n"
                        "save_dir: /tmp/ck\nsave_optim: False\nsave_rng: True\nload_type: latest\n"
                        "load_optim: False\nload_rng: False\ntensorboard_dir: tb\nnum_checkpoints: 2\n"
                        "deepspeed_activation_checkpointing: True\nfp16: True\nexperiment_name: t5\n") == 0,
          "%s", err);
    CHECK(!strcmp(c.schedule, "annealing") && c.warmup_ratio == 0.05 && c.min_lr_ratio == 0.1 &&
              c.grad_clip == 0.5 && c.weight_decay == 0.01 && c.seed == 7,
          "warm_up, clip_grad: %s %g %g", c.schedule, c.warmup_ratio, c.grad_clip);
    CHECK(!strcmp(c.output_dir, "/tmp/ck") && c.save_only_model && !strcmp(c.load_type, "latest") &&
              c.checkpoint_activations && !strcmp(c.logging_dir, "tb/t5") && strstr(c.ds_tuning, "num_checkpoints"),
          "save_dir %s, save_optim, load_type %s, logging_dir %s", c.output_dir, c.load_type, c.logging_dir);
    CHECK(ut_config_set(&c, "experiment_name=t5b", err, sizeof err) == 0 && !strcmp(c.logging_dir, "tb/t5b"),
          "--set experiment_name moves tensorboard_dir's run: %s", c.logging_dir);
    /* fp16 in FlagAI's plain environment: FP16_Optimizer's scaler, the schedule steps on after a skip */
    CHECK(c.init_scale == 4294967296.0 && c.growth_interval == 1000 && c.loss_scale_hysteresis == 2 &&
              c.min_loss_scale == 1 && !strcmp(c.schedule_on_skip, "advance") &&
              !strstr(flagai_took(&c), "weight decay") && strstr(flagai_took(&c), "FP16_Optimizer"),
          "fp16: scale %g, window %lld, hysteresis %lld, %s; recipe: %s", c.init_scale, (long long)c.growth_interval,
          (long long)c.loss_scale_hysteresis, c.schedule_on_skip, flagai_took(&c));
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "env_type: pytorch\nwarm_up: 0\nsave_dir: None\n") == 0 && !strcmp(c.schedule, "constant") &&
              !strcmp(c.save_strategy, "no"),
          "warm_up 0: %s, save_dir None: %s (%s)", c.schedule, c.save_strategy, err);
    ut_config_free(&c);
    /* under DeepSpeed the DeepSpeed config decides: the seed alone */
    ut_config_init(&c);
    CHECK(load_text(&c, "env_type: deepspeed+mpu\nfp16: true\n") == 0 && c.seed == 1234 && c.weight_decay == 0.01 &&
              !strcmp(c.schedule, "constant") && c.init_scale == 65536 && !strcmp(flagai_took(&c), "seed 1234, log_interval 100, eval_interval 100 (with dev data), save_interval 1000") &&
              c.log_interval == 100 && c.eval_interval == 100 && !strcmp(c.eval_strategy, "steps") &&
              c.save_interval == 1000 && !strcmp(c.save_strategy, "steps"),
          "deepspeed+mpu: %s", flagai_took(&c));
    ut_config_free(&c);
    /* without env_type no FlagAI defaults */
    ut_config_init(&c);
    CHECK(load_text(&c, "lr: 1e-4\nclip_grad: 2\n") == 0 && c.seed == 42 && c.weight_decay == 0.01 &&
              c.grad_clip == 2 && !*flagai_took(&c),
          "no env_type: %s", flagai_took(&c));
    ut_config_free(&c);
    check_load_error("load_optim: true\n", "1: load_optim: true: utrain's load_dir starts a new run from another "
                                            "run's weights, with a fresh optimizer and the seed's random streams; to "
                                            "go on with a run's optimizer state and streams resume it "
                                            "(continue_training: true, the same output_dir and experiment_name), or "
                                            "write load_optim: false");
    check_load_error("warm_up: 1.5\n", "1: warm_up: expected a fraction of the iterations in [0, 1], got '1.5'");
    /* warm_up 1.0 warms up over the whole run (FlagAI allows it); FlagAI 1.6's linear decay on request */
    ut_config_init(&c);
    CHECK(load_text(&c, "env_type: pytorch\nepochs: 1\nwarm_up: 1.0\noptim: {decay_type: linear}\n") == 0 &&
              !strcmp(c.schedule, "annealing") && c.warmup_ratio == 1 && !strcmp(c.decay_type, "linear") &&
              ut_config_validate(&c, err, sizeof err) == 0,
          "warm_up 1.0, decay_type linear: %s", err);
    ut_config_free(&c);
    check_invalid((const char *[]){"optim.schedule=annealing", "train.epochs=1", "optim.decay_type=1-sqrt", NULL},
                  "optim.decay_type: FlagAI's AnnealingLR decays along a cosine or a line, not 1-sqrt; write cosine or "
                  "linear");
    check_invalid((const char *[]){"optim.schedule=linear", "train.epochs=1", "optim.warmup_ratio=1", NULL},
                  "optim.warmup_ratio: 1 must be < 1 (a fraction of the total steps; write optim.warmup_steps: N for a "
                  "number of steps)");
    check_load_error("num_checkpoints: 0\n", "1: num_checkpoints: expected a count >= 1, got '0'");
    check_load_error("load_type: first\n", "1: load_type: 'first' is not one of best, latest");
}

/* FlagAI's Trainer arguments written as YAML. */
static void test_flagai_keys(void) {
    ut_config c;
    ut_config_init(&c);
    const char *text = "env_type: pytorch\nepochs: 1\nbatch_size: 4\neval_interval: 10\nlog_interval: 10\n"
                       "save_interval: 20\nexperiment_name: t5-3b\npytorch_device: cpu\nload_dir: None\n"
                       "lr: 1e-4\nfp16: False\ncheckpoint_activations: True\ngradient_accumulation_steps: 2\n"
                       "model_parallel_size: 1\n";
    CHECK(load_text(&c, text) == 0, "%s", err);
    CHECK(!strcmp(c.eval_strategy, "steps") && c.eval_interval == 10, "eval_interval -> steps");
    CHECK(!strcmp(c.save_strategy, "steps") && c.save_interval == 20, "save_interval -> steps");
    CHECK(c.log_interval == 10 && c.checkpoint_activations && c.gradient_accumulation_steps == 2, "train");
    CHECK(!c.load_dir[0] && !strcmp(c.experiment_name, "t5-3b") && c.lr == 1e-4, "load_dir None");
    /* the Trainer's defaults the file left out */
    CHECK(c.weight_decay == 0.1 && c.grad_clip == 1.0 && c.seed == 1234 && !strcmp(c.schedule, "annealing") &&
              c.warmup_ratio == 0.1 && c.min_lr_ratio == 0.1 && !strcmp(c.schedule_on_skip, "hold") &&
              c.init_scale == 65536 && strstr(flagai_took(&c), "weight decay 0.1, gradient clipping at 1.0, seed 1234, "
                                                               "warm_up 0.1"),
          "FlagAI's defaults: wd %g clip %g seed %lld %s: %s", c.weight_decay, c.grad_clip, (long long)c.seed,
          c.schedule, flagai_took(&c));
    CHECK(load_text(&c, "env_type: pytorchDDP\nmaster_ip: 10.0.0.1\nmaster_port: 17750\nnum_nodes: 2\n"
                        "num_gpus: 4\n") == 0 && !strcmp(c.dist_strategy, "ddp") && c.nodes == 2 &&
              c.nproc_per_node == 4 && !strcmp(c.master_addr, "10.0.0.1"), "pytorchDDP: %s", err);
    ut_config_free(&c);
    /* a strategy the user names wins, before or after the interval */
    ut_config_init(&c);
    CHECK(load_text(&c, "eval_strategy: epoch\neval_interval: 5\nsave_interval: 5\nsave_strategy: \"no\"\n") == 0 &&
              !strcmp(c.eval_strategy, "epoch") && !strcmp(c.save_strategy, "no"), "explicit strategy: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "fp16: True\ninit_scale: 1024\ngrowth_interval: 3\n") == 0 &&
              !strcmp(c.precision, "fp16") && c.init_scale == 1024 && c.growth_interval == 3,
          "fp16: %s %s", c.precision, err);
    CHECK(load_text(&c, "bf16: true\n") == 0 && !strcmp(c.precision, "bf16"), "HF bf16: %s", err);
    ut_config_free(&c);
    /* HF's ddp_backend: torch.distributed's backend as dist.device_comm */
    const char *backends[3][2] = {{"nccl", "direct"}, {"gloo", "host"}, {"mpi", "host"}};
    for (int i = 0; i < 3; i++) {
        char text[64];
        snprintf(text, sizeof text, "ddp_backend: %s\n", backends[i][0]);
        ut_config_init(&c);
        CHECK(load_text(&c, text) == 0 && !strcmp(c.device_comm, backends[i][1]), "ddp_backend %s: %s %s",
              backends[i][0], c.device_comm, err);
        ut_config_free(&c);
    }
    check_load_error("ddp_backend: hccl\n", "1: ddp_backend: 'hccl' is not a backend utrain has; write nccl "
                                           "(collectives on the GPUs' memory), gloo or mpi (through host memory), "
                                           "or dist.device_comm: auto | direct | host");
    check_load_error("fp16: maybe\n", "1: fp16: expected true or false, got 'maybe'");
#ifdef UT_WITH_CUDA
    /* cuda and cuda:N are accepted; the machine's GPUs are checked when the model is built */
    ut_config_init(&c);
    CHECK(load_text(&c, "pytorch_device: 'cuda:1'\n") == 0 && ut_config_device(&c) == UT_CUDA &&
              ut_config_device_index(&c) == 1,
          "pytorch_device cuda:1: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(ut_config_set(&c, "device=cuda", err, sizeof err) == 0 && ut_config_validate(&c, err, sizeof err) == 0 &&
              ut_config_device(&c) == UT_CUDA && ut_config_device_index(&c) == 0,
          "device: cuda: %s", err);
    ut_config_free(&c);
#else
    check_load_error("pytorch_device: 'cuda:0'\n",
                     "1: pytorch_device: 'cuda:0': this build of utrain has no CUDA backend (nvcc was not found when it "
                     "was built, or it was built with make CUDA=0; docs/gpu.md); write pytorch_device: cpu");
    check_invalid((const char *[]){"device=cuda:1", NULL},
                  "device: 'cuda:1': this build of utrain has no CUDA backend (nvcc was not found when it was built, "
                  "or it was built with make CUDA=0; docs/gpu.md); write device: cpu");
#endif
    check_invalid((const char *[]){"device=cuda:12345", NULL}, "device: 'cuda:12345' is not one of cpu, cuda, cuda:N, sim");
    check_invalid((const char *[]){"device=cuda:x", NULL}, "device: 'cuda:x' is not one of cpu, cuda, cuda:N, sim");
    ut_config_init(&c);
    CHECK(ut_config_set(&c, "device=sim", err, sizeof err) == 0 && ut_config_validate(&c, err, sizeof err) == 0 &&
              ut_config_device(&c) == UT_SIM,
          "device: sim: %s", err);
    ut_config_free(&c);
    /* UTRAIN_DEVICE is the default; a device key wins; a bad value names the variable */
    char *saved = getenv("UTRAIN_DEVICE") ? strdup(getenv("UTRAIN_DEVICE")) : NULL;
    setenv("UTRAIN_DEVICE", "sim", 1);
    ut_config_init(&c);
    CHECK(ut_config_device(&c) == UT_SIM && ut_config_validate(&c, err, sizeof err) == 0, "from the environment");
    CHECK(ut_config_set(&c, "device=cpu", err, sizeof err) == 0 && ut_config_device(&c) == UT_CPU, "the key wins");
    ut_config_free(&c);
    setenv("UTRAIN_DEVICE", "tpu", 1);
    ut_config_init(&c);
    CHECK(ut_config_validate(&c, err, sizeof err) == -1 &&
              !strcmp(err, "UTRAIN_DEVICE: 'tpu' is not one of cpu, cuda, cuda:N, sim"), "%s", err);
    ut_config_free(&c);
    if (saved) setenv("UTRAIN_DEVICE", saved, 1);
    else unsetenv("UTRAIN_DEVICE");
    free(saved);
    check_invalid((const char *[]){"device=tpu", NULL}, "device: 'tpu' is not one of cpu, cuda, cuda:N, sim");
    ut_config_init(&c);
    CHECK(load_text(&c, "pytorch_device: cpu\n") == 0 && !strcmp(c.device, "cpu") &&
              ut_config_validate(&c, err, sizeof err) == 0, "pytorch_device: cpu: %s", err);
    ut_config_free(&c);
    /* Megatron's model parallelism: model_parallel_size is dist.tensor_parallel, env_type
     * deepspeed+mpu leaves the data-parallel strategy as it is (ddp) */
    ut_config_init(&c);
    CHECK(load_text(&c, "env_type: deepspeed+mpu\nmodel_parallel_size: 2\n") == 0 && c.tensor_parallel == 2 &&
              !strcmp(c.dist_strategy, "ddp") && ut_config_validate(&c, err, sizeof err) == 0,
          "deepspeed+mpu with model_parallel_size 2: %s", err);
    ut_config_free(&c);
    check_load_error("model_parallel_size: 0\n", "1: dist.tensor_parallel: must be >= 1");
    ut_config_init(&c);
    CHECK(load_text(&c, "model_parallel_size: 2\ndist: {strategy: zero3}\n") == 0 &&
              ut_config_validate(&c, err, sizeof err) == 0,
          "tensor parallelism with zero3: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "model_parallel_size: 2\ndist: {strategy: dp}\n") == 0 &&
              ut_config_validate(&c, err, sizeof err) == -1 && strstr(err, "dist.strategy dp (threads of one"),
          "tensor parallelism with dp is refused: %s", err);
    ut_config_free(&c);
    check_load_error("env_type: deepspeed\n",
                     "1: env_type: utrain runs no DeepSpeed engine; write deepspeed_config: FILE (utrain applies "
                     "its zero stage, precision, batch and optimizer) or dist.strategy: zero1, zero2 or zero3 "
                     "instead of env_type");
    check_load_error("env_type: tpu\n", "1: env_type: 'tpu' is not one of pytorch, pytorchDDP, deepspeed, "
                                         "deepspeed+mpu");
    /* hostfile: None is nothing, as load_dir: None; ~/ in model_dir and data_dir is $HOME */
    {
        ut_config c;
        ut_config_init(&c);
        const char *home = getenv("HOME");
        CHECK(load_text(&c, "hostfile: None\nmodel_dir: ~/runs/sst2\ndata_dir: ~/glue/SST-2\n") == 0, "%s", err);
        char want[512];
        snprintf(want, sizeof want, "%s/runs", home ? home : "");
        CHECK(!home || (!strcmp(c.output_dir, want) && !strcmp(c.experiment_name, "sst2")), "model_dir: %s %s",
              c.output_dir, c.experiment_name);
        snprintf(want, sizeof want, "%s/glue/SST-2/train.tsv", home ? home : "");
        CHECK(!home || !strcmp(c.train_path, want), "data_dir: %s", c.train_path);
        ut_config_free(&c);
    }
    check_load_error("hostfile: ./hostfile\n", "1: hostfile: hosts are given to the launcher, not the config: "
                                                "mpirun --hostfile FILE ... utrain train CFG (see docs/multinode.md)");
    /* optimizer_type: FlagAI's adam (apex's FusedAdam) and adamw are AdamW; its Python objects' None is nothing */
    {
        ut_config c;
        ut_config_init(&c);
        CHECK(load_text(&c, "optim: {name: sgd}\noptimizer_type: adam\ntokenizer: None\nsave_best: None\n"
                            "timers: None\nextra_args: None\n") == 0 &&
                  !strcmp(c.optim_name, "adamw"),
              "optimizer_type: adam: %s %s", err, c.optim_name);
        ut_config_free(&c);
    }
    check_load_error("optimizer_type: lamb\n", "1: optimizer_type: 'lamb': utrain's optimizers are adamw, lion, "
                                                 "adafactor and sgd; write optimizer_type: adamw, lion or adafactor (or "
                                                 "optim.name: sgd)");
    check_load_error("optimizer_type: Adam\n", "1: optimizer_type: 'Adam' is not one of adam, adamw, lion, adafactor "
                                                 "(FlagAI's adan and lamb are not in utrain)");
    /* optimizer_type: adafactor in a FlagAI file: transformers' defaults, and none of the Trainer's weight
     * decay (its get_optimizer passes none to Adafactor) unless the file gives one */
    for (int wd = 0; wd < 2; wd++) {
        ut_config c;
        ut_config_init(&c);
        CHECK(load_text(&c, wd ? "env_type: pytorch\noptimizer_type: adafactor\nweight_decay: 0.05\n"
                               : "env_type: pytorch\noptimizer_type: adafactor\n") == 0 &&
                  !strcmp(c.optim_name, "adafactor") && c.weight_decay == (wd ? 0.05 : 0) &&
                  c.adafactor_scale_parameter && (wd || strstr(flagai_took(&c), "no weight decay")),
              "optimizer_type: adafactor: %s %s wd %g scale %d (%s)", err, c.optim_name, c.weight_decay,
              c.adafactor_scale_parameter, flagai_took(&c));
        ut_config_free(&c);
    }
    /* optimizer_type: lion is lion-pytorch's Lion with the Adam betas FlagAI passes */
    {
        ut_config c;
        ut_config_init(&c);
        CHECK(load_text(&c, "optimizer_type: lion\nlr: 3e-5\n") == 0 && !strcmp(c.optim_name, "lion") &&
                  c.beta1 == 0.9 && c.beta2 == 0.999 && fabs(c.lr - 3e-5) < 1e-12,
              "optimizer_type: lion: %s %s beta2 %g", err, c.optim_name, c.beta2);
        ut_config_free(&c);
    }
    check_load_error("save_best: my_fn\n", "1: save_best: FlagAI's Trainer takes a Python object here; write "
                                             "train.best_metric (dev/loss, dev/accuracy, ...) and "
                                             "train.greater_is_better");
}

/* A built-in model on data it cannot read is refused before anything runs. */
static void test_model_data_fit(void) {
    check_invalid((const char *const[]){"warmup_proportion=1", NULL},
                  "optim.warmup_ratio: 1 must be < 1 (a fraction of the total steps; write "
                  "optim.warmup_steps: N for a number of steps)");
    check_invalid((const char *const[]){"experiment_name=..", NULL},
                  "experiment_name: '..' would put the run in output_dir's parent; give the run a name");
    check_invalid((const char *const[]){"experiment_name=.", NULL},
                  "experiment_name: '.' would put the run in output_dir itself; give the run a name");
    check_invalid((const char *const[]){"nodes=2", "current_node=2", NULL},
                  "dist.current_node: 2 must be < dist.nodes (2): nodes count from 0");
    check_invalid((const char *const[]){"model.name=gpt2", "data.name=tsv_text", "data.train_path=x.tsv", NULL},
                  "model.name: gpt2 is a language model: it reads token shards (data.name: tokens), not "
                  "data.name: tsv_text; choose a model for tsv_text data (bow) or data for gpt2");
    check_invalid((const char *const[]){"model.name=bow", NULL},
                  "model.name: bow is a sentence classifier: it reads TSV text (data.name: tsv_text), not "
                  "data.name: idx_images; choose a model for idx_images data (cnn, mlp) or data for bow");
    ut_config c;
    ut_config_init(&c);
    ut_config_set(&c, "model.name=my_model", err, sizeof err);
    CHECK(ut_config_validate(&c, err, sizeof err) == 0, "a model of the user's own: %s", err);
    ut_config_free(&c);
}

static char *write_text(const ut_config *c);

/* train.metrics: a YAML list or a comma-separated value, written back as
 * one value that loads again; best_metric's dev/<name> is wanted too */
static void test_metrics_list(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, "train:\n  metrics: [f1, matthews_correlation]\n  best_metric: dev/f1_macro\n") == 0,
          "%s", err);
    CHECK(!strcmp(c.metrics, "f1,matthews_correlation"), "'%s'", c.metrics);
    CHECK(c.greater_is_better, "a larger dev/f1_macro is better");
    CHECK(ut_config_validate(&c, err, sizeof err) == 0, "%s", err);
    char *text = write_text(&c);
    CHECK(text && strstr(text, "  metrics: \"f1,matthews_correlation\"\n"), "%s", text ? text : "");
    ut_config b;
    ut_config_init(&b);
    CHECK(text && load_text(&b, text) == 0 && !strcmp(b.metrics, c.metrics), "%s", err);
    free(text);
    ut_config_free(&b);
    CHECK(ut_config_set(&c, "train.metrics=precision, recall", err, sizeof err) == 0 &&
              !strcmp(c.metrics, "precision, recall"), "%s", err);
    ut_config_free(&c);
    check_load_error("train:\n  metrics: [f1, [recall]]\n", "2: train.metrics: a list may only hold single values");
    check_load_error("train:\n  best_metric: [dev/f1]\n", "2: train.best_metric: a sequence where a single value "
                                                           "belongs");
}

static void test_greater_is_better(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(ut_config_set(&c, "train.best_metric=dev/accuracy", err, sizeof err) == 0, "%s", err);
    CHECK(c.greater_is_better, "follows accuracy");
    CHECK(ut_config_set(&c, "train.best_metric=dev/loss", err, sizeof err) == 0, "%s", err);
    CHECK(!c.greater_is_better, "follows loss");
    CHECK(ut_config_set(&c, "train.best_metric=dev/bleu", err, sizeof err) == 0 && c.greater_is_better,
          "follows bleu (greater, as the Hugging Face Trainer decides)");
    CHECK(ut_config_set(&c, "train.best_metric=dev/perplexity", err, sizeof err) == 0 && !c.greater_is_better,
          "follows perplexity");
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_text(&c, "train:\n  greater_is_better: false\n  best_metric: dev/accuracy\n") == 0, "%s", err);
    CHECK(!c.greater_is_better && c.greater_is_better_set, "the user's choice stays");
    ut_config_free(&c);
}

// --- validate

static void test_validate(void) {
    check_invalid((const char *[]){"train.eval_strategy=steps", NULL},
                  "train.eval_interval: must be >= 1 when train.eval_strategy is steps (or set "
                  "train.eval_steps_fraction)");
    check_invalid((const char *[]){"train.save_strategy=steps", NULL},
                  "train.save_interval: must be >= 1 when train.save_strategy is steps (or set "
                  "train.save_steps_ratio or train.save_steps_fraction)");
    check_invalid((const char *[]){"train.best_metric=accuracy", NULL},
                  "train.best_metric: 'accuracy' must look like dev/<name> or train/<name>");
    check_invalid((const char *[]){"train.best_metric=test/", NULL},
                  "train.best_metric: 'test/' must look like dev/<name> or train/<name>");
    check_invalid((const char *[]){"data.train_labels=", NULL},
                  "data.train_labels: required when data.name is idx_images");
    check_invalid((const char *[]){"data.dev_images=/x", NULL},
                  "data.dev_labels: required with data.dev_images");
    check_invalid((const char *[]){"data.name=tokens", NULL},
                  "data.train_path: required when data.name is tokens");
    check_invalid((const char *[]){"data.name=tsv_text", NULL},
                  "data.train_path: required when data.name is tsv_text");
    check_invalid((const char *[]){"optim.schedule=cosine", "train.epochs=0", "train.max_steps=0",
                                   "mode=test", NULL},
                  "optim.schedule: cosine needs train.max_steps or train.epochs for its length");
    check_invalid((const char *[]){"train.epochs=0", NULL},
                  "train.epochs: 0 with train.max_steps 0 leaves nothing to train");
    check_invalid((const char *[]){"optim.min_lr=0.1", NULL},
                  "optim.min_lr: 0.1 must be <= optim.lr (0.001)");
    check_invalid((const char *[]){"optim.schedule=linear", "train.max_steps=10", "optim.warmup_steps=10", NULL},
                  "optim.warmup_steps: must be < train.max_steps with the linear schedule");
    check_invalid((const char *[]){"optim.name=sgd", "optim.nesterov=true", NULL},
                  "optim.nesterov: needs optim.momentum > 0 and optim.dampening 0");
    check_invalid((const char *[]){"train.early_stopping_patience=3", "train.eval_strategy=no", NULL},
                  "train.early_stopping_patience: needs evaluations (train.eval_strategy is no)");
    check_invalid((const char *[]){"experiment_name=a/b", NULL},
                  "experiment_name: 'a/b' must be a non-empty name without '/'");
    check_invalid((const char *[]){"train.metrics=f1,recal", NULL},
                  "train.metrics: 'recal' is not a metric utrain computes (did you mean recall?) (the names: "
                  "accuracy, precision, recall, f1, f1_macro, f1_weighted, matthews_correlation; a regression's "
                  "pearson, spearmanr, combined_score)");
    check_invalid((const char *[]){"train.best_metric=train/f1", NULL},
                  "train.best_metric: train/f1: f1 is computed by evaluations (from all of the dev split's "
                  "predictions), not in training; write dev/f1");
    ut_config c;   /* a value set directly in the struct is checked too */
    ut_config_init(&c);
    strcpy(c.mode, "run");
    CHECK(ut_config_validate(&c, err, sizeof err) == -1, "bad mode accepted");
    CHECK(!strcmp(err, "mode: 'run' is not one of train, test"), "%s", err);
    ut_config_free(&c);
}

// --- write, hash, docs

/* The resolved YAML of c as a malloc'd string. */
static char *write_text(const ut_config *c) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(ut_config_write(c, f) == 0, "write failed");
    fclose(f);
    return buf;
}

static void test_round_trip(void) {
    ut_config a, b;
    ut_config_init(&a);
    CHECK(load_text(&a, full_yaml) == 0, "%s", err);
    const char *sets[] = {"experiment_name=odd: \"name\"\t#1", "train.eval_strategy=no",
                          "model.sizes=[784, 64, 10]", "model.note=two words, here", "optim.eps=1e-12",
                          "data.dev_path=", "train.greater_is_better=false", "data.mean=0.1"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        CHECK(ut_config_set(&a, sets[i], err, sizeof err) == 0, "%s: %s", sets[i], err);
    char *text = write_text(&a);
    ut_config_init(&b);
    CHECK(load_text(&b, text) == 0, "%s\n%s", err, text);
    CHECK(ut_config_hash(&a) == ut_config_hash(&b), "hash changed by the round trip");
    CHECK(!strcmp(a.experiment_name, b.experiment_name), "'%s'", b.experiment_name);
    CHECK(!strcmp(opt(&b, "note"), "two words, here") && !strcmp(opt(&b, "sizes"), "784,64,10"), "opts");
    CHECK(b.eps == 1e-12 && b.mean == 0.1 && b.greater_is_better == a.greater_is_better, "values");
    char *again = write_text(&b);
    CHECK(!strcmp(text, again), "second write differs:\n%s\n---\n%s", text, again);
    CHECK(strstr(text, "\ntrain:\n  epochs: 3.0\n") && strstr(text, "  sizes: [784, 64, 10]\n"), "%s", text);
    CHECK(strstr(text, "  eval_strategy: \"no\"\n") && strstr(text, "  eps: 1.0e-12\n"), "%s", text);
    free(text);
    free(again);
    ut_config_free(&a);
    ut_config_free(&b);
}

static void test_hash(void) {
    ut_config a, b;
    ut_config_init(&a);
    ut_config_init(&b);
    uint64_t h0 = ut_config_hash(&a);
    CHECK(h0 == ut_config_hash(&b), "same defaults, same hash");
    const char *ignored[] = {"output_dir=/elsewhere", "threads=8", "mode=test", "train.epochs=9",
                             "train.log_interval=1", "train.progress=off", "continue_training=true"};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++) {
        CHECK(ut_config_set(&b, ignored[i], err, sizeof err) == 0, "%s", err);
        CHECK(ut_config_hash(&b) == h0, "%s changed the hash", ignored[i]);
    }
    CHECK(ut_config_set(&b, "train.label_smoothing=0", err, sizeof err) == 0 && ut_config_hash(&b) == h0,
          "label smoothing at its default is not hashed (checkpoints from before the key resume)");
    CHECK(ut_config_set(&b, "train.label_smoothing=0.1", err, sizeof err) == 0 && ut_config_hash(&b) != h0,
          "label smoothing changes the hash");
    CHECK(ut_config_set(&b, "train.label_smoothing=0", err, sizeof err) == 0, "%s", err);
    CHECK(ut_config_set(&b, "data.seed=-1", err, sizeof err) == 0 && ut_config_hash(&b) == h0,
          "data.seed at its default is not hashed");
    CHECK(ut_config_set(&b, "data_seed=7", err, sizeof err) == 0 && ut_config_hash(&b) != h0 && b.data_seed == 7,
          "data_seed changes the hash");
    CHECK(ut_config_set(&b, "data.seed=-1", err, sizeof err) == 0, "%s", err);
    CHECK(ut_config_set(&b, "optim.lr=0.002", err, sizeof err) == 0, "%s", err);
    CHECK(ut_config_hash(&b) != h0, "lr did not change the hash");
    ut_config_set(&a, "model.x=1", err, sizeof err);
    ut_config_set(&a, "model.y=2", err, sizeof err);
    ut_config_free(&b);
    ut_config_init(&b);
    ut_config_set(&b, "model.y=2", err, sizeof err);
    ut_config_set(&b, "model.x=1", err, sizeof err);
    CHECK(ut_config_hash(&a) == ut_config_hash(&b), "model option order changed the hash");
    CHECK(ut_config_hash(&a) != h0, "model options not hashed");
    ut_config_free(&a);
    ut_config_free(&b);
}

static void test_docs_up_to_date(void) {
    char *want = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&want, &len);
    ut_config_doc_markdown(f);
    fclose(f);
    FILE *doc = fopen("docs/config.md", "r");
    char *have = calloc(len + 2, 1); /* one byte more than the schema's text: a longer file differs */
    size_t got = doc ? fread(have, 1, len + 1, doc) : 0;
    have[got] = 0;
    if (doc) fclose(doc);
    CHECK(doc && !strcmp(have, want),
          "docs/config.md differs from the schema: run build/tests/unit/test_config --doc > docs/config.md");
    CHECK(strstr(want, "| `train.batch_size` | int | `64` | >= 1 and <= 1e+12 |  | per-process micro-batch"),
          "batch_size row");
    CHECK(strstr(want, "| `epochs` | `train.epochs` |"), "alias row");
    free(want);
    free(have);
}

/* deepspeed_config: FILE (FlagAI's key; HF Trainer's deepspeed): a DeepSpeed
 * JSON config as FlagAI's examples write it sets the utrain keys it means;
 * what utrain cannot honour is refused naming the file and the key. */
static char ds_path[64];
static const char *write_ds(const char *json) {
    write_tmp_as(ds_path, sizeof ds_path, "ut_ds", json);
    return ds_path;
}

/* Hybrid sharding: FSDP's within each node, DeepSpeed's MiCS groups; refused where nothing is sharded */
static void test_hybrid_sharding_keys(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, "fsdp: hybrid_shard_zero2 auto_wrap\n") == 0 && !strcmp(c.dist_strategy, "zero2") &&
              c.shard_size == -1,
          "fsdp: hybrid_shard_zero2: %s %s %d", err, c.dist_strategy, c.shard_size);
    ut_config_free(&c);
    ut_config_init(&c);
    char dsk[300];
    snprintf(dsk, sizeof dsk, "deepspeed_config: %s\n",
             write_ds("{\"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 8, "
                      "\"mics_hierarchical_params_gather\": false}}"));
    CHECK(load_text(&c, dsk) == 0 && !strcmp(c.dist_strategy, "zero3") && c.shard_size == 8,
          "mics_shard_size: %s %s %d", err, c.dist_strategy, c.shard_size);
    unlink(ds_path);
    ut_config_free(&c);
    /* ZeRO++ at its defaults is nothing; its secondary partition is refused, pointing at MiCS */
    ut_config_init(&c);
    snprintf(dsk, sizeof dsk, "deepspeed_config: %s\n",
             write_ds("{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_weights\": false, "
                      "\"zero_quantized_gradients\": false, \"zero_hpz_partition_size\": 1}, \"aio\": {}}"));
    CHECK(load_text(&c, dsk) == 0 && strstr(c.ds_tuning, "aio"), "ZeRO++ defaults: %s '%s'", err, c.ds_tuning);
    ut_config_free(&c);
    ut_config_init(&c);
    snprintf(dsk, sizeof dsk, "deepspeed_config: %s\n",
             write_ds("{\"zero_optimization\": {\"stage\": 3, \"zero_hpz_partition_size\": 8}}"));
    CHECK(load_text(&c, dsk) == -1 && strstr(err, "zero_optimization.zero_hpz_partition_size: utrain has no secondary "
                                                  "parameter partition"),
          "%s", err);
    unlink(ds_path);
    ut_config_free(&c);
    /* Adafactor's relative step is its own schedule */
    check_invalid((const char *[]){"optim.name=adafactor", "optim.adafactor_relative_step=true", "optim.schedule=cosine",
                                   "train.max_steps=10", NULL},
                  "optim.adafactor_relative_step: true is its own schedule (min(1e-2, 1/sqrt(step)), warmup_init's "
                  "warmup), and optim.schedule cosine would not be used; set optim.schedule: constant without warmup, "
                  "or optim.adafactor_relative_step: false");
    check_invalid((const char *[]){"optim.name=adafactor", "optim.adafactor_warmup_init=true", NULL},
                  "optim.adafactor_warmup_init: true warms up Adafactor's relative step; set "
                  "optim.adafactor_relative_step: true too, or remove it (transformers refuses it the same way)");
    check_invalid((const char *[]){"optim.adafactor_relative_step=true", NULL},
                  "optim.adafactor_relative_step: true is Adafactor's; set optim.name: adafactor or remove it");
    /* Adafactor keeps whole matrices */
    check_invalid((const char *[]){"optim.name=adafactor", "dist.strategy=zero2", NULL},
                  "optim.name: adafactor keeps each matrix's row and column statistics whole, and dist.strategy zero2 "
                  "shards the flat optimizer state across ranks, cutting them; set dist.strategy: ddp (Adafactor's "
                  "state is already a small part of AdamW's) or optim.name: adamw or lion");
    check_invalid((const char *[]){"optim.name=adafactor", "dist.tensor_parallel=2", NULL},
                  "optim.name: adafactor keeps each matrix's row and column statistics whole, and "
                  "dist.tensor_parallel 2 splits the matrices between ranks; remove one of them (adamw and lion run "
                  "split)");
    check_invalid((const char *[]){"dist.shard_size=2", NULL},
                  "dist.shard_size: 2 shards the model state over groups of ranks (hybrid sharding), which ddp does "
                  "not shard; set dist.strategy: zero3 (FSDP's HYBRID_SHARD), zero2 or zero1, or remove the key");
}

/* The TrainingArguments' fsdp_config: a mapping (transformers' fsdp_
 * prefix or not) or a JSON file of one; the tuning options are named in the
 * summary; what utrain cannot do is refused naming the option */
static void test_fsdp_config(void) {
    ut_config c;
    ut_config_init(&c);
    CHECK(load_text(&c, "fsdp: full_shard auto_wrap\n"
                        "fsdp_config: {fsdp_transformer_layer_cls_to_wrap: [GPT2Block], backward_prefetch: backward_pre,\n"
                        "              forward_prefetch: false, limit_all_gathers: true, use_orig_params: true,\n"
                        "              sync_module_states: true, activation_checkpointing: true,\n"
                        "              reshard_after_forward: false, version: 2, min_num_params: 0}\n"
                        "dist: {wrap: model}\n") == 0,
          "%s", err);
    CHECK(!strcmp(c.dist_strategy, "zero3") && c.checkpoint_activations && !c.reshard_after_forward &&
              strstr(c.ds_tuning, "fsdp_config.backward_prefetch") && strstr(c.ds_tuning, "fsdp_config.limit_all_gathers"),
          "fsdp_config: %s ckpt %d reshard %d tuning '%s'", c.dist_strategy, c.checkpoint_activations,
          c.reshard_after_forward, c.ds_tuning);
    ut_config_free(&c);
    ut_config_init(&c);
    char yaml[300];
    snprintf(yaml, sizeof yaml, "fsdp: full_shard\nfsdp_config: %s\n",
             write_ds("{\"auto_wrap_policy\": \"NO_WRAP\", \"fsdp_activation_checkpointing\": true}"));
    CHECK(load_text(&c, yaml) == 0 && !strcmp(c.dist_wrap, "model") && c.checkpoint_activations,
          "fsdp_config file: %s %s %d", err, c.dist_wrap, c.checkpoint_activations);
    ut_config_free(&c);
    snprintf(yaml, sizeof yaml, "fsdp_config: %s\n", write_ds("{\"min_num_params\": 1000}"));
    ut_config_init(&c);
    CHECK(load_text(&c, yaml) == -1 && strstr(err, ": fsdp_config.min_num_params: '1000': utrain gathers the "
                                                    "parameters per transformer block"),
          "%s", err);
    ut_config_free(&c);
    /* a file that is not a mapping of options, and an option that is a mapping */
    const char *not_options[2][2] = {{"[\"GPT2Block\"]", ": expected a JSON object of FSDP options"},
                                     {"{\"backward_prefetch\": {\"x\": 1}}", ": backward_prefetch: expected a value or a list"}};
    for (int i = 0; i < 2; i++) {
        snprintf(yaml, sizeof yaml, "fsdp_config: %s\n", write_ds(not_options[i][0]));
        char want[400];
        snprintf(want, sizeof want, "fsdp_config %s%s", ds_path, not_options[i][1]);
        ut_config_init(&c);
        CHECK(load_text(&c, yaml) == -1 && strstr(err, want), "fsdp_config %s: got '%s', want '%s'",
              not_options[i][0], err, want);
        ut_config_free(&c);
    }
    ut_config_init(&c);
    unlink(ds_path);
    ut_config_free(&c);
    check_load_error("fsdp_config: {offload_params: true}\n",
                     "1: fsdp_config.offload_params: true: utrain keeps the parameters on the device (it offloads "
                     "the optimizer: dist.offload_optimizer: cpu); write false or remove the key");
    check_load_error("fsdp_config: {sharding: 2}\n",
                     "1: fsdp_config.sharding: not an FSDP option utrain reads (min_num_params, "
                     "transformer_layer_cls_to_wrap, auto_wrap_policy, backward_prefetch, forward_prefetch, "
                     "limit_all_gathers, use_orig_params, sync_module_states, cpu_ram_efficient_loading, "
                     "activation_checkpointing, reshard_after_forward, offload_params, state_dict_type, version, xla*)");
}

/* loads "deepspeed_config: <json in a file>" into c; 0 or -1 (err) */
static int load_ds(ut_config *c, const char *json) {
    char yaml[160];
    snprintf(yaml, sizeof yaml, "deepspeed_config: %s\n", write_ds(json));
    int rc = load_text(c, yaml);
    unlink(ds_path);
    return rc;
}

static void check_ds_error(const char *json, const char *msg) {
    ut_config c;
    ut_config_init(&c);
    int rc = load_ds(&c, json);
    char want[1024];
    snprintf(want, sizeof want, "%s:1: deepspeed_config %s: %s", path, ds_path, msg);
    CHECK(rc == -1, "loaded: %s", json);
    CHECK(!strcmp(err, want), "got '%s', want '%s'", err, want);
    ut_config_free(&c);
}

static void test_deepspeed_config(void) {
    ut_config c;
    ut_config_init(&c);
    int rc = load_ds(&c, "{\n"
                         "  \"train_batch_size\": \"auto\",\n"
                         "  \"train_micro_batch_size_per_gpu\": 8,\n"
                         "  \"gradient_accumulation_steps\": 2,\n"
                         "  \"gradient_clipping\": 1.0,\n"
                         "  \"steps_per_print\": 50,\n"
                         "  \"zero_optimization\": {\"stage\": 2, \"contiguous_gradients\": true,\n"
                         "    \"overlap_comm\": true, \"reduce_scatter\": true, \"reduce_bucket_size\": 5e7,\n"
                         "    \"allgather_partitions\": true, \"offload_optimizer\": {\"device\": \"none\"}},\n"
                         "  \"fp16\": {\"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 12,\n"
                         "    \"loss_scale_window\": 500, \"hysteresis\": 1},\n"
                         "  \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 3e-5,\n"
                         "    \"betas\": [0.9, 0.98], \"eps\": 1e-8, \"weight_decay\": 0.01}},\n"
                         "  \"wall_clock_breakdown\": false\n"
                         "}\n");
    CHECK(rc == 0, "%s", err);
    CHECK(c.batch_size == 8 && c.gradient_accumulation_steps == 2 && c.grad_clip == 1.0f && c.log_interval == 50,
          "batch %d accum %d clip %g log %d", (int)c.batch_size, (int)c.gradient_accumulation_steps,
          (double)c.grad_clip, (int)c.log_interval);
    CHECK(!strcmp(c.dist_strategy, "zero2") && c.bucket_mb == 191, "strategy %s bucket %g MiB", c.dist_strategy,
          (double)c.bucket_mb);
    CHECK(!strcmp(c.precision, "fp16") && c.init_scale == 4096 && c.growth_interval == 500, "%s %g %d",
          c.precision, (double)c.init_scale, (int)c.growth_interval);
    CHECK(!strcmp(c.optim_name, "adamw") && fabs(c.lr - 3e-5) < 1e-12 && fabs(c.beta2 - 0.98) < 1e-7 &&
              fabs(c.eps - 1e-8) < 1e-15 && fabs(c.weight_decay - 0.01) < 1e-9,
          "%s lr %g beta2 %g eps %g wd %g", c.optim_name, (double)c.lr, (double)c.beta2, (double)c.eps,
          (double)c.weight_decay);
    ut_config_free(&c);
    /* "auto" keeps utrain's value; bf16 and stage 3 */
    ut_config_init(&c);
    int64_t batch0 = c.batch_size;
    CHECK(load_ds(&c, "{\"train_micro_batch_size_per_gpu\": \"auto\", \"bf16\": {\"enabled\": true},"
                      " \"zero_optimization\": {\"stage\": 3}}") == 0 &&
              c.batch_size == batch0 && !strcmp(c.precision, "bf16") && !strcmp(c.dist_strategy, "zero3"),
          "auto/bf16/zero3: %s (batch %d)", err, (int)c.batch_size);
    ut_config_free(&c);
    /* ZeRO-Offload: offload_optimizer, and DeepSpeed's older cpu_offload (FlagAI's examples) */
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\","
                      " \"pin_memory\": true}}}") == 0 &&
              !strcmp(c.offload_optimizer, "cpu") && !strcmp(c.dist_strategy, "zero2"),
          "offload_optimizer: %s (%s)", err, c.offload_optimizer);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"zero_optimization\": {\"stage\": 1, \"cpu_offload\": true}}") == 0 &&
              !strcmp(c.offload_optimizer, "cpu") && !strcmp(c.dist_strategy, "zero1"),
          "cpu_offload: %s (%s)", err, c.offload_optimizer);
    ut_config_free(&c);
    check_ds_error("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\"}}}",
                   "zero_optimization.offload_optimizer.device: expected \"cpu\" or \"none\" (nvme is not available)");
    check_ds_error("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", "
                   "\"pin_memory\": false}}}",
                   "zero_optimization.offload_optimizer.pin_memory: utrain always page-locks the offload buffers; "
                   "set true or remove it");
    check_ds_error("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\"}}}",
                   "zero_optimization.offload_param.device: parameter offload is not available; keep \"none\" and "
                   "offload the optimizer (zero_optimization.offload_optimizer.device: \"cpu\")");
    check_ds_error("{\"zero_optimization\": {\"stage\": 2, \"cpu_offload\": 1}}",
                   "zero_optimization.cpu_offload: expected true or false");
    check_ds_error("{\"zero_optimization\": {\"stage\": 5}}", "zero_optimization.stage: expected 0, 1, 2 or 3");
    check_ds_error("{\"fp16\": {\"enabled\": true, \"hysteresis\": 0}}",
                   "fp16.hysteresis: train.loss_scale_hysteresis: must be >= 1 and <= 1e+09");
    check_ds_error("{\"train_batch_size\": 64}",
                   "train_batch_size: utrain's global batch is train_micro_batch_size_per_gpu x "
                   "gradient_accumulation_steps x processes; give those and write \"auto\" here or remove it");
    check_ds_error("{\"scheduler\": {\"type\": \"OneCycle\"}}",
                   "scheduler.type: utrain has DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR (OneCycle "
                   "and LRRangeTest are not available; optim.schedule has utrain's own, docs/config.md)");
    check_ds_error("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"total_num_steps\": 10}}}",
                   "scheduler.params.total_num_steps: not a parameter of WarmupLR; remove it");
    check_ds_error("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_type\": \"cosine\"}}}",
                   "scheduler.params.warmup_type: expected \"log\" or \"linear\"");
    check_ds_error("{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"last_batch_iteration\": 99}}}",
                   "scheduler.params.last_batch_iteration: utrain's schedule follows the run's own step (a resumed "
                   "run continues it); set -1 or remove it");
    check_ds_error("{\"zero_optimization\": {\"stage3_max_live_params\": 1e9}}",
                   "zero_optimization.stage3_max_live_params: not read by utrain; remove it (dist.* are "
                   "utrain's distributed settings)");
    check_ds_error("{\"zero_optimization\": {\"sub_group_size\": \"big\"}}",
                   "zero_optimization.sub_group_size: expected a number of elements or \"auto\"");
    const char *bad_mics[3] = {"0", "-2", "2.5"};
    for (int i = 0; i < 3; i++) {
        char j[128];
        snprintf(j, sizeof j, "{\"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": %s}}", bad_mics[i]);
        check_ds_error(j, "zero_optimization.mics_shard_size: expected a number of ranks per shard group (-1: off)");
    }
    /* flops_profiler: utrain's step profile, per op */
    check_ds_error("{\"flops_profiler\": {\"enabled\": true, \"module_depth\": 2}}",
                   "flops_profiler.module_depth: utrain's profile lists ops, not modules: write -1 (all) or remove it");
    check_ds_error("{\"flops_profiler\": {\"enabled\": true, \"top_modules\": 3}}",
                   "flops_profiler.top_modules: utrain's profile lists every op, not the top modules: write 1 or "
                   "remove it");
    check_ds_error("{\"flops_profiler\": {\"enabled\": true, \"profile_step\": 1.5}}",
                   "flops_profiler.profile_step: expected a step number, 0 or more");
    check_ds_error("{\"flops_profiler\": {\"enabled\": \"yes\"}}",
                   "flops_profiler.enabled: expected true or false");
    check_ds_error("{\"flops_profiler\": {\"output_file\": 3}}",
                   "flops_profiler.output_file: expected a file name or null");
    check_ds_error("{\"flops_profiler\": {\"recompute_fwd_factor\": 0.5}}",
                   "flops_profiler.recompute_fwd_factor: not read by utrain; remove it");
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"flops_profiler\": {\"enabled\": true, \"module_depth\": -1, \"top_modules\": 1,\n"
                      " \"detailed\": false, \"output_file\": \"prof.txt\"}}") == 0 &&
              c.profile_step == 1 && !c.profile_detailed && !strcmp(c.profile_file, "prof.txt"),
          "flops_profiler on: %s (step %lld, detailed %d, file %s)", err, (long long)c.profile_step,
          c.profile_detailed, c.profile_file);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"wall_clock_breakdown\": true}") == 0 && c.wall_clock_breakdown,
          "wall_clock_breakdown: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"flops_profiler\": {\"enabled\": true, \"profile_step\": 0}}") == 0 &&
              c.profile_step == 0 && c.profile_detailed && !c.profile_file[0],
          "flops_profiler at step 0: %s (step %lld)", err, (long long)c.profile_step);
    ut_config_free(&c);
    check_ds_error("{\"activation_checkpointing\": {\"cpu_checkpointing\": true}}",
                   "activation_checkpointing.cpu_checkpointing: utrain keeps checkpointed activations on the "
                   "device; set false or remove it");
    check_ds_error("{\"optimizer\": {\"type\": \"Lamb\"}}",
                   "optimizer.type: utrain has Adam(W), Lion and SGD; write \"AdamW\", \"Lion\" or \"SGD\"");
    check_ds_error("{\"optimizer\": {\"type\": \"Lion\", \"params\": {\"lr\": 1e-4, \"eps\": 1e-8}}}",
                   "optimizer.params.eps: Lion takes lr, betas and weight_decay; remove it");
    /* DeepSpeed reads the type in any case; Lion's params */
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"optimizer\": {\"type\": \"lion\", \"params\": {\"lr\": 2e-5, \"betas\": [0.95, 0.98],\n"
                      " \"weight_decay\": 0.1}}}") == 0 &&
              !strcmp(c.optim_name, "lion") && fabs(c.lr - 2e-5) < 1e-12 && fabs(c.beta1 - 0.95) < 1e-9 &&
              fabs(c.beta2 - 0.98) < 1e-9 && fabs(c.weight_decay - 0.1) < 1e-9,
          "DeepSpeed Lion: %s %s lr %g betas %g %g wd %g", err, c.optim_name, c.lr, c.beta1, c.beta2,
          c.weight_decay);
    ut_config_free(&c);
    check_ds_error("{\"amp\": {\"enabled\": true}}", "amp: not read by utrain; remove it");
    /* FlagAI's examples/t5_huggingface/deepspeed.json (the file its Trainer's
     * documentation points to), as it is: DeepSpeed's loss scaler (hysteresis
     * 2, floor 1), its tuning knobs accepted and listed for the run's summary */
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 1,\n"
                      " \"steps_per_print\": 50, \"gradient_clipping\": 1.0,\n"
                      " \"zero_optimization\": {\"stage\": 1, \"contiguous_gradients\": false, \"overlap_comm\": true,\n"
                      "   \"reduce_scatter\": true, \"reduce_bucket_size\": 5e7, \"allgather_bucket_size\": 5e7,\n"
                      "   \"cpu_offload\": true},\n"
                      " \"zero_allow_untested_optimizer\": true,\n"
                      " \"fp16\": {\"enabled\": true, \"loss_scale\": 0, \"loss_scale_window\": 1000, \"hysteresis\": 2,\n"
                      "   \"min_loss_scale\": 1},\n"
                      " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 5e-6, \"betas\": [0.9, 0.95], \"eps\": 1e-8,\n"
                      "   \"weight_decay\": 1e-2}},\n"
                      " \"activation_checkpointing\": {\"partition_activations\": true,\n"
                      "   \"contiguous_memory_optimization\": false},\n"
                      " \"wall_clock_breakdown\": false,\n"
                      " \"flops_profiler\": {\"enabled\": false, \"profile_step\": 1, \"module_depth\": -1,\n"
                      "   \"top_modules\": 1, \"detailed\": true, \"output_file\": \"/data/t5_profiler\"}}\n") == 0,
          "FlagAI's T5 deepspeed.json: %s", err);
    CHECK(!strcmp(c.dist_strategy, "zero1") && !strcmp(c.offload_optimizer, "cpu") && !strcmp(c.precision, "fp16"),
          "%s %s %s", c.dist_strategy, c.offload_optimizer, c.precision);
    CHECK(c.loss_scale_hysteresis == 2 && c.min_loss_scale == 1 && c.growth_interval == 1000 &&
              c.init_scale == 65536 && !c.consecutive_hysteresis,
          "DeepSpeed's scaler: hysteresis %lld floor %g window %lld", (long long)c.loss_scale_hysteresis,
          c.min_loss_scale, (long long)c.growth_interval);
    CHECK(!strcmp(c.ds_tuning, "zero_optimization.contiguous_gradients, zero_optimization.allgather_bucket_size, "
                               "activation_checkpointing.partition_activations"),
          "tuning: %s", c.ds_tuning);
    ut_config_free(&c);
    /* DeepSpeed's schedulers: the Hugging Face integration's "auto" keeps
     * utrain's values; absent parameters take DeepSpeed's defaults */
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"last_batch_iteration\": -1,\n"
                      " \"total_num_steps\": \"auto\", \"warmup_min_lr\": \"auto\", \"warmup_max_lr\": \"auto\",\n"
                      " \"warmup_num_steps\": \"auto\"}}}") == 0 &&
              !strcmp(c.schedule, "ds_warmup_decay") && c.warmup_steps == 0 && c.schedule_steps == 0 &&
              !strcmp(c.warmup_type, "log") && c.lr == 1e-3,
          "WarmupDecayLR, auto: %s (%s, warmup %lld, %s)", err, c.schedule, (long long)c.warmup_steps,
          c.warmup_type);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 500,\n"
                      " \"warmup_min_ratio\": 0.1, \"warmup_type\": \"linear\"}}}") == 0 &&
              !strcmp(c.schedule, "ds_warmup_cosine") && c.warmup_steps == 1000 && c.schedule_steps == 500 &&
              c.warmup_min_ratio == 0.1 && c.min_lr_ratio == 0.0001 && !strcmp(c.warmup_type, "linear"),
          "WarmupCosineLR: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 1e-6,\n"
                      " \"warmup_max_lr\": 3e-5, \"warmup_num_steps\": 50}}}") == 0 &&
              !strcmp(c.schedule, "ds_warmup") && c.min_lr == 1e-6 && c.lr == 3e-5 && c.warmup_steps == 50,
          "WarmupLR: %s", err);
    ut_config_free(&c);
    check_invalid((const char *[]){"optim.warmup_type=log", "optim.schedule=cosine", "train.max_steps=9", NULL},
                  "optim.warmup_type: log belongs to DeepSpeed's schedules (ds_warmup, ds_warmup_decay, "
                  "ds_warmup_cosine); optim.schedule is cosine, whose warmup is linear");
    check_invalid((const char *[]){"optim.schedule_steps=9", NULL},
                  "optim.schedule_steps: optim.schedule constant does not decay to an end; remove the key");
    /* more of what DeepSpeed configs hold: values utrain honours, tuning named in the summary */
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"prescale_gradients\": true, \"gradient_predivide_factor\": 1.0,\n"
                      " \"communication_data_type\": \"bf16\", \"zero_force_ds_cpu_optimizer\": false,\n"
                      " \"memory_breakdown\": false, \"sparse_gradients\": false, \"dump_state\": false,\n"
                      " \"tensorboard\": {\"enabled\": true, \"output_path\": \"logs\", \"job_name\": \"t5\"},\n"
                      " \"wandb\": {\"enabled\": false}, \"csv_monitor\": {\"enabled\": false},\n"
                      " \"data_types\": {\"grad_accum_dtype\": \"fp32\"}, \"checkpoint\": {\"tag_validation\": \"Warn\"},\n"
                      " \"bf16\": {\"enabled\": true, \"immediate_grad_update\": false},\n"
                      " \"zero_optimization\": {\"stage\": 1, \"load_from_fp32_weights\": true,\n"
                      "   \"ignore_unused_parameters\": true, \"elastic_checkpoint\": false}}\n") == 0,
          "DeepSpeed's other keys: %s", err);
    CHECK(!strcmp(c.comm_hook, "bf16") && !strcmp(c.logging_dir, "logs/t5") && !strcmp(c.precision, "bf16") &&
              !strcmp(c.ds_tuning, "prescale_gradients, checkpoint.tag_validation, bf16.immediate_grad_update"),
          "comm_hook %s, logging_dir %s, tuning %s", c.comm_hook, c.logging_dir, c.ds_tuning);
    ut_config_free(&c);
    check_ds_error("{\"prescale_gradients\": 2}", "prescale_gradients: expected true or false; write false or remove it");
    check_ds_error("{\"memory_breakdown\": true}",
                   "memory_breakdown: utrain plan gives the memory a run needs on each rank; write false or remove it");
    check_ds_error("{\"wandb\": {\"enabled\": true}}",
                   "wandb.enabled: utrain reports to its own metrics.jsonl and TensorBoard files; set false or "
                   "remove the section");
    check_ds_error("{\"communication_data_type\": \"int8\"}",
                   "communication_data_type: expected \"fp32\", \"bf16\" or \"fp16\"");
    check_ds_error("{\"fp16\": {\"fp16_master_weights_and_grads\": true}}",
                   "fp16.fp16_master_weights_and_grads: utrain keeps float32 master weights and gradients; set false "
                   "or remove it");
    /* the fp16 section's defaults are DeepSpeed's; its keys win in any order */
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"fp16\": {\"consecutive_hysteresis\": true, \"min_loss_scale\": 0.5,\n"
                      " \"initial_scale_power\": 20, \"enabled\": \"auto\"}}") == 0 &&
              c.consecutive_hysteresis && c.min_loss_scale == 0.5 && c.init_scale == 1048576 &&
              c.loss_scale_hysteresis == 2 && !strcmp(c.precision, "fp32"),
          "fp16 section, auto: %s", err);
    ut_config_free(&c);
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"fp16\": {\"enabled\": false}}") == 0 && c.loss_scale_hysteresis == 1 &&
              c.growth_interval == 2000, "fp16 off keeps GradScaler's rules: %s", err);
    ut_config_free(&c);
    /* not JSON: the message names the byte */
    ut_config_init(&c);
    CHECK(load_ds(&c, "{\"fp16\": {\"enabled\": true,}") == -1 && strstr(err, "not valid JSON at byte"), "%s",
          err);
    ut_config_free(&c);
}

/* accelerate launch's environment: the defaults of the keys it means, the
 * file's own keys winning; what utrain cannot honour is refused naming the
 * variable */
static const char *const accel_vars[] = {
    "ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_FSDP", "FSDP_SHARDING_STRATEGY", "FSDP_AUTO_WRAP_POLICY",
    "FSDP_RESHARD_AFTER_FORWARD", "FSDP_ACTIVATION_CHECKPOINTING", "FSDP_OFFLOAD_PARAMS", "ACCELERATE_USE_DEEPSPEED",
    "ACCELERATE_DEEPSPEED_ZERO_STAGE", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
    "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
    "ACCELERATE_GRADIENT_CLIPPING", "ACCELERATE_DEEPSPEED_CONFIG_FILE", "ACCELERATE_USE_MEGATRON_LM", NULL};

static void accel_clear(void) {
    for (const char *const *v = accel_vars; *v; v++) unsetenv(*v);
}

/* the variables (NAME=VALUE, NULL-terminated) applied to a fresh config, then
 * the YAML text loaded over it (NULL: none); rc of the first that fails */
static int accel(ut_config *c, const char *const *vars, const char *yaml, char *said) {
    accel_clear();
    for (const char *const *v = vars; *v; v++) {
        char name[96];
        const char *eq = strchr(*v, '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - *v), *v);
        setenv(name, eq + 1, 1);
    }
    ut_config_init(c);
    int rc = ut_config_accelerate_env(c, said, 512, err, sizeof err);
    if (!rc && yaml) rc = load_text(c, yaml);
    accel_clear();
    return rc;
}

static void test_accelerate_launch(void) {
    ut_config c;
    char said[512];
    CHECK(accel(&c, (const char *[]){"ACCELERATE_MIXED_PRECISION=bf16", "ACCELERATE_USE_FSDP=true",
                                     "FSDP_SHARDING_STRATEGY=FULL_SHARD", "FSDP_AUTO_WRAP_POLICY=NO_WRAP",
                                     "FSDP_RESHARD_AFTER_FORWARD=false", "FSDP_ACTIVATION_CHECKPOINTING=true",
                                     "FSDP_OFFLOAD_PARAMS=false", NULL},
                NULL, said) == 0,
          "%s", err);
    CHECK(!strcmp(c.precision, "bf16") && !strcmp(c.dist_strategy, "zero3") && !strcmp(c.dist_wrap, "model") &&
              !c.reshard_after_forward && c.checkpoint_activations,
          "FSDP: precision %s strategy %s wrap %s reshard %d ckpt %d", c.precision, c.dist_strategy, c.dist_wrap,
          c.reshard_after_forward, c.checkpoint_activations);
    CHECK(!strcmp(said, "precision bf16, FSDP FULL_SHARD (dist.strategy zero3)"), "said '%s'", said);
    ut_config_free(&c);
    /* the file's keys win over the launcher's */
    CHECK(accel(&c, (const char *[]){"ACCELERATE_MIXED_PRECISION=fp16", "ACCELERATE_USE_FSDP=true",
                                     "FSDP_SHARDING_STRATEGY=2", NULL},
                "train: {precision: bf16}\n", said) == 0,
          "%s", err);
    CHECK(!strcmp(c.precision, "bf16") && !strcmp(c.dist_strategy, "zero2"), "file over env: %s %s", c.precision,
          c.dist_strategy);
    ut_config_free(&c);
    CHECK(accel(&c, (const char *[]){"ACCELERATE_MIXED_PRECISION=no", "ACCELERATE_USE_DEEPSPEED=true",
                                     "ACCELERATE_DEEPSPEED_ZERO_STAGE=2",
                                     "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=cpu",
                                     "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE=none",
                                     "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=4", "ACCELERATE_GRADIENT_CLIPPING=1.0",
                                     NULL},
                NULL, said) == 0,
          "%s", err);
    CHECK(!strcmp(c.precision, "fp32") && !strcmp(c.dist_strategy, "zero2") && !strcmp(c.offload_optimizer, "cpu") &&
              c.gradient_accumulation_steps == 4 && c.grad_clip == 1.0f,
          "DeepSpeed: %s %s %s %d %g", c.precision, c.dist_strategy, c.offload_optimizer,
          (int)c.gradient_accumulation_steps, (double)c.grad_clip);
    ut_config_free(&c);
    /* a DeepSpeed config file through the launcher */
    char env[300];
    snprintf(env, sizeof env, "ACCELERATE_DEEPSPEED_CONFIG_FILE=%s",
             write_ds("{\"zero_optimization\": {\"stage\": 3}, \"bf16\": {\"enabled\": true}}"));
    CHECK(accel(&c, (const char *[]){"ACCELERATE_USE_DEEPSPEED=true", env, NULL}, NULL, said) == 0, "%s", err);
    unlink(ds_path);
    CHECK(!strcmp(c.dist_strategy, "zero3") && !strcmp(c.precision, "bf16"), "ds file: %s %s", c.dist_strategy,
          c.precision);
    ut_config_free(&c);
    /* FSDP's hybrid strategy: zero3 within each node */
    CHECK(accel(&c, (const char *[]){"ACCELERATE_USE_FSDP=true", "FSDP_SHARDING_STRATEGY=HYBRID_SHARD", NULL}, NULL,
                said) == 0 &&
              !strcmp(c.dist_strategy, "zero3") && c.shard_size == -1,
          "HYBRID_SHARD: %s %s %d", err, c.dist_strategy, c.shard_size);
    ut_config_free(&c);
    /* refusals */
    static const struct {
        const char *vars[3], *msg;
    } bad[] = {
        {{"ACCELERATE_MIXED_PRECISION=fp8", NULL},
         "ACCELERATE_MIXED_PRECISION=fp8 (accelerate launch --mixed_precision fp8): utrain trains in fp32, bf16 or "
         "fp16; launch with --mixed_precision bf16, fp16 or no"},
        {{"ACCELERATE_USE_FSDP=true", "FSDP_SHARDING_STRATEGY=6", NULL},
         "FSDP_SHARDING_STRATEGY=6 (accelerate launch --fsdp_sharding_strategy): utrain has FULL_SHARD (dist.strategy "
         "zero3), SHARD_GRAD_OP (zero2), HYBRID_SHARD and HYBRID_SHARD_ZERO2 (the same within each node, "
         "dist.shard_size -1) and NO_SHARD (ddp)"},
        {{"ACCELERATE_USE_FSDP=true", "FSDP_OFFLOAD_PARAMS=true", NULL},
         "FSDP_OFFLOAD_PARAMS=true (accelerate launch --fsdp_offload_params true): utrain keeps the parameters on "
         "the device; what it offloads is the optimizer (dist.offload_optimizer: cpu, with zero1 or zero2)"},
        {{"ACCELERATE_USE_DEEPSPEED=true", "ACCELERATE_DEEPSPEED_ZERO_STAGE=4", NULL},
         "ACCELERATE_DEEPSPEED_ZERO_STAGE=4 (accelerate launch --zero_stage): a ZeRO stage is 0, 1, 2 or 3"},
        {{"ACCELERATE_USE_DEEPSPEED=true", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=0", NULL},
         "ACCELERATE_GRADIENT_ACCUMULATION_STEPS (from accelerate launch): "},
        {{"ACCELERATE_USE_MEGATRON_LM=true", NULL},
         "ACCELERATE_USE_MEGATRON_LM=true (accelerate launch --use_megatron_lm): utrain splits models itself"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = accel(&c, bad[i].vars, NULL, said);
        CHECK(rc == -1 && !strncmp(err, bad[i].msg, strlen(bad[i].msg)), "%s: got '%s'", bad[i].vars[0], err);
        ut_config_free(&c);
    }
    /* nothing set: nothing applied */
    CHECK(accel(&c, (const char *[]){NULL}, NULL, said) == 0 && !*said && !strcmp(c.precision, "fp32") &&
              !strcmp(c.dist_strategy, "ddp"),
          "no variables: '%s' %s %s", said, c.precision, c.dist_strategy);
    ut_config_free(&c);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--doc")) {
        ut_config_doc_markdown(stdout);
        return 0;
    }
    RUN(test_defaults);
    RUN(test_full_file);
    RUN(test_empty_file);
    RUN(test_unknown_key);
    RUN(test_yaml_types);
    RUN(test_wrong_type);
    RUN(test_out_of_range);
    RUN(test_bad_enum);
    RUN(test_failed_load_changes_nothing);
    RUN(test_missing_file);
    RUN(test_syntax_error);
    RUN(test_duplicate_key);
    RUN(test_set);
    RUN(test_model_options);
    RUN(test_model_option_names);
    RUN(test_aliases);
    RUN(test_hf_training_arguments);
    RUN(test_hf_fraction_intervals);
    RUN(test_hf_example_script_arguments);
    RUN(test_hf_training_arguments_files);
    RUN(test_hf_defaults);
    RUN(test_seed_dist_flags);
    RUN(test_seed_parameters_file);
    RUN(test_seed_keys);
    RUN(test_flagai_keys);
    RUN(test_flagai_trainer_args);
    RUN(test_deepspeed_config);
    RUN(test_hybrid_sharding_keys);
    RUN(test_fsdp_config);
    RUN(test_accelerate_launch);
    RUN(test_model_data_fit);
    RUN(test_metrics_list);
    RUN(test_greater_is_better);
    RUN(test_validate);
    RUN(test_round_trip);
    RUN(test_hash);
    RUN(test_docs_up_to_date);
    return TEST_SUMMARY();
}
