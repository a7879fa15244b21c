/* What the schema produces from a configuration: the resolved YAML, the
 * hash of the keys that change the computation, and docs/config.md. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_schema.h"
#include "utrain/base.h"

// --- YAML scalars

static bool safe_char(char ch) { return isalnum((unsigned char)ch) || strchr("_./+-", ch); }

static bool safe_chars(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!safe_char(*s)) return false;
    return true;
}

/* A string that YAML 1.1 reads back as the same string when left unquoted:
 * no number, boolean or null look-alikes ("no" is a boolean there). */
static bool plain_string(const char *s) {
    static const char *const typed[] = {"true", "false", "yes", "no", "on", "off", "y", "n", "null"};
    if (!safe_chars(s) || !(isalpha((unsigned char)*s) || strchr("_./", *s))) return false;
    for (size_t i = 0; i < sizeof typed / sizeof typed[0]; i++)
        if (!strcasecmp(s, typed[i])) return false;
    return true;
}

static void write_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* "a,b,c" whose items are all words or numbers. */
static bool plain_list(const char *v) {
    if (!strchr(v, ',')) return false;
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        if (!len) return false;
        for (size_t i = 0; i < len; i++)
            if (!safe_char(p[i])) return false;
        p += len;
        if (!*p) return true;
    }
}

/* A model option: words and numbers plain, "a,b,c" as a flow list [a, b, c]. */
static void write_option(FILE *f, const char *v) {
    if (safe_chars(v)) {
        fputs(v, f);
    } else if (plain_list(v)) {
        fputc('[', f);
        for (const char *p = v; *p; p++) *p == ',' ? fputs(", ", f) : fputc(*p, f);
        fputc(']', f);
    } else {
        write_quoted(f, v);
    }
}

// --- resolved YAML

static void write_model_opts(const ut_config *c, FILE *f) {
    for (int i = 0; i < ut_kv_len(c->model_opts); i++) {
        const char *key = ut_kv_key(c->model_opts, i);
        fprintf(f, "  %s: ", key);
        write_option(f, ut_kv_get(c->model_opts, key));
        fputc('\n', f);
    }
}

int ut_config_write(const ut_config *c, FILE *f) {
    char section[32] = "", sec[32], value[UT_CFG_STR_MAX + 64];
    fputs("# utrain configuration, every key resolved (docs/config.md)\n", f);
    for (int i = 0; i < ut_cfg_nkeys; i++) {
        const ut_cfg_key *k = &ut_cfg_schema[i];
        if (k->type == UT_CFG_LIST) continue;   /* its elements are written */
        ut_cfg_section(k->key, sec, sizeof sec);
        if (strcmp(sec, section)) fprintf(f, "\n%s:\n", strcpy(section, sec));
        fprintf(f, "%s%s: ", *sec ? "  " : "", k->key + (*sec ? strlen(sec) + 1 : 0));
        ut_cfg_format(c, k, value, sizeof value);
        bool text = k->type == UT_CFG_STR || k->type == UT_CFG_ENUM;
        if (text && !plain_string(value))
            write_quoted(f, value);
        else
            fputs(value, f);
        fputc('\n', f);
        if (!strcmp(k->key, "model.name")) write_model_opts(c, f);
    }
    return ferror(f) ? -1 : 0;
}

// --- hash

static uint64_t fnv1a(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* Option indices sorted by key (insertion sort: a handful of options). */
static int *sorted_options(const ut_kv *kv) {
    int n = ut_kv_len(kv), *idx = ut_malloc_check(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && strcmp(ut_kv_key(kv, idx[j - 1]), ut_kv_key(kv, i)) > 0; j--) idx[j] = idx[j - 1];
        idx[j] = i;
    }
    return idx;
}

/* Whether key k of c (its text: value) holds the schema's default. */
static bool at_default(const ut_config *c, const ut_cfg_key *k, const char *value) {
    const char *f = (const char *)c + k->off;
    switch (k->type) {
    case UT_CFG_FLOAT: return *(const double *)f == atof(k->def);
    case UT_CFG_INT:
        return (k->size == sizeof(int64_t) ? *(const int64_t *)f : *(const int *)f) == strtoll(k->def, NULL, 10);
    default: return !strcmp(value, k->def);
    }
}

