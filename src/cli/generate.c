/* `utrain generate`: one generated text per line of an input file, from a
 * trained sequence-to-sequence run (its config and best checkpoint) or a
 * Hugging Face model directory (docs/generation.md). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "utrain/utrain.h"

static void usage_generate(FILE *f) {
    fprintf(f,
            "usage: utrain generate RUN_DIR|CONFIG.yml|MODEL_DIR --input FILE [--output FILE] [options]\n"
            "\n"
            "Generates a text (or --num-return-sequences texts) for every line of FILE with a\n"
            "sequence-to-sequence model and writes them one a line, in order, to --output\n"
            "(default: standard output). The\n"
            "model is a trained run (RUN_DIR, or its CONFIG.yml: the best checkpoint by\n"
            "train.best_metric, or --checkpoint) or a Hugging Face model directory\n"
            "(config.json, model.safetensors and the tokenizer: bart and t5, as\n"
            "BartForConditionalGeneration and T5ForConditionalGeneration, and gpt2, which\n"
            "continues each line as a prompt). Defaults: the\n"
            "run's generate.* keys, or the directory's generation_config.json, else\n"
            "transformers' defaults. Options:\n"
            "  --input FILE              one source a line (UTF-8; CRLF is fine; an empty\n"
            "                            line is a source of its own)\n"
            "  --output FILE             where the texts go (default: standard output)\n"
            "  --checkpoint PATH         load this checkpoint instead of the run's best\n"
            "  --set KEY=VALUE           override a key of the run's config; repeatable\n"
            "  --max-new-tokens N        tokens generated at most after the decoder's start\n"
            "  --min-new-tokens N        no end of sequence before N new tokens\n"
            "  --num-beams N             1: greedy decoding (or sampling); 2 to 32: beam search\n"
            "  --length-penalty F        beam search: a finished beam scores log p / length^F\n"
            "  --early-stopping WHEN     beam search: false, true or never, as transformers\n"
            "  --no-repeat-ngram-size N  no n-gram of N tokens twice in a text (0: off)\n"
            "  --do-sample               sample the next token instead of the most likely\n"
            "                            one (with beams: draw the beams' continuations)\n"
            "  --temperature F           sampling: logits divided by F (> 0)\n"
            "  --top-k N                 sampling: only the N most likely tokens (0: all)\n"
            "  --top-p F                 sampling: the smallest set of tokens whose\n"
            "                            probability reaches F, in (0, 1]\n"
            "  --num-return-sequences N  texts per source, written one a line in a row: N\n"
            "                            draws (--do-sample) or the N best beams (<= beams)\n"
            "  --seed N                  sampling's seed (default: the run's seed, else 0)\n"
            "  --batch-size N            sources generated together, right-padded to the\n"
            "                            longest (default: train.eval_batch_size, else\n"
            "                            train.batch_size; 8 for a model directory)\n"
            "  --no-cache                run the decoder over the whole prefix at each step\n"
            "                            (slower, the same tokens)\n"
            "Sources are encoded as the run's data.name seq2seq_text encodes them\n"
            "(data.source_prefix, data.lowercase, cut to data.max_source_len tokens; a model\n"
            "directory's to max_position_embeddings). Texts are decoded without special\n"
            "tokens, their ends' spaces trimmed, tabs and newlines in them written as spaces.\n"
            "Exit codes: 0 done, 1 error, 2 bad command line. See docs/generation.md.\n");
}

/* ---- the generation flags, and the generation_config.json keys behind them ---- */
enum { G_MAX_NEW, G_MIN_NEW, G_BEAMS, G_LP, G_EARLY, G_NGRAM, G_SAMPLE, G_TEMP, G_TOPK, G_TOPP, G_NRET, G_COUNT };
typedef struct {
    const char *flag, *key;  /* the command line's name; generation_config.json's */
    char type;               /* 'i' integer, 'f' number, 'b' switch, 'e' false | true | never */
    double lo, hi;           /* the range; lo itself excluded when lo_open */
    bool lo_open;
    const char *allowed;     /* the range in words, for messages */
} gen_key;

static const gen_key gen_keys[G_COUNT] = {
    [G_MAX_NEW] = {"--max-new-tokens", "max_new_tokens", 'i', 1, 1e6, false, "an integer from 1 to 1000000"},
    [G_MIN_NEW] = {"--min-new-tokens", "min_new_tokens", 'i', 0, 1e6, false, "an integer from 0 to 1000000"},
    [G_BEAMS] = {"--num-beams", "num_beams", 'i', 1, 32, false, "an integer from 1 to 32"},
    [G_LP] = {"--length-penalty", "length_penalty", 'f', -1e9, 1e9, false, "a number"},
    [G_EARLY] = {"--early-stopping", "early_stopping", 'e', 0, 2, false, "false, true or never"},
    [G_NGRAM] = {"--no-repeat-ngram-size", "no_repeat_ngram_size", 'i', 0, 1e6, false,
                 "an integer from 0 to 1000000"},
    [G_SAMPLE] = {"--do-sample", "do_sample", 'b', 0, 1, false, "true or false"},
    [G_TEMP] = {"--temperature", "temperature", 'f', 0, 1e9, true, "a number > 0"},
    [G_TOPK] = {"--top-k", "top_k", 'i', 0, 1e9, false, "an integer from 0 to 1000000000"},
    [G_TOPP] = {"--top-p", "top_p", 'f', 0, 1, true, "a number in (0, 1]"},
    [G_NRET] = {"--num-return-sequences", "num_return_sequences", 'i', 1, 1024, false, "an integer from 1 to 1024"},
};

