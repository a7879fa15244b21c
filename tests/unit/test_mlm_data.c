/* The masked language modeling dataset (src/data/mlm.c) with the tiny BERT
 * (WordPiece) and RoBERTa (byte-level BPE) fixtures' tokenizers: grouped
 * text (every line encoded with its special tokens, empty lines too, 1000
 * lines concatenated at a time and cut into blocks of max_len, the rest of
 * each 1000 dropped) checked against ids looked up by hand and against each
 * line encoded here; line_by_line (blank lines skipped, truncation,
 * padding); CSV, JSON Lines and JSON arrays with "text", a column named and
 * the first column taken; the collate's masks (the chosen share near the
 * probability, 80% mask / 10% random / 10% kept, special tokens and padding
 * never chosen, the same masks for the same (epoch, example) whatever the
 * batch, other masks in another epoch, labels trimmed to the batch) and
 * every bad input's message; and the causal language model's texts
 * (ut_clm_dataset_open: GPT-2's BPE, the same 1000-line groups, the line
 * ends kept or not, a block's ids and the next of each). */
#include <math.h>
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

enum { IGN = -100 };

static char err[1024];
static char g_dir[256];
static ut_tokenizer *g_bert, *g_roberta;

static const char *tmp(const char *name) { return tp_path(g_dir, name); }

static void write_bytes(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f, "cannot write %s", path);
    if (f) fwrite(data, 1, len, f), fclose(f);
}

static void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

static int32_t tok_id(ut_tokenizer *t, const char *token) {
    int32_t id = ut_tokenizer_token_id(t, token);
    CHECK(id >= 0, "no token '%s'", token);
    return id;
}

static ut_dataset *open_ok(const char *path, ut_tokenizer *t, const ut_mlm_opts *o) {
    ut_dataset *ds = ut_mlm_dataset_open(path, t, o, err, sizeof err);
    CHECK(ds, "%s: %s", path, err);
    return ds;
}

static void check_shape(const ut_dataset *ds, int64_t n, int64_t L, ut_tokenizer *t) {
    CHECK(ds->n == n && ds->x_ndim == 2 && ds->x_ne[0] == 3 && ds->x_ne[1] == L && ds->y_ndim == 1 &&
          ds->y_ne[0] == L && ds->x_dtype == UT_I32 && ds->y_dtype == UT_I32 && ds->token_planes &&
          ds->token_labels && ds->masked_lm && ut_tok_planes(ds) && ut_tok_labels(ds) && ds->collate &&
          ds->num_classes == 0 && ds->vocab_size == ut_tokenizer_vocab_size(t) && !ds->seq2seq &&
          !ds->regression && !ds->multi_label && !ds->unlabeled,
          "n %lld (expected %lld), x (%lld, %lld), y (%lld), L %lld", (long long)ds->n, (long long)n,
          (long long)ds->x_ne[0], (long long)ds->x_ne[1], (long long)ds->y_ne[0], (long long)L);
}

static void check_columns(const ut_dataset *ds, const char *want) {
    bool ok = want ? ds->columns && !strcmp(ds->columns, want) : !ds->columns;
    CHECK(ok, "columns '%s', expected '%s'", ds->columns ? ds->columns : "(null)", want ? want : "(null)");
}

/* Example i: ids (len of them, then pad to L), type ids 0, mask ones then
 * zeros, labels the ids where lab[j] (else -100) */
static void check_example(ut_dataset *ds, int64_t i, const int32_t *ids, const bool *lab, int64_t len, int32_t pad) {
    const int64_t L = ds->x_ne[1];
    int32_t *x = malloc((size_t)(3 * L) * sizeof *x), *y = malloc((size_t)L * sizeof *y);
    CHECK(ds->get(ds, i, x, y, err, sizeof err) == 0, "get %lld: %s", (long long)i, err);
    bool ok = len <= L;
    int64_t bad = -1;
    for (int64_t j = 0; j < L && ok; j++) {
        bool in = j < len;
        ok &= x[j] == (in ? ids[j] : pad) && x[L + j] == 0 && x[2 * L + j] == in;
        ok &= y[j] == (in && lab[j] ? ids[j] : IGN);
        if (!ok) bad = j;
    }
    CHECK(ok, "example %lld differs at position %lld (%lld ids, L %lld): x %d, mask %d, y %d, expected %d", (long long)i,
          (long long)bad, (long long)len, (long long)L, bad >= 0 ? x[bad] : 0, bad >= 0 ? x[2 * L + bad] : 0,
          bad >= 0 ? y[bad] : 0, bad >= 0 && bad < len ? ids[bad] : pad);
    free(x);
    free(y);
}

/* ---- what the dataset should hold, built here from each line encoded alone ---- */

typedef struct {
    int32_t *ids;
    bool *lab;                   /* the position is a text's token (not a special one) */
    int64_t n, cap;
} stream;

static void push(stream *s, int32_t id, bool lab) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->ids = realloc(s->ids, (size_t)s->cap * sizeof *s->ids);
        s->lab = realloc(s->lab, (size_t)s->cap * sizeof *s->lab);
    }
    s->ids[s->n] = id;
    s->lab[s->n++] = lab;
}

