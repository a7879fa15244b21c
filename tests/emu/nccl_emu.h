/* NCCL on the CUDA emulator (tests/emu/nccl_emu.cpp): the part of its API
 * that src/backend/cuda/nccl.c calls, with NCCL's names and result codes
 * (tests/emu/shim/nccl.h includes this file). nccl.c looks its functions up
 * with utemu_nccl_symbol in place of dlsym on the emulator's build. */
#ifndef UTRAIN_NCCL_EMU_H
#define UTRAIN_NCCL_EMU_H

#include <stddef.h>

#include "cuda_runtime_emu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
typedef struct utemu_nccl *ncclComm_t;
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum { ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat = 7, ncclBfloat16 = 9 } ncclDataType_t;

/* the emulated function called name ("ncclAllReduce", ...), NULL when there is none */
void *utemu_nccl_symbol(const char *name);

#ifdef __cplusplus
}
#endif

#endif
