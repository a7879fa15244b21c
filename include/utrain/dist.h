/* utrain distributed: the communicator every strategy talks through, with a
 * single-process backend (always built), an MPI backend (OpenMPI) and a TCP
 * one, and collectives on device memory beside them (NCCL on cuda).
 * defines: ut_comm, ut_comm_req, ut_comm_* (init, world, rank/size,
 *          non-blocking allreduce / reduce-scatter / all-gather, wait,
 *          blocking helpers, start-up agreement checks), ut_devcomm_mode,
 *          ut_comm_device_setup, ut_comm_device_places, ut_comm_direct_*, ut_ddp (bucketed,
 *          overlapped gradient all-reduce). */
#ifndef UTRAIN_DIST_H
#define UTRAIN_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "utrain/nn.h"
#include "utrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the communicator ---- */
typedef struct ut_comm ut_comm;
typedef struct ut_comm_req ut_comm_req;

/* Sets up this process's communicator: MPI when it runs under an MPI
 * launcher (mpirun/mpiexec/srun: OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK
 * set) or when force_mpi; TCP when RANK and WORLD_SIZE > 1 are set without
 * MPI (torchrun, Accelerate, PyTorchJob: the ranks meet at MASTER_ADDR:
 * MASTER_PORT); else the single-process one. Under MPI, every collective
 * that takes longer than timeout_s (0: no limit) ends all ranks: each
 * reports the collective it was in and its sequence number ("rank 1:
 * timeout in allreduce #123"); under TCP the operation fails with that
 * message, and a rank that exits fails its peers' operations with its
 * name. Returns NULL with a message on failure. The first communicator made
 * becomes ut_comm_world(). */
ut_comm *ut_comm_init(int *argc, char ***argv, bool force_mpi, double timeout_s, char *err,
                      size_t n);
/* Whether this process was started as one rank of several: by an MPI
 * launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set), or with RANK
 * and WORLD_SIZE > 1 set (torchrun, Accelerate, PyTorchJob, utrain's TCP
 * launcher). ut_comm_init then joins that job. Also true for the one rank
 * of a job of one that utrain's launcher started (UTRAIN_SUPERVISOR set:
 * --max-restarts or train.auto_find_batch_size over TCP), which must not
 * start a launcher of its own. */
bool ut_comm_launched(void);
/* The communicator made by ut_comm_init, or a single-process one. */
ut_comm *ut_comm_world(void);
/* Waits for outstanding work and shuts the backend down (MPI_Finalize). */
void ut_comm_finalize(ut_comm *c);

int ut_comm_rank(const ut_comm *c);
int ut_comm_size(const ut_comm *c);
const char *ut_comm_backend(const ut_comm *c);   /* "single" | "mpi" | "tcp" */
int ut_comm_world_rank(const ut_comm *c);        /* this process's rank in the world */
const char *ut_comm_name(const ut_comm *c);      /* "world", or the group's name */

/* Process groups. Collective over parent: the ranks that pass the same color
 * (>= 0) form one group, ranked by key, then by their rank in parent. name
 * ("tp", "pp", "dp") names the group in errors and timeout reports ("tp rank
 * 1 (world rank 3): timeout after ..."). A group is a communicator with its
 * own queue and communication thread, so a collective blocked on one group
 * does not hold another group's traffic. NULL with a message on failure.
 * Finalize groups (ut_comm_finalize, in the same order on every rank)
 * before the world. */
ut_comm *ut_comm_split(ut_comm *parent, int color, int key, const char *name, char *err, size_t n);

/* The 3-D layout of a model-parallel job (Megatron-LM's order): world rank
 * r is tensor-parallel rank r % tp, data-parallel rank (r / tp) % dp and
 * pipeline stage r / (tp * dp), so a tensor-parallel group is tp
 * consecutive ranks (the ones that talk most, kept on one node), the
 * data-parallel group the ranks holding the same part of the same stage,
 * and the pipeline group the ranks holding the same part of the same data
 * shard. The groups are "tp", "dp" and "pp" (ut_comm_split; a group of one
 * rank is made as well, so callers need no special case). */
