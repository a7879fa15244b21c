/* Sequence-to-sequence text: (source, target) pairs from parallel files
 * (FlagAI's train_inputs.txt / train_targets.txt), a TSV or CSV (RFC 4180
 * quoting, ut__csv_record) with a header, or JSON Lines, encoded once at
 * open with a pretrained tokenizer. Without names for them the columns (the
 * first object's keys) are taken as transformers' run_summarization takes
 * them: "source" and "target" when the file has them, else the first and
 * the second (pick_columns); a JSON field "translation.en" reads key "en" of
 * the object under "translation" (run_translation's layout) when there is no
 * key "translation.en". The ids are kept compactly (one array, offsets per
 * text); get expands an example into the (4, L) planes, and the batch trim
 * makes the padding dynamic. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "data_internal.h"
#include "tok_internal.h"
#include "utrain/base.h"

enum { SRC = 0, TGT = 1 };
static const char *const what_name[2] = {"source", "target"};

typedef struct {
    int64_t n, cap;              /* examples; room for cap */
    int32_t *ids;                /* every text's ids: example k's source, then its target */
    int64_t nids, ids_cap;
    int64_t *id_off;             /* (2 cap + 1): text j (2k source, 2k + 1 target) is ids[id_off[j], id_off[j + 1]) */
    char *text;                  /* the texts, each NUL-terminated */
    int64_t ntext, text_cap;
    int64_t *text_off;           /* (2 cap): text j starts at text + text_off[j] */
    int64_t max_len[2], L, truncated[2];
    int32_t pad;
    char *columns;               /* "source 'document', target 'summary'" (ds->columns); NULL: parallel files */
} s2s_impl;

/* ---- the dataset ---- */

static int s2s_get(ut_dataset *ds, int64_t i, void *xv, void *yv, char *err, size_t n) {
    const s2s_impl *m = ds->impl;
    if (i < 0 || i >= ds->n)
        return ut_errorf(err, n, "%s: example %lld out of range [0, %lld)", ds->name, (long long)i,
                         (long long)ds->n);
    int32_t *x = xv, *y = yv;
    const int64_t L = m->L;
    for (int w = SRC; w <= TGT; w++) {          /* x (4, L): ids and mask of the source, then the target */
        const int32_t *ids = m->ids + m->id_off[2 * i + w];
        int64_t len = m->id_off[2 * i + w + 1] - m->id_off[2 * i + w];
        int32_t *tok = x + 2 * w * L, *mask = tok + L;
        for (int64_t j = 0; j < L; j++) {
            tok[j] = j < len ? ids[j] : m->pad;
            mask[j] = j < len;
        }
    }
    for (int64_t j = 0; j < L; j++) y[j] = x[3 * L + j] ? x[2 * L + j] : -100;
    return 0;
}

static void s2s_impl_free(s2s_impl *m) {
    if (!m) return;
    ut_free(m->ids);
    ut_free(m->id_off);
    ut_free(m->text);
    ut_free(m->text_off);
    ut_free(m->columns);
    ut_free(m);
}

static void s2s_free(ut_dataset *ds) {
    s2s_impl_free(ds->impl);
    ut_free((char *)ds->name);
    ut_free(ds);
}

static const s2s_impl *impl_of(const ut_dataset *ds) {
    return ds && ds->seq2seq && ds->get == s2s_get ? ds->impl : NULL;
}

static const char *s2s_text(const ut_dataset *ds, int64_t i, int which) {
    const s2s_impl *m = impl_of(ds);
    if (!m || i < 0 || i >= m->n || (which != SRC && which != TGT)) return NULL;
    return m->text + m->text_off[2 * i + which];
}

const char *ut_seq2seq_text(const ut_dataset *ds, int64_t i, int which) {
    return ds && ds->seq2seq && ds->text ? ds->text(ds, i, which) : NULL;
}


int64_t ut_seq2seq_truncated(const ut_dataset *ds, int which) {
    const s2s_impl *m = impl_of(ds);
    return m && (which == SRC || which == TGT) ? m->truncated[which] : 0;
}

int64_t ut_seq2seq_batch_trim(ut_batch *b, int64_t max_len) {
    int32_t *x = b->x, *y = b->y;
    int64_t L = 1, T = 1;
    for (int64_t k = 0; k < b->count; k++)
        for (int plane = 1; plane <= 3; plane += 2) {       /* the source and the target mask */
            int64_t len = ut_mask_len(x + (k * 4 + plane) * max_len, max_len);
            if (len > L) L = len;
            if (plane == 3 && len > T) T = len;
        }
    /* rows move towards the front only, in order, so memmove in place is safe */
    for (int64_t r = 0; r < 4 * b->count; r++) memmove(x + r * L, x + r * max_len, (size_t)L * sizeof *x);
    for (int64_t k = 0; y && k < b->count; k++) memmove(y + k * T, y + k * max_len, (size_t)T * sizeof *y);
    b->x_len = L;
    b->y_len = T;
    return L;
}

