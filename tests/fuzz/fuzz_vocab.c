/* Fuzz target: a saved vocabulary (vocab.txt of a run directory) through
 * ut_vocab_load; one that loads encodes a small TSV file and survives a save
 * and load. */
#include "fuzz_data.h"

static const char tsv[] = "sentence\tlabel\nHello, world! it's a fine day\t0\n\t1\nzzz \xc3\xa9t\xc3\xa9\t0\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_write("vocab.txt", data, size);
    char err[1024] = "";
    ut_vocab *v = ut_vocab_load(path, err, sizeof err);
    if (!v) {
        fz_check_err(err, path);
        return 0;
    }
    const char *text = fz_write("dev.tsv", (const uint8_t *)tsv, sizeof tsv - 1);
    ut_dataset *ds = ut_tsv_dataset_open(text, NULL, v, 8, err, sizeof err);
    if (ds) fz_read_ends(ds);
    const char *again = fz_path("again.txt");
    if (ut_vocab_save(v, again, err, sizeof err) != 0) abort();
    ut_vocab *back = ut_vocab_load(again, err, sizeof err);
    if (!back || ut_vocab_size(back) != ut_vocab_size(v)) {
        fprintf(stderr, "a loaded vocabulary does not survive a save: %s\n", back ? "size" : err);
        abort();
    }
    ut_vocab_free(back);
    ut_vocab_free(v);
    return 0;
}
