/* Failures under MPI, through the trainer: a rank killed with SIGKILL in the
 * middle of a run ends every rank within dist.timeout_s with a non-zero exit
 * naming the rank, and no process is left behind; with --max-restarts 1 the
 * job starts again from its newest checkpoint and finishes with the same
 * final weights, bit for bit, as a run that was never interrupted; ranks
 * started with different configurations stop at start-up with a message
 * instead of hanging; a bad --max-restarts and dp under several ranks are
 * refused with a message. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "test.h"

static char tmp[256], shard[512];

/* A job's config file and captured output. */
typedef struct {
    char cfg[512], out[512];
} job_files;

static job_files files_of(const char *name) {
    job_files j;
    snprintf(j.cfg, sizeof j.cfg, "%s/%s.yml", tmp, name);
    snprintf(j.out, sizeof j.out, "%s/%s.out", tmp, name);
    return j;
}

static job_files write_cfg(const char *name, int n_embd, int max_steps) {
    job_files j = files_of(name);
    FILE *f = fopen(j.cfg, "w");
    fprintf(f,
            "experiment_name: %s\noutput_dir: %s/runs\nseed: 9\nthreads: 1\n"
            "model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: %d, vocab_size: 256, block_size: 16,\n"
            "        dropout: 0.1}\n"
            "data: {name: tokens, train_path: %s, seq_len: 16}\n"
            "train: {max_steps: %d, batch_size: 4, log_interval: 1, eval_strategy: \"no\",\n"
            "        save_strategy: steps, save_interval: 10, save_total_limit: 0, progress: lines}\n"
            "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
            "dist: {timeout_s: 5}\n",
            name, tmp, n_embd, shard, max_steps);
    fclose(f);
    return j;
}

/* Reads a whole /proc file (NULs kept) into buf; returns its length. */
static size_t read_proc(pid_t pid, const char *leaf, char *buf, size_t n) {
    char path[300];
    snprintf(path, sizeof path, "/proc/%ld/%s", (long)pid, leaf);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t k = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[k] = 0;
    return k;
}

typedef struct {
    const char *cfg;
    int rank;
    char *env;
} proc_query;

/* pid when its command line names q->cfg and, for q->rank >= 0, it is that
 * utrain rank (not mpirun); else 0 */
static int matches(pid_t pid, const char *cmdline, size_t len, void *arg) {
    const proc_query *q = arg;
    if (!tp_cmdline_has(cmdline, len, q->cfg)) return 0;
    if (q->rank < 0) return (int)pid;
    if (strstr(cmdline, "mpirun")) return 0;
    char want[64];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", q->rank);
    size_t m = read_proc(pid, "environ", q->env, 1 << 20);
    for (size_t i = 0; i < m; i += strlen(q->env + i) + 1)
        if (!strcmp(q->env + i, want)) return (int)pid;
    return 0;
}

/* The pid of the utrain rank `rank` running cfg (0 if none), or with rank -1,
 * of any process whose command line names cfg. */
static pid_t find_process(const char *cfg, int rank) {
    proc_query q = {cfg, rank, malloc(1 << 20)};
    pid_t found = q.env ? (pid_t)tp_each_proc(matches, &q) : 0;
    free(q.env);
    return found;
}

/* Waits until rank 1's log shows step `step` (or 60 s pass). */
static bool wait_for_step(const char *name, int step) {
    char path[700], want[64];
    snprintf(path, sizeof path, "%s/runs/%s/logger_logs/training_1.log", tmp, name);
    snprintf(want, sizeof want, "step %d/", step);
    for (double t0 = tp_now_s(); tp_now_s() - t0 < 60; usleep(5000)) {
        char *s = tp_slurp(path);
        bool ok = s && strstr(s, want);
        free(s);
        if (ok) return true;
    }
    return false;
}

/* Starts NAME on 2 ranks, kills rank 1 with SIGKILL at step 25; returns the
 * job's exit code and its seconds from the kill to the end. */
