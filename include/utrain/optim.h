/* utrain optimizers (SGD, AdamW, Lion, Adafactor) over a flat parameter buffer, gradient
 * clipping and learning-rate schedules, all matching PyTorch.
 * defines: ut_param_seg, ut_optim_kind, ut_optim_config, ut_optim, ut_optim_*,
 *          ut_grad_norm_sq, ut_clip_grad_norm, ut_grad_scale, ut_grad_scaler, ut_sched_kind,
 *          ut_schedule, ut_schedule_lr, ut_schedule_check, ut_sched_parse, ut_plateau,
 *          ut_plateau_state, ut_plateau_init, ut_plateau_step, ut_plateau_check. */
#ifndef UTRAIN_OPTIM_H
#define UTRAIN_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "utrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One parameter inside the flat buffer: elements [offset, offset+numel).
 * decay: whether weight decay applies (models set it for ndim >= 2, so biases
 * and norm weights get none by default). rows, cols: for ndim >= 2 its last
 * two dimensions (numel = rows x cols x the leading ones), else 0 (Adafactor
 * factors the matrices; its factoring is symmetric, so a weight stored
 * transposed from transformers' layout, as GPT-2's Conv1D weights are,
 * gets the same update). */
typedef struct {
    int64_t offset, numel;
    bool decay;
    int64_t rows, cols;
} ut_param_seg;

typedef enum { UT_OPTIM_SGD, UT_OPTIM_ADAMW, UT_OPTIM_LION, UT_OPTIM_ADAFACTOR } ut_optim_kind;

/* lr is the base rate (schedules start from it; ut_optim_step takes the rate
 * of each step). AdamW uses beta1, beta2, eps; Lion beta1, beta2; SGD uses
 * momentum, dampening, nesterov. decay_all applies weight_decay to every segment, ignoring the
 * segments' decay flags. */
typedef struct {
    ut_optim_kind kind;
    float lr, weight_decay, beta1, beta2, eps, momentum, dampening;
    bool nesterov;
    /* Adafactor: eps (eps1, added to g^2), eps2 (the floor of the parameter
     * scale), clip_threshold, decay_rate, scale_parameter; beta1 0: no first
     * moment (transformers' None); relative_step: the rate is
     * min(warmup_init ? 1e-6 t : 1e-2, 1/sqrt(t)), not the step's lr */
    float eps2, clip_threshold, decay_rate;
    bool scale_parameter, relative_step, warmup_init;
    bool decay_all;
    ut_device device; /* where the params, grads and state live (the flat buffers'; 0: the CPU) */
} ut_optim_config;

/* torch's defaults. AdamW: lr 1e-3, betas (0.9, 0.999), eps 1e-8,
 * weight_decay 0.01. SGD: lr 1e-3, momentum 0, dampening 0, weight_decay 0.
 * Lion (lion-pytorch's): lr 1e-4, betas (0.9, 0.99), weight_decay 0.
 * Adafactor (transformers' with relative_step False): lr 1e-3, eps (1e-30,
 * 1e-3), clip_threshold 1, decay_rate -0.8, no beta1, weight_decay 0,
 * scale_parameter true. */
ut_optim_config ut_optim_defaults(ut_optim_kind k);
/* 0 if cfg makes sense, else -1 with a message naming the field in err:
 * lr < 0, weight_decay < 0, betas outside [0, 1), eps <= 0, momentum < 0,
 * nesterov without momentum > 0 and dampening == 0 (torch's rule), NaNs. */
int ut_optim_check_config(const ut_optim_config *cfg, char *err, size_t n);
/* "sgd" / "adamw" / "lion" / "adafactor" (any case) into *out: 0, or -1 for an unknown name. */
int ut_optim_parse(const char *name, ut_optim_kind *out);

typedef struct ut_optim ut_optim;

/* An optimizer over params/grads (same flat layout, described by segs: sorted
 * by offset, not overlapping) that owns the shard [lo, hi): ut_optim_step
 * updates only params[lo, hi) and keeps state only for it, so ranks each
 * owning a slice together do exactly what one optimizer over everything does.
 * Elements of [lo, hi) in no segment (padding) are never touched. The state
 * buffers (64-byte aligned, zeroed) are allocated here. The optimizer keeps
 * the params and grads pointers (segs is only read here). Aborts on an invalid
 * cfg (check it first with ut_optim_check_config) or bad segs/[lo, hi). */
