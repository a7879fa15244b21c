/* Fuzz target: Hugging Face tokenizer.json files through ut_tokenizer_load.
 * One that loads encodes a text and a pair (truncated, padded) and decodes
 * the ids: every id lies in the vocabulary, the padded length and the mask
 * are as asked; one that is refused names the file. */
#include "fuzz.h"
#include "utrain/base.h"
#include "utrain/data.h"

static void check_encoding(const ut_tokenizer *t, const ut_tok_encoding *e, int64_t pad_to) {
    int64_t V = ut_tokenizer_vocab_size(t);
    if (pad_to && e->len < pad_to) abort();
    for (int64_t i = 0; i < e->len; i++) {
        if (e->ids[i] < 0 || e->ids[i] >= V) {
            fprintf(stderr, "id %d at %lld outside the vocabulary of %lld\n", e->ids[i], (long long)i, (long long)V);
            abort();
        }
        if (e->mask[i] != 0 && e->mask[i] != 1) abort();
        if (i && e->mask[i] > e->mask[i - 1]) abort();   /* padding only at the end */
    }
}

static void use(ut_tokenizer *t) {
    static const ut_tok_opts opts[2] = {{.max_len = 8, .pad_to = 12}, {0}};
    ut_tok_encoding e = {0};
    char err[512];
    for (int k = 0; k < 2; k++) {
        if (ut_tokenizer_encode(t, "Héllo, wörld! It's 2024 [CLS] <s>", "a pair, of text", &opts[k], &e, err,
                                sizeof err) == 0) {
            check_encoding(t, &e, opts[k].pad_to);
            char *text = ut_tokenizer_decode(t, e.ids, e.len, k == 0, err, sizeof err);
            if (!text) abort();   /* ids from encode are always in the vocabulary */
            ut_free(text);
        } else if (!err[0]) {
            abort();
        }
    }
    ut_tok_encoding_free(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_write("tokenizer.json", data, size);
    char err[1024] = "";
    ut_tokenizer *t = ut_tokenizer_load(path, err, sizeof err);
    if (t) use(t);
    else fz_check_err(err, path);
    ut_tokenizer_free(t);
    return 0;
}
