/* ut_config_load: a YAML file of nested mappings, read as libyaml events.
 * Nested keys become dotted keys (train: {epochs: 2} -> train.epochs), which
 * go through the schema like --set does; sequences are allowed only where a
 * list belongs (LIST keys, model options) and arrive as "a,b,c". */
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <yaml.h>

#include "config_schema.h"
#include "utrain/base.h"

typedef struct {
    yaml_parser_t p;
    const char *path;
    ut_config *c;
    char *err;
    size_t n;
    bool seed_layout; /* the file has the seed's data-params / transformers-params / dist-params sections */
    char **seen;     /* keys given so far, raw and canonical (duplicates are errors) */
    int *seen_line;
    int nseen, cap;
} loader;

static int load_mapping(loader *ld, const char *prefix, int line);

__attribute__((format(printf, 3, 4))) static int fail(loader *ld, int line, const char *fmt, ...) {
    size_t len = (size_t)snprintf(ld->err, ld->n, "%s:%d: ", ld->path, line);
    if (len >= ld->n) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->err + len, ld->n - len, fmt, ap);
    va_end(ap);
    return -1;
}

/* The next event, or -1 with libyaml's line and problem. */
static int next(loader *ld, yaml_event_t *ev) {
    if (yaml_parser_parse(&ld->p, ev)) return 0;
    const char *problem = ld->p.problem ? ld->p.problem : "YAML error";
    int line = (int)ld->p.problem_mark.line + 1;
    if (ld->p.context) return fail(ld, line, "%s (%s)", problem, ld->p.context);
    return fail(ld, line, "%s", problem);
}

static int line_of(const yaml_event_t *ev) { return (int)ev->start_mark.line + 1; }

/* An unquoted empty, ~ or null scalar; also Python's None, which configs
 * written from Python keyword arguments carry (FlagAI's load_dir=None). */
static bool is_null(const yaml_event_t *ev) {
    const char *v = (const char *)ev->data.scalar.value;
    return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           (!*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL") ||
            !strcmp(v, "None"));
}

static int remember(loader *ld, const char *key, int line) {
    for (int i = 0; i < ld->nseen; i++)
        if (!strcmp(ld->seen[i], key))
            return fail(ld, line, "%s: duplicate key (first given at line %d)", key, ld->seen_line[i]);
    if (ld->nseen == ld->cap) {
        ld->cap = ld->cap ? 2 * ld->cap : 32;
        ld->seen = ut_realloc_check(ld->seen, (size_t)ld->cap * sizeof(char *));
        ld->seen_line = ut_realloc_check(ld->seen_line, (size_t)ld->cap * sizeof(int));
    }
    size_t len = strlen(key) + 1;
    ld->seen[ld->nseen] = memcpy(ut_malloc_check(len), key, len);
    ld->seen_line[ld->nseen++] = line;
    return 0;
}

static int assign_at(loader *ld, const char *key, const char *value, int line) {
    const char *canon = ut_cfg_resolve(key);
    if (strcmp(canon, key) && remember(ld, canon, line)) return -1;
    char msg[768];
    if (ut_cfg_assign(ld->c, key, value, msg, sizeof msg)) return fail(ld, line, "%s", msg);
    return 0;
}

static bool is_section(const char *key) {
    for (int i = 1; i < ut_cfg_nsections; i++)
        if (!strcmp(key, ut_cfg_sections[i])) return true;
    return false;
}

/* A mapping is fine for sections, model options (nested ones too) and
 * unknown keys (whose leaves then fail with a suggestion). */
static bool mapping_allowed(const char *key) {
    const char *canon = ut_cfg_resolve(key);
    return is_section(key) || ut_cfg_is_flat_section(key) || ut_cfg_is_model_opt(canon) ||
           !ut_cfg_find(canon);
}

