/* Shared helpers of the data layer: error text, file reading, and
 * ut_dataset_free. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_internal.h"
#include "utrain/base.h"

char *ut__data_strdup(const char *s) {
    size_t len = strlen(s) + 1;
    char *d = ut_malloc_check(len);
    memcpy(d, s, len);
    return d;
}

unsigned char *ut__read_file(const char *path, size_t *size, char *err, size_t n) {
    int fd = ut_open_regular(path, err, n);
    if (fd < 0) return NULL;
    struct stat st;
    FILE *f = fdopen(fd, "rb");
    if (!f || fstat(fd, &st)) {
        ut_errorf(err, n, "%s: cannot read: %s", path, strerror(errno));
        if (f) fclose(f);
        else close(fd);
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    unsigned char *buf = ut_malloc_check(len + 1);
    size_t got = fread(buf, 1, len, f);
    int bad = ferror(f);
    fclose(f);
    if (got != len || bad) {
        ut_errorf(err, n, "%s: read %zu of %zu bytes: %s", path, got, len,
                     bad ? strerror(errno) : "file shrank while reading");
        ut_free(buf);
        return NULL;
    }
    buf[len] = 0;
    *size = len;
    return buf;
}

void ut_dataset_free(ut_dataset *ds) {
    if (ds && ds->free) ds->free(ds);
}
