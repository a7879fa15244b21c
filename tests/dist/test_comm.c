/* The communicator at any world size. Run alone it tests the single-process
 * backend; tests/dist/test_mpi_launch runs the same program (as
 * mpi_comm_ranks) under mpirun with 1 to 4 ranks, where each rank checks the
 * collectives' results and prints "rank R/N: P passed, F failed".
 * Modes for the failure tests (argv[1]):
 *   timeout  rank 1 skips allreduce #3; the others must end within the 3 s timeout
 *   crash    rank 1 kills itself (SIGKILL) mid-run; mpirun must end the others
 *   abort    rank 1 fails a ut_abort mid-run; MPI_Abort must end the others
 *   stopped, branch: rank 1 stops itself (SIGSTOP) / runs a broadcast as #3
 *   p2p      in a group "pp", rank 0 waits for a message rank 1 never sends */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "../../src/backend/backend.h"
#include "utrain/base.h"
#include "utrain/dist.h"
#include "utrain/nn.h"
#include "utrain/ops.h"
#include "utrain/optim.h"
#include "utrain/train.h"

static ut_comm *comm;
static int rank, size;

static float *falloc(int64_t n) { return ut_malloc_check((size_t)(n ? n : 1) * sizeof(float)); }

// --- allreduce --------------------------------------------------------------

/* Small integers: float sums are exact, so results compare with ==. */
static float ar_value(int r, int64_t i) { return (float)((r + 1) * (i % 17 + 1)); }
static float ar_expect(int64_t i) { return (float)((i % 17 + 1) * size * (size + 1) / 2); }

static int64_t ar_check(const float *buf, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += buf[i] != ar_expect(i);
    return bad;
}

static void test_world_and_backend(void) {
    CHECK(ut_comm_world() == comm, "ut_comm_world is not the communicator made by init");
    CHECK(rank >= 0 && rank < size, "rank %d of %d", rank, size);
    const char *ws = getenv("WORLD_SIZE");
    const char *want = getenv("OMPI_COMM_WORLD_SIZE") ? "mpi" : ws && strcmp(ws, "1") ? "tcp" : "single";
    CHECK(strcmp(ut_comm_backend(comm), want) == 0, "backend %s, want %s", ut_comm_backend(comm),
          want);
}

static void test_allreduce_sizes(void) {
    const int64_t sizes[] = {0, 1, 7, 1000003};
    for (int s = 0; s < 4; s++) {
        int64_t n = sizes[s];
        float *buf = falloc(n);
        for (int64_t i = 0; i < n; i++) buf[i] = ar_value(rank, i);
        CHECK(ut_comm_wait(comm, ut_comm_iallreduce(comm, buf, n)) == 0, "%s", ut_comm_error(comm));
        int64_t bad = ar_check(buf, n);
        CHECK(bad == 0, "allreduce of %lld elements: %lld wrong", (long long)n, (long long)bad);
        ut_free(buf);
    }
}

// --- reduce-scatter and all-gather -------------------------------------------

static float rs_value(int r, int64_t j) { return (float)(r + 1 + j % 5); }

static void test_reduce_scatter(void) {
    const int64_t sizes[] = {0, 1, 7, 100003};
    for (int s = 0; s < 4; s++) {
        int64_t n = sizes[s];
        float *in = falloc(n * size), *out = falloc(n);
        for (int64_t j = 0; j < n * size; j++) in[j] = rs_value(rank, j);
        CHECK(ut_comm_wait(comm, ut_comm_ireduce_scatter(comm, in, out, n)) == 0, "%s",
              ut_comm_error(comm));
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = 0;
            for (int r = 0; r < size; r++) want += rs_value(r, rank * n + i);
            bad += out[i] != want;
        }
        CHECK(bad == 0, "reduce_scatter of %lld elements: %lld wrong", (long long)n, (long long)bad);
        ut_free(in);
        ut_free(out);
    }
}

static int64_t ag_bad(const float *out, int64_t n) {
    int64_t bad = 0;
    for (int r = 0; r < size; r++)
        for (int64_t i = 0; i < n; i++) bad += out[r * n + i] != (float)(r * 1000 + i % 1000);
    return bad;
}

static void test_allgather(void) {
    const int64_t sizes[] = {0, 1, 7, 100003};
    for (int s = 0; s < 4; s++) {
        int64_t n = sizes[s];
        float *in = falloc(n), *out = falloc(n * size);
        for (int64_t i = 0; i < n; i++) in[i] = (float)(rank * 1000 + i % 1000);
        CHECK(ut_comm_wait(comm, ut_comm_iallgather(comm, in, out, n)) == 0, "%s", ut_comm_error(comm));
        CHECK(ag_bad(out, n) == 0, "allgather of %lld elements", (long long)n);
        /* in place: this rank's part already sits in the output */
        memset(out, 0, (size_t)(n * size) * sizeof(float));
        memcpy(out + rank * n, in, (size_t)n * sizeof(float));
        CHECK(ut_comm_wait(comm, ut_comm_iallgather(comm, out + rank * n, out, n)) == 0, "%s",
              ut_comm_error(comm));
        CHECK(ag_bad(out, n) == 0, "in-place allgather of %lld elements", (long long)n);
        ut_free(in);
        ut_free(out);
    }
}

/* Uneven parts, some empty: rank r's count is (r*37 + base) % 53, or 0 for
 * rank 1 when base is odd. */
static void v_counts(int64_t *counts, int64_t base) {
    for (int r = 0; r < size; r++) counts[r] = (r == 1 && base % 2) ? 0 : (r * 37 + base) % 53 * base;
}

static void test_v_collectives(void) {
    const int64_t bases[] = {0, 1, 2, 3, 999};
    int64_t *counts = ut_calloc_check((size_t)size, sizeof *counts);
    for (int s = 0; s < 5; s++) {
        v_counts(counts, bases[s]);
        int64_t n = 0, mine = 0;
        for (int r = 0; r < size; r++) n += counts[r];
        for (int r = 0; r < rank; r++) mine += counts[r];
        float *in = falloc(n), *out = falloc(counts[rank]);
        for (int64_t j = 0; j < n; j++) in[j] = rs_value(rank, j);
        ut_comm_req *q = ut_comm_ireduce_scatterv(comm, in, out, counts);
        CHECK(ut_comm_wait(comm, q) == 0, "%s", ut_comm_error(comm));
        CHECK(ut_comm_test(comm, q) == 1, "a finished request tests done");
        int64_t bad = 0;
        for (int64_t i = 0; i < counts[rank]; i++) {
            float want = 0;
            for (int r = 0; r < size; r++) want += rs_value(r, mine + i);
            bad += out[i] != want;
        }
        CHECK(bad == 0, "reduce_scatterv of %lld elements: %lld wrong", (long long)n, (long long)bad);
        /* all-gather in place: each rank fills its part, gets everyone's */
        for (int64_t j = 0; j < n; j++) in[j] = -1;
        for (int64_t i = 0; i < counts[rank]; i++) in[mine + i] = (float)(rank * 1000 + i % 1000);
        CHECK(ut_comm_wait(comm, ut_comm_iallgatherv(comm, in, counts)) == 0, "%s", ut_comm_error(comm));
        bad = 0;
        int64_t at = 0;
        for (int r = 0; r < size; r++)
            for (int64_t i = 0; i < counts[r]; i++) bad += in[at++] != (float)(r * 1000 + i % 1000);
        CHECK(bad == 0, "allgatherv of %lld elements: %lld wrong", (long long)n, (long long)bad);
        ut_free(in);
        ut_free(out);
    }
    ut_free(counts);
}

// --- non-blocking requests ----------------------------------------------------

/* Issued back to back, waited in reverse order; each buffer its own size. */
static void test_out_of_order_waits(void) {
    enum { K = 12 };
    float *bufs[K];
    ut_comm_req *reqs[K];
    for (int k = 0; k < K; k++) {
        int64_t n = 1 + k * 4099;
        bufs[k] = falloc(n);
        for (int64_t i = 0; i < n; i++) bufs[k][i] = ar_value(rank, i + k);
        reqs[k] = ut_comm_iallreduce(comm, bufs[k], n);
        CHECK(reqs[k] != NULL, "request %d is NULL", k);
    }
    for (int k = K - 1; k >= 0; k--) {
        int64_t n = 1 + k * 4099, bad = 0;
        CHECK(ut_comm_wait(comm, reqs[k]) == 0, "%s", ut_comm_error(comm));
        for (int64_t i = 0; i < n; i++) bad += bufs[k][i] != ar_expect(i + k);
        CHECK(bad == 0, "request %d: %lld wrong", k, (long long)bad);
        CHECK(ut_comm_wait(comm, reqs[k]) == 0, "a second wait on a done request");
        ut_free(bufs[k]);
    }
}

/* Far more requests outstanding than the queue has slots (256): issuing
 * blocks while the queue is full and continues as operations finish. */
static void test_many_small_requests(void) {
    enum { K = 1000, N = 3 };
    float *buf = falloc(K * N);
    ut_comm_req **reqs = ut_malloc_check(K * sizeof *reqs);
    for (int64_t i = 0; i < K * N; i++) buf[i] = ar_value(rank, i);
    for (int k = 0; k < K; k++) reqs[k] = ut_comm_iallreduce(comm, buf + k * N, N);
    int failed = 0;
    for (int k = K - 1; k >= 0; k -= 7) failed += ut_comm_wait(comm, reqs[k]) != 0;
    for (int k = 0; k < K; k++) failed += ut_comm_wait(comm, reqs[k]) != 0;
    CHECK(failed == 0, "%d waits failed: %s", failed, ut_comm_error(comm));
    CHECK(ar_check(buf, K * N) == 0, "wrong sums");
    ut_free(reqs);
    ut_free(buf);
}

