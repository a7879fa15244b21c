/* The backend layer: the registry (src/backend/backends.def), the CPU
 * backend's memory and flat math, host staging of device memory (on the CPU
 * and on a stand-in device backend), whole-tensor copies (ut_tensor_set/get),
 * op names without a backend, and a context asked for a device this build
 * has no backend for. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "../../src/backend/backend.h"
#include "test.h"
/* core's op properties (test_op_schema); the host views come from test.h */
#define UT_HOST_VIEWS_PUBLIC
#include "../../src/core/internal.h"
#include "utrain/base.h"
#include "utrain/config.h"
#include "utrain/nn.h"
#include "utrain/ops.h"
#include "utrain/optim.h"
#include "utrain/tensor.h"

static void test_registry(void) {
    const ut_backend *cpu = ut_backend_get(UT_CPU);
    CHECK(cpu && !strcmp(cpu->name, "cpu") && cpu->device == UT_CPU, "cpu backend");
    CHECK(ut_backend_check(UT_CPU, NULL, 0) == 0, "cpu is built in");
    char err[256] = "";
#ifdef UT_WITH_CUDA
    /* built with the CUDA backend: present, and usable exactly when this
     * machine has a GPU (else the check names the reason) */
    const ut_backend *cu = ut_backend_get(UT_CUDA);
    CHECK(cu && !strcmp(cu->name, "cuda") && !cu->host_memory, "cuda backend");
    if (ut_backend_check(UT_CUDA, err, sizeof err) != 0)
        CHECK(strstr(err, "device cuda") && strstr(err, "no usable GPU"), "%s", err);
#else
    /* this build has no CUDA backend (no line in backends.def) */
    CHECK(ut_backend_get(UT_CUDA) == NULL, "cuda backend present?");
    CHECK(ut_backend_check(UT_CUDA, err, sizeof err) == -1, "cuda check");
    CHECK(strstr(err, "no cuda backend") && strstr(err, "built in: cpu"), "%s", err);
#endif
    CHECK(ut_backend_get((ut_device)99) == NULL, "out-of-range device");
}

static void test_every_op_has_cpu_kernels(void) {
    const ut_backend *cpu = ut_backend_get(UT_CPU);
    CHECK(cpu->ops[0].forward == NULL && cpu->ops[0].backward == NULL, "leaf entry");
    for (int op = 1; op < ut_op_count(); op++)
        CHECK(cpu->ops[op].forward && cpu->ops[op].backward, "op %s has no CPU kernel",
              ut_op_name(op));
    CHECK(!strcmp(ut_op_name(0), "leaf") && !strcmp(ut_op_name(ut_op_count()), "?"), "names");
}

/* The op schema: core's properties (ops.def's third column) are consistent
 * with each other and say what autocast and autograd rely on; each
 * backend's kernel capabilities sit in its op table and name only known
 * flags. */
