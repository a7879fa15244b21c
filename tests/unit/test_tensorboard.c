/* TensorBoard event files, checked by a reader written here from the format
 * descriptions alone (bitwise CRC-32C, its own protobuf decoding): framing
 * CRCs, the file_version record, and every scalar's step, tag and value.
 * Also CRC-32C known answers, and tests/tools/read_tfevents.py (and
 * TensorBoard itself, when Python has it) reading the same file. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "utrain/train.h"

static char dir[64];

/* ---------------------------------------------------------------- reader */

static uint32_t bitwise_crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t masked(const unsigned char *p, size_t n) {
    uint32_t c = bitwise_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* A protobuf cursor. Fields are read with next_field; bad input sets bad. */
typedef struct {
    const unsigned char *p;
    size_t len, pos;
    bool bad;
} pb;

static uint64_t rd_varint(pb *r) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->pos >= r->len) break;
        unsigned char b = r->p[r->pos++];
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return v;
    }
    r->bad = true;
    return 0;
}

typedef struct {
    int field, wire;
    uint64_t u;                 /* varint, fixed64, fixed32 */
    const unsigned char *s;     /* length-delimited */
    size_t n;
} pb_field;

static bool next_field(pb *r, pb_field *f) {
    if (r->bad || r->pos >= r->len) return false;
    *f = (pb_field){0};
    uint64_t key = rd_varint(r);
    f->field = (int)(key >> 3);
    f->wire = (int)(key & 7);
    size_t need = f->wire == 1 ? 8 : f->wire == 5 ? 4 : 0;
    if (f->wire == 0) f->u = rd_varint(r);
    else if (f->wire == 2) f->n = need = (size_t)rd_varint(r);
    else if (!need) r->bad = true;
    if (r->bad || r->len - r->pos < need) return !(r->bad = true);
    if (f->wire == 1 || f->wire == 5) f->u = le(r->p + r->pos, (int)need);
    f->s = r->p + r->pos;
    r->pos += need;
    return true;
}

typedef struct {
    double wall_time;
    int64_t step;
    char file_version[32];
    char tag[512];
    float value;
    int nvalues;
    int session_status; /* SessionLog status, 0 if none */
} event;

static bool decode_value(const unsigned char *p, size_t n, event *e) {
    pb r = {p, n, 0, false};
    pb_field f;
    bool tag = false, val = false;
    while (next_field(&r, &f)) {
        if (f.field == 1 && f.wire == 2 && f.n < sizeof e->tag) {
            memcpy(e->tag, f.s, f.n);
            e->tag[f.n] = 0;
            tag = true;
        } else if (f.field == 2 && f.wire == 5) {
            uint32_t u = (uint32_t)f.u;
            memcpy(&e->value, &u, 4);
            val = true;
        }
    }
    return !r.bad && tag && val;
}

static bool decode_event(const unsigned char *p, size_t n, event *e) {
    memset(e, 0, sizeof *e);
    pb r = {p, n, 0, false};
    pb_field f;
    while (next_field(&r, &f)) {
        if (f.field == 1 && f.wire == 1) memcpy(&e->wall_time, &f.u, 8);
        else if (f.field == 2 && f.wire == 0) e->step = (int64_t)f.u;
        else if (f.field == 3 && f.wire == 2 && f.n < sizeof e->file_version) memcpy(e->file_version, f.s, f.n);
        else if (f.field == 7 && f.wire == 2) {
            pb s = {f.s, f.n, 0, false};
            pb_field v;
            while (next_field(&s, &v))
                if (v.field == 1 && v.wire == 0) e->session_status = (int)v.u;
                else return false;
            if (s.bad || !e->session_status) return false;
        }
        else if (f.field == 5 && f.wire == 2) {
            pb s = {f.s, f.n, 0, false};
            pb_field v;
            while (next_field(&s, &v))
                if (v.field == 1 && v.wire == 2 && decode_value(v.s, v.n, e)) e->nvalues++;
                else return false;
            if (s.bad) return false;
        } else return false;
    }
    return !r.bad;
}

