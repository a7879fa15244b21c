/* The sequence-to-sequence text dataset (src/data/seq2seq.c) with the tiny
 * BART fixture's tokenizer: parallel files, TSV, CSV and JSON Lines give
 * planes equal to ut_tokenizer_encode of the same texts; the columns taken
 * without names (run_summarization's rule) and ds->columns; nested
 * JSON keys (run_translation's "translation.en"); truncation counts, the
 * source prefix and lower-casing; the batch trim; and every bad input gives
 * a message naming the file and line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "test.h"
#include "utrain/base.h"
#include "utrain/data.h"

#define BART "tests/parity/fixtures/hf_bart_tiny"

static char err[1024];
static char g_dir[256];
static ut_tokenizer *g_tok;

static const char *tmp(const char *name) { return tp_path(g_dir, name); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f, "cannot write %s", path);
    if (!f) return;
    fwrite(text, 1, strlen(text), f);
    fclose(f);
}

/* What the dataset should hold for text under max_len: the ids of encode. */
static int64_t encode(const char *text, int64_t max_len, int32_t *ids, int64_t cap) {
    ut_tok_encoding e = {0};
    ut_tok_opts o = {.max_len = max_len};
    char why[256];
    int rc = ut_tokenizer_encode(g_tok, text, NULL, &o, &e, why, sizeof why);
    CHECK(rc == 0, "encode '%s': %s", text, why);
    int64_t len = rc ? 0 : e.len;
    CHECK(len <= cap, "encode '%s': %lld ids", text, (long long)len);
    if (len <= cap) memcpy(ids, e.ids, (size_t)len * sizeof *ids);
    ut_tok_encoding_free(&e);
    return len;
}

/* Example i of ds against the encodings of src (cut to ms) and tgt (to mt):
 * x's four planes and y, all L wide. */
static void check_example(ut_dataset *ds, int64_t i, const char *src, int64_t ms, const char *tgt, int64_t mt) {
    enum { CAP = 256 };
    int64_t L = ds->x_ne[1];
    CHECK(L <= CAP && ds->y_ne[0] == L, "L %lld", (long long)L);
    if (L > CAP) return;
    int32_t x[4 * CAP], y[CAP], s[CAP], t[CAP], pad = ut_tokenizer_special_id(g_tok, "pad");
    CHECK(ds->get(ds, i, x, y, err, sizeof err) == 0, "get %lld: %s", (long long)i, err);
    int64_t ns = encode(src, ms, s, CAP), nt = encode(tgt, mt, t, CAP);
    bool ok = true;
    for (int64_t j = 0; j < L; j++) {
        ok &= x[j] == (j < ns ? s[j] : pad) && x[L + j] == (j < ns);
        ok &= x[2 * L + j] == (j < nt ? t[j] : pad) && x[3 * L + j] == (j < nt);
        ok &= y[j] == (j < nt ? t[j] : -100);
    }
    CHECK(ok, "example %lld ('%s' -> '%s') differs from encode (%lld and %lld ids)", (long long)i, src, tgt,
          (long long)ns, (long long)nt);
}

