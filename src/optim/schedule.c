/* Learning-rate schedules: linear warmup, then constant, cosine (with or
 * without hard restarts), linear, polynomial, step, inverse square root or
 * warmup-stable-decay. Computed in double, like torch's LambdaLR/StepLR in Python. */
#include "utrain/optim.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <strings.h>

#include "utrain/base.h"

/* a cosine wave's value at the fraction p of its decay: 1 at p = 0, 0 after
 * half a wave (cycles 0.5) */
static double wave(double cycles, double p) { return 0.5 * (1.0 + cos(2.0 * M_PI * cycles * p)); }

/* WSD: 1 until the last decay_steps of the run, then down to 0 */
static double wsd(const ut_schedule *s, int64_t step) {
    int64_t start = s->total_steps - s->decay_steps; /* the decay's first step */
    if (step < start) return 1.0;
    if (step >= s->total_steps) return 0.0;
    double q = (double)(step - start) / (double)s->decay_steps;
    switch (s->decay) {
    case UT_DECAY_LINEAR: return 1.0 - q;
    case UT_DECAY_SQRT: return 1.0 - sqrt(q);
    case UT_DECAY_COSINE: break;
    }
    return wave(s->cycles > 0 ? s->cycles : 0.5, q);
}

/* DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR (lr_schedules.py):
 * the rate of an optimizer step is get_lr() at the scheduler's index, which
 * starts at -1 and moves on after each step. */
static float ds_lr(const ut_schedule *s, int64_t step) {
    double lr = s->lr, min_lr = s->min_lr;
    int64_t i = step - 1, w = s->warmup_steps > 2 ? s->warmup_steps : 2, t = s->total_steps;
    bool cosine = s->kind == UT_SCHED_DS_WARMUP_COSINE;
    double start = cosine ? (double)s->warmup_min_ratio * lr : min_lr;
    if (i < 0) return cosine ? 0.0f : (float)start;
    if (i < w) {
        double g = s->warmup_log ? log((double)(i + 1)) / log((double)w) : (double)i / (double)w;
        return (float)(start + (lr - start) * g);
    }
    double x = 1.0;
    if (s->kind == UT_SCHED_DS_WARMUP_DECAY)
        x = fmax(0.0, (double)(t - i) / fmax(1.0, (double)(t - w)));
    else if (cosine)
        x = 0.5 * (1.0 + cos(M_PI * fmin(1.0, (double)(i - w + 1) / fmax(1.0, (double)(t - w)))));
    return (float)(min_lr + (lr - min_lr) * x);
}

/* FlagAI's AnnealingLR (flagai/schedulers.py): the rate of an optimizer
 * step is get_lr() at the iteration index of its last micro-batch; the index
 * starts at 0 and moves on after each micro-batch. After the warmup the rate
 * falls from lr towards min_lr over the fraction (i - warmup) / total of the
 * iterations (measured against all of them, so it never gets there within
 * the run): along half a cosine wave (decay cosine, FlagAI 1.7 and later) or
 * a line (decay linear, FlagAI 1.6 and earlier). */
static float annealing_lr(const ut_schedule *s, int64_t step) {
    int64_t a = s->micro > 0 ? s->micro : 1, i = step * a + a - 1, w = s->warmup_steps;
    double lr = s->lr, min_lr = s->min_lr;
    if (w > 0 && i <= w) return (float)(lr * (double)i / (double)w);
    double q = (double)(i - w) / (double)(s->total_steps > 0 ? s->total_steps : 1);
    if (s->decay == UT_DECAY_LINEAR) {
        double x = lr - (lr - min_lr) * q;
        return (float)(x > min_lr ? x : min_lr);
    }
    return (float)(min_lr + (lr - min_lr) * wave(0.5, fmin(1.0, q)));
}

float ut_schedule_lr(const ut_schedule *s, int64_t step) {
    UT_ASSERT(step >= 0);
    if (s->kind == UT_SCHED_ANNEALING) return annealing_lr(s, step);
    if (s->kind >= UT_SCHED_DS_WARMUP) return ds_lr(s, step);
    double lr = s->lr, min_lr = s->min_lr;
    int64_t w = s->warmup_steps;
    if (step < w) {
        double up = (double)(step + (s->warmup_zero ? 0 : 1)) / (double)w;
        return (float)(s->kind == UT_SCHED_WSD ? min_lr + (lr - min_lr) * up : lr * up);
    }
    int64_t k = step - w;
    double p = 0.0;
    if (s->total_steps > w) p = fmin(1.0, (double)k / (double)(s->total_steps - w));
    double x = 1.0; /* the fraction of the way from min_lr to lr */
    switch (s->kind) {
    case UT_SCHED_COSINE: x = wave(s->cycles > 0 ? s->cycles : 0.5, p); break;
    case UT_SCHED_COSINE_RESTARTS: {
        double c = s->cycles > 0 ? s->cycles : 1.0;
        x = p >= 1.0 ? 0.0 : 0.5 * (1.0 + cos(M_PI * fmod(c * p, 1.0)));
        break;
    }
    case UT_SCHED_LINEAR: x = 1.0 - p; break;
    case UT_SCHED_POLYNOMIAL: x = pow(1.0 - p, s->power > 0 ? (double)s->power : 1.0); break;
    case UT_SCHED_WSD: x = wsd(s, step); break;
    case UT_SCHED_STEP:
        UT_ASSERT(s->step_size > 0);
        return (float)(lr * pow((double)s->gamma, (double)(k / s->step_size)));
    case UT_SCHED_INVERSE_SQRT: {
        double t = (double)(s->timescale > 0 ? s->timescale : w > 0 ? w : 10000);
        return (float)(lr * sqrt(t / ((double)k + t)));
    }
    case UT_SCHED_CONSTANT:
    case UT_SCHED_DS_WARMUP:
    case UT_SCHED_DS_WARMUP_DECAY:
    case UT_SCHED_DS_WARMUP_COSINE:
    case UT_SCHED_ANNEALING:
    case UT_SCHED_PLATEAU:
    case UT_SCHED_GREEDY: return (float)lr;
    }
    return (float)(min_lr + (lr - min_lr) * x);
}

