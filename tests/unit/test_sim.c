/* The simulated device (src/backend/sim): a backend whose memory the host
 * cannot read, built from the CPU's kernels. A direct host read of its
 * memory faults; every gradcheck row gives the CPU's output and gradients to
 * the bit, in float32 and under bf16 and fp16 autocast; a model built on it
 * holds the CPU model's initial values and trains as the CPU's does. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/backend/backend.h"
#include "devcompare.h"
#include "test.h"
#include "utrain/base.h"
#include "utrain/data.h"
#include "utrain/nn.h"
#include "utrain/ops.h"
#include "utrain/optim.h"
#include "utrain/tensor.h"

#define GC_FAMILIES(X) X(core) X(unary) X(loss) X(nn)
#define DECLARE(f) extern const gc_row gc_rows_##f[]; extern const int gc_nrows_##f;
GC_FAMILIES(DECLARE)

static void test_registered(void) {
    const ut_backend *be = ut_backend_get(UT_SIM);
    CHECK(be && be->device == UT_SIM && !be->host_memory && !strcmp(be->name, "sim") &&
              !strcmp(ut_device_name(UT_SIM), "sim") && ut_backend_check(UT_SIM, NULL, 0) == 0,
          "the sim backend is registered");
    /* its op table is the CPU's kernels with the CPU's 16-bit capabilities */
    const ut_op_vtable *cpu = ut_backend_get(UT_CPU)->ops;
    for (int op = 1; be && op < ut_op_count(); op++)
        CHECK(be->ops[op].forward && be->ops[op].backward && be->ops[op].caps == cpu[op].caps, "op %s",
              ut_op_name(op));
}

static void *fault_addr;
static void on_segv(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    fault_addr = si->si_addr;
    _exit(fault_addr ? 42 : 43);
}

/* A tensor's data read through its pointer on the host faults; the same
 * values come back through ut_tensor_get. */
static void test_host_read_faults(void) {
    const float v[4] = {1, 2, 3, 4};
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_SIM});
    ut_tensor *t = ut_tensor_from(ctx, UT_F32, 1, (int64_t[]){4}, v);
    float back[4] = {0};
    CHECK(t && ut_tensor_get(t, back, sizeof back) == 0 && !memcmp(back, v, sizeof v), "%s",
          ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "get");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction sa = {.sa_sigaction = on_segv, .sa_flags = SA_SIGINFO};
        sigaction(SIGSEGV, &sa, NULL);
        volatile float *p = t->data;
        float x = p[1]; /* must fault */
        _exit(x == 2.0f ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 42, "a host read of sim memory did not fault (status %#x)",
          status);
    ut_ctx_free(ctx);
}

/* ---- streams: queued work runs later, in order; only waits make it seen ----
 * The gate holds the compute stream's worker at a known point: a dropout
 * kernel launched with a kernel context whose allocator waits until the
 * test opens the gate, so everything queued after it waits too, and what
 * "later" means is fixed, not a race. */
typedef struct {
    ut_ctx *ctx;
} gate;
/* core's (src/core/internal.h, which clashes with tests/common's host accessors) */
ut_kctx ut_ctx_launch(ut_ctx *ctx, int op);
void *ut_ctx_dalloc(ut_ctx *ctx, size_t bytes);
static int op_id(const char *name) {
    for (int op = 1; op < ut_op_count(); op++)
        if (!strcmp(ut_op_name(op), name)) return op;
    return 0;
}
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_shut;
static void *gate_dalloc(const ut_kctx *k, size_t bytes) {
    pthread_mutex_lock(&gate_mu);
    while (gate_shut) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    return ut_ctx_dalloc(k->owner, bytes);
}
static void gate_close(gate *g) {
    g->ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_SIM, .seed = 1});
    ut_ctx_set_training(g->ctx, true);
    ut_tensor *x = ut_tensor_zeros(g->ctx, UT_F32, 1, (int64_t[]){16});
    ut_tensor *y = ut_dropout(g->ctx, x, 0.5f);
    ut_backend_get(UT_SIM)->stream_sync(NULL);
    gate_shut = true;
    int dropout = op_id("dropout");
    ut_kctx k = ut_ctx_launch(g->ctx, dropout);
    k.dalloc = gate_dalloc;
    ut_backend_get(UT_SIM)->ops[dropout].forward(y, &k); /* queued; its worker stops at the mask */
}
static void gate_open(gate *g) {
    (void)g;
    pthread_mutex_lock(&gate_mu);
    gate_shut = false;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}
static void gate_free(gate *g) {
    ut_backend_get(UT_SIM)->stream_sync(NULL);
    ut_ctx_free(g->ctx);
}

static float dev_value(const ut_backend *be, const float *dev) {
    float v = -1;
    be->copy(&v, dev, sizeof v, UT_COPY_D2H);
    return v;
}

/* copy from host memory has taken the bytes when it returns; copy_async
 * reads them when the stream gets there, so a host buffer changed before an
 * event says the copy ran reaches the device changed, and one changed after
 * does not. A D2H copy_async fills its host buffer only when the stream
 * gets there. */
