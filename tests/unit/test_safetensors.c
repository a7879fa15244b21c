/* safetensors reader and writer: round trip, every kind of malformed file
 * rejected with a message naming the file, and a file written by Python
 * (the parity fixtures) read back. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc.h"
#include "test.h"
#include "utrain/io.h"

static char dir[64];

static const char *tmp_path(const char *name) { return tp_path(dir, name); }

/* A file with this exact header text and data after the length field. */
static void write_raw(const char *path, uint64_t hlen, const char *header, const void *data,
                      size_t ndata) {
    FILE *fp = fopen(path, "wb");
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hlen >> (8 * i));
    fwrite(len8, 1, 8, fp);
    fwrite(header, 1, strlen(header), fp);
    if (ndata) fwrite(data, 1, ndata, fp);
    fclose(fp);
}

static void write_header(const char *path, const char *header, size_t ndata) {
    static const unsigned char zeros[256];
    write_raw(path, strlen(header), header, zeros, ndata);
}

static void test_round_trip(void) {
    float a[6] = {1.5f, -2, 3.25f, 0, -0.0f, 1e-30f};
    int32_t b[4] = {7, -1, INT32_MAX, INT32_MIN};
    uint16_t h[3] = {0x3c00, 0xbc00, 0x7bff};
    int64_t l[2] = {INT64_MAX, -5};
    float s = 42;
    const char *names[] = {"layer.0.weight", "ids", "half", "bf", "big", "scalar", "empty", "we\"ird\\name"};
    ut_st_tensor t[] = {
        {UT_ST_F32, 2, {2, 3}, a, sizeof a},
        {UT_ST_I32, 1, {4}, b, sizeof b},
        {UT_ST_F16, 2, {1, 3}, h, sizeof h},
        {UT_ST_BF16, 1, {3}, h, sizeof h},
        {UT_ST_I64, 1, {2}, l, sizeof l},
        {UT_ST_F32, 0, {0}, &s, sizeof s},
        {UT_ST_F32, 2, {0, 3}, NULL, 0},
        {UT_ST_I32, 1, {1}, b, 4},
    };
    const int n = (int)(sizeof t / sizeof *t);
    const char *meta[] = {"seed", "1234", "note", "quote \" backslash \\ newline \n tab \t \xc3\xa9", NULL};
    const char *path = tmp_path("rt.safetensors");
    char err[512] = "";
    CHECK(ut_st_save(path, n, names, t, meta, err, sizeof err) == 0, "%s", err);
    /* Saving again replaces the file in place. */
    CHECK(ut_st_save(path, n, names, t, meta, err, sizeof err) == 0, "%s", err);

    ut_st_file *f = ut_st_open(path, err, sizeof err);
    CHECK(f, "%s", err);
    if (!f) return;
    CHECK(ut_st_count(f) == n, "count %d", ut_st_count(f));
    for (int i = 0; i < n && i < ut_st_count(f); i++) {
        CHECK(!strcmp(ut_st_name(f, i), names[i]), "name %d: %s", i, ut_st_name(f, i));
        const ut_st_tensor *r = ut_st_get(f, names[i]);
        CHECK(r && r->dtype == t[i].dtype && r->ndim == t[i].ndim && r->nbytes == t[i].nbytes,
              "%s: header differs", names[i]);
        if (!r) continue;
        for (int d = 0; d < r->ndim; d++) CHECK(r->shape[d] == t[i].shape[d], "%s: dim %d", names[i], d);
        CHECK(!t[i].nbytes || !memcmp(r->data, t[i].data, t[i].nbytes), "%s: data differs", names[i]);
        CHECK((uintptr_t)r->data % ut_st_dtype_size(r->dtype) == 0, "%s: misaligned", names[i]);
    }
    CHECK(ut_st_numel(ut_st_get(f, "scalar")) == 1, "scalar numel");
    CHECK(ut_st_get(f, "nope") == NULL, "absent tensor found");
    CHECK(ut_st_name(f, n) == NULL, "name past the end");
    CHECK(ut_st_meta(f, "seed") && !strcmp(ut_st_meta(f, "seed"), "1234"), "seed metadata");
    CHECK(ut_st_meta(f, "note") && !strcmp(ut_st_meta(f, "note"), meta[3]), "escaped metadata: %s",
          ut_st_meta(f, "note"));
    CHECK(ut_st_meta(f, "absent") == NULL, "absent metadata found");
    ut_st_close(f);

    /* no temporary files left behind */
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        CHECK(!strstr(e->d_name, ".tmp"), "temporary file %s left behind", e->d_name);
    if (d) closedir(d);

    /* No tensors and no metadata is a valid file too. */
    CHECK(ut_st_save(path, 0, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    f = ut_st_open(path, err, sizeof err);
    CHECK(f && ut_st_count(f) == 0, "empty file: %s", err);
    ut_st_close(f);
}

/* Opening must fail with a message that names the file and contains want. */
static void expect_reject(const char *path, const char *want, const char *what) {
    char err[512] = "";
    ut_st_file *f = ut_st_open(path, err, sizeof err);
    CHECK(f == NULL, "%s: accepted", what);
    ut_st_close(f);
    CHECK(strstr(err, path), "%s: message does not name the file: %s", what, err);
    CHECK(strstr(err, want), "%s: message lacks \"%s\": %s", what, want, err);
}

static void test_rejects_bad_files(void) {
    const char *p = tmp_path("bad.safetensors");
    char full[200];
    /* A valid file to cut short. */
    float v[4] = {1, 2, 3, 4};
    const char *nm[] = {"w"};
    ut_st_tensor t = {UT_ST_F32, 1, {4}, v, sizeof v};
    char err[256];
    CHECK(ut_st_save(p, 1, nm, &t, NULL, err, sizeof err) == 0, "%s", err);
    FILE *fp = fopen(p, "rb");
    char buf[256];
    size_t len = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    fp = fopen(p, "wb");
    fwrite(buf, 1, len - 3, fp);
    fclose(fp);
    expect_reject(p, "\"w\"", "truncated data");
    fp = fopen(p, "wb");
    fwrite(buf, 1, 5, fp);
    fclose(fp);
    expect_reject(p, "too short", "shorter than the length field");

    write_raw(p, 1000, "{}", NULL, 0);
    expect_reject(p, "header length 1000", "header length past the end");
    write_raw(p, UINT64_MAX, "{}", NULL, 0);
    expect_reject(p, "header length", "huge header length");
    write_header(p, "[]", 0);
    expect_reject(p, "byte 8", "not an object");

    static const struct { const char *header; const char *want; } bad[] = {
        {"{\"a\" {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "byte 13"},  /* no ':' */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", "byte"},    /* trailing ',' */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", "end of header"},
        {"{\"a:{}}", "unterminated string"},
        {"{\"a\\q\":{}}", "bad escape"},
        {"{\"a\\ud800\":{}}", "surrogate"},
        {"{\"a\\u0000\":{}}", "\\u0000"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", "leading zero"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "non-negative"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", "fraction"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", "too large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", "unknown key \"x\""},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "duplicate key"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "missing \"shape\""},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "unsupported dtype \"U8\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", "more than 2"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", "needs 2"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2,3,4,5,6,7,8,9],\"data_offsets\":[0,4]}}", "more than 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", "duplicate tensor \"a\""},
        {"{\"__metadata__\":{\"k\":1}}", "not a string"},
        {"{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", "duplicate metadata key"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", "duplicate __metadata__"},
        {"{} x", "after the header"},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "empty tensor name"},
        {"{\"a\":\"F32\"}", "expected '{'"},
        /* consistency with the data (16 bytes of it, see below) */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", "tensor \"a\": F32 shape needs 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "tensor \"a\": data_offsets [12, 20]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", "end before begin"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,4]}}", "overflows"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_header(p, bad[i].header, 16);
        snprintf(full, sizeof full, "case %zu (%s)", i, bad[i].header);
        expect_reject(p, bad[i].want, full);
    }

    /* And the positive controls of the same shape parse. */
    write_header(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                    "\"__metadata__\":{}}   ", 16);
    ut_st_file *f = ut_st_open(p, err, sizeof err);
    CHECK(f && ut_st_count(f) == 2, "control: %s", err);
    ut_st_close(f);

    expect_reject(tmp_path("missing.safetensors"), "cannot open", "missing file");
}

