/* DeepSpeed's JSON config as its users write it (FlagAI's `deepspeed_config:
 * ds.json`): every key it holds sets the utrain keys it means, "auto" keeps
 * utrain's value, and a key utrain cannot honour is refused with its path
 * in the file and what to write instead. docs/config.md has the table. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_schema.h"
#include "utrain/base.h"

typedef struct {
    ut_config *c;
    const char *file;
    char *err;
    size_t n;
} ds_ctx;

static int refuse(ds_ctx *d, const char *path, const char *why) {
    ut_errorf(d->err, d->n, "deepspeed_config %s: %s: %s", d->file, path, why);
    return -1;
}

/* path is one of DeepSpeed's own tuning knobs (how its ZeRO sizes transfers,
 * groups and prefetches, how it lays out checkpointed activations): utrain
 * computes the same values its own way (docs/config.md says how), so the key
 * is accepted and named in the run's summary. */
void ut_cfg_note_tuning(ut_config *c, const char *key) {
    char *list = c->ds_tuning;
    size_t len = strlen(list), cap = sizeof c->ds_tuning;
    if (strstr(list, key)) return;
    if (len + strlen(key) + 8 < cap) snprintf(list + len, cap - len, "%s%s", len ? ", " : "", key);
    else if (!strstr(list, "...")) snprintf(list + len, cap - len, ", ...");
}

static void tuning(ds_ctx *d, const char *path) { ut_cfg_note_tuning(d->c, path); }

static bool is_auto(const cJSON *v) { return cJSON_IsString(v) && !strcmp(v->valuestring, "auto"); }

/* v as text for ut_cfg_assign: numbers (integers exactly), booleans, strings */
static bool text_of(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsBool(v)) return snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false"), true;
    if (cJSON_IsString(v)) return snprintf(buf, n, "%s", v->valuestring), true;
    if (!cJSON_IsNumber(v)) return false;
    double x = v->valuedouble;
    if (x == floor(x) && fabs(x) < 1e15) snprintf(buf, n, "%.0f", x);
    else snprintf(buf, n, "%.9g", x);
    return true;
}

/* path = value, applied as utrain's key (unless "auto") */
static int set(ds_ctx *d, const char *path, const cJSON *v, const char *key) {
    char buf[64], why[512];
    if (is_auto(v)) return 0;
    if (!text_of(v, buf, sizeof buf)) return refuse(d, path, "expected a number, true/false or \"auto\"");
    if (ut_cfg_assign(d->c, key, buf, why, sizeof why)) return refuse(d, path, why);
    return 0;
}

static bool is_true(const cJSON *v) { return cJSON_IsTrue(v); }
static bool num_is(const cJSON *v, double x) { return cJSON_IsNumber(v) && v->valuedouble == x; }

/* fp16 / bf16: {enabled, loss-scale keys}. An fp16 section that is not
 * disabled brings DeepSpeed's loss scaler with its defaults (window 1000,
 * hysteresis 2, floor 1, initial 2^16), which the section's keys change. */
