/* Loading pretrained tokenizers: Hugging Face tokenizer.json (WordPiece with
 * BERT's normalizer and pre-tokenizer; byte-level BPE; Unigram with
 * SentencePiece's normalizers, Metaspace and decoders), the older vocab.txt
 * (BERT), and vocab.json / encoder.json + merges.txt / vocab.bpe (GPT-2,
 * RoBERTa, BART). JSON is parsed with cJSON. Every error names the file. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "data_internal.h"
#include "tok_internal.h"
#include "utrain/base.h"

#define ERRF(...) (ut_errorf(err, n, __VA_ARGS__), false)

/* ---- JSON files ---- */

/* True when the text ends inside a string or with a bracket open: cut short. */
static bool json_unclosed(const unsigned char *s, size_t len) {
    long depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        if (in_str) {
            if (s[i] == '\\') i++;
            else if (s[i] == '"') in_str = false;
        } else {
            in_str = s[i] == '"';
            depth += (s[i] == '{' || s[i] == '[') - (s[i] == '}' || s[i] == ']');
        }
    }
    return in_str || depth > 0;
}

static void json_error(const char *path, const unsigned char *buf, size_t len, size_t at, char *err, size_t n) {
    if (json_unclosed(buf, len)) {
        ut_errorf(err, n, "%s: byte %zu: the JSON ends too soon (is the file cut short?)", path, len);
        return;
    }
    char near[24];
    size_t from = at > 8 ? at - 8 : 0, k = 0;
    for (size_t i = from; i < len && k + 1 < sizeof near && i < at + 8; i++)
        near[k++] = buf[i] >= 0x20 && buf[i] < 0x7f ? (char)buf[i] : '?';
    near[k] = 0;
    ut_errorf(err, n, "%s: byte %zu: not valid JSON (near \"%s\")", path, at, near);
}

static cJSON *read_json(const char *path, char *err, size_t n) {
    size_t len;
    unsigned char *buf = ut__read_file(path, &len, err, n);
    if (!buf) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)buf, len, &end, false);
    size_t at = end ? (size_t)(end - (const char *)buf) : 0;
    if (!root) {
        json_error(path, buf, len, at, err, n);
    } else {
        while (at < len && strchr(" \t\r\n", buf[at]) && buf[at]) at++;
        if (at < len) {
            ut_errorf(err, n, "%s: byte %zu: unexpected text after the JSON value", path, at);
            cJSON_Delete(root);
            root = NULL;
        }
    }
    ut_free(buf);
    return root;
}

