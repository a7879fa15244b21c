/* utrain run configuration: one schema table drives defaults, YAML loading,
 * --set overrides, validation, docs/config.md and the resolved config.yml.
 * defines: ut_config, ut_config_* (init, load, set, validate, write, hash,
 *          free), ut_config_doc_markdown. */
#ifndef UTRAIN_CONFIG_H
#define UTRAIN_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "utrain/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UT_CFG_STR_MAX 512

/* One of another trainer's defaults that loading a file of its arguments
 * applied: the key, its value then (as ut_cfg_format writes it) and what it
 * stands for in that trainer's words. */
enum { UT_CFG_DEFAULTS_HF = 1, UT_CFG_DEFAULTS_FLAGAI = 2 };
#define UT_CFG_MAX_DEFAULTS 24
typedef struct {
    int which;                   /* UT_CFG_DEFAULTS_HF or _FLAGAI */
    char key[40], value[40], what[96];
} ut_cfg_default;

typedef struct {
    /* ---- run ---- */
    char experiment_name[128];   /* run directory name under output_dir */
    char output_dir[UT_CFG_STR_MAX];
    char mode[8];                /* train | test */
    bool continue_training;      /* resume from the newest valid checkpoint */
    char load_dir[UT_CFG_STR_MAX]; /* a run directory to load weights from ("" = none) */
    char load_type[8];           /* best | latest: which checkpoint of load_dir's run */
    int64_t seed;
    int threads;                 /* 0 = OpenMP default */
    char device[16];             /* cpu | sim (the simulated device); cuda, cuda:N refused until the trainer runs there */
    bool device_from_env;        /* device is UTRAIN_DEVICE's (no device key was given) */

    /* ---- model ---- */
    char model_name[64];         /* model.name: a registry name */
    ut_kv *model_opts;           /* every other model.* key, checked by the model */

    /* ---- data ---- */
    char data_name[32];          /* idx_images | tokens | tsv_text | seq2seq_text */
    char train_images[UT_CFG_STR_MAX], train_labels[UT_CFG_STR_MAX];
    char dev_images[UT_CFG_STR_MAX], dev_labels[UT_CFG_STR_MAX];
    char test_images[UT_CFG_STR_MAX], test_labels[UT_CFG_STR_MAX];
    int64_t dev_size;            /* idx_images: carve the last N train examples as dev when no dev file */
    double dev_fraction;         /* text data: carve this last fraction of the train examples as dev (0: none) */
    double mean, std;            /* image normalisation: (x/255 - mean) / std */
    char train_path[UT_CFG_STR_MAX], dev_path[UT_CFG_STR_MAX], test_path[UT_CFG_STR_MAX];
    int64_t seq_len;             /* tokens: sequence length T */
    char tokenizer[UT_CFG_STR_MAX]; /* tsv_text: word | byte | a pretrained tokenizer directory */
    int64_t max_len;             /* tsv_text: pad/truncate to this many tokens */
    int64_t min_freq;            /* tsv_text word vocabulary: minimum count */
    bool shuffle, drop_last;
    bool group_by_length;        /* training batches of similar lengths (transformers' LengthGroupedSampler) */
    int64_t max_train_samples, max_eval_samples, max_predict_samples; /* the first N examples of train, dev and
                                                                       * test only (0: all) */
    int64_t data_seed;           /* the training order's seed; -1: seed's */
    int prefetch;                /* batches the loader prepares ahead */
    /* seq2seq_text: the target files beside parallel source files (FlagAI's
     * train_inputs.txt / train_targets.txt); empty: train_path etc. are TSV
     * or JSON Lines holding both texts */
    char train_target_path[UT_CFG_STR_MAX], dev_target_path[UT_CFG_STR_MAX], test_target_path[UT_CFG_STR_MAX];
    int64_t max_source_len, max_target_len; /* seq2seq_text: truncate to these many tokens */
    char source_field[64], target_field[64]; /* seq2seq_text: TSV columns / JSON keys */
    char source_prefix[UT_CFG_STR_MAX];     /* seq2seq_text: prepended to every source */
    bool lowercase;              /* seq2seq_text: lower-case both texts */
    bool label_all_tokens;       /* tagged_text: every piece of a word carries its tag */
    double mlm_probability;      /* mlm_text: the share of the tokens masked */
    bool line_by_line;           /* mlm_text: each line an example (else blocks of max_len) */
    bool keep_linebreaks;        /* clm_text: a text file's lines keep their line ends */
    bool hf_mlm;                 /* a Hugging Face argument file of run_mlm's (validation_split_percentage) */
    double hf_val_split;         /* its validation_split_percentage / 100 (0: none) */
    bool hf_overrides;           /* a Hugging Face argument file's config_overrides were applied */
    /* tsv_text: the columns of an example (ut_text_columns); empty: found by name */
    char text_column[UT_CFG_STR_MAX], text_pair_column[64], label_column[64], text_column_delimiter[64];

    /* ---- generate: evaluation by generation and `utrain generate` ---- */
    bool gen_eval;               /* generate.eval: dev/test evaluation also generates (bleu, rougeL, exact_match) */
    int64_t gen_max_new_tokens, gen_min_new_tokens, gen_num_beams, gen_no_repeat_ngram_size, gen_top_k;
    int64_t gen_num_return_sequences; /* texts per source in `utrain generate` (evaluation scores the first) */
    double gen_length_penalty, gen_temperature, gen_top_p;
    char gen_early_stopping[8];  /* false | true | never */
    bool gen_do_sample;

    /* ---- train ---- */
    double epochs;               /* passes over the training set; a fraction ends inside the last */
    int64_t max_steps;           /* > 0 overrides epochs */
    int64_t batch_size;          /* per process */
    bool auto_find_batch_size;   /* out of memory before the first checkpoint: start again at half the batch */
    int64_t eval_batch_size;     /* 0 = batch_size */
    int64_t gradient_accumulation_steps;
    int64_t log_interval;
    double log_steps_ratio, save_steps_ratio;  /* > 0: ratio times per epoch (steps per epoch / ratio) */
    /* in (0, 1): an interval of ceil(fraction x the run's optimizer steps),
     * transformers' logging_steps / eval_steps / save_steps under 1 */
    double log_steps_fraction, eval_steps_fraction, save_steps_fraction;
    char eval_strategy[8];       /* no | steps | epoch */
    int64_t eval_interval;
    char save_strategy[8];       /* no | steps | epoch */
    int64_t save_interval, save_total_limit;
    bool save_only_model;        /* checkpoints without the optimizer state (a stop signal's excepted) */
    char best_metric[64];        /* e.g. dev/accuracy, dev/loss */
    char metrics[UT_CFG_STR_MAX]; /* classification scores beside accuracy: f1, matthews_correlation, ... */
    bool entity_metrics;          /* tagged_text: each entity type's precision, recall and f1 too */
    bool greater_is_better;
    bool model_name_set;         /* given by the user; until then model.pretrained's
                                    config.json model_type (bert, gpt2, bart) names
                                    the model; not a key of its own */
    bool greater_is_better_set;  /* given by the user; until then greater_is_better
                                    follows best_metric (false for names ending in
                                    "loss" or "perplexity", true otherwise); not a
                                    key of its own */
    bool eval_strategy_set, save_strategy_set;  /* given by the user; until then a
                                    positive eval_interval / save_interval makes
                                    the strategy steps; not keys of their own */
    bool min_lr_set;             /* optim.min_lr given by the user (transformers'
                                    polynomial schedule ends at 1e-7 until then) */
    char ds_tuning[400];         /* the deepspeed_config keys of DeepSpeed's own tuning that change nothing
                                    in utrain (listed in the run's summary); not a key */
    ut_cfg_default defaults[UT_CFG_MAX_DEFAULTS]; /* another trainer's defaults a file of its arguments
                                    took (ut_config_defaults_text); not keys */
    int ndefaults;
    bool hf_constant;            /* lr_scheduler_type: constant or reduce_lr_on_plateau (transformers' take
                                    no warmup); not a key */
    bool hf_classify;            /* do_regression: false (run_classification): labels that are real numbers
                                    do not make a regression; not a key */
    bool hf_tagged;              /* run_ner's task_name (ner, pos, chunk) was given: its train_file is
                                    tagged text; not a key */
    char flagai_env[16];         /* FlagAI's env_type as given (empty: none); not a key */
    char flagai_tb[512];         /* FlagAI's tensorboard_dir (train.logging_dir is it/experiment_name);
                                    not a key */
    char seed_recipe[320];       /* what loading a file in the seed's parameters.yml layout
                                    set to the seed's recipe (the keys the file left out),
                                    for the run summary; empty otherwise; not a key */
    bool one_process;            /* the seed's is_distributed: False (one process,
                                    DataParallel over its gpus); not a key of its own */
    unsigned seed_sharding;      /* the seed's fairscale flags true in the file being
                                    loaded: 1 optimizer sharding, 2 model sharding */
    double grad_clip;            /* 0 = off */
    bool checkpoint_activations;
    bool test_at_end;            /* after training, test the best checkpoint (utrain test) */
    bool log_first_step;         /* also log the run's first optimizer step */
    bool eval_on_start;          /* evaluate before the first step (not counted as best) */
    double eval_delay;           /* no evaluation before this step / epoch */
    bool load_best_at_end;       /* the run's model is its best checkpoint (else its last) */
    char eval_precision[8];      /* auto | fp32 | bf16 | fp16: autocast while evaluating */
    char precision[8];           /* fp32 | bf16 | fp16 (autocast; fp16 adds loss scaling) */
    bool tf32;                   /* cuda: float32 products on the TF32 tensor cores */
    double peak_tflops;          /* the MFU's denominator per rank (0: the device's) */
    int64_t profile_step;        /* profile the step after this many (-1: none) */
    bool wall_clock_breakdown;   /* time forward, backward, reduction, step per log interval */
    bool profile_detailed;       /* ... with every op's line */
    char profile_file[UT_CFG_STR_MAX]; /* ... into this file ("": the console and run log) */
    double label_smoothing;      /* the losses' label smoothing eps (0: none) */
    double neftune_alpha;        /* NEFTune's noise on the token embeddings (0: none) */
    char count_input_tokens[12]; /* no | all | non_padding: log num_input_tokens_seen */
    double init_scale;           /* fp16: the loss scale to start from (GradScaler's init_scale) */
    int64_t growth_interval;     /* fp16: clean steps before the scale doubles */
    int64_t loss_scale_hysteresis;  /* fp16: overflows tolerated before backing off (DeepSpeed) */
    bool consecutive_hysteresis; /* fp16: any clean step restores the hysteresis */
    double min_loss_scale;       /* fp16: the scale's floor (0: none) */
    int64_t early_stopping_patience;  /* evaluations without improvement; 0 = off */
    double early_stopping_threshold;
    char progress[8];            /* auto | bar | lines | off */
    char logging_dir[UT_CFG_STR_MAX]; /* TensorBoard's directory ("": RUN/tensorboard) */

    /* ---- optim ---- */
    char optim_name[16];         /* adamw | sgd | lion | adafactor */
    double lr, weight_decay, beta1, beta2, eps, momentum, dampening;
    bool nesterov;
    double adafactor_beta1, adafactor_eps1, adafactor_eps2, adafactor_clip, adafactor_decay_rate;
    bool adafactor_scale_parameter, adafactor_relative_step, adafactor_warmup_init;
    char hf_optim_args[256];     /* TrainingArguments' optim_args as given ("": none); not a key */
    bool hf_optim_args_done;     /* applied to optim.* (transformers reads them for optim: sgd) */
    char schedule[24];           /* constant | cosine | linear | step | cosine_restarts | polynomial |
                                    inverse_sqrt | wsd | ds_warmup | ds_warmup_decay | ds_warmup_cosine |
                                    annealing | plateau | greedy */
    int64_t warmup_steps, step_size;
    double warmup_ratio;         /* > 0: warmup over ratio x total steps */
    double min_lr, gamma;
    double min_lr_ratio;         /* > 0: min_lr = ratio x lr */
    double num_cycles, power;    /* cosine's waves or restarts' cycles (0: default); polynomial's power */
    int64_t timescale;           /* inverse_sqrt (0: warmup_steps or 10000) */
    int64_t decay_steps;         /* wsd: the steps of its decay */
    char decay_type[8];          /* wsd: cosine | linear | 1-sqrt */
    int64_t schedule_steps;      /* the decay's horizon (0: the run's steps) */
    char warmup_type[8];         /* ds_*: linear | log */
    double warmup_min_ratio;     /* ds_warmup_cosine: the warmup's start x lr */
    char schedule_on_skip[8];    /* fp16 steps skipped for inf/NaN gradients: hold | advance the schedule */
    bool warmup_from_zero;       /* transformers' warmup: lr x step / warmup (the first step at 0) */
    char plateau_mode[8];        /* plateau: auto | min | max */
    char plateau_threshold_mode[8]; /* plateau: rel | abs */
    double plateau_factor, plateau_threshold, plateau_eps;
    int64_t plateau_patience, plateau_cooldown;
    char greedy_mode[8];         /* greedy (GreedyLR): auto | min | max */
    char greedy_threshold_mode[8]; /* greedy: abs | rel */
    double greedy_factor, greedy_threshold, greedy_eps, greedy_max_lr;
    int64_t greedy_patience, greedy_cooldown, greedy_warmup, greedy_window_size, greedy_reset_start;
    bool greedy_smooth;          /* greedy: judge the average of the last greedy_window_size metrics */

    /* ---- dist ---- */
    char dist_strategy[16];      /* ddp | zero1 | zero2 | zero3 (fsdp) | dp */
    int64_t tensor_parallel;     /* ranks each model is split over (1: whole) */
    bool sequence_parallel;      /* the blocks' norm and dropout regions split by sequence over the tp ranks */
    int64_t pipeline_parallel;   /* pipeline stages (1: none) */
    char pipeline_schedule[8];   /* 1f1b | gpipe */
    char pipeline_blocks[256];   /* blocks per stage, "9,3" (empty: balanced by compute) */
    double bucket_mb;            /* gradient bucket size */
    char dist_wrap[16];          /* zero3 units: block | param | model */
    bool reshard_after_forward;  /* zero3 */
    int shard_size;              /* zero1-3: ranks per shard group (hybrid sharding); 0: all, -1: a node's */
    char offload_optimizer[8];   /* none | cpu: ZeRO-Offload (zero1, zero2) */
    char comm_hook[8];           /* none | bf16 | fp16: compressed gradient all-reduce (ddp, zero1) */
    char device_comm[8];         /* auto | direct | host: collectives on device memory (NCCL) or staged */
    double timeout_s;            /* a collective that takes longer ends every rank */
    int64_t nproc_per_node;      /* processes per node started by `utrain train` (mpirun underneath) */
    int64_t nodes, current_node;
    char master_addr[256];
    int64_t master_port;
    char launcher[8];            /* auto | mpi | tcp: how `utrain train` starts this node's ranks */
} ut_config;