/* Reads every record of path into events (up to max); -1 on bad framing. */
static int read_events(const char *path, event *events, int max) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    static unsigned char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    size_t pos = 0;
    int n = 0;
    while (pos < len && n < max) {
        CHECK(len - pos >= 16, "record %d: truncated header", n);
        if (len - pos < 16) return -1;
        uint64_t dlen = le(buf + pos, 8);
        CHECK(le(buf + pos + 8, 4) == masked(buf + pos, 8), "record %d: length CRC", n);
        CHECK(dlen <= len - pos - 16, "record %d: length %llu past the end", n, (unsigned long long)dlen);
        if (dlen > len - pos - 16) return -1;
        const unsigned char *data = buf + pos + 12;
        CHECK(le(data + dlen, 4) == masked(data, dlen), "record %d: data CRC", n);
        CHECK(decode_event(data, dlen, &events[n]), "record %d: bad Event proto", n);
        pos += 16 + dlen;
        n++;
    }
    CHECK(pos == len, "trailing bytes after record %d", n);
    return n;
}

/* ---------------------------------------------------------------- tests */

static void test_crc32c(void) {
    CHECK(ut_crc32c("123456789", 9) == 0xE3069283u, "0x%08x", ut_crc32c("123456789", 9));
    unsigned char z[32] = {0}, ff[32], inc[32];
    memset(ff, 0xFF, sizeof ff);
    for (int i = 0; i < 32; i++) inc[i] = (unsigned char)i;
    /* RFC 3720 (iSCSI) B.4 vectors */
    CHECK(ut_crc32c(z, 32) == 0x8A9136AAu, "zeros: 0x%08x", ut_crc32c(z, 32));
    CHECK(ut_crc32c(ff, 32) == 0x62A8AB43u, "ones: 0x%08x", ut_crc32c(ff, 32));
    CHECK(ut_crc32c(inc, 32) == 0x46DD794Eu, "incrementing: 0x%08x", ut_crc32c(inc, 32));
    CHECK(ut_crc32c("", 0) == 0, "empty");
    CHECK(bitwise_crc32c((const unsigned char *)"123456789", 9) == 0xE3069283u, "test's own CRC");
    CHECK(ut_tfrecord_mask(0) == 0xa282ead8u, "mask(0)");
    CHECK(ut_tfrecord_mask(0x12345678u) == ((0x12345678u >> 15 | 0x12345678u << 17) + 0xa282ead8u), "mask");
}

static const struct {
    const char *tag;
    int64_t step;
    double value;
} scalars[] = {
    {"train/loss", 0, 2.5},
    {"train/lr", 1, 1e-3},
    {"dev/accuracy", 100, 0.875},
    {"dev/loss", 1LL << 40, -3.0e38},
    {"negative/step", -1, 1e-45},
    {"train/loss", 200, 0.0},
    {NULL, 300, 123.456},   /* a 300-character tag: two-byte length varints */
};
#define NSCALARS ((int)(sizeof scalars / sizeof *scalars))

static char long_tag[301];

static const char *tag_of(int i) { return scalars[i].tag ? scalars[i].tag : long_tag; }

static int cmp_path(const void *a, const void *b) { return strcmp(a, b); }

/* The event files in d, in name order (up to max paths of 256 bytes). */
static int find_event_files(const char *d, char paths[][256], int max) {
    DIR *dp = opendir(d);
    struct dirent *e;
    int n = 0;
    while (dp && (e = readdir(dp)) && n < max)
        if (!strncmp(e->d_name, "events.out.tfevents.", 20)) snprintf(paths[n++], 256, "%s/%s", d, e->d_name);
    if (dp) closedir(dp);
    qsort(paths, (size_t)n, sizeof *paths, cmp_path);
    return n;
}

static char tb_dir[128];