static int precision(ds_ctx *d, const cJSON *o, const char *name) {
    char path[128];
    const cJSON *e;
    const cJSON *on = cJSON_GetObjectItemCaseSensitive(o, "enabled");
    if (!strcmp(name, "fp16") && !cJSON_IsFalse(on)) {
        static const char *const defaults[][2] = {{"train.growth_interval", "1000"},
                                                  {"train.loss_scale_hysteresis", "2"},
                                                  {"train.min_loss_scale", "1"},
                                                  {"train.init_scale", "65536"}};
        char why[512];
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
            if (ut_cfg_assign(d->c, defaults[i][0], defaults[i][1], why, sizeof why)) return refuse(d, name, why);
    }
    cJSON_ArrayForEach(e, o) {
        snprintf(path, sizeof path, "%s.%s", name, e->string);
        if (!strcmp(e->string, "enabled")) {
            if (is_auto(e)) continue;
            if (!cJSON_IsBool(e)) return refuse(d, path, "expected true, false or \"auto\"");
            char why[512];
            if (is_true(e) && ut_cfg_assign(d->c, "train.precision", name, why, sizeof why))
                return refuse(d, path, why);
            continue;
        }
        if (!strcmp(e->string, "immediate_grad_update") && cJSON_IsBool(e)) { /* when DeepSpeed folds gradients */
            tuning(d, path);
            continue;
        }
        if (!strcmp(e->string, "fp16_master_weights_and_grads")) {
            if (cJSON_IsFalse(e)) continue;
            return refuse(d, path, "utrain keeps float32 master weights and gradients; set false or remove it");
        }
        if (!strcmp(name, "bf16")) return refuse(d, path, "not read by utrain (bf16 needs no loss scale); remove it");
        if (is_auto(e)) continue;
        if (!strcmp(e->string, "loss_scale")) {
            if (num_is(e, 0)) continue; /* 0: dynamic, what utrain does */
            return refuse(d, path, "utrain scales the loss dynamically (GradScaler's rules); set 0 or remove it");
        }
        if (!strcmp(e->string, "initial_scale_power")) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 64 || e->valuedouble != floor(e->valuedouble))
                return refuse(d, path, "expected an integer power of two from 0 to 64");
            char buf[32], why[512];
            snprintf(buf, sizeof buf, "%.0f", ldexp(1.0, (int)e->valuedouble));
            if (ut_cfg_assign(d->c, "train.init_scale", buf, why, sizeof why)) return refuse(d, path, why);
            continue;
        }
        if (!strcmp(e->string, "loss_scale_window")) {
            if (set(d, path, e, "train.growth_interval")) return -1;
            continue;
        }
        if (!strcmp(e->string, "hysteresis")) {
            if (set(d, path, e, "train.loss_scale_hysteresis")) return -1;
            continue;
        }
        if (!strcmp(e->string, "consecutive_hysteresis")) {
            if (!cJSON_IsBool(e)) return refuse(d, path, "expected true or false");
            if (set(d, path, e, "train.consecutive_hysteresis")) return -1;
            continue;
        }
        if (!strcmp(e->string, "min_loss_scale")) {
            if (set(d, path, e, "train.min_loss_scale")) return -1;
            continue;
        }
        if (!strcmp(e->string, "auto_cast")) { /* utrain's fp16 is autocast with float32 master weights either way */
            if (!cJSON_IsBool(e)) return refuse(d, path, "expected true or false");
            continue;
        }
        return refuse(d, path, "not read by utrain; remove it (train.init_scale, train.growth_interval, "
                               "train.loss_scale_hysteresis and train.min_loss_scale are utrain's loss-scale "
                               "settings)");
    }
    return 0;
}

/* offload_optimizer: {device: cpu | none, pin_memory} is dist.offload_optimizer
 * (pin_memory: the host buffers are page-locked where the device has such
 * memory, which utrain always does); offload_param (ZeRO-Infinity) only
 * "none". */
static int offload(ds_ctx *d, const cJSON *o, const char *path, bool params) {
    char sub[160], why[512];
    if (!cJSON_IsObject(o)) return refuse(d, path, "expected an object");
    const cJSON *e;
    cJSON_ArrayForEach(e, o) {
        snprintf(sub, sizeof sub, "%s.%s", path, e->string);
        if (!strcmp(e->string, "device")) {
            bool none = cJSON_IsString(e) && !strcmp(e->valuestring, "none");
            bool cpu = cJSON_IsString(e) && !strcmp(e->valuestring, "cpu");
            if (!none && !cpu) return refuse(d, sub, "expected \"cpu\" or \"none\" (nvme is not available)");
            if (params && cpu)
                return refuse(d, sub, "parameter offload is not available; keep \"none\" and offload the optimizer "
                                      "(zero_optimization.offload_optimizer.device: \"cpu\")");
            if (!params && ut_cfg_assign(d->c, "dist.offload_optimizer", cpu ? "cpu" : "none", why, sizeof why))
                return refuse(d, sub, why);
        } else if (!strcmp(e->string, "pin_memory")) {
            if (!cJSON_IsBool(e)) return refuse(d, sub, "expected true or false");
            if (!is_true(e)) return refuse(d, sub, "utrain always page-locks the offload buffers; set true or remove it");
        } else {
            return refuse(d, sub, "not read by utrain; remove it (device and pin_memory are)");
        }
    }
    return 0;
}

