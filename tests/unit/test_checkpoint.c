/* Checkpoints: an exact round trip of parameters, optimizer state and
 * training state; the file is plain safetensors with the documented names
 * and checksum; truncated, bit-flipped and mismatched files are rejected with
 * a message naming the file and modify nothing; directory listing, pruning
 * and paths. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "proc.h"
#include "test.h"
#include "utrain/base.h"
#include "utrain/io.h"
#include "utrain/train.h"

static char dir[64];

static const char *tmp_path(const char *name) { return tp_path(dir, name); }

static ut_model *make_mlp(const char *sizes, uint64_t seed) {
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "sizes", sizes);
    char err[256];
    ut_model *m = ut_model_create("mlp", kv, seed, err, sizeof err);
    ut_kv_free(kv);
    if (!m) fprintf(stderr, "model: %s\n", err);
    return m;
}

static ut_optim *make_optim(ut_model *m, ut_optim_kind kind, float momentum) {
    ut_optim_config c = ut_optim_defaults(kind);
    c.momentum = momentum;
    return ut_optim_new(&c, m->params.flat, m->params.flat_grad, m->params.segs, m->params.n, 0,
                        m->params.numel);
}

/* One optimizer step with made-up gradients, so the state is not zero. */
static void take_step(ut_model *m, ut_optim *o) {
    for (int64_t i = 0; i < m->params.numel; i++) m->params.flat_grad[i] = sinf((float)i * 0.37f);
    ut_optim_step(o, 0.01f);
}

static ut_train_state sample_state(void) {
    return (ut_train_state){.step = 7, .epoch = 2, .cursor = 1234567890123LL,
                            .rng = {0xfedcba9876543210ULL, 1, 0, UINT64_MAX},
                            .best_metric = 0.1, .best_step = 5, .bad_evals = 3,
                            .config_hash = 0x8000000000000001ULL, .schedule_held = 2,
                            .input_tokens_seen = 123456789012LL, .flos_tokens = 98765432109LL, .plateau = true,
                            .plateau_state = {.lr = 1e-4 / 3, .best = -INFINITY, .bad = 4, .cooldown = 2}};
}

static bool same_state(const ut_train_state *a, const ut_train_state *b) {
    bool metric = a->best_metric == b->best_metric ||
                  (isnan(a->best_metric) && isnan(b->best_metric));
    return a->step == b->step && a->epoch == b->epoch && a->cursor == b->cursor &&
           !memcmp(a->rng, b->rng, sizeof a->rng) && metric && a->best_step == b->best_step &&
           a->bad_evals == b->bad_evals && a->config_hash == b->config_hash &&
           a->schedule_held == b->schedule_held && a->input_tokens_seen == b->input_tokens_seen &&
           a->flos_tokens == b->flos_tokens &&
           a->plateau == b->plateau && a->plateau_state.lr == b->plateau_state.lr &&
           a->plateau_state.best == b->plateau_state.best && a->plateau_state.bad == b->plateau_state.bad &&
           a->plateau_state.cooldown == b->plateau_state.cooldown &&
           signbit(a->best_metric) == signbit(b->best_metric);
}

/* A model + AdamW pair whose buffers can be compared before and after. */
typedef struct {
    ut_model *m;
    ut_optim *o;
} pair;

static pair make_pair(const char *sizes, uint64_t seed) {
    pair p = {make_mlp(sizes, seed), NULL};
    if (p.m) p.o = make_optim(p.m, UT_OPTIM_ADAMW, 0);
    return p;
}

static void free_pair(pair p) {
    ut_optim_free(p.o);
    ut_model_free(p.m);
}

static bool same_buffers(pair a, pair b) {
    size_t bytes = (size_t)a.m->params.numel * sizeof(float);
    if (a.m->params.numel != b.m->params.numel || memcmp(a.m->params.flat, b.m->params.flat, bytes) ||
        ut_optim_steps(a.o) != ut_optim_steps(b.o))
        return false;
    for (int i = 0; i < ut_optim_nstate(a.o); i++)
        if (memcmp(ut_optim_state(a.o, i, NULL), ut_optim_state(b.o, i, NULL), bytes)) return false;
    return true;
}

/* The saved pair behind "ref.safetensors", used by several tests. */
static pair saved;

static void test_round_trip(void) {
    saved = make_pair("6,5,3", 1);
    take_step(saved.m, saved.o);
    ut_train_state st = sample_state();
    const char *path = tmp_path("ref.safetensors");
    char err[512] = "";
    CHECK(ut_ckpt_save(path, saved.m, saved.o, &st, err, sizeof err) == 0, "%s", err);

    pair q = make_pair("6,5,3", 2);
    CHECK(!same_buffers(saved, q), "fresh model equals the saved one: test is vacuous");
    ut_train_state got = {0};
    CHECK(ut_ckpt_load(path, q.m, q.o, &got, err, sizeof err) == 0, "%s", err);
    CHECK(same_buffers(saved, q), "parameters, optimizer state or step count differ");
    CHECK(ut_optim_steps(q.o) == 1, "steps %lld", (long long)ut_optim_steps(q.o));
    CHECK(same_state(&st, &got), "training state differs");

    /* The restored optimizer continues exactly like the original. */
    take_step(saved.m, saved.o);
    take_step(q.m, q.o);
    CHECK(same_buffers(saved, q), "the next step differs after loading");
    free_pair(q);
    /* Put saved back in line with the file for the tests below. */
    CHECK(ut_ckpt_load(path, saved.m, saved.o, NULL, err, sizeof err) == 0, "%s", err);

    /* no temporary file left behind */
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        CHECK(!strstr(e->d_name, ".tmp"), "temporary file %s left behind", e->d_name);
    if (d) closedir(d);
}

