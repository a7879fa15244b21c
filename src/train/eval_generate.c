/* Evaluation by generation (generate.eval: Seq2SeqTrainer's
 * predict_with_generate): every example of a seq2seq dataset generated once,
 * on the rank whose share it is, the tokens gathered so that every rank
 * holds all of them, then decoded and scored against the reference text:
 * corpus BLEU (sacrebleu's defaults), mean ROUGE-L F1, exact match and the
 * mean generated length. */
#include <string.h>

#include "run_internal.h"
#include "utrain/textmetrics.h"

void ut_gen_opts_from_config(const ut_config *c, ut_gen_opts *o) {
    ut_gen_opts_init(o);
    o->max_new_tokens = c->gen_max_new_tokens;
    o->min_new_tokens = c->gen_min_new_tokens;
    o->num_beams = (int)c->gen_num_beams;
    o->length_penalty = c->gen_length_penalty;
    o->early_stopping = !strcmp(c->gen_early_stopping, "true")    ? UT_EARLY_TRUE
                        : !strcmp(c->gen_early_stopping, "never") ? UT_EARLY_NEVER
                                                                  : UT_EARLY_HEURISTIC;
    o->no_repeat_ngram_size = c->gen_no_repeat_ngram_size;
    o->do_sample = c->gen_do_sample;
    o->temperature = c->gen_temperature;
    o->top_k = c->gen_top_k;
    o->top_p = c->gen_top_p;
    o->seed = (uint64_t)c->seed;
    o->num_return_sequences = c->gen_num_return_sequences;
}

/* The sources of examples idx[0, count) as (count, S) ids and masks, S the
 * longest of them; returns S. */
static int64_t sources(ut_dataset *ds, const int64_t *idx, int64_t count, int32_t *xb, int32_t *yb, int32_t *src,
                       int32_t *mask, char *err, size_t n) {
    int64_t L = ds->x_ne[1], S = 1;
    for (int64_t k = 0; k < count; k++) {
        if (ds->get(ds, idx[k], xb + k * 4 * L, yb + k * L, err, n)) return -1;
        for (int64_t t = 0; t < L; t++)
            if (xb[(k * 4 + 1) * L + t] && t + 1 > S) S = t + 1;
    }
    for (int64_t k = 0; k < count; k++)
        for (int64_t t = 0; t < S; t++) {
            src[k * S + t] = xb[k * 4 * L + t];
            mask[k * S + t] = xb[(k * 4 + 1) * L + t];
        }
    return S;
}

/* the hook's metrics over every example's texts, appended to res */
static void hook_metrics(const ut_hooks *h, ut_dataset *ds, char **hyp, ut_eval_result *res) {
    int64_t N = ds->n;
    const char **src = ut_malloc_check((size_t)(N ? N : 1) * sizeof *src), **ref = ut_malloc_check((size_t)(N ? N : 1) * sizeof *ref);
    for (int64_t i = 0; i < N; i++) src[i] = ut_seq2seq_text(ds, i, 0), ref[i] = ut_seq2seq_text(ds, i, 1);
    ut_metric mets[UT_MAX_METRICS];
    int k = h->generation_metrics(h->user, N, src, ref, (const char *const *)hyp, mets, UT_MAX_METRICS - res->n);
    for (int i = 0; i < k && res->n < UT_MAX_METRICS; i++) {
        snprintf(res->names[res->n], sizeof res->names[0], "%s", mets[i].name);
        res->values[res->n++] = mets[i].count ? mets[i].sum / mets[i].count : 0;
    }
    ut_free(src);
    ut_free(ref);
}

