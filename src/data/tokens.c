/* Token shards in the llm.c .bin layout, and the byte tokenizer that writes
 * them. A shard is 256 little-endian int32 (magic, version, token count,
 * unused) followed by count little-endian uint16 tokens. Shards are mapped
 * read-only and checked completely at open (header, size, every token).
 *
 * Examples are windows of seq_len + 1 consecutive tokens at stride seq_len + 1
 * within one shard: windows never cross a shard boundary, and the tokens after
 * a shard's last whole window are not used. Example order is shard order
 * (sorted file names), then position. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_internal.h"
#include "utrain/base.h"

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_BYTES 1024

typedef struct {
    char *path;
    const unsigned char *map;
    size_t map_len;
    int64_t first;   /* index of this shard's first window */
} shard;

typedef struct {
    shard *shards;
    int nshards;
    int64_t seq_len;
} tok_impl;

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int32_t tok_at(const unsigned char *map, int64_t j) {
    const unsigned char *p = map + SHARD_HEADER_BYTES + 2 * j;
    return (int32_t)(p[0] | p[1] << 8);
}

/* Checks the header against the size and every token against vocab_size;
 * returns the token count or -1. */
static int64_t check_shard(const char *path, const unsigned char *m, size_t len,
                           int64_t vocab_size, char *err, size_t n) {
    if (len == 0) return ut_errorf(err, n, "%s: empty file", path);
    if (len < SHARD_HEADER_BYTES)
        return ut_errorf(err, n, "%s: truncated at byte offset %zu: the header needs %d bytes",
                            path, len, SHARD_HEADER_BYTES);
    if (le32(m) != SHARD_MAGIC)
        return ut_errorf(err, n, "%s: byte offset 0: bad magic %u (expected %d)", path,
                            le32(m), SHARD_MAGIC);
    if (le32(m + 4) != SHARD_VERSION)
        return ut_errorf(err, n, "%s: byte offset 4: unsupported version %u (expected %d)",
                            path, le32(m + 4), SHARD_VERSION);
    int64_t count = (int32_t)le32(m + 8);
    if (count <= 0)
        return ut_errorf(err, n, "%s: byte offset 8: token count %lld (empty shard)", path,
                            (long long)count);
    size_t need = SHARD_HEADER_BYTES + 2 * (size_t)count;
    if (len != need)
        return ut_errorf(err, n, "%s: %s at byte offset %zu: the header's %lld tokens need %zu bytes",
                            path, len < need ? "truncated" : "trailing bytes", len < need ? len : need,
                            (long long)count, need);
    for (int64_t j = 0; j < count; j++)
        if (tok_at(m, j) >= vocab_size)
            return ut_errorf(err, n, "%s: byte offset %lld: token %d >= vocab_size %lld", path,
                                (long long)(SHARD_HEADER_BYTES + 2 * j), tok_at(m, j),
                                (long long)vocab_size);
    return count;
}

/* Maps and checks one shard; returns its token count or -1. */
static int64_t map_shard(shard *sh, int64_t vocab_size, char *err, size_t n) {
    int fd = ut_open_regular(sh->path, err, n);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return ut_errorf(err, n, "%s: cannot stat: %s", sh->path, strerror(errno));
    }
    sh->map_len = (size_t)st.st_size;
    if (sh->map_len > 0) {
        void *p = mmap(NULL, sh->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return ut_errorf(err, n, "%s: mmap failed: %s", sh->path, strerror(errno));
        }
        sh->map = p;
    }
    close(fd);
    return check_shard(sh->path, sh->map, sh->map_len, vocab_size, err, n);
}

/* The shard holding window i: the last one whose first window is <= i. */
static const shard *find_shard(const tok_impl *t, int64_t i) {
    int lo = 0, hi = t->nshards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t->shards[mid].first <= i) lo = mid;
        else hi = mid - 1;
    }
    return &t->shards[lo];
}

static int tok_get(ut_dataset *ds, int64_t i, void *x, void *y, char *err, size_t n) {
    tok_impl *t = ds->impl;
    if (i < 0 || i >= ds->n)
        return ut_errorf(err, n, "%s: example %lld out of range [0, %lld)", ds->name,
                            (long long)i, (long long)ds->n);
    const shard *sh = find_shard(t, i);
    int64_t start = (i - sh->first) * (t->seq_len + 1);
    int32_t *xi = x, *yi = y;
    for (int64_t j = 0; j < t->seq_len; j++) {
        xi[j] = tok_at(sh->map, start + j);
        yi[j] = tok_at(sh->map, start + j + 1);
    }
    return 0;
}