/* Writers may place tensors at any byte offset; reads stay aligned. */
static void test_unaligned_tensor(void) {
    const char *p = tmp_path("unaligned.safetensors");
    unsigned char data[6] = {0x00, 0x3c};
    float x = 3.5f;
    memcpy(data + 2, &x, 4);
    const char *hdr = "{\"h\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]},"
                      "\"x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[2,6]}}";
    write_raw(p, strlen(hdr), hdr, data, sizeof data);
    char err[256] = "";
    ut_st_file *f = ut_st_open(p, err, sizeof err);
    CHECK(f, "%s", err);
    if (!f) return;
    const ut_st_tensor *t = ut_st_get(f, "x");
    CHECK(t && (uintptr_t)t->data % 4 == 0 && *(const float *)t->data == 3.5f, "unaligned F32 read wrong");
    ut_st_close(f);
}

static void test_save_errors(void) {
    float v[2] = {1, 2};
    char err[256];
    const char *nm[] = {"a", "a"};
    ut_st_tensor t[2] = {{UT_ST_F32, 1, {2}, v, 8}, {UT_ST_F32, 1, {2}, v, 8}};
    const char *p = tmp_path("save.safetensors");
    CHECK(ut_st_save(p, 2, nm, t, NULL, err, sizeof err) == -1 && strstr(err, "duplicate"), "%s", err);
    t[0].nbytes = 4;
    CHECK(ut_st_save(p, 1, nm, t, NULL, err, sizeof err) == -1 && strstr(err, "nbytes"), "%s", err);
    t[0].nbytes = 8;
    const char *meta[] = {"k", NULL};
    CHECK(ut_st_save(p, 1, nm, t, meta, err, sizeof err) == -1 && strstr(err, "no value"), "%s", err);
    const char *reserved[] = {"__metadata__"};
    CHECK(ut_st_save(p, 1, reserved, t, NULL, err, sizeof err) == -1 && strstr(err, "bad name"), "%s", err);
    const char *nodir = tmp_path("no/such/dir.safetensors");
    CHECK(ut_st_save(nodir, 1, nm, t, NULL, err, sizeof err) == -1 && strstr(err, nodir), "%s", err);
    CHECK(access(p, F_OK) != 0, "a failed save left %s behind", p);
}

