/*
 * http_server.c - libmicrohttpd glue: connection limits and deadlines,
 * bounded body collection, asynchronous replies (suspend/resume), and SSE
 * stream connections whose bytes come from a source the caller supplies.
 *
 * Lock order: hub -> stream connection -> whatever a source takes (the
 * server's feed reads the store). Wake-ups come with no lock of theirs held.
 */
#include "http_server.h"
#include "sse.h"
#include "../base/buf.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/map.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct hdr {
    char *name, *value;
    struct hdr *next;
} hdr;

/* What one TCP connection is doing, for its deadline. */
typedef enum cstate {
    C_IDLE,      /* no request in progress: idle_timeout_ms applies */
    C_RECEIVING, /* request line seen, request not complete: request_deadline_ms */
    C_BUSY,      /* request complete, answer pending or being sent */
    C_STREAM,    /* an SSE stream: no deadline (keep-alives find dead peers) */
    C_REFUSED,   /* over a limit: answered by the transport (503, 413), closing */
    C_DROPPED,   /* shut down by the reaper */
} cstate;

typedef struct tconn {
    int fd;
    char addr[64];
    cstate state;
    int64_t since_ms;
    struct tconn *prev, *next;
} tconn;

struct tm_http {
    struct MHD_Daemon *d;
    tm_http_handler fn;
    void *ud;
    tm_http_config cfg;
    unsigned port;
    pthread_mutex_t hub_mu;
    tm_map *hub; /* "session/stream" -> sconn */
    atomic_int stopping;   /* read by stream readers without hub_mu */
    pthread_t ka_thread;
    pthread_mutex_t ka_mu;
    pthread_cond_t ka_cv;
    int ka_running;
    /* connections: limits and deadlines (lock order: hub_mu, then conn_mu) */
    pthread_mutex_t conn_mu;
    tconn *conns;      /* every open connection */
    unsigned nconns;
    tm_map *per_addr;  /* address -> unsigned count, while any is open */
    char *busy_body;   /* owned copy of cfg.busy_body */
    char *headers_body; /* owned copy of cfg.headers_body */
    char *too_large_body; /* owned copy of cfg.too_large_body */
    char *bad_chunk_body; /* owned copy of cfg.bad_chunk_body */
    int listen_fd;     /* ours until libmicrohttpd takes it */
    /* TLS: the PEM files' contents (NULL: plain HTTP; ca NULL: no client
     * certificates asked for) */
    char *tls_cert, *tls_key, *tls_ca;
    struct {
        tm_gauge *conns_open, *streams_open;
        tm_counter *refused_total, *refused_address, *dropped_deadline, *dropped_idle,
            *bad_framing;
    } m;
};

/* The most a deferred stream answer gathers to go out whole, with its
 * length; past it the answer goes on chunked. The source's pulls append
 * whole events, so it may hold one pull's worth more. */
#define WHOLE_MAX (64u << 10)

/* An SSE connection attached to one stream: bytes come from its source. */
typedef struct sconn {
    tm_http *h;
    struct MHD_Connection *conn;
    pthread_mutex_t mu;
    char key[TM_HTTP_KEY_MAX];
    tm_http_source src;
    tm_buf out;
    int suspended;
    int ending;      /* asked to end (by the server, or a session closing) */
    int end_now;     /* end without asking the source for more */
    int superseded;
    int ended;       /* the reader ended the stream: everything is handed to MHD */
    int ka_due;
    int attached;
} sconn;

struct tm_http_req {
    tm_http *h;
    struct MHD_Connection *conn;
    tconn *tc;
    pthread_mutex_t mu;
    char *method, *path;
    tm_buf body;
    const char *framing; /* NULL or why the framing is ambiguous */
    size_t lingered;     /* > 0: refused while its body streams (refuse_raw); 1 + body
                            bytes dropped since */
    int chunked;         /* Transfer-Encoding: chunked (its framing checked) */
    int lost_header;     /* a header could not be added (out of memory) */
    char peer[64];
    int handled;
    int suspended;
    struct sconn *sc;          /* a held stream answer (tm_http_source.has_events) */
    int sc_waited;             /* it slept until its first wake */
    struct MHD_Response *resp; /* ready to queue */
    unsigned status;
    hdr *headers;
    void *kept;                /* tm_http_req_keep */
    void (*kept_free)(void *);
};

/* ---- stream connections ---------------------------------------------- */

static void sconn_resume_locked(sconn *s)
{
    if (s->suspended) {
        s->suspended = 0;
        MHD_resume_connection(s->conn);
    }
}

/* Copy out what is pending; else ask the source for more, or sleep until
 * tm_http_wake, or end. Called by libmicrohttpd on its I/O thread; the
 * source runs here, under the connection's lock (lock order: hub, then
 * connection, then whatever the source takes). */
