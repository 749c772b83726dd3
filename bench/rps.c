/*
 * tidemark-rps - a small load generator for the request path: N keep-alive
 * connections, one thread each, each sending `tools/call echo` back to back
 * for a fixed time, and what came back counted and timed.
 *
 *   tidemark-rps --url http://127.0.0.1:PORT/mcp [--era legacy|modern]
 *                [--conns N] [--seconds S] [--warmup S]
 *                [--method tools/call|tasks/get|task] [--task-id ID] [--poll-ms MS]
 *                [--tool echo|ledger_append] [--echo-arg NAME]
 *
 * legacy: every connection first makes its own 2025-11-25 session
 * (initialize + notifications/initialized) and calls inside it; modern: no
 * session, every call carries the 2026-07-28 _meta and headers. A call
 * counts only when its answer holds the echoed text; anything else is an
 * error and makes the exit status 1.
 *
 * --echo-arg NAME: the echo tool's argument (default text; the official
 * server-everything's echo takes message and answers "Echo: <message>").
 *
 * --tool ledger_append (tools/call only): each call is ledger_append with an
 * entry no other call of any run has ("rps-<pid>-<conn>-<id>": a
 * non-idempotent, atomic write); it counts when the answer holds the entry.
 *
 * The tasks extension (io.modelcontextprotocol/tasks; both methods imply
 * --era modern and declare the extension in clientCapabilities):
 *   --method tasks/get   tasks/get of one completed task back to back
 *                        (Mcp-Name: the taskId); a get counts when it answers
 *                        that task, completed. Without --task-id the first
 *                        connection makes the task first (as --method task).
 *   --method task        one operation = tools/call slow_compute {seconds: 0}
 *                        (must answer resultType "task"), then tasks/get on
 *                        the same connection until a terminal status,
 *                        --poll-ms apart (default 0: back to back; the
 *                        server suggests pollIntervalMs 500); the latency
 *                        is from sending the call to the first terminal get,
 *                        which must be completed. Also prints how many
 *                        CreateTaskResults were already completed and the
 *                        gets per task.
 *
 * Prints one line: era, method, conns, calls, calls/s, p50/p99/max latency in ms
 * (and p50 again in µs, p50_us, for comparisons finer than 0.01 ms).
 * HTTP/1.1 over plain sockets: Content-Length and chunked bodies (an SSE
 * answer is a chunked body the server ends after the result).
 */
#include "net.h"
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 256
#define MAX_LAT (1u << 20)
#define BUF (64 * 1024)

#define TASK_ID_MAX 65
#define TASKS_CAPS "{\"extensions\":{\"io.modelcontextprotocol/tasks\":{}}}"

enum { M_ECHO, M_TASKS_GET, M_TASK };

typedef struct opts {
    bench_url u;
    int modern, conns, method, ledger;
    char echo_arg[32];          /* the echo tool's argument ("text"; server-everything: "message") */
    double seconds, warmup, poll_ms;
    char task_id[TASK_ID_MAX];
} opts;

typedef struct conn {
    const opts *o;
    int fd, idx;
    char sid[128];
    char buf[BUF];
    size_t have;
    long calls, errors;
    long done_at_create, gets; /* --method task */
    double *lat;
    size_t nlat;
} conn;

static atomic_int g_measure, g_stop;

/* Read more into c->buf; -1 on EOF or error. */
static int fill(conn *c)
{
    if (c->have >= BUF - 1)
        return -1;
    ssize_t r = recv(c->fd, c->buf + c->have, BUF - 1 - c->have, 0);
    if (r <= 0)
        return -1;
    c->have += (size_t)r;
    c->buf[c->have] = 0;
    return 0;
}

static void consume(conn *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->have - n);
    c->have -= n;
    c->buf[c->have] = 0;
}

