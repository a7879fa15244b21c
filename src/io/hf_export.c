/* Export of a utrain checkpoint to a Hugging Face model directory:
 * config.json, model.safetensors under transformers' names and layouts
 * (GPT-2's Conv1D weights transposed back to (in, out), the "transformer."
 * prefix but for a classifier's "score"; bert's, roberta's and bart's names
 * are transformers' already) and the tokenizer files of the model.pretrained
 * directory. BERT, RoBERTa (roberta.* tensors; *ForMaskedLM with the
 * prediction head's tensors, *ForTokenClassification
 * with one linear head and no pooler), GPT-2 (GPT2LMHeadModel, or
 * GPT2ForSequenceClassification with a score head) and BART
 * (BartForSequenceClassification, or BartForConditionalGeneration for
 * model.task seq2seq, with its final_logits_bias), T5 (T5ForConditionalGeneration). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "utrain/base.h"
#include "utrain/io.h"

typedef struct {
    int n;
    char **names;
    ut_st_tensor *t;
    float **owned; /* transposed copies */
} tensor_list;

static void list_free(tensor_list *l) {
    for (int i = 0; i < l->n; i++) {
        ut_free(l->names[i]);
        ut_free(l->owned[i]);
    }
    ut_free(l->names);
    ut_free(l->t);
    ut_free(l->owned);
}

static char *dup_text(const char *s) {
    size_t k = strlen(s) + 1;
    return memcpy(ut_malloc_check(k), s, k);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static bool is_conv1d(const char *name) {
    return ends_with(name, ".c_attn.weight") || ends_with(name, ".c_proj.weight") ||
           ends_with(name, ".c_fc.weight");
}

/* Adds name -> t (data owned by the list when owned is set) at the end. */
static void list_add(tensor_list *l, const char *name, ut_st_tensor t, float *owned) {
    l->names = ut_realloc_check(l->names, (size_t)(l->n + 1) * sizeof *l->names);
    l->t = ut_realloc_check(l->t, (size_t)(l->n + 1) * sizeof *l->t);
    l->owned = ut_realloc_check(l->owned, (size_t)(l->n + 1) * sizeof *l->owned);
    l->names[l->n] = dup_text(name);
    l->t[l->n] = t;
    l->owned[l->n++] = owned;
}

/* The checkpoint's "model.*" tensors under the Hugging Face names. */
static int collect(const ut_st_file *f, bool gpt2, tensor_list *l, const char *path, char *err, size_t n) {
    int k = ut_st_count(f);
    l->names = ut_calloc_check((size_t)k, sizeof *l->names);
    l->t = ut_calloc_check((size_t)k, sizeof *l->t);
    l->owned = ut_calloc_check((size_t)k, sizeof *l->owned);
    for (int i = 0; i < k; i++) {
        const char *nm = ut_st_name(f, i);
        if (strncmp(nm, "model.", 6)) continue;
        const ut_st_tensor *s = ut_st_get(f, nm);
        if (s->dtype != UT_ST_F32)
            return ut_errorf(err, n, "%s: tensor '%s' has dtype %s, expected F32", path, nm,
                             ut_st_dtype_name(s->dtype));
        char buf[600];
        snprintf(buf, sizeof buf, "%s%s", gpt2 && strncmp(nm + 6, "score.", 6) ? "transformer." : "", nm + 6);
        ut_st_tensor t = *s;
        if (gpt2 && is_conv1d(nm) && s->ndim == 2) {
            int64_t r = t.shape[0], c = t.shape[1];
            float *tr = ut_malloc_check(t.nbytes ? t.nbytes : 1);
            const float *src = t.data; /* file bytes, not tensor data */
            for (int64_t a = 0; a < r; a++)
                for (int64_t b = 0; b < c; b++) tr[b * r + a] = src[a * c + b];
            t.shape[0] = c, t.shape[1] = r, t.data = tr;
            l->owned[l->n] = tr;
        }
        l->names[l->n] = dup_text(buf);
        l->t[l->n++] = t;
    }
    return 0;
}

static const ut_st_tensor *tensor(const tensor_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->names[i], name)) return &l->t[i];
    return NULL;
}

