/* The byte-level BPE model (GPT-2, RoBERTa, BART): bytes become the
 * printable characters GPT-2 assigned them, then the pair of neighbouring
 * symbols with the lowest merge rank is merged until no pair has a rank.
 * Results are cached per piece. */
#include <string.h>

#include "tok_internal.h"
#include "utrain/base.h"

/* (left id, right id) -> (rank, merged id), open addressing. */
typedef struct {
    uint64_t key;           /* left << 32 | right, + 1 (0: empty) */
    int32_t rank, id;
} merge_slot;

/* The cache stops growing past this many ids (then pieces are merged anew). */
#define CACHE_MAX_IDS (1 << 22)

struct ut__bpe {
    merge_slot *m;
    size_t cap, n;
    int32_t byte_id[256];   /* the id of each byte's symbol */
    bool ignore_merges;
    ut__strmap cache;       /* piece -> offset into cache_ids: [count, ids...] */
    ut__ivec cache_ids;
    ut__ivec sym;           /* work array */
};

/* GPT-2's byte -> character map: printable Latin-1 bytes keep their code
 * point, the other 68 take 256, 257, ... in byte order. */
static int32_t byte_char(int b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    int n = 0;
    for (int k = 0; k < b; k++)
        n += !((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF));
    return 256 + n;
}

int ut__bpe_char_byte(int32_t cp) {
    if (cp < 0x21 || cp > 0x143) return -1;
    if (cp < 256 && byte_char(cp) == cp) return cp;
    for (int b = 0; b < 256; b++)
        if (byte_char(b) == cp) return b;
    return -1;
}

ut__bpe *ut__bpe_new(bool ignore_merges) {
    ut__bpe *b = ut_calloc_check(1, sizeof *b);
    b->ignore_merges = ignore_merges;
    return b;
}

void ut__bpe_free(ut__bpe *b) {
    if (!b) return;
    ut_free(b->m);
    ut__strmap_free(&b->cache);
    ut_free(b->cache_ids.v);
    ut_free(b->sym.v);
    ut_free(b);
}

static size_t merge_slot_of(const ut__bpe *b, uint64_t key) {
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (b->cap - 1);
    while (b->m[i].key && b->m[i].key != key) i = (i + 1) & (b->cap - 1);
    return i;
}

static uint64_t pair_key(int32_t l, int32_t r) { return ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1; }

static void merges_grow(ut__bpe *b) {
    merge_slot *old = b->m;
    size_t oc = b->cap;
    b->cap = oc ? 2 * oc : 1024;
    b->m = ut_calloc_check(b->cap, sizeof *b->m);
    for (size_t i = 0; i < oc; i++)
        if (old[i].key) b->m[merge_slot_of(b, old[i].key)] = old[i];
    ut_free(old);
}

bool ut__bpe_add_merge(ut__bpe *b, const ut__vocab_tab *v, const char *a, size_t alen,
                       const char *bb, size_t blen, const char *where, char *err, size_t n) {
    int32_t l = ut__strmap_get(&v->vocab, a, alen), r = ut__strmap_get(&v->vocab, bb, blen);
    char *cat = ut_malloc_check(alen + blen + 1);
    memcpy(cat, a, alen);
    memcpy(cat + alen, bb, blen);
    int32_t id = ut__strmap_get(&v->vocab, cat, alen + blen);
    ut_free(cat);
    if (l < 0 || r < 0 || id < 0) {
        ut_errorf(err, n, "%s: merge \"%.*s %.*s\": %s not in the vocabulary", where, (int)alen, a,
                  (int)blen, bb, l < 0 ? "its left part is" : r < 0 ? "its right part is" : "the merged token is");
        return false;
    }
    if (2 * (b->n + 1) > b->cap) merges_grow(b);
    size_t i = merge_slot_of(b, pair_key(l, r));
    if (!b->m[i].key) {      /* a repeated pair keeps its first (best) rank */
        b->m[i] = (merge_slot){pair_key(l, r), (int32_t)b->n, id};
        b->n++;
    }
    return true;
}

bool ut__bpe_check_bytes(const ut__bpe *b, const ut__vocab_tab *v, const char *path, char *err,
                         size_t n) {
    ut__bpe *mb = (ut__bpe *)b;
    for (int k = 0; k < 256; k++) {
        char u[4];
        size_t len = ut__utf8_put(u, byte_char(k));
        mb->byte_id[k] = ut__strmap_get(&v->vocab, u, len);
        if (mb->byte_id[k] < 0)
            return !ut_errorf(err, n, "%s: not a byte-level BPE vocabulary: byte 0x%02x (\"%.*s\") has no token",
                              path, k, (int)len, u);
    }
    return true;
}

static const merge_slot *find_merge(const ut__bpe *b, int32_t l, int32_t r) {
    if (!b->cap) return NULL;
    size_t i = merge_slot_of(b, pair_key(l, r));
    return b->m[i].key ? &b->m[i] : NULL;
}

