/* The trainer's run state, shared by trainer.c and the step engines beside
 * it (dp_step.c, pipeline.c).
 * defines: accum, epoch_row, replica, struct ut_trainer, split_model,
 *          accum_add, param_index, start_rng_stream, ut_split_* (split.c),
 *          ut_dp_* (dp_step.c), ut_pp_* (pipeline.c). */
#ifndef UTRAIN_TRAINER_INTERNAL_H
#define UTRAIN_TRAINER_INTERNAL_H

#include "run_internal.h"
#include "../backend/backend.h"
#include "utrain/dist.h"

/* ---- the run ---- */
typedef struct {
    double loss_sum;           /* sum of per-example (seq2seq: per-target-token) losses */
    double loss_w;             /* what loss_sum is a sum over: examples, or target tokens */
    int64_t examples, tokens;
    int64_t seen;              /* input tokens train.count_input_tokens counts (summed over ranks apart) */
    int64_t flos_tokens;       /* input tokens not yet in the state's flos_tokens (train_results.json) */
    ut_metric mets[UT_MAX_METRICS];
    int nmets;
} accum;

#define MAX_EPOCH_ROWS 64
typedef struct {
    int64_t epoch;
    double part;            /* a run that ends inside an epoch: the epochs done at its end (2.53), else 0 */
    double train_loss, train_acc;
    ut_eval_result dev;
} epoch_row;

/* dp: a worker's share of each batch and its results (its model replica
 * and context are in the worker group, ut_dp). */
typedef struct replica {
    ut_sampler sampler;
    ut_loader *loader;
    ut_batch b;
    accum acc;
    double loss;
    int64_t weight;   /* its share's weight in the window: examples, or target tokens */
    int rc;
    char err[512];
} replica;