/* A sequence of scalars, joined with ',' into one value. */
static int load_sequence(loader *ld, const char *key, int line) {
    const char *canon = ut_cfg_resolve(key);
    const ut_cfg_key *k = ut_cfg_find(canon);
    if (k && k->type != UT_CFG_LIST && !k->names)
        return fail(ld, line, "%s: a sequence where a single value belongs", key);
    size_t len = 0, cap = 64;
    char *buf = ut_malloc_check(cap);
    int rc = 0;
    buf[0] = 0;
    for (;;) {
        yaml_event_t ev;
        if (next(ld, &ev)) {
            rc = -1;
            break;
        }
        bool end = ev.type == YAML_SEQUENCE_END_EVENT;
        if (ev.type == YAML_SCALAR_EVENT) {
            size_t m = ev.data.scalar.length;
            if (len + m + 2 > cap) buf = ut_realloc_check(buf, cap = 2 * (len + m + 2));
            len += (size_t)sprintf(buf + len, "%s%s", len ? "," : "", (char *)ev.data.scalar.value);
        } else if (!end) {
            rc = fail(ld, line_of(&ev), "%s: a list may only hold single values", key);
        }
        yaml_event_delete(&ev);
        if (end || rc) break;
    }
    if (!rc) rc = assign_at(ld, key, buf, line);
    ut_free(buf);
    return rc;
}

/* YAML's types for a scalar value: a quoted scalar or one tagged !!str is a
 * string, so a number or boolean key refuses it; a quoted scalar spanning
 * lines is almost always a quote left open (it swallowed the lines after). */
static int check_scalar(loader *ld, const char *key, const yaml_event_t *ev, int line) {
    const char *v = (const char *)ev->data.scalar.value, *tag = (const char *)ev->data.scalar.tag;
    bool quoted = ev->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                  ev->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    int last = (int)ev->end_mark.line + 1;
    const ut_cfg_key *k = ut_cfg_find(ut_cfg_resolve(key));
    if (quoted && last > line && k)
        return fail(ld, line, "%s: the quoted value runs from line %d to line %d: a quote left open? "
                    "(close it on the line where it starts)", key, line, last);
    bool string = quoted || (tag && !strcmp(tag, YAML_STR_TAG));
    /* launcher configs quote the port (it is MASTER_PORT's text): the one exception */
    if (string && k && !strcmp(k->key, "dist.master_port")) return 0;
    if (!string || !k || (k->type != UT_CFG_INT && k->type != UT_CFG_FLOAT && k->type != UT_CFG_BOOL))
        return 0;
    return fail(ld, line, "%s: %s%.40s%s is a string in YAML (%s), but %s takes %s: write it "
                "without quotes or tag (%s: %.40s)", key, quoted ? "\"" : "'", v, quoted ? "\"" : "'",
                quoted ? "quoted" : "tagged !!str", key,
                k->type == UT_CFG_BOOL ? "true or false" : k->type == UT_CFG_INT ? "an integer" : "a number",
                strrchr(key, '.') ? strrchr(key, '.') + 1 : key, v);
}

/* The value of key (whose own scalar was at line): one node. */
static int load_value(loader *ld, const char *key, int line) {
    yaml_event_t ev;
    if (next(ld, &ev)) return -1;
    int rc;
    switch (ev.type) {
    case YAML_SCALAR_EVENT:
        rc = check_scalar(ld, key, &ev, line);
        if (!rc) rc = assign_at(ld, key, is_null(&ev) ? "" : (const char *)ev.data.scalar.value, line);
        break;
    case YAML_MAPPING_START_EVENT:
        rc = mapping_allowed(key) ? load_mapping(ld, key, line)
                                  : fail(ld, line, "%s: a mapping where a single value belongs", key);
        break;
    case YAML_SEQUENCE_START_EVENT: rc = load_sequence(ld, key, line); break;
    default: rc = fail(ld, line, "%s: YAML aliases are not supported", key); break;
    }
    yaml_event_delete(&ev);
    return rc;
}

