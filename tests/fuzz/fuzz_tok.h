/* For the fuzz targets that read text with tokenizers they write
 * themselves: loading one (a failure is the target's own bug), GPT-2's
 * byte-to-character map, a small WordPiece vocab.txt and a byte-level BPE
 * vocabulary (the 256 byte symbols, "Ġt" and "he", extra tokens) with its
 * merges.txt.
 * defines: fz_load_tokenizer, fz_byte_char, fz_make_wordpiece, fz_make_bpe. */
#ifndef UTRAIN_FUZZ_TOK_H
#define UTRAIN_FUZZ_TOK_H

#include "fuzz.h"
#include "utrain/data.h"

static inline ut_tokenizer *fz_load_tokenizer(const char *path) {
    char err[512];
    ut_tokenizer *t = ut_tokenizer_load(path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "the target's own tokenizer does not load: %s\n", err);
        abort();
    }
    return t;
}

/* GPT-2's byte -> character map (as src/data/tok_bpe.c has it, written again here) */
static inline int fz_byte_char(int b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    int n = 0;
    for (int k = 0; k < b; k++)
        n += !((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF));
    return 256 + n;
}

/* vocab.txt: [PAD] [UNK] [CLS] [SEP] [MASK] and a few words and pieces */
static inline ut_tokenizer *fz_make_wordpiece(void) {
    static const char vocab[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nfilm\nplot\n##ing\ngood\n,\n.\n!\n"
                                "a\nb\nc\nd\ne\n##a\n##b\n##c\n##d\n##e\n\xc3\xa9\n";
    return fz_load_tokenizer(fz_write("vocab.txt", (const uint8_t *)vocab, sizeof vocab - 1));
}

/* name (vocab.json or encoder.json): the 256 byte symbols, "Ġt" and "he",
 * then extra (a JSON fragment of more tokens, may be empty); merges.txt
 * beside it */
static inline ut_tokenizer *fz_make_bpe(const char *name, const char *extra) {
    char json[4096];
    size_t o = 0;
    json[o++] = '{';
    for (int b = 0; b < 256; b++) {
        int cp = fz_byte_char(b);
        char u[3] = {(char)cp, 0, 0};
        if (cp >= 0x80) u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F));
        o += (size_t)snprintf(json + o, sizeof json - o, "%s\"%s%s\":%d", b ? "," : "",
                              cp == '"' || cp == '\\' ? "\\" : "", u, b);
    }
    o += (size_t)snprintf(json + o, sizeof json - o, ",\"\xc4\xa0t\":256,\"he\":257%s}", extra);
    static const char merges[] = "#version: 0.2\n\xc4\xa0 t\nh e\n";
    fz_write("merges.txt", (const uint8_t *)merges, sizeof merges - 1);
    return fz_load_tokenizer(fz_write(name, (const uint8_t *)json, o));
}

#endif