/* ---- lines of a text file ---- */

/* A file split into lines in place: line[k] is line k + 1, NUL-terminated,
 * without its "\n" or "\r\n"; a newline at the end of the file ends the last
 * line and starts none. A UTF-8 byte-order mark is dropped. */
typedef struct {
    char *buf;
    char **line;
    int64_t n;
} s2s_lines;

static void lines_free(s2s_lines *f) {
    ut_free(f->buf);
    ut_free(f->line);
    memset(f, 0, sizeof *f);
}

/* Ends the line at p[start, end) and checks it is text (ut__text_line_check); a
 * '\r' before the '\n' is dropped. */
static int take_line(const char *path, s2s_lines *f, char *p, size_t start, size_t end, char *err, size_t n) {
    if (end > start && p[end - 1] == '\r') end--;
    if (ut__text_line_check(path, f->n + 1, p, start, end, err, n)) return -1;
    p[end] = 0;                  /* the '\r' or '\n', or the spare NUL after the data */
    f->line[f->n++] = p + start;
    return 0;
}

/* The whole file (ut__read_file: a NUL after the data) into *buf, *text
 * past a UTF-8 byte-order mark, *len bytes of it. */
static int read_whole(const char *path, char **buf, char **text, size_t *len, char *err, size_t n) {
    *buf = (char *)ut__read_file(path, len, err, n);
    if (!*buf) return -1;
    *text = *buf;
    if (*len >= 3 && !memcmp(*text, "\xEF\xBB\xBF", 3)) {    /* a byte-order mark is not text */
        *text += 3;
        *len -= 3;
    }
    return 0;
}

static int read_lines(const char *path, s2s_lines *f, char *err, size_t n) {
    memset(f, 0, sizeof *f);
    size_t len;
    char *p;
    if (read_whole(path, &f->buf, &p, &len, err, n)) return -1;
    int64_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += p[i] == '\n';
    f->line = ut_malloc_check((size_t)lines * sizeof *f->line);
    for (size_t start = 0; start < len;) {
        const char *nl = memchr(p + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - p) : len;
        if (take_line(path, f, p, start, end, err, n)) {
            lines_free(f);
            return -1;
        }
        start = end + 1;
    }
    return 0;
}

static bool blank(const char *s) { return s[strspn(s, " \t\r\n\v\f")] == 0; }

/* ---- encoding into the dataset ---- */

typedef struct {
    ut_tokenizer *tok;
    const ut_seq2seq_opts *o;
    s2s_impl *m;
    ut_tok_encoding e;
} builder;

static void *grow(void *p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return p;
    while (*cap < need) *cap = *cap ? 2 * *cap : 256;
    return ut_realloc_check(p, (size_t)*cap * elem);
}

static void push_text(s2s_impl *m, int64_t j, const char *s, size_t len) {
    m->text = grow(m->text, &m->text_cap, m->ntext + (int64_t)len + 1, 1);
    m->text_off[j] = m->ntext;
    memcpy(m->text + m->ntext, s, len);
    m->text[m->ntext + (int64_t)len] = 0;
    m->ntext += (int64_t)len + 1;
}

/* b->e's ids as text w of the example being added */
static void push_ids(builder *b, int w) {
    s2s_impl *m = b->m;
    m->ids = grow(m->ids, &m->ids_cap, m->nids + b->e.len, sizeof *m->ids);
    memcpy(m->ids + m->nids, b->e.ids, (size_t)b->e.len * sizeof *m->ids);
    m->nids += b->e.len;
    m->id_off[2 * m->n + w + 1] = m->nids;
}

/* Encodes text as text w of the dataset: with the special tokens, cut to
 * max_len[w] (counted when it had to be). */
static int encode_text(builder *b, int w, const char *text, const char *path, int64_t line, char *err,
                       size_t n) {
    s2s_impl *m = b->m;
    char why[512];
    ut_tok_opts whole = {0}, cut = {.max_len = m->max_len[w]};
    int rc = ut_tokenizer_encode(b->tok, text, NULL, &whole, &b->e, why, sizeof why);
    if (!rc && b->e.len > cut.max_len) {
        m->truncated[w]++;
        rc = ut_tokenizer_encode(b->tok, text, NULL, &cut, &b->e, why, sizeof why);
    }
    if (rc) return ut_errorf(err, n, "%s:%lld: %s: %s", path, (long long)line, what_name[w], why);
    push_ids(b, w);
    return 0;
}

