/* Fuzz target: any text through the three tokenizer families. The input's
 * first byte picks the options (max_len, pad_to, special tokens), a 0x1f
 * byte splits the rest into a text and a pair. Byte-level BPE must give the
 * text back exactly from its ids (GPT-2's decoding is lossless); WordPiece
 * and Unigram ids must lie in the vocabulary and decode. Text that is not
 * UTF-8 must be refused with a message. The tokenizers are small ones
 * written by this file (the Unigram one T5's layout with a small
 * SentencePiece character map, byte fallback for a few bytes). */
#include "fuzz_tok.h"
#include "utrain/base.h"
#include "utrain/data.h"

static ut_tokenizer *wordpiece, *bpe, *unigram;

static size_t put_utf8(char *o, int cp) {
    if (cp < 0x80) return (size_t)(o[0] = (char)cp, 1);
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
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
        size_t k = put_utf8(u, fz_byte_char(b));
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
    bpe = fz_load_tokenizer(fz_write("vocab.json", (const uint8_t *)json, o));
}

static void make_wordpiece(void) {
    static const char vocab[] =
        "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n!\n,\n.\n'\n?\na\nb\nc\nd\ne\nh\ni\nl\nn\no\nr\ns\nt\nw\n"
        "##a\n##b\n##c\n##d\n##e\n##h\n##i\n##l\n##n\n##o\n##r\n##s\n##t\n##w\nthe\nhello\nworld\n##ing\n"
        "\xe4\xb8\xad\n\xe6\x96\x87\ncafe\nnaive\n";
    wordpiece = fz_load_tokenizer(fz_write("vocab.txt", (const uint8_t *)vocab, sizeof vocab - 1));
}

/* The character map of tests/fuzz/make_seeds.sh's unigram seed: 7 rules
 * (Ａ ﬁ e+U+0301 U+3000 U+0001 ａ ①) compiled by SentencePiece. */
static const char charsmap[] =
    "AAQAAAAMAAAAAACAAQ0AAMwYAgCBBQAADAAAgJGEAgCgPQAAAwAAgIAMAgCABQAAAQAAgKwAAgCBDQAACQAAgKF9AAAFAACAgQ0A"
    "AAcAAIARAAAAFgAAABcAAAAUAAAAFQAAABoAAAAbAAAAGAAAABkAAAC8yAIAvTQCABwAAAAdAAAAIgAAACMAAAAgAAAAIQAAACYA"
    "AAAnAAAAJAAAACUAAAAqAAAAKwAAACgAAAApAAAALgAAAC8AAAAsAAAALQAAADIAAAAzAAAAMAAAADEAAAA2AAAANwAAADQAAAA1"
    "AAAAOgAAADsAAAA4AAAAOQAAAD4AAAA/AAAAPAAAAD0AAABCAAAAQwAAAEAAAABBAAAARgAAAEcAAABEAAAARQAAAEoAAABLAAAA"
    "SAAAAEkAAABOAAAATwAAAEwAAABNAAAAUgAAAFMAAABQAAAAUQAAAFYAAABXAAAAVAAAAFUAAABaAAAAWwAAAFgAAABZAAAAXgAA"
    "AF8AAABcAAAAXQAAAGIAAABjAAAAYAAAAGEAAABmAAAAZwAAAGWkAgBlAAAAagAAAGsAAABoAAAAaQAAAG4AAABvAAAAbAAAAG0A"
    "AAByAAAAcwAAAHAAAABxAAAAdgAAAHcAAAB0AAAAdQAAAHoAAAB7AAAAeAAAAHkAAAB+AAAAfwAAAHwAAAB9AAAAggAAAIMAAACA"
    "AAAAgQAAAIYAAACHAAAAhAAAAIUAAACKAAAAiwAAAIgAAACJAAAAjgAAAI8AAACMAAAAjQAAAJIAAACTAAAAkAAAAJEAAACWAAAA"
    "lwAAAJQAAACVAAAAmgAAAJsAAACYAAAAmQAAAJ4AAACfAAAAnAAAAJ0AAACiAAAAowAAAKAAAAChAAAApgAAAKcAAACkAAAApQAA"
    "AKoAAACrAAAAqAAAAKkAAACuAAAArwAAAKwAAACtAAAAsgAAALMAAACwAAAAsQAAALYAAAC3AAAAtAAAALUAAAC6AAAAuwAAALgA"
    "AAC5AAAAvgAAAL8AAAC8AAAAvQAAAMIAAADDAAAAwAAAAMEAAADGAAAAxwAAAMQAAADFAAAAygAAAMsAAADIAAAAyQAAAM4AAADP"
    "AAAAzAAAAM0AAADSAAAA0wAAANAAAADRAAAA1gAAANcAAADUAAAA1QAAANoAAADbAAAA2AAAANkAAADeAAAA3wAAANwAAADdAAAA"
    "46QBAOLYAQDgAAAA4QAAAOYAAADnAAAA5AAAAOUAAADqAAAA6wAAAOgAAADpAAAA7zABAO8AAADsAAAA7QAAAPIAAADzAAAA8AAA"
    "APEAAAD2AAAA9wAAAPQAAAD1AAAA+gAAAPsAAAD4AAAA+QAAAP4AAAD/AAAA/AAAAP0AAAAAIAAxAEEAYQBmaQDDqQA=";

