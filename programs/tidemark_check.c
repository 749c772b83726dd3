/*
 * tidemark-check - probe any Streamable HTTP MCP server for safe stream
 * resumption and print a scorecard.
 *
 *   tidemark-check [--json] [--tool NAME] [--args JSON] [--restart-cmd CMD]
 *                  [--timeout-ms N] URL
 *
 * It speaks raw HTTP (libcurl multi) and reads SSE with the library's parser
 * at block level (own_id, on_id_only), so it sees exactly what the server
 * sends: which blocks carry an id: field, where retry: is,
 * whether a stream ends or is held open. All it needs from the server is a
 * tool that streams progress notifications (default: Tidemark's demo tool
 * `stream` with {"n":20,"delay_ms":20}); every call carries a progressToken
 * in _meta, unique per call, so events can be traced to the call they belong
 * to.
 *
 * Every wait is bounded: --timeout-ms per operation, and a short quiet window
 * decides that a stream which says nothing is "silent".
 *
 * Exit status: 0 when no check FAILed, 1 otherwise, 2 on usage errors.
 */
#include "base/buf.h"
#include "base/clock.h"
#include "base/random.h"
#include "transport/sse_parser.h"
#include "tidemark/tidemark.h"
#include <curl/curl.h>
#include <jansson.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Observations are one line each: cutting a long one short is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#define MAX_BODY ((size_t)4 << 20)  /* non-SSE response body */
#define MAX_LINE ((size_t)1 << 20)  /* one SSE line */
#define MAX_DATA ((size_t)4 << 20)  /* one SSE event's data */
#define MAX_EVENTS 20000            /* events kept per transfer */
#define PROTOCOL_VERSION "2025-11-25"

/* ---- options ------------------------------------------------------------------- */

static const char *opt_url;
static const char *opt_tool = "stream";
static json_t *opt_args;
static const char *opt_restart_cmd;
static long long opt_timeout_ms = 10000;
static int opt_json;

static long long quiet_ms(void)
{
    return opt_timeout_ms / 2 < 1500 ? opt_timeout_ms / 2 : 1500;
}

static long long grace_ms(void)
{
    return opt_timeout_ms / 2 < 1000 ? opt_timeout_ms / 2 : 1000;
}


static void sleep_ms(long long ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fputs("tidemark-check: out of memory\n", stderr);
        exit(3);
    }
    return p;
}

static char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static char *xstrdup(const char *s)
{
    return s ? xstrndup(s, strlen(s)) : NULL;
}

/* ---- growable byte buffer (always NUL-terminated) ---------------------------------- */


/* ---- events ---------------------------------------------------------------------- */

/* One SSE block that carried an id: field and/or data: lines. */
typedef struct event {
    char *id;    /* NULL: the block had no id: field (SSE would inherit the last one) */
    char *type;  /* NULL: default type "message" */
    char *data;  /* NULL: no data: line (an id-only block, not dispatched by SSE) */
    json_t *msg; /* data parsed as JSON, or NULL */
} event;

/* ---- one HTTP transfer -------------------------------------------------------------- */

typedef struct xfer {
    CURL *h;
    struct curl_slist *hdrs;
    char errbuf[CURL_ERROR_SIZE];
    /* response */
    long status;
    char ctype[128];
    char sid[256];
    int headers_done;
    int is_sse;
    tm_buf body;   /* non-SSE response body, at most MAX_BODY */
    json_t *json; /* parsed non-SSE body */
    long long t_start, t_headers, t_last_event, t_final;
    tm_sse_parser *parser; /* src/transport/sse_parser.c, with raw block info */
    event *ev;
    size_t nev, cap;
    size_t nids; /* events with an id: field */
    long retry;
    int retry_seen;
    int retry_before_first;
    int comments;
    int overflow;
    /* control */
    size_t stop_after_ids; /* abort once this many events with ids were read */
    json_t *final_id;      /* the request id whose response ends our interest */
    int got_final;
    long long deadline;
    long long quiet;       /* > 0: stop when no event arrives for this long */
    long long grace;       /* after the final response: wait this long for the end */
    int stop;
    /* outcome */
    int done;
    int ended;     /* the server completed the response (CURLE_OK) */
    int timed_out; /* the deadline passed */
    int left_open; /* we stopped it: quiet, or still open after the final response */
    int cut;       /* we stopped it after stop_after_ids events */
    CURLcode cc;
} xfer;

static void event_free(event *e)
{
    free(e->id);
    free(e->type);
    free(e->data);
    json_decref(e->msg);
}

static int json_id_equal(json_t *a, json_t *b)
{
    return a && b && json_equal(a, b);
}

static int is_response(json_t *m)
{
    return json_is_object(m) && json_object_get(m, "id") && !json_object_get(m, "method") &&
           (json_object_get(m, "result") || json_object_get(m, "error"));
}

/* Record one block that carried an id: field and/or data (id NULL: the
 * block had no id: field of its own; data NULL: an id-only block, which SSE
 * does not dispatch). Returns 1 to stop the transfer. */
static int record_block(xfer *x, const char *id, const char *type, const char *data, size_t len)
{
    if (x->nev == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 32;
        event *v = realloc(x->ev, cap * sizeof *v);
        if (!v) {
            x->overflow = 1;
            return 1;
        }
        x->ev = v;
        x->cap = cap;
    }
    event *e = &x->ev[x->nev++];
    memset(e, 0, sizeof *e);
    e->id = id ? xstrndup(id, strlen(id)) : NULL;
    e->type = type && strcmp(type, "message") != 0 ? xstrndup(type, strlen(type)) : NULL;
    if (data) {
        e->data = xstrndup(data, len);
        if (len)
            e->msg = json_loadb(e->data, len, JSON_DECODE_ANY, NULL);
    }
    x->t_last_event = tm_now_ms();
    if (e->id)
        x->nids++;
    if (x->final_id && is_response(e->msg) &&
        json_id_equal(json_object_get(e->msg, "id"), x->final_id) && !x->got_final) {
        x->got_final = 1;
        x->t_final = x->t_last_event;
    }
    if (x->stop_after_ids && x->nids >= x->stop_after_ids) {
        x->cut = 1;
        return 1;
    }
    if (x->nev >= MAX_EVENTS) {
        x->overflow = 1;
        return 1;
    }
    return 0;
}

static int on_sse_event(void *ud, const tm_sse_event *ev)
{
    return record_block(ud, ev->own_id ? ev->id : NULL, ev->type, ev->data, ev->data_len);
}

static void on_sse_id_only(void *ud, const char *id)
{
    xfer *x = ud;
    if (record_block(x, id, NULL, NULL, 0))
        x->stop = 1;
}

static void on_sse_retry(void *ud, unsigned long ms)
{
    xfer *x = ud;
    x->retry = ms > 100000000UL ? 100000000L : (long)ms;
    if (!x->retry_seen && x->nev == 0)
        x->retry_before_first = 1;
    x->retry_seen = 1;
}

static void on_sse_comment(void *ud, const char *text, size_t len)
{
    (void)text;
    (void)len;
    ((xfer *)ud)->comments++;
}

/* Feed SSE bytes. Returns 1 to stop the transfer. */
static int sse_feed(xfer *x, const char *s, size_t n)
{
    if (!x->parser) {
        tm_sse_callbacks cb = {.on_event = on_sse_event, .on_retry = on_sse_retry,
                               .on_comment = on_sse_comment, .on_id_only = on_sse_id_only};
        if (tm_sse_parser_new(MAX_LINE, MAX_DATA, &cb, x, &x->parser) != 0) {
            x->overflow = 1;
            return 1;
        }
    }
    int rc = tm_sse_parser_feed(x->parser, s, n);
    if (rc == TIDEMARK_ERANGE || rc == TIDEMARK_ENOMEM)
        x->overflow = 1;
    return rc != 0 || x->stop;
}

static size_t on_write(char *p, size_t sz, size_t nm, void *ud)
{
    xfer *x = ud;
    size_t n = sz * nm;
    if (x->stop)
        return 0;
    if (x->is_sse) {
        if (sse_feed(x, p, n)) {
            x->stop = 1;
            return 0;
        }
    } else if (tm_buf_add(&x->body, p, n)) {
        x->overflow = 1;
        x->stop = 1;
        return 0;
    }
    return n;
}

static void copy_header_value(char *dst, size_t cap, const char *v, size_t n)
{
    while (n && (*v == ' ' || *v == '\t')) {
        v++;
        n--;
    }
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud)
{
    xfer *x = ud;
    size_t n = sz * nm;
    if (n >= 5 && !strncmp(p, "HTTP/", 5)) { /* a new response (e.g. after 100) */
        x->ctype[0] = x->sid[0] = '\0';
        x->headers_done = 0;
        const char *sp = memchr(p, ' ', n);
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
    } else if (n <= 2 && x->status >= 200) {
        x->headers_done = 1;
        x->t_headers = tm_now_ms();
        x->is_sse = strncasecmp(x->ctype, "text/event-stream", 17) == 0;
    } else if (n > 13 && !strncasecmp(p, "content-type:", 13)) {
        copy_header_value(x->ctype, sizeof x->ctype, p + 13, n - 13);
    } else if (n > 15 && !strncasecmp(p, "mcp-session-id:", 15)) {
        copy_header_value(x->sid, sizeof x->sid, p + 15, n - 15);
    }
    return n;
}

