/* The WordPiece model (BERT): greedy longest-match-first over the
 * vocabulary, continuation pieces spelled with a prefix ("##"). */
#include <string.h>

#include "tok_internal.h"
#include "utrain/base.h"

static size_t count_chars(const char *s, size_t len) {
    size_t c = 0;
    for (size_t i = 0; i < len; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* The id of prefix + s[0, len), or -1. */
static int32_t lookup(const ut__vocab_tab *v, const char *prefix, const char *s, size_t len,
                      char *buf) {
    size_t pl = strlen(prefix);
    memcpy(buf, prefix, pl);
    memcpy(buf + pl, s, len);
    return ut__strmap_get(&v->vocab, buf, pl + len);
}

void ut__wordpiece_encode(const ut__vocab_tab *v, const ut__wordpiece *wp, const char *w,
                          size_t len, ut__ivec *out) {
    if ((int64_t)count_chars(w, len) > wp->max_chars) {
        ut__ivec_push(out, wp->unk);
        return;
    }
    char *buf = ut_malloc_check(strlen(wp->prefix) + len + 1);
    int64_t first = out->n;
    for (size_t start = 0; start < len;) {
        size_t end = len;
        int32_t id = -1;
        while (end > start) {
            id = lookup(v, start ? wp->prefix : "", w + start, end - start, buf);
            if (id >= 0) break;
            do end--; while (end > start && ((unsigned char)w[end] & 0xC0) == 0x80);
        }
        if (id < 0) {            /* a piece matches nothing: the whole word is unknown */
            out->n = first;
            ut__ivec_push(out, wp->unk);
            break;
        }
        ut__ivec_push(out, id);
        start = end;
    }
    ut_free(buf);
}