/* The source text encoded as ut_seq2seq_encode_source does; text is
 * already lower-cased where data.lowercase asks for it (add_example did it
 * once for the stored text and the encoding both). */
static int encode_source(builder *b, const char *as_read, const char *text, const char *path, int64_t line,
                         char *err, size_t n) {
    char why[512];
    bool cut;
    ut_seq2seq_opts o = *b->o;
    o.lowercase = false;
    int64_t bad = ut__utf8_check(as_read, strlen(as_read)); /* as ut_seq2seq_encode_source checks it */
    if (bad >= 0)
        return ut_errorf(err, n, "%s:%lld: %s: byte %lld: not valid UTF-8", path, (long long)line, what_name[SRC],
                         (long long)bad);
    if (ut_seq2seq_encode_source(b->tok, &o, text, &b->e, &cut, why, sizeof why))
        return ut_errorf(err, n, "%s:%lld: %s: %s", path, (long long)line, what_name[SRC], why);
    b->m->truncated[SRC] += cut;
    push_ids(b, SRC);
    return 0;
}

int ut_seq2seq_encode_source(ut_tokenizer *t, const ut_seq2seq_opts *o, const char *text, ut_tok_encoding *e,
                             bool *cut, char *err, size_t n) {
    size_t len = strlen(text);
    int64_t bad = ut__utf8_check(text, len);
    if (bad >= 0) return ut_errorf(err, n, "byte %lld: not valid UTF-8", (long long)bad);
    char *low = o->lowercase ? ut__bert_normalize(text, len, false, false, false, true, &len) : NULL;
    ut__sbuf src = {0};
    ut__sbuf_put(&src, "", 0);
    if (o->source_prefix) ut__sbuf_put(&src, o->source_prefix, strlen(o->source_prefix));
    ut__sbuf_put(&src, low ? low : text, len);
    ut_tok_opts whole = {0}, part = {.max_len = o->max_source_len};
    int rc = ut_tokenizer_encode(t, src.s, NULL, &whole, e, err, n);
    *cut = !rc && e->len > o->max_source_len;
    if (*cut) rc = ut_tokenizer_encode(t, src.s, NULL, &part, e, err, n);
    ut_free(low);
    ut_free(src.s);
    return rc;
}

/* Adds one example; path[w] and line[w] say where text w came from. */
static int add_example(builder *b, const char *text[2], const char *const path[2], const int64_t line[2],
                       char *err, size_t n) {
    s2s_impl *m = b->m;
    for (int w = SRC; w <= TGT; w++)
        if (blank(text[w]))
            return ut_errorf(err, n, "%s:%lld: empty %s (every example needs a source and a target text)",
                             path[w], (long long)line[w], what_name[w]);
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 256;
        m->id_off = ut_realloc_check(m->id_off, (size_t)(2 * m->cap + 1) * sizeof *m->id_off);
        m->text_off = ut_realloc_check(m->text_off, (size_t)(2 * m->cap) * sizeof *m->text_off);
        m->id_off[0] = 0;
    }
    for (int w = SRC; w <= TGT; w++) {
        size_t len = strlen(text[w]);
        char *low = b->o->lowercase ? ut__bert_normalize(text[w], len, false, false, false, true, &len) : NULL;
        const char *t = low ? low : text[w];
        push_text(m, 2 * m->n + w, t, len);
        int rc = w == SRC ? encode_source(b, text[w], t, path[w], line[w], err, n)
                          : encode_text(b, w, t, path[w], line[w], err, n);
        ut_free(low);
        if (rc) return -1;
    }
    m->n++;
    return 0;
}

/* ---- the three layouts ---- */

