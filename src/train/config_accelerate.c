/* `accelerate launch` passes its settings to the processes it starts in
 * environment variables (ACCELERATE_MIXED_PRECISION, ACCELERATE_USE_FSDP and
 * FSDP_*, ACCELERATE_USE_DEEPSPEED and ACCELERATE_DEEPSPEED_*, ...), which
 * Accelerate's Accelerator reads as its defaults. utrain reads them the same
 * way: as the defaults of the keys they mean, set before the config file is
 * read, so a key the file (or --set) gives wins, as an argument to
 * Accelerator() wins over the launcher's. A setting utrain cannot honour is
 * refused naming the variable and the launch flag that set it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_schema.h"
#include "utrain/base.h"
#include "utrain/config.h"

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static bool env_true(const char *name) {
    const char *v = env(name);
    return v && (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes"));
}

/* key = value, with what set it in the message if the value is refused */
static int put(ut_config *c, const char *key, const char *value, const char *var, char *err, size_t n) {
    char why[512];
    if (ut_cfg_assign(c, key, value, why, sizeof why))
        return ut_errorf(err, n, "%s (from accelerate launch): %s", var, why);
    return 0;
}

static int mixed_precision(ut_config *c, char *err, size_t n, char *said, size_t sn) {
    const char *v = env("ACCELERATE_MIXED_PRECISION");
    if (!v) return 0;
    const char *p = !strcasecmp(v, "no") ? "fp32" : !strcasecmp(v, "bf16") ? "bf16" : !strcasecmp(v, "fp16") ? "fp16" : NULL;
    if (!p)
        return ut_errorf(err, n, "ACCELERATE_MIXED_PRECISION=%s (accelerate launch --mixed_precision %s): utrain "
                                 "trains in fp32, bf16 or fp16; launch with --mixed_precision bf16, fp16 or no",
                         v, v);
    snprintf(said + strlen(said), sn - strlen(said), "%sprecision %s", *said ? ", " : "", p);
    return put(c, "train.precision", p, "ACCELERATE_MIXED_PRECISION", err, n);
}

/* FSDP's sharding strategies, by name or number (FSDP1's enum values). */
static int fsdp(ut_config *c, char *err, size_t n, char *said, size_t sn) {
    const char *s = env("FSDP_SHARDING_STRATEGY");
    if (!s) s = "FULL_SHARD"; /* Accelerate's default */
    /* the hybrid ones: the same within each node, replicated across nodes (dist.shard_size -1) */
    bool hybrid = !strcmp(s, "HYBRID_SHARD") || !strcmp(s, "4") || !strcmp(s, "HYBRID_SHARD_ZERO2") || !strcmp(s, "5");
    const char *st = !strcmp(s, "FULL_SHARD") || !strcmp(s, "1") || !strcmp(s, "HYBRID_SHARD") || !strcmp(s, "4")
                         ? "zero3"
                     : !strcmp(s, "SHARD_GRAD_OP") || !strcmp(s, "2") || !strcmp(s, "HYBRID_SHARD_ZERO2") ||
                             !strcmp(s, "5")
                         ? "zero2"
                     : !strcmp(s, "NO_SHARD") || !strcmp(s, "3") ? "ddp"
                                                                 : NULL;
    if (!st)
        return ut_errorf(err, n, "FSDP_SHARDING_STRATEGY=%s (accelerate launch --fsdp_sharding_strategy): utrain "
                                 "has FULL_SHARD (dist.strategy zero3), SHARD_GRAD_OP (zero2), HYBRID_SHARD and "
                                 "HYBRID_SHARD_ZERO2 (the same within each node, dist.shard_size -1) and NO_SHARD "
                                 "(ddp)",
                         s);
    if (put(c, "dist.strategy", st, "FSDP_SHARDING_STRATEGY", err, n)) return -1;
    if (hybrid && put(c, "dist.shard_size", "-1", "FSDP_SHARDING_STRATEGY", err, n)) return -1;
    snprintf(said + strlen(said), sn - strlen(said), "%sFSDP %s (dist.strategy %s)", *said ? ", " : "", s, st);
    if (env_true("FSDP_OFFLOAD_PARAMS"))
        return ut_errorf(err, n, "FSDP_OFFLOAD_PARAMS=true (accelerate launch --fsdp_offload_params true): utrain "
                                 "keeps the parameters on the device; what it offloads is the optimizer "
                                 "(dist.offload_optimizer: cpu, with zero1 or zero2)");
    const char *w = env("FSDP_AUTO_WRAP_POLICY");
    if (w) {
        const char *wrap = !strcmp(w, "TRANSFORMER_BASED_WRAP") ? "block" : !strcmp(w, "NO_WRAP") ? "model" : NULL;
        if (!wrap)
            return ut_errorf(err, n, "FSDP_AUTO_WRAP_POLICY=%s (accelerate launch --fsdp_auto_wrap_policy): utrain "
                                     "gathers the parameters per transformer block (TRANSFORMER_BASED_WRAP, dist.wrap "
                                     "block) or the whole model at once (NO_WRAP, dist.wrap model)",
                             w);
        if (put(c, "dist.wrap", wrap, "FSDP_AUTO_WRAP_POLICY", err, n)) return -1;
    }
    const char *r = env("FSDP_RESHARD_AFTER_FORWARD");
    if (r && !strcmp(st, "zero3") && put(c, "dist.reshard_after_forward", r, "FSDP_RESHARD_AFTER_FORWARD", err, n))
        return -1;
    if (env_true("FSDP_ACTIVATION_CHECKPOINTING") &&
        put(c, "train.checkpoint_activations", "true", "FSDP_ACTIVATION_CHECKPOINTING", err, n))
        return -1;
    return 0;
}

