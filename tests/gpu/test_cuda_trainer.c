/* The trainer on the GPU (device: cuda), end to end: each run is made on the
 * CPU and on the GPU, and their losses and weights must agree within
 * float32's (or the 16-bit types') rounding; on the GPU alone, two runs with
 * one seed and a run stopped and resumed must give the same checkpoint to
 * the bit; checkpoints cross between the devices both ways. Covered: the CNN
 * with evaluation and checkpoints, the tiny GPT-2 with dropout in fp32, bf16
 * and fp16 and with TF32 products, the tiny BERT fine-tuned with dropout in fp32 and bf16 and
 * trained as a masked language model (fp32, bf16) and as a token
 * classifier (fp32), the
 * bag-of-words classifier and `utrain test` on it, the dp,
 * ddp, zero3 and zero2 + ZeRO-Offload strategies with two ranks sharing the
 * one GPU (their gradients staged through host memory: NCCL takes a GPU per
 * rank, and dist.device_comm: direct is refused there), zero3 with hybrid
 * sharding on four, GPT-2 split over two ranks (tensor and pipeline
 * parallel), and sequence-to-sequence: BART fine-tuned with evaluation by
 * generation, T5 split over two ranks with dropout, then generating with
 * beam search in test mode, and T5 in three pipeline stages.
 *
 * UT_TRAINER_TEST_DEVICE=sim runs it on the simulated device instead (a
 * machine without a GPU: there every difference is 0). Skips, saying why,
 * where the device is missing. Prints each comparison's largest difference.
 *
 * The bounds are about ten times what an H200 gave (2026-11-25): float32
 * losses within 1e-7 and weights within 1e-6 relative (the CNN's 3e-5); bf16
 * within 1.2e-4 and 2.1e-3, fp16 within 4e-6 and 7e-4, the size of the CPU's
 * own bf16 and fp16 runs against its float32 run (1.1e-4 and 1.9e-3, 3e-6
 * and 6.6e-4): the GPU's 16-bit products round differently, not worse. A
 * bias that Adam drives from zero differs most (0.45 relative in bf16) and
 * is not bounded alone: the whole model is. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/backend.h"
#include "../../src/backend/cuda/attention.h"
#include "../../src/backend/cuda/cudnn_attn.h"
#include "../../src/backend/cuda/cudnn_conv.h"
#include "proc.h"
#include "test.h"

static char tmp[256], shard[512];
static const char *D = "cuda"; /* the device under test */

static const char *run_file(const char *run, const char *leaf) { return tp_run_file(tmp, run, leaf); }
static const char *ckpt(const char *run, int step) { return tp_ckpt_file(tmp, run, step); }
static int train(const char *name, const char *body, const char *device, const char *sets, int nproc) {
    return tp_train_in(tmp, name, body, device, sets, nproc);
}
static double loss_diff(const char *a, const char *b, int steps) {
    return tp_loss_diff(run_file(a, "metrics.jsonl"), run_file(b, "metrics.jsonl"), steps);
}
/* Relative L2 difference of the whole model (all "model.*" tensors as one
 * vector; -1 if unreadable); the tensor that differs most relative to its own
 * norm into worst / worst_rel. */
static double model_diff(const char *a, const char *b, char *worst, size_t n, double *worst_rel) {
    double whole = -1;
    *worst_rel = tp_tensors_diff(a, b, "model.", &whole, worst, n);
    return whole;
}

/* Run b (on D) against run a (on the CPU): losses within loss_tol, the
 * weights of the checkpoint at step within w_tol (relative L2 of the whole
 * model). */
static void agree(const char *name, const char *a, const char *b, int step, double loss_tol, double w_tol) {
    char worst[128];
    double wr, dl = loss_diff(a, b, step), dw = model_diff(ckpt(a, step), ckpt(b, step), worst, sizeof worst, &wr);
    printf("  %-13s losses within %.2e (allowed %.0e), weights within %.2e (allowed %.0e; most in %s, %.2e)\n",
           name, dl, loss_tol, dw, w_tol, worst, wr);
    CHECK(dl <= loss_tol, "%s: the losses on cpu and %s differ by %.3g relative", name, D, dl);
    CHECK(dw >= 0 && dw <= w_tol, "%s: the weights at step %d differ by %.3g relative", name, step, dw);
}

/* The same run on the CPU and on D, then agree(). */
static void both(const char *name, const char *body, const char *sets, int nproc, int step, double loss_tol,
                 double w_tol) {
    char a[64], b[64];
    snprintf(a, sizeof a, "%s_cpu", name);
    snprintf(b, sizeof b, "%s_dev", name);
    int ra = train(a, body, "cpu", sets, nproc), rb = train(b, body, D, sets, nproc);
    CHECK(ra == 0 && rb == 0, "%s: cpu exit %d, %s exit %d", name, ra, D, rb);
    if (!ra && !rb) agree(name, a, b, step, loss_tol, w_tol);
}

static char cnn[1024];

/* IDX files of n 28 x 28 images and their labels (the GPU machine has no
 * Fashion-MNIST): each class a bright band at its own rows, with noise. */
