/* Masked language modeling data, as transformers' run_mlm.py prepares it
 * and DataCollatorForLanguageModeling masks it. Texts come from a text file
 * (a line each), a CSV file or JSON (Lines, or one array of objects); each
 * is encoded with the tokenizer's special tokens and goes straight into a
 * compact store (one array of ids, a maskable flag per id, type ids only
 * when one is not 0, an offset per example): grouped, each 1000 texts' ids
 * are cut into blocks of max_len (run_mlm's group_texts on its batches of
 * 1000 rows); line by line, each text that is not blank is an example cut
 * at max_len. get expands an example into the (3, max_len) token planes and
 * the (max_len) labels; collate draws the masks of a batch from Philox
 * blocks at (seed; epoch, example, position), so they depend on nothing
 * else: not the batch, the ranks, nor a resume. The causal language
 * model's texts (run_clm.py) go through the same reading and grouping into
 * blocks; their examples are a block's ids and the next token of each. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "tok_internal.h"
#include "utrain/base.h"

enum {
    IGNORE = -100,               /* a position no label counts at (PyTorch's ignore_index) */
    GROUP_TEXTS = 1000,          /* run_mlm's map(group_texts, batched=True): 1000 rows a batch */
};
#define MLM_STREAM 0x6d6c6dULL   /* "mlm": the masks' streams apart from other draws of (epoch, example) */

typedef struct {
    int64_t n, L;                /* examples; max_len */
    int32_t *ids;                /* every example's ids, special tokens included */
    uint8_t *maskable;           /* per id: 1 a text's token (its label the id), 0 a special token */
    int32_t *types;              /* per id: the type id; NULL while every one is 0 */
    int64_t *off;                /* (n + 1): example k is ids[off[k], off[k + 1]) */
    int32_t pad, mask;           /* the pad and mask ids */
    int64_t vocab;               /* random replacements are drawn from [0, vocab) */
    uint64_t key;                /* the Philox key from the seed */
    double prob;                 /* the share of maskable positions chosen */
    char *columns;               /* ds->columns */
} mlm_impl;

/* ---- the dataset ---- */

static int mlm_get(ut_dataset *ds, int64_t i, void *xv, void *yv, char *err, size_t n) {
    const mlm_impl *m = ds->impl;
    if (i < 0 || i >= ds->n)
        return ut_errorf(err, n, "%s: example %lld out of range [0, %lld)", ds->name, (long long)i,
                         (long long)ds->n);
    int32_t *x = xv, *y = yv;    /* x (3, L): ids, type ids, mask; y (L) */
    const int64_t L = m->L, at = m->off[i], len = m->off[i + 1] - at;
    for (int64_t j = 0; j < L; j++) {
        bool in = j < len;
        x[j] = in ? m->ids[at + j] : m->pad;
        x[L + j] = in && m->types ? m->types[at + j] : 0;
        x[2 * L + j] = in;
        y[j] = in && m->maskable[at + j] ? m->ids[at + j] : IGNORE;
    }
    return 0;
}

/* A 32-bit draw's top 24 bits as a double in [0, 1) (exact: 24 bits fit) */
static double unit(uint32_t r) { return (double)(r >> 8) * 0x1p-24; }

/* DataCollatorForLanguageModeling's torch_mask_tokens on b: each position j
 * of example k with a label draws Philox block j of stream (epoch, index,
 * "mlm"); word 0 below the probability chooses it (compared as doubles),
 * word 1 then picks the mask token (< 0.8), a random id (< 0.9, word 2
 * scaled to the vocabulary) or the token as it is; a position not chosen
 * loses its label. x (count, 3, Lx) holds the ids in its first plane, y
 * (count, Ly) the labels, both as the loader left them. */
