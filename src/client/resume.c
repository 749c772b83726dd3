/*
 * resume.c - after a crash (or a stop, a timeout, a refusal): every request
 * the state file lists outstanding is driven to its outcome, each from its
 * stream's saved cursor, or re-sent under the re-send rules when no event
 * of it ever got through.
 */
#include "client_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../mcp/jsonrpc.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Load r's saved cursor for stream into *v: TM_V_DISPATCH, or another
 * verdict when the saved state itself proves a skipped event or holds a
 * cursor that cannot be read (OUT why: what was found). Returns nonzero
 * when the state cannot be read at all. */
static int load_cursor(tidemark_client_t *c, rq *r, const char *stream, tm_verdict *v,
                       json_t **why)
{
    snprintf(r->stream_key, sizeof r->stream_key, "%s", stream);
    tm_cursor cur;
    uint64_t last = 0;
    *v = TM_V_DISPATCH;
    int rc = tm_cstate_begin(c->st);
    if (rc)
        return rc;
    rc = tm_cstate_cursor_get(c->st, stream, &cur);
    if (rc == 0 && cur.known)
        rc = tm_cstate_last_dispatched(c->st, stream, &last);
    tm_cstate_rollback(c->st);
    if (rc) { /* unreadable: never resume from a cursor we cannot prove */
        *why = json_pack("{s:s,s:s}", "stream", stream, "detail", "saved cursor unreadable");
        *v = TM_V_BAD_ID;
        return 0;
    }
    if (!cur.known)
        return 0;
    snprintf(r->last_id, sizeof r->last_id, "%s", cur.event_id);
    r->have_id = 1;
    r->ours = cur.seq > 0;
    *v = tm_validate_saved(cur.seq, last);
    if (*v != TM_V_DISPATCH)
        *why = json_pack("{s:s,s:s,s:I,s:I}", "stream", stream, "cursor", cur.event_id, "head",
                         (json_int_t)cur.seq, "last_dispatched", (json_int_t)last);
    return 0;
}

/* r for an outstanding row: its request as it was sent. */
static rq *rq_of_row(tidemark_client_t *c, json_t *row)
{
    int64_t id = json_integer_value(json_object_get(row, "request_id"));
    const char *method = json_string_value(json_object_get(row, "method"));
    const char *params = json_string_value(json_object_get(row, "params"));
    rq *r = tm_rq_new(c, id);
    if (!r)
        return NULL;
    r->recorded = 1;
    r->tasks = r->modern && json_integer_value(json_object_get(row, "tasks")) != 0;
    json_t *p = json_loads(params ? params : "{}", JSON_ALLOW_NUL, NULL);
    r->msg = tm_jsonrpc_request(json_integer(id), method ? method : "tools/call",
                                p ? p : json_object());
    if (!r->msg) {
        tm_rq_free(r);
        return NULL;
    }
    return r;
}

/* Start r: typed before any byte is sent when the saved state proves a
 * fault; from its cursor when it has one; else re-sent where that cannot
 * repeat it (drive decides, as after a cut: the killed process may have
 * sent it). */
static void resume_start(tidemark_client_t *c, rq *r, const char *stream)
{
    json_t *why = NULL;
    tm_verdict v = TM_V_DISPATCH;
    if (stream && load_cursor(c, r, stream, &v, &why) != 0) {
        tm_rq_fail(r, TIDEMARK_EIO, "state_error", "the client state cannot be read", NULL);
    } else if (v != TM_V_DISPATCH) {
        tm_rq_fail(r, TIDEMARK_EPROTO, tm_verdict_reason(v),
                   v == TM_V_BAD_ID ? "the saved cursor cannot be read"
                                    : "the saved cursor is ahead of the dispatch log: an event "
                                      "was skipped", why);
    } else if (r->have_id) {
        int rc = tm_start_get(c, r);
        if (rc)
            tm_rq_fail(r, rc, "transport_error", "cannot start the HTTP exchange", NULL);
    } else {
        pthread_mutex_lock(&c->mu);
        r->sent = 1;
        r->phase = RQ_RECONNECT;
        pthread_mutex_unlock(&c->mu);
        r->skip_nap = 1;
    }
}

/* A call the server made a task: nothing is re-sent, the task is polled
 * to its end and its outcome applied once (tasks.c). */
static int resume_task(tidemark_client_t *c, rq *r, const char *task, json_t *results)
{
    json_t *res = NULL;
    int rc = tm_task_follow(c, r->row_id, task, 0, &res);
    int arc = json_array_append_new(results, json_pack("{s:I,s:O?}", "id", (json_int_t)r->row_id,
                                                       rc == 0 ? "result" : "error", res));
    json_decref(res);
    tm_rq_free(r);
    return arc ? TIDEMARK_ENOMEM : 0;
}

/* Resume one outstanding request (a row of the state); its entry goes to results. */
static int resume_one(tidemark_client_t *c, json_t *row, json_t *results)
{
    rq *r = rq_of_row(c, row);
    if (!r)
        return TIDEMARK_ENOMEM;
    const char *task = json_string_value(json_object_get(row, "task_id"));
    if (task)
        return resume_task(c, r, task, results);
    int rc = tm_pending_add(c, r);
    if (rc) {
        tm_rq_free(r);
        return rc;
    }
    resume_start(c, r, json_string_value(json_object_get(row, "stream")));
    rc = tm_drive(c, r, tm_now_ms() + c->cfg.timeout_ms);
    tm_pending_del(c, r);
    if (rc == 0)
        rc = tm_task_started(c, r); /* re-issued, and answered with its task again */
    json_t *res = json_incref(r->result);
    if (r->modern) /* a round of input: the rest of the rounds, as a request would */
        rc = tm_mrtr_rounds(c, json_string_value(json_object_get(r->msg, "method")),
                            json_object_get(r->msg, "params"), rc, NULL, NULL, &res);
    int arc = json_array_append_new(results, json_pack("{s:I,s:O?}", "id", (json_int_t)r->row_id,
                                                       rc == 0 ? "result" : "error", res));
    json_decref(res);
    if (r->final) {
        int drc = tm_cstate_outstanding_done(c->st, r->row_id);
        if (drc)
            TM_WARN("client: request %" PRId64 " has its outcome but stays listed outstanding (%s)",
                    r->row_id, tidemark_strerror(drc));
    }
    tm_rq_free(r);
    return arc ? TIDEMARK_ENOMEM : 0;
}

int tidemark_client_resume(tidemark_client_t *c, json_t **results)
{
    if (!c || !results)
        return TIDEMARK_EINVAL;
    *results = json_array();
    if (!*results)
        return TIDEMARK_ENOMEM;
    json_t *rows = NULL;
    int rc = tm_cstate_outstanding_list(c->st, &rows);
    size_t i;
    json_t *row;
    if (!rc)
        json_array_foreach(rows, i, row) if ((rc = resume_one(c, row, *results)) != 0) break;
    json_decref(rows);
    return rc;
}
