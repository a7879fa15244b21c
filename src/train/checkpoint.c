/* Checkpoint files: safetensors with the model's parameters ("model.<name>"),
 * the optimizer's state buffers ("optim.<state name>", flat) and the training
 * state as string metadata, sealed by a CRC-32 (docs/checkpoints.md gives the
 * exact rule, so other tools can verify it). Loading checks everything before
 * it copies anything, so a bad file never leaves a half-loaded model. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "utrain/base.h"
#include "utrain/io.h"
#include "utrain/train.h"
#include "../backend/backend.h"

#define CKPT_FORMAT "utrain-checkpoint-1"
#define CKPT_PREFIX "step_"
#define CKPT_SUFFIX ".safetensors"

/* Every metadata key utrain writes except the checksum, in the order they
 * are written. The checksum covers those present in the file (the optim.*
 * keys only exist when an optimizer was saved); a corrupted key name makes
 * its entry disappear from the sum, so it is still detected. */
enum {
    K_FORMAT, K_MODEL_TYPE, K_STEP, K_EPOCH, K_CURSOR, K_RNG, K_BEST_METRIC, K_BEST_STEP,
    K_BAD_EVALS, K_CONFIG_HASH, K_OPTIM_STEPS, K_OPTIM_STATE, K_AMP_SCALE, K_AMP_TRACKER, K_COUNT
};
static const char *const meta_keys[K_COUNT] = {
    "utrain.format", "model.type", "train.step", "train.epoch", "train.cursor", "train.rng",
    "train.best_metric", "train.best_step", "train.bad_evals", "train.config_hash", "optim.steps",
    "optim.state", "amp.scale", "amp.growth_tracker",
};
#define CHECKSUM_KEY "utrain.checksum"
#define MAX_STATE 4   /* optimizer state buffers (AdamW has 2) */

/* ---------------------------------------------------------------- checksum */

static uLong crc_bytes(uLong crc, const void *p, size_t n) {
    const Bytef *b = p;
    while (n) {   /* zlib's crc32 takes a uInt length */
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, b, k);
        b += k;
        n -= k;
    }
    return crc;
}

/* A string and its terminating NUL (names and values never contain NUL). */
static uLong crc_str(uLong crc, const char *s) { return crc_bytes(crc, s, strlen(s) + 1); }

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One tensor: "name\0DTYPE\0d0,d1,...\0" then its bytes. */
static uLong crc_tensor(uLong crc, const char *name, const ut_st_tensor t) {
    char dims[UT_ST_MAX_DIMS * 21 + 1] = "";
    size_t at = 0;
    for (int d = 0; d < t.ndim; d++)
        at += (size_t)snprintf(dims + at, sizeof dims - at, "%s%" PRId64, d ? "," : "", t.shape[d]);
    crc = crc_str(crc_str(crc_str(crc, name), ut_st_dtype_name(t.dtype)), dims);
    return t.nbytes ? crc_bytes(crc, t.data, t.nbytes) : crc;
}

/* The checkpoint checksum: metadata entries sorted by key ("key\0value\0"),
 * then tensors sorted by name. meta_kv is key, value, ..., NULL without the
 * checksum entry. get returns the tensor called name. */
typedef const ut_st_tensor *(*tensor_fn)(const void *src, const char *name);

static uint32_t checksum(const char **meta_kv, const char **names, int nt, tensor_fn get,
                         const void *src) {
    int nm = 0;
    while (meta_kv[2 * nm]) nm++;
    const char *keys[K_COUNT];
    UT_ASSERT(nm <= K_COUNT);
    for (int i = 0; i < nm; i++) keys[i] = meta_kv[2 * i];
    qsort(keys, (size_t)nm, sizeof *keys, cmp_str);
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int i = 0; i < nm; i++) {
        int j = 0;
        while (strcmp(meta_kv[2 * j], keys[i])) j++;
        crc = crc_str(crc_str(crc, keys[i]), meta_kv[2 * j + 1]);
    }
    qsort(names, (size_t)nt, sizeof *names, cmp_str);
    for (int i = 0; i < nt; i++) crc = crc_tensor(crc, names[i], *get(src, names[i]));
    return (uint32_t)crc;
}