static int64_t count_layers(const tensor_list *l, const char *fmt) {
    int64_t k = 0;
    for (char name[300];; k++) {
        snprintf(name, sizeof name, fmt, (long long)k);
        if (!tensor(l, name)) return k;
    }
}

static void set_num(cJSON *o, const char *key, double v) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddNumberToObject(o, key, v);
}

/* A number that JSON readers with typed fields (transformers' configs) take
 * as a float: written with a decimal point even when integral (0.0, not 0). */
static void set_float(cJSON *o, const char *key, double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.15g", v);
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", sizeof buf - strlen(buf) - 1);
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddRawToObject(o, key, buf);
}

/* a true / false, replacing the one config.json may have (written once) */
static void set_bool(cJSON *o, const char *key, bool v) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddBoolToObject(o, key, v);
}

static void set_str(cJSON *o, const char *key, const char *v) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddStringToObject(o, key, v);
}

static double opt_num(const ut_kv *kv, const char *key, double def) {
    const char *v = ut_kv_get(kv, key);
    char *end;
    double d = v ? strtod(v, &end) : def;
    return v && (*end || end == v) ? def : d;
}

static void set_arch(cJSON *o, const char *arch) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, "architectures");
    cJSON *a = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(arch));
}

/* a classifier's K labels: id2label / label2id as transformers writes them,
 * the run's label names (names, nnames of them) or LABEL_k; one output is
 * a regression's score (problem_type regression, which transformers also
 * infers from one label); a multi-label task (kv's problem_type: the
 * run's, else the checkpoint's it started from) says so, as transformers
 * would otherwise read its labels as one class. -1 when the names are not
 * the head's outputs. */
static int set_labels(cJSON *o, int64_t K, const ut_kv *kv, const char *const *names, int64_t nnames,
                      const char *path, char *err, size_t n) {
    if (names && nnames != K)
        return ut_errorf(err, n, "%s: the classifier has %lld outputs, and the run's labels.txt names %lld labels "
                                 "(%s, ...): not the run that wrote this checkpoint?", path, (long long)K,
                         (long long)nnames, names[0]);
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(o, "problem_type");
    const char *want = ut_kv_get(kv, "problem_type");
    if (K == 1) set_str(o, "problem_type", "regression");
    else if (want && strcmp(want, "regression")) set_str(o, "problem_type", want);
    else if (cJSON_IsString(pt) && !strcmp(pt->valuestring, "regression"))
        cJSON_DeleteItemFromObjectCaseSensitive(o, "problem_type");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "id2label");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "label2id");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "num_labels");
    cJSON *id2 = cJSON_AddObjectToObject(o, "id2label"), *l2i = cJSON_AddObjectToObject(o, "label2id");
    for (int64_t k = 0; k < K; k++) {
        char id[32], label[48];
        snprintf(id, sizeof id, "%lld", (long long)k);
        snprintf(label, sizeof label, "LABEL_%lld", (long long)k);
        cJSON_AddStringToObject(id2, id, names ? names[k] : label);
        cJSON_AddNumberToObject(l2i, names ? names[k] : label, (double)k);
    }
    return 0;
}

static int gpt2_config(cJSON *o, const tensor_list *l, const ut_kv *kv, const char *const *names, int64_t nnames,
                       const char *path, char *err, size_t n) {
    const ut_st_tensor *wte = tensor(l, "transformer.wte.weight"), *wpe = tensor(l, "transformer.wpe.weight");
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2)
        return ut_errorf(err, n, "%s: not a gpt2 checkpoint (no model.wte.weight / model.wpe.weight)", path);
    double drop = opt_num(kv, "dropout", 0);
    const ut_st_tensor *score = tensor(l, "score.weight");
    set_str(o, "model_type", "gpt2");
    set_arch(o, score ? "GPT2ForSequenceClassification" : "GPT2LMHeadModel");
    if (score && set_labels(o, score->shape[0], kv, names, nnames, path, err, n)) return -1;
    if (score && ut_kv_get(kv, "pad_token_id")) set_num(o, "pad_token_id", opt_num(kv, "pad_token_id", 0));
    set_num(o, "vocab_size", (double)wte->shape[0]);
    set_num(o, "n_embd", (double)wte->shape[1]);
    set_num(o, "n_positions", (double)wpe->shape[0]);
    set_num(o, "n_layer", (double)count_layers(l, "transformer.h.%lld.ln_1.weight"));
    set_num(o, "n_head", opt_num(kv, "n_head", 12));
    set_num(o, "layer_norm_epsilon", opt_num(kv, "layer_norm_epsilon", 1e-5));
    set_str(o, "activation_function", "gelu_new");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "n_inner");
    cJSON_AddNullToObject(o, "n_inner");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "tie_word_embeddings");
    set_bool(o, "tie_word_embeddings", true);
    set_num(o, "resid_pdrop", drop), set_num(o, "embd_pdrop", drop), set_num(o, "attn_pdrop", drop);
    return 0;
}

