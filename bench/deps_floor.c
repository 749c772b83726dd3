/*
 * tidemark-deps-floor - what tidemark's two request-path dependencies cost
 * for one echo call, with nothing of tidemark's between them, for
 * bench/instructions.sh. libmicrohttpd runs with the flags and the
 * per-connection memory pool tidemark-server gives it (epoll, an internal
 * polling thread pool, suspend/resume allowed, a pool of the default
 * max_header_bytes + TM_HTTP_POOL_RESERVE); every POST body is parsed by
 * jansson (json_loadb), the answer is built as jansson values and dumped
 * (json_dumps) into a JSON response:
 *   - a notification ("method" "notifications/...") -> 202, empty body;
 *   - anything else -> 200 application/json, a JSON-RPC result with the
 *     request's id whose one text content is the first string argument
 *     (params.arguments.text or .entry), as tidemark-rps checks it.
 * Every answer carries the same Mcp-Session-Id.
 *
 *   tidemark-deps-floor [--port N] [--threads N]     (0 / one per core)
 *
 * Prints "listening on http://127.0.0.1:PORT/mcp"; runs until killed.
 */
#include "../src/transport/http_server.h" /* the pool tidemark gives each connection */
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POOL_BYTES (TM_HTTP_MAX_HEADER_BYTES + TM_HTTP_POOL_RESERVE)
#define MAX_BODY (64 * 1024)

typedef struct body {
    size_t len;
    char buf[MAX_BODY];
} body;

/* The echo's answer to request req (jansson values, dumped). NULL: notification. */
static char *answer_of(json_t *req, int *status)
{
    const char *method = json_string_value(json_object_get(req, "method"));
    if (method && strncmp(method, "notifications/", 14) == 0) {
        *status = MHD_HTTP_ACCEPTED;
        return NULL;
    }
    json_t *args = json_object_get(json_object_get(req, "params"), "arguments");
    json_t *text = json_object_get(args, "text");
    if (!text)
        text = json_object_get(args, "entry");
    json_t *item = json_object(), *content = json_array(), *result = json_object(), *msg = json_object();
    json_object_set_new(item, "type", json_string("text"));
    json_object_set_new(item, "text", text ? json_incref(text) : json_string(""));
    json_array_append_new(content, item);
    json_object_set_new(result, "content", content);
    json_object_set_new(msg, "jsonrpc", json_string("2.0"));
    json_t *id = json_object_get(req, "id");
    json_object_set_new(msg, "id", id ? json_incref(id) : json_null());
    json_object_set_new(msg, "result", result);
    char *out = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    *status = MHD_HTTP_OK;
    return out;
}

static enum MHD_Result reply(struct MHD_Connection *c, int status, char *text)
{
    struct MHD_Response *r = text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE)
                                  : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Mcp-Session-Id", "floor");
    if (text)
        MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **state)
{
    (void)cls, (void)url, (void)method, (void)version;
    body *b = *state;
    if (!b) {
        if (!(b = malloc(sizeof *b)))
            return MHD_NO;
        b->len = 0;
        *state = b;
        return MHD_YES;
    }
    if (*data_size) {
        if (b->len + *data_size > MAX_BODY)
            return MHD_NO;
        memcpy(b->buf + b->len, data, *data_size);
        b->len += *data_size;
        *data_size = 0;
        return MHD_YES;
    }
    json_t *req = json_loadb(b->buf, b->len, 0, NULL);
    if (!req)
        return reply(c, MHD_HTTP_BAD_REQUEST, NULL);
    int status;
    char *text = answer_of(req, &status);
    json_decref(req);
    return reply(c, status, text);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode why)
{
    (void)cls, (void)c, (void)why;
    free(*state);
    *state = NULL;
}

int main(int argc, char **argv)
{
    unsigned port = 0, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0)
            port = (unsigned)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0)
            threads = (unsigned)atoi(argv[i + 1]);
    }
    if (!threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (unsigned)n : 1;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, (uint16_t)port, NULL, NULL,
        on_request, NULL, MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)POOL_BYTES, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "tidemark-deps-floor: libmicrohttpd did not start\n");
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("listening on http://127.0.0.1:%u/mcp\n", info ? (unsigned)info->port : port);
    fflush(stdout);
    for (;;)
        pause();
}
