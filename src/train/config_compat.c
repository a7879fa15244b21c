/* Keys of other trainers' configs that are more than another spelling of a
 * schema key: pytorch_universal_trainer's parameters.yml (model_dir,
 * data_dir, the fairscale and fp16 flags, its path keys) and FlagAI's Trainer
 * arguments (env_type, pytorch_device, model_parallel_size, fp16, its launch
 * arguments); Hugging Face TrainingArguments' are config_hf.c's. Each one is
 * applied through schema keys, or refused with what to write instead: no key
 * is accepted and then ignored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config_schema.h"
#include "utrain/base.h"
#include "utrain/io.h"


static int assign(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    return ut_cfg_assign(c, key, v, err, n) ? -1 : 1;
}

// --- pytorch_universal_trainer

/* v with a leading ~/ read as $HOME/, as the seed's shell-written paths mean
 * it (a literal ./~ directory would be created otherwise); 0, or -1 with err
 * when the result is too long. */
static int home_path(const char *key, const char *v, char *out, size_t cap, char *err, size_t n) {
    const char *home = getenv("HOME");
    bool tilde = !strncmp(v, "~/", 2) && home;
    if ((size_t)snprintf(out, cap, "%s%s", tilde ? home : "", tilde ? v + 1 : v) >= cap)
        return ut_errorf(err, n, "%s: longer than %zu characters", key, cap - 1);
    return 0;
}

/* pretrained_model_dir: a Hugging Face model directory (a leading ~/ is
 * $HOME): model.pretrained, and model.name from its config.json's model_type
 * (the seed's from_pretrained picks the class the same way); empty: nothing. */
static int pretrained_dir(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    if (!*v) return 1;
    char dir[UT_CFG_STR_MAX], why[1024];
    if (home_path(key, v, dir, sizeof dir, err, n)) return -1;
    ut_kv *kv = ut_hf_config_read(dir, why, sizeof why);
    if (!kv) return ut_errorf(err, n, "%s: %s", key, why);
    const char *type = ut_kv_get(kv, "model_type");
    int rc = strcmp(type, "bart") && strcmp(type, "bert") && strcmp(type, "gpt2")
                 ? ut_errorf(err, n, "%s: %s/config.json has model_type '%s'; utrain reads bart, bert and gpt2 "
                                     "directories", key, dir, type)
                 : assign(c, "model.name", type, err, n) < 0 || assign(c, "model.pretrained", dir, err, n) < 0 ? -1
                                                                                                              : 1;
    ut_kv_free(kv);
    return rc;
}

/* model_dir: the run directory, i.e. output_dir/experiment_name. */
static int model_dir(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    char buf[UT_CFG_STR_MAX];
    if (home_path(key, v, buf, sizeof buf, err, n)) return -1;
    for (size_t len = strlen(buf); len > 1 && buf[len - 1] == '/'; len--) buf[len - 1] = 0;
    char *slash = strrchr(buf, '/');
    const char *name = slash ? slash + 1 : buf;
    if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
        return ut_errorf(err, n, "%s: '%s' must end in a directory name (the run directory: "
                                 "output_dir/experiment_name)", key, v);
    if (slash == buf) buf[1] = 0; /* "/name": output_dir "/" */
    else if (slash) *slash = 0;
    if (assign(c, "experiment_name", name, err, n) < 0) return -1;
    return assign(c, "output_dir", slash ? buf : ".", err, n);
}

/* data_dir: a directory of GLUE-style TSV files train.tsv, dev.tsv, test.tsv. */
static int data_dir(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    static const char *const keys[] = {"data.train_path", "data.dev_path", "data.test_path"};
    static const char *const files[] = {"train.tsv", "dev.tsv", "test.tsv"};
    static const char *const seed_files[] = {"sentiment-train", "sentiment-dev", "sentiment-test"};
    char path[UT_CFG_STR_MAX + 16], dir[UT_CFG_STR_MAX];
    if (!*v) return ut_errorf(err, n, "%s: must name the directory holding train.tsv, dev.tsv, test.tsv", key);
    if (home_path(key, v, dir, sizeof dir, err, n)) return -1;
    v = dir;
    if (assign(c, "data.name", "tsv_text", err, n) < 0) return -1;
    /* the seed's own names (headerless: sentence, label) when there is no train.tsv */
    struct stat sb;
    snprintf(path, sizeof path, "%s/train.tsv", v);
    bool seed_names = stat(path, &sb) != 0;
    snprintf(path, sizeof path, "%s/sentiment-train", v);
    seed_names = seed_names && stat(path, &sb) == 0;
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", v, seed_names ? seed_files[i] : files[i]);
        if (assign(c, keys[i], path, err, n) < 0) return -1;
    }
    return 1;
}

