/*
 * demo_tools.c - the demo tools:
 *   echo          {text}          returns the text
 *   stream        {n, delay_ms?, close_after?}  sends n progress notifications,
 *                                 then returns; with close_after=k it ends its SSE
 *                                 connection after k of them (SEP-1699 polling):
 *                                 the client must resume with Last-Event-ID
 *   ledger_append {entry, delay_ms?}  appends one ledger row on the atomic path
 *                                 (tidemark_txn_insert, so on every store incl.
 *                                 Redis; not idempotent: exactly once per request)
 *   ledger_read   {entry?}        the ledger rows (all, or those with that entry)
 *   external_call {delay_ms}      stands for a call to an outside system that
 *                                 cannot be rolled back: neither idempotent nor
 *                                 atomic, so a crash mid-call ends it with a
 *                                 typed outcome_unknown, never a silent re-run
 */
#include "demo_tools.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int tool_echo(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)call;
    (void)ud;
    json_t *text = json_object_get(args, "text");
    if (!json_is_string(text)) {
        *result = tidemark_result_error("argument 'text' (string) is required");
        return 0;
    }
    *result = tidemark_result_text(json_string_value(text));
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* The most events a stream call writes on the I/O thread that read it. */
#define STREAM_INLINE_MAX 64

static int tool_stream(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)ud;
    json_t *jn = json_object_get(args, "n");
    json_t *jd = json_object_get(args, "delay_ms");
    if (!json_is_integer(jn) || json_integer_value(jn) < 0 || json_integer_value(jn) > 10000 ||
        (jd && (!json_is_integer(jd) || json_integer_value(jd) < 0 ||
                json_integer_value(jd) > 60000))) {
        *result = tidemark_result_error("arguments: n (integer 0..10000), delay_ms (0..60000)");
        return 0;
    }
    long n = (long)json_integer_value(jn), delay = jd ? (long)json_integer_value(jd) : 0;
    json_t *jc = json_object_get(args, "close_after");
    long close_after = json_is_integer(jc) ? (long)json_integer_value(jc) : -1;
    /* It sleeps, it is polled, or it writes more than a few events (10,000
     * inline held an I/O thread, and every connection it serves, for tens
     * of milliseconds): on a worker. */
    if ((delay || close_after >= 0 || n > STREAM_INLINE_MAX) && tidemark_call_is_inline(call))
        return TIDEMARK_EAGAIN;
    for (long i = 1; i <= n; i++) {
        if (tidemark_call_cancelled(call))
            return TIDEMARK_ECANCELED;
        if (delay)
            sleep_ms(delay);
        tidemark_call_progress(call, (double)i, (double)n, NULL);
        if (i == close_after)
            tidemark_call_close_stream(call);
    }
    char text[64];
    snprintf(text, sizeof text, "streamed %ld", n);
    *result = tidemark_result_text(text);
    return 0;
}

typedef struct ledger_row {
    json_t *row; /* {session, request_key, entry, created_ms} */
} ledger_row;

static void ledger_row_free(void *p)
{
    ledger_row *r = p;
    json_decref(r->row);
    free(r);
}

/* Runs inside the store transaction (on Redis: the script) that commits the
 * tool's result: the row and the result land together or not at all. */
static int ledger_insert(tidemark_txn_t *txn, void *ud)
{
    ledger_row *r = ud;
    return tidemark_txn_insert(txn, "ledger", r->row);
}

static int tool_ledger_append(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)ud;
    const char *entry = json_string_value(json_object_get(args, "entry"));
    if (!entry) {
        *result = tidemark_result_error("argument 'entry' (string) is required");
        return 0;
    }
    json_t *jd = json_object_get(args, "delay_ms");
    long delay = json_is_integer(jd) ? (long)json_integer_value(jd) : 0;
    if (delay < 0 || delay > 60000) {
        *result = tidemark_result_error("delay_ms must be 0..60000");
        return 0;
    }
    if (delay && tidemark_call_is_inline(call))
        return TIDEMARK_EAGAIN; /* it will sleep: on a worker, please */
    if (delay) { /* widens the window between "started" and the commit, for tests */
        tidemark_call_progress(call, 0, 1, "working");
        sleep_ms(delay);
    }
    ledger_row *r = calloc(1, sizeof *r);
    if (!r)
        return TIDEMARK_ENOMEM;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    r->row = json_pack("{s:s,s:s,s:s,s:I}", "session", tidemark_call_session(call), "request_key",
                       tidemark_call_idempotency_key(call), "entry", entry, "created_ms",
                       (json_int_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
    if (!r->row) {
        ledger_row_free(r);
        return TIDEMARK_ENOMEM;
    }
    int rc = tidemark_call_set_effect(call, ledger_insert, r, ledger_row_free);
    if (rc) {
        ledger_row_free(r);
        return rc;
    }
    json_t *res = tidemark_result_text("appended");
    json_object_set_new(res, "structuredContent", json_pack("{s:s,s:s}", "entry", entry,
                                                            "key", tidemark_call_idempotency_key(call)));
    *result = res;
    return 0;
}

static int tool_ledger_read(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    tidemark_server_t *srv = ud;
    (void)call;
    json_t *entry = json_object_get(args, "entry");
    if (entry && !json_is_string(entry)) {
        *result = tidemark_result_error("argument 'entry' must be a string");
        return 0;
    }
    json_t *match = entry ? json_pack("{s:O}", "entry", entry) : NULL;
    json_t *rows = NULL;
    int rc = tidemark_server_rows(srv, "ledger", match, &rows);
    json_decref(match);
    if (rc)
        return rc;
    char text[64];
    snprintf(text, sizeof text, "%zu ledger rows", json_array_size(rows));
    json_t *res = tidemark_result_text(text);
    json_object_set_new(res, "structuredContent",
                        json_pack("{s:o,s:I}", "entries", rows, "count", (json_int_t)json_array_size(rows)));
    *result = res;
    return 0;
}

static int tool_external_call(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)ud;
    json_t *jd = json_object_get(args, "delay_ms");
    long delay = json_is_integer(jd) ? (long)json_integer_value(jd) : 0;
    if (delay < 0 || delay > 60000) {
        *result = tidemark_result_error("delay_ms must be 0..60000");
        return 0;
    }
    tidemark_call_progress(call, 0, 1, "calling out");
    for (long t = 0; t < delay; t += 10) {
        if (tidemark_call_cancelled(call))
            return TIDEMARK_ECANCELED;
        sleep_ms(delay - t < 10 ? delay - t : 10);
    }
    json_t *res = tidemark_result_text("external call done");
    json_object_set_new(res, "structuredContent",
                        json_pack("{s:s}", "idempotencyKey", tidemark_call_idempotency_key(call)));
    *result = res;
    return 0;
}