static void test_event_file(void) {
    memset(long_tag, 'x', 300);
    snprintf(tb_dir, sizeof tb_dir, "%s/runs/a/tensorboard", dir);   /* parents made too */
    char err[512] = "";
    time_t t0 = time(NULL);
    ut_tb *tb = ut_tb_open(tb_dir, err, sizeof err);
    CHECK(tb, "%s", err);
    if (!tb) return;
    for (int i = 0; i < NSCALARS; i++)
        CHECK(ut_tb_scalar(tb, tag_of(i), scalars[i].step, scalars[i].value) == 0, "scalar %d", i);
    CHECK(ut_tb_flush(tb) == 0, "flush");
    ut_tb_close(tb);

    char paths[4][256];
    CHECK(find_event_files(tb_dir, paths, 4) == 1, "expected one event file");
    char host[256] = "";
    gethostname(host, sizeof host);
    char want[256];
    snprintf(want, sizeof want, ".%s", host);
    CHECK(strstr(paths[0], want), "%s: no host name", paths[0]);

    static event ev[16];
    int n = read_events(paths[0], ev, 16);
    CHECK(n == NSCALARS + 1, "%d records", n);
    if (n != NSCALARS + 1) return;
    CHECK(!strcmp(ev[0].file_version, "brain.Event:2"), "file_version \"%s\"", ev[0].file_version);
    CHECK(ev[0].nvalues == 0, "first event has values");
    for (int i = 0; i <= NSCALARS; i++)
        CHECK(ev[i].wall_time >= (double)t0 - 1 && ev[i].wall_time <= (double)time(NULL) + 1,
              "event %d: wall_time %f", i, ev[i].wall_time);
    for (int i = 0; i < NSCALARS; i++) {
        const event *e = &ev[i + 1];
        CHECK(e->nvalues == 1, "event %d: %d values", i, e->nvalues);
        CHECK(e->step == scalars[i].step, "event %d: step %lld", i, (long long)e->step);
        CHECK(!strcmp(e->tag, tag_of(i)), "event %d: tag \"%s\"", i, e->tag);
        float want_v = (float)scalars[i].value;
        CHECK(!memcmp(&e->value, &want_v, 4), "event %d: value %.9g, wrote %.9g", i, e->value, want_v);
    }
}

/* A second writer in the same directory never overwrites the first file. */
static void test_second_writer(void) {
    char err[512] = "";
    ut_tb *a = ut_tb_open(tb_dir, err, sizeof err), *b = ut_tb_open(tb_dir, err, sizeof err);
    CHECK(a && b, "%s", err);
    if (a) CHECK(ut_tb_scalar(a, "x", 1, 1.0) == 0 && ut_tb_flush(a) == 0, "write a");
    if (b) CHECK(ut_tb_scalar(b, "x", 2, 2.0) == 0 && ut_tb_flush(b) == 0, "write b");
    ut_tb_close(a);
    ut_tb_close(b);
    char paths[8][256];
    int n = find_event_files(tb_dir, paths, 8);
    CHECK(n == 3, "%d event files", n);
    for (int i = 0; i < n; i++) unlink(paths[i]);
    ut_tb_close(NULL);

    char bad[128];
    snprintf(bad, sizeof bad, "%s/file", dir);
    FILE *fp = fopen(bad, "w");
    if (fp) fclose(fp);
    snprintf(bad, sizeof bad, "%s/file/sub", dir);
    CHECK(ut_tb_open(bad, err, sizeof err) == NULL, "opened under a regular file");
    CHECK(strstr(err, bad), "message does not name the directory: %s", err);
    snprintf(bad, sizeof bad, "%s/file", dir);
    unlink(bad);
}

/* The stdlib reader and, when installed, TensorBoard read the same values. */
static void test_python_readers(void) {
    const char *tool = "tests/tools/read_tfevents.py";
    if (access(tool, R_OK) || system("python3 -c '' 2>/dev/null")) {
        printf("skip read_tfevents.py: run from the repository root with python3\n");
        return;
    }
    char err[512] = "";
    ut_tb *tb = ut_tb_open(tb_dir, err, sizeof err);
    CHECK(tb, "%s", err);
    if (!tb) return;
    for (int i = 0; i < NSCALARS; i++) ut_tb_scalar(tb, tag_of(i), scalars[i].step, scalars[i].value);
    CHECK(ut_tb_flush(tb) == 0, "flush");
    ut_tb_close(tb);

    const char *readers[] = {
        "python3 tests/tools/read_tfevents.py %s",
        "python3 -c 'import sys\n"
        "from tensorboard.backend.event_processing.event_file_loader import EventFileLoader\n"
        "for e in EventFileLoader(sys.argv[1]).Load():\n"
        "  for v in e.summary.value:\n"
        "    print(e.step, v.tag, repr(v.tensor.float_val[0] if v.HasField(\"tensor\") else v.simple_value), sep=\"\\t\")' %s/*",
    };
    bool have_tb = system("python3 -c 'import tensorboard' 2>/dev/null") == 0;
    if (!have_tb) printf("skip TensorBoard cross-check: python3 cannot import tensorboard\n");
    for (int r = 0; r < (have_tb ? 2 : 1); r++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, readers[r], tb_dir);
        FILE *p = popen(cmd, "r");
        CHECK(p, "popen");
        if (!p) continue;
        char line[512];
        int i = 0;
        while (fgets(line, sizeof line, p)) {
            long long step;
            char tag[400];
            double v;
            if (sscanf(line, "%lld\t%399s\t%lf", &step, tag, &v) != 3 || i >= NSCALARS) {
                CHECK(0, "reader %d: unexpected line %s", r, line);
                continue;
            }
            CHECK(step == scalars[i].step && !strcmp(tag, tag_of(i)) &&
                      (float)v == (float)scalars[i].value,
                  "reader %d: line %d: %s", r, i, line);
            i++;
        }
        CHECK(pclose(p) == 0, "reader %d failed", r);
        CHECK(i == NSCALARS, "reader %d: %d scalars", r, i);
    }
}