static bool gen_in_range(const gen_key *g, double v) {
    if (!isfinite(v) || v > g->hi || v < g->lo || (g->lo_open && v == g->lo)) return false;
    return g->type != 'i' || v == floor(v);
}

/* v (checked) into o; early_stopping's 0, 1, 2 are UT_EARLY_HEURISTIC, TRUE, NEVER */
static void gen_set(ut_gen_opts *o, int k, double v) {
    switch (k) {
    case G_MAX_NEW: o->max_new_tokens = (int64_t)v; break;
    case G_MIN_NEW: o->min_new_tokens = (int64_t)v; break;
    case G_BEAMS: o->num_beams = (int)v; break;
    case G_LP: o->length_penalty = v; break;
    case G_EARLY: o->early_stopping = (int)v; break;
    case G_NGRAM: o->no_repeat_ngram_size = (int64_t)v; break;
    case G_SAMPLE: o->do_sample = v != 0; break;
    case G_TEMP: o->temperature = v; break;
    case G_TOPK: o->top_k = (int64_t)v; break;
    case G_TOPP: o->top_p = v; break;
    case G_NRET: o->num_return_sequences = (int64_t)v; break;
    }
}

/* ---- the command line ---- */
typedef struct {
    const char *target, *input, *output, *checkpoint;
    const char **sets;       /* the --set assignments (nsets) */
    int nsets;
    bool given[G_COUNT];     /* flags over the defaults */
    double value[G_COUNT];
    bool seed_given, no_cache;
    uint64_t seed;
    int64_t batch;           /* 0: the default */
} gen_args;

#define GEN_MAX_BATCH 65536

static int usage_error(const char *msg) {
    fprintf(stderr, "utrain generate: %s (utrain generate --help lists the options)\n", msg);
    return UT_EXIT_USAGE;
}

/* The value of generation flag k: v read as its type and range. */
static int parse_gen_value(int k, const char *v, double *out) {
    const gen_key *g = &gen_keys[k];
    char *end = NULL;
    errno = 0;
    if (g->type == 'e') {
        *out = !strcmp(v, "false") ? 0 : !strcmp(v, "true") ? 1 : !strcmp(v, "never") ? 2 : -1;
        return *out < 0 ? -1 : 0;
    }
    *out = g->type == 'i' ? (double)strtoll(v, &end, 10) : strtod(v, &end);
    return (!*v || *end || errno || !gen_in_range(g, *out)) ? -1 : 0;
}

/* A count from 1 to max, or a seed (any unsigned 64-bit integer). */
static int parse_u64(const char *v, uint64_t max, uint64_t *out) {
    char *end;
    errno = 0;
    if (!*v || *v == '-' || *v == '+') return -1;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end || errno || x > max) return -1;
    *out = x;
    return 0;
}

/* The flags that take a value besides the generation ones. */
enum { V_INPUT, V_OUTPUT, V_CHECKPOINT, V_SET, V_SEED, V_BATCH, V_COUNT };
static const char *const value_flags[V_COUNT + 1] = {
    [V_INPUT] = "--input", [V_OUTPUT] = "--output", [V_CHECKPOINT] = "--checkpoint", [V_SET] = "--set",
    [V_SEED] = "--seed", [V_BATCH] = "--batch-size"};

/* Flag f (value flag vf, else generation flag k) with its value v: 0, or a usage error. */
static int take_value(gen_args *a, int vf, int k, const char *f, const char *v) {
    uint64_t u;
    switch (vf) {
    case V_INPUT: a->input = v; return 0;
    case V_OUTPUT: a->output = v; return 0;
    case V_CHECKPOINT: a->checkpoint = v; return 0;
    case V_SET: a->sets[a->nsets++] = v; return 0;
    case V_SEED:
        if (parse_u64(v, UINT64_MAX, &a->seed)) return usage_error(ut_fmt("--seed: '%s' is not an integer >= 0", v));
        a->seed_given = true;
        return 0;
    case V_BATCH:
        if (parse_u64(v, GEN_MAX_BATCH, &u) || u < 1)
            return usage_error(ut_fmt("--batch-size: '%s' is not an integer from 1 to %d", v, GEN_MAX_BATCH));
        a->batch = (int64_t)u;
        return 0;
    }
    if (parse_gen_value(k, v, &a->value[k]))
        return usage_error(ut_fmt("%s: '%s' is not %s", f, v, gen_keys[k].allowed));
    a->given[k] = true;
    return 0;
}