/* tests/parity/make_fixtures.py writes these with json + struct. */
static void test_reads_python_file(void) {
    const char *path = "tests/parity/fixtures/mlp.safetensors";
    char err[512] = "";
    ut_st_file *f = ut_st_open(path, err, sizeof err);
    CHECK(f, "%s", err);
    if (!f) return;
    const ut_st_tensor *x = ut_st_get(f, "input"), *y = ut_st_get(f, "targets");
    const ut_st_tensor *w = ut_st_get(f, "grad.fc1.weight"), *l = ut_st_get(f, "loss");
    CHECK(x && x->dtype == UT_ST_F32 && x->ndim == 2 && x->shape[0] == 8 && x->shape[1] == 20, "input");
    CHECK(y && y->dtype == UT_ST_I32 && y->ndim == 1 && y->shape[0] == 8, "targets");
    CHECK(w && w->ndim == 2 && w->shape[0] == 16 && w->shape[1] == 32, "grad.fc1.weight");
    CHECK(l && ut_st_numel(l) == 1 && *(const float *)l->data > 0, "loss");
    for (int i = 0; y && i < 8; i++) {
        int32_t c = ((const int32_t *)y->data)[i];
        CHECK(c >= 0 && c < 5, "target %d = %d", i, c);
    }
    CHECK(ut_st_meta(f, "model") && !strcmp(ut_st_meta(f, "model"), "mlp"), "model metadata");
    CHECK(ut_st_meta(f, "params") && !strncmp(ut_st_meta(f, "params"), "fc0.weight,", 11), "params metadata");
    ut_st_close(f);
}

/* Headers with flipped bytes: each is read or refused with the file named,
 * never a crash (the sanitizer build watches the parser). */
static void test_flipped_headers(void) {
    const char *p = tmp_path("flip.safetensors");
    static const char *hdr = "{\"__metadata__\":{\"k\":\"v\\u00e9\"},"
                             "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                             "\"b\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[16,32]}}";
    size_t len = strlen(hdr);
    char *h = malloc(len + 1);
    uint64_t seed = 11;
    int opened = 0;
    for (int k = 0; k < 2000; k++) {
        memcpy(h, hdr, len + 1);
        for (int f = 0; f < 1 + k % 3; f++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            char c = (char)((seed >> 13) & 0xff);
            h[(seed >> 33) % len] = c ? c : 1;   /* no NUL: the header keeps its length */
        }
        write_header(p, h, 32);
        char err[512] = "";
        ut_st_file *f = ut_st_open(p, err, sizeof err);
        opened += f != NULL;
        CHECK(f || strstr(err, p), "flip %d: message does not name the file: %s", k, err);
        ut_st_close(f);
    }
    CHECK(opened < 2000, "every flipped header was accepted");
    free(h);
    unlink(p);
}

/* The writer in steps gives ut_st_save's bytes; the index reader reads
 * pieces of tensors without the data in memory. */
