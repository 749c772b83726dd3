/*
 * tidemark-client - a command-line MCP client over libtidemark.
 *
 *   tidemark-client [options] URL COMMAND [ARGS...]
 *
 * Exit codes: 0 success; 1 the server answered with an error (JSON-RPC
 * error, or a tool result with isError); 2 usage; 3 transport failure
 * (cannot connect, no MCP endpoint at the URL, reconnects exhausted,
 * timeout, stopped by a signal); 4 the client refused a stream it cannot
 * prove continuous, or refused to re-send a call it cannot prove
 * unreceived (typed reason: never a silent resume); 5 the session was
 * lost (404); 6 the protocol could not be followed (no protocol version in
 * common, a forced era the server does not speak, a malformed
 * InputRequiredResult, too many input rounds, an input request the client
 * cannot answer, a tool whose x-mcp-header annotations are invalid).
 *
 * Output: results on stdout. A failure is said in one line on stderr
 * ("tidemark-client: cannot connect to URL: Connection refused"), and its
 * typed error object goes to stdout as the command's result. Progress goes
 * to stderr: one line rewritten in place on a terminal, plain lines
 * otherwise.
 */
#include "tidemark/client.h"
#include "common/help.h"
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "tidemark-client"

static int json_out;
static int listening;      /* listen: every notification is a JSON line on stdout */
static int elicit_accept;  /* --elicit accept: elicitations accepted with their defaults */
static int quiet;
static int progress_tty;   /* stderr is a terminal: progress is one line, rewritten */
static int progress_shown; /* ... and that line is on the screen now */

/* The library's defaults, as --help shows them (help.h). */
static const help_default client_defaults[] = {TIDEMARK_CLIENT_DEFAULTS(HELP_DEFAULT)};

static void usage(FILE *f)
{
    help_print(f,
            "Usage: " PROG " [options] URL COMMAND [ARGS...]\n"
            "\n"
            "Commands:\n"
            "  tools                      list the tools\n"
            "  call [--task] NAME [key=value...]\n"
            "                             call a tool (values that parse as JSON are JSON);\n"
            "                             --task (modern): declare the tasks extension, so the\n"
            "                             server may run the call as a task: its id is kept\n"
            "                             in --state before anything else, tasks/get is polled\n"
            "                             to the end (input requests answered as --elicit\n"
            "                             says), and a killed client's resume polls it on\n"
            "                             and applies its result once\n"
            "  resources                  list resources and resource templates\n"
            "  read URI                   read a resource\n"
            "  prompts                    list prompts\n"
            "  prompt NAME [key=value...] get a prompt\n"
            "  listen [--tools] [--resources] [--prompts] [--resource URI]... [SECONDS]\n"
            "                             print change notifications, one JSON line each:\n"
            "                             modern: a subscriptions/listen stream for what is\n"
            "                             named (none named: the three list changes); legacy:\n"
            "                             the standalone GET stream\n"
            "  resume                     finish the requests a killed, stopped or timed-out\n"
            "                             client left outstanding (needs --state)\n"
            "  end                        end the session (DELETE)\n"
            "  cancel-task TASK_ID        ask the server to cancel a task (tasks/cancel); a\n"
            "                             client following it ends with task_cancelled\n"
            "  effects                    print the recorded effects (--record-effects; needs\n"
            "                             --state)\n"
            "  state                      print the state file: session, cursors, dispatch log,\n"
            "                             outstanding requests (needs --state)\n"
            "  login                      (also: login URL) authorize as a person: prints the\n"
            "                             authorization URL, takes the browser's redirect on\n"
            "                             a loopback port, exchanges the code (PKCE) and lists\n"
            "                             the tools; with --state the token is kept there\n"
            "\n"
            "Options:\n"
            "  --state FILE               durable client state (session, cursors, dispatch log,\n"
            "                             outstanding requests); the same file after a crash\n"
            "                             resumes the same session. Without it the session is\n"
            "                             ended (DELETE) on exit\n"
            "  --json                     print JSON results\n"
            "  --args JSON                tool/prompt arguments as one JSON object\n"
            "  --persist MODE             atomic (default) | cursor_after_dispatch |\n"
            "                             cursor_before_dispatch\n"
            "  --idempotent-handlers      skip replayed, already-dispatched events instead of\n"
            "                             failing closed\n"
            "  --record-effects           record every dispatched event in the state file's\n"
            "                             table effects(event_id, stream, seq, body): the\n"
            "                             application effect the persistence modes protect\n"
            "  --protocol ERA             auto (default: server/discover first, a legacy\n"
            "                             session when the server speaks no 2026-07-28) |\n"
            "                             modern | legacy\n"
            "  --idempotency-key KEY      send _meta[\"dev.tidemark/idempotency-key\"] with the\n"
            "                             call: a Tidemark server then answers a re-issue of\n"
            "                             the same call (new request id) from its record. In\n"
            "                             modern a call gets a fresh key unless given one\n"
            "  --no-idempotency-key       modern: send the call without a key (a cut call is\n"
            "                             then re-issued only for idempotent or read-only tools)\n"
            "  --task                     as call --task (for every call of the command)\n"
            "  --elicit ANSWER            decline (default) | accept: how a server's elicitation\n"
            "                             is answered (accept: with the schema's defaults)\n"
            "  --log-level LEVEL          modern: ask for log notifications at LEVEL (debug,\n"
            "                             info, notice, warning, error, ...) on every request\n"
            "  --timeout-ms MS            per-request timeout, reconnect waits included\n"
            "                             (default {timeout_ms})\n"
            "  --retry-min-ms MS          a server's SSE retry: is clamped to at least MS\n"
            "                             (default {retry_min_ms})\n"
            "  --retry-max-ms MS          ... and to at most MS (default {retry_max_ms})\n"
            "  --max-held-bytes BYTES     events of an emit-early server held back until\n"
            "                             announced durable, at most BYTES (default {max_held_bytes});\n"
            "                             past it the stream is refused (held_back_overflow)\n"
            "  --token TOKEN              a bearer token to send (also $TIDEMARK_TOKEN); never\n"
            "                             logged\n"
            "  --client-id ID             a pre-registered OAuth client (else the client uses a\n"
            "                             metadata document or registers itself)\n"
            "  --client-secret-file FILE  its secret; outside login: tokens by the client\n"
            "                             credentials grant\n"
            "  --client-issuer URL        the authorization server the client id belongs to\n"
            "  --client-metadata-url URL  this client's metadata document (its URL is the\n"
            "                             client id where the server supports that)\n"
            "  --redirect-port PORT       login: the loopback redirect port (default: a free one)\n"
            "  --cacert FILE              verify https servers against the CAs in this PEM file\n"
            "                             (default: the system's; verification is always on)\n"
            "  --quiet                    no progress on stderr\n"
            "  --version                  print the version and exit\n"
            "  --help                     this text\n"
            "\n"
            "Progress goes to stderr: one line rewritten in place on a terminal, plain\n"
            "lines otherwise. A failure is one line on stderr; its typed error object\n"
            "({code, message, data.reason}) is printed on stdout as the result.\n"
            "\n"
            "Exit codes: 0 ok; 1 the server answered with an error (or isError);\n"
            "2 usage; 3 transport: cannot connect, no MCP endpoint at the URL, timeout,\n"
            "reconnects exhausted, stopped by a signal (the call stays outstanding for\n"
            "resume); 4 the client refused a stream or a re-send it cannot prove safe\n"
            "(typed reason); 5 the session was lost; 6 the protocol could not be followed:\n"
            "no version in common, a forced era the server does not speak, a malformed or\n"
            "endless input request, an input request that cannot be answered, a tool with\n"
            "invalid x-mcp-header annotations (typed reason).\n",
            client_defaults, sizeof client_defaults / sizeof client_defaults[0]);
}

