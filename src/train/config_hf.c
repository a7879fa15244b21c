/* Hugging Face TrainingArguments' fields that are more than another spelling
 * of a schema key (those are aliases in config.c: per_device_train_batch_size,
 * learning_rate, gradient_checkpointing, tf32, ...): each sets schema keys,
 * is accepted where its value is what utrain always does, or is refused with
 * what to write instead. A TrainingArguments YAML or JSON file (the one
 * HfArgumentParser reads) then loads with the meaning it has there. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_schema.h"
#include "utrain/base.h"

static int assign(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    return ut_cfg_assign(c, key, v, err, n) ? -1 : 1;
}

/* The boolean fields: what each value does. set (a schema key) = value;
 * why: the value is refused, saying why and what to write; neither: the
 * value is what utrain always does. */
typedef struct {
    const char *set, *value, *why;
} hf_act;
static const struct {
    const char *field;
    hf_act on, off;
} bools[] = {
    {"overwrite_output_dir",
     {.why = "utrain never overwrites a run's checkpoints: a new run where checkpoints are is refused; choose "
             "another experiment_name (or output_dir), or resume it with continue_training: true"},
     {0}},
    {"disable_tqdm", {"train.progress", "lines", NULL}, {0}},
    {"use_cpu", {"device", "cpu", NULL}, {0}},
    {"no_cuda", {"device", "cpu", NULL}, {0}},
    /* transformers 4's switch for optim: adafactor */
    {"adafactor", {"optim.name", "adafactor", NULL}, {0}},
    {"torch_compile",
     {.why = "utrain has no graph compiler: its kernels are compiled ahead of time, fused where docs/gpu.md says; "
             "remove the key"},
     {0}},
    /* the example scripts' switches: train, evaluate on dev (which training
     * does at every evaluation, and test mode), predict on test */
    {"do_train", {0}, {"mode", "test", NULL}},
    {"do_eval", {0}, {0}},
    {"do_predict", {"train.test_at_end", "true", NULL}, {0}},
    /* the buckets hold every parameter; the loaders read the columns the
     * data keys name; the same seed gives the same bits */
    {"ddp_find_unused_parameters", {0}, {0}},
    {"remove_unused_columns", {0}, {0}},
    {"full_determinism", {0}, {0}},
    {"save_safetensors", {0}, {.why = "utrain's checkpoints are safetensors files; remove the key"}},
    {"push_to_hub",
     {.why = "utrain does not reach the network; utrain export RUN_DIR OUT_DIR writes a Hugging Face model "
             "directory to upload"},
     {0}},
    {"activation_checkpointing", {"train.checkpoint_activations", "true", NULL}, {0}},
    {"load_best_model_at_end", {0}, {"train.load_best_at_end", "false", NULL}},
    /* utrain always checkpoints at a stop signal, and accumulates its
     * metrics batch by batch: either value computes the same */
    {"enable_jit_checkpoint", {0}, {0}},
    {"batch_eval_metrics", {0}, {0}},
    {"dataloader_persistent_workers", {0}, {0}},
    {"ddp_static_graph", {0}, {0}},
    {"ddp_broadcast_buffers", {0}, {0}},
    {"average_tokens_across_devices", {0},
     {.why = "utrain averages the loss over the target tokens of the whole window on every rank (transformers' "
             "true: sequence-to-sequence losses by their tokens, a label per example otherwise); remove the key"}},
    {"bf16_full_eval", {"train.eval_precision", "bf16", NULL}, {0}},
    {"fp16_full_eval", {"train.eval_precision", "fp16", NULL}, {0}},
    /* the loader's batch buffers are page-locked for the GPU's copies (plain
     * memory on the CPU, where there is nothing to pin for) */
    {"dataloader_pin_memory", {0},
     {.why = "utrain's loader keeps its batches in page-locked memory on a GPU (it reads a batch ahead while the "
             "step runs, and that memory is what lets the copy overlap); remove the key"}},
};

/* Fields that configure what utrain does one way, or a feature it does not
 * have (whose defaults then do nothing): accepted at the values listed ("":
 * None or empty; "*": any), refused otherwise saying why. A TrainingArguments
 * file written whole (every field at its default) therefore loads. */
static const struct {
    const char *field, *ok[3], *why;
} fixed[] = {
    {"optim_target_modules", {""}, "utrain's optimizers update every parameter alike"},
    {"torch_compile_backend", {""}, "utrain has no graph compiler"},
    {"torch_compile_mode", {""}, "utrain has no graph compiler"},
    {"use_liger_kernel", {"false"}, "utrain's fused kernels are its own (docs/gpu.md)"},
    {"liger_kernel_config", {""}, "utrain's fused kernels are its own (docs/gpu.md)"},
    {"use_cache", {"false"}, "utrain's training forward keeps no key/value cache"},
    {"torch_empty_cache_steps", {""}, "utrain allocates its device memory for the run and reuses it: there is no "
                                      "cache to empty"},
    {"log_on_each_node", {"true"}, "every rank writes its own log, RUN/logger_logs/training_<rank>.log"},
    {"logging_nan_inf_filter", {"true"}, "a non-finite training loss stops the run (fp16: skips its step), so "
                                         "none is ever logged"},
    {"log_level", {"passive"}, "utrain's console shows the run's summary and logged steps (train.progress says "
                               "how)"},
    {"log_level_replica", {"warning", "passive"}, "ranks other than 0 write their log files only"},
    {"project", {"huggingface"}, "a Trackio project: utrain reports to no service"},
    {"trackio_space_id", {""}, "utrain reports to no service"},
    {"trackio_bucket_id", {""}, "utrain reports to no service"},
    {"trackio_static_space_id", {""}, "utrain reports to no service"},
    {"prediction_loss_only", {"false"}, "utrain's evaluation computes its metrics with the loss"},
    {"eval_do_concat_batches", {"true"}, "utrain's predictions files keep every example in order"},
    {"eval_use_gather_object", {"false"}, "utrain's ranks gather numbers, not objects"},
    {"include_for_metrics", {""}, "utrain's metrics take the predictions and labels"},
    {"include_inputs_for_metrics", {"false"}, "utrain's metrics take the predictions and labels"},
    {"save_on_each_node", {"false"}, "rank 0 writes the checkpoints: every node must see output_dir"},
    {"ignore_data_skip", {"false"}, "utrain resumes at the exact batch, without reading the ones before it"},
    {"restore_callback_states_from_checkpoint", {"false"}, "utrain's hooks keep no state in checkpoints"},
    {"parallelism_config", {""}, "dist.tensor_parallel, dist.pipeline_parallel and dist.strategy split a run"},
    {"dataloader_multiprocessing_context", {""}, "utrain loads on one thread of each process"},
    {"dataloader_in_order", {"true"}, "utrain's batches come in the sampler's order"},
    {"label_names", {""}, "the data.* keys name the labels"},
    {"length_column_name", {"length"}, "data.group_by_length measures each example's attention mask"},
    {"debug", {""}, "utrain's debugging aids are UT_PROFILE_OPS=1 and the ASan build (docs/testing.md)"},
    {"skip_memory_metrics", {"true"}, "utrain plan gives the memory a run needs"},
    {"local_rank", {"-1"}, "ranks and the world size come from the launcher (mpirun, srun) or --nproc N / "
                           "dist.nproc_per_node, not from the config"},
    {"past_index", {"-1"}, "utrain's models keep no past state between batches"},
    {"jit_mode_eval", {"false"}, "utrain has no graph compiler"},
    {"use_ipex", {"false"}, "utrain's CPU kernels are its own (oneDNN and OpenBLAS)"},
    {"torchdynamo", {""}, "utrain has no graph compiler"},
    {"fp16_opt_level", {"O1", "*"}, NULL}, /* apex's, which half_precision_backend refuses */
    {"fp16_backend", {"auto"}, "utrain's mixed precision is its own autocast on every device"},
    {"ray_scope", {"last", "*"}, NULL},    /* hyper-parameter search's */
    {"tpu_num_cores", {""}, "TPUs are not available"},
    {"tpu_metrics_debug", {"false"}, "TPUs are not available"},
    {"mp_parameters", {""}, "SageMaker's model parallelism is not available"},
    {"use_mps_device", {"false"}, "Apple GPUs are not available"},
    {"activation_checkpointing_kwargs", {""}, "utrain's checkpointing recomputes each block in backward"},
    {"gradient_checkpointing_kwargs", {""}, "utrain's checkpointing recomputes each block in backward"},
    {"gradient_checkpointing_kwargs.use_reentrant", {"*"}, NULL}, /* how torch recomputes; the values are the same */
    {"accelerator_config", {""}, "utrain's batches are each process's own (see the accelerator_config.* fields)"},
    {"accelerator_config.split_batches", {"false"}, "train.batch_size is each process's batch"},
    {"accelerator_config.dispatch_batches", {""}, "every process reads its own batches"},
    {"accelerator_config.even_batches", {"true"}, "every rank takes the same number of batches an epoch"},
    {"accelerator_config.use_seedable_sampler", {"true"}, "the sampler's order is a function of the seed"},
    {"accelerator_config.non_blocking", {"false", "true"}, NULL}, /* batch copies are asynchronous on GPUs */
    {"accelerator_config.gradient_accumulation_kwargs", {""}, "train.gradient_accumulation_steps is the window"},
    /* Seq2SeqTrainingArguments' */
    {"generation_config", {""}, "the generate.* keys say how utrain generates"},
    /* transformers 4's fields */
    {"per_gpu_train_batch_size", {""}, "write per_device_train_batch_size"},
    {"per_gpu_eval_batch_size", {""}, "write per_device_eval_batch_size"},
    {"sharded_ddp", {""}, NULL}, /* a value is config_value.c's seed flag */
    {"fsdp_min_num_params", {"0"}, "utrain's ZeRO-3 shards every parameter"},
    {"fsdp_transformer_layer_cls_to_wrap", {""}, "utrain's ZeRO-3 shards every parameter"},
    {"dispatch_batches", {""}, "every process reads its own batches"},
    {"split_batches", {"", "false"}, "train.batch_size is each process's batch"},
    {"include_tokens_per_second", {"false", "true"}, NULL}, /* the train lines give tokens_per_s for token data */
    {"use_legacy_prediction_loop", {"false"}, "utrain has one evaluation loop"},
    /* the example scripts' (run_glue, run_classification, run_summarization, ...) model and data arguments
     * beside the aliases (model_name_or_path, train_file, max_seq_length, ...) */
    {"task_name", {""}, "it loads a GLUE task from the Hugging Face Hub, and utrain reads local files: write "
                        "train_file and validation_file (GLUE's own TSV files, or a datasets to_csv / to_json of the "
                        "task); run_ner's ner, pos and chunk name the tags"},
    {"dataset_name", {""}, "it loads a dataset from the Hugging Face Hub, and utrain reads local files: write "
                           "train_file and validation_file (a datasets to_csv / to_json of it)"},
    {"dataset_config_name", {""}, "it names a Hub dataset's configuration (see dataset_name)"},
    {"config_name", {""}, "utrain reads the config.json of the model_name_or_path directory"},
    {"cache_dir", {"*"}, NULL},             /* where Hub downloads go: utrain downloads nothing */
    {"overwrite_cache", {"*"}, NULL},       /* utrain tokenizes its files at open and caches nothing */
    {"preprocessing_num_workers", {"*"}, NULL}, /* the processes that tokenize: the ids are the same */
    {"pad_to_max_length", {"*"}, NULL},     /* padding never changes the results (attention masks) */
    {"use_fast_tokenizer", {"true"}, "utrain's tokenizers read tokenizer.json and the vocabulary files as the fast "
                                     "tokenizers do"},
    {"model_revision", {"main"}, "utrain reads the model_name_or_path directory as it is"},
    {"token", {""}, "utrain does not reach the network"},
    {"use_auth_token", {"", "false"}, "utrain does not reach the network"},
    {"trust_remote_code", {"false"}, "utrain's models are its own code (bert, roberta, gpt2, bart, t5)"},
    {"low_cpu_mem_usage", {"*"}, NULL},     /* how torch loads the weights: the same weights */
    /* run_summarization's and run_translation's */
    {"val_max_target_length", {""}, "utrain cuts every split's targets to max_target_length (data.max_target_len); "
                                    "generation_max_length sets the length generated"},
    {"ignore_pad_token_for_loss", {"true"}, "utrain never counts the padding in the loss (its labels are -100 "
                                            "there)"},
    {"lang", {""}, "it names an mBART tokenizer's language, and utrain's seq2seq models are BART and T5"},
    {"forced_bos_token", {""}, "it forces an mBART language token, and utrain's seq2seq models are BART and T5"},
    {"resize_position_embeddings", {"", "false"}, "utrain keeps the checkpoint's position embeddings: keep "
                                                  "max_source_length within them"},
    {"shuffle_train_dataset", {"*"}, NULL}, /* the sampler shuffles every epoch by the seed (data.shuffle) */
    {"shuffle_seed", {"*"}, NULL},          /* that shuffle's seed: data.seed orders the epochs */
    {"remove_columns", {"*"}, NULL},        /* utrain reads only the text and label columns */
    {"remove_splits", {""}, "utrain reads the files train_file, validation_file and test_file name: leave out the "
                            "ones you do not want"},
    {"train_split_name", {"", "train"}, "it names a Hub dataset's split (see dataset_name)"},
    {"validation_split_name", {"", "validation"}, "it names a Hub dataset's split (see dataset_name)"},
    {"test_split_name", {"", "test"}, "it names a Hub dataset's split (see dataset_name)"},
};