static ssize_t sconn_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    sconn *s = cls;
    tm_http *h = s->h;
    pthread_mutex_lock(&s->mu);
    /* While the source has more, gather it into one chunk (one write: a
     * call's head, priming event and result go out together). */
    int more = 0;
    for (;;) {
        if (s->out.len > 0 && (!more || s->out.len >= max)) {
            size_t n = s->out.len < max ? s->out.len : max;
            memcpy(buf, s->out.data, n);
            tm_buf_consume(&s->out, n);
            pthread_mutex_unlock(&s->mu);
            return (ssize_t)n;
        }
        if (atomic_load(&h->stopping) || s->superseded || s->end_now) {
            if (s->out.len == 0)
                break;
            more = 0; /* what was gathered still goes out first */
            continue;
        }
        int st = s->src.pull(s->src.ud, &s->out);
        more = st == TM_HTTP_MORE;
        if (more || s->out.len > 0) /* what it has is sent before a wait or the end */
            continue;
        if (st == TM_HTTP_END)
            break;
        if (s->ka_due) {
            s->ka_due = 0;
            tm_sse_frame_comment(&s->out, "keep-alive");
            continue;
        }
        tm_buf_free(&s->out); /* a sleeping stream holds no buffer */
        s->suspended = 1;
        MHD_suspend_connection(s->conn);
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    s->ended = 1; /* no longer live: a resume may take the stream over at once */
    pthread_mutex_unlock(&s->mu);
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static void sconn_destroy(sconn *s)
{
    if (s->src.free)
        s->src.free(s->src.ud);
    pthread_mutex_destroy(&s->mu);
    tm_buf_free(&s->out);
    free(s);
}

static void sconn_free(void *cls)
{
    sconn *s = cls;
    tm_http *h = s->h;
    pthread_mutex_lock(&h->hub_mu);
    if (s->attached && tm_map_get(h->hub, s->key) == s) {
        tm_map_del(h->hub, s->key);
        tm_gauge_add(h->m.streams_open, -1);
    }
    pthread_mutex_unlock(&h->hub_mu);
    sconn_destroy(s);
}

/* Whether the peer of a suspended connection has gone: EOF or error on a
 * non-blocking peek. Only asked of suspended connections, whose socket MHD
 * is not touching. */
static int peer_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 1;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL))
        return 1;
    char ch;
    ssize_t n = recv(ci->connect_fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

void tm_http_wake(tm_http *h, const char *key)
{
    pthread_mutex_lock(&h->hub_mu);
    sconn *s = tm_map_get(h->hub, key);
    if (s) {
        pthread_mutex_lock(&s->mu);
        sconn_resume_locked(s);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&h->hub_mu);
}

int tm_http_signal(tm_http *h, const char *key, int (*fn)(void *src_ud, void *arg), void *arg)
{
    pthread_mutex_lock(&h->hub_mu);
    sconn *s = tm_map_get(h->hub, key);
    if (s) {
        pthread_mutex_lock(&s->mu);
        if (fn(s->src.ud, arg))
            s->ending = 1;
        sconn_resume_locked(s);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&h->hub_mu);
    return s ? 0 : TIDEMARK_ENOTFOUND;
}

typedef struct prefix_ctx {
    const char *prefix;
    size_t len;
} prefix_ctx;

static void end_matching(const char *key, void *val, void *ud)
{
    prefix_ctx *p = ud;
    sconn *s = val;
    if (strncmp(key, p->prefix, p->len) != 0)
        return;
    pthread_mutex_lock(&s->mu);
    s->ending = s->end_now = 1;
    sconn_resume_locked(s);
    pthread_mutex_unlock(&s->mu);
}

void tm_http_end(tm_http *h, const char *prefix)
{
    prefix_ctx p = {prefix, strlen(prefix)};
    pthread_mutex_lock(&h->hub_mu);
    tm_map_each(h->hub, end_matching, &p);
    pthread_mutex_unlock(&h->hub_mu);
}

static void ka_mark(const char *key, void *val, void *ud)
{
    (void)key;
    (void)ud;
    sconn *s = val;
    pthread_mutex_lock(&s->mu);
    if (s->suspended) {
        s->ka_due = 1;
        sconn_resume_locked(s);
    }
    pthread_mutex_unlock(&s->mu);
}

static void reap(tm_http *h);

#define TICK_MS 250 /* deadline granularity */

/* The ticker: deadlines every TICK_MS, keep-alive comments every keepalive_ms. */
static void *ka_loop(void *arg)
{
    tm_http *h = arg;
    int64_t next_ka = tm_now_ms() + h->cfg.keepalive_ms;
    pthread_mutex_lock(&h->ka_mu);
    while (h->ka_running) {
        int64_t wait = next_ka - tm_now_ms();
        struct timespec ts = tm_deadline_ms(wait < TICK_MS ? (wait > 0 ? wait : 0) : TICK_MS);
        pthread_cond_timedwait(&h->ka_cv, &h->ka_mu, &ts);
        if (!h->ka_running)
            break;
        pthread_mutex_unlock(&h->ka_mu);
        reap(h);
        if (tm_now_ms() >= next_ka) {
            next_ka = tm_now_ms() + h->cfg.keepalive_ms;
            pthread_mutex_lock(&h->hub_mu);
            tm_map_each(h->hub, ka_mark, NULL);
            pthread_mutex_unlock(&h->hub_mu);
        }
        pthread_mutex_lock(&h->ka_mu);
    }
    pthread_mutex_unlock(&h->ka_mu);
    return NULL;
}

/* ---- connections: limits and deadlines ----------------------------------- */

#define REFUSED_LINGER_MS 1000 /* a refused connection is cut after this */

static void set_state(tm_http *h, tconn *tc, cstate st)
{
    if (!tc)
        return;
    pthread_mutex_lock(&h->conn_mu);
    if (tc->state != C_REFUSED && tc->state != C_DROPPED) {
        tc->state = st;
        tc->since_ms = tm_now_ms();
    }
    pthread_mutex_unlock(&h->conn_mu);
}

static tconn *tconn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void peer_address(struct MHD_Connection *c, char *out, size_t n)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    out[0] = '\0';
    if (!ci || !ci->client_addr)
        return;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out, (socklen_t)n);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, out,
                  (socklen_t)n);
}

/* Connections per address live in the map as counts cast to pointers. */
static size_t addr_count_add(tm_http *h, const char *addr, int d)
{
    size_t n = (size_t)(uintptr_t)tm_map_get(h->per_addr, addr) + (size_t)(ssize_t)d;
    if (n == 0)
        tm_map_del(h->per_addr, addr);
    else if (tm_map_put(h->per_addr, addr, (void *)(uintptr_t)n) != 0)
        return 0;
    return n;
}

/* Over a limit: say so with a complete 503 (the socket's send buffer is
 * empty on a new connection, so this does not block) and stop sending; MHD
 * never answers it, the reaper cuts it. Not a hang: a typed answer. */
