/* Pipeline parallelism's step engine: a stage's forwards and backwards of a
 * window's micro-batches, the transfers between stages and the tied
 * embedding's gradient (docs/distributed.md, "Pipeline parallelism"). The
 * trainer (trainer.c) calls ut_pp_micro_step for each micro-batch where it
 * would run one forward and backward itself. */
#include <stdio.h>
#include <string.h>

#include "trainer_internal.h"

/* ---- pipeline parallelism: a stage's forwards and backwards ----
 * Every stage reads the same batches (its data-parallel rank's share); the
 * first stage embeds them, each later one starts from the activation the
 * one before sent, and only the last computes the loss. A window's
 * micro-batches flow through the stages in one of two orders, the same on
 * every stage, so sends and receives meet:
 *   gpipe  every forward, then every backward (all of them in flight);
 *   1f1b   stage s runs its first P - s forwards (the pipeline fills), then
 *          one backward after each forward, then the backwards left, so at
 *          most P - s micro-batches are in flight.
 * Backwards run in micro-batch order; the window's last one runs with the
 * strategy's hooks armed (ddp's buckets over the data-parallel ranks). A
 * transfer is a header (ndim and shape, as floats) and the values, through
 * host memory: float32, or 16-bit under train.precision bf16 / fp16. */
typedef struct stage_slot {
    ut_ctx *ctx;
    ut_tensor *x;     /* the received activation (requires grad); NULL on the first stage */
    ut_tensor *out;   /* the stage's output (not the last stage) */
    ut_tensor *loss;  /* the scaled loss (the last stage) */
    float *buf;       /* host memory for this slot's sends and receives */
    int64_t cap;
    float hdr[4];
    ut_comm_req *req; /* its send in flight, or NULL */
} stage_slot;

int ut_pp_fail(ut_trainer *t, const char *what) {
    snprintf(t->err, sizeof t->err, "pipeline stage %d: %s: %s", t->mesh.pp_rank, what,
             ut_comm_error(t->mesh.pp_group));
    return -1;
}

static float *slot_buf(stage_slot *sl, int64_t n) {
    if (n > sl->cap) {
        ut_free(sl->buf);
        sl->buf = ut_malloc_check((size_t)n * sizeof(float));
        sl->cap = n;
    }
    return sl->buf;
}

/* Waits for the slot's send in flight, so that its buffer may be reused. */
static int slot_wait(ut_trainer *t, stage_slot *sl) {
    ut_comm_req *r = sl->req;
    sl->req = NULL;
    return r && ut_comm_wait(t->mesh.pp_group, r) ? ut_pp_fail(t, "send") : 0;
}

/* Values on the wire: float32, or under train.precision bf16 / fp16 that
 * 16-bit type (half the bytes; the receiver widens them back to float32,
 * as the stage's autocast would have rounded its products anyway). */
static int64_t wire_floats(const ut_trainer *t, int64_t n) { return t->pp_wire == UT_F32 ? n : (n + 1) / 2; }

/* buf (n float32 on the host) rounded to the wire's 16-bit type in place
 * (its first n * 2 bytes), through a conversion on ctx's device */
static int narrow(ut_trainer *t, ut_ctx *ctx, float *buf, int ndim, const int64_t *ne, int64_t n) {
    ut_tensor *h = ut_tensor_to(ctx, ut_tensor_from(ctx, UT_F32, ndim, ne, buf), t->pp_wire);
    return !h || ut_tensor_get(h, buf, (size_t)n * 2) ? -1 : 0;
}

/* Megatron-LM's scatter/gather: the activations and gradients at a stage
 * boundary are the same on every rank of a tensor-parallel group, so each
 * sends only its 1/tp part to its peer (the same tensor rank of the next or
 * previous stage) and the receiving group puts the parts back together
 * (an all-gather): the traffic between stages is the tensor's once, not tp
 * times. Whole sends where tp is 1 or does not divide the tensor. */
static int64_t part_of(const ut_trainer *t, int64_t n) { return t->tp > 1 && n % t->tp == 0 ? n / t->tp : n; }

