/* Optimizers, clipping and schedules against PyTorch (fixtures written by
 * tests/parity/optim_fixtures.py), plus the properties ZeRO and checkpoints
 * rely on: a shard's step equals that slice of a full step, state exists only
 * for the shard and can be saved and restored, steps allocate nothing. */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "test.h"
#include "utrain/base.h"
#include "utrain/optim.h"

#define FIXTURES "tests/parity/fixtures/"

/* ---- fixture reader: one array a line, `name count v1 v2 ...` ---- */
typedef struct {
    char name[32];
    int count;
    double *v;
} fx_array;

typedef struct {
    fx_array a[64];
    int n;
} fixture;

static int fx_load(fixture *f, const char *path) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "r");
    CHECK(fp != NULL, "cannot open %s (run from the repo root; regenerate with "
                      "python3 tests/parity/optim_fixtures.py)", path);
    if (!fp) return -1;
    fx_array *a = &f->a[0];
    while (f->n < 64 && fscanf(fp, "%31s %d", a->name, &a->count) == 2 && a->count >= 0) {
        a->v = malloc(sizeof(double) * (size_t)(a->count ? a->count : 1));
        for (int i = 0; i < a->count; i++)
            if (fscanf(fp, "%lf", &a->v[i]) != 1) {
                CHECK(0, "%s: array %s is short", path, a->name);
                fclose(fp);
                return -1;
            }
        a = &f->a[++f->n];
    }
    fclose(fp);
    return 0;
}

static void fx_free(fixture *f) {
    for (int i = 0; i < f->n; i++) free(f->a[i].v);
    f->n = 0;
}

/* The array called name with count values (any count if count < 0), or NULL
 * with a failed check. */
static const double *fx_get(const fixture *f, const char *name, int count) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->a[i].name, name)) {
            CHECK(count < 0 || f->a[i].count == count, "%s has %d values, expected %d", name,
                  f->a[i].count, count);
            return count < 0 || f->a[i].count == count ? f->a[i].v : NULL;
        }
    CHECK(0, "fixture array %s missing", name);
    return NULL;
}

static double fx_scalar(const fixture *f, const char *name) {
    const double *v = fx_get(f, name, 1);
    return v ? v[0] : NAN;
}

static double rel_err(double a, double b) {
    return fabs(a - b) / fmax(fabs(b), 1e-30);
}

/* ---- parity with torch ---- */
#define NP 25  /* the fixtures' three tensors: 4x3, 3, 5x2 */

/* Parameters are compared relative to the largest magnitude each has had so
 * far in torch's run (scale[i]): rounding error follows the operands, not a
 * result that cancels to near zero, and torch's vector kernels fuse
 * multiply-adds where ours round twice. Strictly relative, a parameter that
 * went from 0.1 through zero to 0.005 differs by ~3e-6 through rounding alone. */
static double param_err(double a, double b, double *scale) {
    if (fabs(b) > *scale) *scale = fabs(b);
    return fabs(a - b) / fmax(*scale, 1e-30);
}

static void optimizer_parity(const char *file) {
    fixture f;
    if (fx_load(&f, file)) return;
    const double *numel = fx_get(&f, "numel", 3), *decay = fx_get(&f, "decay", 3);
    const double *init = fx_get(&f, "init", NP), *lrs = fx_get(&f, "lr", 10);
    const double *sp = fx_get(&f, "sched", 4);
    if (!numel || !decay || !init || !lrs || !sp) goto out;

    int which = (int)fx_scalar(&f, "optimizer");
    bool adamw = which == 1, lion = which == 2;
    ut_optim_config cfg = ut_optim_defaults(adamw ? UT_OPTIM_ADAMW : lion ? UT_OPTIM_LION : UT_OPTIM_SGD);
    cfg.lr = (float)sp[0];
    cfg.weight_decay = (float)fx_scalar(&f, "weight_decay");
    if (adamw || lion) {
        cfg.beta1 = (float)fx_scalar(&f, "beta1");
        cfg.beta2 = (float)fx_scalar(&f, "beta2");
        if (adamw) cfg.eps = (float)fx_scalar(&f, "eps");
    } else {
        cfg.momentum = (float)fx_scalar(&f, "momentum");
        cfg.dampening = (float)fx_scalar(&f, "dampening");
        cfg.nesterov = fx_scalar(&f, "nesterov") != 0;
    }
    char err[256] = "";
    CHECK(ut_optim_check_config(&cfg, err, sizeof err) == 0, "%s", err);
    ut_schedule sched = {UT_SCHED_COSINE, (float)sp[0], (float)sp[1], (int64_t)sp[2],
                         (int64_t)sp[3], 0, 0.0f};
    CHECK(ut_schedule_check(&sched, err, sizeof err) == 0, "%s", err);

    ut_param_seg segs[3];
    int64_t off = 0;
    for (int i = 0; i < 3; i++) {
        segs[i] = (ut_param_seg){off, (int64_t)numel[i], decay[i] != 0};
        off += segs[i].numel;
    }
    CHECK(off == NP, "numel adds up to %lld", (long long)off);
    float params[NP], grads[NP];
    for (int i = 0; i < NP; i++) params[i] = (float)init[i];
    ut_optim *o = ut_optim_new(&cfg, params, grads, segs, 3, 0, NP);

    double worst = 0.0, scale[NP];
    for (int i = 0; i < NP; i++) scale[i] = fabs(init[i]);
    for (int step = 0; step < 10; step++) {
        char name[32];
        snprintf(name, sizeof name, "grad%d", step);
        const double *g = fx_get(&f, name, NP);
        snprintf(name, sizeof name, "param%d", step);
        const double *want = fx_get(&f, name, NP);
        if (!g || !want) break;
        for (int i = 0; i < NP; i++) grads[i] = (float)g[i];
        float lr = ut_schedule_lr(&sched, step);
        CHECK(rel_err(lr, lrs[step]) <= 1e-6, "%s step %d: lr %.9g, torch %.9g", file, step,
              (double)lr, lrs[step]);
        ut_optim_step(o, lr);
        for (int i = 0; i < NP; i++) {
            double e = param_err(params[i], want[i], &scale[i]);
            if (e > worst) worst = e;
            CHECK(e <= 1e-6, "%s step %d param %d: %.9g, torch %.9g", file, step, i,
                  (double)params[i], want[i]);
        }
    }
    CHECK(ut_optim_steps(o) == 10, "steps %lld", (long long)ut_optim_steps(o));
    printf("     %s: worst relative error %.2g\n", file + strlen(FIXTURES), worst);
    ut_optim_free(o);
out:
    fx_free(&f);
}

static void test_adamw_parity(void) { optimizer_parity(FIXTURES "optim_adamw.txt"); }
static void test_sgd_nesterov_parity(void) { optimizer_parity(FIXTURES "optim_sgd_nesterov.txt"); }
static void test_sgd_momentum_parity(void) { optimizer_parity(FIXTURES "optim_sgd_momentum.txt"); }
static void test_sgd_plain_parity(void) { optimizer_parity(FIXTURES "optim_sgd.txt"); }
static void test_lion_parity(void) { optimizer_parity(FIXTURES "optim_lion.txt"); }

/* transformers' Adafactor (optim_fixtures.py make_adafactor): the shapes
 * of AF_SHAPES, the last one stored transposed and factored so (the update
 * is the same: Adafactor's factoring is symmetric). */