static const ut_st_tensor *tensor_in(const tensor_list *l, const char *pre, const char *name) {
    char full[300];
    snprintf(full, sizeof full, "%s.%s", pre, name);
    return tensor(l, full);
}

/* BERT or, with roberta.* tensors, RoBERTa */
static int bert_config(cJSON *o, const tensor_list *l, const ut_kv *kv, const char *const *names, int64_t nnames,
                       const char *path, char *err, size_t n) {
    bool rob = tensor(l, "roberta.embeddings.word_embeddings.weight") != NULL;
    const char *pre = rob ? "roberta" : "bert";
    char lay[64];
    snprintf(lay, sizeof lay, "%s.encoder.layer.%%lld.output.dense.weight", pre);
    const ut_st_tensor *we = tensor_in(l, pre, "embeddings.word_embeddings.weight"),
                       *pe = tensor_in(l, pre, "embeddings.position_embeddings.weight"),
                       *te = tensor_in(l, pre, "embeddings.token_type_embeddings.weight"),
                       *in = tensor_in(l, pre, "encoder.layer.0.intermediate.dense.weight"),
                       *cl = tensor(l, rob ? "classifier.out_proj.weight" : "classifier.weight");
    /* a token classifier: one linear head, no pooler (BERT) or dense (RoBERTa) before it */
    bool token = rob ? !cl && tensor(l, "classifier.weight") : cl && !tensor(l, "bert.pooler.dense.weight");
    if (token) cl = tensor(l, "classifier.weight");
    /* a masked language model: the prediction head's bias, the decoder the word embedding (tied: not saved) */
    bool mlm = !cl && tensor(l, rob ? "lm_head.bias" : "cls.predictions.bias");
    if (!we || !pe || !te || !in || (!cl && !mlm))
        return ut_errorf(err, n, "%s: not a bert or roberta checkpoint (no model.bert.embeddings.* or "
                                 "model.classifier.weight, no model.roberta.embeddings.* or "
                                 "model.classifier.out_proj.weight, no masked LM head)", path);
    set_str(o, "model_type", pre);
    set_arch(o, mlm     ? (rob ? "RobertaForMaskedLM" : "BertForMaskedLM")
                : token ? (rob ? "RobertaForTokenClassification" : "BertForTokenClassification")
                        : (rob ? "RobertaForSequenceClassification" : "BertForSequenceClassification"));
    if (mlm) set_bool(o, "tie_word_embeddings", true);
    if (rob) set_num(o, "pad_token_id", opt_num(kv, "pad_token_id", 1));
    set_num(o, "vocab_size", (double)we->shape[0]);
    set_num(o, "hidden_size", (double)we->shape[1]);
    set_num(o, "max_position_embeddings", (double)pe->shape[0]);
    set_num(o, "type_vocab_size", (double)te->shape[0]);
    set_num(o, "intermediate_size", (double)in->shape[0]);
    set_num(o, "num_hidden_layers", (double)count_layers(l, lay));
    set_num(o, "num_attention_heads", opt_num(kv, "num_attention_heads", 12));
    set_num(o, "layer_norm_eps", opt_num(kv, "layer_norm_eps", rob ? 1e-5 : 1e-12));
    set_num(o, "hidden_dropout_prob", opt_num(kv, "hidden_dropout_prob", 0.1));
    set_num(o, "attention_probs_dropout_prob", opt_num(kv, "attention_probs_dropout_prob", 0.1));
    set_num(o, "initializer_range", opt_num(kv, "initializer_range", 0.02));
    set_str(o, "hidden_act", ut_kv_get(kv, "hidden_act") ? ut_kv_get(kv, "hidden_act") : "gelu");
    set_str(o, "position_embedding_type", "absolute");
    if (ut_kv_get(kv, "classifier_dropout")) set_num(o, "classifier_dropout", opt_num(kv, "classifier_dropout", 0.1));
    if (cl && set_labels(o, cl->shape[0], kv, names, nnames, path, err, n)) return -1;
    return 0;
}

