/*
 * tasks.c - a tools/call the server answered with a task (the
 * io.modelcontextprotocol/tasks extension, 2026-07-28): the task id is
 * committed to the call's outstanding row before anything else is done
 * with it; tasks/get is polled at the task's pollIntervalMs until the task
 * ends (through cuts, restarts of the server and of this client: a resume
 * polls the same task); inputRequests of an input_required task are put to
 * the application once each and answered with tasks/update; the outcome is
 * applied once, in one transaction with the end of the outstanding row.
 */
#include "client_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../common/txn.h"
#include "../mcp/jsonrpc.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TASK_ID_MAX 256
/* Polling intervals the client keeps to, whatever the server suggests. */
#define POLL_MIN_MS 20
#define POLL_MAX_MS 30000
#define POLL_DEFAULT_MS 500

static int status_is(json_t *task, const char *s)
{
    const char *v = json_string_value(json_object_get(task, "status"));
    return v && !strcmp(v, s);
}

static int terminal(json_t *task)
{
    return status_is(task, "completed") || status_is(task, "failed") ||
           status_is(task, "cancelled");
}

/* A task id this client can keep and send back: 1..256 printable bytes. */
static int id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > TASK_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)id[i] < 0x20 || (unsigned char)id[i] == 0x7f)
            return 0;
    return 1;
}

/* Sleep ms unless the client stops first (then 1). */
static int nap(tidemark_client_t *c, long ms)
{
    int64_t until = tm_now_ms() + ms;
    pthread_mutex_lock(&c->mu);
    while (!c->stopping && tm_now_ms() < until) {
        struct timespec ts = tm_deadline_ms(until - tm_now_ms());
        int rc = pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        if (rc != 0 && rc != ETIMEDOUT)
            break;
    }
    int stopping = c->stopping;
    pthread_mutex_unlock(&c->mu);
    return stopping;
}

static long poll_interval(json_t *task)
{
    json_t *v = json_object_get(task, "pollIntervalMs");
    json_int_t ms = json_is_integer(v) ? json_integer_value(v) : POLL_DEFAULT_MS;
    return ms < POLL_MIN_MS ? POLL_MIN_MS : ms > POLL_MAX_MS ? POLL_MAX_MS : (long)ms;
}

/* A request of the tasks extension (tasks/get, update, cancel) for task id. */
static int task_request(tidemark_client_t *c, const char *method, const char *id, json_t *extra,
                        json_t **result)
{
    json_t *p = json_pack("{s:s}", "taskId", id);
    if (p && extra && json_object_update(p, extra) != 0) {
        json_decref(p);
        p = NULL;
    }
    if (!p)
        return TIDEMARK_ENOMEM;
    int rc = tm_request_once(c, method, p, NULL, NULL, result);
    json_decref(p);
    return rc;
}

/* Whether a failed request of the tasks extension may simply be tried
 * again: anything but the server saying the task is gone (not found,
 * expired) or the request itself is wrong (-32602 otherwise, -32600,
 * -32601). A tasks/get repeats nothing, and ending the call on an error
 * that may pass (a 500, a store down) would lose a task that may still end. */
static int transient(int rc, json_t *err)
{
    if (rc != TIDEMARK_EPEER)
        return rc != TIDEMARK_ECANCELED && rc != TIDEMARK_ENOMEM;
    json_int_t code = json_integer_value(json_object_get(err, "code"));
    return code != -32602 && code != -32600 && code != -32601;
}

/* Answer the inputRequests of an input_required task not answered before
 * (by this process or one before it), with one tasks/update. A key is
 * marked answered only after the server acknowledged: a crash in between
 * asks the application again, never leaves the task waiting. */
static int answer_inputs(tidemark_client_t *c, const char *id, json_t *requests, json_t **err)
{
    json_t *responses = json_object();
    const char *key;
    json_t *req;
    int rc = responses ? 0 : TIDEMARK_ENOMEM;
    json_object_foreach(requests, key, req) {
        int done = 0;
        if (rc || (rc = tm_cstate_task_input_answered(c->st, id, key, &done)) != 0 || done)
            continue;
        const char *method = json_string_value(json_object_get(req, "method"));
        json_t *params = json_object_get(req, "params"), *answer = NULL;
        if (!method || tm_answer_server_request(c, method, params, &answer) != 0) {
            json_decref(answer);
            tm_client_error(err, TM_RPC_INTERNAL_ERROR, "input_request_unsupported",
                            "the client cannot answer an input request of the task",
                            json_pack("{s:s,s:s}", "taskId", id, "key", key));
            rc = TIDEMARK_EPROTO;
        } else if (json_object_set_new(responses, key, answer) != 0) {
            rc = TIDEMARK_ENOMEM;
        }
    }
    if (!rc && json_object_size(responses) > 0) {
        json_t *extra = json_pack("{s:O}", "inputResponses", responses), *ack = NULL;
        rc = extra ? task_request(c, "tasks/update", id, extra, &ack) : TIDEMARK_ENOMEM;
        json_decref(extra);
        json_object_foreach(responses, key, req) if (!rc && tm_cstate_task_input_set(c->st, id, key))
            TM_WARN("client: task %s: answered input %s may be asked again", id, key);
        if (rc && !transient(rc, ack)) {
            tm_client_error(err, TM_RPC_INTERNAL_ERROR, "task_update_refused",
                            "the server refused the answers to the task's input requests",
                            json_pack("{s:s,s:O?}", "taskId", id, "error", ack));
            rc = TIDEMARK_EPROTO;
        } else if (rc) {
            rc = 0; /* asked again at the next poll */
        }
        json_decref(ack);
    }
    json_decref(responses);
    return rc;
}