static void test_parallel_files(void) {
    const char *in = tmp("train_inputs.txt"), *tg = tmp("train_targets.txt");
    /* CRLF and LF lines, a byte-order mark, a final newline that adds no example */
    write_text(in, "\xEF\xBB\xBFthe film was lovely .\r\n"
                   "honestly , the script was bland , and the story was boring , and the acting was dull .\n"
                   "a truly clever start .\n");
    write_text(tg, "lovely\r\n"
                   "bland\n"
                   "a beautiful film , truly clever , from start to finish\n");
    ut_seq2seq_opts o = {.max_source_len = 16, .max_target_len = 8};
    ut_dataset *ds = ut_seq2seq_dataset_open(in, tg, g_tok, &o, err, sizeof err);
    CHECK(ds, "%s", err);
    if (!ds) return;
    CHECK(ds->n == 3 && ds->x_ndim == 2 && ds->x_ne[0] == 4 && ds->x_ne[1] == 16 && ds->y_ndim == 1 &&
          ds->y_ne[0] == 16 && ds->x_dtype == UT_I32 && ds->y_dtype == UT_I32 && ds->num_classes == 0 &&
          ds->seq2seq && ut_seq2seq_planes(ds) && !ut_tok_planes(ds) &&
          ds->vocab_size == ut_tokenizer_vocab_size(g_tok), "n %lld, x (%lld, %lld)", (long long)ds->n,
          (long long)ds->x_ne[0], (long long)ds->x_ne[1]);
    check_example(ds, 0, "the film was lovely .", 16, "lovely", 8);
    check_example(ds, 1, "honestly , the script was bland , and the story was boring , and the acting was dull .",
                  16, "bland", 8);
    check_example(ds, 2, "a truly clever start .", 16, "a beautiful film , truly clever , from start to finish", 8);
    /* BART: <s> text </s>, padded with <pad> (1); y is -100 past the target */
    int32_t x[4 * 16], y[16];
    CHECK(ds->get(ds, 0, x, y, err, sizeof err) == 0, "%s", err);
    int64_t ns = 0, nt = 0;
    for (int j = 0; j < 16; j++) ns += x[16 + j], nt += x[48 + j];
    CHECK(ns >= 3 && nt >= 3 && x[0] == 0 && x[ns - 1] == 2 && x[ns] == 1 && x[32] == 0 && x[32 + nt - 1] == 2 &&
          y[nt - 1] == 2 && y[nt] == -100 && y[15] == -100, "layout: %lld source, %lld target ids", (long long)ns,
          (long long)nt);
    /* example 1's source and example 2's target were cut: the last id is </s> */
    CHECK(ut_seq2seq_truncated(ds, 0) == 1 && ut_seq2seq_truncated(ds, 1) == 1, "truncated %lld %lld",
          (long long)ut_seq2seq_truncated(ds, 0), (long long)ut_seq2seq_truncated(ds, 1));
    CHECK(ds->get(ds, 1, x, y, err, sizeof err) == 0 && x[16 + 15] == 1 && x[15] == 2, "source cut to 16");
    CHECK(ds->get(ds, 2, x, y, err, sizeof err) == 0 && x[48 + 7] == 1 && x[48 + 8] == 0 && x[32 + 7] == 2 &&
          y[7] == 2 && y[8] == -100, "target cut to 8");
    const char *s0 = ut_seq2seq_text(ds, 0, 0), *t2 = ut_seq2seq_text(ds, 2, 1);
    CHECK(s0 && !strcmp(s0, "the film was lovely ."), "source text 0: '%s' (BOM and \\r dropped)", s0 ? s0 : "(null)");
    CHECK(t2 && !strcmp(t2, "a beautiful film , truly clever , from start to finish"), "target text 2");
    CHECK(!ut_seq2seq_text(ds, 3, 0) && !ut_seq2seq_text(ds, -1, 1) && !ut_seq2seq_text(ds, 0, 2), "out of range");
    CHECK(ds->get(ds, 3, x, y, err, sizeof err) != 0 && strstr(err, "out of range"), "get 3: %s", err);
    ut_dataset_free(ds);
    /* a dataset that is not seq2seq */
    ut_dataset other = {.name = "other", .n = 1};
    CHECK(!ut_seq2seq_text(&other, 0, 0) && ut_seq2seq_truncated(&other, 0) == 0, "not seq2seq");
}

static void test_tsv(void) {
    const char *p = tmp("pairs.tsv");
    write_text(p, "id\ttarget\tsource\n"
                  "7\tlovely\tthe film was lovely .\n"
                  "\n"
                  "8\tdull\tthe acting was dull .\r\n"
                  "9\tthe plot was lovely .\ta beautiful film , truly clever .\n");
    ut_seq2seq_opts o = {.max_source_len = 12, .max_target_len = 20};
    ut_dataset *ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 3 && ds->x_ne[1] == 20, "%s", err);
    if (ds) {
        check_example(ds, 0, "the film was lovely .", 12, "lovely", 20);
        check_example(ds, 1, "the acting was dull .", 12, "dull", 20);
        /* the ids transformers gives (tests/parity/fixtures/hf_bart_tok_ids.txt) */
        static const int32_t src[9] = {0, 68, 422, 356, 275, 310, 397, 261, 2};
        static const int32_t tgt[9] = {0, 87, 75, 72, 375, 277, 503, 261, 2};
        int32_t x[4 * 20], y[20];
        CHECK(ds->get(ds, 2, x, y, err, sizeof err) == 0, "%s", err);
        CHECK(!memcmp(x, src, sizeof src) && x[9] == 1 && x[20 + 8] == 1 && x[20 + 9] == 0 &&
              !memcmp(x + 40, tgt, sizeof tgt) && x[49] == 1 && x[60 + 8] == 1 && x[60 + 9] == 0 &&
              !memcmp(y, tgt, sizeof tgt) && y[9] == -100, "example 2 against transformers' ids");
        CHECK(ut_seq2seq_truncated(ds, 0) == 0 && ut_seq2seq_truncated(ds, 1) == 0, "nothing cut");
        const char *t1 = ut_seq2seq_text(ds, 1, 1);
        CHECK(t1 && !strcmp(t1, "dull"), "target text 1");
    }
    ut_dataset_free(ds);
    /* named columns */
    p = tmp("named.tsv");
    write_text(p, "document\tsummary\nthe plot was lovely .\tlovely plot\n");
    o = (ut_seq2seq_opts){.max_source_len = 12, .max_target_len = 6, .source_field = "document",
                          .target_field = "summary"};
    ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 1, "%s", err);
    if (ds) check_example(ds, 0, "the plot was lovely .", 12, "lovely plot", 6);
    ut_dataset_free(ds);
}

