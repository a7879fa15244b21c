/* Text-generation metrics: corpus BLEU with the 13a tokenizer, ROUGE-L F1 and
 * exact match (include/utrain/textmetrics.h states what each computes). Every
 * buffer is local to a call, so the functions are thread-safe. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/textmetrics.h"

_Static_assert(sizeof(ut_bleu_stats) == UT_BLEU_NSTATS * sizeof(int64_t),
               "ut_bleu_stats must be UT_BLEU_NSTATS packed int64_t (it is all-reduced as such)");

/* ---- UTF-8 ---- */

/* The length of the well-formed UTF-8 sequence at s[i] (n bytes in all) with
 * its code point in *cp, or 0 when the bytes there are not one (overlong
 * forms, surrogates, past U+10FFFF, cut short). */
static size_t utf8_next(const unsigned char *s, size_t n, size_t i, uint32_t *cp) {
    unsigned c = s[i];
    if (c < 0x80) { *cp = c; return 1; }
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (!len || c > 0xF4 || i + len > n) return 0;
    uint32_t v = c & (0x7Fu >> len);
    for (size_t k = 1; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i + k] & 0x3Fu);
    }
    static const uint32_t min_of_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_of_len[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

static bool utf8_valid(const char *s, size_t n) {
    uint32_t cp;
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = utf8_next((const unsigned char *)s, n, i, &cp))) return false;
    return true;
}

/* The characters Python's str.split() and str.strip() treat as whitespace. */
static bool is_space_cp(uint32_t c) {
    if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* The whitespace sequence at s[i] (its length), or 0; invalid bytes are not whitespace. */
static size_t space_at(const char *s, size_t n, size_t i) {
    uint32_t cp;
    size_t k = utf8_next((const unsigned char *)s, n, i, &cp);
    return k && is_space_cp(cp) ? k : 0;
}

/* The length of s[0, n) without its trailing whitespace. */
static size_t rstrip_len(const char *s, size_t n) {
    size_t end = 0;
    for (size_t i = 0; i < n;) {
        size_t k = space_at(s, n, i);
        if (k) { i += k; continue; }
        uint32_t cp;
        k = utf8_next((const unsigned char *)s, n, i, &cp);
        i += k ? k : 1;   /* a malformed byte is not whitespace */
        end = i;
    }
    return end;
}

/* [*begin, *end) of s[0, n) without leading and trailing whitespace. */
static void strip_span(const char *s, size_t n, size_t *begin, size_t *end) {
    size_t i = 0, k;
    while (i < n && (k = space_at(s, n, i))) i += k;
    *begin = i;
    *end = i + rstrip_len(s + i, n - i);
}

/* ---- hashing ---- */

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_ids(const size_t *ids, int n) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int k = 0; k < n; k++) {
        h ^= (uint64_t)ids[k] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h *= 0xBF58476D1CE4E5B9ull;
    }
    return h ^ (h >> 31);
}

/* The smallest power of two >= 2 * n and >= 16: tables stay at most half full. */
static size_t table_cap(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

/* ---- tokens and their ids ----
 * A token list is spans of one buffer; interning gives equal tokens equal ids
 * (an open-addressing table of the distinct spans), so n-grams compare as ids. */
typedef struct {
    const char **p;
    size_t *len;
    size_t n, cap;
} tokens;

static void tokens_push(tokens *t, const char *p, size_t len) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 32;
        t->p = ut_realloc_check(t->p, t->cap * sizeof *t->p);
        t->len = ut_realloc_check(t->len, t->cap * sizeof *t->len);
    }
    t->p[t->n] = p;
    t->len[t->n++] = len;
}

static void tokens_free(tokens *t) {
    ut_free(t->p);
    ut_free(t->len);
}

typedef struct {
    const char **key;   /* NULL: empty slot */
    size_t *klen, *id;
    size_t cap, n;
} intern_table;

static void intern_init(intern_table *m, size_t max_keys) {
    m->cap = table_cap(max_keys);
    m->n = 0;
    m->key = ut_calloc_check(m->cap, sizeof *m->key);
    m->klen = ut_malloc_check(m->cap * sizeof *m->klen);
    m->id = ut_malloc_check(m->cap * sizeof *m->id);
}

static void intern_free(intern_table *m) {
    ut_free(m->key);
    ut_free(m->klen);
    ut_free(m->id);
}

