/* The token-classification dataset (src/data/tagged.c) with the tiny BERT
 * (WordPiece), RoBERTa (byte-level BPE) and T5 (Unigram) fixtures'
 * tokenizers: JSON Lines, a JSON array and CoNLL text give the planes
 * transformers' run_ner.py makes (each word encoded alone, its pieces
 * between the tokenizer's special tokens, the tag's class at the first
 * piece, -100 elsewhere), checked against ids looked up by hand and
 * against each word encoded alone here; the tag list (sorted strings,
 * integers by value, or given), label_all_tokens with run_ner's B- to I-
 * mapping, truncation, files without tags, the keys taken by default, and
 * every bad input gives a message naming the file and line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "test.h"
#include "utrain/base.h"
#include "utrain/data.h"

#define BERT "tests/parity/fixtures/hf_bert_tiny"
#define ROBERTA "tests/parity/fixtures/hf_roberta_tiny"
#define T5 "tests/parity/fixtures/t5_unigram"

enum { CAP = 64, IGN = -100 };

static char err[1024];
static char g_dir[256];
static ut_tokenizer *g_bert, *g_roberta;

static const char *tmp(const char *name) { return tp_path(g_dir, name); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f, "cannot write %s", path);
    if (!f) return;
    fwrite(text, 1, strlen(text), f);
    fclose(f);
}

static int32_t tok_id(ut_tokenizer *t, const char *token) {
    int32_t id = ut_tokenizer_token_id(t, token);
    CHECK(id >= 0, "no token '%s'", token);
    return id;
}

/* word encoded alone without special tokens (a space before it: space) into ids; its count */
static int64_t pieces(ut_tokenizer *t, const char *word, bool space, int32_t *ids, int64_t cap) {
    char text[256];
    snprintf(text, sizeof text, "%s%s", space ? " " : "", word);
    ut_tok_encoding e = {0};
    ut_tok_opts o = {.no_special = true};
    char why[256];
    int rc = ut_tokenizer_encode(t, text, NULL, &o, &e, why, sizeof why);
    CHECK(rc == 0, "encode '%s': %s", text, why);
    int64_t len = rc ? 0 : e.len;
    CHECK(len <= cap, "'%s': %lld pieces", text, (long long)len);
    if (len > cap) len = cap;
    if (len) memcpy(ids, e.ids, (size_t)len * sizeof *ids);
    ut_tok_encoding_free(&e);
    return len;
}

/* What a sentence should be: the tokenizer and its special tokens around
 * the words (pre, suf: at most 2 each), the first piece's class of each
 * word (cls) and that of its later pieces (later, NULL: -100). */
typedef struct {
    ut_tokenizer *t;
    int32_t pre[2], suf[2];
    int npre, nsuf;
    bool space;
} layout;

static layout bert_layout(void) {
    return (layout){.t = g_bert, .pre = {tok_id(g_bert, "[CLS]")}, .suf = {tok_id(g_bert, "[SEP]")}, .npre = 1,
                    .nsuf = 1};
}

static layout roberta_layout(void) {
    return (layout){.t = g_roberta, .pre = {tok_id(g_roberta, "<s>")}, .suf = {tok_id(g_roberta, "</s>")},
                    .npre = 1, .nsuf = 1, .space = true};
}

/* Example i of ds against the layout of words (nw) with classes cls and
 * later; *cut gets whether pieces were left out. */
static void check_sentence(ut_dataset *ds, int64_t i, const layout *lo, const char *const *words, int nw,
                           const int32_t *cls, const int32_t *later, bool *cut) {
    const int64_t L = ds->x_ne[1];
    CHECK(L <= CAP && ds->y_ne[0] == L, "L %lld", (long long)L);
    if (L > CAP) return;
    int32_t x[3 * CAP], y[CAP], ids[CAP], lab[CAP], p[CAP], pad = ut_tokenizer_special_id(lo->t, "pad");
    CHECK(ds->get(ds, i, x, y, err, sizeof err) == 0, "get %lld: %s", (long long)i, err);
    int64_t len = 0, budget = L - lo->npre - lo->nsuf, used = 0;
    for (int q = 0; q < lo->npre; q++) ids[len] = lo->pre[q], lab[len++] = IGN;
    *cut = false;
    for (int w = 0; w < nw && !*cut; w++) {
        int64_t np = pieces(lo->t, words[w], lo->space, p, CAP);
        if (used + np > budget) np = budget - used, *cut = true;
        for (int64_t q = 0; q < np; q++) ids[len] = p[q], lab[len++] = q == 0 ? cls[w] : later ? later[w] : IGN;
        used += np;
    }
    for (int q = 0; q < lo->nsuf; q++) ids[len] = lo->suf[q], lab[len++] = IGN;
    bool ok = len <= L;
    for (int64_t j = 0; j < L && ok; j++) {
        ok &= x[j] == (j < len ? ids[j] : (pad >= 0 ? pad : 0)) && x[L + j] == 0 && x[2 * L + j] == (j < len);
        ok &= y[j] == (j < len ? lab[j] : IGN);
    }
    CHECK(ok, "example %lld ('%s' ...) differs from its words encoded alone (%lld ids)", (long long)i, words[0],
          (long long)len);
    int64_t got = 0;
    const char *const *seen = ut_tagged_words(ds, i, &got);
    CHECK(seen && got == nw, "example %lld: %lld words, expected %d", (long long)i, (long long)got, nw);
    for (int w = 0; seen && w < nw && w < got; w++)
        CHECK(!strcmp(seen[w], words[w]), "example %lld word %d: '%s', expected '%s'", (long long)i, w, seen[w],
              words[w]);
}

