/* The loader: one background thread collates batches into a ring of
 * prefetch + 1 buffers allocated at ut_loader_new (prefetch ready ahead, plus
 * the one the consumer holds until its next call), so no memory is allocated
 * per batch. A buffer holds min(batch, dataset) examples, and prefetch is
 * capped at an epoch's batches + 1, so absurd values cost no memory. A single producer fills slots in sampler order and the consumer
 * takes them in the same order, so batches are deterministic.
 *
 * At the end of an epoch (or on a data error) the producer parks after
 * filling a marker slot and no longer touches the sampler. After a 0 the
 * caller may move the sampler (ut_sampler_next_epoch, ut_sampler_seek); the
 * next ut_loader_next resumes from wherever the sampler is, first moving it
 * to the next epoch if it is still at the end; ut_loader_free right after a 0
 * leaves the sampler as the caller left it. Errors are sticky: every later
 * call returns -1 with the same message.
 *
 * With ut_loader_opts: after reading a batch the producer runs the model's
 * prepare on it (the arrays go in the slot's ut_inputs), and the slots'
 * buffers are page-locked memory of the device the batches go to. The
 * consumer records a fence behind its uploads from a slot; the producer
 * waits for it before filling that slot again (ut_inputs_clear). */
#include <pthread.h>
#include <string.h>

#include "data_internal.h"
#include "utrain/base.h"
#include "../backend/backend.h"

typedef struct {
    int status;              /* 1 batch, 0 end of epoch, -1 error */
    int64_t count, epoch, cursor_after;
    int64_t x_len, y_len;    /* a seq2seq batch trimmed in place (0: not) */
    unsigned char *x, *y;
    int64_t *idx;
    ut_inputs in;            /* prepared arrays, and the fence over x, y and them */
    char err[512];
} slot;

struct ut_loader {
    ut_dataset *ds;
    ut_sampler *s;
    ut_loader_opts o;
    const ut_backend *be;            /* o.device's: x and y are its page-locked host memory */
    int32_t *trim;                   /* a token-plane batch trimmed for prepare */
    size_t x_bytes, y_bytes;         /* one example */
    int nslots;
    slot *slots;
    int head, ready;                 /* next slot to hand out; filled slots from head */
    bool holding;                    /* the consumer holds slot head - 1 */
    bool parked, stop, done;         /* producer parked after a marker; stop asked */
    int64_t last_epoch, last_cursor; /* sampler position after the last slot handed out */
    pthread_mutex_t mu;
    pthread_cond_t filled, freed;
    pthread_t thread;
};

static size_t example_bytes(int ndim, const int64_t *ne, ut_dtype dt) {
    size_t e = 1;
    for (int d = 0; d < ndim; d++) e *= (size_t)ne[d];
    return e * ut_dtype_size(dt);
}

/* The model's arrays from the batch in sl (a token-plane batch trimmed to its
 * longest mask first, in l->trim, so the slot keeps the batch as read). */
static int prepare(ut_loader *l, slot *sl) {
    const ut_dataset *ds = l->ds;
    ut_host_array x = {.dtype = ds->x_dtype, .ndim = 1 + ds->x_ndim, .ne = {sl->count}, .host = sl->x};
    for (int d = 0; d < ds->x_ndim; d++) x.ne[1 + d] = ds->x_ne[d];
    if (sl->x_len) x.ne[2] = sl->x_len;
    if (ut_tok_planes(ds)) {
        memcpy(l->trim, sl->x, (size_t)sl->count * l->x_bytes);
        ut_batch b = {.count = sl->count, .x = l->trim};
        x.ne[2] = ut_tok_batch_trim(&b, ds->x_ne[1]);
        x.host = l->trim;
    }
    ut_host_array y = {.dtype = ds->y_dtype, .ndim = 1 + ds->y_ndim, .ne = {sl->count}, .host = sl->y};
    for (int d = 0; d < ds->y_ndim; d++) y.ne[1 + d] = ds->y_ne[d];
    if (sl->y_len) y.ne[1] = sl->y_len;
    sl->in.targets = y;
    int rc = l->o.prepare(l->o.user, &x, &sl->in, sl->err, sizeof sl->err);
    sl->in.targets = (ut_host_array){0};
    if (rc == 0) return 0;
    if (!sl->err[0]) snprintf(sl->err, sizeof sl->err, "preparing a batch of %s failed", ds->name);
    return -1;
}

