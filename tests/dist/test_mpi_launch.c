/* Runs the communicator's rank program (tests/dist/test_comm.c, built as
 * mpi_comm_ranks beside this binary) under mpirun: with 1, 2 and 4 ranks
 * (every rank must report success), with 3 ranks and small MPI chunks (the
 * path for counts past INT_MAX), and the failure modes: a rank that skips a
 * collective (the others time out, naming it), a rank killed mid-run and a
 * rank failing an assertion (the whole job must end quickly, non-zero). Every
 * job is killed after 30 s, which fails its test, and no rank process may be
 * left behind.
 *
 * The same program runs on the TCP backend, its ranks started as torchrun
 * starts them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) by a job process
 * that, like torchrun, ends the other ranks when one fails: 2, 3 and 4
 * ranks, and the failure modes with TCP's reports. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "test.h"

#define JOB_LIMIT_S 30.0

static char rank_prog[PATH_MAX];

typedef struct {
    int status;  /* exit code, or 128 + signal */
    double secs;
    bool hung;   /* killed after JOB_LIMIT_S */
    int leftover; /* rank processes still alive after the job */
    char *out;   /* stdout and stderr together */
} job;

/* The common MPI job environment (tp_mpi_env), and the chunk size of
 * comm operations when chunk is set. */
static void job_env(const char *chunk) {
    tp_mpi_env(true);
    if (chunk) setenv("UT_COMM_CHUNK", chunk, 1);
}

/* Kills (by pid) and counts the processes running the rank program. */
static int kill_rank(pid_t pid, const char *cmdline, size_t len, void *count) {
    (void)len;
    if (strcmp(cmdline, rank_prog) == 0) {
        kill(pid, SIGKILL);
        ++*(int *)count;
    }
    return 0;
}

static int reap_leftovers(void) {
    int n = 0;
    tp_each_proc(kill_rank, &n);
    return n;
}

static void append(job *j, size_t *len, size_t *cap, const char *buf, size_t n) {
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        j->out = realloc(j->out, *cap);
        if (!j->out) abort();
    }
    memcpy(j->out + *len, buf, n);
    *len += n;
    j->out[*len] = 0;
}


/* The TCP job: np rank processes with torchrun's variables; 1 s after one
 * exits non-zero the others are killed (torchrun ends them at once; the
 * second lets every rank that saw the failure print its report). Exits
 * with the first failure's code. */
static void tcp_job(int np, const char *mode) {
    char v[32];
    snprintf(v, sizeof v, "%d", tp_free_port());
    setenv("MASTER_PORT", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", np);
    setenv("WORLD_SIZE", v, 1);
    pid_t pids[16];
    for (int r = 0; r < np; r++) {
        pids[r] = fork();
        if (pids[r] < 0) abort();
        if (pids[r] == 0) {
            snprintf(v, sizeof v, "%d", r);
            setenv("RANK", v, 1);
            setenv("LOCAL_RANK", v, 1);
            char *args[] = {rank_prog, (char *)mode, NULL};
            execv(rank_prog, args);
            _exit(127);
        }
    }
    int rc = 0, left = np;
    double kill_at = 0;
    while (left > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, kill_at ? WNOHANG : 0);
        if (pid < 0) break;
        if (pid == 0) {
            if (tp_now_s() > kill_at)
                for (int r = 0; r < np; r++) kill(pids[r], SIGKILL);
            usleep(20000);
            continue;
        }
        left--;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (code && !rc) {
            rc = code;
            kill_at = tp_now_s() + 1;
        }
    }
    _exit(rc);
}

/* mpirun -np N --oversubscribe mpi_comm_ranks [mode] (or, with tcp, the
 * TCP job), in its own process group so a hung job can be killed whole. */
