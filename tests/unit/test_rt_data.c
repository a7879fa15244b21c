/* The Rotten Tomatoes data set-up makes (scripts/fetch-pretrained.sh): the
 * awk conversion on a small CSV with the corpus' hard cases, and the real
 * split in data/rt read back as SST-2 TSV files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "test.h"
#include "utrain/data.h"

static char dir[256], err[512];

static const char *HEADER = "category,filename,text,movie_name\n";
static const char *ROWS =
    "plot,a.html,\"A plot, with a comma\n\nand a blank line\",m1\n"
    "fresh,b.html,\"Funny, \"\"sharp\"\" and\tkind.\",m2\n"
    "rotten,c.html,Dull.,m3\n"
    "fresh,d.html,\"Two\r\nlines\",m4\n";

/* Four copies of the rows (12 snippets: the awk refuses fewer than 10); one
 * example per line after the header, in any order (the split shuffles). */
static void test_awk_conversion(void) {
    char csv[300], cmd[800], path[300];
    snprintf(csv, sizeof csv, "%s/in.csv", dir);
    FILE *f = fopen(csv, "w");
    CHECK(f, "cannot write %s", csv);
    if (!f) return;
    fputs(HEADER, f);
    for (int k = 0; k < 4; k++) fputs(ROWS, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "awk -v out=%s -f scripts/rt-to-tsv.awk < %s", dir, csv);
    CHECK(system(cmd) == 0, "rt-to-tsv.awk failed: %s", cmd);
    char *all = NULL;
    size_t total = 0;
    int fresh = 0, rotten = 0, lines = 0;
    static const char *const splits[] = {"train", "dev", "test"};
    for (int s = 0; s < 3; s++) {
        snprintf(path, sizeof path, "%s/%s.tsv", dir, splits[s]);
        char *t = tp_slurp(path);
        CHECK(t && !strncmp(t, "sentence\tlabel\n", 15), "%s: header", path);
        if (!t) continue;
        for (char *l = strchr(t, '\n') + 1; *l; l = strchr(l, '\n') + 1) {
            lines++;
            fresh += !strncmp(l, "Funny, \"sharp\" and kind.\t1\n", 27) || !strncmp(l, "Two lines\t1\n", 12);
            rotten += !strncmp(l, "Dull.\t0\n", 8);
        }
        total += strlen(t);
        free(all);
        all = t;
    }
    free(all);
    CHECK(lines == 12 && fresh == 8 && rotten == 4, "%d lines, %d fresh, %d rotten (want 12, 8, 4)", lines, fresh,
          rotten);
    CHECK(total > 0, "no output");
}

/* The real files: 4866 snippets split 3892 / 486 / 488, two classes. */
static void test_rotten_tomatoes_split(void) {
    static const char *const files[] = {"data/rt/train.tsv", "data/rt/dev.tsv", "data/rt/test.tsv"};
    static const int64_t want[] = {3892, 486, 488};
    ut_vocab *v = ut_vocab_build("word", files[0], NULL, 1, err, sizeof err);
    CHECK(v, "%s (missing? run scripts/fetch-pretrained.sh; make test runs it through scripts/install-deps.sh)",
          err);
    if (!v) return;
    CHECK(ut_vocab_num_classes(v) == 2, "%lld classes", (long long)ut_vocab_num_classes(v));
    for (int s = 0; s < 3; s++) {
        ut_dataset *ds = ut_tsv_dataset_open(files[s], NULL, v, 16, err, sizeof err);
        CHECK(ds && ds->n == want[s], "%s: %s (n %lld, want %lld)", files[s], err, ds ? (long long)ds->n : -1LL,
              (long long)want[s]);
        ut_dataset_free(ds);
    }
    ut_vocab_free(v);
}

int main(void) {
    if (!tp_make_tmpdir(dir, sizeof dir, "utrain-rt")) return 1;
    RUN(test_awk_conversion);
    RUN(test_rotten_tomatoes_split);
    return tp_finish(TEST_SUMMARY(), dir);
}
