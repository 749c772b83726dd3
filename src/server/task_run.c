/*
 * task_run.c - running a task's handler (tasks.h): on a worker, like a
 * recorded 2026-07-28 call with no HTTP request waiting for it. Its final
 * response is appended to the stream its record names and completes the
 * record "t" in the same transaction as the tool's atomic effect; a round
 * that ends asking for input leaves the record started and writes the
 * attribute "ir" instead. Also the cancellations seen by the recoverer, and
 * recovery of a dead node's tasks (the per-tool policies: task_policy.c).
 */
#include "tasks.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tasks running on this node --------------------------------------------- */

typedef struct tm_task_run {
    tidemark_call_t *call;
    char id[TM_SESSION_ID_LEN + 1];
    struct tm_task_run *next;
} running;

/* 0, or TIDEMARK_EBUSY when the task already runs here. */
static int run_add(tidemark_server_t *srv, const char *id, tidemark_call_t *c)
{
    running *n = calloc(1, sizeof *n);
    if (!n)
        return TIDEMARK_ENOMEM;
    int rc = 0;
    pthread_mutex_lock(&srv->task_mu);
    for (running *p = srv->task_runs; p; p = p->next)
        if (strcmp(p->id, id) == 0)
            rc = TIDEMARK_EBUSY;
    if (rc == 0) {
        *n = (running){c, "", srv->task_runs};
        snprintf(n->id, sizeof n->id, "%s", id);
        srv->task_runs = n;
    }
    pthread_mutex_unlock(&srv->task_mu);
    if (rc)
        free(n);
    return rc;
}

static void run_del(tidemark_call_t *c)
{
    tidemark_server_t *srv = c->srv;
    pthread_mutex_lock(&srv->task_mu);
    for (running **pp = &srv->task_runs; *pp; pp = &(*pp)->next)
        if ((*pp)->call == c) {
            running *d = *pp;
            *pp = d->next;
            free(d);
            break;
        }
    pthread_mutex_unlock(&srv->task_mu);
}

int tm_task_cancel_local(tidemark_server_t *srv, const char *id)
{
    int found = 0;
    pthread_mutex_lock(&srv->task_mu);
    for (running *p = srv->task_runs; p; p = p->next)
        if (strcmp(p->id, id) == 0) {
            atomic_store(&p->call->cancelled, 1);
            found = 1;
        }
    pthread_mutex_unlock(&srv->task_mu);
    return found;
}

/* Whether the task's session has attribute name (one store read). */
static int has_attr(tidemark_server_t *srv, const char *id, const char *name)
{
    tm_session_rec rec;
    if (tm_store_session_get(srv->store, id, &rec) != 0)
        return 0;
    json_t *a = rec.attrs ? json_loads(rec.attrs, 0, NULL) : NULL;
    int has = json_object_get(a, name) != NULL;
    json_decref(a);
    tm_session_rec_clear(&rec);
    return has;
}

void tm_tasks_tick(tidemark_server_t *srv)
{
    char ids[64][TM_SESSION_ID_LEN + 1];
    size_t n = 0;
    pthread_mutex_lock(&srv->task_mu);
    for (running *p = srv->task_runs; p && n < 64; p = p->next)
        if (!atomic_load(&p->call->cancelled))
            snprintf(ids[n++], sizeof ids[0], "%s", p->id);
    pthread_mutex_unlock(&srv->task_mu);
    for (size_t i = 0; i < n; i++)
        if (has_attr(srv, ids[i], "cancel") && tm_task_cancel_local(srv, ids[i]))
            TM_INFO("task %s: cancelled (asked on another node)", TM_SID(ids[i]));
}

/* ---- one run ------------------------------------------------------------------ */

/* The session's attributes (new ref, {} when none); NULL when it is gone. */
static json_t *attrs_of(tidemark_server_t *srv, const char *id)
{
    tm_session_rec rec;
    if (tm_store_session_get(srv->store, id, &rec) != 0)
        return NULL;
    json_t *a = rec.attrs ? json_loads(rec.attrs, 0, NULL) : NULL;
    tm_session_rec_clear(&rec);
    return a ? a : json_object();
}

/* The message to run: the creating request with every answer so far in
 * params.inputResponses (those it carried, then "in.<key>"). */
static json_t *message_with_answers(const char *message, const json_t *attrs)
{
    json_t *msg = json_loads(message, JSON_ALLOW_NUL, NULL);
    json_t *params = json_object_get(msg, "params");
    if (!json_is_object(params)) {
        json_decref(msg);
        return NULL;
    }
    json_t *in = json_object_get(params, "inputResponses");
    json_t *all = json_is_object(in) ? json_deep_copy(in) : json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)attrs, k, v)
        if (strncmp(k, "in.", 3) == 0)
            json_object_set(all, k + 3, v);
    json_object_set_new(params, "inputResponses", all);
    return msg;
}

