/* Decoding ids back to text: byte-level BPE gives back the exact bytes;
 * WordPiece joins tokens with spaces, glues "##" continuations to the word
 * before and applies the cleanup of Hugging Face's WordPiece decoder to each
 * token (" ." -> ".", " ," -> ",", ...); Unigram runs tokenizer.json's
 * decoder (Metaspace: "▁" back to spaces). */
#include <stdio.h>
#include <string.h>

#include "tok_internal.h"
#include "utrain/base.h"


static const ut__added *added_of(const ut_tokenizer *t, int32_t id) {
    for (int k = 0; k < t->nadded; k++)
        if (t->added[k].id == id) return &t->added[k];
    return NULL;
}

/* A byte-level token: each character stands for one byte. */
static void put_bytes(ut__sbuf *b, const char *tok) {
    size_t len = strlen(tok);
    for (size_t i = 0; i < len;) {
        int32_t cp = ut__utf8_next(tok, len, &i);
        int byte = cp < 0 ? -1 : ut__bpe_char_byte(cp);
        if (cp < 0) i++;
        if (byte >= 0) {
            char c = (char)byte;
            ut__sbuf_put(b, &c, 1);
        }
    }
}

/* s with every from replaced by to (to is never longer than from). */
static void replace_all(char *s, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    char *r = s, *w = s;
    while (*r) {
        if (!strncmp(r, from, fl)) {
            memcpy(w, to, tl);
            w += tl;
            r += fl;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
}

/* One token as Hugging Face's WordPiece decoder writes it: a continuation
 * glued on, others after a space, then its cleanup replacements. */
static void put_wordpiece(ut__sbuf *b, const ut_tokenizer *t, const char *tok, bool first) {
    static const char *const from[] = {" .",    " ?",   " !", " ,",  " ' ", " n't",
                                       " 'm",   " do not", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", " don't", "'s", "'ve", "'re"};
    size_t pl = strlen(t->wp.prefix), len = strlen(tok);
    bool cont = !first && pl && !strncmp(tok, t->wp.prefix, pl);
    char *s = ut_malloc_check(len + 2);
    snprintf(s, len + 2, "%s%s", first || cont ? "" : " ", cont ? tok + pl : tok);
    for (int k = 0; k < 11; k++) replace_all(s, from[k], to[k]);
    ut__sbuf_put(b, s, strlen(s));
    ut_free(s);
}

/* The tokens' strings in order (special ones left out with skip_special),
 * through the decoder steps. */
static void decode_unigram(const ut_tokenizer *t, const int32_t *ids, int64_t n, bool skip_special, ut__sbuf *b) {
    const char **toks = ut_malloc_check((size_t)(n > 0 ? n : 1) * sizeof *toks);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const ut__added *a = added_of(t, ids[i]);
        if (!(a && a->special && skip_special)) toks[k++] = t->vocab.tokens[ids[i]];
    }
    ut__spm_decode(&t->spm, toks, k, b);
    ut_free(toks);
}

char *ut_tokenizer_decode(const ut_tokenizer *t, const int32_t *ids, int64_t n, bool skip_special, char *err,
                          size_t errn) {
    ut__sbuf b = {0};
    ut__sbuf_put(&b, "", 0);
    bool first = true;
    for (int64_t i = 0; i < n; i++) {
        const char *tok = ids[i] >= 0 && ids[i] < t->vocab.size ? t->vocab.tokens[ids[i]] : NULL;
        if (!tok) {
            ut_errorf(err, errn, "decode: id %d at position %lld is not in the vocabulary (%lld tokens)",
                      (int)ids[i], (long long)i, (long long)t->vocab.size);
            ut_free(b.s);
            return NULL;
        }
        if (t->kind == UT__TOK_UNIGRAM) continue;   /* checked here, decoded below */
        const ut__added *a = added_of(t, ids[i]);
        if (a && a->special && skip_special) continue;
        if (t->kind == UT__TOK_WORDPIECE) put_wordpiece(&b, t, tok, first);
        else if (a) ut__sbuf_put(&b, tok, strlen(tok));
        else put_bytes(&b, tok);
        first = false;
    }
    if (t->kind == UT__TOK_UNIGRAM) decode_unigram(t, ids, n, skip_special, &b);
    return b.s;
}

/* The length of the UTF-8 sequence at s (left bytes), or minus the length
 * of the invalid piece to replace there (the maximal subpart, as Python's
 * errors="replace" and Rust's from_utf8_lossy cut it). */
static int utf8_seq(const unsigned char *s, size_t left) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    int need;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else return -1;
    for (int i = 1; i <= need; i++, lo = 0x80, hi = 0xBF)
        if ((size_t)i >= left || s[i] < lo || s[i] > hi) return -i;
    return need + 1;
}

char *ut_tokenizer_decode_generated(const ut_tokenizer *t, const int32_t *ids, int64_t n) {
    int32_t *known = ut_malloc_check((size_t)(n > 0 ? n : 1) * sizeof *known);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < t->vocab.size) known[k++] = ids[i];
    char err[8];
    char *raw = ut_tokenizer_decode(t, known, k, true, err, sizeof err); /* only unknown ids fail: none */
    ut_free(known);
    UT_ASSERT(raw);
    const unsigned char *s = (const unsigned char *)raw, *e = s + strlen(raw);
    while (*s == ' ') s++;
    while (e > s && e[-1] == ' ') e--;
    ut__sbuf b = {0};
    ut__sbuf_put(&b, "", 0);
    while (s < e) {
        int len = utf8_seq(s, (size_t)(e - s));
        if (len < 0) ut__sbuf_put(&b, "\xEF\xBF\xBD", 3);
        else ut__sbuf_put(&b, (const char *)s, (size_t)len);
        s += len < 0 ? -len : len;
    }
    ut_free(raw);
    return b.s;
}