ut_optim *ut_optim_new(const ut_optim_config *cfg, float *params, float *grads,
                       const ut_param_seg *segs, int nsegs, int64_t lo, int64_t hi);
/* The same over buffers that hold only part of the flat layout: element i is
 * params[i - pbase] and grads[i - gbase] (pbase, gbase <= lo). A ZeRO rank
 * passes its shard buffers with base lo. */
ut_optim *ut_optim_new_view(const ut_optim_config *cfg, float *params, int64_t pbase, float *grads,
                            int64_t gbase, const ut_param_seg *segs, int nsegs, int64_t lo,
                            int64_t hi);
void ut_optim_free(ut_optim *o);
const ut_optim_config *ut_optim_get_config(const ut_optim *o);
void ut_optim_range(const ut_optim *o, int64_t *lo, int64_t *hi);
/* State buffers: 2 for AdamW, 1 for Lion and for SGD with momentum, for
 * Adafactor 1 (2 with beta1), else 0. For every kind but Adafactor each
 * buffer holds a float per parameter element. */
int ut_optim_state_per_param(const ut_optim_config *cfg);
/* Floats of state buffer i that parameter s takes: its numel, except
 * Adafactor's second moment of a matrix: rows + cols for each of the
 * leading dimensions' entries (the factored statistics). */
int64_t ut_optim_seg_state_len(const ut_optim_config *cfg, int i, const ut_param_seg *s);

/* One update of params[lo, hi) from grads[lo, hi) with learning rate lr.
 * Allocates nothing, deterministic (elementwise; any thread count gives the
 * same bits). With t = steps taken including this one and wd = weight_decay
 * where the segment decays (decay flag or decay_all), else 0:
 *   AdamW (torch.optim.AdamW):
 *     p *= 1 - lr*wd
 *     m  = m + (1-beta1)*(g - m)          v = beta2*v + (1-beta2)*g*g
 *     denom = sqrt(v)/sqrt(1-beta2^t) + eps
 *     p -= (lr/(1-beta1^t)) * m/denom
 *   SGD (torch.optim.SGD):
 *     d = g + wd*p
 *     if momentum != 0: buf = d on the first step, else
 *                       buf = momentum*buf + (1-dampening)*d
 *                       d = nesterov ? d + momentum*buf : buf
 *     p -= lr*d
 *   Lion (lion-pytorch's Lion, bitsandbytes' 32-bit Lion):
 *     p *= 1 - lr*wd
 *     p -= lr*sign(beta1*m + (1-beta1)*g)      (sign(0) = 0)
 *     m  = beta2*m + (1-beta2)*g
 *   Adafactor (transformers' Adafactor), per parameter P (whole: [lo, hi)
 *   must not cut one), with rho = 1 - t^decay_rate and, with relative_step,
 *   lr = min(warmup_init ? 1e-6*t : 1e-2, 1/sqrt(t)) in place of the step's:
 *     a = lr * (scale_parameter ? max(eps2, rms(P)) : 1)
 *     G = g*g + eps
 *     a matrix (rows R, cols C per leading index; transformers' layout):
 *       r = rho*r + (1-rho)*mean_C(G)      c = rho*c + (1-rho)*mean_R(G)
 *       u = rsqrt(r/mean(r)) x rsqrt(c) * g
 *     else: v = rho*v + (1-rho)*G,  u = rsqrt(v) * g
 *     u *= a / max(1, rms(u)/clip_threshold)
 *     beta1 > 0: m = beta1*m + (1-beta1)*u, u = m
 *     p += p * (-wd*a);  p -= u */
void ut_optim_step(ut_optim *o, float lr);
/* ut_optim_step, then grads[lo, hi) = 0 (all of it, padding between segments
 * included), in the same pass over the gradients: the same parameters and
 * state, bit for bit, as ut_optim_step followed by a memset of grads[lo, hi),
 * with one fewer pass over memory. For a training loop whose optimizer covers
 * the whole buffer this replaces ut_optim_step + ut_model_zero_grad. */
