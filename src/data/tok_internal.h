/* The pretrained tokenizers' internals, shared by src/data/tok_*.c (not public API).
 * defines: ut__strmap, ut__ivec, ut__piece, the Unicode helpers, the
 *          WordPiece, BPE and Unigram models, SentencePiece's text pipeline
 *          (ut__spm: normalizers, Metaspace, decoders), struct ut_tokenizer. */
#ifndef UT_TOK_INTERNAL_H
#define UT_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "utrain/data.h"

/* ---- string -> int32 map (open addressing; keys are copied) ---- */
typedef struct {
    char **keys;
    size_t *klen;
    int32_t *vals;
    size_t cap, n;          /* cap: a power of two */
} ut__strmap;
void ut__strmap_free(ut__strmap *m);
/* Sets key (len bytes) to v; returns false when the key was already there
 * (its value is replaced). */
bool ut__strmap_put(ut__strmap *m, const char *key, size_t len, int32_t v);
/* The value, or -1 when absent. */
int32_t ut__strmap_get(const ut__strmap *m, const char *key, size_t len);

/* ---- a growing int32 array ---- */
typedef struct {
    int32_t *v;
    int64_t n, cap;
} ut__ivec;
void ut__ivec_push(ut__ivec *a, int32_t x);

/* A growing NUL-terminated string (zero it before the first put). */
typedef struct {
    char *s;
    size_t n, cap;
} ut__sbuf;
void ut__sbuf_put(ut__sbuf *b, const char *s, size_t n);

/* ---- Unicode (utf8proc) ---- */
/* Decodes the code point at s[*i] (len bytes in all), moving *i past it;
 * -1 for invalid UTF-8 (*i unchanged). */
int32_t ut__utf8_next(const char *s, size_t len, size_t *i);
size_t ut__utf8_put(char *out, int32_t cp);          /* 1..4 bytes */
bool ut__uc_is_letter(int32_t cp);                  /* \p{L} */
bool ut__uc_is_number(int32_t cp);                  /* \p{N} */
bool ut__uc_is_space(int32_t cp);                   /* White_Space, as \s */
/* Checks that s is UTF-8; -1, or the byte offset of the first bad sequence. */
int64_t ut__utf8_check(const char *s, size_t len);

/* A piece of text to hand to the model: [off, off + len) of a buffer. */
typedef struct {
    size_t off, len;
} ut__piece;
typedef struct {
    ut__piece *p;
    size_t n, cap;
} ut__pieces;
void ut__pieces_push(ut__pieces *a, size_t off, size_t len);

/* BERT's normalizer (clean text, CJK spacing, accent stripping, lower-casing)
 * of s into a new NUL-terminated string (*out_len bytes). */
char *ut__bert_normalize(const char *s, size_t len, bool clean, bool cjk, bool strip_accents,
                         bool lowercase, size_t *out_len);
/* BERT's pre-tokenizer: words split on whitespace, each punctuation
 * character a piece of its own. Pieces are appended to out. */
void ut__bert_split(const char *s, size_t len, ut__pieces *out);
/* GPT-2's pre-tokenizer pattern:
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
void ut__gpt2_split(const char *s, size_t len, ut__pieces *out);

/* ---- models ---- */
typedef struct {
    ut__strmap vocab;
    char **tokens;          /* id -> token (NULL for holes) */
    int64_t size;           /* max id + 1 */
} ut__vocab_tab;
void ut__vocab_tab_free(ut__vocab_tab *v);
/* Adds token -> id; false (with a message) for a duplicate token or a bad id. */
bool ut__vocab_tab_add(ut__vocab_tab *v, const char *tok, size_t len, int64_t id, const char *path,
                       char *err, size_t n);

typedef struct {
    char *prefix;           /* continuing subword prefix, "##" */
    int32_t unk;
    int64_t max_chars;      /* longer words become unk */
} ut__wordpiece;
/* Appends the ids of one word. */
void ut__wordpiece_encode(const ut__vocab_tab *v, const ut__wordpiece *wp, const char *w,
                          size_t len, ut__ivec *out);

typedef struct ut__bpe ut__bpe;
ut__bpe *ut__bpe_new(bool ignore_merges);
void ut__bpe_free(ut__bpe *b);
/* Adds merge a + b at the next rank; false (with a message naming the line or
 * index) when a, b or their concatenation is not in the vocabulary. */
bool ut__bpe_add_merge(ut__bpe *b, const ut__vocab_tab *v, const char *a, size_t alen,
                       const char *bb, size_t blen, const char *where, char *err, size_t n);
/* Looks up every byte's symbol in the vocabulary; false (with a message)
 * when one is missing: not a byte-level vocabulary. */
bool ut__bpe_check_bytes(ut__bpe *b, const ut__vocab_tab *v, const char *path, char *err, size_t n);
/* The byte a byte-level symbol character stands for, or -1. */
int ut__bpe_char_byte(int32_t cp);
/* Appends the ids of one pre-tokenized piece of raw bytes (byte-level). */
void ut__bpe_encode(ut__bpe *b, const ut__vocab_tab *v, const char *s, size_t len, ut__ivec *out);

/* ---- Unigram (SentencePiece: T5, ALBERT, XLNet), tok_unigram.c ---- */
typedef struct ut__unigram ut__unigram;
/* n pieces, ids 0..n-1 (their text is v's tokens[0..n-1]); unk: the unknown
 * piece's id. */
