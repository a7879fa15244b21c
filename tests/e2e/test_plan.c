/* `utrain plan` end to end: the planned total of ddp on one process against
 * the peak resident memory of `utrain train` with the same config (within
 * 15%, with activation checkpointing off and on), the strategy formulas
 * exactly (world size 4, AdamW, Lion, SGD with and without momentum, dist.wrap,
 * dist.reshard_after_forward), the fits column and summary, --device-memory
 * sizes, and command-line errors (exit 2) and config errors (exit 1). */
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "test.h"
#include "utrain/utrain.h"

/* src/backend/cpu/dnnl_matmul.c: whether bf16 products go through oneDNN */
bool ut_bf16_use_dnnl(void);

static char tmp[256], cfg[512];

/* a small GPT-2 whose model state (params, grads, AdamW state: ~200 MB)
 * outweighs its activations, on a token shard of random bytes; smaller under
 * UT_TEST_QUICK (the sanitizer suite) */
enum { V = 256, T = 64, BATCH = 4 };
static int64_t L = 4, C = 512;

static void write_files(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/train.bin", tmp);
    FILE *f = fopen(path, "wb");
    int32_t hdr[256] = {20240520, 1, 20000};
    fwrite(hdr, sizeof hdr, 1, f);
    uint32_t s = 12345;
    for (int i = 0; i < hdr[2]; i++) {
        s = s * 1664525u + 1013904223u;
        uint16_t tok = (uint16_t)(s >> 24);
        fwrite(&tok, 2, 1, f);
    }
    fclose(f);
    snprintf(cfg, sizeof cfg, "%s/plan.yml", tmp);
    f = fopen(cfg, "w");
    fprintf(f,
            "experiment_name: plan\noutput_dir: %s/runs\nseed: 1\nthreads: 1\n"
            "model: {name: gpt2, n_layer: %lld, n_head: 8, n_embd: %lld, vocab_size: %d, block_size: %d}\n"
            "data: {name: tokens, train_path: %s, seq_len: %d}\n"
            "train: {max_steps: 3, batch_size: %d, log_interval: 1, eval_strategy: \"no\",\n"
            "        save_strategy: \"no\", progress: \"off\"}\n"
            "optim: {name: adamw, lr: 1.0e-3}\n",
            tmp, (long long)L, (long long)C, V, T, path, T, BATCH);
    fclose(f);
}

/* The number after "key": in the object "section": {...} (the whole text
 * when section is NULL); -1 if absent, -2 for null. */
static double json_num(const char *s, const char *section, const char *key) {
    char want[96];
    if (!s) return -1;
    if (section) {
        snprintf(want, sizeof want, "\"%s\": {", section);
        if (!(s = strstr(s, want))) return -1;
    }
    snprintf(want, sizeof want, "\"%s\": ", key);
    const char *p = strstr(s, want), *end = section ? strchr(s, '}') : NULL;
    if (!p || (end && p > end)) return -1;
    p += strlen(want);
    if (!strncmp(p, "null", 4)) return -2;
    if (!strncmp(p, "true", 4)) return 1;
    if (!strncmp(p, "false", 5)) return 0;
    return strtod(p, NULL);
}

/* Runs utrain with args; its output (malloc'd) into *out, exit code back. */
static int run(const char *const *args, char **out) {
    char path[512];
    snprintf(path, sizeof path, "%s/out.txt", tmp);
    int rc = tp_run(args, path);
    *out = tp_slurp(path);
    return rc;
}

/* utrain train with the config (and one --set, if given); peak resident
 * memory of the child in bytes, or -1 if it failed. */
static double train_peak_rss(const char *set) {
    char path[512], name[64];
    static int k;
    snprintf(name, sizeof name, "experiment_name=peak%d", k++);
    snprintf(path, sizeof path, "%s/train.out", tmp);
    pid_t pid = tp_spawn((const char *[]){"train", cfg, "--set", name, set ? "--set" : NULL, set, NULL}, path);
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
        char *s = tp_slurp(path);
        fprintf(stderr, "  utrain train failed: %s\n", s ? s : "");
        free(s);
        return -1;
    }
    return (double)ru.ru_maxrss * 1024;
}