static int parse_args(gen_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->sets = ut_calloc_check((size_t)argc + 1, sizeof *a->sets);
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        int k = 0, vf = 0;
        while (k < G_COUNT && strcmp(f, gen_keys[k].flag)) k++;
        while (value_flags[vf] && strcmp(f, value_flags[vf])) vf++;
        if (k == G_SAMPLE) a->given[G_SAMPLE] = true, a->value[G_SAMPLE] = 1;   /* a switch */
        else if (!strcmp(f, "--no-cache")) a->no_cache = true;
        else if (f[0] != '-') {
            if (a->target) return usage_error(ut_fmt("unexpected argument '%s' (the model is '%s')", f, a->target));
            a->target = f;
        } else if (k == G_COUNT && !value_flags[vf]) return usage_error(ut_fmt("unknown option '%s'", f));
        else if (i + 1 >= argc) return usage_error(ut_fmt("%s needs a value", f));
        else if (take_value(a, vf, k, f, argv[++i])) return UT_EXIT_USAGE;
    }
    if (!a->target) return usage_error("a run directory, config file or model directory is needed");
    if (!a->input) return usage_error("--input FILE is needed (one source a line)");
    return 0;
}

/* ---- what generates: the model, its tokenizer, the options ---- */
typedef struct {
    ut_config cfg;           /* a run's (cfg_used) */
    bool cfg_used;
    ut_model *m;
    ut_tokenizer *tok;
    ut_gen_opts o;
    int64_t batch, max_len;  /* sources cut to max_len tokens */
    const char *prefix;      /* data.source_prefix, or NULL */
    bool lowercase;
    const char *limit;       /* the key max_len comes from, for the truncation warning */
    char what[1600];         /* the weights generating, for the first line */
} gen_model;

/* Whether a run's config makes a model that generates: data seq2seq_text or
 * model.task seq2seq, or GPT-2's language model (continuing a prompt). */
static bool config_generates(const ut_config *c) {
    const char *task = ut_kv_get(c->model_opts, "task");
    return !strcmp(c->data_name, "seq2seq_text") ||
           (task && (!strcmp(task, "seq2seq") || !strcmp(task, "conditional_generation"))) ||
           (!strcmp(c->model_name, "gpt2") && (!task || !strcmp(task, "causal_lm")));
}

static int refuse_config(const char *target, const ut_config *c, char *err, size_t n) {
    return ut_errorf(err, n, "%s: this run's model does not generate text (model.name %s, data.name %s): "
                             "generating needs a sequence-to-sequence model (bart or t5 trained on data.name "
                             "seq2seq_text) or GPT-2's language model", target, c->model_name, c->data_name);
}

/* A run: RUN_DIR/config.yml (run_dir set) or a config file, --set applied;
 * the model from it with the run's best checkpoint, or --checkpoint. */
static int load_run(gen_model *g, const gen_args *a, const char *cfg_path, const char *run_dir, char *err,
                    size_t n) {
    ut_config *c = &g->cfg;
    ut_config_init(c);
    g->cfg_used = true;
    if (ut_config_load(c, cfg_path, err, n)) return -1;
    for (int i = 0; i < a->nsets; i++)
        if (ut_config_set(c, a->sets[i], err, n)) return -1;
    if (ut_config_validate(c, err, n)) return -1;
    if (!config_generates(c)) return refuse_config(a->target, c, err, n);
    if (c->threads > 0) omp_set_num_threads(c->threads);
    if (!(g->m = ut_model_from_config(c, NULL, err, n))) return -1;
    if (!g->m->decoder) return refuse_config(a->target, c, err, n);
    char dir[1400], path[1500];
    if (run_dir) snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    else snprintf(dir, sizeof dir, "%s/%s/checkpoints", c->output_dir, c->experiment_name);
    if (a->checkpoint) snprintf(path, sizeof path, "%s", a->checkpoint);
    else if (ut_run_checkpoint(c, dir, g->m, path, sizeof path, err, n)) return -1;
    ut_train_state st;
    if (ut_ckpt_load(path, g->m, NULL, &st, err, n)) return -1;
    snprintf(g->what, sizeof g->what, "%s (step %lld)", path, (long long)st.step);
    if (!(g->tok = ut_run_tokenizer(c, err, n))) return -1;
    ut_gen_opts_from_config(c, &g->o);
    g->batch = c->eval_batch_size > 0 ? c->eval_batch_size : c->batch_size;
    if (g->batch > GEN_MAX_BATCH) g->batch = GEN_MAX_BATCH;
    g->max_len = c->max_source_len;
    g->limit = "data.max_source_len";
    g->prefix = c->source_prefix[0] ? c->source_prefix : NULL;
    g->lowercase = c->lowercase;
    return 0;
}

/* ---- a model directory's generation_config.json (or config.json's generation keys) ---- */

/* Keys transformers' generate reads that utrain cannot honour, and the value
 * that does nothing (NAN: only null, false or an empty list does nothing). */
