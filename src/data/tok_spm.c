/* The text pipeline of SentencePiece tokenizers converted to tokenizer.json
 * (T5 and other Unigram models): normalizers (Precompiled, Replace, Strip,
 * Lowercase, NFC/NFD/NFKC/NFKD, Prepend), the pre-tokenizers WhitespaceSplit
 * and Metaspace, and the decoders Metaspace, ByteFallback, Fuse, Replace and
 * Strip. Each does what its Hugging Face `tokenizers` namesake does to the
 * text; alignments and offsets, which ids do not depend on, are not kept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"
#include "utrain/base.h"

/* ---- a small regular-expression matcher ---- */

#define RE_ALTS 8
#define RE_ITEMS 32

enum { RE_CHAR, RE_START, RE_END };
typedef struct {
    int kind;
    int32_t cp;
    int64_t min, max;       /* repetitions; max -1: unbounded */
    bool quantified;
} re_item;

typedef struct {
    re_item it[RE_ITEMS];
    int n;
} re_alt;

struct ut__regex {
    re_alt alt[RE_ALTS];
    int nalt;
};

void ut__regex_free(ut__regex *r) { ut_free(r); }

/* {n}, {n,}, {n,m} at p[*i] (after the brace); false when malformed. */
static bool re_braces(const char *p, size_t *i, int64_t *min, int64_t *max) {
    char *e;
    if (p[*i] < '0' || p[*i] > '9') return false;
    *min = strtoll(p + *i, &e, 10);
    *max = *min;
    if (*e == ',') {
        e++;
        *max = -1;
        if (*e >= '0' && *e <= '9') *max = strtoll(e, &e, 10);
    }
    if (*e != '}' || *min > 100000 || *max > 100000 || (*max >= 0 && *max < *min)) return false;
    *i = (size_t)(e + 1 - p);
    return true;
}

/* The quantifier at p[*i] (its first character c already taken) applied to
 * the last item; NULL, or why not. */
static const char *re_quantify(re_alt *a, char c, const char *p, size_t *i) {
    re_item *it = a->n ? &a->it[a->n - 1] : NULL;
    if (!it || it->kind != RE_CHAR || it->quantified) return "a quantifier must follow a character";
    int64_t min = c == '+', max = c == '?' ? 1 : -1;
    if (c == '{' && !re_braces(p, i, &min, &max)) return "a brace that is not {n}, {n,} or {n,m}";
    if (p[*i] == '?' || p[*i] == '+') return "lazy and possessive quantifiers are not supported";
    it->min = min;
    it->max = max;
    it->quantified = true;
    return NULL;
}

/* The character after a backslash: an anchor, an escaped metacharacter or a
 * control escape; NULL, or why not. */
static const char *re_escape(re_alt *a, int32_t c) {
    static const char meta[] = "\\.^$|?*+()[]{}/- ";
    re_item it = {RE_CHAR, c, 1, 1, false};
    if (c == 'A' || c == 'z') it.kind = c == 'A' ? RE_START : RE_END;
    else if (c == 't' || c == 'n' || c == 'r') it.cp = c == 't' ? '\t' : c == 'n' ? '\n' : '\r';
    else if (c >= 0x80 || !c || !strchr(meta, (int)c)) return "this escape is not supported (\\A, \\z, \\t, \\n, \\r and escaped metacharacters are)";
    if (a->n == RE_ITEMS) return "too many items";
    a->it[a->n++] = it;
    return NULL;
}

