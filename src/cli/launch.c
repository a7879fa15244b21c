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
 * loopback only.
 *
 * With dist.launcher: tcp (or auto where mpirun is not installed, and
 * always for dist.nodes > 1, the seed's one command per node) the job
 * process is a child of this one that starts this node's ranks itself,
 * with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set as
 * torchrun sets them; the ranks meet over TCP (src/dist/comm_tcp.c). The
 * job process passes SIGUSR1 on to its ranks, as mpirun does, and when one
 * rank fails it gives the others 5 seconds to end (they see the failed
 * rank's connections close) before it kills them. Its exit code is the
 * first failed rank's. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
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

/* Whether pid's environment names this process as its supervisor
 * (UTRAIN_SUPERVISOR, which every rank gets): a rank of ours however the
 * MPI below started it. */
static bool supervised_by_us(pid_t pid) {
    char path[64], want[48];
    snprintf(path, sizeof path, "/proc/%ld/environ", (long)pid);
    int n = snprintf(want, sizeof want, "UTRAIN_SUPERVISOR=%ld", (long)getpid()) + 1; /* with its NUL */
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    static char env[(1 << 16) + 1];
    size_t k = fread(env, 1, sizeof env - 1, f);
    fclose(f);
    env[k] = 0; /* a last entry cut short ends here */
    for (size_t i = 0; i + (size_t)n <= k; i += strlen(env + i) + 1)
        if (!memcmp(env + i, want, (size_t)n)) return true;
    return false;
}

/* Whether pid runs this program and is one of the job's ranks: it descends
 * from the job (mpirun), or (an MPI whose daemons start ranks apart from
 * mpirun, as Open MPI 5's may) its environment says we supervise it. */
static bool is_rank_of(pid_t pid, pid_t job) {
    char path[64], exe[sizeof self_exe];
    snprintf(path, sizeof path, "/proc/%ld/exe", (long)pid);
    ssize_t k = readlink(path, exe, sizeof exe - 1);
    if (k <= 0) return false;
    exe[k] = 0;
    if (strcmp(exe, self_exe)) return false;
    for (pid_t p = parent_of(pid), hops = 0; p > 1 && hops < 64; p = parent_of(p), hops++)
        if (p == job) return true;
    return supervised_by_us(pid);
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

/* What a job is: mpirun with its arguments, or this node's ranks started
 * here and joined over TCP. */
typedef struct job_spec {
    const char **args;      /* mpirun's whole command line (mpi) */
    bool tcp;
    const char **rank_args; /* utrain CMD ARGS... (tcp) */
    int nproc, first_rank, world;
    const char *addr;
    int port;               /* 0: a free port of this machine, picked for each attempt */
} job_spec;

// --- the TCP job: this node's ranks as children of the job process ----------------

static pid_t *tcp_ranks; /* the job process's ranks (js->nproc of them), 0 once reaped */
static volatile sig_atomic_t tcp_nranks;

static void tcp_forward(int sig) {
    for (int i = 0; i < tcp_nranks; i++)
        if (tcp_ranks[i] > 0) kill(tcp_ranks[i], sig);
}

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A TCP port nothing listens on now, on the loopback interface. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (!bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Runs in the job process: starts the ranks, waits for them, ends the rest
 * 5 s after the first one fails. The first failure's code, else 0. */
static int tcp_job(const job_spec *js) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tcp_forward;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    char v[64];
    setenv("MASTER_ADDR", js->addr, 1);
    snprintf(v, sizeof v, "%d", js->port);
    setenv("MASTER_PORT", v, 1);
    snprintf(v, sizeof v, "%d", js->world);
    setenv("WORLD_SIZE", v, 1);
    snprintf(v, sizeof v, "%d", js->nproc);
    setenv("LOCAL_WORLD_SIZE", v, 1);
    unsetenv("TORCHELASTIC_USE_AGENT_STORE"); /* rank 0 hosts the rendezvous */
    sigset_t usr1, old;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pid_t job = getpid();
    tcp_ranks = ut_calloc_check((size_t)js->nproc, sizeof *tcp_ranks);
    for (int i = 0; i < js->nproc; i++) {
        sigprocmask(SIG_BLOCK, &usr1, &old);
        pid_t pid = fork();
        if (pid == 0) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            signal(SIGUSR1, SIG_DFL); /* exec keeps a handler's signal caught otherwise */
            prctl(PR_SET_PDEATHSIG, SIGUSR1);
            if (getppid() != job) _exit(UT_EXIT_ERROR);
            snprintf(v, sizeof v, "%d", js->first_rank + i);
            setenv("RANK", v, 1);
            snprintf(v, sizeof v, "%d", i);
            setenv("LOCAL_RANK", v, 1);
            execv(js->rank_args[0], (char **)js->rank_args);
            fprintf(stderr, "utrain: cannot start rank %d: %s\n", js->first_rank + i, strerror(errno));
            _exit(UT_EXIT_ERROR);
        }
        if (pid > 0) tcp_ranks[tcp_nranks++] = pid;
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (pid < 0) {
            fprintf(stderr, "utrain: cannot start rank %d: %s\n", js->first_rank + i, strerror(errno));
            tcp_forward(SIGKILL);
            break;
        }
    }
    int rc = tcp_nranks < js->nproc ? UT_EXIT_ERROR : 0, left = tcp_nranks;
    double kill_at = rc ? mono_s() : 0;
    while (left > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, kill_at ? WNOHANG : 0);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) break;
        if (pid == 0) { /* a rank failed: the others get 5 s */
            if (mono_s() > kill_at) tcp_forward(SIGKILL);
            usleep(50000);
            continue;
        }
        for (int i = 0; i < tcp_nranks; i++)
            if (tcp_ranks[i] == pid) tcp_ranks[i] = 0, left--;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (code && !rc) {
            rc = code;
            kill_at = mono_s() + 5;
        }
    }
    tcp_nranks = 0; /* the handler forwards to nobody from here on */
    ut_free(tcp_ranks);
    tcp_ranks = NULL;
    return rc;
}

