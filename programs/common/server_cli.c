/* server_cli.c - flags and run loop shared by tidemark-server and
 * tidemark-everything. */
#include "server_cli.h"
#include "help.h"
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/stat.h>

/* The library's defaults, as --help shows them (help.h). */
static const help_default server_defaults[] = {TIDEMARK_SERVER_DEFAULTS(HELP_DEFAULT)};

static void usage(FILE *f, const char *prog, const char *about)
{
    fprintf(f, "Usage: %s [options]\n%s\n\n", prog, about);
    help_print(f,
            "Options:\n"
            "  --listen HOST:PORT     address to bind (default {host}:8080; port 0 picks one)\n"
            "  --path PATH            MCP endpoint path (default {path})\n"
            "  --store URI            event log: sqlite:PATH (default sqlite:./var/tidemark.db)\n"
            "                         redis://HOST:PORT[/DB] (shared by several nodes),\n"
            "                         postgresql://... (a libpq URI: shared by several nodes,\n"
            "                         the store itself replicated), or memory (nothing\n"
            "                         survives a restart)\n"
            "  --durability LEVEL     power (fsync every commit, default), process, or\n"
            "                         replicated (PostgreSQL: refuse writes unless the\n"
            "                         primary has a synchronous standby)\n"
            "  --store-timeout-ms MS  PostgreSQL: a commit not confirmed within MS fails as\n"
            "                         not acknowledged, 503 (default {store_timeout_ms})\n"
            "  --emit MODE            durable (commit, then emit; default) or early\n"
            "                         (emit first, announce the durable head)\n"
            "  --retain-events N      keep at most N events per stream (default: all)\n"
            "  --retain-seconds S     keep events at most S seconds (default: forever)\n"
            "  --session-ttl-seconds S  expire sessions idle S seconds (default {session_ttl_seconds};\n"
            "                         0 = never)\n"
            "  --on-gap error|event   stale cursor: 400 resumption_gap (default) or an\n"
            "                         'event: gap' followed by the retained events\n"
            "  --retry-ms MS          SSE retry advertised to clients (default {retry_ms}; 0 = none)\n"
            "  --keepalive-ms MS      SSE keep-alive comment interval (default {keepalive_ms})\n"
            "  --max-body BYTES       request body limit (default {max_body})\n"
            "  --workers N            handler threads, started as needed (default {workers})\n"
            "Limits (what happens at each: docs/guarantees.md):\n"
            "  --max-connections N    open connections in all (default {max_connections})\n"
            "  --max-connections-per-address N  from one address (default {max_connections_per_address})\n"
            "  --request-deadline-ms MS  a request's header and body must arrive within\n"
            "                         this, else the connection is cut (default {request_deadline_ms})\n"
            "  --idle-timeout-ms MS   close connections idle this long (default {idle_timeout_ms})\n"
            "  --max-calls-per-session N  handlers running at once per session (default {max_calls_per_session})\n"
            "  --max-calls-per-address N  ... per client address (default {max_calls_per_address})\n"
            "  --max-queued-per-session N  calls waiting per session before 429 (default {max_queued_per_session})\n"
            "  --max-batch N          messages in one JSON-RPC batch (default {max_batch})\n"
            "  --max-subscriptions N  resource subscriptions per session (default {max_subscriptions})\n"
            "  --max-sessions N       sessions in the store at once, in all; past it 503\n"
            "                         (default {max_sessions}; 0 = no limit)\n"
            "  --max-sessions-per-address N  ... made from one client address; past it 429\n"
            "                         (default {max_sessions_per_address}; 0 = no limit)\n"
            "  --max-uri-length N     longest resource uri (default {max_uri_length}, at most 8192)\n"
            "  --max-header-bytes N   request line and headers (default {max_header_bytes}, at most 65536;\n"
            "                         each connection's buffer is this + 2 KiB)\n"
            "2026-07-28 requests:\n"
            "  --request-state-ttl-ms MS  a sealed requestState opens this long (default\n"
            "                         {request_state_ttl_ms})\n"
            "  --cache-ttl-ms MS      ttlMs of lists, reads and discover (default 0)\n"
            "  --allow-origin ORIGIN  allow this Origin (repeatable; '*' allows any;\n"
            "                         default: http(s) origins on localhost/127.0.0.1/[::1])\n"
            "  --allow-host HOST      allow this Host header (repeatable; '*' allows any;\n"
            "                         default: localhost, 127.0.0.1, [::1])\n"
            "  --accept-loss          start on a SQLite database that holds fewer commits than\n"
            "                         its head file recorded (default: refuse to start)\n"
            "  --metrics-address ADDR GET /metrics from this client address skips the\n"
            "                         Host check (a scrape host; repeatable)\n"
            "  --log-level LEVEL      error|warn|info|debug (default info)\n"
            "  --log-format FORMAT    text (default) or json (one object per line,\n"
            "                         ISO-8601 timestamps)\n"
            "Authorization (an OAuth 2.1 resource server; docs/protocol.md, Authorization):\n"
            "  --auth-resource URL    this server's resource identifier (the tokens' aud);\n"
            "                         turns authorization on\n"
            "  --auth-issuer URL      the authorization server (the tokens' exact iss)\n"
            "  --auth-jwks-uri URL    JWT access tokens, verified with this key set, or\n"
            "  --auth-introspection-uri URL  opaque tokens, asked about (RFC 7662) with\n"
            "  --auth-client-id ID --auth-client-secret-file FILE  this server's client\n"
            "  --auth-ca-file PEM     CAs for an https issuer (default: the system's)\n"
            "  --auth-scope TOOL=SCOPES  scopes a tools/call of TOOL needs (repeatable;\n"
            "                         TOOL '*' = every other tool; method:NAME=SCOPES for\n"
            "                         a method)\n"
            "  --auth-scope-base SCOPES  needed by every request\n"
            "  --auth-scope-implies BROAD=NARROW...  scope hierarchy (repeatable)\n"
            "  --auth-scopes-supported SCOPES  listed in the resource metadata\n"
            "  --auth-leeway-s S      exp/nbf leeway (default {auth_leeway_s}; 0 = none)\n"
            "  --auth-jwks-min-refresh-ms MS  between two key set fetches (default {auth_jwks_min_refresh_ms})\n"
            "  --metrics-token-file FILE  GET /metrics needs Authorization: Bearer <the\n"
            "                         file's token> (a --metrics-address needs none)\n"
            "TLS:\n"
            "  --tls-cert PEM --tls-key PEM  serve HTTPS with this certificate and key\n"
            "  --tls-client-ca PEM    require client certificates this CA signed\n"
            "  --version              print the version and exit\n"
            "  --stdio                serve one client on stdin/stdout (the MCP stdio\n"
            "                         transport; logs on stderr) instead of HTTP\n"
            "  --help                 show this help\n",
            server_defaults, sizeof server_defaults / sizeof server_defaults[0]);
}

