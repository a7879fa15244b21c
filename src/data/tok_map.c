/* Small containers of the tokenizers: a string -> int32 hash map (open
 * addressing, FNV-1a), a growing int32 array, the id <-> token table. */
#include <string.h>

#include "tok_internal.h"
#include "utrain/base.h"

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

void ut__strmap_free(ut__strmap *m) {
    for (size_t i = 0; i < m->cap; i++) ut_free(m->keys[i]);
    ut_free(m->keys);
    ut_free(m->klen);
    ut_free(m->vals);
    memset(m, 0, sizeof *m);
}

static size_t slot_of(const ut__strmap *m, const char *key, size_t len) {
    size_t i = (size_t)hash_bytes(key, len) & (m->cap - 1);
    while (m->keys[i] && (m->klen[i] != len || memcmp(m->keys[i], key, len)))
        i = (i + 1) & (m->cap - 1);
    return i;
}

static void grow(ut__strmap *m) {
    ut__strmap old = *m;
    m->cap = old.cap ? 2 * old.cap : 64;
    m->keys = ut_calloc_check(m->cap, sizeof *m->keys);
    m->klen = ut_calloc_check(m->cap, sizeof *m->klen);
    m->vals = ut_calloc_check(m->cap, sizeof *m->vals);
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.keys[i]) continue;
        size_t j = slot_of(m, old.keys[i], old.klen[i]);
        m->keys[j] = old.keys[i];
        m->klen[j] = old.klen[i];
        m->vals[j] = old.vals[i];
    }
    ut_free(old.keys);
    ut_free(old.klen);
    ut_free(old.vals);
}

bool ut__strmap_put(ut__strmap *m, const char *key, size_t len, int32_t v) {
    if (2 * (m->n + 1) > m->cap) grow(m);
    size_t i = slot_of(m, key, len);
    if (m->keys[i]) {
        m->vals[i] = v;
        return false;
    }
    m->keys[i] = ut_malloc_check(len + 1);
    memcpy(m->keys[i], key, len);
    m->keys[i][len] = 0;
    m->klen[i] = len;
    m->vals[i] = v;
    m->n++;
    return true;
}

int32_t ut__strmap_get(const ut__strmap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    size_t i = slot_of(m, key, len);
    return m->keys[i] ? m->vals[i] : -1;
}

void ut__ivec_push(ut__ivec *a, int32_t x) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->v = ut_realloc_check(a->v, (size_t)a->cap * sizeof *a->v);
    }
    a->v[a->n++] = x;
}

void ut__pieces_push(ut__pieces *a, size_t off, size_t len) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->p = ut_realloc_check(a->p, a->cap * sizeof *a->p);
    }
    a->p[a->n++] = (ut__piece){off, len};
}

void ut__vocab_tab_free(ut__vocab_tab *v) {
    ut__strmap_free(&v->vocab);
    for (int64_t i = 0; i < v->size; i++) ut_free(v->tokens[i]);
    ut_free(v->tokens);
    memset(v, 0, sizeof *v);
}

/* Ids are dense in every real vocabulary; a hole-ridden one is refused
 * before it could make a huge table. */
#define VOCAB_MAX_ID (1 << 24)

bool ut__vocab_tab_add(ut__vocab_tab *v, const char *tok, size_t len, int64_t id, const char *path,
                       char *err, size_t n) {
    if (id < 0 || id >= VOCAB_MAX_ID) {
        ut_errorf(err, n, "%s: token \"%.*s\": id %lld out of range [0, %d)", path, (int)(len < 64 ? len : 64),
                  tok, (long long)id, VOCAB_MAX_ID);
        return false;
    }
    if (id < v->size && v->tokens[id]) {
        ut_errorf(err, n, "%s: id %lld is given to both \"%s\" and \"%.*s\"", path, (long long)id,
                  v->tokens[id], (int)(len < 64 ? len : 64), tok);
        return false;
    }
    if (!ut__strmap_put(&v->vocab, tok, len, (int32_t)id)) {
        ut_errorf(err, n, "%s: token \"%.*s\" appears twice in the vocabulary", path,
                  (int)(len < 64 ? len : 64), tok);
        return false;
    }
    if (id >= v->size) {
        v->tokens = ut_realloc_check(v->tokens, (size_t)(id + 1) * sizeof *v->tokens);
        memset(v->tokens + v->size, 0, (size_t)(id + 1 - v->size) * sizeof *v->tokens);
        v->size = id + 1;
    }
    v->tokens[id] = ut_malloc_check(len + 1);
    memcpy(v->tokens[id], tok, len);
    v->tokens[id][len] = 0;
    return true;
}
