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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    unsigned char *buf;   /* the whole file */
    int n, cap;
    char **names;
    ut_st_tensor *t;
    uint64_t (*off)[2];   /* data_offsets, for the overlap check */
    void **copies;        /* per-tensor aligned copies (NULL when not needed) */
    int nmeta, metacap;
    char **meta_k, **meta_v;
};

typedef struct {
    const char *s;        /* header text */
    size_t len, pos;
    const char *path;
    char *err;
    size_t errn;
    bool failed;
} parser;

/* Positions are reported as byte offsets in the file: the header starts at 8. */
static void perr(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void perr(parser *p, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = true;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    set_err(p->err, p->errn, "%s: byte %zu: %s", p->path, p->pos + 8, msg);
}

static void skip_ws(parser *p) {
    while (p->pos < p->len &&
           (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static bool expect(parser *p, char c) {
    skip_ws(p);
    if (p->pos >= p->len) {
        perr(p, "expected '%c', found end of header", c);
        return false;
    }
    unsigned char got = (unsigned char)p->s[p->pos];
    if (got != (unsigned char)c) {
        if (got >= 0x20 && got < 0x7f)
            perr(p, "expected '%c', found '%c'", c, got);
        else
            perr(p, "expected '%c', found byte 0x%02x", c, got);
        return false;
    }
    p->pos++;
    return true;
}

/* After a member: true when another follows (','), false at close. */
static bool more_members(parser *p, char close) {
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ',') {
        p->pos++;
        return true;
    }
    expect(p, close);
    return false;
}

static bool peek_close(parser *p, char close) {
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return true;
    }
    return false;
}

static int hex4(parser *p) {
    if (p->len - p->pos < 4) {
        perr(p, "truncated \\u escape");
        return -1;
    }
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            p->pos--;
            perr(p, "bad hex digit in \\u escape");
            return -1;
        }
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A JSON string, decoded to a NUL-terminated UTF-8 copy (NULL on error).
 * \u0000 is refused: names and metadata are used as C strings. */
static char *parse_string(parser *p) {
    if (!expect(p, '"')) return NULL;
    /* Decoding never lengthens: an escape of k bytes yields at most k bytes. */
    char *out = ut_malloc_check(p->len - p->pos + 1);
    size_t o = 0;
    for (;;) {
        if (p->pos >= p->len) {
            perr(p, "unterminated string");
            break;
        }
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            out[o] = 0;
            return out;
        }
        if (c < 0x20) {
            perr(p, "control character 0x%02x in string", c);
            break;
        }
        if (c != '\\') {
            out[o++] = (char)c;
            p->pos++;
            continue;
        }
        p->pos++;
        if (p->pos >= p->len) {
            perr(p, "unterminated escape");
            break;
        }
        char e = p->s[p->pos++];
        switch (e) {
        case '"': out[o++] = '"'; continue;
        case '\\': out[o++] = '\\'; continue;
        case '/': out[o++] = '/'; continue;
        case 'b': out[o++] = '\b'; continue;
        case 'f': out[o++] = '\f'; continue;
        case 'n': out[o++] = '\n'; continue;
        case 'r': out[o++] = '\r'; continue;
        case 't': out[o++] = '\t'; continue;
        case 'u': break;
        default:
            p->pos--;
            perr(p, "bad escape '\\%c'", e);
            ut_free(out);
            return NULL;
        }
        int cp = hex4(p);
        if (cp < 0) break;
        if (cp >= 0xD800 && cp < 0xDC00) {
            /* a high surrogate must be followed by \u and a low one */
            if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                perr(p, "unpaired surrogate in \\u escape");
                break;
            }
            p->pos += 2;
            int lo = hex4(p);
            if (lo < 0) break;
            if (lo < 0xDC00 || lo >= 0xE000) {
                perr(p, "unpaired surrogate in \\u escape");
                break;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            perr(p, "unpaired surrogate in \\u escape");
            break;
        } else if (cp == 0) {
            perr(p, "\\u0000 in string");
            break;
        }
        o += put_utf8(out + o, (unsigned)cp);
    }
    ut_free(out);
    return NULL;
}

/* A non-negative JSON integer (no sign, fraction or exponent). */
static bool parse_uint(parser *p, uint64_t *v) {
    skip_ws(p);
    size_t start = p->pos;
    uint64_t x = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        unsigned d = (unsigned)(p->s[p->pos] - '0');
        if (x > (UINT64_MAX - d) / 10) {
            perr(p, "integer too large");
            return false;
        }
        x = x * 10 + d;
        p->pos++;
    }
    if (p->pos == start) {
        perr(p, "expected a non-negative integer");
        return false;
    }
    if (p->s[start] == '0' && p->pos - start > 1) {
        p->pos = start;
        perr(p, "leading zero in integer");
        return false;
    }
    if (p->pos < p->len && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        perr(p, "expected an integer, found a fraction or exponent");
        return false;
    }
    *v = x;
    return true;
}

