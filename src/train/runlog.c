/* The run directory and everything written into it while training: the log
 * file, metrics.jsonl, TensorBoard scalars, and the console progress. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "run_internal.h"

int ut_mkdirs(const char *path, char *err, size_t n) {
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        snprintf(err, n, "%s: path too long", path);
        return -1;
    }
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            snprintf(err, n, "%s: cannot create directory: %s", buf, strerror(errno));
            return -1;
        }
        if (!(*p = c)) break;
    }
    return 0;
}

/* DIR/NAME opened for appending; a symbolic link planted there is refused. */
static FILE *append_in(const char *dir, const char *name, char *err, size_t n) {
    char path[1280];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return ut_fopen_write(path, true, err, n);
}

// --- the run directory's lock

/* "pid 123 on host" of the lock's holder, from the file's text. */
static void lock_holder(int fd, char *buf, size_t n) {
    char text[300];
    ssize_t k = pread(fd, text, sizeof text - 1, 0);
    text[k > 0 ? k : 0] = 0;
    char host[256] = "";
    long pid = 0;
    if (sscanf(text, "%ld %255s", &pid, host) >= 1 && pid > 0)
        snprintf(buf, n, "pid %ld%s%s", pid, *host ? " on " : "", host);
    else
        snprintf(buf, n, "%s", "pid unknown");
}

/* An exclusive flock on DIR/.lock, kept open (close-on-exec) for the run; the
 * kernel drops it when the process ends however it ends, so a crashed job
 * leaves the directory free for its restart. */
static int lock_run_dir(ut_runlog *rl, char *err, size_t n) {
    char path[1280], who[320], host[256] = "";
    snprintf(path, sizeof path, "%s/.lock", rl->dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 && !lstat(path, &st) && S_ISLNK(st.st_mode))
        return ut_check_own_dir(path, err, n); /* names the planted link */
    if (fd < 0) return ut_errorf(err, n, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return ut_errorf(err, n, "%s: not a regular file; the run directory's lock must be one: remove it", path);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        lock_holder(fd, who, sizeof who);
        close(fd);
        if (e == EWOULDBLOCK)
            return ut_errorf(err, n, "%s is in use by another training job (%s, lock %s): wait for it "
                                     "to end or stop it, or choose another experiment_name", rl->dir, who, path);
        return ut_errorf(err, n, "%s: cannot lock: %s", path, strerror(e));
    }
    gethostname(host, sizeof host - 1);
    char text[300];
    int len = snprintf(text, sizeof text, "%ld %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        close(fd);
        return ut_errorf(err, n, "%s: cannot write: %s", path, strerror(errno));
    }
    rl->lock_fd = fd;
    rl->locked = true;
    return 0;
}

/* Rank 0 locks; every rank learns whether it could before anyone writes. */
static int lock_collective(ut_runlog *rl, char *err, size_t n) {
    int rc = rl->rank == 0 ? lock_run_dir(rl, err, n) : 0;
    ut_comm *comm = rl->comm;
    if (ut_comm_size(comm) == 1) return rc;
    int64_t failed = rc != 0;
    if (ut_comm_allreduce_i64(comm, &failed, 1))
        return ut_errorf(err, n, "%s: the ranks could not agree on the run directory's lock", rl->dir);
    if (failed && rl->rank != 0)
        return ut_errorf(err, n, "rank 0 could not lock the run directory %s (its message says why)", rl->dir);
    return failed ? -1 : 0;
}

/* The offset just past the last '\n' of f (size bytes), 0 if none. */
static long last_line_end(FILE *f, long size) {
    char buf[4096];
    for (long end = size; end > 0;) {
        long start = end > (long)sizeof buf ? end - (long)sizeof buf : 0;
        if (fseek(f, start, SEEK_SET) || fread(buf, 1, (size_t)(end - start), f) != (size_t)(end - start))
            return -1;
        for (long i = end - start - 1; i >= 0; i--)
            if (buf[i] == '\n') return start + i + 1;
        end = start;
    }
    return 0;
}

