/* ut_config_validate: every key's own range and enum (the schema), then the
 * checks that involve several keys, so a run never starts half-configured. */
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"

#include "config_schema.h"
#include "run_internal.h"

#define FAIL(...) return snprintf(err, n, __VA_ARGS__), -1

int ut_cfg_check_device(const char *key, const char *d, char *err, size_t n) {
    bool cuda = !strcmp(d, "cuda") ||
                (!strncmp(d, "cuda:", 5) && d[5] && strspn(d + 5, "0123456789") == strlen(d + 5) &&
                 strlen(d + 5) <= 4);
    if (cuda && !ut_backend_get(UT_CUDA))
        FAIL("%s: '%s': this build of utrain has no CUDA backend (nvcc was not found when it was built, or "
             "it was built with make CUDA=0; docs/gpu.md); write %s: cpu", key, d, key);
    if (!cuda && strcmp(d, "cpu") && strcmp(d, "sim")) FAIL("%s: '%s' is not one of cpu, cuda, cuda:N, sim", key, d);
    return 0;
}

int ut_config_device_index(const ut_config *c) { return !strncmp(c->device, "cuda:", 5) ? atoi(c->device + 5) : 0; }

/* The rank's node-local number, as the launcher gives it (mpirun sets
 * OMPI_COMM_WORLD_LOCAL_RANK; torchrun-style launchers LOCAL_RANK). */
static int local_rank(void) {
    const char *v = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!v) v = getenv("LOCAL_RANK");
    int r = v ? atoi(v) : 0;
    return r > 0 ? r : 0;
}

int ut_config_use_device(const ut_config *c, char *err, size_t n) {
    ut_device dev = ut_config_device(c);
    const char *key = c->device_from_env ? "UTRAIN_DEVICE" : "device";
    char why[256];
    const ut_backend *be = ut_backend_get(dev);
    if (!be) return ut_backend_check(dev, err, n);
    int usable = be->available ? be->available(why, sizeof why) : 0;
    if (usable == -2) FAIL("%s: %s: %s", key, c->device, why); /* a setting to correct, not a missing device */
    if (usable) FAIL("%s: %s: %s; write %s: cpu", key, c->device, why, key);
    if (!be->select) return 0;
    int first = ut_config_device_index(c), count = be->count ? be->count() : 1;
    if (first >= count) {
        be->select(first, why, sizeof why); /* says which numbers there are */
        FAIL("%s: %s: %s", key, c->device, why);
    }
    int index = (first + local_rank()) % count;
    if (be->select(index, why, sizeof why)) FAIL("%s: %s: %s", key, c->device, why);
    /* only ever turned on here: UT_CUDA_TF32=1 (the benchmarks' switch) turns it on too */
    if (c->tf32 && be->set_tf32) be->set_tf32(true);
    return 0;
}

ut_device ut_config_device(const ut_config *c) {
    return !strncmp(c->device, "cuda", 4) ? UT_CUDA : !strcmp(c->device, "sim") ? UT_SIM : UT_CPU;
}

