/*
 * tidemark-client - a command-line MCP client over libtidemark.
 *
 *   tidemark-client [options] URL COMMAND [ARGS...]
 *
 * Exit codes: 0 success; 1 the server answered with an error (JSON-RPC
 * error, or a tool result with isError); 2 usage; 3 transport failure
 * (cannot connect, reconnects exhausted, timeout, stopped by a signal); 4
 * the client refused a stream it cannot prove continuous, or refused to
 * re-send a call it cannot prove unreceived (typed reason: never a silent
 * resume); 5 the session was lost (404).
 */
#include "tidemark/client.h"
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int json_out;
static int quiet;

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: tidemark-client [options] URL COMMAND [ARGS...]\n"
            "\n"
            "Commands:\n"
            "  tools                      list the tools\n"
            "  call NAME [key=value...]   call a tool (values that parse as JSON are JSON)\n"
            "  resources                  list resources and resource templates\n"
            "  read URI                   read a resource\n"
            "  prompts                    list prompts\n"
            "  prompt NAME [key=value...] get a prompt\n"
            "  listen [SECONDS]           print the standalone stream's notifications\n"
            "  resume                     finish requests a killed client left outstanding\n"
            "  end                        end the session (DELETE)\n"
            "  effects                    print the recorded effects (with --record-effects)\n"
            "  state                      print the state file: session, cursors, dispatch log,\n"
            "                             outstanding requests\n"
            "\n"
            "Options:\n"
            "  --state FILE               durable client state (session, cursors, dispatch log);\n"
            "                             the same file after a crash resumes the same session.\n"
            "                             Without it the session is ended (DELETE) on exit\n"
            "  --json                     print JSON results\n"
            "  --args JSON                tool/prompt arguments as one JSON object\n"
            "  --persist MODE             atomic (default) | cursor_after_dispatch |\n"
            "                             cursor_before_dispatch\n"
            "  --idempotent-handlers      suppress replayed events instead of failing closed\n"
            "  --record-effects           record every dispatched event in the state file's\n"
            "                             table effects(event_id, stream, seq, body): the\n"
            "                             application effect the persistence modes protect\n"
            "  --idempotency-key KEY      send _meta[\"dev.tidemark/idempotency-key\"] with the\n"
            "                             call: a Tidemark server then answers a re-issue of\n"
            "                             the same call (new request id) from its record\n"
            "  --timeout MS               per-request timeout, reconnect waits included\n"
            "                             (default 60000)\n"
            "  --retry-min MS             a server's SSE retry: is clamped to at least MS\n"
            "                             (default 50)\n"
            "  --retry-max MS             ... and to at most MS (default 30000)\n"
            "  --max-held-bytes BYTES     events of an emit-early server held back until\n"
            "                             announced durable, at most BYTES (default 8388608);\n"
            "                             past it the stream is refused (held_back_overflow)\n"
            "  --quiet                    no progress on stderr\n"
            "  --help\n"
            "\n"
            "Exit codes: 0 ok, 1 error answer, 2 usage, 3 transport (or stopped), 4 the\n"
            "client refused a stream or a re-send it cannot prove safe (typed reason),\n"
            "5 session lost.\n");
}

/* The typed reasons of a stream (or a re-send) the client refused: exit 4. */
static const char *const refusals[] = {
    "resumption_gap", "duplicate_effect", "dispatch_log_inconsistent", "replay_not_monotonic",
    "stream_mismatch", "continuity_lost", "malformed_event", "malformed_event_id",
    "held_back_overflow", "continuity_unprovable", NULL};

static int exit_code(int rc, json_t *res)
{
    if (rc == 0)
        return json_is_true(json_object_get(res, "isError")) ? 1 : 0;
    const char *reason = json_string_value(json_object_get(json_object_get(res, "data"), "reason"));
    for (const char *const *r = refusals; reason && *r; r++)
        if (!strcmp(reason, *r))
            return 4;
    if (reason && !strcmp(reason, "session_lost"))
        return 5;
    if (rc == TIDEMARK_EPEER)
        return 1;
    return 3;
}

static void print_json(json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY);
    if (s)
        puts(s);
    free(s);
}

