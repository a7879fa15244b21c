/* Opening an NVIDIA library at run time (cuDNN: cudnn.c; NCCL: nccl.c):
 * they are not linked, so a build runs where they are missing and a process
 * that never uses one does not load it. C only: nvcc does not see it.
 * defines: ut_cuda_lib, ut_cuda_lib_open, ut_cuda_lib_find. */
#ifndef UTRAIN_CUDA_DL_H
#define UTRAIN_CUDA_DL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    void *handle;     /* dlopen's */
    bool emulated;    /* the CUDA emulator's stand-in (tests/emu): symbols from its table */
    const char *name; /* what was opened, for messages */
} ut_cuda_lib;

/* Opens the library: the file named by the environment variable env when it
 * is set; else soname on the loader's path, then in libdir (the folder
 * beside the header the build found; NULL: none). On the CUDA emulator's
 * build, without env, the emulated library. -1 with why in err when it
 * cannot be opened: naming env's file, or (not set) saying how to install
 * it with hint. */
int ut_cuda_lib_open(ut_cuda_lib *l, const char *env, const char *soname, const char *libdir, const char *hint,
                     char *err, size_t n);

/* The function sym of an opened library (NULL when it has none); emu is
 * the emulator's symbol table (NULL outside its build). */
void *ut_cuda_lib_find(const ut_cuda_lib *l, void *(*emu)(const char *), const char *sym);

#endif
