/* cuDNN's fused flash attention for causal self-attention (cudnn_attn.h),
 * through the cuDNN frontend's SDPA graphs (NVIDIA's header-only C++ graph
 * API over cuDNN's backend; scripts/fetch-cudnn-frontend.sh puts its headers
 * in .deps/, and the Makefile defines UT_WITH_CUDNN_FE when they are there).
 *
 * The frontend is built with dynamic loading: it calls cuDNN through the
 * library cudnn.c opened (cudnn_frontend::cudnn_dlhandle), so a machine
 * without cuDNN still runs, with utrain's own attention kernels.
 *
 * q, k and v are read where they lie in packed qkv (B, T, 3C): head h of q
 * is the columns [h hs, (h + 1) hs) of each row, so as a (B, NH, T, hs)
 * tensor its strides are (3 T C, hs, 3C, 1), k and v the same from columns
 * C and 2C. out and dout (B, T, C) are (B, NH, T, hs) with strides (T C,
 * hs, C, 1); the backward writes dqkv in qkv's layout. The scores are scaled
 * by 1 / sqrt(hs), causal (a query sees keys at or before it), in float32;
 * the statistics (B, NH, T, 1) are float32. Backward is cuDNN's
 * deterministic algorithm (no atomics in dQ's sums): two runs give the same
 * bits, as utrain's own kernels do.
 *
 * Graphs are built once per (shape, dtype, pass) and kept (NKEEP of them,
 * the oldest replaced). A pass cuDNN refuses is kept too, with its reason,
 * so the glue asks once. Everything the frontend throws is caught here: no
 * C++ exception crosses into C. */
#include "cudnn_attn.h"

#include <stdio.h>

#ifndef UT_WITH_CUDNN_FE

extern "C" int ut_cuda_cudnn_attn_plan(const ut_cudnn_attn *s, int pass, size_t *ws, char *err, size_t n) {
    (void)s, (void)pass;
    *ws = 0;
#ifdef UT_CUDA_EMU
    snprintf(err, n, "the CUDA emulator's build has no cuDNN fused attention (cuDNN's graph API is not emulated)");
#else
    snprintf(err, n, "this build has no cuDNN frontend (its headers were not found when it was built: run "
             "scripts/fetch-cudnn-frontend.sh, which `make` runs through scripts/install-deps.sh, and rebuild)");
#endif
    return -1;
}

extern "C" bool ut_cuda_cudnn_attn_built(void) { return false; }

extern "C" int ut_cuda_cudnn_attn_validate(const ut_cudnn_attn *s, int pass, int sm, char *err, size_t n) {
    size_t w;
    (void)sm;
    return ut_cuda_cudnn_attn_plan(s, pass, &w, err, n);
}

extern "C" int ut_cuda_cudnn_attn_fwd(const ut_cudnn_attn *s, const void *qkv, void *out, float *stats, void *ws,
                                      char *err, size_t n) {
    size_t w;
    (void)qkv, (void)out, (void)stats, (void)ws;
    return ut_cuda_cudnn_attn_plan(s, 0, &w, err, n);
}

extern "C" int ut_cuda_cudnn_attn_bwd(const ut_cudnn_attn *s, const void *qkv, const void *out, const void *dout,
                                      const float *stats, void *dqkv, void *ws, char *err, size_t n) {
    size_t w;
    (void)qkv, (void)out, (void)dout, (void)stats, (void)dqkv, (void)ws;
    return ut_cuda_cudnn_attn_plan(s, 2, &w, err, n);
}

#else

#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

/* the library the frontend's calls go to: the one cudnn.c opened */
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

namespace {

namespace fe = cudnn_frontend;

/* the tensors' ids in a graph's variant pack */
enum : int64_t { Q = 1, K, V, O, STATS, DO, DQ, DK, DV };

/* graphs kept (the default's 8 shapes, 3 passes each, and some) */
constexpr int NKEEP = 32;

struct Key {
    int64_t B, T, C, NH;
    int dt, pass;
    bool operator==(const Key &o) const {
        return B == o.B && T == o.T && C == o.C && NH == o.NH && dt == o.dt && pass == o.pass;
    }
};

struct Kept {
    bool used = false;
    Key key{};
    std::shared_ptr<fe::graph::Graph> graph; /* null: cuDNN refused, why says why */
    int64_t ws = 0;
    std::string why;
};

std::mutex g_mu;
Kept g_kept[NKEEP];
int g_next;
cudnnHandle_t g_handle;

/* a (B, NH, T, hs) view of head columns in rows of width ld */
std::shared_ptr<fe::graph::Tensor_attributes> heads(fe::graph::Graph &g, const Key &k, int64_t uid, const char *name,
                                                    int64_t ld) {
    int64_t hs = k.C / k.NH;
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({k.B, k.NH, k.T, hs})
                        .set_stride({k.T * ld, hs, ld, 1}));
}