static int run_and_kill_with(const char *name, const char *restarts, const char *set, double *secs) {
    job_files j = files_of(name);
    const char *args[] = {"train", j.cfg, "--nproc", "2", "--set", set ? set : "threads=1",
                          restarts ? "--max-restarts" : NULL, restarts, NULL};
    pid_t job = tp_spawn(args, j.out);
    bool reached = wait_for_step(name, 25);
    CHECK(reached, "%s: rank 1 reached step 25", name);
    pid_t victim = reached ? find_process(j.cfg, 1) : 0;
    CHECK(victim > 0, "%s: rank 1's process found", name);
    if (victim > 0) kill(victim, SIGKILL);
    double t0 = tp_now_s();
    int rc = tp_wait(job);
    *secs = tp_now_s() - t0;
    return rc;
}

static int run_and_kill(const char *name, const char *restarts, double *secs) {
    return run_and_kill_with(name, restarts, NULL, secs);
}

/* Rank 1 of run NAME (set: one more setting, or NULL) killed at step 25:
 * every rank ends within the timeout, the message names rank 1, and no
 * process is left. */
static void killed_rank(const char *name, const char *set) {
    job_files j = write_cfg(name, 32, 100000);
    double secs;
    int rc = run_and_kill_with(name, NULL, set, &secs);
    char *s = tp_slurp(j.out);
    CHECK(rc != 0, "%s: the job fails (exit %d)", name, rc);
    CHECK(secs < 5 + 10, "%s: every rank ended %.1f s after the kill (timeout 5 s)", name, secs);
    CHECK(s && strstr(s, "rank 1"), "%s: the message names rank 1:\n%s", name, s ? s : "");
    usleep(200000);
    CHECK(find_process(j.cfg, -1) == 0, "%s: no process of the job is left", name);
    printf("     %s: ended %.2f s after the kill, exit %d\n", name, secs, rc);
    free(s);
}

static void test_killed_rank_ends_the_job(void) { killed_rank("killed", NULL); }

/* The same for a model split over the two ranks (dist.tensor_parallel 2):
 * the survivor waits in the split's collectives, and the job still ends. */
static void test_killed_rank_of_a_split_model(void) { killed_rank("killedtp", "dist.tensor_parallel=2"); }

static void test_max_restarts_finishes_the_run(void) {
    job_files whole = write_cfg("whole", 32, 60), restarted = write_cfg("restarted", 32, 60);
    int rc = tp_run((const char *[]){"train", whole.cfg, "--nproc", "2", NULL}, whole.out);
    CHECK(rc == 0, "the uninterrupted run finishes");
    double secs;
    rc = run_and_kill("restarted", "1", &secs);
    char *s = tp_slurp(restarted.out);
    CHECK(rc == 0, "the restarted job finishes (exit %d):\n%s", rc, s ? s : "");
    CHECK(s && strstr(s, "restart 1 of 1") && strstr(s, "Resuming from"),
          "it says it restarted and resumed");
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/runs/whole/checkpoints/step_00000060.safetensors", tmp);
    snprintf(b, sizeof b, "%s/runs/restarted/checkpoints/step_00000060.safetensors", tmp);
    CHECK(tp_same_weights(a, b), "the final weights equal the uninterrupted run's, bit for bit");
    free(s);
}

/* Whether process pid has a TCP socket listening on an address other than
 * loopback (/proc/net/tcp and tcp6 entries in state 0A whose inode is one
 * of the process's descriptors). */
