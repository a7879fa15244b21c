/* the CUDA emulator in place of the toolkit's <cublasLt.h> (tests/emu/cublas_emu.h) */
#include "../cublas_emu.h"
