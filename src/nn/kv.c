/* Model options: a small string map with typed readers. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/nn.h"

struct ut_kv {
    char **keys, **vals;
    int n, cap;
};

ut_kv *ut_kv_new(void) { return ut_calloc_check(1, sizeof(ut_kv)); }

void ut_kv_free(ut_kv *kv) {
    if (!kv) return;
    for (int i = 0; i < kv->n; i++) {
        ut_free(kv->keys[i]);
        ut_free(kv->vals[i]);
    }
    ut_free(kv->keys);
    ut_free(kv->vals);
    ut_free(kv);
}

static char *dup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(ut_malloc_check(n), s, n);
}

void ut_kv_set(ut_kv *kv, const char *key, const char *value) {
    for (int i = 0; i < kv->n; i++)
        if (strcmp(kv->keys[i], key) == 0) {
            ut_free(kv->vals[i]);
            kv->vals[i] = dup(value);
            return;
        }
    if (kv->n == kv->cap) {
        kv->cap = kv->cap ? 2 * kv->cap : 8;
        kv->keys = ut_realloc_check(kv->keys, kv->cap * sizeof(char *));
        kv->vals = ut_realloc_check(kv->vals, kv->cap * sizeof(char *));
    }
    kv->keys[kv->n] = dup(key);
    kv->vals[kv->n++] = dup(value);
}

void ut_kv_update(ut_kv *kv, const ut_kv *from) {
    for (int i = 0; i < ut_kv_len(from); i++) ut_kv_set(kv, ut_kv_key(from, i), ut_kv_get(from, ut_kv_key(from, i)));
}

const char *ut_kv_get(const ut_kv *kv, const char *key) {
    for (int i = 0; kv && i < kv->n; i++)
        if (strcmp(kv->keys[i], key) == 0) return kv->vals[i];
    return NULL;
}

int ut_kv_len(const ut_kv *kv) { return kv ? kv->n : 0; }
const char *ut_kv_key(const ut_kv *kv, int i) { return kv && i >= 0 && i < kv->n ? kv->keys[i] : NULL; }

static int bad(char *err, size_t n, const char *key, const char *v, const char *what) {
    snprintf(err, n, "option '%s': '%s' is not %s", key, v, what);
    return -1;
}

int ut_kv_int(const ut_kv *kv, const char *key, long long def, long long *out, char *err, size_t n) {
    const char *v = ut_kv_get(kv, key);
    if (!v) return *out = def, 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno) return bad(err, n, key, v, "an integer");
    *out = x;
    return 0;
}

int ut_kv_float(const ut_kv *kv, const char *key, double def, double *out, char *err, size_t n) {
    const char *v = ut_kv_get(kv, key);
    if (!v) return *out = def, 0;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno) return bad(err, n, key, v, "a number");
    if (!isfinite(x)) return bad(err, n, key, v, "a finite number"); /* dropout: nan, layer_norm_epsilon: inf */
    *out = x;
    return 0;
}

int ut_kv_bool(const ut_kv *kv, const char *key, bool def, bool *out, char *err, size_t n) {
    const char *v = ut_kv_get(kv, key);
    if (!v) return *out = def, 0;
    if (!strcmp(v, "true") || !strcmp(v, "1")) return *out = true, 0;
    if (!strcmp(v, "false") || !strcmp(v, "0")) return *out = false, 0;
    return bad(err, n, key, v, "true or false");
}

int ut_kv_ints(const ut_kv *kv, const char *key, long long *out, int max, int *count, char *err,
               size_t n) {
    const char *v = ut_kv_get(kv, key);
    *count = 0;
    if (!v) return 0;
    const char *p = v;
    while (*p == ' ' || *p == '[') p++;
    while (*p && *p != ']') {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno) return bad(err, n, key, v, "a list of integers");
        if (*count == max) {
            snprintf(err, n, "option '%s': more than %d values", key, max);
            return -1;
        }
        out[(*count)++] = x;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') p++;
        while (*p == ' ') p++;
    }
    if (*p == ']') p++;
    while (*p == ' ') p++;
    if (*p) return bad(err, n, key, v, "a list of integers");
    return 0;
}

int ut_kv_check_keys(const ut_kv *kv, const char *const *known, const char *what, char *err,
                     size_t n) {
    for (int i = 0; i < ut_kv_len(kv); i++) {
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++) ok = strcmp(*k, kv->keys[i]) == 0;
        if (ok) continue;
        size_t len = (size_t)snprintf(err, n, "unknown option '%s' for %s (known:", kv->keys[i], what);
        for (const char *const *k = known; *k && len < n; k++)
            len += (size_t)snprintf(err + len, n - len, " %s", *k);
        if (len < n) snprintf(err + len, n - len, ")");
        return -1;
    }
    return 0;
}

int ut_kv_read_fields(const ut_kv *kv, const ut_kv_field *f, int nf, long long lo, long long hi, const char *range,
                      void *base, const char *model, char *err, size_t n) {
    for (int i = 0; i < nf; i++) {
        long long v;
        if (ut_kv_int(kv, f[i].key, f[i].def, &v, err, n)) return -1;
        if (v < lo || v > hi)
            return range ? ut_errorf(err, n, "%s: %s %lld is outside %s [%lld, %lld)", model, f[i].key, v, range, lo,
                                     hi + 1)
                         : ut_errorf(err, n, "%s: %s %lld is outside [%lld, %lld]", model, f[i].key, v, lo, hi);
        *(int64_t *)((char *)base + f[i].at) = v;
    }
    return 0;
}
