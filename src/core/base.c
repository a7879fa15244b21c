/* Checked allocation, fatal errors and the random generator. */
#include "utrain/base.h"
#include "../backend/backend.h"
#include "philox.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_uint_fast64_t alloc_calls;
static ut_abort_handler abort_handler;

uint64_t ut_alloc_count(void) { return (uint64_t)atomic_load(&alloc_calls); }

static void *check(void *p, size_t bytes, const char *file, int line) {
    if (!p && bytes)
        ut_fail_oom("out of memory: could not allocate %zu bytes (%.1f MiB) of host memory (%s:%d). Make a step "
                    "smaller: lower train.batch_size (train.gradient_accumulation_steps keeps the batch the "
                    "optimizer sees) or set train.checkpoint_activations: true; `utrain plan CONFIG` gives the "
                    "memory a run needs", bytes, bytes / 1048576.0, file, line);
    atomic_fetch_add(&alloc_calls, 1);
    return p;
}

void *ut_malloc_at(size_t bytes, const char *file, int line) {
    return check(malloc(bytes ? bytes : 1), bytes, file, line);
}

void *ut_calloc_at(size_t n, size_t size, const char *file, int line) {
    if (size && n > SIZE_MAX / size)
        ut_abort(file, line, "allocation of %zu x %zu bytes overflows", n, size);
    return check(calloc(n ? n : 1, size ? size : 1), n * size, file, line);
}

void *ut_realloc_at(void *p, size_t bytes, const char *file, int line) {
    return check(realloc(p, bytes ? bytes : 1), bytes, file, line);
}

/* The flat buffers: page mappings of the flat buffers' backend (the CPU's in
 * this build, so they are host memory today). */
float *ut_pages_alloc(const ut_backend *be, int64_t nfloats) {
    UT_ASSERT(nfloats >= 0);
    float *p = be->pages_alloc((size_t)nfloats * sizeof(float));
    atomic_fetch_add(&alloc_calls, 1);
    return p;
}

void ut_pages_free(const ut_backend *be, float *p, int64_t nfloats) {
    be->pages_free(p, (size_t)nfloats * sizeof(float));
}

void ut_pages_release(const ut_backend *be, float *p, int64_t lo, int64_t hi) {
    if (hi <= lo) return;
    be->pages_release(p, (size_t)lo * sizeof(float), (size_t)(hi - lo) * sizeof(float));
}

void *ut_aligned_alloc_at(size_t bytes, const char *file, int line) {
    size_t n = (bytes + 63) / 64 * 64;
    return check(aligned_alloc(64, n ? n : 64), bytes, file, line);
}

void ut_free(void *p) { free(p); }

int64_t ut_physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (int64_t)pages * size : INT64_MAX;
}

static _Atomic int64_t memory_limit; /* ut_memory_limit; 0: none */

void ut_memory_limit(int64_t bytes) { atomic_store(&memory_limit, bytes > 0 ? bytes : 0); }

int ut_memory_check(double bytes, const char *what, char *err, size_t n) {
    int64_t lim = atomic_load(&memory_limit);
    double have = (double)(lim ? lim : ut_physical_memory());
    if (bytes <= have) return 0;
    return ut_errorf(err, n, "%s needs %.3g GiB, more than this machine's %.3g GiB of memory",
                     what, bytes / 1073741824.0, have / 1073741824.0);
}

void ut_set_abort_handler(ut_abort_handler fn) { abort_handler = fn; }

_Noreturn void ut_abort(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "utrain: fatal: %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    if (abort_handler) abort_handler();
    abort();
}

