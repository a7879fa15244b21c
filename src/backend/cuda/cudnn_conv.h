/* cuDNN's convolutions behind CONV2D on the GPU (cudnn.c; the glue that
 * calls them: conv.c). C only: nvcc does not see it.
 * defines: ut_cudnn_pass, ut_cuda_cudnn_conv, ut_cuda_cudnn_probe. */
#ifndef UTRAIN_CUDA_CUDNN_CONV_H
#define UTRAIN_CUDA_CUDNN_CONV_H

#include <stdbool.h>
#include <stddef.h>

#include "../backend.h"
#include "conv.h"

typedef enum {
    UT_CUDNN_FWD,        /* out (B, OC, OH, OW) = beta out + conv(a = x, b = w) */
    UT_CUDNN_BWD_DATA,   /* out = dx (B, C, H, W) = beta dx + the adjoint of conv in x at (a = w, b = dout) */
    UT_CUDNN_BWD_FILTER, /* out = dw (OC, C, KH, KW) = beta dw + the adjoint in w at (a = x, b = dout) */
} ut_cudnn_pass;

/* Queues one pass of the convolution d on the compute stream through cuDNN
 * (float32 data; beta 0 overwrites out, 1 adds to it). false, with nothing
 * queued, when cuDNN does not take it: not built in, UT_CUDA_CONV=im2col, the
 * library missing or failing here (said once on stderr), a shape past
 * cuDNN's int sizes, or no algorithm that is deterministic and exact enough
 * (below); the caller then computes it with its own kernels. With
 * UT_CUDA_CONV=cudnn, a cuDNN that cannot be used fails the op through
 * ut_kfail instead, saying why, and true is returned (the step stops).
 *
 * Algorithms: only deterministic ones (the same bits on every run), and only
 * the direct and implicit-GEMM families and the backward passes' ALGO_1,
 * whose rounding is that of a product summed in float32 (FFT and Winograd
 * transforms are left out). Math: plain float32 FMA unless TF32 products are
 * on (ut_cuda_set_tf32) or the products run under autocast on rounded
 * operands (ut_cuda_gemm_rounded: bf16 and fp16 values are exact in TF32, so
 * the tensor cores compute the 16-bit products with float32 accumulation). */
bool ut_cuda_cudnn_conv(ut_cudnn_pass pass, const ut_cuda_conv_shape *d, const float *a, const float *b, float *out,
                        float beta, const ut_kctx *k);

/* Opens cuDNN and looks up every function utrain calls, without a GPU:
 * 0 and its version in what ("cuDNN 9.19.0"); 1 and why in err when it is
 * not here (not built with it, the library not installed); -1 and why when
 * the library is broken for utrain (a function missing, too old a version). */
int ut_cuda_cudnn_probe(char *what, size_t wn, char *err, size_t n);

#endif
