/*
 * tidemark-floor - the floor for bench/http.sh: what the kernel, loopback and
 * the load generator allow on this machine. An epoll HTTP/1.1 server, one
 * thread per core (all on one listening socket, EPOLLEXCLUSIVE), that answers
 * every POST on a keep-alive connection at once, with no MCP behind it:
 *   - a notification ("method":"notifications/...") -> 202, empty body;
 *   - anything else -> 200 text/event-stream, chunked, one `data:` event
 *     holding a JSON-RPC result whose text is the request's first string
 *     argument ("arguments":{"text":"..."} or {"entry":"..."}), copied, so
 *     tidemark-rps (bench/rps.c) takes it as the echo or ledger answer.
 * Every answer carries the same Mcp-Session-Id; the JSON-RPC id is not read.
 *
 * With --commit PATH, every answer but a notification's first commits one
 * row, as tidemark-sqlite-floor's one-row loop does (a fresh SQLite database
 * in WAL mode, synchronous=FULL, one INSERT in BEGIN IMMEDIATE .. COMMIT; one
 * connection, one commit at a time): the most any server could do for a
 * serial call that commits before it answers, on this machine.
 *
 * With --redis HOST:PORT, every such answer first has its entry appended to
 * a Redis list, and the answers wait for it the way tidemark's Redis store
 * groups writes: one writer thread sends every entry queued meanwhile in one
 * MULTI / RPUSH ... / EXEC (under appendfsync always, one fsync) and
 * answers them all when EXEC returns: the most any server could do for a
 * call that commits one small write to that Redis, from many connections.
 *
 *   tidemark-floor [--port N] [--threads N] [--commit PATH] [--redis HOST:PORT]
 *                                                   (port 0, a thread per core)
 *
 * Prints "listening on http://127.0.0.1:PORT/mcp"; runs until killed.
 */
#include "ledger_db.h"
#include "net.h"
#include <errno.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF (64 * 1024)

typedef struct fconn {
    int fd;
    int pending; /* --redis: answers queued, not yet sent (under g_q_mu) */
    int dead;    /* --redis: closed by its peer while answers were queued */
    size_t have;
    char buf[BUF];
} fconn;

/* --redis: one answer waiting for its entry's EXEC. */
typedef struct qitem {
    fconn *c;
    char *out;
    size_t n;
    char entry[512];
    struct qitem *next;
} qitem;

static redisContext *g_redis;
static pthread_mutex_t g_q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_q_cv = PTHREAD_COND_INITIALIZER;
static qitem *g_qhead, **g_qtail = &g_qhead;

static int g_listen;
static sqlite3 *g_db; /* --commit: under g_db_mu */
static sqlite3_stmt *g_ins;
static pthread_mutex_t g_db_mu = PTHREAD_MUTEX_INITIALIZER;
static long g_rows;

static int commit_open(const char *path)
{
    if (bench_ledger_open(path, &g_db, &g_ins) == SQLITE_OK)
        return 0;
    fprintf(stderr, "tidemark-floor: %s: %s\n", path, g_db ? sqlite3_errmsg(g_db) : "cannot open");
    return -1;
}

