/* GLUE/SST-2 style TSV text classification: a header line naming the columns
 * (the text's, found by name or named by ut_text_columns; "label" makes it
 * labeled, "index" gives each example its id, other columns are allowed and
 * ignored), then one example per line with the same number of tab-separated
 * fields. Blank lines are skipped; a trailing '\r' is dropped. The same
 * columns are read from a .csv file (RFC 4180 quoting) and a .json / .jsonl
 * file (JSON Lines, the first object's keys the columns; or one JSON array
 * of such objects), as datasets' to_csv and to_json and pandas'
 * to_json(orient="records") write them.
 * Errors name the file and the 1-based line. Examples are tokenized once at
 * open. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "data_internal.h"
#include "utrain/base.h"

/* Splits line (NUL-terminated, modified in place) at tabs into at most max
 * fields; returns the number of fields found (may exceed max: counted only). */
static int split_tabs(char *line, char **field, int max) {
    int k = 0;
    for (char *p = line;; p++) {
        if (k < max) field[k] = p;
        k++;
        p = strchr(p, '\t');
        if (!p) return k;
        *p = 0;
    }
}

/* Where the columns are: the text (several, joined, when data.text_column
 * names them), the second text of a pair, the label and the index (-1 when
 * the file has none); desc says which they are, for the log. */
enum { MAX_TEXT_COLUMNS = 8 };
typedef struct {
    int ncol, sentence, sentence2, label, index;
    int text[MAX_TEXT_COLUMNS], ntext; /* the text's columns (sentence the first), joined by delim */
    const char *delim;
    char desc[320];
} tsv_columns;

/* column name's position among f (nc names), -1 when absent */
static int column(char *const *f, int nc, const char *name) {
    for (int k = 0; k < nc; k++)
        if (!strcmp(f[k], name)) return k;
    return -1;
}

/* The text columns of the layouts GLUE's files and Hugging Face's datasets
 * write (transformers' run_glue reads the same pairs): a pair first, else
 * one text. */
static const char *const text_pairs[][2] = {
    {"sentence1", "sentence2"}, {"sentence", "sentence2"},   /* MRPC, RTE, STS-B, WNLI */
    {"question", "sentence"},                                /* QNLI */
    {"question1", "question2"},                              /* QQP */
    {"premise", "hypothesis"},                               /* MNLI, RTE as datasets write them */
    {"#1 String", "#2 String"},                              /* GLUE's own MRPC file */
};
static const char *const single_texts[] = {"sentence", "sentence1", "text"}; /* SST-2, CoLA; datasets' text */
/* the label: a class, or a regression's score (STS-B's), QQP's and MRPC's own names; "labels" as
 * GoEmotions' and datasets' multi-label files name their lists */
static const char *const label_names[] = {"label", "score", "is_duplicate", "Quality", "labels"};

static bool headerless(const char *line, bool multi);

/* The file's kind by its name: TSV (.tsv and anything else), CSV, JSON Lines */
enum { KIND_TSV, KIND_CSV, KIND_JSONL };
static const char *const kind_sep[] = {"tab", "comma", "comma"};

static const char *given(const char *s) { return s && *s ? s : NULL; }

/* cols names a column: the file has a header (no headerless reading) */
static bool named(const ut_text_columns *cols) {
    return cols && (given(cols->text) || given(cols->text_pair) || given(cols->label));
}

/* A column the options name that the header lacks */
static int no_column(const char *path, const char *name, const char *key, const char *shown, char *err, size_t n) {
    return ut_errorf(err, n, "%s:1: no column '%.60s' (%s) among the file's columns: %.200s", path, name, key,
                     shown);
}

