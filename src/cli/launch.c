/* `--nproc N`: this process starts the N ranks through mpirun and stays as
 * their supervisor. It is the job's main process, the one a scheduler,
 * `timeout` or Ctrl-C signals, so it turns SIGTERM, SIGINT and SIGUSR1 into
 * the ranks' clean stop: each rank gets SIGUSR1, stops at the same step as
 * the others, rank 0 writes the checkpoint and every rank exits 75.
 *
 * The ranks get that SIGUSR1 by two routes. mpirun is sent one and forwards
 * it where it can; and since every rank runs on this node, below mpirun,
 * this process also sends it to each of them itself, because not every
 * mpirun forwards (Open MPI 4.1 as Ubuntu 24.04 builds it passes no SIGUSR1
 * on). A rank counts one request arriving by both routes once (the
 * trainer's rule: a second signal within a second counts only from the
 * same sender).
 *
 * mpirun runs in its own process group (a Ctrl-C in the terminal reaches
 * only this process, never mpirun, which would kill the ranks at once) and
 * gets SIGUSR1 if this process dies without a word (SIGKILL). The ranks also
 * watch this process (UTRAIN_SUPERVISOR holds its pid) and stop with a
 * checkpoint once it is gone, so they never outlive their supervisor
 * whatever mpirun does. A one-node job talks over shared memory and
 * loopback only. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch_check.h"
#include "utrain/utrain.h"

static volatile sig_atomic_t job_pid, stop_asks, stop_signal;
static const int stop_sigs[3] = {SIGTERM, SIGINT, SIGUSR1};
static char self_exe[1024];

/* The parent pid of process pid from /proc/PID/stat, or -1. The command
 * name (field 2) may hold spaces and parentheses, so the fields after it
 * are read from the last ')'. */
static pid_t parent_of(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = 0;
    char *close = strrchr(buf, ')');
    long ppid;
    if (!close || sscanf(close + 1, " %*c %ld", &ppid) != 1) return -1;
    return (pid_t)ppid;
}

/* Whether pid runs this program and descends from the job (mpirun). */
static bool is_rank_of(pid_t pid, pid_t job) {
    char path[64], exe[sizeof self_exe];
    snprintf(path, sizeof path, "/proc/%ld/exe", (long)pid);
    ssize_t k = readlink(path, exe, sizeof exe - 1);
    if (k <= 0) return false;
    exe[k] = 0;
    if (strcmp(exe, self_exe)) return false;
    for (pid_t p = parent_of(pid), hops = 0; p > 1 && hops < 64; p = parent_of(p), hops++)
        if (p == job) return true;
    return false;
}

/* The ranks already asked to stop `asked` times (at most 256 of them: the
 * ranks of one node). */
typedef struct {
    pid_t pid[256];
    int asked[256], n;
} rank_list;

/* Sends SIGUSR1 to every rank of the job running now until each has had one
 * per stop request: ranks that start after a request still get it. */
static void signal_ranks(rank_list *rl, pid_t job, int asks) {
    DIR *d = opendir("/proc");
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (*end || v <= 1 || (pid_t)v == getpid()) continue;
        pid_t pid = (pid_t)v;
        int i = 0;
        while (i < rl->n && rl->pid[i] != pid) i++;
        if (i < rl->n && rl->asked[i] >= asks) continue;
        if (i == rl->n) {
            if (rl->n == (int)(sizeof rl->pid / sizeof rl->pid[0]) || !is_rank_of(pid, job)) continue;
            rl->pid[rl->n] = pid;
            rl->asked[rl->n++] = 0;
        }
        while (rl->asked[i] < asks && kill(pid, SIGUSR1) == 0) rl->asked[i]++;
    }
    closedir(d);
}

/* Every stop signal goes to mpirun as SIGUSR1, which it forwards to each
 * rank: the first asks for a checkpoint at the next step, a second one ends
 * the ranks at once (the trainer's own rule). */
static void forward_stop(int sig) {
    stop_signal = sig;
    stop_asks = stop_asks + 1;
    if (job_pid > 0) kill((pid_t)job_pid, SIGUSR1);
}

static void catch_stops(struct sigaction old[3]) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_stop;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++) sigaddset(&sa.sa_mask, stop_sigs[i]);
    for (int i = 0; i < 3; i++) sigaction(stop_sigs[i], &sa, &old[i]);
}

static void restore_stops(const struct sigaction old[3]) {
    for (int i = 0; i < 3; i++) sigaction(stop_sigs[i], &old[i], NULL);
}