struct ut_trainer {
    const ut_config *cfg;
    ut_comm *comm;               /* the world: start-up checks, stops, checkpoint confirmation */
    int rank, world;
    /* dist.tensor_parallel: the mesh (tp x dp) and the model split over its
     * tp group; dcomm is the data-parallel group the strategy, the sampler
     * and the metrics work over (the world when tp is 1) */
    int tp;
    ut_mesh mesh;
    bool have_mesh;
    ut_comm *dcomm;
    int drank, dworld;
    accum run;                   /* this run's reduced intervals, all ranks (train_results.json) */
    struct ut_split_param *wl;   /* split: the whole model's parameters (ut_split_whole_list) */
    int nwl;
    ut_model *whole;             /* pipeline stages with generate.eval: this rank's copy of the whole model */
    ut_tokenizer *tok;           /* generate.eval: decodes the generations (loaded at the first evaluation) */
    /* dist.pipeline_parallel: this rank's stage is the model; a window's
     * micro-batches are in flight in slots (a context, the received input,
     * the output or loss, the host buffer of its send); the embed group is
     * the first and the last stage (the tied embedding's two copies) */
    int pp;
    bool gpipe;
    ut_comm *embed;
    bool embed_used;
    /* the parameters several stages hold (ut_model.pp_shared), their
     * gradients summed over the pipeline group through shared_buf: each
     * one's index on this stage (-1: not held here) and size */
    int nshared;
    int *shared_idx;
    int64_t *shared_n, shared_total;
    float *shared_buf;
    bool *norm_skip;             /* per parameter: a copy the gradient norm counts on another stage */
    struct stage_slot *slots;
    int nslots;
    struct stage_slot *eval_slot; /* evaluation's sends and receives */
    ut_dataset *eval_ds;         /* the dataset being evaluated through the stages */
    int64_t pp_fwd, pp_bwd;      /* the window's forwards and backwards done */
    ut_dist *dist;               /* the strategy; owns the optimizer */
    /* dist.shard_size (hybrid sharding): the strategy's group (this rank's
     * shard group) and the replicas of its shard; NULL: the data-parallel
     * group is one shard group */
    ut_comm *shard_group, *replicas;
    int ndp;                     /* dp: worker threads (1 otherwise) */
    ut_dp *dp;                   /* dp: the worker group (worker 0 is the trainer's own model) */
    struct replica *rep;         /* dp: each worker's share and results */
    int64_t dp_window;           /* dp: examples of the current window over all workers */
    ut_runlog log;
    ut_hooks h;
    ut_model *m;
    ut_optim *o;
    ut_ctx *ctx;
    ut_dataset *train, *dev;
    ut_batch standin;         /* an empty share's stand-in example (ut_standin_batch) */
    ut_sampler sampler;
    ut_schedule sched;
    ut_plateau plateau;       /* optim.schedule plateau: its rules (its state is st's) */
    ut_train_state st;
    int64_t batches_per_epoch, steps_per_epoch, total_steps, accum_steps;
    int64_t last_saved_step;
    bool last_saved_model_only;  /* that checkpoint holds the weights alone (train.save_only_model) */
    bool stopping;               /* the save now is a stop signal's: whole, to resume from */
    int64_t log_every, eval_every, save_every; /* train.log/eval/save_interval, or from their *_steps_ratio or
                                                * *_steps_fraction */
    accum interval, epoch;
    double interval_t0, run_t0, last_grad_norm;
    /* throughput: the process's training contexts' model FLOPs when the
     * interval began (evaluations' taken out), this rank's peak FLOP/s and
     * all ranks' together (0: not known, no mfu), and what the peak is */
    double flops_mark, peak, peak_all;
    char peak_what[256];
    /* train.profile_step: the step's profile is running; when it began and
     * the FLOPs then */
    bool profiling;
    double prof_t0, prof_f0;
    /* train.wall_clock_breakdown: the interval's seconds in forward,
     * backward, the reduction after backward and the optimizer step, and the
     * steps they cover */
    double wcb[4];
    int64_t wcb_steps;
    int64_t steps_this_run;
    bool fp16;                   /* train.precision fp16: the loss scaler runs */
    ut_dtype pp_wire;            /* what pipeline stages send each other: F32, or the 16-bit precision's type */
    ut_grad_scaler scaler;
    int64_t skipped_steps;       /* fp16: steps skipped for inf/NaN gradients, this run */
    int count_tokens;            /* train.count_input_tokens: 0 no, 1 all, 2 non_padding */
    /* The step's scalars, kept on the device and read back in one copy at
     * the optimizer step: the window's losses, one per micro-batch
     * (win_loss: accum_steps floats; win_count: each one's examples), then
     * the gradient's square sum where no collective is needed for it
     * (win_sq). win_bytes: the whole block, win_host its host copy. */
    float *win_loss;
    double *win_sq;
    /* where the step's scalars come from the device (ut_dist_device_scalars):
     * step_sc, two floats after the block (the gradients' multiplier and the
     * skip flag, never read back: the host derives them from the norm), and
     * under autocast the parameters' 16-bit copies that the optimizer's pass
     * writes (p16, numel elements of p16_dt), or NULL */
    float *step_sc;
    void *p16;
    ut_dtype p16_dt;
    size_t win_bytes;
    unsigned char *win_host;
    int64_t *win_count;      /* each micro-batch's loss weight: its examples (seq2seq: target tokens) */
    /* seq2seq: losses are means over target tokens, so a step's gradient is
     * the mean over the window's target tokens on every rank together: each
     * micro-batch's loss is weighted by its tokens over the window's
     * examples, and the step multiplies by the window's examples over its
     * tokens (summed over the ranks, win_weight this rank's) */
    bool token_weights;
    int64_t win_weight, win_examples;
    int win_n, win_last;     /* losses taken; the window's last micro-batch's, or -1 (an empty share) */
    epoch_row rows[MAX_EPOCH_ROWS];
    int nrows;
    char err[1024];
};

/* Whether the model is split over ranks (tensor or pipeline parallelism). */
static inline bool split_model(const ut_trainer *t) { return t->tp > 1 || t->pp > 1; }

