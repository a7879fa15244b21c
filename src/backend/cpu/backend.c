/* The CPU backend's table: host memory, the OpenMP/OpenBLAS kernels, flat
 * math and optimizer updates; streams are NULL and work is synchronous. */
#include "cpu.h"
#include "gemm.h"
#include "conv.h"

static void *stream_new(ut_stream_kind kind) {
    (void)kind;
    return NULL;
}
static void stream_noop(void *s) { (void)s; }

const ut_backend ut_backend_cpu = {
    .name = "cpu",
    .device = UT_CPU,
    .host_memory = true,
    .alloc = ut_cpu_alloc,
    .free = ut_cpu_free,
    .pages_alloc = ut_cpu_pages_alloc,
    .pages_release = ut_cpu_pages_release,
    .pages_free = ut_cpu_pages_free,
    .pages_resident = ut_cpu_pages_resident,
    .memset = ut_cpu_memset,
    .copy = ut_cpu_copy,
    .convert = ut_cpu_convert,
    .round = ut_cpu_round,
    .ops = ut_ops_cpu,
    .matmul_path = ut_cpu_matmul_path,
    .conv2d_path = ut_cpu_conv2d_path,
    .conv2d_relu = true,
    .linear_gelu = true,
    .sum_sq = ut_cpu_sum_sq,
    .sum_sq_to = ut_cpu_sum_sq_to,
    .scale = ut_cpu_scale,
    .accumulate = ut_cpu_accumulate,
    .optim_step = ut_cpu_optim_step,
    .step_scalars = ut_cpu_step_scalars,
    .stream_new = stream_new,
    .stream_sync = stream_noop,
    .stream_free = stream_noop,
};
