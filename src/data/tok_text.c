/* Text handling of the pretrained tokenizers: UTF-8, Unicode classes
 * (utf8proc), BERT's normalizer and pre-tokenizer, GPT-2's pre-tokenizer
 * pattern. Each follows the rules Hugging Face `tokenizers` applies, so ids
 * match it (tests/unit/test_tokenizers.c). */
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"
#include "utrain/base.h"

int32_t ut__utf8_next(const char *s, size_t len, size_t *i) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(len - *i), &cp);
    if (k <= 0) return -1;
    *i += (size_t)k;
    return cp;
}

size_t ut__utf8_put(char *out, int32_t cp) {
    return (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
}

int64_t ut__utf8_check(const char *s, size_t len) {
    for (size_t i = 0; i < len;) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        if (ut__utf8_next(s, len, &i) < 0) return (int64_t)i;
    }
    return -1;
}

bool ut__uc_is_letter(int32_t cp) {
    utf8proc_category_t c = utf8proc_category(cp);
    return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

bool ut__uc_is_number(int32_t cp) {
    utf8proc_category_t c = utf8proc_category(cp);
    return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}

/* Unicode's White_Space property (what \s and Rust's char::is_whitespace
 * test); utf8proc has categories but not this property. */
bool ut__uc_is_space(int32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* BERT's "control": categories Cc, Cf, Cs, Co, except \t \n \r. Unassigned
 * code points (Cn) stay, as Hugging Face keeps them. */
static bool is_control(int32_t cp) {
    if (cp == '\t' || cp == '\n' || cp == '\r') return false;
    utf8proc_category_t c = utf8proc_category(cp);
    return c >= UTF8PROC_CATEGORY_CC && c <= UTF8PROC_CATEGORY_CO;
}

static bool is_cjk(int32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

static bool is_bert_punct(int32_t cp) {
    if (cp < 0x80) return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
                          (cp >= 123 && cp <= 126);
    utf8proc_category_t c = utf8proc_category(cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

void ut__sbuf_put(ut__sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 256;
        b->s = ut_realloc_check(b->s, b->cap);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_cp(ut__sbuf *b, int32_t cp) {
    char u[4];
    ut__sbuf_put(b, u, ut__utf8_put(u, cp));
}

/* Clean text and CJK spacing (the first two steps of BertNormalizer). */
static void bert_clean(const char *s, size_t len, bool clean, bool cjk, ut__sbuf *o) {
    for (size_t i = 0; i < len;) {
        int32_t cp = ut__utf8_next(s, len, &i);
        if (cp < 0) cp = 0xFFFD, i++;          /* callers check UTF-8 first */
        if (clean && (cp == 0 || cp == 0xFFFD || is_control(cp))) continue;
        if (clean && ut__uc_is_space(cp)) cp = ' ';
        if (cjk && is_cjk(cp)) {
            ut__sbuf_put(o, " ", 1);
            sb_cp(o, cp);
            ut__sbuf_put(o, " ", 1);
        } else {
            sb_cp(o, cp);
        }
    }
}

/* NFD, then nonspacing marks (Mn) dropped; and/or lower-casing (full
 * mapping: U+0130 is the one character whose lower case is two). */
static void bert_accents_case(const char *s, size_t len, bool strip, bool lower, ut__sbuf *o) {
    utf8proc_uint8_t *nfd = NULL;
    if (strip && utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &nfd,
                              UTF8PROC_DECOMPOSE | UTF8PROC_STABLE) >= 0) {
        s = (const char *)nfd;
        len = strlen(s);
    }
    for (size_t i = 0; i < len;) {
        int32_t cp = ut__utf8_next(s, len, &i);
        if (cp < 0) cp = 0xFFFD, i++;
        if (strip && utf8proc_category(cp) == UTF8PROC_CATEGORY_MN) continue;
        if (lower && cp == 0x130) {
            sb_cp(o, 'i');
            sb_cp(o, 0x307);
            continue;
        }
        sb_cp(o, lower ? utf8proc_tolower(cp) : cp);
    }
    free(nfd);     /* utf8proc allocates with malloc */
}

char *ut__bert_normalize(const char *s, size_t len, bool clean, bool cjk, bool strip_accents,
                         bool lowercase, size_t *out_len) {
    ut__sbuf a = {0}, b = {0};
    ut__sbuf_put(&a, "", 0);
    bert_clean(s, len, clean, cjk, &a);
    ut__sbuf_put(&b, "", 0);
    bert_accents_case(a.s, a.n, strip_accents, lowercase, &b);
    ut_free(a.s);
    *out_len = b.n;
    return b.s;
}

void ut__bert_split(const char *s, size_t len, ut__pieces *out) {
    size_t start = 0;
    bool in_word = false;
    for (size_t i = 0; i < len;) {
        size_t at = i;
        int32_t cp = ut__utf8_next(s, len, &i);
        if (cp < 0) cp = 0xFFFD, i++;
        bool space = ut__uc_is_space(cp), punct = !space && is_bert_punct(cp);
        if ((space || punct) && in_word) ut__pieces_push(out, start, at - start);
        if (space || punct) in_word = false;
        if (punct) ut__pieces_push(out, at, i - at);
        if (!space && !punct && !in_word) {
            in_word = true;
            start = at;
        }
    }
    if (in_word) ut__pieces_push(out, start, len - start);
}

/* ---- GPT-2's pattern, alternative by alternative ---- */

enum { CL_LETTER, CL_NUMBER, CL_SPACE, CL_OTHER };

static int char_class(int32_t cp) {
    return ut__uc_is_letter(cp) ? CL_LETTER : ut__uc_is_number(cp) ? CL_NUMBER
         : ut__uc_is_space(cp) ? CL_SPACE : CL_OTHER;
}

/* The class of the character at i and the offset after it (len: none). */
static int class_at(const char *s, size_t len, size_t i, size_t *next) {
    if (i >= len) {
        *next = len;
        return -1;
    }
    int32_t cp = ut__utf8_next(s, len, &i);
    if (cp < 0) cp = 0xFFFD, i++;
    *next = i;
    return char_class(cp);
}

/* 's 't 're 've 'm 'll 'd: the match length, or 0. */
static size_t contraction(const char *s, size_t len, size_t i) {
    if (s[i] != '\'' || i + 1 >= len) return 0;
    char a = s[i + 1], b = i + 2 < len ? s[i + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* One match of the pattern at i (i < len); returns its end. */
static size_t gpt2_match(const char *s, size_t len, size_t i) {
    size_t k = contraction(s, len, i), nx;
    if (k) return i + k;
    size_t j = s[i] == ' ' ? i + 1 : i;
    int c = class_at(s, len, j, &nx);
    if (c == CL_LETTER || c == CL_NUMBER || c == CL_OTHER) {
        size_t end = nx;
        while (class_at(s, len, end, &nx) == c) end = nx;
        return end;
    }
    /* a run of white space: all of it at the end of the text, else all but
     * its last character (which then starts the next piece), unless that
     * leaves nothing */
    size_t end = i, last = i;
    while (class_at(s, len, end, &nx) == CL_SPACE) {
        last = end;
        end = nx;
    }
    if (end == len || last == i) return end;
    return last;
}

void ut__gpt2_split(const char *s, size_t len, ut__pieces *out) {
    for (size_t i = 0; i < len;) {
        size_t e = gpt2_match(s, len, i);
        ut__pieces_push(out, i, e - i);
        i = e;
    }
}