static int parse_u64(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || end == s || s[0] == '-' || v > max)
        return -1;
    *out = v;
    return 0;
}

/* The numeric limits: long options from 256 up, in this order. */
typedef struct limit_opt {
    const char *name;
    size_t off;  /* of the field in tidemark_server_config_t */
    size_t size; /* 4: unsigned; 8: int64_t or size_t (values below INT64_MAX) */
    unsigned long long min, max;
} limit_opt;

#define LIMIT(n, f, lo, hi) \
    {n, offsetof(tidemark_server_config_t, f), sizeof(((tidemark_server_config_t *)0)->f), lo, hi}
static const limit_opt limits[] = {
    LIMIT("max-connections", max_connections, 1, 1000000),
    LIMIT("max-connections-per-address", max_connections_per_address, 1, 1000000),
    LIMIT("request-deadline-ms", request_deadline_ms, 100, 3600000),
    LIMIT("idle-timeout-ms", idle_timeout_ms, 100, 86400000),
    LIMIT("max-calls-per-session", max_calls_per_session, 1, 100000),
    LIMIT("max-calls-per-address", max_calls_per_address, 1, 100000),
    LIMIT("max-queued-per-session", max_queued_per_session, 1, 1000000),
    LIMIT("max-batch", max_batch, 1, 100000),
    LIMIT("max-subscriptions", max_subscriptions, 1, 1000000),
    LIMIT("max-sessions", max_sessions, 0, 100000000), /* 0: no limit */
    LIMIT("max-sessions-per-address", max_sessions_per_address, 0, 100000000),
    LIMIT("max-uri-length", max_uri_length, 16, 8192),
    LIMIT("request-state-ttl-ms", request_state_ttl_ms, 1, 86400000),
    LIMIT("cache-ttl-ms", cache_ttl_ms, 0, 86400000),
    LIMIT("max-header-bytes", max_header_bytes, 1024, 65536),
};
#define NLIMITS (sizeof limits / sizeof limits[0])
#define LIMIT_BASE 256

