/* The deterministic parameter generator shared with tests/parity/make_fixtures.py
 * (see its docstring), so fixtures need not store initial values. Bit-identical
 * to the numpy version as long as float products and sums are rounded one at
 * a time: the Makefile's -std=c11 turns GCC's fused multiply-add contraction
 * off (-ffp-contract=off), and x86-64 evaluates float in float (SSE).
 * defines: fx_splitmix64, fx_uniform_pm1, fx_param_value_scale, fx_fill_model. */
#ifndef UTRAIN_FIXTURE_INIT_H
#define UTRAIN_FIXTURE_INIT_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tensor_host.h"
#include "utrain/nn.h"

static inline uint64_t fx_splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* 2u - 1 in [-1, 1) for element i of parameter number p; exact in float. */
static inline float fx_uniform_pm1(uint64_t seed, int p, int64_t i) {
    uint64_t x = fx_splitmix64(seed + (uint64_t)p * 1000003u + (uint64_t)i);
    float u = (float)(x >> 40) / 16777216.0f;
    return 2.0f * u - 1.0f;
}

/* How parameter `name` is generated, mirroring param_kind() in
 * make_fixtures.py, which goes by module type; here the module is told by its
 * name: ln_* (ln_1, ln_2, ln_f) are LayerNorms, wte/wpe/emb embeddings, anything
 * else a linear or conv layer whose fan_in comes from its weight's shape.
 * Sets *ln to 1 for a LayerNorm weight, 2 for a LayerNorm bias, else 0, and
 * *scale to the multiplier of 2u - 1. Returns 0, or -1 with a message. */
static inline int fx_param_value_scale(const ut_model *m, const char *name, int *ln, float *scale,
                                       char *err, size_t n) {
    const char *dot = strrchr(name, '.');
    if (!dot) return snprintf(err, n, "%s: parameter name without a module", name), -1;
    size_t mlen = (size_t)(dot - name);
    const char *mod = name;
    for (const char *s = name; s < dot; s++)
        if (*s == '.') mod = s + 1;   /* last component of the module path */
    bool is_weight = !strcmp(dot + 1, "weight");
    *ln = 0;
    if (!strncmp(mod, "ln_", 3)) {
        *ln = is_weight ? 1 : 2;
        *scale = 0.1f;
        return 0;
    }
    if ((dot - mod == 3) && (!strncmp(mod, "wte", 3) || !strncmp(mod, "wpe", 3) || !strncmp(mod, "emb", 3))) {
        *scale = 0.02f;
        return 0;
    }
    char wname[256];
    if (mlen + 8 > sizeof wname) return snprintf(err, n, "%s: name too long", name), -1;
    memcpy(wname, name, mlen);
    strcpy(wname + mlen, ".weight");
    const ut_tensor *w = ut_model_param(m, wname);
    if (!w || w->ndim < 2)
        return snprintf(err, n, "%s: no matrix %.*s.weight to take fan_in from", name, (int)mlen, name), -1;
    int64_t fan_in = 1;
    for (int d = 1; d < w->ndim; d++) fan_in *= w->ne[d];
    *scale = (float)(1.0 / sqrt((double)fan_in));
    return 0;
}

/* Overwrites every parameter of m, walking them in registration order. */
static inline int fx_fill_model(ut_model *m, uint64_t seed, char *err, size_t n) {
    for (int p = 0; p < m->params.n; p++) {
        int ln;
        float scale;
        if (fx_param_value_scale(m, m->params.names[p], &ln, &scale, err, n)) return -1;
        ut_tensor *t = m->params.t[p];
        float *d = ut_f32(t);
        int64_t cnt = ut_nelem(t);
        for (int64_t i = 0; i < cnt; i++) {
            float v = scale * fx_uniform_pm1(seed, p, i);
            d[i] = ln == 1 ? 1.0f + v : v;
        }
    }
    return 0;
}

#endif
