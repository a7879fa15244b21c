/* A learning rate that falls when the evaluations stop improving: torch's
 * ReduceLROnPlateau (torch/optim/lr_scheduler.py), step for step, in double
 * as Python computes it. Its rules are in utrain/optim.h. */
#include "utrain/optim.h"

#include <math.h>
#include <stdio.h>

#include "utrain/base.h"

void ut_plateau_init(const ut_plateau *p, double lr, ut_plateau_state *s) {
    *s = (ut_plateau_state){.lr = lr, .best = p->max ? -INFINITY : INFINITY};
}

static bool improves(const ut_plateau *p, double m, double best) {
    if (p->max) return p->abs ? m > best + p->threshold : m > best * (1.0 + p->threshold);
    return p->abs ? m < best - p->threshold : m < best * (1.0 - p->threshold);
}

bool ut_plateau_step(const ut_plateau *p, ut_plateau_state *s, double metric) {
    if (improves(p, metric, s->best)) {
        s->best = metric;
        s->bad = 0;
    } else {
        s->bad++;
    }
    if (s->cooldown > 0) { /* bad evaluations in the cooldown do not count */
        s->cooldown--;
        s->bad = 0;
    }
    if (s->bad <= p->patience) return false;
    s->cooldown = p->cooldown;
    s->bad = 0;
    double lower = fmax(s->lr * p->factor, p->min_lr);
    if (s->lr - lower <= p->eps) return false;
    s->lr = lower;
    return true;
}

int ut_plateau_check(const ut_plateau *p, char *err, size_t n) {
    const char *msg = NULL;
    if (!(p->factor > 0 && p->factor < 1)) msg = ut_fmt("factor must be in (0, 1) (got %g)", p->factor);
    else if (p->patience < 0) msg = ut_fmt("patience must be >= 0 (got %lld)", (long long)p->patience);
    else if (!(p->threshold >= 0) || isinf(p->threshold))
        msg = ut_fmt("threshold must be a finite number >= 0 (got %g)", p->threshold);
    else if (p->cooldown < 0) msg = ut_fmt("cooldown must be >= 0 (got %lld)", (long long)p->cooldown);
    else if (!(p->min_lr >= 0) || isinf(p->min_lr))
        msg = ut_fmt("min_lr must be a finite number >= 0 (got %g)", p->min_lr);
    else if (!(p->eps >= 0) || isinf(p->eps)) msg = ut_fmt("eps must be a finite number >= 0 (got %g)", p->eps);
    if (!msg) return 0;
    if (err && n) snprintf(err, n, "%s", msg);
    return -1;
}