static void refuse(tm_http *h, tconn *tc)
{
    const char *body = h->busy_body ? h->busy_body : "";
    size_t blen = strlen(body);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nRetry-After: 1\r\nConnection: close\r\n\r\n",
                     blen);
    if (!h->tls_cert && tc->fd >= 0 &&
        send(tc->fd, head, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n && blen)
        (void)!send(tc->fd, body, blen, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (tc->fd >= 0)
        shutdown(tc->fd, SHUT_WR);
}

static void conn_started(tm_http *h, struct MHD_Connection *c, void **socket_context)
{
    tconn *tc = calloc(1, sizeof *tc);
    if (!tc)
        return; /* untracked: no deadline for this one */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    tc->fd = ci ? ci->connect_fd : -1;
    peer_address(c, tc->addr, sizeof tc->addr);
    tc->since_ms = tm_now_ms();
    tc->state = C_IDLE;
    pthread_mutex_lock(&h->conn_mu);
    tc->next = h->conns;
    if (h->conns)
        h->conns->prev = tc;
    h->conns = tc;
    h->nconns++;
    size_t from_addr = addr_count_add(h, tc->addr, 1);
    int over_total = h->nconns > h->cfg.max_connections;
    int over_addr = !over_total && from_addr > h->cfg.max_per_address;
    if (over_total || over_addr)
        tc->state = C_REFUSED;
    pthread_mutex_unlock(&h->conn_mu);
    tm_gauge_add(h->m.conns_open, 1);
    if (over_total || over_addr) {
        tm_counter_inc(over_total ? h->m.refused_total : h->m.refused_address);
        refuse(h, tc);
    }
    *socket_context = tc;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    tm_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        return conn_started(h, c, socket_context);
    tconn *tc = *socket_context;
    if (!tc)
        return;
    /* MHD closes the socket only after this returns: while the reaper holds
     * conn_mu, the fd it shuts down is this connection's. */
    pthread_mutex_lock(&h->conn_mu);
    if (tc->prev)
        tc->prev->next = tc->next;
    else
        h->conns = tc->next;
    if (tc->next)
        tc->next->prev = tc->prev;
    h->nconns--;
    addr_count_add(h, tc->addr, -1);
    pthread_mutex_unlock(&h->conn_mu);
    tm_gauge_add(h->m.conns_open, -1);
    *socket_context = NULL;
    free(tc);
}

/* The request line arrived: the request's deadline starts. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)uri;
    set_state(cls, tconn_of(c), C_RECEIVING);
    return NULL;
}

/* Cut connections past their deadline (libmicrohttpd's own timeout is reset
 * by every byte, so a client trickling a header never reaches it). */
static void reap(tm_http *h)
{
    int64_t now = tm_now_ms();
    pthread_mutex_lock(&h->conn_mu);
    for (tconn *tc = h->conns; tc; tc = tc->next) {
        int64_t age = now - tc->since_ms;
        tm_counter *why = NULL; /* NULL too for a refused connection's end */
        if (tc->state == C_RECEIVING && age > (int64_t)h->cfg.request_deadline_ms)
            why = h->m.dropped_deadline;
        else if (tc->state == C_IDLE && age > (int64_t)h->cfg.idle_timeout_ms)
            why = h->m.dropped_idle;
        else if (!(tc->state == C_REFUSED && age > REFUSED_LINGER_MS))
            continue;
        if (tc->fd >= 0)
            shutdown(tc->fd, SHUT_RDWR);
        tc->state = C_DROPPED;
        tm_counter_inc(why);
    }
    pthread_mutex_unlock(&h->conn_mu);
}

/* ---- framing --------------------------------------------------------------- */

/* RFC 9110 tchar: what a field name is made of. */
static int is_tchar(unsigned char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

static int is_token(const char *s)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (!is_tchar((unsigned char)*s))
            return 0;
    return 1;
}

/* 1 to 19 digits: a length that fits in 64 bits. */
static int is_length(const char *v)
{
    size_t len = v ? strlen(v) : 0;
    return len >= 1 && len <= 19 && strspn(v, "0123456789") == len;
}

const char *tm_http_framing_check(const tm_http_field *f, size_t n)
{
    size_t hosts = 0, cls = 0, tes = 0;
    const char *cl = NULL, *te = NULL;
    int folded = 0, bad_name = 0;
    for (size_t i = 0; i < n; i++) {
        folded |= f[i].folded;
        bad_name |= !is_token(f[i].name);
        if (!f[i].name)
            continue;
        if (strcasecmp(f[i].name, "Host") == 0) {
            hosts++;
        } else if (strcasecmp(f[i].name, "Content-Length") == 0) {
            cls++;
            cl = f[i].value;
        } else if (strcasecmp(f[i].name, "Transfer-Encoding") == 0) {
            tes++;
            te = f[i].value;
        }
    }
    if (folded)
        return "obs_fold";
    if (bad_name)
        return "invalid_field_name";
    if (hosts > 1)
        return "repeated_host";
    if (cls > 1)
        return "repeated_content_length";
    if (tes > 1)
        return "repeated_transfer_encoding";
    if (cls && tes)
        return "content_length_with_transfer_encoding";
    /* libmicrohttpd decodes a body as chunked only for exactly this value;
     * any other coding or list leaves the body's end in doubt. */
    if (tes && (!te || strcasecmp(te, "chunked") != 0))
        return "invalid_transfer_encoding";
    if (cls && !is_length(cl))
        return "invalid_content_length";
    return NULL;
}

typedef struct framing_scan {
    tm_http_field *f;
    size_t n, cap;
    size_t gap_max; /* the most whitespace a value can follow its colon by */
} framing_scan;

/* Whether libmicrohttpd (0.9.x) continued this field's line (obs-fold). It
 * parses a header line in place: the colon becomes a NUL and the value
 * starts after it and any spaces or tabs. A continuation line is appended
 * to the field's *name* in a new block, so a folded field's value no longer
 * follows its name. Compared as addresses within the connection's pool. */
static int field_folded(const char *name, const char *value, size_t gap_max)
{
    if (!name || !value)
        return 0;
    uintptr_t after = (uintptr_t)name + strlen(name) + 1, v = (uintptr_t)value;
    if (v < after || v - after > gap_max)
        return 1;
    for (const char *p = name + strlen(name) + 1; p < value; p++)
        if (*p != ' ' && *p != '\t')
            return 1;
    return 0;
}

static enum MHD_Result scan_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    (void)kind;
    framing_scan *s = cls;
    if (s->n < s->cap)
        s->f[s->n++] = (tm_http_field){key, value, field_folded(key, value, s->gap_max)};
    return MHD_YES;
}

/* Why the request's header fields leave its framing in doubt
 * (tm_http_framing_check), NULL when they do not. OUT *why.
 * TIDEMARK_ENOMEM. */
