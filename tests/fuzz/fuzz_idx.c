/* Fuzz target: IDX images + labels (plain or gzip, detected by the magic
 * bytes) through ut_idx_dataset_open. Input layout: 4 bytes little-endian
 * length L of the images file, 1 byte lo, 1 byte hi (255: to the end), then
 * L bytes of images, then the labels file. */
#include "fuzz_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t opt[6];
    fz_take(&data, &size, opt, sizeof opt);
    size_t len = (size_t)opt[0] | (size_t)opt[1] << 8 | (size_t)opt[2] << 16 | (size_t)opt[3] << 24;
    if (len > size) len = size;
    const char *images = fz_write("images-idx3-ubyte", data, len);
    const char *labels = fz_write("labels-idx1-ubyte", data + len, size - len);
    int64_t lo = opt[4], hi = opt[5] == 255 ? -1 : opt[5];
    char err[1024] = "";
    ut_dataset *ds = ut_idx_dataset_open(images, labels, 0.2860, 0.3530, lo, hi, err, sizeof err);
    if (ds) fz_read_ends(ds);
    else if (strncmp(err, images, strlen(images))) fz_check_err(err, labels);
    return 0;
}
