/* tm_proxy.c - seeded fault-injecting TCP proxy for the fault matrix (issue 5).
 *
 *   tm-proxy --listen 127.0.0.1:0 --target HOST:PORT --seed N [--mode MODE]
 *            [--rate R] [--stall-ms MS] [--min-offset N] [--max-offset N]
 *            [--max-event K] [--log FILE]
 *
 * One process, one poll loop, any number of connections. Bytes are copied
 * unchanged in both directions; faults only ever shorten, pause or reset the
 * server->client direction, so whatever a client receives is a prefix of what
 * the server sent. Every connection's fault plan is a pure function of
 * (--seed, connection sequence number), so a rerun with the same seed and the
 * same connection order injects the same faults at the same offsets.
 *
 * To find SSE event boundaries the proxy follows the HTTP/1.1 response framing
 * (Content-Length, chunked, read-to-close, 1xx/204/304) across keep-alive
 * responses and scans the decoded body of text/event-stream responses. It does
 * not see request methods, so a response to HEAD would desynchronise the
 * framing; then event faults may fire late or not at all, never corrupt bytes.
 */
#include "tidemark/tidemark.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF_SZ (64 * 1024)
#define HDR_LINE_MAX 1024
#define LINGER_MS 2000 /* after a cut: how long to wait for the client's FIN */
#define RST_DRAIN_MS 1000 /* before a reset: how long to wait for our data to be acked */

enum mode { M_NONE, M_CUT, M_RESET, M_STALL, M_EVENT, M_MID, M_MIXED, M_COUNT };
static const char *const MODE_NAME[M_COUNT] = {"none",           "cut",       "reset", "stall",
                                               "event-boundary", "mid-event", "mixed"};

static struct {
    const char *listen, *target, *log_path;
    uint64_t seed;
    int have_seed;
    int mode;
    double rate;
    uint64_t stall_ms, min_off, max_off, max_event;
} opt = {NULL, NULL, NULL, 0, 0, M_MIXED, 1.0, 500, 2, 4096, 16};

static FILE *log_out;
static int sig_pipe[2] = {-1, -1};
static struct sockaddr_storage target_addr;
static socklen_t target_len;

static struct {
    uint64_t conns, hit[M_COUNT], unreached, none;
} stats;

/* ---- time, log, PRNG ---------------------------------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void logline(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logline(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(log_out, fmt, ap);
    va_end(ap);
    fputc('\n', log_out);
    fflush(log_out);
}

/* splitmix64: tiny, seedable from any 64-bit value, good enough for plans. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    uint64_t lim = UINT64_MAX - UINT64_MAX % n, x;
    do
        x = rng_next(s);
    while (x >= lim);
    return x % n;
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* ---- HTTP response framing + SSE event scanner ------------------------- */

enum hstate { H_HEAD, H_CHUNK_SIZE, H_CHUNK_DATA, H_CHUNK_END, H_TRAILER, H_BODY_LEN, H_BODY_EOF, H_OPAQUE };
enum sse_ev { EV_NONE, EV_END, EV_ID };

struct scan {
    enum hstate st;
    char line[HDR_LINE_MAX];
    size_t ll;
    int have_status, status, chunked, has_len, sse;
    uint64_t len, remaining;
    /* SSE line state, reset per response body */
    size_t sl;
    int prev_cr, in_event;
    char head[3];
    uint64_t events; /* complete SSE events seen on this connection */
};

static int ci_contains(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0) return 1;
    return 0;
}

static void response_reset(struct scan *h)
{
    h->st = H_HEAD;
    h->have_status = h->status = h->chunked = h->has_len = h->sse = 0;
    h->len = h->remaining = 0;
}

static void headers_done(struct scan *h)
{
    h->sl = 0;
    h->prev_cr = h->in_event = 0;
    if (h->status == 101) {
        h->st = H_OPAQUE;
    } else if (h->status >= 100 && h->status < 200) {
        response_reset(h); /* interim response: the real one follows */
    } else if (h->status == 204 || h->status == 304) {
        response_reset(h);
    } else if (h->chunked) {
        h->st = H_CHUNK_SIZE;
    } else if (h->has_len) {
        if (h->len == 0)
            response_reset(h);
        else {
            h->remaining = h->len;
            h->st = H_BODY_LEN;
        }
    } else {
        h->st = H_BODY_EOF;
    }
}

