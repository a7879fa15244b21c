/* End to end through the `utrain` program with a Hugging Face BART directory
 * (the tiny fixture of tests/parity/make_hf_bart_fixtures.py, its byte-level
 * BPE tokenizer.json as the tokenizer) on data/sst2_sample: train mode for
 * one epoch, then test mode writing dev/test results and predictions, export
 * to a Hugging Face directory that loads back to the best checkpoint's
 * weights, bad settings refused, and DDP and ZeRO-3 on two ranks giving one
 * process's losses and weights. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "hf_e2e.h"

static char tmp[256];

static void test_train_then_test(void) { hfe_train_then_test(tmp, "bart"); }

/* utrain export of the run: config.json (model_type bart, the sizes),
 * model.safetensors under transformers' names, the tokenizer; loading the
 * export gives the best checkpoint's weights */
static void test_export(void) {
    char d[1024], out[1024], err[512];
    snprintf(d, sizeof d, "%s", tp_path(tmp, "runs/bart"));
    snprintf(out, sizeof out, "%s", tp_path(tmp, "export"));
    const char *argv[] = {"export", d, "--format", "hf", out, NULL};
    CHECK(tp_run_shown(argv, tp_path(tmp, "export.out"), 0, NULL) == 0, "export");
    ut_kv *cfg = ut_hf_config_read(out, err, sizeof err);
    CHECK(cfg, "%s", err);
    const char *want[][2] = {{"model_type", "bart"}, {"d_model", "32"}, {"decoder_layers", "2"},
                             {"encoder_attention_heads", "4"}, {"max_position_embeddings", "64"},
                             {"scale_embedding", "true"}, {"num_labels", "2"}, {"dropout", "0"}};
    for (int i = 0; cfg && i < 8; i++) {
        const char *v = ut_kv_get(cfg, want[i][0]);
        CHECK(v && !strcmp(v, want[i][1]), "config.json %s: %s, expected %s", want[i][0], v ? v : "none",
              want[i][1]);
    }
    ut_kv_free(cfg);
    CHECK(tp_count_lines(tp_path(out, "tokenizer.json")) > 0, "tokenizer.json copied");
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "pretrained", out);
    ut_model *m = ut_model_create("bart", kv, 1, err, sizeof err);
    ut_kv_free(kv);
    CHECK(m, "%s", err);
    char *said = tp_slurp(tp_path(tmp, "export.out")), ckpt[1024] = "";
    const char *at = said ? strstr(said, "exported ") : NULL;
    if (at) sscanf(at + 9, "%1023s", ckpt);
    free(said);
    ut_st_file *best = ut_st_open(ckpt, err, sizeof err);
    CHECK(best && strstr(ckpt, "step_"), "%s: %s", ckpt, err);
    int same = 0;
    for (int p = 0; m && best && p < m->params.n; p++) {
        char name[300];
        snprintf(name, sizeof name, "model.%s", m->params.names[p]);
        const ut_st_tensor *t = ut_st_get(best, name);
        same += t && t->nbytes == (size_t)ut_nelem(m->params.t[p]) * sizeof(float) &&
                !memcmp(t->data, ut_f32(m->params.t[p]), t->nbytes);
    }
    CHECK(m && same == m->params.n && same == 95, "%d of 95 tensors equal to the best checkpoint's", same);
    ut_st_close(best);
    ut_model_free(m);
}

/* bad settings: exit 1 with the key and the reason */
static void test_refused(void) {
    const char *const cases[][2] = {
        {"data.max_len=100", "data.max_len: 100 is more than the model's max_position_embeddings 64"},
        {"model.pretrained=/nonexistent/dir", "model.pretrained (its tokenizer): /nonexistent/dir"},
        {"model.decoder_layers=4", "model.decoder_layers: set by model.pretrained"},
        {"model.task=causal_lm", "model.task: 'causal_lm' is not available for bart"},
    };
    hfe_check_refused(tmp, "bart.yml", cases, 4);
}

static void test_ddp_two_ranks(void) { hfe_check_two_ranks(tmp, "bart", "ddp", "k_proj.bias", 89); }
static void test_zero3_two_ranks(void) { hfe_check_two_ranks(tmp, "bart", "zero3", "k_proj.bias", 89); }

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "ut-hfbart")) return 1;
    hfe_write_config(tmp, "bart", "bart", "hf_bart_tiny", "  task: sequence_classification\n  dropout: 0\n", 24, 1);
    RUN(test_train_then_test);
    RUN(test_export);
    RUN(test_refused);
    /* the jobs under mpirun last: their environment turns LeakSanitizer off */
    tp_mpi_env(true);
    RUN(test_ddp_two_ranks);
    RUN(test_zero3_two_ranks);
    return tp_finish(TEST_SUMMARY(), tmp);
}
