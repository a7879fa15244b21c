/* CPU backend memory: aligned heap blocks, page mappings for the flat
 * buffers, memset and copies (every copy kind is a memcpy on the host). */
#include <omp.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu.h"
#include "utrain/base.h"

void *ut_cpu_alloc(size_t bytes) { return ut_aligned_alloc_check(bytes); }
void ut_cpu_free(void *p) { ut_free(p); }

static size_t page_round(size_t bytes) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t b = bytes ? bytes : 1;
    return (b + pg - 1) / pg * pg;
}

void *ut_cpu_pages_alloc(size_t bytes) {
    size_t b = page_round(bytes);
    void *p = mmap(NULL, b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        ut_abort(__FILE__, __LINE__, "out of memory: could not map %zu bytes (%.1f MiB)", b,
                 b / 1048576.0);
    return p;
}

void ut_cpu_pages_free(void *p, size_t bytes) {
    if (p) UT_ASSERT(munmap(p, page_round(bytes)) == 0);
}

void ut_cpu_pages_release(void *base, size_t off, size_t len) {
    if (!len) return;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)base + off, b = a + len;
    uintptr_t pa = (a + pg - 1) / pg * pg, pb = b / pg * pg;
    if (pa >= pb) {
        memset((void *)a, 0, len);
        return;
    }
    memset((void *)a, 0, pa - a);
    memset((void *)pb, 0, b - pb);
    UT_ASSERT(madvise((void *)pa, pb - pa, MADV_DONTNEED) == 0);
}

/* mincore over the whole pages the range touches, a fixed block of pages at
 * a time (no allocation); a block the system cannot report counts in full */
size_t ut_cpu_pages_resident(const void *base, size_t bytes) {
    enum { BLOCK = 4096 };
    unsigned char vec[BLOCK];
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), npages = page_round(bytes) / pg, k = 0;
    for (size_t first = 0; first < npages; first += BLOCK) {
        size_t m = npages - first < BLOCK ? npages - first : BLOCK;
        if (mincore((char *)base + first * pg, m * pg, vec)) {
            k += m;
            continue;
        }
        for (size_t i = 0; i < m; i++) k += vec[i] & 1;
    }
    return k * pg;
}

/* Large buffers (gradients of activations, zeroed as the backward pass
 * reaches them) are set by all threads, each a contiguous share: one
 * thread alone leaves the others waiting, and does not reach the memory's
 * bandwidth. */
#define MEMSET_PARALLEL_BYTES ((size_t)1 << 20)

void ut_cpu_memset(void *p, int v, size_t bytes) {
    if (bytes < MEMSET_PARALLEL_BYTES || omp_in_parallel()) {
        if (bytes) memset(p, v, bytes);
        return;
    }
#pragma omp parallel
    {
        size_t nt = (size_t)omp_get_num_threads(), i = (size_t)omp_get_thread_num();
        size_t a = bytes * i / nt / 64 * 64, b = i + 1 == nt ? bytes : bytes * (i + 1) / nt / 64 * 64;
        memset((char *)p + a, v, b - a);
    }
}

void ut_cpu_copy(void *dst, const void *src, size_t bytes, ut_copy_kind kind) {
    (void)kind; /* host and device memory are the same memory */
    if (bytes && dst != src) memcpy(dst, src, bytes);
}