/* text encoded with its special tokens (npre before, nsuf after) onto s */
static void push_text(stream *s, ut_tokenizer *t, const char *text, int npre, int nsuf, int64_t max_len) {
    ut_tok_encoding e = {0};
    ut_tok_opts o = {.max_len = max_len};
    char why[256];
    int rc = ut_tokenizer_encode(t, text, NULL, max_len ? &o : NULL, &e, why, sizeof why);
    CHECK(rc == 0, "encode '%s': %s", text, why);
    for (int64_t q = 0; !rc && q < e.len; q++) push(s, e.ids[q], q >= npre && q < e.len - nsuf);
    ut_tok_encoding_free(&e);
}

/* The grouped examples of lines (count): each 1000 lines' ids cut into
 * blocks of L, compared with ds's; returns how many blocks there are. */
static int64_t check_grouped(ut_dataset *ds, ut_tokenizer *t, const char *const *lines, int64_t count, int64_t L) {
    int64_t blocks = 0;
    for (int64_t g = 0; g < count; g += 1000) {
        stream s = {0};
        for (int64_t k = g; k < count && k < g + 1000; k++) push_text(&s, t, lines[k], 1, 1, 0);
        for (int64_t b = 0; (b + 1) * L <= s.n; b++, blocks++)
            if (blocks < ds->n) check_example(ds, blocks, s.ids + b * L, s.lab + b * L, L, 0);
        free(s.ids);
        free(s.lab);
    }
    CHECK(ds->n == blocks, "%lld examples, expected %lld", (long long)ds->n, (long long)blocks);
    return blocks;
}

/* ---- grouped text ---- */

static void test_grouped_by_hand(void) {
    const char *p = tmp("lines.txt");
    const int32_t CLS = tok_id(g_bert, "[CLS]"), SEP = tok_id(g_bert, "[SEP]"), the = tok_id(g_bert, "the"),
                  film = tok_id(g_bert, "film"), was = tok_id(g_bert, "was"), great = tok_id(g_bert, "great"),
                  plot = tok_id(g_bert, "plot");
    /* [CLS] the film [SEP] | [CLS] [SEP] | [CLS] was great [SEP] | [CLS] the plot [SEP]: 14 ids */
    const int32_t all[14] = {CLS, the, film, SEP, CLS, SEP, CLS, was, great, SEP, CLS, the, plot, SEP};
    const bool lab[14] = {0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0};
    write_text(p, "the film\r\n\nwas great\nthe plot");
    ut_mlm_opts o = {.max_len = 5, .probability = 0.15};
    ut_dataset *ds = open_ok(p, g_bert, &o);
    if (ds) {
        check_shape(ds, 2, 5, g_bert);    /* 14 ids: 2 blocks of 5, 4 dropped */
        check_columns(ds, NULL);
        check_example(ds, 0, all, lab, 5, 0);
        check_example(ds, 1, all + 5, lab + 5, 5, 0);
        CHECK(ds->get(ds, 2, (int32_t[15]){0}, (int32_t[5]){0}, err, sizeof err) != 0 && strstr(err, "lines.txt"),
              "example 2 of 2: '%s'", err);
        ut_dataset_free(ds);
    }
    o.max_len = 7;                        /* 14 ids: exactly 2 blocks */
    if ((ds = open_ok(p, g_bert, &o))) {
        check_shape(ds, 2, 7, g_bert);
        check_example(ds, 0, all, lab, 7, 0);
        check_example(ds, 1, all + 7, lab + 7, 7, 0);
        ut_dataset_free(ds);
    }
    /* a final newline starts no empty line (one would add [CLS] [SEP]: 16 ids, 3 blocks of 5) */
    write_text(p, "the film\r\n\nwas great\nthe plot\n");
    o.max_len = 5;
    if ((ds = open_ok(p, g_bert, &o))) {
        check_shape(ds, 2, 5, g_bert);
        ut_dataset_free(ds);
    }
    /* ... but an empty line before it does: [CLS] [SEP] */
    write_text(p, "the film\r\n\nwas great\nthe plot\n\n");
    if ((ds = open_ok(p, g_bert, &o))) {
        check_shape(ds, 3, 5, g_bert);
        const int32_t more[16] = {CLS, the, film, SEP, CLS, SEP, CLS, was, great, SEP, CLS, the, plot, SEP, CLS, SEP};
        const bool mlab[16] = {0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0};
        check_example(ds, 2, more + 10, mlab + 10, 5, 0);
        ut_dataset_free(ds);
    }
}

static const char *const WORDS[] = {"the film", "", "was great and the plot was dull", "i loved this movie",
                                    "a", "boring script", "the cast was superb , truly", "what a show !"};

static void test_group_boundary(void) {
    enum { LINES = 1001 };
    const char *p = tmp("many.txt");
    const char *lines[LINES];
    FILE *f = fopen(p, "wb");
    CHECK(f, "cannot write %s", p);
    if (!f) return;
    for (int k = 0; k < LINES; k++) {
        lines[k] = WORDS[(k * 5 + k / 7) % 8];
        fprintf(f, "%s\n", lines[k]);
    }
    fclose(f);
    stream all = {0}, first = {0};
    for (int k = 0; k < LINES; k++) push_text(&all, g_bert, lines[k], 1, 1, 0);
    for (int k = 0; k < 1000; k++) push_text(&first, g_bert, lines[k], 1, 1, 0);
    const int64_t last = all.n - first.n; /* line 1000's ids, the second group's */
    /* L 9: line 1000's ids are fewer, dropped; L 3: they make blocks of their own, from its [CLS] on; the
     * ids of the 1001 lines cut at once would give one block more with either. L 64: most of a group
     * is kept, the last line dropped. */
    const int64_t sizes[] = {9, 3, 64};
    for (int c = 0; c < 3; c++) {
        const int64_t L = sizes[c];
        ut_mlm_opts o = {.max_len = L, .probability = 0.15};
        ut_dataset *ds = open_ok(p, g_bert, &o);
        if (!ds) continue;
        int64_t blocks = check_grouped(ds, g_bert, lines, LINES, L);
        CHECK(blocks == first.n / L + last / L, "L %lld: %lld blocks", (long long)L, (long long)blocks);
        if (L != 64)
            CHECK(all.n / L == blocks + 1 && (L == 9 ? last < L : last >= L),
                  "the data do not tell the groups apart at L %lld: %lld ids, %lld in 1000 lines", (long long)L,
                  (long long)all.n, (long long)first.n);
        ut_dataset_free(ds);
    }
    free(all.ids), free(all.lab), free(first.ids), free(first.lab);
}