/* ids[i] = the id of token i; the table was sized for every token it will see. */
static void intern_all(intern_table *m, const tokens *t, size_t *ids) {
    for (size_t i = 0; i < t->n; i++) {
        const char *p = t->p[i];
        size_t len = t->len[i], s = (size_t)hash_bytes(p, len) & (m->cap - 1);
        while (m->key[s] && (m->klen[s] != len || memcmp(m->key[s], p, len))) s = (s + 1) & (m->cap - 1);
        if (!m->key[s]) {
            m->key[s] = p;
            m->klen[s] = len;
            m->id[s] = m->n++;
        }
        ids[i] = m->id[s];
    }
}

/* ---- BLEU: the 13a tokenizer ---- */

/* Replaces every from (non-empty) by to, no longer than from, scanning left to
 * right without overlaps (Python's str.replace), in place; returns the new length. */
static size_t replace_all(char *s, size_t n, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to), o = 0;
    for (size_t i = 0; i < n;) {
        if (i + fl <= n && !memcmp(s + i, from, fl)) {
            memcpy(s + o, to, tl);
            o += tl;
            i += fl;
        } else {
            s[o++] = s[i++];
        }
    }
    return o;
}

/* The ASCII punctuation that becomes a token of its own (step 1), and space. */
static bool is_split_punct(unsigned char c) {
    return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
           (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool not_digit(unsigned char c) { return !is_digit(c); }
static bool is_dot_comma(unsigned char c) { return c == '.' || c == ','; }
static bool is_dash(unsigned char c) { return c == '-'; }

/* Step 1: " c " for each split punctuation byte c. */
static size_t pad_punct(const char *in, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        bool pad = is_split_punct((unsigned char)in[i]);
        if (pad) out[o++] = ' ';
        out[o++] = in[i];
        if (pad) out[o++] = ' ';
    }
    return o;
}

/* Steps 2-4: every non-overlapping pair (a, b), scanning left to right, is
 * written "a b " (lead_space false) or " a b" (lead_space true). One side of
 * each pattern is an ASCII character; the other ("not a digit") may be a
 * multi-byte character, and testing the byte next to the ASCII side (its last
 * or first byte) gives the same text as testing the whole character, so
 * scanning bytes is the same as scanning code points. */
static size_t split_pairs(const char *in, size_t n, char *out, bool (*a)(unsigned char),
                          bool (*b)(unsigned char), bool lead_space) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (i + 1 < n && a((unsigned char)in[i]) && b((unsigned char)in[i + 1])) {
            if (lead_space) out[o++] = ' ';
            out[o++] = in[i];
            out[o++] = ' ';
            out[o++] = in[i + 1];
            if (!lead_space) out[o++] = ' ';
            i += 2;
        } else {
            out[o++] = in[i++];
        }
    }
    return o;
}

/* The 13a text of s (valid UTF-8, n bytes), its length in *len; the caller
 * frees it. Each byte grows to at most 5: step 1 pads punctuation with 2
 * spaces, steps 2 and 3 add 2 each around '.' and ',' (not step-1
 * punctuation), step 4 adds 2 around '-'; hence cap. */
static char *normalize_13a(const char *s, size_t n, size_t *len_out) {
    size_t end = rstrip_len(s, n), cap = 5 * (n + 2) + 1;
    char *a = ut_malloc_check(cap), *b = ut_malloc_check(cap);
    a[0] = ' ';                              /* the text is padded with a space each side */
    memcpy(a + 1, s, end);
    size_t len = 1 + replace_all(a + 1, end, "<skipped>", "");
    len = 1 + replace_all(a + 1, len - 1, "-\n", "");
    len = 1 + replace_all(a + 1, len - 1, "\n", " ");
    static const char *const entities[4][2] = {{"&quot;", "\""}, {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}};
    for (int k = 0; k < 4; k++) len = 1 + replace_all(a + 1, len - 1, entities[k][0], entities[k][1]);
    a[len++] = ' ';
    len = pad_punct(a, len, b);
    len = split_pairs(b, len, a, not_digit, is_dot_comma, false);
    len = split_pairs(a, len, b, is_dot_comma, not_digit, true);
    len = split_pairs(b, len, a, is_digit, is_dash, false);
    UT_ASSERT(len < cap);
    ut_free(b);
    *len_out = len;
    return a;
}

/* Appends the whitespace-separated words of s (valid UTF-8) to *t. */
static void split_whitespace(const char *s, size_t n, tokens *t) {
    for (size_t i = 0; i < n;) {
        size_t k = space_at(s, n, i);
        if (k) { i += k; continue; }
        size_t j = i;
        while (j < n && !space_at(s, n, j)) j++;
        tokens_push(t, s + i, j - i);
        i = j;
    }
}

/* Tokenizes s the 13a way into *t, whose spans point into *buf (the caller frees both). */
static void tokenize_13a(const char *s, size_t n, char **buf, tokens *t) {
    size_t len;
    *buf = normalize_13a(s, n, &len);
    split_whitespace(*buf, len, t);
}

