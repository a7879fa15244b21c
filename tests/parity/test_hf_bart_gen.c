/* Hugging Face BART sequence to sequence: utrain's bart with model.task
 * seq2seq, loaded from a BartForConditionalGeneration directory
 * (tests/parity/fixtures/hf_bart_gen_tiny, made by
 * tests/parity/make_hf_bart_gen_fixtures.py), gives transformers' logits,
 * loss and every parameter gradient on a batch of padded sources and
 * targets, and 10 AdamW steps; ut_generate gives the tokens transformers'
 * generate gives for greedy decoding and beam search under its options
 * (beams, early stopping, length penalty, no-repeat n-grams, minimum new
 * tokens, forced first and last tokens), with and without the decoder's
 * key/value cache. */
#include <string.h>

#include "proc.h"
#include "test.h"
#include "hf_parity.h"

#define FIX "tests/parity/fixtures/"
#define DIR FIX "hf_bart_gen_tiny"
#define BATCH FIX "hf_bart_gen_batch.safetensors"

static ut_model *load(char *err, size_t n) {
    return hfp_load("bart", DIR, (const char *const[]){"task", "seq2seq", NULL}, err, n);
}

static void test_logits_loss_grads(void) {
    char err[1024];
    ut_model *m = load(err, sizeof err);
    CHECK(m, "%s", err);
    ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
    CHECK(f, "%s", err);
    if (m && f) {
        int checked = hfp_check_batch(m, f, "k_proj.bias");
        CHECK(checked == 91 && checked == m->params.n, "%d gradients checked of %d", checked, m->params.n);
    }
    ut_st_close(f);
    ut_model_free(m);
}

static void test_adamw(void) {
    char err[1024];
    ut_model *m = load(err, sizeof err);
    ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
    CHECK(m && f, "%s", err);
    if (m && f) hfp_check_adamw(m, f, "k_proj.bias");
    ut_st_close(f);
    ut_model_free(m);
}

/* the cases of make_hf_bart_gen_fixtures.py */
static const hfp_gen_case cases[] = {
    {"greedy", 1, UT_EARLY_HEURISTIC, 1.0, 0, 0, -1, -1, 12},
    {"beam4", 4, UT_EARLY_HEURISTIC, 1.0, 0, 0, -1, -1, 12},
    {"beam3_early_lp2_ngram2_min4", 3, UT_EARLY_TRUE, 2.0, 2, 4, -1, -1, 12},
    {"beam4_never_lp05", 4, UT_EARLY_NEVER, 0.5, 0, 0, -1, -1, 12},
    {"greedy_forced_ngram3_min3", 1, UT_EARLY_HEURISTIC, 1.0, 3, 3, 0, 2, 12},
    {"beam2_forced", 2, UT_EARLY_HEURISTIC, 1.0, 0, 0, 0, -1, 8},
};

static void check_generation(bool no_cache) {
    char err[1024];
    ut_model *m = load(err, sizeof err);
    ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
    CHECK(m && f, "%s", err);
    if (m && f) hfp_check_generation(m, f, cases, (int)(sizeof cases / sizeof cases[0]), no_cache, 2);
    ut_st_close(f);
    ut_model_free(m);
}

static void test_generate_cached(void) { check_generation(false); }
static void test_generate_uncached(void) { check_generation(true); }

/* bad options and a model without a decoder are refused with a message */
static void test_refusals(void) {
    char err[1024];
    ut_model *m = load(err, sizeof err);
    ut_model *cls = hfp_load("bart", FIX "hf_bart_tiny", NULL, err, sizeof err);
    CHECK(m && cls, "%s", err);
    int32_t src[3] = {0, 70, 2}, mask[3] = {1, 1, 1}, out[40];
    int64_t lens[1];
    ut_gen_opts o;
    ut_gen_opts_init(&o);
    if (cls) {
        CHECK(ut_generate(cls, &o, src, mask, 1, 3, out, lens, err, sizeof err) == -1 &&
                  strstr(err, "generates no text"), "%s", err);
    }
    if (m) {
        o.num_beams = 2, o.num_return_sequences = 3; /* beam search returns at most its beams */
        CHECK(ut_generate(m, &o, src, mask, 1, 3, out, lens, err, sizeof err) == -1 &&
                  strstr(err, "num_return_sequences 3 is more than num_beams 2"),
              "%s", err);
        ut_gen_opts_init(&o);
        o.num_return_sequences = 2; /* greedy decoding gives one text */
        CHECK(ut_generate(m, &o, src, mask, 1, 3, out, lens, err, sizeof err) == -1 &&
                  strstr(err, "greedy decoding gives one text per source"),
              "%s", err);
        ut_gen_opts_init(&o);
        o.max_new_tokens = 40; /* 41 decoder positions > max_position_embeddings 32 */
        CHECK(ut_generate(m, &o, src, mask, 1, 3, out, lens, err, sizeof err) == -1 &&
                  strstr(err, "max_position_embeddings"), "%s", err);
        ut_gen_opts_init(&o);
        o.forced_bos = 538;
        CHECK(ut_generate(m, &o, src, mask, 1, 3, out, lens, err, sizeof err) == -1 && strstr(err, "538"), "%s",
              err);
        /* sampling: seeded, so the same seed gives the same tokens */
        ut_gen_opts_init(&o);
        o.do_sample = true, o.seed = 7, o.top_k = 5, o.top_p = 0.9, o.temperature = 0.7;
        int32_t again[20];
        int64_t l2[1];
        CHECK(ut_generate(m, &o, src, mask, 1, 3, out, lens, err, sizeof err) == 0 &&
                  ut_generate(m, &o, src, mask, 1, 3, again, l2, err, sizeof err) == 0 &&
                  !memcmp(out, again, sizeof again) && lens[0] == l2[0],
              "sampling with one seed differs: %s", err);
    }
    ut_model_free(m);
    ut_model_free(cls);
}

int main(void) {
    RUN(test_logits_loss_grads);
    RUN(test_adamw);
    RUN(test_generate_cached);
    RUN(test_generate_uncached);
    RUN(test_refusals);
    return TEST_SUMMARY();
}