static const struct {
    const char *key;
    double neutral;
} unhonoured[] = {
    {"repetition_penalty", 1}, {"encoder_repetition_penalty", 1},
    {"diversity_penalty", 0}, {"num_beam_groups", 1}, {"typical_p", 1}, {"epsilon_cutoff", 0},
    {"eta_cutoff", 0}, {"min_p", 0}, {"encoder_no_repeat_ngram_size", 0}, {"guidance_scale", 1},
    {"penalty_alpha", 0}, {"bad_words_ids", NAN}, {"suppress_tokens", NAN}, {"begin_suppress_tokens", NAN},
    {"forced_decoder_ids", NAN}, {"force_words_ids", NAN}, {"constraints", NAN}, {"sequence_bias", NAN},
    {"exponential_decay_length_penalty", NAN}, {"renormalize_logits", NAN}, {"max_time", NAN},
    {"stop_strings", NAN}, {"watermarking_config", NAN}, {"remove_invalid_values", NAN},
};

static bool does_nothing(const cJSON *v, double neutral) {
    if (cJSON_IsNull(v) || cJSON_IsFalse(v)) return true;
    if ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child) return true;
    return cJSON_IsNumber(v) && v->valuedouble == neutral;
}

static void warn_key(const char *file, const char *key, const cJSON *v, const char *why) {
    char *text = cJSON_PrintUnformatted(v);
    fprintf(stderr, "utrain generate: warning: %s: %s %.60s%s: %s\n", file, key, text ? text : "?",
            text && strlen(text) > 60 ? "..." : "", why);
    free(text);   /* cJSON allocates with malloc */
}

/* A token id key: an integer, or a list of them (the first is taken, with
 * a warning when the others differ); -1 for null. */
static int token_id(const char *file, const char *key, const cJSON *v, int64_t vocab, int64_t *out, char *err,
                    size_t n) {
    const cJSON *x = cJSON_IsArray(v) ? v->child : v;
    for (const cJSON *e = cJSON_IsArray(v) ? x : NULL; e; e = e->next)
        if (!cJSON_IsNumber(e) || !cJSON_IsNumber(x) || e->valuedouble != x->valuedouble) {
            warn_key(file, key, v, "several ids: the first is used");
            break;
        }
    if (!x || cJSON_IsNull(x)) {
        *out = -1;
        return 0;
    }
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
        x->valuedouble >= (double)vocab)
        return ut_errorf(err, n, "%s: %s: expected a token id in [0, %lld) or null", file, key, (long long)vocab);
    *out = (int64_t)x->valuedouble;
    return 0;
}

/* One of gen_keys from JSON into o; an error names the file and key. */
static int json_gen_key(const char *file, int k, const cJSON *v, ut_gen_opts *o, char *err, size_t n) {
    const gen_key *g = &gen_keys[k];
    double x;
    if (cJSON_IsNull(v)) return 0;   /* transformers' default */
    if (g->type == 'b' && cJSON_IsBool(v)) x = cJSON_IsTrue(v);
    else if (g->type == 'e' && cJSON_IsBool(v)) x = cJSON_IsTrue(v) ? 1 : 0;
    else if (g->type == 'e' && cJSON_IsString(v) && !strcmp(v->valuestring, "never")) x = 2;
    else if ((g->type == 'i' || g->type == 'f') && cJSON_IsNumber(v) && gen_in_range(g, v->valuedouble))
        x = v->valuedouble;
    else if (k == G_TEMP || k == G_TOPK || k == G_TOPP) {   /* transformers too lets these be without sampling */
        warn_key(file, g->key, v, ut_fmt("not %s; ignored", g->allowed));
        return 0;
    } else
        return ut_errorf(err, n, "%s: %s: expected %s", file, g->key,
                         g->type == 'e' ? "true, false or \"never\"" : g->allowed);
    gen_set(o, k, x);
    return 0;
}

/* The start, end and padding ids the model has from config.json: a
 * different one in generation_config.json is not used, and said. */
static void check_model_token(const char *file, const char *key, const cJSON *v, int64_t have) {
    if (!v || cJSON_IsNull(v)) return;
    const cJSON *x = cJSON_IsArray(v) ? v->child : v;
    bool same = x && cJSON_IsNumber(x) && x->valuedouble == (double)have;
    for (const cJSON *e = cJSON_IsArray(v) ? v->child : NULL; e; e = e->next)
        same = same && cJSON_IsNumber(e) && e->valuedouble == (double)have;
    if (!same)
        warn_key(file, key, v, ut_fmt("differs from the model's (config.json: %lld), which is used", (long long)have));
}

/* Whether root has key with a value other than null. */
static bool set_key(const cJSON *root, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    return v && !cJSON_IsNull(v);
}

/* max_length or min_length: an integer from lo to 1000001. */
static int length_key(const char *file, const cJSON *root, const char *key, int64_t lo, int64_t *out, char *err,
                      size_t n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > 1e6 + 1)
        return ut_errorf(err, n, "%s: %s: expected an integer from %lld to 1000001", file, key, (long long)lo);
    *out = (int64_t)v->valuedouble;
    return 0;
}