// --- blocking helpers ---------------------------------------------------------

static void test_f64_i64(void) {
    double d[3] = {rank + 0.5, 1.0, -2.25};
    CHECK(ut_comm_allreduce_f64(comm, d, 3) == 0, "%s", ut_comm_error(comm));
    CHECK_NEAR(d[0], size * (size - 1) / 2.0 + 0.5 * size, 0);
    CHECK_NEAR(d[1], size, 0);
    CHECK_NEAR(d[2], -2.25 * size, 0);
    int64_t v[3] = {rank, 1, (int64_t)1 << 40};
    CHECK(ut_comm_allreduce_i64(comm, v, 3) == 0, "%s", ut_comm_error(comm));
    CHECK(v[0] == (int64_t)size * (size - 1) / 2, "%lld", (long long)v[0]);
    CHECK(v[1] == size, "%lld", (long long)v[1]);
    CHECK(v[2] == ((int64_t)size << 40), "%lld", (long long)v[2]);
}

/* 16-bit all-reduce: bf16 and fp16 sums, each addition rounded to the type */
static void test_allreduce16(void) {
    const ut_backend *cpu = ut_backend_get(UT_CPU);
    const ut_dtype dts[2] = {UT_BF16, UT_F16};
    for (int t = 0; t < 2; t++) {
        /* exact halves; -3 each; 257, which rounds to 256 in bf16 (8 significant bits) and stays in fp16 */
        float x[4] = {(rank + 1) * 0.5f, -3.0f, 257.0f, 0.0f}, y[4];
        uint16_t w[4];
        cpu->convert(w, dts[t], x, UT_F32, 4);
        ut_comm_req *r = ut_comm_iallreduce16(comm, w, 4, dts[t]);
        CHECK(r && ut_comm_wait(comm, r) == 0, "%s", ut_comm_error(comm));
        cpu->convert(y, UT_F32, w, dts[t], 4);
        CHECK_NEAR(y[0], 0.25 * size * (size + 1), 0);
        CHECK_NEAR(y[1], -3.0 * size, 0);
        CHECK_NEAR(y[2], (dts[t] == UT_BF16 ? 256.0 : 257.0) * size, 0);
        CHECK_NEAR(y[3], 0, 0);
    }
}

/* The typed collectives: sum, max and average over f32, bf16 and f16, as an
 * all-reduce and as a reduce-scatter. Rank r holds, at element i of its
 * part, v(r, i) = (r + 1) * (i + 1) * 0.5 with sign (-1)^i, and 257 at i = 3
 * on rank 0 (which bf16 rounds to 256, fp16 keeps), so every rank's value is
 * exact in all three types except that one; expected values are computed
 * here in double and rounded once to the type. */
static float typed_value(int r, int i) {
    if (i == 3) return r == 0 ? 257.0f : 1.0f;
    return (float)((r + 1) * (i + 1)) * 0.5f * (i % 2 ? -1.0f : 1.0f);
}
static double typed_expect(int i, ut_reduce_op op, ut_dtype dt) {
    double s = 0, mx = -INFINITY;
    const ut_backend *cpu = ut_backend_get(UT_CPU);
    for (int r = 0; r < size; r++) {
        float v = typed_value(r, i);
        uint16_t w;
        if (dt != UT_F32) { /* what the rank holds in dt */
            cpu->convert(&w, dt, &v, UT_F32, 1);
            cpu->convert(&v, UT_F32, &w, dt, 1);
        }
        s += v;
        mx = v > mx ? v : mx;
    }
    return op == UT_REDUCE_MAX ? mx : op == UT_REDUCE_AVG ? s / size : s;
}
static const char *op_name(int op) { return op == UT_REDUCE_SUM ? "sum" : op == UT_REDUCE_MAX ? "max" : "avg"; }
static void test_typed(void) {
    const ut_backend *cpu = ut_backend_get(UT_CPU);
    const ut_dtype dts[3] = {UT_F32, UT_BF16, UT_F16};
    enum { N = 5 };
    for (int d = 0; d < 3; d++)
        for (int op = 0; op < UT_REDUCE_COUNT; op++) {
            size_t esz = ut_dtype_size(dts[d]);
            /* all-reduce of N elements */
            float x[N], y[N];
            char buf[N * 4];
            for (int i = 0; i < N; i++) x[i] = typed_value(rank, i);
            cpu->convert(buf, dts[d], x, UT_F32, N);
            ut_comm_req *r = ut_comm_iallreduce_typed(comm, buf, N, dts[d], (ut_reduce_op)op);
            CHECK(r && ut_comm_wait(comm, r) == 0, "%s", ut_comm_error(comm));
            cpu->convert(y, UT_F32, buf, dts[d], N);
            for (int i = 0; i < N; i++) {
                /* float32: exact but for an average that does not divide; 16 bits: a rounding or two */
                double want = typed_expect(i, (ut_reduce_op)op, dts[d]);
                double tol = dts[d] == UT_F32 ? 1e-6 * fabs(want) : fabs(want) / 64;
                CHECK(fabs(y[i] - want) <= tol, "allreduce %s %s [%d]: %g, want %g", ut_dtype_name(dts[d]),
                      op_name(op), i, y[i], want);
            }
            /* reduce-scatter: every rank's input has size parts of N; part p at element i holds typed_value(rank, i) + p */
            float *in = malloc((size_t)size * N * sizeof(float));
            char *inb = malloc((size_t)size * N * esz), outb[N * 4];
            for (int p = 0; p < size; p++)
                for (int i = 0; i < N; i++) in[p * N + i] = typed_value(rank, i) + (float)p;
            cpu->convert(inb, dts[d], in, UT_F32, (int64_t)size * N);
            r = ut_comm_ireduce_scatter_typed(comm, inb, outb, N, dts[d], (ut_reduce_op)op);
            CHECK(r && ut_comm_wait(comm, r) == 0, "%s", ut_comm_error(comm));
            cpu->convert(y, UT_F32, outb, dts[d], N);
            for (int i = 0; i < N; i++) {
                double shift = op == UT_REDUCE_SUM ? (double)rank * size : rank;
                double want = typed_expect(i, (ut_reduce_op)op, dts[d]) + shift;
                double tol = dts[d] == UT_F32 ? 1e-6 * fabs(want) : fabs(want) / 32;
                CHECK(fabs(y[i] - want) <= tol, "reduce_scatter %s %s [%d]: %g, want %g", ut_dtype_name(dts[d]),
                      op_name(op), i, y[i], want);
            }
            free(in);
            free(inb);
        }
    /* NaN wins a max */
    float v[2] = {rank == size - 1 ? NAN : 1.0f, (float)rank};
    ut_comm_req *r = ut_comm_iallreduce_typed(comm, v, 2, UT_F32, UT_REDUCE_MAX);
    CHECK(r && ut_comm_wait(comm, r) == 0 && isnan(v[0]) && v[1] == (float)(size - 1), "max with a NaN: %g %g", v[0],
          v[1]);
    CHECK(ut_comm_accepts_device_memory(comm, UT_CPU) && !ut_comm_accepts_device_memory(comm, UT_SIM),
          "the MPI and single communicators take host memory only");
}

static void test_bcast_barrier(void) {
    unsigned char b[1001];
    int root = size - 1;
    for (int i = 0; i < 1001; i++) b[i] = rank == root ? (unsigned char)(i * 7 + 3) : 0;
    CHECK(ut_comm_bcast(comm, b, sizeof b, root) == 0, "%s", ut_comm_error(comm));
    int bad = 0;
    for (int i = 0; i < 1001; i++) bad += b[i] != (unsigned char)(i * 7 + 3);
    CHECK(bad == 0, "bcast from rank %d: %d bytes wrong", root, bad);
    CHECK(ut_comm_bcast(comm, b, 0, 0) == 0, "empty bcast");
    CHECK(ut_comm_bcast(comm, b, sizeof b, size) == -1, "bcast from a root that does not exist");
    CHECK(strstr(ut_comm_error(comm), "root") != NULL, "message: %s", ut_comm_error(comm));
    CHECK(ut_comm_barrier(comm) == 0, "%s", ut_comm_error(comm));
}

// --- start-up agreement ---------------------------------------------------------

static void test_check_same(void) {
    char err[512] = "";
    CHECK(ut_comm_check_same(comm, 0x0123456789abcdefULL, "config hash", err, sizeof err) == 0,
          "%s", err);
    int rc = ut_comm_check_same(comm, rank == 2 ? 5 : 7, "config hash", err, sizeof err);
    if (size < 3) {
        CHECK(rc == 0, "no rank 2, yet: %s", err);
    } else {
        CHECK(rc == -1, "rank 2 passed a different value");
        CHECK(strstr(err, "config hash differs") && strstr(err, "rank 2 has 0000000000000005") &&
                  strstr(err, "rank 0 has 0000000000000007"),
              "message: %s", err);
        CHECK(!strstr(err, "rank 1 "), "rank 1 agrees with rank 0: %s", err);
    }
    if (size > 1) { /* the last rank differs, at any size */
        rc = ut_comm_check_same(comm, rank == size - 1 ? 1 : 2, "vocabulary", err, sizeof err);
        char want[64];
        snprintf(want, sizeof want, "rank %d has 0000000000000001", size - 1);
        CHECK(rc == -1 && strstr(err, "vocabulary differs") && strstr(err, want), "rc %d: %s", rc,
              err);
    }
}