static void tok_free(ut_dataset *ds) {
    tok_impl *t = ds->impl;
    for (int k = 0; k < t->nshards; k++) {
        if (t->shards[k].map) munmap((void *)t->shards[k].map, t->shards[k].map_len);
        ut_free(t->shards[k].path);
    }
    ut_free(t->shards);
    ut_free(t);
    ut_free((char *)ds->name);
    ut_free(ds);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Expands pattern into t->shards, sorted by name (strcmp, not the locale). */
static int glob_shards(tok_impl *t, const char *pattern, char *err, size_t n) {
    glob_t g;
    int rc = glob(pattern, GLOB_ERR, NULL, &g);
    if (rc != 0) {
        if (rc != GLOB_NOMATCH) globfree(&g);
        return ut_errorf(err, n, "%s: %s", pattern,
                            rc == GLOB_NOMATCH ? "no file matches" : "cannot read a directory");
    }
    qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), cmp_str);
    t->nshards = (int)g.gl_pathc;
    t->shards = ut_calloc_check(g.gl_pathc, sizeof(shard));
    for (size_t k = 0; k < g.gl_pathc; k++) t->shards[k].path = ut__data_strdup(g.gl_pathv[k]);
    globfree(&g);
    return 0;
}

/* Maps every shard and numbers the windows; returns the window count or -1. */
static int64_t index_shards(tok_impl *t, int64_t vocab_size, char *err, size_t n) {
    int64_t windows = 0;
    for (int k = 0; k < t->nshards; k++) {
        int64_t count = map_shard(&t->shards[k], vocab_size, err, n);
        if (count < 0) return -1;
        t->shards[k].first = windows;
        windows += count / (t->seq_len + 1);
    }
    return windows;
}

ut_dataset *ut_token_dataset_open(const char *pattern, int64_t seq_len, int64_t vocab_size,
                                  char *err, size_t n) {
    if (seq_len < 1 || vocab_size < 1 || vocab_size > 65536) {
        ut_errorf(err, n, "%s: need seq_len >= 1 and vocab_size in [1, 65536] (got %lld, %lld)",
                     pattern, (long long)seq_len, (long long)vocab_size);
        return NULL;
    }
    ut_dataset *ds = ut_calloc_check(1, sizeof *ds);
    tok_impl *t = ut_calloc_check(1, sizeof *t);
    t->seq_len = seq_len;
    *ds = (ut_dataset){.name = ut__data_strdup(pattern), .x_ndim = 1, .x_ne = {seq_len},
                       .y_ndim = 1, .y_ne = {seq_len}, .x_dtype = UT_I32, .y_dtype = UT_I32,
                       .vocab_size = vocab_size, .get = tok_get, .free = tok_free, .impl = t};
    if (glob_shards(t, pattern, err, n) == 0 && (ds->n = index_shards(t, vocab_size, err, n)) == 0)
        ut_errorf(err, n, "%s: no shard has %lld tokens (one window of seq_len + 1)", pattern,
                     (long long)(seq_len + 1));
    if (ds->n <= 0) {
        tok_free(ds);
        return NULL;
    }
    return ds;
}

/* ---- tokenizer: writes one shard atomically (temp file, fsync, rename) ---- */

static int write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int write_shard(int fd, const uint16_t *tokens, size_t count) {
    unsigned char hdr[SHARD_HEADER_BYTES] = {0}, chunk[8192];
    const uint32_t head[3] = {SHARD_MAGIC, SHARD_VERSION, (uint32_t)count};
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 4; b++) hdr[4 * k + b] = (unsigned char)(head[k] >> (8 * b));
    if (write_all(fd, hdr, sizeof hdr)) return -1;
    for (size_t i = 0; i < count; i += sizeof chunk / 2) {
        size_t m = count - i < sizeof chunk / 2 ? count - i : sizeof chunk / 2;
        for (size_t j = 0; j < m; j++) {
            chunk[2 * j] = (unsigned char)(tokens[i + j] & 0xff);
            chunk[2 * j + 1] = (unsigned char)(tokens[i + j] >> 8);
        }
        if (write_all(fd, chunk, 2 * m)) return -1;
    }
    return fsync(fd);
}