typedef struct {
    int tp, pp, dp;                  /* sizes: world = tp * pp * dp */
    int tp_rank, pp_rank, dp_rank;
    ut_comm *tp_group, *dp_group, *pp_group;
} ut_mesh;
/* -1 with a message naming the sizes when tp or pp is below 1 or the world
 * size is not divisible by tp * pp. Every rank calls it with the same sizes. */
int ut_mesh_init(ut_mesh *m, ut_comm *world, int tp, int pp, char *err, size_t n);
/* Finalizes the groups (before the world, in the same order on every rank). */
void ut_mesh_free(ut_mesh *m);

/* Point-to-point, non-blocking: n floats to or from peer, another rank of c.
 * Sends and receives between two ranks match in the order they were issued
 * (MPI's rule), started in issue order with the collectives but finishing
 * when their partner arrives, so a send and a receive queued in either order
 * on both ranks cannot deadlock. NULL (and the reason in ut_comm_error) when
 * peer is not another rank; ut_comm_wait(c, NULL) then returns -1. */
ut_comm_req *ut_comm_isend(ut_comm *c, const float *buf, int64_t n, int peer);
ut_comm_req *ut_comm_irecv(ut_comm *c, float *buf, int64_t n, int peer);

/* Non-blocking collectives on float32 buffers, summing. They run in the order
 * issued, on a communication thread, while the caller computes; buffers must
 * stay untouched until ut_comm_wait. Requests come from a fixed pool owned by
 * the communicator (no allocation per call).
 *   allreduce:      buf[0, n) summed over ranks, in place
 *   reduce_scatter: out[0, n) = sum over ranks of in[rank*n, (rank+1)*n)
 *   allgather:      out[r*n, (r+1)*n) = in[0, n) of rank r */
ut_comm_req *ut_comm_iallreduce(ut_comm *c, float *buf, int64_t n);
/* allreduce of n 16-bit values (dt UT_BF16 or UT_F16, as their bit
 * patterns): each addition widens both to float32 and rounds the sum back
 * (round to nearest even), so half the bytes of the float32 form move;
 * DDP's gradient compression (dist.comm_hook) uses it. */
ut_comm_req *ut_comm_iallreduce16(ut_comm *c, uint16_t *buf, int64_t n, ut_dtype dt);
/* The typed forms: n elements of dt (UT_F32, or UT_BF16 / UT_F16 as bit
 * patterns) combined with op:
 *   UT_REDUCE_SUM  the sum over ranks (16-bit: each addition in float32,
 *                  rounded back, as ut_comm_iallreduce16)
 *   UT_REDUCE_MAX  the largest value; a NaN on any rank gives NaN (as
 *                  torch.max)
 *   UT_REDUCE_AVG  the sum divided by the number of ranks, the division in
 *                  float32 and rounded once to dt (PyTorch's ReduceOp.AVG)
 * allreduce in place; reduce_scatter: out[0, n) = op over ranks of
 * in[rank*n, (rank+1)*n). */
typedef enum { UT_REDUCE_SUM = 0, UT_REDUCE_MAX, UT_REDUCE_AVG, UT_REDUCE_COUNT } ut_reduce_op;
ut_comm_req *ut_comm_iallreduce_typed(ut_comm *c, void *buf, int64_t n, ut_dtype dt, ut_reduce_op op);
ut_comm_req *ut_comm_ireduce_scatter_typed(ut_comm *c, const void *in, void *out, int64_t n, ut_dtype dt,
                                           ut_reduce_op op);
/* Whether the communicator's collectives take device memory of dev as it
 * is (NCCL, a CUDA-aware MPI); false: callers pass host memory (stages, or
 * page-locked copies: the MPI and single-process communicators, for every
 * device but the CPU, whose memory is host memory). */
