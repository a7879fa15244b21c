/* Token classification (NER, POS): sentences of words with a tag each, from
 * JSON Lines or one JSON array (a list of words and a list of tags per
 * object) or CoNLL text (a word a line, its tag last, a blank line between
 * sentences). Each word is encoded alone and its pieces follow one another
 * between the tokenizer's own special tokens, as transformers' run_ner.py
 * encodes words with is_split_into_words; the label goes to each word's
 * first piece. Reading collects words and tags (tag_read), the tag list
 * gives each tag its class, then encoding fills a compact store (one array
 * of ids and one of labels, an offset per sentence) that get expands into
 * the (3, max_len) token planes and the (max_len) labels. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "tok_internal.h"
#include "utrain/base.h"

enum { IGNORE = -100 };          /* a position no label counts at (PyTorch's ignore_index) */

typedef struct {
    int64_t n, L;                /* sentences; max_len */
    int32_t *ids, *lab;          /* every sentence's ids (special tokens included) and labels */
    int64_t *off;                /* (n + 1): sentence k is ids[off[k], off[k + 1]) */
    char *text;                  /* the words, each NUL-terminated */
    char **words;                /* sentence k's words are words[woff[k], woff[k + 1]), into text */
    int64_t *woff;
    char **names;                /* the tag list: class k's name (nnames); NULL: none (unlabeled) */
    int64_t nnames, truncated;
    int32_t pad;
    char *columns;               /* ds->columns */
} tag_impl;

/* ---- the dataset ---- */

static int tag_get(ut_dataset *ds, int64_t i, void *xv, void *yv, char *err, size_t n) {
    const tag_impl *m = ds->impl;
    if (i < 0 || i >= ds->n)
        return ut_errorf(err, n, "%s: example %lld out of range [0, %lld)", ds->name, (long long)i,
                         (long long)ds->n);
    int32_t *x = xv, *y = yv;    /* x (3, L): ids, type ids, mask; y (L) */
    const int64_t L = m->L, len = m->off[i + 1] - m->off[i];
    const int32_t *ids = m->ids + m->off[i], *lab = m->lab + m->off[i];
    for (int64_t j = 0; j < L; j++) {
        x[j] = j < len ? ids[j] : m->pad;
        x[L + j] = 0;
        x[2 * L + j] = j < len;
        y[j] = j < len ? lab[j] : IGNORE;
    }
    return 0;
}

static void impl_free(tag_impl *m) {
    if (!m) return;
    ut_free(m->ids);
    ut_free(m->lab);
    ut_free(m->off);
    ut_free(m->text);
    ut_free(m->words);
    ut_free(m->woff);
    for (int64_t k = 0; k < m->nnames; k++) ut_free(m->names[k]);
    ut_free(m->names);
    ut_free(m->columns);
    ut_free(m);
}

static void tag_free(ut_dataset *ds) {
    impl_free(ds->impl);
    ut_free((char *)ds->name);
    ut_free(ds);
}

static const tag_impl *impl_of(const ut_dataset *ds) {
    return ds && ds->token_labels && ds->get == tag_get ? ds->impl : NULL;
}

static const char *const *tag_words(const ut_dataset *ds, int64_t i, int64_t *nwords) {
    const tag_impl *m = impl_of(ds);
    if (nwords) *nwords = 0;
    if (!m || i < 0 || i >= m->n) return NULL;
    if (nwords) *nwords = m->woff[i + 1] - m->woff[i];
    return (const char *const *)(m->words + m->woff[i]);
}

const char *const *ut_tagged_words(const ut_dataset *ds, int64_t i, int64_t *nwords) {
    if (nwords) *nwords = 0;
    return ds && ds->token_labels && ds->words ? ds->words(ds, i, nwords) : NULL;
}

int64_t ut_tagged_truncated(const ut_dataset *ds) {
    const tag_impl *m = impl_of(ds);
    return m ? m->truncated : 0;
}

/* ---- what the file holds: words, tags, sentences ---- */

enum { KIND_NONE = -1, KIND_STRINGS = 0, KIND_INTEGERS = 1 };

