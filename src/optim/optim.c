/* SGD, AdamW, Lion and Adafactor over the shard [lo, hi) of a flat
 * parameter buffer, with the operation order of torch's single-tensor
 * implementations (Lion: lion-pytorch's; Adafactor: transformers'). */
#include "utrain/optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "utrain/base.h"
#include "../backend/backend.h"

/* A maximal stretch of [lo, hi) that belongs to segments with the same decay
 * (backend.h: ut_optim_run). */
typedef ut_optim_run run;

struct ut_optim {
    ut_optim_config cfg;
    float *params, *grads;  /* element i is params[i - pbase], grads[i - gbase] */
    int64_t pbase, gbase;
    int64_t lo, hi, steps;
    int nstate;
    float *state[2];
    run *runs;
    int nruns;
    void *p16; /* 16-bit copies of params[lo, hi), or NULL */
    ut_dtype p16_dt;
    /* Adafactor: the parameters in [lo, hi), where each one's second moment
     * starts in state[0], the state buffers' lengths, the step's scratch (the device's) */
    ut_param_seg *segs;
    int64_t *soff;
    int nsegs;
    int64_t len[2];
    double *scratch;
    int64_t scratch_len;
};

/* Per-step scalars: ut_optim_consts (src/backend/backend.h). */
typedef ut_optim_consts consts;

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

ut_optim_config ut_optim_defaults(ut_optim_kind k) {
    ut_optim_config c = {.kind = k, .lr = 1e-3f};
    if (k == UT_OPTIM_ADAMW) {
        c.beta1 = 0.9f;
        c.beta2 = 0.999f;
        c.eps = 1e-8f;
        c.weight_decay = 0.01f;
    } else if (k == UT_OPTIM_LION) {
        c.lr = 1e-4f;
        c.beta1 = 0.9f;
        c.beta2 = 0.99f;
    } else if (k == UT_OPTIM_ADAFACTOR) {
        c.eps = 1e-30f;
        c.eps2 = 1e-3f;
        c.clip_threshold = 1.0f;
        c.decay_rate = -0.8f;
        c.scale_parameter = true;
    }
    return c;
}

static int fail(char *err, size_t n, const char *msg) {
    if (err && n) snprintf(err, n, "%s", msg);
    return -1;
}

int ut_optim_check_config(const ut_optim_config *c, char *err, size_t n) {
    if (c->kind != UT_OPTIM_SGD && c->kind != UT_OPTIM_ADAMW && c->kind != UT_OPTIM_LION &&
        c->kind != UT_OPTIM_ADAFACTOR)
        return fail(err, n, ut_fmt("kind: unknown optimizer kind %d", (int)c->kind));
    /* Written as !(x >= 0) so NaN fails too. */
    if (!(c->lr >= 0) || isinf(c->lr))
        return fail(err, n, ut_fmt("lr must be a finite number >= 0 (got %g)", c->lr));
    if (!(c->weight_decay >= 0) || isinf(c->weight_decay))
        return fail(err, n,
                    ut_fmt("weight_decay must be a finite number >= 0 (got %g)", c->weight_decay));
    if (c->kind == UT_OPTIM_ADAFACTOR) {
        if (!(c->beta1 >= 0 && c->beta1 < 1))
            return fail(err, n, ut_fmt("beta1 must be in [0, 1) (got %g; 0: no first moment)", c->beta1));
        if (!(c->eps > 0) || isinf(c->eps))
            return fail(err, n, ut_fmt("eps must be a finite number > 0 (got %g)", c->eps));
        if (!(c->eps2 >= 0) || isinf(c->eps2))
            return fail(err, n, ut_fmt("eps2 must be a finite number >= 0 (got %g)", c->eps2));
        if (!(c->clip_threshold > 0) || isinf(c->clip_threshold))
            return fail(err, n, ut_fmt("clip_threshold must be a finite number > 0 (got %g)", c->clip_threshold));
        if (!(c->decay_rate <= 0 && c->decay_rate >= -1))
            return fail(err, n, ut_fmt("decay_rate must be in [-1, 0] (got %g)", c->decay_rate));
        return 0;
    }
    if (c->kind == UT_OPTIM_ADAMW || c->kind == UT_OPTIM_LION) {
        if (!(c->beta1 >= 0 && c->beta1 < 1))
            return fail(err, n, ut_fmt("beta1 must be in [0, 1) (got %g)", c->beta1));
        if (!(c->beta2 >= 0 && c->beta2 < 1))
            return fail(err, n, ut_fmt("beta2 must be in [0, 1) (got %g)", c->beta2));
        if (c->kind == UT_OPTIM_LION) return 0;
        if (!(c->eps > 0) || isinf(c->eps))
            return fail(err, n, ut_fmt("eps must be a finite number > 0 (got %g)", c->eps));
        return 0;
    }
    if (!(c->momentum >= 0) || isinf(c->momentum))
        return fail(err, n, ut_fmt("momentum must be a finite number >= 0 (got %g)", c->momentum));
    if (!isfinite(c->dampening))
        return fail(err, n, ut_fmt("dampening must be finite (got %g)", c->dampening));
    if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
        return fail(err, n,
                    ut_fmt("nesterov requires momentum > 0 and dampening == 0 (got momentum %g, "
                           "dampening %g)",
                           c->momentum, c->dampening));
    return 0;
}

