/* SentencePiece's precompiled character map, the Precompiled normalizer of
 * Hugging Face tokenizer.json files (T5's nmt_nfkc table). The blob is a
 * little-endian uint32 trie size in bytes, the trie (a darts-clone double
 * array of uint32 units over UTF-8 bytes), then NUL-terminated replacement
 * strings that the trie's leaves point into.
 *
 * Hugging Face applies it per extended grapheme cluster: a cluster shorter
 * than 6 bytes whose start matches a key is replaced whole by that key's
 * string; otherwise each character is looked up alone. A lookup takes the
 * SHORTEST key that is a prefix of the query (the first result of a
 * common-prefix search), so "Ａ" + U+0301 becomes "A": the accent is dropped
 * with the rest of the cluster. Queries are at most 5 bytes, so only keys of
 * up to 5 bytes can ever match, and loading checks every trie node down to
 * that depth. */
#include <stdio.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"
#include "utrain/base.h"

#define MAX_QUERY 5        /* a cluster is looked up whole below 6 bytes */

struct ut__charsmap {
    uint32_t *units;
    size_t nunits;
    char *norm;             /* the replacement strings */
    size_t norm_len;
};

/* ---- a darts-clone unit ---- */
static bool unit_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t unit_value(uint32_t u) { return u & 0x7FFFFFFFu; }
static uint32_t unit_label(uint32_t u) { return u & 0x800000FFu; }
static size_t unit_offset(uint32_t u) { return (size_t)(u >> 10) << ((u & (1u << 9)) >> 6); }

void ut__charsmap_free(ut__charsmap *c) {
    if (!c) return;
    ut_free(c->units);
    ut_free(c->norm);
    ut_free(c);
}

/* ---- base64 (RFC 4648 with padding, as Hugging Face writes it) ---- */
static int b64_val(char ch) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = ch ? strchr(abc, ch) : NULL;
    return p ? (int)(p - abc) : -1;
}

/* Decodes s into *out (*len bytes); the offset of the first bad character, or -1. */
static int64_t b64_decode(const char *s, unsigned char **out, size_t *len) {
    size_t sl = strlen(s), pad = 0;
    while (pad < 2 && pad < sl && s[sl - 1 - pad] == '=') pad++;
    if (sl % 4) return (int64_t)sl;
    unsigned char *o = ut_malloc_check(sl / 4 * 3 + 1);
    size_t k = 0;
    for (size_t i = 0; i < sl; i += 4) {
        uint32_t acc = 0;
        for (size_t j = 0; j < 4; j++) {
            int v = i + j >= sl - pad ? 0 : b64_val(s[i + j]);
            if (v < 0) {
                ut_free(o);
                return (int64_t)(i + j);
            }
            acc = acc << 6 | (uint32_t)v;
        }
        o[k++] = (unsigned char)(acc >> 16);
        o[k++] = (unsigned char)(acc >> 8);
        o[k++] = (unsigned char)acc;
    }
    *len = k - pad;
    *out = o;
    return -1;
}

/* ---- checking the trie ---- */

/* A leaf's value must start a replacement string on a character boundary. */
static bool good_value(const ut__charsmap *c, size_t at) {
    if (at >= c->nunits) return false;
    uint32_t v = unit_value(c->units[at]);
    return v < c->norm_len && ((unsigned char)c->norm[v] & 0xC0) != 0x80;
}

/* Every edge below node pos, to the depth lookups reach: in range, and
 * every leaf pointing at a replacement string. done[pos]: how many levels
 * below pos are already checked (a corrupt trie may share nodes, which must
 * not be walked again and again). */
static bool check_node(const ut__charsmap *c, size_t pos, int depth, unsigned char *done) {
    unsigned char levels = (unsigned char)(MAX_QUERY + 1 - depth);
    if (done[pos] >= levels) return true;
    done[pos] = levels;
    for (unsigned b = 1; b < 256; b++) {
        size_t ch = pos ^ b;
        if (ch >= c->nunits || unit_label(c->units[ch]) != b) continue;
        size_t next = ch ^ unit_offset(c->units[ch]);
        if (next >= c->nunits) return false;
        if (unit_leaf(c->units[ch]) && !good_value(c, next)) return false;
        if (depth < MAX_QUERY && !check_node(c, next, depth + 1, done)) return false;
    }
    return true;
}