/* One row, committed (fsync'd) before the caller answers; 0 when it was. */
static int commit_row(const char *entry)
{
    pthread_mutex_lock(&g_db_mu);
    int ok = sqlite3_exec(g_db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
    if (ok) {
        ok = bench_ledger_put(g_ins, entry, ++g_rows) == SQLITE_DONE;
        ok = sqlite3_exec(g_db, ok ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK && ok;
    }
    if (!ok) /* the connection is cut: the load generator counts an error */
        fprintf(stderr, "tidemark-floor: commit failed: %s\n", sqlite3_errmsg(g_db));
    pthread_mutex_unlock(&g_db_mu);
    return ok ? 0 : -1;
}

/* The first string value inside "arguments":{...} of body, at most cap-1 bytes. */
static void first_arg(const char *body, char *out, size_t cap)
{
    const char *p = strstr(body, "\"arguments\":{\""), *v, *e = NULL;
    out[0] = 0;
    if (p && (v = strstr(p + 14, "\":\"")))
        e = strchr(v += 3, '"');
    if (e && (size_t)(e - v) < cap)
        snprintf(out, cap, "%.*s", (int)(e - v), v);
}

static int queue_answer(fconn *c, const char *entry, const char *out, size_t n);

static int answer(fconn *c, const char *body)
{
    int fd = c->fd;
    char arg[512], ev[1024], out[2048];
    int n;
    if (strstr(body, "\"method\":\"notifications/")) {
        n = snprintf(out, sizeof out, "HTTP/1.1 202 Accepted\r\nMcp-Session-Id: floor\r\n"
                                      "Content-Length: 0\r\n\r\n");
        return bench_send_all(fd, out, (size_t)n);
    }
    first_arg(body, arg, sizeof arg);
    if (g_db && commit_row(arg) != 0)
        return -1;
    int e = snprintf(ev, sizeof ev,
                     "event: message\ndata: {\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]},"
                     "\"jsonrpc\":\"2.0\",\"id\":1}\n\n",
                     arg);
    n = snprintf(out, sizeof out,
                 "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                 "Mcp-Session-Id: floor\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
                 (unsigned)e, ev);
    if (g_redis)
        return queue_answer(c, arg, out, (size_t)n);
    return bench_send_all(fd, out, (size_t)n);
}

/* Answer every complete request in c->buf; -1 when the connection is done. */
static int serve(fconn *c)
{
    for (;;) {
        char *end = strstr(c->buf, "\r\n\r\n");
        if (!end)
            return c->have < BUF - 1 ? 0 : -1;
        const char *cl = strcasestr(c->buf, "\r\ncontent-length:");
        size_t hlen = (size_t)(end - c->buf) + 4;
        size_t blen = cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0;
        if (hlen + blen >= BUF)
            return -1;
        if (c->have < hlen + blen)
            return 0;
        char save = c->buf[hlen + blen];
        c->buf[hlen + blen] = 0;
        int rc = answer(c, c->buf + hlen);
        c->buf[hlen + blen] = save;
        memmove(c->buf, c->buf + hlen + blen, c->have - hlen - blen);
        c->have -= hlen + blen;
        c->buf[c->have] = 0;
        if (rc)
            return -1;
    }
}

static void conn_free(fconn *c)
{
    close(c->fd);
    free(c);
}

static int queue_answer(fconn *c, const char *entry, const char *out, size_t n)
{
    qitem *it = malloc(sizeof *it);
    if (!it || !(it->out = malloc(n))) {
        free(it);
        return -1;
    }
    memcpy(it->out, out, n);
    it->n = n;
    it->c = c;
    snprintf(it->entry, sizeof it->entry, "%s", entry);
    it->next = NULL;
    pthread_mutex_lock(&g_q_mu);
    c->pending++;
    *g_qtail = it;
    g_qtail = &it->next;
    pthread_cond_signal(&g_q_cv);
    pthread_mutex_unlock(&g_q_mu);
    return 0;
}

/* MULTI, an RPUSH per queued entry, EXEC; 0 when every reply came and none
 * was an error. */
static int redis_commit(const qitem *batch)
{
    size_t n = 0;
    redisAppendCommand(g_redis, "MULTI");
    for (const qitem *it = batch; it; it = it->next, n++)
        redisAppendCommand(g_redis, "RPUSH tm:floor:ledger %s", it->entry);
    redisAppendCommand(g_redis, "EXEC");
    int ok = 1;
    for (size_t i = 0; i < n + 2; i++) {
        redisReply *x = NULL;
        if (redisGetReply(g_redis, (void **)&x) != REDIS_OK)
            return -1;
        ok = ok && x->type != REDIS_REPLY_ERROR;
        freeReplyObject(x);
    }
    return ok ? 0 : -1;
}

/* Whatever was queued while the last EXEC ran goes in the next one; its
 * answers leave once EXEC returned. A connection its peer closed meanwhile
 * is closed here, after its last answer. */
static void *redis_writer(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&g_q_mu);
        while (!g_qhead)
            pthread_cond_wait(&g_q_cv, &g_q_mu);
        qitem *batch = g_qhead;
        g_qhead = NULL;
        g_qtail = &g_qhead;
        pthread_mutex_unlock(&g_q_mu);
        if (redis_commit(batch) != 0) {
            fprintf(stderr, "tidemark-floor: redis: %s\n", g_redis->err ? g_redis->errstr : "EXEC failed");
            exit(1);
        }
        while (batch) {
            qitem *it = batch;
            batch = it->next;
            fconn *c = it->c;
            bench_send_all(c->fd, it->out, it->n); /* c lives while it has answers queued */
            pthread_mutex_lock(&g_q_mu);
            int gone = --c->pending == 0 && c->dead;
            pthread_mutex_unlock(&g_q_mu);
            if (gone)
                conn_free(c);
            free(it->out);
            free(it);
        }
    }
    return NULL;
}