/* t's values to the pipeline's rank peer: with its shape first when header. */
static int pp_send(ut_trainer *t, stage_slot *sl, const ut_tensor *v, bool grad, bool header, int peer) {
    int64_t n = ut_nelem(v), k = part_of(t, n);
    if (slot_wait(t, sl)) return -1;
    float *buf = slot_buf(sl, n);
    bool bad = grad ? ut_tensor_get_grad(v, buf, (size_t)n * sizeof(float)) : ut_tensor_get(v, buf, (size_t)n * sizeof(float));
    if (!bad && k < n) memmove(buf, buf + (int64_t)t->mesh.tp_rank * k, (size_t)k * sizeof(float));
    if (!bad && t->pp_wire != UT_F32) bad = narrow(t, sl->ctx, buf, 1, (int64_t[]){k}, k);
    if (bad) {
        snprintf(t->err, sizeof t->err, "pipeline stage %d: reading its %s", t->mesh.pp_rank,
                 grad ? "input's gradient" : "output");
        return -1;
    }
    ut_comm *pg = t->mesh.pp_group;
    if (header) {
        sl->hdr[0] = (float)v->ndim;
        for (int d = 0; d < 3; d++) sl->hdr[1 + d] = d < v->ndim ? (float)v->ne[d] : 1.0f;
        if (ut_comm_wait(pg, ut_comm_isend(pg, sl->hdr, 4, peer))) return ut_pp_fail(t, "sending a shape");
    }
    sl->req = ut_comm_isend(pg, buf, wire_floats(t, k), peer);
    return sl->req ? 0 : ut_pp_fail(t, "sending");
}

/* A tensor of ctx received from the pipeline's rank peer: shaped by a header
 * first (like), or like `like`. NULL on failure (t->err). */
static ut_tensor *pp_recv(ut_trainer *t, stage_slot *sl, const ut_tensor *like, int peer) {
    ut_comm *pg = t->mesh.pp_group;
    int ndim;
    int64_t ne[3];
    if (like) {
        ndim = like->ndim;
        for (int d = 0; d < ndim; d++) ne[d] = like->ne[d];
    } else {
        float hdr[4];
        if (ut_comm_wait(pg, ut_comm_irecv(pg, hdr, 4, peer))) return ut_pp_fail(t, "receiving a shape"), NULL;
        ndim = (int)hdr[0];
        if (ndim < 1 || ndim > 3) {
            snprintf(t->err, sizeof t->err, "pipeline stage %d: stage %d sent a %d-dimensional activation",
                     t->mesh.pp_rank, peer, ndim);
            return NULL;
        }
        for (int d = 0; d < ndim; d++) ne[d] = (int64_t)hdr[1 + d];
    }
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= ne[d];
    if (slot_wait(t, sl)) return NULL;
    int64_t k = part_of(t, n);
    float *buf = slot_buf(sl, n + k); /* the whole at the front, this rank's part after it */
    float *part = k < n ? buf + n : buf;
    if (ut_comm_wait(pg, ut_comm_irecv(pg, part, wire_floats(t, k), peer))) return ut_pp_fail(t, "receiving"), NULL;
    if (t->pp_wire != UT_F32) { /* widened back to float32 */
        ut_tensor *h = ut_tensor_new(sl->ctx, t->pp_wire, 1, (int64_t[]){k});
        UT_ASSERT(ut_tensor_set(h, part, (size_t)k * 2) == 0);
        h = ut_tensor_to(sl->ctx, h, UT_F32);
        if (!h || ut_tensor_get(h, part, (size_t)k * sizeof(float))) {
            snprintf(t->err, sizeof t->err, "pipeline stage %d: widening a 16-bit transfer", t->mesh.pp_rank);
            return NULL;
        }
    }
    if (k < n && ut_comm_wait(t->mesh.tp_group, ut_comm_iallgather(t->mesh.tp_group, part, buf, k))) {
        snprintf(t->err, sizeof t->err, "pipeline stage %d: gathering a transfer over the tp group: %s",
                 t->mesh.pp_rank, ut_comm_error(t->mesh.tp_group));
        return NULL;
    }
    ut_tensor *x = ut_tensor_new(sl->ctx, UT_F32, ndim, ne);
    UT_ASSERT(ut_tensor_set(x, buf, (size_t)n * sizeof(float)) == 0);
    return x;
}

/* This stage's output for batch b of ds on ctx (the model's forward; the
 * stage's input is in m->stage_input). */
static ut_tensor *stage_output(ut_trainer *t, ut_ctx *ctx, ut_dataset *ds, const ut_batch *b) {
    if (b->inputs && b->inputs->n > 0) return ut_model_forward_inputs(t->m, ctx, b->inputs);
    ut_tensor *x = NULL, *y = NULL;
    if (t->h.collate(t->h.user, ctx, ds, b, &x, &y)) return NULL;
    if (b->inputs) ut_inputs_fence(ctx, b->inputs);
    return ut_model_forward(t->m, ctx, x);
}

