/* utrain trainer: the training loop, evaluation, checkpoints, logs,
 * TensorBoard, and the hooks that customise them.
 * defines: ut_train_state, ut_ckpt_* (checkpoint files and directories, stale temporaries, written and
 *          read a tensor at a time),
 *          ut_tb_* (TensorBoard event files), ut_hooks, ut_trainer_run,
 *          ut_trainer_test, UT_EXIT_* codes; ut_model_from_config, ut_run_tokenizer,
 *          ut_best_checkpoint, ut_run_checkpoint, ut_gen_opts_from_config (a run's parts, for `utrain generate`). */
#ifndef UTRAIN_TRAIN_H
#define UTRAIN_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "utrain/config.h"
#include "utrain/data.h"
#include "utrain/nn.h"
#include "utrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exit codes of `utrain train` (documented in docs/training.md). */
enum {
    UT_EXIT_OK = 0,
    UT_EXIT_ERROR = 1,       /* bad config, data, checkpoint, or a failure while training */
    UT_EXIT_USAGE = 2,       /* bad command line */
    UT_EXIT_PREEMPTED = 75,  /* SIGTERM/SIGUSR1/SIGINT: checkpoint written, resume with continue_training */
};

/* ---- training state saved in checkpoints ---- */
typedef struct {
    int64_t step;              /* optimizer steps taken */
    int64_t epoch;             /* current epoch (0-based) */
    int64_t cursor;            /* samples of this epoch consumed (global), see ut_sampler */
    uint64_t rng[4];           /* the context's RNG (dropout) */
    double best_metric;        /* best value of train.best_metric so far */
    int64_t best_step;         /* step of that evaluation (-1: none yet) */
    int64_t bad_evals;         /* evaluations since the last improvement (early stopping) */
    uint64_t config_hash;      /* ut_config_hash of the run that wrote it */
    double loss_scale;         /* fp16: the loss scaler's scale (0: no scaler, not saved) */
    int64_t scale_growth_tracker;  /* fp16: its clean steps since the scale changed */
    int64_t scale_hysteresis;      /* fp16 with DeepSpeed's hysteresis: the overflows it still tolerates
                                      before backing off (0: not saved; a hysteresis of 1) */
    int64_t schedule_held;         /* fp16: skipped steps the learning-rate schedule has not counted
                                      (optim.schedule_on_skip: hold); saved when > 0 */
    int64_t input_tokens_seen;     /* train.count_input_tokens: input tokens trained on so far, all ranks;
                                      saved when > 0 */
    int64_t flos_tokens;           /* token data: the input tokens (padding included, as Hugging Face's
                                      floating_point_ops counts them) trained on so far, all ranks, for
                                      train_results.json's total_flos; saved when > 0 */
    bool plateau;                  /* optim.schedule plateau or greedy: the evaluations' rate below (saved
                                      when set) */
    bool greedy;                   /* greedy: its part of the state too (good evaluations, warmup, reset
                                      count, window; saved when set) */
    ut_plateau_state plateau_state;
} ut_train_state;

/* ---- checkpoint files ----
 * A checkpoint is a safetensors file (so Python can read the weights):
 * "model.<param name>" for every parameter, "optim.<state name>" for each
 * optimizer state buffer (flat, covering the whole parameter buffer), and
 * metadata holding the training state, the optimizer step count, the model
 * type and "utrain.checksum": a CRC-32 over every tensor's name, dtype, shape
 * and bytes and every other metadata entry. Writes are atomic (temporary
 * file in the same directory, fsync, rename, fsync of the directory).
 * o may be NULL (weights and training state only). The format is in
 * docs/checkpoints.md. */
int ut_ckpt_save(const char *path, const ut_model *m, ut_optim *o, const ut_train_state *st,
                 char *err, size_t n);
/* Whether path is a checkpoint of the weights alone (train.save_only_model:
 * no optimizer state, so no run resumes from it); false where it does not
 * open. */
bool ut_ckpt_model_only(const char *path);
/* Loads into an already built model (and optimizer, if not NULL) after
 * verifying the checksum and that every name and shape matches. On any error
 * nothing is modified. st may be NULL. */