void ut_optim_step_zero(ut_optim *o, float lr);
/* ut_optim_step_zero with the step's scalars in device memory (two floats
 * of the optimizer's device, written there by ut_grad_step_scalars): every
 * gradient is read multiplied by scalars[0], and scalars[1] nonzero skips
 * the update (parameters, state and the step count as they were; the
 * gradients are still zeroed). The step launches without the host knowing
 * the norm, as torch's fused optimizers take grad_scale and found_inf. The
 * caller learns of a skip when it reads the norm and then calls
 * ut_optim_unstep. */
void ut_optim_step_zero_scaled(ut_optim *o, float lr, const float *scalars);
/* ut_optim_step_zero in pieces, in order: each piece [a, b) of [lo, hi) of
 * about `piece` elements is updated and its gradient zeroed, then
 * done(arg, a, b) is called before the next piece is begun, so the caller
 * can send the updated parameters on while the rest is updated (ZeRO-
 * Offload's upload). The pieces cover [lo, hi) without gaps; the result
 * is the same, bit for bit, as ut_optim_step_zero's. Adafactor's pieces are
 * whole parameters (one piece may be larger than `piece`). */
typedef void (*ut_optim_piece_fn)(void *arg, int64_t a, int64_t b);
void ut_optim_step_zero_pieces(ut_optim *o, float lr, int64_t piece, ut_optim_piece_fn done, void *arg);
/* Takes back the step count of a step its scalars skipped. */
void ut_optim_unstep(ut_optim *o);
/* 16-bit copies of the parameters (dt BF16 or F16; NULL: none), written by
 * every step in the same pass: copies16[i - lo] is parameter element i
 * rounded to dt for each i in [lo, hi) that a segment covers (padding
 * between segments is left alone), skipped step or not. Memory of the
 * optimizer's device, (hi - lo) elements of dt; the caller owns it.
 * Autocast reads them instead of rounding the parameters afresh each
 * forward (ut_ctx_set_param_copies, tensor.h). */
void ut_optim_set_copies16(ut_optim *o, void *copies16, ut_dtype dt);

/* ---- state, for checkpoints ---- */
int64_t ut_optim_steps(const ut_optim *o);           /* steps taken */
void ut_optim_set_steps(ut_optim *o, int64_t n);      /* after restoring the state */
/* Number of state buffers: 2 for AdamW (exp_avg, exp_avg_sq), 1 for Lion
 * (exp_avg) and SGD with momentum (momentum_buffer), 1 for Adafactor
 * (exp_avg_sq_factored; then exp_avg with beta1), 0 otherwise. */
int ut_optim_nstate(const ut_optim *o);
/* State buffer i (0 <= i < nstate), ut_optim_state_len floats covering
 * [lo, hi): a float per element (hi-lo), or Adafactor's second moment, the
 * parameters' ut_optim_seg_state_len floats one after the other in the
 * order of segs; *name (if name is not NULL) gets its name. */
float *ut_optim_state(ut_optim *o, int i, const char **name);
int64_t ut_optim_state_len(const ut_optim *o, int i);
size_t ut_optim_state_bytes(const ut_optim *o);      /* the buffers' floats * 4 */

/* ---- gradient clipping ---- */
/* Sum of g[i]^2 in double. Deterministic for any thread count: fixed blocks
 * that depend only on n, added in block order. */
double ut_grad_norm_sq(ut_device dev, const float *g, int64_t n);
/* g *= s. g is memory of dev, as for every function here. */
void ut_grad_scale(ut_device dev, float *g, int64_t n, float s);
/* torch.nn.utils.clip_grad_norm_ (2-norm): returns the norm before clipping;
 * if c = max_norm/(norm + 1e-6) < 1, scales g by c. A sharded caller instead
 * adds ut_grad_norm_sq over ranks and calls ut_grad_scale with the same c. */
float ut_clip_grad_norm(ut_device dev, float *g, int64_t n, float max_norm);
/* The step's scalars into dst (two floats of dev's memory) from the square
 * sum *sq (dev's memory, e.g. from ut_grad_norm_sq's queued form) of
 * gradients multiplied by the loss scale `scale` (1 without fp16), queued on
 * the device: dst[0] = 1/scale, times max_norm / (norm + 1e-6) when max_norm
 * > 0 and the unscaled norm exceeds it; dst[1] = 1 when the norm is inf or
 * NaN. ut_grad_step_rule gives the host the same values from the same sum. */
