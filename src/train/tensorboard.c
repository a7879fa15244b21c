/* TensorBoard event files, written without TensorFlow or protobuf: each
 * record is TFRecord-framed
 *   uint64 length, uint32 masked_crc32c(length), data, uint32 masked_crc32c(data)
 * (little-endian) around an Event protocol buffer encoded by hand:
 *   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
 *                Summary summary = 5; SessionLog session_log = 7; }
 *   Summary    { repeated Value value = 1; }
 *   Value      { string tag = 1; float simple_value = 2; }
 *   SessionLog { SessionStatus status = 1; }   (START = 1)
 * The first record carries file_version "brain.Event:2", as TensorBoard
 * expects; every scalar is one Event with one Value. A resumed run writes a
 * SessionLog START at the first step it trains again: TensorBoard then drops
 * the scalars of that step and later that the earlier files hold (steps
 * trained after the checkpoint by a run that was lost), as it does for
 * PyTorch's SummaryWriter(purge_step=...). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "utrain/base.h"
#include "utrain/train.h"

/* ---------------------------------------------------------------- CRC-32C */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

/* Castagnoli polynomial, reflected. */
static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t ut_crc32c(const void *data, size_t n) {
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* TFRecord stores CRCs masked: a CRC of data that itself holds CRCs is weak. */
uint32_t ut_tfrecord_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---------------------------------------------------------------- protobuf */

/* An encoding buffer, kept in the writer and grown only for longer tags, so
 * logging a scalar allocates nothing once warm. */
typedef struct {
    unsigned char *p;
    size_t len, cap;
} pbuf;

static void pb_reserve(pbuf *b, size_t more) {
    if (b->len + more <= b->cap) return;
    while (b->len + more > b->cap) b->cap = b->cap ? 2 * b->cap : 256;
    b->p = ut_realloc_check(b->p, b->cap);
}

static void pb_varint(pbuf *b, uint64_t v) {
    pb_reserve(b, 10);
    do {
        b->p[b->len++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
}

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v > 0x7F) v >>= 7, n++;
    return n;
}

static void pb_fixed(pbuf *b, uint64_t v, int bytes) {
    pb_reserve(b, (size_t)bytes);
    for (int i = 0; i < bytes; i++) b->p[b->len++] = (unsigned char)(v >> (8 * i));
}

/* Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32. */
static void pb_key(pbuf *b, int field, int wire) { pb_varint(b, (uint64_t)(field << 3 | wire)); }

static void pb_double(pbuf *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    pb_key(b, field, 1);
    pb_fixed(b, u, 8);
}

static void pb_bytes(pbuf *b, int field, const void *s, size_t n) {
    pb_key(b, field, 2);
    pb_varint(b, n);
    pb_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

/* ---------------------------------------------------------------- writer */

struct ut_tb {
    FILE *fp;
    pbuf buf;
};

static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Frames buf as one TFRecord. Returns 0, or -1 with errno set. */
static int write_record(ut_tb *tb) {
    unsigned char head[12], tail[4];
    uint64_t len = tb->buf.len;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(len >> (8 * i));
    uint32_t c = ut_tfrecord_mask(ut_crc32c(head, 8));
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(c >> (8 * i));
    c = ut_tfrecord_mask(ut_crc32c(tb->buf.p, tb->buf.len));
    for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(c >> (8 * i));
    if (fwrite(head, 1, 12, tb->fp) != 12 || fwrite(tb->buf.p, 1, tb->buf.len, tb->fp) != tb->buf.len ||
        fwrite(tail, 1, 4, tb->fp) != 4)
        return -1;
    return 0;
}

/* mkdir -p: creates dir and its missing parents. */
static int make_dirs(const char *dir) {
    size_t n = strlen(dir);
    char *p = ut_malloc_check(n + 1);
    memcpy(p, dir, n + 1);
    int rc = 0;
    for (size_t i = 1; i <= n && !rc; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0777) && errno != EEXIST) rc = -1;
        p[i] = c;
    }
    ut_free(p);
    return rc;
}

/* events.out.tfevents.<seconds>.<host>; a ".<k>" suffix when a file of that
 * name exists already (two writers in one second), never overwriting it. */
static FILE *create_event_file(const char *dir, char *err, size_t n) {
    char host[256] = "localhost";
    if (gethostname(host, sizeof host)) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    size_t plen = strlen(dir) + strlen(host) + 80;
    char *path = ut_malloc_check(plen);
    long long secs = (long long)time(NULL);
    FILE *fp = NULL;
    for (int k = 0; !fp && k < 100; k++) {
        if (k) snprintf(path, plen, "%s/events.out.tfevents.%lld.%s.%d", dir, secs, host, k);
        else snprintf(path, plen, "%s/events.out.tfevents.%lld.%s", dir, secs, host);
        fp = fopen(path, "wbx");
        if (!fp && errno != EEXIST) break;
    }
    if (!fp) snprintf(err, n, "%s: cannot create: %s", path, strerror(errno));
    ut_free(path);
    return fp;
}

ut_tb *ut_tb_open(const char *dir, char *err, size_t n) {
    if (!*dir) dir = ".";
    if (make_dirs(dir)) {
        snprintf(err, n, "%s: cannot create the directory: %s", dir, strerror(errno));
        return NULL;
    }
    FILE *fp = create_event_file(dir, err, n);
    if (!fp) return NULL;
    ut_tb *tb = ut_calloc_check(1, sizeof *tb);
    tb->fp = fp;
    static const char version[] = "brain.Event:2";
    pb_double(&tb->buf, 1, wall_time());
    pb_bytes(&tb->buf, 3, version, sizeof version - 1);
    if (write_record(tb) || fflush(tb->fp)) {
        snprintf(err, n, "%s: cannot write the event file: %s", dir, strerror(errno));
        ut_tb_close(tb);
        return NULL;
    }
    return tb;
}

int ut_tb_scalar(ut_tb *tb, const char *tag, int64_t step, double value) {
    size_t tlen = strlen(tag);
    /* Value: tag (1 + len + tag), simple_value (1 + 4). */
    size_t value_len = 1 + varint_size(tlen) + tlen + 5;
    size_t summary_len = 1 + varint_size(value_len) + value_len;
    pbuf *b = &tb->buf;
    b->len = 0;
    pb_double(b, 1, wall_time());
    pb_key(b, 2, 0);
    pb_varint(b, (uint64_t)step);
    pb_key(b, 5, 2);
    pb_varint(b, summary_len);
    pb_key(b, 1, 2);
    pb_varint(b, value_len);
    pb_bytes(b, 1, tag, tlen);
    float f = (float)value;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    pb_key(b, 2, 5);
    pb_fixed(b, u, 4);
    return write_record(tb);
}

int ut_tb_restart(ut_tb *tb, int64_t step) {
    pbuf *b = &tb->buf;
    b->len = 0;
    pb_double(b, 1, wall_time());
    pb_key(b, 2, 0);
    pb_varint(b, (uint64_t)step);
    pb_key(b, 7, 2); /* session_log { status: START } */
    pb_varint(b, 2);
    pb_key(b, 1, 0);
    pb_varint(b, 1);
    return write_record(tb);
}

int ut_tb_flush(ut_tb *tb) { return fflush(tb->fp) ? -1 : 0; }

void ut_tb_close(ut_tb *tb) {
    if (!tb) return;
    fclose(tb->fp);
    ut_free(tb->buf.p);
    ut_free(tb);
}