static const cJSON *get(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static bool get_bool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *v = get(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static const char *get_str(const cJSON *o, const char *key) {
    const cJSON *v = get(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* v as an integer in [lo, hi]: false when it is not a number, not whole or
 * out of range (a double outside int64's range must not be cast). */
static bool json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi)) return false;
    *out = (int64_t)v->valuedouble;
    return (double)*out == v->valuedouble;
}

/* An id that names a token (the vocabulary may have holes). */
static bool int_token(const ut_tokenizer *t, const cJSON *v, int64_t *out) {
    return json_int(v, 0, t->vocab.size - 1, out) && t->vocab.tokens[*out];
}

/* An object token -> id into the vocabulary table. */
static bool read_vocab_obj(ut_tokenizer *t, const cJSON *vocab, const char *path, char *err, size_t n) {
    if (!cJSON_IsObject(vocab) || !vocab->child)
        return ERRF("%s: the vocabulary is missing or not an object of token: id", path);
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int64_t id;
        if (!json_int(e, 0, INT32_MAX - 1, &id))
            return ERRF("%s: vocabulary entry \"%s\": the id is not an integer in [0, %d)", path, e->string,
                        INT32_MAX - 1);
        if (!ut__vocab_tab_add(&t->vocab, e->string, strlen(e->string), id, path, err, n))
            return false;
    }
    return true;
}

/* ---- special tokens and templates ---- */

static int32_t id_of(const ut_tokenizer *t, const char *tok) {
    return tok ? ut__strmap_get(&t->vocab.vocab, tok, strlen(tok)) : -1;
}

static int32_t first_id(const ut_tokenizer *t, const char *a, const char *b, const char *c) {
    int32_t id = id_of(t, a);
    if (id < 0) id = id_of(t, b);
    if (id < 0) id = id_of(t, c);
    return id;
}

static void find_specials(ut_tokenizer *t) {
    t->ids_cls = first_id(t, "[CLS]", "<s>", NULL);
    t->ids_sep = first_id(t, "[SEP]", "</s>", NULL);
    if (t->ids_unk < 0) t->ids_unk = first_id(t, "[UNK]", "<unk>", NULL);
    t->ids_mask = first_id(t, "[MASK]", "<mask>", NULL);
    t->ids_bos = first_id(t, "<s>", "<|endoftext|>", NULL);
    t->ids_eos = first_id(t, "</s>", "<|endoftext|>", NULL);
    if (t->pad_id < 0) t->pad_id = first_id(t, "[PAD]", "<pad>", "<|endoftext|>");
    for (int32_t id = 0; t->pad_id < 0 && id < t->vocab.size; id++)   /* none: the first token */
        if (t->vocab.tokens[id]) t->pad_id = id;
}

static ut__tmpl_item item_special(int32_t id, int32_t type_id) {
    ut__tmpl_item it = {-1, ut_malloc_check(sizeof(int32_t)), 1, type_id};
    it.ids[0] = id;
    return it;
}

static ut__tmpl_item item_seq(int seq, int32_t type_id) {
    return (ut__tmpl_item){seq, NULL, 0, type_id};
}

/* BERT: [CLS] A [SEP] (B [SEP]:1); RoBERTa: <s> A </s> (</s> B </s>), all type 0;
 * none: A (B:1). */
static void default_templates(ut_tokenizer *t, int style, int32_t cls, int32_t sep) {
    t->single = ut_calloc_check(6, sizeof *t->single);
    t->pair = ut_calloc_check(6, sizeof *t->pair);
    int s = 0, p = 0;
    if (style == 0) {
        t->single[s++] = item_seq(0, 0);
        t->pair[p++] = item_seq(0, 0);
        t->pair[p++] = item_seq(1, 1);
    } else {
        int32_t bt = style == 1 ? 1 : 0;
        t->single[s++] = item_special(cls, 0);
        t->single[s++] = item_seq(0, 0);
        t->single[s++] = item_special(sep, 0);
        t->pair[p++] = item_special(cls, 0);
        t->pair[p++] = item_seq(0, 0);
        t->pair[p++] = item_special(sep, 0);
        if (style == 2) t->pair[p++] = item_special(sep, 0);
        t->pair[p++] = item_seq(1, bt);
        t->pair[p++] = item_special(sep, bt);
    }
    t->nsingle = s;
    t->npair = p;
}

/* [token, id] as BertProcessing and RobertaProcessing write their cls/sep. */
static int32_t token_pair_id(const ut_tokenizer *t, const cJSON *pp, const char *key, const char *path,
                             char *err, size_t n) {
    const cJSON *a = get(pp, key);
    int64_t id;
    if (!cJSON_IsArray(a) || !int_token(t, cJSON_GetArrayItem(a, 1), &id)) {
        ut_errorf(err, n, "%s: post_processor.%s must be [token, id] with an id in the vocabulary", path, key);
        return -1;
    }
    return (int32_t)id;
}

static bool read_template_list(ut_tokenizer *t, const cJSON *list, const cJSON *specials, bool pair,
                               const char *path, char *err, size_t n) {
    int cnt = cJSON_GetArraySize(list);
    if (!cJSON_IsArray(list) || cnt == 0 || cnt > 16)
        return ERRF("%s: post_processor.%s: expected a list of 1 to 16 items", path, pair ? "pair" : "single");
    ut__tmpl_item *items = ut_calloc_check((size_t)cnt, sizeof *items);
    if (pair) t->pair = items, t->npair = cnt;
    else t->single = items, t->nsingle = cnt;
    int k = 0, uses[2] = {0, 0};
    for (const cJSON *e = list->child; e; e = e->next, k++) {
        const cJSON *seq = get(e, "Sequence"), *sp = get(e, "SpecialToken"), *body = seq ? seq : sp;
        const cJSON *tid = get(body, "type_id");
        const char *name = get_str(body, "id");
        int64_t type_id = 0;
        if (tid && !json_int(tid, 0, 255, &type_id))
            return ERRF("%s: post_processor.%s item %d: type_id must be an integer in [0, 255]", path,
                        pair ? "pair" : "single", k);
        items[k].type_id = (int32_t)type_id;
        items[k].seq = -1;
        if (seq && name && (!strcmp(name, "A") || (pair && !strcmp(name, "B")))) {
            items[k].seq = name[0] == 'B';
            if (++uses[items[k].seq] > 1) /* truncation counts each text once */
                return ERRF("%s: post_processor.%s: sequence %s appears more than once", path,
                            pair ? "pair" : "single", name);
            continue;
        }
        const cJSON *ids = get(get(specials, name ? name : ""), "ids");
        int nids = cJSON_GetArraySize(ids);
        if (!sp || !name || !cJSON_IsArray(ids) || nids < 1)
            return ERRF("%s: post_processor.%s item %d: not a Sequence (A%s) or a SpecialToken listed in "
                        "special_tokens", path, pair ? "pair" : "single", k, pair ? " or B" : "");
        items[k].ids = ut_calloc_check((size_t)nids, sizeof *items[k].ids);
        items[k].nids = nids;
        for (int j = 0; j < nids; j++) {
            int64_t x;
            if (!int_token(t, cJSON_GetArrayItem(ids, j), &x))
                return ERRF("%s: post_processor.special_tokens \"%s\": id out of the vocabulary", path, name);
            items[k].ids[j] = (int32_t)x;
        }
    }
    if (!uses[0] || (pair && !uses[1]))
        return ERRF("%s: post_processor.%s: needs the sequence%s", path, pair ? "pair" : "single",
                    pair ? "s A and B" : " A");
    return true;
}

static bool read_post_processor(ut_tokenizer *t, const cJSON *pp, const char *path, char *err, size_t n) {
    const char *type = get_str(pp, "type");
    if (cJSON_IsNull(pp) || !pp || (type && !strcmp(type, "ByteLevel"))) {
        default_templates(t, 0, -1, -1);
        return true;
    }
    if (type && !strcmp(type, "TemplateProcessing"))
        return read_template_list(t, get(pp, "single"), get(pp, "special_tokens"), false, path, err, n) &&
               read_template_list(t, get(pp, "pair"), get(pp, "special_tokens"), true, path, err, n);
    if (type && (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing"))) {
        int32_t cls = token_pair_id(t, pp, "cls", path, err, n);
        int32_t sep = cls < 0 ? -1 : token_pair_id(t, pp, "sep", path, err, n);
        if (cls < 0 || sep < 0) return false;
        default_templates(t, type[0] == 'B' ? 1 : 2, cls, sep);
        return true;
    }
    return ERRF("%s: post_processor type \"%s\" is not supported (TemplateProcessing, BertProcessing, "
                "RobertaProcessing, ByteLevel or null are)", path, type ? type : "?");
}

/* ---- tokenizer.json ---- */

static bool read_spm_normalizer(ut_tokenizer *t, const cJSON *nz, const char *path, const char *at, int depth,
                                char *err, size_t n);
static bool read_spm_pre_tokenizer(ut_tokenizer *t, const cJSON *pt, const char *path, const char *at,
                                   int depth, char *err, size_t n);

static bool read_normalizer(ut_tokenizer *t, const cJSON *nz, const char *path, char *err, size_t n) {
    const char *type = get_str(nz, "type");
    if (!nz || cJSON_IsNull(nz)) return true;
    if (t->kind == UT__TOK_UNIGRAM) return read_spm_normalizer(t, nz, path, "normalizer", 0, err, n);
    if (!type || strcmp(type, "BertNormalizer"))
        return ERRF("%s: normalizer \"%s\" is not supported (BertNormalizer or null is)", path, type ? type : "?");
    t->clean = get_bool(nz, "clean_text", true);
    t->cjk = get_bool(nz, "handle_chinese_chars", true);
    t->lowercase = get_bool(nz, "lowercase", true);
    t->strip_accents = get_bool(nz, "strip_accents", t->lowercase);
    return true;
}

static bool read_pre_tokenizer(ut_tokenizer *t, const cJSON *pt, const char *path, char *err, size_t n) {
    const char *type = get_str(pt, "type");
    if (t->kind == UT__TOK_UNIGRAM) return read_spm_pre_tokenizer(t, pt, path, "pre_tokenizer", 0, err, n);
    const char *want = t->kind == UT__TOK_WORDPIECE ? "BertPreTokenizer" : "ByteLevel";
    if (!type || strcmp(type, want))
        return ERRF("%s: pre_tokenizer \"%s\" is not supported with a %s model (%s is)", path,
                    type ? type : "null", t->kind == UT__TOK_WORDPIECE ? "WordPiece" : "BPE", want);
    if (t->kind == UT__TOK_BPE) {
        if (!get_bool(pt, "use_regex", true))
            return ERRF("%s: pre_tokenizer ByteLevel with use_regex false is not supported", path);
        t->prefix_space = get_bool(pt, "add_prefix_space", false);
    }
    return true;
}

static bool read_wordpiece(ut_tokenizer *t, const cJSON *m, const char *path, char *err, size_t n) {
    if (!read_vocab_obj(t, get(m, "vocab"), path, err, n)) return false;
    const char *unk = get_str(m, "unk_token"), *prefix = get_str(m, "continuing_subword_prefix");
    const cJSON *mx = get(m, "max_input_chars_per_word");
    t->wp.prefix = ut__data_strdup(prefix ? prefix : "##");
    t->wp.max_chars = 100;
    if (mx && !json_int(mx, 1, INT32_MAX, &t->wp.max_chars))
        return ERRF("%s: model.max_input_chars_per_word must be an integer >= 1", path);
    t->ids_unk = t->wp.unk = id_of(t, unk ? unk : "[UNK]");
    if (t->wp.unk < 0)
        return ERRF("%s: the unknown token \"%s\" is not in the vocabulary", path, unk ? unk : "[UNK]");
    return true;
}

/* "a b" (older files) or ["a", "b"]. */
static bool read_merge(ut_tokenizer *t, const cJSON *e, int k, const char *path, char *err, size_t n) {
    char where[512];
    snprintf(where, sizeof where, "%s: merges[%d]", path, k);
    if (cJSON_IsString(e)) {
        const char *s = e->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return ERRF("%s: \"%s\" is not two tokens separated by one space", where, s);
        return ut__bpe_add_merge(t->bpe, &t->vocab, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), where, err, n);
    }
    const cJSON *a = cJSON_GetArrayItem(e, 0), *b = cJSON_GetArrayItem(e, 1);
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsString(a) || !cJSON_IsString(b))
        return ERRF("%s: expected \"a b\" or [\"a\", \"b\"]", where);
    return ut__bpe_add_merge(t->bpe, &t->vocab, a->valuestring, strlen(a->valuestring), b->valuestring,
                             strlen(b->valuestring), where, err, n);
}