int ut_optim_parse(const char *name, ut_optim_kind *out) {
    if (!strcasecmp(name, "sgd")) *out = UT_OPTIM_SGD;
    else if (!strcasecmp(name, "adamw")) *out = UT_OPTIM_ADAMW;
    else if (!strcasecmp(name, "lion")) *out = UT_OPTIM_LION;
    else if (!strcasecmp(name, "adafactor")) *out = UT_OPTIM_ADAFACTOR;
    else return -1;
    return 0;
}

ut_optim *ut_optim_new(const ut_optim_config *cfg, float *params, float *grads,
                       const ut_param_seg *segs, int nsegs, int64_t lo, int64_t hi) {
    return ut_optim_new_view(cfg, params, 0, grads, 0, segs, nsegs, lo, hi);
}

ut_optim *ut_optim_new_view(const ut_optim_config *cfg, float *params, int64_t pbase, float *grads,
                            int64_t gbase, const ut_param_seg *segs, int nsegs, int64_t lo,
                            int64_t hi) {
    char err[256];
    if (ut_optim_check_config(cfg, err, sizeof err))
        ut_abort(__FILE__, __LINE__, "ut_optim_new: %s", err);
    UT_ASSERT(params && grads && nsegs >= 0 && (segs || nsegs == 0));
    UT_ASSERT(0 <= lo && lo <= hi && pbase <= lo && gbase <= lo);

    ut_optim *o = ut_calloc_check(1, sizeof *o);
    o->cfg = *cfg;
    o->params = params;
    o->grads = grads;
    o->pbase = pbase;
    o->gbase = gbase;
    o->lo = lo;
    o->hi = hi;
    o->runs = ut_malloc_check(sizeof(run) * (size_t)(nsegs ? nsegs : 1));
    int64_t prev_end = 0;
    for (int i = 0; i < nsegs; i++) {
        const ut_param_seg *s = &segs[i];
        if (s->offset < prev_end || s->numel < 0)
            ut_abort(__FILE__, __LINE__,
                     "ut_optim_new: segment %d [%lld, +%lld) is negative, overlaps or is out of "
                     "order",
                     i, (long long)s->offset, (long long)s->numel);
        prev_end = s->offset + s->numel;
        int64_t b = s->offset > lo ? s->offset : lo;
        int64_t e = prev_end < hi ? prev_end : hi;
        if (b >= e) continue;
        bool decay = cfg->weight_decay != 0 && (cfg->decay_all || s->decay);
        run *last = o->nruns ? &o->runs[o->nruns - 1] : NULL;
        if (last && last->end == b && last->decay == decay) last->end = e;
        else o->runs[o->nruns++] = (run){b, e, decay};
    }

    o->nstate = ut_optim_state_per_param(cfg);
    o->len[0] = o->len[1] = hi - lo;
    if (cfg->kind == UT_OPTIM_ADAFACTOR) {
        /* the parameters in [lo, hi), whole: their statistics span them */
        o->segs = ut_malloc_check(sizeof *o->segs * (size_t)(nsegs ? nsegs : 1));
        o->soff = ut_malloc_check(sizeof *o->soff * (size_t)(nsegs ? nsegs : 1));
        int64_t at = 0, scratch = 1;
        for (int i = 0; i < nsegs; i++) {
            const ut_param_seg *s = &segs[i];
            if (s->offset + s->numel <= lo || s->offset >= hi || s->numel == 0) continue;
            if (s->offset < lo || s->offset + s->numel > hi)
                ut_abort(__FILE__, __LINE__,
                         "ut_optim_new: Adafactor needs whole parameters; [%lld, %lld) cuts segment %d [%lld, +%lld)",
                         (long long)lo, (long long)hi, i, (long long)s->offset, (long long)s->numel);
            if ((s->rows > 0) != (s->cols > 0) || (s->rows > 0 && s->numel % (s->rows * s->cols)))
                ut_abort(__FILE__, __LINE__, "ut_optim_new: segment %d: %lld elements are not matrices of %lld x %lld",
                         i, (long long)s->numel, (long long)s->rows, (long long)s->cols);
            o->segs[o->nsegs] = *s;
            o->segs[o->nsegs].decay = cfg->weight_decay != 0 && (cfg->decay_all || s->decay);
            o->soff[o->nsegs++] = at;
            at += ut_optim_seg_state_len(cfg, 0, s);
            int64_t need = ut_optim_adafactor_scratch(s);
            if (need > scratch) scratch = need;
        }
        o->len[0] = at;
        o->scratch_len = scratch;
    }
    const ut_backend *be = ut_backend_get(cfg->device); /* the state lives beside the flat buffers */
    UT_ASSERT(be);
    /* the step's scratch is the device's: its work may still be queued when the host moves on */
    if (o->scratch_len) o->scratch = be->alloc(sizeof(double) * (size_t)o->scratch_len);
    for (int i = 0; i < o->nstate; i++) {
        size_t bytes = (size_t)o->len[i] * sizeof(float);
        o->state[i] = be->alloc(bytes);
        be->memset(o->state[i], 0, bytes);
    }
    return o;
}

