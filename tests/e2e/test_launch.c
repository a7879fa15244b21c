/* How jobs are started, through the `utrain` program: processes started as
 * torchrun starts them (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT), `--nproc`
 * with either launcher, and the seed's one-command-per-node launch (nodes,
 * current_node, master_addr, master_port) all train the same weights as
 * mpirun, to the bit; bad launcher variables are refused naming the
 * variable; srun without MPI support (SLURM_* only) and node-by-node with
 * dist.launcher: mpi are refused with the command that runs the job. A stop
 * signal to a TCP job ends it with a checkpoint. Under torchrun the ranks
 * meet through its store (a stand-in speaking its protocol here), and ranks
 * that never come are named. And the run directory's
 * lock: a second training job in a directory in use is refused with the
 * holder's pid; test mode and a resumed job after the holder ends are not. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "test.h"
#include "utrain/utrain.h"

static char tmp[256];

/* The seed-style config on the SST-2 sample, run directory tmp/runs/NAME. */
static const char *write_config(const char *name, int epochs, const char *extra) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s.yml", tmp, name);
    FILE *f = fopen(path, "w");
    fprintf(f,
            "transformers-params:\n    model_dir: '%s/runs/%s'\n    is_distributed: True\n"
            "    batch_size: 8\n    max_length: 16\n    num_epochs: %d\n    learning_rate: 5.0e-3\n"
            "data-params:\n    data_dir: data/sst2_sample\n"
            "model: {name: bow, n_embd: 8, hidden: 8}\nthreads: 1\n"
            "train: {progress: \"off\", log_interval: 5}\n%s",
            tmp, name, epochs, extra ? extra : "");
    fclose(f);
    return path;
}

static const char *out_path(const char *name) {
    static char p[600];
    snprintf(p, sizeof p, "%s/%s.out", tmp, name);
    return p;
}

/* Runs `utrain train cfg` with the NULL-terminated NAME=VALUE pairs set;
 * returns the exit code; the output is in out_path(name). */
static int run_with_env(const char *name, const char *cfg, const char *const *env) {
    char buf[16][128];
    int k = 0;
    for (const char *const *e = env; *e && k < 16; e++, k++) {
        snprintf(buf[k], sizeof buf[k], "%s", *e);
        char *eq = strchr(buf[k], '=');
        *eq = 0;
        setenv(buf[k], eq + 1, 1);
    }
    int rc = tp_run((const char *[]){"train", cfg, NULL}, out_path(name));
    for (int i = 0; i < k; i++) unsetenv(buf[i]);
    return rc;
}

static bool output_has(const char *name, const char *text) {
    char *out = tp_slurp(out_path(name));
    bool ok = out && strstr(out, text);
    if (!ok) fprintf(stderr, "  output of %s:\n%s\n  (wanted: %s)\n", name, out ? out : "(none)", text);
    free(out);
    return ok;
}

static bool exists(const char *dir, const char *name) {
    char p[800];
    snprintf(p, sizeof p, "%s/runs/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* Runs a command (PATH lookup) with its output in out_path(name). */
static int run_cmd(const char *name, const char *const *args) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out_path(name), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execvp(args[0], (char **)args);
        _exit(127);
    }
    return tp_wait(pid);
}

// --- the seed's parameters.yml as shipped