/* ---- line by line ---- */

static void test_line_by_line(void) {
    const char *p = tmp("lines.txt");
    const int32_t CLS = tok_id(g_bert, "[CLS]"), SEP = tok_id(g_bert, "[SEP]"), the = tok_id(g_bert, "the"),
                  film = tok_id(g_bert, "film"), was = tok_id(g_bert, "was"), great = tok_id(g_bert, "great"),
                  and = tok_id(g_bert, "and");
    write_text(p, "the film\n   \n\n\t\r\nwas great and the plot was dull\r\n \v\f\nthe");
    ut_mlm_opts o = {.max_len = 6, .line_by_line = true, .probability = 0.15};
    ut_dataset *ds = open_ok(p, g_bert, &o);
    if (!ds) return;
    check_shape(ds, 3, 6, g_bert);
    check_example(ds, 0, (int32_t[]){CLS, the, film, SEP}, (bool[]){0, 1, 1, 0}, 4, 0);
    check_example(ds, 1, (int32_t[]){CLS, was, great, and, the, SEP}, (bool[]){0, 1, 1, 1, 1, 0}, 6, 0); /* cut */
    check_example(ds, 2, (int32_t[]){CLS, the, SEP}, (bool[]){0, 1, 0}, 3, 0);
    ut_dataset_free(ds);
}

static void test_roberta(void) {
    const char *p = tmp("roberta.txt");
    write_text(p, "the film\n\nhello world, what a film\n");
    const int32_t pad = ut_tokenizer_special_id(g_roberta, "pad");
    CHECK(pad == 1 && ut_tokenizer_special_id(g_roberta, "mask") >= 0, "RoBERTa fixture: <pad> 1, a <mask>");
    const char *lines[] = {"the film", "hello world, what a film"};
    ut_mlm_opts o = {.max_len = 40, .line_by_line = true, .probability = 0.15};
    ut_dataset *ds = open_ok(p, g_roberta, &o);
    if (ds) {
        check_shape(ds, 2, 40, g_roberta);
        for (int k = 0; k < 2; k++) {
            stream s = {0};
            push_text(&s, g_roberta, lines[k], 1, 1, 40);
            CHECK(s.n > 2 && s.ids[0] == 0 && s.ids[s.n - 1] == 2, "<s> ... </s>");
            check_example(ds, k, s.ids, s.lab, s.n, pad);
            free(s.ids), free(s.lab);
        }
        ut_dataset_free(ds);
    }
    o = (ut_mlm_opts){.max_len = 4, .probability = 0.15};
    const char *all[] = {"the film", "", "hello world, what a film"};
    if ((ds = open_ok(p, g_roberta, &o))) {
        check_grouped(ds, g_roberta, all, 3, 4);
        ut_dataset_free(ds);
    }
}

/* ---- CSV and JSON ---- */

/* ds holds the texts (line_by_line, BERT, L 8) a, b */
static void check_two(ut_dataset *ds, const char *a, const char *b, const char *columns) {
    check_shape(ds, 2, 8, g_bert);
    check_columns(ds, columns);
    const char *texts[] = {a, b};
    for (int k = 0; k < 2; k++) {
        stream s = {0};
        push_text(&s, g_bert, texts[k], 1, 1, 8);
        check_example(ds, k, s.ids, s.lab, s.n, 0);
        free(s.ids), free(s.lab);
    }
}

