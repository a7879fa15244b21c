/* the CUDA emulator in place of the toolkit's <cuda_bf16.h> (tests/emu/cuda_emu.h) */
#include "../cuda_emu.h"