static void on_progress(double p, double total, const char *msg, void *ud)
{
    (void)ud;
    if (quiet)
        return;
    if (total >= 0)
        fprintf(stderr, "progress %g/%g%s%s\n", p, total, msg ? " " : "", msg ? msg : "");
    else
        fprintf(stderr, "progress %g%s%s\n", p, msg ? " " : "", msg ? msg : "");
}

static int record_effect(tidemark_txn_t *txn, const tidemark_event_t *ev, void *ud)
{
    (void)ud;
    char seq[32];
    snprintf(seq, sizeof seq, "%llu", (unsigned long long)ev->seq);
    char *body = json_dumps(ev->message, JSON_COMPACT);
    const char *a[4] = {ev->id, ev->stream, seq, body};
    int rc = tidemark_txn_exec(txn, "INSERT INTO effects(event_id, stream, seq, body) VALUES(?1, ?2, ?3, ?4)",
                               a, 4);
    free(body);
    return rc;
}

static void on_notification(json_t *msg, void *ud)
{
    (void)ud;
    const char *m = json_string_value(json_object_get(msg, "method"));
    if (!m || !strcmp(m, "notifications/progress"))
        return;
    char *s = json_dumps(msg, JSON_COMPACT);
    if (s)
        fprintf(json_out ? stdout : stderr, "%s\n", s);
    free(s);
}

/* Answer sampling and elicitation from the terminal-less CLI: decline. */
static int on_request(const char *method, json_t *params, json_t **result, void *ud)
{
    (void)params, (void)ud;
    if (!strcmp(method, "elicitation/create")) {
        *result = json_pack("{s:s}", "action", "decline");
        return 0;
    }
    return TIDEMARK_ENOTSUP;
}

/* key=value pairs; a value that parses as JSON is taken as JSON. */
static json_t *kv_args(int argc, char **argv)
{
    json_t *o = json_object();
    for (int i = 0; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            json_decref(o);
            return NULL;
        }
        *eq = '\0';
        json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
        json_object_set_new(o, argv[i], v ? v : json_string(eq + 1));
    }
    return o;
}

/* A positive number for a flag, or 0 after a message. */
static unsigned long long positive(const char *flag, const char *v)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end || n == 0 || v[0] == '-') {
        fprintf(stderr, "tidemark-client: %s wants a positive number, not '%s'\n", flag, v);
        return 0;
    }
    return n;
}

static tidemark_client_t *g_client;
static void on_signal(int sig)
{
    (void)sig;
    if (g_client)
        tidemark_client_stop(g_client);
}

typedef struct cli_opts {
    const char *state, *args_json, *idem_key;
    int record;
} cli_opts;