bool ut_comm_accepts_device_memory(const ut_comm *c, ut_device dev);
/* ---- collectives on device memory ----
 * How ranks whose model lives on a device (sim, cuda) exchange its data,
 * decided once per communicator and device (dist.device_comm):
 *   UT_DEVCOMM_DIRECT  on the device's own memory, queued on the
 *                      communicator's communication stream: NCCL on cuda
 *                      (one GPU per rank; src/backend/cuda/nccl.c); on sim,
 *                      the host communicator run by that stream, as a GPU's
 *                      library would run (src/dist/comm_device.c);
 *   UT_DEVCOMM_HOST    staged through page-locked host memory for the host
 *                      communicator (MPI, TCP);
 *   UT_DEVCOMM_AUTO    direct where every rank can (cuda: NCCL loads and no
 *                      two ranks share a GPU; sim: always), else host.
 * DDP's gradient buckets, tensor parallelism's sums and a pipeline's tied
 * embedding take the direct path where it is set up; the other collectives
 * stage through host memory. */
typedef enum { UT_DEVCOMM_AUTO = 0, UT_DEVCOMM_DIRECT, UT_DEVCOMM_HOST } ut_devcomm_mode;
/* "auto", "direct", "host" -> mode; -1 for anything else */
int ut_devcomm_parse(const char *s, ut_devcomm_mode *mode);
/* Collective over c: chooses how c's collectives on dev's memory go and
 * sets up the direct path (NCCL's communicator). path: a line for the log
 * saying which and why ("through host memory: ranks 0 and 1 share one cuda
 * device ..."). -1 with a message when direct was asked for and a rank
 * cannot (naming it and what to write instead), or NCCL fails to start. A
 * communicator never set up goes through host memory. */
int ut_comm_device_setup(ut_comm *c, ut_device dev, ut_devcomm_mode mode, char *path, size_t pn, char *err,
                         size_t n);
/* Collective over c: every rank's place in all (c's size values), a hash
 * of its host's name and dev_key (its device's identity: the backend's
 * device_key, a GPU's PCI bus id), never 0; a rank that passes dev_key NULL
 * has no place (0). Ranks with equal places share one device. 0, or -1 (the
 * communicator's error). */
int ut_comm_device_places(ut_comm *c, const char *dev_key, int64_t *all);
/* Whether c's collectives on dev's memory go direct. */
bool ut_comm_direct(const ut_comm *c, ut_device dev);
/* Direct (ut_comm_direct true): buf[0, n) of dt (F32, BF16, F16, device
 * memory) combined over the ranks in place, queued on c's communication
 * stream on dev (ut_comm_stream); the caller orders that stream after
 * buf's producers and buf's consumers after the stream (events). 0, or -1
 * with the message in ut_comm_error (an earlier operation's failure too). */
int ut_comm_direct_allreduce(ut_comm *c, ut_device dev, void *buf, int64_t n, ut_dtype dt, ut_reduce_op op);
/* The ZeRO strategies' uneven forms (as ut_comm_ireduce_scatterv,
 * ut_comm_iallgatherv), float32, direct; counts is copied. */
int ut_comm_direct_reduce_scatterv(ut_comm *c, ut_device dev, const float *in, float *out, const int64_t *counts);
int ut_comm_direct_allgatherv(ut_comm *c, ut_device dev, float *buf, const int64_t *counts);
/* Ordering with the compute stream: after_compute makes the communication
 * stream's later work wait for the compute stream's work so far;
 * before_compute makes the compute stream's later work wait for the
 * communication stream's so far; record marks the communication stream's
 * point in the event ev (the backend's, ut_event_new) for a later
 * ut_event_wait. None waits on the host. */
void ut_comm_direct_after_compute(ut_comm *c, ut_device dev);
void ut_comm_direct_before_compute(ut_comm *c, ut_device dev);
void ut_comm_direct_record(ut_comm *c, ut_device dev, void *ev);
/* An all-reduce between the two: after the compute stream's work so far,
 * before its later work. */
int ut_comm_direct_allreduce_ordered(ut_comm *c, ut_device dev, void *buf, int64_t n, ut_dtype dt,
                                     ut_reduce_op op);
/* A failure of the direct path found after its operations were queued (a
 * peer gone, a timeout), without waiting: 0, or -1 with the message. */
int ut_comm_direct_status(ut_comm *c, ut_device dev);

/* The communicator's communication stream on device dev (the backend's
 * UT_STREAM_COMM kind), where the copies feeding its collectives run (the
 * gradient buckets' copies to and from host memory): made on first use,
 * waited for and freed by ut_comm_finalize. NULL on a device without streams
 * (the CPU). */