/* bart: the sizes from the tensors, the rest from the run's model options
 * over model.pretrained's config.json (BartConfig's defaults where neither says) */
/* BartForConditionalGeneration's final_logits_bias (1, V): model.pretrained's
 * (a buffer fine-tuning leaves as it is), else zeros */
static int final_logits_bias(tensor_list *l, int64_t V, const char *dir, char *err, size_t n) {
    float *b = ut_calloc_check((size_t)V, sizeof *b);
    char path[4200];
    char why[512];
    ut_st_file *f = dir && !ut_hf_weights_path(dir, path, sizeof path, why, sizeof why)
                        ? ut_st_open(path, why, sizeof why) : NULL;
    const ut_st_tensor *t = f ? ut_st_get(f, "final_logits_bias") : NULL;
    if (!t && f) t = ut_st_get(f, "model.final_logits_bias");
    if (t && ut_st_numel(t) != V) {
        ut_st_close(f);
        ut_free(b);
        return ut_errorf(err, n, "%s: final_logits_bias has %lld values, the checkpoint's vocabulary %lld", path,
                         (long long)ut_st_numel(t), (long long)V);
    }
    for (int64_t i = 0; t && i < V; i++) b[i] = ut_st_float(t, i);
    ut_st_close(f);
    list_add(l, "final_logits_bias",
             (ut_st_tensor){.dtype = UT_ST_F32, .ndim = 2, .shape = {1, V}, .data = b, .nbytes = (size_t)V * 4}, b);
    return 0;
}

static int bart_config(cJSON *o, tensor_list *l, const ut_kv *kv, const char *const *names, int64_t nnames,
                       const char *path, char *err, size_t n) {
    const ut_st_tensor *sh = tensor(l, "model.shared.weight"),
                       *pe = tensor(l, "model.encoder.embed_positions.weight"),
                       *ef = tensor(l, "model.encoder.layers.0.fc1.weight"),
                       *df = tensor(l, "model.decoder.layers.0.fc1.weight"),
                       *cl = tensor(l, "classification_head.out_proj.weight");
    /* a run of model.task seq2seq (seq2seq_text data) has no classification head: a generation model */
    bool gen = !cl;
    if (!sh || !pe || !ef || !df || pe->shape[0] < 3)
        return ut_errorf(err, n, "%s: not a bart checkpoint (no model.model.shared.weight or "
                                 "model.model.encoder.*)", path);
    set_str(o, "model_type", "bart");
    set_arch(o, gen ? "BartForConditionalGeneration" : "BartForSequenceClassification");
    set_num(o, "vocab_size", (double)sh->shape[0]);
    set_num(o, "d_model", (double)sh->shape[1]);
    set_num(o, "max_position_embeddings", (double)(pe->shape[0] - 2));
    set_num(o, "encoder_ffn_dim", (double)ef->shape[0]);
    set_num(o, "decoder_ffn_dim", (double)df->shape[0]);
    set_num(o, "encoder_layers", (double)count_layers(l, "model.encoder.layers.%lld.fc1.weight"));
    set_num(o, "decoder_layers", (double)count_layers(l, "model.decoder.layers.%lld.fc1.weight"));
    static const struct { const char *key; double def; bool real; } nums[] = {
        {"encoder_attention_heads", 12, 0}, {"decoder_attention_heads", 12, 0}, {"pad_token_id", 1, 0},
        {"eos_token_id", 2, 0},  {"decoder_start_token_id", 2, 0}, {"dropout", 0.1, 1},
        {"attention_dropout", 0, 1}, {"activation_dropout", 0, 1}, {"classifier_dropout", 0, 1},
        {"init_std", 0.02, 1}, {"encoder_layerdrop", 0, 1}, {"decoder_layerdrop", 0, 1}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        (nums[i].real ? set_float : set_num)(o, nums[i].key, opt_num(kv, nums[i].key, nums[i].def));
    const char *act = ut_kv_get(kv, "activation_function"), *scale = ut_kv_get(kv, "scale_embedding");
    set_str(o, "activation_function", act ? act : "gelu");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "scale_embedding");
    set_bool(o, "scale_embedding", scale && !strcmp(scale, "true"));
    if (gen) return final_logits_bias(l, sh->shape[0], ut_kv_get(kv, "pretrained"), err, n);
    if (set_labels(o, cl->shape[0], kv, names, nnames, path, err, n)) return -1;
    return 0;
}

