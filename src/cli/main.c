/* utrain command line: train, test, generate, plan, config, tokenize, export, demo, version. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch_check.h"
#include "utrain/utrain.h"

/* `utrain generate` (generate.c): ARGS after the command; an exit code. */
int ut_cli_generate(int argc, char **argv);

static void usage(FILE *f) {
    fprintf(f,
            "usage: utrain <command> [options]\n"
            "\n"
            "commands:\n"
            "  train CONFIG.yml [--set KEY=VALUE]... [--nproc N]\n"
            "          train as the config says (run directory OUTPUT_DIR/EXPERIMENT_NAME);\n"
            "          --nproc N starts N data-parallel processes (mpirun underneath);\n"
            "          under mpirun/srun each process is a rank\n"
            "  test CONFIG.yml|RUN_DIR [--set KEY=VALUE]... [--checkpoint PATH]\n"
            "          evaluate the best checkpoint on dev and test; writes dev_results.json,\n"
            "          test_results.json and *_predictions.tsv into the run directory\n"
            "  generate RUN_DIR|CONFIG.yml|MODEL_DIR --input FILE [--output FILE] [options]\n"
            "          a text for every line of FILE from a sequence-to-sequence run (its best\n"
            "          checkpoint) or a Hugging Face model directory (bart); greedy decoding,\n"
            "          beam search or sampling (utrain generate --help)\n"
            "  CONFIG.yml [--set KEY=VALUE]...\n"
            "          train or test, as the config's `mode` says (also --params=CONFIG.yml,\n"
            "          the pytorch_universal_trainer command line)\n"
            "  plan CONFIG.yml --world-size N [--device-memory SIZE] [--set KEY=VALUE]... [--json]\n"
            "          memory per rank of each distributed strategy (ddp, zero1-3, dp), with\n"
            "          and without activation checkpointing, and which fit in SIZE (80GiB)\n"
            "  config CONFIG.yml [--set KEY=VALUE]...   print the resolved configuration\n"
            "  config --doc                             print every key (docs/config.md)\n"
            "  tokenize --tokenizer byte|DIR INPUT.txt OUTPUT.bin\n"
            "          write a token shard (llm.c .bin layout) for data.name: tokens, with the\n"
            "          byte tokenizer or a pretrained one (GPT-2's BPE: data/pretrained/gpt2-bpe)\n"
            "  tokenize --tokenizer DIR --text TEXT [--pair TEXT]\n"
            "          print the ids, token type ids and tokens of a text (or pair)\n"
            "  export RUN_DIR --format hf OUT_DIR [--checkpoint PATH]\n"
            "          write the run's best checkpoint as a Hugging Face model directory\n"
            "          (bert, gpt2 and bart runs: config.json, model.safetensors, tokenizer files)\n"
            "  demo [--steps N] [--batch-size B] [--seed S]\n"
            "          train the MNIST CNN on synthetic images and print the falling loss\n"
            "  version print the version\n"
            "  help    this text (also: utrain <command> --help)\n"
            "\n"
            "--set takes dotted keys with the same checks as the file, e.g.\n"
            "  utrain train configs/fmnist_cnn.yml --set optim.lr=3e-4 --set train.epochs=2\n"
            "Every key, its type and default: docs/config.md (or `utrain config --doc`).\n"
            "Exit codes: 0 done, 1 error, 2 bad command line, %d stopped by a signal after\n"
            "writing a checkpoint (resume with continue_training: true).\n",
            UT_EXIT_PREEMPTED);
}

static void usage_train(FILE *f) {
    fprintf(f,
            "usage: utrain train CONFIG.yml [--set KEY=VALUE]... [--nproc N [--max-restarts K]]\n"
            "\n"
            "Trains as CONFIG.yml says. Options:\n"
            "  --set KEY=VALUE   override one key (dotted: train.batch_size=32); repeatable\n"
            "  --nproc N         run N data-parallel processes on this machine (mpirun\n"
            "                    underneath; also dist.nproc_per_node); train.batch_size is\n"
            "                    per process. Under mpirun/srun every process is a rank.\n"
            "  --max-restarts K  with --nproc: start a failed job (a rank crashed, was killed\n"
            "                    or timed out) again up to K times, resuming from the newest\n"
            "                    checkpoint; a stop by signal is not retried (default 0)\n"
            "  --help            this text\n"
            "Common keys: experiment_name, output_dir, seed, continue_training, model.name,\n"
            "data.name, train.epochs, train.max_steps, train.batch_size,\n"
            "train.gradient_accumulation_steps, train.eval_strategy, train.save_total_limit,\n"
            "train.best_metric, optim.name, optim.lr, optim.schedule, threads.\n"
            "All keys: docs/config.md or `utrain config --doc`.\n"
            "SIGTERM, SIGUSR1 or Ctrl-C stop at the next step (or evaluation batch) with a\n"
            "checkpoint (exit %d); a second one exits at once without one (128 + signal).\n",
            UT_EXIT_PREEMPTED);
}