/* Reads the sampler's next batch into sl (producer thread, no lock held),
 * once the uploads from its last batch are done. */
static void fill(ut_loader *l, slot *sl) {
    ut_sampler *s = l->s;
    ut_inputs_clear(&sl->in);
    sl->err[0] = 0;
    int64_t before = s->cursor;
    sl->count = ut_sampler_next(s, sl->idx);
    sl->status = s->cursor != before ? 1 : 0;
    sl->epoch = s->epoch;
    sl->cursor_after = s->cursor;
    for (int64_t k = 0; k < sl->count; k++) {
        if (l->ds->get(l->ds, sl->idx[k], sl->x + k * l->x_bytes, sl->y + k * l->y_bytes,
                       sl->err, sizeof sl->err) != 0) {
            sl->status = -1;
            return;
        }
    }
    sl->x_len = sl->y_len = 0;
    if (sl->status == 1 && ut_seq2seq_planes(l->ds)) { /* padding to the batch's longest texts, in place */
        ut_batch b = {.count = sl->count, .x = sl->x, .y = sl->y};
        ut_seq2seq_batch_trim(&b, l->ds->x_ne[1]);
        sl->x_len = b.x_len, sl->y_len = b.y_len;
    } else if (sl->status == 1 && ut_tok_labels(l->ds)) { /* a class per token: cut as x will be */
        ut_batch b = {.count = sl->count, .x = sl->x, .y = sl->y};
        ut_tok_labels_trim(&b, l->ds->x_ne[1]);
        sl->y_len = b.y_len;
    }
    if (sl->status == 1 && l->ds->collate) { /* the dataset's collator (masked LM's masks) */
        ut_batch b = {.count = sl->count, .x = sl->x, .y = sl->y, .epoch = sl->epoch, .idx = sl->idx,
                      .x_len = sl->x_len, .y_len = sl->y_len};
        if (l->ds->collate(l->ds, &b, sl->err, sizeof sl->err)) sl->status = -1;
    }
    if (sl->status == 1 && l->o.prepare && prepare(l, sl)) sl->status = -1;
}

static void *producer(void *arg) {
    ut_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && (l->ready + l->holding == l->nslots || l->parked))
            pthread_cond_wait(&l->freed, &l->mu);
        if (l->stop) break;
        slot *sl = &l->slots[(l->head + l->ready) % l->nslots];
        pthread_mutex_unlock(&l->mu);
        fill(l, sl);
        pthread_mutex_lock(&l->mu);
        l->ready++;
        l->parked = sl->status != 1;
        pthread_cond_signal(&l->filled);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

ut_loader *ut_loader_new(ut_dataset *ds, ut_sampler *s, int prefetch) {
    return ut_loader_new_opts(ds, s, prefetch, &(ut_loader_opts){.device = UT_CPU});
}

