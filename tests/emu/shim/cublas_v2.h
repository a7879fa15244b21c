/* the CUDA emulator in place of the toolkit's <cublas_v2.h> (tests/emu/cublas_emu.h) */
#include "../cublas_emu.h"