static int read_parallel(builder *b, const char *spath, const char *tpath, char *err, size_t n) {
    s2s_lines f[2];
    if (read_lines(spath, &f[SRC], err, n)) return -1;
    if (read_lines(tpath, &f[TGT], err, n)) {
        lines_free(&f[SRC]);
        return -1;
    }
    int rc = 0;
    if (f[SRC].n != f[TGT].n)
        rc = ut_errorf(err, n, "%s has %lld lines but %s has %lld: parallel files hold one example per line, "
                       "line k of the sources paired with line k of the targets", spath, (long long)f[SRC].n,
                       tpath, (long long)f[TGT].n);
    const char *const path[2] = {spath, tpath};
    for (int64_t k = 0; !rc && k < f[SRC].n; k++) {
        const char *text[2] = {f[SRC].line[k], f[TGT].line[k]};
        const int64_t line[2] = {k + 1, k + 1};
        rc = add_example(b, text, path, line, err, n);
    }
    if (!rc && b->m->n == 0) rc = ut_errorf(err, n, "%s: no examples (an empty file)", spath);
    lines_free(&f[SRC]);
    lines_free(&f[TGT]);
    return rc;
}

/* Splits line at tabs in place into f (room for cap); returns the field count. */
static int64_t split_tabs(char *line, char **f, int64_t cap) {
    int64_t k = 0;
    for (char *p = line;; p++) {
        if (k < cap) f[k] = p;
        k++;
        p = strchr(p, '\t');
        if (!p) return k;
        *p = 0;
    }
}

static int64_t count_fields(const char *line) {
    int64_t k = 1;
    for (const char *p = line; (p = strchr(p, '\t')); p++) k++;
    return k;
}

/* The layouts with named columns: how the columns are separated */
enum { KIND_TSV, KIND_CSV, KIND_JSONL };
static const char *const kind_sep[] = {"tab", "comma", "comma"};

/* A name the options give ("" is none: the default) */
static const char *given(const char *s) { return s && *s ? s : NULL; }

/* Field w's name as messages show it: the given one, else "source" / "target" */
static const char *shown_name(const char *const fields[2], int w) { return fields[w] ? fields[w] : what_name[w]; }

/* col[0, ncol) as 'a', 'b' (JSON: "a", "b"), cut to fit out */
static void list_names(char *const *col, int64_t ncol, bool json, char *out, size_t size) {
    size_t used = 0;
    out[0] = 0;
    for (int64_t k = 0; k < ncol && used < size; k++)
        used += (size_t)snprintf(out + used, size - used, json ? "%s\"%.40s\"" : "%s'%.40s'", k ? ", " : "",
                                 col[k]);
}

/* Which of col (the header's names, or the first JSON object's keys in
 * their order; ncol of them, on line hline) hold the source and the target,
 * into at[2]. A field given (fields[w] not NULL) is the column of that name:
 * a TSV or CSV header without it is an error listing the columns; a JSON
 * field not among the first object's keys (a nested "translation.en") gets
 * -1 and is looked up line by line. A field not given is, as
 * run_summarization takes it, the column "source" ("target") when there is
 * one, else the first (the second) column; one that would be the other's
 * column is the first column that is not. Then a file of one column (key)
 * is an error saying which options name them. */
static int pick_columns(const char *path, int64_t hline, char *const *col, int64_t ncol, int kind,
                        const char *const fields[2], int64_t at[2], char *err, size_t n) {
    bool json = kind == KIND_JSONL;
    char found[300];
    list_names(col, ncol, json, found, sizeof found);
    for (int w = SRC; w <= TGT; w++) {
        const char *name = shown_name(fields, w);
        at[w] = -1;
        for (int64_t k = 0; k < ncol && at[w] < 0; k++)
            if (!strcmp(col[k], name)) at[w] = k;
        if (fields[w] && at[w] < 0 && !json)
            return ut_errorf(err, n, "%s:%lld: no '%s' column for the %s text in the header (columns found: %s); "
                             "the header names the %s-separated columns (the field names are options: "
                             "source_field, target_field)", path, (long long)hline, name, what_name[w], found,
                             kind_sep[kind]);
    }
    for (int w = SRC; w <= TGT; w++) /* source_field "target": the column "target" is not also the target */
        if (!fields[w] && fields[!w] && at[w] == at[!w]) at[w] = -1;
    for (int w = SRC; w <= TGT; w++) {
        if (fields[w] || at[w] >= 0) continue;
        int64_t k = w;           /* the first column for the source, the second for the target */
        if (k >= ncol || k == at[!w])
            for (k = 0; k < ncol && k == at[!w]; k++) {}
        if (k >= ncol)
            return ut_errorf(err, n, "%s:%lld: %s %s%s%s%s for two texts: name the source and target %ss with "
                             "the options source_field and target_field (without them the source is the %s "
                             "'source', else the first, and the target 'target', else the second)%s", path,
                             (long long)hline, ncol ? "one" : "no", json ? "key" : "column", ncol ? " (" : "s",
                             ncol ? found : "", ncol ? ")" : "",
                             json ? "key" : "column", json ? "key" : "column",
                             json ? "; a key nested in an object is named with a dot: translation.en for "
                                    "{\"translation\": {\"en\": ...}}" : "");
        at[w] = k;
    }
    return 0;
}