static bool write_idx(const char *images, const char *labels, int n) {
    FILE *fi = fopen(images, "wb"), *fl = fopen(labels, "wb");
    bool ok = fi && fl;
    if (ok) {
        const unsigned char hi[] = {0, 0, 8, 3}, hl[] = {0, 0, 8, 1};
        unsigned char dims[12] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16), (unsigned char)(n >> 8),
                                  (unsigned char)n, 0, 0, 0, 28, 0, 0, 0, 28};
        ok = fwrite(hi, 4, 1, fi) == 1 && fwrite(dims, 12, 1, fi) == 1 && fwrite(hl, 4, 1, fl) == 1 &&
             fwrite(dims, 4, 1, fl) == 1;
        uint32_t r = 12345;
        for (int i = 0; ok && i < n; i++) {
            unsigned char label = (unsigned char)(i % 10), px[784];
            for (int p = 0; p < 784; p++) {
                r = r * 1664525u + 1013904223u;
                int row = p / 28, band = (row / 3) % 10 == label;
                px[p] = (unsigned char)((band ? 160 : 0) + (r >> 26));
            }
            ok = fwrite(px, 784, 1, fi) == 1 && fwrite(&label, 1, 1, fl) == 1;
        }
    }
    if (fi) ok = fclose(fi) == 0 && ok;
    if (fl) ok = fclose(fl) == 0 && ok;
    return ok;
}

static char gpt2[1024];

/* The CPU side on im2col + sgemm (UTRAIN_CONV=im2col): its Winograd
 * transforms round differently from the GPU's direct sums, which AdamW
 * amplifies on parameters with tiny gradients (measured on an H200 and on
 * the emulator alike: 4.5e-5 on the losses, 1.4e-3 on the weights after six
 * steps; with im2col the losses agree to the bit and the weights within
 * 4e-6). */
static void test_cnn(void) {
    setenv("UTRAIN_CONV", "im2col", 1);
    both("cnn", cnn, "", 1, 6, 1e-6, 1e-4);
    unsetenv("UTRAIN_CONV");
}

static char bert[1024];

/* The tiny pretrained BERT fine-tuned for classification (unpadded: its
 * attention runs over packed sequences, the fused kernels of
 * ATTENTION_VARLEN), hidden and attention dropout 0.1, in fp32 and bf16 */
static void test_bert(void) {
    both("bert_fp32", bert, "train.precision=fp32", 1, 8, 1e-6, 1e-5);
    both("bert_bf16", bert, "train.precision=bf16", 1, 8, 1e-3, 1e-2);
}

static char mlm[1024];

/* KEY of the (first) dev line of run's metrics.jsonl; NaN without one */
static double dev_metric(const char *run, const char *key) {
    char *s = tp_slurp(run_file(run, "metrics.jsonl"));
    char *line = s ? strstr(s, "\"split\": \"dev\"") : NULL;
    double v = NAN;
    if (line) {
        while (line > s && line[-1] != '\n') line--;
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        v = tp_json_number(line, key);
    }
    free(s);
    return v;
}

/* The tiny pretrained BERT continuing its pretraining as a masked language
 * model (run_mlm's texts and masks; the head on the masked rows alone, the
 * decoder tied to the word embedding and fused into the loss, an
 * evaluation's accuracy from those rows' logits), dropout 0.1, fp32 and bf16.
 * SGD: AdamW would blow the rounding noise in the attention key biases'
 * gradients (zero in exact arithmetic; the fixture's biases are not) up to
 * steps of lr, as it does on every device. */
static void test_masked_lm(void) {
    both("mlm_fp32", mlm, "train.precision=fp32", 1, 8, 1e-6, 1e-5);
    both("mlm_bf16", mlm, "train.precision=bf16", 1, 8, 1e-3, 1e-2);
    double a = dev_metric("mlm_fp32_cpu", "accuracy"), b = dev_metric("mlm_fp32_dev", "accuracy");
    printf("  mlm_fp32      dev accuracy %g on cpu, %g on %s\n", a, b, D);
    CHECK(a >= 0 && a == b, "mlm: dev accuracy %g on cpu, %g on %s", a, b, D);
}

static char ner[1024];

/* The tiny BERT tagging words (token classification: run_ner's JSON Lines,
 * the packed rows' logits gathered back to their positions), fp32 with
 * dropout; the dev scores as seqeval's on both devices */
static void test_token_classification(void) {
    both("ner_fp32", ner, "train.precision=fp32", 1, 8, 1e-6, 1e-5);
    double a = dev_metric("ner_fp32_cpu", "accuracy"), b = dev_metric("ner_fp32_dev", "accuracy");
    double fa = dev_metric("ner_fp32_cpu", "f1"), fb = dev_metric("ner_fp32_dev", "f1");
    printf("  ner_fp32      dev accuracy %g and f1 %g on cpu, %g and %g on %s\n", a, fa, b, fb, D);
    CHECK(a > 0 && a == b && fa == fb, "ner: dev accuracy %g vs %g, f1 %g vs %g", a, b, fa, fb);
}

/* data/sst2_sample's training sentences as a text file, a line each, or
 * (tags) as run_ner's JSON Lines with film, movie and story tagged WORK */
