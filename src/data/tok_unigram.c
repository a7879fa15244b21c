/* The Unigram model (SentencePiece: T5, ALBERT, XLNet): every piece has a
 * log-probability score and a text is cut into the pieces whose scores sum
 * highest (Viterbi over a byte trie of the pieces). A character no piece
 * starts with costs the unknown score, min score - 10; neighbouring unknown
 * characters become one unknown token; with byte_fallback an unknown string
 * becomes its <0xNN> byte pieces. This is what Hugging Face's
 * Unigram::encode_optimized and Unigram::tokenize do, step for step, so ties
 * and fused unknowns come out the same. */
#include <stdio.h>
#include <string.h>

#include "tok_internal.h"
#include "utrain/base.h"

#define UNK_PENALTY 10.0   /* Hugging Face's K_UNK_PENALTY */

/* One cell of the Viterbi table: the best path ending at a byte offset. */
typedef struct {
    double score;
    int64_t start;          /* where its last token starts; -1: not reached */
    int32_t id;
} cell;

struct ut__unigram {
    double *score;          /* (n) by id */
    int64_t n;
    int32_t unk;
    bool byte_fallback;
    double min_score;
    /* the trie: node 0 is the root; edge (node, byte) -> child by open addressing */
    uint64_t *ekey;         /* node << 8 | byte, + 1 (0: empty) */
    int32_t *echild;
    size_t ecap, en;
    int32_t *leaf;          /* (nnodes) the piece ending at a node, -1 */
    int32_t nnodes, ncap;
    int32_t byte_id[256];   /* <0xNN> pieces, -1 */
    cell *dp;               /* work table */
    size_t dp_cap;
};

ut__unigram *ut__unigram_new(int64_t n, int32_t unk, bool byte_fallback) {
    ut__unigram *u = ut_calloc_check(1, sizeof *u);
    u->score = ut_calloc_check((size_t)(n > 0 ? n : 1), sizeof *u->score);
    u->n = n;
    u->unk = unk;
    u->byte_fallback = byte_fallback;
    u->min_score = 1e300;
    u->ncap = 1024;
    u->leaf = ut_malloc_check((size_t)u->ncap * sizeof *u->leaf);
    u->leaf[0] = -1;
    u->nnodes = 1;
    for (int b = 0; b < 256; b++) u->byte_id[b] = -1;
    return u;
}

void ut__unigram_free(ut__unigram *u) {
    if (!u) return;
    ut_free(u->score);
    ut_free(u->ekey);
    ut_free(u->echild);
    ut_free(u->leaf);
    ut_free(u->dp);
    ut_free(u);
}

static size_t edge_slot(const ut__unigram *u, uint64_t key) {
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (u->ecap - 1);
    while (u->ekey[i] && u->ekey[i] != key) i = (i + 1) & (u->ecap - 1);
    return i;
}

static uint64_t edge_key(int32_t node, unsigned char b) { return ((uint64_t)node << 8 | b) + 1; }

static int32_t child(const ut__unigram *u, int32_t node, unsigned char b) {
    if (!u->ecap) return -1;
    size_t i = edge_slot(u, edge_key(node, b));
    return u->ekey[i] ? u->echild[i] : -1;
}

static void edges_grow(ut__unigram *u) {
    uint64_t *ok = u->ekey;
    int32_t *oc = u->echild;
    size_t old = u->ecap;
    u->ecap = old ? 2 * old : 4096;
    u->ekey = ut_calloc_check(u->ecap, sizeof *u->ekey);
    u->echild = ut_malloc_check(u->ecap * sizeof *u->echild);
    for (size_t i = 0; i < old; i++) {
        if (!ok[i]) continue;
        size_t j = edge_slot(u, ok[i]);
        u->ekey[j] = ok[i];
        u->echild[j] = oc[i];
    }
    ut_free(ok);
    ut_free(oc);
}

/* The child of node by byte b, made when missing. */
static int32_t child_add(ut__unigram *u, int32_t node, unsigned char b) {
    int32_t c = child(u, node, b);
    if (c >= 0) return c;
    if (2 * (u->en + 1) > u->ecap) edges_grow(u);
    if (u->nnodes == u->ncap) {
        u->ncap *= 2;
        u->leaf = ut_realloc_check(u->leaf, (size_t)u->ncap * sizeof *u->leaf);
    }
    c = u->nnodes++;
    u->leaf[c] = -1;
    size_t i = edge_slot(u, edge_key(node, b));
    u->ekey[i] = edge_key(node, b);
    u->echild[i] = c;
    u->en++;
    return c;
}