/* Keeps "source 'a', target 'b'" in m for ds->columns. */
static void keep_columns(s2s_impl *m, const char *source, const char *target) {
    char d[512];
    snprintf(d, sizeof d, "source '%.200s', target '%.200s'", source, target);
    ut_free(m->columns);
    m->columns = ut__data_strdup(d);
}

/* The messages' "'source' and 'target', else the first two" for a file without a header */
static void header_hint(const char *const fields[2], char *out, size_t size) {
    snprintf(out, size, "'%s' and '%s'%s", shown_name(fields, SRC), shown_name(fields, TGT),
             fields[SRC] && fields[TGT] ? "" : ", else the first two");
}

static int read_tsv(builder *b, const char *path, const char *const fields[2], char *err, size_t n) {
    s2s_lines f;
    if (read_lines(path, &f, err, n)) return -1;
    if (f.n == 0) {
        lines_free(&f);
        char hint[300];
        header_hint(fields, hint, sizeof hint);
        return ut_errorf(err, n, "%s: empty file: expected a header line naming the tab-separated columns (%s), "
                         "then one example per line", path, hint);
    }
    int64_t ncol = count_fields(f.line[0]), at[2] = {0, 0};
    char **col = ut_malloc_check((size_t)ncol * sizeof *col);
    split_tabs(f.line[0], col, ncol);
    int rc = pick_columns(path, 1, col, ncol, KIND_TSV, fields, at, err, n);
    if (!rc) keep_columns(b->m, col[at[SRC]], col[at[TGT]]);
    const char *const where[2] = {path, path};
    for (int64_t k = 1; !rc && k < f.n; k++) {
        if (blank(f.line[k])) continue;         /* as the GLUE reader (tsv.c): blank lines are skipped */
        int64_t got = count_fields(f.line[k]);
        if (got != ncol) {
            rc = ut_errorf(err, n, "%s:%lld: %s: expected %lld tab-separated fields as in the header, got %lld",
                           path, (long long)k + 1, got < ncol ? "missing tab" : "too many tabs",
                           (long long)ncol, (long long)got);
            break;
        }
        split_tabs(f.line[k], col, ncol);
        const char *text[2] = {col[at[SRC]], col[at[TGT]]};
        const int64_t line[2] = {k + 1, k + 1};
        rc = add_example(b, text, where, line, err, n);
    }
    if (!rc && b->m->n == 0) rc = ut_errorf(err, n, "%s: no examples after the header", path);
    ut_free(col);
    lines_free(&f);
    return rc;
}

/* CSV as Python's csv module and pandas write it (RFC 4180): a header, then
 * one example a record, a record spanning lines where a quoted field holds
 * newlines; read whole, each line checked as read_lines checks it. */
static int read_csv(builder *b, const char *path, const char *const fields[2], char *err, size_t n) {
    char *buf, *p;
    size_t len;
    if (read_whole(path, &buf, &p, &len, err, n)) return -1;
    int rc = 0;
    int64_t commas = 0, lineno = 1;
    for (size_t start = 0; !rc && start < len; lineno++) {
        const char *nl = memchr(p + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - p) : len;
        rc = ut__text_line_check(path, lineno, p, start, end, err, n);
        start = end + 1;
    }
    for (size_t i = 0; i < len; i++) commas += p[i] == ',';
    enum { MAX_COLUMNS = 1 << 16 };
    int cap = commas + 1 < MAX_COLUMNS ? (int)commas + 1 : MAX_COLUMNS, ncol = 0, got = 0;
    char **f = ut_malloc_check((size_t)cap * sizeof *f);
    int64_t at[2] = {-1, -1}, line = 1;
    const char *const where[2] = {path, path};
    while (!rc && *p) {
        int64_t first = line;    /* the line the record starts on */
        if ((rc = ut__csv_record(path, &p, &line, f, cap, &got, err, n))) break;
        if (got == 1 && blank(f[0])) continue; /* a blank line, as tsv.c's parse_csv skips it */
        if (at[SRC] < 0) {       /* the header */
            if (got > cap) {
                rc = ut_errorf(err, n, "%s:%lld: %d columns: at most %d are read", path, (long long)first, got, cap);
                break;
            }
            ncol = got;
            if (!(rc = pick_columns(path, first, f, ncol, KIND_CSV, fields, at, err, n)))
                keep_columns(b->m, f[at[SRC]], f[at[TGT]]);
            continue;
        }
        if (got != ncol) {
            rc = ut_errorf(err, n, "%s:%lld: %s: expected %d comma-separated fields as in the header, got %d", path,
                           (long long)first, got < ncol ? "missing comma" : "too many commas", ncol, got);
            break;
        }
        const char *text[2] = {f[at[SRC]], f[at[TGT]]};
        const int64_t lines[2] = {first, first};
        rc = add_example(b, text, where, lines, err, n);
    }
    if (!rc && at[SRC] < 0) {
        char hint[300];
        header_hint(fields, hint, sizeof hint);
        rc = ut_errorf(err, n, "%s: empty file: expected a header line naming the comma-separated columns (%s), "
                       "then one example per record", path, hint);
    }
    if (!rc && b->m->n == 0) rc = ut_errorf(err, n, "%s: no examples after the header", path);
    ut_free(f);
    ut_free(buf);
    return rc;
}