static void head_line(struct scan *h)
{
    char *l = h->line;
    if (!h->have_status) {
        if (h->ll == 0) return; /* stray CRLF between responses */
        if (strncmp(l, "HTTP/", 5) != 0) {
            h->st = H_OPAQUE;
            return;
        }
        char *sp = strchr(l, ' ');
        h->status = sp ? atoi(sp + 1) : 0;
        h->have_status = 1;
        return;
    }
    if (h->ll == 0) {
        headers_done(h);
        return;
    }
    char *colon = strchr(l, ':');
    if (!colon) return;
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    if (strcasecmp(l, "content-length") == 0) {
        h->has_len = 1;
        h->len = strtoull(v, NULL, 10);
    } else if (strcasecmp(l, "transfer-encoding") == 0) {
        if (ci_contains(v, "chunked")) h->chunked = 1;
    } else if (strcasecmp(l, "content-type") == 0) {
        if (strncasecmp(v, "text/event-stream", 17) == 0) h->sse = 1;
    }
}

static void chunk_size_line(struct scan *h)
{
    uint64_t n = 0;
    size_t i = 0, digits = 0;
    for (; i < h->ll && digits < 16; i++, digits++) {
        char ch = h->line[i];
        int d = (ch >= '0' && ch <= '9')   ? ch - '0'
                : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10
                                           : -1;
        if (d < 0) break;
        n = n * 16 + (uint64_t)d;
    }
    if (digits == 0) {
        h->st = H_OPAQUE; /* not chunked framing after all: stop interpreting */
        return;
    }
    if (n == 0) {
        h->st = H_TRAILER;
    } else {
        h->remaining = n;
        h->st = H_CHUNK_DATA;
    }
}

/* Accumulate a CRLF- or LF-terminated line; returns 1 when one is complete. */
static int take_line(struct scan *h, unsigned char b)
{
    if (b == '\n') {
        if (h->ll > 0 && h->line[h->ll - 1] == '\r') h->ll--;
        h->line[h->ll] = '\0';
        return 1;
    }
    if (h->ll < HDR_LINE_MAX - 1) h->line[h->ll++] = (char)b; /* longer lines are truncated */
    return 0;
}

/* Advance the framing by one raw byte. Returns 1 if the byte is body data of
 * a text/event-stream response. */
static int http_step(struct scan *h, unsigned char b)
{
    switch (h->st) {
    case H_HEAD:
        if (take_line(h, b)) {
            head_line(h);
            h->ll = 0;
        }
        return 0;
    case H_CHUNK_SIZE:
        if (take_line(h, b)) {
            chunk_size_line(h);
            h->ll = 0;
        }
        return 0;
    case H_CHUNK_DATA:
        if (--h->remaining == 0) h->st = H_CHUNK_END;
        return h->sse;
    case H_CHUNK_END:
        if (b == '\n') h->st = H_CHUNK_SIZE;
        return 0;
    case H_TRAILER:
        if (take_line(h, b)) {
            size_t ll = h->ll;
            h->ll = 0;
            if (ll == 0) response_reset(h);
        }
        return 0;
    case H_BODY_LEN: {
        int sse = h->sse;
        if (--h->remaining == 0) response_reset(h);
        return sse;
    }
    case H_BODY_EOF:
        return h->sse;
    case H_OPAQUE:
        return 0;
    }
    return 0;
}

/* Advance the SSE line state by one decoded body byte. An event ends at a
 * blank line that follows at least one field line (comment-only blocks are
 * not events). Line terminators: CRLF, LF or CR. */
static enum sse_ev sse_step(struct scan *h, unsigned char b)
{
    if (h->prev_cr && b == '\n') {
        h->prev_cr = 0;
        return EV_NONE;
    }
    h->prev_cr = 0;
    if (b == '\r' || b == '\n') {
        enum sse_ev r = EV_NONE;
        if (h->sl == 0) {
            if (h->in_event) {
                h->events++;
                h->in_event = 0;
                r = EV_END;
            }
        } else if (h->head[0] != ':') {
            h->in_event = 1;
            if ((h->sl >= 3 && memcmp(h->head, "id:", 3) == 0) || (h->sl == 2 && memcmp(h->head, "id", 2) == 0))
                r = EV_ID;
        }
        h->sl = 0;
        h->prev_cr = (b == '\r');
        return r;
    }
    if (h->sl < sizeof h->head) h->head[h->sl] = (char)b;
    h->sl++;
    return EV_NONE;
}

