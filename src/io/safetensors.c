/* safetensors reader and writer. The reader loads the whole file and checks
 * it completely before handing out pointers, so callers can trust shapes,
 * sizes and offsets. Data is copied as raw bytes: safetensors is little-endian,
 * as are the hosts utrain targets (x86-64, aarch64). */
#include "utrain/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "utrain/base.h"

/* The reference implementation refuses headers above 100 MB; so do we, which
 * also bounds what a corrupt length field can make us parse. */
#define ST_MAX_HEADER (100u * 1000u * 1000u)

static const char *const dtype_names[UT_ST_DTYPE_COUNT] = {"F32", "F16", "BF16", "I32", "I64"};
static const size_t dtype_sizes[UT_ST_DTYPE_COUNT] = {4, 2, 2, 4, 8};

const char *ut_st_dtype_name(ut_st_dtype dt) {
    return (unsigned)dt < UT_ST_DTYPE_COUNT ? dtype_names[dt] : NULL;
}

size_t ut_st_dtype_size(ut_st_dtype dt) {
    return (unsigned)dt < UT_ST_DTYPE_COUNT ? dtype_sizes[dt] : 0;
}

int64_t ut_st_numel(const ut_st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static void set_err(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t n, const char *fmt, ...) {
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

static char *str_dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = ut_malloc_check(n);
    memcpy(d, s, n);
    return d;
}

/* ---------------------------------------------------------------- reader */

struct ut_st_file {
    unsigned char *buf;   /* the whole file (ut_st_open) or its header (ut_st_open_index) */
    int fd;               /* ut_st_open_index: the open file, read by ut_st_read; else -1 */
    size_t data_at;       /* the file offset of the data */
    int n, cap;
    char **names;
    ut_st_tensor *t;
    uint64_t (*off)[2];   /* data_offsets, for the overlap check */
    void **copies;        /* per-tensor aligned copies (NULL when not needed) */
    int nmeta, metacap;
    char **meta_k, **meta_v;
};

/* ---- header: cJSON parses the structure; a lexical pass before it holds
 * the text to what JSON (RFC 8259) and safetensors allow but cJSON lets
 * through: control characters and \u0000 in strings (a name would be cut
 * short), numbers that are not non-negative integers (leading zeros, signs,
 * fractions), and it names the byte where a string or the text goes wrong.
 * Positions are byte offsets in the file: the header starts at byte 8. */

typedef struct {
    const char *s;        /* header text */
    size_t len;
    const char *path;
    char *err;
    size_t errn;
} hdr;

static bool herr(const hdr *h, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool herr(const hdr *h, size_t pos, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    set_err(h->err, h->errn, "%s: byte %zu: %s", h->path, pos + 8, msg);
    return false;
}

static int hex4(const hdr *h, size_t at) {
    if (h->len - at < 4) return -1;
    int v = 0;
    for (size_t i = at; i < at + 4; i++) {
        char c = h->s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The \u escape at *pos (pointing at 'u'); moves past it (and its low surrogate). */
static bool check_u_escape(const hdr *h, size_t *pos) {
    size_t at = *pos - 1;
    int cp = hex4(h, *pos + 1);
    if (cp < 0) return herr(h, at, "bad \\u escape (4 hex digits needed)");
    *pos += 5;
    if (cp == 0) return herr(h, at, "\\u0000 in string");
    if (cp >= 0xDC00 && cp < 0xE000) return herr(h, at, "unpaired surrogate in \\u escape");
    if (cp < 0xD800 || cp >= 0xDC00) return true;
    int lo = h->len - *pos >= 6 && h->s[*pos] == '\\' && h->s[*pos + 1] == 'u' ? hex4(h, *pos + 2) : -1;
    if (lo < 0xDC00 || lo >= 0xE000) return herr(h, at, "unpaired surrogate in \\u escape");
    *pos += 6;
    return true;
}

/* A string starting at *pos (the opening quote); moves past the closing one. */
static bool check_string(const hdr *h, size_t *pos) {
    size_t start = *pos, i = start + 1;
    while (i < h->len && h->s[i] != '"') {
        unsigned char c = (unsigned char)h->s[i];
        if (c < 0x20) return herr(h, i, "control character 0x%02x in string", c);
        if (c != '\\') {
            i++;
            continue;
        }
        if (i + 1 >= h->len) break;
        char e = h->s[i + 1];
        if (e == 'u') {
            i++;
            if (!check_u_escape(h, &i)) return false;
        } else if (strchr("\"\\/bfnrt", e) && e) {
            i += 2;
        } else {
            return herr(h, i, "bad escape '\\%c'", e);
        }
    }
    if (i >= h->len) return herr(h, start, "unterminated string");
    *pos = i + 1;
    return true;
}

/* Every number in a safetensors header is a shape dimension or an offset. */
static bool check_number(const hdr *h, size_t *pos) {
    size_t start = *pos, i = start;
    while (i < h->len && strchr("0123456789+-.eE", h->s[i]) && h->s[i]) i++;
    *pos = i;
    if (h->s[start] == '-') return herr(h, start, "expected a non-negative integer");
    for (size_t k = start; k < i; k++)
        if (h->s[k] < '0' || h->s[k] > '9')
            return herr(h, start, "expected an integer, found a fraction or exponent");
    if (h->s[start] == '0' && i - start > 1) return herr(h, start, "leading zero in integer");
    uint64_t x = 0;
    for (size_t k = start; k < i; k++) {
        unsigned d = (unsigned)(h->s[k] - '0');
        if (x > (UINT64_MAX - d) / 10) return herr(h, start, "integer too large");
        x = x * 10 + d;
    }
    return true;
}

/* The lexical pass, plus the bracket depth, so a header cut short is named as such. */
static bool check_lexical(const hdr *h) {
    size_t i = 0;
    long depth = 0;
    while (i < h->len) {
        char c = h->s[i];
        if (c == '"') {
            if (!check_string(h, &i)) return false;
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            if (!check_number(h, &i)) return false;
            continue;
        }
        depth += (c == '{' || c == '[') - (c == '}' || c == ']');
        i++;
    }
    if (depth > 0) return herr(h, h->len, "unexpected end of header (%ld unclosed '{' or '[')", depth);
    return true;
}

static void describe_byte(char *o, size_t n, unsigned char c) {
    if (c >= 0x20 && c < 0x7f)
        snprintf(o, n, "'%c'", c);
    else
        snprintf(o, n, "byte 0x%02x", c);
}

static cJSON *parse_json(const hdr *h) {
    if (!check_lexical(h)) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(h->s, h->len, &end, false);
    char what[32];
    if (!root) {
        size_t at = end && end >= h->s ? (size_t)(end - h->s) : 0;
        if (at >= h->len) {
            herr(h, h->len, "unexpected end of header");
        } else {
            describe_byte(what, sizeof what, (unsigned char)h->s[at]);
            herr(h, at, "invalid JSON at %s", what);
        }
        return NULL;
    }
    size_t at = (size_t)(end - h->s);
    while (at < h->len && strchr(" \t\r\n", h->s[at]) && h->s[at]) at++;
    if (at < h->len) {
        describe_byte(what, sizeof what, (unsigned char)h->s[at]);
        herr(h, at, "unexpected %s after the header object", what);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ---- header: meaning. Errors name the tensor or metadata key. */

static bool terr(const hdr *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool terr(const hdr *h, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    set_err(h->err, h->errn, "%s: %s", h->path, msg);
    return false;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that occurs twice among the members of obj, or NULL. */
static const char *first_duplicate(const cJSON *obj) {
    int n = cJSON_GetArraySize(obj);
    if (n < 2) return NULL;
    const char **names = ut_malloc_check((size_t)n * sizeof *names);
    int k = 0;
    for (const cJSON *m = obj->child; m; m = m->next) names[k++] = m->string;
    qsort(names, (size_t)k, sizeof *names, cmp_str_ptr);
    const char *dup = NULL;
    for (int i = 1; i < k && !dup; i++)
        if (!strcmp(names[i], names[i - 1])) dup = names[i];
    ut_free(names);
    return dup;
}

static void add_meta(ut_st_file *f, const char *k, const char *v) {
    if (f->nmeta == f->metacap) {
        f->metacap = f->metacap ? 2 * f->metacap : 8;
        f->meta_k = ut_realloc_check(f->meta_k, (size_t)f->metacap * sizeof *f->meta_k);
        f->meta_v = ut_realloc_check(f->meta_v, (size_t)f->metacap * sizeof *f->meta_v);
    }
    f->meta_k[f->nmeta] = str_dup(k);
    f->meta_v[f->nmeta++] = str_dup(v);
}

static bool read_metadata(const hdr *h, ut_st_file *f, const cJSON *meta) {
    if (!cJSON_IsObject(meta)) return terr(h, "__metadata__ is not an object");
    const char *dup = first_duplicate(meta);
    if (dup) return terr(h, "duplicate metadata key \"%s\"", dup);
    for (const cJSON *m = meta->child; m; m = m->next) {
        if (!cJSON_IsString(m)) return terr(h, "metadata value of \"%s\" is not a string", m->string);
        add_meta(f, m->string, m->valuestring);
    }
    return true;
}

static void add_tensor(ut_st_file *f, const char *name) {
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        f->names = ut_realloc_check(f->names, (size_t)f->cap * sizeof *f->names);
        f->t = ut_realloc_check(f->t, (size_t)f->cap * sizeof *f->t);
        f->off = ut_realloc_check(f->off, (size_t)f->cap * sizeof *f->off);
        f->copies = ut_realloc_check(f->copies, (size_t)f->cap * sizeof *f->copies);
    }
    f->names[f->n] = str_dup(name);
    memset(&f->t[f->n], 0, sizeof f->t[f->n]);
    f->copies[f->n] = NULL;
    f->n++;
}

/* An array of at most max non-negative integers (the lexical pass refused
 * anything else written as a number). Values above 2^53 are rounded by the
 * double cJSON stores, but no such value can describe a real file: the size
 * and bounds checks refuse it. */
static bool read_uints(const hdr *h, const char *name, const char *key, const cJSON *a,
                       uint64_t *out, int max, int *count) {
    if (!cJSON_IsArray(a)) return terr(h, "tensor \"%s\": \"%s\" is not an array", name, key);
    *count = 0;
    for (const cJSON *v = a->child; v; v = v->next) {
        if (*count == max) return terr(h, "tensor \"%s\": \"%s\" has more than %d elements", name, key, max);
        if (!cJSON_IsNumber(v))
            return terr(h, "tensor \"%s\": \"%s\": expected a non-negative integer", name, key);
        out[(*count)++] = v->valuedouble >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)v->valuedouble;
    }
    return true;
}

static bool read_dtype(const hdr *h, const char *name, const cJSON *v, ut_st_tensor *t) {
    if (!cJSON_IsString(v)) return terr(h, "tensor \"%s\": \"dtype\" is not a string", name);
    int i = 0;
    while (i < UT_ST_DTYPE_COUNT && strcmp(v->valuestring, dtype_names[i])) i++;
    if (i == UT_ST_DTYPE_COUNT)
        return terr(h, "tensor \"%s\": unsupported dtype \"%s\" (F32, F16, BF16, I32, I64)", name,
                    v->valuestring);
    t->dtype = (ut_st_dtype)i;
    return true;
}

/* {"dtype": .., "shape": [..], "data_offsets": [b, e]}, each key exactly once.
 * Consistency with the data is checked after the whole header is read. */
static bool read_tensor_info(const hdr *h, ut_st_file *f, const cJSON *info) {
    const char *name = f->names[f->n - 1];
    ut_st_tensor *t = &f->t[f->n - 1];
    if (!cJSON_IsObject(info))
        return terr(h, "tensor \"%s\": expected '{' (an object with dtype, shape, data_offsets)", name);
    const char *dup = first_duplicate(info);
    if (dup) return terr(h, "tensor \"%s\": duplicate key \"%s\"", name, dup);
    static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
    for (const cJSON *m = info->child; m; m = m->next)
        if (strcmp(m->string, keys[0]) && strcmp(m->string, keys[1]) && strcmp(m->string, keys[2]))
            return terr(h, "tensor \"%s\": unknown key \"%s\"", name, m->string);
    for (int k = 0; k < 3; k++)
        if (!cJSON_GetObjectItemCaseSensitive(info, keys[k]))
            return terr(h, "tensor \"%s\": missing \"%s\"", name, keys[k]);
    if (!read_dtype(h, name, cJSON_GetObjectItemCaseSensitive(info, "dtype"), t)) return false;
    uint64_t sh[UT_ST_MAX_DIMS];
    if (!read_uints(h, name, "shape", cJSON_GetObjectItemCaseSensitive(info, "shape"), sh,
                    UT_ST_MAX_DIMS, &t->ndim))
        return false;
    for (int i = 0; i < t->ndim; i++) {
        if (sh[i] > (uint64_t)INT64_MAX) return terr(h, "tensor \"%s\": dimension too large", name);
        t->shape[i] = (int64_t)sh[i];
    }
    int cnt;
    if (!read_uints(h, name, "data_offsets", cJSON_GetObjectItemCaseSensitive(info, "data_offsets"),
                    f->off[f->n - 1], 2, &cnt))
        return false;
    if (cnt != 2) return terr(h, "tensor \"%s\": data_offsets needs 2 integers, has %d", name, cnt);
    return true;
}

static bool read_header(const hdr *h, ut_st_file *f) {
    cJSON *root = parse_json(h);
    if (!root) return false;
    bool ok = true;
    const char *dup = NULL;
    if (!cJSON_IsObject(root)) {
        ok = herr(h, 0, "expected '{', the header is not an object");
    } else if ((dup = first_duplicate(root))) {
        ok = !strcmp(dup, "__metadata__") ? terr(h, "duplicate __metadata__")
                                          : terr(h, "duplicate tensor \"%s\"", dup);
    }
    for (const cJSON *m = ok ? root->child : NULL; m && ok; m = m->next) {
        if (!strcmp(m->string, "__metadata__")) {
            ok = read_metadata(h, f, m);
        } else if (!*m->string) {
            ok = terr(h, "empty tensor name");
        } else {
            add_tensor(f, m->string);
            ok = read_tensor_info(h, f, m);
        }
    }
    cJSON_Delete(root);
    return ok;
}

typedef struct {
    uint64_t begin, end;
    int idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Sizes, bounds and overlaps, after parsing. */
static bool check_tensors(ut_st_file *f, const char *path, size_t data_at, size_t data_len,
                          char *err, size_t n) {
    for (int i = 0; i < f->n; i++) {
        ut_st_tensor *t = &f->t[i];
        const uint64_t *off = f->off[i];
        uint64_t bytes = ut_st_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] && bytes > UINT64_MAX / (uint64_t)t->shape[d]) {
                set_err(err, n, "%s: tensor \"%s\": shape overflows", path, f->names[i]);
                return false;
            }
            bytes *= (uint64_t)t->shape[d];
        }
        if (off[1] < off[0]) {
            set_err(err, n, "%s: tensor \"%s\": data_offsets [%llu, %llu] end before begin", path,
                    f->names[i], (unsigned long long)off[0], (unsigned long long)off[1]);
            return false;
        }
        if (off[1] - off[0] != bytes) {
            set_err(err, n,
                    "%s: tensor \"%s\": %s shape needs %llu bytes but data_offsets [%llu, %llu] "
                    "span %llu",
                    path, f->names[i], dtype_names[t->dtype], (unsigned long long)bytes,
                    (unsigned long long)off[0], (unsigned long long)off[1],
                    (unsigned long long)(off[1] - off[0]));
            return false;
        }
        if (off[1] > data_len) {
            set_err(err, n,
                    "%s: tensor \"%s\": data_offsets [%llu, %llu] (file bytes %llu..%llu) run past "
                    "the end of the data (%zu bytes, file size %zu)",
                    path, f->names[i], (unsigned long long)off[0], (unsigned long long)off[1],
                    (unsigned long long)(data_at + off[0]), (unsigned long long)(data_at + off[1]),
                    data_len, data_at + data_len);
            return false;
        }
        t->nbytes = (size_t)bytes;
    }
    /* Empty tensors occupy nothing, so they cannot overlap anything. */
    span *sp = ut_malloc_check((size_t)(f->n ? f->n : 1) * sizeof *sp);
    int ns = 0;
    for (int i = 0; i < f->n; i++)
        if (f->t[i].nbytes) sp[ns++] = (span){f->off[i][0], f->off[i][1], i};
    qsort(sp, (size_t)ns, sizeof *sp, cmp_span);
    bool ok = true;
    for (int k = 1; k < ns && ok; k++) {
        if (sp[k].begin < sp[k - 1].end) {
            set_err(err, n, "%s: tensor \"%s\" (data_offsets [%llu, %llu]) overlaps \"%s\" ([%llu, %llu])",
                    path, f->names[sp[k].idx], (unsigned long long)sp[k].begin,
                    (unsigned long long)sp[k].end, f->names[sp[k - 1].idx],
                    (unsigned long long)sp[k - 1].begin, (unsigned long long)sp[k - 1].end);
            ok = false;
        }
    }
    ut_free(sp);
    return ok;
}

/* Opens path and reads its header (the whole file with whole, else only the
 * length field and the header), validated; NULL with err. */
static ut_st_file *st_open(const char *path, bool whole, char *err, size_t n) {
    int fd = ut_open_regular(path, err, n);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st)) {
        set_err(err, n, "%s: cannot read: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    if (size < 8) {
        set_err(err, n, "%s: byte 0: file is %zu bytes, too short for the 8-byte header length",
                path, size);
        close(fd);
        return NULL;
    }
    ut_st_file *f = ut_calloc_check(1, sizeof *f);
    f->fd = -1;
    unsigned char len8[8];
    if (!whole && pread(fd, len8, 8, 0) != 8) {
        set_err(err, n, "%s: cannot read the header length: %s", path, strerror(errno));
        close(fd);
        ut_free(f);
        return NULL;
    }
    uint64_t hlen = 0;
    if (whole) {
        f->buf = ut_aligned_alloc_check(size);
        ssize_t got = 0;
        for (size_t at = 0; at < size; at += (size_t)got)
            if ((got = pread(fd, f->buf + at, size - at, (off_t)at)) <= 0) break;
        if (got <= 0) {
            set_err(err, n, "%s: cannot read all %zu bytes: %s", path, size, got < 0 ? strerror(errno) : "short file");
            close(fd);
            ut_st_close(f);
            return NULL;
        }
        memcpy(len8, f->buf, 8);
    }
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (hlen > ST_MAX_HEADER || hlen > size - 8) {
        set_err(err, n,
                "%s: byte 0: header length %llu does not fit in the file (%zu bytes after the "
                "length field)%s",
                path, (unsigned long long)hlen, size - 8,
                hlen > ST_MAX_HEADER ? " or exceeds the 100 MB limit" : "");
        close(fd);
        ut_st_close(f);
        return NULL;
    }
    if (!whole) { /* the header alone, at its place after the length field */
        f->buf = ut_aligned_alloc_check(8 + (size_t)hlen);
        memcpy(f->buf, len8, 8);
        ssize_t got = 0;
        for (size_t at = 0; at < hlen; at += (size_t)got)
            if ((got = pread(fd, f->buf + 8 + at, (size_t)hlen - at, (off_t)(8 + at))) <= 0) break;
        if (hlen && got <= 0) {
            set_err(err, n, "%s: cannot read the %llu-byte header: %s", path, (unsigned long long)hlen,
                    got < 0 ? strerror(errno) : "short file");
            close(fd);
            ut_st_close(f);
            return NULL;
        }
    }
    if (hlen < 2 || f->buf[8] != '{') {
        set_err(err, n, "%s: byte 8: header does not start with '{'", path);
        close(fd);
        ut_st_close(f);
        return NULL;
    }
    hdr h = {(const char *)f->buf + 8, (size_t)hlen, path, err, n};
    f->data_at = 8 + (size_t)hlen;
    if (!read_header(&h, f) || !check_tensors(f, path, f->data_at, size - f->data_at, err, n)) {
        close(fd);
        ut_st_close(f);
        return NULL;
    }
    if (!whole) {
        f->fd = fd;
        return f;
    }
    close(fd);
    for (int i = 0; i < f->n; i++) {
        ut_st_tensor *t = &f->t[i];
        const unsigned char *src = f->buf + f->data_at + f->off[i][0];
        /* Writers need not align tensors; copy the odd ones so callers can
         * read them as float or int arrays. */
        if ((uintptr_t)src % ut_st_dtype_size(t->dtype)) {
            f->copies[i] = ut_aligned_alloc_check(t->nbytes);
            memcpy(f->copies[i], src, t->nbytes);
            src = f->copies[i];
        }
        f->t[i].data = src;   /* the file's bytes (or the aligned copy) */
    }
    return f;
}

ut_st_file *ut_st_open(const char *path, char *err, size_t n) { return st_open(path, true, err, n); }

ut_st_file *ut_st_open_index(const char *path, char *err, size_t n) { return st_open(path, false, err, n); }

int ut_st_index(const ut_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) return i;
    return -1;
}

int64_t ut_st_offset(const ut_st_file *f, int i) { return i >= 0 && i < f->n ? (int64_t)f->off[i][0] : -1; }

int ut_st_read(const ut_st_file *f, int i, size_t at, void *dst, size_t nbytes, char *err, size_t n) {
    UT_ASSERT(i >= 0 && i < f->n);
    if (at > f->t[i].nbytes || nbytes > f->t[i].nbytes - at)
        return set_err(err, n, "tensor \"%s\": bytes [%zu, %zu) are outside its %zu", f->names[i], at, at + nbytes,
                       f->t[i].nbytes), -1;
    if (f->fd < 0) {
        memcpy(dst, (const unsigned char *)f->t[i].data + at, nbytes);
        return 0;
    }
    size_t from = f->data_at + (size_t)f->off[i][0] + at;
    for (size_t done = 0; done < nbytes;) {
        ssize_t got = pread(f->fd, (char *)dst + done, nbytes - done, (off_t)(from + done));
        if (got <= 0) {
            set_err(err, n, "tensor \"%s\": reading file bytes %zu..%zu: %s", f->names[i], from, from + nbytes,
                    got < 0 ? strerror(errno) : "the file is shorter than its header says");
            return -1;
        }
        done += (size_t)got;
    }
    return 0;
}

void ut_st_close(ut_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) {
        ut_free(f->names[i]);
        ut_free(f->copies[i]);
    }
    for (int i = 0; i < f->nmeta; i++) {
        ut_free(f->meta_k[i]);
        ut_free(f->meta_v[i]);
    }
    ut_free(f->names);
    ut_free(f->t);
    ut_free(f->off);
    ut_free(f->copies);
    ut_free(f->meta_k);
    ut_free(f->meta_v);
    ut_free(f->buf);
    ut_free(f);
}

int ut_st_count(const ut_st_file *f) { return f->n; }

const char *ut_st_name(const ut_st_file *f, int i) {
    return i >= 0 && i < f->n ? f->names[i] : NULL;
}

const ut_st_tensor *ut_st_get(const ut_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) return &f->t[i];
    return NULL;
}

