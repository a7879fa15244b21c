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
    K_BAD_EVALS, K_CONFIG_HASH, K_OPTIM_STEPS, K_OPTIM_STATE, K_AMP_SCALE, K_AMP_TRACKER, K_AMP_HYSTERESIS,
    K_SCHEDULE_HELD, K_TOKENS_SEEN, K_PLATEAU_LR, K_PLATEAU_BEST, K_PLATEAU_BAD, K_PLATEAU_COOLDOWN,
    K_GREEDY_GOOD, K_GREEDY_WARMUP, K_GREEDY_RESET, K_GREEDY_WINDOW, K_FLOS_TOKENS, K_COUNT
};
static const char *const meta_keys[K_COUNT] = {
    "utrain.format", "model.type", "train.step", "train.epoch", "train.cursor", "train.rng",
    "train.best_metric", "train.best_step", "train.bad_evals", "train.config_hash", "optim.steps",
    "optim.state", "amp.scale", "amp.growth_tracker", "amp.hysteresis", "train.schedule_held",
    "train.input_tokens_seen", "optim.plateau_lr", "optim.plateau_best", "optim.plateau_bad_evals",
    "optim.plateau_cooldown", "optim.greedy_good_evals", "optim.greedy_warmup_left", "optim.greedy_reset_left",
    "optim.greedy_window", "train.flos_tokens",
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

/* A tensor's record's prefix "name\0DTYPE\0d0,d1,...\0" into crc; its length into *len. */
static uLong crc_prefix(uLong crc, const char *name, ut_st_dtype dt, int ndim, const int64_t *shape, size_t *len) {
    char dims[UT_ST_MAX_DIMS * 21 + 1] = "";
    size_t at = 0;
    for (int d = 0; d < ndim; d++) at += (size_t)snprintf(dims + at, sizeof dims - at, "%s%" PRId64, d ? "," : "", shape[d]);
    if (len) *len = strlen(name) + 1 + strlen(ut_st_dtype_name(dt)) + 1 + at + 1;
    return crc_str(crc_str(crc_str(crc, name), ut_st_dtype_name(dt)), dims);
}

/* The checkpoint checksum: metadata entries sorted by key ("key\0value\0"),
 * then tensors sorted by name, each its record (crc_tensor). meta_kv is key,
 * value, ..., NULL without the checksum entry. tcrc continues crc over the
 * record of the tensor called name (false when it cannot be read). */
typedef bool (*tensor_crc_fn)(const void *src, const char *name, uLong *crc);

static uLong meta_crc(const char **meta_kv) {
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
    return crc;
}

static bool checksum(const char **meta_kv, const char **names, int nt, tensor_crc_fn tcrc, const void *src,
                     uint32_t *out) {
    uLong crc = meta_crc(meta_kv);
    qsort(names, (size_t)nt, sizeof *names, cmp_str);
    for (int i = 0; i < nt; i++)
        if (!tcrc(src, names[i], &crc)) return false;
    *out = (uint32_t)crc;
    return true;
}

/* ---------------------------------------------------------------- metadata */

/* Values as text: integers in decimal, the RNG and config hash in hex, the
 * best metric with 17 significant digits (exact for a double) or nan/inf. */
typedef struct {
    const char *kv[2 * (K_COUNT + 1) + 1];
    char buf[K_COUNT][80];
    char state_names[MAX_STATE * 24];
    char window[UT_GREEDY_WINDOW_MAX * 26 + 32]; /* greedy's smoothing window: "sum;v1,v2,..." */
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

void ut_ckpt_state_names(ut_optim *o, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < ut_optim_nstate(o) && at < n; i++) {
        const char *name;
        ut_optim_state(o, i, &name);
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? "," : "", name);
    }
}