static int redis_open(const char *hostport)
{
    bench_url u;
    if (bench_parse_hostport(hostport, strlen(hostport), &u) != 0)
        return -1;
    g_redis = redisConnect(u.host, atoi(u.port));
    if (!g_redis || g_redis->err) {
        fprintf(stderr, "tidemark-floor: redis %s: %s\n", hostport, g_redis ? g_redis->errstr : "no memory");
        return -1;
    }
    pthread_t t;
    return pthread_create(&t, NULL, redis_writer, NULL) == 0 ? 0 : -1;
}

static void accept_one(int ep)
{
    int fd = accept(g_listen, NULL, NULL), one = 1;
    if (fd < 0)
        return;
    fconn *c = malloc(sizeof *c);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (!c || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
        free(c);
        close(fd);
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->pending = c->dead = 0;
    c->have = 0;
    c->buf[0] = 0;
}

static void readable(int ep, fconn *c)
{
    ssize_t r = recv(c->fd, c->buf + c->have, BUF - 1 - c->have, 0);
    if (r > 0) {
        c->have += (size_t)r;
        c->buf[c->have] = 0;
        if (serve(c) == 0)
            return;
    } else if (r < 0 && errno == EAGAIN) {
        return;
    }
    pthread_mutex_lock(&g_q_mu);
    int later = c->pending > 0; /* the writer closes it after its last answer */
    c->dead = later;
    if (later) /* before the writer may free it */
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    pthread_mutex_unlock(&g_q_mu);
    if (!later)
        conn_free(c);
}

static void *loop(void *arg)
{
    (void)arg;
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = NULL}, evs[64];
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, g_listen, &ev))
        return NULL;
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr)
                readable(ep, evs[i].data.ptr);
            else
                accept_one(ep);
        }
    }
    return NULL;
}

static int listen_on(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int one = 1;
    g_listen = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(g_listen, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (g_listen < 0 || bind(g_listen, (struct sockaddr *)&a, sizeof a) || listen(g_listen, 4096) ||
        getsockname(g_listen, (struct sockaddr *)&a, &al))
        return -1;
    printf("listening on http://127.0.0.1:%d/mcp\n", ntohs(a.sin_port));
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    int port = 0, threads = 0;
    const char *commit = NULL, *redis = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0)
            port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--commit") == 0)
            commit = argv[i + 1];
        else if (strcmp(argv[i], "--redis") == 0)
            redis = argv[i + 1];
    }
    if ((commit && commit_open(commit) != 0) || (redis && redis_open(redis) != 0))
        return 1;
    if (threads <= 0)
        threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads <= 0 || threads > 256 || listen_on(port)) {
        perror("tidemark-floor");
        return 1;
    }
    pthread_t th[256];
    for (int i = 1; i < threads; i++)
        pthread_create(&th[i], NULL, loop, NULL);
    loop(NULL);
    return 1;
}