typedef struct {
    char *text;                  /* the words, each NUL-terminated (becomes tag_impl's text) */
    int64_t ntext, text_cap;
    int64_t *wtext, *wtag, *wline; /* word j: its text's offset, its tag's (-1: none), its line */
    int64_t nw, w_cap;
    char *tags;                  /* the tags as written (integers in decimal), each NUL-terminated */
    int64_t ntags, tags_cap;
    int64_t *woff;               /* (ns + 1): sentence k is words [woff[k], woff[k + 1]) */
    int64_t ns, s_cap;
    int kind;                    /* KIND_*: the tags' kind, first seen at kind_line */
    int64_t kind_line;
    int labeled;                 /* -1 not known yet, 0 no tags, 1 tags; first seen at labeled_line */
    int64_t labeled_line;
    char *columns;               /* which keys or fields held the words and tags */
} tag_read;

static void *grow(void *p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return p;
    while (*cap < need) *cap = *cap ? 2 * *cap : 256;
    return ut_realloc_check(p, (size_t)*cap * elem);
}

/* s[0, len) at the end of *buf (NUL-terminated); its offset */
static int64_t put_text(char **buf, int64_t *used, int64_t *cap, const char *s, size_t len) {
    *buf = grow(*buf, cap, *used + (int64_t)len + 1, 1);
    int64_t at = *used;
    memcpy(*buf + at, s, len);
    (*buf)[at + (int64_t)len] = 0;
    *used += (int64_t)len + 1;
    return at;
}

static void add_word(tag_read *r, const char *s, size_t len, int64_t line) {
    if (r->nw == r->w_cap) {
        int64_t cap = r->w_cap;
        r->wtext = grow(r->wtext, &cap, r->nw + 1, sizeof *r->wtext);
        r->wtag = ut_realloc_check(r->wtag, (size_t)cap * sizeof *r->wtag);
        r->wline = ut_realloc_check(r->wline, (size_t)cap * sizeof *r->wline);
        r->w_cap = cap;
    }
    r->wtext[r->nw] = put_text(&r->text, &r->ntext, &r->text_cap, s, len);
    r->wtag[r->nw] = -1;
    r->wline[r->nw++] = line;
}

/* the last word's tag */
static void add_tag(tag_read *r, const char *s, size_t len) {
    r->wtag[r->nw - 1] = put_text(&r->tags, &r->ntags, &r->tags_cap, s, len);
}

/* Ends the sentence begun after the last one: an empty one only when
 * keep_empty (a JSON object with no words is an example; CoNLL's blank
 * lines just separate). */
static void end_sentence(tag_read *r, bool keep_empty) {
    if (!r->woff) r->woff = grow(NULL, &r->s_cap, 2, sizeof *r->woff), r->woff[0] = 0;
    if (r->woff[r->ns] == r->nw && !keep_empty) return;
    r->woff = grow(r->woff, &r->s_cap, r->ns + 2, sizeof *r->woff);
    r->woff[++r->ns] = r->nw;
}

static void read_free(tag_read *r) {
    ut_free(r->text);
    ut_free(r->wtext);
    ut_free(r->wtag);
    ut_free(r->wline);
    ut_free(r->tags);
    ut_free(r->woff);
    ut_free(r->columns);
    memset(r, 0, sizeof *r);
}

/* The file's text p[0, len): no NUL byte, UTF-8; errors name the line. */
static int check_text(const char *path, const char *p, size_t len, char *err, size_t n) {
    int64_t line = 1;
    for (size_t start = 0; start < len; line++) {
        const char *nl = memchr(p + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - p) : len;
        if (ut__text_line_check(path, line, p, start, end, err, n)) return -1;
        start = end + 1;
    }
    return 0;
}

/* ---- CoNLL ---- */

static const char SPACE[] = " \t\r\v\f";

/* One line, NUL-terminated, of a CoNLL file: a word (its first field) and
 * its tag (the last), a blank line or a -DOCSTART- line ending the
 * sentence. *first says which kind of line came first (1 one field, 2
 * more) and *first_line where. */