/* ---------------------------------------------------------------- metadata */

/* Values as text: integers in decimal, the RNG and config hash in hex, the
 * best metric with 17 significant digits (exact for a double) or nan/inf. */
typedef struct {
    const char *kv[2 * (K_COUNT + 1) + 1];
    char buf[K_COUNT][80];
    char state_names[MAX_STATE * 24];
    int n;
} meta_out;

static void meta_put(meta_out *mo, int key, const char *val) {
    mo->kv[2 * mo->n] = meta_keys[key];
    mo->kv[2 * mo->n + 1] = val;
    mo->n++;
    mo->kv[2 * mo->n] = NULL;
}

static void meta_putf(meta_out *mo, int key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void meta_putf(meta_out *mo, int key, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mo->buf[key], sizeof mo->buf[key], fmt, ap);
    va_end(ap);
    meta_put(mo, key, mo->buf[key]);
}

static void format_double(char *buf, size_t n, double v) {
    if (isnan(v)) snprintf(buf, n, "nan");
    else if (isinf(v)) snprintf(buf, n, v > 0 ? "inf" : "-inf");
    else snprintf(buf, n, "%.17g", v);
}

/* The optimizer's state names, comma-separated. They identify its kind:
 * AdamW "exp_avg,exp_avg_sq", SGD with momentum "momentum_buffer", plain SGD "". */
static void state_names(ut_optim *o, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < ut_optim_nstate(o) && at < n; i++) {
        const char *name;
        ut_optim_state(o, i, &name);
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? "," : "", name);
    }
}

static void meta_build(meta_out *mo, const ut_model *m, ut_optim *o, const ut_train_state *st) {
    mo->n = 0;
    mo->kv[0] = NULL;
    meta_put(mo, K_FORMAT, CKPT_FORMAT);
    meta_put(mo, K_MODEL_TYPE, m->type);
    meta_putf(mo, K_STEP, "%" PRId64, st->step);
    meta_putf(mo, K_EPOCH, "%" PRId64, st->epoch);
    meta_putf(mo, K_CURSOR, "%" PRId64, st->cursor);
    meta_putf(mo, K_RNG, "%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64, st->rng[0],
              st->rng[1], st->rng[2], st->rng[3]);
    format_double(mo->buf[K_BEST_METRIC], sizeof mo->buf[K_BEST_METRIC], st->best_metric);
    meta_put(mo, K_BEST_METRIC, mo->buf[K_BEST_METRIC]);
    meta_putf(mo, K_BEST_STEP, "%" PRId64, st->best_step);
    meta_putf(mo, K_BAD_EVALS, "%" PRId64, st->bad_evals);
    meta_putf(mo, K_CONFIG_HASH, "%016" PRIx64, st->config_hash);
    if (st->loss_scale > 0) { /* fp16 runs: the loss scaler */
        format_double(mo->buf[K_AMP_SCALE], sizeof mo->buf[K_AMP_SCALE], st->loss_scale);
        meta_put(mo, K_AMP_SCALE, mo->buf[K_AMP_SCALE]);
        meta_putf(mo, K_AMP_TRACKER, "%" PRId64, st->scale_growth_tracker);
    }
    if (!o) return;
    meta_putf(mo, K_OPTIM_STEPS, "%" PRId64, ut_optim_steps(o));
    state_names(o, mo->state_names, sizeof mo->state_names);
    meta_put(mo, K_OPTIM_STATE, mo->state_names);
}

/* Parsers for metadata values: the whole string must be consumed. */
static bool parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

static bool parse_hex64(const char *s, const char **end_out, uint64_t *out) {
    char *end;
    if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') || (*s >= 'A' && *s <= 'F')))
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 16);
    if (errno) return false;
    *out = v;
    *end_out = end;
    return true;
}

static bool parse_rng(const char *s, uint64_t rng[4]) {
    for (int i = 0; i < 4; i++) {
        if (!parse_hex64(s, &s, &rng[i])) return false;
        if (*s != (i < 3 ? ',' : 0)) return false;
        if (i < 3) s++;
    }
    return true;
}

