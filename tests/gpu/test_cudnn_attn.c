/* cuDNN's fused attention graphs (src/backend/cuda/cudnn_attn.cpp) as the
 * cuDNN frontend validates them for a Hopper GPU (compute capability 9.0),
 * with the cuDNN library but no GPU: the tensors' shapes and strides over
 * packed qkv, the causal mask, the statistics, the deterministic backward,
 * and the support rules of the loaded cuDNN's version. (That cuDNN's
 * engines run them, and agree with the CPU, is test_cuda_ops'
 * test_cudnn_attention on a GPU.) Skips, saying why, in a build without the
 * frontend's headers or where the cuDNN library cannot be opened. */
#include <stdio.h>
#include <string.h>

#include "../../src/backend/cuda/cudnn_attn.h"
#include "test.h"

static char why[1024];

/* whether the checks can run here; prints the reason when not */
static bool can_run(void) {
    if (!ut_cuda_cudnn_attn_built()) {
        ut_cudnn_attn s = {1, 8, 64, 1, 1};
        size_t ws;
        ut_cuda_cudnn_attn_plan(&s, UT_CUDNN_ATTN_TRAIN, &ws, why, sizeof why);
        CHECK(strstr(why, "fetch-cudnn-frontend.sh"), "the stub's message does not say what to run: %s", why);
        printf("  skip: %s\n", why);
        return false;
    }
    void *dl;
    if (ut_cuda_cudnn_lib(&dl, NULL, why, sizeof why)) {
        printf("  skip: %s\n", why);
        return false;
    }
    return true;
}

static void accepts(const char *what, ut_cudnn_attn s) {
    const int passes[3] = {UT_CUDNN_ATTN_INFER, UT_CUDNN_ATTN_TRAIN, UT_CUDNN_ATTN_BWD};
    for (int p = 0; p < 3; p++) {
        int r = ut_cuda_cudnn_attn_validate(&s, passes[p], 90, why, sizeof why);
        CHECK(r == 0, "%s, pass %d: refused: %s", what, passes[p], why);
    }
}

/* GPT-2's attention (12 heads of 64) in both 16-bit types at the benchmark's
 * batch and at the tests' ragged lengths, and heads of 16 and 128 */
static void test_accepted(void) {
    if (!can_run()) return;
    accepts("GPT-2 124M, 8 x 1024, bf16", (ut_cudnn_attn){8, 1024, 768, 12, 1});
    accepts("GPT-2 124M, 64 x 1024, fp16", (ut_cudnn_attn){64, 1024, 768, 12, 2});
    accepts("3 x 77, bf16", (ut_cudnn_attn){3, 77, 768, 12, 1});
    accepts("heads of 16", (ut_cudnn_attn){3, 77, 192, 12, 2});
    accepts("heads of 128", (ut_cudnn_attn){1, 130, 1536, 12, 1});
}

/* what the glue never sends is refused with a reason, not crashed on */
static void test_refused(void) {
    if (!can_run()) return;
    ut_cudnn_attn f32 = {2, 64, 768, 12, 0};
    CHECK(ut_cuda_cudnn_attn_validate(&f32, UT_CUDNN_ATTN_TRAIN, 90, why, sizeof why) == -1 &&
              strstr(why, "bf16 or fp16"), "float32: %s", why);
    ut_cudnn_attn bad = {2, 64, 770, 12, 1};
    CHECK(ut_cuda_cudnn_attn_validate(&bad, UT_CUDNN_ATTN_TRAIN, 90, why, sizeof why) == -1 &&
              strstr(why, "bad shape"), "C not a multiple of the heads: %s", why);
    /* heads of 10: not a multiple of 8, which cuDNN's fused attention needs */
    ut_cudnn_attn odd = {2, 70, 120, 12, 1};
    int r = ut_cuda_cudnn_attn_validate(&odd, UT_CUDNN_ATTN_TRAIN, 90, why, sizeof why);
    CHECK(r == -1 && why[0], "heads of 10 accepted");
    printf("  heads of 10: %s\n", why);
}

int main(void) {
    RUN(test_accepted);
    RUN(test_refused);
    return TEST_SUMMARY();
}
