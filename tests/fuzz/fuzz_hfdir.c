/* Fuzz target: a Hugging Face model directory's config.json, through the
 * model registry as `model.pretrained` reads it (ut_model_create with
 * {pretrained: DIR}): the family's checks of model_type and the
 * architecture keys, its sizes and options, the model built from them (kept
 * under 64 MiB: ut_memory_limit), then the weights, of which the directory
 * holds none (an empty model.safetensors), so every input ends in a
 * refusal, and each must name the directory. Input: one byte choosing
 * model.name (gpt2, bert, roberta, bart, t5; with its task where it has
 * one), then the file. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "utrain/base.h"
#include "utrain/nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const names[] = {"gpt2", "bert", "roberta", "bart", "t5"};
    static const char *const tasks[] = {NULL, "sequence_classification", "seq2seq", "causal_lm"};
    uint8_t pick;
    fz_take(&data, &size, &pick, 1);
    const char *name = names[pick % 5], *task = tasks[(pick / 5) % 4];
    const char *dir = fz_path("model");
    char path[256];
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f || fclose(f) != 0) abort();
    ut_memory_limit((int64_t)64 << 20);
    ut_kv *opts = ut_kv_new();
    ut_kv_set(opts, "pretrained", dir);
    if (task) ut_kv_set(opts, "task", task);
    char err[1024] = "";
    ut_model *m = ut_model_create(name, opts, 1, err, sizeof err);
    if (m) {
        fprintf(stderr, "model %s built from a directory without weights\n", name);
        abort();
    }
    if (!strstr(err, dir)) {
        fprintf(stderr, "model %s: error message without the directory: '%s'\n", name, err);
        abort();
    }
    ut_kv_free(opts);
    return 0;
}
