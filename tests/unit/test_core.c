/* Core engine: views, errors, no-grad mode, gradient accumulation, the
 * gradient-ready hook, the allocation-free training loop, checkpointing,
 * initialisation independent of the thread count. */
#include <omp.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "utrain/utrain.h"

static ut_ctx *new_ctx(void) { return ut_ctx_new(&(ut_ctx_opts){.arena_bytes = 1 << 20, .seed = 7}); }

static ut_model *tiny_gpt2(bool ckpt) {
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "n_layer", "2");
    ut_kv_set(kv, "n_head", "2");
    ut_kv_set(kv, "n_embd", "16");
    ut_kv_set(kv, "vocab_size", "11");
    ut_kv_set(kv, "block_size", "8");
    char err[256];
    ut_model *m = ut_model_create("gpt2", kv, 3, err, sizeof err);
    ut_kv_free(kv);
    if (m) m->checkpoint_activations = ckpt;
    return m;
}

/* tokens (2, 8) and next-token targets from a fixed pattern */
static ut_tensor *gpt2_loss(ut_model *m, ut_ctx *ctx, int shift) {
    int32_t tok[16], tgt[16];
    for (int i = 0; i < 16; i++) {
        tok[i] = (i * 3 + shift) % 11;
        tgt[i] = (i * 3 + shift + 3) % 11;
    }
    ut_tensor *x = ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){2, 8}, tok);
    ut_tensor *y = ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){2, 8}, tgt);
    return ut_model_loss(m, ctx, ut_model_forward(m, ctx, x), y);
}

static void test_views_share_data(void) {
    ut_ctx *ctx = new_ctx();
    float v[6] = {0, 1, 2, 3, 4, 5};
    ut_tensor *a = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){2, 3}, v);
    ut_tensor *t = ut_transpose(ctx, a, 0, 1);
    CHECK(t->ne[0] == 3 && t->ne[1] == 2 && !ut_is_contiguous(t), "transpose is a strided view");
    CHECK(t->data == a->data, "transpose shares storage");
    ut_tensor *c = ut_contiguous(ctx, t);
    CHECK(ut_f32(c)[1] == 3 && ut_f32(c)[2] == 1, "contiguous copy reads through strides: %g %g",
          ut_f32(c)[1], ut_f32(c)[2]);
    ut_tensor *s = ut_slice(ctx, a, 1, 1, 3);
    CHECK(ut_f32(s) == ut_f32(a) + 1 && s->ne[1] == 2, "slice is a view at an offset");
    ut_tensor *r = ut_reshape(ctx, a, 1, (int64_t[]){-1});
    CHECK(r->ne[0] == 6 && r->data == a->data, "reshape of contiguous data is a view");
    ut_tensor *r2 = ut_reshape(ctx, t, 1, (int64_t[]){6});
    CHECK(r2->data != a->data && ut_f32(r2)[1] == 3, "reshape of a strided view copies");
    ut_ctx_free(ctx);
}

static void test_errors_name_op_and_shapes(void) {
    ut_ctx *ctx = new_ctx();
    ut_tensor *x = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){4, 5});
    ut_tensor *w = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){3, 6});
    ut_tensor *y = ut_linear(ctx, x, w, NULL);
    CHECK(y == NULL, "mismatched linear returns NULL");
    const char *e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "linear") && strstr(e, "(4, 5)") && strstr(e, "(3, 6)"), "message: %s", e);
    /* later ops see NULL and keep the first message */
    CHECK(ut_relu(ctx, y) == NULL && strstr(ut_ctx_error(ctx), "linear"), "sticky error");
    ut_ctx_clear_error(ctx);

    ut_tensor *ix = ut_tensor_zeros(ctx, UT_I32, 1, (int64_t[]){4});
    CHECK(ut_relu(ctx, ix) == NULL, "wrong dtype rejected");
    e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "relu") && strstr(e, "i32"), "dtype message: %s", e);
    ut_ctx_clear_error(ctx);

    ut_tensor *g = ut_tensor_zeros(ctx, UT_F32, 1, (int64_t[]){4});
    g->device = UT_CUDA;
    CHECK(ut_add(ctx, ut_tensor_zeros(ctx, UT_F32, 1, (int64_t[]){4}), g) == NULL, "device mismatch");
    e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "add") && strstr(e, "cuda"), "device message: %s", e);
    ut_ctx_clear_error(ctx);

    ut_tensor *big = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){2, 3});
    CHECK(ut_reshape(ctx, big, 2, (int64_t[]){4, 2}) == NULL, "bad reshape");
    e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "reshape") && strstr(e, "6 elements"), "reshape message: %s", e);
    ut_ctx_free(ctx);
}

