/* The dp strategy's step engine: one process, a model replica, a context
 * and a share of each batch per worker thread (the worker group is
 * src/dist/dp.c); the trainer (trainer.c) calls ut_dp_micro_step where it
 * would run a micro-batch itself. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trainer_internal.h"

/* The loss's value, read after ut_backward accepted it (an f32 scalar). */
static float loss_value(const ut_tensor *loss) {
    float v = NAN;
    UT_ASSERT(ut_tensor_get(loss, &v, sizeof v) == 0);
    return v;
}

/* Worker w's forward and backward of its share of the micro-batch, into its
 * replica's gradients; results stay in its replica record. */
static void dp_worker(void *user, int w) {
    ut_trainer *t = user;
    replica *r = &t->rep[w];
    ut_ctx *ctx = ut_dp_ctx(t->dp, w);
    start_rng_stream(t, ctx, w);
    r->rc = 0;
    r->loss = NAN;
    memset(&r->acc, 0, sizeof r->acc);
    r->weight = 0;
    if (r->b.count == 0) return; /* no collectives here: an empty share just waits */
    ut_step_outputs out;
    ut_tensor *y;
    if (ut_forward_batch(&t->h, ctx, ut_dp_model(t->dp, w), t->train, &r->b, &out, &y, r->err,
                         sizeof r->err)) {
        r->rc = -1;
        return;
    }
    /* the window's mean loss: each share weighted by its examples, or by
     * its target tokens (seq2seq: optimizer_step divides by the window's) */
    r->weight = t->token_weights ? ut_batch_weight(t->train, &r->b) : r->b.count;
    ut_tensor *scaled = ut_scale(ctx, out.loss, (float)r->weight / (float)t->dp_window);
    if (t->fp16) scaled = ut_scale(ctx, scaled, t->scaler.scale);
    if (ut_backward(ctx, scaled)) {
        snprintf(r->err, sizeof r->err, "backward: %s", ut_ctx_error(ctx));
        r->rc = -1;
        return;
    }
    r->loss = loss_value(out.loss);
    ut_metric mets[UT_MAX_METRICS];
    int k = ut_batch_metrics(&t->h, t->train, &out, y, mets, UT_MAX_METRICS);
    int64_t tokens = batch_tokens(t, &r->b);
    r->acc.seen += seen_tokens(t, &r->b, tokens);
    accum_add(&r->acc, 0, r->b.count, tokens, mets, k);
    r->acc.loss_sum += (double)r->loss * (double)r->weight;
    r->acc.loss_w += (double)r->weight;
    ut_ctx_reset(ctx);
}

static void accum_merge(accum *dst, const accum *src) {
    dst->loss_sum += src->loss_sum;
    dst->loss_w += src->loss_w;
    dst->examples += src->examples;
    dst->tokens += src->tokens;
    dst->seen += src->seen;
    dst->flos_tokens += src->flos_tokens;
    accum_add(dst, 0, 0, 0, src->mets, src->nmets);
}

/* The workers run side by side; their results are merged in worker order,
 * and on the last micro-batch of a window the replicas' gradients are added
 * into the trainer's model in worker order (deterministic). */
int ut_dp_micro_step(ut_trainer *t, const ut_batch *b, int64_t window_examples, bool last, double *loss) {
    t->rep[0].b = *b;
    t->dp_window = window_examples;
    ut_dp_run(t->dp, dp_worker, t);
    double sum = 0, weight = 0;
    t->win_examples = window_examples;
    for (int w = 0; w < t->ndp; w++) {
        replica *r = &t->rep[w];
        if (r->rc) {
            snprintf(t->err, sizeof t->err, "dp worker %d: %s", w, r->err);
            return -1;
        }
        accum_merge(&t->interval, &r->acc);
        accum_merge(&t->epoch, &r->acc);
        sum += r->acc.loss_sum;
        weight += r->acc.loss_w;
        t->win_weight += r->weight;
    }
    *loss = weight > 0 ? sum / weight : NAN;
    if (last) ut_dp_reduce_grads(t->dp);
    return 0;
}

static ut_model *dp_build(void *user, char *err, size_t n) {
    ut_trainer *t = user;
    return ut_model_from_config(t->cfg, t->train, err, n);
}

/* The worker group (replicas built from the config) and rank w's share of
 * every batch for each worker. */
int ut_dp_setup(ut_trainer *t, bool own_m) {
    const ut_config *c = t->cfg;
    if (t->world > 1) {
        snprintf(t->err, sizeof t->err,
                 "dist.strategy dp runs in one process with worker threads; under %d processes use "
                 "ddp (or zero1/zero2/zero3)", t->world);
        return -1;
    }
    if (!own_m && t->ndp > 1) {
        snprintf(t->err, sizeof t->err,
                 "dist.strategy dp builds a replica per worker from the config: pass no model to "
                 "ut_trainer_run (or use ddp)");
        return -1;
    }
    t->dp = ut_dp_new(t->ndp, t->m, t->ctx, dp_build, t, (uint64_t)c->seed, t->err, sizeof t->err);
    if (!t->dp) return -1;
    t->rep = ut_calloc_check((size_t)t->ndp, sizeof *t->rep);
    for (int w = 0; w < t->ndp; w++) ut_run_ctx_setup(ut_dp_ctx(t->dp, w), c);
    for (int w = 1; w < t->ndp; w++) {
        ut_sampler_init(&t->rep[w].sampler, t->train->n, c->batch_size, w, t->ndp, ut_run_data_seed(c),
                        c->shuffle, c->drop_last);
        if (t->sampler.lengths) /* data.group_by_length: worker 0's lengths, read once */
            ut_sampler_group_by_length(&t->rep[w].sampler, t->sampler.lengths, t->sampler.megabatch);
    }
    return 0;
}

void ut_dp_step_free(ut_trainer *t) {
    for (int w = 1; t->rep && w < t->ndp; w++) {
        replica *r = &t->rep[w];
        if (r->loader) ut_loader_free(r->loader);
        ut_sampler_free(&r->sampler);
    }
    ut_free(t->rep);
    ut_dp_free(t->dp);
}

