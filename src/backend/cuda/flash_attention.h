/* Launchers of the fused ("flash") causal self-attention of ATTENTION
 * (flash_attention.cu), used by its glue (attention.c) in place of the
 * materialised path: P (B, NH, T, T) is never stored; the forward saves each
 * query row's log-sum-exp L (B, NH, T) instead, and the backward recomputes
 * P = exp(scale q.k - L) tile by tile.
 * qkv (B, T, 3C) contiguous float32, row t of example b holding q, k, v of
 * every head: q of head h at columns [h hs, (h + 1) hs), k at C + h hs,
 * v at 2C + h hs (hs = C / NH). Query t attends keys j <= t; scale 1/sqrt(hs).
 * Everything is float32 on CUDA cores; no atomics: two runs give the same bits.
 * The tensor-core forms (flash_attention_tc.cu) take the same buffers under
 * autocast, their products on the bf16 or fp16 tensor cores.
 * The masked forms take ATTENTION_MASKED's separate q, k, v (attention_masked.c)
 * with its key mask, causal mask and dropout, or ATTENTION_VARLEN's packed
 * sequences (attention_varlen.c); they save the same L.
 * UT_CUDA_ATTN=unfused turns every fused form off (the glue's materialised
 * paths run: a check of one against the other).
 * defines: ut_cuda_flash_attn_ok, ut_cuda_flash_attn_fwd, ut_cuda_flash_attn_bwd,
 *          ut_cuda_flash_attn_rowdot, ut_cuda_flash_attn_tc_ok, ut_cuda_flash_attn_tc_fwd,
 *          ut_cuda_flash_attn_tc_bwd, ut_cuda_flash_attn_tc_native, ut_cuda_flash_attn_tc_fwd16,
 *          ut_cuda_flash_attn_tc_bwd16, ut_cuda_flash_attn_tc_masked_fwd16,
 *          ut_cuda_flash_attn_tc_masked_bwd16, ut_cuda_flash_attn_unfused, ut_flash_drop,
 *          ut_flash_masking, ut_cuda_flash_attn_masked_ok, ut_cuda_flash_attn_masked_fwd,
 *          ut_cuda_flash_attn_masked_bwd, UT_CUDA_ERR_VARLEN_OFFSETS, ut_cuda_flash_attn_varlen_ok,
 *          ut_cuda_flash_attn_varlen_plan, ut_cuda_flash_attn_tc_masked_ok,
 *          ut_cuda_flash_attn_tc_varlen_ok, ut_cuda_flash_attn_tc_masked_fwd,
 *          ut_cuda_flash_attn_tc_masked_bwd. */
#ifndef UTRAIN_CUDA_FLASH_ATTENTION_H
#define UTRAIN_CUDA_FLASH_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the fused kernels take these sizes on the current device: head
 * size hs <= 128, at most 65535 blocks of 64 queries, and the shared memory
 * the kernels of hs need fits the device's per-block limit (on an H100 every
 * hs <= 128 does; devices with less shared memory may refuse hs > 64).
 * The glue keeps the materialised path otherwise. */
bool ut_cuda_flash_attn_ok(int64_t B, int64_t T, int64_t C, int64_t NH);

/* out (B, T, C) = causal softmax(scale Q K^T) V per head, head h in columns
 * [h hs, (h + 1) hs); L (B, NH, T) = each row's max + log(sum of exps) of the
 * scaled scores. out_copy: NULL, or a second (B, T, C) buffer that gets the
 * same values (for a backward that will not see out in float32). */
void ut_cuda_flash_attn_fwd(float *out, float *out_copy, float *L, const float *qkv, int64_t B, int64_t T,
                            int64_t C, int64_t NH);

/* dqkv (B, T, 3C) += the gradient through the attention of dout (B, T, C),
 * from qkv, the forward's out (float32) and L. Dscratch: B NH T floats of device
 * memory (each row's sum of dout * out). */
void ut_cuda_flash_attn_bwd(float *dqkv, float *Dscratch, const float *dout, const float *out, const float *qkv,
                            const float *L, int64_t B, int64_t T, int64_t C, int64_t NH);

/* Dg (B, NH, T) = each row's sum of dout * out over its head's columns
 * (the backward's D; ut_cuda_flash_attn_bwd computes it itself) */
void ut_cuda_flash_attn_rowdot(float *Dg, const float *dout, const float *out, int64_t B, int64_t T, int64_t C,
                               int64_t NH);