static const char *json_kind(const cJSON *j) {
    return cJSON_IsNull(j) ? "null" : cJSON_IsBool(j) ? "a boolean" : cJSON_IsNumber(j) ? "a number"
         : cJSON_IsString(j) ? "a string" : cJSON_IsArray(j) ? "an array" : "an object";
}

/* o's member named key[0, len) */
static const cJSON *member(const cJSON *o, const char *key, size_t len) {
    for (const cJSON *c = o->child; c; c = c->next)
        if (c->string && strlen(c->string) == len && !memcmp(c->string, key, len)) return c;
    return NULL;
}

/* The value of field in object o, which is field[0, off - 1)'s object of
 * the line (off 0: the line's): the key field + off, else, for a name with
 * a dot, the part after the first dot in the object under the part before
 * it ("translation.en": key "en" of "translation"), and so on; or an error
 * naming the line and the key path. */
static int json_value(const char *path, int64_t line, const cJSON *o, const char *field, size_t off,
                      const cJSON **out, char *err, size_t n) {
    const char *key = field + off, *dot = strchr(key, '.');
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v && dot) {
        const cJSON *h = member(o, key, (size_t)(dot - key));
        if (h && cJSON_IsObject(h)) return json_value(path, line, h, field, (size_t)(dot - field) + 1, out, err, n);
        if (h)
            return ut_errorf(err, n, "%s:%lld: \"%.*s\" is %s, expected an object with the key \"%s\" (for \"%s\")",
                             path, (long long)line, (int)(dot - field), field, json_kind(h), dot + 1, field);
    }
    if (!v) {
        char keys[300] = "";
        size_t used = 0;
        for (const cJSON *c = o->child; c && used < sizeof keys; c = c->next)
            used += (size_t)snprintf(keys + used, sizeof keys - used, "%s\"%.40s\"", c == o->child ? "" : ", ",
                                     c->string);
        if (off)
            return ut_errorf(err, n, "%s:%lld: no \"%s\" key in \"%.*s\" (keys found: %s)", path, (long long)line,
                             key, (int)(off - 1), field, used ? keys : "none");
        return ut_errorf(err, n, "%s:%lld: no \"%s\" key (keys found: %s)", path, (long long)line, key,
                         used ? keys : "none");
    }
    *out = v;
    return 0;
}

/* The string under field (json_value) of the line's object o */
static int json_text(const char *path, int64_t line, const cJSON *o, const char *field, const char **out,
                     char *err, size_t n) {
    const cJSON *v = NULL;
    if (json_value(path, line, o, field, 0, &v, err, n)) return -1;
    if (!cJSON_IsString(v))
        return ut_errorf(err, n, "%s:%lld: \"%s\" is %s, expected a string%s", path, (long long)line, field,
                         json_kind(v), cJSON_IsObject(v) ? " (a key of this object is named with a dot: "
                                                           "translation.en reads \"en\" of \"translation\")" : "");
    *out = v->valuestring;
    return 0;
}

/* The first object's keys choose the fields not given (pick_columns):
 * name[2] gets copies of the fields' names. */
static int json_fields(builder *b, const char *path, int64_t line, const cJSON *o, const char *const fields[2],
                       char *name[2], char *err, size_t n) {
    int64_t nkeys = 0, at[2];
    for (const cJSON *c = o->child; c; c = c->next) nkeys++;
    char **keys = ut_malloc_check((size_t)(nkeys ? nkeys : 1) * sizeof *keys);
    nkeys = 0;
    for (const cJSON *c = o->child; c; c = c->next) keys[nkeys++] = c->string;
    int rc = pick_columns(path, line, keys, nkeys, KIND_JSONL, fields, at, err, n);
    for (int w = SRC; w <= TGT && !rc; w++) name[w] = ut__data_strdup(fields[w] ? fields[w] : keys[at[w]]);
    if (!rc) keep_columns(b->m, name[SRC], name[TGT]);
    ut_free(keys);
    return rc;
}