static int framing_of(tm_http *h, struct MHD_Connection *c, const char **why)
{
    int n = MHD_get_connection_values(c, MHD_HEADER_KIND, NULL, NULL);
    framing_scan s = {calloc(n > 0 ? (size_t)n : 1, sizeof *s.f), 0, n > 0 ? (size_t)n : 0,
                      h->cfg.max_header_bytes};
    if (!s.f)
        return TIDEMARK_ENOMEM;
    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_framing, &s);
    *why = tm_http_framing_check(s.f, s.n);
    free(s.f);
    return 0;
}

/* ---- requests ---------------------------------------------------------- */

const char *tm_http_req_method(const tm_http_req *r) { return r->method; }
const char *tm_http_req_path(const tm_http_req *r) { return r->path; }

const char *tm_http_req_header(const tm_http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

typedef struct each_hdr {
    void (*fn)(void *ud, const char *name, const char *value);
    void *ud;
} each_hdr;

static enum MHD_Result each_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    const each_hdr *e = cls;
    if (key && value)
        e->fn(e->ud, key, value);
    return MHD_YES;
}

void tm_http_req_each_header(const tm_http_req *r,
                             void (*fn)(void *ud, const char *name, const char *value), void *ud)
{
    each_hdr e = {fn, ud};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, each_header, &e);
}

void tm_http_req_keep(tm_http_req *r, void *ud, void (*free_fn)(void *ud))
{
    r->kept = ud;
    r->kept_free = free_fn;
}

const char *tm_http_req_body(const tm_http_req *r, size_t *len)
{
    *len = r->body.len;
    return r->body.data ? r->body.data : "";
}

const char *tm_http_req_framing_error(const tm_http_req *r) { return r->framing; }
const char *tm_http_req_peer(const tm_http_req *r) { return r->peer; }
int tm_http_req_tls(const tm_http_req *r) { return r->h->tls_cert != NULL; }

void tm_http_req_add_header(tm_http_req *r, const char *name, const char *value)
{
    hdr *x = calloc(1, sizeof *x);
    if (x) {
        x->name = strdup(name);
        x->value = strdup(value);
    }
    if (!x || !x->name || !x->value) {
        if (x) {
            free(x->name);
            free(x->value);
        }
        free(x);
        r->lost_header = 1; /* the answer would be wrong without it: finish() sends a 500 */
        return;
    }
    x->next = r->headers;
    r->headers = x;
}

static void apply_headers(tm_http_req *r, struct MHD_Response *resp)
{
    for (hdr *x = r->headers; x; x = x->next)
        MHD_add_response_header(resp, x->name, x->value);
}

/* The request's own headers on resp (a 500 instead, if one was lost). */
static struct MHD_Response *decorate(tm_http_req *r, struct MHD_Response *resp, unsigned *status)
{
    if (r->lost_header) { /* never an answer without a header it needs */
        MHD_destroy_response(resp);
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        *status = 500;
    }
    apply_headers(r, resp);
    if (r->framing) /* the rest of the connection's bytes cannot be trusted */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    return resp;
}

/* Publish a built response (or a deferred stream, sc); resume the
 * connection if it sleeps. */
static void publish(tm_http_req *r, struct MHD_Response *resp, unsigned status, sconn *sc)
{
    pthread_mutex_lock(&r->mu);
    r->resp = resp;
    r->status = status;
    r->sc = sc;
    int wake = r->suspended;
    r->suspended = 0;
    struct MHD_Connection *conn = r->conn;
    pthread_mutex_unlock(&r->mu);
    /* Outside r->mu: once resumed, the request may complete and free r (its
     * mutex too) before this thread would have unlocked it. While it is
     * suspended nothing else can complete it, so conn is still valid here. */
    if (wake)
        MHD_resume_connection(conn);
}

static void finish(tm_http_req *r, struct MHD_Response *resp, unsigned status)
{
    resp = decorate(r, resp, &status);
    publish(r, resp, status, NULL);
}

void tm_http_reply(tm_http_req *r, unsigned status, const char *content_type, const char *body,
                   size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
    if (!resp) {
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        status = 500;
    }
    if (content_type && len > 0)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    finish(r, resp, status);
}

static void sse_headers(struct MHD_Response *resp)
{
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
}

/* The response that sends s as it comes (chunked). The block is the
 * response's own buffer, zeroed at creation; MHD reads a chunked (HTTP/1.1)
 * stream into the connection's buffer instead, so it serves HTTP/1.0 peers
 * only: 512 bytes (32 KiB cost ~33,000 instructions per SSE answer, zeroing
 * memory never used; 4 KiB was 35 MB of RSS with 10,000 open streams). */
static struct MHD_Response *stream_response(sconn *s)
{
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 512, sconn_read, s, sconn_free);
    if (resp)
        sse_headers(resp);
    return resp;
}

/* Put s in the hub under its key, taking over from a connection that is
 * no longer live. TIDEMARK_EBUSY when a live one holds the key. */
static int hub_attach(tm_http *h, sconn *s)
{
    pthread_mutex_lock(&h->hub_mu);
    sconn *old = tm_map_get(h->hub, s->key);
    if (old) {
        pthread_mutex_lock(&old->mu);
        int dead = old->superseded || old->ending || old->ended ||
                   (old->suspended && peer_gone(old->conn));
        if (!dead) {
            pthread_mutex_unlock(&old->mu);
            pthread_mutex_unlock(&h->hub_mu);
            return TIDEMARK_EBUSY;
        }
        /* The old peer is gone; let its connection end and take over. */
        old->superseded = 1;
        old->attached = 0;
        sconn_resume_locked(old);
        pthread_mutex_unlock(&old->mu);
        tm_map_del(h->hub, s->key);
        tm_gauge_add(h->m.streams_open, -1);
    }
    int rc = tm_map_put(h->hub, s->key, s);
    if (rc == 0) {
        s->attached = 1;
        tm_gauge_add(h->m.streams_open, 1);
    }
    pthread_mutex_unlock(&h->hub_mu);
    return rc;
}