ut__unigram *ut__unigram_new(int64_t n, int32_t unk, bool byte_fallback);
void ut__unigram_free(ut__unigram *u);
/* Piece id (text s[0, len)) with its log-probability score. */
void ut__unigram_add(ut__unigram *u, int32_t id, const char *s, size_t len, double score);
/* Appends the ids of one pre-tokenized piece: the segmentation with the best
 * total score (Viterbi), characters without a piece fused into one unknown
 * token (or <0xNN> byte pieces with byte_fallback), as Hugging Face's
 * Unigram::encode and tokenize do. */
void ut__unigram_encode(ut__unigram *u, const ut__vocab_tab *v, const char *s, size_t len, ut__ivec *out);

/* ---- SentencePiece's precompiled character map, tok_charsmap.c ---- */
typedef struct ut__charsmap ut__charsmap;
/* From the base64 text of a Precompiled normalizer; NULL with a message
 * starting with `where` when it is not base64 or its double-array trie or
 * string blob is inconsistent. */
ut__charsmap *ut__charsmap_from_base64(const char *b64, const char *where, char *err, size_t n);
void ut__charsmap_free(ut__charsmap *c);
/* Hugging Face's Precompiled normalizer of s[0, len), appended to out. */
void ut__charsmap_normalize(const ut__charsmap *c, const char *s, size_t len, ut__sbuf *out);

/* ---- SentencePiece-style text pipeline (Unigram tokenizers), tok_spm.c ---- */
typedef struct ut__regex ut__regex;
/* The few regular expressions the converters write (" {2,}", "\A +| +\z",
 * "\A▁"): literal characters, \A, \z, one quantifier (*, +, ?, {n},
 * {n,}, {n,m}) per alternative, alternatives with |. NULL with a message
 * for anything else. */
ut__regex *ut__regex_new(const char *pattern, const char *where, char *err, size_t n);
void ut__regex_free(ut__regex *r);

enum { UT__NORM_PRECOMPILED, UT__NORM_REPLACE, UT__NORM_STRIP, UT__NORM_LOWERCASE, UT__NORM_NFC,
       UT__NORM_NFD, UT__NORM_NFKC, UT__NORM_NFKD, UT__NORM_PREPEND };
typedef struct {
    int kind;
    ut__charsmap *cmap;     /* Precompiled */
    ut__regex *re;          /* Replace with a Regex pattern */
    char *pattern;          /* Replace with a String pattern */
    char *content;          /* Replace's content, Prepend's text */
    bool left, right;       /* Strip */
} ut__norm_step;

enum { UT__PREPEND_ALWAYS, UT__PREPEND_FIRST, UT__PREPEND_NEVER };
typedef struct {
    int32_t replacement;    /* a code point, U+2581 */
    int prepend;            /* UT__PREPEND_* */
    bool split;
} ut__metaspace;

enum { UT__DEC_METASPACE, UT__DEC_BYTE_FALLBACK, UT__DEC_FUSE, UT__DEC_REPLACE, UT__DEC_STRIP };
typedef struct {
    int kind;
    ut__metaspace ms;       /* Metaspace */
    char *pattern, *content; /* Replace */
    int32_t strip_char;     /* Strip: content, start, stop */
    int64_t start, stop;
} ut__dec_step;

typedef struct {
    ut__norm_step *norm;
    int nnorm;
    bool ws_split;          /* pre-tokenizer WhitespaceSplit (before Metaspace) */
    bool metaspace;
    ut__metaspace ms;
    ut__dec_step *dec;
    int ndec;
    bool decoder;           /* false: tokens joined with spaces (no decoder) */
} ut__spm;
void ut__spm_free(ut__spm *p);
/* The normalizers in order on s[0, len): a new string (*out_len bytes).
 * *lead_kept: false when a Replace or Strip removed the text's start (then
 * Hugging Face no longer counts the result as starting at offset 0). */
char *ut__spm_normalize(const ut__spm *p, const char *s, size_t len, size_t *out_len, bool *lead_kept);
/* The pre-tokenizer on normalized text: the pieces' text goes to buf, their
 * spans to out. at_start: s begins the text (Metaspace's "first" scheme). */
void ut__spm_pre_tokenize(const ut__spm *p, const char *s, size_t len, bool at_start, ut__sbuf *buf,
                          ut__pieces *out);
/* The decoder on n tokens; the text is appended to out. */
void ut__spm_decode(const ut__spm *p, const char *const *tokens, int64_t n, ut__sbuf *out);

/* ---- the tokenizer ---- */
typedef struct {
    char *content;
    size_t len;
    int32_t id;
    bool lstrip, rstrip, special;
} ut__added;

/* One item of a template: a special token's ids, or sequence A (0) / B (1). */
typedef struct {
    int seq;                /* -1: special token */
    int32_t *ids;
    int nids;
    int32_t type_id;
} ut__tmpl_item;

enum { UT__TOK_WORDPIECE, UT__TOK_BPE, UT__TOK_UNIGRAM };

struct ut_tokenizer {
    int kind;
    char *source;           /* the file it came from, for messages */
    ut__vocab_tab vocab;
    ut__wordpiece wp;
    ut__bpe *bpe;
    ut__unigram *uni;
    ut__spm spm;            /* Unigram: normalizers, pre-tokenizer, decoder */
    /* normalizer (WordPiece) */
    bool clean, cjk, strip_accents, lowercase;
    bool prefix_space;      /* byte-level: a space before text that does not start with one */
    ut__added *added;
    int nadded;
    ut__tmpl_item *single, *pair;
    int nsingle, npair;
    int32_t pad_id, pad_type_id;
    int32_t ids_cls, ids_sep, ids_unk, ids_mask, ids_bos, ids_eos;
};
#endif
