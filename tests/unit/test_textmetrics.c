/* Text-generation metrics against their Python references: corpus BLEU
 * against sacrebleu (every pair's statistics and the corpus figures) and
 * ROUGE-L F1 against rouge_score on King James Bible verses with perturbed
 * hypotheses and hand-written cases (tests/parity/make_textmetric_fixtures.py
 * writes the expected values); then statistics summed in parts, the empty
 * corpus, exact match, a long LCS, and malformed or odd bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "utrain/base.h"
#include "utrain/textmetrics.h"

#define FIXTURE "tests/parity/fixtures/textmetrics.tsv"

/* ---- the fixture ---- */
typedef struct {
    char *hyp, *ref;
    double rouge;
    int64_t stats[UT_BLEU_NSTATS];   /* sys_len ref_len correct[4] total[4] */
} pair;

/* sacrebleu's corpus figures over every pair (ALL) and over the pairs whose
 * hypothesis is the shorter (SHORT: a brevity penalty below 1) */
enum { ALL, SHORT, NCORPUS };
typedef struct {
    double score, prec[UT_BLEU_MAX_ORDER], bp;
    int64_t sys_len, ref_len;
    int present;
} corpus;

typedef struct {
    pair *p;
    int n;
    corpus c[NCORPUS];
} fixture;

/* Undoes the fixture's escapes (\\ \t \n \r) in place. */
static char *unescape(char *s) {
    char *o = s;
    for (char *i = s; *i; i++) {
        if (*i == '\\' && i[1]) {
            i++;
            *o++ = *i == 't' ? '\t' : *i == 'n' ? '\n' : *i == 'r' ? '\r' : *i;
        } else {
            *o++ = *i;
        }
    }
    *o = 0;
    return s;
}

/* Splits line at tabs into at most max fields; returns how many. */
static int split_tabs(char *line, char **f, int max) {
    int n = 0;
    for (char *p = line; n < max;) {
        f[n++] = p;
        p = strchr(p, '\t');
        if (!p) break;
        *p++ = 0;
    }
    return n;
}

static int parse_pair(fixture *fx, char **f, int nf) {
    if (nf != 5) return -1;
    pair *p = &fx->p[fx->n];
    p->hyp = strdup(unescape(f[1]));
    p->ref = strdup(unescape(f[2]));
    p->rouge = strtod(f[3], NULL);
    char *s = f[4];
    for (int k = 0; k < UT_BLEU_NSTATS; k++) p->stats[k] = strtoll(s, &s, 10);
    fx->n++;
    return 0;
}

static int parse_corpus(fixture *fx, char **f, int nf) {
    if (nf != 7 || (strcmp(f[1], "all") && strcmp(f[1], "short"))) return -1;
    corpus *c = &fx->c[strcmp(f[1], "all") ? SHORT : ALL];
    c->score = strtod(f[2], NULL);
    char *s = f[3];
    for (int k = 0; k < UT_BLEU_MAX_ORDER; k++) c->prec[k] = strtod(s, &s);
    c->bp = strtod(f[4], NULL);
    c->sys_len = strtoll(f[5], NULL, 10);
    c->ref_len = strtoll(f[6], NULL, 10);
    c->present = 1;
    return 0;
}

static fixture load_fixture(void) {
    fixture fx = {0};
    FILE *fp = fopen(FIXTURE, "r");
    CHECK(fp, "cannot open %s (run from the repository root)", FIXTURE);
    if (!fp) return fx;
    char *line = NULL, *f[8];
    size_t cap = 0;
    int cap_pairs = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, fp)) > 0) {
        if (line[len - 1] == '\n') line[--len] = 0;
        if (!len || line[0] == '#') continue;
        if (fx.n == cap_pairs) {
            cap_pairs = cap_pairs ? 2 * cap_pairs : 64;
            fx.p = realloc(fx.p, (size_t)cap_pairs * sizeof *fx.p);
        }
        int nf = split_tabs(line, f, 8), bad = -1;
        if (!strcmp(f[0], "P")) bad = parse_pair(&fx, f, nf);
        else if (!strcmp(f[0], "C")) bad = parse_corpus(&fx, f, nf);
        CHECK(!bad, "bad fixture line: %.60s", line);
    }
    free(line);
    fclose(fp);
    CHECK(fx.n >= 50 && fx.c[ALL].present && fx.c[SHORT].present, "%d pairs, corpus lines %d %d", fx.n,
          fx.c[ALL].present, fx.c[SHORT].present);
    return fx;
}