/* Parse the options into cfg and o. Returns -1 to go on, else the exit code. */
static int parse_options(int argc, char **argv, tidemark_client_config_t *cfg, cli_opts *o)
{
    static const struct option opts[] = {
        {"state", required_argument, 0, 's'}, {"json", no_argument, 0, 'j'},
        {"args", required_argument, 0, 'a'},  {"persist", required_argument, 0, 'p'},
        {"idempotent-handlers", no_argument, 0, 'i'}, {"record-effects", no_argument, 0, 'r'},
        {"timeout", required_argument, 0, 't'}, {"quiet", no_argument, 0, 'q'},
        {"idempotency-key", required_argument, 0, 'k'},
        {"retry-min", required_argument, 0, 'm'}, {"retry-max", required_argument, 0, 'M'},
        {"max-held-bytes", required_argument, 0, 'H'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    unsigned long long n;
    int c;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        switch (c) {
        case 's': o->state = optarg; break;
        case 'j': json_out = 1; break;
        case 'a': o->args_json = optarg; break;
        case 'p':
            if (!strcmp(optarg, "atomic")) cfg->persist = TIDEMARK_PERSIST_ATOMIC;
            else if (!strcmp(optarg, "cursor_after_dispatch")) cfg->persist = TIDEMARK_PERSIST_CURSOR_AFTER_DISPATCH;
            else if (!strcmp(optarg, "cursor_before_dispatch")) cfg->persist = TIDEMARK_PERSIST_CURSOR_BEFORE_DISPATCH;
            else { fprintf(stderr, "tidemark-client: unknown --persist %s\n", optarg); return 2; }
            break;
        case 'i': cfg->idempotent_handlers = 1; break;
        case 'r': o->record = 1; break;
        case 't': cfg->timeout_ms = atoi(optarg); break;
        case 'q': quiet = 1; break;
        case 'k': o->idem_key = optarg; break;
        case 'm':
            if (!(n = positive("--retry-min", optarg)) || n > 3600000) return 2;
            cfg->retry_min_ms = (unsigned)n;
            break;
        case 'M':
            if (!(n = positive("--retry-max", optarg)) || n > 3600000) return 2;
            cfg->retry_max_ms = (unsigned)n;
            break;
        case 'H':
            if (!(n = positive("--max-held-bytes", optarg))) return 2;
            cfg->max_held_bytes = (size_t)n;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind < 2) {
        usage(stderr);
        return 2;
    }
    return -1;
}

static int cmd_tools(tidemark_client_t *c, json_t **res)
{
    int rc = tidemark_client_list(c, "tools/list", "tools", res);
    if (rc || json_out) {
        print_json(*res);
        return rc;
    }
    size_t i;
    json_t *t;
    json_array_foreach(*res, i, t) {
        const char *d = json_string_value(json_object_get(t, "description"));
        printf("%-30s %s\n", json_string_value(json_object_get(t, "name")), d ? d : "");
    }
    return 0;
}

static int cmd_call(tidemark_client_t *c, const char *name, json_t *args, const char *idem_key,
                    json_t **res)
{
    json_t *p = json_pack("{s:s,s:O}", "name", name, "arguments", args);
    if (idem_key)
        json_object_set_new(p, "_meta", json_pack("{s:s}", "dev.tidemark/idempotency-key", idem_key));
    int rc = tidemark_client_request(c, "tools/call", p, on_progress, NULL, res);
    json_decref(p);
    if (json_out || rc) {
        print_json(*res);
        return rc;
    }
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(*res, "content"), i, item) {
        const char *text = json_string_value(json_object_get(item, "text"));
        if (text)
            puts(text);
        else
            print_json(item);
    }
    return 0;
}

static int cmd_resources(tidemark_client_t *c, json_t **res)
{
    json_t *tpl = NULL;
    int rc = tidemark_client_list(c, "resources/list", "resources", res);
    if (!rc)
        rc = tidemark_client_list(c, "resources/templates/list", "resourceTemplates", &tpl);
    if (!rc) {
        json_t *all = json_pack("{s:O,s:O}", "resources", *res, "resourceTemplates", tpl);
        print_json(all);
        json_decref(all);
    } else {
        print_json(tpl ? tpl : *res);
    }
    json_decref(tpl);
    return rc;
}

/* A request with params {key: value}, printed as JSON. */
static int cmd_get(tidemark_client_t *c, const char *method, json_t *params, json_t **res)
{
    int rc = tidemark_client_request(c, method, params, NULL, NULL, res);
    json_decref(params);
    print_json(*res);
    return rc;
}

static int cmd_resume(tidemark_client_t *c, json_t **res)
{
    int rc = tidemark_client_resume(c, res);
    print_json(*res);
    size_t i;
    json_t *e;
    json_t *first_err = NULL;
    json_array_foreach(*res, i, e) if (!first_err && json_object_get(e, "error"))
        first_err = json_incref(json_object_get(e, "error"));
    if (rc == 0 && first_err) {
        /* Exit with the first failure's code (typed reasons map to 4, 5). */
        rc = json_object_get(json_object_get(first_err, "data"), "reason") ? TIDEMARK_EPROTO
                                                                              : TIDEMARK_EPEER;
        json_decref(*res);
        *res = first_err;
    } else {
        json_decref(first_err);
    }
    return rc;
}

#define USAGE_ERROR (-100)

/* Run cmd. OUT res: what exit_code() looks at. */
static int run_command(tidemark_client_t *c, const char *cmd, char **rest, int nrest, json_t *args,
                       const char *idem_key, json_t **res)
{
    int rc;
    if (!strcmp(cmd, "tools"))
        return cmd_tools(c, res);
    if (!strcmp(cmd, "call") && nrest >= 1)
        return cmd_call(c, rest[0], args, idem_key, res);
    if (!strcmp(cmd, "resources"))
        return cmd_resources(c, res);
    if (!strcmp(cmd, "read") && nrest == 1)
        return cmd_get(c, "resources/read", json_pack("{s:s}", "uri", rest[0]), res);
    if (!strcmp(cmd, "prompt") && nrest >= 1)
        return cmd_get(c, "prompts/get", json_pack("{s:s,s:O}", "name", rest[0], "arguments", args), res);
    if (!strcmp(cmd, "prompts")) {
        rc = tidemark_client_list(c, "prompts/list", "prompts", res);
        print_json(*res);
        return rc;
    }
    if (!strcmp(cmd, "listen"))
        return tidemark_client_listen(c, nrest ? atoi(rest[0]) * 1000 : 0);
    if (!strcmp(cmd, "resume"))
        return cmd_resume(c, res);
    if (!strcmp(cmd, "effects") || !strcmp(cmd, "state")) {
        rc = !strcmp(cmd, "state")
                 ? tidemark_client_state(c, res)
                 : tidemark_client_query(c, "SELECT event_id, stream, seq, COUNT(*) AS n FROM effects "
                                            "GROUP BY event_id ORDER BY stream, seq", NULL, 0, res);
        print_json(*res);
        return rc;
    }
    if (!strcmp(cmd, "end"))
        return tidemark_client_end_session(c);
    usage(stderr);
    return USAGE_ERROR;
}

int main(int argc, char **argv)
{
    tidemark_client_config_t cfg;
    tidemark_client_config_init(&cfg);
    cli_opts o = {0};
    int code = parse_options(argc, argv, &cfg, &o);
    if (code >= 0)
        return code;
    const char *url = argv[optind], *cmd = argv[optind + 1];
    char **rest = argv + optind + 2;
    int nrest = argc - optind - 2;
    cfg.url = url;
    cfg.state_path = o.state;
    cfg.on_notification = on_notification;
    cfg.on_request = on_request;
    if (o.record) {
        cfg.on_event = record_effect;
        cfg.schema = "CREATE TABLE IF NOT EXISTS effects(n INTEGER PRIMARY KEY, event_id TEXT, "
                     "stream TEXT, seq INTEGER, body TEXT)";
    }
    tidemark_client_t *c;
    int rc = tidemark_client_new(&cfg, &c);
    if (rc) {
        fprintf(stderr, "tidemark-client: %s\n", tidemark_strerror(rc));
        return 3;
    }
    g_client = c;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    json_t *res = NULL;
    int offline = !strcmp(cmd, "effects") || !strcmp(cmd, "state"); /* read the state only */
    rc = offline ? 0 : tidemark_client_connect(c, &res);
    if (rc) {
        fprintf(stderr, "tidemark-client: connect: %s\n", tidemark_strerror(rc));
        if (res)
            print_json(res);
        code = exit_code(rc, res);
        json_decref(res);
        tidemark_client_free(c);
        return code;
    }
    int named = !strcmp(cmd, "call") || !strcmp(cmd, "prompt");
    json_t *args = o.args_json ? json_loads(o.args_json, 0, NULL)
                   : named && nrest >= 1 ? kv_args(nrest - 1, rest + 1) : json_object();
    if (!args) {
        fprintf(stderr, "tidemark-client: arguments must be key=value or --args JSON\n");
        tidemark_client_free(c);
        return 2;
    }
    rc = run_command(c, cmd, rest, nrest, args, o.idem_key, &res);
    code = rc == USAGE_ERROR ? 2 : exit_code(rc, res);
    /* Without a state file nothing can resume the session: end it. */
    if (!o.state && strcmp(cmd, "end") != 0 && code != 5 && !offline)
        tidemark_client_end_session(c);
    json_decref(res);
    json_decref(args);
    tidemark_client_free(c);
    return code;
}