static int conll_line(tag_read *r, const char *path, const char *s, int64_t line, int *first, int64_t *first_line,
                      char *err, size_t n) {
    s += strspn(s, SPACE);
    if (!*s || !strncmp(s, "-DOCSTART-", 10)) {
        end_sentence(r, false);
        return 0;
    }
    size_t wlen = strcspn(s, SPACE);
    const char *tag = s, *p = s;
    size_t tlen = wlen;
    int fields = 0;
    for (; *p; fields++) {       /* the last field is the tag */
        tag = p, tlen = strcspn(p, SPACE);
        p += tlen;
        p += strspn(p, SPACE);
    }
    int kind = fields > 1 ? 2 : 1;
    if (!*first) *first = kind, *first_line = line;
    if (kind != *first)
        return ut_errorf(err, n, "%s:%lld: %s, but line %lld has %s: every word of a file has a tag, the last "
                                 "field of its line, or none has (a file to predict)", path, (long long)line,
                         kind == 1 ? "a word without a tag (one field)" : "a word with a tag",
                         (long long)*first_line, *first == 1 ? "one field (no tag)" : "a tag (the last field)");
    add_word(r, s, wlen, line);
    if (kind == 2) add_tag(r, tag, tlen);
    return 0;
}

static int read_conll(tag_read *r, const char *path, char *p, size_t len, char *err, size_t n) {
    int first = 0, rc = 0;
    int64_t first_line = 0, line = 1;
    for (size_t start = 0; start < len && !rc; line++) {
        char *nl = memchr(p + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - p) : len;
        p[end] = 0;              /* the '\n', or the spare NUL after the data */
        rc = conll_line(r, path, p + start, line, &first, &first_line, err, n);
        start = end + 1;
    }
    end_sentence(r, false);
    r->labeled = first == 2;
    r->kind = first == 2 ? KIND_STRINGS : KIND_NONE;
    r->columns = ut__data_strdup(first == 2 ? "CoNLL: the word first, the tag last"
                                            : "CoNLL: words without tags (to predict)");
    if (!rc && r->ns == 0)
        rc = ut_errorf(err, n, "%s: no sentences (CoNLL: a word a line, its tag last, a blank line between "
                               "sentences)", path);
    return rc;
}

/* ---- JSON ---- */

typedef struct {
    const char *words, *tags;    /* the keys (given, or chosen by the first object: into own) */
    char *own[2];
    bool chosen;
} json_keys;

/* o's keys as "a", "b" (cut to fit out) */
static void key_list(const cJSON *o, char *out, size_t size) {
    size_t used = 0;
    out[0] = 0;
    for (const cJSON *c = o->child; c && used < size; c = c->next)
        used += (size_t)snprintf(out + used, size - used, "%s\"%.40s\"", c == o->child ? "" : ", ", c->string);
    if (!out[0]) snprintf(out, size, "none");
}

/* The keys not given, from the first object o: the words "tokens" when o
 * has it, else o's first key; the tags "ner_tags" when o has it, else o's
 * second key (its third when the second holds the words), else "ner_tags"
 * (which no object may have then: the file has no tags). */
static int choose_keys(json_keys *k, const ut_tagged_opts *o, const char *path, int64_t line, const cJSON *j,
                       char *err, size_t n) {
    k->chosen = true;
    k->words = o->words && *o->words ? o->words : NULL;
    k->tags = o->tags && *o->tags ? o->tags : NULL;
    if (!k->words && !j->child)
        return ut_errorf(err, n, "%s:%lld: an object without keys, expected {\"tokens\": [...], \"ner_tags\": "
                                 "[...]}", path, (long long)line);
    if (!k->words)
        k->words = k->own[0] = ut__data_strdup(cJSON_GetObjectItemCaseSensitive(j, "tokens") ? "tokens"
                                                                                            : j->child->string);
    if (!k->tags && cJSON_GetObjectItemCaseSensitive(j, "ner_tags")) k->tags = "ner_tags";
    for (const cJSON *c = j->child ? j->child->next : NULL; c && !k->tags; c = c->next)
        if (strcmp(c->string, k->words)) k->tags = k->own[1] = ut__data_strdup(c->string);
    if (!k->tags) k->tags = "ner_tags";
    return 0;
}

/* Element i of the tags' list t (at line) is a tag: a string that is not
 * empty, or an integer (its decimal text into out); the kind must be the
 * file's. */