ut__charsmap *ut__charsmap_from_base64(const char *b64, const char *where, char *err, size_t n) {
    unsigned char *blob = NULL;
    size_t len = 0;
    int64_t bad = b64_decode(b64, &blob, &len);
    if (bad >= 0) {
        ut_errorf(err, n, "%s: not base64 (character %lld of %zu)", where, (long long)bad, strlen(b64));
        return NULL;
    }
    uint32_t trie = len >= 4 ? (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 |
                                   (uint32_t)blob[3] << 24
                             : 0;
    const char *why = len < 4 ? "shorter than its 4-byte header"
                    : trie % 4 || trie < 4 ? "the trie size is not a positive multiple of 4"
                    : trie > len - 4 ? "the trie is longer than the map" : NULL;
    int64_t badu = why ? -1 : ut__utf8_check((const char *)blob + 4 + trie, len - 4 - trie);
    if (!why && badu >= 0) why = "the replacement strings are not UTF-8";
    if (why) {
        ut_errorf(err, n, "%s: corrupt precompiled_charsmap (%zu bytes): %s", where, len, why);
        ut_free(blob);
        return NULL;
    }
    ut__charsmap *c = ut_calloc_check(1, sizeof *c);
    c->nunits = trie / 4;
    c->units = ut_malloc_check(trie);
    for (size_t i = 0; i < c->nunits; i++) {
        const unsigned char *p = blob + 4 + 4 * i;
        c->units[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    c->norm_len = len - 4 - trie;
    c->norm = ut_malloc_check(c->norm_len + 1);
    memcpy(c->norm, blob + 4 + trie, c->norm_len);
    c->norm[c->norm_len] = 0;
    ut_free(blob);
    size_t root = unit_offset(c->units[0]);
    unsigned char *done = ut_calloc_check(c->nunits, 1);
    bool ok = root < c->nunits && check_node(c, root, 1, done);
    ut_free(done);
    if (!ok) {
        ut_errorf(err, n, "%s: corrupt precompiled_charsmap: a trie node points outside the trie or its strings",
                  where);
        ut__charsmap_free(c);
        return NULL;
    }
    return c;
}

/* ---- normalizing ---- */

/* The replacement of the shortest key that is a prefix of s[0, len), or NULL. */
static const char *lookup(const ut__charsmap *c, const char *s, size_t len) {
    size_t pos = unit_offset(c->units[0]);
    for (size_t i = 0; i < len && s[i]; i++) {
        unsigned char b = (unsigned char)s[i];
        pos ^= b;
        if (pos >= c->nunits || unit_label(c->units[pos]) != b) return NULL;
        uint32_t u = c->units[pos];
        pos ^= unit_offset(u);
        if (unit_leaf(u)) return good_value(c, pos) ? c->norm + unit_value(c->units[pos]) : NULL;
    }
    return NULL;
}

static bool put_lookup(const ut__charsmap *c, const char *s, size_t len, ut__sbuf *out) {
    const char *r = lookup(c, s, len);
    if (r) ut__sbuf_put(out, r, strlen(r));
    return r != NULL;
}

/* One grapheme cluster: whole when short enough and a key starts it, else
 * character by character. */
static void put_cluster(const ut__charsmap *c, const char *s, size_t len, ut__sbuf *out) {
    if (len <= MAX_QUERY && put_lookup(c, s, len, out)) return;
    for (size_t j = 0, k = 0; j < len; j = k) {
        if (ut__utf8_next(s, len, &k) < 0) k = j + 1;
        if (!put_lookup(c, s + j, k - j, out)) ut__sbuf_put(out, s + j, k - j);
    }
}

void ut__charsmap_normalize(const ut__charsmap *c, const char *s, size_t len, ut__sbuf *out) {
    utf8proc_int32_t state = 0;
    int32_t prev = -1;
    size_t start = 0;
    ut__sbuf_put(out, "", 0);
    for (size_t i = 0; i < len;) {
        size_t at = i;
        int32_t cp = ut__utf8_next(s, len, &i);
        if (cp < 0) cp = 0xFFFD, i = at + 1;      /* callers check UTF-8 first */
        if (prev >= 0 && utf8proc_grapheme_break_stateful(prev, cp, &state)) {
            put_cluster(c, s + start, at - start, out);
            start = at;
        }
        prev = cp;
    }
    if (len > start) put_cluster(c, s + start, len - start, out);
}