// --- statistics -------------------------------------------------------------------

static void test_stats(void) {
    double b0, w0, b1, w1;
    ut_comm_stats(comm, &b0, &w0);
    float *buf = falloc(1000);
    for (int i = 0; i < 1000; i++) buf[i] = ar_value(rank, i);
    CHECK(ut_comm_wait(comm, ut_comm_iallreduce(comm, buf, 1000)) == 0, "%s", ut_comm_error(comm));
    ut_comm_stats(comm, &b1, &w1);
    CHECK_NEAR(b1 - b0, size > 1 ? 4000 : 0, 0);
    CHECK(w1 >= w0 && w0 >= 0, "wait seconds %g then %g", w0, w1);
    ut_comm_stats(comm, NULL, NULL);
    ut_free(buf);
}

// --- process groups and point-to-point ----------------------------------------------

/* Ranks split by parity, ranked in reverse: each group's size, order and
 * sums cover its own members only; a group's name shows in its errors. */
/* Tensor parallelism's f and g (ut_tp_copy, ut_tp_reduce) around a
 * column-parallel and a row-parallel linear: an MLP split over the ranks
 * (rank r holds rows [r*h, (r+1)*h) of the first weight and bias and the
 * same columns of the second weight) gives the whole MLP's output and, for
 * its parts, the whole MLP's gradients, with no backward written for it. */
static float tp_val(int i, int k) { return sinf(0.37f * (float)i + (float)k) * 0.5f; }
static ut_tensor *tp_leaf(ut_ctx *ctx, int ndim, const int64_t *ne, const float *v) {
    ut_tensor *t = ut_tensor_from(ctx, UT_F32, ndim, ne, v);
    ut_tensor_set_requires_grad(t, true);
    return t;
}
static void test_tp_ops(void) {
    enum { B = 3, C = 4, H = 8, O = 5 };
    const int h = H / size, lo = rank * h;
    if (H % size) return;
    float x[B * C], w1[H * C], b1[H], w2[O * H], b2[O];
    for (int i = 0; i < B * C; i++) x[i] = tp_val(i, 1);
    for (int i = 0; i < H * C; i++) w1[i] = tp_val(i, 2);
    for (int i = 0; i < H; i++) b1[i] = tp_val(i, 3);
    for (int i = 0; i < O * H; i++) w2[i] = tp_val(i, 4);
    for (int i = 0; i < O; i++) b2[i] = tp_val(i, 5);
    float w1p[H * C], w2p[O * H];
    for (int i = 0; i < h * C; i++) w1p[i] = w1[lo * C + i];
    for (int o = 0; o < O; o++)
        for (int j = 0; j < h; j++) w2p[o * h + j] = w2[o * H + lo + j];
    float y[2][B * O], gx[2][B * C], gw1[2][H * C], gw2[2][O * H], gb2[2][O];
    for (int tp = 0; tp < 2; tp++) {
        ut_ctx *ctx = ut_ctx_new(NULL);
        ut_tensor *X = tp_leaf(ctx, 2, (int64_t[]){B, C}, x), *B2 = tp_leaf(ctx, 1, (int64_t[]){O}, b2);
        ut_tensor *W1 = tp_leaf(ctx, 2, (int64_t[]){tp ? h : H, C}, tp ? w1p : w1);
        ut_tensor *B1 = tp_leaf(ctx, 1, (int64_t[]){tp ? h : H}, tp ? b1 + lo : b1);
        ut_tensor *W2 = tp_leaf(ctx, 2, (int64_t[]){O, tp ? h : H}, tp ? w2p : w2);
        ut_tensor *in = tp ? ut_tp_copy(ctx, X, comm) : X;
        ut_tensor *a = ut_gelu(ctx, ut_linear(ctx, in, W1, B1));
        ut_tensor *part = ut_linear(ctx, a, W2, NULL);
        ut_tensor *Y = ut_add(ctx, tp ? ut_tp_reduce(ctx, part, comm) : part, B2);
        ut_tensor *loss = ut_sum(ctx, ut_mul(ctx, Y, Y));
        CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
        if (!loss) {
            ut_ctx_free(ctx);
            return;
        }
        ut_tensor_get(Y, y[tp], sizeof y[tp]);
        ut_tensor_get_grad(X, gx[tp], sizeof gx[tp]);
        ut_tensor_get_grad(W1, gw1[tp], (size_t)(tp ? h : H) * C * sizeof(float));
        ut_tensor_get_grad(W2, gw2[tp], (size_t)O * (tp ? h : H) * sizeof(float));
        ut_tensor_get_grad(B2, gb2[tp], sizeof gb2[tp]);
        ut_ctx_free(ctx);
    }
    /* each difference relative to the largest value of its tensor (sums in another order) */
    double worst = 0, diff, top;
#define TP_CMP(a, b) diff = fmax(diff, fabs((double)(a) - (double)(b))), top = fmax(top, fabs((double)(b)))
#define TP_END() worst = fmax(worst, diff / top), diff = 0, top = 1e-30
    diff = 0, top = 1e-30;
    for (int i = 0; i < B * O; i++) TP_CMP(y[1][i], y[0][i]);
    TP_END();
    for (int i = 0; i < B * C; i++) TP_CMP(gx[1][i], gx[0][i]);
    TP_END();
    for (int i = 0; i < h * C; i++) TP_CMP(gw1[1][i], gw1[0][lo * C + i]);
    TP_END();
    for (int o = 0; o < O; o++)
        for (int j = 0; j < h; j++) TP_CMP(gw2[1][o * h + j], gw2[0][o * H + lo + j]);
    TP_END();
    for (int i = 0; i < O; i++) TP_CMP(gb2[1][i], gb2[0][i]);
    TP_END();
#undef TP_CMP
#undef TP_END
    CHECK(worst <= 1e-5, "tensor-parallel MLP on %d ranks: output and gradients differ by %g relative", size, worst);
}

/* A vocabulary-parallel embedding and LM head with its cross-entropy
 * (ut_tp_embedding, ut_tp_cross_entropy), split over the ranks (rank r holds
 * rows [r*Vp, (r+1)*Vp) of the embedding table and of the head's weight):
 * the loss and, for each rank's part, the tables' gradients are the whole
 * model's, with one target ignored. */
static void test_tp_vocab(void) {
    enum { N = 6, C = 4, V = 8 };
    if (V % size) return;
    const int vp = V / size, lo = rank * vp;
    float e[V * C], w[V * C];
    int32_t ids[N] = {0, 7, 3, 4, 4, 6}, tg[N] = {5, 1, -100, 7, 0, 3};
    for (int i = 0; i < V * C; i++) e[i] = tp_val(i, 6), w[i] = tp_val(i, 7);
    float loss[2], ge[2][V * C], gw[2][V * C];
    for (int tp = 0; tp < 2; tp++) {
        ut_ctx *ctx = ut_ctx_new(NULL);
        ut_tensor *E = tp_leaf(ctx, 2, (int64_t[]){tp ? vp : V, C}, tp ? e + lo * C : e);
        ut_tensor *W = tp_leaf(ctx, 2, (int64_t[]){tp ? vp : V, C}, tp ? w + lo * C : w);
        ut_tensor *I = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){N}, ids);
        ut_tensor *T = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){N}, tg);
        ut_tensor *h = tp ? ut_tp_embedding(ctx, I, E, V, -1, comm) : ut_embedding(ctx, I, E);
        h = ut_gelu(ctx, h);
        ut_tensor *l = tp ? ut_tp_cross_entropy(ctx, ut_linear(ctx, ut_tp_copy(ctx, h, comm), W, NULL), T, V, -100,
                                                comm)
                          : ut_cross_entropy(ctx, ut_linear(ctx, h, W, NULL), T, -100);
        CHECK(l && ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
        if (!l) {
            ut_ctx_free(ctx);
            return;
        }
        ut_tensor_get(l, &loss[tp], sizeof(float));
        ut_tensor_get_grad(E, ge[tp], (size_t)(tp ? vp : V) * C * sizeof(float));
        ut_tensor_get_grad(W, gw[tp], (size_t)(tp ? vp : V) * C * sizeof(float));
        ut_ctx_free(ctx);
    }
    double worst = fabs((double)loss[1] - loss[0]) / fabs((double)loss[0]), top = 1e-30, diff = 0;
    for (int i = 0; i < vp * C; i++) {
        diff = fmax(diff, fabs((double)ge[1][i] - ge[0][lo * C + i]));
        diff = fmax(diff, fabs((double)gw[1][i] - gw[0][lo * C + i]));
    }
    for (int i = 0; i < V * C; i++) top = fmax(top, fmax(fabs((double)ge[0][i]), fabs((double)gw[0][i])));
    worst = fmax(worst, diff / top);
    CHECK(worst <= 1e-5, "vocabulary-parallel embedding and cross-entropy on %d ranks: loss %.9g against %.9g, "
          "differences %g relative", size, loss[1], loss[0], worst);
    /* a vocabulary that the ranks cannot split equally is refused */
    if (size > 1) {
        ut_ctx *ctx = ut_ctx_new(NULL);
        ut_tensor *W = tp_leaf(ctx, 2, (int64_t[]){vp, C}, w);
        ut_tensor *T = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){N}, tg);
        ut_tensor *x = tp_leaf(ctx, 2, (int64_t[]){N, C}, e);
        CHECK(!ut_tp_cross_entropy(ctx, ut_linear(ctx, x, W, NULL), T, V + 1, -100, comm) && ut_ctx_error(ctx) &&
                  strstr(ut_ctx_error(ctx), "is not a vocabulary of 9"),
              "%s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "no error");
        ut_ctx_free(ctx);
    }
    /* label smoothing has no vocabulary-parallel form: refused, naming it */
    {
        ut_ctx *ctx = ut_ctx_new(NULL);
        ut_ctx_set_label_smoothing(ctx, 0.1f);
        ut_tensor *W = tp_leaf(ctx, 2, (int64_t[]){vp, C}, w);
        ut_tensor *T = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){N}, tg);
        ut_tensor *x = tp_leaf(ctx, 2, (int64_t[]){N, C}, e);
        CHECK(!ut_tp_cross_entropy(ctx, ut_linear(ctx, x, W, NULL), T, V, -100, comm) && ut_ctx_error(ctx) &&
                  strstr(ut_ctx_error(ctx), "tp_cross_entropy: label smoothing 0.1"),
              "%s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "no error");
        ut_ctx_free(ctx);
    }
}

