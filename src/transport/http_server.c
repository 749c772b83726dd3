/*
 * http_server.c - libmicrohttpd glue: bounded body collection, asynchronous
 * replies (suspend/resume), and SSE stream connections fed from the store.
 *
 * Lock order: hub -> stream connection -> store. The store calls
 * tm_http_wake() with none of its own locks held.
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
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define READ_BATCH 64

typedef struct hdr {
    char *name, *value;
    struct hdr *next;
} hdr;

struct tm_http {
    struct MHD_Daemon *d;
    tm_store *store;
    tm_http_handler fn;
    void *ud;
    tm_http_config cfg;
    unsigned port;
    pthread_mutex_t hub_mu;
    tm_map *hub; /* "session/stream" -> sconn */
    int stopping;
    pthread_t ka_thread;
    pthread_mutex_t ka_mu;
    pthread_cond_t ka_cv;
    int ka_running;
};

/* An SSE connection attached to one store stream. */
typedef struct sconn {
    tm_http *h;
    struct MHD_Connection *conn;
    pthread_mutex_t mu;
    char key[256];
    char *session, *stream;
    uint64_t delivered;
    uint64_t replay_until; /* durable head when a resume attached */
    int announce;          /* emit-early: announce the durable head */
    uint64_t announced;    /* last durable head announced */
    tm_buf out;
    int suspended;
    int close_requested;
    uint64_t close_after; /* with close_requested: end once delivered >= this */
    int superseded;
    int ended;             /* the reader ended the stream: everything is handed to MHD */
    int ka_due;
    int attached;
} sconn;

struct tm_http_req {
    tm_http *h;
    struct MHD_Connection *conn;
    pthread_mutex_t mu;
    char *method, *path;
    tm_buf body;
    int too_large;
    int handled;
    int suspended;
    struct MHD_Response *resp; /* ready to queue */
    unsigned status;
    hdr *headers;
};

/* ---- stream connections ---------------------------------------------- */

static void hub_key(char *out, size_t n, const char *session, const char *stream)
{
    snprintf(out, n, "%s/%s", session, stream);
}

static void sconn_resume_locked(sconn *s)
{
    if (s->suspended) {
        s->suspended = 0;
        MHD_resume_connection(s->conn);
    }
}

static int frame_event(void *ud, const tm_event *ev)
{
    sconn *s = ud;
    char id[TM_EVENT_ID_MAX], epoch[TM_EPOCH_LEN + 1];
    tm_epoch_for_session(ev->epoch, s->session, epoch);
    if (tm_event_id_format(id, sizeof id, epoch, s->stream, ev->seq) < 0)
        return 1;
    if (tm_sse_frame(&s->out, NULL, id, ev->data, ev->len) != 0)
        return 1;
    s->delivered = ev->seq;
    tm_metric_inc(ev->seq <= s->replay_until ? TM_M_EVENTS_REPLAYED : TM_M_EVENTS_EMITTED);
    return 0;
}

/* "event: tidemark-durable" (no id: not an event of the stream). */
static int frame_durable(tm_buf *out, uint64_t head)
{
    char txt[64];
    int n = snprintf(txt, sizeof txt, "{\"durable_head\":%llu}", (unsigned long long)head);
    return tm_sse_frame(out, "tidemark-durable", NULL, txt, (size_t)n);
}

