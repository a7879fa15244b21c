/* Hugging Face GPT-2 parity: utrain's gpt2 loaded from a model directory as
 * save_pretrained writes it (tests/parity/fixtures/hf_gpt2_tiny, made by
 * tests/parity/make_hf_gpt2_fixtures.py with transformers' own
 * GPT2LMHeadModel: "transformer." names, Conv1D weights (in, out), tied head)
 * gives transformers' logits, loss and every parameter gradient. The square
 * c_proj weights are not symmetric, so loading one untransposed would show
 * here by value; the bare GPT2Model directory loads the same; bad
 * directories are refused naming the file and tensor; generation from
 * prompts gives transformers' tokens. */
#include <string.h>

#include "proc.h"
#include "test.h"
#include "hf_parity.h"
#include "utrain/utrain.h"

#define FIX "tests/parity/fixtures/"
#define TOL 1e-4 /* max-abs error over max-abs value */

static ut_model *load(const char *dir, const char *key, const char *val, char *err, size_t n) {
    return hfp_load("gpt2", dir, (const char *const[]){key, val, NULL}, err, n);
}

static void check_grads(const ut_model *m, const ut_st_file *f) {
    int checked = 0;
    for (int p = 0; p < m->params.n; p++) {
        char name[300];
        snprintf(name, sizeof name, "grad.%s", m->params.names[p]);
        const ut_st_tensor *g = ut_st_get(f, name);
        CHECK(g && ut_st_numel(g) == ut_nelem(m->params.t[p]), "%s: no such gradient", name);
        if (!g) continue;
        double e = pt_rel_err(m->params.flat_grad + m->params.segs[p].offset, g->data, ut_st_numel(g));
        CHECK(e < TOL, "%s: relative error %.3g", name, e);
        checked++;
    }
    CHECK(checked == 28 && checked == m->params.n, "%d gradients checked of %d", checked, m->params.n);
}

static void parity(const char *dir) {
    char err[1024];
    ut_model *m = load(dir, NULL, NULL, err, sizeof err);
    CHECK(m, "%s", err);
    ut_st_file *f = ut_st_open(FIX "hf_gpt2_tiny_batch.safetensors", err, sizeof err);
    CHECK(f, "%s", err);
    if (!m || !f) goto done;
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    ut_tensor *logits = ut_model_forward(m, ctx, pt_stored(ctx, ut_st_get(f, "input")));
    ut_tensor *loss = ut_model_loss(m, ctx, logits, pt_stored(ctx, ut_st_get(f, "targets")));
    CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
    if (loss) {
        const ut_st_tensor *rl = ut_st_get(f, "logits");
        float ref = ((const float *)ut_st_get(f, "loss")->data)[0];
        CHECK(ut_nelem(logits) == ut_st_numel(rl) && logits->ndim == 3 && logits->ne[2] == 100, "logits shape");
        double e = pt_rel_err(ut_f32(logits), rl->data, ut_st_numel(rl));
        CHECK(e < TOL, "%s: logits: relative error %.3g", dir, e);
        CHECK_NEAR(ut_f32(loss)[0], ref, 1e-4 * ref);
        check_grads(m, f);
    }
    ut_ctx_free(ctx);
done:
    ut_st_close(f);
    ut_model_free(m);
}

static void test_lm_head_model(void) { parity(FIX "hf_gpt2_tiny"); }
static void test_bare_model(void) { parity(FIX "hf_gpt2_tiny_base"); }

/* The square c_proj weights are stored (in, out): the model holds their
 * transpose, and they are not symmetric (so an untransposed load differs). */
static void test_conv1d_transposed(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_gpt2_tiny", NULL, NULL, err, sizeof err);
    ut_st_file *f = ut_st_open(FIX "hf_gpt2_tiny/model.safetensors", err, sizeof err);
    CHECK(m && f, "%s", err);
    if (m && f) {
        const ut_st_tensor *s = ut_st_get(f, "transformer.h.1.attn.c_proj.weight");
        ut_tensor *p = ut_model_param(m, "h.1.attn.c_proj.weight");
        CHECK(s && p && s->shape[0] == 32 && s->shape[1] == 32, "c_proj present and square");
        double asym = 0, off = 0;
        for (int i = 0; s && p && i < 32; i++)
            for (int j = 0; j < 32; j++) {
                const float *w = s->data;
                off = fmax(off, fabs(ut_f32(p)[i * 32 + j] - w[j * 32 + i]));
                asym = fmax(asym, fabs(w[i * 32 + j] - w[j * 32 + i]));
            }
        CHECK(off == 0, "c_proj holds the file's transpose (max difference %g)", off);
        CHECK(asym > 1e-2, "c_proj is not symmetric (%g)", asym);
    }
    ut_st_close(f);
    ut_model_free(m);
}

static void refused(const char *key, const char *val, const char *dir, const char *want) {
    char err[1024] = "";
    ut_model *m = load(dir, key, val, err, sizeof err);
    CHECK(!m && strstr(err, want), "%s=%s: got '%s', want '%s'", key ? key : "-", val ? val : "-", err, want);
    ut_model_free(m);
}