/* Adafactor's state: its factored second moment (per matrix its rows' and
 * columns' means) and first moment round-trip; the file's state tensor has
 * the factored size; a negative second moment is refused, naming the
 * tensor and element; an AdamW optimizer refuses the file naming both. */
static void test_adafactor_state(void) {
    ut_model *a = make_mlp("6,5,3", 1), *b = make_mlp("6,5,3", 2);
    ut_optim_config c = ut_optim_defaults(UT_OPTIM_ADAFACTOR);
    c.beta1 = 0.9f;
    ut_optim *oa = ut_optim_new(&c, a->params.flat, a->params.flat_grad, a->params.segs, a->params.n, 0,
                                a->params.numel);
    ut_optim *ob = ut_optim_new(&c, b->params.flat, b->params.flat_grad, b->params.segs, b->params.n, 0,
                                b->params.numel);
    take_step(a, oa);
    /* fc0.weight (5, 6): 5 + 6, fc0.bias 5, fc1.weight (3, 5): 3 + 5, fc1.bias 3 */
    CHECK(ut_optim_state_len(oa, 0) == 11 + 5 + 8 + 3, "factored state of %lld floats",
          (long long)ut_optim_state_len(oa, 0));
    ut_train_state st = sample_state();
    const char *path = tmp_path("adafactor.safetensors");
    char err[512] = "";
    CHECK(ut_ckpt_save(path, a, oa, &st, err, sizeof err) == 0, "%s", err);
    CHECK(ut_ckpt_load(path, b, ob, NULL, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 2; i++)
        CHECK(!memcmp(ut_optim_state(oa, i, NULL), ut_optim_state(ob, i, NULL),
                      (size_t)ut_optim_state_len(oa, i) * sizeof(float)),
              "state %d differs after loading", i);
    take_step(a, oa), take_step(b, ob);
    CHECK(!memcmp(a->params.flat, b->params.flat, (size_t)a->params.numel * sizeof(float)),
          "the next step differs after loading");
    ut_st_file *f = ut_st_open(path, err, sizeof err);
    const ut_st_tensor *t = f ? ut_st_get(f, "optim.exp_avg_sq_factored") : NULL;
    CHECK(t && t->ndim == 1 && t->shape[0] == 27, "optim.exp_avg_sq_factored: %lld floats",
          t ? (long long)t->shape[0] : -1LL);
    ut_st_close(f);
    /* a negative second moment (its checksum made right, so the value check is what refuses it) */
    float *sq = ut_optim_state(oa, 0, NULL);
    sq[4] = -1.0f;
    const char *bad = tmp_path("adafactor_bad.safetensors");
    CHECK(ut_ckpt_save(bad, a, oa, &st, err, sizeof err) == 0, "%s", err);
    CHECK(ut_ckpt_load(bad, b, ob, NULL, err, sizeof err) == -1 &&
              strstr(err, "optim.exp_avg_sq_factored holds -1 at element 4: a second moment must be finite and >= 0"),
          "%s", err);
    ut_optim *adam = make_optim(b, UT_OPTIM_ADAMW, 0);
    CHECK(ut_ckpt_load(path, b, adam, NULL, err, sizeof err) == -1 &&
              strstr(err, "the checkpoint's optimizer is Adafactor with beta1 (exp_avg_sq_factored, exp_avg) but this "
                          "optimizer is AdamW"),
          "%s", err);
    ut_optim_free(adam);
    ut_optim_free(oa), ut_optim_free(ob);
    ut_model_free(a), ut_model_free(b);
}

/* best_metric before any evaluation is +-inf or nan; all must survive. */
static void test_special_metrics(void) {
    const double vals[] = {INFINITY, -INFINITY, NAN, -0.0, 5e-324, 1.0 / 3.0, -1.7976931348623157e308};
    const char *path = tmp_path("metric.safetensors");
    char err[512] = "";
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        ut_train_state st = sample_state(), got = {0};
        st.best_metric = vals[i];
        st.best_step = -1;
        CHECK(ut_ckpt_save(path, saved.m, NULL, &st, err, sizeof err) == 0, "%s", err);
        CHECK(ut_ckpt_load(path, saved.m, NULL, &got, err, sizeof err) == 0, "%s", err);
        CHECK(same_state(&st, &got), "best_metric %.17g came back as %.17g", vals[i], got.best_metric);
    }
    /* Saved without an optimizer: loading one from it is an error. */
    pair q = make_pair("6,5,3", 3);
    CHECK(ut_ckpt_load(path, q.m, q.o, NULL, err, sizeof err) == -1, "loaded missing optimizer state");
    CHECK(strstr(err, path) && strstr(err, "no optimizer state"), "%s", err);
    free_pair(q);
}

/* Plain safetensors that Python can read, and the checksum follows the
 * documented rule (recomputed here independently of the library). */
