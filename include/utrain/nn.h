/* utrain models: the parameter store, layers made of ops, the model registry.
 * defines: ut_init, ut_params, ut_model, ut_param_add, ut_model_* (finalize,
 *          forward, loss, zero_grad, free), ut_kv (model options), the model
 *          registry, layers (linear, conv2d, layernorm, embedding, attention,
 *          mlp, transformer block) and their forward functions. */
#ifndef UTRAIN_NN_H
#define UTRAIN_NN_H

#include "utrain/optim.h"
#include "utrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- model options: string key/values (YAML model.* keys land here) ---- */
typedef struct ut_kv ut_kv;
ut_kv *ut_kv_new(void);
void ut_kv_free(ut_kv *kv);
void ut_kv_set(ut_kv *kv, const char *key, const char *value);   /* copies both */
const char *ut_kv_get(const ut_kv *kv, const char *key);         /* NULL if absent */
int ut_kv_len(const ut_kv *kv);
const char *ut_kv_key(const ut_kv *kv, int i);
void ut_kv_update(ut_kv *kv, const ut_kv *from);                 /* sets every key of from in kv */
/* Typed reads: 0 on success (def when absent), -1 with a message naming the
 * key and value. Lists are "784,128,10" or "[784, 128, 10]". */
int ut_kv_int(const ut_kv *kv, const char *key, long long def, long long *out, char *err, size_t n);
int ut_kv_float(const ut_kv *kv, const char *key, double def, double *out, char *err, size_t n);
int ut_kv_bool(const ut_kv *kv, const char *key, bool def, bool *out, char *err, size_t n);
/* -1 with a message if opts has a key not in the NULL-terminated known list. */
int ut_kv_check_keys(const ut_kv *kv, const char *const *known, const char *what, char *err,
                     size_t n);
int ut_kv_ints(const ut_kv *kv, const char *key, long long *out, int max, int *count, char *err,
               size_t n);
/* Integer options into a model's struct: each field's key (its default
 * def) read into the int64_t at base + at, in [lo, hi]; 0, or -1 with
 * "<model>: <key> <v> is outside [lo, hi]" (with range, e.g. "the
 * vocabulary": "... outside the vocabulary [lo, hi + 1)"). */
typedef struct {
    const char *key;
    long long def;
    size_t at;
} ut_kv_field;
int ut_kv_read_fields(const ut_kv *kv, const ut_kv_field *f, int nf, long long lo, long long hi, const char *range,
                      void *base, const char *model, char *err, size_t n);

/* ---- parameters: one flat buffer for values, one for gradients ---- */
typedef enum { UT_INIT_ZEROS, UT_INIT_ONES, UT_INIT_NORMAL, UT_INIT_UNIFORM } ut_init_kind;
typedef struct {
    ut_init_kind kind;
    float a; /* NORMAL: std; UNIFORM: bound (values in [-a, a)) */
} ut_init;

/* How a parameter is split over the ranks of a tensor-parallel group: the
 * full tensor has shape full_ne; its dimension dim is cut into parts equal
 * pieces and this rank holds piece part. blocks > 1: that dimension is
 * blocks stacked blocks cut alike, and the rank holds its piece of each, in
 * block order (GPT-2's c_attn weight (3C, C) is q, k and v: blocks = 3).
 * parts == 1: the whole tensor, on every rank (replicated). */
typedef struct {
    int dim, parts, part, blocks;
    int64_t full_ne[UT_MAX_DIMS];
} ut_partition;

typedef struct {
    int n;                 /* parameter count */
    ut_tensor **t;         /* each points into flat and flat_grad */
    char **names;          /* PyTorch-style state_dict names: "h.0.attn.c_attn.weight" */
    ut_init *init;
    ut_param_seg *segs;    /* offset, numel and weight-decay flag of each */
    ut_partition *part;    /* how each is split over a tensor-parallel group (parts 1: not) */
    int64_t numel;         /* total elements */
    ut_device device;      /* where flat, flat_grad and every parameter live */
    /* The flat buffers (64-byte aligned, whole pages), in the memory of the
     * device below, which may be a device's: offset them and hand them to
     * backend, optimizer and communicator calls; read or write values with
     * ut_tensor_get / set on t[i] (or the backend's copies), never by
     * dereferencing them. */
    float *flat, *flat_grad;
    int cap;
    /* A pipeline stage's place of each parameter in the whole model's order
     * (ut_model_order_at), when the stages' lists one after the other are
     * not that order (BART: its embeddings' layer norms come after the
     * encoder's layers); ordered false: they are. */
    int64_t *order;
    bool ordered;
    int64_t order_next;
} ut_params;

/* A model's prepared inputs on its device: the arrays its prepare added,
 * in that order, and the layout it chose. */