static int zero(ds_ctx *d, const cJSON *o) {
    static const char *const strategies[] = {"ddp", "zero1", "zero2", "zero3"};
    char path[128], why[512];
    const cJSON *e;
    if (!cJSON_IsObject(o)) return refuse(d, "zero_optimization", "expected an object");
    cJSON_ArrayForEach(e, o) {
        snprintf(path, sizeof path, "zero_optimization.%s", e->string);
        if (!strcmp(e->string, "stage")) {
            if (is_auto(e)) continue;
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 3 || e->valuedouble != floor(e->valuedouble))
                return refuse(d, path, "expected 0, 1, 2 or 3");
            if (ut_cfg_assign(d->c, "dist.strategy", strategies[(int)e->valuedouble], why, sizeof why))
                return refuse(d, path, why);
        } else if (!strcmp(e->string, "mics_shard_size")) { /* MiCS: ZeRO within groups, replicated across them */
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < -1 ||
                e->valuedouble == 0 || e->valuedouble > (1 << 20))
                return refuse(d, path, "expected a number of ranks per shard group (-1: off)");
            char buf[32];
            snprintf(buf, sizeof buf, "%.0f", e->valuedouble > 0 ? e->valuedouble : 0);
            if (ut_cfg_assign(d->c, "dist.shard_size", buf, why, sizeof why)) return refuse(d, path, why);
        } else if (!strcmp(e->string, "zero_quantized_weights") || !strcmp(e->string, "zero_quantized_gradients") ||
                   !strcmp(e->string, "zero_quantized_nontrainable_weights")) {
            /* ZeRO++'s qwZ and qgZ: 8- and 4-bit gathers and reductions */
            if (!cJSON_IsBool(e)) return refuse(d, path, "expected true or false");
            if (cJSON_IsTrue(e))
                return refuse(d, path, "utrain's ZeRO gathers and reduces in float32 (dist.comm_hook: bf16 halves "
                                       "ddp's and zero1's gradient traffic); set false or remove it");
        } else if (!strcmp(e->string, "zero_hpz_partition_size")) {
            /* ZeRO++'s hpZ: a second copy of the parameters sharded within a node for backward's gathers */
            if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble != floor(e->valuedouble))
                return refuse(d, path, "expected a number of ranks >= 1");
            if (e->valuedouble > 1)
                return refuse(d, path, "utrain has no secondary parameter partition; its hybrid sharding keeps all "
                                       "of ZeRO's gathers within groups of ranks (mics_shard_size, dist.shard_size); "
                                       "set 1 or remove it");
        } else if (!strcmp(e->string, "mics_hierarchical_params_gather")) {
            /* MiCS's two-level parameter gather across nodes: utrain's gathers stay within the group */
            if (!cJSON_IsBool(e)) return refuse(d, path, "expected true or false");
            if (is_true(e)) tuning(d, path);
        } else if (!strcmp(e->string, "offload_optimizer") || !strcmp(e->string, "offload_param")) {
            if (offload(d, e, path, !strcmp(e->string, "offload_param"))) return -1;
        } else if (!strcmp(e->string, "cpu_offload")) { /* DeepSpeed's older spelling (FlagAI's examples) */
            if (!cJSON_IsBool(e)) return refuse(d, path, "expected true or false");
            if (ut_cfg_assign(d->c, "dist.offload_optimizer", cJSON_IsTrue(e) ? "cpu" : "none", why, sizeof why))
                return refuse(d, path, why);
        } else if (!strcmp(e->string, "reduce_bucket_size")) {
            if (is_auto(e)) continue;
            if (!cJSON_IsNumber(e) || e->valuedouble < 1) return refuse(d, path, "expected a positive number of elements");
            /* DeepSpeed counts elements; utrain's buckets are MiB of float32 gradients */
            char buf[32];
            double mb = ceil(e->valuedouble * 4.0 / (1 << 20));
            snprintf(buf, sizeof buf, "%.0f", mb < 1 ? 1 : mb);
            if (ut_cfg_assign(d->c, "dist.bucket_mb", buf, why, sizeof why)) return refuse(d, path, why);
        } else if (!strcmp(e->string, "contiguous_gradients") || !strcmp(e->string, "overlap_comm") ||
                   !strcmp(e->string, "reduce_scatter") || !strcmp(e->string, "allgather_partitions") ||
                   !strcmp(e->string, "round_robin_gradients") ||
                   !strcmp(e->string, "stage3_gather_16bit_weights_on_model_save") ||
                   !strcmp(e->string, "stage3_gather_fp16_weights_on_model_save")) {
            /* how DeepSpeed moves and keeps things; utrain's way is fixed (docs/distributed.md):
             * gradients in one flat buffer, buckets communicated during backward, reduce-scatter
             * and all-gather for the sharded stages, checkpoints whole in float32 */
            if (!cJSON_IsBool(e) && !is_auto(e)) return refuse(d, path, "expected true or false");
            if (!is_true(e) && !is_auto(e)) tuning(d, path);
        } else if (!strcmp(e->string, "load_from_fp32_weights") || !strcmp(e->string, "ignore_unused_parameters") ||
                   !strcmp(e->string, "elastic_checkpoint")) {
            /* utrain's checkpoints hold the float32 master weights and resume on any world size; its
             * buckets hold every parameter, one no loss reached gets zeros */
            if (!cJSON_IsBool(e)) return refuse(d, path, "expected true or false");
            if (!strcmp(e->string, "load_from_fp32_weights") && !is_true(e))
                return refuse(d, path, "utrain resumes from the float32 master weights; set true or remove it");
        } else if (!strcmp(e->string, "allgather_bucket_size") || !strcmp(e->string, "sub_group_size") ||
                   !strncmp(e->string, "stage3_", 7)) {
            /* the sizes of DeepSpeed's own transfers, optimizer groups and ZeRO-3 prefetching:
             * utrain gathers a layer's parameters as its forward and backward reach them */
            static const char *const sizes[] = {"stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                                                "stage3_max_live_parameters", "stage3_max_reuse_distance",
                                                "allgather_bucket_size", "sub_group_size"};
            bool known = false;
            for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) known |= !strcmp(e->string, sizes[i]);
            if (!known) return refuse(d, path, "not read by utrain; remove it (dist.* are utrain's distributed "
                                               "settings)");
            if (!is_auto(e) && !(cJSON_IsNumber(e) && e->valuedouble >= 0))
                return refuse(d, path, "expected a number of elements or \"auto\"");
            if (!is_auto(e)) tuning(d, path);
        } else {
            return refuse(d, path, "not read by utrain; remove it (dist.* are utrain's distributed settings)");
        }
    }
    return 0;
}

