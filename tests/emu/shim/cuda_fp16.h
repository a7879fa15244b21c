/* the CUDA emulator in place of the toolkit's <cuda_fp16.h> (tests/emu/cuda_emu.h) */
#include "../cuda_emu.h"
