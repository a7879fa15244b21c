/* Values of schema keys: text -> field (with type, range and enum checks),
 * field -> canonical text, and "did you mean" for unknown keys. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_schema.h"
#include "utrain/base.h"
#include "utrain/io.h"

#define FIELD(c, k) ((char *)(c) + (k)->off)
#define CFIELD(c, k) ((const char *)(c) + (k)->off)
#define LIST_MAX 8   /* longest LIST row */

// --- parsing scalars

static bool parse_int(const char *s, long long *out) {
    char *end;
    errno = 0;
    *out = strtoll(s, &end, 10);
    return end != s && !*end && !errno;
}

static bool parse_float(const char *s, double *out) {
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return end != s && !*end && !errno && isfinite(*out);
}

/* YAML 1.1's spellings of a boolean, any case. */
static bool parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) return *out = true, true;
        if (!strcasecmp(s, no[i])) return *out = false, true;
    }
    return false;
}

int ut_cfg_flag(const char *key, const char *v, char *err, size_t n) {
    bool on;
    if (!parse_bool(v, &on)) return ut_errorf(err, n, "%s: expected true or false, got '%s'", key, v);
    return on;
}

void ut_cfg_range_text(const ut_cfg_key *k, char *buf, size_t n) {
    char lo[40] = "", hi[40] = "";
    if (k->lo) snprintf(lo, sizeof lo, "%s %g", k->lo == UT_CFG_GE ? ">=" : ">", k->min);
    if (k->hi) snprintf(hi, sizeof hi, "%s %g", k->hi == UT_CFG_LE ? "<=" : "<", k->max);
    snprintf(buf, n, "%s%s%s", lo, k->lo && k->hi ? " and " : "", hi);
}

static int check_range(const ut_cfg_key *k, const char *key, double x, char *err, size_t n) {
    bool ok = (k->lo != UT_CFG_GE || x >= k->min) && (k->lo != UT_CFG_GT || x > k->min) &&
              (k->hi != UT_CFG_LE || x <= k->max) && (k->hi != UT_CFG_LT || x < k->max);
    if (ok) return 0;
    char r[96];
    ut_cfg_range_text(k, r, sizeof r);
    snprintf(err, n, "%s: must be %s", key, r);
    return -1;
}

static int check_enum(const ut_cfg_key *k, const char *key, const char *v, char *err, size_t n) {
    for (const char *const *e = k->values; *e; e++)
        if (!strcmp(*e, v)) return 0;
    size_t len = (size_t)snprintf(err, n, "%s: '%s' is not one of", key, v);
    for (const char *const *e = k->values; *e && len < n; e++)
        len += (size_t)snprintf(err + len, n - len, "%s %s", e == k->values ? "" : ",", *e);
    return -1;
}

// --- text -> field

static int set_int(ut_config *c, const ut_cfg_key *k, const char *key, const char *v, char *err,
                   size_t n) {
    long long x;
    if (!parse_int(v, &x)) return snprintf(err, n, "%s: '%s' is not an integer", key, v), -1;
    if (check_range(k, key, (double)x, err, n)) return -1;
    if (k->size == sizeof(int64_t)) {
        *(int64_t *)FIELD(c, k) = x;
        return 0;
    }
    if (x > INT32_MAX || x < INT32_MIN)
        return snprintf(err, n, "%s: must be between %d and %d", key, INT32_MIN, INT32_MAX), -1;
    *(int *)FIELD(c, k) = (int)x;
    return 0;
}

static int set_str(ut_config *c, const ut_cfg_key *k, const char *key, const char *v, char *err,
                   size_t n) {
    if (strlen(v) >= k->size)
        return snprintf(err, n, "%s: longer than %zu characters", key, k->size - 1), -1;
    strcpy(FIELD(c, k), v);
    return 0;
}

static int set_float(double *dst, const ut_cfg_key *k, const char *key, const char *v, char *err,
                     size_t n) {
    double x;
    if (!parse_float(v, &x)) return snprintf(err, n, "%s: '%s' is not a number", key, v), -1;
    if (check_range(k, key, x, err, n)) return -1;
    *dst = x;
    return 0;
}

/* "[a, b]" or "a,b" -> its items, trimmed, in place. Returns the count, or
 * max + 1 when there are more than max. */