/* Element e of a part (ut_partition) in its full tensor. */
static int64_t full_index(const ut_tensor *t, const ut_partition *pt, int64_t e) {
    int64_t inner = 1;
    for (int d = pt->dim + 1; d < t->ndim; d++) inner *= t->ne[d];
    int64_t L = t->ne[pt->dim], F = pt->full_ne[pt->dim], piece = F / ((int64_t)pt->blocks * pt->parts);
    int64_t i = e % inner, r = e / inner, o = r / L, c = r % L;
    int64_t full_c = (c / piece) * (F / pt->blocks) + pt->part * piece + c % piece;
    return (o * F + full_c) * inner + i;
}

/* Two GPT-2 blocks split over the ranks (ut_block_layer_init_tp: heads, MLP
 * features) against the same blocks whole: the output, the input's
 * gradient and every parameter's gradient (each rank's slice of it) agree. */
static void test_tp_blocks(void) {
    enum { B = 2, T = 5, C = 16, H = 4, NB = 2 };
    if (H % size) return;
    char err[256] = "", name[32];
    ut_model *m[2] = {ut_model_new("x"), ut_model_new("x")};
    ut_block_layer blk[2][NB];
    for (int k = 0; k < NB; k++) {
        snprintf(name, sizeof name, "h.%d", k);
        ut_block_layer_init(m[0], &blk[0][k], name, C, H, 0.05f, 0);
        CHECK(ut_block_layer_init_tp(m[1], &blk[1][k], name, C, H, 0.05f, 0, rank, size, ut_tp_hooks_of(comm), err,
                                     sizeof err) == 0,
              "%s", err);
    }
    ut_model_finalize(m[0], 3);
    ut_model_finalize(m[1], 3);
    float x[B * T * C], R[B * T * C], y[2][B * T * C], gx[2][B * T * C];
    for (int i = 0; i < B * T * C; i++) x[i] = tp_val(i, 6), R[i] = tp_val(i, 7);
    for (int s = 0; s < 2; s++) {
        ut_model_zero_grad(m[s]);
        ut_ctx *ctx = ut_ctx_new(NULL);
        ut_tensor *X = tp_leaf(ctx, 3, (int64_t[]){B, T, C}, x), *h = X;
        for (int k = 0; k < NB; k++) h = ut_block_layer_forward(ctx, &blk[s][k], h, false);
        ut_tensor *loss = ut_sum(ctx, ut_mul(ctx, h, ut_tensor_from(ctx, UT_F32, 3, (int64_t[]){B, T, C}, R)));
        CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
        if (!loss) return;
        ut_tensor_get(h, y[s], sizeof y[s]);
        ut_tensor_get_grad(X, gx[s], sizeof gx[s]);
        ut_ctx_free(ctx);
    }
    double worst = 0, top = 1e-30;
    for (int i = 0; i < B * T * C; i++) worst = fmax(worst, fabs(y[1][i] - y[0][i])), top = fmax(top, fabs(y[0][i]));
    CHECK(worst / top <= 1e-5, "output differs by %g relative", worst / top);
    worst = 0, top = 1e-30;
    for (int i = 0; i < B * T * C; i++) worst = fmax(worst, fabs(gx[1][i] - gx[0][i])), top = fmax(top, fabs(gx[0][i]));
    CHECK(worst / top <= 1e-5, "input gradient differs by %g relative", worst / top);
    const ut_params *p = &m[1]->params;
    int split = 0;
    for (int i = 0; i < p->n; i++) {
        const ut_tensor *t = p->t[i], *w = ut_model_param(m[0], p->names[i]);
        int64_t n = 1, nw = 1;
        for (int d = 0; d < t->ndim; d++) n *= t->ne[d];
        for (int d = 0; w && d < w->ndim; d++) nw *= w->ne[d];
        float *g = malloc((size_t)n * sizeof(float)), *gw = malloc((size_t)nw * sizeof(float));
        ut_tensor_get_grad(t, g, (size_t)n * sizeof(float));
        if (w) ut_tensor_get_grad(w, gw, (size_t)nw * sizeof(float));
        double d = 0, tp = 1e-30;
        for (int64_t e = 0; w && e < n; e++) {
            int64_t f = p->part[i].parts > 1 ? full_index(t, &p->part[i], e) : e;
            d = fmax(d, fabs(g[e] - gw[f]));
        }
        for (int64_t e = 0; w && e < nw; e++) tp = fmax(tp, fabs(gw[e]));
        split += p->part[i].parts > 1;
        CHECK(w && d / tp <= 1e-5, "%s: gradient differs by %g relative", p->names[i], d / tp);
        free(g);
        free(gw);
    }
    CHECK(size == 1 || split == 6 * NB, "%d split parameters, want %d", split, 6 * NB);
    ut_model_free(m[0]);
    ut_model_free(m[1]);
}

/* The loss of model m on input x (ndim, xne) and targets y (yndim, yne),
 * after its backward, in training mode (dropout drawn from the same seed
 * and stream for both models); NAN when it failed. */
static float split_loss_mode(ut_model *m, int ndim, const int64_t *xne, const int32_t *x, int yndim,
                             const int64_t *yne, const int32_t *y, bool training) {
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = 77});
    ut_ctx_set_training(ctx, training); /* dropout on: the split model must draw the whole model's masks */
    ut_ctx_rng_stream(ctx, 5);
    float v = NAN;
    ut_tensor *l = ut_model_loss(m, ctx, ut_model_forward(m, ctx, ut_tensor_from(ctx, UT_I32, ndim, xne, x)),
                                 ut_tensor_from(ctx, UT_I32, yndim, yne, y));
    CHECK(l && ut_backward(ctx, l) == 0 && ut_tensor_get(l, &v, sizeof(float)) == 0, "%s: %s", m->type,
          ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
    ut_ctx_free(ctx);
    return v;
}
static float split_loss(ut_model *m, int ndim, const int64_t *xne, const int32_t *x, int yndim, const int64_t *yne,
                        const int32_t *y) {
    return split_loss_mode(m, ndim, xne, x, yndim, yne, y, true);
}

/* Each parameter of the split model `part` against the whole model's (by
 * name): its gradient within 1e-5 of its slice of the whole gradient,
 * relative to the largest value of the whole model's gradient (some
 * gradients are zero but for rounding: attention's key bias). Returns the
 * number of split parameters. */
static int check_split_grads(ut_model *whole, ut_model *part) {
    const ut_params *p = &part->params;
    int split = 0;
    double top = 1e-30;
    for (int i = 0; i < whole->params.n; i++) {
        const ut_tensor *w = whole->params.t[i];
        int64_t nw = ut_nelem(w);
        float *gw = malloc((size_t)nw * sizeof(float));
        ut_tensor_get_grad(w, gw, (size_t)nw * sizeof(float));
        for (int64_t e = 0; e < nw; e++) top = fmax(top, fabs(gw[e]));
        free(gw);
    }
    for (int i = 0; i < p->n; i++) {
        const ut_tensor *t = p->t[i], *w = ut_model_param(whole, p->names[i]);
        int64_t n = ut_nelem(t), nw = w ? ut_nelem(w) : 0;
        float *g = malloc((size_t)n * sizeof(float)), *gw = malloc((size_t)(nw + 1) * sizeof(float));
        ut_tensor_get_grad(t, g, (size_t)n * sizeof(float));
        if (w) ut_tensor_get_grad(w, gw, (size_t)nw * sizeof(float));
        double d = 0;
        for (int64_t e = 0; w && e < n; e++)
            d = fmax(d, fabs(g[e] - gw[p->part[i].parts > 1 ? full_index(t, &p->part[i], e) : e]));
        split += p->part[i].parts > 1;
        CHECK(w && d / top <= 1e-5, "%s %s: gradient differs by %g relative", part->type, p->names[i], d / top);
        free(g);
        free(gw);
    }
    return split;
}

/* GPT-2's language model split over the ranks (ut_model_create_layout:
 * its blocks Megatron-style, the tied token embedding and head by
 * vocabulary, the loss ut_tp_cross_entropy) against the same model whole,
 * from the same seed: the loss and each rank's part of every parameter's
 * gradient agree, and so does the gradient norm from the parts
 * (ut_tp_grad_norm_sq); every parameter gathered whole is the whole model's
 * (ut_tp_gather_param) and a whole tensor scattered to the parts
 * (ut_tp_scatter_param) gathers back; a model without a split form, and a
 * vocabulary the ranks do not divide, are refused. */