static void test_file_layout(void) {
    const char *path = tmp_path("ref.safetensors");
    char err[512] = "";
    ut_st_file *f = ut_st_open(path, err, sizeof err);
    CHECK(f, "%s", err);
    if (!f) return;
    const ut_st_tensor *w = ut_st_get(f, "model.fc0.weight");
    CHECK(w && w->dtype == UT_ST_F32 && w->ndim == 2 && w->shape[0] == 5 && w->shape[1] == 6,
          "model.fc0.weight missing or misshapen");
    CHECK(w && !memcmp(w->data, ut_model_param(saved.m, "fc0.weight")->data, w->nbytes), "fc0.weight data");
    CHECK(ut_st_get(f, "model.fc1.bias"), "model.fc1.bias missing");
    const ut_st_tensor *ea = ut_st_get(f, "optim.exp_avg");
    CHECK(ea && ea->ndim == 1 && ea->shape[0] == saved.m->params.numel, "optim.exp_avg");
    CHECK(ut_st_get(f, "optim.exp_avg_sq"), "optim.exp_avg_sq missing");
    CHECK(ut_st_count(f) == saved.m->params.n + 2, "%d tensors", ut_st_count(f));
    const char *fmt = ut_st_meta(f, "utrain.format");
    CHECK(fmt && !strcmp(fmt, "utrain-checkpoint-1"), "format %s", fmt ? fmt : "(none)");
    const char *type = ut_st_meta(f, "model.type"), *step = ut_st_meta(f, "train.step");
    CHECK(type && !strcmp(type, "mlp") && step && !strcmp(step, "7"), "model.type/train.step");
    const char *rng = ut_st_meta(f, "train.rng");
    CHECK(rng && !strcmp(rng, "fedcba9876543210,0000000000000001,0000000000000000,ffffffffffffffff"),
          "train.rng %s", rng ? rng : "(none)");
    const char *state = ut_st_meta(f, "optim.state");
    CHECK(state && !strcmp(state, "exp_avg,exp_avg_sq"), "optim.state %s", state ? state : "(none)");

    /* The documented rule: metadata sorted by key as "key\0value\0", then
     * tensors sorted by name as "name\0DTYPE\0d0,d1\0" + bytes, zlib CRC-32. */
    static const char *const keys[] = {
        "model.type", "optim.plateau_bad_evals", "optim.plateau_best", "optim.plateau_cooldown",
        "optim.plateau_lr", "optim.state", "optim.steps", "train.bad_evals", "train.best_metric",
        "train.best_step", "train.config_hash", "train.cursor", "train.epoch", "train.flos_tokens",
        "train.input_tokens_seen", "train.rng", "train.schedule_held", "train.step", "utrain.format"};
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const char *v = ut_st_meta(f, keys[i]);
        CHECK(v, "metadata %s missing", keys[i]);
        if (!v) continue;
        crc = crc32(crc, (const Bytef *)keys[i], (uInt)strlen(keys[i]) + 1);
        crc = crc32(crc, (const Bytef *)v, (uInt)strlen(v) + 1);
    }
    const char *names[64];
    int nt = ut_st_count(f);
    for (int i = 0; i < nt; i++) names[i] = ut_st_name(f, i);
    for (int i = 1; i < nt; i++)   /* insertion sort by strcmp */
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    for (int i = 0; i < nt; i++) {
        const ut_st_tensor *t = ut_st_get(f, names[i]);
        char head[256];
        int len = snprintf(head, sizeof head, "%s%c%s%c", names[i], 0, ut_st_dtype_name(t->dtype), 0);
        for (int d = 0; d < t->ndim; d++)
            len += snprintf(head + len, sizeof head - (size_t)len, "%s%lld", d ? "," : "",
                            (long long)t->shape[d]);
        crc = crc32(crc, (const Bytef *)head, (uInt)len + 1);
        crc = crc32(crc, t->data, (uInt)t->nbytes);
    }
    char want[16];
    snprintf(want, sizeof want, "%08lx", (unsigned long)crc);
    const char *sum = ut_st_meta(f, "utrain.checksum");
    CHECK(sum && !strcmp(sum, want), "checksum %s, documented rule gives %s", sum ? sum : "(none)", want);
    ut_st_close(f);
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    *len = (size_t)ftell(fp);
    rewind(fp);
    unsigned char *b = malloc(*len);
    if (fread(b, 1, *len, fp) != *len) *len = 0;
    fclose(fp);
    return b;
}

static void write_file(const char *path, const void *b, size_t len) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return;
    fwrite(b, 1, len, fp);
    fclose(fp);
}

/* Loading path into a fresh pair fails with a message naming the file and
 * containing want, and leaves the pair exactly as it was. */
static void expect_rejected(const char *path, const char *sizes, const char *want, const char *what) {
    pair q = make_pair(sizes, 9);
    take_step(q.m, q.o);
    pair before = make_pair(sizes, 9);
    take_step(before.m, before.o);
    ut_train_state st = sample_state();
    st.step = -42;
    char err[512] = "";
    CHECK(ut_ckpt_load(path, q.m, q.o, &st, err, sizeof err) == -1, "%s: accepted", what);
    CHECK(strstr(err, path), "%s: message does not name the file: %s", what, err);
    CHECK(!want || strstr(err, want), "%s: message lacks \"%s\": %s", what, want, err);
    CHECK(same_buffers(q, before), "%s: the model or optimizer was modified", what);
    CHECK(st.step == -42, "%s: the training state was modified", what);
    free_pair(before);
    free_pair(q);
}

