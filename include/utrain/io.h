/* utrain file I/O: the safetensors format (as written by PyTorch tooling).
 * defines: ut_st_dtype, ut_st_tensor, ut_st_file, ut_st_open, ut_st_count,
 *          ut_st_name, ut_st_get, ut_st_meta, ut_st_close, ut_st_save, ut_st_open_index, ut_st_index,
 *          ut_st_offset, ut_st_read, ut_st_writer_open, ut_st_writer_write, ut_st_writer_set_meta,
 *          ut_st_writer_close,
 *          ut_st_dtype_name, ut_st_dtype_size, ut_st_numel, ut_st_float, ut_st_first_bad, ut_hf_config_read,
 *          ut_hf_config_checked, ut_hf_weights_path, ut_hf_load_opts, ut_hf_load_weights, ut_hf_load_pretrained,
 *          ut_hf_export, ut_hf_copy_tokenizer.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * (possibly followed by spaces), then the tensor data, row-major, little-endian,
 * each tensor at [begin, end) relative to the start of the data. */
#ifndef UTRAIN_IO_H
#define UTRAIN_IO_H

#include <stddef.h>
#include <stdint.h>

#include "utrain/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UT_ST_MAX_DIMS 8

typedef enum { UT_ST_F32 = 0, UT_ST_F16, UT_ST_BF16, UT_ST_I32, UT_ST_I64, UT_ST_DTYPE_COUNT } ut_st_dtype;

/* "F32", "F16", "BF16", "I32", "I64"; NULL for an out-of-range value. */
const char *ut_st_dtype_name(ut_st_dtype dt);
size_t ut_st_dtype_size(ut_st_dtype dt);   /* 0 for an out-of-range value */

typedef struct {
    ut_st_dtype dtype;
    int ndim;                          /* 0 (a scalar) .. UT_ST_MAX_DIMS */
    int64_t shape[UT_ST_MAX_DIMS];     /* outermost first */
    const void *data;                  /* aligned to the dtype size */
    size_t nbytes;                     /* numel * dtype size */
} ut_st_tensor;

int64_t ut_st_numel(const ut_st_tensor *t);   /* product of shape (1 for a scalar) */
/* Element i as a float (any dtype; I64 beyond 2^24 rounds). */
float ut_st_float(const ut_st_tensor *t, int64_t i);
/* The first element of a float tensor that is NaN or infinite (or, with
 * nonneg, negative), -1 if none (and for integer tensors): damaged weights
 * are refused at load, naming the file, the tensor and the element. */
int64_t ut_st_first_bad(const ut_st_tensor *t, bool nonneg);

typedef struct ut_st_file ut_st_file;

/* Reads and validates a whole file: header length against the file size, the
 * JSON (strict: only the keys above, integer arrays, string metadata, no
 * duplicate names), dtype names, shape x dtype size == end - begin, offsets
 * inside the data and not overlapping. NULL on any problem, with a message in
 * err naming the file and the byte offset in the file or the tensor. */
ut_st_file *ut_st_open(const char *path, char *err, size_t n);
void ut_st_close(ut_st_file *f);              /* NULL is fine */
int ut_st_count(const ut_st_file *f);         /* tensors, in file order */
const char *ut_st_name(const ut_st_file *f, int i);
/* The tensor called name, or NULL. Points into f: valid until ut_st_close. */
const ut_st_tensor *ut_st_get(const ut_st_file *f, const char *name);
/* Metadata value for key, or NULL. */
const char *ut_st_meta(const ut_st_file *f, const char *key);

/* Writes n tensors (in this order, data packed back to back) and optional
 * metadata (meta_kv: key, value, key, value, ..., NULL; or NULL for none).
 * Atomic: writes a temporary file in the same directory, syncs it and renames
 * it over path, so path is either the old file or the complete new one.
 * Returns 0, or -1 with a message in err (bad name, dtype, shape/nbytes
 * mismatch, I/O failure naming the path). */
int ut_st_save(const char *path, int n, const char *const *names, const ut_st_tensor *tensors,
               const char *const *meta_kv, char *err, size_t errn);

/* Files larger than memory, a piece at a time.
 * ut_st_open_index: like ut_st_open, but reads and checks only the header;
 *   the tensors' data is NULL, read by ut_st_read (the file stays open).
 * ut_st_index: tensor name's index, or -1. ut_st_offset: tensor i's place in
 *   the data (its first data_offset): file order.
 * ut_st_read: nbytes of tensor i from byte at of it, into dst (either kind of
 *   open file); -1 with err naming the tensor and the file bytes.
 * ut_st_writer_*: ut_st_save in steps: the header from the tensors' names,
 *   dtypes and shapes (their data unused), then every tensor's bytes in order
 *   by ut_st_writer_write (in as many pieces as wanted), then
 *   ut_st_writer_close(commit) syncs and renames it over path (or, without
 *   commit, removes the temporary file). ut_st_writer_set_meta rewrites a
 *   metadata value in place with one of the same length (a checksum known
 *   only at the end). The bytes equal ut_st_save's for the same tensors. */
ut_st_file *ut_st_open_index(const char *path, char *err, size_t n);
int ut_st_index(const ut_st_file *f, const char *name);
int64_t ut_st_offset(const ut_st_file *f, int i);
int ut_st_read(const ut_st_file *f, int i, size_t at, void *dst, size_t nbytes, char *err, size_t n);
typedef struct ut_st_writer ut_st_writer;
ut_st_writer *ut_st_writer_open(const char *path, int n, const char *const *names, const ut_st_tensor *tensors,
                                const char *const *meta_kv, char *err, size_t errn);