/* state: the optimizer's state names (ut_ckpt_state_names), NULL for none. */
static void meta_build(meta_out *mo, const char *type, const char *state, int64_t optim_steps,
                       const ut_train_state *st) {
    mo->n = 0;
    mo->kv[0] = NULL;
    meta_put(mo, K_FORMAT, CKPT_FORMAT);
    meta_put(mo, K_MODEL_TYPE, type);
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
        if (st->scale_hysteresis > 0) meta_putf(mo, K_AMP_HYSTERESIS, "%" PRId64, st->scale_hysteresis);
    }
    if (st->schedule_held > 0) meta_putf(mo, K_SCHEDULE_HELD, "%" PRId64, st->schedule_held);
    if (st->input_tokens_seen > 0) meta_putf(mo, K_TOKENS_SEEN, "%" PRId64, st->input_tokens_seen);
    if (st->flos_tokens > 0) meta_putf(mo, K_FLOS_TOKENS, "%" PRId64, st->flos_tokens);
    if (st->plateau) { /* optim.schedule plateau: the rate the evaluations have set, and their count */
        const ut_plateau_state *p = &st->plateau_state;
        format_double(mo->buf[K_PLATEAU_LR], sizeof mo->buf[K_PLATEAU_LR], p->lr);
        meta_put(mo, K_PLATEAU_LR, mo->buf[K_PLATEAU_LR]);
        format_double(mo->buf[K_PLATEAU_BEST], sizeof mo->buf[K_PLATEAU_BEST], p->best);
        meta_put(mo, K_PLATEAU_BEST, mo->buf[K_PLATEAU_BEST]);
        meta_putf(mo, K_PLATEAU_BAD, "%" PRId64, p->bad);
        meta_putf(mo, K_PLATEAU_COOLDOWN, "%" PRId64, p->cooldown);
    }
    if (st->plateau && st->greedy) { /* and greedy's: its runs, counters and window (oldest first) */
        const ut_plateau_state *p = &st->plateau_state;
        meta_putf(mo, K_GREEDY_GOOD, "%" PRId64, p->good);
        meta_putf(mo, K_GREEDY_WARMUP, "%" PRId64, p->warmup);
        meta_putf(mo, K_GREEDY_RESET, "%" PRId64, p->reset_left);
        size_t at = 0;
        format_double(mo->window, 32, p->win_sum);
        at = strlen(mo->window);
        for (int64_t i = 0; i < p->win_n; i++) {
            mo->window[at++] = i ? ',' : ';';
            format_double(mo->window + at, 26, p->win[(p->win_head + i) % UT_GREEDY_WINDOW_MAX]);
            at += strlen(mo->window + at);
        }
        meta_put(mo, K_GREEDY_WINDOW, mo->window);
    }
    if (!state) return;
    meta_putf(mo, K_OPTIM_STEPS, "%" PRId64, optim_steps);
    snprintf(mo->state_names, sizeof mo->state_names, "%s", state);
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
    const char *hy = ut_st_meta(f, meta_keys[K_AMP_HYSTERESIS]);
    st->loss_scale = 0;
    st->scale_growth_tracker = st->scale_hysteresis = 0;
    if (!scale && !tr && !hy) return true;
    return scale && tr && parse_double(scale, &st->loss_scale) && st->loss_scale > 0 &&
           isfinite(st->loss_scale) && parse_i64(tr, &st->scale_growth_tracker) &&
           st->scale_growth_tracker >= 0 && (!hy || (parse_i64(hy, &st->scale_hysteresis) && st->scale_hysteresis > 0));
}

/* The plateau rate's state, present only in plateau runs' checkpoints: all
 * four keys or none. */
static bool parse_plateau(const ut_st_file *f, ut_train_state *st) {
    const char *v[4];
    int have = 0;
    for (int i = 0; i < 4; i++) have += (v[i] = ut_st_meta(f, meta_keys[K_PLATEAU_LR + i])) != NULL;
    st->plateau = have > 0;
    st->plateau_state = (ut_plateau_state){0};
    if (!have) return true;
    ut_plateau_state *p = &st->plateau_state;
    return have == 4 && parse_double(v[0], &p->lr) && parse_double(v[1], &p->best) && parse_i64(v[2], &p->bad) &&
           parse_i64(v[3], &p->cooldown);
}

/* greedy's window "sum;v1,v2,..." (oldest first; "sum" alone when empty) */
static bool parse_window(const char *s, ut_plateau_state *p) {
    char *end;
    p->win_sum = strtod(s, &end);
    if (end == s) return false;
    p->win_n = p->win_head = 0;
    for (s = end; *s; s = end) {
        if (*s != (p->win_n ? ',' : ';') || p->win_n == UT_GREEDY_WINDOW_MAX) return false;
        p->win[p->win_n] = strtod(++s, &end);
        if (end == s) return false;
        p->win_n++;
    }
    return true;
}

/* greedy's part of the state, present only in greedy runs' checkpoints (with
 * the plateau keys): all four keys or none. */
static bool parse_greedy(const ut_st_file *f, ut_train_state *st) {
    const char *v[4];
    int have = 0;
    for (int i = 0; i < 4; i++) have += (v[i] = ut_st_meta(f, meta_keys[K_GREEDY_GOOD + i])) != NULL;
    st->greedy = have > 0;
    if (!have) return true;
    ut_plateau_state *p = &st->plateau_state;
    return have == 4 && st->plateau && parse_i64(v[0], &p->good) && parse_i64(v[1], &p->warmup) &&
           parse_i64(v[2], &p->reset_left) && parse_window(v[3], p);
}