static ut_dataset *open_ok(const char *path, ut_tokenizer *t, const ut_tagged_opts *o) {
    ut_dataset *ds = ut_tagged_dataset_open(path, t, o, err, sizeof err);
    CHECK(ds, "%s: %s", path, err);
    return ds;
}

static void check_names(const ut_dataset *ds, const char *const *names, int count) {
    CHECK(ds->num_classes == count, "%lld classes, expected %d", (long long)ds->num_classes, count);
    for (int k = 0; k < count && k < ds->num_classes && ds->label_names; k++)
        CHECK(!strcmp(ds->label_names[k], names[k]), "class %d is '%s', expected '%s'", k, ds->label_names[k],
              names[k]);
    CHECK(count == 0 ? !ds->label_names : ds->label_names != NULL, "label_names");
}

static void check_shape(const ut_dataset *ds, int64_t n, int64_t L, ut_tokenizer *t) {
    CHECK(ds->n == n && ds->x_ndim == 2 && ds->x_ne[0] == 3 && ds->x_ne[1] == L && ds->y_ndim == 1 &&
          ds->y_ne[0] == L && ds->x_dtype == UT_I32 && ds->y_dtype == UT_I32 && ds->token_planes &&
          ds->token_labels && !ds->seq2seq && ut_tok_planes(ds) && ds->vocab_size == ut_tokenizer_vocab_size(t) &&
          !ds->regression && !ds->multi_label, "n %lld, x (%lld, %lld), y (%lld)", (long long)ds->n,
          (long long)ds->x_ne[0], (long long)ds->x_ne[1], (long long)ds->y_ne[0]);
}

/* ---- the sentences of the tests (tags sorted: B-LOC 0, B-MISC 1, B-PER 2, I-PER 3, O 4) ---- */

static const char *const NAMES[] = {"B-LOC", "B-MISC", "B-PER", "I-PER", "O"};
static const char *const S0[] = {"the", "film", "was", "great!"};   /* great! : great, ! */
static const int32_t C0[] = {4, 1, 4, 2};
static const char *const S1[] = {"i", "loved", "this", "movie"};
static const int32_t C1[] = {2, 3, 4, 0};
static const char *const S2[] = {"dull"};
static const int32_t C2[] = {4};

static const char SENTENCES_JSONL[] =
    "{\"tokens\": [\"the\", \"film\", \"was\", \"great!\"], \"ner_tags\": [\"O\", \"B-MISC\", \"O\", \"B-PER\"]}\n"
    "{\"tokens\": [\"i\", \"loved\", \"this\", \"movie\"], \"ner_tags\": [\"B-PER\", \"I-PER\", \"O\", \"B-LOC\"]}\r\n"
    "\n"
    "{\"tokens\": [\"dull\"], \"ner_tags\": [\"O\"]}";

/* the same as CoNLL-2003 writes it: word, POS, chunk, NER; CRLF lines,
 * -DOCSTART-, several blank lines, tabs, no blank line at the end */
static const char SENTENCES_CONLL[] =
    "\xEF\xBB\xBF-DOCSTART- -X- -X- O\n"
    "\n"
    "the DT B-NP O\n"
    "film NN I-NP B-MISC\r\n"
    "was\tVBD\tB-VP\tO\n"
    "great! JJ B-ADJP B-PER\n"
    "\r\n"
    "\n"
    "  \n"
    "i PRP B-NP B-PER\n"
    "loved VBD B-VP I-PER\n"
    "this DT B-NP O  \n"
    "movie NN I-NP B-LOC\n"
    "-DOCSTART- -X- -X- O\n"
    "dull JJ B-ADJP O";

