/* Encoding with a pretrained tokenizer: added (special) tokens matched in
 * the raw text, then normalizer, pre-tokenizer and model (WordPiece, BPE,
 * Unigram) on the text between them; truncation (longest first for pairs),
 * the special-token template ([CLS] A [SEP] B [SEP], <s> A </s></s> B </s>,
 * A </s>), padding and the mask. */
#include <string.h>

#include "tok_internal.h"
#include "utrain/base.h"

/* Unigram: SentencePiece's normalizers, then Metaspace, then Viterbi. */
static void encode_unigram(ut_tokenizer *t, const char *s, size_t len, bool at_start, ut__ivec *out) {
    ut__pieces pc = {0};
    ut__sbuf buf = {0};
    size_t nl;
    bool lead_kept;
    char *norm = ut__spm_normalize(&t->spm, s, len, &nl, &lead_kept);
    ut__spm_pre_tokenize(&t->spm, norm, nl, at_start && lead_kept, &buf, &pc);
    for (size_t i = 0; i < pc.n; i++) ut__unigram_encode(t->uni, &t->vocab, buf.s + pc.p[i].off, pc.p[i].len, out);
    ut_free(norm);
    ut_free(buf.s);
    ut_free(pc.p);
}

/* The model's ids of plain text s[0, len) (no added tokens in it); at_start:
 * s begins the text. */
static void encode_plain(ut_tokenizer *t, const char *s, size_t len, bool at_start, ut__ivec *out) {
    ut__pieces pc = {0};
    if (t->kind == UT__TOK_UNIGRAM) {
        encode_unigram(t, s, len, at_start, out);
    } else if (t->kind == UT__TOK_WORDPIECE) {
        size_t nl;
        char *norm = ut__bert_normalize(s, len, t->clean, t->cjk, t->strip_accents, t->lowercase, &nl);
        ut__bert_split(norm, nl, &pc);
        for (size_t i = 0; i < pc.n; i++)
            ut__wordpiece_encode(&t->vocab, &t->wp, norm + pc.p[i].off, pc.p[i].len, out);
        ut_free(norm);
    } else {
        char *buf = NULL;
        if (t->prefix_space && len && s[0] != ' ') {   /* ByteLevel's add_prefix_space */
            buf = ut_malloc_check(len + 1);
            buf[0] = ' ';
            memcpy(buf + 1, s, len);
            s = buf;
            len++;
        }
        ut__gpt2_split(s, len, &pc);
        for (size_t i = 0; i < pc.n; i++) ut__bpe_encode(t->bpe, &t->vocab, s + pc.p[i].off, pc.p[i].len, out);
        ut_free(buf);
    }
    ut_free(pc.p);
}

/* The first added token at or after i: its index, start and end (with the
 * white space lstrip / rstrip take); -1 when none. */
static int next_added(const ut_tokenizer *t, const char *s, size_t len, size_t from, size_t *a, size_t *b) {
    for (size_t i = from; i < len; i++) {
        int best = -1;
        for (int k = 0; k < t->nadded; k++)   /* the longest match at i */
            if (t->added[k].len <= len - i && !memcmp(s + i, t->added[k].content, t->added[k].len) &&
                (best < 0 || t->added[k].len > t->added[best].len))
                best = k;
        if (best < 0) continue;
        *a = i;
        *b = i + t->added[best].len;
        if (t->added[best].lstrip)
            while (*a > from && strchr(" \t\n\r", s[*a - 1]) && s[*a - 1]) (*a)--;
        if (t->added[best].rstrip)
            while (*b < len && strchr(" \t\n\r", s[*b]) && s[*b]) (*b)++;
        return best;
    }
    return -1;
}

static void encode_seq(ut_tokenizer *t, const char *s, size_t len, ut__ivec *out) {
    size_t i = 0, a, b;
    for (;;) {
        int k = next_added(t, s, len, i, &a, &b);
        if (k < 0) break;
        if (a > i) encode_plain(t, s + i, a - i, i == 0, out);
        ut__ivec_push(out, t->added[k].id);
        i = b;
    }
    if (i < len) encode_plain(t, s + i, len - i, i == 0, out);
}

static int64_t count_specials(const ut__tmpl_item *it, int cnt) {
    int64_t c = 0;
    for (int i = 0; i < cnt; i++) c += it[i].seq < 0 ? it[i].nids : 0;
    return c;
}

/* Longest first, as Hugging Face does it: the shorter sequence (the first
 * when they are as long) keeps its tokens up to half of target (rounded
 * down), the longer one takes the rest. */