int tm_http_reply_source(tm_http_req *r, const char *key, const tm_http_source *src)
{
    tm_http *h = r->h;
    if (strlen(key) >= TM_HTTP_KEY_MAX)
        return TIDEMARK_ERANGE;
    sconn *s = calloc(1, sizeof *s);
    if (!s)
        return TIDEMARK_ENOMEM;
    s->h = h;
    s->conn = r->conn;
    pthread_mutex_init(&s->mu, NULL);
    tm_buf_init(&s->out, 16u << 20);
    snprintf(s->key, sizeof s->key, "%s", key);
    s->src = *src;
    int rc = hub_attach(h, s);
    if (rc) {
        s->src.free = NULL; /* not ours on failure: the caller still owns it */
        sconn_destroy(s);
        return rc;
    }
    if (src->has_events) { /* answered by handle(), on its I/O thread: stream_answer */
        publish(r, NULL, 200, s);
        return 0;
    }
    struct MHD_Response *resp = stream_response(s);
    if (!resp) {
        s->src.free = NULL;
        sconn_free(s);
        return TIDEMARK_ENOMEM;
    }
    set_state(h, r->tc, C_STREAM);
    finish(r, resp, 200);
    return 0;
}

static void req_free(tm_http_req *r)
{
    if (r->kept_free)
        r->kept_free(r->kept);
    while (r->headers) {
        hdr *x = r->headers;
        r->headers = x->next;
        free(x->name);
        free(x->value);
        free(x);
    }
    if (r->resp)
        MHD_destroy_response(r->resp);
    if (r->sc) /* a deferred stream never answered */
        sconn_free(r->sc);
    tm_buf_free(&r->body);
    free(r->method);
    free(r->path);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static enum MHD_Result queue_ready(tm_http_req *r)
{
    struct MHD_Response *resp = r->resp;
    r->resp = NULL;
    enum MHD_Result ret = MHD_queue_response(r->conn, r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static int refused(tm_http *h, tconn *tc)
{
    if (!tc)
        return 0;
    pthread_mutex_lock(&h->conn_mu);
    int r = tc->state == C_REFUSED || tc->state == C_DROPPED;
    pthread_mutex_unlock(&h->conn_mu);
    return r;
}

static tm_http_req *req_new(tm_http *h, struct MHD_Connection *c, const char *url,
                            const char *method)
{
    tm_http_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->h = h;
    r->conn = c;
    r->tc = tconn_of(c);
    pthread_mutex_init(&r->mu, NULL);
    tm_buf_init(&r->body, h->cfg.max_body);
    r->method = strdup(method);
    r->path = strdup(url);
    if (r->tc)
        memcpy(r->peer, r->tc->addr, sizeof r->peer);
    else
        peer_address(c, r->peer, sizeof r->peer);
    return r;
}

/* Pull s until it waits, ends, or holds WHOLE_MAX bytes: TM_HTTP_END when
 * it ended, all of it in s->out; TM_HTTP_WAIT when it waits; TM_HTTP_MORE
 * when there is more than one response should hold (it goes on chunked,
 * pulled as the socket drains: a 10,000-event answer was one 1.5 MB
 * response, framed whole on the I/O thread and held until sent) or it must
 * not be asked (stopping, superseded, ending now: sconn_read ends it).
 * s->mu held. */
static int gather_whole(sconn *s)
{
    if (atomic_load(&s->h->stopping) || s->superseded || s->end_now)
        return TM_HTTP_MORE;
    while (s->out.len < WHOLE_MAX) {
        int st = s->src.pull(s->src.ud, &s->out);
        if (st != TM_HTTP_MORE)
            return st;
    }
    return TM_HTTP_MORE;
}

/* The response for a deferred stream s whose source ended: all of it, with
 * its length (NULL: out of memory). s->mu held. */
static struct MHD_Response *whole_response(sconn *s)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(s->out.len, s->out.data, MHD_RESPMEM_MUST_COPY);
    if (resp)
        sse_headers(resp);
    return resp;
}

/* A deferred stream answer (tm_http_source.has_events), on the
 * connection's I/O thread: a stream that ended goes out whole; one with no
 * event yet sleeps until its first wake, once (a wake between the pull and
 * the sleep waits for s->mu, so none is lost); otherwise, or after that,
 * the stream goes on as usual (chunked) with what it has. */
static enum MHD_Result stream_answer(tm_http *h, tm_http_req *r, struct MHD_Connection *c)
{
    sconn *s = r->sc;
    pthread_mutex_lock(&s->mu);
    int st = gather_whole(s);
    int whole = st == TM_HTTP_END;
    if (st == TM_HTTP_WAIT && !r->sc_waited && !s->src.has_events(s->src.ud)) {
        r->sc_waited = 1;
        s->suspended = 1; /* tm_http_wake, tm_http_signal, a keep-alive resume it */
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    struct MHD_Response *resp = whole ? whole_response(s) : NULL;
    pthread_mutex_unlock(&s->mu);
    r->sc = NULL;
    if (resp) {
        sconn_free(s); /* out of the hub; the source is done */
    } else if ((resp = stream_response(s)) != NULL) {
        set_state(h, r->tc, C_STREAM);
    } else {
        sconn_free(s);
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        r->status = 500;
    }
    unsigned status = r->status;
    resp = decorate(r, resp, &status);
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* The request is complete (or must be answered now): hand it to the
 * handler once, then queue its answer or sleep until it comes. */
static enum MHD_Result handle(tm_http *h, tm_http_req *r, struct MHD_Connection *c)
{
    pthread_mutex_lock(&r->mu);
    if (!r->handled) {
        r->handled = 1;
        pthread_mutex_unlock(&r->mu);
        set_state(h, r->tc, C_BUSY);
        h->fn(h->ud, r);
        pthread_mutex_lock(&r->mu);
    }
    if (r->resp) {
        enum MHD_Result ret = queue_ready(r);
        pthread_mutex_unlock(&r->mu);
        return ret;
    }
    if (r->sc) { /* r->sc is this thread's now: publish has run */
        pthread_mutex_unlock(&r->mu);
        return stream_answer(h, r, c);
    }
    r->suspended = 1;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&r->mu);
    return MHD_YES;
}

/* With a client CA configured: the peer presented a certificate that
 * verifies against it (MHD asks for one but leaves the verdict to us). */
static int client_cert_ok(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!ci || !ci->tls_session)
        return 0;
    gnutls_session_t s = (gnutls_session_t)ci->tls_session;
    unsigned status = 1, n = 0;
    if (gnutls_certificate_type_get(s) != GNUTLS_CRT_X509 ||
        !gnutls_certificate_get_peers(s, &n) || n == 0)
        return 0;
    return gnutls_certificate_verify_peers2(s, &status) == GNUTLS_E_SUCCESS && status == 0;
}

/* Answer status with body (JSON; NULL or "": none) before the request's
 * body is read, then close: libmicrohttpd reads nothing more of a
 * connection answered this early (the answer has room in the pool:
 * TM_HTTP_POOL_RESERVE). */
static enum MHD_Result answer_early(tm_http_req *r, struct MHD_Connection *c, unsigned status,
                                    const char *body)
{
    body = body ? body : "";
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    r->handled = 1;
    enum MHD_Result ok =
        (!*body || MHD_add_response_header(resp, "Content-Type", "application/json")) &&
                MHD_add_response_header(resp, "Connection", "close")
            ? MHD_queue_response(c, status, resp)
            : MHD_NO;
    MHD_destroy_response(resp);
    return ok;
}

/* Bytes on the connection's socket, through TLS when it has it, outside
 * libmicrohttpd: only from its I/O thread for the connection, before any
 * response is queued (nothing else writes to the socket then). Best effort:
 * a short answer into a send buffer that holds nothing else. */
static void send_raw(tm_http *h, struct MHD_Connection *c, const char *buf, size_t len)
{
    const union MHD_ConnectionInfo *ci;
    if (h->tls_cert) {
        ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
        if (ci && ci->tls_session)
            (void)gnutls_record_send((gnutls_session_t)ci->tls_session, buf, len);
        return;
    }
    ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci && send(ci->connect_fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)len)
        shutdown(ci->connect_fd, SHUT_WR);
}

/* What a client may still send after a 413 before it has read it: read
 * and dropped, then the connection is cut (the reaper cuts it after
 * REFUSED_LINGER_MS at the latest). Closing a socket with bytes unread
 * resets the connection, and a client still writing its body may then
 * lose the answer (measured: node, and curl without Expect, did). */
#define LINGER_BYTES (16u << 20)

/* Refuse a request whose body is streaming: libmicrohttpd queues no answer
 * while a body streams, and one queued before would close the connection
 * unread, so the answer (status: "413 Content Too Large") is written here;
 * the sending side is shut and the connection lingers (LINGER_BYTES), then
 * closes. */
static enum MHD_Result refuse_raw(tm_http *h, tm_http_req *r, struct MHD_Connection *c,
                                  const char *status, const char *body)
{
    body = body ? body : "";
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %s\r\n%sContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, *body ? "Content-Type: application/json\r\n" : "", strlen(body));
    size_t len = (size_t)n + strlen(body);
    char *all = malloc(len);
    if (all) { /* one write */
        memcpy(all, head, (size_t)n);
        memcpy(all + n, body, len - (size_t)n);
        send_raw(h, c, all, len);
    }
    free(all);
    tm_buf_free(&r->body);
    r->handled = 1;
    r->lingered = 1;
    if (r->tc) {
        pthread_mutex_lock(&h->conn_mu);
        if (r->tc->state != C_DROPPED) {
            r->tc->state = C_REFUSED;
            r->tc->since_ms = tm_now_ms();
        }
        pthread_mutex_unlock(&h->conn_mu);
    }
    return MHD_YES;
}