const char *ut_st_meta(const ut_st_file *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_k[i], key)) return f->meta_v[i];
    return NULL;
}

/* ---------------------------------------------------------------- writer */

typedef struct {
    char *s;
    size_t len, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 1024;
        b->s = ut_realloc_check(b->s, b->cap);
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_json_string(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static bool write_all(FILE *fp, const void *p, size_t n) { return fwrite(p, 1, n, fp) == n; }

/* Makes the rename durable: without syncing the directory a crash can lose
 * the new entry even though the file's data is on disk. */
static void sync_dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? str_dup(path) : str_dup(".");
    if (slash) dir[slash - path + (slash == path)] = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    ut_free(dir);
}

struct ut_st_writer {
    char *path, *tmp;
    FILE *fp;
    sbuf h;           /* the header (length field not included) */
    size_t left;      /* data bytes still to come */
    size_t meta_at[64]; /* where each metadata value's text starts in the header */
    int nmeta;
    char **meta_keys;
};

static void writer_free(ut_st_writer *w) {
    if (w->fp) {
        fclose(w->fp);
        unlink(w->tmp);
    }
    for (int k = 0; k < w->nmeta; k++) ut_free(w->meta_keys[k]);
    ut_free(w->meta_keys);
    ut_free(w->h.s);
    ut_free(w->tmp);
    ut_free(w->path);
    ut_free(w);
}

ut_st_writer *ut_st_writer_open(const char *path, int n, const char *const *names, const ut_st_tensor *tensors,
                                const char *const *meta_kv, char *err, size_t errn) {
    for (int i = 0; i < n; i++) {
        const ut_st_tensor *t = &tensors[i];
        if (!names[i] || !*names[i] || !strcmp(names[i], "__metadata__")) {
            set_err(err, errn, "%s: tensor %d: bad name \"%s\"", path, i, names[i] ? names[i] : "(null)");
            return NULL;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j])) {
                set_err(err, errn, "%s: duplicate tensor name \"%s\"", path, names[i]);
                return NULL;
            }
        if (!ut_st_dtype_name(t->dtype) || t->ndim < 0 || t->ndim > UT_ST_MAX_DIMS) {
            set_err(err, errn, "%s: tensor \"%s\": bad dtype %d or ndim %d", path, names[i],
                    (int)t->dtype, t->ndim);
            return NULL;
        }
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0) {
                set_err(err, errn, "%s: tensor \"%s\": negative dimension", path, names[i]);
                return NULL;
            }
        if ((size_t)ut_st_numel(t) * ut_st_dtype_size(t->dtype) != t->nbytes) {
            set_err(err, errn, "%s: tensor \"%s\": nbytes %zu does not match its %s shape (%lld elements)",
                    path, names[i], t->nbytes, ut_st_dtype_name(t->dtype), (long long)ut_st_numel(t));
            return NULL;
        }
    }
    int nm = 0;
    while (meta_kv && meta_kv[2 * nm]) {
        if (!meta_kv[2 * nm + 1]) {
            set_err(err, errn, "%s: metadata key \"%s\" has no value", path, meta_kv[2 * nm]);
            return NULL;
        }
        nm++;
    }
    if (nm > (int)(sizeof ((ut_st_writer *)0)->meta_at / sizeof(size_t))) {
        set_err(err, errn, "%s: %d metadata entries, more than this writer keeps", path, nm);
        return NULL;
    }

    ut_st_writer *w = ut_calloc_check(1, sizeof *w);
    w->path = str_dup(path);
    w->meta_keys = ut_calloc_check((size_t)(nm ? nm : 1), sizeof *w->meta_keys);
    sbuf *h = &w->h;
    char num[64];
    size_t at = 0;
    sb_puts(h, "{");
    if (nm) {
        sb_puts(h, "\"__metadata__\":{");
        for (int k = 0; k < nm; k++) {
            if (k) sb_puts(h, ",");
            sb_json_string(h, meta_kv[2 * k]);
            sb_puts(h, ":");
            w->meta_at[k] = h->len + 1; /* after the opening quote */
            w->meta_keys[k] = str_dup(meta_kv[2 * k]);
            w->nmeta = k + 1;
            sb_json_string(h, meta_kv[2 * k + 1]);
        }
        sb_puts(h, "}");
        if (n) sb_puts(h, ",");
    }
    for (int i = 0; i < n; i++) {
        const ut_st_tensor *t = &tensors[i];
        if (i) sb_puts(h, ",");
        sb_json_string(h, names[i]);
        sb_puts(h, ":{\"dtype\":\"");
        sb_puts(h, ut_st_dtype_name(t->dtype));
        sb_puts(h, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            sb_puts(h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", at, at + t->nbytes);
        sb_puts(h, num);
        at += t->nbytes;
    }
    sb_puts(h, "}");
    /* Pad with spaces so the data starts 8-byte aligned, as the reference
     * writer does; readers that mmap the file can then use it in place. */
    while ((8 + h->len) % 8) sb_puts(h, " ");
    w->left = at;

    /* O_EXCL on a per-process, per-call name instead of mkstemp: the file
     * gets the usual umask-derived mode rather than mkstemp's 0600. */
    static atomic_uint tmp_counter;
    size_t plen = strlen(path);
    w->tmp = ut_malloc_check(plen + 48);
    snprintf(w->tmp, plen + 48, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&tmp_counter, 1));
    int fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        set_err(err, errn, "%s: cannot create temporary file %s: %s", path, w->tmp, strerror(errno));
        writer_free(w);
        return NULL;
    }
    if (!(w->fp = fdopen(fd, "wb"))) {
        set_err(err, errn, "%s: fdopen: %s", path, strerror(errno));
        close(fd);
        unlink(w->tmp);
        writer_free(w);
        return NULL;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h->len >> (8 * i));
    if (!write_all(w->fp, len8, 8) || !write_all(w->fp, h->s, h->len)) {
        set_err(err, errn, "%s: write failed: %s", path, strerror(errno));
        writer_free(w);
        return NULL;
    }
    return w;
}