static int check_run(const ut_config *c, char *err, size_t n) {
    if (!*c->experiment_name || strchr(c->experiment_name, '/'))
        FAIL("experiment_name: '%s' must be a non-empty name without '/'", c->experiment_name);
    if (!strcmp(c->experiment_name, "."))
        FAIL("experiment_name: '.' would put the run in output_dir itself; give the run a name");
    if (!strcmp(c->experiment_name, ".."))
        FAIL("experiment_name: '..' would put the run in output_dir's parent; give the run a name");
    if (!*c->output_dir) FAIL("output_dir: must not be empty");
    if (ut_cfg_check_device(c->device_from_env ? "UTRAIN_DEVICE" : "device", c->device, err, n)) return -1;
    if (!*c->model_name) FAIL("model.name: must not be empty");
    if (!strcmp(c->offload_optimizer, "cpu") && strcmp(c->dist_strategy, "zero1") && strcmp(c->dist_strategy, "zero2"))
        FAIL("dist.offload_optimizer: cpu (ZeRO-Offload) runs with dist.strategy zero1 or zero2, not %s; "
             "set dist.strategy: zero2 (one process too) or dist.offload_optimizer: none", c->dist_strategy);
    if (c->hf_optim_args[0] && !c->hf_optim_args_done)
        FAIL("optim_args: '%s': transformers reads them for optim: sgd (momentum, dampening, weight_decay, nesterov) "
             "and for none of utrain's other optimizers; give optim: sgd before it, or set the optim.* keys instead",
             c->hf_optim_args);
    if (c->adafactor_warmup_init && !c->adafactor_relative_step)
        FAIL("optim.adafactor_warmup_init: true warms up Adafactor's relative step; set "
             "optim.adafactor_relative_step: true too, or remove it (transformers refuses it the same way)");
    if (c->adafactor_relative_step && strcmp(c->optim_name, "adafactor"))
        FAIL("optim.adafactor_relative_step: true is Adafactor's; set optim.name: adafactor or remove it");
    if (c->adafactor_relative_step && (strcmp(c->schedule, "constant") || c->warmup_steps > 0 || c->warmup_ratio > 0))
        FAIL("optim.adafactor_relative_step: true is its own schedule (min(1e-2, 1/sqrt(step)), warmup_init's "
             "warmup), and optim.schedule %s%s would not be used; set optim.schedule: constant without warmup, or "
             "optim.adafactor_relative_step: false", c->schedule,
             c->warmup_steps > 0 || c->warmup_ratio > 0 ? " with warmup" : "");
    if (!strcmp(c->optim_name, "adafactor")) {
        if (!strncmp(c->dist_strategy, "zero", 4))
            FAIL("optim.name: adafactor keeps each matrix's row and column statistics whole, and dist.strategy %s "
                 "shards the flat optimizer state across ranks, cutting them; set dist.strategy: ddp (Adafactor's "
                 "state is already a small part of AdamW's) or optim.name: adamw or lion", c->dist_strategy);
        if (c->tensor_parallel > 1)
            FAIL("optim.name: adafactor keeps each matrix's row and column statistics whole, and "
                 "dist.tensor_parallel %lld splits the matrices between ranks; remove one of them (adamw and lion "
                 "run split)", (long long)c->tensor_parallel);
    }
    if (c->shard_size && strncmp(c->dist_strategy, "zero", 4))
        FAIL("dist.shard_size: %d shards the model state over groups of ranks (hybrid sharding), which %s does "
             "not shard; set dist.strategy: zero3 (FSDP's HYBRID_SHARD), zero2 or zero1, or remove the key",
             c->shard_size, c->dist_strategy);
    if (strcmp(c->comm_hook, "none") && strcmp(c->dist_strategy, "ddp") && strcmp(c->dist_strategy, "zero1"))
        FAIL("dist.comm_hook: %s compresses ddp's and zero1's gradient all-reduce, not %s's; set dist.strategy: ddp "
             "or zero1, or dist.comm_hook: none", c->comm_hook, c->dist_strategy);
    if (c->label_smoothing > 0 && c->tensor_parallel > 1)
        FAIL("train.label_smoothing: %g with dist.tensor_parallel %lld: the cross-entropy over a vocabulary split "
             "between ranks has no label smoothing; set one of them to its default (0, 1)", c->label_smoothing,
             (long long)c->tensor_parallel);
    if (c->neftune_alpha > 0 && strcmp(c->model_name, "gpt2") && strcmp(c->model_name, "bert") &&
        strcmp(c->model_name, "roberta") && strcmp(c->model_name, "bart") && strcmp(c->model_name, "t5"))
        FAIL("train.neftune_alpha: %g puts noise on token embeddings; model %s has none (gpt2, bert, roberta, bart "
             "and t5 do): remove the key", c->neftune_alpha, c->model_name);
    if (c->tf32 && ut_config_device(c) != UT_CUDA)
        FAIL("train.tf32: TF32 is a mode of NVIDIA GPUs' tensor cores (device: cuda); on device %s the float32 "
             "products are exact: remove tf32 or write device: cuda", c->device);
    if (!strcmp(c->device_comm, "direct") && !strcmp(c->device, "cpu"))
        FAIL("dist.device_comm: direct runs collectives on a device's memory (device: cuda or sim); on the CPU "
             "the ranks exchange host memory in place: remove it or write dist.device_comm: auto");
    if (c->tensor_parallel > 1 && !strcmp(c->dist_strategy, "dp"))
        FAIL("dist.tensor_parallel: %lld splits the model over processes; dist.strategy dp (threads of one "
             "process) cannot hold the parts: set dist.strategy: ddp or zero1-zero3 and start the processes with "
             "--nproc", (long long)c->tensor_parallel);
    if (c->sequence_parallel && c->tensor_parallel < 2)
        FAIL("dist.sequence_parallel: true splits each sequence over the tensor-parallel ranks; set "
             "dist.tensor_parallel (2 or more) or remove it");
    if (c->sequence_parallel && c->pipeline_parallel > 1)
        FAIL("dist.sequence_parallel: true with dist.pipeline_parallel %lld: sequence parallelism runs without "
             "pipeline stages; remove one of them", (long long)c->pipeline_parallel);
    if (c->pipeline_parallel > 62) FAIL("dist.pipeline_parallel: %lld: at most 62 stages", (long long)c->pipeline_parallel);
    if (c->pipeline_blocks[0] && c->pipeline_parallel < 2)
        FAIL("dist.pipeline_blocks: '%s' splits pipeline stages; set dist.pipeline_parallel (2 or more) or remove it",
             c->pipeline_blocks);
    if (c->pipeline_blocks[0] && ut_pipeline_blocks(c, (int)c->pipeline_parallel, (int[62]){0}, err, n)) return -1;
    if (c->pipeline_parallel > 1 && !strcmp(c->dist_strategy, "dp"))
        FAIL("dist.pipeline_parallel: %lld puts stages on processes; dist.strategy dp (threads of one process) "
             "cannot hold them: set dist.strategy: ddp (or zero1-zero3) and start the processes with --nproc",
             (long long)c->pipeline_parallel);
    if (c->wall_clock_breakdown && (c->pipeline_parallel > 1 || !strcmp(c->dist_strategy, "dp")))
        FAIL("train.wall_clock_breakdown: %s; train.profile_step profiles one step there, or remove the key",
             c->pipeline_parallel > 1 ? "pipeline stages run their micro-batches' forwards and backwards interleaved, "
                                        "so they have no forward and backward time of their own"
                                      : "dist.strategy dp runs its workers' forwards and backwards in threads at once");
    if (c->master_port > 65535)
        FAIL("dist.master_port: %lld is not a TCP port (1 to 65535)", (long long)c->master_port);
    if (c->current_node >= c->nodes)
        FAIL("dist.current_node: %lld must be < dist.nodes (%lld): nodes count from 0",
             (long long)c->current_node, (long long)c->nodes);
    return 0;
}