static void test_csv_json(void) {
    ut_mlm_opts o = {.max_len = 8, .line_by_line = true, .probability = 0.15};
    const char *c = tmp("texts.csv"), *j = tmp("texts.jsonl"), *a = tmp("texts.json");
    static const char A[] = "the film, it was great", B[] = "i loved\nthis movie";
    write_text(c, "\xEF\xBB\xBFid,text,label\r\n1,\"the film, it was great\",1\r\n\r\n2,\"i loved\nthis movie\",0\r\n");
    ut_dataset *ds = open_ok(c, g_bert, &o);
    if (ds) check_two(ds, A, B, "text 'text'"), ut_dataset_free(ds);
    write_text(j, "{\"id\": 1, \"text\": \"the film, it was great\", \"label\": 1}\n\n"
                  "{\"text\": \"i loved\\nthis movie\", \"id\": 2}\n");
    if ((ds = open_ok(j, g_bert, &o))) check_two(ds, A, B, "text 'text'"), ut_dataset_free(ds);
    write_text(a, "[\n {\"id\": 1, \"text\": \"the film, it was great\"},\n {\"id\": 2, \"text\": \"i loved\\nthis "
                  "movie\"}\n]\n");
    if ((ds = open_ok(a, g_bert, &o))) check_two(ds, A, B, "text 'text'"), ut_dataset_free(ds);
    /* a column named (text_column), though "text" is there too */
    o.text_column = "review";
    write_text(c, "text,review\nthe plot,the film\nwas dull,i loved this movie\n");
    if ((ds = open_ok(c, g_bert, &o))) check_two(ds, "the film", "i loved this movie", "text 'review'"),
        ut_dataset_free(ds);
    write_text(j, "{\"text\": \"the plot\", \"review\": \"the film\"}\n{\"review\": \"i loved this movie\"}\n");
    if ((ds = open_ok(j, g_bert, &o))) check_two(ds, "the film", "i loved this movie", "text 'review'"),
        ut_dataset_free(ds);
    /* no "text": the first column */
    o.text_column = NULL;
    write_text(c, "body,label\nthe film,1\ni loved this movie,0\n");
    if ((ds = open_ok(c, g_bert, &o)))
        check_two(ds, "the film", "i loved this movie", "text 'body' (the first: none is named 'text')"),
            ut_dataset_free(ds);
    write_text(a, "[{\"body\": \"the film\", \"label\": 1}, {\"label\": 0, \"body\": \"i loved this movie\"}]");
    if ((ds = open_ok(a, g_bert, &o)))
        check_two(ds, "the film", "i loved this movie", "text 'body' (the first: none is named 'text')"),
            ut_dataset_free(ds);
    /* grouped CSV: an empty text is encoded too ([CLS] [SEP]); an empty line is no record */
    o = (ut_mlm_opts){.max_len = 3, .probability = 0.15};
    write_text(c, "text,id\nthe film,1\n\n,2\nwas,3\n");
    const char *lines[] = {"the film", "", "was"};
    if ((ds = open_ok(c, g_bert, &o))) check_grouped(ds, g_bert, lines, 3, 3), ut_dataset_free(ds);
}

/* ---- the masks ---- */

/* The batch of examples idx (count) of epoch with labels trimmed to Ly,
 * x (count, 3, L) and y (count, Ly) as the loader hands them, masked. */
static void masked_batch(ut_dataset *ds, const int64_t *idx, int64_t count, int64_t epoch, int64_t Ly, int32_t *x,
                         int32_t *y) {
    const int64_t L = ds->x_ne[1];
    int32_t *full = malloc((size_t)L * sizeof *full);
    for (int64_t k = 0; k < count; k++) {
        CHECK(ds->get(ds, idx[k], x + k * 3 * L, full, err, sizeof err) == 0, "get: %s", err);
        memcpy(y + k * Ly, full, (size_t)Ly * sizeof *y);
    }
    free(full);
    ut_batch b = {.count = count, .x = x, .y = y, .epoch = epoch, .idx = idx, .y_len = Ly == L ? 0 : Ly};
    CHECK(ds->collate(ds, &b, err, sizeof err) == 0, "collate: %s", err);
}

static ut_dataset *mask_data(int64_t L, double prob, uint64_t seed, bool by_line) {
    const char *p = tmp("mask.txt");
    FILE *f = fopen(p, "wb");
    CHECK(f, "cannot write %s", p);
    if (!f) return NULL;
    for (int k = 0; k < 8000; k++) fprintf(f, "%s\n", WORDS[(k * 3 + k / 5) % 8]);
    fclose(f);
    ut_mlm_opts o = {.max_len = L, .probability = prob, .seed = seed, .line_by_line = by_line};
    return open_ok(p, g_bert, &o);
}

static void test_mask_shares(void) {
    ut_dataset *ds = mask_data(32, 0.15, 1234, false);
    if (!ds) return;
    const int64_t n = ds->n, L = 32;
    const int32_t MASK = tok_id(g_bert, "[MASK]");
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int64_t k = 0; k < n; k++) idx[k] = k;
    int32_t *x = malloc((size_t)(n * 3 * L) * sizeof *x), *y = malloc((size_t)(n * L) * sizeof *y);
    int32_t *x0 = malloc((size_t)(3 * L) * sizeof *x0), *y0 = malloc((size_t)L * sizeof *y0);
    masked_batch(ds, idx, n, 3, L, x, y);
    int64_t maskable = 0, chosen = 0, masked = 0, random = 0, kept = 0, bad = 0;
    for (int64_t k = 0; k < n; k++) {
        ds->get(ds, k, x0, y0, err, sizeof err);
        const int32_t *xk = x + k * 3 * L, *yk = y + k * L;
        bad += memcmp(xk + L, x0 + L, (size_t)(2 * L) * sizeof *x0) != 0; /* type ids and mask untouched */
        for (int64_t j = 0; j < L; j++) {
            if (y0[j] == IGN) { /* a special token: never chosen */
                bad += yk[j] != IGN || xk[j] != x0[j];
                continue;
            }
            maskable++;
            if (yk[j] == IGN) {
                bad += xk[j] != x0[j];
                continue;
            }
            bad += yk[j] != y0[j]; /* a chosen position keeps its label */
            chosen++;
            if (xk[j] == MASK) masked++;
            else if (xk[j] != x0[j]) random++, bad += xk[j] < 0 || xk[j] >= ds->vocab_size;
            else kept++;
        }
    }
    CHECK(bad == 0, "%lld positions break the rules", (long long)bad);
    double share = (double)chosen / (double)maskable;
    CHECK(maskable > 15000 && fabs(share - 0.15) < 0.02, "%lld of %lld chosen (%.4f)", (long long)chosen,
          (long long)maskable, share);
    /* a random id may be the token itself (1 in 100 here): counted as kept */
    double pm = (double)masked / (double)chosen, pr = (double)random / (double)chosen, pk = (double)kept / (double)chosen;
    CHECK(fabs(pm - 0.8) < 0.04 && fabs(pr - 0.1) < 0.03 && fabs(pk - 0.1) < 0.03,
          "mask %.3f, random %.3f, kept %.3f of %lld chosen", pm, pr, pk, (long long)chosen);
    free(idx), free(x), free(y), free(x0), free(y0);
    ut_dataset_free(ds);
}