/* Append the chunked body that starts at c->buf to out; 0 at its end. */
static int read_chunked(conn *c, char *out, size_t cap, size_t *len)
{
    for (;;) {
        char *eol;
        while (!(eol = strstr(c->buf, "\r\n")))
            if (fill(c))
                return -1;
        size_t sz = strtoul(c->buf, NULL, 16), hdr = (size_t)(eol - c->buf) + 2;
        while (c->have < hdr + sz + 2)
            if (fill(c))
                return -1;
        if (*len + sz < cap) {
            memcpy(out + *len, c->buf + hdr, sz);
            *len += sz;
            out[*len] = 0;
        }
        consume(c, hdr + sz + 2);
        if (sz == 0)
            return 0;
    }
}

/* Read one response: status, body (NUL-terminated, cut at cap), session id. */
static int read_response(conn *c, int *status, char *body, size_t cap)
{
    char *end;
    while (!(end = strstr(c->buf, "\r\n\r\n")))
        if (fill(c))
            return -1;
    *end = 0;
    size_t hlen = (size_t)(end - c->buf) + 4;
    *status = atoi(c->buf + 9);
    long clen = -1;
    int chunked = 0;
    for (char *l = strstr(c->buf, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, "content-length:", 15) == 0)
            clen = atol(l + 17);
        else if (strncasecmp(l + 2, "transfer-encoding: chunked", 26) == 0)
            chunked = 1;
        else if (strncasecmp(l + 2, "mcp-session-id:", 15) == 0)
            sscanf(l + 17, " %127[^\r\n]", c->sid);
    }
    consume(c, hlen);
    size_t len = 0;
    body[0] = 0;
    if (chunked)
        return read_chunked(c, body, cap, &len);
    if (clen < 0)
        return -1;
    while (c->have < (size_t)clen)
        if (fill(c))
            return -1;
    len = (size_t)clen < cap - 1 ? (size_t)clen : cap - 1;
    memcpy(body, c->buf, len);
    body[len] = 0;
    consume(c, (size_t)clen);
    return 0;
}

static int post(conn *c, const char *headers, const char *json, int *status, char *body, size_t cap)
{
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\n%s%s%s%s"
                     "Content-Length: %zu\r\n\r\n%s",
                     c->o->u.path, c->o->u.host, c->o->u.port, c->sid[0] ? "Mcp-Session-Id: " : "", c->sid,
                     c->sid[0] ? "\r\n" : "", headers ? headers : "", strlen(json), json);
    if (n < 0 || n >= (int)sizeof req)
        return -1;
    return bench_send_all(c->fd, req, (size_t)n) || read_response(c, status, body, cap) ? -1 : 0;
}

static int legacy_session(conn *c)
{
    char body[BUF];
    int st;
    const char *init = "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
                       "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"
                       "\"clientInfo\":{\"name\":\"tidemark-rps\",\"version\":\"1\"}}}";
    const char *v = "MCP-Protocol-Version: 2025-11-25\r\n";
    if (post(c, NULL, init, &st, body, sizeof body) || st != 200 || !c->sid[0])
        return -1;
    return post(c, v, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &st, body,
                sizeof body) || st != 202 ? -1 : 0;
}

static int one_call(conn *c, long id)
{
    char json[1024], body[BUF];
    int st;
    const char *meta = c->o->modern
        ? ",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
          "\"io.modelcontextprotocol/clientInfo\":{\"name\":\"tidemark-rps\",\"version\":\"1\"},"
          "\"io.modelcontextprotocol/clientCapabilities\":{}}"
        : "";
    const char *hdr = !c->o->modern ? "MCP-Protocol-Version: 2025-11-25\r\n"
        : c->o->ledger ? "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: ledger_append\r\n"
                       : "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n";
    char text[64];
    if (c->o->ledger)
        snprintf(text, sizeof text, "rps-%ld-%d-%ld", (long)getpid(), c->idx, id);
    else
        snprintf(text, sizeof text, "rps-%ld", id);
    snprintf(json, sizeof json,
             "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
             "\"arguments\":{\"%s\":\"%s\"}%s}}",
             id, c->o->ledger ? "ledger_append" : "echo", c->o->ledger ? "entry" : c->o->echo_arg, text,
             meta);
    if (post(c, hdr, json, &st, body, sizeof body))
        return -1;
    char want[80];
    snprintf(want, sizeof want, "%s\"", text);
    return st == 200 && strstr(body, want) ? 0 : 1;
}