static int optimizer(ds_ctx *d, const cJSON *o) {
    char path[128], why[512];
    if (!cJSON_IsObject(o)) return refuse(d, "optimizer", "expected an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type"), *e;
    bool lion = false;
    cJSON_ArrayForEach(e, o) {
        snprintf(path, sizeof path, "optimizer.%s", e->string);
        if (strcmp(e->string, "type") && strcmp(e->string, "params"))
            return refuse(d, path, "not read by utrain; remove it");
    }
    if (type) {
        if (!cJSON_IsString(type))
            return refuse(d, "optimizer.type", "expected \"Adam\", \"AdamW\", \"Lion\" or \"SGD\"");
        /* DeepSpeed reads the name in any case. Its Adam decouples weight
         * decay by default (adam_w_mode): AdamW. Its Lion is the paper's. */
        const char *t = type->valuestring, *name = NULL;
        if (!strcasecmp(t, "Adam") || !strcasecmp(t, "AdamW")) name = "adamw";
        else if (!strcasecmp(t, "SGD")) name = "sgd";
        else if (!strcasecmp(t, "Lion")) name = "lion";
        else
            return refuse(d, "optimizer.type", "utrain has Adam(W), Lion and SGD; write \"AdamW\", \"Lion\" or \"SGD\"");
        lion = !strcmp(name, "lion");
        if (ut_cfg_assign(d->c, "optim.name", name, why, sizeof why)) return refuse(d, "optimizer.type", why);
    }
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "params");
    if (!p) return 0;
    if (!cJSON_IsObject(p)) return refuse(d, "optimizer.params", "expected an object");
    cJSON_ArrayForEach(e, p) {
        snprintf(path, sizeof path, "optimizer.params.%s", e->string);
        if (lion && strcmp(e->string, "lr") && strcmp(e->string, "betas") && strcmp(e->string, "weight_decay"))
            return refuse(d, path, "Lion takes lr, betas and weight_decay; remove it");
        const char *key = !strcmp(e->string, "lr")             ? "optim.lr"
                          : !strcmp(e->string, "eps")          ? "optim.eps"
                          : !strcmp(e->string, "weight_decay") ? "optim.weight_decay"
                          : !strcmp(e->string, "momentum")     ? "optim.momentum"
                                                               : NULL;
        if (key) {
            if (set(d, path, e, key)) return -1;
        } else if (!strcmp(e->string, "betas")) {
            if (is_auto(e)) continue;
            if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(e, 0)) ||
                !cJSON_IsNumber(cJSON_GetArrayItem(e, 1)))
                return refuse(d, path, "expected [beta1, beta2]");
            if (set(d, path, cJSON_GetArrayItem(e, 0), "optim.beta1") ||
                set(d, path, cJSON_GetArrayItem(e, 1), "optim.beta2"))
                return -1;
        } else if (!strcmp(e->string, "adam_w_mode")) {
            if (is_true(e)) continue;
            return refuse(d, path, "utrain's Adam decouples weight decay (AdamW); set true or remove it");
        } else {
            return refuse(d, path, "not read by utrain; remove it (optim.* are utrain's optimizer settings)");
        }
    }
    return 0;
}

