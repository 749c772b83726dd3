/* test_stdio_upstream.c - the upstream session's edges (src/gateway/upstream.c)
 * against tests/integration/gateway_fake_child.mjs, a stdio server that
 * misbehaves on demand: a refused, a fatal and an unanswered initialize,
 * the child-side id and the recorded params as the child saw them,
 * notifications/initialized before any request, garbage on stdout, a
 * batch (2025-03-26) taken apart with its progress token mapped, the
 * resend limit across two deaths, giving up after failed restarts, and no
 * restart at all. Usage: test_stdio_upstream NODE FAKE_CHILD_MJS. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

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
#include <unistd.h>

static const char *g_node, *g_script;

typedef struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    json_t *responses, *lost, *downs, *readies, *notes;
} rec;

static void rec_init(rec *r)
{
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->responses = json_object();
    r->lost = json_object();
    r->downs = json_array();
    r->readies = json_array();
    r->notes = json_object();
}

static void rec_free(rec *r)
{
    json_decref(r->responses);
    json_decref(r->lost);
    json_decref(r->downs);
    json_decref(r->readies);
    json_decref(r->notes);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

static void put(rec *r, json_t *container, const char *key, json_t *v)
{
    pthread_mutex_lock(&r->mu);
    if (key)
        json_object_set_new(container, key, v);
    else
        json_array_append_new(container, v);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void on_ready(void *ud, unsigned gen, json_t *result)
{
    (void)result;
    rec *r = ud;
    put(r, r->readies, NULL, json_integer(gen));
}

static void on_response(void *ud, void *tag, json_t *resp)
{
    rec *r = ud;
    put(r, r->responses, tag, json_incref(resp));
}

static void on_lost(void *ud, void *tag, const json_t *req, int err)
{
    (void)req;
    rec *r = ud;
    put(r, r->lost, tag, json_integer(err));
}

/* Notifications tied to a request: the last one per tag. */
static void on_notification(void *ud, void *tag, json_t *msg)
{
    rec *r = ud;
    if (tag)
        put(r, r->notes, tag, json_incref(msg));
}

static void on_down(void *ud, unsigned gen, const tm_child_exit *ex, int restarting)
{
    rec *r = ud;
    put(r, r->downs, NULL, json_pack("{s:i,s:i,s:i}", "gen", (int)gen, "status", ex->status, "restarting", restarting));
}

/* Wait up to 15 s until container has key (or, key NULL, n entries). */
static void wait_has(rec *r, json_t *container, const char *key, size_t n)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 15;
    pthread_mutex_lock(&r->mu);
    int ok;
    while (!(ok = key ? json_object_get(container, key) != NULL : json_array_size(container) >= n))
        if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&r->mu);
    if (!ok)
        fail_msg("waited 15 s for %s", key ? key : "entries");
}

static json_t *init_params(void)
{
    return json_pack("{s:s,s:{s:{}},s:{s:s,s:s}}", "protocolVersion", "2025-11-25", "capabilities",
                     "elicitation", "clientInfo", "name", "recorded-client", "version", "3");
}

static int start(rec *r, const char *mode, const char *fail_file, tm_upstream_config *over, tm_upstream **u)
{
    const char *argv[] = {g_node, g_script, mode, fail_file, NULL};
    json_t *init = init_params();
    tm_upstream_config cfg = {.argv = argv, .name = "fake", .init_params = init, .init_timeout_ms = 10000,
                              .restart_delay_ms = 20, .kill_grace_ms = 500};
    if (over) {
        cfg.init_timeout_ms = over->init_timeout_ms ? over->init_timeout_ms : cfg.init_timeout_ms;
        cfg.max_restarts = over->max_restarts;
        cfg.max_resends = over->max_resends;
        cfg.no_restart = over->no_restart;
    }
    cfg.cb = (tm_upstream_callbacks){.on_ready = on_ready, .on_response = on_response, .on_lost = on_lost,
                                     .on_down = on_down, .on_notification = on_notification, .ud = r};
    int rc = tm_upstream_start(&cfg, u);
    json_decref(init);
    return rc;
}

static int call(tm_upstream *u, const char *tag, json_t *id, const char *tool, unsigned flags)
{
    json_t *req = json_pack("{s:s,s:o,s:s,s:{s:s,s:{}}}", "jsonrpc", "2.0", "id", id, "method", "tools/call",
                            "params", "name", tool, "arguments");
    int rc = tm_upstream_request(u, req, flags, (void *)tag);
    json_decref(req);
    return rc;
}