/* Runs mpirun with args and waits for it: its exit code, or 128 + signal. */
static int run_job(const char *const *args) {
    fflush(NULL);
    pid_t parent = getpid();
    /* blocked across fork: our handler must not run in the child (exec
     * resets caught signals to their defaults), nor see a half-set job_pid */
    sigset_t stops, old_mask;
    sigemptyset(&stops);
    for (int i = 0; i < 3; i++) sigaddset(&stops, stop_sigs[i]);
    sigprocmask(SIG_BLOCK, &stops, &old_mask);
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
        fprintf(stderr, "utrain: cannot start mpirun: %s\n", strerror(errno));
        return UT_EXIT_ERROR;
    }
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGUSR1);
        if (getppid() != parent) _exit(UT_EXIT_ERROR); /* the supervisor is already gone */
        int null = open("/dev/null", O_RDONLY);        /* mpirun never reads our terminal */
        if (null >= 0) dup2(null, STDIN_FILENO);
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
        execvp(args[0], (char **)args);
        fprintf(stderr, "utrain: cannot start %s: %s (apt-get install openmpi-bin)\n", args[0],
                strerror(errno));
        _exit(UT_EXIT_ERROR);
    }
    setpgid(pid, pid);
    job_pid = pid;
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    if (stop_asks) kill(pid, SIGUSR1); /* asked for while it was starting */
    /* Without a stop request this process sleeps in waitpid; once there is
     * one, it looks for ranks to signal ten times a second until the job
     * ends (ranks may still be starting). */
    int st, rc;
    rank_list *ranks = ut_calloc_check(1, sizeof *ranks);
    for (;;) {
        int asks = (int)stop_asks;
        rc = (int)waitpid(pid, &st, asks ? WNOHANG : 0);
        if (rc < 0 && errno == EINTR) continue;
        if (rc != 0) break;
        signal_ranks(ranks, pid, asks);
        usleep(100000);
    }
    ut_free(ranks);
    job_pid = 0;
    if (rc < 0) return UT_EXIT_ERROR;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int ut_cli_launch(int nproc, int max_restarts, const char *cmd, int argc, char **argv, const ut_config *cfg) {
    static char np[16], threads[64], tty[32], supervisor[48];
    const char *exe = self_exe;
    ssize_t k = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    if (k <= 0) {
        fprintf(stderr, "utrain: cannot find the utrain program to launch\n");
        return UT_EXIT_ERROR;
    }
    self_exe[k] = 0;
    snprintf(supervisor, sizeof supervisor, "UTRAIN_SUPERVISOR=%ld", (long)getpid());
    snprintf(np, sizeof np, "%d", nproc);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int per_rank = cfg->threads > 0 ? cfg->threads : (int)(cores / nproc > 0 ? cores / nproc : 1);
    snprintf(threads, sizeof threads, "OMP_NUM_THREADS=%d", per_rank);
    if (nproc > cores) /* the seed's gpus: 8 on a laptop: CPU processes, not GPUs */
        fprintf(stderr, "utrain: note: %d processes on %ld cores (--nproc, dist.nproc_per_node and gpus start "
                        "CPU processes); they share the cores: the results are the same, the run is slower "
                        "than with %ld processes\n", nproc, cores, cores);
    /* the ranks' stdout is a pseudo-terminal under mpirun: tell them about ours */
    snprintf(tty, sizeof tty, "UTRAIN_STDOUT_TTY=%d", isatty(STDOUT_FILENO) ? 1 : 0);
    const char *fixed[] = {"mpirun", "-np", np,      "--oversubscribe", "--bind-to", "none", "-x",
                           threads,  "-x", tty, "-x",              supervisor};
    int nfixed = (int)(sizeof fixed / sizeof fixed[0]);
    /* every argument is passed on, however many: fixed part, network, root,
     * the program and command, the arguments, the restart's two, NULL */
    const char **args = ut_calloc_check((size_t)(nfixed + 12 + argc + 3), sizeof *args);
    int n = 0;
    for (int i = 0; i < nfixed; i++) args[n++] = fixed[i];
    /* one node: ranks talk over shared memory, and mpirun's own channel
     * listens on loopback only (no TCP port open to the network); an
     * OMPI_MCA_btl / OMPI_MCA_oob_tcp_if_include set by the user wins */
    if (!getenv("OMPI_MCA_btl")) args[n++] = "--mca", args[n++] = "btl", args[n++] = "self,vader";
    if (!getenv("OMPI_MCA_oob_tcp_if_include"))
        args[n++] = "--mca", args[n++] = "oob_tcp_if_include", args[n++] = "127.0.0.1/8";
    if (geteuid() == 0) args[n++] = "--allow-run-as-root";
    args[n++] = exe;
    if (cmd) args[n++] = cmd; /* train or test: the ranks run the command given here */
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--nproc") || !strcmp(argv[i], "--max-restarts")) {
            i++;
            continue;
        }
        args[n++] = argv[i];
    }
    args[n] = NULL;
    struct sigaction old[3];
    stop_asks = 0;
    catch_stops(old);
    int rc = run_job(args);
    for (int r = 1; r <= max_restarts && !stop_asks && rc != 0 && rc != UT_EXIT_PREEMPTED && rc != UT_EXIT_USAGE;
         r++) {
        fprintf(stderr, "utrain: the job failed (exit %d); restart %d of %d from the newest checkpoint\n",
                rc, r, max_restarts);
        if (r == 1) { /* later attempts resume */
            args[n++] = "--set";
            args[n++] = "continue_training=true";
            args[n] = NULL;
        }
        rc = run_job(args);
    }
    if (stop_asks && rc != UT_EXIT_PREEMPTED && rc != 0)
        fprintf(stderr, "utrain: stopped by signal %d; the ranks ended with exit %d%s\n", (int)stop_signal, rc,
                stop_asks > 1 ? " (a second signal ends them without a checkpoint)" : "");
    restore_stops(old);
    ut_free(args);
    return rc;
}
