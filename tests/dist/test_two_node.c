/* Two nodes on one machine: two network namespaces joined by a veth pair
 * (10.77.0.1/24 and 10.77.0.2/24), OpenMPI over TCP between them, and
 * scripts/netns-agent.sh as OpenMPI's ssh, which runs the remote daemon in
 * the other namespace with `ip netns exec`. A tiny training (MLP on 1,000
 * Fashion-MNIST images, 10 SGD steps) runs as one rank per "node" and must
 * exit 0, have both ranks log 2 processes, send its gradients over the veth,
 * and end with the weights of the same config run as 2 ranks on one node
 * (plain mpirun) within 1e-5 relative L2. Then the same over TCP, started
 * as the seed starts a job: `utrain train` in each namespace with its
 * dist.current_node, the ranks meeting at node 0's address.
 *
 * Needs root and iproute2; without them, or where namespaces or veth pairs
 * cannot be made (an unprivileged container), it says why and reports
 * "0 passed, 0 failed". The namespaces are named ut2n-<pid>-0/1 and are
 * removed at the end, on failure and on SIGINT/SIGTERM/SIGHUP; ones left by a
 * killed run (their pid gone) are removed at the next start. Every command is
 * killed after JOB_LIMIT_S, and dist.timeout_s is 5, so nothing can hang.
 * docs/multinode.md has the same steps as shell commands. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
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
#define NET "10.77.0"   /* the private /24 inside the namespaces */
#define STEPS 10
#define NPARAMS 25450   /* mlp [784, 32, 10] */

static char tmp[256], agent[PATH_MAX], cfg[512];
static char ns[2][32];
static bool ns_made[2];
static const char *const veth[2] = {"utveth0", "utveth1"};
static const char *const addr[2] = {NET ".1", NET ".2"};

/* "tmp/leaf" (a rotating buffer of tp_path) */
static const char *in_tmp(const char *leaf) { return tp_path(tmp, leaf); }

/* Kills (SIGKILL, by pid) every process whose command line mentions our
 * temp dir: the ranks of a job that was killed, in any namespace. */
static int kill_ours(pid_t pid, const char *cmdline, size_t len, void *count) {
    if (tp_cmdline_has(cmdline, len, tmp)) {
        kill(pid, SIGKILL);
        ++*(int *)count;
    }
    return 0;
}

static int reap_ours(void) {
    int n = 0;
    if (*tmp) tp_each_proc(kill_ours, &n);
    return n;
}

static volatile pid_t running;   /* the process group run() waits for, 0 if none */

/* Runs argv (PATH searched) with stdout and stderr into out (or /dev/null),
 * stdin from /dev/null, in its own process group, killed whole after limit_s.
 * Returns the exit code, 128 + signal, or 124 when it ran out of time. */
static int run(const char *const *argv, const char *out, double limit_s) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (fd < 0 || in < 0) _exit(126);
        dup2(in, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        execvp(argv[0], (char **)argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    running = pid;
    double t0 = tp_now_s();
    for (;;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            running = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (tp_now_s() - t0 > limit_s) {
            kill(-pid, SIGKILL);
            waitpid(pid, NULL, 0);
            running = 0;
            int n = reap_ours();
            fprintf(stderr, "  %s ... killed after %.0f s (and %d processes of it)\n", argv[0], limit_s, n);
            return 124;
        }
        usleep(20000);
    }
}

/* A command for setting up: 0 if it worked, else its output on stderr. */
static int setup(const char *const *argv) {
    const char *out = in_tmp("setup.out");
    int rc = run(argv, out, 20);
    if (rc) {
        char *s = tp_slurp(out);
        fprintf(stderr, "  `");
        for (int i = 0; argv[i]; i++) fprintf(stderr, "%s%s", i ? " " : "", argv[i]);
        fprintf(stderr, "` exited %d: %s", rc, s ? s : "\n");
        free(s);
    }
    return rc;
}

/* Shows a job's output after a failure. */
static void show(const char *out) {
    char *s = tp_slurp(out);
    fprintf(stderr, "  --- %s ---\n%s  ---\n", out, s ? s : "(none)\n");
    free(s);
}

// --- the namespaces --------------------------------------------------------------

/* Ends what still runs in namespace name (pids by `ip netns pids`), then
 * deletes it; the veth pair goes with it. */
static void remove_ns(const char *name) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ip netns pids %s 2>/dev/null", name);
    FILE *p = popen(cmd, "r");
    long pid;
    while (p && fscanf(p, "%ld", &pid) == 1)
        if (pid > 0 && pid != getpid()) kill((pid_t)pid, SIGKILL);
    if (p) pclose(p);
    run((const char *[]){"ip", "netns", "del", name, NULL}, NULL, 20);
}