/* the same (seed, epoch, example) masks alike in any batch; another epoch or seed otherwise */
static void test_mask_determinism(void) {
    ut_dataset *ds = mask_data(16, 0.3, 77, true), *other = mask_data(16, 0.3, 78, true);
    if (!ds || !other) {
        ut_dataset_free(ds), ut_dataset_free(other);
        return;
    }
    enum { L = 16 };
    CHECK(ds->n > 8, "%lld examples", (long long)ds->n);
    int32_t xa[2 * 3 * L], ya[2 * L], xb[3 * L], yb[L], xc[3 * L], yc[L], xd[3 * L], yd[L];
    const int64_t pair[2] = {3, 7}, seven[1] = {7};
    masked_batch(ds, pair, 2, 5, L, xa, ya);
    masked_batch(ds, seven, 1, 5, L, xb, yb);
    CHECK(!memcmp(xa + 3 * L, xb, sizeof xb) && !memcmp(ya + L, yb, sizeof yb),
          "example 7 masked alone differs from example 7 masked with example 3");
    masked_batch(ds, seven, 1, 5, L, xc, yc);
    CHECK(!memcmp(xc, xb, sizeof xb) && !memcmp(yc, yb, sizeof yb), "the same epoch and example, other masks");
    /* another epoch, another seed: other masks somewhere among the examples */
    bool epoch_differs = false, seed_differs = false;
    for (int64_t i = 0; i < ds->n && i < 64 && !(epoch_differs && seed_differs); i++) {
        masked_batch(ds, &i, 1, 5, L, xb, yb);
        masked_batch(ds, &i, 1, 6, L, xc, yc);
        masked_batch(other, &i, 1, 5, L, xd, yd);
        epoch_differs |= memcmp(yb, yc, sizeof yb) != 0;
        seed_differs |= memcmp(yb, yd, sizeof yb) != 0;
    }
    CHECK(epoch_differs, "epochs 5 and 6 mask alike");
    CHECK(seed_differs, "seeds 77 and 78 mask alike");
    /* labels trimmed to Ly (the batch's longest mask): the first Ly columns of the full width's,
     * x past Ly untouched */
    for (int64_t i = 0; i < ds->n && i < 64; i++) {
        int32_t x0[3 * L], y0[L], yt[5];
        ds->get(ds, i, x0, y0, err, sizeof err);
        masked_batch(ds, &i, 1, 2, L, xb, yb);
        masked_batch(ds, &i, 1, 2, 5, xc, yt);
        bool ok = !memcmp(yt, yb, sizeof yt) && !memcmp(xc, xb, 5 * sizeof *xc) &&
                  !memcmp(xc + 5, x0 + 5, (3 * L - 5) * sizeof *xc);
        CHECK(ok, "example %lld: labels trimmed to 5 mask otherwise", (long long)i);
        if (!ok) break;
    }
    ut_dataset_free(ds);
    ut_dataset_free(other);
}

/* The masks drawn here as the dataset's header says: Philox block j of the
 * stream (epoch, example, "mlm") under the seed's key; word 0's top 24 bits
 * below the probability choose, word 1's pick <mask> (< 0.8), a random id
 * (< 0.9: word 2 scaled to the vocabulary) or the token. */
static void test_mask_reference(void) {
    enum { L = 16 };
    ut_dataset *ds = mask_data(L, 0.4, 99, true);
    if (!ds) return;
    ut_philox g;
    ut_philox_seed(&g, 99);
    int64_t diffs = 0, chosen = 0;
    for (int64_t i = 0; i < ds->n && i < 200; i++) {
        int32_t x0[3 * L], y0[L], x[3 * L], y[L];
        ds->get(ds, i, x0, y0, err, sizeof err);
        masked_batch(ds, &i, 1, 11, L, x, y);
        uint64_t stream = ut_philox_stream(11, (uint64_t)i, 0x6d6c6dULL);
        for (int j = 0; j < L; j++) {
            int32_t want_x = x0[j], want_y = y0[j];
            if (y0[j] != IGN) {
                uint32_t r[4];
                ut_philox_block(g.key, stream, (uint64_t)j, r);
                double pick = (r[0] >> 8) / 16777216.0, u = (r[1] >> 8) / 16777216.0;
                if (pick >= 0.4) want_y = IGN;
                else if (u < 0.8) want_x = 4;
                else if (u < 0.9) want_x = (int32_t)(((uint64_t)r[2] * (uint64_t)ds->vocab_size) >> 32);
                chosen += pick < 0.4;
            }
            diffs += x[j] != want_x || y[j] != want_y;
        }
        diffs += memcmp(x + L, x0 + L, 2 * L * sizeof *x) != 0;
    }
    CHECK(diffs == 0 && chosen > 100, "%lld positions differ from the draws made here (%lld chosen)",
          (long long)diffs, (long long)chosen);
    ut_dataset_free(ds);
}

