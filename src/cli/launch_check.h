/* Start-up checks of how the processes were launched: a job's ranks come
 * from MPI or from a RANK/WORLD_SIZE launcher (torchrun, Accelerate, utrain's
 * TCP launcher); srun without MPI support, and the seed's one command per
 * node with dist.launcher: mpi, are refused with the command that starts
 * the job.
 * defines: ut_cli_launch_check, ut_cli_world_check, ut_cli_launch. */
#ifndef UTRAIN_CLI_LAUNCH_CHECK_H
#define UTRAIN_CLI_LAUNCH_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "utrain/config.h"

/* Before anything starts. cmd is "train" or "test"; argv the arguments after
 * it (the config file, --set options, --nproc). 0, or -1 with the message
 * (several lines, the command to use among them) in msg. */
int ut_cli_launch_check(const ut_config *cfg, const char *cmd, int argc, char **argv, char *msg, size_t n);
/* Under a launcher: with dist.nodes > 1 the world must be nodes x
 * nproc_per_node ranks. 0, or -1 with msg. */
int ut_cli_world_check(const ut_config *cfg, int world, char *msg, size_t n);
/* `--nproc N` (src/cli/launch.c): runs this command as N ranks, under
 * mpirun or as children talking over TCP (dist.launcher; node by node for
 * dist.nodes > 1, this node's ranks from current_node x N), (cmd: train or
 * test, or NULL; argv without --nproc and --max-restarts is passed on
 * whole) and supervises them: SIGTERM, SIGINT and SIGUSR1 become
 * the ranks' clean stop (exit 75), a death of this process stops them too,
 * and a failed job (not a stop, not a usage error) starts again up to
 * max_restarts times from its newest checkpoint. The job's exit code. */
int ut_cli_launch(int nproc, int max_restarts, const char *cmd, int argc, char **argv, const ut_config *cfg);

#endif