static void test_async_copies(void) {
    const ut_backend *be = ut_backend_get(UT_SIM);
    float *d = be->alloc(4 * sizeof(float)), h[1] = {1};
    gate g;

    gate_close(&g);
    be->copy(d, h, sizeof h, UT_COPY_H2D);
    h[0] = 2; /* too late: copy took 1 */
    gate_open(&g);
    CHECK(dev_value(be, d) == 1, "copy H2D must take the host bytes at the call: %g", dev_value(be, d));
    gate_free(&g);

    gate_close(&g);
    ut_copy_async(be, d, h, sizeof h, UT_COPY_H2D, NULL);
    h[0] = 3; /* a missing wait: the stream has not read h yet */
    gate_open(&g);
    CHECK(dev_value(be, d) == 3, "copy_async reads the host buffer when the stream gets there: %g", dev_value(be, d));
    gate_free(&g);

    void *ev = ut_event_new(be);
    gate_close(&g);
    h[0] = 4;
    ut_copy_async(be, d, h, sizeof h, UT_COPY_H2D, NULL);
    ut_event_record(be, ev, NULL);
    gate_open(&g);
    ut_event_sync(be, ev); /* the wait */
    h[0] = 5;
    CHECK(dev_value(be, d) == 4, "after the event the copy has read 4: %g", dev_value(be, d));
    gate_free(&g);

    float back = 0;
    gate_close(&g);
    ut_copy_async(be, &back, d, sizeof back, UT_COPY_D2H, NULL);
    ut_event_record(be, ev, NULL);
    CHECK(back == 0, "a D2H copy_async filled host memory before the stream got there");
    CHECK(!ut_event_done(be, ev), "an event behind the gate is done");
    gate_open(&g);
    ut_event_sync(be, ev);
    CHECK(back == 4 && ut_event_done(be, ev), "after its event the D2H copy_async holds 4: %g", back);
    gate_free(&g);
    ut_event_free(be, ev);
    be->free(d);
}

/* The loader's memory and the uploads from it: a batch's prepared arrays go
 * up with asynchronous copies, and the loader may fill that slot again only
 * after the fence recorded behind them. With the compute stream held, the
 * next batch is taken, so the producer wants the first batch's slot back
 * for the third; the uploaded tensor must still receive the first batch's
 * values. */
static int counting_get(ut_dataset *ds, int64_t i, void *x, void *y, char *e, size_t n) {
    (void)ds, (void)e, (void)n;
    *(float *)x = (float)i;
    *(int32_t *)y = (int32_t)i;
    return 0;
}
static int twice(void *user, const ut_host_array *x, ut_inputs *in, char *err, size_t n) {
    (void)user, (void)err, (void)n;
    float *d = ut_inputs_add(in, UT_F32, 1, &x->ne[0]);
    for (int64_t i = 0; i < x->ne[0]; i++) d[i] = 2 * ((const float *)x->host)[i];
    return 0;
}
static void test_loader_fence(void) {
    ut_dataset ds = {.name = "counting", .n = 64, .x_ndim = 1, .x_ne = {1}, .x_dtype = UT_F32,
                     .y_dtype = UT_I32, .get = counting_get};
    ut_sampler s;
    ut_sampler_init(&s, ds.n, 4, 0, 1, 0, false, false);
    ut_loader *l = ut_loader_new_opts(&ds, &s, 1, &(ut_loader_opts){.prepare = twice, .device = UT_SIM});
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_SIM});
    ut_batch b;
    char err[256] = "";
    CHECK(ut_loader_next(l, &b, err, sizeof err) == 1 && b.inputs && b.inputs->n == 1, "a prepared batch");
    gate g;
    gate_close(&g);
    ut_tensor *t[UT_MAX_INPUTS];
    CHECK(ut_inputs_upload(ctx, b.inputs, t) == 0, "upload");
    CHECK(ut_loader_next(l, &b, err, sizeof err) == 1, "second batch");
    usleep(100 * 1000); /* time enough for the producer to fill the first slot, were it not waiting */
    gate_open(&g);
    float got[4] = {0};
    CHECK(ut_tensor_get(t[0], got, sizeof got) == 0 && got[0] == 0 && got[1] == 2 && got[3] == 6,
          "the upload read the first batch: %g %g %g %g", got[0], got[1], got[2], got[3]);
    gate_free(&g);
    ut_loader_free(l);
    ut_sampler_free(&s);
    ut_ctx_free(ctx);
}

/* Models prepare their inputs on the host (the loader thread); their
 * forward_prepared on the device then reads nothing back: no D2H copy and
 * no host reduction while it is launched. Its output equals the one
 * ut_model_forward gives (which prepares a device tensor on the host),
 * for each model and both layouts of the packed ones. */