static void test_tp_gpt2(void) {
    enum { B = 2, T = 6, V = 32 };
    if (4 % size) return;
    char err[256] = "";
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "n_layer", "2"), ut_kv_set(kv, "n_head", "4"), ut_kv_set(kv, "n_embd", "16");
    ut_kv_set(kv, "vocab_size", "32"), ut_kv_set(kv, "block_size", "8"), ut_kv_set(kv, "dropout", "0.2");
    ut_model_layout lay = {.tp_rank = rank, .tp_size = size, .tp = ut_tp_hooks_of(comm)};
    ut_model *m[2] = {ut_model_create("gpt2", kv, 11, err, sizeof err),
                      ut_model_create_layout("gpt2", kv, 11, UT_CPU, &lay, err, sizeof err)};
    CHECK(m[0] && m[1] && m[1]->tp_size == size, "%s", err);
    if (!m[0] || !m[1]) {
        ut_kv_free(kv);
        return;
    }
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) x[i] = (i * 7 + 3) % V, y[i] = i == 4 ? -1 : (i * 5 + 2) % V;
    float loss[2];
    for (int v = 0; v < 2; v++) loss[v] = split_loss(m[v], 2, (int64_t[]){B, T}, x, 2, (int64_t[]){B, T}, y);
    CHECK(fabs((double)loss[1] - loss[0]) <= 1e-5 * fabs((double)loss[0]), "loss %.9g split over %d, %.9g whole",
          loss[1], size, loss[0]);
    ut_model_zero_grad(m[0]); /* dropout was on: without it the loss differs */
    float no_drop = split_loss_mode(m[0], 2, (int64_t[]){B, T}, x, 2, (int64_t[]){B, T}, y, false);
    CHECK(fabs((double)no_drop - loss[0]) > 1e-4, "loss %.9g with dropout, %.9g without", loss[0], no_drop);
    ut_model_zero_grad(m[0]);
    split_loss(m[0], 2, (int64_t[]){B, T}, x, 2, (int64_t[]){B, T}, y);
    const ut_params *p = &m[1]->params;
    int split = check_split_grads(m[0], m[1]);
    CHECK(size == 1 || split == 1 + 6 * 2, "%d split parameters, want 13", split);
    /* the whole model's gradient norm from the parts */
    double sq = -1, want = ut_grad_norm_sq(UT_CPU, m[0]->params.flat_grad, m[0]->params.numel);
    CHECK(ut_tp_grad_norm_sq(p, comm, &sq, err, sizeof err) == 0 && fabs(sq - want) <= 1e-5 * want,
          "norm^2 %.9g from the parts, %.9g whole: %s", sq, want, err);
    /* every parameter gathered whole is the whole model's (the same initial
     * values, element by element); a whole tensor scattered and gathered
     * again comes back */
    bool same = true, back = true;
    for (int i = 0; i < p->n; i++) {
        const ut_tensor *w = ut_model_param(m[0], p->names[i]);
        int64_t nf = ut_tp_full_numel(p, i);
        float *full = malloc((size_t)nf * sizeof(float)), *ref = malloc((size_t)nf * sizeof(float));
        CHECK(w && ut_nelem(w) == nf && ut_tp_gather_param(p, i, comm, full, err, sizeof err) == 0, "%s: %s",
              p->names[i], err);
        ut_tensor_get(w, ref, (size_t)nf * sizeof(float));
        same &= !memcmp(full, ref, (size_t)nf * sizeof(float));
        for (int64_t e = 0; e < nf; e++) ref[e] = (float)e * 0.5f - 3.0f;
        ut_tp_scatter_param(&m[1]->params, i, ref);
        CHECK(ut_tp_gather_param(p, i, comm, full, err, sizeof err) == 0, "%s", err);
        back &= !memcmp(full, ref, (size_t)nf * sizeof(float));
        free(full);
        free(ref);
    }
    CHECK(same && back, "gathered parameters %s the whole model's; scattered and gathered %s",
          same ? "equal" : "differ from", back ? "come back" : "differ");
    ut_model_free(m[0]);
    ut_model_free(m[1]);
    if (size > 1) {
        ut_kv_set(kv, "vocab_size", "33");
        CHECK(!ut_model_create_layout("gpt2", kv, 11, UT_CPU, &lay, err, sizeof err) &&
                  strstr(err, "vocab_size 33 must be divisible"), "%s", err);
        CHECK(!ut_model_create_layout("cnn", NULL, 11, UT_CPU, &lay, err, sizeof err) &&
                  strstr(err, "has no tensor-parallel form"), "%s", err);
    }
    /* pipeline stages: a model without a pipeline form, and a stage out of range */
    ut_model_layout stages = {.tp_rank = 0, .tp_size = 1, .pp_rank = 1, .pp_size = 2};
    CHECK(!ut_model_create_layout("cnn", NULL, 11, UT_CPU, &stages, err, sizeof err) &&
              strstr(err, "has no pipeline form (dist.pipeline_parallel 2)"), "%s", err);
    stages.pp_rank = 2;
    CHECK(!ut_model_create_layout("gpt2", kv, 11, UT_CPU, &stages, err, sizeof err) &&
              strstr(err, "pipeline stage 2 of 2"), "%s", err);
    ut_kv_free(kv);
}

/* BERT and RoBERTa classifiers split over the ranks (q, k, v and the
 * intermediate column-parallel, the output denses row-parallel, the word
 * embedding by vocabulary with its padding row; embeddings of positions and
 * types, layer norms, pooler and classifier whole) against the same models
 * whole, hidden and attention dropout on: loss and every gradient part agree
 * on right-padded rows (the packed layout) and on rows that start with
 * padding (the padded layout). */
static void test_tp_bert(void) {
    enum { B = 2, T = 6 };
    if (4 % size) return;
    const char *names[2] = {"bert", "roberta"};
    for (int k = 0; k < 2; k++) {
        char err[256] = "";
        ut_kv *kv = ut_kv_new();
        ut_kv_set(kv, "vocab_size", "32"), ut_kv_set(kv, "hidden_size", "16");
        ut_kv_set(kv, "num_hidden_layers", "2"), ut_kv_set(kv, "num_attention_heads", "4");
        ut_kv_set(kv, "intermediate_size", "32"), ut_kv_set(kv, "max_position_embeddings", "16");
        ut_kv_set(kv, "type_vocab_size", "2"), ut_kv_set(kv, "num_labels", "3");
        ut_kv_set(kv, "hidden_dropout_prob", "0.2"), ut_kv_set(kv, "attention_probs_dropout_prob", "0.3");
        if (k) ut_kv_set(kv, "pad_token_id", "1");
        ut_model_layout lay = {.tp_rank = rank, .tp_size = size, .tp = ut_tp_hooks_of(comm)};
        ut_model *m[2] = {ut_model_create(names[k], kv, 5, err, sizeof err),
                          ut_model_create_layout(names[k], kv, 5, UT_CPU, &lay, err, sizeof err)};
        CHECK(m[0] && m[1], "%s: %s", names[k], err);
        for (int padded = 0; padded < 2 && m[0] && m[1]; padded++) {
            /* planes (B, 3, T): ids, types, mask; row 1 right-padded, or starting with padding */
            int32_t x[B * 3 * T] = {5, 7, 9, 4, 4, 2, /**/ 0, 0, 0, 1, 1, 1, /**/ 1, 1, 1, 1, 1, 1,
                                    6, 8, 3, 2, 1, 1, /**/ 0, 0, 1, 1, 0, 0, /**/ 1, 1, 1, 1, 0, 0};
            int32_t y[B] = {2, 0};
            if (padded) x[(1 * 3 + 2) * T + 0] = 0, x[1 * 3 * T + 0] = 1;
            if (padded) x[(1 * 3 + 2) * T + 4] = 1, x[(1 * 3 + 2) * T + 5] = 1;
            ut_model_zero_grad(m[0]), ut_model_zero_grad(m[1]);
            float loss[2];
            for (int v = 0; v < 2; v++) loss[v] = split_loss(m[v], 3, (int64_t[]){B, 3, T}, x, 1, (int64_t[]){B}, y);
            CHECK(fabs((double)loss[1] - loss[0]) <= 1e-5 * fabs((double)loss[0]),
                  "%s (%s rows): loss %.9g split over %d, %.9g whole", names[k], padded ? "padded" : "packed",
                  loss[1], size, loss[0]);
            int split = check_split_grads(m[0], m[1]);
            /* per layer q, k, v, intermediate (weight and bias each) and two output weights; the word embedding */
            CHECK(size == 1 || split == 2 * 10 + 1, "%s: %d split parameters, want 21", names[k], split);
        }
        ut_model_free(m[0]);
        ut_model_free(m[1]);
        ut_kv_free(kv);
    }
}

/* BART's classifier split over the ranks (its encoder's and decoder's self
 * and cross attention and feed-forward layers Megatron-style, the shared
 * embedding by vocabulary with its padding row, positions, layer norms and
 * the head whole) against the whole model, every dropout on: loss and every
 * gradient part agree in both input layouts; sizes the ranks do not divide
 * are refused. */