static bool read_bpe(ut_tokenizer *t, const cJSON *m, const char *path, char *err, size_t n) {
    const cJSON *dropout = get(m, "dropout");
    const char *pre = get_str(m, "continuing_subword_prefix"), *suf = get_str(m, "end_of_word_suffix");
    if (dropout && !cJSON_IsNull(dropout)) return ERRF("%s: BPE dropout is not supported (write null)", path);
    if ((pre && *pre) || (suf && *suf))
        return ERRF("%s: BPE with a continuing_subword_prefix or end_of_word_suffix is not supported", path);
    if (get_bool(m, "byte_fallback", false)) return ERRF("%s: BPE byte_fallback is not supported", path);
    if (!read_vocab_obj(t, get(m, "vocab"), path, err, n)) return false;
    t->bpe = ut__bpe_new(get_bool(m, "ignore_merges", false));
    const cJSON *merges = get(m, "merges");
    if (!cJSON_IsArray(merges)) return ERRF("%s: model.merges is missing or not a list", path);
    int k = 0;
    for (const cJSON *e = merges->child; e; e = e->next, k++)
        if (!read_merge(t, e, k, path, err, n)) return false;
    t->ids_unk = id_of(t, get_str(m, "unk_token"));
    return ut__bpe_check_bytes(t->bpe, &t->vocab, path, err, n);
}

