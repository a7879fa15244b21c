/* Opening an NVIDIA library at run time (dl.h). */
#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int ut_cuda_lib_open(ut_cuda_lib *l, const char *env, const char *soname, const char *libdir, const char *hint,
                     char *err, size_t n) {
    const char *path = getenv(env);
    l->handle = NULL;
    l->emulated = false;
    l->name = soname;
    if (path && *path) {
        l->name = path;
        if ((l->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL))) return 0;
        const char *why = dlerror();
        snprintf(err, n, "%s could not be opened from %s=%s (%s); point it at a %s, or unset it", soname, env, path,
                 why ? why : "not found", soname);
        return -1;
    }
#ifdef UT_CUDA_EMU
    l->emulated = true;
    l->name = "the CUDA emulator's stand-in";
    return 0;
#endif
    l->handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!l->handle && libdir) {
        char full[1024];
        snprintf(full, sizeof full, "%s/%s", libdir, soname);
        l->handle = dlopen(full, RTLD_NOW | RTLD_LOCAL);
    }
    if (l->handle) return 0;
    const char *why = dlerror();
    snprintf(err, n, "%s is not installed here (%s); %s, with its lib folder on LD_LIBRARY_PATH or the file named "
             "by %s", soname, why ? why : "not found", hint, env);
    return -1;
}

void *ut_cuda_lib_find(const ut_cuda_lib *l, void *(*emu)(const char *), const char *sym) {
    if (l->emulated) return emu ? emu(sym) : NULL;
    return l->handle ? dlsym(l->handle, sym) : NULL;
}