unsigned long ut_sim_host_reads(void); /* sim.c: the host's reads of device memory so far */
static void test_prepared_forward(void) {
    enum { B = 2, T = 6 };
    /* token planes (B, 3, T): ids, type ids, mask; row 1 padded after 4 */
    int32_t planes[B * 3 * T] = {5, 7, 9, 4, 4, 2, /**/ 0, 0, 0, 0, 0, 0, /**/ 1, 1, 1, 1, 1, 1,
                                 6, 8, 3, 2, 1, 1, /**/ 0, 0, 0, 0, 0, 0, /**/ 1, 1, 1, 1, 0, 0};
    int32_t tokens[B * T] = {5, 7, 9, 4, 4, 2, 6, 8, 3, 2, 1, 1};
    struct { const char *name, *opts; bool planes; } cases[] = {
        {"gpt2", "n_layer=1,n_head=2,n_embd=8,vocab_size=16,block_size=8", false},
        {"gpt2", "n_layer=1,n_head=2,n_embd=8,vocab_size=16,block_size=8,task=sequence_classification,"
                 "pad_token_id=1", true},
        {"bert", "vocab_size=16,hidden_size=8,num_hidden_layers=1,num_attention_heads=2,intermediate_size=16,"
                 "max_position_embeddings=8,type_vocab_size=2", true},
        {"bart", "vocab_size=16,d_model=8,encoder_layers=1,decoder_layers=1,encoder_attention_heads=2,"
                 "decoder_attention_heads=2,encoder_ffn_dim=16,decoder_ffn_dim=16,max_position_embeddings=10", true},
        {"bow", "vocab_size=16,n_embd=4,hidden=4", false},
    };
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        for (int padded = 0; padded < 2; padded++) {
            if (padded && !cases[c].planes) continue;
            int32_t x[B * 3 * T];
            if (cases[c].planes) memcpy(x, planes, sizeof planes);
            else memcpy(x, tokens, sizeof tokens);
            /* row 1's mask 0 1 1 0 0 1: it starts with padding (BERT's pooler reads it), its last real
             * token is padding (GPT-2's head reads it), and it is not right-padded (BART): padded */
            int32_t *m1 = x + (1 * 3 + 2) * T;
            if (padded) m1[0] = 0, m1[3] = 0, m1[5] = 1;
            ut_kv *kv = ut_kv_new();
            char opts[256], *save = NULL, err[512] = "";
            snprintf(opts, sizeof opts, "%s", cases[c].opts);
            for (char *kvs = strtok_r(opts, ",", &save); kvs; kvs = strtok_r(NULL, ",", &save)) {
                char *eq = strchr(kvs, '=');
                *eq = 0;
                ut_kv_set(kv, kvs, eq + 1);
            }
            ut_model *m = ut_model_create_on(cases[c].name, kv, 3, UT_SIM, err, sizeof err);
            ut_kv_free(kv);
            CHECK(m && m->prepare && m->forward_prepared, "%s: %s", cases[c].name, err);
            if (!m) continue;
            ut_host_array hx = {.dtype = UT_I32, .ndim = cases[c].planes ? 3 : 2, .ne = {B, 3, T}, .host = x};
            if (!cases[c].planes) hx.ne[1] = T;
            ut_inputs in = {.dev = UT_SIM};
            CHECK(m->prepare(m, &hx, &in, err, sizeof err) == 0, "%s prepare: %s", cases[c].name, err);
            ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_SIM, .seed = 5});
            ut_ctx_set_training(ctx, false); /* bert and bart have dropout: the two forwards would draw apart */
            unsigned long before = ut_sim_host_reads();
            ut_tensor *a = ut_model_forward_inputs(m, ctx, &in);
            unsigned long reads = ut_sim_host_reads() - before;
            CHECK(a && reads == 0, "%s (layout %d): %lu host reads while the forward was launched: %s",
                  cases[c].name, in.layout, reads, ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
            CHECK(!cases[c].planes || (in.layout == 1) == (padded == 1), "%s: layout %d for %s rows",
                  cases[c].name, in.layout, padded ? "padded" : "right-padded");
            ut_tensor *b = ut_model_forward(m, ctx, ut_tensor_from(ctx, UT_I32, hx.ndim, hx.ne, x));
            int64_t k = a && b ? ut_nelem(a) : 0;
            float *va = ut_malloc_check(4 * (size_t)(k + 1)), *vb = ut_malloc_check(4 * (size_t)(k + 1));
            CHECK(a && b && ut_nelem(b) == k && !ut_tensor_get(a, va, 4 * (size_t)k) &&
                      !ut_tensor_get(b, vb, 4 * (size_t)k) && !memcmp(va, vb, 4 * (size_t)k),
                  "%s (layout %d): the prepared forward differs from ut_model_forward", cases[c].name, in.layout);
            ut_free(va);
            ut_free(vb);
            ut_inputs_free(&in);
            ut_ctx_free(ctx);
            ut_model_free(m);
        }
    }
}

/* Two streams run independently unless an event orders them: a copy on a
 * second stream that does not wait for the compute stream's memset reads
 * the old value; one that waits on an event recorded after the memset reads
 * the new. */