/* ---- Unigram (SentencePiece) ---- */

static bool read_unigram(ut_tokenizer *t, const cJSON *m, const char *path, char *err, size_t n) {
    const cJSON *vocab = get(m, "vocab"), *unk = get(m, "unk_id");
    int cnt = cJSON_GetArraySize(vocab);
    int64_t unk_id;
    if (!cJSON_IsArray(vocab) || cnt < 1)
        return ERRF("%s: model.vocab: expected a non-empty list of [piece, score]", path);
    if (!unk || cJSON_IsNull(unk))
        return ERRF("%s: model.unk_id is null: a Unigram model without an unknown piece is not supported", path);
    if (!json_int(unk, 0, cnt - 1, &unk_id))
        return ERRF("%s: model.unk_id must be an integer in [0, %d): the vocabulary has %d pieces", path, cnt, cnt);
    t->uni = ut__unigram_new(cnt, (int32_t)unk_id, get_bool(m, "byte_fallback", false));
    int k = 0;
    for (const cJSON *e = vocab->child; e; e = e->next, k++) {
        const cJSON *piece = cJSON_GetArrayItem(e, 0), *score = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsString(piece) || !cJSON_IsNumber(score) ||
            !isfinite(score->valuedouble))
            return ERRF("%s: model.vocab[%d]: expected [piece, score], a string and a finite number", path, k);
        size_t len = strlen(piece->valuestring);
        if (!ut__vocab_tab_add(&t->vocab, piece->valuestring, len, k, path, err, n)) return false;
        ut__unigram_add(t->uni, k, piece->valuestring, len, score->valuedouble);
    }
    t->ids_unk = (int32_t)unk_id;
    return true;
}

/* A string of exactly one character: its code point, else -1. */
static int32_t one_char(const char *s) {
    size_t i = 0, len = s ? strlen(s) : 0;
    int32_t cp = len ? ut__utf8_next(s, len, &i) : -1;
    return i == len ? cp : -1;
}

static char *sub_path(char *buf, size_t size, const char *at, const char *list, int k) {
    snprintf(buf, size, "%s.%s[%d]", at, list, k);
    return buf;
}

/* Replace's {"String": s} or {"Regex": r} into a pattern or a regex. */
static bool read_pattern(const cJSON *o, bool regex_ok, char **pattern, ut__regex **re, const char *path,
                         const char *at, char *err, size_t n) {
    const char *str = get_str(get(o, "pattern"), "String"), *rx = get_str(get(o, "pattern"), "Regex");
    char where[600];
    snprintf(where, sizeof where, "%s: %s.pattern", path, at);
    if (str) {
        *pattern = ut__data_strdup(str);
        return true;
    }
    if (rx && regex_ok) return (*re = ut__regex_new(rx, where, err, n)) != NULL;
    return ERRF("%s: expected {\"String\": text}%s", where, regex_ok ? " or {\"Regex\": pattern}" : "");
}

static bool read_norm_step(ut_tokenizer *t, const cJSON *nz, const char *type, const char *path, const char *at,
                           char *err, size_t n) {
    ut__norm_step st = {.kind = -1};
    static const char *const forms[] = {"NFC", "NFD", "NFKC", "NFKD"};
    for (int k = 0; k < 4; k++)
        if (!strcmp(type, forms[k])) st.kind = UT__NORM_NFC + k;
    const char *text = get_str(nz, !strcmp(type, "Prepend") ? "prepend" : "content");
    char where[600];
    snprintf(where, sizeof where, "%s: %s.precompiled_charsmap", path, at);
    bool ok = true;
    if (!strcmp(type, "Precompiled")) {
        const char *b64 = get_str(nz, "precompiled_charsmap");
        st.kind = UT__NORM_PRECOMPILED;
        ok = b64 ? (st.cmap = ut__charsmap_from_base64(b64, where, err, n)) != NULL
                 : ERRF("%s: not a base64 string", where);
    } else if (!strcmp(type, "Replace") || !strcmp(type, "Prepend")) {
        st.kind = type[0] == 'R' ? UT__NORM_REPLACE : UT__NORM_PREPEND;
        ok = text ? true : ERRF("%s: %s.%s: expected a string", path, at, type[0] == 'R' ? "content" : "prepend");
        if (ok && st.kind == UT__NORM_REPLACE) ok = read_pattern(nz, true, &st.pattern, &st.re, path, at, err, n);
        st.content = ut__data_strdup(text ? text : "");
    } else if (!strcmp(type, "Strip") || !strcmp(type, "Lowercase")) {
        st.kind = type[0] == 'S' ? UT__NORM_STRIP : UT__NORM_LOWERCASE;
        st.left = get_bool(nz, "strip_left", false);
        st.right = get_bool(nz, "strip_right", true);
    } else if (st.kind < 0) {
        return ERRF("%s: %s: type \"%s\" is not supported with a Unigram model (Sequence, Precompiled, Replace, "
                    "Strip, Lowercase, NFC, NFD, NFKC, NFKD and Prepend are)", path, at, type);
    }
    ut__spm *p = &t->spm;
    p->norm = ut_realloc_check(p->norm, (size_t)(p->nnorm + 1) * sizeof *p->norm);
    p->norm[p->nnorm++] = st;   /* kept also when !ok, so that it is freed */
    return ok;
}

