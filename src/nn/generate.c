/* Text generation over a model's decoder (ut_decoder_ops): greedy decoding,
 * beam search, sampling and beam sampling as transformers' generate does
 * them, several texts per source (num_return_sequences), with its
 * logits processors (minimum new tokens, no-repeat n-grams, forced first and
 * last tokens) and, for beam search, its scoring, candidate selection and
 * stopping rules (float32 arithmetic in the same order, so the same model
 * picks the same tokens). The decoder runs on the model's device; the
 * search itself is host code over each step's logits. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/nn.h"

void ut_gen_opts_init(ut_gen_opts *o) {
    *o = (ut_gen_opts){.max_new_tokens = 20, .num_beams = 1, .length_penalty = 1.0, .temperature = 1.0,
                       .top_p = 1.0, .top_k = 50, .forced_bos = -2, .forced_eos = -1, .num_return_sequences = 1};
}

/* ---- the logits processors, on one row's scores (V) ---- */
typedef struct {
    const ut_gen_opts *o;
    ut_decoder_tokens tok;
    int64_t P;        /* the decoder's prompt: the start token (1), or a decoder-only model's prompt */
    int64_t max_len;  /* the decoder's tokens at most, the prompt included */
    const int32_t *prompt; /* (rows, P) */
} procs;

/* tokens that would repeat an n-gram of seq (len tokens) get -inf */
static void ban_ngrams(const procs *p, const int32_t *seq, int64_t len, float *s) {
    int64_t ng = p->o->no_repeat_ngram_size;
    if (ng <= 0 || len + 1 < ng) return;
    const int32_t *tail = seq + len - (ng - 1); /* the last ng - 1 tokens */
    for (int64_t i = 0; i + ng <= len; i++)
        if (!memcmp(seq + i, tail, (size_t)(ng - 1) * sizeof *seq)) s[seq[i + ng - 1]] = -INFINITY;
}

static void force(float *s, int64_t V, int64_t id) {
    for (int64_t v = 0; v < V; v++) s[v] = -INFINITY;
    s[id] = 0.0f;
}

/* seq: the row's len tokens so far (the prompt first) */
static void process(const procs *p, const int32_t *seq, int64_t len, float *s) {
    int64_t V = p->tok.vocab;
    ban_ngrams(p, seq, len, s);
    if (len - p->P < p->o->min_new_tokens && p->tok.eos >= 0) s[p->tok.eos] = -INFINITY;
    if (len == p->P && p->tok.forced_bos >= 0) force(s, V, p->tok.forced_bos);
    if (len == p->max_len - 1 && p->o->forced_eos >= 0) force(s, V, p->o->forced_eos);
}

static void log_softmax(float *s, int64_t V) {
    float mx = -INFINITY;
    for (int64_t v = 0; v < V; v++) mx = s[v] > mx ? s[v] : mx;
    float sum = 0.0f;
    for (int64_t v = 0; v < V; v++) sum += expf(s[v] - mx);
    float lse = logf(sum);
    for (int64_t v = 0; v < V; v++) s[v] = s[v] - mx - lse;
}

static int64_t argmax(const float *s, int64_t V) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (s[v] > s[best]) best = v;
    return best;
}

/* ---- sampling: temperature, top-k, top-p, then a draw ---- */
static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The warpers on one row's scores: temperature, top-k, then top-p; leaves
 * log-probabilities (-inf for the tokens cut). */
static void warp(const ut_gen_opts *o, float *s, int64_t V, float *tmp) {
    if (o->temperature != 1.0)
        for (int64_t v = 0; v < V; v++) s[v] = (float)(s[v] / o->temperature);
    if (o->top_k > 0 && o->top_k < V) { /* keep the scores at least the k-th largest */
        memcpy(tmp, s, (size_t)V * sizeof *tmp);
        qsort(tmp, (size_t)V, sizeof *tmp, cmp_desc);
        float kth = tmp[o->top_k - 1];
        for (int64_t v = 0; v < V; v++)
            if (s[v] < kth) s[v] = -INFINITY;
    }
    log_softmax(s, V); /* now log-probabilities */
    if (o->top_p < 1.0) { /* the smallest set whose probability reaches top_p (at least one token) */
        for (int64_t v = 0; v < V; v++) tmp[v] = expf(s[v]);
        qsort(tmp, (size_t)V, sizeof *tmp, cmp_desc);
        double cum = 0;
        float cut = tmp[0];
        for (int64_t i = 0; i < V; i++) {
            cut = tmp[i];
            cum += tmp[i];
            if (cum >= o->top_p) break;
        }
        for (int64_t v = 0; v < V; v++)
            if (expf(s[v]) < cut) s[v] = -INFINITY;
        log_softmax(s, V);
    }
}