static void test_seed_parameters_trains(void) {
    char runs[400];
    snprintf(runs, sizeof runs, "output_dir=%s/runs", tmp);
    int rc = tp_run((const char *[]){"train", "configs/seed_parameters.yml", "--set", runs, "--set", "threads=1",
                                     "--set", "train.progress=off", NULL},
                    out_path("seed"));
    CHECK(rc == 0 && output_has("seed", "Training done: 45 steps"), "exit %d", rc);
    char res[600];
    snprintf(res, sizeof res, "%s/runs/seed_sst2/checkpoints", tmp);
    int64_t steps[4];
    CHECK(ut_ckpt_list(res, steps, 4) >= 1 && steps[0] == 45, "a checkpoint at step 45");
    /* log_steps_ratio 5 with 15 steps per epoch: a train line every 15 / 5 = 3 steps;
     * warmup_proportion 0.1 of 45 steps: 4 warmup steps */
    snprintf(res, sizeof res, "%s/runs/seed_sst2/metrics.jsonl", tmp);
    char loss[64];
    CHECK(tp_loss_at(res, "train", 3, loss, sizeof loss) && tp_loss_at(res, "train", 45, loss, sizeof loss) &&
              !tp_loss_at(res, "train", 4, loss, sizeof loss),
          "train lines at steps 3 and 45, none at 4");
    char *m = tp_slurp(res), *l3 = m ? strstr(m, "{\"step\": 3, ") : NULL;
    CHECK(l3 && strstr(l3, "\"lr\": 0.00374999") && strchr(l3, '\n') > strstr(l3, "\"lr\": 0.00374999"),
          "step 3's learning rate is 3/4 of 5e-3 (4 warmup steps)");
    free(m);
    /* the seed's own command line: python main.py --params=parameters.yml */
    snprintf(runs, sizeof runs, "output_dir=%s/runs_params", tmp);
    rc = tp_run((const char *[]){"--params=configs/seed_parameters.yml", "--set", runs, "--set", "threads=1",
                                 "--set", "train.progress=off", "--set", "train.max_steps=2", NULL},
                out_path("params"));
    CHECK(rc == 0 && output_has("params", "Training done: 2 steps"), "--params=FILE trains (exit %d)", rc);
}

// --- other launchers


static const char *ckpt(const char *run, int step) {
    static char p[2][700];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/runs/%s/checkpoints/step_%08d.safetensors", tmp, run, step);
    return p[k];
}

/* The reference: 2 ranks under mpirun (--nproc 2, dist.launcher: mpi), 15 steps. */
static const char *reference(void) {
    static bool done;
    const char *cfg = write_config("ref", 1, NULL);
    if (!done) {
        const char *a = getenv("ASAN_OPTIONS");
        char *asan = a ? strdup(a) : NULL;
        tp_mpi_env(true); /* OpenMPI's own leaks are not ours: off for this job only */
        int rc = tp_run((const char *[]){"train", cfg, "--nproc", "2", "--set", "dist.launcher=mpi", NULL},
                        out_path("ref"));
        if (asan) setenv("ASAN_OPTIONS", asan, 1);
        else unsetenv("ASAN_OPTIONS");
        free(asan);
        CHECK(rc == 0, "the mpirun reference: exit %d", rc);
        done = true;
    }
    return ckpt("ref", 15);
}

/* torchrun's processes: each rank is started alone with the variables set;
 * they meet at MASTER_ADDR:MASTER_PORT and train as mpirun's ranks do. */
static void test_torchrun_one_node(void) {
    const char *ref = reference();
    const char *cfg = write_config("tr1", 1, NULL);
    char port[16];
    snprintf(port, sizeof port, "%d", tp_free_port());
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    pid_t pid[2];
    for (int r = 1; r >= 0; r--) { /* rank 1 first: it waits for rank 0 to listen */
        char v[8];
        snprintf(v, sizeof v, "%d", r);
        setenv("RANK", v, 1);
        setenv("LOCAL_RANK", v, 1);
        pid[r] = tp_spawn((const char *[]){"train", cfg, NULL}, out_path(r ? "tr1_rank1" : "tr1"));
    }
    int rc0 = tp_wait(pid[0]), rc1 = tp_wait(pid[1]);
    for (const char *const *v = (const char *const[]){"WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                                       "RANK", "LOCAL_RANK", NULL};
         *v; v++)
        unsetenv(*v);
    CHECK(rc0 == 0 && rc1 == 0, "exit %d and %d", rc0, rc1);
    CHECK(output_has("tr1", "Processes = 2 (ddp, tcp backend"), "the log names the backend");
    CHECK(tp_same_file(ckpt("tr1", 15), ref), "torchrun-style ranks trained other weights than mpirun's");
    /* utrain's own launcher over TCP */
    cfg = write_config("tcp", 1, NULL);
    int rc = tp_run((const char *[]){"train", cfg, "--nproc", "2", "--set", "dist.launcher=tcp", NULL}, out_path("tcp"));
    CHECK(rc == 0 && tp_same_file(ckpt("tcp", 15), ref), "--nproc 2 with dist.launcher tcp: exit %d", rc);
    /* a world of one is an ordinary run */
    rc = run_with_env("tr1c", write_config("tr1c", 1, NULL),
                      (const char *[]){"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", NULL});
    CHECK(rc == 0 && exists(tmp, "tr1c"), "world of 1: exit %d", rc);
}

/* A stranger at MASTER_PORT (junk bytes, then gone) does not stop the
 * ranks from meeting there. */
static void test_rendezvous_ignores_strangers(void) {
    const char *cfg = write_config("stranger", 1, NULL);
    int port = tp_free_port();
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", ports, 1);
    setenv("RANK", "0", 1);
    pid_t r0 = tp_spawn((const char *[]){"train", cfg, NULL}, out_path("stranger"));
    bool sent = false;
    for (int i = 0; i < 200 && !sent; i++) { /* until rank 0 listens */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof a))
            sent = write(fd, "GET / HTTP/1.0\r\n\r\n", 18) == 18;
        if (fd >= 0) close(fd);
        if (!sent) nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    setenv("RANK", "1", 1);
    pid_t r1 = tp_spawn((const char *[]){"train", cfg, NULL}, out_path("stranger_1"));
    int rc0 = tp_wait(r0), rc1 = tp_wait(r1);
    for (const char *const *v = (const char *const[]){"WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK", NULL}; *v; v++)
        unsetenv(*v);
    CHECK(sent, "could not reach rank 0 at its MASTER_PORT");
    CHECK(rc0 == 0 && rc1 == 0 && output_has("stranger", "Processes = 2 (ddp, tcp backend"), "exit %d and %d", rc0, rc1);
}