static void test_pieces(void) {
    float a[12], b[5];
    for (int i = 0; i < 12; i++) a[i] = (float)i * 0.5f - 1;
    for (int i = 0; i < 5; i++) b[i] = (float)(100 + i);
    const char *names[] = {"a", "b"};
    ut_st_tensor t[] = {{UT_ST_F32, 2, {3, 4}, a, sizeof a}, {UT_ST_F32, 1, {5}, b, sizeof b}};
    const char *meta[] = {"k", "abcd", "sum", "00000000", NULL};
    const char *whole = tmp_path("whole.safetensors"), *steps = tmp_path("steps.safetensors");
    char err[512] = "";
    const char *meta2[] = {"k", "abcd", "sum", "1234abcd", NULL};
    CHECK(ut_st_save(whole, 2, names, t, meta2, err, sizeof err) == 0, "%s", err);
    ut_st_writer *w = ut_st_writer_open(steps, 2, names, t, meta, err, sizeof err);
    CHECK(w, "%s", err);
    if (!w) return;
    /* pieces that cross the tensors' boundary */
    CHECK(ut_st_writer_write(w, a, 20, err, sizeof err) == 0, "%s", err);
    CHECK(ut_st_writer_write(w, (char *)a + 20, 28, err, sizeof err) == 0, "%s", err);
    CHECK(ut_st_writer_set_meta(w, "sum", "12345", err, sizeof err) == -1 && strstr(err, "as long"),
          "a value of another length was accepted: %s", err);
    CHECK(ut_st_writer_set_meta(w, "sum", "1234abcd", err, sizeof err) == 0, "%s", err);
    CHECK(ut_st_writer_write(w, b, sizeof b, err, sizeof err) == 0, "%s", err);
    CHECK(ut_st_writer_write(w, b, 4, err, sizeof err) == -1 && strstr(err, "more than"), "an extra byte: %s", err);
    CHECK(ut_st_writer_close(w, true, err, sizeof err) == 0, "%s", err);
    char *x = tp_slurp(whole), *y = tp_slurp(steps);
    struct stat sx, sy;
    CHECK(!stat(whole, &sx) && !stat(steps, &sy) && sx.st_size == sy.st_size && x && y &&
              !memcmp(x, y, (size_t)sx.st_size), "the writer's file differs from ut_st_save's");
    free(x);
    free(y);

    ut_st_file *f = ut_st_open_index(steps, err, sizeof err);
    CHECK(f, "%s", err);
    if (f) {
        int i = ut_st_index(f, "a");
        CHECK(i >= 0 && ut_st_get(f, "a")->data == NULL && ut_st_offset(f, ut_st_index(f, "b")) == (int64_t)sizeof a,
              "index file: tensor a at %d, b at %lld", i, (long long)ut_st_offset(f, ut_st_index(f, "b")));
        float got[3];
        CHECK(ut_st_read(f, i, 5 * sizeof(float), got, sizeof got, err, sizeof err) == 0 && got[0] == a[5] &&
                  got[2] == a[7], "pieces read back wrong: %s", err);
        CHECK(ut_st_read(f, i, 11 * sizeof(float), got, 2 * sizeof(float), err, sizeof err) == -1 &&
                  strstr(err, "outside"), "a read past the tensor: %s", err);
        CHECK(!strcmp(ut_st_meta(f, "sum"), "1234abcd"), "metadata %s", ut_st_meta(f, "sum"));
        ut_st_close(f);
    }
    /* a writer closed before all its data leaves nothing behind */
    unlink(steps);
    w = ut_st_writer_open(steps, 2, names, t, meta, err, sizeof err);
    CHECK(w && ut_st_writer_write(w, a, sizeof a, err, sizeof err) == 0, "%s", err);
    CHECK(ut_st_writer_close(w, true, err, sizeof err) == -1 && strstr(err, "never written"), "%s", err);
    CHECK(access(steps, F_OK) != 0, "a short file was put in place");
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        CHECK(!strstr(e->d_name, ".tmp."), "temporary file %s left behind", e->d_name);
    if (d) closedir(d);
    unlink(whole);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ut_safetensors_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_round_trip);
    RUN(test_rejects_bad_files);
    RUN(test_unaligned_tensor);
    RUN(test_save_errors);
    RUN(test_reads_python_file);
    RUN(test_flipped_headers);
    RUN(test_pieces);
    const char *files[] = {"rt.safetensors", "bad.safetensors", "unaligned.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) unlink(tmp_path(files[i]));
    rmdir(dir);
    return TEST_SUMMARY();
}