static void test_tp_bart(void) {
    enum { B = 2, T = 6 };
    if (4 % size) return;
    char err[256] = "";
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "vocab_size", "32"), ut_kv_set(kv, "d_model", "16"), ut_kv_set(kv, "encoder_layers", "1");
    ut_kv_set(kv, "decoder_layers", "1"), ut_kv_set(kv, "encoder_attention_heads", "4");
    ut_kv_set(kv, "decoder_attention_heads", "4"), ut_kv_set(kv, "encoder_ffn_dim", "32");
    ut_kv_set(kv, "decoder_ffn_dim", "32"), ut_kv_set(kv, "max_position_embeddings", "16");
    ut_kv_set(kv, "num_labels", "3"), ut_kv_set(kv, "dropout", "0.2"), ut_kv_set(kv, "classifier_dropout", "0.1");
    ut_kv_set(kv, "attention_dropout", "0.3"), ut_kv_set(kv, "activation_dropout", "0.25");
    ut_model_layout lay = {.tp_rank = rank, .tp_size = size, .tp = ut_tp_hooks_of(comm)};
    ut_model *m[2] = {ut_model_create("bart", kv, 9, err, sizeof err),
                      ut_model_create_layout("bart", kv, 9, UT_CPU, &lay, err, sizeof err)};
    CHECK(m[0] && m[1], "%s", err);
    for (int padded = 0; padded < 2 && m[0] && m[1]; padded++) {
        /* planes (B, 3, T): ids ending in </s> (2), types, mask; row 1 right-padded (pad 1), or not */
        int32_t x[B * 3 * T] = {5, 7, 9, 4, 4, 2, /**/ 0, 0, 0, 0, 0, 0, /**/ 1, 1, 1, 1, 1, 1,
                                6, 8, 3, 2, 1, 1, /**/ 0, 0, 0, 0, 0, 0, /**/ 1, 1, 1, 1, 0, 0};
        int32_t y[B] = {1, 2};
        if (padded) x[(1 * 3 + 2) * T + 0] = 0, x[(1 * 3 + 2) * T + 4] = 1;
        ut_model_zero_grad(m[0]), ut_model_zero_grad(m[1]);
        float loss[2];
        for (int v = 0; v < 2; v++) loss[v] = split_loss(m[v], 3, (int64_t[]){B, 3, T}, x, 1, (int64_t[]){B}, y);
        CHECK(fabs((double)loss[1] - loss[0]) <= 1e-5 * fabs((double)loss[0]),
              "bart (%s rows): loss %.9g split over %d, %.9g whole", padded ? "padded" : "packed", loss[1], size,
              loss[0]);
        int split = check_split_grads(m[0], m[1]);
        /* self attention k, v, q (weight and bias) and out weight: 7 per attention, 3 attentions; fc1
         * weight and bias and fc2 weight: 3 per layer, 2 layers; the shared embedding */
        CHECK(size == 1 || split == 3 * 7 + 2 * 3 + 1, "bart: %d split parameters, want 28", split);
    }
    ut_model_free(m[0]);
    ut_model_free(m[1]);
    if (size > 1) {
        ut_kv_set(kv, "encoder_ffn_dim", "33");
        CHECK(!ut_model_create_layout("bart", kv, 9, UT_CPU, &lay, err, sizeof err) &&
                  strstr(err, "must be divisible by dist.tensor_parallel"), "%s", err);
    }
    ut_kv_free(kv);
}

/* The 3-D mesh (ut_mesh_init) for every (tp, pp) that divides the world:
 * each group has its size, this rank's place in it, and holds the ranks the
 * layout says (a sum of world ranks over each group against the formula);
 * a world the sizes do not divide is refused with a message. */
/* Generation on a split sequence-to-sequence model (BART and T5 from the
 * same seed, split over the ranks): every rank runs the search on the
 * logits gathered from the parts (ut_tp_gather_last) and produces exactly
 * the whole model's tokens, greedy and with beams, cached and uncached. */
static void test_tp_generate(void) {
    enum { B = 3, S = 5, NEW = 6 };
    if (4 % size) return;
    char err[256] = "";
    for (int which = 0; which < 2; which++) {
        const char *name = which ? "t5" : "bart";
        ut_kv *kv = ut_kv_new();
        ut_kv_set(kv, "vocab_size", "32"), ut_kv_set(kv, "d_model", "16"), ut_kv_set(kv, "task", "seq2seq");
        if (which) {
            ut_kv_set(kv, "d_kv", "4"), ut_kv_set(kv, "d_ff", "32"), ut_kv_set(kv, "num_layers", "2");
            ut_kv_set(kv, "num_heads", "4"), ut_kv_set(kv, "feed_forward_proj", "gated-gelu");
        } else {
            ut_kv_set(kv, "encoder_layers", "1"), ut_kv_set(kv, "decoder_layers", "2");
            ut_kv_set(kv, "encoder_attention_heads", "4"), ut_kv_set(kv, "decoder_attention_heads", "4");
            ut_kv_set(kv, "encoder_ffn_dim", "32"), ut_kv_set(kv, "decoder_ffn_dim", "32");
            ut_kv_set(kv, "max_position_embeddings", "16");
        }
        ut_model_layout lay = {.tp_rank = rank, .tp_size = size, .tp = ut_tp_hooks_of(comm)};
        ut_model *m[2] = {ut_model_create(name, kv, 5, err, sizeof err),
                          ut_model_create_layout(name, kv, 5, UT_CPU, &lay, err, sizeof err)};
        ut_kv_free(kv);
        CHECK(m[0] && m[1] && m[0]->decoder && m[1]->decoder, "%s: %s", name, err);
        int32_t src[B * S] = {5, 9, 12, 7, 2, /**/ 4, 4, 21, 2, 1, /**/ 30, 3, 17, 8, 2};
        int32_t mask[B * S] = {1, 1, 1, 1, 1, /**/ 1, 1, 1, 1, 0, /**/ 1, 1, 1, 1, 1};
        if (which) src[9] = 0; /* T5's pad */
        for (int mode = 0; mode < 3 && m[0] && m[1]; mode++) {
            ut_gen_opts o;
            ut_gen_opts_init(&o);
            o.max_new_tokens = NEW, o.num_beams = mode == 2 ? 3 : 1, o.no_cache = mode == 1;
            int32_t out[2][B * NEW];
            int64_t lens[2][B];
            for (int v = 0; v < 2; v++)
                CHECK(ut_generate(m[v], &o, src, mask, B, S, out[v], lens[v], err, sizeof err) == 0, "%s: %s", name,
                      err);
            CHECK(!memcmp(out[0], out[1], sizeof out[0]) && !memcmp(lens[0], lens[1], sizeof lens[0]),
                  "%s (%s): split over %d the tokens differ from the whole model's (first row %d %d %d, whole %d %d %d)",
                  name, mode == 2 ? "3 beams" : mode ? "greedy, no cache" : "greedy", size, out[1][0], out[1][1],
                  out[1][2], out[0][0], out[0][1], out[0][2]);
        }
        ut_model_free(m[0]);
        ut_model_free(m[1]);
    }
}

static void test_mesh(void) {
    char err[256] = "";
    for (int tp = 1; tp <= size; tp++)
        for (int pp = 1; tp * pp <= size; pp++) {
            if (size % (tp * pp)) continue;
            ut_mesh m;
            CHECK(ut_mesh_init(&m, comm, tp, pp, err, sizeof err) == 0, "tp %d pp %d: %s", tp, pp, err);
            int dp = size / (tp * pp);
            CHECK(m.dp == dp && m.tp_rank == rank % tp && m.dp_rank == (rank / tp) % dp &&
                      m.pp_rank == rank / (tp * dp) && ut_comm_size(m.tp_group) == tp &&
                      ut_comm_size(m.dp_group) == dp && ut_comm_size(m.pp_group) == pp &&
                      ut_comm_rank(m.tp_group) == m.tp_rank && ut_comm_rank(m.dp_group) == m.dp_rank &&
                      ut_comm_rank(m.pp_group) == m.pp_rank,
                  "tp %d pp %d: ranks %d %d %d of %d %d %d", tp, pp, m.tp_rank, m.dp_rank, m.pp_rank,
                  ut_comm_size(m.tp_group), ut_comm_size(m.dp_group), ut_comm_size(m.pp_group));
            /* each group's sum of world ranks, from the layout */
            int base = m.pp_rank * tp * dp, want[3] = {0, 0, 0};
            for (int t = 0; t < tp; t++) want[0] += base + m.dp_rank * tp + t;
            for (int d = 0; d < dp; d++) want[1] += base + d * tp + m.tp_rank;
            for (int q = 0; q < pp; q++) want[2] += q * tp * dp + m.dp_rank * tp + m.tp_rank;
            ut_comm *g[3] = {m.tp_group, m.dp_group, m.pp_group};
            for (int k = 0; k < 3; k++) {
                float v = (float)rank;
                CHECK(ut_comm_wait(g[k], ut_comm_iallreduce(g[k], &v, 1)) == 0 && v == (float)want[k],
                      "tp %d pp %d: group %s sums ranks to %g, want %d", tp, pp, ut_comm_name(g[k]), v, want[k]);
            }
            ut_mesh_free(&m);
        }
    ut_mesh m;
    CHECK(ut_mesh_init(&m, comm, size + 1, 1, err, sizeof err) == -1 &&
              strstr(err, "is not divisible by dist.tensor_parallel"), "%s", err);
}

