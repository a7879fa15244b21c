/* Conversions between float32 and the 16-bit storage types, and rounding
 * float32 values to what a 16-bit type can hold (autocast's operands).
 *
 * bf16: the top half of a float32, rounded to nearest even, in integer
 * arithmetic (vectorised by the compiler). NaNs stay NaNs (made quiet). This
 * path is used even where AVX512_BF16 exists: VCVTNEPS2BF16 flushes subnormal
 * inputs to zero, so runs would depend on the CPU; the integer path gives the
 * same bits everywhere (and what torch's c10::BFloat16 gives).
 * fp16: IEEE binary16, rounded to nearest even with subnormals; through F16C
 * (vcvtps2ph / vcvtph2ps, 8 at a time) where the build targets it, else a
 * bit-manipulation path with the same results. */
#include <math.h>
#include <omp.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "cpu.h"
#include "vmath.h"

#define PAR_MIN_ELEMS 65536

/* ---- scalar reference conversions (also the tails of the vector loops) ---- */

static inline uint16_t bf16_of(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* binary16 of a finite |x| below the smallest normal (2^-14), sign apart:
 * round(|x| / 2^-24) to nearest even. */
static inline uint16_t f16_subnormal(uint32_t ax) {
    if (ax < 0x33000000u) return 0; /* below 2^-25 (2^-25 itself ties to 0) */
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e, r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)r;
}

uint16_t ut_f32_to_f16_scalar(float f) {
    uint32_t x = ut_float_to_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (and inf): inf */
    if (ax < 0x38800000u) return (uint16_t)(sign | f16_subnormal(ax));
    uint32_t h = ((ax >> 23) - 112) << 10 | ((ax >> 13) & 0x3ffu), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry moves into the exponent */
    return (uint16_t)(sign | h);
}

float ut_f16_to_f32_scalar(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact */
        float v = (float)m * 0x1p-24f;
        return ut_bits_to_float(ut_float_to_bits(v) | sign);
    }
    if (e == 31) return ut_bits_to_float(sign | 0x7f800000u | (m ? 0x400000u | m << 13 : 0));
    return ut_bits_to_float(sign | (e + 112) << 23 | m << 13);
}

uint16_t ut_f32_to_bf16_scalar(float f) { return bf16_of(ut_float_to_bits(f)); }
float ut_bf16_to_f32_scalar(uint16_t h) { return ut_bits_to_float((uint32_t)h << 16); }

/* ---- array conversions ---- */
void ut_f32_to_bf16_cpu(uint16_t *restrict dst, const float *restrict src, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN_ELEMS)
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_of(ut_float_to_bits(src[i]));
}

void ut_bf16_to_f32_cpu(float *restrict dst, const uint16_t *restrict src, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN_ELEMS)
    for (int64_t i = 0; i < n; i++) dst[i] = ut_bits_to_float((uint32_t)src[i] << 16);
}

/* Blocks of 8 through F16C where available; the scalar path otherwise and for
 * the tail. Both round to nearest even with subnormals and give equal bits. */
static void f32_to_f16_run(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) dst[i] = ut_f32_to_f16_scalar(src[i]);
}

static void f16_to_f32_run(float *dst, const uint16_t *src, int64_t n) {
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = ut_f16_to_f32_scalar(src[i]);
}

/* This thread's run of [0, n), on 8-element boundaries. */
static void thread_run(int64_t n, int64_t *lo, int64_t *hi) {
    int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    *lo = n * t / nt / 8 * 8;
    *hi = t + 1 == nt ? n : n * (t + 1) / nt / 8 * 8;
}

void ut_f32_to_f16_cpu(uint16_t *dst, const float *src, int64_t n) {
#pragma omp parallel if (n >= PAR_MIN_ELEMS)
    {
        int64_t lo, hi;
        thread_run(n, &lo, &hi);
        if (hi > lo) f32_to_f16_run(dst + lo, src + lo, hi - lo);
    }
}