static void test_two_streams(void) {
    const ut_backend *be = ut_backend_get(UT_SIM);
    void *side = be->stream_new(UT_STREAM_COMM), *ev = ut_event_new(be);
    CHECK(side && side != be->stream_new(UT_STREAM_COMPUTE), "a communication stream is a stream of its own");
    float *x = be->alloc(sizeof(float)), *y = be->alloc(sizeof(float));
    be->memset(x, 0, sizeof(float));
    be->memset(y, 0xff, sizeof(float));
    gate g;
    for (int ordered = 0; ordered < 2; ordered++) {
        gate_close(&g);
        const float one = 1;
        be->copy(x, &one, sizeof one, UT_COPY_H2D); /* queued behind the gate */
        ut_event_record(be, ev, NULL);
        if (ordered) ut_event_wait(be, side, ev);
        ut_copy_async(be, y, x, sizeof(float), UT_COPY_D2D, side);
        if (!ordered) be->stream_sync(side); /* the side stream is done while compute waits at the gate */
        gate_open(&g);
        be->stream_sync(side);
        float got = dev_value(be, y);
        if (ordered) CHECK(got == 1, "the side stream waited for the event: y = %g", got);
        else CHECK(got == 0, "without the event the side stream read x before the compute stream wrote it: y = %g", got);
        gate_free(&g);
        be->memset(x, 0, sizeof(float));
    }
    be->free(x);
    be->free(y);
    ut_event_free(be, ev);
    be->stream_free(side);
}

/* A kernel's data error on sim is found when it runs, after the launch
 * returned: the next read of results reports it, naming the op. */
static void test_late_data_error(void) {
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_SIM});
    ut_tensor *w = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){4, 3});
    ut_tensor *ix = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){2}, (int32_t[]){1, 9});
    ut_tensor *y = ut_embedding(ctx, ix, w);
    float out[6];
    int rc = y ? ut_tensor_get(y, out, sizeof out) : -1;
    const char *e = ut_ctx_error(ctx);
    CHECK(rc == -1 && e && strstr(e, "embedding") && strstr(e, "9"), "%s", e ? e : "no error");
    ut_ctx_free(ctx);
}

static void run_family(const char *fam, const gc_row *rows, int n) {
    for (int i = 0; i < n; i++) {
        if (dc_compare_row(fam, &rows[i], UT_SIM, 0)) t_failed++;
        else t_passed++;
    }
}

/* Under autocast the 16-bit paths (the kernels' own and core's float32
 * copies) run through the device's convert and round: the same bits too. */
static void test_autocast_rows(void) {
    const ut_dtype dts[2] = {UT_BF16, UT_F16};
    for (int d = 0; d < 2; d++) {
        dc_autocast = dts[d];
        const gc_row *all[] = {gc_rows_core, gc_rows_unary, gc_rows_loss, gc_rows_nn};
        const int counts[] = {gc_nrows_core, gc_nrows_unary, gc_nrows_loss, gc_nrows_nn};
        for (int f = 0; f < 4; f++)
            for (int i = 0; i < counts[f]; i++)
                if (dc_compare_row(ut_dtype_name(dts[d]), &all[f][i], UT_SIM, 0)) t_checks_failed++;
    }
    dc_autocast = UT_F32;
}

/* Gradients written whole where no op has written them yet (backend.h,
 * UT_KCAP_FRESH_GRAD): every row with its inputs behind an op
 * (dc_through), the unwritten gradients NaN-filled (UT_FRESH_GRADS=nan)
 * on both devices: the CPU's bits still, and none of the NaNs. */
static void test_fresh_grads(void) {
    setenv("UT_FRESH_GRADS", "nan", 1);
    dc_through = true;
    const gc_row *all[] = {gc_rows_core, gc_rows_unary, gc_rows_loss, gc_rows_nn};
    const int counts[] = {gc_nrows_core, gc_nrows_unary, gc_nrows_loss, gc_nrows_nn};
    for (int f = 0; f < 4; f++)
        for (int i = 0; i < counts[f]; i++)
            if (dc_compare_row("through", &all[f][i], UT_SIM, 0)) t_checks_failed++;
    dc_through = false;
    unsetenv("UT_FRESH_GRADS");
}

/* A model on the sim device: its flat buffers are device memory with the
 * CPU model's initial values; one forward, backward and AdamW step of the
 * CNN on the same batch give the CPU's loss, gradients and weights to the
 * bit, and clipping sees the same norm. */