/* The columns data.text_column names (several joined by commas), into c */
static int named_texts(const char *path, char **f, int nc, const char *names, const char *shown, tsv_columns *c,
                       char *err, size_t n) {
    char buf[512];
    if (strlen(names) >= sizeof buf)
        return ut_errorf(err, n, "data.text_column: longer than %zu characters", sizeof buf - 1);
    strcpy(buf, names);
    char *save = NULL;
    for (char *name = strtok_r(buf, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        while (*name == ' ') name++;
        for (size_t e = strlen(name); e && name[e - 1] == ' ';) name[--e] = 0;
        if (!*name) continue;
        if (c->ntext == MAX_TEXT_COLUMNS)
            return ut_errorf(err, n, "data.text_column: at most %d columns are joined", MAX_TEXT_COLUMNS);
        int k = column(f, nc, name);
        if (k < 0) return no_column(path, name, "data.text_column", shown, err, n);
        c->text[c->ntext++] = k;
    }
    if (!c->ntext) return ut_errorf(err, n, "data.text_column: '%s' names no column", names);
    return 0;
}

/* Finds the columns among the header's names f (nc of them; shown is the
 * header as the file has it, for the message): the ones cols names, else by
 * their names (text_pairs, single_texts, label_names), else (a file whose
 * label column is found, or any CSV / JSON Lines file) as transformers'
 * run_glue takes a file's columns: the first two besides the label (and
 * index, idx, id) a pair, one alone the text. */
static int find_columns(const char *path, char **f, int nc, int kind, const char *shown, bool multi_layout,
                        const ut_text_columns *cols, tsv_columns *c, char *err, size_t n) {
    c->ncol = nc;
    c->sentence = c->sentence2 = c->label = c->index = -1;
    c->ntext = 0;
    c->delim = cols && cols->delimiter ? cols->delimiter : " ";
    c->desc[0] = 0;
    if (nc > 64) nc = 64;
    const char *text = given(cols ? cols->text : NULL), *pair = given(cols ? cols->text_pair : NULL),
               *label = given(cols ? cols->label : NULL);
    if (pair && !text)
        return ut_errorf(err, n, "data.text_pair_column '%s' without data.text_column: name the pair's first text "
                                 "too", pair);
    if (label) c->label = column(f, nc, label); /* absent: an unlabeled file (a test file) */
    for (size_t i = 0; !label && i < sizeof label_names / sizeof label_names[0] && c->label < 0; i++)
        c->label = column(f, nc, label_names[i]);
    c->index = column(f, nc, "index");
    if (c->index < 0) c->index = column(f, nc, "idx"); /* datasets' name */
    if (c->ncol > 64 && !multi_layout)
        return ut_errorf(err, n, "%s:1: %d columns: at most 64 are read", path, c->ncol);
    bool glue_rule = false;
    if (text) {
        if (named_texts(path, f, nc, text, shown, c, err, n)) return -1;
        c->sentence = c->text[0];
        if (pair && (c->sentence2 = column(f, nc, pair)) < 0)
            return no_column(path, pair, "data.text_pair_column", shown, err, n);
    } else {
        for (size_t i = 0; i < sizeof text_pairs / sizeof text_pairs[0] && c->sentence < 0; i++) {
            int a = column(f, nc, text_pairs[i][0]), b = column(f, nc, text_pairs[i][1]);
            if (a >= 0 && b >= 0) c->sentence = a, c->sentence2 = b;
        }
        for (size_t i = 0; i < sizeof single_texts / sizeof single_texts[0] && c->sentence < 0; i++)
            c->sentence = column(f, nc, single_texts[i]);
        if ((c->sentence < 0 || c->ncol > 64) && multi_layout)
            return ut_errorf(err, n, "%s:1: no header, and the first line is an example of (text, a list of labels%s): "
                                     "a multi-label task's file in GoEmotions' layout: set model.problem_type: "
                                     "multi_label_classification (with a pretrained tokenizer: data.tokenizer or "
                                     "model.pretrained)", path, c->ncol == 3 ? ", an id" : "");
        for (int k = 0; c->sentence < 0 && (c->label >= 0 || kind != KIND_TSV) && k < nc; k++) {
            if (k == c->label || k == c->index || !strcmp(f[k], "id")) continue;
            glue_rule = true;
            c->sentence = k;
            for (int j = k + 1; j < nc && c->sentence2 < 0; j++)
                if (j != c->label && j != c->index && strcmp(f[j], "id")) c->sentence2 = j;
        }
        if (c->sentence >= 0) c->text[c->ntext++] = c->sentence;
    }
    if (c->sentence < 0)
        return ut_errorf(err, n, "%s:1: %s 'sentence' (or 'sentence1', 'text'; a pair 'sentence1' and 'sentence2', "
                                 "'question' and 'sentence', 'question1' and 'question2', 'premise' and 'hypothesis') "
                                 "and 'label', or 'index' and 'sentence' for an unlabeled file, got '%.60s' "
                                 "(data.text_column and data.label_column name other columns)", path,
                         kind == KIND_JSONL ? "no text key: expected an object with the keys"
                         : kind == KIND_CSV ? "no header: expected a first line naming the columns (comma-separated)"
                                            : "no header: expected a first line naming the columns (tab-separated)",
                         shown);
    size_t used = 0;
    for (int i = 0; i < c->ntext; i++)
        used += (size_t)snprintf(c->desc + used, sizeof c->desc - used, "%s'%.40s'",
                                 i ? c->ntext > 1 && i == c->ntext - 1 ? " and " : ", " : c->ntext > 1 ? "texts " : "text ",
                                 f[c->text[i]]);
    if (c->ntext > 1 && used < sizeof c->desc) used += (size_t)snprintf(c->desc + used, sizeof c->desc - used,
                                                                        " joined");
    if (c->sentence2 >= 0 && used < sizeof c->desc)
        used += (size_t)snprintf(c->desc + used, sizeof c->desc - used, ", its pair's second '%.40s'", f[c->sentence2]);
    if (used < sizeof c->desc)
        used += c->label >= 0 ? (size_t)snprintf(c->desc + used, sizeof c->desc - used, ", label '%.40s'", f[c->label])
                              : (size_t)snprintf(c->desc + used, sizeof c->desc - used, ", no label column");
    if (glue_rule && used < sizeof c->desc)
        snprintf(c->desc + used, sizeof c->desc - used, " (no column has a known text name: the first%s beside the "
                 "label, as run_glue takes them; data.text_column names others)", c->sentence2 >= 0 ? " two" : "");
    return 0;
}

/* The TSV header line: its columns */
static int parse_header(const char *path, char *line, const ut_text_columns *cols, tsv_columns *c, char *err,
                        size_t n) {
    char *f[65];
    char copy[256];
    snprintf(copy, sizeof copy, "%s", line);
    for (char *p = copy; (p = strchr(p, '\t'));) *p = ',';
    /* GoEmotions' (text, labels, id) read for one class an example */
    bool multi_layout = !named(cols) && headerless(line, true);
    int nc = split_tabs(line, f, 65);
    return find_columns(path, f, nc, KIND_TSV, copy, multi_layout, cols, c, err, n);
}

/* A list of integers "2,6": a multi-label example's labels (GoEmotions') */
static bool int_list(const char *s) {
    size_t k = strspn(s, "0123456789");
    if (!k || !s[k]) return false;
    for (; k && (s[k] == ',' || !s[k]); s += k + 1, k = strspn(s, "0123456789"))
        if (!s[k]) return true;
    return false;
}

/* An integer field in [0, hi]. A label that is a number but not a class
 * (STS-B's 3.800) says how to train on scores, a list of them (2,6) how to
 * train on several labels an example. */
static int parse_int(const char *path, int64_t line, const char *what, const char *s, int64_t hi,
                     int64_t *out, char *err, size_t n) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < 0 || v > hi) {
        char *rend;
        (void)strtod(s, &rend);
        bool label = !strcmp(what, "label"), real = label && rend != s && !*rend, list = label && int_list(s);
        return ut_errorf(err, n, "%s:%lld: bad %s '%.40s' (expected an integer >= 0%s)", path, (long long)line, what,
                         s, real    ? ", a class; a label that is a score, as STS-B's, is a regression task: set "
                                      "model.num_labels: 1"
                            : list  ? ", a class; a list of labels, several an example, is a multi-label task: set "
                                      "model.problem_type: multi_label_classification (with a pretrained tokenizer: "
                                      "data.tokenizer or model.pretrained)"
                            : label ? ", a class; labels that are names (entailment, ...) are read with a pretrained "
                                      "tokenizer (data.tokenizer or model.pretrained), not the word and byte ones"
                                    : "");
    }
    *out = v;
    return 0;
}