void ut_f16_to_f32_cpu(float *dst, const uint16_t *src, int64_t n) {
#pragma omp parallel if (n >= PAR_MIN_ELEMS)
    {
        int64_t lo, hi;
        thread_run(n, &lo, &hi);
        if (hi > lo) f16_to_f32_run(dst + lo, src + lo, hi - lo);
    }
}

/* ---- rounding float32 to a 16-bit type's values, kept as float32 ---- */
static void round_f16_run(float *dst, const float *src, int64_t n) {
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
#endif
    for (; i < n; i++) dst[i] = ut_f16_to_f32_scalar(ut_f32_to_f16_scalar(src[i]));
}

void ut_cpu_round(float *dst, const float *src, int64_t n, ut_dtype dt) {
    if (dt == UT_BF16) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN_ELEMS)
        for (int64_t i = 0; i < n; i++) dst[i] = ut_bits_to_float((uint32_t)bf16_of(ut_float_to_bits(src[i])) << 16);
    } else if (dt == UT_F16) {
#pragma omp parallel if (n >= PAR_MIN_ELEMS)
        {
            int64_t lo, hi;
            thread_run(n, &lo, &hi);
            if (hi > lo) round_f16_run(dst + lo, src + lo, hi - lo);
        }
    } else if (dst != src) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

/* ---- the backend's entry: any pair of F32, BF16, F16 ---- */
static void convert_from_f32(void *dst, ut_dtype to, const float *src, int64_t n) {
    if (to == UT_BF16) ut_f32_to_bf16_cpu(dst, src, n);
    else if (to == UT_F16) ut_f32_to_f16_cpu(dst, src, n);
    else memcpy(dst, src, (size_t)n * sizeof(float));
}

void ut_cpu_convert(void *dst, ut_dtype to, const void *src, ut_dtype from, int64_t n) {
    UT_ASSERT(to <= UT_F16 && from <= UT_F16);
    if (from == UT_F32) {
        convert_from_f32(dst, to, src, n);
    } else if (to == UT_F32) {
        if (from == UT_BF16) ut_bf16_to_f32_cpu(dst, src, n);
        else ut_f16_to_f32_cpu(dst, src, n);
    } else if (to == from) {
        memcpy(dst, src, (size_t)n * 2);
    } else { /* bf16 <-> f16: through float32, in blocks */
        float tmp[1024];
        const uint16_t *s = src;
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i += 1024) {
            int64_t len = n - i < 1024 ? n - i : 1024;
            ut_cpu_convert(tmp, UT_F32, s + i, from, len);
            convert_from_f32(d + i, to, tmp, len);
        }
    }
}

/* ---- on the calling thread alone: a row inside a parallel loop ---- */
void ut_cpu_convert_run(void *dst, ut_dtype to, const void *src, ut_dtype from, int64_t n) {
    if (from == UT_F32 && to == UT_BF16) {
        uint16_t *d = dst;
        const float *sp = src;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = bf16_of(ut_float_to_bits(sp[i]));
    } else if (from == UT_BF16 && to == UT_F32) {
        float *d = dst;
        const uint16_t *sp = src;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = ut_bits_to_float((uint32_t)sp[i] << 16);
    } else if (from == UT_F32 && to == UT_F16) {
        f32_to_f16_run(dst, src, n);
    } else if (from == UT_F16 && to == UT_F32) {
        f16_to_f32_run(dst, src, n);
    } else {
        ut_cpu_convert(dst, to, src, from, n);
    }
}

/* ---- a block of a matrix: rows x cols, each side with its own row stride ---- */
void ut_cpu_convert_rows(void *dst, ut_dtype to, int64_t dst_ld, const void *src, ut_dtype from,
                         int64_t src_ld, int64_t rows, int64_t cols) {
    size_t ds = ut_dtype_size(to), ss = ut_dtype_size(from);
#pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN_ELEMS)
    for (int64_t r = 0; r < rows; r++)
        ut_cpu_convert_run((char *)dst + (size_t)(r * dst_ld) * ds, to, (const char *)src + (size_t)(r * src_ld) * ss,
                           from, cols);
}