static ssize_t sconn_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    sconn *s = cls;
    tm_http *h = s->h;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->out.len > 0) {
            size_t n = s->out.len < max ? s->out.len : max;
            memcpy(buf, s->out.data, n);
            tm_buf_consume(&s->out, n);
            pthread_mutex_unlock(&s->mu);
            return (ssize_t)n;
        }
        if (h->stopping || s->superseded)
            break;
        int rc = tm_store_read(h->store, s->session, s->stream, s->delivered, READ_BATCH,
                               frame_event, s);
        if (rc == TIDEMARK_ERANGE) {
            /* Retention trimmed events this connection had not sent yet:
             * say so with a typed gap event (never skip silently), then go
             * on from the first retained event. */
            tm_stream_bounds gb;
            if (tm_store_bounds(h->store, s->session, s->stream, &gb) != 0 ||
                gb.first_retained <= s->delivered + 1)
                break;
            char txt[96];
            int n = snprintf(txt, sizeof txt, "{\"missing\":[%llu,%llu]}",
                             (unsigned long long)s->delivered + 1,
                             (unsigned long long)gb.first_retained - 1);
            tm_sse_frame(&s->out, "gap", NULL, txt, (size_t)n);
            s->delivered = gb.first_retained - 1;
            continue;
        }
        if (rc)
            break;
        if (s->out.len > 0)
            continue;
        tm_stream_bounds b;
        if (tm_store_bounds(h->store, s->session, s->stream, &b) != 0)
            break;
        if (s->announce && b.head > s->announced && s->delivered > s->announced) {
            /* Tell the client how far what it holds is durable: it never
             * keeps a cursor above this (DESIGN §8). No id: not an event
             * of the stream. */
            uint64_t d = b.head < s->delivered ? b.head : s->delivered;
            frame_durable(&s->out, d);
            s->announced = d;
            continue;
        }
        if (b.closed && s->delivered >= b.head)
            break;
        if (s->close_requested && s->delivered >= s->close_after)
            break;
        if (s->ka_due) {
            s->ka_due = 0;
            tm_sse_frame_comment(&s->out, "keep-alive");
            continue;
        }
        s->suspended = 1;
        MHD_suspend_connection(s->conn);
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    s->ended = 1; /* no longer live: a resume may take the stream over at once */
    pthread_mutex_unlock(&s->mu);
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static void sconn_free(void *cls)
{
    sconn *s = cls;
    tm_http *h = s->h;
    pthread_mutex_lock(&h->hub_mu);
    if (s->attached && tm_map_get(h->hub, s->key) == s) {
        tm_map_del(h->hub, s->key);
        tm_gauge_add(TM_G_STREAMS_OPEN, -1);
    }
    pthread_mutex_unlock(&h->hub_mu);
    pthread_mutex_destroy(&s->mu);
    tm_buf_free(&s->out);
    free(s->session);
    free(s->stream);
    free(s);
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

void tm_http_wake(tm_http *h, const char *session, const char *stream)
{
    char key[256];
    hub_key(key, sizeof key, session, stream);
    pthread_mutex_lock(&h->hub_mu);
    sconn *s = tm_map_get(h->hub, key);
    if (s) {
        pthread_mutex_lock(&s->mu);
        sconn_resume_locked(s);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&h->hub_mu);
}

void tm_http_close_stream(tm_http *h, const char *session, const char *stream, uint64_t after_seq)
{
    char key[256];
    hub_key(key, sizeof key, session, stream);
    pthread_mutex_lock(&h->hub_mu);
    sconn *s = tm_map_get(h->hub, key);
    if (s) {
        pthread_mutex_lock(&s->mu);
        s->close_requested = 1;
        s->close_after = after_seq;
        sconn_resume_locked(s);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&h->hub_mu);
}

typedef struct prefix_ctx {
    const char *prefix;
    size_t len;
    int all;
} prefix_ctx;

static void close_matching(const char *key, void *val, void *ud)
{
    prefix_ctx *p = ud;
    sconn *s = val;
    if (!p->all && strncmp(key, p->prefix, p->len) != 0)
        return;
    pthread_mutex_lock(&s->mu);
    s->close_requested = 1;
    sconn_resume_locked(s);
    pthread_mutex_unlock(&s->mu);
}

static void count_matching(const char *key, void *val, void *ud)
{
    (void)val;
    prefix_ctx *p = ud;
    if (strncmp(key, p->prefix, p->len) == 0)
        p->all++;
}

int tm_http_session_attached(tm_http *h, const char *session)
{
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s/", session);
    prefix_ctx p = {prefix, strlen(prefix), 0};
    pthread_mutex_lock(&h->hub_mu);
    tm_map_each(h->hub, count_matching, &p);
    pthread_mutex_unlock(&h->hub_mu);
    return p.all > 0;
}

void tm_http_close_session(tm_http *h, const char *session)
{
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s/", session);
    prefix_ctx p = {prefix, strlen(prefix), 0};
    pthread_mutex_lock(&h->hub_mu);
    tm_map_each(h->hub, close_matching, &p);
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

static void *ka_loop(void *arg)
{
    tm_http *h = arg;
    pthread_mutex_lock(&h->ka_mu);
    while (h->ka_running) {
        struct timespec ts = tm_deadline_ms(h->cfg.keepalive_ms);
        pthread_cond_timedwait(&h->ka_cv, &h->ka_mu, &ts);
        if (!h->ka_running)
            break;
        pthread_mutex_unlock(&h->ka_mu);
        pthread_mutex_lock(&h->hub_mu);
        tm_map_each(h->hub, ka_mark, NULL);
        pthread_mutex_unlock(&h->hub_mu);
        pthread_mutex_lock(&h->ka_mu);
    }
    pthread_mutex_unlock(&h->ka_mu);
    return NULL;
}

/* ---- requests ---------------------------------------------------------- */

const char *tm_http_req_method(const tm_http_req *r) { return r->method; }
const char *tm_http_req_path(const tm_http_req *r) { return r->path; }

const char *tm_http_req_header(const tm_http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *tm_http_req_body(const tm_http_req *r, size_t *len)
{
    *len = r->body.len;
    return r->body.data ? r->body.data : "";
}

int tm_http_req_body_too_large(const tm_http_req *r) { return r->too_large; }

int tm_http_req_add_header(tm_http_req *r, const char *name, const char *value)
{
    hdr *x = calloc(1, sizeof *x);
    if (!x)
        return TIDEMARK_ENOMEM;
    x->name = strdup(name);
    x->value = strdup(value);
    if (!x->name || !x->value) {
        free(x->name);
        free(x->value);
        free(x);
        return TIDEMARK_ENOMEM;
    }
    x->next = r->headers;
    r->headers = x;
    return 0;
}

static void apply_headers(tm_http_req *r, struct MHD_Response *resp)
{
    for (hdr *x = r->headers; x; x = x->next)
        MHD_add_response_header(resp, x->name, x->value);
}

/* Publish a built response; resume the connection if it sleeps. */
static void finish(tm_http_req *r, struct MHD_Response *resp, unsigned status)
{
    apply_headers(r, resp);
    pthread_mutex_lock(&r->mu);
    r->resp = resp;
    r->status = status;
    if (r->suspended) {
        r->suspended = 0;
        MHD_resume_connection(r->conn);
    }
    pthread_mutex_unlock(&r->mu);
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

int tm_http_reply_stream(tm_http_req *r, const tm_http_stream_opts *o)
{
    tm_http *h = r->h;
    sconn *s = calloc(1, sizeof *s);
    if (!s)
        return TIDEMARK_ENOMEM;
    s->h = h;
    s->conn = r->conn;
    pthread_mutex_init(&s->mu, NULL);
    tm_buf_init(&s->out, 16u << 20);
    s->session = strdup(o->session);
    s->stream = strdup(o->stream);
    s->delivered = o->after_seq;
    s->replay_until = o->replay_until;
    s->announce = o->announce_durable;
    s->announced = o->after_seq;
    hub_key(s->key, sizeof s->key, o->session, o->stream);
    if (!s->session || !s->stream)
        goto nomem;
    if (o->retry_ms && tm_sse_frame_retry(&s->out, o->retry_ms))
        goto nomem;
    /* first thing on an early stream: durable so far, after_seq */
    if (s->announce && frame_durable(&s->out, o->after_seq))
        goto nomem;
    if (o->prelude && tm_buf_add(&s->out, o->prelude, o->prelude_len))
        goto nomem;

    pthread_mutex_lock(&h->hub_mu);
    sconn *old = tm_map_get(h->hub, s->key);
    if (old) {
        pthread_mutex_lock(&old->mu);
        int dead = old->superseded || old->close_requested || old->ended ||
                   (old->suspended && peer_gone(old->conn));
        if (!dead) {
            pthread_mutex_unlock(&old->mu);
            pthread_mutex_unlock(&h->hub_mu);
            s->attached = 0;
            tm_buf_free(&s->out);
            free(s->session);
            free(s->stream);
            pthread_mutex_destroy(&s->mu);
            free(s);
            return TIDEMARK_EBUSY;
        }
        /* The old peer is gone; let its connection end and take over. */
        old->superseded = 1;
        old->attached = 0;
        sconn_resume_locked(old);
        pthread_mutex_unlock(&old->mu);
        tm_map_del(h->hub, s->key);
        tm_gauge_add(TM_G_STREAMS_OPEN, -1);
    }
    if (tm_map_put(h->hub, s->key, s) != 0) {
        pthread_mutex_unlock(&h->hub_mu);
        goto nomem;
    }
    s->attached = 1;
    tm_gauge_add(TM_G_STREAMS_OPEN, 1);
    pthread_mutex_unlock(&h->hub_mu);

    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, sconn_read, s, sconn_free);
    if (!resp) {
        sconn_free(s);
        return TIDEMARK_ENOMEM;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    finish(r, resp, 200);
    return 0;
nomem:
    tm_buf_free(&s->out);
    free(s->session);
    free(s->stream);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return TIDEMARK_ENOMEM;
}

static void req_free(tm_http_req *r)
{
    while (r->headers) {
        hdr *x = r->headers;
        r->headers = x->next;
        free(x->name);
        free(x->value);
        free(x);
    }
    if (r->resp)
        MHD_destroy_response(r->resp);
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

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    tm_http *h = cls;
    tm_http_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->h = h;
        r->conn = c;
        pthread_mutex_init(&r->mu, NULL);
        tm_buf_init(&r->body, h->cfg.max_body);
        r->method = strdup(method);
        r->path = strdup(url);
        *con_cls = r;
        if (!r->method || !r->path)
            return MHD_NO;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!r->too_large && tm_buf_add(&r->body, upload, *upload_size) != 0) {
            r->too_large = 1;
            tm_buf_free(&r->body);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&r->mu);
    if (!r->handled) {
        r->handled = 1;
        pthread_mutex_unlock(&r->mu);
        h->fn(h->ud, r);
        pthread_mutex_lock(&r->mu);
    }
    if (r->resp) {
        enum MHD_Result ret = queue_ready(r);
        pthread_mutex_unlock(&r->mu);
        return ret;
    }
    r->suspended = 1;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&r->mu);
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    tm_http_req *r = *con_cls;
    if (r)
        req_free(r);
    *con_cls = NULL;
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

int tm_http_start(const tm_http_config *cfg, tm_store *store, tm_http_handler fn, void *ud,
                  tm_http **out)
{
    tm_http *h = calloc(1, sizeof *h);
    if (!h)
        return TIDEMARK_ENOMEM;
    h->cfg = *cfg;
    if (!h->cfg.keepalive_ms)
        h->cfg.keepalive_ms = 15000;
    if (!h->cfg.io_threads)
        h->cfg.io_threads = 2;
    h->store = store;
    h->fn = fn;
    h->ud = ud;
    h->hub = tm_map_new();
    pthread_mutex_init(&h->hub_mu, NULL);
    pthread_mutex_init(&h->ka_mu, NULL);
    tm_cond_init_monotonic(&h->ka_cv);
    if (!h->hub) {
        free(h);
        return TIDEMARK_ENOMEM;
    }

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    const char *host = cfg->host ? cfg->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)cfg->port);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)cfg->port);
        flags |= MHD_USE_IPv6;
    } else {
        tm_map_free(h->hub);
        free(h);
        return TIDEMARK_EINVAL;
    }
    h->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)h->cfg.io_threads,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)120,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)4096,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_END);
    if (!h->d) {
        tm_map_free(h->hub);
        free(h);
        return TIDEMARK_EIO;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : cfg->port;
    h->ka_running = 1;
    pthread_create(&h->ka_thread, NULL, ka_loop, h);
    *out = h;
    return 0;
}

unsigned tm_http_port(const tm_http *h) { return h->port; }

void tm_http_stop(tm_http *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->ka_mu);
    h->ka_running = 0;
    pthread_cond_broadcast(&h->ka_cv);
    pthread_mutex_unlock(&h->ka_mu);
    pthread_join(h->ka_thread, NULL);
    prefix_ctx all = {"", 0, 1};
    pthread_mutex_lock(&h->hub_mu);
    h->stopping = 1;
    tm_map_each(h->hub, close_matching, &all);
    pthread_mutex_unlock(&h->hub_mu);
    MHD_stop_daemon(h->d);
    tm_map_free(h->hub);
    pthread_mutex_destroy(&h->hub_mu);
    pthread_mutex_destroy(&h->ka_mu);
    pthread_cond_destroy(&h->ka_cv);
    free(h);
}