static void teardown(void) {
    for (int i = 0; i < 2; i++)
        if (ns_made[i]) {
            ns_made[i] = false;
            remove_ns(ns[i]);
        }
}

/* SIGINT/SIGTERM/SIGHUP: kill the running job, tear down, then die. (Not async-signal-safe in the
 * strict sense; good enough to not leave namespaces behind.) */
static void on_signal(int sig) {
    if (running > 0) kill(-running, SIGKILL);
    reap_ours();
    teardown();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Namespaces ut2n-<pid>-N left by a run that was killed (pid gone). */
static void remove_stale(void) {
    DIR *d = opendir("/run/netns");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid, k;
        if (sscanf(e->d_name, "ut2n-%d-%d", &pid, &k) != 2 || pid == getpid()) continue;
        if (kill(pid, 0) == 0 || errno != ESRCH) continue;
        printf("     removing namespace %s left by a run that was killed\n", e->d_name);
        remove_ns(e->d_name);
    }
    closedir(d);
}

/* ns0 [utveth0 10.77.0.1/24] <-> [utveth1 10.77.0.2/24] ns1, lo up in both.
 * The veth pair is made inside the namespaces, never in the host's. */
static bool make_namespaces(void) {
    remove_stale();
    for (int i = 0; i < 2; i++) {
        snprintf(ns[i], sizeof ns[i], "ut2n-%d-%d", (int)getpid(), i);
        if (setup((const char *[]){"ip", "netns", "add", ns[i], NULL})) return false;
        ns_made[i] = true;
    }
    if (setup((const char *[]){"ip", "link", "add", "name", veth[0], "netns", ns[0], "type", "veth", "peer",
                               "name", veth[1], "netns", ns[1], NULL}))
        return false;
    for (int i = 0; i < 2; i++) {
        char cidr[32];
        snprintf(cidr, sizeof cidr, "%s/24", addr[i]);
        if (setup((const char *[]){"ip", "-n", ns[i], "addr", "add", cidr, "dev", veth[i], NULL}) ||
            setup((const char *[]){"ip", "-n", ns[i], "link", "set", "lo", "up", NULL}) ||
            setup((const char *[]){"ip", "-n", ns[i], "link", "set", veth[i], "up", NULL}))
            return false;
    }
    return true;
}

