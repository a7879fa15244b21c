/* the CUDA emulator in place of cuDNN's <cudnn.h> (tests/emu/cudnn_emu.h) */
#include "../cudnn_emu.h"
