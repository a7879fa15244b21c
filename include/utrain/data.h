/* utrain data: datasets (IDX images, token shards, TSV text), tokenizers, the
 * sampler (per-process share, shuffled by seed and epoch, resumable at the
 * exact batch) and the loader (collates batches in a background thread).
 * defines: ut_dataset, ut_sampler, ut_loader, ut_batch, ut_vocab, dataset
 *          constructors, ut_tokenize_file, ut_tokenizer (pretrained WordPiece
 *          and byte-level BPE), ut_tok_opts, ut_tok_encoding,
 *          ut_seq2seq_opts (sequence-to-sequence text). */
#ifndef UTRAIN_DATA_H
#define UTRAIN_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "utrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- datasets ---- */
/* A dataset of fixed-shape examples: x (x_ne) of x_dtype and y (y_ne) of
 * y_dtype. get copies example i into x and y (contiguous); returns 0, or -1
 * with a message naming the file and offset/line. User datasets fill the
 * struct and the two function pointers. */
typedef struct ut_dataset ut_dataset;
struct ut_batch;
struct ut_dataset {
    const char *name;            /* for messages: the file or a description */
    int64_t n;                   /* number of examples */
    int x_ndim, y_ndim;          /* y_ndim 0: a scalar per example */
    int64_t x_ne[3], y_ne[3];
    ut_dtype x_dtype, y_dtype;
    int64_t num_classes;         /* classification: labels in [0, num_classes); else 0 */
    bool regression;             /* y is one f32 score per example (a regression task: model.num_labels
                                  * 1); num_classes is 0 */
    bool multi_label;            /* y is (num_classes) I32, 1 for each label the example has (a
                                  * multi-label task: model.problem_type multi_label_classification) */
    const char *const *label_names; /* labels written as names (MNLI's entailment, ...): class k's name,
                                     * num_classes of them; NULL for integer labels */
    int64_t vocab_size;          /* token inputs: ids in [0, vocab_size); else 0 */
    bool unlabeled;              /* no labels (a GLUE test file): y is 0, only predictions make sense */
    bool token_planes;           /* x is (3, max_len) I32 planes: token ids, token type ids,
                                  * attention mask (ut_tsv_dataset_open_pretrained); the default
                                  * collate pads a batch to its longest mask (ut_tok_batch_trim) */
    const int64_t *example_id;   /* optional: each example's id for predictions (a TSV's index
                                  * column); NULL: its position in the dataset */
    bool seq2seq;                /* x is (4, L) I32 planes: source ids, source mask, target ids,
                                  * target mask; y (L) the target ids, -100 past the target
                                  * (ut_seq2seq_dataset_open); the default collate trims a
                                  * batch with ut_seq2seq_batch_trim */
    bool token_labels;           /* token classification (NER, POS): x the token planes (3, max_len)
                                  * with token_planes set, y (max_len) I32 a class per token, -100
                                  * where no label counts (special tokens, padding, a word's later
                                  * pieces); the loader trims y with x (ut_tagged_dataset_open) */
    bool masked_lm;              /* masked language modeling (run_mlm): x the token planes (3, max_len)
                                  * (token_planes and token_labels set), y (max_len) I32 each position's
                                  * token where it may be masked, -100 at special tokens and padding;
                                  * collate masks each batch (ut_mlm_dataset_open) */
    int (*get)(ut_dataset *ds, int64_t i, void *x, void *y, char *err, size_t n);
    /* optional: run by the loader on each batch it reads, after the default
     * trim (b->x (count, x_ne...) as read, b->y (count, y_len or y_ne) as
     * trimmed, b->epoch and b->idx set) and before the model's prepare: a
     * data collator's changes, random ones drawn from b->epoch and b->idx
     * so they depend on neither ranks nor batches nor a resume. 0, or -1
     * with a message. NULL: none. */
    int (*collate)(const ut_dataset *ds, struct ut_batch *b, char *err, size_t n);
    void (*free)(ut_dataset *ds);
    void *impl;
    /* optional: example i's texts (which 0 the source, 1 the target) of a
     * dataset of texts (ut_seq2seq_text reads it); NULL: none */
    const char *(*text)(const ut_dataset *ds, int64_t i, int which);
    /* optional: example i's words (count in *n) of a dataset of words with
     * a tag each (ut_tagged_words reads it); NULL: none */
    const char *const *(*words)(const ut_dataset *ds, int64_t i, int64_t *n);
    /* optional: which columns of a text file the examples came from, for
     * the log ("text 'review', label 'label'"); NULL: a file without a
     * header, other data */
    const char *columns;
};
void ut_dataset_free(ut_dataset *ds);
/* How many outputs a model gives per example of ds: its classes, 1 for a
 * regression's score, 0 for data of neither (token shards, pairs of texts). */