/* The typed reasons of a stream (or a re-send) the client refused: exit 4. */
static const char *const refusals[] = {
    "resumption_gap", "duplicate_effect", "dispatch_log_inconsistent", "replay_not_monotonic",
    "stream_mismatch", "continuity_lost", "malformed_event", "malformed_event_id",
    "held_back_overflow", "continuity_unprovable", NULL};

/* The typed reasons of a protocol the client could not follow: exit 6. */
static const char *const protocol_failures[] = {
    "no_common_version", "modern_unsupported", "malformed_input_required", "input_rounds_exceeded",
    "input_request_unsupported", "invalid_tool_definition", NULL};

static const char *reason_of(json_t *err)
{
    return json_string_value(json_object_get(json_object_get(err, "data"), "reason"));
}

static int exit_code(int rc, json_t *res)
{
    if (rc == 0)
        return json_is_true(json_object_get(res, "isError")) ? 1 : 0;
    const char *reason = reason_of(res);
    for (const char *const *r = refusals; reason && *r; r++)
        if (!strcmp(reason, *r))
            return 4;
    for (const char *const *r = protocol_failures; reason && *r; r++)
        if (!strcmp(reason, *r))
            return 6;
    if (reason && !strcmp(reason, "session_lost"))
        return 5;
    if (rc == TIDEMARK_EPEER)
        return 1;
    return 3;
}

/* The progress line leaves the screen before anything else is written to
 * stderr (it is drawn again by the next progress). */
static void progress_break(void)
{
    if (progress_shown) {
        fputs("\r\033[K", stderr);
        progress_shown = 0;
    }
}

/* At the end of a command: the last progress stays, on a line of its own. */
static void progress_end(void)
{
    if (progress_shown) {
        fputc('\n', stderr);
        progress_shown = 0;
    }
}

static void print_json(json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY);
    if (s)
        puts(s);
    free(s);
}