/* <0xNN> with two upper-case hex digits: the byte, else -1. */
static int byte_piece(const char *s, size_t len) {
    static const char hex[] = "0123456789ABCDEF";
    if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    const char *a = strchr(hex, s[3]), *b = strchr(hex, s[4]);
    return s[3] && s[4] && a && b ? (int)((a - hex) * 16 + (b - hex)) : -1;
}

void ut__unigram_add(ut__unigram *u, int32_t id, const char *s, size_t len, double score) {
    u->score[id] = score;
    if (score < u->min_score) u->min_score = score;
    int by = byte_piece(s, len);
    if (by >= 0) u->byte_id[by] = id;
    if (!len) return;       /* the empty piece never matches (as in Hugging Face's trie) */
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) node = child_add(u, node, (unsigned char)s[i]);
    u->leaf[node] = id;
}

static size_t char_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

static void relax(cell *c, double score, int64_t start, int32_t id) {
    if (c->start < 0 || score > c->score) *c = (cell){score, start, id};
}

/* Fills u->dp[0..len]: for each end offset, the best path to it. */
static void viterbi(ut__unigram *u, const char *s, size_t len) {
    if (u->dp_cap < len + 1) {
        u->dp_cap = 2 * (len + 1);
        u->dp = ut_realloc_check(u->dp, u->dp_cap * sizeof *u->dp);
    }
    for (size_t i = 0; i <= len; i++) u->dp[i] = (cell){0.0, -1, 0};
    double unk_score = u->min_score - UNK_PENALTY;
    for (size_t at = 0; at < len;) {
        double base = u->dp[at].score;
        size_t mb = char_len((unsigned char)s[at]);
        if (mb > len - at) mb = len - at;
        bool single = false;
        int32_t node = 0;
        for (size_t k = at; k < len && (node = child(u, node, (unsigned char)s[k])) >= 0; k++) {
            int32_t id = u->leaf[node];
            if (id < 0) continue;
            relax(&u->dp[k + 1], u->score[id] + base, (int64_t)at, id);
            single |= k + 1 - at == mb;
        }
        if (!single) relax(&u->dp[at + mb], unk_score + base, (int64_t)at, u->unk);
        at += mb;
    }
}

/* The id of one token of the best path, s[a, b): looked up again by its
 * text, as Hugging Face does (a fused unknown string may spell a piece). */
static void emit(const ut__unigram *u, const ut__vocab_tab *v, const char *s, size_t a, size_t b, ut__ivec *out) {
    int32_t id = ut__strmap_get(&v->vocab, s + a, b - a);
    if (id >= 0 && id < u->n) {
        ut__ivec_push(out, id);
        return;
    }
    bool bytes = u->byte_fallback;
    for (size_t i = a; bytes && i < b; i++) bytes = u->byte_id[(unsigned char)s[i]] >= 0;
    if (!bytes) {
        ut__ivec_push(out, u->unk);
        return;
    }
    for (size_t i = a; i < b; i++) ut__ivec_push(out, u->byte_id[(unsigned char)s[i]]);
}

void ut__unigram_encode(ut__unigram *u, const ut__vocab_tab *v, const char *s, size_t len, ut__ivec *out) {
    if (!len) return;
    viterbi(u, s, len);
    /* walk back from the end: spans [start, end), unknowns fused */
    ut__pieces spans = {0};
    size_t end = len, unk_end = 0;
    bool in_unk = false;
    while (end > 0) {
        const cell *c = &u->dp[end];
        size_t start = (size_t)c->start;
        if (c->id == u->unk) {
            if (!in_unk) unk_end = end;
            in_unk = true;
        } else {
            if (in_unk) ut__pieces_push(&spans, end, unk_end - end);
            in_unk = false;
            ut__pieces_push(&spans, start, end - start);
        }
        end = start;
    }
    if (in_unk) ut__pieces_push(&spans, 0, unk_end);
    for (size_t i = spans.n; i-- > 0;)
        emit(u, v, s, spans.p[i].off, spans.p[i].off + spans.p[i].len, out);
    ut_free(spans.p);
}