/* A regression label: a finite real number. */
static int parse_score(const char *path, int64_t line, const char *s, double *out, char *err, size_t n) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v))
        return ut_errorf(err, n, "%s:%lld: bad label '%.40s' (expected a finite number: model.num_labels 1 makes "
                                 "the labels scores, a regression task's)", path, (long long)line, s);
    *out = v;
    return 0;
}

/* A copy of s kept with t (freed with it) */
static char *keep(ut__tsv *t, const char *s, size_t len) {
    if (t->nowned == t->owned_cap) {
        t->owned_cap = t->owned_cap ? 2 * t->owned_cap : 64;
        t->owned = ut_realloc_check(t->owned, (size_t)t->owned_cap * sizeof *t->owned);
    }
    char *c = ut_malloc_check(len + 1);
    memcpy(c, s, len);
    c[len] = 0;
    return t->owned[t->nowned++] = c;
}

/* Row k of t from one example's fields f (got of them: the header's count
 * expected, what a mismatch is called in the file's kind in the message). */
static int parse_fields(const char *path, char **f, int got, int64_t lineno, const tsv_columns *c, int kind,
                        ut__tsv *t, char *err, size_t n) {
    if (got != c->ncol)
        return ut_errorf(err, n, "%s:%lld: %s: expected %d %s-separated fields as in the header, got %d", path,
                         (long long)lineno, got < c->ncol ? kind == KIND_CSV ? "missing comma" : "missing tab"
                                                          : kind == KIND_CSV ? "too many commas" : "too many tabs",
                         c->ncol, kind_sep[kind], got);
    int64_t k = t->n;
    t->label[k] = 0;
    t->index[k] = k;
    if (t->score) t->score[k] = 0;
    if (t->label_text) t->label_text[k] = c->label >= 0 ? f[c->label] : NULL;
    /* a name for a class: told apart from integers once the whole file is read (check_names) */
    if (c->label >= 0 && !t->label_text &&
        (t->score ? parse_score(path, lineno, f[c->label], &t->score[k], err, n)
                  : parse_int(path, lineno, "label", f[c->label], INT32_MAX, &t->label[k], err, n)))
        return -1;
    if (c->index >= 0 && parse_int(path, lineno, "index", f[c->index], INT64_MAX, &t->index[k], err, n))
        return -1;
    t->sentence[k] = f[c->sentence];
    if (c->ntext > 1) { /* data.text_column's columns joined by its delimiter */
        size_t len = 0, dl = strlen(c->delim);
        for (int i = 0; i < c->ntext; i++) len += strlen(f[c->text[i]]) + (i ? dl : 0);
        char *s = ut_malloc_check(len + 1), *w = s;
        for (int i = 0; i < c->ntext; i++) {
            if (i) memcpy(w, c->delim, dl), w += dl;
            size_t l = strlen(f[c->text[i]]);
            memcpy(w, f[c->text[i]], l);
            w += l;
        }
        *w = 0;
        t->sentence[k] = keep(t, s, len);
        ut_free(s);
    }
    if (c->sentence2 >= 0) t->sentence2[k] = f[c->sentence2];
    t->line[k] = lineno;
    if (t->label[k] > t->max_label) t->max_label = t->label[k];
    t->n++;
    return 0;
}