static void nap(double s)
{
    struct timespec t = {(time_t)s, (long)((s - (long)s) * 1e9)};
    nanosleep(&t, NULL);
}

#define MODERN_HDR(m) "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: " m "\r\n"

/* The 2026-07-28 _meta with these client capabilities. */
static void modern_meta(char *out, size_t cap, const char *caps)
{
    snprintf(out, cap,
             ",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
             "\"io.modelcontextprotocol/clientInfo\":{\"name\":\"tidemark-rps\",\"version\":\"1\"},"
             "\"io.modelcontextprotocol/clientCapabilities\":%s}",
             caps);
}

/* The first "key":"value" of body (compact JSON) into out; 0 when found.
 * The first is the task's own: the Task object puts taskId and status at
 * its top level, and slow_compute's result has neither. */
static int json_str(const char *body, const char *key, char *out, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(body, pat), *e = NULL;
    if (p)
        e = strchr(p += strlen(pat), '"');
    if (!e || (size_t)(e - p) >= cap)
        return -1;
    memcpy(out, p, (size_t)(e - p));
    out[e - p] = 0;
    return 0;
}

/* tools/call slow_compute {seconds: 0} declaring the tasks extension: the
 * taskId of its CreateTaskResult; *done when that already says completed. */
static int task_create(conn *c, long id, char *task_id, int *done)
{
    char meta[512], json[1024], body[BUF], status[32];
    int st;
    modern_meta(meta, sizeof meta, TASKS_CAPS);
    snprintf(json, sizeof json,
             "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"tools/call\",\"params\":{\"name\":"
             "\"slow_compute\",\"arguments\":{\"seconds\":0,\"label\":\"rps-%ld\"}%s}}",
             id, id, meta);
    if (post(c, MODERN_HDR("tools/call") "Mcp-Name: slow_compute\r\n", json, &st, body, sizeof body))
        return -1;
    if (st != 200 || !strstr(body, "\"resultType\":\"task\"") ||
        json_str(body, "taskId", task_id, TASK_ID_MAX) || json_str(body, "status", status, sizeof status))
        return 1;
    *done = strcmp(status, "completed") == 0;
    return 0;
}

/* tasks/get of task_id: its status, empty when the answer is not that task. */
static int task_get(conn *c, long id, const char *task_id, char *status, size_t cap)
{
    char meta[512], json[1024], hdr[256], body[BUF], got[TASK_ID_MAX];
    int st;
    modern_meta(meta, sizeof meta, TASKS_CAPS);
    snprintf(json, sizeof json,
             "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"tasks/get\",\"params\":"
             "{\"taskId\":\"%s\"%s}}",
             id, task_id, meta);
    snprintf(hdr, sizeof hdr, MODERN_HDR("tasks/get") "Mcp-Name: %s\r\n", task_id);
    if (post(c, hdr, json, &st, body, sizeof body))
        return -1;
    status[0] = 0;
    if (st == 200 && json_str(body, "taskId", got, sizeof got) == 0 && strcmp(got, task_id) == 0)
        json_str(body, "status", status, cap);
    return 0;
}

static int terminal(const char *status)
{
    return !strcmp(status, "completed") || !strcmp(status, "failed") || !strcmp(status, "cancelled");
}

/* --method task: create, then get until terminal (0: it completed); counts
 * the gets and whether the creation already said completed. */
static int task_cycle(conn *c, long id, char *task_id, long *gets, int *done)
{
    char status[32];
    int rc = task_create(c, id, task_id, done);
    while (rc == 0) {
        if ((rc = task_get(c, id, task_id, status, sizeof status)) != 0)
            break;
        ++*gets;
        if (!status[0] || terminal(status))
            return strcmp(status, "completed") != 0;
        if (atomic_load(&g_stop))
            return 1;
        if (c->o->poll_ms > 0)
            nap(c->o->poll_ms / 1e3);
    }
    return rc;
}