/* ---- BLEU: clipped n-gram counts ---- */

/* One distinct n-gram of either side: where its ids are, and how many times
 * the hypothesis and the reference hold it. */
typedef struct {
    const size_t *ids;   /* NULL: empty slot */
    uint64_t hash;
    int64_t hyp, ref;
} ngram_slot;

static ngram_slot *ngram_find(ngram_slot *tab, size_t cap, const size_t *ids, int order) {
    uint64_t h = hash_ids(ids, order);
    size_t s = (size_t)h & (cap - 1);
    while (tab[s].ids && (tab[s].hash != h || memcmp(tab[s].ids, ids, (size_t)order * sizeof *ids)))
        s = (s + 1) & (cap - 1);
    if (!tab[s].ids) tab[s] = (ngram_slot){.ids = ids, .hash = h};
    return &tab[s];
}

/* sum over the hypothesis's distinct n-grams of min(count in hyp, count in ref). */
static int64_t clipped_matches(const size_t *hyp, size_t nh, const size_t *ref, size_t nr, int order,
                               ngram_slot *tab, size_t cap) {
    memset(tab, 0, cap * sizeof *tab);
    for (size_t i = 0; i + (size_t)order <= nr; i++) ngram_find(tab, cap, ref + i, order)->ref++;
    for (size_t i = 0; i + (size_t)order <= nh; i++) ngram_find(tab, cap, hyp + i, order)->hyp++;
    int64_t c = 0;
    for (size_t s = 0; s < cap; s++) c += tab[s].hyp < tab[s].ref ? tab[s].hyp : tab[s].ref;
    return c;
}

int ut_bleu_add(ut_bleu_stats *s, const char *hyp, const char *ref) {
    if (!s || !hyp || !ref) return -1;
    size_t hn = strlen(hyp), rn = strlen(ref);
    if (hn > SIZE_MAX / 16 || rn > SIZE_MAX / 16 || !utf8_valid(hyp, hn) || !utf8_valid(ref, rn)) return -1;
    char *hbuf, *rbuf;
    tokens ht = {0}, rt = {0};
    tokenize_13a(hyp, hn, &hbuf, &ht);
    tokenize_13a(ref, rn, &rbuf, &rt);
    size_t *hid = ut_malloc_check((ht.n + rt.n + 1) * sizeof *hid), *rid = hid + ht.n;
    intern_table m;
    intern_init(&m, ht.n + rt.n);
    intern_all(&m, &ht, hid);
    intern_all(&m, &rt, rid);
    size_t cap = table_cap(ht.n + rt.n);
    ngram_slot *tab = ut_malloc_check(cap * sizeof *tab);
    for (int n = 1; n <= UT_BLEU_MAX_ORDER; n++) {
        s->correct[n - 1] += clipped_matches(hid, ht.n, rid, rt.n, n, tab, cap);
        s->total[n - 1] += ht.n >= (size_t)n ? (int64_t)(ht.n - (size_t)n + 1) : 0;
    }
    s->sys_len += (int64_t)ht.n;
    s->ref_len += (int64_t)rt.n;   /* one reference: it is the closest */
    ut_free(tab);
    intern_free(&m);
    ut_free(hid);
    tokens_free(&ht);
    tokens_free(&rt);
    ut_free(hbuf);
    ut_free(rbuf);
    return 0;
}

void ut_bleu_merge(ut_bleu_stats *into, const ut_bleu_stats *from) {
    for (int n = 0; n < UT_BLEU_MAX_ORDER; n++) {
        into->correct[n] += from->correct[n];
        into->total[n] += from->total[n];
    }
    into->sys_len += from->sys_len;
    into->ref_len += from->ref_len;
}

/* ---- BLEU: the score ---- */

/* log, with log(0) taken as -9999999999 so a zero precision gives a 0 score
 * through exp rather than -inf arithmetic (the convention sacrebleu keeps). */
static double floored_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