int ut_ckpt_load(const char *path, ut_model *m, ut_optim *o, ut_train_state *st, char *err,
                 size_t n);
/* The same files a tensor at a time, for models held in parts (tensor and
 * pipeline parallelism), so no process needs the whole model in memory.
 * ut_ckpt_writer_open: the parameters' names and shapes, in the whole
 *   model's order; state: the optimizer's state names comma-separated
 *   ("exp_avg,exp_avg_sq"; "" for plain SGD) or NULL for none. Then
 *   ut_ckpt_writer_put gives every value in file order, in pieces of any
 *   size: each parameter's in order, then for each state its values for
 *   each parameter in order. ut_ckpt_writer_close(commit) seals it (the
 *   checksum) and renames it into place; without commit it removes it. The
 *   file is the one ut_ckpt_save writes for the same values.
 * ut_ckpt_reader_open: checks the format, the checksum (reading the file a
 *   piece at a time), the training state (into st) and the model type (NULL:
 *   any); ut_ckpt_reader_nparams/param_name list the file's parameters;
 *   ut_ckpt_reader_param reads one whole (its shape checked, values finite);
 *   ut_ckpt_reader_optim checks the optimizer state against the names want
 *   and gives its step count; ut_ckpt_reader_state reads one parameter's
 *   segment of a state, ut_ckpt_reader_state_range a range of the flat
 *   buffer. 0, or -1 with err naming the file and the tensor. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[8];
} ut_ckpt_entry;
/* The optimizer's state names as checkpoints record them, comma-separated
 * (AdamW "exp_avg,exp_avg_sq", SGD with momentum "momentum_buffer", plain
 * SGD ""): the writer's state and the reader's want. */
void ut_ckpt_state_names(ut_optim *o, char *buf, size_t n);
typedef struct ut_ckpt_writer ut_ckpt_writer;
ut_ckpt_writer *ut_ckpt_writer_open(const char *path, const char *type, int n, const ut_ckpt_entry *e,
                                    const char *state, int64_t optim_steps, const ut_train_state *st, char *err,
                                    size_t en);
int ut_ckpt_writer_put(ut_ckpt_writer *w, const float *v, int64_t n, char *err, size_t en);
int ut_ckpt_writer_close(ut_ckpt_writer *w, bool commit, char *err, size_t en);
typedef struct ut_ckpt_reader ut_ckpt_reader;
ut_ckpt_reader *ut_ckpt_reader_open(const char *path, const char *type, ut_train_state *st, char *err, size_t n);
int ut_ckpt_reader_nparams(const ut_ckpt_reader *r);
const char *ut_ckpt_reader_param_name(const ut_ckpt_reader *r, int j);
int ut_ckpt_reader_param(ut_ckpt_reader *r, const char *name, int ndim, const int64_t *shape, float *dst, char *err,
                         size_t n);
int ut_ckpt_reader_optim(ut_ckpt_reader *r, const char *want, int64_t *steps, char *err, size_t n);
int ut_ckpt_reader_state(ut_ckpt_reader *r, const char *state, const char *name, int64_t numel, float *dst,
                         char *err, size_t n);
/* Elements [lo, hi) of the model p's flat buffer of state `state` (a ZeRO
 * shard), each parameter's piece found by name. */
int ut_ckpt_reader_state_range(ut_ckpt_reader *r, const char *state, const ut_params *p, int64_t lo, int64_t hi,
                               float *dst, char *err, size_t n);
void ut_ckpt_reader_close(ut_ckpt_reader *r);
/* Checkpoints in dir are named step_<8 digits>.safetensors. Lists their
 * steps, newest first; returns the count (up to max; 0 for a missing dir,
 * -1 if dir cannot be read). Other files, temporary files included, are
 * ignored. */
int ut_ckpt_list(const char *dir, int64_t *steps, int max);
void ut_ckpt_path(char *buf, size_t n, const char *dir, int64_t step);
/* Deletes all but the newest keep checkpoints, never deleting keep_step (the
 * best one; -1 for none). keep <= 0 keeps all. */
int ut_ckpt_prune(const char *dir, int keep, int64_t keep_step, char *err, size_t n);
/* Deletes the temporary files (step_N.safetensors.tmp.PID.K) that a save
 * killed midway left in dir, those whose PID is no live process of this
 * machine; returns how many. */
