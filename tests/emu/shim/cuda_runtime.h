/* the CUDA emulator in place of the toolkit's <cuda_runtime.h> (tests/emu/cuda_emu.h) */
#include "../cuda_emu.h"
