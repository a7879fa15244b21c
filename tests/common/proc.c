/* Helpers for tests that run the `utrain` program (see proc.h). */
#include "proc.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "utrain/io.h"

static char program[1024];

void tp_set_program(const char *argv0) {
    snprintf(program, sizeof program, "%s", argv0);
    char *cut = strstr(program, "/tests/");
    if (cut) strcpy(cut, "/utrain");
}

const char *tp_program(void) { return program; }

static pid_t spawn(const char *const *args, const char *out_path, bool own_group) {
    pid_t pid = fork();
    if (pid == 0) {
        if (own_group) setpgid(0, 0);
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        const char *argv[256] = {program};
        int n = 1;
        for (; args[n - 1] && n < 255; n++) argv[n] = args[n - 1];
        argv[n] = NULL;
        execv(program, (char **)argv);
        _exit(127);
    }
    return pid;
}

pid_t tp_spawn(const char *const *args, const char *out_path) { return spawn(args, out_path, false); }
pid_t tp_spawn_group(const char *const *args, const char *out_path) { return spawn(args, out_path, true); }

int tp_wait(pid_t pid) {
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int tp_run(const char *const *args, const char *out_path) { return tp_wait(tp_spawn(args, out_path)); }

int tp_run_shown(const char *const *args, const char *out_path, int expect, const char *label) {
    int rc = tp_run(args, out_path);
    if (rc != expect) {
        char *s = tp_slurp(out_path);
        if (label) fprintf(stderr, "  %s exited %d:\n%s\n", label, rc, s ? s : "");
        else fprintf(stderr, "  utrain %s exited %d:\n%s\n", args[0], rc, s ? s : "");
        free(s);
    }
    return rc;
}

int tp_push_sets(const char **argv, int argc, int cap, char *sets) {
    for (char *tok = strtok(sets, " "); tok && argc + 2 < cap; tok = strtok(NULL, " ")) {
        argv[argc++] = "--set";
        argv[argc++] = tok;
    }
    argv[argc] = NULL;
    return argc;
}

const char *tp_path(const char *dir, const char *name) {
    static char buf[16][1024];
    static int k;
    k = (k + 1) % 16;
    char joined[1024]; /* dir may be the buffer about to be reused */
    snprintf(joined, sizeof joined, "%s/%s", dir, name);
    memcpy(buf[k], joined, sizeof joined);
    return buf[k];
}

char *tp_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

bool tp_copy_file(const char *from, const char *to) {
    size_t len = 0;
    char *data = NULL;
    FILE *in = fopen(from, "rb");
    if (in && !fseek(in, 0, SEEK_END)) {
        long end = ftell(in);
        if (end > 0 && !fseek(in, 0, SEEK_SET)) {
            data = malloc((size_t)end);
            len = data && fread(data, 1, (size_t)end, in) == (size_t)end ? (size_t)end : 0;
        }
    }
    if (in) fclose(in);
    FILE *o = len ? fopen(to, "wb") : NULL;
    bool ok = o && fwrite(data, 1, len, o) == len;
    if (o && fclose(o)) ok = false;
    free(data);
    return ok;
}

bool tp_plant_checkpoint(const char *from, const char *run_dir) {
    char dir[1100], to[1400];
    const char *base = strrchr(from, '/');
    snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    snprintf(to, sizeof to, "%s/%s", dir, base ? base + 1 : from);
    mkdir(run_dir, 0755);
    mkdir(dir, 0755);
    if (tp_copy_file(from, to)) return true;
    fprintf(stderr, "  cannot copy %s to %s\n", from, to);
    return false;
}

int tp_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len)) abort();
    close(fd);
    return ntohs(a.sin_port);
}

double tp_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int tp_each_proc(int (*fn)(pid_t pid, const char *cmdline, size_t len, void *arg), void *arg) {
    enum { CAP = 1 << 16 };
    DIR *d = opendir("/proc");
    char *cmd = malloc(CAP), path[300];
    int ret = 0;
    for (struct dirent *e; d && cmd && !ret && (e = readdir(d));) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == getpid()) continue;
        snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        size_t len = fread(cmd, 1, CAP - 1, f);
        fclose(f);
        cmd[len] = 0;
        if (len) ret = fn((pid_t)pid, cmd, len, arg);
    }
    if (d) closedir(d);
    free(cmd);
    return ret;
}