/* The keys of root (generation_config.json, or config.json when whole is
 * false: only the generation keys, as transformers' from_model_config) over o. */
static int apply_gen_json(const char *file, const cJSON *root, bool whole, const ut_model *m, ut_gen_opts *o,
                          char *err, size_t n) {
    for (int k = 0; k < G_COUNT; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, gen_keys[k].key);
        if (v && json_gen_key(file, k, v, o, err, n)) return -1;
    }
    /* An encoder-decoder's max_length and min_length count the decoder's
     * start token; max_new_tokens and min_new_tokens win over them. A
     * max_length of 20, transformers' default, means its default: 20 new
     * tokens (ut_gen_opts_init's). */
    int64_t len = 0;
    if (!set_key(root, "max_new_tokens") && set_key(root, "max_length")) {
        if (length_key(file, root, "max_length", 2, &len, err, n)) return -1;
        if (len != 20) o->max_new_tokens = len - 1;
    }
    if (!set_key(root, "min_new_tokens") && set_key(root, "min_length")) {
        if (length_key(file, root, "min_length", 0, &len, err, n)) return -1;
        o->min_new_tokens = len > 0 ? len - 1 : 0;
    }
    const cJSON *fb = cJSON_GetObjectItemCaseSensitive(root, "forced_bos_token_id"),
                *fe = cJSON_GetObjectItemCaseSensitive(root, "forced_eos_token_id");
    /* generation_config.json is all transformers reads: no forced_bos there is none */
    if (whole && !fb) o->forced_bos = -1;
    if (fb && token_id(file, "forced_bos_token_id", fb, m->tokens.vocab, &o->forced_bos, err, n)) return -1;
    if (fe && token_id(file, "forced_eos_token_id", fe, m->tokens.vocab, &o->forced_eos, err, n)) return -1;
    for (size_t i = 0; i < sizeof unhonoured / sizeof unhonoured[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, unhonoured[i].key);
        if (v && !does_nothing(v, unhonoured[i].neutral))
            warn_key(file, unhonoured[i].key, v, "not supported by utrain's generation; ignored");
    }
    const char *ids[3] = {"decoder_start_token_id", "eos_token_id", "pad_token_id"};
    const int64_t have[3] = {m->tokens.start, m->tokens.eos, m->tokens.pad};
    for (int i = 0; whole && i < 3; i++)
        check_model_token(file, ids[i], cJSON_GetObjectItemCaseSensitive(root, ids[i]), have[i]);
    return 0;
}

/* The whole of a small text file (NUL-terminated; its length into *len). */
static char *read_file(const char *path, size_t *len, char *err, size_t n) {
    int fd = ut_open_regular(path, err, n);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return ut_errorf(err, n, "%s: cannot open: %s", path, strerror(errno)), NULL;
    }
    size_t cap = 1 << 16, k = 0, got;
    char *buf = ut_malloc_check(cap + 1);
    while ((got = fread(buf + k, 1, cap - k, f)) > 0)
        if ((k += got) == cap) buf = ut_realloc_check(buf, (cap *= 2) + 1);
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        ut_free(buf);
        return ut_errorf(err, n, "%s: read failed", path), NULL;
    }
    buf[k] = 0;
    *len = k;
    return buf;
}

/* generation_config.json over o when DIR has one, else config.json's generation keys. */
static int read_generation_config(const char *dir, const ut_model *m, ut_gen_opts *o, char *err, size_t n) {
    char path[1400];
    struct stat sb;
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    bool whole = stat(path, &sb) == 0;
    if (!whole) snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *text = read_file(path, &len, err, n);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    ut_free(text);
    int rc = !root                 ? ut_errorf(err, n, "%s: not valid JSON", path)
             : !cJSON_IsObject(root) ? ut_errorf(err, n, "%s: not a JSON object", path)
                                     : apply_gen_json(path, root, whole, m, o, err, n);
    cJSON_Delete(root);
    return rc;
}

/* A Hugging Face model directory: the model by its config.json's model_type
 * (bart and t5, built as BartForConditionalGeneration and
 * T5ForConditionalGeneration), its tokenizer, its
 * generation defaults. */