static job run_job_on(bool tcp, int np, const char *mode, const char *chunk) {
    job j = {.status = -1};
    size_t len = 0, cap = 0;
    append(&j, &len, &cap, "", 0);
    int fd[2];
    if (pipe(fd)) abort();
    char nps[16];
    snprintf(nps, sizeof nps, "%d", np);
    double t0 = tp_now_s();
    pid_t pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
        setpgid(0, 0);
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        if (tcp) tcp_job(np, mode);
        job_env(chunk);
        char *args[] = {"mpirun", "-np", nps, "--oversubscribe", rank_prog, (char *)mode, NULL};
        if (!mode) args[5] = NULL;
        execvp("mpirun", args);
        fprintf(stderr, "cannot run mpirun: %s\n", strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(fd[1]);
    bool eof = false, exited = false;
    while (!(eof && exited)) {
        if (!j.hung && tp_now_s() - t0 > JOB_LIMIT_S) {
            j.hung = true;
            kill(-pid, SIGKILL);
        }
        if (j.hung && tp_now_s() - t0 > JOB_LIMIT_S + 5) break; /* output held open by orphans */
        if (!eof) {
            struct pollfd p = {.fd = fd[0], .events = POLLIN};
            if (poll(&p, 1, 100) > 0) {
                char buf[4096];
                ssize_t n = read(fd[0], buf, sizeof buf);
                if (n > 0) append(&j, &len, &cap, buf, (size_t)n);
                else if (n == 0 || errno != EINTR) eof = true;
            }
        } else {
            usleep(10000);
        }
        int st;
        if (!exited && waitpid(pid, &st, WNOHANG) == pid) {
            exited = true;
            j.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
    }
    j.secs = tp_now_s() - t0;
    close(fd[0]);
    if (!exited) {
        kill(-pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    usleep(200000); /* ranks killed by mpirun need a moment to go */
    j.leftover = reap_leftovers();
    printf("  %snp=%d %s%s: exit %d in %.1f s%s\n", tcp ? "tcp " : "", np, mode ? mode : "tests",
           chunk ? " (small chunks)" : "", j.status, j.secs, j.hung ? " (HUNG, killed)" : "");
    return j;
}

static bool on_tcp;

static job run_job(int np, const char *mode, const char *chunk) { return run_job_on(on_tcp, np, mode, chunk); }

/* The job's last 60 lines, marked so run.sh does not take them for ours. */
static void show_output(const job *j) {
    const char *p = j->out + strlen(j->out);
    for (int lines = 0; p > j->out && lines <= 60; p--) lines += p[-1] == '\n';
    if (*p == '\n') p++;
    fprintf(stderr, "  --- job output%s ---\n", p > j->out ? " (last 60 lines)" : "");
    while (*p) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(stderr, "  | %.*s\n", n, p);
        p += n + (nl != NULL);
    }
}

// --- every rank passes its tests ------------------------------------------------

static void check_ranks(int np, const char *chunk) {
    job j = run_job(np, NULL, chunk);
    int before = t_checks_failed;
    CHECK(!j.hung && j.status == 0, "np=%d: exit %d%s", np, j.status, j.hung ? ", hung" : "");
    CHECK(j.leftover == 0, "%d rank processes left behind", j.leftover);
    for (int r = 0; r < np; r++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d/%d: ", r, np);
        const char *line = strstr(j.out, want);
        int passed = 0, failed = -1;
        if (line) sscanf(line + strlen(want), "%d passed, %d failed", &passed, &failed);
        CHECK(line && passed > 0 && failed == 0, "rank %d of %d did not report success", r, np);
    }
    if (t_checks_failed != before) show_output(&j);
    free(j.out);
}

static void test_1_rank(void) { check_ranks(1, NULL); }
static void test_2_ranks(void) { check_ranks(2, NULL); }
static void test_4_ranks(void) { check_ranks(4, NULL); }
static void test_3_ranks_small_chunks(void) { check_ranks(3, "1000"); }

// --- failures end the whole job ---------------------------------------------------

/* The job ends within within_s, non-zero, leaving nothing behind, and its
 * output says must_say and and_say, or (when or_say is given) or_say[0] and
 * or_say[1]: the words of another rank that may report first. */
static void check_failure_or(const char *mode, const char *must_say, const char *and_say, const char *const *or_say,
                             double within_s) {
    job j = run_job(3, mode, NULL);
    int before = t_checks_failed;
    CHECK(!j.hung, "%s: the job hung and was killed after %.0f s", mode, JOB_LIMIT_S);
    CHECK(j.status != 0, "%s: the job exited 0", mode);
    CHECK(j.secs < within_s, "%s: the job took %.1f s (limit %.0f s)", mode, j.secs, within_s);
    CHECK(j.leftover == 0, "%s: %d rank processes left behind", mode, j.leftover);
    CHECK(!strstr(j.out, "still running"), "%s: a rank went on after the failure", mode);
    const char *say[2] = {must_say, and_say};
    bool first = true, other = or_say != NULL;
    for (int i = 0; i < 2; i++) {
        first = first && (!say[i] || strstr(j.out, say[i]));
        other = other && strstr(j.out, or_say[i]);
    }
    if (!other)
        for (int i = 0; i < 2; i++)
            if (say[i]) CHECK(strstr(j.out, say[i]) != NULL, "%s: no \"%s\" in the output", mode, say[i]);
    CHECK(first || other, "%s: neither report in the output", mode);
    if (t_checks_failed != before) show_output(&j);
    free(j.out);
}

static void check_failure(const char *mode, const char *must_say, const char *and_say, double within_s) {
    check_failure_or(mode, must_say, and_say, NULL, within_s);
}

/* rank 1 skips allreduce #3: ranks 0 and 2 report it after 3 s and abort;
 * the first abort may end the job before the other rank has printed, so
 * either rank's line will do */
static void test_timeout_names_the_collective(void) {
    check_failure("timeout", ": timeout after 3 s in allreduce #3 (4 elements)",
                  "rank 1 has not reached it (its last operation: barrier #2, done)", 20);
}

/* the reporting rank asks the others' watchdogs where they are: a rank that
 * cannot answer (stopped) and one in another operation are named as such */
static void test_timeout_names_a_stopped_rank(void) {
    check_failure("stopped", ": timeout after 3 s in allreduce #3 (4 elements)",
                  "rank 1 did not answer within 2 s", 20);
}

/* a receive that never matches, in a process group: the report names the
 * group, the receive and what its partner is doing */
static void test_timeout_names_a_missing_send(void) {
    check_failure("p2p", "utrain: pp rank 0 (world rank 0): timeout after 3 s in recv #1 (4 elements from rank 1)",
                  "pp rank 1 has not posted its match (its newest operation: none, done)", 20);
}

/* rank 1 runs a broadcast as #3 while the others run an allreduce: each
 * side times out in its own and names what the other is in; whichever
 * reports first ends the job, so either side's report will do */
static void test_timeout_names_a_diverged_rank(void) {
    static const char *const rank1[2] = {"rank 1: timeout after 3 s in bcast #3 (8 bytes from rank 0)",
                                         "is in allreduce #3 (4 elements) instead"};
    check_failure_or("branch", ": timeout after 3 s in allreduce #3 (4 elements)",
                     "rank 1 is in bcast #3 (8 bytes from rank 0) instead", rank1, 20);
}

// --- the TCP backend ---------------------------------------------------------------

static void test_tcp_ranks(void) {
    on_tcp = true;
    check_ranks(2, NULL);
    check_ranks(3, NULL);
    check_ranks(4, NULL);
    on_tcp = false;
}

/* The failure modes over TCP: the operation fails with a report and the
 * rank exits; the job process ends the rest. A rank that never reaches the
 * collective is named by the rank receiving from it; ranks in different
 * operations name each other's; a dead rank is named by its neighbours. */
static void test_tcp_failures(void) {
    on_tcp = true;
    check_failure("timeout", "rank 2: timeout after 3 s in allreduce #3 (4 elements): waiting for rank 1, which has "
                             "not reached this operation", NULL, 20);
    static const char *const rank1[2] = {"rank 1: bcast #3 (8 bytes from rank 0) failed: rank 0 is in allreduce #3 "
                                         "(4 elements) instead", "the ranks issued different operations"};
    check_failure_or("branch", "rank 2: allreduce #3 (4 elements) failed: rank 1 is in bcast #3 (8 bytes from rank 0) "
                               "instead", "the ranks issued different operations", rank1, 20);
    check_failure("p2p", "utrain: pp rank 0 (world rank 0): timeout after 3 s in recv #1 (4 elements from rank 1): "
                         "pp rank 1 has sent nothing", NULL, 20);
    check_failure("crash", "failed: rank 1 closed its connection", "it exited or was killed", 20);
    check_failure("abort", "rank 1 fails on purpose", "failed: rank 1 closed its connection", 20);
    on_tcp = false;
}

/* rank 1 dies of SIGKILL; OpenMPI ends the others (no watchdog armed) */
static void test_killed_rank_ends_the_job(void) { check_failure("crash", NULL, NULL, 20); }

/* rank 1 fails an assertion: ut_abort's handler calls MPI_Abort. The other
 * ranks wait in a collective with no watchdog, so only MPI_Abort can end the
 * job within the limit. (OpenMPI's own "MPI_ABORT was invoked" text is not
 * required: mpirun fails to print it under memory pressure, e.g. with ASan.) */
static void test_abort_ends_the_job(void) { check_failure("abort", "rank 1 fails on purpose", NULL, 20); }

int main(void) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    *strrchr(self, '/') = 0;
    snprintf(rank_prog, sizeof rank_prog, "%s/mpi_comm_ranks", self);
    if (access(rank_prog, X_OK)) {
        fprintf(stderr, "no rank program %s (make tests builds it)\n", rank_prog);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN(test_1_rank);
    RUN(test_2_ranks);
    RUN(test_4_ranks);
    RUN(test_3_ranks_small_chunks);
    RUN(test_timeout_names_the_collective);
    RUN(test_timeout_names_a_stopped_rank);
    RUN(test_timeout_names_a_diverged_rank);
    RUN(test_timeout_names_a_missing_send);
    RUN(test_killed_rank_ends_the_job);
    RUN(test_abort_ends_the_job);
    RUN(test_tcp_ranks);
    RUN(test_tcp_failures);
    return TEST_SUMMARY();
}