static int split_list(char *s, char **items, int max) {
    size_t len = strlen(s);
    if (len >= 2 && s[0] == '[' && s[len - 1] == ']') s[len - 1] = 0, s++;
    int count = 0;
    char *save;
    for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        for (char *e = tok + strlen(tok); e > tok && e[-1] == ' ';) *--e = 0;
        if (count == max) return max + 1;
        items[count++] = tok;
    }
    return count;
}

static int set_list(ut_config *c, const ut_cfg_key *k, const char *key, const char *v, char *err,
                    size_t n) {
    char buf[UT_CFG_STR_MAX], *items[LIST_MAX];
    double x[LIST_MAX];
    snprintf(buf, sizeof buf, "%s", v);
    int count = split_list(buf, items, LIST_MAX);
    if (count != k->count)
        return snprintf(err, n, "%s: expected a list of %d numbers, got '%s'", key, k->count, v), -1;
    for (int i = 0; i < count; i++)
        if (set_float(&x[i], k, key, items[i], err, n)) return -1;
    memcpy(FIELD(c, k), x, (size_t)count * sizeof(double));
    return 0;
}

static int set_value(ut_config *c, const ut_cfg_key *k, const char *key, const char *v, char *err,
                     size_t n) {
    switch (k->type) {
    case UT_CFG_ENUM:
        if (check_enum(k, key, v, err, n)) return -1;
        return set_str(c, k, key, v, err, n);
    case UT_CFG_STR: return set_str(c, k, key, v, err, n);
    case UT_CFG_INT: return set_int(c, k, key, v, err, n);
    case UT_CFG_FLOAT: return set_float((double *)FIELD(c, k), k, key, v, err, n);
    case UT_CFG_BOOL:
        if (!parse_bool(v, (bool *)FIELD(c, k)))
            return snprintf(err, n, "%s: '%s' is not true or false", key, v), -1;
        return 0;
    case UT_CFG_LIST: return set_list(c, k, key, v, err, n);
    }
    return -1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* greater_is_better follows best_metric until the user sets it; an interval
 * given means steps until the user names the strategy (FlagAI's eval_interval
 * and save_interval have no strategy key). */
static void after_set(ut_config *c, const ut_cfg_key *k) {
    if (k->off == offsetof(ut_config, model_name)) c->model_name_set = true;
    if (k->off == offsetof(ut_config, device)) c->device_from_env = false;
    if (k->off == offsetof(ut_config, greater_is_better)) c->greater_is_better_set = true;
    if (k->off == offsetof(ut_config, best_metric) && !c->greater_is_better_set)
        c->greater_is_better = !ends_with(c->best_metric, "loss") && !ends_with(c->best_metric, "perplexity");
    if (k->off == offsetof(ut_config, eval_strategy)) c->eval_strategy_set = true;
    if (k->off == offsetof(ut_config, min_lr)) c->min_lr_set = true;
    if (k->off == offsetof(ut_config, save_strategy)) c->save_strategy_set = true;
    if (k->off == offsetof(ut_config, eval_interval) && c->eval_interval > 0 && !c->eval_strategy_set)
        strcpy(c->eval_strategy, "steps");
    if (k->off == offsetof(ut_config, save_interval) && c->save_interval > 0 && !c->save_strategy_set)
        strcpy(c->save_strategy, "steps");
    if (k->off == offsetof(ut_config, save_steps_ratio) && c->save_steps_ratio > 0 && !c->save_strategy_set)
        strcpy(c->save_strategy, "steps");
    if (k->off == offsetof(ut_config, eval_steps_fraction) && c->eval_steps_fraction > 0 && !c->eval_strategy_set)
        strcpy(c->eval_strategy, "steps");
    if (k->off == offsetof(ut_config, save_steps_fraction) && c->save_steps_fraction > 0 && !c->save_strategy_set)
        strcpy(c->save_strategy, "steps");
}

/* model.pretrained before model.name is given: the model named by the
 * directory's config.json model_type, when utrain has it (bert, roberta, gpt2,
 * bart, t5 and mt5); an unreadable directory is reported when the model is built. */
static void name_from_pretrained(ut_config *c, const char *dir) {
    char why[512];
    ut_kv *kv = ut_hf_config_read(dir, why, sizeof why);
    const char *type = kv ? ut_kv_get(kv, "model_type") : NULL;
    if (type && (!strcmp(type, "bert") || !strcmp(type, "roberta") || !strcmp(type, "gpt2") ||
                 !strcmp(type, "bart") || !strcmp(type, "t5")))
        snprintf(c->model_name, sizeof c->model_name, "%s", type);
    if (type && !strcmp(type, "mt5")) snprintf(c->model_name, sizeof c->model_name, "t5"); /* mT5: T5 v1.1's layout */
    if (kv) ut_kv_free(kv);
}

/* A bracketed list ("[784, 128, 10]") is stored as "784,128,10"; other
 * values as given. */
static void set_model_opt(ut_config *c, const char *name, const char *v) {
    size_t len = strlen(v);
    if (len < 2 || v[0] != '[' || v[len - 1] != ']') {
        ut_kv_set(c->model_opts, name, v);
        return;
    }
    char *buf = ut_malloc_check(len + 1), *out = ut_malloc_check(len + 1), **items;
    items = ut_malloc_check((len + 1) * sizeof(char *));
    strcpy(buf, v);
    int count = split_list(buf, items, (int)len);
    out[0] = 0;
    for (int i = 0; i < count; i++) strcat(strcat(out, i ? "," : ""), items[i]);
    ut_kv_set(c->model_opts, name, out);
    ut_free(items);
    ut_free(out);
    ut_free(buf);
}

// --- the seed trainers' distributed flags

/* Flags of other trainers (the seed's is_distributed, fairscale, Hugging
 * Face's sharded_ddp / fsdp, DeepSpeed's stage) mapped onto dist.strategy, or
 * refused with what to write instead. 1: handled (*strategy set, or "" for
 * nothing to do), 0: not such a flag, -1: refused (err). */
static int seed_flag(const char *key, const char *v, const char **strategy, char *err, size_t n) {
    static const struct { const char *key, *on; } bools[] = {
        {"is_distributed", "ddp"}, {"fairscale_oss", "zero1"}, {"fairscale_sdp", "zero2"},
        {"fairscale_fsdp", "zero3"}};
    static const struct { const char *key, *value, *strategy; } values[] = {
        {"sharded_ddp", "simple", "zero2"},     {"sharded_ddp", "zero_dp_2", "zero2"},
        {"sharded_ddp", "zero_dp_3", "zero3"},  {"fsdp", "full_shard", "zero3"},
        {"fsdp", "shard_grad_op", "zero2"},     {"fsdp", "no_shard", "ddp"},
        {"zero_stage", "0", "ddp"},             {"zero_stage", "1", "zero1"},
        {"zero_stage", "2", "zero2"},           {"zero_stage", "3", "zero3"}};
    *strategy = "";
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        if (strcmp(key, bools[i].key)) continue;
        int on = ut_cfg_flag(key, v, err, n);
        if (on < 0) return -1;
        if (on) *strategy = bools[i].on;
        return 1; /* false: nothing to do (the world size comes from the launcher) */
    }
    bool known = false;
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        if (strcmp(key, values[i].key)) continue;
        known = true;
        if (!strcmp(v, values[i].value)) {
            *strategy = values[i].strategy;
            return 1;
        }
    }
    if (known)
        return ut_errorf(err, n,
                         "%s: '%s' has no utrain equivalent (dist.strategy: ddp, zero1, zero2, zero3 "
                         "or dp; see docs/distributed.md)",
                         key, v);
    if (!strcmp(key, "local_rank") || !strcmp(key, "world_size") || !strcmp(key, "rank"))
        return ut_errorf(err, n,
                         "%s: ranks and the world size come from the launcher (mpirun, srun) or "
                         "--nproc N / dist.nproc_per_node, not from the config",
                         key);
    return 0;
}