static void make_unigram(void) {
    static const char specials[] =
        "[{\"id\":0,\"content\":\"<pad>\",\"special\":true},{\"id\":1,\"content\":\"</s>\",\"special\":true},"
        "{\"id\":2,\"content\":\"<unk>\",\"special\":true},{\"id\":12,\"content\":\"<extra_id_0>\",\"special\":true}]";
    static const char tmpl[] =
        "{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":\"A\"}},{\"SpecialToken\":{\"id\":\"</s>\"}}],"
        "\"pair\":[{\"Sequence\":{\"id\":\"A\"}},{\"SpecialToken\":{\"id\":\"</s>\"}},{\"Sequence\":{\"id\":\"B\"}},"
        "{\"SpecialToken\":{\"id\":\"</s>\"}}],\"special_tokens\":{\"</s>\":{\"id\":\"</s>\",\"ids\":[1]}}}";
    static const char pieces[] =
        "[\"<pad>\",0],[\"</s>\",0],[\"<unk>\",0],[\"\\u2581\",-1.6],[\"e\",-2.3],[\"th\",-2.8],[\"\\u2581the\",-3],"
        "[\"a\",-3.5],[\"<0xE2>\",-5],[\"<0xC3>\",-5],[\"<0xA9>\",-5],[\"\\u2581\\u2581\",-6],[\"<extra_id_0>\",0]";
    static const char ms[] = "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"always\"}";
    char json[8192];
    int n = snprintf(json, sizeof json,
                     "{\"added_tokens\":%s,\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":["
                     "{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"%s\"},"
                     "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" {2,}\"},\"content\":\" \"}]},"
                     "\"pre_tokenizer\":%s,\"post_processor\":%s,"
                     "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},%s]},"
                     "\"model\":{\"type\":\"Unigram\",\"unk_id\":2,\"byte_fallback\":true,\"vocab\":[%s]}}",
                     specials, charsmap, ms, tmpl, ms, pieces);
    unigram = fz_load_tokenizer(fz_write("tokenizer.json", (const uint8_t *)json, (size_t)n));
}

static void free_all(void) {
    ut_tokenizer_free(wordpiece);
    ut_tokenizer_free(bpe);
    ut_tokenizer_free(unigram);
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
        make_unigram();
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
    check(unigram, text, pair, &o, false);
    ut_tok_opts plain = {.no_special = true};
    check(bpe, text, NULL, &plain, true);   /* no pair, no limit: lossless */
    free(text);
    return 0;
}
