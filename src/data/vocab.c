/* Vocabularies for TSV text: the word tokenizer (ASCII lower-case; split on
 * whitespace; every ASCII punctuation character is a token of its own; other
 * bytes, UTF-8 included, belong to words) with a vocabulary built from the
 * train file, and the byte tokenizer (ids 1..256, no file needed).
 *
 * Saved file: a header line "utrain-vocab v1 KIND num_classes=C size=N",
 * then N lines, line k+2 holding the token of id k. Tokens are escaped:
 * backslash "\\", tab "\t", newline "\n", carriage return "\r", other control
 * bytes (and, for the byte kind, bytes >= 0x80) "\xNN". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "utrain/base.h"

enum { VOCAB_WORD, VOCAB_BYTE };

struct ut_vocab {
    int kind;
    int64_t num_classes;   /* max label + 1 over the train file */
    int64_t missing;       /* classes below num_classes without a train example */
    int64_t first_missing; /* the smallest of them (-1 when none) */
    int64_t n, cap;
    char **tok;            /* word kind: lower-cased spellings */
    int64_t *count;        /* while building: occurrences */
    int64_t *slot;         /* open-addressing hash: id or -1 */
    int64_t nslot;         /* power of two, > 2n */
};

static int is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static int is_punct(unsigned char c) {
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
           (c >= '{' && c <= '~');
}
static unsigned char lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* The next word-tokenizer token at or after *p: returns its start and length
 * (0 at the end) and moves *p past it. */
static const char *next_token(const char **p, size_t *len) {
    const unsigned char *s = (const unsigned char *)*p;
    while (*s && is_space(*s)) s++;
    const unsigned char *e = s;
    if (*e && is_punct(*e)) e++;
    else
        while (*e && !is_space(*e) && !is_punct(*e)) e++;
    *len = (size_t)(e - s);
    *p = (const char *)e;
    return (const char *)s;
}

static uint64_t hash_lower(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) h = (h ^ lower((unsigned char)s[i])) * 1099511628211ULL;
    return h;
}

static int same_lower(const char *tok, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)tok[i] != lower((unsigned char)s[i])) return 0;
    return tok[len] == 0;
}

/* The slot holding s (case-insensitively) or the empty slot where it goes. */
static int64_t *find_slot(const ut_vocab *v, const char *s, size_t len) {
    uint64_t mask = (uint64_t)v->nslot - 1, i = hash_lower(s, len) & mask;
    while (v->slot[i] >= 0 && !same_lower(v->tok[v->slot[i]], s, len)) i = (i + 1) & mask;
    return &v->slot[i];
}

static void rehash(ut_vocab *v, int64_t nslot) {
    ut_free(v->slot);
    v->nslot = nslot;
    v->slot = ut_malloc_check((size_t)nslot * sizeof *v->slot);
    for (int64_t i = 0; i < nslot; i++) v->slot[i] = -1;
    for (int64_t id = 0; id < v->n; id++) *find_slot(v, v->tok[id], strlen(v->tok[id])) = id;
}

/* Appends s lower-cased as a new id (the caller checked it is absent). */
static int64_t add_token(ut_vocab *v, const char *s, size_t len) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 1024;
        v->tok = ut_realloc_check(v->tok, (size_t)v->cap * sizeof *v->tok);
        v->count = ut_realloc_check(v->count, (size_t)v->cap * sizeof *v->count);
    }
    char *t = ut_malloc_check(len + 1);
    for (size_t i = 0; i < len; i++) t[i] = (char)lower((unsigned char)s[i]);
    t[len] = 0;
    v->tok[v->n] = t;
    v->count[v->n] = 0;
    if (2 * (v->n + 1) >= v->nslot) rehash(v, v->nslot ? 2 * v->nslot : 2048);
    *find_slot(v, t, len) = v->n;
    return v->n++;
}

static ut_vocab *vocab_new(int kind, int64_t num_classes) {
    ut_vocab *v = ut_calloc_check(1, sizeof *v);
    v->kind = kind;
    v->num_classes = num_classes;
    v->first_missing = -1;
    if (kind == VOCAB_WORD) {
        rehash(v, 2048);
        add_token(v, "<pad>", 5);
        add_token(v, "<unk>", 5);
    }
    return v;
}

void ut_vocab_free(ut_vocab *v) {
    if (!v) return;
    for (int64_t i = 0; i < v->n; i++) ut_free(v->tok[i]);
    ut_free(v->tok);
    ut_free(v->count);
    ut_free(v->slot);
    ut_free(v);
}

int64_t ut_vocab_size(const ut_vocab *v) { return v->kind == VOCAB_BYTE ? 257 : v->n; }
int64_t ut_vocab_num_classes(const ut_vocab *v) { return v->num_classes; }
int64_t ut_vocab_missing_classes(const ut_vocab *v, int64_t *first) {
    if (first) *first = v->first_missing;
    return v->missing;
}