static void test_plan_matches_measured_peak(void) {
#if defined(__SANITIZE_ADDRESS__)
    printf("  skipped: resident memory under AddressSanitizer is not the program's\n");
    return;
#endif
    if (test_quick()) {
        printf("  skipped under UT_TEST_QUICK: the small model does not dominate the runtime\n");
        return;
    }
    const char *dev = getenv("UTRAIN_DEVICE");
    if (dev && *dev && strcmp(dev, "cpu")) {
        printf("  skipped on device %s: the plan models the CPU's memory (the sim device has an allocator and a "
               "device arena of its own)\n", dev);
        return;
    }
    char *s;
    int rc = run((const char *[]){"plan", cfg, "--world-size", "1", "--json", NULL}, &s);
    CHECK(rc == 0, "plan exits 0: %s", s);
    double planned = json_num(s, "ddp", "total"), planned_ck = json_num(s, "ddp", "total_checkpoint");
    double act = json_num(s, NULL, "activation_bytes"), act_ck = json_num(s, NULL, "activation_checkpoint_bytes");
    double state = json_num(s, "ddp", "params") + json_num(s, "ddp", "grads") + json_num(s, "ddp", "optimizer");
    free(s);
    CHECK(state > 2 * act, "model state %.0f should dominate activations %.0f", state, act);
    CHECK(act_ck > 0 && act_ck < act, "checkpointing lowers activations: %.0f vs %.0f", act_ck, act);

    double peak = train_peak_rss(NULL);
    printf("  checkpointing off: planned %.1f MiB, measured peak RSS %.1f MiB (%+.1f%%)\n",
           planned / 1048576, peak / 1048576, 100 * (peak - planned) / planned);
    CHECK(peak > 0 && planned > 0 && fabs(peak - planned) <= 0.15 * peak,
          "planned %.0f vs measured %.0f bytes: more than 15%% apart", planned, peak);

    double peak_ck = train_peak_rss("train.checkpoint_activations=true");
    printf("  checkpointing on:  planned %.1f MiB, measured peak RSS %.1f MiB (%+.1f%%)\n",
           planned_ck / 1048576, peak_ck / 1048576, 100 * (peak_ck - planned_ck) / planned_ck);
    CHECK(peak_ck > 0 && fabs(peak_ck - planned_ck) <= 0.15 * peak_ck,
          "with checkpointing: planned %.0f vs measured %.0f bytes: more than 15%% apart", planned_ck, peak_ck);
    CHECK(peak_ck < peak, "checkpointing lowers the peak: %.0f vs %.0f", peak_ck, peak);

    /* bf16: the rounded weight copies and 16-bit activations, against a bf16 run */
    rc = run((const char *[]){"plan", cfg, "--world-size", "1", "--json", "--set", "train.precision=bf16", NULL}, &s);
    CHECK(rc == 0, "plan exits 0: %s", s);
    double planned_bf = json_num(s, "ddp", "total");
    free(s);
    double peak_bf = train_peak_rss("train.precision=bf16");
    printf("  bf16:              planned %.1f MiB, measured peak RSS %.1f MiB (%+.1f%%)\n",
           planned_bf / 1048576, peak_bf / 1048576, 100 * (peak_bf - planned_bf) / planned_bf);
    CHECK(peak_bf > 0 && planned_bf > 0 && fabs(peak_bf - planned_bf) <= 0.15 * peak_bf,
          "bf16: planned %.0f vs measured %.0f bytes: more than 15%% apart", planned_bf, peak_bf);
}

