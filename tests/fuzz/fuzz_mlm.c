/* Fuzz target: masked language modeling files through ut_mlm_dataset_open
 * and its collate: text (a line each), CSV, JSON Lines or one JSON array,
 * grouped or line by line, with a small WordPiece tokenizer ([CLS] ...
 * [SEP], [MASK]), a byte-level BPE one in RoBERTa's layout (<s> ... </s>,
 * <mask>) or one without special tokens (no mask token: must be refused),
 * all written by this file. A dataset that opens has every example read and
 * checked (mask ones then zeros, full in grouped blocks; ids in the
 * vocabulary, the pad id past the mask; type ids 0; each label -100 or the
 * id at its position, -100 past the mask), then a batch of its examples is
 * masked with labels trimmed to a width from the input: a position without
 * a label keeps its id, a chosen one keeps its label and holds the mask
 * id, a vocabulary id or its own, x past the labels' width is untouched,
 * and masking the batch again, or one of its examples alone, gives the same
 * rows. One that does not open must say why naming the file. Input: 1 byte
 * of options (bits 0-1: the file is .txt, .csv, .jsonl, .json; bit 2:
 * line_by_line; bits 3-4: the tokenizer, WordPiece (0, 3), RoBERTa's BPE
 * (1), BPE without special tokens (2); bit 5: the text column given as "b";
 * bits 6-7: the probability 0.15, 0.5, 0.999, or 1 (refused)), 1 byte
 * max_len - 1, 1 byte the epoch, 1 byte the labels' width, then the file.
 * Every input is also read as a causal language model's texts
 * (ut_clm_dataset_open): blocks of max_len tokens, line ends kept by bit 6,
 * each block's ids in the vocabulary and y the next one, -1 at the end. */
#include "fuzz_data.h"
#include "fuzz_tok.h"

static ut_tokenizer *wordpiece, *roberta, *plain_bpe;

static void fail(const char *what, int64_t i) {
    fprintf(stderr, "example %lld: %s\n", (long long)i, what);
    abort();
}

/* Example i's planes and labels against the rules in the header */
static void check_example(ut_dataset *ds, int64_t i, int32_t *x, int32_t *y, bool grouped, int32_t pad) {
    char err[512];
    const int64_t L = ds->x_ne[1];
    if (ds->get(ds, i, x, y, err, sizeof err)) fail(err, i);
    int64_t len = 0;
    while (len < L && x[2 * L + len] == 1) len++;
    if (len < 1 || (grouped && len != L)) fail("an example without tokens, or a block not full", i);
    for (int64_t j = 0; j < L; j++) {
        if (x[L + j] != 0) fail("a type id that is not 0", i);
        if (j >= len && (x[2 * L + j] != 0 || x[j] != pad || y[j] != -100)) fail("padding after the mask", i);
        if (j < len && (x[j] < 0 || x[j] >= ds->vocab_size)) fail("an id outside the vocabulary", i);
        if (y[j] != -100 && y[j] != x[j]) fail("a label that is neither -100 nor the id", i);
    }
}

/* Examples idx (count) read into x, y (labels cut to Ly) and masked */
static void mask(ut_dataset *ds, const int64_t *idx, int64_t count, int64_t epoch, int64_t Ly, int32_t *x,
                 int32_t *y, int32_t *row) {
    char err[512];
    const int64_t L = ds->x_ne[1];
    for (int64_t k = 0; k < count; k++) {
        if (ds->get(ds, idx[k], x + k * 3 * L, row, err, sizeof err)) fail(err, idx[k]);
        memcpy(y + k * Ly, row, (size_t)Ly * sizeof *y);
    }
    ut_batch b = {.count = count, .x = x, .y = y, .epoch = epoch, .idx = idx, .y_len = Ly == L ? 0 : Ly};
    if (ds->collate(ds, &b, err, sizeof err)) fail(err, -1);
}

/* A batch of up to 4 examples (the first, the last, two between) masked
 * and checked against the examples as read */
static void check_masks(ut_dataset *ds, int64_t epoch, int64_t Ly, int32_t mask_id) {
    const int64_t L = ds->x_ne[1], n = ds->n;
    int64_t idx[4] = {0, n - 1, n / 2, n / 3};
    const int64_t count = n < 4 ? n : 4;
    size_t xb = (size_t)(count * 3 * L) * sizeof(int32_t), yb = (size_t)(count * Ly) * sizeof(int32_t);
    int32_t *x = ut_malloc_check(xb), *y = ut_malloc_check(yb), *x2 = ut_malloc_check(xb), *y2 = ut_malloc_check(yb);
    int32_t *x0 = ut_malloc_check((size_t)(3 * L) * sizeof *x0), *y0 = ut_malloc_check((size_t)L * sizeof *y0);
    mask(ds, idx, count, epoch, Ly, x, y, y0);
    for (int64_t k = 0; k < count; k++) {
        char err[512];
        if (ds->get(ds, idx[k], x0, y0, err, sizeof err)) fail(err, idx[k]);
        const int32_t *xk = x + k * 3 * L, *yk = y + k * Ly;
        if (memcmp(xk + Ly, x0 + Ly, (size_t)(3 * L - Ly) * sizeof *x0)) fail("x changed past the labels", idx[k]);
        for (int64_t j = 0; j < Ly; j++) {
            bool same = xk[j] == x0[j];
            if (y0[j] == -100 && (yk[j] != -100 || !same)) fail("a position without a label was masked", idx[k]);
            if (y0[j] != -100 && yk[j] == -100 && !same) fail("a position not chosen changed", idx[k]);
            if (y0[j] != -100 && yk[j] != -100 && yk[j] != y0[j]) fail("a chosen position's label changed", idx[k]);
            if (xk[j] != mask_id && (xk[j] < 0 || xk[j] >= ds->vocab_size)) fail("a random id outside", idx[k]);
        }
    }
    mask(ds, idx, count, epoch, Ly, x2, y2, y0);
    if (memcmp(x, x2, xb) || memcmp(y, y2, yb)) fail("the same batch masked twice differs", -1);
    mask(ds, idx + count - 1, 1, epoch, Ly, x2, y2, y0);
    if (memcmp(x + (count - 1) * 3 * L, x2, (size_t)(3 * L) * sizeof *x) ||
        memcmp(y + (count - 1) * Ly, y2, (size_t)Ly * sizeof *y))
        fail("an example masked alone differs from the same in a batch", idx[count - 1]);
    ut_free(x), ut_free(y), ut_free(x2), ut_free(y2), ut_free(x0), ut_free(y0);
}