static void test_refusals(void) {
    refused("n_embd", "64", FIX "hf_gpt2_tiny", "model.n_embd: set by model.pretrained");
    refused("task", "seq2seq_lm", FIX "hf_gpt2_tiny", "not available for gpt2; use causal_lm or sequence_classification");
    refused(NULL, NULL, FIX "hf_bert_tiny", "has model_type 'bert'; model gpt2 reads model_type gpt2");
    char dir[256], path[600];
    UT_ASSERT(tp_make_tmpdir(dir, sizeof dir, "hfgpt2bad"));
    /* c_attn in the model's (out, in) shape, not Conv1D's (in, out) */
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cf = fopen(path, "w");
    UT_ASSERT(cf);
    fputs("{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_head\": 2, \"n_embd\": 4, \"vocab_size\": 5, "
          "\"n_positions\": 8}", cf);
    fclose(cf);
    static const float zeros[64];
    const char *names[] = {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias",
                           "h.0.attn.c_attn.weight"};
    ut_st_tensor t[5] = {{UT_ST_F32, 2, {5, 4}, zeros, 80}, {UT_ST_F32, 2, {8, 4}, zeros, 128},
                         {UT_ST_F32, 1, {4}, zeros, 16},    {UT_ST_F32, 1, {4}, zeros, 16},
                         {UT_ST_F32, 2, {12, 4}, zeros, 192}};
    char err[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(ut_st_save(path, 5, names, t, NULL, err, sizeof err) == 0, "%s", err);
    refused(NULL, NULL, dir, "tensor 'h.0.attn.c_attn.weight' has shape (12, 4), the model needs (4, 12) "
                             "(Conv1D layout: in, out)");
    snprintf(path, sizeof path, "%s/config.json", dir);
    /* configurations this model cannot follow */
    cf = fopen(path, "w");
    UT_ASSERT(cf);
    fputs("{\"model_type\": \"gpt2\", \"n_embd\": 4, \"n_head\": 2, \"activation_function\": \"relu\"}", cf);
    fclose(cf);
    refused(NULL, NULL, dir, "activation_function 'relu' is not supported");
    cf = fopen(path, "w");
    UT_ASSERT(cf);
    fputs("{\"model_type\": \"gpt2\", \"n_embd\": 4, \"n_head\": 2, \"tie_word_embeddings\": false}", cf);
    fclose(cf);
    refused(NULL, NULL, dir, "tie_word_embeddings false is not supported");
    /* sizes the model refuses: the message says they came from the directory */
    cf = fopen(path, "w");
    UT_ASSERT(cf);
    fputs("{\"model_type\": \"gpt2\", \"n_embd\": 100, \"n_head\": 3, \"n_layer\": 1}", cf);
    fclose(cf);
    char want[768];
    snprintf(want, sizeof want, "n_embd 100 is not divisible by n_head 3 (model.pretrained: %s/config.json, the run's "
             "model options over it)", dir);
    refused(NULL, NULL, dir, want);
    tp_finish(0, dir);
}

/* Generation from prompts of 7, 3 and 1 tokens (make_hf_gpt2_gen_fixtures.py):
 * generate's tokens (transformers with the prompts left-padded and masked)
 * for greedy decoding and beam search, with and without the cache */
static const hfp_gen_case gen_cases[] = {
    {"greedy", 1, UT_EARLY_HEURISTIC, 1.0, 0, 0, -1, -1, 12},
    {"beam4", 4, UT_EARLY_HEURISTIC, 1.0, 0, 0, -1, -1, 12},
    {"beam3_early_lp2_ngram2_min4", 3, UT_EARLY_TRUE, 2.0, 2, 4, -1, -1, 12},
    {"greedy_ngram3_min3", 1, UT_EARLY_HEURISTIC, 1.0, 3, 3, -1, -1, 12},
};

static void test_generate(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_gpt2_tiny", NULL, NULL, err, sizeof err);
    ut_st_file *f = ut_st_open(FIX "hf_gpt2_tiny_gen.safetensors", err, sizeof err);
    CHECK(m && f, "%s", err);
    for (int no_cache = 0; m && f && no_cache < 2; no_cache++)
        hfp_check_generation(m, f, gen_cases, (int)(sizeof gen_cases / sizeof gen_cases[0]), no_cache, -1);
    /* an empty prompt and more tokens than positions are refused */
    int32_t src[2] = {5, 6}, mask[2] = {0, 0}, out[64];
    int64_t lens[1];
    ut_gen_opts o;
    ut_gen_opts_init(&o);
    CHECK(m && ut_generate(m, &o, src, mask, 1, 2, out, lens, err, sizeof err) == -1 && strstr(err, "empty"), "%s",
          err);
    mask[0] = 1, o.max_new_tokens = 64;
    CHECK(m && ut_generate(m, &o, src, mask, 1, 2, out, lens, err, sizeof err) == -1 && strstr(err, "block_size"),
          "%s", err);
    ut_st_close(f);
    ut_model_free(m);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    RUN(test_generate);
    RUN(test_lm_head_model);
    RUN(test_bare_model);
    RUN(test_conv1d_transposed);
    RUN(test_refusals);
    return TEST_SUMMARY();
}