static void test_jsonl_and_conll(void) {
    const char *j = tmp("train.jsonl"), *c = tmp("train.txt");
    write_text(j, SENTENCES_JSONL);
    write_text(c, SENTENCES_CONLL);
    ut_tagged_opts o = {.max_len = 12};
    layout lo = bert_layout();
    for (int f = 0; f < 2; f++) {
        ut_dataset *ds = open_ok(f ? c : j, g_bert, &o);
        if (!ds) continue;
        check_shape(ds, 3, 12, g_bert);
        check_names(ds, NAMES, 5);
        CHECK(!ds->unlabeled && ut_tagged_truncated(ds) == 0, "labeled, nothing cut");
        CHECK(ds->columns && !strcmp(ds->columns, f ? "CoNLL: the word first, the tag last"
                                                    : "words 'tokens', tags 'ner_tags'"), "columns '%s'",
              ds->columns ? ds->columns : "(null)");
        bool cut;
        check_sentence(ds, 0, &lo, S0, 4, C0, NULL, &cut);
        check_sentence(ds, 1, &lo, S1, 4, C1, NULL, &cut);
        check_sentence(ds, 2, &lo, S2, 1, C2, NULL, &cut);
        /* by hand: [CLS] the film was great ! [SEP] [PAD]..., "!" a later piece */
        int32_t x[36], y[12];
        CHECK(ds->get(ds, 0, x, y, err, sizeof err) == 0, "%s", err);
        const int32_t ids[7] = {2, tok_id(g_bert, "the"), tok_id(g_bert, "film"), tok_id(g_bert, "was"),
                                tok_id(g_bert, "great"), tok_id(g_bert, "!"), 3};
        const int32_t lab[7] = {IGN, 4, 1, 4, 2, IGN, IGN};
        bool ok = true;
        for (int q = 0; q < 12; q++)
            ok &= x[q] == (q < 7 ? ids[q] : 0) && x[12 + q] == 0 && x[24 + q] == (q < 7) && y[q] == (q < 7 ? lab[q] : IGN);
        CHECK(ok, "%s: sentence 0 by hand: ids %d %d %d %d %d %d %d, y %d %d %d %d %d %d", f ? "CoNLL" : "JSON",
              x[0], x[1], x[2], x[3], x[4], x[5], x[6], y[1], y[2], y[3], y[4], y[5], y[6]);
        CHECK(ds->get(ds, 3, x, y, err, sizeof err) != 0 && strstr(err, "out of range"), "get 3: %s", err);
        CHECK(!ut_tagged_words(ds, 3, NULL) && !ut_tagged_words(ds, -1, NULL), "words out of range");
        ut_dataset_free(ds);
    }
    /* a dataset that is not one of these */
    ut_dataset other = {.name = "other", .n = 1};
    int64_t nw = 7;
    CHECK(!ut_tagged_words(&other, 0, &nw) && nw == 0 && ut_tagged_truncated(&other) == 0, "not tagged");
}

/* a dev file takes the train file's list, in its order */
static void test_dev_names(void) {
    const char *d = tmp("dev.jsonl");
    write_text(d, "{\"tokens\": [\"the\", \"plot\"], \"ner_tags\": [\"O\", \"B-LOC\"]}\n"
                  "{\"tokens\": [\"this\", \"sequel\"], \"ner_tags\": [\"O\", \"O\"]}\n");
    static const char *const given[] = {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"};
    ut_tagged_opts o = {.max_len = 8, .names = given, .nnames = 5};
    ut_dataset *ds = open_ok(d, g_bert, &o);
    if (ds) {
        check_names(ds, given, 5);
        CHECK(ds->label_names != given, "the dataset keeps its own copy of the names");
        layout lo = bert_layout();
        bool cut;
        check_sentence(ds, 0, &lo, (const char *const[]){"the", "plot"}, 2, (const int32_t[]){0, 3}, NULL, &cut);
        check_sentence(ds, 1, &lo, (const char *const[]){"this", "sequel"}, 2, (const int32_t[]){0, 0}, NULL, &cut);
        ut_dataset_free(ds);
    }
    /* a tag the list lacks: its line, the tag and the known tags */
    write_text(d, "{\"tokens\": [\"the\"], \"ner_tags\": [\"O\"]}\n"
                  "{\"tokens\": [\"this\", \"sequel\"], \"ner_tags\": [\"O\", \"B-MISC\"]}\n");
    CHECK(!ut_tagged_dataset_open(d, g_bert, &o, err, sizeof err), "unknown tag");
    CHECK(strstr(err, "dev.jsonl:2: tag 'B-MISC' is not one of the 5 tags of the train file (O, B-PER, I-PER, "
                      "B-LOC, I-LOC)"), "%s", err);
    const char *c = tmp("dev.conll");
    write_text(c, "the O\nplot B-LOC\n\nthis O\nsequel B-MISC\n");
    CHECK(!ut_tagged_dataset_open(c, g_bert, &o, err, sizeof err) && strstr(err, "dev.conll:5: tag 'B-MISC'"),
          "%s", err);
    static const char *const many[] = {"O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"};
    o.names = many;
    o.nnames = 7;
    CHECK(!ut_tagged_dataset_open(c, g_bert, &o, err, sizeof err) && strstr(err, "of the 7 tags") &&
          strstr(err, "(O, B-PER, I-PER, B-LOC, I-LOC, ...)"), "%s", err);
    o.nnames = 0;
    CHECK(!ut_tagged_dataset_open(c, g_bert, &o, err, sizeof err) && strstr(err, "dev.conll: an empty tag list"),
          "%s", err);
}

/* integer tags (a dataset's ClassLabel ids): sorted by value, names in decimal */
static void test_integer_tags(void) {
    const char *j = tmp("ints.jsonl");
    write_text(j, "{\"id\": \"0\", \"tokens\": [\"the\", \"film\", \"was\"], \"ner_tags\": [12, 3, 0]}\n"
                  "{\"id\": \"1\", \"tokens\": [\"dull\", \"!\"], \"ner_tags\": [3, 1e1]}\n");
    ut_tagged_opts o = {.max_len = 8};
    ut_dataset *ds = open_ok(j, g_bert, &o);
    static const char *const ints[] = {"0", "3", "10", "12"};
    if (ds) {
        check_names(ds, ints, 4);
        layout lo = bert_layout();
        bool cut;
        check_sentence(ds, 0, &lo, (const char *const[]){"the", "film", "was"}, 3, (const int32_t[]){3, 1, 0},
                       NULL, &cut);
        check_sentence(ds, 1, &lo, (const char *const[]){"dull", "!"}, 2, (const int32_t[]){1, 2}, NULL, &cut);
        ut_dataset_free(ds);
    }
    /* a dev file with the train file's list finds its integers by name */
    o.names = ints;
    o.nnames = 4;
    write_text(j, "{\"tokens\": [\"the\", \"plot\"], \"ner_tags\": [10, 0]}\n");
    ds = open_ok(j, g_bert, &o);
    if (ds) {
        layout lo = bert_layout();
        bool cut;
        check_sentence(ds, 0, &lo, (const char *const[]){"the", "plot"}, 2, (const int32_t[]){2, 0}, NULL, &cut);
        ut_dataset_free(ds);
    }
    write_text(j, "{\"tokens\": [\"the\", \"plot\"], \"ner_tags\": [10, 7]}\n");
    CHECK(!ut_tagged_dataset_open(j, g_bert, &o, err, sizeof err) && strstr(err, "ints.jsonl:1: tag '7' is not one"),
          "%s", err);
}

/* label_all_tokens: later pieces carry the class, B-X as I-X where the list has I-X */
static void test_label_all_tokens(void) {
    const char *j = tmp("all.jsonl");
    write_text(j, "{\"tokens\": [\"great!\", \"film,.\", \"i\", \"dull!\", \"was!\"], "
                  "\"ner_tags\": [\"B-PER\", \"B-MISC\", \"O\", \"I-PER\", \"O\"]}\n");
    ut_tagged_opts o = {.max_len = 16, .label_all_tokens = true};
    ut_dataset *ds = open_ok(j, g_bert, &o);
    if (!ds) return;
    static const char *const names[] = {"B-MISC", "B-PER", "I-PER", "O"};
    check_names(ds, names, 4);
    layout lo = bert_layout();
    bool cut;
    /* B-PER's later pieces I-PER (2); B-MISC has no I-MISC: stays 0 */
    check_sentence(ds, 0, &lo, (const char *const[]){"great!", "film,.", "i", "dull!", "was!"}, 5,
                   (const int32_t[]){1, 0, 3, 2, 3}, (const int32_t[]){2, 0, 3, 2, 3}, &cut);
    int32_t x[48], y[16];
    CHECK(ds->get(ds, 0, x, y, err, sizeof err) == 0, "%s", err);
    const int32_t want[13] = {IGN, 1, 2, 0, 0, 0, 3, 2, 2, 3, 3, IGN, IGN};
    bool ok = true;
    for (int q = 0; q < 13; q++) ok &= y[q] == want[q];
    CHECK(ok, "y %d %d %d %d %d %d %d %d %d %d %d %d", y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7], y[8], y[9],
          y[10], y[11]);
    ut_dataset_free(ds);
    /* run_ner's mapping replaces every "B-" of the name */
    write_text(j, "{\"tokens\": [\"great!\"], \"ner_tags\": [\"B-X-B-Y\"]}\n{\"tokens\": [\"i\"], \"ner_tags\": "
                  "[\"I-X-I-Y\"]}\n");
    ds = open_ok(j, g_bert, &o);
    if (!ds) return;
    CHECK(ds->get(ds, 0, x, y, err, sizeof err) == 0 && y[1] == 0 && y[2] == 1, "B-X-B-Y -> I-X-I-Y: %d %d", y[1],
          y[2]);
    ut_dataset_free(ds);
}