static _Noreturn void fail_exit(const char *fmt, va_list ap, const char *more) {
    fprintf(stderr, "utrain: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "%s\n", more ? more : "");
    fflush(NULL);
    if (abort_handler) abort_handler();
    _exit(1);
}

_Noreturn void ut_fail_exit(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_exit(fmt, ap, NULL);
}

static const char *oom_phase = "train";

void ut_oom_phase(const char *phase) { oom_phase = phase && *phase ? phase : "train"; }

_Noreturn void ut_fail_oom(const char *fmt, ...) {
    const char *mark = getenv("UTRAIN_OOM_MARK");
    if (mark && *mark) {
        int fd = open(mark, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd >= 0) {
            char line[64];
            int k = snprintf(line, sizeof line, "out of memory in %s\n", oom_phase);
            ssize_t w = write(fd, line, (size_t)k < sizeof line ? (size_t)k : sizeof line - 1);
            (void)w;
            close(fd);
        }
    }
    va_list ap;
    va_start(ap, fmt);
    fail_exit(fmt, ap,
              strcmp(oom_phase, "eval") ? NULL
                                        : ". This was an evaluation: its batch is train.eval_batch_size (0: "
                                          "train.batch_size), which is the one to lower");
}

int ut_errorf(char *err, size_t n, const char *fmt, ...) {
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

const char *ut_fmt_bytes(double bytes, char *buf, size_t n) {
    const double mib = 1024.0 * 1024.0;
    if (bytes >= 1024 * mib) snprintf(buf, n, "%.2f GiB", bytes / (1024 * mib));
    else if (bytes >= mib) snprintf(buf, n, "%.1f MiB", bytes / mib);
    else if (bytes >= 1024) snprintf(buf, n, "%.1f KiB", bytes / 1024);
    else snprintf(buf, n, "%.0f B", bytes);
    return buf;
}

const char *ut_fmt(const char *fmt, ...) {
    static _Thread_local char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

int ut_open_regular(const char *path, char *err, size_t n) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return ut_errorf(err, n, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int flags = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK)) {
        close(fd);
        return ut_errorf(err, n, "%s: not a regular file", path);
    }
    return fd;
}

static int refuse_link(const char *path, char *err, size_t n) {
    return ut_errorf(err, n, "%s is a symbolic link: utrain does not write through links in the run and "
                             "export directories it owns; remove the link (to keep runs on another disk, "
                             "point output_dir there)", path);
}

FILE *ut_fopen_write(const char *path, bool append, char *err, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : O_TRUNC),
                  0666);
    if (fd < 0) {
        struct stat st;
        if (errno == ELOOP || (!lstat(path, &st) && S_ISLNK(st.st_mode))) return refuse_link(path, err, n), NULL;
        if (errno == ENXIO) return ut_errorf(err, n, "%s: a FIFO or socket, not a file", path), NULL;
        return ut_errorf(err, n, "%s: cannot open for writing: %s", path, strerror(errno)), NULL;
    }
    struct stat st;
    int flags = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) || !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode)) || flags < 0 ||
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK)) {
        close(fd);
        return ut_errorf(err, n, "%s: not a regular file", path), NULL;
    }
    FILE *f = fdopen(fd, append ? "a" : "w");
    if (!f) {
        close(fd);
        ut_errorf(err, n, "%s: cannot open for writing: %s", path, strerror(errno));
    }
    return f;
}

int ut_check_own_dir(const char *path, char *err, size_t n) {
    struct stat st;
    if (lstat(path, &st)) return ut_errorf(err, n, "%s: %s", path, strerror(errno));
    if (S_ISLNK(st.st_mode)) return refuse_link(path, err, n);
    if (!S_ISDIR(st.st_mode)) return ut_errorf(err, n, "%s: not a directory", path);
    return 0;
}

