/* utrain basics: checked allocation, fatal errors, the random generator.
 * defines: ut_blas_select_kernels, ut_errorf, ut_open_regular, ut_malloc_check, ut_memory_check, ut_memory_limit, ut_calloc_check, ut_realloc_check, ut_free, ut_alloc_count,
 *          ut_abort, UT_ASSERT, ut_set_abort_handler, ut_fail_exit, ut_fail_oom, ut_oom_phase, ut_fmt_bytes, ut_rng_*,
 *          ut_philox_*. */
#ifndef UTRAIN_BASE_H
#define UTRAIN_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Allocation through these counts calls (ut_alloc_count), so tests can prove
 * the training loop allocates nothing once warm. On failure they abort with the
 * number of bytes asked for and the call site. */
void *ut_malloc_at(size_t bytes, const char *file, int line);
void *ut_calloc_at(size_t n, size_t size, const char *file, int line);
void *ut_realloc_at(void *p, size_t bytes, const char *file, int line);
void *ut_aligned_alloc_at(size_t bytes, const char *file, int line); /* 64-byte aligned */
void ut_free(void *p);
uint64_t ut_alloc_count(void);
#define ut_malloc_check(n) ut_malloc_at((n), __FILE__, __LINE__)
#define ut_calloc_check(n, s) ut_calloc_at((n), (s), __FILE__, __LINE__)
#define ut_realloc_check(p, n) ut_realloc_at((p), (n), __FILE__, __LINE__)
#define ut_aligned_alloc_check(n) ut_aligned_alloc_at((n), __FILE__, __LINE__)

/* The machine's physical memory in bytes. ut_memory_check returns 0
 * when bytes fit in it, else -1 with "WHAT needs X GiB, more than this
 * machine's Y GiB of memory": a size from user input is checked with it
 * before allocating, so it gives an error rather than an out-of-memory abort. */
int64_t ut_physical_memory(void);
int ut_memory_check(double bytes, const char *what, char *err, size_t n);
/* A smaller ceiling for ut_memory_check than the machine's memory (0: the
 * machine's again), said as this machine's: the fuzz targets build models
 * from their inputs and keep them small. */
void ut_memory_limit(int64_t bytes);


/* Fatal, always-on checks for internal invariants (not for user input, which
 * returns a status with a message). ut_abort goes through one handler so the
 * distributed layer can take every rank down with it. */