/* ---- a stand-in for torchrun's store: the c10d TCPStore protocol as utrain
 * speaks it (VALIDATE, SET, GET, CHECK, and WAIT, answered once the key is
 * set), one process serving every connection ---- */

static bool rd(int fd, void *p, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, (char *)p + got, n - got);
        if (k <= 0) return false;
        got += (size_t)k;
    }
    return true;
}
static bool rd_str(int fd, char *s, size_t cap) {
    uint64_t len;
    if (!rd(fd, &len, sizeof len) || len >= cap || !rd(fd, s, (size_t)len)) return false;
    s[len] = 0;
    return true;
}
static bool wr(int fd, const void *p, size_t n) { return write(fd, p, n) == (ssize_t)n; }

enum { KV = 32, CONNS = 32 };
static struct { char key[96], value[160]; } kv[KV];
static int nkv;
static const char *kv_get(const char *key) {
    for (int i = 0; i < nkv; i++)
        if (!strcmp(kv[i].key, key)) return kv[i].value;
    return NULL;
}

/* One query from fd; false: close it. waiting[i]: the key connection i waits for */
static bool store_query(int fd, int i, char (*waiting)[96], const struct pollfd *fds, int nf) {
    uint8_t q;
    char key[96], value[160];
    uint64_t n;
    if (!rd(fd, &q, 1)) return false;
    switch (q) {
        case 0: { /* VALIDATE: the magic, no answer */
            uint32_t magic;
            return rd(fd, &magic, sizeof magic) && magic == 0x3C85F7CEu;
        }
        case 1: /* SET; then the waits on that key end (0: stop waiting) */
            if (!rd_str(fd, key, sizeof key) || !rd_str(fd, value, sizeof value) || nkv == KV) return false;
            snprintf(kv[nkv].key, sizeof kv[nkv].key, "%s", key);
            snprintf(kv[nkv].value, sizeof kv[nkv].value, "%s", value);
            nkv++;
            for (int j = 1; j < nf; j++)
                if (waiting[j][0] && !strcmp(waiting[j], key)) {
                    waiting[j][0] = 0;
                    (void)wr(fds[j].fd, "\0", 1);
                }
            return true;
        case 3: { /* GET: the length, then the bytes */
            if (!rd_str(fd, key, sizeof key)) return false;
            const char *v = kv_get(key);
            uint64_t len = v ? strlen(v) : 0;
            return wr(fd, &len, sizeof len) && (!len || wr(fd, v, (size_t)len));
        }
        case 5: /* CHECK: 0 when every key is set, else 1 */
        case 6: { /* WAIT: 0 once every key is set */
            if (!rd(fd, &n, sizeof n) || n != 1 || !rd_str(fd, key, sizeof key)) return false;
            uint8_t ready = kv_get(key) ? 0 : 1;
            if (q == 6 && ready) {
                snprintf(waiting[i], sizeof waiting[i], "%s", key);
                return true;
            }
            return q == 6 ? wr(fd, "\0", 1) : wr(fd, &ready, 1);
        }
        default: return false;
    }
}