/* One line on stderr saying what went wrong: the error's own message
 * (reason in brackets), or what the code means. */
static void say_failure(const char *what, int rc, json_t *err)
{
    progress_end();
    const char *msg = json_string_value(json_object_get(err, "message"));
    const char *reason = reason_of(err);
    if (msg && reason)
        fprintf(stderr, PROG ": %s%s%s (%s)\n", what ? what : "", what ? ": " : "", msg, reason);
    else if (msg)
        fprintf(stderr, PROG ": %s%s%s\n", what ? what : "", what ? ": " : "", msg);
    else
        fprintf(stderr, PROG ": %s%s%s\n", what ? what : "", what ? ": " : "", tidemark_strerror(rc));
}

static void on_progress(double p, double total, const char *msg, void *ud)
{
    (void)ud;
    if (quiet)
        return;
    if (progress_tty)
        fputs("\r\033[K", stderr);
    if (total >= 0)
        fprintf(stderr, "progress %g/%g%s%s", p, total, msg ? " " : "", msg ? msg : "");
    else
        fprintf(stderr, "progress %g%s%s", p, msg ? " " : "", msg ? msg : "");
    if (progress_tty)
        progress_shown = 1;
    else
        fputc('\n', stderr);
    fflush(stderr);
}

static int record_effect(tidemark_txn_t *txn, const tidemark_event_t *ev, void *ud)
{
    (void)ud;
    char seq[32];
    snprintf(seq, sizeof seq, "%llu", (unsigned long long)ev->seq);
    char *body = json_dumps(ev->message, JSON_COMPACT);
    if (!body)
        return TIDEMARK_ENOMEM;
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
    if (!s)
        return;
    if (!json_out && !listening)
        progress_break();
    fprintf(json_out || listening ? stdout : stderr, "%s\n", s);
    if (listening)
        fflush(stdout);
    free(s);
}

/* Answer sampling and elicitation from the terminal-less CLI: decline, or
 * with --elicit accept an elicitation is accepted with the requested
 * schema's defaults (filled in by the library). */
static int on_request(const char *method, json_t *params, json_t **result, void *ud)
{
    (void)params, (void)ud;
    if (!strcmp(method, "elicitation/create")) {
        *result = elicit_accept ? json_pack("{s:s,s:{}}", "action", "accept", "content")
                                : json_pack("{s:s}", "action", "decline");
        return *result ? 0 : TIDEMARK_ENOMEM;
    }
    return TIDEMARK_ENOTSUP;
}

/* key=value pairs; a value that parses as JSON is taken as JSON. NULL
 * after a message. */
static json_t *kv_args(int argc, char **argv)
{
    json_t *o = json_object();
    for (int i = 0; o && i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq || eq == argv[i]) {
            fprintf(stderr, PROG ": '%s' is not key=value (or use --args JSON)\n", argv[i]);
            json_decref(o);
            return NULL;
        }
        *eq = '\0';
        json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
        if (json_object_set_new(o, argv[i], v ? v : json_string(eq + 1)) != 0) {
            fprintf(stderr, PROG ": out of memory\n");
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* A positive number for a flag, at most max; 0 after a message. */
static unsigned long long positive(const char *flag, const char *v, unsigned long long max)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end || n == 0 || v[0] == '-' || n > max) {
        fprintf(stderr, PROG ": %s wants a positive number up to %llu, not '%s'\n", flag, max, v);
        return 0;
    }
    return n;
}

/* ---- signals: a thread of ours waits for them and stops the client ---------------------- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static tidemark_client_t *g_client;

static void *signal_main(void *arg)
{
    sigset_t *set = arg;
    for (;;) {
        int sig;
        if (sigwait(set, &sig) != 0)
            continue;
        pthread_mutex_lock(&g_mu);
        if (g_client)
            tidemark_client_stop(g_client); /* the request stays outstanding for resume */
        pthread_mutex_unlock(&g_mu);
    }
    return NULL;
}

/* SIGINT and SIGTERM are blocked in every thread (those the client starts
 * inherit it) and taken by one that only waits for them. */
static int signals_start(void)
{
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
        return -1;
    pthread_t t;
    if (pthread_create(&t, NULL, signal_main, &set) != 0)
        return -1;
    return pthread_detach(t) == 0 ? 0 : -1;
}

static void client_publish(tidemark_client_t *c)
{
    pthread_mutex_lock(&g_mu);
    g_client = c;
    pthread_mutex_unlock(&g_mu);
}

/* ---- options ----------------------------------------------------------------------- */

typedef struct cli_opts {
    const char *state, *args_json, *idem_key;
    int record, no_key;
    /* authorization */
    const char *token, *client_id, *secret_file, *client_issuer, *metadata_url, *cacert;
    int redirect_port;
    char *secret;
} cli_opts;