static void test_model_on_sim(void) {
    char err[256] = "";
    ut_model *m[2] = {ut_model_create_on("cnn", NULL, 7, UT_CPU, err, sizeof err),
                      ut_model_create_on("cnn", NULL, 7, UT_SIM, err, sizeof err)};
    CHECK(m[0] && m[1] && m[1]->params.device == UT_SIM && m[1]->params.t[0]->device == UT_SIM, "%s", err);
    if (!m[0] || !m[1]) return;
    int64_t n = m[0]->params.numel;
    const ut_backend *sim = ut_backend_get(UT_SIM);
    float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
    memcpy(a, m[0]->params.flat, (size_t)n * sizeof(float));
    sim->copy(b, m[1]->params.flat, (size_t)n * sizeof(float), UT_COPY_D2H);
    CHECK(!memcmp(a, b, (size_t)n * sizeof(float)), "initial values differ");
    enum { B = 4 };
    float *img = malloc(B * 28 * 28 * sizeof(float));
    int32_t y[B] = {3, 1, 4, 1};
    for (int i = 0; i < B * 28 * 28; i++) img[i] = (float)((i * 37) % 101) / 101.0f - 0.4f;
    float loss[2];
    double norm[2];
    for (int d = 0; d < 2; d++) {
        ut_device dev = d ? UT_SIM : UT_CPU;
        ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = dev, .seed = 1});
        ut_ctx_set_training(ctx, true);
        ut_tensor *x = ut_tensor_from(ctx, UT_F32, 4, (int64_t[]){B, 1, 28, 28}, img);
        ut_tensor *t = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){B}, y);
        ut_tensor *l = ut_model_loss(m[d], ctx, ut_model_forward(m[d], ctx, x), t);
        CHECK(l && ut_backward(ctx, l) == 0 && ut_tensor_get(l, &loss[d], sizeof(float)) == 0, "%s: %s",
              ut_device_name(dev), ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
        norm[d] = ut_grad_norm_sq(dev, m[d]->params.flat_grad, n);
        ut_optim_config oc = ut_optim_defaults(UT_OPTIM_ADAMW);
        oc.device = dev;
        ut_optim *o = ut_optim_new(&oc, m[d]->params.flat, m[d]->params.flat_grad, m[d]->params.segs,
                                   m[d]->params.n, 0, n);
        ut_optim_step_zero(o, 1e-3f);
        ut_optim_free(o);
        ut_ctx_free(ctx);
    }
    CHECK(loss[0] == loss[1] && norm[0] == norm[1], "loss %.9g vs %.9g, norm^2 %.17g vs %.17g", loss[0], loss[1],
          norm[0], norm[1]);
    memcpy(a, m[0]->params.flat, (size_t)n * sizeof(float));
    sim->copy(b, m[1]->params.flat, (size_t)n * sizeof(float), UT_COPY_D2H);
    CHECK(!memcmp(a, b, (size_t)n * sizeof(float)), "weights after a step differ");
    free(img);
    free(a);
    free(b);
    ut_model_free(m[0]);
    ut_model_free(m[1]);
}

/* The optimizer's scaled step (its gradient multiplier and skip flag read
 * from device memory) and its 16-bit copies, on the CPU and on sim: scaling
 * the gradients first and stepping gives the same parameters and state to
 * the bit, a skipped step leaves them (and the step count, once unstepped)
 * as they were with the gradients zeroed, the copies are the parameters
 * rounded to bf16 either way, and the device's scalars are the host rule's
 * for a clipped, an unclipped and a non-finite norm. */
/* The devices the optimizer and autocast tests below compare: the CPU, sim,
 * and CUDA where this machine has a GPU (the suite on a GPU machine). */
static int step_devices(ut_device *dev) {
    int n = 0;
    dev[n++] = UT_CPU, dev[n++] = UT_SIM;
    char err[256];
    if (ut_backend_check(UT_CUDA, err, sizeof err) == 0) dev[n++] = UT_CUDA;
    return n;
}