void ut_optim_free(ut_optim *o) {
    if (!o) return;
    for (int i = 0; i < o->nstate; i++) ut_backend_get(o->cfg.device)->free(o->state[i]);
    ut_backend_get(o->cfg.device)->free(o->scratch);
    ut_free(o->segs);
    ut_free(o->soff);
    ut_free(o->runs);
    ut_free(o);
}

/* The step's scalars; counts the step. */
static consts step_consts(ut_optim *o, float lr) {
    UT_ASSERT(lr >= 0 && isfinite(lr));
    const ut_optim_config *c = &o->cfg;
    o->steps++;
    consts k = {.adamw = c->kind == UT_OPTIM_ADAMW, .lion = c->kind == UT_OPTIM_LION,
                .adafactor = c->kind == UT_OPTIM_ADAFACTOR, .lr = lr};
    if (k.adafactor) {
        /* transformers: beta2t = 1 - step^decay_rate in Python's doubles */
        double t = (double)o->steps, rho = 1.0 - pow(t, (double)c->decay_rate);
        if (c->relative_step) { /* transformers' _get_lr: its own schedule, the step's lr unused */
            double min_step = c->warmup_init ? 1e-6 * t : 1e-2, inv = 1.0 / sqrt(t);
            k.lr = (float)(min_step < inv ? min_step : inv);
        }
        k.rho = (float)rho;
        k.one_m_rho = (float)(1.0 - rho);
        k.eps = c->eps;
        k.eps2 = c->eps2;
        k.clip = c->clip_threshold;
        k.beta1 = c->beta1;
        k.one_m_b1 = (float)(1.0 - (double)c->beta1);
        k.wd = c->weight_decay;
        k.scale_parameter = c->scale_parameter;
    } else if (k.lion) {
        k.decay_mul = (float)(1.0 - (double)lr * (double)c->weight_decay);
        k.beta1 = c->beta1;
        k.one_m_b1 = (float)(1.0 - (double)c->beta1);
        k.beta2 = c->beta2;
        k.one_m_b2 = (float)(1.0 - (double)c->beta2);
    } else if (k.adamw) {
        double t = (double)o->steps;
        double bc1 = 1.0 - pow((double)c->beta1, t);
        double bc2 = 1.0 - pow((double)c->beta2, t);
        k.decay_mul = (float)(1.0 - (double)lr * (double)c->weight_decay);
        k.one_m_b1 = (float)(1.0 - (double)c->beta1);
        k.beta2 = c->beta2;
        k.one_m_b2 = (float)(1.0 - (double)c->beta2);
        k.step_size = (float)((double)lr / bc1);
        k.inv_bc2_sqrt = (float)(1.0 / sqrt(bc2));
        k.eps = c->eps;
    } else {
        k.wd = c->weight_decay;
        k.momentum = c->momentum;
        k.one_m_damp = (float)(1.0 - (double)c->dampening);
        k.use_momentum = o->nstate > 0;
        k.first = o->steps == 1;
        k.nesterov = c->nesterov;
    }
    return k;
}