typedef struct {
    int n, layout;
    int64_t seq_len[2]; /* ut_inputs' */
    ut_tensor *t[UT_MAX_INPUTS];
} ut_prepared;

/* A model's token ids for generation (-1: none): the decoder's start
 * token, end of sequence, padding, and the token forced first (BART's
 * forced_bos_token_id); its vocabulary size. */
typedef struct {
    int64_t start, eos, pad, forced_bos, vocab;
} ut_decoder_tokens;

typedef struct ut_model ut_model;
struct ut_model {
    char *type;            /* registry name */
    ut_params params;
    void *impl;            /* the model's layers */
    bool checkpoint_activations;
    int tp_size;           /* the tensor-parallel group it is split over (ut_model_create_layout); 1: whole */
    bool seq_parallel;     /* built with the layout's seq_parallel (its blocks' norm regions split by sequence) */
    /* Pipeline: this model is stage pp_rank of pp_size (1: the whole depth).
     * A stage after the first starts from stage_input, the activation the
     * previous stage sent (set before each forward, requiring grad); a
     * stage before the last returns its activation instead of the output,
     * and only the last one has a loss. */
    int pp_size, pp_rank;
    int64_t pp_b0, pp_b1;  /* the stage's blocks [pp_b0, pp_b1) */
    ut_tensor *stage_input;
    /* The parameter the first and the last stage both hold (a token
     * embedding tied to the output head: GPT-2's wte.weight, BART's
     * model.shared.weight); the trainer sums the copies' gradients so they
     * stay equal. NULL: none. */
    const char *pp_tied;
    /* Parameters held by every stage whose blocks read them (T5's
     * relative-position tables: each stage with a block of that stack),
     * NULL-terminated; the trainer sums the copies' gradients over the
     * pipeline group and counts one copy in the gradient norm. NULL: none. */
    const char *const *pp_shared;
    /* output (e.g. logits) from input; see each model for shapes */
    ut_tensor *(*forward)(ut_model *m, ut_ctx *ctx, ut_tensor *input);
    /* Optional, for a model whose forward needs arrays computed from its
     * input's values (ids, masks, positions, packed offsets): prepare makes
     * them from x, the collated batch in host memory, with ut_inputs_add
     * (and sets in->layout); 0, or -1 with a message naming the model.
     * The trainer runs it on the loader thread, so it may read the model's
     * options but not its parameters. forward_prepared then runs on the
     * uploaded arrays; forward stays NULL (ut_model_forward prepares a
     * tensor given to it on the host first). */
    int (*prepare)(const ut_model *m, const ut_host_array *x, ut_inputs *in, char *err, size_t n);
    ut_tensor *(*forward_prepared)(ut_model *m, ut_ctx *ctx, const ut_prepared *in);
    /* prepare reads in->targets where it has them (a masked language
     * model: the rows with a label); ut_model_forward_loss then copies a
     * tensor's targets to the host for it too */
    bool prepare_targets;
    ut_inputs *host_inputs; /* ut_model_forward's arrays for such a model (owned) */
    /* scalar loss from the forward output and targets */
    ut_tensor *(*loss)(ut_model *m, ut_ctx *ctx, ut_tensor *output, ut_tensor *targets);
    /* Optional: the loss of a forward whose output nothing else reads (the
     * trainer's default hooks on a dataset without classes), the model's
     * head and loss in one op where it has one (GPT-2's language model:
     * ut_linear_cross_entropy, the logits never a tensor of their own).
     * NULL, or NULL returned with no op run and no error where it does not
     * apply: forward_prepared, then loss. */
    ut_tensor *(*forward_loss)(ut_model *m, ut_ctx *ctx, const ut_prepared *in, ut_tensor *targets);
    void (*free_impl)(void *impl);
    /* Token-by-token decoding for text generation (ut_generate); NULL for a
     * model that generates no text. */
    const struct ut_decoder_ops *decoder;
    ut_decoder_tokens tokens;
    /* The last forward's final hidden states before the head, (B, T, C):
     * a seq2seq model's decoder states, GPT-2's language model's; a tensor
     * of that forward's context (valid until it is reset), NULL for models
     * that do not keep them. A forward_step hook hands them on as FlagAI's
     * forward_step returns decoder_hidden_states. */
    ut_tensor *hidden;
};

