/* The distributed sampler. The order of an epoch depends only on (seed,
 * epoch, n): it is the same on every rank and for every world size, so the
 * global cursor alone says where a run is. */
#include <stdlib.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/data.h"

void ut_sampler_init(ut_sampler *s, int64_t n, int64_t local_batch, int rank, int world,
                     uint64_t seed, bool shuffle, bool drop_last) {
    UT_ASSERT(n >= 0 && local_batch >= 1 && world >= 1 && rank >= 0 && rank < world);
    *s = (ut_sampler){.n = n, .local_batch = local_batch, .rank = rank, .world = world,
                      .seed = seed, .shuffle = shuffle, .drop_last = drop_last,
                      .order_epoch = -1};
    s->order = ut_malloc_check((size_t)(n > 0 ? n : 1) * sizeof *s->order);
}

void ut_sampler_free(ut_sampler *s) {
    ut_free(s->order);
    ut_free(s->lengths);
    s->order = NULL;
    s->lengths = NULL;
    s->order_epoch = -1;
}

void ut_sampler_group_by_length(ut_sampler *s, const int32_t *lengths, int64_t megabatch) {
    UT_ASSERT(megabatch >= 1);
    ut_free(s->lengths);
    s->lengths = ut_malloc_check((size_t)(s->n > 0 ? s->n : 1) * sizeof *s->lengths);
    if (s->n) memcpy(s->lengths, lengths, (size_t)s->n * sizeof *lengths);
    s->megabatch = megabatch;
    s->order_epoch = -1;
}

/* an example of a megabatch: its length, then its place (a stable sort) */
typedef struct {
    int32_t len;
    int64_t at, idx;
} sized;

static int longest_first(const void *pa, const void *pb) {
    const sized *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->at < b->at ? -1 : a->at > b->at;
}

/* transformers' get_length_grouped_indices on the drawn order */
static void group(ut_sampler *s) {
    int64_t m = s->megabatch, best = -1, best_at = 0;
    sized *buf = ut_malloc_check((size_t)(m < s->n ? m : s->n > 0 ? s->n : 1) * sizeof *buf);
    for (int64_t start = 0; start < s->n; start += m) {
        int64_t k = m < s->n - start ? m : s->n - start;
        for (int64_t i = 0; i < k; i++)
            buf[i] = (sized){s->lengths[s->order[start + i]], i, s->order[start + i]};
        qsort(buf, (size_t)k, sizeof *buf, longest_first);
        for (int64_t i = 0; i < k; i++) s->order[start + i] = buf[i].idx;
        if (buf[0].len > best) best = buf[0].len, best_at = start; /* the first of the longest */
    }
    ut_free(buf);
    int64_t t = s->order[0];
    s->order[0] = s->order[best_at];
    s->order[best_at] = t;
}

static int64_t global_batch(const ut_sampler *s) { return s->local_batch * s->world; }

/* Positions of the epoch that batches cover: all of them, or only whole
 * global batches with drop_last. */
static int64_t epoch_limit(const ut_sampler *s) {
    return s->drop_last ? s->n / global_batch(s) * global_batch(s) : s->n;
}

int64_t ut_sampler_batches_per_epoch(const ut_sampler *s) {
    int64_t g = global_batch(s);
    return s->drop_last ? s->n / g : s->n / g + (s->n % g != 0); /* no n + g - 1: g may be huge */
}

bool ut_sampler_at_end(const ut_sampler *s) { return s->cursor >= epoch_limit(s); }

/* Uniform in [0, bound) without modulo bias (rejection). */
static uint64_t rng_below(ut_rng *r, uint64_t bound) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do x = ut_rng_u64(r);
    while (x >= limit);
    return x % bound;
}

/* Draws the permutation of the current epoch: Fisher-Yates from a generator
 * seeded by a mix of (seed, epoch). */
static void ensure_order(ut_sampler *s) {
    if (s->order_epoch == s->epoch) return;
    for (int64_t i = 0; i < s->n; i++) s->order[i] = i;
    if (s->shuffle) {
        ut_rng r;
        ut_rng_seed(&r, s->seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(s->epoch + 1)));
        for (int64_t i = s->n - 1; i > 0; i--) {
            int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1), t = s->order[i];
            s->order[i] = s->order[j];
            s->order[j] = t;
        }
    }
    if (s->lengths && s->n) group(s);
    s->order_epoch = s->epoch;
}

/* This rank's share of the global batch that starts at position start. */
static int64_t share(const ut_sampler *s, int64_t start, int64_t *lo) {
    int64_t limit = epoch_limit(s);
    int64_t end = global_batch(s) < limit - start ? start + global_batch(s) : limit;
    *lo = start + s->rank * s->local_batch;
    int64_t hi = *lo + s->local_batch < end ? *lo + s->local_batch : end;
    return hi > *lo ? hi - *lo : 0;
}

int64_t ut_sampler_global_batch_size(const ut_sampler *s, int64_t j) {
    if (j < 0 || j >= ut_sampler_batches_per_epoch(s)) return 0;
    int64_t left = epoch_limit(s) - j * global_batch(s);
    return left < global_batch(s) ? left : global_batch(s);
}

int64_t ut_sampler_batch_size(const ut_sampler *s, int64_t j) {
    int64_t lo;
    return j < 0 || j >= ut_sampler_batches_per_epoch(s) ? 0 : share(s, j * global_batch(s), &lo);
}

int64_t ut_sampler_next(ut_sampler *s, int64_t *idx) {
    int64_t limit = epoch_limit(s);
    if (s->cursor >= limit) return 0;
    ensure_order(s);
    int64_t lo, count = share(s, s->cursor, &lo);
    if (count) memcpy(idx, s->order + lo, (size_t)count * sizeof *idx);
    s->cursor = global_batch(s) < limit - s->cursor ? s->cursor + global_batch(s) : limit;
    return count;
}

void ut_sampler_next_epoch(ut_sampler *s) {
    s->epoch++;
    s->cursor = 0;
}

void ut_sampler_seek(ut_sampler *s, int64_t epoch, int64_t cursor) {
    UT_ASSERT(epoch >= 0 && cursor >= 0);
    s->epoch = epoch;
    s->cursor = cursor < s->n ? cursor : s->n;
}