static void test_corrupt_files(void) {
    size_t len = 0;
    unsigned char *b = read_file(tmp_path("ref.safetensors"), &len);
    CHECK(b && len > 100, "cannot read ref.safetensors");
    if (!b || len <= 100) return free(b);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    const char *bad = tmp_path("bad.safetensors");

    const size_t cuts[] = {0, 5, 8, 8 + hlen / 2, 8 + hlen, 8 + hlen + 1, len - 4, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        write_file(bad, b, cuts[i]);
        char what[64];
        snprintf(what, sizeof what, "truncated at %zu of %zu", cuts[i], len);
        expect_rejected(bad, "6,5,3", NULL, what);
    }

    b[len - 1] ^= 0x10;   /* last byte of the last tensor */
    write_file(bad, b, len);
    expect_rejected(bad, "6,5,3", "checksum mismatch: the file is corrupt", "bit flip in the data");
    b[len - 1] ^= 0x10;
    b[8 + hlen + 3] ^= 0x01;   /* first tensor */
    write_file(bad, b, len);
    expect_rejected(bad, "6,5,3", "checksum mismatch", "bit flip in the first tensor");
    b[8 + hlen + 3] ^= 0x01;

    /* "train.epoch":"2" -> "3": still well-formed, only the checksum notices. */
    const char *key = "\"train.epoch\":\"";
    unsigned char *at = memmem(b + 8, hlen, key, strlen(key));
    CHECK(at, "train.epoch not found in the header");
    if (at) {
        at[strlen(key)] ^= 0x01;
        write_file(bad, b, len);
        expect_rejected(bad, "6,5,3", "checksum mismatch", "bit flip in a metadata value");
        at[strlen(key)] ^= 0x01;
    }
    write_file(bad, b, len);   /* intact again: loads */
    pair q = make_pair("6,5,3", 4);
    char err[512];
    CHECK(ut_ckpt_load(bad, q.m, q.o, NULL, err, sizeof err) == 0, "restored copy: %s", err);
    free_pair(q);
    free(b);

    expect_rejected(tmp_path("missing.safetensors"), "6,5,3", "cannot open", "missing file");
}

/* A checksum proves the file is intact, not that its training state is
 * possible: impossible values are refused naming the field, and nothing is
 * loaded. */
static void test_impossible_state(void) {
    struct { const char *field; ut_train_state st; } cases[] = {
        {"\"train.step\" is -7", {.step = -7, .best_step = -1, .rng = {1}}},
        {"\"train.epoch\" is -1", {.step = 3, .epoch = -1, .best_step = -1, .rng = {1}}},
        {"\"train.cursor\" is -5", {.step = 3, .cursor = -5, .best_step = -1, .rng = {1}}},
        {"\"train.best_step\" is 9, outside [-1, 3] (at most train.step)", {.step = 3, .best_step = 9, .rng = {1}}},
        {"\"train.best_step\" is -2", {.step = 3, .best_step = -2, .rng = {1}}},
        {"\"train.bad_evals\" is -1", {.step = 3, .best_step = -1, .bad_evals = -1, .rng = {1}}},
        {"\"train.rng\" is all zeros", {.step = 3, .best_step = -1}},
        {"\"train.epoch\" is 4611686018427387904, outside [0, 4] (at most train.step)",
         {.step = 4, .epoch = 4611686018427387904LL, .best_step = -1, .rng = {1}}},
        {"\"optim.steps\" is 1, more than train.step 0", {.step = 0, .best_step = -1, .rng = {1}}},
        {"\"train.bad_evals\" is 9223372036854775807, outside [0, 5] (at most train.step)",
         {.step = 5, .best_step = -1, .bad_evals = INT64_MAX, .rng = {1}}},
        {"\"train.schedule_held\" is 6, outside [0, 5] (at most train.step)",
         {.step = 5, .best_step = -1, .schedule_held = 6, .rng = {1}}},
        {"\"train.best_metric\" is inf at best step 2",
         {.step = 5, .best_step = 2, .best_metric = INFINITY, .rng = {1}}},
        {"\"train.best_metric\" is nan at best step 2", {.step = 5, .best_step = 2, .best_metric = NAN, .rng = {1}}},
        {"\"optim.plateau_bad_evals\" is 6, outside [0, 5] (at most train.step)",
         {.step = 5, .best_step = -1, .rng = {1}, .plateau = true, .plateau_state = {.lr = 1, .bad = 6}}},
        {"\"optim.plateau_cooldown\" is -1",
         {.step = 5, .best_step = -1, .rng = {1}, .plateau = true, .plateau_state = {.lr = 1, .cooldown = -1}}},
        {"\"optim.plateau_lr\" is -0.5, not a learning rate",
         {.step = 5, .best_step = -1, .rng = {1}, .plateau = true, .plateau_state = {.lr = -0.5}}},
        {"\"optim.plateau_lr\" is inf, not a learning rate",
         {.step = 5, .best_step = -1, .rng = {1}, .plateau = true, .plateau_state = {.lr = INFINITY}}},
        {"\"optim.plateau_best\" is NaN",
         {.step = 5, .best_step = -1, .rng = {1}, .plateau = true, .plateau_state = {.lr = 1, .best = NAN}}},
    };
    const char *path = tmp_path("impossible.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        CHECK(ut_ckpt_save(path, saved.m, saved.o, &cases[i].st, err, sizeof err) == 0, "%s", err);
        expect_rejected(path, "6,5,3", cases[i].field, cases[i].field);
    }
    ut_train_state ok = {.step = 3, .best_step = 3, .rng = {1}};
    char err[512] = "";
    CHECK(ut_ckpt_save(path, saved.m, saved.o, &ok, err, sizeof err) == 0, "%s", err);
    pair q = make_pair("6,5,3", 9);
    CHECK(ut_ckpt_load(path, q.m, q.o, NULL, err, sizeof err) == 0, "the limits themselves: %s", err);
    free_pair(q);
}