/* ---- a model's decoder, for text generation (ut_generate, src/nn/generate.c) ----
 * begin takes B sources (host ids and attention masks, (B, S) row-major):
 * an encoder-decoder model encodes them, a decoder-only one takes them as
 * prompts. It makes a decoding state for N = B * per_source rows (row r
 * decodes source r / per_source) with room for max_new tokens after the
 * decoder's prompt, and a key/value cache when cache is true; *prompt (N,
 * *prompt_len) row-major, owned by the state, is each row's decoder prompt:
 * the start token (length 1), or a decoder-only model's prompt (left-padded
 * to the longest). step gives the next-token logits of every row (host (N,
 * vocab)) for the prefixes so far: row r's len tokens at seq + r * ld, the
 * prompt first; a cached state reads only what it has not seen (each
 * step's tokens go into the cache), an uncached one runs the decoder over
 * the whole prefix. reorder makes row r continue from row rows[r]'s prefix
 * (beam search); end frees the state. begin and step return NULL / -1 with
 * a message. */
typedef struct ut_decoder_ops {
    void *(*begin)(ut_model *m, const int32_t *src, const int32_t *mask, int64_t B, int64_t S, int per_source,
                   int64_t max_new, bool cache, const int32_t **prompt, int64_t *prompt_len, char *err, size_t n);
    int (*step)(void *state, const int32_t *seq, int64_t ld, int64_t len, float *logits, char *err, size_t n);
    int (*reorder)(void *state, const int32_t *rows, char *err, size_t n);
    void (*end)(void *state);
} ut_decoder_ops;

/* ---- a decoder's key/value cache (src/nn/kvcache.c) ----
 * Per layer a key and a value buffer (which 0, 1) of (max_len, rows,
 * width) in keep's memory (a context that outlives the generation's steps):
 * put writes a step's (rows, width), or k positions' (k, rows, width), at
 * position t with one copy, get gives
 * positions [0, len) as a (len, rows, width) view in a step's ctx, reorder
 * makes row r hold what row rows[r] held, at every position below len. */
typedef struct ut_kv_cache ut_kv_cache;
ut_kv_cache *ut_kv_cache_new(ut_ctx *keep, int64_t layers, int64_t max_len, int64_t rows, int64_t width);
void ut_kv_cache_free(ut_kv_cache *c);
int ut_kv_cache_put(ut_kv_cache *c, int64_t layer, int which, int64_t t, const ut_tensor *x);
ut_tensor *ut_kv_cache_get(ut_ctx *ctx, const ut_kv_cache *c, int64_t layer, int which, int64_t len);
int ut_kv_cache_reorder(ut_ctx *ctx, ut_kv_cache *c, const int32_t *rows, int64_t len);

/* What every model's decoding state holds (src/nn/kvcache.c): the model and
 * its name for messages, a context for the state's tensors (keep) and one
 * for a step's (ctx, reset after each), no-grad and in eval mode on the
 * model's device; rows (sources x per), room for max_len decoder tokens,
 * how many are cached (len) and the self-attention cache (kv, NULL when
 * cache is false or not yet made); an encoder-decoder's encoder states
 * (enc, rows first), their mask, its layers' cross-attention keys and
 * values (cross, 2 a layer, ut_malloc'd; NULL when uncached) and the
 * sources' length S. */
typedef struct {
    ut_model *m;
    const char *model;
    ut_ctx *keep, *ctx;
    int64_t rows, max_len, len, S;
    int per;
    bool cache;
    ut_kv_cache *kv;
    ut_tensor *enc, *mask, **cross;
} ut_decode_base;
void ut_decode_base_init(ut_decode_base *b, ut_model *m, const char *model, int64_t rows, int per, int64_t max_len,
                         bool cache);
void ut_decode_base_free(ut_decode_base *b);
/* ut_decoder_ops.end of a state whose first member is its ut_decode_base
 * (ut_calloc_check'd, nothing else of its own to free) */
void ut_decode_end(void *state);
/* An encoder-decoder's decoder prompt: each row's start token (keep's host arena) */
const int32_t *ut_decode_start(ut_decode_base *b, int64_t start);
/* -1 with "<model> generation: <ctx's error>" when ctx has one, else 0 */
int ut_decode_failed(const ut_decode_base *b, ut_ctx *ctx, char *err, size_t n);
/* ut_decoder_ops.reorder: rows must stay within their source; the cache follows */
int ut_decode_reorder(ut_decode_base *b, const int32_t *rows, char *err, size_t n);
/* The end of a step: logits (rows, vocab) into out on the host, the step's
 * context reset, len prefix tokens seen; -1 with a message when the step
 * failed. */
int ut_decode_logits(ut_decode_base *b, ut_tensor *logits, int64_t len, float *out, char *err, size_t n);
/* An encoder-decoder's step: len in [1, max_len], and cached, one token
 * past what the cache holds; else -1 with a message */
int ut_decode_step_ok(const ut_decode_base *b, int64_t len, char *err, size_t n);
/* The rows' prefixes (row r's len tokens at seq + r * ld) in the step's
 * context: their last tokens (rows, 1), or all of them (rows, len) */