int ut_st_writer_write(ut_st_writer *w, const void *data, size_t nbytes, char *err, size_t errn) {
    if (nbytes > w->left)
        return set_err(err, errn, "%s: %zu bytes more than the header's tensors hold", w->path, nbytes - w->left), -1;
    if (nbytes && !write_all(w->fp, data, nbytes))
        return set_err(err, errn, "%s: write failed: %s", w->path, strerror(errno)), -1;
    w->left -= nbytes;
    return 0;
}

int ut_st_writer_set_meta(ut_st_writer *w, const char *key, const char *value, char *err, size_t errn) {
    for (int k = 0; k < w->nmeta; k++) {
        if (strcmp(w->meta_keys[k], key)) continue;
        size_t len = strlen(value);
        const char *old = w->h.s + w->meta_at[k], *q = memchr(old, '"', w->h.len - w->meta_at[k]);
        if (!q || (size_t)(q - old) != len || memchr(value, '"', len) || memchr(value, '\\', len))
            return set_err(err, errn, "%s: metadata \"%s\": the new value must be as long as the first", w->path, key),
                   -1;
        memcpy(w->h.s + w->meta_at[k], value, len);
        if (fflush(w->fp) || pwrite(fileno(w->fp), value, len, (off_t)(8 + w->meta_at[k])) != (ssize_t)len)
            return set_err(err, errn, "%s: write failed: %s", w->path, strerror(errno)), -1;
        return 0;
    }
    return set_err(err, errn, "%s: no metadata \"%s\" to set", w->path, key), -1;
}