ut_loader *ut_loader_new_opts(ut_dataset *ds, ut_sampler *s, int prefetch, const ut_loader_opts *o) {
    UT_ASSERT(prefetch >= 1);
    const ut_backend *be = ut_backend_get(o->device);
    UT_ASSERT(be);
    /* the producer parks after an epoch's batches and its end marker, so
     * slots past those are never filled: a larger prefetch is capped */
    int64_t most = ut_sampler_batches_per_epoch(s) + 1;
    ut_loader *l = ut_calloc_check(1, sizeof *l);
    *l = (ut_loader){.ds = ds, .s = s, .o = *o, .be = be, .nslots = (int)(prefetch < most ? prefetch : most) + 1,
                     .x_bytes = example_bytes(ds->x_ndim, ds->x_ne, ds->x_dtype),
                     .y_bytes = example_bytes(ds->y_ndim, ds->y_ne, ds->y_dtype),
                     .last_epoch = s->epoch, .last_cursor = s->cursor};
    /* a batch never holds more than the dataset (a larger batch_size just
     * makes one short batch), so slots are sized for min(local_batch, n) */
    size_t cap = (size_t)(s->local_batch < s->n ? s->local_batch : s->n > 0 ? s->n : 1);
    l->slots = ut_calloc_check((size_t)l->nslots, sizeof *l->slots);
    for (int i = 0; i < l->nslots; i++) {
        l->slots[i].x = ut_host_alloc(be, cap * l->x_bytes);
        l->slots[i].y = ut_host_alloc(be, cap * l->y_bytes);
        l->slots[i].idx = ut_malloc_check(cap * sizeof(int64_t));
        l->slots[i].in.dev = o->device;
    }
    if (o->prepare) l->trim = ut_malloc_check(cap * l->x_bytes);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->filled, NULL);
    pthread_cond_init(&l->freed, NULL);
    if (pthread_create(&l->thread, NULL, producer, l) != 0)
        ut_abort(__FILE__, __LINE__, "loader: cannot start the producer thread");
    return l;
}

/* Returns the held slot to the producer; after a 0 also restarts it, moving
 * the sampler to the next epoch unless the caller already moved it. */
static void release(ut_loader *l) {
    if (!l->holding) return;
    slot *prev = &l->slots[(l->head + l->nslots - 1) % l->nslots];
    l->holding = false;
    if (prev->status == 0) {
        if (ut_sampler_at_end(l->s)) ut_sampler_next_epoch(l->s);
        l->last_epoch = l->s->epoch;
        l->last_cursor = l->s->cursor;
        l->parked = false;
    }
    pthread_cond_signal(&l->freed);
}

int ut_loader_next(ut_loader *l, ut_batch *b, char *err, size_t n) {
    pthread_mutex_lock(&l->mu);
    if (l->done) {
        pthread_mutex_unlock(&l->mu);
        *b = (ut_batch){0};
        return ut_errorf(err, n, "%s", l->slots[(l->head + l->nslots - 1) % l->nslots].err);
    }
    release(l);
    while (l->ready == 0) pthread_cond_wait(&l->filled, &l->mu);
    slot *sl = &l->slots[l->head];
    l->head = (l->head + 1) % l->nslots;
    l->ready--;
    l->holding = true;
    l->done = sl->status < 0;
    if (sl->status >= 0) {
        l->last_epoch = sl->epoch;
        l->last_cursor = sl->cursor_after;
    }
    pthread_mutex_unlock(&l->mu);
    *b = (ut_batch){.count = sl->status == 1 ? sl->count : 0, .x = sl->x, .y = sl->y,
                    .epoch = sl->epoch, .cursor_after = sl->cursor_after, .idx = sl->idx, .inputs = &sl->in,
                    .x_len = sl->x_len, .y_len = sl->y_len};
    if (sl->status < 0) return ut_errorf(err, n, "%s", sl->err);
    return sl->status;
}

void ut_loader_free(ut_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->freed);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    /* After a 0 the sampler is the caller's again (it may have moved it). */
    bool after_end = l->holding && l->slots[(l->head + l->nslots - 1) % l->nslots].status == 0;
    if (!after_end) ut_sampler_seek(l->s, l->last_epoch, l->last_cursor);
    for (int i = 0; i < l->nslots; i++) {
        ut_inputs_free(&l->slots[i].in); /* waits for uploads from the slot */
        ut_host_free(l->be, l->slots[i].x);
        ut_host_free(l->be, l->slots[i].y);
        ut_free(l->slots[i].idx);
    }
    ut_free(l->trim);
    ut_free(l->slots);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->filled);
    pthread_cond_destroy(&l->freed);
    ut_free(l);
}