#define AF_NP 59
static void adafactor_parity(const char *file) {
    fixture f;
    if (fx_load(&f, file)) return;
    const double *init = fx_get(&f, "init", AF_NP), *sp = fx_get(&f, "sched", 4);
    if (!init || !sp) goto out;
    ut_optim_config cfg = ut_optim_defaults(UT_OPTIM_ADAFACTOR);
    cfg.lr = (float)sp[0];
    cfg.scale_parameter = fx_scalar(&f, "scale_parameter") != 0;
    cfg.beta1 = (float)fx_scalar(&f, "beta1");
    cfg.weight_decay = (float)fx_scalar(&f, "weight_decay");
    cfg.relative_step = fx_scalar(&f, "relative_step") != 0;
    char err[256] = "";
    CHECK(ut_optim_check_config(&cfg, err, sizeof err) == 0, "%s", err);
    ut_schedule sched = {UT_SCHED_COSINE, (float)sp[0], (float)sp[1], (int64_t)sp[2], (int64_t)sp[3], 0, 0.0f};
    /* (4, 3), (3,), (2, 3, 4), (1, 5), (3, 5) stored as (5, 3) */
    ut_param_seg segs[5] = {{0, 12, true, 4, 3}, {12, 3, false, 0, 0}, {15, 24, true, 3, 4}, {39, 5, false, 1, 5},
                            {44, 15, true, 5, 3}};
    float params[AF_NP + 2], grads[AF_NP + 2]; /* 2 of padding after the vector, never touched */
    ut_param_seg placed[5];
    for (int i = 0; i < 5; i++) placed[i] = segs[i], placed[i].offset += i >= 2 ? 2 : 0;
    for (int i = 0; i < AF_NP + 2; i++) params[i] = 7.0f;
    for (int i = 0; i < AF_NP; i++) params[i + (i >= 15 ? 2 : 0)] = (float)init[i];
    ut_optim *o = ut_optim_new(&cfg, params, grads, placed, 5, 0, AF_NP + 2);
    CHECK(ut_optim_nstate(o) == (cfg.beta1 > 0 ? 2 : 1), "%d state buffers", ut_optim_nstate(o));
    /* factored: 4+3, 3, 2 x (3+4), 1+5, 5+3 (transformers' 3 rows, 5 columns) */
    CHECK(ut_optim_state_len(o, 0) == 7 + 3 + 14 + 6 + 8, "second moment of %lld floats",
          (long long)ut_optim_state_len(o, 0));
    double worst = 0.0, scale[AF_NP];
    for (int i = 0; i < AF_NP; i++) scale[i] = fabs(init[i]);
    for (int step = 0; step < 10; step++) {
        char name[32];
        snprintf(name, sizeof name, "grad%d", step);
        const double *g = fx_get(&f, name, AF_NP);
        snprintf(name, sizeof name, "param%d", step);
        const double *want = fx_get(&f, name, AF_NP);
        if (!g || !want) break;
        for (int i = 0; i < AF_NP + 2; i++) grads[i] = 1e9f; /* padding's gradients are never read */
        for (int i = 0; i < AF_NP; i++) grads[i + (i >= 15 ? 2 : 0)] = (float)g[i];
        ut_optim_step_zero(o, ut_schedule_lr(&sched, step));
        for (int i = 0; i < AF_NP; i++) {
            double e = param_err(params[i + (i >= 15 ? 2 : 0)], want[i], &scale[i]);
            if (e > worst) worst = e;
            CHECK(e <= 2e-6, "%s step %d param %d: %.9g, transformers %.9g", file, step, i,
                  (double)params[i + (i >= 15 ? 2 : 0)], want[i]);
        }
        CHECK(params[15] == 7.0f && params[16] == 7.0f && grads[15] == 0 && grads[16] == 0,
              "padding: %g %g, gradients %g %g", params[15], params[16], grads[15], grads[16]);
    }
    printf("     %s: worst relative error %.2g\n", file + strlen(FIXTURES), worst);
    ut_optim_free(o);
out:
    fx_free(&f);
}
static void test_adafactor_hf_parity(void) { adafactor_parity(FIXTURES "optim_adafactor_hf.txt"); }
static void test_adafactor_flagai_parity(void) { adafactor_parity(FIXTURES "optim_adafactor_flagai.txt"); }
static void test_adafactor_beta1_parity(void) { adafactor_parity(FIXTURES "optim_adafactor_beta1.txt"); }
static void test_adafactor_relative_parity(void) { adafactor_parity(FIXTURES "optim_adafactor_relative.txt"); }

static void test_clip_parity(void) {
    fixture f;
    if (fx_load(&f, FIXTURES "optim_clip.txt")) return;
    float max_norm = (float)fx_scalar(&f, "max_norm");
    static const char *const cases[] = {"big", "small"};
    for (int c = 0; c < 2; c++) {
        char name[32];
        snprintf(name, sizeof name, "%s_grad", cases[c]);
        const double *g0 = fx_get(&f, name, NP);
        snprintf(name, sizeof name, "%s_norm", cases[c]);
        double want_norm = fx_scalar(&f, name);
        snprintf(name, sizeof name, "%s_clipped", cases[c]);
        const double *want = fx_get(&f, name, NP);
        if (!g0 || !want) break;
        float g[NP];
        for (int i = 0; i < NP; i++) g[i] = (float)g0[i];
        CHECK(rel_err(sqrt(ut_grad_norm_sq(UT_CPU, g, NP)), want_norm) <= 1e-6, "%s: norm_sq", cases[c]);
        float norm = ut_clip_grad_norm(UT_CPU, g, NP, max_norm);
        CHECK(rel_err(norm, want_norm) <= 1e-6, "%s: norm %.9g, torch %.9g", cases[c],
              (double)norm, want_norm);
        for (int i = 0; i < NP; i++)
            CHECK(rel_err(g[i], want[i]) <= 1e-6, "%s: grad %d %.9g, torch %.9g", cases[c], i,
                  (double)g[i], want[i]);
    }
    fx_free(&f);
}

static void test_schedule_parity(void) {
    fixture f;
    if (fx_load(&f, FIXTURES "optim_schedules.txt")) return;
    const double *p = fx_get(&f, "params", 6);
    static const char *const names[] = {"constant", "cosine", "linear", "step"};
    for (int k = 0; p && k < 4; k++) {
        const double *want = fx_get(&f, names[k], 30);
        if (!want) continue;
        ut_sched_kind kind;
        CHECK(ut_sched_parse(names[k], &kind) == 0, "parse %s", names[k]);
        /* torch's StepLR has no warmup, so the step fixture has none either. */
        ut_schedule s = {kind, (float)p[0], (float)p[1], kind == UT_SCHED_STEP ? 0 : (int64_t)p[2],
                         (int64_t)p[3], (int64_t)p[4], (float)p[5]};
        char err[256] = "";
        CHECK(ut_schedule_check(&s, err, sizeof err) == 0, "%s: %s", names[k], err);
        for (int step = 0; step < 30; step++) {
            float lr = ut_schedule_lr(&s, step);
            CHECK(rel_err(lr, want[step]) <= 1e-6, "%s step %d: %.9g, torch %.9g", names[k], step,
                  (double)lr, want[step]);
        }
    }
    fx_free(&f);
}

/* transformers' schedules (optim_fixtures.py's HF_CASES, the same list) as
 * utrain schedules: every step from the end of warmup to the run's end,
 * where transformers' warmup (which starts at 0, a step behind) is over. */
static void test_hf_schedule_parity(void) {
    fixture f;
    if (fx_load(&f, FIXTURES "optim_hf_schedules.txt")) return;
    const float lr = 1e-2f;
    const int64_t total = 40;
    const ut_schedule cases[] = {
        {.kind = UT_SCHED_COSINE, .warmup_steps = 4, .cycles = 1.5f},
        {.kind = UT_SCHED_COSINE_RESTARTS, .warmup_steps = 4, .cycles = 3},
        {.kind = UT_SCHED_COSINE, .warmup_steps = 4, .min_lr = 0.1f * lr},
        {.kind = UT_SCHED_COSINE, .min_lr = 1e-3f, .cycles = 0.75f},
        {.kind = UT_SCHED_POLYNOMIAL, .warmup_steps = 4, .power = 2, .min_lr = 1e-4f},
        {.kind = UT_SCHED_INVERSE_SQRT, .warmup_steps = 4},
        {.kind = UT_SCHED_INVERSE_SQRT, .timescale = 7},
        {.kind = UT_SCHED_WSD, .warmup_steps = 4, .decay_steps = 10, .min_lr = 0.05f * lr},
        {.kind = UT_SCHED_WSD, .warmup_steps = 4, .decay_steps = 12, .decay = UT_DECAY_LINEAR},
        {.kind = UT_SCHED_WSD, .warmup_steps = 2, .decay_steps = 9, .decay = UT_DECAY_SQRT, .min_lr = 0.1f * lr},
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        char name[16];
        snprintf(name, sizeof name, "case%d", k);
        const double *want = fx_get(&f, name, 44);
        if (!want) continue;
        ut_schedule s = cases[k];
        s.lr = lr;
        s.total_steps = total;
        char err[256] = "";
        CHECK(ut_schedule_check(&s, err, sizeof err) == 0, "%s: %s", name, err);
        for (int64_t step = s.warmup_steps; step < total; step++) {
            float got = ut_schedule_lr(&s, step);
            CHECK(fabs(got - want[step]) <= 1e-6 * lr, "%s step %lld: %.9g, transformers %.9g", name,
                  (long long)step, (double)got, want[step]);
        }
        /* warmup: utrain's is a step ahead of transformers' (never a zero first step) */
        for (int64_t step = 0; step < s.warmup_steps; step++)
            CHECK(fabs(ut_schedule_lr(&s, step) - want[step + 1]) <= 1e-6 * lr, "%s warmup step %lld", name,
                  (long long)step);
        /* ... and with warmup_zero (optim.warmup_from_zero) transformers' own, every step */
        s.warmup_zero = true;
        for (int64_t step = 0; step < total; step++)
            CHECK(fabs(ut_schedule_lr(&s, step) - want[step]) <= 1e-6 * lr, "%s from zero, step %lld: %.9g, "
                  "transformers %.9g", name, (long long)step, (double)ut_schedule_lr(&s, step), want[step]);
    }
    fx_free(&f);
}