static inline void accum_add(accum *a, double loss, int64_t count, int64_t tokens, const ut_metric *m, int k) {
    a->loss_sum += loss * (double)count;
    a->examples += count;
    a->tokens += tokens;
    a->flos_tokens += tokens;
    for (int i = 0; i < k; i++) {
        int j = 0;
        while (j < a->nmets && strcmp(a->mets[j].name, m[i].name)) j++;
        if (j == a->nmets) {
            if (a->nmets == UT_MAX_METRICS) continue;
            a->mets[a->nmets++] = (ut_metric){.sum = 0};
            memcpy(a->mets[j].name, m[i].name, sizeof m[i].name);
        }
        a->mets[j].sum += m[i].sum;
        a->mets[j].count += m[i].count;
    }
}

/* Tokens in count examples of the training set (0 unless it holds tokens). */
static inline int64_t batch_tokens(const ut_trainer *t, const ut_batch *b) { return ut_batch_tokens(t->train, b); }

/* The input tokens of a batch that train.count_input_tokens counts: all of
 * them (tokens, batch_tokens' count: padding within the trimmed batch
 * included), those the attention masks cover, or none when it is off. */
static inline int64_t seen_tokens(const ut_trainer *t, const ut_batch *b, int64_t tokens) {
    return t->count_tokens == 1 ? tokens : t->count_tokens == 2 ? ut_batch_real_tokens(t->train, b) : 0;
}

/* A micro-batch's results into the step's window (its loss, left on the
 * device for the one read) and the interval's and epoch's metrics
 * (trainer.c; the plain step and the pipeline's last stage). */
void ut_trainer_record(ut_trainer *t, const ut_step_outputs *out, ut_tensor *y, const ut_batch *b);

static inline int param_index(const ut_params *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->names[i], name)) return i;
    return -1;
}

/* Dropout's stream for the micro-batch about to run on data-parallel rank
 * or worker `who`: a function of (epoch, batch index in the epoch, who)
 * under the key every context took from the seed (part of the configuration
 * hash, so a resumed run has the same), so every rank and worker draws its
 * own masks and a resumed run draws what a straight one would, however many
 * masks earlier batches drew. Nothing to restore from a checkpoint. */
static inline void start_rng_stream(ut_trainer *t, ut_ctx *ctx, int64_t who) {
    int64_t G = t->sampler.local_batch * t->sampler.world;
    ut_ctx_rng_stream(ctx, ut_philox_stream((uint64_t)t->st.epoch, (uint64_t)((t->st.cursor + G - 1) / G),
                                            (uint64_t)who));
}

/* ---- split models' checkpoints (split.c) ----
 * ut_split_whole_list: the whole model's parameters (t->wl: names, full
 *   shapes, the first pipeline stage that holds each), in its order, from
 *   the stages' lists (collective over the pipeline; made once); 0 or -1
 *   with t->err. ut_split_whole_numel: their elements (-1 on failure).
 * ut_split_save: checkpoint path of the parts' parameters and, with o (over
 *   this rank's whole part), their optimizer state: every rank calls it,
 *   rank 0 writes; 0 or -1 with t->err.
 * ut_split_load: this rank's parts (and o's state) from checkpoint path, a
 *   whole tensor at a time; nothing changes unless all of it loads; 0 or -1
 *   with err. Local: the caller agrees the outcome over the ranks.
 * ut_split_whole_model: t->whole (built at the first call) with the stages'
 *   current values: each tensor gathered over its stage's tp group and
 *   broadcast over the pipeline group (collective over the run's ranks); 0
 *   or -1 with t->err. For evaluation by generation, which needs every
 *   layer of the decoder in one process.
 * ut_split_free: what these keep. */
typedef struct ut_split_param {
    char *name;
    int ndim;
    int64_t shape[UT_MAX_DIMS];
    int64_t numel;
    int owner;
    int64_t order; /* its place in the whole model's order (ut_params.order); -1: the stages' order */
} ut_split_param;
int ut_split_whole_list(ut_trainer *t);
int64_t ut_split_whole_numel(ut_trainer *t);
int ut_split_save(ut_trainer *t, const char *path, ut_optim *o, const ut_train_state *st);
int ut_split_load(ut_trainer *t, const char *path, ut_optim *o, ut_train_state *st, char *err, size_t n);
/* Ranks that each read their own parts go on only if every one of them
 * loaded (*lrc: this rank's outcome, made -1 with why naming the rank
 * that failed); -1 (t->err) when the ranks cannot agree. */