/* A body over max_body: 413, before any of it is read when its length is
 * declared (a Content-Length, or a chunk's size), else as soon as it
 * passes the limit. */
static enum MHD_Result refuse_body(tm_http *h, tm_http_req *r, struct MHD_Connection *c)
{
    return refuse_raw(h, r, c, "413 Content Too Large", h->too_large_body);
}

/* The size line of the chunk whose bytes start at upload, when it is in
 * view: libmicrohttpd 0.9.x parses the request in place in one buffer that
 * starts with the request line (method) and hands a chunk's bytes from it,
 * so [method + header size, upload) holds what it parsed of this read
 * before them, and a chunk whose size line came in the same read has that
 * line, "<hex>[;ext]\r\n", just before upload. A size line that came
 * alone was parsed and written over by the next read: not in view.
 * Returns the number of hex digits (0: not in view), the value in *size
 * (saturated at UINT64_MAX past 16 digits). */
static size_t chunk_size_seen(struct MHD_Connection *c, const char *method, const char *upload,
                              uint64_t *size)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (!ci || upload < method || (size_t)(upload - method) < ci->header_size ||
        (size_t)(upload - method) > ci->header_size + TM_HTTP_MAX_HEADER_BYTES * 4)
        return 0; /* not the layout above: say nothing */
    const char *start = method + ci->header_size, *p = upload;
    if (p > start && p[-1] == '\n')
        p--;
    if (p > start && p[-1] == '\r')
        p--;
    const char *end = p; /* the line is [line, end) */
    while (p > start && p[-1] != '\n')
        p--;
    const char *semi = memchr(p, ';', (size_t)(end - p));
    if (semi)
        end = semi;
    size_t digits = 0;
    uint64_t v = 0;
    for (const char *q = p; q < end; q++, digits++) {
        int x = *q >= '0' && *q <= '9' ? *q - '0' : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10
                : *q >= 'A' && *q <= 'F' ? *q - 'A' + 10 : -1;
        if (x < 0)
            return 0;
        v = v > (UINT64_MAX >> 4) ? UINT64_MAX : (v << 4) | (uint64_t)x;
    }
    *size = v;
    return digits;
}

/* A chunk size that no body can have (over INT64_MAX: beyond any length a
 * Content-Length of 19 digits frames, any file offset): 400
 * invalid_chunk_size, counted with the other framing errors. A size over
 * what is left of max_body: 413 at once. Else NULL: go on. */
static const char *chunk_verdict(tm_http *h, tm_http_req *r, struct MHD_Connection *c,
                                 const char *method, const char *upload)
{
    uint64_t size = 0;
    if (!r->chunked || chunk_size_seen(c, method, upload, &size) == 0)
        return NULL;
    if (size > (uint64_t)INT64_MAX)
        return "invalid_chunk_size";
    return size > h->cfg.max_body - r->body.len ? "body_too_large" : NULL;
}

static enum MHD_Result add_header_bytes(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value)
{
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4 + TM_HTTP_HEADER_COST;
    return MHD_YES;
}