/* Two files that come together: both given or neither. */
static int check_pair(const char *a, const char *akey, const char *b, const char *bkey, char *err,
                      size_t n) {
    if (!*a && *b) FAIL("%s: required with %s", akey, bkey);
    if (*a && !*b) FAIL("%s: required with %s", bkey, akey);
    return 0;
}

static int check_data(const ut_config *c, char *err, size_t n) {
    if (!strcmp(c->data_name, "idx_images")) {
        if (!*c->train_images) FAIL("data.train_images: required when data.name is idx_images");
        if (!*c->train_labels) FAIL("data.train_labels: required when data.name is idx_images");
        if (check_pair(c->dev_images, "data.dev_images", c->dev_labels, "data.dev_labels", err, n) ||
            check_pair(c->test_images, "data.test_images", c->test_labels, "data.test_labels", err, n))
            return -1;
    } else if (!*c->train_path) {
        FAIL("data.train_path: required when data.name is %s", c->data_name);
    }
    bool images = !strcmp(c->data_name, "idx_images");
    if (images && c->dev_fraction > 0)
        FAIL("data.dev_fraction: IDX images carve their dev set with data.dev_size (a count); remove it");
    if (!images && c->dev_size != 5000)
        FAIL("data.dev_size: carves a dev set from IDX images only; for %s data set data.dev_fraction (the last "
             "fraction of the training examples)", c->data_name);
    if (!images && c->dev_fraction > 0 && *c->dev_path)
        FAIL("data.dev_fraction: data.dev_path is given; the dev set is either that file or a carved fraction of "
             "the training examples: remove one");
    bool pairs = !strcmp(c->data_name, "seq2seq_text");
    const char *tkeys[3] = {"data.train_target_path", "data.dev_target_path", "data.test_target_path"};
    const char *tvals[3] = {c->train_target_path, c->dev_target_path, c->test_target_path};
    const char *pvals[3] = {c->train_path, c->dev_path, c->test_path};
    for (int i = 0; i < 3; i++) {
        if (*tvals[i] && !pairs)
            FAIL("%s: only data.name seq2seq_text reads target files (data.name is %s); remove it", tkeys[i],
                 c->data_name);
        if (*tvals[i] && !*pvals[i]) FAIL("%s: given without the sources beside it (%s)", tkeys[i],
                                         i == 0 ? "data.train_path" : i == 1 ? "data.dev_path" : "data.test_path");
    }
    if (c->gen_eval && !pairs)
        FAIL("generate.eval: evaluation by generation needs sequence-to-sequence data (data.name: seq2seq_text), "
             "not data.name: %s; remove it", c->data_name);
    /* the keys of one kind of text file */
    bool tsv = !strcmp(c->data_name, "tsv_text"), tagged = !strcmp(c->data_name, "tagged_text"),
         mlm = !strcmp(c->data_name, "mlm_text"), clm = !strcmp(c->data_name, "clm_text");
    const struct { const char *key; bool set; bool ours; const char *name; } kinds[] = {
        {"data.source_field", strcmp(c->source_field, "source") != 0, pairs, "seq2seq_text"},
        {"data.target_field", strcmp(c->target_field, "target") != 0, pairs, "seq2seq_text"},
        {"data.source_prefix", c->source_prefix[0] != 0, pairs, "seq2seq_text"},
        {"data.lowercase", c->lowercase, pairs, "seq2seq_text"},
        {"data.text_column", c->text_column[0] != 0, tsv || tagged || mlm || clm, "tsv_text, tagged_text, mlm_text "
                                                                                  "and clm_text"},
        {"data.text_pair_column", c->text_pair_column[0] != 0, !strcmp(c->data_name, "tsv_text"), "tsv_text"},
        {"data.label_column", c->label_column[0] != 0, tsv || tagged, "tsv_text and tagged_text"},
        {"data.label_all_tokens", c->label_all_tokens, tagged, "tagged_text"},
        {"data.mlm_probability", c->mlm_probability != 0.15, mlm, "mlm_text"},
        {"data.line_by_line", c->line_by_line, mlm, "mlm_text"},
        {"data.keep_linebreaks", !c->keep_linebreaks, clm, "clm_text"},
        {"data.text_column_delimiter", strcmp(c->text_column_delimiter, " ") != 0, !strcmp(c->data_name, "tsv_text"),
         "tsv_text"},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].set && !kinds[i].ours)
            FAIL("%s: read by data.name %s only (data.name is %s); remove it", kinds[i].key, kinds[i].name,
                 c->data_name);
    if (c->text_pair_column[0] && !c->text_column[0])
        FAIL("data.text_pair_column: a pair's second text; name its first with data.text_column too");
    return 0;
}