/* DeepSpeed's schedulers (optim_fixtures.py's DS_CASES, the same list) as
 * utrain's ds_* schedules: every step, warmup included, and past the end. */
static void test_ds_schedule_parity(void) {
    fixture f;
    if (fx_load(&f, FIXTURES "optim_ds_schedules.txt")) return;
    const ut_schedule cases[] = {
        {.kind = UT_SCHED_DS_WARMUP, .lr = 1e-2f, .min_lr = 1e-4f, .warmup_steps = 6, .warmup_log = true},
        {.kind = UT_SCHED_DS_WARMUP, .lr = 1e-2f, .warmup_steps = 5},
        {.kind = UT_SCHED_DS_WARMUP_DECAY, .lr = 1e-2f, .min_lr = 1e-4f, .warmup_steps = 5, .total_steps = 20,
         .warmup_log = true},
        {.kind = UT_SCHED_DS_WARMUP_DECAY, .lr = 1e-2f, .warmup_steps = 4, .total_steps = 24},
        {.kind = UT_SCHED_DS_WARMUP_COSINE, .lr = 1e-2f, .min_lr = 0.05f * 1e-2f, .warmup_steps = 5,
         .total_steps = 20, .warmup_log = true, .warmup_min_ratio = 0.1f},
        {.kind = UT_SCHED_DS_WARMUP_COSINE, .lr = 1e-2f, .min_lr = 1e-4f * 1e-2f, .warmup_steps = 1,
         .total_steps = 20},
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        char name[16];
        snprintf(name, sizeof name, "case%d", k);
        const double *want = fx_get(&f, name, 26);
        if (!want) continue;
        char err[256] = "";
        CHECK(ut_schedule_check(&cases[k], err, sizeof err) == 0, "%s: %s", name, err);
        for (int64_t step = 0; step < 26; step++) {
            float got = ut_schedule_lr(&cases[k], step);
            CHECK(fabs(got - want[step]) <= 1e-6 * 1e-2, "%s step %lld: %.9g, DeepSpeed %.9g", name,
                  (long long)step, (double)got, want[step]);
        }
    }
    fx_free(&f);
}

/* FlagAI's AnnealingLR as its Trainer steps it (flagai_fixtures.py's CASES,
 * the same list) as utrain's annealing schedule: every optimizer step, with
 * gradient accumulation (the scheduler's index counts micro-batches). */
static void test_flagai_schedule_parity(void) {
    fixture f;
    if (fx_load(&f, FIXTURES "optim_flagai_schedules.txt")) return;
    const struct { double lr, warm_up; int64_t iters, accum; ut_decay_kind decay; } cases[] = {
        {1e-2, 0.1, 40, 1, UT_DECAY_COSINE}, {1e-2, 0.25, 48, 3, UT_DECAY_COSINE}, {3e-3, 0.01, 30, 1, UT_DECAY_COSINE},
        {1e-2, 0.5, 20, 2, UT_DECAY_LINEAR}, {1e-2, 0.1, 40, 1, UT_DECAY_LINEAR}, {2e-3, 1.0, 24, 2, UT_DECAY_COSINE}};
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        char name[16];
        snprintf(name, sizeof name, "case%d", k);
        int64_t steps = cases[k].iters / cases[k].accum;
        const double *want = fx_get(&f, name, (int)steps);
        if (!want) continue;
        ut_schedule s = {.kind = UT_SCHED_ANNEALING, .lr = (float)cases[k].lr, .min_lr = (float)(0.1 * cases[k].lr),
                         .warmup_steps = (int64_t)(cases[k].warm_up * (double)cases[k].iters),
                         .total_steps = cases[k].iters, .micro = cases[k].accum, .decay = cases[k].decay};
        char err[256] = "";
        CHECK(ut_schedule_check(&s, err, sizeof err) == 0, "%s: %s", name, err);
        for (int64_t step = 0; step < steps; step++) {
            float got = ut_schedule_lr(&s, step);
            CHECK(fabs(got - want[step]) <= 1e-6 * cases[k].lr, "%s step %lld: %.9g, FlagAI %.9g", name,
                  (long long)step, (double)got, want[step]);
        }
    }
    fx_free(&f);
}

/* The cases of a fixture of evaluation-driven rates (plateau_fixtures.py,
 * greedy_fixtures.py): the rate after each evaluation's metric, exact (both
 * sides in double), and what each step says it did. Returns the count. */
static int rate_cases(const char *path, bool greedy) {
    fixture f;
    if (fx_load(&f, path)) return 0;
    int cases = 0;
    for (int k = 0; k < 16; k++) {
        char pn[32], mn[32], ln[32];
        snprintf(pn, sizeof pn, "case%d_params", k);
        snprintf(mn, sizeof mn, "case%d_metrics", k);
        snprintf(ln, sizeof ln, "case%d_lr", k);
        bool have = false;
        for (int i = 0; i < f.n; i++) have |= !strcmp(f.a[i].name, pn);
        if (!have) break;
        const double *p = fx_get(&f, pn, greedy ? 13 : 9), *m = fx_get(&f, mn, -1), *want = fx_get(&f, ln, -1);
        if (!p || !m || !want) break;
        int n = 0;
        for (int i = 0; i < f.n; i++)
            if (!strcmp(f.a[i].name, mn)) n = f.a[i].count;
        ut_plateau pl = {.max = p[0] != 0, .abs = p[1] != 0, .factor = p[2], .patience = (int64_t)p[3],
                         .threshold = p[4], .cooldown = (int64_t)p[5], .min_lr = p[6], .eps = p[7]};
        if (greedy) {
            pl.greedy = true;
            pl.warmup = (int64_t)p[9];
            pl.max_lr = p[10];
            pl.window = (int64_t)p[11];
            pl.reset_start = (int64_t)p[12];
        }
        char err[256] = "";
        CHECK(ut_plateau_check(&pl, err, sizeof err) == 0, "%s: %s", pn, err);
        ut_plateau_state s;
        ut_plateau_init(&pl, p[8], &s);
        int resets = 0;
        for (int i = 0; i < n; i++) {
            double before = s.lr;
            int r = ut_plateau_step(&pl, &s, m[i]);
            resets += r == UT_PLATEAU_RESET;
            bool said = r == UT_PLATEAU_RESET ? s.lr == p[8]
                        : r == UT_PLATEAU_LOWERED ? s.lr < before
                        : r == UT_PLATEAU_RAISED ? s.lr > before && greedy
                                                 : s.lr == before;
            CHECK(s.lr == want[i] && said, "%s case%d evaluation %d (metric %g): lr %.17g (step said %d), want %.17g",
                  path, k, i, m[i], s.lr, r, want[i]);
        }
        CHECK(!greedy || k != 1 || resets == 1, "greedy case 1 resets once (%d)", resets);
        cases++;
    }
    fx_free(&f);
    return cases;
}

/* torch's ReduceLROnPlateau (plateau_fixtures.py), for both modes and
 * threshold modes, cooldown, the floor, eps, NaN and negative metrics. */