static void test_model_option_errors(void) {
    char err[512];
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "n_embd", "65");
    CHECK(!ut_model_create("gpt2", kv, 0, err, sizeof err) && strstr(err, "divisible"), "%s", err);
    /* a non-finite float option is refused, naming it (it would train as 0, or a constant model) */
    ut_kv_set(kv, "n_embd", "16");
    ut_kv_set(kv, "dropout", "nan");
    CHECK(!ut_model_create("gpt2", kv, 0, err, sizeof err) && strstr(err, "dropout") && strstr(err, "finite"),
          "%s", err);
    ut_kv_set(kv, "dropout", "0");
    ut_kv_set(kv, "layer_norm_epsilon", "inf");
    CHECK(!ut_model_create("gpt2", kv, 0, err, sizeof err) && strstr(err, "layer_norm_epsilon") &&
              strstr(err, "finite"), "%s", err);
    ut_kv_set(kv, "layer_norm_epsilon", "1e-5");
    ut_kv_set(kv, "n_embd", "abc");
    CHECK(!ut_model_create("gpt2", kv, 0, err, sizeof err) && strstr(err, "n_embd") && strstr(err, "abc"),
          "%s", err);
    ut_kv_free(kv);
    kv = ut_kv_new();
    ut_kv_set(kv, "n_layers", "2");
    CHECK(!ut_model_create("gpt2", kv, 0, err, sizeof err) && strstr(err, "n_layers") && strstr(err, "n_layer "),
          "%s", err);
    ut_kv_free(kv);
    CHECK(!ut_model_create("resnet", NULL, 0, err, sizeof err) && strstr(err, "gpt2"), "%s", err);
}

static void test_no_grad_records_nothing(void) {
    ut_ctx *ctx = new_ctx();
    ut_model *m = tiny_gpt2(false);
    ut_ctx_set_grad_enabled(ctx, false);
    ut_tensor *loss = gpt2_loss(m, ctx, 0);
    CHECK(loss && ut_ctx_tape_len(ctx) == 0, "tape has %d entries", ut_ctx_tape_len(ctx));
    CHECK(ut_backward(ctx, loss) != 0 && strstr(ut_ctx_error(ctx), "require grad"), "backward refuses");
    ut_model_free(m);
    ut_ctx_free(ctx);
}

static void test_gradients_accumulate(void) {
    ut_ctx *ctx = new_ctx();
    ut_model *m = tiny_gpt2(false);
    int64_t n = m->params.numel;
    CHECK(ut_backward(ctx, gpt2_loss(m, ctx, 0)) == 0, "%s", ut_ctx_error(ctx));
    float *once = malloc(sizeof(float) * n);
    memcpy(once, m->params.flat_grad, sizeof(float) * n);
    ut_ctx_reset(ctx);
    CHECK(ut_backward(ctx, gpt2_loss(m, ctx, 0)) == 0, "second backward");
    double maxerr = 0;
    for (int64_t i = 0; i < n; i++) maxerr = fmax(maxerr, fabs(m->params.flat_grad[i] - 2 * once[i]));
    CHECK(maxerr < 1e-6, "two backwards give twice the gradient (max err %g)", maxerr);
    ut_model_zero_grad(m);
    for (int64_t i = 0; i < n; i++)
        if (m->params.flat_grad[i] != 0) {
            CHECK(0, "zero_grad left %g at %lld", m->params.flat_grad[i], (long long)i);
            break;
        }
    free(once);
    ut_model_free(m);
    ut_ctx_free(ctx);
}

/* Gradients written by their first consumer (docs/engine.md,
 * UT_FRESH_GRADS): the tiny GPT-2's parameter gradients, with and without
 * checkpointed blocks, have the same bits with every activation gradient
 * zeroed (0), written (1, the default) and written over NaNs (nan); a value
 * it does not take is refused, naming it. */
static void test_fresh_gradients(void) {
    const char *modes[3] = {"0", "1", "nan"};
    for (int ck = 0; ck < 2; ck++) {
        float *first = NULL;
        for (int i = 0; i < 3; i++) {
            setenv("UT_FRESH_GRADS", modes[i], 1);
            ut_ctx *ctx = new_ctx();
            ut_model *m = tiny_gpt2(ck);
            int64_t n = m->params.numel;
            CHECK(ut_backward(ctx, gpt2_loss(m, ctx, 0)) == 0, "%s", ut_ctx_error(ctx));
            if (!first) {
                first = malloc(sizeof(float) * n);
                memcpy(first, m->params.flat_grad, sizeof(float) * n);
            } else {
                CHECK(!memcmp(first, m->params.flat_grad, sizeof(float) * n),
                      "UT_FRESH_GRADS=%s%s: other gradients than with 0", modes[i], ck ? ", checkpointed" : "");
            }
            ut_model_free(m);
            ut_ctx_free(ctx);
        }
        free(first);
    }
    setenv("UT_FRESH_GRADS", "yes", 1);
    ut_ctx *ctx = new_ctx();
    const char *e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "UT_FRESH_GRADS=yes") && strstr(e, "0, 1, nan"), "%s", e ? e : "no error");
    ut_ctx_free(ctx);
    unsetenv("UT_FRESH_GRADS");
}

/* add hands its gradient to an operand of its shape (UT_KCAP_PASS_GRAD,
 * backend.h): the first source whose gradient nothing had made takes the
 * sum's own buffer, the other a buffer of its own, so a later consumer
 * adding into the first does not reach the second; the leaf's gradient is
 * the analytic one and, to the bit, that of UT_FRESH_GRADS=0 (nothing
 * handed over or written fresh). The add rows of test_sim's and
 * test_cuda_ops' test_fresh_grads take the same path on sim and CUDA. */
