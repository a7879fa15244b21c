/* Start-up checks of how the processes were launched: a job is a set of MPI
 * ranks, so processes started by other launchers (torchrun/Accelerate's
 * RANK/WORLD_SIZE, srun without MPI support, the seed's one command per node
 * with nodes/current_node) are refused with the command that starts the job.
 * defines: ut_cli_under_mpi, ut_cli_launch_check, ut_cli_world_check. */
#ifndef UTRAIN_CLI_LAUNCH_CHECK_H
#define UTRAIN_CLI_LAUNCH_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "utrain/config.h"

/* Started by an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx). */
bool ut_cli_under_mpi(void);
/* Before anything starts. cmd is "train" or "test"; argv the arguments after
 * it (the config file, --set options, --nproc). 0, or -1 with the message
 * (several lines, the command to use among them) in msg. */
int ut_cli_launch_check(const ut_config *cfg, const char *cmd, int argc, char **argv, char *msg, size_t n);
/* Under an MPI launcher: with dist.nodes > 1 the world must be nodes x
 * nproc_per_node ranks. 0, or -1 with msg. */
int ut_cli_world_check(const ut_config *cfg, int world, char *msg, size_t n);

#endif
