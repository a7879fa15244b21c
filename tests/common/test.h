/* A small test harness: CHECK records a failure with its place and message,
 * RUN runs one test function and prints ok/FAIL, TEST_SUMMARY prints
 * "N passed, N failed" (tests/run.sh adds these up) and returns the exit code.
 * defines: CHECK, CHECK_NEAR, RUN, TEST_SUMMARY, test_quick, t_selected. */
#ifndef UTRAIN_TEST_H
#define UTRAIN_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_host.h"

static int t_checks_failed, t_passed, t_failed;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            t_checks_failed++;                                            \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                   \
    CHECK(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %.3g)", \
          (double)(a), (double)(b), (double)(tol))

/* UT_TEST_ONLY=NAME[,NAME...] (by hand, while working on a test): only those
 * test functions run (a test that needs an earlier one's runs needs it named too). */
static inline int t_selected(const char *fn) {
    const char *only = getenv("UT_TEST_ONLY");
    size_t n = strlen(fn);
    if (!only || !*only) return 1;
    for (const char *p = only; *p; p += strcspn(p, ","), p += *p == ',')
        if (strcspn(p, ",") == n && !strncmp(p, fn, n)) return 1;
    return 0;
}

#define RUN(fn)                                                       \
    do {                                                              \
        int before_ = t_checks_failed;                                \
        if (!t_selected(#fn)) break;                                  \
        fn();                                                         \
        if (t_checks_failed == before_) {                             \
            t_passed++;                                               \
            printf("ok   %s\n", #fn);                                 \
        } else {                                                      \
            t_failed++;                                               \
            printf("FAIL %s\n", #fn);                                 \
        }                                                             \
        fflush(stdout);                                               \
    } while (0)

#define TEST_SUMMARY()                                        \
    (printf("%d passed, %d failed\n", t_passed, t_failed),    \
     t_failed ? 1 : 0)

/* UT_TEST_QUICK=1 (set by make test-asan) asks tests to use smaller sizes. */
static inline int test_quick(void) {
    const char *q = getenv("UT_TEST_QUICK");
    return q && *q && *q != '0';
}
#endif