void ut_grad_step_scalars(ut_device dev, float *dst, const double *sq, double max_norm, float scale);
/* The same on the host from the norm of the scaled gradients (the square
 * root of *sq above): returns true for a skip; *coef as dst[0], *norm the
 * unscaled norm. */
bool ut_grad_step_rule(double scaled_norm, double max_norm, float scale, float *coef, double *norm);

/* ---- dynamic loss scaling (fp16), as torch.amp.GradScaler ----
 * The loss is multiplied by scale before backward; after the gradients are
 * reduced, a step whose gradients hold an inf or NaN is skipped (parameters
 * and optimizer state untouched) and the scale halves (backoff_factor);
 * otherwise the gradients are multiplied by 1/scale before clipping and the
 * step runs, and after growth_interval such steps in a row the scale doubles
 * (growth_factor). GradScaler's defaults: init_scale 65536 (2^16),
 * growth_interval 2000. */
typedef struct {
    float scale, growth_factor, backoff_factor;
    int64_t growth_interval;
    int64_t growth_tracker;  /* clean steps since the scale last changed */
    /* DeepSpeed's additions (ut_grad_scaler_init leaves them off): the scale
     * never backs off below min_scale (0: no floor); with hysteresis N > 1
     * the first N-1 overflows only skip their steps, and the scale backs off
     * from the N-th on, until a growth (or, consecutive_hysteresis, any clean
     * step) restores the N. */
    float min_scale;
    int64_t hysteresis, hysteresis_left;
    bool consecutive_hysteresis;
} ut_grad_scaler;

void ut_grad_scaler_init(ut_grad_scaler *s, float init_scale, int64_t growth_interval);
/* DeepSpeed's DynamicLossScaler (its fp16 section's loss_scale_window,
 * min_loss_scale, hysteresis, consecutive_hysteresis), hysteresis >= 1. */
void ut_grad_scaler_set_hysteresis(ut_grad_scaler *s, float min_scale, int64_t hysteresis, bool consecutive);
/* After a step's check: found_inf is whether any gradient was inf or NaN. */
void ut_grad_scaler_update(ut_grad_scaler *s, bool found_inf);

/* ---- learning-rate schedules ---- */
typedef enum {
    UT_SCHED_CONSTANT,
    UT_SCHED_COSINE,
    UT_SCHED_LINEAR,
    UT_SCHED_STEP,
    UT_SCHED_COSINE_RESTARTS, /* cosine with hard restarts */
    UT_SCHED_POLYNOMIAL,
    UT_SCHED_INVERSE_SQRT,
    UT_SCHED_WSD, /* warmup, stable, decay */
    /* DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR, with its own
     * warmup (log or linear) and step index */
    UT_SCHED_DS_WARMUP,
    UT_SCHED_DS_WARMUP_DECAY,
    UT_SCHED_DS_WARMUP_COSINE,
    /* FlagAI's (Megatron's) AnnealingLR, cosine or linear style, with its
     * iteration index (micro-batches) */
    UT_SCHED_ANNEALING,
    /* torch's ReduceLROnPlateau: the rate of a ut_plateau_state (below),
     * lowered by the evaluations; ut_schedule_lr gives its start, lr */
    UT_SCHED_PLATEAU,
    /* transformers' GreedyLR: the same, raised as well as lowered */
    UT_SCHED_GREEDY,
} ut_sched_kind;
/* the shape of WSD's decay (and ANNEALING's: cosine or linear) */
typedef enum { UT_DECAY_COSINE, UT_DECAY_LINEAR, UT_DECAY_SQRT } ut_decay_kind;

/* lr is the peak rate. min_lr is the floor of the decaying schedules, which
 * reach it at total_steps. STEP multiplies by gamma every step_size steps
 * after warmup. The fields after gamma may be left 0 for their defaults. */