/* ---- connections -------------------------------------------------------- */

enum phase { P_RUN, P_FLUSH, P_LINGER, P_RST, P_DEAD };
enum stall { ST_NONE, ST_BARRIER, ST_STALLING, ST_DONE };
enum scan_res { SC_CONT, SC_AFTER, SC_BEFORE };

struct conn {
    uint64_t id, t_open;
    int mode; /* applied fault kind (never M_MIXED) */
    uint64_t plan_off, plan_event;
    int cfd, sfd, connecting;
    int pi_c, pi_s; /* indices into the poll array, -1 if not polled */
    unsigned char c2s[BUF_SZ], s2c[BUF_SZ];
    size_t c2s_off, c2s_len, s2c_off, s2c_len;
    uint64_t c2s_in, c2s_out, s2c_in, s2c_out;
    int c_eof, s_eof, c_shut, s_shut;
    int armed, pending_lf, hit;
    uint64_t fault_off, fault_event;
    enum stall stall;
    uint64_t stall_at, until; /* stall barrier (absolute s2c offset); deadline of the current phase */
    enum phase phase;
    struct scan h;
};

static struct conn **conns;
static size_t nconns, capconns;

static void set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void send_rst_close(int fd)
{
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

static void fmt_u64_or_dash(char *out, size_t n, int have, uint64_t v)
{
    if (have)
        snprintf(out, n, "%" PRIu64, v);
    else
        snprintf(out, n, "-");
}

static void conn_finish(struct conn *c, const char *end)
{
    if (c->phase == P_DEAD) return;
    if (c->cfd >= 0) close(c->cfd);
    if (c->sfd >= 0) close(c->sfd);
    c->cfd = c->sfd = -1;
    c->phase = P_DEAD;
    const char *fault;
    if (c->mode == M_NONE) {
        fault = "none";
        stats.none++;
    } else if (c->hit) {
        fault = MODE_NAME[c->mode];
        stats.hit[c->mode]++;
    } else {
        fault = "unreached";
        stats.unreached++;
    }
    char off[24], ev[24];
    fmt_u64_or_dash(off, sizeof off, c->hit, c->fault_off);
    fmt_u64_or_dash(ev, sizeof ev, c->hit && (c->mode == M_EVENT || c->mode == M_MID), c->fault_event);
    logline("close conn=%" PRIu64 " mode=%s fault=%s offset=%s event=%s events=%" PRIu64 " c2s=%" PRIu64
            " s2c=%" PRIu64 " ms=%" PRIu64 " end=%s",
            c->id, MODE_NAME[c->mode], fault, off, ev, c->h.events, c->c2s_out, c->s2c_out,
            now_ms() - c->t_open, end);
}

static void log_fault(struct conn *c)
{
    char ev[24];
    fmt_u64_or_dash(ev, sizeof ev, c->mode == M_EVENT || c->mode == M_MID, c->fault_event);
    logline("fault conn=%" PRIu64 " mode=%s offset=%" PRIu64 " event=%s", c->id, MODE_NAME[c->mode],
            c->fault_off, ev);
}

/* The plan depends only on (seed, connection number): every draw is made in a
 * fixed order whatever the mode, so --mode/--rate do not shift other draws. */
static void conn_plan(struct conn *c)
{
    uint64_t s = opt.seed ^ (c->id * 0xD1B54A32D192ED03u);
    rng_next(&s);
    double u = rng_unit(&s);
    int kind = M_CUT + (int)rng_below(&s, 5);
    c->plan_off = opt.min_off + rng_below(&s, opt.max_off - opt.min_off + 1);
    c->plan_event = 1 + rng_below(&s, opt.max_event);
    if (opt.mode == M_NONE || !(u < opt.rate))
        c->mode = M_NONE;
    else
        c->mode = opt.mode == M_MIXED ? kind : opt.mode;
    c->armed = c->mode != M_NONE;
    char plan[48];
    switch (c->mode) {
    case M_CUT:
    case M_RESET:
    case M_STALL: snprintf(plan, sizeof plan, "offset:%" PRIu64, c->plan_off); break;
    case M_EVENT:
    case M_MID: snprintf(plan, sizeof plan, "event:%" PRIu64, c->plan_event); break;
    default: snprintf(plan, sizeof plan, "-"); break;
    }
    /* The client's address lets a test match its sockets to log lines. */
    char peer[INET6_ADDRSTRLEN + 8] = "-";
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getpeername(c->cfd, (struct sockaddr *)&ss, &sl) == 0) {
        char a[INET6_ADDRSTRLEN];
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &s4->sin_addr, a, sizeof a);
            snprintf(peer, sizeof peer, "%s:%u", a, (unsigned)ntohs(s4->sin_port));
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof a);
            snprintf(peer, sizeof peer, "[%s]:%u", a, (unsigned)ntohs(s6->sin6_port));
        }
    }
    logline("open conn=%" PRIu64 " mode=%s plan=%s peer=%s", c->id, MODE_NAME[c->mode], plan, peer);
}