/* The backend's view of the whole range [lo, hi). */
static ut_optim_buffers buffers(const ut_optim *o, const float *scalars) {
    return (ut_optim_buffers){.params = o->params, .grads = o->grads, .state = {o->state[0], o->state[1]},
                              .pbase = o->pbase, .gbase = o->gbase, .lo = o->lo, .hi = o->hi, .runs = o->runs,
                              .nruns = o->nruns, .nstate = o->nstate, .scalars = scalars,
                              /* the copies are indexed as params: based at pbase */
                              .p16 = o->p16 ? (uint16_t *)o->p16 - (o->lo - o->pbase) : NULL,
                              .p16_dtype = o->p16_dt, .segs = o->segs, .soff = o->soff, .nsegs = o->nsegs,
                              .scratch = o->scratch};
}

static void step(ut_optim *o, float lr, bool zero, const float *scalars) {
    consts k = step_consts(o, lr);
    /* one backend call over every run: the backend splits the work */
    ut_optim_buffers b = buffers(o, scalars);
    ut_backend_get(o->cfg.device)->optim_step(&b, &k, zero);
}

void ut_optim_step_zero_pieces(ut_optim *o, float lr, int64_t piece, ut_optim_piece_fn done, void *arg) {
    UT_ASSERT(piece > 0 && done);
    consts k = step_consts(o, lr);
    const ut_optim_buffers whole = buffers(o, NULL);
    run *runs = ut_malloc_check(sizeof(run) * (size_t)(o->nruns ? o->nruns : 1));
    int si = 0; /* Adafactor: the next parameter */
    for (int64_t a = o->lo; a < o->hi;) {
        ut_optim_buffers b = whole;
        int64_t e;
        if (k.adafactor) { /* whole parameters: their statistics span them */
            int s0 = si;
            while (si < o->nsegs && (si == s0 || o->segs[si].offset + o->segs[si].numel - a <= piece)) si++;
            e = si == o->nsegs ? o->hi : o->segs[si - 1].offset + o->segs[si - 1].numel;
            b.segs = o->segs + s0, b.soff = o->soff + s0, b.nsegs = si - s0; /* state[0] at soff */
            if (b.state[1]) b.state[1] += a - o->lo;
        } else {
            /* on a 16-float boundary (a cache line); state is indexed from lo */
            e = min64((a + piece + 15) / 16 * 16, o->hi);
            for (int i = 0; i < 2; i++)
                if (b.state[i]) b.state[i] += a - o->lo;
            b.nruns = 0;
            for (int r = 0; r < o->nruns; r++) {
                int64_t rb = max64(o->runs[r].begin, a), re = min64(o->runs[r].end, e);
                if (rb < re) runs[b.nruns++] = (run){rb, re, o->runs[r].decay};
            }
            b.runs = runs;
        }
        b.lo = a, b.hi = e;
        ut_backend_get(o->cfg.device)->optim_step(&b, &k, true);
        done(arg, a, e);
        a = e;
    }
    ut_free(runs);
}