/* Runs the job (mpirun, or the TCP job process) and waits for it: its exit
 * code, or 128 + signal. */
static int run_job(const job_spec *js) {
    const char *const *args = (const char *const *)js->args;
    int port = js->port;
    if (js->tcp && !port && (port = free_port()) < 0) {
        fprintf(stderr, "utrain: cannot find a free TCP port for the ranks to meet at: %s\n", strerror(errno));
        return UT_EXIT_ERROR;
    }
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
        fprintf(stderr, "utrain: cannot start the job: %s\n", strerror(errno));
        return UT_EXIT_ERROR;
    }
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGUSR1);
        if (getppid() != parent) _exit(UT_EXIT_ERROR); /* the supervisor is already gone */
        int null = open("/dev/null", O_RDONLY);        /* the ranks never read our terminal */
        if (null >= 0) dup2(null, STDIN_FILENO);
        if (js->tcp) {
            job_spec mine = *js;
            mine.port = port;
            for (int i = 0; i < 3; i++) signal(stop_sigs[i], SIG_DFL);
            sigprocmask(SIG_SETMASK, &old_mask, NULL);
            _exit(tcp_job(&mine));
        }
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

/* train.auto_find_batch_size: whether the job that just failed ran out of
 * memory (a rank wrote the mark, ut_fail_oom) before the run had a
 * checkpoint, and so starts again with half the batch: the new batch in
 * *batch, and what happens said on stderr. A run with checkpoints cannot
 * start again at another batch (its checkpoints hold the global batch, and
 * a new start refuses a directory that has them); nor can a batch of 1,
 * nor an evaluation at its own train.eval_batch_size (the mark says "in
 * eval"), which a smaller training batch does not shrink. */