/* optim.schedule greedy's state comes back whole: its counters, and its
 * smoothing window in order (oldest first, wherever the ring starts), the
 * running sum exactly, NaN metrics included; an empty window too. A greedy
 * state with a count no run reaches is refused naming the key. */
static void test_greedy_state(void) {
    const char *path = tmp_path("greedy.safetensors");
    char err[512] = "";
    for (int full = 0; full < 2; full++) {
        ut_train_state st = sample_state(), got = {0};
        st.greedy = true;
        ut_plateau_state *p = &st.plateau_state;
        p->good = 3;
        p->warmup = 2;
        p->reset_left = 499;
        p->win_sum = full ? 1.0 / 3.0 + 0.1 : 0;
        p->win_n = full ? UT_GREEDY_WINDOW_MAX : 0;
        p->win_head = full ? 250 : 0;
        for (int i = 0; i < UT_GREEDY_WINDOW_MAX; i++) p->win[i] = i == 7 ? NAN : 0.25 * i - 1.0 / 3.0;
        CHECK(ut_ckpt_save(path, saved.m, saved.o, &st, err, sizeof err) == 0, "%s", err);
        pair q = make_pair("6,5,3", 2);
        CHECK(ut_ckpt_load(path, q.m, q.o, &got, err, sizeof err) == 0, "%s", err);
        free_pair(q);
        const ut_plateau_state *g = &got.plateau_state;
        bool same = same_state(&st, &got) && got.greedy && g->good == 3 && g->warmup == 2 && g->reset_left == 499 &&
                    g->win_n == p->win_n && g->win_sum == p->win_sum;
        for (int64_t i = 0; same && i < p->win_n; i++) {
            double a = p->win[(p->win_head + i) % UT_GREEDY_WINDOW_MAX], b = g->win[(g->win_head + i) % UT_GREEDY_WINDOW_MAX];
            same = a == b || (isnan(a) && isnan(b));
        }
        CHECK(same, "greedy state (window of %lld) differs after a round trip: good %lld warmup %lld reset %lld n %lld",
              (long long)p->win_n, (long long)g->good, (long long)g->warmup, (long long)g->reset_left,
              (long long)g->win_n);
    }
    struct { const char *field; ut_plateau_state ps; } cases[] = {
        {"\"optim.greedy_good_evals\" is 6, outside [0, 5]", {.lr = 1, .good = 6, .reset_left = 1}},
        {"\"optim.greedy_warmup_left\" is -1", {.lr = 1, .warmup = -1, .reset_left = 1}},
        {"\"optim.greedy_reset_left\" is 0, outside [1, ", {.lr = 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ut_train_state st = {.step = 5, .best_step = -1, .rng = {1}, .plateau = true, .greedy = true,
                             .plateau_state = cases[i].ps};
        CHECK(ut_ckpt_save(path, saved.m, saved.o, &st, err, sizeof err) == 0, "%s", err);
        expect_rejected(path, "6,5,3", cases[i].field, cases[i].field);
    }
}

/* Weights or optimizer state that no training produces (NaN, inf, a
 * negative second moment) are refused at load, naming the tensor and the
 * element; a Hugging Face weights file with a NaN likewise. */
static void test_damaged_values(void) {
    const struct { int which; int64_t at; float v; const char *want; } cases[] = {
        {-1, 3, NAN, "parameter fc0.weight holds nan at element 3"},
        {-1, 31, INFINITY, "holds inf at element"},
        {1, 2, -1e-3f, "optimizer state optim.exp_avg_sq holds -0.001 at element 2: a second moment must be"},
        {0, 5, NAN, "optimizer state optim.exp_avg holds nan at element 5"},
    };
    const char *path = tmp_path("damaged.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pair p = make_pair("6,5,3", 4);
        take_step(p.m, p.o);
        float *buf = cases[i].which < 0 ? p.m->params.flat : ut_optim_state(p.o, cases[i].which, NULL);
        buf[cases[i].at] = cases[i].v;
        ut_train_state st = sample_state();
        char err[512] = "";
        CHECK(ut_ckpt_save(path, p.m, p.o, &st, err, sizeof err) == 0, "%s", err);
        expect_rejected(path, "6,5,3", cases[i].want, cases[i].want);
        free_pair(p);
    }
    /* a pretrained-style weights file: the same check names the tensor */
    pair p = make_pair("6,5,3", 4);
    const ut_params *ps = &p.m->params;
    const char *names[8];
    ut_st_tensor ts[8];
    for (int i = 0; i < ps->n && i < 8; i++) {
        names[i] = ps->names[i];
        ts[i] = (ut_st_tensor){.dtype = UT_ST_F32, .ndim = ps->t[i]->ndim, .data = ut_f32(ps->t[i]),
                               .nbytes = (size_t)ut_nelem(ps->t[i]) * sizeof(float)};
        for (int d = 0; d < ps->t[i]->ndim; d++) ts[i].shape[d] = ps->t[i]->ne[d];
    }
    ut_f32(ps->t[1])[2] = NAN;
    const char *hf = tmp_path("hf");
    mkdir(hf, 0755);
    char err[512] = "";
    CHECK(ut_st_save(tp_path(hf, "model.safetensors"), ps->n, names, ts, NULL, err, sizeof err) == 0, "%s", err);
    pair q = make_pair("6,5,3", 5);
    int rc = ut_hf_load_weights(q.m, hf, &(ut_hf_load_opts){0}, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "model.safetensors") && strstr(err, ps->names[1]) && strstr(err, "nan at element 2"),
          "a NaN in model.safetensors is refused naming it (rc %d): %s", rc, err);
    free_pair(q);
    free_pair(p);
}

static void test_mismatches(void) {
    const char *path = tmp_path("ref.safetensors");
    expect_rejected(path, "6,4,3", "fc0.weight", "other hidden size");
    expect_rejected(path, "6,4,3", "(5, 6)", "other hidden size (checkpoint shape)");
    expect_rejected(path, "6,4,3", "(4, 6)", "other hidden size (model shape)");
    expect_rejected(path, "6,5", "tensor model.fc1.weight is not a parameter", "fewer layers");
    expect_rejected(path, "6,5,3,2", "fc2.weight is missing", "more layers");

    /* An optimizer of another kind: the message names both. */
    pair q = make_pair("6,5,3", 6);
    ut_optim *o = make_optim(q.m, UT_OPTIM_SGD, 0.9f);
    float before = q.m->params.flat[0];
    char err[512] = "";
    CHECK(ut_ckpt_load(path, q.m, o, NULL, err, sizeof err) == -1, "SGD loaded AdamW state");
    CHECK(strstr(err, path) && strstr(err, "AdamW") && strstr(err, "SGD with momentum"), "%s", err);
    CHECK(q.m->params.flat[0] == before, "model modified");
    ut_optim_free(o);
    o = make_optim(q.m, UT_OPTIM_LION, 0);
    CHECK(ut_ckpt_load(path, q.m, o, NULL, err, sizeof err) == -1, "Lion loaded AdamW state");
    CHECK(strstr(err, "AdamW") && strstr(err, "this optimizer is Lion (exp_avg)"), "%s", err);
    ut_optim_free(o);
    free_pair(q);

    /* A model of another type with the same parameter names is refused too. */
    ut_model *m = make_mlp("6,5,3", 7);
    char *type = m->type;
    m->type = "other";
    CHECK(ut_ckpt_load(path, m, NULL, NULL, err, sizeof err) == -1, "other model type loaded");
    CHECK(strstr(err, "\"mlp\"") && strstr(err, "\"other\""), "%s", err);
    m->type = type;
    ut_model_free(m);

    /* A safetensors file that is not a checkpoint. */
    float v[2] = {1, 2};
    const char *nm[] = {"model.fc0.weight"};
    ut_st_tensor t = {UT_ST_F32, 1, {2}, v, sizeof v};
    const char *foreign = tmp_path("foreign.safetensors");
    CHECK(ut_st_save(foreign, 1, nm, &t, NULL, err, sizeof err) == 0, "%s", err);
    expect_rejected(foreign, "6,5,3", "not a utrain checkpoint", "foreign safetensors");
}

static void touch(const char *d, const char *name) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", d, name);
    write_file(p, "x", 1);
}