/* t5: T5ForConditionalGeneration; the sizes from the tensors, the rest
 * from the run's model options over model.pretrained's config.json */
static int t5_config(cJSON *o, const tensor_list *l, const ut_kv *kv, const char *path, char *err, size_t n) {
    const ut_st_tensor *sh = tensor(l, "shared.weight"),
                       *rel = tensor(l, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
                       *q = tensor(l, "encoder.block.0.layer.0.SelfAttention.q.weight"),
                       *wi = tensor(l, "encoder.block.0.layer.1.DenseReluDense.wi.weight"),
                       *wi0 = tensor(l, "encoder.block.0.layer.1.DenseReluDense.wi_0.weight"),
                       *head = tensor(l, "lm_head.weight");
    if (!sh || !rel || !q || (!wi && !wi0) || rel->shape[1] < 1)
        return ut_errorf(err, n, "%s: not a t5 checkpoint (no model.shared.weight, model.encoder.block.0.* "
                                 "attention and feed-forward tensors)", path);
    set_str(o, "model_type", "t5");
    set_arch(o, "T5ForConditionalGeneration");
    set_num(o, "vocab_size", (double)sh->shape[0]);
    set_num(o, "d_model", (double)sh->shape[1]);
    set_num(o, "num_heads", (double)rel->shape[1]);
    set_num(o, "d_kv", (double)(q->shape[0] / rel->shape[1]));
    set_num(o, "d_ff", (double)(wi ? wi : wi0)->shape[0]);
    set_num(o, "relative_attention_num_buckets", (double)rel->shape[0]);
    set_num(o, "num_layers", (double)count_layers(l, "encoder.block.%lld.layer.0.layer_norm.weight"));
    set_num(o, "num_decoder_layers", (double)count_layers(l, "decoder.block.%lld.layer.0.layer_norm.weight"));
    static const struct { const char *key; double def; bool real; } nums[] = {
        {"relative_attention_max_distance", 128, 0}, {"pad_token_id", 0, 0}, {"eos_token_id", 1, 0},
        {"decoder_start_token_id", 0, 0}, {"dropout_rate", 0.1, 1}, {"layer_norm_epsilon", 1e-6, 1},
        {"initializer_factor", 1.0, 1}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        (nums[i].real ? set_float : set_num)(o, nums[i].key, opt_num(kv, nums[i].key, nums[i].def));
    const char *ff = ut_kv_get(kv, "feed_forward_proj");
    set_str(o, "feed_forward_proj", ff ? ff : wi0 ? "gated-gelu" : "relu");
    /* an lm_head of its own: T5 v1.1's tie_word_embeddings false (unscaled) */
    const char *scale = ut_kv_get(kv, "scale_decoder_outputs");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "tie_word_embeddings");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "scale_decoder_outputs");
    set_bool(o, "tie_word_embeddings", head == NULL);
    if (!head) set_bool(o, "scale_decoder_outputs", !scale || strcmp(scale, "false"));
    return 0;
}

/* The pretrained directory's config.json as the starting point (its other
 * keys kept), else an empty object. */
static cJSON *base_config(const char *dir) {
    if (!dir) return cJSON_CreateObject();
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return cJSON_CreateObject();
    size_t cap = 1 << 16, len = 0;
    char *s = ut_malloc_check(cap);
    for (size_t got; (got = fread(s + len, 1, cap - len - 1, f)) > 0;)
        if ((len += got) + 1 == cap) s = ut_realloc_check(s, cap *= 2);
    fclose(f);
    s[len] = 0;
    cJSON *o = cJSON_Parse(s);
    ut_free(s);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        o = cJSON_CreateObject();
    }
    return o;
}