static inline int64_t ut_dataset_outputs(const ut_dataset *ds) {
    return ds->regression ? 1 : ds->num_classes;
}

/* MNIST-format IDX files, plain or gzip. x (1, H, W) f32 = (pixel/255 - mean)/std,
 * y i32 label. Examples [lo, hi) of the file (hi = -1: to the end), for
 * carving a dev split. Labels >= 256 or beyond num_classes 10 are errors. */
ut_dataset *ut_idx_dataset_open(const char *images, const char *labels, double mean, double std,
                                int64_t lo, int64_t hi, char *err, size_t n);

/* Token shards in the llm.c .bin layout: 256 int32 header (magic 20240520,
 * version 1, token count), then uint16 tokens. pattern may be a glob; shards
 * are read in sorted order through mmap. Examples are consecutive windows of
 * seq_len + 1 tokens (x = the first seq_len, y = the next-token targets), not
 * overlapping. A token >= vocab_size is an error naming the shard and offset. */
ut_dataset *ut_token_dataset_open(const char *pattern, int64_t seq_len, int64_t vocab_size,
                                  char *err, size_t n);
/* Writes a .bin shard from a text file: tokenizer "byte" (ids 0..255), or a
 * pretrained tokenizer directory or file (ut_tokenizer_load) applied to the
 * whole text without special tokens; its ids must fit uint16 (GPT-2: 50257). */
int ut_tokenize_file(const char *tokenizer, const char *input, const char *output, char *err,
                     size_t n);

/* Text classification in the GLUE/SST-2 TSV layout: a header line naming
 * the columns, found by name: "sentence" (required), "label" (without it the
 * file is unlabeled, as GLUE test files "index<TAB>sentence" are) and
 * "index" (an integer id per example, reported in predictions); other columns
 * are ignored. Tokens are padded (id 0) / truncated to max_len.
 * x (max_len) i32, y i32 label (0 when unlabeled). The same columns are read
 * from .csv (RFC 4180) and .json / .jsonl files (JSON Lines). */

/* Which columns hold an example (data.text_column, data.text_pair_column,
 * data.label_column; the example scripts' text_column_names and
 * label_column_name). A NULL or empty field is found by its name: the text
 * sentence, sentence1 or text, or a pair (sentence1 and sentence2, question
 * and sentence, question1 and question2, premise and hypothesis); the label
 * label, score, is_duplicate, Quality or labels. Without such a text name, a
 * file whose label column is found (or any CSV / JSON Lines file) takes its
 * columns as transformers' run_glue does: the first two beside the label
 * (and index, idx, id) a pair, a single one the text. A named text column
 * the file lacks is an error; a named label column it lacks makes the file
 * unlabeled (a test file). With a column named the file has a header. */
typedef struct {
    const char *text;      /* a column, or several separated by commas, their fields joined by delimiter */
    const char *text_pair; /* the second text of a pair (needs text) */
    const char *label;
    const char *delimiter; /* between the joined fields of several text columns; NULL: " " */
} ut_text_columns;
typedef struct ut_vocab ut_vocab;
/* word: lower-cased words split on whitespace and punctuation, ids 0 = <pad>,
 * 1 = <unk>, then words with count >= min_freq by descending count, ties by
 * spelling; byte: ids 1..256 for bytes 0..255 (0 = <pad>). */
ut_vocab *ut_vocab_build(const char *kind, const char *train_tsv, const ut_text_columns *cols, int64_t min_freq,
                         char *err, size_t n);
int ut_vocab_save(const ut_vocab *v, const char *path, char *err, size_t n);
ut_vocab *ut_vocab_load(const char *path, char *err, size_t n);
int64_t ut_vocab_size(const ut_vocab *v);
/* Classes of the train file the vocabulary was built from (max label + 1);
 * saved with it. ut_tsv_dataset_open rejects labels >= this. */
int64_t ut_vocab_num_classes(const ut_vocab *v);
/* Classes below ut_vocab_num_classes without an example in the train file
 * (holes in the label set; 0 for a loaded vocabulary); *first (may be NULL)
 * gets the smallest such class, or -1. */
