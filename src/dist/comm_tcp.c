/* The TCP backend: ranks started without MPI, by torchrun, Accelerate,
 * Kubernetes' PyTorchJob or by hand, each with RANK, WORLD_SIZE,
 * MASTER_ADDR and MASTER_PORT in its environment.
 *
 * Start-up (the rendezvous). Every rank opens a listening socket on a port
 * of its own and learns every other rank's address and port:
 *  - under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) through the
 *    launcher's key-value store at MASTER_ADDR:MASTER_PORT, the c10d
 *    TCPStore wire protocol: each rank sets "utrain/<restart>/<rank>" to
 *    its "host port" and waits for the others' keys;
 *  - otherwise rank 0 listens at MASTER_ADDR:MASTER_PORT, the others connect
 *    and say who they are, and rank 0 answers each with the whole table.
 * Then every pair of ranks connects twice (the higher rank calls the lower):
 * one socket for collectives, one for sends and receives, so a pipeline's
 * messages never wait behind a collective's.
 *
 * Collectives run on one thread per communicator, in issue order, as rings:
 * a reduction is a reduce-scatter (each rank ends with one segment reduced
 * over all ranks) then an all-gather of the segments, so every rank gets
 * the same bits and each rank sends and receives about 2(P-1)/P of the
 * buffer. A step sends to the next rank while it receives from the previous
 * one (poll on both sockets), combining what arrives as it arrives; the
 * first message of each collective opens with its header (kind, sequence
 * number, size), which the receiver checks before it touches the data.
 * Sends and receives run on a second thread that moves whichever of them can
 * move, oldest first per peer and direction (MPI's order).
 *
 * Failures end the operation, not the process: a peer that closes its
 * connection (it exited or was killed) or an operation that runs past the
 * communicator's timeout fails with a message naming the operation, its
 * sequence number and the rank it waited for; the communicator is unusable
 * after that, and the caller (the trainer) exits, which closes its sockets
 * and so ends the ranks still waiting on it. Process groups
 * (ut_comm_split) build a mesh of their own over fresh sockets. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"

#define TCP_MAGIC 0x75747470u   /* hello messages: "uttp" */
#define TCP_VERSION 1u
#define TCP_PIECE (4u << 20)     /* bytes per send call, and a broadcast's pipeline piece */

/* The world's addresses, by world rank: where a rank's listening sockets
 * are reached (process groups connect to them on ports made for each
 * split). Set once by ut_comm_tcp_init. */
typedef struct tcp_host {
    char host[96];
    uint32_t port;
} tcp_host;
static tcp_host *world_hosts;
static int world_nhosts;

typedef struct tcp_impl {
    int *coll, *p2p; /* [size]: a socket to each other rank (-1 for this rank) */
    int wake;        /* eventfd: new sends and receives for the p2p thread */
    ut_comm_queue q; /* the operations; its mutex also guards the fields below */
    /* sends and receives handed to the p2p thread, oldest first */
    uint64_t pend[UT_COMM_QUEUE];
    int npend;
    int64_t moved[UT_COMM_QUEUE];   /* bytes moved, by seq % UT_COMM_QUEUE */
    double since[UT_COMM_QUEUE];    /* when it was handed over */
    bool p2p_stop;
    pthread_t thread, p2p_thread;
    char *scratch; /* the collective thread's */
    size_t scratch_n;
} tcp_impl;

/* The text of the last failure, per thread (the collective thread's, the
 * p2p thread's, the initialising thread's). */
static _Thread_local char tcp_err[400];

static void why(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void why(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tcp_err, sizeof tcp_err, fmt, ap);
    va_end(ap);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Milliseconds to the deadline for poll (0 = none: -1, wait for ever). */
static int ms_left(double deadline) {
    if (deadline <= 0) return -1;
    double s = deadline - now_s();
    return s <= 0 ? 0 : s > 1e6 ? 1000000000 : (int)(s * 1000) + 1;
}

static void set_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// --- addresses and sockets ------------------------------------------------------

/* The numeric host of a socket address ("10.0.0.3", "::1"), IPv4-mapped
 * IPv6 addresses written as IPv4. */
static void host_of(const struct sockaddr_storage *a, char *buf, size_t n) {
    char tmp[INET6_ADDRSTRLEN + 8] = "?";
    if (a->ss_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, tmp, sizeof tmp);
    } else if (a->ss_family == AF_INET6) {
        const struct in6_addr *x = &((const struct sockaddr_in6 *)a)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(x)) inet_ntop(AF_INET, &x->s6_addr[12], tmp, sizeof tmp);
        else inet_ntop(AF_INET6, x, tmp, sizeof tmp);
    }
    snprintf(buf, n, "%s", tmp);
}

static bool is_loopback(const char *host) { return !strncmp(host, "127.", 4) || !strcmp(host, "::1"); }

/* UTRAIN_SOCKET_IFNAME (or Gloo's GLOO_SOCKET_IFNAME, which torchrun users
 * set for the same reason): the interface whose address the other ranks
 * reach this one by. 0 with the address in host, 1 when neither is set, -1
 * with why() when the interface has no address. */
static int interface_host(char *host, size_t n) {
    const char *name = getenv("UTRAIN_SOCKET_IFNAME"), *var = "UTRAIN_SOCKET_IFNAME";
    if (!name || !*name) name = getenv("GLOO_SOCKET_IFNAME"), var = "GLOO_SOCKET_IFNAME";
    if (!name || !*name) return 1;
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all)) {
        why("getifaddrs: %s", strerror(errno));
        return -1;
    }
    char v6[100] = "", names[300] = "";
    bool v4 = false;
    for (struct ifaddrs *a = all; a; a = a->ifa_next) {
        if (!a->ifa_addr || (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6)) continue;
        if (!strstr(names, a->ifa_name) && strlen(names) + strlen(a->ifa_name) + 3 < sizeof names)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", *names ? ", " : "", a->ifa_name);
        if (strcmp(a->ifa_name, name)) continue;
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        memcpy(&ss, a->ifa_addr, a->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                    : sizeof(struct sockaddr_in6));
        if (a->ifa_addr->sa_family == AF_INET && !v4) {
            host_of(&ss, host, n);
            v4 = true;
        } else if (a->ifa_addr->sa_family == AF_INET6 && !*v6 &&
                   !IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)&ss)->sin6_addr)) {
            host_of(&ss, v6, sizeof v6);
        }
    }
    freeifaddrs(all);
    if (!v4 && *v6) snprintf(host, n, "%s", v6);
    if (!v4 && !*v6) {
        why("%s is '%s', which is not an interface with an address here (this machine has: %s)", var, name, names);
        return -1;
    }
    return 0;
}

static int port_of(int fd) {
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &len)) return -1;
    return a.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&a)->sin_port)
                                  : ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
}

/* A listening socket on every interface (IPv6 and IPv4 where the machine
 * has IPv6, else IPv4), at port (0: any free port). */