/* One example from the JSON object j found at line (array: an element of
 * a JSON array, else a JSON Lines line) */
static int json_example(builder *b, const char *path, int64_t line, const cJSON *j, bool array,
                        const char *const fields[2], char *name[2], char *err, size_t n) {
    const char *a = name[SRC] ? name[SRC] : shown_name(fields, SRC),
               *t = name[TGT] ? name[TGT] : shown_name(fields, TGT);
    if (!cJSON_IsObject(j))
        return ut_errorf(err, n, "%s:%lld: %s, expected an object {\"%s\": \"...\", \"%s\": \"...\"} (%s)", path,
                         (long long)line, json_kind(j), a, t,
                         array ? "a JSON array of objects, one an example" : "JSON Lines: one object per line");
    int rc = name[SRC] ? 0 : json_fields(b, path, line, j, fields, name, err, n);
    const char *text[2] = {NULL, NULL};
    for (int w = SRC; w <= TGT && !rc; w++) rc = json_text(path, line, j, name[w], &text[w], err, n);
    const char *const where[2] = {path, path};
    const int64_t lines[2] = {line, line};
    return rc ? rc : add_example(b, text, where, lines, err, n);
}

static int jsonl_line(builder *b, const char *path, const char *s, int64_t line, const char *const fields[2],
                      char *name[2], char *err, size_t n) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(s, &end, true);
    if (!j)
        return ut_errorf(err, n, "%s:%lld: not valid JSON (at byte %td of the line); JSON Lines: one object "
                         "{\"%s\": \"...\", \"%s\": \"...\"} per line, or a .json file that is one array of "
                         "such objects", path, (long long)line, end ? end - s : (ptrdiff_t)0,
                         name[SRC] ? name[SRC] : shown_name(fields, SRC), name[TGT] ? name[TGT] : shown_name(fields, TGT));
    int rc = json_example(b, path, line, j, false, fields, name, err, n);
    cJSON_Delete(j);
    return rc;
}

/* A file that is one JSON array of objects (pandas' to_json(orient="records"),
 * json.dump of a list): each element an example, errors naming the line it
 * starts on. *array 0: the file is not such an array (nothing read). */
static int read_json_array(builder *b, const char *path, const char *const fields[2], char *name[2], int *array,
                           char *err, size_t n) {
    char *buf, *p;
    size_t len;
    *array = 0;
    if (read_whole(path, &buf, &p, &len, err, n)) return -1;
    if (p[strspn(p, " \t\r\n")] != '[') {
        ut_free(buf);
        return 0;
    }
    *array = 1;
    int rc = 0;
    int64_t line = 1;
    for (size_t start = 0; start < len && !rc; line++) { /* text: no NUL byte, UTF-8 */
        const char *nl = memchr(p + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - p) : len;
        rc = ut__text_line_check(path, line, p, start, end, err, n);
        start = end + 1;
    }
    const char *end = NULL;
    cJSON *a = rc ? NULL : cJSON_ParseWithOpts(p, &end, false);
    if (!rc && (!a || (end && end[strspn(end, " \t\r\n")]))) {
        const char *at = end ? end + (a ? strspn(end, " \t\r\n") : 0) : p;
        line = 1;
        for (const char *q = p; q < at; q++) line += *q == '\n';
        rc = ut_errorf(err, n, "%s:%lld: not valid JSON (at byte %td of the file); a .json file is JSON Lines (one "
                               "object per line) or one array of objects", path, (long long)line, at - p);
    }
    int64_t count = a ? cJSON_GetArraySize(a) : 0, k = 0;
    int64_t *at = ut_malloc_check((size_t)(count ? count : 1) * sizeof *at);
    for (int64_t got = ut__json_array_lines(p, at, count); got < count; got++) at[got] = 1; /* (the same count) */
    for (const cJSON *e = a && !rc ? a->child : NULL; e && !rc; e = e->next, k++)
        rc = json_example(b, path, at[k], e, true, fields, name, err, n);
    if (!rc && b->m->n == 0) rc = ut_errorf(err, n, "%s: no examples (an empty array)", path);
    ut_free(at);
    cJSON_Delete(a);
    ut_free(buf);
    return rc;
}