ut_tensor *ut_decode_last_ids(ut_decode_base *b, const int32_t *seq, int64_t ld, int64_t len);
ut_tensor *ut_decode_prefix(ut_decode_base *b, const int32_t *seq, int64_t ld, int64_t len);
/* x (B, ...) with each row repeated per times: (B * per, ...) */
ut_tensor *ut_decode_expand(ut_ctx *ctx, ut_tensor *x, int per);
/* sources' attention masks (B, S) as additive masks of their rows (B * per, S): 0 or -FLT_MAX, in ctx's host arena */
float *ut_decode_mask(ut_ctx *ctx, const int32_t *mask, int64_t B, int64_t S, int per);

/* ---- text generation (src/nn/generate.c, docs/generation.md) ----
 * What transformers' generate does, with its defaults: greedy decoding,
 * beam search, or sampling, through a model's decoder (m->decoder). */
enum { UT_EARLY_HEURISTIC = 0, UT_EARLY_TRUE = 1, UT_EARLY_NEVER = 2 }; /* early_stopping: false, true, "never" */
typedef struct {
    int64_t max_new_tokens;       /* 20 */
    int64_t min_new_tokens;       /* 0: end of sequence is banned before this many new tokens */
    int num_beams;                /* 1: greedy (or sampling) */
    double length_penalty;        /* 1.0: a finished beam scores sum(log p) / length^length_penalty */
    int early_stopping;           /* UT_EARLY_*: HEURISTIC (transformers' false) */
    int64_t no_repeat_ngram_size; /* 0: none */
    bool do_sample;               /* sample from the processed distribution (with beams: the
                                   * candidates drawn without replacement, transformers' beam sample) */
    double temperature, top_p;    /* 1.0, 1.0 */
    int64_t top_k;                /* 50 (0: none) */
    uint64_t seed;                /* sampling's generator */
    bool no_cache;                /* run the decoder over the whole prefix at each step */
    int64_t forced_bos, forced_eos; /* the first / the last possible token forced; -1: none,
                                     * -2 (the default): forced_bos the model's */
    int64_t num_return_sequences;   /* 1: texts per source (sampling: independent draws;
                                     * beam search: the best finished beams, <= num_beams) */
} ut_gen_opts;
void ut_gen_opts_init(ut_gen_opts *o);
/* Generates for B sources (host ids and attention masks (B, S)): out (B x R,
 * max_new_tokens) the new tokens of each text (after the decoder's start
 * token; the end-of-sequence token included when it came, then the pad id),
 * lens[b * R + j] how many, R = num_return_sequences texts per source, the
 * best first for beam search. 0, or -1 with a message (a model without a
 * decoder, bad options, a failed step). */
int ut_generate(ut_model *m, const ut_gen_opts *o, const int32_t *src, const int32_t *mask, int64_t B, int64_t S,
                int32_t *out, int64_t *lens, char *err, size_t n);

/* Creates an empty model on the CPU (on dev inside ut_model_create_on's
 * build); register parameters, then ut_model_finalize. */
ut_model *ut_model_new(const char *type);
/* Registers a parameter (data assigned by ut_model_finalize). Weight decay
 * applies when ndim >= 2. name is copied. */
ut_tensor *ut_param_add(ut_model *m, const char *name, int ndim, const int64_t *ne, ut_init init);
/* The parameters registered from now on take places key, key + 1, ... in
 * the whole model's order (ut_params.order): for a model whose pipeline
 * stages each register their own, so that a split run's checkpoint lists
 * them as the whole model does. Keys must rise through the whole model's
 * order; a tied copy takes its original's. */
void ut_model_order_at(ut_model *m, int64_t key);
/* A parameter of which this rank holds one part (ut_partition: dimension
 * dim of the full shape full_ne cut into parts, this rank's part, in blocks):
 * the tensor has the part's shape, and ut_model_finalize fills it with
 * exactly that slice of the full tensor's initial values (initialisation is
 * by name and element), so the parts of all ranks put together are the
 * whole parameter of a model built on one rank. NULL with a message in err
 * when the dimension does not divide into blocks x parts, or part or dim is
 * out of range. */
/* Where row r of a part lies in the full tensor: t has the part's shape,
 * a row is one index of every dimension up to and including the split one
 * (its elements, the dimensions after it, are consecutive in both), and
 * `part` says which part t holds (pt->part for this rank's own). Returns
 * the full tensor's row; times the row's elements it is the offset. */
int64_t ut_partition_full_row(const ut_tensor *t, const ut_partition *pt, int part, int64_t r);
ut_tensor *ut_param_add_part(ut_model *m, const char *name, int ndim, const int64_t *full_ne, ut_init init,
                             int dim, int parts, int part, int blocks, char *err, size_t errn);