static void test_scaled_step(void) {
    enum { N = 1000 };
    ut_device devs[3];
    int ndev = step_devices(devs);
    static float p0[N], g0[N], want[N], got[N], st[N], st2[N];
    static uint16_t c16[N], r16[N];
    for (int i = 0; i < N; i++) p0[i] = sinf(0.37f * (float)i), g0[i] = cosf(1.3f * (float)i) * 0.5f;
    /* a 20 x 30 matrix (Adafactor factors it) and a vector */
    ut_param_seg seg[2] = {{.offset = 0, .numel = 600, .decay = true, .rows = 20, .cols = 30},
                           {.offset = 608, .numel = 392, .decay = false}};
    for (int d = 0; d < ndev; d++) {
        ut_device dev = devs[d];
        const ut_backend *be = ut_backend_get(dev);
        for (int kind = 0; kind < 4; kind++) { /* AdamW, SGD, Lion, Adafactor */
            for (int skip = 0; skip < 2; skip++) {
                float *p[2], *g[2], *sc = be->alloc(2 * sizeof(float));
                void *cp = be->alloc(N * 2);
                ut_optim *o[2];
                static const ut_optim_kind kinds[] = {UT_OPTIM_ADAMW, UT_OPTIM_SGD, UT_OPTIM_LION, UT_OPTIM_ADAFACTOR};
                ut_optim_config oc = ut_optim_defaults(kinds[kind]);
                oc.beta1 = kind == 3 ? 0.9f : oc.beta1; /* Adafactor: both of its states */
                oc.device = dev, oc.weight_decay = 0.1f, oc.momentum = kind == 1 ? 0.9f : 0.0f;
                for (int v = 0; v < 2; v++) {
                    p[v] = be->alloc(N * sizeof(float)), g[v] = be->alloc(N * sizeof(float));
                    be->copy(p[v], p0, sizeof p0, UT_COPY_H2D);
                    o[v] = ut_optim_new(&oc, p[v], g[v], seg, 2, 0, N);
                    for (int k = 0; k < 2; k++) { /* two plain steps, so the state is not zero */
                        be->copy(g[v], g0, sizeof g0, UT_COPY_H2D);
                        ut_optim_step_zero(o[v], 1e-2f);
                    }
                    be->copy(g[v], g0, sizeof g0, UT_COPY_H2D);
                }
                float h[2] = {0.375f, skip ? 1.0f : 0.0f};
                be->copy(sc, h, sizeof h, UT_COPY_H2D);
                if (!skip) {
                    ut_grad_scale(dev, g[0], N, h[0]);
                    ut_optim_step_zero(o[0], 1e-2f);
                } else {
                    be->memset(g[0], 0, N * sizeof(float));
                }
                ut_optim_set_copies16(o[1], cp, UT_BF16);
                ut_optim_step_zero_scaled(o[1], 1e-2f, sc);
                if (skip) ut_optim_unstep(o[1]);
                be->copy(want, p[0], sizeof want, UT_COPY_D2H);
                be->copy(got, p[1], sizeof got, UT_COPY_D2H);
                be->copy(c16, cp, sizeof c16, UT_COPY_D2H);
                ut_backend_get(UT_CPU)->convert(r16, UT_BF16, got, UT_F32, N);
                memcpy(r16 + 600, c16 + 600, 8 * sizeof *r16); /* the padding between the two has no copy */
                bool same_state = true;
                for (int k = 0; k < ut_optim_nstate(o[0]); k++) {
                    size_t bytes = (size_t)ut_optim_state_len(o[0], k) * sizeof(float);
                    be->copy(st, ut_optim_state(o[0], k, NULL), bytes, UT_COPY_D2H);
                    be->copy(st2, ut_optim_state(o[1], k, NULL), bytes, UT_COPY_D2H);
                    same_state &= !memcmp(st, st2, bytes);
                }
                be->copy(st, g[1], sizeof st, UT_COPY_D2H);
                bool zeroed = true;
                for (int i = 0; i < N; i++) zeroed &= st[i] == 0.0f;
                CHECK(!memcmp(want, got, sizeof want) && same_state && zeroed && !memcmp(c16, r16, sizeof c16) &&
                          ut_optim_steps(o[0]) == ut_optim_steps(o[1]),
                      "%s %s%s: params %s, state %s, gradients %szeroed, copies %s, steps %lld and %lld",
                      ut_device_name(dev), (const char *[]){"adamw", "sgd", "lion", "adafactor"}[kind],
                      skip ? " skipped" : "",
                      memcmp(want, got, sizeof want) ? "differ" : "agree", same_state ? "agrees" : "differs",
                      zeroed ? "" : "not ", memcmp(c16, r16, sizeof c16) ? "differ" : "agree",
                      (long long)ut_optim_steps(o[0]), (long long)ut_optim_steps(o[1]));
                for (int v = 0; v < 2; v++) ut_optim_free(o[v]), be->free(p[v]), be->free(g[v]);
                be->free(sc), be->free(cp);
            }
        }
        /* the scalars: (scaled norm^2, max_norm, loss scale) */
        double cases[][3] = {{4.0e6, 1.0, 1024.0}, {9.0, 0.0, 1.0}, {9.0, 5.0, 1.0}, {INFINITY, 1.0, 1.0},
                             {NAN, 0.0, 65536.0}};
        double *sq = be->alloc(sizeof(double));
        float *sc = be->alloc(2 * sizeof(float));
        for (int c = 0; c < 5; c++) {
            float hd[2], coef;
            double norm;
            be->copy(sq, &cases[c][0], sizeof(double), UT_COPY_H2D);
            ut_grad_step_scalars(dev, sc, sq, cases[c][1], (float)cases[c][2]);
            be->copy(hd, sc, sizeof hd, UT_COPY_D2H);
            bool sk = ut_grad_step_rule(sqrt(cases[c][0]), cases[c][1], (float)cases[c][2], &coef, &norm);
            CHECK((hd[1] != 0) == sk && (sk || hd[0] == coef) && (c < 3) == !sk &&
                      (c != 0 || coef == (float)(1.0 / (2000.0 / 1024.0 + 1e-6)) / 1024.0f) &&
                      (c != 1 || coef == 1.0f) && (c != 2 || coef == 1.0f),
                  "%s case %d: device %g %g, host %g (skip %d)", ut_device_name(dev), c, hd[0], hd[1], coef, sk);
        }
        be->free(sq), be->free(sc);
    }
}

/* Autocast reads the optimizer's 16-bit copies of the parameters
 * (ut_ctx_set_param_copies) instead of rounding them each forward: three
 * bf16 training steps of a small GPT-2 give the same losses and weights to
 * the bit with and without them, on the CPU and on sim, and with them the
 * context keeps no rounded copies of its own. */