/* 1 (accepted), -1 (refused), 0: not a field of the table */
static int fixed_field(const char *key, const char *v, char *err, size_t n) {
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        if (strcmp(key, fixed[i].field)) continue;
        bool empty = !*v || !strcmp(v, "[]") || !strcmp(v, "{}");
        for (int j = 0; j < 3 && fixed[i].ok[j]; j++) {
            const char *ok = fixed[i].ok[j];
            if (!strcmp(ok, "*") || (!*ok && empty) || (*ok && !strcasecmp(v, ok))) return 1;
        }
        if (!fixed[i].why) return 0; /* another handler's */
        const char *want = fixed[i].ok[0];
        return ut_errorf(err, n, "%s: '%s': %s; write %s or remove the key", key, v, fixed[i].why,
                         *want ? want : "null");
    }
    return 0;
}

/* 1 (applied), -1 (refused, err), or 0: not a boolean field of the table */
static int bool_field(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        if (strcmp(key, bools[i].field)) continue;
        if (!*v) return 1; /* None: the default */
        int on = ut_cfg_flag(key, v, err, n);
        if (on < 0) return -1;
        const hf_act *a = on ? &bools[i].on : &bools[i].off;
        if (a->why) return ut_errorf(err, n, "%s: %s", key, a->why);
        return a->set ? assign(c, a->set, a->value, err, n) : 1;
    }
    return 0;
}

/* metric_for_best_model: a metric of the evaluation ("accuracy" or
 * "eval_accuracy" is dev/accuracy); greater_is_better follows it as in
 * config_value.c (lower is better for a loss or a perplexity) unless given. */
static int best_metric(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    if (!*v) return 1; /* None */
    if (strchr(v, '/')) return assign(c, "train.best_metric", v, err, n);
    const char *name = !strncmp(v, "eval_", 5) ? v + 5 : v;
    char m[UT_CFG_STR_MAX];
    if ((size_t)snprintf(m, sizeof m, "dev/%s", name) >= sizeof m)
        return ut_errorf(err, n, "%s: longer than %d characters", key, UT_CFG_STR_MAX - 6);
    return assign(c, "train.best_metric", m, err, n);
}

/* report_to: the integrations logs go to; utrain's are TensorBoard's event
 * files and metrics.jsonl, always written. */
static int report_to(const char *key, const char *v, char *err, size_t n) {
    char buf[UT_CFG_STR_MAX];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ') t++;
        /* none, []: no service; the run's own files are written regardless */
        if (!strcmp(t, "tensorboard") || !strcmp(t, "all") || !strcmp(t, "none") || !strcmp(t, "[]")) continue;
        return ut_errorf(err, n, "%s: '%s': utrain reports to TensorBoard (RUN/tensorboard) and RUN/metrics.jsonl "
                                 "only (docs/training.md); write report_to: tensorboard or remove the key", key, t);
    }
    return 1;
}

/* logging_strategy: steps (logging_steps' interval), epoch, or no */
static int logging_strategy(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    if (!strcmp(v, "steps")) return 1;
    if (!strcmp(v, "epoch")) return assign(c, "train.log_steps_ratio", "1", err, n);
    if (!strcmp(v, "no") || !strcasecmp(v, "false")) return assign(c, "train.log_interval", "0", err, n);
    return ut_errorf(err, n, "%s: '%s' is not one of steps, epoch, no", key, v);
}

/* optim: Hugging Face's names of torch's AdamW (adamw_torch, its fused and
 * foreach forms, transformers' own adamw_hf) are utrain's adamw: one pass
 * over the flat buffers on every device; bitsandbytes' 32-bit Lion (paged
 * or not: the same update) is utrain's lion. NULL: not such a name. */