static bool listens_outside_loopback(pid_t pid) {
    char dir[64], link[512], line[512];
    snprintf(dir, sizeof dir, "/proc/%ld/fd", (long)pid);
    bool found = false;
    for (int v6 = 0; v6 < 2 && !found; v6++) {
        FILE *f = fopen(v6 ? "/proc/net/tcp6" : "/proc/net/tcp", "r");
        while (f && !found && fgets(line, sizeof line, f)) {
            char local[64], state[8];
            unsigned long inode;
            if (sscanf(line, " %*d: %63s %*s %7s %*s %*s %*s %*s %*s %lu", local, state, &inode) != 3 ||
                strcmp(state, "0A"))
                continue;
            bool loop = v6 ? !strncmp(local, "00000000000000000000000001000000", 32) : !strncmp(local + 6, "7F", 2);
            if (loop) continue;
            char want[64];
            snprintf(want, sizeof want, "socket:[%lu]", inode);
            for (int fd = 0; fd < 256 && !found; fd++) {
                char path[96];
                snprintf(path, sizeof path, "%s/%d", dir, fd);
                ssize_t k = readlink(path, link, sizeof link - 1);
                if (k > 0) {
                    link[k] = 0;
                    found = !strcmp(link, want);
                }
            }
        }
        if (f) fclose(f);
    }
    return found;
}

/* The --nproc launcher is the job's main process: a stop signal to it (or
 * a Ctrl-C to its terminal's process group, with_group) stops every rank at
 * one step with a checkpoint that rank 0 wrote, and the job exits 75; with
 * --max-restarts it is not restarted. A resume goes on from that
 * checkpoint. */
static void stop_launcher(const char *name, int sig, bool with_group, const char *restarts) {
    job_files j = write_cfg(name, 32, 100000);
    const char *cfg = j.cfg, *out = j.out;
    char pat[700];
    const char *args[] = {"train", cfg, "--nproc", "2", restarts ? "--max-restarts" : NULL, restarts, NULL};
    unsetenv("OMPI_MCA_btl"); /* the launcher's own choice of transports */
    pid_t job = with_group ? tp_spawn_group(args, out) : tp_spawn(args, out);
    setenv("OMPI_MCA_btl", "self,vader", 1);
    CHECK(wait_for_step(name, 25), "%s: rank 1 reached step 25", name);
    for (int r = 0; r < 2; r++) { /* a one-node job: shared memory between ranks, nothing on the network */
        pid_t p = find_process(cfg, r);
        CHECK(p > 0 && !listens_outside_loopback(p), "%s: rank %d listens on no network address", name, r);
    }
    kill(with_group ? -job : job, sig);
    int rc = tp_wait(job);
    char *s = tp_slurp(out);
    const char *at = s ? strstr(s, "checkpoint written") : NULL;
    long step = 0;
    const char *st = s ? strstr(s, "Stopped by signal") : NULL;
    if (st) st = strstr(st, "at step ");
    if (st) step = strtol(st + 8, NULL, 10);
    CHECK(rc == 75 && at && step >= 25, "%s: exit 75 with a checkpoint (exit %d, step %ld):\n%s", name, rc, step,
          s ? s : "");
    CHECK(!s || !strstr(s, "restart 1 of"), "%s: a stop is not restarted", name);
    snprintf(pat, sizeof pat, "%s/runs/%s/checkpoints/step_%08ld.safetensors", tmp, name, step);
    struct stat sb;
    CHECK(stat(pat, &sb) == 0 && sb.st_size > 0, "%s: %s is there", name, pat);
    usleep(200000);
    CHECK(find_process(cfg, -1) == 0, "%s: no process of the job is left", name);
    free(s);
    /* and the run goes on from it */
    char more[64];
    snprintf(more, sizeof more, "max_steps=%ld", step + 2);
    rc = tp_run((const char *[]){"train", cfg, "--nproc", "2", "--set", "continue_training=true", "--set", more,
                                 NULL},
                out);
    s = tp_slurp(out);
    snprintf(pat, sizeof pat, "(step %ld,", step);
    CHECK(rc == 0 && s && strstr(s, "Resuming from") && strstr(s, pat), "%s: the run resumes at step %ld:\n%s",
          name, step, s ? s : "");
    free(s);
}

static void test_sigterm_to_launcher_checkpoints(void) { stop_launcher("term", SIGTERM, false, NULL); }
static void test_ctrl_c_to_group_checkpoints(void) { stop_launcher("ctrlc", SIGINT, true, NULL); }
static void test_sigterm_with_restarts_is_a_stop(void) { stop_launcher("termr", SIGTERM, false, "2"); }

