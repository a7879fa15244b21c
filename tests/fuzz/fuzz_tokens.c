/* Fuzz target: a token shard (llm.c .bin layout) through
 * ut_token_dataset_open. Input layout: 2 bytes little-endian seq_len - 1,
 * 2 bytes little-endian vocab_size - 1, then the shard. */
#include "fuzz_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t opt[4];
    fz_take(&data, &size, opt, sizeof opt);
    int64_t seq_len = 1 + (opt[0] | opt[1] << 8), vocab = 1 + (opt[2] | opt[3] << 8);
    const char *path = fz_write("shard_000.bin", data, size);
    char err[1024] = "";
    ut_dataset *ds = ut_token_dataset_open(path, seq_len, vocab, err, sizeof err);
    if (ds) fz_read_ends(ds);
    else fz_check_err(err, path);
    return 0;
}