_Noreturn void ut_abort(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
typedef void (*ut_abort_handler)(void);
void ut_set_abort_handler(ut_abort_handler fn);
/* A failure the user can act on but the run cannot come back from (a GPU
 * out of memory in the middle of a step): "utrain: error: MESSAGE" on
 * stderr, stdio's streams flushed, then the job ends through the same
 * handler as ut_abort (every MPI rank goes) but with exit status 1 and no
 * core dump. Checkpoints already written stay as they are. */
_Noreturn void ut_fail_exit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* ut_fail_exit for running out of memory (the device's, or the host's
 * where the run allocates it): the same message and exit, and first, when
 * the environment names a file in UTRAIN_OOM_MARK, that file is written,
 * so that the process that started the job (train.auto_find_batch_size's
 * launcher) can tell this failure from the others whatever exit status the
 * job launcher reports. */
_Noreturn void ut_fail_oom(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* What the process is doing, for the mark ut_fail_oom writes ("out of
 * memory in PHASE"): "train" (the default, and NULL) or "eval", which the
 * trainer sets around its evaluations, since a smaller train.batch_size
 * does not help an evaluation at its own train.eval_batch_size. A string
 * that lives as long as the process. */
void ut_oom_phase(const char *phase);
#define UT_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) ut_abort(__FILE__, __LINE__, "assertion failed: %s", #cond); \
    } while (0)

/* xoshiro256** generator: small state (4 words) that checkpoints save. */
typedef struct { uint64_t s[4]; } ut_rng;
void ut_rng_seed(ut_rng *r, uint64_t seed);
uint64_t ut_rng_u64(ut_rng *r);
float ut_rng_uniform(ut_rng *r);           /* [0, 1) */
float ut_rng_normal(ut_rng *r);            /* mean 0, std 1 */

/* Philox4x32-10, a counter-based generator: block b of stream s under key k
 * is a pure function of (k, s, b), four 32-bit words. Dropout draws from it,
 * so a mask depends only on where it is drawn (the key from the seed, the
 * stream from the micro-batch and the data-parallel rank or worker, the
 * offset within that stream), never on what other ranks, workers or earlier
 * runs drew: resume is exact on any number of ranks, and every backend can
 * draw the same masks in parallel. The state is 4 words, as checkpoints keep it. */
typedef struct {
    uint64_t key;    /* from the seed (ut_philox_seed) */
    uint64_t stream; /* which stream: the trainer sets one per micro-batch and rank */
    uint64_t offset; /* draws taken from the stream so far, a multiple of 4 */
    uint64_t zero;   /* 0 */
} ut_philox;
void ut_philox_seed(ut_philox *g, uint64_t seed); /* key from seed; stream and offset 0 */
void ut_philox_block(uint64_t key, uint64_t stream, uint64_t block, uint32_t out[4]);
/* Draw i of the stream read as a uniform in [0, 1): its top 24 bits / 2^24. */
float ut_philox_uniform(uint64_t key, uint64_t stream, uint64_t i);
/* keep (n) = 1 where draw offset + i is >= p as a uniform, else 0; the
 * offset then moves past them (n rounded up to 4). Split over threads; the
 * result does not depend on how. */
void ut_philox_keep_mask(ut_philox *g, uint8_t *keep, float p, int64_t n);
/* The same for draws offset + first + i, i < n, without moving the
 * offset: a slice of the mask ut_philox_keep_mask would give (first need
 * not be a multiple of 4). */
void ut_philox_keep_mask_at(const ut_philox *g, uint8_t *keep, float p, uint64_t first, int64_t n);
/* u (n) = draws offset + i, i < n, as uniforms in [0, 1) (ut_philox_uniform),
 * without moving the offset. Split over threads; the result does not
 * depend on how. */
void ut_philox_uniforms(const ut_philox *g, float *u, int64_t n);
/* A 64-bit mix of (a, b, c): streams from a micro-batch's coordinates. */
uint64_t ut_philox_stream(uint64_t a, uint64_t b, uint64_t c);

/* OpenBLAS chooses its kernels from the CPU model when it loads, and an
 * OpenBLAS too old for the CPU falls back to slow generic kernels (4x slower
 * matrix products). Call this first thing in main: when that happened on a
 * CPU with AVX-512 or AVX2 and OPENBLAS_CORETYPE is unset, it sets it and
 * re-executes the program (same argv); otherwise it returns at once. */
void ut_blas_select_kernels(char **argv);

/* Writes a printf-style message into err (n bytes; err may be NULL) and
 * returns -1, so error paths read `return ut_errorf(err, n, "...", ...);`. */
int ut_errorf(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Opens path for reading when it is a regular file: a file descriptor, or
 * -1 with "PATH: cannot open: ..." or "PATH: not a regular file" in err. A
 * FIFO, device or directory is refused at once, never waited on (a FIFO's
 * open would block until something writes to it). Every data file,
 * checkpoint and weights file is opened through it. */
int ut_open_regular(const char *path, char *err, size_t n);
/* Opens path for writing a file utrain owns (run directory, export
 * directory): O_APPEND when append, else truncated; created 0666 less the
 * umask. A symbolic link in the last component is refused, never written
 * through ("PATH is a symbolic link: ..."), and so are FIFOs, sockets and
 * directories; a regular file or a character device (/dev/null made with
 * mknod) is opened. Returns a stdio stream, or NULL with the reason in err. */
FILE *ut_fopen_write(const char *path, bool append, char *err, size_t n);
/* The same check for a directory utrain writes into: 0 when path is a
 * directory and not a symbolic link, else -1 with the reason in err. */
int ut_check_own_dir(const char *path, char *err, size_t n);

/* printf-style message into a thread-local buffer: for building error text. */
const char *ut_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* bytes as people read them ("12.34 GiB", "123.4 MiB", "5.0 KiB", "512 B")
 * into buf; returns buf. */
const char *ut_fmt_bytes(double bytes, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
