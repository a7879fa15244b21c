/* Fuzz target: TSV text (SST-2 layout) through ut_vocab_build and
 * ut_tsv_dataset_open; a vocabulary that builds is also saved and loaded
 * back, which must give the same size and classes. With bit 3 the file is
 * read as a regression's instead (its labels scores, as the pretrained
 * tokenizers' datasets read them with num_labels 1): every score read is
 * finite; with bit 4 as classes that may be names: integer labels are
 * >= 0, names are not empty. Input layout: 1 byte (bit 0: byte tokenizer,
 * else word; bits 1-2: min_freq - 1; bit 3: scores; bit 4: names), 1 byte
 * max_len - 1, then the file. */
#include <math.h>

#include "fuzz_data.h"
#include "../../src/data/data_internal.h"

static void labels(const char *path, int mode) {
    ut__tsv t;
    char err[1024] = "";
    if (ut__tsv_read(path, mode, &t, err, sizeof err)) {
        fz_check_err(err, path);
        return;
    }
    for (int64_t k = 0; k < t.n; k++) {
        if (mode == UT__TSV_SCORES && !isfinite(t.score[k])) abort();
        if (mode == UT__TSV_NAMES && t.labeled && (t.names ? !t.label_text[k][0] : t.label[k] < 0)) abort();
    }
    ut__tsv_free(&t);
}

static void round_trip(const ut_vocab *v) {
    const char *path = fz_path("vocab.txt");
    char err[1024];
    if (ut_vocab_save(v, path, err, sizeof err) != 0) abort();
    ut_vocab *back = ut_vocab_load(path, err, sizeof err);
    if (!back) {
        fprintf(stderr, "a saved vocabulary does not load: %s\n", err);
        abort();
    }
    if (ut_vocab_size(back) != ut_vocab_size(v) || ut_vocab_num_classes(back) != ut_vocab_num_classes(v))
        abort();
    ut_vocab_free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t opt[2];
    fz_take(&data, &size, opt, sizeof opt);
    const char *kind = opt[0] & 1 ? "byte" : "word";
    int64_t min_freq = 1 + (opt[0] >> 1 & 3), max_len = 1 + opt[1];
    const char *path = fz_write("train.tsv", data, size);
    if (opt[0] & 24) {
        labels(path, opt[0] & 8 ? UT__TSV_SCORES : UT__TSV_NAMES);
        return 0;
    }
    char err[1024] = "";
    ut_vocab *v = ut_vocab_build(kind, path, min_freq, err, sizeof err);
    if (!v) {
        fz_check_err(err, path);
        return 0;
    }
    round_trip(v);
    ut_dataset *ds = ut_tsv_dataset_open(path, v, max_len, err, sizeof err);
    if (!ds) {
        fprintf(stderr, "the file the vocabulary was built from does not open: %s\n", err);
        abort();
    }
    fz_read_ends(ds);
    ut_vocab_free(v);
    return 0;
}
