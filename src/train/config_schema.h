/* The configuration schema shared by the config files: one row per key, and
 * the helpers every consumer (defaults, YAML, --set, validate, write, hash,
 * docs) goes through, so they cannot disagree.
 * defines: ut_cfg_type, ut_cfg_key, ut_cfg_schema, ut_cfg_alias,
 *          ut_cfg_aliases, ut_cfg_find, ut_cfg_resolve, ut_cfg_section,
 *          ut_cfg_is_model_opt, ut_cfg_assign, ut_cfg_format, ut_cfg_check_value,
 *          ut_cfg_range_text, ut_cfg_suggest. */
#ifndef UTRAIN_CONFIG_SCHEMA_H
#define UTRAIN_CONFIG_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include "utrain/config.h"

typedef enum { UT_CFG_STR, UT_CFG_INT, UT_CFG_FLOAT, UT_CFG_BOOL, UT_CFG_ENUM, UT_CFG_LIST } ut_cfg_type;
typedef enum { UT_CFG_NOLO, UT_CFG_GE, UT_CFG_GT } ut_cfg_lo;
typedef enum { UT_CFG_NOHI, UT_CFG_LE, UT_CFG_LT } ut_cfg_hi;

/* One key. off/size locate the field in ut_config: STR/ENUM a char array of
 * size bytes, INT an int (size 4) or int64_t (size 8), FLOAT a double, BOOL a
 * bool, LIST `count` adjacent doubles that are keys of their own (LIST rows
 * are shorthand: no default, not written, not hashed). hashed: the key
 * changes what training computes (part of ut_config_hash); hash_if_set
 * (keys added after checkpoints were written): hashed only when its value
 * is not the default, so those checkpoints' hashes stay as they were and
 * they still resume. */
typedef struct {
    const char *key;
    ut_cfg_type type;
    size_t off, size;
    const char *def;
    const char *doc;
    const char *const *values;   /* ENUM: allowed values, NULL-terminated */
    ut_cfg_lo lo;
    ut_cfg_hi hi;
    double min, max;             /* INT, FLOAT, LIST elements */
    int count;                   /* LIST */
    bool hashed, hash_if_set;
    bool names;                  /* STR: a YAML sequence of names is one value, joined with ',' */
} ut_cfg_key;

extern const ut_cfg_key ut_cfg_schema[];
extern const int ut_cfg_nkeys;

/* Another spelling of a key (the seeds' vocabulary). */
typedef struct {
    const char *alias, *key;
} ut_cfg_alias;
extern const ut_cfg_alias ut_cfg_aliases[];
extern const int ut_cfg_naliases;

/* Sections, in the order of the schema: "" (top level), model, data, train, optim. */
extern const char *const ut_cfg_sections[];
extern const int ut_cfg_nsections;

/* Other trainers' keys that are not plain aliases (pytorch_universal_trainer's
 * model_dir, data_dir, fairscale and fp16 flags; FlagAI's env_type,
 * pytorch_device, model_parallel_size, fp16): applied to c through schema
 * keys, or refused with what to write instead. 1: handled, 0: not such a
 * key, -1: refused (err). */
int ut_cfg_compat(ut_config *c, const char *key, const char *value, char *err, size_t n);
/* A boolean value of key, as every boolean key reads it (true/false, yes/no,
 * on/off, 1/0, any case): 1, 0, or -1 with err (which may be NULL). */
int ut_cfg_flag(const char *key, const char *v, char *err, size_t n);
/* A key of another trainer's tuning that changes nothing in utrain, added to
 * the list the run's summary names (c->ds_tuning). */
void ut_cfg_note_tuning(ut_config *c, const char *key);
/* The JSON file at path, parsed (a cJSON *; cJSON_Delete it), or NULL with
 * "<what> <path>: why" in err (missing, over 16 MiB, not JSON: the byte). */
void *ut_cfg_json_file(const char *path, const char *what, char *err, size_t n);
/* train.logging_dir from FlagAI's tensorboard_dir: c->flagai_tb/experiment_name
 * (nothing when flagai_tb is empty); 0, or -1 with err. */
int ut_cfg_flagai_logging_dir(ut_config *c, char *err, size_t n);
/* The same for Hugging Face TrainingArguments' fields (config_hf.c), which
 * ut_cfg_compat also asks. */
int ut_cfg_hf(ut_config *c, const char *key, const char *value, char *err, size_t n);
/* TrainingArguments' optim_args (c->hf_optim_args) into the optim.* keys,
 * as transformers reads them for optim: sgd; 0, or -1 with err. */
int ut_cfg_hf_optim_args(ut_config *c, char *err, size_t n);
/* Whether key is a mapping of Hugging Face's that may be empty (lr_scheduler_kwargs: {}). */
bool ut_cfg_hf_mapping(const char *key);
/* The lr_scheduler_kwargs ReduceLROnPlateau and GreedyLR share (mode,
 * factor, ...; NULL-terminated): each is optim.plateau_NAME, or
 * optim.greedy_NAME once the schedule is greedy. */
extern const char *const ut_cfg_hf_rate_args[];
/* device (or pytorch_device, named by key): 0 for a device the trainer
 * runs on, else -1 with what to write instead. */
int ut_cfg_check_device(const char *key, const char *value, char *err, size_t n);
/* Sections of pytorch_universal_trainer's parameters.yml (data-params,
 * transformers-params, dist-params): their keys are read as top-level keys. */
bool ut_cfg_is_flat_section(const char *name);
/* The docs/config.md section listing those keys. */
extern const char *const ut_cfg_compat_doc;
extern const char *const ut_cfg_hf_doc;

/* The canonical key for key (an alias's target, else key itself). */
const char *ut_cfg_resolve(const char *key);
/* The row of a canonical key, or NULL. */
const ut_cfg_key *ut_cfg_find(const char *key);
/* Whether key (a schema key) holds its default value. */
bool ut_cfg_at_default(const ut_config *c, const char *key);
/* The section of a key ("" for top-level keys) into buf. */
void ut_cfg_section(const char *key, char *buf, size_t n);
/* true for model.* keys other than model.name: options for the model. */
bool ut_cfg_is_model_opt(const char *key);

/* Sets key (alias or canonical; model options included) from text with the
 * type, range and enum checks. 0, or -1 with "key: problem" in err. */
int ut_cfg_assign(ut_config *c, const char *key, const char *value, char *err, size_t n);
/* Applies DeepSpeed's JSON config at path (config_deepspeed.c): 0, or -1
 * with a message naming the file and the key that utrain cannot honour. */
int ut_cfg_deepspeed(ut_config *c, const char *path, char *err, size_t n);
/* The canonical text of a row's current value (as written and hashed). */
void ut_cfg_format(const ut_config *c, const ut_cfg_key *k, char *buf, size_t n);
/* Range and enum check of a row's current value: 0, or -1 with "key: ...". */
int ut_cfg_check_value(const ut_config *c, const ut_cfg_key *k, char *err, size_t n);
/* ">= 0 and < 1" for a row with bounds, "" without. */
void ut_cfg_range_text(const ut_cfg_key *k, char *buf, size_t n);
/* " (did you mean X?)" for the schema key or alias nearest to an unknown
 * key, or "" when none is near. */
void ut_cfg_suggest(const char *key, char *buf, size_t n);
/* " (did you mean X?)" for the name among cands (NULL-terminated) nearest to
 * the len bytes at word, or "" when none is near */
void ut_cfg_suggest_among(const char *const *cands, const char *word, size_t len, char *buf, size_t n);

#endif
