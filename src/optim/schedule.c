/* Learning-rate schedules: linear warmup, then constant, cosine, linear or
 * step decay. Computed in double, like torch's LambdaLR/StepLR in Python. */
#include "utrain/optim.h"

#include <math.h>
#include <stdio.h>
#include <strings.h>

#include "utrain/base.h"

float ut_schedule_lr(const ut_schedule *s, int64_t step) {
    UT_ASSERT(step >= 0);
    double lr = s->lr, min_lr = s->min_lr;
    int64_t w = s->warmup_steps;
    if (step < w) return (float)(lr * (double)(step + 1) / (double)w);
    int64_t k = step - w;
    double p = 0.0;
    if (s->total_steps > w) p = fmin(1.0, (double)k / (double)(s->total_steps - w));
    switch (s->kind) {
    case UT_SCHED_COSINE: return (float)(min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * p)));
    case UT_SCHED_LINEAR: return (float)(min_lr + (lr - min_lr) * (1.0 - p));
    case UT_SCHED_STEP:
        UT_ASSERT(s->step_size > 0);
        return (float)(lr * pow((double)s->gamma, (double)(k / s->step_size)));
    case UT_SCHED_CONSTANT: break;
    }
    return (float)lr;
}

static int fail(char *err, size_t n, const char *msg) {
    if (err && n) snprintf(err, n, "%s", msg);
    return -1;
}

int ut_schedule_check(const ut_schedule *s, char *err, size_t n) {
    if (s->kind < UT_SCHED_CONSTANT || s->kind > UT_SCHED_STEP)
        return fail(err, n, ut_fmt("kind: unknown schedule kind %d", (int)s->kind));
    /* Written as !(x >= 0) so NaN fails too. */
    if (!(s->lr >= 0) || isinf(s->lr))
        return fail(err, n, ut_fmt("lr must be a finite number >= 0 (got %g)", s->lr));
    if (!(s->min_lr >= 0))
        return fail(err, n, ut_fmt("min_lr must be >= 0 (got %g)", s->min_lr));
    if (s->min_lr > s->lr)
        return fail(err, n, ut_fmt("min_lr (%g) must not exceed lr (%g)", s->min_lr, s->lr));
    if (s->warmup_steps < 0)
        return fail(err, n, ut_fmt("warmup_steps must be >= 0 (got %lld)",
                                   (long long)s->warmup_steps));
    if (s->total_steps < 0)
        return fail(err, n, ut_fmt("total_steps must be >= 0 (got %lld)",
                                   (long long)s->total_steps));
    if ((s->kind == UT_SCHED_COSINE || s->kind == UT_SCHED_LINEAR) &&
        s->total_steps <= s->warmup_steps)
        return fail(err, n, ut_fmt("total_steps (%lld) must exceed warmup_steps (%lld)",
                                   (long long)s->total_steps, (long long)s->warmup_steps));
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
    static const char *const names[] = {"constant", "cosine", "linear", "step"};
    for (int i = 0; i < 4; i++)
        if (!strcasecmp(name, names[i])) {
            *out = (ut_sched_kind)i;
            return 0;
        }
    return -1;
}