static void usage_test(FILE *f) {
    fprintf(f,
            "usage: utrain test CONFIG.yml|RUN_DIR [--set KEY=VALUE]... [--checkpoint PATH] [--nproc N]\n"
            "\n"
            "Loads the best checkpoint of the run (by train.best_metric), or PATH, evaluates\n"
            "the dev and test splits and writes dev_results.json and test_results.json\n"
            "(loss, each metric, the checkpoint and its step) into the run directory, and\n"
            "for classification data dev_predictions.tsv and test_predictions.tsv (index,\n"
            "predicted class, probabilities; a regression's: index, predicted score). A\n"
            "test file without a label column (GLUE's\n"
            "index<TAB>sentence) gets predictions only. A RUN_DIR is read through its\n"
            "config.yml. --nproc N evaluates on N processes.\n");
}

/* ---- config from the command line: FILE [--set K=V]... [--checkpoint P] ---- */
typedef struct {
    ut_config cfg;
    const char *checkpoint;
} cli_run;

static int load_config(cli_run *r, int argc, char **argv, bool allow_ckpt, bool allow_dir) {
    ut_config_init(&r->cfg);
    r->checkpoint = NULL;
    char err[1024], path[1200];
    const char *file = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if ((!strcmp(a, "--set") || !strcmp(a, "--nproc") || !strcmp(a, "--max-restarts")) && has_val)
            i++;
        else if (!strcmp(a, "--checkpoint") && allow_ckpt && has_val) r->checkpoint = argv[++i];
        else if (a[0] == '-' || file) {
            fprintf(stderr, "utrain: unexpected argument '%s'%s\n", a,
                    (!strcmp(a, "--set") || !strcmp(a, "--checkpoint")) ? " (it needs a value)" : "");
            return UT_EXIT_USAGE;
        } else file = a;
    }
    if (!file) {
        fprintf(stderr, "utrain: a config file%s is needed\n", allow_dir ? " or run directory" : "");
        return UT_EXIT_USAGE;
    }
    struct stat sb;
    if (allow_dir && stat(file, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(path, sizeof path, "%s/config.yml", file);
        file = path;
    }
    char said[512];
    if (ut_config_accelerate_env(&r->cfg, said, sizeof said, err, sizeof err)) goto fail;
    const char *rank = getenv("RANK");
    if (*said && (!rank || !strcmp(rank, "0")))
        fprintf(stderr, "utrain: accelerate launch's settings (the config's own keys win): %s\n", said);
    if (ut_config_load(&r->cfg, file, err, sizeof err)) goto fail;
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--set") && ut_config_set(&r->cfg, argv[++i], err, sizeof err)) goto fail;
    if (ut_config_validate(&r->cfg, err, sizeof err)) goto fail;
    return 0;
fail:
    fprintf(stderr, "utrain: %s\n", err);
    return UT_EXIT_ERROR;
}

static bool wants_help(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
    return false;
}

/* --max-restarts K from the command line, 0 if absent, -1 if bad. */
static int take_max_restarts(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--max-restarts")) {
            char *end;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
            if (i + 1 >= argc || *end || v < 0 || v > 1000) {
                fprintf(stderr, "utrain: --max-restarts needs a count (0 to 1000)\n");
                return -1;
            }
            return (int)v;
        }
    return 0;
}

/* --nproc N from the command line (removed from argv), 0 if absent, -1 if bad. */
static int take_nproc(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--nproc")) {
            char *end;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || v < 1 || v > 4096) {
                fprintf(stderr, "utrain: --nproc needs a process count from 1 to 4096, got '%s'\n",
                        i + 1 < argc ? argv[i + 1] : "");
                return -1;
            }
            return (int)v;
        }
    return 0;
}