static void fixture_free(fixture *fx) {
    for (int i = 0; i < fx->n; i++) {
        free(fx->p[i].hyp);
        free(fx->p[i].ref);
    }
    free(fx->p);
}

static fixture fx;

static void stats_as_array(const ut_bleu_stats *s, int64_t a[UT_BLEU_NSTATS]) {
    a[0] = s->sys_len;
    a[1] = s->ref_len;
    for (int n = 0; n < UT_BLEU_MAX_ORDER; n++) {
        a[2 + n] = s->correct[n];
        a[2 + UT_BLEU_MAX_ORDER + n] = s->total[n];
    }
}

static ut_bleu_stats corpus_stats(int from, int to) {
    ut_bleu_stats s = {0};
    for (int i = from; i < to; i++) CHECK(ut_bleu_add(&s, fx.p[i].hyp, fx.p[i].ref) == 0, "pair %d", i);
    return s;
}

/* ---- against sacrebleu and rouge_score ---- */
static void test_bleu_pair_stats(void) {
    for (int i = 0; i < fx.n; i++) {
        ut_bleu_stats s = {0};
        CHECK(ut_bleu_add(&s, fx.p[i].hyp, fx.p[i].ref) == 0, "pair %d", i);
        int64_t got[UT_BLEU_NSTATS];
        stats_as_array(&s, got);
        for (int k = 0; k < UT_BLEU_NSTATS; k++)
            CHECK(got[k] == fx.p[i].stats[k], "pair %d (hyp \"%.50s\") statistic %d: %lld, sacrebleu %lld", i,
                  fx.p[i].hyp, k, (long long)got[k], (long long)fx.p[i].stats[k]);
    }
}

static void check_corpus(const ut_bleu_stats *s, const corpus *c, const char *which) {
    ut_bleu_result r = ut_bleu_compute(s);
    CHECK(fabs(r.score - c->score) <= 1e-9 * fabs(c->score), "%s: BLEU %.17g, sacrebleu %.17g", which, r.score,
          c->score);
    for (int n = 0; n < UT_BLEU_MAX_ORDER; n++) CHECK_NEAR(r.precisions[n], c->prec[n], 1e-12);
    CHECK_NEAR(r.bp, c->bp, 1e-12);
    CHECK(r.sys_len == c->sys_len && r.ref_len == c->ref_len, "%s: lengths %lld %lld, sacrebleu %lld %lld", which,
          (long long)r.sys_len, (long long)r.ref_len, (long long)c->sys_len, (long long)c->ref_len);
    double bp = -1;
    CHECK(ut_bleu_score(s, &bp) == r.score && bp == r.bp, "%s: ut_bleu_score disagrees with ut_bleu_compute", which);
    printf("     %-5s BLEU %.6f (sacrebleu %.6f), bp %.6f\n", which, r.score, c->score, r.bp);
}

static void test_bleu_corpus(void) {
    ut_bleu_stats all = corpus_stats(0, fx.n), shorter = {0};
    for (int i = 0; i < fx.n; i++)
        if (fx.p[i].stats[0] < fx.p[i].stats[1]) CHECK(ut_bleu_add(&shorter, fx.p[i].hyp, fx.p[i].ref) == 0, "pair %d", i);
    check_corpus(&all, &fx.c[ALL], "all");
    check_corpus(&shorter, &fx.c[SHORT], "short");
    CHECK(fx.c[SHORT].bp < 1, "the short corpus has a brevity penalty");
}