static int set_limit(server_cli *cli, int c, const char *arg)
{
    const limit_opt *l = &limits[c - LIMIT_BASE];
    unsigned long long v;
    if (parse_u64(arg, l->max, &v) || v < l->min)
        return -1;
    char *field = (char *)&cli->cfg + l->off;
    if (l->size == sizeof(unsigned)) {
        unsigned u = (unsigned)v;
        memcpy(field, &u, sizeof u);
    } else {
        int64_t i = (int64_t)v; /* the same bytes as a size_t of that value */
        memcpy(field, &i, sizeof i);
    }
    return 0;
}

/* A secret from a file: its first line, without the line end (at most
 * size - 1 bytes, never empty). */
static int read_secret(const char *path, char *out, size_t size, const char *prog)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: cannot read %s: %s\n", prog, path, strerror(errno));
        return -1;
    }
    size_t n = fread(out, 1, size - 1, f);
    int more = fgetc(f) != EOF;
    fclose(f);
    out[n] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
    if (!out[0] || (more && strlen(out) == n)) {
        fprintf(stderr, "%s: %s: empty or too long\n", prog, path);
        return -1;
    }
    return 0;
}

/* --auth-*, --metrics-token-file, --tls-*. */
static int auth_opt(server_cli *cli, int c, const char *arg, const char *prog)
{
    tidemark_server_config_t *g = &cli->cfg;
    unsigned long long v;
    switch (c) {
    case 2000: g->auth_resource = arg; return 0;
    case 2001: g->auth_issuer = arg; return 0;
    case 2002: g->auth_jwks_uri = arg; return 0;
    case 2003: g->auth_introspection_uri = arg; return 0;
    case 2004: g->auth_client_id = arg; return 0;
    case 2005:
        if (read_secret(arg, cli->auth_secret, sizeof cli->auth_secret, prog)) return -1;
        g->auth_client_secret = cli->auth_secret;
        return 0;
    case 2006: g->auth_ca_file = arg; return 0;
    case 2007: { /* TOOL=SCOPES is tool:TOOL=SCOPES; tool:... and method:... as given */
        int n = cli->nauth_rules;
        if (n == 64 || !strchr(arg, '=')) return -1;
        int prefixed = strncmp(arg, "tool:", 5) == 0 || strncmp(arg, "method:", 7) == 0;
        if (snprintf(cli->auth_rule_buf[n], sizeof cli->auth_rule_buf[n], "%s%s",
                     prefixed ? "" : "tool:", arg) >= (int)sizeof cli->auth_rule_buf[n])
            return -1;
        cli->auth_rules[cli->nauth_rules++] = cli->auth_rule_buf[n];
        g->auth_scope_rules = cli->auth_rules;
        return 0;
    }
    case 2008: g->auth_scope_base = arg; return 0;
    case 2009:
        if (cli->nauth_implies == 64) return -1;
        cli->auth_implies[cli->nauth_implies++] = arg;
        g->auth_scope_implies = cli->auth_implies;
        return 0;
    case 2010: g->auth_scopes_supported = arg; return 0;
    case 2011:
        if (parse_u64(arg, 3600, &v)) return -1;
        g->auth_leeway_s = v ? (unsigned)v : UINT32_MAX; /* 0: none */
        return 0;
    case 2012:
        if (parse_u64(arg, 3600000, &v) || v == 0) return -1;
        g->auth_jwks_min_refresh_ms = (unsigned)v;
        return 0;
    case 2013:
        if (read_secret(arg, cli->metrics_token, sizeof cli->metrics_token, prog)) return -1;
        g->metrics_token = cli->metrics_token;
        return 0;
    case 2014: g->tls_cert_file = arg; return 0;
    case 2015: g->tls_key_file = arg; return 0;
    case 2016: g->tls_client_ca_file = arg; return 0;
    }
    return -1;
}

