/* NCCL behind the direct collectives (dist.h, src/backend/cuda/nccl.c) on
 * the GPU: the library loads, a communicator of one rank is made from the
 * id the host communicator carries, and all-reduces in float32, bf16 and
 * fp16 (sum, max, average) and the ZeRO strategies' reduce-scatter and
 * all-gather (NCCL groups of rooted reduces and broadcasts) queued on the
 * communication stream, ordered after the compute stream's writes and
 * before its reads, give back the values (one rank: every reduction is the
 * identity, to the bit). A
 * machine has one GPU here, and NCCL takes one GPU per rank, so several
 * ranks are checked on sim (tests/e2e/test_sim_trainer) and by the log's
 * refusal in tests/gpu/test_cuda_trainer.
 * Skips, saying why, without a GPU or without NCCL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/backend/backend.h"
#include "utrain/dist.h"
#include "test.h"

static const ut_backend *be;

static void test_one_rank(void) {
    char path[640], err[512];
    ut_comm *c = ut_comm_init(NULL, NULL, false, 60, err, sizeof err);
    CHECK(c != NULL, "ut_comm_init: %s", err);
    if (!c) return;
    /* auto with one rank: nothing to exchange */
    CHECK(ut_comm_device_setup(c, UT_CUDA, UT_DEVCOMM_AUTO, path, sizeof path, err, sizeof err) == 0, "auto: %s",
          err);
    CHECK(!ut_comm_direct(c, UT_CUDA) && strstr(path, "one rank"), "auto, one rank: %s", path);
    CHECK(ut_comm_device_setup(c, UT_CUDA, UT_DEVCOMM_DIRECT, path, sizeof path, err, sizeof err) == 0, "direct: %s",
          err);
    printf("  path: %s\n", path);
    CHECK(ut_comm_direct(c, UT_CUDA) && strstr(path, "NCCL"), "direct: %s", path);
    if (!ut_comm_direct(c, UT_CUDA)) {
        ut_comm_finalize(c);
        return;
    }
    enum { N = 4099 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) x[i] = (float)((i * 37) % 101) * 0.37f - 11.0f;
    float *d = be->alloc(N * sizeof(float));
    void *d16 = be->alloc(N * 2);
    const ut_dtype dts[3] = {UT_F32, UT_BF16, UT_F16};
    const ut_reduce_op ops[3] = {UT_REDUCE_SUM, UT_REDUCE_MAX, UT_REDUCE_AVG};
    for (int t = 0; t < 3; t++)
        for (int o = 0; o < 3; o++) {
            be->copy(d, x, N * sizeof(float), UT_COPY_H2D);
            void *buf = d;
            if (dts[t] != UT_F32) be->convert(buf = d16, dts[t], d, UT_F32, N);
            int rc = ut_comm_direct_allreduce_ordered(c, UT_CUDA, buf, N, dts[t], ops[o]);
            CHECK(rc == 0, "allreduce dtype %d op %d: %s", (int)dts[t], (int)ops[o], ut_comm_error(c));
            /* the compute stream reads after the collective: the 16-bit values widened */
            float *want = malloc(N * sizeof(float));
            if (dts[t] != UT_F32) {
                float *w = be->alloc(N * sizeof(float));
                be->convert(w, UT_F32, d16, dts[t], N); /* after: rounded x, which one rank leaves as it is */
                be->copy(y, w, N * sizeof(float), UT_COPY_D2H);
                ut_backend_get(UT_CPU)->round(want, x, N, dts[t]);
                be->free(w);
            } else {
                be->copy(y, d, N * sizeof(float), UT_COPY_D2H);
                memcpy(want, x, N * sizeof(float));
            }
            CHECK(!memcmp(y, want, N * sizeof(float)), "allreduce dtype %d op %d: one rank changed the values",
                  (int)dts[t], (int)ops[o]);
            free(want);
        }
    /* the ZeRO forms with one rank: the reduce-scatter copies the input to
     * the output, the all-gather leaves the buffer */
    float *o = be->alloc(N * sizeof(float));
    int64_t counts[1] = {N};
    be->copy(d, x, N * sizeof(float), UT_COPY_H2D);
    be->memset(o, 0, N * sizeof(float));
    ut_comm_direct_after_compute(c, UT_CUDA);
    CHECK(ut_comm_direct_reduce_scatterv(c, UT_CUDA, d, o, counts) == 0, "reduce_scatterv: %s", ut_comm_error(c));
    CHECK(ut_comm_direct_allgatherv(c, UT_CUDA, d, counts) == 0, "allgatherv: %s", ut_comm_error(c));
    ut_comm_direct_before_compute(c, UT_CUDA);
    be->copy(y, o, N * sizeof(float), UT_COPY_D2H);
    CHECK(!memcmp(y, x, N * sizeof(float)), "reduce_scatterv with one rank: the output is not the input");
    be->copy(y, d, N * sizeof(float), UT_COPY_D2H);
    CHECK(!memcmp(y, x, N * sizeof(float)), "allgatherv with one rank changed the buffer");
    be->free(o);
    CHECK(ut_comm_direct_status(c, UT_CUDA) == 0, "status: %s", ut_comm_error(c));
    be->free(d);
    be->free(d16);
    free(x);
    free(y);
    ut_comm_finalize(c); /* NCCL's communicator destroyed with it */
}

/* NCCL opens here and has every function utrain calls (without a GPU: a
 * misspelt name or too old a library fails on the build machine); where it
 * is not installed, this says so. */
static void test_nccl_library(void) {
    const ut_backend *b = ut_backend_get(UT_CUDA);
    if (!b || !b->coll) {
        printf("  skip: this build has no NCCL (nccl.h was not found when it was built)\n");
        return;
    }
    char what[64] = "", why[512] = "";
    int r = b->coll->load(what, sizeof what, why, sizeof why);
    CHECK(r == 0 || strstr(why, "is not installed here"), "%s", why);
    printf("  %s\n", r == 0 ? what : why);
}

/* UT_NCCL_LIBRARY naming a file that is not there: the load fails naming
 * the variable and what to write instead (in a child: NCCL is opened once
 * per process) */
static void test_nccl_library_refused(void) {
    const ut_backend *b = ut_backend_get(UT_CUDA);
    if (!b || !b->coll) return;
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0) {
        setenv("UT_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
        char what[64] = "", why[512] = "";
        int r = b->coll->load(what, sizeof what, why, sizeof why);
        CHECK(r != 0 && strstr(why, "UT_NCCL_LIBRARY=/nonexistent/libnccl.so.2") && strstr(why, "or unset it"), "%s",
              r ? why : what);
        _exit(t_checks_failed ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (status %d)", st);
}

int main(void) {
    char why[512], what[64];
    RUN(test_nccl_library_refused); /* first: the parent must not have opened NCCL yet */
    RUN(test_nccl_library);
    if (ut_backend_check(UT_CUDA, why, sizeof why) || ut_backend_get(UT_CUDA)->available(why, sizeof why)) {
        printf("skip: %s\n", why);
        return TEST_SUMMARY();
    }
    be = ut_backend_get(UT_CUDA);
    if (!be->coll) {
        printf("skip: this build has no NCCL (nccl.h was not found when it was built)\n");
        return TEST_SUMMARY();
    }
    if (be->coll->load(what, sizeof what, why, sizeof why)) {
        printf("skip: %s\n", why);
        return TEST_SUMMARY();
    }
    printf("%s\n", what);
    RUN(test_one_rank);
    return TEST_SUMMARY();
}