static bool write_sentences(const char *path, bool tags) {
    FILE *in = fopen("data/sst2_sample/train.tsv", "r"), *out = fopen(path, "w");
    bool ok = in && out;
    char line[1024];
    while (ok && fgets(line, sizeof line, in)) {
        char *tab = strchr(line, '\t');
        if (!tab || !strncmp(line, "sentence\t", 9)) continue;
        *tab = 0;
        if (!tags) {
            ok = fprintf(out, "%s\n", line) > 0;
            continue;
        }
        char words[2048] = "", labels[2048] = "";
        size_t w = 0, t = 0;
        for (char *tok = strtok(line, " "); tok && w < 1800 && t < 1800; tok = strtok(NULL, " ")) {
            bool work = !strcmp(tok, "film") || !strcmp(tok, "movie") || !strcmp(tok, "story");
            if (strchr(tok, '"') || strchr(tok, '\\')) continue; /* no JSON escapes needed */
            w += (size_t)snprintf(words + w, sizeof words - w, "%s\"%s\"", w ? ", " : "", tok);
            t += (size_t)snprintf(labels + t, sizeof labels - t, "%s\"%s\"", t ? ", " : "", work ? "B-WORK" : "O");
        }
        ok = fprintf(out, "{\"tokens\": [%s], \"ner_tags\": [%s]}\n", words, labels) > 0;
    }
    if (in) fclose(in);
    if (out) ok = fclose(out) == 0 && ok;
    return ok;
}

/* whether run's log holds what */
static bool log_says(const char *run, const char *what) {
    char *log = tp_slurp(run_file(run, "logger_logs/training_0.log"));
    bool ok = log && strstr(log, what);
    free(log);
    return ok;
}

static void test_gpt2_precisions(void) {
    both("gpt2_fp32", gpt2, "train.precision=fp32", 1, 8, 1e-6, 1e-5);
    both("gpt2_bf16", gpt2, "train.precision=bf16", 1, 8, 1e-3, 1e-2);
    both("gpt2_fp16", gpt2, "train.precision=fp16", 1, 8, 1e-4, 5e-3);
    if (!strcmp(D, "cuda")) { /* the run says which attention kernels it runs (heads of 16 here: float32) */
        CHECK(log_says("gpt2_fp32_dev", "Attention = utrain's fused flash attention in float32"),
              "the fp32 run does not say which attention kernels it runs");
        /* GPT-2's causal attention in training: cuDNN's by default where it runs */
        char why[512];
        CHECK(log_says("gpt2_bf16_dev", ut_cuda_cudnn_attn_default(why, sizeof why)
                                            ? "Attention = cuDNN's fused flash attention for causal self-attention "
                                              "in training"
                                            : "Attention = utrain's fused flash attention on the tensor cores (mma.sync"),
              "the bf16 run does not say which attention kernels it runs");
        CHECK(log_says("gpt2_bf16_cpu", "Precision = bf16") && !log_says("gpt2_bf16_cpu", "Attention = "),
              "the CPU's run names an attention path (it has one)");
        /* MFU against the GPU's peak for the run's products (the emulator's: an estimate) */
        CHECK(log_says("gpt2_fp32_dev", "MFU = the products' model FLOPs over ") &&
                  log_says("gpt2_fp32_dev", "float32 dense peak") &&
                  log_says("gpt2_bf16_dev", "bf16/fp16 dense peak") &&
                  log_says("gpt2_bf16_cpu", "MFU: not logged (utrain knows no peak rate for the cpu device"),
              "the runs do not say what their MFU is measured against");
    }
    /* the scale of 16-bit rounding itself: the CPU's bf16 and fp16 runs against its fp32 run */
    for (int i = 0; i < 2; i++) {
        char worst[128], run[32];
        double wr;
        snprintf(run, sizeof run, "gpt2_%s_cpu", i ? "fp16" : "bf16");
        double d = model_diff(ckpt("gpt2_fp32_cpu", 8), ckpt(run, 8), worst, sizeof worst, &wr);
        printf("  (cpu %s against cpu fp32: weights within %.2e, most in %s, %.2e; losses within %.2e)\n",
               i ? "fp16" : "bf16", d, worst, wr, loss_diff("gpt2_fp32_cpu", run, 8));
    }
}

/* GPT-2's attention on cuDNN's fused flash attention (UT_CUDA_ATTN=cudnn)
 * in bf16: against the CPU's bf16 run within the default kernels' bounds,
 * and two runs with one seed the same bits (cuDNN's deterministic
 * backward). On cuda, where the build has the cuDNN frontend and cuDNN
 * opens; else says why. */