/* The run on this rank's communicator (the world ut_comm_init made) */
static int run_mode(cli_run *r, const char *force_mode, ut_comm *comm) {
    if (force_mode) snprintf(r->cfg.mode, sizeof r->cfg.mode, "%s", force_mode);
    if (!strcmp(r->cfg.mode, "test")) return ut_trainer_test_on(&r->cfg, comm, r->checkpoint, NULL, NULL, NULL, NULL);
    int rc = ut_trainer_run_on(&r->cfg, comm, NULL, NULL, NULL, NULL);
    /* train.test_at_end: the run ended (0; a stop is 75), then its best checkpoint tested as `utrain test` */
    if (rc == 0 && r->cfg.test_at_end) rc = ut_trainer_test_on(&r->cfg, comm, NULL, NULL, NULL, NULL, NULL);
    return rc;
}

/* Loads the config; starts the ranks if asked to and not yet under a
 * launcher; otherwise sets up this rank's communicator and runs. */
static int run_command(int argc, char **argv, const char *force_mode, bool test_args) {
    int nproc = take_nproc(argc, argv), restarts = take_max_restarts(argc, argv);
    if (nproc < 0 || restarts < 0) return UT_EXIT_USAGE;
    cli_run r;
    int rc = load_config(&r, argc, argv, test_args, test_args);
    if (rc) {
        ut_config_free(&r.cfg);
        return rc;
    }
    if (!strcmp(r.cfg.dist_strategy, "dp")) { /* one process: N worker threads, not N ranks */
        if (nproc) r.cfg.nproc_per_node = nproc;
        nproc = 1;
    }
    if (!nproc) nproc = (int)r.cfg.nproc_per_node;
    char err[4096];
    if (ut_cli_launch_check(&r.cfg, force_mode ? force_mode : r.cfg.mode, argc, argv, err, sizeof err)) {
        fprintf(stderr, "utrain: %s\n", err);
        ut_config_free(&r.cfg);
        return UT_EXIT_ERROR;
    }
    /* train.auto_find_batch_size: the launcher starts the run again at a smaller batch */
    bool auto_find = r.cfg.auto_find_batch_size && strcmp(force_mode ? force_mode : r.cfg.mode, "test");
    if ((nproc > 1 || restarts > 0 || r.cfg.nodes > 1 || auto_find) && !ut_comm_launched()) {
        rc = ut_cli_launch(nproc, restarts, force_mode, argc, argv, &r.cfg);
        ut_config_free(&r.cfg);
        return rc;
    }
    ut_comm *comm = ut_comm_init(NULL, NULL, false, r.cfg.timeout_s, err, sizeof err);
    if (!comm) {
        fprintf(stderr, "utrain: %s\n", err);
        rc = UT_EXIT_ERROR;
    } else if (ut_cli_world_check(&r.cfg, ut_comm_size(comm), err, sizeof err)) {
        if (ut_comm_rank(comm) == 0) fprintf(stderr, "utrain: %s\n", err);
        rc = UT_EXIT_ERROR;   /* every rank sees the same world: all stop here */
        ut_comm_finalize(comm);
    } else {
        rc = run_mode(&r, force_mode, comm);
        /* an error on one rank would leave the others waiting in a collective
         * until dist.timeout_s: end them all now (over TCP this rank's exit
         * does it: its connections close, and the ranks waiting on them stop) */
        if (rc == UT_EXIT_ERROR && ut_comm_size(comm) > 1 && strcmp(ut_comm_backend(comm), "tcp"))
            ut_abort(__FILE__, __LINE__, "rank %d stopped with an error (above); ending every rank",
                     ut_comm_rank(comm));
        /* mpirun ends the whole job as soon as one rank exits non-zero (75
         * after a stop): every rank's output is out before the ranks part */
        fflush(NULL);
        ut_comm_finalize(comm);
    }
    ut_config_free(&r.cfg);
    return rc;
}

static int cmd_train(int argc, char **argv, const char *force_mode) {
    if (wants_help(argc, argv)) {
        usage_train(stdout);
        return 0;
    }
    return run_command(argc, argv, force_mode, false);
}

static int cmd_test(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        usage_test(stdout);
        return 0;
    }
    return run_command(argc, argv, "test", true);
}

