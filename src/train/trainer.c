/* The training loop: epochs or max_steps, gradient accumulation, clipping,
 * schedules, evaluation, best-checkpoint tracking, early stopping, exact
 * resume and preemption. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "trainer_internal.h"

/* ---- preemption: signals only set a flag; the loop acts at a step boundary ---- */
static volatile sig_atomic_t stop_signal;

static struct timespec first_at;
static int first_sig;
static pid_t first_from;

/* The first signal asks for a stop at the next boundary; a second one
 * (Ctrl-C again) exits at once with 128 + signal and no checkpoint (a save
 * cut short leaves only a temporary file, removed at the next start). One
 * request can reach a rank by several routes at once: a signal to a whole
 * process group or cgroup (systemd, Slurm) arrives directly, through the
 * --nproc launcher and through mpirun. So a second signal within a second
 * of the first counts only when it is the same signal from the same sender
 * (Ctrl-C twice, or the launcher forwarding a second stop). */
static void on_signal(int sig, siginfo_t *info, void *uc) {
    (void)uc;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
    pid_t from = info && info->si_code <= 0 ? info->si_pid : 0; /* 0: the kernel (terminal) */
    if (stop_signal) {
        double since = (double)(now.tv_sec - first_at.tv_sec) + 1e-9 * (double)(now.tv_nsec - first_at.tv_nsec);
        if (since < 1.0 && (sig != first_sig || from != first_from)) return;
        static const char msg[] = "\nutrain: second signal: exiting now, without a checkpoint\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(128 + sig);
    }
    first_at = now;
    first_sig = sig;
    first_from = from;
    stop_signal = sig;
}

/* ---- the --nproc launcher as supervisor ----
 * A rank the launcher started has its pid in UTRAIN_SUPERVISOR. When the
 * launcher is gone (SIGKILL, OOM killer) nobody is left to pass a stop on,
 * and some mpiruns forward nothing, so each rank looks at every step
 * boundary and stops with a checkpoint, as for a stop signal. A pidfd holds
 * the process itself (a reused pid cannot pass for it); kernels without
 * pidfd_open fall back to kill(pid, 0). */
static pid_t supervisor_pid;
static int supervisor_fd = -1;
static bool supervisor_lost;

static void supervisor_open(void) {
    supervisor_pid = 0;
    supervisor_fd = -1;
    supervisor_lost = false;
    const char *v = getenv("UTRAIN_SUPERVISOR");
    char *end;
    long pid = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || pid <= 1) return;
    supervisor_pid = (pid_t)pid;
#ifdef SYS_pidfd_open
    supervisor_fd = (int)syscall(SYS_pidfd_open, supervisor_pid, 0);
    if (supervisor_fd < 0 && errno == ESRCH) supervisor_lost = true; /* gone before we looked */
#endif
}

static void supervisor_close(void) {
    if (supervisor_fd >= 0) close(supervisor_fd);
    supervisor_fd = -1;
}

/* Whether the launcher has ended (checked once per step: one poll). */
static bool supervisor_gone(void) {
    if (supervisor_lost || supervisor_pid <= 0) return supervisor_lost;
    if (supervisor_fd >= 0) {
        struct pollfd p = {.fd = supervisor_fd, .events = POLLIN};
        supervisor_lost = poll(&p, 1, 0) > 0; /* readable once the process has exited */
    } else {
        supervisor_lost = kill(supervisor_pid, 0) < 0 && errno == ESRCH;
    }
    return supervisor_lost;
}

typedef struct {
    struct sigaction term, usr1, intr;
    sigset_t mask;
} saved_signals;

static void catch_signals(saved_signals *old) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask); /* one handler at a time */
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGUSR1);
    sigaddset(&sa.sa_mask, SIGINT);
    stop_signal = 0;
    sigaction(SIGTERM, &sa, &old->term);
    sigaction(SIGUSR1, &sa, &old->usr1);
    sigaction(SIGINT, &sa, &old->intr);
    /* a caller may hold them blocked until now (the CLI's ranks do): a stop
     * that came early is handled here, at the first step */
    pthread_sigmask(SIG_UNBLOCK, &sa.sa_mask, &old->mask);
}

/* A rank of the --nproc launcher (a supervisor) gets each stop by two routes
 * (mpirun's forwarding and the launcher's own): a copy that comes after the
 * trainer is done must not end the rank, and the threads made meanwhile (the
 * communicators', a device's streams, OpenMP's) have SIGUSR1 unblocked, so
 * re-blocking it on this thread is not enough: such a rank ignores it from
 * here on, whichever thread it reaches. */
static void restore_signals(const saved_signals *old) {
    pthread_sigmask(SIG_SETMASK, &old->mask, NULL);
    sigaction(SIGTERM, &old->term, NULL);
    if (supervisor_pid > 0 && old->usr1.sa_handler == SIG_DFL && !(old->usr1.sa_flags & SA_SIGINFO)) {
        struct sigaction ign;
        memset(&ign, 0, sizeof ign);
        ign.sa_handler = SIG_IGN;
        sigaction(SIGUSR1, &ign, NULL);
    } else {
        sigaction(SIGUSR1, &old->usr1, NULL);
    }
    sigaction(SIGINT, &old->intr, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}



static double accum_metric(const accum *a, const char *name) {
    for (int i = 0; i < a->nmets; i++)
        if (!strcmp(a->mets[i].name, name) && a->mets[i].count > 0) return a->mets[i].sum / a->mets[i].count;
    return NAN;
}

/* Sums an accumulator over ranks (every rank calls it at the same step). The
 * metric names line up because every rank runs the same hooks in the same
 * order. */
static int accum_reduce(ut_trainer *t, accum *a) {
    if (t->dworld == 1) return 0;
    double v[4 + 2 * UT_MAX_METRICS] = {a->loss_sum, (double)a->examples, (double)a->tokens, a->loss_w};
    for (int i = 0; i < a->nmets; i++) v[4 + 2 * i] = a->mets[i].sum, v[5 + 2 * i] = a->mets[i].count;
    if (ut_comm_allreduce_f64(t->dcomm, v, 4 + 2 * UT_MAX_METRICS)) {
        snprintf(t->err, sizeof t->err, "reducing metrics over ranks: %s", ut_comm_error(t->dcomm));
        return -1;
    }
    a->loss_sum = v[0], a->examples = (int64_t)v[1], a->tokens = (int64_t)v[2], a->loss_w = v[3];
    for (int i = 0; i < a->nmets; i++) a->mets[i].sum = v[4 + 2 * i], a->mets[i].count = v[5 + 2 * i];
    return 0;
}

/* ---- set-up ---- */
/* An interval given as a count per epoch, the seed's log_steps_ratio and
 * save_steps_ratio: steps per epoch / ratio ("100 steps and a ratio of 10
 * log every 10 steps"), rounded, at least 1. */
static int64_t ratio_steps(double ratio, int64_t steps_per_epoch) {
    int64_t k = (int64_t)((double)steps_per_epoch / ratio + 0.5);
    return k > 0 ? k : 1;
}

/* An interval given as a fraction of the run's steps (transformers'
 * logging_steps, eval_steps, save_steps under 1): ceil(fraction x total
 * steps), as the Trainer computes it, at least 1. */
static int64_t fraction_steps(double fraction, int64_t total_steps) {
    int64_t k = (int64_t)ceil(fraction * (double)total_steps);
    return k > 0 ? k : 1;
}

/* optim.schedule plateau or greedy: the rate before any evaluation */
static void start_rate_by_evals(ut_trainer *t) {
    t->st.plateau = true;
    t->st.greedy = t->plateau.greedy;
    ut_plateau_init(&t->plateau, t->cfg->lr, &t->st.plateau_state);
}

static int set_schedule(ut_trainer *t) {
    const ut_config *c = t->cfg;
    ut_sched_kind kind;
    if (ut_sched_parse(c->schedule, &kind)) {
        snprintf(t->err, sizeof t->err, "optim.schedule: unknown schedule '%s'", c->schedule);
        return -1;
    }
    double min_lr = c->min_lr_ratio > 0 ? c->min_lr_ratio * c->lr : c->min_lr;
    /* FlagAI's AnnealingLR counts iterations (micro-batches), warmup and horizon included */
    int64_t per = kind == UT_SCHED_ANNEALING ? t->accum_steps : 1;
    int64_t total = c->schedule_steps > 0 ? c->schedule_steps : t->total_steps * per;
    /* a ratio's steps rounded down, or up as transformers' get_warmup_steps (warmup_from_zero) */
    double wr = c->warmup_ratio * (double)(t->total_steps * per);
    t->sched = (ut_schedule){.kind = kind, .lr = (float)c->lr, .min_lr = (float)min_lr,
                             .warmup_steps = c->warmup_ratio > 0 ? (int64_t)(c->warmup_from_zero ? ceil(wr) : wr)
                                                                 : c->warmup_steps,
                             .total_steps = total, .micro = per, .warmup_zero = c->warmup_from_zero,
                             .step_size = c->step_size, .gamma = (float)c->gamma,
                             .warmup_log = !strcmp(c->warmup_type, "log"),
                             .warmup_min_ratio = (float)c->warmup_min_ratio,
                             .cycles = (float)c->num_cycles, .power = (float)c->power,
                             .timescale = c->timescale, .decay_steps = c->decay_steps,
                             .decay = !strcmp(c->decay_type, "linear")   ? UT_DECAY_LINEAR
                                      : !strcmp(c->decay_type, "1-sqrt") ? UT_DECAY_SQRT
                                                                         : UT_DECAY_COSINE};
    char why[256];
    if (ut_schedule_check(&t->sched, why, sizeof why)) {
        snprintf(t->err, sizeof t->err, "optim.schedule: %s", why);
        return -1;
    }
    if (kind == UT_SCHED_PLATEAU) /* the evaluations' rate: mode auto follows train.greater_is_better */
        t->plateau = (ut_plateau){.max = !strcmp(c->plateau_mode, "max") ||
                                         (!strcmp(c->plateau_mode, "auto") && c->greater_is_better),
                                  .abs = !strcmp(c->plateau_threshold_mode, "abs"), .factor = c->plateau_factor,
                                  .patience = c->plateau_patience, .threshold = c->plateau_threshold,
                                  .cooldown = c->plateau_cooldown, .min_lr = min_lr, .eps = c->plateau_eps};
    else if (kind == UT_SCHED_GREEDY)
        t->plateau = (ut_plateau){.max = !strcmp(c->greedy_mode, "max") ||
                                         (!strcmp(c->greedy_mode, "auto") && c->greater_is_better),
                                  .abs = !strcmp(c->greedy_threshold_mode, "abs"), .factor = c->greedy_factor,
                                  .patience = c->greedy_patience, .threshold = c->greedy_threshold,
                                  .cooldown = c->greedy_cooldown, .min_lr = min_lr, .eps = c->greedy_eps,
                                  .greedy = true, .warmup = c->greedy_warmup, .max_lr = c->greedy_max_lr,
                                  .window = c->greedy_smooth ? c->greedy_window_size : 0,
                                  .reset_start = c->greedy_reset_start};
    else
        return 0;
    if (ut_plateau_check(&t->plateau, why, sizeof why)) {
        snprintf(t->err, sizeof t->err, "optim.schedule %s: %s", c->schedule, why);
        return -1;
    }
    start_rate_by_evals(t);
    return 0;
}

/* How ranks exchange the model's device memory (dist.device_comm): set up
 * on the data-parallel group, and on the tensor-parallel group of a split
 * model (each collective over its group, every rank in this order). path:
 * the data-parallel group's, for the log. */
static int setup_device_comm(ut_trainer *t, char *path, size_t pn) {
    ut_devcomm_mode mode = UT_DEVCOMM_AUTO;
    ut_devcomm_parse(t->cfg->device_comm, &mode);
    ut_device dev = t->m->params.device;
    if (ut_comm_device_setup(t->dcomm, dev, mode, path, pn, t->err, sizeof t->err)) return -1;
    if (t->have_mesh && t->tp > 1) {
        char tpp[640];
        if (ut_comm_device_setup(t->mesh.tp_group, dev, mode, tpp, sizeof tpp, t->err, sizeof t->err)) return -1;
        if (t->rank == 0 && !ut_backend_get(dev)->host_memory)
            ut_say(&t->log, "Tensor-parallel sums (device %s): %s\n", ut_backend_get(dev)->name, tpp);
    }
    return 0;
}

/* The ranks of this rank's host among the data-parallel group's (the same
 * count on every host, each host's ranks consecutive), or -1 (t->err). */
static int ranks_per_host(ut_trainer *t) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    int64_t h = 1469598103934665603LL & INT64_MAX; /* FNV-1a of the name, kept positive */
    for (const char *s = host; *s; s++) h = ((h ^ (unsigned char)*s) * 1099511628211LL) & INT64_MAX;
    int64_t *all = ut_calloc_check((size_t)t->dworld, sizeof *all);
    all[t->drank] = h;
    if (ut_comm_allreduce_i64(t->dcomm, all, t->dworld)) {
        snprintf(t->err, sizeof t->err, "dist.shard_size -1: the ranks' hosts: %s", ut_comm_error(t->dcomm));
        ut_free(all);
        return -1;
    }
    int per = 1;
    while (per < t->dworld && all[per] == all[0]) per++;
    bool even = t->dworld % per == 0; /* runs of per ranks, each on a host other than the run's before */
    for (int r = per; even && r < t->dworld; r++) even = r % per ? all[r] == all[r - 1] : all[r] != all[r - 1];
    ut_free(all);
    if (!even) {
        snprintf(t->err, sizeof t->err, "dist.shard_size -1 (a shard group per node): the ranks are not %d to a "
                 "host in consecutive runs; give the group's size instead (dist.shard_size: N)", per);
        return -1;
    }
    return per;
}