static bool parse_state(const ut_st_file *f, ut_train_state *st) {
    const char *hash_end, *held = ut_st_meta(f, meta_keys[K_SCHEDULE_HELD]);
    const char *seen = ut_st_meta(f, meta_keys[K_TOKENS_SEEN]), *flos = ut_st_meta(f, meta_keys[K_FLOS_TOKENS]);
    st->schedule_held = st->input_tokens_seen = st->flos_tokens = 0;
    return parse_amp(f, st) && parse_plateau(f, st) && parse_greedy(f, st) && (!held || parse_i64(held, &st->schedule_held)) &&
           (!seen || parse_i64(seen, &st->input_tokens_seen)) && (!flos || parse_i64(flos, &st->flos_tokens)) &&
           parse_i64(ut_st_meta(f, meta_keys[K_STEP]), &st->step) &&
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

static char *str_cat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = ut_malloc_check(la + lb + 1);
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

/* The checksum entry after the others (not counted in mo->n: the checksum
 * is over the entries before it). */
static void mo_put_checksum(meta_out *mo, const char *sum) {
    mo->kv[2 * mo->n] = CHECKSUM_KEY;
    mo->kv[2 * mo->n + 1] = sum;
    mo->kv[2 * mo->n + 2] = NULL;
}

/* The file's tensors: "model.<name>" for each entry, then "optim.<state>"
 * for each state name (flat, the entries' elements in their order). */
struct ut_ckpt_writer {
    ut_st_writer *w;
    char *path;
    int nt, cur;          /* tensors; the one being written */
    char **names;         /* their file names */
    size_t *bytes, left;  /* each one's bytes; those the current one still needs */
    uLong *crc, *len;     /* each one's record checksum so far (crc_prefix on), and length */
    meta_out mo;
    bool failed;
};

/* The comma-separated state names into names[] (at most MAX_STATE). */
static int split_states(const char *state, char names[MAX_STATE][24]) {
    int ns = 0;
    for (const char *p = state; p && *p && ns < MAX_STATE;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        snprintf(names[ns++], 24, "%.*s", (int)len, p);
        p = c ? c + 1 : p + len;
    }
    return ns;
}

/* Floats state `state` keeps for a parameter of this shape: one per
 * element, except Adafactor's factored second moment of a matrix, its row
 * then column means for each entry of the leading dimensions. */
static int64_t state_len_of(const char *state, int ndim, const int64_t *shape) {
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= shape[d];
    if (!strcmp(state, "exp_avg_sq_factored") && ndim >= 2 && shape[ndim - 2] > 0 && shape[ndim - 1] > 0)
        return numel / (shape[ndim - 2] * shape[ndim - 1]) * (shape[ndim - 2] + shape[ndim - 1]);
    return numel;
}

/* Whether a state is a second moment (never negative). */
static bool square_state(const char *state) {
    return !strcmp(state, "exp_avg_sq") || !strcmp(state, "exp_avg_sq_factored");
}

ut_ckpt_writer *ut_ckpt_writer_open(const char *path, const char *type, int n, const ut_ckpt_entry *e,
                                    const char *state, int64_t optim_steps, const ut_train_state *st, char *err,
                                    size_t en) {
    char sn[MAX_STATE][24];
    int ns = split_states(state, sn);
    ut_ckpt_writer *w = ut_calloc_check(1, sizeof *w);
    w->nt = n + ns;
    w->names = ut_calloc_check((size_t)w->nt + 1, sizeof *w->names);
    w->bytes = ut_calloc_check((size_t)w->nt + 1, sizeof *w->bytes);
    w->crc = ut_calloc_check((size_t)w->nt + 1, sizeof *w->crc);
    w->len = ut_calloc_check((size_t)w->nt + 1, sizeof *w->len);
    ut_st_tensor *t = ut_calloc_check((size_t)w->nt + 1, sizeof *t);
    for (int i = 0; i < w->nt; i++) {
        if (i < n) {
            w->names[i] = str_cat("model.", e[i].name);
            t[i] = (ut_st_tensor){.dtype = UT_ST_F32, .ndim = e[i].ndim};
            memcpy(t[i].shape, e[i].shape, (size_t)e[i].ndim * sizeof *e[i].shape);
        } else { /* the parameters' states one after the other */
            int64_t total = 0;
            for (int k = 0; k < n; k++) total += state_len_of(sn[i - n], e[k].ndim, e[k].shape);
            w->names[i] = str_cat("optim.", sn[i - n]);
            t[i] = (ut_st_tensor){.dtype = UT_ST_F32, .ndim = 1, .shape = {total}};
        }
        t[i].nbytes = w->bytes[i] = (size_t)ut_st_numel(&t[i]) * sizeof(float);
        size_t plen;
        w->crc[i] = crc_prefix(crc32(0L, Z_NULL, 0), w->names[i], UT_ST_F32, t[i].ndim, t[i].shape, &plen);
        w->len[i] = (uLong)(plen + w->bytes[i]);
    }
    meta_build(&w->mo, type, state, optim_steps, st);
    mo_put_checksum(&w->mo, "00000000"); /* set when the data is written */
    w->w = ut_st_writer_open(path, w->nt, (const char *const *)w->names, t, w->mo.kv, err, en);
    w->mo.kv[2 * w->mo.n] = NULL; /* the checksum is over the entries before it */
    ut_free(t);
    w->path = str_cat(path, "");
    w->left = w->nt ? w->bytes[0] : 0;
    if (!w->w) {
        ut_ckpt_writer_close(w, false, NULL, 0);
        return NULL;
    }
    return w;
}

int ut_ckpt_writer_put(ut_ckpt_writer *w, const float *v, int64_t n, char *err, size_t en) {
    size_t bytes = (size_t)n * sizeof(float);
    const char *p = (const char *)v;
    while (bytes && !w->failed) {
        while (!w->left && w->cur < w->nt) {
            w->cur++;
            w->left = w->cur < w->nt ? w->bytes[w->cur] : 0;
        }
        if (w->cur >= w->nt) {
            w->failed = true;
            return ut_errorf(err, en, "%s: more values than the checkpoint's tensors hold", w->path);
        }
        size_t k = bytes < w->left ? bytes : w->left;
        if (ut_st_writer_write(w->w, p, k, err, en)) {
            w->failed = true;
            return -1;
        }
        w->crc[w->cur] = crc_bytes(w->crc[w->cur], p, k);
        w->left -= k, bytes -= k, p += k;
    }
    return w->failed ? -1 : 0;
}

int ut_ckpt_writer_close(ut_ckpt_writer *w, bool commit, char *err, size_t en) {
    if (!w) return 0;
    int rc = 0;
    if (commit && w->failed) rc = ut_errorf(err, en, "%s: not written (an earlier write failed)", w->path);
    if (commit && !rc) { /* the records in name order after the metadata */
        int *order = ut_malloc_check((size_t)(w->nt + 1) * sizeof *order);
        for (int i = 0; i < w->nt; i++) order[i] = i;
        for (int i = 1; i < w->nt; i++) /* insertion sort by name: a model's few hundred tensors */
            for (int j = i; j > 0 && strcmp(w->names[order[j - 1]], w->names[order[j]]) > 0; j--) {
                int x = order[j];
                order[j] = order[j - 1], order[j - 1] = x;
            }
        uLong crc = meta_crc(w->mo.kv);
        for (int i = 0; i < w->nt; i++) crc = crc32_combine(crc, w->crc[order[i]], (z_off_t)w->len[order[i]]);
        ut_free(order);
        char sum[16];
        snprintf(sum, sizeof sum, "%08" PRIx32, (uint32_t)crc);
        rc = ut_st_writer_set_meta(w->w, CHECKSUM_KEY, sum, err, en);
    }
    if (w->w && ut_st_writer_close(w->w, commit && !rc, err, en)) rc = -1;
    for (int i = 0; i < w->nt; i++) ut_free(w->names[i]);
    ut_free(w->names);
    ut_free(w->bytes);
    ut_free(w->crc);
    ut_free(w->len);
    ut_free(w->path);
    ut_free(w);
    return rc;
}

/* The optimizer must cover the whole parameter buffer: its state buffers
 * are saved as flat tensors of every parameter's state (a sharded strategy
 * gathers them first). */
static void assert_full_cover(const ut_model *m, const ut_optim *o) {
    int ns = ut_optim_nstate(o);
    UT_ASSERT(ns <= MAX_STATE);
    for (int i = 0; i < ns; i++) {
        int64_t want = 0;
        for (int k = 0; k < m->params.n; k++) want += ut_optim_seg_state_len(ut_optim_get_config(o), i, &m->params.segs[k]);
        UT_ASSERT(ut_optim_state_len(o, i) == want);
    }
}

int ut_ckpt_save(const char *path, const ut_model *m, ut_optim *o, const ut_train_state *st,
                 char *err, size_t n) {
    const ut_params *p = &m->params;
    UT_ASSERT(st);
    int ns = o ? ut_optim_nstate(o) : 0;
    if (o) assert_full_cover(m, o);
    ut_ckpt_entry *e = ut_calloc_check((size_t)p->n + 1, sizeof *e);
    for (int i = 0; i < p->n; i++) {
        e[i] = (ut_ckpt_entry){.name = p->names[i], .ndim = p->t[i]->ndim};
        memcpy(e[i].shape, p->t[i]->ne, (size_t)p->t[i]->ndim * sizeof *e[i].shape);
    }
    char state[MAX_STATE * 24] = "";
    if (o) ut_ckpt_state_names(o, state, sizeof state);
    ut_ckpt_writer *w = ut_ckpt_writer_open(path, m->type, p->n, e, o ? state : NULL, o ? ut_optim_steps(o) : 0,
                                            st, err, n);
    ut_free(e);
    if (!w) return -1;
    /* the file is written from host memory: the flat buffers and the
     * optimizer's state through host stages (themselves on the CPU) */
    const ut_backend *be = ut_backend_get(p->device);
    size_t bytes = (size_t)p->numel * sizeof(float);
    ut_stage stage;
    int rc = ut_ckpt_writer_put(w, ut_stage_begin(&stage, be, p->flat, bytes, true), p->numel, err, n);
    ut_stage_end(&stage, false);
    const ut_backend *obe = o ? ut_backend_get(ut_optim_get_config(o)->device) : be; /* host with ZeRO-Offload */
    for (int i = 0; i < ns && !rc; i++) {
        const char *name;
        float *buf = ut_optim_state(o, i, &name);
        int64_t len = ut_optim_state_len(o, i);
        rc = ut_ckpt_writer_put(w, ut_stage_begin(&stage, obe, buf, (size_t)len * sizeof(float), true), len, err, n);
        ut_stage_end(&stage, false);
    }
    return ut_ckpt_writer_close(w, !rc, rc ? NULL : err, n) || rc ? -1 : 0;
}

/* ---------------------------------------------------------------- load */

/* A tensor's record: its prefix and bytes, read a piece at a time from a
 * file opened whole or by its index. */
static bool file_crc(const void *src, const char *name, uLong *crc) {
    const ut_st_file *f = src;
    int i = ut_st_index(f, name);
    const ut_st_tensor t = *ut_st_get(f, name); /* (a file's bytes, not tensor data: read through a copy) */
    *crc = crc_prefix(*crc, name, t.dtype, t.ndim, t.shape, NULL);
    if (t.data) {
        *crc = crc_bytes(*crc, t.data, t.nbytes);
        return true;
    }
    enum { PIECE = 8 << 20 };
    unsigned char *buf = ut_malloc_check(t.nbytes < PIECE ? t.nbytes + 1 : PIECE);
    bool ok = true;
    for (size_t at = 0; at < t.nbytes && ok; at += PIECE) {
        size_t k = t.nbytes - at < PIECE ? t.nbytes - at : PIECE;
        ok = !ut_st_read(f, i, at, buf, k, NULL, 0);
        if (ok) *crc = crc_bytes(*crc, buf, k);
    }
    ut_free(buf);
    return ok;
}

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
    uint32_t sum;
    bool read = checksum(kv, names, nt, file_crc, f, &sum);
    ut_free(names);
    if (!read) return ut_errorf(err, n, "%s: cannot read the file's tensors to check its checksum", path);
    char want[16];
    snprintf(want, sizeof want, "%08" PRIx32, sum);
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
        {"train.schedule_held", st->schedule_held, 0, st->step},
        {"train.input_tokens_seen", st->input_tokens_seen, 0, INT64_MAX},
        {"train.flos_tokens", st->flos_tokens, 0, INT64_MAX},
        {"optim.plateau_bad_evals", st->plateau_state.bad, 0, st->step},
        {"optim.plateau_cooldown", st->plateau_state.cooldown, 0, INT64_MAX},
        {"optim.greedy_good_evals", st->plateau_state.good, 0, st->step},
        {"optim.greedy_warmup_left", st->plateau_state.warmup, 0, INT64_MAX},
        {"optim.greedy_reset_left", st->plateau_state.reset_left, st->greedy ? 1 : 0, INT64_MAX},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < f[i].lo || f[i].v > f[i].hi)
            return ut_errorf(err, n, "%s: metadata \"%s\" is %lld, outside [%lld, %lld]%s", path,
                             f[i].key, (long long)f[i].v, (long long)f[i].lo, (long long)f[i].hi,
                             f[i].hi == st->step ? " (at most train.step)" : "");
    if (st->best_step >= 0 && !isfinite(st->best_metric))
        return ut_errorf(err, n, "%s: metadata \"train.best_metric\" is %g at best step %lld: a kept best "
                                 "checkpoint has a finite metric", path, st->best_metric, (long long)st->best_step);
    if (st->plateau && !(st->plateau_state.lr >= 0 && isfinite(st->plateau_state.lr)))
        return ut_errorf(err, n, "%s: metadata \"optim.plateau_lr\" is %g, not a learning rate", path,
                         st->plateau_state.lr);
    if (st->plateau && isnan(st->plateau_state.best))
        return ut_errorf(err, n, "%s: metadata \"optim.plateau_best\" is NaN: the best is a metric seen, or +-inf "
                                 "before the first", path);
    if (!(st->rng[0] | st->rng[1] | st->rng[2] | st->rng[3]))
        return ut_errorf(err, n, "%s: metadata \"train.rng\" is all zeros, not a generator state",
                         path);
    return 0;
}