/* scheduler: DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR as
 * utrain's ds_warmup, ds_warmup_decay and ds_warmup_cosine (the same rates,
 * step by step); each parameter sets its optim key, "auto" keeps utrain's,
 * and an absent one takes DeepSpeed's default. */
static int scheduler(ds_ctx *d, const cJSON *o) {
    static const char *const types[][2] = {
        {"WarmupLR", "ds_warmup"}, {"WarmupDecayLR", "ds_warmup_decay"}, {"WarmupCosineLR", "ds_warmup_cosine"}};
    static const struct {
        const char *param, *key;
        int kinds; /* 1 WarmupLR, 2 WarmupDecayLR, 4 WarmupCosineLR */
    } params[] = {
        {"warmup_min_lr", "optim.min_lr", 3},         {"warmup_max_lr", "optim.lr", 3},
        {"warmup_num_steps", "optim.warmup_steps", 7}, {"warmup_type", "optim.warmup_type", 7},
        {"total_num_steps", "optim.schedule_steps", 6}, {"warmup_min_ratio", "optim.warmup_min_ratio", 4},
        {"cos_min_ratio", "optim.min_lr_ratio", 4},
    };
    char path[128], why[512];
    if (!cJSON_IsObject(o)) return refuse(d, "scheduler", "expected an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type"), *e;
    cJSON_ArrayForEach(e, o) if (strcmp(e->string, "type") && strcmp(e->string, "params")) {
        snprintf(path, sizeof path, "scheduler.%s", e->string);
        return refuse(d, path, "not read by utrain; remove it (type and params are)");
    }
    int kind = -1;
    for (int i = 0; i < 3 && cJSON_IsString(type); i++)
        if (!strcmp(type->valuestring, types[i][0])) kind = i;
    if (kind < 0)
        return refuse(d, "scheduler.type", "utrain has DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR "
                                           "(OneCycle and LRRangeTest are not available; optim.schedule has "
                                           "utrain's own, docs/config.md)");
    if (ut_cfg_assign(d->c, "optim.schedule", types[kind][1], why, sizeof why))
        return refuse(d, "scheduler.type", why);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "params");
    if (p && !cJSON_IsObject(p)) return refuse(d, "scheduler.params", "expected an object");
    bool given[sizeof params / sizeof params[0]] = {false};
    cJSON_ArrayForEach(e, p) {
        snprintf(path, sizeof path, "scheduler.params.%s", e->string);
        if (!strcmp(e->string, "last_batch_iteration")) {
            if (num_is(e, -1)) continue;
            return refuse(d, path, "utrain's schedule follows the run's own step (a resumed run continues it); set "
                                   "-1 or remove it");
        }
        size_t i = 0;
        while (i < sizeof params / sizeof params[0] &&
               (strcmp(e->string, params[i].param) || !(params[i].kinds & (1 << kind))))
            i++;
        if (i == sizeof params / sizeof params[0])
            return refuse(d, path, ut_fmt("not a parameter of %s; remove it", types[kind][0]));
        if (!strcmp(e->string, "warmup_type") && !is_auto(e) &&
            !(cJSON_IsString(e) && (!strcmp(e->valuestring, "log") || !strcmp(e->valuestring, "linear"))))
            return refuse(d, path, "expected \"log\" or \"linear\"");
        if (!strcmp(e->string, "warmup_num_steps") && !is_auto(e) && !(cJSON_IsNumber(e) && e->valuedouble >= 1))
            return refuse(d, path, "expected a positive number of steps");
        if (set(d, path, e, params[i].key)) return -1;
        given[i] = true;
    }
    /* DeepSpeed's defaults where a parameter is absent */
    static const char *const defaults[][2] = {{"warmup_min_lr", "0"},   {"warmup_num_steps", "1000"},
                                              {"warmup_type", "log"},   {"cos_min_ratio", "0.0001"}};
    for (size_t j = 0; j < sizeof defaults / sizeof defaults[0]; j++)
        for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
            if (!strcmp(params[i].param, defaults[j][0]) && (params[i].kinds & (1 << kind)) && !given[i] &&
                ut_cfg_assign(d->c, params[i].key, defaults[j][1], why, sizeof why))
                return refuse(d, "scheduler.params", why);
    return 0;
}