int ut_evaluate_generation(ut_comm *comm, ut_model *m, ut_dataset *ds, int64_t batch, const ut_gen_opts *o,
                           ut_tokenizer *tok, const ut_hooks *h, ut_eval_result *res, char ***texts, char *err,
                           size_t n) {
    if (!ut_seq2seq_planes(ds))
        return ut_errorf(err, n, "generate.eval: %s is not sequence-to-sequence data (data.name: seq2seq_text)",
                         ds->name);
    int rank = ut_comm_rank(comm), world = ut_comm_size(comm);
    int64_t N = ds->n, M = o->max_new_tokens, L = ds->x_ne[1];
    ut_gen_opts one_text = *o; /* the scores are of one text a source: the best beam, or one draw */
    one_text.num_return_sequences = 1;
    o = &one_text;
    /* the generated ids + 1 (0: another rank's) and lengths of every example */
    int64_t *ids = ut_calloc_check((size_t)(N * M + N + 1), sizeof *ids), *lens = ids + N * M;
    int32_t *xb = ut_malloc_check((size_t)(batch * 4 * L) * sizeof *xb), *yb = ut_malloc_check((size_t)(batch * L) * sizeof *yb);
    int32_t *src = ut_malloc_check((size_t)(batch * L) * sizeof *src), *mask = ut_malloc_check((size_t)(batch * L) * sizeof *mask);
    int32_t *out = ut_malloc_check((size_t)(batch * M) * sizeof *out);
    int64_t *gl = ut_malloc_check((size_t)batch * sizeof *gl), *idx = ut_malloc_check((size_t)batch * sizeof *idx);
    int rc = 0;
    /* rank r's share: the batches r, r + world, ... of the dataset in order */
    for (int64_t b0 = (int64_t)rank * batch; b0 < N && !rc; b0 += (int64_t)world * batch) {
        int64_t count = N - b0 < batch ? N - b0 : batch;
        for (int64_t k = 0; k < count; k++) idx[k] = b0 + k;
        int64_t S = sources(ds, idx, count, xb, yb, src, mask, err, n);
        if (S < 0 || ut_generate(m, o, src, mask, count, S, out, gl, err, n)) {
            rc = -1;
            break;
        }
        for (int64_t k = 0; k < count; k++) {
            lens[b0 + k] = gl[k];
            for (int64_t j = 0; j < gl[k]; j++) ids[(b0 + k) * M + j] = (int64_t)out[k * M + j] + 1;
        }
    }
    /* every rank learns whether one failed, then all of them get every example's tokens */
    ids[N * M + N] = rc ? 1 : 0;
    if (world > 1 && ut_comm_allreduce_i64(comm, ids, (int)(N * M + N + 1))) {
        rc = ut_errorf(err, n, "gathering generations over ranks: %s", ut_comm_error(comm));
    } else if (!rc && ids[N * M + N]) {
        rc = ut_errorf(err, n, "generation failed on another rank");
    }
    ut_bleu_stats bleu = {0};
    double rouge = 0, exact = 0, glen = 0;
    char **hyp = ut_calloc_check((size_t)(N ? N : 1), sizeof *hyp);
    int32_t *one = ut_malloc_check((size_t)(M ? M : 1) * sizeof *one);
    for (int64_t i = 0; i < N && !rc; i++) {
        for (int64_t j = 0; j < lens[i]; j++) one[j] = (int32_t)(ids[i * M + j] - 1);
        char *text = ut_tokenizer_decode_generated(tok, one, lens[i]);
        const char *ref = ut_seq2seq_text(ds, i, 1);
        ut_bleu_add(&bleu, text, ref ? ref : "");
        rouge += ut_rouge_l(text, ref ? ref : "");
        exact += ut_exact_match(text, ref ? ref : "");
        glen += (double)lens[i];
        hyp[i] = text;
    }
    if (!rc) {
        const char *names[4] = {"bleu", "rougeL", "exact_match", "gen_len"};
        double v[4] = {ut_bleu_score(&bleu, NULL), N ? rouge / (double)N : 0, N ? exact / (double)N : 0,
                       N ? glen / (double)N : 0};
        for (int i = 0; i < 4 && res->n < UT_MAX_METRICS; i++) {
            snprintf(res->names[res->n], sizeof res->names[0], "%s", names[i]);
            res->values[res->n++] = v[i];
        }
        if (h && h->generation_metrics) hook_metrics(h, ds, hyp, res);
    }
    if (!rc && texts) *texts = hyp;
    else {
        for (int64_t i = 0; i < N; i++) ut_free(hyp[i]);
        ut_free(hyp);
    }
    ut_free(one);
    ut_free(ids);
    ut_free(xb);
    ut_free(yb);
    ut_free(src);
    ut_free(mask);
    ut_free(out);
    ut_free(gl);
    ut_free(idx);
    return rc;
}