static void test_op_schema(void) {
    const unsigned known = UT_OPP_PRODUCT | UT_OPP_AUTOCAST_OUT | UT_OPP_KEEPS_DTYPE | UT_OPP_NO_DATA |
                           UT_OPP_BWD_NO_OUT | UT_OPP_OWNS_SRC0_GRAD | UT_OPP_RANDOM | UT_OPP_LOSS;
    for (int op = 1; op < ut_op_count(); op++) {
        unsigned p = ut_op_props[op];
        CHECK(!(p & ~known), "op %s: unknown property bits %#x", ut_op_name(op), p & ~known);
        CHECK(__builtin_popcount(p & (UT_OPP_PRODUCT | UT_OPP_AUTOCAST_OUT | UT_OPP_KEEPS_DTYPE)) <= 1,
              "op %s: at most one dtype rule", ut_op_name(op));
        CHECK(!(p & UT_OPP_NO_DATA) || !(p & (UT_OPP_PRODUCT | UT_OPP_AUTOCAST_OUT)),
              "op %s: a view cannot compute in low precision", ut_op_name(op));
        CHECK(!(p & UT_OPP_LOSS) || (p & UT_OPP_PRODUCT), "op %s: a loss mark without products", ut_op_name(op));
        for (int d = 0; d < UT_DEVICE_COUNT; d++) {
            const ut_backend *be = ut_backend_get((ut_device)d);
            if (be)
                CHECK(!(be->ops[op].caps & ~(unsigned)(UT_KCAP_READS_16 | UT_KCAP_WRITES_16 | UT_KCAP_NATIVE_16 |
                                                       UT_KCAP_FRESH_GRAD | UT_KCAP_PASS_GRAD)),
                      "%s op %s: unknown capability bits", be->name, ut_op_name(op));
        }
    }
    /* what autocast and autograd act on, as PyTorch's autocast lists have it */
    int products = 0;
    for (int op = 1; op < ut_op_count(); op++) products += ut_op_is(op, UT_OPP_PRODUCT);
    CHECK(products == 7 && ut_op_is(UT_OP_LINEAR, UT_OPP_PRODUCT) && ut_op_is(UT_OP_CONV2D, UT_OPP_PRODUCT) &&
              ut_op_is(UT_OP_ATTENTION_VARLEN, UT_OPP_PRODUCT) && ut_op_is(UT_OP_LINEAR_CE, UT_OPP_LOSS),
          "%d products", products);
    CHECK(ut_op_is(UT_OP_LAYERNORM, UT_OPP_AUTOCAST_OUT) && ut_op_is(UT_OP_RMS_NORM, UT_OPP_AUTOCAST_OUT) &&
              ut_op_is(UT_OP_DROPOUT, UT_OPP_KEEPS_DTYPE) &&
              !ut_op_is(UT_OP_SOFTMAX, UT_OPP_KEEPS_DTYPE) && ut_op_is(UT_OP_CHECKPOINT, UT_OPP_NO_DATA) &&
              ut_op_is(UT_OP_CROSS_ENTROPY, UT_OPP_OWNS_SRC0_GRAD) && !ut_op_is(UT_OP_TANH, UT_OPP_BWD_NO_OUT),
          "properties");
    /* the 16-bit capabilities, then which backwards write fresh gradients
     * (docs/engine.md; the sim device takes the CPU's table) */
    const ut_op_vtable *cpu = ut_backend_get(UT_CPU)->ops;
    const unsigned fresh = UT_KCAP_FRESH_GRAD, low16 = UT_KCAP_READS_16 | UT_KCAP_WRITES_16 | UT_KCAP_NATIVE_16;
    for (int op = 1; op < ut_op_count(); op++) {
        CHECK((cpu[op].caps & low16) == (op == UT_OP_CROSS_ENTROPY ? (unsigned)UT_KCAP_READS_16
                                         : op == UT_OP_LINEAR    ? (unsigned)UT_KCAP_WRITES_16
                                                                 : 0u),
              "cpu op %s: caps %#x", ut_op_name(op), cpu[op].caps);
        bool f = op == UT_OP_LINEAR || op == UT_OP_ADD || op == UT_OP_GELU || op == UT_OP_LAYERNORM ||
                 op == UT_OP_SCALE || op == UT_OP_RELU || op == UT_OP_TANH || op == UT_OP_SIGMOID ||
                 op == UT_OP_DROPOUT || op == UT_OP_LINEAR_CE;
        CHECK((cpu[op].caps & fresh) == (f ? fresh : 0u), "cpu op %s: caps %#x", ut_op_name(op), cpu[op].caps);
        /* the gradient handed on unchanged: add alone, and only with the fresh bit */
        CHECK(!(cpu[op].caps & UT_KCAP_PASS_GRAD) == (op != UT_OP_ADD), "cpu op %s: caps %#x", ut_op_name(op),
              cpu[op].caps);
        CHECK(ut_backend_get(UT_SIM)->ops[op].caps == cpu[op].caps, "sim op %s", ut_op_name(op));
    }
#ifdef UT_WITH_CUDA
    const ut_op_vtable *cu = ut_backend_get(UT_CUDA)->ops;
    for (int op = 1; op < ut_op_count(); op++) {
        CHECK((cu[op].caps & low16) == (op == UT_OP_LINEAR || op == UT_OP_GELU || op == UT_OP_GELU_ERF ||
                                                op == UT_OP_LAYERNORM || op == UT_OP_ADD || op == UT_OP_MUL ||
                                                op == UT_OP_DROPOUT || op == UT_OP_ATTENTION ||
                                                op == UT_OP_ATTENTION_MASKED || op == UT_OP_ATTENTION_VARLEN ||
                                                op == UT_OP_LINEAR_CE
                                            ? (unsigned)UT_KCAP_NATIVE_16
                                        : op == UT_OP_CROSS_ENTROPY ? (unsigned)UT_KCAP_READS_16
                                                                    : 0u),
              "cuda op %s: caps %#x", ut_op_name(op), cu[op].caps);
        bool f = op == UT_OP_LINEAR || op == UT_OP_ADD || op == UT_OP_LAYERNORM || op == UT_OP_GELU ||
                 op == UT_OP_GELU_ERF || op == UT_OP_DROPOUT || op == UT_OP_ATTENTION || op == UT_OP_SCALE ||
                 op == UT_OP_RELU || op == UT_OP_TANH || op == UT_OP_SIGMOID || op == UT_OP_LINEAR_CE;
        CHECK((cu[op].caps & fresh) == (f ? fresh : 0u), "cuda op %s: caps %#x", ut_op_name(op), cu[op].caps);
        CHECK(!(cu[op].caps & UT_KCAP_PASS_GRAD) == (op != UT_OP_ADD), "cuda op %s: caps %#x", ut_op_name(op),
              cu[op].caps);
    }
#endif
}