int64_t ut_vocab_missing_classes(const ut_vocab *v, int64_t *first);
void ut_vocab_free(ut_vocab *v);
ut_dataset *ut_tsv_dataset_open(const char *path, const ut_text_columns *cols, const ut_vocab *v, int64_t max_len,
                                char *err, size_t n);

/* ---- pretrained tokenizers (docs/data.md) ---- */
/* WordPiece (BERT), byte-level BPE (GPT-2, RoBERTa, BART) and SentencePiece
 * Unigram (T5) read from Hugging Face files; ids match Hugging Face
 * `tokenizers`. */
typedef struct ut_tokenizer ut_tokenizer;
/* path: a directory holding tokenizer.json, else vocab.txt (with an optional
 * tokenizer_config.json), else vocab.json or encoder.json with merges.txt or
 * vocab.bpe; or one of those files. NULL with a message naming the file and
 * what is wrong (missing, not JSON, an unsupported model such as WordLevel,
 * with the JSON path of an unsupported or bad part: model.vocab[3],
 * normalizer.normalizers[0].precompiled_charsmap, ...). */
ut_tokenizer *ut_tokenizer_load(const char *path, char *err, size_t n);
void ut_tokenizer_free(ut_tokenizer *t);             /* NULL is fine */
int64_t ut_tokenizer_vocab_size(const ut_tokenizer *t);
const char *ut_tokenizer_model(const ut_tokenizer *t);  /* "WordPiece", "BPE" or "Unigram" */
/* The id of a special token by role: "cls", "sep", "pad", "unk", "mask",
 * "bos", "eos"; -1 when the tokenizer has none. GPT-2's pad is <|endoftext|>;
 * T5's pad, eos, unk are <pad> 0, </s> 1, <unk> 2 (sep is </s> too, bos -1). */
int32_t ut_tokenizer_special_id(const ut_tokenizer *t, const char *role);
int32_t ut_tokenizer_token_id(const ut_tokenizer *t, const char *token);  /* -1: none */
const char *ut_tokenizer_token(const ut_tokenizer *t, int32_t id);         /* NULL: none */

typedef struct {
    int64_t max_len;     /* truncate to this many tokens, specials included (pairs:
                          * longest first); 0: no limit */
    int64_t pad_to;      /* pad to this length with the pad id, type id 0, mask 0; 0: none */
    bool no_special;     /* leave out [CLS] / [SEP] (<s> / </s>; T5's </s>) */
} ut_tok_opts;

/* One encoded text (or pair): len ids, token type ids (0 for the first text,
 * 1 for the second under BERT) and attention mask (1 text, 0 padding). The
 * arrays grow as needed and are reused by the next encode into the same
 * struct; zero it before the first use. */
typedef struct {
    int32_t *ids, *type_ids, *mask;
    int64_t len, cap;
} ut_tok_encoding;
/* text (and pair, or NULL) are NUL-terminated UTF-8; o NULL: no truncation,
 * no padding, special tokens added. 0, or -1 with a message
 * (invalid UTF-8 with its byte offset; max_len too small for the special
 * tokens). Not thread-safe: BPE keeps a cache in t, Unigram a work table. */
int ut_tokenizer_encode(ut_tokenizer *t, const char *text, const char *pair, const ut_tok_opts *o,
                        ut_tok_encoding *e, char *err, size_t n);
void ut_tok_encoding_free(ut_tok_encoding *e);
/* The text of n ids (ut_free it). Byte-level BPE gives back the bytes
 * exactly (GPT-2: decode(encode(s)) == s); WordPiece joins tokens with
 * spaces, glues "##" pieces to the word before and drops the space before
 * . ? ! , (Hugging Face's decoder with cleanup); Unigram applies
 * tokenizer.json's decoder (T5's Metaspace: "▁" becomes a space, none at the
 * start). skip_special leaves out special tokens ([CLS], <|endoftext|>,
 * </s>, <pad>, ...). NULL with a message for an id outside the vocabulary. */
char *ut_tokenizer_decode(const ut_tokenizer *t, const int32_t *ids, int64_t n, bool skip_special,
                          char *err, size_t errn);
/* A generated text as it is shown and scored (ut_free it): ids the
 * tokenizer does not have and special tokens left out (as Hugging Face's
 * decode leaves them), bytes that are not UTF-8 (byte-level BPE can cut a
 * character) as U+FFFD, the spaces at both ends trimmed. Never fails. */
char *ut_tokenizer_decode_generated(const ut_tokenizer *t, const int32_t *ids, int64_t n);

