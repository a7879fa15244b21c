/* 2-D convolution through oneDNN, on utrain's plain layouts: x, dx
 * (B, C, H, W) nchw; w, dw (OC, C, KH, KW) oihw; out, dout (B, OC, OH, OW)
 * nchw; b, db (OC). Symmetric padding, groups 1, no dilation. With
 * UT_DNNL_PLAIN the primitive works on those layouts directly; with
 * UT_DNNL_BLOCKED oneDNN picks its own (blocked, e.g. nChw8c for its direct
 * AVX2 kernels) and the buffers are reordered in and out around it. */
#include <stdbool.h>
#include <stdio.h>

#include "conv.h"
#include "dnnl_glue.h"

typedef struct {
    dnnl_memory_desc_t x, w, b, y;        /* the user's layouts */
    dnnl_memory_desc_t px, pw, py;        /* what the primitive is asked for */
    dnnl_dims_t strides, pad;
} conv_mds;

static conv_mds mds_of(const ut_conv2d_shape *d, ut_dnnl_layout lay) {
    conv_mds m;
    dnnl_dims_t x = {d->B, d->C, d->H, d->W}, w = {d->OC, d->C, d->KH, d->KW}, b = {d->OC},
                y = {d->B, d->OC, d->OH, d->OW};
    dnnl_format_tag_t any = dnnl_format_tag_any;
    bool plain = lay == UT_DNNL_PLAIN;
    dnnl_memory_desc_init_by_tag(&m.x, 4, x, dnnl_f32, dnnl_nchw);
    dnnl_memory_desc_init_by_tag(&m.w, 4, w, dnnl_f32, dnnl_oihw);
    dnnl_memory_desc_init_by_tag(&m.b, 1, b, dnnl_f32, dnnl_x);
    dnnl_memory_desc_init_by_tag(&m.y, 4, y, dnnl_f32, dnnl_nchw);
    dnnl_memory_desc_init_by_tag(&m.px, 4, x, dnnl_f32, plain ? dnnl_nchw : any);
    dnnl_memory_desc_init_by_tag(&m.pw, 4, w, dnnl_f32, plain ? dnnl_oihw : any);
    dnnl_memory_desc_init_by_tag(&m.py, 4, y, dnnl_f32, plain ? dnnl_nchw : any);
    m.strides[0] = m.strides[1] = d->S;
    m.pad[0] = m.pad[1] = d->P;
    return m;
}

/* The forward descriptor (with or without bias); backward primitives take its
 * primitive descriptor as their hint. */
static void fwd_desc(dnnl_convolution_desc_t *od, const conv_mds *m, bool bias) {
    dnnl_convolution_forward_desc_init(od, dnnl_forward_training, dnnl_convolution_direct, &m->px, &m->pw,
                                       bias ? &m->b : NULL, &m->py, m->strides, m->pad, m->pad);
}

static void bwd_data_desc(dnnl_convolution_desc_t *od, const conv_mds *m) {
    dnnl_convolution_backward_data_desc_init(od, dnnl_convolution_direct, &m->px, &m->pw, &m->py,
                                             m->strides, m->pad, m->pad);
}

static void bwd_weights_desc(dnnl_convolution_desc_t *od, const conv_mds *m, bool bias) {
    dnnl_convolution_backward_weights_desc_init(od, dnnl_convolution_direct, &m->px, &m->pw,
                                                bias ? &m->b : NULL, &m->py, m->strides, m->pad, m->pad);
}

int ut_dnnl_conv2d_forward(float *out, const float *x, const float *w, const float *b,
                           const ut_conv2d_shape *d, ut_dnnl_layout lay) {
    conv_mds m = mds_of(d, lay);
    dnnl_convolution_desc_t od;
    fwd_desc(&od, &m, b != NULL);
    int ids[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    void *ptrs[] = {(void *)x, (void *)w, out, (void *)b};
    const dnnl_memory_desc_t *user[] = {&m.x, &m.w, &m.y, &m.b};
    return ut_dnnl_run(&od, NULL, NULL, b ? 4 : 3, ids, ptrs, user, NULL, 0);
}

/* Runs backward descriptor od with the forward hint oneDNN asks for. */
static int run_bwd(const dnnl_convolution_desc_t *od, const conv_mds *m, bool bias, int nargs,
                   const int *ids, void *const *ptrs, const dnnl_memory_desc_t *const *user) {
    dnnl_convolution_desc_t fd;
    fwd_desc(&fd, m, bias);
    dnnl_primitive_desc_t hint = ut_dnnl_pd(&fd, NULL, NULL);
    if (!hint) return -1;
    int rc = ut_dnnl_run(od, NULL, hint, nargs, ids, ptrs, user, NULL, 0);
    dnnl_primitive_desc_destroy(hint);
    return rc;
}

int ut_dnnl_conv2d_backward_data(float *dx, const float *dout, const float *w,
                                 const ut_conv2d_shape *d, ut_dnnl_layout lay) {
    conv_mds m = mds_of(d, lay);
    dnnl_convolution_desc_t od;
    bwd_data_desc(&od, &m);
    int ids[] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
    void *ptrs[] = {(void *)dout, (void *)w, dx};
    const dnnl_memory_desc_t *user[] = {&m.y, &m.w, &m.x};
    return run_bwd(&od, &m, false, 3, ids, ptrs, user);
}

int ut_dnnl_conv2d_backward_weights(float *dw, float *db, const float *dout, const float *x,
                                    const ut_conv2d_shape *d, ut_dnnl_layout lay) {
    conv_mds m = mds_of(d, lay);
    dnnl_convolution_desc_t od;
    bwd_weights_desc(&od, &m, db != NULL);
    int ids[] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS};
    void *ptrs[] = {(void *)x, (void *)dout, dw, db};
    const dnnl_memory_desc_t *user[] = {&m.x, &m.y, &m.w, &m.b};
    return run_bwd(&od, &m, db != NULL, db ? 4 : 3, ids, ptrs, user);
}

int ut_dnnl_conv2d_impl(int dir, const ut_conv2d_shape *d, ut_dnnl_layout lay, char *impl, size_t n) {
    conv_mds m = mds_of(d, lay);
    dnnl_convolution_desc_t od, fd;
    if (dir == 0) fwd_desc(&od, &m, true);
    else if (dir == 1) bwd_data_desc(&od, &m);
    else bwd_weights_desc(&od, &m, true);
    fwd_desc(&fd, &m, dir != 1);
    dnnl_primitive_desc_t hint = dir ? ut_dnnl_pd(&fd, NULL, NULL) : NULL;
    dnnl_primitive_desc_t pd = dir && !hint ? NULL : ut_dnnl_pd(&od, NULL, hint);
    const char *name = "";
    if (pd) dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, (void *)&name);
    snprintf(impl, n, "%s", name);
    int rc = pd ? 0 : -1;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (hint) dnnl_primitive_desc_destroy(hint);
    return rc;
}