static bool read_spm_normalizer(ut_tokenizer *t, const cJSON *nz, const char *path, const char *at, int depth,
                                char *err, size_t n) {
    const char *type = get_str(nz, "type");
    if (!type) return ERRF("%s: %s: expected an object with a \"type\"", path, at);
    if (strcmp(type, "Sequence")) return read_norm_step(t, nz, type, path, at, err, n);
    const cJSON *list = get(nz, "normalizers");
    if (!cJSON_IsArray(list) || depth > 3)
        return ERRF("%s: %s.normalizers: expected a list (nested at most 3 deep)", path, at);
    int k = 0;
    char sub[256];
    for (const cJSON *e = list->child; e; e = e->next, k++)
        if (!read_spm_normalizer(t, e, path, sub_path(sub, sizeof sub, at, "normalizers", k), depth + 1, err, n))
            return false;
    return true;
}

/* Metaspace's replacement, prepend_scheme ("always", "first", "never";
 * older files: add_prefix_space) and split, as Hugging Face reads them. */
static bool read_metaspace(ut__metaspace *ms, const cJSON *o, const char *path, const char *at, char *err,
                           size_t n) {
    const char *scheme = get_str(o, "prepend_scheme");
    ms->replacement = one_char(get_str(o, "replacement"));
    if (ms->replacement < 0) return ERRF("%s: %s.replacement: expected a string of one character", path, at);
    ms->prepend = !scheme || !strcmp(scheme, "always") ? UT__PREPEND_ALWAYS
                : !strcmp(scheme, "first") ? UT__PREPEND_FIRST
                : !strcmp(scheme, "never") ? UT__PREPEND_NEVER : -1;
    if (ms->prepend < 0)
        return ERRF("%s: %s.prepend_scheme \"%s\": expected \"always\", \"first\" or \"never\"", path, at, scheme);
    if (!get_bool(o, "add_prefix_space", true)) ms->prepend = UT__PREPEND_NEVER;
    ms->split = get_bool(o, "split", true);
    return true;
}

static bool read_spm_pre_tokenizer(ut_tokenizer *t, const cJSON *pt, const char *path, const char *at,
                                   int depth, char *err, size_t n) {
    const char *type = get_str(pt, "type");
    ut__spm *p = &t->spm;
    if (!pt || cJSON_IsNull(pt)) return true;
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = get(pt, "pretokenizers");
        if (!cJSON_IsArray(list) || depth > 3)
            return ERRF("%s: %s.pretokenizers: expected a list (nested at most 3 deep)", path, at);
        int k = 0;
        char sub[256];
        for (const cJSON *e = list->child; e; e = e->next, k++)
            if (!read_spm_pre_tokenizer(t, e, path, sub_path(sub, sizeof sub, at, "pretokenizers", k), depth + 1,
                                        err, n))
                return false;
        return true;
    }
    if (type && !strcmp(type, "WhitespaceSplit")) {
        if (p->ws_split || p->metaspace) return ERRF("%s: %s: WhitespaceSplit can come once, before Metaspace", path, at);
        p->ws_split = true;
        return true;
    }
    if (!type || strcmp(type, "Metaspace"))
        return ERRF("%s: %s: type \"%s\" is not supported with a Unigram model (Metaspace, WhitespaceSplit, a "
                    "Sequence of them, or null are)", path, at, type ? type : "?");
    if (p->metaspace) return ERRF("%s: %s: a second Metaspace is not supported", path, at);
    if (!read_metaspace(&p->ms, pt, path, at, err, n)) return false;
    if (p->ws_split && p->ms.prepend == UT__PREPEND_FIRST)
        return ERRF("%s: %s: Metaspace with prepend_scheme \"first\" after WhitespaceSplit is not supported", path,
                    at);
    p->metaspace = true;
    return true;
}

static bool read_dec_step(ut_tokenizer *t, const cJSON *d, const char *type, const char *path, const char *at,
                          char *err, size_t n) {
    ut__dec_step st = {.kind = -1};
    bool ok = true;
    int64_t start = 0, stop = 0;
    if (!strcmp(type, "Metaspace")) {
        st.kind = UT__DEC_METASPACE;
        ok = read_metaspace(&st.ms, d, path, at, err, n);
    } else if (!strcmp(type, "ByteFallback") || !strcmp(type, "Fuse")) {
        st.kind = type[0] == 'B' ? UT__DEC_BYTE_FALLBACK : UT__DEC_FUSE;
    } else if (!strcmp(type, "Replace")) {
        const char *content = get_str(d, "content");
        st.kind = UT__DEC_REPLACE;
        ok = content ? read_pattern(d, false, &st.pattern, NULL, path, at, err, n)
                     : ERRF("%s: %s.content: expected a string", path, at);
        st.content = ut__data_strdup(content ? content : "");
    } else if (!strcmp(type, "Strip")) {
        st.kind = UT__DEC_STRIP;
        st.strip_char = one_char(get_str(d, "content"));
        ok = st.strip_char >= 0 && json_int(get(d, "start"), 0, 1 << 20, &start) &&
             json_int(get(d, "stop"), 0, 1 << 20, &stop);
        if (!ok) ut_errorf(err, n, "%s: %s: Strip needs a one-character content and integer start and stop", path, at);
        st.start = start;
        st.stop = stop;
    } else {
        return ERRF("%s: %s: type \"%s\" is not supported with a Unigram model (Metaspace, ByteFallback, Fuse, "
                    "Replace, Strip, a Sequence of them, or null are)", path, at, type);
    }
    ut__spm *p = &t->spm;
    p->dec = ut_realloc_check(p->dec, (size_t)(p->ndec + 1) * sizeof *p->dec);
    p->dec[p->ndec++] = st;
    return ok;
}