static void test_add_passes_gradient(void) {
    float first[12];
    for (int mode = 0; mode < 2; mode++) {
        setenv("UT_FRESH_GRADS", mode ? "1" : "0", 1);
        ut_ctx *ctx = new_ctx();
        unsetenv("UT_FRESH_GRADS");
        int64_t ne[2] = {3, 4};
        ut_tensor *x = ut_tensor_new(ctx, UT_F32, 2, ne), *r = ut_tensor_new(ctx, UT_F32, 2, ne),
                  *s = ut_tensor_new(ctx, UT_F32, 2, ne);
        for (int i = 0; i < 12; i++) {
            ut_f32(x)[i] = 0.1f * (float)i;
            ut_f32(r)[i] = 0.5f + 0.25f * (float)(i % 5);
            ut_f32(s)[i] = -1.0f + 0.125f * (float)i;
        }
        ut_tensor_set_requires_grad(x, true);
        ut_tensor *a = ut_scale(ctx, x, 2.0f), *b = ut_scale(ctx, x, 3.0f);
        ut_tensor *p = ut_mul(ctx, a, s); /* a's consumer before the add: adds into a's gradient after it */
        ut_tensor *y = ut_add(ctx, a, b);
        ut_tensor *loss = ut_sum(ctx, ut_add(ctx, ut_mul(ctx, y, r), p));
        CHECK(ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
        if (mode) {
            CHECK(a->grad == y->grad && b->grad != y->grad, "a's gradient %s the sum's, b's %s",
                  a->grad == y->grad ? "is" : "is not", b->grad == y->grad ? "too" : "not");
            CHECK(!memcmp(first, x->grad, sizeof first), "other gradients than with UT_FRESH_GRADS=0");
        } else {
            CHECK(a->grad != y->grad, "UT_FRESH_GRADS=0 handed the sum's gradient over");
            memcpy(first, x->grad, sizeof first);
        }
        for (int i = 0; i < 12; i++) /* d/dx of sum((2x + 3x) r + 2x s) */
            CHECK_NEAR(x->grad[i], 5.0f * ut_f32(r)[i] + 2.0f * ut_f32(s)[i], 1e-5);
        ut_ctx_free(ctx);
    }
}

typedef struct { int order[256], n, count[256]; } hook_log;
static void on_ready(void *user, int pi) {
    hook_log *h = user;
    h->count[pi]++;
    h->order[h->n++] = pi;
}

static void check_hooks(bool ckpt) {
    ut_ctx *ctx = new_ctx();
    ut_model *m = tiny_gpt2(ckpt);
    hook_log h = {0};
    ut_ctx_set_grad_hook(ctx, on_ready, &h);
    CHECK(ut_backward(ctx, gpt2_loss(m, ctx, 0)) == 0, "%s", ut_ctx_error(ctx));
    CHECK(h.n == m->params.n, "%d hooks for %d parameters", h.n, m->params.n);
    for (int i = 0; i < m->params.n; i++) CHECK(h.count[i] == 1, "param %s fired %d times", m->params.names[i], h.count[i]);
    /* later layers finish first; the tied embedding wte (index 0) is last */
    int pos_h1 = -1, pos_h0 = -1;
    for (int i = 0; i < h.n; i++) {
        const char *nm = m->params.names[h.order[i]];
        if (!strncmp(nm, "h.1.", 4) && pos_h1 < 0) pos_h1 = i;
        if (!strncmp(nm, "h.0.", 4) && pos_h0 < 0) pos_h0 = i;
    }
    CHECK(pos_h1 < pos_h0, "layer 1 before layer 0 (%d vs %d)", pos_h1, pos_h0);
    CHECK(h.order[h.n - 1] == 0, "wte last, got %s", m->params.names[h.order[h.n - 1]]);
    ut_model_free(m);
    ut_ctx_free(ctx);
}
static void test_grad_ready_hook(void) { check_hooks(false); }
static void test_grad_ready_hook_checkpointed(void) { check_hooks(true); }

/* Once warm, a training step (forward, backward, optimizer, reset) calls no
 * allocator, in float32 and under bf16 autocast (its scratch buffers and the
 * parameters' rounded copies are reused). */
static void test_steady_state_allocates_nothing(void) {
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.arena_bytes = 4096, .seed = 1}); /* forces growth */
    for (int run = 0; run < 4; run++) {
        int ck = run % 2;
        ut_ctx_set_autocast(ctx, run < 2 ? UT_F32 : UT_BF16);
        ut_model *m = tiny_gpt2(ck);
        ut_optim_config oc = ut_optim_defaults(UT_OPTIM_ADAMW);
        ut_optim *o = ut_optim_new(&oc, m->params.flat, m->params.flat_grad, m->params.segs, m->params.n, 0,
                                   m->params.numel);
        uint64_t before = 0;
        for (int step = 0; step < 6; step++) {
            if (step == 3) before = ut_alloc_count();
            CHECK(ut_backward(ctx, gpt2_loss(m, ctx, step)) == 0, "%s", ut_ctx_error(ctx));
            ut_optim_step(o, 1e-3f);
            ut_model_zero_grad(m);
            ut_ctx_reset(ctx);
        }
        CHECK(ut_alloc_count() == before, "checkpoint=%d %s: %llu allocations in 3 warm steps", ck,
              run < 2 ? "fp32" : "bf16", (unsigned long long)(ut_alloc_count() - before));
        ut_optim_free(o);
        ut_model_free(m);
    }
    ut_ctx_free(ctx);
}