/* dist.shard_size: this rank's shard group (S consecutive data-parallel
 * ranks) and the replicas of its shard (the ranks at its place in the other
 * groups); nothing when S is every rank. */
static int hybrid_groups(ut_trainer *t) {
    int S = t->cfg->shard_size;
    if (!S || t->dworld == 1) return 0;
    if (S < 0 && (S = ranks_per_host(t)) < 0) return -1;
    if (S > t->dworld || t->dworld % S) {
        snprintf(t->err, sizeof t->err, "dist.shard_size: %d does not divide the %d data-parallel ranks into "
                 "shard groups; give a divisor of %d", S, t->dworld, t->dworld);
        return -1;
    }
    if (S == t->dworld) {
        if (t->cfg->shard_size < 0)
            ut_say(&t->log, "Hybrid sharding (dist.shard_size -1): every data-parallel rank is on one host, so one "
                            "shard group of %d ranks (plain %s)\n", S, t->cfg->dist_strategy);
        return 0;
    }
    char why[512];
    if (!(t->shard_group = ut_comm_split(t->dcomm, t->drank / S, t->drank, "shard", why, sizeof why)) ||
        !(t->replicas = ut_comm_split(t->dcomm, t->drank % S, t->drank, "replicas", why, sizeof why))) {
        snprintf(t->err, sizeof t->err, "hybrid sharding's groups: %s", why);
        return -1;
    }
    ut_devcomm_mode mode = UT_DEVCOMM_AUTO;
    ut_devcomm_parse(t->cfg->device_comm, &mode);
    char sp[640], rp[640];
    ut_device dev = t->m->params.device;
    if (ut_comm_device_setup(t->shard_group, dev, mode, sp, sizeof sp, t->err, sizeof t->err) ||
        ut_comm_device_setup(t->replicas, dev, mode, rp, sizeof rp, t->err, sizeof t->err))
        return -1;
    ut_say(&t->log, "Hybrid sharding: %s over %d groups of %d ranks (the model state sharded within a group, "
           "replicated across them); each step's gradient shard summed across the %d replicas after backward\n",
           t->cfg->dist_strategy, t->dworld / S, S, t->dworld / S);
    if (!ut_backend_get(dev)->host_memory)
        ut_say(&t->log, "  within a group (device %s): %s; across groups: %s\n", ut_backend_get(dev)->name, sp, rp);
    return 0;
}

static int set_optimizer(ut_trainer *t) {
    const ut_config *c = t->cfg;
    ut_optim_kind kind;
    if (ut_optim_parse(c->optim_name, &kind)) {
        snprintf(t->err, sizeof t->err, "optim.name: unknown optimizer '%s'", c->optim_name);
        return -1;
    }
    ut_optim_config oc = ut_optim_defaults(kind);
    oc.lr = (float)c->lr;
    oc.weight_decay = (float)c->weight_decay;
    oc.beta1 = (float)c->beta1;
    oc.beta2 = (float)c->beta2;
    oc.eps = (float)c->eps;
    oc.momentum = (float)c->momentum;
    oc.dampening = (float)c->dampening;
    oc.nesterov = c->nesterov;
    if (kind == UT_OPTIM_ADAFACTOR) {
        oc.beta1 = (float)c->adafactor_beta1;
        oc.eps = (float)c->adafactor_eps1;
        oc.eps2 = (float)c->adafactor_eps2;
        oc.clip_threshold = (float)c->adafactor_clip;
        oc.decay_rate = (float)c->adafactor_decay_rate;
        oc.scale_parameter = c->adafactor_scale_parameter;
        oc.relative_step = c->adafactor_relative_step;
        oc.warmup_init = c->adafactor_warmup_init;
    }
    char why[256];
    if (ut_optim_check_config(&oc, why, sizeof why)) {
        snprintf(t->err, sizeof t->err, "optim: %s", why);
        return -1;
    }
    ut_dist_opts dopts = {.bucket_mb = c->bucket_mb, .wrap = c->dist_wrap,
                          .reshard_after_forward = c->reshard_after_forward,
                          .offload_optimizer = !strcmp(c->offload_optimizer, "cpu"),
                          .comm_hook = !strcmp(c->comm_hook, "bf16")   ? UT_BF16
                                       : !strcmp(c->comm_hook, "fp16") ? UT_F16
                                                                       : UT_F32};
    if (ut_dist_parse(c->dist_strategy, &dopts.kind)) {
        snprintf(t->err, sizeof t->err, "dist.strategy: unknown strategy '%s'", c->dist_strategy);
        return -1;
    }
    if (dopts.kind == UT_DIST_DP) dopts.kind = UT_DIST_DDP; /* one process: the master's optimizer */
    char path[640];
    if (setup_device_comm(t, path, sizeof path) || hybrid_groups(t)) return -1;
    dopts.replicas = t->replicas;
    t->dist = ut_dist_new(t->shard_group ? t->shard_group : t->dcomm, t->m, &oc, &dopts, t->err, sizeof t->err);
    if (!t->dist) return -1;
    const ut_backend *be = ut_backend_get(t->m->params.device);
    bool direct = ut_comm_direct(t->dcomm, t->m->params.device);
    if (t->dworld > 1 && t->rank == 0 && !be->host_memory && direct)
        ut_say(&t->log, "Communication between ranks (device %s): %s; each gradient bucket is %s on the "
               "device's memory, on the communicator's stream, as backward completes it%s; small values (losses, "
               "norms) and checkpoints go through host memory\n", be->name, path,
               dopts.kind == UT_DIST_DDP || dopts.kind == UT_DIST_ZERO1 ? "all-reduced" : "reduce-scattered",
               dopts.kind == UT_DIST_DDP ? "" : ", and the parameters are gathered there too");
    if (t->dworld > 1 && t->rank == 0 && !be->host_memory && !direct)
        ut_say(&t->log, "Communication between ranks (device %s): %s (%s): "
               "each gradient bucket is copied into page-locked host memory on a communication stream "
               "while backward goes on, and back before the optimizer step;%s other collectives are staged "
               "through host memory when they start\n",
               be->name, ut_comm_backend(t->dcomm), path,
               dopts.kind == UT_DIST_DDP ? ""
                                         : " parameters are gathered through a page-locked host copy of the "
                                           "parameters (this rank's shard copied down once per step, the "
                                           "results uploaded without a wait);");
    t->o = ut_dist_optim(t->dist);
    ut_dist_attach(t->dist, t->ctx);
    return 0;
}

/* What a checkpoint must agree with to be resumed: the hashed configuration
 * keys and the global batch (examples per optimizer step), so a run may go on
 * with another world size, per-process batch or accumulation, and another
 * strategy, as long as each step sees the same examples. */
static uint64_t run_hash(const ut_trainer *t) {
    uint64_t g = (uint64_t)(t->cfg->batch_size * t->dworld * t->ndp * t->accum_steps);
    uint64_t h = ut_config_hash(t->cfg) ^ (g * 0x9e3779b97f4a7c15ULL);
    return h ^ (h >> 29);
}

/* An optimizer over the whole flat buffer, for reading a checkpoint. */
static ut_optim *full_optimizer(ut_trainer *t) {
    ut_params *p = &t->m->params;
    return ut_optim_new(ut_optim_get_config(t->o), p->flat, p->flat_grad, p->segs, p->n, 0,
                        p->numel);
}

/* What ut_ckpt_load cannot check alone: the step in the file name and the
 * data cursor against this run's training set. */
static int check_resume_state(const ut_trainer *t, const char *path, int64_t name_step,
                              const ut_train_state *st, char *err, size_t n) {
    if (st->step != name_step)
        return ut_errorf(err, n, "%s: metadata \"train.step\" is %lld but the file name says step %lld",
                         path, (long long)st->step, (long long)name_step);
    if (st->cursor > t->train->n)
        return ut_errorf(err, n, "%s: metadata \"train.cursor\" is %lld, past the end of the epoch "
                         "(the training set has %lld examples)", path, (long long)st->cursor,
                         (long long)t->train->n);
    return 0;
}

/* The global batch and the total step count must fit in 64 bits (the
 * schema bounds each key; their products are checked here). */
static int check_counts(ut_trainer *t) {
    const ut_config *c = t->cfg;
    int64_t g;
    if (__builtin_mul_overflow(c->batch_size, (int64_t)t->dworld * t->ndp, &g) ||
        __builtin_mul_overflow(g, t->accum_steps, &g))
        return ut_errorf(t->err, sizeof t->err, "the global batch train.batch_size %lld x %d processes x "
                         "train.gradient_accumulation_steps %lld is too large to count",
                         (long long)c->batch_size, t->dworld * t->ndp, (long long)t->accum_steps);
    if (c->max_steps <= 0 && c->epochs * (double)t->steps_per_epoch > 9e15)
        return ut_errorf(t->err, sizeof t->err, "train.epochs %g x %lld steps per epoch is too large to "
                         "count: use train.max_steps", c->epochs, (long long)t->steps_per_epoch);
    return 0;
}

/* A save killed midway (kill -9, power loss) leaves a full-size temporary
 * file: removed at start-up when its writer is gone. */
static void clean_stale_temp(ut_trainer *t) {
    char dir[1280];
    snprintf(dir, sizeof dir, "%s/checkpoints", t->log.dir);
    int k = ut_ckpt_clean_temp(dir);
    if (k > 0)
        ut_say(&t->log, "Removed %d temporary checkpoint file%s left by an interrupted save in %s\n", k,
               k == 1 ? "" : "s", dir);
}

/* Resumes from the newest checkpoint that loads; a corrupt one is reported
 * and the one before it tried. Returns 1 if resumed, 0 if none, -1 on error. */
static int resume(ut_trainer *t) {
    char dir[1280], path[1400];
    snprintf(dir, sizeof dir, "%s/checkpoints", t->log.dir);
    int64_t steps[256];
    int n = ut_ckpt_list(dir, steps, 256);
    for (int i = 0; i < n; i++) {
        ut_ckpt_path(path, sizeof path, dir, steps[i]);
        if (ut_ckpt_model_only(path)) { /* not a step back to an older one: that would drop the steps since */
            snprintf(t->err, sizeof t->err,
                     "%s holds the model's weights alone (written with train.save_only_model: true), not the "
                     "optimizer state and data position a run resumes with; start a new run from its weights with "
                     "load_dir: %s (and continue_training: false)", path, path);
            return -1;
        }
        char why[1024];
        ut_train_state st;
        /* a sharded strategy on a whole model reads its own range of the
         * state; on a split model it reads the state of its part, then keeps
         * its range of that */
        bool sharded = ut_dist_kind_of(t->dist) != UT_DIST_DDP, shards = sharded && !split_model(t) && t->world > 1;
        ut_optim *o = sharded && !shards ? full_optimizer(t) : t->o;
        int lrc = split_model(t) ? ut_split_load(t, path, o, &st, why, sizeof why)
                  : shards       ? ut_shard_load(t, path, &st, why, sizeof why)
                                 : ut_ckpt_load(path, t->m, o, &st, why, sizeof why);
        if ((split_model(t) || shards) && ut_split_agree(t, &lrc, why, sizeof why)) {
            if (o != t->o) ut_optim_free(o);
            return -1;
        }
        if (!lrc && sharded) ut_dist_load_full(t->dist, shards ? NULL : o);
        if (o != t->o) ut_optim_free(o);
        if (!lrc) lrc = check_resume_state(t, path, steps[i], &st, why, sizeof why);
        if (lrc) {
            ut_say(&t->log, "warning: cannot resume from %s: %s\n", path, why);
            continue;
        }
        if (st.config_hash != run_hash(t)) {
            snprintf(t->err, sizeof t->err,
                     "%s was written by a run with a different configuration (hash %016llx, this "
                     "one %016llx): resume needs the same model, data and optimizer settings and "
                     "the same global batch (this run's: %lld = batch_size %lld x %d processes x "
                     "%lld accumulation steps)",
                     path, (unsigned long long)st.config_hash, (unsigned long long)run_hash(t),
                     (long long)(t->cfg->batch_size * t->dworld * t->ndp * t->accum_steps),
                     (long long)t->cfg->batch_size, t->dworld * t->ndp, (long long)t->accum_steps);
            return -1;
        }
        t->st = st;
        bool by_evals = t->sched.kind == UT_SCHED_PLATEAU || t->sched.kind == UT_SCHED_GREEDY;
        if (!by_evals) t->st.plateau = t->st.greedy = false;
        else if (!st.plateau || st.greedy != t->plateau.greedy)
            start_rate_by_evals(t); /* a checkpoint without (this schedule's) evaluation state */
        else t->st.plateau_state.lr0 = t->cfg->lr;    /* what greedy's reset goes back to */
        if (t->fp16 && st.loss_scale > 0) { /* else (from an fp32/bf16 run) init_scale */
            t->scaler.scale = (float)st.loss_scale;
            t->scaler.growth_tracker = st.scale_growth_tracker;
            /* a checkpoint without it had a full hysteresis (or none) */
            if (st.scale_hysteresis > 0 && st.scale_hysteresis <= t->scaler.hysteresis)
                t->scaler.hysteresis_left = st.scale_hysteresis;
        }
        ut_say(&t->log, "Resuming from %s (step %lld, epoch %lld, %lld examples into the epoch)\n",
               path, (long long)st.step, (long long)st.epoch, (long long)st.cursor);
        t->last_saved_step = st.step;
        return ut_runlog_rewind(&t->log, st.step, t->err, sizeof t->err) ? -1 : 1;
    }
    if (n > 0) {
        snprintf(t->err, sizeof t->err, "%s: no checkpoint could be loaded (see the warnings above)", dir);
        return -1;
    }
    return 0;
}