/* A path utrain has no use for: accepted empty, refused otherwise. */
static int empty_only(const char *key, const char *v, const char *why, char *err, size_t n) {
    if (!*v) return 1;
    return ut_errorf(err, n, "%s: %s", key, why);
}

/* The seed's boolean flags: mapped onto dist.* and precision. */
static int seed_bool(ut_config *c, const char *key, bool on, char *err, size_t n) {
    if (!strcmp(key, "use_native_fp16")) return on ? assign(c, "train.precision", "fp16", err, n) : 1;
    if (!strcmp(key, "use_fairscale_optimizer_sharding")) { /* ShardedDDP + OSS: grads and state sharded */
        c->seed_sharding = on ? c->seed_sharding | 1u : c->seed_sharding & ~1u;
        return on ? assign(c, "dist.strategy", "zero2", err, n) : 1;
    }
    if (!strcmp(key, "use_fairscale_model_sharding")) {
        c->seed_sharding = on ? c->seed_sharding | 2u : c->seed_sharding & ~2u;
        return on ? assign(c, "dist.strategy", "zero3", err, n) : 1;
    }
    if (!strcmp(key, "use_fairscale_autowrap")) return assign(c, "dist.wrap", on ? "block" : "model", err, n);
    if (!strcmp(key, "use_fairscale_reshard_forward"))
        return assign(c, "dist.reshard_after_forward", on ? "true" : "false", err, n);
    if (!strcmp(key, "is_dev_file")) return on ? 1 : assign(c, "train.eval_strategy", "no", err, n);
    /* true pads every example to max_length, false each batch to its longest
     * example: the same outputs under the attention mask (docs/config.md) */
    if (!strcmp(key, "use_max_length")) return 1;
    return 0;
}

static int seed_key(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    static const char *const bools[] = {"use_native_fp16", "use_fairscale_optimizer_sharding",
                                        "use_fairscale_model_sharding", "use_fairscale_autowrap",
                                        "use_fairscale_reshard_forward", "is_dev_file", "use_max_length"};
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        if (strcmp(key, bools[i])) continue;
        int on = ut_cfg_flag(key, v, err, n);
        return on < 0 ? -1 : seed_bool(c, key, on, err, n);
    }
    if (!strcmp(key, "model_dir")) return model_dir(c, key, v, err, n);
    if (!strcmp(key, "data_dir")) return data_dir(c, key, v, err, n);
    if (!strcmp(key, "continue_training_path"))
        return empty_only(key, v, "utrain resumes from the newest valid checkpoint of the run directory "
                                  "(continue_training: true); to start from another run's weights set "
                                  "load_dir: RUN_DIR", err, n);
    if (!strcmp(key, "pretrained_model_dir")) return pretrained_dir(c, key, v, err, n);
    if (!strcmp(key, "num_loader_workers"))
        return !strcmp(v, "0") ? 1 : ut_errorf(err, n, "%s: utrain loads batches on one background thread of "
                                                     "each process; remove the key (data.prefetch sets how "
                                                     "many batches it prepares ahead)", key);
    return 0;
}

// --- FlagAI

static int env_type(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    snprintf(c->flagai_env, sizeof c->flagai_env, "%.15s", v); /* its recipe (config_yaml.c) reads it */
    if (!strcmp(v, "pytorch") || !strcmp(v, "pytorchDDP")) /* one process is plain training */
        return assign(c, "dist.strategy", "ddp", err, n);
    if (!strcmp(v, "deepspeed"))
        return ut_errorf(err, n, "%s: utrain runs no DeepSpeed engine; write deepspeed_config: FILE (utrain "
                                 "applies its zero stage, precision, batch and optimizer) or dist.strategy: "
                                 "zero1, zero2 or zero3 instead of env_type", key);
    if (!strcmp(v, "deepspeed+mpu")) /* Megatron's mpu: model_parallel_size says the split; ddp over the rest */
        return 1;
    return ut_errorf(err, n, "%s: '%s' is not one of pytorch, pytorchDDP, deepspeed, deepspeed+mpu", key, v);
}