static void test_checkpoint_same_grads_less_memory(void) {
    float *g[2];
    size_t peak[2];
    float loss[2];
    for (int ck = 0; ck < 2; ck++) {
        ut_ctx *ctx = new_ctx();
        ut_model *m = tiny_gpt2(ck);
        ut_ctx_reset_peak(ctx);
        ut_tensor *l = gpt2_loss(m, ctx, 1);
        CHECK(ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx));
        loss[ck] = ut_f32(l)[0];
        peak[ck] = ut_ctx_peak_bytes(ctx);
        g[ck] = malloc(sizeof(float) * m->params.numel);
        memcpy(g[ck], m->params.flat_grad, sizeof(float) * m->params.numel);
        if (ck) {
            CHECK(loss[0] == loss[1], "same loss %g vs %g", loss[0], loss[1]);
            CHECK(memcmp(g[0], g[1], sizeof(float) * m->params.numel) == 0, "bit-identical gradients");
        }
        ut_model_free(m);
        ut_ctx_free(ctx);
    }
    CHECK(peak[1] < peak[0], "peak %zu with checkpointing vs %zu without", peak[1], peak[0]);
    free(g[0]);
    free(g[1]);
}

/* dropout inside a checkpointed block: the recompute must draw the same mask */
static void test_checkpoint_replays_dropout(void) {
    float *g[2];
    for (int ck = 0; ck < 2; ck++) {
        ut_kv *kv = ut_kv_new();
        ut_kv_set(kv, "n_layer", "2"), ut_kv_set(kv, "n_head", "2"), ut_kv_set(kv, "n_embd", "16");
        ut_kv_set(kv, "vocab_size", "11"), ut_kv_set(kv, "block_size", "8"), ut_kv_set(kv, "dropout", "0.2");
        char err[256];
        ut_model *m = ut_model_create("gpt2", kv, 3, err, sizeof err);
        ut_kv_free(kv);
        m->checkpoint_activations = ck;
        ut_ctx *ctx = new_ctx();
        CHECK(ut_backward(ctx, gpt2_loss(m, ctx, 2)) == 0, "%s", ut_ctx_error(ctx));
        g[ck] = malloc(sizeof(float) * m->params.numel);
        memcpy(g[ck], m->params.flat_grad, sizeof(float) * m->params.numel);
        if (ck) CHECK(memcmp(g[0], g[1], sizeof(float) * m->params.numel) == 0, "same gradients with dropout");
        ut_model_free(m);
        ut_ctx_free(ctx);
    }
    free(g[0]);
    free(g[1]);
}

/* a user model: y = x W^T, trained with mse */
static ut_tensor *lin_forward(ut_model *m, ut_ctx *ctx, ut_tensor *x) {
    return ut_linear(ctx, x, m->params.t[0], NULL);
}
static ut_tensor *lin_loss(ut_model *m, ut_ctx *ctx, ut_tensor *out, ut_tensor *y) {
    (void)m;
    return ut_mse(ctx, out, y);
}
static ut_model *build_lin(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    long long k;
    if (ut_kv_int(opts, "k", 3, &k, err, n)) return NULL;
    ut_model *m = ut_model_new("lin");
    ut_param_add(m, "w", 2, (int64_t[]){k, k}, (ut_init){UT_INIT_NORMAL, 0.5f});
    m->forward = lin_forward;
    m->loss = lin_loss;
    ut_model_finalize(m, seed);
    return m;
}

static void test_registry_accepts_user_models(void) {
    char err[256];
    ut_model *m = ut_model_create("mlp", NULL, 1, err, sizeof err);
    CHECK(m && m->params.n == 4 && m->params.numel == 784 * 128 + 128 + 128 * 10 + 10, "default mlp");
    CHECK(m && m->params.segs[1].decay == false && m->params.segs[0].decay == true, "no decay on biases");
    CHECK(m && ut_model_param(m, "fc1.bias") && ut_model_param(m, "fc1.bias")->ne[0] == 10, "lookup by name");
    ut_model_free(m);
    ut_model_register("lin", build_lin);
    m = ut_model_create("lin", NULL, 1, err, sizeof err);
    CHECK(m && m->params.numel == 9, "user model by name: %s", err);
    ut_ctx *ctx = new_ctx();
    ut_tensor *x = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){2, 3});
    ut_f32(x)[0] = 1;
    ut_tensor *l = ut_model_loss(m, ctx, ut_model_forward(m, ctx, x), ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){2, 3}));
    CHECK(l && ut_backward(ctx, l) == 0 && m->params.flat_grad[0] != 0, "user model trains: %s", ut_ctx_error(ctx));
    ut_ctx_free(ctx);
    ut_model_free(m);
}

/* A child that fails to allocate during `phase` (ut_oom_phase): its exit
 * status, its stderr in buf and the mark it wrote in what ("" if none). */
static int oom_child(const char *phase, char *buf, size_t nbuf, char *what, size_t nwhat) {
    int fd[2];
    char mark[64];
    snprintf(mark, sizeof mark, "/tmp/utrain-test-oom-%ld", (long)getpid());
    unlink(mark);
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        setenv("UTRAIN_OOM_MARK", mark, 1);
        dup2(fd[1], 2);
        ut_oom_phase(phase);
        void *p = ut_malloc_check((size_t)1 << 62);
        (void)p;
        _exit(0);
    }
    close(fd[1]);
    size_t len = 0;
    ssize_t n;
    while (len < nbuf - 1 && (n = read(fd[0], buf + len, nbuf - 1 - len)) > 0) len += (size_t)n;
    buf[len] = 0;
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    what[0] = 0;
    FILE *f = fopen(mark, "r");
    if (f) {
        if (!fgets(what, (int)nwhat, f)) what[0] = 0;
        fclose(f);
    }
    unlink(mark);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* An allocation failure ends the process with exit status 1 (no core
 * dump), the size asked for, the call site and what to lower, and first
 * writes the file UTRAIN_OOM_MARK names (train.auto_find_batch_size's
 * launcher looks for it), saying whether it was training or evaluating. */
