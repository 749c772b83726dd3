/* test_client.c - the client library against a small in-process MCP server
 * (a thread on a loopback port it picks): which thread runs each
 * application callback (never the I/O thread: the one that drives the
 * stream), that the events of a stream arrive in order and exactly once
 * when the application is slower than the network (the transfer is paused,
 * not buffered without bound), and what a connect that reaches nothing,
 * or a URL that answers 404, reports. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tidemark/client.h"

/* ---- the server ------------------------------------------------------------------------ */

enum mode { M_OK = 0, M_404, M_STALL };

typedef struct server {
    int fd;
    int port;
    enum mode mode;
    int events;          /* progress events per call */
    size_t pad;          /* bytes of message text per progress event */
    pthread_t thread;
    pthread_t conns[64];
    int nconns;
    pthread_mutex_t mu;
    int stopping;
} server;

typedef struct conn {
    server *srv;
    int fd;
} conn;

#define EPOCH "00c0ffee00c0ffee"

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Read one request: headers and a Content-Length body. OUT method, body. */
static int read_request(int fd, char *method, size_t mn, char **body)
{
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap + 1);
    char *end = NULL;
    while (!end) {
        ssize_t r = recv(fd, buf + len, cap - len, 0);
        if (r <= 0 || (len += (size_t)r) >= cap) {
            free(buf);
            return -1;
        }
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    size_t head = (size_t)(end + 4 - buf), want = 0;
    char *cl = strcasestr(buf, "content-length:");
    if (cl && cl < end)
        want = strtoul(cl + 15, NULL, 10);
    while (len - head < want) {
        ssize_t r = recv(fd, buf + len, cap - len, 0);
        if (r <= 0) {
            free(buf);
            return -1;
        }
        len += (size_t)r;
    }
    buf[head + want] = '\0';
    sscanf(buf, "%15s", method);
    (void)mn;
    *body = strdup(buf + head);
    free(buf);
    return 0;
}

static void reply_json(int fd, int status, const char *json)
{
    char head[256];
    snprintf(head, sizeof head,
             "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nMcp-Session-Id: s-1\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, strlen(json));
    if (write_all(fd, head, strlen(head)) == 0)
        (void)write_all(fd, json, strlen(json));
}

/* The call's stream: priming event, progress 1..n, the result; the stream
 * is named after the request id, so concurrent calls have their own. */
static void reply_stream(server *s, int fd, long long id)
{
    const char *head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nMcp-Session-Id: s-1\r\n"
                       "Connection: close\r\n\r\nretry: 50\n\n";
    if (write_all(fd, head, strlen(head)))
        return;
    char *pad = malloc(s->pad + 1);
    memset(pad, 'p', s->pad);
    pad[s->pad] = '\0';
    size_t cap = s->pad + 512;
    char *ev = malloc(cap);
    snprintf(ev, cap, "id: " EPOCH "-r%lld-1\ndata:\n\n", id);
    int ok = write_all(fd, ev, strlen(ev)) == 0;
    for (int p = 1; ok && p <= s->events; p++) {
        snprintf(ev, cap,
                 "id: " EPOCH "-r%lld-%d\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\","
                 "\"params\":{\"progressToken\":%lld,\"progress\":%d,\"total\":%d,\"message\":\"%s\"}}\n\n",
                 id, p + 1, id, p, s->events, pad);
        ok = write_all(fd, ev, strlen(ev)) == 0;
    }
    if (ok && s->mode == M_STALL) {
        for (;;) { /* until the client goes away or the test ends */
            pthread_mutex_lock(&s->mu);
            int stop = s->stopping;
            pthread_mutex_unlock(&s->mu);
            char c;
            if (stop || recv(fd, &c, 1, MSG_DONTWAIT) == 0)
                break;
            usleep(10000);
        }
    } else if (ok) {
        snprintf(ev, cap,
                 "id: " EPOCH "-r%lld-%d\ndata: {\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":"
                 "{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n",
                 id, s->events + 2, id);
        (void)write_all(fd, ev, strlen(ev));
    }
    free(ev);
    free(pad);
}

static void *conn_main(void *arg)
{
    conn *k = arg;
    server *s = k->srv;
    char method[16] = "";
    char *body = NULL;
    if (read_request(k->fd, method, sizeof method, &body) == 0) {
        json_t *m = json_loads(body, 0, NULL);
        const char *rpc = json_string_value(json_object_get(m, "method"));
        long long id = json_integer_value(json_object_get(m, "id"));
        char out[512];
        if (s->mode == M_404) {
            reply_json(k->fd, 404, "{}");
        } else if (strcmp(method, "POST") != 0) {
            reply_json(k->fd, strcmp(method, "DELETE") == 0 ? 200 : 405, "{}");
        } else if (rpc && strcmp(rpc, "initialize") == 0) {
            snprintf(out, sizeof out,
                     "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"protocolVersion\":\"2025-11-25\","
                     "\"capabilities\":{\"tools\":{}},\"serverInfo\":{\"name\":\"t\",\"version\":\"0\"}}}", id);
            reply_json(k->fd, 200, out);
        } else if (rpc && strcmp(rpc, "tools/call") == 0) {
            reply_stream(s, k->fd, id);
        } else if (!json_object_get(m, "id")) {
            const char *h = "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            (void)write_all(k->fd, h, strlen(h));
        } else {
            snprintf(out, sizeof out, "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"tools\":[]}}", id);
            reply_json(k->fd, 200, out);
        }
        json_decref(m);
    }
    free(body);
    close(k->fd);
    free(k);
    return NULL;
}

static void *accept_main(void *arg)
{
    server *s = arg;
    for (;;) {
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0)
            return NULL; /* the listening socket was shut down */
        conn *k = calloc(1, sizeof *k);
        k->srv = s;
        k->fd = fd;
        pthread_mutex_lock(&s->mu);
        int ok = s->nconns < 64 && pthread_create(&s->conns[s->nconns], NULL, conn_main, k) == 0;
        if (ok)
            s->nconns++;
        pthread_mutex_unlock(&s->mu);
        if (!ok) {
            close(fd);
            free(k);
        }
    }
}