int ut_ckpt_clean_temp(const char *dir);

/* ---- TensorBoard ----
 * An event file (TFRecord framing with masked CRC-32C; Event protos with
 * scalar summaries) under dir, named events.out.tfevents.<time>.<host>. */
typedef struct ut_tb ut_tb;
ut_tb *ut_tb_open(const char *dir, char *err, size_t n);
int ut_tb_scalar(ut_tb *tb, const char *tag, int64_t step, double value);
/* A resumed run: scalars of `step` and later in earlier event files are
 * stale (TensorBoard drops them on reading this SessionLog START). */
int ut_tb_restart(ut_tb *tb, int64_t step);
/* Records are buffered: ut_tb_flush writes them out (0, or -1 with errno),
 * so flush before ut_tb_close to see write errors. */
int ut_tb_flush(ut_tb *tb);
void ut_tb_close(ut_tb *tb);   /* NULL is fine */
/* Masked CRC-32C of TFRecord framing (exposed for tests and readers). */
uint32_t ut_crc32c(const void *data, size_t n);
uint32_t ut_tfrecord_mask(uint32_t crc);

/* ---- hooks: customise the loop in C ---- */
/* Named scalar outputs of a forward step (loss first). */
#define UT_MAX_OUTPUTS 8
typedef struct {
    ut_tensor *loss;             /* scalar f32 on the tape */
    ut_tensor *output;           /* e.g. logits, for metrics */
    int n;                       /* extra named outputs */
    const char *names[UT_MAX_OUTPUTS];
    ut_tensor *values[UT_MAX_OUTPUTS];
} ut_step_outputs;

typedef struct ut_trainer ut_trainer;
/* Sums a metric over a batch: the trainer adds up (sum, count) pairs across
 * batches and reports sum / count under "<split>/<name>". */
typedef struct { char name[32]; double sum, count; } ut_metric;

typedef struct {
    void *user;
    /* Builds x/y tensors from a collated batch (default: copies of x and y on
     * the model's device; with the default forward_step too, a model with
     * prepare gets its arrays made on the loader thread instead of x). */
    int (*collate)(void *user, ut_ctx *ctx, const ut_dataset *ds, const ut_batch *b,
                   ut_tensor **x, ut_tensor **y);
    /* Forward pass producing the loss and outputs (default: model forward, then compute_loss). */
    int (*forward_step)(void *user, ut_ctx *ctx, ut_model *m, ut_tensor *x, ut_tensor *y,
                        ut_step_outputs *out);
    /* Loss from outputs and targets (default: the model's loss). */
    ut_tensor *(*compute_loss)(void *user, ut_ctx *ctx, ut_model *m, ut_tensor *output, ut_tensor *y);
    /* Adds this batch's metrics (default: accuracy for classification, none
     * for language models; loss and perplexity are always reported). Returns
     * the number written to metrics (at most max). */
    int (*metrics)(void *user, const ut_step_outputs *out, ut_tensor *y, ut_metric *metrics, int max);
    /* Metrics over a split's generations (evaluation by generation:
     * generate.eval, and test mode on seq2seq data): every example's source,
     * reference and generated text in dataset order (each rank gets them
     * all and must write the same values). Reported as sum / count beside
     * bleu and rougeL. Returns the number written (at most max). */
    int (*generation_metrics)(void *user, int64_t n, const char *const *sources, const char *const *references,
                              const char *const *generated, ut_metric *metrics, int max);
    /* Called with every logged line of scalars (split train|dev|test). */
    void (*on_log)(void *user, const char *split, int64_t step, int n, const char *const *names,
                   const double *values);
} ut_hooks;

/* Trains as the config says (run directory, resume, eval, checkpoints, logs).
 * model and datasets may be NULL to build them from the config. Returns a
 * UT_EXIT_* code. */
int ut_trainer_run(const ut_config *cfg, ut_model *model, ut_dataset *train, ut_dataset *dev,
                   const ut_hooks *hooks);
/* Test mode: evaluates dev and test with the best checkpoint (or ckpt_path)
 * and writes dev_results.json and test_results.json in the run directory. */
