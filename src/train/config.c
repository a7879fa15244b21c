/* The configuration schema (one row per key) and the entry points that apply
 * it: defaults, --set, and the key lookups the loader, writer and docs share. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "config_schema.h"
#include "utrain/base.h"

/* field location of a row: offset and size in ut_config */
#define AT(f) .off = offsetof(ut_config, f), .size = sizeof(((ut_config *)0)->f)
#define GE(v) .lo = UT_CFG_GE, .min = (v)
#define GT(v) .lo = UT_CFG_GT, .min = (v)
#define LT(v) .hi = UT_CFG_LT, .max = (v)
#define LE(v) .hi = UT_CFG_LE, .max = (v)

static const char *const modes[] = {"train", "test", NULL};
static const char *const datasets[] = {"idx_images", "tokens", "tsv_text", "seq2seq_text", "tagged_text", "mlm_text",
                                       "clm_text", NULL};
static const char *const early_kinds[] = {"false", "true", "never", NULL};
static const char *const strategies[] = {"no", "steps", "epoch", NULL};
static const char *const progress_kinds[] = {"auto", "bar", "lines", "off", NULL};
static const char *const optimizers[] = {"adamw", "sgd", "lion", "adafactor", NULL};
static const char *const schedules[] = {"constant",   "cosine",       "linear",    "step",
                                        "cosine_restarts", "polynomial", "inverse_sqrt", "wsd",
                                        "ds_warmup",  "ds_warmup_decay", "ds_warmup_cosine", "annealing",
                                        "plateau",    "greedy",          NULL};
static const char *const plateau_modes[] = {"auto", "min", "max", NULL};
static const char *const threshold_modes[] = {"rel", "abs", NULL};
static const char *const warmup_types[] = {"linear", "log", NULL};
static const char *const decay_types[] = {"cosine", "linear", "1-sqrt", NULL};
static const char *const skip_rules[] = {"hold", "advance", NULL};
static const char *const load_types[] = {"best", "latest", NULL};
static const char *const token_counts[] = {"no", "all", "non_padding", NULL};
static const char *const dist_strategies[] = {"ddp", "zero1", "zero2", "zero3", "fsdp", "dp", NULL};
static const char *const precisions[] = {"fp32", "bf16", "fp16", NULL};
static const char *const eval_precisions[] = {"auto", "fp32", "bf16", "fp16", NULL};
static const char *const wrap_policies[] = {"block", "param", "model", NULL};
static const char *const offload_targets[] = {"none", "cpu", NULL};
static const char *const pipeline_schedules[] = {"1f1b", "gpipe", NULL};
static const char *const comm_hooks[] = {"none", "bf16", "fp16", NULL};
static const char *const device_comms[] = {"auto", "direct", "host", NULL};
static const char *const launchers[] = {"auto", "mpi", "tcp", NULL};

#define FMNIST "/usr/share/datasets/fashion-mnist/"

