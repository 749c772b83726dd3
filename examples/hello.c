/*
 * hello.c - the smallest Tidemark server: one tool that reports progress
 * and says hello, on a SQLite store, until SIGINT or SIGTERM.
 *
 *   cc hello.c $(pkg-config --cflags --libs tidemark) -o hello
 *   ./hello [PORT] [STORE]     (defaults: 8080, sqlite:./var/hello.db)
 *
 * Port 0 picks a free one; the library logs "listening on http://HOST:PORT/mcp"
 * on stderr once it serves.
 */
#include <tidemark/server.h>
#include <stdio.h>
#include <stdlib.h>

static int hello(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)ud;
    const char *name = json_string_value(json_object_get(args, "name"));
    char text[256];
    snprintf(text, sizeof text, "hello, %s", name ? name : "world");
    int rc = tidemark_call_progress(call, 1, 1, "working");
    if (rc)
        return rc;
    *result = tidemark_result_text(text);
    return *result ? 0 : TIDEMARK_ENOMEM;
}

int main(int argc, char **argv)
{
    tidemark_server_config_t cfg;
    tidemark_server_config_init(&cfg);
    cfg.port = argc > 1 ? (unsigned)atoi(argv[1]) : 8080;
    cfg.store = argc > 2 ? argv[2] : "sqlite:./var/hello.db";
    tidemark_server_t *srv;
    int rc = tidemark_server_new(&cfg, &srv);
    if (rc) {
        fprintf(stderr, "hello: %s\n", tidemark_strerror(rc));
        return 1;
    }
    tidemark_tool_t t = {.name = "hello", .description = "Says hello.", .fn = hello,
                         .input_schema = "{\"type\":\"object\",\"properties\":"
                                         "{\"name\":{\"type\":\"string\"}}}"};
    if ((rc = tidemark_server_add_tool(srv, &t)) == 0)
        rc = tidemark_server_run(srv); /* serves until SIGINT or SIGTERM */
    if (rc)
        fprintf(stderr, "hello: %s\n", tidemark_strerror(rc));
    tidemark_server_free(srv);
    return rc ? 1 : 0;
}