static const char *hf_optim(const char *v) {
    static const char *const names[][2] = {
        {"adamw_torch", "adamw"},     {"adamw_torch_fused", "adamw"},     {"adamw_hf", "adamw"},
        {"adamw_apex_fused", "adamw"}, {"adamw_torch_xla", "adamw"},      {"adamw_torch_npu_fused", "adamw"},
        {"lion_32bit", "lion"},        {"paged_lion_32bit", "lion"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(v, names[i][0])) return names[i][1];
    return NULL;
}

/* lr_scheduler_type: transformers' get_scheduler names beyond utrain's own
 * (constant, cosine, linear, step, polynomial, inverse_sqrt); 0 for those,
 * which the alias takes. */
static int scheduler(ut_config *c, const char *v, char *err, size_t n) {
    /* transformers' constant and ReduceLROnPlateau take no warmup (config_yaml.c) */
    c->hf_constant = !strcmp(v, "constant") || !strcmp(v, "reduce_lr_on_plateau") || !strcmp(v, "greedy");
    /* warmup then constant; cosine_with_min_lr's floor is its min_lr or
     * min_lr_rate (lr_scheduler_kwargs) */
    if (!strcmp(v, "constant_with_warmup")) return assign(c, "optim.schedule", "constant", err, n);
    if (!strcmp(v, "cosine_with_min_lr")) return assign(c, "optim.schedule", "cosine", err, n);
    if (!strcmp(v, "cosine_with_restarts")) return assign(c, "optim.schedule", "cosine_restarts", err, n);
    if (!strcmp(v, "warmup_stable_decay")) return assign(c, "optim.schedule", "wsd", err, n);
    /* down to lr_end, 1e-7 unless given */
    if (!strcmp(v, "polynomial")) {
        if (assign(c, "optim.schedule", "polynomial", err, n) < 0) return -1;
        return c->min_lr_set ? 1 : assign(c, "optim.min_lr", "1e-7", err, n);
    }
    /* torch's ReduceLROnPlateau with its own defaults: mode min, whatever the
     * metric, unless lr_scheduler_kwargs gives a mode */
    if (!strcmp(v, "reduce_lr_on_plateau")) {
        if (assign(c, "optim.schedule", "plateau", err, n) < 0) return -1;
        return strcmp(c->plateau_mode, "auto") ? 1 : assign(c, "optim.plateau_mode", "min", err, n);
    }
    /* transformers' GreedyLR with its defaults: mode min, and a floor of
     * 1e-3 (above the default learning rate) unless the kwargs say */
    if (!strcmp(v, "greedy")) {
        if (assign(c, "optim.schedule", "greedy", err, n) < 0) return -1;
        if (!strcmp(c->greedy_mode, "auto") && assign(c, "optim.greedy_mode", "min", err, n) < 0) return -1;
        return c->min_lr_set ? 1 : assign(c, "optim.min_lr", "1e-3", err, n);
    }
    return 0;
}

/* The arguments ReduceLROnPlateau and GreedyLR share: optim.plateau_NAME or
 * optim.greedy_NAME by the schedule the file names (config_yaml.c moves
 * those given before lr_scheduler_type). */
const char *const ut_cfg_hf_rate_args[] = {"mode", "factor", "patience", "threshold", "threshold_mode", "cooldown",
                                           "eps", NULL};

/* lr_scheduler_kwargs (the arguments transformers passes to the schedule):
 * {} is nothing; each argument becomes the optim key of the same meaning. */
static int scheduler_kwarg(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    static const char *const map[][2] = {
        {"min_lr", "optim.min_lr"},          {"lr_end", "optim.min_lr"},
        {"min_lr_rate", "optim.min_lr_ratio"}, {"min_lr_ratio", "optim.min_lr_ratio"},
        {"num_cycles", "optim.num_cycles"},  {"power", "optim.power"},
        {"timescale", "optim.timescale"},    {"num_decay_steps", "optim.decay_steps"},
        {"decay_type", "optim.decay_type"},
        /* GreedyLR's own */
        {"warmup", "optim.greedy_warmup"},   {"max_lr", "optim.greedy_max_lr"},
        {"smooth", "optim.greedy_smooth"},   {"window_size", "optim.greedy_window_size"},
        {"reset_start", "optim.greedy_reset_start"},
    };
    const char *arg = key + strlen("lr_scheduler_kwargs.");
    /* torch's and GreedyLR's min_lr (GreedyLR's max_lr too) may be a list, a
     * value per parameter group ([x] is the one group's x) */
    if (strchr(v, ',') && (!strcmp(arg, "min_lr") || !strcmp(arg, "max_lr")))
        return ut_errorf(err, n, "%s: '%s' is a value per parameter group; utrain's optimizer has one group of "
                                 "all the parameters: give one number", key, v);
    const char *to = NULL;
    char shared[64];
    for (int i = 0; !to && ut_cfg_hf_rate_args[i]; i++)
        if (!strcmp(arg, ut_cfg_hf_rate_args[i])) {
            snprintf(shared, sizeof shared, "optim.%s_%s", strcmp(c->schedule, "greedy") ? "plateau" : "greedy", arg);
            to = shared;
        }
    for (size_t i = 0; !to && i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(arg, map[i][0])) to = map[i][1];
    if (to) {
        if (ut_cfg_assign(c, to, v, err, n) == 0) return 1;
        /* the optim key's error, under the name the file used */
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        return ut_errorf(err, n, "%s (%s): %s", key, to, why);
    }
    if (!strcmp(arg, "verbose")) { /* ReduceLROnPlateau's (deprecated) and GreedyLR's: utrain logs every change */
        int on = ut_cfg_flag(key, v, err, n);
        return on < 0 ? -1 : 1;
    }
    if (!strcmp(arg, "warmup_type"))
        return !strcmp(v, "linear") ? 1 : ut_errorf(err, n, "%s: '%s': utrain's warmup is linear; write linear or "
                                                           "remove the key", key, v);
    if (!strcmp(arg, "num_stable_steps"))
        return ut_errorf(err, n, "%s: wsd's stable phase is the steps between warmup and the run's last "
                                 "num_decay_steps; remove the key and set the run's length (max_steps or "
                                 "num_train_epochs)", key);
    return ut_errorf(err, n, "%s: not an argument of utrain's schedules; they take min_lr, lr_end, min_lr_rate, "
                             "min_lr_ratio, num_cycles, power, timescale, num_decay_steps, decay_type, "
                             "warmup_type: linear, ReduceLROnPlateau's and GreedyLR's mode, factor, patience, "
                             "threshold, threshold_mode, cooldown, eps and verbose, and GreedyLR's warmup, max_lr, "
                             "smooth, window_size and reset_start (docs/config.md)", key);
}

/* train_sampling_strategy: random (utrain's shuffling), sequential */
static int sampling(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    if (!strcmp(v, "random")) return assign(c, "data.shuffle", "true", err, n);
    if (!strcmp(v, "sequential")) return assign(c, "data.shuffle", "false", err, n);
    if (!strcmp(v, "group_by_length")) return assign(c, "data.group_by_length", "true", err, n);
    return ut_errorf(err, n, "%s: '%s': utrain's sampler is random (data.shuffle: true), sequential "
                             "(data.shuffle: false) or group_by_length (data.group_by_length: true)", key, v);
}

/* fsdp: transformers' list of FSDP options ("full_shard auto_wrap") */
static int fsdp(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    char buf[UT_CFG_STR_MAX];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *t = strtok_r(buf, " ,", &save); t; t = strtok_r(NULL, " ,", &save)) {
        /* the hybrid ones shard within a node (dist.shard_size -1) */
        bool hybrid = !strcmp(t, "hybrid_shard") || !strcmp(t, "hybrid_shard_zero2");
        const char *strategy = !strcmp(t, "full_shard") || !strcmp(t, "hybrid_shard")          ? "zero3"
                               : !strcmp(t, "shard_grad_op") || !strcmp(t, "hybrid_shard_zero2") ? "zero2"
                               : !strcmp(t, "no_shard")                                        ? "ddp"
                                                                                               : NULL;
        if (strategy) {
            if (assign(c, "dist.strategy", strategy, err, n) < 0) return -1;
            if (hybrid && assign(c, "dist.shard_size", "-1", err, n) < 0) return -1;
        } else if (strcmp(t, "auto_wrap")) { /* utrain's ZeRO shards every parameter: no wrapping policy */
            return ut_errorf(err, n, "%s: '%s': utrain has full_shard (dist.strategy: zero3), shard_grad_op "
                                     "(zero2), hybrid_shard and hybrid_shard_zero2 (the same within each node: "
                                     "dist.shard_size: -1) and no_shard (ddp), with auto_wrap; %s", key, t,
                             !strcmp(t, "offload") ? "parameter offload is not available (dist.offload_optimizer: "
                                                     "cpu offloads the optimizer)"
                                                   : "write one of those");
        }
    }
    return 1;
}

/* fsdp_config: the TrainingArguments' FSDP options (a mapping, or a JSON
 * file of one), each with or without transformers' "fsdp_" prefix. The
 * ones that only tune how FSDP moves and keeps tensors are named in the
 * run's summary; the ones utrain has set its keys. */