static void conn_new(int cfd, uint64_t id)
{
    struct conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(cfd);
        return;
    }
    if (nconns == capconns) {
        size_t nc = capconns ? capconns * 2 : 16;
        struct conn **n = realloc(conns, nc * sizeof *n);
        if (!n) {
            free(c);
            close(cfd);
            return;
        }
        conns = n;
        capconns = nc;
    }
    conns[nconns++] = c;
    c->id = id;
    c->t_open = now_ms();
    c->cfd = cfd;
    c->sfd = -1;
    c->pi_c = c->pi_s = -1;
    c->phase = P_RUN;
    response_reset(&c->h);
    stats.conns++;
    set_nodelay(cfd);
    conn_plan(c);

    c->sfd = socket(target_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->sfd < 0) {
        conn_finish(c, "connect_error");
        return;
    }
    set_nodelay(c->sfd);
    if (connect(c->sfd, (struct sockaddr *)&target_addr, target_len) != 0) {
        if (errno != EINPROGRESS) {
            conn_finish(c, "connect_error");
            return;
        }
        c->connecting = 1;
    }
}

/* A fault that ends the connection fired: keep only what precedes the fault
 * point, stop talking to the server, and flush the rest to the client. */
static void trigger_end(struct conn *c)
{
    c->armed = 0;
    c->hit = 1;
    log_fault(c);
    if (c->sfd >= 0) close(c->sfd);
    c->sfd = -1;
    c->s_eof = 1;
    c->c2s_off = c->c2s_len = 0; /* requests after the cut are never delivered */
    c->phase = P_FLUSH;
}

/* Feed one raw server byte (total = bytes so far including it) to the fault plan. */
static enum scan_res scan_byte(struct conn *c, unsigned char b, uint64_t total)
{
    int body = http_step(&c->h, b);
    enum sse_ev ev = body ? sse_step(&c->h, b) : EV_NONE;
    if (!c->armed) return SC_CONT;
    if (c->pending_lf) {
        /* The fault point was a CR; a CRLF's LF belongs to it. */
        c->pending_lf = 0;
        return (body && b == '\n') ? SC_AFTER : SC_BEFORE;
    }
    switch (c->mode) {
    case M_CUT:
    case M_RESET:
    case M_STALL: return total == c->plan_off ? SC_AFTER : SC_CONT;
    case M_EVENT:
        if (ev == EV_END && c->h.events == c->plan_event) {
            c->fault_event = c->h.events;
            break;
        }
        return SC_CONT;
    case M_MID:
        /* After the id line of event k (or of the first later event that has one). */
        if (ev == EV_ID && c->h.events + 1 >= c->plan_event) {
            c->fault_event = c->h.events + 1;
            break;
        }
        return SC_CONT;
    default: return SC_CONT;
    }
    if (b == '\r') {
        c->pending_lf = 1;
        return SC_CONT;
    }
    return SC_AFTER;
}

static void compact(unsigned char *buf, size_t *off, size_t *len)
{
    if (*off == 0) return;
    memmove(buf, buf + *off, *len - *off);
    *len -= *off;
    *off = 0;
}

static int io_error(ssize_t n) { return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR; }