static void test_rouge_pairs(void) {
    double sum = 0;
    for (int i = 0; i < fx.n; i++) {
        double f1 = ut_rouge_l(fx.p[i].hyp, fx.p[i].ref);
        CHECK(fabs(f1 - fx.p[i].rouge) <= 1e-12, "pair %d (hyp \"%.50s\"): %.17g, rouge_score %.17g", i,
              fx.p[i].hyp, f1, fx.p[i].rouge);
        CHECK(ut_rouge_l(fx.p[i].ref, fx.p[i].hyp) == f1, "pair %d: F1 is symmetric", i);
        sum += f1;
    }
    printf("     mean ROUGE-L F1 %.6f over %d pairs\n", sum / (fx.n ? fx.n : 1), fx.n);
}

/* ---- accumulation ---- */

/* Two ranks' halves, summed as the all-reduce would (merge, and as a flat
 * int64 array), give the whole corpus's statistics and the same score. */
static void test_bleu_halves(void) {
    int half = fx.n / 2;
    ut_bleu_stats all = corpus_stats(0, fx.n), a = corpus_stats(0, half), b = corpus_stats(half, fx.n);
    ut_bleu_stats merged = a, flat = a;
    ut_bleu_merge(&merged, &b);
    int64_t *fa = (int64_t *)&flat;
    const int64_t *fb = (const int64_t *)&b;
    for (int k = 0; k < UT_BLEU_NSTATS; k++) fa[k] += fb[k];
    CHECK(!memcmp(&merged, &all, sizeof all), "merged halves differ from the whole");
    CHECK(!memcmp(&flat, &all, sizeof all), "halves summed as int64[%d] differ from the whole", UT_BLEU_NSTATS);
    CHECK(ut_bleu_score(&merged, NULL) == ut_bleu_score(&all, NULL), "%.17g vs %.17g", ut_bleu_score(&merged, NULL),
          ut_bleu_score(&all, NULL));
}

static void test_bleu_empty(void) {
    ut_bleu_stats s = {0};
    ut_bleu_result r = ut_bleu_compute(&s);
    CHECK(r.score == 0 && r.bp == 1 && r.sys_len == 0 && r.ref_len == 0, "empty corpus: %g bp %g", r.score, r.bp);
    for (int n = 0; n < UT_BLEU_MAX_ORDER; n++) CHECK(r.precisions[n] == 0, "precision %d: %g", n, r.precisions[n]);
    CHECK(ut_bleu_add(&s, "", "") == 0 && ut_bleu_add(&s, " \n ", "") == 0, "empty pairs are fine");
    CHECK(ut_bleu_score(&s, NULL) == 0, "empty pairs score 0");
    double bp = -1;
    CHECK(ut_bleu_add(&s, "", "some words here") == 0 && ut_bleu_score(&s, &bp) == 0 && bp == 0,
          "no hypothesis tokens: score 0 and bp 0 without dividing by zero (bp %g)", bp);
    /* correct unigrams but no 4-gram in the whole corpus: sacrebleu's 0 */
    ut_bleu_stats t = {0};
    CHECK(ut_bleu_add(&t, "a b c", "a b c") == 0, "short pair");
    CHECK(ut_bleu_score(&t, NULL) == 0, "no 4-grams: %g", ut_bleu_score(&t, NULL));
    CHECK(ut_bleu_add(NULL, "a", "a") == -1 && ut_bleu_add(&t, NULL, "a") == -1 && ut_bleu_add(&t, "a", NULL) == -1,
          "NULL arguments are refused");
}