int server_cli_parse(server_cli *cli, int argc, char **argv, const char *prog, const char *about)
{
    memset(cli, 0, sizeof *cli);
    tidemark_server_config_init(&cli->cfg);
    cli->cfg.port = 8080;
    cli->cfg.store = "sqlite:./var/tidemark.db";
    cli->log_level = "info";
    static const struct option base[] = {
        {"listen", required_argument, 0, 'l'},      {"path", required_argument, 0, 'p'},
        {"store", required_argument, 0, 's'},       {"retain-events", required_argument, 0, 'R'},
        {"on-gap", required_argument, 0, 'g'},      {"retry-ms", required_argument, 0, 'r'},
        {"keepalive-ms", required_argument, 0, 'k'}, {"max-body", required_argument, 0, 'b'},
        {"workers", required_argument, 0, 'w'},     {"allow-origin", required_argument, 0, 'o'},
        {"allow-host", required_argument, 0, 'H'},  {"log-level", required_argument, 0, 'L'},
        {"durability", required_argument, 0, 'D'}, {"emit", required_argument, 0, 'E'},
        {"retain-seconds", required_argument, 0, 'S'}, {"session-ttl-seconds", required_argument, 0, 'T'},
        {"session-ttl", required_argument, 0, 'T'}, /* the old spelling, kept working */
        {"accept-loss", no_argument, 0, 'A'},
        {"store-timeout-ms", required_argument, 0, 1001},
        {"metrics-address", required_argument, 0, 'M'}, {"log-format", required_argument, 0, 'F'},
        {"version", no_argument, 0, 'V'},
        {"stdio", no_argument, 0, 1000},
        {"auth-resource", required_argument, 0, 2000}, {"auth-issuer", required_argument, 0, 2001},
        {"auth-jwks-uri", required_argument, 0, 2002},
        {"auth-introspection-uri", required_argument, 0, 2003},
        {"auth-client-id", required_argument, 0, 2004},
        {"auth-client-secret-file", required_argument, 0, 2005},
        {"auth-ca-file", required_argument, 0, 2006}, {"auth-scope", required_argument, 0, 2007},
        {"auth-scope-base", required_argument, 0, 2008},
        {"auth-scope-implies", required_argument, 0, 2009},
        {"auth-scopes-supported", required_argument, 0, 2010},
        {"auth-leeway-s", required_argument, 0, 2011},
        {"auth-jwks-min-refresh-ms", required_argument, 0, 2012},
        {"metrics-token-file", required_argument, 0, 2013},
        {"tls-cert", required_argument, 0, 2014}, {"tls-key", required_argument, 0, 2015},
        {"tls-client-ca", required_argument, 0, 2016},
        {"help", no_argument, 0, 'h'},              {0, 0, 0, 0}};
    enum { NBASE = sizeof base / sizeof base[0] - 1 };
    struct option opts[NBASE + NLIMITS + 1];
    memcpy(opts, base, sizeof base);
    for (size_t i = 0; i < NLIMITS; i++)
        opts[NBASE + i] = (struct option){limits[i].name, required_argument, 0, LIMIT_BASE + (int)i};
    opts[NBASE + NLIMITS] = (struct option){0, 0, 0, 0};
    int c;
    unsigned long long v;
    optind = 1;
    int li = -1;
    while ((c = getopt_long(argc, argv, "", opts, &li)) != -1) {
        switch (c) {
        case 'l': {
            const char *colon = strrchr(optarg, ':');
            if (!colon || parse_u64(colon + 1, 65535, &v) != 0 ||
                (size_t)(colon - optarg) >= sizeof cli->host) {
                fprintf(stderr, "%s: --listen wants HOST:PORT, got '%s'\n", prog, optarg);
                return -1;
            }
            const char *h = optarg;
            size_t hl = (size_t)(colon - optarg);
            if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
                h++;
                hl -= 2;
            }
            memcpy(cli->host, h, hl);
            cli->host[hl] = '\0';
            cli->cfg.host = cli->host;
            cli->cfg.port = (unsigned)v;
            break;
        }
        case 'p': cli->cfg.path = optarg; break;
        case 's': cli->cfg.store = optarg; break;
        case 'R':
            if (parse_u64(optarg, 1ULL << 62, &v)) goto bad;
            cli->cfg.retain_events = v;
            break;
        case 'g':
            if (strcmp(optarg, "error") == 0) cli->cfg.on_gap = TIDEMARK_ON_GAP_ERROR;
            else if (strcmp(optarg, "event") == 0) cli->cfg.on_gap = TIDEMARK_ON_GAP_EVENT;
            else goto bad;
            break;
        case 'r':
            if (parse_u64(optarg, 3600000, &v)) goto bad;
            cli->cfg.retry_ms = (unsigned)v;
            break;
        case 'k':
            if (parse_u64(optarg, 3600000, &v) || v < 10) goto bad;
            cli->cfg.keepalive_ms = (unsigned)v;
            break;
        case 'b':
            if (parse_u64(optarg, 1ULL << 32, &v) || v == 0) goto bad;
            cli->cfg.max_body = (size_t)v;
            break;
        case 'w':
            if (parse_u64(optarg, 1024, &v) || v == 0) goto bad;
            cli->cfg.workers = (unsigned)v;
            break;
        case 'o':
            if (cli->norigins == 64) goto bad;
            cli->origins[cli->norigins++] = optarg;
            cli->cfg.allowed_origins = cli->origins;
            break;
        case 'H':
            if (cli->nhosts == 64) goto bad;
            cli->hosts[cli->nhosts++] = optarg;
            cli->cfg.allowed_hosts = cli->hosts;
            break;
        case 'L':
            if (tidemark_log_set_level(optarg)) goto bad;
            cli->log_level = optarg;
            break;
        case 'D':
            if (strcmp(optarg, "power") == 0) cli->cfg.durability = TIDEMARK_DURABILITY_POWER;
            else if (strcmp(optarg, "process") == 0) cli->cfg.durability = TIDEMARK_DURABILITY_PROCESS;
            else if (strcmp(optarg, "replicated") == 0) cli->cfg.durability = TIDEMARK_DURABILITY_REPLICATED;
            else goto bad;
            break;
        case 'E':
            if (strcmp(optarg, "durable") == 0) cli->cfg.emit_early = 0;
            else if (strcmp(optarg, "early") == 0) cli->cfg.emit_early = 1;
            else goto bad;
            break;
        case 'S':
            if (parse_u64(optarg, 1ULL << 40, &v)) goto bad;
            cli->cfg.retain_seconds = v;
            break;
        case 'T':
            if (parse_u64(optarg, 1ULL << 40, &v)) goto bad;
            cli->cfg.session_ttl_seconds = v;
            break;
        case 'A': cli->cfg.accept_loss = 1; break;
        case 1001:
            if (parse_u64(optarg, 3600000, &v) || v < 10) goto bad;
            cli->cfg.store_timeout_ms = (int64_t)v;
            break;
        case 'M':
            if (cli->nmetrics == 16) goto bad;
            cli->metrics[cli->nmetrics++] = optarg;
            cli->cfg.metrics_addresses = cli->metrics;
            break;
        case 'F':
            if (tidemark_log_set_format(optarg)) goto bad;
            break;
        case 'V': printf("%s %s\n", prog, tidemark_version(NULL)); return 1;
        case 'h': usage(stdout, prog, about); return 1;
        case 1000: cli->stdio = 1; break;
        default:
            if (c >= 2000 && c <= 2016) {
                if (auth_opt(cli, c, optarg, prog)) goto bad;
                break;
            }
            if (c >= LIMIT_BASE && c < LIMIT_BASE + (int)NLIMITS) {
                if (set_limit(cli, c, optarg)) goto bad;
                break;
            }
            usage(stderr, prog, about);
            return -1;
        }
        continue;
    bad:
        fprintf(stderr, "%s: --%s: bad value '%s' (see --help)\n", prog,
                li >= 0 ? opts[li].name : "?", optarg);
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        return -1;
    }
    if (strncmp(cli->cfg.store, "sqlite:", 7) == 0) {
        /* Create the database's folder (one level) so the default just works. */
        snprintf(cli->dir, sizeof cli->dir, "%s", cli->cfg.store + 7);
        char *slash = strrchr(cli->dir, '/');
        if (slash && slash != cli->dir) {
            *slash = '\0';
            if (mkdir(cli->dir, 0755) != 0 && errno != EEXIST) {
                fprintf(stderr, "%s: cannot create %s: %s\n", prog, cli->dir, strerror(errno));
                return -1;
            }
        }
    } else if (strcmp(cli->cfg.store, "memory") != 0 && strncmp(cli->cfg.store, "redis://", 8) != 0 &&
               strncmp(cli->cfg.store, "postgresql://", 13) != 0 &&
               strncmp(cli->cfg.store, "postgres://", 11) != 0) {
        fprintf(stderr, "%s: unknown store '%s' (sqlite:PATH, redis://HOST:PORT[/DB], "
                        "postgresql://... or memory)\n",
                prog, cli->cfg.store);
        return -1;
    }
    return 0;
}

