/* Data layer: IDX images (real Fashion-MNIST and crafted bad files), token
 * shards and the byte tokenizer, TSV text and vocabularies, the distributed
 * sampler, the background loader. Temporary files go to a mkdtemp directory
 * under /tmp, removed at the end. */
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <zlib.h>

#include "proc.h"
#include "test.h"
#include "utrain/base.h"
#include "utrain/data.h"

#define FMNIST "/usr/share/datasets/fashion-mnist/"
#define MEAN 0.2860
#define STD 0.3530

static char tmpdir[64];
static char err[1024];

static const char *tmp(const char *name) { return tp_path(tmpdir, name); }

static void write_bytes(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    if (len && fwrite(data, 1, len, f) != len) { perror(path); exit(1); }
    if (fclose(f) != 0) { perror(path); exit(1); }
}

static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

static void remove_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') unlink(tmp(e->d_name));
    closedir(d);
    rmdir(tmpdir);
}

static int count_tmp_files(void) {
    DIR *d = opendir(tmpdir);
    int k = 0;
    for (struct dirent *e; d && (e = readdir(d));) k += e->d_name[0] != '.';
    if (d) closedir(d);
    return k;
}

/* ---------------------------------------------------------------- IDX */

static void test_idx_fashion_mnist(void) {
    ut_dataset *tr = ut_idx_dataset_open(FMNIST "train-images-idx3-ubyte.gz",
                                         FMNIST "train-labels-idx1-ubyte.gz", MEAN, STD, 0, -1, err, sizeof err);
    CHECK(tr, "%s", err);
    if (!tr) return;
    CHECK(tr->n == 60000, "%lld", (long long)tr->n);
    CHECK(tr->x_ndim == 3 && tr->x_ne[0] == 1 && tr->x_ne[1] == 28 && tr->x_ne[2] == 28, "shape");
    CHECK(tr->x_dtype == UT_F32 && tr->y_dtype == UT_I32 && tr->y_ndim == 0, "dtypes");
    CHECK(tr->num_classes == 10, "%lld", (long long)tr->num_classes);
    float x[784];
    int32_t y = -1;
    CHECK(tr->get(tr, 0, x, &y, err, sizeof err) == 0, "%s", err);
    CHECK(y == 9, "first train label %d", y);
    CHECK_NEAR(x[14 * 28 + 14], (217 / 255.0 - MEAN) / STD, 1e-6);
    CHECK_NEAR(x[0], (0 - MEAN) / STD, 1e-6);
    CHECK(tr->get(tr, 60000, x, &y, err, sizeof err) == -1 && strstr(err, "out of range"), "%s", err);
    ut_dataset_free(tr);
    ut_dataset *te = ut_idx_dataset_open(FMNIST "t10k-images-idx3-ubyte.gz",
                                         FMNIST "t10k-labels-idx1-ubyte.gz", MEAN, STD, 0, -1, err, sizeof err);
    CHECK(te && te->n == 10000, "%s", err);
    CHECK(te && te->get(te, 0, x, &y, err, sizeof err) == 0 && y == 9, "first test label %d", y);
    ut_dataset_free(te);
}

/* Decompresses a .gz into a plain file with zlib (independently of the library). */
static void gunzip_to(const char *gz, const char *out) {
    gzFile g = gzopen(gz, "rb");
    FILE *f = fopen(out, "wb");
    if (!g || !f) { perror(out); exit(1); }
    char buf[1 << 16];
    int k;
    while ((k = gzread(g, buf, sizeof buf)) > 0)
        if (fwrite(buf, 1, (size_t)k, f) != (size_t)k) { perror(out); exit(1); }
    CHECK(k == 0, "gzread");
    gzclose(g);
    if (fclose(f) != 0) { perror(out); exit(1); }
}

/* A small gzip IDX file whose stream inflates to far more than its header
 * says (here 600 MiB of zeros after 10 images of 28 x 28) is refused as
 * trailing data after inflating only what the header implies: checked in a
 * child process whose address space is limited to 256 MiB (left out under
 * the sanitizers, which reserve more than that at start). */
static void test_idx_gzip_bomb(void) {
    char img[] = "/tmp/ut_bomb_images_XXXXXX", lab[] = "/tmp/ut_bomb_labels_XXXXXX";
    int fi = mkstemp(img), fl = mkstemp(lab);
    CHECK(fi >= 0 && fl >= 0, "temp files");
    unsigned char hdr[16] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
    gzFile g = gzdopen(fi, "wb1");
    static unsigned char zeros[1 << 20];
    gzwrite(g, hdr, sizeof hdr);
    gzwrite(g, zeros, 10 * 28 * 28);
    for (int i = 0; i < 600; i++) gzwrite(g, zeros, sizeof zeros);
    gzclose(g);
    unsigned char lhdr[18] = {0, 0, 8, 1, 0, 0, 0, 10};
    CHECK(write(fl, lhdr, sizeof lhdr) == (ssize_t)sizeof lhdr, "labels");
    close(fl);
    pid_t pid = fork();
    if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__)
        struct rlimit r = {256u << 20, 256u << 20};
        setrlimit(RLIMIT_AS, &r);
#endif
        char e[512];
        ut_dataset *ds = ut_idx_dataset_open(img, lab, MEAN, STD, 0, -1, e, sizeof e);
        _exit(!ds && strstr(e, img) && strstr(e, "byte offset 7856") && strstr(e, "trailing bytes") ? 0 : 3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the bomb: %s %d", WIFEXITED(st) ? "exit" : "signal",
          WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    unlink(img);
    unlink(lab);
}

static void test_idx_plain_equals_gz_and_dev_carve(void) {
    const char *pi = tmp("train-images"), *pl = tmp("train-labels");
    gunzip_to(FMNIST "train-images-idx3-ubyte.gz", pi);
    gunzip_to(FMNIST "train-labels-idx1-ubyte.gz", pl);
    ut_dataset *gz = ut_idx_dataset_open(FMNIST "train-images-idx3-ubyte.gz",
                                         FMNIST "train-labels-idx1-ubyte.gz", MEAN, STD, 0, -1, err, sizeof err);
    ut_dataset *plain = ut_idx_dataset_open(pi, pl, MEAN, STD, 0, -1, err, sizeof err);
    ut_dataset *dev = ut_idx_dataset_open(pi, pl, MEAN, STD, 55000, 60000, err, sizeof err);
    CHECK(gz && plain && dev, "%s", err);
    if (gz && plain && dev) {
        CHECK(plain->n == 60000 && dev->n == 5000, "%lld %lld", (long long)plain->n, (long long)dev->n);
        float a[784], b[784];
        int32_t ya, yb;
        int same = 1;
        for (int64_t i = 0; i < 60000; i += 97) {
            gz->get(gz, i, a, &ya, err, sizeof err);
            plain->get(plain, i, b, &yb, err, sizeof err);
            same &= ya == yb && !memcmp(a, b, sizeof a);
        }
        CHECK(same, "plain and gzip files give different examples");
        gz->get(gz, 55000, a, &ya, err, sizeof err);
        dev->get(dev, 0, b, &yb, err, sizeof err);
        CHECK(ya == yb && yb == 0 && !memcmp(a, b, sizeof a), "dev[0] is train[55000]");
        CHECK_NEAR(b[14 * 28 + 14], (201 / 255.0 - MEAN) / STD, 1e-6);
    }
    ut_dataset_free(gz);
    ut_dataset_free(plain);
    ut_dataset_free(dev);
}

/* A 3-image 2x2 IDX pair; labels[i] as given. */
static size_t make_images(unsigned char *b, uint32_t magic, int count) {
    unsigned char h[16] = {magic >> 24, magic >> 16, magic >> 8, magic, 0, 0, 0, (unsigned char)count,
                           0, 0, 0, 2, 0, 0, 0, 2};
    memcpy(b, h, 16);
    for (int i = 0; i < 4 * count; i++) b[16 + i] = (unsigned char)(i * 20);
    return 16 + 4 * (size_t)count;
}

static size_t make_labels(unsigned char *b, int count, const unsigned char *labels) {
    unsigned char h[8] = {0, 0, 8, 1, 0, 0, 0, (unsigned char)count};
    memcpy(b, h, 8);
    memcpy(b + 8, labels, (size_t)count);
    return 8 + (size_t)count;
}

