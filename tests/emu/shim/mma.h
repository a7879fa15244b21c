/* the CUDA emulator in place of the toolkit's <mma.h> (tests/emu/cuda_emu.h) */
#include "../cuda_emu.h"
