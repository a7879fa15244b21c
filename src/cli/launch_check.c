/* How this process was started, checked before a run. A rank comes from
 * MPI (mpirun, srun with PMIx) or from a launcher that sets RANK and
 * WORLD_SIZE (torchrun, Accelerate, PyTorchJob, and utrain's own TCP
 * launcher); srun without MPI support would leave each task training alone
 * as rank 0 of 1 in the same run directory, so it is refused with the
 * command that starts the job it meant. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch_check.h"
#include "utrain/dist.h"

/* An environment variable as a positive count, 0 when unset or not one. */
static long env_count(const char *name) {
    const char *v = getenv(name);
    char *end;
    long x = v && *v ? strtol(v, &end, 10) : 0;
    return x > 0 && !*end ? x : 0;
}

static const char *env_or(const char *name, const char *dflt) {
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

/* "utrain CMD ARGS" without --nproc/--max-restarts N (shell-quoted where
 * needed), then extra. */
static void command_line(char *buf, size_t n, const char *cmd, int argc, char **argv, const char *extra) {
    size_t len = (size_t)snprintf(buf, n, "utrain %s", cmd);
    for (int i = 0; i < argc && len < n; i++) {
        if (!strcmp(argv[i], "--nproc") || !strcmp(argv[i], "--max-restarts")) {
            i++;
            continue;
        }
        bool plain = strspn(argv[i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                     "_-./=:,@+") == strlen(argv[i]) && *argv[i];
        len += (size_t)snprintf(buf + len, n - len, plain ? " %s" : " '%s'", argv[i]);
    }
    if (len < n) snprintf(buf + len, n - len, "%s", extra);
}

/* "HOST0:P,NODE1:P,..." for nodes nodes of per ranks, node 0 at master. */
static void host_list(char *buf, size_t n, const char *master, long nodes, long per) {
    size_t len = (size_t)snprintf(buf, n, "%s:%ld", master, per);
    for (long i = 1; i < nodes && len < n; i++) {
        if (i == 4 && nodes > 5) {
            len += (size_t)snprintf(buf + len, n - len, ",...,NODE%ld:%ld", nodes - 1, per);
            break;
        }
        len += (size_t)snprintf(buf + len, n - len, ",NODE%ld:%ld", i, per);
    }
}

/* The printed mpirun line must run as it is: OpenMPI refuses root without this. */
static const char *as_root(void) { return geteuid() == 0 ? " --allow-run-as-root" : ""; }

static void mpirun_line(char *buf, size_t n, const char *master, long nodes, long per, const char *cmd,
                        int argc, char **argv) {
    char hosts[256], rest[1024];
    host_list(hosts, sizeof hosts, master, nodes, per);
    command_line(rest, sizeof rest, cmd, argc, argv, "");
    snprintf(buf, n, "mpirun -np %ld --host %s --bind-to none%s %s", nodes * per, hosts, as_root(), rest);
}

// --- srun without MPI support

static int check_slurm(const char *cmd, int argc, char **argv, char *msg, size_t n) {
    long tasks = env_count("SLURM_STEP_NUM_TASKS"); /* set by srun for its tasks, not in sbatch scripts */
    if (tasks <= 1) return 0;
    char line[1200];
    command_line(line, sizeof line, cmd, argc, argv, "");
    snprintf(msg, n,
             "srun started %ld tasks (SLURM_PROCID=%s of SLURM_STEP_NUM_TASKS=%ld) without MPI support: "
             "no PMIx or PMI in the environment, so each task would train alone as rank 0 of 1.\n"
             "Start the job with srun's PMIx plugin (`srun --mpi=list` shows the ones your Slurm has):\n"
             "  srun --mpi=pmix [your srun options] %s\n"
             "or with mpirun inside the allocation (see docs/multinode.md).",
             tasks, env_or("SLURM_PROCID", "?"), tasks, line);
    return -1;
}

// --- the seed's node-by-node launch (nodes, current_node, master_addr)

/* With dist.launcher: mpi the nodes' commands cannot join (auto and tcp
 * start this node's ranks, which meet the other nodes' at master_addr). */
static int check_nodes(const ut_config *c, const char *cmd, int argc, char **argv, char *msg, size_t n) {
    if (c->nodes <= 1 || strcmp(c->launcher, "mpi")) return 0;
    char line[1400];
    mpirun_line(line, sizeof line, c->master_addr, (long)c->nodes, (long)c->nproc_per_node, cmd, argc, argv);
    snprintf(msg, n,
             "dist.nodes is %lld (this is node %lld, node 0 at %s:%lld) with dist.launcher: mpi, which does "
             "not join commands started node by node into one job. Run the job once, on node 0, and mpirun "
             "starts the ranks of every node (%lld x %lld):\n  %s\n"
             "%s(NODEi: the address of node i; mpirun reaches the nodes over ssh, or use srun: see "
             "docs/multinode.md). Or set dist.launcher: tcp and run utrain on every node.",
             (long long)c->nodes, (long long)c->current_node, c->master_addr, (long long)c->master_port,
             (long long)c->nodes, (long long)c->nproc_per_node, line,
             c->current_node ? "Start nothing on this node. " : "");
    return -1;
}

int ut_cli_launch_check(const ut_config *cfg, const char *cmd, int argc, char **argv, char *msg, size_t n) {
    if (ut_comm_launched()) return 0;
    if (check_slurm(cmd, argc, argv, msg, n) || check_nodes(cfg, cmd, argc, argv, msg, n))
        return -1;
    return 0;
}

int ut_cli_world_check(const ut_config *c, int world, char *msg, size_t n) {
    if (c->nodes <= 1 || world == c->nodes * c->nproc_per_node) return 0;
    snprintf(msg, n,
             "dist.nodes %lld x dist.nproc_per_node (gpus) %lld is %lld ranks, but the launcher started "
             "%d: give mpirun -np %lld (or WORLD_SIZE=%lld), or set nodes and gpus to the job's shape",
             (long long)c->nodes, (long long)c->nproc_per_node, (long long)(c->nodes * c->nproc_per_node),
             world, (long long)(c->nodes * c->nproc_per_node), (long long)(c->nodes * c->nproc_per_node));
    return -1;
}