/* max_len cuts a word in the middle and drops the words after it */
static void test_truncation(void) {
    const char *c = tmp("cut.conll");
    write_text(c, "the O\nfilm,. B-MISC\nwas O\ndull O\n\n"  /* 1 + 3 + 1 + 1 pieces: cut in film,. */
                  "i B-PER\nloved O\n\n"                     /* fits exactly: 2 + 2 specials = 4 */
                  "this O\nfilm O\nwas O\n\n"                /* 3 pieces: the last dropped */
                  "dull O\n");
    ut_tagged_opts o = {.max_len = 4};
    ut_dataset *ds = open_ok(c, g_bert, &o);
    if (!ds) return;
    CHECK(ds->n == 4 && ut_tagged_truncated(ds) == 2, "n %lld, truncated %lld", (long long)ds->n,
          (long long)ut_tagged_truncated(ds));
    layout lo = bert_layout();
    bool cut;
    check_sentence(ds, 0, &lo, (const char *const[]){"the", "film,.", "was", "dull"}, 4,
                   (const int32_t[]){2, 0, 2, 2}, NULL, &cut);
    CHECK(cut, "sentence 0 cut");
    int32_t x[12], y[4];
    CHECK(ds->get(ds, 0, x, y, err, sizeof err) == 0 && x[0] == 2 && x[1] == tok_id(g_bert, "the") &&
          x[2] == tok_id(g_bert, "film") && x[3] == 3 && y[1] == 2 && y[2] == 0 && y[3] == IGN,
          "cut in the middle of 'film,.': %d %d %d %d", x[0], x[1], x[2], x[3]);
    check_sentence(ds, 1, &lo, (const char *const[]){"i", "loved"}, 2, (const int32_t[]){1, 2}, NULL, &cut);
    CHECK(!cut, "sentence 1 fits");
    check_sentence(ds, 2, &lo, (const char *const[]){"this", "film", "was"}, 3, (const int32_t[]){2, 2, 2}, NULL,
                   &cut);
    CHECK(cut, "sentence 2 cut");
    ut_dataset_free(ds);
    /* max_len must hold the special tokens and one token */
    o.max_len = 2;
    CHECK(!ut_tagged_dataset_open(c, g_bert, &o, err, sizeof err) && strstr(err, "cut.conll: max_len 2") &&
          strstr(err, "2 special tokens"), "%s", err);
    o.max_len = 0;
    CHECK(!ut_tagged_dataset_open(c, g_bert, &o, err, sizeof err) && strstr(err, "cut.conll: max_len"), "%s", err);
    CHECK(!ut_tagged_dataset_open(c, g_bert, NULL, err, sizeof err) && strstr(err, "cut.conll"), "%s", err);
}