/* The same attention with its four products on the tensor cores, for qkv
 * whose values are exact in dt (1 bf16, 2 fp16: autocast's rounded
 * operands, held in float32): Q K^T and the gradients' products from 16-bit
 * copies with float32 accumulation, the softmax in float32, P (and dS) rounded
 * to dt before the products that take them, as fused 16-bit attention
 * kernels do. Head size 64; ok says whether these sizes and the device's
 * shared memory take it, and UT_CUDA_ATTN=fp32 turns it off (the float32
 * kernels above run instead). Same buffers, L and D as the float32 forms;
 * deterministic. */
bool ut_cuda_flash_attn_tc_ok(int64_t B, int64_t T, int64_t C, int64_t NH);
void ut_cuda_flash_attn_tc_fwd(float *out, float *out_copy, float *L, const float *qkv, int64_t B, int64_t T,
                               int64_t C, int64_t NH, int dt);
void ut_cuda_flash_attn_tc_bwd(float *dqkv, float *Dscratch, const float *dout, const float *out, const float *qkv,
                               const float *L, int64_t B, int64_t T, int64_t C, int64_t NH, int dt);

/* The same on the mma.sync kernels with every tensor in its storage type
 * (for the op table's UT_KCAP_NATIVE_16: no float32 copies around the op):
 * qkv, out, dout and dqkv each float32 (*_dt 0) or 16-bit in dt (*_dt
 * nonzero; no other 16-bit type). float32 qkv and dout are rounded to dt as
 * they are read, out is written rounded to dt (its float32 values in
 * out_copy, which backward reads), and a 16-bit dqkv element is widened,
 * added to and rounded once: the bits the float32 forms give on float32
 * copies. Only where native says so: the mma.sync kernels run (not
 * UT_CUDA_ATTN=wmma), and tc_ok holds. */
bool ut_cuda_flash_attn_tc_native(void);
void ut_cuda_flash_attn_tc_fwd16(void *out, int out_dt, float *out_copy, float *L, const void *qkv, int qkv_dt,
                                 int64_t B, int64_t T, int64_t C, int64_t NH, int dt);
void ut_cuda_flash_attn_tc_bwd16(void *dqkv, int dqkv_dt, float *Dscratch, const void *dout, int dout_dt,
                                 const float *out, const void *qkv, int qkv_dt, const float *L, int64_t B, int64_t T,
                                 int64_t C, int64_t NH, int dt);

/* Whether UT_CUDA_ATTN=unfused asks for the materialised paths */
bool ut_cuda_flash_attn_unfused(void);

/* Dropout of the probabilities inside the fused masked kernels: element
 * (b, h, i, j) of P (B, NH, Tq, Tk) is kept when ut_philox_keep(key, stream,
 * ut_dropout_draw(offset, e, all, cols, c0), p) holds, e its index in P:
 * the draw the CPU's mask takes for it (all = cols = c0 = 0 unsplit; a part
 * of the heads: all = NHall Tq Tk, cols = NH Tq Tk, c0 = head0 Tq Tk). Kept
 * probabilities are scaled by ks = 1 / (1 - p). p = 0: no dropout. */
typedef struct {
    float p, ks;
    uint64_t key, stream, offset;
    int64_t all, cols, c0;
} ut_flash_drop;

/* What masks the scores: mask (B, Tk) added to every query's scores for key
 * j, or NULL; causal (Tq == Tk): query i attends keys j <= i; dropout.
 * Packed sequences (ATTENTION_VARLEN; off != NULL; then B = 1, Tq = Tk = N,
 * mask NULL): row i attends the rows of its own sequence s, [off[s],
 * off[s + 1]) of the S + 1 int32 offsets (device memory), with poff and bad
 * from ut_cuda_flash_attn_varlen_plan; dropout's element (s, h, i, j) is
 * then drawn as ut_attention_varlen_keep_mask draws it: drop.all = NHall and
 * drop.c0 = head0 for a part of the heads (ut_varlen_draw), all = 0 unsplit. */
typedef struct {
    const float *mask;
    bool causal;
    ut_flash_drop drop;
    const int32_t *off;
    const int64_t *poff;
    const int *bad;
    int64_t S;
} ut_flash_masking;

/* The device error flag's code for offsets that are not 0 = off[0] < off[1]
 * < ... < off[S] = N (cuda.h's ut_cuda_error_flag) */
enum { UT_CUDA_ERR_VARLEN_OFFSETS = 5 };