static void test_split_groups(void) {
    char err[256] = "";
    ut_comm *g = ut_comm_split(comm, rank % 2, -rank, "parity", err, sizeof err);
    CHECK(g, "%s", err);
    if (!g) return;
    int members = size / 2 + (rank % 2 == 0 ? size % 2 : 0), below = 0;
    for (int r = rank + 2; r < size; r += 2) below++; /* higher world ranks come first */
    CHECK(ut_comm_size(g) == members && ut_comm_rank(g) == below && ut_comm_world_rank(g) == rank &&
              !strcmp(ut_comm_name(g), "parity"),
          "group: rank %d of %d (want %d of %d), name %s", ut_comm_rank(g), ut_comm_size(g), below, members,
          ut_comm_name(g));
    float x[3] = {(float)rank + 1, 1, (float)(rank % 2)};
    CHECK(ut_comm_wait(g, ut_comm_iallreduce(g, x, 3)) == 0, "%s", ut_comm_error(g));
    float want = 0;
    for (int r = rank % 2; r < size; r += 2) want += (float)r + 1;
    CHECK(x[0] == want && x[1] == (float)members && x[2] == (float)(members * (rank % 2)),
          "group sums %g %g %g, want %g %d", x[0], x[1], x[2], want, members);
    CHECK(ut_comm_isend(g, x, 1, ut_comm_rank(g)) == NULL && strstr(ut_comm_error(g), "parity rank") &&
              strstr(ut_comm_error(g), "peer") && strstr(ut_comm_error(g), "is this rank itself"),
          "%s", ut_comm_error(g));
    CHECK(ut_comm_wait(g, NULL) == -1, "a failed request waits as failed");
    CHECK(!ut_comm_split(comm, 0, 0, "world", err, sizeof err) && strstr(err, "other than 'world'"), "%s", err);
    ut_comm_finalize(g);
}

/* The trainer runs on the communicator handed to it (ut_trainer_run_on),
 * not on the world: the ranks split by parity, and each parity group
 * trains a run of its own (its own experiment, a config that differs from
 * the other group's) with ddp over the group. Over the world the ranks'
 * configs would differ and the run would be refused. */
static void test_trainer_on_group(void) {
    char err[512] = "", dir[64] = "/tmp/utrain-onGroup-XXXXXX", path[160], set[256];
    ut_comm *g = ut_comm_split(comm, rank % 2, rank, "parity", err, sizeof err);
    CHECK(g, "%s", err);
    if (!g) return;
    /* rank 0 of the world makes the directory and the token shard; the others wait for it */
    int64_t made = 0;
    if (rank == 0 && mkdtemp(dir)) {
        snprintf(path, sizeof path, "%s/tokens.bin", dir);
        FILE *f = fopen(path, "wb");
        int32_t head[256] = {20240520, 1, 4096};
        uint16_t tok[4096];
        for (int i = 0; i < 4096; i++) tok[i] = (uint16_t)(i * 7 % 64);
        made = f && fwrite(head, sizeof head, 1, f) == 1 && fwrite(tok, sizeof tok, 1, f) == 1;
        if (f) fclose(f);
    }
    ut_comm_allreduce_i64(comm, &made, 1);
    CHECK(made == 1, "the shard");
    ut_comm_bcast(comm, dir, sizeof dir, 0);
    ut_config cfg;
    ut_config_init(&cfg);
    const char *sets[] = {"model.name=gpt2", "model.n_layer=1", "model.n_head=1", "model.n_embd=8",
                          "model.vocab_size=64", "model.block_size=8", "data.name=tokens", "data.seq_len=8",
                          "train.max_steps=2", "train.batch_size=2", "train.eval_strategy=no",
                          "train.progress=off", "threads=1"};
    int rc = 0;
    for (size_t i = 0; i < sizeof sets / sizeof sets[0] && !rc; i++) rc = ut_config_set(&cfg, sets[i], err, sizeof err);
    snprintf(set, sizeof set, "data.train_path=%s/tokens.bin", dir);
    if (!rc) rc = ut_config_set(&cfg, set, err, sizeof err);
    snprintf(set, sizeof set, "output_dir=%s", dir);
    if (!rc) rc = ut_config_set(&cfg, set, err, sizeof err);
    snprintf(set, sizeof set, "experiment_name=parity%d", rank % 2);
    if (!rc) rc = ut_config_set(&cfg, set, err, sizeof err);
    snprintf(set, sizeof set, "optim.lr=%g", 0.01 * (1 + rank % 2)); /* the groups' configs differ */
    if (!rc) rc = ut_config_set(&cfg, set, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (!rc) CHECK(ut_trainer_run_on(&cfg, g, NULL, NULL, NULL, NULL) == UT_EXIT_OK, "a run on the parity group");
    snprintf(path, sizeof path, "%s/parity%d/checkpoints", dir, rank % 2);
    int64_t steps[4];
    CHECK(ut_ckpt_list(path, steps, 4) >= 1 && steps[0] == 2, "the group's run wrote its step-2 checkpoint in %s",
          path);
    ut_config_free(&cfg);
    ut_comm_finalize(g);
    int64_t done = 1;
    ut_comm_allreduce_i64(comm, &done, 1); /* every group is done before rank 0 removes the directory */
    if (rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "removing %s", dir);
    }
}

/* A ring: every rank sends to the next and receives from the one before,
 * both orders of posting, large enough to need the receiver (rendezvous)
 * and, under UT_COMM_CHUNK=1000, to be cut into chunks. */
static void test_send_recv_ring(void) {
    if (size == 1) {
        float v = 1;
        CHECK(ut_comm_isend(comm, &v, 1, 0) == NULL && strstr(ut_comm_error(comm), "is this rank itself"), "%s",
              ut_comm_error(comm));
        return;
    }
    const int64_t n = 300007;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    float *out = falloc(n), *in = falloc(n);
    for (int order = 0; order < 2; order++) {
        for (int64_t i = 0; i < n; i++) out[i] = (float)(rank * 1000 + i % 997 + order), in[i] = -1;
        ut_comm_req *s, *r;
        if (order == 0) s = ut_comm_isend(comm, out, n, next), r = ut_comm_irecv(comm, in, n, prev);
        else r = ut_comm_irecv(comm, in, n, prev), s = ut_comm_isend(comm, out, n, next);
        CHECK(ut_comm_wait(comm, r) == 0 && ut_comm_wait(comm, s) == 0, "%s", ut_comm_error(comm));
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += in[i] != (float)(prev * 1000 + i % 997 + order);
        CHECK(bad == 0, "order %d: %lld elements wrong from rank %d", order, (long long)bad, prev);
    }
    /* a collective issued after a receive finishes first; the receive then */
    float one = 1;
    ut_comm_req *r = ut_comm_irecv(comm, in, 5, prev);
    CHECK(ut_comm_wait(comm, ut_comm_iallreduce(comm, &one, 1)) == 0 && one == (float)size, "allreduce after recv");
    CHECK(ut_comm_test(comm, r) == 0, "the receive finished before its send was issued");
    CHECK(ut_comm_barrier(comm) == 0, "%s", ut_comm_error(comm)); /* every rank has tested: now send */
    CHECK(ut_comm_wait(comm, ut_comm_isend(comm, out, 5, next)) == 0 && ut_comm_wait(comm, r) == 0, "%s",
          ut_comm_error(comm));
    ut_free(out);
    ut_free(in);
}

/* The direct collectives (dist.h) on the simulated device's memory, over a
 * group of every rank: set up with direct (the log line's path says so),
 * then a float32 sum, a bf16 max, an fp16 average, the uneven reduce-scatter
 * and the in-place all-gather, each queued between the compute stream's
 * writes and reads and checked against the exact result; host mode sets up
 * nothing. The group's finalize takes the direct path's own group with it. */