int64_t ut__vocab_encode(const ut_vocab *v, const char *s, int32_t *out, int64_t max_len) {
    int64_t k = 0;
    if (v->kind == VOCAB_BYTE) {
        for (; k < max_len && s[k]; k++) out[k] = (int32_t)(unsigned char)s[k] + 1;
        return k;
    }
    size_t len;
    for (const char *t = next_token(&s, &len); len && k < max_len; t = next_token(&s, &len)) {
        int64_t id = *find_slot(v, t, len);
        out[k++] = (int32_t)(id >= 0 ? id : 1);
    }
    return k;
}

/* ---- building: count, then order by descending count, ties by spelling ---- */

static const ut_vocab *sort_vocab;
static int by_count(const void *a, const void *b) {
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    int64_t ci = sort_vocab->count[i], cj = sort_vocab->count[j];
    if (ci != cj) return ci > cj ? -1 : 1;
    return strcmp(sort_vocab->tok[i], sort_vocab->tok[j]);
}

/* The final vocabulary from the counts in c (ids >= 2 are candidates). */
static ut_vocab *vocab_from_counts(const ut_vocab *c, int64_t min_freq) {
    int64_t m = c->n - 2;
    int64_t *order = ut_malloc_check((size_t)(m > 0 ? m : 1) * sizeof *order);
    for (int64_t i = 0; i < m; i++) order[i] = i + 2;
    sort_vocab = c;  /* qsort has no user pointer in C11; building is not hot */
    qsort(order, (size_t)m, sizeof *order, by_count);
    ut_vocab *v = vocab_new(VOCAB_WORD, c->num_classes);
    v->missing = c->missing;
    v->first_missing = c->first_missing;
    for (int64_t i = 0; i < m && c->count[order[i]] >= min_freq; i++)
        add_token(v, c->tok[order[i]], strlen(c->tok[order[i]]));
    ut_free(order);
    return v;
}

/* Labels are class indices 0..C-1 with C = max label + 1. A train file of N
 * examples has examples of at most N classes, so C > 2N means most classes
 * have none: refused (a label of 2000000000 would otherwise size the model's
 * output layer). Smaller holes are counted and reported by the caller. */
static int check_classes(const char *path, const ut__tsv *t, char *err, size_t n) {
    if (t->max_label + 1 <= 2 * t->n) return 0;
    int64_t k = 0;
    while (t->label[k] != t->max_label) k++;
    return ut_errorf(err, n, "%s:%lld: label %lld makes %lld classes but the file has only %lld "
                     "examples, so most classes would have none (labels are class indices 0..C-1: "
                     "number them from 0)",
                     path, (long long)t->line[k], (long long)t->max_label,
                     (long long)t->max_label + 1, (long long)t->n);
}

/* Counts the classes of v without an example in t (holes in the label set). */
static void count_missing(ut_vocab *v, const ut__tsv *t) {
    char *seen = ut_calloc_check((size_t)v->num_classes, 1);
    for (int64_t k = 0; k < t->n; k++) seen[t->label[k]] = 1;
    for (int64_t c = v->num_classes - 1; c >= 0; c--)
        if (!seen[c]) {
            v->missing++;
            v->first_missing = c;
        }
    ut_free(seen);
}

ut_vocab *ut_vocab_build(const char *kind, const char *train_tsv, const ut_text_columns *cols, int64_t min_freq,
                         char *err, size_t n) {
    int k = !strcmp(kind, "word") ? VOCAB_WORD : !strcmp(kind, "byte") ? VOCAB_BYTE : -1;
    if (k < 0) {
        ut_errorf(err, n, "unknown tokenizer '%s' (known: word, byte)", kind);
        return NULL;
    }
    ut__tsv t;
    if (ut__tsv_read(train_tsv, UT__TSV_CLASSES, cols, &t, err, n)) return NULL;
    if (!t.labeled) {
        ut__tsv_free(&t);
        if (cols && cols->label && *cols->label)
            ut_errorf(err, n, "%s:1: no column '%s' (data.label_column): the train file needs its labels", train_tsv,
                      cols->label);
        else
            ut_errorf(err, n, "%s:1: no 'label' column: the train file needs 'sentence' and 'label' "
                              "columns (an unlabeled 'index<TAB>sentence' file can be data.test_path)",
                      train_tsv);
        return NULL;
    }
    if (check_classes(train_tsv, &t, err, n)) {
        ut__tsv_free(&t);
        return NULL;
    }
    ut_vocab *c = vocab_new(k, t.max_label + 1);
    count_missing(c, &t);
    /* a pair's two texts are read one after the other, as encoding reads them */
    for (int64_t r = 0; k == VOCAB_WORD && r < 2 * t.n; r++) {
        const char *s = r < t.n ? t.sentence[r] : t.sentence2 ? t.sentence2[r - t.n] : "";
        size_t len;
        for (const char *w = next_token(&s, &len); len; w = next_token(&s, &len)) {
            int64_t id = *find_slot(c, w, len);
            if (id < 0) id = add_token(c, w, len);   /* may move c->count: index it after */
            c->count[id]++;
        }
    }
    ut__tsv_free(&t);
    if (k == VOCAB_BYTE) return c;
    ut_vocab *v = vocab_from_counts(c, min_freq);
    ut_vocab_free(c);
    return v;
}

