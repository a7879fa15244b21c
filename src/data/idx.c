/* MNIST-format IDX datasets (images idx3 + labels idx1), plain or gzip.
 * Both files are loaded whole at open and checked completely (magic, sizes,
 * counts, every label), so get cannot fail on the data. Gzip is detected by
 * its magic bytes, not by the file name; offsets in messages are positions
 * in the uncompressed stream. */
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "data_internal.h"
#include "utrain/base.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_NUM_CLASSES 10

typedef struct {
    unsigned char *images, *labels;  /* whole decoded files */
    int64_t lo, h, w;
    float lut[256];                  /* pixel value -> normalised input */
    char *name;
} idx_impl;

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The bytes an IDX file of ndim dims must hold, from its header (the first
 * 4 + 4 ndim bytes of b): header plus the product of the dims; SIZE_MAX when
 * that overflows. */
static size_t idx_bytes(const unsigned char *b, int ndim) {
    size_t hdr = 4 + 4 * (size_t)ndim, need = 1;
    for (int d = 0; d < ndim; d++) {
        size_t dim = be32(b + 4 + 4 * d);
        if (dim && need > (SIZE_MAX - hdr) / dim) return SIZE_MAX;
        need *= dim;
    }
    return hdr + need;
}

/* Inflates a gzip buffer (possibly several concatenated members) into a new
 * buffer, the IDX header first: once its 4 + 4 ndim bytes are out, no more
 * than the size the header implies plus one byte (which check_idx then
 * reports as trailing data) is inflated, so a small file whose stream would
 * inflate to gigabytes costs what its header says, not what the stream holds. */
static unsigned char *gunzip(const char *path, const unsigned char *in, size_t in_len, int ndim,
                             size_t *out_len, char *err, size_t n) {
    size_t hdr = 4 + 4 * (size_t)ndim, limit = SIZE_MAX;
    size_t cap = in_len * 4 + 1024, len = 0;
    unsigned char *out = ut_malloc_check(cap);
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
        ut_free(out);
        ut_errorf(err, n, "%s: zlib init failed", path);
        return NULL;
    }
    z.next_in = (unsigned char *)in;
    z.avail_in = (uInt)in_len;  /* IDX files are far below 4 GiB */
    int rc = Z_OK;
    while ((rc != Z_STREAM_END || z.avail_in > 0) && len < limit) {
        if (rc == Z_STREAM_END) inflateReset(&z);
        if (len == cap) {
            cap = cap > limit / 2 ? limit : cap * 2;
            out = ut_realloc_check(out, cap);
        }
        size_t room = (limit < cap ? limit : cap) - len;
        z.next_out = out + len;
        z.avail_out = (uInt)(room < UINT32_MAX ? room : UINT32_MAX);
        uInt before = z.avail_out;
        rc = inflate(&z, Z_NO_FLUSH);
        len += before - z.avail_out;
        if (limit == SIZE_MAX && len >= hdr) {
            size_t want = idx_bytes(out, ndim);
            /* a wrong magic stops at the header: check_idx names it */
            limit = be32(out) != (ndim == 3 ? IDX_MAGIC_IMAGES : IDX_MAGIC_LABELS) ? len
                    : want == SIZE_MAX                                             ? SIZE_MAX
                                                                                   : want + 1;
        }
        if (rc == Z_STREAM_END) continue;
        if (rc != Z_OK && !(rc == Z_BUF_ERROR && z.avail_out == 0)) {
            ut_errorf(err, n, "%s: corrupt or truncated gzip data at compressed byte %zu: %s",
                         path, in_len - z.avail_in, z.msg ? z.msg : "unexpected end of input");
            inflateEnd(&z);
            ut_free(out);
            return NULL;
        }
    }
    inflateEnd(&z);
    *out_len = len;
    return out;
}

/* Reads path whole, inflating it (ndim: the IDX file's dims, for its
 * header) when it starts with the gzip magic. */
static unsigned char *load(const char *path, int ndim, size_t *len, char *err, size_t n) {
    size_t raw_len;
    unsigned char *raw = ut__read_file(path, &raw_len, err, n);
    if (!raw || raw_len < 2 || raw[0] != 0x1f || raw[1] != 0x8b) {
        *len = raw_len;
        return raw;
    }
    unsigned char *out = gunzip(path, raw, raw_len, ndim, len, err, n);
    ut_free(raw);
    return out;
}

/* Checks an IDX header: magic, then ndim big-endian dims whose product must
 * match the file size exactly. Fills dims. */