static int fail(char *err, size_t n, const char *msg) {
    if (err && n) snprintf(err, n, "%s", msg);
    return -1;
}

int ut_schedule_check(const ut_schedule *s, char *err, size_t n) {
    if (s->kind < UT_SCHED_CONSTANT || s->kind > UT_SCHED_GREEDY)
        return fail(err, n, ut_fmt("kind: unknown schedule kind %d", (int)s->kind));
    /* Written as !(x >= 0) so NaN fails too. */
    if (!(s->lr >= 0) || isinf(s->lr))
        return fail(err, n, ut_fmt("lr must be a finite number >= 0 (got %g)", s->lr));
    if (!(s->min_lr >= 0))
        return fail(err, n, ut_fmt("min_lr must be >= 0 (got %g)", s->min_lr));
    if (s->min_lr > s->lr && s->kind != UT_SCHED_GREEDY)
        return fail(err, n, ut_fmt("min_lr (%g) must not exceed lr (%g)", s->min_lr, s->lr));
    if (s->warmup_steps < 0)
        return fail(err, n, ut_fmt("warmup_steps must be >= 0 (got %lld)",
                                   (long long)s->warmup_steps));
    if (s->total_steps < 0)
        return fail(err, n, ut_fmt("total_steps must be >= 0 (got %lld)",
                                   (long long)s->total_steps));
    if (s->kind == UT_SCHED_ANNEALING && (s->total_steps < 1 || s->warmup_steps > s->total_steps))
        return fail(err, n, ut_fmt("annealing: warmup_steps (%lld) must be at most total_steps (%lld), which must be "
                                   ">= 1", (long long)s->warmup_steps, (long long)s->total_steps));
    if (s->kind == UT_SCHED_ANNEALING && s->decay != UT_DECAY_COSINE && s->decay != UT_DECAY_LINEAR)
        return fail(err, n, ut_fmt("annealing: decay must be cosine or linear (got kind %d)", (int)s->decay));
    if (s->micro < 0) return fail(err, n, ut_fmt("micro must be >= 0 (got %lld)", (long long)s->micro));
    bool decays = s->kind != UT_SCHED_CONSTANT && s->kind != UT_SCHED_STEP && s->kind != UT_SCHED_INVERSE_SQRT &&
                  s->kind != UT_SCHED_ANNEALING && s->kind != UT_SCHED_PLATEAU &&
                  s->kind != UT_SCHED_GREEDY && s->kind != UT_SCHED_DS_WARMUP;
    if (decays && s->total_steps <= s->warmup_steps)
        return fail(err, n, ut_fmt("total_steps (%lld) must exceed warmup_steps (%lld)",
                                   (long long)s->total_steps, (long long)s->warmup_steps));
    if (!(s->cycles >= 0) || isinf(s->cycles))
        return fail(err, n, ut_fmt("cycles must be a finite number >= 0 (got %g)", s->cycles));
    if (!(s->power >= 0) || isinf(s->power))
        return fail(err, n, ut_fmt("power must be a finite number >= 0 (got %g)", s->power));
    if (!(s->warmup_min_ratio >= 0 && s->warmup_min_ratio <= 1))
        return fail(err, n, ut_fmt("warmup_min_ratio must be in [0, 1] (got %g)", s->warmup_min_ratio));
    if (s->timescale < 0)
        return fail(err, n, ut_fmt("timescale must be >= 0 (got %lld)", (long long)s->timescale));
    if (s->kind == UT_SCHED_WSD) {
        if (s->decay_steps < 1)
            return fail(err, n, ut_fmt("decay_steps must be >= 1 with wsd (got %lld)", (long long)s->decay_steps));
        if (s->decay < UT_DECAY_COSINE || s->decay > UT_DECAY_SQRT)
            return fail(err, n, ut_fmt("decay: unknown decay kind %d", (int)s->decay));
        if (s->warmup_steps + s->decay_steps > s->total_steps)
            return fail(err, n, ut_fmt("warmup_steps (%lld) + decay_steps (%lld) exceed total_steps (%lld)",
                                       (long long)s->warmup_steps, (long long)s->decay_steps,
                                       (long long)s->total_steps));
    }
    if (s->kind == UT_SCHED_STEP) {
        if (s->step_size <= 0)
            return fail(err, n, ut_fmt("step_size must be > 0 (got %lld)",
                                       (long long)s->step_size));
        if (!(s->gamma > 0) || isinf(s->gamma))
            return fail(err, n, ut_fmt("gamma must be a finite number > 0 (got %g)", s->gamma));
    }
    return 0;
}

int ut_sched_parse(const char *name, ut_sched_kind *out) {
    static const char *const names[] = {"constant",        "cosine",     "linear",       "step",
                                        "cosine_restarts", "polynomial", "inverse_sqrt", "wsd",
                                        "ds_warmup",       "ds_warmup_decay", "ds_warmup_cosine", "annealing",
                                        "plateau",         "greedy"};
    _Static_assert(sizeof names / sizeof names[0] == UT_SCHED_GREEDY + 1, "a name for every schedule");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(name, names[i])) {
            *out = (ut_sched_kind)i;
            return 0;
        }
    return -1;
}
