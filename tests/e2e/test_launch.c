/* How jobs are started, through the `utrain` program: processes started by
 * torchrun-style launchers (RANK/WORLD_SIZE/...), by srun without MPI support
 * (SLURM_* only) and by the seed's one-command-per-node launch (nodes,
 * current_node, master_addr) are refused with the command that runs the job,
 * simulated by setting the launchers' variables; the same variables under
 * mpirun train normally. And the run directory's lock: a second training
 * job in a directory in use is refused with the holder's pid; test mode and a
 * resumed job after the holder ends are not. */
#include <fcntl.h>
#include <signal.h>
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

static void test_torchrun_one_node(void) {
    const char *cfg = write_config("tr1", 1, NULL);
    int rc = run_with_env("tr1", cfg,
                          (const char *[]){"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                                           "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500", NULL});
    CHECK(rc == 1, "exit %d", rc);
    CHECK(output_has("tr1", "started by torchrun or a launcher like it (RANK=1, WORLD_SIZE=2, LOCAL_RANK=1, "
                            "MASTER_ADDR=127.0.0.1, MASTER_PORT=29500)"), "why");
    char want[700];
    snprintf(want, sizeof want, "\n  utrain train %s --nproc 2\n", cfg);
    CHECK(output_has("tr1", want), "the command");
    CHECK(!exists(tmp, "tr1"), "the refused process made its run directory");
    /* Accelerate on one node without LOCAL_WORLD_SIZE */
    rc = run_with_env("tr1b", cfg, (const char *[]){"RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=localhost", NULL});
    CHECK(rc == 1 && output_has("tr1b", " --nproc 3\n"), "exit %d", rc);
    /* a world of one is an ordinary run */
    rc = run_with_env("tr1c", cfg, (const char *[]){"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", NULL});
    CHECK(rc == 0 && exists(tmp, "tr1"), "world of 1: exit %d", rc);
}

static void test_torchrun_two_nodes(void) {
    const char *cfg = write_config("tr2", 1, NULL);
    int rc = run_with_env("tr2", cfg,
                          (const char *[]){"RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4",
                                           "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", NULL});
    CHECK(rc == 1, "exit %d", rc);
    char want[700];
    snprintf(want, sizeof want, "\n  mpirun -np 8 --host 10.0.0.1:4,NODE1:4 --bind-to none%s utrain train %s\n",
             geteuid() == 0 ? " --allow-run-as-root" : "", cfg);
    CHECK(output_has("tr2", want), "the command");
    CHECK(output_has("tr2", "NODEi: the address of node i"), "the note");
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

static void test_seed_node_by_node(void) {
    const char *cfg = write_config("nodes", 1, "dist-params:\n    nodes: 2\n    gpus: 2\n    current_node: 1\n"
                                            "    master_addr: '10.0.0.1'\n    master_port: '1234'\n");
    int rc = run_with_env("nodes", cfg, (const char *[]){NULL});
    CHECK(rc == 1, "exit %d", rc);
    CHECK(output_has("nodes", "dist.nodes is 2 (this is node 1, node 0 at 10.0.0.1:1234)"), "why");
    char want[700];
    snprintf(want, sizeof want, "\n  mpirun -np 4 --host 10.0.0.1:2,NODE1:2 --bind-to none%s utrain train %s\n",
             geteuid() == 0 ? " --allow-run-as-root" : "", cfg); /* runnable verbatim, also as root */
    CHECK(output_has("nodes", want), "the command");
    CHECK(output_has("nodes", "Start nothing on this node."), "node 1");
    CHECK(!exists(tmp, "nodes"), "the refused process made its run directory");
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
    RUN(test_torchrun_two_nodes);
    RUN(test_srun_without_mpi);
    RUN(test_seed_node_by_node);
    RUN(test_under_mpirun);
    RUN(test_run_directory_lock);
    return tp_finish(TEST_SUMMARY(), tmp);
}
