/* Trainer internals shared by the files of src/train.
 * defines: ut_trainer (run state), ut_runlog (console + log file + metrics.jsonl
 *          + TensorBoard), ut_evaluate, progress display, dataset building. */
#ifndef UTRAIN_RUN_INTERNAL_H
#define UTRAIN_RUN_INTERNAL_H

#include <stdio.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/dist.h"
#include "utrain/train.h"

/* The autocast dtype of train.precision. */
static inline ut_dtype ut_run_precision(const ut_config *c) {
    return !strcmp(c->precision, "bf16") ? UT_BF16 : !strcmp(c->precision, "fp16") ? UT_F16 : UT_F32;
}

/* Evaluation's autocast: train.eval_precision, or train.precision (auto). */
static inline ut_dtype ut_run_eval_precision(const ut_config *c) {
    const char *p = c->eval_precision;
    return !strcmp(p, "bf16") ? UT_BF16 : !strcmp(p, "fp16") ? UT_F16 : !strcmp(p, "fp32") ? UT_F32
                                                                                        : ut_run_precision(c);
}

/* The peak FLOP/s one rank's device gives the run's products (bf16/fp16
 * under autocast, TF32 with train.tf32, else float32): train.peak_tflops,
 * else the device's own figure; 0 when not known. what: the figure's source,
 * or why there is none (plan.c; the trainer's MFU and `utrain plan`). */
double ut_run_peak(const ut_config *c, ut_device dev, char *what, size_t n);

/* The seed of the training order: data.seed, or the run's seed (-1). */
static inline uint64_t ut_run_data_seed(const ut_config *c) {
    return (uint64_t)(c->data_seed >= 0 ? c->data_seed : c->seed);
}

/* What a run's context applies to every op it makes: autocast in
 * train.precision, the losses' train.label_smoothing (training, evaluation
 * and test alike, as the Hugging Face Trainer's label smoother), NEFTune's
 * train.neftune_alpha (in training mode only, as transformers' hook). */
static inline void ut_run_ctx_setup(ut_ctx *ctx, const ut_config *c) {
    ut_ctx_set_autocast(ctx, ut_run_precision(c));
    ut_ctx_set_label_smoothing(ctx, (float)c->label_smoothing);
    ut_ctx_set_neftune(ctx, (float)c->neftune_alpha);
}

/* ---- where a run writes ---- */
typedef struct {
    char dir[1024];           /* OUTPUT_DIR/EXPERIMENT_NAME */
    FILE *log;                /* logger_logs/training_<rank>.log */
    FILE *metrics;            /* metrics.jsonl (rank 0) */
    ut_tb *tb;                /* tensorboard/ (rank 0) */
    ut_comm *comm;            /* the run's ranks */
    int rank;
    bool bar;                 /* show a progress bar (a terminal, or train.progress: bar) */
    bool lines;               /* print a line per logged step (no bar, progress not off) */
    bool bar_active;          /* a progress bar line is on screen */
    bool locked;              /* lock_fd holds the run directory's lock */
    int lock_fd;
} ut_runlog;

/* Creates the run directory tree and opens the log file; for training also
 * metrics.jsonl and the TensorBoard file (rank 0). Training locks the run
 * directory first (rank 0 holds an flock on RUN/.lock until
 * ut_runlog_close or its exit): a second training job in the same directory
 * is refused on every rank, with the holder's pid and host, before any of
 * its ranks writes there. Test mode takes no lock. Collective for training. */
int ut_runlog_open(ut_runlog *rl, const ut_config *cfg, ut_comm *comm, bool training, char *err, size_t n);
/* A resumed run (rank 0): metrics.jsonl keeps only the lines of steps up to
 * the checkpoint's, since the steps after it are trained again, so every
 * step appears once; the new TensorBoard file starts with a SessionLog START
 * at step + 1, so TensorBoard drops those steps of the earlier files. 0, or
 * -1 with err. */