static tm_job *job_for(tidemark_server_t *srv, tm_sess *sess, const char *stream, json_t *msg)
{
    tm_job *j = tm_job_alloc();
    if (!j)
        return NULL;
    j->srv = srv;
    j->sess = sess;
    j->sse = 1;
    j->flags = TM_POST_MODERN;
    snprintf(j->stream, sizeof j->stream, "%s", stream);
    j->root = msg;
    j->responses = json_array();
    pthread_mutex_init(&j->mu, NULL);
    j->remaining = 1;
    return j;
}

static tidemark_call_t *call_for(tm_job *j, int recovering)
{
    tm_msg m;
    tm_jsonrpc_classify(j->root, &m);
    tidemark_call_t *c = m.kind == TM_MSG_REQUEST ? tm_call_alloc() : NULL;
    if (!c)
        return NULL;
    c->srv = j->srv;
    c->sess = j->sess;
    c->job = j;
    c->id = json_incref(m.id);
    c->method = m.method;
    c->params = m.params;
    c->recorded = 1;
    c->recovering = 1; /* the record was durable before the task was announced */
    c->modern = 1;
    (void)recovering;
    snprintf(c->reqkey, sizeof c->reqkey, "%s", TM_TASK_RECORD);
    tm_jsonrpc_id_key(c->id, c->idkey, sizeof c->idkey);
    snprintf(c->idem, sizeof c->idem, "%s/%s", j->sess->id, c->reqkey);
    return c;
}

/* The round asked for input: "ir" = {n, u, q: what was asked}. */
static int note_inputs(tidemark_server_t *srv, const char *id, const json_t *res, json_int_t n)
{
    json_t *ir = json_pack("{s:I,s:I,s:O}", "n", n, "u", (json_int_t)tm_wall_ms(), "q",
                           json_object_get(res, "inputRequests"));
    char *txt = ir ? json_dumps(ir, JSON_COMPACT) : NULL;
    json_decref(ir);
    int rc = txt ? tm_store_session_set_attr(srv->store, id, "ir", txt) : TIDEMARK_ENOMEM;
    free(txt);
    return rc;
}

static void call_drop(tidemark_call_t *c)
{
    if (c->effect_free)
        c->effect_free(c->effect_ud);
    tm_call_free(c);
}

/* Listeners hear of the task's new status (best effort: they may poll). */
static void notified(tidemark_server_t *srv, const char *id)
{
    int rc = tm_task_notify(srv, id);
    if (rc)
        TM_DEBUG("task %s: listeners not told: %s", TM_SID(id), tidemark_strerror(rc));
}

typedef struct run_arg {
    tidemark_server_t *srv;
    tidemark_call_t *c;
    json_int_t round;
} run_arg;

static void run_task(void *arg)
{
    run_arg *a = arg;
    tidemark_server_t *srv = a->srv;
    tidemark_call_t *c = a->c;
    tm_job *j = c->job;
    json_t *resp = tm_dispatch(c);
    if (!resp && !atomic_load(&srv->stopping))
        resp = tm_jsonrpc_error(c->id, TM_RPC_REQUEST_CANCELLED, "Task cancelled", "cancelled",
                                NULL);
    json_t *res = json_object_get(resp, "result");
    const char *rt = json_string_value(json_object_get(res, "resultType"));
    run_del(c);
    if (!resp || (rt && strcmp(rt, "input_required") == 0)) {
        /* waiting for input (or stopping): the record stays started */
        int rc = resp ? note_inputs(srv, j->sess->id, res, a->round + 1) : 0;
        if (rc)
            TM_WARN("task %s: its input requests were not recorded: %s", TM_SID(j->sess->id),
                    tidemark_strerror(rc));
        json_decref(resp);
        call_drop(c);
        if (rc == 0 && resp)
            notified(srv, j->sess->id);
        tm_job_free(j);
    } else {
        char id[TM_SESSION_ID_LEN + 1];
        snprintf(id, sizeof id, "%s", j->sess->id);
        tm_modern_decorate(srv, c->method, resp);
        tm_job_complete(j, resp, c); /* the record, the effect, the stream's end */
        if (tm_store_sync(srv->store) == 0)
            notified(srv, id);
    }
    free(a);
}