static server *server_start(enum mode mode, int events, size_t pad)
{
    server *s = calloc(1, sizeof *s);
    s->mode = mode;
    s->events = events;
    s->pad = pad;
    pthread_mutex_init(&s->mu, NULL);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s->fd, 64), 0);
    assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &al), 0);
    s->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&s->thread, NULL, accept_main, s), 0);
    return s;
}

static void server_stop(server *s)
{
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_mutex_unlock(&s->mu);
    shutdown(s->fd, SHUT_RDWR);
    pthread_join(s->thread, NULL);
    close(s->fd);
    for (int i = 0; i < s->nconns; i++)
        pthread_join(s->conns[i], NULL);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static void url_of(int port, char *out, size_t n)
{
    snprintf(out, n, "http://127.0.0.1:%d/mcp", port);
}

/* ---- what the callbacks saw ----------------------------------------------------------------- */

#define MAXREC 4096

typedef struct seen {
    pthread_mutex_t mu;
    int n;
    pthread_t thread[MAXREC];
    char stream[MAXREC][16];
    uint64_t seq[MAXREC];
    int nprogress;
    pthread_t progress_thread[MAXREC];
    double progress[MAXREC];
    int nnote;
    pthread_t note_thread[MAXREC];
    int slow_first_ms; /* the first event's handler takes this long */
} seen;

static int on_event(tidemark_txn_t *txn, const tidemark_event_t *ev, void *ud)
{
    (void)txn;
    seen *w = ud;
    pthread_mutex_lock(&w->mu);
    int i = w->n < MAXREC ? w->n++ : MAXREC - 1;
    w->thread[i] = pthread_self();
    snprintf(w->stream[i], sizeof w->stream[i], "%s", ev->stream);
    w->seq[i] = ev->seq;
    int slow = i == 0 ? w->slow_first_ms : 0;
    pthread_mutex_unlock(&w->mu);
    if (slow)
        usleep((useconds_t)slow * 1000);
    return 0;
}

static void on_progress(double p, double total, const char *msg, void *ud)
{
    (void)total, (void)msg;
    seen *w = ud;
    pthread_mutex_lock(&w->mu);
    int i = w->nprogress < MAXREC ? w->nprogress++ : MAXREC - 1;
    w->progress_thread[i] = pthread_self();
    w->progress[i] = p;
    pthread_mutex_unlock(&w->mu);
}

static void on_notification(json_t *msg, void *ud)
{
    (void)msg;
    seen *w = ud;
    pthread_mutex_lock(&w->mu);
    int i = w->nnote < MAXREC ? w->nnote++ : MAXREC - 1;
    w->note_thread[i] = pthread_self();
    pthread_mutex_unlock(&w->mu);
}

static tidemark_client_t *client_for(const char *url, seen *w, int timeout_ms)
{
    tidemark_client_config_t cfg;
    assert_int_equal(tidemark_client_config_init(&cfg), 0);
    cfg.url = url;
    cfg.timeout_ms = timeout_ms;
    cfg.on_event = on_event;
    cfg.on_notification = on_notification;
    cfg.ud = w;
    tidemark_client_t *c = NULL;
    assert_int_equal(tidemark_client_new(&cfg, &c), 0);
    return c;
}

static seen *seen_new(void)
{
    seen *w = calloc(1, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    return w;
}

/* ---- tests ------------------------------------------------------------------------------------ */

/* on_event, progress and on_notification of a call all run on the thread
 * that made the call, in the stream's order, each event once. */
static void test_callbacks_on_calling_thread(void **st)
{
    (void)st;
    server *s = server_start(M_OK, 5, 10);
    char url[64];
    url_of(s->port, url, sizeof url);
    seen *w = seen_new();
    tidemark_client_t *c = client_for(url, w, 10000);
    json_t *err = NULL;
    assert_int_equal(tidemark_client_connect(c, &err), 0);
    json_t *res = NULL;
    assert_int_equal(tidemark_client_call_tool(c, "stream", NULL, on_progress, w, &res), 0);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(res, "content"), 0), "text")),
                        "done");
    json_decref(res);
    pthread_t me = pthread_self();
    assert_int_equal(w->n, 5 + 1); /* progress 1..5 and the result (the priming event has no message) */
    for (int i = 0; i < w->n; i++) {
        assert_true(pthread_equal(w->thread[i], me));
        assert_int_equal(w->seq[i], (uint64_t)i + 2);
    }
    assert_int_equal(w->nprogress, 5);
    for (int i = 0; i < w->nprogress; i++) {
        assert_true(pthread_equal(w->progress_thread[i], me));
        assert_true(w->progress[i] == i + 1);
    }
    assert_int_equal(w->nnote, 5);
    for (int i = 0; i < w->nnote; i++)
        assert_true(pthread_equal(w->note_thread[i], me));
    tidemark_client_free(c);
    server_stop(s);
    free(w);
}