int ut_st_writer_close(ut_st_writer *w, bool commit, char *err, size_t errn) {
    if (!w) return 0;
    if (!commit) {
        writer_free(w);
        return 0;
    }
    if (w->left) {
        set_err(err, errn, "%s: %zu bytes of tensor data were never written", w->path, w->left);
        writer_free(w);
        return -1;
    }
    bool ok = fflush(w->fp) == 0 && fsync(fileno(w->fp)) == 0;
    int saved = errno;
    if (fclose(w->fp) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    w->fp = NULL;
    if (ok && rename(w->tmp, w->path) != 0) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        set_err(err, errn, "%s: write failed: %s", w->path, strerror(saved));
        unlink(w->tmp);
    } else {
        sync_dir_of(w->path);
    }
    writer_free(w);
    return ok ? 0 : -1;
}

int ut_st_save(const char *path, int n, const char *const *names, const ut_st_tensor *tensors,
               const char *const *meta_kv, char *err, size_t errn) {
    for (int i = 0; i < n; i++)
        if (tensors[i].nbytes && !tensors[i].data) {
            set_err(err, errn, "%s: tensor \"%s\": no data", path, names[i] ? names[i] : "(null)");
            return -1;
        }
    ut_st_writer *w = ut_st_writer_open(path, n, names, tensors, meta_kv, err, errn);
    if (!w) return -1;
    for (int i = 0; i < n; i++)
        if (ut_st_writer_write(w, tensors[i].data, tensors[i].nbytes, err, errn)) {
            ut_st_writer_close(w, false, NULL, 0);
            return -1;
        }
    return ut_st_writer_close(w, true, err, errn);
}