static void usage_plan(FILE *f) {
    fprintf(f,
            "usage: utrain plan CONFIG.yml [--world-size N] [--device-memory SIZE] [--set KEY=VALUE]...\n"
            "                  [--json]\n"
            "\n"
            "Memory per rank of every distributed strategy for the config's model:\n"
            "parameters, gradients, optimizer state, activations with and without activation\n"
            "checkpointing (measured on one training micro-batch) and the process's runtime\n"
            "base; which strategies fit. Options:\n"
            "  --world-size N        ranks (default: dist.nproc_per_node x dist.nodes)\n"
            "  --device-memory SIZE  memory per rank, e.g. 80GiB, 512MiB, 1.5GB or bytes\n"
            "  --set KEY=VALUE       override one key, as for train; repeatable\n"
            "  --json                the figures (bytes) as one JSON object\n"
            "See docs/plan.md.\n");
}

static int cmd_plan(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        usage_plan(stdout);
        return 0;
    }
    long world = 0;
    int64_t device_memory = 0;
    bool json = false;
    char **rest = ut_calloc_check((size_t)argc + 1, sizeof(char *));
    int k = 0, rc = 0;
    for (int i = 0; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--world-size") || !strcmp(a, "--nproc")) {
            world = v ? strtol(v, &end, 10) : 0;
            if (!v || !*v || *end || world < 1 || world > 1 << 20) {
                fprintf(stderr, "utrain plan: %s needs a rank count from 1 to 1048576, got '%s'\n", a, v ? v : "");
                rc = UT_EXIT_USAGE;
            }
            i++;
        } else if (!strcmp(a, "--device-memory")) {
            if (!v || ut_parse_bytes(v, &device_memory)) {
                fprintf(stderr, "utrain plan: --device-memory: cannot read '%s' as a size (e.g. 80GiB, "
                                "512MiB, 1.5GB or a byte count)\n", v ? v : "");
                rc = UT_EXIT_USAGE;
            }
            i++;
        } else rest[k++] = argv[i];
    }
    cli_run r;
    if (!rc) rc = load_config(&r, k, rest, false, false);
    else ut_config_init(&r.cfg);
    if (!rc) {
        if (!world) world = (long)(r.cfg.nproc_per_node * r.cfg.nodes);
        char err[1024];
        ut_plan *p = ut_malloc_check(sizeof *p);
        if (ut_plan_compute(&r.cfg, (int)world, p, err, sizeof err)) {
            fprintf(stderr, "utrain plan: %s\n", err);
            rc = UT_EXIT_ERROR;
        } else ut_plan_print(p, device_memory, json, stdout);
        ut_free(p);
    }
    ut_free(rest);
    ut_config_free(&r.cfg);
    return rc;
}

static int cmd_config(int argc, char **argv) {
    if (argc == 1 && !strcmp(argv[0], "--doc")) {
        ut_config_doc_markdown(stdout);
        return 0;
    }
    cli_run r;
    int rc = load_config(&r, argc, argv, false, true);
    if (!rc) ut_config_write(&r.cfg, stdout);
    ut_config_free(&r.cfg);
    return rc;
}

/* --text TEXT [--pair TEXT]: the ids, type ids and tokens of one text,
 * special tokens included, one line each. */
static int print_encoding(const char *path, const char *text, const char *pair) {
    char err[1024];
    ut_tokenizer *t = ut_tokenizer_load(path, err, sizeof err);
    ut_tok_encoding e = {0};
    if (!t || ut_tokenizer_encode(t, text, pair, NULL, &e, err, sizeof err)) {
        fprintf(stderr, "utrain: %s\n", err);
        ut_tokenizer_free(t);
        return UT_EXIT_ERROR;
    }
    printf("ids:");
    for (int64_t i = 0; i < e.len; i++) printf(" %d", e.ids[i]);
    printf("\ntype_ids:");
    for (int64_t i = 0; i < e.len; i++) printf(" %d", e.type_ids[i]);
    printf("\ntokens:");
    for (int64_t i = 0; i < e.len; i++) printf(" %s", ut_tokenizer_token(t, e.ids[i]));
    printf("\n");
    ut_tok_encoding_free(&e);
    ut_tokenizer_free(t);
    return 0;
}

static const char *const tokenize_usage =
    "usage: utrain tokenize --tokenizer byte|DIR INPUT.txt OUTPUT.bin\n"
    "       utrain tokenize --tokenizer DIR --text TEXT [--pair TEXT]\n";