/* One measured operation of the chosen method. */
static int one_op(conn *c, long id, long *gets, int *done)
{
    char task_id[TASK_ID_MAX], status[32];
    if (c->o->method == M_TASK)
        return task_cycle(c, id, task_id, gets, done);
    if (c->o->method != M_TASKS_GET)
        return one_call(c, id);
    int rc = task_get(c, id, c->o->task_id, status, sizeof status);
    return rc ? rc : strcmp(status, "completed") != 0;
}

static void *run_conn(void *arg)
{
    conn *c = arg;
    for (long id = 1; !atomic_load(&g_stop); id++) {
        double t0 = bench_now();
        long gets = 0;
        int done = 0, rc = one_op(c, id, &gets, &done);
        if (rc < 0) { /* the connection broke: count it, reconnect */
            c->errors++;
            close(c->fd);
            c->have = 0;
            if ((c->fd = bench_dial(&c->o->u)) < 0)
                break;
            continue;
        }
        if (!atomic_load(&g_measure))
            continue;
        c->gets += gets;
        c->done_at_create += done;
        if (rc)
            c->errors++;
        else
            c->calls++;
        if (c->nlat < MAX_LAT)
            c->lat[c->nlat++] = (bench_now() - t0) * 1e3;
    }
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char *const method_names[] = {"tools/call", "tasks/get", "task"};

/* --method: the tasks ones are 2026-07-28 only. */
static int parse_method(const char *m, opts *o)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(m, method_names[i]) == 0) {
            o->method = i;
            return 0;
        }
    return -1;
}