/* A resumed run appends to metrics.jsonl: a last line torn by a crash or a
 * full disk is cut off first, so the next line does not merge with it. */
static int drop_torn_line(const char *dir, char *err, size_t n) {
    char path[1280];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 && errno == ENOENT) return 0; /* none yet */
    if (fd < 0 && !lstat(path, &st) && S_ISLNK(st.st_mode)) return ut_check_own_dir(path, err, n);
    if (fd < 0) return ut_errorf(err, n, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd); /* a device (or a FIFO, refused when it is opened for appending) has no torn line */
        return 0;
    }
    FILE *f = fdopen(fd, "r+b");
    if (!f) {
        close(fd);
        return ut_errorf(err, n, "%s: cannot open: %s", path, strerror(errno));
    }
    int rc = 0;
    long size = fseek(f, 0, SEEK_END) ? -1 : ftell(f), keep = size;
    char last = 0;
    if (size > 0 && (fseek(f, size - 1, SEEK_SET) || fread(&last, 1, 1, f) != 1)) size = -1;
    if (size > 0 && last != '\n') keep = last_line_end(f, size);
    if (size < 0 || keep < 0 || (keep < size && ftruncate(fileno(f), keep)))
        rc = ut_errorf(err, n, "%s: cannot cut off its torn last line: %s", path, strerror(errno));
    else if (keep < size)
        fprintf(stderr, "utrain: warning: %s: cut off a torn last line (%ld bytes) before appending\n",
                path, size - keep);
    fclose(f);
    return rc;
}

/* For progress auto. Under mpirun a rank's stdout is a pseudo-terminal even
 * when mpirun's own output goes to a pipe or a file, so under a launcher only
 * UTRAIN_STDOUT_TTY=1 (set by --nproc when its stdout is a terminal) counts. */
static bool stdout_is_terminal(void) {
    if (!isatty(STDOUT_FILENO)) return false;
    bool launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
    const char *tty = getenv("UTRAIN_STDOUT_TTY");
    return !launched || (tty && !strcmp(tty, "1"));
}

int ut_runlog_open(ut_runlog *rl, const ut_config *cfg, ut_comm *comm, bool training, char *err, size_t n) {
    memset(rl, 0, sizeof *rl);
    rl->comm = comm;
    rl->rank = ut_comm_rank(comm);
    const char *p = cfg->progress;
    rl->bar = !strcmp(p, "bar") || (!strcmp(p, "auto") && stdout_is_terminal());
    rl->lines = !rl->bar && strcmp(p, "off");
    if (snprintf(rl->dir, sizeof rl->dir, "%s/%s", cfg->output_dir, cfg->experiment_name) >=
        (int)sizeof rl->dir) {
        snprintf(err, n, "output_dir/experiment_name is too long");
        return -1;
    }
    char sub[1280];
    const char *subs[] = {"logger_logs", "checkpoints", "tensorboard"};
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "%s/%s", rl->dir, subs[i]);
        if (ut_mkdirs(sub, err, n) || ut_check_own_dir(sub, err, n)) return -1;
    }
    if (training && lock_collective(rl, err, n)) return -1;
    char name[64];
    snprintf(name, sizeof name, "logger_logs/training_%d.log", rl->rank);
    if (!(rl->log = append_in(rl->dir, name, err, n))) return -1;
    if (rl->rank == 0 && training) {
        if (drop_torn_line(rl->dir, err, n) ||
            !(rl->metrics = append_in(rl->dir, "metrics.jsonl", err, n)))
            return -1;
        if (cfg->logging_dir[0]) { /* train.logging_dir */
            snprintf(sub, sizeof sub, "%s", cfg->logging_dir);
            if (ut_mkdirs(sub, err, n) || ut_check_own_dir(sub, err, n)) return -1;
        } else {
            snprintf(sub, sizeof sub, "%s/tensorboard", rl->dir);
        }
        if (!(rl->tb = ut_tb_open(sub, err, n))) return -1;
    }
    return 0;
}