/* Bytes received on ns1's end of the veth pair; -1 if unreadable. */
static long rx_bytes(void) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "ip netns exec %s cat /sys/class/net/%s/statistics/rx_bytes", ns[1], veth[1]);
    FILE *p = popen(cmd, "r");
    long n = -1;
    if (p) {
        if (fscanf(p, "%ld", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

// --- the tests -------------------------------------------------------------------

/* The agent by itself: ssh options skipped, an address mapped through
 * UT_NETNS_MAP, a namespace's own name, quotes stripped by the shell as ssh's
 * remote shell would, and an unknown host refused with ssh's 255. */
static void test_agent(void) {
    const char *out = in_tmp("agent.out");
    char mac[96];
    snprintf(mac, sizeof mac, "/sys/class/net/%s/address", veth[1]);   /* only in ns1's /sys */
    int rc = run((const char *[]){agent, "-x", "-o", "BatchMode=yes", "-p22", "-qT", addr[1], "cat", mac, "&&",
                                  "ip", "-o", "-4", "addr", NULL},
                 out, 20);
    char *s = tp_slurp(out);
    CHECK(rc == 0 && s && strstr(s, NET ".2/24") && !strstr(s, NET ".1/24"),
          "agent %s did not run the command in %s: exit %d, output: %s", addr[1], ns[1], rc, s ? s : "");
    free(s);
    rc = run((const char *[]){agent, ns[0], "echo", "\"in  quotes\"", "$((1+1))", NULL}, out, 20);
    s = tp_slurp(out);
    CHECK(rc == 0 && s && !strcmp(s, "in  quotes 2\n"), "agent %s: exit %d, output: %s", ns[0], rc, s ? s : "");
    free(s);
    rc = run((const char *[]){agent, "10.77.9.9", "true", NULL}, out, 20);
    s = tp_slurp(out);
    CHECK(rc == 255 && s && strstr(s, "no network namespace for host '10.77.9.9'"),
          "unknown host: exit %d, output: %s", rc, s ? s : "");
    free(s);
}

static char ref_ckpt[600], two_ckpt[600];

/* The reference: the same config as 2 ranks on one node. */
static void test_one_node(void) {
    const char *out = in_tmp("one_node.out");
    int before = t_checks_failed;
    int rc = run((const char *[]){"mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", tp_program(),
                                  "train", cfg, "--set", "experiment_name=one_node", NULL},
                 out, JOB_LIMIT_S);
    snprintf(ref_ckpt, sizeof ref_ckpt, "%s/runs/one_node/checkpoints/step_%08d.safetensors", tmp, STEPS);
    CHECK(rc == 0, "2 ranks on one node exited %d", rc);
    CHECK(access(ref_ckpt, R_OK) == 0, "no checkpoint %s", ref_ckpt);
    if (t_checks_failed != before) show(out);
}

/* One rank in each namespace, mpirun in ns0, the daemon in ns1 started by
 * the agent, every byte between the ranks over TCP on the veth pair. */
static void test_two_nodes(void) {
    const char *out = in_tmp("two_node.out");
    char hosts[64];
    snprintf(hosts, sizeof hosts, "%s:1,%s:1", addr[0], addr[1]);
    long rx0 = rx_bytes();
    double t0 = tp_now_s();
    int rc = run((const char *[]){"ip", "netns", "exec", ns[0], "mpirun", "-np", "2", "-H", hosts, "--bind-to",
                                  "none", "--mca", "plm_rsh_agent", agent, "--mca", "btl", "tcp,self", "--mca",
                                  "btl_tcp_if_include", NET ".0/24", "--mca", "oob_tcp_if_include", NET ".0/24",
                                  tp_program(), "train", cfg, "--set", "experiment_name=two_node", NULL},
                 out, JOB_LIMIT_S);
    double secs = tp_now_s() - t0;
    long rx = rx_bytes() - rx0;
    int before = t_checks_failed;
    CHECK(rc == 0, "two nodes: mpirun exited %d", rc);
    if (rc) {
        show(out);
        return;
    }
    char last[32];
    snprintf(last, sizeof last, "step %d/%d", STEPS, STEPS);
    for (int r = 0; r < 2; r++) {
        char leaf[64];
        snprintf(leaf, sizeof leaf, "runs/two_node/logger_logs/training_%d.log", r);
        char *log = tp_slurp(in_tmp(leaf));
        CHECK(log && strstr(log, "Processes = 2 (ddp, mpi backend"), "rank %d's log does not say 2 processes", r);
        CHECK(log && strstr(log, last), "rank %d's log does not reach %s", r, last);
        free(log);
    }
    /* DDP all-reduces the 25,450 gradients (4 bytes each) at every step:
     * at least half of that must have come in over the veth */
    CHECK(rx >= (long)STEPS * NPARAMS * 4 / 2, "only %ld bytes came in over %s", rx, veth[1]);
    snprintf(two_ckpt, sizeof two_ckpt, "%s/runs/two_node/checkpoints/step_%08d.safetensors", tmp, STEPS);
    CHECK(access(two_ckpt, R_OK) == 0, "no checkpoint %s", two_ckpt);
    if (t_checks_failed == before && *ref_ckpt && access(ref_ckpt, R_OK) == 0) {
        double w = tp_weights_rel_diff(ref_ckpt, two_ckpt);
        CHECK(w >= 0 && w <= 1e-5, "two nodes vs one node: final weights differ by %.3g relative", w);
        printf("     two nodes: %.1f s, %ld bytes over the veth, weights within %.2g of one node\n", secs, rx, w);
    } else {
        CHECK(0, "no comparison with one node (a run failed)");
    }
    if (t_checks_failed != before) show(out);
}

/* The seed's node-by-node launch over TCP: the same command in each
 * namespace, dist.current_node 0 and 1, meeting at node 0's address; the
 * ranks find each other's addresses (node 1's as node 0 sees it connect)
 * and every byte between them goes over the veth. */
static void test_two_nodes_tcp(void) {
    char master[64];
    snprintf(master, sizeof master, "dist.master_addr=%s", addr[0]);
    const char *out[2] = {in_tmp("tcp_node0.out"), in_tmp("tcp_node1.out")};
    long rx0 = rx_bytes();
    double t0 = tp_now_s();
    fflush(NULL);
    pid_t node1 = fork();
    if (node1 == 0) {
        const char *a[] = {"ip", "netns", "exec", ns[1], tp_program(), "train", cfg, "--set",
                           "experiment_name=two_node_tcp_1", "--set", "dist.nodes=2", "--set", "dist.current_node=1",
                           "--set", master, "--set", "dist.master_port=29615", NULL};
        _exit(run(a, out[1], JOB_LIMIT_S));
    }
    const char *a[] = {"ip", "netns", "exec", ns[0], tp_program(), "train", cfg, "--set",
                       "experiment_name=two_node_tcp", "--set", "dist.nodes=2", "--set", "dist.current_node=0", "--set",
                       master, "--set", "dist.master_port=29615", NULL};
    int rc0 = run(a, out[0], JOB_LIMIT_S), st = 0, rc1 = -1;
    if (node1 > 0 && waitpid(node1, &st, 0) == node1) rc1 = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    double secs = tp_now_s() - t0;
    long rx = rx_bytes() - rx0;
    int before = t_checks_failed;
    CHECK(rc0 == 0 && rc1 == 0, "node 0 exited %d, node 1 %d", rc0, rc1);
    char *log = tp_slurp(in_tmp("runs/two_node_tcp/logger_logs/training_0.log"));
    CHECK(log && strstr(log, "Processes = 2 (ddp, tcp backend"), "rank 0's log does not say 2 processes over tcp");
    free(log);
    CHECK(rx >= (long)STEPS * NPARAMS * 4 / 2, "only %ld bytes came in over %s", rx, veth[1]);
    char ckpt[700];
    snprintf(ckpt, sizeof ckpt, "%s/runs/two_node_tcp/checkpoints/step_%08d.safetensors", tmp, STEPS);
    if (!rc0 && !rc1 && *ref_ckpt && access(ref_ckpt, R_OK) == 0) {
        double w = tp_weights_rel_diff(ref_ckpt, ckpt);
        CHECK(w >= 0 && w <= 1e-5, "two nodes over TCP vs one node: final weights differ by %.3g relative", w);
        printf("     two nodes over TCP: %.1f s, %ld bytes over the veth, weights within %.2g of one node\n", secs, rx,
               w);
    }
    if (t_checks_failed != before) {
        show(out[0]);
        show(out[1]);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    /* BUILD/utrain by an absolute path: the ranks may start in another directory */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) self[n] = 0;
    tp_set_program(n > 0 ? self : argv[0]);
    const char *why = NULL;
    if (geteuid() != 0) why = "needs root (network namespaces, ip netns exec)";
    else if (run((const char *[]){"ip", "-V", NULL}, NULL, 10) != 0) why = "needs iproute2 (`ip`)";
    if (why) {
        printf("skipped: two-node test %s\n0 passed, 0 failed\n", why);
        return 0;
    }
    /* the agent: $UT_NETNS_AGENT, else scripts/ from the working directory
     * (tests/run.sh runs in the repository root), else beside BUILD */
    const char *a = getenv("UT_NETNS_AGENT");
    char guess[PATH_MAX];
    snprintf(guess, sizeof guess, "%s", tp_program());
    char *slash = strrchr(guess, '/');
    if (slash) *slash = 0;
    strncat(guess, "/../scripts/netns-agent.sh", sizeof guess - strlen(guess) - 1);
    if (!(a && realpath(a, agent)) && !realpath("scripts/netns-agent.sh", agent) && !realpath(guess, agent)) {
        fprintf(stderr, "no scripts/netns-agent.sh (run from the repository root or set UT_NETNS_AGENT)\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-2node")) return 1;

    atexit(teardown);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    if (!make_namespaces()) {
        teardown();
        printf("skipped: cannot make network namespaces and a veth pair here (see above)\n0 passed, 0 failed\n");
        return tp_finish(0, tmp);
    }

    /* OpenMPI as root, yielding idle ranks on a small machine, without CMA
     * (containers), without LeakSanitizer (OpenMPI's allocations outlive
     * MPI_Finalize); the agent's host -> namespace map */
    tp_mpi_env(false); /* the jobs name their transports (tcp between the namespaces) */
    char map[128];
    snprintf(map, sizeof map, "%s=%s,%s=%s", addr[0], ns[0], addr[1], ns[1]);
    setenv("UT_NETNS_MAP", map, 1);

    snprintf(cfg, sizeof cfg, "%s/tiny.yml", tmp);
    FILE *f = fopen(cfg, "w");
    if (!f) return 1;
    fprintf(f,
            "output_dir: %s/runs\nseed: 5\nthreads: 1\n"
            "model: {name: mlp, sizes: [784, 32, 10], dropout: 0}\n"
            "data: {name: idx_images, dev_size: 59000}\n"
            "train: {batch_size: 8, max_steps: %d, log_interval: 1, eval_strategy: \"no\",\n"
            "        save_strategy: steps, save_interval: %d, save_total_limit: 0, progress: lines}\n"
            "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
            "dist: {timeout_s: 5}\n",
            tmp, STEPS, STEPS);
    fclose(f);
    printf("     namespaces %s (%s) and %s (%s), agent %s\n", ns[0], addr[0], ns[1], addr[1], agent);

    RUN(test_agent);
    RUN(test_one_node);
    RUN(test_two_nodes);
    RUN(test_two_nodes_tcp);
    teardown();
    return tp_finish(TEST_SUMMARY(), tmp);
}