#ifdef UT_WITH_CUDA
static void test_every_op_has_cuda_kernels(void) {
    const ut_backend *cu = ut_backend_get(UT_CUDA);
    for (int op = 1; op < ut_op_count(); op++)
        CHECK(cu->ops[op].forward && cu->ops[op].backward, "op %s has no CUDA kernel", ut_op_name(op));
}
#endif

static void test_cpu_memory(void) {
    const ut_backend *b = ut_backend_get(UT_CPU);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), bytes = 3 * pg;
    uint8_t *p = b->pages_alloc(bytes);
    CHECK(p[0] == 0 && p[bytes - 1] == 0, "pages start zeroed");
    b->memset(p, 7, bytes);
    /* release from the middle of page 0 to the middle of page 2: the partial
     * pages are zeroed in place, page 1 handed back (reads as zeros) */
    b->pages_release(p, pg / 2, 2 * pg);
    CHECK(p[pg / 2 - 1] == 7 && p[pg / 2] == 0 && p[pg + 5] == 0 && p[2 * pg + pg / 2 - 1] == 0,
          "released range reads as zeros");
    CHECK(p[2 * pg + pg / 2] == 7, "beyond the range untouched");
    float src[4] = {1, 2, 3, 4}, dst[4] = {0};
    b->copy(dst, src, sizeof src, UT_COPY_H2D);
    CHECK(!memcmp(dst, src, sizeof src), "copy");
    b->pages_free(p, bytes);
    float *a = b->alloc(100);
    CHECK(((uintptr_t)a & 63) == 0, "64-byte aligned");
    b->free(a);
    void *s = b->stream_new(UT_STREAM_COMM);
    b->stream_sync(s);
    b->stream_free(s);
}

static void test_flat_math(void) {
    enum { N = 100003 };
    static float g[N];
    double want = 0.0;
    for (int i = 0; i < N; i++) {
        g[i] = (float)((i % 17) - 8) * 0.25f;
        want += (double)g[i] * g[i];
    }
    const ut_backend *b = ut_backend_get(UT_CPU);
    CHECK_NEAR(b->sum_sq(g, N), want, want * 1e-12);
    CHECK(ut_grad_norm_sq(UT_CPU, g, N) == b->sum_sq(g, N), "ut_grad_norm_sq goes through the backend");
    b->scale(g, N, 2.0f);
    CHECK(g[1] == -3.5f && g[N - 1] == 2.0f * (float)(((N - 1) % 17) - 8) * 0.25f, "scale");
}