static int mlm_collate(const ut_dataset *ds, ut_batch *b, char *err, size_t n) {
    const mlm_impl *m = ds->impl;
    const int64_t Lx = b->x_len ? b->x_len : m->L, Ly = b->y_len ? b->y_len : m->L;
    if (Lx < 1 || Lx > m->L || Ly < 1 || Ly > Lx)
        return ut_errorf(err, n, "%s: a batch of width %lld with labels of width %lld (max_len %lld)", ds->name,
                         (long long)Lx, (long long)Ly, (long long)m->L);
    int32_t *x = b->x, *y = b->y;
    for (int64_t k = 0; k < b->count; k++) {
        uint64_t stream = ut_philox_stream((uint64_t)b->epoch, (uint64_t)b->idx[k], MLM_STREAM);
        int32_t *ids = x + k * 3 * Lx, *lab = y + k * Ly;
        for (int64_t j = 0; j < Ly; j++) {
            if (lab[j] == IGNORE) continue;
            uint32_t r[4];
            ut_philox_block(m->key, stream, (uint64_t)j, r);
            if (!(unit(r[0]) < m->prob)) {
                lab[j] = IGNORE;
                continue;
            }
            double u = unit(r[1]);
            if (u < 0.8) ids[j] = m->mask;
            else if (u < 0.9) ids[j] = (int32_t)(((uint64_t)r[2] * (uint64_t)m->vocab) >> 32);
        }
    }
    return 0;
}

static void impl_free(mlm_impl *m) {
    if (!m) return;
    ut_free(m->ids);
    ut_free(m->maskable);
    ut_free(m->types);
    ut_free(m->off);
    ut_free(m->columns);
    ut_free(m);
}

static void mlm_free(ut_dataset *ds) {
    impl_free(ds->impl);
    ut_free((char *)ds->name);
    ut_free(ds);
}

/* ---- encoding into the store ---- */

/* Where texts go as they are read: encoded, appended to m's store, and cut
 * into examples (grouped: at the end of each 1000 texts). */
typedef struct {
    const char *path;
    ut_tokenizer *t;
    mlm_impl *m;
    bool by_line;
    bool keep_ends;              /* a text file's texts keep their line ends (run_clm's keep_linebreaks) */
    const char *len_key;         /* the length's key, for messages (data.max_len, data.seq_len) */
    ut__sbuf line;               /* keep_ends: the line being read, with its end */
    int64_t npre, nsuf;          /* the special tokens before and after a text's own ids */
    ut_tok_encoding e;
    int64_t at, cap;             /* ids stored; room for */
    int64_t off_cap;
    int64_t group_start, group_texts; /* grouped: where the current group's ids start; its texts */
    int64_t texts, tokens;       /* read so far (for the message when no example comes of them) */
} sink;

static void sink_reserve(sink *s, int64_t more) {
    mlm_impl *m = s->m;
    if (s->at + more <= s->cap) return;
    int64_t cap = s->cap ? s->cap : 1024;
    while (cap < s->at + more) cap *= 2;
    m->ids = ut_realloc_check(m->ids, (size_t)cap * sizeof *m->ids);
    m->maskable = ut_realloc_check(m->maskable, (size_t)cap);
    if (m->types) {
        m->types = ut_realloc_check(m->types, (size_t)cap * sizeof *m->types);
        memset(m->types + s->cap, 0, (size_t)(cap - s->cap) * sizeof *m->types);
    }
    s->cap = cap;
}

/* One more example: the store's ids up to end */
static void end_example(sink *s, int64_t end) {
    mlm_impl *m = s->m;
    if (m->n + 2 > s->off_cap) {
        s->off_cap = 2 * (m->n + 2);
        m->off = ut_realloc_check(m->off, (size_t)s->off_cap * sizeof *m->off);
    }
    m->off[++m->n] = end;
}

/* Grouped: the current group's ids cut into blocks of L, the rest dropped */
static void end_group(sink *s) {
    const int64_t L = s->m->L, blocks = (s->at - s->group_start) / L;
    for (int64_t k = 1; k <= blocks; k++) end_example(s, s->group_start + k * L);
    s->at = s->group_start += blocks * L;
    s->group_texts = 0;
}

/* A line is blank: only ASCII white space (run_mlm's line_by_line drops it) */
static bool blank(const char *s) { return !s[strspn(s, " \t\n\v\f\r")]; }