ut_bleu_result ut_bleu_compute(const ut_bleu_stats *s) {
    ut_bleu_result r = {.bp = 1.0, .sys_len = s->sys_len, .ref_len = s->ref_len};
    if (s->sys_len < s->ref_len)
        r.bp = s->sys_len > 0 ? exp(1.0 - (double)s->ref_len / (double)s->sys_len) : 0.0;
    bool any = false;
    for (int n = 0; n < UT_BLEU_MAX_ORDER; n++) any |= s->correct[n] != 0;
    if (!any) return r;   /* no match at all (or no text): 0, precisions 0 */
    double smooth = 1.0;
    for (int n = 0; n < UT_BLEU_MAX_ORDER && s->total[n] != 0; n++) {
        if (s->correct[n] == 0) {
            smooth *= 2.0;   /* "exp" smoothing: 1/2, 1/4, ... of a match */
            r.precisions[n] = 100.0 / (smooth * (double)s->total[n]);
        } else {
            r.precisions[n] = 100.0 * (double)s->correct[n] / (double)s->total[n];
        }
    }
    double sum = 0.0;   /* orders with no n-gram at all keep precision 0 */
    for (int n = 0; n < UT_BLEU_MAX_ORDER; n++) sum += floored_log(r.precisions[n]);
    r.score = r.bp * exp(sum / UT_BLEU_MAX_ORDER);
    return r;
}

double ut_bleu_score(const ut_bleu_stats *s, double *bp_out) {
    ut_bleu_result r = ut_bleu_compute(s);
    if (bp_out) *bp_out = r.bp;
    return r.score;
}

/* ---- ROUGE-L ---- */

/* Lowercases s into out (at most n bytes) with every character other than
 * [a-z0-9] made a space; returns the length. U+0130 lowercases to "i" and a
 * combining dot (a separator), U+212A KELVIN SIGN to "k"; every other
 * non-ASCII character, and each byte of a malformed sequence, separates. */
static size_t rouge_normalize(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = utf8_next((const unsigned char *)s, n, i, &cp);
        if (!k) { out[o++] = ' '; i++; continue; }
        i += k;
        if (cp >= 'A' && cp <= 'Z') out[o++] = (char)(cp - 'A' + 'a');
        else if ((cp >= 'a' && cp <= 'z') || (cp >= '0' && cp <= '9')) out[o++] = (char)cp;
        else if (cp == 0x130) { out[o++] = 'i'; out[o++] = ' '; }
        else if (cp == 0x212A) out[o++] = 'k';
        else out[o++] = ' ';
    }
    return o;
}

static void split_spaces(const char *s, size_t n, tokens *t) {
    for (size_t i = 0; i < n;) {
        if (s[i] == ' ') { i++; continue; }
        size_t j = i;
        while (j < n && s[j] != ' ') j++;
        tokens_push(t, s + i, j - i);
        i = j;
    }
}

/* LCS length of a (na) and b (nb), one row of nb + 1 counts: b is the shorter. */
static size_t lcs_length(const size_t *a, size_t na, const size_t *b, size_t nb) {
    size_t *row = ut_calloc_check(nb + 1, sizeof *row);
    for (size_t i = 0; i < na; i++) {
        size_t diag = 0;   /* row[j - 1] of the previous a-row */
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            row[j] = a[i] == b[j - 1] ? diag + 1 : (up > row[j - 1] ? up : row[j - 1]);
            diag = up;
        }
    }
    size_t l = row[nb];
    ut_free(row);
    return l;
}

double ut_rouge_l(const char *hyp, const char *ref) {
    if (!hyp || !ref) return 0.0;
    size_t hn = strlen(hyp), rn = strlen(ref);
    char *buf = ut_malloc_check(hn + rn + 1);
    tokens ht = {0}, rt = {0};
    split_spaces(buf, rouge_normalize(hyp, hn, buf), &ht);
    split_spaces(buf + hn, rouge_normalize(ref, rn, buf + hn), &rt);
    double f1 = 0.0;
    if (ht.n && rt.n) {
        size_t *hid = ut_malloc_check((ht.n + rt.n) * sizeof *hid), *rid = hid + ht.n;
        intern_table m;
        intern_init(&m, ht.n + rt.n);
        intern_all(&m, &ht, hid);
        intern_all(&m, &rt, rid);
        size_t lcs = ht.n >= rt.n ? lcs_length(hid, ht.n, rid, rt.n) : lcs_length(rid, rt.n, hid, ht.n);
        double p = (double)lcs / (double)ht.n, r = (double)lcs / (double)rt.n;
        if (p + r > 0) f1 = 2 * p * r / (p + r);
        intern_free(&m);
        ut_free(hid);
    }
    tokens_free(&ht);
    tokens_free(&rt);
    ut_free(buf);
    return f1;
}

/* ---- exact match ---- */

bool ut_exact_match(const char *hyp, const char *ref) {
    if (!hyp || !ref) return false;
    size_t hn = strlen(hyp), rn = strlen(ref), hb, he, rb, re;
    strip_span(hyp, hn, &hb, &he);
    strip_span(ref, rn, &rb, &re);
    return he - hb == re - rb && !memcmp(hyp + hb, ref + rb, he - hb);
}