void *ut_comm_stream(ut_comm *c, ut_device dev);
ut_comm_req *ut_comm_ireduce_scatter(ut_comm *c, const float *in, float *out, int64_t n);
ut_comm_req *ut_comm_iallgather(ut_comm *c, const float *in, float *out, int64_t n);
/* The uneven forms the ZeRO strategies use on ranges of a flat buffer cut
 * into consecutive per-rank parts: counts[r] elements belong to rank r, at
 * offset counts[0] + ... + counts[r-1]. counts must stay valid until the wait.
 *   reduce_scatterv: out[0, counts[rank]) = sum over ranks of rank's part of in
 *   allgatherv:      every rank's part of buf from that rank, in place (each
 *                    rank's own part must already be in buf) */
ut_comm_req *ut_comm_ireduce_scatterv(ut_comm *c, const float *in, float *out,
                                      const int64_t *counts);
ut_comm_req *ut_comm_iallgatherv(ut_comm *c, float *buf, const int64_t *counts);
/* 0 when the request is done, -1 on failure (message in ut_comm_error). */
int ut_comm_wait(ut_comm *c, ut_comm_req *r);
/* Without blocking: 1 if the request is done, 0 if not yet, -1 if it failed. */
int ut_comm_test(ut_comm *c, ut_comm_req *r);

/* Blocking helpers for small values (metrics, norms, counters). */
int ut_comm_allreduce_f64(ut_comm *c, double *buf, int n);
int ut_comm_allreduce_i64(ut_comm *c, int64_t *buf, int n);    /* sum */
int ut_comm_bcast(ut_comm *c, void *buf, size_t bytes, int root);
int ut_comm_barrier(ut_comm *c);
/* Start-up agreement: 0 if every rank passed the same value; otherwise -1
 * with a message naming what differs and which ranks disagree with rank 0
 * ("config hash differs on rank 2: ..."), on every rank. */
int ut_comm_check_same(ut_comm *c, uint64_t value, const char *what, char *err, size_t n);
/* The same for a count, shown in decimal ("rank 0 has 8, rank 1 has 16"). */
int ut_comm_check_same_int(ut_comm *c, int64_t value, const char *what, char *err, size_t n);
const char *ut_comm_error(const ut_comm *c);

/* Bytes moved by this rank's collectives so far and seconds spent waiting in
 * ut_comm_wait (for benchmarks and logs). */
void ut_comm_stats(const ut_comm *c, double *bytes, double *wait_s);

/* ---- tensor parallelism: where a layer's parts meet (Megatron's f and g) ----
 * Ops over a group's communicator (ut_comm_split), so models using them need
 * no backward of their own (src/dist/tp.c):
 *   ut_tp_copy:   forward the identity, backward the gradient summed over
 *                 the group (before a column-parallel linear)
 *   ut_tp_reduce: forward the sum over the group, backward the identity
 *                 (after a row-parallel linear)
 * A failed all-reduce fails the op with the communicator's message. */
ut_tensor *ut_tp_copy(ut_ctx *ctx, ut_tensor *x, ut_comm *group);
ut_tensor *ut_tp_reduce(ut_ctx *ctx, ut_tensor *x, ut_comm *group);
/* Vocabulary parallelism over the group's ranks, each holding an equal part
 * of a vocabulary of `vocab` ids, rank r the ids [r*Vp, (r+1)*Vp):
 *   ut_tp_embedding:     table (Vp, C), this rank's rows -> (..., C), the
 *                        whole lookup on every rank (each part looks up its
 *                        own ids, then the sum over the group); padding_idx
 *                        (or -1) takes no gradient
 *   ut_tp_cross_entropy: logits (..., Vp), this rank's columns -> the
 *                        cross-entropy over the whole vocabulary (scalar, the
 *                        same on every rank), without gathering the logits:
 *                        per row only a logsumexp and a logit cross the
 *                        group (ut_vocab_partials, ut_vocab_ce in ops.h)
 * Their gradients reach each rank's part; the head's input gradient needs
 * the ut_tp_copy in front of the column-parallel head, as for any
 * column-parallel linear. */