const ut_cfg_key ut_cfg_schema[] = {
    /* ---- top level: the run ---- */
    {.key = "experiment_name", .type = UT_CFG_STR, AT(experiment_name), .def = "default",
     .doc = "run directory name under output_dir"},
    {.key = "output_dir", .type = UT_CFG_STR, AT(output_dir), .def = "runs",
     .doc = "directory holding the run directories"},
    {.key = "mode", .type = UT_CFG_ENUM, AT(mode), .def = "train", .values = modes,
     .doc = "train, or test the best checkpoint of the run"},
    {.key = "continue_training", .type = UT_CFG_BOOL, AT(continue_training), .def = "false",
     .doc = "resume from the newest valid checkpoint of the run"},
    {.key = "load_dir", .type = UT_CFG_STR, AT(load_dir), .def = "",
     .doc = "initial weights: a run directory (its best checkpoint), its checkpoints/ folder, or one checkpoint file (empty: none)"},
    {.key = "load_type", .type = UT_CFG_ENUM, AT(load_type), .def = "best", .values = load_types,
     .doc = "which checkpoint of load_dir's run the initial weights come from: its best, or its newest "
            "(latest; FlagAI's load_type)"},
    {.key = "device", .type = UT_CFG_STR, AT(device), .def = "cpu",
     .doc = "where the model computes (the environment's UTRAIN_DEVICE, when set, is the default): cpu, cuda (each rank the GPU of its local rank), cuda:N (the node's ranks from GPU N on; docs/gpu.md; refused by a build without the CUDA backend); or sim (the simulated device: the CPU's kernels on memory the host cannot read, for testing the device seam, docs/engine.md); pytorch_device is read as this key"},
    {.key = "seed", .type = UT_CFG_INT, AT(seed), .def = "42", GE(0), .hashed = true,
     .doc = "seed of weight init, shuffling and dropout"},
    {.key = "threads", .type = UT_CFG_INT, AT(threads), .def = "0", GE(0), LE(4096),
     .doc = "CPU threads (0: the OpenMP default)"},

    /* ---- model ---- */
    {.key = "model.name", .type = UT_CFG_STR, AT(model_name), .def = "cnn", .hashed = true,
     .doc = "a registered model (mlp, cnn, gpt2, ...); other model.* keys are its options"},

    /* ---- data ---- */
    {.key = "data.name", .type = UT_CFG_ENUM, AT(data_name), .def = "idx_images",
     .values = datasets, .hashed = true,
     .doc = "dataset kind: IDX images, token shards, text to classify, pairs of texts, words with a tag each, "
            "texts to mask, texts to continue (docs/data.md)"},
    {.key = "data.train_images", .type = UT_CFG_STR, AT(train_images),
     .def = FMNIST "train-images-idx3-ubyte.gz", .hashed = true,
     .doc = "idx_images: training images (IDX, plain or gzip)"},
    {.key = "data.train_labels", .type = UT_CFG_STR, AT(train_labels),
     .def = FMNIST "train-labels-idx1-ubyte.gz", .hashed = true,
     .doc = "idx_images: training labels"},
    {.key = "data.dev_images", .type = UT_CFG_STR, AT(dev_images), .def = "", .hashed = true,
     .doc = "idx_images: dev images (empty: carve dev_size from the training set)"},
    {.key = "data.dev_labels", .type = UT_CFG_STR, AT(dev_labels), .def = "", .hashed = true,
     .doc = "idx_images: dev labels"},
    {.key = "data.test_images", .type = UT_CFG_STR, AT(test_images),
     .def = FMNIST "t10k-images-idx3-ubyte.gz", .doc = "idx_images: test images"},
    {.key = "data.test_labels", .type = UT_CFG_STR, AT(test_labels),
     .def = FMNIST "t10k-labels-idx1-ubyte.gz", .doc = "idx_images: test labels"},
    {.key = "data.dev_size", .type = UT_CFG_INT, AT(dev_size), .def = "5000", GE(0),
     .hashed = true, .doc = "idx_images: last N training examples used as dev when no dev files"},
    {.key = "data.dev_fraction", .type = UT_CFG_FLOAT, AT(dev_fraction), .def = "0", GE(0), LT(1),
     .hashed = true, .doc = "tokens and the text kinds: this last fraction of the training examples is the dev set "
                            "when there is no data.dev_path, in training and test mode (FlagAI's example keeps 0.8 "
                            "for training: 0.2)"},
    {.key = "data.mean", .type = UT_CFG_FLOAT, AT(mean), .def = "0.2860", .hashed = true,
     .doc = "idx_images: normalisation (x/255 - mean)/std"},
    {.key = "data.std", .type = UT_CFG_FLOAT, AT(std), .def = "0.3530", GT(0), .hashed = true,
     .doc = "idx_images: normalisation (x/255 - mean)/std"},
    {.key = "data.train_path", .type = UT_CFG_STR, AT(train_path), .def = "", .hashed = true,
     .doc = "tokens: shard file or glob; tsv_text: TSV, CSV or JSON file; seq2seq_text: pairs; tagged_text: JSON "
            "Lines or CoNLL text of words and tags (its tags are the classes, also in test mode); mlm_text, clm_text: "
            "a text file (a line each), CSV or JSON Lines to train a masked or causal language model on"},
    {.key = "data.dev_path", .type = UT_CFG_STR, AT(dev_path), .def = "",
     .doc = "tokens and the text kinds: dev data (empty: no dev set)"},
    {.key = "data.test_path", .type = UT_CFG_STR, AT(test_path), .def = "",
     .doc = "tokens and the text kinds: test data (empty: none)"},
    {.key = "data.seq_len", .type = UT_CFG_INT, AT(seq_len), .def = "64", GE(1), LE(1e9), .hashed = true,
     .doc = "tokens: sequence length T; clm_text: each block's tokens (run_clm's block_size)"},
    {.key = "data.tokenizer", .type = UT_CFG_STR, AT(tokenizer), .def = "word", .hashed = true,
     .doc = "tsv_text: word, byte, or a pretrained tokenizer directory (tokenizer.json or "
            "vocab.txt); with model.pretrained, word means that model directory's tokenizer; "
            "seq2seq_text: the pretrained tokenizer; tokens: the one `utrain tokenize` made the shards with, "
            "which `utrain generate` encodes prompts and decodes with"},
    {.key = "data.max_len", .type = UT_CFG_INT, AT(max_len), .def = "64", GE(1), LE(1e9), .hashed = true,
     .doc = "tsv_text, tagged_text: pad or truncate to this many tokens; mlm_text: each block's tokens (with "
            "data.line_by_line: each line's most)"},
    {.key = "data.min_freq", .type = UT_CFG_INT, AT(min_freq), .def = "1", GE(1), .hashed = true,
     .doc = "tsv_text, word tokenizer: minimum count of a vocabulary word"},
    {.key = "data.shuffle", .type = UT_CFG_BOOL, AT(shuffle), .def = "true", .hashed = true,
     .doc = "shuffle the training set every epoch (by seed and epoch)"},
    {.key = "data.group_by_length", .type = UT_CFG_BOOL, AT(group_by_length), .def = "false", .hashed = true,
     .hash_if_set = true,
     .doc = "training batches of examples of similar lengths, the epoch's longest first (transformers' "
            "group_by_length): less padding for text read with a pretrained tokenizer and for "
            "sequence-to-sequence pairs"},
    {.key = "data.max_train_samples", .type = UT_CFG_INT, AT(max_train_samples), .def = "0", GE(0), .hashed = true,
     .hash_if_set = true,
     .doc = "train on the train set's first N examples only (0: all; Hugging Face's example scripts' "
            "max_train_samples, for debugging or quicker runs); after a dev set is carved from it"},
    {.key = "data.max_eval_samples", .type = UT_CFG_INT, AT(max_eval_samples), .def = "0", GE(0), .hashed = true,
     .hash_if_set = true, .doc = "evaluate on the dev set's first N examples only (0: all; max_eval_samples)"},
    {.key = "data.max_predict_samples", .type = UT_CFG_INT, AT(max_predict_samples), .def = "0", GE(0),
     .doc = "test mode: the test set's first N examples only (0: all; max_predict_samples)"},
    {.key = "data.drop_last", .type = UT_CFG_BOOL, AT(drop_last), .def = "false", .hashed = true,
     .doc = "drop the last incomplete training batch of an epoch"},
    {.key = "data.seed", .type = UT_CFG_INT, AT(data_seed), .def = "-1", GE(-1), .hashed = true,
     .hash_if_set = true,
     .doc = "seed of the training order alone (the sampler's shuffling), apart from the weights' and dropout's "
            "seed (Hugging Face's data_seed); -1: seed"},
    {.key = "data.prefetch", .type = UT_CFG_INT, AT(prefetch), .def = "2", GE(1),
     .doc = "batches the loader prepares ahead"},
    {.key = "data.train_target_path", .type = UT_CFG_STR, AT(train_target_path), .def = "", .hashed = true,
     .doc = "seq2seq_text: the targets, one a line, beside train_path's sources (FlagAI's train_targets.txt); empty: train_path is TSV or JSON Lines with both"},
    {.key = "data.dev_target_path", .type = UT_CFG_STR, AT(dev_target_path), .def = "",
     .doc = "seq2seq_text: dev targets beside dev_path"},
    {.key = "data.test_target_path", .type = UT_CFG_STR, AT(test_target_path), .def = "",
     .doc = "seq2seq_text: test targets beside test_path"},
    {.key = "data.max_source_len", .type = UT_CFG_INT, AT(max_source_len), .def = "512", GE(2), LE(1e9),
     .hashed = true, .doc = "seq2seq_text: truncate sources to this many tokens (special tokens included)"},
    {.key = "data.max_target_len", .type = UT_CFG_INT, AT(max_target_len), .def = "128", GE(2), LE(1e9),
     .hashed = true, .doc = "seq2seq_text: truncate targets to this many tokens (special tokens included)"},
    {.key = "data.source_field", .type = UT_CFG_STR, AT(source_field), .def = "source", .hashed = true,
     .doc = "seq2seq_text: the sources' TSV / CSV column or JSON key (`translation.en`: key en of the object under "
            "translation); source: that column, else the file's first (run_summarization's text_column)"},
    {.key = "data.target_field", .type = UT_CFG_STR, AT(target_field), .def = "target", .hashed = true,
     .doc = "seq2seq_text: the targets' TSV / CSV column or JSON key; target: that column, else the file's second "
            "(run_summarization's summary_column)"},
    {.key = "data.source_prefix", .type = UT_CFG_STR, AT(source_prefix), .def = "", .hashed = true,
     .doc = "seq2seq_text: text put before every source (T5's `summarize: `)"},
    {.key = "data.lowercase", .type = UT_CFG_BOOL, AT(lowercase), .def = "false", .hashed = true,
     .doc = "seq2seq_text: lower-case sources and targets (FlagAI's example does)"},
    {.key = "data.label_all_tokens", .type = UT_CFG_BOOL, AT(label_all_tokens), .def = "false", .hashed = true,
     .doc = "tagged_text: every piece of a word carries the word's tag (a B- tag as its I- on the later pieces), "
            "as run_ner's label_all_tokens; false: only the first piece, the others are not scored"},
    {.key = "data.mlm_probability", .type = UT_CFG_FLOAT, AT(mlm_probability), .def = "0.15", GT(0), LT(1),
     .hashed = true,
     .doc = "mlm_text: the share of the tokens masked (run_mlm's mlm_probability): of those, 80% become the mask "
            "token, 10% a random token, 10% stay"},
    {.key = "data.keep_linebreaks", .type = UT_CFG_BOOL, AT(keep_linebreaks), .def = "true", .hashed = true,
     .doc = "clm_text: a text file's lines keep their line ends (\\n) in the text the model reads (run_clm's "
            "keep_linebreaks); false: the lines' texts are joined without them"},
    {.key = "data.line_by_line", .type = UT_CFG_BOOL, AT(line_by_line), .def = "false", .hashed = true,
     .doc = "mlm_text: each line that is not blank an example, cut at data.max_len and padded (run_mlm's "
            "line_by_line); false: the lines' tokens concatenated and cut into blocks of data.max_len"},
    {.key = "data.text_column", .type = UT_CFG_STR, AT(text_column), .def = "", .hashed = true, .hash_if_set = true,
     .doc = "tsv_text: the text's column (several, comma-separated: their fields joined by text_column_delimiter, "
            "as run_classification's text_column_names); empty: found by name (docs/data.md); tagged_text: the "
            "JSON key of the words (empty: tokens, else the first); mlm_text: the CSV column or JSON key of the "
            "text (empty: text, else the first); clm_text: the same"},
    {.key = "data.text_pair_column", .type = UT_CFG_STR, AT(text_pair_column), .def = "", .hashed = true,
     .hash_if_set = true, .doc = "tsv_text: the column of a pair's second text (with text_column)"},
    {.key = "data.label_column", .type = UT_CFG_STR, AT(label_column), .def = "", .hashed = true,
     .hash_if_set = true, .doc = "tsv_text: the label's column (a file without it is unlabeled: a test file); empty: "
                                 "label, score, is_duplicate, Quality or labels; tagged_text: the JSON key of the "
                                 "tags (empty: ner_tags, else the second)"},
    {.key = "data.text_column_delimiter", .type = UT_CFG_STR, AT(text_column_delimiter), .def = " ", .hashed = true,
     .hash_if_set = true, .doc = "tsv_text: what joins the fields of several text columns"},

    /* ---- train ---- */
    {.key = "train.epochs", .type = UT_CFG_FLOAT, AT(epochs), .def = "1", GE(0), LE(1e9),
     .doc = "passes over the training set; a fraction (2.5, transformers' num_train_epochs) trains "
            "ceil(epochs x steps per epoch) steps, the last epoch cut short"},
    {.key = "train.max_steps", .type = UT_CFG_INT, AT(max_steps), .def = "0", GE(0),
     .doc = "optimizer steps to take; > 0 overrides epochs"},
    {.key = "train.batch_size", .type = UT_CFG_INT, AT(batch_size), .def = "64", GE(1), LE(1e12),
     .doc = "per-process micro-batch (checkpoints record the global batch: batch_size x processes x accumulation)"},
    {.key = "train.auto_find_batch_size", .type = UT_CFG_BOOL, AT(auto_find_batch_size), .def = "false",
     .doc = "a run that runs out of memory (the GPU's, the host's) before its first checkpoint starts again with "
            "half the train.batch_size, down to 1, as Hugging Face's auto_find_batch_size (docs/training.md)"},
    {.key = "train.eval_batch_size", .type = UT_CFG_INT, AT(eval_batch_size), .def = "0", GE(0), LE(1e12),
     .doc = "evaluation batch (0: batch_size)"},
    {.key = "train.gradient_accumulation_steps", .type = UT_CFG_INT,
     AT(gradient_accumulation_steps), .def = "1", GE(1), LE(1e6),
     .doc = "micro-batches per optimizer step"},
    {.key = "train.log_interval", .type = UT_CFG_INT, AT(log_interval), .def = "50", GE(0),
     .doc = "log the training loss every N steps (0: never)"},
    {.key = "train.log_first_step", .type = UT_CFG_BOOL, AT(log_first_step), .def = "false",
     .doc = "also log step 1's training loss (the interval after it starts there; Hugging Face's "
            "logging_first_step)"},
    {.key = "train.log_steps_ratio", .type = UT_CFG_FLOAT, AT(log_steps_ratio), .def = "0", GE(0),
     .doc = "> 0: log ratio times per epoch, i.e. every (optimizer steps per epoch) / ratio steps, rounded, at least 1 (the seed's meaning); overrides log_interval"},
    {.key = "train.log_steps_fraction", .type = UT_CFG_FLOAT, AT(log_steps_fraction), .def = "0", GE(0), LT(1),
     .doc = "in (0, 1): log every ceil(fraction x the run's optimizer steps) steps (transformers' logging_steps "
            "under 1); overrides log_interval"},
    {.key = "train.eval_strategy", .type = UT_CFG_ENUM, AT(eval_strategy), .def = "epoch",
     .values = strategies, .doc = "when to evaluate on the dev set"},
    {.key = "train.eval_interval", .type = UT_CFG_INT, AT(eval_interval), .def = "0", GE(0),
     .doc = "eval_strategy steps: evaluate every N steps"},
    {.key = "train.eval_steps_fraction", .type = UT_CFG_FLOAT, AT(eval_steps_fraction), .def = "0", GE(0), LT(1),
     .doc = "in (0, 1): evaluate every ceil(fraction x the run's optimizer steps) steps (transformers' eval_steps "
            "under 1; eval_strategy steps unless given); overrides eval_interval"},
    {.key = "train.save_strategy", .type = UT_CFG_ENUM, AT(save_strategy), .def = "epoch",
     .values = strategies, .doc = "when to write a checkpoint"},
    {.key = "train.save_interval", .type = UT_CFG_INT, AT(save_interval), .def = "0", GE(0),
     .doc = "save_strategy steps: save every N steps"},
    {.key = "train.save_steps_ratio", .type = UT_CFG_FLOAT, AT(save_steps_ratio), .def = "0", GE(0),
     .doc = "> 0: save ratio times per epoch, i.e. every (optimizer steps per epoch) / ratio steps, rounded, at least 1 (the seed's meaning; save_strategy steps unless given)"},
    {.key = "train.save_steps_fraction", .type = UT_CFG_FLOAT, AT(save_steps_fraction), .def = "0", GE(0), LT(1),
     .doc = "in (0, 1): save every ceil(fraction x the run's optimizer steps) steps (transformers' save_steps "
            "under 1; save_strategy steps unless given); overrides save_interval"},
    {.key = "train.save_total_limit", .type = UT_CFG_INT, AT(save_total_limit), .def = "0",
     GE(0), .doc = "newest checkpoints kept, the best one besides (0: keep every one, e.g. one per epoch)"},
    {.key = "train.save_only_model", .type = UT_CFG_BOOL, AT(save_only_model), .def = "false",
     .doc = "checkpoints hold the weights alone, not the optimizer state (a third of AdamW's checkpoint): for "
            "utrain test, export and load_dir, but no run resumes from them; a stop signal's checkpoint is "
            "still whole (Hugging Face's save_only_model)"},
    {.key = "train.best_metric", .type = UT_CFG_STR, AT(best_metric), .def = "dev/loss",
     .doc = "metric that picks the best checkpoint: `dev/<name>` or `train/<name>`"},
    {.key = "train.metrics", .type = UT_CFG_STR, AT(metrics), .def = "", .names = true,
     .doc = "classification scores each evaluation and `utrain test` report beside accuracy, a list of: "
            "`precision`, `recall`, `f1` (two classes: label 1's), `f1_macro`, `f1_weighted`, "
            "`matthews_correlation` (`accuracy` is always there; train.best_metric's dev/<name> is added)"},
    {.key = "train.entity_metrics", .type = UT_CFG_BOOL, AT(entity_metrics), .def = "false",
     .doc = "tagged_text: each evaluation also reports each entity type's precision, recall and f1 "
            "(`PER_precision`, `PER_recall`, `PER_f1`, ...; at most 16 types), as run_ner's "
            "return_entity_level_metrics"},
    {.key = "train.greater_is_better", .type = UT_CFG_BOOL, AT(greater_is_better),
     .def = "false", .doc = "a larger best_metric is better (see the note below)"},
    {.key = "train.grad_clip", .type = UT_CFG_FLOAT, AT(grad_clip), .def = "0", GE(0),
     .hashed = true, .doc = "clip the gradient 2-norm to this (0: off)"},
    {.key = "train.checkpoint_activations", .type = UT_CFG_BOOL, AT(checkpoint_activations),
     .def = "false", .doc = "recompute each transformer block's activations in backward to save memory (gpt2, bert, roberta, bart, t5; refused for the others)"},
    {.key = "train.test_at_end", .type = UT_CFG_BOOL, AT(test_at_end), .def = "false",
     .doc = "when training has ended (not after a stop), evaluate the best checkpoint on the dev and test splits "
            "as `utrain test RUN` does, writing dev_results.json, test_results.json and the predictions "
            "(Hugging Face's do_predict)"},
    {.key = "train.precision", .type = UT_CFG_ENUM, AT(precision), .def = "fp32",
     .values = precisions,
     .doc = "matmuls, convolutions and attention in bf16 or fp16 with fp32 accumulation (autocast); fp32 master weights (docs/training.md)"},
    {.key = "train.eval_precision", .type = UT_CFG_ENUM, AT(eval_precision), .def = "auto",
     .values = eval_precisions,
     .doc = "evaluation and test: autocast in this precision instead of train.precision (auto); Hugging Face's "
            "bf16_full_eval and fp16_full_eval"},
    {.key = "train.eval_delay", .type = UT_CFG_FLOAT, AT(eval_delay), .def = "0", GE(0),
     .doc = "no evaluation before this step (train.eval_strategy: steps) or this many epochs (epoch) "
            "(Hugging Face's eval_delay)"},
    {.key = "train.load_best_at_end", .type = UT_CFG_BOOL, AT(load_best_at_end), .def = "true",
     .doc = "the run's model is its best checkpoint (train.best_metric), which train.test_at_end, utrain test, "
            "generate and export take; false: its last checkpoint (Hugging Face's load_best_model_at_end)"},
    {.key = "train.eval_on_start", .type = UT_CFG_BOOL, AT(eval_on_start), .def = "false",
     .doc = "evaluate on dev before the first step (and before a resumed run's next), as a sanity check that "
            "neither counts as the best nor stops early (Hugging Face's eval_on_start)"},
    {.key = "train.tf32", .type = UT_CFG_BOOL, AT(tf32), .def = "false",
     .doc = "device cuda: float32 products (linear, matmul, convolutions; not attention's own kernels) on the "
            "tensor cores in TF32, operands rounded to 10 mantissa bits, float32 accumulation: about 2.4x faster "
            "on GPT-2 (PyTorch's allow_tf32, Hugging Face's tf32; docs/gpu.md); false: exact float32. Refused on "
            "cpu and sim"},
    {.key = "train.peak_tflops", .type = UT_CFG_FLOAT, AT(peak_tflops), .def = "0", GE(0), LE(1e6),
     .doc = "the dense peak TFLOP/s of the device one rank computes on, for the train lines' mfu (model FLOPs "
            "utilization: the products' FLOPs per second over this peak; Lightning's available_flops); 0: the "
            "device's own figure where utrain knows it (GPUs: docs/training.md), else no mfu"},
    {.key = "train.profile_step", .type = UT_CFG_INT, AT(profile_step), .def = "-1", GE(-1),
     .doc = "profile the optimizer step that starts after this many (0: the first; -1: none): its model FLOPs, "
            "forward, backward and whole-step latency and FLOP rates, and with train.profile_detailed the time "
            "and rate of every op, on rank 0 (DeepSpeed's flops_profiler with its profile_step; docs/training.md)"},
    {.key = "train.profile_detailed", .type = UT_CFG_BOOL, AT(profile_detailed), .def = "true",
     .doc = "train.profile_step's profile also lists every op's time, calls and rates (DeepSpeed's detailed)"},
    {.key = "train.profile_file", .type = UT_CFG_STR, AT(profile_file), .def = "",
     .doc = "write train.profile_step's profile to this file instead of the console and run log (DeepSpeed's "
            "output_file)"},
    {.key = "train.wall_clock_breakdown", .type = UT_CFG_BOOL, AT(wall_clock_breakdown), .def = "false",
     .doc = "each train line is followed by the interval's mean time per step in forward, backward, the gradient "
            "reduction left after backward and the optimizer step, the device waited for at each boundary "
            "(DeepSpeed's wall_clock_breakdown); not with dist.pipeline_parallel or dist.strategy dp"},
    {.key = "train.label_smoothing", .type = UT_CFG_FLOAT, AT(label_smoothing), .def = "0", GE(0), LE(1),
     .hashed = true, .hash_if_set = true,
     .doc = "label smoothing of the cross-entropy and NLL losses, in training, evaluation and test: each "
            "example's loss is (1 - eps) -log p(target) + eps times the mean of -log p over the classes "
            "(Hugging Face's label_smoothing_factor, torch's label_smoothing); 0: none. Refused with "
            "dist.tensor_parallel > 1"},
    {.key = "train.neftune_alpha", .type = UT_CFG_FLOAT, AT(neftune_alpha), .def = "0", GE(0), LE(1e6),
     .hashed = true, .hash_if_set = true,
     .doc = "NEFTune: in training, uniform noise in [-m, m), m = alpha / sqrt(L d), added to the token "
            "embeddings (L the batch's padded length, d the width; gpt2, bert, roberta, bart, t5: Hugging Face's "
            "neftune_noise_alpha, the paper's 5 to 15); 0: none"},
    {.key = "train.count_input_tokens", .type = UT_CFG_ENUM, AT(count_input_tokens), .def = "no",
     .values = token_counts,
     .doc = "the train lines log num_input_tokens_seen, the input tokens trained on so far over all ranks "
            "(resumed from the checkpoint): all of each batch's (padded to its longest), or those its attention "
            "masks cover (non_padding; Hugging Face's include_num_input_tokens_seen)"},
    {.key = "train.init_scale", .type = UT_CFG_FLOAT, AT(init_scale), .def = "65536", GT(0),
     .doc = "fp16: initial loss scale (GradScaler's init_scale)"},
    {.key = "train.growth_interval", .type = UT_CFG_INT, AT(growth_interval), .def = "2000", GE(1),
     .doc = "fp16: steps without inf/NaN gradients before the loss scale doubles"},
    {.key = "train.loss_scale_hysteresis", .type = UT_CFG_INT, AT(loss_scale_hysteresis), .def = "1", GE(1),
     LE(1e9),
     .doc = "fp16: overflows tolerated (their steps skipped) before the loss scale backs off; it backs off at "
            "every overflow after that until it next grows (DeepSpeed's hysteresis; 1: GradScaler's rule)"},
    {.key = "train.consecutive_hysteresis", .type = UT_CFG_BOOL, AT(consecutive_hysteresis), .def = "false",
     .doc = "fp16: a clean step restores train.loss_scale_hysteresis, not only a growth (DeepSpeed's "
            "consecutive_hysteresis)"},
    {.key = "train.min_loss_scale", .type = UT_CFG_FLOAT, AT(min_loss_scale), .def = "0", GE(0),
     .doc = "fp16: the loss scale never backs off below this (DeepSpeed's min_loss_scale; 0: no floor, as "
            "GradScaler)"},
    {.key = "train.early_stopping_patience", .type = UT_CFG_INT, AT(early_stopping_patience),
     .def = "0", GE(0), .doc = "stop after N evaluations without improvement (0: off)"},
    {.key = "train.early_stopping_threshold", .type = UT_CFG_FLOAT,
     AT(early_stopping_threshold), .def = "0", GE(0),
     .doc = "smallest change of best_metric that counts as an improvement"},
    {.key = "train.logging_dir", .type = UT_CFG_STR, AT(logging_dir), .def = "",
     .doc = "the directory of the TensorBoard event files (\"\": RUN/tensorboard; Hugging Face's logging_dir)"},
    {.key = "train.progress", .type = UT_CFG_ENUM, AT(progress), .def = "auto",
     .values = progress_kinds, .doc = "progress display (auto: a bar on a terminal, else lines)"},

    /* ---- generate ---- */
    {.key = "generate.eval", .type = UT_CFG_BOOL, AT(gen_eval), .def = "false",
     .doc = "seq2seq: evaluation also generates for every dev/test example and reports bleu, rougeL and exact_match (Seq2SeqTrainer's predict_with_generate); test mode writes <split>_generations.tsv"},
    {.key = "generate.max_new_tokens", .type = UT_CFG_INT, AT(gen_max_new_tokens), .def = "64", GE(1), LE(1e6),
     .doc = "tokens generated at most after the decoder's start"},
    {.key = "generate.min_new_tokens", .type = UT_CFG_INT, AT(gen_min_new_tokens), .def = "0", GE(0), LE(1e6),
     .doc = "end of sequence is banned before this many new tokens"},
    {.key = "generate.num_beams", .type = UT_CFG_INT, AT(gen_num_beams), .def = "1", GE(1), LE(32),
     .doc = "1: greedy decoding (or sampling); more: beam search"},
    {.key = "generate.length_penalty", .type = UT_CFG_FLOAT, AT(gen_length_penalty), .def = "1.0",
     .doc = "beam search: a finished beam scores its log-probability / length^length_penalty"},
    {.key = "generate.early_stopping", .type = UT_CFG_ENUM, AT(gen_early_stopping), .def = "false",
     .values = early_kinds, .doc = "beam search: false, true or never, as transformers' generate"},
    {.key = "generate.no_repeat_ngram_size", .type = UT_CFG_INT, AT(gen_no_repeat_ngram_size), .def = "0",
     GE(0), LE(1e6), .doc = "n-grams of this size occur at most once (0: off)"},
    {.key = "generate.do_sample", .type = UT_CFG_BOOL, AT(gen_do_sample), .def = "false",
     .doc = "sample from the distribution (num_beams 1) with the run's seed"},
    {.key = "generate.temperature", .type = UT_CFG_FLOAT, AT(gen_temperature), .def = "1.0", GT(0),
     .doc = "sampling: logits divided by this"},
    {.key = "generate.top_k", .type = UT_CFG_INT, AT(gen_top_k), .def = "50", GE(0), LE(1e9),
     .doc = "sampling: keep the k most likely tokens (0: all)"},
    {.key = "generate.top_p", .type = UT_CFG_FLOAT, AT(gen_top_p), .def = "1.0", GT(0), LE(1),
     .doc = "sampling: keep the smallest set of tokens whose probability reaches top_p"},
    {.key = "generate.num_return_sequences", .type = UT_CFG_INT, AT(gen_num_return_sequences), .def = "1", GE(1),
     LE(1024),
     .doc = "texts per source in `utrain generate`: independent draws with do_sample, else the best beams "
            "(<= num_beams); evaluation by generation scores the first (the best beam)"},

    /* ---- optim ---- */
    {.key = "optim.name", .type = UT_CFG_ENUM, AT(optim_name), .def = "adamw",
     .values = optimizers, .hashed = true, .doc = "optimizer: adamw, sgd (as torch.optim), lion (as lion-pytorch's Lion), adafactor (as "
                           "transformers' Adafactor; not with ZeRO or tensor parallelism)"},
    {.key = "optim.lr", .type = UT_CFG_FLOAT, AT(lr), .def = "1e-3", GE(0), .hashed = true,
     .doc = "peak learning rate"},
    {.key = "optim.weight_decay", .type = UT_CFG_FLOAT, AT(weight_decay), .def = "0.01", GE(0),
     .hashed = true, .doc = "weight decay (decoupled for adamw and lion)"},
    {.key = "optim.beta1", .type = UT_CFG_FLOAT, AT(beta1), .def = "0.9", GE(0), LT(1),
     .hashed = true, .doc = "adamw: first-moment decay; lion: the weight of the momentum in the step's sign"},
    {.key = "optim.beta2", .type = UT_CFG_FLOAT, AT(beta2), .def = "0.999", GE(0), LT(1),
     .hashed = true, .doc = "adamw: second-moment decay; lion: the momentum's decay (the Lion paper's 0.99 is "
                           "not the default: Hugging Face, FlagAI and DeepSpeed pass 0.999)"},
    {.key = "optim.betas", .type = UT_CFG_LIST, AT(beta1), .count = 2, GE(0), LT(1),
     .doc = "adamw, lion: [beta1, beta2] in one key"},
    {.key = "optim.eps", .type = UT_CFG_FLOAT, AT(eps), .def = "1e-8", GT(0), .hashed = true,
     .doc = "adamw: added to the denominator"},
    {.key = "optim.momentum", .type = UT_CFG_FLOAT, AT(momentum), .def = "0", GE(0),
     .hashed = true, .doc = "sgd: momentum"},
    {.key = "optim.dampening", .type = UT_CFG_FLOAT, AT(dampening), .def = "0", GE(0),
     .hashed = true, .doc = "sgd: dampening of the momentum"},
    {.key = "optim.nesterov", .type = UT_CFG_BOOL, AT(nesterov), .def = "false", .hashed = true,
     .doc = "sgd: Nesterov momentum (needs momentum > 0, dampening 0)"},
    {.key = "optim.adafactor_beta1", .type = UT_CFG_FLOAT, AT(adafactor_beta1), .def = "0", GE(0), LT(1),
     .hashed = true, .hash_if_set = true,
     .doc = "adafactor: decay of a first moment of the updates; 0: none (transformers' beta1 None, its default)"},
    {.key = "optim.adafactor_eps1", .type = UT_CFG_FLOAT, AT(adafactor_eps1), .def = "1e-30", GT(0),
     .hashed = true, .hash_if_set = true, .doc = "adafactor: added to the squared gradient (transformers' eps[0])"},
    {.key = "optim.adafactor_eps2", .type = UT_CFG_FLOAT, AT(adafactor_eps2), .def = "1e-3", GE(0),
     .hashed = true, .hash_if_set = true,
     .doc = "adafactor: the floor of a parameter's RMS that scales its rate (transformers' eps[1])"},
    {.key = "optim.adafactor_clip", .type = UT_CFG_FLOAT, AT(adafactor_clip), .def = "1", GT(0),
     .hashed = true, .hash_if_set = true,
     .doc = "adafactor: an update's RMS is scaled down to at most this (transformers' clip_threshold)"},
    {.key = "optim.adafactor_decay_rate", .type = UT_CFG_FLOAT, AT(adafactor_decay_rate), .def = "-0.8", GE(-1),
     LE(0), .hashed = true, .hash_if_set = true,
     .doc = "adafactor: the second moment's decay at step t is 1 - t^rate (transformers' decay_rate)"},
    {.key = "optim.adafactor_scale_parameter", .type = UT_CFG_BOOL, AT(adafactor_scale_parameter), .def = "true",
     .hashed = true, .hash_if_set = true,
     .doc = "adafactor: scale each parameter's rate by its RMS (transformers' default; the Trainer's optim: "
            "adafactor sets false)"},
    {.key = "optim.adafactor_relative_step", .type = UT_CFG_BOOL, AT(adafactor_relative_step), .def = "false",
     .hashed = true, .hash_if_set = true,
     .doc = "adafactor: the rate is min(1e-2, 1/sqrt(step)) (transformers' relative_step; optim.lr and the "
            "schedule are then not used: optim.schedule must be constant, without warmup)"},
    {.key = "optim.adafactor_warmup_init", .type = UT_CFG_BOOL, AT(adafactor_warmup_init), .def = "false",
     .hashed = true, .hash_if_set = true,
     .doc = "adafactor with relative_step: the rate is min(1e-6 x step, 1/sqrt(step)) (transformers' warmup_init)"},
    {.key = "optim.schedule", .type = UT_CFG_ENUM, AT(schedule), .def = "constant",
     .values = schedules, .hashed = true,
     .doc = "learning-rate schedule after warmup (docs/training.md: Schedules; wsd: warmup, stable, decay; "
            "annealing: FlagAI's AnnealingLR; plateau: torch's ReduceLROnPlateau, lowered by the evaluations; "
            "greedy: transformers' GreedyLR, lowered and raised by them)"},
    {.key = "optim.warmup_steps", .type = UT_CFG_INT, AT(warmup_steps), .def = "0", GE(0),
     .hashed = true, .doc = "linear warmup steps"},
    {.key = "optim.warmup_ratio", .type = UT_CFG_FLOAT, AT(warmup_ratio), .def = "0", GE(0), .hashed = true,
     .doc = "> 0: linear warmup over ratio x total optimizer steps (rounded down; up with optim.warmup_from_zero); overrides warmup_steps"},
    {.key = "optim.step_size", .type = UT_CFG_INT, AT(step_size), .def = "1", GE(1),
     .hashed = true, .doc = "step schedule: multiply by gamma every N steps"},
    {.key = "optim.min_lr", .type = UT_CFG_FLOAT, AT(min_lr), .def = "0", GE(0), .hashed = true,
     .doc = "the decaying schedules' final learning rate (cosine, cosine_restarts, linear, polynomial, wsd); "
            "plateau, greedy: the rate's floor"},
    {.key = "optim.min_lr_ratio", .type = UT_CFG_FLOAT, AT(min_lr_ratio), .def = "0", GE(0), LE(1),
     .hashed = true, .hash_if_set = true,
     .doc = "> 0: optim.min_lr as a fraction of optim.lr (transformers' min_lr_rate, min_lr_ratio)"},
    {.key = "optim.num_cycles", .type = UT_CFG_FLOAT, AT(num_cycles), .def = "0", GE(0), .hashed = true,
     .hash_if_set = true,
     .doc = "cosine (and wsd's cosine decay): waves over the decay (0: 0.5, down to min_lr once); "
            "cosine_restarts: cycles, each from lr down to min_lr (0: 1)"},
    {.key = "optim.power", .type = UT_CFG_FLOAT, AT(power), .def = "1", GT(0), .hashed = true,
     .hash_if_set = true, .doc = "polynomial: the decay's power (1: linear)"},
    {.key = "optim.timescale", .type = UT_CFG_INT, AT(timescale), .def = "0", GE(0), .hashed = true,
     .hash_if_set = true,
     .doc = "inverse_sqrt: lr x sqrt(T / (steps after warmup + T)); 0: optim.warmup_steps, or 10000 without "
            "warmup"},
    {.key = "optim.decay_steps", .type = UT_CFG_INT, AT(decay_steps), .def = "0", GE(0), .hashed = true,
     .hash_if_set = true,
     .doc = "wsd: the run's last N steps decay to min_lr (after warmup, the rate is lr until then)"},
    {.key = "optim.decay_type", .type = UT_CFG_ENUM, AT(decay_type), .def = "cosine", .values = decay_types,
     .hashed = true, .hash_if_set = true,
     .doc = "wsd: the decay's shape; annealing: cosine (FlagAI 1.7 and later) or linear (FlagAI 1.6 and earlier)"},
    {.key = "optim.schedule_steps", .type = UT_CFG_INT, AT(schedule_steps), .def = "0", GE(0), .hashed = true,
     .hash_if_set = true,
     .doc = "the decaying schedules reach optim.min_lr at this step (0: the run's last; DeepSpeed's "
            "total_num_steps); past it the rate stays there"},
    {.key = "optim.warmup_type", .type = UT_CFG_ENUM, AT(warmup_type), .def = "linear", .values = warmup_types,
     .hashed = true, .hash_if_set = true,
     .doc = "the ds_* schedules' warmup: DeepSpeed's linear or log (ln(i+1)/ln(W)) rise"},
    {.key = "optim.warmup_min_ratio", .type = UT_CFG_FLOAT, AT(warmup_min_ratio), .def = "0", GE(0), LE(1),
     .hashed = true, .hash_if_set = true,
     .doc = "ds_warmup_cosine: its warmup starts at this x optim.lr (DeepSpeed's warmup_min_ratio)"},
    {.key = "optim.gamma", .type = UT_CFG_FLOAT, AT(gamma), .def = "0.1", GT(0), .hashed = true,
     .doc = "step schedule: decay factor"},
    {.key = "optim.warmup_from_zero", .type = UT_CFG_BOOL, AT(warmup_from_zero), .def = "false", .hashed = true,
     .hash_if_set = true,
     .doc = "transformers' warmup: the rate rises as lr x step / warmup, its first step at rate 0, over "
            "optim.warmup_ratio x steps rounded up (a TrainingArguments file sets it), instead of lr x (step + 1) / "
            "warmup over the ratio's steps rounded down; not the ds_* and annealing schedules, which have their own"},
    {.key = "optim.plateau_mode", .type = UT_CFG_ENUM, AT(plateau_mode), .def = "auto", .values = plateau_modes,
     .hashed = true, .hash_if_set = true,
     .doc = "plateau: min, the rate falls when train.best_metric stops falling; max, when it stops rising; auto: "
            "max where train.greater_is_better (torch's and a TrainingArguments file's default is min)"},
    {.key = "optim.plateau_factor", .type = UT_CFG_FLOAT, AT(plateau_factor), .def = "0.1", GT(0), LT(1),
     .hashed = true, .hash_if_set = true, .doc = "plateau: the rate is multiplied by this when it falls"},
    {.key = "optim.plateau_patience", .type = UT_CFG_INT, AT(plateau_patience), .def = "10", GE(0),
     .hashed = true, .hash_if_set = true,
     .doc = "plateau: the rate falls after more than this many evaluations in a row without an improvement"},
    {.key = "optim.plateau_threshold", .type = UT_CFG_FLOAT, AT(plateau_threshold), .def = "1e-4", GE(0),
     .hashed = true, .hash_if_set = true,
     .doc = "plateau: an improvement beats the best by more than this (relative, or absolute with "
            "optim.plateau_threshold_mode: abs)"},
    {.key = "optim.plateau_threshold_mode", .type = UT_CFG_ENUM, AT(plateau_threshold_mode), .def = "rel",
     .values = threshold_modes, .hashed = true, .hash_if_set = true,
     .doc = "plateau: rel, better than best x (1 -/+ threshold); abs, than best -/+ threshold"},
    {.key = "optim.plateau_cooldown", .type = UT_CFG_INT, AT(plateau_cooldown), .def = "0", GE(0),
     .hashed = true, .hash_if_set = true,
     .doc = "plateau: evaluations after a fall that count no bad ones"},
    {.key = "optim.plateau_eps", .type = UT_CFG_FLOAT, AT(plateau_eps), .def = "1e-8", GE(0), .hashed = true,
     .hash_if_set = true, .doc = "plateau: a fall smaller than this is not made"},
    {.key = "optim.greedy_mode", .type = UT_CFG_ENUM, AT(greedy_mode), .def = "auto", .values = plateau_modes,
     .hashed = true, .hash_if_set = true,
     .doc = "greedy: min, a smaller train.best_metric is an improvement; max, a larger one; auto: max where "
            "train.greater_is_better (GreedyLR's and a TrainingArguments file's default is min)"},
    {.key = "optim.greedy_factor", .type = UT_CFG_FLOAT, AT(greedy_factor), .def = "0.95", GT(0), LT(1),
     .hashed = true, .hash_if_set = true,
     .doc = "greedy: the rate is multiplied by this when it falls, divided by it when it rises"},
    {.key = "optim.greedy_patience", .type = UT_CFG_INT, AT(greedy_patience), .def = "10", GE(0), .hashed = true,
     .hash_if_set = true,
     .doc = "greedy: the rate rises after more than this many improvements in a row, falls after more than this "
            "many evaluations without one"},
    {.key = "optim.greedy_threshold", .type = UT_CFG_FLOAT, AT(greedy_threshold), .def = "1e-6", GE(0),
     .hashed = true, .hash_if_set = true,
     .doc = "greedy: an improvement beats the best by more than this (absolute, or relative with "
            "optim.greedy_threshold_mode: rel)"},
    {.key = "optim.greedy_threshold_mode", .type = UT_CFG_ENUM, AT(greedy_threshold_mode), .def = "abs",
     .values = threshold_modes, .hashed = true, .hash_if_set = true,
     .doc = "greedy: abs, better than best -/+ threshold; rel, than best x (1 -/+ threshold)"},
    {.key = "optim.greedy_cooldown", .type = UT_CFG_INT, AT(greedy_cooldown), .def = "0", GE(0), .hashed = true,
     .hash_if_set = true, .doc = "greedy: evaluations after a fall that are not judged"},
    {.key = "optim.greedy_warmup", .type = UT_CFG_INT, AT(greedy_warmup), .def = "0", GE(0), .hashed = true,
     .hash_if_set = true, .doc = "greedy: evaluations after a rise that are not judged"},
    {.key = "optim.greedy_max_lr", .type = UT_CFG_FLOAT, AT(greedy_max_lr), .def = "1", GT(0), .hashed = true,
     .hash_if_set = true, .doc = "greedy: the rate never rises above this"},
    {.key = "optim.greedy_eps", .type = UT_CFG_FLOAT, AT(greedy_eps), .def = "1e-8", GE(0), .hashed = true,
     .hash_if_set = true, .doc = "greedy: a fall or a rise smaller than this is not made"},
    {.key = "optim.greedy_smooth", .type = UT_CFG_BOOL, AT(greedy_smooth), .def = "false", .hashed = true,
     .hash_if_set = true,
     .doc = "greedy: judge the average of the last optim.greedy_window_size metrics instead of each one"},
    {.key = "optim.greedy_window_size", .type = UT_CFG_INT, AT(greedy_window_size), .def = "50", GE(1), LE(256),
     .hashed = true, .hash_if_set = true, .doc = "greedy with optim.greedy_smooth: the metrics averaged"},
    {.key = "optim.greedy_reset_start", .type = UT_CFG_INT, AT(greedy_reset_start), .def = "500", GE(1),
     .hashed = true, .hash_if_set = true,
     .doc = "greedy: after this many falls that leave the rate at optim.min_lr (a rise counts again from "
            "the start) the rate goes back to optim.lr and the best metric is forgotten"},
    {.key = "optim.schedule_on_skip", .type = UT_CFG_ENUM, AT(schedule_on_skip), .def = "hold",
     .values = skip_rules, .hashed = true, .hash_if_set = true,
     .doc = "fp16: a step skipped for inf/NaN gradients holds the schedule (the next step takes the rate "
            "the skipped one would have: Hugging Face's Trainer, Accelerate, DeepSpeed, Megatron-LM) or advances "
            "it (a PyTorch loop calling scheduler.step() every iteration, FlagAI's Trainer)"},

    /* ---- dist ---- */
    {.key = "dist.strategy", .type = UT_CFG_ENUM, AT(dist_strategy), .def = "ddp",
     .values = dist_strategies,
     .doc = "data-parallel strategy (docs/distributed.md); one process runs it as plain training"},
    {.key = "dist.tensor_parallel", .type = UT_CFG_INT, AT(tensor_parallel), .def = "1", GE(1),
     .doc = "ranks each model is split over, Megatron-LM style (gpt2, bert, roberta, bart, t5; FlagAI's "
            "model_parallel_size): the world is tensor_parallel x data-parallel ranks, dist.strategy (ddp, "
            "zero1-zero3) over the data-parallel ones (docs/distributed.md)"},
    {.key = "dist.sequence_parallel", .type = UT_CFG_BOOL, AT(sequence_parallel), .def = "false",
     .doc = "with dist.tensor_parallel: the layer norms, dropouts and residual adds of each block work on 1/tp of "
            "the sequence on each rank (Megatron-LM's sequence parallelism: all-gathers and reduce-scatters instead "
            "of all-reduces, the activations there cut by tp; gpt2's language model; the same results)"},
    {.key = "dist.pipeline_parallel", .type = UT_CFG_INT, AT(pipeline_parallel), .def = "1", GE(1),
     .doc = "pipeline stages the model's blocks are split into (gpt2's language model, bert, roberta, bart as "
            "a classifier or sequence-to-sequence model; DeepSpeed's pipeline "
            "parallelism): the world is pipeline_parallel x tensor_parallel x data-parallel ranks, and each "
            "optimizer step's train.gradient_accumulation_steps micro-batches flow through the stages "
            "(docs/distributed.md)"},
    {.key = "dist.pipeline_schedule", .type = UT_CFG_ENUM, AT(pipeline_schedule), .def = "1f1b",
     .values = pipeline_schedules,
     .doc = "the order of a stage's forwards and backwards: 1f1b (one forward, one backward once the pipeline is "
            "full: at most pipeline_parallel micro-batches' activations held) or gpipe (every forward, then every "
            "backward: all of them held); the same results"},
    {.key = "dist.pipeline_blocks", .type = UT_CFG_STR, AT(pipeline_blocks), .def = "",
     .doc = "blocks per pipeline stage, comma-separated (\"9,3\"; they add up to the model's blocks); empty: "
            "balanced by compute, the last stage's head counted as the blocks it costs"},
    {.key = "dist.bucket_mb", .type = UT_CFG_FLOAT, AT(bucket_mb), .def = "25", GT(0),
     .doc = "gradient bucket size in MiB (all-reduce for ddp/zero1, reduce-scatter for zero2/zero3)"},
    {.key = "dist.wrap", .type = UT_CFG_ENUM, AT(dist_wrap), .def = "block", .values = wrap_policies,
     .doc = "zero3: parameters gathered together: per block (h.3.*), per parameter, or the whole model"},
    {.key = "dist.reshard_after_forward", .type = UT_CFG_BOOL, AT(reshard_after_forward),
     .def = "true", .doc = "zero3: free a unit's gathered parameters after its forward (false: keep them for backward)"},
    {.key = "dist.shard_size", .type = UT_CFG_INT, AT(shard_size), .def = "0", GE(-1), LE(1 << 20),
     .doc = "zero1-3, hybrid sharding (FSDP's HYBRID_SHARD, DeepSpeed's MiCS): the model state is sharded over "
            "groups of this many data-parallel ranks and replicated across the groups, each step's gradient "
            "summed within a group, then across the groups (an all-reduce of each rank's shard); 0: one group of "
            "every rank (plain ZeRO); -1: a group per node (the ranks on one host); it must divide the "
            "data-parallel ranks (docs/distributed.md)"},
    {.key = "dist.offload_optimizer", .type = UT_CFG_ENUM, AT(offload_optimizer), .def = "none",
     .values = offload_targets,
     .doc = "ZeRO-Offload (zero1, zero2): cpu keeps the optimizer's state and this rank's float32 master "
            "shard in host memory and runs the update on the CPU's threads; the device keeps the model "
            "and its gradients (docs/distributed.md)"},
    {.key = "dist.comm_hook", .type = UT_CFG_ENUM, AT(comm_hook), .def = "none", .values = comm_hooks,
     .doc = "ddp, zero1: all-reduce the gradients in 16 bits (PyTorch's bf16_compress_hook / fp16_compress_hook, "
            "Accelerate's comm_hook): half the bytes between ranks, gradients rounded to bf16 or fp16 on the way"},
    {.key = "dist.device_comm", .type = UT_CFG_ENUM, AT(device_comm), .def = "auto", .values = device_comms,
     .doc = "a model on a device (cuda, sim): how ranks exchange its gradients and parameters. direct: on the "
            "device's own memory (NCCL on cuda, one GPU per rank: PyTorch's backend='nccl'); host: through "
            "page-locked host memory and MPI or TCP (several ranks may share a GPU); auto: direct where every "
            "rank can, else host, the log says which (docs/distributed.md)"},
    {.key = "dist.timeout_s", .type = UT_CFG_FLOAT, AT(timeout_s), .def = "300", GE(0),
     .doc = "a collective running longer than this ends every rank with a report (0: no limit)"},
    {.key = "dist.nproc_per_node", .type = UT_CFG_INT, AT(nproc_per_node), .def = "1", GE(1),
     .doc = "processes on this node; > 1 makes `utrain train` start them (dist.launcher says how)"},
    {.key = "dist.nodes", .type = UT_CFG_INT, AT(nodes), .def = "1", GE(1),
     .doc = "nodes in the job; > 1: run `utrain train` once on each node with its dist.current_node, and the "
            "ranks of all nodes meet at master_addr:master_port (TCP), or start the whole job with mpirun"},
    {.key = "dist.current_node", .type = UT_CFG_INT, AT(current_node), .def = "0", GE(0),
     .doc = "this node's index (< nodes): its ranks are current_node x nproc_per_node and up"},
    {.key = "dist.master_addr", .type = UT_CFG_STR, AT(master_addr), .def = "127.0.0.1",
     .doc = "address of node 0, which every node's ranks reach (nodes > 1)"},
    {.key = "dist.master_port", .type = UT_CFG_INT, AT(master_port), .def = "29500", GE(1),
     .doc = "port on node 0 where the ranks of all nodes meet (nodes > 1; one node picks a free port)"},
    {.key = "dist.launcher", .type = UT_CFG_ENUM, AT(launcher), .def = "auto", .values = launchers,
     .doc = "how `utrain train` starts this node's ranks: mpi (mpirun, shared memory between them), tcp (the "
            "ranks are children of utrain and talk over TCP, as under torchrun), auto (mpi on one node when "
            "mpirun is installed, else tcp; tcp for nodes > 1)"},
};
const int ut_cfg_nkeys = (int)(sizeof ut_cfg_schema / sizeof ut_cfg_schema[0]);