/* The header's columns c are found: what t holds follows them */
static void header_found(ut__tsv *t, const tsv_columns *c) {
    t->labeled = c->label >= 0;
    t->has_index = c->index >= 0;
    if (c->sentence2 >= 0) t->sentence2 = ut_malloc_check((size_t)t->cap * sizeof *t->sentence2);
    t->columns = keep(t, c->desc, strlen(c->desc));
}

/* Parses one TSV example line into row k of t. */
static int parse_row(const char *path, char *line, int64_t lineno, const tsv_columns *c, ut__tsv *t,
                     char *err, size_t n) {
    char *f[64];
    int got = split_tabs(line, f, 64);
    return parse_fields(path, f, got, lineno, c, KIND_TSV, t, err, n);
}

/* The seed's files (sentiment-train, read with pandas' header=None) have no
 * header: a first line of two fields, the second a number (an integer; a
 * decimal too, a score), is an example of (sentence, label), not a header
 * naming columns. Multi-label (multi): GoEmotions' files, (text, labels,
 * id) without a header, the labels a comma-separated list of integers; a
 * first line of two or three fields whose second is such a list. */
static bool headerless(const char *line, bool multi) {
    const char *tab = strchr(line, '\t');
    if (!tab || tab == line) return false;
    const char *third = strchr(tab + 1, '\t');
    if (multi) {
        if (third && strchr(third + 1, '\t')) return false;
        const char *d = tab + 1, *end = third ? third : d + strlen(d);
        if (d == end) return false;
        for (size_t k; d < end; d += k + (d[k] == ',')) {
            k = strspn(d, "0123456789");
            if (!k || k > 9 || (d + k < end && d[k] != ',') || (d[k] == ',' && d + k + 1 >= end)) return false;
        }
        return true;
    }
    if (third) return false;
    const char *d = tab + 1;
    if (*d == '-') d++;
    size_t digits = strspn(d, "0123456789");
    if (d[digits] == '.') digits += 1 + strspn(d + digits + 1, "0123456789");
    return digits > 0 && digits < 24 && !d[digits];
}

static int parse_lines(const char *path, const ut_text_columns *cols, ut__tsv *t, char *err, size_t n) {
    tsv_columns c = {0};
    int64_t lineno = 0;
    for (char *p = t->buf, *next; p; p = next) {
        next = strchr(p, '\n');
        if (next) *next++ = 0;
        size_t len = strlen(p);
        if (len && p[len - 1] == '\r') p[--len] = 0;
        lineno++;
        if (lineno == 1 && !named(cols) && headerless(p, t->multi)) {
            c = (tsv_columns){.ncol = 2, .sentence = 0, .sentence2 = -1, .label = 1, .index = -1};
            if (strchr(strchr(p, '\t') + 1, '\t')) c.ncol = 3; /* GoEmotions' id column, not an integer index */
            t->labeled = true;
            if (parse_row(path, p, lineno, &c, t, err, n)) return -1;
        } else if (lineno == 1) {
            if (parse_header(path, p, cols, &c, err, n)) return -1;
            header_found(t, &c);
        } else if (strspn(p, " \t") < len) {
            if (parse_row(path, p, lineno, &c, t, err, n)) return -1;
        }
    }
    if (t->n == 0) return ut_errorf(err, n, "%s: no examples after the header", path);
    return 0;
}

/* ---- CSV (RFC 4180, as Python's csv and pandas write it) ---- */

int ut__csv_record(const char *path, char **pp, int64_t *line, char **f, int max, int *got, char *err, size_t n) {
    char *p = *pp;
    int k = 0;
    for (;;) {
        char *start = p, *w = p, end;
        if (*p == '"') {
            int64_t from = *line;
            for (p++;; p++) {
                if (!*p)
                    return ut_errorf(err, n, "%s:%lld: a quoted field is not closed (it opens on this line)", path,
                                     (long long)from);
                if (*p == '"' && p[1] != '"') break;
                if (*p == '"') p++; /* "" is one quote */
                if (*p == '\n') (*line)++;
                *w++ = *p;
            }
            p++;
            if (*p == '\r' && (p[1] == '\n' || !p[1])) p++;
            if (*p && *p != ',' && *p != '\n')
                return ut_errorf(err, n, "%s:%lld: '%c' after a closing quote (a quote inside a quoted field is "
                                         "written \"\")", path, (long long)*line, *p);
        } else {
            while (*p && *p != ',' && *p != '\n') *w++ = *p++;
            if (w > start && w[-1] == '\r' && *p != ',') w--; /* CRLF */
        }
        end = *p;
        *w = 0;
        if (k < max) f[k] = start;
        k++;
        if (end == ',') {
            p++;
            continue;
        }
        if (end == '\n') p++, (*line)++;
        *pp = p;
        *got = k;
        return 0;
    }
}

