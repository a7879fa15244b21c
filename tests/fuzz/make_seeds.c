/* Writes the binary seed inputs of the fuzz targets (safetensors,
 * checkpoint, idx, tokens, tsv, vocab) under tests/fuzz/<target>/corpus/;
 * run from the repository root by tests/fuzz/make_seeds.sh. Each seed is a
 * small valid file (or a near miss), with the option bytes each target takes
 * from the front of its input (see the target's comment). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "utrain/base.h"
#include "utrain/data.h"
#include "utrain/io.h"
#include "utrain/nn.h"
#include "utrain/optim.h"
#include "utrain/train.h"

#define DIE(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), exit(1))

static void put(const char *target, const char *name, const void *a, size_t na, const void *b,
                size_t nb) {
    char path[256];
    snprintf(path, sizeof path, "tests/fuzz/%s/corpus/%s", target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(a, 1, na, f) != na || (nb && fwrite(b, 1, nb, f) != nb) || fclose(f))
        DIE("%s: cannot write", path);
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) DIE("%s: cannot read", path);
    unsigned char *buf = malloc(1 << 20);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

/* Copies a file written by the library into the corpus, after a prefix. */
static void put_file(const char *target, const char *name, const void *prefix, size_t np,
                     const char *path) {
    size_t len;
    unsigned char *b = slurp(path, &len);
    put(target, name, prefix, np, b, len);
    free(b);
}

/* ---- safetensors ---- */

static void seed_safetensors(void) {
    static const float f32[6] = {1, -2, 3.5f, 0, 1e-30f, -0.0f};
    static const uint16_t half[4] = {0x3c00, 0xc000, 0x7c00, 0x0001};
    static const int64_t i64[2] = {-1, 1LL << 40};
    static const int32_t i32[3] = {7, -7, 0};
    ut_st_tensor t[6] = {
        {.dtype = UT_ST_F32, .ndim = 2, .shape = {2, 3}, .data = f32, .nbytes = 24},
        {.dtype = UT_ST_F16, .ndim = 1, .shape = {4}, .data = half, .nbytes = 8},
        {.dtype = UT_ST_BF16, .ndim = 2, .shape = {2, 2}, .data = half, .nbytes = 8},
        {.dtype = UT_ST_I64, .ndim = 1, .shape = {2}, .data = i64, .nbytes = 16},
        {.dtype = UT_ST_I32, .ndim = 0, .data = i32, .nbytes = 4},
        {.dtype = UT_ST_F32, .ndim = 2, .shape = {0, 3}, .data = f32, .nbytes = 0},
    };
    const char *names[6] = {"w", "half", "bf", "ids", "scalar", "empty"};
    const char *meta[] = {"format", "pt", "note", "a \"quoted\" \\ value\n", NULL};
    char err[512];
    const char *tmp = "tests/fuzz/safetensors/corpus/.tmp";
    struct { const char *name; int n; const char *const *meta; } files[] = {
        {"one_f32", 1, NULL}, {"all_dtypes", 6, meta}, {"no_tensors", 0, meta}};
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        if (ut_st_save(tmp, files[k].n, names, t, files[k].meta, err, sizeof err)) DIE("%s", err);
        put_file("safetensors", files[k].name, "", 0, tmp);
    }
    unlink(tmp);
    const char json[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}";
    unsigned char hdr[8] = {sizeof json - 1};
    unsigned char file[8 + sizeof json + 8];
    memcpy(file, hdr, 8);
    memcpy(file + 8, json, sizeof json - 1);
    memset(file + 8 + sizeof json - 1, 0x41, 8);
    put("safetensors", "overlapping", file, 8 + sizeof json - 1 + 8, NULL, 0);
}

/* ---- checkpoints of the target's MLP (3,4,2) and near misses ---- */

static ut_model *mlp(const char *sizes) {
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "sizes", sizes);
    char err[256];
    ut_model *m = ut_model_create("mlp", kv, 1, err, sizeof err);
    ut_kv_free(kv);
    if (!m) DIE("%s", err);
    return m;
}

static void ckpt(const char *name, const char *sizes, ut_optim_kind kind, float momentum,
                 bool with_optim) {
    ut_model *m = mlp(sizes);
    ut_optim_config c = ut_optim_defaults(kind);
    c.momentum = momentum;
    if (kind == UT_OPTIM_ADAFACTOR) c.beta1 = 0.9f; /* both of its states */
    ut_optim *o = ut_optim_new(&c, m->params.flat, m->params.flat_grad, m->params.segs, m->params.n, 0,
                               m->params.numel);
    for (int64_t i = 0; i < m->params.numel; i++) m->params.flat_grad[i] = 0.1f * (float)(i % 7) - 0.3f;
    ut_optim_step(o, 0.01f);
    ut_train_state st = {.step = 3, .epoch = 1, .cursor = 40, .rng = {1, 2, 3, 4},
                         .best_metric = 0.25, .best_step = 2, .bad_evals = 1, .config_hash = 0xabc};
    const char *tmp = "tests/fuzz/checkpoint/corpus/.tmp";
    char err[512];
    if (ut_ckpt_save(tmp, m, with_optim ? o : NULL, &st, err, sizeof err)) DIE("%s", err);
    put_file("checkpoint", name, "", 0, tmp);
    unlink(tmp);
    ut_optim_free(o);
    ut_model_free(m);
}

static void seed_checkpoint(void) {
    ckpt("adamw", "3,4,2", UT_OPTIM_ADAMW, 0, true);
    ckpt("sgd_momentum", "3,4,2", UT_OPTIM_SGD, 0.9f, true);
    ckpt("weights_only", "3,4,2", UT_OPTIM_ADAMW, 0, false);
    ckpt("other_shape", "3,5,2", UT_OPTIM_ADAMW, 0, true);
    ckpt("adafactor", "3,4,2", UT_OPTIM_ADAFACTOR, 0, true);
}