typedef struct {
    ut_sched_kind kind;
    float lr, min_lr;
    int64_t warmup_steps, total_steps, step_size;
    float gamma;
    float cycles;        /* COSINE: waves over the decay (0: 0.5, down to min_lr once);
                            COSINE_RESTARTS: cycles (0: 1); WSD's cosine decay (0: 0.5) */
    float power;         /* POLYNOMIAL: the power of the decay (0: 1) */
    int64_t timescale;   /* INVERSE_SQRT (0: warmup_steps, or 10000 without warmup) */
    int64_t decay_steps; /* WSD: the last decay_steps of total_steps decay */
    ut_decay_kind decay; /* WSD, ANNEALING: the decay's shape */
    bool warmup_log;     /* DS_*: DeepSpeed's log warmup (else its linear one) */
    float warmup_min_ratio; /* DS_WARMUP_COSINE: warmup starts at this x lr */
    int64_t micro;       /* ANNEALING: scheduler iterations per optimizer step (the micro-batches; 0: 1) */
    bool warmup_zero;    /* the warmup of the schedules before DS_*: transformers' step/w (the first
                            step at rate 0; WSD: at min_lr) instead of (step+1)/w */
} ut_schedule;

/* Rate for the step after `step` optimizer steps (0-based). With w =
 * warmup_steps, p = (step-w)/(total_steps-w) clamped to [0, 1], c = cycles
 * and f(x) = min_lr + (lr-min_lr)*x:
 *   step < w:  lr*(step+1)/w          (linear warmup; never a zero first step;
 *                                      WSD: f((step+1)/w); with warmup_zero
 *                                      transformers' lr*step/w, f(step/w))
 *   CONSTANT:  lr      (PLATEAU, GREEDY: lr, the start of their ut_plateau_state)
 *   COSINE:    f(0.5*(1 + cos(2*pi*c*p)))
 *   COSINE_RESTARTS: f(0.5*(1 + cos(pi*((c*p) mod 1)))), f(0) at p = 1
 *   LINEAR:    f(1 - p)
 *   POLYNOMIAL: f((1 - p)^power)
 *   STEP:      lr * gamma^floor((step-w)/step_size)
 *   INVERSE_SQRT: lr * sqrt(T/(step-w+T)), T = timescale
 *   WSD:       lr until the last decay_steps of total_steps, then f(1 - q),
 *              f(0.5*(1 + cos(2*pi*c*q))) or f(1 - sqrt(q)) over their
 *              fraction q, then min_lr
 * DeepSpeed's, which step their scheduler after each optimizer step from
 * index -1: with i = step - 1, W = max(2, warmup_steps), T = total_steps,
 * g = ln(i+1)/ln(W) (warmup_log) or i/W while i < W, and start = min_lr
 * (DS_WARMUP_COSINE: warmup_min_ratio x lr):
 *   i < 0:     start (DS_WARMUP_COSINE: 0)
 *   i < W:     start + (lr - start)*g
 *   DS_WARMUP: lr;  DS_WARMUP_DECAY: f(max(0, (T-i)/max(1, T-W)))
 *   DS_WARMUP_COSINE: f(0.5*(1 + cos(pi*min(1, (i-W+1)/max(1, T-W)))))
 * FlagAI's AnnealingLR, which steps after every micro-batch from index 0:
 * with A = micro, i = step*A + A - 1 (the index at the step's last
 * micro-batch), W = warmup_steps, E = total_steps in iterations and
 * q = (i - W)/E:
 *   ANNEALING: lr*i/W while W > 0 and i <= W, then
 *              f(0.5*(1 + cos(pi*min(1, q))))   (decay cosine)
 *              max(min_lr, lr - (lr - min_lr)*q) (decay linear)
 *              (min_lr is lr x its decay_ratio, 0.1 in FlagAI's Trainer)
 * These are transformers' get_scheduler schedules after warmup (whose own
 * warmup starts at 0, one step behind this one unless warmup_zero).
 * s should pass ut_schedule_check (STEP aborts on step_size <= 0). */
float ut_schedule_lr(const ut_schedule *s, int64_t step);
/* 0 if s makes sense, else -1 with a message naming the field in err:
 * negative lr/min_lr/warmup_steps/total_steps, min_lr > lr (but GREEDY,
 * whose rate may rise above min_lr), total_steps <=
 * warmup_steps (the decaying schedules), step_size <= 0 or gamma <= 0
 * (step), negative cycles, power or timescale, WSD's decay_steps < 1 or
 * warmup_steps + decay_steps > total_steps. */
