/* The CUDA runtime API on the CUDA emulator (tests/emu/cuda_emu.h), for C
 * and C++: the part the CUDA backend calls (src/backend/cuda/backend.c and
 * the kernel files' launchers). One emulated device: its memory is host
 * memory, every stream runs in the host's program order (an operation is
 * done when its call returns, so every event is complete when recorded), and
 * it reports itself as an H100 (80 GiB, compute capability 9.0, 132
 * multiprocessors at 1.98 GHz, named "utrain CUDA emulator", 227 KiB of
 * opt-in shared memory per block). UT_EMU_GPUS=N gives it N such GPUs (each
 * its own PCI bus id; they share the host's memory). UT_EMU_NO_GPU=1 makes it report no
 * device, for the paths that run without one. */
#ifndef UTRAIN_CUDA_RUNTIME_EMU_H
#define UTRAIN_CUDA_RUNTIME_EMU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int cudaError_t;
typedef struct utemu_stream *cudaStream_t;
typedef struct utemu_event *cudaEvent_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorNoDevice = 100,
       cudaErrorNotReady = 600 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize, cudaFuncAttributePreferredSharedMemoryCarveout };
enum { cudaSharedmemCarveoutMaxShared = 100 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin, cudaDevAttrComputeCapabilityMajor,
                      cudaDevAttrComputeCapabilityMinor, cudaDevAttrMultiProcessorCount, cudaDevAttrClockRate };
struct cudaDeviceProp { /* the fields utrain reads */
    char name[256];
};
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
                      cudaMemcpyDefault };
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2 };
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer, *hostPointer;
};
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2, cudaHostAllocPortable = 1 };

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetPCIBusId(char *buf, int n, int d);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st);
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st);
cudaError_t cudaMemset2DAsync(void *d, size_t pitch, int v, size_t w, size_t h, cudaStream_t st);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaEventDestroy(cudaEvent_t e);

#ifdef __cplusplus
}
#endif

#endif
