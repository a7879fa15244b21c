/* utrain text-generation metrics: corpus BLEU (as sacrebleu 2.x scores it by
 * default), ROUGE-L F1 (as Google's rouge_score package with its default
 * tokenizer and no stemmer) and exact match. Pure functions of their inputs:
 * no global state, safe to call from several threads at once.
 * defines: ut_bleu_stats, UT_BLEU_NSTATS, UT_BLEU_MAX_ORDER, ut_bleu_add, ut_bleu_merge,
 *          ut_bleu_result, ut_bleu_compute, ut_bleu_score, ut_rouge_l, ut_exact_match. */
#ifndef UTRAIN_TEXTMETRICS_H
#define UTRAIN_TEXTMETRICS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- BLEU ----
 * Corpus BLEU as sacrebleu's corpus_bleu(hyps, [refs]) computes it with its
 * defaults: one reference per hypothesis, case-sensitive, the "13a" tokenizer
 * (mteval-v13a), n-grams of orders 1..4 with clipped counts, smoothing "exp"
 * (an order with no match counts 1/2^k of a match, k = 1, 2, ... in order;
 * when no order at all matches, the score is 0), no effective order, and the
 * brevity penalty exp(1 - ref_len/sys_len) when sys_len < ref_len.
 *
 * Tokenizing a segment (13a): trailing whitespace removed; "<skipped>" and
 * "-\n" removed; other newlines made spaces; &quot; &amp; &lt; &gt; unescaped
 * (in that order, each over the whole text); then each of
 *   { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ /
 * becomes a token of its own; '.' and ',' are split off unless they sit between
 * two digits (3.14 and 1,000 stay whole); '-' is split off after a digit; and
 * the text is split on whitespace (Unicode's, as Python's str.split does).
 *
 * The statistics are sums over segments, so they can be added one example at
 * a time and summed over ranks: the struct is UT_BLEU_NSTATS int64_t in a row
 * with no padding, so an all-reduce of that many int64 with SUM merges it. */
#define UT_BLEU_MAX_ORDER 4
#define UT_BLEU_NSTATS (2 * UT_BLEU_MAX_ORDER + 2)

typedef struct {
    int64_t correct[UT_BLEU_MAX_ORDER]; /* clipped n-gram matches, order n at [n-1] */
    int64_t total[UT_BLEU_MAX_ORDER];   /* hypothesis n-grams */
    int64_t sys_len, ref_len;           /* hypothesis and reference tokens */
} ut_bleu_stats;

/* Adds one (hypothesis, reference) pair to s (zero-initialize s first: `ut_bleu_stats s = {0};`).
 * Returns 0, or -1 when s, hyp or ref is NULL, or hyp or ref is not valid UTF-8 (an overlong
 * form, a surrogate, a cut sequence...): then s is left unchanged. Any bytes
 * are safe to pass. Memory comes from ut_malloc_check (which aborts when out
 * of memory) and is freed before returning. */
int ut_bleu_add(ut_bleu_stats *s, const char *hyp, const char *ref);

/* into += from, field by field (what the all-reduce does across ranks). */
void ut_bleu_merge(ut_bleu_stats *into, const ut_bleu_stats *from);

typedef struct {
    double score;                          /* BLEU, 0..100 */
    double precisions[UT_BLEU_MAX_ORDER];  /* n-gram precisions in percent, smoothed */
    double bp;                             /* brevity penalty, 0..1 */
    int64_t sys_len, ref_len;
} ut_bleu_result;

/* The corpus figures from summed statistics. An empty corpus (or one with no
 * matching n-gram) scores 0 with all precisions 0; sys_len 0 against a
 * reference with tokens gives bp 0 (no division by zero). */
ut_bleu_result ut_bleu_compute(const ut_bleu_stats *s);
/* ut_bleu_compute(s).score; its brevity penalty in *bp_out when bp_out is not NULL. */
double ut_bleu_score(const ut_bleu_stats *s, double *bp_out);

/* ---- ROUGE-L ----
 * ROUGE-L F1 of one pair as rouge_score's RougeScorer(['rougeL'],
 * use_stemmer=False).score(ref, hyp) gives it: both texts lowercased (A-Z, and
 * the two non-ASCII letters whose lowercase is ASCII: U+0130 gives "i" and
 * U+212A KELVIN SIGN "k"), every other character that is not [a-z0-9] made a
 * separator (so all other non-ASCII text, and bytes that are not valid UTF-8,
 * separate tokens), then P = LCS/|hyp tokens|, R = LCS/|ref tokens|,
 * F1 = 2PR/(P+R). Returns F1 in [0, 1]; 0 when either text has no token or is
 * NULL. Time O(|hyp| * |ref|) tokens, memory O(min(|hyp|, |ref|)).
 * The corpus figure is the mean of the pairs' F1: what Hugging Face
 * `evaluate`'s "rouge" reports as rougeL with use_aggregator=False, averaged
 * (its default aggregator gives a bootstrap estimate of that mean instead). */
double ut_rouge_l(const char *hyp, const char *ref);

/* ---- exact match ----
 * true when hyp and ref are the same bytes once leading and trailing
 * whitespace is removed from both (the whitespace Python's str.strip()
 * removes: \t \n \v \f \r, 0x1C-0x1F, space, U+0085, U+00A0 and the other
 * Unicode spaces); case and inner whitespace count. false when either is NULL. */
bool ut_exact_match(const char *hyp, const char *ref);

#ifdef __cplusplus
}
#endif
#endif