/* Defaults for every key; model_opts is a new empty map. */
void ut_config_init(ut_config *c);
void ut_config_free(ut_config *c);
/* accelerate launch's settings from its environment variables
 * (ACCELERATE_MIXED_PRECISION, ACCELERATE_USE_FSDP with FSDP_*,
 * ACCELERATE_USE_DEEPSPEED with ACCELERATE_DEEPSPEED_*, ...) as the
 * defaults of the keys they mean: call after ut_config_init and before
 * ut_config_load, so the file's keys win. said gets what was applied
 * ("precision bf16, FSDP FULL_SHARD (dist.strategy zero3)"; "" for
 * nothing). 0, or -1 with a message naming the variable. */
int ut_config_accelerate_env(ut_config *c, char *said, size_t sn, char *err, size_t n);
/* Loads a YAML file over the current values. Errors name the file, line and
 * key: "configs/x.yml:12: train.batch_sise: unknown key (did you mean
 * train.batch_size?)". Returns 0 or -1 with err. */
int ut_config_load(ut_config *c, const char *path, char *err, size_t n);
/* Applies "dotted.key=value" (the --set option) with the file's type checks. */
int ut_config_set(ut_config *c, const char *assignment, char *err, size_t n);
/* What the defaults of another trainer (which: UT_CFG_DEFAULTS_HF or
 * _FLAGAI) that loading a file of its arguments applied stand for, those
 * whose keys still hold them (a later --set may have changed one), joined
 * by ", " into buf (n bytes): "" when none. Returns buf. */