enum { O_TIMEOUT = 256, O_RETRY_MIN, O_RETRY_MAX, O_HELD, O_VERSION, O_PROTOCOL, O_NO_KEY,
       O_LOG_LEVEL, O_ELICIT, O_TOKEN, O_CLIENT_ID, O_SECRET_FILE, O_CLIENT_ISSUER, O_CIMD, O_CACERT,
       O_REDIRECT_PORT, O_TASK };

static int parse_protocol(const char *v, tidemark_client_config_t *cfg)
{
    if (!strcmp(v, "auto"))
        cfg->protocol = TIDEMARK_PROTOCOL_AUTO;
    else if (!strcmp(v, "modern"))
        cfg->protocol = TIDEMARK_PROTOCOL_MODERN;
    else if (!strcmp(v, "legacy"))
        cfg->protocol = TIDEMARK_PROTOCOL_LEGACY;
    else {
        fprintf(stderr, PROG ": unknown --protocol %s (auto, modern, legacy)\n", v);
        return 2;
    }
    return -1;
}

static int parse_persist(const char *v, tidemark_client_config_t *cfg)
{
    if (!strcmp(v, "atomic"))
        cfg->persist = TIDEMARK_PERSIST_ATOMIC;
    else if (!strcmp(v, "cursor_after_dispatch"))
        cfg->persist = TIDEMARK_PERSIST_CURSOR_AFTER_DISPATCH;
    else if (!strcmp(v, "cursor_before_dispatch"))
        cfg->persist = TIDEMARK_PERSIST_CURSOR_BEFORE_DISPATCH;
    else {
        fprintf(stderr, PROG ": unknown --persist %s (atomic, cursor_after_dispatch, "
                        "cursor_before_dispatch)\n", v);
        return 2;
    }
    return -1;
}

/* A flag with a number. Returns -1 to go on, else the exit code. */
static int number_option(int c, const char *v, tidemark_client_config_t *cfg)
{
    unsigned long long n;
    switch (c) {
    case O_TIMEOUT:
        if (!(n = positive("--timeout-ms", v, 86400000)))
            return 2;
        cfg->timeout_ms = (int)n;
        return -1;
    case O_RETRY_MIN:
        if (!(n = positive("--retry-min-ms", v, 3600000)))
            return 2;
        cfg->retry_min_ms = (unsigned)n;
        return -1;
    case O_RETRY_MAX:
        if (!(n = positive("--retry-max-ms", v, 3600000)))
            return 2;
        cfg->retry_max_ms = (unsigned)n;
        return -1;
    default:
        if (!(n = positive("--max-held-bytes", v, (unsigned long long)SIZE_MAX)))
            return 2;
        cfg->max_held_bytes = (size_t)n;
        return -1;
    }
}