int demo_tools_register(tidemark_server_t *srv)
{
    const tidemark_tool_t echo = {
        .name = "echo",
        .description = "Returns its text argument as text content.",
        .input_schema = "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},"
                        "\"required\":[\"text\"]}",
        /* Pure: it runs on the thread that read the POST (server.h). */
        .hints = TIDEMARK_TOOL_READ_ONLY | TIDEMARK_TOOL_IDEMPOTENT | TIDEMARK_TOOL_NONBLOCKING,
        .fn = tool_echo,
    };
    const tidemark_tool_t stream = {
        .name = "stream",
        .description = "Sends n progress notifications (delay_ms apart), then returns.",
        .input_schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
                        "\"minimum\":0},\"delay_ms\":{\"type\":\"integer\",\"minimum\":0},"
                        "\"close_after\":{\"type\":\"integer\",\"minimum\":1}},\"required\":[\"n\"]}",
        /* Non-blocking unless delay_ms or close_after (TIDEMARK_EAGAIN). */
        .hints = TIDEMARK_TOOL_READ_ONLY | TIDEMARK_TOOL_IDEMPOTENT | TIDEMARK_TOOL_NONBLOCKING,
        .fn = tool_stream,
        .task = TIDEMARK_TASK_OPTIONAL, /* idempotent: a task cut by a crash runs again */
    };
    const tidemark_tool_t ledger_append = {
        .name = "ledger_append",
        .description = "Appends one entry to the ledger, exactly once per request (atomic path).",
        .input_schema = "{\"type\":\"object\",\"properties\":{\"entry\":{\"type\":\"string\"},"
                        "\"delay_ms\":{\"type\":\"integer\",\"minimum\":0}},\"required\":[\"entry\"]}",
        /* Non-blocking unless delay_ms (then TIDEMARK_EAGAIN): on one node
         * its call runs inline and commits once, effect included. */
        .hints = TIDEMARK_TOOL_ATOMIC | TIDEMARK_TOOL_NONBLOCKING,
        .fn = tool_ledger_append,
        .task = TIDEMARK_TASK_OPTIONAL, /* a task for clients with the tasks extension */
    };
    const tidemark_tool_t ledger_read = {
        .name = "ledger_read",
        .description = "Returns the ledger rows (all, or those whose entry equals 'entry').",
        .input_schema = "{\"type\":\"object\",\"properties\":{\"entry\":{\"type\":\"string\"}}}",
        .hints = TIDEMARK_TOOL_READ_ONLY | TIDEMARK_TOOL_IDEMPOTENT,
        .fn = tool_ledger_read,
        .ud = srv,
    };
    const tidemark_tool_t external_call = {
        .name = "external_call",
        .description = "Stands for a call to an outside system (not idempotent, not atomic); "
                       "takes delay_ms.",
        .input_schema = "{\"type\":\"object\",\"properties\":{\"delay_ms\":{\"type\":\"integer\","
                        "\"minimum\":0}}}",
        .hints = TIDEMARK_TOOL_OPEN_WORLD,
        .fn = tool_external_call,
        .task = TIDEMARK_TASK_OPTIONAL, /* a task for clients with the tasks extension */
    };
    int rc = tidemark_server_add_tool(srv, &external_call);
    if (!rc)
        rc = tidemark_server_add_tool(srv, &echo);
    if (!rc)
        rc = tidemark_server_add_tool(srv, &stream);
    if (!rc)
        rc = tidemark_server_add_tool(srv, &ledger_append);
    if (!rc)
        rc = tidemark_server_add_tool(srv, &ledger_read);
    return rc;
}