static int parse_csv(const char *path, const ut_text_columns *cols, ut__tsv *t, char *err, size_t n) {
    tsv_columns c = {0};
    int64_t line = 1;
    char *f[65], *p = t->buf;
    for (bool header = true; *p;) {
        int64_t at = line;
        int got = 0;
        if (ut__csv_record(path, &p, &line, f, 65, &got, err, n)) return -1;
        if (got == 1 && !f[0][strspn(f[0], " \t\r")]) continue; /* a blank line */
        if (header) {
            char shown[256] = "";
            for (int i = 0; i < got && i < 65; i++)
                snprintf(shown + strlen(shown), sizeof shown - strlen(shown), "%s%s", i ? "," : "", f[i]);
            if (find_columns(path, f, got, KIND_CSV, shown, false, cols, &c, err, n)) return -1;
            header_found(t, &c);
            header = false;
        } else if (parse_fields(path, f, got, at, &c, KIND_CSV, t, err, n)) {
            return -1;
        }
    }
    if (t->n == 0) return ut_errorf(err, n, "%s: no examples after the header", path);
    return 0;
}

/* ---- JSON Lines (as datasets' to_json writes them) ---- */

/* a JSON number as a label's text: an integer as one, else 17 digits */
static void number_text(double v, char *out, size_t n) {
    if (v == floor(v) && fabs(v) < 1e15) snprintf(out, n, "%lld", (long long)v);
    else snprintf(out, n, "%.17g", v);
}

/* The text of value v of key at line: a string as it is, a number, a
 * boolean (1, 0), null (empty), an array of strings and numbers joined by
 * commas (a multi-label example's labels); an object or nested array is
 * refused. */
static int json_field(const char *path, int64_t line, const char *key, const cJSON *v, ut__tsv *t, char **out,
                      char *err, size_t n) {
    char num[40];
    if (cJSON_IsString(v)) *out = keep(t, v->valuestring, strlen(v->valuestring));
    else if (cJSON_IsNumber(v)) number_text(v->valuedouble, num, sizeof num), *out = keep(t, num, strlen(num));
    else if (cJSON_IsBool(v)) *out = keep(t, cJSON_IsTrue(v) ? "1" : "0", 1);
    else if (cJSON_IsNull(v)) *out = keep(t, "", 0);
    else if (cJSON_IsArray(v)) {
        size_t len = 0, cap = 64;
        char *s = ut_malloc_check(cap);
        s[0] = 0;
        for (const cJSON *e = v->child; e; e = e->next) {
            const char *piece = num;
            if (cJSON_IsString(e)) piece = e->valuestring;
            else if (cJSON_IsNumber(e)) number_text(e->valuedouble, num, sizeof num);
            else {
                ut_free(s);
                return ut_errorf(err, n, "%s:%lld: key '%s': an array holds strings and numbers (labels), not %s",
                                 path, (long long)line, key, cJSON_IsArray(e) ? "arrays" : "objects");
            }
            size_t add = strlen(piece) + 1;
            if (len + add + 1 > cap) cap = 2 * (len + add + 1), s = ut_realloc_check(s, cap);
            len += (size_t)snprintf(s + len, cap - len, "%s%s", len ? "," : "", piece);
        }
        *out = keep(t, s, len);
        ut_free(s);
    } else {
        return ut_errorf(err, n, "%s:%lld: key '%s' is an object (expected a string, a number or an array of "
                                 "labels)", path, (long long)line, key);
    }
    return 0;
}

/* One example from the JSON object j (found at line; array: an element of a
 * JSON array, else a JSON Lines line); the first object's keys (*nkeys into
 * keys) are the columns. */
static int json_example(const char *path, int64_t line, const cJSON *j, bool array, const ut_text_columns *cols,
                        tsv_columns *c, char **keys, int *nkeys, ut__tsv *t, char *err, size_t n) {
    if (!cJSON_IsObject(j))
        return ut_errorf(err, n, "%s:%lld: expected an object {\"sentence\": ..., \"label\": ...} (%s)", path,
                         (long long)line, array ? "a JSON array of objects, one an example"
                                                : "JSON Lines: one object per line");
    int rc = 0;
    if (!*nkeys) { /* the first object's keys are the columns */
        char shown[256] = "";
        for (const cJSON *e = j->child; e; e = e->next) {
            if (*nkeys < 65) keys[*nkeys] = keep(t, e->string, strlen(e->string));
            (*nkeys)++;
            snprintf(shown + strlen(shown), sizeof shown - strlen(shown), "%s%s", shown[0] ? "," : "", e->string);
        }
        rc = find_columns(path, keys, *nkeys, KIND_JSONL, shown, false, cols, c, err, n);
        if (!rc) header_found(t, c);
    }
    char *f[64];
    for (int i = 0; i < c->ncol && !rc; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
        f[i] = NULL;
        bool want = i == c->sentence2 || i == c->label || i == c->index;
        for (int w = 0; w < c->ntext; w++) want |= i == c->text[w];
        if (!v && want)
            rc = ut_errorf(err, n, "%s:%lld: no key '%s' (the first %s has it)", path, (long long)line, keys[i],
                           array ? "object" : "line");
        else if (v && want)
            rc = json_field(path, line, keys[i], v, t, &f[i], err, n);
        if (v && i == c->label && cJSON_IsArray(v)) t->label_arrays = true;
    }
    for (int w = 0; w <= c->ntext && !rc; w++) { /* the texts are strings */
        int col = w < c->ntext ? c->text[w] : c->sentence2;
        if (col >= 0 && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, keys[col])))
            rc = ut_errorf(err, n, "%s:%lld: key '%s' is not a string (the %s)", path, (long long)line, keys[col],
                           w == c->ntext ? "pair's second text" : "text");
    }
    return rc ? rc : parse_fields(path, f, c->ncol, line, c, KIND_JSONL, t, err, n);
}

