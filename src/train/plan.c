/* `utrain plan`: per-rank memory of each distributed strategy (parameters,
 * gradients, optimizer state, measured activations with and without
 * checkpointing, the process's runtime base) and which strategies fit. The
 * formulas are in include/utrain/train.h and docs/plan.md. */
#include <ctype.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_internal.h"
#include "../backend/backend.h"

#define MIB 1048576.0

/* This process's resident memory (VmRSS of /proc/self/status), 0 if unknown. */
static int64_t resident_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) {
            kb = strtoll(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return (int64_t)kb * 1024;
}

/* The optimizer's kind and the settings that size its state. */
static int plan_optim(const ut_config *c, ut_optim_config *oc, char *err, size_t n) {
    ut_optim_kind k;
    if (ut_optim_parse(c->optim_name, &k))
        return ut_errorf(err, n, "optim.name: unknown optimizer '%s'", c->optim_name);
    *oc = (ut_optim_config){.kind = k, .momentum = (float)c->momentum,
                            .beta1 = k == UT_OPTIM_ADAFACTOR ? (float)c->adafactor_beta1 : (float)c->beta1};
    return 0;
}

/* Floats of optimizer state per parameter element: AdamW 2 (exp_avg,
 * exp_avg_sq), Lion 1 (exp_avg), SGD with momentum 1 (momentum_buffer),
 * plain SGD 0, Adafactor 1 with a first moment (exp_avg), else 0 (its
 * factored second moment is per row and column: plan_state). */
static int optim_floats(const ut_config *c, char *err, size_t n) {
    ut_optim_config oc;
    if (plan_optim(c, &oc, err, n)) return -1;
    int k = ut_optim_state_per_param(&oc);
    return oc.kind == UT_OPTIM_ADAFACTOR ? k - 1 : k;
}

/* The optimizer's state floats over the parameters p. */
static int64_t plan_state(const ut_config *c, const ut_params *p) {
    ut_optim_config oc;
    if (plan_optim(c, &oc, NULL, 0)) return 0;
    int64_t total = 0;
    for (int i = 0; i < ut_optim_state_per_param(&oc); i++)
        for (int k = 0; k < p->n; k++) total += ut_optim_seg_state_len(&oc, i, &p->segs[k]);
    return total;
}

/* The ZeRO-3 units of the policy: the three largest, their bytes and names. */
static int largest_units(const ut_params *p, const char *policy, ut_plan *pl, char *err, size_t n) {
    int *unit_of = ut_malloc_check(sizeof(int) * (size_t)(p->n ? p->n : 1));
    int units = ut_wrap_units(p, policy, unit_of, err, n);
    if (units < 0) {
        ut_free(unit_of);
        return -1;
    }
    int64_t *size = ut_calloc_check((size_t)(units ? units : 1), sizeof(int64_t));
    int *first = ut_calloc_check((size_t)(units ? units : 1), sizeof(int));
    for (int i = p->n - 1; i >= 0; i--) {
        size[unit_of[i]] += p->segs[i].numel;
        first[unit_of[i]] = i;
    }
    /* the three largest: two in use (an op may read two units) and the
     * next one, prefetched (src/dist/strategy.c) */
    int best[3] = {-1, -1, -1};
    for (int u = 0; u < units; u++)
        for (int j = 0; j < 3; j++)
            if (best[j] < 0 || size[u] > size[best[j]]) {
                for (int q = 2; q > j; q--) best[q] = best[q - 1];
                best[j] = u;
                break;
            }
    pl->gathered_bytes = 0;
    pl->gathered_units[0] = 0;
    size_t k = 0;
    for (int j = 0; j < 3; j++) {
        if (best[j] < 0) continue;
        pl->gathered_bytes += 4 * size[best[j]];
        /* a unit's name: its first parameter's name up to the unit key */
        const char *name = p->names[first[best[j]]];
        size_t len = strlen(name);
        if (!strcmp(policy, "block")) {
            const char *dot = strrchr(name, '.');
            for (const char *q = name; *q; q++) /* up to the first all-digit component */
                if ((q == name || q[-1] == '.') && isdigit((unsigned char)*q)) {
                    const char *e = q;
                    while (isdigit((unsigned char)*e)) e++;
                    if (!*e || *e == '.') {
                        dot = e;
                        break;
                    }
                }
            if (dot) len = (size_t)(dot - name);
        } else if (!strcmp(policy, "model")) {
            name = "model", len = 5;
        }
        k += (size_t)snprintf(pl->gathered_units + k, sizeof pl->gathered_units - k, "%s%.*s",
                              j ? " + " : "", (int)len, name);
        if (k >= sizeof pl->gathered_units) k = sizeof pl->gathered_units - 1;
    }
    ut_free(first);
    ut_free(size);
    ut_free(unit_of);
    return 0;
}

/* The first training batch as the trainer's sampler gives it (rank 0 of one
 * process), collated into x and y. Returns the example count, or -1. */
static int64_t first_batch(const ut_config *c, ut_dataset *ds, void **x, void **y, char *err,
                           size_t n) {
    ut_sampler s;
    ut_sampler_init(&s, ds->n, c->batch_size, 0, 1, ut_run_data_seed(c), c->shuffle, c->drop_last);
    if (c->group_by_length && ut_run_group_by_length(c, ds, &s, 1, err, n)) { /* the epoch's longest batch first */
        ut_sampler_free(&s);
        return -1;
    }
    int64_t cap = c->batch_size < ds->n ? c->batch_size : ds->n > 0 ? ds->n : 1;
    int64_t *idx = ut_malloc_check(sizeof(int64_t) * (size_t)cap);
    int64_t count = ut_sampler_next(&s, idx);
    size_t xs = ut_dtype_size(ds->x_dtype), ys = ut_dtype_size(ds->y_dtype);
    for (int i = 0; i < ds->x_ndim; i++) xs *= (size_t)ds->x_ne[i];
    for (int i = 0; i < ds->y_ndim; i++) ys *= (size_t)ds->y_ne[i];
    *x = ut_malloc_check(xs * (size_t)(count ? count : 1));
    *y = ut_malloc_check(ys * (size_t)(count ? count : 1));
    if (count == 0)
        count = ut_errorf(err, n, "%s: %lld examples make no batch of %lld (drop_last)", ds->name,
                          (long long)ds->n, (long long)c->batch_size);
    for (int64_t i = 0; i < count; i++)
        if (ds->get(ds, idx[i], (char *)*x + i * xs, (char *)*y + i * ys, err, n)) {
            count = -1;
            break;
        }
    ut_free(idx);
    ut_sampler_free(&s);
    return count;
}

/* What one training micro-batch holds: the arena's peak (activations) and,
 * in a 16-bit run, autocast's conversion scratch and rounded parameters. */
typedef struct {
    int64_t arena, scratch, round;
    double flops; /* the micro-batch's model FLOPs */
} act_measure;

/* Forward, loss scaled as the trainer scales it, backward of one
 * micro-batch on a fresh context with the run's autocast dtype. */
/* Each convolution on ctx's tape and the algorithm its device runs it
 * with, "C->OC KHxKW OHxOW: path; ...", into convs (cn bytes). */
static void list_convolutions(ut_ctx *ctx, char *convs, size_t cn) {
    size_t k = 0;
    convs[0] = 0;
    for (int i = 0; i < ut_ctx_tape_len(ctx) && k < cn; i++) {
        const ut_tensor *t = ut_ctx_tape_at(ctx, i);
        const char *path = ut_conv2d_path(t);
        int64_t hw[2];
        if (!path || !ut_conv2d_out_hw(t, hw)) continue;
        const ut_tensor *w = t->src[1];
        k += (size_t)snprintf(convs + k, cn - k, "%s%lld->%lld %lldx%lld out %lldx%lld: %s", k ? "; " : "",
                              (long long)w->ne[1], (long long)w->ne[0], (long long)w->ne[2], (long long)w->ne[3],
                              (long long)hw[0], (long long)hw[1], path);
    }
    if (k >= cn && cn > 4) snprintf(convs + cn - 4, 4, "...");
}

double ut_run_peak(const ut_config *c, ut_device dev, char *what, size_t n) {
    const ut_backend *be = ut_backend_get(dev);
    int kind = ut_run_precision(c) != UT_F32 ? UT_PEAK_16 : c->tf32 ? UT_PEAK_TF32 : UT_PEAK_FP32;
    if (c->peak_tflops > 0) {
        snprintf(what, n, "train.peak_tflops");
        return c->peak_tflops * 1e12;
    }
    if (be && be->peak_flops) return be->peak_flops(kind, what, n);
    snprintf(what, n, "utrain knows no peak rate for the %s device; give train.peak_tflops", be ? be->name : c->device);
    return 0;
}

static int measure_activations(const ut_config *c, ut_model *m, ut_dataset *ds, const ut_batch *b,
                               bool checkpoint, act_measure *am, char *convs, size_t cn, char *err, size_t n) {
    m->checkpoint_activations = checkpoint;
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = (uint64_t)c->seed, .device = m->params.device});
    ut_run_ctx_setup(ctx, c);
    ut_hooks h;
    ut_hooks_resolve(&h, NULL);
    ut_step_outputs out;
    ut_tensor *y;
    int rc = ut_forward_batch(&h, ctx, m, ds, b, &out, &y, err, n);
    if (!rc && convs) list_convolutions(ctx, convs, cn);
    if (!rc && ut_backward(ctx, ut_scale(ctx, out.loss, 1.0f)))
        rc = ut_errorf(err, n, "backward: %s", ut_ctx_error(ctx));
    am->flops = ut_ctx_flops(ctx);
    am->arena = (int64_t)ut_ctx_peak_bytes(ctx);
    am->scratch = (int64_t)ut_ctx_autocast_scratch_bytes(ctx);
    am->round = (int64_t)ut_ctx_autocast_round_bytes(ctx);
    ut_ctx_free(ctx);
    return rc;
}