static int pp_forward(ut_trainer *t, const ut_batch *b, int64_t window_examples, bool last) {
    stage_slot *sl = &t->slots[t->pp_fwd % t->nslots];
    ut_ctx *ctx = sl->ctx;
    int stage = t->mesh.pp_rank;
    bool tail = stage == t->pp - 1, empty = b->count == 0;
    if (empty && ut_standin_batch(t->train, &t->standin, t->err, sizeof t->err)) return -1;
    const ut_batch *run = empty ? &t->standin : b;
    /* every stage draws from its data-parallel rank's stream for the
     * micro-batch, each block in its own region: the whole model's masks */
    start_rng_stream(t, ctx, t->drank);
    sl->x = NULL, sl->out = NULL, sl->loss = NULL;
    if (stage > 0) {
        if (!(sl->x = pp_recv(t, sl, NULL, stage - 1))) return -1;
        ut_tensor_set_requires_grad(sl->x, true);
    }
    t->m->stage_input = sl->x;
    /* the micro-batch's share of the window: its examples, or its target
     * tokens (sequence-to-sequence data), on every stage alike, so that
     * each stage's optimizer step makes the window's mean over tokens of it
     * (trainer.c's micro_step and optimizer_step) */
    int64_t w = t->token_weights && !empty ? ut_batch_weight(t->train, b) : b->count;
    t->win_weight += w;
    t->win_examples = window_examples;
    if (tail) {
        ut_step_outputs out;
        ut_tensor *y;
        if (ut_forward_batch(&t->h, ctx, t->m, t->train, run, &out, &y, t->err, sizeof t->err)) return -1;
        ut_tensor *scaled = ut_scale(ctx, out.loss, (float)w / (float)window_examples);
        if (t->fp16) scaled = ut_scale(ctx, scaled, t->scaler.scale);
        sl->loss = scaled;
        if (!empty) ut_trainer_record(t, &out, y, b);
        if (last) t->win_last = empty ? -1 : t->win_n - 1;
    } else {
        if (!(sl->out = stage_output(t, ctx, t->train, run))) {
            snprintf(t->err, sizeof t->err, "pipeline stage %d: forward failed: %s", stage,
                     ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "no output");
            return -1;
        }
        if (pp_send(t, sl, sl->out, false, true, stage + 1)) return -1;
        /* the examples and tokens for the log (the loss is the last stage's) */
        int64_t tokens = batch_tokens(t, b);
        t->interval.seen += seen_tokens(t, b, tokens);
        accum_add(&t->interval, 0, b->count, tokens, NULL, 0);
        accum_add(&t->epoch, 0, b->count, tokens, NULL, 0);
    }
    t->m->stage_input = NULL;
    t->pp_fwd++;
    return 0;
}

/* The window's next backward; sync: its last (the strategy's reduction). */
static int pp_backward(ut_trainer *t, bool sync) {
    stage_slot *sl = &t->slots[t->pp_bwd % t->nslots];
    ut_ctx *ctx = sl->ctx;
    int stage = t->mesh.pp_rank;
    ut_dist_backward_begin(t->dist, ctx, sync);
    int rc;
    if (stage == t->pp - 1) {
        rc = ut_backward(ctx, sl->loss);
    } else {
        ut_tensor *g = pp_recv(t, sl, sl->out, stage + 1);
        if (!g) return -1;
        rc = ut_backward_from(ctx, sl->out, g);
    }
    if (rc) {
        snprintf(t->err, sizeof t->err, "backward: %s", ut_ctx_error(ctx));
        return -1;
    }
    if (stage > 0 && pp_send(t, sl, sl->x, true, false, stage - 1)) return -1;
    ut_ctx_reset(ctx);
    if (ut_dist_backward_end(t->dist, ctx, sync)) {
        snprintf(t->err, sizeof t->err, "gradient reduction: %s", ut_comm_error(ut_dist_failed(t->dist)));
        return -1;
    }
    t->pp_bwd++;
    return 0;
}

/* The tied embedding's two copies (first and last stage) get the sum of
 * their gradients, so they stay the same values. */