/* ---- merging: a min-heap of candidate pairs by (rank, position), as
 * Hugging Face does it, so a long piece costs n log n, not n^2. Taking the
 * lowest rank first and, within a rank, the leftmost pair is the same as
 * merging every occurrence of the best pair from the left, round by round. */

typedef struct {
    int32_t rank, pos;
} cand;

typedef struct {
    cand *h;
    int64_t n, cap;
} heap;

static bool cand_less(cand a, cand b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void heap_push(heap *q, cand c) {
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 64;
        q->h = ut_realloc_check(q->h, (size_t)q->cap * sizeof *q->h);
    }
    int64_t i = q->n++;
    while (i > 0 && cand_less(c, q->h[(i - 1) / 2])) {
        q->h[i] = q->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->h[i] = c;
}

static cand heap_pop(heap *q) {
    cand top = q->h[0], last = q->h[--q->n];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= q->n) break;
        if (c + 1 < q->n && cand_less(q->h[c + 1], q->h[c])) c++;
        if (!cand_less(q->h[c], last)) break;
        q->h[i] = q->h[c];
        i = c;
    }
    if (q->n) q->h[i] = last;
    return top;
}

/* The symbols of one piece: ids in a doubly linked list over positions. */
typedef struct {
    int32_t *id, *prev, *next;
} symbols;

static void push_pair(const ut__bpe *b, const symbols *s, heap *q, int32_t l) {
    if (l < 0 || s->next[l] < 0) return;
    const merge_slot *m = find_merge(b, s->id[l], s->id[s->next[l]]);
    if (m) heap_push(q, (cand){m->rank, l});
}

/* Merges b->sym in place until no neighbouring pair has a rank. */
static void merge_all(ut__bpe *b) {
    int64_t n = b->sym.n;
    if (n < 2) return;
    symbols s = {b->sym.v, ut_malloc_check((size_t)n * sizeof(int32_t)), ut_malloc_check((size_t)n * sizeof(int32_t))};
    for (int64_t i = 0; i < n; i++) {
        s.prev[i] = (int32_t)i - 1;
        s.next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    heap q = {0};
    for (int32_t i = 0; i + 1 < n; i++) push_pair(b, &s, &q, i);
    while (q.n) {
        cand c = heap_pop(&q);
        int32_t r = s.next[c.pos];
        const merge_slot *m = r >= 0 && s.id[c.pos] >= 0 ? find_merge(b, s.id[c.pos], s.id[r]) : NULL;
        if (!m || m->rank != c.rank) continue;       /* stale: a neighbour changed */
        s.id[c.pos] = m->id;
        s.id[r] = -1;                                 /* r is gone */
        s.next[c.pos] = s.next[r];
        if (s.next[r] >= 0) s.prev[s.next[r]] = c.pos;
        push_pair(b, &s, &q, s.prev[c.pos]);
        push_pair(b, &s, &q, c.pos);
    }
    int64_t o = 0;
    for (int32_t i = 0; i >= 0; i = s.next[i]) b->sym.v[o++] = s.id[i];
    b->sym.n = o;
    ut_free(s.prev);
    ut_free(s.next);
    ut_free(q.h);
}

static bool whole_in_vocab(const ut__bpe *b, const ut__vocab_tab *v, const char *s, size_t len,
                           ut__ivec *out) {
    char *u = ut_malloc_check(4 * len + 1);
    size_t ul = 0;
    for (size_t i = 0; i < len; i++) ul += ut__utf8_put(u + ul, byte_char((unsigned char)s[i]));
    int32_t id = ut__strmap_get(&v->vocab, u, ul);
    ut_free(u);
    if (id >= 0) ut__ivec_push(out, id);
    (void)b;
    return id >= 0;
}

void ut__bpe_encode(ut__bpe *b, const ut__vocab_tab *v, const char *s, size_t len, ut__ivec *out) {
    int32_t at = ut__strmap_get(&b->cache, s, len);
    if (at >= 0) {
        for (int32_t k = 0; k < b->cache_ids.v[at]; k++) ut__ivec_push(out, b->cache_ids.v[at + 1 + k]);
        return;
    }
    if (b->ignore_merges && whole_in_vocab(b, v, s, len, out)) return;
    b->sym.n = 0;
    for (size_t i = 0; i < len; i++) ut__ivec_push(&b->sym, b->byte_id[(unsigned char)s[i]]);
    merge_all(b);
    for (int64_t k = 0; k < b->sym.n; k++) ut__ivec_push(out, b->sym.v[k]);
    if (b->cache_ids.n + b->sym.n + 1 > CACHE_MAX_IDS) return;
    ut__strmap_put(&b->cache, s, len, (int32_t)b->cache_ids.n);
    ut__ivec_push(&b->cache_ids, (int32_t)b->sym.n);
    for (int64_t k = 0; k < b->sym.n; k++) ut__ivec_push(&b->cache_ids, b->sym.v[k]);
}