static void truncate_pair(int64_t *n1, int64_t *n2, int64_t target) {
    if (*n1 + *n2 <= target) return;
    bool first_short = *n1 <= *n2;
    int64_t *s = first_short ? n1 : n2, *l = first_short ? n2 : n1;
    if (*s > target / 2) *s = target / 2;
    *l = target - *s;
}

static void put(ut_tok_encoding *e, int32_t id, int32_t type_id, int32_t mask) {
    if (e->len == e->cap) {
        e->cap = e->cap ? 2 * e->cap : 256;
        e->ids = ut_realloc_check(e->ids, (size_t)e->cap * sizeof *e->ids);
        e->type_ids = ut_realloc_check(e->type_ids, (size_t)e->cap * sizeof *e->type_ids);
        e->mask = ut_realloc_check(e->mask, (size_t)e->cap * sizeof *e->mask);
    }
    e->ids[e->len] = id;
    e->type_ids[e->len] = type_id;
    e->mask[e->len++] = mask;
}

static int check_text(const char *what, const char *s, size_t len, char *err, size_t n) {
    int64_t bad = ut__utf8_check(s, len);
    if (bad >= 0) return ut_errorf(err, n, "%s: byte %lld: not valid UTF-8", what, (long long)bad);
    return 0;
}

int ut_tokenizer_encode(ut_tokenizer *t, const char *text, const char *pair, const ut_tok_opts *o,
                        ut_tok_encoding *e, char *err, size_t n) {
    ut_tok_opts none = {0};
    if (!o) o = &none;
    if (check_text("text", text, strlen(text), err, n) || (pair && check_text("pair", pair, strlen(pair), err, n)))
        return -1;
    ut__ivec seq[2] = {{0}, {0}};
    encode_seq(t, text, strlen(text), &seq[0]);
    if (pair) encode_seq(t, pair, strlen(pair), &seq[1]);
    const ut__tmpl_item *tm = pair ? t->pair : t->single;
    int ntm = pair ? t->npair : t->nsingle;
    int64_t specials = o->no_special ? 0 : count_specials(tm, ntm);
    if (o->max_len > 0) {
        int64_t target = o->max_len - specials;
        if (target < (pair ? 2 : 1)) {
            ut_free(seq[0].v);
            ut_free(seq[1].v);
            return ut_errorf(err, n, "max_len %lld leaves no room for text beside %lld special tokens",
                             (long long)o->max_len, (long long)specials);
        }
        if (pair) truncate_pair(&seq[0].n, &seq[1].n, target);
        else if (seq[0].n > target) seq[0].n = target;
    }
    e->len = 0;
    for (int i = 0; i < ntm; i++) {
        if (tm[i].seq < 0) {
            for (int j = 0; j < tm[i].nids && !o->no_special; j++) put(e, tm[i].ids[j], tm[i].type_id, 1);
            continue;
        }
        const ut__ivec *s = &seq[tm[i].seq];
        for (int64_t j = 0; j < s->n; j++) put(e, s->v[j], tm[i].type_id, 1);
    }
    while (e->len < o->pad_to) put(e, t->pad_id, t->pad_type_id, 0);
    ut_free(seq[0].v);
    ut_free(seq[1].v);
    return 0;
}

void ut_tok_encoding_free(ut_tok_encoding *e) {
    ut_free(e->ids);
    ut_free(e->type_ids);
    ut_free(e->mask);
    memset(e, 0, sizeof *e);
}

int64_t ut_tokenizer_vocab_size(const ut_tokenizer *t) { return t->vocab.size; }

const char *ut_tokenizer_model(const ut_tokenizer *t) {
    return t->kind == UT__TOK_WORDPIECE ? "WordPiece" : t->kind == UT__TOK_UNIGRAM ? "Unigram" : "BPE";
}

int32_t ut_tokenizer_token_id(const ut_tokenizer *t, const char *token) {
    return ut__strmap_get(&t->vocab.vocab, token, strlen(token));
}

const char *ut_tokenizer_token(const ut_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->vocab.size ? t->vocab.tokens[id] : NULL;
}

int32_t ut_tokenizer_special_id(const ut_tokenizer *t, const char *role) {
    static const char *const roles[] = {"cls", "sep", "pad", "unk", "mask", "bos", "eos"};
    const int32_t ids[] = {t->ids_cls, t->ids_sep, t->pad_id, t->ids_unk, t->ids_mask, t->ids_bos, t->ids_eos};
    for (int i = 0; i < 7; i++)
        if (!strcmp(role, roles[i])) return ids[i];
    return -1;
}