/* files without tags: class 0 at the first pieces, ds->unlabeled */
static void test_unlabeled(void) {
    const char *j = tmp("test.jsonl"), *c = tmp("test.conll");
    write_text(j, "{\"id\": \"0\", \"tokens\": [\"the\", \"film\", \"was\", \"great!\"]}\n"
                  "{\"id\": \"1\", \"tokens\": [\"dull\"]}\n");
    write_text(c, "the\nfilm\nwas\ngreat!\n\ndull\n\n");
    layout lo = bert_layout();
    static const int32_t zero[4] = {0, 0, 0, 0};
    for (int f = 0; f < 2; f++) {
        ut_tagged_opts o = {.max_len = 10, .label_all_tokens = true};
        ut_dataset *ds = open_ok(f ? c : j, g_bert, &o);
        if (!ds) continue;
        check_shape(ds, 2, 10, g_bert);
        CHECK(ds->unlabeled, "unlabeled");
        check_names(ds, NULL, 0);
        CHECK(ds->columns && !strcmp(ds->columns, f ? "CoNLL: words without tags (to predict)"
                                                    : "words 'tokens', no tags 'ner_tags' (to predict)"),
              "columns '%s'", ds->columns ? ds->columns : "(null)");
        bool cut;
        check_sentence(ds, 0, &lo, S0, 4, zero, NULL, &cut);
        check_sentence(ds, 1, &lo, S2, 1, zero, NULL, &cut);
        ut_dataset_free(ds);
        /* with the train file's list: its classes, for the predictions */
        o.names = NAMES;
        o.nnames = 5;
        ds = open_ok(f ? c : j, g_bert, &o);
        if (!ds) continue;
        CHECK(ds->unlabeled, "unlabeled with names");
        check_names(ds, NAMES, 5);
        check_sentence(ds, 0, &lo, S0, 4, zero, NULL, &cut);
        ut_dataset_free(ds);
    }
}

/* a .json file that is one array of objects; errors name an element's line */
static void test_json_array(void) {
    const char *j = tmp("train.json");
    write_text(j, "[\n  {\"tokens\": [\"the\", \"film\", \"was\", \"great!\"],\n"
                  "   \"ner_tags\": [\"O\", \"B-MISC\", \"O\", \"B-PER\"]},\n"
                  "  {\"tokens\": [\"i\", \"loved\", \"this\", \"movie\"], \"ner_tags\": [\"B-PER\", \"I-PER\", "
                  "\"O\", \"B-LOC\"]},\n"
                  "  {\"tokens\": [\"dull\"], \"ner_tags\": [\"O\"]}\n]\n");
    ut_tagged_opts o = {.max_len = 12};
    ut_dataset *ds = open_ok(j, g_bert, &o);
    if (ds) {
        check_shape(ds, 3, 12, g_bert);
        check_names(ds, NAMES, 5);
        layout lo = bert_layout();
        bool cut;
        check_sentence(ds, 0, &lo, S0, 4, C0, NULL, &cut);
        check_sentence(ds, 1, &lo, S1, 4, C1, NULL, &cut);
        check_sentence(ds, 2, &lo, S2, 1, C2, NULL, &cut);
        ut_dataset_free(ds);
    }
    write_text(j, "[\n  {\"tokens\": [\"the\"], \"ner_tags\": [\"O\"]},\n\n  {\"tokens\": [\"the\"],\n"
                  "   \"ner_tags\": [\"O\", \"O\"]}\n]");
    CHECK(!ut_tagged_dataset_open(j, g_bert, &o, err, sizeof err) &&
          strstr(err, "train.json:4: 1 words (\"tokens\") but 2 tags (\"ner_tags\")"), "%s", err);
    write_text(j, "[{\"tokens\": [\"the\"], \"ner_tags\": [\"O\"]},\n 7]");
    CHECK(!ut_tagged_dataset_open(j, g_bert, &o, err, sizeof err) &&
          strstr(err, "train.json:2: a number, expected an object") && strstr(err, "JSON array"), "%s", err);
    write_text(j, "[{\"tokens\": [\"the\"], \"ner_tags\": [\"O\"]},\n {]");
    CHECK(!ut_tagged_dataset_open(j, g_bert, &o, err, sizeof err) && strstr(err, "train.json:2: not valid JSON"),
          "%s", err);
    write_text(j, " [ ] ");
    CHECK(!ut_tagged_dataset_open(j, g_bert, &o, err, sizeof err) && strstr(err, "train.json: no sentences"), "%s",
          err);
}