/* One text (NUL-terminated UTF-8) of the file, read at line */
static int sink_text(sink *s, const char *text, int64_t line, char *err, size_t n) {
    s->texts++;
    if (s->by_line && blank(text)) return 0;
    char why[256];
    ut_tok_opts cut = {.max_len = s->m->L};
    if (ut_tokenizer_encode(s->t, text, NULL, s->by_line ? &cut : NULL, &s->e, why, sizeof why))
        return ut_errorf(err, n, "%s:%lld: %s", s->path, (long long)line, why);
    const ut_tok_encoding *e = &s->e;
    mlm_impl *m = s->m;
    sink_reserve(s, e->len);
    for (int64_t q = 0; q < e->len; q++) {
        int32_t type = e->type_ids ? e->type_ids[q] : 0;
        if (type && !m->types) m->types = ut_calloc_check((size_t)s->cap, sizeof *m->types);
        m->ids[s->at] = e->ids[q];
        m->maskable[s->at] = q >= s->npre && q < e->len - s->nsuf;
        if (m->types) m->types[s->at] = type;
        s->at++;
    }
    s->tokens += e->len;
    if (s->by_line) end_example(s, s->at);
    else if (++s->group_texts == GROUP_TEXTS) end_group(s);
    return 0;
}

/* ---- the files' texts ---- */

/* The column run_mlm reads among names (count of them): the one given
 * (-1 when absent), else "text", else the first. */
static int pick_column(char *const *names, int count, const char *given) {
    const char *want = given && *given ? given : "text";
    for (int k = 0; k < count; k++)
        if (!strcmp(names[k], want)) return k;
    return given && *given ? -1 : 0;
}

/* names (count) as "a", "b", ... for a message, cut to fit out */
static void name_list(char *const *names, int count, char *out, size_t size) {
    size_t used = 0;
    out[0] = 0;
    for (int k = 0; k < count && used < size; k++)
        used += (size_t)snprintf(out + used, size - used, "%s'%.40s'", k ? ", " : "", names[k]);
    if (!count) snprintf(out, size, "none");
}

/* ds->columns: the text's column, and why when run_mlm's rule fell back to the first */
static void describe(mlm_impl *m, const char *name, const char *given) {
    char d[160];
    bool first = !(given && *given) && strcmp(name, "text");
    snprintf(d, sizeof d, "text '%.60s'%s", name, first ? " (the first: none is named 'text')" : "");
    m->columns = ut__data_strdup(d);
}

/* Text files: a text a line; a '\r' before the '\n' is not part of it, a
 * last line without '\n' is one, the '\n' ending the file starts none.
 * keep_ends: each text ends with its line's end as written ("\n" or
 * "\r\n"; none after a last line without one), as Python's
 * splitlines(keepends=True) leaves them. */
static int read_lines(sink *s, char *p, size_t len, char *err, size_t n) {
    int64_t line = 1;
    for (size_t start = 0; start < len; line++) {
        char *nl = memchr(p + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - p) : len;
        if (s->keep_ends) {
            s->line.n = 0;
            ut__sbuf_put(&s->line, p + start, end - start + (nl != NULL));
            if (sink_text(s, s->line.s, line, err, n)) return -1;
            start = end + 1;
            continue;
        }
        p[end] = 0;              /* the '\n', or the spare NUL after the data */
        if (end > start && p[end - 1] == '\r') p[end - 1] = 0;
        if (sink_text(s, p + start, line, err, n)) return -1;
        start = end + 1;
    }
    return 0;
}

/* CSV (RFC 4180): a header naming the columns (at most MAX_FIELDS), then
 * a record per text; a record that is one empty field (an empty line) is
 * skipped, as pandas skips blank lines. */
static int read_csv(sink *s, const ut_mlm_opts *o, char *p, char *err, size_t n) {
    enum { MAX_FIELDS = 256 };
    char *f[MAX_FIELDS];
    int col = -1, ncol = 0;
    int64_t line = 1;
    while (*p) {
        int64_t at = line;
        int got = 0;
        if (ut__csv_record(s->path, &p, &line, f, MAX_FIELDS, &got, err, n)) return -1;
        if (got == 1 && !f[0][0]) continue;
        if (col >= 0 && got <= col)
            return ut_errorf(err, n, "%s:%lld: %d fields, but the text is field %d of the header's %d", s->path,
                             (long long)at, got, col + 1, ncol);
        if (col >= 0 && sink_text(s, f[col], at, err, n)) return -1;
        if (col >= 0) continue;
        if (got > MAX_FIELDS)    /* the header */
            return ut_errorf(err, n, "%s:%lld: %d columns: at most %d are read", s->path, (long long)at, got,
                             MAX_FIELDS);
        ncol = got;
        col = pick_column(f, got, o->text_column);
        if (col < 0) {
            char names[300];
            name_list(f, got, names, sizeof names);
            return ut_errorf(err, n, "%s:%lld: no column '%.60s' (the text column given) among the file's "
                                     "columns: %s", s->path, (long long)at, o->text_column, names);
        }
        describe(s->m, f[col], o->text_column);
    }
    if (col < 0) return ut_errorf(err, n, "%s: no header (expected a first line naming the columns)", s->path);
    return 0;
}