/* warm_up: the fraction of the iterations FlagAI's AnnealingLR warms up
 * over before its cosine decay towards a tenth of lr (1: the whole run);
 * 0 runs no scheduler. */
static int warm_up(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= 0 && x <= 1))
        return ut_errorf(err, n, "%s: expected a fraction of the iterations in [0, 1], got '%s'", key, v);
    if (x == 0) return assign(c, "optim.schedule", "constant", err, n);
    return ut_cfg_assign(c, "optim.schedule", "annealing", err, n) || ut_cfg_assign(c, "optim.warmup_ratio", v, err, n) ||
                   ut_cfg_assign(c, "optim.min_lr_ratio", "0.1", err, n)
               ? -1
               : 1;
}

int ut_cfg_flagai_logging_dir(ut_config *c, char *err, size_t n) {
    if (!c->flagai_tb[0]) return 0;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", c->flagai_tb, c->experiment_name);
    return ut_cfg_assign(c, "train.logging_dir", dir, err, n);
}

/* tensorboard_dir: FlagAI writes its events to DIR/experiment_name (the
 * file's final experiment_name: config_yaml.c sets it again after loading). */
static int tensorboard_dir(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    if (!*v) return ut_errorf(err, n, "%s: expected a directory", key);
    if ((size_t)snprintf(c->flagai_tb, sizeof c->flagai_tb, "%s", v) >= sizeof c->flagai_tb)
        return ut_errorf(err, n, "%s: longer than %zu characters", key, sizeof c->flagai_tb - 1);
    return ut_cfg_flagai_logging_dir(c, err, n) ? -1 : 1;
}

/* FlagAI's checkpoint arguments: save_dir, save_optim, save_rng, load_type
 * (a schema key of its own), load_optim, load_rng. */
static int flagai_checkpoint_key(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    if (!strcmp(key, "save_dir")) /* None: FlagAI saves nothing */
        return !*v ? assign(c, "train.save_strategy", "no", err, n) : assign(c, "output_dir", v, err, n);
    if (!strcmp(key, "save_optim") || !strcmp(key, "save_rng") || !strcmp(key, "load_optim") ||
        !strcmp(key, "load_rng")) {
        int on = ut_cfg_flag(key, v, err, n);
        if (on < 0) return -1;
        if (!strcmp(key, "save_optim")) /* false: FlagAI's checkpoints hold the weights alone */
            return assign(c, "train.save_only_model", on ? "false" : "true", err, n);
        if (!strcmp(key, "save_rng")) /* every checkpoint records the generator's 4 words */
            return 1;
        if (!on) return 1; /* load_dir loads the weights alone */
        return ut_errorf(err, n, "%s: true: utrain's load_dir starts a new run from another run's weights, with a "
                                 "fresh optimizer and the seed's random streams; to go on with a run's optimizer "
                                 "state and streams resume it (continue_training: true, the same output_dir and "
                                 "experiment_name), or write %s: false", key, key);
    }
    return 0;
}

/* optimizer_type (FlagAI 1.7's get_optimizer): adam is apex's FusedAdam,
 * whose weight decay is decoupled (AdamW's), adamw torch's AdamW, lion
 * lion-pytorch's Lion with the Adam betas (0.9, 0.999), adafactor
 * transformers' Adafactor (relative_step False, its other defaults; no
 * weight decay unless the file gives one: config_yaml.c); adan and lamb
 * are optimizers utrain does not have. */
static int optimizer_type(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    if (!strcmp(v, "adam") || !strcmp(v, "adamw")) return assign(c, "optim.name", "adamw", err, n);
    if (!strcmp(v, "lion") || !strcmp(v, "adafactor")) return assign(c, "optim.name", v, err, n);
    if (!strcmp(v, "adan") || !strcmp(v, "lamb"))
        return ut_errorf(err, n, "%s: '%s': utrain's optimizers are adamw, lion, adafactor and sgd; write "
                                 "optimizer_type: adamw, lion or adafactor (or optim.name: sgd)", key, v);
    return ut_errorf(err, n, "%s: '%s' is not one of adam, adamw, lion, adafactor (FlagAI's adan and lamb are not "
                             "in utrain)", key, v);
}

