/* server_cli.h - command-line flags shared by the server programs. */
#ifndef TM_SERVER_CLI_H
#define TM_SERVER_CLI_H
#include "tidemark/server.h"

typedef struct server_cli {
    tidemark_server_config_t cfg;
    char host[256];
    char dir[1024];
    const char *origins[65];
    const char *hosts[65];
    const char *metrics[17];
    int norigins, nhosts, nmetrics;
    const char *log_level;
    int stdio;                /* --stdio: one client on stdin/stdout */
    /* authorization and TLS (--auth-*, --metrics-token-file, --tls-*) */
    const char *auth_rules[65];
    const char *auth_implies[65];
    char auth_rule_buf[64][512];
    int nauth_rules, nauth_implies;
    char auth_secret[4096];
    char metrics_token[4096];
} server_cli;

/* Parse argv into cli. Prints help / errors itself. Returns 0 to run,
 * 1 to exit successfully (--help), -1 on a usage error. */
int server_cli_parse(server_cli *cli, int argc, char **argv, const char *prog, const char *about);
/* Start srv, print the listening URL on stdout, wait for SIGINT/SIGTERM, stop. */
int server_cli_run(tidemark_server_t *srv, const server_cli *cli);
/* The same, with before_stop(ud) called once the signal came and before the
 * server stops (a program's own threads that use the server end there). */
int server_cli_run_hook(tidemark_server_t *srv, const server_cli *cli, void (*before_stop)(void *),
                        void *ud);

#endif