static void test_plateau_parity(void) {
    int cases = rate_cases(FIXTURES "optim_plateau.txt", false);
    CHECK(cases == 7, "%d cases in the fixture, want 7", cases);
    /* the rules' bounds, each named */
    const ut_plateau good = {.factor = 0.1, .patience = 10, .threshold = 1e-4, .eps = 1e-8};
    struct { ut_plateau p; const char *field; } bad[] = {
        {good, "factor"}, {good, "factor"}, {good, "patience"}, {good, "threshold"},
        {good, "cooldown"}, {good, "min_lr"}, {good, "eps"}};
    bad[0].p.factor = 1;
    bad[1].p.factor = 0;
    bad[2].p.patience = -1;
    bad[3].p.threshold = NAN;
    bad[4].p.cooldown = -2;
    bad[5].p.min_lr = INFINITY;
    bad[6].p.eps = -1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        CHECK(ut_plateau_check(&bad[i].p, err, sizeof err) == -1 && !strncmp(err, bad[i].field, strlen(bad[i].field)),
              "bad %s: %s", bad[i].field, err);
    }
}

/* transformers' GreedyLR (greedy_fixtures.py): rises after runs of
 * improvements up to max_lr, warmup and cooldown, both modes and threshold
 * modes, the smoothing window, NaN, eps, a floor above the first rate, and
 * the reset after reset_start falls at the floor. */
static void test_greedy_parity(void) {
    int cases = rate_cases(FIXTURES "optim_greedy.txt", true);
    CHECK(cases == 5, "%d cases in the fixture, want 5", cases);
    const ut_plateau good = {.factor = 0.95, .patience = 10, .threshold = 1e-6, .abs = true, .min_lr = 1e-3,
                             .eps = 1e-8, .greedy = true, .max_lr = 1, .window = 50, .reset_start = 500};
    char err[256] = "";
    CHECK(ut_plateau_check(&good, err, sizeof err) == 0, "GreedyLR's defaults: %s", err);
    struct { ut_plateau p; const char *field; } bad[] = {
        {good, "warmup"}, {good, "max_lr"}, {good, "max_lr"}, {good, "window"}, {good, "window"}, {good, "reset_start"}};
    bad[0].p.warmup = -1;
    bad[1].p.max_lr = 0;
    bad[2].p.max_lr = INFINITY;
    bad[3].p.window = -1;
    bad[4].p.window = UT_GREEDY_WINDOW_MAX + 1;
    bad[5].p.reset_start = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(ut_plateau_check(&bad[i].p, err, sizeof err) == -1 && !strncmp(err, bad[i].field, strlen(bad[i].field)),
              "bad %s: %s", bad[i].field, err);
    }
    /* the whole window: a full ring keeps the last 256 metrics (the
     * average of 0..299's last 256 is 171.5 exactly) */
    ut_plateau w = good;
    w.window = UT_GREEDY_WINDOW_MAX;
    w.patience = 1000;
    ut_plateau_state s;
    ut_plateau_init(&w, 0.01, &s);
    for (int i = 0; i < 300; i++) ut_plateau_step(&w, &s, (double)i);
    CHECK(s.win_n == UT_GREEDY_WINDOW_MAX && s.win_sum / (double)s.win_n == 171.5 && s.best == 0.0,
          "window: %lld metrics, average %g, best %g", (long long)s.win_n, s.win_sum / (double)s.win_n, s.best);
}

/* The loss scaler against DeepSpeed's DynamicLossScaler.update_scale, step
 * by step: hysteresis 2 tolerates one overflow; once used up, every overflow
 * halves until a growth restores it (or, consecutive, any clean step); the
 * floor holds; GradScaler's rule is hysteresis 1 without a floor. */
static void test_grad_scaler_hysteresis(void) {
    /* o: overflow, c: clean; the scale after each step. growth_interval 1:
     * each clean step doubles (and restores the hysteresis) */
    const char *steps = "occooccccooooccc";
    const float plain[] = {512, 1024, 2048, 1024, 512, 1024, 2048, 4096, 8192, 4096, 2048, 1024, 512, 1024, 2048, 4096};
    const float hyst[] = {1024, 2048, 4096, 4096, 2048, 4096, 8192, 16384, 32768, 32768, 16384, 8192, 4096, 8192,
                          16384, 32768};
    ut_grad_scaler a, b, f;
    ut_grad_scaler_init(&a, 1024, 1);
    ut_grad_scaler_init(&b, 1024, 1);
    ut_grad_scaler_set_hysteresis(&b, 0, 2, false);
    for (int i = 0; steps[i]; i++) {
        ut_grad_scaler_update(&a, steps[i] == 'o');
        ut_grad_scaler_update(&b, steps[i] == 'o');
        CHECK(a.scale == plain[i] && b.scale == hyst[i], "step %d (%c): %g %g, want %g %g", i, steps[i],
              (double)a.scale, (double)b.scale, (double)plain[i], (double)hyst[i]);
    }
    /* growth_interval 2: only a growth restores the hysteresis, or with
     * consecutive_hysteresis any clean step */
    const char *steps2 = "ocoococcoo";
    const float grown[] = {1024, 1024, 512, 256, 256, 128, 128, 256, 256, 128};
    const float consec[] = {1024, 1024, 1024, 512, 512, 512, 512, 1024, 1024, 512};
    ut_grad_scaler g, d;
    ut_grad_scaler_init(&g, 1024, 2);
    ut_grad_scaler_init(&d, 1024, 2);
    ut_grad_scaler_set_hysteresis(&g, 0, 2, false);
    ut_grad_scaler_set_hysteresis(&d, 0, 2, true);
    for (int i = 0; steps2[i]; i++) {
        ut_grad_scaler_update(&g, steps2[i] == 'o');
        ut_grad_scaler_update(&d, steps2[i] == 'o');
        CHECK(g.scale == grown[i] && d.scale == consec[i], "interval 2, step %d (%c): %g %g, want %g %g", i,
              steps2[i], (double)g.scale, (double)d.scale, (double)grown[i], (double)consec[i]);
    }
    /* the floor: overflows at it keep it */
    ut_grad_scaler_init(&f, 8192, 1000);
    ut_grad_scaler_set_hysteresis(&f, 2048, 1, false);
    const float fl[] = {4096, 2048, 2048, 2048};
    for (int i = 0; i < 4; i++) {
        ut_grad_scaler_update(&f, true);
        CHECK(f.scale == fl[i], "floor, overflow %d: %g, want %g", i, (double)f.scale, (double)fl[i]);
    }
}

/* ---- sharding, state, determinism ---- */

/* Segments of assorted sizes (some tiny, some above the parallel threshold)
 * with a gap of padding after every third one; returns the count. */
static int make_segs(ut_param_seg *segs, int max, int64_t n) {
    static const int64_t sizes[] = {768, 3, 40000, 17, 2304, 1, 65536, 129, 5000, 31};
    int k = 0;
    int64_t off = 0;
    while (k < max) {
        int64_t len = sizes[k % 10];
        if (off + len > n) break;
        segs[k] = (ut_param_seg){off, len, k % 2 == 0};
        off += len + (k % 3 == 2 ? 5 : 0);
        k++;
    }
    return k;
}

static void fill(float *x, int64_t n, ut_rng *r, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = scale * ut_rng_normal(r);
}

/* 0, 1 AdamW; 2, 3 SGD with momentum; 4 plain SGD; 5 Lion */
#define NCONFIGS 6
static ut_optim_config shard_config(int which) {
    ut_optim_config c;
    switch (which) {
    case 0: c = ut_optim_defaults(UT_OPTIM_ADAMW); c.lr = 1e-2f; break;
    case 1: c = ut_optim_defaults(UT_OPTIM_ADAMW); c.lr = 1e-2f; c.decay_all = true; break;
    case 2:
        c = ut_optim_defaults(UT_OPTIM_SGD);
        c.momentum = 0.9f; c.nesterov = true; c.weight_decay = 1e-2f; break;
    case 3:
        c = ut_optim_defaults(UT_OPTIM_SGD);
        c.momentum = 0.8f; c.dampening = 0.25f; c.weight_decay = 1e-2f; break;
    case 5: c = ut_optim_defaults(UT_OPTIM_LION); c.lr = 1e-3f; c.weight_decay = 0.1f; break;
    default: c = ut_optim_defaults(UT_OPTIM_SGD); c.weight_decay = 1e-2f; break;
    }
    return c;
}

