/* The GPU's dense peak rate for the trainer's MFU (model FLOPs utilization):
 * NVIDIA's published figures for the data-centre parts whose names say
 * which one they are, else an estimate from the multiprocessors, the boost
 * clock and the architecture's tensor-core rate per multiprocessor and
 * clock. The published figures are the datasheets' dense rates (half of
 * their "with sparsity" ones); they are what PyTorch's, Lightning's and
 * llm.c's MFU figures divide by, so utrain's compare with theirs. */
#include <cuda_runtime_api.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "cuda.h"
#include "../backend.h"

/* TFLOP/s: bf16/fp16 with float32 accumulation, TF32, float32 */
static const struct {
    const char *words; /* every one of them is a word of the device's name */
    const char *part;
    double rate[3];
} published[] = {
    {"H100 PCIe", "H100 PCIe", {756.5, 378.0, 51.2}},
    {"H100 NVL", "H100 NVL", {835.5, 417.5, 60.0}},
    {"H200 NVL", "H200 NVL", {835.5, 417.5, 60.0}},
    {"H100", "H100 SXM", {989.4, 494.7, 66.9}},
    {"H200", "H200 SXM", {989.4, 494.7, 66.9}},
    {"GH200", "GH200", {989.4, 494.7, 66.9}},
    {"A100", "A100", {312.0, 156.0, 19.5}},
    {"L40S", "L40S", {362.05, 183.0, 91.6}},
    {"L4", "L4", {121.0, 60.0, 30.3}},
    {"A10", "A10", {125.0, 62.5, 31.2}},
};

/* whether word (up to its end or a space) is one of name's words (split at
 * spaces and hyphens), letters compared without case */
static bool has_word(const char *name, const char *word, size_t wn) {
    for (const char *p = name; *p;) {
        while (*p == ' ' || *p == '-') p++;
        size_t k = 0;
        while (p[k] && p[k] != ' ' && p[k] != '-') k++;
        if (k == wn) {
            size_t i = 0;
            while (i < k && tolower((unsigned char)p[i]) == tolower((unsigned char)word[i])) i++;
            if (i == k) return true;
        }
        p += k;
    }
    return false;
}

static bool matches(const char *name, const char *words) {
    for (const char *w = words; *w;) {
        size_t k = strcspn(w, " ");
        if (!has_word(name, w, k)) return false;
        w += k;
        while (*w == ' ') w++;
    }
    return true;
}

static const char *kind_name(int kind) {
    return kind == UT_PEAK_16 ? "bf16/fp16" : kind == UT_PEAK_TF32 ? "TF32" : "float32";
}

double ut_cuda_peak_of(const char *name, int major, int minor, int sms, int clock_khz, int kind, char *what,
                       size_t n) {
    if (kind < UT_PEAK_FP32 || kind > UT_PEAK_16) {
        snprintf(what, n, "no such kind of product (%d)", kind);
        return 0;
    }
    int col = kind == UT_PEAK_16 ? 0 : kind == UT_PEAK_TF32 ? 1 : 2;
    for (size_t i = 0; i < sizeof published / sizeof published[0]; i++)
        if (matches(name, published[i].words)) {
            snprintf(what, n, "%s (%s): NVIDIA's published %s dense peak", name, published[i].part, kind_name(kind));
            return published[i].rate[col] * 1e12;
        }
    /* FLOPs per multiprocessor and clock: tensor cores in 16 bits with
     * float32 accumulation, TF32 at half that, and the float32 CUDA cores
     * (two per fused multiply-add). GeForce parts of sm_86/89 accumulate in
     * float32 at half the 16-bit rate: the figure is their ceiling. */
    double per[3];
    if (major == 8 && minor == 0) per[0] = 2048, per[2] = 128;
    else if (major == 8) per[0] = 1024, per[2] = 256;
    else if (major == 9) per[0] = 4096, per[2] = 256;
    else {
        snprintf(what, n, "%s (compute capability %d.%d): utrain knows no peak rate for it; give "
                          "train.peak_tflops", name, major, minor);
        return 0;
    }
    per[1] = per[0] / 2;
    if (sms <= 0 || clock_khz <= 0) {
        snprintf(what, n, "%s: the runtime did not say its multiprocessors and clock; give train.peak_tflops", name);
        return 0;
    }
    snprintf(what, n, "%s: %s dense peak estimated as %d multiprocessors x %.2f GHz x %.0f FLOPs per clock", name,
             kind_name(kind), sms, clock_khz * 1e-6, per[col]);
    return (double)sms * clock_khz * 1e3 * per[col];
}

double ut_cuda_peak_flops(int kind, char *what, size_t n) {
    int dev = 0, major = 0, minor = 0, sms = 0, khz = 0;
    struct cudaDeviceProp p;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError();
        snprintf(what, n, "the CUDA runtime did not describe the device; give train.peak_tflops");
        return 0;
    }
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev) != cudaSuccess) {
        cudaGetLastError();
        sms = khz = 0;
    }
    p.name[sizeof p.name - 1] = 0;
    return ut_cuda_peak_of(p.name, major, minor, sms, khz, kind, what, n);
}