/* "prefix.key" (or "key" at the top level) for each entry until the mapping
 * ends. An empty mapping under an unknown key is an unknown key too. */
static int load_mapping(loader *ld, const char *prefix, int line) {
    int entries = 0;
    for (;;) {
        yaml_event_t ev;
        if (next(ld, &ev)) return -1;
        if (ev.type == YAML_MAPPING_END_EVENT) break;
        int kline = line_of(&ev), rc;
        if (ev.type != YAML_SCALAR_EVENT) {
            rc = fail(ld, kline, "%s%sa key must be a single value", prefix, *prefix ? ": " : "");
        } else {
            char key[256];
            const char *name = (const char *)ev.data.scalar.value;
            /* the seed's data-params: {data_dir: D} is the top-level key data_dir */
            const char *pre = ut_cfg_is_flat_section(prefix) ? "" : prefix;
            if (!*pre && *prefix) ld->seed_layout = true;
            if ((size_t)snprintf(key, sizeof key, "%s%s%s", pre, *pre ? "." : "", name) >= sizeof key)
                rc = fail(ld, kline, "%s: key longer than %zu characters", name, sizeof key - 1);
            else
                rc = remember(ld, key, kline);
            if (!rc) rc = load_value(ld, key, kline);
        }
        yaml_event_delete(&ev);
        if (rc) return -1;
        entries++;
    }
    if (entries || !*prefix || is_section(prefix) || ut_cfg_is_flat_section(prefix) ||
        ut_cfg_is_model_opt(prefix) || ut_cfg_hf_mapping(prefix))
        return 0;
    char hint[400];
    ut_cfg_suggest(prefix, hint, sizeof hint);
    return fail(ld, line, "%s: unknown key%s", prefix, hint);
}

/* One document whose top node is a mapping. An empty file (or comments
 * only, or {}) is refused by the caller: it would silently train defaults. */
static int load_stream(loader *ld) {
    for (int docs = 0;;) {
        yaml_event_t ev;
        if (next(ld, &ev)) return -1;
        yaml_event_type_t t = ev.type;
        int rc = 0, line = line_of(&ev);
        if (t == YAML_DOCUMENT_START_EVENT && ++docs > 1)
            rc = fail(ld, line, "only one YAML document is supported");
        else if (t == YAML_MAPPING_START_EVENT)
            rc = load_mapping(ld, "", line);
        else if (t == YAML_SEQUENCE_START_EVENT || t == YAML_ALIAS_EVENT ||
                 (t == YAML_SCALAR_EVENT && !is_null(&ev)))
            rc = fail(ld, line, "the top level must be a mapping of keys");
        yaml_event_delete(&ev);
        if (rc || t == YAML_STREAM_END_EVENT) return rc;
    }
}

static ut_kv *kv_copy(const ut_kv *kv) {
    ut_kv *out = ut_kv_new();
    for (int i = 0; i < ut_kv_len(kv); i++)
        ut_kv_set(out, ut_kv_key(kv, i), ut_kv_get(kv, ut_kv_key(kv, i)));
    return out;
}

/* Loads into a copy and keeps it only on success: a failed load leaves c as it was. */
static bool seen(const loader *ld, const char *key) {
    for (int i = 0; i < ld->nseen; i++)
        if (!strcmp(ld->seen[i], key)) return true;
    return false;
}

/* A file in the seed's parameters.yml layout trains with the seed's recipe
 * where it does not say otherwise: the seed's trainer always decays the
 * learning rate linearly after warmup, clips the gradient norm at 1.0 and
 * keeps the checkpoint with the best dev accuracy. */