bool ut_cfg_at_default(const ut_config *c, const char *key) {
    const ut_cfg_key *k = ut_cfg_find(key);
    if (!k) return false;
    char value[UT_CFG_STR_MAX + 64];
    ut_cfg_format(c, k, value, sizeof value);
    return at_default(c, k, value);
}

const char *ut_config_defaults_text(const ut_config *c, int which, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < c->ndefaults; i++) {
        const ut_cfg_default *d = &c->defaults[i];
        const ut_cfg_key *k = ut_cfg_find(d->key);
        char now[UT_CFG_STR_MAX + 64];
        if (d->which != which || !d->what[0] || !k || strstr(buf, d->what)) continue;
        ut_cfg_format(c, k, now, sizeof now);
        if (strcmp(now, d->value)) continue; /* changed since */
        len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s", len ? ", " : "", d->what);
    }
    return buf;
}

/* FNV-1a 64 over "key=value\n" of each hashed key in schema order, then
 * "model.<option>=value\n" for the model options sorted by name. */
uint64_t ut_config_hash(const ut_config *c) {
    uint64_t h = 0xcbf29ce484222325ULL;
    char value[UT_CFG_STR_MAX + 64];
    for (int i = 0; i < ut_cfg_nkeys; i++) {
        const ut_cfg_key *k = &ut_cfg_schema[i];
        if (!k->hashed) continue;
        ut_cfg_format(c, k, value, sizeof value);
        if (k->hash_if_set && at_default(c, k, value)) continue;
        h = fnv1a(fnv1a(fnv1a(fnv1a(h, k->key), "="), value), "\n");
    }
    int *idx = sorted_options(c->model_opts);
    for (int i = 0; i < ut_kv_len(c->model_opts); i++) {
        const char *key = ut_kv_key(c->model_opts, idx[i]);
        h = fnv1a(fnv1a(fnv1a(h, "model."), key), "=");
        h = fnv1a(fnv1a(h, ut_kv_get(c->model_opts, key)), "\n");
    }
    ut_free(idx);
    return h;
}

// --- docs/config.md

static const char *const doc_intro =
    "# Configuration keys\n\n"
    "<!-- Generated from the schema in src/train/config.c: do not edit. Regenerate with\n"
    "     make tests && build/tests/unit/test_config --doc > docs/config.md\n"
    "     (test_config fails when this page and the schema differ). -->\n\n"
    "A run is configured by a YAML file of nested mappings (`train: {epochs: 2}` is the\n"
    "key `train.epochs`) and by `--set key=value` options applied after it\n"
    "(`--set optim.lr=3e-4 --set model.sizes=[784,64,10]`). Unknown keys, values of the\n"
    "wrong type, values out of range and duplicate keys are errors that name the file,\n"
    "the line and the key. The run directory holds `config.yml`, the configuration with\n"
    "every key resolved, which loads back to the same run.\n\n"
    "The **hash** column marks the keys that change what training computes: they make up\n"
    "the configuration hash stored in checkpoints, together with the model options\n"
    "(\"when set\": only when not at its default, so checkpoints written before the key\n"
    "existed still resume).\n";