static void test_cudnn_attention(void) {
    char what[64], why[768];
    size_t ws;
    if (strcmp(D, "cuda")) return;
    if (!ut_cuda_cudnn_attn_built())
        ut_cuda_cudnn_attn_plan(&(ut_cudnn_attn){1, 64, 64, 1, 1}, UT_CUDNN_ATTN_TRAIN, &ws, why, sizeof why);
    if (!ut_cuda_cudnn_attn_built() || ut_cuda_cudnn_probe(what, sizeof what, why, sizeof why)) {
        printf("  skip: %s\n", why);
        return;
    }
    setenv("UT_CUDA_ATTN", "cudnn", 1);
    int ra = train("gpt2_bf16_cudnn", gpt2, D, "train.precision=bf16", 1);
    int rb = train("gpt2_bf16_cudnn_again", gpt2, D, "train.precision=bf16", 1);
    unsetenv("UT_CUDA_ATTN");
    CHECK(ra == 0 && rb == 0, "UT_CUDA_ATTN=cudnn: exit %d, again %d", ra, rb);
    if (ra || rb) return;
    agree("bf16 cudnn", "gpt2_bf16_cpu", "gpt2_bf16_cudnn", 8, 1e-3, 1e-2);
    CHECK(log_says("gpt2_bf16_cudnn", "Attention = cuDNN's fused flash attention"),
          "the UT_CUDA_ATTN=cudnn run does not say it runs cuDNN's attention");
    CHECK(tp_same_file(ckpt("gpt2_bf16_cudnn", 8), ckpt("gpt2_bf16_cudnn_again", 8)),
          "UT_CUDA_ATTN=cudnn: two runs with one seed give different checkpoints");
}

/* train.tf32 (Hugging Face's tf32): the float32 products on the TF32 tensor
 * cores. The run says so, and its losses differ from the exact float32 run's
 * by TF32's rounding (10 mantissa bits), not more. Refused on sim. */
static void test_tf32(void) {
    int rc = train("gpt2_tf32", gpt2, D, "tf32=true", 1);
    if (strcmp(D, "cuda")) {
        CHECK(rc != 0, "tf32: true on %s is refused", D);
        return;
    }
    CHECK(rc == 0, "a run with tf32: true (exit %d)", rc);
    char *log = tp_slurp(run_file("gpt2_tf32", "logger_logs/training_0.log"));
    CHECK(log && strstr(log, "TF32 = on"), "the run says TF32 is on:\n%s", log ? log : "(no log)");
    free(log);
    double d = loss_diff("gpt2_fp32_dev", "gpt2_tf32", 8);
    printf("  tf32 losses within %.2e of the exact float32 run's (allowed 1e-02, and not 0)\n", d);
    CHECK(d > 0 && d <= 1e-2, "TF32 losses differ from the exact run's by %.3g relative", d);
}

/* Two runs with one seed on the GPU: the same bits (no atomics in the
 * gradient reductions; dropout masks from the seed). */
static void test_same_bits(void) {
    const char *p[2] = {"fp32", "bf16"};
    for (int i = 0; i < 2; i++) {
        char name[32], ref[32], set[64];
        snprintf(name, sizeof name, "again_%s", p[i]);
        snprintf(ref, sizeof ref, "gpt2_%s_dev", p[i]);
        snprintf(set, sizeof set, "train.precision=%s", p[i]);
        CHECK(train(name, gpt2, D, set, 1) == 0, "%s", name);
        CHECK(tp_same_file(ckpt(name, 8), ckpt(ref, 8)), "%s: two runs with one seed give different checkpoints", p[i]);
    }
}

/* Stopped at step 4 and resumed on the GPU: the straight run's step-8
 * checkpoint to the bit. A CPU checkpoint resumed on the GPU, and a GPU
 * checkpoint resumed on the CPU, end near the other device's straight run. */
static void test_resume(void) {
    CHECK(train("r_dev", gpt2, D, "train.max_steps=4", 1) == 0, "the first half");
    CHECK(train("r_dev", gpt2, D, "continue_training=true", 1) == 0, "the resume");
    CHECK(tp_same_file(ckpt("r_dev", 8), ckpt("gpt2_fp32_dev", 8)),
          "stop at 4 and resume on %s differs from the straight run", D);
    char run[600];
    snprintf(run, sizeof run, "%s/runs/x_dev", tmp);
    CHECK(tp_plant_checkpoint(ckpt("gpt2_fp32_cpu", 4), run), "plant");
    CHECK(train("x_dev", gpt2, D, "continue_training=true", 1) == 0, "the cpu -> %s resume", D);
    double d1 = tp_weights_rel_diff(ckpt("x_dev", 8), ckpt("gpt2_fp32_cpu", 8));
    snprintf(run, sizeof run, "%s/runs/x_cpu", tmp);
    CHECK(tp_plant_checkpoint(ckpt("gpt2_fp32_dev", 4), run), "plant");
    CHECK(train("x_cpu", gpt2, "cpu", "continue_training=true", 1) == 0, "the %s -> cpu resume", D);
    double d2 = tp_weights_rel_diff(ckpt("x_cpu", 8), ckpt("gpt2_fp32_dev", 8));
    printf("  resumes    cpu->%s within %.2e, %s->cpu within %.2e (allowed 5e-04)\n", D, d1, D, d2);
    CHECK(d1 >= 0 && d1 <= 5e-4, "a CPU checkpoint resumed on %s ends %.3g from the CPU's run", D, d1);
    CHECK(d2 >= 0 && d2 <= 5e-4, "a %s checkpoint resumed on the CPU ends %.3g from the %s run", D, d2, D);
}

