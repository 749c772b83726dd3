/*
 * tidemark-streams - the scale half of bench/http.sh: N 2025-11-25 sessions,
 * each on its own connection that ends as the session's standalone GET SSE
 * stream, all held open at once.
 *
 *   tidemark-streams --url http://HOST:PORT/PATH --n N [--threads T]
 *                    [--server-pid PID] [--subscribe URI [--trigger TOOL]]
 *                    [--listen] [--timeout S] [--repeat K]
 *   tidemark-streams --url ... --n N --sessions-only [--threads T] [--server-pid PID]
 *
 * Per session: initialize, notifications/initialized, with --subscribe a
 * resources/subscribe of URI, then GET (Accept: text/event-stream) whose 200
 * headers count the stream as open. With --listen (and --subscribe URI)
 * each is instead a 2026-07-28 listener: one POST subscriptions/listen with
 * notifications.resourceSubscriptions [URI], no session, whose 200 SSE
 * answer stays open. T threads (8) open them. Once all are
 * open it prints "streams=N open_s=.. rss_kb=.." (the VmRSS of --server-pid).
 * With --trigger it then calls tools/call TOOL {} in a session of its own
 * and waits (at most --timeout S, 30) until every stream has carried
 * notifications/resources/updated: "fanout_n=N received=R fanout_ms=..
 * p50_ms=..", times from sending the call; --repeat K: K such calls one
 * after the other, a line each. Exit 1 when a session or stream could not
 * be opened or not all notifications arrived.
 *
 * --sessions-only: N sessions (initialize, notifications/initialized) and no
 * stream, T threads each on one keep-alive connection (a new one if the
 * server closes it), to fill a server's store: "sessions=N failed=F
 * open_s=.. rss_kb=.. rss_before_kb=..".
 */
#include "net.h"
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF (16 * 1024)
#define NEEDLE "notifications/resources/updated"
#define TAIL 40 /* > strlen(NEEDLE): a needle split across two reads is found */

typedef struct opts {
    bench_url u;
    char uri[1024], trigger[128];
    int n, threads, pid, repeat, sessions_only, listen;
    double timeout;
} opts;

typedef struct stream {
    int fd, got;
    size_t tl;
    char tail[TAIL];
    double at;
} stream;

typedef struct setup {
    const opts *o;
    stream *s;
    int first, failed;
} setup;

/* Read until buf holds the whole response: the status, or -1. The body is
 * Content-Length or chunked (up to its last chunk); with headers_only the
 * headers suffice (a GET stream stays open). */
static int read_response(int fd, char *buf, size_t cap, int headers_only)
{
    size_t have = 0;
    for (;;) {
        ssize_t r = recv(fd, buf + have, cap - 1 - have, 0);
        if (r <= 0)
            return -1;
        buf[have += (size_t)r] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (!end)
            continue;
        int status = atoi(buf + 9);
        const char *cl = strcasestr(buf, "\r\ncontent-length:");
        if (headers_only)
            return status;
        if (cl && cl < end && have >= (size_t)(end - buf) + 4 + strtoul(cl + 17, NULL, 10))
            return status;
        if (strcasestr(buf, "\r\ntransfer-encoding: chunked") && strstr(end, "\r\n0\r\n\r\n"))
            return status;
        if (have >= cap - 1)
            return -1;
    }
}

/* POST json in session sid (empty: none); the status, the session id into sid. */
static int post(const opts *o, int fd, char *sid, const char *json, char *buf, size_t cap)
{
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\n"
                     "MCP-Protocol-Version: 2025-11-25\r\n%s%s%sContent-Length: %zu\r\n\r\n%s",
                     o->u.path, o->u.host, o->u.port, sid[0] ? "Mcp-Session-Id: " : "", sid,
                     sid[0] ? "\r\n" : "", strlen(json), json);
    if (n < 0 || n >= (int)sizeof req || bench_send_all(fd, req, (size_t)n))
        return -1;
    int st = read_response(fd, buf, cap, 0);
    const char *h = st > 0 ? strcasestr(buf, "\r\nmcp-session-id:") : NULL;
    if (h && !sid[0])
        sscanf(h + 17, " %127[^\r\n]", sid);
    return st;
}