static int pp_sync_embedding(ut_trainer *t) {
    if (!t->embed_used) return 0;
    ut_params *p = &t->m->params;
    int i = t->m->pp_tied ? param_index(p, t->m->pp_tied) : -1;
    if (i < 0) return 0;
    const ut_backend *be = ut_backend_get(p->device);
    size_t bytes = (size_t)p->segs[i].numel * sizeof(float);
    ut_stage st;
    float *g = p->flat_grad + p->segs[i].offset;
    if (ut_comm_direct(t->embed, p->device)) { /* queued between the compute stream's work */
        if (!ut_comm_direct_allreduce_ordered(t->embed, p->device, g, p->segs[i].numel, UT_F32, UT_REDUCE_SUM))
            return 0;
        snprintf(t->err, sizeof t->err, "the tied embedding's gradient: %s", ut_comm_error(t->embed));
        return -1;
    }
    float *h = ut_comm_accepts_device_memory(t->embed, p->device) ? g : ut_stage_begin(&st, be, g, bytes, true);
    int rc = ut_comm_wait(t->embed, ut_comm_iallreduce(t->embed, h, p->segs[i].numel));
    if (h != g) ut_stage_end(&st, true);
    if (rc) snprintf(t->err, sizeof t->err, "the tied embedding's gradient: %s", ut_comm_error(t->embed));
    return rc ? -1 : 0;
}

/* The parameters several stages hold (ut_model.pp_shared, small tables):
 * every stage of the pipeline puts its copies' gradients (zeros for those
 * it does not hold) in one host buffer, the group sums it, and each holder
 * takes the sum back, so the copies take the same steps. */
static int pp_sync_shared(ut_trainer *t) {
    if (!t->nshared) return 0;
    ut_params *p = &t->m->params;
    const ut_backend *be = ut_backend_get(p->device);
    float *buf = t->shared_buf;
    memset(buf, 0, (size_t)t->shared_total * sizeof *buf);
    int64_t at = 0;
    for (int k = 0; k < t->nshared; at += t->shared_n[k], k++) {
        int i = t->shared_idx[k];
        if (i < 0) continue;
        ut_stage st;
        size_t bytes = (size_t)t->shared_n[k] * sizeof(float);
        memcpy(buf + at, ut_stage_begin(&st, be, p->flat_grad + p->segs[i].offset, bytes, true), bytes);
        ut_stage_end(&st, false);
    }
    ut_comm *pg = t->mesh.pp_group;
    if (ut_comm_wait(pg, ut_comm_iallreduce(pg, buf, t->shared_total)))
        return ut_pp_fail(t, "the shared tables' gradients");
    at = 0;
    for (int k = 0; k < t->nshared; at += t->shared_n[k], k++) {
        int i = t->shared_idx[k];
        if (i < 0) continue;
        ut_stage st;
        size_t bytes = (size_t)t->shared_n[k] * sizeof(float);
        memcpy(ut_stage_begin(&st, be, p->flat_grad + p->segs[i].offset, bytes, false), buf + at, bytes);
        ut_stage_end(&st, true);
    }
    return 0;
}

int ut_pp_micro_step(ut_trainer *t, const ut_batch *b, int64_t window_examples, bool last) {
    /* zero2 and zero3 shard the gradients as their buckets complete, so the
     * copies of a weight several stages hold must be summed before: the
     * window's last backward runs without the hooks, and the reduction
     * follows the sum */
    ut_dist_kind kind = ut_dist_kind_of(t->dist);
    bool defer = (t->embed_used || t->nshared) && (kind == UT_DIST_ZERO2 || kind == UT_DIST_ZERO3);
    if (t->pp_fwd == 0) t->pp_bwd = 0;
    if (pp_forward(t, b, window_examples, last)) return -1;
    int64_t ahead = t->pp - 1 - t->mesh.pp_rank; /* 1f1b: forwards before the first backward, less one */
    if (!t->gpipe)
        while (t->pp_bwd < t->pp_fwd - ahead)
            if (pp_backward(t, !defer && last && t->pp_bwd + 1 == t->pp_fwd)) return -1;
    if (!last) return 0;
    while (t->pp_bwd < t->pp_fwd)
        if (pp_backward(t, !defer && t->pp_bwd + 1 == t->pp_fwd)) return -1;
    for (int k = 0; k < t->nslots; k++)
        if (slot_wait(t, &t->slots[k])) return -1;
    t->pp_fwd = t->pp_bwd = 0;
    if (pp_sync_embedding(t) || pp_sync_shared(t)) return -1;
    if (defer) { /* every bucket reduced now, none during a backward */
        ut_ctx *ctx = t->slots[0].ctx;
        ut_dist_backward_begin(t->dist, ctx, true);
        if (ut_dist_backward_end(t->dist, ctx, true)) {
            snprintf(t->err, sizeof t->err, "gradient reduction: %s", ut_comm_error(ut_dist_failed(t->dist)));
            return -1;
        }
    }
    return 0;
}