static int parse_opts(int argc, char **argv, opts *o)
{
    static const struct option lo[] = {{"url", 1, 0, 'u'}, {"era", 1, 0, 'e'}, {"conns", 1, 0, 'c'},
                                       {"seconds", 1, 0, 's'}, {"warmup", 1, 0, 'w'},
                                       {"method", 1, 0, 'm'}, {"task-id", 1, 0, 't'},
                                       {"poll-ms", 1, 0, 'p'}, {"tool", 1, 0, 'T'},
                                       {"echo-arg", 1, 0, 'A'},
                                       {0, 0, 0, 0}};
    *o = (opts){.conns = 1, .seconds = 5, .warmup = 1, .echo_arg = "text"};
    const char *url = NULL;
    for (int ch; (ch = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (ch == 'u')
            url = optarg;
        else if (ch == 'e')
            o->modern = strcmp(optarg, "modern") == 0;
        else if (ch == 'c')
            o->conns = atoi(optarg);
        else if (ch == 's')
            o->seconds = atof(optarg);
        else if (ch == 'w')
            o->warmup = atof(optarg);
        else if (ch == 'm' && parse_method(optarg, o) == 0)
            continue;
        else if (ch == 't' && strlen(optarg) < sizeof o->task_id)
            snprintf(o->task_id, sizeof o->task_id, "%s", optarg);
        else if (ch == 'p')
            o->poll_ms = atof(optarg);
        else if (ch == 'A' && strlen(optarg) < sizeof o->echo_arg && !strpbrk(optarg, "\"\\"))
            snprintf(o->echo_arg, sizeof o->echo_arg, "%s", optarg);
        else if (ch == 'T' && (!strcmp(optarg, "echo") || !strcmp(optarg, "ledger_append")))
            o->ledger = strcmp(optarg, "ledger_append") == 0;
        else
            return -1;
    }
    if (!url || bench_parse_url(url, &o->u) || o->conns < 1 || o->conns > MAX_CONNS || o->seconds <= 0)
        return -1;
    if (o->method != M_ECHO)
        o->modern = 1;
    if (o->ledger && o->method != M_ECHO)
        return -1;
    return 0;
}

static int report(const opts *o, conn *cs)
{
    long calls = 0, errors = 0, gets = 0, done = 0;
    size_t n = 0;
    for (int i = 0; i < o->conns; i++) {
        calls += cs[i].calls;
        errors += cs[i].errors;
        gets += cs[i].gets;
        done += cs[i].done_at_create;
        n += cs[i].nlat;
    }
    double *all = malloc((n + 1) * sizeof *all);
    if (!all)
        return 1;
    size_t k = 0;
    for (int i = 0; i < o->conns; i++)
        for (size_t j = 0; j < cs[i].nlat; j++)
            all[k++] = cs[i].lat[j];
    qsort(all, n, sizeof *all, cmp_d);
    printf("era=%s method=%s conns=%d calls=%ld rps=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f "
           "errors=%ld p50_us=%.1f",
           o->modern ? "modern" : "legacy", method_names[o->method], o->conns, calls,
           (double)calls / o->seconds, n ? all[n / 2] : 0, n ? all[n * 99 / 100] : 0,
           n ? all[n - 1] : 0, errors, n ? all[n / 2] * 1e3 : 0);
    if (o->method == M_TASK)
        printf(" done_at_create=%ld gets_per_task=%.2f poll_ms=%g", done,
               calls + errors ? (double)gets / (double)(calls + errors) : 0, o->poll_ms);
    if (o->method == M_TASKS_GET)
        printf(" task=%s", o->task_id);
    if (o->ledger)
        printf(" tool=ledger_append");
    printf("\n");
    free(all);
    return errors || calls == 0;
}

static void free_conns(conn *cs, int n)
{
    for (int i = 0; cs && i < n; i++) {
        free(cs[i].lat);
        if (cs[i].fd > 0)
            close(cs[i].fd);
    }
    free(cs);
}

/* Connect every connection (and open its session in the 2025 era). */
static int open_conns(const opts *o, conn *cs)
{
    for (int i = 0; i < o->conns; i++) {
        cs[i].o = o;
        cs[i].fd = -1;
        cs[i].idx = i;
        cs[i].lat = malloc(MAX_LAT * sizeof(double));
        if (!cs[i].lat || (cs[i].fd = bench_dial(&o->u)) < 0 || (!o->modern && legacy_session(&cs[i]))) {
            fprintf(stderr, "tidemark-rps: cannot connect or open a session at %s:%s\n", o->u.host,
                    o->u.port);
            return -1;
        }
    }
    return 0;
}

/* --method tasks/get without --task-id: one completed task to read first. */
static int prepare_task(opts *o, conn *c)
{
    long gets = 0;
    int done = 0;
    if (o->method != M_TASKS_GET || o->task_id[0])
        return 0;
    if (task_cycle(c, 0, o->task_id, &gets, &done) == 0)
        return 0;
    fprintf(stderr, "tidemark-rps: could not make a completed task at %s:%s\n", o->u.host, o->u.port);
    return -1;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_opts(argc, argv, &o)) {
        fprintf(stderr, "usage: tidemark-rps --url http://HOST:PORT/PATH [--era legacy|modern] "
                        "[--conns N] [--seconds S] [--warmup S]\n"
                        "       [--method tools/call|tasks/get|task] [--task-id ID] [--poll-ms MS]\n"
                        "       [--tool echo|ledger_append] [--echo-arg NAME]\n");
        return 2;
    }
    conn *cs = calloc((size_t)o.conns, sizeof *cs);
    pthread_t *th = calloc((size_t)o.conns, sizeof *th);
    int started = 0, rc = 1;
    if (!cs || !th || open_conns(&o, cs) || prepare_task(&o, &cs[0]))
        goto out;
    for (; started < o.conns; started++)
        if (pthread_create(&th[started], NULL, run_conn, &cs[started]) != 0) {
            fprintf(stderr, "tidemark-rps: cannot start thread %d\n", started);
            break;
        }
    if (started == o.conns) {
        nap(o.warmup);
        atomic_store(&g_measure, 1);
        nap(o.seconds);
        atomic_store(&g_measure, 0);
    }
    atomic_store(&g_stop, 1);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (started == o.conns)
        rc = report(&o, cs);
out:
    free_conns(cs, o.conns);
    free(th);
    return rc;
}