static int seed_recipe(loader *ld) {
    static const struct { const char *key, *value, *what; } recipe[] = {
        {"optim.schedule", "linear", "linear decay after warmup"},
        {"train.grad_clip", "1.0", "gradient clipping at 1.0"},
        {"train.best_metric", "dev/accuracy", "best checkpoint by dev accuracy"},
    };
    char *out = ld->c->seed_recipe;
    size_t cap = sizeof ld->c->seed_recipe, len = 0;
    out[0] = 0;
    for (size_t i = 0; i < sizeof recipe / sizeof recipe[0]; i++) {
        if (seen(ld, recipe[i].key)) continue;
        char msg[512];
        if (ut_cfg_assign(ld->c, recipe[i].key, recipe[i].value, msg, sizeof msg))
            return ut_errorf(ld->err, ld->n, "%s: the seed's recipe: %s", ld->path, msg);
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s", len ? ", " : "", recipe[i].what);
    }
    return 0;
}

/* Sets key to value as another trainer's default (which: UT_CFG_DEFAULTS_*)
 * and records it with what it stands for (NULL: a part of the one before),
 * for the run's summary (ut_config_defaults_text). */
static int apply_default(loader *ld, int which, const char *key, const char *value, const char *what) {
    ut_config *c = ld->c;
    char msg[512];
    if (ut_cfg_assign(c, key, value, msg, sizeof msg))
        return ut_errorf(ld->err, ld->n, "%s: %s's defaults: %s", ld->path,
                         which == UT_CFG_DEFAULTS_HF ? "TrainingArguments" : "FlagAI's Trainer", msg);
    if (c->ndefaults == UT_CFG_MAX_DEFAULTS) return 0;
    ut_cfg_default *d = &c->defaults[c->ndefaults++];
    d->which = which;
    snprintf(d->key, sizeof d->key, "%s", key);
    ut_cfg_format(c, ut_cfg_find(key), d->value, sizeof d->value);
    snprintf(d->what, sizeof d->what, "%s", what ? what : "");
    return 0;
}

/* A file of FlagAI's Trainer arguments (it names env_type) trains with the
 * Trainer's defaults where it does not say otherwise: seed 1234, a log line
 * and an evaluation every 100 steps and a checkpoint every 1000, and in its
 * plain PyTorch environments (pytorch, pytorchDDP; under DeepSpeed the
 * DeepSpeed config decides) weight_decay 0.1 (none for Adafactor, as its
 * get_optimizer builds it), clip_grad 1.0, warm_up 0.1 of
 * AnnealingLR and, with fp16, FP16_Optimizer's loss scaler (from 2^32,
 * window 1000, hysteresis 2, floor 1) and a schedule that steps on after a
 * skipped step. tensorboard_dir's directory takes the final experiment_name. */