/* bow on the SST-2 sample, then `utrain test` on each device: at most one
 * prediction in fifty differs (a near-tie may round the other way). */
static void test_bow_and_test_mode(void) {
    const char *bow = "model: {name: bow, n_embd: 8, hidden: 8}\n"
                      "data: {name: tsv_text, train_path: data/sst2_sample/train.tsv,\n"
                      "       dev_path: data/sst2_sample/dev.tsv, test_path: data/sst2_sample/dev.tsv, max_len: 16}\n"
                      "train: {epochs: 1, batch_size: 16, log_interval: 1, progress: lines}\n";
    both("bow", bow, "", 1, 15, 1e-6, 1e-5);
    /* the other optimizers' device steps, end to end */
    both("bow_lion", bow, "optim.name=lion optim.lr=1e-3", 1, 15, 1e-6, 1e-5);
    both("bow_adafactor", bow, "optim.name=adafactor optim.adafactor_beta1=0.9 optim.lr=0.05", 1, 15, 1e-6, 1e-5);
    const char *runs[2] = {"bow_cpu", "bow_dev"};
    char *res[2];
    for (int i = 0; i < 2; i++) {
        char run[600], out[600];
        snprintf(run, sizeof run, "%s/runs/%s", tmp, runs[i]);
        snprintf(out, sizeof out, "%s/test_%s.out", tmp, runs[i]);
        CHECK(tp_run((const char *[]){"test", run, NULL}, out) == 0, "utrain test on %s", runs[i]);
        res[i] = tp_slurp(run_file(runs[i], "dev_predictions.tsv"));
    }
    CHECK(res[0] && res[1], "the predictions files");
    if (res[0] && res[1]) {
        int lines = 0, differ = 0;
        for (char *p = res[0], *q = res[1]; *p && *q;) {
            char *ep = strchr(p, '\n'), *eq = strchr(q, '\n');
            if (!ep || !eq) break;
            lines++;
            differ += (ep - p != eq - q) || memcmp(p, q, (size_t)(ep - p));
            p = ep + 1;
            q = eq + 1;
        }
        printf("  utrain test: %d of %d predictions differ\n", differ, lines);
        CHECK(lines > 1 && differ * 50 <= lines, "%d of %d predictions differ", differ, lines);
    }
    free(res[0]);
    free(res[1]);
}

/* Two ranks (or dp's two workers) sharing the one GPU, against the same
 * strategy on the CPU. */
static void test_distributed(void) {
    both("dp", gpt2, "dist.strategy=dp dist.nproc_per_node=2", 1, 8, 1e-6, 1e-5);
    both("ddp", gpt2, "dist.strategy=ddp", 2, 8, 1e-6, 1e-5);
    both("zero3", gpt2, "dist.strategy=zero3", 2, 8, 1e-6, 1e-5);
    /* ZeRO-Offload: the update on the host CPU, the model on the GPU; the
     * gradient down bucket by bucket during backward (small buckets: many) */
    both("zero2off", gpt2, "dist.strategy=zero2 dist.offload_optimizer=cpu dist.bucket_mb=0.02", 2, 8, 1e-6, 1e-5);
    /* zero1: the shard's part of each all-reduced bucket, copied out of the pinned buffer */
    both("zero1off", gpt2, "dist.strategy=zero1 dist.offload_optimizer=cpu dist.bucket_mb=0.02", 2, 8, 1e-6, 1e-5);
    for (int i = 0; i < 2; i++) {
        char *offlog = tp_slurp(run_file(i ? "zero1off_dev" : "zero2off_dev", "logger_logs/training_0.log"));
        CHECK(offlog && strstr(offlog, "the gradient reaches it bucket by bucket during backward"),
              "zero%doff: the log does not say the gradient streams to the host", i ? 1 : 2);
        free(offlog);
    }
    /* the ranks over TCP (torchrun's way) instead of MPI: the device's
     * buffers staged through host memory the same way */
    both("zero3tcp", gpt2, "dist.strategy=zero3 dist.launcher=tcp", 2, 8, 1e-6, 1e-5);
    /* hybrid sharding: zero3 in 2 groups of 2 ranks, the replicas' sum of
     * each gradient shard staged through host memory */
    both("zero3hyb", gpt2, "dist.strategy=zero3 dist.shard_size=2", 4, 8, 1e-6, 1e-5);
    /* how the gradients travel (dist.device_comm): two ranks on one GPU
     * cannot use NCCL, so auto stages them through host memory, says why,
     * and direct is refused naming the ranks; on sim (a device per process)
     * both go direct */
    bool sim = !strcmp(D, "sim");
    char *log = tp_slurp(run_file("ddp_dev", "logger_logs/training_0.log"));
#ifdef UT_WITH_NCCL
    const char *why = "ranks 0 and 1 share one cuda device";
#else /* a build without NCCL (`make NCCL=0`) says that first */
    const char *why = "rank 0 cannot use them: this build has no collectives on cuda memory";
#endif
    char want[256];
    snprintf(want, sizeof want, "%s", sim ? "(device sim): direct, the simulated device's collectives" : "");
    if (!sim) snprintf(want, sizeof want, "(device cuda): mpi (through host memory: %s", why);
    CHECK(log && strstr(log, want), "ddp on %s: the log does not say '%s'", D, want);
    free(log);
    /* the two ranks on one GPU (same host, same PCI bus id) share its peak for MFU */
    if (!sim)
        CHECK(log_says("ddp_dev", ", shared by 2 ranks"), "ddp on one GPU: the log does not say the ranks share its peak");
    int rc = train("ddp_direct", gpt2, D, "dist.strategy=ddp dist.device_comm=direct", 2);
    if (sim) {
        CHECK(rc == 0, "ddp with dist.device_comm=direct on sim: exit %d", rc);
    } else {
        char out[512];
        snprintf(out, sizeof out, "%s/ddp_direct.out", tmp);
        char *o = tp_slurp(out);
        char refused[256];
        snprintf(refused, sizeof refused, "dist.device_comm: direct: %s", why);
        CHECK(rc != 0 && o && strstr(o, refused), "ddp with dist.device_comm=direct on one GPU: exit %d, output %s",
              rc, o ? o : "(none)");
        free(o);
    }
}