/* ---- xoshiro256** seeded through splitmix64 ---- */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void ut_rng_seed(ut_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ut_rng_u64(ut_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float ut_rng_uniform(ut_rng *r) { return (float)(ut_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }


float ut_rng_normal(ut_rng *r) {
    /* Box-Muller; u1 in (0, 1] so the log is finite */
    double u1 = ((ut_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (ut_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC 2011): ten rounds of two 32x32->64 products over a 128-bit
 * counter, the 64-bit key bumped by the Weyl constants between rounds.
 * Counter words: block (low, high), stream (low, high). ---- */
void ut_philox_block(uint64_t key, uint64_t stream, uint64_t block, uint32_t out[4]) {
    out[0] = (uint32_t)block;
    out[1] = (uint32_t)(block >> 32);
    out[2] = (uint32_t)stream;
    out[3] = (uint32_t)(stream >> 32);
    ut_philox10(out, (uint32_t)key, (uint32_t)(key >> 32));
}

void ut_philox_seed(ut_philox *g, uint64_t seed) {
    *g = (ut_philox){.key = splitmix64(&seed)};
}


float ut_philox_uniform(uint64_t key, uint64_t stream, uint64_t i) {
    uint32_t c[4];
    ut_philox_block(key, stream, i / 4, c);
    return ut_philox_top24(c[i % 4]);
}

/* PHILOX_LANES consecutive blocks from block0 at once, lane by lane in each
 * round, so that the compiler runs the lanes as vectors (the 32x32->64
 * products as vpmuludq): c[j][l] is word j of block block0 + l, the same
 * words ut_philox_block gives. */
#define PHILOX_LANES 16
static inline void philox10_lanes(uint32_t c[4][PHILOX_LANES], uint64_t key, uint64_t stream, uint64_t block0) {
    uint32_t c0[PHILOX_LANES], c1[PHILOX_LANES], c2[PHILOX_LANES], c3[PHILOX_LANES];
    for (int l = 0; l < PHILOX_LANES; l++) {
        uint64_t b = block0 + (uint64_t)l;
        c0[l] = (uint32_t)b;
        c1[l] = (uint32_t)(b >> 32);
        c2[l] = (uint32_t)stream;
        c3[l] = (uint32_t)(stream >> 32);
    }
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
#pragma omp simd
        for (int l = 0; l < PHILOX_LANES; l++) {
            uint64_t p0 = (uint64_t)UT_PHILOX_M0 * c0[l], p1 = (uint64_t)UT_PHILOX_M1 * c2[l];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
            c0[l] = n0;
            c1[l] = (uint32_t)p1;
            c2[l] = n2;
            c3[l] = (uint32_t)p0;
        }
        k0 += UT_PHILOX_W0;
        k1 += UT_PHILOX_W1;
    }
    memcpy(c[0], c0, sizeof c0);
    memcpy(c[1], c1, sizeof c1);
    memcpy(c[2], c2, sizeof c2);
    memcpy(c[3], c3, sizeof c3);
}

void ut_philox_keep_mask(ut_philox *g, uint8_t *keep, float p, int64_t n) {
    if (n <= 0) return;
    const uint64_t first = g->offset / 4, key = g->key, stream = g->stream;
    const int64_t blocks = (n + 3) / 4, groups = (blocks + PHILOX_LANES - 1) / PHILOX_LANES;
#pragma omp parallel for schedule(static) if (blocks >= 4096)
    for (int64_t gi = 0; gi < groups; gi++) {
        uint32_t c[4][PHILOX_LANES];
        philox10_lanes(c, key, stream, first + (uint64_t)(gi * PHILOX_LANES));
        int64_t e0 = 4 * PHILOX_LANES * gi;
        if (e0 + 4 * PHILOX_LANES <= n) {
            for (int l = 0; l < PHILOX_LANES; l++)
                for (int j = 0; j < 4; j++) keep[e0 + 4 * l + j] = ut_philox_top24(c[j][l]) >= p;
            continue;
        }
        for (int64_t e = e0; e < n; e++) keep[e] = ut_philox_top24(c[(e - e0) % 4][(e - e0) / 4]) >= p;
    }
    g->offset += 4 * (uint64_t)blocks;
}

void ut_philox_uniforms(const ut_philox *g, float *u, int64_t n) {
    if (n <= 0) return;
    const uint64_t first = g->offset / 4, key = g->key, stream = g->stream;
    const int64_t blocks = (n + 3) / 4, groups = (blocks + PHILOX_LANES - 1) / PHILOX_LANES;
#pragma omp parallel for schedule(static) if (blocks >= 4096)
    for (int64_t gi = 0; gi < groups; gi++) {
        uint32_t c[4][PHILOX_LANES];
        philox10_lanes(c, key, stream, first + (uint64_t)(gi * PHILOX_LANES));
        int64_t e0 = 4 * PHILOX_LANES * gi;
        for (int64_t e = e0; e < n && e < e0 + 4 * PHILOX_LANES; e++)
            u[e] = ut_philox_top24(c[(e - e0) % 4][(e - e0) / 4]);
    }
}

void ut_philox_keep_mask_at(const ut_philox *g, uint8_t *keep, float p, uint64_t first, int64_t n) {
    if (n <= 0) return;
    const uint64_t d0 = g->offset + first, key = g->key, stream = g->stream;
    const uint64_t b0 = d0 / 4, b1 = (d0 + (uint64_t)n + 3) / 4; /* the blocks that hold draws d0 .. d0 + n - 1 */
#pragma omp parallel for schedule(static) if (b1 - b0 >= 4096)
    for (int64_t b = 0; b < (int64_t)(b1 - b0); b++) {
        uint32_t c[4];
        ut_philox_block(key, stream, b0 + (uint64_t)b, c);
        for (int j = 0; j < 4; j++) {
            int64_t e = (int64_t)((b0 + (uint64_t)b) * 4 + (uint64_t)j - d0); /* the element draw j is */
            if (e >= 0 && e < n) keep[e] = ut_philox_top24(c[j]) >= p;
        }
    }
}

uint64_t ut_philox_stream(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t x = a;
    uint64_t h = splitmix64(&x);
    x = h ^ b;
    h = splitmix64(&x);
    x = h ^ c;
    return splitmix64(&x);
}
