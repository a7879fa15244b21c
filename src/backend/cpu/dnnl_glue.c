/* oneDNN engine and primitive execution (see dnnl_glue.h). */
#include "dnnl_glue.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "utrain/base.h"

#define DNNL_CHECK(call)                                                                  \
    do {                                                                                  \
        dnnl_status_t st_ = (call);                                                       \
        if (st_ != dnnl_success) ut_abort(__FILE__, __LINE__, "oneDNN: %s failed (status %d)", \
                                          #call, (int)st_);                               \
    } while (0)

static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_create(void) {
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
}

dnnl_engine_t ut_dnnl_engine(void) {
    pthread_once(&engine_once, engine_create);
    return engine;
}

dnnl_primitive_desc_t ut_dnnl_pd(const_dnnl_op_desc_t od, const_dnnl_primitive_attr_t attr,
                                 const_dnnl_primitive_desc_t hint) {
    dnnl_engine_t e = ut_dnnl_engine();
    dnnl_primitive_desc_t pd = NULL;
    if (!e || dnnl_primitive_desc_create(&pd, od, attr, e, hint) != dnnl_success) return NULL;
    return pd;
}

static bool is_output(int arg) {
    return arg == DNNL_ARG_DST || arg == DNNL_ARG_DIFF_SRC || arg == DNNL_ARG_DIFF_WEIGHTS ||
           arg == DNNL_ARG_DIFF_BIAS;
}

/* dst = src through a reorder primitive (layout change). */
static void reorder(dnnl_memory_t src, dnnl_memory_t dst, dnnl_stream_t stream) {
    dnnl_engine_t e = ut_dnnl_engine();
    const dnnl_memory_desc_t *smd, *dmd;
    DNNL_CHECK(dnnl_memory_get_memory_desc(src, &smd));
    DNNL_CHECK(dnnl_memory_get_memory_desc(dst, &dmd));
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    DNNL_CHECK(dnnl_reorder_primitive_desc_create(&pd, smd, e, dmd, e, NULL));
    DNNL_CHECK(dnnl_primitive_create(&prim, pd));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    DNNL_CHECK(dnnl_primitive_execute(prim, stream, 2, args));
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
}

/* One argument: the user's buffer, and (when the primitive wants another
 * layout) a library-allocated buffer in that layout. */
typedef struct { dnnl_memory_t user, prim; } bound_arg;

static bound_arg bind(const_dnnl_primitive_desc_t pd, int arg, void *ptr, const dnnl_memory_desc_t *user_md,
                      dnnl_stream_t stream) {
    dnnl_engine_t e = ut_dnnl_engine();
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
    UT_ASSERT(md != NULL);
    bound_arg b = {NULL, NULL};
    DNNL_CHECK(dnnl_memory_create(&b.user, user_md ? user_md : md, e, ptr));
    if (!user_md || dnnl_memory_desc_equal(user_md, md)) {
        b.prim = b.user;
        return b;
    }
    DNNL_CHECK(dnnl_memory_create(&b.prim, md, e, DNNL_MEMORY_ALLOCATE));
    if (!is_output(arg)) reorder(b.user, b.prim, stream);
    return b;
}

/* Executes pd's primitive with arg_ids[i] bound to ptrs[i] (in layout
 * user_mds[i], or the primitive's own when that is NULL). */
static void execute(const_dnnl_primitive_desc_t pd, int nargs, const int *arg_ids, void *const *ptrs,
                    const dnnl_memory_desc_t *const *user_mds) {
    dnnl_engine_t e = ut_dnnl_engine();
    dnnl_primitive_t prim;
    dnnl_stream_t stream;
    dnnl_exec_arg_t args[UT_DNNL_MAX_ARGS];
    bound_arg b[UT_DNNL_MAX_ARGS];
    DNNL_CHECK(dnnl_primitive_create(&prim, pd));
    DNNL_CHECK(dnnl_stream_create(&stream, e, dnnl_stream_default_flags));
    for (int i = 0; i < nargs; i++) {
        b[i] = bind(pd, arg_ids[i], ptrs[i], user_mds ? user_mds[i] : NULL, stream);
        args[i] = (dnnl_exec_arg_t){arg_ids[i], b[i].prim};
    }
    DNNL_CHECK(dnnl_primitive_execute(prim, stream, nargs, args));
    for (int i = 0; i < nargs; i++)
        if (b[i].prim != b[i].user && is_output(arg_ids[i])) reorder(b[i].prim, b[i].user, stream);
    DNNL_CHECK(dnnl_stream_wait(stream));
    for (int i = 0; i < nargs; i++) {
        if (b[i].prim != b[i].user) dnnl_memory_destroy(b[i].prim);
        dnnl_memory_destroy(b[i].user);
    }
    dnnl_stream_destroy(stream);
    dnnl_primitive_destroy(prim);
}

int ut_dnnl_run(const_dnnl_op_desc_t od, const_dnnl_primitive_attr_t attr,
                const_dnnl_primitive_desc_t hint, int nargs,
                const int *arg_ids, void *const *ptrs, const dnnl_memory_desc_t *const *user_mds,
                char *impl, size_t n) {
    UT_ASSERT(nargs <= UT_DNNL_MAX_ARGS);
    if (impl && n) *impl = 0;
    dnnl_primitive_desc_t pd = ut_dnnl_pd(od, attr, hint);
    if (!pd) return -1;
    if (impl && n) {
        const char *name = NULL;
        DNNL_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, (void *)&name));
        snprintf(impl, n, "%s", name ? name : "?");
    }
    execute(pd, nargs, arg_ids, ptrs, user_mds);
    dnnl_primitive_desc_destroy(pd);
    return 0;
}