/* ---- hand cases ---- */
static void test_exact_match(void) {
    CHECK(ut_exact_match("Paris", "Paris"), "same");
    CHECK(ut_exact_match("  Paris\n", "\tParis "), "outer whitespace is stripped");
    CHECK(ut_exact_match("\xc2\xa0Paris\xe3\x80\x80", "Paris"), "NBSP and U+3000 are whitespace too");
    CHECK(!ut_exact_match("paris", "Paris"), "case counts");
    CHECK(!ut_exact_match("New  York", "New York"), "inner whitespace counts");
    CHECK(!ut_exact_match("Paris.", "Paris"), "punctuation counts");
    CHECK(ut_exact_match("", "   "), "empty equals blank");
    CHECK(!ut_exact_match("a", ""), "non-empty against empty");
    CHECK(!ut_exact_match(NULL, "a") && !ut_exact_match("a", NULL), "NULL never matches");
    CHECK(ut_exact_match("\xff\xfe ", " \xff\xfe"), "malformed bytes compare as bytes");
}

static void test_rouge_hand(void) {
    CHECK_NEAR(ut_rouge_l("the cat sat", "the cat"), 0.8, 1e-15);   /* P 2/3, R 1 */
    CHECK(ut_rouge_l("", "the cat") == 0 && ut_rouge_l("the cat", "") == 0, "empty side gives 0");
    CHECK(ut_rouge_l("!!! ...", "the cat") == 0, "no token gives 0");
    CHECK(ut_rouge_l(NULL, "a") == 0 && ut_rouge_l("a", NULL) == 0, "NULL gives 0");
    CHECK(ut_rouge_l("The CAT, sat!", "the cat sat") == 1, "case and punctuation are ignored");
    CHECK(ut_rouge_l("caf\xc3\xa9", "caf") == 1, "non-ASCII letters separate tokens");
    CHECK(ut_rouge_l("\xe2\x84\xaa" "elvin", "kelvin") == 1, "U+212A lowercases to k");
    CHECK(ut_rouge_l("\xc4\xb0saac", "i saac") == 1, "U+0130 lowercases to i and a separator");
}