/* SIGKILL to the launcher (nothing can be forwarded): the ranks do not go on
 * unsupervised; they stop at the next step with a checkpoint and end.
 * `why`, when given, is what rank 0's log must say stopped it. */
static void kill_launcher(const char *name, const char *why) {
    job_files j = write_cfg(name, 32, 100000);
    const char *cfg = j.cfg;
    char log[700];
    pid_t job = tp_spawn((const char *[]){"train", cfg, "--nproc", "2", "--max-restarts", "1", NULL}, j.out);
    CHECK(wait_for_step(name, 25), "%s: rank 1 reached step 25", name);
    kill(job, SIGKILL);
    tp_wait(job);
    double t0 = tp_now_s();
    while (find_process(cfg, -1) && tp_now_s() - t0 < 30) usleep(50000);
    CHECK(find_process(cfg, -1) == 0, "%s: every rank ended (%.1f s after the kill)", name, tp_now_s() - t0);
    snprintf(log, sizeof log, "%s/runs/%s/logger_logs/training_0.log", tmp, name);
    char *s = tp_slurp(log);
    CHECK(s && strstr(s, "checkpoint written"), "%s: rank 0 wrote a checkpoint:\n%s", name, s ? s : "(no log)");
    if (why) CHECK(s && strstr(s, why), "%s: rank 0's log says \"%s\":\n%s", name, why, s ? s : "(no log)");
    free(s);
}

static void test_killed_launcher_stops_the_ranks(void) { kill_launcher("orphan", NULL); }

/* An mpirun that passes no signal on to its ranks, as Open MPI 4.1.6 on
 * Ubuntu 24.04 does with SIGUSR1: a shell script named mpirun, first in
 * PATH, that ignores SIGUSR1 and runs the real one as its child. The
 * launcher's stop then reaches the ranks only by its own route, and a killed
 * launcher only through the ranks watching it. */
static char saved_path[8192];
static char real[512]; /* the real mpirun */

static bool put_deaf_mpirun_first(void) {
    char dir[400], script[512];
    real[0] = 0;
    const char *path = getenv("PATH");
    snprintf(saved_path, sizeof saved_path, "%s", path ? path : "/usr/bin:/bin");
    FILE *p = popen("command -v mpirun", "r");
    if (p) {
        if (!fgets(real, sizeof real, p)) real[0] = 0;
        pclose(p);
    }
    real[strcspn(real, "\n")] = 0;
    if (!real[0]) return false;
    snprintf(dir, sizeof dir, "%s/deaf", tmp);
    mkdir(dir, 0755);
    snprintf(script, sizeof script, "%s/mpirun", dir);
    FILE *f = fopen(script, "w");
    if (!f) return false;
    fprintf(f, "#!/bin/sh\n# passes no signal on\ntrap '' USR1\n%s \"$@\" &\nwait $!\n", real);
    fclose(f);
    chmod(script, 0755);
    char *np = malloc(strlen(dir) + strlen(saved_path) + 2);
    sprintf(np, "%s:%s", dir, saved_path);
    setenv("PATH", np, 1);
    free(np);
    return true;
}

static void restore_path(void) { setenv("PATH", saved_path, 1); }

/* An mpirun that passes no signal on and whose ranks do not descend from it
 * (as an MPI whose daemons start the ranks apart from mpirun): the script
 * starts the real one in a new session through a process that exits at once
 * (so the ranks' parents lead to init, not to the job), waits for the exit
 * code it leaves in a file, and exits with it. The launcher then finds the
 * ranks by the supervisor named in their environment. */
static bool put_detached_mpirun_first(void) {
    if (!put_deaf_mpirun_first()) return false;
    char script[512];
    snprintf(script, sizeof script, "%s/deaf/mpirun", tmp);
    FILE *f = fopen(script, "w");
    if (!f) return false;
    fprintf(f,
            "#!/bin/sh\n# passes no signal on; its ranks descend from init, not from it\ntrap '' USR1\n"
            "rc=%s/deaf/rc.$$\nrm -f \"$rc\"\n"
            "( setsid sh -c '%s \"$@\"; echo $? > \"$0.tmp\"; mv \"$0.tmp\" \"$0\"' \"$rc\" \"$@\" & )\n"
            "while [ ! -f \"$rc\" ]; do sleep 0.1; done\nexit $(cat \"$rc\")\n",
            tmp, real);
    fclose(f);
    return true;
}

