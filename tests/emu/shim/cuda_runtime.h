/* the CUDA emulator in place of the toolkit's <cuda_runtime.h> (tests/emu/cuda_runtime_emu.h; in C++ also the device side, tests/emu/cuda_emu.h) */
#include "../cuda_runtime_emu.h"
#ifdef __cplusplus
#include "../cuda_emu.h"
#endif