/* The next item of the pattern at p[*i]; NULL, or why not. */
static const char *re_item_next(ut__regex *r, const char *p, size_t len, size_t *i) {
    re_alt *a = &r->alt[r->nalt - 1];
    int32_t c = ut__utf8_next(p, len, i);
    if (c < 0) return "not UTF-8";
    if (c == '|') return r->nalt == RE_ALTS ? "too many alternatives" : (r->nalt++, NULL);
    if (c == '\\') {
        int32_t e = *i < len ? ut__utf8_next(p, len, i) : -1;
        return e < 0 ? "a lone backslash at the end" : re_escape(a, e);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return re_quantify(a, (char)c, p, i);
    if (c < 0x80 && strchr(".^$()[]", (int)c)) return "groups, classes, . ^ $ are not supported";
    if (a->n == RE_ITEMS) return "too many items";
    a->it[a->n++] = (re_item){RE_CHAR, c, 1, 1, false};
    return NULL;
}

/* Each alternative must use at least one character and repeat at most one
 * item a variable number of times (so matching never backtracks deeply). */
static const char *re_check(const ut__regex *r) {
    for (int k = 0; k < r->nalt; k++) {
        int64_t chars = 0;
        int var = 0;
        for (int j = 0; j < r->alt[k].n; j++) {
            const re_item *it = &r->alt[k].it[j];
            if (it->kind != RE_CHAR) continue;
            chars += it->min;
            var += it->min != it->max;
        }
        if (!chars) return "an alternative can match the empty string";
        if (var > 1) return "more than one repeated item in an alternative";
    }
    return NULL;
}

ut__regex *ut__regex_new(const char *pattern, const char *where, char *err, size_t n) {
    ut__regex *r = ut_calloc_check(1, sizeof *r);
    r->nalt = 1;
    size_t len = strlen(pattern);
    const char *why = NULL;
    for (size_t i = 0; i < len && !why;) why = re_item_next(r, pattern, len, &i);
    if (!why) why = re_check(r);
    if (why) {
        ut_errorf(err, n, "%s: regular expression \"%s\" is not supported: %s", where, pattern, why);
        ut_free(r);
        return NULL;
    }
    return r;
}

/* Items k.. of an alternative matched at pos: greedy, giving back repetitions
 * of the one variable item until the rest matches (the rest is fixed). */
static bool re_match_from(const re_alt *a, int k, const char *s, size_t len, size_t pos, size_t *end) {
    for (; k < a->n; k++) {
        const re_item *it = &a->it[k];
        if (it->kind != RE_CHAR) {
            if (pos != (it->kind == RE_START ? 0 : len)) return false;
            continue;
        }
        char u[4];
        size_t w = ut__utf8_put(u, it->cp);
        int64_t cnt = 0;
        while ((it->max < 0 || cnt < it->max) && w <= len - pos - (size_t)cnt * w &&
               !memcmp(s + pos + (size_t)cnt * w, u, w))
            cnt++;
        if (cnt < it->min) return false;
        if (it->min == it->max) {
            pos += (size_t)cnt * w;
            continue;
        }
        for (int64_t c = cnt; c >= it->min; c--)
            if (re_match_from(a, k + 1, s, len, pos + (size_t)c * w, end)) return true;
        return false;
    }
    *end = pos;
    return true;
}

/* The first alternative matching at pos (leftmost, then in order, as
 * Oniguruma); its end in *end. */
static bool re_match_at(const ut__regex *r, const char *s, size_t len, size_t pos, size_t *end) {
    for (int k = 0; k < r->nalt; k++)
        if (re_match_from(&r->alt[k], 0, s, len, pos, end)) return true;
    return false;
}

/* ---- normalizers ---- */

/* Replace's pattern (a string or a regular expression) at s[i]. An empty
 * string matches nothing, as in Hugging Face. */
static bool replace_match(const ut__norm_step *st, const char *s, size_t len, size_t i, size_t *end) {
    if (st->re) return re_match_at(st->re, s, len, i, end);
    size_t pl = st->pattern ? strlen(st->pattern) : 0;
    if (!pl || pl > len - i || memcmp(s + i, st->pattern, pl)) return false;
    *end = i + pl;
    return true;
}

/* Every non-overlapping match, left to right, replaced by content; false
 * when the text's start was deleted (a match at 0 replaced by nothing). */
static bool replace_all(const ut__norm_step *st, const char *s, size_t len, ut__sbuf *out) {
    size_t cl = strlen(st->content), copied = 0;
    bool kept = true;
    for (size_t i = 0; i < len;) {
        size_t end = 0;
        if (replace_match(st, s, len, i, &end)) {
            kept &= i > 0 || cl > 0;
            ut__sbuf_put(out, s + copied, i - copied);
            ut__sbuf_put(out, st->content, cl);
            i = copied = end;
        } else if (ut__utf8_next(s, len, &i) < 0) {
            i++;
        }
    }
    ut__sbuf_put(out, s + copied, len - copied);
    return kept;
}

static bool strip(const char *s, size_t len, bool left, bool right, ut__sbuf *out) {
    size_t a = 0, b = len;
    for (size_t i = 0; left && i < len;) {
        int32_t cp = ut__utf8_next(s, len, &i);
        if (cp < 0 || !ut__uc_is_space(cp)) break;
        a = i;
    }
    while (right && b > a) {   /* back to the start of the last character */
        size_t k = b - 1;
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        size_t j = k;
        int32_t cp = ut__utf8_next(s, b, &j);
        if (cp < 0 || !ut__uc_is_space(cp)) break;
        b = k;
    }
    ut__sbuf_put(out, s + a, b - a);
    return a == 0;
}

/* Rust's char::to_lowercase, character by character: the full mapping, in
 * which U+0130 is the one character that lower-cases to two. */
static void lowercase(const char *s, size_t len, ut__sbuf *out) {
    for (size_t i = 0; i < len;) {
        size_t at = i;
        int32_t cp = ut__utf8_next(s, len, &i);
        char u[8];
        if (cp < 0) {
            i = at + 1;
            ut__sbuf_put(out, s + at, 1);
        } else if (cp == 0x130) {
            ut__sbuf_put(out, "i\xcc\x87", 3);
        } else {
            ut__sbuf_put(out, u, ut__utf8_put(u, utf8proc_tolower(cp)));
        }
    }
}

static void unicode_form(int kind, const char *s, size_t len, ut__sbuf *out) {
    static const int flags[] = {
        [UT__NORM_NFC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE,
        [UT__NORM_NFD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
        [UT__NORM_NFKC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
        [UT__NORM_NFKD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
    };
    utf8proc_uint8_t *r = NULL;
    utf8proc_ssize_t n = len ? utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &r,
                                            (utf8proc_option_t)flags[kind])
                             : 0;
    if (n >= 0 && r) ut__sbuf_put(out, (const char *)r, (size_t)n);
    else ut__sbuf_put(out, s, len);
    free(r);   /* utf8proc allocates with malloc */
}

/* One normalizer; false when it deleted the start of the text. Hugging
 * Face's Precompiled keeps the first character's offset even when it maps
 * the text's first characters to nothing. */
static bool norm_step(const ut__norm_step *st, const char *s, size_t len, ut__sbuf *out) {
    switch (st->kind) {
    case UT__NORM_PRECOMPILED: ut__charsmap_normalize(st->cmap, s, len, out); break;
    case UT__NORM_REPLACE: return replace_all(st, s, len, out);
    case UT__NORM_STRIP: return strip(s, len, st->left, st->right, out);
    case UT__NORM_LOWERCASE: lowercase(s, len, out); break;
    case UT__NORM_PREPEND:
        if (len) ut__sbuf_put(out, st->content, strlen(st->content));
        ut__sbuf_put(out, s, len);
        break;
    default: unicode_form(st->kind, s, len, out); break;
    }
    return true;
}

char *ut__spm_normalize(const ut__spm *p, const char *s, size_t len, size_t *out_len, bool *lead_kept) {
    ut__sbuf a = {0}, b = {0};
    ut__sbuf_put(&a, s, len);
    *lead_kept = true;
    for (int k = 0; k < p->nnorm; k++) {
        b.n = 0;
        ut__sbuf_put(&b, "", 0);
        *lead_kept &= norm_step(&p->norm[k], a.s, a.n, &b);
        ut__sbuf t = a;
        a = b;
        b = t;
    }
    ut_free(b.s);
    *out_len = a.n;
    return a.s;
}

/* ---- pre-tokenizers ---- */

/* Metaspace on one word: spaces become the replacement, which is put in
 * front as the scheme says, then (split) every replacement but a leading one
 * starts a new piece. */
static void metaspace(const ut__metaspace *ms, const char *w, size_t len, bool first, ut__sbuf *buf,
                      ut__pieces *out) {
    char rep[4];
    size_t rl = ut__utf8_put(rep, ms->replacement), start = buf->n;
    bool lead = w[0] == ' ' || (len >= rl && !memcmp(w, rep, rl));   /* after spaces are replaced */
    if (len && !lead && (ms->prepend == UT__PREPEND_ALWAYS || (ms->prepend == UT__PREPEND_FIRST && first)))
        ut__sbuf_put(buf, rep, rl);
    for (size_t i = 0; i < len; i++) ut__sbuf_put(buf, w[i] == ' ' ? rep : w + i, w[i] == ' ' ? rl : 1);
    size_t from = start;
    for (size_t i = start + 1; ms->split && i + rl <= buf->n; i++)
        if (!memcmp(buf->s + i, rep, rl)) {
            ut__pieces_push(out, from, i - from);
            from = i;
        }
    if (buf->n > from) ut__pieces_push(out, from, buf->n - from);
}

static void word(const ut__spm *p, const char *w, size_t len, bool first, ut__sbuf *buf, ut__pieces *out) {
    if (!len) return;
    if (p->metaspace) {
        metaspace(&p->ms, w, len, first, buf, out);
    } else {
        ut__pieces_push(out, buf->n, len);
        ut__sbuf_put(buf, w, len);
    }
}

void ut__spm_pre_tokenize(const ut__spm *p, const char *s, size_t len, bool at_start, ut__sbuf *buf,
                          ut__pieces *out) {
    ut__sbuf_put(buf, "", 0);
    if (!p->ws_split) {
        word(p, s, len, at_start, buf, out);
        return;
    }
    size_t start = 0;
    bool in = false;
    for (size_t i = 0; i < len;) {   /* words between white space (WhitespaceSplit) */
        size_t at = i;
        int32_t cp = ut__utf8_next(s, len, &i);
        if (cp < 0) cp = 0xFFFD, i = at + 1;
        bool sp = ut__uc_is_space(cp);
        if (sp && in) word(p, s + start, at - start, false, buf, out);
        if (!sp && !in) start = at;
        in = !sp;
    }
    if (in) word(p, s + start, len - start, false, buf, out);
}

/* ---- decoders: each turns a list of token strings into another ---- */

typedef struct {
    char **s;
    int64_t n, cap;
} strs;

static void strs_push(strs *l, const char *s, size_t len) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->s = ut_realloc_check(l->s, (size_t)l->cap * sizeof *l->s);
    }
    char *c = ut_malloc_check(len + 1);
    memcpy(c, s, len);
    c[len] = 0;
    l->s[l->n++] = c;
}

static void strs_free(strs *l) {
    for (int64_t i = 0; i < l->n; i++) ut_free(l->s[i]);
    ut_free(l->s);
}

static void dec_metaspace(const ut__metaspace *ms, const strs *in, strs *out) {
    char rep[4];
    size_t rl = ut__utf8_put(rep, ms->replacement);
    for (int64_t k = 0; k < in->n; k++) {
        ut__sbuf b = {0};
        ut__sbuf_put(&b, "", 0);
        const char *t = in->s[k];
        for (size_t i = 0, len = strlen(t); i < len;) {
            if (len - i >= rl && !memcmp(t + i, rep, rl)) {   /* the first token loses all of them */
                if (k > 0 || ms->prepend == UT__PREPEND_NEVER) ut__sbuf_put(&b, " ", 1);
                i += rl;
            } else {
                ut__sbuf_put(&b, t + i++, 1);
            }
        }
        strs_push(out, b.s, b.n);
        ut_free(b.s);
    }
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* <0xNN>: the byte (Rust's u8::from_str_radix also takes "+N"), else -1. */
static int byte_token(const char *t) {
    if (strlen(t) != 6 || memcmp(t, "<0x", 3) || t[5] != '>') return -1;
    if (t[3] == '+') return hex_digit(t[4]);
    int a = hex_digit(t[3]), b = hex_digit(t[4]);
    return a < 0 || b < 0 ? -1 : a * 16 + b;
}

/* A run of byte tokens: its text when UTF-8, else one U+FFFD per byte. */
static void flush_bytes(ut__sbuf *bytes, strs *out) {
    if (!bytes->n) return;
    if (ut__utf8_check(bytes->s, bytes->n) < 0) strs_push(out, bytes->s, bytes->n);
    else
        for (size_t i = 0; i < bytes->n; i++) strs_push(out, "\xef\xbf\xbd", 3);
    bytes->n = 0;
}

static void dec_byte_fallback(const strs *in, strs *out) {
    ut__sbuf bytes = {0};
    for (int64_t k = 0; k < in->n; k++) {
        int b = byte_token(in->s[k]);
        if (b >= 0) {
            char c = (char)b;
            ut__sbuf_put(&bytes, &c, 1);
            continue;
        }
        flush_bytes(&bytes, out);
        strs_push(out, in->s[k], strlen(in->s[k]));
    }
    flush_bytes(&bytes, out);
    ut_free(bytes.s);
}

/* Up to start leading and stop trailing copies of one character off each
 * token (Hugging Face panics where they overlap; here the token is emptied). */
static void dec_strip(const ut__dec_step *st, const strs *in, strs *out) {
    char c[4];
    size_t cl = ut__utf8_put(c, st->strip_char);
    for (int64_t k = 0; k < in->n; k++) {
        const char *t = in->s[k];
        size_t a = 0, b = strlen(t);
        for (int64_t i = 0; i < st->start && b - a >= cl && !memcmp(t + a, c, cl); i++) a += cl;
        for (int64_t i = 0; i < st->stop && b >= cl && b - cl >= a && !memcmp(t + b - cl, c, cl); i++) b -= cl;
        strs_push(out, t + a, b > a ? b - a : 0);
    }
}

static void dec_step(const ut__dec_step *st, const strs *in, strs *out) {
    ut__sbuf b = {0};
    switch (st->kind) {
    case UT__DEC_METASPACE: dec_metaspace(&st->ms, in, out); break;
    case UT__DEC_BYTE_FALLBACK: dec_byte_fallback(in, out); break;
    case UT__DEC_STRIP: dec_strip(st, in, out); break;
    case UT__DEC_FUSE:
        ut__sbuf_put(&b, "", 0);
        for (int64_t k = 0; k < in->n; k++) ut__sbuf_put(&b, in->s[k], strlen(in->s[k]));
        strs_push(out, b.s, b.n);
        break;
    default: {   /* Replace */
        ut__norm_step rs = {.kind = UT__NORM_REPLACE, .pattern = st->pattern, .content = st->content};
        for (int64_t k = 0; k < in->n; k++) {
            b.n = 0;
            ut__sbuf_put(&b, "", 0);
            (void)replace_all(&rs, in->s[k], strlen(in->s[k]), &b);
            strs_push(out, b.s, b.n);
        }
    }
    }
    ut_free(b.s);
}

void ut__spm_decode(const ut__spm *p, const char *const *tokens, int64_t n, ut__sbuf *out) {
    strs a = {0}, b = {0};
    for (int64_t k = 0; k < n; k++) strs_push(&a, tokens[k], strlen(tokens[k]));
    for (int k = 0; k < p->ndec; k++) {
        dec_step(&p->dec[k], &a, &b);
        strs_free(&a);
        a = b;
        b = (strs){0};
    }
    ut__sbuf_put(out, "", 0);
    for (int64_t k = 0; k < a.n; k++) {
        if (k && !p->decoder) ut__sbuf_put(out, " ", 1);   /* no decoder: joined with spaces */
        ut__sbuf_put(out, a.s[k], strlen(a.s[k]));
    }
    strs_free(&a);
}

void ut__spm_free(ut__spm *p) {
    for (int k = 0; k < p->nnorm; k++) {
        ut__charsmap_free(p->norm[k].cmap);
        ut__regex_free(p->norm[k].re);
        ut_free(p->norm[k].pattern);
        ut_free(p->norm[k].content);
    }
    ut_free(p->norm);
    for (int k = 0; k < p->ndec; k++) {
        ut_free(p->dec[k].pattern);
        ut_free(p->dec[k].content);
    }
    ut_free(p->dec);
    memset(p, 0, sizeof *p);
}