static int flagai_recipe(loader *ld) {
    ut_config *c = ld->c;
    bool plain = !strcmp(c->flagai_env, "pytorch") || !strcmp(c->flagai_env, "pytorchDDP");
    bool fp16 = !strcmp(c->precision, "fp16"), adafactor = !strcmp(c->optim_name, "adafactor");
    bool sched = plain && !seen(ld, "warm_up") && !seen(ld, "optim.schedule") && !seen(ld, "optim.warmup_ratio") &&
                 !seen(ld, "optim.warmup_steps") && !seen(ld, "optim.min_lr") && !seen(ld, "optim.min_lr_ratio") &&
                 !strcmp(c->schedule, "constant"); /* a DeepSpeed config's scheduler stays */
    static const char *const scaler = "FP16_Optimizer's loss scaler (from 2^32, x2 after 1000 clean steps, "
                                      "hysteresis 2, floor 1)";
    const struct { const char *key, *value; bool when; const char *what; } recipe[] = {
        /* its get_optimizer gives Adafactor no weight decay */
        {"optim.weight_decay", adafactor ? "0" : "0.1", plain,
         adafactor ? "no weight decay (get_optimizer gives Adafactor none)" : "weight decay 0.1"},
        {"train.grad_clip", "1.0", plain, "gradient clipping at 1.0"},
        {"seed", "1234", true, "seed 1234"},
        {"train.log_interval", "100", true, "log_interval 100"},
        {"train.eval_interval", "100", true, "eval_interval 100 (with dev data)"},
        {"train.save_interval", "1000", true, "save_interval 1000"},
        {"optim.schedule", "annealing", sched, "warm_up 0.1 (optim.schedule: annealing, AnnealingLR's cosine decay)"},
        {"optim.warmup_ratio", "0.1", sched, NULL},
        {"optim.min_lr_ratio", "0.1", sched, NULL},
        {"optim.schedule_on_skip", "advance", plain && fp16, "a skipped fp16 step advances the schedule"},
        {"train.init_scale", "4294967296", plain && fp16, scaler},
        {"train.growth_interval", "1000", plain && fp16, scaler},
        {"train.loss_scale_hysteresis", "2", plain && fp16, scaler},
        {"train.min_loss_scale", "1", plain && fp16, scaler},
    };
    for (size_t i = 0; i < sizeof recipe / sizeof recipe[0]; i++) {
        /* a key the file set, by name or through another key's meaning, stays */
        if (!recipe[i].when || seen(ld, recipe[i].key) || !ut_cfg_at_default(c, recipe[i].key)) continue;
        if (apply_default(ld, UT_CFG_DEFAULTS_FLAGAI, recipe[i].key, recipe[i].value, recipe[i].what)) return -1;
    }
    return 0;
}

/* A file of Hugging Face TrainingArguments fields (it names one that only
 * they have) trains with TrainingArguments' defaults where it does not say
 * otherwise, as the Trainer does: AdamW at 5e-5 without weight decay, a
 * linear decay, gradient clipping at 1.0, 3 epochs of batches of 8, no
 * evaluation, a log line and a checkpoint every 500 steps, the last
 * checkpoint as the run's model, and a warmup
 * from rate 0 as transformers' schedules have, and Adafactor without the
 * parameter scale; eval_strategy steps without eval_steps evaluates every
 * logging_steps. A key the file set, by name or
 * through another field's meaning, stays. A whole to_json_string() file
 * names every field, and so takes none of these. */
static bool hf_file(const loader *ld) {
    static const char *const only_hf[] = {
        "per_device_train_batch_size", "per_device_eval_batch_size", "num_train_epochs", "max_grad_norm",
        "lr_scheduler_type", "logging_steps", "logging_strategy", "save_steps", "eval_steps", "evaluation_strategy",
        "overwrite_output_dir", "do_train", "do_eval", "do_predict", "remove_unused_columns", "adam_epsilon",
        "adam_beta1", "adam_beta2", "metric_for_best_model", "load_best_model_at_end", "report_to", "adafactor",
        "optim_args",
        /* the example scripts' (run_glue, run_classification, run_summarization, ...) */
        "model_name_or_path", "train_file", "validation_file", "max_seq_length"};
    for (size_t i = 0; i < sizeof only_hf / sizeof only_hf[0]; i++)
        if (seen(ld, only_hf[i])) return true;
    return false;
}

/* Where a key comes in the file: 1 for the first key, ... (0: not in it). */
static int seen_at(const loader *ld, const char *key) {
    for (int i = 0; i < ld->nseen; i++)
        if (!strcmp(ld->seen[i], key)) return i + 1;
    return 0;
}

/* lr_scheduler_type: greedy after lr_scheduler_kwargs that it shares with
 * ReduceLROnPlateau (mode, factor, ...): those went to optim.plateau_*
 * before the file named the schedule, and belong to optim.greedy_*. */