/* Trainer arguments FlagAI takes as Python objects: None (empty) in a file
 * is their default; anything else says what utrain reads instead. */
static int python_object(const char *key, const char *v, char *err, size_t n) {
    static const struct {
        const char *key, *instead;
    } objs[] = {
        {"timers", "utrain times its own steps (the log's samples/s, train.profile for the ops)"},
        {"tokenizer", "write data.tokenizer: DIR (a tokenizer.json or vocabulary directory)"},
        {"save_best", "write train.best_metric (dev/loss, dev/accuracy, ...) and train.greater_is_better"},
        {"extra_args", "write each argument as a key of its own"},
    };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        if (!strcmp(key, objs[i].key))
            return !*v ? 1 : ut_errorf(err, n, "%s: FlagAI's Trainer takes a Python object here; %s", key,
                                       objs[i].instead);
    return 0;
}

static int flagai_key(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    if (!strcmp(key, "env_type")) return env_type(c, key, v, err, n);
    if (!strcmp(key, "warm_up")) return warm_up(c, key, v, err, n);
    if (!strcmp(key, "tensorboard_dir")) return tensorboard_dir(c, key, v, err, n);
    int rc = flagai_checkpoint_key(c, key, v, err, n);
    if (rc) return rc;
    if (!strcmp(key, "deepspeed_activation_checkpointing")) { /* DeepSpeed's checkpointing of mpu models */
        int on = ut_cfg_flag(key, v, err, n);
        return on < 0 ? -1 : on ? assign(c, "train.checkpoint_activations", "true", err, n) : 1;
    }
    if (!strcmp(key, "num_checkpoints")) { /* DeepSpeed's activation checkpoint buffers: its tuning */
        char *end;
        long long k = strtoll(v, &end, 10);
        if (end == v || *end || k < 1) return ut_errorf(err, n, "%s: expected a count >= 1, got '%s'", key, v);
        ut_cfg_note_tuning(c, key);
        return 1;
    }
    if (!strcmp(key, "pytorch_device")) /* FlagAI's spelling of device */
        return ut_cfg_check_device(key, v, err, n) ? -1 : assign(c, "device", v, err, n);
    if (!strcmp(key, "fp16") || !strcmp(key, "bf16")) { /* FlagAI's fp16, HF's fp16 and bf16 */
        int on = ut_cfg_flag(key, v, err, n);
        return on < 0 ? -1 : on ? assign(c, "train.precision", key, err, n) : 1;
    }
    if (!strcmp(key, "model_parallel_size") || !strcmp(key, "model_paralle_size"))
        return assign(c, "dist.tensor_parallel", v, err, n);
    if (!strcmp(key, "hostfile")) /* None (empty): nothing, as load_dir: None */
        return !*v ? 1 : ut_errorf(err, n, "%s: hosts are given to the launcher, not the config: mpirun --hostfile "
                                 "FILE ... utrain train CFG (see docs/multinode.md)", key);
    if (!strcmp(key, "training_script"))
        return ut_errorf(err, n, "%s: utrain starts itself; remove the key (utrain train CFG --nproc N "
                                 "starts N processes)", key);
    if (!strcmp(key, "deepspeed_config") || !strcmp(key, "deepspeed")) /* FlagAI's, HF Trainer's; None: none */
        return !*v ? 1 : ut_cfg_deepspeed(c, v, err, n) ? -1 : 1;
    if (!strcmp(key, "optimizer_type")) return optimizer_type(c, key, v, err, n);
    return python_object(key, v, err, n);
}

int ut_cfg_compat(ut_config *c, const char *key, const char *value, char *err, size_t n) {
    int rc = seed_key(c, key, value, err, n);
    if (!rc) rc = flagai_key(c, key, value, err, n);
    return rc ? rc : ut_cfg_hf(c, key, value, err, n);
}

bool ut_cfg_is_flat_section(const char *name) {
    return !strcmp(name, "data-params") || !strcmp(name, "transformers-params") ||
           !strcmp(name, "dist-params");
}