static void read_server(struct conn *c)
{
    compact(c->s2c, &c->s2c_off, &c->s2c_len);
    size_t room = BUF_SZ - c->s2c_len;
    if (room == 0) return;
    ssize_t n = recv(c->sfd, c->s2c + c->s2c_len, room, 0);
    if (n == 0) {
        c->s_eof = 1;
        if (c->pending_lf) { /* stream ended right after the CR of the fault point */
            c->pending_lf = 0;
            c->fault_off = c->s2c_in;
            trigger_end(c);
        }
        return;
    }
    if (n < 0) {
        if (!io_error(n)) return;
        /* Pass a server reset on as a reset. */
        send_rst_close(c->cfd);
        c->cfd = -1;
        conn_finish(c, "server_error");
        return;
    }
    unsigned char *p = c->s2c + c->s2c_len;
    size_t keep = (size_t)n;
    int end = 0;
    for (size_t i = 0; i < (size_t)n; i++) {
        enum scan_res r = scan_byte(c, p[i], c->s2c_in + i + 1);
        if (r == SC_CONT) continue;
        size_t pass = r == SC_AFTER ? i + 1 : i;
        c->fault_off = c->s2c_in + pass;
        if (c->mode == M_STALL) {
            c->armed = 0;
            c->stall = ST_BARRIER;
            c->stall_at = c->fault_off;
            continue; /* keep scanning so event counts stay right */
        }
        keep = pass;
        end = 1;
        break;
    }
    c->s2c_len += keep;
    c->s2c_in += keep;
    if (end) trigger_end(c);
}

static void read_client(struct conn *c)
{
    if (c->phase == P_LINGER) {
        unsigned char junk[4096];
        ssize_t n = recv(c->cfd, junk, sizeof junk, 0);
        if (n == 0 || io_error(n)) conn_finish(c, "fault");
        return;
    }
    compact(c->c2s, &c->c2s_off, &c->c2s_len);
    size_t room = BUF_SZ - c->c2s_len;
    if (room == 0) return;
    ssize_t n = recv(c->cfd, c->c2s + c->c2s_len, room, 0);
    if (n == 0) {
        c->c_eof = 1;
    } else if (n > 0) {
        c->c2s_len += (size_t)n;
        c->c2s_in += (uint64_t)n;
    } else if (io_error(n)) {
        if (c->sfd >= 0) send_rst_close(c->sfd);
        c->sfd = -1;
        conn_finish(c, "client_error");
    }
}

static size_t s2c_writable(const struct conn *c)
{
    size_t avail = c->s2c_len - c->s2c_off;
    if (c->stall == ST_STALLING) return 0;
    if (c->stall == ST_BARRIER) {
        uint64_t lim = c->stall_at - c->s2c_out;
        if (lim < avail) avail = (size_t)lim;
    }
    return avail;
}

static void write_client(struct conn *c)
{
    size_t avail = s2c_writable(c);
    if (avail == 0) return;
    ssize_t n = send(c->cfd, c->s2c + c->s2c_off, avail, MSG_NOSIGNAL);
    if (n > 0) {
        c->s2c_off += (size_t)n;
        c->s2c_out += (uint64_t)n;
    } else if (io_error(n)) {
        conn_finish(c, "client_error");
    }
}

static void write_server(struct conn *c)
{
    size_t avail = c->c2s_len - c->c2s_off;
    if (avail == 0) return;
    ssize_t n = send(c->sfd, c->c2s + c->c2s_off, avail, MSG_NOSIGNAL);
    if (n > 0) {
        c->c2s_off += (size_t)n;
        c->c2s_out += (uint64_t)n;
    } else if (io_error(n)) {
        conn_finish(c, "server_error");
    }
}

static void connect_done(struct conn *c)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->sfd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        conn_finish(c, "connect_error");
        return;
    }
    c->connecting = 0;
}

/* State changes that do not wait on a socket event: stall timers, half-closes,
 * the end of a cut or reset. */
