/* Fuzz target: the checkpoint loader (ut_ckpt_load) into a small MLP with
 * AdamW, and with Adafactor (its factored state sized by the shapes). A random file rarely carries the right CRC, so every input that the
 * safetensors reader accepts is also resealed: its tensors and utrain
 * metadata are written again with the checksum the documented rule gives
 * (docs/checkpoints.md, computed here independently), and that file is loaded
 * too, so the metadata and shape checks behind the checksum get fuzzed. A
 * rejected file must say why, naming the file. */
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>
#include <zlib.h>

#include "fuzz.h"
#include "utrain/base.h"
#include "utrain/io.h"
#include "utrain/nn.h"
#include "utrain/optim.h"
#include "utrain/train.h"

static const char *const utrain_keys[] = {
    "model.type", "optim.state", "optim.steps", "train.bad_evals", "train.best_metric",
    "train.best_step", "train.config_hash", "train.cursor", "train.epoch", "train.rng",
    "train.step", "utrain.format",   /* sorted, as the checksum takes them */
};
#define NKEYS (int)(sizeof utrain_keys / sizeof utrain_keys[0])

static ut_model *model;
static ut_optim *optim, *optim_af;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "sizes", "3,4,2");
    char err[256];
    model = ut_model_create("mlp", kv, 1, err, sizeof err);
    ut_kv_free(kv);
    if (!model) abort();
    ut_optim_config c = ut_optim_defaults(UT_OPTIM_ADAMW);
    optim = ut_optim_new(&c, model->params.flat, model->params.flat_grad, model->params.segs,
                         model->params.n, 0, model->params.numel);
    c = ut_optim_defaults(UT_OPTIM_ADAFACTOR);
    c.beta1 = 0.9f;
    optim_af = ut_optim_new(&c, model->params.flat, model->params.flat_grad, model->params.segs, model->params.n, 0,
                            model->params.numel);
    return 0;
}

static uLong crc_str(uLong crc, const char *s) { return crc32(crc, (const Bytef *)s, (uInt)strlen(s) + 1); }

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The checksum of f's tensors (names sorted) under the metadata kv. */
static void seal(const ut_st_file *f, const char **names, int nt, const char **kv, char out[16]) {
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int i = 0; kv[2 * i]; i++) crc = crc_str(crc_str(crc, kv[2 * i]), kv[2 * i + 1]);
    for (int i = 0; i < nt; i++) {
        const ut_st_tensor *t = ut_st_get(f, names[i]);
        char dims[UT_ST_MAX_DIMS * 22] = "";
        for (int d = 0, at = 0; d < t->ndim; d++)
            at += snprintf(dims + at, sizeof dims - (size_t)at, "%s%" PRId64, d ? "," : "", t->shape[d]);
        crc = crc_str(crc_str(crc_str(crc, names[i]), ut_st_dtype_name(t->dtype)), dims);
        if (t->nbytes) crc = crc32(crc, t->data, (uInt)t->nbytes);  /* NULL data resets a crc */
    }
    snprintf(out, 16, "%08" PRIx32, (uint32_t)crc);
}

/* f rewritten to dir/resealed.safetensors with a valid checksum; its path,
 * or NULL when the reader or writer refuses it. */
static const char *reseal(const char *path) {
    char err[1024];
    ut_st_file *f = ut_st_open(path, err, sizeof err);
    if (!f) return NULL;
    int nt = ut_st_count(f);
    const char **names = ut_malloc_check((size_t)(nt + 1) * sizeof *names);
    ut_st_tensor *ts = ut_malloc_check((size_t)(nt + 1) * sizeof *ts);
    for (int i = 0; i < nt; i++) names[i] = ut_st_name(f, i);
    qsort(names, (size_t)nt, sizeof *names, cmp_str);
    for (int i = 0; i < nt; i++) ts[i] = *ut_st_get(f, names[i]);
    const char *kv[2 * NKEYS + 3];
    int nm = 0;
    for (int k = 0; k < NKEYS; k++)
        if (ut_st_meta(f, utrain_keys[k])) {
            kv[2 * nm] = utrain_keys[k];
            kv[2 * nm + 1] = ut_st_meta(f, utrain_keys[k]);
            nm++;
        }
    kv[2 * nm] = NULL;
    char sum[16];
    seal(f, names, nt, kv, sum);
    kv[2 * nm] = "utrain.checksum";
    kv[2 * nm + 1] = sum;
    kv[2 * nm + 2] = NULL;
    const char *out = fz_path("resealed.safetensors");
    if (ut_st_save(out, nt, names, ts, kv, err, sizeof err) != 0) out = NULL;
    ut_free(names);
    ut_free(ts);
    ut_st_close(f);
    return out;
}

static void load(const char *path) {
    char err[1024] = "";
    ut_train_state st;
    if (ut_ckpt_load(path, model, optim, &st, err, sizeof err) != 0) fz_check_err(err, path);
    if (ut_ckpt_load(path, model, optim_af, &st, err, sizeof err) != 0) fz_check_err(err, path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_write("step_00000001.safetensors", data, size);
    load(path);
    const char *sealed = reseal(path);
    if (sealed) load(sealed);
    return 0;
}