static bool parse_double(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end) return false;
    *out = v;
    return true;
}

/* The loss scaler's state, present only in fp16 runs' checkpoints. */
static bool parse_amp(const ut_st_file *f, ut_train_state *st) {
    const char *scale = ut_st_meta(f, meta_keys[K_AMP_SCALE]), *tr = ut_st_meta(f, meta_keys[K_AMP_TRACKER]);
    st->loss_scale = 0;
    st->scale_growth_tracker = 0;
    if (!scale && !tr) return true;
    return scale && tr && parse_double(scale, &st->loss_scale) && st->loss_scale > 0 &&
           isfinite(st->loss_scale) && parse_i64(tr, &st->scale_growth_tracker) &&
           st->scale_growth_tracker >= 0;
}

static bool parse_state(const ut_st_file *f, ut_train_state *st) {
    const char *hash_end;
    return parse_amp(f, st) && parse_i64(ut_st_meta(f, meta_keys[K_STEP]), &st->step) &&
           parse_i64(ut_st_meta(f, meta_keys[K_EPOCH]), &st->epoch) &&
           parse_i64(ut_st_meta(f, meta_keys[K_CURSOR]), &st->cursor) &&
           parse_rng(ut_st_meta(f, meta_keys[K_RNG]), st->rng) &&
           parse_double(ut_st_meta(f, meta_keys[K_BEST_METRIC]), &st->best_metric) &&
           parse_i64(ut_st_meta(f, meta_keys[K_BEST_STEP]), &st->best_step) &&
           parse_i64(ut_st_meta(f, meta_keys[K_BAD_EVALS]), &st->bad_evals) &&
           parse_hex64(ut_st_meta(f, meta_keys[K_CONFIG_HASH]), &hash_end, &st->config_hash) &&
           !*hash_end;
}

/* ---------------------------------------------------------------- save */

typedef struct {
    int n;
    const char **names;
    ut_st_tensor *t;
} tensor_list;

static const ut_st_tensor *list_get(const void *src, const char *name) {
    const tensor_list *l = src;
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->names[i], name)) return &l->t[i];
    return NULL;
}

static void list_add(tensor_list *l, char *name, int ndim, const int64_t *shape, const void *data) {
    ut_st_tensor *t = &l->t[l->n];
    *t = (ut_st_tensor){.dtype = UT_ST_F32, .ndim = ndim, .data = data};
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->nbytes = (size_t)ut_st_numel(t) * sizeof(float);
    l->names[l->n++] = name;
}

/* The optimizer must cover the whole parameter buffer: its state buffers
 * are saved as flat tensors of numel floats. ZeRO will gather the shards of
 * every rank here before saving (and scatter them in ut_ckpt_load). */
static void assert_full_cover(const ut_model *m, const ut_optim *o) {
    int ns = ut_optim_nstate(o);
    UT_ASSERT(ns <= MAX_STATE);
    UT_ASSERT(ut_optim_state_bytes(o) == (size_t)ns * (size_t)m->params.numel * sizeof(float));
}

static char *str_cat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = ut_malloc_check(la + lb + 1);
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

