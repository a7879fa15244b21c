/* A learning rate that falls when the evaluations stop improving: torch's
 * ReduceLROnPlateau (torch/optim/lr_scheduler.py), and transformers'
 * GreedyLR, which also raises it while they improve, step for step, in
 * double as Python computes them. Their rules are in utrain/optim.h. */
#include "utrain/optim.h"

#include <math.h>
#include <stdio.h>

#include "utrain/base.h"

void ut_plateau_init(const ut_plateau *p, double lr, ut_plateau_state *s) {
    *s = (ut_plateau_state){.lr = lr, .best = p->max ? -INFINITY : INFINITY, .lr0 = lr,
                            .reset_left = p->reset_start};
}

static bool improves(const ut_plateau *p, double m, double best) {
    if (p->max) return p->abs ? m > best + p->threshold : m > best * (1.0 + p->threshold);
    return p->abs ? m < best - p->threshold : m < best * (1.0 - p->threshold);
}

/* GreedyLR's StreamingAverage: the metric joins the window (the oldest
 * leaves a full one) and the average is the running sum over the count. */
static double smooth(const ut_plateau *p, ut_plateau_state *s, double m) {
    s->win_sum += m;
    if (s->win_n == p->window) { /* full: the oldest leaves (read first: a full ring puts m in its place) */
        double oldest = s->win[s->win_head];
        s->win[(s->win_head + s->win_n) % UT_GREEDY_WINDOW_MAX] = m;
        s->win_sum -= oldest;
        s->win_head = (s->win_head + 1) % UT_GREEDY_WINDOW_MAX;
    } else {
        s->win[(s->win_head + s->win_n) % UT_GREEDY_WINDOW_MAX] = m;
        s->win_n++;
    }
    return s->win_sum / (double)s->win_n;
}

static int greedy_step(const ut_plateau *p, ut_plateau_state *s, double metric) {
    if (p->window > 0) metric = smooth(p, s, metric);
    if (s->cooldown > 0 || s->warmup > 0) { /* counted down; nothing judged */
        if (s->cooldown > 0) s->cooldown--;
        else s->warmup--;
        s->bad = s->good = 0;
        return UT_PLATEAU_SAME;
    }
    if (improves(p, metric, s->best)) {
        s->best = metric;
        s->bad = 0;
        s->good++;
    } else {
        s->bad++;
        s->good = 0;
    }
    if (s->good > p->patience) {
        double higher = fmin(s->lr / p->factor, p->max_lr);
        bool rose = higher - s->lr > p->eps;
        if (rose) s->lr = higher;
        s->reset_left = p->reset_start;
        s->warmup = p->warmup;
        s->good = 0;
        return rose ? UT_PLATEAU_RAISED : UT_PLATEAU_SAME;
    }
    if (s->bad <= p->patience) return UT_PLATEAU_SAME;
    double lower = fmax(s->lr * p->factor, p->min_lr);
    bool fell = s->lr - lower > p->eps;
    if (fell) s->lr = lower;
    int r = fell ? UT_PLATEAU_LOWERED : UT_PLATEAU_SAME;
    if (!(s->lr > p->min_lr) && --s->reset_left <= 0) { /* long enough at the floor: start again */
        *s = (ut_plateau_state){.lr = s->lr0, .best = p->max ? -INFINITY : INFINITY, .lr0 = s->lr0,
                                .reset_left = p->reset_start};
        r = UT_PLATEAU_RESET;
    }
    s->cooldown = p->cooldown; /* a reset's too, as GreedyLR.step goes on after it */
    s->bad = 0;
    return r;
}

int ut_plateau_step(const ut_plateau *p, ut_plateau_state *s, double metric) {
    if (p->greedy) return greedy_step(p, s, metric);
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
    if (s->bad <= p->patience) return UT_PLATEAU_SAME;
    s->cooldown = p->cooldown;
    s->bad = 0;
    double lower = fmax(s->lr * p->factor, p->min_lr);
    if (s->lr - lower <= p->eps) return UT_PLATEAU_SAME;
    s->lr = lower;
    return UT_PLATEAU_LOWERED;
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
    else if (p->greedy && p->warmup < 0) msg = ut_fmt("warmup must be >= 0 (got %lld)", (long long)p->warmup);
    else if (p->greedy && (!(p->max_lr > 0) || isinf(p->max_lr)))
        msg = ut_fmt("max_lr must be a finite number > 0 (got %g)", p->max_lr);
    else if (p->greedy && (p->window < 0 || p->window > UT_GREEDY_WINDOW_MAX))
        msg = ut_fmt("window must be in [0, %d] (got %lld)", UT_GREEDY_WINDOW_MAX, (long long)p->window);
    else if (p->greedy && p->reset_start < 1)
        msg = ut_fmt("reset_start must be >= 1 (got %lld)", (long long)p->reset_start);
    if (!msg) return 0;
    if (err && n) snprintf(err, n, "%s", msg);
    return -1;
}