ut_tensor *ut_tp_embedding(ut_ctx *ctx, ut_tensor *ids, ut_tensor *table, int64_t vocab, int padding_idx,
                           ut_comm *group);
ut_tensor *ut_tp_cross_entropy(ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets, int64_t vocab, int ignore_index,
                               ut_comm *group);
/* Sequence parallelism (Megatron-LM's): in the layer-norm and dropout
 * regions of a split block each rank of group holds (B, T/p, ...), its rows
 * [r T/p, (r + 1) T/p) of every sequence.
 *   ut_tp_seq_split          (B, T, ...) the same on every rank -> this
 *                            rank's rows; gradient all-gathered
 *   ut_tp_seq_gather         this rank's rows -> the whole (B, T, ...) on
 *                            every rank (all-gather); gradient summed over
 *                            the group and scattered (reduce-scatter)
 *   ut_tp_seq_reduce_scatter (B, T, ...) partial sums -> this rank's rows of
 *                            their sum; gradient all-gathered
 * T must divide by the group's size (an error names it). */
ut_tensor *ut_tp_seq_split(ut_ctx *ctx, ut_tensor *x, ut_comm *group);
ut_tensor *ut_tp_seq_gather(ut_ctx *ctx, ut_tensor *x, ut_comm *group);
ut_tensor *ut_tp_seq_reduce_scatter(ut_ctx *ctx, ut_tensor *x, ut_comm *group);
/* x's last dimension gathered from every rank of group, in rank order (no
 * gradient; ut_tp_hooks.gather): a split model's logits for generation. */
ut_tensor *ut_tp_gather_last(ut_ctx *ctx, ut_tensor *x, ut_comm *group);
/* A split model's parameters over its tensor-parallel group (every rank
 * calls these together, in the same order):
 *   ut_tp_grad_norm_sq: the square sum of the whole model's gradient, the
 *     same on every rank: split parameters' parts summed over the group,
 *     whole (replicated) ones counted once;
 *   ut_tp_gather_param: parameter i's whole tensor (its partition's full
 *     shape, ut_partition in nn.h) into host memory `full` on every rank,
 *     from every rank's part (for checkpoints and export);
 *   ut_tp_scatter_param: this rank's part of parameter i set from the whole
 *     tensor `full` in host memory (loading a whole checkpoint; no
 *     communication).
 * 0, or -1 with a message. */
int ut_tp_grad_norm_sq(const ut_params *p, ut_comm *group, double *sq, char *err, size_t n);
int ut_tp_gather_param(const ut_params *p, int i, ut_comm *group, float *full, char *err, size_t n);
void ut_tp_scatter_param(ut_params *p, int i, const float *full);
/* The same for values laid out as parameter i's part at vals, in device
 * dev's memory (an optimizer state buffer's segment, for checkpoints: on the
 * host under ZeRO-Offload). */
int ut_tp_gather_values(const ut_params *p, int i, ut_device dev, const float *vals, ut_comm *group, float *full,
                        char *err, size_t n);
void ut_tp_scatter_values(const ut_params *p, int i, ut_device dev, float *vals, const float *full);
/* This rank's part of parameter i's whole tensor full, both in host memory. */
void ut_tp_part_values(const ut_params *p, int i, const float *full, float *mine);
/* Elements of parameter i's whole tensor (its own count when not split). */
int64_t ut_tp_full_numel(const ut_params *p, int i);
/* The two as a tensor-parallel layer's hooks over group
 * (ut_block_layer_init_tp in nn.h). */
ut_tp_hooks ut_tp_hooks_of(ut_comm *group);

/* ---- DDP: gradient all-reduce in buckets, overlapped with backward ----
 * Buckets are contiguous ranges of the flat gradient buffer of about
 * bucket_mb megabytes, formed from the last parameter backwards (the order in
 * which backward completes them). The trainer scales each micro-batch's loss
 * by its share of the global batch, so the summed gradients are exactly those
 * of one process on the whole global batch. */
typedef struct ut_ddp ut_ddp;
ut_ddp *ut_ddp_new(ut_comm *c, ut_params *p, double bucket_mb);
/* Gradient compression, as PyTorch's DDP communication hooks
 * (bf16_compress_hook, fp16_compress_hook): each bucket is rounded to dt
 * (UT_BF16 or UT_F16) for its all-reduce (ut_comm_iallreduce16) and widened
 * back; half the bytes move. UT_F32 (the default): no compression. */