/* Poll task id until it ends, the first time after wait_ms. Returns 0
 * with OUT task its terminal tasks/get result; TIDEMARK_EPEER with *err
 * the server's refusal of the task (not found, expired: final); else a
 * code with *err a typed error, the task still to be followed. */
static int poll_task(tidemark_client_t *c, const char *id, long wait_ms, int64_t deadline,
                     json_t **task, json_t **err)
{
    for (;;) {
        if (wait_ms && nap(c, wait_ms)) {
            tm_client_error(err, TM_RPC_INTERNAL_ERROR, "client_stopped", "the client is stopping",
                            json_pack("{s:s}", "taskId", id));
            return TIDEMARK_ECANCELED;
        }
        if (tm_now_ms() >= deadline) {
            tm_client_error(err, TM_RPC_INTERNAL_ERROR, "timeout",
                            "the task did not end before the deadline",
                            json_pack("{s:s}", "taskId", id));
            return TIDEMARK_ETIMEDOUT;
        }
        json_t *got = NULL;
        int rc = task_request(c, "tasks/get", id, NULL, &got);
        TM_CLIENT_CRASH_POINT("task_polled");
        if (rc == 0 && !json_is_string(json_object_get(got, "status"))) {
            json_decref(got);
            tm_client_error(err, TM_RPC_INTERNAL_ERROR, "malformed_task",
                            "the server's tasks/get result has no status",
                            json_pack("{s:s}", "taskId", id));
            return TIDEMARK_EPROTO;
        }
        if (rc && transient(rc, got)) {
            json_decref(got);
            wait_ms = c->cfg.backoff_ms;
            continue;
        }
        if (rc) {
            *err = got;
            return rc;
        }
        if (terminal(got)) {
            *task = got;
            return 0;
        }
        if (status_is(got, "input_required") &&
            (rc = answer_inputs(c, id, json_object_get(got, "inputRequests"), err)) != 0) {
            json_decref(got);
            return rc;
        }
        wait_ms = poll_interval(got);
        json_decref(got);
    }
}

/* The call's outcome from a terminal task. OUT out: the CallToolResult or
 * the error object; returns 0 or TIDEMARK_EPEER. */
static int outcome_of(const char *id, json_t *task, json_t **out)
{
    if (status_is(task, "completed")) {
        json_t *r = json_object_get(task, "result");
        *out = json_is_object(r) ? json_incref(r) : json_object();
        return 0;
    }
    json_t *e = json_object_get(task, "error");
    if (status_is(task, "failed") && json_is_object(e)) {
        *out = json_incref(e);
        return TIDEMARK_EPEER;
    }
    tm_client_error(out, TM_RPC_INTERNAL_ERROR,
                    status_is(task, "cancelled") ? "task_cancelled" : "task_failed",
                    status_is(task, "cancelled") ? "the task was cancelled" : "the task failed",
                    json_pack("{s:s,s:O?}", "taskId", id, "statusMessage",
                              json_object_get(task, "statusMessage")));
    return TIDEMARK_EPEER;
}

/* Apply the outcome once: on_event with the call's response as the event
 * "task:<id>", its dispatch row, the end of the outstanding row and of the
 * task's input keys, in one transaction (whatever the persistence mode:
 * there is no cursor to order it against). A dispatch row already there
 * means it was applied: only the row is ended. */