const char *const ut_cfg_compat_doc =
    "## Keys of other trainers\n\n"
    "pytorch_universal_trainer's `parameters.yml` loads with its own layout: its sections\n"
    "`data-params:`, `transformers-params:` and `dist-params:` hold top-level keys\n"
    "(`dist-params: {gpus: 2}` is `gpus: 2`), and its keys are aliases (above) or these.\n"
    "Its command line, `python main.py --params=parameters.yml`, is `utrain --params=parameters.yml`\n"
    "(the same as `utrain parameters.yml`: train or test as the file's `mode` says).\n"
    "`configs/seed_parameters.yml` is that file with paths for this repository and the\n"
    "few seed settings utrain refuses (below) replaced by their utrain keys. FlagAI's\n"
    "Trainer arguments, written as YAML keys, load the same way (`None` reads as empty).\n"
    "A file in the seed's layout also trains with the seed's recipe where it does not say\n"
    "otherwise, since the seed's trainer always does so: `optim.schedule: linear` (decay\n"
    "after warmup), `train.grad_clip: 1.0` and `train.best_metric: dev/accuracy`; the run\n"
    "summary prints which of them the file left to the recipe. Likewise a file of FlagAI's\n"
    "Trainer arguments (it has `env_type`) trains with the Trainer's defaults where it does\n"
    "not say otherwise: `seed: 1234`, `log_interval: 100`, `eval_interval: 100` (evaluations\n"
    "when there is dev data) and `save_interval: 1000`, and with `env_type` `pytorch` or `pytorchDDP` (under\n"
    "DeepSpeed its config decides) `optim.weight_decay: 0.1`, `train.grad_clip: 1.0`\n"
    "(`clip_grad`), `warm_up: 0.1` (below) and, with `fp16`, FP16_Optimizer's loss scaler\n"
    "(`train.init_scale: 4294967296`, `train.growth_interval: 1000`,\n"
    "`train.loss_scale_hysteresis: 2`, `train.min_loss_scale: 1`) with\n"
    "`optim.schedule_on_skip: advance` (its Trainer steps the scheduler after a skipped\n"
    "step); the summary names those it applied. These defaults follow the file: `--set env_type=...`\n"
    "on the command line sets the environment alone.\n"
    "No key is accepted and ignored: each one sets the utrain keys named here, or is\n"
    "refused with a message saying what to write instead.\n\n"
    "| key | value | becomes |\n|---|---|---|\n"
    "| `model_dir` | a directory (`~/` is `$HOME`) | the run directory: `output_dir` (its parent, `.` if none) and `experiment_name` (its last part) |\n"
    "| `data_dir` | a directory (`~/` is `$HOME`) | `data.name: tsv_text` with `train.tsv`, `dev.tsv`, `test.tsv` in it as `data.*_path`, or the seed's `sentiment-train`, `sentiment-dev`, `sentiment-test` (headerless) when there is no `train.tsv` |\n"
    "| `is_dev_file` | true / false | nothing / `train.eval_strategy: no` |\n"
    "| `use_fairscale_optimizer_sharding` | true / false | `dist.strategy: zero2` (fairscale's ShardedDDP with OSS shards gradients and optimizer state) / nothing |\n"
    "| `use_fairscale_model_sharding` | true / false | `dist.strategy: zero3` / nothing (true together with `use_fairscale_optimizer_sharding: True` in one file is refused, as the seed says to set one) |\n"
    "| `use_fairscale_autowrap` | true / false | `dist.wrap: block` (a unit per block) / `dist.wrap: model` (the model is one unit, as FSDP without auto_wrap) |\n"
    "| `use_fairscale_reshard_forward` | true / false | `dist.reshard_after_forward` |\n"
    "| `use_native_fp16`, `fp16` | false / true | nothing / `train.precision: fp16` |\n"
    "| `use_max_length` | true / false | nothing: examples are truncated to `data.max_len` (`max_length`); with a pretrained tokenizer each batch is padded to its longest example (the seed's false), which gives the outputs padding to `max_length` (true) gives under the attention mask |\n"
    "| `continue_training_path` | empty / a path | nothing / refused (resume is `continue_training: true`; other weights are `load_dir`) |\n"
    "| `pretrained_model_dir` | empty / a Hugging Face model directory (`~/` is `$HOME`) | nothing / `model.pretrained: DIR` and `model.name` from its `config.json`'s `model_type` (`bart`, `bert`, `gpt2`) |\n"
    "| `num_loader_workers` | 0 / more | nothing (no worker processes; one loader thread) / refused |\n"
    "| `log_steps_ratio`, `save_steps_ratio` | times per epoch (the seed's: every steps-per-epoch / ratio steps) | `train.log_steps_ratio`, `train.save_steps_ratio` |\n"
    "| `warmup_proportion` (also HF's `warmup_ratio`) | fraction of all steps | `optim.warmup_ratio` |\n"
    "| `env_type` | `pytorch`, `pytorchDDP` / `deepspeed`, `deepspeed+mpu` | `dist.strategy: ddp` (one process trains plainly) / refused (write `deepspeed_config: FILE` or `dist.strategy: zero1`-`zero3`) / tensor parallelism as `model_parallel_size` says, `dist.strategy` (ddp unless `deepspeed_config` gives a ZeRO stage) over the data-parallel ranks |\n"
    "| `pytorch_device` | `cpu` / `cuda`, `cuda:N` | `device: cpu` / `device: cuda`, `cuda:N` |\n"
    "| `model_parallel_size` | N | `dist.tensor_parallel: N` |\n"
    "| `deepspeed_config` (FlagAI), `deepspeed` (Hugging Face) | a DeepSpeed JSON file | its keys, as in the next table |\n"
    "| `hostfile` | empty (`None`) / a file | nothing / refused: hosts go to `mpirun` |\n"
    "| `warm_up` | a fraction in (0, 1] / 0 | `optim.schedule: annealing` (FlagAI's AnnealingLR: warmup over that fraction of the iterations, then a cosine decay towards a tenth of lr, as FlagAI 1.7 and later; `optim.decay_type: linear` for FlagAI 1.6 and earlier), `optim.warmup_ratio`, `optim.min_lr_ratio: 0.1` / `optim.schedule: constant` (FlagAI runs no scheduler) |\n"
    "| `clip_grad` | max norm | `train.grad_clip` (clipped once per optimizer step, over the whole window's gradient; FlagAI's plain environments clip the gradient accumulated so far after every micro-batch, the same thing without `gradient_accumulation_steps`) |\n"
    "| `save_dir` | a directory / empty (`None`) | `output_dir` (the run's checkpoints go to DIR/experiment_name/checkpoints) / `train.save_strategy: no` |\n"
    "| `save_optim` | false / true | `train.save_only_model: true` (checkpoints of the weights alone, as FlagAI's) / `false` |\n"
    "| `save_rng` | false / true | nothing: every checkpoint records the dropout generator's four words, and resume derives the streams from the seed and step |\n"
    "| `load_type` | `latest` / `best` | the schema key `load_type`: which checkpoint of `load_dir`'s run |\n"
    "| `load_optim`, `load_rng` | false / true | nothing: `load_dir` loads the weights alone / refused (resume a run with `continue_training: true` to go on with its optimizer state and streams) |\n"
    "| `tensorboard_dir` | a directory | `train.logging_dir: DIR/experiment_name` (FlagAI's SummaryWriter directory) |\n"
    "| `deepspeed_activation_checkpointing` | false / true | nothing / `train.checkpoint_activations: true` |\n"
    "| `num_checkpoints` | N >= 1 | DeepSpeed's activation-checkpoint buffers: named in the run's summary as tuning that changes nothing here |\n"
    "| `training_script` | | refused: utrain starts itself |\n"
    "| `optimizer_type` | `adam`, `adamw` / `lion` / `adafactor` / `adan`, `lamb` | `optim.name: adamw` (FlagAI's `adam` is apex's FusedAdam, whose weight decay is decoupled as AdamW's; without apex FlagAI falls back to torch's Adam, which adds the decay to the gradient instead) / `optim.name: lion` (lion-pytorch's Lion, betas 0.9, 0.999 as FlagAI passes them) / `optim.name: adafactor` (transformers' Adafactor as FlagAI builds it: relative_step False, scale_parameter True, no weight decay unless the file gives `weight_decay`) / refused, saying what to write. (FlagAI 1.7's Trainer calls `get_optimizer` with `cpu_optimizer=True`, which builds DeepSpeedCPUAdam whatever `optimizer_type` says; utrain follows `optimizer_type` as FlagAI's optimizer tutorial documents it) |\n"
    "| `timers`, `tokenizer`, `save_best`, `extra_args` | empty (`None`) / anything else | nothing / refused (Python objects in FlagAI; `data.tokenizer`, `train.best_metric` instead) |\n\n"
    "A DeepSpeed config (`deepspeed_config: ds.json`) is read when the key is; each of\n"
    "its keys sets the utrain keys below, `\"auto\"` keeps utrain's value, and any other\n"
    "key, or a value utrain cannot honour, is refused naming the file and the key's path:\n\n"
    "| DeepSpeed key | becomes |\n|---|---|\n"
    "| `train_micro_batch_size_per_gpu` | `train.batch_size` (per process) |\n"
    "| `gradient_accumulation_steps` | `train.gradient_accumulation_steps` |\n"
    "| `train_batch_size` | `\"auto\"` only (the global batch is the two above times the processes) |\n"
    "| `gradient_clipping` | `train.grad_clip` |\n"
    "| `steps_per_print` | `train.log_interval` |\n"
    "| `fp16.enabled`, `bf16.enabled` | `train.precision: fp16` / `bf16` |\n"
    "| `fp16.initial_scale_power`, `fp16.loss_scale_window` | `train.init_scale` (2^power), `train.growth_interval` |\n"
    "| `fp16` (a section not disabled) | DeepSpeed's loss scaler: its defaults `train.growth_interval: 1000`, `train.loss_scale_hysteresis: 2`, `train.min_loss_scale: 1`, `train.init_scale: 65536`, which the keys below change |\n"
    "| `fp16.loss_scale` | 0 only (dynamic scaling) |\n"
    "| `fp16.hysteresis`, `fp16.consecutive_hysteresis`, `fp16.min_loss_scale` | `train.loss_scale_hysteresis`, `train.consecutive_hysteresis`, `train.min_loss_scale` (an overflow at the floor skips its step and keeps the scale, where DeepSpeed stops the run) |\n"
    "| `fp16.auto_cast` | nothing: utrain's fp16 is autocast with float32 master weights either way |\n"
    "| `zero_optimization.stage` | `dist.strategy`: 0 `ddp`, 1 `zero1`, 2 `zero2`, 3 `zero3` |\n"
    "| `zero_optimization.zero_quantized_weights`, `zero_quantized_gradients`, `zero_hpz_partition_size` (ZeRO++) | false, false, 1: nothing; on: refused (utrain's gathers and reductions are float32; hybrid sharding, `mics_shard_size`, keeps them within groups) |\n"
    "| `aio` | named as tuning that changes nothing (NVMe offload is refused) |\n"
    "| `zero_optimization.mics_shard_size` | MiCS: `dist.shard_size` (the stage's sharding within groups of that many ranks, replicated across the groups; -1: off); `mics_hierarchical_params_gather` named as tuning that changes nothing (utrain's gathers stay within a group) |\n"
    "| `zero_optimization.reduce_bucket_size` (elements) | `dist.bucket_mb` (float32 MiB, rounded up) |\n"
    "| `zero_optimization.contiguous_gradients`, `overlap_comm`, `reduce_scatter`, `allgather_partitions`, `round_robin_gradients`, `stage3_gather_16bit_weights_on_model_save` | true or false: how DeepSpeed moves and keeps gradients and weights; utrain's way is fixed (one flat gradient buffer, buckets reduced during backward, reduce-scatter and all-gather for ZeRO, whole float32 checkpoints) and computes the same values; false is named in the run's summary |\n"
    "| `zero_optimization.allgather_bucket_size`, `sub_group_size`, `stage3_prefetch_bucket_size`, `stage3_param_persistence_threshold`, `stage3_max_live_parameters`, `stage3_max_reuse_distance` | the sizes of DeepSpeed's own transfers, optimizer groups and ZeRO-3 prefetching: accepted and named in the run's summary (utrain gathers each layer's parameters as forward and backward reach it) |\n"
    "| `zero_optimization.offload_optimizer` | `\"device\": \"cpu\"` is `dist.offload_optimizer: cpu` (ZeRO-Offload), `\"none\"` none; `pin_memory: true` (utrain always page-locks) |\n"
    "| `zero_optimization.cpu_offload` | DeepSpeed's older spelling: `true` is `dist.offload_optimizer: cpu` |\n"
    "| `zero_optimization.offload_param` | `\"device\": \"none\"` only (parameter offload is not available) |\n"
    "| `optimizer.type` | `Adam`, `AdamW` (decoupled weight decay, DeepSpeed's default) -> `optim.name: adamw`; `SGD` -> `sgd` |\n"
    "| `optimizer.params`: `lr`, `betas`, `eps`, `weight_decay`, `momentum` | `optim.lr`, `optim.beta1`/`beta2`, `optim.eps`, `optim.weight_decay`, `optim.momentum` |\n"
    "| `wall_clock_breakdown` | `train.wall_clock_breakdown` (forward, backward, allreduce and step times after each train line; not with pipeline stages or dist.strategy dp) |\n"
    "| `zero_allow_untested_optimizer`, `zero_force_ds_cpu_optimizer` | nothing: utrain's ZeRO shards both of its optimizers, and ZeRO-Offload's host AdamW is its own |\n"
    "| `communication_data_type` | `fp32`, `bf16`, `fp16` -> `dist.comm_hook: none`, `bf16`, `fp16` (the gradients' all-reduce; ddp and zero1) |\n"
    "| `prescale_gradients`, `gradient_predivide_factor` | accepted (where the average is divided is DeepSpeed's tuning; named in the run's summary unless false / 1) |\n"
    "| `memory_breakdown`, `sparse_gradients`, `dump_state` | false only |\n"
    "| `gradient_accumulation_dtype`, `data_types.grad_accum_dtype`, `seq_parallel_communication_data_type` | `fp32` only (utrain accumulates and exchanges in float32) |\n"
    "| `tensorboard` | `enabled: true` -> `train.logging_dir: output_path/job_name` (TensorBoard's event files there) |\n"
    "| `csv_monitor`, `wandb`, `comms_logger` | `enabled: false` only |\n"
    "| `checkpoint` | `tag_validation`, `parallel_write`, `use_node_local_storage` (DeepSpeed's file handling; named in the run's summary), `load_universal: false` |\n"
    "| `zero_optimization.load_from_fp32_weights` (true), `ignore_unused_parameters`, `elastic_checkpoint` | nothing: utrain resumes from the float32 master weights on any world size with the same global batch, and its buckets hold every parameter |\n"
    "| `bf16.immediate_grad_update`, `fp16.fp16_master_weights_and_grads` (false) | DeepSpeed's tuning, named in the run's summary / nothing (utrain keeps float32 masters) |\n"
    "| `flops_profiler` | `enabled`, `profile_step`, `detailed`, `output_file`: `train.profile_step` (its default 1), "
    "`train.profile_detailed`, `train.profile_file` (utrain's step profile lists ops, not modules: `module_depth` -1 "
    "and `top_modules` 1 only) |\n"
    "| `activation_checkpointing` | how DeepSpeed keeps the activations a model checkpoints (`partition_activations`, `contiguous_memory_optimization`, `number_checkpoints`, `synchronize_checkpoint_boundary`, `profile`: named in the run's summary); `cpu_checkpointing: true` refused. `train.checkpoint_activations` turns checkpointing on, as FlagAI's `checkpoint_activations` does |\n"
    "| `scheduler.type` | `WarmupLR`, `WarmupDecayLR`, `WarmupCosineLR` -> `optim.schedule: ds_warmup`, `ds_warmup_decay`, `ds_warmup_cosine` (DeepSpeed's rates step by step, its warmup and step index included; docs/training.md); `OneCycle`, `LRRangeTest` refused |\n"
    "| `scheduler.params`: `warmup_min_lr`, `warmup_max_lr`, `warmup_num_steps`, `warmup_type`, `total_num_steps`, `warmup_min_ratio`, `cos_min_ratio` | `optim.min_lr`, `optim.lr`, `optim.warmup_steps`, `optim.warmup_type`, `optim.schedule_steps`, `optim.warmup_min_ratio`, `optim.min_lr_ratio`; absent: DeepSpeed's defaults (0, -, 1000, `log`, the run's steps, 0, 0.0001); `last_batch_iteration: -1` only |\n\n"
    "`eval_interval` or `save_interval` > 0 makes `train.eval_strategy` or\n"
    "`train.save_strategy` `steps` unless the file names the strategy itself (FlagAI has\n"
    "no strategy keys). `nodes` > 1 with `current_node` and `master_addr` (the seed's\n"
    "node-by-node launch) is refused at start-up with the `mpirun` line that runs the\n"
    "job; see [multinode.md](multinode.md).\n\n";