/* Parse the options into cfg and o. Returns -1 to go on, else the exit code. */
static int parse_options(int argc, char **argv, tidemark_client_config_t *cfg, cli_opts *o)
{
    /* --timeout, --retry-min and --retry-max: the former spellings, kept
     * working, not in --help. */
    static const struct option opts[] = {
        {"state", required_argument, 0, 's'}, {"json", no_argument, 0, 'j'},
        {"args", required_argument, 0, 'a'},  {"persist", required_argument, 0, 'p'},
        {"idempotent-handlers", no_argument, 0, 'i'}, {"record-effects", no_argument, 0, 'r'},
        {"timeout-ms", required_argument, 0, O_TIMEOUT}, {"timeout", required_argument, 0, O_TIMEOUT},
        {"quiet", no_argument, 0, 'q'}, {"idempotency-key", required_argument, 0, 'k'},
        {"retry-min-ms", required_argument, 0, O_RETRY_MIN}, {"retry-min", required_argument, 0, O_RETRY_MIN},
        {"retry-max-ms", required_argument, 0, O_RETRY_MAX}, {"retry-max", required_argument, 0, O_RETRY_MAX},
        {"max-held-bytes", required_argument, 0, O_HELD}, {"version", no_argument, 0, O_VERSION},
        {"protocol", required_argument, 0, O_PROTOCOL}, {"no-idempotency-key", no_argument, 0, O_NO_KEY},
        {"log-level", required_argument, 0, O_LOG_LEVEL}, {"elicit", required_argument, 0, O_ELICIT},
        {"token", required_argument, 0, O_TOKEN}, {"client-id", required_argument, 0, O_CLIENT_ID},
        {"client-secret-file", required_argument, 0, O_SECRET_FILE},
        {"client-issuer", required_argument, 0, O_CLIENT_ISSUER},
        {"client-metadata-url", required_argument, 0, O_CIMD},
        {"cacert", required_argument, 0, O_CACERT},
        {"redirect-port", required_argument, 0, O_REDIRECT_PORT}, {"task", no_argument, 0, O_TASK},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c, code;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 's': o->state = optarg; break;
        case 'j': json_out = 1; break;
        case 'a': o->args_json = optarg; break;
        case 'p': if ((code = parse_persist(optarg, cfg)) >= 0) return code; break;
        case 'i': cfg->idempotent_handlers = 1; break;
        case 'r': o->record = 1; break;
        case 'q': quiet = 1; break;
        case 'k': o->idem_key = optarg; break;
        case O_PROTOCOL: if ((code = parse_protocol(optarg, cfg)) >= 0) return code; break;
        case O_NO_KEY: o->no_key = 1; break;
        case O_LOG_LEVEL: cfg->log_level = optarg; break;
        case O_ELICIT:
            if (strcmp(optarg, "accept") && strcmp(optarg, "decline")) {
                fprintf(stderr, PROG ": unknown --elicit %s (accept, decline)\n", optarg);
                return 2;
            }
            elicit_accept = !strcmp(optarg, "accept");
            break;
        case O_TIMEOUT: case O_RETRY_MIN: case O_RETRY_MAX: case O_HELD:
            if ((code = number_option(c, optarg, cfg)) >= 0) return code;
            break;
        case O_TOKEN: o->token = optarg; break;
        case O_CLIENT_ID: o->client_id = optarg; break;
        case O_SECRET_FILE: o->secret_file = optarg; break;
        case O_CLIENT_ISSUER: o->client_issuer = optarg; break;
        case O_CIMD: o->metadata_url = optarg; break;
        case O_CACERT: o->cacert = optarg; break;
        case O_TASK: cfg->tasks = 1; break;
        case O_REDIRECT_PORT:
            o->redirect_port = atoi(optarg);
            if (o->redirect_port <= 0 || o->redirect_port > 65535) {
                fprintf(stderr, PROG ": --redirect-port needs a port (1-65535)\n");
                return 2;
            }
            break;
        case O_VERSION: printf(PROG " %s\n", tidemark_version(NULL)); return 0;
        case 'h': usage(stdout); return 0;
        default: fprintf(stderr, "Try '" PROG " --help'.\n"); return 2;
        }
    }
    if (argc - optind < 2) {
        fprintf(stderr, argc - optind == 1 ? PROG ": a COMMAND must follow the URL\n"
                                           : PROG ": a URL and a COMMAND are needed\n");
        fprintf(stderr, "Usage: " PROG " [options] URL COMMAND [ARGS...]  (see --help)\n");
        return 2;
    }
    return -1;
}

/* ---- commands -------------------------------------------------------------------------- */

typedef struct command {
    const char *name;
    int min_args, max_args; /* max -1: any number */
    int needs_state;        /* reads or finishes what a state file holds */
    int offline;            /* reads the state only: no connection */
    const char *args;       /* what the arguments are, for messages */
} command;

static const command commands[] = {
    {"tools", 0, 0, 0, 0, ""},          {"call", 1, -1, 0, 0, "NAME [key=value...]"},
    {"resources", 0, 0, 0, 0, ""},      {"read", 1, 1, 0, 0, "URI"},
    {"prompts", 0, 0, 0, 0, ""},        {"prompt", 1, -1, 0, 0, "NAME [key=value...]"},
    {"listen", 0, -1, 0, 0, "[--tools] [--resources] [--prompts] [--resource URI]... [SECONDS]"},
    {"resume", 0, 0, 1, 0, ""},
    {"end", 0, 0, 0, 0, ""},            {"effects", 0, 0, 1, 1, ""},
    {"state", 0, 0, 1, 1, ""},          {"login", 0, 0, 0, 0, ""},
    {"cancel-task", 1, 1, 0, 0, "TASK_ID"},
    {NULL, 0, 0, 0, 0, NULL}};

/* listen's arguments: the filter (NULL: the default one) and the seconds
 * (0: until stopped). Nonzero after a message. */
static int listen_args(char **rest, int nrest, json_t **filter, int *secs)
{
    *filter = NULL;
    *secs = 0;
    json_t *f = json_object(), *uris = json_array();
    int bad = !f || !uris;
    for (int i = 0; !bad && i < nrest; i++) {
        const char *a = rest[i];
        if (!strcmp(a, "--tools"))
            bad = json_object_set_new(f, "toolsListChanged", json_true());
        else if (!strcmp(a, "--prompts"))
            bad = json_object_set_new(f, "promptsListChanged", json_true());
        else if (!strcmp(a, "--resources"))
            bad = json_object_set_new(f, "resourcesListChanged", json_true());
        else if (!strcmp(a, "--resource") && i + 1 < nrest)
            bad = json_array_append_new(uris, json_string(rest[++i]));
        else if (a[0] != '-' && !*secs && (*secs = (int)positive("listen SECONDS", a, 86400)) > 0)
            continue;
        else {
            if (a[0] == '-')
                fprintf(stderr, PROG ": listen: unknown %s%s\n", a,
                        !strcmp(a, "--resource") ? " (it wants a URI)" : "");
            bad = 1;
        }
    }
    if (!bad && json_array_size(uris))
        bad = json_object_set(f, "resourceSubscriptions", uris);
    json_decref(uris);
    if (bad || !json_object_size(f)) {
        json_decref(f);
        f = NULL;
    }
    *filter = f;
    return bad;
}

