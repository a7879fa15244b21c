/* Token classification's entity scores, as the seqeval package counts them
 * in its default mode (conlleval's rules), which transformers' run_ner
 * reports: each tag is a chunk letter (its first character: B, I, E, S, O,
 * or anything else) and a type (what follows the first '-' after that
 * letter; "_" when nothing does), and an entity is a run of tags from a
 * chunk start to a chunk end of one type. Precision is the predicted
 * entities that are also gold ones (same type, first and last word) over
 * the predicted, recall over the gold; sentences end with an O. */
#include <string.h>

#include "run_internal.h"

int ut_tag_scheme_init(ut_tag_scheme *s, const char *const *names, int64_t K) {
    *s = (ut_tag_scheme){.K = K};
    if (K < 1 || !names) return -1;
    s->chunk = ut_malloc_check((size_t)K);
    s->type = ut_malloc_check((size_t)K * sizeof *s->type);
    const char **types = ut_malloc_check((size_t)(K + 1) * sizeof *types); /* into names */
    int64_t ntypes = 1;
    types[0] = "_"; /* type 0: "_", the type of O (and of a tag with nothing after its letter) */
    size_t *lens = ut_malloc_check((size_t)(K + 1) * sizeof *lens);
    lens[0] = 1;
    for (int64_t k = 0; k < K; k++) {
        const char *name = names[k] ? names[k] : "";
        s->chunk[k] = name[0];
        /* seqeval: chunk[1:].split('-', maxsplit=1)[-1] or '_' */
        const char *rest = name[0] ? name + 1 : name, *dash = strchr(rest, '-');
        const char *t = dash ? dash + 1 : rest;
        size_t len = strlen(t);
        if (!len) t = "_", len = 1;
        int64_t id = 0;
        while (id < ntypes && !(lens[id] == len && !memcmp(types[id], t, len))) id++;
        if (id == ntypes) types[ntypes] = t, lens[ntypes++] = len;
        s->type[k] = (int32_t)id;
    }
    s->ntypes = (int32_t)ntypes;
    s->types = ut_malloc_check((size_t)ntypes * sizeof *s->types);
    for (int64_t i = 0; i < ntypes; i++) {
        s->types[i] = ut_malloc_check(lens[i] + 1);
        memcpy(s->types[i], types[i], lens[i]);
        s->types[i][lens[i]] = 0;
    }
    ut_free(types);
    ut_free(lens);
    return 0;
}

void ut_tag_scheme_free(ut_tag_scheme *s) {
    for (int32_t i = 0; s->types && i < s->ntypes; i++) ut_free(s->types[i]);
    ut_free(s->types);
    ut_free(s->chunk);
    ut_free(s->type);
    *s = (ut_tag_scheme){0};
}

static bool chunk_end(char pt, char t, int32_t ptype, int32_t type) {
    if (pt == 'E' || pt == 'S') return true;
    if ((pt == 'B' || pt == 'I') && (t == 'B' || t == 'S' || t == 'O')) return true;
    return pt != 'O' && pt != '.' && ptype != type;
}

static bool chunk_start(char pt, char t, int32_t ptype, int32_t type) {
    if (t == 'B' || t == 'S') return true;
    if ((pt == 'E' || pt == 'S' || pt == 'O') && (t == 'E' || t == 'I')) return true;
    return t != 'O' && t != '.' && ptype != type;
}

/* The entities of tags (n class ids) into e (at most n + 1 of (type, first,
 * last)); their count. A class outside [0, K) reads as O. */
static int64_t entities(const ut_tag_scheme *s, const int32_t *tags, int64_t n, int64_t (*e)[3]) {
    char pt = 'O';
    int32_t ptype = 0;
    int64_t begin = 0, m = 0;
    for (int64_t i = 0; i <= n; i++) { /* the sentence ends with an O */
        bool in = i < n && tags[i] >= 0 && tags[i] < s->K;
        char t = in ? s->chunk[tags[i]] : 'O';
        int32_t type = in ? s->type[tags[i]] : 0;
        if (chunk_end(pt, t, ptype, type)) e[m][0] = ptype, e[m][1] = begin, e[m][2] = i - 1, m++;
        if (chunk_start(pt, t, ptype, type)) begin = i;
        pt = t, ptype = type;
    }
    return m;
}

void ut_tag_count(const ut_tag_scheme *s, const int32_t *gold, const int32_t *pred, int64_t n, double c[3],
                  double *by_type) {
    int64_t(*g)[3] = ut_malloc_check((size_t)(n + 1) * sizeof *g), (*p)[3] = ut_malloc_check((size_t)(n + 1) * sizeof *p);
    int64_t ng = entities(s, gold, n, g), np = entities(s, pred, n, p), both = 0;
    /* both lists are in order of their last word (each entity ends before the next ends) */
    for (int64_t i = 0, j = 0; i < ng && j < np;) {
        if (g[i][2] != p[j][2]) {
            g[i][2] < p[j][2] ? i++ : j++;
        } else {
            bool same = g[i][0] == p[j][0] && g[i][1] == p[j][1];
            both += same;
            if (same && by_type) by_type[3 * g[i][0] + 2] += 1;
            i++, j++;
        }
    }
    for (int64_t i = 0; by_type && i < ng; i++) by_type[3 * g[i][0]] += 1;
    for (int64_t j = 0; by_type && j < np; j++) by_type[3 * p[j][0] + 1] += 1;
    c[0] += (double)ng, c[1] += (double)np, c[2] += (double)both;
    ut_free(g);
    ut_free(p);
}