/* Top-level keys whose value is what utrain does (or a tuning of DeepSpeed's
 * own): accepted at the values listed ("*": any; tuning: accepted and named
 * in the run's summary when not the first value), refused otherwise. */
static const struct {
    const char *key, *ok[3], *why;
    bool tuning;
} plain[] = {
    {"prescale_gradients", {"false", "true"}, "expected true or false", true},
    {"gradient_predivide_factor", {"1", "*"}, NULL, true},
    {"zero_force_ds_cpu_optimizer", {"false", "true"}, "expected true or false", false}, /* the host AdamW is utrain's */
    {"memory_breakdown", {"false"}, "utrain plan gives the memory a run needs on each rank", false},
    {"sparse_gradients", {"false"}, "utrain's gradients are dense", false},
    {"dump_state", {"false"}, "the run's log gives its configuration", false},
    {"gradient_accumulation_dtype", {"fp32"}, "utrain accumulates gradients in float32", false},
    {"seq_parallel_communication_data_type", {"fp32"}, "utrain's sequence-parallel exchanges are float32", false},
};

static int plain_key(ds_ctx *d, const char *k, const cJSON *e) {
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        if (strcmp(k, plain[i].key)) continue;
        char v[64];
        if (!text_of(e, v, sizeof v)) return refuse(d, k, "expected a number, true/false or a string");
        for (int j = 0; j < 3 && plain[i].ok[j]; j++)
            if (!strcmp(plain[i].ok[j], "*") || !strcmp(v, plain[i].ok[j])) {
                if (plain[i].tuning && j > 0) tuning(d, k);
                return 0;
            }
        return refuse(d, k, ut_fmt("%s; write %s or remove it", plain[i].why, plain[i].ok[0]));
    }
    return 1;
}

/* communication_data_type: the gradients' all-reduce in 16 bits is
 * dist.comm_hook (ddp and zero1) */
static int comm_type(ds_ctx *d, const cJSON *e) {
    char why[512];
    if (is_auto(e)) return 0;
    const char *v = cJSON_IsString(e) ? e->valuestring : "";
    const char *hook = !strcmp(v, "fp32") ? "none" : !strcmp(v, "bf16") ? "bf16" : !strcmp(v, "fp16") ? "fp16" : NULL;
    if (!hook) return refuse(d, "communication_data_type", "expected \"fp32\", \"bf16\" or \"fp16\"");
    if (ut_cfg_assign(d->c, "dist.comm_hook", hook, why, sizeof why)) return refuse(d, "communication_data_type", why);
    return 0;
}

/* monitors: DeepSpeed's tensorboard writes event files in output_path/job_name
 * (train.logging_dir); csv_monitor, wandb and comms_logger only when off */
static int monitor(ds_ctx *d, const char *k, const cJSON *o) {
    char path[128];
    if (!cJSON_IsObject(o)) return refuse(d, k, "expected an object");
    const cJSON *on = cJSON_GetObjectItemCaseSensitive(o, "enabled");
    if (!cJSON_IsTrue(on)) return 0;
    if (strcmp(k, "tensorboard")) {
        snprintf(path, sizeof path, "%s.enabled", k);
        return refuse(d, path, "utrain reports to its own metrics.jsonl and TensorBoard files; set false or remove "
                               "the section");
    }
    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(o, "output_path"),
                *job = cJSON_GetObjectItemCaseSensitive(o, "job_name");
    char buf[UT_CFG_STR_MAX], why[512];
    snprintf(buf, sizeof buf, "%s/%s", cJSON_IsString(dir) && *dir->valuestring ? dir->valuestring : ".",
             cJSON_IsString(job) && *job->valuestring ? job->valuestring : "DeepSpeedJobName");
    if (ut_cfg_assign(d->c, "train.logging_dir", buf, why, sizeof why)) return refuse(d, "tensorboard", why);
    return 0;
}