/* Model option names go back into config.yml as plain YAML keys, so they
 * are limited to characters that need no quoting. */
static bool option_name_ok(const char *s) {
    if (!isalnum((unsigned char)*s) && *s != '_') return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.') return false;
    return true;
}

int ut_cfg_assign(ut_config *c, const char *key, const char *value, char *err, size_t n) {
    const char *strategy;
    int cf = ut_cfg_compat(c, key, value, err, n);
    if (cf) return cf < 0 ? -1 : 0;
    int one;
    if (!strcmp(key, "is_distributed") && (one = ut_cfg_flag(key, value, NULL, 0)) >= 0) c->one_process = !one;
    int sf = seed_flag(key, value, &strategy, err, n);
    if (sf < 0) return -1;
    if (sf > 0) return *strategy ? ut_cfg_assign(c, "dist.strategy", strategy, err, n) : 0;
    const char *canon = ut_cfg_resolve(key);
    if (ut_cfg_is_model_opt(canon)) {
        if (!option_name_ok(canon + strlen("model.")))
            return ut_errorf(err, n, "%s: not a model option name (letters, digits, '_', '-' and '.', "
                                     "starting with a letter, digit or '_')", key);
        set_model_opt(c, canon + strlen("model."), value);
        if (!strcmp(canon, "model.pretrained") && !c->model_name_set) name_from_pretrained(c, value);
        return 0;
    }
    const ut_cfg_key *k = ut_cfg_find(canon);
    if (!k) {
        char hint[400];
        ut_cfg_suggest(key, hint, sizeof hint);
        snprintf(err, n, "%s: unknown key%s", key, hint);
        return -1;
    }
    if (set_value(c, k, key, value, err, n)) return -1;
    after_set(c, k);
    return 0;
}