static int64_t sample(const ut_gen_opts *o, float *s, int64_t V, float *tmp, ut_rng *rng) {
    warp(o, s, V, tmp);
    double u = ut_rng_uniform(rng), cum = 0;
    int64_t last = argmax(s, V);
    for (int64_t v = 0; v < V; v++) {
        if (s[v] == -INFINITY) continue;
        cum += exp(s[v]);
        last = v;
        if (u < cum) return v;
    }
    return last;
}

/* ---- greedy decoding and sampling: one row per source ---- */
static int greedy(ut_model *m, void *st, const procs *p, int64_t B, int32_t *out, int64_t *lens, char *err,
                  size_t n) {
    const ut_gen_opts *o = p->o;
    int64_t V = p->tok.vocab, T = p->max_len;
    int32_t *seq = ut_calloc_check((size_t)(B * T), sizeof *seq);
    float *logits = ut_malloc_check((size_t)(B * V) * sizeof *logits), *tmp = ut_malloc_check((size_t)V * sizeof *tmp);
    bool *done = ut_calloc_check((size_t)B, sizeof *done);
    ut_rng rng;
    ut_rng_seed(&rng, o->seed);
    int rc = 0;
    int32_t pad = (int32_t)(p->tok.pad >= 0 ? p->tok.pad : p->tok.eos);
    int64_t P = p->P;
    for (int64_t b = 0; b < B; b++) memcpy(seq + b * T, p->prompt + b * P, (size_t)P * sizeof *seq), lens[b] = 0;
    for (int64_t len = P; len < T && !rc; len++) {
        if (m->decoder->step(st, seq, T, len, logits, err, n)) {
            rc = -1;
            break;
        }
        bool all = true;
        for (int64_t b = 0; b < B; b++) {
            float *s = logits + b * V;
            process(p, seq + b * T, len, s);
            int64_t tok = o->do_sample ? sample(o, s, V, tmp, &rng) : argmax(s, V);
            if (done[b]) tok = pad;
            else lens[b] = len - P + 1;
            seq[b * T + len] = (int32_t)tok;
            if (tok == p->tok.eos) done[b] = true;
            all = all && done[b];
        }
        if (all) break;
    }
    for (int64_t b = 0; b < B && !rc; b++)
        for (int64_t i = 0; i < o->max_new_tokens; i++)
            out[b * o->max_new_tokens + i] = i < lens[b] ? seq[b * T + P + i] : pad;
    ut_free(seq);
    ut_free(logits);
    ut_free(tmp);
    ut_free(done);
    return rc;
}

/* ---- beam search ----
 * Per source: K running beams and the K best finished hypotheses so far.
 * Each step takes the 2K best continuations over all K x V (accumulated
 * log-probabilities); those that end (end of sequence or the length limit)
 * among the first K become finished candidates scored sum / length^penalty,
 * the best K that do not end run on. */
typedef struct {
    float v;
    int32_t beam, tok;
} cand;