static int apply_once(tidemark_client_t *c, int64_t row_id, const char *id, int rc, json_t *out)
{
    char ev_id[TASK_ID_MAX + 8];
    snprintf(ev_id, sizeof ev_id, "task:%s", id);
    json_t *msg = json_pack("{s:s,s:I,s:O}", "jsonrpc", "2.0", "id", (json_int_t)row_id,
                            rc == 0 ? "result" : "error", out);
    if (!msg)
        return TIDEMARK_ENOMEM;
    int st = TM_DISPATCH_NONE;
    int trc = tm_cstate_begin(c->st);
    if (!trc)
        trc = tm_cstate_dispatch_state(c->st, ev_id, &st);
    if (!trc && st == TM_DISPATCH_NONE && c->cfg.on_event) {
        struct tidemark_txn txn;
        tm_txn_sqlite_init(&txn, tm_cstate_db(c->st));
        tidemark_event_t ev = {.id = ev_id, .stream = "", .seq = 0, .message = msg};
        trc = c->cfg.on_event(&txn, &ev, c->cfg.ud);
    }
    if (!trc)
        trc = tm_cstate_dispatch_set(c->st, ev_id, "", 0, TM_DISPATCH_COMMITTED);
    if (!trc)
        trc = tm_cstate_outstanding_done_txn(c->st, row_id);
    if (!trc)
        trc = tm_cstate_task_forget_txn(c->st, id);
    TM_CLIENT_CRASH_POINT("task_before_commit");
    if (trc) {
        tm_cstate_rollback(c->st);
    } else {
        trc = tm_cstate_commit(c->st);
    }
    json_decref(msg);
    return trc;
}

int tm_task_follow(tidemark_client_t *c, int64_t row_id, const char *id, long wait_ms,
                   json_t **result)
{
    json_decref(*result);
    *result = NULL;
    if (!id_ok(id)) { /* a state file written by hand, or damaged */
        tm_client_error(result, TM_RPC_INTERNAL_ERROR, "state_error",
                        "the saved task id cannot be used", NULL);
        return TIDEMARK_EIO;
    }
    json_t *task = NULL, *out = NULL;
    int rc = poll_task(c, id, wait_ms, tm_now_ms() + c->cfg.timeout_ms, &task, &out);
    if (rc == 0) {
        rc = outcome_of(id, task, &out);
        json_decref(task);
    } else if (rc != TIDEMARK_EPEER) {
        *result = out;
        return rc; /* not final: the row stays, a resume polls the task again */
    }
    int arc = apply_once(c, row_id, id, rc, out);
    if (arc) {
        json_decref(out);
        tm_client_error(result, TM_RPC_INTERNAL_ERROR,
                        arc == TIDEMARK_EIO ? "state_error" : "dispatch_failed",
                        "the task's outcome could not be applied; a resume applies it",
                        json_pack("{s:s}", "taskId", id));
        return arc;
    }
    *result = out;
    return rc;
}

int tm_task_started(tidemark_client_t *c, rq *r)
{
    const char *id = tm_task_created(r->result);
    if (!id)
        return r->rc;
    if (!r->tasks || !id_ok(id)) {
        /* Never asked for, or unusable: an invalid answer, said so. */
        const char *why = r->tasks ? "malformed_task" : "unexpected_task";
        json_t *data = json_pack("{s:s}", "taskId", id);
        json_decref(r->result);
        r->result = NULL;
        tm_client_error(&r->result, TM_RPC_INTERNAL_ERROR, why,
                        r->tasks ? "the server's CreateTaskResult has no usable taskId"
                                 : "the server answered with a task the client did not declare",
                        data);
        return r->rc = TIDEMARK_EPROTO;
    }
    TM_CLIENT_CRASH_POINT("task_before_record");
    r->final = 0; /* the row ends with the task's outcome (apply_once) */
    if (tm_cstate_outstanding_task(c->st, r->row_id, id) != 0) {
        /* The call stays outstanding without its task: a resume re-issues
         * it under the same idempotency key, which names the same task. */
        json_t *data = json_pack("{s:s}", "taskId", id); /* id lives in r->result */
        json_decref(r->result);
        r->result = NULL;
        tm_client_error(&r->result, TM_RPC_INTERNAL_ERROR, "state_error",
                        "the task's id cannot be recorded in the client state", data);
        return r->rc = TIDEMARK_EIO;
    }
    TM_CLIENT_CRASH_POINT("task_recorded");
    char keep[TASK_ID_MAX + 1];
    snprintf(keep, sizeof keep, "%s", id);
    long first = poll_interval(r->result);
    return r->rc = tm_task_follow(c, r->row_id, keep, first, &r->result);
}

int tidemark_client_cancel_task(tidemark_client_t *c, const char *task_id, json_t **err)
{
    if (!c || !task_id)
        return TIDEMARK_EINVAL;
    if (err)
        *err = NULL;
    if (!id_ok(task_id))
        return TIDEMARK_EINVAL;
    json_t *res = NULL;
    int rc = task_request(c, "tasks/cancel", task_id, NULL, &res);
    if (rc && err)
        *err = res;
    else
        json_decref(res);
    return rc;
}