int ut_trainer_test(const ut_config *cfg, const char *ckpt_path, ut_model *model, ut_dataset *dev,
                    ut_dataset *test, const ut_hooks *hooks);
/* The same over the ranks of comm (the `utrain` program hands down the
 * world it made with ut_comm_init; the two above use ut_comm_world()): the
 * run's collectives, its checks that every rank has the same config, its
 * run-directory lock and its evaluation's sums all go through comm. */
struct ut_comm;
int ut_trainer_run_on(const ut_config *cfg, struct ut_comm *comm, ut_model *model, ut_dataset *train,
                      ut_dataset *dev, const ut_hooks *hooks);
int ut_trainer_test_on(const ut_config *cfg, struct ut_comm *comm, const char *ckpt_path, ut_model *model,
                       ut_dataset *dev, ut_dataset *test, const ut_hooks *hooks);

/* ---- memory planning (`utrain plan`, docs/plan.md) ----
 * Per-rank bytes of each distributed strategy for the config's model on
 * world ranks. Weights, gradients and optimizer state are fp32 in every
 * train.precision. With Psi parameters (the flat buffer), N = world,
 * S = ut_shard_size(Psi, N) and K optimizer floats per parameter (AdamW 2,
 * SGD with momentum 1, SGD 0):
 *            params              grads              optimizer
 *   ddp      4 Psi               4 Psi              4 K Psi
 *   zero1    4 Psi               4 Psi              4 K S
 *   zero2    4 Psi               4 S + buckets      4 K S
 *   zero3    4 S + gathered      4 S + buckets      4 K S
 *   dp       4 Psi N             4 Psi N            4 K Psi      (one process, N workers)
 * buckets: gradient buckets in flight, 2 x dist.bucket_mb MiB at most 4 Psi;
 * gathered: the three largest ZeRO-3 units of the dist.wrap policy (all of them,
 * 4 Psi, with dist.reshard_after_forward false).
 * bf16/fp16 add `copies`: the float32 rounded copies of the parameters that
 * autocast ops read, which each worker keeps from forward to backward (not
 * sharded; dp holds N), measured on the pass below (ut_ctx_autocast_round_bytes).
 * Activations are measured, not estimated: the model is built from the config,
 * one forward + backward of the first training micro-batch (train.batch_size
 * examples) runs on a fresh context with the run's autocast dtype and its
 * ut_ctx_peak_bytes (plus autocast's conversion scratch) is taken, once
 * with model checkpointing off and once on; dp holds N workers' activations.
 * Every total also holds the runtime base: this process's resident memory
 * (VmRSS) before the model is built plus what opening the training datasets
 * added, so on the CPU a total compares with the peak resident memory of
 * `utrain train`. */
#define UT_PLAN_STRATEGIES 5
typedef struct {
    const char *strategy;       /* "ddp", "zero1", "zero2", "zero3", "dp" */
    int64_t params, copies, grads, optim, act, act_ckpt; /* copies: 16-bit runs' rounded weights */
    int64_t total, total_ckpt;  /* the above (act or act_ckpt) + runtime + dataset */
} ut_plan_row;

