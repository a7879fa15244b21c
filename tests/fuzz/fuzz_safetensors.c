/* Fuzz target: the safetensors reader (ut_st_open). A file it accepts must
 * hand out every tensor it lists, with data inside the file (every byte is
 * read, so ASan catches an offset past the end); one it rejects must say
 * why, naming the file. */
#include <string.h>

#include "fuzz.h"
#include "utrain/io.h"

static volatile unsigned sink;   /* keeps the reads of walk */

static void walk(const ut_st_file *f) {
    unsigned sum = 0;
    for (int i = 0; i < ut_st_count(f); i++) {
        const ut_st_tensor *t = ut_st_get(f, ut_st_name(f, i));
        if (!t || t->nbytes != (size_t)ut_st_numel(t) * ut_st_dtype_size(t->dtype)) abort();
        const unsigned char *b = t->data;
        for (size_t k = 0; k < t->nbytes; k++) sum += b[k];
    }
    (void)ut_st_meta(f, "format");
    (void)ut_st_meta(f, "utrain.checksum");
    sink = sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_write("in.safetensors", data, size);
    char err[1024] = "";
    ut_st_file *f = ut_st_open(path, err, sizeof err);
    if (f) walk(f);
    else fz_check_err(err, path);
    ut_st_close(f);
    return 0;
}