static int load_model_dir(gen_model *g, const gen_args *a, const char *dir, char *err, size_t n) {
    if (a->nsets)
        return ut_errorf(err, n, "--set %s: a model directory has no run config to set keys of (use the "
                                 "generation flags)", a->sets[0]);
    ut_kv *kv = ut_hf_config_read(dir, err, n);
    if (!kv) return -1;
    const char *type = ut_kv_get(kv, "model_type");
    long long P = 1024;   /* BART's default max_position_embeddings */
    bool t5 = !strcmp(type, "t5") || !strcmp(type, "mt5"), gpt2 = !strcmp(type, "gpt2");
    int rc = 0;
    if (strcmp(type, "bart") && !t5 && !gpt2)
        rc = ut_errorf(err, n, "%s: model_type %s does not generate text: `utrain generate` runs sequence-to-"
                               "sequence models (bart, t5: BartForConditionalGeneration, "
                               "T5ForConditionalGeneration) and GPT-2's language model; bert and roberta "
                               "directories are for training and test mode", dir, type);
    /* T5 has relative positions, no table: its sources are cut at 512 tokens, as its tokenizers' model_max_length */
    if (!rc && t5) P = 513;
    else if (!rc) rc = ut_kv_int(kv, gpt2 ? "n_positions" : "max_position_embeddings", 1024, &P, err, n);
    ut_kv_free(kv);
    if (rc) return -1;
    if (P < 2) return ut_errorf(err, n, "%s/config.json: max_position_embeddings %lld is too small", dir, P);
    ut_kv *opts = ut_kv_new();
    ut_kv_set(opts, "pretrained", dir);
    if (!gpt2) ut_kv_set(opts, "task", "seq2seq");
    char why[1024];
    g->m = ut_model_create(t5 ? "t5" : gpt2 ? "gpt2" : "bart", opts, 0, why, sizeof why);
    ut_kv_free(opts);
    if (!g->m) return ut_errorf(err, n, "%s: %s", dir, why);
    snprintf(g->what, sizeof g->what, "%s", dir);
    if (a->checkpoint) {
        if (ut_ckpt_load(a->checkpoint, g->m, NULL, NULL, err, n)) return -1;
        snprintf(g->what, sizeof g->what, "%s with %s", dir, a->checkpoint);
    }
    if (!(g->tok = ut_tokenizer_load(dir, why, sizeof why))) return ut_errorf(err, n, "%s: tokenizer: %s", dir, why);
    ut_gen_opts_init(&g->o);
    if (read_generation_config(dir, g->m, &g->o, err, n)) return -1;
    /* transformers' default of 20 new tokens stays within the positions */
    if (g->o.max_new_tokens > P - 1) g->o.max_new_tokens = P - 1;
    g->batch = 8;
    g->max_len = P;
    g->limit = "max_position_embeddings";
    return 0;
}

/* The target: RUN_DIR (config.yml in it), a model directory (config.json)
 * or a config file. */