/* accumulate: dst += src[0] + src[1] in that order, sources zeroed on request;
 * pages_resident counts only the pages written so far */
static void test_accumulate_and_residency(void) {
    const ut_backend *b = ut_backend_get(UT_CPU);
    enum { N = 70001 };
    static float d[N], s0[N], s1[N];
    for (int i = 0; i < N; i++) {
        d[i] = 1e8f;
        s0[i] = 1.0f;
        s1[i] = -1e8f;
    }
    float *src[2] = {s0, s1};
    b->accumulate(d, src, 2, N, false);
    /* in order: (1e8 + 1) rounds back to 1e8, then - 1e8 gives 0 */
    CHECK(d[0] == 0.0f && d[N - 1] == 0.0f && s0[5] == 1.0f, "order or zeroing: %g %g", d[0], s0[5]);
    b->accumulate(d, src, 2, N, true);
    CHECK(d[7] == -1e8f && s0[7] == 0.0f && s1[N - 1] == 0.0f, "zero_src: %g %g", d[7], s0[7]);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *p = b->pages_alloc(8 * pg);
    p[0] = 1;
    p[5 * pg] = 1;
    CHECK(b->pages_resident(p, 8 * pg) == 2 * pg, "resident %zu", b->pages_resident(p, 8 * pg));
    b->pages_release(p, 0, 8 * pg);
    CHECK(b->pages_resident(p, 8 * pg) == 0, "released pages still resident");
    b->pages_free(p, 8 * pg);
}

/* A stand-in for a device backend whose memory is not host memory: copies
 * are counted, so the stages' traffic can be checked. */
static int ncopies[4];
static void counting_copy(void *dst, const void *src, size_t bytes, ut_copy_kind kind) {
    ncopies[kind]++;
    memcpy(dst, src, bytes);
}

static void test_stage(void) {
    float dev[4] = {1, 2, 3, 4};
    ut_stage st;
    /* CPU: the device pointer itself, nothing copied */
    uint64_t allocs = ut_alloc_count();
    CHECK(ut_stage_begin(&st, ut_backend_get(UT_CPU), dev, sizeof dev, true) == dev, "cpu stage");
    ut_stage_end(&st, true);
    CHECK(ut_alloc_count() == allocs, "a cpu stage allocated");
    /* device: read fills a host copy, write puts it back, a closed stage does nothing */
    ut_backend fake = *ut_backend_get(UT_CPU);
    fake.host_memory = false;
    fake.copy = counting_copy;
    float *h = ut_stage_begin(&st, &fake, dev, sizeof dev, true);
    CHECK(h != dev && h[2] == 3 && ncopies[UT_COPY_D2H] == 1, "read stage");
    h[2] = 30;
    CHECK(dev[2] == 3, "written through before the end");
    ut_stage_end(&st, true);
    ut_stage_end(&st, true);
    CHECK(dev[2] == 30 && ncopies[UT_COPY_H2D] == 1, "write back: %g, %d", dev[2], ncopies[UT_COPY_H2D]);
    h = ut_stage_begin(&st, &fake, dev, sizeof dev, false);
    ut_stage_end(&st, false);
    CHECK(ncopies[UT_COPY_D2H] == 1 && ncopies[UT_COPY_H2D] == 1, "a write-only / read-only stage copied");
}