void ut_optim_step(ut_optim *o, float lr) { step(o, lr, false, NULL); }

void ut_optim_step_zero(ut_optim *o, float lr) { step(o, lr, true, NULL); }

void ut_optim_step_zero_scaled(ut_optim *o, float lr, const float *scalars) { step(o, lr, true, scalars); }

void ut_optim_unstep(ut_optim *o) {
    UT_ASSERT(o->steps > 0);
    o->steps--;
}

void ut_optim_set_copies16(ut_optim *o, void *copies16, ut_dtype dt) {
    UT_ASSERT(!copies16 || ut_dtype_is16(dt));
    o->p16 = copies16;
    o->p16_dt = dt;
}

int64_t ut_optim_steps(const ut_optim *o) { return o->steps; }

void ut_optim_set_steps(ut_optim *o, int64_t n) {
    UT_ASSERT(n >= 0);
    o->steps = n;
}

int ut_optim_nstate(const ut_optim *o) { return o->nstate; }

float *ut_optim_state(ut_optim *o, int i, const char **name) {
    UT_ASSERT(i >= 0 && i < o->nstate);
    /* Lion's one buffer is exp_avg too (lion-pytorch's name) */
    if (name && o->cfg.kind == UT_OPTIM_ADAFACTOR) *name = i == 0 ? "exp_avg_sq_factored" : "exp_avg";
    else if (name)
        *name = o->cfg.kind == UT_OPTIM_SGD ? "momentum_buffer" : i == 0 ? "exp_avg" : "exp_avg_sq";
    return o->state[i];
}

const ut_optim_config *ut_optim_get_config(const ut_optim *o) { return &o->cfg; }

void ut_optim_range(const ut_optim *o, int64_t *lo, int64_t *hi) {
    *lo = o->lo;
    *hi = o->hi;
}

int ut_optim_state_per_param(const ut_optim_config *cfg) {
    if (cfg->kind == UT_OPTIM_ADAFACTOR) return cfg->beta1 > 0 ? 2 : 1;
    return cfg->kind == UT_OPTIM_ADAMW ? 2 : cfg->kind == UT_OPTIM_LION ? 1 : cfg->momentum != 0 ? 1 : 0;
}

int64_t ut_optim_seg_state_len(const ut_optim_config *cfg, int i, const ut_param_seg *s) {
    if (cfg->kind == UT_OPTIM_ADAFACTOR && i == 0 && s->rows > 0 && s->cols > 0)
        return s->numel / (s->rows * s->cols) * (s->rows + s->cols);
    return s->numel;
}

int64_t ut_optim_state_len(const ut_optim *o, int i) {
    UT_ASSERT(i >= 0 && i < o->nstate);
    return o->len[i];
}

size_t ut_optim_state_bytes(const ut_optim *o) {
    size_t floats = 0;
    for (int i = 0; i < o->nstate; i++) floats += (size_t)o->len[i];
    return floats * sizeof(float);
}