int ut_ckpt_save(const char *path, const ut_model *m, ut_optim *o, const ut_train_state *st,
                 char *err, size_t n) {
    const ut_params *p = &m->params;
    UT_ASSERT(st);
    int ns = o ? ut_optim_nstate(o) : 0;
    if (o) assert_full_cover(m, o);
    tensor_list l = {0, ut_malloc_check((size_t)(p->n + ns + 1) * sizeof(char *)),
                     ut_malloc_check((size_t)(p->n + ns + 1) * sizeof(ut_st_tensor))};
    /* the file is written from host memory: the flat buffers and the
     * optimizer's state through host stages (themselves on the CPU) */
    const ut_backend *be = ut_backend_get(p->device);
    size_t bytes = (size_t)p->numel * sizeof(float);
    ut_stage stage[1 + MAX_STATE];
    const float *host = ut_stage_begin(&stage[0], be, p->flat, bytes, true);
    for (int i = 0; i < p->n; i++)
        list_add(&l, str_cat("model.", p->names[i]), p->t[i]->ndim, p->t[i]->ne,
                 host + p->segs[i].offset);
    const ut_backend *obe = o ? ut_backend_get(ut_optim_get_config(o)->device) : be; /* host with ZeRO-Offload */
    for (int i = 0; i < ns; i++) {
        const char *name;
        float *buf = ut_optim_state(o, i, &name);
        list_add(&l, str_cat("optim.", name), 1, &p->numel,
                 ut_stage_begin(&stage[1 + i], obe, buf, bytes, true));
    }
    meta_out *mo = ut_malloc_check(sizeof *mo);
    meta_build(mo, m, o, st);
    /* checksum() sorts the names it is given; the file keeps model order. */
    const char **sorted = ut_malloc_check((size_t)(l.n + 1) * sizeof *sorted);
    memcpy(sorted, l.names, (size_t)l.n * sizeof *sorted);
    char sum[16];
    snprintf(sum, sizeof sum, "%08" PRIx32, checksum(mo->kv, sorted, l.n, list_get, &l));
    mo->kv[2 * mo->n] = CHECKSUM_KEY;
    mo->kv[2 * mo->n + 1] = sum;
    mo->kv[2 * mo->n + 2] = NULL;
    int rc = ut_st_save(path, l.n, l.names, l.t, mo->kv, err, n);
    for (int i = 0; i < 1 + ns; i++) ut_stage_end(&stage[i], false);
    for (int i = 0; i < l.n; i++) ut_free((void *)l.names[i]);
    ut_free(sorted);
    ut_free(l.names);
    ut_free(l.t);
    ut_free(mo);
    return rc;
}

/* ---------------------------------------------------------------- load */

static const ut_st_tensor *file_get(const void *src, const char *name) { return ut_st_get(src, name); }

static int verify_checksum(const char *path, const ut_st_file *f, char *err, size_t n) {
    const char *stored = ut_st_meta(f, CHECKSUM_KEY);
    if (!stored) return ut_errorf(err, n, "%s: no \"%s\" in the metadata", path, CHECKSUM_KEY);
    const char *kv[2 * K_COUNT + 1];
    int nm = 0;
    for (int k = 0; k < K_COUNT; k++) {
        const char *v = ut_st_meta(f, meta_keys[k]);
        if (!v) continue;
        kv[2 * nm] = meta_keys[k];
        kv[2 * nm + 1] = v;
        nm++;
    }
    kv[2 * nm] = NULL;
    int nt = ut_st_count(f);
    const char **names = ut_malloc_check((size_t)(nt + 1) * sizeof *names);
    for (int i = 0; i < nt; i++) names[i] = ut_st_name(f, i);
    char want[16];
    snprintf(want, sizeof want, "%08" PRIx32, checksum(kv, names, nt, file_get, f));
    ut_free(names);
    if (strcmp(stored, want))
        return ut_errorf(err, n, "%s: checksum mismatch: the file is corrupt", path);
    return 0;
}

/* The training state must be one a run can reach: a valid checksum only
 * proves the file is what was written, not that what was written is sane. */
static int check_state(const char *path, const ut_train_state *st, char *err, size_t n) {
    struct { const char *key; int64_t v, lo, hi; } f[] = {
        {"train.step", st->step, 0, INT64_MAX},
        {"train.epoch", st->epoch, 0, st->step}, /* every epoch takes at least one step */
        {"train.cursor", st->cursor, 0, INT64_MAX},
        {"train.best_step", st->best_step, -1, st->step},
        {"train.bad_evals", st->bad_evals, 0, st->step}, /* one evaluation per step at most */
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < f[i].lo || f[i].v > f[i].hi)
            return ut_errorf(err, n, "%s: metadata \"%s\" is %lld, outside [%lld, %lld]%s", path,
                             f[i].key, (long long)f[i].v, (long long)f[i].lo, (long long)f[i].hi,
                             f[i].hi == st->step ? " (at most train.step)" : "");
    if (st->best_step >= 0 && !isfinite(st->best_metric))
        return ut_errorf(err, n, "%s: metadata \"train.best_metric\" is %g at best step %lld: a kept best "
                                 "checkpoint has a finite metric", path, st->best_metric, (long long)st->best_step);
    if (!(st->rng[0] | st->rng[1] | st->rng[2] | st->rng[3]))
        return ut_errorf(err, n, "%s: metadata \"train.rng\" is all zeros, not a generator state",
                         path);
    return 0;
}