static int check_idx(const char *path, const unsigned char *b, size_t len, uint32_t magic,
                     int ndim, int64_t *dims, char *err, size_t n) {
    size_t hdr = 4 + 4 * (size_t)ndim;
    if (len == 0) return ut_errorf(err, n, "%s: empty file", path);
    if (len < hdr)
        return ut_errorf(err, n, "%s: truncated at byte offset %zu: the IDX header needs %zu bytes",
                            path, len, hdr);
    if (be32(b) != magic)
        return ut_errorf(err, n, "%s: byte offset 0: bad magic 0x%08x (expected 0x%08x for IDX %s)",
                            path, be32(b), magic, ndim == 3 ? "images" : "labels");
    int64_t need = 1;
    for (int d = 0; d < ndim; d++) {
        dims[d] = be32(b + 4 + 4 * d);
        need = (dims[d] && need > INT64_MAX / dims[d]) ? INT64_MAX : need * dims[d];
    }
    if (dims[0] == 0) return ut_errorf(err, n, "%s: byte offset 4: empty file (0 items)", path);
    for (int d = 1; d < ndim; d++)
        if (dims[d] == 0)
            return ut_errorf(err, n, "%s: byte offset %d: the images have %s 0 (each needs at least one row and column)",
                             path, 4 + 4 * d, d == 1 ? "height" : "width");
    if ((int64_t)(len - hdr) < need)
        return ut_errorf(err, n, "%s: truncated at byte offset %zu: the header's dims need %lld bytes "
                            "after the %zu-byte header", path, len, (long long)need, hdr);
    if ((int64_t)(len - hdr) > need)
        return ut_errorf(err, n, "%s: byte offset %lld: %lld unexpected trailing bytes after the data",
                            path, (long long)(hdr + need), (long long)(len - hdr - need));
    return 0;
}

static int check_labels(const char *path, const unsigned char *b, int64_t count, char *err,
                        size_t n) {
    for (int64_t i = 0; i < count; i++)
        if (b[8 + i] >= IDX_NUM_CLASSES)
            return ut_errorf(err, n, "%s: byte offset %lld: label %d >= %d classes", path,
                                (long long)(8 + i), b[8 + i], IDX_NUM_CLASSES);
    return 0;
}

static int idx_get(ut_dataset *ds, int64_t i, void *x, void *y, char *err, size_t n) {
    idx_impl *m = ds->impl;
    if (i < 0 || i >= ds->n)
        return ut_errorf(err, n, "%s: example %lld out of range [0, %lld)", m->name,
                            (long long)i, (long long)ds->n);
    int64_t k = m->lo + i, px = m->h * m->w;
    const unsigned char *p = m->images + 16 + k * px;
    float *out = x;
    for (int64_t j = 0; j < px; j++) out[j] = m->lut[p[j]];
    *(int32_t *)y = m->labels[8 + k];
    return 0;
}

static void idx_free(ut_dataset *ds) {
    idx_impl *m = ds->impl;
    ut_free(m->images);
    ut_free(m->labels);
    ut_free(m->name);
    ut_free(m);
    ut_free(ds);
}

/* Validates both files and the range; on success m owns the buffers. */
static int idx_load(idx_impl *m, const char *images, const char *labels, int64_t *lo,
                    int64_t *hi, char *err, size_t n) {
    size_t il, ll;
    int64_t idims[3] = {0}, ldims[1] = {0};
    if (!(m->images = load(images, 3, &il, err, n))) return -1;
    if (check_idx(images, m->images, il, IDX_MAGIC_IMAGES, 3, idims, err, n)) return -1;
    if (!(m->labels = load(labels, 1, &ll, err, n))) return -1;
    if (check_idx(labels, m->labels, ll, IDX_MAGIC_LABELS, 1, ldims, err, n)) return -1;
    if (idims[0] != ldims[0])
        return ut_errorf(err, n, "%s: byte offset 4: %lld labels, but %s has %lld images",
                            labels, (long long)ldims[0], images, (long long)idims[0]);
    if (check_labels(labels, m->labels, ldims[0], err, n)) return -1;
    if (*hi < 0) *hi = idims[0];
    if (*lo < 0 || *lo >= *hi || *hi > idims[0])
        return ut_errorf(err, n, "%s: range [%lld, %lld) is empty or outside the file's %lld images",
                            images, (long long)*lo, (long long)*hi, (long long)idims[0]);
    m->h = idims[1];
    m->w = idims[2];
    return 0;
}

ut_dataset *ut_idx_dataset_open(const char *images, const char *labels, double mean, double std,
                                int64_t lo, int64_t hi, char *err, size_t n) {
    if (!(std > 0)) {
        ut_errorf(err, n, "%s: std must be > 0 (got %g)", images, std);
        return NULL;
    }
    idx_impl *m = ut_calloc_check(1, sizeof *m);
    if (idx_load(m, images, labels, &lo, &hi, err, n)) {
        ut_free(m->images);
        ut_free(m->labels);
        ut_free(m);
        return NULL;
    }
    m->lo = lo;
    m->name = ut__data_strdup(images);
    for (int p = 0; p < 256; p++) m->lut[p] = (float)((p / 255.0 - mean) / std);
    ut_dataset *ds = ut_calloc_check(1, sizeof *ds);
    *ds = (ut_dataset){.name = m->name, .n = hi - lo, .x_ndim = 3, .x_ne = {1, m->h, m->w},
                       .y_ndim = 0, .x_dtype = UT_F32, .y_dtype = UT_I32,
                       .num_classes = IDX_NUM_CLASSES, .get = idx_get, .free = idx_free,
                       .impl = m};
    return ds;
}