/* RoBERTa: each word with a space before it (Ġ), <s> ... </s>, <pad> 1 */
static void test_roberta(void) {
    const char *j = tmp("roberta.jsonl");
    write_text(j, SENTENCES_JSONL);
    ut_tagged_opts o = {.max_len = 24};
    ut_dataset *ds = open_ok(j, g_roberta, &o);
    if (!ds) return;
    check_shape(ds, 3, 24, g_roberta);
    layout lo = roberta_layout();
    bool cut;
    check_sentence(ds, 0, &lo, S0, 4, C0, NULL, &cut);
    check_sentence(ds, 1, &lo, S1, 4, C1, NULL, &cut);
    check_sentence(ds, 2, &lo, S2, 1, C2, NULL, &cut);
    /* by hand: <s> Ġthe Ġfilm Ġwas, then "great!" in several pieces (the first B-PER 2, the next -100) */
    int32_t x[72], y[24], p[CAP];
    CHECK(ds->get(ds, 0, x, y, err, sizeof err) == 0, "%s", err);
    int64_t at = 1 + pieces(g_roberta, "the", true, p, CAP) + pieces(g_roberta, "film", true, p, CAP) +
                 pieces(g_roberta, "was", true, p, CAP);
    int64_t ngreat = pieces(g_roberta, "great!", true, p, CAP);
    const char *first = ut_tokenizer_token(g_roberta, x[at]);
    CHECK(x[0] == 0 && x[1] == tok_id(g_roberta, "\xC4\xA0the") && first && !strncmp(first, "\xC4\xA0", 2) &&
          ngreat > 1 && y[1] == 4 && y[at] == 2 && y[at + 1] == IGN && ut_tokenizer_special_id(g_roberta, "pad") == 1 &&
          x[23] == 1 && x[2 * 24 + 23] == 0, "roberta layout: %d %d, '%s' at %lld, great! %lld pieces", x[0], x[1],
          first ? first : "(null)", (long long)at, (long long)ngreat);
    int64_t len = 0;
    while (len < 24 && x[48 + len]) len++;
    CHECK(len >= 3 && x[len - 1] == 2, "</s> last (%lld ids)", (long long)len);
    ut_dataset_free(ds);
}

/* T5 (Unigram): no prefix, </s> after the words */
static void test_t5(void) {
    ut_tokenizer *t5 = ut_tokenizer_load(T5, err, sizeof err);
    CHECK(t5, "%s", err);
    if (!t5) return;
    const char *j = tmp("t5.jsonl");
    write_text(j, "{\"tokens\": [\"the\", \"film\"], \"ner_tags\": [\"O\", \"B-MISC\"]}\n");
    ut_tagged_opts o = {.max_len = 10};
    ut_dataset *ds = open_ok(j, t5, &o);
    if (ds) {
        int32_t eos = ut_tokenizer_special_id(t5, "eos");
        layout lo = {.t = t5, .suf = {eos}, .nsuf = 1};
        bool cut;
        check_sentence(ds, 0, &lo, (const char *const[]){"the", "film"}, 2, (const int32_t[]){1, 0}, NULL, &cut);
        ut_dataset_free(ds);
    }
    ut_tokenizer_free(t5);
}

/* a word the tokenizer drops gets no label position; the labeled positions
 * are the sentence's first words that kept a piece */
static void test_empty_words(void) {
    const char *j = tmp("empty.jsonl");
    write_text(j, "{\"tokens\": [\"the\", \" \", \"film\", \"\"], \"ner_tags\": [\"O\", \"B-PER\", \"B-MISC\", \"O\"]}\n"
                  "{\"tokens\": [], \"ner_tags\": []}\n");
    ut_tagged_opts o = {.max_len = 8};
    ut_dataset *ds = open_ok(j, g_bert, &o);
    if (!ds) return;
    CHECK(ds->n == 2, "n %lld (an empty sentence is an example)", (long long)ds->n);
    int32_t x[24], y[8];
    CHECK(ds->get(ds, 0, x, y, err, sizeof err) == 0, "%s", err);
    CHECK(x[0] == 2 && x[1] == tok_id(g_bert, "the") && x[2] == tok_id(g_bert, "film") && x[3] == 3 && x[4] == 0 &&
          y[0] == IGN && y[1] == 2 && y[2] == 0 && y[3] == IGN, "zero-piece words: %d %d %d %d, y %d %d", x[0], x[1],
          x[2], x[3], y[1], y[2]);
    int64_t nw = 0;
    CHECK(ut_tagged_words(ds, 0, &nw) && nw == 4, "4 words kept as read (%lld)", (long long)nw);
    CHECK(ds->get(ds, 1, x, y, err, sizeof err) == 0 && x[0] == 2 && x[1] == 3 && x[2] == 0 && y[0] == IGN &&
          y[1] == IGN && x[16 + 1] == 1 && x[16 + 2] == 0, "empty sentence: [CLS] [SEP]");
    CHECK(ut_tagged_words(ds, 1, &nw) && nw == 0, "no words");
    ut_dataset_free(ds);
}