static void fill_rows(ut_plan *p, const ut_config *c) {
    int64_t Psi = p->numel, S = p->shard, N = p->dp;
    /* the state per element (K for every optimizer but Adafactor); a shard's share of it */
    double K = Psi ? (double)p->optim_state / (double)Psi : p->optim_floats;
    int64_t KS = (int64_t)(K * (double)S + 0.5);
    int64_t base = p->runtime_bytes + p->dataset_bytes;
    int64_t buckets = (int64_t)(2.0 * c->bucket_mb * MIB + 0.5);
    if (buckets > 4 * Psi) buckets = 4 * Psi;
    p->bucket_bytes = buckets;
    const ut_dist_kind kinds[UT_PLAN_STRATEGIES] = {UT_DIST_DDP, UT_DIST_ZERO1, UT_DIST_ZERO2,
                                                    UT_DIST_ZERO3, UT_DIST_DP};
    for (int i = 0; i < UT_PLAN_STRATEGIES; i++) {
        ut_plan_row *r = &p->rows[i];
        r->strategy = ut_dist_name(kinds[i]);
        r->act = p->act_bytes, r->act_ckpt = p->act_ckpt_bytes;
        r->copies = p->copy_bytes; /* every unit's, kept from forward to backward */
        switch (kinds[i]) {
        case UT_DIST_DDP:
            r->params = 4 * Psi, r->grads = 4 * Psi, r->optim = 4 * p->optim_state;
            break;
        case UT_DIST_ZERO1:
            r->params = 4 * Psi, r->grads = 4 * Psi, r->optim = 4 * KS;
            break;
        case UT_DIST_ZERO2:
            r->params = 4 * Psi, r->grads = 4 * S + buckets, r->optim = 4 * KS;
            break;
        case UT_DIST_ZERO3:
            r->params = 4 * S + p->gathered_bytes, r->grads = 4 * S + buckets, r->optim = 4 * KS;
            break;
        case UT_DIST_DP:
            r->params = 4 * Psi * N, r->grads = 4 * Psi * N, r->optim = 4 * p->optim_state;
            r->act = N * p->act_bytes, r->act_ckpt = N * p->act_ckpt_bytes;
            r->copies = N * p->copy_bytes; /* one context per worker */
            break;
        }
        int64_t state = r->params + r->copies + r->grads + r->optim + base;
        r->total = state + r->act;
        r->total_ckpt = state + r->act_ckpt;
    }
}