const ut_cfg_alias ut_cfg_aliases[] = {
    {"epochs", "train.epochs"},
    {"max_steps", "train.max_steps"},
    {"batch_size", "train.batch_size"},
    {"auto_find_batch_size", "train.auto_find_batch_size"},
    {"gradient_accumulation_steps", "train.gradient_accumulation_steps"},
    {"log_interval", "train.log_interval"},
    {"eval_interval", "train.eval_interval"},
    {"save_interval", "train.save_interval"},
    {"eval_strategy", "train.eval_strategy"},
    {"save_strategy", "train.save_strategy"},
    {"warmup_steps", "optim.warmup_steps"},
    {"warmup_ratio", "optim.warmup_ratio"},
    {"warmup_proportion", "optim.warmup_ratio"},
    {"clip_grad", "train.grad_clip"}, /* FlagAI's */
    {"log_steps_ratio", "train.log_steps_ratio"},
    {"save_steps_ratio", "train.save_steps_ratio"},
    {"num_epochs", "train.epochs"},
    {"max_length", "data.max_len"},
    /* Hugging Face's summarization and translation scripts and Seq2SeqTrainingArguments */
    {"max_source_length", "data.max_source_len"},
    {"max_target_length", "data.max_target_len"},
    {"source_prefix", "data.source_prefix"},
    {"predict_with_generate", "generate.eval"},
    {"generation_num_beams", "generate.num_beams"},
    {"num_beams", "generate.num_beams"},
    {"num_return_sequences", "generate.num_return_sequences"},
    {"max_new_tokens", "generate.max_new_tokens"},
    {"num_labels", "model.num_classes"},
    {"checkpoint_activations", "train.checkpoint_activations"},
    {"gradient_checkpointing", "train.checkpoint_activations"},
    {"precision", "train.precision"},
    {"init_scale", "train.init_scale"},
    /* Hugging Face TrainingArguments' names, with the same meaning */
    {"max_grad_norm", "train.grad_clip"},
    {"per_device_train_batch_size", "train.batch_size"},
    {"per_device_eval_batch_size", "train.eval_batch_size"},
    {"num_train_epochs", "train.epochs"},
    {"evaluation_strategy", "train.eval_strategy"},
    {"logging_steps", "train.log_interval"},
    {"eval_steps", "train.eval_interval"},
    {"save_steps", "train.save_interval"},
    {"save_total_limit", "train.save_total_limit"},
    {"save_only_model", "train.save_only_model"},
    {"greater_is_better", "train.greater_is_better"},
    {"lr_scheduler_type", "optim.schedule"},
    {"adam_beta1", "optim.beta1"},
    {"adam_beta2", "optim.beta2"},
    {"adam_epsilon", "optim.eps"},
    {"growth_interval", "train.growth_interval"},
    {"lr", "optim.lr"},
    {"learning_rate", "optim.lr"},
    {"weight_decay", "optim.weight_decay"},
    {"tf32", "train.tf32"},
    {"data_seed", "data.seed"},
    {"ddp_timeout", "dist.timeout_s"},
    {"logging_first_step", "train.log_first_step"},
    {"eval_on_start", "train.eval_on_start"},
    {"eval_delay", "train.eval_delay"},
    {"logging_dir", "train.logging_dir"},
    {"group_by_length", "data.group_by_length"},
    {"ddp_bucket_cap_mb", "dist.bucket_mb"},
    {"dataloader_prefetch_factor", "data.prefetch"},
    {"label_smoothing_factor", "train.label_smoothing"},
    {"label_smoothing", "train.label_smoothing"},
    {"neftune_noise_alpha", "train.neftune_alpha"},
    {"dataloader_drop_last", "data.drop_last"},
    /* the Hugging Face example scripts' (run_glue, run_classification, ...) model and data arguments */
    {"model_name_or_path", "model.pretrained"},
    {"tokenizer_name", "data.tokenizer"},
    {"train_file", "data.train_path"},
    {"validation_file", "data.dev_path"},
    {"test_file", "data.test_path"},
    {"max_seq_length", "data.max_len"},
    {"max_train_samples", "data.max_train_samples"},
    {"max_eval_samples", "data.max_eval_samples"},
    {"max_predict_samples", "data.max_predict_samples"},
    {"ignore_mismatched_sizes", "model.ignore_mismatched_sizes"},
    {"text_column_names", "data.text_column"},          /* run_classification's */
    {"label_column_name", "data.label_column"},
    {"text_column_name", "data.text_column"},           /* run_ner's */
    {"label_all_tokens", "data.label_all_tokens"},
    {"mlm_probability", "data.mlm_probability"},        /* run_mlm's */
    {"line_by_line", "data.line_by_line"},
    {"block_size", "data.seq_len"},                     /* run_clm's */
    {"keep_linebreaks", "data.keep_linebreaks"},
    {"return_entity_level_metrics", "train.entity_metrics"},
    {"text_column_delimiter", "data.text_column_delimiter"},
    {"text_column", "data.source_field"},               /* run_summarization's */
    {"summary_column", "data.target_field"},
    /* a section given a scalar names its kind: `model: gpt2` */
    {"model", "model.name"},
    {"data", "data.name"},
    {"optim", "optim.name"},
    {"gpus", "dist.nproc_per_node"},
    {"nodes", "dist.nodes"},
    {"current_node", "dist.current_node"},
    {"master_addr", "dist.master_addr"},
    {"master_port", "dist.master_port"},
    {"dist.gpus", "dist.nproc_per_node"},
    {"num_gpus", "dist.nproc_per_node"},
    {"num_nodes", "dist.nodes"},
    {"train.micro_batches", "train.gradient_accumulation_steps"}, /* a pipeline's micro-batches per step */
    {"pipeline_parallel_size", "dist.pipeline_parallel"},
    {"master_ip", "dist.master_addr"},
};
const int ut_cfg_naliases = (int)(sizeof ut_cfg_aliases / sizeof ut_cfg_aliases[0]);