static int cmd_tokenize(int argc, char **argv) {
    const char *tok = "byte", *files[2] = {NULL, NULL}, *text = NULL, *pair = NULL;
    int nf = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok = argv[++i];
        else if (!strcmp(argv[i], "--text") && i + 1 < argc) text = argv[++i];
        else if (!strcmp(argv[i], "--pair") && i + 1 < argc) pair = argv[++i];
        else if (argv[i][0] != '-' && nf < 2) files[nf++] = argv[i];
        else {
            fputs(tokenize_usage, stderr);
            return UT_EXIT_USAGE;
        }
    }
    if (text && !nf && strcmp(tok, "byte")) return print_encoding(tok, text, pair);
    if (nf != 2 || text || pair) {
        fputs(tokenize_usage, stderr);
        return UT_EXIT_USAGE;
    }
    char err[1024];
    if (ut_tokenize_file(tok, files[0], files[1], err, sizeof err)) {
        fprintf(stderr, "utrain: %s\n", err);
        return UT_EXIT_ERROR;
    }
    return 0;
}

/* Synthetic classification data: class k is template k plus N(0, 0.5) noise. */
typedef struct {
    float *templates; /* (10, 28*28) */
    ut_rng rng;
} synth;

static void synth_batch(synth *s, float *x, int32_t *y, int B) {
    for (int b = 0; b < B; b++) {
        int k = (int)(ut_rng_u64(&s->rng) % 10);
        y[b] = k;
        for (int i = 0; i < 784; i++) x[b * 784 + i] = s->templates[k * 784 + i] + 0.5f * ut_rng_normal(&s->rng);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A positive integer up to max (the demo's sizes are bounded so that no
 * value typed here can ask for more memory than a laptop has). */
static int parse_int(const char *flag, const char *v, long max, long *out) {
    char *end;
    errno = 0;
    *out = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || *out <= 0 || errno) {
        fprintf(stderr, "utrain demo: %s needs a positive integer, got '%s'\n", flag, v ? v : "");
        return -1;
    }
    if (*out > max) {
        fprintf(stderr, "utrain demo: %s is at most %ld, got %ld (for more, train a config: utrain train --help)\n",
                flag, max, *out);
        return -1;
    }
    return 0;
}

static int demo(int argc, char **argv) {
    long steps = 60, B = 32, seed = 1;
    for (int i = 0; i < argc; i += 2) {   /* flag, value */
        bool is_batch = !strcmp(argv[i], "--batch-size");
        long *dst = !strcmp(argv[i], "--steps") ? &steps : is_batch ? &B : !strcmp(argv[i], "--seed") ? &seed : NULL;
        if (!dst) {
            fprintf(stderr, "utrain demo: unknown option '%s'\n", argv[i]);
            return 2;
        }
        /* a batch of 4096 28x28 images needs about 1 GiB of activations */
        if (parse_int(argv[i], i + 1 < argc ? argv[i + 1] : NULL, is_batch ? 4096 : LONG_MAX, dst)) return 2;
    }
    char err[512];
    ut_model *m = ut_model_create("cnn", NULL, (uint64_t)seed, err, sizeof err);
    if (!m) {
        fprintf(stderr, "utrain demo: %s\n", err);
        return 1;
    }
    ut_optim_config oc = ut_optim_defaults(UT_OPTIM_ADAMW);
    oc.lr = 1e-3f;
    ut_optim *opt = ut_optim_new(&oc, m->params.flat, m->params.flat_grad, m->params.segs,
                                 m->params.n, 0, m->params.numel);
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = (uint64_t)seed});
    synth s;
    ut_rng_seed(&s.rng, (uint64_t)seed + 1);
    s.templates = ut_malloc_check(10 * 784 * sizeof(float));
    for (int i = 0; i < 10 * 784; i++) s.templates[i] = ut_rng_normal(&s.rng);
    float *x = ut_malloc_check((size_t)B * 784 * sizeof(float));
    int32_t *y = ut_malloc_check((size_t)B * sizeof(int32_t));

    printf("utrain demo: cnn (%lld parameters) on synthetic 28x28 images, batch %ld, %ld steps, AdamW lr %g\n",
           (long long)m->params.numel, B, steps, (double)oc.lr);
    double t0 = now(), first = 0, last = 0;
    int rc = 0;
    for (long step = 0; step < steps; step++) {
        synth_batch(&s, x, y, (int)B);
        ut_tensor *xt = ut_tensor_from(ctx, UT_F32, 4, (int64_t[]){B, 1, 28, 28}, x);
        ut_tensor *yt = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){B}, y);
        ut_tensor *loss = ut_model_loss(m, ctx, ut_model_forward(m, ctx, xt), yt);
        if (!loss || ut_backward(ctx, loss)) {
            fprintf(stderr, "utrain demo: %s\n", ut_ctx_error(ctx));
            rc = 1;
            break;
        }
        float lv;
        if (ut_tensor_get(loss, &lv, sizeof lv)) {
            fprintf(stderr, "utrain demo: reading the loss: %s\n", ut_ctx_error(ctx));
            rc = 1;
            break;
        }
        last = lv;
        if (step == 0) first = last;
        ut_optim_step_zero(opt, oc.lr); /* update, and zero the grads in the same pass */
        ut_ctx_reset(ctx);
        if (step % 10 == 0 || step == steps - 1)
            printf("step %4ld  loss %.4f  (%.1f ms/step)\n", step, last, 1e3 * (now() - t0) / (step + 1));
    }
    if (!rc) printf("loss %.4f -> %.4f\n", first, last);
    ut_free(x);
    ut_free(y);
    ut_free(s.templates);
    ut_ctx_free(ctx);
    ut_optim_free(opt);
    ut_model_free(m);
    return rc;
}