/* Format, checksum, then every metadata value this loader needs; type: the
 * model's (NULL: any). */
static int check_meta(const char *path, const ut_st_file *f, const char *type_want, ut_train_state *st,
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
        return ut_errorf(err, n, "%s: malformed training state in the metadata (train.*, amp.*, optim.plateau_*, optim.greedy_*)", path);
    if (check_state(path, st, err, n)) return -1;
    const char *type = ut_st_meta(f, meta_keys[K_MODEL_TYPE]);
    if (type_want && strcmp(type, type_want))
        return ut_errorf(err, n, "%s: checkpoint is of a \"%s\" model, this model is \"%s\"", path, type,
                    type_want);
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

/* The first of n floats that is not finite (or, with nonneg, negative), -1 if none. */
static int64_t first_bad(const float *v, int64_t n, bool nonneg) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]) || (nonneg && v[i] < 0)) return i;
    return -1;
}

/* The parameter tensor called name in f ("model.<name>") with this shape,
 * or NULL with err. */
static const ut_st_tensor *param_tensor(const char *path, const ut_st_file *f, const char *pname, int ndim,
                                        const int64_t *shape, char *err, size_t n) {
    char name[512];
    snprintf(name, sizeof name, "model.%s", pname);
    const ut_st_tensor *t = ut_st_get(f, name);
    if (!t) return ut_errorf(err, n, "%s: parameter %s is missing from the checkpoint", path, pname), NULL;
    if (!same_shape(t, ndim, shape)) {
        snprintf(name, sizeof name, "parameter %s", pname);
        return shape_mismatch(path, name, t, ndim, shape, err, n), NULL;
    }
    return t;
}