static int write_text(const char *path, const char *text, char *err, size_t n) {
    FILE *f = ut_fopen_write(path, false, err, n);
    if (!f) return -1;
    fputs(text, f);
    fputc('\n', f);
    if (fclose(f)) return ut_errorf(err, n, "%s: write failed", path);
    return 0;
}

static int copy_file(const char *from, const char *to, char *err, size_t n) {
    FILE *a = fopen(from, "rb");
    if (!a) return 0; /* not there: nothing to copy */
    FILE *b = ut_fopen_write(to, false, err, n);
    if (!b) {
        fclose(a);
        return -1;
    }
    char buf[65536];
    for (size_t got; (got = fread(buf, 1, sizeof buf, a)) > 0;) fwrite(buf, 1, got, b);
    bool bad = ferror(a);
    fclose(a);
    if (fclose(b) || bad) return ut_errorf(err, n, "%s: copy from %s failed", to, from);
    return 0;
}

int ut_hf_copy_tokenizer(const char *dir, const char *out, char *err, size_t n) {
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "spiece.model",
                                        "vocab.txt", "vocab.json", "merges.txt", "added_tokens.json",
                                        "generation_config.json", NULL};
    for (int i = 0; dir && files[i]; i++) {
        char a[4200], b[4200];
        snprintf(a, sizeof a, "%s/%s", dir, files[i]);
        snprintf(b, sizeof b, "%s/%s", out, files[i]);
        if (copy_file(a, b, err, n)) return -1;
    }
    return 0;
}

static int write_config(cJSON *o, const char *out, char *err, size_t n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", out);
    char *text = cJSON_Print(o);
    int rc = write_text(path, text, err, n);
    cJSON_free(text);
    return rc;
}

int ut_hf_export(const char *model_name, const ut_kv *opts, const char *const *names, int64_t nnames, const char *ckpt,
                 const char *out, char *err, size_t n) {
    bool gpt2 = !strcmp(model_name, "gpt2"), bart = !strcmp(model_name, "bart"), t5 = !strcmp(model_name, "t5");
    if (!gpt2 && !bart && !t5 && strcmp(model_name, "bert") && strcmp(model_name, "roberta"))
        return ut_errorf(err, n, "export --format hf: model.name is %s; bert, roberta, gpt2, bart and t5 runs "
                                 "can be exported",
                         model_name);
    if (mkdir(out, 0777) && errno != EEXIST) return ut_errorf(err, n, "%s: cannot create: %s", out, strerror(errno));
    const char *dir = ut_kv_get(opts, "pretrained");
    ut_kv *kv = NULL;
    if (dir && !(kv = ut_hf_config_read(dir, err, n))) return -1;
    if (!kv) kv = ut_kv_new();
    for (int i = 0; i < ut_kv_len(opts); i++) ut_kv_set(kv, ut_kv_key(opts, i), ut_kv_get(opts, ut_kv_key(opts, i)));
    if (gpt2 && !ut_kv_get(opts, "dropout") && ut_kv_get(kv, "resid_pdrop"))
        ut_kv_set(kv, "dropout", ut_kv_get(kv, "resid_pdrop"));
    ut_st_file *f = ut_st_open(ckpt, err, n);
    tensor_list l = {0};
    cJSON *cfg = base_config(dir);
    int rc = !f || collect(f, gpt2, &l, ckpt, err, n) ||
             (gpt2   ? gpt2_config(cfg, &l, kv, names, nnames, ckpt, err, n)
              : bart ? bart_config(cfg, &l, kv, names, nnames, ckpt, err, n)
              : t5   ? t5_config(cfg, &l, kv, ckpt, err, n)
                     : bert_config(cfg, &l, kv, names, nnames, ckpt, err, n)) ||
             write_config(cfg, out, err, n);
    if (!rc) {
        char path[4200];
        snprintf(path, sizeof path, "%s/model.safetensors", out);
        const char *meta[] = {"format", "pt", NULL};
        rc = ut_st_save(path, l.n, (const char *const *)l.names, l.t, meta, err, n) ||
             ut_hf_copy_tokenizer(dir, out, err, n);
    }
    cJSON_Delete(cfg);
    list_free(&l);
    ut_st_close(f);
    ut_kv_free(kv);
    return rc ? -1 : 0;
}