/* ---- element values ---- */

static float half_to_f32(uint16_t h, bool bf16) {
    uint32_t bits;
    if (bf16) bits = (uint32_t)h << 16;
    else {
        uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
        if (e == 0) return (s ? -1.0f : 1.0f) * ldexpf((float)m, -24);
        bits = s | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* (a file's bytes, not tensor data: read through a copy of the record) */
float ut_st_float(const ut_st_tensor *t, int64_t i) {
    const ut_st_tensor st = *t;
    const char *bytes = st.data;
    if (st.dtype == UT_ST_F32) {
        float f;
        memcpy(&f, bytes + 4 * i, sizeof f);
        return f;
    }
    if (st.dtype == UT_ST_F16 || st.dtype == UT_ST_BF16) {
        uint16_t h;
        memcpy(&h, bytes + 2 * i, sizeof h);
        return half_to_f32(h, st.dtype == UT_ST_BF16);
    }
    if (st.dtype == UT_ST_I32) {
        int32_t v;
        memcpy(&v, bytes + 4 * i, sizeof v);
        return (float)v;
    }
    int64_t v;
    memcpy(&v, bytes + 8 * i, sizeof v);
    return (float)v;
}

int64_t ut_st_first_bad(const ut_st_tensor *t, bool nonneg) {
    if (t->dtype != UT_ST_F32 && t->dtype != UT_ST_F16 && t->dtype != UT_ST_BF16) return -1;
    int64_t k = ut_st_numel(t);
    for (int64_t i = 0; i < k; i++) {
        float v = ut_st_float(t, i);
        if (!isfinite(v) || (nonneg && v < 0)) return i;
    }
    return -1;
}