static void expect_idx_error(const char *images, const char *labels, int64_t lo, int64_t hi,
                             const char *file, const char *what) {
    err[0] = 0;
    ut_dataset *ds = ut_idx_dataset_open(images, labels, 0, 1, lo, hi, err, sizeof err);
    CHECK(!ds, "opened %s", file);
    ut_dataset_free(ds);
    CHECK(strstr(err, file) && strstr(err, what), "'%s' should name %s and '%s'", err, file, what);
}

static void test_idx_errors(void) {
    unsigned char img[64], lab[16];
    const unsigned char good[3] = {1, 2, 3}, bad[3] = {1, 12, 3};
    const char *gi = tmp("g-images"), *gl = tmp("g-labels"), *bi = tmp("b-images"), *bl = tmp("b-labels");
    write_bytes(gi, img, make_images(img, 0x803, 3));
    write_bytes(gl, lab, make_labels(lab, 3, good));
    ut_dataset *ds = ut_idx_dataset_open(gi, gl, 0.5, 2, 1, -1, err, sizeof err);
    CHECK(ds && ds->n == 2, "%s", err);
    if (ds) {
        float x[4];
        int32_t y;
        ds->get(ds, 0, x, &y, err, sizeof err);
        CHECK(y == 2, "%d", y);
        CHECK_NEAR(x[1], (100 / 255.0 - 0.5) / 2, 1e-6);  /* image 1, pixel 1 = (4 + 1) * 20 */
    }
    ut_dataset_free(ds);

    write_bytes(bi, img, make_images(img, 0x801, 3));
    expect_idx_error(bi, gl, 0, -1, bi, "byte offset 0: bad magic");
    write_bytes(bi, img, make_images(img, 0x803, 3) - 1);
    expect_idx_error(bi, gl, 0, -1, bi, "truncated at byte offset 27");
    write_bytes(bi, img, 10);
    expect_idx_error(bi, gl, 0, -1, bi, "truncated at byte offset 10");
    write_bytes(bi, "", 0);
    expect_idx_error(bi, gl, 0, -1, bi, "empty file");
    write_bytes(bl, lab, make_labels(lab, 2, good));
    expect_idx_error(gi, bl, 0, -1, bl, "byte offset 4: 2 labels");
    write_bytes(bl, lab, make_labels(lab, 3, bad));
    expect_idx_error(gi, bl, 0, -1, bl, "byte offset 9: label 12 >= 10");
    expect_idx_error(gi, gl, 2, 5, gi, "range [2, 5)");
    expect_idx_error(tmp("missing"), gl, 0, -1, "missing", "cannot open");

    /* gzip detected by magic under any name; a truncated stream is an error */
    gzFile g = gzopen(bi, "wb");
    size_t len = make_images(img, 0x803, 3);
    gzwrite(g, img, (unsigned)len);
    gzclose(g);
    ds = ut_idx_dataset_open(bi, gl, 0, 1, 0, -1, err, sizeof err);
    CHECK(ds && ds->n == 3, "%s", err);
    ut_dataset_free(ds);
    FILE *f = fopen(bi, "rb");
    unsigned char z[256];
    size_t zl = f ? fread(z, 1, sizeof z, f) : 0;
    if (f) fclose(f);
    write_bytes(bi, z, zl - 12);
    expect_idx_error(bi, gl, 0, -1, bi, "truncated gzip");
}

/* ---------------------------------------------------------------- tokens */