static void test_formulas(void) {
    char *s;
    int rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", "--set", "dist.bucket_mb=5", NULL}, &s);
    CHECK(rc == 0, "plan exits 0: %s", s);
    const int64_t block = 12LL * C * C + 13LL * C; /* ln_1, attn (c_attn, c_proj), ln_2, mlp */
    const int64_t psi = L * block + (int64_t)V * C + (int64_t)T * C + 2 * C;
    const int64_t S = ut_shard_size(psi, 4), buckets = 4 * psi < 10 << 20 ? 4 * psi : 10 << 20;
    /* the three largest units: two blocks and a third block, or wte when there are two */
    const int64_t third = L > 2 ? block : (int64_t)V * C;
    const int64_t gathered = 4 * (2 * block + third);
    CHECK(json_num(s, NULL, "numel") == psi, "numel %.0f, expected %lld", json_num(s, NULL, "numel"), (long long)psi);
    CHECK(json_num(s, NULL, "shard") == S, "shard %.0f vs %lld", json_num(s, NULL, "shard"), (long long)S);
    CHECK(json_num(s, NULL, "optimizer_floats") == 2, "AdamW keeps 2 floats");
    CHECK(json_num(s, NULL, "bucket_bytes") == buckets, "buckets %.0f", json_num(s, NULL, "bucket_bytes"));
    CHECK(json_num(s, NULL, "gathered_bytes") == gathered, "gathered %.0f vs %lld (three units)",
          json_num(s, NULL, "gathered_bytes"), (long long)gathered);
    CHECK(strstr(s, L > 2 ? "\"gathered_units\": \"h.0 + h.1 + h.2\"" : "\"gathered_units\": \"h.0 + h.1 + wte\""),
          "units: %s", s);
    double act = json_num(s, NULL, "activation_bytes"), act_ck = json_num(s, NULL, "activation_checkpoint_bytes");
    double base = json_num(s, NULL, "runtime_bytes") + json_num(s, NULL, "dataset_bytes");
    CHECK(act > 0 && base > 0 && json_num(s, NULL, "batch") == BATCH, "measured figures: %s", s);
    /* compute: the micro-batch's products forward and backward (each block's 12 C^2 per token, the tied
     * head's C V, causal attention's T (T + 1) / 2 pairs 4 C wide per sequence and block), three times the
     * forward; no peak known for the CPU */
    double fwd = (double)BATCH * T * (L * 24.0 * C * C + 2.0 * C * V) + (double)BATCH * L * 2.0 * C * T * (T + 1);
    CHECK(json_num(s, NULL, "micro_batch_flops") == 3 * fwd && json_num(s, NULL, "step_flops") == 3 * fwd &&
              json_num(s, NULL, "peak_flops") == -2 && json_num(s, NULL, "step_seconds_at_peak") == -2,
          "compute: %.17g FLOPs, expected %.17g; step %.17g, peak %g", json_num(s, NULL, "micro_batch_flops"),
          3 * fwd, json_num(s, NULL, "step_flops"), json_num(s, NULL, "peak_flops"));
    struct { const char *name; int64_t params, grads, optim; int acts; } want[] = {
        {"ddp", 4 * psi, 4 * psi, 8 * psi, 1},
        {"zero1", 4 * psi, 4 * psi, 8 * S, 1},
        {"zero2", 4 * psi, 4 * S + buckets, 8 * S, 1},
        {"zero3", 4 * S + gathered, 4 * S + buckets, 8 * S, 1},
        {"dp", 4 * psi * 4, 4 * psi * 4, 8 * psi, 4},
    };
    for (int i = 0; i < 5; i++) {
        const char *n = want[i].name;
        CHECK(json_num(s, n, "params") == want[i].params, "%s params %.0f vs %lld", n, json_num(s, n, "params"),
              (long long)want[i].params);
        CHECK(json_num(s, n, "grads") == want[i].grads, "%s grads %.0f vs %lld", n, json_num(s, n, "grads"),
              (long long)want[i].grads);
        CHECK(json_num(s, n, "optimizer") == want[i].optim, "%s optimizer %.0f vs %lld", n,
              json_num(s, n, "optimizer"), (long long)want[i].optim);
        CHECK(json_num(s, n, "activations") == want[i].acts * act, "%s activations", n);
        CHECK(json_num(s, n, "activations_checkpoint") == want[i].acts * act_ck, "%s activations (ckpt)", n);
        double state = (double)(want[i].params + want[i].grads + want[i].optim) + base;
        CHECK(json_num(s, n, "total") == state + want[i].acts * act, "%s total", n);
        CHECK(json_num(s, n, "total_checkpoint") == state + want[i].acts * act_ck, "%s total (ckpt)", n);
        /* no fits without --device-memory on the CPU; a device's own memory otherwise (sim's 64 GiB) */
        CHECK(json_num(s, NULL, "device_memory") == -2 ? json_num(s, n, "fits") == -2 : json_num(s, n, "fits") == 1,
              "%s: fits %g with device_memory %g", n, json_num(s, n, "fits"), json_num(s, NULL, "device_memory"));
    }
    /* ZeRO-Offload: zero1 and zero2 without the optimizer's state on the
     * device; the host takes it with the master shard and its gradient */
    const char *off = strstr(s, "\"offload\": {");
    for (int i = 1; i <= 2; i++) {
        const char *n = want[i].name;
        CHECK(off && json_num(off, n, "total") == json_num(s, n, "total") - json_num(s, n, "optimizer") &&
                  json_num(off, n, "host") == (double)(want[i].optim + 2 * 4 * S),
              "%s offload: total %.0f host %.0f", n, json_num(off, n, "total"), json_num(off, n, "host"));
    }
    free(s);

    /* SGD: 1 state float with momentum, none without; buckets capped at 4 Psi */
    rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", "--set", "optim.name=sgd", "--set",
                              "optim.momentum=0.9", "--set", "dist.bucket_mb=1000", NULL}, &s);
    CHECK(rc == 0 && json_num(s, NULL, "optimizer_floats") == 1 && json_num(s, "zero3", "optimizer") == 4 * S &&
              json_num(s, "ddp", "optimizer") == 4 * psi && json_num(s, NULL, "bucket_bytes") == 4 * psi,
          "sgd with momentum: %s", s);
    free(s);
    /* Adafactor: its second moment's row and column means, a small part of the parameters */
    rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", "--set", "optim.name=adafactor", NULL}, &s);
    double af = json_num(s, NULL, "optimizer_state");
    CHECK(rc == 0 && json_num(s, NULL, "optimizer_floats") == 0 && af > 0 && af < psi / 4 &&
              json_num(s, "ddp", "optimizer") == 4 * af,
          "adafactor: %s", s);
    free(s);
    /* Lion: one state float (exp_avg) */
    rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", "--set", "optim.name=lion", NULL}, &s);
    CHECK(rc == 0 && json_num(s, NULL, "optimizer_floats") == 1 && json_num(s, "zero3", "optimizer") == 4 * S &&
              json_num(s, "ddp", "optimizer") == 4 * psi,
          "lion: %s", s);
    free(s);
    /* hybrid sharding: the state sharded over groups of 2 of the 4 ranks */
    rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", "--set", "dist.strategy=zero3", "--set",
                              "dist.shard_size=2", NULL}, &s);
    const int64_t S2 = ut_shard_size(psi, 2);
    CHECK(rc == 0 && json_num(s, NULL, "shard_group") == 2 && json_num(s, NULL, "shard") == S2 &&
              json_num(s, "zero1", "optimizer") == 4 * 2 * S2,
          "dist.shard_size 2: %s", s);
    free(s);
    rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--set", "dist.strategy=zero3", "--set",
                              "dist.shard_size=3", NULL}, &s);
    CHECK(rc != 0 && s && strstr(s, "dist.shard_size: 3 does not divide the 4 data-parallel ranks"), "%s", s);
    free(s);
    /* dist.wrap: the three largest units of the policy; all of them without resharding */
    rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", "--set", "dist.wrap=param", NULL}, &s);
    CHECK(rc == 0 && json_num(s, NULL, "gathered_bytes") == 3 * 4 * 4 * C * C &&
              strstr(s, "\"gathered_units\": \"h.0.mlp.c_fc.weight + h.0.mlp.c_proj.weight + "
                        "h.1.mlp.c_fc.weight\"") &&
              json_num(s, "zero3", "params") == 4 * S + 3 * 4 * 4 * C * C,
          "wrap param: %s", s);
    free(s);
    rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", "--set", "dist.reshard_after_forward=false",
                              NULL}, &s);
    CHECK(rc == 0 && json_num(s, NULL, "gathered_bytes") == 4 * psi && json_num(s, "zero3", "params") == 4 * S + 4 * psi,
          "no reshard after forward: %s", s);
    free(s);
    rc = run((const char *[]){"plan", cfg, "--json", "--set", "optim.name=sgd", NULL}, &s);
    CHECK(rc == 0 && json_num(s, NULL, "optimizer_floats") == 0 && json_num(s, "ddp", "optimizer") == 0 &&
              json_num(s, NULL, "world_size") == 1,
          "plain sgd, world size from the config (1): %s", s);
    free(s);
}