/* Allocates the flat buffers and initialises every parameter from seed
 * with ut_init_fill, in parallel chunks. */
void ut_model_finalize(ut_model *m, uint64_t seed);
/* x[j] = element first + j of a parameter called name initialised by init
 * under seed: a function of (seed, name, element) alone, drawn from the
 * counter-based generator (Philox4x32-10 keyed by the seed, one stream per
 * name). The values do not depend on the parameter's place in the model,
 * the thread count, or the rank or device that fills them, so a rank that
 * holds rows [r0, r1) of a weight fills exactly that slice of the whole. */
void ut_init_fill(float *x, int64_t first, int64_t n, ut_init init, uint64_t seed, const char *name);
void ut_model_free(ut_model *m);
void ut_model_zero_grad(ut_model *m);
ut_tensor *ut_model_param(const ut_model *m, const char *name);   /* NULL if none */
/* m->forward; for a model with prepare: input read to the host, prepared,
 * uploaded, then forward_prepared (what the trainer does on the loader
 * thread and with asynchronous copies). */
ut_tensor *ut_model_forward(ut_model *m, ut_ctx *ctx, ut_tensor *input);
/* The forward from inputs prepare made (the trainer's path): uploaded to
 * ctx's device with one asynchronous copy each, fenced (ut_inputs_fence). */
ut_tensor *ut_model_forward_inputs(ut_model *m, ut_ctx *ctx, ut_inputs *in);
ut_tensor *ut_model_loss(ut_model *m, ut_ctx *ctx, ut_tensor *output, ut_tensor *targets);
/* The loss of inputs prepare made against targets, with the model's
 * forward_loss where it applies (*output NULL: no output was made), else
 * forward then loss (*output the forward's). output may be NULL (not
 * wanted). NULL with the context's error. */
ut_tensor *ut_model_forward_loss_inputs(ut_model *m, ut_ctx *ctx, ut_inputs *in, ut_tensor *targets,
                                        ut_tensor **output);
/* The same from an input tensor (a model with prepare: prepared on the
 * host first, as ut_model_forward does); a model without forward_loss:
 * forward then loss. */
ut_tensor *ut_model_forward_loss(ut_model *m, ut_ctx *ctx, ut_tensor *x, ut_tensor *targets, ut_tensor **output);
/* A classifier's loss: mean cross-entropy of logits (N, K) against class
 * ids (I32), ids -100 ignored; against float32 targets (N) (a regression's
 * scores) logits (N, 1) and the mean squared error, as a Hugging Face model
 * with num_labels 1 regresses; against I32 targets (N, K) of 0 and 1 (a
 * multi-label task's labels) the mean binary cross-entropy with logits, as
 * problem_type multi_label_classification. A model's loss for models that
 * need no other. */
ut_tensor *ut_model_class_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets);
/* What a classifier's options say of its problem, in Hugging Face's names:
 * problem_type regression (num_labels / num_classes 1 or unset),
 * single_label_classification (a count >= 2 or unset) or
 * multi_label_classification (the same); without problem_type,
 * num_labels (else num_classes) 1 is a regression, another count
 * single-label classification. *type is that, *said whether either key
 * was there. -1 with a message naming the key for a contradiction and an
 * unknown type. */
typedef enum { UT_PROBLEM_SINGLE_LABEL = 0, UT_PROBLEM_REGRESSION, UT_PROBLEM_MULTI_LABEL } ut_problem;
int ut_model_problem_type(const ut_kv *opts, ut_problem *type, bool *said, char *err, size_t n);
/* A sequence-to-sequence model's loss: mean cross-entropy of logits (B, T,
 * V) against targets (B, T), -100 ignored; targets of another shape are a
 * context error saying so. */
ut_tensor *ut_model_seq2seq_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets);
/* A token classifier's loss (Hugging Face's *ForTokenClassification): the
 * mean cross-entropy of logits (B, T, K) against I32 targets (B, T), -100
 * ignored (special tokens, padding, a word's later pieces); targets of
 * another shape are a context error saying so. */
ut_tensor *ut_model_token_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets);
/* The same from the decoder's states h (B, T, C) and the head's weight w
 * (V, C) and bias b (or NULL), the head and the loss one op
 * (ut_linear_cross_entropy): a seq2seq model's forward_loss. */
ut_tensor *ut_model_seq2seq_head_loss(ut_model *m, ut_ctx *ctx, ut_tensor *h, ut_tensor *w, ut_tensor *b,
                                      ut_tensor *targets);