static int fsdp_option(ut_config *c, const char *key, const char *opt, const char *v, char *err, size_t n) {
    if (!strncmp(opt, "fsdp_", 5)) opt += 5;
    bool empty = !*v || !strcmp(v, "[]");
    int on = -1;
    static const char *const flags[] = {"forward_prefetch", "limit_all_gathers", "cpu_ram_efficient_loading",
                                        "use_orig_params", "sync_module_states", "activation_checkpointing",
                                        "reshard_after_forward", "offload_params", "xla", "xla_fsdp_v2",
                                        "xla_fsdp_grad_ckpt", NULL};
    for (int i = 0; flags[i]; i++)
        if (!strcmp(opt, flags[i]) && !empty && (on = ut_cfg_flag(key, v, err, n)) < 0) return -1;
    /* utrain prefetches the next unit both ways and holds at most three; it loads on every rank */
    if (!strcmp(opt, "forward_prefetch") || !strcmp(opt, "limit_all_gathers") ||
        !strcmp(opt, "cpu_ram_efficient_loading")) {
        if (on == 1) ut_cfg_note_tuning(c, key);
        return 1;
    }
    /* utrain's parameters are views of its flat buffers either way; every rank builds or loads the same weights */
    if (!strcmp(opt, "use_orig_params") || !strcmp(opt, "sync_module_states") || !strcmp(opt, "version"))
        return !strcmp(opt, "version") && !empty && strcmp(v, "1") && strcmp(v, "2")
                   ? ut_errorf(err, n, "%s: '%s': FSDP's versions are 1 and 2", key, v)
                   : 1;
    if (!strcmp(opt, "activation_checkpointing"))
        return on == 1 ? assign(c, "train.checkpoint_activations", "true", err, n) : 1;
    if (!strcmp(opt, "reshard_after_forward"))
        return on < 0 ? 1 : assign(c, "dist.reshard_after_forward", on ? "true" : "false", err, n);
    if (!strcmp(opt, "offload_params") || !strncmp(opt, "xla", 3))
        return on != 1 ? 1
                       : ut_errorf(err, n, "%s: true: %s; write false or remove the key", key,
                                   !strncmp(opt, "xla", 3) ? "XLA is not available"
                                                           : "utrain keeps the parameters on the device (it "
                                                             "offloads the optimizer: dist.offload_optimizer: cpu)");
    if (!strcmp(opt, "min_num_params"))
        return empty || !strcmp(v, "0") ? 1
                                        : ut_errorf(err, n, "%s: '%s': utrain gathers the parameters per transformer "
                                                            "block (transformer_layer_cls_to_wrap, dist.wrap: block) "
                                                            "or the whole model, not by size; write 0", key, v);
    if (!strcmp(opt, "transformer_layer_cls_to_wrap")) /* its blocks are the models' transformer layers */
        return empty ? 1 : assign(c, "dist.wrap", "block", err, n);
    if (!strcmp(opt, "auto_wrap_policy")) {
        if (empty) return 1;
        if (!strcasecmp(v, "TRANSFORMER_BASED_WRAP")) return assign(c, "dist.wrap", "block", err, n);
        if (!strcasecmp(v, "NO_WRAP")) return assign(c, "dist.wrap", "model", err, n);
        return ut_errorf(err, n, "%s: '%s': utrain gathers per transformer block (TRANSFORMER_BASED_WRAP) or the "
                                 "whole model (NO_WRAP)", key, v);
    }
    if (!strcmp(opt, "backward_prefetch")) {
        if (!empty && strcasecmp(v, "backward_pre") && strcasecmp(v, "backward_post") && strcasecmp(v, "no_prefetch"))
            return ut_errorf(err, n, "%s: '%s': FSDP's are backward_pre, backward_post and no_prefetch", key, v);
        if (!empty) ut_cfg_note_tuning(c, key); /* utrain prefetches the unit before in backward */
        return 1;
    }
    if (!strcmp(opt, "state_dict_type")) { /* utrain's checkpoint is one whole file, streamed from the shards */
        if (!empty && strcasecmp(v, "FULL_STATE_DICT") && strcasecmp(v, "SHARDED_STATE_DICT") &&
            strcasecmp(v, "LOCAL_STATE_DICT"))
            return ut_errorf(err, n, "%s: '%s': FSDP's are FULL_STATE_DICT, SHARDED_STATE_DICT and "
                                     "LOCAL_STATE_DICT", key, v);
        if (!empty && strcasecmp(v, "FULL_STATE_DICT")) ut_cfg_note_tuning(c, key);
        return 1;
    }
    return ut_errorf(err, n, "%s: not an FSDP option utrain reads (min_num_params, transformer_layer_cls_to_wrap, "
                             "auto_wrap_policy, backward_prefetch, forward_prefetch, limit_all_gathers, "
                             "use_orig_params, sync_module_states, cpu_ram_efficient_loading, "
                             "activation_checkpointing, reshard_after_forward, offload_params, state_dict_type, "
                             "version, xla*)", key);
}

/* fsdp_config: FILE, a JSON file of the options */
static int fsdp_config_file(ut_config *c, const char *key, const char *path, char *err, size_t n) {
    cJSON *root = ut_cfg_json_file(path, key, err, n), *e;
    if (!root) return -1;
    int rc = cJSON_IsObject(root) ? 1 : ut_errorf(err, n, "%s %s: expected a JSON object of FSDP options", key, path);
    cJSON_ArrayForEach(e, root) {
        if (rc < 0) break;
        char k[200], v[UT_CFG_STR_MAX], why[512];
        snprintf(k, sizeof k, "fsdp_config.%s", e->string);
        if (cJSON_IsBool(e)) snprintf(v, sizeof v, "%s", cJSON_IsTrue(e) ? "true" : "false");
        else if (cJSON_IsString(e)) snprintf(v, sizeof v, "%s", e->valuestring);
        else if (cJSON_IsNumber(e)) snprintf(v, sizeof v, "%.17g", e->valuedouble);
        else if (cJSON_IsNull(e)) v[0] = 0;
        else if (cJSON_IsArray(e)) snprintf(v, sizeof v, "%s", cJSON_GetArraySize(e) ? "[list]" : "[]");
        else {
            rc = ut_errorf(err, n, "%s %s: %s: expected a value or a list", key, path, e->string);
            break;
        }
        if (fsdp_option(c, k, e->string, v, why, sizeof why) < 0) rc = ut_errorf(err, n, "%s %s: %s", key, path, why);
    }
    cJSON_Delete(root);
    return rc;
}

static int resume(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    if (!*v || !strcasecmp(v, "false")) return 1; /* None / False: a fresh run */
    if (!strcasecmp(v, "true")) return assign(c, "continue_training", "true", err, n);
    return ut_errorf(err, n, "%s: '%s': utrain resumes a run from its newest valid checkpoint "
                             "(continue_training: true, or resume_from_checkpoint: true); to start a new run from "
                             "a checkpoint's weights write load_dir: %s", key, v, v);
}

/* dataloader_num_workers: how many processes torch's DataLoader reads with.
 * utrain reads every process's batches ahead on one background thread,
 * whatever the count: the loading overlaps the steps either way. */
static int workers(const char *key, const char *v, char *err, size_t n) {
    char *end;
    long long k = strtoll(v, &end, 10);
    if (end == v || *end || k < 0) return ut_errorf(err, n, "%s: expected a number of workers >= 0, got '%s'", key, v);
    return 1;
}

/* Hugging Face TrainingArguments' ddp_backend (torch.distributed's backend):
 * nccl collectives on the GPUs' memory, gloo and mpi through host memory */
static int ddp_backend(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    if (!*v) return 1; /* None: the default */
    if (!strcmp(v, "nccl")) return assign(c, "dist.device_comm", "direct", err, n);
    if (!strcmp(v, "gloo") || !strcmp(v, "mpi")) return assign(c, "dist.device_comm", "host", err, n);
    return ut_errorf(err, n, "%s: '%s' is not a backend utrain has; write nccl (collectives on the GPUs' memory), "
                             "gloo or mpi (through host memory), or dist.device_comm: auto | direct | host", key, v);
}

/* eval_accumulation_steps: how many evaluation batches transformers keeps
 * on the GPU before moving the predictions to the host. utrain's evaluation
 * reduces each batch's metrics and predictions into host memory as it goes,
 * so any N is what it does already. */
static int eval_accumulation(const char *key, const char *v, char *err, size_t n) {
    if (!*v) return 1; /* None */
    char *end;
    long long k = strtoll(v, &end, 10);
    if (end == v || *end || k < 1)
        return ut_errorf(err, n, "%s: expected a number of steps >= 1, got '%s'", key, v);
    return 1;
}

/* logging_steps, eval_steps, save_steps under 1: transformers reads a
 * fraction of the run's total steps (ceil(fraction x max_steps)), as
 * train.log_steps_fraction, eval_steps_fraction and save_steps_fraction do */
static int fraction_of_steps(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x > 0 && x < 1)) return 0; /* the alias's own parsing */
    const char *to = !strcmp(key, "logging_steps") ? "train.log_steps_fraction"
                     : !strcmp(key, "eval_steps")  ? "train.eval_steps_fraction"
                                                   : "train.save_steps_fraction";
    return assign(c, to, v, err, n);
}

bool ut_cfg_hf_mapping(const char *key) { return !strcmp(key, "lr_scheduler_kwargs"); }

/* optim_args ("momentum=0.9,nesterov=True"): what transformers 5's Trainer
 * reads for optim: sgd (momentum, dampening, weight_decay, nesterov; its
 * other optimizers in utrain read none) into the optim.* keys. */