/* fsync of the directory holding path, so the rename itself is durable
 * (best effort: the file's own data is already synced). */
static void sync_dir(const char *path) {
    char *dir = ut__data_strdup(path[0] ? path : ".");
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else slash[slash == dir] = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    ut_free(dir);
}

/* The byte tokenizer: one token per byte. */
static uint16_t *byte_tokens(const char *input, size_t *count, char *err, size_t n) {
    unsigned char *bytes = ut__read_file(input, count, err, n);
    if (!bytes) return NULL;
    uint16_t *tok = ut_malloc_check((*count ? *count : 1) * sizeof *tok);
    for (size_t i = 0; i < *count; i++) tok[i] = bytes[i];
    ut_free(bytes);
    return tok;
}

/* A pretrained tokenizer (directory or file) over the whole text at once,
 * without special tokens; ids must fit the shard's uint16. */
static uint16_t *pretrained_tokens(const char *path, const char *input, size_t *count, char *err, size_t n) {
    ut_tokenizer *t = ut_tokenizer_load(path, err, n);
    if (!t) return NULL;
    size_t len;
    char *text = NULL;
    uint16_t *tok = NULL;
    if (ut_tokenizer_vocab_size(t) > 65536) {
        ut_errorf(err, n, "%s: %lld tokens do not fit the shards' uint16 ids", path,
                  (long long)ut_tokenizer_vocab_size(t));
    } else if ((text = (char *)ut__read_file(input, &len, err, n))) {
        const char *nul = memchr(text, 0, len);
        ut_tok_encoding e = {0};
        ut_tok_opts o = {.no_special = true};
        if (nul) {
            ut_errorf(err, n, "%s: byte %zu: a NUL byte: not a text file", input, (size_t)(nul - text));
        } else if (ut_tokenizer_encode(t, text, NULL, &o, &e, err, n) == 0) {
            tok = ut_malloc_check((size_t)(e.len ? e.len : 1) * sizeof *tok);
            for (int64_t i = 0; i < e.len; i++) tok[i] = (uint16_t)e.ids[i];
            *count = (size_t)e.len;
        } else {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            ut_errorf(err, n, "%s: %s", input, why);
        }
        ut_tok_encoding_free(&e);
    }
    ut_free(text);
    ut_tokenizer_free(t);
    return tok;
}

int ut_tokenize_file(const char *tokenizer, const char *input, const char *output, char *err,
                     size_t n) {
    size_t len = 0;
    if (strcmp(tokenizer, "byte") && access(tokenizer, F_OK) != 0)
        return ut_errorf(err, n, "unknown tokenizer '%s' (known: byte, or the directory or file of a "
                         "pretrained tokenizer, e.g. data/pretrained/gpt2-bpe)", tokenizer);
    uint16_t *tokens = !strcmp(tokenizer, "byte") ? byte_tokens(input, &len, err, n)
                                                  : pretrained_tokens(tokenizer, input, &len, err, n);
    if (!tokens) return -1;
    if (len == 0 || len > INT32_MAX) {
        ut_free(tokens);
        return ut_errorf(err, n, "%s: %s", input,
                         len ? "more than 2^31-1 tokens: split it into several shards" : "empty file");
    }
    size_t tmp_len = strlen(output) + 16;
    char *tmp = ut_malloc_check(tmp_len);
    snprintf(tmp, tmp_len, "%s.tmp.XXXXXX", output);
    int fd = mkstemp(tmp), rc = -1, wrc = -1;
    if (fd >= 0) {
        wrc = write_shard(fd, tokens, len) || fchmod(fd, 0644);
        if (close(fd) != 0) wrc = -1;
    }
    if (fd < 0) {
        ut_errorf(err, n, "%s: cannot create a temporary file: %s", output, strerror(errno));
    } else if (wrc != 0) {
        ut_errorf(err, n, "%s: write failed: %s", tmp, strerror(errno));
        unlink(tmp);
    } else if (rename(tmp, output) != 0) {
        ut_errorf(err, n, "%s: cannot rename to %s: %s", tmp, output, strerror(errno));
        unlink(tmp);
    } else {
        sync_dir(output);
        rc = 0;
    }
    ut_free(tmp);
    ut_free(tokens);
    return rc;
}