/* the keys: given, "tokens" / "ner_tags", else the first and second keys */
static void test_keys(void) {
    const char *j = tmp("keys.jsonl");
    ut_tagged_opts o = {.max_len = 8};
    struct {
        const char *text, *words, *tags, *columns;
        bool unlabeled;
    } cases[] = {
        {"{\"words\": [\"the\", \"film\"], \"labels\": [\"O\", \"B-MISC\"]}\n", NULL, NULL,
         "words 'words', tags 'labels'", false},
        {"{\"id\": 0, \"tokens\": [\"the\", \"film\"], \"pos_tags\": [\"O\", \"B-MISC\"]}\n", NULL, NULL,
         "words 'tokens', tags 'pos_tags'", false},
        {"{\"tokens\": [\"the\", \"film\"], \"pos\": [\"X\", \"Y\"], \"ner_tags\": [\"O\", \"B-MISC\"]}\n", NULL,
         NULL, "words 'tokens', tags 'ner_tags'", false},
        {"{\"id\": 0, \"tokens\": [\"the\", \"film\"]}\n", NULL, NULL, "words 'tokens', no tags 'ner_tags' (to "
         "predict)", true},
        {"{\"a\": [\"O\", \"B-MISC\"], \"w\": [\"the\", \"film\"], \"t\": [\"O\", \"B-MISC\"]}\n", "w", "a",
         "words 'w', tags 'a'", false},
        {"{\"tokens\": [\"the\", \"film\"], \"ner_tags\": [\"O\", \"B-MISC\"]}\n", NULL, "gold",
         "words 'tokens', no tags 'gold' (to predict)", true},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        write_text(j, cases[k].text);
        o.words = cases[k].words;
        o.tags = cases[k].tags;
        ut_dataset *ds = open_ok(j, g_bert, &o);
        if (!ds) continue;
        CHECK(ds->columns && !strcmp(ds->columns, cases[k].columns) && ds->unlabeled == cases[k].unlabeled,
              "case %zu: columns '%s', unlabeled %d", k, ds->columns ? ds->columns : "(null)", ds->unlabeled);
        int64_t nw = 0;
        const char *const *w = ut_tagged_words(ds, 0, &nw);
        CHECK(w && nw == 2 && !strcmp(w[0], "the") && !strcmp(w[1], "film"), "case %zu: words", k);
        int32_t x[24], y[8];
        CHECK(ds->get(ds, 0, x, y, err, sizeof err) == 0, "case %zu: %s", k, err);
        if (cases[k].unlabeled)
            CHECK(y[1] == 0 && y[2] == 0 && ds->num_classes == 0, "case %zu: y %d %d", k, y[1], y[2]);
        else /* O and B-MISC sorted: B-MISC 0, O 1 */
            CHECK(y[1] == 1 && y[2] == 0 && ds->num_classes == 2, "case %zu: y %d %d", k, y[1], y[2]);
        ut_dataset_free(ds);
    }
}

static void expect_error(const char *path, ut_tokenizer *t, const ut_tagged_opts *o, const char *want,
                         const char *also) {
    err[0] = 0;
    ut_dataset *ds = ut_tagged_dataset_open(path, t, o, err, sizeof err);
    CHECK(!ds, "%s opened; expected '%s'", path, want);
    ut_dataset_free(ds);
    CHECK(strstr(err, want) && (!also || strstr(err, also)), "got '%s', expected '%s'%s%s", err, want,
          also ? " and " : "", also ? also : "");
}

static void write_bytes(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f, "cannot write %s", path);
    if (f) fwrite(data, 1, len, f), fclose(f);
}