static int load_target(gen_model *g, const gen_args *a, char *err, size_t n) {
    struct stat sb;
    char path[1400];
    memset(g, 0, sizeof *g);
    if (stat(a->target, &sb))
        return ut_errorf(err, n, "%s: cannot read: %s (expected a run directory, a config file or a model "
                                 "directory)", a->target, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return load_run(g, a, a->target, NULL, err, n);
    snprintf(path, sizeof path, "%s/config.yml", a->target);
    if (stat(path, &sb) == 0) return load_run(g, a, path, a->target, err, n);
    snprintf(path, sizeof path, "%s/config.json", a->target);
    if (stat(path, &sb) == 0) return load_model_dir(g, a, a->target, err, n);
    return ut_errorf(err, n, "%s: neither a run directory (no config.yml) nor a Hugging Face model directory "
                             "(no config.json)", a->target);
}

static void free_model(gen_model *g) {
    ut_model_free(g->m);
    ut_tokenizer_free(g->tok);
    if (g->cfg_used) ut_config_free(&g->cfg);
}

/* The flags over the defaults, then checked as ut_generate checks them. */
static int apply_flags(gen_model *g, const gen_args *a, char *err, size_t n) {
    for (int k = 0; k < G_COUNT; k++)
        if (a->given[k]) gen_set(&g->o, k, a->value[k]);
    if (a->seed_given) g->o.seed = a->seed;
    if (a->no_cache) g->o.no_cache = true;
    if (a->batch) g->batch = a->batch;
    if (ut_generate(g->m, &g->o, NULL, NULL, 0, 0, NULL, NULL, err, n)) return -1;
    /* bound what one batch holds: rows of beams and their tokens */
    int64_t per = g->o.num_beams > 1 ? g->o.num_beams : g->o.num_return_sequences;
    double rows = (double)g->batch * (double)per;
    if (rows > GEN_MAX_BATCH || rows * (double)(g->o.max_new_tokens + 1) > (double)(1 << 28))
        return ut_errorf(err, n, "batch size %lld x %s %lld x max_new_tokens %lld: too much at once; lower "
                                 "--batch-size", (long long)g->batch,
                         g->o.num_beams > 1 ? "num_beams" : "num_return_sequences", (long long)per,
                         (long long)g->o.max_new_tokens);
    return 0;
}

/* ---- the input: lines of UTF-8 text ---- */
typedef struct {
    char *buf;
    char **line;   /* line[k] is line k + 1, without "\n" or "\r\n" */
    int64_t n;
} gen_lines;

static int read_lines(const char *path, gen_lines *f, char *err, size_t n) {
    size_t len;
    memset(f, 0, sizeof *f);
    char why[1400];
    if (!(f->buf = read_file(path, &len, why, sizeof why))) return ut_errorf(err, n, "--input: %s", why);
    char *p = f->buf;
    if (len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3, len -= 3;   /* a byte-order mark is not text */
    int64_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += p[i] == '\n';
    f->line = ut_malloc_check((size_t)lines * sizeof *f->line);
    for (size_t start = 0; start < len;) {
        char *nl = memchr(p + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - p) : len;
        const char *nul = memchr(p + start, 0, end - start);
        if (nul)
            return ut_errorf(err, n, "%s:%lld: NUL byte at byte %lld of the line (expected a text file)", path,
                             (long long)f->n + 1, (long long)(nul - (p + start)));
        p[end] = 0;   /* the '\n', or read_file's NUL */
        if (end > start && p[end - 1] == '\r') p[end - 1] = 0;
        f->line[f->n++] = p + start;
        start = end + 1;
    }
    return 0;
}

static void free_lines(gen_lines *f) {
    ut_free(f->buf);
    ut_free(f->line);
}

/* The encoded sources: source i is ids[off[i], off[i + 1]). */
typedef struct {
    int32_t *ids;
    int64_t *off, n, cap, cut;   /* cut: sources truncated */
} gen_sources;

/* A tokenizer message about one line, as "FILE:LINE: what" (its "text: " dropped). */
static int line_error(const char *path, int64_t line, const char *why, char *err, size_t n) {
    if (!strncmp(why, "text: ", 6)) why += 6;
    return ut_errorf(err, n, "%s:%lld: %s", path, (long long)line, why);
}

static int encode_line(gen_model *g, ut_tok_encoding *e, const char *path, int64_t line, const char *text,
                       gen_sources *s, char *err, size_t n) {
    char why[1024];
    bool cut;
    ut_seq2seq_opts o = {.max_source_len = g->max_len, .source_prefix = g->prefix, .lowercase = g->lowercase};
    if (ut_seq2seq_encode_source(g->tok, &o, text, e, &cut, why, sizeof why))
        return line_error(path, line, why, err, n);
    s->cut += cut;
    if (s->off[s->n] + e->len > s->cap) {
        while (s->off[s->n] + e->len > s->cap) s->cap = s->cap ? 2 * s->cap : 4096;
        s->ids = ut_realloc_check(s->ids, (size_t)s->cap * sizeof *s->ids);
    }
    memcpy(s->ids + s->off[s->n], e->ids, (size_t)e->len * sizeof *e->ids);
    s->off[s->n + 1] = s->off[s->n] + e->len;
    s->n++;
    return 0;
}

static int encode_sources(gen_model *g, const char *path, const gen_lines *f, gen_sources *s, char *err, size_t n) {
    memset(s, 0, sizeof *s);
    s->off = ut_calloc_check((size_t)f->n + 1, sizeof *s->off);
    ut_tok_encoding e = {0};
    int rc = 0;
    for (int64_t i = 0; i < f->n && !rc; i++) rc = encode_line(g, &e, path, i + 1, f->line[i], s, err, n);
    ut_tok_encoding_free(&e);
    if (!rc && s->cut)
        fprintf(stderr, "utrain generate: warning: %s: %lld of %lld sources cut to %s %lld tokens\n", path,
                (long long)s->cut, (long long)s->n, g->limit, (long long)g->max_len);
    return rc;
}

/* ---- the texts ---- */

/* One generated text as written (ut_tokenizer_decode_generated's), tabs,
 * carriage returns and newlines inside it as spaces: one line per source. */
static void put_text(FILE *out, const char *text) {
    for (const char *c = text; *c; c++) fputc(*c == '\t' || *c == '\n' || *c == '\r' ? ' ' : *c, out);
    fputc('\n', out);
}

/* ---- progress on a terminal ---- */
typedef struct {
    bool on, shown;
    double t0, last;
} gen_progress;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void progress_show(gen_progress *p, int64_t done, int64_t total) {
    double t = now_s();
    if (!p->on || (t - p->last < 0.2 && done < total)) return;
    const int width = 28;
    char bar[32];
    int filled = total > 0 ? (int)(width * (double)done / (double)total) : 0;
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    double rate = done / (t - p->t0 > 1e-9 ? t - p->t0 : 1e-9), eta = rate > 0 ? (double)(total - done) / rate : 0;
    fprintf(stderr, "\rgenerate [%s] %lld/%lld  %.1f sources/s  eta %lld:%02lld\033[K", bar, (long long)done,
            (long long)total, rate, (long long)eta / 60, (long long)eta % 60);
    fflush(stderr);
    p->shown = true;
    p->last = t;
}

static void progress_clear(gen_progress *p) {
    if (!p->shown) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    p->shown = false;
}

/* ---- generating ---- */

/* Sources [b0, b0 + count) right-padded to their longest (S) into src and mask. */
static int64_t batch_of(const gen_model *g, const gen_sources *s, int64_t b0, int64_t count, int32_t *src,
                        int32_t *mask) {
    int64_t S = 1;
    for (int64_t k = 0; k < count; k++)
        if (s->off[b0 + k + 1] - s->off[b0 + k] > S) S = s->off[b0 + k + 1] - s->off[b0 + k];
    int32_t pad = ut_tokenizer_special_id(g->tok, "pad");
    if (pad < 0) pad = g->m->tokens.pad >= 0 ? (int32_t)g->m->tokens.pad : 0;
    for (int64_t k = 0; k < count; k++) {
        int64_t len = s->off[b0 + k + 1] - s->off[b0 + k];
        for (int64_t t = 0; t < S; t++) {
            src[k * S + t] = t < len ? s->ids[s->off[b0 + k] + t] : pad;
            mask[k * S + t] = t < len;
        }
    }
    return S;
}

static int generate_all(gen_model *g, const gen_sources *s, const char *in_path, FILE *out, char *err, size_t n) {
    int64_t B = g->batch, M = g->o.max_new_tokens, R = g->o.num_return_sequences, longest = 1;
    for (int64_t i = 0; i < s->n; i++)
        if (s->off[i + 1] - s->off[i] > longest) longest = s->off[i + 1] - s->off[i];
    int32_t *src = ut_malloc_check((size_t)(B * longest) * sizeof *src);
    int32_t *mask = ut_malloc_check((size_t)(B * longest) * sizeof *mask);
    int32_t *ids = ut_malloc_check((size_t)(B * R * M) * sizeof *ids);
    int64_t *lens = ut_malloc_check((size_t)(B * R) * sizeof *lens);
    bool stdout_tty = out == stdout && isatty(STDOUT_FILENO);
    gen_progress p = {.on = isatty(STDERR_FILENO), .t0 = now_s()};
    int rc = 0;
    for (int64_t b0 = 0; b0 < s->n && !rc; b0 += B) {
        int64_t count = s->n - b0 < B ? s->n - b0 : B;
        int64_t S = batch_of(g, s, b0, count, src, mask);
        char why[1024];
        if (ut_generate(g->m, &g->o, src, mask, count, S, ids, lens, why, sizeof why)) {
            rc = ut_errorf(err, n, "%s: lines %lld to %lld: %s", in_path, (long long)b0 + 1, (long long)(b0 + count),
                           why);
            break;
        }
        if (stdout_tty) progress_clear(&p);
        for (int64_t k = 0; k < count * R && !rc; k++) { /* source by source, its R texts in a row */
            char *text = ut_tokenizer_decode_generated(g->tok, ids + k * M, lens[k]);
            put_text(out, text);
            ut_free(text);
        }
        fflush(out);
        progress_show(&p, b0 + count, s->n);
    }
    progress_clear(&p);
    ut_free(src);
    ut_free(mask);
    ut_free(ids);
    ut_free(lens);
    return rc;
}

static const char *search_name(const ut_gen_opts *o) {
    const char *s = o->num_beams > 1 ? ut_fmt("%s (%d beams)", o->do_sample ? "beam sampling" : "beam search", o->num_beams)
                    : o->do_sample  ? "sampling"
                                    : "greedy";
    return o->num_return_sequences > 1 ? ut_fmt("%s, %lld texts a source", s, (long long)o->num_return_sequences) : s;
}

/* Everything after the command line: 0, or -1 with err. */
static int run_generate(const gen_args *a, char *err, size_t n) {
    gen_model g;
    gen_lines lines = {0};
    gen_sources s = {0};
    FILE *out = NULL;
    int rc = load_target(&g, a, err, n);
    if (!rc) rc = apply_flags(&g, a, err, n);
    if (!rc) rc = read_lines(a->input, &lines, err, n);
    if (!rc) rc = encode_sources(&g, a->input, &lines, &s, err, n);
    if (!rc && a->output && !(out = fopen(a->output, "w")))
        rc = ut_errorf(err, n, "--output %s: cannot open: %s", a->output, strerror(errno));
    double t0 = now_s();
    if (!rc) {
        fprintf(stderr, "utrain generate: %s: %lld sources, %s, max %lld new tokens, batch %lld\n", g.what,
                (long long)s.n, search_name(&g.o), (long long)g.o.max_new_tokens, (long long)g.batch);
        rc = generate_all(&g, &s, a->input, out ? out : stdout, err, n);
    }
    FILE *f = out ? out : stdout;
    if (!rc && (fflush(f) || ferror(f)))
        rc = ut_errorf(err, n, "%s: write failed: %s", a->output ? a->output : "standard output", strerror(errno));
    if (out && fclose(out) && !rc)
        rc = ut_errorf(err, n, "%s: write failed: %s", a->output, strerror(errno));
    if (!rc && a->output)
        fprintf(stderr, "utrain generate: %lld texts -> %s (%.1f s)\n", (long long)(s.n * g.o.num_return_sequences),
                a->output, now_s() - t0);
    ut_free(s.ids);
    ut_free(s.off);
    free_lines(&lines);
    free_model(&g);
    return rc;
}

int ut_cli_generate(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage_generate(stdout);
            return 0;
        }
    gen_args a;
    int rc = parse_args(&a, argc, argv);
    if (!rc) {
        char err[4096];
        if (run_generate(&a, err, sizeof err)) {
            fprintf(stderr, "utrain generate: %s\n", err);
            rc = UT_EXIT_ERROR;
        }
    }
    ut_free(a.sets);
    return rc;
}