/* the k largest of n values (ties: the lower index first) into idx, sorted */
static void top_k(const float *x, int64_t n, int k, int64_t *idx) {
    int have = 0;
    for (int64_t i = 0; i < n; i++) {
        if (have == k && !(x[i] > x[idx[k - 1]])) continue;
        int j = have < k ? have++ : k - 1;
        while (j > 0 && x[i] > x[idx[j - 1]]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
}

static int beam(ut_model *m, void *st, const procs *p, int64_t B, int32_t *out, int64_t *lens, char *err, size_t n) {
    const ut_gen_opts *o = p->o;
    int K = o->num_beams, K2 = 2 * K;
    int64_t V = p->tok.vocab, T = p->max_len, N = B * K, P = p->P;
    const float NEG = -1.0e9f;
    float lp = (float)o->length_penalty;
    /* what follows a finished hypothesis: transformers' beam search writes
     * `pad_token_id or eos_token_id`, so end of sequence where pad is 0 (T5) */
    int32_t pad = (int32_t)(p->tok.pad > 0 || p->tok.eos < 0 ? p->tok.pad : p->tok.eos);
    int32_t *run = ut_malloc_check((size_t)(N * T) * sizeof *run), *nrun = ut_malloc_check((size_t)(N * T) * sizeof *nrun);
    int32_t *fin = ut_malloc_check((size_t)(N * T) * sizeof *fin), *old = ut_malloc_check((size_t)(K * T) * sizeof *old);
    float *rs = ut_malloc_check((size_t)N * sizeof *rs), *fs = ut_malloc_check((size_t)N * sizeof *fs);
    int64_t *flen = ut_calloc_check((size_t)N, sizeof *flen);
    bool *ff = ut_calloc_check((size_t)N, sizeof *ff), *open = ut_malloc_check((size_t)B * sizeof *open);
    float *logits = ut_malloc_check((size_t)(N * V) * sizeof *logits);
    float *acc = ut_malloc_check((size_t)(K * V) * sizeof *acc);
    int32_t *parent = ut_malloc_check((size_t)N * sizeof *parent);
    int64_t *ti = ut_malloc_check((size_t)K2 * sizeof *ti), *mi = ut_malloc_check((size_t)K * sizeof *mi);
    float *gkey = o->do_sample ? ut_malloc_check((size_t)(K * V) * sizeof *gkey) : NULL;
    float *wtmp = o->do_sample ? ut_malloc_check((size_t)V * sizeof *wtmp) : NULL;
    ut_rng rng;
    ut_rng_seed(&rng, o->seed);
    for (int64_t i = 0; i < N * T; i++) run[i] = fin[i] = pad;
    for (int64_t r = 0; r < N; r++) {
        memcpy(run + r * T, p->prompt + r * P, (size_t)P * sizeof *run);
        memcpy(fin + r * T, p->prompt + r * P, (size_t)P * sizeof *fin);
        rs[r] = r % K ? NEG : 0.0f;
        fs[r] = NEG;
    }
    for (int64_t b = 0; b < B; b++) open[b] = true;
    int rc = 0;
    for (int64_t len = P; len < T; len++) {
        if (m->decoder->step(st, run, T, len, logits, err, n)) {
            rc = -1;
            break;
        }
        bool all_hit = true, any_open = false, all_full = true;
        for (int64_t b = 0; b < B; b++) {
            /* accumulated log-probabilities of every continuation of the K beams */
            for (int k = 0; k < K; k++) {
                int64_t r = b * K + k;
                float *s = logits + r * V;
                log_softmax(s, V);
                process(p, run + r * T, len, s);
                if (o->do_sample) warp(o, s, V, wtmp); /* on each beam's log-probabilities, then accumulated */
                for (int64_t v = 0; v < V; v++) acc[k * V + v] = s[v] + rs[r];
            }
            cand c[64];
            if (o->do_sample) {
                /* 2K continuations drawn without replacement, each with
                 * probability in proportion to exp(acc): the 2K largest of
                 * acc + Gumbel noise (the Gumbel-top-k trick); then in order
                 * of acc, as beam search takes them */
                for (int64_t i = 0; i < K * V; i++) {
                    double u = ut_rng_uniform(&rng);
                    gkey[i] = acc[i] == -INFINITY ? -INFINITY : acc[i] - (float)log(-log(u > 0 ? u : 1e-300));
                }
                top_k(gkey, K * V, K2, ti);
                for (int i = 1; i < K2; i++) /* insertion sort by acc, descending (ties: the earlier draw) */
                    for (int j = i; j > 0 && acc[ti[j]] > acc[ti[j - 1]]; j--) {
                        int64_t t = ti[j];
                        ti[j] = ti[j - 1];
                        ti[j - 1] = t;
                    }
            } else {
                top_k(acc, K * V, K2, ti);
            }
            bool hit[64];
            for (int i = 0; i < K2; i++) {
                c[i] = (cand){acc[ti[i]], (int32_t)(ti[i] / V), (int32_t)(ti[i] % V)};
                hit[i] = c[i].tok == p->tok.eos || len + 1 >= T;
                all_hit = all_hit && hit[i];
            }
            /* the running beams: the best K that did not end */
            float run_v[64], fin_v[128];
            for (int i = 0; i < K2; i++) run_v[i] = c[i].v + (hit[i] ? NEG : 0.0f);
            top_k(run_v, K2, K, mi);
            for (int k = 0; k < K; k++) {
                const cand *x = &c[mi[k]];
                int64_t r = b * K + k, from = b * K + x->beam;
                memcpy(nrun + r * T, run + from * T, (size_t)T * sizeof *run);
                nrun[r * T + len] = x->tok;
                rs[r] = run_v[mi[k]];
                parent[r] = (int32_t)from;
            }
            /* the finished: the best K of those so far and the candidates that just ended */
            bool full = true;
            for (int k = 0; k < K; k++) full = full && ff[b * K + k];
            for (int k = 0; k < K; k++) fin_v[k] = fs[b * K + k];
            float norm = powf((float)(len + 1 - P), lp); /* the new length: len + 1 tokens less the prompt */
            for (int i = 0; i < K2; i++) {
                float v = c[i].v / norm;
                if (full && o->early_stopping == UT_EARLY_TRUE) v += NEG;
                if (!open[b]) v += NEG;
                if (!(hit[i] && i < K)) v += NEG;
                fin_v[K + i] = v;
            }
            top_k(fin_v, K + K2, K, mi);
            /* gather into the slots in order, from a copy of the old ones */
            memcpy(old, fin + b * K * T, (size_t)(K * T) * sizeof *old);
            int64_t ofl[64];
            bool off[64];
            for (int k = 0; k < K; k++) ofl[k] = flen[b * K + k], off[k] = ff[b * K + k];
            for (int k = 0; k < K; k++) {
                int64_t j = mi[k], r = b * K + k;
                fs[r] = fin_v[j];
                if (j < K) {
                    memcpy(fin + r * T, old + j * T, (size_t)T * sizeof *fin);
                    flen[r] = ofl[j];
                    ff[r] = off[j];
                } else {
                    const cand *x = &c[j - K];
                    memcpy(fin + r * T, run + (b * K + x->beam) * T, (size_t)T * sizeof *fin);
                    fin[r * T + len] = x->tok;
                    flen[r] = len + 1 - P;
                    ff[r] = hit[j - K] && j - K < K;
                }
            }
        }
        int32_t *sw = run;
        run = nrun;
        nrun = sw;
        /* the caches follow the running beams */
        if (m->decoder->reorder(st, parent, err, n)) {
            rc = -1;
            break;
        }
        /* can a running beam still beat the worst finished one? */
        for (int64_t b = 0; b < B; b++) {
            float hl = o->early_stopping == UT_EARLY_NEVER && lp > 0 ? (float)(T - P) : (float)(len + 1 - P);
            float best = rs[b * K] / powf(hl, lp), worst = INFINITY;
            bool all_fin = true;
            for (int k = 0; k < K; k++) worst = fs[b * K + k] < worst ? fs[b * K + k] : worst;
            bool better = false;
            for (int k = 0; k < K; k++) {
                all_fin = all_fin && ff[b * K + k];
                better = better || best > (ff[b * K + k] ? worst : NEG);
            }
            open[b] = open[b] && better;
            any_open = any_open || open[b];
            all_full = all_full && all_fin;
        }
        if (!any_open || (all_full && o->early_stopping == UT_EARLY_TRUE) || all_hit) break;
    }
    int64_t R = o->num_return_sequences;
    for (int64_t b = 0; b < B && !rc; b++)
        for (int64_t j = 0; j < R; j++) { /* the R best finished hypotheses, best first */
            int64_t r = b * K + j, q = b * R + j;
            lens[q] = flen[r];
            for (int64_t i = 0; i < o->max_new_tokens; i++)
                out[q * o->max_new_tokens + i] = i < flen[r] ? fin[r * T + P + i] : pad;
        }
    ut_free(run);
    ut_free(nrun);
    ut_free(fin);
    ut_free(old);
    ut_free(rs);
    ut_free(fs);
    ut_free(flen);
    ut_free(ff);
    ut_free(open);
    ut_free(logits);
    ut_free(acc);
    ut_free(parent);
    ut_free(ti);
    ut_free(mi);
    ut_free(gkey);
    ut_free(wtmp);
    return rc;
}

int ut_generate(ut_model *m, const ut_gen_opts *o, const int32_t *src, const int32_t *mask, int64_t B, int64_t S,
                int32_t *out, int64_t *lens, char *err, size_t n) {
    if (!m->decoder)
        return ut_errorf(err, n, "model %s generates no text (bart and t5 as sequence-to-sequence models, "
                                 "model.task: seq2seq, and gpt2's language model do)", m->type);
    if (o->max_new_tokens < 1 || o->min_new_tokens < 0 || o->num_beams < 1 || o->num_beams > 32 ||
        o->no_repeat_ngram_size < 0 || o->top_k < 0 || !(o->temperature > 0) || !(o->top_p > 0 && o->top_p <= 1))
        return ut_errorf(err, n, "generation: max_new_tokens >= 1, min_new_tokens >= 0, num_beams in [1, 32], "
                                 "no_repeat_ngram_size >= 0, top_k >= 0, temperature > 0, top_p in (0, 1]");
    if (m->tokens.vocab < 2)
        return ut_errorf(err, n, "generation: model %s has a vocabulary of %lld tokens (at least 2 to choose from)",
                         m->type, (long long)m->tokens.vocab);
    int64_t R = o->num_return_sequences;
    if (R < 1 || R > 1024)
        return ut_errorf(err, n, "generation: num_return_sequences %lld (1 to 1024)", (long long)R);
    if (R > 1 && o->num_beams == 1 && !o->do_sample)
        return ut_errorf(err, n, "generation: greedy decoding gives one text per source, so num_return_sequences %lld "
                                 "needs do_sample (independent draws) or num_beams >= %lld (the best beams)",
                         (long long)R, (long long)R);
    if (o->num_beams > 1 && R > o->num_beams)
        return ut_errorf(err, n, "generation: num_return_sequences %lld is more than num_beams %d: beam search "
                                 "returns at most its beams", (long long)R, o->num_beams);
    procs p = {.o = o, .tok = m->tokens};
    if (o->forced_bos != -2) p.tok.forced_bos = o->forced_bos;
    int64_t ids[3] = {p.tok.forced_bos, o->forced_eos, p.tok.start};
    for (int i = 0; i < 3; i++)
        if (ids[i] >= p.tok.vocab)
            return ut_errorf(err, n, "generation: token id %lld is outside the vocabulary [0, %lld)",
                             (long long)ids[i], (long long)p.tok.vocab);
    if (B == 0) return 0;
    /* sampling R texts a source: each source R times in a row, drawn apart */
    int64_t rows = B;
    int32_t *xs = NULL, *xm = NULL;
    if (o->num_beams == 1 && R > 1) {
        rows = B * R;
        xs = ut_malloc_check((size_t)(rows * S) * sizeof *xs);
        xm = mask ? ut_malloc_check((size_t)(rows * S) * sizeof *xm) : NULL;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < R; j++) {
                memcpy(xs + (b * R + j) * S, src + b * S, (size_t)S * sizeof *xs);
                if (mask) memcpy(xm + (b * R + j) * S, mask + b * S, (size_t)S * sizeof *xm);
            }
        src = xs, mask = xm;
    }
    void *st = m->decoder->begin(m, src, mask, rows, S, o->num_beams, o->max_new_tokens, !o->no_cache, &p.prompt, &p.P,
                                 err, n);
    int rc = -1;
    if (st) {
        p.max_len = p.P + o->max_new_tokens;
        rc = o->num_beams > 1 ? beam(m, st, &p, B, out, lens, err, n) : greedy(m, st, &p, rows, out, lens, err, n);
        m->decoder->end(st);
    }
    ut_free(xs);
    ut_free(xm);
    return rc;
}