/* ---- registry ---- */
/* Builds (and finalizes) a model from options; NULL with a message on bad options. */
typedef ut_model *(*ut_model_build_fn)(const ut_kv *opts, uint64_t seed, char *err, size_t n);
/* Adds or replaces a model type; built-ins: "mlp", "cnn", "gpt2". */
void ut_model_register(const char *name, ut_model_build_fn build);
ut_model *ut_model_create(const char *name, const ut_kv *opts, uint64_t seed, char *err, size_t n);
/* The same with the parameters (and their gradients) on dev: while the
 * build function runs, ut_model_new gives the models it makes that device,
 * so a registered build function needs nothing to support it. NULL with a
 * message when this build or machine has no backend for dev. */
ut_model *ut_model_create_on(const char *name, const ut_kv *opts, uint64_t seed, ut_device dev, char *err,
                             size_t n);
/* Comma-separated list of registered names into buf. */
const char *ut_model_names(char *buf, size_t n);


/* ---- layers ---- */
typedef struct { ut_tensor *w, *b; } ut_linear_layer;
typedef struct { ut_tensor *w, *b; int stride, padding; } ut_conv2d_layer;
typedef struct { ut_tensor *w, *b; float eps; } ut_layernorm_layer;
typedef struct { ut_tensor *w; } ut_embedding_layer;
/* n_head: this layer's heads; head0, heads_all: where they sit in the whole
 * attention (0 and n_head unless split over tensor-parallel ranks), for the
 * attention-probability dropout's masks */
typedef struct {
    ut_linear_layer c_attn, c_proj;
    int n_head, head0, heads_all;
    float dropout;
} ut_attention_layer;
typedef struct { ut_linear_layer c_fc, c_proj; float dropout; } ut_mlp_layer;
/* Where a tensor-parallel block's parts meet (Megatron's f and g: ut_tp_copy
 * and ut_tp_reduce over a group, from ut_tp_hooks_of in dist.h); zeroed: the
 * block is not split. */
typedef struct {
    ut_tensor *(*copy)(ut_ctx *ctx, ut_tensor *x, void *group);   /* f: identity, gradient summed */
    ut_tensor *(*reduce)(ut_ctx *ctx, ut_tensor *x, void *group); /* g: summed, gradient identity */
    /* the vocabulary-parallel lookup and loss (ut_tp_embedding,
     * ut_tp_cross_entropy in dist.h): table and logits hold this rank's
     * part of a vocabulary of `vocab` ids */
    ut_tensor *(*embedding)(ut_ctx *ctx, ut_tensor *ids, ut_tensor *table, int64_t vocab, int padding_idx,
                            void *group);
    ut_tensor *(*cross_entropy)(ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets, int64_t vocab,
                                int ignore_index, void *group);
    /* the parts of the last dimension put together in rank order (x (..., n)
     * -> (..., n x ranks)), every rank the same; no gradient: for generation,
     * whose search reads the whole vocabulary's logits */
    ut_tensor *(*gather)(ut_ctx *ctx, ut_tensor *x, void *group);
    /* sequence parallelism (ut_tp_seq_* in dist.h): x (B, T, ...) to this
     * rank's (B, T/p, ...) of it; this rank's (B, T/p, ...) to the whole
     * (B, T, ...) (gradient: the sum over the group, this rank's part); the
     * partial sums (B, T, ...) to this rank's (B, T/p, ...) of their sum */
    ut_tensor *(*seq_split)(ut_ctx *ctx, ut_tensor *x, void *group);
    ut_tensor *(*seq_gather)(ut_ctx *ctx, ut_tensor *x, void *group);
    ut_tensor *(*seq_reduce_scatter)(ut_ctx *ctx, ut_tensor *x, void *group);
    void *group;
} ut_tp_hooks;
typedef struct {
    ut_layernorm_layer ln_1, ln_2;
    ut_attention_layer attn;
    ut_mlp_layer mlp;
    ut_tp_hooks tp;
    /* sequence parallelism (ut_block_layer_set_seq): the block takes and
     * gives this rank's rows of each sequence, seq_rank of seq_size */
    bool seq;
    int seq_rank, seq_size;
} ut_block_layer;

/* How a model is split over ranks: this rank's place in its tensor-parallel
 * group of tp_size ranks and the hooks that join the parts over that group
 * (ut_tp_hooks_of in dist.h), and its pipeline stage pp_rank of pp_size
 * (0 or 1: one stage, the whole depth). tp_size 1, pp_size <= 1: whole. */
typedef struct {
    int tp_rank, tp_size;
    ut_tp_hooks tp;
    bool seq_parallel; /* with tp_size > 1: sequence parallelism (models that have it set m->seq_parallel) */
    int pp_rank, pp_size;
    /* pp_size blocks per stage, adding up to the model's blocks; NULL: the
     * model balances its stages itself */
    const int *pp_blocks;
} ut_model_layout;
/* ut_model_create_on for one rank's part of a split model: while the build
 * function runs, ut_model_build_layout() gives it layout, and a model built
 * for tp_size > 1 sets m->tp_size to it, for pp_size > 1 m->pp_size (a
 * build function that does not read the layout leaves them 1, and the
 * model is refused with a message saying it has no tensor-parallel or
 * pipeline form). Tensor-parallel: gpt2, bert, roberta, bart, t5; pipeline:
 * gpt2's language model, bert, roberta. */