/* train.precision: the same fp32 weights, gradients and optimizer state;
 * bf16 and fp16 add a 16-bit rounded copy of every parameter an autocast op
 * reads (all but wpe and the layer norms' weights and biases) and the
 * float32 buffers the copies are widened into, one per source slot: the
 * largest weight's size (wte or an MLP weight) and the largest bias's (the
 * MLP's 4C), kept by each worker; and store activations in 16 bits. */
static void test_precision(void) {
    const int64_t block = 12LL * C * C + 13LL * C;
    const int64_t psi = L * block + (int64_t)V * C + (int64_t)T * C + 2 * C;
    const int64_t rounded = psi - (int64_t)T * C - L * 4 * C - 2 * C;
    const int64_t widest = (int64_t)V * C > 4LL * C * C ? (int64_t)V * C : 4LL * C * C;
    const int64_t S = ut_shard_size(psi, 4), buckets = 4 * psi < 10 << 20 ? 4 * psi : 10 << 20;
    const int64_t gathered = 4 * (2 * block + (L > 2 ? block : (int64_t)V * C));
    const char *prec[] = {"fp32", "bf16", "fp16"};
    double act[3] = {0}, arena[3] = {0};
    for (int k = 0; k < 3; k++) {
        char set[64], *s;
        snprintf(set, sizeof set, "train.precision=%s", prec[k]);
        int rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", "--set", "dist.bucket_mb=5",
                                      "--set", set, NULL}, &s);
        CHECK(rc == 0 && s, "plan %s exits 0: %s", prec[k], s);
        if (!s) continue;
        char want[64];
        snprintf(want, sizeof want, "\"precision\": \"%s\"", prec[k]);
        CHECK(strstr(s, want), "JSON names the precision (%s): %s", want, s);
        const int64_t copies = k ? 2 * rounded + 4 * widest + 4 * (4 * C) : 0;
        CHECK(json_num(s, NULL, "weight_copy_bytes") == copies, "%s weight copies %.0f vs %lld", prec[k],
              json_num(s, NULL, "weight_copy_bytes"), (long long)copies);
        /* the conversion scratch is the neediest op's (one shared buffer, not
         * one per kind of copy): the MLP's linear with its GELU
         * (ut_linear_gelu) in backward: its 16-bit input and that input's
         * gradient, (B T, C) each, in float32, GELU's two blocks of at most
         * 2^18 floats (src/backend/cpu/matmul.c) and the gradient of the
         * pre-activation, (B T, 4C), widened whole */
        const double bt4c = (double)BATCH * T * 4 * C, gelu_block = bt4c < (1 << 18) ? bt4c : (1 << 18);
        const double scratch = k ? 4.0 * (2.0 * BATCH * T * C + 2.0 * gelu_block + bt4c) : 0;
        /* on a CPU with bf16 instructions bf16 products take their oneDNN
         * operands from it too, so a product's needs may grow */
        const double got = json_num(s, NULL, "autocast_scratch_bytes");
        if (k == 1 && ut_bf16_use_dnnl())
            CHECK(got >= scratch && got < 1.5 * scratch, "%s scratch %.0f, want %.0f to 1.5 times that (oneDNN)",
                  prec[k], got, scratch);
        else
            CHECK(got == scratch, "%s scratch %.0f, want %.0f", prec[k], got, scratch);
        act[k] = json_num(s, NULL, "activation_bytes");
        arena[k] = act[k] - json_num(s, NULL, "autocast_scratch_bytes");
        double base = json_num(s, NULL, "runtime_bytes") + json_num(s, NULL, "dataset_bytes");
        struct { const char *name; int64_t params, copies, grads, optim; int acts; } want_rows[] = {
            {"ddp", 4 * psi, copies, 4 * psi, 8 * psi, 1},
            {"zero1", 4 * psi, copies, 4 * psi, 8 * S, 1},
            {"zero2", 4 * psi, copies, 4 * S + buckets, 8 * S, 1},
            {"zero3", 4 * S + gathered, copies, 4 * S + buckets, 8 * S, 1},
            {"dp", 4 * psi * 4, 4 * copies, 4 * psi * 4, 8 * psi, 4},
        };
        for (int i = 0; i < 5; i++) {
            const char *n = want_rows[i].name;
            CHECK(json_num(s, n, "params") == want_rows[i].params && json_num(s, n, "grads") == want_rows[i].grads &&
                      json_num(s, n, "optimizer") == want_rows[i].optim,
                  "%s %s: params %.0f grads %.0f optimizer %.0f", prec[k], n, json_num(s, n, "params"),
                  json_num(s, n, "grads"), json_num(s, n, "optimizer"));
            CHECK(json_num(s, n, "weight_copies") == want_rows[i].copies, "%s %s copies %.0f vs %lld", prec[k], n,
                  json_num(s, n, "weight_copies"), (long long)want_rows[i].copies);
            double state = (double)(want_rows[i].params + want_rows[i].copies + want_rows[i].grads +
                                    want_rows[i].optim) + base;
            CHECK(json_num(s, n, "total") == state + want_rows[i].acts * act[k], "%s %s total", prec[k], n);
        }
        free(s);
    }
    /* 16-bit activations: GPT-2's stored products and layer norms take half
     * (the arena's part; the conversion scratch is a few tensors' worth) */
    CHECK(arena[1] < 0.8 * arena[0] && arena[2] == arena[1], "activation arena fp32 %.0f, bf16 %.0f, fp16 %.0f",
          arena[0], arena[1], arena[2]);
    char *s;
    int rc = run((const char *[]){"plan", cfg, "--world-size", "2", "--set", "train.precision=bf16", NULL}, &s);
    CHECK(rc == 0 && s && strstr(s, "parameter), bf16\n") && strstr(s, "rounded weight copies") &&
              strstr(s, "w. copies"),
          "the table names bf16 and its copies: %s", s);
    free(s);
}

