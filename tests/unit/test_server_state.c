/* test_server_state.c - state belongs to the server, not the process: two
 * servers in one process are independent, and a freed server leaves
 * nothing behind for one made after it (even at the same address). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "server/tasks.h"
#include "tidemark/tidemark.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int tool_fn(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)call;
    (void)args;
    (void)ud;
    *result = json_object();
    return 0;
}

static tidemark_server_t *make(void)
{
    tidemark_server_config_t cfg;
    tidemark_server_config_init(&cfg);
    cfg.store = "memory:";
    tidemark_server_t *srv = NULL;
    assert_int_equal(tidemark_server_new(&cfg, &srv), 0);
    return srv;
}

static unsigned policy(tidemark_server_t *srv, const char *tool)
{
    unsigned task;
    int64_t ttl;
    assert_int_equal(tm_tasks_policy_of(srv, tool, &task, &ttl), 0);
    return task;
}

static void add_task_tool(tidemark_server_t *srv, const char *name)
{
    tidemark_tool_t t = {.name = name, .fn = tool_fn, .task = TIDEMARK_TASK_REQUIRED};
    assert_int_equal(tidemark_server_add_tool(srv, &t), 0);
}

static void test_two_servers_independent(void **state)
{
    (void)state;
    tidemark_server_t *a = make(), *b = make();
    add_task_tool(a, "slow");
    assert_int_equal(policy(a, "slow"), TIDEMARK_TASK_REQUIRED);
    assert_int_equal(policy(b, "slow"), TIDEMARK_TASK_NEVER);
    tidemark_server_free(a);
    assert_int_equal(policy(b, "slow"), TIDEMARK_TASK_NEVER);
    tidemark_server_free(b);
}

/* Made, freed, made again (malloc hands the same block back more often than
 * not): the new server has no policy of the old one's. */
static void test_free_leaves_nothing(void **state)
{
    (void)state;
    int same = 0;
    for (int i = 0; i < 20; i++) {
        tidemark_server_t *a = make();
        add_task_tool(a, "slow");
        void *was = a;
        tidemark_server_free(a);
        tidemark_server_t *c = make();
        same += (void *)c == was;
        assert_int_equal(policy(c, "slow"), TIDEMARK_TASK_NEVER);
        tidemark_server_free(c);
    }
    print_message("made at a freed server's address %d of 20 times\n", same);
}

/* One HTTP/1.1 exchange on a fresh connection (Connection: close): the
 * whole answer, headers and body, as text (malloc). */
static char *http(int port, const char *method, const char *path, const char *body)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[2048];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n"
                     "Accept: application/json, text/event-stream\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, port, body ? strlen(body) : 0, body ? body : "");
    assert_int_equal(write(fd, req, (size_t)n), n);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    ssize_t k;
    while ((k = read(fd, out + len, cap - len - 1)) > 0) {
        len += (size_t)k;
        if (len + 1 == cap)
            out = realloc(out, cap *= 2);
    }
    out[len] = '\0';
    close(fd);
    return out;
}

static tidemark_server_t *started(void)
{
    tidemark_server_config_t cfg;
    tidemark_server_config_init(&cfg);
    cfg.store = "memory:";
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    tidemark_server_t *srv = NULL;
    assert_int_equal(tidemark_server_new(&cfg, &srv), 0);
    assert_int_equal(tidemark_server_start(srv), 0);
    return srv;
}

static int has(tidemark_server_t *srv, const char *line)
{
    char *m = http(tidemark_server_port(srv), "GET", "/metrics", NULL);
    int yes = strstr(m, line) != NULL;
    if (!yes && strstr(m, "200 OK") == NULL)
        print_message("GET /metrics: %.200s\n", m);
    free(m);
    return yes;
}

/* has() once the server has also seen the earlier GETs' connections close
 * (it learns of a close after the client moved on): up to 5 s. */
static int has_soon(tidemark_server_t *srv, const char *line)
{
    struct timespec t0, now, nap = {0, 10 * 1000000L};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (has(srv, line))
            return 1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= 5)
            return 0;
        nanosleep(&nap, NULL);
    }
}

#define INIT "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":" \
             "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}," \
             "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"

/* Each server counts on its own registry: a session opened on one is not
 * on the other's /metrics, nor on that of a server made after it is freed. */
static void test_metrics_per_server(void **state)
{
    (void)state;
    tidemark_server_t *a = started(), *b = started();
    char *r = http(tidemark_server_port(a), "POST", "/mcp", INIT);
    assert_non_null(strstr(r, "Mcp-Session-Id"));
    free(r);
    assert_true(has(a, "\ntidemark_sessions_open 1\n"));
    assert_true(has(a, "mcp_server_operation_duration_seconds_count{mcp_method_name=\"initialize\""));
    assert_true(has(b, "\ntidemark_sessions_open 0\n"));
    assert_false(has(b, "mcp_method_name=\"initialize\""));
    tidemark_server_free(a);
    tidemark_server_t *c = started();
    assert_true(has(c, "\ntidemark_sessions_open 0\n"));
    assert_false(has(c, "mcp_method_name=\"initialize\""));
    assert_true(has_soon(c, "\ntidemark_connections_open 1\n")); /* its own GET only */
    tidemark_server_free(c);
    tidemark_server_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_per_server),
        cmocka_unit_test(test_two_servers_independent),
        cmocka_unit_test(test_free_leaves_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