/* The command named cmd, checked against its arguments; NULL after a
 * message (usage: exit 2). */
static const command *command_check(const char *cmd, char **rest, int nrest, const cli_opts *o)
{
    const command *k = commands;
    while (k->name && strcmp(k->name, cmd) != 0)
        k++;
    if (!k->name) {
        fprintf(stderr, PROG ": unknown command '%s' (commands: tools, call, resources, read, "
                        "prompts, prompt, listen, resume, end, effects, state, login, cancel-task; "
                        "see --help)\n",
                cmd);
        return NULL;
    }
    if (nrest < k->min_args || (k->max_args >= 0 && nrest > k->max_args)) {
        fprintf(stderr, PROG ": usage: " PROG " [options] URL %s%s%s\n", k->name,
                k->args[0] ? " " : "", k->args);
        return NULL;
    }
    if (k->needs_state && !o->state) {
        fprintf(stderr, PROG ": %s needs --state FILE: %s\n", k->name,
                !strcmp(k->name, "resume")
                    ? "the state file of the client that left requests outstanding"
                    : "the state file to read");
        return NULL;
    }
    if (!strcmp(k->name, "listen")) {
        json_t *f = NULL;
        int secs = 0;
        if (listen_args(rest, nrest, &f, &secs) != 0)
            return NULL;
        json_decref(f);
    }
    return k;
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

/* A fresh idempotency key ("tmk-" and 32 hex digits); 0 or -1. */
static int fresh_key(char out[40])
{
    unsigned char b[16];
    FILE *f = fopen("/dev/urandom", "rb");
    size_t n = f ? fread(b, 1, sizeof b, f) : 0;
    if (f && fclose(f) != 0)
        n = 0;
    if (n != sizeof b)
        return -1;
    strcpy(out, "tmk-");
    for (int i = 0; i < 16; i++)
        snprintf(out + 4 + 2 * i, 3, "%02x", b[i]);
    return 0;
}

static int cmd_call(tidemark_client_t *c, const char *name, json_t *args, const char *idem_key,
                    int no_key, json_t **res)
{
    char version[32], key[40];
    if (!idem_key && !no_key &&
        tidemark_client_protocol_version(c, version, sizeof version) == 0 &&
        !strcmp(version, TIDEMARK_CLIENT_MODERN_VERSION)) {
        /* Saved with the call in the state before it is sent: a re-issue
         * after a cut, or after a restart, carries the same key. */
        if (fresh_key(key) != 0) {
            fprintf(stderr, PROG ": no randomness for an idempotency key\n");
            return TIDEMARK_EIO;
        }
        idem_key = key;
    }
    json_t *p = json_pack("{s:s,s:O}", "name", name, "arguments", args);
    if (p && idem_key &&
        json_object_set_new(p, "_meta", json_pack("{s:s}", "dev.tidemark/idempotency-key", idem_key)) != 0) {
        json_decref(p);
        p = NULL;
    }
    if (!p)
        return TIDEMARK_ENOMEM;
    int rc = tidemark_client_request(c, "tools/call", p, on_progress, NULL, res);
    json_decref(p);
    progress_end();
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
    } else if (tpl) { /* the templates' error is the result */
        json_decref(*res);
        *res = tpl;
        tpl = NULL;
        print_json(*res);
    } else {
        print_json(*res);
    }
    json_decref(tpl);
    return rc;
}

/* A request with params, printed as JSON. */
static int cmd_get(tidemark_client_t *c, const char *method, json_t *params, json_t **res)
{
    if (!params)
        return TIDEMARK_ENOMEM;
    int rc = tidemark_client_request(c, method, params, NULL, NULL, res);
    json_decref(params);
    print_json(*res);
    return rc;
}

static int cmd_listen(tidemark_client_t *c, char **rest, int nrest)
{
    json_t *filter = NULL;
    int secs = 0;
    if (listen_args(rest, nrest, &filter, &secs) != 0)
        return TIDEMARK_EINVAL; /* checked before: not reached */
    listening = 1;
    int rc = tidemark_client_subscribe(c, filter, secs * 1000);
    json_decref(filter);
    return rc;
}

/* end: DELETE the session; the modern era has none to end. */
static int cmd_end(tidemark_client_t *c)
{
    char version[32];
    if (tidemark_client_protocol_version(c, version, sizeof version) == 0 &&
        !strcmp(version, TIDEMARK_CLIENT_MODERN_VERSION)) {
        fprintf(stderr, PROG ": the server speaks %s: there is no session to end\n", version);
        return 0;
    }
    return tidemark_client_end_session(c);
}