int ut_plan_compute(const ut_config *cfg, int world, ut_plan *p, char *err, size_t n) {
    memset(p, 0, sizeof *p);
    if (world < 1) return ut_errorf(err, n, "the world size must be >= 1, not %d", world);
    int tp = (int)cfg->tensor_parallel, pp = (int)cfg->pipeline_parallel;
    if (world % (tp * pp))
        return ut_errorf(err, n, "world size %d is not divisible by dist.tensor_parallel %d x dist.pipeline_parallel %d",
                         world, tp, pp);
    p->world = world;
    p->tp = tp, p->pp = pp, p->dp = world / (tp * pp);
    /* hybrid sharding: groups of shard_size ranks (-1: a node's, dist.nproc_per_node when there are several) */
    int G = cfg->shard_size > 0 ? cfg->shard_size : cfg->shard_size < 0 && cfg->nodes > 1 ? (int)cfg->nproc_per_node : p->dp;
    if (G > p->dp || p->dp % G)
        return ut_errorf(err, n, "dist.shard_size: %d does not divide the %d data-parallel ranks into shard groups; "
                                 "give a divisor of %d", G, p->dp, p->dp);
    p->shard_group = G;
    snprintf(p->model, sizeof p->model, "%s", cfg->model_name);
    snprintf(p->device, sizeof p->device, "%s", cfg->device);
    p->device_bytes = 0;
    snprintf(p->optim, sizeof p->optim, "%s", cfg->optim_name);
    snprintf(p->precision, sizeof p->precision, "%s", cfg->precision);
    if ((p->optim_floats = optim_floats(cfg, err, n)) < 0) return -1;
    if (cfg->threads > 0) omp_set_num_threads(cfg->threads);
    p->runtime_bytes = resident_bytes();

    /* the datasets training opens (train and dev); a text vocabulary and
     * label names, which training saves in the run directory, go to a
     * temporary one instead */
    char tmp[] = "/tmp/utrain-plan-XXXXXX", vocab[64], labels[64];
    bool text = !strcmp(cfg->data_name, "tsv_text") || !strcmp(cfg->data_name, "tagged_text");
    if (text && !mkdtemp(tmp)) return ut_errorf(err, n, "cannot make a temporary directory in /tmp");
    ut_dataset *train = NULL, *dev = NULL;
    ut_model *m = NULL, *part = NULL;
    void *x = NULL, *y = NULL;
    int rc = ut_datasets_open(cfg, tmp, true, &train, &dev, NULL, err, n);
    if (text) {
        snprintf(vocab, sizeof vocab, "%s/vocab.txt", tmp);
        snprintf(labels, sizeof labels, "%s/labels.txt", tmp); /* labels that are names */
        unlink(vocab);
        unlink(labels);
        rmdir(tmp);
    }
    if (rc) goto done;
    int64_t rss = resident_bytes() - p->runtime_bytes;
    p->dataset_bytes = rss > 0 ? rss : 0;

    rc = -1;
    if (!(m = ut_model_from_config(cfg, train, err, n))) goto done;
    { /* the device's own memory, once the model is on it (ut_config_use_device picked this rank's GPU) */
        const ut_backend *be = ut_backend_get(m->params.device);
        p->device_bytes = be && be->memory ? (int64_t)be->memory() : 0;
    }
    /* split: the state per rank is a part's (rank 0's, built without a group:
     * nothing runs on it), sharded over the data-parallel ranks */
    /* pipeline: every stage built in turn, the one with the most parameters planned */
    for (int stage = 0; (tp > 1 || pp > 1) && stage < pp; stage++) {
        ut_model_layout lay = {.tp_rank = 0, .tp_size = tp, .pp_rank = stage, .pp_size = pp};
        ut_model *sm = ut_model_from_config_layout(cfg, train, &lay, err, n);
        if (!sm) goto done;
        if (!part || sm->params.numel > part->params.numel) {
            ut_model_free(part);
            part = sm;
            p->pp_stage = stage;
        } else {
            ut_model_free(sm);
        }
    }
    const ut_params *own = part ? &part->params : &m->params;
    p->whole_numel = m->params.numel;
    p->numel = own->numel;
    p->optim_state = plan_state(cfg, own);
    p->shard = ut_shard_size(p->numel, p->shard_group);
    snprintf(p->wrap, sizeof p->wrap, "%s", cfg->dist_wrap[0] ? cfg->dist_wrap : "block");
    if (largest_units(own, p->wrap, p, err, n)) goto done;
    if (!cfg->reshard_after_forward) { /* every unit stays gathered from forward to backward */
        p->gathered_bytes = 4 * p->numel;
        snprintf(p->gathered_units, sizeof p->gathered_units, "every unit (no reshard after forward)");
    }
    int64_t count = first_batch(cfg, train, &x, &y, err, n);
    if (count < 0) goto done;
    p->batch = count;
    ut_batch b = {.count = count, .x = x, .y = y};
    if (ut_seq2seq_planes(train)) ut_seq2seq_batch_trim(&b, train->x_ne[1]); /* as the loader's batches are */
    else if (ut_tok_labels(train)) ut_tok_labels_trim(&b, train->x_ne[1]);
    int64_t *idx = ut_malloc_check((size_t)(count > 0 ? count : 1) * sizeof *idx);
    for (int64_t k = 0; k < count; k++) idx[k] = k;
    b.idx = idx; /* the first examples, as epoch 0 draws their masks */
    int crc = train->collate ? train->collate(train, &b, err, n) : 0;
    ut_free(idx);
    b.idx = NULL;
    if (crc) goto done;
    act_measure plain, ckpt;
    if (measure_activations(cfg, m, train, &b, false, &plain, p->convs, sizeof p->convs, err, n) ||
        measure_activations(cfg, m, train, &b, true, &ckpt, NULL, 0, err, n))
        goto done;
    /* the scratch counts with the activations (it grows with the batch) */
    p->act_bytes = plain.arena + plain.scratch, p->act_ckpt_bytes = ckpt.arena + ckpt.scratch;
    p->scratch_bytes = plain.scratch;
    p->copy_bytes = plain.round > ckpt.round ? plain.round : ckpt.round;
    p->micro_flops = plain.flops;
    p->step_flops = plain.flops * (double)cfg->gradient_accumulation_steps / (double)(tp * pp);
    p->peak = ut_run_peak(cfg, m->params.device, p->peak_what, sizeof p->peak_what); /* as the trainer's MFU */
    if (pp > 1) {
        /* a stage's activations: about 1/pp of the whole model's per
         * micro-batch (its share of the blocks), for each micro-batch it
         * holds at once: pp - stage in 1F1B, all of them in GPipe */
        int64_t M = cfg->gradient_accumulation_steps;
        int64_t held = !strcmp(cfg->pipeline_schedule, "gpipe") ? M : pp - p->pp_stage;
        p->micro_batches = M, p->in_flight = held < M ? held : M;
        p->bubble = (double)(pp - 1) / (double)(M + pp - 1);
        p->act_bytes = (p->act_bytes - p->scratch_bytes) * p->in_flight / pp + p->scratch_bytes;
        p->act_ckpt_bytes = (p->act_ckpt_bytes - p->scratch_bytes) * p->in_flight / pp + p->scratch_bytes;
    }
    fill_rows(p, cfg);
    rc = 0;
done:
    ut_free(x);
    ut_free(y);
    ut_model_free(m);
    ut_model_free(part);
    if (train) ut_dataset_free(train);
    if (dev) ut_dataset_free(dev);
    return rc;
}