typedef struct {
    int world;
    int tp, dp;                 /* dist.tensor_parallel, and the data-parallel ranks world / (tp pp) */
    int shard_group;            /* the ranks the strategies shard over: dp, or dist.shard_size's group */
    int pp, pp_stage;           /* dist.pipeline_parallel; the stage with the most parameters (planned) */
    int64_t micro_batches, in_flight; /* pipeline: per step, and held at once by the planned stage */
    double bubble;              /* pipeline: the idle share of a step, (pp - 1) / (micro_batches + pp - 1) */
    int64_t whole_numel;        /* the whole model's parameters (numel: one rank's part of them) */
    char model[64], optim[16];
    char precision[8];          /* train.precision: fp32, bf16, fp16 */
    int64_t numel, shard;       /* Psi, S */
    int optim_floats;           /* K: state floats per parameter element (Adafactor: its first moment's) */
    int64_t optim_state;        /* the optimizer's state floats for the whole of numel (K x Psi; Adafactor's
                                   factored second moment adds its rows' and columns' means) */
    int64_t batch;              /* examples in the measured micro-batch */
    int64_t bucket_bytes;       /* zero2/zero3 gradient buckets in flight */
    int64_t gathered_bytes;     /* zero3: the three largest units, gathered */
    char wrap[16];              /* dist.wrap: the zero3 unit policy */
    char gathered_units[128];   /* the units' names, "h.0 + h.1" */
    int64_t runtime_bytes;      /* VmRSS before the datasets and the model */
    int64_t dataset_bytes;      /* VmRSS added by opening the training datasets */
    int64_t act_bytes, act_ckpt_bytes;   /* one worker's micro-batch (+ autocast scratch) */
    int64_t copy_bytes;         /* one worker's rounded parameter copies (bf16, fp16) */
    int64_t scratch_bytes;      /* of which act_bytes holds autocast's conversion scratch */
    ut_plan_row rows[UT_PLAN_STRATEGIES];
    char device[16];            /* the config's device: cpu, sim, cuda, cuda:N */
    char convs[512];            /* each convolution of the model and its algorithm ("" for none) */
    int64_t device_bytes;       /* that device's own memory (0 on the CPU): the default of --device-memory */
    /* compute: the model FLOPs (ut_ctx_flops) of the measured micro-batch's
     * forward and backward on the whole model, and of an optimizer step per
     * rank (its micro-batches, the model's share of one rank when split);
     * the peak FLOP/s a rank's step is held against (train.peak_tflops or the
     * device's, 0: not known) and what it is */
    double micro_flops, step_flops, peak;
    char peak_what[256];
} ut_plan;

/* Fills p for cfg (validated) on world >= 1 ranks: opens the datasets and
 * builds the model as training does, runs the two measured micro-batches and
 * frees everything. 0, or -1 with a message in err. */
int ut_plan_compute(const ut_config *cfg, int world, ut_plan *p, char *err, size_t n);
/* The table (one row per strategy; a fits column and a "fits" summary line
 * against device_memory bytes: 0 for the device's own memory, p->device_bytes,
 * none on the CPU) or, with json, one JSON object
 * holding every figure in bytes. */
void ut_plan_print(const ut_plan *p, int64_t device_memory, bool json, FILE *f);
/* A memory size: bytes ("123456"), or a number with a unit, decimal (KB, MB,
 * GB, TB) or binary (KiB, MiB, GiB, TiB), case-insensitive, e.g. "80GiB",
 * "512MiB", "1.5GB". 0 and *out set, or -1 for anything else (a zero or
 * negative size, an unknown unit). */
int ut_parse_bytes(const char *s, int64_t *out);

/* ---- a trained run's parts for other programs (`utrain generate`; src/train) ----
 * The run's model built from model.* (data: the dataset that fills sizes
 * the config leaves to it, or NULL), its pretrained tokenizer (data.tokenizer,
 * or model.pretrained's; NULL with a message when it has none), the
 * checkpoint test mode uses (the newest's train.best_step if that one is
 * kept, else the newest; only the newest's metadata is read, checked against
 * m's type when m is not NULL; the path into path) and
 * generate.* as generation options (the run's seed for sampling). */
ut_model *ut_model_from_config(const ut_config *cfg, const ut_dataset *data, char *err, size_t n);
ut_tokenizer *ut_run_tokenizer(const ut_config *c, char *err, size_t n);
/* The run's classification task (a ut_problem) as training decides it:
 * model.problem_type or num_labels, the model.pretrained directory's
 * config.json, else (tsv_text) the train file's labels (real numbers: a
 * regression; JSON arrays: multi-label); -1 with a message when a key is
 * refused. */
int ut_run_problem(const ut_config *c, char *err, size_t n);
int ut_best_checkpoint(const char *dir, ut_model *m, char *path, size_t pn, char *err, size_t n);
/* The run's model in dir: ut_best_checkpoint's, or with train.load_best_at_end
 * false the newest checkpoint. */
int ut_run_checkpoint(const ut_config *c, const char *dir, ut_model *m, char *path, size_t pn, char *err, size_t n);
void ut_gen_opts_from_config(const ut_config *c, ut_gen_opts *o);

#ifdef __cplusplus
}
#endif
#endif
