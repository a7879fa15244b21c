/* Parse time of a tokenizer.json (GPT-2's: 50257 vocabulary entries, 50000
 * merges) with each JSON library Debian packages, to choose the one utrain
 * links. Each run reads the file once, then parses it from memory R times and
 * walks the model's vocab object and merges array, as a tokenizer loader
 * would. Prints the best and median time per parse. jansson and json-c
 * declare the same names, so each library gets its own binary:
 *   for l in JANSSON:jansson JSONC:json-c CJSON:cjson; do
 *     gcc -O2 -DLIB_${l%%:*} -o build/bench/json_parse_${l#*:} bench/json_parse.c -l${l#*:}
 *     build/bench/json_parse_${l#*:} tokenizer.json 20; done */
#define _GNU_SOURCE
#if defined(LIB_JANSSON)
#include <jansson.h>
#elif defined(LIB_JSONC)
#include <json-c/json.h>
#elif defined(LIB_CJSON)
#include <cjson/cJSON.h>
#else
#error "define LIB_JANSSON, LIB_JSONC or LIB_CJSON"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Each returns the number of vocab + merges entries seen (a check that the
 * parse is complete), or -1. */
#if defined(LIB_JANSSON)
#define LIB_NAME "jansson " JANSSON_VERSION
static long run(const char *s, size_t n) {
    json_error_t e;
    json_t *root = json_loadb(s, n, JSON_REJECT_DUPLICATES, &e);
    if (!root) return -1;
    json_t *m = json_object_get(root, "model");
    long cnt = 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(m, "vocab"), k, v) cnt += json_integer_value(v) >= 0;
    size_t i;
    json_array_foreach(json_object_get(m, "merges"), i, v) cnt += json_string_value(v) != NULL;
    json_decref(root);
    return cnt;
}

#elif defined(LIB_JSONC)
#define LIB_NAME "json-c " JSON_C_VERSION
static long run(const char *s, size_t n) {
    json_tokener *tk = json_tokener_new();
    json_object *root = json_tokener_parse_ex(tk, s, (int)n);
    json_tokener_free(tk);
    if (!root) return -1;
    json_object *m, *vocab, *merges;
    long cnt = 0;
    if (!json_object_object_get_ex(root, "model", &m) ||
        !json_object_object_get_ex(m, "vocab", &vocab) ||
        !json_object_object_get_ex(m, "merges", &merges))
        return -1;
    json_object_object_foreach(vocab, k, v) cnt += k && json_object_get_int(v) >= 0;
    size_t len = json_object_array_length(merges);
    for (size_t i = 0; i < len; i++)
        cnt += json_object_get_string(json_object_array_get_idx(merges, i)) != NULL;
    json_object_put(root);
    return cnt;
}

#else
#define LIB_NAME "cJSON"
static long run(const char *s, size_t n) {
    cJSON *root = cJSON_ParseWithLength(s, n);
    if (!root) return -1;
    cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    long cnt = 0;
    cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(m, "vocab")) cnt += v->string && v->valueint >= 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(m, "merges")) cnt += cJSON_IsString(v);
    cJSON_Delete(root);
    return cnt;
}

#endif

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s tokenizer.json [repeats]\n", argv[0]);
        return 1;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 20;
    if (reps < 1 || reps > 1000) reps = 20;
    FILE *fp = fopen(argv[1], "rb");
    if (!fp) { perror(argv[1]); return 1; }
    fseek(fp, 0, SEEK_END);
    size_t n = (size_t)ftell(fp);
    rewind(fp);
    char *s = malloc(n + 1);
    if (!s || fread(s, 1, n, fp) != n) { fprintf(stderr, "%s: read failed\n", argv[1]); return 1; }
    s[n] = 0;
    fclose(fp);
    double *t = malloc(sizeof *t * (size_t)reps);
    printf("%s: %zu bytes, %d parses\n", argv[1], n, reps);
    long cnt = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        cnt = run(s, n);
        t[r] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    printf("%-14s entries %7ld  best %7.2f ms  median %7.2f ms\n", LIB_NAME, cnt, t[0] * 1e3,
           t[reps / 2] * 1e3);
    free(t);
    free(s);
    return 0;
}