static int cmd_resume(tidemark_client_t *c, json_t **res)
{
    int rc = tidemark_client_resume(c, res);
    progress_end();
    print_json(*res);
    size_t i;
    json_t *e;
    json_t *first_err = NULL;
    json_array_foreach(*res, i, e) if (!first_err && json_object_get(e, "error"))
        first_err = json_incref(json_object_get(e, "error"));
    if (rc == 0 && first_err) {
        /* Exit with the first failure's code (typed reasons map to 4, 5). */
        rc = reason_of(first_err) ? TIDEMARK_EPROTO : TIDEMARK_EPEER;
        json_decref(*res);
        *res = first_err;
    } else {
        json_decref(first_err);
    }
    return rc;
}

static int cmd_state(tidemark_client_t *c, const char *cmd, json_t **res)
{
    int rc = !strcmp(cmd, "state")
                 ? tidemark_client_state(c, res)
                 : tidemark_client_query(c, "SELECT event_id, stream, seq, COUNT(*) AS n FROM effects "
                                            "GROUP BY event_id ORDER BY stream, seq", NULL, 0, res);
    if (!rc)
        print_json(*res);
    return rc;
}

/* Run cmd (checked). OUT res: what exit_code() looks at. */
static int run_command(tidemark_client_t *c, const char *cmd, char **rest, int nrest, json_t *args,
                       const cli_opts *o, json_t **res)
{
    if (!strcmp(cmd, "tools"))
        return cmd_tools(c, res);
    if (!strcmp(cmd, "call"))
        return cmd_call(c, rest[0], args, o->idem_key, o->no_key, res);
    if (!strcmp(cmd, "resources"))
        return cmd_resources(c, res);
    if (!strcmp(cmd, "read"))
        return cmd_get(c, "resources/read", json_pack("{s:s}", "uri", rest[0]), res);
    if (!strcmp(cmd, "prompt"))
        return cmd_get(c, "prompts/get", json_pack("{s:s,s:O}", "name", rest[0], "arguments", args), res);
    if (!strcmp(cmd, "prompts")) {
        int rc = tidemark_client_list(c, "prompts/list", "prompts", res);
        print_json(*res);
        return rc;
    }
    if (!strcmp(cmd, "listen"))
        return cmd_listen(c, rest, nrest);
    if (!strcmp(cmd, "resume"))
        return cmd_resume(c, res);
    if (!strcmp(cmd, "end"))
        return cmd_end(c);
    if (!strcmp(cmd, "cancel-task")) {
        int rc = tidemark_client_cancel_task(c, rest[0], res);
        if (rc == TIDEMARK_EINVAL)
            fprintf(stderr, PROG ": '%s' is not a task id\n", rest[0]);
        if (rc)
            print_json(*res);
        return rc;
    }
    if (!strcmp(cmd, "login")) {
        /* connect met the 401 and logged in: the tools say the token works */
        fprintf(stderr, PROG ": logged in\n");
        return cmd_tools(c, res);
    }
    return cmd_state(c, cmd, res);
}

/* ---- main ------------------------------------------------------------------------------- */

/* The arguments of call / prompt. NULL after a message. */
static json_t *command_args(const cli_opts *o, const char *cmd, char **rest, int nrest)
{
    if (o->args_json) {
        json_error_t e;
        json_t *a = json_loads(o->args_json, 0, &e);
        if (!json_is_object(a)) {
            fprintf(stderr, PROG ": --args must be one JSON object (%s)\n", a ? "not an object" : e.text);
            json_decref(a);
            return NULL;
        }
        return a;
    }
    int named = !strcmp(cmd, "call") || !strcmp(cmd, "prompt");
    return named ? kv_args(nrest - 1, rest + 1) : json_object();
}

static void config_from(tidemark_client_config_t *cfg, const char *url, const cli_opts *o)
{
    cfg->url = url;
    cfg->state_path = o->state;
    cfg->on_notification = on_notification;
    cfg->on_request = on_request;
    if (o->record) {
        cfg->on_event = record_effect;
        cfg->schema = "CREATE TABLE IF NOT EXISTS effects(n INTEGER PRIMARY KEY, event_id TEXT, "
                      "stream TEXT, seq INTEGER, body TEXT)";
    }
}

/* ---- authorization ----------------------------------------------------------------------- */

static tidemark_loopback_t *loopback;

/* login: the authorization URL for the person, then the browser's
 * redirect to our loopback port. */
static int ask_person(const char *url, const char *redirect_uri, char **callback_url, void *ud)
{
    (void)redirect_uri;
    int timeout_ms = *(int *)ud;
    fprintf(stderr, PROG ": open this URL in a browser to authorize:\n%s\n", url);
    fflush(stderr);
    int rc = tidemark_loopback_wait(loopback, timeout_ms, callback_url);
    if (rc)
        fprintf(stderr, PROG ": no authorization arrived at the redirect (%s)\n",
                tidemark_strerror(rc));
    return rc;
}