/* JSON: the text's key, chosen at the first object (a copy: JSON Lines
 * frees each line's object) */
typedef struct {
    char *key;
} json_state;

/* One JSON object j, at line (array: an element of one JSON array) */
static int json_text(sink *s, const ut_mlm_opts *o, json_state *st, const cJSON *j, int64_t line, bool array,
                     char *err, size_t n) {
    if (!cJSON_IsObject(j))
        return ut_errorf(err, n, "%s:%lld: %s, expected an object {\"text\": ...} (%s)", s->path, (long long)line,
                         ut__json_kind(j), array ? "a JSON array of objects" : "JSON Lines: one object per line");
    enum { MAX_KEYS = 64 };
    char *names[MAX_KEYS];
    int count = 0;
    for (const cJSON *c = j->child; c && count < MAX_KEYS; c = c->next) names[count++] = c->string;
    bool given = o->text_column && *o->text_column;
    if (!st->key && !given && !j->child)
        return ut_errorf(err, n, "%s:%lld: an object without keys, expected {\"text\": ...}", s->path,
                         (long long)line);
    if (!st->key) {              /* a key given is looked up in every object, the first included */
        st->key = ut__data_strdup(given ? o->text_column
                                  : cJSON_GetObjectItemCaseSensitive(j, "text") ? "text" : j->child->string);
        describe(s->m, st->key, o->text_column);
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, st->key);
    if (!v) {
        char keys[300];
        name_list(names, count, keys, sizeof keys);
        return ut_errorf(err, n, "%s:%lld: no key '%.60s' (the text; keys found: %s%s)", s->path, (long long)line,
                         st->key, keys, cJSON_GetArraySize(j) > MAX_KEYS ? ", ..." : "");
    }
    if (!cJSON_IsString(v))
        return ut_errorf(err, n, "%s:%lld: key '%.60s' is %s, expected a string (the text)", s->path,
                         (long long)line, st->key, ut__json_kind(v));
    return sink_text(s, v->valuestring, line, err, n);
}

/* JSON Lines: an object a line, blank lines skipped */
static int json_lines(sink *s, const ut_mlm_opts *o, json_state *st, char *p, size_t len, char *err, size_t n) {
    int rc = 0;
    int64_t line = 1;
    for (size_t start = 0; start < len && !rc; line++) {
        char *nl = memchr(p + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - p) : len;
        p[end] = 0;
        const char *text = p + start;
        start = end + 1;
        if (!text[strspn(text, " \t\r")]) continue;
        const char *stop = NULL;
        cJSON *j = cJSON_ParseWithOpts(text, &stop, true);
        if (!j)
            rc = ut_errorf(err, n, "%s:%lld: not valid JSON (at byte %td of the line); JSON Lines: one object "
                                   "{\"text\": ...} per line, or a .json file that is one array of such objects",
                           s->path, (long long)line, stop ? stop - text : (ptrdiff_t)0);
        else
            rc = json_text(s, o, st, j, line, false, err, n);
        cJSON_Delete(j);
    }
    return rc;
}

/* One JSON array of objects */
static int json_array(sink *s, const ut_mlm_opts *o, json_state *st, const char *p, char *err, size_t n) {
    const char *end = NULL;
    cJSON *a = cJSON_ParseWithOpts(p, &end, false);
    if (!a || (end && end[strspn(end, " \t\r\n")])) {
        const char *at = end ? end + (a ? strspn(end, " \t\r\n") : 0) : p;
        int64_t line = 1;
        for (const char *q = p; q < at; q++) line += *q == '\n';
        cJSON_Delete(a);
        return ut_errorf(err, n, "%s:%lld: not valid JSON (at byte %td of the file); a .json file is JSON Lines "
                                 "(one object per line) or one array of objects", s->path, (long long)line, at - p);
    }
    int64_t count = cJSON_GetArraySize(a), i = 0;
    int64_t *lines = ut_malloc_check((size_t)(count ? count : 1) * sizeof *lines);
    for (int64_t got = ut__json_array_lines(p, lines, count); got < count; got++) lines[got] = 1;
    int rc = 0;
    for (const cJSON *e = a->child; e && !rc; e = e->next, i++) rc = json_text(s, o, st, e, lines[i], true, err, n);
    ut_free(lines);
    cJSON_Delete(a);
    return rc;
}