/* Text classification with a pretrained tokenizer: the TSV layout above, the
 * text in "sentence" (or "sentence1") and, for pair tasks, "sentence2". Each
 * example is encoded with its special tokens, truncated (pairs longest
 * first) and padded to max_len: x (3, max_len) i32 = token ids, token type
 * ids, attention mask (1 token, 0 padding); y i32 label. num_classes 0: the
 * file's max label + 1; otherwise a larger label is an error naming its line.
 * num_classes 1 is regression, as a Hugging Face model with num_labels 1
 * regresses: the labels (column "label", or "score" as in GLUE's STS-B
 * file) are finite real numbers, y f32, ds->regression set, ds->num_classes 0.
 * vocab_size is the tokenizer's. A file without a "label" column is
 * unlabeled (y 0, ds->unlabeled: a GLUE test file); an "index" column gives
 * the examples' ids. ds->token_planes is set. t is used only during the call. */
ut_dataset *ut_tsv_dataset_open_pretrained(const char *path, const ut_text_columns *cols, ut_tokenizer *t,
                                           int64_t max_len, int64_t num_classes, char *err, size_t n);
/* Labels may also be names (MNLI's and RTE's entailment, neutral, ...; every
 * label of a file one kind, integers or names): ut_tsv_dataset_open_pretrained
 * with num_classes 0 gives each name the id of its place among the file's
 * names sorted (as transformers' run_glue sorts a file's labels), and
 * ds->label_names holds them. With names (count of them, class k's name at
 * k: the train file's, or a checkpoint's id2label) the file's names take
 * those ids; a name not among them, or integer labels, is an error naming
 * the line. */
ut_dataset *ut_tsv_dataset_open_named(const char *path, const ut_text_columns *cols, ut_tokenizer *t, int64_t max_len,
                                      const char *const *names, int64_t count, char *err, size_t n);
/* Multi-label (Hugging Face's problem_type multi_label_classification):
 * each label field is a comma-separated list of the example's labels,
 * possibly empty (GoEmotions' "2,6"; the column "label" or "labels"; a
 * headerless file of (text, labels) or (text, labels, id) too), integers
 * or names, one kind in a file. y (K) I32 is 1 for each label the example
 * has, ds->multi_label set, ds->num_classes K. With names (count) the
 * names take their ids; without, count is the label count (0: integers'
 * largest + 1, names the file's distinct names sorted, into
 * ds->label_names). Errors name the line. */
ut_dataset *ut_tsv_dataset_open_multilabel(const char *path, const ut_text_columns *cols, ut_tokenizer *t,
                                           int64_t max_len, const char *const *names, int64_t count, char *err,
                                           size_t n);
/* What a file's labels look like, as transformers' run_glue and
 * run_classification decide the task from the label column's type:
 * UT_LABELS_SCORES when every label is a finite number and one at least is
 * written as a real (a '.' or an exponent: 3.8, 2.0, 1e-2; pandas and
 * datasets read a column of floats: a regression); UT_LABELS_LISTS when
 * the labels are JSON arrays (a JSON Lines or JSON file's [2, 6]: a
 * multi-label task); else UT_LABELS_CLASSES (integers, names, no label
 * column); -1 when the file does not read (err). */
enum { UT_LABELS_CLASSES = 0, UT_LABELS_SCORES = 1, UT_LABELS_LISTS = 2 };
int ut_tsv_label_kind(const char *path, const ut_text_columns *cols, char *err, size_t n);