static bool parse_uint_array(parser *p, uint64_t *out, int max, int *count) {
    *count = 0;
    if (!expect(p, '[')) return false;
    if (peek_close(p, ']')) return true;
    do {
        if (*count == max) {
            perr(p, "more than %d elements", max);
            return false;
        }
        if (!parse_uint(p, &out[*count])) return false;
        (*count)++;
    } while (more_members(p, ']'));
    return !p->failed;
}

static void add_meta(ut_st_file *f, char *k, char *v) {
    if (f->nmeta == f->metacap) {
        f->metacap = f->metacap ? 2 * f->metacap : 8;
        f->meta_k = ut_realloc_check(f->meta_k, (size_t)f->metacap * sizeof *f->meta_k);
        f->meta_v = ut_realloc_check(f->meta_v, (size_t)f->metacap * sizeof *f->meta_v);
    }
    f->meta_k[f->nmeta] = k;
    f->meta_v[f->nmeta++] = v;
}

static bool parse_metadata(parser *p, ut_st_file *f) {
    if (!expect(p, '{')) return false;
    if (peek_close(p, '}')) return true;
    do {
        skip_ws(p);
        size_t at = p->pos;
        char *k = parse_string(p);
        if (!k) return false;
        for (int i = 0; i < f->nmeta; i++)
            if (!strcmp(f->meta_k[i], k)) {
                p->pos = at;
                perr(p, "duplicate metadata key \"%s\"", k);
                ut_free(k);
                return false;
            }
        if (!expect(p, ':')) {
            ut_free(k);
            return false;
        }
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] != '"') {
            perr(p, "metadata value of \"%s\" is not a string", k);
            ut_free(k);
            return false;
        }
        char *v = parse_string(p);
        if (!v) {
            ut_free(k);
            return false;
        }
        add_meta(f, k, v);
    } while (more_members(p, '}'));
    return !p->failed;
}

static void add_tensor(ut_st_file *f, char *name) {
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        f->names = ut_realloc_check(f->names, (size_t)f->cap * sizeof *f->names);
        f->t = ut_realloc_check(f->t, (size_t)f->cap * sizeof *f->t);
        f->off = ut_realloc_check(f->off, (size_t)f->cap * sizeof *f->off);
        f->copies = ut_realloc_check(f->copies, (size_t)f->cap * sizeof *f->copies);
    }
    f->names[f->n] = name;
    memset(&f->t[f->n], 0, sizeof f->t[f->n]);
    f->copies[f->n] = NULL;
    f->n++;
}

/* {"dtype": .., "shape": [..], "data_offsets": [b, e]}, each key exactly once.
 * Consistency with the data is checked after the whole header is read. */
