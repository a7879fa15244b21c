/* The run directory and everything written into it while training: the log
 * file, metrics.jsonl, TensorBoard scalars, and the console progress. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
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

static FILE *open_in(const char *dir, const char *name, const char *mode, char *err, size_t n) {
    char path[1280];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, mode);
    if (!f) snprintf(err, n, "%s: cannot open: %s", path, strerror(errno));
    return f;
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

int ut_runlog_open(ut_runlog *rl, const ut_config *cfg, int rank, bool training, char *err, size_t n) {
    memset(rl, 0, sizeof *rl);
    rl->rank = rank;
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
        if (ut_mkdirs(sub, err, n)) return -1;
    }
    char name[64];
    snprintf(name, sizeof name, "logger_logs/training_%d.log", rank);
    if (!(rl->log = open_in(rl->dir, name, "a", err, n))) return -1;
    if (rank == 0 && training) {
        if (!(rl->metrics = open_in(rl->dir, "metrics.jsonl", "a", err, n))) return -1;
        snprintf(sub, sizeof sub, "%s/tensorboard", rl->dir);
        if (!(rl->tb = ut_tb_open(sub, err, n))) return -1;
    }
    return 0;
}

void ut_runlog_close(ut_runlog *rl) {
    ut_progress_end(rl);
    if (rl->log) fclose(rl->log);
    if (rl->metrics) fclose(rl->metrics);
    if (rl->tb) ut_tb_close(rl->tb);
    memset(rl, 0, sizeof *rl);
}

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
    fflush(rl->log);
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

/* A TensorBoard write error is reported once; the run goes on without it. */
static void tb_failed(ut_runlog *rl) {
    fprintf(stderr, "utrain: warning: writing the TensorBoard file in %s/tensorboard failed (%s); "
                    "TensorBoard logging stops, metrics.jsonl continues\n", rl->dir, strerror(errno));
    ut_tb_close(rl->tb);
    rl->tb = NULL;
}

/* JSON numbers cannot be nan/inf: those become null. */
static void json_number(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

void ut_log_scalars(ut_runlog *rl, const char *split, int64_t step, double epoch, int n,
                    const char *const *names, const double *values) {
    if (rl->rank != 0 || !rl->metrics) return;
    fprintf(rl->metrics, "{\"step\": %lld, \"epoch\": ", (long long)step);
    json_number(rl->metrics, epoch);
    fprintf(rl->metrics, ", \"split\": \"%s\"", split);
    char tag[96];
    for (int i = 0; i < n; i++) {
        fprintf(rl->metrics, ", \"%s\": ", names[i]);
        json_number(rl->metrics, values[i]);
        snprintf(tag, sizeof tag, "%s/%s", split, names[i]);
        if (rl->tb && isfinite(values[i]) && ut_tb_scalar(rl->tb, tag, step, values[i])) tb_failed(rl);
    }
    fputs("}\n", rl->metrics);
    if (fflush(rl->metrics))
        fprintf(stderr, "utrain: warning: writing %s/metrics.jsonl failed: %s\n", rl->dir, strerror(errno));
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