void set_heads(const std::shared_ptr<fe::graph::Tensor_attributes> &t, const Key &k, int64_t uid, int64_t ld) {
    int64_t hs = k.C / k.NH;
    t->set_output(true).set_uid(uid).set_dim({k.B, k.NH, k.T, hs}).set_stride({k.T * ld, hs, ld, 1});
}

std::shared_ptr<fe::graph::Tensor_attributes> stats_of(fe::graph::Graph &g, const Key &k) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name("stats")
                        .set_uid(STATS)
                        .set_dim({k.B, k.NH, k.T, 1})
                        .set_stride({k.NH * k.T, k.T, 1, 1})
                        .set_data_type(fe::DataType_t::FLOAT));
}

/* the graph of pass k.pass, described (not built), for a GPU of compute
 * capability sm (0: the current device's); may throw. (A node takes the
 * graph's settings when it is made, so sm is set first.) */
std::shared_ptr<fe::graph::Graph> describe(const Key &k, int sm = 0) {
    auto g = std::make_shared<fe::graph::Graph>();
    if (sm) g->set_sm_version(sm);
    g->set_io_data_type(k.dt == 1 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    float scale = 1.0f / std::sqrt((float)(k.C / k.NH));
    int64_t ld = 3 * k.C;
    auto q = heads(*g, k, Q, "q", ld), kk = heads(*g, k, K, "k", ld), v = heads(*g, k, V, "v", ld);
    if (k.pass != UT_CUDNN_ATTN_BWD) {
        auto opt = fe::graph::SDPA_attributes()
                       .set_name("attention")
                       .set_generate_stats(k.pass == UT_CUDNN_ATTN_TRAIN)
                       .set_attn_scale(scale)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0);
        auto [o, stats] = g->sdpa(q, kk, v, opt);
        set_heads(o, k, O, k.C);
        if (stats)
            stats->set_output(true)
                .set_data_type(fe::DataType_t::FLOAT)
                .set_uid(STATS)
                .set_dim({k.B, k.NH, k.T, 1})
                .set_stride({k.NH * k.T, k.T, 1, 1});
    } else {
        auto o = heads(*g, k, O, "o", k.C), dout = heads(*g, k, DO, "dout", k.C);
        auto opt = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_attn_scale(scale)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0)
                       .set_deterministic_algorithm(true);
        auto [dq, dk, dv] = g->sdpa_backward(q, kk, v, o, dout, stats_of(*g, k), opt);
        set_heads(dq, k, DQ, ld);
        set_heads(dk, k, DK, ld);
        set_heads(dv, k, DV, ld);
    }
    return g;
}

/* the graph of pass k.pass built for the current device; null with why
 * when cuDNN refuses it; may throw */
std::shared_ptr<fe::graph::Graph> build(const Key &k, int64_t &ws, std::string &why) {
    auto g = describe(k);
    fe::error_t e = g->build(g_handle, {fe::HeurMode_t::A});
    if (e.is_good()) e = g->get_workspace_size(ws);
    if (e.is_bad()) {
        why = e.get_message();
        return nullptr;
    }
    return g;
}

/* the kept entry of k, built when new; under g_mu */
Kept &entry(const Key &k) {
    for (Kept &e : g_kept)
        if (e.used && e.key == k) return e;
    Kept &e = g_kept[g_next];
    g_next = (g_next + 1) % NKEEP;
    e = Kept{};
    e.used = true;
    e.key = k;
    try {
        e.graph = build(k, e.ws, e.why);
    } catch (const std::exception &x) {
        e.graph = nullptr;
        e.why = x.what();
    } catch (...) {
        e.graph = nullptr;
        e.why = "the cuDNN frontend failed (an exception of unknown type)";
    }
    return e;
}

const char *pass_name(int pass) {
    return pass == UT_CUDNN_ATTN_BWD ? "backward" : pass == UT_CUDNN_ATTN_TRAIN ? "forward" : "forward (no grad)";
}

/* whether s can be described at all; false with why in err */
bool shape_ok(const ut_cudnn_attn *s, char *err, size_t n) {
    if (s->dt != 1 && s->dt != 2) {
        snprintf(err, n, "cuDNN's fused attention takes bf16 or fp16 tensors only");
        return false;
    }
    if (s->NH <= 0 || s->C <= 0 || s->C % s->NH || s->B <= 0 || s->T <= 0) {
        snprintf(err, n, "cuDNN attention: bad shape (B %lld, T %lld, C %lld, %lld heads)", (long long)s->B,
                 (long long)s->T, (long long)s->C, (long long)s->NH);
        return false;
    }
    return true;
}