static bool oom_retry(const char *mark, const ut_config *cfg, int64_t *batch) {
    FILE *f = fopen(mark, "r");
    if (!f) return false;
    char what[64] = "";
    if (!fgets(what, sizeof what, f)) what[0] = 0;
    fclose(f);
    unlink(mark);
    if (strstr(what, "in eval") && cfg->eval_batch_size > 0) { /* the evaluation's batch is its own */
        fprintf(stderr, "utrain: auto_find_batch_size: out of memory in an evaluation at train.eval_batch_size %lld: "
                        "not started again, since auto_find_batch_size halves train.batch_size only; lower "
                        "train.eval_batch_size (per_device_eval_batch_size)\n", (long long)cfg->eval_batch_size);
        return false;
    }
    char dir[1200];
    int64_t step;
    snprintf(dir, sizeof dir, "%s/%s/checkpoints", cfg->output_dir, cfg->experiment_name);
    if (ut_ckpt_list(dir, &step, 1) > 0) {
        fprintf(stderr, "utrain: auto_find_batch_size: out of memory at train.batch_size %lld after the run wrote "
                        "checkpoints (%s): not started again, since they hold its batch; start a new run (another "
                        "experiment_name) at a smaller train.batch_size, with more "
                        "train.gradient_accumulation_steps to keep the optimizer's batch\n", (long long)*batch, dir);
        return false;
    }
    if (*batch <= 1) {
        fprintf(stderr, "utrain: auto_find_batch_size: out of memory at train.batch_size 1: no batch fits; set "
                        "train.checkpoint_activations: true, a 16-bit train.precision or a sharded "
                        "dist.strategy\n");
        return false;
    }
    *batch /= 2;
    fprintf(stderr, "utrain: auto_find_batch_size: out of memory at train.batch_size %lld; starting again at %lld\n",
            (long long)(*batch * 2), (long long)*batch);
    return true;
}

/* Whether name is an executable file in a directory of PATH. */
static bool on_path(const char *name) {
    const char *path = getenv("PATH");
    if (!path) return false;
    char dir[1024], file[1200];
    for (const char *p = path; *p;) {
        size_t k = strcspn(p, ":");
        snprintf(dir, sizeof dir, "%.*s", (int)(k < sizeof dir ? k : sizeof dir - 1), p);
        snprintf(file, sizeof file, "%s/%s", *dir ? dir : ".", name);
        if (!access(file, X_OK)) return true;
        p += k + (p[k] == ':');
    }
    return false;
}