static int tag_text(tag_read *r, const char *path, int64_t line, const char *key, int64_t i, const cJSON *t,
                    char *out, size_t size, char *err, size_t n) {
    int kind = cJSON_IsString(t) ? KIND_STRINGS : KIND_INTEGERS;
    if (cJSON_IsString(t) && !t->valuestring[0])
        return ut_errorf(err, n, "%s:%lld: \"%s\"[%lld] is an empty tag", path, (long long)line, key, (long long)i);
    bool integer = cJSON_IsNumber(t) && isfinite(t->valuedouble) && t->valuedouble == floor(t->valuedouble) &&
                   fabs(t->valuedouble) < 1e15;
    if (integer) snprintf(out, size, "%lld", (long long)t->valuedouble);
    else if (cJSON_IsNumber(t))
        return ut_errorf(err, n, "%s:%lld: \"%s\"[%lld] is the number %g, expected a string or an integer (a tag, "
                                 "below 1e15 in magnitude)", path, (long long)line, key, (long long)i, t->valuedouble);
    else if (!cJSON_IsString(t))
        return ut_errorf(err, n, "%s:%lld: \"%s\"[%lld] is %s, expected a string or an integer (a tag)", path,
                         (long long)line, key, (long long)i, ut__json_kind(t));
    if (r->kind == KIND_NONE) r->kind = kind, r->kind_line = line;
    if (kind != r->kind)
        return ut_errorf(err, n, "%s:%lld: \"%s\"[%lld] is %s where line %lld's tags are %s: a file's tags are all "
                                 "strings or all integers", path, (long long)line, key, (long long)i,
                         kind == KIND_STRINGS ? "a string" : "an integer", (long long)r->kind_line,
                         r->kind == KIND_STRINGS ? "strings" : "integers");
    return 0;
}

/* Whether object j has tags, against the objects before it */
static int check_labeled(tag_read *r, const char *path, int64_t line, const char *key, bool has, char *err,
                         size_t n) {
    if (r->labeled < 0) r->labeled = has, r->labeled_line = line;
    if (has == r->labeled) return 0;
    return ut_errorf(err, n, "%s:%lld: %s \"%s\" key, but line %lld %s: every sentence of a file has tags or "
                             "none has (a file to predict)", path, (long long)line, has ? "a" : "no", key,
                     (long long)r->labeled_line, has ? "has none" : "has one");
}

/* The words' list w (and the tags' list t, or NULL) of the object at line */
static int json_lists(tag_read *r, const char *path, int64_t line, const json_keys *k, const cJSON *w,
                      const cJSON *t, char *err, size_t n) {
    if (!cJSON_IsArray(w))
        return ut_errorf(err, n, "%s:%lld: \"%s\" is %s, expected a list of strings (the words)", path,
                         (long long)line, k->words, ut__json_kind(w));
    if (t && !cJSON_IsArray(t))
        return ut_errorf(err, n, "%s:%lld: \"%s\" is %s, expected a list of strings or integers (the tags)", path,
                         (long long)line, k->tags, ut__json_kind(t));
    int64_t nw = cJSON_GetArraySize(w), nt = t ? cJSON_GetArraySize(t) : nw, i = 0;
    if (nt != nw)
        return ut_errorf(err, n, "%s:%lld: %lld words (\"%s\") but %lld tags (\"%s\"): one tag per word", path,
                         (long long)line, (long long)nw, k->words, (long long)nt, k->tags);
    char tag[64];
    const cJSON *tc = t ? t->child : NULL;
    for (const cJSON *c = w->child; c; c = c->next, i++) {
        if (!cJSON_IsString(c))
            return ut_errorf(err, n, "%s:%lld: \"%s\"[%lld] is %s, expected a string (a word)", path,
                             (long long)line, k->words, (long long)i, ut__json_kind(c));
        add_word(r, c->valuestring, strlen(c->valuestring), line);
        if (!tc) continue;
        if (tag_text(r, path, line, k->tags, i, tc, tag, sizeof tag, err, n)) return -1;
        if (cJSON_IsString(tc)) add_tag(r, tc->valuestring, strlen(tc->valuestring));
        else add_tag(r, tag, strlen(tag));
        tc = tc->next;
    }
    end_sentence(r, true);
    return 0;
}

/* One sentence from the JSON object j found at line (array: an element of
 * a JSON array, else a JSON Lines line) */