void ut_ddp_set_compression(ut_ddp *d, ut_dtype dt);
/* zero1 with ZeRO-Offload: the summed gradient's elements [lo, hi) (the
 * rank's shard) also land in host[0, hi - lo) (memory of the device's
 * host_alloc) bucket by bucket during backward, each as its all-reduce
 * finishes; done when ut_ddp_finish returns, except that the copies back
 * to the device read the pinned path's host memory, so the compute stream
 * is synced before host is written. Without compression only. */
void ut_ddp_set_host_grad(ut_ddp *d, float *host, int64_t lo, int64_t hi);
void ut_ddp_free(ut_ddp *d);
/* Arms ctx's gradient-ready hook for the coming backward pass: each bucket's
 * all-reduce starts as soon as its last parameter's gradient is complete.
 * Call before the backward of the last micro-batch of a window only (earlier
 * micro-batches accumulate locally, without communication). */
void ut_ddp_arm(ut_ddp *d, ut_ctx *ctx);
/* After that backward: starts the buckets not started yet (parameters the
 * forward did not use), waits for all of them, and disarms the hook. */
int ut_ddp_finish(ut_ddp *d, ut_ctx *ctx);
int ut_ddp_nbuckets(const ut_ddp *d);

/* ---- strategies ----
 * Who holds what, per rank, with Psi parameters, N ranks and S = the shard
 * size (ceil(Psi/N) rounded up to 16 floats; rank r owns elements
 * [r*S, (r+1)*S) of the flat buffers):
 *   ddp    params Psi, grads Psi, optimizer state Psi
 *   zero1  params Psi, grads Psi, optimizer state S
 *   zero2  params Psi, grads S (+ buckets in flight), optimizer state S
 *   zero3  params S (+ gathered units), grads S (+ buckets), optimizer S
 *   dp     one process: N replicas (params, grads each), one optimizer */
typedef enum {
    UT_DIST_DDP,
    UT_DIST_ZERO1,
    UT_DIST_ZERO2,
    UT_DIST_ZERO3,
    UT_DIST_DP,
} ut_dist_kind;
/* "ddp", "zero1", "zero2", "zero3" (alias "fsdp"), "dp" into *out: 0, or -1. */
int ut_dist_parse(const char *name, ut_dist_kind *out);
const char *ut_dist_name(ut_dist_kind k);
/* Shard size S for numel elements on world ranks (see above). */
int64_t ut_shard_size(int64_t numel, int world);

/* ZeRO-3 units (dist.wrap): groups of consecutive parameters gathered
 * together. "block": parameters whose names share the prefix up to the first
 * all-digit component ("h.3.attn.c_attn.weight" -> "h.3") or, without one,
 * everything but the last component ("wte.weight" -> "wte"); "param": each
 * parameter alone; "model": one unit. Fills unit_of[i] for every parameter
 * and returns the number of units, or -1 with a message for an unknown
 * policy. */
int ut_wrap_units(const ut_params *p, const char *policy, int *unit_of, char *err, size_t n);

/* ---- the data-parallel engine: one of the strategies above over a model ----
 * The trainer's side of a step, for every strategy:
 *   ut_dist_attach(d, ctx)                    once: hooks the context (zero3)
 *   per micro-batch: forward; ut_dist_backward_begin(d, ctx, sync);
 *                    ut_backward; ut_dist_backward_end(d, ctx, sync)
 *                    (sync on the last micro-batch of the window only: the
 *                    others accumulate locally without communication)
 *   ut_dist_grad_norm, ut_dist_scale_grads (clipping over the global norm)
 *   ut_dist_step(d, lr)                       update, zero the gradients
 * Every rank must make the same calls in the same order. */