static int open_session(const opts *o, int fd, char *sid, char *buf, size_t cap)
{
    const char *init = "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
                       "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"
                       "\"clientInfo\":{\"name\":\"tidemark-streams\",\"version\":\"1\"}}}";
    sid[0] = 0;
    if (post(o, fd, sid, init, buf, cap) != 200 || !sid[0])
        return -1;
    return post(o, fd, sid, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", buf,
                cap) == 202 ? 0 : -1;
}

/* One session whose connection ends as its open GET stream: the fd or -1. */
static int open_stream(const opts *o, char *buf, size_t cap)
{
    char sid[128], json[1200], req[1024];
    int fd = bench_dial(&o->u);
    if (fd < 0 || open_session(o, fd, sid, buf, cap))
        goto fail;
    snprintf(json, sizeof json,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/subscribe\",\"params\":{\"uri\":\"%s\"}}",
             o->uri);
    if (o->uri[0] && (post(o, fd, sid, json, buf, cap) != 200 || !strstr(buf, "\"result\"")))
        goto fail;
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: %s:%s\r\nAccept: text/event-stream\r\n"
                     "MCP-Protocol-Version: 2025-11-25\r\nMcp-Session-Id: %s\r\n\r\n",
                     o->u.path, o->u.host, o->u.port, sid);
    if (bench_send_all(fd, req, (size_t)n) == 0 && read_response(fd, buf, cap, 1) == 200)
        return fd;
fail:
    if (fd >= 0)
        close(fd);
    return -1;
}

/* --listen: one 2026-07-28 listener whose connection ends as its open
 * subscriptions/listen stream: the fd or -1. */
static int open_listener(const opts *o, int i, char *buf, size_t cap)
{
    char json[1600], req[2400];
    int fd = bench_dial(&o->u);
    if (fd < 0)
        return -1;
    int jn = snprintf(json, sizeof json,
                      "{\"jsonrpc\":\"2.0\",\"id\":\"listen-%d\",\"method\":\"subscriptions/listen\","
                      "\"params\":{\"notifications\":{\"resourceSubscriptions\":[\"%s\"]},\"_meta\":{"
                      "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                      "\"io.modelcontextprotocol/clientInfo\":{\"name\":\"tidemark-streams\","
                      "\"version\":\"1\"},\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
                      i, o->uri);
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
                     "Mcp-Method: subscriptions/listen\r\nContent-Length: %d\r\n\r\n%s",
                     o->u.path, o->u.host, o->u.port, jn, json);
    /* a refused listen is answered 200 with a JSON error: only an SSE
     * answer is a listener */
    if (jn > 0 && jn < (int)sizeof json && n > 0 && n < (int)sizeof req &&
        bench_send_all(fd, req, (size_t)n) == 0 && read_response(fd, buf, cap, 1) == 200 &&
        strcasestr(buf, "\r\ncontent-type: text/event-stream"))
        return fd;
    close(fd);
    return -1;
}