/* The model split over two ranks sharing the GPU, against the same split on
 * the CPU: GPT-2 tensor-parallel (heads and features) and pipeline-parallel
 * (layers). */
static void test_model_parallel(void) {
    both("tp2", gpt2, "dist.tensor_parallel=2", 2, 8, 1e-6, 1e-5);
    both("pp2", gpt2, "dist.pipeline_parallel=2", 2, 8, 1e-6, 1e-5);
}

/* Ranks on GPUs of their own: gradients, ZeRO's parts, tensor-parallel sums
 * and the pipeline's tied embedding go through NCCL on the devices' memory
 * (dist.device_comm: direct), against the same runs on the CPU; DDP's
 * buckets compressed to bf16 are converted on the device. Needs two GPUs:
 * the CUDA emulator gives itself two (UT_EMU_GPUS=2, its NCCL between the
 * processes in shared memory); a real machine runs these rows when
 * UT_GPU_TEST_GPUS says it has two or more. */
static void test_nccl_ranks(void) {
#ifdef UT_CUDA_EMU
    setenv("UT_EMU_GPUS", "2", 1);
#else
    const char *g = getenv("UT_GPU_TEST_GPUS");
    if (strcmp(D, "cuda") || !g || atoi(g) < 2) {
        printf("  skip: one GPU here (UT_GPU_TEST_GPUS=N with N >= 2 runs these rows on a machine with more)\n");
        return;
    }
#endif
    /* each against the CPU's run of the same strategy (the CPU has no
     * device_comm; the runs of test_distributed and test_model_parallel
     * where there is one) */
    /* the last two: ZeRO-Offload's gradient copied down after each bucket's
     * reduce-scatter (zero2) or the shard's part after its all-reduce
     * (zero1), on the communicator's stream */
    const char *sets[] = {"dist.strategy=ddp", "dist.strategy=zero2", "dist.strategy=zero3", "dist.tensor_parallel=2",
                          "dist.pipeline_parallel=2", "dist.strategy=ddp dist.comm_hook=bf16",
                          "dist.strategy=zero2 dist.offload_optimizer=cpu dist.bucket_mb=0.02",
                          "dist.strategy=zero1 dist.offload_optimizer=cpu dist.bucket_mb=0.02"};
    const char *names[] = {"nccl_ddp", "nccl_zero2", "nccl_zero3", "nccl_tp2", "nccl_pp2", "nccl_ddp_bf16",
                           "nccl_zero2off", "nccl_zero1off"};
    const char *refs[] = {"ddp_cpu",      "zero2_cpu", "zero3_cpu", "tp2_cpu", "pp2_cpu", "ddp_bf16_cpu",
                          "zero2_cpu",    "zero1off_cpu"};
    for (int i = 0; i < 8; i++) {
        if (i == 1 || i == 5) CHECK(train(refs[i], gpt2, "cpu", sets[i], 2) == 0, "%s on the CPU", sets[i]);
        char s[160];
        snprintf(s, sizeof s, "%s dist.device_comm=direct", sets[i]);
        int rc = train(names[i], gpt2, D, s, 2);
        CHECK(rc == 0, "%s on %s: exit %d", s, D, rc);
        if (rc) continue;
        agree(names[i], refs[i], names[i], 8, 1e-6, 1e-5);
        char *log = tp_slurp(run_file(names[i], "logger_logs/training_0.log"));
        CHECK(log && strstr(log, i == 4 ? "last stages (device cuda): direct, NCCL" : "(device cuda): direct, NCCL"),
              "%s: the log does not say the ranks went direct through NCCL", names[i]);
        free(log);
    }
#ifdef UT_CUDA_EMU
    unsetenv("UT_EMU_GPUS");
#endif
}

static char bart[2048], t5[2048];

/* Sequence-to-sequence on the GPU against the CPU: the tiny pretrained BART
 * fine-tuned to copy a sentence's first words, evaluated by greedy
 * generation (bleu, rougeL, exact_match on the dev set); a T5 from scratch
 * (relative positions, gated GELU) split over two ranks, then `utrain test`
 * generating with beam search on the GPU. The generations themselves may
 * differ where two tokens' scores are within rounding, so the losses and
 * weights are what must agree, and the generation runs must complete. */