/* data_types: {grad_accum_dtype}; checkpoint: DeepSpeed's checkpoint options */
static int small_sections(ds_ctx *d, const char *k, const cJSON *o) {
    char path[128];
    if (!cJSON_IsObject(o)) return refuse(d, k, "expected an object");
    const cJSON *e;
    cJSON_ArrayForEach(e, o) {
        snprintf(path, sizeof path, "%s.%s", k, e->string);
        if (!strcmp(k, "data_types") && !strcmp(e->string, "grad_accum_dtype")) {
            if (cJSON_IsNull(e) || (cJSON_IsString(e) && !strcmp(e->valuestring, "fp32"))) continue;
            return refuse(d, path, "utrain accumulates gradients in float32; write \"fp32\" or remove it");
        }
        if (!strcmp(k, "checkpoint") && (!strcmp(e->string, "tag_validation") || !strcmp(e->string, "parallel_write") ||
                                         !strcmp(e->string, "use_node_local_storage"))) {
            tuning(d, path); /* how DeepSpeed names and writes its files; utrain's are its own */
            continue;
        }
        if (!strcmp(k, "checkpoint") && !strcmp(e->string, "load_universal")) {
            if (cJSON_IsFalse(e)) continue;
            return refuse(d, path, "utrain's checkpoints resume on any world size with the same global batch; set "
                                   "false or remove it");
        }
        return refuse(d, path, "not read by utrain; remove it");
    }
    return 0;
}

/* flops_profiler: {enabled, profile_step, module_depth, top_modules,
 * detailed, output_file}: utrain's step profile (train.profile_step and its
 * keys), which lists ops rather than modules: module_depth and top_modules
 * are taken at their defaults (-1, 1) only. */
static int flops_profiler(ds_ctx *d, const cJSON *o) {
    if (!cJSON_IsObject(o)) return refuse(d, "flops_profiler", "expected an object");
    char path[160], why[512];
    const cJSON *e;
    cJSON_ArrayForEach(e, o) {
        const char *k = e->string;
        snprintf(path, sizeof path, "flops_profiler.%s", k);
        int bad = 0;
        if (!strcmp(k, "enabled") || !strcmp(k, "detailed"))
            bad = !cJSON_IsBool(e) && refuse(d, path, "expected true or false");
        else if (!strcmp(k, "profile_step"))
            bad = !(cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble == floor(e->valuedouble) &&
                    e->valuedouble < 1e15) &&
                  refuse(d, path, "expected a step number, 0 or more");
        else if (!strcmp(k, "module_depth"))
            bad = !num_is(e, -1) && refuse(d, path, "utrain's profile lists ops, not modules: write -1 (all) or "
                                                    "remove it");
        else if (!strcmp(k, "top_modules"))
            bad = !num_is(e, 1) && refuse(d, path, "utrain's profile lists every op, not the top modules: write 1 "
                                                   "or remove it");
        else if (!strcmp(k, "output_file"))
            bad = !cJSON_IsNull(e) && !cJSON_IsString(e) && refuse(d, path, "expected a file name or null");
        else bad = refuse(d, path, "not read by utrain; remove it");
        if (bad) return -1;
    }
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "enabled"))) return 0;
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "profile_step"),
                *detailed = cJSON_GetObjectItemCaseSensitive(o, "detailed"),
                *file = cJSON_GetObjectItemCaseSensitive(o, "output_file");
    char buf[32];
    snprintf(buf, sizeof buf, "%.0f", step ? step->valuedouble : 1.0); /* DeepSpeed's default: 1 */
    if (ut_cfg_assign(d->c, "train.profile_step", buf, why, sizeof why))
        return refuse(d, "flops_profiler.profile_step", why);
    if (ut_cfg_assign(d->c, "train.profile_detailed", cJSON_IsFalse(detailed) ? "false" : "true", why, sizeof why))
        return refuse(d, "flops_profiler.detailed", why);
    if (cJSON_IsString(file) && ut_cfg_assign(d->c, "train.profile_file", file->valuestring, why, sizeof why))
        return refuse(d, "flops_profiler.output_file", why);
    return 0;
}

/* activation_checkpointing: how DeepSpeed's checkpointing API keeps the
 * activations a model asks it to checkpoint (whether to checkpoint at all
 * is train.checkpoint_activations, as in FlagAI, whose checkpoint_activations
 * argument decides it). Host copies of them are not available. */