static void test_bad_json(void) {
    const char *j = tmp("bad.jsonl");
    ut_tagged_opts o = {.max_len = 8};
    write_text(j, "{\"tokens\": [\"a\"], \"ner_tags\": [\"O\"]}\n[1, 2]\n");
    expect_error(j, g_bert, &o, "bad.jsonl:2: a list, expected an object", "JSON Lines");
    write_text(j, "{\"tokens\": [\"a\"], \"ner_tags\": [\"O\"]}\n{\"tokens\": [\"a\"]\n");
    expect_error(j, g_bert, &o, "bad.jsonl:2: not valid JSON", NULL);
    write_text(j, "{\"tokens\": [\"a\"], \"ner_tags\": [\"O\"]} x\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: not valid JSON", NULL);
    write_text(j, "{\"tokens\": [\"a\"], \"ner_tags\": [\"O\"]}\n\n{\"words\": [\"a\"], \"tags\": [\"O\"]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:3: no \"tokens\" key", "keys found: \"words\", \"tags\"");
    write_text(j, "{}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: an object without keys", NULL);
    write_text(j, "{\"tokens\": \"the film\", \"ner_tags\": [\"O\"]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: \"tokens\" is a string, expected a list of strings (the words)", NULL);
    write_text(j, "{\"tokens\": [\"the\", 3], \"ner_tags\": [\"O\", \"O\"]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: \"tokens\"[1] is a number, expected a string (a word)", NULL);
    write_text(j, "{\"tokens\": [\"the\"], \"ner_tags\": \"O\"}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: \"ner_tags\" is a string, expected a list of strings or integers",
                 NULL);
    write_text(j, "{\"tokens\": [\"the\", \"film\"], \"ner_tags\": [\"O\", null]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: \"ner_tags\"[1] is null, expected a string or an integer (a tag)",
                 NULL);
    write_text(j, "{\"tokens\": [\"the\", \"film\"], \"ner_tags\": [1, 2.5]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: \"ner_tags\"[1] is the number 2.5", NULL);
    write_text(j, "{\"tokens\": [\"the\"], \"ner_tags\": [\"\"]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: \"ner_tags\"[0] is an empty tag", NULL);
    write_text(j, "{\"tokens\": [\"the\", \"film\"], \"ner_tags\": [\"O\"]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: 2 words (\"tokens\") but 1 tags (\"ner_tags\")", NULL);
    /* tags of both kinds, in one list and across lines */
    write_text(j, "{\"tokens\": [\"the\", \"film\"], \"ner_tags\": [\"O\", 1]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: \"ner_tags\"[1] is an integer where line 1's tags are strings",
                 "all strings or all integers");
    write_text(j, "{\"tokens\": [\"the\"], \"ner_tags\": [0]}\n\n{\"tokens\": [\"film\"], \"ner_tags\": [\"O\"]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:3: \"ner_tags\"[0] is a string where line 1's tags are integers", NULL);
    /* sentences with and without tags */
    write_text(j, "{\"tokens\": [\"the\"], \"ner_tags\": [\"O\"]}\n{\"tokens\": [\"film\"]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:2: no \"ner_tags\" key, but line 1 has one", "every sentence");
    write_text(j, "{\"tokens\": [\"the\"]}\n{\"tokens\": [\"film\"], \"ner_tags\": [\"O\"]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:2: a \"ner_tags\" key, but line 1 has none", NULL);
    /* text */
    write_text(j, "{\"tokens\": [\"the\"], \"ner_tags\": [\"O\"]}\n{\"tokens\": [\"\xC3\x28\"], \"ner_tags\": [\"O\"]}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:2: byte 13 of the line: not valid UTF-8", NULL);
    static const char nul_json[] = "{\"tokens\": [\"the\"], \"ner_tags\": [\"O\"]}\n{\"tok\x00";
    write_bytes(j, nul_json, sizeof nul_json - 1);
    expect_error(j, g_bert, &o, "bad.jsonl:2: NUL byte at byte 5 of the line", NULL);
    write_text(j, "\n \n");
    expect_error(j, g_bert, &o, "bad.jsonl: no sentences", NULL);
    write_text(j, "{\"tokens\": [], \"ner_tags\": []}\n");
    expect_error(j, g_bert, &o, "bad.jsonl: no tags: every sentence is empty", NULL);
    expect_error(tmp("missing.jsonl"), g_bert, &o, "missing.jsonl", NULL);
}

static void test_bad_conll(void) {
    const char *c = tmp("bad.conll");
    ut_tagged_opts o = {.max_len = 8};
    write_text(c, "the O\nfilm O\n\nwas\n");
    expect_error(c, g_bert, &o, "bad.conll:4: a word without a tag (one field), but line 1 has a tag", NULL);
    write_text(c, "-DOCSTART-\n\nthe\r\nfilm B-MISC\n");
    expect_error(c, g_bert, &o, "bad.conll:4: a word with a tag, but line 3 has one field (no tag)", NULL);
    write_text(c, "the O\nfi\xFFlm O\n");
    expect_error(c, g_bert, &o, "bad.conll:2: byte 2 of the line: not valid UTF-8", NULL);
    static const char nul_conll[] = "the O\n\nfilm\x00 O\n";
    write_bytes(c, nul_conll, sizeof nul_conll - 1);
    expect_error(c, g_bert, &o, "bad.conll:3: NUL byte at byte 4 of the line", NULL);
    write_text(c, "-DOCSTART- -X- -X- O\n\n\r\n");
    expect_error(c, g_bert, &o, "bad.conll: no sentences", "a blank line between sentences");
    write_text(c, "");
    expect_error(c, g_bert, &o, "bad.conll: no sentences", NULL);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(g_dir, sizeof g_dir, "utrain-tagged")) return 1;
    g_bert = ut_tokenizer_load(BERT, err, sizeof err);
    CHECK(g_bert, "%s", err);
    g_roberta = ut_tokenizer_load(ROBERTA, err, sizeof err);
    CHECK(g_roberta, "%s", err);
    if (!g_bert || !g_roberta) {
        ut_tokenizer_free(g_bert);
        ut_tokenizer_free(g_roberta);
        return tp_finish(1, g_dir);
    }
    CHECK(tok_id(g_bert, "[CLS]") == 2 && tok_id(g_bert, "[SEP]") == 3 &&
          ut_tokenizer_special_id(g_bert, "pad") == 0, "BERT fixture: [PAD] 0, [CLS] 2, [SEP] 3");
    RUN(test_jsonl_and_conll);
    RUN(test_dev_names);
    RUN(test_integer_tags);
    RUN(test_label_all_tokens);
    RUN(test_truncation);
    RUN(test_unlabeled);
    RUN(test_json_array);
    RUN(test_roberta);
    RUN(test_t5);
    RUN(test_empty_words);
    RUN(test_keys);
    RUN(test_bad_json);
    RUN(test_bad_conll);
    ut_tokenizer_free(g_bert);
    ut_tokenizer_free(g_roberta);
    return tp_finish(TEST_SUMMARY(), g_dir);
}
