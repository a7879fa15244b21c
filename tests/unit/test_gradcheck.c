/* Gradient check of every op: runs each family's rows and fails if an op in
 * ops.def never appeared on a checked tape. */
#include <stdio.h>
#include <string.h>

#include "gradcheck.h"
#include "test.h"

/* One line per family of rows (tests/unit/gradcheck_<family>.c). */
#define GC_FAMILIES(X) X(core) X(unary) X(loss) X(nn)

#define DECLARE(f) extern const gc_row gc_rows_##f[]; extern const int gc_nrows_##f;
GC_FAMILIES(DECLARE)

static bool seen[256];

static void run_family(const char *fam, const gc_row *rows, int n) {
    for (int i = 0; i < n; i++) {
        char msg[512] = "";
        int rc = gc_run(&rows[i], seen, msg, sizeof msg);
        if (rc) {
            t_failed++;
            printf("FAIL gradcheck %s/%s: %s\n", fam, rows[i].name, msg);
        } else {
            t_passed++;
            printf("ok   gradcheck %s/%s\n", fam, rows[i].name);
        }
    }
}

static void test_every_op_has_a_row(void) {
    for (int op = 1; op < ut_op_count(); op++)
        CHECK(seen[op], "op '%s' has no gradcheck row", ut_op_name(op));
}

int main(void) {
#define RUNF(f) run_family(#f, gc_rows_##f, gc_nrows_##f);
    GC_FAMILIES(RUNF)
    RUN(test_every_op_has_a_row);
    return TEST_SUMMARY();
}
