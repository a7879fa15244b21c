/* Strategy names, shard sizes and the ZeRO-3 wrap policy: which parameters
 * are gathered together. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/dist.h"

static const char *const names[] = {
    [UT_DIST_DDP] = "ddp", [UT_DIST_ZERO1] = "zero1", [UT_DIST_ZERO2] = "zero2",
    [UT_DIST_ZERO3] = "zero3", [UT_DIST_DP] = "dp"};

int ut_dist_parse(const char *name, ut_dist_kind *out) {
    if (!strcmp(name, "fsdp")) {
        *out = UT_DIST_ZERO3;
        return 0;
    }
    for (int k = 0; k < (int)(sizeof names / sizeof names[0]); k++)
        if (!strcmp(name, names[k])) {
            *out = (ut_dist_kind)k;
            return 0;
        }
    return -1;
}

const char *ut_dist_name(ut_dist_kind k) {
    return (int)k >= 0 && (int)k < (int)(sizeof names / sizeof names[0]) ? names[k] : "?";
}

int64_t ut_shard_size(int64_t numel, int world) {
    UT_ASSERT(numel >= 0 && world >= 1);
    int64_t s = (numel + world - 1) / world;
    return (s + 15) / 16 * 16;
}

/* Length of the unit key of a parameter name (see ut_wrap_units). */
static size_t block_key_len(const char *name) {
    const char *p = name, *last_dot = NULL;
    while (*p) {
        const char *e = strchr(p, '.');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        bool digits = len > 0;
        for (size_t i = 0; i < len; i++) digits = digits && isdigit((unsigned char)p[i]);
        if (digits) return (size_t)(p - name) + len;
        if (!e) break;
        last_dot = e;
        p = e + 1;
    }
    return last_dot ? (size_t)(last_dot - name) : strlen(name);
}

int ut_wrap_units(const ut_params *p, const char *policy, int *unit_of, char *err, size_t n) {
    int units = 0;
    if (!strcmp(policy, "model")) {
        for (int i = 0; i < p->n; i++) unit_of[i] = 0;
        return p->n ? 1 : 0;
    }
    if (!strcmp(policy, "param")) {
        for (int i = 0; i < p->n; i++) unit_of[i] = i;
        return p->n;
    }
    if (strcmp(policy, "block"))
        return ut_errorf(err, n, "dist.wrap: unknown policy '%s' (block, param or model)", policy);
    for (int i = 0; i < p->n; i++) {
        size_t k = block_key_len(p->names[i]);
        bool same = i > 0 && block_key_len(p->names[i - 1]) == k &&
                    !strncmp(p->names[i - 1], p->names[i], k);
        if (!same) units++;
        unit_of[i] = units - 1;
    }
    return units;
}