/* ---- IDX: 6 option bytes (images length LE32, lo, hi), images, labels ---- */

static size_t idx_file(unsigned char *b, uint32_t magic, int ndim, const uint32_t *dims,
                       int fill) {
    size_t at = 0, items = 1;
    for (int s = 24; s >= 0; s -= 8) b[at++] = (unsigned char)(magic >> s);
    for (int d = 0; d < ndim; d++) {
        for (int s = 24; s >= 0; s -= 8) b[at++] = (unsigned char)(dims[d] >> s);
        items *= dims[d];
    }
    for (size_t i = 0; i < items; i++) b[at++] = (unsigned char)(fill ? i * 37 : i % 10);
    return at;
}

static size_t gzip(unsigned char *out, size_t cap, const unsigned char *in, size_t n) {
    z_stream z = {0};
    if (deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) DIE("zlib");
    z.next_in = (unsigned char *)in;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) DIE("zlib");
    deflateEnd(&z);
    return cap - z.avail_out;
}

static void idx_seed(const char *name, uint32_t count, uint32_t h, uint32_t w, bool gz_images,
                     bool gz_labels, int lo, int hi) {
    unsigned char img[1024], lab[256], gi[1024], gl[512], buf[2048];
    uint32_t idims[3] = {count, h, w}, ldims[1] = {count};
    size_t ni = idx_file(img, 0x803, 3, idims, 1), nl = idx_file(lab, 0x801, 1, ldims, 0);
    const unsigned char *pi = img, *pl = lab;
    if (gz_images) ni = gzip(gi, sizeof gi, img, ni), pi = gi;
    if (gz_labels) nl = gzip(gl, sizeof gl, lab, nl), pl = gl;
    unsigned char opt[6] = {(unsigned char)ni, (unsigned char)(ni >> 8), 0, 0, (unsigned char)lo,
                            (unsigned char)hi};
    memcpy(buf, opt, 6);
    memcpy(buf + 6, pi, ni);
    memcpy(buf + 6 + ni, pl, nl);
    put("idx", name, buf, 6 + ni + nl, NULL, 0);
}

static void seed_idx(void) {
    idx_seed("plain", 3, 2, 2, false, false, 0, 255);
    idx_seed("gzip_both", 4, 3, 2, true, true, 1, 3);
    idx_seed("gzip_images", 2, 4, 4, true, false, 0, 2);
    idx_seed("bad_range", 2, 1, 1, false, false, 2, 1);
}

/* ---- tokens: seq_len - 1 and vocab_size - 1 (LE16 each), then the shard ---- */

static void tok_seed(const char *name, int seq_len, int vocab, uint32_t count, uint32_t say) {
    unsigned char buf[4 + 1024 + 512] = {0};
    buf[0] = (unsigned char)(seq_len - 1), buf[1] = (unsigned char)((seq_len - 1) >> 8);
    buf[2] = (unsigned char)(vocab - 1), buf[3] = (unsigned char)((vocab - 1) >> 8);
    const uint32_t head[3] = {20240520, 1, say};
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 4; b++) buf[4 + 4 * k + b] = (unsigned char)(head[k] >> (8 * b));
    for (uint32_t j = 0; j < count; j++) buf[4 + 1024 + 2 * j] = (unsigned char)(j * 11 % 97);
    put("tokens", name, buf, 4 + 1024 + 2 * count, NULL, 0);
}

static void seed_tokens(void) {
    tok_seed("ok", 4, 97, 40, 40);
    tok_seed("one_window", 9, 256, 10, 10);
    tok_seed("count_mismatch", 2, 97, 12, 13);
    tok_seed("token_too_big", 4, 50, 40, 40);
}

/* ---- tsv: kind|min_freq byte, max_len - 1 byte, then the file; vocab ---- */

static const char *const tsv_text[] = {
    "sentence\tlabel\nthe sequel is lovely and touching .\t1\nweak , dreadful pacing\t0\n",
    "idx\tsentence\tlabel\r\n0\tA Fine, FINE film!\t2\r\n\r\n1\tcaf\xc3\xa9 au lait\t0\r\n",
    "label\tsentence\n1\tno tab at the end\n0\t  \n",
    "sentence\tlabel\nmissing a field\n",
};

static void seed_tsv(void) {
    const unsigned char opts[][2] = {{0, 7}, {1, 3}, {2, 31}, {0, 0}};
    char name[32], err[512];
    for (size_t k = 0; k < sizeof tsv_text / sizeof tsv_text[0]; k++) {
        snprintf(name, sizeof name, "text%zu", k);
        put("tsv", name, opts[k], 2, tsv_text[k], strlen(tsv_text[k]));
    }
    const char *tmp = "tests/fuzz/vocab/corpus/.tmp", *tsv = "tests/fuzz/vocab/corpus/.tsv";
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(tsv, "w");
        fputs(tsv_text[k], f);
        fclose(f);
        ut_vocab *v = ut_vocab_build(k ? "byte" : "word", tsv, NULL, 1, err, sizeof err);
        if (!v || ut_vocab_save(v, tmp, err, sizeof err)) DIE("%s", err);
        put_file("vocab", k ? "byte" : "word", "", 0, tmp);
        ut_vocab_free(v);
    }
    unlink(tmp);
    unlink(tsv);
}

int main(void) {
    seed_safetensors();
    seed_checkpoint();
    seed_idx();
    seed_tokens();
    seed_tsv();
    return 0;
}
