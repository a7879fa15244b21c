/* Fuzz target: TSV text (SST-2 layout) through ut_vocab_build and
 * ut_tsv_dataset_open; a vocabulary that builds is also saved and loaded
 * back, which must give the same size and classes. With bit 3 the file is
 * read as a regression's instead (its labels scores, as the pretrained
 * tokenizers' datasets read them with num_labels 1): every score read is
 * finite; with bit 4 as classes that may be names: integer labels are
 * >= 0, names are not empty, and a file ut_tsv_label_kind calls a
 * regression's reads as one; with bit 5 as a multi-label task's lists
 * of labels (ut_tsv_dataset_open_multilabel, a small WordPiece vocabulary
 * as the tokenizer; bits 1-2 the label count, 0 from the file): every y is
 * 0 or 1, names are not empty and hold no comma, and the file opened again
 * with its own names gives the same labels (the labels' memory capped at
 * 256 MiB: a label 777777770 is refused by the memory check). Input layout: 1 byte (bit 0:
 * byte tokenizer, else word; bits 1-2: min_freq - 1; bit 3: scores; bit 4:
 * names; bit 5: lists; bits 6-7: the file's kind, 1 CSV, 2 JSON Lines,
 * 3 CSV read with named columns (NAMED: two text columns joined, a pair,
 * a label), else TSV), 1 byte max_len - 1, then the file. */
#include <string.h>

#include <math.h>

#include <cjson/cJSON.h>

#include "fuzz_data.h"
#include "../../src/data/data_internal.h"

/* kind 3's columns */
static const ut_text_columns NAMED = {.text = "a, b", .text_pair = "c", .label = "y", .delimiter = " | "};

static void labels(const char *path, int mode, const ut_text_columns *cols) {
    ut__tsv t;
    char err[1024] = "";
    if (ut__tsv_read(path, mode, cols, &t, err, sizeof err)) {
        fz_check_err(err, path);
        return;
    }
    for (int64_t k = 0; k < t.n; k++) {
        if (mode == UT__TSV_SCORES && !isfinite(t.score[k])) abort();
        if (mode == UT__TSV_NAMES && t.labeled && (t.names ? !t.label_text[k][0] : t.label[k] < 0)) abort();
    }
    ut__tsv_free(&t);
    /* a file that reads: whether its labels make a regression, and a file of scores reads as one */
    int kind = ut_tsv_label_kind(path, cols, err, sizeof err), real = kind == UT_LABELS_SCORES;
    if (kind < 0 || kind > UT_LABELS_LISTS) abort();
    if (real && ut__tsv_read(path, UT__TSV_SCORES, cols, &t, err, sizeof err)) {
        fprintf(stderr, "labels that are real numbers do not read as scores: %s\n", err);
        abort();
    }
    if (real) ut__tsv_free(&t);
}

/* the multi-label datasets' tokenizer: a few WordPiece tokens */
static ut_tokenizer *tokenizer(void) {
    static ut_tokenizer *tok;
    if (!tok) {
        const char *vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\na\nfilm\n##s\n,\n.\n";
        const char *path = fz_write("vocab.txt", (const uint8_t *)vocab, strlen(vocab));
        char err[512];
        tok = ut_tokenizer_load(path, err, sizeof err);
        if (!tok) {
            fprintf(stderr, "the fuzz vocabulary does not load: %s\n", err);
            abort();
        }
    }
    return tok;
}

/* y of example i (K labels) into out; aborts unless each is 0 or 1 */
static void labels_of(ut_dataset *ds, int64_t i, int32_t *x, int32_t *out) {
    char err[512];
    if (ds->get(ds, i, x, out, err, sizeof err)) abort();
    for (int64_t k = 0; k < ds->num_classes; k++)
        if (out[k] != 0 && out[k] != 1) abort();
}