/* ROUGE-L of two long token lists against a plain full-table LCS. */
static void test_rouge_long(void) {
    int n = test_quick() ? 300 : 1500, m = n - n / 7;
    char *a = malloc((size_t)n * 3 + 1), *b = malloc((size_t)m * 3 + 1);
    int *ta = malloc((size_t)n * sizeof *ta), *tb = malloc((size_t)m * sizeof *tb);
    uint64_t x = 12345;
    for (int i = 0; i < n; i++) ta[i] = (int)((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 60);
    for (int j = 0; j < m; j++) tb[j] = (int)((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 60);
    for (int i = 0; i < n; i++) sprintf(a + 3 * i, "%c%c ", 'a' + ta[i], 'a' + ta[i]);
    for (int j = 0; j < m; j++) sprintf(b + 3 * j, "%c%c ", 'a' + tb[j], 'a' + tb[j]);
    int *tab = calloc((size_t)(n + 1) * (size_t)(m + 1), sizeof *tab);
    for (int i = 1; i <= n; i++)
        for (int j = 1; j <= m; j++) {
            int *c = &tab[(size_t)i * (size_t)(m + 1) + (size_t)j];
            int up = c[-(m + 1)], left = c[-1];
            *c = ta[i - 1] == tb[j - 1] ? c[-(m + 1) - 1] + 1 : up > left ? up : left;
        }
    double lcs = tab[(size_t)(n + 1) * (size_t)(m + 1) - 1], p = lcs / n, r = lcs / m;
    CHECK_NEAR(ut_rouge_l(a, b), 2 * p * r / (p + r), 1e-15);
    CHECK_NEAR(ut_rouge_l(b, a), 2 * p * r / (p + r), 1e-15);
    free(tab), free(a), free(b), free(ta), free(tb);
}

/* ---- odd bytes ---- */

/* Malformed UTF-8 is refused by BLEU with s unchanged; every function takes any bytes. */
static void test_bad_utf8(void) {
    static const char *const bad[] = {"\xff", "ab\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                      "x\x80y", "\xe2\x82", "ok \xf0\x9f\x98"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ut_bleu_stats s = {0}, zero = {0};
        CHECK(ut_bleu_add(&s, bad[i], "ok") == -1 && ut_bleu_add(&s, "ok", bad[i]) == -1, "case %zu", i);
        CHECK(!memcmp(&s, &zero, sizeof s), "case %zu: statistics touched", i);
        double f = ut_rouge_l(bad[i], "ok x y");
        CHECK(f >= 0 && f <= 1, "case %zu: %g", i, f);
        CHECK(ut_exact_match(bad[i], bad[i]), "case %zu", i);
    }
    ut_bleu_stats s = {0};
    CHECK(ut_bleu_add(&s, "\xe2\x82\xac 5 \xf0\x9f\x98\x80.", "\xe2\x82\xac 5") == 0, "valid multi-byte text");
    CHECK(ut_rouge_l("x\xffy", "x y") == 1, "a malformed byte separates tokens");
}

static uint64_t lcg(uint64_t *x) { return (*x = *x * 6364136223846793005ull + 1442695040888963407ull) >> 33; }

/* Seeded strings of random bytes, and of pieces 13a treats specially, through
 * every function: no crash (the sanitizer build checks the buffers), and the
 * statistics stay consistent. */
static void test_random_bytes(void) {
    static const char *const pieces[] = {".", ",", "-", "-\n", "\n", "<skipped>", "<skip", "&amp;", "&quot;", "&lt;",
                                         "&gt;", "&", "3", "14", " ", "\t", "a", "Word", "\xc2\xa0", "\xe2\x80\xa8",
                                         "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xc4\xb0", "\xe2\x84\xaa",
                                         "{", "/", "'", "\"", "\xc2\x85", "\x1c"};
    int rounds = test_quick() ? 300 : 3000;
    uint64_t x = 7;
    char a[256], b[256];
    for (int r = 0, failed = t_checks_failed; r < rounds && t_checks_failed == failed; r++) {
        for (int side = 0; side < 2; side++) {
            char *s = side ? b : a;
            size_t n = 0, len = lcg(&x) % 40;
            for (size_t k = 0; k < len; k++) {
                if (r % 2) {
                    s[n++] = (char)(1 + lcg(&x) % 255);   /* any byte but NUL */
                } else {
                    const char *p = pieces[lcg(&x) % (sizeof pieces / sizeof *pieces)];
                    if (n + strlen(p) >= sizeof a) break;
                    memcpy(s + n, p, strlen(p));
                    n += strlen(p);
                }
            }
            s[n] = 0;
        }
        ut_bleu_stats s = {0};
        int rc = ut_bleu_add(&s, a, b);
        CHECK(rc == 0 || (rc == -1 && r % 2), "round %d: rc %d", r, rc);
        for (int n = 0; n < UT_BLEU_MAX_ORDER; n++)
            CHECK(s.correct[n] >= 0 && s.correct[n] <= s.total[n], "round %d order %d", r, n + 1);
        double score = ut_bleu_score(&s, NULL), f = ut_rouge_l(a, b);
        CHECK(score >= 0 && score <= 100 + 1e-9 && f >= 0 && f <= 1, "round %d: BLEU %g ROUGE-L %g", r, score, f);
        (void)ut_exact_match(a, b);
    }
}

int main(void) {
    fx = load_fixture();
    RUN(test_bleu_pair_stats);
    RUN(test_bleu_corpus);
    RUN(test_rouge_pairs);
    RUN(test_bleu_halves);
    RUN(test_bleu_empty);
    RUN(test_exact_match);
    RUN(test_rouge_hand);
    RUN(test_rouge_long);
    RUN(test_bad_utf8);
    RUN(test_random_bytes);
    fixture_free(&fx);
    return TEST_SUMMARY();
}