/* the kept graph of (s, pass) under g_mu, null with why in err */
Kept *ready(const ut_cudnn_attn *s, int pass, char *err, size_t n) {
    if (!shape_ok(s, err, n)) return nullptr;
    if (!g_handle) {
        void *dl = nullptr, *h = nullptr;
        if (ut_cuda_cudnn_lib(&dl, &h, err, n)) return nullptr;
        fe::cudnn_dlhandle = dl;
        g_handle = (cudnnHandle_t)h;
    }
    Kept &e = entry(Key{s->B, s->T, s->C, s->NH, s->dt, pass});
    if (!e.graph) {
        snprintf(err, n, "cuDNN refused fused attention's %s for B %lld, T %lld, %lld heads of %lld, %s: %s",
                 pass_name(pass), (long long)s->B, (long long)s->T, (long long)s->NH, (long long)(s->C / s->NH),
                 s->dt == 1 ? "bf16" : "fp16", e.why.c_str());
        return nullptr;
    }
    return &e;
}

/* runs e's graph on pointers p; 0, or -1 with why */
int run(Kept *e, std::unordered_map<int64_t, void *> &p, void *ws, char *err, size_t n) {
    try {
        fe::error_t r = e->graph->execute(g_handle, p, ws);
        if (r.is_good()) return 0;
        snprintf(err, n, "cuDNN attention's %s failed: %s", pass_name(e->key.pass), r.get_message().c_str());
    } catch (const std::exception &x) {
        snprintf(err, n, "cuDNN attention's %s failed: %s", pass_name(e->key.pass), x.what());
    } catch (...) {
        snprintf(err, n, "cuDNN attention's %s failed (an exception of unknown type)", pass_name(e->key.pass));
    }
    return -1;
}

/* element e of a 16-bit buffer */
void *at(const void *p, int64_t e) { return (char *)p + 2 * e; }

} // namespace

extern "C" bool ut_cuda_cudnn_attn_built(void) { return true; }

extern "C" int ut_cuda_cudnn_attn_validate(const ut_cudnn_attn *s, int pass, int sm, char *err, size_t n) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!shape_ok(s, err, n)) return -1;
    if (!fe::cudnn_dlhandle) {
        void *dl = nullptr;
        if (ut_cuda_cudnn_lib(&dl, nullptr, err, n)) return -1;
        fe::cudnn_dlhandle = dl;
    }
    try {
        auto g = describe(Key{s->B, s->T, s->C, s->NH, s->dt, pass}, sm);
        fe::error_t e = g->validate();
        if (e.is_good()) return 0;
        snprintf(err, n, "%s", e.get_message().c_str());
    } catch (const std::exception &x) {
        snprintf(err, n, "%s", x.what());
    } catch (...) {
        snprintf(err, n, "the cuDNN frontend failed (an exception of unknown type)");
    }
    return -1;
}

extern "C" int ut_cuda_cudnn_attn_plan(const ut_cudnn_attn *s, int pass, size_t *ws, char *err, size_t n) {
    std::lock_guard<std::mutex> lock(g_mu);
    *ws = 0;
    Kept *e = ready(s, pass, err, n);
    if (!e) return -1;
    *ws = (size_t)e->ws;
    return 0;
}

extern "C" int ut_cuda_cudnn_attn_fwd(const ut_cudnn_attn *s, const void *qkv, void *out, float *stats, void *ws,
                                      char *err, size_t n) {
    std::lock_guard<std::mutex> lock(g_mu);
    Kept *e = ready(s, stats ? UT_CUDNN_ATTN_TRAIN : UT_CUDNN_ATTN_INFER, err, n);
    if (!e) return -1;
    std::unordered_map<int64_t, void *> p = {
        {Q, at(qkv, 0)}, {K, at(qkv, s->C)}, {V, at(qkv, 2 * s->C)}, {O, out}};
    if (stats) p[STATS] = stats;
    return run(e, p, ws, err, n);
}

extern "C" int ut_cuda_cudnn_attn_bwd(const ut_cudnn_attn *s, const void *qkv, const void *out, const void *dout,
                                      const float *stats, void *dqkv, void *ws, char *err, size_t n) {
    std::lock_guard<std::mutex> lock(g_mu);
    Kept *e = ready(s, UT_CUDNN_ATTN_BWD, err, n);
    if (!e) return -1;
    std::unordered_map<int64_t, void *> p = {
        {Q, at(qkv, 0)},         {K, at(qkv, s->C)},         {V, at(qkv, 2 * s->C)},
        {O, (void *)out},        {DO, (void *)dout},         {STATS, (void *)stats},
        {DQ, at(dqkv, 0)},       {DK, at(dqkv, s->C)},       {DV, at(dqkv, 2 * s->C)}};
    return run(e, p, ws, err, n);
}

#endif