static bool exists(const char *d, const char *name) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", d, name);
    return access(p, F_OK) == 0;
}

static void test_directory(void) {
    char p[256];
    ut_ckpt_path(p, sizeof p, "runs/x/checkpoints", 42);
    CHECK(!strcmp(p, "runs/x/checkpoints/step_00000042.safetensors"), "%s", p);
    ut_ckpt_path(p, sizeof p, "ck/", 123456789);
    CHECK(!strcmp(p, "ck/step_123456789.safetensors"), "%s", p);

    char d[128];
    snprintf(d, sizeof d, "%s/ckpts", dir);
    int64_t steps[8] = {0};
    CHECK(ut_ckpt_list(d, steps, 8) == 0, "missing dir lists something");
    CHECK(mkdir(d, 0777) == 0, "mkdir %s", d);
    CHECK(ut_ckpt_list(d, steps, 8) == 0, "empty dir lists something");
    char err[512] = "";
    ut_train_state st = sample_state();
    const int64_t made[] = {20, 5, 123456789, 10, 0};
    for (size_t i = 0; i < sizeof made / sizeof *made; i++) {
        ut_ckpt_path(p, sizeof p, d, made[i]);
        CHECK(ut_ckpt_save(p, saved.m, saved.o, &st, err, sizeof err) == 0, "%s", err);
    }
    /* Not checkpoints: a crashed save's temporary file, foreign files, a
     * name ut_ckpt_path would not produce. */
    const char *others[] = {"step_00000030.safetensors.tmp.123.0", "notes.txt", "step_1.safetensors",
                            "step_0000003x.safetensors", "step_.safetensors", "best.safetensors"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) touch(d, others[i]);

    int n = ut_ckpt_list(d, steps, 8);
    CHECK(n == 5 && steps[0] == 123456789 && steps[1] == 20 && steps[2] == 10 && steps[3] == 5 &&
          steps[4] == 0, "list: %d: %lld %lld %lld %lld %lld", n, (long long)steps[0],
          (long long)steps[1], (long long)steps[2], (long long)steps[3], (long long)steps[4]);
    n = ut_ckpt_list(d, steps, 2);
    CHECK(n == 2 && steps[0] == 123456789 && steps[1] == 20, "list max 2: %d", n);

    CHECK(ut_ckpt_prune(d, 0, -1, err, sizeof err) == 0 && ut_ckpt_list(d, steps, 8) == 5,
          "keep 0 deleted something");
    CHECK(ut_ckpt_prune(d, 2, 5, err, sizeof err) == 0, "%s", err);
    n = ut_ckpt_list(d, steps, 8);
    CHECK(n == 3 && steps[0] == 123456789 && steps[1] == 20 && steps[2] == 5,
          "after prune(2, best 5): %d: %lld %lld %lld", n, (long long)steps[0], (long long)steps[1],
          (long long)steps[2]);
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        CHECK(exists(d, others[i]), "prune deleted %s", others[i]);
    /* The best one among the newest: nothing extra kept. */
    CHECK(ut_ckpt_prune(d, 1, 123456789, err, sizeof err) == 0, "%s", err);
    n = ut_ckpt_list(d, steps, 8);
    CHECK(n == 1 && steps[0] == 123456789, "after prune(1, best newest): %d", n);
    ut_ckpt_path(p, sizeof p, d, 123456789);
    pair q = make_pair("6,5,3", 8);
    CHECK(ut_ckpt_load(p, q.m, q.o, NULL, err, sizeof err) == 0, "%s", err);
    free_pair(q);

    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        snprintf(p, sizeof p, "%s/%s", d, others[i]);
        unlink(p);
    }
    ut_ckpt_path(p, sizeof p, d, 123456789);
    unlink(p);
    rmdir(d);
}