static bool parse_tensor_info(parser *p, ut_st_file *f, const char *name) {
    ut_st_tensor *t = &f->t[f->n - 1];
    uint64_t *off = f->off[f->n - 1];
    bool have_dtype = false, have_shape = false, have_off = false;
    size_t obj_at = p->pos;
    if (!expect(p, '{')) return false;
    if (!peek_close(p, '}')) do {
        skip_ws(p);
        size_t at = p->pos;
        char *k = parse_string(p);
        if (!k) return false;
        bool ok = expect(p, ':');
        bool *seen = !strcmp(k, "dtype") ? &have_dtype
                   : !strcmp(k, "shape") ? &have_shape
                   : !strcmp(k, "data_offsets") ? &have_off : NULL;
        if (ok && !seen) {
            p->pos = at;
            perr(p, "tensor \"%s\": unknown key \"%s\"", name, k);
            ok = false;
        } else if (ok && *seen) {
            p->pos = at;
            perr(p, "tensor \"%s\": duplicate key \"%s\"", name, k);
            ok = false;
        }
        if (ok) {
            *seen = true;
            if (seen == &have_dtype) {
                skip_ws(p);
                size_t vat = p->pos;
                char *d = parse_string(p);
                ok = d != NULL;
                if (ok) {
                    int i = 0;
                    while (i < UT_ST_DTYPE_COUNT && strcmp(d, dtype_names[i])) i++;
                    if (i == UT_ST_DTYPE_COUNT) {
                        p->pos = vat;
                        perr(p, "tensor \"%s\": unsupported dtype \"%s\" (F32, F16, BF16, I32, I64)",
                             name, d);
                        ok = false;
                    }
                    t->dtype = (ut_st_dtype)i;
                    ut_free(d);
                }
            } else if (seen == &have_shape) {
                uint64_t sh[UT_ST_MAX_DIMS];
                ok = parse_uint_array(p, sh, UT_ST_MAX_DIMS, &t->ndim);
                for (int i = 0; ok && i < t->ndim; i++) {
                    if (sh[i] > (uint64_t)INT64_MAX) {
                        perr(p, "tensor \"%s\": dimension too large", name);
                        ok = false;
                    }
                    t->shape[i] = (int64_t)sh[i];
                }
            } else {
                int cnt;
                ok = parse_uint_array(p, off, 2, &cnt);
                if (ok && cnt != 2) {
                    perr(p, "tensor \"%s\": data_offsets needs 2 integers, has %d", name, cnt);
                    ok = false;
                }
            }
        }
        ut_free(k);
        if (!ok) return false;
    } while (more_members(p, '}'));
    if (p->failed) return false;
    if (!have_dtype || !have_shape || !have_off) {
        p->pos = obj_at;
        perr(p, "tensor \"%s\": missing \"%s\"", name,
             !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
        return false;
    }
    return true;
}

static bool parse_header(parser *p, ut_st_file *f) {
    bool have_meta = false;
    skip_ws(p);
    if (!expect(p, '{')) return false;
    if (!peek_close(p, '}')) do {
        skip_ws(p);
        size_t at = p->pos;
        char *name = parse_string(p);
        if (!name) return false;
        if (!expect(p, ':')) {
            ut_free(name);
            return false;
        }
        if (!strcmp(name, "__metadata__")) {
            ut_free(name);
            if (have_meta) {
                p->pos = at;
                perr(p, "duplicate __metadata__");
                return false;
            }
            have_meta = true;
            if (!parse_metadata(p, f)) return false;
            continue;
        }
        for (int i = 0; i < f->n; i++)
            if (!strcmp(f->names[i], name)) {
                p->pos = at;
                perr(p, "duplicate tensor \"%s\"", name);
                ut_free(name);
                return false;
            }
        if (!*name) {
            p->pos = at;
            perr(p, "empty tensor name");
            ut_free(name);
            return false;
        }
        add_tensor(f, name);
        if (!parse_tensor_info(p, f, name)) return false;
    } while (more_members(p, '}'));
    if (p->failed) return false;
    skip_ws(p);
    if (p->pos != p->len) {
        perr(p, "unexpected '%c' after the header object", p->s[p->pos]);
        return false;
    }
    return true;
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

ut_st_file *ut_st_open(const char *path, char *err, size_t n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        set_err(err, n, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(fp), &st) || !S_ISREG(st.st_mode)) {
        set_err(err, n, "%s: not a regular file", path);
        fclose(fp);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    if (size < 8) {
        set_err(err, n, "%s: byte 0: file is %zu bytes, too short for the 8-byte header length",
                path, size);
        fclose(fp);
        return NULL;
    }
    ut_st_file *f = ut_calloc_check(1, sizeof *f);
    f->buf = ut_aligned_alloc_check(size);
    size_t got = fread(f->buf, 1, size, fp);
    fclose(fp);
    if (got != size) {
        set_err(err, n, "%s: read %zu of %zu bytes", path, got, size);
        ut_st_close(f);
        return NULL;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->buf[i];
    if (hlen > ST_MAX_HEADER || hlen > size - 8) {
        set_err(err, n,
                "%s: byte 0: header length %llu does not fit in the file (%zu bytes after the "
                "length field)%s",
                path, (unsigned long long)hlen, size - 8,
                hlen > ST_MAX_HEADER ? " or exceeds the 100 MB limit" : "");
        ut_st_close(f);
        return NULL;
    }
    if (hlen < 2 || f->buf[8] != '{') {
        set_err(err, n, "%s: byte 8: header does not start with '{'", path);
        ut_st_close(f);
        return NULL;
    }
    parser p = {(const char *)f->buf + 8, (size_t)hlen, 0, path, err, n, false};
    size_t data_at = 8 + (size_t)hlen;
    if (!parse_header(&p, f) || !check_tensors(f, path, data_at, size - data_at, err, n)) {
        ut_st_close(f);
        return NULL;
    }
    for (int i = 0; i < f->n; i++) {
        ut_st_tensor *t = &f->t[i];
        const unsigned char *src = f->buf + data_at + f->off[i][0];
        /* Writers need not align tensors; copy the odd ones so callers can
         * read them as float or int arrays. */
        if ((uintptr_t)src % ut_st_dtype_size(t->dtype)) {
            f->copies[i] = ut_aligned_alloc_check(t->nbytes);
            memcpy(f->copies[i], src, t->nbytes);
            src = f->copies[i];
        }
        t->data = src;
    }
    return f;
}

void ut_st_close(ut_st_file *f) {
    if (!f) return;
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

int ut_st_save(const char *path, int n, const char *const *names, const ut_st_tensor *tensors,
               const char *const *meta_kv, char *err, size_t errn) {
    for (int i = 0; i < n; i++) {
        const ut_st_tensor *t = &tensors[i];
        if (!names[i] || !*names[i] || !strcmp(names[i], "__metadata__")) {
            set_err(err, errn, "%s: tensor %d: bad name \"%s\"", path, i, names[i] ? names[i] : "(null)");
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j])) {
                set_err(err, errn, "%s: duplicate tensor name \"%s\"", path, names[i]);
                return -1;
            }
        if (!ut_st_dtype_name(t->dtype) || t->ndim < 0 || t->ndim > UT_ST_MAX_DIMS) {
            set_err(err, errn, "%s: tensor \"%s\": bad dtype %d or ndim %d", path, names[i],
                    (int)t->dtype, t->ndim);
            return -1;
        }
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0) {
                set_err(err, errn, "%s: tensor \"%s\": negative dimension", path, names[i]);
                return -1;
            }
        if ((size_t)ut_st_numel(t) * ut_st_dtype_size(t->dtype) != t->nbytes || (t->nbytes && !t->data)) {
            set_err(err, errn, "%s: tensor \"%s\": nbytes %zu does not match its %s shape (%lld elements)",
                    path, names[i], t->nbytes, ut_st_dtype_name(t->dtype), (long long)ut_st_numel(t));
            return -1;
        }
    }

    sbuf h = {0};
    char num[64];
    size_t at = 0;
    sb_puts(&h, "{");
    if (meta_kv && meta_kv[0]) {
        sb_puts(&h, "\"__metadata__\":{");
        for (int k = 0; meta_kv[k]; k += 2) {
            if (!meta_kv[k + 1]) {
                set_err(err, errn, "%s: metadata key \"%s\" has no value", path, meta_kv[k]);
                ut_free(h.s);
                return -1;
            }
            if (k) sb_puts(&h, ",");
            sb_json_string(&h, meta_kv[k]);
            sb_puts(&h, ":");
            sb_json_string(&h, meta_kv[k + 1]);
        }
        sb_puts(&h, "}");
        if (n) sb_puts(&h, ",");
    }
    for (int i = 0; i < n; i++) {
        const ut_st_tensor *t = &tensors[i];
        if (i) sb_puts(&h, ",");
        sb_json_string(&h, names[i]);
        sb_puts(&h, ":{\"dtype\":\"");
        sb_puts(&h, ut_st_dtype_name(t->dtype));
        sb_puts(&h, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            sb_puts(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", at, at + t->nbytes);
        sb_puts(&h, num);
        at += t->nbytes;
    }
    sb_puts(&h, "}");
    /* Pad with spaces so the data starts 8-byte aligned, as the reference
     * writer does; readers that mmap the file can then use it in place. */
    while ((8 + h.len) % 8) sb_puts(&h, " ");

    /* O_EXCL on a per-process, per-call name instead of mkstemp: the file
     * gets the usual umask-derived mode rather than mkstemp's 0600. */
    static atomic_uint tmp_counter;
    size_t plen = strlen(path);
    char *tmp = ut_malloc_check(plen + 48);
    snprintf(tmp, plen + 48, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&tmp_counter, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        set_err(err, errn, "%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
        ut_free(tmp);
        ut_free(h.s);
        return -1;
    }
    FILE *fp = fdopen(fd, "wb");
    if (!fp) {
        set_err(err, errn, "%s: fdopen: %s", path, strerror(errno));
        close(fd);
        unlink(tmp);
        ut_free(tmp);
        ut_free(h.s);
        return -1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    bool ok = write_all(fp, len8, 8) && write_all(fp, h.s, h.len);
    for (int i = 0; ok && i < n; i++)
        if (tensors[i].nbytes) ok = write_all(fp, tensors[i].data, tensors[i].nbytes);
    ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    int saved = errno;
    if (fclose(fp) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        set_err(err, errn, "%s: write failed: %s", path, strerror(saved));
        unlink(tmp);
    } else {
        sync_dir_of(path);
    }
    ut_free(tmp);
    ut_free(h.s);
    return ok ? 0 : -1;
}