static void write_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                        const uint16_t *tok, int ntok) {
    int32_t hdr[256] = {magic, version, count};
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(hdr, 4, 256, f) != 256 || (ntok && fwrite(tok, 2, (size_t)ntok, f) != (size_t)ntok) ||
        fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void expect_tok_error(const char *pattern, int64_t vocab, const char *file, const char *what) {
    err[0] = 0;
    ut_dataset *ds = ut_token_dataset_open(pattern, 3, vocab, err, sizeof err);
    CHECK(!ds, "opened %s", pattern);
    ut_dataset_free(ds);
    CHECK(strstr(err, file) && strstr(err, what), "'%s' should name %s and '%s'", err, file, what);
}

static void test_tokens(void) {
    uint16_t t[20];
    for (int i = 0; i < 20; i++) t[i] = (uint16_t)(100 + i);
    write_shard(tmp("shard_a.bin"), 20240520, 1, 10, t, 10);       /* 2 windows of 4, 2 left over */
    write_shard(tmp("shard_b.bin"), 20240520, 1, 9, t + 10, 9);    /* 2 windows, 1 left over */
    ut_dataset *ds = ut_token_dataset_open(tmp("shard_a.bin"), 3, 200, err, sizeof err);
    CHECK(ds && ds->n == 2 && ds->vocab_size == 200 && ds->x_ne[0] == 3 && ds->y_ne[0] == 3, "%s", err);
    int32_t x[3], y[3];
    if (ds) {
        ds->get(ds, 1, x, y, err, sizeof err);
        CHECK(x[0] == 104 && x[2] == 106 && y[0] == 105 && y[2] == 107, "%d %d %d %d", x[0], x[2], y[0], y[2]);
    }
    ut_dataset_free(ds);
    ds = ut_token_dataset_open(tmp("shard_*.bin"), 3, 200, err, sizeof err);
    CHECK(ds && ds->n == 4, "%s", err);
    if (ds) {
        ds->get(ds, 2, x, y, err, sizeof err);  /* first window of shard_b: no crossing */
        CHECK(x[0] == 110 && y[2] == 113, "%d %d", x[0], y[2]);
        ds->get(ds, 3, x, y, err, sizeof err);
        CHECK(x[0] == 114 && y[2] == 117, "%d %d", x[0], y[2]);
    }
    ut_dataset_free(ds);

    const char *bad = tmp("bad.bin");
    write_shard(bad, 20240521, 1, 10, t, 10);
    expect_tok_error(bad, 200, bad, "byte offset 0: bad magic 20240521");
    write_shard(bad, 20240520, 2, 10, t, 10);
    expect_tok_error(bad, 200, bad, "byte offset 4: unsupported version 2");
    write_shard(bad, 20240520, 1, 10, t, 8);
    expect_tok_error(bad, 200, bad, "truncated at byte offset 1040");
    write_shard(bad, 20240520, 1, 10, t, 10);
    expect_tok_error(bad, 105, bad, "byte offset 1034: token 105 >= vocab_size 105");
    write_bytes(bad, "", 0);
    expect_tok_error(bad, 200, bad, "empty file");
    write_shard(bad, 20240520, 1, 2, t, 2);
    expect_tok_error(bad, 200, bad, "no shard has 4 tokens");
    expect_tok_error(tmp("nothing_*.bin"), 200, "nothing_", "no file matches");
    unlink(bad);
}

static void test_tokenize_round_trip(void) {
    const char *txt = tmp("in.txt"), *bin = tmp("out.bin");
    const char *text = "In the beginning\n\xff\x01";
    write_text(txt, text);
    int files = count_tmp_files();
    CHECK(ut_tokenize_file("byte", txt, bin, err, sizeof err) == 0, "%s", err);
    CHECK(count_tmp_files() == files + 1, "temporary file left behind");
    ut_dataset *ds = ut_token_dataset_open(bin, 1, 256, err, sizeof err);
    size_t len = strlen(text);
    CHECK(ds && ds->n == (int64_t)len / 2, "%s", err);
    int same = 1;
    for (int64_t i = 0; ds && i < ds->n; i++) {
        int32_t x, y;
        ds->get(ds, i, &x, &y, err, sizeof err);
        same &= x == (unsigned char)text[2 * i] && y == (unsigned char)text[2 * i + 1];
    }
    CHECK(same, "tokens differ from the text's bytes");
    ut_dataset_free(ds);
    CHECK(ut_tokenize_file("gpt2", txt, bin, err, sizeof err) == -1 && strstr(err, "gpt2") &&
          strstr(err, "known: byte"), "%s", err);
    write_text(txt, "");
    CHECK(ut_tokenize_file("byte", txt, bin, err, sizeof err) == -1 && strstr(err, "empty file"), "%s", err);
    unlink(txt);
    unlink(bin);
}

/* ---------------------------------------------------------------- TSV */

static const char *TRAIN_TSV =
    "sentence\tlabel\n"
    "The cat sat.\t0\n"
    "the DOG sat, the cat ran!\t2\n"
    "\n"
    "a dog\t1\n";

/* the word vocabulary of TRAIN_TSV (written to train.tsv); NULL, the check failed, if it does not build */
static ut_vocab *train_vocab(void) {
    write_text(tmp("train.tsv"), TRAIN_TSV);
    ut_vocab *v = ut_vocab_build("word", tmp("train.tsv"), NULL, 1, err, sizeof err);
    CHECK(v, "%s", err);
    return v;
}

static void test_vocab_and_tsv(void) {
    const char *tr = tmp("train.tsv"), *vf = tmp("vocab.txt");
    write_text(tr, TRAIN_TSV);
    ut_vocab *v = ut_vocab_build("word", tr, NULL, 1, err, sizeof err);
    CHECK(v, "%s", err);
    if (!v) return;
    /* counts: the 3, cat 2, dog 2, sat 2, ! 1, , 1, . 1, a 1, ran 1 */
    CHECK(ut_vocab_size(v) == 11 && ut_vocab_num_classes(v) == 3, "%lld %lld",
          (long long)ut_vocab_size(v), (long long)ut_vocab_num_classes(v));
    CHECK(ut_vocab_save(v, vf, err, sizeof err) == 0, "%s", err);
    ut_vocab *w = ut_vocab_load(vf, err, sizeof err);
    CHECK(w && ut_vocab_size(w) == 11 && ut_vocab_num_classes(w) == 3, "%s", err);
    const char *dv = tmp("dev.tsv");
    write_text(dv, "sentence\tlabel\nThe cat, the zebra sat.\t2\nran\t0\n");
    ut_dataset *ds = ut_tsv_dataset_open(dv, NULL, w, 6, err, sizeof err);
    CHECK(ds && ds->n == 2 && ds->vocab_size == 11 && ds->num_classes == 3 && ds->x_ne[0] == 6, "%s", err);
    if (ds) {
        int32_t x[6], y;
        ds->get(ds, 0, x, &y, err, sizeof err);
        /* ids: <pad> 0, <unk> 1, the 2, cat 3, dog 4, sat 5, ! 6, , 7, . 8, a 9, ran 10 */
        const int32_t want0[6] = {2, 3, 7, 2, 1, 5};  /* truncated before "." */
        CHECK(!memcmp(x, want0, sizeof x) && y == 2, "%d %d %d %d %d %d / %d", x[0], x[1], x[2], x[3], x[4], x[5], y);
        ds->get(ds, 1, x, &y, err, sizeof err);
        const int32_t want1[6] = {10, 0, 0, 0, 0, 0};
        CHECK(!memcmp(x, want1, sizeof x) && y == 0, "%d %d", x[0], x[1]);
    }
    ut_dataset_free(ds);
    ut_vocab_free(w);
    ut_vocab_free(v);

    v = ut_vocab_build("word", tr, NULL, 2, err, sizeof err);
    CHECK(v && ut_vocab_size(v) == 6, "min_freq 2: %lld", v ? (long long)ut_vocab_size(v) : -1LL);
    ut_vocab_free(v);
    CHECK(!ut_vocab_build("bpe", tr, NULL, 1, err, sizeof err) && strstr(err, "known: word, byte"), "%s", err);
}

static void test_vocab_escapes_and_bytes(void) {
    const char *tr = tmp("esc.tsv"), *vf = tmp("esc.vocab");
    write_text(tr, "label\tsentence\n1\tcaf\xc3\xa9 a\x01z \xff\n");
    ut_vocab *v = ut_vocab_build("word", tr, NULL, 1, err, sizeof err);
    CHECK(v && ut_vocab_size(v) == 5, "%s", err);
    if (!v) return;
    CHECK(ut_vocab_save(v, vf, err, sizeof err) == 0, "%s", err);
    FILE *f = fopen(vf, "rb");
    char text[256] = {0};
    if (f) {
        CHECK(fread(text, 1, sizeof text - 1, f) > 0, "read");
        fclose(f);
    }
    CHECK(strstr(text, "a\\x01z\n") && strstr(text, "caf\xc3\xa9\n"), "%s", text);
    ut_vocab *w = ut_vocab_load(vf, err, sizeof err);
    CHECK(w && ut_vocab_size(w) == 5, "%s", err);
    ut_dataset *a = ut_tsv_dataset_open(tr, NULL, v, 4, err, sizeof err), *b = ut_tsv_dataset_open(tr, NULL, w, 4, err, sizeof err);
    CHECK(a && b, "%s", err);
    if (a && b) {
        int32_t xa[4], xb[4], ya, yb;
        a->get(a, 0, xa, &ya, err, sizeof err);
        b->get(b, 0, xb, &yb, err, sizeof err);
        CHECK(!memcmp(xa, xb, sizeof xa) && ya == 1 && yb == 1 && xa[3] == 0 && xa[0] > 1, "save/load changed ids");
    }
    ut_dataset_free(a);
    ut_dataset_free(b);
    ut_vocab_free(v);
    ut_vocab_free(w);

    v = ut_vocab_build("byte", tr, NULL, 1, err, sizeof err);
    CHECK(v && ut_vocab_size(v) == 257 && ut_vocab_num_classes(v) == 2, "%s", err);
    CHECK(v && ut_vocab_save(v, vf, err, sizeof err) == 0, "%s", err);
    w = ut_vocab_load(vf, err, sizeof err);
    CHECK(w && ut_vocab_size(w) == 257, "%s", err);
    a = w ? ut_tsv_dataset_open(tr, NULL, w, 8, err, sizeof err) : NULL;
    CHECK(a && a->vocab_size == 257, "%s", err);
    if (a) {
        int32_t x[8], y;
        a->get(a, 0, x, &y, err, sizeof err);
        CHECK(x[0] == 'c' + 1 && x[3] == 0xc3 + 1 && x[7] == 0x01 + 1, "%d %d %d", x[0], x[3], x[7]);
    }
    ut_dataset_free(a);
    ut_vocab_free(v);
    ut_vocab_free(w);
    write_text(vf, "not a vocab\n");
    CHECK(!ut_vocab_load(vf, err, sizeof err) && strstr(err, ":1: not a utrain vocabulary"), "%s", err);
}

static void expect_tsv_error(const char *text, const ut_vocab *v, const char *what) {
    const char *p = tmp("bad.tsv");
    write_text(p, text);
    err[0] = 0;
    ut_dataset *ds = ut_tsv_dataset_open(p, NULL, v, 4, err, sizeof err);
    CHECK(!ds, "opened '%s'", text);
    ut_dataset_free(ds);
    CHECK(strstr(err, p) && strstr(err, what), "'%s' should name %s and '%s'", err, p, what);
}

/* A NUL byte is reported with its line and offset (it used to crash: the
 * message read the buffer after it was freed). */
static void test_tsv_nul_byte(void) {
    const char *p = tmp("nul.tsv");
    static const char text[] = "sentence\tlabel\ngood\t1\nbad\t0\na\0b\t1\n";
    write_bytes(p, text, sizeof text - 1);
    CHECK(!ut_vocab_build("word", p, NULL, 1, err, sizeof err), "built a vocabulary from %s", p);
    CHECK(strstr(err, p) && strstr(err, ":4: NUL byte at byte offset 29"), "%s", err);
}

static void test_tsv_errors(void) {
    ut_vocab *v = train_vocab();
    if (!v) return;
    expect_tsv_error("sentence\tlabel\ngood\t1\nno tab here\n", v, ":3: missing tab");
    expect_tsv_error("sentence\tlabel\ngood\t1\nbad\tx1\n", v, ":3: bad label 'x1'");
    expect_tsv_error("sentence\tlabel\ngood\t-1\n", v, ":2: bad label '-1'");
    /* a score where a class is read says how to train on scores */
    expect_tsv_error("sentence\tlabel\ngood\t1\nok\t3.800\n", v,
                     ":3: bad label '3.800' (expected an integer >= 0, a class; a label that is a score, as STS-B's, "
                     "is a regression task: set model.num_labels: 1)");
    expect_tsv_error("good\t2.5\n", v, ":1: bad label '2.5' (expected an integer >= 0, a class;");
    /* names are read with a pretrained tokenizer */
    expect_tsv_error("sentence\tlabel\ngood\tentailment\n", v,
                     ":2: bad label 'entailment' (expected an integer >= 0, a class; labels that are names (entailment, "
                     "...) are read with a pretrained tokenizer");
    expect_tsv_error("sentence\tlabel\ngood\t1\nok\t3\n", v, ":3: label 3 >= num_classes 3");
    expect_tsv_error("", v, "empty file");
    expect_tsv_error("good\tyes\n", v, ":1: no header");
    expect_tsv_error("sentence\tlabel\n", v, "no examples after the header");
    ut_vocab_free(v);
    CHECK(!ut_vocab_build("word", tmp("bad.tsv"), NULL, 1, err, sizeof err) && strstr(err, "no examples"), "%s", err);
}

/* One file in each header layout: the columns are found by name, the index
 * column gives the example ids, and a file without labels is unlabeled. */
static void test_tsv_columns(void) {
    ut_vocab *v = train_vocab();
    if (!v) return;
    static const struct {
        const char *text;
        bool labeled, indexed;
    } cases[] = {
        {"sentence\tlabel\nthe cat\t2\na dog\t1\n", true, false},
        {"index\tsentence\tlabel\n7\tthe cat\t2\n40\ta dog\t1\n", true, true},
        {"label\tid\tsentence\n2\tx\tthe cat\n1\ty\ta dog\n", true, false},
        {"index\tsentence\n7\tthe cat\n40\ta dog\n", false, true},
        {"sentence\nthe cat\na dog\n", false, false},
        {"\xEF\xBB\xBFsentence\tlabel\nthe cat\t2\na dog\t1\n", true, false}, /* a UTF-8 BOM (Windows editors) */
        {"the cat\t2\na dog\t1\n", true, false}, /* the seed's headerless sentence, label */
    };
    const int32_t cat[3] = {2, 3, 0}, dog[3] = {9, 4, 0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *p = tmp("cols.tsv");
        write_text(p, cases[c].text);
        ut_dataset *ds = ut_tsv_dataset_open(p, NULL, v, 3, err, sizeof err);
        CHECK(ds && ds->n == 2 && ds->num_classes == 3, "case %zu: %s", c, err);
        if (!ds) continue;
        CHECK(ds->unlabeled == !cases[c].labeled, "case %zu: unlabeled %d", c, ds->unlabeled);
        CHECK(cases[c].indexed ? ds->example_id && ds->example_id[0] == 7 && ds->example_id[1] == 40
                               : !ds->example_id, "case %zu: example ids", c);
        int32_t x[3], y[2];
        CHECK(!ds->get(ds, 0, x, &y[0], err, sizeof err) && !memcmp(x, cat, sizeof x), "case %zu: x %d %d %d", c,
              x[0], x[1], x[2]);
        CHECK(!ds->get(ds, 1, x, &y[1], err, sizeof err) && !memcmp(x, dog, sizeof x), "case %zu: x %d %d %d", c,
              x[0], x[1], x[2]);
        CHECK(cases[c].labeled ? y[0] == 2 && y[1] == 1 : y[0] == 0 && y[1] == 0, "case %zu: y %d %d", c, y[0], y[1]);
        ut_dataset_free(ds);
    }
    expect_tsv_error("index\tsentence\nx7\tthe cat\n", v, ":2: bad index 'x7'");
    expect_tsv_error("index\tlabel\n7\t1\n", v, ":1: no header");
    /* the vocabulary comes from labeled text only */
    write_text(tmp("cols.tsv"), "index\tsentence\n7\tthe cat\n");
    CHECK(!ut_vocab_build("word", tmp("cols.tsv"), NULL, 1, err, sizeof err) && strstr(err, "cols.tsv:1: no 'label' column"),
          "%s", err);
    ut_vocab_free(v);
}

/* The layouts of GLUE's own files and of Hugging Face datasets' exports, as
 * transformers' run_glue reads them: the pair's columns by name, the first
 * text first (QNLI's question before its sentence), the label by QQP's and
 * MRPC's names, datasets' idx as the index, datasets' text as the one text;
 * the word tokenizer reads a pair's texts one after the other */
static void test_tsv_glue_layouts(void) {
    ut_vocab *v = train_vocab();
    if (!v) return;
    static const struct {
        const char *text;
        int32_t label;
        int64_t id;          /* -1: the position */
        bool pair;
    } cases[] = {
        {"question\tsentence\tlabel\tidx\nthe cat\ta dog\t1\t5\n", 1, 5, true},                  /* QNLI */
        {"sentence\tquestion\tlabel\na dog\tthe cat\t2\n", 2, -1, true},                          /* its order */
        {"id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\tthe cat\ta dog\t1\n", 1, -1, true},
        {"premise\thypothesis\tlabel\nthe cat\ta dog\t2\n", 2, -1, true},                         /* MNLI */
        {"Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t10\t11\tthe cat\ta dog\n", 1, -1, true}, /* MRPC */
        {"idx\tsentence1\tsentence2\tlabel\n3\tthe cat\ta dog\t0\n", 0, 3, true},                /* RTE */
        {"text\tlabel\nthe cat\t2\n", 2, -1, false},                                            /* datasets' */
    };
    const int32_t pair[6] = {2, 3, 9, 4, 0, 0}, one[6] = {2, 3, 0, 0, 0, 0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *p = tmp("glue.tsv");
        write_text(p, cases[c].text);
        ut_dataset *ds = ut_tsv_dataset_open(p, NULL, v, 6, err, sizeof err);
        CHECK(ds && ds->n == 1 && !ds->unlabeled, "case %zu: %s", c, err);
        if (!ds) continue;
        int32_t x[6], y = -1;
        CHECK(!ds->get(ds, 0, x, &y, err, sizeof err) && !memcmp(x, cases[c].pair ? pair : one, sizeof x),
              "case %zu: x %d %d %d %d %d", c, x[0], x[1], x[2], x[3], x[4]);
        CHECK(y == cases[c].label, "case %zu: label %d", c, y);
        CHECK(cases[c].id < 0 ? !ds->example_id : ds->example_id && ds->example_id[0] == cases[c].id, "case %zu: id",
              c);
        ut_dataset_free(ds);
    }
    /* a pair longer than max_len: the first text first, the second cut */
    write_text(tmp("glue.tsv"), "question1\tquestion2\tis_duplicate\nthe cat\ta dog\t1\n");
    ut_dataset *ds = ut_tsv_dataset_open(tmp("glue.tsv"), NULL, v, 3, err, sizeof err);
    int32_t x[3], y;
    CHECK(ds && !ds->get(ds, 0, x, &y, err, sizeof err) && x[0] == 2 && x[1] == 3 && x[2] == 9, "cut: %s", err);
    ut_dataset_free(ds);
    expect_tsv_error("words\tnumbers\nthe cat\t1\n", v, ":1: no header"); /* no label column: not a header */
    ut_vocab_free(v);
    /* the vocabulary counts a pair's second text too */
    const char *tr = tmp("train.tsv");
    write_text(tr, "premise\thypothesis\tlabel\nfirst\tsecond\t1\nfirst\tthird\t0\n");
    v = ut_vocab_build("word", tr, NULL, 1, err, sizeof err);
    CHECK(v && ut_vocab_size(v) == 5, "<pad>, <unk>, first, second, third: %lld", v ? (long long)ut_vocab_size(v) : -1LL);
    ut_vocab_free(v);
}

/* the dataset of path (TRAIN_TSV's vocabulary, max_len 6): every example's ids, label and id into x, y, id */
/* The examples of path read with the columns cols (NULL: by name): n, or -1 when it does not open (err) */
static int64_t read_cols(const char *path, const ut_text_columns *cols, ut_vocab *v, int32_t *x, int32_t *y,
                         int64_t *id, int64_t max) {
    ut_dataset *ds = ut_tsv_dataset_open(path, cols, v, 6, err, sizeof err);
    if (!ds) return -1;
    int64_t n = ds->n;
    for (int64_t k = 0; k < n && k < max; k++) {
        CHECK(ds->get(ds, k, x + 6 * k, y + k, err, sizeof err) == 0, "%s", err);
        id[k] = ds->example_id ? ds->example_id[k] : -1;
    }
    ut_dataset_free(ds);
    return n;
}

static int64_t read_all(const char *path, ut_vocab *v, int32_t *x, int32_t *y, int64_t *id, int64_t max) {
    ut_dataset *ds = ut_tsv_dataset_open(path, NULL, v, 6, err, sizeof err);
    CHECK(ds, "%s: %s", path, err);
    int64_t n = ds ? ds->n : 0;
    for (int64_t k = 0; k < n && k < max; k++) {
        CHECK(ds->get(ds, k, x + 6 * k, y + k, err, sizeof err) == 0, "%s", err);
        id[k] = ds->example_id ? ds->example_id[k] : -1;
    }
    ut_dataset_free(ds);
    return n;
}

/* data.text_column, text_pair_column, label_column (any file's columns, in
 * TSV, CSV and JSON Lines), several text columns joined, and run_glue's
 * rule for files without a known text name: each gives the examples of the
 * same texts under the usual names; what ds->columns says; refusals. */
static void test_named_columns(void) {
    ut_vocab *v = train_vocab();
    if (!v) return;
    int32_t x[2][12], y[2][2];
    int64_t id[2][2];
    /* the reference: the usual names */
    write_text(tmp("ref.tsv"), "idx\tsentence\tlabel\n3\tthe cat sat\t0\n7\tdog ran\t2\n");
    CHECK(read_cols(tmp("ref.tsv"), NULL, v, x[0], y[0], id[0], 2) == 2 && y[0][1] == 2, "reference: %s", err);
    const char *same[][2] = {
        {"n.tsv", "idx\tstars\treview\n3\t0\tthe cat sat\n7\t2\tdog ran\n"},
        {"n.csv", "stars,idx,review\n0,3,the cat sat\n2,7,dog ran\n"},
        {"n.jsonl", "{\"review\": \"the cat sat\", \"stars\": 0, \"idx\": 3}\n{\"review\": \"dog ran\", \"stars\": 2, "
                    "\"idx\": 7}\n"},
    };
    ut_text_columns cols = {.text = "review", .label = "stars"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        write_text(tmp(same[i][0]), same[i][1]);
        memset(x[1], 0xff, sizeof x[1]);
        CHECK(read_cols(tmp(same[i][0]), &cols, v, x[1], y[1], id[1], 2) == 2 && !memcmp(x[0], x[1], sizeof x[0]) &&
                  !memcmp(y[0], y[1], sizeof y[0]) && !memcmp(id[0], id[1], sizeof id[0]),
              "%s with text review, label stars: the reference's examples (%s)", same[i][0], err);
    }
    /* a header like a headerless example is a header when columns are named */
    write_text(tmp("h.tsv"), "review\t1\nthe cat sat\t0\ndog ran\t2\n");
    ut_text_columns h = {.text = "review", .label = "1"};
    CHECK(read_cols(tmp("h.tsv"), &h, v, x[1], y[1], id[1], 2) == 2 && !memcmp(x[0], x[1], sizeof x[0]) &&
              y[1][1] == 2, "named columns: the first line is the header (%s)", err);
    /* several text columns joined (run_classification's text_column_names), by a delimiter */
    write_text(tmp("j.csv"), "title,body,label\nthe cat,sat,0\ndog,ran,2\n");
    ut_text_columns j = {.text = "title, body", .delimiter = " "};
    CHECK(read_cols(tmp("j.csv"), &j, v, x[1], y[1], id[1], 2) == 2 && !memcmp(x[0], x[1], sizeof x[0]),
          "title and body joined by a space: the reference's texts (%s)", err);
    j.delimiter = " dog ";
    CHECK(read_cols(tmp("j.csv"), &j, v, x[1], y[1], id[1], 2) == 2 && memcmp(x[0], x[1], sizeof x[0]) &&
              x[1][2] == x[0][6] && x[1][3] == x[0][2], "joined by ' dog ': the cat dog sat");
    /* a pair: the same ids as the usual names' pair */
    write_text(tmp("p.tsv"), "sentence1\tsentence2\tlabel\nthe cat\tsat\t0\n");
    write_text(tmp("q.jsonl"), "{\"a\": \"the cat\", \"b\": \"sat\", \"y\": 0}\n");
    ut_text_columns pair = {.text = "a", .text_pair = "b", .label = "y"};
    CHECK(read_cols(tmp("p.tsv"), NULL, v, x[0], y[0], id[0], 1) == 1 &&
              read_cols(tmp("q.jsonl"), &pair, v, x[1], y[1], id[1], 1) == 1 && !memcmp(x[0], x[1], 6 * sizeof(int32_t)),
          "a pair by name: the sentence1/sentence2 pair (%s)", err);
    /* run_glue's rule: no known text name; the columns beside the label (and idx, id) */
    const char *glue[][3] = {
        {"g1.csv", "id,review,label\n9,the cat sat,0\n", "text 'review', label 'label' (no column has a known text "
                                                          "name: the first beside the label"},
        {"g2.tsv", "label\ttitle\tbody\n0\tthe cat\tsat\n", "text 'title', its pair's second 'body', label 'label'"},
        {"g3.jsonl", "{\"review\": \"the cat sat\"}\n", "text 'review', no label column"},
        {"g4.csv", "sentence,label\nthe cat sat,0\n", "text 'sentence', label 'label'"},
        {"g5.csv", "title,body,label\nthe cat,sat,0\n", "texts 'title' and 'body' joined, label 'label'"},
    };
    for (size_t i = 0; i < sizeof glue / sizeof glue[0]; i++) {
        write_text(tmp(glue[i][0]), glue[i][1]);
        ut_dataset *ds = ut_tsv_dataset_open(tmp(glue[i][0]), i == 4 ? &j : NULL, v, 6, err, sizeof err);
        CHECK(ds && ds->columns && strstr(ds->columns, glue[i][2]), "%s: columns '%s', expected '%s' (%s)", glue[i][0],
              ds && ds->columns ? ds->columns : "(none)", glue[i][2], err);
        ut_dataset_free(ds);
    }
    /* a headerless file says nothing of columns */
    write_text(tmp("hl.tsv"), "the cat sat\t0\n");
    ut_dataset *ds = ut_tsv_dataset_open(tmp("hl.tsv"), NULL, v, 6, err, sizeof err);
    CHECK(ds && !ds->columns && ds->n == 1, "headerless: no columns (%s)", err);
    ut_dataset_free(ds);
    /* a label column named but absent: unlabeled (a test file) */
    ut_text_columns test = {.text = "review", .label = "stars"};
    write_text(tmp("t.csv"), "review\nthe cat sat\n");
    ds = ut_tsv_dataset_open(tmp("t.csv"), &test, v, 6, err, sizeof err);
    CHECK(ds && ds->unlabeled && ds->n == 1, "unlabeled without the named label column (%s)", err);
    ut_dataset_free(ds);
    /* refusals */
    const struct { ut_text_columns c; const char *file, *text, *want; } bad[] = {
        {{.text = "body"}, "b.csv", "review,label\na,0\n", "b.csv:1: no column 'body' (data.text_column) among the "
                                                            "file's columns: review,label"},
        {{.text = "review, body"}, "b.tsv", "review\tlabel\na\t0\n", "b.tsv:1: no column 'body' (data.text_column)"},
        {{.text = "review", .text_pair = "body"}, "b.jsonl", "{\"review\": \"a\", \"label\": 0}\n",
         "b.jsonl:1: no column 'body' (data.text_pair_column)"},
        {{.text_pair = "body"}, "b.csv", "review,body,label\na,b,0\n", "data.text_pair_column 'body' without "
                                                                       "data.text_column"},
        {{.text = " , "}, "b.csv", "review,label\na,0\n", "data.text_column: ' , ' names no column"},
        {{.text = "a,b,c,d,e,f,g,h,i"}, "b.csv", "a,b,c,d,e,f,g,h,i,label\n1,2,3,4,5,6,7,8,9,0\n",
         "data.text_column: at most 8 columns are joined"},
        {{.text = "review"}, "b.jsonl", "{\"review\": 5, \"label\": 0}\n", "b.jsonl:1: key 'review' is not a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(tmp(bad[i].file), bad[i].text);
        err[0] = 0;
        ds = ut_tsv_dataset_open(tmp(bad[i].file), &bad[i].c, v, 6, err, sizeof err);
        CHECK(!ds && strstr(err, bad[i].want), "case %zu: '%s', expected '%s'", i, err, bad[i].want);
        ut_dataset_free(ds);
    }
    /* the word vocabulary reads the named columns too; a train file without the named label is refused */
    write_text(tmp("vtrain.csv"), "stars,review\n1,zebra zebra\n0,yak\n");
    ut_text_columns vc = {.text = "review", .label = "stars"};
    ut_vocab *w = ut_vocab_build("word", tmp("vtrain.csv"), &vc, 1, err, sizeof err);
    CHECK(w && ut_vocab_size(w) == 4 && ut_vocab_num_classes(w) == 2, "vocabulary from review/stars: %s", err);
    ut_vocab_free(w);
    vc.label = "rating";
    CHECK(!ut_vocab_build("word", tmp("vtrain.csv"), &vc, 1, err, sizeof err) &&
              strstr(err, "vtrain.csv:1: no column 'rating' (data.label_column): the train file needs its labels"),
          "%s", err);
    ut_vocab_free(v);
}

/* The same examples from a TSV, a CSV (quoted commas, quotes, a newline,
 * CRLF, a blank line) and JSON Lines (numbers, keys of any kind besides,
 * a blank line); errors by the line an example starts on */
static void test_csv_and_jsonl(void) {
    ut_vocab *v = train_vocab();
    if (!v) return;
    write_text(tmp("same.tsv"), "idx\tsentence1\tsentence2\tlabel\n3\tthe cat, sat\ta \"dog\"\t0\n7\tdog\tcat sat\t2\n");
    write_text(tmp("same.csv"), "idx,sentence1,sentence2,label\r\n3,\"the cat, sat\",\"a \"\"dog\"\"\",0\r\n\r\n"
                                "7,dog,\"cat\nsat\",2\r\n");
    write_text(tmp("same.jsonl"), "{\"idx\": 3, \"sentence1\": \"the cat, sat\", \"sentence2\": \"a \\\"dog\\\"\", "
                                  "\"label\": 0}\n\n{\"idx\": 7, \"sentence1\": \"dog\", \"sentence2\": \"cat sat\", "
                                  "\"label\": 2.0, \"other\": [1, {\"x\": null}]}\n");
    /* one JSON array of objects (pandas' to_json(orient="records")): on one line (more examples than lines),
     * and spread over lines */
    write_text(tmp("same.json"), "[{\"idx\": 3, \"sentence1\": \"the cat, sat\", \"sentence2\": \"a \\\"dog\\\"\", "
                                 "\"label\": 0}, {\"idx\": 7, \"sentence1\": \"dog\", \"sentence2\": \"cat sat\", "
                                 "\"label\": 2}]");
    write_text(tmp("same2.json"), " \n[\n  {\"idx\": 3, \"sentence1\": \"the cat, sat\", \"sentence2\": \"a \\\"dog\\\"\", "
                                  "\"label\": 0},\n  {\"idx\": 7, \"sentence1\": \"dog\", \"sentence2\": \"cat sat\",\n"
                                  "   \"label\": 2}\n]\n");
    int32_t x[5][12], y[5][2];
    int64_t id[5][2], n[5];
    const char *files[5] = {"same.tsv", "same.csv", "same.jsonl", "same.json", "same2.json"};
    for (int f = 0; f < 5; f++) n[f] = read_all(tmp(files[f]), v, x[f], y[f], id[f], 2);
    CHECK(n[0] == 2 && y[0][0] == 0 && y[0][1] == 2 && id[0][1] == 7 && x[0][0] != x[0][6], "the TSV");
    for (int f = 1; f < 5; f++)
        CHECK(n[f] == 2 && !memcmp(x[f], x[0], sizeof x[0]) && !memcmp(y[f], y[0], sizeof y[0]) &&
                  !memcmp(id[f], id[0], sizeof id[0]), "%s gives the TSV's examples", files[f]);
    static const char *const bad[][3] = {
        {"bad.csv", "sentence,label\n\"multi\nline\",1\n\"open,0\n", "bad.csv:4: a quoted field is not closed"},
        {"bad.csv", "sentence,label\n\"a\"b,1\n", "bad.csv:2: 'b' after a closing quote"},
        {"bad.csv", "sentence,label\na,b,1\n", "bad.csv:2: too many commas: expected 2 comma-separated fields as in "
                                             "the header, got 3"},
        {"bad.csv", "sentence,label\n\"x\n2\",1\nbad,z\n", "bad.csv:4: bad label 'z'"},
        {"bad.csv", "id,label\n1,5\n", "bad.csv:1: no header: expected a first line naming the columns "
                                      "(comma-separated) 'sentence'"},
        {"bad.jsonl", "{\"sentence\": \"a\", \"label\": 1}\n{\"sentence\": \"b\"}\n", "bad.jsonl:2: no key 'label' "
                                                                                   "(the first line has it)"},
        {"bad.jsonl", "{\"sentence\": \"a\", \"label\": 1}\n[1]\n", "bad.jsonl:2: expected an object"},
        {"bad.jsonl", "{\"sentence\": \"a\", \"label\": 1}\n{\"sentence\": \"a\", \"label\": 1\n",
         "bad.jsonl:2: not valid JSON"},
        {"bad.jsonl", "{\"sentence\": \"a\", \"label\": 1} x\n", "bad.jsonl:1: not valid JSON (at byte 30 of the line)"},
        {"bad.jsonl", "{\"sentence\": 5, \"label\": 1}\n", "bad.jsonl:1: key 'sentence' is not a string (the text)"},
        {"bad.jsonl", "{\"sentence\": \"a\", \"label\": {\"x\": 1}}\n", "bad.jsonl:1: key 'label' is an object"},
        {"bad.jsonl", "{\"sentence\": \"a\", \"label\": [[1]]}\n", "an array holds strings and numbers (labels), not "
                                                               "arrays"},
        {"bad.jsonl", "{\"sentence\": \"a\", \"label\": 1.5}\n", "bad.jsonl:1: bad label '1.5'"},
        {"bad.jsonl", "{\"idx\": 3, \"label\": 1}\n", "bad.jsonl:1: no text key: expected an object with the "
                                                       "keys 'sentence'"},
        {"bad.json", "\n\n", "bad.json: no examples"},
        /* a JSON array: errors name the line an element starts on */
        {"bad.json", "[{\"sentence\": \"a [x], \\\"{\", \"label\": 1},\n {\"sentence\": \"b\"}]",
         "bad.json:2: no key 'label' (the first object has it)"},
        {"bad.json", "[\n{\"sentence\": \"a\", \"label\": 1},\n\n  [1]\n]", "bad.json:4: expected an object "
                                                                           "{\"sentence\": ..., \"label\": ...} (a "
                                                                           "JSON array of objects"},
        {"bad.json", "[\n{\"sentence\": \"a\", \"label\": 1},\n{\"sentence\": \"a\", \"label\": 1,}\n]",
         "bad.json:3: not valid JSON (at byte"},
        {"bad.json", "[{\"sentence\": \"a\", \"label\": 1}] x", "bad.json:1: not valid JSON (at byte 32 of the file)"},
        {"bad.json", " [ ] ", "bad.json: no examples (an empty array)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(tmp(bad[i][0]), bad[i][1]);
        CHECK(!ut_tsv_dataset_open(tmp(bad[i][0]), NULL, v, 6, err, sizeof err) && strstr(err, bad[i][2]), "case %zu: %s", i,
              err);
    }
    ut_vocab_free(v);
    /* the vocabulary builds from a CSV too */
    v = ut_vocab_build("word", tmp("same.csv"), NULL, 1, err, sizeof err);
    CHECK(v && ut_vocab_num_classes(v) == 3, "vocabulary of the CSV: %s", err);
    ut_vocab_free(v);
}

static void test_sst2_sample(void) {
    ut_vocab *v = ut_vocab_build("word", "data/sst2_sample/train.tsv", NULL, 1, err, sizeof err);
    CHECK(v && ut_vocab_num_classes(v) == 2 && ut_vocab_size(v) > 50, "%s", err);
    if (!v) return;
    const char *files[3] = {"data/sst2_sample/train.tsv", "data/sst2_sample/dev.tsv", "data/sst2_sample/test.tsv"};
    for (int k = 0; k < 3; k++) {
        ut_dataset *ds = ut_tsv_dataset_open(files[k], NULL, v, 32, err, sizeof err);
        CHECK(ds && ds->n >= 50, "%s", err);
        ut_dataset_free(ds);
    }
    ut_vocab_free(v);
}

/* ---------------------------------------------------------------- sampler */

/* One epoch over all ranks: marks each index seen; returns global batches. */
static int64_t run_epoch(int64_t n, int64_t lb, int world, uint64_t seed, int64_t epoch, bool drop,
                         int *seen) {
    int64_t batches = -1, idx[64];
    for (int r = 0; r < world; r++) {
        ut_sampler s;
        ut_sampler_init(&s, n, lb, r, world, seed, true, drop);
        ut_sampler_seek(&s, epoch, 0);
        int64_t b = 0;
        while (!ut_sampler_at_end(&s)) {
            int64_t c = ut_sampler_next(&s, idx);
            for (int64_t k = 0; k < c; k++) seen[idx[k]]++;
            b++;
        }
        CHECK(ut_sampler_next(&s, idx) == 0, "after the end");
        CHECK(batches < 0 || b == batches, "ranks disagree on batch count");
        CHECK(b == ut_sampler_batches_per_epoch(&s), "%lld vs %lld", (long long)b,
              (long long)ut_sampler_batches_per_epoch(&s));
        batches = b;
        ut_sampler_free(&s);
    }
    return batches;
}

static void test_sampler_coverage(void) {
    for (int world = 1; world <= 3; world++) {
        int seen[23] = {0};
        int64_t b = run_epoch(23, 4, world, 42, 0, false, seen);
        int once = 1;
        for (int i = 0; i < 23; i++) once &= seen[i] == 1;
        CHECK(once, "world %d: not every index exactly once", world);
        CHECK(b == (23 + 4 * world - 1) / (4 * world), "world %d: %lld batches", world, (long long)b);
        int seen2[23] = {0};
        b = run_epoch(23, 4, world, 42, 0, true, seen2);
        int total = 0;
        for (int i = 0; i < 23; i++) total += seen2[i];
        CHECK(b == 23 / (4 * world) && total == b * 4 * world, "world %d drop_last: %lld batches, %d seen",
              world, (long long)b, total);
    }
    /* world 3, local 4, n 18: the last global batch has 6 positions -> 4, 2, 0 */
    ut_sampler s;
    int64_t idx[4], counts[3];
    for (int r = 0; r < 3; r++) {
        ut_sampler_init(&s, 18, 4, r, 3, 1, true, false);
        ut_sampler_next(&s, idx);
        counts[r] = ut_sampler_next(&s, idx);
        CHECK(ut_sampler_at_end(&s), "rank %d", r);
        ut_sampler_free(&s);
    }
    CHECK(counts[0] == 4 && counts[1] == 2 && counts[2] == 0, "%lld %lld %lld", (long long)counts[0],
          (long long)counts[1], (long long)counts[2]);
}

/* The first n positions of epoch e's order with world 1. */
static void epoch_order(int64_t n, uint64_t seed, int64_t e, bool shuffle, int64_t *out) {
    ut_sampler s;
    ut_sampler_init(&s, n, n, 0, 1, seed, shuffle, false);
    ut_sampler_seek(&s, e, 0);
    ut_sampler_next(&s, out);
    ut_sampler_free(&s);
}

static void test_sampler_order(void) {
    int64_t a[50], b[50], c[50], d[50];
    epoch_order(50, 7, 0, true, a);
    epoch_order(50, 7, 1, true, b);
    epoch_order(50, 7, 0, true, c);
    epoch_order(50, 8, 0, true, d);
    CHECK(memcmp(a, b, sizeof a) != 0, "epochs 0 and 1 have the same order");
    CHECK(memcmp(a, c, sizeof a) == 0, "same seed, different order");
    CHECK(memcmp(a, d, sizeof a) != 0, "seeds 7 and 8 give the same order");
    epoch_order(50, 7, 3, false, a);
    int ident = 1;
    for (int i = 0; i < 50; i++) ident &= a[i] == i;
    CHECK(ident, "no shuffle: identity");

    /* next_epoch moves on; the order follows the epoch */
    ut_sampler s;
    ut_sampler_init(&s, 50, 50, 0, 1, 7, true, false);
    ut_sampler_next(&s, c);
    ut_sampler_next_epoch(&s);
    CHECK(s.epoch == 1 && s.cursor == 0, "next_epoch");
    ut_sampler_next(&s, c);
    CHECK(memcmp(b, c, sizeof b) == 0, "epoch 1 after next_epoch");
    ut_sampler_free(&s);
}

/* group_by_length: the epoch's order is the shuffled one cut into
 * megabatches, each longest first (ties in their shuffled order), with the
 * longest example at the front; a permutation, the same for the same epoch
 * and seed, another for another epoch. */
static void test_sampler_group_by_length(void) {
    enum { N = 103, M = 20 };
    int32_t len[N];
    for (int i = 0; i < N; i++) len[i] = (int32_t)((i * 37) % 11 + (i == 57 ? 40 : 0)); /* 57 is the longest */
    int64_t plain[N], grouped[N], again[N], next[N];
    epoch_order(N, 5, 2, true, plain);
    ut_sampler s;
    ut_sampler_init(&s, N, N, 0, 1, 5, true, false);
    ut_sampler_group_by_length(&s, len, M);
    ut_sampler_seek(&s, 2, 0);
    CHECK(ut_sampler_next(&s, grouped) == N, "one batch of the epoch");
    ut_sampler_seek(&s, 2, 0);
    ut_sampler_next(&s, again);
    ut_sampler_next_epoch(&s);
    ut_sampler_next(&s, next);
    ut_sampler_free(&s);
    CHECK(memcmp(grouped, again, sizeof grouped) == 0 && memcmp(grouped, next, sizeof grouped) != 0,
          "the same epoch, the same order; the next, another");
    CHECK(grouped[0] == 57, "the longest first: %lld", (long long)grouped[0]);
    int seen[N] = {0};
    for (int i = 0; i < N; i++) seen[grouped[i]]++;
    bool perm = true;
    for (int i = 0; i < N; i++) perm &= seen[i] == 1;
    CHECK(perm, "not a permutation");
    /* transformers' get_length_grouped_indices on the shuffled order: each
     * megabatch of M positions sorted longest first (stable), then the
     * first megabatch's head swapped with the head of the first megabatch
     * holding the longest */
    int64_t want[N], best = -1, best_at = 0;
    memcpy(want, plain, sizeof want);
    for (int64_t start = 0; start < N; start += M) {
        int64_t k = start + M < N ? M : N - start, *w = want + start;
        for (int64_t a = 1; a < k; a++) /* insertion sort: stable */
            for (int64_t b = a; b > 0 && len[w[b]] > len[w[b - 1]]; b--) {
                int64_t t = w[b];
                w[b] = w[b - 1];
                w[b - 1] = t;
            }
        if (len[w[0]] > best) best = len[w[0]], best_at = start;
    }
    int64_t t = want[0];
    want[0] = want[best_at];
    want[best_at] = t;
    CHECK(memcmp(grouped, want, sizeof want) == 0, "not transformers' grouping of the shuffled order");
    CHECK(best_at > 0, "the longest was in the first megabatch: the swap went untested");
}

static void test_sampler_seek_and_world(void) {
    ut_sampler a, b;
    int64_t ia[8], ib[8];
    ut_sampler_init(&a, 37, 3, 0, 1, 5, true, false);
    ut_sampler_init(&b, 37, 3, 0, 1, 5, true, false);
    ut_sampler_next_epoch(&a);
    for (int k = 0; k < 4; k++) ut_sampler_next(&a, ia);
    ut_sampler_seek(&b, a.epoch, a.cursor);
    int64_t na, nb, batches = 0;
    int same = 1;
    while ((na = ut_sampler_next(&a, ia)), (nb = ut_sampler_next(&b, ib)), na || nb) {
        same &= na == nb && !memcmp(ia, ib, (size_t)na * sizeof *ia);
        batches++;
    }
    CHECK(same && batches == 13 - 4, "seek: %lld remaining batches", (long long)batches);
    ut_sampler_free(&a);
    ut_sampler_free(&b);

    /* world 2 x local 4 sees the same global batches as world 1 x local 8 */
    ut_sampler w1, r0, r1;
    ut_sampler_init(&w1, 45, 8, 0, 1, 9, true, false);
    ut_sampler_init(&r0, 45, 4, 0, 2, 9, true, false);
    ut_sampler_init(&r1, 45, 4, 1, 2, 9, true, false);
    ut_sampler_seek(&w1, 2, 16);  /* resumed from a cursor saved by either */
    ut_sampler_seek(&r0, 2, 16);
    ut_sampler_seek(&r1, 2, 16);
    same = 1;
    for (int k = 0; k < 4; k++) {
        int64_t g[8], l[8];
        int64_t ng = ut_sampler_next(&w1, g), n0 = ut_sampler_next(&r0, l);
        int64_t n1 = ut_sampler_next(&r1, l + n0);
        same &= ng == n0 + n1 && !memcmp(g, l, (size_t)ng * sizeof *g);
    }
    CHECK(same && ut_sampler_at_end(&w1) && ut_sampler_at_end(&r0), "world 2 differs from world 1");
    ut_sampler_free(&w1);
    ut_sampler_free(&r0);
    ut_sampler_free(&r1);
}

/* ---------------------------------------------------------------- loader */

/* A user dataset: x = (i, -i) f32, y = i; get fails for index fail_at. */
typedef struct { int64_t fail_at; } toy;

static int toy_get(ut_dataset *ds, int64_t i, void *x, void *y, char *e, size_t n) {
    toy *t = ds->impl;
    if (i == t->fail_at) {
        snprintf(e, n, "toy: example %lld is broken", (long long)i);
        return -1;
    }
    ((float *)x)[0] = (float)i;
    ((float *)x)[1] = (float)-i;
    *(int32_t *)y = (int32_t)i;
    return 0;
}

static ut_dataset toy_dataset(int64_t n, toy *t) {
    return (ut_dataset){.name = "toy", .n = n, .x_ndim = 1, .x_ne = {2}, .x_dtype = UT_F32,
                        .y_dtype = UT_I32, .get = toy_get, .impl = t};
}

static void test_loader_matches_sampler(void) {
    toy t = {-1};
    ut_dataset ds = toy_dataset(30, &t);
    ut_sampler s, ref;
    ut_sampler_init(&s, 30, 4, 1, 2, 3, true, false);
    ut_sampler_init(&ref, 30, 4, 1, 2, 3, true, false);
    ut_loader *l = ut_loader_new(&ds, &s, 2);
    ut_batch b;
    int64_t idx[4];
    uint64_t allocs = 0;
    int same = 1;
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int k = 0; k < 4; k++) {
            int rc = ut_loader_next(l, &b, err, sizeof err);
            int64_t c = ut_sampler_next(&ref, idx);
            same &= rc == 1 && b.count == c && b.epoch == epoch && b.cursor_after == ref.cursor;
            for (int64_t j = 0; j < c && same; j++)
                same &= ((int32_t *)b.y)[j] == idx[j] && ((float *)b.x)[2 * j + 1] == (float)-idx[j] &&
                        b.idx[j] == idx[j];
            if (epoch == 0 && k == 0) allocs = ut_alloc_count();
        }
        CHECK(ut_loader_next(l, &b, err, sizeof err) == 0 && b.count == 0, "end of epoch %d", epoch);
        ut_sampler_next_epoch(&ref);
    }
    CHECK(same, "loader batches differ from the sampler's");
    CHECK(ut_alloc_count() == allocs, "%llu allocations while loading",
          (unsigned long long)(ut_alloc_count() - allocs));
    ut_loader_free(l);
    CHECK(s.epoch == 1 && ut_sampler_at_end(&s), "free after a 0 leaves the sampler at the end");
    ut_sampler_free(&s);
    ut_sampler_free(&ref);
}

static void test_loader_resume(void) {
    toy t = {-1};
    ut_dataset ds = toy_dataset(50, &t);
    ut_sampler a, b;
    ut_sampler_init(&a, 50, 3, 0, 1, 11, true, true);
    ut_sampler_init(&b, 50, 3, 0, 1, 11, true, true);
    ut_loader *la = ut_loader_new(&ds, &a, 4), *lb = ut_loader_new(&ds, &b, 3);
    ut_batch ba, bb;
    for (int k = 0; k < 5; k++) {
        ut_loader_next(la, &ba, err, sizeof err);
        ut_loader_next(lb, &bb, err, sizeof err);
    }
    ut_loader_free(lb);  /* mid-epoch, with batches read ahead */
    CHECK(b.epoch == 0 && b.cursor == 15, "stopped at %lld/%lld", (long long)b.epoch, (long long)b.cursor);
    lb = ut_loader_new(&ds, &b, 1);
    int same = 1, n = 0;
    while (ut_loader_next(la, &ba, err, sizeof err) == 1) {
        same &= ut_loader_next(lb, &bb, err, sizeof err) == 1 && ba.count == bb.count &&
                !memcmp(ba.y, bb.y, (size_t)ba.count * 4) && ba.cursor_after == bb.cursor_after;
        n++;
    }
    CHECK(same && n == 16 - 5, "resumed loader differs (%d batches)", n);
    CHECK(ut_loader_next(lb, &bb, err, sizeof err) == 0, "resumed loader's end");
    ut_loader_free(la);
    ut_loader_free(lb);
    ut_sampler_free(&a);
    ut_sampler_free(&b);
}

static void test_loader_error(void) {
    toy t = {7};
    ut_dataset ds = toy_dataset(20, &t);
    ut_sampler s;
    ut_sampler_init(&s, 20, 4, 0, 1, 0, false, false);
    ut_loader *l = ut_loader_new(&ds, &s, 2);
    ut_batch b;
    CHECK(ut_loader_next(l, &b, err, sizeof err) == 1, "first batch");
    CHECK(ut_loader_next(l, &b, err, sizeof err) == -1 && strstr(err, "example 7 is broken"), "%s", err);
    err[0] = 0;
    CHECK(ut_loader_next(l, &b, err, sizeof err) == -1 && strstr(err, "example 7"), "sticky: %s", err);
    ut_loader_free(l);
    CHECK(s.cursor == 4, "sampler after the last good batch: %lld", (long long)s.cursor);
    ut_sampler_free(&s);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ut_data_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    RUN(test_idx_fashion_mnist);
    RUN(test_idx_plain_equals_gz_and_dev_carve);
    RUN(test_idx_gzip_bomb);
    RUN(test_idx_errors);
    RUN(test_tokens);
    RUN(test_tokenize_round_trip);
    RUN(test_vocab_and_tsv);
    RUN(test_vocab_escapes_and_bytes);
    RUN(test_tsv_errors);
    RUN(test_tsv_nul_byte);
    RUN(test_tsv_columns);
    RUN(test_tsv_glue_layouts);
    RUN(test_csv_and_jsonl);
    RUN(test_named_columns);
    RUN(test_sst2_sample);
    RUN(test_sampler_coverage);
    RUN(test_sampler_order);
    RUN(test_sampler_group_by_length);
    RUN(test_sampler_seek_and_world);
    RUN(test_loader_matches_sampler);
    RUN(test_loader_resume);
    RUN(test_loader_error);
    remove_tmpdir();
    return TEST_SUMMARY();
}