const char *ut_config_defaults_text(const ut_config *c, int which, char *buf, size_t n);
/* Cross-key checks (ranges, strategies, metric names); run after load and sets. */
int ut_config_validate(const ut_config *c, char *err, size_t n);
/* The resolved configuration as YAML (every key, model options included). */
int ut_config_write(const ut_config *c, FILE *f);
/* The device key as a device (validated: cpu, sim, cuda, cuda:N). */
ut_device ut_config_device(const ut_config *c);
/* The N of device cuda:N (0 for the others): the first GPU of this node's
 * ranks; the rank of local rank r takes GPU (N + r) mod the node's GPUs. */
int ut_config_device_index(const ut_config *c);
/* Makes this process use the configured device: checks that this machine
 * can run it and, on a machine with several GPUs, picks this rank's GPU
 * (above). Before the model is built; 0, or -1 with the reason in err. */
int ut_config_use_device(const ut_config *c, char *err, size_t n);
/* Hash of the keys that change what training computes (not output_dir, mode,
 * continue_training, threads, log/progress settings, epochs/max_steps). */
uint64_t ut_config_hash(const ut_config *c);
/* docs/config.md, generated from the schema. */
void ut_config_doc_markdown(FILE *f);

#ifdef __cplusplus
}
#endif
#endif