static void conn_progress(struct conn *c, uint64_t now)
{
    if (c->phase == P_RUN) {
        if (c->stall == ST_BARRIER && c->s2c_out == c->stall_at) {
            c->stall = ST_STALLING;
            c->until = now + opt.stall_ms;
            c->hit = 1;
            log_fault(c);
        }
        if (c->stall == ST_STALLING && now >= c->until) c->stall = ST_DONE;
        if (c->c_eof && !c->s_shut && c->sfd >= 0 && !c->connecting && c->c2s_off == c->c2s_len) {
            shutdown(c->sfd, SHUT_WR);
            c->s_shut = 1;
        }
        if (c->s_eof && !c->c_shut && c->s2c_off == c->s2c_len) {
            shutdown(c->cfd, SHUT_WR);
            c->c_shut = 1;
        }
        if (c->s_eof && c->s_shut && c->sfd >= 0) {
            close(c->sfd); /* done both ways: stop polling it */
            c->sfd = -1;
        }
        if (c->c_eof && c->s_eof && c->c_shut && c->s_shut) conn_finish(c, "eof");
        return;
    }
    if (c->phase == P_FLUSH && c->s2c_off == c->s2c_len) {
        if (c->mode == M_RESET) {
            c->phase = P_RST;
            c->until = now + RST_DRAIN_MS;
        } else {
            /* FIN, then read until the client closes, so close() cannot turn
             * unread client bytes into a RST. */
            shutdown(c->cfd, SHUT_WR);
            c->phase = P_LINGER;
            c->until = now + LINGER_MS;
        }
    }
    if (c->phase == P_RST) {
        /* Wait until the client has acked everything, so the RST cannot
         * overtake data: the client gets exactly the planned prefix. */
        int q = 0;
        if (ioctl(c->cfd, SIOCOUTQ, &q) != 0 || q == 0 || now >= c->until) {
            send_rst_close(c->cfd);
            c->cfd = -1;
            conn_finish(c, "fault");
        }
        return;
    }
    if (c->phase == P_LINGER && now >= c->until) conn_finish(c, "fault");
}

/* ---- setup -------------------------------------------------------------- */

static int split_hostport(const char *s, char *host, size_t hn, char *port, size_t pn)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || !colon[1]) return -1;
    const char *h = s;
    size_t len = (size_t)(colon - s);
    if (h[0] == '[' && len >= 2 && h[len - 1] == ']') {
        h++;
        len -= 2;
    }
    if (len >= hn || strlen(colon + 1) >= pn) return -1;
    memcpy(host, h, len);
    host[len] = '\0';
    strcpy(port, colon + 1);
    return 0;
}

static int resolve(const char *hp, int passive, struct sockaddr_storage *out, socklen_t *outlen)
{
    char host[256], port[16];
    if (split_hostport(hp, host, sizeof host, port, sizeof port) != 0) return -1;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || !res) {
        fprintf(stderr, "tm-proxy: cannot resolve %s: %s\n", hp, gai_strerror(rc));
        return -1;
    }
    struct addrinfo *pick = res;
    for (struct addrinfo *a = res; a; a = a->ai_next)
        if (a->ai_family == AF_INET) {
            pick = a; /* prefer IPv4: "localhost" then matches 127.0.0.1 listeners */
            break;
        }
    memcpy(out, pick->ai_addr, pick->ai_addrlen);
    *outlen = pick->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void on_signal(int sig)
{
    (void)sig;
    int saved = errno;
    ssize_t r = write(sig_pipe[1], "x", 1);
    (void)r;
    errno = saved;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tm-proxy --listen HOST:PORT --target HOST:PORT --seed N [--mode MODE] [--rate R]\n"
            "                [--stall-ms MS] [--min-offset N] [--max-offset N] [--max-event K] [--log FILE]\n"
            "modes: none cut reset stall event-boundary mid-event mixed (default mixed)\n"
            "       tm-proxy --help | --version\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0) return 1;
        if (strcmp(a, "--version") == 0) return 2;
        if (i + 1 >= argc) return -1;
        const char *v = argv[++i];
        if (strcmp(a, "--listen") == 0) {
            opt.listen = v;
        } else if (strcmp(a, "--target") == 0) {
            opt.target = v;
        } else if (strcmp(a, "--log") == 0) {
            opt.log_path = v;
        } else if (strcmp(a, "--seed") == 0) {
            if (parse_u64(v, &opt.seed)) return -1;
            opt.have_seed = 1;
        } else if (strcmp(a, "--mode") == 0) {
            int m = -1;
            for (int k = 0; k < M_COUNT; k++)
                if (strcmp(v, MODE_NAME[k]) == 0) m = k;
            if (m < 0) return -1;
            opt.mode = m;
        } else if (strcmp(a, "--rate") == 0) {
            char *end;
            opt.rate = strtod(v, &end);
            if (end == v || *end || !(opt.rate >= 0.0 && opt.rate <= 1.0)) return -1;
        } else if (strcmp(a, "--stall-ms") == 0) {
            if (parse_u64(v, &opt.stall_ms)) return -1;
        } else if (strcmp(a, "--min-offset") == 0) {
            if (parse_u64(v, &opt.min_off) || opt.min_off == 0) return -1;
        } else if (strcmp(a, "--max-offset") == 0) {
            if (parse_u64(v, &opt.max_off)) return -1;
        } else if (strcmp(a, "--max-event") == 0) {
            if (parse_u64(v, &opt.max_event) || opt.max_event == 0) return -1;
        } else {
            return -1;
        }
    }
    if (!opt.listen || !opt.target || !opt.have_seed || opt.max_off < opt.min_off) return -1;
    return 0;
}