/* dist.tensor_parallel 2 on 4 ranks: each rank holds rank 0's part of the
 * GPT-2 (the vocabulary, heads and MLP features halved, layer norms,
 * positions and the row-parallel biases whole) and the strategies shard it
 * over the 2 data-parallel ranks. */
static void test_tensor_parallel(void) {
    char *s;
    int rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", "--set", "dist.tensor_parallel=2",
                                  NULL}, &s);
    CHECK(rc == 0 && s, "plan with dist.tensor_parallel 2 exits 0: %s", s ? s : "");
    if (!s) return;
    const int64_t block = 12LL * C * C + 13LL * C;
    const int64_t whole = L * block + (int64_t)V * C + (int64_t)T * C + 2 * C;
    /* per block: the two layer norms and the two row-parallel biases whole, the rest halved */
    const int64_t part_block = 4 * C + 2 * C + (12LL * C * C + 7LL * C) / 2;
    const int64_t part = L * part_block + (int64_t)V / 2 * C + (int64_t)T * C + 2 * C;
    CHECK(json_num(s, NULL, "tensor_parallel") == 2 && json_num(s, NULL, "data_parallel") == 2 &&
              json_num(s, NULL, "whole_numel") == whole && json_num(s, NULL, "numel") == part,
          "the part: %.0f of %.0f parameters (want %lld of %lld), tp %.0f, dp %.0f", json_num(s, NULL, "numel"),
          json_num(s, NULL, "whole_numel"), (long long)part, (long long)whole, json_num(s, NULL, "tensor_parallel"),
          json_num(s, NULL, "data_parallel"));
    const int64_t S = ut_shard_size(part, 2);
    CHECK(json_num(s, "ddp", "params") == 4 * part && json_num(s, "zero1", "optimizer") == 8 * S &&
              json_num(s, NULL, "shard") == S,
          "ddp holds the part, zero1 shards its state over 2: params %.0f optimizer %.0f shard %.0f",
          json_num(s, "ddp", "params"), json_num(s, "zero1", "optimizer"), json_num(s, NULL, "shard"));
    free(s);
    rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--set", "dist.tensor_parallel=2", NULL}, &s);
    CHECK(rc == 0 && s && strstr(s, "tensor parallel 2: each rank holds its part"), "the table says so: %s",
          s ? s : "");
    free(s);
    /* a step per rank: the micro-batches of gradient accumulation, a tensor-parallel rank's half of the
     * products; held against train.peak_tflops */
    rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", "--set", "dist.tensor_parallel=2", "--set",
                              "train.gradient_accumulation_steps=3", "--set", "train.peak_tflops=2", NULL}, &s);
    double micro = s ? json_num(s, NULL, "micro_batch_flops") : 0, step = s ? json_num(s, NULL, "step_flops") : 0;
    CHECK(rc == 0 && micro > 0 && step == micro * 3 / 2 && json_num(s, NULL, "peak_flops") == 2e12 &&
              fabs(json_num(s, NULL, "step_seconds_at_peak") - step / 2e12) <= 1e-8 * step / 2e12,
          "step FLOPs %.17g of a micro-batch's %.17g, peak %g: %s", step, micro, s ? json_num(s, NULL, "peak_flops") : 0,
          s ? s : "");
    free(s);
    rc = run((const char *[]){"plan", cfg, "--set", "train.peak_tflops=2", NULL}, &s);
    CHECK(rc == 0 && s && strstr(s, "a step at the peak 2 TFLOP/s (train.peak_tflops)"), "the table's compute line: %s",
          s ? s : "");
    free(s);
}