/* Every text of the file into s, by the file's kind (its name's ending) */
static int read_texts(sink *s, const ut_mlm_opts *o, char *err, size_t n) {
    size_t len;
    char *buf = (char *)ut__read_file(s->path, &len, err, n), *p = buf;
    if (!buf) return -1;
    if (len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3, len -= 3; /* a byte-order mark is not text */
    int rc = 0;
    int64_t line = 1;
    for (size_t start = 0; start < len && !rc; line++) { /* no NUL byte, UTF-8: a message naming the line */
        const char *nl = memchr(p + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - p) : len;
        rc = ut__text_line_check(s->path, line, p, start, end, err, n);
        start = end + 1;
    }
    json_state st = {0};
    bool csv = ut__ends_with_ci(s->path, ".csv"),
         json = ut__ends_with_ci(s->path, ".json") || ut__ends_with_ci(s->path, ".jsonl");
    if (!rc && csv) rc = read_csv(s, o, p, err, n);
    else if (!rc && json && p[strspn(p, " \t\r\n")] == '[') rc = json_array(s, o, &st, p, err, n);
    else if (!rc && json) rc = json_lines(s, o, &st, p, len, err, n);
    else if (!rc) rc = read_lines(s, p, len, err, n);
    ut_free(st.key);
    ut_free(buf);
    return rc;
}

/* ---- open ---- */

/* The options and the tokenizer, before the file is read */
static int check_opts(const char *path, ut_tokenizer *t, const ut_mlm_opts *o, char *err, size_t n) {
    if (!o) return ut_errorf(err, n, "%s: no masked language modeling options (max_len, probability)", path);
    if (!t) return ut_errorf(err, n, "%s: no tokenizer (masked language modeling needs a pretrained one)", path);
    if (o->max_len < 1 || o->max_len > 1000000000)
        return ut_errorf(err, n, "%s: max_len must be in [1, 1e9] (got %lld)", path, (long long)o->max_len);
    if (!(o->probability > 0 && o->probability < 1))
        return ut_errorf(err, n, "%s: the masking probability (mlm_probability) must be in (0, 1) (got %g)", path,
                         o->probability);
    if (ut_tokenizer_special_id(t, "mask") < 0)
        return ut_errorf(err, n, "%s: the tokenizer has no mask token, which masked language modeling puts in place "
                                 "of the tokens it hides; use a tokenizer with one (BERT's [MASK], RoBERTa's <mask>)",
                         path);
    return 0;
}

/* The file read into s's store; the message when it gave no example */
static int fill(sink *s, const ut_mlm_opts *o, char *err, size_t n) {
    if (ut__special_frame(s->t, s->path, NULL, &s->npre, &s->nsuf, err, n)) return -1;
    if (s->m->L < s->npre + s->nsuf + 1)
        return ut_errorf(err, n, "%s: max_len %lld has no room for a token between the tokenizer's %lld special "
                                 "tokens", s->path, (long long)s->m->L, (long long)(s->npre + s->nsuf));
    s->off_cap = 256;
    s->m->off = ut_malloc_check((size_t)s->off_cap * sizeof *s->m->off);
    s->m->off[0] = 0;
    sink_reserve(s, 1);
    if (read_texts(s, o, err, n)) return -1;
    if (!s->by_line) end_group(s);
    if (s->m->n > 0) return 0;
    if (s->by_line)
        return ut_errorf(err, n, "%s: no example: %s (line_by_line skips blank texts)", s->path,
                         s->texts ? "every text is blank" : "no text");
    return ut_errorf(err, n, "%s: no example: %lld tokens read from %lld texts, and each block takes %lld tokens "
                             "(%s) from one group of %d texts (what is left of a group is dropped, as run_mlm's and "
                             "run_clm's group_texts drop it); use a smaller %s%s", s->path, (long long)s->tokens,
                     (long long)s->texts, (long long)s->m->L, s->len_key, GROUP_TEXTS, s->len_key,
                     s->keep_ends || !strcmp(s->len_key, "data.seq_len") ? "" : " or data.line_by_line");
}

ut_dataset *ut_mlm_dataset_open(const char *path, ut_tokenizer *t, const ut_mlm_opts *o, char *err, size_t n) {
    if (check_opts(path, t, o, err, n)) return NULL;
    mlm_impl *m = ut_calloc_check(1, sizeof *m);
    int32_t pad = ut_tokenizer_special_id(t, "pad");
    ut_philox p;
    ut_philox_seed(&p, o->seed);
    *m = (mlm_impl){.L = o->max_len, .pad = pad >= 0 ? pad : 0, .mask = ut_tokenizer_special_id(t, "mask"),
                    .vocab = ut_tokenizer_vocab_size(t), .key = p.key, .prob = o->probability};
    sink s = {.path = path, .t = t, .m = m, .by_line = o->line_by_line, .len_key = "data.max_len"};
    int rc = fill(&s, o, err, n);
    ut_tok_encoding_free(&s.e);
    if (rc) {
        impl_free(m);
        return NULL;
    }
    ut_dataset *ds = ut_calloc_check(1, sizeof *ds);
    *ds = (ut_dataset){.name = ut__data_strdup(path), .n = m->n, .x_ndim = 2, .x_ne = {3, m->L}, .y_ndim = 1,
                       .y_ne = {m->L}, .x_dtype = UT_I32, .y_dtype = UT_I32, .vocab_size = m->vocab,
                       .token_planes = true, .token_labels = true, .masked_lm = true, .get = mlm_get,
                       .collate = mlm_collate, .free = mlm_free, .impl = m, .columns = m->columns};
    return ds;
}

/* ---- causal language modeling (run_clm) ---- */

/* Example i: x (L) the block's ids, y (L) the next token of each, -1 after
 * the last (GPT-2's loss ignores -1) */
static int clm_get(ut_dataset *ds, int64_t i, void *xv, void *yv, char *err, size_t n) {
    const mlm_impl *m = ds->impl;
    if (i < 0 || i >= ds->n)
        return ut_errorf(err, n, "%s: example %lld out of range [0, %lld)", ds->name, (long long)i,
                         (long long)ds->n);
    int32_t *x = xv, *y = yv;
    const int32_t *ids = m->ids + m->off[i];
    for (int64_t j = 0; j < m->L; j++) {
        x[j] = ids[j];
        y[j] = j + 1 < m->L ? ids[j + 1] : -1;
    }
    return 0;
}

ut_dataset *ut_clm_dataset_open(const char *path, ut_tokenizer *t, const ut_clm_opts *o, char *err, size_t n) {
    if (!o) return ut_errorf(err, n, "%s: no causal language modeling options (block_size)", path), NULL;
    if (!t) return ut_errorf(err, n, "%s: no tokenizer (causal language modeling on texts needs a pretrained one)",
                             path), NULL;
    if (o->block_size < 2 || o->block_size > 1000000000)
        return ut_errorf(err, n, "%s: the block size must be in [2, 1e9] (got %lld)", path, (long long)o->block_size),
               NULL;
    mlm_impl *m = ut_calloc_check(1, sizeof *m);
    *m = (mlm_impl){.L = o->block_size, .vocab = ut_tokenizer_vocab_size(t)};
    ut_mlm_opts mo = {.max_len = o->block_size, .text_column = o->text_column};
    sink s = {.path = path, .t = t, .m = m, .keep_ends = o->keep_linebreaks, .len_key = "data.seq_len"};
    int rc = fill(&s, &mo, err, n);
    ut_tok_encoding_free(&s.e);
    ut_free(s.line.s);
    if (rc) {
        impl_free(m);
        return NULL;
    }
    ut_dataset *ds = ut_calloc_check(1, sizeof *ds);
    *ds = (ut_dataset){.name = ut__data_strdup(path), .n = m->n, .x_ndim = 1, .x_ne = {m->L}, .y_ndim = 1,
                       .y_ne = {m->L}, .x_dtype = UT_I32, .y_dtype = UT_I32, .vocab_size = m->vocab, .get = clm_get,
                       .free = mlm_free, .impl = m, .columns = m->columns};
    return ds;
}