static void test_tensor_set_get(void) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_tensor *t = ut_tensor_new2(ctx, UT_F32, 2, 3);
    float in[6] = {1, 2, 3, 4, 5, 6}, out[6] = {0};
    CHECK(ut_tensor_set(t, in, sizeof in) == 0, "set");
    CHECK(ut_tensor_get(t, out, sizeof out) == 0 && !memcmp(in, out, sizeof in), "round trip");
    ut_tensor *y = ut_scale(ctx, t, 2.0f);
    CHECK(ut_tensor_get(y, out, sizeof out) == 0 && out[5] == 12.0f, "op output read back");
    CHECK(ut_tensor_get(t, out, 5 * sizeof(float)) == -1, "size mismatch accepted");
    const char *e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "tensor_get") && strstr(e, "20 bytes given, the tensor holds 24"),
          "%s", e ? e : "(none)");
    ut_ctx_clear_error(ctx);
    ut_tensor *tt = ut_transpose(ctx, t, 0, 1);
    CHECK(ut_tensor_set(tt, in, sizeof in) == -1, "set into a strided view accepted");
    e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "not contiguous"), "%s", e ? e : "(none)");
    int32_t ids[3] = {4, 5, 6}, back[3] = {0};
    int64_t n3 = 3;
    ut_tensor *it = ut_tensor_new(ctx, UT_I32, 1, &n3);
    ut_ctx_clear_error(ctx);
    CHECK(ut_tensor_set(it, ids, sizeof ids) == 0 && ut_tensor_get(it, back, sizeof back) == 0 &&
              back[2] == 6, "i32 round trip");
    ut_ctx_free(ctx);
}

/* ut_tensor_get_grad: a gradient after backward, zeros where none arrived,
 * and the size and 16-bit refusals naming the tensor */
static void test_tensor_get_grad(void) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    float in[3] = {1, -2, 3}, g[3] = {7, 7, 7};
    ut_tensor *x = ut_tensor_from(ctx, UT_F32, 1, (int64_t[]){3}, in);
    ut_tensor *z = ut_tensor_from(ctx, UT_F32, 1, (int64_t[]){3}, in);
    ut_tensor_set_requires_grad(x, true);
    CHECK(ut_tensor_get_grad(x, g, sizeof g) == 0 && g[0] == 0 && g[2] == 0, "no gradient yet reads as zeros");
    CHECK(ut_backward(ctx, ut_sum(ctx, ut_scale(ctx, x, 3.0f))) == 0, "%s", ut_ctx_error(ctx));
    CHECK(ut_tensor_get_grad(x, g, sizeof g) == 0 && g[0] == 3 && g[1] == 3 && g[2] == 3, "d(3 sum x)/dx = 3");
    CHECK(ut_tensor_get_grad(z, g, sizeof g) == 0 && g[1] == 0, "a tensor outside the graph: zeros");
    CHECK(ut_tensor_get_grad(x, g, 2 * sizeof(float)) == -1, "size mismatch accepted");
    const char *e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "tensor_get_grad") && strstr(e, "8 bytes given, the gradient holds 12"), "%s",
          e ? e : "(none)");
    ut_ctx_clear_error(ctx);
    ut_tensor *h = ut_tensor_to(ctx, x, UT_BF16);
    CHECK(h && ut_tensor_get_grad(h, g, sizeof g) == -1 && strstr(ut_ctx_error(ctx), "16-bit"), "%s",
          ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "(none)");
    ut_ctx_free(ctx);
}

/* A context for a device this process cannot use (a build without the CUDA
 * backend, or a machine without a GPU) carries the reason, and ops fail. */
/* A model's parameters live on the device it was created on: the CPU here;
 * a device this machine or build cannot run is refused naming it. */
static void test_model_device(void) {
    char err[256] = "";
    ut_model *m = ut_model_create_on("mlp", NULL, 1, UT_CPU, err, sizeof err);
    CHECK(m && m->params.device == UT_CPU && m->params.t[0]->device == UT_CPU, "%s", err);
    ut_model_free(m);
    m = ut_model_create("mlp", NULL, 1, err, sizeof err);
    CHECK(m && m->params.device == UT_CPU, "ut_model_create builds on the CPU");
    ut_model_free(m);
    bool gpu = ut_backend_check(UT_CUDA, NULL, 0) == 0;
    if (!gpu) {
        m = ut_model_create_on("mlp", NULL, 1, UT_CUDA, err, sizeof err);
        CHECK(!m && strstr(err, "device cuda"), "a model on a device this machine lacks: %s", err);
        ut_model_free(m);
    }
}

