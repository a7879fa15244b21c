/* Philox4x32-10, the counter-based generator behind ut_philox (base.c), as
 * inline functions that compile for the host and, under nvcc, for the
 * device too: a kernel computes the draws the CPU computes, bit for bit.
 * Draw d of a (key, stream) is word d % 4 of block d / 4; a keep decision
 * compares its top 24 bits, as a float in [0, 1), with the drop probability.
 * defines: ut_philox10, ut_philox_top24, ut_philox_keep, ut_dropout_draw, ut_varlen_draw. */
#ifndef UTRAIN_CORE_PHILOX_H
#define UTRAIN_CORE_PHILOX_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define UT_PHILOX_FN static inline __host__ __device__
#else
#define UT_PHILOX_FN static inline
#endif

#define UT_PHILOX_M0 0xD2511F53u
#define UT_PHILOX_M1 0xCD9E8D57u
#define UT_PHILOX_W0 0x9E3779B9u
#define UT_PHILOX_W1 0xBB67AE85u

/* ten rounds of two 32x32->64 products over the counter c, the 64-bit key
 * (k0, k1) bumped by the Weyl constants between rounds */
UT_PHILOX_FN void ut_philox10(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)UT_PHILOX_M0 * c[0], p1 = (uint64_t)UT_PHILOX_M1 * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = (uint32_t)p1;
        c[2] = n2;
        c[3] = (uint32_t)p0;
        k0 += UT_PHILOX_W0;
        k1 += UT_PHILOX_W1;
    }
}

UT_PHILOX_FN float ut_philox_top24(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

/* whether draw d of (key, stream) keeps an element dropped with probability p */
UT_PHILOX_FN bool ut_philox_keep(uint64_t key, uint64_t stream, uint64_t d, float p) {
    uint64_t block = d / 4;
    uint32_t c[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
    ut_philox10(c, (uint32_t)key, (uint32_t)(key >> 32));
    return ut_philox_top24(c[d % 4]) >= p;
}

/* The draw dropout's element e takes (ut_dropout_keep_mask): the launch's
 * window starts at offset; a whole tensor's mask takes consecutive draws
 * from the window's first whole block; a tensor holding columns [c0, c0 +
 * cols) of rows that are `all` columns wide (tensor parallelism's part of a
 * whole model's mask) takes row r's draws at offset + r * all + c0. */
UT_PHILOX_FN uint64_t ut_dropout_draw(uint64_t offset, int64_t e, int64_t all, int64_t cols, int64_t c0) {
    if (!all) return (offset & ~(uint64_t)3) + (uint64_t)e;
    return offset + (uint64_t)((e / cols) * all + c0 + e % cols);
}

/* The draw of element e of packed attention's probabilities for a part of
 * the heads (NH of NHall, from head h0): sequence s's NH blocks of L2 = L x L
 * start at element ps = poff[s], and take the whole tensor's draws of its
 * heads, which start at offset + ps / NH * NHall. */
UT_PHILOX_FN uint64_t ut_varlen_draw(uint64_t offset, int64_t e, int64_t ps, int64_t L2, int64_t NH, int64_t NHall,
                                     int64_t h0) {
    int64_t within = e - ps;
    return offset + (uint64_t)(ps / NH * NHall + (h0 + within / L2) * L2 + within % L2);
}

#endif