static const char *const doc_notes =
    "## Notes\n\n"
    "- `model`, `data` and `optim` given a single value name their kind: `model: gpt2` is\n"
    "  `model: {name: gpt2}`.\n"
    "- Every `model.*` key other than `model.name` is an option of the model, checked by\n"
    "  the model when it is built (so `model.n_layer: 2` reaches the gpt2 builder as\n"
    "  `n_layer`). Lists such as `sizes: [784, 128, 10]` arrive as `784,128,10`.\n"
    "- `model.pretrained: DIR` with `model.name: bert` (BERT or RoBERTa, by config.json's\n"
    "  `model_type`), `roberta`, `gpt2` or `bart` fine-tunes a Hugging Face model directory\n"
    "  (config.json, model.safetensors, tokenizer files); `model.task`\n"
    "  (`sequence_classification`; gpt2 also `causal_lm`, its default), `model.num_labels`\n"
    "  and, for a GPT-2 classifier whose config.json has none (or a RoBERTa built\n"
    "  without a directory), `model.pad_token_id` go with it, and `data.tokenizer` left\n"
    "  at `word` then means the directory's tokenizer (docs/models.md). Until\n"
    "  `model.name` is given, `model.pretrained` names the model by its config.json's\n"
    "  `model_type` (`bert`, `roberta`, `gpt2`, `bart`), so `model: {pretrained: DIR}` is enough.\n"
    "- `train.greater_is_better` follows `train.best_metric` until it is given: it is\n"
    "  false when the metric's name ends in `loss` or `perplexity` (lower is better), and\n"
    "  true otherwise (`dev/accuracy`, `dev/f1`, `dev/bleu`, `dev/rougeL`, ...), as the\n"
    "  Hugging Face Trainer decides for `metric_for_best_model`.\n"
    "- `train.max_steps` > 0 overrides `train.epochs`; the cosine and linear schedules\n"
    "  end at the total step count the trainer computes from them.\n"
    "- Booleans accept true/false, yes/no, on/off and 1/0.\n"
    "- Values follow YAML's types: a quoted scalar (`lr: \"0.001\"`) or one tagged\n"
    "  `!!str` is a string, and a number or boolean key refuses it with the file, line\n"
    "  and key (write `lr: 0.001`). String keys take quoted or plain values alike;\n"
    "  quote an enum value YAML would read otherwise (`eval_strategy: \"no\"`). A quoted\n"
    "  value spanning lines is refused as a quote left open. Model options (`model.*`)\n"
    "  are text that the model reads, quoted or not; `--set` values have no quotes.\n"
    "  One exception: `master_port` also takes a quoted number (`master_port: '29500'`),\n"
    "  as launcher configs write it (the port is an environment variable's text there).\n"
    "- A file without keys (empty, comments only, `{}`) is an error, not a run of\n"
    "  every default.\n"
    "- Before a run starts, keys are also checked together: `data.name` decides which\n"
    "  data paths are required, `eval_strategy: steps` needs `eval_interval` >= 1 (and\n"
    "  `save_strategy: steps` `save_interval` >= 1), `min_lr` <= `lr`, cosine and linear\n"
    "  schedules need `max_steps` or `epochs`, Nesterov needs momentum without dampening.\n";

static void doc_cell_default(const ut_cfg_key *k, FILE *f) {
    if (k->type == UT_CFG_LIST)
        fputs("(beta1, beta2) |", f);
    else
        fprintf(f, "`%s` |", *k->def ? k->def : "\"\"");
}

static void doc_cell_allowed(const ut_cfg_key *k, FILE *f) {
    char r[96];
    ut_cfg_range_text(k, r, sizeof r);
    fputc(' ', f);
    for (const char *const *e = k->values; e && *e; e++) fprintf(f, "%s`%s`", e == k->values ? "" : ", ", *e);
    fprintf(f, "%s |", r);
}

static void doc_row(const ut_cfg_key *k, FILE *f) {
    static const char *const types[] = {"str", "int", "float", "bool", "enum", "list"};
    fprintf(f, "| `%s` | %s", k->key, types[k->type]);
    if (k->type == UT_CFG_LIST) fprintf(f, " of %d floats", k->count);
    fputs(" | ", f);
    doc_cell_default(k, f);
    doc_cell_allowed(k, f);
    fprintf(f, " %s | %s |\n", k->hash_if_set ? "when set" : k->hashed ? "yes" : "", k->doc);
}

static void doc_section(const char *section, FILE *f) {
    char sec[32];
    fprintf(f, "\n## %s\n\n", *section ? section : "Top level (the run)");
    fputs("| key | type | default | allowed | hash | description |\n", f);
    fputs("|---|---|---|---|---|---|\n", f);
    for (int i = 0; i < ut_cfg_nkeys; i++) {
        ut_cfg_section(ut_cfg_schema[i].key, sec, sizeof sec);
        if (!strcmp(sec, section)) doc_row(&ut_cfg_schema[i], f);
    }
}

void ut_config_doc_markdown(FILE *f) {
    fputs(doc_intro, f);
    for (int s = 0; s < ut_cfg_nsections; s++) doc_section(ut_cfg_sections[s], f);
    fputs("\n## Aliases\n\nThe seeds' spellings, accepted in files and in `--set`:\n\n", f);
    fputs("| alias | same as |\n|---|---|\n", f);
    for (int i = 0; i < ut_cfg_naliases; i++)
        fprintf(f, "| `%s` | `%s` |\n", ut_cfg_aliases[i].alias, ut_cfg_aliases[i].key);
    fputc('\n', f);
    fputs(ut_cfg_compat_doc, f);
    fputs(ut_cfg_hf_doc, f);
    fputs(doc_notes, f);
}