static int json_sentence(tag_read *r, const char *path, int64_t line, const cJSON *j, bool array, json_keys *k,
                         const ut_tagged_opts *o, char *err, size_t n) {
    if (!cJSON_IsObject(j))
        return ut_errorf(err, n, "%s:%lld: %s, expected an object {\"tokens\": [...], \"ner_tags\": [...]} (%s)",
                         path, (long long)line, ut__json_kind(j),
                         array ? "a JSON array of objects, one a sentence" : "JSON Lines: one object per line");
    if (!k->chosen && choose_keys(k, o, path, line, j, err, n)) return -1;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, k->words), *t = cJSON_GetObjectItemCaseSensitive(j, k->tags);
    if (!w) {
        char keys[300];
        key_list(j, keys, sizeof keys);
        return ut_errorf(err, n, "%s:%lld: no \"%s\" key (the words; keys found: %s)", path, (long long)line,
                         k->words, keys);
    }
    if (check_labeled(r, path, line, k->tags, t != NULL, err, n)) return -1;
    return json_lists(r, path, line, k, w, t, err, n);
}

static int json_lines(tag_read *r, const char *path, char *p, size_t len, json_keys *k, const ut_tagged_opts *o,
                      char *err, size_t n) {
    int rc = 0;
    int64_t line = 1;
    for (size_t start = 0; start < len && !rc; line++) {
        char *nl = memchr(p + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - p) : len;
        p[end] = 0;
        const char *s = p + start;
        start = end + 1;
        if (!s[strspn(s, SPACE)]) continue;
        const char *stop = NULL;
        cJSON *j = cJSON_ParseWithOpts(s, &stop, true);
        if (!j)
            rc = ut_errorf(err, n, "%s:%lld: not valid JSON (at byte %td of the line); JSON Lines: one object "
                                   "{\"tokens\": [...], \"ner_tags\": [...]} per line, or a .json file that is one "
                                   "array of such objects", path, (long long)line, stop ? stop - s : (ptrdiff_t)0);
        else
            rc = json_sentence(r, path, line, j, false, k, o, err, n);
        cJSON_Delete(j);
    }
    return rc;
}

static int json_array(tag_read *r, const char *path, const char *p, json_keys *k, const ut_tagged_opts *o,
                      char *err, size_t n) {
    const char *end = NULL;
    cJSON *a = cJSON_ParseWithOpts(p, &end, false);
    if (!a || (end && end[strspn(end, " \t\r\n")])) {
        const char *at = end ? end + (a ? strspn(end, " \t\r\n") : 0) : p;
        int64_t line = 1;
        for (const char *q = p; q < at; q++) line += *q == '\n';
        cJSON_Delete(a);
        return ut_errorf(err, n, "%s:%lld: not valid JSON (at byte %td of the file); a .json file is JSON Lines "
                                 "(one object per line) or one array of objects", path, (long long)line, at - p);
    }
    int64_t count = cJSON_GetArraySize(a), i = 0;
    int64_t *lines = ut_malloc_check((size_t)(count ? count : 1) * sizeof *lines);
    for (int64_t got = ut__json_array_lines(p, lines, count); got < count; got++) lines[got] = 1;
    int rc = 0;
    for (const cJSON *e = a->child; e && !rc; e = e->next, i++)
        rc = json_sentence(r, path, lines[i], e, true, k, o, err, n);
    ut_free(lines);
    cJSON_Delete(a);
    return rc;
}

static int read_json(tag_read *r, const char *path, char *p, size_t len, const ut_tagged_opts *o, char *err,
                     size_t n) {
    json_keys k = {0};
    bool array = p[strspn(p, " \t\r\n")] == '[';
    int rc = array ? json_array(r, path, p, &k, o, err, n) : json_lines(r, path, p, len, &k, o, err, n);
    if (!rc && r->ns == 0)
        rc = ut_errorf(err, n, "%s: no sentences (%s)", path,
                       array ? "an empty array" : "expected one JSON object {\"tokens\": [...], \"ner_tags\": [...]} "
                                                  "per line");
    if (!rc) {
        char cols[256];
        if (r->labeled > 0) snprintf(cols, sizeof cols, "words '%.100s', tags '%.100s'", k.words, k.tags);
        else snprintf(cols, sizeof cols, "words '%.100s', no tags '%.100s' (to predict)", k.words, k.tags);
        r->columns = ut__data_strdup(cols);
    }
    r->labeled = r->labeled > 0;
    ut_free(k.own[0]);
    ut_free(k.own[1]);
    return rc;
}