/* a RoBERTa batch: chosen positions take <mask> or a random id of its vocabulary */
static void test_mask_roberta(void) {
    const char *p = tmp("roberta.txt");
    FILE *f = fopen(p, "wb");
    CHECK(f, "cannot write %s", p);
    if (!f) return;
    for (int k = 0; k < 300; k++) fprintf(f, "hello world, what a film %d\n", k);
    fclose(f);
    ut_mlm_opts o = {.max_len = 24, .probability = 0.5, .seed = 5};
    ut_dataset *ds = open_ok(p, g_roberta, &o);
    if (!ds) return;
    const int64_t n = ds->n, L = 24;
    const int32_t MASK = ut_tokenizer_special_id(g_roberta, "mask");
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int64_t k = 0; k < n; k++) idx[k] = k;
    int32_t *x = malloc((size_t)(n * 3 * L) * sizeof *x), *y = malloc((size_t)(n * L) * sizeof *y);
    masked_batch(ds, idx, n, 0, L, x, y);
    int64_t masked = 0, outside = 0, chosen = 0;
    for (int64_t k = 0; k < n * L; k++) {
        int64_t j = k % L, e = k / L;
        if (y[k] == IGN) continue;
        chosen++;
        masked += x[e * 3 * L + j] == MASK;
        outside += x[e * 3 * L + j] < 0 || x[e * 3 * L + j] >= ds->vocab_size;
    }
    CHECK(chosen > 1000 && masked > chosen * 7 / 10 && outside == 0, "%lld chosen, %lld <mask>, %lld outside",
          (long long)chosen, (long long)masked, (long long)outside);
    free(idx), free(x), free(y);
    ut_dataset_free(ds);
}

/* ---- errors ---- */

static void expect_error(const char *path, ut_tokenizer *t, const ut_mlm_opts *o, const char *want,
                         const char *also) {
    err[0] = 0;
    ut_dataset *ds = ut_mlm_dataset_open(path, t, o, err, sizeof err);
    CHECK(!ds, "%s opened; expected '%s'", path, want);
    ut_dataset_free(ds);
    CHECK(strstr(err, want) && (!also || strstr(err, also)), "got '%s', expected '%s'%s%s", err, want,
          also ? " and " : "", also ? also : "");
}

static void test_bad_options(void) {
    const char *p = tmp("ok.txt");
    write_text(p, "the film was great\n");
    ut_mlm_opts o = {.max_len = 8, .probability = 0.15};
    expect_error(p, g_bert, NULL, "ok.txt: no masked language modeling options", NULL);
    o.max_len = 0;
    expect_error(p, g_bert, &o, "ok.txt: max_len must be in [1, 1e9] (got 0)", NULL);
    o.max_len = 1000000001;
    expect_error(p, g_bert, &o, "ok.txt: max_len must be in [1, 1e9]", NULL);
    o.max_len = 8;
    const double probs[] = {0, 1, -0.1, 1.5, NAN};
    for (size_t k = 0; k < sizeof probs / sizeof probs[0]; k++) {
        o.probability = probs[k];
        expect_error(p, g_bert, &o, "ok.txt: the masking probability (mlm_probability) must be in (0, 1)", NULL);
    }
    o.probability = 0.15;
    ut_tokenizer *t5 = ut_tokenizer_load(T5, err, sizeof err);
    CHECK(t5, "%s", err);
    if (t5) {
        CHECK(ut_tokenizer_special_id(t5, "mask") < 0, "the T5 fixture has a mask token");
        expect_error(p, t5, &o, "ok.txt: the tokenizer has no mask token", "BERT's [MASK], RoBERTa's <mask>");
        ut_tokenizer_free(t5);
    }
    o.max_len = 2;
    expect_error(p, g_bert, &o, "ok.txt: max_len 2 has no room for a token between the tokenizer's 2 special tokens",
                 NULL);
    o.line_by_line = true;
    expect_error(p, g_bert, &o, "ok.txt: max_len 2 has no room", NULL);
    o.max_len = 3;
    ut_dataset *ds = open_ok(p, g_bert, &o); /* one token between [CLS] and [SEP] */
    if (ds) check_shape(ds, 1, 3, g_bert), ut_dataset_free(ds);
    expect_error(tmp("missing.txt"), g_bert, &o, "missing.txt", NULL);
}

static void test_bad_text(void) {
    const char *p = tmp("bad.txt");
    ut_mlm_opts o = {.max_len = 8, .probability = 0.15};
    write_text(p, "the film\nwa\xFFs great\n");
    expect_error(p, g_bert, &o, "bad.txt:2: byte 2 of the line: not valid UTF-8", NULL);
    static const char nul[] = "the film\n\nwas\x00 great\n";
    write_bytes(p, nul, sizeof nul - 1);
    expect_error(p, g_bert, &o, "bad.txt:3: NUL byte at byte 3 of the line", NULL);
    /* grouped: 6 + 2 + 3 ids < 16 */
    write_text(p, "the film was great\n\nfilm\n");
    o.max_len = 16;
    expect_error(p, g_bert, &o, "bad.txt: no example: 11 tokens read from 3 texts", "takes 16 tokens (data.max_len)");
    expect_error(p, g_bert, &o, "use a smaller data.max_len or data.line_by_line", NULL);
    write_text(p, "");
    expect_error(p, g_bert, &o, "bad.txt: no example: 0 tokens read from 0 texts", NULL);
    o.line_by_line = true;
    write_text(p, "  \n\t\n\r\n\n");
    expect_error(p, g_bert, &o, "bad.txt: no example: every text is blank", NULL);
    write_text(p, "");
    expect_error(p, g_bert, &o, "bad.txt: no example: no text", NULL);
}

