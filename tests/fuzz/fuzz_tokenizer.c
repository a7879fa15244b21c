/* Fuzz target: Hugging Face tokenizer files through ut_tokenizer_load. The
 * first byte picks the file the input becomes (tokenizer.json or vocab.txt);
 * a tokenizer that loads encodes a text and a pair with truncation and
 * padding, and decoding what it encoded must succeed. */
#include "fuzz_data.h"

/* the last: full-width letters, a ligature, a combining accent, an ideographic
 * space, a character no vocabulary has, a T5 sentinel (for Unigram files) */
static const char *const texts[] = {"Hello, world! It's a fine day.", "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 12,5",
                                    "", "\xef\xbc\xa8i \xef\xac\x81ne e\xcc\x81\xe3\x80\x80\xe2\x98\x83 <extra_id_0> the"};

static void exercise(ut_tokenizer *t, const char *path) {
    ut_tok_encoding e = {0};
    char err[1024] = "";
    for (int i = 0; i < 4; i++) {
        ut_tok_opts o = {.max_len = i == 1 ? 8 : 0, .pad_to = i == 2 ? 6 : 0};
        if (ut_tokenizer_encode(t, texts[i], i == 1 ? texts[0] : NULL, &o, &e, err, sizeof err)) continue;
        if (e.len < 0 || (o.max_len && e.len > o.max_len && !o.pad_to)) {
            fprintf(stderr, "%s: encode gave %lld ids\n", path, (long long)e.len);
            abort();
        }
        for (int64_t k = 0; k < e.len; k++)
            if (e.mask[k] && (e.ids[k] < 0 || e.ids[k] >= ut_tokenizer_vocab_size(t))) {
                fprintf(stderr, "%s: id %d outside the vocabulary of %lld\n", path, e.ids[k],
                        (long long)ut_tokenizer_vocab_size(t));
                abort();
            }
        int64_t real = 0;
        while (real < e.len && e.mask[real]) real++;
        char *back = ut_tokenizer_decode(t, e.ids, real, false, err, sizeof err);
        if (!back) {
            fprintf(stderr, "%s: ids it made do not decode: %s\n", path, err);
            abort();
        }
        ut_free(back);
    }
    ut_tok_encoding_free(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const char *name = data[0] & 1 ? "vocab.txt" : "tokenizer.json";
    const char *path = fz_write(name, data + 1, size - 1);
    char err[1024] = "";
    ut_tokenizer *t = ut_tokenizer_load(path, err, sizeof err);
    if (!t) {
        fz_check_err(err, path);
        return 0;
    }
    exercise(t, path);
    ut_tokenizer_free(t);
    return 0;
}