/* Format, checksum, then every metadata value this loader needs. */
static int check_meta(const char *path, const ut_st_file *f, const ut_model *m, ut_train_state *st,
                      char *err, size_t n) {
    const char *fmt = ut_st_meta(f, meta_keys[K_FORMAT]);
    if (!fmt) return ut_errorf(err, n, "%s: not a utrain checkpoint (no \"utrain.format\" metadata)", path);
    if (verify_checksum(path, f, err, n)) return -1;
    if (strcmp(fmt, CKPT_FORMAT))
        return ut_errorf(err, n, "%s: unsupported checkpoint format \"%s\" (this utrain reads \"%s\")",
                    path, fmt, CKPT_FORMAT);
    for (int k = 0; k < K_OPTIM_STEPS; k++)
        if (!ut_st_meta(f, meta_keys[k]))
            return ut_errorf(err, n, "%s: metadata \"%s\" is missing", path, meta_keys[k]);
    if (!parse_state(f, st))
        return ut_errorf(err, n, "%s: malformed training state in the metadata (train.*)", path);
    if (check_state(path, st, err, n)) return -1;
    const char *type = ut_st_meta(f, meta_keys[K_MODEL_TYPE]);
    if (strcmp(type, m->type))
        return ut_errorf(err, n, "%s: checkpoint is of a \"%s\" model, this model is \"%s\"", path, type,
                    m->type);
    return 0;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (at < n) snprintf(buf + at, n - at, ")");
}

static bool same_shape(const ut_st_tensor *t, int ndim, const int64_t *shape) {
    if (t->dtype != UT_ST_F32 || t->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d]) return false;
    return true;
}

static int shape_mismatch(const char *path, const char *what, const ut_st_tensor *t, int ndim,
                          const int64_t *shape, char *err, size_t n) {
    char have[200], want[200];
    shape_str(have, sizeof have, t->ndim, t->shape);
    shape_str(want, sizeof want, ndim, shape);
    return ut_errorf(err, n, "%s: %s: checkpoint has %s %s, expected F32 %s", path, what,
                ut_st_dtype_name(t->dtype), have, want);
}

static int check_params(const char *path, const ut_st_file *f, const ut_model *m, char *err, size_t n) {
    const ut_params *p = &m->params;
    char name[512];
    for (int i = 0; i < p->n; i++) {
        snprintf(name, sizeof name, "model.%s", p->names[i]);
        const ut_st_tensor *t = ut_st_get(f, name);
        if (!t) return ut_errorf(err, n, "%s: parameter %s is missing from the checkpoint", path, p->names[i]);
        if (!same_shape(t, p->t[i]->ndim, p->t[i]->ne)) {
            snprintf(name, sizeof name, "parameter %s", p->names[i]);
            return shape_mismatch(path, name, t, p->t[i]->ndim, p->t[i]->ne, err, n);
        }
        int64_t bad = ut_st_first_bad(t, false);
        if (bad >= 0)
            return ut_errorf(err, n, "%s: parameter %s holds %g at element %lld: the checkpoint's weights are "
                                     "damaged (non-finite)", path, p->names[i], ut_st_float(t, bad), (long long)bad);
    }
    for (int i = 0; i < ut_st_count(f); i++) {
        const char *tn = ut_st_name(f, i);
        if (!strncmp(tn, "model.", 6) && !ut_model_param(m, tn + 6))
            return ut_errorf(err, n, "%s: tensor %s is not a parameter of this %s model", path, tn, m->type);
    }
    return 0;
}

/* "AdamW (exp_avg,exp_avg_sq)" style description of a state-name list. */
static const char *describe_state(const char *names) {
    if (!strcmp(names, "exp_avg,exp_avg_sq")) return "AdamW (exp_avg, exp_avg_sq)";
    if (!strcmp(names, "momentum_buffer")) return "SGD with momentum (momentum_buffer)";
    if (!*names) return "SGD without momentum (no state)";
    return names;
}