static void test_allocation_failure_names_size(void) {
    char buf[1024], what[64];
    int rc = oom_child(NULL, buf, sizeof buf, what, sizeof what);
    CHECK(rc == 1, "the process exits with status 1 (got %d)", rc);
    CHECK(strstr(buf, "utrain: error: out of memory") && strstr(buf, "4611686018427387904 bytes") &&
              strstr(buf, "test_core.c") && strstr(buf, "train.batch_size") && !strstr(buf, "evaluation"),
          "message: %s", buf);
    CHECK(!strcmp(what, "out of memory in train\n"), "the out-of-memory mark: '%s'", what);
    rc = oom_child("eval", buf, sizeof buf, what, sizeof what);
    CHECK(rc == 1 && strstr(buf, "This was an evaluation: its batch is train.eval_batch_size"), "in an evaluation: "
          "exit %d, message: %s", rc, buf);
    CHECK(!strcmp(what, "out of memory in eval\n"), "the out-of-memory mark in an evaluation: '%s'", what);
}

/* ut_model_finalize fills chunks in parallel, each from its own stream: the
 * values depend on the seed only, not on the thread count, and are N(0, 0.02)
 * where GPT-2 asks for it. Large enough for many chunks (wte is 320,000). */
static float *init_params(uint64_t seed, int threads, int64_t *n, float *wte_std) {
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "n_layer", "1");
    ut_kv_set(kv, "n_head", "2");
    ut_kv_set(kv, "n_embd", "64");
    ut_kv_set(kv, "vocab_size", "5000");
    ut_kv_set(kv, "block_size", "8");
    char err[256];
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    ut_model *m = ut_model_create("gpt2", kv, seed, err, sizeof err);
    omp_set_num_threads(saved);
    ut_kv_free(kv);
    CHECK(m, "%s", err);
    if (!m) return NULL;
    *n = m->params.numel;
    float *copy = malloc(sizeof(float) * (size_t)*n);
    memcpy(copy, m->params.flat, sizeof(float) * (size_t)*n);
    ut_tensor *wte = ut_model_param(m, "wte.weight");
    double s = 0, s2 = 0;
    int64_t k = ut_nelem(wte);
    for (int64_t i = 0; i < k; i++) {
        s += ut_f32(wte)[i];
        s2 += (double)ut_f32(wte)[i] * ut_f32(wte)[i];
    }
    *wte_std = (float)sqrt(s2 / (double)k - (s / (double)k) * (s / (double)k));
    ut_model_free(m);
    return copy;
}

static void test_init_independent_of_threads(void) {
    int64_t n1 = 0, n3 = 0, n4 = 0;
    float std1, std3, std4;
    float *a = init_params(3, 1, &n1, &std1), *b = init_params(3, 3, &n3, &std3);
    float *c = init_params(4, 3, &n4, &std4);
    CHECK(a && b && c && n1 == n3 && n1 == n4, "sizes");
    if (a && b && c && n1 == n3 && n1 == n4) {
        CHECK(!memcmp(a, b, sizeof(float) * (size_t)n1), "1 and 3 threads give different values");
        CHECK(memcmp(a, c, sizeof(float) * (size_t)n1), "seeds 3 and 4 give the same values");
    }
    CHECK(fabsf(std1 - 0.02f) < 0.0005f, "wte std %g, want 0.02", (double)std1);
    free(a);
    free(b);
    free(c);
}

/* A parameter's initial values depend on (seed, name, element) only: the
 * same in a model where it is registered after others, filled piecewise
 * from any element (odd offsets included), and different under another name.
 * The normal draws have the asked-for spread; the uniform ones stay in
 * [-a, a) and cover it. */
/* Parts of split parameters (ut_param_add_part) hold exactly their slice of
 * the whole parameter's initial values: rows of a (6, 8) weight in 3 blocks
 * over 2 parts (a packed q/k/v weight), columns of a (5, 6, 4) tensor over 3
 * parts, a bias over 4 parts; together the parts of all ranks are the whole;
 * a split that does not divide is refused naming the parameter. */