/* Whether the kernels take N packed rows in S sequences (as
 * ut_cuda_flash_attn_ok) */
bool ut_cuda_flash_attn_varlen_ok(int64_t N, int64_t S, int64_t C, int64_t NH);

/* On the compute stream, without waiting: bad (one int of device memory) =
 * 0 when the offsets off (S + 1, device) are valid for N rows, else 1 with
 * the error flag raised (the kernels then compute nothing: out 0, no
 * gradient); poff (S + 1 int64, device) = where each sequence's NH L x L
 * blocks of probabilities would start, for dropout's draws. */
void ut_cuda_flash_attn_varlen_plan(int64_t *poff, int *bad, const int32_t *off, int64_t S, int64_t N, int64_t NH);

/* Whether the masked kernels take these sizes on the current device (as
 * ut_cuda_flash_attn_ok, with Tq queries and Tk keys) */
bool ut_cuda_flash_attn_masked_ok(int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH);

/* out (B, Tq, C) = softmax(scale Q K^T + mask [+ causal]) V, dropped as mk
 * says, per head; q (B, Tq, C), k, v (B, Tk, C) contiguous float32;
 * L (B, NH, Tq) each row's max + log(sum of exps) of its scores before
 * dropout, +inf for a row whose keys are all at -inf (its out is 0).
 * out_copy as ut_cuda_flash_attn_fwd's. */
void ut_cuda_flash_attn_masked_fwd(float *out, float *out_copy, float *L, const float *q, const float *k,
                                   const float *v, int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH,
                                   const ut_flash_masking *mk);

/* dq, dk, dv (each NULL when not wanted; the layouts of q, k, v) += the
 * gradient through the attention of dout (B, Tq, C), from the forward's
 * float32 out, L and the same mk (dropout's draws are made again).
 * Dscratch: B NH Tq floats. */
void ut_cuda_flash_attn_masked_bwd(float *dq, float *dk, float *dv, float *Dscratch, const float *dout,
                                   const float *out, const float *q, const float *k, const float *v, const float *L,
                                   int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH,
                                   const ut_flash_masking *mk);

/* The masked and packed-sequence forms on the tensor cores, for autocast (as
 * ut_cuda_flash_attn_tc_*: head size 64, q, k, v exact in dt, P rounded to
 * dt before the products that take it; UT_CUDA_ATTN=fp32 or unfused turns
 * them off), with the arguments of ut_cuda_flash_attn_masked_* */
bool ut_cuda_flash_attn_tc_masked_ok(int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH);
bool ut_cuda_flash_attn_tc_varlen_ok(int64_t N, int64_t S, int64_t C, int64_t NH);
void ut_cuda_flash_attn_tc_masked_fwd(float *out, float *out_copy, float *L, const float *q, const float *k,
                                      const float *v, int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH,
                                      const ut_flash_masking *mk, int dt);
void ut_cuda_flash_attn_tc_masked_bwd(float *dq, float *dk, float *dv, float *Dscratch, const float *dout,
                                      const float *out, const float *q, const float *k, const float *v,
                                      const float *L, int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH,
                                      const ut_flash_masking *mk, int dt);

/* The masked and packed-sequence forms with every tensor in its storage
 * type (as ut_cuda_flash_attn_tc_fwd16 / bwd16 for ATTENTION; the mma.sync
 * kernels, where ut_cuda_flash_attn_tc_native and the tc_*_ok above hold):
 * q, k, v all float32 (x_dt 0) or all 16-bit in dt; out, dout and the
 * gradients dq, dk, dv (d_dt) likewise each. The float32 mask is rounded to
 * dt as it is read, as autocast's copy of it would be. The bits of the
 * float32 forms on float32 copies. */
void ut_cuda_flash_attn_tc_masked_fwd16(void *out, int out_dt, float *out_copy, float *L, const void *q,
                                        const void *k, const void *v, int x_dt, int64_t B, int64_t Tq, int64_t Tk,
                                        int64_t C, int64_t NH, const ut_flash_masking *mk, int dt);
void ut_cuda_flash_attn_tc_masked_bwd16(void *dq, void *dk, void *dv, int d_dt, float *Dscratch, const void *dout,
                                        int dout_dt, const float *out, const void *q, const void *k, const void *v,
                                        int x_dt, const float *L, int64_t B, int64_t Tq, int64_t Tk, int64_t C,
                                        int64_t NH, const ut_flash_masking *mk, int dt);

#ifdef __cplusplus
}
#endif

#endif