/* null: the tokens joined with spaces, as Hugging Face does without a decoder. */
static bool read_spm_decoder(ut_tokenizer *t, const cJSON *d, const char *path, const char *at, int depth,
                             char *err, size_t n) {
    const char *type = get_str(d, "type");
    if (!d || cJSON_IsNull(d)) return true;
    t->spm.decoder = true;
    if (!type) return ERRF("%s: %s: expected an object with a \"type\"", path, at);
    if (strcmp(type, "Sequence")) return read_dec_step(t, d, type, path, at, err, n);
    const cJSON *list = get(d, "decoders");
    if (!cJSON_IsArray(list) || depth > 3)
        return ERRF("%s: %s.decoders: expected a list (nested at most 3 deep)", path, at);
    int k = 0;
    char sub[256];
    for (const cJSON *e = list->child; e; e = e->next, k++)
        if (!read_spm_decoder(t, e, path, sub_path(sub, sizeof sub, at, "decoders", k), depth + 1, err, n))
            return false;
    return true;
}

static bool read_added(ut_tokenizer *t, const cJSON *list, const char *path, char *err, size_t n) {
    int cnt = cJSON_GetArraySize(list);
    if (!cJSON_IsArray(list) || !cnt) return true;
    t->added = ut_calloc_check((size_t)cnt, sizeof *t->added);
    for (const cJSON *e = list->child; e; e = e->next) {
        const char *content = get_str(e, "content");
        int64_t idv;
        if (!content || !*content || !json_int(get(e, "id"), 0, INT32_MAX - 1, &idv))
            return ERRF("%s: added_tokens[%d]: needs a content string and an integer id >= 0", path, t->nadded);
        if (get_bool(e, "single_word", false))
            return ERRF("%s: added token \"%s\": single_word is not supported", path, content);
        int32_t have = id_of(t, content);
        if (have < 0 && !ut__vocab_tab_add(&t->vocab, content, strlen(content), idv, path, err, n))
            return false;
        if (have >= 0 && have != (int32_t)idv)
            return ERRF("%s: added token \"%s\" has id %d but the vocabulary gives it %d", path, content,
                        (int)idv, (int)have);
        ut__added *a = &t->added[t->nadded++];
        a->content = ut__data_strdup(content);
        a->len = strlen(content);
        a->id = (int32_t)idv;
        a->lstrip = get_bool(e, "lstrip", false);
        a->rstrip = get_bool(e, "rstrip", false);
        a->special = get_bool(e, "special", false);
    }
    return true;
}

static bool read_model(ut_tokenizer *t, const cJSON *root, const char *path, char *err, size_t n) {
    const cJSON *m = get(root, "model");
    const char *type = get_str(m, "type");
    if (!cJSON_IsObject(m)) return ERRF("%s: no \"model\" object: not a tokenizer.json", path);
    if (!type && get(m, "merges")) type = "BPE";
    else if (!type && get(m, "vocab")) type = "WordPiece";  /* older files leave the type out */
    if (type && !strcmp(type, "WordPiece")) {
        t->kind = UT__TOK_WORDPIECE;
        return read_wordpiece(t, m, path, err, n);
    }
    if (type && !strcmp(type, "BPE")) {
        t->kind = UT__TOK_BPE;
        return read_bpe(t, m, path, err, n);
    }
    if (type && !strcmp(type, "Unigram")) {
        t->kind = UT__TOK_UNIGRAM;
        return read_unigram(t, m, path, err, n);
    }
    return ERRF("%s: model type \"%s\" is not supported (WordPiece, byte-level BPE and Unigram are)", path,
                type ? type : "?");
}

static bool load_tokenizer_json(ut_tokenizer *t, const char *path, char *err, size_t n) {
    cJSON *root = read_json(path, err, n);
    if (!root) return false;
    const cJSON *pad = get(root, "padding");
    const cJSON *pid = get(pad, "pad_id"), *ptid = get(pad, "pad_type_id");
    bool ok = read_model(t, root, path, err, n) && read_normalizer(t, get(root, "normalizer"), path, err, n) &&
              read_pre_tokenizer(t, get(root, "pre_tokenizer"), path, err, n) &&
              read_added(t, get(root, "added_tokens"), path, err, n) &&
              read_post_processor(t, get(root, "post_processor"), path, err, n) &&
              (t->kind != UT__TOK_UNIGRAM || read_spm_decoder(t, get(root, "decoder"), path, "decoder", 0, err, n));
    int64_t v;
    if (ok && pid && !cJSON_IsNull(pid)) {
        ok = int_token(t, pid, &v);
        if (ok) t->pad_id = (int32_t)v;
        else ut_errorf(err, n, "%s: padding.pad_id must be an id of the vocabulary", path);
    }
    if (ok && ptid && !cJSON_IsNull(ptid)) {
        ok = json_int(ptid, 0, 255, &v);
        if (ok) t->pad_type_id = (int32_t)v;
        else ut_errorf(err, n, "%s: padding.pad_type_id must be an integer in [0, 255]", path);
    }
    cJSON_Delete(root);
    return ok;
}