static int check_params(const char *path, const ut_st_file *f, const ut_model *m, char *err, size_t n) {
    const ut_params *p = &m->params;
    for (int i = 0; i < p->n; i++) {
        const ut_st_tensor *t = param_tensor(path, f, p->names[i], p->t[i]->ndim, p->t[i]->ne, err, n);
        if (!t) return -1;
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
    if (!strcmp(names, "exp_avg")) return "Lion (exp_avg)";
    if (!strcmp(names, "exp_avg_sq_factored")) return "Adafactor (exp_avg_sq_factored)";
    if (!strcmp(names, "exp_avg_sq_factored,exp_avg")) return "Adafactor with beta1 (exp_avg_sq_factored, exp_avg)";
    if (!*names) return "SGD without momentum (no state)";
    return names;
}

static int64_t state_offsets_of(const ut_st_file *f, const char *state, int64_t *off);

/* The optimizer's metadata and state tensors against the state names want
 * (each the sum of the file's parameters' states: ut_optim_seg_state_len's
 * rule); the step count into *steps. Values are checked
 * where they are read (whole files here, index files by the reader). */
static int check_optim(const char *path, const ut_st_file *f, const char *want, int64_t *steps, char *err, size_t n) {
    const char *have = ut_st_meta(f, meta_keys[K_OPTIM_STATE]);
    const char *steps_s = ut_st_meta(f, meta_keys[K_OPTIM_STEPS]);
    if (!have || !steps_s)
        return ut_errorf(err, n, "%s: the checkpoint holds no optimizer state, the model's weights alone (as "
                                 "train.save_only_model writes them): a run cannot resume from it", path);
    if (!parse_i64(steps_s, steps) || *steps < 0)
        return ut_errorf(err, n, "%s: malformed optim.steps \"%s\"", path, steps_s);
    if (strcmp(have, want))
        return ut_errorf(err, n, "%s: the checkpoint's optimizer is %s but this optimizer is %s", path,
                         describe_state(have), describe_state(want));
    char sn[MAX_STATE][24];
    int ns = split_states(want, sn);
    for (int i = 0; i < ns; i++) {
        char name[64];
        snprintf(name, sizeof name, "optim.%s", sn[i]);
        const ut_st_tensor *t = ut_st_get(f, name);
        if (!t) return ut_errorf(err, n, "%s: optimizer state %s is missing", path, name);
        int64_t *off = ut_malloc_check((size_t)(ut_st_count(f) + 1) * sizeof *off);
        int64_t numel = state_offsets_of(f, sn[i], off); /* the file's parameters' states */
        ut_free(off);
        if (!same_shape(t, 1, &numel)) return shape_mismatch(path, name, t, 1, &numel, err, n);
        const ut_st_tensor whole = *t; /* an index file's tensors have no bytes here */
        if (!whole.data) continue;
        /* second moments are squares: never negative */
        bool square = square_state(sn[i]);
        int64_t bad = ut_st_first_bad(t, square);
        if (bad >= 0)
            return ut_errorf(err, n, "%s: optimizer state %s holds %g at element %lld: %s", path, name,
                             ut_st_float(t, bad), (long long)bad,
                             square ? "a second moment must be finite and >= 0" : "the state is damaged (non-finite)");
    }
    return 0;
}

/* Where each "model.*" tensor's values start in state `state` (NULL: one
 * float per element): the parameters in the file's order (the order of the
 * model that wrote it), into off[] by tensor index (-1 for the other
 * tensors); the total. */
static int64_t state_offsets_of(const ut_st_file *f, const char *state, int64_t *off) {
    int nt = ut_st_count(f), k = 0;
    int *idx = ut_malloc_check((size_t)(nt + 1) * sizeof *idx);
    for (int i = 0; i < nt; i++) {
        off[i] = -1;
        if (!strncmp(ut_st_name(f, i), "model.", 6)) idx[k++] = i;
    }
    for (int i = 1; i < k; i++) /* by place in the file (a few hundred tensors) */
        for (int j = i; j > 0 && ut_st_offset(f, idx[j - 1]) > ut_st_offset(f, idx[j]); j--) {
            int x = idx[j];
            idx[j] = idx[j - 1], idx[j - 1] = x;
        }
    int64_t at = 0;
    for (int i = 0; i < k; i++) {
        off[idx[i]] = at;
        const ut_st_tensor *t = ut_st_get(f, ut_st_name(f, idx[i]));
        at += state ? state_len_of(state, t->ndim, t->shape) : ut_st_numel(t);
    }
    ut_free(idx);
    return at;
}

static int64_t state_offsets(const ut_st_file *f, int64_t *off) { return state_offsets_of(f, NULL, off); }

bool ut_ckpt_model_only(const char *path) {
    char err[256];
    ut_st_file *f = ut_st_open(path, err, sizeof err);
    if (!f) return false;
    bool only = ut_st_meta(f, meta_keys[K_FORMAT]) && !ut_st_meta(f, meta_keys[K_OPTIM_STATE]);
    ut_st_close(f);
    return only;
}

int ut_ckpt_load(const char *path, ut_model *m, ut_optim *o, ut_train_state *st, char *err,
                 size_t n) {
    ut_st_file *f = ut_st_open(path, err, n);
    if (!f) return -1;
    if (o) assert_full_cover(m, o);
    ut_train_state s;
    int64_t steps = 0;
    char want[MAX_STATE * 24] = "";
    if (o) ut_ckpt_state_names(o, want, sizeof want);
    if (check_meta(path, f, m->type, &s, err, n) || check_params(path, f, m, err, n) ||
        (o && check_optim(path, f, want, &steps, err, n))) {
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
     * copy to the flat buffers' backend, each parameter's segment from its
     * place in the file's order. */
    const ut_params *p = &m->params;
    char name[512];
    int64_t *off = ut_malloc_check((size_t)(ut_st_count(f) + 1) * sizeof *off);
    for (int i = 0; i < p->n; i++) {
        snprintf(name, sizeof name, "model.%s", p->names[i]);
        const ut_st_tensor t = *ut_st_get(f, name);
        UT_ASSERT(ut_tensor_set(p->t[i], t.data, t.nbytes) == 0);
    }
    for (int k = 0; o && k < ut_optim_nstate(o); k++) {
        const char *sn;
        float *buf = ut_optim_state(o, k, &sn);
        snprintf(name, sizeof name, "optim.%s", sn);
        const ut_st_tensor st_t = *ut_st_get(f, name);
        const float *src = st_t.data;
        const ut_backend *obe = ut_backend_get(ut_optim_get_config(o)->device);
        state_offsets_of(f, sn, off);
        int64_t at = 0; /* this parameter's state in buf: the states of those before it */
        for (int i = 0; i < p->n; i++) {
            int64_t len = ut_optim_seg_state_len(ut_optim_get_config(o), k, &p->segs[i]);
            snprintf(name, sizeof name, "model.%s", p->names[i]);
            obe->copy(buf + at, src + off[ut_st_index(f, name)], (size_t)len * sizeof(float), UT_COPY_H2D);
            at += len;
        }
    }
    ut_free(off);
    if (o) ut_optim_set_steps(o, steps);
    if (st) *st = s;
    ut_st_close(f);
    return 0;
}

/* ---------------------------------------------------------------- a piece at a time */

struct ut_ckpt_reader {
    ut_st_file *f;
    char *path;
    int64_t *off;   /* state_offsets */
    ut_train_state st;
};

ut_ckpt_reader *ut_ckpt_reader_open(const char *path, const char *type, ut_train_state *st, char *err, size_t n) {
    ut_st_file *f = ut_st_open_index(path, err, n);
    if (!f) return NULL;
    ut_ckpt_reader *r = ut_calloc_check(1, sizeof *r);
    r->f = f;
    r->path = str_cat(path, "");
    r->off = ut_malloc_check((size_t)(ut_st_count(f) + 1) * sizeof *r->off);
    state_offsets(f, r->off);
    if (check_meta(path, f, type, &r->st, err, n)) {
        ut_ckpt_reader_close(r);
        return NULL;
    }
    if (st) *st = r->st;
    return r;
}

void ut_ckpt_reader_close(ut_ckpt_reader *r) {
    if (!r) return;
    ut_st_close(r->f);
    ut_free(r->off);
    ut_free(r->path);
    ut_free(r);
}

int ut_ckpt_reader_nparams(const ut_ckpt_reader *r) {
    int k = 0;
    for (int i = 0; i < ut_st_count(r->f); i++) k += r->off[i] >= 0;
    return k;
}

const char *ut_ckpt_reader_param_name(const ut_ckpt_reader *r, int j) {
    for (int i = 0; i < ut_st_count(r->f); i++)
        if (r->off[i] >= 0 && j-- == 0) return ut_st_name(r->f, i) + 6;
    return NULL;
}

int ut_ckpt_reader_param(ut_ckpt_reader *r, const char *name, int ndim, const int64_t *shape, float *dst, char *err,
                         size_t n) {
    const ut_st_tensor *t = param_tensor(r->path, r->f, name, ndim, shape, err, n);
    if (!t) return -1;
    char fname[512];
    snprintf(fname, sizeof fname, "model.%s", name);
    if (ut_st_read(r->f, ut_st_index(r->f, fname), 0, dst, t->nbytes, err, n)) return -1;
    int64_t bad = first_bad(dst, (int64_t)(t->nbytes / sizeof(float)), false);
    if (bad >= 0)
        return ut_errorf(err, n, "%s: parameter %s holds %g at element %lld: the checkpoint's weights are "
                                 "damaged (non-finite)", r->path, name, dst[bad], (long long)bad);
    return 0;
}

int ut_ckpt_reader_optim(ut_ckpt_reader *r, const char *want, int64_t *steps, char *err, size_t n) {
    if (check_optim(r->path, r->f, want, steps, err, n)) return -1;
    if (*steps > r->st.step)
        return ut_errorf(err, n, "%s: metadata \"optim.steps\" is %lld, more than train.step %lld: the "
                                 "optimizer steps at most once per training step", r->path, (long long)*steps,
                         (long long)r->st.step);
    return 0;
}

int ut_ckpt_reader_state(ut_ckpt_reader *r, const char *state, const char *name, int64_t numel, float *dst,
                         char *err, size_t n) {
    char fname[512];
    snprintf(fname, sizeof fname, "model.%s", name);
    int i = ut_st_index(r->f, fname);
    snprintf(fname, sizeof fname, "optim.%s", state);
    int s = ut_st_index(r->f, fname);
    const ut_st_tensor *pt = i < 0 ? NULL : ut_st_get(r->f, ut_st_name(r->f, i));
    if (i < 0 || s < 0 || numel != state_len_of(state, pt->ndim, pt->shape))
        return ut_errorf(err, n, "%s: no %s state of %lld values for parameter %s", r->path, state, (long long)numel,
                         name);
    int64_t at = r->off[i];
    if (!strcmp(state, "exp_avg_sq_factored")) { /* the parameters' states are of their own sizes */
        int64_t *off = ut_malloc_check((size_t)(ut_st_count(r->f) + 1) * sizeof *off);
        state_offsets_of(r->f, state, off);
        at = off[i];
        ut_free(off);
    }
    if (ut_st_read(r->f, s, (size_t)at * sizeof(float), dst, (size_t)numel * sizeof(float), err, n)) return -1;
    bool square = square_state(state);
    int64_t bad = first_bad(dst, numel, square);
    if (bad >= 0)
        return ut_errorf(err, n, "%s: optimizer state optim.%s holds %g at element %lld: %s", r->path, state, dst[bad],
                         (long long)(at + bad),
                         square ? "a second moment must be finite and >= 0" : "the state is damaged (non-finite)");
    return 0;
}

int ut_ckpt_reader_state_range(ut_ckpt_reader *r, const char *state, const ut_params *p, int64_t lo, int64_t hi,
                               float *dst, char *err, size_t n) {
    if (!strcmp(state, "exp_avg_sq_factored")) /* ZeRO's shards would cut its matrices (config_check.c refuses) */
        return ut_errorf(err, n, "%s: Adafactor's factored state does not load into shards of the flat state", r->path);
    for (int i = 0; i < p->n; i++) {
        int64_t a = p->segs[i].offset, e = a + p->segs[i].numel;
        if (e <= lo || a >= hi) continue;
        int64_t from = a > lo ? a : lo, to = e < hi ? e : hi;
        char fname[512];
        snprintf(fname, sizeof fname, "model.%s", p->names[i]);
        int k = ut_st_index(r->f, fname);
        snprintf(fname, sizeof fname, "optim.%s", state);
        int s = ut_st_index(r->f, fname);
        if (k < 0 || s < 0 || ut_st_numel(ut_st_get(r->f, ut_st_name(r->f, k))) != p->segs[i].numel)
            return ut_errorf(err, n, "%s: no %s state of %lld values for parameter %s", r->path, state,
                             (long long)p->segs[i].numel, p->names[i]);
        if (ut_st_read(r->f, s, (size_t)(r->off[k] + from - a) * sizeof(float), dst + (from - lo),
                       (size_t)(to - from) * sizeof(float), err, n))
            return -1;
    }
    bool square = square_state(state);
    int64_t bad = first_bad(dst, hi - lo, square);
    if (bad >= 0)
        return ut_errorf(err, n, "%s: optimizer state optim.%s holds %g at flat element %lld: %s", r->path, state,
                         dst[bad], (long long)(lo + bad),
                         square ? "a second moment must be finite and >= 0" : "the state is damaged (non-finite)");
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