/* Temporary files of a save whose process is gone are removed; those of live
 * processes (this one, pid 1) and foreign files stay. */
static void test_clean_temp(void) {
    const char *d = tmp_path("tmpclean");
    CHECK(mkdir(d, 0777) == 0, "mkdir %s", d);
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    char dead[96], mine[96];
    snprintf(dead, sizeof dead, "step_00000005.safetensors.tmp.%ld.0", (long)child);
    snprintf(mine, sizeof mine, "step_00000006.safetensors.tmp.%ld.3", (long)getpid());
    const char *stay[] = {mine, "step_00000007.safetensors.tmp.1.0", "step_00000005.safetensors",
                          "notes.tmp.99999999.0", "step_00000005.safetensors.tmp.x.0"};
    touch(d, dead);
    for (int i = 0; i < 5; i++) touch(d, stay[i]);
    CHECK(ut_ckpt_clean_temp(d) == 1, "removed count");
    CHECK(!exists(d, dead), "%s is still there", dead);
    for (int i = 0; i < 5; i++) {
        CHECK(exists(d, stay[i]), "%s was removed", stay[i]);
        char p[256];
        snprintf(p, sizeof p, "%s/%s", d, stay[i]);
        unlink(p);
    }
    rmdir(d);
}

static void remove_dir(void) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[256];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* The writer for models in parts: its file is ut_ckpt_save's, byte for
 * byte; the reader reads a parameter and its state segments; a file whose
 * parameters come in another order loads each state segment by name. */
static void put_all(ut_ckpt_writer *w, const float *v, int64_t n, int64_t piece, char *err, size_t en) {
    for (int64_t at = 0; at < n; at += piece) CHECK(ut_ckpt_writer_put(w, v + at, n - at < piece ? n - at : piece, err, en) == 0, "%s", err);
}