/* ---- output ---- */
static const char *human(int64_t b, char *buf, size_t n) { return ut_fmt_bytes((double)b, buf, n); }

/* ZeRO-Offload (dist.offload_optimizer: cpu) on a zero1/zero2 row: the
 * device's total without the optimizer's state; into host, what host memory
 * takes instead (the state, the float32 master shard and its gradient). */
static int64_t offload_totals(const ut_plan *p, const ut_plan_row *r, int64_t *host) {
    *host = r->optim + 2 * p->shard * (int64_t)sizeof(float);
    return r->total - r->optim;
}

static void print_json(const ut_plan *p, int64_t dev, FILE *f) {
    fprintf(f, "{\"world_size\": %d, \"model\": \"%s\", \"optimizer\": \"%s\", \"precision\": \"%s\", "
               "\"numel\": %lld, \"shard\": %lld, \"optimizer_floats\": %d, \"optimizer_state\": %lld, "
               "\"batch\": %lld,\n",
            p->world, p->model, p->optim, p->precision, (long long)p->numel, (long long)p->shard,
            p->optim_floats, (long long)p->optim_state, (long long)p->batch);
    fprintf(f, " \"tensor_parallel\": %d, \"data_parallel\": %d, \"shard_group\": %d, \"whole_numel\": %lld,\n", p->tp,
            p->dp, p->shard_group, (long long)p->whole_numel);
    fprintf(f, " \"pipeline_parallel\": %d, \"pipeline_stage\": %d, \"micro_batches\": %lld, \"in_flight\": %lld, "
               "\"bubble\": %.6f,\n",
            p->pp, p->pp_stage, (long long)p->micro_batches, (long long)p->in_flight, p->bubble);
    fprintf(f, " \"bucket_bytes\": %lld, \"wrap\": \"%s\", \"gathered_bytes\": %lld, "
               "\"gathered_units\": \"%s\",\n",
            (long long)p->bucket_bytes, p->wrap, (long long)p->gathered_bytes, p->gathered_units);
    fprintf(f, " \"runtime_bytes\": %lld, \"dataset_bytes\": %lld, \"activation_bytes\": %lld, "
               "\"activation_checkpoint_bytes\": %lld,\n",
            (long long)p->runtime_bytes, (long long)p->dataset_bytes, (long long)p->act_bytes,
            (long long)p->act_ckpt_bytes);
    fprintf(f, " \"weight_copy_bytes\": %lld, \"autocast_scratch_bytes\": %lld,\n", (long long)p->copy_bytes,
            (long long)p->scratch_bytes);
    fprintf(f, " \"convolutions\": \"%s\",\n", p->convs);
    fprintf(f, " \"micro_batch_flops\": %.17g, \"step_flops\": %.17g, ", p->micro_flops, p->step_flops);
    if (p->peak > 0)
        fprintf(f, "\"peak_flops\": %.17g, \"step_seconds_at_peak\": %.9g,\n", p->peak, p->step_flops / p->peak);
    else fprintf(f, "\"peak_flops\": null, \"step_seconds_at_peak\": null,\n");
    if (dev > 0) fprintf(f, " \"device_memory\": %lld,\n", (long long)dev);
    else fprintf(f, " \"device_memory\": null,\n");
    fprintf(f, " \"strategies\": {\n");
    for (int i = 0; i < UT_PLAN_STRATEGIES; i++) {
        const ut_plan_row *r = &p->rows[i];
        fprintf(f, "  \"%s\": {\"params\": %lld, \"weight_copies\": %lld, \"grads\": %lld, \"optimizer\": %lld, "
                   "\"activations\": %lld, \"activations_checkpoint\": %lld, \"total\": %lld, "
                   "\"total_checkpoint\": %lld, \"fits\": %s, \"fits_checkpoint\": %s}%s\n",
                r->strategy, (long long)r->params, (long long)r->copies, (long long)r->grads, (long long)r->optim,
                (long long)r->act, (long long)r->act_ckpt, (long long)r->total,
                (long long)r->total_ckpt, dev <= 0 ? "null" : r->total <= dev ? "true" : "false",
                dev <= 0 ? "null" : r->total_ckpt <= dev ? "true" : "false",
                i + 1 < UT_PLAN_STRATEGIES ? "," : "");
    }
    fprintf(f, " },\n \"offload\": {");
    for (int i = 1; i <= 2; i++) { /* zero1, zero2 */
        int64_t host, devtotal = offload_totals(p, &p->rows[i], &host);
        fprintf(f, "\"%s\": {\"total\": %lld, \"host\": %lld, \"fits\": %s}%s", p->rows[i].strategy,
                (long long)devtotal, (long long)host, dev <= 0 ? "null" : devtotal <= dev ? "true" : "false",
                i < 2 ? ", " : "");
    }
    fprintf(f, "}\n}\n");
}