/* ---- evaluation through the stages ----
 * Every stage reads the same dev batches (its data-parallel rank's share);
 * each runs its blocks on what the stage before sent and sends the result
 * on (through its own slot, eval_slot, on the evaluation's context), and
 * the last computes the loss and metrics, which it then hands to the
 * others (rank 0, on the first stage, logs them and keeps the best). */
static int eval_stage(void *arg, ut_ctx *ctx, ut_model *m, const ut_batch *b, char *err, size_t n) {
    ut_trainer *t = arg;
    stage_slot *sl = t->eval_slot;
    int stage = t->mesh.pp_rank;
    sl->ctx = ctx;
    ut_dataset *ds = t->eval_ds;
    m->stage_input = NULL;
    if (stage > 0 && !(m->stage_input = pp_recv(t, sl, NULL, stage - 1))) return snprintf(err, n, "%s", t->err), -1;
    if (stage == t->pp - 1) return 0;
    ut_tensor *out = stage_output(t, ctx, ds, b);
    m->stage_input = NULL;
    if (!out) return snprintf(err, n, "pipeline stage %d: forward failed: %s", stage,
                              ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "no output"), -1;
    if (pp_send(t, sl, out, false, true, stage + 1)) return snprintf(err, n, "%s", t->err), -1;
    return 1;
}

int ut_pp_evaluate(ut_trainer *t, ut_dataset *ds, int64_t batch, bool (*stop)(void *), void *arg, ut_eval_result *res,
                   double *outputs, bool *have_outputs) {
    if (!t->eval_slot) t->eval_slot = ut_calloc_check(1, sizeof *t->eval_slot);
    t->eval_ds = ds;
    int rc = ut_evaluate_stage(t->dcomm, t->ctx, t->m, ds, batch, &t->h, ut_cls_wanted(t->cfg), stop, arg, eval_stage,
                               t, res, outputs, have_outputs, t->err, sizeof t->err);
    if (slot_wait(t, t->eval_slot)) rc = -1;
    if (rc < 0) return -1;
    /* the last stage's numbers to every stage (an abandoned one is the same everywhere) */
    int last = t->pp - 1;
    ut_comm *pg = t->mesh.pp_group;
    if (rc == 0 && ut_comm_bcast(pg, res, sizeof *res, last)) return ut_pp_fail(t, "the evaluation's results");
    if (rc == 0 && outputs && (ut_comm_bcast(pg, have_outputs, sizeof *have_outputs, last) ||
                               ut_comm_bcast(pg, outputs, (size_t)(ds->n * ut_dataset_outputs(ds)) * sizeof *outputs, last)))
        return ut_pp_fail(t, "the evaluation's outputs");
    return rc;
}

/* ut_model.pp_shared: which stages hold each (every stage learns their
 * sizes, to take part in the sum with zeros), and the norm's copy of it
 * (the first holder's); the last stage's copy of the tied embedding is
 * left to the first stage too. */
static int shared_setup(ut_trainer *t) {
    ut_params *p = &t->m->params;
    int stage = t->mesh.pp_rank, n = 0;
    t->norm_skip = ut_calloc_check((size_t)p->n, sizeof *t->norm_skip);
    if (stage == t->pp - 1 && t->pp > 1 && t->m->pp_tied) {
        int i = param_index(p, t->m->pp_tied);
        if (i >= 0) t->norm_skip[i] = true;
    }
    while (t->m->pp_shared && t->m->pp_shared[n]) n++;
    if (!n) return 0;
    /* per table: the stages holding it (a bit each) and their sizes' sum */
    int64_t *info = ut_calloc_check((size_t)(2 * n), sizeof *info);
    t->shared_idx = ut_calloc_check((size_t)n, sizeof *t->shared_idx);
    t->shared_n = ut_calloc_check((size_t)n, sizeof *t->shared_n);
    for (int k = 0; k < n; k++) {
        int i = t->shared_idx[k] = param_index(p, t->m->pp_shared[k]);
        if (i >= 0) info[2 * k] = (int64_t)1 << stage, info[2 * k + 1] = p->segs[i].numel;
    }
    int rc = ut_comm_allreduce_i64(t->mesh.pp_group, info, 2 * n) ? ut_pp_fail(t, "the shared tables") : 0;
    for (int k = 0; k < n && !rc; k++) {
        int holders = __builtin_popcountll((unsigned long long)info[2 * k]);
        int i = t->shared_idx[k];
        if (!holders) continue; /* a table of a stack without blocks (not built) */
        t->shared_n[k] = info[2 * k + 1] / holders;
        if (info[2 * k + 1] % holders || (i >= 0 && p->segs[i].numel != t->shared_n[k])) {
            snprintf(t->err, sizeof t->err, "pipeline stage %d: %s has different sizes on the stages that hold it",
                     stage, t->m->pp_shared[k]);
            rc = -1;
        }
        if (i >= 0 && (info[2 * k] & (((int64_t)1 << stage) - 1)))
            t->norm_skip[i] = true; /* a stage before holds it and counts it */
        t->shared_total += t->shared_n[k];
    }
    ut_free(info);
    t->nshared = n;
    if (!rc) t->shared_buf = ut_malloc_check((size_t)(t->shared_total ? t->shared_total : 1) * sizeof *t->shared_buf);
    return rc;
}