static void test_jsonl(void) {
    const char *p = tmp("pairs.jsonl");
    write_text(p, "{\"id\": 1, \"source\": \"the film was \\\"lovely\\\" .\", \"target\": \"lovely\"}\n"
                  "   \n"
                  "{\"target\": \"caf\\u00e9 \\ud83d\\ude00\", \"source\": \"a caf\xC3\xA9\\nstory\"}\r\n");
    ut_seq2seq_opts o = {.max_source_len = 24, .max_target_len = 10};
    ut_dataset *ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 2 && ds->x_ne[1] == 24, "%s", err);
    if (ds) {
        check_example(ds, 0, "the film was \"lovely\" .", 24, "lovely", 10);
        check_example(ds, 1, "a caf\xC3\xA9\nstory", 24, "caf\xC3\xA9 \xF0\x9F\x98\x80", 10);
        const char *s1 = ut_seq2seq_text(ds, 1, 0);
        CHECK(s1 && !strcmp(s1, "a caf\xC3\xA9\nstory"), "JSON escapes decoded");
    }
    ut_dataset_free(ds);
    /* .json: the same layout, other keys */
    p = tmp("pairs.json");
    write_text(p, "{\"src\": \"the plot was lovely .\", \"tgt\": \"lovely\"}");
    o = (ut_seq2seq_opts){.max_source_len = 24, .max_target_len = 10, .source_field = "src", .target_field = "tgt"};
    ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 1, "%s", err);
    if (ds) check_example(ds, 0, "the plot was lovely .", 24, "lovely", 10);
    ut_dataset_free(ds);
}

/* Example i's texts as read are src and tgt. */
static void check_texts(ut_dataset *ds, int64_t i, const char *src, const char *tgt) {
    const char *s = ut_seq2seq_text(ds, i, 0), *t = ut_seq2seq_text(ds, i, 1);
    CHECK(s && t && !strcmp(s, src) && !strcmp(t, tgt), "example %lld: '%s' -> '%s', want '%s' -> '%s'",
          (long long)i, s ? s : "(null)", t ? t : "(null)", src, tgt);
}

/* ds's columns are want */
static void check_columns(ut_dataset *ds, const char *want) {
    const char *got = ds->columns;
    CHECK(got && !strcmp(got, want), "columns '%s', want '%s'", got ? got : "(null)", want);
}

static void test_csv(void) {
    /* a byte-order mark, CRLF, quoted commas, a quoted newline, "" for a quote, a blank line, no final newline */
    const char *p = tmp("pairs.csv");
    write_text(p, "\xEF\xBB\xBFid,source,target\r\n"
                  "1,\"the film, it was lovely .\",lovely\r\n"
                  "\r\n"
                  "2,\"a caf\xC3\xA9\nstory\",\"he said \"\"dull\"\"\"\r\n"
                  "3,the acting was dull .,dull");
    ut_seq2seq_opts o = {.max_source_len = 16, .max_target_len = 12};
    ut_dataset *ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 3 && ds->x_ne[1] == 16, "%s", err);
    if (ds) {
        check_example(ds, 0, "the film, it was lovely .", 16, "lovely", 12);
        check_example(ds, 1, "a caf\xC3\xA9\nstory", 16, "he said \"dull\"", 12);
        check_example(ds, 2, "the acting was dull .", 16, "dull", 12);
        check_texts(ds, 0, "the film, it was lovely .", "lovely");
        check_texts(ds, 1, "a caf\xC3\xA9\nstory", "he said \"dull\"");
        check_texts(ds, 2, "the acting was dull .", "dull");
        check_columns(ds, "source 'source', target 'target'");
    }
    ut_dataset_free(ds);
    /* named columns, quoted header names, upper-case extension, a final newline that adds no example */
    p = tmp("NAMED.CSV");
    write_text(p, "\"summary\",\"doc, text\"\n\"lovely plot\",the plot was lovely .\n");
    o = (ut_seq2seq_opts){.max_source_len = 12, .max_target_len = 6, .source_field = "doc, text",
                          .target_field = "summary"};
    ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 1, "%s", err);
    if (ds) {
        check_example(ds, 0, "the plot was lovely .", 12, "lovely plot", 6);
        check_columns(ds, "source 'doc, text', target 'summary'");
    }
    ut_dataset_free(ds);
}

/* path with the default columns (NULL fields) opens with n examples whose first is (src, tgt), from columns */
static void expect_columns(const char *path, const char *text, int64_t n, const char *src, const char *tgt,
                           const char *columns) {
    write_text(path, text);
    ut_seq2seq_opts o = {.max_source_len = 16, .max_target_len = 16};
    ut_dataset *ds = ut_seq2seq_dataset_open(path, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == n, "%s: %s", path, err);
    if (ds) {
        check_example(ds, 0, src, 16, tgt, 16);
        check_texts(ds, 0, src, tgt);
        check_columns(ds, columns);
    }
    ut_dataset_free(ds);
}

