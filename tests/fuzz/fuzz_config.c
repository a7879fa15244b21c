/* Fuzz target: a YAML run configuration through ut_config_load. A file that
 * loads is written back as the resolved config.yml (what a run directory
 * keeps for resuming), which must load again to the same hash; a file that
 * does not load must say why, naming the file. */
#include <stdio.h>
#include <string.h>

#include "fuzz.h"
#include "utrain/config.h"

/* The resolved YAML of c loads back into a configuration with the same hash. */
static void check_round_trip(const ut_config *c) {
    const char *path = fz_path("resolved.yml");
    FILE *f = fopen(path, "w");
    if (!f || ut_config_write(c, f) != 0 || fclose(f) != 0) abort();
    ut_config back;
    ut_config_init(&back);
    char err[1024];
    if (ut_config_load(&back, path, err, sizeof err) != 0) {
        fprintf(stderr, "the resolved configuration does not load: %s\n", err);
        abort();
    }
    if (ut_config_hash(&back) != ut_config_hash(c)) {
        fprintf(stderr, "the resolved configuration loads to another hash\n");
        abort();
    }
    ut_config_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_write("config.yml", data, size);
    ut_config c;
    ut_config_init(&c);
    char err[1024] = "";
    if (ut_config_load(&c, path, err, sizeof err) == 0) {
        check_round_trip(&c);
        (void)ut_config_validate(&c, err, sizeof err);
    } else {
        fz_check_err(err, path);
    }
    ut_config_free(&c);
    return 0;
}