/* ---- sessions ---------------------------------------------------------------------- */

typedef struct session {
    char name;  /* 'A', 'B': for progress tokens and observations */
    char *sid;  /* Mcp-Session-Id, NULL if none was issued */
    char *proto;
    long long next_id;
    int ncalls;
} session;

static void add_header(xfer *x, const char *fmt, ...)
{
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    x->hdrs = curl_slist_append(x->hdrs, line);
}

/* A transfer: method POST (body), GET (optional Last-Event-ID) or DELETE. */
static xfer *xfer_new(const char *method, const session *s, const char *body, const char *lei)
{
    xfer *x = calloc(1, sizeof *x);
    if (!x || !(x->h = curl_easy_init())) {
        fputs("tidemark-check: cannot create a transfer\n", stderr);
        exit(3);
    }
    tm_buf_init(&x->body, MAX_BODY);
    CURL *h = x->h;
    curl_easy_setopt(h, CURLOPT_URL, opt_url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    /* A connection of its own for every transfer: aborting one is a real
     * disconnect the server sees, and nothing is pooled between checks. */
    curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)opt_timeout_ms);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "tidemark-check/0.1");
    add_header(x, "Expect:");
    if (!strcmp(method, "POST")) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
        curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, body);
        add_header(x, "Content-Type: application/json");
        add_header(x, "Accept: application/json, text/event-stream");
    } else if (!strcmp(method, "GET")) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        add_header(x, "Accept: text/event-stream");
    } else {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        add_header(x, "Accept: application/json, text/event-stream");
    }
    if (s && s->sid)
        add_header(x, "Mcp-Session-Id: %s", s->sid);
    if (s && s->proto)
        add_header(x, "MCP-Protocol-Version: %s", s->proto);
    if (lei)
        add_header(x, "Last-Event-ID: %s", lei);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
    x->deadline = -1;
    x->grace = -1;
    return x;
}

static void xfer_free(xfer *x)
{
    if (!x)
        return;
    if (x->h)
        curl_easy_cleanup(x->h);
    curl_slist_free_all(x->hdrs);
    tm_buf_free(&x->body);
    tm_sse_parser_free(x->parser);
    for (size_t i = 0; i < x->nev; i++)
        event_free(&x->ev[i]);
    free(x->ev);
    json_decref(x->json);
    json_decref(x->final_id);
    free(x);
}

/* Drive transfers together until each one ends, is cut, goes quiet, stays
 * open past its grace after the final response, or reaches its deadline. */
static void run_xfers(xfer **xs, size_t n)
{
    CURLM *m = curl_multi_init();
    if (!m) {
        fputs("tidemark-check: cannot create a multi handle\n", stderr);
        exit(3);
    }
    long long t0 = tm_now_ms();
    for (size_t i = 0; i < n; i++) {
        xs[i]->t_start = t0;
        if (xs[i]->deadline < 0)
            xs[i]->deadline = t0 + opt_timeout_ms;
        curl_multi_add_handle(m, xs[i]->h);
    }
    size_t left = n;
    while (left) {
        int running = 0;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int q;
        while ((msg = curl_multi_info_read(m, &q))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            for (size_t i = 0; i < n; i++) {
                xfer *x = xs[i];
                if (x->h != msg->easy_handle || x->done)
                    continue;
                x->cc = msg->data.result;
                x->done = 1;
                if (x->cc == CURLE_OK)
                    x->ended = 1; /* an unterminated last block is discarded, as SSE does */
                curl_multi_remove_handle(m, x->h);
                left--;
            }
        }
        long long now = tm_now_ms();
        for (size_t i = 0; i < n; i++) {
            xfer *x = xs[i];
            if (x->done)
                continue;
            int stop = 0;
            if (now >= x->deadline) {
                x->timed_out = 1;
                stop = 1;
            } else if (x->got_final && x->grace >= 0 && now - x->t_final >= x->grace) {
                x->left_open = 1;
                stop = 1;
            } else if (x->quiet > 0 && x->headers_done) {
                long long since = x->t_last_event > x->t_headers ? x->t_last_event : x->t_headers;
                if (now - since >= x->quiet) {
                    x->left_open = 1;
                    stop = 1;
                }
            }
            if (stop) {
                x->done = 1;
                curl_multi_remove_handle(m, x->h);
                left--;
            }
        }
        if (left)
            curl_multi_poll(m, NULL, 0, 20, NULL);
    }
    curl_multi_cleanup(m);
    for (size_t i = 0; i < n; i++) {
        xfer *x = xs[i];
        if (!x->is_sse && x->body.len)
            x->json = json_loadb(x->body.data, x->body.len, JSON_DECODE_ANY, NULL);
    }
}

static void run1(xfer *x)
{
    run_xfers(&x, 1);
}

/* The connection itself failed (nothing, or no status line, came back). */
static int conn_failed(const xfer *x)
{
    return x->status == 0;
}

static const char *conn_error(const xfer *x)
{
    if (x->timed_out)
        return "no answer before the timeout";
    return x->errbuf[0] ? x->errbuf : curl_easy_strerror(x->cc);
}

/* The JSON-RPC response to `id` in a transfer: the JSON body, or an SSE event. */
static json_t *xfer_response(xfer *x, json_t *id)
{
    if (x->json) {
        if (json_is_object(x->json) && json_id_equal(json_object_get(x->json, "id"), id))
            return x->json;
        if (json_is_array(x->json)) {
            size_t i;
            json_t *m;
            json_array_foreach(x->json, i, m) if (json_id_equal(json_object_get(m, "id"), id)) return m;
        }
        return NULL;
    }
    for (size_t i = 0; i < x->nev; i++)
        if (is_response(x->ev[i].msg) && json_id_equal(json_object_get(x->ev[i].msg, "id"), id))
            return x->ev[i].msg;
    return NULL;
}

/* Send one JSON-RPC message. For requests, *id_out gets the request id. */
static xfer *post_msg(session *s, const char *method, json_t *params, int notification)
{
    json_t *m = json_object();
    json_object_set_new(m, "jsonrpc", json_string("2.0"));
    json_t *id = NULL;
    if (!notification) {
        id = json_integer(++s->next_id);
        json_object_set(m, "id", id);
    }
    json_object_set_new(m, "method", json_string(method));
    if (params)
        json_object_set(m, "params", params);
    char *body = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    xfer *x = xfer_new("POST", s, body, NULL);
    free(body);
    x->final_id = id;
    x->grace = 0;
    return x;
}

/* A short description of a JSON-RPC error object (reason when typed). */
static void describe_error(json_t *err, char *out, size_t n)
{
    json_t *data = json_object_get(err, "data");
    const char *reason = json_string_value(json_object_get(data, "reason"));
    json_t *code = json_object_get(err, "code");
    const char *msg = json_string_value(json_object_get(err, "message"));
    if (reason) {
        json_t *missing = json_object_get(data, "missing");
        json_t *dh = json_object_get(data, "durable_head");
        if (json_is_array(missing) && json_array_size(missing) == 2)
            snprintf(out, n, "%s (missing %" JSON_INTEGER_FORMAT "..%" JSON_INTEGER_FORMAT ")",
                     reason, json_integer_value(json_array_get(missing, 0)),
                     json_integer_value(json_array_get(missing, 1)));
        else if (json_is_integer(dh))
            snprintf(out, n, "%s (durable_head %" JSON_INTEGER_FORMAT ")", reason,
                     json_integer_value(dh));
        else
            snprintf(out, n, "%s", reason);
    } else {
        snprintf(out, n, "code %" JSON_INTEGER_FORMAT " \"%.80s\", no data.reason",
                 json_integer_value(code), msg ? msg : "");
    }
}

/* The JSON-RPC error object of an HTTP error answer, if it has one. */
static json_t *error_body(xfer *x)
{
    json_t *j = x->json;
    if (!j && x->is_sse) /* an error carried as an SSE event */
        for (size_t i = 0; i < x->nev && !j; i++)
            if (json_is_object(json_object_get(x->ev[i].msg, "error")))
                j = x->ev[i].msg;
    json_t *e = json_object_get(j, "error");
    return json_is_object(e) ? e : NULL;
}

/* ---- results ----------------------------------------------------------------------- */

typedef enum { R_PASS, R_FAIL, R_WARN, R_NA } result_t;
static const char *const RESULT_NAME[] = {"PASS", "FAIL", "WARN", "N/A"};

enum {
    C_INIT,
    C_PRIMING,
    C_UNIQUE,
    C_REPLAY,
    C_REPEAT,
    C_UNKNOWN,
    C_FOREIGN,
    C_FUTURE,
    C_STALE,
    C_DELETE,
    C_RESTART,
    NCHECKS
};

typedef struct check {
    const char *name;
    result_t result;
    char obs[700];
} check;