// --- field -> text

/* The shortest text that reads back as x, always with a '.' (YAML 1.1 reads
 * "1e-08" as a string): 0.001, 1.0e-08, 2.0. */
static void format_double(double x, char *buf, size_t n) {
    char s[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, x);
        if (strtod(s, NULL) == x) break;
    }
    char *e = strchr(s, 'e');
    if (strchr(s, '.'))
        snprintf(buf, n, "%s", s);
    else if (e)
        snprintf(buf, n, "%.*s.0%s", (int)(e - s), s, e);
    else
        snprintf(buf, n, "%s.0", s);
}

void ut_cfg_format(const ut_config *c, const ut_cfg_key *k, char *buf, size_t n) {
    const char *f = CFIELD(c, k);
    switch (k->type) {
    case UT_CFG_STR:
    case UT_CFG_ENUM: snprintf(buf, n, "%s", f); return;
    case UT_CFG_INT:
        snprintf(buf, n, "%lld", k->size == sizeof(int64_t) ? (long long)*(const int64_t *)f
                                                           : (long long)*(const int *)f);
        return;
    case UT_CFG_FLOAT: format_double(*(const double *)f, buf, n); return;
    case UT_CFG_BOOL: snprintf(buf, n, "%s", *(const bool *)f ? "true" : "false"); return;
    case UT_CFG_LIST: snprintf(buf, n, "%s", ""); return;   /* its elements are rows */
    }
}

int ut_cfg_check_value(const ut_config *c, const ut_cfg_key *k, char *err, size_t n) {
    const char *f = CFIELD(c, k);
    switch (k->type) {
    case UT_CFG_STR:
        if (!memchr(f, 0, k->size)) return snprintf(err, n, "%s: not terminated", k->key), -1;
        return 0;
    case UT_CFG_ENUM: return check_enum(k, k->key, f, err, n);
    case UT_CFG_INT:
        return check_range(k, k->key, k->size == sizeof(int64_t) ? (double)*(const int64_t *)f
                                                                : (double)*(const int *)f,
                           err, n);
    case UT_CFG_FLOAT:
        if (!isfinite(*(const double *)f))
            return snprintf(err, n, "%s: must be a finite number", k->key), -1;
        return check_range(k, k->key, *(const double *)f, err, n);
    case UT_CFG_BOOL:
    case UT_CFG_LIST: return 0;   /* LIST elements are rows of their own */
    }
    return 0;
}

// --- did you mean

static int edit_distance(const char *a, const char *b) {
    enum { MAXLEN = 128 };
    int la = (int)strnlen(a, MAXLEN - 1), lb = (int)strnlen(b, MAXLEN - 1);
    int prev[MAXLEN], cur[MAXLEN];
    for (int j = 0; j <= lb; j++) prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        for (int j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
    }
    return prev[lb];
}