/* What the request's line and header fields take of the connection's pool. */
static size_t header_bytes(struct MHD_Connection *c, const char *url, const char *method)
{
    size_t n = strlen(url) + strlen(method) + 16;
    MHD_get_connection_values(c, MHD_HEADER_KIND | MHD_GET_ARGUMENT_KIND | MHD_COOKIE_KIND,
                              add_header_bytes, &n);
    return n;
}

/* The body's declared length (0 without one). Its framing was checked:
 * at most one Content-Length, of 1 to 19 digits. */
static uint64_t declared_length(struct MHD_Connection *c)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    return v ? strtoull(v, NULL, 10) : 0;
}

/* The first call of a request: its line and headers are in. Whatever is
 * refused here is answered before any of the body is read. */
static enum MHD_Result on_headers(tm_http *h, struct MHD_Connection *c, const char *url,
                                  const char *method, void **con_cls)
{
    static const char no_cert[] = "{\"error\":\"a valid client certificate is required\"}";
    tm_http_req *r;
    if (refused(h, tconn_of(c)) || !(r = req_new(h, c, url, method)))
        return MHD_NO;
    *con_cls = r;
    if (!r->method || !r->path)
        return MHD_NO;
    if (h->tls_ca && !client_cert_ok(c))
        return answer_early(r, c, 403, no_cert);
    if (header_bytes(c, url, method) > h->cfg.max_header_bytes)
        return answer_early(r, c, 431, h->headers_body);
    if (framing_of(h, c, &r->framing) != 0)
        return MHD_NO;
    if (r->framing) { /* the handler answers it; the connection then closes (decorate) */
        tm_counter_inc(h->m.bad_framing);
        return handle(h, r, c);
    }
    r->chunked = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding") != NULL;
    if (declared_length(c) > h->cfg.max_body) { /* one waiting for "100 Continue" sends no body */
        const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
        return expect && strcasecmp(expect, "100-continue") == 0
                   ? answer_early(r, c, 413, h->too_large_body)
                   : refuse_body(h, r, c);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    tm_http *h = cls;
    tm_http_req *r = *con_cls;
    if (!r)
        return on_headers(h, c, url, method, con_cls);
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->lingered)
            return (r->lingered += n) <= LINGER_BYTES ? MHD_YES : MHD_NO;
        if (r->handled)
            return MHD_YES;
        const char *why = chunk_verdict(h, r, c, method, upload);
        if (why && strcmp(why, "invalid_chunk_size") == 0) {
            tm_counter_inc(h->m.bad_framing);
            return refuse_raw(h, r, c, "400 Bad Request", h->bad_chunk_body);
        }
        /* r->body.len <= max_body always: a body that would pass it ends here */
        if (why || n > h->cfg.max_body - r->body.len)
            return refuse_body(h, r, c);
        return tm_buf_add(&r->body, upload, n) == 0 ? MHD_YES : MHD_NO;
    }
    return r->lingered ? MHD_NO : handle(h, r, c);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    tm_http_req *r = *con_cls;
    if (r)
        req_free(r);
    *con_cls = NULL;
    set_state(cls, tconn_of(c), C_IDLE); /* keep-alive: waiting for the next request */
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    TM_DEBUG("mhd: %s", msg);
}

static void http_free(tm_http *h)
{
    if (h->listen_fd >= 0)
        close(h->listen_fd);
    tm_map_free(h->hub);
    tm_map_free(h->per_addr);
    free(h->busy_body);
    free(h->headers_body);
    free(h->too_large_body);
    free(h->bad_chunk_body);
    free(h->tls_cert);
    free(h->tls_key);
    free(h->tls_ca);
    pthread_mutex_destroy(&h->hub_mu);
    pthread_mutex_destroy(&h->conn_mu);
    pthread_mutex_destroy(&h->ka_mu);
    pthread_cond_destroy(&h->ka_cv);
    free(h);
}

static void register_metrics(tm_http *h, tm_metrics *r)
{
    h->m.conns_open = tm_metrics_gauge(r, "tidemark_connections_open", "Open HTTP connections.");
    h->m.streams_open = tm_metrics_gauge(r, "tidemark_streams_open", "SSE connections attached to streams.");
    h->m.refused_total = tm_metrics_counter(r, "tidemark_connections_refused_total", "limit=\"total\"",
                                            "Connections answered 503 and closed at a limit.");
    h->m.refused_address = tm_metrics_counter(r, "tidemark_connections_refused_total",
                                              "limit=\"address\"", NULL);
    h->m.dropped_deadline = tm_metrics_counter(r, "tidemark_connections_dropped_total",
                                               "reason=\"request_deadline\"",
                                               "Connections the server closed.");
    h->m.dropped_idle = tm_metrics_counter(r, "tidemark_connections_dropped_total", "reason=\"idle\"", NULL);
    h->m.bad_framing = tm_metrics_counter(
        r, "tidemark_http_bad_framing_total", "",
        "Requests refused for ambiguous framing (a folded or malformed header field, a repeated "
        "Host, Content-Length or Transfer-Encoding, a Transfer-Encoding other than chunked, both).");
}

static tm_http *http_new(const tm_http_config *cfg)
{
    tm_http *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->listen_fd = -1;
    h->cfg = *cfg;
    register_metrics(h, cfg->metrics);
    unsigned *v[] = {&h->cfg.keepalive_ms, &h->cfg.io_threads, &h->cfg.max_connections,
                     &h->cfg.max_per_address, &h->cfg.request_deadline_ms,
                     &h->cfg.idle_timeout_ms, &h->cfg.max_header_bytes};
    const unsigned d[] = {15000, 2, 16384, 4096, 30000, 120000, TM_HTTP_MAX_HEADER_BYTES};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (*v[i] == 0)
            *v[i] = d[i];
    h->hub = tm_map_new();
    h->per_addr = tm_map_new();
    h->busy_body = cfg->busy_body ? strdup(cfg->busy_body) : NULL;
    h->cfg.busy_body = NULL; /* the caller's copy may go away */
    h->headers_body = cfg->headers_body ? strdup(cfg->headers_body) : NULL;
    h->cfg.headers_body = NULL;
    h->too_large_body = cfg->too_large_body ? strdup(cfg->too_large_body) : NULL;
    h->cfg.too_large_body = NULL;
    h->bad_chunk_body = cfg->bad_chunk_body ? strdup(cfg->bad_chunk_body) : NULL;
    h->cfg.bad_chunk_body = NULL;
    pthread_mutex_init(&h->hub_mu, NULL);
    pthread_mutex_init(&h->conn_mu, NULL);
    pthread_mutex_init(&h->ka_mu, NULL);
    tm_cond_init_monotonic(&h->ka_cv);
    if (!h->hub || !h->per_addr || (cfg->busy_body && !h->busy_body) ||
        (cfg->headers_body && !h->headers_body) ||
        (cfg->too_large_body && !h->too_large_body) ||
        (cfg->bad_chunk_body && !h->bad_chunk_body)) {
        http_free(h);
        return NULL;
    }
    return h;
}

