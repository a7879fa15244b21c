/* Helpers shared by the src/data files (not public API).
 * defines: ut__data_err, ut__data_strdup, ut__read_file, ut__tsv_*,
 *          ut__ends_with_ci, ut__json_kind, ut__special_frame,
 *          ut__vocab_encode. */
#ifndef UT_DATA_INTERNAL_H
#define UT_DATA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "utrain/data.h"

/* Error text goes through ut_errorf (utrain/base.h). */
char *ut__data_strdup(const char *s);

/* Reads the whole file into a ut_malloc'd buffer (one spare NUL byte after
 * the data, so text parsers may treat it as a string). Returns it and its
 * size, or NULL with a message naming the file. */
unsigned char *ut__read_file(const char *path, size_t *size, char *err, size_t n);

/* A parsed GLUE-style TSV: one row per example, sentences pointing into buf
 * (NUL-terminated in place). The label column is "label" (or, without one,
 * "score": GLUE's STS-B file). Without a label column labels are 0 and labeled
 * is false; without an index column index[k] = k. The text column is
 * "sentence" (or "sentence1"); sentence2 is the optional "sentence2" column
 * of pair tasks (NULL when the file has none). Errors name the file and the
 * 1-based line. */
typedef struct {
    char *buf;
    int64_t n;
    char **sentence, **sentence2;
    int64_t cap;                 /* rows allocated (lines of the file) */
    int64_t *label, *line, *index;
    double *score;               /* scores: each example's label as a real number (else NULL) */
    char **label_text;           /* UT__TSV_NAMES: each example's label as written (into buf) */
    bool names;                  /* the labels are names (entailment, ...), not integers: label unset */
    bool multi;                  /* UT__TSV_MULTI: label_text holds each row's list, label unset */
    char **owned;                /* JSON Lines: the fields' texts (sentence etc. point into them) */
    int64_t nowned, owned_cap;
    int64_t max_label;
    bool labeled, has_index;
    const char *columns;         /* which columns the examples came from (for the log); NULL: headerless */
    bool label_arrays;           /* JSON: a label was an array (a multi-label example's list) */
} ut__tsv;
/* What the labels are: classes, integers >= 0, into label; a regression's
 * real numbers into score; or classes that may be names (every label of
 * the file a name, MNLI's entailment and the like: names set, label_text
 * holds them; a file mixing names and integers is refused). */
/* UT__TSV_MULTI: each label a comma-separated list of classes (integers or
 * names, possibly empty: a multi-label example), kept as written in
 * label_text for the caller to parse; the column may be named "labels",
 * and a headerless file may have a third column (GoEmotions' id). */
/* UT__TSV_TEXT: every label kept as written in label_text, unchecked. */
enum { UT__TSV_CLASSES = 0, UT__TSV_SCORES = 1, UT__TSV_NAMES = 2, UT__TSV_MULTI = 3, UT__TSV_TEXT = 4 };
/* cols (may be NULL) names the columns (data.text_column, ...); a file
 * read with a named column always has a header. */
int ut__tsv_read(const char *path, int mode, const ut_text_columns *cols, ut__tsv *t, char *err, size_t n);
/* s is an integer >= 0 that fits a class id (into *out) */
bool ut__is_class(const char *s, int64_t *out);
void ut__tsv_free(ut__tsv *t);
/* One record of the CSV text at *pp (its first line *line), split at commas
 * into fields unquoted in place: a field in double quotes may hold commas,
 * newlines and "" for a quote; CRLF line ends are read as LF. f gets at most
 * max fields, *got their count (all of them, even past max); *pp and *line
 * move past the record. An unclosed quote or text after a closing quote is
 * an error naming path and the line. */
/* The 1-based lines where the top-level elements of the JSON array at the
 * start of s (after spaces) start, the first cap of them into line; returns
 * their count. For messages: cJSON keeps no positions. */
int64_t ut__json_array_lines(const char *s, int64_t *line, int64_t cap);
/* Checks that p[start, end), line lineno of path, is text: no NUL byte,
 * UTF-8; else -1 with the line and the byte of it named. */
int ut__text_line_check(const char *path, int64_t lineno, const char *p, size_t start, size_t end, char *err,
                        size_t n);
int ut__csv_record(const char *path, char **pp, int64_t *line, char **f, int max, int *got, char *err, size_t n);

/* Whether s ends with suffix, ignoring ASCII case (a file's kind by its name: ".CSV" too). */
bool ut__ends_with_ci(const char *s, const char *suffix);
/* A JSON value's kind for messages: "null", "a boolean", "a number", "a
 * string", "a list" or "an object". */
struct cJSON;
const char *ut__json_kind(const struct cJSON *j);
/* The special tokens t puts around a text: a sample encoded with them (into
 * with, which then holds them; NULL: not kept) and without, *npre the ids
 * before the sample's own and *nsuf those after. 0, or -1 with a message
 * naming path (the tokenizer fails on the sample, or its special tokens do
 * not surround a text's ids). */
int ut__special_frame(ut_tokenizer *t, const char *path, ut_tok_encoding *with, int64_t *npre, int64_t *nsuf,
                      char *err, size_t n);

/* Tokenizes s with v into out (at most max_len ids, the rest untouched);
 * returns how many ids were written. */
int64_t ut__vocab_encode(const ut_vocab *v, const char *s, int32_t *out, int64_t max_len);
#endif