const char *const ut_cfg_sections[] = {"", "model", "data", "train", "generate", "optim", "dist"};
const int ut_cfg_nsections = 7;

// --- lookups

const char *ut_cfg_resolve(const char *key) {
    for (int i = 0; i < ut_cfg_naliases; i++)
        if (!strcmp(ut_cfg_aliases[i].alias, key)) return ut_cfg_aliases[i].key;
    return key;
}

const ut_cfg_key *ut_cfg_find(const char *key) {
    for (int i = 0; i < ut_cfg_nkeys; i++)
        if (!strcmp(ut_cfg_schema[i].key, key)) return &ut_cfg_schema[i];
    return NULL;
}

void ut_cfg_section(const char *key, char *buf, size_t n) {
    const char *dot = strchr(key, '.');
    size_t len = dot ? (size_t)(dot - key) : 0;
    snprintf(buf, n, "%.*s", (int)len, key);
}

bool ut_cfg_is_model_opt(const char *key) {
    return !strncmp(key, "model.", 6) && key[6] && strcmp(key, "model.name") != 0;
}

// --- public entry points

void ut_config_init(ut_config *c) {
    char err[256];
    memset(c, 0, sizeof *c);
    c->model_opts = ut_kv_new();
    for (int i = 0; i < ut_cfg_nkeys; i++) {
        const ut_cfg_key *k = &ut_cfg_schema[i];
        if (k->type == UT_CFG_LIST) continue;
        if (ut_cfg_assign(c, k->key, k->def, err, sizeof err))
            ut_abort(__FILE__, __LINE__, "bad default in the config schema: %s", err);
    }
    /* the defaults are not the user's choice */
    c->greater_is_better_set = c->eval_strategy_set = c->save_strategy_set = c->model_name_set = false;
    c->min_lr_set = false;
    /* UTRAIN_DEVICE sets the device's default (a config's device key wins):
     * `make test-sim` runs the whole suite on the simulated device so */
    const char *dev = getenv("UTRAIN_DEVICE");
    if (dev && *dev) { /* checked by ut_config_validate, which names UTRAIN_DEVICE */
        snprintf(c->device, sizeof c->device, "%s", dev);
        c->device_from_env = true;
    }
}

void ut_config_free(ut_config *c) {
    ut_kv_free(c->model_opts);
    c->model_opts = NULL;
}

int ut_config_set(ut_config *c, const char *assignment, char *err, size_t n) {
    const char *eq = strchr(assignment, '=');
    char key[256], msg[768];
    if (!eq || eq == assignment || (size_t)(eq - assignment) >= sizeof key) {
        snprintf(err, n, "--set: '%s' is not key=value", assignment);
        return -1;
    }
    snprintf(key, sizeof key, "%.*s", (int)(eq - assignment), assignment);
    /* FlagAI's tensorboard_dir names the run's directory under it */
    if (ut_cfg_assign(c, key, eq + 1, msg, sizeof msg) ||
        (!strcmp(ut_cfg_resolve(key), "experiment_name") && ut_cfg_flagai_logging_dir(c, msg, sizeof msg))) {
        snprintf(err, n, "--set: %s", msg);
        return -1;
    }
    return 0;
}