static size_t in_flight(tm_upstream *u)
{
    size_t n = 0;
    assert_int_equal(tm_upstream_in_flight(u, &n), 0);
    return n;
}

static unsigned generation(tm_upstream *u)
{
    unsigned g = 0;
    assert_int_equal(tm_upstream_generation(u, &g), 0);
    return g;
}

static void assert_no_children(void)
{
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

static json_t *structured(rec *r, const char *tag)
{
    pthread_mutex_lock(&r->mu);
    json_t *s = json_object_get(json_object_get(json_object_get(r->responses, tag), "result"), "structuredContent");
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* A refused, a fatal and an unanswered initialize, and no program at all:
 * typed errors, nothing left running. */
static void test_start_failures(void **state)
{
    (void)state;
    rec r;
    rec_init(&r);
    tm_upstream *u = NULL;
    assert_int_equal(start(&r, "refuse-init", NULL, NULL, &u), TIDEMARK_EPEER);
    assert_null(u);
    assert_int_equal(start(&r, "die-at-init", NULL, NULL, &u), TIDEMARK_ECLOSED);
    tm_upstream_config quick = {.init_timeout_ms = 700};
    assert_int_equal(start(&r, "silent", NULL, &quick, &u), TIDEMARK_ETIMEDOUT);
    const char *argv[] = {"/nonexistent/tm-fake", NULL};
    json_t *init = init_params();
    tm_upstream_config cfg = {.argv = argv, .init_params = init};
    assert_int_equal(tm_upstream_start(&cfg, &u), TIDEMARK_ENOTFOUND);
    cfg.init_params = NULL;
    assert_int_equal(tm_upstream_start(&cfg, &u), TIDEMARK_EINVAL);
    json_decref(init);
    assert_int_equal(json_array_size(r.readies), 0);
    assert_no_children();
    rec_free(&r);
}

/* The child sees our integer id, not the client's; notifications/initialized
 * before the first request; the recorded params as given. Garbage lines on
 * the child's stdout do not end the session. Not a request: refused. */
static void test_mapping_and_garbage(void **state)
{
    (void)state;
    rec r;
    rec_init(&r);
    tm_upstream *u = NULL;
    assert_int_equal(start(&r, "ok", NULL, NULL, &u), 0);
    assert_int_equal(call(u, "e1", json_string("client-id"), "echo", 0), 0);
    wait_has(&r, r.responses, "e1", 0);
    json_t *s = structured(&r, "e1");
    assert_true(json_is_integer(json_object_get(s, "idSeen")));
    assert_true(json_is_true(json_object_get(s, "initialized")));
    json_t *want = init_params();
    assert_true(json_equal(json_object_get(s, "initParams"), want));
    json_decref(want);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.responses, "e1"), "id")), "client-id");
    assert_int_equal(call(u, "g1", json_integer(2), "garbage", 0), 0);
    wait_has(&r, r.responses, "g1", 0);
    json_t *breq = json_pack("{s:s,s:i,s:s,s:{s:s,s:{},s:{s:s}}}", "jsonrpc", "2.0", "id", 4, "method",
                             "tools/call", "params", "name", "batch", "arguments", "_meta", "progressToken",
                             "my-token");
    assert_int_equal(tm_upstream_request(u, breq, 0, "b1"), 0);
    json_decref(breq);
    wait_has(&r, r.responses, "b1", 0);
    pthread_mutex_lock(&r.mu);
    json_t *bn = json_object_get(r.notes, "b1");
    assert_non_null(bn); /* the batch's notification came first, mapped to b1 */
    assert_string_equal(json_string_value(json_object_get(json_object_get(bn, "params"), "progressToken")),
                        "my-token");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r.responses, "b1"), "id")), 4);
    pthread_mutex_unlock(&r.mu);
    assert_int_equal(call(u, "e2", json_integer(3), "echo", 0), 0);
    wait_has(&r, r.responses, "e2", 0);
    assert_true(json_integer_value(json_object_get(structured(&r, "e2"), "idSeen")) >
                json_integer_value(json_object_get(s, "idSeen")));
    json_t *note = json_pack("{s:s,s:s}", "jsonrpc", "2.0", "method", "notifications/roots/list_changed");
    assert_int_equal(tm_upstream_request(u, note, 0, "n"), TIDEMARK_EINVAL);
    assert_int_equal(tm_upstream_notify(u, note), 0);
    json_decref(note);
    assert_int_equal(in_flight(u), 0);
    tm_upstream_free(u);
    assert_int_equal(json_array_size(r.downs), 0); /* stopping is not a death */
    assert_no_children();
    rec_free(&r);
}

