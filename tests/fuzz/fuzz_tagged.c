/* Fuzz target: token-classification files through ut_tagged_dataset_open,
 * as JSON Lines (or one JSON array) or CoNLL text, with a small WordPiece
 * tokenizer ([CLS] ... [SEP]) or a byte-level BPE one without special
 * tokens (each word after a space), both written by this file. A dataset
 * that opens has every example read and checked: the mask is ones then
 * zeros, the ids in the vocabulary (the pad id past the mask), the type ids
 * 0, every label -100 or a class (0 without tags), -100 past the mask, no
 * more labeled positions than words (one per word unless label_all_tokens),
 * the tag list sorted when it is the file's; one that does not open must
 * say why naming the file. Input: 1 byte of options (bit 0: the file is
 * .jsonl, else CoNLL; bit 1: the BPE tokenizer; bit 2: label_all_tokens;
 * bit 3: a tag list given; bit 4: the JSON keys given as "w" and "t"; bit 5:
 * the integer tags' list given instead), 1 byte max_len - 1, then the file. */
#include <errno.h>

#include "fuzz_data.h"
#include "fuzz_tok.h"

static ut_tokenizer *wordpiece, *bpe;

static void fail(const char *what, int64_t i) {
    fprintf(stderr, "example %lld: %s\n", (long long)i, what);
    abort();
}

/* The tag list: names that are not empty; the file's own sorted, strictly */
static void check_names(const ut_dataset *ds, bool given) {
    if ((ds->num_classes > 0) != (ds->label_names != NULL)) fail("label_names without classes, or the reverse", -1);
    bool ints = true;
    for (int64_t k = 0; k < ds->num_classes; k++) {
        const char *s = ds->label_names[k];
        char *end;
        errno = 0;
        (void)strtoll(s, &end, 10);
        ints &= end != s && !*end && !errno;
        if (!s[0]) fail("an empty tag name", k);
    }
    for (int64_t k = 1; !given && k < ds->num_classes; k++) {
        const char *a = ds->label_names[k - 1], *b = ds->label_names[k];
        bool before = ints ? strtoll(a, NULL, 10) < strtoll(b, NULL, 10) : strcmp(a, b) < 0;
        if (!before) fail("the file's tag list is not sorted, or repeats a tag", k);
    }
}

/* Example i's planes and labels against the rules in the header */
static void check_example(ut_dataset *ds, int64_t i, int32_t *x, int32_t *y, bool all, int32_t pad) {
    char err[512];
    const int64_t L = ds->x_ne[1];
    if (ds->get(ds, i, x, y, err, sizeof err)) fail(err, i);
    int64_t len = 0, labeled = 0, nwords = -1;
    while (len < L && x[2 * L + len] == 1) len++;
    for (int64_t j = 0; j < L; j++) {
        if (x[L + j] != 0) fail("a type id that is not 0", i);
        if (j >= len && (x[2 * L + j] != 0 || x[j] != pad || y[j] != -100)) fail("padding after the mask", i);
        if (j < len && (x[j] < 0 || x[j] >= ds->vocab_size)) fail("an id outside the vocabulary", i);
        bool cls = y[j] >= 0 && (y[j] < ds->num_classes || (ds->unlabeled && y[j] == 0));
        if (y[j] != -100 && !cls) fail("a label that is neither -100 nor a class", i);
        labeled += y[j] != -100;
    }
    if (!ut_tagged_words(ds, i, &nwords) && nwords != 0) fail("no words", i);
    if (!all && labeled > nwords) fail("more labeled positions than words", i);
    if (len < 1 && nwords > 0) fail("no tokens", i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!wordpiece) wordpiece = fz_make_wordpiece(), bpe = fz_make_bpe("vocab.json", "");
    uint8_t opt[2];
    fz_take(&data, &size, opt, sizeof opt);
    static const char *const names[] = {"O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-MISC"};
    static const char *const int_names[] = {"0", "1", "2", "3", "12"};
    bool jsonl = opt[0] & 1, all = opt[0] >> 2 & 1, given = opt[0] >> 3 & 1, keys = opt[0] >> 4 & 1,
         ints = opt[0] >> 5 & 1;
    ut_tokenizer *t = opt[0] >> 1 & 1 ? bpe : wordpiece;
    ut_tagged_opts o = {.max_len = 1 + opt[1], .label_all_tokens = all, .words = keys ? "w" : NULL,
                        .tags = keys ? "t" : NULL, .names = !given ? NULL : ints ? int_names : names,
                        .nnames = !given ? 0 : ints ? 5 : 6};
    const char *path = fz_write(jsonl ? "tags.jsonl" : "tags.conll", data, size);
    char err[1024] = "";
    ut_dataset *ds = ut_tagged_dataset_open(path, t, &o, err, sizeof err);
    if (!ds) {
        fz_check_err(err, path);
        return 0;
    }
    if (!ds->token_labels || !ut_tok_planes(ds) || ds->x_ne[1] != o.max_len || ds->y_ndim != 1 ||
        ds->y_ne[0] != o.max_len || ds->n < 1 || !ds->columns || ds->vocab_size != ut_tokenizer_vocab_size(t) ||
        ut_tagged_truncated(ds) > ds->n || ut_tagged_truncated(ds) < 0)
        fail("the dataset's fields", -1);
    if (given && ds->num_classes != o.nnames) fail("the given tag list's length", -1);
    check_names(ds, given);
    int32_t pad = ut_tokenizer_special_id(t, "pad");
    int32_t *x = ut_malloc_check((size_t)(3 * o.max_len) * sizeof *x), *y = ut_malloc_check((size_t)o.max_len * sizeof *y);
    for (int64_t i = 0; i < ds->n; i++) check_example(ds, i, x, y, all, pad >= 0 ? pad : 0);
    ut_free(x);
    ut_free(y);
    if (ut_tagged_words(ds, ds->n, NULL)) fail("words past the end", ds->n);
    fz_read_ends(ds);
    return 0;
}