static void test_seq2seq(void) {
    both("bart", bart, "", 1, 8, 1e-6, 1e-5);
    char *o = tp_slurp(tp_path(tmp, "bart_dev.out"));
    CHECK(o && strstr(o, "eval  step 8  dev:") && strstr(o, "bleu") && strstr(o, "exact_match"),
          "BART on %s: no dev evaluation by generation in its output", D);
    free(o);
    both("t5tp2", t5, "dist.tensor_parallel=2", 2, 8, 1e-6, 1e-5);
    /* in 3 pipeline stages: the middle one holds both relative-position tables */
    both("t5pp3", t5, "dist.pipeline_parallel=3 dist.pipeline_blocks=1,2,1", 3, 8, 1e-6, 1e-5);
    char run[600], out[600];
    snprintf(run, sizeof run, "%s/runs/t5tp2_dev", tmp);
    snprintf(out, sizeof out, "%s/t5_test.out", tmp);
    CHECK(tp_run((const char *[]){"test", run, "--nproc", "2", NULL}, out) == 0, "utrain test --nproc 2 on %s's T5", D);
    CHECK(tp_count_lines(run_file("t5tp2_dev", "test_generations.tsv")) == 17,
          "T5's test generations on %s: a header and 16 rows", D);
}

/* A step too large for the GPU's memory ends the run with exit status 1 and
 * a message that says what to change (not an abort with a core dump), on
 * one rank and on two under mpirun; with train.auto_find_batch_size the run
 * starts again at half the batch until one fits. Only the CUDA emulator can
 * give the GPU less memory (UT_EMU_MEM_BYTES): 80 MiB, which the tiny GPT-2
 * outgrows in its first step. */
static void test_out_of_memory(void) {
#ifndef UT_CUDA_EMU
    printf("  skip: only the CUDA emulator can run a GPU out of memory on purpose\n");
#else
    if (strcmp(D, "cuda")) return;
    setenv("UT_EMU_MEM_BYTES", "83886080", 1);
    for (int nproc = 1; nproc <= 2; nproc++) {
        char name[32], out[512];
        snprintf(name, sizeof name, "oom%d", nproc);
        snprintf(out, sizeof out, "%s/%s.out", tmp, name);
        int rc = tp_train_expect(tmp, name, gpt2, D, "train.batch_size=1024 dist.strategy=ddp", nproc, 1);
        char *o = tp_slurp(out);
        CHECK(rc == 1 && o && strstr(o, "utrain: error: device cuda:0 is out of memory") &&
                  strstr(o, "train.batch_size") && strstr(o, "utrain plan") && !strstr(o, "fatal"),
              "%d rank(s): exit %d, said:\n%s", nproc, rc, o ? o : "(nothing)");
        free(o);
    }
    /* train.auto_find_batch_size: the same run starts again at smaller
     * batches until one fits. 80 MiB is too little for any batch (the
     * arena's first chunk and cuBLASLt's workspace alone take most of it);
     * with 128 MiB, 1024 and 512 run out and 256 fits. */
    setenv("UT_EMU_MEM_BYTES", "134217728", 1);
    char out[512];
    snprintf(out, sizeof out, "%s/oom_auto.out", tmp);
    int rc = tp_train_expect(tmp, "oom_auto", gpt2, D,
                             "train.batch_size=1024 train.max_steps=1 train.auto_find_batch_size=true", 1, 0);
    char *o = tp_slurp(out);
    CHECK(rc == 0 && o && strstr(o, "out of memory at train.batch_size 1024; starting again at 512") &&
              strstr(o, "auto_find_batch_size: the run trained at train.batch_size 256") && strstr(o, "Training done"),
          "auto_find_batch_size on %s: exit %d:\n%s", D, rc, o ? o : "(nothing)");
    free(o);
    unsetenv("UT_EMU_MEM_BYTES");
#endif
}