/* The built-in models and the data they read: a model on the wrong kind of
 * data would fail at its first forward with a shape error. Models of the
 * user's own (other names) are not checked here. */
static int check_model_data(const ut_config *c, char *err, size_t n) {
    static const struct { const char *model, *data, *what; } fits[] = {
        {"gpt2", "tokens", "a language model: it reads token shards"},
        {"bow", "tsv_text", "a sentence classifier: it reads TSV text"},
        {"bert", "tsv_text", "a sentence classifier: it reads TSV text"},
        {"bart", "tsv_text", "a sentence classifier: it reads TSV text"},
        {"roberta", "tsv_text", "a sentence classifier: it reads TSV text"},
        {"cnn", "idx_images", "an image classifier: it reads IDX images"},
        {"mlp", "idx_images", "an image classifier: it reads IDX images"}};
    const char *task = ut_kv_get(c->model_opts, "task");
    bool tok_task = task && !strcmp(task, "token_classification"), mlm_task = task && !strcmp(task, "masked_lm");
    if (!strcmp(c->data_name, "mlm_text")) { /* BertForMaskedLM, RobertaForMaskedLM */
        static const char *const others[] = {"gpt2", "bow", "bart", "t5", "cnn", "mlp"};
        for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
            if (!strcmp(c->model_name, others[i]))
                FAIL("data.name mlm_text: masked language modeling trains bert and roberta (model.task: masked_lm), "
                     "not model.name %s%s", c->model_name,
                     strcmp(c->model_name, "gpt2") ? "" : " (a causal language model: it reads texts with "
                                                          "data.name: clm_text, or token shards)");
        if (task && !mlm_task)
            FAIL("model.task: %s, but data.name mlm_text trains a masked language model: set model.task: masked_lm "
                 "(or remove it)", task);
        return 0;
    }
    if (mlm_task)
        FAIL("model.task: masked_lm predicts the masked tokens of texts: set data.name: mlm_text (data.name is %s)",
             c->data_name);
    if (!strcmp(c->data_name, "clm_text")) { /* GPT2LMHeadModel on texts (run_clm) */
        static const char *const others[] = {"bert", "roberta", "bart", "t5", "bow", "cnn", "mlp"};
        for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
            if (!strcmp(c->model_name, others[i]))
                FAIL("data.name clm_text: texts for a causal language model train gpt2 (model.name: gpt2), not "
                     "model.name %s%s", c->model_name, i < 2 ? " (bert and roberta learn from texts by masked "
                                                               "language modeling: data.name: mlm_text)" : "");
        if (task && strcmp(task, "causal_lm"))
            FAIL("model.task: %s, but data.name clm_text trains a causal language model: set model.task: causal_lm "
                 "(or remove it)", task);
        return 0;
    }
    if (!strcmp(c->data_name, "tagged_text")) { /* BertForTokenClassification, RobertaForTokenClassification */
        static const char *const others[] = {"gpt2", "bow", "bart", "t5", "cnn", "mlp"};
        for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
            if (!strcmp(c->model_name, others[i]))
                FAIL("data.name tagged_text: words with a tag each are classified token by token by bert and roberta "
                     "(model.task: token_classification), not model.name %s", c->model_name);
        if (task && !tok_task)
            FAIL("model.task: %s, but data.name tagged_text trains a token classifier: set model.task: "
                 "token_classification (or remove it)", task);
        return 0;
    }
    if (tok_task)
        FAIL("model.task: token_classification tags each word of tagged text: set data.name: tagged_text (data.name "
             "is %s)", c->data_name);
    if (!strcmp(c->model_name, "bart") && !strcmp(c->data_name, "seq2seq_text")) return 0; /* BartForConditionalGeneration */
    if (!strcmp(c->model_name, "t5") && strcmp(c->data_name, "seq2seq_text"))
        FAIL("model.name: t5 is a sequence-to-sequence model: it reads pairs of texts (data.name: seq2seq_text), "
             "not data.name: %s", c->data_name);
    if (!strcmp(c->model_name, "gpt2") && task && !strcmp(task, "sequence_classification")) {
        if (strcmp(c->data_name, "tsv_text"))
            FAIL("model.task: sequence_classification makes gpt2 a sentence classifier: it reads TSV text "
                 "(data.name: tsv_text with data.tokenizer), not data.name: %s", c->data_name);
        return 0;
    }
    for (size_t i = 0; i < sizeof fits / sizeof fits[0]; i++)
        if (!strcmp(c->model_name, fits[i].model) && strcmp(c->data_name, fits[i].data))
            FAIL("model.name: %s is %s (data.name: %s), not data.name: %s; choose a model for %s data "
                 "(%s) or data for %s",
                 c->model_name, fits[i].what, fits[i].data, c->data_name, c->data_name,
                 !strcmp(c->data_name, "tokens") ? "gpt2" : !strcmp(c->data_name, "tsv_text") ? "bow"
                                                                                              : "cnn, mlp",
                 c->model_name);
    return 0;
}

