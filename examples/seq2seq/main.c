/* examples/seq2seq: a sequence-to-sequence run through the utrain library
 * with two hooks of our own, the way FlagAI's Trainer is customised:
 *   - forward_step returns the loss, the logits and the decoder's hidden
 *     states, as FlagAI's forward_step returns {"loss", "logits",
 *     "hidden_states"}; the metrics hook reads them (the share of target
 *     tokens the logits predict, the states' mean square);
 *   - generation_metrics scores every generation of the dev and test sets
 *     with a metric of ours (the share whose first word is the reference's),
 *     reported beside bleu and rougeL and usable as train.best_metric.
 *
 *   usage: seq2seq CONFIG.yml [KEY=VALUE]...
 * The config is any seq2seq_text run (docs/generation.md); the settings
 * after it are applied as `--set` would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utrain/utrain.h>

/* ---- forward_step: the model, its loss, and outputs for metrics ----
 * As FlagAI's forward_step returns {"loss", "logits", "hidden_states"}: the
 * decoder's final states (m->hidden) go out as a named output. */
static int forward_step(void *user, ut_ctx *ctx, ut_model *m, ut_tensor *x, ut_tensor *y, ut_step_outputs *out) {
    (void)user;
    out->output = ut_model_forward(m, ctx, x); /* logits (B, T, V) */
    out->loss = out->output ? ut_model_loss(m, ctx, out->output, y) : NULL;
    if (m->hidden) {
        out->names[out->n] = "hidden_states"; /* (B, T, d_model) */
        out->values[out->n++] = m->hidden;
    }
    return out->loss ? 0 : -1;
}

/* the root mean square of the decoder's final states, from the named output */
static int hidden_rms(const ut_step_outputs *out, ut_metric *met) {
    for (int i = 0; i < out->n; i++) {
        const ut_tensor *h = out->values[i];
        if (strcmp(out->names[i], "hidden_states") || h->dtype != UT_F32) continue;
        int64_t k = ut_nelem(h);
        float *v = malloc((size_t)k * sizeof *v);
        if (!v || ut_tensor_get(h, v, (size_t)k * sizeof *v)) {
            free(v);
            return 0;
        }
        *met = (ut_metric){.name = "hidden_rms"};
        for (int64_t j = 0; j < k; j++) met->sum += (double)v[j] * v[j];
        met->count = (double)k;
        free(v);
        return 1;
    }
    return 0;
}

/* ---- metrics: per batch, the target tokens whose logit is the largest ---- */
static int token_accuracy(void *user, const ut_step_outputs *out, ut_tensor *y, ut_metric *mets, int max) {
    (void)user;
    const ut_tensor *o = out->output;
    if (max < 1 || !o || o->ndim != 3 || o->dtype != UT_F32) return 0;
    int64_t rows = o->ne[0] * o->ne[1], V = o->ne[2];
    float *logits = malloc((size_t)(rows * V) * sizeof *logits);
    int32_t *labels = malloc((size_t)rows * sizeof *labels);
    int k = 0;
    if (!ut_tensor_get(o, logits, (size_t)(rows * V) * sizeof *logits) &&
        !ut_tensor_get(y, labels, (size_t)rows * sizeof *labels)) {
        mets[0] = (ut_metric){.name = "token_accuracy"};
        for (int64_t r = 0; r < rows; r++) {
            if (labels[r] == -100) continue; /* padding */
            int64_t best = 0;
            for (int64_t v = 1; v < V; v++)
                if (logits[r * V + v] > logits[r * V + best]) best = v;
            mets[0].sum += best == labels[r];
            mets[0].count += 1;
        }
        k = 1;
    }
    free(logits);
    free(labels);
    if (k < max) k += hidden_rms(out, mets + k); /* reported as the mean square (sum / count) */
    return k;
}

/* ---- generation_metrics: over a whole split's generations ---- */
static size_t first_word(const char *s, const char **at) {
    while (*s == ' ') s++;
    *at = s;
    return strcspn(s, " ");
}

static int first_word_match(void *user, int64_t n, const char *const *sources, const char *const *references,
                            const char *const *generated, ut_metric *mets, int max) {
    (void)user, (void)sources;
    if (max < 1) return 0;
    mets[0] = (ut_metric){.name = "first_word"};
    for (int64_t i = 0; i < n; i++) {
        const char *a, *b;
        size_t la = first_word(references[i], &a), lb = first_word(generated[i], &b);
        mets[0].sum += la == lb && !strncmp(a, b, la);
        mets[0].count += 1;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: seq2seq CONFIG.yml [KEY=VALUE]...\n");
        return 1;
    }
    char err[1024];
    ut_config cfg;
    ut_config_init(&cfg);
    int rc = ut_config_load(&cfg, argv[1], err, sizeof err) ? 1 : 0;
    for (int i = 2; i < argc && !rc; i++) rc = ut_config_set(&cfg, argv[i], err, sizeof err) ? 1 : 0;
    if (!rc) rc = ut_config_validate(&cfg, err, sizeof err) ? 1 : 0;
    if (rc) {
        fprintf(stderr, "seq2seq: %s\n", err);
        ut_config_free(&cfg);
        return 1;
    }
    ut_hooks hooks = {.forward_step = forward_step, .metrics = token_accuracy, .generation_metrics = first_word_match};
    /* datasets and model NULL: the trainer opens and builds them from the config */
    rc = ut_trainer_run(&cfg, NULL, NULL, NULL, &hooks);
    if (rc == UT_EXIT_OK) rc = ut_trainer_test(&cfg, NULL, NULL, NULL, NULL, &hooks);
    ut_config_free(&cfg);
    return rc;
}