typedef struct {
    ut_dist_kind kind;
    double bucket_mb;            /* gradient buckets (all but dp) */
    const char *wrap;            /* zero3: ut_wrap_units policy ("block" if NULL) */
    bool reshard_after_forward;  /* zero3: free a unit's gathered parameters after its forward */
    /* zero1, zero2: ZeRO-Offload. The optimizer's state and a float32 master
     * copy of this rank's shard live in host memory (page-locked where the
     * device has such memory) and the update runs there on the CPU backend;
     * the buckets put their part of the shard's gradient in host memory as
     * they land during backward (zero1 on one rank or compressed, and
     * either with replicas: the step copies it down after backward), and
     * the step updates the shard in pieces of bucket_mb, queuing each
     * piece's copy back to the device as it is done (the copy runs while
     * the host updates the next), before the parameters are gathered. The
     * model's device keeps only parameters and gradients. */
    bool offload_optimizer;
    /* ddp, zero1: the gradient all-reduce in 16 bits (ut_ddp_set_compression;
     * UT_F32 or 0: none) */
    ut_dtype comm_hook;
    /* zero1-3, hybrid sharding (FSDP's HYBRID_SHARD, DeepSpeed's MiCS): the
     * communicator c of ut_dist_new is this rank's shard group, and
     * replicas the ranks of the other groups that hold the same shard
     * (the same place in their groups). Each step's gradient, summed over
     * the shard group by the strategy, is then summed over replicas (an
     * all-reduce of the shard after the window's last backward), so every
     * replica takes the same step. NULL: the shard group is every rank. */
    ut_comm *replicas;
} ut_dist_opts;

/* Bytes of this rank's model state: held now (parameters and gradients in
 * their shard buffers plus the pages of the flat buffers that are resident,
 * as the system reports them), and the most held at once since the last
 * ut_dist_reset_peak (sampled as buckets and units come and go). */
typedef struct {
    size_t params, grads, optim;
    size_t params_peak, grads_peak;
    size_t host; /* ZeRO-Offload: host bytes instead (optimizer state, master shard and its gradient); optim is 0 */
    bool host_streamed; /* ZeRO-Offload: the gradient reaches the host bucket by bucket during backward (zero2,
                           zero1 on ranks uncompressed; not with replicas), not in one copy after it */
    size_t host_piece;  /* ZeRO-Offload: the update runs in pieces of this many bytes of parameters, each
                           copied back to the device while the host updates the next */
    size_t gather_host; /* sharded strategies on a device whose memory the communicator does not take:
                           the page-locked host copy of the parameters that gathers go through */
} ut_dist_mem;

typedef struct ut_dist ut_dist;
/* The strategy over m's parameters on c with an optimizer (cfg) over the
 * part this rank updates. NULL with a message on bad options (dp here is an
 * error: it runs in one process through the trainer's worker threads). */
ut_dist *ut_dist_new(ut_comm *c, ut_model *m, const ut_optim_config *cfg, const ut_dist_opts *o,
                     char *err, size_t n);
void ut_dist_free(ut_dist *d);
ut_dist_kind ut_dist_kind_of(const ut_dist *d);
ut_optim *ut_dist_optim(ut_dist *d);
/* This rank's part [lo, hi) of the flat buffer (the whole buffer for ddp). */
void ut_dist_shard(const ut_dist *d, int64_t *lo, int64_t *hi);
int ut_dist_nbuckets(const ut_dist *d);
void ut_dist_attach(ut_dist *d, ut_ctx *ctx);
void ut_dist_detach(ut_dist *d, ut_ctx *ctx);
void ut_dist_backward_begin(ut_dist *d, ut_ctx *ctx, bool sync);
int ut_dist_backward_end(ut_dist *d, ut_ctx *ctx, bool sync);
/* The communicator whose collective failed last (ut_comm_error says why):
 * the strategy's, or under hybrid sharding the replicas'. */
ut_comm *ut_dist_failed(const ut_dist *d);
/* The 2-norm of the whole (summed) gradient, the same on every rank. */
int ut_dist_grad_norm(ut_dist *d, double *norm);
/* For a model split over a tensor-parallel group (ut_partition), the
 * gradient's square sum over the strategy's ranks in two parts: sq[0] over
 * the split parameters' parts (to be summed over the tp group), sq[1] over
 * the whole ones (the same on every rank of the group). The parameters i
 * with skip[i] (skip NULL: none) are left out (a pipeline stage's copy of
 * a weight another stage counts). 0, or -1 when the collective failed
 * (ut_comm_error). */