static bool metric_name_ok(const char *m) {
    const char *slash = strchr(m, '/');
    if (!slash || !slash[1] || strchr(slash + 1, '/') || strchr(m, ' ')) return false;
    size_t len = (size_t)(slash - m);
    return (len == 3 && !strncmp(m, "dev", 3)) || (len == 5 && !strncmp(m, "train", 5));
}

static int check_train(const ut_config *c, char *err, size_t n) {
    if (!strcmp(c->mode, "train") && c->epochs == 0 && c->max_steps == 0)
        FAIL("train.epochs: 0 with train.max_steps 0 leaves nothing to train");
    if (!strcmp(c->eval_strategy, "steps") && c->eval_interval < 1 && c->eval_steps_fraction <= 0)
        FAIL("train.eval_interval: must be >= 1 when train.eval_strategy is steps (or set train.eval_steps_fraction)");
    if (!strcmp(c->save_strategy, "steps") && c->save_interval < 1 && c->save_steps_ratio <= 0 &&
        c->save_steps_fraction <= 0)
        FAIL("train.save_interval: must be >= 1 when train.save_strategy is steps (or set train.save_steps_ratio or "
             "train.save_steps_fraction)");
    if (c->log_steps_ratio > 0 && c->log_steps_fraction > 0)
        FAIL("train.log_steps_ratio and train.log_steps_fraction both set (times per epoch, a fraction of the run's "
             "steps): keep one");
    if (c->save_steps_ratio > 0 && c->save_steps_fraction > 0)
        FAIL("train.save_steps_ratio and train.save_steps_fraction both set (times per epoch, a fraction of the run's "
             "steps): keep one");
    if (!metric_name_ok(c->best_metric))
        FAIL("train.best_metric: '%s' must look like dev/<name> or train/<name>", c->best_metric);
    if (!strncmp(c->best_metric, "train/", 6) && ut_cls_is_metric(c->best_metric + 6))
        FAIL("train.best_metric: %s: %s is computed by evaluations (from all of the dev split's predictions), not "
             "in training; write dev/%s", c->best_metric, c->best_metric + 6, c->best_metric + 6);
    unsigned cls;
    if (ut_cls_parse(c->metrics, &cls, err, n)) return -1;
    if (c->early_stopping_patience > 0 && !strcmp(c->eval_strategy, "no"))
        FAIL("train.early_stopping_patience: needs evaluations (train.eval_strategy is no)");
    if (c->auto_find_batch_size && c->nodes > 1)
        FAIL("train.auto_find_batch_size: each node's utrain would start its own ranks again alone; with dist.nodes "
             "%lld set train.batch_size (`utrain plan CONFIG --world-size N` gives the memory a rank needs)",
             (long long)c->nodes);
    return 0;
}

