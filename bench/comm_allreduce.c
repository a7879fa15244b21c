/* All-reduce through utrain's communicator, on whatever backend the process
 * was started for: under mpirun (mpi) or with RANK/WORLD_SIZE/MASTER_ADDR/
 * MASTER_PORT set (tcp). bench/run_allreduce.sh runs it both ways beside
 * PyTorch's Gloo (bench/torch_allreduce.py) on the same sizes.
 *
 *   comm_allreduce [--reps R] [--json FILE]
 *
 * For each size (4 KiB to 64 MiB of float32): two warm-up calls, then R
 * timed ones (fewer for the large sizes), each after a barrier; a call's
 * time is the slowest rank's. Prints the median per size and, with --json,
 * writes {"backend": ..., "ranks": N, "s_<bytes>": median seconds, ...}.
 * The result is checked: every element must be the sum of the ranks'
 * values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "utrain/base.h"
#include "utrain/dist.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int reps = 20;
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else {
            fprintf(stderr, "usage: comm_allreduce [--reps R] [--json FILE]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    char err[512];
    ut_comm *c = ut_comm_init(NULL, NULL, false, 0, err, sizeof err);
    if (!c) {
        fprintf(stderr, "comm_allreduce: %s\n", err);
        return 1;
    }
    int rank = ut_comm_rank(c), size = ut_comm_size(c);
    static const int64_t bytes[] = {4 << 10, 256 << 10, 4 << 20, 64 << 20};
    FILE *out = json && rank == 0 ? fopen(json, "w") : NULL;
    if (out) fprintf(out, "{\"backend\": \"%s\", \"ranks\": %d", ut_comm_backend(c), size);
    if (rank == 0) printf("%s backend, %d ranks: all-reduce of float32, median of timed calls\n", ut_comm_backend(c), size);
    for (size_t k = 0; k < sizeof bytes / sizeof bytes[0]; k++) {
        int64_t n = bytes[k] / 4;
        int r = bytes[k] >= (4 << 20) ? (reps + 3) / 4 : reps;
        float *buf = ut_malloc_check((size_t)bytes[k]);
        double *t = ut_malloc_check((size_t)r * sizeof *t);
        int64_t bad = 0;
        for (int it = -2; it < r; it++) {
            for (int64_t i = 0; i < n; i++) buf[i] = (float)(rank + 1 + (i & 7));
            if (ut_comm_barrier(c)) goto fail;
            double t0 = now_s();
            if (ut_comm_wait(c, ut_comm_iallreduce(c, buf, n))) goto fail;
            float dt = (float)(now_s() - t0);
            if (ut_comm_wait(c, ut_comm_iallreduce_typed(c, &dt, 1, UT_F32, UT_REDUCE_MAX))) goto fail;
            if (it >= 0) t[it] = dt;
            for (int64_t i = 0; i < n; i++)
                bad += buf[i] != (float)(size * (size + 1) / 2 + size * (i & 7));
        }
        qsort(t, (size_t)r, sizeof *t, cmp);
        double med = r % 2 ? t[r / 2] : (t[r / 2 - 1] + t[r / 2]) / 2;
        if (rank == 0)
            printf("  %9lld bytes: %9.3f ms  %7.2f GB/s (bytes / time)%s\n", (long long)bytes[k], med * 1e3,
                   (double)bytes[k] / med / 1e9, bad ? "  WRONG SUMS" : "");
        if (out) fprintf(out, ", \"s_%lld\": %.9f", (long long)bytes[k], med);
        ut_free(t);
        ut_free(buf);
        if (bad) {
            fprintf(stderr, "comm_allreduce: rank %d: %lld wrong sums\n", rank, (long long)bad);
            ut_comm_finalize(c);
            return 1;
        }
    }
    if (out) {
        fprintf(out, "}\n");
        fclose(out);
    }
    ut_comm_finalize(c);
    return 0;
fail:
    fprintf(stderr, "comm_allreduce: %s\n", ut_comm_error(c));
    return 1;
}