/* The config's device made this process's (ut_config_use_device): the CPU
 * and sim always; cuda refused naming the key and what to write on a machine
 * without a GPU, and a GPU number the machine lacks refused naming the ones
 * it has. */
static void test_config_use_device(void) {
    ut_config c;
    char err[512] = "";
    const char *devs[2] = {"cpu", "sim"};
    for (int i = 0; i < 2; i++) {
        ut_config_init(&c);
        snprintf(err, sizeof err, "device=%s", devs[i]);
        CHECK(ut_config_set(&c, err, err, sizeof err) == 0 && ut_config_use_device(&c, err, sizeof err) == 0,
              "device %s: %s", devs[i], err);
        ut_config_free(&c);
    }
    if (!ut_backend_get(UT_CUDA)) return; /* the config refuses cuda itself (test_config) */
    char why[256] = "";
    bool gpu = ut_backend_check(UT_CUDA, why, sizeof why) == 0;
    ut_config_init(&c);
    CHECK(ut_config_set(&c, gpu ? "device=cuda:99" : "device=cuda", err, sizeof err) == 0, "%s", err);
    err[0] = 0;
    CHECK(ut_config_use_device(&c, err, sizeof err) == -1, "accepted: %s", c.device);
    if (gpu)
        CHECK(strstr(err, "device: cuda:99: there is no GPU number 99 on this machine (it has "), "%s", err);
    else
        CHECK(strstr(err, "device: cuda: no usable GPU on this machine") && strstr(err, "; write device: cpu"), "%s",
              err);
    ut_config_free(&c);
}

static void test_context_without_backend(void) {
    char why[256] = "";
    if (ut_backend_check(UT_CUDA, why, sizeof why) == 0) return; /* a GPU is here: nothing to refuse */
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_CUDA});
    const char *e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "device cuda") && strstr(e, why), "%s", e ? e : "(none)");
    ut_tensor *x = ut_tensor_zeros(ctx, UT_F32, 1, (int64_t[]){4});
    CHECK(ut_relu(ctx, x) == NULL, "an op ran without a backend");
    ut_ctx_free(ctx);
}

/* The strided I32 copy that embedding takes for non-contiguous token ids
 * runs the contiguous op's kernel. */
static void test_embedding_strided_ids(void) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    int32_t ids[6] = {0, 1, 2, 2, 1, 0};   /* (2, 3), read transposed (3, 2) */
    float tab[6] = {10, 11, 20, 21, 30, 31}; /* (3, 2) */
    ut_tensor *i = ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){2, 3}, ids);
    ut_tensor *w = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){3, 2}, tab);
    /* transpose is F32-only; make the strided view by hand */
    ut_tensor *it = ut_tensor_wrap(ctx, UT_I32, 2, (int64_t[]){3, 2}, i->data);
    it->nb[0] = 1;
    it->nb[1] = 3;
    ut_tensor *e = ut_embedding(ctx, it, w);
    float out[12];
    CHECK(e && ut_tensor_get(e, out, sizeof out) == 0, "%s", ut_ctx_error(ctx));
    /* ids read as (3, 2): [[0, 2], [1, 1], [2, 0]] */
    float want[12] = {10, 11, 30, 31, 20, 21, 20, 21, 30, 31, 10, 11};
    CHECK(e && !memcmp(out, want, sizeof want), "rows %g %g %g", out[2], out[4], out[10]);
    ut_ctx_free(ctx);
}

int main(void) {
    RUN(test_registry);
    RUN(test_every_op_has_cpu_kernels);
    RUN(test_op_schema);
#ifdef UT_WITH_CUDA
    RUN(test_every_op_has_cuda_kernels);
#endif
    RUN(test_cpu_memory);
    RUN(test_flat_math);
    RUN(test_accumulate_and_residency);
    RUN(test_stage);
    RUN(test_tensor_set_get);
    RUN(test_tensor_get_grad);
    RUN(test_model_device);
    RUN(test_config_use_device);
    RUN(test_context_without_backend);
    RUN(test_embedding_strided_ids);
    return TEST_SUMMARY();
}