static void test_default_columns(void) {
    /* run_summarization's: the first column the source, the second the target */
    expect_columns(tmp("d1.tsv"), "document\tsummary\nthe plot was lovely .\tlovely\n", 1, "the plot was lovely .",
                   "lovely", "source 'document', target 'summary'");
    expect_columns(tmp("d1.csv"), "article,highlights,id\n\"the plot, lovely .\",lovely,7\nx,y,8\n", 2,
                   "the plot, lovely .", "lovely", "source 'article', target 'highlights'");
    /* named "source" and "target" wherever they are */
    expect_columns(tmp("d2.tsv"), "id\ttarget\tsource\n7\tlovely\tthe film was lovely .\n", 1,
                   "the film was lovely .", "lovely", "source 'source', target 'target'");
    /* "target" first and no "source": the source is the first other column */
    expect_columns(tmp("d3.tsv"), "target\tx\nlovely\tthe film was lovely .\n", 1, "the film was lovely .",
                   "lovely", "source 'x', target 'target'");
    /* "source" second and no "target": the target is the first other column */
    expect_columns(tmp("d4.csv"), "x,source\nlovely,the film was lovely .\n", 1, "the film was lovely .", "lovely",
                   "source 'source', target 'x'");
    /* JSON Lines: the first object's keys in their order; later lines may order them otherwise */
    expect_columns(tmp("d5.jsonl"),
                   "\n{\"dialogue\": \"the film was lovely .\", \"summary\": \"lovely\", \"id\": \"a\"}\n"
                   "{\"id\": \"b\", \"summary\": \"dull\", \"dialogue\": \"the acting was dull .\"}\n",
                   2, "the film was lovely .", "lovely", "source 'dialogue', target 'summary'");
    expect_columns(tmp("d6.jsonl"), "{\"target\": \"lovely\", \"text\": \"the film was lovely .\"}\n", 1,
                   "the film was lovely .", "lovely", "source 'text', target 'target'");
    /* one field given, the other by default: never the same column */
    const char *p = tmp("d7.tsv");
    write_text(p, "document\tsummary\nthe plot was lovely .\tlovely\n");
    ut_seq2seq_opts o = {.max_source_len = 16, .max_target_len = 16, .source_field = "summary"};
    ut_dataset *ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 1, "%s", err);
    if (ds) {
        check_texts(ds, 0, "lovely", "the plot was lovely .");
        check_columns(ds, "source 'summary', target 'document'");
    }
    ut_dataset_free(ds);
    write_text(p, "target\tsource\nlovely\tthe plot was lovely .\n");
    o = (ut_seq2seq_opts){.max_source_len = 16, .max_target_len = 16, .source_field = "target", .target_field = ""};
    ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 1, "%s", err);
    if (ds) {
        check_texts(ds, 0, "lovely", "the plot was lovely .");
        check_columns(ds, "source 'target', target 'source'");
    }
    ut_dataset_free(ds);
    /* no columns to log: parallel files */
    const char *in = tmp("c_in.txt"), *tg = tmp("c_tg.txt");
    write_text(in, "a\n");
    write_text(tg, "b\n");
    ds = ut_seq2seq_dataset_open(in, tg, g_tok, &o, err, sizeof err);
    CHECK(ds && !ds->columns, "parallel files: %s", err);
    ut_dataset_free(ds);
}

static void test_translation(void) {
    /* run_translation's layout: {"translation": {"en": ..., "ro": ...}} */
    const char *p = tmp("wmt.jsonl");
    write_text(p, "{\"id\": \"0\", \"translation\": {\"en\": \"the film was lovely .\", \"ro\": \"lovely\"}}\n"
                  "{\"translation\": {\"ro\": \"dull\", \"en\": \"the acting was dull .\"}}\n"
                  /* a top-level key with the dotted name wins over the nested one */
                  "{\"translation.en\": \"a caf\xC3\xA9\", "
                  "\"translation\": {\"en\": \"nested\", \"ro\": \"story\"}}\n");
    ut_seq2seq_opts o = {.max_source_len = 16, .max_target_len = 8, .source_field = "translation.en",
                         .target_field = "translation.ro"};
    ut_dataset *ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 3, "%s", err);
    if (ds) {
        check_example(ds, 0, "the film was lovely .", 16, "lovely", 8);
        check_example(ds, 1, "the acting was dull .", 16, "dull", 8);
        check_example(ds, 2, "a caf\xC3\xA9", 16, "story", 8);
        check_texts(ds, 1, "the acting was dull .", "dull");
        check_texts(ds, 2, "a caf\xC3\xA9", "story");
        check_columns(ds, "source 'translation.en', target 'translation.ro'");
    }
    ut_dataset_free(ds);
    /* deeper: each dot a level; the target by default (the first object's "target") */
    p = tmp("deep.jsonl");
    write_text(p, "{\"a\": {\"b\": {\"en\": \"the plot was lovely .\"}}, \"target\": \"lovely\"}\n");
    o = (ut_seq2seq_opts){.max_source_len = 16, .max_target_len = 8, .source_field = "a.b.en"};
    ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 1, "%s", err);
    if (ds) {
        check_texts(ds, 0, "the plot was lovely .", "lovely");
        check_columns(ds, "source 'a.b.en', target 'target'");
    }
    ut_dataset_free(ds);
    /* in a TSV a dotted name is a column's name */
    p = tmp("dots.tsv");
    write_text(p, "translation.en\ttranslation.ro\nthe plot was lovely .\tlovely\n");
    o = (ut_seq2seq_opts){.max_source_len = 16, .max_target_len = 8, .source_field = "translation.en",
                          .target_field = "translation.ro"};
    ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 1, "%s", err);
    if (ds) check_texts(ds, 0, "the plot was lovely .", "lovely");
    ut_dataset_free(ds);
}