static void test_param_copies(void) {
    enum { B = 2, T = 8, STEPS = 3 };
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) x[i] = (i * 7 + 3) % 32, y[i] = (i * 5 + 1) % 32;
    ut_device devs[3];
    int ndev = step_devices(devs);
    for (int d = 0; d < ndev; d++) {
        ut_device dev = devs[d];
        const ut_backend *be = ut_backend_get(dev);
        float loss[2][STEPS];
        float *w[2] = {NULL, NULL};
        size_t round[2] = {0, 0};
        for (int v = 0; v < 2; v++) {
            ut_kv *kv = ut_kv_new();
            ut_kv_set(kv, "n_layer", "2"), ut_kv_set(kv, "n_head", "2"), ut_kv_set(kv, "n_embd", "16");
            ut_kv_set(kv, "vocab_size", "32"), ut_kv_set(kv, "block_size", "8");
            char err[256] = "";
            ut_model *m = ut_model_create_on("gpt2", kv, 7, dev, err, sizeof err);
            ut_kv_free(kv);
            CHECK(m, "%s", err);
            if (!m) return;
            int64_t n = m->params.numel;
            ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = dev, .seed = 1});
            ut_ctx_set_training(ctx, true);
            ut_ctx_set_autocast(ctx, UT_BF16);
            ut_optim_config oc = ut_optim_defaults(UT_OPTIM_ADAMW);
            oc.device = dev;
            ut_optim *o = ut_optim_new(&oc, m->params.flat, m->params.flat_grad, m->params.segs, m->params.n, 0, n);
            void *cp = NULL;
            if (v) {
                cp = be->alloc((size_t)n * 2);
                be->convert(cp, UT_BF16, m->params.flat, UT_F32, n);
                ut_optim_set_copies16(o, cp, UT_BF16);
                ut_ctx_set_param_copies(ctx, m->params.flat, n, cp, UT_BF16);
            }
            for (int k = 0; k < STEPS; k++) {
                ut_ctx_reset(ctx);
                ut_tensor *l = ut_model_loss(m, ctx, ut_model_forward(m, ctx, ut_tensor_from(ctx, UT_I32, 2,
                                                                       (int64_t[]){B, T}, x)),
                                             ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){B, T}, y));
                CHECK(l && ut_backward(ctx, l) == 0 && ut_tensor_get(l, &loss[v][k], sizeof(float)) == 0, "%s",
                      ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
                ut_optim_step_zero(o, 1e-2f);
            }
            round[v] = ut_ctx_autocast_round_bytes(ctx);
            w[v] = malloc((size_t)n * sizeof(float));
            be->copy(w[v], m->params.flat, (size_t)n * sizeof(float), UT_COPY_D2H);
            bool same = !v || (!memcmp(w[0], w[1], (size_t)n * sizeof(float)) &&
                               !memcmp(loss[0], loss[1], sizeof loss[0]));
            CHECK(same, "%s: with the copies, losses %.9g %.9g %.9g against %.9g %.9g %.9g; weights %s",
                  ut_device_name(dev), loss[1][0], loss[1][1], loss[1][2], loss[0][0], loss[0][1], loss[0][2],
                  memcmp(w[0], w[1], (size_t)n * sizeof(float)) ? "differ" : "agree");
            if (cp) be->free(cp);
            ut_optim_free(o);
            ut_ctx_free(ctx);
            ut_model_free(m);
        }
        /* the context's own copies: 2 bytes per parameter element rounded (kept for backward) */
        CHECK(round[1] < round[0] && round[0] - round[1] >= 1000, "%s: %zu bytes of rounded copies with the "
              "optimizer's, %zu without", ut_device_name(dev), round[1], round[0]);
        free(w[0]);
        free(w[1]);
    }
}

/* ---- UT_PROFILE_OPS=gpu and ut_profile_ops_reset ----
 * The profile's mode is read once per process, so each case runs in a fresh
 * one (this program again, told by UT_TEST_PROFILE_CHILD what to do): three
 * linears on sim, the reset (or not), one more; its report at exit must
 * count one forward linear after the reset and four without it. */
static void profile_child(const char *what) {
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = UT_SIM});
    float xv[6] = {1, 2, 3, 4, 5, 6}, wv[6] = {1, 0, 0, 1, 1, 1}, out[4];
    for (int i = 0; i < 4; i++) {
        if (i == 3 && !strcmp(what, "reset")) ut_profile_ops_reset();
        ut_tensor *x = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){2, 3}, xv);
        ut_tensor *w = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){2, 3}, wv);
        ut_tensor *y = ut_linear(ctx, x, w, NULL);
        if (!y || ut_tensor_get(y, out, sizeof out) || out[0] != 1 || out[3] != 15) _exit(3);
        ut_ctx_reset(ctx);
    }
    ut_ctx_free(ctx);
    exit(0); /* the report is written at exit */
}

static long profile_linear_calls(const char *what, char **argv) {
    char path[] = "/tmp/utrain-prof-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        setenv("UT_PROFILE_OPS", "gpu", 1);
        setenv("UT_TEST_PROFILE_CHILD", what, 1);
        execv("/proc/self/exe", argv);
        _exit(4);
    }
    close(fd);
    int st = 0;
    waitpid(pid, &st, 0);
    FILE *f = fopen(path, "r");
    char line[256];
    long calls = -1;
    double sec = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, " linear %lf %ld", &sec, &calls) == 2) break;
    if (f) fclose(f);
    unlink(path);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "profile child (%s): status %#x", what, st);
    return calls;
}

