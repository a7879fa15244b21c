/* CUDA kernels of CONV2D and their launchers (declared in conv.h): im2col,
 * its adjoint col2im (a gather: no atomics), the bias broadcast, and the
 * fixed-order reductions of the bias and weight gradients. The products are
 * ut_cuda_sgemm calls made by the glue (conv.c). */
#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda.h"
#include "launch.cuh"
#include "conv.h"

namespace {

using utk::blocks_for;
using utk::stream;

/* col (n, K, OH*OW) from x (n, C, H, W), one element per iteration */
__global__ void im2col_kernel(float *col, const float *x, int64_t n, ut_cuda_conv_shape d) {
    int64_t K = d.C * d.KH * d.KW, OHW = d.OH * d.OW, total = n * K * OHW;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = i % d.OW, r = i / d.OW;
        int64_t oh = r % d.OH;
        r /= d.OH;
        int64_t kk = r % K, img = r / K;
        int64_t kw = kk % d.KW, kh = (kk / d.KW) % d.KH, c = kk / (d.KW * d.KH);
        int64_t ih = oh * d.S - d.P + kh, iw = ow * d.S - d.P + kw;
        bool in = ih >= 0 && ih < d.H && iw >= 0 && iw < d.W;
        col[i] = in ? x[((img * d.C + c) * d.H + ih) * d.W + iw] : 0.0f;
    }
}

/* dx (n, C, H, W) += the column entries that read each element, gathered in
 * (kh, kw) order, one dx element per iteration */
__global__ void col2im_kernel(float *dx, const float *dcol, int64_t n, ut_cuda_conv_shape d) {
    int64_t K = d.C * d.KH * d.KW, OHW = d.OH * d.OW, total = n * d.C * d.H * d.W;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t iw = i % d.W, r = i / d.W;
        int64_t ih = r % d.H;
        r /= d.H;
        int64_t c = r % d.C, img = r / d.C;
        const float *cb = dcol + img * K * OHW;
        float acc = 0.0f;
        for (int64_t kh = 0; kh < d.KH; kh++) {
            int64_t ohs = ih + d.P - kh;
            if (ohs < 0 || ohs % d.S) continue;
            int64_t oh = ohs / d.S;
            if (oh >= d.OH) continue;
            for (int64_t kw = 0; kw < d.KW; kw++) {
                int64_t ows = iw + d.P - kw;
                if (ows < 0 || ows % d.S) continue;
                int64_t ow = ows / d.S;
                if (ow >= d.OW) continue;
                acc += cb[((c * d.KH + kh) * d.KW + kw) * OHW + oh * d.OW + ow];
            }
        }
        dx[i] += acc;
    }
}

/* out (n, OC, HW) = b[oc] */
__global__ void bias_fill_kernel(float *out, const float *b, int64_t total, int64_t OC, int64_t HW) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = b[(i / HW) % OC];
}

/* One block per output channel oc: db[oc] += the sum of dout[:, oc, :]. Each
 * thread sums a fixed stride of (image, pixel) in order, then the block folds
 * the threads' sums in a fixed tree. */
__global__ void bias_grad_kernel(float *db, const float *dout, int64_t B, int64_t OC, int64_t HW) {
    __shared__ float red[256];
    int64_t oc = blockIdx.x, n = B * HW;
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        int64_t img = i / HW, p = i % HW;
        acc += dout[(img * OC + oc) * HW + p];
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) db[oc] += red[0];
}

/* dst[j] += part[0][j] + ... + part[n-1][j], in that order */
__global__ void sum_parts_kernel(float *dst, const float *part, int64_t n, int64_t m) {
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < m; j += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s += part[i * m + j];
        dst[j] += s;
    }
}

}  // namespace

extern "C" void ut_cuda_im2col(float *col, const float *x, int64_t n, const ut_cuda_conv_shape *d) {
    int64_t total = n * d->C * d->KH * d->KW * d->OH * d->OW;
    if (total <= 0) return;
    im2col_kernel<<<blocks_for(total), 256, 0, stream()>>>(col, x, n, *d);
    ut_cuda_launched("conv2d im2col");
}

extern "C" void ut_cuda_col2im_add(float *dx, const float *dcol, int64_t n, const ut_cuda_conv_shape *d) {
    int64_t total = n * d->C * d->H * d->W;
    if (total <= 0) return;
    col2im_kernel<<<blocks_for(total), 256, 0, stream()>>>(dx, dcol, n, *d);
    ut_cuda_launched("conv2d col2im");
}

extern "C" void ut_cuda_conv_bias_fill(float *out, const float *b, int64_t n, int64_t OC, int64_t HW) {
    int64_t total = n * OC * HW;
    if (total <= 0) return;
    bias_fill_kernel<<<blocks_for(total), 256, 0, stream()>>>(out, b, total, OC, HW);
    ut_cuda_launched("conv2d bias");
}

extern "C" void ut_cuda_conv_bias_grad(float *db, const float *dout, int64_t B, int64_t OC, int64_t HW) {
    if (OC <= 0) return;
    bias_grad_kernel<<<(unsigned)OC, 256, 0, stream()>>>(db, dout, B, OC, HW);
    ut_cuda_launched("conv2d bias gradient");
}

extern "C" void ut_cuda_sum_parts_add(float *dst, const float *part, int64_t n, int64_t m) {
    if (m <= 0 || n <= 0) return;
    sum_parts_kernel<<<blocks_for(m), 256, 0, stream()>>>(dst, part, n, m);
    ut_cuda_launched("conv2d weight gradient sum");
}