int ut_st_writer_write(ut_st_writer *w, const void *data, size_t nbytes, char *err, size_t errn);
int ut_st_writer_set_meta(ut_st_writer *w, const char *key, const char *value, char *err, size_t errn);
int ut_st_writer_close(ut_st_writer *w, bool commit, char *err, size_t errn);

/* ---- Hugging Face model directories (src/io/hf.c; docs/models.md) ---- */
/* DIR/config.json's top-level numbers, strings and booleans as options
 * ("hidden_size" -> "384"; "num_labels" also from the size of "id2label"); NULL with a message naming the directory or file
 * when DIR is not a directory, has no config.json, the JSON is bad or has no
 * "model_type". */
ut_kv *ut_hf_config_read(const char *dir, char *err, size_t n);
typedef struct {
    const char *model;             /* the model.name that reads it, in messages */
    const char *const *types;      /* NULL-terminated model_type values it reads */
    const char *others;            /* where other model_types go, said in the message */
    const char *const *arch_keys;  /* NULL-terminated options that config.json alone sets */
    /* optional: the model's own checks of the config, -1 with a message */
    int (*check)(const ut_kv *cfg, const char *dir, char *err, size_t n);
} ut_hf_config_spec;
/* What model.pretrained DIR starts with: DIR's config (ut_hf_config_read)
 * once its model_type is one of s->types, opts sets none of s->arch_keys and
 * s->check passes; NULL with a message naming DIR/config.json otherwise.
 * The caller lays the user's options over it (ut_kv_update). */
ut_kv *ut_hf_config_checked(const ut_kv *opts, const char *dir, const ut_hf_config_spec *s, char *err, size_t n);
/* DIR/model.safetensors into path; -1 with a message when there is none (a
 * pytorch_model.bin is refused with how to convert it). */
int ut_hf_weights_path(const char *dir, char *path, size_t pn, char *err, size_t n);

typedef struct {
    const char *base_prefix;          /* "bert.": also found without it */
    const char *file_prefix;          /* "transformer.": also found with it added */
    const char *const *transposed;    /* NULL-terminated name suffixes stored (in, out) in the file
                                       * (Hugging Face's Conv1D), (out, in) in the model */
    const char *const *optional;      /* NULL-terminated name prefixes that may be missing
                                       * (a new head keeps its initialisation) */
    const char *const *ignored;       /* NULL-terminated name parts not counted as unused */
    bool ignore_mismatched;           /* a tensor of another shape than the parameter's is left out
                                       * (the parameter keeps its initialisation), as transformers'
                                       * ignore_mismatched_sizes; otherwise it is an error */
    int *mismatched;                  /* out (optional): how many were left out so */
    char *first_mismatched;           /* out (optional): the first of them, with both shapes */
    size_t first_mismatched_n;
    int *missing;                     /* out (optional): optional parameters the checkpoint lacks (a new
                                       * head, left as initialised) */
    char *first_missing;              /* out (optional): the first of them */
    size_t first_missing_n;
    int *unused;                      /* out (optional): checkpoint tensors the model has no use for */
    char *first_unused;               /* out (optional): the first of them */
    size_t first_unused_n;
} ut_hf_load_opts;
/* Loads DIR/model.safetensors into m's parameters by name. Every parameter
 * must be there (unless optional) with its exact shape (reversed for a
 * transposed one) and dtype F32, F16 or BF16 (converted to F32); otherwise -1 with a message naming the file and
 * the tensor. */
int ut_hf_load_weights(ut_model *m, const char *dir, const ut_hf_load_opts *o, char *err, size_t n);
/* What a model's model.pretrained option does: ut_hf_load_weights with o
 * (its unused and mismatched outputs are filled here), errors prefixed
 * "model.pretrained: ", and one warning on stderr naming the count and first
 * of the checkpoint's tensors the model does not use, one more for those
 * left out for their shape (o.ignore_mismatched). */
int ut_hf_load_pretrained(ut_model *m, const char *dir, ut_hf_load_opts o, char *err, size_t n);
/* Copies a model directory's tokenizer files (tokenizer.json,
 * tokenizer_config.json, special_tokens_map.json, spiece.model, vocab.txt,
 * vocab.json, merges.txt, added_tokens.json, generation_config.json; those
 * it has) into out. 0, or -1 with a message. */
int ut_hf_copy_tokenizer(const char *dir, const char *out, char *err, size_t n);
/* Writes checkpoint ckpt of a model_name (bert, roberta, gpt2, bart or t5)
 * run with model options opts as a Hugging Face directory out (created if
 * needed): config.json (from opts' model.pretrained config.json when there
 * is one, the sizes from the tensors; a classifier's id2label from names,
 * nnames of them, the run's label names, else LABEL_k), model.safetensors
 * under transformers' names and layouts, and the tokenizer files of
 * model.pretrained. -1 with a message naming the file otherwise (names
 * that are not the classifier's outputs too). */
int ut_hf_export(const char *model_name, const ut_kv *opts, const char *const *names, int64_t nnames, const char *ckpt,
                 const char *out, char *err, size_t n);

#ifdef __cplusplus
}
#endif
#endif