int64_t ut__json_array_lines(const char *s, int64_t *line, int64_t cap) {
    int64_t at = 1, k = 0;
    int depth = 0;
    bool next = false; /* an element starts at the next character that is not a space */
    for (const char *p = s; *p; p++) {
        if (*p == '\n') at++;
        if ((unsigned char)*p <= ' ') continue; /* what cJSON skips as space */
        if (next && depth == 1 && *p != ']') {
            if (k < cap) line[k] = at;
            k++;
        }
        next = false;
        if (*p == '"') { /* a string: to its closing quote, past escapes */
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1]) p++;
                if (*p == '\n') at++;
            }
            if (!*p) break;
        } else if (*p == '[' || *p == '{') {
            next = ++depth == 1;
        } else if (*p == ']' || *p == '}') {
            depth--;
        } else if (*p == ',' && depth == 1) {
            next = true;
        }
    }
    return k;
}

/* Grows t's rows to hold rows examples (a JSON array may hold more than its lines) */
static void grow_rows(ut__tsv *t, int64_t rows) {
    if (rows <= t->cap) return;
    t->cap = rows;
    t->sentence = ut_realloc_check(t->sentence, (size_t)rows * sizeof *t->sentence);
    t->label = ut_realloc_check(t->label, (size_t)rows * sizeof *t->label);
    t->line = ut_realloc_check(t->line, (size_t)rows * sizeof *t->line);
    t->index = ut_realloc_check(t->index, (size_t)rows * sizeof *t->index);
    if (t->score) t->score = ut_realloc_check(t->score, (size_t)rows * sizeof *t->score);
    if (t->label_text) t->label_text = ut_realloc_check(t->label_text, (size_t)rows * sizeof *t->label_text);
}

/* A .json file that is one JSON array of objects (as pandas' to_json(orient="records") and json.dump of a
 * list of dicts write it; datasets' json loader reads it too), each an example */
static int parse_json_array(const char *path, const ut_text_columns *cols, ut__tsv *t, char *err, size_t n) {
    const char *end = NULL;
    cJSON *a = cJSON_ParseWithOpts(t->buf, &end, false);
    if (!a || (end && end[strspn(end, " \t\r\n")])) {
        const char *at = end ? end + (a ? strspn(end, " \t\r\n") : 0) : t->buf;
        int64_t line = 1;
        for (const char *p = t->buf; p < at; p++) line += *p == '\n';
        cJSON_Delete(a);
        return ut_errorf(err, n, "%s:%lld: not valid JSON (at byte %td of the file); a .json file is JSON Lines (one "
                                 "object per line) or one array of objects", path, (long long)line, at - t->buf);
    }
    int64_t count = cJSON_GetArraySize(a);
    int64_t *lines = ut_malloc_check((size_t)(count ? count : 1) * sizeof *lines);
    for (int64_t k = ut__json_array_lines(t->buf, lines, count); k < count; k++) lines[k] = 1; /* (never: the same
                                                                                                  * elements) */
    grow_rows(t, count);
    tsv_columns c = {0};
    char *keys[65];
    int nkeys = 0, rc = 0;
    int64_t k = 0;
    for (const cJSON *e = a->child; e && !rc; e = e->next, k++)
        rc = json_example(path, lines[k], e, true, cols, &c, keys, &nkeys, t, err, n);
    ut_free(lines);
    cJSON_Delete(a);
    if (!rc && t->n == 0) rc = ut_errorf(err, n, "%s: no examples (an empty array)", path);
    return rc;
}

