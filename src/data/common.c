/* Shared helpers of the data layer: error text, file reading, and
 * ut_dataset_free. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_internal.h"
#include "tok_internal.h"
#include "utrain/base.h"

char *ut__data_strdup(const char *s) {
    size_t len = strlen(s) + 1;
    char *d = ut_malloc_check(len);
    memcpy(d, s, len);
    return d;
}

unsigned char *ut__read_file(const char *path, size_t *size, char *err, size_t n) {
    int fd = ut_open_regular(path, err, n);
    if (fd < 0) return NULL;
    struct stat st;
    FILE *f = fdopen(fd, "rb");
    if (!f || fstat(fd, &st)) {
        ut_errorf(err, n, "%s: cannot read: %s", path, strerror(errno));
        if (f) fclose(f);
        else close(fd);
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    unsigned char *buf = ut_malloc_check(len + 1);
    size_t got = fread(buf, 1, len, f);
    int bad = ferror(f);
    fclose(f);
    if (got != len || bad) {
        ut_errorf(err, n, "%s: read %zu of %zu bytes: %s", path, got, len,
                     bad ? strerror(errno) : "file shrank while reading");
        ut_free(buf);
        return NULL;
    }
    buf[len] = 0;
    *size = len;
    return buf;
}

void ut_dataset_free(ut_dataset *ds) {
    if (ds && ds->free) ds->free(ds);
}

int ut_dataset_lengths(ut_dataset *ds, int32_t *out, char *err, size_t n) {
    bool s2s = ut_seq2seq_planes(ds);
    if (!s2s && !ut_tok_planes(ds))
        return ut_errorf(err, n, "%s: its examples have no lengths to group by (text read with a pretrained "
                                 "tokenizer, or sequence-to-sequence pairs, have)", ds->name);
    int64_t L = ds->x_ne[1], planes = ds->x_ne[0];
    /* the attention mask: token planes' third plane, the source's mask of a pair */
    int64_t mask_plane = s2s ? 1 : 2;
    size_t ys = ut_dtype_size(ds->y_dtype);
    for (int i = 0; i < ds->y_ndim; i++) ys *= (size_t)ds->y_ne[i];
    int32_t *x = ut_malloc_check((size_t)(planes * L) * sizeof *x);
    void *y = ut_malloc_check(ys ? ys : 1);
    int rc = 0;
    for (int64_t i = 0; i < ds->n && !rc; i++) {
        if (ds->get(ds, i, x, y, err, n)) {
            rc = -1;
            break;
        }
        out[i] = (int32_t)ut_mask_len(x + mask_plane * L, L);
    }
    ut_free(x);
    ut_free(y);
    return rc;
}

int ut__text_line_check(const char *path, int64_t lineno, const char *p, size_t start, size_t end, char *err,
                        size_t n) {
    const char *nul = memchr(p + start, 0, end - start);
    if (nul)
        return ut_errorf(err, n, "%s:%lld: NUL byte at byte %td of the line (expected a text file)", path,
                         (long long)lineno, nul - (p + start));
    int64_t bad = ut__utf8_check(p + start, end - start);
    if (bad >= 0)
        return ut_errorf(err, n, "%s:%lld: byte %lld of the line: not valid UTF-8", path, (long long)lineno,
                         (long long)bad);
    return 0;
}

bool ut__ends_with_ci(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcasecmp(s + a - b, suffix);
}

const char *ut__json_kind(const cJSON *j) {
    return cJSON_IsNull(j) ? "null" : cJSON_IsBool(j) ? "a boolean" : cJSON_IsNumber(j) ? "a number"
         : cJSON_IsString(j) ? "a string" : cJSON_IsArray(j) ? "a list" : "an object";
}

int ut__special_frame(ut_tokenizer *t, const char *path, ut_tok_encoding *with, int64_t *npre, int64_t *nsuf,
                      char *err, size_t n) {
    ut_tok_encoding full = {0}, bare = {0}, *f = with ? with : &full;
    ut_tok_opts plain = {.no_special = true};
    char why[256];
    int rc = ut_tokenizer_encode(t, "a", NULL, NULL, f, why, sizeof why) ||
             ut_tokenizer_encode(t, "a", NULL, &plain, &bare, why, sizeof why);
    if (rc) rc = ut_errorf(err, n, "%s: the tokenizer encodes no sample text: %s", path, why);
    int64_t at = -1;
    for (int64_t k = 0; !rc && bare.len > 0 && at < 0 && k + bare.len <= f->len; k++)
        if (!memcmp(f->ids + k, bare.ids, (size_t)bare.len * sizeof *bare.ids)) at = k;
    if (!rc && at < 0)
        rc = ut_errorf(err, n, "%s: the tokenizer's special tokens do not surround a text's ids (a sample encoded "
                               "with them does not hold its ids without them)", path);
    *npre = rc ? 0 : at;
    *nsuf = rc ? 0 : f->len - at - bare.len;
    ut_tok_encoding_free(&full);
    ut_tok_encoding_free(&bare);
    return rc;
}
