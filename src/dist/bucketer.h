/* The gradient-bucket engine DDP (all-reduce, ddp.c) and ZeRO-2/3
 * (reduce-scatter, strategy.c) share: buckets from ut_bucket_layout, each
 * started by backward's gradient-ready hook once its last parameter is
 * complete, moved to host memory for the communicator, posted in the same
 * order on every rank, and its result put back.
 *
 * How a bucket reaches host memory depends on the gradients' device:
 *   - host memory (the CPU): in place, through host stages that copy
 *     nothing;
 *   - device memory the communicator cannot take (sim, cuda under MPI):
 *     the hook records an event on the compute stream, and the communicator's
 *     communication stream, after it, copies the bucket into page-locked
 *     host memory. The collective is posted when the next bucket starts (or
 *     at the finish), waiting for that copy if it still runs: a point every
 *     rank reaches in the same order, as the communicator's numbering needs.
 *     The result goes back with a copy queued on the compute stream, ahead
 *     of whatever reads it next (the optimizer). The hook copies nothing and
 *     waits for at most the previous bucket's copy, so backward's kernels
 *     keep running;
 *   - device memory the communicator takes directly (NCCL on cuda, the
 *     simulated device's direct collectives): the hook records an
 *     event on the compute stream, the communicator's stream waits for it
 *     and runs the collective on the span itself, posted at once (start
 *     order is the same on every rank). At the finish the compute stream
 *     waits for every bucket's collective and the host for the last one
 *     (a failure is reported at the step it happened in); nothing is
 *     copied.
 * defines: ut_bucket_io, ut_bucketer, ut_bucketer_*. */
#ifndef UTRAIN_DIST_BUCKETER_H
#define UTRAIN_DIST_BUCKETER_H

#include <stdbool.h>

#include "utrain/dist.h"
#include "buckets.h"

/* What a strategy does with its buckets. Bucket k's input is its span of
 * the flat gradient buffer; its output out(k) is out_n(k) floats of device
 * memory (DDP: the span itself; ZeRO: the rank's part of its shard). */
typedef struct {
    /* posts bucket k's collective from in (the span's gradients in host
     * memory) into out (host memory for its output; the same as in for an
     * in-place collective); returns its request */
    ut_comm_req *(*post)(void *user, int k, float *in, float *out);
    /* bucket k's collective is done and out holds its result in host memory;
     * called before the result goes back to the device (DDP widens a
     * compressed bucket here). NULL: nothing to do. */
    void (*landed)(void *user, int k, float *out);
    /* bucket k's result is on its way back (queued, or done on the CPU); the
     * span's gradients are no longer needed (ZeRO hands their pages back).
     * NULL: nothing to do. */
    void (*done)(void *user, int k);
    void *user;
    /* The direct path (ut_comm_direct on the gradients' device): the
     * bucket's collective runs on its device memory, on the communicator's
     * stream, and post is not used. prepare (NULL: nothing) queues on the
     * compute stream what the collective reads (DDP compressed: the 16-bit
     * copy); post_direct queues the collective from in (the span) into out
     * (device memory: bucket k's output, or the span) on the communicator's
     * stream, which the engine has ordered after them; landed gets out, the
     * compute stream already ordered after the collective. */
    bool direct;
    void (*prepare)(void *user, int k, float *in);
    int (*post_direct)(void *user, int k, float *in, float *out);
    /* ZeRO-Offload: bucket k's result also lands in host memory, at
     * host_out[k] (out_n(k) floats of memory from the device's host_alloc,
     * page-locked where the device has such memory), while backward goes on:
     * on the pinned path the collective writes it there itself (its result
     * is already in host memory; the copy back to the device reads it), on
     * the direct path the communicator's stream copies it down after the
     * collective, on the CPU it is copied when the bucket lands. Every copy
     * is done when ut_bucketer_finish returns, except the pinned path's
     * copies back to the device, queued on the compute stream, which read
     * host_out: sync the compute stream before writing it. NULL: not wanted.
     * The array is copied by ut_bucketer_new. (Part of an output:
     * ut_bucketer_set_host.) */
    float *const *host_out;
} ut_bucket_io;

typedef struct ut_bucketer ut_bucketer;

/* nb buckets with their spans and each parameter's bucket (ut_bucket_layout),
 * the output of bucket k at out[k] (out_n[k] floats; out == NULL: in place,
 * the span itself). Copies spans, out and out_n. */
ut_bucketer *ut_bucketer_new(ut_comm *c, ut_params *p, const ut_bucket_span *spans, int nb, const int *bucket_of,
                             float *const *out, const int64_t *out_n, ut_bucket_io io);
void ut_bucketer_free(ut_bucketer *b);
/* ZeRO-Offload with an in-place collective (zero1's all-reduce): bucket k's
 * result's elements [at, at + n) also land at host (as io.host_out's, but
 * copied out of the collective's host memory on the pinned path: the whole
 * bucket is there), during backward. Before the first arm. */
void ut_bucketer_set_host(ut_bucketer *b, int k, float *host, int64_t at, int64_t n);
/* Arms ctx's gradient-ready hook for the coming backward pass. */
void ut_bucketer_arm(ut_bucketer *b, ut_ctx *ctx);
/* After that backward: disarms the hook, starts the buckets not started yet
 * (parameters the forward did not use), and completes every bucket (results
 * queued back on the device). 0, or -1 when a collective failed. */
int ut_bucketer_finish(ut_bucketer *b, ut_ctx *ctx);

#endif