/* ---- saving and loading ---- */

static void put_escaped(FILE *f, const unsigned char *s, size_t len, int escape_high) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = s[i];
        if (c == '\\') fputs("\\\\", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f || (escape_high && c >= 0x80)) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('\n', f);
}

static void write_tokens(const ut_vocab *v, FILE *f) {
    fprintf(f, "utrain-vocab v1 %s num_classes=%lld size=%lld\n",
            v->kind == VOCAB_BYTE ? "byte" : "word", (long long)v->num_classes,
            (long long)ut_vocab_size(v));
    if (v->kind == VOCAB_WORD) {
        for (int64_t i = 0; i < v->n; i++)
            put_escaped(f, (const unsigned char *)v->tok[i], strlen(v->tok[i]), 0);
        return;
    }
    fputs("<pad>\n", f);
    for (int b = 0; b < 256; b++) put_escaped(f, (const unsigned char[]){(unsigned char)b}, 1, 1);
}

int ut_vocab_save(const ut_vocab *v, const char *path, char *err, size_t n) {
    FILE *f = ut_fopen_write(path, false, err, n);
    if (!f) return -1;
    write_tokens(v, f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return ut_errorf(err, n, "%s: write failed", path);
    return 0;
}

static int hex(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Unescapes s in place; returns its new length or -1 on a bad escape. */
static int64_t unescape(char *s) {
    size_t o = 0;
    for (size_t i = 0; s[i]; i++) {
        if (s[i] != '\\') { s[o++] = s[i]; continue; }
        char c = s[++i];
        if (c == '\\') s[o++] = '\\';
        else if (c == 't') s[o++] = '\t';
        else if (c == 'n') s[o++] = '\n';
        else if (c == 'r') s[o++] = '\r';
        else if (c == 'x' && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
            s[o++] = (char)(hex(s[i + 1]) * 16 + hex(s[i + 2]));
            i += 2;
        } else return -1;
    }
    s[o] = 0;
    return (int64_t)o;
}

/* Adds the word tokens on lines 2.. of buf (split in place) to v. */
static int load_words(ut_vocab *v, const char *path, char *lines, int64_t size, char *err,
                      size_t n) {
    char *p = lines;
    for (int64_t id = 0; id < size; id++) {
        char *nl = p ? strchr(p, '\n') : NULL;
        if (!nl) return ut_errorf(err, n, "%s: %lld tokens, the header says %lld", path,
                                     (long long)id, (long long)size);
        *nl = 0;
        int64_t len = unescape(p);
        if (len < 0) return ut_errorf(err, n, "%s:%lld: bad escape", path, (long long)id + 2);
        if (id < 2 && strcmp(p, id ? "<unk>" : "<pad>"))
            return ut_errorf(err, n, "%s:%lld: expected %s", path, (long long)id + 2,
                                id ? "<unk>" : "<pad>");
        if (id >= 2 && *find_slot(v, p, (size_t)len) >= 0)
            return ut_errorf(err, n, "%s:%lld: duplicate token '%s'", path, (long long)id + 2, p);
        if (id >= 2) add_token(v, p, (size_t)len);
        p = nl + 1;
    }
    return 0;
}

ut_vocab *ut_vocab_load(const char *path, char *err, size_t n) {
    size_t len;
    char *buf = (char *)ut__read_file(path, &len, err, n);
    if (!buf) return NULL;
    char kind[16], *body = strchr(buf, '\n');
    long long nc = 0, size = 0;
    int used = 0;
    ut_vocab *v = NULL;
    if (body) *body++ = 0;
    if (!body || sscanf(buf, "utrain-vocab v1 %15s num_classes=%lld size=%lld%n", kind, &nc, &size, &used) < 3 ||
        buf[used] || (strcmp(kind, "word") && strcmp(kind, "byte")) || nc < 1 || size < 2) {
        ut_errorf(err, n, "%s:1: not a utrain vocabulary (expected 'utrain-vocab v1 word|byte "
                     "num_classes=C size=N')", path);
    } else if (!strcmp(kind, "byte")) {
        v = vocab_new(VOCAB_BYTE, nc);
        if (size != 257) {
            ut_errorf(err, n, "%s:1: a byte vocabulary has size 257, not %lld", path, size);
            ut_vocab_free(v);
            v = NULL;
        }
    } else {
        v = vocab_new(VOCAB_WORD, nc);
        if (load_words(v, path, body, size, err, n)) {
            ut_vocab_free(v);
            v = NULL;
        }
    }
    ut_free(buf);
    return v;
}