static void test_shard_equals_full(void) {
    const int64_t n = 123456;
    ut_param_seg segs[64];
    int nsegs = make_segs(segs, 64, n);
    int64_t end = segs[nsegs - 1].offset + segs[nsegs - 1].numel;
    /* Rank boundaries that cut through segments, and an empty shard. */
    const int64_t bounds[] = {0, 777, 40001, 40001, 90000, end};
    const int nshards = 5;
    float *pf = malloc(sizeof(float) * n), *ps = malloc(sizeof(float) * n);
    float *g = malloc(sizeof(float) * n);
    for (int which = 0; which < NCONFIGS; which++) {
        ut_optim_config cfg = shard_config(which);
        ut_rng r;
        ut_rng_seed(&r, 7);
        fill(pf, n, &r, 1.0f);
        memcpy(ps, pf, sizeof(float) * n);
        ut_optim *full = ut_optim_new(&cfg, pf, g, segs, nsegs, 0, end);
        ut_optim *shard[5];
        for (int s = 0; s < nshards; s++)
            shard[s] = ut_optim_new(&cfg, ps, g, segs, nsegs, bounds[s], bounds[s + 1]);
        for (int step = 0; step < 4; step++) {
            fill(g, n, &r, 0.1f);
            float lr = 1e-2f * (float)(step + 1);
            ut_optim_step(full, lr);
            for (int s = 0; s < nshards; s++) ut_optim_step(shard[s], lr);
        }
        CHECK(!memcmp(pf, ps, sizeof(float) * n), "config %d: sharded params differ from full",
              which);
        for (int s = 0; s < nshards; s++) {
            CHECK(ut_optim_nstate(shard[s]) == ut_optim_nstate(full), "config %d", which);
            int64_t lo = bounds[s], len = bounds[s + 1] - lo;
            for (int i = 0; i < ut_optim_nstate(full); i++)
                CHECK(!memcmp(ut_optim_state(shard[s], i, NULL), ut_optim_state(full, i, NULL) + lo,
                              sizeof(float) * (size_t)len),
                      "config %d shard %d: state %d differs from the full one's slice", which, s, i);
            ut_optim_free(shard[s]);
        }
        /* Padding between segments is never touched. */
        ut_rng_seed(&r, 7);
        fill(ps, n, &r, 1.0f);
        for (int k = 0; k + 1 < nsegs; k++)
            for (int64_t i = segs[k].offset + segs[k].numel; i < segs[k + 1].offset; i++)
                CHECK(pf[i] == ps[i], "config %d: padding at %lld changed", which, (long long)i);
        ut_optim_free(full);
    }
    free(pf);
    free(ps);
    free(g);
}

/* Two optimizers a and b of cfg over [lo, hi), pa and pb the same random
 * parameters (r seeded with seed, left to draw the gradients). */
static void twins(const ut_optim_config *cfg, float *pa, float *pb, float *ga, float *gb, int64_t n,
                  const ut_param_seg *segs, int nsegs, int64_t lo, int64_t hi, uint64_t seed, ut_rng *r,
                  ut_optim **a, ut_optim **b) {
    ut_rng_seed(r, seed);
    fill(pa, n, r, 1.0f);
    memcpy(pb, pa, sizeof(float) * n);
    *a = ut_optim_new(cfg, pa, ga, segs, nsegs, lo, hi);
    *b = ut_optim_new(cfg, pb, gb, segs, nsegs, lo, hi);
}

/* ut_optim_step_zero == ut_optim_step followed by zeroing grads[lo, hi): same
 * parameters and state bit for bit, grads zero in [lo, hi) (padding included)
 * and untouched outside it, for every config and at 1 and 3 threads. */
static void test_step_zero_equals_step_then_memset(void) {
    const int64_t n = 123456;
    ut_param_seg segs[64];
    int nsegs = make_segs(segs, 64, n);
    const int64_t lo = 777, hi = 90001; /* cuts through segments and padding */
    float *pa = malloc(sizeof(float) * n), *pb = malloc(sizeof(float) * n);
    float *ga = malloc(sizeof(float) * n), *gb = malloc(sizeof(float) * n);
    int saved = omp_get_max_threads();
    for (int which = 0; which < NCONFIGS; which++) {
        for (int threads = 1; threads <= 3; threads += 2) {
            omp_set_num_threads(threads);
            ut_optim_config cfg = shard_config(which);
            ut_rng r;
            ut_optim *a, *b;
            twins(&cfg, pa, pb, ga, gb, n, segs, nsegs, lo, hi, 5, &r, &a, &b);
            for (int step = 0; step < 3; step++) {
                fill(ga, n, &r, 0.1f);
                memcpy(gb, ga, sizeof(float) * n);
                ut_optim_step(a, 1e-2f);
                memset(ga + lo, 0, sizeof(float) * (size_t)(hi - lo));
                ut_optim_step_zero(b, 1e-2f);
                CHECK(!memcmp(pa, pb, sizeof(float) * n), "config %d threads %d step %d: params",
                      which, threads, step);
                CHECK(!memcmp(ga, gb, sizeof(float) * n), "config %d threads %d step %d: grads",
                      which, threads, step);
            }
            for (int i = 0; i < ut_optim_nstate(a); i++)
                CHECK(!memcmp(ut_optim_state(a, i, NULL), ut_optim_state(b, i, NULL),
                              sizeof(float) * (size_t)(hi - lo)),
                      "config %d threads %d: state %d", which, threads, i);
            ut_optim_free(a);
            ut_optim_free(b);
        }
    }
    omp_set_num_threads(saved);
    free(pa);
    free(pb);
    free(ga);
    free(gb);
}

/* ut_optim_step_zero_pieces: what one piece's callback sees. */
typedef struct {
    const float *p, *want, *before; /* the stepped params; the whole step's; the params before the step */
    int64_t lo, hi, next, piece, n;
    bool aligned, ok;
    int count;
} pieces_seen;

static void piece_seen(void *arg, int64_t a, int64_t b) {
    pieces_seen *s = arg;
    s->count++;
    bool ok = a == s->next && a < b && b <= s->hi;
    if (s->aligned) ok = ok && b - a <= s->piece + 15 && (b == s->hi || b % 16 == 0);
    /* done: [lo, b) updated as the whole step updates it; not begun: [b, hi) as before */
    ok = ok && !memcmp(s->p + s->lo, s->want + s->lo, sizeof(float) * (size_t)(b - s->lo)) &&
         !memcmp(s->p + b, s->before + b, sizeof(float) * (size_t)(s->hi - b));
    CHECK(ok, "piece %d [%lld, %lld) after %lld of [%lld, %lld)", s->count, (long long)a, (long long)b,
          (long long)s->next, (long long)s->lo, (long long)s->hi);
    s->ok = s->ok && ok;
    s->next = b;
}

/* ut_optim_step_zero_pieces == ut_optim_step_zero, bit for bit (parameters,
 * 16-bit copies, state, gradients zeroed in [lo, hi) only), for every config
 * and Adafactor, at piece sizes from small to one piece; the pieces come in
 * order, cover [lo, hi) and each is done before its callback (and the rest
 * not begun). */