static int read_jsonl(builder *b, const char *path, const char *const fields[2], char *err, size_t n) {
    char *name[2] = {NULL, NULL}; /* the fields' names, once the first object has chosen them */
    int array, rc = read_json_array(b, path, fields, name, &array, err, n);
    s2s_lines f = {0};
    if (!array && !rc) rc = read_lines(path, &f, err, n);
    for (int64_t k = 0; !array && !rc && k < f.n; k++)
        if (!blank(f.line[k])) rc = jsonl_line(b, path, f.line[k], k + 1, fields, name, err, n);
    if (!array && !rc && b->m->n == 0)
        rc = ut_errorf(err, n, "%s: no examples (expected one JSON object per line)", path);
    ut_free(name[SRC]);
    ut_free(name[TGT]);
    if (!array) lines_free(&f);
    return rc;
}

/* ---- open ---- */

/* The lengths are in range and leave room for text beside the special tokens. */
static int check_lengths(const char *path, ut_tokenizer *t, const ut_seq2seq_opts *o, char *err, size_t n) {
    const int64_t len[2] = {o->max_source_len, o->max_target_len};
    for (int w = SRC; w <= TGT; w++) {
        if (len[w] < 2 || len[w] > 1000000000)
            return ut_errorf(err, n, "%s: max_%s_len must be in [2, 1e9] (got %lld)", path, what_name[w],
                             (long long)len[w]);
        ut_tok_encoding e = {0};
        ut_tok_opts to = {.max_len = len[w]};
        char why[256];
        int rc = ut_tokenizer_encode(t, "a", NULL, &to, &e, why, sizeof why);
        ut_tok_encoding_free(&e);
        if (rc) return ut_errorf(err, n, "%s: max_%s_len %lld: %s", path, what_name[w], (long long)len[w], why);
    }
    return 0;
}

static int read_examples(builder *b, const char *path, const char *target_path, char *err, size_t n) {
    const char *const fields[2] = {given(b->o->source_field), given(b->o->target_field)};
    if (target_path) return read_parallel(b, path, target_path, err, n);
    if (ut__ends_with_ci(path, ".tsv")) return read_tsv(b, path, fields, err, n);
    if (ut__ends_with_ci(path, ".csv")) return read_csv(b, path, fields, err, n);
    if (ut__ends_with_ci(path, ".jsonl") || ut__ends_with_ci(path, ".json"))
        return read_jsonl(b, path, fields, err, n);
    char hint[300];
    header_hint(fields, hint, sizeof hint);
    return ut_errorf(err, n, "%s: unknown layout: give a .tsv or .csv file (a header naming the columns: %s), "
                     "a .jsonl or .json file (one object {\"%s\": ..., \"%s\": ...} per line), or two parallel "
                     "text files (sources and targets, one example per line)", path, hint, shown_name(fields, SRC),
                     shown_name(fields, TGT));
}

ut_dataset *ut_seq2seq_dataset_open(const char *path, const char *target_path, ut_tokenizer *t,
                                    const ut_seq2seq_opts *o, char *err, size_t n) {
    if (!o) {
        ut_errorf(err, n, "%s: no seq2seq options (max_source_len, max_target_len)", path);
        return NULL;
    }
    if (check_lengths(path, t, o, err, n)) return NULL;
    s2s_impl *m = ut_calloc_check(1, sizeof *m);
    m->max_len[SRC] = o->max_source_len;
    m->max_len[TGT] = o->max_target_len;
    m->L = o->max_source_len > o->max_target_len ? o->max_source_len : o->max_target_len;
    int32_t pad = ut_tokenizer_special_id(t, "pad");
    m->pad = pad >= 0 ? pad : 0;
    builder b = {.tok = t, .o = o, .m = m};
    int rc = read_examples(&b, path, target_path, err, n);
    ut_tok_encoding_free(&b.e);
    if (rc) {
        s2s_impl_free(m);
        return NULL;
    }
    ut_dataset *ds = ut_calloc_check(1, sizeof *ds);
    *ds = (ut_dataset){.name = ut__data_strdup(path), .n = m->n, .x_ndim = 2, .x_ne = {4, m->L}, .y_ndim = 1,
                       .y_ne = {m->L}, .x_dtype = UT_I32, .y_dtype = UT_I32, .num_classes = 0,
                       .vocab_size = ut_tokenizer_vocab_size(t), .seq2seq = true, .get = s2s_get, .text = s2s_text,
                       .free = s2s_free, .impl = m, .columns = m->columns};
    return ds;
}
