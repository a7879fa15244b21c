/* 2-D convolution kernels of the CPU backend: im2col + sgemm (conv.c) and
 * oneDNN's direct convolution (dnnl_conv.c), on plain NCHW / OIHW float32.
 * defines: ut_conv2d_shape, ut_conv2d_forward_cpu, ut_conv2d_backward_cpu,
 *          ut_dnnl_conv2d_forward, ut_dnnl_conv2d_backward_data,
 *          ut_dnnl_conv2d_backward_weights, ut_dnnl_conv2d_impl, ut_dnnl_layout, UT_CONV_DW_CHUNKS. */
#ifndef UTRAIN_CPU_CONV_H
#define UTRAIN_CPU_CONV_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t B, C, H, W;       /* input */
    int64_t OC, KH, KW;       /* weight (OC, C, KH, KW) */
    int64_t S, P;             /* stride, padding */
    int64_t OH, OW;           /* output */
    bool relu;                /* the output is relu(conv): forward clamps it, backward masks dout by out > 0 */
    bool pool;                /* with relu: then 2x2 stride-2 max pooling; the output is (B, OC, OH/2, OW/2) */
} ut_conv2d_shape;

/* The weight gradient of the im2col path is summed over the batch in this
 * many fixed chunks of consecutive images, then the chunk partials in chunk
 * order: the result does not depend on the thread count. */
#define UT_CONV_DW_CHUNKS 16

/* out (B, OC, OH, OW) = conv(x (B, C, H, W), w) + b (OC), b may be NULL, on
 * nthr threads. cols: nthr buffers of C*KH*KW * OH*OW floats. */
void ut_conv2d_forward_cpu(float *out, float *cols, const float *x, const float *w,
                           const float *b, const ut_conv2d_shape *d, int nthr);
/* With d->pool: out is the pooled (B, OC, OH/2, OW/2), arg its places
 * (uint8); cols: nthr buffers of ut_conv2d_cols_floats. */
void ut_conv2d_forward_pool_cpu(float *out, uint8_t *arg, float *cols, const float *x, const float *w,
                                const float *b, const ut_conv2d_shape *d, int nthr);
/* dx += conv's input gradient, dw += its weight gradient, db += its bias
 * gradient (each may be NULL). cols: nthr buffers of ut_conv2d_cols_floats;
 * dw_part: UT_CONV_DW_CHUNKS * OC*C*KH*KW floats. With d->relu, out is the
 * forward's output and dout counts where out > 0 only. */
size_t ut_conv2d_cols_floats(const ut_conv2d_shape *d);
void ut_conv2d_backward_cpu(float *dx, float *dw, float *db, float *cols, float *dw_part,
                            const float *dout, const float *out, const uint8_t *arg, const float *x,
                            const float *w, const ut_conv2d_shape *d, int nthr);

/* Winograd F(2x2, 3x3) (winograd.c) for the layers ut_winograd_applies
 * takes (3x3, stride 1, padding <= 2, at least 8 input and output
 * channels). forward writes out (B, OC, OH, OW) (+ b, may be NULL);
 * backward adds the input and weight gradients into dx and dw (either may
 * be NULL; the bias gradient is im2col's code's; with d->relu, out is the
 * forward's output, and with d->pool the output and arg are the pooled
 * ones, as ut_conv2d_backward_cpu's). U: 16*OC*C floats; ws:
 * nthr * ut_winograd_thread_floats; dU_part: (UT_CONV_DW_CHUNKS + 1) *
 * 16*OC*C floats. */
bool ut_winograd_applies(const ut_conv2d_shape *d);
/* The backend's conv2d_path (backend.h): which of the two a shape takes. */
const char *ut_cpu_conv2d_path(int64_t C, int64_t OC, int64_t KH, int64_t KW, int64_t stride, int64_t padding,
                               int64_t OH, int64_t OW);
size_t ut_winograd_thread_floats(const ut_conv2d_shape *d);
void ut_winograd_forward(float *out, uint8_t *arg, float *U, float *ws, const float *x, const float *w,
                         const float *b, const ut_conv2d_shape *d, int nthr);
void ut_winograd_backward(float *dx, float *dw, float *U, float *ws, float *dU_part, const float *dout,
                          const float *out, const uint8_t *arg, const float *x, const float *w,
                          const ut_conv2d_shape *d, int nthr);

/* oneDNN: the same three products, each written (not added) into its
 * output; 0, or -1 when oneDNN has no implementation for the shape (nothing
 * written). db may be NULL. The buffers are in the plain layouts above;
 * UT_DNNL_PLAIN runs the primitive on them, UT_DNNL_BLOCKED lets oneDNN choose
 * its layouts and reorders into and out of them. */
typedef enum { UT_DNNL_PLAIN = 0, UT_DNNL_BLOCKED } ut_dnnl_layout;
int ut_dnnl_conv2d_forward(float *out, const float *x, const float *w, const float *b,
                           const ut_conv2d_shape *d, ut_dnnl_layout lay);
int ut_dnnl_conv2d_backward_data(float *dx, const float *dout, const float *w,
                                 const ut_conv2d_shape *d, ut_dnnl_layout lay);
int ut_dnnl_conv2d_backward_weights(float *dw, float *db, const float *dout, const float *x,
                                    const ut_conv2d_shape *d, ut_dnnl_layout lay);
/* The name of the implementation oneDNN picks for direction dir (0 forward,
 * 1 backward data, 2 backward weights) into impl (n bytes); -1 if none. */
int ut_dnnl_conv2d_impl(int dir, const ut_conv2d_shape *d, ut_dnnl_layout lay, char *impl, size_t n);
#endif
