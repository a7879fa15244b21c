/* cuDNN's fused flash attention (its SDPA graphs through the cuDNN
 * frontend) for the causal ATTENTION op over packed qkv (B, T, 3C), 16-bit:
 * cudnn_attn.cpp; the glue (attention.c) chooses it (UT_CUDA_ATTN=cudnn) and
 * keeps utrain's own kernels otherwise. Built where the frontend's headers
 * are (scripts/fetch-cudnn-frontend.sh; UT_WITH_CUDNN_FE); elsewhere every
 * call answers -1 saying so. Graphs are built once per shape and pass and
 * kept; they run on the compute stream (cuDNN's handle, cudnn.c).
 * defines: ut_cudnn_attn, ut_cuda_cudnn_attn_built, ut_cuda_cudnn_attn_validate,
 *          ut_cuda_cudnn_attn_plan, ut_cuda_cudnn_attn_fwd, ut_cuda_cudnn_attn_bwd,
 *          ut_cuda_cudnn_lib. */
#ifndef UTRAIN_CUDA_CUDNN_ATTN_H
#define UTRAIN_CUDA_CUDNN_ATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* a causal self-attention's shape: qkv (B, T, 3C) with q, k, v in column
 * blocks of C, NH heads of C / NH; out and dout (B, T, C); dt: 1 bf16, 2
 * fp16 (ut_dtype's codes), every tensor stored in it */
typedef struct {
    int64_t B, T, C, NH;
    int dt;
} ut_cudnn_attn;

/* the passes: forward without statistics (no backward follows), forward
 * keeping each query row's log-sum-exp for backward, backward */
enum { UT_CUDNN_ATTN_INFER = 0, UT_CUDNN_ATTN_TRAIN = 1, UT_CUDNN_ATTN_BWD = 2 };

/* 0 when cuDNN runs pass of shape s (its graph built now if new), *ws its
 * workspace in bytes; -1 with why in err (no frontend in this build, no
 * cuDNN library, or cuDNN refused the graph: its message). A refusal is
 * kept: asking again answers at once. */
int ut_cuda_cudnn_attn_plan(const ut_cudnn_attn *s, int pass, size_t *ws, char *err, size_t n);

/* out (B, T, C) = softmax(causal(Q K^T / sqrt(C / NH))) V per head; stats
 * (B, NH, T) float32, each query row's log-sum-exp of its scaled scores,
 * for backward (NULL: pass UT_CUDNN_ATTN_INFER). ws: the plan's workspace.
 * 0, or -1 with why in err (nothing was queued). */
int ut_cuda_cudnn_attn_fwd(const ut_cudnn_attn *s, const void *qkv, void *out, float *stats, void *ws, char *err,
                           size_t n);

/* dqkv (B, T, 3C) = the gradient of qkv from dout, written (not added);
 * out and stats: the forward's. 0, or -1 with why in err. */
int ut_cuda_cudnn_attn_bwd(const ut_cudnn_attn *s, const void *qkv, const void *out, const void *dout,
                           const float *stats, void *dqkv, void *ws, char *err, size_t n);

/* whether this build has the frontend (else every call answers -1) */
bool ut_cuda_cudnn_attn_built(void);

/* 0 when the cuDNN frontend accepts the description of pass of shape s for
 * a GPU of compute capability sm (90: Hopper), checked without a GPU (its
 * validation: tensors, strides, masks, support rules for that GPU and the
 * loaded cuDNN's version; not cuDNN's engines, which need the device);
 * -1 with why in err. Needs the cuDNN library, not a GPU. */
int ut_cuda_cudnn_attn_validate(const ut_cudnn_attn *s, int pass, int sm, char *err, size_t n);

/* cudnn.c: the opened cuDNN library (dlopen's handle) and utrain's cuDNN
 * handle on the compute stream (handle NULL: the library alone, which needs
 * no GPU), both made once; 0, or -1 with why in err */
int ut_cuda_cudnn_lib(void **dl, void **handle, char *err, size_t n);

#ifdef __cplusplus
}
#endif

#endif