/* A resumed run's file starts with a SessionLog START at the first step it
 * trains again: readers (ours, and TensorBoard when installed) drop the
 * earlier file's scalars of that step and later, so every step shows once,
 * with the resumed run's value. */
static void test_restart_drops_lost_steps(void) {
    char err[512] = "", rdir[160];
    snprintf(rdir, sizeof rdir, "%s/restart", dir);
    ut_tb *a = ut_tb_open(rdir, err, sizeof err);
    CHECK(a, "%s", err);
    if (!a) return;
    for (int s = 1; s <= 6; s++) ut_tb_scalar(a, "train/loss", s, 10.0 + s); /* 4-6 lost */
    CHECK(ut_tb_flush(a) == 0, "flush");
    ut_tb_close(a);
    sleep(1); /* the file names order the files by their second */
    ut_tb *b = ut_tb_open(rdir, err, sizeof err);
    CHECK(b, "%s", err);
    if (!b) return;
    CHECK(ut_tb_restart(b, 4) == 0, "restart");
    for (int s = 4; s <= 7; s++) ut_tb_scalar(b, "train/loss", s, 20.0 + s);
    CHECK(ut_tb_flush(b) == 0, "flush");
    ut_tb_close(b);
    char paths[4][256];
    CHECK(find_event_files(rdir, paths, 4) == 2, "expected two event files");
    static event ev[16];
    int n = read_events(paths[1], ev, 16);
    CHECK(n == 6 && ev[1].session_status == 1 && ev[1].step == 4 && ev[1].nvalues == 0,
          "%d records; record 1: status %d step %lld", n, ev[1].session_status, (long long)ev[1].step);
    const char *readers[] = {
        "python3 tests/tools/read_tfevents.py %s",
        "python3 -c 'import sys\n"
        "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
        "a = EventAccumulator(sys.argv[1]); a.Reload()\n"
        "for e in a.Scalars(\"train/loss\"): print(e.step, \"train/loss\", e.value, sep=\"\\t\")' %s",
    };
    if (access("tests/tools/read_tfevents.py", R_OK) || system("python3 -c '' 2>/dev/null")) {
        printf("skip the readers: run from the repository root with python3\n");
        return;
    }
    bool have_tb = system("python3 -c 'import tensorboard' 2>/dev/null") == 0;
    for (int r = 0; r < (have_tb ? 2 : 1); r++) {
        char cmd[1024], line[256], got[512] = "";
        snprintf(cmd, sizeof cmd, readers[r], rdir);
        FILE *p = popen(cmd, "r");
        if (!p) continue;
        while (fgets(line, sizeof line, p)) {
            long long step;
            double v;
            if (sscanf(line, "%lld\ttrain/loss\t%lf", &step, &v) == 2)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%lld:%g ", step, v);
        }
        CHECK(pclose(p) == 0, "reader %d failed", r);
        CHECK(!strcmp(got, "1:11 2:12 3:13 4:24 5:25 6:26 7:27 "), "reader %d read %s", r, got);
    }
    for (int i = 0; i < 2; i++) unlink(paths[i]);
    rmdir(rdir);
}

static void remove_tree(void) {
    char paths[8][256];
    int n = find_event_files(tb_dir, paths, 8);
    for (int i = 0; i < n; i++) unlink(paths[i]);
    char p[256];
    const char *parts[] = {"runs/a/tensorboard", "runs/a", "runs", ""};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, parts[i]);
        rmdir(p);
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ut_tb_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_crc32c);
    RUN(test_event_file);
    RUN(test_restart_drops_lost_steps);
    RUN(test_second_writer);
    RUN(test_python_readers);
    remove_tree();
    return TEST_SUMMARY();
}