static void test_direct_on_sim(void) {
    const ut_backend *sim = ut_backend_get(UT_SIM);
    char path[640], err[512];
    ut_comm *c = ut_comm_split(comm, 0, rank, "direct", err, sizeof err);
    CHECK(c, "split: %s", err);
    if (!c) return;
    CHECK(ut_comm_device_setup(c, UT_SIM, UT_DEVCOMM_HOST, path, sizeof path, err, sizeof err) == 0 &&
              !ut_comm_direct(c, UT_SIM) && strstr(path, "through host memory"),
          "host mode: %s", path);
    CHECK(ut_comm_device_setup(c, UT_SIM, UT_DEVCOMM_DIRECT, path, sizeof path, err, sizeof err) == 0, "direct: %s",
          err);
    CHECK(ut_comm_direct(c, UT_SIM) && strstr(path, "direct, the simulated device's collectives"), "path: %s", path);
    if (!ut_comm_direct(c, UT_SIM)) {
        ut_comm_finalize(c);
        return;
    }
    enum { N = 1000 };
    float *h = falloc(N), *back = falloc(N);
    float *d = sim->alloc(N * sizeof(float));
    void *d16 = sim->alloc(N * 2);
    /* float32 sum: small integers, exact */
    for (int64_t i = 0; i < N; i++) h[i] = ar_value(rank, i);
    sim->copy(d, h, N * sizeof(float), UT_COPY_H2D);
    CHECK(ut_comm_direct_allreduce_ordered(c, UT_SIM, d, N, UT_F32, UT_REDUCE_SUM) == 0, "sum: %s", ut_comm_error(c));
    sim->copy(back, d, N * sizeof(float), UT_COPY_D2H);
    CHECK(ar_check(back, N) == 0, "direct float32 sum: wrong values");
    /* bf16 max and fp16 average of values exact in both: rank r has r + i % 7 */
    const ut_dtype dts[2] = {UT_BF16, UT_F16};
    const ut_reduce_op ops[2] = {UT_REDUCE_MAX, UT_REDUCE_AVG};
    const char *opname[2] = {"max", "avg"};
    for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < N; i++) h[i] = (float)(rank + i % 7);
        sim->copy(d, h, N * sizeof(float), UT_COPY_H2D);
        sim->convert(d16, dts[k], d, UT_F32, N);
        CHECK(ut_comm_direct_allreduce_ordered(c, UT_SIM, d16, N, dts[k], ops[k]) == 0, "%s: %s", opname[k],
              ut_comm_error(c));
        sim->convert(d, UT_F32, d16, dts[k], N);
        sim->copy(back, d, N * sizeof(float), UT_COPY_D2H);
        int64_t bad = 0;
        for (int64_t i = 0; i < N; i++) {
            float want = k == 0 ? (float)(size - 1 + i % 7) : (float)(i % 7) + (float)(size - 1) / 2.0f;
            bad += back[i] != want;
        }
        CHECK(bad == 0, "direct %s %s: %lld wrong", ut_dtype_name(dts[k]), opname[k], (long long)bad);
    }
    /* uneven parts: rank r owns r + 3 elements */
    int64_t *counts = ut_calloc_check((size_t)size, sizeof *counts), total = 0, off = 0;
    for (int r = 0; r < size; r++) total += counts[r] = r + 3;
    for (int r = 0; r < rank; r++) off += counts[r];
    float *in = sim->alloc((size_t)total * sizeof(float)), *out = sim->alloc((size_t)counts[rank] * sizeof(float));
    float *hin = falloc(total), *hout = falloc(total);
    for (int64_t i = 0; i < total; i++) hin[i] = ar_value(rank, i);
    sim->copy(in, hin, (size_t)total * sizeof(float), UT_COPY_H2D);
    ut_comm_direct_after_compute(c, UT_SIM);
    CHECK(ut_comm_direct_reduce_scatterv(c, UT_SIM, in, out, counts) == 0, "reduce_scatterv: %s", ut_comm_error(c));
    ut_comm_direct_before_compute(c, UT_SIM);
    sim->copy(hout, out, (size_t)counts[rank] * sizeof(float), UT_COPY_D2H);
    int64_t bad = 0;
    for (int64_t i = 0; i < counts[rank]; i++) bad += hout[i] != ar_expect(off + i);
    CHECK(bad == 0, "direct reduce_scatterv: %lld of %lld wrong", (long long)bad, (long long)counts[rank]);
    /* every rank's part of in from that rank, in place: rank r's part holds 100 r + i */
    for (int64_t i = 0; i < counts[rank]; i++) hin[off + i] = (float)(100 * rank + i);
    sim->copy(in, hin, (size_t)total * sizeof(float), UT_COPY_H2D);
    ut_comm_direct_after_compute(c, UT_SIM);
    CHECK(ut_comm_direct_allgatherv(c, UT_SIM, in, counts) == 0, "allgatherv: %s", ut_comm_error(c));
    ut_comm_direct_before_compute(c, UT_SIM);
    sim->copy(hout, in, (size_t)total * sizeof(float), UT_COPY_D2H);
    bad = 0;
    for (int r = 0, o = 0; r < size; o += (int)counts[r], r++)
        for (int64_t i = 0; i < counts[r]; i++) bad += hout[o + i] != (float)(100 * r + i);
    CHECK(bad == 0, "direct allgatherv: %lld wrong", (long long)bad);
    CHECK(ut_comm_direct_status(c, UT_SIM) == 0, "status: %s", ut_comm_error(c));
    sim->free(in);
    sim->free(out);
    sim->free(d);
    sim->free(d16);
    ut_free(counts);
    free(hin);
    free(hout);
    free(h);
    free(back);
    ut_comm_finalize(c);
}

/* Groups progress independently: rank 1 blocks in a collective on group a
 * that rank 0 joins only after a send to rank 1 on group b has finished. One
 * queue for both would deadlock (the watchdog would end the job). */
static void test_groups_do_not_block_each_other(void) {
    char err[256] = "";
    ut_comm *a = ut_comm_split(comm, 0, 0, "a", err, sizeof err), *b = ut_comm_split(comm, 0, 0, "b", err, sizeof err);
    CHECK(a && b, "%s", err);
    if (!a || !b || size == 1) {
        ut_comm_finalize(b);
        ut_comm_finalize(a);
        return;
    }
    float x = 1, y[4] = {0};
    if (rank == 1) {
        ut_comm_req *ra = ut_comm_iallreduce(a, &x, 1);
        usleep(100000); /* a's thread is inside the blocking collective */
        CHECK(ut_comm_wait(b, ut_comm_irecv(b, y, 4, 0)) == 0, "%s", ut_comm_error(b));
        CHECK(ut_comm_wait(a, ra) == 0, "%s", ut_comm_error(a));
        CHECK(y[0] == 7 && y[3] == 7, "received %g %g", y[0], y[3]);
    } else {
        if (rank == 0) {
            for (int i = 0; i < 4; i++) y[i] = 7;
            CHECK(ut_comm_wait(b, ut_comm_isend(b, y, 4, 1)) == 0, "%s", ut_comm_error(b));
        }
        CHECK(ut_comm_wait(a, ut_comm_iallreduce(a, &x, 1)) == 0, "%s", ut_comm_error(a));
    }
    CHECK(x == (float)size, "group a's sum %g", x);
    ut_comm_finalize(b);
    ut_comm_finalize(a);
}

// --- failure modes (run under mpirun by test_mpi_launch) ---------------------------

/* Under MPI a failure ends the job (the watchdog, MPI_Abort); under TCP the
 * operation fails, and the rank reports it and exits, as the trainer does. */
static void or_exit(int rc, ut_comm *c) {
    if (!rc) return;
    fprintf(stderr, "utrain: %s\n", ut_comm_error(c));
    exit(1);
}

static int fail_mode(const char *mode) {
    float x[4] = {1, 2, 3, 4};
    ut_comm_wait(comm, ut_comm_iallreduce(comm, x, 4)); /* #1 */
    ut_comm_barrier(comm);                              /* #2 */
    if (strcmp(mode, "p2p") == 0) { /* in a group: rank 0 waits for a message rank 1 never sends */
        char err[256];
        ut_comm *g = ut_comm_split(comm, 0, 0, "pp", err, sizeof err);
        if (g && rank == 0) or_exit(ut_comm_wait(g, ut_comm_irecv(g, x, 4, 1)), g);
        else sleep(60);
    } else if (strcmp(mode, "timeout") == 0 || strcmp(mode, "stopped") == 0 || strcmp(mode, "branch") == 0) {
        if (rank == 1 && mode[0] == 't') {
            sleep(60); /* skips #3; the others' watchdogs end the job */
        } else if (rank == 1 && mode[0] == 's') {
            raise(SIGSTOP); /* its watchdog cannot answer either */
            sleep(60);      /* continued by mpirun as it ends the job */
        } else if (rank == 1) {
            char b[8] = "";
            or_exit(ut_comm_bcast(comm, b, sizeof b, 0), comm); /* #3 is another operation */
        } else {
            or_exit(ut_comm_wait(comm, ut_comm_iallreduce(comm, x, 4)), comm); /* #3 never completes */
        }
    } else {
        for (int it = 0; it < 1000000; it++) {
            if (rank == 1 && it == 50) {
                if (strcmp(mode, "crash") == 0) raise(SIGKILL);
                UT_ASSERT(it != 50 && "rank 1 fails on purpose");
            }
            or_exit(ut_comm_wait(comm, ut_comm_iallreduce(comm, x, 4)), comm);
            if (it > 100) usleep(1000);
        }
    }
    fprintf(stderr, "rank %d: %s mode: still running, the job was not ended\n", rank, mode);
    return 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    double timeout =
        !strcmp(mode, "timeout") || !strcmp(mode, "stopped") || !strcmp(mode, "branch") || !strcmp(mode, "p2p") ? 3 : 120;
    if (strcmp(mode, "crash") == 0 || strcmp(mode, "abort") == 0) timeout = 0; /* mpirun's job */
    char err[512];
    comm = ut_comm_init(&argc, &argv, false, timeout, err, sizeof err);
    if (!comm) {
        fprintf(stderr, "ut_comm_init: %s\n", err);
        return 1;
    }
    rank = ut_comm_rank(comm);
    size = ut_comm_size(comm);
    if (*mode) return fail_mode(mode);
    RUN(test_world_and_backend);
    RUN(test_allreduce_sizes);
    RUN(test_reduce_scatter);
    RUN(test_allgather);
    RUN(test_v_collectives);
    RUN(test_out_of_order_waits);
    RUN(test_many_small_requests);
    RUN(test_f64_i64);
    RUN(test_allreduce16);
    RUN(test_typed);
    RUN(test_bcast_barrier);
    RUN(test_check_same);
    RUN(test_stats);
    RUN(test_split_groups);
    RUN(test_trainer_on_group);
    RUN(test_tp_ops);
    RUN(test_tp_blocks);
    RUN(test_tp_vocab);
    RUN(test_tp_gpt2);
    RUN(test_tp_bert);
    RUN(test_tp_bart);
    RUN(test_tp_generate);
    RUN(test_mesh);
    RUN(test_send_recv_ring);
    RUN(test_groups_do_not_block_each_other);
    RUN(test_direct_on_sim);
    ut_comm_finalize(comm);
    ut_comm_finalize(ut_comm_world()); /* the lazily made single world */
    printf("rank %d/%d: %d passed, %d failed\n", rank, size, t_passed, t_failed);
    return TEST_SUMMARY();
}