static void multi_label(const char *path, const ut_text_columns *cols, int64_t count, int64_t max_len) {
    char err[1024] = "";
    ut_memory_limit((int64_t)256 << 20); /* a label 777777770: refused, not allocated */
    ut_dataset *ds = ut_tsv_dataset_open_multilabel(path, cols, tokenizer(), max_len, NULL, count, err, sizeof err);
    if (!ds) {
        fz_check_err(err, path);
        return;
    }
    int64_t K = ds->num_classes;
    if (!ds->multi_label || K < 1 || ds->y_ne[0] != K || (count && K != count)) abort();
    for (int64_t k = 0; ds->label_names && k < K; k++)
        if (!ds->label_names[k][0] || strchr(ds->label_names[k], ',')) abort();
    ut_dataset *again = ds->label_names ? ut_tsv_dataset_open_multilabel(path, cols, tokenizer(), max_len, ds->label_names,
                                                                         K, err, sizeof err)
                                        : NULL;
    if (ds->label_names && (!again || again->num_classes != K)) {
        fprintf(stderr, "a file does not open with its own names: %s\n", err);
        abort();
    }
    int32_t *x = ut_malloc_check((size_t)(3 * max_len) * sizeof *x), *a = ut_malloc_check((size_t)K * sizeof *a),
            *b = ut_malloc_check((size_t)K * sizeof *b);
    for (int64_t i = 0; i < ds->n; i++) {
        labels_of(ds, i, x, a);
        if (again) {
            labels_of(again, i, x, b);
            if (memcmp(a, b, (size_t)K * sizeof *a)) abort();
        }
    }
    ut_free(x);
    ut_free(a);
    ut_free(b);
    if (again) ut_dataset_free(again);
    fz_read_ends(ds);
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

/* A file that is one JSON array: the element lines counted as cJSON counts the elements */
static void array_lines(const uint8_t *data, size_t size) {
    char *s = ut_malloc_check(size + 1);
    memcpy(s, data, size);
    s[size] = 0;
    const char *end = NULL;
    cJSON *a = s[strspn(s, " \t\r\n")] == '[' ? cJSON_ParseWithOpts(s, &end, false) : NULL;
    if (a && cJSON_IsArray(a) && !end[strspn(end, " \t\r\n")] &&
        ut__json_array_lines(s, NULL, 0) != cJSON_GetArraySize(a)) {
        fprintf(stderr, "%lld element lines, %d elements\n", (long long)ut__json_array_lines(s, NULL, 0),
                cJSON_GetArraySize(a));
        abort();
    }
    cJSON_Delete(a);
    ut_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t opt[2];
    fz_take(&data, &size, opt, sizeof opt);
    array_lines(data, size);
    const char *kind = opt[0] & 1 ? "byte" : "word";
    int64_t min_freq = 1 + (opt[0] >> 1 & 3), max_len = 1 + opt[1];
    static const char *const names[4] = {"train.tsv", "train.csv", "train.jsonl", "train.csv"};
    const char *path = fz_write(names[opt[0] >> 6], data, size);
    const ut_text_columns *cols = opt[0] >> 6 == 3 ? &NAMED : NULL;
    if (opt[0] & 32) {
        multi_label(path, cols, opt[0] >> 1 & 3, 2 + (max_len & 15));
        return 0;
    }
    if (opt[0] & 24) {
        labels(path, opt[0] & 8 ? UT__TSV_SCORES : UT__TSV_NAMES, cols);
        return 0;
    }
    char err[1024] = "";
    ut_vocab *v = ut_vocab_build(kind, path, cols, min_freq, err, sizeof err);
    if (!v) {
        fz_check_err(err, path);
        return 0;
    }
    round_trip(v);
    ut_dataset *ds = ut_tsv_dataset_open(path, cols, v, max_len, err, sizeof err);
    if (!ds) {
        fprintf(stderr, "the file the vocabulary was built from does not open: %s\n", err);
        abort();
    }
    fz_read_ends(ds);
    ut_vocab_free(v);
    return 0;
}
