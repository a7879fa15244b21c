/* Gradient buckets: the flat gradient buffer cut into contiguous ranges of
 * about bucket_mb MiB, formed from the last parameter backwards (backward
 * completes late layers first, so the first bucket fills first). Shared by
 * DDP's all-reduce buckets (ddp.c) and ZeRO's reduce-scatter buckets
 * (strategy.c).
 * defines: ut_bucket_span, ut_bucket_layout. */
#ifndef UTRAIN_DIST_BUCKETS_H
#define UTRAIN_DIST_BUCKETS_H

#include "utrain/nn.h"

typedef struct {
    int64_t lo, hi; /* element range of the flat gradient buffer */
    int nparams;
} ut_bucket_span;

/* Fills span[0, nb) (room for p->n spans) and bucket_of[i] for every
 * parameter; returns nb. */
static inline int ut_bucket_layout(const ut_params *p, double bucket_mb, ut_bucket_span *span,
                                   int *bucket_of) {
    int64_t cap = (int64_t)(bucket_mb * 1048576.0 / sizeof(float));
    if (cap < 1) cap = 1;
    int nb = 0;
    for (int i = p->n - 1; i >= 0; i--) {
        ut_bucket_span *b = &span[nb];
        if (b->nparams == 0) b->hi = p->segs[i].offset + p->segs[i].numel;
        b->lo = p->segs[i].offset;
        b->nparams++;
        bucket_of[i] = nb;
        if (b->hi - b->lo >= cap || i == 0) nb++;
    }
    return nb;
}

#endif