/* Bind and listen ourselves, so a failure can say what it is ("address
 * already in use") instead of libmicrohttpd's silent NULL. OUT *fd, *port.
 * TIDEMARK_EINVAL: not a numeric address; TIDEMARK_EBUSY: in use. */
static int listen_on(const char *host, unsigned port, int *fd, unsigned *bound)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    socklen_t len;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        len = sizeof *v4;
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        len = sizeof *v6;
    } else {
        TM_ERROR("cannot listen on %s: not a numeric IPv4 or IPv6 address", host);
        return TIDEMARK_EINVAL;
    }
    int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(s, (struct sockaddr *)&ss, len) != 0 || listen(s, 4096) != 0) {
        int e = errno;
        TM_ERROR("cannot listen on %s port %u: %s", host, port, strerror(e));
        if (s >= 0)
            close(s);
        return e == EADDRINUSE ? TIDEMARK_EBUSY : TIDEMARK_EIO;
    }
    len = sizeof ss;
    getsockname(s, (struct sockaddr *)&ss, &len);
    *bound = ntohs(ss.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
    *fd = s;
    return 0;
}

/* A whole PEM file (at most 1 MiB) as a string. OUT *text. */
static int read_pem(const char *what, const char *path, char **text)
{
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc((1 << 20) + 1) : NULL;
    size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    int rc = buf && n > 0 && !ferror(f) && feof(f) ? 0 : TIDEMARK_EINVAL;
    if (rc)
        TM_ERROR("cannot read the TLS %s %s: %s", what, path,
                 !f ? strerror(errno) : n == 0 ? "empty or unreadable" : "over 1 MiB");
    if (f)
        fclose(f);
    if (!rc) {
        buf[n] = '\0';
        char *fit = realloc(buf, n + 1);
        *text = fit ? fit : buf;
        return 0;
    }
    free(buf);
    return rc;
}

static int tls_load(tm_http *h, const tm_http_config *cfg)
{
    h->cfg.tls_cert_file = h->cfg.tls_key_file = h->cfg.tls_client_ca_file = NULL;
    if (!cfg->tls_cert_file && !cfg->tls_key_file && !cfg->tls_client_ca_file)
        return 0;
    if (!cfg->tls_cert_file || !cfg->tls_key_file) {
        TM_ERROR("TLS needs both a certificate and its key (and a client CA needs both)");
        return TIDEMARK_EINVAL;
    }
    int rc = read_pem("certificate", cfg->tls_cert_file, &h->tls_cert);
    if (!rc)
        rc = read_pem("key", cfg->tls_key_file, &h->tls_key);
    if (!rc && cfg->tls_client_ca_file)
        rc = read_pem("client CA", cfg->tls_client_ca_file, &h->tls_ca);
    return rc;
}

int tm_http_new(const tm_http_config *cfg, tm_http_handler fn, void *ud, tm_http **out)
{
    tm_http *h = http_new(cfg);
    if (!h)
        return TIDEMARK_ENOMEM;
    h->fn = fn;
    h->ud = ud;
    int rc = tls_load(h, cfg);
    if (rc) {
        http_free(h);
        return rc;
    }
    rc = listen_on(cfg->host ? cfg->host : "127.0.0.1", cfg->port, &h->listen_fd, &h->port);
    if (rc) {
        http_free(h);
        return rc;
    }
    *out = h;
    return 0;
}

int tm_http_listen(tm_http *h)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    struct MHD_OptionItem tls[4] = {{MHD_OPTION_END, 0, NULL}};
    if (h->tls_cert) {
        flags |= MHD_USE_TLS;
        tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert};
        tls[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key};
        if (h->tls_ca)
            tls[2] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, h->tls_ca};
    }
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
                            MHD_OPTION_ARRAY, tls,
                            MHD_OPTION_LISTEN_SOCKET, h->listen_fd,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)h->cfg.io_threads,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            /* a backstop: the reaper applies our deadlines */
                            MHD_OPTION_CONNECTION_TIMEOUT, (h->cfg.idle_timeout_ms + 999) / 1000,
                            /* above ours, so the kernel backlog never holds
                             * connections unanswered: ours get a 503 */
                            MHD_OPTION_CONNECTION_LIMIT, h->cfg.max_connections + 256,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            /* headers, our answer's headers, the send buffer */
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                            (size_t)h->cfg.max_header_bytes + TM_HTTP_POOL_RESERVE,
                            MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_END);
    if (!h->d) {
        TM_ERROR("cannot start the HTTP server (libmicrohttpd refused its options)");
        return TIDEMARK_EIO;
    }
    h->listen_fd = -1; /* libmicrohttpd's now: it closes it when it stops */
    h->ka_running = 1;
    if (pthread_create(&h->ka_thread, NULL, ka_loop, h) != 0) {
        h->ka_running = 0;
        return TIDEMARK_EIO;
    }
    return 0;
}

unsigned tm_http_port(const tm_http *h) { return h->port; }

void tm_http_stop(tm_http *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->ka_mu);
    int ticking = h->ka_running;
    h->ka_running = 0;
    pthread_cond_broadcast(&h->ka_cv);
    pthread_mutex_unlock(&h->ka_mu);
    if (ticking)
        pthread_join(h->ka_thread, NULL);
    atomic_store(&h->stopping, 1);
    tm_http_end(h, ""); /* every stream */
    if (h->d)
        MHD_stop_daemon(h->d); /* closes the listening socket too */
    h->d = NULL;
}

void tm_http_free(tm_http *h)
{
    if (!h)
        return;
    tm_http_stop(h);
    http_free(h);
}