typedef struct caller {
    tidemark_client_t *c;
    seen *w;
    pthread_t self;
    int rc;
} caller;

static void *call_main(void *arg)
{
    caller *k = arg;
    k->self = pthread_self();
    json_t *res = NULL;
    k->rc = tidemark_client_call_tool(k->c, "stream", NULL, NULL, NULL, &res);
    json_decref(res);
    return NULL;
}

/* Two calls at once from two threads: each stream's events run on its own
 * caller's thread, in order. */
static void test_two_callers_two_streams(void **st)
{
    (void)st;
    server *s = server_start(M_OK, 40, 100);
    char url[64];
    url_of(s->port, url, sizeof url);
    seen *w = seen_new();
    tidemark_client_t *c = client_for(url, w, 10000);
    assert_int_equal(tidemark_client_connect(c, NULL), 0);
    caller k[2] = {{c, w, 0, -1}, {c, w, 0, -1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, call_main, &k[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(k[i].rc, 0);
    }
    assert_int_equal(w->n, 2 * 41);
    /* Per stream: one thread (one of the callers) and seqs 2, 3, ... */
    for (int i = 0; i < w->n; i++) {
        int first = 0;
        while (strcmp(w->stream[first], w->stream[i]) != 0)
            first++;
        assert_true(pthread_equal(w->thread[i], w->thread[first]));
        assert_true(pthread_equal(w->thread[i], k[0].self) || pthread_equal(w->thread[i], k[1].self));
        uint64_t before = 0;
        for (int j = 0; j < i; j++)
            if (strcmp(w->stream[j], w->stream[i]) == 0)
                before++;
        assert_int_equal(w->seq[i], before + 2);
    }
    tidemark_client_free(c);
    server_stop(s);
    free(w);
}

/* An application slower than the network: 3 MB of events while the first
 * handler sleeps. Nothing is lost, repeated or reordered. */
static void test_slow_handler_in_order(void **st)
{
    (void)st;
    server *s = server_start(M_OK, 200, 16000);
    char url[64];
    url_of(s->port, url, sizeof url);
    seen *w = seen_new();
    w->slow_first_ms = 300;
    tidemark_client_t *c = client_for(url, w, 20000);
    assert_int_equal(tidemark_client_connect(c, NULL), 0);
    json_t *res = NULL;
    assert_int_equal(tidemark_client_call_tool(c, "stream", NULL, NULL, NULL, &res), 0);
    json_decref(res);
    assert_int_equal(w->n, 201);
    for (int i = 0; i < w->n; i++)
        assert_int_equal(w->seq[i], (uint64_t)i + 2);
    tidemark_client_free(c);
    server_stop(s);
    free(w);
}

/* A port nothing listens on: the error says so, in the system's words. */
static void test_cannot_connect(void **st)
{
    (void)st;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    close(fd); /* bound once, now free: nothing listens there */
    char url[64], want[128];
    url_of(ntohs(a.sin_port), url, sizeof url);
    seen *w = seen_new();
    tidemark_client_t *c = client_for(url, w, 1500);
    json_t *err = NULL;
    int rc = tidemark_client_connect(c, &err);
    assert_int_not_equal(rc, 0);
    assert_non_null(err);
    assert_string_equal(json_string_value(json_object_get(json_object_get(err, "data"), "reason")),
                        "cannot_connect");
    snprintf(want, sizeof want, "cannot connect to %s: Connection refused", url);
    assert_string_equal(json_string_value(json_object_get(err, "message")), want);
    json_decref(err);
    tidemark_client_free(c);
    free(w);
}

/* A URL that answers 404 to initialize has no MCP endpoint: that is not a
 * lost session (there was none). */
static void test_no_endpoint(void **st)
{
    (void)st;
    server *s = server_start(M_404, 0, 0);
    char url[64], want[128];
    url_of(s->port, url, sizeof url);
    seen *w = seen_new();
    tidemark_client_t *c = client_for(url, w, 5000);
    json_t *err = NULL;
    assert_int_equal(tidemark_client_connect(c, &err), TIDEMARK_ENOTFOUND);
    assert_string_equal(json_string_value(json_object_get(json_object_get(err, "data"), "reason")),
                        "no_endpoint");
    snprintf(want, sizeof want, "no MCP endpoint at %s (HTTP 404)", url);
    assert_string_equal(json_string_value(json_object_get(err, "message")), want);
    json_decref(err);
    tidemark_client_free(c);
    server_stop(s);
    free(w);
}

static void *stopper_main(void *arg)
{
    usleep(200000);
    tidemark_client_stop(arg);
    return NULL;
}

/* A stop from another thread ends a request waiting on a silent stream
 * promptly, typed client_stopped. */
static void test_stop_from_another_thread(void **st)
{
    (void)st;
    server *s = server_start(M_STALL, 2, 10);
    char url[64];
    url_of(s->port, url, sizeof url);
    seen *w = seen_new();
    tidemark_client_t *c = client_for(url, w, 30000);
    assert_int_equal(tidemark_client_connect(c, NULL), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stopper_main, c), 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    json_t *res = NULL;
    assert_int_equal(tidemark_client_call_tool(c, "stream", NULL, NULL, NULL, &res), TIDEMARK_ECANCELED);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(res, "data"), "reason")),
                        "client_stopped");
    assert_true((t1.tv_sec - t0.tv_sec) < 5);
    json_decref(res);
    pthread_join(t, NULL);
    tidemark_client_free(c);
    server_stop(s);
    free(w);
}