/* SIGTERM to the launcher with such an mpirun: every rank stops at one step
 * with a checkpoint, as with any other (tests/dist/test_failures' termination
 * rules). */
static void test_sigterm_with_detached_ranks(void) {
    bool ok = put_detached_mpirun_first();
    CHECK(ok, "a detaching mpirun put first in PATH");
    if (ok) stop_launcher("detached", SIGTERM, false, NULL);
    restore_path();
}

static void test_sigterm_without_forwarding_mpirun(void) {
    bool ok = put_deaf_mpirun_first();
    CHECK(ok, "a non-forwarding mpirun put first in PATH");
    if (ok) stop_launcher("deafterm", SIGTERM, false, NULL);
    restore_path();
}

static void test_killed_launcher_without_forwarding_mpirun(void) {
    bool ok = put_deaf_mpirun_first();
    CHECK(ok, "a non-forwarding mpirun put first in PATH");
    if (ok) kill_launcher("deafkill", "Stopped by the end of the --nproc launcher");
    restore_path();
}

/* SIGTERM to one rank (as a scheduler that signals one task may): every
 * rank stops at the same step, and each log says why: the signal on the
 * rank that got it, "a stop signal to another rank" on the other. */
static void test_sigterm_to_one_rank(void) {
    const char *name = "onerank";
    job_files j = write_cfg(name, 32, 100000);
    const char *cfg = j.cfg;
    char log[700];
    pid_t job = tp_spawn((const char *[]){"train", cfg, "--nproc", "2", NULL}, j.out);
    CHECK(wait_for_step(name, 25), "rank 1 reached step 25");
    pid_t r1 = find_process(cfg, 1);
    CHECK(r1 > 0, "rank 1's process found");
    if (r1 > 0) kill(r1, SIGTERM);
    int rc = tp_wait(job);
    CHECK(rc == 75, "the job exits 75 (exit %d)", rc);
    for (int r = 0; r < 2; r++) {
        snprintf(log, sizeof log, "%s/runs/%s/logger_logs/training_%d.log", tmp, name, r);
        char *s = tp_slurp(log);
        const char *want = r == 1 ? "Stopped by signal 15 at step" : "Stopped by a stop signal to another rank at step";
        CHECK(s && strstr(s, want) && !strstr(s, "signal 0"), "rank %d's log says \"%s\":\n%s", r, want,
              s ? s : "(no log)");
        free(s);
    }
}

/* However many arguments the command has, the ranks get all of them (a
 * sweep of many --set, the last one winning). */
static void test_every_argument_reaches_the_ranks(void) {
    job_files j = write_cfg("many", 32, 20);
    const char *args[200] = {"train", j.cfg, "--nproc", "2"};
    int n = 4;
    while (n < 190) args[n++] = "--set", args[n++] = "train.max_steps=1";
    args[n++] = "--set", args[n++] = "train.max_steps=3";
    args[n] = NULL;
    int rc = tp_run(args, j.out);
    char *s = tp_slurp(j.out);
    CHECK(rc == 0 && s && strstr(s, "Training done: 3 steps"), "the ranks ran the last --set (exit %d):\n%s", rc,
          s ? s : "");
    free(s);
}