void ut_plan_print(const ut_plan *p, int64_t dev, bool json, FILE *f) {
    bool own = dev <= 0 && p->device_bytes > 0; /* the device's own memory */
    if (own) dev = p->device_bytes;
    if (json) {
        print_json(p, dev, f);
        return;
    }
    char a[32], b[32], c[32], d[32], e[32], g[32], h[32], k2[32];
    if (p->optim_state == (int64_t)p->optim_floats * p->numel)
        fprintf(f, "Memory per rank: %s, %lld parameters, world size %d, %s (%d state float%s per "
                   "parameter), %s\n",
                p->model, (long long)p->numel, p->world, p->optim, p->optim_floats,
                p->optim_floats == 1 ? "" : "s", p->precision);
    else /* Adafactor: its factored second moment */
        fprintf(f, "Memory per rank: %s, %lld parameters, world size %d, %s (%lld state floats, %.3g per "
                   "parameter), %s\n",
                p->model, (long long)p->numel, p->world, p->optim, (long long)p->optim_state,
                p->numel ? (double)p->optim_state / (double)p->numel : 0.0, p->precision);
    if (p->tp > 1)
        fprintf(f, "  tensor parallel %d: each rank holds its part, %lld of the model's %lld parameters, and the "
                   "strategies shard it over %d data-parallel rank%s; activations are measured on the whole model "
                   "(a part's are smaller: its heads and MLP features)\n",
                p->tp, (long long)p->numel, (long long)p->whole_numel, p->dp, p->dp == 1 ? "" : "s");
    if (p->pp > 1)
        fprintf(f, "  pipeline parallel %d: planned for stage %d, the one with the most parameters (%lld of the "
                   "model's %lld); its activations estimated as 1/%d of the whole model's per micro-batch, %lld "
                   "micro-batch%s held at once of %lld per step; bubble (p-1)/(m+p-1) = %.1f%% of a step\n",
                p->pp, p->pp_stage, (long long)p->numel, (long long)p->whole_numel, p->pp, (long long)p->in_flight,
                p->in_flight == 1 ? "" : "es", (long long)p->micro_batches, 100.0 * p->bubble);
    if (strcmp(p->precision, "fp32"))
        fprintf(f, "  %s: fp32 weights (the master copy), gradients and optimizer state; rounded weight "
                   "copies %s (16 bits, kept from forward to backward, and the float32 buffers they "
                   "are widened into); 16-bit activations, "
                   "conversion scratch %s\n",
                p->precision, human(p->copy_bytes, a, sizeof a), human(p->scratch_bytes, b, sizeof b));
    if (p->shard_group < p->dp)
        fprintf(f, "  hybrid sharding (dist.shard_size): zero1-3 shard over groups of %d ranks and replicate across "
                   "%d groups\n", p->shard_group, p->dp / p->shard_group);
    fprintf(f, "  shard S = %lld parameters; zero2/zero3 gradient buckets in flight %s; zero3 "
               "gathers %s (%s, dist.wrap %s)\n",
            (long long)p->shard, human(p->bucket_bytes, a, sizeof a), p->gathered_units,
            human(p->gathered_bytes, b, sizeof b), p->wrap);
    fprintf(f, "  activations, %s one micro-batch of %lld examples: %s, %s with activation checkpointing\n",
            p->pp > 1 ? "the planned stage's, estimated from the whole model's on" : "measured on", (long long)p->batch,
            human(p->act_bytes, a, sizeof a), human(p->act_ckpt_bytes, b, sizeof b));
    if (p->convs[0]) fprintf(f, "  convolutions: %s\n", p->convs);
    fprintf(f, "  compute: %.4g GFLOP per micro-batch (the products' model FLOPs, forward and backward), %.4g GFLOP "
               "per optimizer step and rank", p->micro_flops * 1e-9, p->step_flops * 1e-9);
    if (p->peak > 0)
        fprintf(f, ": at least %.4g ms a step at the peak %.4g TFLOP/s (%s), %.4g ms at 50%% MFU\n",
                1e3 * p->step_flops / p->peak, p->peak * 1e-12, p->peak_what, 2e3 * p->step_flops / p->peak);
    else fprintf(f, " (no time: %s)\n", p->peak_what);
    fprintf(f, "  runtime base (in every total): %s process + %s dataset = %s\n\n",
            human(p->runtime_bytes, a, sizeof a), human(p->dataset_bytes, b, sizeof b),
            human(p->runtime_bytes + p->dataset_bytes, c, sizeof c));
    fprintf(f, "%-8s %11s %11s %11s %11s %11s %11s %11s %11s", "strategy", "params", "w. copies", "grads",
            "optimizer", "activations", "act (ckpt)", "total", "total(ckpt)");
    if (dev > 0) fprintf(f, "  %-4s %s", "fits", "fits (ckpt)");
    fputc('\n', f);
    for (int i = 0; i < UT_PLAN_STRATEGIES; i++) {
        const ut_plan_row *r = &p->rows[i];
        fprintf(f, "%-8s %11s %11s %11s %11s %11s %11s %11s %11s", r->strategy, human(r->params, a, sizeof a),
                human(r->copies, k2, sizeof k2), human(r->grads, b, sizeof b), human(r->optim, c, sizeof c), human(r->act, d, sizeof d),
                human(r->act_ckpt, e, sizeof e), human(r->total, g, sizeof g),
                human(r->total_ckpt, h, sizeof h));
        if (dev > 0)
            fprintf(f, "  %-4s %s", r->total <= dev ? "yes" : "no", r->total_ckpt <= dev ? "yes" : "no");
        fputc('\n', f);
    }
    fprintf(f, "(dp: one process, %d worker thread%s, each with a replica and a micro-batch)\n", p->dp,
            p->dp == 1 ? "" : "s");
    int64_t h1, h2, o1 = offload_totals(p, &p->rows[1], &h1), o2 = offload_totals(p, &p->rows[2], &h2);
    fprintf(f, "with dist.offload_optimizer: cpu (ZeRO-Offload): zero1 %s, zero2 %s on the device; host memory "
               "takes %s, %s (the optimizer's state, the master shard and its gradient)\n",
            human(o1, a, sizeof a), human(o2, b, sizeof b), human(h1, c, sizeof c), human(h2, d, sizeof d));
    if (dev <= 0) {
        fprintf(f, "fits: give --device-memory SIZE (e.g. 80GiB) to check\n");
        return;
    }
    /* the summary: what fits as is, and what fits only with checkpointing */
    char line[256] = "";
    size_t k = 0;
    for (int i = 0; i < UT_PLAN_STRATEGIES; i++)
        if (p->rows[i].total <= dev)
            k += (size_t)snprintf(line + k, sizeof line - k, "%s%s", k ? ", " : "", p->rows[i].strategy);
    char ck[256] = "";
    size_t j = 0;
    for (int i = 0; i < UT_PLAN_STRATEGIES; i++)
        if (p->rows[i].total > dev && p->rows[i].total_ckpt <= dev)
            j += (size_t)snprintf(ck + j, sizeof ck - j, "%s%s", j ? ", " : "", p->rows[i].strategy);
    fprintf(f, "fits in %s per rank%s%s%s: %s", human(dev, a, sizeof a), own ? " (the memory of device " : "",
            own ? p->device : "", own ? ")" : "", k ? line : "none");
    if (j) fprintf(f, "; with activation checkpointing also %s", ck);
    else if (!k) fprintf(f, ", not even with activation checkpointing");
    fputc('\n', f);
}

int ut_parse_bytes(const char *s, int64_t *out) {
    static const struct { const char *unit; double scale; } units[] = {
        {"", 1},        {"b", 1},           {"kb", 1e3},        {"mb", 1e6},
        {"gb", 1e9},    {"tb", 1e12},       {"kib", 1024.0},    {"mib", MIB},
        {"gib", 1024 * MIB}, {"tib", 1024 * 1024 * MIB}};
    const char *p = s;
    if (!isdigit((unsigned char)*p) && !(*p == '.' && isdigit((unsigned char)p[1]))) return -1;
    double v = 0, frac = 0.1;
    while (isdigit((unsigned char)*p)) v = 10 * v + (*p++ - '0');
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++, frac /= 10) v += frac * (*p - '0');
    while (*p == ' ') p++;
    char unit[8];
    size_t k = 0;
    for (; *p && k < sizeof unit - 1; p++) unit[k++] = (char)tolower((unsigned char)*p);
    unit[k] = 0;
    if (*p) return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(unit, units[i].unit)) {
            double bytes = v * units[i].scale;
            if (!(bytes >= 1) || bytes > 9.2e18) return -1;
            *out = (int64_t)(bytes + 0.5);
            return 0;
        }
    return -1;
}
