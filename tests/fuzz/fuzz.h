/* Shared by the fuzz targets: the parsers read files by path, so each input
 * is written into a private temporary directory (under /dev/shm when there is
 * one: no disk writes at thousands of runs per second), removed at exit.
 * Every target defines LLVMFuzzerTestOneInput; libFuzzer drives it under
 * `make fuzz`, tests/fuzz/replay.c feeds it the committed inputs under
 * `make test`.
 * defines: fz_path, fz_write, fz_take, fz_check_err. */
#ifndef UTRAIN_FUZZ_H
#define UTRAIN_FUZZ_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_dir[64];

static inline void fz_cleanup(void) {
    DIR *d = opendir(fz_dir);
    if (!d) return;
    char path[320];
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", fz_dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(fz_dir);
}

/* dir/name in the private directory (made on first use). The returned
 * buffer is one of four, reused in turn. */
static inline const char *fz_path(const char *name) {
    static char buf[4][160];
    static int k;
    if (!fz_dir[0]) {
        snprintf(fz_dir, sizeof fz_dir, "%s/utrain-fuzz-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(fz_dir)) {
            perror(fz_dir);
            abort();
        }
        atexit(fz_cleanup);
    }
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", fz_dir, name);
    return p;
}

/* Writes size bytes to the file name in the private directory; its path. */
static inline const char *fz_write(const char *name, const uint8_t *data, size_t size) {
    const char *path = fz_path(name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

/* Takes k bytes of parameters from the front of the input (zeros when it is
 * shorter), so one input carries both the options and the file. */
static inline void fz_take(const uint8_t **data, size_t *size, uint8_t *out, size_t k) {
    memset(out, 0, k);
    size_t m = *size < k ? *size : k;
    if (m) memcpy(out, *data, m);
    *data += m;
    *size -= m;
}

/* abort() unless err names path: bad input must be reported against its
 * file (every loader's messages start with the path). */
static inline void fz_check_err(const char *err, const char *path) {
    if (strncmp(err, path, strlen(path)) != 0) {
        fprintf(stderr, "error message without the file name: '%s'\n", err);
        abort();
    }
}

#endif