/* ---- sequence-to-sequence text (docs/data.md) ---- */
typedef struct {
    int64_t max_source_len, max_target_len; /* tokens, special tokens included; >= 2 */
    /* TSV / CSV column or JSON key names ("translation.en": key "en" of the
     * object under "translation"); NULL (or ""): "source" ("target") when
     * the file has that column, else the first (second) column, as
     * run_summarization takes them */
    const char *source_field, *target_field;
    const char *source_prefix;               /* prepended to every source text (T5's "summarize: "); NULL: none */
    bool lowercase;                          /* lower-case both texts first (FlagAI's example does) */
} ut_seq2seq_opts;
/* Pairs of texts. path + target_path: FlagAI's parallel files
 * (train_inputs.txt / train_targets.txt), one example per line, line k of
 * one file paired with line k of the other; target_path NULL: path is a TSV
 * (a header naming the fields, as ut_tsv_dataset_open reads) when it ends in
 * .tsv, a CSV (a header, then one example a record; RFC 4180 quoting: a
 * field in double quotes may hold commas, newlines and "" for a quote) when
 * it ends in .csv, JSON Lines when it ends in .jsonl or .json (one object
 * per line, the two fields strings), else an error saying what to write
 * (extensions in any case). The fields are o->source_field and
 * o->target_field; each one NULL is the column "source" ("target") when the
 * header (the first object's keys, in their order) has it, else the first
 * (the second) column, and one that would be the other's column is the
 * first column that is not (a file of one column is then an error naming
 * the options). A JSON field with a dot that is no key of the object names
 * a nested one: "translation.en" is key "en" of the object under
 * "translation" (run_translation's files), deeper dots alike. Each text is
 * lower-cased (o->lowercase), the source gets o->source_prefix, then both
 * are encoded with the tokenizer's special tokens (BART "<s> text </s>", T5
 * "text </s>") and truncated silently to max_source_len / max_target_len
 * (transformers' truncation=True; ut_seq2seq_truncated counts them).
 * Example: L = max(max_source_len, max_target_len); x (4, L) i32 = source
 * ids, source mask, target ids, target mask (ids padded with the pad id,
 * 0 without one); y (L) i32 = the target ids, -100 where the target mask is
 * 0. vocab_size is the tokenizer's, num_classes 0, ds->seq2seq set. NULL with
 * a message naming the file and line: line counts that differ, an empty
 * source or target, invalid UTF-8 (its byte offset in the line), a NUL
 * byte, a missing TSV / CSV column (the columns found) or JSON key (the keys
 * found, in the nested object for a nested key), a TSV or CSV row with the
 * wrong number of fields (the line the record starts on), an unclosed CSV
 * quote, a JSON line that is not an object or a value that is not a string
 * (an object on the way to a nested key), no examples.
 * t is used only during the call. */
ut_dataset *ut_seq2seq_dataset_open(const char *path, const char *target_path, ut_tokenizer *t,
                                    const ut_seq2seq_opts *o, char *err, size_t n);
/* ---- token classification: words with a tag each (NER, POS; docs/data.md) ---- */
typedef struct {
    const char *words;            /* JSON: the key of the words' list; NULL: "tokens" when the
                                   * first object has it, else its first key (run_ner's rule) */
    const char *tags;             /* JSON: the key of the tags' list; NULL: "ner_tags" when the
                                   * first object has it, else its second key (its third when the
                                   * second holds the words) */
    int64_t max_len;              /* truncate to this many tokens, special tokens included, and pad to it */
    const char *const *names;     /* the tag list, class k = names[k] (a dev or test file takes the
                                   * train file's: ds->label_names); NULL: this file's tags, sorted
                                   * (strings by bytes, integers by value), as run_ner's get_label_list */
    int64_t nnames;
    bool label_all_tokens;        /* every piece of a word carries its tag (a B-X tag on the later
                                   * pieces as I-X where the list has I-X: run_ner's b_to_i_label);
                                   * false: only the first piece, the others -100 */
} ut_tagged_opts;
/* Token classification data. A file ending .json / .jsonl is JSON Lines, or
 * one JSON array, of objects each with a list of words (strings) and a list
 * of as many tags (all strings or all integers in a file; an object without
 * the tags' key, in every object of the file, makes it unlabeled: a test
 * file); any other file is CoNLL text: one word a line, fields separated by
 * spaces or tabs, the word first and the tag last (a line of one field: a
 * word without a tag, an unlabeled file), a blank line between sentences,
 * "-DOCSTART-" lines skipped. Each word is encoded alone without special
 * tokens (a byte-level BPE tokenizer's with a space before it, transformers'
 * add_prefix_space), its pieces put one after the other between the
 * tokenizer's special tokens ([CLS] ... [SEP], <s> ... </s>) and cut at
 * max_len (words past the cut are dropped: ut_tagged_truncated counts the
 * sentences cut). x (3, max_len) I32 token planes (type ids 0), y
 * (max_len) I32: the tag's class at each word's first piece, -100 elsewhere
 * (a word the tokenizer drops has no position; an unlabeled file: class 0
 * at the first pieces, ds->unlabeled set, num_classes 0 without o->names).
 * ds->token_planes and ds->token_labels set, num_classes the list's length,
 * label_names the list (integer tags written in decimal), vocab_size the
 * tokenizer's. NULL with a message naming the file and line: invalid
 * UTF-8 (the byte offset), a NUL byte, a JSON line that is not an object,
 * a missing key (the keys found), a value that is not a list of strings
 * (integers for tags), lists of different lengths, a tag not in o->names,
 * tags of both kinds, labeled and unlabeled sentences in one file, no
 * sentences. t is used only during the call. */