int ut_cli_launch(int nproc, int max_restarts, const char *cmd, int argc, char **argv, const ut_config *cfg) {
    static char np[16], threads[64], tty[32], supervisor[48], mark[1100], batch_set[48];
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
    job_spec js = {.nproc = nproc, .world = nproc, .addr = "127.0.0.1"};
    /* one rank started again by auto_find_batch_size needs no mpirun (whose abort banner it would print) */
    bool alone = nproc == 1 && max_restarts == 0 && cfg->nodes <= 1 && strcmp(cfg->launcher, "mpi");
    js.tcp = cfg->nodes > 1 || !strcmp(cfg->launcher, "tcp") || (!strcmp(cfg->launcher, "auto") && !on_path("mpirun")) ||
             alone;
    if (cfg->nodes > 1) {
        js.first_rank = (int)cfg->current_node * nproc;
        js.world = (int)cfg->nodes * nproc;
        js.addr = cfg->master_addr;
        js.port = (int)cfg->master_port;
        fprintf(stderr, "utrain: node %lld of %lld: starting ranks %d to %d of %d; they meet the other nodes' at "
                        "%s:%d\n", (long long)cfg->current_node, (long long)cfg->nodes, js.first_rank,
                js.first_rank + nproc - 1, js.world, js.addr, js.port);
    } else if (js.tcp && !alone && !strcmp(cfg->launcher, "auto")) {
        fprintf(stderr, "utrain: mpirun is not installed: the %d ranks talk over TCP (dist.launcher: tcp)\n", nproc);
    }
    /* auto_find_batch_size: the file a rank out of memory writes (ut_fail_oom) */
    bool auto_find = cfg->auto_find_batch_size && !strcmp(cmd ? cmd : cfg->mode, "train");
    if (auto_find) {
        const char *tmpdir = getenv("TMPDIR");
        snprintf(mark, sizeof mark, "%s/utrain-oom-%ld", tmpdir && *tmpdir ? tmpdir : "/tmp", (long)getpid());
        unlink(mark);
        setenv("UTRAIN_OOM_MARK", mark, 1);
    }
    if (js.tcp) { /* the environment the ranks inherit from the job process */
        setenv("OMP_NUM_THREADS", threads + strlen("OMP_NUM_THREADS="), 1);
        setenv("UTRAIN_STDOUT_TTY", tty + strlen("UTRAIN_STDOUT_TTY="), 1);
        setenv("UTRAIN_SUPERVISOR", supervisor + strlen("UTRAIN_SUPERVISOR="), 1);
    }
    const char *fixed[] = {"mpirun", "-np", np,      "--oversubscribe", "--bind-to", "none", "-x",
                           threads,  "-x", tty, "-x",              supervisor};
    int nfixed = (int)(sizeof fixed / sizeof fixed[0]);
    /* every argument is passed on, however many: fixed part, the mark,
     * network, root, the program and command, the arguments, the restart's
     * two and the batch's, NULL */
    const char **args = ut_calloc_check((size_t)(nfixed + 14 + argc + 5), sizeof *args);
    int n = 0;
    for (int i = 0; i < nfixed; i++) args[n++] = fixed[i];
    if (auto_find) args[n++] = "-x", args[n++] = "UTRAIN_OOM_MARK";
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
    int first_rank_arg = 0; /* args[first_rank_arg..] is the ranks' own command line */
    while (args[first_rank_arg] != exe) first_rank_arg++;
    js.args = args;
    js.rank_args = args + first_rank_arg;
    struct sigaction old[3];
    stop_asks = 0;
    catch_stops(old);
    int rc = run_job(&js), r = 0;
    int64_t batch = cfg->batch_size;
    bool batch_arg = false;
    while (!stop_asks && rc != 0 && rc != UT_EXIT_PREEMPTED && rc != UT_EXIT_USAGE) {
        if (auto_find && !access(mark, F_OK)) { /* out of memory: half the batch, or the end */
            if (!oom_retry(mark, cfg, &batch)) break;
            snprintf(batch_set, sizeof batch_set, "train.batch_size=%lld", (long long)batch);
            if (!batch_arg) { /* the last --set wins */
                args[n++] = "--set";
                args[n++] = batch_set;
                args[n] = NULL;
                batch_arg = true;
            }
            rc = run_job(&js);
            continue;
        }
        if (++r > max_restarts) break;
        fprintf(stderr, "utrain: the job failed (exit %d); restart %d of %d from the newest checkpoint\n",
                rc, r, max_restarts);
        if (r == 1) { /* later attempts resume */
            args[n++] = "--set";
            args[n++] = "continue_training=true";
            args[n] = NULL;
        }
        rc = run_job(&js);
    }
    if (auto_find) {
        unlink(mark);
        unsetenv("UTRAIN_OOM_MARK");
        if (batch != cfg->batch_size && rc == 0)
            fprintf(stderr, "utrain: auto_find_batch_size: the run trained at train.batch_size %lld\n",
                    (long long)batch);
    }
    if (stop_asks && rc != UT_EXIT_PREEMPTED && rc != 0)
        fprintf(stderr, "utrain: stopped by signal %d; the ranks ended with exit %d%s\n", (int)stop_signal, rc,
                stop_asks > 1 ? " (a second signal ends them without a checkpoint)" : "");
    restore_stops(old);
    ut_free(args);
    return rc;
}
