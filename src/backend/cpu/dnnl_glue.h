/* oneDNN glue for the CPU backend: one engine per process, and running a
 * primitive described by an op descriptor on plain (user-layout) buffers.
 * defines: ut_dnnl_engine, ut_dnnl_run, UT_DNNL_MAX_ARGS. */
#ifndef UTRAIN_CPU_DNNL_GLUE_H
#define UTRAIN_CPU_DNNL_GLUE_H
#include <dnnl.h>
#include <stddef.h>

#define UT_DNNL_MAX_ARGS 4

/* The CPU engine, created on first use (thread-safe); NULL if oneDNN cannot
 * create one. */
dnnl_engine_t ut_dnnl_engine(void);

/* Creates the primitive for op descriptor od with attributes attr (NULL:
 * none; hint: the forward primitive
 * descriptor a backward one needs, else NULL), binds arg_ids[i] to ptrs[i],
 * which hold layout user_mds[i] (user_mds or an entry NULL: the layout the
 * primitive chose; where it chose another, inputs are reordered into and
 * outputs out of a temporary in its layout), runs it and releases it. oneDNN's primitive cache
 * keeps the compiled kernel between calls. 0; -1 when oneDNN has no
 * implementation (nothing ran); impl (n bytes, may be NULL) gets the
 * implementation's name, or "" on failure. Other oneDNN failures abort, naming the call. */
int ut_dnnl_run(const_dnnl_op_desc_t od, const_dnnl_primitive_attr_t attr,
                const_dnnl_primitive_desc_t hint, int nargs,
                const int *arg_ids, void *const *ptrs, const dnnl_memory_desc_t *const *user_mds,
                char *impl, size_t n);

/* The primitive descriptor of od (attr, hint as above), or NULL when oneDNN
 * has no implementation for it. */
dnnl_primitive_desc_t ut_dnnl_pd(const_dnnl_op_desc_t od, const_dnnl_primitive_attr_t attr,
                                 const_dnnl_primitive_desc_t hint);
#endif