int ut_split_agree(ut_trainer *t, int *lrc, char *why, size_t n);
int ut_split_whole_model(ut_trainer *t);
void ut_split_free(ut_trainer *t);
/* ZeRO's checkpoints from the shards (a sharded strategy on a whole model,
 * world > 1): ut_shard_save, every rank, rank 0 writing the parameters
 * (gathered before) and each state as the ranks' shards arrive, 0 or -1
 * with t->err; ut_shard_load, this rank's parameters and its own range of
 * the state (nothing changes unless all of it loads; the caller agrees the
 * outcome and refreshes the strategy), 0 or -1 with err. */
int ut_shard_save(ut_trainer *t, const char *path);
int ut_shard_load(ut_trainer *t, const char *path, ut_train_state *st, char *err, size_t n);

/* ---- dist.strategy dp: worker threads in one process (dp_step.c) ----
 * ut_dp_setup: the worker group (a replica per worker built from the
 *   config; own_m: the trainer built t->m) and each worker's sampler;
 *   ut_dp_step_free gives them back.
 * ut_dp_micro_step: the workers' forwards and backwards of their shares of
 *   one micro-batch, side by side (a device: in turn), their results merged
 *   in worker order, and on the window's last micro-batch the replicas'
 *   gradients added into the trainer's model; *loss: the micro-batch's. */
int ut_dp_setup(ut_trainer *t, bool own_m);
void ut_dp_step_free(ut_trainer *t);
int ut_dp_micro_step(ut_trainer *t, const ut_batch *b, int64_t window_examples, bool last, double *loss);

/* ---- test mode on a split model's parts (test_split.c) ----
 * ut_split_test_open: the mesh, this rank's part of the model (data fills
 *   the sizes the config leaves to it) and a context; NULL with err.
 * ut_split_test_load: its part of checkpoint path (every rank agreeing).
 * ut_split_test_eval: a ut_eval_fn (arg: the tester) evaluating through
 *   the parts. ut_split_test_model / _dcomm: the part and the data-parallel
 *   group. ut_split_test_free: all of it. */
ut_trainer *ut_split_test_open(const ut_config *c, ut_comm *comm, const ut_dataset *data, const ut_hooks *h,
                               char *err, size_t n);
int ut_split_test_load(ut_trainer *t, const char *path, ut_train_state *st, char *err, size_t n);
int ut_split_test_eval(void *arg, ut_dataset *ds, int64_t batch, ut_eval_result *res, double *outputs, bool *have,
                       char *err, size_t n);
ut_model *ut_split_test_model(ut_trainer *t);
ut_comm *ut_split_test_dcomm(ut_trainer *t);
void ut_split_test_free(ut_trainer *t);

/* ---- pipeline parallelism (pipeline.c) ----
 * ut_pp_setup: the stage's slots (a context per micro-batch in flight,
 *   min(M, P) for 1F1B, M for GPipe) and the tied embedding's group, after
 *   the strategy exists; ut_pp_free gives them back.
 * ut_pp_micro_step: one micro-batch of the window (its forward, and the
 *   backwards the schedule runs after it; the window's last one runs every
 *   backward left, waits for the sends and sums the tied embedding's
 *   gradient over its two stages).
 * ut_pp_evaluate: ds through the stages (ut_evaluate_stage), every stage
 *   getting the last one's results (and, with outputs, its outputs); 0, 1
 *   when stop said so, -1 with t->err.
 * ut_pp_fail: "pipeline stage S: WHAT: <the pipeline group's error>" into
 *   t->err; -1. */
int ut_pp_setup(ut_trainer *t);
/* the model FLOPs the stage's slots' contexts have run (ut_ctx_flops) */
double ut_pp_flops(const ut_trainer *t);
int ut_pp_evaluate(ut_trainer *t, ut_dataset *ds, int64_t batch, bool (*stop)(void *), void *arg, ut_eval_result *res,
                   double *outputs, bool *have_outputs);
void ut_pp_free(ut_trainer *t);
int ut_pp_micro_step(ut_trainer *t, const ut_batch *b, int64_t window_examples, bool last);
int ut_pp_fail(ut_trainer *t, const char *what);

#endif
