/* `--nproc N`: this process starts the N ranks through mpirun and stays as
 * their supervisor. It is the job's main process, the one a scheduler,
 * `timeout` or Ctrl-C signals, so it turns SIGTERM, SIGINT and SIGUSR1 into
 * the ranks' clean stop: mpirun forwards SIGUSR1 to every rank, each stops
 * at the same step, rank 0 writes the checkpoint and every rank exits 75.
 * mpirun runs in its own process group (a Ctrl-C in the terminal reaches
 * only this process, never mpirun, which would kill the ranks at once) and
 * gets SIGUSR1 if this process dies without a word (SIGKILL), so the ranks
 * never outlive their supervisor. A one-node job talks over shared memory
 * and loopback only. */
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
    int st, rc;
    while ((rc = (int)waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
    }
    job_pid = 0;
    if (rc < 0) return UT_EXIT_ERROR;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int ut_cli_launch(int nproc, int max_restarts, const char *cmd, int argc, char **argv, const ut_config *cfg) {
    static char exe[1024], np[16], threads[64], tty[32];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) {
        fprintf(stderr, "utrain: cannot find the utrain program to launch\n");
        return UT_EXIT_ERROR;
    }
    exe[k] = 0;
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
    const char *fixed[] = {"mpirun", "-np", np, "--oversubscribe", "--bind-to", "none", "-x", threads, "-x", tty};
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