static int deepspeed(ut_config *c, char *err, size_t n, char *said, size_t sn) {
    const char *file = env("ACCELERATE_DEEPSPEED_CONFIG_FILE");
    if (file) { /* the JSON file says it all, as in deepspeed_config: FILE */
        snprintf(said + strlen(said), sn - strlen(said), "%sDeepSpeed config %s", *said ? ", " : "", file);
        return ut_cfg_deepspeed(c, file, err, n);
    }
    const char *z = env("ACCELERATE_DEEPSPEED_ZERO_STAGE");
    if (z) {
        static const char *const stages[] = {"ddp", "zero1", "zero2", "zero3"};
        if (strlen(z) != 1 || z[0] < '0' || z[0] > '3')
            return ut_errorf(err, n, "ACCELERATE_DEEPSPEED_ZERO_STAGE=%s (accelerate launch --zero_stage): a ZeRO "
                                     "stage is 0, 1, 2 or 3", z);
        const char *st = stages[z[0] - '0'];
        if (put(c, "dist.strategy", st, "ACCELERATE_DEEPSPEED_ZERO_STAGE", err, n)) return -1;
        snprintf(said + strlen(said), sn - strlen(said), "%sZeRO stage %s (dist.strategy %s)", *said ? ", " : "", z,
                 st);
    }
    const char *o = env("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE");
    if (o && strcmp(o, "none")) {
        if (strcmp(o, "cpu"))
            return ut_errorf(err, n, "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=%s (accelerate launch "
                                     "--offload_optimizer_device): utrain offloads the optimizer to host memory "
                                     "(cpu) or not at all (none)", o);
        if (put(c, "dist.offload_optimizer", "cpu", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", err, n)) return -1;
    }
    const char *p = env("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE");
    if (p && strcmp(p, "none"))
        return ut_errorf(err, n, "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE=%s (accelerate launch "
                                 "--offload_param_device): utrain keeps the parameters on the device; launch with "
                                 "--offload_param_device none (the optimizer can go: --offload_optimizer_device cpu)",
                         p);
    const char *g = env("ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
    if (g && put(c, "train.gradient_accumulation_steps", g, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", err, n))
        return -1;
    const char *clip = env("ACCELERATE_GRADIENT_CLIPPING");
    if (clip && strcmp(clip, "none") && put(c, "train.grad_clip", clip, "ACCELERATE_GRADIENT_CLIPPING", err, n))
        return -1;
    return 0;
}

int ut_config_accelerate_env(ut_config *c, char *said, size_t sn, char *err, size_t n) {
    *said = 0;
    if (env_true("ACCELERATE_USE_MEGATRON_LM"))
        return ut_errorf(err, n, "ACCELERATE_USE_MEGATRON_LM=true (accelerate launch --use_megatron_lm): utrain "
                                 "splits models itself: set dist.tensor_parallel and dist.pipeline_parallel in the "
                                 "config (docs/distributed.md)");
    if (env_true("ACCELERATE_USE_FSDP") && env_true("ACCELERATE_USE_DEEPSPEED"))
        return ut_errorf(err, n, "ACCELERATE_USE_FSDP and ACCELERATE_USE_DEEPSPEED are both true: launch with one");
    if (mixed_precision(c, err, n, said, sn)) return -1;
    if (env_true("ACCELERATE_USE_FSDP") && fsdp(c, err, n, said, sn)) return -1;
    if (env_true("ACCELERATE_USE_DEEPSPEED") && deepspeed(c, err, n, said, sn)) return -1;
    if (env_true("ACCELERATE_USE_CPU")) {
        if (put(c, "device", "cpu", "ACCELERATE_USE_CPU", err, n)) return -1;
        snprintf(said + strlen(said), sn - strlen(said), "%sdevice cpu", *said ? ", " : "");
    }
    return 0;
}