static int check_optim(const char *path, const ut_st_file *f, const ut_model *m, ut_optim *o,
                       int64_t *steps, char *err, size_t n) {
    const char *have = ut_st_meta(f, meta_keys[K_OPTIM_STATE]);
    const char *steps_s = ut_st_meta(f, meta_keys[K_OPTIM_STEPS]);
    if (!have || !steps_s) return ut_errorf(err, n, "%s: the checkpoint holds no optimizer state", path);
    if (!parse_i64(steps_s, steps) || *steps < 0)
        return ut_errorf(err, n, "%s: malformed optim.steps \"%s\"", path, steps_s);
    char want[MAX_STATE * 24];
    state_names(o, want, sizeof want);
    int rc = 0;
    if (strcmp(have, want))
        rc = ut_errorf(err, n, "%s: the checkpoint's optimizer is %s but this optimizer is %s", path,
                  describe_state(have), describe_state(want));
    for (int i = 0; !rc && i < ut_optim_nstate(o); i++) {
        const char *sn;
        ut_optim_state(o, i, &sn);
        char name[64];
        snprintf(name, sizeof name, "optim.%s", sn);
        const ut_st_tensor *t = ut_st_get(f, name);
        if (!t) rc = ut_errorf(err, n, "%s: optimizer state %s is missing", path, name);
        else if (!same_shape(t, 1, &m->params.numel))
            rc = shape_mismatch(path, name, t, 1, &m->params.numel, err, n);
        else { /* Adam's second moments are squares: never negative */
            bool square = !strcmp(sn, "exp_avg_sq");
            int64_t bad = ut_st_first_bad(t, square);
            if (bad >= 0)
                rc = ut_errorf(err, n, "%s: optimizer state %s holds %g at element %lld: %s", path, name,
                               ut_st_float(t, bad), (long long)bad,
                               square ? "a second moment must be finite and >= 0" : "the state is damaged (non-finite)");
        }
    }
    return rc;
}

int ut_ckpt_load(const char *path, ut_model *m, ut_optim *o, ut_train_state *st, char *err,
                 size_t n) {
    ut_st_file *f = ut_st_open(path, err, n);
    if (!f) return -1;
    if (o) assert_full_cover(m, o);
    ut_train_state s;
    int64_t steps = 0;
    if (check_meta(path, f, m, &s, err, n) || check_params(path, f, m, err, n) ||
        (o && check_optim(path, f, m, o, &steps, err, n))) {
        ut_st_close(f);
        return -1;
    }
    if (o && steps > s.step) { /* fp16 skips make it smaller, nothing makes it larger */
        ut_st_close(f);
        return ut_errorf(err, n, "%s: metadata \"optim.steps\" is %lld, more than train.step %lld: the "
                                 "optimizer steps at most once per training step", path, (long long)steps,
                         (long long)s.step);
    }
    /* Verified: from here on nothing can fail. The file's bytes are host
     * memory: parameters go in by ut_tensor_set, the optimizer's state by a
     * copy to the flat buffers' backend. */
    const ut_params *p = &m->params;
    char name[512];
    for (int i = 0; i < p->n; i++) {
        snprintf(name, sizeof name, "model.%s", p->names[i]);
        const ut_st_tensor t = *ut_st_get(f, name);
        UT_ASSERT(ut_tensor_set(p->t[i], t.data, t.nbytes) == 0);
    }
    for (int i = 0; o && i < ut_optim_nstate(o); i++) {
        const char *sn;
        float *buf = ut_optim_state(o, i, &sn);
        snprintf(name, sizeof name, "optim.%s", sn);
        const ut_st_tensor t = *ut_st_get(f, name);
        ut_backend_get(ut_optim_get_config(o)->device)->copy(buf, t.data, t.nbytes, UT_COPY_H2D);
    }
    if (o) ut_optim_set_steps(o, steps);
    if (st) *st = s;
    ut_st_close(f);
    return 0;
}

/* ---------------------------------------------------------------- directories */