/* --sessions-only: sessions first, first + T, ... on one keep-alive connection. */
static void sessions_run(setup *st, char *buf)
{
    char sid[128];
    int fd = -1;
    for (int i = st->first; i < st->o->n; i += st->o->threads) {
        if (fd < 0)
            fd = bench_dial(&st->o->u);
        if (fd >= 0 && open_session(st->o, fd, sid, buf, BUF) == 0)
            continue;
        if (st->failed++ == 0)
            fprintf(stderr, "tidemark-streams: session %d: %s\n", i, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    if (fd >= 0)
        close(fd);
}

static void *setup_run(void *arg)
{
    setup *st = arg;
    char *buf = malloc(BUF);
    if (buf && st->o->sessions_only) {
        sessions_run(st, buf);
        free(buf);
        return NULL;
    }
    for (int i = st->first; buf && i < st->o->n; i += st->o->threads) {
        st->s[i].fd = st->o->listen ? open_listener(st->o, i, buf, BUF) : open_stream(st->o, buf, BUF);
        if (st->s[i].fd < 0 && st->failed++ == 0)
            fprintf(stderr, "tidemark-streams: session %d: %s\n", i, strerror(errno));
    }
    if (!buf)
        st->failed = 1;
    free(buf);
    return NULL;
}

static long rss_kb(int pid)
{
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = pid > 0 ? fopen(path, "r") : NULL;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

/* Open every stream, T threads at a time; the number that failed. */
static int open_all(const opts *o, stream *s)
{
    pthread_t th[64];
    setup st[64];
    int failed = 0, started = 0;
    for (; started < o->threads; started++) {
        st[started] = (setup){.o = o, .s = s, .first = started};
        if (pthread_create(&th[started], NULL, setup_run, &st[started]))
            break;
    }
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        failed += st[i].failed;
    }
    return started == o->threads ? failed : o->n;
}

/* Read what stream s has; mark it when the notification went by. */
static void drain(stream *s, double now, int *got)
{
    char buf[BUF + TAIL];
    ssize_t r;
    while ((r = recv(s->fd, buf + s->tl, BUF, 0)) > 0) {
        memcpy(buf, s->tail, s->tl);
        size_t len = s->tl + (size_t)r;
        buf[len] = 0;
        if (!s->got && strstr(buf, NEEDLE)) {
            s->got = 1;
            s->at = now;
            ++*got;
        }
        s->tl = len < TAIL ? len : TAIL;
        memcpy(s->tail, buf + len - s->tl, s->tl);
    }
}

/* tools/call TOOL {} in a session of its own, sent without waiting: the fd;
 * *t0 when the call went out. */
static int send_trigger(const opts *o, char *buf, size_t cap, double *t0)
{
    char sid[128], json[512], req[2048];
    int fd = bench_dial(&o->u);
    if (fd < 0 || open_session(o, fd, sid, buf, cap)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    snprintf(json, sizeof json,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
             "\"arguments\":{}}}",
             o->trigger);
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n"
                     "Mcp-Session-Id: %s\r\nContent-Length: %zu\r\n\r\n%s",
                     o->u.path, o->u.host, o->u.port, sid, strlen(json), json);
    *t0 = bench_now();
    if (bench_send_all(fd, req, (size_t)n) == 0)
        return fd;
    close(fd);
    return -1;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report_fanout(const opts *o, stream *s, int got, double t0)
{
    double *at = malloc(((size_t)got + 1) * sizeof *at), last = 0;
    int k = 0;
    for (int i = 0; at && i < o->n; i++)
        if (s[i].got) {
            at[k++] = (s[i].at - t0) * 1e3;
            last = at[k - 1] > last ? at[k - 1] : last;
        }
    if (at)
        qsort(at, (size_t)k, sizeof *at, cmp_d);
    printf("fanout_n=%d received=%d fanout_ms=%.1f p50_ms=%.1f\n", o->n, got, last,
           at && k ? at[k / 2] : 0);
    free(at);
}

/* Every stream in one epoll; trigger, then wait for the notification on all. */
static int fanout(const opts *o, stream *s)
{
    char buf[BUF];
    int ep = epoll_create1(0), got = 0;
    for (int i = 0; ep >= 0 && i < o->n; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        fcntl(s[i].fd, F_SETFL, O_NONBLOCK);
        epoll_ctl(ep, EPOLL_CTL_ADD, s[i].fd, &ev);
    }
    double t0 = bench_now();
    int tfd = ep >= 0 ? send_trigger(o, buf, sizeof buf, &t0) : -1;
    if (tfd < 0)
        fprintf(stderr, "tidemark-streams: cannot call %s\n", o->trigger);
    for (int i = 0; i < o->n; i++)
        s[i].got = 0;
    struct epoll_event evs[256];
    while (tfd >= 0 && got < o->n && bench_now() < t0 + o->timeout) {
        int n = epoll_wait(ep, evs, 256, 100);
        double now = bench_now();
        for (int i = 0; i < n; i++)
            drain(&s[evs[i].data.u32], now, &got);
    }
    report_fanout(o, s, got, t0);
    if (tfd >= 0)
        close(tfd);
    if (ep >= 0)
        close(ep);
    return got == o->n ? 0 : 1;
}

static int parse_opts(int argc, char **argv, opts *o)
{
    static const struct option lo[] = {{"url", 1, 0, 'u'},     {"n", 1, 0, 'n'},
                                       {"threads", 1, 0, 't'}, {"server-pid", 1, 0, 'p'},
                                       {"subscribe", 1, 0, 's'}, {"trigger", 1, 0, 'T'},
                                       {"timeout", 1, 0, 'o'}, {"repeat", 1, 0, 'r'},
                                       {"sessions-only", 0, 0, 'S'}, {"listen", 0, 0, 'L'},
                                       {0, 0, 0, 0}};
    *o = (opts){.n = 100, .threads = 8, .timeout = 30, .repeat = 1};
    const char *url = NULL;
    for (int ch; (ch = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (ch == 'u')
            url = optarg;
        else if (ch == 'n')
            o->n = atoi(optarg);
        else if (ch == 't')
            o->threads = atoi(optarg);
        else if (ch == 'p')
            o->pid = atoi(optarg);
        else if (ch == 's')
            snprintf(o->uri, sizeof o->uri, "%s", optarg);
        else if (ch == 'T')
            snprintf(o->trigger, sizeof o->trigger, "%s", optarg);
        else if (ch == 'o')
            o->timeout = atof(optarg);
        else if (ch == 'r')
            o->repeat = atoi(optarg);
        else if (ch == 'S')
            o->sessions_only = 1;
        else if (ch == 'L')
            o->listen = 1;
        else
            return -1;
    }
    if (!url || bench_parse_url(url, &o->u) || o->n < 1 || o->threads < 1 || o->threads > 64)
        return -1;
    if ((o->sessions_only && o->uri[0]) || (o->listen && (!o->uri[0] || o->sessions_only)))
        return -1;
    return o->trigger[0] && !o->uri[0] ? -1 : 0;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_opts(argc, argv, &o)) {
        fprintf(stderr, "usage: tidemark-streams --url http://HOST:PORT/PATH --n N [--threads T]\n"
                        "       [--server-pid PID] [--subscribe URI [--trigger TOOL]] [--listen]\n"
                        "       [--timeout S] [--repeat K]\n"
                        "       tidemark-streams --url URL --n N --sessions-only [--threads T]\n"
                        "       [--server-pid PID]\n");
        return 2;
    }
    stream *s = calloc((size_t)o.n, sizeof *s);
    if (!s)
        return 1;
    long before = rss_kb(o.pid);
    double t0 = bench_now();
    int failed = open_all(&o, s), rc = failed != 0;
    double open_s = bench_now() - t0;
    usleep(300000); /* let the server finish its bookkeeping before reading RSS */
    printf("%s=%d failed=%d open_s=%.1f rss_kb=%ld rss_before_kb=%ld\n",
           o.sessions_only ? "sessions" : "streams", o.n - failed, failed, open_s, rss_kb(o.pid),
           before);
    fflush(stdout);
    for (int k = 0; !rc && o.trigger[0] && k < o.repeat; k++)
        rc = fanout(&o, s);
    for (int i = 0; i < o.n; i++)
        if (s[i].fd > 0)
            close(s[i].fd);
    free(s);
    return rc;
}