/* What the client knows of its session is copied out, whole or not at all. */
static void test_session_copies(void **st)
{
    (void)st;
    server *s = server_start(M_OK, 0, 0);
    char url[64];
    url_of(s->port, url, sizeof url);
    seen *w = seen_new();
    tidemark_client_t *c = client_for(url, w, 5000);
    char buf[64], tiny[3];
    assert_int_equal(tidemark_client_session(c, buf, sizeof buf), TIDEMARK_ENOTFOUND);
    json_t *info = NULL;
    assert_int_equal(tidemark_client_server_info(c, &info), TIDEMARK_ENOTFOUND);
    assert_int_equal(tidemark_client_connect(c, NULL), 0);
    assert_int_equal(tidemark_client_session(c, buf, sizeof buf), 0);
    assert_string_equal(buf, "s-1");
    assert_int_equal(tidemark_client_session(c, tiny, sizeof tiny), TIDEMARK_ERANGE);
    assert_string_equal(tiny, "");
    assert_int_equal(tidemark_client_protocol_version(c, buf, sizeof buf), 0);
    assert_string_equal(buf, "2025-11-25");
    assert_int_equal(tidemark_client_server_info(c, &info), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(info, "serverInfo"), "name")), "t");
    json_decref(info);
    assert_int_equal(tidemark_client_end_session(c), 0);
    assert_int_equal(tidemark_client_session(c, buf, sizeof buf), TIDEMARK_ENOTFOUND);
    tidemark_client_free(c);
    server_stop(s);
    free(w);
}

