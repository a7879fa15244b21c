/* Per-step bump allocator. A step that outgrows the base chunk takes extra
 * chunks; the next reset replaces the base with one that holds the whole step,
 * so after the first step or two the training loop allocates nothing. */
#include <stdlib.h>

#include "internal.h"

#define ALIGN 64

static void *chunk_alloc(const ut_arena *a, size_t n) {
    return a->be ? a->be->alloc(n) : ut_aligned_alloc_check(n);
}
static void chunk_free(const ut_arena *a, void *p) {
    if (a->be) {
        if (p) a->be->free(p);
    } else {
        ut_free(p);
    }
}

void ut_arena_init_device(ut_arena *a, size_t cap, const ut_backend *be) {
    memset(a, 0, sizeof *a);
    a->be = be;
    a->cap = (cap + ALIGN - 1) / ALIGN * ALIGN;
    a->base = a->cap ? chunk_alloc(a, a->cap) : NULL;
}

void ut_arena_init(ut_arena *a, size_t cap) { ut_arena_init_device(a, cap, NULL); }

static void free_extra(ut_arena *a) {
    for (int i = 0; i < a->nextra; i++) chunk_free(a, a->extra[i]);
    a->nextra = 0;
    a->extra_bytes = 0;
}

void ut_arena_free(ut_arena *a) {
    free_extra(a);
    ut_free(a->extra);
    chunk_free(a, a->base);
    memset(a, 0, sizeof *a);
}

void *ut_arena_alloc(ut_arena *a, size_t bytes) {
    size_t n = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    if (n == 0) n = ALIGN;
    if (a->used + n <= a->cap) {
        void *p = a->base + a->used;
        a->used += n;
        return p;
    }
    if (a->nextra == a->capextra) {
        a->capextra = a->capextra ? 2 * a->capextra : 16;
        a->extra = ut_realloc_check(a->extra, a->capextra * sizeof *a->extra);
    }
    void *p = chunk_alloc(a, n);
    a->extra[a->nextra++] = p;
    a->extra_bytes += n;
    return p;
}

void ut_arena_reset(ut_arena *a) {
    if (a->nextra) {
        size_t need = a->used + a->extra_bytes;
        free_extra(a);
        chunk_free(a, a->base);
        a->cap = (need + need / 8 + ALIGN - 1) / ALIGN * ALIGN;
        a->base = chunk_alloc(a, a->cap);
    }
    a->used = 0;
}
