/* test_stdio_everything.c - the upstream session (src/gateway/upstream.c on
 * child.c and stdio.c) against the official server-everything over stdio.
 * Usage: test_stdio_everything NODE INDEX_JS [ARGS...]  (CTest:
 * gateway_stdio_everything). TAP-like output, exit 1 at the first failure.
 *
 * It initializes with recorded client params (sampling and roots
 * capabilities), lists tools, calls echo (two "clients" with the same
 * request id at once), a long-running tool with progress (tokens mapped
 * and restored), the sampling tool (the child's request answered through
 * tm_upstream_answer, once), answers the child's roots/list, cancels a call,
 * then SIGKILLs the child mid-call: the unsafe call is reported lost, the
 * one marked TM_UPSTREAM_RESEND is re-sent, the restarted child is
 * re-initialized with the same params (its roots/list comes again) and
 * answers; a call in flight at tm_upstream_free is lost as cancelled. */
#include "gateway/upstream.h"
#include "tidemark/tidemark.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static json_t *responses; /* tag name -> response */
static json_t *progress;  /* tag name -> [notifications] */
static json_t *lost;      /* tag name -> err */
static json_t *requests;  /* [{gen, msg}] the child's requests */
static json_t *readies;   /* [{gen, result}] */
static json_t *downs;     /* [{gen, signal, restarting}] */
static int checks;
static tm_upstream *U;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            printf("not ok %d - ", checks);                                                        \
            printf(__VA_ARGS__);                                                                   \
            printf("  (%s:%d)\n", __FILE__, __LINE__);                                             \
            exit(1);                                                                               \
        }                                                                                          \
        printf("ok %d - ", checks);                                                                \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        fflush(stdout);                                                                            \
    } while (0)

