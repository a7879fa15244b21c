/* utrain: the umbrella header.
 * defines: UT_VERSION; includes every public header. */
#ifndef UTRAIN_H
#define UTRAIN_H

#define UT_VERSION "0.1.0"

#include "utrain/base.h"   // defines: allocation checks, ut_abort, UT_ASSERT, ut_rng
#include "utrain/tensor.h" // defines: ut_tensor, ut_ctx, autograd, checkpointing
#include "utrain/ops.h"    // defines: every op
#include "utrain/optim.h"  // defines: SGD, AdamW, clipping, schedules
#include "utrain/nn.h"     // defines: parameters, layers, models, registry, text generation
#include "utrain/io.h"     // defines: safetensors read/write
#include "utrain/config.h" // defines: the run configuration (schema, YAML, --set)
#include "utrain/data.h"   // defines: datasets, tokenizers, sampler, loader
#include "utrain/train.h"  // defines: the trainer, checkpoints, TensorBoard, hooks
#include "utrain/dist.h"   // defines: the communicator (single, MPI), DDP
#include "utrain/textmetrics.h" // defines: BLEU, ROUGE-L, exact match of generated text

#endif