/* ---- export RUN_DIR --format hf OUT_DIR [--checkpoint PATH] ---- */
static void usage_export(FILE *f) {
    fprintf(f,
            "usage: utrain export RUN_DIR --format hf OUT_DIR [--checkpoint PATH]\n"
            "\n"
            "Writes the run's best checkpoint (by train.best_metric; else the newest), or\n"
            "PATH, as a Hugging Face model directory that transformers' from_pretrained\n"
            "loads: config.json, model.safetensors (transformers' names and layouts) and\n"
            "the tokenizer files of model.pretrained. For bert, gpt2 and bart runs; the run is\n"
            "read through RUN_DIR/config.yml. See docs/models.md.\n");
}

/* The run's model: its best checkpoint (the one the newest checkpoint names
 * as best, if it is kept, else the newest), or with train.load_best_at_end
 * false its newest. Only the newest's train.best_step is read. */
static int run_checkpoint_path(const ut_config *c, const char *run_dir, char *path, size_t pn, char *err, size_t n) {
    char dir[1200];
    int64_t steps[256];
    snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    int k = ut_ckpt_list(dir, steps, 256);
    if (k <= 0) return snprintf(err, n, "%s: no checkpoints (train first, or name one with --checkpoint)", dir), -1;
    ut_ckpt_path(path, pn, dir, steps[0]);
    if (!c->load_best_at_end) return 0;
    ut_st_file *f = ut_st_open(path, err, n);
    if (!f) return -1;
    const char *best = ut_st_meta(f, "train.best_step");
    long long b = best ? atoll(best) : -1;
    ut_st_close(f);
    for (int i = 0; i < k; i++)
        if (steps[i] == b) ut_ckpt_path(path, pn, dir, steps[i]);
    return 0;
}

/* RUN/labels.txt, the names of a run's labels (one a line) that training
 * wrote where the labels are names: into *names (count of them; NULL and 0
 * without the file). -1 naming the line of an empty name. */
static int read_label_names(const char *run, char ***names, int64_t *count, char *err, size_t n) {
    char path[1400];
    snprintf(path, sizeof path, "%s/labels.txt", run);
    *names = NULL;
    *count = 0;
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : ut_errorf(err, n, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len || strlen(line) != (size_t)len) {
            rc = ut_errorf(err, n, "%s:%lld: %s", path, (long long)*count + 1,
                           len ? "a NUL byte in a label's name" : "an empty label name");
            break;
        }
        *names = ut_realloc_check(*names, (size_t)(*count + 1) * sizeof **names);
        (*names)[*count] = ut_malloc_check((size_t)len + 1);
        memcpy((*names)[(*count)++], line, (size_t)len + 1);
    }
    free(line);
    fclose(f);
    return rc;
}