/* A .json file that is one JSON array (pandas' to_json(orient="records")): the JSON Lines' examples */
static void test_json_array(void) {
    const char *p = tmp("array.json");
    write_text(p, "\xEF\xBB\xBF [\n {\"document\": \"the film [was] lovely .\", \"summary\": \"lovely, \\\"x\\\"\"},\n"
                  "{\"document\": \"dull\", \"summary\": \"bad\"}, {\"document\": \"a\\nb\", \"summary\": \"c\"}\n]\n");
    ut_seq2seq_opts o = {.max_source_len = 24, .max_target_len = 10};
    ut_dataset *ds = ut_seq2seq_dataset_open(p, NULL, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 3 && ds->columns && !strcmp(ds->columns, "source 'document', target 'summary'"), "%s", err);
    if (ds) {
        check_example(ds, 0, "the film [was] lovely .", 24, "lovely, \"x\"", 10);
        check_example(ds, 1, "dull", 24, "bad", 10);
        check_example(ds, 2, "a\nb", 24, "c", 10);
    }
    ut_dataset_free(ds);
}

static void test_prefix_and_lowercase(void) {
    const char *in = tmp("p_in.txt"), *tg = tmp("p_tg.txt");
    write_text(in, "The Film Was LOVELY .\nA Caf\xC3\x89 \xC4\xB0s Here .\n");
    write_text(tg, "Lovely\nCAF\xC3\x89\n");
    ut_seq2seq_opts o = {.max_source_len = 32, .max_target_len = 8, .source_prefix = "Summarize: ",
                         .lowercase = true};
    ut_dataset *ds = ut_seq2seq_dataset_open(in, tg, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 2, "%s", err);
    if (!ds) return;
    /* the prefix is added as given, after lower-casing; U+0130 lower-cases to i + U+0307 */
    check_example(ds, 0, "Summarize: the film was lovely .", 32, "lovely", 8);
    check_example(ds, 1, "Summarize: a caf\xC3\xA9 i\xCC\x87s here .", 32, "caf\xC3\xA9", 8);
    const char *s0 = ut_seq2seq_text(ds, 0, 0), *t1 = ut_seq2seq_text(ds, 1, 1);
    CHECK(s0 && !strcmp(s0, "the film was lovely ."), "source text: lower-cased, no prefix: '%s'", s0 ? s0 : "");
    CHECK(t1 && !strcmp(t1, "caf\xC3\xA9"), "target text lower-cased");
    ut_dataset_free(ds);
    /* without lowercase the text is kept as is */
    o.lowercase = false;
    o.source_prefix = NULL;
    ds = ut_seq2seq_dataset_open(in, tg, g_tok, &o, err, sizeof err);
    CHECK(ds, "%s", err);
    if (ds) check_example(ds, 0, "The Film Was LOVELY .", 32, "Lovely", 8);
    ut_dataset_free(ds);
}

static void test_batch_trim(void) {
    /* 2 examples, max_len 6: source lengths 2 and 4, target lengths 5 and 1 */
    enum { C = 2, M = 6 };
    static const int slen[C] = {2, 4}, tlen[C] = {5, 1};
    int32_t x[C * 4 * M], y[C * M], want_x[C * 4 * M], want_y[C * M];
    for (int k = 0; k < C; k++)
        for (int j = 0; j < M; j++) {
            int32_t *e = x + k * 4 * M;
            e[j] = j < slen[k] ? 100 * k + j : 1;
            e[M + j] = j < slen[k];
            e[2 * M + j] = j < tlen[k] ? 100 * k + 50 + j : 1;
            e[3 * M + j] = j < tlen[k];
            y[k * M + j] = j < tlen[k] ? e[2 * M + j] : -100;
        }
    const int L = 5;
    for (int k = 0; k < C; k++) {
        for (int r = 0; r < 4; r++) memcpy(want_x + (k * 4 + r) * L, x + (k * 4 + r) * M, L * sizeof *x);
        memcpy(want_y + k * L, y + k * M, L * sizeof *y);
    }
    ut_batch b = {.count = C, .x = x, .y = y};
    int64_t got = ut_seq2seq_batch_trim(&b, M);
    CHECK(got == L, "L' %lld (longest target 5)", (long long)got);
    CHECK(!memcmp(x, want_x, C * 4 * L * sizeof *x), "x is (2, 4, 5) of the same rows");
    CHECK(!memcmp(y, want_y, C * L * sizeof *y), "y is (2, 5) of the same rows");
    /* a batch of one empty-mask example keeps one column; y may be NULL */
    int32_t z[4 * 3] = {0};
    ut_batch bz = {.count = 1, .x = z};
    CHECK(ut_seq2seq_batch_trim(&bz, 3) == 1, "at least 1");
    /* a dataset batch: trimming it gives the longest mask of the batch */
    const char *in = tmp("t_in.txt"), *tg = tmp("t_tg.txt");
    write_text(in, "a\nthe film was lovely .\n");
    write_text(tg, "the story was boring , and the acting was dull .\nb\n");
    ut_seq2seq_opts o = {.max_source_len = 10, .max_target_len = 40};
    ut_dataset *ds = ut_seq2seq_dataset_open(in, tg, g_tok, &o, err, sizeof err);
    CHECK(ds && ds->n == 2 && ds->x_ne[1] == 40, "%s", err);
    if (!ds) return;
    int32_t bx[2 * 4 * 40], by[2 * 40], row[4 * 40], ry[40];
    for (int k = 0; k < 2; k++) CHECK(ds->get(ds, k, bx + k * 160, by + k * 40, err, sizeof err) == 0, "%s", err);
    int64_t t0 = 0;
    for (int j = 0; j < 40; j++) t0 += bx[120 + j];
    ut_batch db = {.count = 2, .x = bx, .y = by};
    int64_t L2 = ut_seq2seq_batch_trim(&db, 40);
    CHECK(L2 == t0 && L2 < 40, "trimmed to %lld, the first target has %lld ids", (long long)L2, (long long)t0);
    bool same = true;
    for (int k = 0; k < 2; k++) {
        ds->get(ds, k, row, ry, err, sizeof err);
        for (int r = 0; r < 4; r++) same &= !memcmp(bx + (k * 4 + r) * L2, row + r * 40, (size_t)L2 * 4);
        same &= !memcmp(by + k * L2, ry, (size_t)L2 * 4);
    }
    CHECK(same, "trimmed dataset batch is (2, 4, L') and (2, L') of the same rows");
    ut_dataset_free(ds);
}