ut_model *ut_model_create_layout(const char *name, const ut_kv *opts, uint64_t seed, ut_device dev,
                                 const ut_model_layout *layout, char *err, size_t n);
/* The layout of the model being built (whole outside ut_model_create_layout). */
ut_model_layout ut_model_build_layout(void);
/* A pipeline stage's blocks [b0, b1) of a model's L: the layout's
 * pp_blocks, or balanced by compute: stage s ends where the blocks so far
 * are nearest (s + 1) / P of L + head_blocks (the last stage's head costs
 * that many blocks; the first stage's embeddings nothing), every stage
 * keeping at least one. One stage: all of them. 0, or -1 with a message
 * (a list that does not add up to L, more stages than blocks). */
int ut_pipeline_stage_blocks(const ut_model_layout *lay, int64_t L, double head_blocks, int64_t *b0, int64_t *b1,
                             char *err, size_t n);

/* PyTorch default init: weight and bias uniform in +-1/sqrt(fan_in).
 * Parameters are named PREFIX.weight and PREFIX.bias. */
void ut_linear_layer_init(ut_model *m, ut_linear_layer *l, const char *prefix, int64_t in,
                          int64_t out, bool bias);
/* Hugging Face (and GPT-2) init: weight N(0, std), bias zeros; the same names. */
void ut_linear_layer_init_normal(ut_model *m, ut_linear_layer *l, const char *prefix, int64_t in,
                                 int64_t out, float std);
void ut_conv2d_layer_init(ut_model *m, ut_conv2d_layer *l, const char *prefix, int64_t in_ch,
                          int64_t out_ch, int k, int stride, int padding);
void ut_layernorm_layer_init(ut_model *m, ut_layernorm_layer *l, const char *prefix, int64_t C);
void ut_embedding_layer_init(ut_model *m, ut_embedding_layer *l, const char *prefix, int64_t V,
                             int64_t C, float std);
/* GPT-2 init: linear weights N(0, 0.02), output projections N(0, proj_std), biases 0. */
void ut_attention_layer_init(ut_model *m, ut_attention_layer *l, const char *prefix, int64_t C,
                             int n_head, float proj_std, float dropout);
void ut_mlp_layer_init(ut_model *m, ut_mlp_layer *l, const char *prefix, int64_t C,
                       float proj_std, float dropout);
void ut_block_layer_init(ut_model *m, ut_block_layer *l, const char *prefix, int64_t C, int n_head,
                         float proj_std, float dropout);
/* The block split over tp_size ranks (Megatron-LM), this rank's part
 * tp_rank: c_attn and mlp.c_fc column-parallel (their output features: this
 * rank's heads of q, k and v, and its share of the MLP's 4C), attn.c_proj and
 * mlp.c_proj row-parallel (their input features; biases whole, added after
 * the sum), layer norms whole; hooks (ut_tp_hooks_of) join the parts. The
 * parameters keep their full names and hold their slices of the full
 * block's initial values (ut_param_add_part). -1 with a message when n_head
 * is not divisible by tp_size. */
int ut_block_layer_init_tp(ut_model *m, ut_block_layer *l, const char *prefix, int64_t C, int n_head,
                           float proj_std, float dropout, int tp_rank, int tp_size, ut_tp_hooks hooks, char *err,
                           size_t n);
/* A tensor-parallel block made sequence-parallel: it takes and gives this
 * rank's rows of each sequence ((B, T/p, C)); its layer norms, dropouts
 * and residual adds work on them, an all-gather of the sequence before
 * each column-parallel product and a reduce-scatter after each
 * row-parallel one replace the all-reduces; the norms' parameters and the
 * row-parallel biases get their gradients summed over the group. The
 * dropout masks are the whole model's (the (B, T, C) mask's rows). Only
 * the fused causal path ((B, T, C) input, no mask). */
void ut_block_layer_set_seq(ut_block_layer *l, int rank, int size);
/* Dropout of this rank's rows x (B, T/p, ...) of a (B, T, ...) tensor with
 * the whole tensor's mask (sequence parallelism). */
ut_tensor *ut_dropout_seq(ut_ctx *ctx, ut_tensor *x, float p, int rank, int size);

/* One rank's part of a linear split over tp_size ranks (Megatron-LM):
 * dim 0 column-parallel (its output features, and their biases), dim 1
 * row-parallel (its input features; the bias whole, added after the sum over
 * the group: ut_tp_row_out), in `blocks` stacked blocks (3 for a packed
 * q/k/v). Weights N(0, std), biases 0, each part its slice of the whole
 * initial values under the whole names. -1 with a message when the features
 * do not divide. */