static void test_bad_csv_json(void) {
    const char *c = tmp("bad.csv"), *j = tmp("bad.jsonl"), *a = tmp("bad.json");
    ut_mlm_opts o = {.max_len = 8, .line_by_line = true, .probability = 0.15, .text_column = "review"};
    write_text(c, "id,text\n1,the film\n");
    expect_error(c, g_bert, &o, "bad.csv:1: no column 'review'", "'id', 'text'");
    write_text(j, "{\"id\": 1, \"text\": \"the film\"}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: no key 'review'", "keys found: 'id', 'text'");
    write_text(a, "[{\"review\": \"the film\"},\n {\"text\": \"was great\"}]");
    expect_error(a, g_bert, &o, "bad.json:2: no key 'review'", "keys found: 'text'");
    o.text_column = NULL;
    write_text(j, "{\"text\": \"the film\"}\n{\"id\": 2}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:2: no key 'text'", "keys found: 'id'");
    write_text(j, "{\"text\": \"the film\"}\n\n{\"text\": 3}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:3: key 'text' is a number, expected a string (the text)", NULL);
    write_text(j, "{\"text\": null}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: key 'text' is null, expected a string", NULL);
    write_text(j, "{\"text\": \"the film\"}\n[1, 2]\n");
    expect_error(j, g_bert, &o, "bad.jsonl:2: a list, expected an object", "JSON Lines");
    write_text(j, "{\"text\": \"the film\"\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: not valid JSON", NULL);
    write_text(j, "{}\n");
    expect_error(j, g_bert, &o, "bad.jsonl:1: an object without keys", NULL);
    write_text(a, "[{\"text\": \"the film\"},\n\n {\"text\": [\"was\"]}]");
    expect_error(a, g_bert, &o, "bad.json:3: key 'text' is a list, expected a string", NULL);
    write_text(a, "[{\"text\": \"the film\"},\n 3]");
    expect_error(a, g_bert, &o, "bad.json:2: a number, expected an object", "a JSON array of objects");
    write_text(a, "[{\"text\": \"the film\"},\n");
    expect_error(a, g_bert, &o, "bad.json:2: not valid JSON", NULL);
    write_text(a, "[]");
    expect_error(a, g_bert, &o, "bad.json: no example: no text", NULL);
    write_text(a, "[{\"text\": \"ok\"}, {\"text\": \"\\u00e9 fi\xC3\"}]");
    expect_error(a, g_bert, &o, "bad.json:1: byte ", "not valid UTF-8");
    write_text(c, "id,text\n1,the film\n2\n");
    expect_error(c, g_bert, &o, "bad.csv:3: 1 fields, but the text is field 2 of the header's 2", NULL);
    write_text(c, "id,text\n1,\"the film\n");
    expect_error(c, g_bert, &o, "bad.csv:2: a quoted field is not closed", NULL);
    write_text(c, "\n\n");
    expect_error(c, g_bert, &o, "bad.csv: no header", NULL);
    write_text(c, "text\n");
    expect_error(c, g_bert, &o, "bad.csv: no example: no text", NULL);
}

/* ---- causal language modeling (ut_clm_dataset_open, run_clm) ---- */

/* The ids of GPT-2's BPE for texts[i] (each encoded alone, as run_clm's
 * tokenize_function encodes its rows), from..to, concatenated into out */
static int64_t concat_ids(ut_tokenizer *t, char **texts, int64_t from, int64_t to, int32_t *out) {
    ut_tok_encoding e = {0};
    int64_t k = 0;
    for (int64_t i = from; i < to; i++) {
        CHECK(ut_tokenizer_encode(t, texts[i], NULL, NULL, &e, err, sizeof err) == 0, "%s", err);
        for (int64_t q = 0; q < e.len; q++) out[k++] = e.ids[q];
    }
    ut_tok_encoding_free(&e);
    return k;
}

/* 1003 lines (empty ones, a CRLF one, the last without a newline) in blocks
 * of 7: each 1000 lines' ids concatenated, what is left of each 1000
 * dropped; with keep_linebreaks every text but the last ends with its line
 * end; y the next id, -1 after the last of a block */