static void test_step_pieces(void) {
    const int64_t n = 123456;
    ut_param_seg segs[64];
    int nsegs = make_segs(segs, 64, n);
    /* Adafactor's parameters: matrices, vectors and a stack of matrices */
    ut_param_seg af[5] = {{0, 3000, true, 60, 50}, {3000, 17, false, 0, 0}, {3020, 40000, true, 200, 200},
                          {43020, 2 * 30 * 40, true, 30, 40}, {45420, 9000, false, 0, 0}};
    float *pa = malloc(sizeof(float) * n), *pb = malloc(sizeof(float) * n), *p0 = malloc(sizeof(float) * n);
    float *ga = malloc(sizeof(float) * n), *gb = malloc(sizeof(float) * n);
    uint16_t *ca = malloc(2 * n), *cb = malloc(2 * n);
    static const int64_t sizes[] = {1000, 7777, 1 << 30};
    for (int which = 0; which <= NCONFIGS; which++) {
        bool ada = which == NCONFIGS;
        ut_optim_config cfg = ada ? ut_optim_defaults(UT_OPTIM_ADAFACTOR) : shard_config(which);
        if (ada) cfg.beta1 = 0.9f, cfg.weight_decay = 0.01f;
        const ut_param_seg *sg = ada ? af : segs;
        int ns = ada ? 5 : nsegs;
        /* Adafactor's shard holds whole parameters */
        int64_t lo = ada ? 3000 : 777, hi = ada ? 54420 : 90001;
        for (int z = 0; z < 3; z++) {
            ut_rng r;
            ut_optim *a, *b;
            twins(&cfg, pa, pb, ga, gb, n, sg, ns, lo, hi, 11, &r, &a, &b);
            ut_optim_set_copies16(a, ca, UT_BF16);
            ut_optim_set_copies16(b, cb, UT_BF16);
            memset(ca, 0, 2 * n), memset(cb, 0, 2 * n);
            int counts = 0;
            for (int step = 0; step < 3; step++) {
                fill(ga, n, &r, 0.1f);
                memcpy(gb, ga, sizeof(float) * n);
                memcpy(p0, pb, sizeof(float) * n);
                ut_optim_step_zero(a, 1e-2f);
                pieces_seen seen = {.p = pb, .want = pa, .before = p0, .lo = lo, .hi = hi, .next = lo,
                                    .piece = sizes[z], .n = n, .aligned = !ada, .ok = true};
                ut_optim_step_zero_pieces(b, 1e-2f, sizes[z], piece_seen, &seen);
                CHECK(seen.next == hi, "config %d pieces of %lld: covered [%lld, %lld) of [%lld, %lld)", which,
                      (long long)sizes[z], (long long)lo, (long long)seen.next, (long long)lo, (long long)hi);
                CHECK(!memcmp(pa, pb, sizeof(float) * n) && !memcmp(ga, gb, sizeof(float) * n) &&
                          !memcmp(ca, cb, 2 * n),
                      "config %d pieces of %lld step %d: params, gradients or copies differ", which,
                      (long long)sizes[z], step);
                counts = seen.count;
            }
            /* small pieces are many; the largest is one */
            CHECK(z == 2 ? counts == 1 : counts > 2, "config %d pieces of %lld: %d pieces", which,
                  (long long)sizes[z], counts);
            for (int i = 0; i < ut_optim_nstate(a); i++)
                CHECK(!memcmp(ut_optim_state(a, i, NULL), ut_optim_state(b, i, NULL),
                              sizeof(float) * (size_t)ut_optim_state_len(a, i)),
                      "config %d pieces of %lld: state %d", which, (long long)sizes[z], i);
            CHECK(ut_optim_steps(a) == ut_optim_steps(b), "config %d: steps", which);
            ut_optim_free(a);
            ut_optim_free(b);
        }
    }
    free(pa), free(pb), free(p0), free(ga), free(gb), free(ca), free(cb);
}

/* Bits must not depend on the thread count. */
static void test_thread_count_invariance(void) {
    const int64_t n = test_quick() ? 300000 : 3000017;
    ut_param_seg seg = {0, n, true};
    float *p1 = malloc(sizeof(float) * n), *p2 = malloc(sizeof(float) * n);
    float *g = malloc(sizeof(float) * n);
    ut_rng r;
    ut_rng_seed(&r, 11);
    fill(p1, n, &r, 1.0f);
    memcpy(p2, p1, sizeof(float) * n);
    fill(g, n, &r, 1.0f);
    int saved = omp_get_max_threads();
    ut_optim_config cfg = ut_optim_defaults(UT_OPTIM_ADAMW);
    ut_optim *a = ut_optim_new(&cfg, p1, g, &seg, 1, 0, n);
    ut_optim *b = ut_optim_new(&cfg, p2, g, &seg, 1, 0, n);
    omp_set_num_threads(1);
    ut_optim_step(a, 1e-3f);
    double s1 = ut_grad_norm_sq(UT_CPU, g, n);
    omp_set_num_threads(3);
    ut_optim_step(b, 1e-3f);
    double s3 = ut_grad_norm_sq(UT_CPU, g, n);
    omp_set_num_threads(saved);
    double sd = ut_grad_norm_sq(UT_CPU, g, n);
    CHECK(!memcmp(p1, p2, sizeof(float) * n), "AdamW step differs between 1 and 3 threads");
    CHECK(s1 == s3 && s1 == sd, "norm_sq %.17g / %.17g / %.17g for 1 / 3 / %d threads", s1, s3,
          sd, saved);
    double naive = 0.0;
    for (int64_t i = 0; i < n; i++) naive += (double)g[i] * g[i];
    CHECK(rel_err(s1, naive) <= 1e-12, "norm_sq %.17g, naive %.17g", s1, naive);
    ut_optim_free(a);
    ut_optim_free(b);
    free(p1);
    free(p2);
    free(g);
}

/* Adafactor over big parameters (a 3-d tensor of 3 x 700 x 50, a vector of
 * 100003, a 1 x 40000 matrix): the same bits on 1 and 3 threads; its state
 * saved with the step count and loaded into a fresh optimizer continues
 * exactly; steps allocate nothing; a range that cuts a parameter is refused
 * (the abort is not tested: ut_optim_new's callers keep whole parameters). */
static void test_adafactor_threads_and_resume(void) {
    ut_param_seg segs[3] = {{0, 105000, true, 700, 50}, {105000, 100003, false, 0, 0},
                            {205003, 40000, true, 1, 40000}};
    const int64_t n = 245003;
    float *p1 = malloc(sizeof(float) * n), *p2 = malloc(sizeof(float) * n), *p3 = malloc(sizeof(float) * n);
    float *g = malloc(sizeof(float) * n), *g0 = malloc(sizeof(float) * n * 4);
    ut_rng r;
    ut_rng_seed(&r, 17);
    fill(p1, n, &r, 1.0f);
    memcpy(p2, p1, sizeof(float) * n);
    memcpy(p3, p1, sizeof(float) * n);
    fill(g0, n * 4, &r, 0.1f);
    ut_optim_config cfg = ut_optim_defaults(UT_OPTIM_ADAFACTOR);
    cfg.beta1 = 0.9f, cfg.weight_decay = 0.01f;
    ut_optim *a = ut_optim_new(&cfg, p1, g, segs, 3, 0, n), *b = ut_optim_new(&cfg, p2, g, segs, 3, 0, n);
    CHECK(ut_optim_state_len(a, 0) == 3 * 750 + 100003 + 40001 && ut_optim_state_len(a, 1) == n,
          "state of %lld and %lld floats", (long long)ut_optim_state_len(a, 0), (long long)ut_optim_state_len(a, 1));
    int saved = omp_get_max_threads();
    for (int step = 0; step < 2; step++) {
        memcpy(g, g0 + step * n, sizeof(float) * n);
        omp_set_num_threads(1);
        ut_optim_step(a, 1e-2f);
        omp_set_num_threads(3);
        ut_optim_step(b, 1e-2f);
    }
    omp_set_num_threads(saved);
    CHECK(!memcmp(p1, p2, sizeof(float) * n), "Adafactor's step differs between 1 and 3 threads");
    /* resume b's state into c, then two more steps on both */
    ut_optim *c = ut_optim_new(&cfg, p3, g, segs, 3, 0, n);
    memcpy(p3, p2, sizeof(float) * n);
    for (int i = 0; i < ut_optim_nstate(b); i++)
        memcpy(ut_optim_state(c, i, NULL), ut_optim_state(b, i, NULL), sizeof(float) * (size_t)ut_optim_state_len(b, i));
    ut_optim_set_steps(c, ut_optim_steps(b));
    uint64_t allocs = ut_alloc_count();
    for (int step = 2; step < 4; step++) {
        memcpy(g, g0 + step * n, sizeof(float) * n);
        ut_optim_step(b, 1e-2f);
        memcpy(g, g0 + step * n, sizeof(float) * n);
        ut_optim_step(c, 1e-2f);
    }
    CHECK(ut_alloc_count() == allocs, "Adafactor's steps allocated");
    CHECK(!memcmp(p2, p3, sizeof(float) * n), "resumed Adafactor differs");
    const char *name;
    ut_optim_state(c, 0, &name);
    CHECK(!strcmp(name, "exp_avg_sq_factored"), "state 0 is %s", name);
    ut_optim_free(a);
    ut_optim_free(b);
    ut_optim_free(c);
    free(p1), free(p2), free(p3), free(g), free(g0);
}

