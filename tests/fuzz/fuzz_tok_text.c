/* Fuzz target: any text through the two tokenizer families. The input's
 * first byte picks the options (max_len, pad_to, special tokens), a 0x1f
 * byte splits the rest into a text and a pair. Byte-level BPE must give the
 * text back exactly from its ids (GPT-2's decoding is lossless); WordPiece
 * ids must lie in the vocabulary. Text that is not UTF-8 must be refused
 * with a message. The tokenizers are small ones written by this file. */
#include "fuzz.h"
#include "utrain/base.h"
#include "utrain/data.h"

static ut_tokenizer *wordpiece, *bpe;

/* GPT-2's byte -> character map (as src/data/tok_bpe.c, written again here). */
static int byte_char(int b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    int n = 0;
    for (int k = 0; k < b; k++)
        n += !((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF));
    return 256 + n;
}

static size_t put_utf8(char *o, int cp) {
    if (cp < 0x80) return (size_t)(o[0] = (char)cp, 1);
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static ut_tokenizer *load(const char *path) {
    char err[512];
    ut_tokenizer *t = ut_tokenizer_load(path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "the target's own tokenizer does not load: %s\n", err);
        abort();
    }
    return t;
}

/* vocab.json: the 256 byte symbols (id = byte) and the merged tokens. */
static void make_bpe(void) {
    static const char *const merges[][2] = {{"\xc4\xa0", "t"}, {"h", "e"}, {"\xc4\xa0t", "he"}, {"i", "n"},
                                            {"\xc4\xa0", "a"}, {"e", "r"}, {"\xc4\xa0", "\xc4\xa0"}};
    char json[8192], line[64];
    size_t o = 0;
    json[o++] = '{';
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t k = put_utf8(u, byte_char(b));
        o += (size_t)snprintf(json + o, sizeof json - o, "%s\"%s%.*s\":%d", b ? "," : "",
                              u[0] == '"' || u[0] == '\\' ? "\\" : "", (int)k, u, b);
    }
    FILE *m = fopen(fz_path("merges.txt"), "w");
    fputs("#version: 0.2\n", m);
    for (int i = 0; i < 7; i++) {
        snprintf(line, sizeof line, "%s%s", merges[i][0], merges[i][1]);
        o += (size_t)snprintf(json + o, sizeof json - o, ",\"%s\":%d", line, 256 + i);
        fprintf(m, "%s %s\n", merges[i][0], merges[i][1]);
    }
    fclose(m);
    json[o++] = '}';
    bpe = load(fz_write("vocab.json", (const uint8_t *)json, o));
}

static void make_wordpiece(void) {
    static const char vocab[] =
        "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n!\n,\n.\n'\n?\na\nb\nc\nd\ne\nh\ni\nl\nn\no\nr\ns\nt\nw\n"
        "##a\n##b\n##c\n##d\n##e\n##h\n##i\n##l\n##n\n##o\n##r\n##s\n##t\n##w\nthe\nhello\nworld\n##ing\n"
        "\xe4\xb8\xad\n\xe6\x96\x87\ncafe\nnaive\n";
    wordpiece = load(fz_write("vocab.txt", (const uint8_t *)vocab, sizeof vocab - 1));
}

static void free_all(void) {
    ut_tokenizer_free(wordpiece);
    ut_tokenizer_free(bpe);
}

static void check(ut_tokenizer *t, const char *text, const char *pair, const ut_tok_opts *o, bool lossless) {
    ut_tok_encoding e = {0};
    char err[512] = "";
    if (ut_tokenizer_encode(t, text, pair, o, &e, err, sizeof err) != 0) {
        if (!err[0]) abort();
        ut_tok_encoding_free(&e);
        return;
    }
    for (int64_t i = 0; i < e.len; i++)
        if (e.ids[i] < 0 || e.ids[i] >= ut_tokenizer_vocab_size(t)) abort();
    char *back = ut_tokenizer_decode(t, e.ids, e.len, false, err, sizeof err);
    if (!back) abort();
    if (lossless && strcmp(back, text) != 0) {
        fprintf(stderr, "byte-level BPE did not give the text back\n");
        abort();
    }
    ut_free(back);
    ut_tok_encoding_free(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!bpe) {
        make_bpe();
        make_wordpiece();
        atexit(free_all);
    }
    uint8_t opt;
    fz_take(&data, &size, &opt, 1);
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    char *sep = strchr(text, 0x1f), *pair = NULL;
    if (sep) *sep = 0, pair = sep + 1;
    ut_tok_opts o = {.max_len = opt & 0x0f, .pad_to = (opt >> 4) & 0x07, .no_special = opt >> 7};
    check(wordpiece, text, pair, &o, false);
    check(bpe, text, pair, &o, false);
    ut_tok_opts plain = {.no_special = true};
    check(bpe, text, NULL, &plain, true);   /* no pair, no limit: lossless */
    free(text);
    return 0;
}