/* The special tokens of a vocabulary read without tokenizer.json are matched
 * in text, as transformers' tokenizers do with them (lstrip: RoBERTa's <mask>). */
static void add_specials_in_text(ut_tokenizer *t, const char *const *sp, int cnt, const char *lstrip) {
    t->added = ut_calloc_check((size_t)cnt, sizeof *t->added);
    for (int k = 0; k < cnt; k++) {
        int32_t id = id_of(t, sp[k]);
        if (id < 0) continue;
        bool ls = lstrip && !strcmp(sp[k], lstrip);
        t->added[t->nadded++] = (ut__added){ut__data_strdup(sp[k]), strlen(sp[k]), id, ls, false, true};
    }
}

/* ---- vocab.txt (BERT) ---- */

static char *sibling(const char *path, const char *name) {
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path + 1) : 0;
    char *s = ut_malloc_check(dl + strlen(name) + 1);
    memcpy(s, path, dl);
    strcpy(s + dl, name);
    return s;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* tokenizer_config.json beside vocab.txt, when there is one: do_lower_case,
 * strip_accents, tokenize_chinese_chars (defaults: true, as lower-casing, true). */
static bool read_bert_config(ut_tokenizer *t, const char *vocab_path, char *err, size_t n) {
    char *cfg = sibling(vocab_path, "tokenizer_config.json");
    t->clean = t->cjk = t->lowercase = true;
    cJSON *root = exists(cfg) ? read_json(cfg, err, n) : NULL;
    bool ok = !exists(cfg) || root;
    if (root) {
        t->lowercase = get_bool(root, "do_lower_case", true);
        t->cjk = get_bool(root, "tokenize_chinese_chars", true);
    }
    t->strip_accents = get_bool(root, "strip_accents", t->lowercase);
    cJSON_Delete(root);
    ut_free(cfg);
    return ok;
}