/* warmup_init's relative step (transformers' T5 recipe): min(1e-6 t,
 * 1/sqrt(t)), whatever lr the step is given. A vector's first update is
 * g/sqrt(g^2 + eps1), of RMS 1: the weights move by the rate times it. */
static void test_adafactor_warmup_init(void) {
    float p[4] = {1, -2, 3, -4}, g[4] = {0.5f, -0.25f, 2, -1};
    ut_param_seg seg = {0, 4, false, 0, 0};
    ut_optim_config cfg = ut_optim_defaults(UT_OPTIM_ADAFACTOR);
    cfg.scale_parameter = false, cfg.relative_step = cfg.warmup_init = true;
    ut_optim *o = ut_optim_new(&cfg, p, g, &seg, 1, 0, 4);
    for (int t = 1; t <= 3; t++) {
        float before[4];
        memcpy(before, p, sizeof p);
        ut_optim_step(o, 123.0f); /* not used */
        for (int i = 0; i < 4; i++) {
            double u = g[i] > 0 ? 1 : -1; /* g^2 + eps1 is g^2 in float: the update is the sign */
            double want = before[i] - 1e-6 * t * u;
            CHECK(fabs(p[i] - want) <= 1e-7 * fabs(want), "step %d element %d: %.9g, want %.9g", t, i, (double)p[i], want);
        }
    }
    ut_optim_free(o);
}

static void test_state_only_for_shard(void) {
    const int64_t n = 1000, lo = 300, hi = 550;
    float p[1000] = {0}, g[1000] = {0};
    ut_param_seg seg = {0, n, true};
    static const struct { int which, nstate; const char *names[2]; } cases[] = {
        {0, 2, {"exp_avg", "exp_avg_sq"}},
        {2, 1, {"momentum_buffer", NULL}},
        {4, 0, {NULL, NULL}},
        {5, 1, {"exp_avg", NULL}},
    };
    for (int c = 0; c < 4; c++) {
        ut_optim_config cfg = shard_config(cases[c].which);
        ut_optim *o = ut_optim_new(&cfg, p, g, &seg, 1, lo, hi);
        CHECK(ut_optim_nstate(o) == cases[c].nstate, "case %d: nstate %d", c, ut_optim_nstate(o));
        CHECK(ut_optim_state_bytes(o) == (size_t)cases[c].nstate * (hi - lo) * sizeof(float),
              "case %d: %zu state bytes", c, ut_optim_state_bytes(o));
        for (int i = 0; i < ut_optim_nstate(o); i++) {
            const char *name = NULL;
            float *s = ut_optim_state(o, i, &name);
            CHECK(name && !strcmp(name, cases[c].names[i]), "case %d state %d is %s", c, i,
                  name ? name : "(null)");
            CHECK((uintptr_t)s % 64 == 0, "case %d state %d not 64-byte aligned", c, i);
            int zero = 1;
            for (int64_t k = 0; k < hi - lo; k++) zero &= s[k] == 0.0f;
            CHECK(zero, "case %d state %d not zeroed", c, i);
        }
        ut_optim_free(o);
    }
    ut_optim_config cfg = shard_config(0);
    ut_optim *empty = ut_optim_new(&cfg, p, g, &seg, 1, 400, 400);
    CHECK(ut_optim_state_bytes(empty) == 0, "empty shard has state");
    ut_optim_step(empty, 1e-3f);
    ut_optim_free(empty);
}

/* Saving state + step count and loading them into a fresh optimizer continues
 * exactly; steps allocate nothing. */
static void test_resume_and_no_alloc(void) {
    const int64_t n = 50000;
    ut_param_seg segs[2] = {{0, 20000, true}, {20000, 30000, false}};
    float *pa = malloc(sizeof(float) * n), *pb = malloc(sizeof(float) * n);
    float *g = malloc(sizeof(float) * n * 6);
    ut_rng r;
    ut_rng_seed(&r, 3);
    fill(pa, n, &r, 1.0f);
    memcpy(pb, pa, sizeof(float) * n);
    fill(g, n * 6, &r, 0.1f);
    for (int which = 0; which < NCONFIGS; which += which == 4 ? 1 : 2) {
        ut_optim_config cfg = shard_config(which);
        ut_optim *a = ut_optim_new(&cfg, pa, g, segs, 2, 0, n);
        ut_optim *b = ut_optim_new(&cfg, pb, g, segs, 2, 0, n);
        uint64_t allocs = ut_alloc_count();
        for (int step = 0; step < 3; step++) {
            memcpy(g, g + (step + 1) * n, sizeof(float) * n);
            ut_optim_step(a, 1e-3f);
            ut_optim_step(b, 1e-3f);
        }
        ut_clip_grad_norm(UT_CPU, g, n, 0.5f);
        CHECK(ut_alloc_count() == allocs, "config %d: steps allocated %llu times", which,
              (unsigned long long)(ut_alloc_count() - allocs));
        ut_optim *c = ut_optim_new(&cfg, pb, g, segs, 2, 0, n);
        for (int i = 0; i < ut_optim_nstate(b); i++)
            memcpy(ut_optim_state(c, i, NULL), ut_optim_state(b, i, NULL), sizeof(float) * n);
        ut_optim_set_steps(c, ut_optim_steps(b));
        ut_optim_free(b);
        for (int step = 3; step < 5; step++) {
            memcpy(g, g + (step + 1) * n, sizeof(float) * n);
            ut_optim_step(a, 1e-3f);
            ut_optim_step(c, 1e-3f);
        }
        CHECK(ut_optim_steps(c) == 5, "steps %lld", (long long)ut_optim_steps(c));
        CHECK(!memcmp(pa, pb, sizeof(float) * n), "config %d: resumed run differs", which);
        ut_optim_free(a);
        ut_optim_free(c);
    }
    free(pa);
    free(pb);
    free(g);
}

/* ---- checks and parsing ---- */

static void expect_bad_config(ut_optim_config c, const char *field) {
    char err[256] = "";
    CHECK(ut_optim_check_config(&c, err, sizeof err) == -1, "accepted bad %s", field);
    CHECK(strstr(err, field) != NULL, "message '%s' does not name %s", err, field);
}

static void test_config_checks(void) {
    ut_optim_config a = ut_optim_defaults(UT_OPTIM_ADAMW);
    CHECK(a.beta1 == 0.9f && a.beta2 == 0.999f && a.eps == 1e-8f && a.weight_decay == 0.01f,
          "AdamW defaults");
    ut_optim_config s = ut_optim_defaults(UT_OPTIM_SGD);
    char err[256] = "";
    CHECK(s.momentum == 0 && s.weight_decay == 0 && !s.nesterov, "SGD defaults");
    ut_optim_config l = ut_optim_defaults(UT_OPTIM_LION);
    CHECK(l.lr == 1e-4f && l.beta1 == 0.9f && l.beta2 == 0.99f && l.weight_decay == 0, "Lion defaults");
    CHECK(ut_optim_check_config(&l, err, sizeof err) == 0, "Lion defaults rejected: %s", err);
    ut_optim_config af = ut_optim_defaults(UT_OPTIM_ADAFACTOR);
    CHECK(af.eps == 1e-30f && af.eps2 == 1e-3f && af.clip_threshold == 1 && af.decay_rate == -0.8f && af.beta1 == 0 &&
              af.weight_decay == 0 && af.scale_parameter,
          "Adafactor defaults");
    CHECK(ut_optim_check_config(&af, err, sizeof err) == 0, "Adafactor defaults rejected: %s", err);
    CHECK(ut_optim_check_config(&a, err, sizeof err) == 0, "AdamW defaults rejected: %s", err);
    CHECK(ut_optim_check_config(&s, err, sizeof err) == 0, "SGD defaults rejected: %s", err);

    ut_optim_config c;
    c = a; c.lr = -1e-3f; expect_bad_config(c, "lr");
    c = a; c.lr = NAN; expect_bad_config(c, "lr");
    c = a; c.weight_decay = -0.1f; expect_bad_config(c, "weight_decay");
    c = a; c.beta1 = 1.0f; expect_bad_config(c, "beta1");
    c = a; c.beta1 = -0.1f; expect_bad_config(c, "beta1");
    c = a; c.beta2 = 1.5f; expect_bad_config(c, "beta2");
    c = a; c.eps = 0.0f; expect_bad_config(c, "eps");
    c = s; c.momentum = -0.5f; expect_bad_config(c, "momentum");
    c = l; c.beta1 = 1.0f; expect_bad_config(c, "beta1");
    c = l; c.beta2 = NAN; expect_bad_config(c, "beta2");
    c = l; c.eps = 0.0f; /* Lion has no eps */
    CHECK(ut_optim_check_config(&c, err, sizeof err) == 0, "Lion rejected for eps: %s", err);
    c = af; c.decay_rate = 0.5f; expect_bad_config(c, "decay_rate");
    c = af; c.clip_threshold = 0; expect_bad_config(c, "clip_threshold");
    c = af; c.eps2 = -1; expect_bad_config(c, "eps2");
    c = af; c.beta1 = 1; expect_bad_config(c, "beta1");
    c = s; c.nesterov = true; expect_bad_config(c, "nesterov");
    c = s; c.nesterov = true; c.momentum = 0.9f; c.dampening = 0.1f;
    expect_bad_config(c, "nesterov");
    c = s; c.kind = (ut_optim_kind)7; expect_bad_config(c, "kind");
    c = s; c.nesterov = true; c.momentum = 0.9f;
    CHECK(ut_optim_check_config(&c, err, sizeof err) == 0, "valid nesterov rejected: %s", err);

    ut_optim_kind k;
    CHECK(ut_optim_parse("adamw", &k) == 0 && k == UT_OPTIM_ADAMW, "parse adamw");
    CHECK(ut_optim_parse("SGD", &k) == 0 && k == UT_OPTIM_SGD, "parse SGD");
    CHECK(ut_optim_parse("Lion", &k) == 0 && k == UT_OPTIM_LION, "parse Lion");
    CHECK(ut_optim_parse("adafactor", &k) == 0 && k == UT_OPTIM_ADAFACTOR, "parse adafactor");
    CHECK(ut_optim_parse("adam", &k) == -1, "parse adam accepted");
}

