/* Replays the committed inputs of one fuzz target through its
 * LLVMFuzzerTestOneInput without libFuzzer: every file of
 * tests/fuzz/<target>/corpus/ (seeds and what fuzzing found interesting) and
 * tests/fuzz/<target>/crashes/ (every crash ever found, kept so that a fixed
 * crash stays fixed), each in a process of its own (this program run again
 * with the file as its argument, which is also how to replay one input by
 * hand) so that one failure names its file and the others still run. Built with ASan + UBSan (LeakSanitizer on),
 * errors fatal; run by `make test` from the repository root through
 * tests/run.sh, printing "N passed, N failed". FUZZ_TARGET is the target's
 * name (-DFUZZ_TARGET="config").
 *
 * tests/fuzz/<target>/known_open lists crash files (one name a line, '#'
 * comments) whose fix is not in yet: they still run, and a failure is
 * reported as "known open" without failing the suite; one that passes is
 * reported so that the line can be deleted. Delete the file to make every
 * crash input count. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=1:abort_on_error=0"; }
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "print_stacktrace=1:halt_on_error=1"; }

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;)
        if ((n += got) == cap) buf = realloc(buf, cap *= 2);
    fclose(f);
    *len = n;
    return buf;
}

/* Runs one input in this process: the child's side. */
static int replay_here(const char *path) {
    size_t len;
    unsigned char *data = slurp(path, &len);
    if (!data) {
        fprintf(stderr, "%s: cannot read\n", path);
        return 3;
    }
    int argc = 1;
    char *args[] = {(char *)path, NULL}, **argv = args;
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    return 0;   /* LeakSanitizer checks at exit */
}

/* Runs one input in a new process (this program with the file as its
 * argument: exec, not just fork, so no runtime state is inherited); its exit
 * status, 128 + signal, or -1. */
static int replay_one(const char *path) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execl("/proc/self/exe", "replay", path, (char *)NULL);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) return -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

static char known[8192];   /* known_open, NUL-separated names */

static void read_known_open(void) {
    FILE *f = fopen("tests/fuzz/" FUZZ_TARGET "/known_open", "r");
    if (!f) return;
    char line[256];
    size_t at = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, " \t\r\n#")] = 0;
        size_t len = strlen(line);
        if (len && at + len + 2 < sizeof known) {
            memcpy(known + at, line, len + 1);
            at += len + 1;
        }
    }
    fclose(f);
}

static int is_known_open(const char *name) {
    for (const char *k = known; *k; k += strlen(k) + 1)
        if (!strcmp(k, name)) return 1;
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every file of dir in name order; adds to *pass and *fail (and
 * *open for known-open crash inputs that still fail). */
static void replay_dir(const char *dir, int *pass, int *fail, int *open) {
    DIR *d = opendir(dir);
    if (!d) return;   /* a target may have no crashes/ yet */
    char *names[4096];
    int k = 0;
    for (struct dirent *e; (e = readdir(d)) && k < 4096;)
        if (e->d_name[0] != '.') names[k++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)k, sizeof *names, cmp_str);
    char path[1024];
    for (int i = 0; i < k; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        int rc = replay_one(path), known_open = open && is_known_open(names[i]);
        if (known_open && rc == 0) printf("note %s passes now: delete its line in known_open\n", path);
        if (rc == 0 || known_open) (*pass)++;
        if (known_open && rc != 0) {
            (*open)++;
            printf("known open %s (exit %d): listed in known_open, not counted as a failure\n", path, rc);
        } else if (rc != 0) {
            (*fail)++;
            printf("FAIL %s (exit %d)\n", path, rc);
        }
        free(names[i]);
    }
}

int main(int argc, char **argv) {
    if (argc == 2) return replay_here(argv[1]);
    int pass = 0, fail = 0, open = 0;
    read_known_open();
    replay_dir("tests/fuzz/" FUZZ_TARGET "/corpus", &pass, &fail, NULL);
    int corpus = pass + fail;
    replay_dir("tests/fuzz/" FUZZ_TARGET "/crashes", &pass, &fail, &open);
    if (corpus == 0) {
        printf("FAIL tests/fuzz/" FUZZ_TARGET "/corpus: no inputs (run from the repository root)\n");
        fail++;
    }
    printf("fuzz target %s: %d inputs replayed (%d of them crash inputs of known open bugs)\n",
           FUZZ_TARGET, pass + fail, open);
    printf("%d passed, %d failed\n", pass, fail);
    return fail ? 1 : 0;
}