static bool load_vocab_txt(ut_tokenizer *t, const char *path, char *err, size_t n) {
    size_t len;
    char *buf = (char *)ut__read_file(path, &len, err, n);
    if (!buf) return false;
    int64_t bad = ut__utf8_check(buf, len); /* a token that is not text could never match one */
    if (bad >= 0) {
        int64_t line = 1;
        for (int64_t i = 0; i < bad; i++) line += buf[i] == '\n';
        ut_free(buf);
        return ERRF("%s: line %lld, byte offset %lld: not valid UTF-8 (a vocab.txt is UTF-8 text, one token a line)",
                    path, (long long)line, (long long)bad);
    }
    t->kind = UT__TOK_WORDPIECE;
    int64_t id = 0;
    bool ok = true;
    for (char *line = buf; ok && line < buf + len; id++) {
        char *nl = memchr(line, '\n', (size_t)(buf + len - line));
        char *end = nl ? nl : buf + len;
        char *e = end;
        while (e > line && strchr(" \t\r", e[-1])) e--;   /* trailing white space, as HF trims */
        ok = ut__vocab_tab_add(&t->vocab, line, (size_t)(e - line), id, path, err, n);
        if (!ok) ut_errorf(err, n, "%s: line %lld: token \"%.*s\" appears twice", path, (long long)id + 1,
                           (int)(e - line < 64 ? e - line : 64), line);
        line = end + 1;
    }
    ut_free(buf);
    if (!ok) return false;
    if (!t->vocab.size) return ERRF("%s: empty vocabulary", path);
    t->wp.prefix = ut__data_strdup("##");
    t->wp.max_chars = 100;
    t->ids_unk = t->wp.unk = id_of(t, "[UNK]");
    if (t->wp.unk < 0) return ERRF("%s: no [UNK] token in the vocabulary", path);
    if (!read_bert_config(t, path, err, n)) return false;
    find_specials(t);
    if (t->ids_cls < 0 || t->ids_sep < 0) return ERRF("%s: no [CLS] or [SEP] token in the vocabulary", path);
    default_templates(t, 1, t->ids_cls, t->ids_sep);
    static const char *const sp[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    add_specials_in_text(t, sp, 5, NULL);
    return true;
}

/* ---- vocab.json / encoder.json + merges.txt / vocab.bpe ---- */

static bool read_merges_txt(ut_tokenizer *t, const char *path, char *err, size_t n) {
    size_t len;
    char *buf = (char *)ut__read_file(path, &len, err, n);
    if (!buf) return false;
    bool ok = true;
    long lineno = 0;
    for (char *line = buf; ok && line < buf + len;) {
        char *nl = memchr(line, '\n', (size_t)(buf + len - line));
        char *end = nl ? nl : buf + len, *e = end;
        lineno++;
        if (e > line && e[-1] == '\r') e--;
        size_t ll = e > line ? (size_t)(e - line) : 0;
        char *sp = ll ? memchr(line, ' ', ll) : NULL;
        char where[512];
        snprintf(where, sizeof where, "%s: line %ld", path, lineno);
        if (!strncmp(line, "#version", 8) || e == line) {
            ok = e > line || !nl || end + 1 >= buf + len;   /* blank lines only at the end */
            if (!ok) ut_errorf(err, n, "%s: blank line", where);
        } else if (!sp || sp == line || sp + 1 == e || memchr(sp + 1, ' ', (size_t)(e - sp - 1))) {
            ok = ERRF("%s: \"%.*s\" is not two tokens separated by one space", where, (int)(e - line), line);
        } else {
            ok = ut__bpe_add_merge(t->bpe, &t->vocab, line, (size_t)(sp - line), sp + 1, (size_t)(e - sp - 1),
                                   where, err, n);
        }
        line = end + 1;
    }
    ut_free(buf);
    return ok;
}

static bool load_bpe_files(ut_tokenizer *t, const char *vocab, const char *merges, char *err, size_t n) {
    t->kind = UT__TOK_BPE;
    cJSON *root = read_json(vocab, err, n);
    if (!root) return false;
    bool ok = read_vocab_obj(t, root, vocab, err, n);
    cJSON_Delete(root);
    if (!ok) return false;
    t->bpe = ut__bpe_new(false);
    if (!read_merges_txt(t, merges, err, n) || !ut__bpe_check_bytes(t->bpe, &t->vocab, vocab, err, n))
        return false;
    find_specials(t);
    bool roberta = id_of(t, "<s>") >= 0 && id_of(t, "</s>") >= 0;
    default_templates(t, roberta ? 2 : 0, t->ids_cls, t->ids_sep);
    static const char *const sp[] = {"<|endoftext|>", "<s>", "</s>", "<pad>", "<unk>", "<mask>"};
    add_specials_in_text(t, sp, 6, "<mask>");
    return true;
}

/* ---- entry point ---- */

static bool load_dir(ut_tokenizer *t, const char *dir, char *err, size_t n) {
    size_t dl = strlen(dir);
    char *p = ut_malloc_check(dl + 32), *q = ut_malloc_check(dl + 32);
    const char *sep = dl && dir[dl - 1] == '/' ? "" : "/";
    bool ok = false, found = true;
    snprintf(p, dl + 32, "%s%stokenizer.json", dir, sep);
    if (exists(p)) {
        ok = load_tokenizer_json(t, p, err, n);
    } else if (snprintf(p, dl + 32, "%s%svocab.txt", dir, sep), exists(p)) {
        ok = load_vocab_txt(t, p, err, n);
    } else {
        snprintf(p, dl + 32, "%s%svocab.json", dir, sep);
        if (!exists(p)) snprintf(p, dl + 32, "%s%sencoder.json", dir, sep);
        snprintf(q, dl + 32, "%s%smerges.txt", dir, sep);
        if (!exists(q)) snprintf(q, dl + 32, "%s%svocab.bpe", dir, sep);
        found = exists(p) && exists(q);
        if (found) ok = load_bpe_files(t, p, q, err, n);
    }
    if (!found)
        ut_errorf(err, n, "%s: no tokenizer files: expected tokenizer.json, vocab.txt, or vocab.json (or "
                  "encoder.json) with merges.txt (or vocab.bpe)", dir);
    ut_free(t->source);
    t->source = ut__data_strdup(found ? p : dir);
    ut_free(p);
    ut_free(q);
    return ok;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static bool load_file(ut_tokenizer *t, const char *path, char *err, size_t n) {
    if (ends_with(path, "vocab.txt")) return load_vocab_txt(t, path, err, n);
    if (ends_with(path, "vocab.json") || ends_with(path, "encoder.json")) {
        char *m = sibling(path, "merges.txt");
        if (!exists(m)) {
            ut_free(m);
            m = sibling(path, "vocab.bpe");
        }
        bool ok = exists(m) ? load_bpe_files(t, path, m, err, n)
                            : ERRF("%s: no merges.txt or vocab.bpe beside it", path);
        ut_free(m);
        return ok;
    }
    return load_tokenizer_json(t, path, err, n);
}

ut_tokenizer *ut_tokenizer_load(const char *path, char *err, size_t n) {
    struct stat st;
    if (stat(path, &st) != 0) {
        ut_errorf(err, n, "%s: no such file or directory (a tokenizer directory or tokenizer.json)", path);
        return NULL;
    }
    ut_tokenizer *t = ut_calloc_check(1, sizeof *t);
    t->pad_id = t->ids_unk = -1;
    t->source = ut__data_strdup(path);
    bool ok = S_ISDIR(st.st_mode) ? load_dir(t, path, err, n) : load_file(t, path, err, n);
    if (ok) find_specials(t);
    if (!ok) {
        ut_tokenizer_free(t);
        return NULL;
    }
    return t;
}

static void free_items(ut__tmpl_item *it, int cnt) {
    for (int i = 0; it && i < cnt; i++) ut_free(it[i].ids);
    ut_free(it);
}

void ut_tokenizer_free(ut_tokenizer *t) {
    if (!t) return;
    ut__vocab_tab_free(&t->vocab);
    ut__bpe_free(t->bpe);
    ut__unigram_free(t->uni);
    ut__spm_free(&t->spm);
    ut_free(t->wp.prefix);
    for (int i = 0; i < t->nadded; i++) ut_free(t->added[i].content);
    ut_free(t->added);
    free_items(t->single, t->nsingle);
    free_items(t->pair, t->npair);
    ut_free(t->source);
    ut_free(t);
}