static void expect_bad_schedule(ut_schedule s, const char *field) {
    char err[256] = "";
    CHECK(ut_schedule_check(&s, err, sizeof err) == -1, "accepted bad %s", field);
    CHECK(strstr(err, field) != NULL, "message '%s' does not name %s", err, field);
}

static void test_schedule_checks(void) {
    ut_schedule good = {UT_SCHED_COSINE, 6e-4f, 6e-5f, 100, 1000, 0, 0.0f};
    char err[256] = "";
    CHECK(ut_schedule_check(&good, err, sizeof err) == 0, "%s", err);
    CHECK(ut_schedule_lr(&good, 0) > 0, "zero-lr first warmup step");
    CHECK(ut_schedule_lr(&good, 99) == 6e-4f, "end of warmup %.9g", (double)ut_schedule_lr(&good, 99));
    CHECK(ut_schedule_lr(&good, 5000) == 6e-5f, "past total_steps %.9g",
          (double)ut_schedule_lr(&good, 5000));
    ut_schedule s;
    s = good; s.lr = -1.0f; expect_bad_schedule(s, "lr");
    s = good; s.min_lr = -1e-5f; expect_bad_schedule(s, "min_lr");
    s = good; s.min_lr = 1e-3f; expect_bad_schedule(s, "min_lr");
    s = good; s.warmup_steps = -1; expect_bad_schedule(s, "warmup_steps");
    /* annealing: warmup at most the iterations, at least one iteration; micro >= 0 */
    s = good; s.kind = UT_SCHED_ANNEALING; s.warmup_steps = 1001; expect_bad_schedule(s, "annealing: warmup_steps");
    s = good; s.kind = UT_SCHED_ANNEALING; s.warmup_steps = 0; s.total_steps = 0;
    expect_bad_schedule(s, "annealing: warmup_steps");
    s = good; s.kind = UT_SCHED_ANNEALING; s.decay = UT_DECAY_SQRT; expect_bad_schedule(s, "annealing: decay");
    s = good; s.micro = -1; expect_bad_schedule(s, "micro");
    s = good; s.total_steps = 100; expect_bad_schedule(s, "total_steps");
    s = good; s.kind = UT_SCHED_LINEAR; s.total_steps = 50; expect_bad_schedule(s, "total_steps");
    s = good; s.kind = UT_SCHED_CONSTANT; s.total_steps = -1; expect_bad_schedule(s, "total_steps");
    s = good; s.kind = UT_SCHED_STEP; s.gamma = 0.5f; expect_bad_schedule(s, "step_size");
    s = good; s.kind = UT_SCHED_STEP; s.step_size = 10; s.gamma = -0.5f;
    expect_bad_schedule(s, "gamma");
    s = good; s.kind = UT_SCHED_CONSTANT; s.total_steps = 0;
    CHECK(ut_schedule_check(&s, err, sizeof err) == 0, "constant without total rejected: %s", err);
    s = good; s.cycles = -1; expect_bad_schedule(s, "cycles");
    s = good; s.kind = UT_SCHED_POLYNOMIAL; s.power = NAN; expect_bad_schedule(s, "power");
    s = good; s.kind = UT_SCHED_INVERSE_SQRT; s.timescale = -3; expect_bad_schedule(s, "timescale");
    s = good; s.kind = UT_SCHED_POLYNOMIAL; s.total_steps = 100; expect_bad_schedule(s, "total_steps");
    s = good; s.kind = UT_SCHED_WSD; expect_bad_schedule(s, "decay_steps");
    s = good; s.kind = UT_SCHED_WSD; s.decay_steps = 901; expect_bad_schedule(s, "decay_steps");
    s = good; s.kind = UT_SCHED_WSD; s.decay_steps = 900;
    CHECK(ut_schedule_check(&s, err, sizeof err) == 0, "wsd decaying after warmup rejected: %s", err);
    CHECK(ut_schedule_lr(&s, 1000) == 6e-5f && ut_schedule_lr(&s, 100) == 6e-4f, "wsd ends");
    s = good; s.kind = UT_SCHED_INVERSE_SQRT; s.total_steps = 0; /* no end to reach */
    CHECK(ut_schedule_check(&s, err, sizeof err) == 0, "inverse_sqrt without total rejected: %s", err);
    CHECK(fabsf(ut_schedule_lr(&s, 100 + 300) - 6e-4f * 0.5f) < 1e-9f, "inverse_sqrt: half at 4x its timescale");

    static const char *const names[] = {"constant",        "cosine",     "linear",       "step",
                                        "cosine_restarts", "polynomial", "inverse_sqrt", "wsd",
                                        "ds_warmup",       "ds_warmup_decay", "ds_warmup_cosine"};
    ut_sched_kind k;
    for (int i = 0; i < 11; i++)
        CHECK(ut_sched_parse(names[i], &k) == 0 && k == (ut_sched_kind)i, "parse %s", names[i]);
    CHECK(ut_sched_parse("Cosine", &k) == 0 && k == UT_SCHED_COSINE, "parse Cosine");
    CHECK(ut_sched_parse("exp", &k) == -1, "parse exp accepted");
}

int main(void) {
    RUN(test_adamw_parity);
    RUN(test_sgd_nesterov_parity);
    RUN(test_sgd_momentum_parity);
    RUN(test_sgd_plain_parity);
    RUN(test_lion_parity);
    RUN(test_adafactor_hf_parity);
    RUN(test_adafactor_flagai_parity);
    RUN(test_adafactor_beta1_parity);
    RUN(test_adafactor_relative_parity);
    RUN(test_clip_parity);
    RUN(test_schedule_parity);
    RUN(test_hf_schedule_parity);
    RUN(test_ds_schedule_parity);
    RUN(test_flagai_schedule_parity);
    RUN(test_plateau_parity);
    RUN(test_greedy_parity);
    RUN(test_grad_scaler_hysteresis);
    RUN(test_shard_equals_full);
    RUN(test_step_zero_equals_step_then_memset);
    RUN(test_step_pieces);
    RUN(test_thread_count_invariance);
    RUN(test_adafactor_threads_and_resume);
    RUN(test_adafactor_warmup_init);
    RUN(test_state_only_for_shard);
    RUN(test_resume_and_no_alloc);
    RUN(test_config_checks);
    RUN(test_schedule_checks);
    return TEST_SUMMARY();
}