static void test_clm_blocks(void) {
    char why[512];
    ut_tokenizer *gpt2 = ut_tokenizer_load("data/pretrained/gpt2-bpe", why, sizeof why);
    CHECK(gpt2, "%s", why);
    if (!gpt2) return;
    enum { LINES = 1003, L = 7 };
    char **kept = calloc(LINES, sizeof *kept), **bare = calloc(LINES, sizeof *bare);
    size_t cap = 1 << 16, used = 0;
    char *file = malloc(cap);
    for (int i = 0; i < LINES; i++) {
        char line[64];
        snprintf(line, sizeof line, i % 9 == 4 ? "" : "line %d of the film, said the critic", i);
        const char *end = i == LINES - 1 ? "" : i == 500 ? "\r\n" : "\n";
        size_t a = strlen(line), b = strlen(end);
        bare[i] = strdup(line);
        kept[i] = malloc(a + b + 1);
        snprintf(kept[i], a + b + 1, "%s%s", line, end);
        memcpy(file + used, kept[i], a + b);
        used += a + b;
    }
    write_bytes(tmp("clm.txt"), file, used);
    int32_t *want = malloc(sizeof(int32_t) * 40000);
    for (int keep = 0; keep < 2; keep++) {
        ut_clm_opts o = {.block_size = L, .keep_linebreaks = keep};
        ut_dataset *ds = ut_clm_dataset_open(tmp("clm.txt"), gpt2, &o, err, sizeof err);
        CHECK(ds, "%s", err);
        if (!ds) continue;
        char **texts = keep ? kept : bare;
        int64_t n0 = concat_ids(gpt2, texts, 0, 1000, want), n1 = concat_ids(gpt2, texts, 1000, LINES, want + n0);
        int64_t blocks0 = n0 / L, blocks1 = n1 / L;
        CHECK(ds->n == blocks0 + blocks1 && ds->x_ndim == 1 && ds->x_ne[0] == L && ds->y_ne[0] == L &&
                  !ds->token_planes && !ds->masked_lm && !ds->collate && ds->vocab_size == 50257,
              "keep %d: %lld examples, want %lld + %lld", keep, (long long)ds->n, (long long)blocks0,
              (long long)blocks1);
        int bad = 0;
        for (int64_t k = 0; k < ds->n && k < blocks0 + blocks1; k++) {
            int32_t x[L], y[L];
            UT_ASSERT(ds->get(ds, k, x, y, err, sizeof err) == 0);
            const int32_t *w = k < blocks0 ? want + k * L : want + n0 + (k - blocks0) * L;
            for (int j = 0; j < L; j++) bad += x[j] != w[j] || y[j] != (j + 1 < L ? w[j + 1] : -1);
        }
        CHECK(!bad, "keep %d: %d values differ from the texts' ids in blocks", keep, bad);
        ut_dataset_free(ds);
    }
    /* the line ends are in the ids: the newline token (198, "\n") after a line */
    ut_clm_opts o = {.block_size = 2, .keep_linebreaks = true};
    write_text(tmp("two.txt"), "a\nb\n");
    ut_dataset *ds = ut_clm_dataset_open(tmp("two.txt"), gpt2, &o, err, sizeof err);
    int32_t x[2], y[2];
    CHECK(ds && ds->n == 2 && ds->get(ds, 0, x, y, err, sizeof err) == 0 && x[0] == 64 && x[1] == 198 &&
              y[0] == 198 && y[1] == -1, "a\\n: %s", err);
    ut_dataset_free(ds);
    /* the errors: a block of one token predicts nothing; too little text */
    o.block_size = 1;
    CHECK(!ut_clm_dataset_open(tmp("two.txt"), gpt2, &o, err, sizeof err) &&
              strstr(err, "the block size must be in [2, 1e9] (got 1)"), "%s", err);
    CHECK(!ut_clm_dataset_open(tmp("two.txt"), gpt2, NULL, err, sizeof err) &&
              strstr(err, "two.txt: no causal language modeling options (block_size)"), "%s", err);
    CHECK(!ut_clm_dataset_open(tmp("two.txt"), NULL, &o, err, sizeof err) && strstr(err, "two.txt: no tokenizer"),
          "%s", err);
    o.block_size = 64;
    CHECK(!ut_clm_dataset_open(tmp("two.txt"), gpt2, &o, err, sizeof err) &&
              strstr(err, "two.txt: no example: 4 tokens read from 2 texts, and each block takes 64 tokens "
                          "(data.seq_len)") && !strstr(err, "line_by_line"), "%s", err);
    /* CSV: the text column, no line ends added */
    write_text(tmp("clm.csv"), "id,text\n1,a b\n2,\"c, d\"\n");
    o = (ut_clm_opts){.block_size = 2, .keep_linebreaks = true};
    ds = ut_clm_dataset_open(tmp("clm.csv"), gpt2, &o, err, sizeof err);
    CHECK(ds && ds->n == 2 && ds->columns && !strcmp(ds->columns, "text 'text'"), "csv: %s", err);
    ut_dataset_free(ds);
    for (int i = 0; i < LINES; i++) free(kept[i]), free(bare[i]);
    free(kept);
    free(bare);
    free(file);
    free(want);
    ut_tokenizer_free(gpt2);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(g_dir, sizeof g_dir, "utrain-mlm")) return 1;
    g_bert = ut_tokenizer_load(BERT, err, sizeof err);
    CHECK(g_bert, "%s", err);
    g_roberta = ut_tokenizer_load(ROBERTA, err, sizeof err);
    CHECK(g_roberta, "%s", err);
    if (!g_bert || !g_roberta) {
        ut_tokenizer_free(g_bert);
        ut_tokenizer_free(g_roberta);
        return tp_finish(1, g_dir);
    }
    CHECK(tok_id(g_bert, "[CLS]") == 2 && tok_id(g_bert, "[SEP]") == 3 && tok_id(g_bert, "[MASK]") == 4 &&
          ut_tokenizer_special_id(g_bert, "pad") == 0 && ut_tokenizer_special_id(g_bert, "mask") == 4,
          "BERT fixture: [PAD] 0, [CLS] 2, [SEP] 3, [MASK] 4");
    RUN(test_grouped_by_hand);
    RUN(test_group_boundary);
    RUN(test_line_by_line);
    RUN(test_roberta);
    RUN(test_csv_json);
    RUN(test_mask_shares);
    RUN(test_mask_determinism);
    RUN(test_mask_reference);
    RUN(test_mask_roberta);
    RUN(test_bad_options);
    RUN(test_bad_text);
    RUN(test_bad_csv_json);
    RUN(test_clm_blocks);
    ut_tokenizer_free(g_bert);
    ut_tokenizer_free(g_roberta);
    return tp_finish(TEST_SUMMARY(), g_dir);
}