static check checks[NCHECKS] = {
    [C_INIT] = {"initialize", R_NA, ""},         [C_PRIMING] = {"priming_event", R_NA, ""},
    [C_UNIQUE] = {"unique_ids", R_NA, ""},       [C_REPLAY] = {"replay_exact", R_NA, ""},
    [C_REPEAT] = {"replay_repeatable", R_NA, ""}, [C_UNKNOWN] = {"cursor_unknown", R_NA, ""},
    [C_FOREIGN] = {"cursor_foreign", R_NA, ""},  [C_FUTURE] = {"cursor_future", R_NA, ""},
    [C_STALE] = {"cursor_stale", R_NA, ""},      [C_DELETE] = {"delete_404", R_NA, ""},
    [C_RESTART] = {"restart", R_NA, ""},
};

static void set_check(int c, result_t r, const char *fmt, ...)
{
    checks[c].result = r;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(checks[c].obs, sizeof checks[c].obs, fmt, ap);
    va_end(ap);
}

/* FAIL > WARN > PASS > N/A: the combined verdict of several probes. */
static result_t worse(result_t a, result_t b)
{
    static const int rank[] = {[R_PASS] = 1, [R_FAIL] = 3, [R_WARN] = 2, [R_NA] = 0};
    return rank[a] >= rank[b] ? a : b;
}