static void serve_store(int lfd) {
    struct pollfd fds[CONNS] = {{.fd = lfd, .events = POLLIN}};
    char waiting[CONNS][96] = {{0}};
    int nf = 1;
    for (;;) {
        if (poll(fds, (nfds_t)nf, -1) < 0) _exit(1);
        for (int i = nf - 1; i >= 1; i--)
            if (fds[i].revents && !store_query(fds[i].fd, i, waiting, fds, nf)) {
                close(fds[i].fd);
                fds[i] = fds[nf - 1];
                memcpy(waiting[i], waiting[nf - 1], sizeof waiting[i]);
                nf--;
            }
        if (fds[0].revents & POLLIN) {
            int c = accept(lfd, NULL, NULL);
            if (c >= 0 && nf < CONNS) {
                fds[nf] = (struct pollfd){.fd = c, .events = POLLIN};
                waiting[nf++][0] = 0;
            } else if (c >= 0) {
                close(c);
            }
        }
    }
}

/* torchrun's launch (TORCHELASTIC_USE_AGENT_STORE=True): the ranks exchange
 * their addresses through the store at MASTER_ADDR:MASTER_PORT and train as
 * mpirun's ranks do; of a job of 3 whose rank 2 never comes, the other two
 * name it after UTRAIN_RENDEZVOUS_TIMEOUT. */
static void test_torchrun_store(void) {
    const char *ref = reference();
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    CHECK(lfd >= 0 && !bind(lfd, (struct sockaddr *)&a, sizeof a) && !listen(lfd, 16) &&
              !getsockname(lfd, (struct sockaddr *)&a, &len),
          "a socket for the store");
    fflush(stdout);
    pid_t store = fork();
    if (store == 0) serve_store(lfd);
    close(lfd);
    char port[16];
    snprintf(port, sizeof port, "%d", ntohs(a.sin_port));
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    for (int job = 0; job < 2; job++) {
        const char *name = job ? "trstore3" : "trstore";
        const char *cfg = write_config(name, 1, NULL);
        setenv("WORLD_SIZE", job ? "3" : "2", 1);
        setenv("TORCHELASTIC_RESTART_COUNT", job ? "1" : "0", 1); /* the keys of another attempt */
        if (job) setenv("UTRAIN_RENDEZVOUS_TIMEOUT", "2", 1);
        pid_t pid[2];
        for (int r = 0; r < 2; r++) {
            char v[8], out[32];
            snprintf(v, sizeof v, "%d", r);
            snprintf(out, sizeof out, "%s_%d", name, r);
            setenv("RANK", v, 1);
            setenv("LOCAL_RANK", v, 1);
            pid[r] = tp_spawn((const char *[]){"train", cfg, NULL}, out_path(out));
        }
        int rc0 = tp_wait(pid[0]), rc1 = tp_wait(pid[1]);
        if (!job) {
            CHECK(rc0 == 0 && rc1 == 0, "through the store: exit %d and %d", rc0, rc1);
            CHECK(tp_same_file(ckpt("trstore", 15), ref), "ranks met through the store trained other weights");
        } else {
            const char *said = "1 of 3 ranks did not arrive (rank 2) within 2 s (UTRAIN_RENDEZVOUS_TIMEOUT";
            CHECK(rc0 == 1 && rc1 == 1 && output_has("trstore3_0", said) && output_has("trstore3_1", said),
                  "a rank that never comes: exit %d and %d, not named", rc0, rc1);
        }
    }
    kill(store, SIGKILL);
    waitpid(store, NULL, 0);
    for (const char *const *v = (const char *const[]){"WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK",
                                                       "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT",
                                                       "UTRAIN_RENDEZVOUS_TIMEOUT", NULL};
         *v; v++)
        unsetenv(*v);
}