static void on_ready(void *ud, unsigned gen, json_t *result)
{
    (void)ud;
    pthread_mutex_lock(&mu);
    json_array_append_new(readies, json_pack("{s:i,s:O}", "gen", (int)gen, "result", result));
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void on_response(void *ud, void *tag, json_t *resp)
{
    (void)ud;
    pthread_mutex_lock(&mu);
    json_object_set(responses, (const char *)tag, resp);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void on_notification(void *ud, void *tag, json_t *msg)
{
    (void)ud;
    if (!tag)
        return; /* logging and list changes: not checked here */
    pthread_mutex_lock(&mu);
    json_t *a = json_object_get(progress, (const char *)tag);
    if (!a) {
        a = json_array();
        json_object_set_new(progress, (const char *)tag, a);
    }
    json_array_append(a, msg);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* roots/list is answered right here, on the child's reader thread; the
 * rest waits for the test's main thread. */
static void on_request(void *ud, unsigned gen, json_t *msg)
{
    (void)ud;
    const char *method = json_string_value(json_object_get(msg, "method"));
    if (method && strcmp(method, "roots/list") == 0) {
        json_t *ans = json_pack("{s:s,s:O,s:{s:[{s:s,s:s}]}}", "jsonrpc", "2.0", "id", json_object_get(msg, "id"),
                                "result", "roots", "uri", "file:///tmp", "name", "tmp");
        int rc = tm_upstream_answer(U, gen, ans);
        if (rc != 0)
            fprintf(stderr, "roots/list answer: %d\n", rc);
        json_decref(ans);
    }
    pthread_mutex_lock(&mu);
    json_array_append_new(requests, json_pack("{s:i,s:O}", "gen", (int)gen, "msg", msg));
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void on_lost(void *ud, void *tag, const json_t *request, int err)
{
    (void)ud;
    pthread_mutex_lock(&mu);
    json_object_set_new(lost, (const char *)tag,
                        json_pack("{s:i,s:O}", "err", err, "id", json_object_get(request, "id")));
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void on_down(void *ud, unsigned gen, const tm_child_exit *ex, int restarting)
{
    (void)ud;
    pthread_mutex_lock(&mu);
    json_array_append_new(downs, json_pack("{s:i,s:i,s:i,s:i}", "gen", (int)gen, "signal",
                                           ex->signaled ? ex->signal : 0, "restarting", restarting,
                                           "pid", (int)ex->pid));
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* Wait up to 20 s for pred() (called with mu held). */
static int wait_for(int (*pred)(const void *), const void *arg)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 20;
    pthread_mutex_lock(&mu);
    int ok;
    while (!(ok = pred(arg)))
        if (pthread_cond_timedwait(&cv, &mu, &dl) == ETIMEDOUT) {
            ok = pred(arg);
            break;
        }
    pthread_mutex_unlock(&mu);
    return ok;
}

static int has_response(const void *tag) { return json_object_get(responses, tag) != NULL; }
static int has_lost(const void *tag) { return json_object_get(lost, tag) != NULL; }
static int has_progress(const void *tag) { return json_array_size(json_object_get(progress, tag)) > 0; }
static int n_readies(const void *n) { return json_array_size(readies) >= *(const size_t *)n; }
static int n_downs(const void *n) { return json_array_size(downs) >= *(const size_t *)n; }

/* A request of the child's with this method from generation gen. */
typedef struct want_req {
    const char *method;
    int gen;
} want_req;

static json_t *find_request(const want_req *w)
{
    size_t i;
    json_t *r;
    json_array_foreach(requests, i, r)
    {
        const char *m = json_string_value(json_object_get(json_object_get(r, "msg"), "method"));
        if (m && strcmp(m, w->method) == 0 && json_integer_value(json_object_get(r, "gen")) == w->gen)
            return r;
    }
    return NULL;
}
static int has_request(const void *w) { return find_request(w) != NULL; }

static json_t *response_of(const char *tag)
{
    pthread_mutex_lock(&mu);
    json_t *r = json_incref(json_object_get(responses, tag));
    pthread_mutex_unlock(&mu);
    return r;
}

/* The text of a tools/call result's first content item, or "". */
static const char *first_text(const json_t *resp)
{
    json_t *c = json_array_get(json_object_get(json_object_get(resp, "result"), "content"), 0);
    const char *t = json_string_value(json_object_get(c, "text"));
    return t ? t : "";
}

static size_t in_flight(void)
{
    size_t n = 0;
    return tm_upstream_in_flight(U, &n) == 0 ? n : (size_t)-1;
}

static unsigned generation(void)
{
    unsigned g = 0;
    return tm_upstream_generation(U, &g) == 0 ? g : 0;
}

static int call(const char *tag, json_t *id, const char *tool, json_t *args, const char *token,
                unsigned flags)
{
    json_t *params = json_pack("{s:s,s:o}", "name", tool, "arguments", args);
    if (token)
        json_object_set_new(params, "_meta", json_pack("{s:s}", "progressToken", token));
    json_t *req = json_pack("{s:s,s:o,s:s,s:o}", "jsonrpc", "2.0", "id", id, "method", "tools/call",
                            "params", params);
    int rc = tm_upstream_request(U, req, flags, (void *)tag);
    json_decref(req);
    return rc;
}

static void phase_basics(void)
{
    json_t *req = json_pack("{s:s,s:i,s:s,s:{}}", "jsonrpc", "2.0", "id", 1, "method", "tools/list", "params");
    CHECK(tm_upstream_request(U, req, TM_UPSTREAM_RESEND, "list") == 0, "tools/list sent");
    CHECK(tm_upstream_request(U, req, 0, "list") == TIDEMARK_EEXIST, "a tag in flight is refused");
    json_decref(req);
    CHECK(wait_for(has_response, "list"), "tools/list answered");
    json_t *r = response_of("list");
    CHECK(json_integer_value(json_object_get(r, "id")) == 1, "the response carries the client's id 1");
    json_t *tools = json_object_get(json_object_get(r, "result"), "tools");
    int echo = 0, longop = 0, sampling = 0;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        const char *n = json_string_value(json_object_get(t, "name"));
        echo |= n && strcmp(n, "echo") == 0;
        longop |= n && strcmp(n, "trigger-long-running-operation") == 0;
        sampling |= n && strcmp(n, "trigger-sampling-request") == 0;
    }
    CHECK(echo && longop && sampling, "tools: echo, trigger-long-running-operation, trigger-sampling-request "
                                      "(the last only for a client with sampling: the params were sent)");
    json_decref(r);
    /* Two clients, the same request id, at once. */
    CHECK(call("echoA", json_integer(7), "echo", json_pack("{s:s}", "message", "from A"), NULL, 0) == 0 &&
              call("echoB", json_integer(7), "echo", json_pack("{s:s}", "message", "from B"), NULL, 0) == 0,
          "two echo calls with the same client id 7");
    CHECK(wait_for(has_response, "echoA") && wait_for(has_response, "echoB"), "both answered");
    json_t *a = response_of("echoA"), *b = response_of("echoB");
    CHECK(strcmp(first_text(a), "Echo: from A") == 0 && strcmp(first_text(b), "Echo: from B") == 0,
          "each gets its own answer (%s / %s)", first_text(a), first_text(b));
    CHECK(json_integer_value(json_object_get(a, "id")) == 7 && json_integer_value(json_object_get(b, "id")) == 7,
          "both with id 7 again");
    json_decref(a);
    json_decref(b);
    CHECK(call("echoS", json_string("str-id"), "echo", json_pack("{s:s}", "message", "hi"), NULL, 0) == 0 &&
              wait_for(has_response, "echoS"),
          "echo with a string id answered");
    r = response_of("echoS");
    CHECK(strcmp(json_string_value(json_object_get(r, "id")), "str-id") == 0 && strcmp(first_text(r), "Echo: hi") == 0,
          "id \"str-id\", text \"%s\"", first_text(r));
    json_decref(r);
}

static void phase_progress(void)
{
    CHECK(call("long1", json_integer(8), "trigger-long-running-operation",
               json_pack("{s:f,s:i}", "duration", 0.8, "steps", 4), "client-token", 0) == 0 &&
              wait_for(has_response, "long1"),
          "a long-running call with a progress token answered");
    pthread_mutex_lock(&mu);
    json_t *p = json_incref(json_object_get(progress, "long1"));
    pthread_mutex_unlock(&mu);
    CHECK(json_array_size(p) == 4, "4 progress notifications for it (%zu)", json_array_size(p));
    int tokens_ok = 1;
    size_t i;
    json_t *n;
    json_array_foreach(p, i, n)
    {
        json_t *params = json_object_get(n, "params");
        const char *tok = json_string_value(json_object_get(params, "progressToken"));
        tokens_ok &= tok && strcmp(tok, "client-token") == 0 &&
                     json_integer_value(json_object_get(params, "progress")) == (json_int_t)i + 1;
    }
    CHECK(tokens_ok, "each with the client's token restored and progress 1..4");
    json_decref(p);
}

static void phase_sampling(void)
{
    CHECK(call("sample", json_integer(9), "trigger-sampling-request",
               json_pack("{s:s,s:i}", "prompt", "say hi", "maxTokens", 5), NULL, 0) == 0,
          "the sampling tool called");
    want_req w = {"sampling/createMessage", 1};
    CHECK(wait_for(has_request, &w), "the child asks sampling/createMessage");
    pthread_mutex_lock(&mu);
    json_t *r = json_incref(find_request(&w));
    pthread_mutex_unlock(&mu);
    json_t *id = json_object_get(json_object_get(r, "msg"), "id");
    json_t *ans = json_pack("{s:s,s:O,s:{s:s,s:{s:s,s:s},s:s,s:s}}", "jsonrpc", "2.0", "id", id, "result",
                            "role", "assistant", "content", "type", "text", "text", "sampled-by-test", "model",
                            "test-model", "stopReason", "endTurn");
    CHECK(tm_upstream_answer(U, 1, ans) == 0, "answered through tm_upstream_answer");
    CHECK(tm_upstream_answer(U, 1, ans) == TIDEMARK_ENOTFOUND, "a second answer is refused");
    json_decref(ans);
    json_decref(r);
    CHECK(wait_for(has_response, "sample"), "the sampling tool answered");
    json_t *resp = response_of("sample");
    CHECK(strstr(first_text(resp), "sampled-by-test") != NULL, "its result holds our sampling answer");
    json_decref(resp);
    want_req roots = {"roots/list", 1};
    CHECK(wait_for(has_request, &roots), "the child asked roots/list (answered in the callback)");
}

static void phase_cancel(void)
{
    CHECK(call("cancelme", json_integer(10), "trigger-long-running-operation",
               json_pack("{s:i,s:i}", "duration", 30, "steps", 30), "tok-c", 0) == 0,
          "a 30 s call");
    CHECK(wait_for(has_progress, "cancelme"), "it is running (progress came)");
    size_t before = in_flight();
    CHECK(tm_upstream_cancel(U, "cancelme", "test") == 0, "cancelled");
    CHECK(in_flight() == before - 1, "no longer in flight");
    CHECK(tm_upstream_cancel(U, "cancelme", NULL) == TIDEMARK_ENOTFOUND, "cancelling again: not found");
}

static void phase_crash(void)
{
    pid_t pid1 = 0;
    CHECK(tm_upstream_pid(U, &pid1) == 0 && pid1 > 0, "the child runs as pid %d", (int)pid1);
    CHECK(call("doomed", json_integer(11), "trigger-long-running-operation",
               json_pack("{s:i,s:i}", "duration", 30, "steps", 30), "tok-d", 0) == 0 &&
              call("safe", json_integer(12), "trigger-long-running-operation",
                   json_pack("{s:i,s:i}", "duration", 4, "steps", 4), "tok-s", TM_UPSTREAM_RESEND) == 0,
          "an unsafe 30 s call and a safe 4 s one");
    CHECK(wait_for(has_progress, "doomed") && wait_for(has_progress, "safe"), "both running (progress came)");
    CHECK(kill(pid1, SIGKILL) == 0, "the child SIGKILLed mid-call");
    size_t one = 1, two = 2;
    CHECK(wait_for(n_downs, &one), "on_down");
    pthread_mutex_lock(&mu);
    json_t *d = json_incref(json_array_get(downs, 0));
    pthread_mutex_unlock(&mu);
    CHECK(json_integer_value(json_object_get(d, "gen")) == 1 && json_integer_value(json_object_get(d, "signal")) == SIGKILL &&
              json_integer_value(json_object_get(d, "restarting")) == 1 &&
              json_integer_value(json_object_get(d, "pid")) == pid1,
          "generation 1, pid %d, SIGKILL, restarting", (int)pid1);
    json_decref(d);
    CHECK(wait_for(has_lost, "doomed"), "the unsafe call is reported lost");
    pthread_mutex_lock(&mu);
    json_t *l = json_incref(json_object_get(lost, "doomed"));
    pthread_mutex_unlock(&mu);
    CHECK(json_integer_value(json_object_get(l, "err")) == TIDEMARK_ECLOSED &&
              json_integer_value(json_object_get(l, "id")) == 11,
          "TIDEMARK_ECLOSED, with the client's request (id 11)");
    json_decref(l);
    CHECK(wait_for(n_readies, &two), "on_ready: generation 2");
    pthread_mutex_lock(&mu);
    json_t *rd = json_incref(json_array_get(readies, 1));
    pthread_mutex_unlock(&mu);
    const char *sname = json_string_value(json_object_get(json_object_get(json_object_get(rd, "result"), "serverInfo"), "name"));
    CHECK(json_integer_value(json_object_get(rd, "gen")) == 2 && sname && strcmp(sname, "mcp-servers/everything") == 0,
          "re-initialized (serverInfo %s)", sname ? sname : "?");
    json_decref(rd);
    pid_t pid2 = 0;
    CHECK(tm_upstream_pid(U, &pid2) == 0 && pid2 > 0 && pid2 != pid1, "a new child, pid %d", (int)pid2);
    CHECK(waitpid(pid1, NULL, WNOHANG) == -1 && errno == ECHILD, "the old one reaped");
    want_req roots2 = {"roots/list", 2};
    CHECK(wait_for(has_request, &roots2), "the new child asks roots/list: it got the recorded capabilities");
    CHECK(wait_for(has_response, "safe"), "the safe call, re-sent, is answered by the new child");
    json_t *s = response_of("safe");
    CHECK(strstr(first_text(s), "Duration: 4 seconds, Steps: 4") && json_integer_value(json_object_get(s, "id")) == 12,
          "its result (\"%s\"), id 12", first_text(s));
    json_decref(s);
    pthread_mutex_lock(&mu);
    json_t *p = json_incref(json_object_get(progress, "safe"));
    pthread_mutex_unlock(&mu);
    int ok = json_array_size(p) >= 5;
    size_t i;
    json_t *n;
    json_array_foreach(p, i, n)
        ok &= strcmp(json_string_value(json_object_get(json_object_get(n, "params"), "progressToken")), "tok-s") == 0;
    CHECK(ok, "its progress from both children, all with the client's token (%zu)", json_array_size(p));
    json_decref(p);
    CHECK(call("echo2", json_integer(13), "echo", json_pack("{s:s}", "message", "after restart"), NULL, 0) == 0 &&
              wait_for(has_response, "echo2"),
          "echo after the restart");
    json_t *e = response_of("echo2");
    CHECK(strcmp(first_text(e), "Echo: after restart") == 0, "\"%s\"", first_text(e));
    json_decref(e);
    json_t *stale = json_pack("{s:s,s:i,s:{}}", "jsonrpc", "2.0", "id", 0, "result");
    CHECK(tm_upstream_answer(U, 1, stale) == TIDEMARK_ENOTFOUND, "an answer for generation 1 is refused");
    json_decref(stale);
    json_t *late = response_of("doomed");
    CHECK(!late && generation() == 2, "the lost call never got a response");
}

static void phase_free(void)
{
    CHECK(call("atfree", json_integer(14), "trigger-long-running-operation",
               json_pack("{s:i,s:i}", "duration", 30, "steps", 30), "tok-f", TM_UPSTREAM_RESEND) == 0 &&
              wait_for(has_progress, "atfree"),
          "a call running at free");
    pid_t pid = 0;
    CHECK(tm_upstream_pid(U, &pid) == 0 && pid > 0, "child pid %d", (int)pid);
    tm_upstream_free(U);
    U = NULL;
    json_t *l = json_object_get(lost, "atfree");
    CHECK(l && json_integer_value(json_object_get(l, "err")) == TIDEMARK_ECANCELED, "lost as TIDEMARK_ECANCELED");
    CHECK(waitpid(pid, NULL, WNOHANG) == -1 && errno == ECHILD, "the child is reaped");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s COMMAND [ARGS...]\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_DFL); /* the transport must not need SIGPIPE ignored */
    responses = json_object();
    progress = json_object();
    lost = json_object();
    requests = json_array();
    readies = json_array();
    downs = json_array();
    json_t *init = json_pack("{s:s,s:{s:{},s:{s:b}},s:{s:s,s:s}}", "protocolVersion", "2025-11-25",
                             "capabilities", "sampling", "roots", "listChanged", 1, "clientInfo", "name",
                             "tidemark-gateway-test", "version", "0");
    tm_upstream_config cfg = {
        .argv = (const char *const *)argv + 1, .name = "everything", .init_params = init,
        .init_timeout_ms = 20000, .restart_delay_ms = 50,
        .cb = {.on_ready = on_ready, .on_response = on_response, .on_notification = on_notification,
               .on_request = on_request, .on_lost = on_lost, .on_down = on_down},
    };
    int rc = tm_upstream_start(&cfg, &U);
    CHECK(rc == 0, "spawned and initialized (%s)", tidemark_strerror(rc));
    json_t *res = NULL;
    CHECK(tm_upstream_init_result(U, &res) == 0 && json_is_object(json_object_get(res, "capabilities")) &&
              json_array_size(readies) == 1,
          "the initialize result kept; on_ready for generation 1");
    json_decref(res);
    phase_basics();
    phase_progress();
    phase_sampling();
    phase_cancel();
    phase_crash();
    phase_free();
    json_decref(init);
    json_decref(responses);
    json_decref(progress);
    json_decref(lost);
    json_decref(requests);
    json_decref(readies);
    json_decref(downs);
    printf("1..%d\n", checks);
    return 0;
}