static int checkpointing(ds_ctx *d, const cJSON *o) {
    char path[128];
    if (!cJSON_IsObject(o)) return refuse(d, "activation_checkpointing", "expected an object");
    const cJSON *e;
    cJSON_ArrayForEach(e, o) {
        snprintf(path, sizeof path, "activation_checkpointing.%s", e->string);
        if (!strcmp(e->string, "cpu_checkpointing")) {
            if (cJSON_IsTrue(e))
                return refuse(d, path, "utrain keeps checkpointed activations on the device; set false or remove it");
            continue;
        }
        if (strcmp(e->string, "partition_activations") && strcmp(e->string, "contiguous_memory_optimization") &&
            strcmp(e->string, "number_checkpoints") && strcmp(e->string, "synchronize_checkpoint_boundary") &&
            strcmp(e->string, "profile"))
            return refuse(d, path, "not read by utrain; remove it (train.checkpoint_activations turns "
                                   "checkpointing on)");
        if (!cJSON_IsNull(e) && !cJSON_IsFalse(e)) tuning(d, path);
    }
    return 0;
}

static int apply(ds_ctx *d, const cJSON *root) {
    const cJSON *e;
    if (!cJSON_IsObject(root)) return refuse(d, "(top)", "expected a JSON object");
    cJSON_ArrayForEach(e, root) {
        const char *k = e->string;
        int rc = 0;
        if (!strcmp(k, "train_micro_batch_size_per_gpu")) rc = set(d, k, e, "train.batch_size");
        else if (!strcmp(k, "gradient_accumulation_steps")) rc = set(d, k, e, "train.gradient_accumulation_steps");
        else if (!strcmp(k, "gradient_clipping")) rc = set(d, k, e, "train.grad_clip");
        else if (!strcmp(k, "steps_per_print")) rc = set(d, k, e, "train.log_interval");
        else if (!strcmp(k, "train_batch_size"))
            rc = is_auto(e) ? 0
                            : refuse(d, k, "utrain's global batch is train_micro_batch_size_per_gpu x "
                                           "gradient_accumulation_steps x processes; give those and write "
                                           "\"auto\" here or remove it");
        else if (!strcmp(k, "fp16") || !strcmp(k, "bf16"))
            rc = cJSON_IsObject(e) ? precision(d, e, k) : refuse(d, k, "expected an object");
        else if (!strcmp(k, "zero_optimization")) rc = zero(d, e);
        else if (!strcmp(k, "optimizer")) rc = optimizer(d, e);
        else if (!strcmp(k, "wall_clock_breakdown")) rc = set(d, k, e, "train.wall_clock_breakdown");
        else if ((rc = plain_key(d, k, e)) != 1) {
            /* handled */
        } else if (!strcmp(k, "communication_data_type")) rc = comm_type(d, e);
        else if (!strcmp(k, "tensorboard") || !strcmp(k, "csv_monitor") || !strcmp(k, "wandb") ||
                 !strcmp(k, "comms_logger"))
            rc = monitor(d, k, e);
        else if (!strcmp(k, "data_types") || !strcmp(k, "checkpoint")) rc = small_sections(d, k, e);
        else if (!strcmp(k, "zero_allow_untested_optimizer"))
            rc = cJSON_IsBool(e) ? 0 : refuse(d, k, "expected true or false"); /* utrain's optimizers all shard */
        else if (!strcmp(k, "flops_profiler")) rc = flops_profiler(d, e);
        else if (!strcmp(k, "activation_checkpointing")) rc = checkpointing(d, e);
        else if (!strcmp(k, "scheduler")) rc = scheduler(d, e);
        else if (!strcmp(k, "aio"))
            /* the NVMe offload's asynchronous I/O: no NVMe offload here (offload_* device nvme is refused) */
            rc = cJSON_IsObject(e) ? (tuning(d, k), 0) : refuse(d, k, "expected an object");
        else rc = refuse(d, k, "not read by utrain; remove it");
        if (rc) return -1;
    }
    return 0;
}

void *ut_cfg_json_file(const char *path, const char *what, char *err, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return ut_errorf(err, n, "%s %s: cannot open it", what, path), NULL;
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            if (cap > (16u << 20)) {
                fclose(f);
                ut_free(text);
                return ut_errorf(err, n, "%s %s: larger than 16 MiB", what, path), NULL;
            }
            text = ut_realloc_check(text, cap);
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    fclose(f);
    text[len] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root)
        ut_errorf(err, n, "%s %s: not valid JSON at byte %lld", what, path, (long long)(end ? end - text : 0));
    ut_free(text);
    return root;
}

int ut_cfg_deepspeed(ut_config *c, const char *path, char *err, size_t n) {
    ds_ctx d = {.c = c, .file = path, .err = err, .n = n};
    cJSON *root = ut_cfg_json_file(path, "deepspeed_config", err, n);
    if (!root) return -1;
    int rc = apply(&d, root);
    cJSON_Delete(root);
    return rc;
}