int ut_cfg_hf_optim_args(ut_config *c, char *err, size_t n) {
    char buf[sizeof c->hf_optim_args], *save = NULL;
    size_t k = 0;
    for (const char *p = c->hf_optim_args; *p; p++) /* transformers drops the spaces */
        if (*p != ' ') buf[k++] = *p;
    buf[k] = 0;
    for (char *pair = strtok_r(buf, ",", &save); pair; pair = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(pair, '=');
        if (!eq)
            return ut_errorf(err, n, "optim_args: '%s' is not key=value (write optim_args: \"momentum=0.9,nesterov=True\")",
                             pair);
        *eq = 0;
        const char *val = eq + 1, *key = !strcmp(pair, "momentum")       ? "optim.momentum"
                                         : !strcmp(pair, "dampening")    ? "optim.dampening"
                                         : !strcmp(pair, "weight_decay") ? "optim.weight_decay"
                                         : !strcmp(pair, "nesterov")     ? "optim.nesterov"
                                                                          : NULL;
        if (!key)
            return ut_errorf(err, n, "optim_args: '%s' is not an argument transformers reads for optim sgd (momentum, "
                                     "dampening, weight_decay, nesterov)", pair);
        if (!strcmp(pair, "nesterov")) /* transformers: true, 1 or yes in any case, else false */
            val = !strcasecmp(val, "true") || !strcmp(val, "1") || !strcasecmp(val, "yes") ? "true" : "false";
        char why[256];
        if (ut_cfg_assign(c, key, val, why, sizeof why))
            return ut_errorf(err, n, "optim_args: %s (%s): %s", pair, key, why);
    }
    c->hf_optim_args_done = true;
    return 0;
}

int ut_cfg_hf(ut_config *c, const char *key, const char *v, char *err, size_t n) {
    if (!strcmp(key, "logging_steps") || !strcmp(key, "eval_steps") || !strcmp(key, "save_steps")) {
        int rc = fraction_of_steps(c, key, v, err, n);
        if (rc) return rc;
    }
    if (!strncmp(key, "fsdp_config.", 12)) return fsdp_option(c, key, key + 12, v, err, n);
    if (!strcmp(key, "fsdp_config")) return !*v || !strcmp(v, "{}") ? 1 : fsdp_config_file(c, key, v, err, n);
    /* run_ner's task_name: which tags (ner_tags, pos_tags, chunk_tags); run_glue's loads a task from the Hub */
    if (!strcmp(key, "task_name") && (!strcmp(v, "ner") || !strcmp(v, "pos") || !strcmp(v, "chunk"))) {
        c->hf_tagged = true;
        if (strcmp(v, "ner") && !c->label_column[0]) {
            char col[16];
            snprintf(col, sizeof col, "%s_tags", v);
            return assign(c, "data.label_column", col, err, n);
        }
        return 1;
    }
    /* run_mlm's share of the train file held out for evaluation when there is no validation_file: data.dev_fraction */
    if (!strcmp(key, "validation_split_percentage")) {
        char *end;
        double pct = *v ? strtod(v, &end) : 0;
        if (*v && (*end || !(pct >= 0 && pct < 100)))
            return ut_errorf(err, n, "validation_split_percentage: '%s' is not a percentage in [0, 100)", v);
        c->hf_mlm = true; /* applied with the recipe: not beside a validation_file (run_mlm ignores it then) */
        c->hf_val_split = pct / 100;
        return 1;
    }
    /* the example scripts' model from scratch: model_type names the architecture (model.name), config_overrides
     * its config.json values ("n_embd=10,resid_pdrop=0.2": model.n_embd, model.resid_pdrop) */
    if (!strcmp(key, "model_type")) {
        static const char *const ours[] = {"bert", "roberta", "gpt2", "bart", "t5"};
        for (size_t i = 0; *v && i < sizeof ours / sizeof ours[0]; i++)
            if (!strcmp(v, ours[i])) return assign(c, "model.name", v, err, n);
        if (!*v) return 1;
        return ut_errorf(err, n, "model_type: '%s' is not one of utrain's models (bert, roberta, gpt2, bart, t5)", v);
    }
    if (!strcmp(key, "config_overrides")) {
        c->hf_overrides = true; /* refused beside model_name_or_path (config_check.c) */
        char buf[1024];
        if (strlen(v) >= sizeof buf) return ut_errorf(err, n, "config_overrides: longer than %zu bytes", sizeof buf - 1);
        snprintf(buf, sizeof buf, "%s", v);
        for (char *save = NULL, *pair = strtok_r(buf, ",", &save); pair; pair = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(pair, '=');
            if (!eq || eq == pair || !eq[1])
                return ut_errorf(err, n, "config_overrides: '%s' is not key=value (as \"n_embd=10,resid_pdrop=0.2\")",
                                 pair);
            *eq = 0;
            /* GPT-2's config.json names for what its model keys call block_size and dropout (one rate for
             * the three dropouts) */
            const char *name = pair;
            if (!strcmp(pair, "n_positions") || !strcmp(pair, "n_ctx")) name = "block_size";
            bool rate = !strcmp(pair, "resid_pdrop") || !strcmp(pair, "embd_pdrop") || !strcmp(pair, "attn_pdrop");
            if (rate) name = "dropout";
            const char *had = rate ? ut_kv_get(c->model_opts, "dropout") : NULL;
            if (had && strcmp(had, eq + 1))
                return ut_errorf(err, n, "config_overrides: %s=%s, but another of resid_pdrop, embd_pdrop and "
                                         "attn_pdrop is %s: utrain's GPT-2 has one dropout rate for the three "
                                         "(model.dropout); give them one value", pair, eq + 1, had);
            char key2[300], why[512];
            snprintf(key2, sizeof key2, "model.%s", name);
            if (ut_cfg_assign(c, key2, eq + 1, why, sizeof why))
                return ut_errorf(err, n, "config_overrides: %s=%s: %s", pair, eq + 1, why);
        }
        return 1;
    }
    /* run_ner's per-type scores: train.entity_metrics */
    if (!strcmp(key, "return_entity_level_metrics")) {
        c->hf_tagged = true;
        return *v ? 0 : 1;
    }
    int rc = fixed_field(key, v, err, n);
    if (rc) return rc;
    /* None for a field that is another spelling of a utrain key: that key's default */
    if (!*v && strcmp(ut_cfg_resolve(key), key) && !ut_cfg_find(key)) return 1;
    if (!*v && (!strcmp(key, "greater_is_better") || !strcmp(key, "ddp_find_unused_parameters") ||
                !strcmp(key, "tf32") || !strcmp(key, "fsdp")))
        return 1;
    rc = bool_field(c, key, v, err, n);
    if (rc) return rc;
    if (!strcmp(key, "max_steps") && !strcmp(v, "-1")) return assign(c, "train.max_steps", "0", err, n);
    /* transformers 5: a warmup_steps in [0, 1) that is not a whole number is a ratio of the steps */
    if (!strcmp(key, "warmup_steps") && strpbrk(v, ".eE")) {
        char *end;
        double x = strtod(v, &end);
        if (end != v && !*end && x > 0 && x < 1) return assign(c, "optim.warmup_ratio", v, err, n);
        if (end == v || *end || x != floor(x) || x < 0 || x > 1e15)
            return ut_errorf(err, n, "%s: '%s': a number of steps, or a fraction of them in (0, 1)", key, v);
        char whole[32];
        snprintf(whole, sizeof whole, "%.0f", x);
        return assign(c, "optim.warmup_steps", whole, err, n);
    }
    if (!strcmp(key, "train_sampling_strategy")) return sampling(c, key, v, err, n);
    if (!strcmp(key, "fsdp")) return fsdp(c, key, v, err, n);
    if (!strncmp(key, "hub_", 4)) return 1; /* push_to_hub's settings; push_to_hub itself is refused */
    /* Seq2SeqTrainingArguments: the length grouping of its sortish sampler;
     * generation_max_length counts the decoder's start token */
    if ((!strcmp(key, "sortish_sampler") || !strcmp(key, "generation_max_length")) && !*v) return 1; /* None */
    if (!strcmp(key, "sortish_sampler")) {
        int on = ut_cfg_flag(key, v, err, n);
        return on < 0 ? -1 : on ? assign(c, "data.group_by_length", "true", err, n) : 1;
    }
    if (!strcmp(key, "generation_max_length")) {
        char *end;
        long long k = strtoll(v, &end, 10);
        if (end == v || *end || k < 2 || k > 1000001)
            return ut_errorf(err, n, "%s: expected a length >= 2 (the decoder's start token and a token), got '%s'",
                             key, v);
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", k - 1);
        return assign(c, "generate.max_new_tokens", buf, err, n);
    }
    /* run_classification's metric_name: the score computed beside the loss (accuracy always is; a
     * regression's mean squared error is its loss) */
    if (!strcmp(key, "metric_name")) {
        if (!*v || !strcmp(v, "accuracy") || !strcmp(v, "mse")) return 1;
        static const char *const scores[] = {"f1", "precision", "recall", "matthews_correlation"};
        for (size_t i = 0; i < sizeof scores / sizeof scores[0]; i++)
            if (!strcmp(v, scores[i])) return assign(c, "train.metrics", v, err, n);
        return ut_errorf(err, n, "%s: '%s': utrain computes accuracy, f1, precision, recall, matthews_correlation "
                                 "(train.metrics) and a regression's mse, pearson and spearmanr", key, v);
    }
    /* run_classification's: a regression, or labels that are real numbers never make one (else they do) */
    if (!strcmp(key, "do_regression")) {
        if (!*v) return 1;
        int on = ut_cfg_flag(key, v, err, n);
        if (on < 0) return -1;
        c->hf_classify = !on;
        return on ? assign(c, "model.problem_type", "regression", err, n) : 1;
    }
    /* run_translation's {"translation": {"en": ..., "ro": ...}} lines: the texts are keys of "translation" */
    if (!strcmp(key, "source_lang") || !strcmp(key, "target_lang")) {
        if (!*v) return 1;
        if (strlen(v) > 40 || strpbrk(v, ". \t"))
            return ut_errorf(err, n, "%s: '%s' is not a language code (en, ro, ...)", key, v);
        char field[64];
        snprintf(field, sizeof field, "translation.%s", v);
        return assign(c, key[0] == 's' ? "data.source_field" : "data.target_field", field, err, n);
    }
    if (!strcmp(key, "metric_for_best_model")) return best_metric(c, key, v, err, n);
    if (!strcmp(key, "report_to")) return report_to(key, v, err, n);
    /* transformers 4 took a boolean, 5 also no / all / non_padding */
    if (!strcmp(key, "include_num_input_tokens_seen")) {
        if (!strcmp(v, "all") || !strcmp(v, "non_padding") || !strcmp(v, "no"))
            return assign(c, "train.count_input_tokens", v, err, n);
        char why[256];
        int on = ut_cfg_flag(key, v, why, sizeof why);
        if (on < 0)
            return ut_errorf(err, n, "%s: expected no, all, non_padding, true or false, got '%s'", key, v);
        return assign(c, "train.count_input_tokens", on ? "all" : "no", err, n);
    }
    /* run_name: a name for reporting services; transformers 4 wrote output_dir there */
    if (!strcmp(key, "run_name"))
        return !*v || !strcmp(v, c->output_dir)
                   ? 1
                   : ut_errorf(err, n, "%s: a utrain run is named by experiment_name (also its directory, "
                                       "output_dir/experiment_name); write experiment_name: %s", key, v);
    if (!strncmp(key, "push_to_hub_", 12)) return 1; /* transformers 4's spellings of hub_* */
    if (!strcmp(key, "resume_from_checkpoint")) return resume(c, key, v, err, n);
    if (!strcmp(key, "lr_scheduler_type")) return scheduler(c, v, err, n);
    if (!strncmp(key, "lr_scheduler_kwargs.", 20)) return scheduler_kwarg(c, key, v, err, n);
    if (!strcmp(key, "lr_scheduler_kwargs"))
        return !*v || !strcmp(v, "{}") ? 1 : ut_errorf(err, n, "%s: a mapping of the schedule's arguments "
                                                             "(lr_scheduler_kwargs: {min_lr: 1e-6})", key);
    if (!strcmp(key, "logging_strategy")) return logging_strategy(c, key, v, err, n);
    if (!strcmp(key, "dataloader_num_workers")) return workers(key, v, err, n);
    if ((!strcmp(key, "optim") || !strcmp(key, "optim.name")) && hf_optim(v))
        return assign(c, "optim.name", hf_optim(v), err, n);
    if (!strcmp(key, "optim") && (!strcmp(v, "lion_8bit") || !strcmp(v, "paged_lion_8bit")))
        return ut_errorf(err, n, "%s: '%s': utrain keeps Lion's state in 32 bits; write optim: lion_32bit "
                                 "(or optim.name: lion)", key, v);
    /* applied now when optim is sgd already, again after a file's other keys
     * (config_yaml.c: they win over weight_decay, as in transformers) */
    if (!strcmp(key, "optim_args")) {
        if (strlen(v) >= sizeof c->hf_optim_args)
            return ut_errorf(err, n, "%s: longer than %zu characters", key, sizeof c->hf_optim_args - 1);
        snprintf(c->hf_optim_args, sizeof c->hf_optim_args, "%s", v);
        c->hf_optim_args_done = false;
        if (!*v || strcmp(c->optim_name, "sgd")) return 1;
        return ut_cfg_hf_optim_args(c, err, n) ? -1 : 1;
    }
    if (!strcmp(key, "ddp_backend")) return ddp_backend(c, key, v, err, n);
    if (!strcmp(key, "eval_accumulation_steps")) return eval_accumulation(key, v, err, n);
    if (!strcmp(key, "half_precision_backend")) {
        if (!strcmp(v, "auto") || !strcmp(v, "cpu_amp")) return 1;
        return ut_errorf(err, n, "%s: '%s': utrain's mixed precision is its own autocast on every device "
                                 "(train.precision); write auto or remove the key", key, v);
    }
    return 0;
}