static int greedy_kwargs(loader *ld) {
    ut_config *c = ld->c;
    int type_at = seen_at(ld, "lr_scheduler_type");
    for (int i = 0; ut_cfg_hf_rate_args[i]; i++) {
        char arg[64], from[64], to[64], value[UT_CFG_STR_MAX + 64], msg[512];
        snprintf(arg, sizeof arg, "lr_scheduler_kwargs.%s", ut_cfg_hf_rate_args[i]);
        int at = seen_at(ld, arg);
        if (!at || at > type_at) continue;
        snprintf(from, sizeof from, "optim.plateau_%s", ut_cfg_hf_rate_args[i]);
        snprintf(to, sizeof to, "optim.greedy_%s", ut_cfg_hf_rate_args[i]);
        const ut_cfg_key *k = ut_cfg_find(from);
        ut_cfg_format(c, k, value, sizeof value);
        if (ut_cfg_assign(c, to, value, msg, sizeof msg) || ut_cfg_assign(c, from, k->def, msg, sizeof msg))
            return ut_errorf(ld->err, ld->n, "%s:%d: %s (%s): %s", ld->path, ld->seen_line[at - 1], arg, to, msg);
    }
    return 0;
}

static int hf_recipe(loader *ld) {
    ut_config *c = ld->c;
    if (!strcmp(c->schedule, "greedy") && greedy_kwargs(ld)) return -1;
    bool length = !seen(ld, "train.epochs") && !seen(ld, "train.max_steps");
    bool saving = !seen(ld, "train.save_strategy") && !seen(ld, "train.save_interval");
    const int hf = UT_CFG_DEFAULTS_HF;
    /* transformers' constant schedule and ReduceLROnPlateau ignore warmup_steps and warmup_ratio */
    bool plateau = !strcmp(c->schedule, "plateau"), greedy = !strcmp(c->schedule, "greedy");
    if (c->hf_constant && (plateau || greedy || !strcmp(c->schedule, "constant")) &&
        (c->warmup_steps > 0 || c->warmup_ratio > 0) &&
        (apply_default(ld, hf, "optim.warmup_steps", "0",
                       plateau  ? "lr_scheduler_type reduce_lr_on_plateau without warmup"
                       : greedy ? "lr_scheduler_type greedy without warmup"
                                : "lr_scheduler_type constant without warmup") ||
         apply_default(ld, hf, "optim.warmup_ratio", "0", NULL)))
        return -1;
    /* transformers' own schedules (a DeepSpeed config's keeps its warmup) */
    bool warm = (c->warmup_steps > 0 || c->warmup_ratio > 0) && strncmp(c->schedule, "ds_", 3) &&
                strcmp(c->schedule, "annealing");
    /* an example script's files are text: pairs to generate from (run_summarization's, run_translation's
     * arguments) or sentences to classify */
    bool files = seen(ld, "train_file") || seen(ld, "validation_file") || seen(ld, "test_file");
    bool pairs = seen(ld, "data.max_source_len") || seen(ld, "data.max_target_len") || seen(ld, "data.source_prefix") ||
                 seen(ld, "data.source_field") || seen(ld, "data.target_field") || seen(ld, "source_lang") ||
                 seen(ld, "generate.eval");
    /* run_ner's: words with a tag each */
    bool tagged = c->hf_tagged || seen(ld, "label_all_tokens") || seen(ld, "text_column_name");
    /* run_mlm's: texts to mask */
    bool mlm = c->hf_mlm || seen(ld, "mlm_probability") || seen(ld, "line_by_line");
    /* run_clm's: texts to continue (validation_split_percentage alone says run_mlm's) */
    bool clm = seen(ld, "block_size") || seen(ld, "keep_linebreaks");
    mlm = mlm && !clm;
    const struct { const char *key, *value; bool when; const char *what; } recipe[] = {
        {"data.name", clm ? "clm_text" : mlm ? "mlm_text" : tagged ? "tagged_text" : pairs ? "seq2seq_text" : "tsv_text",
         files && !seen(ld, "data.name"),
         clm       ? "train_file: texts for a causal language model (data.name clm_text)"
         : mlm     ? "train_file: texts for a masked language model (data.name mlm_text)"
         : tagged  ? "train_file: words with a tag each (data.name tagged_text)"
         : pairs ? "train_file: pairs of texts (data.name seq2seq_text)"
                 : "train_file: texts to classify (data.name tsv_text)"},
        {"optim.lr", "5e-5", true, "learning_rate 5e-5"},
        {"optim.weight_decay", "0", true, "weight_decay 0"},
        {"optim.schedule", "linear", !seen(ld, "optim.schedule"), "lr_scheduler_type linear"},
        {"train.grad_clip", "1.0", true, "max_grad_norm 1.0"},
        {"train.epochs", "3", length, "num_train_epochs 3"},
        {"train.batch_size", "8", true, "per_device_train_batch_size 8"},
        {"train.eval_batch_size", "8", true, "per_device_eval_batch_size 8"},
        {"optim.warmup_from_zero", "true", warm, "warmup from rate 0"},
        {"train.eval_strategy", "no", true, "eval_strategy no"},
        {"train.log_interval", "500", true, "logging_steps 500"},
        {"train.save_strategy", "steps", saving, "save_steps 500"},
        {"train.save_interval", "500", saving, NULL},
        /* load_best_model_at_end: true sets nothing (utrain's default), yet says so */
        {"train.load_best_at_end", "false", !seen(ld, "load_best_model_at_end"),
         "load_best_model_at_end false (the run's model is its last)"},
        /* the Trainer builds Adafactor with scale_parameter and relative_step False */
        {"optim.adafactor_scale_parameter", "false", !strcmp(c->optim_name, "adafactor"),
         "optim adafactor: scale_parameter False"},
    };
    for (size_t i = 0; i < sizeof recipe / sizeof recipe[0]; i++) {
        if (!recipe[i].when || seen(ld, recipe[i].key) || !ut_cfg_at_default(c, recipe[i].key)) continue;
        if (apply_default(ld, hf, recipe[i].key, recipe[i].value, recipe[i].what)) return -1;
    }
    /* run_mlm's validation_split_percentage: without a validation_file, that share is the dev set */
    if (c->hf_val_split > 0 && !c->dev_path[0] && !seen(ld, "data.dev_fraction")) {
        char frac[32], what[96];
        snprintf(frac, sizeof frac, "%.17g", c->hf_val_split);
        snprintf(what, sizeof what, "validation_split_percentage %.15g: data.dev_fraction %s", 100 * c->hf_val_split,
                 frac);
        if (apply_default(ld, hf, "data.dev_fraction", frac, what)) return -1;
    }
    /* eval_strategy steps without eval_steps evaluates every logging_steps (a fraction of the steps too) */
    if (!strcmp(c->eval_strategy, "steps") && c->eval_interval == 0 && c->eval_steps_fraction == 0 &&
        (c->log_interval > 0 || c->log_steps_fraction > 0)) {
        char v[32], shown[32], what[64];
        bool part = c->log_steps_fraction > 0;
        if (part) snprintf(v, sizeof v, "%.17g", c->log_steps_fraction);
        else snprintf(v, sizeof v, "%lld", (long long)c->log_interval);
        snprintf(shown, sizeof shown, "%.15g", part ? c->log_steps_fraction : (double)c->log_interval);
        snprintf(what, sizeof what, "eval_steps = logging_steps (%s)", shown);
        if (apply_default(ld, hf, part ? "train.eval_steps_fraction" : "train.eval_interval", v, what)) return -1;
    }
    return 0;
}