static int insert_row(tidemark_txn_t *txn, const tidemark_event_t *ev, void *ud)
{
    (void)ud;
    json_t *row = json_pack("{s:s,s:I}", "event", ev->id, "seq", (json_int_t)ev->seq);
    int rc = tidemark_txn_insert(txn, "seen", row);
    json_decref(row);
    return rc;
}

/* The transaction on_event gets writes the application's rows with the
 * event's dispatch row and cursor: one row per applied event. */
static void test_effect_rows(void **st)
{
    (void)st;
    server *s = server_start(M_OK, 4, 10);
    char url[64];
    url_of(s->port, url, sizeof url);
    tidemark_client_config_t cfg;
    assert_int_equal(tidemark_client_config_init(&cfg), 0);
    cfg.url = url;
    cfg.on_event = insert_row;
    tidemark_client_t *c = NULL;
    assert_int_equal(tidemark_client_new(&cfg, &c), 0);
    assert_int_equal(tidemark_client_connect(c, NULL), 0);
    json_t *res = NULL;
    assert_int_equal(tidemark_client_call_tool(c, "stream", NULL, NULL, NULL, &res), 0);
    json_decref(res);
    json_t *rows = NULL;
    assert_int_equal(tidemark_client_query(c, "SELECT COUNT(*) AS n, MIN(id) AS lo, MAX(id) AS hi "
                                              "FROM tm_rows WHERE tbl = 'seen'", NULL, 0, &rows), 0);
    json_t *r = json_array_get(rows, 0);
    assert_int_equal(json_integer_value(json_object_get(r, "n")), 4 + 1);
    assert_int_equal(json_integer_value(json_object_get(r, "lo")), 1);
    assert_int_equal(json_integer_value(json_object_get(r, "hi")), 5);
    json_decref(rows);
    tidemark_client_free(c);
    server_stop(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_callbacks_on_calling_thread),
        cmocka_unit_test(test_two_callers_two_streams),
        cmocka_unit_test(test_slow_handler_in_order),
        cmocka_unit_test(test_cannot_connect),
        cmocka_unit_test(test_no_endpoint),
        cmocka_unit_test(test_stop_from_another_thread),
        cmocka_unit_test(test_session_copies),
        cmocka_unit_test(test_effect_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