static void appendf(char *buf, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(buf);
    if (len + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

/* ---- event helpers -------------------------------------------------------------------- */

/* A comparable description of an event, independent of progress tokens and
 * request ids: what the event means in the call's sequence. */
static void ev_key(const event *e, char *out, size_t n)
{
    char pre[80] = "";
    if (e->type && strcmp(e->type, "message"))
        snprintf(pre, sizeof pre, "event:%.60s ", e->type);
    json_t *m = e->msg;
    if (!e->data)
        snprintf(out, n, "%s(id only)", pre);
    else if (!e->data[0])
        snprintf(out, n, "%s(empty data)", pre);
    else if (!json_is_object(m))
        snprintf(out, n, "%sraw:%.60s", pre, e->data);
    else if (json_is_string(json_object_get(m, "method"))) {
        const char *meth = json_string_value(json_object_get(m, "method"));
        json_t *p = json_object_get(m, "params");
        if (!strcmp(meth, "notifications/progress")) {
            json_t *tot = json_object_get(p, "total");
            if (json_is_number(tot))
                snprintf(out, n, "%sprogress %g/%g", pre, json_number_value(json_object_get(p, "progress")),
                         json_number_value(tot));
            else
                snprintf(out, n, "%sprogress %g", pre, json_number_value(json_object_get(p, "progress")));
        } else {
            snprintf(out, n, "%s%s %.80s", pre, json_object_get(m, "id") ? "request" : "notification",
                     meth);
        }
    } else if (json_object_get(m, "result"))
        snprintf(out, n, "%sresponse (result)", pre);
    else if (json_is_object(json_object_get(m, "error")))
        snprintf(out, n, "%sresponse (error %" JSON_INTEGER_FORMAT ")", pre,
                 json_integer_value(json_object_get(json_object_get(m, "error"), "code")));
    else
        snprintf(out, n, "%sjson", pre);
}

/* The progress token of a progress notification, else NULL. */
static const char *ev_token(const event *e)
{
    json_t *m = e->msg;
    if (!json_is_object(m) ||
        !json_is_string(json_object_get(m, "method")) ||
        strcmp(json_string_value(json_object_get(m, "method")), "notifications/progress"))
        return NULL;
    json_t *t = json_object_get(json_object_get(m, "params"), "progressToken");
    return json_is_string(t) ? json_string_value(t) : "(non-string token)";
}

/* Index of the k-th (1-based) event that carried an id, or -1. */
static long kth_id_index(const xfer *x, size_t k)
{
    size_t c = 0;
    for (size_t i = 0; i < x->nev; i++)
        if (x->ev[i].id && ++c == k)
            return (long)i;
    return -1;
}

static const char *last_id(const xfer *x)
{
    for (size_t i = x->nev; i-- > 0;)
        if (x->ev[i].id)
            return x->ev[i].id;
    return NULL;
}

static size_t count_data_events(const xfer *x)
{
    size_t c = 0;
    for (size_t i = 0; i < x->nev; i++)
        if (x->ev[i].data && x->ev[i].data[0])
            c++;
    return c;
}

static size_t count_responses(const xfer *x, json_t *id)
{
    size_t c = 0;
    for (size_t i = 0; i < x->nev; i++)
        if (is_response(x->ev[i].msg) && json_id_equal(json_object_get(x->ev[i].msg, "id"), id))
            c++;
    return c;
}

/* Events carrying a progress token other than `token` (a foreign stream's events). */
static const event *foreign_token_event(const xfer *x, const char *token)
{
    for (size_t i = 0; i < x->nev; i++) {
        const char *t = ev_token(&x->ev[i]);
        if (t && strcmp(t, token))
            return &x->ev[i];
    }
    return NULL;
}

/* Compare events[from..] of `got` with ref[rfrom..] by key. Returns 0 when
 * they match, else describes the first difference. */
static int compare_keys(const xfer *ref, size_t rfrom, const xfer *got, size_t gfrom, char *out,
                        size_t n)
{
    size_t i = rfrom, j = gfrom;
    char a[200], b[200];
    for (; i < ref->nev && j < got->nev; i++, j++) {
        ev_key(&ref->ev[i], a, sizeof a);
        ev_key(&got->ev[j], b, sizeof b);
        if (strcmp(a, b)) {
            /* A duplicate is a repeat of the previous event; a gap skips ahead. */
            char prev[200] = "";
            if (j > gfrom)
                ev_key(&got->ev[j - 1], prev, sizeof prev);
            if (prev[0] && !strcmp(prev, b))
                snprintf(out, n, "duplicate: '%s' twice (event %zu)", b, j + 1);
            else
                snprintf(out, n, "event %zu is '%s', expected '%s'%s", j - gfrom + 1, b, a,
                         j + 1 < got->nev ? "" : " (last one received)");
            return -1;
        }
    }
    if (i < ref->nev) {
        ev_key(&ref->ev[i], a, sizeof a);
        snprintf(out, n, "missing %zu event(s) from '%s' on", ref->nev - i, a);
        return -1;
    }
    if (j < got->nev) {
        ev_key(&got->ev[j], b, sizeof b);
        snprintf(out, n, "%zu extra event(s) after the end, first '%s'", got->nev - j, b);
        return -1;
    }
    return 0;
}

/* Same ids, same types, same data, in order. */
static int same_events(const xfer *a, const xfer *b, char *out, size_t n)
{
    size_t i;
    for (i = 0; i < a->nev && i < b->nev; i++) {
        const event *x = &a->ev[i], *y = &b->ev[i];
        int same_id = (!x->id && !y->id) || (x->id && y->id && !strcmp(x->id, y->id));
        int same_ty = (!x->type && !y->type) || (x->type && y->type && !strcmp(x->type, y->type));
        int same_da = (!x->data && !y->data) || (x->data && y->data && !strcmp(x->data, y->data));
        if (!same_id || !same_ty || !same_da) {
            char k[200];
            ev_key(y, k, sizeof k);
            snprintf(out, n, "event %zu differs: id %s '%s' (before: id %s)", i + 1,
                     y->id ? y->id : "(none)", k, x->id ? x->id : "(none)");
            return -1;
        }
    }
    if (a->nev != b->nev) {
        snprintf(out, n, "%zu events instead of %zu", b->nev, a->nev);
        return -1;
    }
    return 0;
}

/* Do the ids of `x` repeat among themselves or with ids in `seen`? */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ---- Tidemark-format ids: <16 hex epoch>-<g|r<n>>-<seq> --------------------------------- */

typedef struct tmid {
    char epoch[17];
    char stream[32];
    unsigned long long seq;
} tmid;

static int parse_tmid(const char *s, tmid *t)
{
    if (!s || strlen(s) < 20)
        return -1;
    for (int i = 0; i < 16; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
            return -1;
    if (s[16] != '-')
        return -1;
    const char *st = s + 17, *dash = strchr(st, '-');
    if (!dash || dash == st || (size_t)(dash - st) >= sizeof t->stream)
        return -1;
    if (!(dash - st == 1 && st[0] == 'g')) {
        if (st[0] != 'r' || dash - st < 2)
            return -1;
        for (const char *c = st + 1; c < dash; c++)
            if (!isdigit((unsigned char)*c))
                return -1;
    }
    const char *q = dash + 1;
    if (!*q)
        return -1;
    for (const char *c = q; *c; c++)
        if (!isdigit((unsigned char)*c))
            return -1;
    memcpy(t->epoch, s, 16);
    t->epoch[16] = '\0';
    memcpy(t->stream, st, (size_t)(dash - st));
    t->stream[dash - st] = '\0';
    t->seq = strtoull(q, NULL, 10);
    return 0;
}

/* ---- the probe ---------------------------------------------------------------------------- */

typedef struct ctx {
    session A, B;
    int have_a, have_b;
    xfer *ref;          /* the reference call, read to completion (check 2) */
    long long ref_ms;   /* how long it took */
    size_t k;           /* events (with ids) read before a forced disconnect */
    xfer *c4;           /* the call cut after k events (check 4) */
    char *cursor4;      /* its k-th id */
    char *token4;
    xfer *r4, *r5;      /* resumes from cursor4 */
    int replay_ok;      /* r4 resumed (200 and events) */
    int call_failed;    /* the reference call answered an error */
    char *b_cursor;     /* a cursor of session B (check 7) */
} ctx;

static char *new_token(session *s)
{
    char t[64];
    snprintf(t, sizeof t, "tidemark-check-%c-%d", s->name, ++s->ncalls);
    return xstrdup(t);
}

/* tools/call of the probe tool; args NULL = the configured ones. */
static xfer *new_call(session *s, json_t *args, const char *token)
{
    json_t *params = json_object();
    json_object_set_new(params, "name", json_string(opt_tool));
    json_object_set(params, "arguments", args ? args : opt_args);
    json_t *meta = json_object();
    json_object_set_new(meta, "progressToken", json_string(token));
    json_object_set_new(params, "_meta", meta);
    xfer *x = post_msg(s, "tools/call", params, 0);
    json_decref(params);
    x->grace = grace_ms();
    return x;
}

/* GET with Last-Event-ID, watching for the response to `final_id` (may be NULL). */
static xfer *new_resume(session *s, const char *lei, json_t *final_id)
{
    xfer *x = xfer_new("GET", s, NULL, lei);
    if (final_id) {
        x->final_id = json_incref(final_id);
        x->grace = grace_ms();
    }
    return x;
}

/* Resume, retrying while the server still counts the dropped connection as
 * attached (409) or is not reachable yet, until the timeout. */
static xfer *resume_retry(session *s, const char *lei, json_t *final_id, long long quiet, int *n409)
{
    long long end = tm_now_ms() + opt_timeout_ms;
    int conflicts = 0;
    for (;;) {
        xfer *x = new_resume(s, lei, final_id);
        x->quiet = quiet;
        x->deadline = end;
        run1(x);
        int again = (x->status == 409 || (conn_failed(x) && !x->timed_out)) && tm_now_ms() + 100 < end;
        if (x->status == 409)
            conflicts++;
        if (!again) {
            if (n409)
                *n409 = conflicts;
            return x;
        }
        xfer_free(x);
        sleep_ms(100);
    }
}

static void status_text(const xfer *x, char *out, size_t n)
{
    if (conn_failed(x)) {
        snprintf(out, n, "no HTTP answer (%s)", conn_error(x));
        return;
    }
    json_t *e = error_body((xfer *)x);
    if (e) {
        char d[300];
        describe_error(e, d, sizeof d);
        snprintf(out, n, "HTTP %ld %s", x->status, d);
    } else {
        snprintf(out, n, "HTTP %ld %s", x->status, x->ctype[0] ? x->ctype : "(no content type)");
    }
}

/* ---- 1. initialize ---------------------------------------------------------------------- */

static int initialize(session *s, char *obs, size_t n)
{
    json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", PROTOCOL_VERSION,
                               "capabilities", "clientInfo", "name", "tidemark-check", "version",
                               TIDEMARK_VERSION);
    xfer *x = post_msg(s, "initialize", params, 0);
    json_decref(params);
    run1(x);
    int rc = -1;
    json_t *resp = xfer_response(x, x->final_id);
    json_t *result = json_object_get(resp, "result");
    if (conn_failed(x)) {
        snprintf(obs, n, "initialize: %s", conn_error(x));
    } else if (!json_is_object(result)) {
        char st[300];
        status_text(x, st, sizeof st);
        snprintf(obs, n, "initialize failed: %s", st);
    } else {
        const char *pv = json_string_value(json_object_get(result, "protocolVersion"));
        s->proto = xstrdup(pv ? pv : PROTOCOL_VERSION);
        s->sid = x->sid[0] ? xstrdup(x->sid) : NULL;
        json_t *si = json_object_get(result, "serverInfo");
        const char *name = json_string_value(json_object_get(si, "name"));
        const char *version = json_string_value(json_object_get(si, "version"));
        snprintf(obs, n, "server %s %s, protocol %s, session id %s", name ? name : "?",
                 version ? version : "?", s->proto, s->sid ? s->sid : "(none)");
        rc = 0;
    }
    xfer_free(x);
    if (rc == 0) {
        xfer *y = post_msg(s, "notifications/initialized", NULL, 1);
        run1(y);
        if (y->status != 202)
            appendf(obs, n, "; notifications/initialized got HTTP %ld (expected 202)", y->status);
        xfer_free(y);
    }
    return rc;
}

static void check_initialize(ctx *c)
{
    char obs[600];
    c->A.name = 'A';
    if (initialize(&c->A, obs, sizeof obs)) {
        set_check(C_INIT, R_FAIL, "%s", obs);
        return;
    }
    c->have_a = 1;
    if (!c->A.sid)
        set_check(C_INIT, R_WARN, "%s: no Mcp-Session-Id issued (stateless server)", obs);
    else
        set_check(C_INIT, R_PASS, "%s", obs);
}

/* ---- 2. priming event, and the reference call -------------------------------------------- */

static void check_priming(ctx *c)
{
    char *token = new_token(&c->A);
    xfer *x = new_call(&c->A, NULL, token);
    free(token);
    run1(x);
    c->ref = x;
    c->ref_ms = (x->got_final ? x->t_final : tm_now_ms()) - x->t_start;
    char st[400];
    status_text(x, st, sizeof st);
    if (conn_failed(x) || x->status != 200) {
        set_check(C_PRIMING, R_FAIL, "tools/call %s answered %s", opt_tool, st);
        return;
    }
    if (!x->is_sse) {
        set_check(C_PRIMING, R_FAIL,
                  "tools/call answered %s, not an SSE stream: nothing to resume", x->ctype);
        return;
    }
    if (!x->got_final) {
        set_check(C_PRIMING, R_FAIL, "no response to the call within %lld ms (%zu events)",
                  opt_timeout_ms, x->nev);
        return;
    }
    json_t *resp = xfer_response(x, x->final_id);
    json_t *err = json_object_get(resp, "error");
    json_t *result = json_object_get(resp, "result");
    if (json_is_object(err) || json_is_true(json_object_get(result, "isError"))) {
        char d[300];
        if (json_is_object(err))
            describe_error(err, d, sizeof d);
        else
            snprintf(d, sizeof d, "isError result");
        set_check(C_PRIMING, R_FAIL, "the call of %s failed (%s): choose a tool with --tool/--args", opt_tool,
                  d);
        c->call_failed = 1;
        return;
    }
    size_t progress = 0;
    for (size_t i = 0; i < x->nev; i++)
        if (ev_token(&x->ev[i]))
            progress++;
    char tail[200];
    snprintf(tail, sizeof tail, "; %zu events, %zu progress, %lld ms%s", x->nev, progress, c->ref_ms,
             x->ended ? "" : ", stream left open after the response");
    if (x->nids == 0) {
        set_check(C_PRIMING, R_FAIL, "no event carries an id: the stream cannot be resumed%s", tail);
        return;
    }
    const event *f = x->nev ? &x->ev[0] : NULL;
    int primed = f && f->id && (!f->data || !f->data[0]);
    char retry[64];
    if (x->retry_seen)
        snprintf(retry, sizeof retry, "retry: %ld%s", x->retry,
                 x->retry_before_first ? "" : " (after the first event)");
    else
        snprintf(retry, sizeof retry, "no retry: field");
    if (primed && x->retry_seen)
        set_check(C_PRIMING, R_PASS, "first event id %s, empty data; %s%s", f->id, retry, tail);
    else if (primed)
        set_check(C_PRIMING, R_WARN, "first event id %s, empty data; %s%s", f->id, retry, tail);
    else {
        char k[200];
        ev_key(f, k, sizeof k);
        set_check(C_PRIMING, R_WARN, "no priming event: first event is '%s' with %s; %s%s", k,
                  f->id ? "an id" : "no id", retry, tail);
    }
}

/* The reference call is usable for the replay checks. */
static int have_stream(const ctx *c)
{
    return c->ref && c->ref->is_sse && c->ref->got_final && c->ref->nids >= 2 && !c->call_failed;
}

static const char *no_stream_reason(const ctx *c)
{
    if (!c->have_a)
        return "no session";
    if (!c->ref || !c->ref->is_sse || !c->ref->got_final)
        return "the tool call gave no complete SSE stream (see priming_event)";
    if (c->call_failed)
        return "the tool call failed (see priming_event)";
    return "fewer than 2 events with ids in a call";
}

/* ---- 3. ids unique across concurrent streams ------------------------------------------------ */

static void check_unique(ctx *c)
{
    if (!have_stream(c)) {
        set_check(C_UNIQUE, R_NA, "%s", no_stream_reason(c));
        return;
    }
    enum { N = 3 };
    xfer *xs[N];
    char *tokens[N];
    for (int i = 0; i < N; i++) {
        tokens[i] = new_token(&c->A);
        xs[i] = new_call(&c->A, NULL, tokens[i]);
    }
    run_xfers(xs, N);
    char obs[700] = "";
    result_t r = R_PASS;
    size_t nid = c->ref->nids, total = 0;
    for (int i = 0; i < N; i++)
        nid += xs[i]->nids;
    char **ids = xmalloc(nid * sizeof *ids);
    size_t m = 0;
    for (size_t j = 0; j < c->ref->nev; j++)
        if (c->ref->ev[j].id)
            ids[m++] = c->ref->ev[j].id;
    for (int i = 0; i < N; i++) {
        xfer *x = xs[i];
        total += x->nev;
        if (x->status != 200 || !x->is_sse || !x->got_final) {
            char st[300];
            status_text(x, st, sizeof st);
            appendf(obs, sizeof obs, "call %d: %s, %s; ", i + 1, st,
                    x->got_final ? "completed" : "no response before the timeout");
            r = worse(r, R_FAIL);
        }
        const event *fe = foreign_token_event(x, tokens[i]);
        if (fe) {
            appendf(obs, sizeof obs, "call %d's stream carried another call's progress (token %s, id %s); ",
                    i + 1, ev_token(fe), fe->id ? fe->id : "(none)");
            r = worse(r, R_FAIL);
        }
        for (size_t j = 0; j < x->nev; j++)
            if (x->ev[j].id)
                ids[m++] = x->ev[j].id;
    }
    qsort(ids, m, sizeof *ids, cmp_str);
    size_t dups = 0;
    const char *first_dup = NULL;
    for (size_t j = 1; j < m; j++)
        if (!strcmp(ids[j], ids[j - 1])) {
            if (!dups)
                first_dup = ids[j];
            dups++;
        }
    if (dups) {
        appendf(obs, sizeof obs, "%zu repeated id(s) among %zu, e.g. %s; ", dups, m, first_dup);
        r = worse(r, R_FAIL);
    }
    if (r == R_PASS)
        set_check(C_UNIQUE, R_PASS, "%zu ids from 4 streams (3 concurrent, %zu events) all distinct", m,
                  total);
    else
        set_check(C_UNIQUE, r, "%.*s", (int)(strlen(obs) > 2 ? strlen(obs) - 2 : strlen(obs)), obs);
    free(ids);
    for (int i = 0; i < N; i++) {
        xfer_free(xs[i]);
        free(tokens[i]);
    }
}

/* ---- 4. replay after a forced disconnect ------------------------------------------------------ */

static void describe_ids_continuity(const char *cursor, const xfer *r, char *out, size_t n)
{
    tmid t0, t;
    out[0] = '\0';
    if (parse_tmid(cursor, &t0))
        return;
    unsigned long long want = t0.seq + 1;
    for (size_t i = 0; i < r->nev; i++) {
        if (!r->ev[i].id)
            continue;
        if (parse_tmid(r->ev[i].id, &t) || strcmp(t.stream, t0.stream) || t.seq != want) {
            snprintf(out, n, "; ids not dense after the cursor at %s", r->ev[i].id);
            return;
        }
        want++;
    }
    if (want > t0.seq + 1)
        snprintf(out, n, "; seqs %llu..%llu dense", t0.seq + 1, want - 1);
}

static void check_replay(ctx *c)
{
    if (!have_stream(c)) {
        set_check(C_REPLAY, R_NA, "%s", no_stream_reason(c));
        return;
    }
    c->k = c->ref->nids - 1 < 5 ? c->ref->nids - 1 : 5;
    c->token4 = new_token(&c->A);
    xfer *x = new_call(&c->A, NULL, c->token4);
    x->stop_after_ids = c->k;
    run1(x);
    c->c4 = x;
    long j4 = kth_id_index(x, c->k);
    if (j4 < 0) {
        char st[300];
        status_text(x, st, sizeof st);
        set_check(C_REPLAY, R_FAIL, "the call gave %zu ids before ending (%s); wanted %zu", x->nids,
                  st, c->k);
        return;
    }
    c->cursor4 = xstrdup(x->ev[j4].id);
    /* Resume at once, while the call still runs: the replay must hand over
     * to the live tail with no overlap and no gap. (replay_repeatable then
     * asks again once the call has finished.) */
    int n409 = 0;
    xfer *r = resume_retry(&c->A, c->cursor4, x->final_id, quiet_ms() + c->ref_ms, &n409);
    c->r4 = r;
    char conflict[80] = "";
    if (n409)
        snprintf(conflict, sizeof conflict, " (after %d x 409 while the old connection counted)", n409);
    if (r->status != 200 || !r->is_sse) {
        char st[300];
        status_text(r, st, sizeof st);
        set_check(C_REPLAY, R_FAIL, "cut after %zu event(s), resume from %s answered %s%s", c->k,
                  c->cursor4, st, conflict);
        return;
    }
    char obs[700] = "", diff[300];
    result_t res = R_PASS;
    long jr = kth_id_index(c->ref, c->k);
    if (compare_keys(c->ref, (size_t)jr + 1, r, 0, diff, sizeof diff)) {
        appendf(obs, sizeof obs, "replay differs from the uncut call: %s; ", diff);
        res = R_FAIL;
    }
    /* No id twice: within the replay, nor one already read before the cut. */
    for (size_t i = 0; i < r->nev && res != R_FAIL; i++) {
        if (!r->ev[i].id)
            continue;
        for (size_t p = 0; p <= (size_t)j4; p++)
            if (x->ev[p].id && !strcmp(x->ev[p].id, r->ev[i].id)) {
                appendf(obs, sizeof obs, "id %s delivered again; ", r->ev[i].id);
                res = R_FAIL;
                break;
            }
        for (size_t q = 0; q < i && res != R_FAIL; q++)
            if (r->ev[q].id && !strcmp(r->ev[q].id, r->ev[i].id)) {
                appendf(obs, sizeof obs, "id %s twice in the replay; ", r->ev[i].id);
                res = R_FAIL;
            }
    }
    const event *fe = foreign_token_event(r, c->token4);
    if (fe) {
        appendf(obs, sizeof obs, "replay carries another call's progress (token %s); ", ev_token(fe));
        res = R_FAIL;
    }
    size_t finals = count_responses(x, x->final_id) + count_responses(r, x->final_id);
    if (finals != 1) {
        appendf(obs, sizeof obs, "final response %zu times; ", finals);
        res = R_FAIL;
    }
    if (r->timed_out && !r->got_final) {
        appendf(obs, sizeof obs, "no final response within %lld ms; ", opt_timeout_ms);
        res = R_FAIL;
    }
    c->replay_ok = r->nev > 0;
    char cont[120];
    describe_ids_continuity(c->cursor4, r, cont, sizeof cont);
    if (res == R_PASS) {
        const char *end = r->ended ? "then the stream ended" : "but the stream stayed open after it";
        set_check(C_REPLAY, r->ended ? R_PASS : R_WARN,
                  "cut after %zu event(s), resumed at once from %s%s: exactly the %zu missing "
                  "event(s), final response once, %s%s",
                  c->k, c->cursor4, conflict, r->nev, end, cont);
    } else {
        set_check(C_REPLAY, res, "cut after %zu event(s), resumed at once from %s%s: %s", c->k, c->cursor4,
                  conflict, obs);
    }
}

/* ---- 5. replay is repeatable ----------------------------------------------------------------- */

static void check_repeat(ctx *c)
{
    if (!c->cursor4 || !c->r4 || c->r4->status != 200) {
        set_check(C_REPEAT, R_NA, "no successful replay to repeat (see replay_exact)");
        return;
    }
    /* By now the call has finished: this one is served from the log alone. */
    int n409 = 0;
    xfer *r = resume_retry(&c->A, c->cursor4, c->c4->final_id, quiet_ms() + c->ref_ms, &n409);
    c->r5 = r;
    char diff[300];
    if (r->status != 200 || !r->is_sse) {
        char st[300];
        status_text(r, st, sizeof st);
        set_check(C_REPEAT, R_FAIL, "second resume from %s answered %s", c->cursor4, st);
    } else if (same_events(c->r4, r, diff, sizeof diff)) {
        set_check(C_REPEAT, R_FAIL, "second resume from %s: %s", c->cursor4, diff);
    } else if (r->nev == 0) {
        set_check(C_REPEAT, R_WARN, "both resumes from %s returned no events", c->cursor4);
    } else {
        set_check(C_REPEAT, R_PASS,
                  "second resume from %s, after the call finished: the same %zu events (ids and "
                  "data)%s%s",
                  c->cursor4, r->nev, n409 ? " after a 409" : "",
                  r->ended ? "" : "; this replay's stream stayed open after the response");
    }
}

/* ---- 6. bad cursors ----------------------------------------------------------------------------- */

typedef enum { BC_TYPED, BC_SILENT, BC_LEAK, BC_UNTYPED } bc_t;

static result_t bc_result(bc_t b)
{
    return b == BC_TYPED ? R_PASS : b == BC_UNTYPED ? R_WARN : R_FAIL;
}

/* GET with a bad cursor; classify the answer. *out (if given) keeps the transfer. */
static bc_t probe_cursor(session *s, const char *cursor, char *obs, size_t n, xfer **out)
{
    xfer *x = new_resume(s, cursor, NULL);
    x->quiet = quiet_ms();
    run1(x);
    bc_t b;
    char st[300];
    status_text(x, st, sizeof st);
    if (conn_failed(x)) {
        snprintf(obs, n, "%s", st);
        b = BC_UNTYPED;
    } else if (x->status >= 400) {
        json_t *e = error_body(x);
        if (e && x->status < 500) {
            snprintf(obs, n, "typed error %s", st);
            b = BC_TYPED;
        } else {
            snprintf(obs, n, "untyped error %s", st);
            b = BC_UNTYPED;
        }
    } else if (!x->is_sse) {
        snprintf(obs, n, "HTTP %ld %s, not a stream", x->status, x->ctype);
        b = BC_UNTYPED;
    } else {
        size_t nd = count_data_events(x);
        const event *typed = NULL;
        for (size_t i = 0; i < x->nev && !typed; i++)
            if (x->ev[i].type && strcmp(x->ev[i].type, "message"))
                typed = &x->ev[i];
        if (typed) {
            snprintf(obs, n, "HTTP %ld, in-band 'event: %.40s' %.80s", x->status, typed->type,
                     typed->data ? typed->data : "");
            b = BC_TYPED;
        } else if (nd == 0) {
            snprintf(obs, n, "silent: HTTP %ld, %s", x->status,
                     x->ended ? (x->nev ? "only an empty priming event, then the stream ended"
                                        : "no events, the stream ended")
                              : "no events, the stream was held open");
            b = BC_SILENT;
        } else {
            const event *e = NULL;
            for (size_t i = 0; i < x->nev && !e; i++)
                if (x->ev[i].data && x->ev[i].data[0])
                    e = &x->ev[i];
            char k[200];
            ev_key(e, k, sizeof k);
            snprintf(obs, n, "HTTP %ld with %zu events, first id %s '%s'", x->status, nd,
                     e->id ? e->id : "(none)", k);
            b = BC_LEAK;
        }
    }
    if (out)
        *out = x;
    else
        xfer_free(x);
    return b;
}

/* The last component of an opaque id (after its last non-alphanumeric
 * character), as [*b, n). */
static size_t last_component(const char *id, size_t n)
{
    size_t b = n;
    while (b > 0 && isalnum((unsigned char)id[b - 1]))
        b--;
    return b;
}

static int all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return 0;
    return n > 0;
}

/* A plausible id this server never issued, derived from a real one. */
static char *mutate_unknown(const char *id, char **extra)
{
    tmid t;
    char buf[600];
    *extra = NULL;
    if (!parse_tmid(id, &t)) {
        snprintf(buf, sizeof buf, "%s-%s-%llu", t.epoch, t.stream, 9000000000000ULL + t.seq);
        char ep[17];
        do
            tm_random_hex(ep, 8);
        while (!strcmp(ep, t.epoch));
        char other[600];
        snprintf(other, sizeof other, "%s-%s-%llu", ep, t.stream, t.seq);
        *extra = xstrdup(other); /* another epoch: an id of a lost writer generation */
        return xstrdup(buf);
    }
    size_t n = strlen(id);
    if (n > 400)
        n = 400;
    size_t b = last_component(id, n);
    if (all_digits(id + b, n - b)) { /* a counter: make it huge */
        snprintf(buf, sizeof buf, "%.*s9876543210123", (int)b, id);
        return xstrdup(buf);
    }
    /* Opaque: keep the shape, replace the tail of the last component. */
    memcpy(buf, id, n);
    buf[n] = '\0';
    size_t tail = (n - b) / 2 < 8 ? (n - b + 1) / 2 : 8;
    if (!tail)
        tail = n / 2 < 8 ? n / 2 : 8;
    for (size_t i = n - tail; i < n; i++)
        buf[i] = isdigit((unsigned char)buf[i]) ? '7' : (isupper((unsigned char)buf[i]) ? 'Z' : 'z');
    if (!strcmp(buf, id))
        appendf(buf, sizeof buf, "zz");
    return xstrdup(buf);
}

/* An id from the future of a real one's stream, or NULL when ids are opaque:
 * a trailing counter (+1000), or else a component that looks like a
 * millisecond timestamp (10..16 digits: +1e6, about 17 minutes ahead). */
static char *mutate_future(const char *id, char *how, size_t hn)
{
    tmid t;
    char buf[600];
    if (!parse_tmid(id, &t)) {
        snprintf(buf, sizeof buf, "%s-%s-%llu", t.epoch, t.stream, t.seq + 1000);
        snprintf(how, hn, "seq + 1000");
        return xstrdup(buf);
    }
    size_t n = strlen(id);
    if (n > 400)
        return NULL;
    size_t b = last_component(id, n), e = n;
    unsigned long long add = 1000;
    if (!all_digits(id + b, e - b) || e - b > 18) {
        /* Search the components right to left for a timestamp. */
        size_t ce = n, found = 0;
        while (ce > 0) {
            size_t cb = last_component(id, ce);
            if (ce - cb >= 10 && ce - cb <= 16 && all_digits(id + cb, ce - cb)) {
                b = cb;
                e = ce;
                found = 1;
                break;
            }
            if (cb == 0)
                break;
            ce = cb - 1;
        }
        if (!found)
            return NULL;
        add = 1000000;
    }
    char num[20];
    memcpy(num, id + b, e - b);
    num[e - b] = '\0';
    unsigned long long v = strtoull(num, NULL, 10);
    snprintf(buf, sizeof buf, "%.*s%llu%s", (int)b, id, v + add, id + e);
    snprintf(how, hn, add == 1000 ? "trailing counter + 1000" : "timestamp field + 1e6");
    return xstrdup(buf);
}

static void check_unknown(ctx *c)
{
    if (!have_stream(c) || !c->cursor4) {
        set_check(C_UNKNOWN, R_NA, "%s",
                  have_stream(c) ? "no cursor (see replay_exact)" : no_stream_reason(c));
        return;
    }
    char *extra = NULL;
    char *mut = mutate_unknown(c->cursor4, &extra);
    char rnd[40] = "tidemark-check-";
    tm_random_hex(rnd + strlen(rnd), 8);
    const char *probes[3] = {mut, rnd, extra};
    const char *labels[3] = {"mutated", "random", "other epoch"};
    result_t r = R_NA;
    char obs[700] = "";
    for (int i = 0; i < 3; i++) {
        if (!probes[i])
            continue;
        char o[400];
        bc_t b = probe_cursor(&c->A, probes[i], o, sizeof o, NULL);
        r = worse(r, bc_result(b));
        appendf(obs, sizeof obs, "%s%s %s: %s", obs[0] ? "; " : "", labels[i], probes[i], o);
    }
    set_check(C_UNKNOWN, r, "%s", obs);
    free(mut);
    free(extra);
}

static void check_future(ctx *c)
{
    if (!have_stream(c) || !c->cursor4) {
        set_check(C_FUTURE, R_NA, "%s",
                  have_stream(c) ? "no cursor (see replay_exact)" : no_stream_reason(c));
        return;
    }
    /* From the end of the finished reference stream: nothing can be ahead of it. */
    const char *base = last_id(c->ref);
    char how[80];
    char *fut = mutate_future(base, how, sizeof how);
    if (!fut) {
        set_check(C_FUTURE, R_NA, "opaque ids (e.g. %s): no future id can be formed", base);
        return;
    }
    char o[500];
    bc_t b = probe_cursor(&c->A, fut, o, sizeof o, NULL);
    set_check(C_FUTURE, bc_result(b), "%s (%s of the last id): %s", fut, how, o);
    free(fut);
}

static void check_foreign(ctx *c)
{
    if (!have_stream(c)) {
        set_check(C_FOREIGN, R_NA, "%s", no_stream_reason(c));
        return;
    }
    if (!c->A.sid) {
        set_check(C_FOREIGN, R_NA, "the server issues no session ids");
        return;
    }
    char obs[600];
    c->B.name = 'B';
    if (initialize(&c->B, obs, sizeof obs) || !c->B.sid) {
        set_check(C_FOREIGN, R_FAIL, "a second session could not be created: %s", obs);
        return;
    }
    c->have_b = 1;
    /* A's cursor: the k-th id of A's first call (mid-stream). */
    long jr = kth_id_index(c->ref, c->k ? c->k : 1);
    const char *cursor = c->ref->ev[jr].id;
    char o1[400], o2[400];
    xfer *x1 = NULL, *x2 = NULL;
    bc_t b1 = probe_cursor(&c->B, cursor, o1, sizeof o1, &x1);
    /* Then B makes the same first call A made: a server whose ids name only a
     * position in a per-session stream now has that position in B too. */
    char *tok = new_token(&c->B);
    xfer *call = new_call(&c->B, NULL, tok);
    run1(call);
    if (call->nids)
        c->b_cursor = xstrdup(last_id(call) ? last_id(call) : "");
    bc_t b2 = probe_cursor(&c->B, cursor, o2, sizeof o2, &x2);
    const char *whose2 = "";
    if (b2 == BC_LEAK) {
        int a = 0, bb = 0;
        for (size_t i = 0; i < x2->nev; i++) {
            const char *t = ev_token(&x2->ev[i]);
            if (t && !strncmp(t, "tidemark-check-A-", 17))
                a++;
            else if (t && !strcmp(t, tok))
                bb++;
        }
        whose2 = a ? " - session A's events leaked into B"
                   : bb ? " - B's own stream replayed from the position A's cursor names: the id is "
                          "not bound to its session, B's earlier events are silently skipped"
                        : "";
    }
    const char *whose1 = "";
    if (b1 == BC_LEAK && x1) {
        for (size_t i = 0; i < x1->nev; i++) {
            const char *t = ev_token(&x1->ev[i]);
            if (t && !strncmp(t, "tidemark-check-A-", 17)) {
                whose1 = " - session A's events leaked into B";
                break;
            }
        }
    }
    char st[200] = "";
    if (!call->got_final)
        snprintf(st, sizeof st, " (B's call did not complete)");
    set_check(C_FOREIGN, worse(bc_result(b1), bc_result(b2)),
              "A's %s in fresh session B: %s%s; after B made the same call%s: %s%s", cursor, o1, whose1,
              st, o2, whose2);
    xfer_free(x1);
    xfer_free(x2);
    xfer_free(call);
    free(tok);
}

/* A copy of the tool arguments asking for many events fast, or NULL. */
static json_t *args_many(void)
{
    if (!json_is_integer(json_object_get(opt_args, "n")))
        return NULL;
    json_t *a = json_deep_copy(opt_args);
    json_object_set_new(a, "n", json_integer(200));
    /* Fast, but paced so that a live reader sees the first events before a
     * trimming server can drop them. */
    if (json_object_get(a, "delay_ms"))
        json_object_set_new(a, "delay_ms", json_integer(2));
    return a;
}

static void check_stale(ctx *c)
{
    if (!have_stream(c)) {
        set_check(C_STALE, R_NA, "%s", no_stream_reason(c));
        return;
    }
    json_t *args = args_many();
    if (!args) {
        set_check(C_STALE, R_NA, "cannot ask the tool for more events (its arguments have no integer n)");
        return;
    }
    char *tok = new_token(&c->A);
    xfer *x = new_call(&c->A, args, tok);
    json_decref(args);
    run1(x);
    if (!x->got_final || x->nids < 2) {
        char st[300];
        status_text(x, st, sizeof st);
        set_check(C_STALE, R_NA, "the 200-event call did not complete (%s, %zu ids)", st, x->nids);
        xfer_free(x);
        free(tok);
        return;
    }
    long j0 = kth_id_index(x, 1);
    const char *first = x->ev[j0].id;
    xfer *r = resume_retry(&c->A, first, x->final_id, quiet_ms(), NULL);
    char st[300];
    status_text(r, st, sizeof st);
    if (conn_failed(r) || r->status >= 400) {
        json_t *e = error_body(r);
        if (e && r->status < 500 && !conn_failed(r))
            set_check(C_STALE, R_PASS, "resume from the first id %s of a %zu-event stream: typed error %s",
                      first, x->nev, st);
        else
            set_check(C_STALE, R_WARN, "resume from the first id %s of a %zu-event stream: untyped %s",
                      first, x->nev, st);
    } else if (!r->is_sse) {
        set_check(C_STALE, R_WARN, "resume from %s answered %s, not a stream", first, st);
    } else {
        const event *typed = NULL;
        for (size_t i = 0; i < r->nev && !typed; i++)
            if (r->ev[i].type && strcmp(r->ev[i].type, "message"))
                typed = &r->ev[i];
        char diff[300];
        if (typed) {
            set_check(C_STALE, R_PASS, "resume from %s: in-band 'event: %.40s' %.100s, then %zu events",
                      first, typed->type, typed->data ? typed->data : "", r->nev - 1);
        } else if (!compare_keys(x, (size_t)j0 + 1, r, 0, diff, sizeof diff)) {
            const event *lg = NULL; /* the live stream itself reported a gap */
            for (size_t i = 0; i < x->nev && !lg; i++)
                if (x->ev[i].type && strcmp(x->ev[i].type, "message"))
                    lg = &x->ev[i];
            set_check(C_STALE, R_NA,
                      "not provoked: resume from the first id %s returned all %zu later "
                      "events%s%.40s%s%.100s",
                      first, r->nev, lg ? "; the live stream itself carried 'event: " : " (no trimming)",
                      lg ? lg->type : "", lg ? "' " : "", lg && lg->data ? lg->data : "");
        } else if (count_data_events(r) == 0) {
            set_check(C_STALE, R_FAIL, "resume from the first id %s: silent, HTTP 200 with no events (%s)",
                      first, r->ended ? "stream ended" : "held open");
        } else {
            set_check(C_STALE, R_FAIL,
                      "resume from the first id %s: HTTP 200 with %zu events, silently incomplete: %s",
                      first, r->nev, diff);
        }
    }
    xfer_free(r);
    xfer_free(x);
    free(tok);
}

/* ---- 7. 404 after DELETE ----------------------------------------------------------------------- */

static void check_delete(ctx *c)
{
    if (!c->have_b) {
        set_check(C_DELETE, R_NA, c->A.sid ? "no second session (see cursor_foreign)"
                                           : "the server issues no session ids");
        return;
    }
    xfer *d = xfer_new("DELETE", &c->B, NULL, NULL);
    run1(d);
    char st[300];
    status_text(d, st, sizeof st);
    if (d->status == 405) {
        set_check(C_DELETE, R_NA, "DELETE answered 405: the server does not let clients end sessions");
        xfer_free(d);
        return;
    }
    if (d->status < 200 || d->status >= 300) {
        set_check(C_DELETE, R_FAIL, "DELETE answered %s", st);
        xfer_free(d);
        return;
    }
    long dst = d->status;
    xfer_free(d);
    xfer *p = post_msg(&c->B, "ping", NULL, 0);
    run1(p);
    char pst[300];
    status_text(p, pst, sizeof pst);
    result_t r = p->status == 404 ? R_PASS : R_FAIL;
    char gst[300] = "";
    if (c->b_cursor && c->b_cursor[0]) {
        xfer *g = new_resume(&c->B, c->b_cursor, NULL);
        g->quiet = quiet_ms();
        run1(g);
        status_text(g, gst, sizeof gst);
        if (g->status != 404) {
            r = R_FAIL;
            if (g->status == 200 && g->is_sse)
                appendf(gst, sizeof gst, " with %zu events", g->nev);
        }
        xfer_free(g);
    }
    set_check(C_DELETE, r, "DELETE %ld; then POST ping: %s%s%s", dst, pst,
              gst[0] ? "; GET with a cursor of the deleted session: " : "", gst);
    xfer_free(p);
}

/* ---- 8. cursors across a restart ----------------------------------------------------------------- */

/* Run cmd with /bin/sh, its stdout sent to our stderr, bounded in time. */
static int run_restart_cmd(const char *cmd, long long timeout, char *obs, size_t n)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(obs, n, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(2, 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    long long end = tm_now_ms() + timeout;
    int st;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            snprintf(obs, n, "waitpid: %s", strerror(errno));
            return -1;
        }
        if (tm_now_ms() >= end) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            snprintf(obs, n, "--restart-cmd did not return within %lld ms", timeout);
            return -1;
        }
        sleep_ms(20);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(obs, n, "--restart-cmd failed (status %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return -1;
    }
    return 0;
}