/* The seed's is_distributed: False is one process whose batch_size is the
 * whole batch of an optimizer step: its loader takes batch_size /
 * gradient_accumulation_steps examples at a time, and with gpus: N > 1
 * DataParallel splits each of those over the N devices. utrain's dp
 * strategy with N workers of batch_size / (accumulation x N) each gives
 * the same global batch. */
static int seed_data_parallel(loader *ld) {
    ut_config *c = ld->c;
    int64_t N = c->nproc_per_node, A = c->gradient_accumulation_steps > 0 ? c->gradient_accumulation_steps : 1;
    if (!c->one_process || N * A < 2 || strcmp(c->dist_strategy, "ddp")) return 0;
    if (c->batch_size % (N * A))
        return ut_errorf(ld->err, ld->n, "%s: is_distributed: False makes batch_size %lld the whole batch of a "
                                         "step, split over gradient_accumulation_steps %lld and gpus %lld, but it "
                                         "does not split evenly: make it a multiple of %lld",
                         ld->path, (long long)c->batch_size, (long long)A, (long long)N, (long long)(N * A));
    char msg[256], b[32];
    snprintf(b, sizeof b, "%lld", (long long)(c->batch_size / (N * A)));
    if ((N > 1 && ut_cfg_assign(c, "dist.strategy", "dp", msg, sizeof msg)) ||
        ut_cfg_assign(c, "train.batch_size", b, msg, sizeof msg))
        return ut_errorf(ld->err, ld->n, "%s: %s", ld->path, msg);
    size_t len = strlen(c->seed_recipe);
    snprintf(c->seed_recipe + len, sizeof c->seed_recipe - len,
             "%sis_distributed: False: one process; a step's batch of %lld is %lld accumulation step(s) x %lld "
             "worker(s) x %s%s",
             len ? "; " : "", (long long)(c->batch_size * N * A), (long long)A, (long long)N, b,
             N > 1 ? " (DataParallel: dist.strategy dp)" : "");
    return 0;
}