/* The secret, from its file (one line; a trailing newline dropped). */
static int read_secret(cli_opts *o)
{
    FILE *f = fopen(o->secret_file, "r");
    if (!f) {
        fprintf(stderr, PROG ": --client-secret-file %s: %s\n", o->secret_file, strerror(errno));
        return 2;
    }
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    o->secret = strdup(buf);
    memset(buf, 0, sizeof buf);
    return o->secret ? -1 : 3;
}

/* The authorization settings of cfg. Returns -1 to go on, else the exit code. */
static int auth_config(tidemark_client_config_t *cfg, cli_opts *o, int login, int *timeout_ms,
                       char *redirect, size_t rsize)
{
    const char *env = getenv("TIDEMARK_TOKEN");
    cfg->access_token = o->token ? o->token : env && *env ? env : NULL;
    cfg->client_id = o->client_id;
    cfg->client_issuer = o->client_issuer;
    cfg->client_metadata_url = o->metadata_url;
    cfg->ca_file = o->cacert;
    int code = o->secret_file ? read_secret(o) : -1;
    if (code >= 0)
        return code;
    cfg->client_secret = o->secret;
    /* Non-interactive with a confidential client: client credentials. */
    cfg->client_credentials = !login && o->client_id && o->secret;
    if (!login)
        return -1;
    int rc = tidemark_loopback_open(o->redirect_port, &loopback, redirect, rsize);
    if (rc) {
        fprintf(stderr, PROG ": cannot listen for the redirect on 127.0.0.1:%d: %s\n",
                o->redirect_port, tidemark_strerror(rc));
        return 3;
    }
    *timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 60000;
    cfg->redirect_uri = redirect;
    cfg->on_authorize = ask_person;
    cfg->authorize_ud = timeout_ms;
    return -1;
}

/* Connect, run the command, end a session no state file keeps. */
static int run(tidemark_client_t *c, const command *k, const cli_opts *o, char **rest, int nrest,
               json_t *args)
{
    json_t *res = NULL;
    int rc = k->offline ? 0 : tidemark_client_connect(c, &res);
    if (rc) {
        say_failure(NULL, rc, res);
        if (res)
            print_json(res);
        int code = exit_code(rc, res);
        json_decref(res);
        return code;
    }
    rc = run_command(c, k->name, rest, nrest, args, o, &res);
    int code = exit_code(rc, res);
    if (rc)
        say_failure(k->name, rc, res);
    /* Without a state file nothing can resume the session: end it. */
    if (!o->state && strcmp(k->name, "end") != 0 && code != 5 && !k->offline) {
        int erc = tidemark_client_end_session(c);
        if (erc && erc != TIDEMARK_ENOTFOUND && code == 0)
            fprintf(stderr, PROG ": ending the session: %s\n", tidemark_strerror(erc));
    }
    json_decref(res);
    return code;
}

int main(int argc, char **argv)
{
    tidemark_client_config_t cfg;
    if (tidemark_client_config_init(&cfg) != 0)
        return 3;
    cli_opts o = {0};
    int code = parse_options(argc, argv, &cfg, &o);
    if (code >= 0)
        return code;
    const char *url = argv[optind], *cmd = argv[optind + 1];
    if (!strcmp(url, "login")) { /* tidemark-client [options] login URL */
        url = argv[optind + 1];
        cmd = "login";
    }
    char **rest = argv + optind + 2;
    int nrest = argc - optind - 2;
    if (!strcmp(cmd, "call") && nrest > 0 && !strcmp(rest[0], "--task")) { /* call --task NAME */
        cfg.tasks = 1;
        rest++, nrest--;
    }
    const command *k = command_check(cmd, rest, nrest, &o);
    json_t *args = k ? command_args(&o, cmd, rest, nrest) : NULL;
    if (!args)
        return 2;
    progress_tty = isatty(STDERR_FILENO);
    config_from(&cfg, url, &o);
    int person_timeout = 0;
    char redirect[128];
    code = auth_config(&cfg, &o, !strcmp(cmd, "login"), &person_timeout, redirect, sizeof redirect);
    if (code >= 0) {
        json_decref(args);
        return code;
    }
    if (signals_start() != 0) {
        fprintf(stderr, PROG ": cannot set up signal handling\n");
        json_decref(args);
        return 3;
    }
    tidemark_client_t *c;
    int rc = tidemark_client_new(&cfg, &c);
    if (rc) {
        fprintf(stderr, PROG ": %s: %s\n", o.state ? o.state : "client", tidemark_strerror(rc));
        json_decref(args);
        return 3;
    }
    client_publish(c);
    code = run(c, k, &o, rest, nrest, args);
    client_publish(NULL);
    json_decref(args);
    tidemark_client_free(c);
    tidemark_loopback_close(loopback);
    if (o.secret) {
        memset(o.secret, 0, strlen(o.secret));
        free(o.secret);
    }
    return code;
}