static int open_listener(void)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (resolve(opt.listen, 1, &ss, &sl) != 0) return -1;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 256) != 0) {
        fprintf(stderr, "tm-proxy: cannot listen on %s: %s\n", opt.listen, strerror(errno));
        close(fd);
        return -1;
    }
    sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    char addr[INET6_ADDRSTRLEN];
    unsigned port;
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, addr, sizeof addr);
        port = ntohs(s6->sin6_port);
        printf("listening on [%s]:%u\n", addr, port);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &s4->sin_addr, addr, sizeof addr);
        port = ntohs(s4->sin_port);
        printf("listening on %s:%u\n", addr, port);
    }
    fflush(stdout);
    return fd;
}

static void print_summary(FILE *f)
{
    uint64_t faults = 0;
    for (int k = M_CUT; k <= M_MID; k++) faults += stats.hit[k];
    fprintf(f,
            "summary connections=%" PRIu64 " faults=%" PRIu64 " cut=%" PRIu64 " reset=%" PRIu64 " stall=%" PRIu64
            " event-boundary=%" PRIu64 " mid-event=%" PRIu64 " unreached=%" PRIu64 " none=%" PRIu64 "\n",
            stats.conns, faults, stats.hit[M_CUT], stats.hit[M_RESET], stats.hit[M_STALL], stats.hit[M_EVENT],
            stats.hit[M_MID], stats.unreached, stats.none);
    fflush(f);
}