/* The same file as a causal language model's texts (ut_clm_dataset_open),
 * blocks of 1 + opt[1] tokens (1 refused), line ends kept by bit 6: every
 * block's ids in the vocabulary, y the next id, -1 after the last */
static void check_clm(const char *path, ut_tokenizer *t, const uint8_t *opt) {
    ut_clm_opts o = {.block_size = 1 + opt[1], .keep_linebreaks = opt[0] >> 6 & 1,
                     .text_column = opt[0] >> 5 & 1 ? "b" : NULL};
    char err[1024] = "";
    ut_dataset *ds = ut_clm_dataset_open(path, t, &o, err, sizeof err);
    if (!ds) {
        fz_check_err(err, path);
        return;
    }
    const int64_t L = o.block_size, V = ut_tokenizer_vocab_size(t);
    if (L < 2 || ds->masked_lm || ds->collate || ds->x_ndim != 1 || ds->x_ne[0] != L || ds->y_ne[0] != L ||
        ds->n < 1 || ds->vocab_size != V)
        fail("the causal-LM dataset's fields", -1);
    int32_t *x = ut_malloc_check((size_t)L * sizeof *x), *y = ut_malloc_check((size_t)L * sizeof *y);
    for (int64_t i = 0; i < ds->n; i++) {
        if (ds->get(ds, i, x, y, err, sizeof err)) fail(err, i);
        for (int64_t j = 0; j < L; j++)
            if (x[j] < 0 || x[j] >= V || y[j] != (j + 1 < L ? x[j + 1] : -1)) fail("a block's ids or targets", i);
    }
    ut_free(x);
    ut_free(y);
    fz_read_ends(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!wordpiece) {
        wordpiece = fz_make_wordpiece();
        roberta = fz_make_bpe("vocab.json", ",\"<s>\":258,\"<pad>\":259,\"</s>\":260,\"<unk>\":261,\"<mask>\":262");
        plain_bpe = fz_make_bpe("encoder.json", "");
    }
    uint8_t opt[4];
    fz_take(&data, &size, opt, sizeof opt);
    static const char *const ext[] = {"mlm.txt", "mlm.csv", "mlm.jsonl", "mlm.json"};
    static const double probs[] = {0.15, 0.5, 0.999, 1.0};
    int which = opt[0] >> 3 & 3;
    ut_tokenizer *t = which == 1 ? roberta : which == 2 ? plain_bpe : wordpiece;
    ut_mlm_opts o = {.max_len = 1 + opt[1], .line_by_line = opt[0] >> 2 & 1, .text_column = opt[0] >> 5 & 1 ? "b" : NULL,
                     .probability = probs[opt[0] >> 6], .seed = opt[2]};
    const char *path = fz_write(ext[opt[0] & 3], data, size);
    check_clm(path, t, opt);
    char err[1024] = "";
    ut_dataset *ds = ut_mlm_dataset_open(path, t, &o, err, sizeof err);
    if (!ds) {
        fz_check_err(err, path);
        return 0;
    }
    if (t == plain_bpe || o.probability >= 1) fail("opened without a mask token or with probability 1", -1);
    if (!ds->masked_lm || !ut_tok_labels(ds) || !ut_tok_planes(ds) || !ds->collate || ds->x_ne[1] != o.max_len ||
        ds->y_ne[0] != o.max_len || ds->n < 1 || ds->num_classes != 0 || (!ds->columns) != ((opt[0] & 3) == 0) ||
        ds->vocab_size != ut_tokenizer_vocab_size(t))
        fail("the dataset's fields", -1);
    int32_t pad = ut_tokenizer_special_id(t, "pad");
    int32_t *x = ut_malloc_check((size_t)(3 * o.max_len) * sizeof *x), *y = ut_malloc_check((size_t)o.max_len * sizeof *y);
    for (int64_t i = 0; i < ds->n; i++) check_example(ds, i, x, y, !o.line_by_line, pad >= 0 ? pad : 0);
    ut_free(x);
    ut_free(y);
    check_masks(ds, opt[2], 1 + opt[3] % o.max_len, ut_tokenizer_special_id(t, "mask"));
    fz_read_ends(ds);
    return 0;
}