/* Launcher variables that cannot form a job are named. */
static void test_torchrun_bad_variables(void) {
    const char *cfg = write_config("trbad", 1, NULL);
    int rc = run_with_env("trbad", cfg,
                          (const char *[]){"RANK=2", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500", NULL});
    CHECK(rc == 1 && output_has("trbad", "RANK is '2': it must be a whole number from 0 to 1"), "RANK: exit %d", rc);
    rc = run_with_env("trport", cfg, (const char *[]){"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", NULL});
    CHECK(rc == 1 && output_has("trport", "MASTER_PORT is not set"), "MASTER_PORT: exit %d", rc);
    /* rank 0 cannot listen where another program does */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof a;
    CHECK(fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) && !listen(fd, 1) &&
              !getsockname(fd, (struct sockaddr *)&a, &len),
          "a socket to hold a port");
    char port[32];
    snprintf(port, sizeof port, "MASTER_PORT=%d", ntohs(a.sin_port));
    rc = run_with_env("trbusy", cfg, (const char *[]){"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", port, NULL});
    close(fd);
    snprintf(port, sizeof port, "MASTER_PORT %d: ", ntohs(a.sin_port));
    CHECK(rc == 1 && output_has("trbusy", "rank 0 cannot listen on ") && output_has("trbusy", port),
          "a port in use: exit %d", rc);
    /* the interface named for the ranks' addresses must exist */
    rc = run_with_env("trif", cfg, (const char *[]){"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500",
                                                   "UTRAIN_SOCKET_IFNAME=nosuchif0", NULL});
    CHECK(rc == 1 && output_has("trif", "UTRAIN_SOCKET_IFNAME is 'nosuchif0', which is not an interface with an "
                                        "address here (this machine has: lo"),
          "a missing interface: exit %d", rc);
    CHECK(!exists(tmp, "trbad"), "a refused process made its run directory");
    /* ranks that never come: rank 0 names them after UTRAIN_RENDEZVOUS_TIMEOUT; a rank
     * that cannot reach rank 0 says so after the same wait; a bad wait is named */
    char mport[32];
    snprintf(mport, sizeof mport, "MASTER_PORT=%d", tp_free_port());
    double t0 = tp_now_s();
    rc = run_with_env("trwait", cfg, (const char *[]){"RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1", mport,
                                                     "UTRAIN_RENDEZVOUS_TIMEOUT=2", NULL});
    double waited = tp_now_s() - t0;
    CHECK(rc == 1 && output_has("trwait", "2 of 2 ranks did not arrive (ranks 1, 2) within 2 s "
                                          "(UTRAIN_RENDEZVOUS_TIMEOUT sets the wait)"),
          "missing ranks: exit %d", rc);
    CHECK(waited >= 1.5 && waited < 30, "rank 0 waited %.1f s for a 2 s rendezvous", waited);
    rc = run_with_env("trwait1", cfg, (const char *[]){"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", mport,
                                                      "UTRAIN_RENDEZVOUS_TIMEOUT=1", NULL});
    CHECK(rc == 1 && output_has("trwait1", "cannot reach rank 0 at MASTER_ADDR:MASTER_PORT within 1 s"),
          "rank 0 missing: exit %d", rc);
    rc = run_with_env("trwaitbad", cfg, (const char *[]){"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", mport,
                                                        "UTRAIN_RENDEZVOUS_TIMEOUT=soon", NULL});
    CHECK(rc == 1 && output_has("trwaitbad", "UTRAIN_RENDEZVOUS_TIMEOUT is 'soon': it must be a whole number from 1"),
          "a bad wait: exit %d", rc);
}

static void test_srun_without_mpi(void) {
    const char *cfg = write_config("srun", 1, NULL);
    int rc = run_with_env("srun", cfg,
                          (const char *[]){"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_STEP_NUM_TASKS=2",
                                           "SLURM_LOCALID=1", "SLURM_JOB_ID=77", NULL});
    CHECK(rc == 1, "exit %d", rc);
    CHECK(output_has("srun", "srun started 2 tasks (SLURM_PROCID=1 of SLURM_STEP_NUM_TASKS=2) without MPI "
                             "support"), "why");
    char want[700];
    snprintf(want, sizeof want, "\n  srun --mpi=pmix [your srun options] utrain train %s\n", cfg);
    CHECK(output_has("srun", want), "the command");
    /* an sbatch script's own environment (no job step): utrain may start its ranks from there */
    rc = run_with_env("sbatch", cfg, (const char *[]){"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_JOB_ID=77", NULL});
    CHECK(rc == 0 && exists(tmp, "srun"), "batch script: exit %d", rc);
}

/* The seed's launch: the same command on every node, each with its
 * current_node; node 0's ranks host the meeting at master_addr:master_port.
 * Two "nodes" of one rank on this machine train mpirun's weights. */
static void test_seed_node_by_node(void) {
    const char *ref = reference();
    char extra[300];
    snprintf(extra, sizeof extra, "dist-params:\n    nodes: 2\n    gpus: 1\n    current_node: 0\n"
                                  "    master_addr: '127.0.0.1'\n    master_port: '%d'\n", tp_free_port());
    const char *cfg = write_config("nodes", 1, extra);
    char run1[400];
    snprintf(run1, sizeof run1, "model_dir=%s/runs/nodes1", tmp);
    pid_t n1 = tp_spawn((const char *[]){"train", cfg, "--set", "current_node=1", "--set", run1, NULL},
                        out_path("nodes1"));
    int rc0 = tp_run((const char *[]){"train", cfg, NULL}, out_path("nodes")), rc1 = tp_wait(n1);
    CHECK(rc0 == 0 && rc1 == 0, "exit %d and %d", rc0, rc1);
    CHECK(output_has("nodes1", "node 1 of 2: starting ranks 1 to 1 of 2"), "node 1 says what it starts");
    CHECK(tp_same_file(ckpt("nodes", 15), ref), "node by node trained other weights than mpirun's");
    /* dist.launcher: mpi cannot join them: the mpirun line instead */
    cfg = write_config("nodes_mpi", 1, "dist-params:\n    nodes: 2\n    gpus: 2\n    current_node: 1\n"
                                       "    master_addr: '10.0.0.1'\n    master_port: '1234'\n"
                                       "dist: {launcher: mpi}\n");
    int rc = run_with_env("nodes_mpi", cfg, (const char *[]){NULL});
    CHECK(rc == 1, "exit %d", rc);
    CHECK(output_has("nodes_mpi", "dist.nodes is 2 (this is node 1, node 0 at 10.0.0.1:1234) with dist.launcher: mpi"),
          "why");
    char want[700];
    snprintf(want, sizeof want, "\n  mpirun -np 4 --host 10.0.0.1:2,NODE1:2 --bind-to none%s utrain train %s\n",
             geteuid() == 0 ? " --allow-run-as-root" : "", cfg); /* runnable verbatim, also as root */
    CHECK(output_has("nodes_mpi", want), "the command");
    CHECK(output_has("nodes_mpi", "Start nothing on this node."), "node 1");
    CHECK(!exists(tmp, "nodes_mpi"), "the refused process made its run directory");
}

/* SIGTERM to `utrain train --nproc 2` over TCP: the ranks stop at one step,
 * rank 0 writes the checkpoint, the job exits 75 and leaves no rank behind. */
static void test_tcp_job_stops_with_a_checkpoint(void) {
    const char *cfg = write_config("tcpstop", 100000, "save_interval: 1000000\n");
    pid_t pid = tp_spawn((const char *[]){"train", cfg, "--nproc", "2", "--set", "dist.launcher=tcp", NULL},
                         out_path("tcpstop"));
    char metrics[600];
    snprintf(metrics, sizeof metrics, "%s/runs/tcpstop/metrics.jsonl", tmp);
    for (int i = 0; i < 400 && tp_count_lines(metrics) < 3; i++) nanosleep(&(struct timespec){0, 50000000}, NULL);
    kill(pid, SIGTERM);
    int rc = tp_wait(pid);
    CHECK(rc == 75, "exit %d", rc);
    CHECK(output_has("tcpstop", "checkpoint written"), "the checkpoint");
    char dir[600];
    snprintf(dir, sizeof dir, "%s/runs/tcpstop/checkpoints", tmp);
    int64_t steps[2];
    CHECK(ut_ckpt_list(dir, steps, 2) >= 1, "a checkpoint in %s", dir);
}

/* Under mpirun the launchers' variables do not matter: the job trains on its
 * ranks; with nodes > 1 the world must have nodes x gpus ranks. */
static void test_under_mpirun(void) {
    tp_mpi_env(true);
    setenv("SLURM_STEP_NUM_TASKS", "2", 1);
    const char *cfg = write_config("mpi", 1, "dist-params:\n    nodes: 2\n    gpus: 1\n    master_addr: '127.0.0.1'\n");
    const char *root = "--oversubscribe"; /* root allowed by tp_mpi_env */
    const char *args[] = {"mpirun", "-np", "2", root, "--bind-to", "none", tp_program(), "train", cfg, NULL};
    int rc = run_cmd("mpi", args);
    CHECK(rc == 0 && output_has("mpi", "Processes"), "2 ranks as 2 nodes of 1: exit %d", rc);
    char log1[700];
    snprintf(log1, sizeof log1, "%s/runs/mpi/logger_logs/training_1.log", tmp);
    char *text = tp_slurp(log1);
    CHECK(text && strstr(text, "Training done"), "rank 1 trained");
    free(text);
    cfg = write_config("mpi_bad", 1, "dist-params:\n    nodes: 2\n    gpus: 2\n");
    const char *bad[] = {"mpirun", "-np", "2", root, "--bind-to", "none", tp_program(), "train", cfg, NULL};
    rc = run_cmd("mpi_bad", bad);
    CHECK(rc == 1, "exit %d", rc);
    CHECK(output_has("mpi_bad", "dist.nodes 2 x dist.nproc_per_node (gpus) 2 is 4 ranks, but the launcher "
                                "started 2"), "why");
    unsetenv("SLURM_STEP_NUM_TASKS");
}

// --- the run directory's lock

/* Waits up to 20 s for RUN/.lock to name pid and a checkpoint to exist. */
static bool wait_for_holder(const char *run, pid_t pid) {
    char lock[700], ckpt[700], want[32];
    snprintf(lock, sizeof lock, "%s/.lock", run);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoints", run);
    snprintf(want, sizeof want, "%ld ", (long)pid);
    for (int i = 0; i < 400; i++) {
        char *text = tp_slurp(lock);
        bool ok = text && !strncmp(text, want, strlen(want));
        free(text);
        int64_t steps[1];
        if (ok && ut_ckpt_list(ckpt, steps, 1) > 0) return true;
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    return false;
}

static void test_run_directory_lock(void) {
    const char *cfg = write_config("lock", 100000, "save_interval: 5\n");
    char run[600], want[700];
    snprintf(run, sizeof run, "%s/runs/lock", tmp);
    pid_t a = tp_spawn((const char *[]){"train", cfg, NULL}, out_path("lock_a"));
    CHECK(wait_for_holder(run, a), "the first job did not take the lock and save");
    /* a second job in the same directory, resuming or not */
    int rc = tp_run((const char *[]){"train", cfg, "--set", "continue_training=true", NULL}, out_path("lock_b"));
    CHECK(rc == 1, "second job: exit %d", rc);
    snprintf(want, sizeof want, "%s is in use by another training job (pid %ld on ", run, (long)a);
    CHECK(output_has("lock_b", want), "the holder");
    /* test mode reads checkpoints (written atomically) and takes no lock */
    rc = tp_run((const char *[]){"test", run, "--set", "threads=1", NULL}, out_path("lock_test"));
    CHECK(rc == 0 && output_has("lock_test", "test ("), "test mode during training: exit %d", rc);
    kill(a, SIGTERM);
    rc = tp_wait(a);
    CHECK(rc == 75, "first job stopped by SIGTERM: exit %d", rc);
    /* the lock went with the process: the resumed job runs */
    rc = tp_run((const char *[]){"train", cfg, "--set", "continue_training=true", "--set", "train.max_steps=1",
                                 NULL},
                out_path("lock_c"));
    CHECK(rc == 0 && output_has("lock_c", "Training done"), "resume after the holder ended: exit %d", rc);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-launch")) return 1;
    RUN(test_seed_parameters_trains);
    RUN(test_torchrun_one_node);
    RUN(test_torchrun_bad_variables);
    RUN(test_torchrun_store);
    RUN(test_rendezvous_ignores_strangers);
    RUN(test_srun_without_mpi);
    RUN(test_seed_node_by_node);
    RUN(test_tcp_job_stops_with_a_checkpoint);
    RUN(test_under_mpirun);
    RUN(test_run_directory_lock);
    return tp_finish(TEST_SUMMARY(), tmp);
}