static void test_streamed(void) {
    pair a = make_pair("6,5,3", 3);
    take_step(a.m, a.o);
    ut_train_state st = sample_state();
    const ut_params *p = &a.m->params;
    char err[512] = "";
    const char *ref = tmp_path("s_ref.safetensors"), *str = tmp_path("s_stream.safetensors"),
               *rev = tmp_path("s_rev.safetensors");
    CHECK(ut_ckpt_save(ref, a.m, a.o, &st, err, sizeof err) == 0, "%s", err);
    ut_ckpt_entry e[16];
    for (int i = 0; i < p->n; i++) {
        e[i] = (ut_ckpt_entry){.name = p->names[i], .ndim = p->t[i]->ndim};
        memcpy(e[i].shape, p->t[i]->ne, (size_t)p->t[i]->ndim * sizeof(int64_t));
    }
    ut_ckpt_writer *w = ut_ckpt_writer_open(str, a.m->type, p->n, e, "exp_avg,exp_avg_sq", ut_optim_steps(a.o), &st,
                                            err, sizeof err);
    CHECK(w, "%s", err);
    if (!w) return;
    put_all(w, p->flat, p->numel, 7, err, sizeof err);
    for (int s = 0; s < 2; s++) put_all(w, ut_optim_state(a.o, s, NULL), p->numel, 11, err, sizeof err);
    CHECK(ut_ckpt_writer_close(w, true, err, sizeof err) == 0, "%s", err);
    size_t l1 = 0, l2 = 0;
    unsigned char *b1 = read_file(ref, &l1), *b2 = read_file(str, &l2);
    CHECK(b1 && b2 && l1 == l2 && l1 > 0 && !memcmp(b1, b2, l1), "streamed file differs from ut_ckpt_save's (%zu, %zu bytes)",
          l1, l2);
    free(b1);
    free(b2);

    ut_train_state got;
    ut_ckpt_reader *r = ut_ckpt_reader_open(str, a.m->type, &got, err, sizeof err);
    CHECK(r && same_state(&st, &got), "%s", err);
    if (r) {
        CHECK(ut_ckpt_reader_nparams(r) == p->n && !strcmp(ut_ckpt_reader_param_name(r, 1), p->names[1]), "params");
        float v[64];
        int64_t steps = -1;
        CHECK(ut_ckpt_reader_param(r, p->names[2], p->t[2]->ndim, p->t[2]->ne, v, err, sizeof err) == 0 &&
                  !memcmp(v, p->flat + p->segs[2].offset, (size_t)p->segs[2].numel * sizeof(float)), "param: %s", err);
        CHECK(ut_ckpt_reader_optim(r, "exp_avg,exp_avg_sq", &steps, err, sizeof err) == 0 && steps == 1, "%s", err);
        CHECK(ut_ckpt_reader_optim(r, "momentum_buffer", &steps, err, sizeof err) == -1 && strstr(err, "AdamW"),
              "another optimizer's state accepted: %s", err);
        CHECK(ut_ckpt_reader_state(r, "exp_avg_sq", p->names[2], p->segs[2].numel, v, err, sizeof err) == 0 &&
                  !memcmp(v, ut_optim_state(a.o, 1, NULL) + p->segs[2].offset, (size_t)p->segs[2].numel * sizeof(float)),
              "state: %s", err);
        int64_t wrong[2] = {5, 7};
        CHECK(ut_ckpt_reader_param(r, p->names[0], 2, wrong, v, err, sizeof err) == -1 && strstr(err, p->names[0]),
              "a wrong shape was accepted: %s", err);
        ut_ckpt_reader_close(r);
    }

    /* the parameters in reverse order: ut_ckpt_load finds each one's state by name */
    ut_ckpt_entry re[16];
    for (int i = 0; i < p->n; i++) re[i] = e[p->n - 1 - i];
    w = ut_ckpt_writer_open(rev, a.m->type, p->n, re, "exp_avg,exp_avg_sq", ut_optim_steps(a.o), &st, err, sizeof err);
    CHECK(w, "%s", err);
    if (!w) return;
    for (int s = -1; s < 2; s++)
        for (int i = p->n - 1; i >= 0; i--) {
            const float *base = s < 0 ? p->flat : ut_optim_state(a.o, s, NULL);
            put_all(w, base + p->segs[i].offset, p->segs[i].numel, 5, err, sizeof err);
        }
    CHECK(ut_ckpt_writer_put(w, p->flat, 1, err, sizeof err) == -1 && strstr(err, "more values"), "an extra value: %s", err);
    CHECK(ut_ckpt_writer_close(w, true, err, sizeof err) == -1, "a writer that failed was sealed");
    w = ut_ckpt_writer_open(rev, a.m->type, p->n, re, "exp_avg,exp_avg_sq", ut_optim_steps(a.o), &st, err, sizeof err);
    for (int s = -1; s < 2 && w; s++)
        for (int i = p->n - 1; i >= 0; i--) {
            const float *base = s < 0 ? p->flat : ut_optim_state(a.o, s, NULL);
            put_all(w, base + p->segs[i].offset, p->segs[i].numel, 5, err, sizeof err);
        }
    CHECK(w && ut_ckpt_writer_close(w, true, err, sizeof err) == 0, "%s", err);
    pair q = make_pair("6,5,3", 4);
    CHECK(!same_buffers(a, q), "fresh model equals the saved one: test is vacuous");
    CHECK(ut_ckpt_load(rev, q.m, q.o, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(same_buffers(a, q), "reordered file: parameters or optimizer state differ");
    free_pair(q);

    /* a flipped byte in the data: the reader's checksum catches it */
    size_t len = 0;
    unsigned char *b = read_file(str, &len);
    if (b && len > 16) {
        b[len - 9] ^= 0x10;
        write_file(str, b, len);
        r = ut_ckpt_reader_open(str, NULL, NULL, err, sizeof err);
        CHECK(!r && strstr(err, "checksum mismatch") && strstr(err, str), "%s", err);
        ut_ckpt_reader_close(r);
    }
    free(b);
    unlink(ref);
    unlink(str);
    unlink(rev);
    free_pair(a);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ut_ckpt_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_round_trip);
    RUN(test_adafactor_state);
    RUN(test_special_metrics);
    RUN(test_file_layout);
    RUN(test_corrupt_files);
    RUN(test_impossible_state);
    RUN(test_greedy_state);
    RUN(test_damaged_values);
    RUN(test_mismatches);
    RUN(test_directory);
    RUN(test_clean_temp);
    RUN(test_streamed);
    free_pair(saved);
    remove_dir();
    return TEST_SUMMARY();
}
