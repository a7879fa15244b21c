/* Fuzz target: the older tokenizer files. The input's first byte chooses:
 * even, the rest is a BERT vocab.txt; odd, the rest is vocab.json and
 * merges.txt separated by a 0x1e byte (GPT-2's layout). What loads encodes a
 * text and decodes it (every id a token); what is refused names a file. */
#include "fuzz.h"
#include "utrain/base.h"
#include "utrain/data.h"

static void use(ut_tokenizer *t) {
    ut_tok_encoding e = {0};
    ut_tok_opts o = {.max_len = 6, .pad_to = 8};
    char err[512] = "";
    if (ut_tokenizer_encode(t, "hello world, [CLS] <s> it's caf\xc3\xa9", "and a pair", &o, &e, err, sizeof err)) {
        if (!err[0]) abort();
    } else {
        if (e.len != 8) abort();
        char *text = ut_tokenizer_decode(t, e.ids, e.len, false, err, sizeof err);
        if (!text) {
            fprintf(stderr, "an encoded id does not decode: %s\n", err);
            abort();
        }
        ut_free(text);
    }
    ut_tok_encoding_free(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t kind;
    fz_take(&data, &size, &kind, 1);
    const char *path, *merges = NULL;
    if (kind % 2 == 0) {
        path = fz_write("vocab.txt", data, size);
    } else {
        const uint8_t *sep = memchr(data, 0x1e, size);
        size_t vl = sep ? (size_t)(sep - data) : size;
        path = fz_write("vocab.json", data, vl);
        merges = fz_write("merges.txt", sep ? sep + 1 : data, sep ? size - vl - 1 : 0);
    }
    char err[1024] = "";
    ut_tokenizer *t = ut_tokenizer_load(path, err, sizeof err);
    if (t) use(t);
    else if (strncmp(err, path, strlen(path)) && (!merges || strncmp(err, merges, strlen(merges)))) {
        fprintf(stderr, "error message without the file name: '%s'\n", err);
        abort();
    }
    ut_tokenizer_free(t);
    return 0;
}
