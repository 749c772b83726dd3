/*
 * tidemark-gateway - a stdio MCP server behind Tidemark's Streamable HTTP:
 * its answers, progress and log messages are committed to Tidemark's store
 * before they are emitted, so clients resume with Last-Event-ID and calls
 * keep Tidemark's exactly-once rules, in both protocol eras
 * (src/gateway/gateway.h). Every flag of tidemark-server applies too.
 */
#include "common/server_cli.h"
#include "gateway/gateway.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wordexp.h>

#define PROG "tidemark-gateway"
#define MAX_SAFE 64

static const char about[] =
    "Puts a stdio MCP server behind durable, resumable Streamable HTTP.\n"
    "\n"
    "Gateway flags:\n"
    "  --stdio \"CMD ARGS...\"   the stdio server to run (split like a shell would,\n"
    "                         without expansion of commands); or\n"
    "  --upstream URL         a Streamable HTTP MCP server: its streams are resumed\n"
    "                         with Last-Event-ID, and one it cannot prove continuous\n"
    "                         is a typed error to the client, never a silent resume\n"
    "  --safe-tool NAME       a tool whose call may be sent twice: again to a\n"
    "                         restarted child, and re-run after the gateway's own\n"
    "                         crash (repeatable). Other calls cut by a child's death\n"
    "                         end -32010 outcome_unknown\n"
    "  --trust-annotations    tools the child annotates readOnlyHint or\n"
    "                         idempotentHint count as safe too (annotations are\n"
    "                         untrusted by default)\n"
    "  --max-children N       stdio children at once: one per 2025 session, one per\n"
    "                         set of client capabilities for 2026-07-28 requests,\n"
    "                         and the catalog (default 64)\n"
    "  --child-idle-ms MS     a child without calls this long is stopped; the next\n"
    "                         call starts a new one with the same params (300000)\n"
    "  --call-timeout-ms MS   a call's longest wait for its child (600000)";

typedef struct gw_opts {
    const char *cmd, *url;
    const char *safe[MAX_SAFE + 1];
    int nsafe, trust;
    long max_children, idle_ms, call_timeout_ms;
} gw_opts;

static int number(const char *flag, const char *v, long *out)
{
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || n <= 0 || n > 86400000) {
        fprintf(stderr, PROG ": %s needs a positive number\n", flag);
        return -1;
    }
    *out = n;
    return 0;
}

/* One gateway flag at argv[*i] (its value taken); 1 when it was none. */
static int gateway_flag(gw_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--trust-annotations")) {
        o->trust = 1;
        return 0;
    }
    if (strcmp(a, "--stdio") && strcmp(a, "--upstream") && strcmp(a, "--safe-tool") && strcmp(a, "--max-children") &&
        strcmp(a, "--child-idle-ms") && strcmp(a, "--call-timeout-ms"))
        return 1;
    if (!v) {
        fprintf(stderr, PROG ": %s needs a value\n", a);
        return -1;
    }
    (*i)++;
    if (!strcmp(a, "--stdio"))
        o->cmd = v;
    else if (!strcmp(a, "--upstream"))
        o->url = v;
    else if (!strcmp(a, "--safe-tool") && o->nsafe < MAX_SAFE)
        o->safe[o->nsafe++] = v;
    else if (!strcmp(a, "--safe-tool"))
        return fprintf(stderr, PROG ": at most %d --safe-tool\n", MAX_SAFE), -1;
    else if (!strcmp(a, "--max-children"))
        return number(a, v, &o->max_children);
    else if (!strcmp(a, "--child-idle-ms"))
        return number(a, v, &o->idle_ms);
    else
        return number(a, v, &o->call_timeout_ms);
    return 0;
}

/* The gateway's flags out of argv (the rest stay for server_cli_parse,
 * in place, *argc updated). -1 on a usage error. */
static int take_flags(gw_opts *o, int *argc, char **argv)
{
    int n = 1;
    for (int i = 1; i < *argc; i++) {
        int rc = gateway_flag(o, *argc, argv, &i);
        if (rc < 0)
            return -1;
        if (rc == 1)
            argv[n++] = argv[i];
    }
    argv[n] = NULL;
    *argc = n;
    return 0;
}

static void quiesce(void *gw)
{
    tm_gateway_quiesce(gw);
}

static int run(server_cli *cli, const gw_opts *o, char **child_argv)
{
    tidemark_server_t *srv;
    if (tidemark_server_new(&cli->cfg, &srv) != 0)
        return 1;
    tm_gateway_config gc = {.argv = (const char *const *)child_argv, .url = o->url,
                            .safe_tools = o->safe,
                            .trust_annotations = o->trust, .max_children = (unsigned)o->max_children,
                            .idle_ms = (int)o->idle_ms, .call_timeout_ms = (int)o->call_timeout_ms};
    tm_gateway *gw = NULL;
    int rc = tm_gateway_new(srv, &gc, &gw);
    if (rc) {
        fprintf(stderr, PROG ": the %s \"%s\" could not be started and listed: %s\n",
                o->url ? "upstream" : "stdio server", o->url ? o->url : o->cmd, tidemark_strerror(rc));
        tidemark_server_free(srv);
        return 1;
    }
    /* The gateway's thread ends before the server stops; the children after. */
    rc = server_cli_run_hook(srv, cli, quiesce, gw);
    tm_gateway_free(gw);
    tidemark_server_free(srv);
    return rc;
}

int main(int argc, char **argv)
{
    gw_opts o = {0};
    if (take_flags(&o, &argc, argv) != 0)
        return 2;
    server_cli cli;
    int rc = server_cli_parse(&cli, argc, argv, PROG, about);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (!o.cmd == !o.url || cli.stdio) {
        fprintf(stderr, PROG ": %s\n", cli.stdio ? "--stdio takes the child's command here"
                                                 : "one of --stdio \"CMD ARGS...\" and --upstream URL");
        return 2;
    }
    if (o.url)
        return run(&cli, &o, NULL);
    wordexp_t we;
    if (wordexp(o.cmd, &we, WRDE_NOCMD | WRDE_UNDEF) != 0 || we.we_wordc == 0) {
        fprintf(stderr, PROG ": --stdio \"%s\" is not a command\n", o.cmd);
        return 2;
    }
    rc = run(&cli, &o, we.we_wordv);
    wordfree(&we);
    return rc;
}