bool tp_cmdline_has(const char *cmdline, size_t len, const char *s) {
    for (size_t i = 0; i < len; i += strlen(cmdline + i) + 1)
        if (strstr(cmdline + i, s)) return true;
    return false;
}

int tp_count_lines(const char *path) {
    char *s = tp_slurp(path);
    int n = 0;
    for (char *p = s; p && *p; p++) n += *p == '\n';
    free(s);
    return n;
}

bool tp_same_weights(const char *a, const char *b) {
    char err[512];
    ut_st_file *fa = ut_st_open(a, err, sizeof err), *fb = ut_st_open(b, err, sizeof err);
    bool same = fa && fb && ut_st_count(fa) == ut_st_count(fb);
    for (int i = 0; same && i < ut_st_count(fa); i++) {
        const char *name = ut_st_name(fa, i);
        const ut_st_tensor *x = ut_st_get(fa, name), *y = ut_st_get(fb, name);
        same = y && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes);
    }
    if (fa) ut_st_close(fa);
    if (fb) ut_st_close(fb);
    return same;
}

double tp_weights_rel_diff(const char *a, const char *b) { return tp_tensors_rel_diff(a, b, "model."); }

double tp_tensors_rel_diff(const char *a, const char *b, const char *prefix) {
    return tp_tensors_diff(a, b, prefix, NULL, NULL, 0);
}

double tp_tensors_diff(const char *a, const char *b, const char *prefix, double *whole, char *worst_name, size_t n) {
    char err[512];
    ut_st_file *fa = ut_st_open(a, err, sizeof err), *fb = ut_st_open(b, err, sizeof err);
    double worst = fa && fb ? 0 : -1, ref_all = 0, diff_all = 0;
    if (worst_name && n) snprintf(worst_name, n, "-");
    for (int i = 0; worst >= 0 && i < ut_st_count(fa); i++) {
        const char *name = ut_st_name(fa, i);
        if (strncmp(name, prefix, strlen(prefix))) continue;
        const ut_st_tensor *x = ut_st_get(fa, name), *y = ut_st_get(fb, name);
        if (!y || y->nbytes != x->nbytes) {
            worst = -1;
            break;
        }
        const float *u = x->data, *v = y->data;
        double ref = 0, diff = 0;
        for (size_t k = 0; k < x->nbytes / 4; k++) {
            ref += (double)u[k] * u[k];
            diff += ((double)u[k] - v[k]) * ((double)u[k] - v[k]);
        }
        ref_all += ref, diff_all += diff;
        if (ref > 0 && sqrt(diff / ref) > worst) {
            worst = sqrt(diff / ref);
            if (worst_name && n) snprintf(worst_name, n, "%s", name);
        }
    }
    if (fa) ut_st_close(fa);
    if (fb) ut_st_close(fb);
    if (whole) *whole = worst >= 0 && ref_all > 0 ? sqrt(diff_all / ref_all) : -1;
    return worst;
}

double tp_loss_diff(const char *metrics_a, const char *metrics_b, int steps) {
    double worst = 0;
    for (int s = 1; s <= steps; s++) {
        char la[64] = "", lb[64] = "";
        if (!tp_loss_at(metrics_a, "train", s, la, sizeof la) || !tp_loss_at(metrics_b, "train", s, lb, sizeof lb))
            return 1e9;
        double x = strtod(la, NULL), y = strtod(lb, NULL);
        if (!isfinite(x) || !isfinite(y)) return 1e9;
        worst = fmax(worst, fabs(x - y) / fmax(fabs(x), 1e-12));
    }
    return worst;
}