static void test_mismatched_configs_are_reported(void) {
    job_files small = write_cfg("small", 32, 20), big = write_cfg("big", 64, 20), mis = files_of("mismatch");
    const char *a = small.cfg, *b = big.cfg, *out = mis.out;
    /* rank 0 gets one config, rank 1 the other (OpenMPI's MPMD form) */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "mpirun --oversubscribe --bind-to none %s -np 1 %s train %s : -np 1 %s train %s "
             "--set experiment_name=small > %s 2>&1",
             geteuid() == 0 ? "--allow-run-as-root" : "", tp_program(), a, tp_program(), b, out);
    double t0 = tp_now_s();
    int rc = system(cmd);
    double secs = tp_now_s() - t0;
    char *s = tp_slurp(out);
    CHECK(rc != 0, "the job fails");
    CHECK(secs < 10, "at start-up (%.1f s), not at the timeout", secs);
    CHECK(s && strstr(s, "differs between ranks") && strstr(s, "rank 1 has"),
          "the message says which rank differs:\n%s", s ? s : "");
    free(s);
}

/* A per-process batch that differs between ranks is named with both sizes
 * (the configuration hash leaves it out: a resume may change it). */
static void test_mismatched_batch_is_reported_in_decimal(void) {
    job_files j = write_cfg("batch", 32, 20);
    const char *a = j.cfg, *out = j.out;
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "mpirun --oversubscribe --bind-to none %s -np 1 %s train %s : -np 1 %s train %s "
             "--set train.batch_size=8 > %s 2>&1",
             geteuid() == 0 ? "--allow-run-as-root" : "", tp_program(), a, tp_program(), a, out);
    int rc = system(cmd);
    char *s = tp_slurp(out);
    CHECK(rc != 0, "the job fails");
    CHECK(s && strstr(s, "train.batch_size differs between ranks: rank 0 has 4, rank 1 has 8"),
          "the message gives both batch sizes:\n%s", s ? s : "");
    free(s);
}

/* Launch options and strategies that cannot run say so. */
static void test_bad_launch_requests(void) {
    job_files j = write_cfg("bad", 32, 20);
    const char *cfg = j.cfg, *out = j.out;
    int rc = tp_run((const char *[]){"train", cfg, "--max-restarts", "many", NULL}, out);
    char *s = tp_slurp(out);
    CHECK(rc == 2 && s && strstr(s, "--max-restarts needs a count"), "bad --max-restarts (exit %d): %s", rc,
          s ? s : "");
    free(s);
    rc = tp_run((const char *[]){"train", cfg, "--nproc", "0", NULL}, out);
    s = tp_slurp(out);
    CHECK(rc == 2 && s && strstr(s, "--nproc needs a process count from 1 to 4096, got '0'"),
          "--nproc 0 (exit %d): %s", rc, s ? s : "");
    free(s);
    /* dp is one process: started as 2 ranks by a launcher it refuses */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "mpirun --oversubscribe --bind-to none %s -np 2 %s train %s --set dist.strategy=dp > %s 2>&1",
             geteuid() == 0 ? "--allow-run-as-root" : "", tp_program(), cfg, out);
    rc = system(cmd);
    s = tp_slurp(out);
    CHECK(rc != 0 && s && strstr(s, "dist.strategy dp runs in one process with worker threads"),
          "dp under 2 ranks is refused:\n%s", s ? s : "");
    free(s);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    if (!tp_make_tmpdir(tmp, sizeof tmp, "utrain-failures")) return 1;
    tp_mpi_env(true);
    if (!tp_tokenize_sample(tmp, shard, sizeof shard)) return 1;
    RUN(test_killed_rank_ends_the_job);
    RUN(test_killed_rank_of_a_split_model);
    RUN(test_max_restarts_finishes_the_run);
    RUN(test_sigterm_to_launcher_checkpoints);
    RUN(test_ctrl_c_to_group_checkpoints);
    RUN(test_sigterm_with_restarts_is_a_stop);
    RUN(test_killed_launcher_stops_the_ranks);
    RUN(test_sigterm_without_forwarding_mpirun);
    RUN(test_killed_launcher_without_forwarding_mpirun);
    RUN(test_sigterm_with_detached_ranks);
    RUN(test_sigterm_to_one_rank);
    RUN(test_every_argument_reaches_the_ranks);
    RUN(test_mismatched_configs_are_reported);
    RUN(test_mismatched_batch_is_reported_in_decimal);
    RUN(test_bad_launch_requests);
    return tp_finish(TEST_SUMMARY(), tmp);
}