int ut_config_load(ut_config *c, const char *path, char *err, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, n, "%s: %s", path, strerror(errno));
        return -1;
    }
    ut_config copy = *c;
    copy.model_opts = kv_copy(c->model_opts);
    copy.seed_sharding = 0; /* this file's flags */
    loader ld = {.path = path, .c = &copy, .err = err, .n = n};
    if (!yaml_parser_initialize(&ld.p)) ut_abort(__FILE__, __LINE__, "yaml_parser_initialize failed");
    yaml_parser_set_input_file(&ld.p, f);
    int rc = load_stream(&ld);
    if (!rc && ld.seed_layout) rc = seed_recipe(&ld);
    if (!rc && seen(&ld, "env_type")) rc = flagai_recipe(&ld);
    else if (!rc && !ld.seed_layout && hf_file(&ld)) rc = hf_recipe(&ld);
    if (!rc && copy.flagai_tb[0]) rc = ut_cfg_flagai_logging_dir(&copy, err, n);
    /* optim_args over the file's other optim keys (whatever their order), for optim: sgd */
    if (!rc && copy.hf_optim_args[0] && !strcmp(copy.optim_name, "sgd") && ut_cfg_hf_optim_args(&copy, err, n)) {
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        rc = ut_errorf(err, n, "%s: %s", path, why);
    }
    if (!rc) rc = seed_data_parallel(&ld);
    if (!rc && copy.seed_sharding == 3u) /* the seed's comments: one or the other */
        rc = ut_errorf(err, n, "%s: use_fairscale_optimizer_sharding and use_fairscale_model_sharding are both "
                               "True: the seed shards the optimizer alone (optimizer sharding: dist.strategy zero2) "
                               "or everything (model sharding with optimizer sharding False: zero3); set one of "
                               "them False", path);
    if (!rc && ld.nseen == 0)
        rc = ut_errorf(err, n, "%s: no keys (the file is empty, holds only comments or is {}): give at "
                       "least model.name and the data.* paths (see configs/*.yml)", path);
    yaml_parser_delete(&ld.p);
    fclose(f);
    for (int i = 0; i < ld.nseen; i++) ut_free(ld.seen[i]);
    ut_free(ld.seen);
    ut_free(ld.seen_line);
    ut_config_free(rc ? &copy : c);
    if (!rc) *c = copy;
    return rc;
}