static int listen_on(int port) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, zero = 0;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = in6addr_any};
        if (!bind(fd, (struct sockaddr *)&a, sizeof a) && !listen(fd, 1024)) return fd;
        int e = errno;
        close(fd);
        if (e != EAFNOSUPPORT && e != EADDRNOTAVAIL) {
            why("%s", strerror(e));
            return -1;
        }
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        why("socket: %s", strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 1024)) {
        why("%s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Connects to host:port, trying again every 100 ms while nobody listens
 * there yet (the other side may start later) until the deadline. */
static int connect_to(const char *host, int port, double deadline) {
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, ports, &hints, &res);
    if (rc) {
        why("cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int last = 0;
    for (;;) {
        for (struct addrinfo *a = res; a; a = a->ai_next) {
            int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (fd < 0) continue;
            if (!connect(fd, a->ai_addr, a->ai_addrlen)) {
                freeaddrinfo(res);
                set_nodelay(fd);
                return fd;
            }
            last = errno;
            close(fd);
        }
        bool retry = last == ECONNREFUSED || last == ETIMEDOUT || last == EHOSTUNREACH || last == ENETUNREACH ||
                     last == EAGAIN || last == EINTR;
        if (!retry || (deadline > 0 && now_s() > deadline)) break;
        struct timespec t = {0, 100 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    freeaddrinfo(res);
    why("cannot connect to %s:%d: %s", host, port, strerror(last));
    return -1;
}

/* Writes (out) or reads all n bytes before the deadline (blocking
 * sockets, poll for the time limit). who names the other side in messages. */
static int move_all(int fd, void *buf, size_t n, double deadline, const char *who, bool out) {
    char *p = buf;
    while (n) {
        struct pollfd q = {.fd = fd, .events = out ? POLLOUT : POLLIN};
        int k = poll(&q, 1, ms_left(deadline));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            why(k ? "poll: %s" : out ? "timed out writing to %s" : "timed out waiting for %s",
                k ? strerror(errno) : who);
            return -1;
        }
        ssize_t g = out ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, n, MSG_DONTWAIT);
        if (g < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (g == 0 && !out) {
            why("%s closed the connection", who);
            return -1;
        }
        if (g < 0) {
            why("%s %s: %s", out ? "writing to" : "reading from", who, strerror(errno));
            return -1;
        }
        p += g;
        n -= (size_t)g;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t n, double deadline, const char *who) {
    return move_all(fd, (void *)buf, n, deadline, who, true);
}

static int read_all(int fd, void *buf, size_t n, double deadline, const char *who) {
    return move_all(fd, buf, n, deadline, who, false);
}

static int accept_until(int listener, double deadline, const char *what) {
    for (;;) {
        struct pollfd q = {.fd = listener, .events = POLLIN};
        int k = poll(&q, 1, ms_left(deadline));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            why(k ? "poll: %s" : "timed out waiting for %s to connect", k ? strerror(errno) : what);
            return -1;
        }
        int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            set_nodelay(fd);
            return fd;
        }
        if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) {
            why("accept: %s", strerror(errno));
            return -1;
        }
    }
}

// --- the mesh: two sockets between every pair of ranks ------------------------------

typedef struct hello {
    uint32_t magic, version, rank, size, channel, tag;
} hello;

/* Rank me of size connects to every lower rank (at hosts[r]) and accepts
 * every higher one on listener; each pair gets a collective socket (channel
 * 0) and a send/receive socket (channel 1). tag tells meshes apart (0 for
 * the world, the split's sequence number for a group). */
static int build_mesh(int listener, int me, int size, const tcp_host *hosts, uint32_t tag, int *coll, int *p2p,
                      double deadline) {
    for (int r = 0; r < size; r++) coll[r] = p2p[r] = -1;
    char who[64];
    for (int r = 0; r < me; r++)
        for (uint32_t ch = 0; ch < 2; ch++) {
            int fd = connect_to(hosts[r].host, (int)hosts[r].port, deadline);
            if (fd < 0) return -1;
            (ch ? p2p : coll)[r] = fd;
            hello h = {TCP_MAGIC, TCP_VERSION, (uint32_t)me, (uint32_t)size, ch, tag};
            snprintf(who, sizeof who, "rank %d", r);
            if (write_all(fd, &h, sizeof h, deadline, who)) return -1;
        }
    for (int k = 0; k < 2 * (size - 1 - me); k++) {
        int fd = accept_until(listener, deadline, "the higher ranks");
        if (fd < 0) return -1;
        hello h;
        if (read_all(fd, &h, sizeof h, deadline, "a connecting rank")) {
            close(fd);
            return -1;
        }
        if (h.magic != TCP_MAGIC || h.version != TCP_VERSION || h.tag != tag || h.size != (uint32_t)size ||
            h.rank <= (uint32_t)me || h.rank >= (uint32_t)size || h.channel > 1 ||
            (h.channel ? p2p : coll)[h.rank] >= 0) {
            why("a connection that is not a rank of this job (magic %08x, rank %u of %u, channel %u)", h.magic, h.rank,
                h.size, h.channel);
            close(fd);
            return -1;
        }
        (h.channel ? p2p : coll)[h.rank] = fd;
    }
    return 0;
}

static void close_mesh(int *coll, int *p2p, int size) {
    for (int r = 0; r < size; r++) {
        if (coll && coll[r] >= 0) close(coll[r]);
        if (p2p && p2p[r] >= 0) close(p2p[r]);
    }
}

// --- the c10d TCPStore client (torchrun's store) ------------------------------------

enum { STORE_VALIDATE = 0, STORE_SET = 1, STORE_GET = 3, STORE_CHECK = 5, STORE_WAIT = 6 };
#define STORE_MAGIC 0x3C85F7CEu

typedef struct {
    char buf[512];
    size_t n;
} store_msg;

static void put(store_msg *m, const void *p, size_t k) {
    UT_ASSERT(m->n + k <= sizeof m->buf);
    memcpy(m->buf + m->n, p, k);
    m->n += k;
}

/* A string or byte vector on the wire: its length as uint64, then the bytes. */
static void put_str(store_msg *m, const char *s, size_t k) {
    uint64_t len = k;
    put(m, &len, sizeof len);
    put(m, s, k);
}

static int store_set(int fd, const char *key, const char *value, double deadline) {
    store_msg m = {.n = 0};
    uint8_t q = STORE_SET;
    put(&m, &q, 1);
    put_str(&m, key, strlen(key));
    put_str(&m, value, strlen(value));
    return write_all(fd, m.buf, m.n, deadline, "the launcher's store");
}

/* Waits until key is set (WAIT, one key), then reads it (GET) into value.
 * The two go one after the other: the store answers a GET at once, set or
 * not, even behind a WAIT still waiting. */
static int store_get(int fd, const char *key, char *value, size_t vn, double deadline) {
    store_msg m = {.n = 0};
    uint8_t q = STORE_WAIT;
    uint64_t one = 1;
    put(&m, &q, 1);
    put(&m, &one, sizeof one);
    put_str(&m, key, strlen(key));
    uint8_t stop = 1;
    uint64_t len = 0;
    if (write_all(fd, m.buf, m.n, deadline, "the launcher's store") ||
        read_all(fd, &stop, 1, deadline, ut_fmt("the launcher's store (key %s)", key)))
        return -1;
    m.n = 0;
    q = STORE_GET;
    put(&m, &q, 1);
    put_str(&m, key, strlen(key));
    if (write_all(fd, m.buf, m.n, deadline, "the launcher's store") ||
        read_all(fd, &len, sizeof len, deadline, "the launcher's store"))
        return -1;
    if (stop != 0 || len >= vn) {
        why("the launcher's store answered %s to key %s (%" PRIu64 " bytes)", stop ? "'wait canceled'" : "too much",
            key, len);
        return -1;
    }
    if (read_all(fd, value, (size_t)len, deadline, "the launcher's store")) return -1;
    value[len] = 0;
    return 0;
}

// --- the rendezvous -----------------------------------------------------------------

static bool spans_nodes(void);

typedef struct launch_env {
    int rank, size, port;
    char master[256];
    bool agent_store;
    char restart[24];
    double wait_s; /* the rendezvous' wait (0: none given yet; then none at all) */
} launch_env;

static int env_int(const char *name, long lo, long hi, long *out, char *err, size_t n) {
    const char *v = getenv(name);
    char *end;
    if (!v || !*v) return ut_errorf(err, n, "%s is not set (ranks started without MPI need RANK, WORLD_SIZE, "
                                            "MASTER_ADDR and MASTER_PORT)", name);
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return ut_errorf(err, n, "%s is '%s': it must be a whole number from %ld to %ld", name, v, lo, hi);
    *out = x;
    return 0;
}

bool ut_comm_tcp_launched(void) {
    const char *w = getenv("WORLD_SIZE"), *r = getenv("RANK");
    return w && *w && r && *r && strcmp(w, "1") != 0;
}

static int read_env(launch_env *e, char *err, size_t n) {
    long size, rank, port;
    if (env_int("WORLD_SIZE", 1, 1 << 20, &size, err, n) || env_int("RANK", 0, size - 1, &rank, err, n) ||
        env_int("MASTER_PORT", 1, 65535, &port, err, n))
        return -1;
    /* how long the ranks wait for each other at the start: UTRAIN_RENDEZVOUS_TIMEOUT seconds,
     * else the collectives' timeout, at least a minute (ranks that start late) */
    e->wait_s = 0;
    if (getenv("UTRAIN_RENDEZVOUS_TIMEOUT")) {
        long w;
        if (env_int("UTRAIN_RENDEZVOUS_TIMEOUT", 1, 1L << 30, &w, err, n)) return -1;
        e->wait_s = (double)w;
    }
    const char *m = getenv("MASTER_ADDR");
    if (!m || !*m) return ut_errorf(err, n, "MASTER_ADDR is not set (the address of the node of rank 0)");
    if (strlen(m) >= sizeof e->master) return ut_errorf(err, n, "MASTER_ADDR is too long");
    e->rank = (int)rank, e->size = (int)size, e->port = (int)port;
    snprintf(e->master, sizeof e->master, "%s", m);
    const char *a = getenv("TORCHELASTIC_USE_AGENT_STORE");
    e->agent_store = a && (!strcmp(a, "True") || !strcmp(a, "true") || !strcmp(a, "1"));
    const char *rc = getenv("TORCHELASTIC_RESTART_COUNT");
    snprintf(e->restart, sizeof e->restart, "%.20s", rc && *rc ? rc : "0");
    return 0;
}

/* The store key under which rank r of this attempt leaves its address */
static void store_key(char *key, size_t n, const launch_env *e, int r) { snprintf(key, n, "utrain/%s/%d", e->restart, r); }

/* A connection to the store at MASTER_ADDR:MASTER_PORT that has said hello
 * (VALIDATE with the store's magic); -1 with why() set */
static int store_open(const launch_env *e, double deadline) {
    int fd = connect_to(e->master, e->port, deadline);
    if (fd < 0) return -1;
    store_msg m = {.n = 0};
    uint8_t q = STORE_VALIDATE;
    uint32_t magic = STORE_MAGIC;
    put(&m, &q, 1);
    put(&m, &magic, sizeof magic);
    if (write_all(fd, m.buf, m.n, deadline, "the launcher's store")) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Adds rank r, the missing-th missing one, to a list of the first 8 */
static void list_rank(char *list, size_t ln, int *used, int missing, int r) {
    if (*used >= (int)ln || missing > 9) return;
    *used += missing <= 8 ? snprintf(list + *used, ln - (size_t)*used, "%s%d", missing > 1 ? ", " : "", r)
                          : snprintf(list + *used, ln - (size_t)*used, ", ...");
}

/* After the wait for rank `from`'s key timed out: which ranks from `from` on
 * have not set their keys (CHECK, on a new connection: the old one still
 * has its WAIT queued), named in tcp_err after what it said */
static void store_name_missing(const launch_env *e, int from) {
    char first[sizeof tcp_err], list[160] = "";
    snprintf(first, sizeof first, "%s", tcp_err);
    double by = now_s() + 5;
    int fd = store_open(e, by), missing = 0, used = 0;
    for (int r = from; fd >= 0 && r < e->size; r++) {
        char key[96];
        store_key(key, sizeof key, e, r);
        store_msg m = {.n = 0};
        uint8_t q = STORE_CHECK, ready = 1;
        uint64_t one = 1;
        put(&m, &q, 1);
        put(&m, &one, sizeof one);
        put_str(&m, key, strlen(key));
        if (write_all(fd, m.buf, m.n, by, "the launcher's store") ||
            read_all(fd, &ready, 1, by, "the launcher's store")) {
            missing = -1;
            break;
        }
        if (ready != 0) list_rank(list, sizeof list, &used, ++missing, r); /* 0: READY, 1: NOT_READY */
    }
    if (fd >= 0) close(fd);
    if (missing > 0)
        why("%s; %d of %d ranks did not arrive (rank%s %s) within %.0f s (UTRAIN_RENDEZVOUS_TIMEOUT sets the wait)",
            first, missing, e->size, missing > 1 ? "s" : "", list, e->wait_s);
    else snprintf(tcp_err, sizeof tcp_err, "%s", first);
}

/* Through torchrun's store: this rank's "host port" under its key, then
 * every rank's. The host is this machine's address on the route to the
 * store, which the other ranks reach it by. */
static int rendezvous_store(const launch_env *e, int my_port, tcp_host *hosts, double deadline) {
    int fd = store_open(e, deadline);
    if (fd < 0) return -1;
    int rc = -1;
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    char hs[100], key[96], value[160];
    if (getsockname(fd, (struct sockaddr *)&a, &len)) {
        why("getsockname: %s", strerror(errno));
        goto out;
    }
    host_of(&a, hs, sizeof hs);
    int ifh = interface_host(hs, sizeof hs);
    if (ifh < 0) goto out;
    if (ifh && is_loopback(hs) && spans_nodes()) {
        why("this rank would be reached at %s, a loopback address (the route to MASTER_ADDR %s stays on this "
            "machine), but the job spans nodes: set UTRAIN_SOCKET_IFNAME to the interface the nodes share "
            "(`ip -brief addr` lists them)", hs, e->master);
        goto out;
    }
    store_key(key, sizeof key, e, e->rank);
    snprintf(value, sizeof value, "%s %d", hs, my_port);
    if (store_set(fd, key, value, deadline)) goto out;
    for (int r = 0; r < e->size; r++) {
        store_key(key, sizeof key, e, r);
        unsigned port = 0;
        if (store_get(fd, key, value, sizeof value, deadline)) {
            if (deadline > 0 && now_s() >= deadline) store_name_missing(e, r);
            goto out;
        }
        if (sscanf(value, "%95s %u", hosts[r].host, &port) != 2 || port == 0 || port > 65535) {
            why("the launcher's store holds '%s' under %s, not 'host port'", value, key);
            goto out;
        }
        hosts[r].port = port;
    }
    rc = 0;
out:
    close(fd);
    return rc;
}

/* LOCAL_WORLD_SIZE below WORLD_SIZE: ranks on other machines. */
static bool spans_nodes(void) {
    const char *l = getenv("LOCAL_WORLD_SIZE"), *w = getenv("WORLD_SIZE");
    return l && w && atol(l) > 0 && atol(l) < atol(w);
}

typedef struct rdzv_hello {
    uint32_t magic, version, rank, size, port;
    char host[96]; /* UTRAIN_SOCKET_IFNAME's address, or "" (rank 0 takes the connection's) */
} rdzv_hello;

/* Without a launcher's store: rank 0 listens at MASTER_ADDR:MASTER_PORT and
 * hands every rank the table of addresses (each rank's host as rank 0 sees
 * its connection come from; rank 0's own as the others reached it). */
static int rendezvous_own(const launch_env *e, int my_port, tcp_host *hosts, double deadline, char *err, size_t n) {
    rdzv_hello h = {TCP_MAGIC, TCP_VERSION, (uint32_t)e->rank, (uint32_t)e->size, (uint32_t)my_port, ""};
    char own[96] = "";
    int ifh = interface_host(own, sizeof own);
    if (ifh < 0) return ut_errorf(err, n, "rank %d: %s", e->rank, tcp_err);
    if (!ifh) snprintf(h.host, sizeof h.host, "%s", own);
    if (e->rank != 0) {
        int fd = connect_to(e->master, e->port, deadline);
        if (fd < 0)
            return ut_errorf(err, n, "cannot reach rank 0 at MASTER_ADDR:MASTER_PORT within %.0f s: %s "
                             "(UTRAIN_RENDEZVOUS_TIMEOUT sets the wait)", e->wait_s, tcp_err);
        int rc = write_all(fd, &h, sizeof h, deadline, "rank 0") ||
                 read_all(fd, hosts, (size_t)e->size * sizeof *hosts, deadline, "rank 0's table of ranks");
        close(fd);
        if (rc) return ut_errorf(err, n, "rendezvous with rank 0 at %s:%d: %s", e->master, e->port, tcp_err);
        for (int r = 0; r < e->size; r++) hosts[r].host[sizeof hosts[r].host - 1] = 0;
        return 0;
    }
    int lfd = listen_on(e->port);
    if (lfd < 0)
        return ut_errorf(err, n,
                         "rank 0 cannot listen on MASTER_PORT %d: %s (another job or program uses that port: "
                         "give the job another MASTER_PORT)",
                         e->port, tcp_err);
    int *fds = ut_malloc_check((size_t)e->size * sizeof *fds);
    for (int r = 0; r < e->size; r++) fds[r] = -1;
    int rc = -1;
    for (int k = 1; k < e->size; k++) {
        int fd = accept_until(lfd, deadline, ut_fmt("the other %d ranks", e->size - k));
        if (fd < 0) {
            /* the ranks that did not come, by number (the first few) */
            char list[160] = "";
            int missing = 0, used = 0;
            for (int r = 1; r < e->size; r++)
                if (fds[r] < 0) list_rank(list, sizeof list, &used, ++missing, r);
            ut_errorf(err, n,
                      "rendezvous at MASTER_PORT %d: %s; %d of %d ranks did not arrive (rank%s %s) within %.0f s "
                      "(UTRAIN_RENDEZVOUS_TIMEOUT sets the wait)",
                      e->port, tcp_err, missing, e->size - 1, missing > 1 ? "s" : "", list, e->wait_s);
            goto out;
        }
        rdzv_hello g;
        struct sockaddr_storage a, me;
        socklen_t alen = sizeof a, mlen = sizeof me;
        /* a connection that says nothing within 10 s is not a rank (a health check, a port scan) */
        double hello_by = deadline > 0 && deadline < now_s() + 10 ? deadline : now_s() + 10;
        if (read_all(fd, &g, sizeof g, hello_by, "a connecting rank") || getpeername(fd, (struct sockaddr *)&a, &alen) ||
            getsockname(fd, (struct sockaddr *)&me, &mlen)) {
            close(fd);
            k--; /* not a rank: a port scanner, a health check */
            continue;
        }
        if (g.magic != TCP_MAGIC || g.version != TCP_VERSION) {
            close(fd);
            k--;
            continue;
        }
        if (g.size != (uint32_t)e->size) {
            close(fd);
            ut_errorf(err, n, "rank %u says WORLD_SIZE is %u; rank 0 has %d: start every rank with the same WORLD_SIZE",
                      g.rank, g.size, e->size);
            goto out;
        }
        if (g.rank == 0 || g.rank >= (uint32_t)e->size || fds[g.rank] >= 0) {
            close(fd);
            ut_errorf(err, n, "two processes say they are rank %u: give each process its own RANK from 0 to %d",
                      g.rank, e->size - 1);
            goto out;
        }
        fds[g.rank] = fd;
        g.host[sizeof g.host - 1] = 0;
        if (g.host[0]) snprintf(hosts[g.rank].host, sizeof hosts[g.rank].host, "%s", g.host);
        else host_of(&a, hosts[g.rank].host, sizeof hosts[g.rank].host);
        hosts[g.rank].port = g.port;
        /* rank 0's own address: as a rank on another machine reached it, if any did */
        char here[96];
        host_of(&me, here, sizeof here);
        if (!*hosts[0].host || (is_loopback(hosts[0].host) && !is_loopback(here)))
            snprintf(hosts[0].host, sizeof hosts[0].host, "%s", here);
    }
    if (*own) snprintf(hosts[0].host, sizeof hosts[0].host, "%s", own);
    hosts[0].port = (uint32_t)my_port;
    /* ranks that reached rank 0 over loopback share its machine: the others
     * reach them at rank 0's address */
    char h0[sizeof hosts[0].host];
    memcpy(h0, hosts[0].host, sizeof h0);
    for (int r = 1; r < e->size; r++)
        if (is_loopback(hosts[r].host) && !is_loopback(h0)) memcpy(hosts[r].host, h0, sizeof h0);
    for (int r = 1; r < e->size; r++)
        if (write_all(fds[r], hosts, (size_t)e->size * sizeof *hosts, deadline, ut_fmt("rank %d", r))) {
            ut_errorf(err, n, "rendezvous: %s", tcp_err);
            goto out;
        }
    rc = 0;
out:
    for (int r = 0; r < e->size; r++)
        if (fds[r] >= 0) close(fds[r]);
    ut_free(fds);
    close(lfd);
    return rc;
}

// --- the collectives ------------------------------------------------------------------

/* What the ring combines: the element type and operation of a reduction. */
typedef struct reduce_kind {
    ut_dtype dt; /* UT_F32, UT_BF16, UT_F16; for the 8-byte sums, UT_F32 with wide set */
    int wide;    /* 0, 1: float64 sum, 2: int64 sum */
    ut_reduce_op op;
} reduce_kind;

static size_t kind_size(reduce_kind k) { return k.wide ? 8 : ut_dtype_size(k.dt); }

/* inout[i] = op(in[i], inout[i]) */
static void reduce_into(reduce_kind k, const void *in, void *inout, int64_t len) {
    if (k.wide == 1) {
        const double *a = in;
        double *b = inout;
        for (int64_t i = 0; i < len; i++) b[i] += a[i];
    } else if (k.wide == 2) {
        const int64_t *a = in;
        int64_t *b = inout;
        for (int64_t i = 0; i < len; i++) b[i] += a[i];
    } else if (k.dt == UT_F32 && k.op != UT_REDUCE_MAX) {
        const float *a = in;
        float *b = inout;
        for (int64_t i = 0; i < len; i++) b[i] += a[i];
    } else {
        ut_comm_combine(in, inout, len, k.dt, k.op);
    }
}

/* One step's transfer: send sn bytes to rank `to` while receiving rn bytes
 * from rank `from` (either may be 0). After each read, on_recv(arg, bytes
 * received so far) may use what has arrived. */
typedef void (*recv_fn)(void *arg, size_t got);

/* Each collective's first message to the next rank opens with a header, so
 * ranks that issue different operations (a bug in the program, or ranks
 * that took different branches) stop with both operations named instead of
 * reading each other's bytes as their own. */
typedef struct op_header {
    uint32_t magic, kind;
    uint64_t seq;
    int64_t n;
    int32_t root, dt, redop, pad;
} op_header;

static op_header header_of(const ut_comm_op *op) {
    op_header h = {TCP_MAGIC, (uint32_t)op->kind, op->seq, op->n, op->root, (int32_t)op->dt, (int32_t)op->redop, 0};
    if (op->kind != UT_COMM_ALLREDUCE && op->kind != UT_COMM_REDUCE_SCATTER) h.dt = h.redop = 0;
    if (op->kind != UT_COMM_BCAST) h.root = 0;
    if (op->kind == UT_COMM_SPLIT) h.n = 0;
    return h;
}

typedef struct step_ctx {
    ut_comm *c;
    tcp_impl *m;
    double deadline;
    bool hdr_out, hdr_in; /* the header still to send (before the first data to a peer) / to receive */
    op_header mine, theirs;
} step_ctx;

/* The previous rank's header against this rank's: -1 with why() when the
 * ranks are in different operations. */
static int header_agrees(step_ctx *x, int from) {
    if (!memcmp(&x->mine, &x->theirs, sizeof x->mine)) return 0;
    char name[64], what[160];
    ut_comm_peer_name(x->c, from, name, sizeof name);
    const op_header *t = &x->theirs;
    if (t->magic != TCP_MAGIC || t->kind > UT_COMM_REDUCE_SCATTER) {
        why("%s sent something that is not an operation's header: the ranks are out of step", name);
        return -1;
    }
    ut_comm_op other = {.kind = (enum ut_comm_kind)t->kind, .seq = t->seq, .n = t->n, .root = t->root,
                        .dt = (ut_dtype)t->dt, .redop = (ut_reduce_op)t->redop};
    ut_comm_op_describe(&other, what, sizeof what);
    why("%s is in %s instead: the ranks issued different operations", name, what);
    return -1;
}

static int exchange(step_ctx *x, int to, const void *sbuf, size_t sn, int from, void *rbuf, size_t rn, recv_fn on_recv,
                    void *arg) {
    tcp_impl *m = x->m;
    const char *s = sbuf;
    char *r = rbuf, name[64];
    /* the operation's header goes first on the first send and comes first on the first receive */
    size_t hs = to >= 0 && x->hdr_out ? sizeof x->mine : 0, hr = from >= 0 && x->hdr_in ? sizeof x->theirs : 0;
    size_t sd = 0, rd = 0, st = hs + (to >= 0 ? sn : 0), rt = hr + (from >= 0 ? rn : 0);
    while (sd < st || rd < rt) {
        struct pollfd p[2];
        int np = 0, is = -1, ir = -1;
        if (sd < st) p[is = np++] = (struct pollfd){.fd = m->coll[to], .events = POLLOUT};
        if (rd < rt) {
            if (is >= 0 && from == to) p[ir = is].events |= POLLIN;
            else p[ir = np++] = (struct pollfd){.fd = m->coll[from], .events = POLLIN};
        }
        int k = poll(p, (nfds_t)np, ms_left(x->deadline));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            why("poll: %s", strerror(errno));
            return -1;
        }
        if (k == 0) {
            if (rd < rt)
                why("timeout after %g s: waiting for %s%s", x->c->timeout_s,
                    ut_comm_peer_name(x->c, from, name, sizeof name),
                    rd < hr ? ", which has not reached this operation"
                            : "'s data (it is in this operation: it waits on a rank before it in the ring, which "
                              "the rank after that one names, or it is slow)");
            else why("timeout after %g s: %s takes no data", x->c->timeout_s,
                     ut_comm_peer_name(x->c, to, name, sizeof name));
            return -1;
        }
        if (is >= 0 && (p[is].revents & (POLLOUT | POLLERR | POLLHUP))) {
            const char *from_p = sd < hs ? (const char *)&x->mine + sd : s + (sd - hs);
            size_t want = sd < hs ? hs - sd : st - sd < TCP_PIECE ? st - sd : TCP_PIECE;
            ssize_t w = send(m->coll[to], from_p, want, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && errno != EAGAIN && errno != EINTR) {
                why("%s closed its connection (%s): it exited or was killed",
                    ut_comm_peer_name(x->c, to, name, sizeof name), strerror(errno));
                return -1;
            }
            if (w > 0) sd += (size_t)w;
        }
        if (ir >= 0 && (p[ir].revents & (POLLIN | POLLERR | POLLHUP))) {
            char *into = rd < hr ? (char *)&x->theirs + rd : r + (rd - hr);
            ssize_t g = recv(m->coll[from], into, rd < hr ? hr - rd : rt - rd, MSG_DONTWAIT);
            if (g == 0 || (g < 0 && errno != EAGAIN && errno != EINTR)) {
                why("%s closed its connection%s%s: it exited or was killed",
                    ut_comm_peer_name(x->c, from, name, sizeof name), g ? ": " : "", g ? strerror(errno) : "");
                return -1;
            }
            if (g > 0) {
                bool in_header = rd < hr;
                rd += (size_t)g;
                if (in_header && rd == hr && header_agrees(x, from)) return -1;
                if (rd > hr && on_recv) on_recv(arg, rd - hr);
            }
        }
    }
    if (hs) x->hdr_out = false;
    if (hr) x->hdr_in = false;
    return 0;
}

static void *scratch(tcp_impl *m, size_t n) {
    if (n > m->scratch_n) {
        ut_free(m->scratch);
        m->scratch = ut_malloc_check(n);
        m->scratch_n = n;
    }
    return m->scratch;
}

/* Combines a segment as it arrives: dst = op(recv, own), element by element
 * once each is whole. dst may be recv itself, or own itself (in place). */
typedef struct combine_arg {
    reduce_kind k;
    const char *own;
    char *recv, *dst;
    size_t esz, done; /* elements combined */
} combine_arg;

static void combine_arrived(void *p, size_t got) {
    combine_arg *a = p;
    size_t upto = got / a->esz;
    if (upto <= a->done) return;
    size_t o = a->done * a->esz, len = upto - a->done;
    if (a->dst == a->recv) {
        reduce_into(a->k, a->own + o, a->recv + o, (int64_t)len);
    } else {
        if (a->dst != a->own) memcpy(a->dst + o, a->own + o, len * a->esz);
        reduce_into(a->k, a->recv + o, a->dst + o, (int64_t)len);
    }
    a->done = upto;
}

/* Ring reduce-scatter: segment q of in is [off[q], off[q+1]) elements;
 * out (off[r+1] - off[r] elements, may be in's own segment) gets segment r
 * reduced over every rank. Segment q travels from rank q+1 around the ring
 * and ends on rank q, each rank combining its own part into it. */
static int ring_reduce_scatter(step_ctx *x, const void *in, void *out, const int64_t *off, reduce_kind k) {
    int P = x->c->size, r = x->c->rank, next = (r + 1) % P, prev = (r + P - 1) % P;
    size_t esz = kind_size(k);
    const char *src = in;
    if (P == 1) {
        if (off[1] > off[0]) memmove(out, src + off[0] * (int64_t)esz, (size_t)(off[1] - off[0]) * esz);
        return 0;
    }
    int64_t most = 0;
    for (int q = 0; q < P; q++) most = off[q + 1] - off[q] > most ? off[q + 1] - off[q] : most;
    char *buf[2];
    buf[0] = scratch(x->m, 2 * (size_t)most * esz + 16);
    buf[1] = buf[0] + (size_t)most * esz;
    int sq = (r + P - 1) % P;
    const char *send = src + off[sq] * (int64_t)esz;
    size_t sn = (size_t)(off[sq + 1] - off[sq]) * esz;
    for (int s = 0; s < P - 1; s++) {
        int rq = ((r - s - 2) % P + P) % P;
        char *recv = buf[s % 2];
        combine_arg a = {.k = k, .own = src + off[rq] * (int64_t)esz, .recv = recv,
                         .dst = s == P - 2 ? (char *)out : recv, .esz = esz};
        size_t rn = (size_t)(off[rq + 1] - off[rq]) * esz;
        if (exchange(x, next, send, sn, prev, recv, rn, combine_arrived, &a)) return -1;
        send = recv;
        sn = rn;
    }
    return 0;
}

/* Ring all-gather in place: buf holds every segment once done; this rank's
 * segment r is there at the start. */
static int ring_allgather(step_ctx *x, void *buf, const int64_t *off, size_t esz) {
    int P = x->c->size, r = x->c->rank, next = (r + 1) % P, prev = (r + P - 1) % P;
    char *b = buf;
    for (int s = 0; s < P - 1; s++) {
        int sq = ((r - s) % P + P) % P, rq = ((r - s - 1) % P + P) % P;
        if (exchange(x, next, b + off[sq] * (int64_t)esz, (size_t)(off[sq + 1] - off[sq]) * esz, prev,
                     b + off[rq] * (int64_t)esz, (size_t)(off[rq + 1] - off[rq]) * esz, NULL, NULL))
            return -1;
    }
    return 0;
}

/* Offsets of P segments: equal parts of n (the first n % P one longer), or
 * each rank's count, or n each. */
static int64_t *offsets_even(int P, int64_t n) {
    int64_t *off = ut_malloc_check((size_t)(P + 1) * sizeof *off);
    for (int q = 0; q <= P; q++) off[q] = (n / P) * q + (q < n % P ? q : n % P);
    return off;
}

static int64_t *offsets_counts(int P, const int64_t *counts, int64_t each) {
    int64_t *off = ut_malloc_check((size_t)(P + 1) * sizeof *off);
    off[0] = 0;
    for (int q = 0; q < P; q++) off[q + 1] = off[q] + (counts ? counts[q] : each);
    return off;
}

static int allreduce(step_ctx *x, void *buf, int64_t n, reduce_kind k) {
    int P = x->c->size, r = x->c->rank;
    int64_t *off = offsets_even(P, n);
    size_t esz = kind_size(k);
    char *mine = (char *)buf + off[r] * (int64_t)esz;
    int rc = ring_reduce_scatter(x, buf, mine, off, k);
    if (!rc && k.op == UT_REDUCE_AVG) ut_comm_average(mine, off[r + 1] - off[r], k.dt, P);
    if (!rc) rc = ring_allgather(x, buf, off, esz);
    ut_free(off);
    return rc;
}

static int reduce_scatter(step_ctx *x, const void *in, void *out, const int64_t *counts, int64_t each, reduce_kind k) {
    int P = x->c->size, r = x->c->rank;
    int64_t *off = offsets_counts(P, counts, each);
    int rc = ring_reduce_scatter(x, in, out, off, k);
    if (!rc && k.op == UT_REDUCE_AVG) ut_comm_average(out, off[r + 1] - off[r], k.dt, P);
    ut_free(off);
    return rc;
}

static int allgather(step_ctx *x, const void *in, void *out, const int64_t *counts, int64_t each, size_t esz) {
    int P = x->c->size, r = x->c->rank;
    int64_t *off = offsets_counts(P, counts, each);
    char *mine = (char *)out + off[r] * (int64_t)esz;
    if (in && in != mine && off[r + 1] > off[r]) /* NULL: in place */ memmove(mine, in, (size_t)(off[r + 1] - off[r]) * esz);
    int rc = ring_allgather(x, out, off, esz);
    ut_free(off);
    return rc;
}

/* A chain from root through the ring, in pieces, so a long broadcast keeps
 * every link busy. */
static int bcast(step_ctx *x, void *buf, int64_t bytes, int root) {
    int P = x->c->size, r = x->c->rank, pos = (r - root + P) % P;
    int next = (r + 1) % P, prev = (r + P - 1) % P;
    char *b = buf;
    for (int64_t o = 0; o < bytes; o += TCP_PIECE) {
        size_t k = (size_t)(bytes - o < TCP_PIECE ? bytes - o : TCP_PIECE);
        if (pos > 0 && exchange(x, -1, NULL, 0, prev, b + o, k, NULL, NULL)) return -1;
        if (pos < P - 1 && exchange(x, next, b + o, k, -1, NULL, 0, NULL, NULL)) return -1;
    }
    return 0;
}

/* An all-gather of one byte from each rank: no rank leaves before every
 * rank has arrived. */
static int barrier(step_ctx *x) {
    int P = x->c->size;
    char *b = ut_calloc_check((size_t)P, 1);
    int rc = allgather(x, b + x->c->rank, b, NULL, 1, 1);
    ut_free(b);
    return rc;
}

/* What a split hands to the child: the group's sockets and this rank's
 * place in it (a pointer, owned by the child once made). */
typedef struct split_made {
    int rank, size;
    int *coll, *p2p;
} split_made;

typedef struct split_record {
    int32_t color, key, world_rank, port;
} split_record;

/* Every rank's (color, key, world rank, port of a fresh listener); the
 * ranks of one color form a group, ordered by key and then rank, and
 * connect to each other as the world did. */
static int split(step_ctx *x, const ut_comm_op *op) {
    ut_comm *c = x->c;
    int P = c->size;
    *(split_made **)op->out = NULL;
    int lfd = listen_on(0);
    if (lfd < 0) return -1;
    split_record *all = ut_calloc_check((size_t)P, sizeof *all), mine = {op->color, op->key, c->world_rank, port_of(lfd)};
    int rc = -1;
    int *members = ut_malloc_check((size_t)P * sizeof *members), G = 0, me = -1;
    tcp_host *hosts = NULL;
    if (allgather(x, &mine, all, NULL, 1, sizeof mine)) goto out;
    for (int q = 0; q < P; q++) /* the group in order of (key, rank) */
        if (all[q].color == op->color) {
            int at = G++;
            while (at > 0 && all[members[at - 1]].key > all[q].key) {
                members[at] = members[at - 1];
                at--;
            }
            members[at] = q;
        }
    hosts = ut_calloc_check((size_t)G, sizeof *hosts);
    for (int g = 0; g < G; g++) {
        const split_record *s = &all[members[g]];
        if (s->world_rank < 0 || s->world_rank >= world_nhosts) {
            why("split: world rank %d is not in the table", s->world_rank);
            goto out;
        }
        hosts[g] = world_hosts[s->world_rank];
        hosts[g].port = (uint32_t)s->port;
        if (members[g] == c->rank) me = g;
    }
    split_made *made = ut_calloc_check(1, sizeof *made);
    made->rank = me, made->size = G;
    made->coll = ut_malloc_check((size_t)G * sizeof(int));
    made->p2p = ut_malloc_check((size_t)G * sizeof(int));
    if (build_mesh(lfd, me, G, hosts, (uint32_t)op->seq, made->coll, made->p2p, x->deadline)) {
        close_mesh(made->coll, made->p2p, G);
        ut_free(made->coll);
        ut_free(made->p2p);
        ut_free(made);
        goto out;
    }
    *(split_made **)op->out = made;
    rc = 0;
out:
    close(lfd);
    ut_free(hosts);
    ut_free(members);
    ut_free(all);
    return rc;
}

static int collective(step_ctx *x, const ut_comm_op *op) {
    const reduce_kind f32 = {UT_F32, 0, UT_REDUCE_SUM};
    switch (op->kind) {
    case UT_COMM_ALLREDUCE_F32: return allreduce(x, op->out, op->n, f32);
    case UT_COMM_ALLREDUCE_F64: return allreduce(x, op->out, op->n, (reduce_kind){UT_F32, 1, UT_REDUCE_SUM});
    case UT_COMM_ALLREDUCE_I64: return allreduce(x, op->out, op->n, (reduce_kind){UT_F32, 2, UT_REDUCE_SUM});
    case UT_COMM_ALLREDUCE: return allreduce(x, op->out, op->n, (reduce_kind){op->dt, 0, op->redop});
    case UT_COMM_REDUCE_SCATTER_F32: return reduce_scatter(x, op->in, op->out, NULL, op->n, f32);
    case UT_COMM_REDUCE_SCATTER:
        return reduce_scatter(x, op->in, op->out, NULL, op->n, (reduce_kind){op->dt, 0, op->redop});
    case UT_COMM_REDUCE_SCATTERV_F32: return reduce_scatter(x, op->in, op->out, op->counts, 0, f32);
    case UT_COMM_ALLGATHER_F32: return allgather(x, op->in, op->out, NULL, op->n, 4);
    case UT_COMM_ALLGATHER_U64: return allgather(x, op->in, op->out, NULL, op->n, 8);
    case UT_COMM_ALLGATHERV_F32: return allgather(x, NULL, op->out, op->counts, 0, 4);
    case UT_COMM_BCAST: return bcast(x, op->out, op->n, op->root);
    case UT_COMM_BARRIER: return barrier(x);
    case UT_COMM_SPLIT: return split(x, op);
    case UT_COMM_SEND_F32:
    case UT_COMM_RECV_F32: break; /* the p2p thread's */
    }
    why("unknown operation kind %d", (int)op->kind);
    return -1;
}

static int run_op(ut_comm *c, tcp_impl *m, const ut_comm_op *op) {
    step_ctx x = {.c = c, .m = m, .deadline = c->timeout_s > 0 ? now_s() + c->timeout_s : 0, .mine = header_of(op)};
    x.hdr_out = x.hdr_in = c->size > 1;
    bool empty = op->n == 0 && op->kind != UT_COMM_BARRIER && op->kind != UT_COMM_SPLIT; /* nothing to move */
    int rc = empty ? 0 : collective(&x, op);
    /* nothing went to or came from a neighbour: the headers alone */
    if (!rc && x.hdr_out && x.hdr_in)
        rc = exchange(&x, (c->rank + 1) % c->size, NULL, 0, (c->rank + c->size - 1) % c->size, NULL, 0, NULL, NULL);
    return rc;
}

// --- completion ------------------------------------------------------------------------

/* The first failure makes the communicator unusable; its message stays.
 * Called with m->q.mu held. */
static void mark_failed(ut_comm *c, tcp_impl *m, const ut_comm_op *op, const char *text) {
    if (m->q.failed) return;
    char what[160], who[80];
    ut_comm_op_describe(op, what, sizeof what);
    if (!strncmp(text, "timeout", 7)) /* "timeout after 3 s in allreduce #3 (...): waiting for ..." */
        snprintf(c->err, sizeof c->err, "%s: timeout after %g s in %s%s", ut_comm_who(c, who, sizeof who),
                 c->timeout_s, what, strchr(text, ':') ? strchr(text, ':') : "");
    else
        snprintf(c->err, sizeof c->err, "%s: %s failed: %s", ut_comm_who(c, who, sizeof who), what, text);
    m->q.failed = op->seq;
}

// --- the collective thread --------------------------------------------------------------

static void wake_p2p(tcp_impl *m) {
    uint64_t one = 1;
    ssize_t w = write(m->wake, &one, sizeof one);
    (void)w; /* a full counter still wakes the thread */
}

static void *coll_thread(void *arg) {
    ut_comm *c = arg;
    tcp_impl *m = c->impl;
    UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
    for (;;) {
        while (m->q.started == m->q.queued && !m->q.stop) UT_CHECK_PTHREAD(pthread_cond_wait(&m->q.work, &m->q.mu));
        if (m->q.started == m->q.queued) break; /* stopped and drained */
        ut_comm_op op = m->q.ring[(m->q.started + 1) % UT_COMM_QUEUE];
        m->q.started = op.seq;
        bool skip = m->q.failed != 0;
        if (!skip && (op.kind == UT_COMM_SEND_F32 || op.kind == UT_COMM_RECV_F32)) {
            m->moved[op.seq % UT_COMM_QUEUE] = 0;
            m->since[op.seq % UT_COMM_QUEUE] = now_s();
            m->pend[m->npend++] = op.seq;
            wake_p2p(m);
            continue;
        }
        UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
        int rc = skip ? -1 : run_op(c, m, &op);
        UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
        if (rc && !skip) mark_failed(c, m, &op, tcp_err);
        ut_comm_queue_done(&m->q, op.seq);
    }
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
    return NULL;
}

// --- the send/receive thread ---------------------------------------------------------------

/* Moves the oldest send and the oldest receive of each peer whenever its
 * socket is ready, until stopped with nothing pending. */
static void *p2p_thread(void *arg) {
    ut_comm *c = arg;
    tcp_impl *m = c->impl;
    int P = c->size;
    ut_comm_op *ops = ut_malloc_check(UT_COMM_QUEUE * sizeof *ops);
    double *since = ut_malloc_check(UT_COMM_QUEUE * sizeof *since);
    struct pollfd *pf = ut_malloc_check((UT_COMM_QUEUE + 1) * sizeof *pf);
    int *which = ut_malloc_check(UT_COMM_QUEUE * sizeof *which);
    bool *busy = ut_malloc_check((size_t)P * 2 * sizeof *busy);
    for (;;) {
        UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
        int n = m->npend;
        bool stop = m->p2p_stop;
        for (int i = 0; i < n; i++) {
            ops[i] = m->q.ring[m->pend[i] % UT_COMM_QUEUE];
            since[i] = m->since[m->pend[i] % UT_COMM_QUEUE];
        }
        UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
        if (!n && stop) break;
        /* the oldest of each (peer, direction) */
        memset(busy, 0, (size_t)P * 2 * sizeof *busy);
        int np = 0;
        pf[np++] = (struct pollfd){.fd = m->wake, .events = POLLIN};
        double first = 0;
        for (int i = 0; i < n; i++) {
            bool send = ops[i].kind == UT_COMM_SEND_F32;
            int slot = ops[i].peer * 2 + send;
            if (busy[slot]) continue;
            busy[slot] = true;
            which[np - 1] = i;
            pf[np++] = (struct pollfd){.fd = m->p2p[ops[i].peer], .events = send ? POLLOUT : POLLIN};
            double t = since[i];
            if (!first || t < first) first = t;
        }
        double deadline = c->timeout_s > 0 && first ? first + c->timeout_s : 0;
        int k = poll(pf, (nfds_t)np, ms_left(deadline));
        if (k < 0 && errno != EINTR) ut_abort(__FILE__, __LINE__, "poll: %s", strerror(errno));
        if (pf[0].revents & POLLIN) {
            uint64_t v;
            ssize_t g = read(m->wake, &v, sizeof v);
            (void)g;
        }
        for (int j = 1; j < np; j++) {
            const ut_comm_op *op = &ops[which[j - 1]];
            double t0 = since[which[j - 1]];
            size_t total = (size_t)op->n * sizeof(float);
            int64_t *moved = &m->moved[op->seq % UT_COMM_QUEUE]; /* only this thread writes it */
            const char *fail = NULL;
            char name[64], text[300];
            ut_comm_peer_name(c, op->peer, name, sizeof name);
            if (pf[j].revents && (size_t)*moved < total) {
                ssize_t g;
                if (op->kind == UT_COMM_SEND_F32)
                    g = send(pf[j].fd, (const char *)op->in + *moved, total - (size_t)*moved, MSG_NOSIGNAL | MSG_DONTWAIT);
                else
                    g = recv(pf[j].fd, (char *)op->out + *moved, total - (size_t)*moved, MSG_DONTWAIT);
                if (g > 0) *moved += g;
                else if (g == 0 || (errno != EAGAIN && errno != EINTR)) {
                    snprintf(text, sizeof text, "%s closed its connection%s%s: it exited or was killed", name,
                             g ? ": " : "", g ? strerror(errno) : "");
                    fail = text;
                }
            }
            bool finished = (size_t)*moved == total;
            if (!fail && !finished && deadline > 0 && now_s() - t0 > c->timeout_s) {
                snprintf(text, sizeof text, "timeout after %g s: %s", c->timeout_s,
                         op->kind == UT_COMM_RECV_F32
                             ? (*moved ? ut_fmt("%s sent part of the message", name) : ut_fmt("%s has sent nothing", name))
                             : ut_fmt("%s takes no data", name));
                fail = text;
            }
            if (fail || finished) {
                UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
                if (fail) mark_failed(c, m, op, fail);
                for (int i = 0; i < m->npend; i++)
                    if (m->pend[i] == op->seq) {
                        memmove(&m->pend[i], &m->pend[i + 1], (size_t)(m->npend - i - 1) * sizeof *m->pend);
                        m->npend--;
                        break;
                    }
                ut_comm_queue_done(&m->q, op->seq);
                UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
            }
        }
        /* after a failure, everything still pending fails too */
        UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
        while (m->q.failed && m->npend) ut_comm_queue_done(&m->q, m->pend[--m->npend]);
        UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
    }
    ut_free(busy);
    ut_free(since);
    ut_free(which);
    ut_free(pf);
    ut_free(ops);
    return NULL;
}

// --- the backend's entry points --------------------------------------------------------------

static void tcp_submit(ut_comm *c, const ut_comm_op *op) { ut_comm_queue_submit(&((tcp_impl *)c->impl)->q, op); }
static int tcp_wait(ut_comm *c, uint64_t seq) { return ut_comm_queue_wait(&((tcp_impl *)c->impl)->q, seq); }
static int tcp_test(ut_comm *c, uint64_t seq) { return ut_comm_queue_test(&((tcp_impl *)c->impl)->q, seq); }

/* Closes the sockets gently: this side stops writing, then reads until the
 * peer has stopped too (for up to 2 s), so nothing the peer still had to
 * read is cut off by a reset. */
static void close_gently(int *fds, int size) {
    double until = now_s() + 2;
    for (int r = 0; r < size; r++)
        if (fds[r] >= 0) shutdown(fds[r], SHUT_WR);
    for (int r = 0; r < size; r++) {
        if (fds[r] < 0) continue;
        char sink[4096];
        for (;;) {
            struct pollfd q = {.fd = fds[r], .events = POLLIN};
            if (poll(&q, 1, ms_left(until)) <= 0) break;
            ssize_t g = recv(fds[r], sink, sizeof sink, MSG_DONTWAIT);
            if (g == 0 || (g < 0 && errno != EAGAIN && errno != EINTR)) break;
        }
        close(fds[r]);
        fds[r] = -1;
    }
}

static void tcp_finalize(ut_comm *c) {
    tcp_impl *m = c->impl;
    UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
    m->q.stop = true;
    UT_CHECK_PTHREAD(pthread_cond_signal(&m->q.work));
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
    UT_CHECK_PTHREAD(pthread_join(m->thread, NULL));
    UT_CHECK_PTHREAD(pthread_mutex_lock(&m->q.mu));
    m->p2p_stop = true;
    wake_p2p(m);
    UT_CHECK_PTHREAD(pthread_mutex_unlock(&m->q.mu));
    UT_CHECK_PTHREAD(pthread_join(m->p2p_thread, NULL));
    close_gently(m->coll, c->size);
    close_gently(m->p2p, c->size);
    close(m->wake);
    ut_comm_queue_destroy(&m->q);
    ut_free(m->coll);
    ut_free(m->p2p);
    ut_free(m->scratch);
    ut_free(m);
    c->impl = NULL;
    if (!strcmp(c->name, "world") && world_hosts) {
        ut_free(world_hosts);
        world_hosts = NULL;
        world_nhosts = 0;
    }
}

static int tcp_child(ut_comm *parent, ut_comm *c, const void *result, char *err, size_t n);

static const ut_comm_vtable tcp_backend = {.name = "tcp",
                                           .submit = tcp_submit,
                                           .wait = tcp_wait,
                                           .test = tcp_test,
                                           .finalize = tcp_finalize,
                                           .child = tcp_child};

/* The communicator's state and threads, over its sockets. */
static void impl_start(ut_comm *c, int *coll, int *p2p) {
    tcp_impl *m = ut_calloc_check(1, sizeof *m);
    m->coll = coll;
    m->p2p = p2p;
    m->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (m->wake < 0) ut_abort(__FILE__, __LINE__, "eventfd: %s", strerror(errno));
    ut_comm_queue_init(&m->q);
    c->impl = m;
    c->be = &tcp_backend;
    UT_CHECK_PTHREAD(pthread_create(&m->thread, NULL, coll_thread, c));
    UT_CHECK_PTHREAD(pthread_create(&m->p2p_thread, NULL, p2p_thread, c));
}

static int tcp_child(ut_comm *parent, ut_comm *c, const void *result, char *err, size_t n) {
    (void)parent;
    split_made *made = *(split_made *const *)result;
    if (!made) return ut_errorf(err, n, "split: no group was made");
    c->rank = made->rank;
    c->size = made->size;
    impl_start(c, made->coll, made->p2p);
    ut_free(made);
    return 0;
}

int ut_comm_tcp_init(ut_comm *c, char *err, size_t n) {
    launch_env e;
    if (read_env(&e, err, n)) return -1;
    /* the rendezvous waits for ranks that start late: UTRAIN_RENDEZVOUS_TIMEOUT, else at least a minute */
    if (e.wait_s == 0 && c->timeout_s > 0) e.wait_s = c->timeout_s > 60 ? c->timeout_s : 60;
    double deadline = e.wait_s > 0 ? now_s() + e.wait_s : 0;
    int lfd = listen_on(0);
    if (lfd < 0) return ut_errorf(err, n, "rank %d cannot open a listening socket: %s", e.rank, tcp_err);
    tcp_host *hosts = ut_calloc_check((size_t)e.size, sizeof *hosts);
    int *coll = ut_malloc_check((size_t)e.size * sizeof(int)), *p2p = ut_malloc_check((size_t)e.size * sizeof(int));
    int rc;
    if (e.agent_store) {
        rc = rendezvous_store(&e, port_of(lfd), hosts, deadline);
        if (rc) ut_errorf(err, n, "rendezvous through the launcher's store at %s:%d (MASTER_ADDR:MASTER_PORT): %s",
                          e.master, e.port, tcp_err);
    } else {
        rc = rendezvous_own(&e, port_of(lfd), hosts, deadline, err, n);
    }
    if (!rc && build_mesh(lfd, e.rank, e.size, hosts, 0, coll, p2p, deadline)) {
        ut_errorf(err, n, "rank %d cannot connect to the other ranks: %s", e.rank, tcp_err);
        close_mesh(coll, p2p, e.size);
        rc = -1;
    }
    close(lfd);
    if (rc) {
        ut_free(hosts);
        ut_free(coll);
        ut_free(p2p);
        return -1;
    }
    ut_free(world_hosts);
    world_hosts = hosts;
    world_nhosts = e.size;
    c->rank = e.rank;
    c->size = e.size;
    impl_start(c, coll, p2p);
    return 0;
}