/* A safe request that kills every child it reaches: re-sent once
 * (max_resends 1), then lost; the third child serves. A request made while
 * a child is being restarted waits for it. */
static void test_resend_limit(void **state)
{
    (void)state;
    rec r;
    rec_init(&r);
    tm_upstream *u = NULL;
    tm_upstream_config over = {.max_resends = 1};
    assert_int_equal(start(&r, "ok", NULL, &over, &u), 0);
    assert_int_equal(call(u, "poison", json_integer(1), "crash", TM_UPSTREAM_RESEND), 0);
    wait_has(&r, r.downs, NULL, 1);
    /* safe too: the restarted child may read it after the poison and die */
    assert_int_equal(call(u, "during", json_integer(2), "echo", TM_UPSTREAM_RESEND), 0);
    wait_has(&r, r.lost, "poison", 0);
    assert_int_equal(json_integer_value(json_object_get(r.lost, "poison")), TIDEMARK_ECLOSED);
    wait_has(&r, r.responses, "during", 0);
    wait_has(&r, r.readies, NULL, 3);
    pthread_mutex_lock(&r.mu);
    assert_int_equal(json_array_size(r.downs), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(r.downs, 1), "status")), 1);
    assert_null(json_object_get(r.responses, "poison"));
    pthread_mutex_unlock(&r.mu);
    assert_int_equal(generation(u), 3);
    assert_int_equal(call(u, "after", json_integer(3), "echo", 0), 0);
    wait_has(&r, r.responses, "after", 0);
    assert_true(json_is_true(json_object_get(structured(&r, "after"), "initialized")));
    tm_upstream_free(u);
    assert_no_children();
    rec_free(&r);
}

/* The restarted child cannot start (exits 7): after max_restarts attempts
 * the upstream gives up, the waiting request is lost, new ones refused. */
static void test_give_up(void **state)
{
    (void)state;
    char fail_file[] = "/tmp/tm-upstream-fail-XXXXXX";
    int fd = mkstemp(fail_file);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(unlink(fail_file), 0);
    rec r;
    rec_init(&r);
    tm_upstream *u = NULL;
    tm_upstream_config over = {.max_restarts = 3};
    assert_int_equal(start(&r, "ok", fail_file, &over, &u), 0);
    FILE *f = fopen(fail_file, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(call(u, "safe", json_integer(1), "crash", TM_UPSTREAM_RESEND), 0);
    wait_has(&r, r.lost, "safe", 0);
    assert_int_equal(json_integer_value(json_object_get(r.lost, "safe")), TIDEMARK_ECLOSED);
    assert_int_equal(generation(u), 4); /* the first and three failed starts */
    assert_int_equal(call(u, "late", json_integer(2), "echo", 0), TIDEMARK_ECLOSED);
    pthread_mutex_lock(&r.mu);
    assert_int_equal(json_array_size(r.downs), 1);
    assert_int_equal(json_array_size(r.readies), 1);
    pthread_mutex_unlock(&r.mu);
    tm_upstream_free(u);
    assert_int_equal(unlink(fail_file), 0);
    assert_no_children();
    rec_free(&r);
}

/* no_restart: the death is final; what was in flight is lost. */
static void test_no_restart(void **state)
{
    (void)state;
    rec r;
    rec_init(&r);
    tm_upstream *u = NULL;
    tm_upstream_config over = {.no_restart = 1};
    assert_int_equal(start(&r, "ok", NULL, &over, &u), 0);
    assert_int_equal(call(u, "x", json_integer(1), "crash", TM_UPSTREAM_RESEND), 0);
    wait_has(&r, r.lost, "x", 0);
    wait_has(&r, r.downs, NULL, 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(r.downs, 0), "restarting")), 0);
    assert_int_equal(call(u, "y", json_integer(2), "echo", 0), TIDEMARK_ECLOSED);
    pid_t pid = 1;
    assert_int_equal(tm_upstream_pid(u, &pid), 0);
    assert_int_equal(pid, 0);
    tm_upstream_free(u);
    assert_no_children();
    rec_free(&r);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s NODE FAKE_CHILD_MJS\n", argv[0]);
        return 2;
    }
    g_node = argv[1];
    g_script = argv[2];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_failures),
        cmocka_unit_test(test_mapping_and_garbage),
        cmocka_unit_test(test_resend_limit),
        cmocka_unit_test(test_give_up),
        cmocka_unit_test(test_no_restart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