typedef enum { RS_SAME, RS_TYPED, RS_DIFFERENT, RS_SILENT, RS_OTHER } rs_t;

/* Classify an answer after the restart against what was expected. */
static rs_t classify_after(xfer *after, xfer *baseline, const xfer *ref, size_t rfrom, const char *token,
                           char *o, size_t n)
{
    char st[300], diff[300];
    status_text(after, st, sizeof st);
    if (conn_failed(after)) {
        snprintf(o, n, "%s", st);
        return RS_OTHER;
    }
    if (after->status >= 400) {
        if (error_body(after) && after->status < 500) {
            snprintf(o, n, "typed error %s", st);
            return RS_TYPED;
        }
        snprintf(o, n, "untyped error %s", st);
        return RS_OTHER;
    }
    if (!after->is_sse) {
        snprintf(o, n, "%s, not a stream", st);
        return RS_OTHER;
    }
    if (baseline) {
        if (!same_events(baseline, after, diff, sizeof diff)) {
            snprintf(o, n, "the same %zu events as before the restart%s", after->nev,
                     after->ended == baseline->ended ? "" : " (stream end differs)");
            return RS_SAME;
        }
        if (count_data_events(after) == 0 && count_data_events(baseline) > 0) {
            snprintf(o, n, "silent: HTTP 200 with no events (before: %zu)", baseline->nev);
            return RS_SILENT;
        }
        snprintf(o, n, "HTTP 200, different events for the same cursor: %s", diff);
        return RS_DIFFERENT;
    }
    /* An in-flight call: the continuation must be the uncut call's rest. */
    if (count_data_events(after) == 0) {
        snprintf(o, n, "silent: HTTP 200 with no events (%s)", after->ended ? "ended" : "held open");
        return RS_SILENT;
    }
    const event *fe = foreign_token_event(after, token);
    if (fe) {
        snprintf(o, n, "HTTP 200 with another call's events (token %s)", ev_token(fe));
        return RS_DIFFERENT;
    }
    if (!compare_keys(ref, rfrom, after, 0, diff, sizeof diff)) {
        snprintf(o, n, "continued exactly: %zu events to the response", after->nev);
        return RS_SAME;
    }
    /* A typed error response in place of the result (e.g. outcome_unknown). */
    if (after->nev && is_response(after->ev[after->nev - 1].msg)) {
        json_t *err = json_object_get(after->ev[after->nev - 1].msg, "error");
        if (json_is_object(err) && json_object_get(json_object_get(err, "data"), "reason")) {
            xfer tmp = *after;
            tmp.nev--;
            char d2[300];
            if (!compare_keys(ref, rfrom, &tmp, 0, d2, sizeof d2) || tmp.nev == 0 ||
                strstr(d2, "missing") == d2) {
                char dd[200];
                describe_error(err, dd, sizeof dd);
                snprintf(o, n, "ended with a typed error response %s", dd);
                return RS_TYPED;
            }
        }
    }
    snprintf(o, n, "HTTP 200, events differ from the uncut call: %s", diff);
    return RS_DIFFERENT;
}