static void test_init_parts(void) {
    const ut_init normal = {UT_INIT_NORMAL, 0.5f};
    ut_model *whole = ut_model_new("x");
    ut_tensor *w = ut_param_add(whole, "qkv", 2, (int64_t[]){6, 8}, normal);
    ut_tensor *c = ut_param_add(whole, "c", 3, (int64_t[]){5, 6, 4}, normal);
    ut_tensor *b = ut_param_add(whole, "b", 1, (int64_t[]){8}, normal);
    ut_model_finalize(whole, 5);
    char err[256] = "";
    int bad = 0;
    for (int r = 0; r < 4; r++) {
        ut_model *m = ut_model_new("x");
        ut_tensor *wp = r < 2 ? ut_param_add_part(m, "qkv", 2, (int64_t[]){6, 8}, normal, 0, 2, r, 3, err, sizeof err)
                              : NULL;
        ut_tensor *cp = r < 3 ? ut_param_add_part(m, "c", 3, (int64_t[]){5, 6, 4}, normal, 1, 3, r, 1, err, sizeof err)
                              : NULL;
        ut_tensor *bp = ut_param_add_part(m, "b", 1, (int64_t[]){8}, normal, 0, 4, r, 1, err, sizeof err);
        CHECK(bp && (r >= 2 || wp) && (r >= 3 || cp), "%s", err);
        if (!bp) return;
        ut_model_finalize(m, 5);
        if (wp) /* block k's rows [2k, 2k+2): part r holds row 2k + r */
            for (int k = 0; k < 3; k++)
                bad += memcmp(ut_f32(wp) + k * 8, ut_f32(w) + (2 * k + r) * 8, 8 * sizeof(float)) != 0;
        if (cp) /* columns [2r, 2r+2) of dimension 1 */
            for (int o = 0; o < 5; o++)
                bad += memcmp(ut_f32(cp) + o * 2 * 4, ut_f32(c) + (o * 6 + 2 * r) * 4, 2 * 4 * sizeof(float)) != 0;
        bad += memcmp(ut_f32(bp), ut_f32(b) + 2 * r, 2 * sizeof(float)) != 0;
        CHECK(!wp || (wp->ne[0] == 3 && wp->ne[1] == 8), "part shape (%lld, %lld)", (long long)wp->ne[0],
              (long long)wp->ne[1]);
        CHECK(m->params.part[bp->param_index].parts == 4 && m->params.part[bp->param_index].full_ne[0] == 8,
              "the partition is kept");
        ut_model_free(m);
    }
    CHECK(bad == 0, "%d slices differ from the whole parameter", bad);
    ut_model *m = ut_model_new("x");
    CHECK(!ut_param_add_part(m, "h.0.attn.c_attn.weight", 2, (int64_t[]){9, 4}, normal, 0, 2, 0, 3, err, sizeof err) &&
              strstr(err, "h.0.attn.c_attn.weight") && strstr(err, "size 9"),
          "a split that does not divide: %s", err);
    CHECK(!ut_param_add_part(m, "w", 2, (int64_t[]){8, 4}, normal, 2, 2, 0, 1, err, sizeof err) &&
              !ut_param_add_part(m, "w", 2, (int64_t[]){8, 4}, normal, 0, 2, 2, 1, err, sizeof err),
          "a dimension or part out of range was taken");
    CHECK(m->params.n == 0, "a refused part was registered");
    ut_model_free(m);
    ut_model_free(whole);
}

static void test_init_by_name(void) {
    const ut_init normal = {UT_INIT_NORMAL, 0.5f}, uniform = {UT_INIT_UNIFORM, 0.25f};
    ut_model *a = ut_model_new("x"), *b = ut_model_new("x");
    ut_param_add(a, "first", 2, (int64_t[]){3, 5}, normal);
    ut_tensor *wa = ut_param_add(a, "h.0.w", 2, (int64_t[]){99, 101}, normal);
    ut_tensor *ua = ut_param_add(a, "h.0.u", 1, (int64_t[]){1001}, uniform);
    ut_tensor *ub = ut_param_add(b, "h.0.u", 1, (int64_t[]){1001}, uniform);
    ut_tensor *wb = ut_param_add(b, "h.0.w", 2, (int64_t[]){99, 101}, normal);
    ut_model_finalize(a, 11);
    ut_model_finalize(b, 11);
    int64_t n = 99 * 101;
    CHECK(!memcmp(ut_f32(wa), ut_f32(wb), sizeof(float) * (size_t)n) &&
              !memcmp(ut_f32(ua), ut_f32(ub), 1001 * sizeof(float)),
          "values depend on the parameter's place in the model");
    /* rows [17, 40) of the weight, and a run starting at an odd element */
    static float part[4096];
    ut_init_fill(part, 17 * 101, 23 * 101, normal, 11, "h.0.w");
    CHECK(!memcmp(part, ut_f32(wa) + 17 * 101, 23 * 101 * sizeof(float)), "a row block differs from the whole");
    ut_init_fill(part, 333, 1001 - 333, uniform, 11, "h.0.u");
    CHECK(!memcmp(part, ut_f32(ua) + 333, (1001 - 333) * sizeof(float)), "an odd start differs");
    ut_init_fill(part, 1, 7, normal, 11, "h.0.w");
    CHECK(!memcmp(part, ut_f32(wa) + 1, 7 * sizeof(float)), "an odd start of a normal differs");
    ut_init_fill(part, 0, 100, normal, 11, "h.1.w");
    CHECK(memcmp(part, ut_f32(wa), 100 * sizeof(float)), "another name gives the same values");
    ut_init_fill(part, 0, 100, normal, 12, "h.0.w");
    CHECK(memcmp(part, ut_f32(wa), 100 * sizeof(float)), "another seed gives the same values");
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s += ut_f32(wa)[i], s2 += (double)ut_f32(wa)[i] * ut_f32(wa)[i];
    double mean = s / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
    CHECK(fabs(mean) < 0.02 && fabs(sd - 0.5) < 0.01, "normal: mean %g std %g", mean, sd);
    float lo = 1, hi = -1;
    for (int i = 0; i < 1001; i++) lo = fminf(lo, ut_f32(ua)[i]), hi = fmaxf(hi, ut_f32(ua)[i]);
    CHECK(lo >= -0.25f && hi < 0.25f && lo < -0.24f && hi > 0.24f, "uniform: [%g, %g]", lo, hi);
    ut_model_free(a);
    ut_model_free(b);
}

