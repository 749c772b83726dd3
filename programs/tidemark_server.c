/*
 * tidemark-server - the Tidemark MCP server with its demo tools
 * (programs/common/demo_tools.c): echo and stream.
 */
#include "common/demo_tools.h"
#include "common/server_cli.h"
#include <stdio.h>

int main(int argc, char **argv)
{
    server_cli cli;
    int rc = server_cli_parse(&cli, argc, argv, "tidemark-server",
                              "Tidemark MCP server (Streamable HTTP) with five demo tools: echo {text},\n"
                              "stream {n, delay_ms?, close_after?}, ledger_append {entry, delay_ms?},\n"
                              "ledger_read {entry?} and external_call {delay_ms}.");
    if (rc)
        return rc > 0 ? 0 : 2;
    tidemark_server_t *srv;
    if (tidemark_server_new(&cli.cfg, &srv) != 0)
        return 1;
    if (demo_tools_register(srv) != 0) {
        fprintf(stderr, "tidemark-server: cannot register tools\n");
        tidemark_server_free(srv);
        return 1;
    }
    rc = server_cli_run(srv, &cli);
    tidemark_server_free(srv);
    return rc;
}