ut_dataset *ut_tagged_dataset_open(const char *path, ut_tokenizer *t, const ut_tagged_opts *o, char *err,
                                   size_t n);
/* Masked language modeling (transformers' run_mlm.py with
 * DataCollatorForLanguageModeling): texts from a text file (a line each),
 * a CSV file or JSON Lines / a JSON array of objects (the text column).
 * Each line is encoded with the tokenizer's special tokens. Grouped (the
 * default, run_mlm's group_texts): every line's ids, empty lines too,
 * concatenated 1000 lines at a time and cut into blocks of max_len, the
 * rest of each 1000 dropped; line_by_line: each line that is not blank an
 * example, cut at max_len. */
typedef struct {
    int64_t max_len;          /* grouped: each block's tokens; line_by_line: the longest line, special
                               * tokens included */
    bool line_by_line;        /* run_mlm's --line_by_line */
    const char *text_column;  /* CSV / JSON: the text's column or key (NULL: "text", else the first) */
    double probability;       /* run_mlm's mlm_probability: the share of the maskable tokens masked */
    uint64_t seed;            /* the masks' key */
} ut_mlm_opts;
/* The dataset: x (3, max_len) I32 token planes (ids, type ids, attention
 * mask), y (max_len) I32 the ids where a token may be masked, -100 at the
 * tokenizer's special tokens and padding; ds->masked_lm, token_planes,
 * token_labels set, vocab_size the tokenizer's. Its collate masks a batch
 * as DataCollatorForLanguageModeling: each maskable position is chosen
 * with o->probability; a chosen one becomes the tokenizer's mask token
 * (80%), a random token of the vocabulary (10%) or stays (10%), and keeps
 * its label; y is -100 everywhere else. The draws are Philox blocks keyed
 * by o->seed, the batch's epoch, the example's index and the position: the
 * same masks on any number of ranks and after a resume, an evaluation's
 * (epoch 0) the same each time. NULL with a message naming the file (and
 * line): no mask token in the tokenizer, probability outside (0, 1),
 * max_len without room for a token between the special tokens, invalid
 * UTF-8 or a NUL byte, a missing text column, no example (fewer tokens than
 * one block). t is used only during the call. */
ut_dataset *ut_mlm_dataset_open(const char *path, ut_tokenizer *t, const ut_mlm_opts *o, char *err, size_t n);

/* Causal language modeling on texts (transformers' run_clm.py): the
 * masked-LM dataset's files and groups (each text encoded with the
 * tokenizer's special tokens, none for GPT-2's; 1000 texts at a time
 * concatenated and cut into blocks of block_size, the rest of each 1000
 * dropped), a text file's lines with their line ends when keep_linebreaks
 * (run_clm's default: the datasets text loader's keep_linebreaks). */
typedef struct {
    int64_t block_size;       /* tokens per example (run_clm's block_size) */
    bool keep_linebreaks;     /* a text file's texts end with their line's "\n" (or "\r\n") */
    const char *text_column;  /* CSV / JSON: the text's column or key (NULL: "text", else the first) */
} ut_clm_opts;
/* The dataset: x (block_size) I32 a block's ids, y (block_size) I32 the
 * next token of each (the block's ids moved by one), -1 after the last
 * (no next token in the block: run_clm's labels are the ids, shifted in the
 * model, so the last predicts nothing); vocab_size the tokenizer's. The
 * same examples as run_clm's group_texts. NULL with a message naming the
 * file (and line), as ut_mlm_dataset_open's (no mask token needed). t is
 * used only during the call. */
ut_dataset *ut_clm_dataset_open(const char *path, ut_tokenizer *t, const ut_clm_opts *o, char *err, size_t n);

/* Example i's words (count in *nwords) as read (ds->words: also through a
 * dataset that wraps one, a dev set carved from it); NULL when ds is not a
 * ut_tagged_dataset_open dataset or i is out of range. The predictions
 * file writes a tag for each word that kept a piece. */
const char *const *ut_tagged_words(const ut_dataset *ds, int64_t i, int64_t *nwords);
/* How many sentences were cut at max_len; 0 for other data. */
int64_t ut_tagged_truncated(const ut_dataset *ds);

/* Example i's text, which 0 the source, 1 the target: as read, lower-cased
 * when o->lowercase was set, without the source prefix (the reference for
 * BLEU, the input when writing generations). NULL when ds is not a
 * ut_seq2seq_dataset_open dataset, i or which is out of range. */