int ut_schedule_check(const ut_schedule *s, char *err, size_t n);
/* "constant", "cosine", "linear", "step", "cosine_restarts", "polynomial",
 * "inverse_sqrt", "wsd", "ds_warmup", "ds_warmup_decay", "ds_warmup_cosine", "annealing",
 * "plateau", "greedy" (any case) into *out: 0, or -1. */
int ut_sched_parse(const char *name, ut_sched_kind *out);

/* ---- a rate driven by the evaluations: torch's ReduceLROnPlateau ----
 * Unlike the schedules above, a function of the metrics seen rather than of
 * the step: after each evaluation, ut_plateau_step compares the metric with
 * the best so far; after more than `patience` evaluations in a row without
 * an improvement the rate is multiplied by `factor` (not below min_lr, and
 * only when that lowers it by more than eps), and the next `cooldown`
 * evaluations count no bad ones. An improvement, with t = threshold:
 *   mode min, rel: m < best (1 - t)     mode min, abs: m < best - t
 *   mode max, rel: m > best (1 + t)     mode max, abs: m > best + t
 * (a NaN metric never improves). The state is what a checkpoint keeps.
 *
 * greedy: transformers' GreedyLR (transformers/optimization.py) instead,
 * with the same improvement test. Each metric first enters the average of
 * the last `window` metrics when window > 0 (its `smooth`), and that
 * average is what is judged. An evaluation in a cooldown or a warmup only
 * counts it down (the best is not updated, the runs of good and bad
 * evaluations start again). Otherwise more than `patience` improvements in
 * a row divide the rate by factor (not above max_lr, and only when that
 * raises it by more than eps), then `warmup` evaluations are skipped;
 * more than `patience` evaluations without one multiply it by factor as
 * above, then `cooldown` are skipped. A fall that leaves the rate at or
 * below min_lr counts down `reset_start` (a rise sets it back); at 0 the
 * state starts again: the first rate, no best, an empty window. */
#define UT_GREEDY_WINDOW_MAX 256
typedef struct {
    bool max;           /* mode max: a larger metric is better (else min) */
    bool abs;           /* threshold_mode abs (else rel) */
    double factor;      /* in (0, 1) */
    int64_t patience;   /* >= 0 */
    double threshold;   /* >= 0 */
    int64_t cooldown;   /* >= 0 */
    double min_lr;      /* >= 0 */
    double eps;         /* >= 0 */
    bool greedy;        /* GreedyLR: the fields below too */
    int64_t warmup;     /* >= 0: evaluations skipped after a rise */
    double max_lr;      /* > 0: the ceiling of a rise */
    int64_t window;     /* 0 (no smoothing) to UT_GREEDY_WINDOW_MAX */
    int64_t reset_start; /* >= 1: falls at min_lr before the state starts again */
} ut_plateau;

typedef struct {
    double lr;          /* the rate now */
    double best;        /* the best metric so far (+inf in mode min, -inf in max, before any) */
    int64_t bad;        /* evaluations since the last improvement (torch's num_bad_epochs) */
    int64_t cooldown;   /* evaluations of cooldown left */
    /* greedy's */
    double lr0;         /* the first rate, which a reset restores */
    int64_t good;       /* improvements in a row (num_good_epochs) */
    int64_t warmup;     /* evaluations of warmup left */
    int64_t reset_left; /* falls at min_lr before a reset */
    int64_t win_n;      /* metrics in the window (oldest first from win_head) */
    int64_t win_head;
    double win_sum;     /* their running sum, as Python keeps it (added, then the oldest subtracted) */
    double win[UT_GREEDY_WINDOW_MAX];
} ut_plateau_state;

/* The state before any evaluation, at rate lr. */
void ut_plateau_init(const ut_plateau *p, double lr, ut_plateau_state *s);
/* What an evaluation did to the rate. */
enum { UT_PLATEAU_SAME, UT_PLATEAU_LOWERED, UT_PLATEAU_RAISED, UT_PLATEAU_RESET };
/* One evaluation's metric: updates s; returns one of the above (nonzero:
 * the rate changed, or greedy's state started again). */
int ut_plateau_step(const ut_plateau *p, ut_plateau_state *s, double metric);
/* 0 if p makes sense, else -1 with a message naming the field in err. */
int ut_plateau_check(const ut_plateau *p, char *err, size_t n);

#ifdef __cplusplus
}
#endif
#endif