int main(int argc, char **argv) {
    (void)argc;
    const char *e = getenv("UT_TRAINER_TEST_DEVICE");
    if (e && *e) D = e;
    ut_device dev = !strcmp(D, "sim") ? UT_SIM : UT_CUDA;
    char why[256];
    if (strcmp(D, "sim") && strcmp(D, "cuda")) {
        fprintf(stderr, "UT_TRAINER_TEST_DEVICE: '%s' is not cuda or sim\n", D);
        return 1;
    }
    if (ut_backend_check(dev, why, sizeof why)) {
        printf("skip: %s\n", why);
        return TEST_SUMMARY();
    }
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-gputrain") || !tp_tokenize_sample(tmp, shard, sizeof shard)) return 1;
    snprintf(gpt2, sizeof gpt2,
             "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 16, dropout: 0.1}\n"
             "data: {name: tokens, train_path: %s, seq_len: 16}\n"
             "train: {max_steps: 8, batch_size: 4, log_interval: 1, eval_strategy: \"no\", save_strategy: steps,\n"
             "        save_interval: 4, save_total_limit: 0, progress: lines}\n"
             "dist: {timeout_s: 120}\n",
             shard);
    char images[300], labels[300];
    snprintf(images, sizeof images, "%s/images.idx", tmp);
    snprintf(labels, sizeof labels, "%s/labels.idx", tmp);
    if (!write_idx(images, labels, 600)) return 1;
    snprintf(cnn, sizeof cnn,
             "model: {name: cnn}\n"
             "data: {name: idx_images, train_images: %s, train_labels: %s, dev_size: 200}\n"
             "train: {max_steps: 6, batch_size: 8, log_interval: 1, eval_strategy: steps, eval_interval: 3,\n"
             "        save_strategy: steps, save_interval: 3, progress: lines}\n",
             images, labels);
    if (!tp_write_pairs(tmp, "train", 64) || !tp_write_pairs(tmp, "dev", 16)) return 1;
    snprintf(bert, sizeof bert,
             "model: {name: bert, pretrained: tests/parity/fixtures/hf_bert_tiny, task: sequence_classification}\n"
             "data: {name: tsv_text, train_path: data/sst2_sample/train.tsv, dev_path: data/sst2_sample/dev.tsv,\n"
             "       max_len: 32}\n"
             "train: {max_steps: 8, batch_size: 8, log_interval: 1, eval_strategy: steps, eval_interval: 8,\n"
             "        save_strategy: steps, save_interval: 8, progress: lines}\n"
             "optim: {name: adamw, lr: 2.0e-3}\n");
    char texts[300];
    snprintf(texts, sizeof texts, "%s/sentences.txt", tmp);
    char tagged[300];
    snprintf(tagged, sizeof tagged, "%s/tagged.jsonl", tmp);
    if (!write_sentences(texts, false) || !write_sentences(tagged, true)) return 1;
    snprintf(ner, sizeof ner,
             "model: {name: bert, pretrained: tests/parity/fixtures/hf_bert_tok_tiny, ignore_mismatched_sizes: true}\n"
             "data: {name: tagged_text, train_path: %s, dev_path: %s, max_len: 32}\n"
             "train: {max_steps: 8, batch_size: 8, log_interval: 1, eval_strategy: steps, eval_interval: 8,\n"
             "        save_strategy: steps, save_interval: 8, progress: lines}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n",
             tagged, tagged);
    snprintf(mlm, sizeof mlm,
             "model: {name: bert, pretrained: tests/parity/fixtures/hf_bert_mlm_tiny}\n"
             "data: {name: mlm_text, train_path: %s, dev_path: %s, max_len: 32}\n"
             "train: {max_steps: 8, batch_size: 8, log_interval: 1, eval_strategy: steps, eval_interval: 8,\n"
             "        save_strategy: steps, save_interval: 8, progress: lines}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n",
             texts, texts);
    snprintf(bart, sizeof bart,
             "model: {name: bart, pretrained: tests/parity/fixtures/hf_bart_gen_tiny, dropout: 0}\n"
             "data: {name: seq2seq_text, train_path: %s/train_inputs.txt, train_target_path: %s/train_targets.txt,\n"
             "       dev_path: %s/dev_inputs.txt, dev_target_path: %s/dev_targets.txt, max_source_len: 32,\n"
             "       max_target_len: 16}\n"
             "train: {max_steps: 8, batch_size: 8, log_interval: 1, eval_strategy: steps, eval_interval: 8,\n"
             "        save_strategy: steps, save_interval: 8, progress: lines}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
             "generate: {eval: true, max_new_tokens: 4}\n",
             tmp, tmp, tmp, tmp);
    snprintf(t5, sizeof t5,
             "model: {name: t5, vocab_size: 2004, d_model: 32, d_kv: 8, d_ff: 64, num_layers: 2, num_heads: 4,\n"
             "        feed_forward_proj: gated-gelu, dropout_rate: 0.1}\n"
             "data: {name: seq2seq_text, tokenizer: tests/parity/fixtures/t5_unigram, source_prefix: \"first words: \",\n"
             "       train_path: %s/train_inputs.txt, train_target_path: %s/train_targets.txt,\n"
             "       test_path: %s/dev_inputs.txt, test_target_path: %s/dev_targets.txt,\n"
             "       max_source_len: 48, max_target_len: 16}\n"
             "train: {max_steps: 8, batch_size: 8, log_interval: 1, eval_strategy: no,\n"
             "        save_strategy: steps, save_interval: 8, progress: lines}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
             "generate: {max_new_tokens: 6, num_beams: 2}\n"
             "dist: {timeout_s: 120}\n",
             tmp, tmp, tmp, tmp);
    printf("device under test: %s\n", D);
    RUN(test_cnn);
    RUN(test_gpt2_precisions);
    RUN(test_cudnn_attention);
    RUN(test_tf32);
    RUN(test_bert);
    RUN(test_masked_lm);
    RUN(test_token_classification);
    RUN(test_same_bits);
    RUN(test_bow_and_test_mode);
    RUN(test_resume);
    tp_mpi_env(true);
    RUN(test_distributed);
    RUN(test_model_parallel);
    RUN(test_nccl_ranks);
    RUN(test_seq2seq);
    RUN(test_out_of_memory);
    return tp_finish(TEST_SUMMARY(), tmp);
}