int ut_runlog_rewind(ut_runlog *rl, int64_t step, char *err, size_t n) {
    /* TensorBoard: the steps after the checkpoint that earlier files hold
     * are dropped by the reader (a failed write is reported by the next
     * scalar's write, as any other) */
    if (rl->tb) ut_tb_restart(rl->tb, step + 1);
    if (!rl->metrics) return 0;
    char path[1280], tmp[1300];
    snprintf(path, sizeof path, "%s/metrics.jsonl", rl->dir);
    snprintf(tmp, sizeof tmp, "%s/metrics.jsonl.tmp", rl->dir);
    struct stat sb; /* a device (a test's /dev/full) is left alone; a link was refused at open */
    if (lstat(path, &sb) || !S_ISREG(sb.st_mode)) return 0;
    FILE *in = fopen(path, "rb");
    if (!in) return ut_errorf(err, n, "%s: cannot open: %s", path, strerror(errno));
    FILE *out = ut_fopen_write(tmp, false, err, n);
    if (!out) {
        fclose(in);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long dropped = 0;
    bool ok = true;
    while ((len = getline(&line, &cap, in)) > 0) {
        long long at;
        if (sscanf(line, "{\"step\": %lld,", &at) == 1 && at > step) {
            dropped++;
            continue;
        }
        ok = ok && fwrite(line, 1, (size_t)len, out) == (size_t)len;
    }
    free(line);
    ok = ok && !ferror(in) && !fflush(out) && !fsync(fileno(out));
    fclose(in);
    if (fclose(out)) ok = false;
    if (!dropped || !ok) {
        remove(tmp);
        return ok ? 0 : ut_errorf(err, n, "%s: cannot rewrite it: %s", tmp, strerror(errno));
    }
    fclose(rl->metrics);
    rl->metrics = NULL;
    if (rename(tmp, path)) return ut_errorf(err, n, "%s: cannot replace it: %s", path, strerror(errno));
    if (!(rl->metrics = append_in(rl->dir, "metrics.jsonl", err, n))) return -1;
    ut_note(rl, "metrics.jsonl: dropped %ld lines of steps after %lld (trained after the checkpoint and "
                "lost with that run; trained again now)\n",
            dropped, (long long)step);
    return 0;
}

void ut_runlog_close(ut_runlog *rl) {
    ut_progress_end(rl);
    if (rl->log) fclose(rl->log);
    if (rl->metrics) fclose(rl->metrics);
    if (rl->tb) ut_tb_close(rl->tb);
    if (rl->locked) close(rl->lock_fd);   /* releases the lock */
    memset(rl, 0, sizeof *rl);
}

static void record_failed(const ut_runlog *rl, const char *what, int errnum);

/* Every line of the message gets the timestamp (blank lines stay blank), so
 * a message printed in one call reads as whole lines in the file. */
static void vnote(ut_runlog *rl, const char *fmt, va_list ap) {
    if (!rl->log) return;
    char ts[32], small[2048], *msg = small;
    time_t now = time(NULL);
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", localtime(&now));
    va_list again;
    va_copy(again, ap);
    int len = vsnprintf(small, sizeof small, fmt, ap);
    if (len >= (int)sizeof small) {
        msg = ut_malloc_check((size_t)len + 1);
        vsnprintf(msg, (size_t)len + 1, fmt, again);
    }
    va_end(again);
    for (const char *p = msg; len > 0 && *p;) {
        const char *nl = strchr(p, '\n');
        int k = nl ? (int)(nl - p) : (int)strlen(p);
        if (k > 0) fprintf(rl->log, "[%s] %.*s", ts, k, p);
        if (!nl) break;
        fputc('\n', rl->log);
        p = nl + 1;
    }
    if (msg != small) ut_free(msg);
    if (fflush(rl->log) || ferror(rl->log)) {
        int e = errno;
        fclose(rl->log);
        rl->log = NULL;
        char name[64];
        snprintf(name, sizeof name, "logger_logs/training_%d.log", rl->rank);
        record_failed(rl, name, e);
    }
}

void ut_note(ut_runlog *rl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vnote(rl, fmt, ap);
    va_end(ap);
}

void ut_say(ut_runlog *rl, const char *fmt, ...) {
    va_list ap;
    if (rl->rank == 0) {
        ut_progress_end(rl);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        fflush(stdout);
    }
    va_start(ap, fmt);
    vnote(rl, fmt, ap);
    va_end(ap);
}

/* A write error in one of the run's records (the log file, metrics.jsonl,
 * TensorBoard) is reported once, naming what still records the run; the
 * failed one has been closed, and the run goes on without it (a resume cuts
 * off a torn metrics line). */
static void record_failed(const ut_runlog *rl, const char *what, int errnum) {
    char left[128] = "the console";
    if (rl->log) strcat(left, ", the log file");
    if (rl->metrics) strcat(left, ", metrics.jsonl");
    if (rl->tb) strcat(left, ", TensorBoard");
    fprintf(stderr, "utrain: warning: writing %s/%s failed (%s); it stops there, %s go%s on\n", rl->dir, what,
            strerror(errnum), left, strchr(left, ',') ? "" : "es");
}

static void tb_failed(ut_runlog *rl) {
    int e = errno;
    ut_tb_close(rl->tb);
    rl->tb = NULL;
    record_failed(rl, "tensorboard", e);
}

static void metrics_failed(ut_runlog *rl) {
    int e = errno;
    fclose(rl->metrics);
    rl->metrics = NULL;
    record_failed(rl, "metrics.jsonl", e);
}

/* JSON numbers cannot be nan/inf: those become null. */
static void json_number(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

static void metrics_line(ut_runlog *rl, const char *split, int64_t step, double epoch, int n,
                         const char *const *names, const double *values) {
    FILE *f = rl->metrics;
    fprintf(f, "{\"step\": %lld, \"epoch\": ", (long long)step);
    json_number(f, epoch);
    fprintf(f, ", \"split\": \"%s\"", split);
    for (int i = 0; i < n; i++) {
        fprintf(f, ", \"%s\": ", names[i]);
        json_number(f, values[i]);
    }
    fputs("}\n", f);
    if (fflush(f)) metrics_failed(rl);
}

void ut_log_scalars(ut_runlog *rl, const char *split, int64_t step, double epoch, int n,
                    const char *const *names, const double *values) {
    if (rl->rank != 0) return;
    if (rl->metrics) metrics_line(rl, split, step, epoch, n, names, values);
    char tag[96];
    for (int i = 0; rl->tb && i < n; i++) {
        snprintf(tag, sizeof tag, "%s/%s", split, names[i]);
        if (isfinite(values[i]) && ut_tb_scalar(rl->tb, tag, step, values[i])) tb_failed(rl);
    }
    if (rl->tb && ut_tb_flush(rl->tb)) tb_failed(rl);
}

static void fmt_time(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%02ld:%02ld", t / 60, t % 60);
}

void ut_progress(ut_runlog *rl, const char *mode, int64_t step, int64_t total, double rate,
                 const char *unit, double loss, double eta_s) {
    if (rl->rank != 0 || !rl->bar) return;
    const int width = 28;
    int filled = total > 0 ? (int)(width * (double)step / (double)total) : 0;
    if (filled > width) filled = width;
    char bar[64], eta[16];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    fmt_time(eta, sizeof eta, eta_s);
    printf("\r%s [%s] %lld/%lld  %.0f %s/s  loss %.4f  eta %s\033[K", mode, bar, (long long)step,
           (long long)total, rate, unit, loss, eta);
    fflush(stdout);
    rl->bar_active = true;
}

void ut_progress_end(ut_runlog *rl) {
    if (!rl->bar_active) return;
    printf("\r\033[K");
    fflush(stdout);
    rl->bar_active = false;
}