/* dist.pipeline_parallel 2 on 4 ranks, 4 micro-batches: the first stage
 * (embeddings and half the blocks: more than the last stage's half, ln_f
 * and head copy) is planned, over 2 data-parallel ranks, its activations
 * estimated for 2 micro-batches held (1F1B) or 4 (GPipe); the bubble is
 * (2 - 1) / (4 + 2 - 1). */
static void test_pipeline_parallel(void) {
    const int64_t block = 12LL * C * C + 13LL * C;
    const int64_t first = (int64_t)V * C + (int64_t)T * C + L / 2 * block;
    for (int gpipe = 0; gpipe < 2; gpipe++) {
        char *s;
        int rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", "--set", "dist.pipeline_parallel=2",
                                      "--set", "train.gradient_accumulation_steps=4", "--set",
                                      gpipe ? "dist.pipeline_schedule=gpipe" : "dist.pipeline_schedule=1f1b", NULL},
                     &s);
        CHECK(rc == 0 && s, "plan with 2 stages exits 0: %s", s ? s : "");
        if (!s) continue;
        CHECK(json_num(s, NULL, "pipeline_parallel") == 2 && json_num(s, NULL, "pipeline_stage") == 0 &&
                  json_num(s, NULL, "data_parallel") == 2 && json_num(s, NULL, "numel") == first &&
                  json_num(s, NULL, "in_flight") == (gpipe ? 4 : 2) &&
                  fabs(json_num(s, NULL, "bubble") - 0.2) < 1e-6 && json_num(s, "ddp", "params") == 4 * first,
              "%s: stage %.0f, %.0f parameters (want %lld), %.0f held, bubble %.3f", gpipe ? "gpipe" : "1f1b",
              json_num(s, NULL, "pipeline_stage"), json_num(s, NULL, "numel"), (long long)first,
              json_num(s, NULL, "in_flight"), json_num(s, NULL, "bubble"));
        free(s);
    }
    char *s;
    int rc = run((const char *[]){"plan", cfg, "--world-size", "6", "--set", "dist.pipeline_parallel=4", NULL}, &s);
    CHECK(rc == 1 && s && strstr(s, "world size 6 is not divisible by dist.tensor_parallel 1 x dist.pipeline_parallel 4"),
          "a world the stages do not divide: %s", s ? s : "");
    free(s);
}

