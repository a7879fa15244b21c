/* CUDA kernels of MAX_POOL2D and their launchers (declared in conv.h): the
 * forward with its argmax, and the backward as a gather (each input element
 * sums, in output order, the outputs whose argmax it is: no atomics, and the
 * CPU's order of additions). */
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>

#include "cuda.h"
#include "launch.cuh"
#include "conv.h"

namespace {

using utk::blocks_for;
using utk::stream;

/* one output per iteration: the max of its k x k window and its index in the
 * plane; the first max in row-major window order, a NaN wins */
__global__ void pool_fwd_kernel(float *out, int32_t *arg, const float *x, int64_t BC, int64_t H, int64_t W,
                                int64_t k, int64_t s, int64_t OH, int64_t OW) {
    int64_t total = BC * OH * OW;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = o % OW, oh = (o / OW) % OH, p = o / (OW * OH);
        const float *xp = x + p * H * W;
        int64_t best = oh * s * W + ow * s;
        float m = -INFINITY;
        for (int64_t kh = 0; kh < k; kh++)
            for (int64_t kw = 0; kw < k; kw++) {
                int64_t i = (oh * s + kh) * W + ow * s + kw;
                float v = xp[i];
                if (v > m || isnan(v)) {
                    m = v;
                    best = i;
                }
            }
        out[o] = m;
        arg[o] = (int32_t)best;
    }
}

/* one input element per iteration: dx += dout of the outputs whose window
 * holds it (oh s <= ih < oh s + k, likewise ow) and whose argmax it is, in
 * row-major output order */
__global__ void pool_bwd_kernel(float *dx, const float *dout, const int32_t *arg, int64_t BC, int64_t H, int64_t W,
                                int64_t k, int64_t s, int64_t OH, int64_t OW) {
    int64_t total = BC * H * W;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t iw = i % W, ih = (i / W) % H, p = i / (W * H);
        int64_t oh0 = ih - k + 1 > 0 ? (ih - k + s) / s : 0, oh1 = ih / s < OH - 1 ? ih / s : OH - 1;
        int64_t ow0 = iw - k + 1 > 0 ? (iw - k + s) / s : 0, ow1 = iw / s < OW - 1 ? iw / s : OW - 1;
        int32_t self = (int32_t)(ih * W + iw);
        const int32_t *ap = arg + p * OH * OW;
        const float *gp = dout + p * OH * OW;
        float acc = dx[i];
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++)
                if (ap[oh * OW + ow] == self) acc += gp[oh * OW + ow];
        dx[i] = acc;
    }
}

}  // namespace

extern "C" void ut_cuda_max_pool2d_fwd(float *out, int32_t *arg, const float *x, int64_t BC, int64_t H, int64_t W,
                                       int64_t k, int64_t s) {
    int64_t OH = (H - k) / s + 1, OW = (W - k) / s + 1, total = BC * OH * OW;
    if (total <= 0) return;
    pool_fwd_kernel<<<blocks_for(total), 256, 0, stream()>>>(out, arg, x, BC, H, W, k, s, OH, OW);
    ut_cuda_launched("max_pool2d forward");
}

extern "C" void ut_cuda_max_pool2d_bwd(float *dx, const float *dout, const int32_t *arg, int64_t BC, int64_t H,
                                       int64_t W, int64_t k, int64_t s) {
    int64_t OH = (H - k) / s + 1, OW = (W - k) / s + 1, total = BC * H * W;
    if (total <= 0) return;
    pool_bwd_kernel<<<blocks_for(total), 256, 0, stream()>>>(dx, dout, arg, BC, H, W, k, s, OH, OW);
    ut_cuda_launched("max_pool2d backward");
}
