/* Fuzz target: pairs of texts through ut_seq2seq_dataset_open in its four
 * layouts (FlagAI's parallel source and target files, TSV, JSON Lines, CSV) with
 * a small WordPiece tokenizer this file writes. A dataset that opens is
 * read at both ends (fz_read_ends), its texts fetched and a batch of its
 * first examples trimmed, its columns named (ds->columns); one that
 * does not must say why naming one of its files. Input: 1 byte of options
 * (bits 0-1: the layout, 0 parallel files (a 0x1f byte splits the sources
 * from the targets), 1 .tsv, 2 .jsonl, 3 .csv; bit 2: lower-case; bit 3: a
 * source prefix; bit 4: the fields named "source" and "target", else the
 * defaults (those columns, else the first two); bit 5: with bit 4, the
 * nested JSON keys "translation.en" and "translation.ro"), 1 byte
 * max_source_len - 2, 1 byte max_target_len - 2, then the file(s). */
#include "fuzz_data.h"

static ut_tokenizer *tok;

static void make_tokenizer(void) {
    static const char *const words[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "film", "plot",
                                        "##ing", "good", "bad", ",", ".", "!", "source", "target", "é"};
    const char *path = fz_path("vocab.txt");
    FILE *f = fopen(path, "w");
    if (!f) abort();
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) fprintf(f, "%s\n", words[i]);
    for (char c = 'a'; c <= 'z'; c++) fprintf(f, "%c\n##%c\n", c, c);
    fclose(f);
    char err[512];
    if (!(tok = ut_tokenizer_load(path, err, sizeof err))) {
        fprintf(stderr, "the target's own tokenizer does not load: %s\n", err);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok) make_tokenizer();
    uint8_t opt[3];
    fz_take(&data, &size, opt, sizeof opt);
    int layout = opt[0] & 3;
    bool named = opt[0] >> 4 & 1, nested = opt[0] >> 5 & 1;
    ut_seq2seq_opts o = {.max_source_len = 2 + opt[1], .max_target_len = 2 + opt[2], .lowercase = opt[0] >> 2 & 1,
                         .source_prefix = opt[0] >> 3 & 1 ? "summarize: " : NULL,
                         .source_field = !named ? NULL : nested ? "translation.en" : "source",
                         .target_field = !named ? NULL : nested ? "translation.ro" : "target"};
    const char *src, *tgt = NULL;
    if (layout == 0) { /* sources, 0x1f, targets */
        const uint8_t *cut = memchr(data, 0x1f, size);
        size_t k = cut ? (size_t)(cut - data) : size;
        src = fz_write("inputs.txt", data, k);
        tgt = fz_write("targets.txt", cut ? cut + 1 : data + size, cut ? size - k - 1 : 0);
    } else {
        src = fz_write(layout == 1 ? "pairs.tsv" : layout == 2 ? "pairs.jsonl" : "pairs.csv", data, size);
    }
    char err[1024] = "";
    ut_dataset *ds = ut_seq2seq_dataset_open(src, tgt, tok, &o, err, sizeof err);
    if (!ds) {
        if (!strstr(err, src) && !(tgt && strstr(err, tgt))) {
            fprintf(stderr, "error message without the file name: '%s'\n", err);
            abort();
        }
        return 0;
    }
    for (int64_t i = 0; i < ds->n; i += ds->n > 1 ? ds->n - 1 : 1)
        if (!ut_seq2seq_text(ds, i, 0) || !ut_seq2seq_text(ds, i, 1)) abort();
    if ((layout == 0) != !ds->columns) abort(); /* the columns of every layout but parallel files */
    /* the first (up to) 3 examples as a batch, trimmed */
    int64_t L = ds->x_ne[1], count = ds->n < 3 ? ds->n : 3;
    int32_t *x = ut_malloc_check((size_t)(count * 4 * L) * sizeof *x), *y = ut_malloc_check((size_t)(count * L) * sizeof *y);
    for (int64_t i = 0; i < count; i++)
        if (ds->get(ds, i, x + i * 4 * L, y + i * L, err, sizeof err)) abort();
    ut_batch b = {.count = count, .x = x, .y = y};
    int64_t len = ut_seq2seq_batch_trim(&b, L);
    if (len < 1 || len > L || b.y_len < 1 || b.y_len > len) abort();
    ut_free(x);
    ut_free(y);
    fz_read_ends(ds);
    return 0;
}