/* ut_backward_from(y, G) gives the gradients of sum(y * G): a pipeline
 * stage's backward from the gradient the next stage sent. A gradient of the
 * wrong shape, dtype or layout is refused naming both tensors. */
static void test_backward_from_a_gradient(void) {
    float xv[6] = {0.5f, -1, 2, 0.25f, 1.5f, -0.75f}, wv[12], gv[8];
    for (int i = 0; i < 12; i++) wv[i] = 0.1f * (float)(i - 5);
    for (int i = 0; i < 8; i++) gv[i] = 0.3f * (float)(i % 3) - 0.2f;
    float dw[2][12], dx[2][6];
    for (int way = 0; way < 2; way++) {
        ut_ctx *ctx = new_ctx();
        ut_tensor *x = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){2, 3});
        ut_tensor *w = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){4, 3});
        ut_tensor *g = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){2, 4});
        ut_tensor_set(x, xv, sizeof xv);
        ut_tensor_set(w, wv, sizeof wv);
        ut_tensor_set(g, gv, sizeof gv);
        ut_tensor_set_requires_grad(x, true);
        ut_tensor_set_requires_grad(w, true);
        ut_tensor *y = ut_gelu(ctx, ut_linear(ctx, x, w, NULL));
        int rc = way ? ut_backward_from(ctx, y, g) : ut_backward(ctx, ut_sum(ctx, ut_mul(ctx, y, g)));
        CHECK(rc == 0, "way %d: %s", way, ut_ctx_error(ctx));
        ut_tensor_get_grad(w, dw[way], sizeof dw[way]);
        ut_tensor_get_grad(x, dx[way], sizeof dx[way]);
        if (way) {
            ut_tensor *bad = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){4, 2});
            CHECK(ut_backward_from(ctx, y, bad) == -1 && strstr(ut_ctx_error(ctx), "f32 (4, 2)") &&
                      strstr(ut_ctx_error(ctx), "the gradient must be a contiguous f32 tensor of the tensor's shape"),
                  "%s", ut_ctx_error(ctx));
        }
        ut_ctx_free(ctx);
    }
    for (int i = 0; i < 12; i++) CHECK_NEAR(dw[1][i], dw[0][i], 1e-6);
    for (int i = 0; i < 6; i++) CHECK_NEAR(dx[1][i], dx[0][i], 1e-6);
    CHECK(dw[1][0] != 0 && dx[1][0] != 0, "no gradient reached the leaves");
}


/* Model FLOPs (src/core/flops.c): each product op's count by hand, forward
 * and backward (a gradient per source that takes one), a checkpointed
 * block's recompute not counted again, packed sequences by their lengths. */
static ut_tensor *leaf(ut_ctx *ctx, int ndim, const int64_t *ne, bool grad) {
    ut_tensor *t = ut_tensor_new(ctx, UT_F32, ndim, ne);
    for (int64_t i = 0; i < ut_nelem(t); i++) ut_f32(t)[i] = 0.01f * (float)(i % 7);
    t->requires_grad = grad;
    return t;
}

/* the FLOPs of building y, and of its backward (from the sum of its values) */
static void flops_of(ut_ctx *ctx, ut_tensor *(*build)(ut_ctx *), double fwd, double bwd, const char *what) {
    double f0 = ut_ctx_flops(ctx);
    ut_tensor *y = build(ctx);
    CHECK(y, "%s: %s", what, ut_ctx_error(ctx));
    if (!y) return;
    double f1 = ut_ctx_flops(ctx);
    CHECK(f1 - f0 == fwd, "%s: forward %.0f FLOPs, expected %.0f", what, f1 - f0, fwd);
    if (bwd >= 0) {
        CHECK(ut_backward(ctx, ut_sum(ctx, y)) == 0, "%s: %s", what, ut_ctx_error(ctx));
        CHECK(ut_ctx_flops(ctx) - f1 == bwd, "%s: backward %.0f FLOPs, expected %.0f", what, ut_ctx_flops(ctx) - f1,
              bwd);
    }
    ut_ctx_reset(ctx);
}