/* load_dir: start from another run's weights (fine-tuning): a run directory
 * or its checkpoints/ folder (the best checkpoint, or with load_type: latest
 * the newest), or one checkpoint file; the optimizer, schedule and data
 * position start fresh. */
static int load_initial_weights(ut_trainer *t) {
    char dir[1280], path[1400];
    const char *from = t->cfg->load_dir;
    struct stat sb;
    int64_t step;
    if (stat(from, &sb)) {
        snprintf(t->err, sizeof t->err, "load_dir: %s: %s (a run directory, its checkpoints/ folder or a "
                                        "checkpoint file)", from, strerror(errno));
        return -1;
    }
    bool file = S_ISREG(sb.st_mode);
    if (file) snprintf(path, sizeof path, "%s", from);
    else if (ut_ckpt_list(from, &step, 1) > 0) snprintf(dir, sizeof dir, "%s", from); /* a checkpoints/ folder */
    else snprintf(dir, sizeof dir, "%s/checkpoints", from);
    bool latest = !strcmp(t->cfg->load_type, "latest");
    if (!file && latest && ut_ckpt_list(dir, &step, 1) <= 0) {
        snprintf(t->err, sizeof t->err, "load_dir: %s: no checkpoints (train first, or name one)", dir);
        return -1;
    }
    if (!file && latest) ut_ckpt_path(path, sizeof path, dir, step);
    if (!file && !latest && ut_best_checkpoint(dir, NULL, path, sizeof path, t->err, sizeof t->err)) return -1;
    if (split_model(t)) {
        char why[1024];
        int lrc = ut_split_load(t, path, NULL, NULL, why, sizeof why);
        if (ut_split_agree(t, &lrc, why, sizeof why)) return -1;
        if (lrc) {
            snprintf(t->err, sizeof t->err, "%s", why);
            return -1;
        }
    } else if (ut_ckpt_load(path, t->m, NULL, NULL, t->err, sizeof t->err)) {
        return -1;
    }
    ut_dist_load_full(t->dist, NULL);
    ut_say(&t->log, "Initial weights from %s\n", path);
    return 0;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void print_summary(ut_trainer *t) {
    const ut_config *c = t->cfg;
    int world = t->dworld;
    ut_say(&t->log, "***** Running training *****\n");
    ut_say(&t->log, "  Num examples = %lld\n", (long long)t->train->n);
    if (c->max_steps > 0) ut_say(&t->log, "  Max steps = %lld\n", (long long)c->max_steps);
    else ut_say(&t->log, "  Num epochs = %g\n", c->epochs);
    ut_say(&t->log, "  Batch size per process = %lld\n", (long long)c->batch_size);
    ut_say(&t->log, "  Total train batch size (w. parallel, distributed & accumulation) = %lld\n",
           (long long)(c->batch_size * world * t->ndp * t->accum_steps));
    ut_say(&t->log, "  Gradient accumulation steps = %lld\n", (long long)t->accum_steps);
    ut_say(&t->log, "  Total optimization steps = %lld\n", (long long)t->total_steps);
    /* a split model's: the whole model's (HF's count), each stage's part below */
    ut_say(&t->log, "  Number of trainable parameters = %lld\n",
           (long long)(split_model(t) ? ut_split_whole_numel(t) : t->m->params.numel));
    if (c->adafactor_relative_step) /* its own rate: optim.lr is not used */
        ut_say(&t->log, "  Model = %s, optimizer = adafactor (relative step: lr min(%s, 1/sqrt(step))), threads = %d\n",
               c->model_name, c->adafactor_warmup_init ? "1e-6 x step" : "1e-2", omp_get_max_threads());
    else
        ut_say(&t->log, "  Model = %s, optimizer = %s (lr %g, schedule %s), threads = %d\n", c->model_name,
               c->optim_name, c->lr, c->schedule, omp_get_max_threads());
    if (c->checkpoint_activations)
        ut_say(&t->log, "  Activation checkpointing = on (each block's activations are recomputed in backward)\n");
    if (c->ds_tuning[0])
        ut_say(&t->log, "  DeepSpeed tuning that changes nothing here (utrain's own transfers and memory layout; "
                        "docs/config.md): %s\n", c->ds_tuning);
    char took[800];
    if (*ut_config_defaults_text(c, UT_CFG_DEFAULTS_HF, took, sizeof took))
        ut_say(&t->log, "  TrainingArguments' defaults (a file of its fields that does not say otherwise): %s\n",
               took);
    if (*ut_config_defaults_text(c, UT_CFG_DEFAULTS_FLAGAI, took, sizeof took))
        ut_say(&t->log, "  FlagAI's Trainer defaults (a file of its arguments that does not say otherwise): %s\n",
               took);
    if (c->seed_recipe[0])
        ut_say(&t->log, "  The seed's recipe (a parameters.yml layout that does not say otherwise): %s\n",
               c->seed_recipe);
    if (strcmp(c->precision, "fp32"))
        ut_say(&t->log, "  Precision = %s (autocast: matmuls, convolutions, attention in %s with fp32 "
                        "accumulation, activations stored in %s; fp32 master weights)%s\n"
                        "  %s matmul: %s\n",
               c->precision, c->precision, c->precision,
               !t->fp16                                 ? ""
               : !strcmp(c->schedule_on_skip, "hold") ? ", dynamic loss scaling (a skipped step holds the schedule)"
                                                        : ", dynamic loss scaling (a skipped step advances the schedule)",
               c->precision, ut_autocast_matmul_path(ut_ctx_device(t->ctx), ut_run_precision(c)));
    const char *attn = ut_attention_path(ut_ctx_device(t->ctx), ut_run_precision(c));
    if (attn) ut_say(&t->log, "  Attention = %s\n", attn);
    if (t->peak_all > 0)
        ut_say(&t->log, "  MFU = the products' model FLOPs over %.4g TFLOP/s%s (%s)\n", t->peak_all * 1e-12,
               t->world > 1 ? ", all ranks' peaks" : "", t->peak_what);
    else ut_note(&t->log, "  MFU: not logged (%s)\n", t->peak_what);
    if (t->fp16 && (c->loss_scale_hysteresis > 1 || c->min_loss_scale > 0))
        ut_say(&t->log, "  Loss scale: from %g, x2 after %lld clean steps, halved at an overflow no lower than %g, "
                        "%lld overflow%s tolerated first (DeepSpeed's hysteresis%s)\n",
               c->init_scale, (long long)c->growth_interval, c->min_loss_scale,
               (long long)c->loss_scale_hysteresis - 1, c->loss_scale_hysteresis == 2 ? "" : "s",
               c->consecutive_hysteresis ? ", restored by every clean step" : "");
    if (c->group_by_length)
        ut_say(&t->log, "  Batches grouped by length (data.group_by_length: megabatches of %lld examples, each "
                        "longest first; the epoch's longest batch first)\n", (long long)t->sampler.megabatch);
    if (c->save_only_model)
        ut_say(&t->log, "  Checkpoints = the weights alone (train.save_only_model: no run resumes from them; a stop "
                        "signal's checkpoint is whole)\n");
    if (ut_run_eval_precision(c) != ut_run_precision(c))
        ut_say(&t->log, "  Evaluation precision = %s (train.eval_precision)\n", c->eval_precision);
    if (c->label_smoothing > 0)
        ut_say(&t->log, "  Label smoothing = %g (the cross-entropy and NLL losses, in evaluation too)\n",
               c->label_smoothing);
    if (c->neftune_alpha > 0)
        ut_say(&t->log, "  NEFTune = alpha %g (training: uniform noise of alpha / sqrt(L d) on the token embeddings)\n",
               c->neftune_alpha);
    if (c->tf32)
        ut_say(&t->log, "  TF32 = on (train.tf32: float32 products on the tensor cores, operands rounded to 10 "
                        "mantissa bits, float32 accumulation)\n");
    if (t->ndp > 1)
        ut_say(&t->log, "  DataParallel workers = %d (one process, a replica and a share of each batch per worker)\n",
               t->ndp);
    if (t->tp > 1)
        ut_say(&t->log, "  Tensor parallel = %d ranks per model (Megatron-LM split%s; %lld of the model's %lld "
                        "parameters on each rank), %d data-parallel ranks\n",
               t->tp, t->m->seq_parallel ? ", sequence parallel" : "", (long long)t->m->params.numel,
               (long long)ut_split_whole_numel(t), world);
    if (t->pp > 1) {
        ut_say(&t->log, "  Pipeline parallel = %d stages (blocks %s), %s schedule, %lld micro-batches per step\n",
               t->pp, t->cfg->pipeline_blocks[0] ? t->cfg->pipeline_blocks : "balanced by compute",
               t->gpipe ? "GPipe" : "1F1B", (long long)t->accum_steps);
        ut_note(&t->log, "  this rank: stage %d of %d, blocks %lld to %lld, %lld parameters%s\n", t->mesh.pp_rank,
                t->pp, (long long)t->m->pp_b0, (long long)t->m->pp_b1 - 1, (long long)t->m->params.numel,
                t->tp > 1 ? " (its tensor-parallel part)" : "");
    }
    if (world > 1)
        ut_say(&t->log, "  %s = %d (%s, %s backend, %d gradient buckets)\n",
               split_model(t) ? "Data-parallel processes" : "Processes", world,
               ut_dist_name(ut_dist_kind_of(t->dist)), ut_comm_backend(t->comm), ut_dist_nbuckets(t->dist));
}

/* ---- checkpoints ---- */
static int save_now(ut_trainer *t);

/* Evaluations and checkpoint writes inside a logging interval are left out
 * of its samples_per_s: the interval's clock moves on by their duration. */
static int save(ut_trainer *t) {
    double t0 = now_s();
    int rc = save_now(t);
    t->interval_t0 += now_s() - t0;
    return rc;
}

static int flush_tokens_seen(ut_trainer *t);
static double process_flops(const ut_trainer *t);

static int save_now(ut_trainer *t) {
    /* train.save_only_model: the weights alone, except when a stop signal
     * asks for the checkpoint the run resumes from */
    bool model_only = t->cfg->save_only_model && !t->stopping;
    if (t->last_saved_step == t->st.step && (model_only || !t->last_saved_model_only)) return 0;
    if (flush_tokens_seen(t)) return -1;
    char dir[1280], path[1400];
    snprintf(dir, sizeof dir, "%s/checkpoints", t->log.dir);
    ut_ckpt_path(path, sizeof path, dir, t->st.step);
    ut_ctx_rng_get(t->ctx, t->st.rng);
    t->st.config_hash = run_hash(t);
    t->st.loss_scale = t->fp16 ? t->scaler.scale : 0;
    t->st.scale_growth_tracker = t->fp16 ? t->scaler.growth_tracker : 0;
    t->st.scale_hysteresis = t->fp16 && t->scaler.hysteresis > 1 ? t->scaler.hysteresis_left : 0;
    t->last_saved_step = t->st.step;
    t->last_saved_model_only = model_only;
    /* a sharded strategy on a whole model streams its shards to rank 0; on a
     * split model it gathers the state of its part first (every rank takes
     * part); the weights alone are whole on every rank once gathered */
    bool sharded = ut_dist_kind_of(t->dist) != UT_DIST_DDP;
    bool shards = sharded && !split_model(t) && t->world > 1 && !model_only;
    ut_optim *o = model_only ? NULL : t->o;
    if (sharded && (ut_dist_gather_params(t->dist) || (o && !shards && !(o = ut_dist_full_optim(t->dist))))) {
        snprintf(t->err, sizeof t->err, "gathering the state for a checkpoint: %s", ut_comm_error(t->comm));
        return -1;
    }
    int rc = shards           ? ut_shard_save(t, path)
             : split_model(t) ? ut_split_save(t, path, o, &t->st)
             : t->rank == 0   ? ut_ckpt_save(path, t->m, o, &t->st, t->err, sizeof t->err)
                              : 0;
    if (o && o != t->o) ut_optim_free(o);
    ut_dist_release(t->dist);
    if (t->world > 1) { /* rank 0 writes it; no rank goes on as if it were written unless it was */
        int64_t failed = rc != 0;
        if (ut_comm_allreduce_i64(t->comm, &failed, 1)) {
            snprintf(t->err, sizeof t->err, "confirming checkpoint %s: %s", path, ut_comm_error(t->comm));
            return -1;
        }
        if (failed && t->rank != 0 && !rc) {
            snprintf(t->err, sizeof t->err, "checkpoint %s was not written (rank 0's log says why)", path);
            return -1;
        }
    }
    if (t->rank != 0 || rc) return rc;
    char why[512];
    if (ut_ckpt_prune(dir, (int)t->cfg->save_total_limit, t->st.best_step, why, sizeof why))
        ut_say(&t->log, "warning: pruning checkpoints: %s\n", why);
    return 0;
}

/* ---- evaluation, best metric, early stopping ---- */
static bool agree_on_stop(ut_trainer *t);
static bool stop_asked(void *t) { return agree_on_stop(t); }

/* optim.schedule plateau or greedy: the evaluation's train.best_metric (a
 * dev metric, config_check.c) moves the rate, on every rank alike (res is
 * the same on all of them), before the best checkpoint is written, so that
 * its state is in it; a metric the evaluation lacks is an error, as in
 * transformers' Trainer. */
static int plateau_step(ut_trainer *t, const ut_eval_result *res) {
    const char *name = t->cfg->best_metric + 4;
    int i = 0;
    while (i < res->n && strcmp(res->names[i], name)) i++;
    if (i == res->n) {
        char have[256];
        size_t k = 0;
        have[0] = 0;
        for (int j = 0; j < res->n && k < sizeof have; j++)
            k += (size_t)snprintf(have + k, sizeof have - k, "%sdev/%s", j ? ", " : "", res->names[j]);
        snprintf(t->err, sizeof t->err, "optim.schedule %s: train.best_metric %s is not among the "
                                        "evaluation's metrics (%s)", t->cfg->schedule, t->cfg->best_metric, have);
        return -1;
    }
    ut_plateau_state *s = &t->st.plateau_state;
    double before = s->lr;
    long long n = (long long)t->plateau.patience + 1;
    const char *sched = t->cfg->schedule, *metric = t->cfg->best_metric, *evals = n > 1 ? "evaluations" : "evaluation";
    switch (ut_plateau_step(&t->plateau, s, res->values[i])) {
    case UT_PLATEAU_LOWERED:
        ut_say(&t->log, "%s: %s has not improved for %lld %s: learning rate %.4g -> %.4g\n", sched, metric, n, evals,
               before, s->lr);
        break;
    case UT_PLATEAU_RAISED:
        ut_say(&t->log, "%s: %s has improved %lld %s in a row: learning rate %.4g -> %.4g\n", sched, metric, n,
               evals, before, s->lr);
        break;
    case UT_PLATEAU_RESET:
        ut_say(&t->log, "%s: %lld falls at the floor optim.min_lr: learning rate %.4g -> %.4g (the start), the "
               "best metric forgotten\n", sched, (long long)t->plateau.reset_start, before, s->lr);
        break;
    }
    return 0;
}

/* track: the result counts for the best checkpoint and early stopping (not
 * the evaluation before the first step, train.eval_on_start) */
static int evaluate_dev(ut_trainer *t, ut_eval_result *res, bool track, bool *stop) {
    *stop = false;
    if (!t->dev) return 0;
    int64_t bs = t->cfg->eval_batch_size > 0 ? t->cfg->eval_batch_size : t->cfg->batch_size;
    double t0 = now_s(), f0 = process_flops(t);
    ut_oom_phase("eval"); /* auto_find_batch_size cannot help an evaluation that runs out of memory */
    ut_dtype train_ac = ut_ctx_set_autocast(t->ctx, ut_run_eval_precision(t->cfg));
    /* pipeline: through the stages, the last one's numbers on every stage */
    ut_model *m = t->m;
    int erc = t->pp > 1 ? ut_pp_evaluate(t, t->dev, bs, stop_asked, t, res, NULL, NULL)
                        : ut_evaluate_until(t->dcomm, t->ctx, m, t->dev, bs, &t->h, ut_cls_wanted(t->cfg),
                                            stop_asked, t, res, t->err, sizeof t->err);
    if (!erc && t->cfg->gen_eval) { /* and by generation: bleu, rougeL, exact_match */
        ut_gen_opts o;
        ut_gen_opts_from_config(t->cfg, &o);
        /* a split model generates on its parts: every rank of a tensor-parallel
         * group runs the same search over its data-parallel share (zero3's
         * shards gathered first: the decoding contexts have no hooks); in
         * pipeline stages every rank takes a copy of the whole model (the
         * search runs every layer of the decoder a token at a time) and the
         * run's ranks share the split */
        if (ut_dist_gather_params(t->dist)) {
            snprintf(t->err, sizeof t->err, "gathering the parameters to generate: %s", ut_comm_error(t->dcomm));
            erc = -1;
        }
        if (!erc && t->pp > 1 && ut_split_whole_model(t)) erc = -1;
        if (!erc && !t->tok && !(t->tok = ut_run_tokenizer(t->cfg, t->err, sizeof t->err))) erc = -1;
        if (!erc && ut_evaluate_generation(t->pp > 1 ? t->comm : t->dcomm, t->pp > 1 ? t->whole : m, t->dev, bs, &o,
                                           t->tok, &t->h, res, NULL, t->err, sizeof t->err))
            erc = -1;
    }
    ut_dist_release(t->dist);
    ut_ctx_set_autocast(t->ctx, train_ac);
    ut_oom_phase("train");
    t->interval_t0 += now_s() - t0; /* the evaluation is not training time (save() does the same) */
    t->flops_mark += process_flops(t) - f0; /* nor its FLOPs training's */
    if (erc == 1) { /* a stop signal: the loop writes the checkpoint of the state before it */
        ut_say(&t->log, "eval  step %lld  abandoned: stop signal\n", (long long)t->st.step);
        return 0;
    }
    if (erc) return -1;
    const char *names[UT_MAX_METRICS];
    for (int i = 0; i < res->n; i++) names[i] = res->names[i];
    double ep = (double)t->st.epoch + (double)t->st.cursor / (double)t->train->n;
    ut_log_scalars(&t->log, "dev", t->st.step, ep, res->n, names, res->values);
    if (t->h.on_log) t->h.on_log(t->h.user, "dev", t->st.step, res->n, names, res->values);
    char line[512];
    size_t k = 0;
    for (int i = 0; i < res->n; i++)
        k += (size_t)snprintf(line + k, sizeof line - k, "  %s %.4f", res->names[i], res->values[i]);
    ut_say(&t->log, "eval  step %lld  dev:%s\n", (long long)t->st.step, line);

    /* best metric: "dev/<name>" */
    const char *bm = t->cfg->best_metric;
    if (track && t->st.plateau && plateau_step(t, res)) return -1;
    if (!track || strncmp(bm, "dev/", 4)) return 0;
    double v = ut_eval_get(res, bm + 4);
    if (isnan(v)) return 0;
    double thr = t->cfg->early_stopping_threshold;
    bool better = t->st.best_step < 0 ||
                  (t->cfg->greater_is_better ? v > t->st.best_metric + thr : v < t->st.best_metric - thr);
    if (better) {
        t->st.best_metric = v;
        t->st.best_step = t->st.step;
        t->st.bad_evals = 0;
        if (strcmp(t->cfg->save_strategy, "no") && save(t)) return -1; /* keep the best on disk */
    } else if (++t->st.bad_evals >= t->cfg->early_stopping_patience && t->cfg->early_stopping_patience > 0) {
        ut_say(&t->log, "Early stopping: %s has not improved for %lld evaluations (best %.4f at step %lld)\n",
               bm, (long long)t->st.bad_evals, t->st.best_metric, (long long)t->st.best_step);
        *stop = true;
    }
    return 0;
}

/* The learning rate of 0-based step `step`: the schedule's at the steps it
 * has counted (fp16's skipped steps left out under optim.schedule_on_skip:
 * hold, as transformers' Trainer, Accelerate's scheduler and DeepSpeed's
 * engine do not step it after a skipped optimizer step). The log's rate
 * is the last step's: before any step was taken, the first one's. */
static float sched_lr(const ut_trainer *t, int64_t step) {
    if (t->st.plateau) return (float)t->st.plateau_state.lr; /* the evaluations' */
    int64_t i = step - t->st.schedule_held;
    return ut_schedule_lr(&t->sched, i > 0 ? i : 0);
}

/* ---- throughput: model FLOPs and MFU ---- */
/* The model FLOPs this process's training contexts have run: the trainer's,
 * dp's other workers', a pipeline stage's slots' (src/core/flops.c). */
static double process_flops(const ut_trainer *t) {
    double f = ut_ctx_flops(t->ctx);
    for (int w = 1; w < t->ndp && t->dp; w++) f += ut_ctx_flops(ut_dp_ctx(t->dp, w));
    return f + ut_pp_flops(t);
}

/* The MFU's denominator: this rank's peak (train.peak_tflops, else its
 * device's figure for the run's products: bf16/fp16 under autocast, TF32
 * with train.tf32, else float32), divided among the ranks that share its
 * device (the same host and GPU: ut_comm_device_places), and summed over
 * all ranks; 0 when any rank's is not known. Every rank calls it. */
static int setup_peak(ut_trainer *t) {
    const ut_config *c = t->cfg;
    const ut_backend *be = ut_backend_get(ut_ctx_device(t->ctx));
    t->peak = ut_run_peak(c, ut_ctx_device(t->ctx), t->peak_what, sizeof t->peak_what);
    int share = 1;
    if (t->world > 1 && be->device_key && c->peak_tflops <= 0) {
        char key[128];
        int64_t *all = ut_calloc_check((size_t)t->world, sizeof *all);
        if (ut_comm_device_places(t->comm, be->device_key(key, sizeof key) ? NULL : key, all)) {
            snprintf(t->err, sizeof t->err, "comparing the ranks' devices: %s", ut_comm_error(t->comm));
            ut_free(all);
            return -1;
        }
        share = 0;
        for (int r = 0; r < t->world; r++) share += all[r] && all[r] == all[t->rank];
        if (share < 1) share = 1;
        ut_free(all);
    }
    double v[2] = {t->peak / share, t->peak > 0 ? 0 : 1};
    if (t->world > 1 && ut_comm_allreduce_f64(t->comm, v, 2)) {
        snprintf(t->err, sizeof t->err, "summing the ranks' peak rates: %s", ut_comm_error(t->comm));
        return -1;
    }
    t->peak_all = v[1] > 0 ? 0 : v[0];
    if (share > 1 && t->peak > 0) {
        size_t u = strlen(t->peak_what);
        snprintf(t->peak_what + u, sizeof t->peak_what - u, ", shared by %d ranks", share);
    }
    return 0;
}

/* ---- train.wall_clock_breakdown: time per phase (DeepSpeed's) ---- */
/* A phase boundary: the device's queued work waited for, the clock read
 * (0 when the breakdown is off: nothing waits). */
static double wcb_mark(const ut_trainer *t) {
    if (!t->cfg->wall_clock_breakdown) return 0;
    ut_backend_get(ut_ctx_device(t->ctx))->stream_sync(NULL);
    return now_s();
}

/* ---- train.profile_step: one step's profile (DeepSpeed's flops_profiler) ---- */
static void profile_begin(ut_trainer *t) {
    if (t->cfg->profile_step < 0 || t->st.step != t->cfg->profile_step || t->profiling) return;
    ut_backend_get(ut_ctx_device(t->ctx))->stream_sync(NULL);
    if (ut_profile_ops_start(t->ctx)) return; /* UT_PROFILE_OPS: refused in setup */
    t->profiling = true;
    t->prof_f0 = process_flops(t);
    t->prof_t0 = now_s();
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

/* After the profiled step's optimizer step: rank 0 writes the summary, and
 * with train.profile_detailed every op's line, to the console and run log
 * or train.profile_file. */
static int profile_end(ut_trainer *t) {
    if (!t->profiling) return 0;
    ut_backend_get(ut_ctx_device(t->ctx))->stream_sync(NULL);
    double dt = now_s() - t->prof_t0, flops = process_flops(t) - t->prof_f0;
    t->profiling = false;
    char *ops = NULL, *text = NULL;
    size_t ops_n = 0, text_n = 0;
    FILE *of = t->rank == 0 && t->cfg->profile_detailed ? open_memstream(&ops, &ops_n) : NULL;
    ut_profile_sums s;
    ut_profile_ops_stop(&s, of, "Per op (forward, backward)");
    if (of) fclose(of);
    if (t->rank == 0) {
        const ut_config *c = t->cfg;
        FILE *f = open_memstream(&text, &text_n);
        int64_t samples = c->batch_size * t->accum_steps * (t->ndp > 1 ? t->ndp : 1);
        fprintf(f, "-------------------- utrain step profile (train.profile_step %lld) --------------------\n"
                   "Step %lld (after %lld step%s), rank 0 of %d:\n",
                (long long)c->profile_step, (long long)c->profile_step + 1, (long long)c->profile_step,
                c->profile_step == 1 ? "" : "s", t->world);
        fprintf(f, "  world size                      %d (data parallel %d, tensor parallel %d, pipeline %d)\n",
                t->world, t->dworld, t->tp, t->pp);
        fprintf(f, "  samples per rank                %lld (batch %lld x %lld micro-batches%s)\n", (long long)samples,
                (long long)c->batch_size, (long long)t->accum_steps, t->ndp > 1 ? " x dp workers" : "");
        fprintf(f, "  parameters on this rank         %lld\n", (long long)t->m->params.numel);
        fprintf(f, "  forward FLOPs                   %.4g G (a checkpointed block's recompute included)\n",
                s.flops[0] * 1e-9);
        fprintf(f, "  backward FLOPs                  %.4g G\n", s.flops[1] * 1e-9);
        fprintf(f, "  model FLOPs of the step         %.4g G (what tflops and mfu count)\n", flops * 1e-9);
        fprintf(f, "  forward latency                 %.3f ms (the ops' forward time)\n", 1e3 * s.seconds[0]);
        fprintf(f, "  backward latency                %.3f ms (the ops' backward time)\n", 1e3 * s.seconds[1]);
        fprintf(f, "  step latency                    %.3f ms (the whole step, from its first forward to the "
                   "optimizer's end)\n", 1e3 * dt);
        fprintf(f, "  forward FLOP/s                  %.4g TFLOP/s\n", ratio(s.flops[0], s.seconds[0]) * 1e-12);
        fprintf(f, "  backward FLOP/s                 %.4g TFLOP/s\n", ratio(s.flops[1], s.seconds[1]) * 1e-12);
        fprintf(f, "  forward + backward FLOP/s       %.4g TFLOP/s\n",
                ratio(s.flops[0] + s.flops[1], s.seconds[0] + s.seconds[1]) * 1e-12);
        fprintf(f, "  step FLOP/s                     %.4g TFLOP/s", ratio(flops, dt) * 1e-12);
        if (t->peak > 0) fprintf(f, ", mfu %.1f%% (%s)", 100 * ratio(flops, dt) / t->peak, t->peak_what);
        fprintf(f, "\n  samples per second              %.4g\n", ratio((double)samples, dt));
        fprintf(f, "(the ops are timed one by one%s, which adds to the step's latency)\n",
                ut_backend_get(ut_ctx_device(t->ctx))->timer_new ? " by the device's timing events"
                                                                  : ", waiting for each");
        if (ops) fputs(ops, f);
        fclose(f);
        int bad = 0;
        if (t->cfg->profile_file[0]) {
            FILE *pf = fopen(t->cfg->profile_file, "w");
            bad = !pf || fputs(text, pf) < 0;
            bad = (pf && fclose(pf) != 0) || bad;
            if (!bad) ut_say(&t->log, "Step profile (train.profile_step): written to %s\n", t->cfg->profile_file);
        } else {
            ut_say(&t->log, "%s", text);
        }
        if (bad) snprintf(t->err, sizeof t->err, "train.profile_file %s: writing the profile failed (%s)",
                          t->cfg->profile_file, strerror(errno));
        free(ops);
        free(text);
        return bad ? -1 : 0;
    }
    free(ops);
    return 0;
}

/* ---- logging ---- */
/* train.count_input_tokens: the input tokens counted since the last call,
 * summed over the data-parallel ranks, into the state's total (every rank
 * calls it at the same steps: before a log line and a checkpoint). */
static int flush_tokens_seen(ut_trainer *t) {
    if (!t->count_tokens && t->train->vocab_size <= 0) return 0;
    int64_t v[2] = {t->interval.seen, t->interval.flos_tokens}; /* and total_flos' count (token data) */
    if (t->dworld > 1 && ut_comm_allreduce_i64(t->dcomm, v, 2)) {
        snprintf(t->err, sizeof t->err, "input tokens over ranks: %s", ut_comm_error(t->dcomm));
        return -1;
    }
    t->st.input_tokens_seen += v[0];
    t->st.flos_tokens += v[1];
    t->interval.seen = t->interval.flos_tokens = 0;
    return 0;
}

/* a reduced interval into the run's sums (train_results.json) */
static void fold_run(ut_trainer *t, const accum *a) {
    t->run.loss_sum += a->loss_sum, t->run.loss_w += a->loss_w, t->run.examples += a->examples;
}

static int log_train(ut_trainer *t) {
    accum *a = &t->interval;
    if (flush_tokens_seen(t) || accum_reduce(t, a)) return -1;
    double now_f = process_flops(t), flops = now_f - t->flops_mark; /* all ranks' */
    t->flops_mark = now_f;
    if (t->world > 1 && ut_comm_allreduce_f64(t->comm, &flops, 1)) {
        snprintf(t->err, sizeof t->err, "summing the ranks' FLOPs: %s", ut_comm_error(t->comm));
        return -1;
    }
    fold_run(t, a);
    if (!a->examples) return 0;
    double dt = now_s() - t->interval_t0;
    double lr = sched_lr(t, t->st.step - 1);
    double loss = a->loss_w > 0 ? a->loss_sum / a->loss_w : NAN, acc = accum_metric(a, "accuracy");
    const char *names[10] = {"loss", "lr", "grad_norm", "samples_per_s"};
    double vals[10] = {loss, lr, t->last_grad_norm, (double)a->examples / dt};
    int n = 4;
    if (!isnan(acc)) names[n] = "accuracy", vals[n++] = acc;
    if (a->tokens) names[n] = "tokens_per_s", vals[n++] = (double)a->tokens / dt;
    if (t->count_tokens) names[n] = "num_input_tokens_seen", vals[n++] = (double)t->st.input_tokens_seen;
    double tflops = flops / dt / t->world * 1e-12, mfu = t->peak_all > 0 ? flops / dt / t->peak_all : NAN;
    if (flops > 0) names[n] = "tflops", vals[n++] = tflops; /* per rank */
    if (flops > 0 && !isnan(mfu)) names[n] = "mfu", vals[n++] = mfu;
    char rate[64] = "";
    if (flops > 0 && !isnan(mfu)) snprintf(rate, sizeof rate, "  %.3g TFLOP/s  mfu %.1f%%", tflops, 100 * mfu);
    else if (flops > 0) snprintf(rate, sizeof rate, "  %.3g TFLOP/s", tflops);
    double ep = (double)t->st.epoch + (double)t->st.cursor / (double)t->train->n;
    ut_log_scalars(&t->log, "train", t->st.step, ep, n, names, vals);
    if (t->h.on_log) t->h.on_log(t->h.user, "train", t->st.step, n, names, vals);
    void (*out)(ut_runlog *, const char *, ...) = t->log.lines ? ut_say : ut_note;
    out(&t->log, "step %lld/%lld  epoch %.2f  loss %.4f  lr %.3g  grad_norm %.3f  %.0f samples/s%s\n",
        (long long)t->st.step, (long long)t->total_steps, ep, loss, lr, t->last_grad_norm,
        (double)a->examples / dt, rate);
    if (t->cfg->wall_clock_breakdown && t->wcb_steps > 0) {
        double k = 1e3 / (double)t->wcb_steps;
        out(&t->log, "time (ms) per step | forward: %.2f | backward: %.2f | backward_allreduce: %.2f | step: %.2f\n",
            k * t->wcb[0], k * t->wcb[1], k * t->wcb[2], k * t->wcb[3]);
    }
    memset(t->wcb, 0, sizeof t->wcb);
    t->wcb_steps = 0;
    memset(a, 0, sizeof *a);
    t->interval_t0 = now_s();
    return 0;
}

static void show_progress(ut_trainer *t, double loss) {
    double elapsed = now_s() - t->run_t0;
    double per_step = t->steps_this_run ? elapsed / (double)t->steps_this_run : 0;
    double rate = per_step > 0 ? (double)(t->cfg->batch_size * t->accum_steps) / per_step : 0;
    ut_progress(&t->log, "train", t->st.step, t->total_steps, rate, "samples", loss,
                per_step * (double)(t->total_steps - t->st.step));
}

/* This rank's model-state memory (the strategy's accounting) into its log:
 * after the first step, when every buffer has been touched. */
static void log_memory(ut_trainer *t) {
    ut_dist_mem m;
    ut_dist_memory(t->dist, &m);
    const double mib = 1048576.0;
    ut_note(&t->log,
            "memory rank %d (%s): params %.3f MiB, grads %.3f MiB, optimizer %.3f MiB, total %.3f "
            "MiB; peak params %.3f MiB, peak grads %.3f MiB\n",
            t->rank, ut_dist_name(ut_dist_kind_of(t->dist)), m.params / mib, m.grads / mib,
            m.optim / mib, (m.params + m.grads + m.optim) / mib, m.params_peak / mib,
            m.grads_peak / mib);
    if (m.host)
        ut_note(&t->log,
                "optimizer offload rank %d: optimizer state, master weights and their gradient in host memory, "
                "%.3f MiB; the update runs on the CPU; the gradient reaches it %s; the updated parameters go back "
                "in pieces of %.3f MiB, each while the next is updated\n",
                t->rank, m.host / mib,
                m.host_streamed ? "bucket by bucket during backward" : "in one copy after backward",
                m.host_piece / mib);
    if (m.gather_host)
        ut_note(&t->log, "parameter gathers rank %d: through a page-locked host copy of the parameters, %.3f MiB\n",
                t->rank, m.gather_host / mib);
}

/* ---- one optimizer step (after its micro-batches' backward passes) ---- */
static void step_done(ut_trainer *t) {
    if (t->dp) ut_dp_broadcast(t->dp);
    t->st.step++;
    t->steps_this_run++;
    if (t->steps_this_run == 1) log_memory(t);
}

/* fp16: the global norm of the scaled gradients is inf or NaN exactly when
 * one of them is, on every rank alike (ddp's gradients are all-reduced,
 * the sharded strategies all-reduce the norm), so all ranks skip together.
 * A skipped step zeroes the gradients and leaves parameters, optimizer state
 * and its step count alone; the trainer's step moves on, and the schedule
 * holds (optim.schedule_on_skip: hold, the next step takes the rate this one
 * would have had) or moves on with it (advance, as a PyTorch loop calling
 * scheduler.step() every iteration). */
static void skipped(ut_trainer *t) {
    float scale = t->scaler.scale;
    ut_grad_scaler_update(&t->scaler, true);
    t->skipped_steps++;
    if (!strcmp(t->cfg->schedule_on_skip, "hold")) t->st.schedule_held++;
    ut_note(&t->log, "step %lld: inf/NaN gradients at loss scale %g: step skipped, scale now %g\n",
            (long long)t->st.step + 1, scale, t->scaler.scale);
    step_done(t);
}

static int diverged(ut_trainer *t, double norm) {
    snprintf(t->err, sizeof t->err,
             "the gradient norm is %g at step %lld: training diverged (lower optim.lr or set "
             "train.grad_clip)", norm, (long long)t->st.step);
    return -1;
}

/* The step's one read from the device: the window's losses (added to the
 * interval's and the epoch's sums in micro-batch order, as they were taken)
 * and, with sq, the gradient's square sum queued into win_sq. *loss: the
 * window's last loss (NaN when this rank had no example in its last batch;
 * dp's workers set it themselves). Bad data the device's kernels found in
 * the step (backward does not wait to know) fails it here, once the copy
 * has waited for the step anyway. */
static int read_step(ut_trainer *t, bool sq, double *sq_out, double *loss) {
    size_t bytes = sq ? t->win_bytes : (size_t)t->win_n * sizeof(float);
    if (bytes) ut_backend_get(t->m->params.device)->copy(t->win_host, t->win_loss, bytes, UT_COPY_D2H);
    if (ut_ctx_device_check(t->ctx)) {
        snprintf(t->err, sizeof t->err, "backward: %s", ut_ctx_error(t->ctx));
        return -1;
    }
    const float *v = (const float *)t->win_host;
    for (int i = 0; i < t->win_n; i++) {
        t->interval.loss_sum += (double)v[i] * (double)t->win_count[i];
        t->epoch.loss_sum += (double)v[i] * (double)t->win_count[i];
        t->interval.loss_w += (double)t->win_count[i];
        t->epoch.loss_w += (double)t->win_count[i];
    }
    if (sq) memcpy(sq_out, t->win_host + ((unsigned char *)t->win_sq - (unsigned char *)t->win_loss), sizeof *sq_out);
    if (t->ndp == 1) *loss = t->win_last >= 0 ? v[t->win_last] : NAN;
    t->win_n = 0;
    t->win_last = -1;
    return 0;
}

/* *loss: the window's last loss (read here with the gradient's norm).
 * Unscaling (fp16) and clipping are one multiplier on the gradients,
 * ut_grad_step_rule's: where the norm needs no collective the device
 * computes it and the optimizer reads it there (ut_dist_step_scaled), so
 * the step is launched before the one read, and the host learns of a skip
 * from the same norm; otherwise the host decides and scales. */
static int optimizer_step(ut_trainer *t, double *loss) {
    double scaled, norm, sq;
    float coef, scale = t->fp16 ? t->scaler.scale : 1.0f;
    if (t->token_weights) { /* the gradient so far is the window's mean times tokens / examples */
        int64_t w[2] = {t->win_weight, t->win_examples};
        t->win_weight = 0;
        if (t->dworld > 1 && ut_comm_allreduce_i64(t->dcomm, w, 1)) {
            snprintf(t->err, sizeof t->err, "target tokens over ranks: %s", ut_comm_error(t->dcomm));
            return -1;
        }
        if (w[0] > 0) scale *= (float)((double)w[0] / (double)w[1]);
    }
    double clip = t->cfg->grad_clip > 0 ? t->cfg->grad_clip : 0;
    float lr = sched_lr(t, t->st.step);
    /* a split model's norm is the whole model's: its parts summed over the tp group */
    bool whole = !split_model(t);
    bool local = whole && ut_dist_norm_local(t->dist), dev = whole && ut_dist_device_scalars(t->dist);
    if (local) ut_dist_grad_sq_to(t->dist, t->win_sq);
    if (dev) {
        ut_grad_step_scalars(t->m->params.device, t->step_sc, t->win_sq, clip, scale);
        UT_ASSERT(ut_dist_step_scaled(t->dist, lr, t->step_sc) == 0);
        if (t->p16) ut_ctx_set_param_copies(t->ctx, t->m->params.flat, t->m->params.numel, t->p16, t->p16_dt);
    }
    double before = t->interval.loss_sum, before_w = t->interval.loss_w;
    if (read_step(t, local, &sq, loss)) return -1;
    if (t->pp > 1) { /* the losses are the last stage's: every stage logs them */
        bool last = t->mesh.pp_rank == t->pp - 1;
        double v[3] = {t->interval.loss_sum - before, last ? *loss : 0, t->interval.loss_w - before_w};
        if (ut_comm_allreduce_f64(t->mesh.pp_group, v, 3)) return ut_pp_fail(t, "sharing the loss");
        if (!last) {
            t->interval.loss_sum += v[0];
            t->epoch.loss_sum += v[0];
            t->interval.loss_w += v[2];
            t->epoch.loss_w += v[2];
        }
        *loss = v[1];
    }
    if (local) scaled = sqrt(sq);
    else if (split_model(t)) {
        /* the split parameters' parts summed over the tp group, the whole
         * ones once; the stages' sums added (a weight several stages hold
         * counted on one of them: pipeline.c's norm_skip) */
        double s2[2];
        ut_comm *failed = ut_dist_grad_sq_split(t->dist, t->norm_skip, s2)  ? ut_dist_failed(t->dist)
                          : ut_comm_allreduce_f64(t->mesh.tp_group, s2, 1) ? t->mesh.tp_group
                                                                           : NULL;
        s2[0] += s2[1];
        if (!failed && t->pp > 1 && ut_comm_allreduce_f64(t->mesh.pp_group, s2, 1)) failed = t->mesh.pp_group;
        if (failed) {
            snprintf(t->err, sizeof t->err, "gradient norm over the %s group: %s", ut_comm_name(failed),
                     ut_comm_error(failed));
            return -1;
        }
        scaled = sqrt(s2[0]);
    } else if (ut_dist_grad_norm(t->dist, &scaled)) {
        snprintf(t->err, sizeof t->err, "gradient norm over ranks: %s", ut_comm_error(ut_dist_failed(t->dist)));
        return -1;
    }
    bool skip = ut_grad_step_rule(scaled, clip, scale, &coef, &norm);
    if (skip) {
        if (dev) ut_dist_unstep(t->dist); /* the device skipped it, gradients zeroed */
        if (!t->fp16) return diverged(t, scaled);
        if (!dev) ut_dist_zero_grads(t->dist);
        skipped(t);
        return 0;
    }
    if (t->fp16) ut_grad_scaler_update(&t->scaler, false);
    t->last_grad_norm = norm;
    if (!dev) {
        if (coef != 1.0f) ut_dist_scale_grads(t->dist, coef);
        if (ut_dist_step(t->dist, lr)) {
            snprintf(t->err, sizeof t->err, "gathering parameters after the step: %s",
                     ut_comm_error(ut_dist_failed(t->dist)));
            return -1;
        }
    }
    step_done(t);
    return 0;
}

/* Forward and backward of one micro-batch; the last of a window runs its
 * backward with the gradient hooks armed, so gradients are reduced over
 * ranks as buckets complete. A rank with no examples in this batch (the
 * short last batch of an epoch) runs a stand-in example weighted 0, so that
 * it takes part in every collective of the pass in the same order as the
 * others (see ut_standin_batch). */
static int micro_step(ut_trainer *t, const ut_batch *b, int64_t window_examples, bool last, double *loss) {
    *loss = NAN;
    if (t->ndp > 1) return ut_dp_micro_step(t, b, window_examples, last, loss);
    if (t->pp > 1) return ut_pp_micro_step(t, b, window_examples, last);
    bool sync = last, empty = b->count == 0;
    if (empty && (t->dworld == 1 || ut_standin_batch(t->train, &t->standin, t->err, sizeof t->err)))
        return t->dworld == 1 ? 0 : -1; /* one process never has an empty share */
    const ut_batch *run = empty ? &t->standin : b;
    /* the ranks of one tensor-parallel group draw the same masks: those of
     * the whole model on their data-parallel rank's share */
    start_rng_stream(t, t->ctx, t->drank);
    ut_step_outputs out;
    ut_tensor *y;
    double m0 = wcb_mark(t);
    if (ut_forward_batch(&t->h, t->ctx, t->m, t->train, run, &out, &y, t->err, sizeof t->err)) return -1;
    /* the window's mean loss over all ranks: each micro-batch weighted by its share */
    int64_t w = t->token_weights && !empty ? ut_batch_weight(t->train, b) : b->count;
    t->win_weight += w;
    t->win_examples = window_examples;
    ut_tensor *scaled = ut_scale(t->ctx, out.loss, (float)w / (float)window_examples);
    if (t->fp16) scaled = ut_scale(t->ctx, scaled, t->scaler.scale);
    double m1 = wcb_mark(t);
    ut_dist_backward_begin(t->dist, t->ctx, sync);
    if (ut_backward(t->ctx, scaled)) {
        snprintf(t->err, sizeof t->err, "backward: %s", ut_ctx_error(t->ctx));
        return -1;
    }
    if (!empty) ut_trainer_record(t, &out, y, b);
    if (last) t->win_last = empty ? -1 : t->win_n - 1;
    ut_ctx_reset(t->ctx);
    double m2 = wcb_mark(t);
    if (ut_dist_backward_end(t->dist, t->ctx, sync)) {
        snprintf(t->err, sizeof t->err, "gradient reduction: %s", ut_comm_error(ut_dist_failed(t->dist)));
        return -1;
    }
    double m3 = wcb_mark(t);
    t->wcb[0] += m1 - m0, t->wcb[1] += m2 - m1, t->wcb[2] += m3 - m2;
    return 0;
}

void ut_trainer_record(ut_trainer *t, const ut_step_outputs *out, ut_tensor *y, const ut_batch *b) {
    /* the loss waits on the device for the optimizer step's one read (read_step) */
    UT_ASSERT(ut_tensor_copy_to(out->loss, t->win_loss + t->win_n, sizeof(float)) == 0);
    t->win_count[t->win_n++] = t->token_weights ? ut_batch_weight(t->train, b) : b->count;
    ut_metric mets[UT_MAX_METRICS];
    int k = ut_batch_metrics(&t->h, t->train, out, y, mets, UT_MAX_METRICS);
    int64_t tokens = batch_tokens(t, b); /* a scan of the text planes' masks: once */
    t->interval.seen += seen_tokens(t, b, tokens);
    accum_add(&t->interval, 0, b->count, tokens, mets, k);
    accum_add(&t->epoch, 0, b->count, tokens, mets, k);
}

/* A stop asked for on any rank stops all of them at the same step. */
static bool agree_on_stop(ut_trainer *t) {
    int64_t flag = stop_signal != 0 || supervisor_gone();
    if (t->world > 1) ut_comm_allreduce_i64(t->comm, &flag, 1);
    return flag != 0;
}

/* True once every batch of the current epoch has been consumed (its end is
 * not handled yet): the sampler's epoch limit, short of n with drop_last. */
static bool epoch_done(const ut_trainer *t) {
    const ut_sampler *s = &t->sampler;
    int64_t G = s->local_batch * s->world;
    return t->st.cursor >= (s->drop_last ? s->n / G * G : s->n);
}

/* train.eval_delay: steps (eval_strategy steps) or epochs done before the
 * first evaluation, as transformers' eval_delay */
static bool past_eval_delay(const ut_trainer *t) {
    bool epochs = !strcmp(t->cfg->eval_strategy, "epoch");
    return (double)(epochs ? t->st.epoch : t->st.step) >= t->cfg->eval_delay;
}

/* What follows an optimizer step: progress, logging, evaluation, saving. */
static int after_step(ut_trainer *t, double loss, bool *stop) {
    const ut_config *c = t->cfg;
    show_progress(t, loss);
    bool first = c->log_first_step && t->st.step == 1;
    if (t->log_every > 0 && (t->st.step % t->log_every == 0 || first) && log_train(t)) return -1;
    /* at an epoch's end, evaluating and saving wait for epoch_end, so that a
     * checkpoint written then resumes at the next epoch's start */
    if (epoch_done(t)) return 0;
    ut_eval_result res;
    if (!strcmp(c->eval_strategy, "steps") && t->st.step % t->eval_every == 0 && past_eval_delay(t) &&
        evaluate_dev(t, &res, true, stop))
        return -1;
    if (!strcmp(c->save_strategy, "steps") && t->st.step % t->save_every == 0 && save(t)) return -1;
    return 0;
}

/* Runs batches until the epoch ends, the run reaches total_steps, or a stop
 * is asked for. 1: epoch finished; 0: stop (steps done or early stop); -1 error. */
static int train_epoch(ut_trainer *t, bool *preempted, bool *early) {
    ut_loader *l = ut_run_loader(&t->h, t->m, t->train, &t->sampler, t->cfg->prefetch);
    for (int w = 1; w < t->ndp; w++)
        t->rep[w].loader = ut_run_loader(&t->h, ut_dp_model(t->dp, w), t->train, &t->rep[w].sampler,
                                         t->cfg->prefetch);
    int64_t G = t->sampler.local_batch * t->sampler.world;
    int64_t micro = 0, window = 0, window_examples = 0;
    int rc = 1;
    ut_batch b;
    int got;
    while ((got = ut_loader_next(l, &b, t->err, sizeof t->err)) == 1) {
        for (int w = 1; w < t->ndp && got == 1; w++) /* dp: every worker's share */
            got = ut_loader_next(t->rep[w].loader, &t->rep[w].b, t->err, sizeof t->err);
        if (got != 1) break;
        if (micro == 0) { /* a window of up to accum_steps micro-batches, cut at the epoch end */
            profile_begin(t);
            int64_t j = ceil_div(t->st.cursor, G);
            window = t->batches_per_epoch - j < t->accum_steps ? t->batches_per_epoch - j : t->accum_steps;
            window_examples = 0;
            for (int64_t i = 0; i < window; i++)
                window_examples += ut_sampler_global_batch_size(&t->sampler, j + i);
        }
        double loss;
        if (micro_step(t, &b, window_examples, micro + 1 == window, &loss)) {
            rc = -1;
            break;
        }
        t->st.cursor = b.cursor_after;
        if (++micro < window) continue;

        micro = 0;
        bool stop = false;
        double s0 = wcb_mark(t);
        if (optimizer_step(t, &loss)) {
            rc = -1;
            break;
        }
        t->wcb[3] += wcb_mark(t) - s0, t->wcb_steps++;
        if (profile_end(t) || after_step(t, loss, &stop)) {
            rc = -1;
            break;
        }
        if (agree_on_stop(t)) *preempted = true;
        if (stop) *early = true;
        if (*preempted || *early || t->st.step >= t->total_steps) {
            rc = 0;
            break;
        }
    }
    if (got < 0) rc = -1;
    ut_loader_free(l);
    for (int w = 1; w < t->ndp; w++) {
        ut_loader_free(t->rep[w].loader);
        t->rep[w].loader = NULL;
    }
    return rc;
}

/* Whether evaluating or saving is due at an epoch's end: its strategy is
 * `each` (epoch), or steps with an interval that divides this step. */
static bool due(const char *strategy, const char *each, int64_t interval, int64_t step) {
    return !strcmp(strategy, each) || (!strcmp(strategy, "steps") && interval > 0 && step % interval == 0);
}

/* The end of an epoch: its table row, then the position moves to the next
 * epoch's start before evaluating and saving, so every checkpoint written
 * here (the best one, the epoch's) resumes there and a resumed run neither
 * evaluates this step again nor shows an empty epoch. */
static void epoch_end(ut_trainer *t, int *rc) {
    const ut_config *c = t->cfg;
    bool stop = false;
    if (accum_reduce(t, &t->epoch)) *rc = -1;
    epoch_row *row = t->nrows < MAX_EPOCH_ROWS ? &t->rows[t->nrows++] : NULL;
    if (row) {
        *row = (epoch_row){.epoch = t->st.epoch};
        row->train_loss = t->epoch.loss_w > 0 ? t->epoch.loss_sum / t->epoch.loss_w : NAN;
        row->train_acc = accum_metric(&t->epoch, "accuracy");
    }
    memset(&t->epoch, 0, sizeof t->epoch);
    t->st.epoch++;
    t->st.cursor = 0;
    ut_sampler_next_epoch(&t->sampler);
    for (int w = 1; w < t->ndp; w++) ut_sampler_next_epoch(&t->rep[w].sampler);
    ut_eval_result res = {0};
    if (*rc == 0 && due(c->eval_strategy, "epoch", t->eval_every, t->st.step) && past_eval_delay(t) &&
        evaluate_dev(t, &res, true, &stop))
        *rc = -1;
    if (row && !strcmp(c->eval_strategy, "epoch")) row->dev = res;
    if (*rc == 0 && due(c->save_strategy, "epoch", t->save_every, t->st.step) && save(t)) *rc = -1;
    if (stop && *rc == 0) *rc = 2;
}

/* The run's end inside an epoch (train.max_steps, a fraction of epochs): a
 * row for the part of the epoch trained, with dev (NULL: not evaluated). */
static int partial_epoch_row(ut_trainer *t, const ut_eval_result *dev) {
    if (accum_reduce(t, &t->epoch)) return -1;
    if (t->nrows == MAX_EPOCH_ROWS) return 0;
    epoch_row *row = &t->rows[t->nrows++];
    *row = (epoch_row){.epoch = t->st.epoch, .part = (double)t->st.epoch + (double)t->st.cursor / (double)t->train->n};
    row->train_loss = t->epoch.loss_w > 0 ? t->epoch.loss_sum / t->epoch.loss_w : NAN;
    row->train_acc = accum_metric(&t->epoch, "accuracy");
    if (dev) row->dev = *dev;
    return 0;
}

static void print_epoch_table(ut_trainer *t) {
    if (!t->nrows) return;
    char line[1024];
    size_t k = (size_t)snprintf(line, sizeof line, "%-6s %-11s %-11s", "epoch", "train/loss", "train/acc");
    const ut_eval_result *d = &t->rows[0].dev;
    for (int i = 0; i < d->n && k < sizeof line; i++)
        k += (size_t)snprintf(line + k, sizeof line - k, " dev/%-14s", d->names[i]);
    ut_say(&t->log, "\n%s\n", line);
    for (int r = 0; r < t->nrows; r++) {
        const epoch_row *row = &t->rows[r];
        if (row->part > 0) k = (size_t)snprintf(line, sizeof line, "%-6.2f", row->part);
        else k = (size_t)snprintf(line, sizeof line, "%-6lld", (long long)row->epoch + 1);
        k += (size_t)snprintf(line + k, sizeof line - k, " %-11.4f %-11.4f", row->train_loss, row->train_acc);
        for (int i = 0; i < row->dev.n && k < sizeof line; i++)
            k += (size_t)snprintf(line + k, sizeof line - k, " %-18.4f", row->dev.values[i]);
        ut_say(&t->log, "%s\n", line);
    }
}

/* ---- ut_trainer_run ---- */
static int has_checkpoints(const char *run_dir) {
    char dir[1280];
    int64_t steps[1];
    snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    return ut_ckpt_list(dir, steps, 1);
}

static int write_resolved_config(ut_trainer *t) {
    char path[1280];
    snprintf(path, sizeof path, "%s/config.yml", t->log.dir);
    FILE *f = ut_fopen_write(path, false, t->err, sizeof t->err);
    if (!f) return -1;
    if (ut_config_write(t->cfg, f) | fclose(f)) {
        snprintf(t->err, sizeof t->err, "%s: cannot write the resolved config", path);
        return -1;
    }
    return 0;
}

/* Everything before the first step; fills t or sets t->err. */
static int setup(ut_trainer *t, ut_model *model, ut_dataset *train, ut_dataset *dev, bool *own_m,
                 bool *own_data) {
    const ut_config *c = t->cfg;
    if (c->threads > 0) omp_set_num_threads(c->threads);
    char runpath[1200];
    snprintf(runpath, sizeof runpath, "%s/%s", c->output_dir, c->experiment_name);
    if (!c->continue_training && has_checkpoints(runpath) > 0) {
        snprintf(t->err, sizeof t->err,
                 "%s already holds checkpoints: set continue_training: true to resume, or choose "
                 "another experiment_name (or remove the directory)", runpath);
        return -1;
    }
    t->rank = ut_comm_rank(t->comm);
    t->world = ut_comm_size(t->comm);
    if (ut_comm_check_same(t->comm, ut_config_hash(c), "the configuration (hash)", t->err, sizeof t->err) ||
        ut_comm_check_same_int(t->comm, c->batch_size, "train.batch_size", t->err, sizeof t->err) ||
        ut_comm_check_same_int(t->comm, c->gradient_accumulation_steps,
                               "train.gradient_accumulation_steps", t->err, sizeof t->err))
        return -1;
    if (ut_runlog_open(&t->log, c, t->comm, true, t->err, sizeof t->err) ||
        (t->rank == 0 && write_resolved_config(t)))
        return -1;
    t->tp = (int)c->tensor_parallel, t->pp = (int)c->pipeline_parallel;
    t->dcomm = t->comm, t->drank = t->rank, t->dworld = t->world;
    if (split_model(t)) {
        char why[512];
        if (ut_mesh_init(&t->mesh, t->comm, t->tp, t->pp, why, sizeof why)) {
            snprintf(t->err, sizeof t->err, "%s (start %d x N processes)", why, t->tp * t->pp);
            return -1;
        }
        t->have_mesh = true;
        t->dcomm = t->mesh.dp_group, t->drank = t->mesh.dp_rank, t->dworld = t->mesh.dp;
    }
    *own_data = !train;
    if (!train && ut_datasets_open(c, t->log.dir, t->rank == 0, &t->train, &t->dev, NULL, t->err, sizeof t->err))
        return -1;
    if (train) t->train = train, t->dev = dev;
    if (ut_cls_check(c, t->dev ? t->dev : t->train, t->err, sizeof t->err)) return -1;
    *own_m = !model;
    if (model && split_model(t)) {
        snprintf(t->err, sizeof t->err, "dist.tensor_parallel %d x dist.pipeline_parallel %d: a model handed to the "
                 "trainer is whole; let the trainer build it from model.* (it builds each rank's part) or set both "
                 "to 1", t->tp, t->pp);
        return -1;
    }
    if (model) t->m = model;
    else if (split_model(t)) {
        ut_model_layout lay = {.tp_rank = t->mesh.tp_rank, .tp_size = t->tp,
                               .tp = t->tp > 1 ? ut_tp_hooks_of(t->mesh.tp_group) : (ut_tp_hooks){0},
                               .seq_parallel = c->sequence_parallel,
                               .pp_rank = t->mesh.pp_rank, .pp_size = t->pp};
        t->m = ut_model_from_config_layout(c, t->train, &lay, t->err, sizeof t->err);
    } else t->m = ut_model_from_config(c, t->train, t->err, sizeof t->err);
    if (!t->m || (split_model(t) && ut_split_whole_list(t))) return -1;
    t->ctx = ut_ctx_new(&(ut_ctx_opts){.seed = (uint64_t)c->seed, .device = ut_config_device(c)});
    ut_run_ctx_setup(t->ctx, c);
    t->fp16 = ut_run_precision(c) == UT_F16;
    t->pp_wire = ut_run_precision(c);
    if (t->fp16) {
        ut_grad_scaler_init(&t->scaler, (float)c->init_scale, c->growth_interval);
        ut_grad_scaler_set_hysteresis(&t->scaler, (float)c->min_loss_scale, c->loss_scale_hysteresis,
                                      c->consecutive_hysteresis);
    }
    t->ndp = !strcmp(c->dist_strategy, "dp") ? (int)c->nproc_per_node : 1;
    t->token_weights = ut_seq2seq_planes(t->train) || ut_tok_labels(t->train); /* a loss a labeled token */
    t->count_tokens = !strcmp(c->count_input_tokens, "all") ? 1 : !strcmp(c->count_input_tokens, "non_padding") ? 2 : 0;
    if (t->count_tokens && t->train->vocab_size <= 0) {
        snprintf(t->err, sizeof t->err, "train.count_input_tokens: %s counts tokens; the training data (%s) holds "
                 "none: remove the key", c->count_input_tokens, t->train->name);
        return -1;
    }
    /* dp: the trainer's own model is worker 0 of ndp */
    ut_sampler_init(&t->sampler, t->train->n, c->batch_size, t->ndp > 1 ? 0 : t->drank,
                    t->ndp > 1 ? t->ndp : t->dworld, ut_run_data_seed(c), c->shuffle, c->drop_last);
    t->accum_steps = c->gradient_accumulation_steps;
    if (c->group_by_length && ut_run_group_by_length(c, t->train, &t->sampler, t->ndp > 1 ? t->ndp : t->dworld,
                                                     t->err, sizeof t->err))
        return -1;
    t->batches_per_epoch = ut_sampler_batches_per_epoch(&t->sampler);
    if (t->batches_per_epoch == 0) {
        snprintf(t->err, sizeof t->err, "%s: %lld examples make no batch of %lld (drop_last)", t->train->name,
                 (long long)t->train->n, (long long)c->batch_size);
        return -1;
    }
    t->steps_per_epoch = ceil_div(t->batches_per_epoch, t->accum_steps);
    if (check_counts(t)) return -1;
    /* a window holds at most an epoch's batches */
    int64_t wmax = t->accum_steps < t->batches_per_epoch ? t->accum_steps : t->batches_per_epoch;
    const ut_backend *be = ut_backend_get(t->m->params.device);
    size_t sq_at = ((size_t)wmax * sizeof(float) + 7) / 8 * 8;
    t->win_bytes = sq_at + sizeof(double);
    t->win_loss = be->alloc(t->win_bytes + 2 * sizeof(float));
    be->memset(t->win_loss, 0, t->win_bytes + 2 * sizeof(float));
    t->win_sq = (double *)(void *)((unsigned char *)t->win_loss + sq_at);
    t->step_sc = (float *)(void *)((unsigned char *)t->win_loss + t->win_bytes);
    t->win_host = ut_calloc_check(t->win_bytes, 1);
    t->win_count = ut_calloc_check((size_t)wmax, sizeof *t->win_count);
    t->win_last = -1;
    /* transformers' count for a fraction of epochs: ceil(epochs x steps per epoch) */
    t->total_steps = c->max_steps > 0 ? c->max_steps : (int64_t)ceil(c->epochs * (double)t->steps_per_epoch);
    t->log_every = c->log_steps_ratio > 0      ? ratio_steps(c->log_steps_ratio, t->steps_per_epoch)
                   : c->log_steps_fraction > 0 ? fraction_steps(c->log_steps_fraction, t->total_steps)
                                               : c->log_interval;
    t->eval_every = c->eval_steps_fraction > 0 ? fraction_steps(c->eval_steps_fraction, t->total_steps) : c->eval_interval;
    t->save_every = c->save_steps_ratio > 0      ? ratio_steps(c->save_steps_ratio, t->steps_per_epoch)
                    : c->save_steps_fraction > 0 ? fraction_steps(c->save_steps_fraction, t->total_steps)
                                                 : c->save_interval;
    t->st = (ut_train_state){.best_step = -1};
    t->last_saved_step = -1;
    if (set_schedule(t) || set_optimizer(t)) return -1;
    ut_dtype ac = ut_run_precision(c);
    if (ac != UT_F32 && !split_model(t) && ut_dist_device_scalars(t->dist)) { /* autocast's copies, written by the step */
        t->p16_dt = ac;
        t->p16 = be->alloc((size_t)(t->m->params.numel ? t->m->params.numel : 1) * 2);
        ut_dist_set_copies16(t->dist, t->p16, ac);
    }
    if (!strcmp(c->dist_strategy, "dp") && ut_dp_setup(t, *own_m)) return -1;
    if (t->pp > 1 && ut_pp_setup(t)) return -1;
    if (t->rank == 0) clean_stale_temp(t);
    int resumed = c->continue_training ? resume(t) : 0;
    if (c->continue_training && !resumed) /* said, not refused: a restarted job may fail before its first save */
        ut_say(&t->log, "continue_training: no checkpoint in %s/checkpoints yet; starting at step 0\n", t->log.dir);
    if (resumed < 0 || (!resumed && c->load_dir[0] && load_initial_weights(t))) return -1;
    ut_sampler_seek(&t->sampler, t->st.epoch, t->st.cursor);
    for (int w = 1; w < t->ndp; w++) ut_sampler_seek(&t->rep[w].sampler, t->st.epoch, t->st.cursor);
    if (t->dp) ut_dp_broadcast(t->dp);
    ut_hooks_resolve(&t->h, NULL);
    if (c->profile_step >= 0 && ut_profile_ops_env(t->ctx)) {
        snprintf(t->err, sizeof t->err, "train.profile_step: UT_PROFILE_OPS is set, which profiles the whole run; "
                                        "unset one of them");
        return -1;
    }
    /* the file is written when the step is profiled; here only whether it can be (created, not emptied: a
     * run resumed past its profiled step leaves an earlier run's profile alone) */
    if (c->profile_step >= 0 && c->profile_file[0] && t->rank == 0 && t->st.step <= c->profile_step &&
        c->profile_step < t->total_steps) {
        int fd = open(c->profile_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
        if (fd < 0) {
            snprintf(t->err, sizeof t->err, "train.profile_file %s: cannot write it (%s)", c->profile_file,
                     strerror(errno));
            return -1;
        }
        close(fd);
    }
    return setup_peak(t);
}

/* ---- the run's results: train_results.json ---- */
/* Whether parameter name is an embedding table, which Hugging Face's
 * num_parameters(exclude_embeddings=True) leaves out of its FLOP count: the
 * nn.Embedding modules of the models utrain builds (token, position and
 * token-type tables, T5's relative-position biases, bow's table), named by
 * the module holding the weight. */
static bool embedding_param(const char *name) {
    static const char *const tables[] = {"wte",          "wpe",         "word_embeddings", "position_embeddings",
                                         "token_type_embeddings", "shared", "embed_tokens", "embed_positions",
                                         "relative_attention_bias", "emb"};
    const char *end = strrchr(name, '.'), *start = end;
    if (!end) return false;
    while (start > name && start[-1] != '.') start--;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (strlen(tables[i]) == (size_t)(end - start) && !strncmp(start, tables[i], (size_t)(end - start)))
            return true;
    return false;
}

/* The whole model's parameters but its embedding tables (a split model's
 * list is known to every rank after the start-up summary) */
static int64_t flop_params(ut_trainer *t) {
    int64_t n = 0;
    if (split_model(t)) {
        if (ut_split_whole_list(t)) return -1;
        for (int k = 0; k < t->nwl; k++)
            if (!embedding_param(t->wl[k].name)) n += t->wl[k].numel;
        return n;
    }
    const ut_params *p = &t->m->params;
    for (int i = 0; i < p->n; i++)
        if (!embedding_param(p->names[i])) n += p->segs[i].numel;
    return n;
}

/* Trainer.train()'s metrics as transformers reports them and its examples
 * save them (trainer.save_metrics("train", ...): train_results.json, keys
 * sorted): the run's time, its samples and optimizer steps per second, its
 * mean training loss, the epoch reached and total_flos, 6 x the
 * non-embedding parameters x the input tokens trained on (over the earlier
 * runs of a resumed one too; 0 for data without tokens, as there). Every
 * rank calls it (the sums are over all of them); rank 0 writes. */
static int train_results(ut_trainer *t, double runtime) {
    if (flush_tokens_seen(t)) return -1;
    if (t->log_every <= 0) { /* no train lines: the whole run is the open interval */
        if (accum_reduce(t, &t->interval)) return -1;
        fold_run(t, &t->interval);
        memset(&t->interval, 0, sizeof t->interval);
    }
    int64_t np = flop_params(t);
    if (np < 0) return -1;
    if (t->rank != 0) return 0;
    double flos = 6.0 * (double)np * (double)t->st.flos_tokens, rt = runtime > 0 ? runtime : 1e-9;
    double loss = t->run.loss_w > 0 ? t->run.loss_sum / t->run.loss_w : NAN;
    double ep = (double)t->st.epoch + (double)t->st.cursor / (double)t->train->n;
    double sps = (double)t->run.examples / rt, stps = (double)t->steps_this_run / rt;
    char path[1400], loss_s[32];
    if (isfinite(loss)) snprintf(loss_s, sizeof loss_s, "%.9g", loss);
    else snprintf(loss_s, sizeof loss_s, "null");
    snprintf(path, sizeof path, "%s/train_results.json", t->log.dir);
    FILE *f = ut_fopen_write(path, false, t->err, sizeof t->err);
    if (!f) return -1;
    fprintf(f,
            "{\n    \"epoch\": %.9g,\n    \"total_flos\": %.17g,\n    \"train_loss\": %s,\n"
            "    \"train_runtime\": %.4f,\n    \"train_samples_per_second\": %.3f,\n"
            "    \"train_steps_per_second\": %.3f\n}\n",
            ep, flos, loss_s, runtime, sps, stps);
    if (fclose(f)) {
        snprintf(t->err, sizeof t->err, "%s: write failed", path);
        return -1;
    }
    ut_say(&t->log, "***** train metrics *****\n  epoch = %.4g, total_flos = %.0fGF, train_loss = %s, train_runtime = "
                    "%.2f s, train_samples_per_second = %.3f, train_steps_per_second = %.3f (train_results.json)\n",
           ep, flos / 1e9, loss_s, runtime, sps, stps);
    return 0;
}

static int train_loop(ut_trainer *t) {
    bool preempted = false, early = false;
    int rc = 0;
    t->run_t0 = t->interval_t0 = now_s();
    t->flops_mark = process_flops(t);
    if (t->cfg->eval_on_start && t->st.step < t->total_steps) { /* a sanity check of the model and dev data */
        ut_eval_result res;
        bool ignored;
        if (evaluate_dev(t, &res, false, &ignored)) return UT_EXIT_ERROR;
    }
    while (t->st.step < t->total_steps && !preempted && !early) {
        int r = train_epoch(t, &preempted, &early);
        if (r < 0) return UT_EXIT_ERROR;
        if (r == 1 || epoch_done(t)) { /* the epoch's batches are all done */
            epoch_end(t, &rc);
            if (rc < 0) return UT_EXIT_ERROR;
            if (rc == 2) early = true;
        }
        if (agree_on_stop(t)) preempted = true;
    }
    /* the run's length ended inside an epoch (train.max_steps, or a fraction
     * of epochs): with evaluation by epoch that partial epoch's end is
     * evaluated too, as the Hugging Face Trainer's epoch end after its last
     * step is (the checkpoint below is the run's last) */
    if (!preempted && !early && t->st.cursor > 0 && t->steps_this_run > 0) {
        ut_eval_result res = {0};
        bool ignored, evaluated = !strcmp(t->cfg->eval_strategy, "epoch") && past_eval_delay(t);
        if ((evaluated && evaluate_dev(t, &res, true, &ignored)) || partial_epoch_row(t, evaluated ? &res : NULL))
            return UT_EXIT_ERROR;
    }
    ut_progress_end(&t->log);
    if (t->log_every > 0 && t->st.step % t->log_every && t->steps_this_run &&
        log_train(t))
        return UT_EXIT_ERROR;
    if (strcmp(t->cfg->save_strategy, "no") || preempted) {
        t->stopping = preempted;
        if (save(t)) return UT_EXIT_ERROR;
    }
    if (preempted) {
        char why[96]; /* a rank the signal did not reach stops because another one asked */
        if (stop_signal) snprintf(why, sizeof why, "signal %d", (int)stop_signal);
        else if (supervisor_lost)
            snprintf(why, sizeof why, "the end of the --nproc launcher (pid %ld)", (long)supervisor_pid);
        else snprintf(why, sizeof why, "a stop signal to another rank");
        ut_say(&t->log, "Stopped by %s at step %lld; checkpoint written. Resume with "
                        "continue_training: true (exit code %d).\n",
               why, (long long)t->st.step, UT_EXIT_PREEMPTED);
        return UT_EXIT_PREEMPTED;
    }
    print_epoch_table(t);
    if (train_results(t, now_s() - t->run_t0)) return UT_EXIT_ERROR;
    char best[256] = "";
    if (t->st.best_step >= 0)
        snprintf(best, sizeof best, "; best %s %.4f at step %lld", t->cfg->best_metric, t->st.best_metric,
                 (long long)t->st.best_step);
    ut_say(&t->log, "Training done: %lld steps in %.1f s%s\n", (long long)t->st.step,
           now_s() - t->run_t0, best);
    ut_say(&t->log, "Run directory: %s\n", t->log.dir);
    if (t->world > 1) { /* this rank's traffic, in its log: the world's and every group's */
        ut_comm *cs[5] = {t->comm, t->have_mesh ? t->mesh.tp_group : NULL, t->have_mesh ? t->mesh.dp_group : NULL,
                          t->have_mesh ? t->mesh.pp_group : NULL, t->embed};
        double bytes = 0, wait = 0;
        for (int i = 0; i < 5; i++) {
            double b, w;
            if (!cs[i]) continue;
            ut_comm_stats(cs[i], &b, &w);
            bytes += b, wait += w;
        }
        ut_note(&t->log, "communication: rank %d moved %.1f MiB in collectives and transfers over %lld steps "
                         "(%.1f MiB a step), waiting %.2f s\n",
                t->rank, bytes / 1048576.0, (long long)t->steps_this_run,
                t->steps_this_run ? bytes / 1048576.0 / (double)t->steps_this_run : 0.0, wait);
    }
    return UT_EXIT_OK;
}

int ut_trainer_run(const ut_config *cfg, ut_model *model, ut_dataset *train, ut_dataset *dev,
                   const ut_hooks *hooks) {
    return ut_trainer_run_on(cfg, ut_comm_world(), model, train, dev, hooks);
}

int ut_trainer_run_on(const ut_config *cfg, ut_comm *comm, ut_model *model, ut_dataset *train, ut_dataset *dev,
                      const ut_hooks *hooks) {
    ut_trainer *t = ut_calloc_check(1, sizeof *t);
    t->cfg = cfg;
    t->comm = comm;
    bool own_m = false, own_data = false;
    saved_signals sig;
    catch_signals(&sig);
    supervisor_open();
    int rc = setup(t, model, train, dev, &own_m, &own_data) ? UT_EXIT_ERROR : UT_EXIT_OK;
    if (rc == UT_EXIT_OK) {
        if (hooks) ut_hooks_resolve(&t->h, hooks);
        print_summary(t);
        rc = train_loop(t);
    }
    if (rc == UT_EXIT_ERROR) {
        ut_progress_end(&t->log);
        fprintf(stderr, "utrain: error: %s\n", t->err);
        if (t->log.log) fprintf(t->log.log, "error: %s\n", t->err);
    }
    /* the caller's model is handed back whole */
    if (rc != UT_EXIT_ERROR && t->dist && !own_m) ut_dist_gather_params(t->dist);
    restore_signals(&sig);
    supervisor_close();
    ut_runlog_close(&t->log);
    ut_sampler_free(&t->sampler);
    ut_pp_free(t);
    ut_dist_free(t->dist);
    if (t->replicas) ut_comm_finalize(t->replicas);
    if (t->shard_group) ut_comm_finalize(t->shard_group);
    if (t->have_mesh) ut_mesh_free(&t->mesh);
    ut_split_free(t);
    ut_tokenizer_free(t->tok);
    ut_standin_free(&t->standin);
    ut_dp_step_free(t);
    if (t->win_loss) ut_backend_get(t->m->params.device)->free(t->win_loss);
    if (t->p16) ut_backend_get(t->m->params.device)->free(t->p16);
    ut_free(t->win_count);
    ut_free(t->win_host);
    if (t->ctx) ut_ctx_free(t->ctx);
    if (own_m) ut_model_free(t->m);
    if (own_data && t->train) ut_dataset_free(t->train);
    if (own_data && t->dev) ut_dataset_free(t->dev);
    ut_free(t);
    return rc;
}