/* Sequence-to-sequence data: the planned batch is trimmed as the loader's
 * batches are (the targets to the longest of the batch), whole and in 2
 * pipeline stages (the larger stage, with the embeddings, planned) */
static void test_seq2seq(void) {
    char path[600];
    CHECK(tp_write_pairs(tmp, "train", 16), "pairs");
    snprintf(path, sizeof path, "%s/s2s.yml", tmp);
    FILE *f = fopen(path, "w");
    fprintf(f,
            "experiment_name: s2s\noutput_dir: %s/runs\nseed: 1\nthreads: 1\n"
            "model: {name: bart, pretrained: tests/parity/fixtures/hf_bart_gen_tiny}\n"
            "data: {name: seq2seq_text, train_path: %s/train_inputs.txt, train_target_path: %s/train_targets.txt,\n"
            "       max_source_len: 32, max_target_len: 16}\n"
            "train: {max_steps: 2, batch_size: 8, gradient_accumulation_steps: 2}\n",
            tmp, tmp, tmp);
    fclose(f);
    char *whole, *staged;
    int rc = run((const char *[]){"plan", path, "--world-size", "2", "--json", NULL}, &whole);
    int rc2 = run((const char *[]){"plan", path, "--world-size", "2", "--json", "--set", "dist.pipeline_parallel=2",
                                   NULL},
                  &staged);
    double nw = json_num(whole, NULL, "numel"), ns = json_num(staged, NULL, "numel");
    CHECK(rc == 0 && rc2 == 0 && nw > 0 && ns > 0 && ns < nw && json_num(staged, NULL, "pipeline_parallel") == 2,
          "plan of BART seq2seq: exit %d, %d; %.0f parameters whole, %.0f in the planned stage:\n%s\n%s", rc, rc2, nw,
          ns, whole ? whole : "", staged ? staged : "");
    free(whole);
    free(staged);
}

static void test_fits(void) {
    const char *names[] = {"ddp", "zero1", "zero2", "zero3", "dp"};
    char *s;
    int rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--json", NULL}, &s);
    CHECK(rc == 0, "plan exits 0: %s", s);
    /* a size every strategy but dp fits in (dp holds 4 replicas and 4 micro-batches) */
    double most = 0;
    for (int i = 0; i < 4; i++) most = fmax(most, json_num(s, names[i], "total"));
    long long mib = (long long)(most / 1048576) + 2;
    CHECK(json_num(s, "dp", "total_checkpoint") > mib * 1048576.0, "dp should not fit in %lld MiB: %s", mib, s);
    free(s);
    char size[32], want[128];
    snprintf(size, sizeof size, "%lldMiB", mib);
    snprintf(want, sizeof want, "\nfits in %lld.0 MiB per rank: ddp, zero1, zero2, zero3\n", mib);
    rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--device-memory", size, NULL}, &s);
    CHECK(rc == 0 && s && strstr(s, "fits (ckpt)") && strstr(s, want), "table and summary (%s): %s", want, s);
    free(s);
    rc = run((const char *[]){"plan", cfg, "--world-size", "4", "--device-memory", "0.2GB", "--json", NULL}, &s);
    CHECK(rc == 0 && json_num(s, NULL, "device_memory") == 2e8, "device memory in JSON: %s", s);
    for (int i = 0; i < 5 && s; i++) {
        const char *n = names[i];
        CHECK(json_num(s, n, "fits") == (json_num(s, n, "total") <= 2e8), "%s fits", n);
        CHECK(json_num(s, n, "fits_checkpoint") == (json_num(s, n, "total_checkpoint") <= 2e8), "%s fits (ckpt)", n);
    }
    free(s);
    rc = run((const char *[]){"plan", cfg, "--world-size", "2", "--device-memory", "1MiB", NULL}, &s);
    CHECK(rc == 0 && strstr(s, "fits in 1.0 MiB per rank: none, not even with activation checkpointing"), "%s", s);
    free(s);
    /* on a device with memory of its own, that memory is the default */
    rc = run((const char *[]){"plan", cfg, "--world-size", "2", "--set", "device=sim", NULL}, &s);
    CHECK(rc == 0 && strstr(s, "fits in 64.00 GiB per rank (the memory of device sim): ddp, zero1, zero2, zero3"),
          "%s", s);
    free(s);
}