static ut_tensor *f_linear(ut_ctx *c) { /* x (2, 3, 6) without a gradient, W (5, 6) with */
    return ut_linear(c, leaf(c, 3, (int64_t[]){2, 3, 6}, false), leaf(c, 2, (int64_t[]){5, 6}, true),
                     leaf(c, 1, (int64_t[]){5}, true));
}
static ut_tensor *f_matmul(ut_ctx *c) {
    return ut_matmul(c, leaf(c, 3, (int64_t[]){2, 3, 4}, true), leaf(c, 3, (int64_t[]){2, 4, 5}, true));
}
static ut_tensor *f_conv(ut_ctx *c) { /* 8 x 8 out before the fused pool */
    return ut_conv2d_relu_maxpool2(c, leaf(c, 4, (int64_t[]){2, 3, 8, 8}, true),
                                   leaf(c, 4, (int64_t[]){4, 3, 3, 3}, true), NULL, 1, 1);
}
static ut_tensor *f_attention(ut_ctx *c) { return ut_attention(c, leaf(c, 3, (int64_t[]){2, 5, 24}, true), 2); }
static ut_tensor *f_cross(ut_ctx *c) { /* Tq 3, Tk 4; only k takes a gradient */
    return ut_attention_qkv(c, leaf(c, 3, (int64_t[]){2, 3, 8}, false), leaf(c, 3, (int64_t[]){2, 4, 8}, true),
                            leaf(c, 3, (int64_t[]){2, 4, 8}, false), NULL, 2, false, 0.0f);
}
static ut_tensor *f_causal(ut_ctx *c) {
    ut_tensor *q = leaf(c, 3, (int64_t[]){2, 4, 8}, true);
    return ut_attention_qkv(c, q, q, q, NULL, 2, true, 0.0f);
}
static ut_tensor *f_varlen(ut_ctx *c) { /* sequences of 3 and 4 rows */
    ut_tensor *q = leaf(c, 2, (int64_t[]){7, 8}, true);
    ut_tensor *off = ut_tensor_from_async(c, UT_I32, 1, (int64_t[]){3}, (int32_t[]){0, 3, 7});
    return ut_attention_varlen(c, q, q, q, off, 2, false, 0.0f);
}
static ut_tensor *f_varlen_causal(ut_ctx *c) {
    ut_tensor *q = leaf(c, 2, (int64_t[]){7, 8}, true);
    ut_tensor *off = ut_tensor_from_async(c, UT_I32, 1, (int64_t[]){3}, (int32_t[]){0, 3, 7});
    return ut_attention_varlen(c, q, q, q, off, 2, true, 0.0f);
}
static ut_tensor *f_elementwise(ut_ctx *c) {
    return ut_gelu(c, ut_add(c, leaf(c, 2, (int64_t[]){4, 4}, true), leaf(c, 2, (int64_t[]){4, 4}, true)));
}

static void test_model_flops(void) {
    ut_ctx *ctx = new_ctx();
    flops_of(ctx, f_linear, 2.0 * 6 * 6 * 5, 2.0 * 6 * 6 * 5, "linear");
    flops_of(ctx, f_matmul, 2.0 * 2 * 3 * 4 * 5, 2 * 2.0 * 2 * 3 * 4 * 5, "matmul");
    flops_of(ctx, f_conv, 2.0 * 2 * 4 * 64 * 27, 2 * 2.0 * 2 * 4 * 64 * 27, "conv2d");
    flops_of(ctx, f_attention, 4.0 * 2 * 15 * 8, 8.0 * 2 * 15 * 8, "causal attention");
    flops_of(ctx, f_cross, 4.0 * 2 * 12 * 8, 8.0 * 2 * 12 * 8, "cross-attention");
    flops_of(ctx, f_causal, 4.0 * 2 * 10 * 8, 8.0 * 2 * 10 * 8, "masked causal attention");
    flops_of(ctx, f_varlen, 4.0 * 25 * 8, 8.0 * 25 * 8, "packed attention");
    flops_of(ctx, f_varlen_causal, 4.0 * 16 * 8, 8.0 * 16 * 8, "packed causal attention");
    flops_of(ctx, f_elementwise, 0, 0, "elementwise ops");
    ut_ctx_set_grad_enabled(ctx, false);
    flops_of(ctx, f_linear, 2.0 * 6 * 6 * 5, -1, "linear without autograd");
    ut_ctx_set_grad_enabled(ctx, true);
    ut_ctx_free(ctx);

    /* the tiny GPT-2 (2 layers, 16 wide, 11 tokens, 2 x 8): per layer
     * qkv, projection and the MLP's two products, 2 x 16 rows x 16 x (48 +
     * 16 + 64 + 64); the tied head 2 x 16 x 16 x 11; attention 4 x 2 x 36
     * pairs x 16 per layer. Backward: twice every product (the first layer's
     * input has a gradient: the embeddings'). Checkpointed: the same. */
    double fwd = 2 * (2.0 * 16 * 16 * 192 + 4.0 * 2 * 36 * 16) + 2.0 * 16 * 16 * 11;
    for (int ck = 0; ck < 2; ck++) {
        ctx = new_ctx();
        ut_model *m = tiny_gpt2(ck);
        ut_tensor *l = gpt2_loss(m, ctx, 1);
        CHECK(ut_ctx_flops(ctx) == fwd, "gpt2%s forward: %.0f FLOPs, expected %.0f", ck ? " checkpointed" : "",
              ut_ctx_flops(ctx), fwd);
        CHECK(ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx));
        CHECK(ut_ctx_flops(ctx) == 3 * fwd, "gpt2%s forward and backward: %.0f FLOPs, expected %.0f",
              ck ? " checkpointed" : "", ut_ctx_flops(ctx), 3 * fwd);
        ut_model_free(m);
        ut_ctx_free(ctx);
    }
}

int main(void) {
    RUN(test_views_share_data);
    RUN(test_errors_name_op_and_shapes);
    RUN(test_model_option_errors);
    RUN(test_no_grad_records_nothing);
    RUN(test_gradients_accumulate);
    RUN(test_fresh_gradients);
    RUN(test_add_passes_gradient);
    RUN(test_grad_ready_hook);
    RUN(test_grad_ready_hook_checkpointed);
    RUN(test_steady_state_allocates_nothing);
    RUN(test_checkpoint_same_grads_less_memory);
    RUN(test_checkpoint_replays_dropout);
    RUN(test_registry_accepts_user_models);
    RUN(test_allocation_failure_names_size);
    RUN(test_init_independent_of_threads);
    RUN(test_init_by_name);
    RUN(test_init_parts);
    RUN(test_backward_from_a_gradient);
    RUN(test_model_flops);
    return TEST_SUMMARY();
}