static const char *leaf(const char *key) {
    const char *dot = strrchr(key, '.');
    return dot ? dot + 1 : key;
}

/* Near in spelling, or the same last part in another section (train.lr ->
 * optim.lr; trian.epochs -> train.epochs). */
static int distance(const char *key, const char *cand) {
    int whole = edit_distance(key, cand), part = edit_distance(leaf(key), leaf(cand)) + 1;
    return whole < part ? whole : part;
}

/* Candidates: keys, aliases and section names; a suggestion must be within
 * 1 + len/3 edits, so short nonsense gets none. */
/* A DeepSpeed JSON block pasted into the YAML (zero_optimization: {stage: 2}):
 * its keys belong in the JSON file that deepspeed_config reads. */
static bool deepspeed_hint(const char *key, char *buf, size_t n) {
    static const char *const tops[] = {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size",
                                       "gradient_clipping", "optimizer", "scheduler", "fp16", "bf16",
                                       "zero_allow_untested_optimizer", "steps_per_print", "wall_clock_breakdown",
                                       "activation_checkpointing"};
    size_t top = strcspn(key, ".");
    for (size_t i = 0; i < sizeof tops / sizeof tops[0]; i++) {
        if (strlen(tops[i]) != top || strncmp(key, tops[i], top)) continue;
        snprintf(buf, n, " (a DeepSpeed setting: keep DeepSpeed's JSON in its own file and write "
                         "deepspeed_config: FILE, which sets the utrain keys it means%s; docs/config.md)",
                 !strcmp(key, "zero_optimization.stage") ? ", or write dist.strategy: zero1, zero2 or zero3 here"
                 : !strcmp(key, "train_micro_batch_size_per_gpu") ? ", or write train.batch_size here"
                 : !strcmp(key, "gradient_clipping") ? ", or write train.grad_clip here" : "");
        return true;
    }
    return false;
}

/* A section's name written as a key (train: 3, --set optim=adamw): name one
 * of its keys instead. */
static bool section_hint(const char *key, char *buf, size_t n) {
    for (int s = 1; s < ut_cfg_nsections; s++) {
        if (strcmp(key, ut_cfg_sections[s])) continue;
        size_t len = strlen(key);
        for (int i = 0; i < ut_cfg_nkeys; i++)
            if (!strncmp(ut_cfg_schema[i].key, key, len) && ut_cfg_schema[i].key[len] == '.') {
                snprintf(buf, n, " (%s is a section: give one of its keys a value, e.g. %s; "
                                 "utrain config --doc lists them)", key, ut_cfg_schema[i].key);
                return true;
            }
    }
    return false;
}

void ut_cfg_suggest_among(const char *const *cands, const char *word, size_t len, char *buf, size_t n) {
    char w[64];
    snprintf(w, sizeof w, "%.*s", (int)(len < sizeof w ? len : sizeof w - 1), word);
    const char *best = NULL;
    int best_d = 2 + (int)strlen(w) / 3;
    for (int i = 0; cands[i]; i++) {
        int d = edit_distance(w, cands[i]);
        if (d < best_d) best_d = d, best = cands[i];
    }
    snprintf(buf, n, best ? " (did you mean %s?)" : "%s", best ? best : "");
}

void ut_cfg_suggest(const char *key, char *buf, size_t n) {
    if (deepspeed_hint(key, buf, n) || section_hint(key, buf, n)) return;
    const char *best = NULL;
    int best_d = 2 + (int)strlen(key) / 3;   /* suggestions must be nearer than this */
    int total = ut_cfg_nkeys + ut_cfg_naliases + ut_cfg_nsections;
    for (int i = 0; i < total; i++) {
        const char *cand = i < ut_cfg_nkeys ? ut_cfg_schema[i].key
                           : i < ut_cfg_nkeys + ut_cfg_naliases
                               ? ut_cfg_aliases[i - ut_cfg_nkeys].alias
                               : ut_cfg_sections[i - ut_cfg_nkeys - ut_cfg_naliases];
        int d = *cand ? distance(key, cand) : best_d;
        if (d < best_d) best_d = d, best = cand;
    }
    if (best)
        snprintf(buf, n, " (did you mean %s?)", best);
    else
        snprintf(buf, n, "%s", "");
}