int tm_task_start(tidemark_server_t *srv, const char *id, const char *stream, const char *message,
                  int recovering)
{
    json_t *attrs = attrs_of(srv, id);
    json_t *msg = attrs ? message_with_answers(message, attrs) : NULL;
    json_int_t round = json_integer_value(json_object_get(json_object_get(attrs, "ir"), "n"));
    json_decref(attrs);
    tm_sess *sess = msg ? tm_sess_find(srv, id) : NULL;
    tm_job *j = sess && stream ? job_for(srv, sess, stream, msg) : NULL;
    if (!j) {
        if (sess)
            tm_sess_unref(sess);
        json_decref(msg);
        return attrs ? TIDEMARK_ENOMEM : TIDEMARK_ENOTFOUND;
    }
    tidemark_call_t *c = call_for(j, recovering);
    run_arg *a = c ? calloc(1, sizeof *a) : NULL;
    int rc = a ? run_add(srv, id, c) : TIDEMARK_ENOMEM;
    if (rc == 0) {
        *a = (run_arg){srv, c, round};
        rc = tm_sched_submit(srv->sched, id, "", run_task, a);
        if (rc)
            run_del(c);
    }
    if (rc) {
        free(a);
        if (c)
            tm_call_free(c);
        tm_job_free(j);
    }
    return rc;
}

int tm_task_finish(tidemark_server_t *srv, const char *id, const char *stream, json_t *response)
{
    size_t len = 0;
    char *bytes = tm_jsonrpc_dump(response, &len);
    json_decref(response);
    tm_append_req r = {.session = id, .stream = stream, .data = bytes, .len = len,
                       .flags = TM_APPEND_FINAL, .request_key = TM_TASK_RECORD};
    int rc = bytes ? tm_store_append_ex(srv->store, &r) : TIDEMARK_ENOMEM;
    free(bytes);
    if (rc == 0)
        rc = tm_store_sync(srv->store);
    if (rc == 0)
        notified(srv, id);
    return rc;
}

/* ---- recovery ------------------------------------------------------------------ */

/* Whether the task waits for input nobody gave yet. */
static int waiting(const json_t *attrs)
{
    const char *k;
    json_t *v;
    char name[600];
    json_object_foreach(json_object_get(json_object_get(attrs, "ir"), "q"), k, v) {
        snprintf(name, sizeof name, "in.%s", k);
        if (!json_object_get(attrs, name))
            return 1;
    }
    return 0;
}

int tm_tasks_recover(tidemark_server_t *srv, const tm_request_rec *r)
{
    json_t *attrs = r->session ? attrs_of(srv, r->session) : NULL;
    if (!attrs || !json_object_get(attrs, "task")) {
        json_decref(attrs);
        return 0;
    }
    int wait = waiting(attrs), cancel = json_object_get(attrs, "cancel") != NULL;
    json_decref(attrs);
    json_t *msg = r->message ? json_loads(r->message, JSON_ALLOW_NUL, NULL) : NULL;
    json_t *id = json_object_get(msg, "id");
    tm_reg_entry e = {0};
    int known = r->tool && tm_registry_get(srv->reg, TM_REG_TOOL, r->tool, &e) == 0;
    if (known)
        json_decref(e.desc);
    int rc = 0;
    if (cancel) {
        rc = tm_task_finish(srv, r->session, r->stream,
                            tm_jsonrpc_error(id, TM_RPC_REQUEST_CANCELLED,
                                                              "Task cancelled", "cancelled", NULL));
    } else if (wait) {
        rc = 0; /* nothing runs until tasks/update brings the answers */
    } else if (known && (e.hints & (TIDEMARK_TOOL_ATOMIC | TIDEMARK_TOOL_IDEMPOTENT))) {
        tm_counter_inc(srv->m.recovered);
        TM_INFO("recovery: re-running task %s (%s)", TM_SID(r->session), r->tool);
        rc = tm_task_start(srv, r->session, r->stream, r->message, 1);
    } else {
        json_t *x = json_pack("{s:s}", "tool", r->tool ? r->tool : "");
        tm_counter_inc(srv->m.outcome_unknown);
        TM_INFO("recovery: task %s (%s) -> outcome_unknown", TM_SID(r->session), r->tool);
        rc = tm_task_finish(srv, r->session, r->stream,
                            tm_jsonrpc_error(id, TM_RPC_OUTCOME_UNKNOWN,
                                             "Outcome unknown: the server stopped while this task "
                                             "ran, and the tool is neither atomic nor idempotent",
                                             "outcome_unknown", x));
    }
    if (rc && rc != TIDEMARK_EBUSY)
        TM_WARN("recovery: task %s: %s", TM_SID(r->session), tidemark_strerror(rc));
    json_decref(msg);
    return 1;
}
