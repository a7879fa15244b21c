/* the CUDA emulator in place of NCCL's <nccl.h> (tests/emu/nccl_emu.h) */
#include "../nccl_emu.h"