static int parse_jsonl(const char *path, const ut_text_columns *cols, ut__tsv *t, char *err, size_t n) {
    if (t->buf[strspn(t->buf, " \t\r\n")] == '[') return parse_json_array(path, cols, t, err, n);
    tsv_columns c = {0};
    char *keys[65];
    int nkeys = 0, rc = 0;
    int64_t line = 0;
    for (char *p = t->buf, *next; p && !rc; p = next) {
        next = strchr(p, '\n');
        if (next) *next++ = 0;
        line++;
        if (!p[strspn(p, " \t\r")]) continue;
        const char *end = NULL;
        cJSON *j = cJSON_ParseWithOpts(p, &end, false);
        if (!j || (end && end[strspn(end, " \t\r")]))
            rc = ut_errorf(err, n, "%s:%lld: not valid JSON (at byte %td of the line); JSON Lines: one object per "
                                   "line", path, (long long)line,
                           end ? end + (j ? strspn(end, " \t\r") : 0) - p : (ptrdiff_t)0);
        else
            rc = json_example(path, line, j, false, cols, &c, keys, &nkeys, t, err, n);
        cJSON_Delete(j);
    }
    if (!rc && t->n == 0) rc = ut_errorf(err, n, "%s: no examples", path);
    return rc;
}

bool ut__is_class(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < 0 || v > INT32_MAX) return false;
    *out = v;
    return true;
}

/* UT__TSV_NAMES: the labels are all integers (classes, read into label) or
 * all names (t->names); a file of both is refused at the first label of the
 * other kind than the first's, and an empty name too. */
static int check_names(const char *path, ut__tsv *t, char *err, size_t n) {
    if (!t->labeled) return 0;
    int64_t v;
    bool first_int = ut__is_class(t->label_text[0], &v);
    for (int64_t k = 0; k < t->n; k++) {
        bool isint = ut__is_class(t->label_text[k], &t->label[k]);
        if (!isint && !t->label_text[k][0]) {
            bool lists = false; /* labels with commas: lists, and an empty one an example without labels */
            for (int64_t j = 0; j < t->n && !lists; j++) lists = strchr(t->label_text[j], ',') != NULL;
            return ut_errorf(err, n, "%s:%lld: empty label%s", path, (long long)t->line[k],
                             lists ? " (with labels that are lists, as elsewhere in the file, an example may have "
                                     "none: a multi-label task, model.problem_type: multi_label_classification)"
                                   : "");
        }
        char *end;
        (void)strtod(t->label_text[k], &end);
        if ((!isint && !*end) || int_list(t->label_text[k])) /* a number that is no class (a score, a negative),
                                                              * a list of them: parse_int's message */
            return parse_int(path, t->line[k], "label", t->label_text[k], INT32_MAX, &v, err, n);
        if (isint != first_int)
            return ut_errorf(err, n, "%s:%lld: label '%.40s' where line %lld's is '%.40s': a file's labels are all "
                                     "classes (integers >= 0) or all names (entailment, ...)", path,
                             (long long)t->line[k], t->label_text[k], (long long)t->line[0], t->label_text[0]);
        if (isint && t->label[k] > t->max_label) t->max_label = t->label[k];
        if (!isint) t->label[k] = 0;
    }
    t->names = !first_int;
    return 0;
}

/* Reports the first NUL byte of t->buf (its line and byte offset), then frees t. */
static int nul_byte_error(const char *path, ut__tsv *t, char *err, size_t n) {
    size_t off = strlen(t->buf);
    long long line = 1;
    for (size_t i = 0; i < off; i++) line += t->buf[i] == '\n';
    ut__tsv_free(t);
    return ut_errorf(err, n, "%s:%lld: NUL byte at byte offset %zu (expected a text file)", path,
                     line, off);
}

int ut__tsv_read(const char *path, int mode, const ut_text_columns *cols, ut__tsv *t, char *err, size_t n) {
    memset(t, 0, sizeof *t);
    size_t len;
    t->buf = (char *)ut__read_file(path, &len, err, n);
    if (!t->buf) return -1;
    if (len == 0) {
        ut__tsv_free(t);
        return ut_errorf(err, n, "%s: empty file", path);
    }
    if (strlen(t->buf) != len) return nul_byte_error(path, t, err, n);
    if (len >= 3 && !memcmp(t->buf, "\xEF\xBB\xBF", 3)) { /* a UTF-8 byte-order mark is not text */
        len -= 3;
        memmove(t->buf, t->buf + 3, len + 1);
    }
    int64_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += t->buf[i] == '\n';
    t->cap = lines;
    t->sentence = ut_malloc_check((size_t)lines * sizeof *t->sentence);
    t->label = ut_malloc_check((size_t)lines * sizeof *t->label);
    t->line = ut_malloc_check((size_t)lines * sizeof *t->line);
    t->index = ut_malloc_check((size_t)lines * sizeof *t->index);
    if (mode == UT__TSV_SCORES) t->score = ut_malloc_check((size_t)lines * sizeof *t->score);
    if (mode == UT__TSV_NAMES || mode == UT__TSV_MULTI || mode == UT__TSV_TEXT)
        t->label_text = ut_malloc_check((size_t)lines * sizeof *t->label_text);
    t->multi = mode == UT__TSV_MULTI;
    t->max_label = -1;
    size_t pl = strlen(path);
    bool csv = pl >= 4 && !strcasecmp(path + pl - 4, ".csv"),
         jsonl = (pl >= 5 && !strcasecmp(path + pl - 5, ".json")) || (pl >= 6 && !strcasecmp(path + pl - 6, ".jsonl"));
    if ((csv     ? parse_csv(path, cols, t, err, n)
         : jsonl ? parse_jsonl(path, cols, t, err, n)
                 : parse_lines(path, cols, t, err, n)) ||
        (mode == UT__TSV_NAMES && check_names(path, t, err, n))) {
        ut__tsv_free(t);
        return -1;
    }
    return 0;
}