static char **main_argv;
static void test_profile_reset(void) {
    long with = profile_linear_calls("reset", main_argv), without = profile_linear_calls("keep", main_argv);
    CHECK(with == 1, "after ut_profile_ops_reset the report counts %ld forward linears, want 1", with);
    CHECK(without == 4, "without the reset the report counts %ld forward linears, want 4", without);
}


/* Model FLOPs of packed sequences on a device whose memory the host does
 * not read: the attention counts each sequence's pairs from the offsets'
 * upload (src/core/flops.c), as the CPU does from the offsets themselves. */
static double prepared_flops(const char *name, const char *opts_s, ut_device dev, int32_t *x, int ndim) {
    ut_kv *kv = ut_kv_new();
    char opts[256], *save = NULL, err[512] = "";
    snprintf(opts, sizeof opts, "%s", opts_s);
    for (char *kvs = strtok_r(opts, ",", &save); kvs; kvs = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kvs, '=');
        *eq = 0;
        ut_kv_set(kv, kvs, eq + 1);
    }
    ut_model *m = ut_model_create_on(name, kv, 3, dev, err, sizeof err);
    ut_kv_free(kv);
    CHECK(m, "%s: %s", name, err);
    if (!m) return -1;
    ut_host_array hx = {.dtype = UT_I32, .ndim = ndim, .ne = {2, 3, 6}, .host = x};
    ut_inputs in = {.dev = dev};
    double f = -1;
    if (m->prepare(m, &hx, &in, err, sizeof err) == 0) {
        ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.device = dev, .seed = 5});
        ut_tensor *a = ut_model_forward_inputs(m, ctx, &in);
        CHECK(a && in.layout == 0, "%s: packed forward (layout %d): %s", name, in.layout,
              ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
        f = ut_ctx_flops(ctx);
        ut_ctx_free(ctx);
    }
    ut_inputs_free(&in);
    ut_model_free(m);
    return f;
}

static void test_packed_flops(void) {
    /* rows of 6 and 2 real tokens (right-padded: the packed layout) */
    int32_t planes[2 * 3 * 6] = {5, 7, 9, 4, 4, 2, /**/ 0, 0, 0, 0, 0, 0, /**/ 1, 1, 1, 1, 1, 1,
                                 6, 8, 3, 2, 1, 1, /**/ 0, 0, 0, 0, 0, 0, /**/ 1, 1, 0, 0, 0, 0};
    const char *bert = "vocab_size=16,hidden_size=8,num_hidden_layers=1,num_attention_heads=2,intermediate_size=16,"
                       "max_position_embeddings=8,type_vocab_size=2";
    double cpu = prepared_flops("bert", bert, UT_CPU, planes, 3), sim = prepared_flops("bert", bert, UT_SIM, planes, 3);
    /* 8 rows through q, k, v, the output dense (8 x 8 each) and the MLP (8 x 16 twice); the pooler and
     * classifier on 2 rows; attention over 36 + 4 pairs, 8 wide */
    double want = 2.0 * 8 * 8 * (4 * 8 + 2 * 16) + 2.0 * 2 * 8 * (8 + 2) + 4.0 * 40 * 8;
    CHECK(cpu == want, "bert packed on the CPU: %.0f FLOPs, expected %.0f", cpu, want);
    CHECK(sim == cpu, "bert packed on sim: %.0f FLOPs, the CPU's %.0f", sim, cpu);
    /* BART (encoder, causal decoder, cross-attention) and GPT-2's causal classification */
    const char *other[2][2] = {
        {"bart", "vocab_size=16,d_model=8,encoder_layers=1,decoder_layers=1,encoder_attention_heads=2,"
                 "decoder_attention_heads=2,encoder_ffn_dim=16,decoder_ffn_dim=16,max_position_embeddings=10"},
        {"gpt2", "n_layer=1,n_head=2,n_embd=8,vocab_size=16,block_size=8,task=sequence_classification,"
                 "pad_token_id=1"}};
    planes[5 * 6 + 2] = planes[5 * 6 + 3] = 1; /* rows of 6 and 4 (these models pad the other batch) */
    for (int i = 0; i < 2; i++) {
        cpu = prepared_flops(other[i][0], other[i][1], UT_CPU, planes, 3);
        sim = prepared_flops(other[i][0], other[i][1], UT_SIM, planes, 3);
        CHECK(cpu > 0 && sim == cpu, "%s packed: %.0f FLOPs on sim, the CPU's %.0f", other[i][0], sim, cpu);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    const char *child = getenv("UT_TEST_PROFILE_CHILD");
    if (child) profile_child(child);
    main_argv = argv;
    RUN(test_profile_reset);
    RUN(test_packed_flops);
    RUN(test_registered);
    RUN(test_host_read_faults);
    RUN(test_async_copies);
    RUN(test_loader_fence);
    RUN(test_prepared_forward);
    RUN(test_two_streams);
    RUN(test_late_data_error);
#define RUNF(f) run_family(#f, gc_rows_##f, gc_nrows_##f);
    GC_FAMILIES(RUNF)
    RUN(test_autocast_rows);
    RUN(test_fresh_grads);
    RUN(test_model_on_sim);
    RUN(test_scaled_step);
    RUN(test_param_copies);
    return TEST_SUMMARY();
}