/* Every connection is a descriptor: lift the soft limit toward the hard one
 * so --max-connections can be reached, and say so when it cannot. */
static void raise_fd_limit(const server_cli *cli)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)cli->cfg.max_connections + 512;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < want)
        tidemark_log("warn", "open-file limit %llu is below --max-connections %u + 512: connections past it are "
                "not accepted (raise ulimit -n)",
                (unsigned long long)rl.rlim_cur, cli->cfg.max_connections);
}

int server_cli_run(tidemark_server_t *srv, const server_cli *cli)
{
    return server_cli_run_hook(srv, cli, NULL, NULL);
}

int server_cli_run_hook(tidemark_server_t *srv, const server_cli *cli, void (*before_stop)(void *),
                        void *ud)
{
    const char *cli_host_for_url = cli->cfg.host ? cli->cfg.host : "127.0.0.1";
    const char *cli_path = cli->cfg.path ? cli->cfg.path : "/mcp";
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* threads started below inherit it */
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(cli);
    if (cli->stdio) /* stdout carries JSON-RPC only */
        return tidemark_server_run_stdio(srv, 0, 1) == 0 ? 0 : 1;
    int rc = tidemark_server_start(srv);
    if (rc) {
        fprintf(stderr, "cannot start: %s\n", tidemark_strerror(rc));
        return 1;
    }
    printf("listening on %s://%s:%u%s\n", cli->cfg.tls_cert_file ? "https" : "http",
           cli_host_for_url, tidemark_server_port(srv), cli_path);
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    tidemark_log("info", "signal %d: stopping", sig);
    if (before_stop)
        before_stop(ud);
    tidemark_server_stop(srv);
    return 0;
}