int main(int argc, char **argv)
{
    int pa = parse_args(argc, argv);
    if (pa == 1) {
        usage(stdout);
        return 0;
    }
    if (pa == 2) {
        printf("tm-proxy %s\n", TIDEMARK_VERSION);
        return 0;
    }
    if (pa != 0) {
        usage(stderr);
        return 2;
    }
    log_out = stderr;
    if (opt.log_path) {
        log_out = fopen(opt.log_path, "a");
        if (!log_out) {
            fprintf(stderr, "tm-proxy: cannot open %s: %s\n", opt.log_path, strerror(errno));
            return 1;
        }
    }
    if (resolve(opt.target, 0, &target_addr, &target_len) != 0) return 1;
    if (pipe(sig_pipe) != 0) return 1;
    fcntl(sig_pipe[0], F_SETFL, O_NONBLOCK);
    fcntl(sig_pipe[1], F_SETFL, O_NONBLOCK);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int lfd = open_listener();
    if (lfd < 0) return 1;
    logline("start listen=%s target=%s seed=%" PRIu64 " mode=%s rate=%g stall-ms=%" PRIu64 " offsets=%" PRIu64
            "..%" PRIu64 " max-event=%" PRIu64,
            opt.listen, opt.target, opt.seed, MODE_NAME[opt.mode], opt.rate, opt.stall_ms, opt.min_off,
            opt.max_off, opt.max_event);

    struct pollfd *pfd = NULL;
    size_t cappfd = 0;
    uint64_t next_id = 1;
    int running = 1;
    while (running) {
        size_t need = 2 + 2 * nconns;
        if (need > cappfd) {
            size_t nc = need * 2;
            struct pollfd *n = realloc(pfd, nc * sizeof *n);
            if (!n) break;
            pfd = n;
            cappfd = nc;
        }
        size_t np = 0;
        pfd[np++] = (struct pollfd){sig_pipe[0], POLLIN, 0};
        pfd[np++] = (struct pollfd){lfd, POLLIN, 0};
        uint64_t now = now_ms();
        int timeout = -1;
        for (size_t i = 0; i < nconns; i++) {
            struct conn *c = conns[i];
            c->pi_c = c->pi_s = -1;
            short ce = 0, se = 0;
            if (c->phase == P_RUN) {
                if (!c->c_eof && c->c2s_len - c->c2s_off < BUF_SZ) ce |= POLLIN;
                if (s2c_writable(c) > 0) ce |= POLLOUT;
                if (c->connecting) {
                    se = POLLOUT;
                } else if (c->sfd >= 0) {
                    if (!c->s_eof && c->s2c_len - c->s2c_off < BUF_SZ) se |= POLLIN;
                    if (c->c2s_len > c->c2s_off) se |= POLLOUT;
                }
            } else if (c->phase == P_FLUSH) {
                ce = POLLOUT;
            } else if (c->phase == P_LINGER) {
                ce = POLLIN;
            }
            uint64_t deadline = 0;
            if (c->phase == P_RUN && c->stall == ST_STALLING) deadline = c->until;
            if (c->phase == P_LINGER) deadline = c->until;
            if (c->phase == P_RST) deadline = now + 2; /* re-check the send queue soon */
            if (deadline) {
                int t = deadline > now ? (int)(deadline - now) : 0;
                if (timeout < 0 || t < timeout) timeout = t;
            }
            if (c->phase != P_RST && c->cfd >= 0 && (ce || c->phase == P_RUN)) {
                c->pi_c = (int)np;
                pfd[np++] = (struct pollfd){c->cfd, ce, 0};
            }
            if (c->phase == P_RUN && c->sfd >= 0) {
                c->pi_s = (int)np;
                pfd[np++] = (struct pollfd){c->sfd, se, 0};
            }
        }
        int rc = poll(pfd, (nfds_t)np, timeout);
        if (rc < 0 && errno != EINTR) break;
        if (rc > 0 && (pfd[0].revents & POLLIN)) {
            running = 0;
            break;
        }
        if (rc > 0 && (pfd[1].revents & POLLIN)) {
            for (;;) {
                int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0) break;
                conn_new(cfd, next_id++);
            }
        }
        for (size_t i = 0; rc > 0 && i < nconns; i++) {
            struct conn *c = conns[i];
            if (c->pi_s >= 0 && c->phase == P_RUN) {
                short re = pfd[c->pi_s].revents;
                if (c->connecting && (re & (POLLOUT | POLLERR | POLLHUP))) connect_done(c);
                if (c->phase == P_RUN && !c->connecting && (re & (POLLIN | POLLERR | POLLHUP)) &&
                    (pfd[c->pi_s].events & POLLIN))
                    read_server(c);
                if (c->phase == P_RUN && c->sfd >= 0 && !c->connecting && (re & POLLOUT)) write_server(c);
                if (c->phase == P_RUN && c->sfd >= 0 && !c->connecting && (re & (POLLERR | POLLHUP)) &&
                    !(pfd[c->pi_s].events & POLLIN)) {
                    /* The server is gone while we were not reading it: nothing more can come from it. */
                    close(c->sfd);
                    c->sfd = -1;
                    c->s_eof = c->s_shut = 1;
                }
            }
            if (c->pi_c >= 0 && c->cfd >= 0 && c->phase != P_DEAD) {
                short re = pfd[c->pi_c].revents;
                if ((re & (POLLIN | POLLERR | POLLHUP)) && (pfd[c->pi_c].events & POLLIN)) read_client(c);
                if (c->phase != P_DEAD && (re & POLLOUT)) write_client(c);
                /* Hang-up while we were not reading: the client is gone (also stops a POLLHUP spin). */
                if (c->phase != P_DEAD && (re & (POLLERR | POLLHUP)) && !(pfd[c->pi_c].events & POLLIN) &&
                    !(re & POLLOUT))
                    conn_finish(c, (re & POLLERR) ? "client_error" : "client_hup");
            }
        }
        now = now_ms();
        size_t w = 0;
        for (size_t i = 0; i < nconns; i++) {
            struct conn *c = conns[i];
            if (c->phase != P_DEAD) conn_progress(c, now);
            if (c->phase == P_DEAD)
                free(c);
            else
                conns[w++] = c;
        }
        nconns = w;
    }

    for (size_t i = 0; i < nconns; i++) {
        conn_finish(conns[i], "shutdown");
        free(conns[i]);
    }
    free(conns);
    free(pfd);
    close(lfd);
    fputs("tm-proxy: ", stderr);
    print_summary(stderr);
    if (log_out != stderr) {
        print_summary(log_out);
        fclose(log_out);
    }
    close(sig_pipe[0]);
    close(sig_pipe[1]);
    return 0;
}