void ut_ckpt_path(char *buf, size_t n, const char *dir, int64_t step) {
    size_t len = strlen(dir);
    const char *sep = len && dir[len - 1] == '/' ? "" : "/";
    snprintf(buf, n, "%s%s" CKPT_PREFIX "%08" PRId64 CKPT_SUFFIX, dir, sep, step);
}

/* step_<digits>.safetensors exactly (temporary files have a suffix after it). */
static bool parse_name(const char *name, int64_t *step) {
    size_t plen = strlen(CKPT_PREFIX), slen = strlen(CKPT_SUFFIX), len = strlen(name);
    if (len <= plen + slen || strncmp(name, CKPT_PREFIX, plen) || strcmp(name + len - slen, CKPT_SUFFIX))
        return false;
    int64_t v = 0;
    for (size_t i = plen; i < len - slen; i++) {
        if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return false;
        v = v * 10 + (name[i] - '0');
    }
    /* Only the name ut_ckpt_path gives (8 digits or more, no extra zeros),
     * so that prune deletes exactly the files listed. */
    char canon[64];
    snprintf(canon, sizeof canon, CKPT_PREFIX "%08" PRId64 CKPT_SUFFIX, v);
    if (strcmp(canon, name)) return false;
    *step = v;
    return true;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Every checkpoint step in dir, newest first, in a new array; -1 if dir
 * cannot be read (a missing dir has none). */
static int list_all(const char *dir, int64_t **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -1;
    int cnt = 0, cap = 0;
    struct dirent *e;
    int64_t step;
    while ((e = readdir(d)))
        if (parse_name(e->d_name, &step)) {
            if (cnt == cap) {
                cap = cap ? 2 * cap : 16;
                *out = ut_realloc_check(*out, (size_t)cap * sizeof **out);
            }
            (*out)[cnt++] = step;
        }
    closedir(d);
    if (cnt) qsort(*out, (size_t)cnt, sizeof **out, cmp_desc);
    return cnt;
}

int ut_ckpt_list(const char *dir, int64_t *steps, int max) {
    int64_t *all;
    int cnt = list_all(dir, &all);
    if (cnt > max) cnt = max;
    if (cnt > 0) memcpy(steps, all, (size_t)cnt * sizeof *steps);
    ut_free(all);
    return cnt;
}

int ut_ckpt_prune(const char *dir, int keep, int64_t keep_step, char *err, size_t n) {
    if (keep <= 0) return 0;
    int64_t *all;
    int cnt = list_all(dir, &all);
    if (cnt < 0) return ut_errorf(err, n, "%s: cannot read the directory: %s", dir, strerror(errno));
    int rc = 0;
    char path[4096];
    for (int i = keep; i < cnt && !rc; i++) {
        if (all[i] == keep_step) continue;
        ut_ckpt_path(path, sizeof path, dir, all[i]);
        if (unlink(path) && errno != ENOENT)
            rc = ut_errorf(err, n, "%s: cannot delete: %s", path, strerror(errno));
    }
    ut_free(all);
    return rc;
}

/* step_<digits>.safetensors.tmp.<pid>.<n>: a temporary file of ut_st_save;
 * its writer's pid into *pid. */
static bool parse_temp_name(const char *name, long *pid) {
    const char *t = strstr(name, CKPT_SUFFIX ".tmp.");
    int64_t step;
    char head[256];
    if (!t || (size_t)(t - name) + strlen(CKPT_SUFFIX) >= sizeof head) return false;
    snprintf(head, sizeof head, "%.*s", (int)(t - name + (long)strlen(CKPT_SUFFIX)), name);
    if (!parse_name(head, &step)) return false;
    char *end;
    errno = 0;
    *pid = strtol(t + strlen(CKPT_SUFFIX ".tmp."), &end, 10);
    if (errno || *pid <= 0 || *end != '.') return false;
    strtoul(end + 1, &end, 10);
    return !*end;
}

int ut_ckpt_clean_temp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    char path[4096];
    for (struct dirent *e; (e = readdir(d));) {
        long pid;
        if (!parse_temp_name(e->d_name, &pid) || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to know) */
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        removed += unlink(path) == 0;
    }
    closedir(d);
    return removed;
}