int ut_runlog_rewind(ut_runlog *rl, int64_t step, char *err, size_t n);
void ut_runlog_close(ut_runlog *rl);
/* printf to stdout (rank 0) and to the rank's log file, with a timestamp in the file. */
void ut_say(ut_runlog *rl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same, but to the log file alone. */
void ut_note(ut_runlog *rl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The checkpoint test mode and load_dir use: the one at the newest checkpoint's
 * best_step if it exists, else the newest. Path into path; 0 or -1 with err. */
int ut_best_checkpoint(const char *dir, ut_model *m, char *path, size_t pn, char *err, size_t n);
/* data.group_by_length: s groups ds's examples by their lengths, in
 * megabatches of transformers' size for the global batch over world
 * processes (and the accumulation window). 0, or -1 naming the key. */
int ut_run_group_by_length(const ut_config *c, ut_dataset *ds, ut_sampler *s, int64_t world, char *err,
                           size_t n);
/* One metrics.jsonl line and TensorBoard scalars "<split>/<name>". */
void ut_log_scalars(ut_runlog *rl, const char *split, int64_t step, double epoch, int n,
                    const char *const *names, const double *values);
/* Progress: a bar on a terminal, nothing otherwise (lines come from logging). */
void ut_progress(ut_runlog *rl, const char *mode, int64_t step, int64_t total, double rate,
                 const char *unit, double loss, double eta_s);
void ut_progress_end(ut_runlog *rl);
int ut_mkdirs(const char *path, char *err, size_t n);

/* ---- evaluation ---- */
#define UT_MAX_METRICS 64 /* loss, perplexity, accuracy, the generation scores, the entity types' and the hooks' */
typedef struct {
    int n;
    char names[UT_MAX_METRICS][32];
    double values[UT_MAX_METRICS];
    int64_t examples;
} ut_eval_result;

/* ---- token classification's entities (tagmetrics.c), as seqeval counts them ---- */
typedef struct {
    int64_t K;
    char *chunk;    /* each class's chunk letter (B, I, E, S, O, other) */
    int32_t *type;  /* each class's entity type (0: "_", O's) */
    char **types;   /* the types' names (ntypes), "_" first */
    int32_t ntypes;
} ut_tag_scheme;
/* The scheme of K tag names; -1 without names. */
int ut_tag_scheme_init(ut_tag_scheme *s, const char *const *names, int64_t K);
void ut_tag_scheme_free(ut_tag_scheme *s);
/* One sentence's gold and predicted tags (n class ids each): c[0] += its
 * gold entities, c[1] += the predicted, c[2] += those in both; by_type
 * (may be NULL; 3 a type, ntypes of them) the same for each type. */
void ut_tag_count(const ut_tag_scheme *s, const int32_t *gold, const int32_t *pred, int64_t n, double c[3],
                  double *by_type);
/* Most entity types train.entity_metrics reports (3 scores each, within UT_MAX_METRICS) */
#define UT_TAG_MAX_TYPES 16

/* ---- classification metrics from the confusion matrix (classmetrics.c) ----
 * The bits of the scores an evaluation adds beside accuracy: train.metrics'
 * names and train.best_metric's dev/<name>. */
enum {
    UT_CLS_PRECISION = 1,   /* two classes: the positive class's (label 1) */
    UT_CLS_RECALL = 2,
    UT_CLS_F1 = 4,
    UT_CLS_F1_MACRO = 8,    /* any number of classes: the classes' mean F1 */
    UT_CLS_F1_WEIGHTED = 16, /* ... weighted by each class's labels */
    UT_CLS_MCC = 32,        /* matthews_correlation */
    UT_CLS_CM = 63,         /* the scores above: from the confusion matrix */
    /* a regression's (model.num_labels 1), always computed from its predictions */
    UT_REG_PEARSON = 64,
    UT_REG_SPEARMAN = 128,  /* spearmanr */
    UT_REG_COMBINED = 256,  /* combined_score: their mean */
    UT_REG_ALL = 448,
    UT_CLS_ACCURACY = 512,  /* named only: accuracy is always there for classes */
    UT_TAG_TYPES = 1024,    /* train.entity_metrics: a token classifier's scores of each entity type */
};
#define UT_CLS_MAX_CLASSES 1024 /* the confusion matrix's limit (8 MiB of counts) */
/* train.metrics' names into bits; -1 with the name refused */
int ut_cls_parse(const char *list, unsigned *mask, char *err, size_t n);
/* a name whose score only evaluations compute (from the confusion matrix
 * or a regression's predictions) */
bool ut_cls_is_metric(const char *name);
unsigned ut_cls_wanted(const ut_config *c);
/* The run's scores against its data (classes: none, too many, or a
 * two-class score of more classes; a regression's scores: a classifier's
 * score, label smoothing): 0, or -1 naming the key */
int ut_cls_check(const ut_config *c, const ut_dataset *ds, char *err, size_t n);
typedef struct {
    int n;
    const char *names[6];
    double values[6];
} ut_cls_result;
/* The scores of mask from cm (C x C counts: row the label, column the
 * prediction); none when cm is empty */
void ut_cls_scores(const double *cm, int64_t C, unsigned mask, ut_cls_result *r);
/* A multi-label task's scores of mask from counts (K x 3: each label's
 * true positives, false positives, false negatives; an output above 0 a
 * predicted label), as scikit-learn scores multi-label data: precision,
 * recall and f1 micro-averaged (over every label decision), f1_macro the
 * labels' mean F1 (all K of them), f1_weighted weighted by each label's
 * examples; zero_division=0. matthews_correlation is not defined there
 * (ut_cls_check refuses it). */
void ut_cls_scores_multi(const double *counts, int64_t K, unsigned mask, ut_cls_result *r);
/* A regression's scores of predictions pred against labels (n each), as
 * scipy's pearsonr and spearmanr (average ranks for ties) and the GLUE
 * example's combined_score (their mean): pearson, spearmanr,
 * combined_score, NaN where undefined (fewer than 2 examples, a constant) */
void ut_reg_scores(const double *pred, const double *label, int64_t n, ut_cls_result *r);

/* Loss (example-weighted mean), accuracy (classification), perplexity
 * (language models) and hook metrics over a whole dataset, in no-grad eval
 * mode. Each rank of comm evaluates its own part (no example twice, none
 * padded in) and the sums are reduced, so every rank gets the numbers a
 * single process would. */
int ut_evaluate(ut_comm *comm, ut_ctx *ctx, ut_model *m, ut_dataset *ds, int64_t batch,
                const ut_hooks *h, ut_eval_result *res, char *err, size_t n);
/* The same, asking stop(arg) before each batch (every rank the same number of
 * times): when it says true the evaluation is abandoned and 1 returned; and
 * with cls (UT_CLS_* bits) the confusion matrix of the predictions (the
 * largest output against the label, as accuracy takes them) summed over
 * the ranks and those scores added after accuracy (ut_cls_scores). */
int ut_evaluate_until(ut_comm *comm, ut_ctx *ctx, ut_model *m, ut_dataset *ds, int64_t batch,
                      const ut_hooks *h, unsigned cls, bool (*stop)(void *), void *arg, ut_eval_result *res,
                      char *err, size_t n);
/* The same, and with outputs (ds->n x ds->num_classes doubles, zeroed) each
 * example's output row (the model's (batch, num_classes) logits) at its
 * dataset index, gathered over the ranks so that every rank has them all;
 * a token classifier's (ut_tok_labels: ds->n x max_len) each position's
 * predicted class + 1 where its target is not -100, else 0.
 * *have_outputs is false when the outputs had another shape (nothing usable). */
int ut_evaluate_outputs(ut_comm *comm, ut_ctx *ctx, ut_model *m, ut_dataset *ds, int64_t batch,
                        const ut_hooks *h, unsigned cls, ut_eval_result *res, double *outputs, bool *have_outputs,
                        char *err, size_t n);
/* The same on one stage of a pipeline: stage(stage_arg, ...) runs before
 * each batch's forward (a stand-in's too, on every rank). On a stage before
 * the last it runs that stage's part of the forward and hands the result on,
 * returning 1 (the batch ends there); on the last it receives the input
 * (m->stage_input) and returns 0; -1 with err. Only the last stage's res
 * (and outputs, as ut_evaluate_outputs, when not NULL) holds the numbers. */
typedef int (*ut_eval_stage_fn)(void *arg, ut_ctx *ctx, ut_model *m, const ut_batch *b, char *err, size_t n);
int ut_evaluate_stage(ut_comm *comm, ut_ctx *ctx, ut_model *m, ut_dataset *ds, int64_t batch, const ut_hooks *h,
                      unsigned cls, bool (*stop)(void *), void *arg, ut_eval_stage_fn stage, void *stage_arg,
                      ut_eval_result *res, double *outputs, bool *have_outputs, char *err, size_t n);
/* An evaluation of ds as test mode runs it (ut_evaluate_outputs, or a split
 * model's own): res on every rank, outputs (may be NULL) on rank 0 at
 * least. 0 or -1 with err. */
typedef int (*ut_eval_fn)(void *arg, ut_dataset *ds, int64_t batch, ut_eval_result *res, double *outputs,
                          bool *have_outputs, char *err, size_t n);
/* value of "loss" etc. in res; NAN if absent */
double ut_eval_get(const ut_eval_result *res, const char *name);
/* What a batch's mean loss is over: its examples, or for seq2seq data and
 * a token classifier's its labeled tokens (labels other than -100). */
int64_t ut_batch_weight(const ut_dataset *ds, const ut_batch *b);
/* The input tokens b feeds the model, padding within the batch included
 * (what transformers' tokens-per-second counts): a token stream's
 * count x seq_len, text planes' count x the longest attention mask,
 * sequence-to-sequence pairs' count x the trimmed source length; 0 for data
 * without tokens. */
int64_t ut_batch_tokens(const ut_dataset *ds, const ut_batch *b);
/* The input tokens of b the attention masks cover (transformers'
 * include_num_input_tokens_seen: non_padding): a token stream's count x
 * seq_len, text planes' mask sums, sequence-to-sequence pairs' source mask
 * sums; 0 for data without tokens. */
int64_t ut_batch_real_tokens(const ut_dataset *ds, const ut_batch *b);
/* generate.* as generation options (the run's seed for sampling). */
void ut_gen_opts_from_config(const ut_config *c, ut_gen_opts *o);
/* Evaluation by generation of a seq2seq dataset (eval_generate.c): each
 * example generated once over the ranks of comm (batches of `batch`),
 * decoded with tok and scored against its target text; bleu, rougeL,
 * exact_match, gen_len and h's generation_metrics (h may be NULL) appended
 * to res, the same on every rank. texts
 * (may be NULL): every example's generated text (ds->n strings, ut_free
 * each and the array). 0, or -1 with a message. */
int ut_evaluate_generation(ut_comm *comm, ut_model *m, ut_dataset *ds, int64_t batch, const ut_gen_opts *o,
                           ut_tokenizer *tok, const ut_hooks *h, ut_eval_result *res, char ***texts, char *err,
                           size_t n);
/* The pretrained tokenizer a text run reads its data with (data.tokenizer,
 * or model.pretrained's); NULL with a message when it has none. */
ut_tokenizer *ut_run_tokenizer(const ut_config *c, char *err, size_t n);

/* ---- shared steps ---- */
/* The default hooks filled in where the user left NULL. */
void ut_hooks_resolve(ut_hooks *out, const ut_hooks *user);
/* A loader for a run of m through h: on the loader thread the model's
 * prepare, when it has one and the hooks are the defaults; buffers
 * page-locked for the model's device. */
ut_loader *ut_run_loader(const ut_hooks *h, ut_model *m, ut_dataset *ds, ut_sampler *s, int prefetch);
/* Forward + loss for a collated batch (through the hooks; a batch with
 * prepared inputs straight to the model's forward_prepared). */
int ut_forward_batch(const ut_hooks *h, ut_ctx *ctx, ut_model *m, const ut_dataset *ds,
                     const ut_batch *b, ut_step_outputs *out, ut_tensor **y, char *err, size_t n);
/* A rank whose share of a batch is empty (the short last batch of an epoch,
 * or one smaller than the world size) still runs the forward pass, and the
 * backward pass when training: under zero3 the other ranks' passes gather
 * parameters unit by unit, and the gradient buckets of every strategy are
 * reduced in the order the backward pass completes them, so each rank must
 * take part in the same collectives in the same order. The stand-in is one
 * example (the dataset's first) whose loss is weighted 0 and whose outputs
 * are counted nowhere. It lives in b (count 1) until ut_standin_free. */
int ut_standin_batch(ut_dataset *ds, ut_batch *b, char *err, size_t n);
void ut_standin_free(ut_batch *b);
/* Adds accuracy (classification) and hook metrics of one batch. */
int ut_batch_metrics(const ut_hooks *h, const ut_dataset *ds, const ut_step_outputs *out,
                     ut_tensor *y, ut_metric *mets, int max);

/* ---- building from the config ---- */
/* Opens train/dev/test datasets as data.* says (any pointer may be NULL to
 * skip). lead: this process writes the run's vocabulary file and prints the
 * data warnings (rank 0; the other ranks build the same vocabulary quietly). */
int ut_datasets_open(const ut_config *cfg, const char *run_dir, bool lead, ut_dataset **train,
                     ut_dataset **dev, ut_dataset **test, char *err, size_t n);
/* Builds the model from model.* (vocab size filled from the data when unset). */
ut_model *ut_model_from_config(const ut_config *cfg, const ut_dataset *data, char *err, size_t n);
/* The same, built as one rank's part of the model split by layout
 * (ut_model_create_layout; NULL: whole). */
ut_model *ut_model_from_config_layout(const ut_config *cfg, const ut_dataset *data, const ut_model_layout *layout,
                                      char *err, size_t n);
/* dist.pipeline_blocks read as P stages' block counts into out. */
#define UT_MAX_PIPELINE_STAGES 62
int ut_pipeline_blocks(const ut_config *cfg, int P, int *out, char *err, size_t n);

#endif