static int read_file(tag_read *r, const char *path, const ut_tagged_opts *o, char *err, size_t n) {
    memset(r, 0, sizeof *r);
    r->kind = KIND_NONE;
    r->labeled = -1;
    size_t len;
    char *buf = (char *)ut__read_file(path, &len, err, n), *p = buf;
    if (!buf) return -1;
    if (len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3, len -= 3; /* a byte-order mark is not text */
    int rc = check_text(path, p, len, err, n);
    if (!rc && (ut__ends_with_ci(path, ".json") || ut__ends_with_ci(path, ".jsonl")))
        rc = read_json(r, path, p, len, o, err, n);
    else if (!rc) rc = read_conll(r, path, p, len, err, n);
    ut_free(buf);
    return rc;
}

/* ---- the tag list ---- */

typedef struct {
    const char *name;
    int64_t id;
} named;

static int by_name(const void *a, const void *b) {
    const named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->id > y->id) - (x->id < y->id);
}

static int by_text(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int by_value(const void *a, const void *b) {
    long long x = strtoll(*(char *const *)a, NULL, 10), y = strtoll(*(char *const *)b, NULL, 10);
    return (x > y) - (x < y);
}

/* m->names: the file's distinct tags sorted (strings by bytes, integers by value) */
static void file_names(const tag_read *r, tag_impl *m) {
    char **all = ut_malloc_check((size_t)(r->nw ? r->nw : 1) * sizeof *all);
    int64_t count = 0;
    for (int64_t j = 0; j < r->nw; j++)
        if (r->wtag[j] >= 0) all[count++] = r->tags + r->wtag[j];
    qsort(all, (size_t)count, sizeof *all, by_text); /* equal tags together (integers: one spelling each) */
    int64_t d = 0;
    for (int64_t j = 0; j < count; j++)
        if (!d || strcmp(all[d - 1], all[j])) all[d++] = all[j];
    if (r->kind == KIND_INTEGERS) qsort(all, (size_t)d, sizeof *all, by_value);
    m->nnames = d;
    m->names = ut_malloc_check((size_t)(d ? d : 1) * sizeof *m->names);
    for (int64_t j = 0; j < d; j++) m->names[j] = ut__data_strdup(all[j]);
    ut_free(all);
}

/* The class of name in idx (sorted by_name, count of them): the first of
 * that name; -1 when there is none. */
static int64_t find_name(const named *idx, int64_t count, const char *name) {
    int64_t lo = 0, hi = count;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (strcmp(idx[mid].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < count && !strcmp(idx[lo].name, name) ? idx[lo].id : -1;
}

/* A tag and its line where the list has no such name */
static int unknown_tag(const char *path, int64_t line, const char *tag, const tag_impl *m, char *err, size_t n) {
    char known[200] = "";
    size_t used = 0;
    for (int64_t k = 0; k < m->nnames && k < 5 && used < sizeof known; k++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%.30s", k ? ", " : "", m->names[k]);
    return ut_errorf(err, n, "%s:%lld: tag '%.40s' is not one of the %lld tags of the train file (%s%s)", path,
                     (long long)line, tag, (long long)m->nnames, known, m->nnames > 5 ? ", ..." : "");
}

/* cls[j]: word j's class (0 without tags); bi[k]: the class the later pieces
 * of a word of class k take under label_all_tokens (run_ner's b_to_i_label:
 * every "B-" of the name replaced by "I-", where the list has that name). */
static int classes(const char *path, const tag_read *r, const tag_impl *m, int32_t *cls, int32_t *bi, char *err,
                   size_t n) {
    named *idx = ut_malloc_check((size_t)(m->nnames ? m->nnames : 1) * sizeof *idx);
    for (int64_t k = 0; k < m->nnames; k++) idx[k] = (named){m->names[k], k};
    qsort(idx, (size_t)m->nnames, sizeof *idx, by_name);
    int rc = 0;
    for (int64_t j = 0; j < r->nw && !rc; j++) {
        int64_t id = r->wtag[j] < 0 ? 0 : find_name(idx, m->nnames, r->tags + r->wtag[j]);
        if (id < 0) rc = unknown_tag(path, r->wline[j], r->tags + r->wtag[j], m, err, n);
        cls[j] = (int32_t)id;
    }
    for (int64_t k = 0; k < m->nnames; k++) {
        const char *s = m->names[k];
        bi[k] = (int32_t)k;
        if (strncmp(s, "B-", 2)) continue;
        char *to = ut__data_strdup(s);
        for (char *q = to; (q = strstr(q, "B-")); q += 2) *q = 'I';
        int64_t id = find_name(idx, m->nnames, to);
        if (id >= 0) bi[k] = (int32_t)id;
        ut_free(to);
    }
    ut_free(idx);
    return rc;
}

/* ---- encoding ---- */

/* The tokenizer's special tokens around a text: sample "a" encoded with
 * them and without, the ids before the bare ones the prefix (npre) and those
 * after the suffix (nsuf), ids holding all of them. */
typedef struct {
    ut_tok_encoding with;
    int64_t npre, nsuf;
} frame;

static int find_frame(ut_tokenizer *t, const char *path, frame *f, char *err, size_t n) {
    return ut__special_frame(t, path, &f->with, &f->npre, &f->nsuf, err, n);
}

typedef struct {
    ut_tokenizer *tok;
    bool space;                  /* byte-level BPE: a space before each word (add_prefix_space) */
    ut__sbuf word;
    ut_tok_encoding e;
    int64_t ids_cap;
} encoder;

static void push_id(tag_impl *m, encoder *c, int64_t *at, int32_t id, int32_t label) {
    if (*at == c->ids_cap) {
        int64_t cap = c->ids_cap;
        m->ids = grow(m->ids, &cap, *at + 1, sizeof *m->ids);
        m->lab = ut_realloc_check(m->lab, (size_t)cap * sizeof *m->lab);
        c->ids_cap = cap;
    }
    m->ids[*at] = id;
    m->lab[(*at)++] = label;
}

/* Sentence k: the prefix, each word's pieces (cut at max_len), the suffix */
static int encode_sentence(const char *path, const tag_read *r, int64_t k, const frame *f, const int32_t *cls,
                           const int32_t *bi, bool all, tag_impl *m, encoder *c, int64_t *at, char *err, size_t n) {
    const int64_t budget = m->L - f->npre - f->nsuf;
    int64_t used = 0;
    bool cut = false;
    for (int64_t q = 0; q < f->npre; q++) push_id(m, c, at, f->with.ids[q], IGNORE);
    for (int64_t j = r->woff[k]; j < r->woff[k + 1] && !cut; j++) {
        char why[256];
        c->word.n = 0;
        ut__sbuf_put(&c->word, " ", c->space);
        ut__sbuf_put(&c->word, r->text + r->wtext[j], strlen(r->text + r->wtext[j]));
        ut_tok_opts plain = {.no_special = true};
        if (ut_tokenizer_encode(c->tok, c->word.s, NULL, &plain, &c->e, why, sizeof why))
            return ut_errorf(err, n, "%s:%lld: word '%.40s': %s", path, (long long)r->wline[j], r->text + r->wtext[j],
                             why);
        int64_t take = c->e.len;
        if (used + take > budget) take = budget - used, cut = true;
        for (int64_t q = 0; q < take; q++) {
            int32_t later = all && r->labeled ? bi[cls[j]] : IGNORE;
            push_id(m, c, at, c->e.ids[q], q == 0 ? cls[j] : later);
        }
        used += take;
    }
    for (int64_t q = f->with.len - f->nsuf; q < f->with.len; q++) push_id(m, c, at, f->with.ids[q], IGNORE);
    m->truncated += cut;
    m->off[k + 1] = *at;
    return 0;
}

static int encode_all(const char *path, const tag_read *r, ut_tokenizer *t, const ut_tagged_opts *o, tag_impl *m,
                      char *err, size_t n) {
    frame f = {0};
    int rc = find_frame(t, path, &f, err, n);
    if (!rc && m->L < f.npre + f.nsuf + 1)
        rc = ut_errorf(err, n, "%s: max_len %lld has no room for a token between the tokenizer's %lld special "
                               "tokens", path, (long long)m->L, (long long)(f.npre + f.nsuf));
    int32_t *cls = ut_malloc_check((size_t)(r->nw ? r->nw : 1) * sizeof *cls);
    int32_t *bi = ut_malloc_check((size_t)(m->nnames ? m->nnames : 1) * sizeof *bi);
    if (!rc) rc = classes(path, r, m, cls, bi, err, n);
    const char *model = ut_tokenizer_model(t);
    encoder c = {.tok = t, .space = model && !strcmp(model, "BPE"), .ids_cap = 1};
    m->ids = ut_malloc_check(sizeof *m->ids); /* never NULL: a tokenizer without special tokens may give no ids */
    m->lab = ut_malloc_check(sizeof *m->lab);
    m->off = ut_malloc_check((size_t)(r->ns + 1) * sizeof *m->off);
    m->off[0] = 0;
    int64_t at = 0;
    for (int64_t k = 0; k < r->ns && !rc; k++)
        rc = encode_sentence(path, r, k, &f, cls, bi, o->label_all_tokens, m, &c, &at, err, n);
    ut_free(c.word.s);
    ut_tok_encoding_free(&c.e);
    ut_tok_encoding_free(&f.with);
    ut_free(cls);
    ut_free(bi);
    return rc;
}

/* ---- open ---- */

/* m's tag list: o->names, else the file's tags (none without tags) */
static int tag_list(const char *path, const tag_read *r, const ut_tagged_opts *o, tag_impl *m, char *err,
                    size_t n) {
    if (o->names && o->nnames < 1) return ut_errorf(err, n, "%s: an empty tag list given", path);
    if (o->nnames > INT32_MAX) return ut_errorf(err, n, "%s: %lld tags given", path, (long long)o->nnames);
    if (!o->names) {
        file_names(r, m);
        if (r->labeled && !m->nnames) return ut_errorf(err, n, "%s: no tags: every sentence is empty", path);
        return 0;
    }
    m->names = ut_malloc_check((size_t)o->nnames * sizeof *m->names);
    for (int64_t k = 0; k < o->nnames; k++) {
        if (!o->names[k]) return ut_errorf(err, n, "%s: tag %lld of the list given is NULL", path, (long long)k);
        m->names[m->nnames++] = ut__data_strdup(o->names[k]);
    }
    return 0;
}

/* m's words: r's text, a pointer to each word, the sentences' starts */
static void keep_words(tag_read *r, tag_impl *m) {
    m->text = r->text;
    r->text = NULL;
    m->words = ut_malloc_check((size_t)(r->nw ? r->nw : 1) * sizeof *m->words);
    for (int64_t j = 0; j < r->nw; j++) m->words[j] = m->text + r->wtext[j];
    m->woff = r->woff;
    r->woff = NULL;
    m->columns = r->columns;
    r->columns = NULL;
}

ut_dataset *ut_tagged_dataset_open(const char *path, ut_tokenizer *t, const ut_tagged_opts *o, char *err,
                                   size_t n) {
    if (!o) return ut_errorf(err, n, "%s: no token classification options (max_len)", path), NULL;
    if (o->max_len < 1 || o->max_len > 1000000000)
        return ut_errorf(err, n, "%s: max_len must be in [1, 1e9] (got %lld)", path, (long long)o->max_len), NULL;
    tag_read r;
    if (read_file(&r, path, o, err, n)) {
        read_free(&r);
        return NULL;
    }
    tag_impl *m = ut_calloc_check(1, sizeof *m);
    m->L = o->max_len;
    int32_t pad = ut_tokenizer_special_id(t, "pad");
    m->pad = pad >= 0 ? pad : 0;
    int rc = tag_list(path, &r, o, m, err, n);
    if (!rc) rc = encode_all(path, &r, t, o, m, err, n);
    if (!rc) {
        m->n = r.ns;
        keep_words(&r, m);
    }
    bool labeled = r.labeled;
    read_free(&r);
    if (rc) {
        impl_free(m);
        return NULL;
    }
    ut_dataset *ds = ut_calloc_check(1, sizeof *ds);
    *ds = (ut_dataset){.name = ut__data_strdup(path), .n = m->n, .x_ndim = 2, .x_ne = {3, m->L}, .y_ndim = 1,
                       .y_ne = {m->L}, .x_dtype = UT_I32, .y_dtype = UT_I32, .num_classes = m->nnames,
                       .label_names = m->nnames ? (const char *const *)m->names : NULL,
                       .vocab_size = ut_tokenizer_vocab_size(t), .unlabeled = !labeled, .token_planes = true,
                       .token_labels = true, .get = tag_get, .free = tag_free, .impl = m, .columns = m->columns,
                       .words = tag_words};
    return ds;
}
