/* OpenBLAS sgemm glue, and the choice of OpenBLAS kernels. */
#include "gemm.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "utrain/base.h"

/* OpenBLAS (DYNAMIC_ARCH builds) picks its kernels from the CPU model when it
 * loads. Versions that do not know a recent CPU model fall back to the SSE3
 * "Prescott" kernels, about 4x slower than the AVX-512 ones on the same
 * machine (Debian 12's 0.3.21 does this on Emerald Rapids Xeons). The only
 * cure is OPENBLAS_CORETYPE, read at load time. Returns the core to ask for,
 * or NULL when the kernels in use are fine. */
static const char *better_core(void) {
    const char *c = openblas_get_corename();
    static const char *const generic[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                          "Atom", NULL};
    bool is_generic = false;
    for (int i = 0; generic[i]; i++) is_generic |= c && !strcasecmp(c, generic[i]);
    if (!is_generic) return NULL;
    if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
    if (__builtin_cpu_supports("avx2")) return "Haswell";
    return NULL;
}

void ut_blas_select_kernels(char **argv) {
    const char *set = getenv("OPENBLAS_CORETYPE");
    if (set && *set) return; /* chosen by the user, or by us before exec */
    const char *core = better_core();
    if (!core) return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "utrain: could not restart with OPENBLAS_CORETYPE=%s; matrix products "
                    "use OpenBLAS's slow generic kernels\n", core);
}

static void warn_generic_kernels(void) {
    const char *core = better_core();
    if (core)
        fprintf(stderr,
                "utrain: OpenBLAS uses its generic %s kernels on this CPU; start the program "
                "with OPENBLAS_CORETYPE=%s for about 4x faster matrix products (or call "
                "ut_blas_select_kernels(argv) first thing in main)\n",
                openblas_get_corename(), core);
}

void ut_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
             const float *B, float beta, float *C) {
    ut_gemm_ld(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N);
}

void ut_gemm_ld(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    static bool checked;
    if (!checked) { /* benign race: at worst the warning prints twice */
        checked = true;
        warn_generic_kernels();
    }
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}