int ut_dist_grad_sq_split(ut_dist *d, const bool *skip, double sq[2]);
/* Whether this rank's gradient alone gives that norm (one process, or ddp's
 * all-reduced gradient); then ut_dist_grad_sq_to queues its square sum into
 * device memory at dst, to read back with the step's other scalars. */
bool ut_dist_norm_local(const ut_dist *d);
void ut_dist_grad_sq_to(ut_dist *d, double *dst);
void ut_dist_scale_grads(ut_dist *d, float s);
/* The optimizer step on this rank's part, gradients zeroed, and the
 * parameters made whole again where the strategy keeps them whole. */
int ut_dist_step(ut_dist *d, float lr);
/* Whether the step can take its scalars from device memory: the norm is
 * local and the optimizer runs on the model's device (not offloaded). Then
 * ut_dist_step_scaled launches the step with them (ut_optim_step_zero_scaled:
 * a multiplier for the gradients and a skip flag), ut_dist_unstep takes a
 * skipped step's count back, and ut_dist_set_copies16 has the step write
 * 16-bit copies of the whole flat parameter buffer (numel elements of dt,
 * memory of the model's device; NULL: none). */
bool ut_dist_device_scalars(const ut_dist *d);
int ut_dist_step_scaled(ut_dist *d, float lr, const float *scalars);
void ut_dist_unstep(ut_dist *d);
void ut_dist_set_copies16(ut_dist *d, void *copies16, ut_dtype dt);
/* Zeroes the gradients ut_dist_step would have consumed, without a step
 * (fp16's skipped steps); no communication. */
void ut_dist_zero_grads(ut_dist *d);
/* zero3: every parameter gathered into the flat buffer (for saving or
 * reading weights) until ut_dist_release; nothing to do for the others. */
int ut_dist_gather_params(ut_dist *d);
void ut_dist_release(ut_dist *d);
/* The whole optimizer state on every rank, in a new optimizer over the full
 * buffer (for checkpoints; the caller frees it), and back: this rank's part
 * of the state taken from a full one (full may be NULL: parameters only) and,
 * for zero3, its part of the parameters from the flat buffer, which the
 * caller has filled whole. NULL / -1 with ut_comm_error on a failed
 * collective. The model's flat buffer is whole only after
 * ut_dist_gather_params (ut_dist_free does not communicate). */
ut_optim *ut_dist_full_optim(ut_dist *d);
int ut_dist_load_full(ut_dist *d, ut_optim *full);
void ut_dist_memory(ut_dist *d, ut_dist_mem *out);
void ut_dist_reset_peak(ut_dist *d);

/* ---- dp: one process, worker threads with a model replica each ---- */
/* Worker 0 is the caller's model and context; workers 1..n-1 get a replica
 * from build (the same parameters, in the same registration order) and a
 * context seeded with seed + w. The caller runs each worker's forward and
 * backward through ut_dp_run; ut_dp_reduce_grads adds the replicas'
 * gradients into worker 0's in worker order (deterministic) and zeroes them;
 * the optimizer steps worker 0's model and ut_dp_broadcast copies its
 * weights to the replicas. */
typedef struct ut_dp ut_dp;
typedef ut_model *(*ut_dp_build_fn)(void *user, char *err, size_t n);
ut_dp *ut_dp_new(int n, ut_model *m0, ut_ctx *ctx0, ut_dp_build_fn build, void *user, uint64_t seed,
                 char *err, size_t errn);
void ut_dp_free(ut_dp *d);
int ut_dp_workers(const ut_dp *d);
ut_model *ut_dp_model(ut_dp *d, int w);
ut_ctx *ut_dp_ctx(ut_dp *d, int w);
/* fn(user, w) for every worker, side by side on one thread each (the ops
 * inside a worker run on its thread); returns when all are done. */
void ut_dp_run(ut_dp *d, void (*fn)(void *user, int w), void *user);
void ut_dp_reduce_grads(ut_dp *d);
void ut_dp_broadcast(ut_dp *d);

#ifdef __cplusplus
}
#endif
#endif
