/* Helpers for tests that run the `utrain` program: spawning it with output
 * captured, reading files, comparing checkpoints and metrics.jsonl.
 * defines: tp_set_program, tp_make_tmpdir, tp_finish, tp_path, tp_spawn, tp_spawn_group, tp_wait, tp_run, tp_run_shown,
 *          tp_push_sets, tp_slurp, tp_copy_file, tp_plant_checkpoint, tp_count_lines, tp_same_weights, tp_weights_rel_diff, tp_loss_at, tp_json_number,
 *          tp_same_file, tp_train_in, tp_train_expect, tp_run_file, tp_ckpt_file, tp_tensors_diff, tp_loss_diff,
 *          tp_now_s, tp_free_port, tp_each_proc, tp_cmdline_has, tp_write_pairs. */
#ifndef UTRAIN_TEST_PROC_H
#define UTRAIN_TEST_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The program is BUILD/utrain, found from the test binary's own path
 * BUILD/tests/<dir>/<name> (argv[0]). */
void tp_set_program(const char *argv0);
const char *tp_program(void);
/* Runs the program with NULL-terminated args, stdout and stderr into out_path. */
pid_t tp_spawn(const char *const *args, const char *out_path);
/* tp_spawn in a process group of its own (pid = group id), as a shell
 * starts a job: kill(-pid, sig) is a Ctrl-C in its terminal. */
pid_t tp_spawn_group(const char *const *args, const char *out_path);
int tp_wait(pid_t pid);   /* exit code, or 128 + signal */
int tp_run(const char *const *args, const char *out_path);
/* tp_run, and when the exit code is not expect, "  LABEL exited RC:" and the
 * captured output on stderr; a NULL label reads "utrain ARGS[0]". */
int tp_run_shown(const char *const *args, const char *out_path, int expect, const char *label);
/* Appends "--set" TOKEN for each space-separated token of sets (split in
 * place) to argv[0..argc), keeping room for the NULL it ends with; the new
 * count. */
int tp_push_sets(const char **argv, int argc, int cap, char *sets);
/* "dir/name" in one of 16 rotating buffers: use the result at once or copy
 * it (nesting is fine: tp_path(tp_path(a, b), c)). */
const char *tp_path(const char *dir, const char *name);
char *tp_slurp(const char *path);
/* A non-empty file copied whole; false if it could not be. */
bool tp_copy_file(const char *from, const char *to);
/* A run directory RUN_DIR/checkpoints (made if missing) holding a copy of
 * checkpoint FROM under its own name: a run there with continue_training
 * resumes from it. False (and a line on stderr) if it could not be. */
bool tp_plant_checkpoint(const char *from, const char *run_dir);
double tp_now_s(void); /* CLOCK_MONOTONIC, in seconds */
int tp_free_port(void); /* a TCP port nothing listens on now, on the loopback interface */
/* fn(pid, cmdline, len, arg) for every process but this one, cmdline its
 * arguments each ending in a NUL (len bytes); stops at the first nonzero
 * return of fn and returns it (0 when none). */
int tp_each_proc(int (*fn)(pid_t pid, const char *cmdline, size_t len, void *arg), void *arg);
/* Whether one of a cmdline's arguments contains s. */
bool tp_cmdline_has(const char *cmdline, size_t len, const char *s);   /* malloc'd contents, NULL if unreadable */
int tp_count_lines(const char *path);
/* A fresh directory /tmp/<prefix>-XXXXXX into buf; false on failure. */
bool tp_make_tmpdir(char *buf, size_t n, const char *prefix);
/* The end of a test program: removes dir when rc is 0, keeps it (and says
 * so) otherwise; returns rc. */
int tp_finish(int rc, const char *dir);
/* Every tensor of two safetensors files byte for byte equal. */
bool tp_same_weights(const char *a, const char *b);
/* Largest over "model.*" tensors of ||a - b|| / ||a|| (L2); -1 if unreadable. */
double tp_weights_rel_diff(const char *a, const char *b);
/* The same over the tensors whose names start with prefix ("optim."). */
double tp_tensors_rel_diff(const char *a, const char *b, const char *prefix);
/* Environment for jobs under mpirun: OpenMPI as root, oversubscribed ranks
 * that yield when idle, no CMA single copy (containers), shared memory
 * between ranks when shared_memory (else the job's own --mca btl), and no
 * LeakSanitizer (OpenMPI's allocations outlive MPI_Finalize; the library's
 * leaks are checked by the single-process tests). */
void tp_mpi_env(bool shared_memory);
/* DIR/text.bin: the SST-2 sample text tokenized byte by byte (a tokens
 * shard for small GPT-2 runs); its path into shard. */
bool tp_tokenize_sample(const char *dir, char *shard, size_t n);
/* DIR/<split>_inputs.txt and DIR/<split>_targets.txt: the first `most`
 * sentences of data/sst2_sample/<split>.tsv and their first four words, as
 * FlagAI's parallel source/target files (a copying task for seq2seq runs). */
bool tp_write_pairs(const char *dir, const char *split, int most);
/* The "loss" text of metrics.jsonl's line for (split, step). */
bool tp_loss_at(const char *metrics, const char *split, int step, char *out, size_t n);
/* The number after "key": in JSON text s (a results file, a metrics line); NAN if absent. */
double tp_json_number(const char *s, const char *key);
/* Largest |a - b| / |a| over the train losses of steps 1..steps of two
 * metrics.jsonl files (1e9 when a step's loss is missing or not finite). */
double tp_loss_diff(const char *metrics_a, const char *metrics_b, int steps);
/* Whole files byte for byte (false when either is missing). */
bool tp_same_file(const char *a, const char *b);
/* A run of a test directory: writes DIR/NAME.yml (experiment_name NAME,
 * output_dir DIR/runs, seed 5, threads 2, then body: the model, data and
 * train sections) and runs `utrain train` on it with device and nproc and a
 * --set for each space-separated setting of sets, output in DIR/NAME.out
 * (shown on failure); the exit code. */
int tp_train_in(const char *dir, const char *name, const char *body, const char *device, const char *sets,
                int nproc);
/* The same where the run should end with exit code expect (its output is
 * shown when it does not). */
int tp_train_expect(const char *dir, const char *name, const char *body, const char *device, const char *sets,
                    int nproc, int expect);
/* DIR/runs/RUN/LEAF, and DIR/runs/RUN/checkpoints/step_<step>.safetensors
 * (in tp_path's rotating buffers). */
const char *tp_run_file(const char *dir, const char *run, const char *leaf);
const char *tp_ckpt_file(const char *dir, const char *run, int step);
/* Over the tensors whose names start with prefix: the largest ||a - b|| /
 * ||a|| of one tensor (returned; -1 if unreadable, the tensors' shapes
 * differ or one is missing), the same over all of them as one vector into
 * *whole (may be NULL), and the name of the tensor that differs most into
 * worst (n bytes; may be NULL). */
double tp_tensors_diff(const char *a, const char *b, const char *prefix, double *whole, char *worst, size_t n);
#endif