static void check_restart(ctx *c)
{
    if (!opt_restart_cmd) {
        set_check(C_RESTART, R_NA, "no --restart-cmd given");
        return;
    }
    if (!have_stream(c) || !c->r5 || c->r5->status != 200) {
        set_check(C_RESTART, R_NA, "no replayable cursors (see replay_exact)");
        return;
    }
    /* Cursors held across the restart, with what they gave before it:
     * (1) mid-stream of a finished call, (2) the end of a finished call,
     * (3) mid-stream of a call that may still run when the server goes. */
    const char *end_id = last_id(c->ref);
    xfer *base_end = resume_retry(&c->A, end_id, NULL, quiet_ms(), NULL);
    char *tok = new_token(&c->A);
    xfer *x = new_call(&c->A, NULL, tok);
    x->stop_after_ids = c->k;
    run1(x);
    long j = kth_id_index(x, c->k);
    char *cur3 = j >= 0 ? xstrdup(x->ev[j].id) : NULL;
    char o[600];
    if (run_restart_cmd(opt_restart_cmd, opt_timeout_ms * 3, o, sizeof o)) {
        set_check(C_RESTART, R_FAIL, "%s", o);
        goto out;
    }
    {
        xfer *a1 = resume_retry(&c->A, c->cursor4, c->c4->final_id, 0, NULL);
        xfer *a2 = resume_retry(&c->A, end_id, NULL, quiet_ms(), NULL);
        xfer *a3 = cur3 ? resume_retry(&c->A, cur3, x->final_id, 0, NULL) : NULL;
        char o1[400], o2[400], o3[400] = "";
        rs_t s1 = classify_after(a1, c->r5, NULL, 0, NULL, o1, sizeof o1);
        rs_t s2 = classify_after(a2, base_end, NULL, 0, NULL, o2, sizeof o2);
        rs_t s3 = RS_SAME;
        if (a3) {
            long jr = kth_id_index(c->ref, c->k);
            s3 = classify_after(a3, NULL, c->ref, (size_t)jr + 1, tok, o3, sizeof o3);
            if (s3 == RS_SAME && count_responses(x, x->final_id) + count_responses(a3, x->final_id) != 1) {
                s3 = RS_DIFFERENT;
                snprintf(o3, sizeof o3, "final response not exactly once");
            }
        }
        result_t r = R_PASS;
        rs_t all[3] = {s1, s2, s3};
        for (int i = 0; i < 3; i++)
            r = worse(r, all[i] == RS_DIFFERENT || all[i] == RS_SILENT ? R_FAIL
                         : all[i] == RS_OTHER                          ? R_WARN
                                                                       : R_PASS);
        set_check(C_RESTART, r,
                  "mid-stream %s: %s; end %s: %s; in-flight %s: %s", c->cursor4, o1, end_id, o2,
                  cur3 ? cur3 : "(none)", cur3 ? o3 : "the call gave too few ids");
        xfer_free(a1);
        xfer_free(a2);
        xfer_free(a3);
    }
out:
    xfer_free(base_end);
    xfer_free(x);
    free(cur3);
    free(tok);
}