static void test_sizes(void) {
    struct { const char *s; int64_t want; } ok[] = {
        {"80GiB", 80LL << 30}, {"512MiB", 512LL << 20}, {"1.5GB", 1500000000LL}, {"123456", 123456},
        {"2 tib", 2LL << 40},  {"64kb", 64000},         {"100B", 100},          {".5KiB", 512},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int64_t v = -1;
        CHECK(ut_parse_bytes(ok[i].s, &v) == 0 && v == ok[i].want, "'%s' -> %lld", ok[i].s, (long long)v);
    }
    const char *bad[] = {"", "GiB", "-1GB", "0", "80XB", "1e9", "12 GiB x", "0x10", "inf", "1.2.3MB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v = 0;
        CHECK(ut_parse_bytes(bad[i], &v) == -1, "'%s' should be refused", bad[i]);
    }
}

/* The CNN's convolutions and the algorithm each runs on: conv1 (one input
 * channel) on im2col + sgemm, conv2 on Winograd; UTRAIN_CONV=im2col both on
 * im2col. */
static void test_convolutions(void) {
    char path[512], *s;
    snprintf(path, sizeof path, "%s/cnn.yml", tmp);
    FILE *f = fopen(path, "w");
    if (f) fputs("model: {name: cnn}\ndata: {name: idx_images, dev_size: 200}\ntrain: {batch_size: 8}\n", f), fclose(f);
    CHECK(run((const char *[]){"plan", path, "--world-size", "1", NULL}, &s) == 0, "plan on the CNN: %s", s);
    CHECK(s && strstr(s, "convolutions: 1->32 3x3 out 26x26: im2col + sgemm; 32->64 3x3 out 24x24: Winograd "
                         "F(2x2, 3x3)"), "the layers' algorithms:\n%s", s ? s : "");
    free(s);
    setenv("UTRAIN_CONV", "im2col", 1);
    CHECK(run((const char *[]){"plan", path, "--world-size", "1", "--json", NULL}, &s) == 0, "plan --json: %s", s);
    unsetenv("UTRAIN_CONV");
    CHECK(s && strstr(s, "\"convolutions\": \"1->32 3x3 out 26x26: im2col + sgemm; 32->64 3x3 out 24x24: im2col + "
                         "sgemm\""), "UTRAIN_CONV=im2col:\n%s", s ? s : "");
    free(s);
}

static void test_errors(void) {
    struct { const char *args[8]; int code; const char *msg; } cases[] = {
        {{"plan", cfg, "--world-size", "0", NULL}, 2, "--world-size needs a rank count from 1 to 1048576, got '0'"},
        {{"plan", cfg, "--world-size", "four", NULL}, 2, "got 'four'"},
        {{"plan", cfg, "--world-size", NULL}, 2, "--world-size needs a rank count"},
        {{"plan", cfg, "--device-memory", "80XB", NULL}, 2, "--device-memory: cannot read '80XB' as a size"},
        {{"plan", cfg, "--frobnicate", NULL}, 2, "unexpected argument '--frobnicate'"},
        {{"plan", "--json", NULL}, 2, "a config file is needed"},
        {{"plan", cfg, "--set", "train.batch_sise=3", NULL}, 1, "train.batch_sise"},
        {{"plan", cfg, "--set", "optim.name=lamb", NULL}, 1, "optim.name"},
        {{"plan", cfg, "--world-size", "3", "--set", "dist.tensor_parallel=2", NULL}, 1,
         "world size 3 is not divisible by dist.tensor_parallel 2 x dist.pipeline_parallel 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *s;
        int rc = run(cases[i].args, &s);
        CHECK(rc == cases[i].code && s && strstr(s, cases[i].msg), "case %zu: exit %d (want %d), output: %s", i, rc,
              cases[i].code, s);
        free(s);
    }
    char *s;
    CHECK(run((const char *[]){"plan", "--help", NULL}, &s) == 0 && strstr(s, "--device-memory SIZE"), "help: %s", s);
    free(s);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (test_quick()) L = 2, C = 128;
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-plan")) return 1;
    write_files();
    RUN(test_sizes);
    RUN(test_convolutions);
    RUN(test_errors);
    RUN(test_formulas);
    RUN(test_precision);
    RUN(test_tensor_parallel);
    RUN(test_pipeline_parallel);
    RUN(test_seq2seq);
    RUN(test_fits);
    RUN(test_plan_matches_measured_peak);
    return tp_finish(TEST_SUMMARY(), tmp);
}
