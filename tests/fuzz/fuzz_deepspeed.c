/* Fuzz target: a DeepSpeed JSON file (FlagAI's `deepspeed_config`, the
 * Hugging Face Trainer's `deepspeed`) named by a run configuration and read
 * through ut_config_load. A file that loads gives a configuration whose
 * resolved YAML loads back to the same hash; one that does not must say
 * why, naming the run configuration's line and the JSON file. */
#include <stdio.h>
#include <string.h>

#include "fuzz.h"
#include "utrain/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *ds = fz_write("ds.json", data, size);
    char yml[256];
    snprintf(yml, sizeof yml, "deepspeed_config: %s\n", ds);
    const char *path = fz_write("config.yml", (const uint8_t *)yml, strlen(yml));
    ut_config c;
    ut_config_init(&c);
    char err[1024] = "";
    if (ut_config_load(&c, path, err, sizeof err) == 0) {
        const char *back_path = fz_path("resolved.yml");
        FILE *f = fopen(back_path, "w");
        if (!f || ut_config_write(&c, f) != 0 || fclose(f) != 0) abort();
        ut_config back;
        ut_config_init(&back);
        if (ut_config_load(&back, back_path, err, sizeof err) != 0) {
            fprintf(stderr, "the resolved configuration does not load: %s\n", err);
            abort();
        }
        if (ut_config_hash(&back) != ut_config_hash(&c)) {
            fprintf(stderr, "the resolved configuration loads to another hash\n");
            abort();
        }
        ut_config_free(&back);
        (void)ut_config_validate(&c, err, sizeof err);
    } else {
        fz_check_err(err, path);
        if (!strstr(err, ds)) {
            fprintf(stderr, "error message without the DeepSpeed file's name: '%s'\n", err);
            abort();
        }
    }
    ut_config_free(&c);
    return 0;
}