static int check_optim(const ut_config *c, char *err, size_t n) {
    const char *sched = c->schedule;
    bool ds = !strncmp(sched, "ds_", 3);
    bool plateau = !strcmp(sched, "plateau"), greedy = !strcmp(sched, "greedy");
    bool decays = strcmp(sched, "constant") && strcmp(sched, "step") && strcmp(sched, "inverse_sqrt") &&
                  strcmp(sched, "ds_warmup") && !plateau && !greedy;
    bool wsd = !strcmp(sched, "wsd");
    /* GreedyLR's rate rises, and its floor may lie above the first rate (transformers' 1e-3 against 5e-5) */
    if (c->min_lr > c->lr && !greedy) FAIL("optim.min_lr: %g must be <= optim.lr (%g)", c->min_lr, c->lr);
    if (c->min_lr > 0 && c->min_lr_ratio > 0)
        FAIL("optim.min_lr_ratio: set it or optim.min_lr (%g), not both", c->min_lr);
    /* each schedule's own keys, refused where they would do nothing */
    if (c->num_cycles > 0 && strcmp(sched, "cosine") && strcmp(sched, "cosine_restarts") &&
        !(wsd && !strcmp(c->decay_type, "cosine")))
        FAIL("optim.num_cycles: only the cosine schedules have cycles (optim.schedule is %s); write "
             "optim.schedule: cosine or cosine_restarts, or remove the key", sched);
    if (c->power != 1 && strcmp(sched, "polynomial"))
        FAIL("optim.power: only optim.schedule: polynomial has a power (it is %s); remove the key", sched);
    if (c->timescale > 0 && strcmp(sched, "inverse_sqrt"))
        FAIL("optim.timescale: only optim.schedule: inverse_sqrt has a timescale (it is %s); remove the key",
             sched);
    bool annealing = !strcmp(sched, "annealing");
    if (!wsd && (c->decay_steps > 0 || (strcmp(c->decay_type, "cosine") && !annealing)))
        FAIL("optim.%s: belongs to optim.schedule: wsd%s (it is %s); remove the key",
             c->decay_steps > 0 ? "decay_steps" : "decay_type", c->decay_steps > 0 ? "" : " or annealing", sched);
    if (annealing && !strcmp(c->decay_type, "1-sqrt"))
        FAIL("optim.decay_type: FlagAI's AnnealingLR decays along a cosine or a line, not 1-sqrt; write cosine or "
             "linear");
    if (!ds && strcmp(c->warmup_type, "linear"))
        FAIL("optim.warmup_type: %s belongs to DeepSpeed's schedules (ds_warmup, ds_warmup_decay, "
             "ds_warmup_cosine); optim.schedule is %s, whose warmup is linear", c->warmup_type, sched);
    if (c->warmup_min_ratio > 0 && strcmp(sched, "ds_warmup_cosine"))
        FAIL("optim.warmup_min_ratio: belongs to optim.schedule: ds_warmup_cosine (it is %s); remove the key",
             sched);
    /* plateau's keys, and what it needs: evaluations of a dev metric, no warmup */
    static const char *const plateau_keys[] = {"optim.plateau_mode",      "optim.plateau_factor",
                                               "optim.plateau_patience",  "optim.plateau_threshold",
                                               "optim.plateau_threshold_mode", "optim.plateau_cooldown",
                                               "optim.plateau_eps"};
    for (size_t i = 0; !plateau && i < sizeof plateau_keys / sizeof plateau_keys[0]; i++)
        if (!ut_cfg_at_default(c, plateau_keys[i]))
            FAIL("%s: belongs to optim.schedule: plateau (it is %s)%s; remove the key", plateau_keys[i], sched,
                 greedy ? ": greedy's are the optim.greedy_* keys" : "");
    static const char *const greedy_keys[] = {"optim.greedy_mode",      "optim.greedy_factor",
                                              "optim.greedy_patience",  "optim.greedy_threshold",
                                              "optim.greedy_threshold_mode", "optim.greedy_cooldown",
                                              "optim.greedy_warmup",    "optim.greedy_max_lr",
                                              "optim.greedy_eps",       "optim.greedy_smooth",
                                              "optim.greedy_window_size", "optim.greedy_reset_start"};
    for (size_t i = 0; !greedy && i < sizeof greedy_keys / sizeof greedy_keys[0]; i++)
        if (!ut_cfg_at_default(c, greedy_keys[i]))
            FAIL("%s: belongs to optim.schedule: greedy (it is %s); remove the key", greedy_keys[i], sched);
    if (greedy && !c->greedy_smooth && !ut_cfg_at_default(c, "optim.greedy_window_size"))
        FAIL("optim.greedy_window_size: averages the metrics only with optim.greedy_smooth: true; set that or "
             "remove the key");
    /* the evaluation-driven rates need evaluations of a dev metric, and have no warmup */
    const char *by_evals = plateau ? "plateau" : greedy ? "greedy" : NULL;
    if (by_evals && (c->warmup_steps > 0 || c->warmup_ratio > 0))
        FAIL("optim.schedule: %s (%s) has no warmup: its rate starts at optim.lr; remove optim.warmup_%s",
             by_evals, plateau ? "torch's ReduceLROnPlateau" : "transformers' GreedyLR",
             c->warmup_ratio > 0 ? "ratio" : "steps");
    if (by_evals && !strcmp(c->eval_strategy, "no"))
        FAIL("optim.schedule: %s %s, and train.eval_strategy is no: set it to steps or epoch (with dev data)",
             by_evals, plateau ? "lowers the rate when the evaluations stop improving"
                               : "lowers and raises the rate as the evaluations go");
    if (by_evals && strncmp(c->best_metric, "dev/", 4))
        FAIL("optim.schedule: %s follows train.best_metric, which must be an evaluation's metric "
             "(dev/loss, dev/accuracy, ...), not %s", by_evals, c->best_metric);
    if (c->warmup_from_zero && (ds || annealing || by_evals))
        FAIL("optim.warmup_from_zero: optim.schedule %s has %s warmup; remove the key", sched,
             by_evals ? "no" : "its own");
    if (c->schedule_steps > 0 && !decays)
        FAIL("optim.schedule_steps: optim.schedule %s does not decay to an end; remove the key", sched);
    if (wsd && c->decay_steps < 1)
        FAIL("optim.decay_steps: optim.schedule: wsd needs the number of steps its decay takes (>= 1)");
    int64_t horizon = c->schedule_steps > 0 ? c->schedule_steps : c->max_steps;
    if (wsd && horizon > 0 && c->decay_steps > horizon - (c->warmup_ratio > 0 ? 0 : c->warmup_steps))
        FAIL("optim.decay_steps: %lld with %lld warmup steps exceed %s (%lld)", (long long)c->decay_steps,
             (long long)c->warmup_steps, c->schedule_steps > 0 ? "optim.schedule_steps" : "train.max_steps",
             (long long)horizon);
    if (decays && c->max_steps == 0 && c->epochs == 0 && c->schedule_steps == 0)
        FAIL("optim.schedule: %s needs train.max_steps or train.epochs for its length", c->schedule);
    /* AnnealingLR may warm up over the whole run (FlagAI's warm_up: 1.0) */
    if (c->warmup_ratio >= 1 && !(annealing && c->warmup_ratio == 1))
        FAIL("optim.warmup_ratio: %g must be < 1%s (a fraction of the total steps; write "
             "optim.warmup_steps: N for a number of steps)", c->warmup_ratio, annealing ? ", or 1" : "");
    if (decays && strcmp(sched, "annealing") && c->schedule_steps == 0 && c->max_steps > 0 &&
        c->warmup_steps >= c->max_steps)
        FAIL("optim.warmup_steps: must be < train.max_steps with the %s schedule", c->schedule);
    if (!strcmp(c->optim_name, "sgd") && c->nesterov && (c->momentum <= 0 || c->dampening != 0))
        FAIL("optim.nesterov: needs optim.momentum > 0 and optim.dampening 0");
    return 0;
}

int ut_config_validate(const ut_config *c, char *err, size_t n) {
    for (int i = 0; i < ut_cfg_nkeys; i++)
        if (ut_cfg_check_value(c, &ut_cfg_schema[i], err, n)) return -1;
    if (!c->model_opts) FAIL("model options: not initialised (call ut_config_init)");
    if (c->hf_overrides && ut_kv_get(c->model_opts, "pretrained"))
        FAIL("config_overrides: it changes a model trained from scratch (model_type), and model_name_or_path "
             "(model.pretrained) is given; the example scripts refuse them together too");
    if (check_run(c, err, n) || check_data(c, err, n) || check_model_data(c, err, n) ||
        check_train(c, err, n) ||
        check_optim(c, err, n))
        return -1;
    return 0;
}