int ut_pp_setup(ut_trainer *t) {
    const ut_config *c = t->cfg;
    t->gpipe = !strcmp(c->pipeline_schedule, "gpipe");
    int64_t M = t->accum_steps < t->batches_per_epoch ? t->accum_steps : t->batches_per_epoch;
    t->nslots = (int)(t->gpipe ? M : M < t->pp ? M : t->pp);
    t->slots = ut_calloc_check((size_t)t->nslots, sizeof *t->slots);
    for (int k = 0; k < t->nslots; k++) {
        ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = (uint64_t)c->seed, .device = ut_config_device(c)});
        ut_run_ctx_setup(ctx, c);
        ut_dist_attach(t->dist, ctx);
        t->slots[k].ctx = ctx;
    }
    /* the tied embedding: a group of the first and the last stage of each data-parallel rank */
    int stage = t->mesh.pp_rank;
    bool ends = stage == 0 || stage == t->pp - 1;
    char why[512];
    /* (the stages between are each a group of one, unused) */
    int color = ends ? t->mesh.dp_rank * t->tp + t->mesh.tp_rank : t->mesh.dp * t->tp + t->rank;
    if (!(t->embed = ut_comm_split(t->comm, color, stage, "embed", why, sizeof why))) {
        snprintf(t->err, sizeof t->err, "the tied embedding's group: %s", why);
        return -1;
    }
    t->embed_used = ends && t->pp > 1 && t->m->pp_tied; /* a model with a tied head (not the classifiers) */
    ut_devcomm_mode mode = UT_DEVCOMM_AUTO;
    ut_devcomm_parse(t->cfg->device_comm, &mode);
    char path[640];
    if (ut_comm_device_setup(t->embed, t->m->params.device, mode, path, sizeof path, t->err, sizeof t->err))
        return -1;
    const ut_backend *be = ut_backend_get(t->m->params.device);
    if (t->rank == 0 && t->embed_used && !be->host_memory)
        ut_say(&t->log, "The tied embedding's gradient between the first and last stages (device %s): %s\n", be->name,
               path);
    return shared_setup(t);
}

double ut_pp_flops(const ut_trainer *t) {
    double f = 0;
    for (int k = 0; k < t->nslots; k++) f += ut_ctx_flops(t->slots[k].ctx);
    return f;
}

void ut_pp_free(ut_trainer *t) {
    if (t->eval_slot) {
        if (t->eval_slot->req) ut_comm_wait(t->mesh.pp_group, t->eval_slot->req);
        ut_free(t->eval_slot->buf);
        ut_free(t->eval_slot);
        t->eval_slot = NULL;
    }
    for (int k = 0; k < t->nslots; k++) {
        if (t->slots[k].req) ut_comm_wait(t->mesh.pp_group, t->slots[k].req);
        if (t->slots[k].ctx) ut_ctx_free(t->slots[k].ctx);
        ut_free(t->slots[k].buf);
    }
    ut_free(t->slots);
    t->slots = NULL;
    if (t->embed) ut_comm_finalize(t->embed);
    t->embed = NULL;
    ut_free(t->shared_idx), ut_free(t->shared_n), ut_free(t->shared_buf), ut_free(t->norm_skip);
    t->shared_idx = NULL, t->shared_n = NULL, t->shared_buf = NULL, t->norm_skip = NULL;
    t->nshared = 0, t->shared_total = 0;
}