void ut__tsv_free(ut__tsv *t) {
    ut_free(t->buf);
    ut_free(t->sentence);
    ut_free(t->sentence2);
    ut_free(t->label);
    ut_free(t->line);
    ut_free(t->index);
    ut_free(t->score);
    ut_free(t->label_text);
    for (int64_t k = 0; k < t->nowned; k++) ut_free(t->owned[k]);
    ut_free(t->owned);
    memset(t, 0, sizeof *t);
}

/* ---- the dataset: token ids of every example, computed at open ---- */

typedef struct {
    int32_t *ids, *labels;
    int64_t *index;            /* the index column, or NULL */
    int64_t max_len;
    char *columns;             /* ds->columns */
} tsv_impl;

static int tsv_get(ut_dataset *ds, int64_t i, void *x, void *y, char *err, size_t n) {
    tsv_impl *m = ds->impl;
    if (i < 0 || i >= ds->n)
        return ut_errorf(err, n, "%s: example %lld out of range [0, %lld)", ds->name,
                            (long long)i, (long long)ds->n);
    memcpy(x, m->ids + i * m->max_len, (size_t)m->max_len * sizeof(int32_t));
    *(int32_t *)y = m->labels[i];
    return 0;
}

static void tsv_free(ut_dataset *ds) {
    tsv_impl *m = ds->impl;
    ut_free(m->ids);
    ut_free(m->labels);
    ut_free(m->index);
    ut_free(m->columns);
    ut_free(m);
    ut_free((char *)ds->name);
    ut_free(ds);
}

/* Checks labels against the vocabulary's class count (from the train file). */
static int check_labels(const char *path, const ut__tsv *t, int64_t num_classes, char *err,
                        size_t n) {
    for (int64_t k = 0; t->labeled && k < t->n; k++)
        if (t->label[k] >= num_classes)
            return ut_errorf(err, n, "%s:%lld: label %lld >= num_classes %lld (from the train file)",
                                path, (long long)t->line[k], (long long)t->label[k],
                                (long long)num_classes);
    return 0;
}

ut_dataset *ut_tsv_dataset_open(const char *path, const ut_text_columns *cols, const ut_vocab *v, int64_t max_len,
                                char *err, size_t n) {
    if (max_len < 1) {
        ut_errorf(err, n, "%s: max_len must be >= 1 (got %lld)", path, (long long)max_len);
        return NULL;
    }
    ut__tsv t;
    if (ut__tsv_read(path, UT__TSV_CLASSES, cols, &t, err, n)) return NULL;
    if (check_labels(path, &t, ut_vocab_num_classes(v), err, n)) {
        ut__tsv_free(&t);
        return NULL;
    }
    if (ut_memory_check(4.0 * (double)t.n * (double)max_len,
                        ut_fmt("%s: max_len %lld (token ids of %lld examples)", path,
                               (long long)max_len, (long long)t.n), err, n)) {
        ut__tsv_free(&t);
        return NULL;
    }
    tsv_impl *m = ut_calloc_check(1, sizeof *m);
    m->max_len = max_len;
    m->ids = ut_calloc_check((size_t)(t.n * max_len), sizeof(int32_t));  /* 0 = <pad> */
    m->labels = ut_malloc_check((size_t)t.n * sizeof(int32_t));
    for (int64_t k = 0; k < t.n; k++) {
        int64_t got = ut__vocab_encode(v, t.sentence[k], m->ids + k * max_len, max_len);
        if (t.sentence2) { /* a pair: the second text after the first and a space (a byte's), in the room left */
            got += ut__vocab_encode(v, " ", m->ids + k * max_len + got, max_len - got);
            ut__vocab_encode(v, t.sentence2[k], m->ids + k * max_len + got, max_len - got);
        }
        m->labels[k] = (int32_t)t.label[k];
    }
    if (t.has_index) {
        m->index = ut_malloc_check((size_t)t.n * sizeof *m->index);
        memcpy(m->index, t.index, (size_t)t.n * sizeof *m->index);
    }
    if (t.columns) m->columns = ut__data_strdup(t.columns);
    ut_dataset *ds = ut_calloc_check(1, sizeof *ds);
    *ds = (ut_dataset){.name = ut__data_strdup(path), .n = t.n, .x_ndim = 1, .x_ne = {max_len}, .columns = m->columns,
                       .y_ndim = 0, .x_dtype = UT_I32, .y_dtype = UT_I32,
                       .num_classes = ut_vocab_num_classes(v), .vocab_size = ut_vocab_size(v),
                       .unlabeled = !t.labeled, .example_id = m->index,
                       .get = tsv_get, .free = tsv_free, .impl = m};
    ut__tsv_free(&t);
    return ds;
}