const char *const ut_cfg_hf_doc =
    "### Hugging Face TrainingArguments\n\n"
    "A file of `TrainingArguments` fields (the YAML or JSON that `HfArgumentParser` reads,\n"
    "or the whole `to_json_string()` of a run's arguments, every field included) loads as\n"
    "the Trainer reads it. A field that is `null` (None) keeps utrain's default. A file that\n"
    "names a field only `TrainingArguments` has (`per_device_train_batch_size`,\n"
    "`num_train_epochs`, `max_grad_norm`, `lr_scheduler_type`, `logging_steps`, `save_steps`,\n"
    "`eval_steps`, `evaluation_strategy`, `do_train`, `remove_unused_columns`,\n"
    "`metric_for_best_model`, `report_to`, ...) trains with `TrainingArguments`' defaults where\n"
    "it says nothing, as the Trainer does: `optim.lr: 5e-5`, `optim.weight_decay: 0`,\n"
    "`optim.schedule: linear`, `train.grad_clip: 1.0`, `train.epochs: 3` (unless it gives\n"
    "`max_steps`), `train.batch_size: 8`, `train.eval_batch_size: 8`, `train.eval_strategy: no`,\n"
    "`train.log_interval: 500` (and `train.eval_interval` the same when it evaluates every `steps`\n"
    "without `eval_steps`), a checkpoint every 500 steps, `train.load_best_at_end: false` (the\n"
    "run's model is its last checkpoint, as `load_best_model_at_end` defaults to false) and, when it warms up,\n"
    "transformers' warmup (`optim.warmup_from_zero`: from rate 0, over `warmup_ratio` x steps\n"
    "rounded up). A key it sets, by name or through another field (`logging_strategy: no`),\n"
    "stays; the run's summary names the defaults applied. These defaults follow the file: a\n"
    "`--set` on the command line changes the one key it names (a field given there does not\n"
    "bring them to a file of utrain's own keys). Seed 002's\n"
    "`TrainingArguments(\"basic-trainer\", per_device_train_batch_size=64,\n"
    "per_device_eval_batch_size=64, num_train_epochs=1, evaluation_strategy=\"epoch\",\n"
    "remove_unused_columns=False)` written as YAML therefore trains as it does there. Besides\n"
    "the aliases above, these fields are read:\n\n"
    "| field | value | becomes |\n|---|---|---|\n"
    "| `fp16`, `bf16` | false / true | nothing / `train.precision: fp16`, `bf16` |\n"
    "| `tf32` | false / true | `train.tf32` (TF32 products on `device: cuda`; refused on the others) |\n"
    "| `gradient_checkpointing` | false / true | `train.checkpoint_activations` |\n"
    "| `label_smoothing_factor` | eps | `train.label_smoothing` |\n"
    "| `neftune_noise_alpha` | alpha | `train.neftune_alpha` (NEFTune's noise on the token embeddings in training) |\n"
    "| `logging_first_step` | false / true | `train.log_first_step` |\n"
    "| `metric_for_best_model` | a metric (`accuracy`, `eval_accuracy`, `loss`, `f1`, `eval_matthews_correlation`, ...) | `train.best_metric: dev/accuracy` (`eval_` dropped; `f1`, `matthews_correlation` and the other `train.metrics` scores are then computed at each evaluation, docs/training.md); `greater_is_better` follows it unless given (lower is better for a loss or a perplexity) |\n"
    "| `load_best_model_at_end` | true / false | nothing: the run's model is its best checkpoint / `train.load_best_at_end: false`: its last (`do_predict`, `utrain test`, `generate` and `export` take it) |\n"
    "| `warmup_steps` | N / a fraction in (0, 1) | `optim.warmup_steps` / `optim.warmup_ratio` (transformers 5 reads such a value as a ratio of the steps) |\n"
    "| `include_num_input_tokens_seen` | `no`, `all`, `non_padding`, false / true | `train.count_input_tokens` (false: `no`, true: `all`) |\n"
    "| `report_to` | `tensorboard`, `all`, `none`, `[]` / others | nothing: the run writes its TensorBoard event files and `metrics.jsonl` and reports to no service / refused |\n"
    "| `num_train_epochs` | 3.0, 2.5 | `train.epochs` (a fraction trains ceil(epochs x steps per epoch) steps, as the Trainer counts them) |\n"
    "| `max_steps` | -1 / N | nothing (the epochs decide) / `train.max_steps` |\n"
    "| `eval_delay` | N | `train.eval_delay` (no evaluation before step N, or epoch N with `eval_strategy: epoch`) |\n"
    "| `train_sampling_strategy` | `random` / `sequential` / `group_by_length` / others | `data.shuffle: true` / `false` / `data.group_by_length: true` / refused |\n"
    "| `fsdp` | `full_shard`, `shard_grad_op`, `hybrid_shard`, `hybrid_shard_zero2`, `no_shard` with `auto_wrap` / `offload` | `dist.strategy: zero3`, `zero2`, zero3 and zero2 within each node (`dist.shard_size: -1`, replicated across nodes), `ddp` (utrain shards every parameter: no wrapping policy) / refused |\n"
    "| `activation_checkpointing` | false / true | nothing / `train.checkpoint_activations` |\n"
    "| `ddp_bucket_cap_mb` | N | `dist.bucket_mb` |\n"
    "| `average_tokens_across_devices` | true / false | nothing: utrain averages the loss over the target tokens of the whole window on every rank (a label per example for classification) / refused |\n"
    "| `enable_jit_checkpoint`, `batch_eval_metrics`, `dataloader_persistent_workers`, `ddp_static_graph`, `ddp_broadcast_buffers` | true / false | nothing either way: utrain always checkpoints at a stop signal, accumulates its metrics batch by batch, loads on one thread, has a static graph and no buffers besides the parameters |\n"
    "| `gradient_checkpointing_kwargs.use_reentrant`, `fp16_opt_level`, `ray_scope`, `hub_*` | any | nothing: how torch recomputes (the values are the same); apex's level, hyper-parameter search's scope and the Hub's settings serve features utrain refuses |\n"
    "| `optim_args` | `momentum=0.9,dampening=0,weight_decay=0.01,nesterov=True` with `optim: sgd` / anything with another optimizer | `optim.momentum`, `optim.dampening`, `optim.weight_decay` (over `weight_decay`), `optim.nesterov`, as transformers' Trainer reads them for SGD / refused (transformers reads none for the others; utrain's optim.* keys set them) |\n"
    "| `optim_target_modules`, `torch_compile_backend`, `torch_compile_mode`, `liger_kernel_config`, `torch_empty_cache_steps`, `trackio_*`, `include_for_metrics`, `parallelism_config`, `dataloader_multiprocessing_context`, `label_names`, `debug`, `tpu_num_cores`, `mp_parameters`, `torchdynamo`, `activation_checkpointing_kwargs`, `gradient_checkpointing_kwargs`, `accelerator_config` | null (or empty) / a value | nothing / refused, saying why |\n"
    "| `use_liger_kernel`, `use_cache`, `prediction_loss_only`, `eval_use_gather_object`, `include_inputs_for_metrics`, `save_on_each_node`, `ignore_data_skip`, `restore_callback_states_from_checkpoint`, `jit_mode_eval`, `use_ipex`, `tpu_metrics_debug`, `use_mps_device` | false / true | nothing / refused, saying why |\n"
    "| `log_on_each_node`, `logging_nan_inf_filter`, `eval_do_concat_batches`, `dataloader_in_order`, `skip_memory_metrics` | true / false | nothing: what utrain does / refused |\n"
    "| `log_level`, `log_level_replica`, `project`, `length_column_name`, `local_rank`, `past_index`, `fp16_backend` | their defaults (`passive`, `warning`, `huggingface`, `length`, -1, -1, `auto`) / others | nothing / refused |\n"
    "| `accelerator_config.*` | their defaults (`split_batches: false`, `even_batches: true`, `use_seedable_sampler: true`, `non_blocking`) / others | nothing / refused |\n"
    "| `fsdp_config` (a mapping, or a JSON file of one; each option with or without its `fsdp_` prefix) | `transformer_layer_cls_to_wrap` (any classes), `auto_wrap_policy` / `activation_checkpointing`, `reshard_after_forward` / `backward_prefetch`, `forward_prefetch`, `limit_all_gathers`, `cpu_ram_efficient_loading`, `state_dict_type` / `use_orig_params`, `sync_module_states`, `version` / `min_num_params` > 0, `offload_params: true`, `xla*: true` | `dist.wrap: block` (utrain's units are the transformer blocks; `NO_WRAP`: `model`) / `train.checkpoint_activations`, `dist.reshard_after_forward` / named in the run's summary as tuning that changes nothing (utrain prefetches the next unit both ways, holds at most three, writes one whole checkpoint from the shards) / nothing (utrain's parameters are views of its flat buffers; every rank builds the same weights) / refused, saying what to write |\n"
    "| `logging_strategy` | `steps` / `epoch` / `no` | nothing (`logging_steps` is the interval) / `train.log_steps_ratio: 1` / `train.log_interval: 0` |\n"
    "| `resume_from_checkpoint` | true / empty, false / a path | `continue_training: true` / nothing / refused (`load_dir: PATH` starts a new run from those weights) |\n"
    "| `overwrite_output_dir` | false / true | nothing: a new run where checkpoints are is refused / refused (utrain never overwrites checkpoints) |\n"
    "| `use_cpu`, `no_cuda` | true / false | `device: cpu` / nothing (the `device` key says where) |\n"
    "| `optim` | `adamw_torch`, `adamw_torch_fused`, `adamw_hf`, `adamw_apex_fused` / `lion_32bit`, `paged_lion_32bit` / `adafactor` / `sgd` / `lion_8bit`, `paged_lion_8bit` | `optim.name: adamw` (one pass over the flat buffers on every device) / `lion` (bitsandbytes' 32-bit Lion: the same update; betas from `adam_beta1`, `adam_beta2` as the Trainer passes them) / `adafactor` as the Trainer builds it (transformers' Adafactor, `optim.adafactor_scale_parameter: false`, no relative step; a file of TrainingArguments sets it) / `sgd` / refused (utrain keeps Lion's state in 32 bits); others are refused |\n"
    "| `lr_scheduler_type` | `linear`, `cosine`, `constant`, `polynomial`, `inverse_sqrt` / `constant_with_warmup` / `cosine_with_min_lr` / `cosine_with_restarts` / `warmup_stable_decay` / `reduce_lr_on_plateau` / `greedy` | `optim.schedule` of the same name / `constant` (after `warmup_steps`) / `cosine` (down to `optim.min_lr` or `optim.min_lr_ratio`) / `cosine_restarts` / `wsd` / `plateau` with `optim.plateau_mode: min` (torch's default, whatever the metric, unless `lr_scheduler_kwargs` gives `mode`) and no warmup, stepped by each evaluation's `metric_for_best_model` (`train.best_metric`, `eval_loss` unless given) as the Trainer does / `greedy` (GreedyLR) the same way, with `optim.greedy_mode: min` and GreedyLR's floor `optim.min_lr: 1e-3` unless the kwargs give `mode` or `min_lr`; `polynomial` ends at 1e-7 (its `lr_end`) unless given. A file of these fields warms up as transformers' schedules do, from rate 0 (`optim.warmup_from_zero`, the defaults above; utrain's own warmup is a step ahead), and `constant` in such a file takes no warmup, as transformers' ignores `warmup_steps` there (utrain's own `constant` warms up when they are given) |\n"
    "| `lr_scheduler_kwargs` | `{}` / `min_lr`, `lr_end` / `min_lr_rate`, `min_lr_ratio` / `num_cycles` / `power` / `timescale` / `num_decay_steps` / `decay_type` / `warmup_type: linear` / ReduceLROnPlateau's and GreedyLR's `mode`, `factor`, `patience`, `threshold`, `threshold_mode`, `cooldown`, `eps` / GreedyLR's `warmup`, `max_lr`, `smooth`, `window_size`, `reset_start` / `verbose` / others | nothing / `optim.min_lr` / `optim.min_lr_ratio` / `optim.num_cycles` / `optim.power` / `optim.timescale` / `optim.decay_steps` / `optim.decay_type` / nothing / `optim.plateau_mode`, `optim.plateau_factor`, ... (the same names), or with `greedy` `optim.greedy_mode`, ... / `optim.greedy_warmup`, ... (the same names) / nothing (utrain logs every change of the rate) / refused (`num_stable_steps`: wsd's stable phase is what warmup and decay leave) |\n"
    "| `disable_tqdm` | true / false | `train.progress: lines` / nothing (a bar on a terminal) |\n"
    "| `dataloader_drop_last` | false / true | `data.drop_last` |\n"
    "| `dataloader_num_workers` | N | nothing: each process reads its batches ahead on one background thread, whatever N |\n"
    "| `dataloader_prefetch_factor` | N | `data.prefetch` (batches read ahead) |\n"
    "| `ddp_backend` | `nccl` / `gloo`, `mpi` / empty | `dist.device_comm: direct` / `dist.device_comm: host` / nothing (others are refused) |\n"
    "| `do_train` | true / false | nothing / `mode: test` (`utrain CFG` tests the run's best checkpoint) |\n"
    "| `do_eval` | true / false | nothing: training evaluates on dev as `eval_strategy` says, and test mode evaluates dev too |\n"
    "| `do_predict` | true / false | `train.test_at_end: true` (after training, the dev and test splits as `utrain test`) / nothing |\n"
    "| `ddp_find_unused_parameters` | true / false | nothing: the gradient buckets always hold every parameter, one no loss reached gets zeros |\n"
    "| `remove_unused_columns` | true / false | nothing: the loaders read the columns the `data.*` keys name and the model gets exactly its inputs |\n"
    "| `full_determinism` | true / false | nothing: the same seed gives the same bits on the same machine and thread count (docs/training.md) |\n"
    "| `save_safetensors` | true / false | nothing: checkpoints are safetensors files / refused |\n"
    "| `save_only_model` | false / true | `train.save_only_model` (checkpoints of the weights alone; no run resumes from them, a stop signal's excepted) |\n"
    "| `eval_on_start` | false / true | `train.eval_on_start` (an evaluation before the first step; not a best, never stops the run) |\n"
    "| `bf16_full_eval`, `fp16_full_eval` | false / true | nothing / `train.eval_precision: bf16`, `fp16` (evaluation and test under that autocast; the weights stay float32, norms and losses in float32) |\n"
    "| `half_precision_backend` | `auto`, `cpu_amp` / `apex` | nothing: utrain's own autocast on every device / refused |\n"
    "| `eval_accumulation_steps` | N / 0 | nothing: evaluation moves each batch's metrics and predictions to host memory as it goes / refused |\n"
    "| `dataloader_pin_memory` | true / false | nothing: batches are read ahead into page-locked memory on a GPU / refused |\n"
    "| `torch_compile`, `push_to_hub` | false / true | nothing / refused, saying what to write |\n"
    "| `adafactor` | false / true | nothing / `optim.name: adafactor` (transformers 4's switch for `optim: adafactor`) |\n"
    "| `logging_steps`, `eval_steps`, `save_steps` | N / a fraction under 1 | the intervals (aliases above) / `train.log_steps_fraction`, `train.eval_steps_fraction`, `train.save_steps_fraction`: every ceil(fraction x the run's optimizer steps) steps, as the Trainer computes them |\n"
    "| `logging_dir` | a directory | `train.logging_dir` (TensorBoard's event files there instead of `RUN/tensorboard`) |\n"
    "| `run_name` | empty, `output_dir`'s value (transformers 4's default) / another | nothing / refused (`experiment_name` names the run) |\n"
    "| `sortish_sampler` (Seq2Seq) | false / true | nothing / `data.group_by_length: true` (transformers' length grouping, not the sortish sampler's chunking) |\n"
    "| `generation_max_length` (Seq2Seq) | N | `generate.max_new_tokens: N - 1` (the length counts the decoder's start token); `generation_num_beams` is `generate.num_beams`, `predict_with_generate` `generate.eval` |\n"
    "| transformers 4's `per_gpu_*_batch_size`, `sharded_ddp`, `fsdp_min_num_params`, `fsdp_transformer_layer_cls_to_wrap`, `dispatch_batches`, `split_batches`, `include_tokens_per_second`, `use_legacy_prediction_loop`, `push_to_hub_*` | their defaults | nothing (`include_tokens_per_second`: the train lines give `tokens_per_s` for token data either way) / others refused, saying what to write |\n"
    "| the example scripts' (`run_glue`, `run_classification`, `run_summarization`, ...) `model_name_or_path`, `tokenizer_name`, `train_file`, `validation_file`, `test_file`, `max_seq_length`, `max_train_samples`, `max_eval_samples`, `max_predict_samples`, `ignore_mismatched_sizes` | a local directory, a file, N | `model.pretrained`, `data.tokenizer`, `data.train_path`, `data.dev_path`, `data.test_path` (TSV, CSV or JSON Lines), `data.max_len`, `data.max_train_samples`, `data.max_eval_samples`, `data.max_predict_samples`, `model.ignore_mismatched_sizes` (aliases above), so the scripts' own argument file (`python run_glue.py args.json`) loads |\n"
    "| `cache_dir`, `overwrite_cache`, `preprocessing_num_workers`, `pad_to_max_length`, `low_cpu_mem_usage`, `shuffle_train_dataset` | any | nothing: utrain downloads nothing, caches nothing, tokenizes at open, pads each batch to its longest example (padding never changes the results), loads the weights as they are, and shuffles every epoch by the seed |\n"
    "| `text_column_names`, `text_column_delimiter`, `label_column_name` (run_classification) | column names, a text | `data.text_column`, `data.text_column_delimiter`, `data.label_column` ([data.md](data.md#columns-of-other-names)) |\n"
    "| `metric_name`, `shuffle_seed`, `remove_columns` (run_classification) | accuracy, mse, f1, precision, recall, matthews_correlation / any | `train.metrics` (accuracy is always computed, a regression's mean squared error is its loss) / nothing: the sampler shuffles every epoch by `data.seed`, and only the text and label columns are read |\n"
    "| `remove_splits`, `train_split_name`, `validation_split_name`, `test_split_name` | null (the split names: theirs) / others | nothing / refused: the files name the splits |\n"
    "| `do_regression` (run_classification) | null / true / false | the labels decide (real numbers: a regression, [data.md](data.md#scores-regression-sts-b)) / `model.problem_type: regression` / never a regression |\n"
    "| `text_column`, `summary_column` (run_summarization); `source_lang`, `target_lang` (run_translation) | column names; language codes | `data.source_field`, `data.target_field`; `translation.<lang>` for each (the keys of the `{\"translation\": {\"en\": ..., \"ro\": ...}}` lines run_translation reads) |\n"
    "| `val_max_target_length`, `ignore_pad_token_for_loss`, `lang`, `forced_bos_token`, `resize_position_embeddings` | null, true, null, null, false / others | nothing / refused, saying why (every split's targets are cut to `max_target_length`, whose padding never counts; mBART's language tokens; the checkpoint's position embeddings) |\n"
    "| `use_fast_tokenizer`, `model_revision`, `token`, `use_auth_token`, `trust_remote_code`, `config_name` | true, `main`, null, null or false, false, null / others | nothing / refused, saying why (utrain reads local directories and its own models) |\n"
    "| `task_name`, `dataset_name`, `dataset_config_name` | null / a name | nothing / refused: they load from the Hugging Face Hub; `train_file` and `validation_file` name local files (GLUE's own TSV files, or a datasets `to_csv` / `to_json` of the task) |\n"
    "| `mlm_probability`, `line_by_line` (run_mlm) | a share in (0, 1); true / false | `data.mlm_probability`, `data.line_by_line`; either (or `validation_split_percentage`) makes `train_file` texts for a masked language model (`data.name: mlm_text`, [data.md](data.md#masked-language-modeling-texts-to-fill-in)) |\n"
    "| `block_size`, `keep_linebreaks` (run_clm) | a count; true / false | `data.seq_len` (each block's tokens), `data.keep_linebreaks`; either makes `train_file` texts for a causal language model (`data.name: clm_text`, [data.md](data.md#causal-language-modeling-texts-to-continue)) |\n"
    "| `model_type`, `config_overrides` (run_mlm, run_clm from scratch) | bert, roberta, gpt2, bart, t5; `\"n_embd=10,resid_pdrop=0.2\"` | `model.name`; `model.n_embd: 10`, ... (config.json's names, each a model key; GPT-2's `n_positions` / `n_ctx` as `model.block_size`, `resid_pdrop`, `embd_pdrop`, `attn_pdrop` as its one `model.dropout`, refused when they differ); refused beside `model_name_or_path`, as the scripts refuse it |\n"
    "| `validation_split_percentage` (run_mlm) | a percentage | `data.dev_fraction` (its hundredth): without `validation_file`, that share of the examples is the dev set (run_mlm takes the first lines of the file, utrain the last examples) |\n"
    "| `task_name` (run_ner) | `ner` / `pos`, `chunk` | `data.name: tagged_text` (the tags under `ner_tags`, else each object's second key) / the same with `data.label_column: pos_tags` (`chunk_tags`) unless `label_column_name` says |\n"
    "| `text_column_name`, `label_column_name`, `label_all_tokens` (run_ner) | a key; true / false | `data.text_column`, `data.label_column` (the words' and the tags' JSON keys), `data.label_all_tokens`; `text_column_name`, `label_all_tokens`, `return_entity_level_metrics` or run_ner's `task_name` make `train_file` tagged text (`data.name: tagged_text`, [data.md](data.md#token-classification-words-and-their-tags)) |\n"
    "| `return_entity_level_metrics` (run_ner) | false / true | `train.entity_metrics`: each evaluation reports the overall precision, recall, f1 and accuracy / and each entity type's precision, recall and f1 |\n\n";