int ut_linear_layer_init_part(ut_model *m, ut_linear_layer *l, const char *prefix, int64_t in, int64_t out,
                              float std, int dim, int tp_rank, int tp_size, int blocks, char *err, size_t n);
/* For a build under a layout (ut_model_build_layout): the whole layer
 * (ut_linear_layer_init_normal, ut_embedding_layer_init) when tp_size is 1,
 * else this rank's part: a linear split on dim (the build checked the sizes
 * divide), an embedding table by rows of its vocabulary, which also marks
 * the model split (m->tp_size). */
void ut_linear_layer_init_layout(ut_model *m, ut_linear_layer *l, const char *prefix, int64_t in, int64_t out,
                                 float std, int dim, const ut_model_layout *lay);
void ut_embedding_layer_init_layout(ut_model *m, ut_embedding_layer *l, const char *prefix, int64_t V, int64_t C,
                                    float std, const ut_model_layout *lay);
/* Zeroes row `id` of an embedding table (nn.Embedding's padding row at
 * initialisation) through one host copy: split by vocabulary (lay, or NULL
 * when whole), only on the rank whose part holds it. */
void ut_embedding_layer_zero_row(const ut_embedding_layer *l, int64_t id, const ut_model_layout *lay);
/* A column-parallel linear's input (f: the same on every rank, its gradient
 * summed over the group), and a row-parallel linear's output (g: the parts'
 * sum, then the whole bias); with hooks zeroed (not split) x itself and the
 * plain linear. */
ut_tensor *ut_tp_col_in(ut_ctx *ctx, const ut_tp_hooks *tp, ut_tensor *x);
ut_tensor *ut_tp_row_out(ut_ctx *ctx, const ut_tp_hooks *tp, ut_tensor *x, const ut_linear_layer *l);
ut_tensor *ut_linear_layer_forward(ut_ctx *ctx, const ut_linear_layer *l, ut_tensor *x);
/* gelu(layer(x)), tanh form, through ut_linear_gelu (one op) */
ut_tensor *ut_linear_layer_forward_gelu(ut_ctx *ctx, const ut_linear_layer *l, ut_tensor *x);
ut_tensor *ut_conv2d_layer_forward(ut_ctx *ctx, const ut_conv2d_layer *l, ut_tensor *x);
/* relu(layer(x)) through ut_conv2d_relu */
ut_tensor *ut_conv2d_layer_forward_relu(ut_ctx *ctx, const ut_conv2d_layer *l, ut_tensor *x);
ut_tensor *ut_layernorm_layer_forward(ut_ctx *ctx, const ut_layernorm_layer *l, ut_tensor *x);
ut_tensor *ut_embedding_layer_forward(ut_ctx *ctx, const ut_embedding_layer *l, ut_tensor *idx);
/* NEFTune (Jain et al., 2023; the Hugging Face Trainer's neftune_noise_alpha):
 * in training mode, with the context's alpha > 0 (ut_ctx_set_neftune), a
 * token embedding's output e (..., d) plus uniform noise in [-m, m), m =
 * alpha / sqrt(L d), L the batch's padded sequence length (seq_len; 0: e's
 * second-to-last dimension); e itself otherwise. */
ut_tensor *ut_neftune(ut_ctx *ctx, ut_tensor *e, int64_t seq_len);
/* x (B, T, C) -> (B, T, C) */
ut_tensor *ut_attention_layer_forward(ut_ctx *ctx, const ut_attention_layer *l, ut_tensor *x);
ut_tensor *ut_mlp_layer_forward(ut_ctx *ctx, const ut_mlp_layer *l, ut_tensor *x);
/* Pre-LayerNorm block: x + attn(ln_1(x)), then + mlp(ln_2(.)); with
 * checkpoint the block's activations are recomputed in backward. */
ut_tensor *ut_block_layer_forward(ut_ctx *ctx, const ut_block_layer *l, ut_tensor *x, bool checkpoint);
/* The same block with the rows described by rows: NULL as above (x (B, T, C),
 * causal); a float mask (B, T) of the real tokens (x (B, T, C), causal under
 * it); or I32 offsets (B + 1) where each of B packed sequences starts (x
 * (N, C), each causal over itself). With rows, attention probabilities get
 * the layer's dropout too (transformers' attn_pdrop). */
ut_tensor *ut_block_layer_forward_rows(ut_ctx *ctx, const ut_block_layer *l, ut_tensor *x, ut_tensor *rows,
                                       bool checkpoint);

#ifdef __cplusplus
}
#endif
#endif