const char *ut_seq2seq_text(const ut_dataset *ds, int64_t i, int which);
/* How many sources (which 0) or targets (which 1) were cut to max_source_len
 * / max_target_len; 0 for a dataset that is not seq2seq. */
int64_t ut_seq2seq_truncated(const ut_dataset *ds, int which);
/* One source encoded as the dataset encodes its sources: lower-cased
 * (o->lowercase), after o->source_prefix, with the special tokens, cut at
 * o->max_source_len (*cut says whether it was). 0, or -1 with "byte K: not
 * valid UTF-8" or the tokenizer's message. `utrain generate` encodes its
 * input lines with it. */
int ut_seq2seq_encode_source(ut_tokenizer *t, const ut_seq2seq_opts *o, const char *text, ut_tok_encoding *e,
                             bool *cut, char *err, size_t n);
/* ut_seq2seq_planes and ut_seq2seq_batch_trim: after the loader (they take a ut_batch). */

/* ---- sampler ---- */
/* Decides which examples each process sees. The order of an epoch is a
 * permutation of [0, n) drawn from (seed, epoch) (identity without shuffle).
 * Global batch k is positions [k*G, (k+1)*G) of that order, G = local_batch *
 * world; rank r takes its local_batch consecutive positions at r*local_batch.
 * The state is one global cursor (epoch, samples consumed), so a run resumed
 * with another world size but the same global batch sees the same batches. */
typedef struct {
    int64_t n, local_batch;
    int rank, world;
    uint64_t seed;
    bool shuffle, drop_last;
    int64_t epoch, cursor;       /* cursor: positions of this epoch already consumed (global) */
    int64_t *order;              /* permutation for the current epoch */
    int64_t order_epoch;         /* epoch that order was drawn for (-1: none) */
    int32_t *lengths;            /* ut_sampler_group_by_length's copy (NULL: none) */
    int64_t megabatch;
} ut_sampler;

void ut_sampler_init(ut_sampler *s, int64_t n, int64_t local_batch, int rank, int world,
                     uint64_t seed, bool shuffle, bool drop_last);
void ut_sampler_free(ut_sampler *s);
/* Global batches per epoch: floor or ceil of n / G by drop_last. */
int64_t ut_sampler_batches_per_epoch(const ut_sampler *s);
/* This rank's indices of the next global batch into idx (local_batch slots);
 * returns how many (the last batch may be short without drop_last; 0 at the
 * end of the epoch, after which the caller calls ut_sampler_next_epoch). */
int64_t ut_sampler_next(ut_sampler *s, int64_t *idx);
/* How many examples this rank gets from global batch j of an epoch (0 past the end). */
int64_t ut_sampler_batch_size(const ut_sampler *s, int64_t j);
/* Examples in global batch j over all ranks. */
int64_t ut_sampler_global_batch_size(const ut_sampler *s, int64_t j);
/* Without drop_last the last global batch is short and is split across ranks
 * in order, so some ranks may get 0 indices from a batch that exists; this
 * tells that apart from the end of the epoch (true once every position of the
 * epoch is consumed). */
bool ut_sampler_at_end(const ut_sampler *s);
void ut_sampler_next_epoch(ut_sampler *s);
/* Jumps to a saved position. */
void ut_sampler_seek(ut_sampler *s, int64_t epoch, int64_t cursor);
/* Groups examples of similar lengths (transformers' LengthGroupedSampler):
 * each epoch's order is cut into megabatches of megabatch positions, each
 * sorted by lengths[i] longest first (ties keep their order), and the
 * megabatch holding the longest example swaps its first position with the
 * first megabatch's, so the epoch starts with its longest batch. lengths
 * (n values) is copied. */
void ut_sampler_group_by_length(ut_sampler *s, const int32_t *lengths, int64_t megabatch);
/* Each example's length, into out (ds->n values): the attention mask's
 * length for token planes (tsv_text with a pretrained tokenizer), the
 * source's for sequence-to-sequence data. 0, or -1 (a dataset of other
 * examples, or a read error) with a message. */
int ut_dataset_lengths(ut_dataset *ds, int32_t *out, char *err, size_t n);

/* ---- loader ---- */
/* A collated batch: x (count, x_ne...) and y (count, y_ne...) in host memory
 * owned by the loader, valid until the next ut_loader_next. */
