/* The layering rules of docs/engine.md, checked by
 * tests/tools/check_tensor_data.sh: on this repository (it must pass), and on
 * small trees that break each rule (it must fail and name the file). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "proc.h"
#include "test.h"

static char repo[PATH_MAX], script[PATH_MAX + 64], tmp[256];

/* Runs the check on root with allowlist allow; its exit code, output in *out. */
static int check(const char *root, const char *allow, char **out) {
    char cmd[3 * PATH_MAX], log[PATH_MAX];
    snprintf(log, sizeof log, "%s/check.log", tmp);
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' > '%s' 2>&1", script, root, allow, log);
    int rc = system(cmd);
    *out = tp_slurp(log);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static void put(const char *rel, const char *text) {
    char path[PATH_MAX], dir[PATH_MAX];
    snprintf(path, sizeof path, "%s/tree/%s", tmp, rel);
    snprintf(dir, sizeof dir, "mkdir -p \"$(dirname '%s')\"", path);
    CHECK(system(dir) == 0, "%s", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_repository_follows_the_rules(void) {
    char allow[PATH_MAX + 64], *out = NULL;
    snprintf(allow, sizeof allow, "%s/tests/tools/tensor_data_allow.txt", repo);
    int rc = check(repo, allow, &out);
    CHECK(rc == 0, "exit %d:\n%s", rc, out ? out : "");
    CHECK(out && strstr(out, " passed, 0 failed"), "%s", out ? out : "(no output)");
    free(out);
}

/* One tree: code that breaks each rule, code that only looks like it. */
static void make_tree(void) {
    put("src/models/bad.c", "float first(const ut_tensor *t) { return ut_f32(t)[0]; }\n");
    put("src/nn/grad.c", "void f(ut_tensor *t) { t->grad[0] = 1; }\n");
    put("src/train/clean.c", "/* ut_f32(t) and t->data only in a comment */\n"
                             "int n(const struct s *y) { return y->data.len; }\n");
    put("src/backend/cpu/kernel.c", "void k(ut_tensor *t) { ut_f32(t)[0] = 0; }\n");
    put("src/core/ctx.c", "void c(ut_tensor *t) { *(float *)t->data = 0; }\n");
    put("src/models/peek.c", "#include \"internal.h\"\n");
    /* a tensor over host memory handed to kernels; a declaration is no call */
    put("src/models/wrap.c", "ut_tensor *w(ut_ctx *ctx, int *ids) { return ut_tensor_wrap(ctx, UT_I32, 1, n, ids); }\n"
                             "ut_tensor *ut_tensor_wrap(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne, void *d);\n");
    put("src/ops/op.c", "#include \"internal.h\"\n");
    /* a kernel reaching into its tensor's context instead of its ut_kctx */
    put("src/backend/cpu/snoop.c", "void f(ut_tensor *t, UT_KCTX) { ut_ctx_dalloc(t->ctx, 4); }\n"
                                     "/* t->ctx in a comment is fine */\n");
}

/* tmp/name holding text, its path into allow (PATH_MAX); false if unwritable */
static bool write_allow(char *allow, const char *name, const char *text) {
    snprintf(allow, PATH_MAX, "%s/%s", tmp, name);
    FILE *f = fopen(allow, "w");
    CHECK(f != NULL, "cannot write %s", allow);
    if (!f) return false;
    fputs(text, f);
    fclose(f);
    return true;
}

static void test_violations_fail_and_are_named(void) {
    char allow[PATH_MAX], root[PATH_MAX], *out = NULL;
    snprintf(root, sizeof root, "%s/tree", tmp);
    if (!write_allow(allow, "allow.txt", "# nothing allowed\n")) return;
    int rc = check(root, allow, &out);
    CHECK(rc == 1, "exit %d", rc);
    CHECK(out && strstr(out, "src/models/bad.c touches tensor data"), "%s", out ? out : "");
    CHECK(out && strstr(out, "src/nn/grad.c touches tensor data"), "%s", out ? out : "");
    CHECK(out && !strstr(out, "clean.c"), "a comment or ->data.member counted:\n%s", out ? out : "");
    CHECK(out && !strstr(out, "kernel.c") && !strstr(out, "ctx.c"), "%s", out ? out : "");
    CHECK(out && strstr(out, "src/models/peek.c includes core's private header"), "%s",
          out ? out : "");
    CHECK(out && !strstr(out, "src/ops/op.c"), "%s", out ? out : "");
    CHECK(out && strstr(out, "src/models/wrap.c touches tensor data outside src/backend (1 lines)"), "%s",
          out ? out : "");
    CHECK(out && strstr(out, "src/backend/cpu/snoop.c reaches into a tensor's context (1 lines)"), "%s",
          out ? out : "");
    CHECK(out && strstr(out, "5 failed"), "%s", out ? out : "");
    free(out);
}

static void test_allowlist_only_shrinks(void) {
    char allow[PATH_MAX], root[PATH_MAX], *out = NULL;
    snprintf(root, sizeof root, "%s/tree", tmp);
    /* bad.c and grad.c are allowed; clean.c and a deleted file must go */
    if (!write_allow(allow, "allow2.txt", "src/models/bad.c\nsrc/nn/grad.c\nsrc/train/clean.c\nsrc/io/gone.c\n"))
        return;
    int rc = check(root, allow, &out);
    CHECK(rc == 1, "exit %d", rc);
    CHECK(out && !strstr(out, "bad.c touches") && !strstr(out, "grad.c touches"), "%s",
          out ? out : "");
    CHECK(out && strstr(out, "src/train/clean.c no longer touches tensor data"), "%s",
          out ? out : "");
    CHECK(out && strstr(out, "src/io/gone.c is allowed but does not exist"), "%s", out ? out : "");
    free(out);
}

int main(int argc, char **argv) {
    (void)argc;
    /* argv[0] is BUILD/tests/unit/test_layering: the repository is BUILD/.. */
    char self[PATH_MAX];
    if (!realpath(argv[0], self)) {
        fprintf(stderr, "cannot resolve %s\n", argv[0]);
        return 1;
    }
    for (int up = 0; up < 4; up++) *strrchr(self, '/') = 0;
    snprintf(repo, sizeof repo, "%s", self);
    snprintf(script, sizeof script, "%s/tests/tools/check_tensor_data.sh", repo);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "ut-layering")) return 1;
    make_tree();
    RUN(test_repository_follows_the_rules);
    RUN(test_violations_fail_and_are_named);
    RUN(test_allowlist_only_shrinks);
    return tp_finish(TEST_SUMMARY(), tmp);
}