/* Opening path (and target) fails with a message holding want1 and want2. */
static void expect_error(const char *path, const char *target, const ut_seq2seq_opts *o, const char *want1,
                         const char *want2) {
    err[0] = 0;
    ut_dataset *ds = ut_seq2seq_dataset_open(path, target, g_tok, o, err, sizeof err);
    CHECK(!ds, "%s opened", path);
    CHECK(strstr(err, want1) && (!want2 || strstr(err, want2)), "want '%s' and '%s' in: %s", want1,
          want2 ? want2 : "", err);
    ut_dataset_free(ds);
}

static void test_bad_inputs(void) {
    ut_seq2seq_opts o = {.max_source_len = 16, .max_target_len = 16};
    const char *a = tmp("bad_in.txt"), *b = tmp("bad_tg.txt");
    write_text(a, "one\ntwo\nthree\n");
    write_text(b, "uno\r\ndos\r\n");
    expect_error(a, b, &o, "bad_in.txt has 3 lines", "bad_tg.txt has 2");
    write_text(a, "one\n\nthree\n");
    write_text(b, "uno\ndos\ntres\n");
    expect_error(a, b, &o, "bad_in.txt:2: empty source", NULL);
    write_text(a, "one\ntwo\nthree\n");
    write_text(b, "uno\ndos\n  \r\n");
    expect_error(a, b, &o, "bad_tg.txt:3: empty target", NULL);
    write_text(b, "uno\ndos\n\n");                       /* a blank last line is an empty target */
    expect_error(a, b, &o, "bad_tg.txt:3: empty target", NULL);
    write_text(b, "uno\ndos \xC3\x28 x\ntres\n");
    expect_error(a, b, &o, "bad_tg.txt:2: byte 4", "not valid UTF-8");
    FILE *f = fopen(b, "wb");                            /* a NUL byte (write_text stops at it) */
    if (f) fwrite("uno\ndos\ntr\0es\n", 1, 15, f), fclose(f);
    expect_error(a, b, &o, "bad_tg.txt:3: NUL byte at byte 2", NULL);
    write_text(a, "");
    write_text(b, "");
    expect_error(a, b, &o, "bad_in.txt: no examples", NULL);
    expect_error(tmp("missing.txt"), b, &o, "missing.txt", NULL);
    /* TSV */
    const char *t = tmp("bad.tsv");
    ut_seq2seq_opts named = {.max_source_len = 16, .max_target_len = 16, .target_field = "target"};
    write_text(t, "source\tsummary\nx\ty\n");   /* a target named: it must be there */
    expect_error(t, NULL, &named, "bad.tsv:1: no 'target' column", "columns found: 'source', 'summary'");
    write_text(t, "text\nx\n");
    expect_error(t, NULL, &o, "bad.tsv:1: one column ('text') for two texts", "source_field and target_field");
    write_text(t, "source\ttarget\nx\ty\nno tab here\n");
    expect_error(t, NULL, &o, "bad.tsv:3: missing tab", "expected 2 tab-separated fields");
    write_text(t, "source\ttarget\nx\ty\tz\n");
    expect_error(t, NULL, &o, "bad.tsv:2: too many tabs", "got 3");
    write_text(t, "source\ttarget\nx\ty\n\t\n \ty\n");
    expect_error(t, NULL, &o, "bad.tsv:4: empty source", NULL);
    write_text(t, "source\ttarget\nx\t\n");
    expect_error(t, NULL, &o, "bad.tsv:2: empty target", NULL);
    write_text(t, "source\ttarget\n\n");
    expect_error(t, NULL, &o, "bad.tsv: no examples after the header", NULL);
    write_text(t, "");
    expect_error(t, NULL, &o, "bad.tsv: empty file", "'source' and 'target'");
    write_text(t, "source\ttarget\nx\ty\xFF\n");
    expect_error(t, NULL, &o, "bad.tsv:2: byte 3", "not valid UTF-8");
    /* JSON Lines */
    const char *j = tmp("bad.jsonl");
    write_text(j, "{\"source\": \"x\", \"target\": \"y\"}\n[1, 2]\n");
    expect_error(j, NULL, &o, "bad.jsonl:2: an array, expected an object", NULL);
    write_text(j, "{\"source\": \"x\", \"summary\": \"y\"}\n");
    expect_error(j, NULL, &named, "bad.jsonl:1: no \"target\" key", "keys found: \"source\", \"summary\"");
    write_text(j, "{\"source\": \"x\", \"summary\": \"y\"}\n{\"source\": \"x\", \"target\": \"y\"}\n");
    expect_error(j, NULL, &o, "bad.jsonl:2: no \"summary\" key", "keys found: \"source\", \"target\"");
    write_text(j, "\n{\"translation\": {\"en\": \"x\", \"ro\": \"y\"}}\n");
    expect_error(j, NULL, &o, "bad.jsonl:2: one key (\"translation\") for two texts", "translation.en");
    write_text(j, "{}\n");
    expect_error(j, NULL, &o, "bad.jsonl:1: no keys for two texts", "source_field and target_field");
    write_text(j, "{\"source\": \"x\", \"target\": \"y\"}\n\n{\"source\": \"x\", \"target\": 5}\n");
    expect_error(j, NULL, &o, "bad.jsonl:3: \"target\" is a number, expected a string", NULL);
    write_text(j, "{\"source\": null, \"target\": \"y\"}\n");
    expect_error(j, NULL, &o, "bad.jsonl:1: \"source\" is null", NULL);
    write_text(j, "{\"source\": \"x\", \"target\": \"y\"\n");
    expect_error(j, NULL, &o, "bad.jsonl:1: not valid JSON", NULL);
    write_text(j, "{\"source\": \"x\", \"target\": \"y\"} trailing\n");
    expect_error(j, NULL, &o, "bad.jsonl:1: not valid JSON (at byte 31", NULL);
    write_text(j, "{\"source\": \"\", \"target\": \"y\"}\n");
    expect_error(j, NULL, &o, "bad.jsonl:1: empty source", NULL);
    write_text(j, "\n \n");
    expect_error(j, NULL, &o, "bad.jsonl: no examples", NULL);
    /* a .json file that is one array of objects: errors name the line an element starts on */
    const char *pj = tmp("pretty.json");
    write_text(pj, "[\n  {\"source\": \"x\", \"target\": \"y\"},\n\n  5\n]\n");
    expect_error(pj, NULL, &o, "pretty.json:4: a number, expected an object", "(a JSON array of objects");
    write_text(pj, "[\n  {\"source\": \"x\", \"target\": \"y\"},\n  {\"source\": \"x\"}]");
    expect_error(pj, NULL, &o, "pretty.json:3: no \"target\" key", NULL);
    write_text(pj, "[\n  {\"source\": \"x\", \"target\": \"y\"},\n]");
    expect_error(pj, NULL, &o, "pretty.json:3: not valid JSON (at byte", "one array of objects");
    write_text(pj, " [ ]\n");
    expect_error(pj, NULL, &o, "pretty.json: no examples (an empty array)", NULL);
    write_text(pj, "[{\"source\": \"x\",\n \"target\": \"\xC3(\"}]");
    expect_error(pj, NULL, &o, "pretty.json:2: byte 12 of the line: not valid UTF-8", NULL);
    /* nested JSON keys */
    ut_seq2seq_opts tr = {.max_source_len = 16, .max_target_len = 16, .source_field = "translation.en",
                          .target_field = "translation.ro"};
    write_text(j, "{\"translation\": {\"en\": \"x\", \"ro\": \"y\"}}\n{\"translation\": {\"de\": \"x\", "
                  "\"fr\": \"y\"}}\n");
    expect_error(j, NULL, &tr, "bad.jsonl:2: no \"en\" key in \"translation\"", "(keys found: \"de\", \"fr\")");
    write_text(j, "{\"translation\": {\"en\": \"x\"}}\n");
    expect_error(j, NULL, &tr, "bad.jsonl:1: no \"ro\" key in \"translation\"", "keys found: \"en\")");
    write_text(j, "{\"translation\": \"x\", \"id\": 1}\n");
    expect_error(j, NULL, &tr, "bad.jsonl:1: \"translation\" is a string, expected an object with the key \"en\"",
                 NULL);
    write_text(j, "{\"translation\": {\"en\": 5, \"ro\": \"y\"}}\n");
    expect_error(j, NULL, &tr, "bad.jsonl:1: \"translation.en\" is a number, expected a string", NULL);
    write_text(j, "{\"translation\": {\"en\": \"x\", \"ro\": {\"text\": \"y\"}}}\n");
    expect_error(j, NULL, &tr, "bad.jsonl:1: \"translation.ro\" is an object, expected a string", "dot");
    write_text(j, "{\"src\": \"x\", \"tgt\": \"y\"}\n");
    expect_error(j, NULL, &tr, "bad.jsonl:1: no \"translation.en\" key", "keys found: \"src\", \"tgt\"");
    write_text(j, "{\"translation\": {\"en\": \"\", \"ro\": \"y\"}}\n");
    expect_error(j, NULL, &tr, "bad.jsonl:1: empty source", NULL);
    /* CSV */
    const char *c = tmp("bad.csv");
    write_text(c, "source,target\nx,\"y\nz\n");
    expect_error(c, NULL, &o, "bad.csv:2: a quoted field is not closed", NULL);
    write_text(c, "source,target\n\"x\"y,z\n");
    expect_error(c, NULL, &o, "bad.csv:2: 'y' after a closing quote", NULL);
    /* the line a record starts on, after a quoted field over three lines */
    write_text(c, "source,target\n\"a\nb\nc\",x\ny\n");
    expect_error(c, NULL, &o, "bad.csv:5: missing comma", "expected 2 comma-separated fields as in the header, got 1");
    write_text(c, "source,target\r\n\"a\r\nb\",x\r\n\r\n\"p,q\",r,s\r\n");
    expect_error(c, NULL, &o, "bad.csv:5: too many commas", "got 3");
    write_text(c, "source,target\n\"a\nb\",x\n\"\",\"\"\"\"\n");
    expect_error(c, NULL, &o, "bad.csv:4: empty source", NULL);
    write_text(c, "source,target\nx,\" \n \"\n");
    expect_error(c, NULL, &o, "bad.csv:2: empty target", NULL);
    write_text(c, "text\nx\n");
    expect_error(c, NULL, &o, "bad.csv:1: one column ('text') for two texts", "source_field and target_field");
    write_text(c, "\n\ntext\nx\n");         /* blank lines before the header: its line is named */
    expect_error(c, NULL, &o, "bad.csv:3: one column ('text')", NULL);
    write_text(c, "source,\"sum,mary\"\nx,y\n");
    expect_error(c, NULL, &named, "bad.csv:1: no 'target' column", "columns found: 'source', 'sum,mary'");
    expect_error(c, NULL, &named, "comma-separated", NULL);
    write_text(c, "source,target\nx,\"y\n\xC3\x28\"\n");
    expect_error(c, NULL, &o, "bad.csv:3: byte 0 of the line: not valid UTF-8", NULL);
    f = fopen(c, "wb");
    if (f) fwrite("source,target\nx,y\x00z\n", 1, 19, f), fclose(f);
    expect_error(c, NULL, &o, "bad.csv:2: NUL byte at byte 3", NULL);
    write_text(c, "source,target\r\n\r\n");
    expect_error(c, NULL, &o, "bad.csv: no examples after the header", NULL);
    write_text(c, "\xEF\xBB\xBF\n");
    expect_error(c, NULL, &o, "bad.csv: empty file", "comma-separated");
    /* layout and options */
    const char *xml = tmp("data.xml");
    write_text(xml, "<source>x</source>\n");
    expect_error(xml, NULL, &o, "data.xml: unknown layout", ".tsv or .csv");
    ut_seq2seq_opts small = {.max_source_len = 1, .max_target_len = 16};
    expect_error(a, b, &small, "max_source_len must be in [2, 1e9]", NULL);
    small = (ut_seq2seq_opts){.max_source_len = 16, .max_target_len = 2};
    expect_error(a, b, &small, "max_target_len 2", "no room");
    expect_error(a, b, NULL, "bad_in.txt", "options");
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(g_dir, sizeof g_dir, "utrain-s2s")) return 1;
    g_tok = ut_tokenizer_load(BART, err, sizeof err);
    CHECK(g_tok, "%s", err);
    if (!g_tok) return tp_finish(1, g_dir);
    CHECK(ut_tokenizer_special_id(g_tok, "pad") == 1 && ut_tokenizer_special_id(g_tok, "bos") == 0 &&
          ut_tokenizer_special_id(g_tok, "eos") == 2, "BART specials <s> 0, <pad> 1, </s> 2");
    RUN(test_parallel_files);
    RUN(test_tsv);
    RUN(test_jsonl);
    RUN(test_csv);
    RUN(test_default_columns);
    RUN(test_translation);
    RUN(test_json_array);
    RUN(test_prefix_and_lowercase);
    RUN(test_batch_trim);
    RUN(test_bad_inputs);
    ut_tokenizer_free(g_tok);
    return tp_finish(TEST_SUMMARY(), g_dir);
}