typedef struct ut_batch {
    int64_t count;
    void *x, *y;
    int64_t epoch, cursor_after; /* sampler position after this batch */
    const int64_t *idx;          /* the dataset index of each of the count examples */
    /* A seq2seq batch as the loader trimmed it (ut_seq2seq_batch_trim): x
     * (count, 4, x_len), y (count, y_len); 0: the dataset's shapes. */
    int64_t x_len, y_len;
    /* The arrays the loader's prepare made from x, with the fence that
     * guards x, y and them (ut_inputs_fence after uploading from them);
     * NULL for a batch that is not a loader's. */
    ut_inputs *inputs;
} ut_batch;

typedef struct ut_loader ut_loader;
/* Reads batches ahead in a background thread (prefetch >= 1 batches). The
 * loader owns neither the dataset nor the sampler; it advances the sampler. */
ut_loader *ut_loader_new(ut_dataset *ds, ut_sampler *s, int prefetch);
typedef struct {
    /* Run on the loader thread after each batch is read: arrays for the
     * model from x (host memory, (count, x_ne...); a token-plane dataset's
     * batch trimmed to its longest attention mask, as the default collate
     * trims it) into in; 0, or -1 with a message (a data error). NULL: none. */
    int (*prepare)(void *user, const ut_host_array *x, ut_inputs *in, char *err, size_t n);
    void *user;
    /* x, y and the prepared arrays live in memory page-locked for this
     * device's copies; before a buffer is filled again the loader waits for
     * the fence recorded after the uploads from it. */
    ut_device device;
} ut_loader_opts;
/* ut_loader_new with a prepare step and the device the batches go to. */
ut_loader *ut_loader_new_opts(ut_dataset *ds, ut_sampler *s, int prefetch, const ut_loader_opts *o);
/* 1 with a batch, 0 at the end of the epoch, -1 on a data error (message in err). */
int ut_loader_next(ut_loader *l, ut_batch *b, char *err, size_t n);
/* Stops the thread; the sampler is left at the position after the last batch
 * handed out (not the ones read ahead). */
void ut_loader_free(ut_loader *l);

/* Whether ds's examples are token planes (3, max_len) I32 that a batch is
 * trimmed to its longest attention mask (ut_tok_batch_trim). */
static inline bool ut_tok_planes(const ut_dataset *ds) {
    return ds->token_planes && ds->x_ndim == 2 && ds->x_ne[0] == 3 && ds->x_dtype == UT_I32;
}

/* The length of an attention mask of L positions: up to its last 1. */
static inline int64_t ut_mask_len(const int32_t *mask, int64_t L) {
    while (L > 0 && !mask[L - 1]) L--;
    return L;
}

/* Dynamic padding for a batch of ut_tsv_dataset_open_pretrained (x is
 * (count, 3, max_len)): L = the longest attention mask in the batch (at
 * least 1); x is rewritten in place as (count, 3, L), contiguous. Returns L. */
int64_t ut_tok_batch_trim(ut_batch *b, int64_t max_len);

/* A token classifier's batch (ds->token_labels: x (count, 3, max_len), y
 * (count, max_len)): y cut in place to the batch's longest attention mask,
 * the width ut_tok_batch_trim gives x, contiguous, and b->y_len set to it. */
void ut_tok_labels_trim(ut_batch *b, int64_t max_len);
static inline bool ut_tok_labels(const ut_dataset *ds) {
    return ds->token_labels && ds->token_planes && ds->y_ndim == 1 && ds->y_dtype == UT_I32;
}

/* A token classifier's data (tags scored as seqeval scores them): a class
 * per token, not a masked language model's tokens. */
static inline bool ut_tok_tags(const ut_dataset *ds) { return ut_tok_labels(ds) && !ds->masked_lm; }

/* Whether ds's examples are the seq2seq planes (4, L) I32 above. */
static inline bool ut_seq2seq_planes(const ut_dataset *ds) {
    return ds->seq2seq && ds->x_ndim == 2 && ds->x_ne[0] == 4 && ds->x_dtype == UT_I32;
}
/* Dynamic padding for a batch of ut_seq2seq_dataset_open, like
 * ut_tok_batch_trim: x is (count, 4, max_len), y (count, max_len) (y may be
 * NULL). L' = the longest source or target mask in the batch, T' the
 * longest target (each at least 1); x is rewritten in place as (count, 4,
 * L') and y as (count, T') (the decoder's positions), contiguous, and
 * b->x_len, b->y_len set to them. Returns L'. */
int64_t ut_seq2seq_batch_trim(ut_batch *b, int64_t max_len);

#ifdef __cplusplus
}
#endif
#endif