static int cmd_export(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        usage_export(stdout);
        return 0;
    }
    const char *run = NULL, *format = NULL, *out = NULL, *ckpt = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--format") && i + 1 < argc) format = argv[++i];
        else if (!strcmp(argv[i], "--checkpoint") && i + 1 < argc) ckpt = argv[++i];
        else if (argv[i][0] != '-' && !run) run = argv[i];
        else if (argv[i][0] != '-' && !out) out = argv[i];
        else {
            fprintf(stderr, "utrain: export: unexpected argument '%s'\n", argv[i]);
            return UT_EXIT_USAGE;
        }
    }
    if (!run || !out || !format || strcmp(format, "hf")) {
        fprintf(stderr, "utrain: export needs RUN_DIR, --format hf and OUT_DIR%s\n",
                format && strcmp(format, "hf") ? " (hf is the only format)" : "");
        return UT_EXIT_USAGE;
    }
    char err[4096], path[1400];
    ut_config cfg;
    ut_config_init(&cfg);
    snprintf(path, sizeof path, "%s/config.yml", run);
    int rc = ut_config_load(&cfg, path, err, sizeof err);
    if (!rc && !ckpt) rc = run_checkpoint_path(&cfg, run, path, sizeof path, err, sizeof err);
    char **names = NULL;
    int64_t nnames = 0;
    if (!rc) rc = read_label_names(run, &names, &nnames, err, sizeof err);
    /* a task the train file's labels decided (lists: multi-label) goes into config.json as the run took it */
    int task = rc ? -1 : ut_run_problem(&cfg, err, sizeof err);
    if (!rc && task < 0) rc = -1;
    if (!rc && task == UT_PROBLEM_MULTI_LABEL && !ut_kv_get(cfg.model_opts, "problem_type"))
        ut_kv_set(cfg.model_opts, "problem_type", "multi_label_classification");
    if (!rc)
        rc = ut_hf_export(cfg.model_name, cfg.model_opts, (const char *const *)names, nnames, ckpt ? ckpt : path, out,
                          err, sizeof err);
    for (int64_t k = 0; k < nnames; k++) ut_free(names[k]);
    ut_free(names);
    /* a run that read its text with data.tokenizer (no model.pretrained): that tokenizer's files too */
    struct stat sb;
    if (!rc && !ut_kv_get(cfg.model_opts, "pretrained") && strcmp(cfg.tokenizer, "word") &&
        strcmp(cfg.tokenizer, "byte") && !stat(cfg.tokenizer, &sb) && S_ISDIR(sb.st_mode))
        rc = ut_hf_copy_tokenizer(cfg.tokenizer, out, err, sizeof err);
    if (rc) fprintf(stderr, "utrain: %s\n", err);
    else printf("exported %s to %s\n", ckpt ? ckpt : path, out);
    ut_config_free(&cfg);
    return rc ? UT_EXIT_ERROR : 0;
}

int main(int argc, char **argv) {
    /* A rank of the --nproc launcher may get its stop (SIGUSR1) before the
     * trainer catches it, or a copy of it after the trainer is done (the
     * launcher sends it by two routes): held pending until the trainer
     * unblocks it, and after that, instead of ending the process. Threads
     * made from here on (MPI's, OpenMP's) inherit the mask. */
    if (getenv("UTRAIN_SUPERVISOR")) {
        sigset_t usr1;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        sigprocmask(SIG_BLOCK, &usr1, NULL);
    }
    ut_blas_select_kernels(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("utrain %s\n", UT_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "demo")) return demo(argc - 2, argv + 2);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2, "train");
    if (!strcmp(cmd, "test")) return cmd_test(argc - 2, argv + 2);
    if (!strcmp(cmd, "generate")) return ut_cli_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "config")) return cmd_config(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "export")) return cmd_export(argc - 2, argv + 2);
    /* the seed's command line, `python main.py --params=parameters.yml`: the
     * file's mode (train or test), as `utrain FILE` */
    if (!strncmp(cmd, "--params=", 9) && cmd[9]) {
        argv[1] = argv[1] + 9;
        return cmd_train(argc - 1, argv + 1, NULL);
    }
    if (!strcmp(cmd, "--params") && argc > 2) return cmd_train(argc - 2, argv + 2, NULL);
    size_t len = strlen(cmd);
    if (len > 4 && (!strcmp(cmd + len - 4, ".yml") || (len > 5 && !strcmp(cmd + len - 5, ".yaml"))))
        return cmd_train(argc - 1, argv + 1, NULL);
    fprintf(stderr, "utrain: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