bool tp_same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    for (int ca = 0, cb = 0; same && ca != EOF;) {
        ca = fgetc(fa);
        cb = fgetc(fb);
        same = ca == cb;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

int tp_train_in(const char *dir, const char *name, const char *body, const char *device, const char *sets,
                int nproc) {
    return tp_train_expect(dir, name, body, device, sets, nproc, 0);
}

int tp_train_expect(const char *dir, const char *name, const char *body, const char *device, const char *sets,
                    int nproc, int expect) {
    char cfg[512], out[512], dev[64], np[8];
    snprintf(cfg, sizeof cfg, "%s/%s.yml", dir, name);
    snprintf(out, sizeof out, "%s/%s.out", dir, name);
    FILE *f = fopen(cfg, "w");
    if (!f) return -1;
    fprintf(f, "experiment_name: %s\noutput_dir: %s/runs\nseed: 5\nthreads: 2\n%s", name, dir, body);
    fclose(f);
    snprintf(dev, sizeof dev, "device=%s", device);
    snprintf(np, sizeof np, "%d", nproc);
    const char *argv[32] = {"train", cfg, "--set", dev, "--nproc", np};
    char s[512];
    snprintf(s, sizeof s, "%s", sets);
    tp_push_sets(argv, 6, 32, s);
    return tp_run_shown(argv, out, expect, name);
}

const char *tp_run_file(const char *dir, const char *run, const char *leaf) {
    char rel[512];
    snprintf(rel, sizeof rel, "runs/%s/%s", run, leaf);
    return tp_path(dir, rel);
}

const char *tp_ckpt_file(const char *dir, const char *run, int step) {
    char leaf[64];
    snprintf(leaf, sizeof leaf, "checkpoints/step_%08d.safetensors", step);
    return tp_run_file(dir, run, leaf);
}

bool tp_loss_at(const char *metrics, const char *split, int step, char *out, size_t n) {
    char *s = tp_slurp(metrics), key[64], want[64];
    snprintf(key, sizeof key, "{\"step\": %d, ", step);
    snprintf(want, sizeof want, "\"split\": \"%s\"", split);
    bool found = false;
    for (char *line = s ? strstr(s, key) : NULL; line && !found; line = strstr(line + 1, key)) {
        char *end = strchr(line, '\n'), *l = strstr(line, "\"loss\": "), *sp = strstr(line, want);
        if (!sp || !l || (end && (l > end || sp > end))) continue;
        l += 8;
        size_t k = strcspn(l, ",}");
        snprintf(out, n, "%.*s", (int)k, l);
        found = true;
    }
    free(s);
    return found;
}

double tp_json_number(const char *s, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *at = s ? strstr(s, k) : NULL;
    return at ? atof(at + strlen(k)) : NAN;
}

bool tp_make_tmpdir(char *buf, size_t n, const char *prefix) {
    snprintf(buf, n, "/tmp/%s-XXXXXX", prefix);
    return mkdtemp(buf) != NULL;
}

int tp_finish(int rc, const char *dir) {
    if (rc) {
        fprintf(stderr, "kept %s for inspection\n", dir);
        return rc;
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) ? 1 : 0;
}

void tp_mpi_env(bool shared_memory) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    if (shared_memory) setenv("OMPI_MCA_btl", "self,vader", 1);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);
    char asan[512];
    const char *a = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%sdetect_leaks=0", a ? a : "", a && *a ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
}

bool tp_write_pairs(const char *dir, const char *split, int most) {
    char path[600], src[700], tgt[700], line[1024];
    snprintf(path, sizeof path, "data/sst2_sample/%s.tsv", split);
    snprintf(src, sizeof src, "%s/%s_inputs.txt", dir, split);
    snprintf(tgt, sizeof tgt, "%s/%s_targets.txt", dir, split);
    FILE *in = fopen(path, "r"), *fs = fopen(src, "w"), *ft = fopen(tgt, "w");
    bool ok = in && fs && ft && fgets(line, sizeof line, in); /* the header */
    for (int k = 0; ok && k < most && fgets(line, sizeof line, in); k++) {
        char *tab = strchr(line, '\t');
        if (tab) *tab = 0;
        fprintf(fs, "%s\n", line);
        int words = 0;
        char *save = NULL;
        for (char *w = strtok_r(line, " ", &save); w && words < 4; w = strtok_r(NULL, " ", &save), words++)
            fprintf(ft, "%s%s", words ? " " : "", w);
        fputc('\n', ft);
    }
    if (in) fclose(in);
    if (fs) ok = fclose(fs) == 0 && ok;
    if (ft) ok = fclose(ft) == 0 && ok;
    return ok;
}

bool tp_tokenize_sample(const char *dir, char *shard, size_t n) {
    char out[600];
    snprintf(shard, n, "%s/text.bin", dir);
    snprintf(out, sizeof out, "%s/tokenize.out", dir);
    return tp_run((const char *[]){"tokenize", "--tokenizer", "byte", "data/sst2_sample/train.tsv", shard,
                                   NULL},
                  out) == 0;
}