/* ---- output ------------------------------------------------------------------------------------ */

static int report(void)
{
    int pass = 0, fail = 0, warn = 0, na = 0;
    for (int i = 0; i < NCHECKS; i++) {
        switch (checks[i].result) {
        case R_PASS: pass++; break;
        case R_FAIL: fail++; break;
        case R_WARN: warn++; break;
        case R_NA: na++; break;
        }
    }
    if (opt_json) {
        json_t *arr = json_array();
        for (int i = 0; i < NCHECKS; i++)
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "name", checks[i].name, "result",
                                                 RESULT_NAME[checks[i].result], "observation",
                                                 checks[i].obs));
        json_t *o = json_pack("{s:s, s:o, s:i, s:i, s:i, s:i}", "url", opt_url, "checks", arr,
                              "passed", pass, "failed", fail, "warnings", warn, "not_applicable", na);
        char *s = json_dumps(o, JSON_INDENT(2));
        if (s)
            puts(s);
        free(s);
        json_decref(o);
    } else {
        printf("tidemark-check %s (tool %s)\n\n", opt_url, opt_tool);
        printf("%-18s %-6s %s\n", "CHECK", "RESULT", "OBSERVATION");
        for (int i = 0; i < NCHECKS; i++)
            printf("%-18s %-6s %s\n", checks[i].name, RESULT_NAME[checks[i].result], checks[i].obs);
        printf("\n%d warning%s, %d not applicable\n", warn, warn == 1 ? "" : "s", na);
        printf("%d passed, %d failed\n", pass, fail);
    }
    fflush(stdout);
    return fail ? 1 : 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: tidemark-check [--json] [--tool NAME] [--args JSON] [--restart-cmd CMD]\n"
            "                      [--timeout-ms N] URL\n"
            "\n"
            "Probes a Streamable HTTP MCP server for safe stream resumption and prints a\n"
            "scorecard: initialize and session id; priming event and retry; ids unique\n"
            "across concurrent streams; replay after a forced disconnect (exactly the\n"
            "missing events, once); repeatable replay; answers to unknown, foreign-session,\n"
            "future and stale Last-Event-IDs; 404 after DELETE; with --restart-cmd,\n"
            "whether cursors survive a server restart safely.\n"
            "\n"
            "  --tool NAME         a tool that streams progress notifications (default stream)\n"
            "  --args JSON         its arguments (default {\"n\":20,\"delay_ms\":20}); an integer\n"
            "                      n lets the stale-cursor check ask for 200 events\n"
            "  --restart-cmd CMD   shell command that restarts the server and returns once it\n"
            "                      listens again on the same URL\n"
            "  --timeout-ms N      bound on every operation (default 10000)\n"
            "  --json              print the scorecard as JSON\n"
            "  --version           print the version and exit\n"
            "\n"
            "Exit status: 0 when no check failed, 1 otherwise, 2 usage.\n");
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"json", no_argument, NULL, 'j'},          {"tool", required_argument, NULL, 't'},
        {"args", required_argument, NULL, 'a'},    {"restart-cmd", required_argument, NULL, 'r'},
        {"timeout-ms", required_argument, NULL, 'T'}, {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *args_text = NULL;
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'j': opt_json = 1; break;
        case 't': opt_tool = optarg; break;
        case 'a': args_text = optarg; break;
        case 'r': opt_restart_cmd = optarg; break;
        case 'T': {
            char *end;
            long long v = strtoll(optarg, &end, 10);
            if (*end || v < 100 || v > 3600000) {
                fprintf(stderr, "tidemark-check: --timeout-ms must be 100..3600000\n");
                return 2;
            }
            opt_timeout_ms = v;
            break;
        }
        case 'h': usage(stdout); return 0;
        case 'V': printf("tidemark-check %s\n", tidemark_version(NULL)); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    opt_url = argv[optind];
    if (strncmp(opt_url, "http://", 7) && strncmp(opt_url, "https://", 8)) {
        fprintf(stderr, "tidemark-check: URL must be http:// or https://\n");
        return 2;
    }
    json_error_t jerr;
    opt_args = json_loads(args_text ? args_text : "{\"n\":20,\"delay_ms\":20}", 0, &jerr);
    if (!json_is_object(opt_args)) {
        fprintf(stderr, "tidemark-check: --args must be a JSON object%s%s\n",
                opt_args ? "" : ": ", opt_args ? "" : jerr.text);
        json_decref(opt_args);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        fprintf(stderr, "tidemark-check: curl_global_init failed\n");
        return 3;
    }

    ctx c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < NCHECKS; i++)
        snprintf(checks[i].obs, sizeof checks[i].obs, "not run");
    check_initialize(&c);
    if (c.have_a) {
        check_priming(&c);
        check_unique(&c);
        check_replay(&c);
        check_repeat(&c);
        check_unknown(&c);
        check_foreign(&c);
        check_future(&c);
        check_stale(&c);
        check_delete(&c);
        check_restart(&c);
        if (c.A.sid) { /* leave nothing behind */
            xfer *d = xfer_new("DELETE", &c.A, NULL, NULL);
            run1(d);
            xfer_free(d);
        }
    } else {
        for (int i = C_PRIMING; i < NCHECKS; i++)
            set_check(i, R_NA, "no session (initialize failed)");
    }
    int rc = report();

    xfer_free(c.ref);
    xfer_free(c.c4);
    xfer_free(c.r4);
    xfer_free(c.r5);
    free(c.cursor4);
    free(c.token4);
    free(c.b_cursor);
    free(c.A.sid);
    free(c.A.proto);
    free(c.B.sid);
    free(c.B.proto);
    json_decref(opt_args);
    curl_global_cleanup();
    return rc;
}
