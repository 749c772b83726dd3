/*
 * tasks.c - the io.modelcontextprotocol/tasks extension (tasks.h): which
 * requests it takes, task creation (commit, then emit), tasks/get,
 * tasks/update and tasks/cancel. Store reads and writes wait for commits,
 * so all of it runs on a worker, never on the I/O thread.
 */
#include "tasks.h"
#include "era.h"
#include "seal.h"
#include "record.h"
#include "../base/crash.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/random.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define IDEM_KEY TM_META_IDEM_KEY
#define DEFAULT_TTL_MS 3600000
#define POLL_MS 500
#define TASK_ID_MAX 64

static json_t *meta_of(const tm_msg *m)
{
    return json_object_get(m->params, "_meta");
}

static int declares_tasks(const tm_msg *m)
{
    json_t *caps = json_object_get(meta_of(m), TM_META_CAPS);
    return json_object_get(json_object_get(caps, "extensions"), TM_TASKS_EXT) != NULL;
}

static void reply(tidemark_server_t *srv, tm_req *r, const char *method, json_t *resp)
{
    tm_modern_decorate(srv, method, resp);
    tm_reply_json(r, tm_modern_status(resp), resp);
}

static json_t *missing_ext(const tm_msg *m)
{
    json_t *x = json_pack("{s:{s:{s:{}}}}", "requiredCapabilities", "extensions", TM_TASKS_EXT);
    return tm_jsonrpc_error(m->id, TM_RPC_MISSING_CAPABILITY,
                            "Missing required client capability: the tasks extension",
                            "missing_client_capability", x);
}

static json_t *not_found(const tm_msg *m, const char *why)
{
    return tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS,
                            strcmp(why, "task_expired") == 0
                                ? "Failed to retrieve task: Task has expired"
                                : "Failed to retrieve task: Task not found",
                            why, NULL);
}

/* ISO 8601 UTC with milliseconds. */
static json_t *iso(int64_t ms)
{
    time_t s = (time_t)(ms / 1000);
    struct tm t;
    char buf[40];
    if (!gmtime_r(&s, &t) || strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &t) == 0)
        return json_string("1970-01-01T00:00:00.000Z");
    char out[48];
    snprintf(out, sizeof out, "%s.%03dZ", buf, (int)(ms % 1000));
    return json_string(out);
}

/* ---- a task as stored -------------------------------------------------------- */

typedef struct task_view {
    json_t *attrs;       /* the session's attributes */
    tm_request_rec rec;  /* record "t" */
    int have_rec;
} task_view;

static void view_clear(task_view *v)
{
    json_decref(v->attrs);
    if (v->have_rec)
        tm_request_rec_clear(&v->rec);
    memset(v, 0, sizeof *v);
}

/* Load task id for the principal: 0, or the error to answer (new ref). */
static json_t *view_load(tidemark_server_t *srv, const tm_msg *m, const char *id,
                         const char *principal, task_view *v)
{
    memset(v, 0, sizeof *v);
    tm_session_rec s;
    if (strlen(id) != TM_SESSION_ID_LEN || tm_store_session_get(srv->store, id, &s) != 0)
        return not_found(m, "task_not_found");
    v->attrs = s.attrs ? json_loads(s.attrs, 0, NULL) : NULL;
    tm_session_rec_clear(&s);
    json_t *t = json_object_get(v->attrs, "task");
    const char *p = json_string_value(json_object_get(t, "p"));
    if (!t || !p || (principal && strcmp(p, principal) != 0)) { /* another's: none */
        view_clear(v);
        return not_found(m, "task_not_found");
    }
    json_int_t ttl = json_integer_value(json_object_get(t, "ttl"));
    json_int_t created = json_integer_value(json_object_get(t, "c"));
    if (ttl > 0 && tm_wall_ms() > created + ttl) {
        view_clear(v);
        if (tm_store_session_delete(srv->store, id) != 0)
            TM_DEBUG("task %s: expired, not deleted yet (its session TTL will)", id);
        return not_found(m, "task_expired");
    }
    if (tm_store_request_get(srv->store, id, TM_TASK_RECORD, &v->rec) == 0)
        v->have_rec = 1;
    if (tm_store_session_touch(srv->store, id, tm_wall_ms()) != 0)
        TM_DEBUG("task %s: not touched", id);
    return NULL;
}

/* What is asked and not answered yet (new ref). */
static json_t *outstanding(const json_t *attrs)
{
    json_t *q = json_object_get(json_object_get(attrs, "ir"), "q");
    json_t *out = json_object();
    const char *k;
    json_t *v;
    char name[600];
    json_object_foreach(q, k, v) {
        snprintf(name, sizeof name, "in.%s", k);
        if (!json_object_get(attrs, name))
            json_object_set(out, k, v);
    }
    return out;
}

/* The Task object of a view (new ref); with detail: result, error, inputRequests. */
static json_t *task_json(const char *id, const task_view *v, int detail)
{
    json_t *t = json_object_get(v->attrs, "task");
    int64_t created = json_integer_value(json_object_get(t, "c"));
    int64_t updated = created;
    json_int_t u = json_integer_value(json_object_get(json_object_get(v->attrs, "ir"), "u"));
    if (u > updated)
        updated = u;
    const char *status = "working";
    json_t *o = json_pack("{s:s}", "taskId", id);
    if (v->have_rec && v->rec.state == TM_REQ_COMPLETED) {
        json_t *resp = json_loadb(v->rec.response ? v->rec.response : "", v->rec.response_len,
                                  JSON_ALLOW_NUL, NULL);
        json_t *err = json_object_get(resp, "error");
        const char *why = json_string_value(json_object_get(json_object_get(err, "data"), "reason"));
        status = err ? (why && strcmp(why, "cancelled") == 0 ? "cancelled" : "failed")
                     : "completed";
        if (err)
            json_object_set_new(o, "statusMessage",
                                json_string(strcmp(status, "cancelled") == 0
                                                ? "The task was cancelled"
                                                : json_string_value(json_object_get(err, "message"))
                                                      ? json_string_value(json_object_get(err, "message"))
                                                      : "The task failed"));
        if (detail && strcmp(status, "failed") == 0)
            json_object_set(o, "error", err);
        if (detail && strcmp(status, "completed") == 0)
            json_object_set(o, "result", json_object_get(resp, "result"));
        if (v->rec.updated_ms > updated)
            updated = v->rec.updated_ms;
        json_decref(resp);
    } else {
        json_t *q = outstanding(v->attrs);
        if (json_object_size(q)) {
            status = "input_required";
            if (detail)
                json_object_set(o, "inputRequests", q);
        }
        json_decref(q);
    }
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "createdAt", iso(created));
    json_object_set_new(o, "lastUpdatedAt", iso(updated));
    json_t *ttl = json_object_get(t, "ttl");
    json_object_set_new(o, "ttlMs", json_integer_value(ttl) > 0 ? json_incref(ttl) : json_null());
    json_object_set_new(o, "pollIntervalMs", json_integer(POLL_MS));
    return o;
}

/* ---- creation ------------------------------------------------------------------ */

static int64_t ttl_for(tidemark_server_t *srv, int64_t ttl)
{
    int64_t cap = (int64_t)srv->cfg.session_ttl_seconds * 1000;
    if (ttl <= 0)
        ttl = DEFAULT_TTL_MS;
    return cap > 0 && ttl > cap ? cap : ttl;
}

/* The task's "task" attribute, a stream and its record "t" in the task's
 * store session: every write durable before the caller answers. OUT stream:
 * the stream's name, which the record holds and the response goes to (the
 * store names it: "r1" on a first try, another name on a creation a crash
 * cut short). Run again on such a creation (finish_creation): the
 * attribute is written again, a new stream opened, and a record already
 * there is TIDEMARK_EEXIST. */
static int task_rest(tidemark_server_t *srv, const tm_msg *m, const char *id, int64_t ttl,
                     const char *principal, char stream[TM_STREAM_MAX])
{
    int64_t now = tm_wall_ms();
    json_t *t = json_pack("{s:I,s:I,s:I,s:s}", "c", (json_int_t)now, "ttl", (json_int_t)ttl,
                          "poll", (json_int_t)POLL_MS, "p", principal);
    char *ttxt = t ? json_dumps(t, JSON_COMPACT) : NULL;
    json_decref(t);
    int rc = ttxt ? tm_store_session_set_attr(srv->store, id, "task", ttxt) : TIDEMARK_ENOMEM;
    free(ttxt);
    if (rc == 0)
        rc = tm_store_stream_open(srv->store, id, NULL, stream);
    if (rc == 0) /* the stream, no record: what finish_creation completes */
        TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "task_stream_opened");
    char *message = rc == 0 ? tm_jsonrpc_dump(m->raw, NULL) : NULL;
    const char *tool = json_string_value(json_object_get(m->params, "name"));
    tm_request_rec r = {.session = (char *)id, .key = TM_TASK_RECORD,
                        .tool = (char *)(tool ? tool : ""), .stream = stream, .message = message};
    if (rc == 0)
        rc = message ? tm_store_request_begin(srv->store, &r, 1) : TIDEMARK_ENOMEM;
    free(message);
    return rc;
}

/* The task's store session, then the rest (task_rest). The writes are
 * several: a crash between them leaves a session without its record, which
 * the re-issue under the key finishes (reissued). */
static int task_store(tidemark_server_t *srv, const tm_msg *m, const char *id, int64_t ttl,
                      const char *principal, char stream[TM_STREAM_MAX])
{
    json_t *client = json_pack("{s:O,s:s}", "capabilities", json_object_get(meta_of(m), TM_META_CAPS),
                               TM_CLIENT_PRINCIPAL, principal);
    json_t *info = json_object_get(meta_of(m), TM_META_INFO);
    if (client && info)
        json_object_set(client, "clientInfo", info);
    char *ctxt = client ? json_dumps(client, JSON_COMPACT) : NULL;
    json_decref(client);
    int64_t now = tm_wall_ms();
    tm_session_rec rec = {.id = (char *)id, .protocol_version = TM_MODERN_VERSION, .client = ctxt,
                          .created_ms = now, .last_seen_ms = now};
    int rc = ctxt ? tm_store_session_create(srv->store, &rec) : TIDEMARK_ENOMEM;
    free(ctxt);
    if (rc == 0)
        TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "task_session_created");
    return rc ? rc : task_rest(srv, m, id, ttl, principal, stream);
}

static json_t *start_and_answer(tidemark_server_t *srv, const tm_msg *m, const char *id,
                                const char *principal, const char *stream);

/* A creation under this key that a crash cut short (its session, no
 * record): finished now, as the one the client was never answered for. */
static json_t *finish_creation(tidemark_server_t *srv, const tm_msg *m, const char *id,
                               int64_t ttl, const char *principal)
{
    char stream[TM_STREAM_MAX];
    int rc = task_rest(srv, m, id, ttl, principal, stream);
    if (rc == TIDEMARK_EEXIST)
        return NULL; /* finished meanwhile by its own creator: read it again */
    if (rc)
        return tm_jsonrpc_error(m->id, TM_RPC_INTERNAL_ERROR, "The task could not be recorded",
                                rc == TIDEMARK_EIO ? "store_unavailable" : "store_failed", NULL);
    TM_INFO("task %s: its creation was cut short; finished on its re-issue", TM_SID(id));
    return start_and_answer(srv, m, id, principal, stream);
}

/* The task under this key exists: answer with it (the same taskId). */
static json_t *reissued(tidemark_server_t *srv, const tm_msg *m, const char *id, int64_t ttl,
                        const char *principal)
{
    task_view v;
    json_t *e = NULL;
    int finished = 0;
    for (int i = 0; i < 100; i++) { /* its creation may still be under way elsewhere */
        e = view_load(srv, m, id, principal, &v);
        if (!e && v.have_rec)
            break;
        if (!e)
            view_clear(&v);
        json_decref(e);
        e = not_found(m, "task_not_found");
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (i == 99 && !finished) { /* 2 s without its record: its creator died mid-way */
            finished = 1;
            json_t *done = finish_creation(srv, m, id, ttl, principal);
            if (done) {
                json_decref(e);
                return done;
            }
            i = 90; /* finished by its creator after all: a few more reads */
        }
    }
    if (!v.have_rec)
        return e;
    json_decref(e);
    json_t *out;
    if (tm_record_judge(srv, &v.rec, m->raw) == TM_REC_REUSED) /* record.h: one rule */
        out = tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS,
                               "This idempotency key was used for another request",
                               "idempotency_key_reused", NULL);
    else {
        json_t *t = task_json(id, &v, 0);
        json_object_set_new(t, "resultType", json_string("task"));
        out = tm_jsonrpc_result(m->id, t);
    }
    view_clear(&v);
    return out;
}

static json_t *create(tidemark_server_t *srv, const tm_msg *m, int64_t ttl_ms,
                      const char *principal)
{
    char id[TM_SESSION_ID_LEN + 1], stream[TM_STREAM_MAX];
    json_t *k = json_object_get(meta_of(m), IDEM_KEY);
    char kk[TM_IDEM_KEY_MAX_BYTES + 8];
    int rc;
    if (json_is_string(k)) { /* apart from the key's plain calls */
        int n = snprintf(kk, sizeof kk, "task\n%s", json_string_value(k));
        rc = n > 0 && (size_t)n < sizeof kk
                 ? tm_seal_derive_id(srv->sealer, principal, strlen(principal), kk, (size_t)n, id)
                 : TIDEMARK_EINVAL;
    } else {
        rc = tm_random_hex(id, TM_SESSION_ID_LEN / 2); /* 128 bits from the CSPRNG */
    }
    if (rc == 0)
        rc = task_store(srv, m, id, ttl_for(srv, ttl_ms), principal, stream);
    if (rc == TIDEMARK_EEXIST && json_is_string(k))
        return reissued(srv, m, id, ttl_for(srv, ttl_ms), principal);
    if (rc)
        return tm_jsonrpc_error(m->id, TM_RPC_INTERNAL_ERROR, "The task could not be recorded",
                                rc == TIDEMARK_EIO ? "store_unavailable" : "store_failed", NULL);
    return start_and_answer(srv, m, id, principal, stream);
}

/* A recorded task started here and answered: CreateTaskResult. */
static json_t *start_and_answer(tidemark_server_t *srv, const tm_msg *m, const char *id,
                                const char *principal, const char *stream)
{
    char *message = tm_jsonrpc_dump(m->raw, NULL);
    int rc = message ? tm_task_start(srv, id, stream, message, 0) : TIDEMARK_ENOMEM;
    free(message);
    if (rc) /* recorded: the next recovery pass (or restart) runs it */
        TM_WARN("task %s: not started now: %s", TM_SID(id), tidemark_strerror(rc));
    /* Committed, not yet answered: the cut a client cannot tell from a
     * task never made (its re-issue under the key finds this one). */
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "task_created_before_answer");
    task_view v;
    json_t *e = view_load(srv, m, id, principal, &v);
    if (e)
        return e;
    json_t *t = task_json(id, &v, 0);
    view_clear(&v);
    json_object_set_new(t, "resultType", json_string("task"));
    return tm_jsonrpc_result(m->id, t);
}

/* ---- tasks/get, tasks/update, tasks/cancel ------------------------------------- */

static json_t *task_get(tidemark_server_t *srv, const tm_msg *m, const char *id,
                        const char *principal)
{
    task_view v;
    json_t *e = view_load(srv, m, id, principal, &v);
    if (e)
        return e;
    json_t *t = task_json(id, &v, 1);
    view_clear(&v);
    return tm_jsonrpc_result(m->id, t);
}

static int terminal(const task_view *v)
{
    return v->have_rec && v->rec.state == TM_REQ_COMPLETED;
}

/* Round n's answers are complete: one node, of all that may see that at
 * once, runs the handler again. The claim is a store session whose id is
 * derived from (task, round): creating it is atomic on every store (EEXIST
 * for the others); it holds nothing and goes with the session TTL. 0: ours. */
static int claim_round(tidemark_server_t *srv, const char *id, json_int_t n)
{
    char what[96], cid[TM_SESSION_ID_LEN + 1];
    int len = snprintf(what, sizeof what, "round\n%s\n%lld", id, (long long)n);
    int rc = tm_seal_derive_id(srv->sealer, id, strlen(id), what, (size_t)len, cid);
    int64_t now = tm_wall_ms();
    tm_session_rec rec = {.id = cid, .protocol_version = TM_MODERN_VERSION, .client = "{}",
                          .created_ms = now, .last_seen_ms = now};
    return rc ? rc : tm_store_session_create(srv->store, &rec);
}

/* Claim the round v waits in (claim_round) and, won, make the task's
 * record this node's: the store completes a record, and writes an effect
 * under it, only for the node it names. 0, TIDEMARK_EEXIST (another node
 * took the round), TIDEMARK_EBUSY (the task is finished) or an error. */
static int take_round(tidemark_server_t *srv, const char *id, const task_view *v)
{
    json_int_t n = json_integer_value(json_object_get(json_object_get(v->attrs, "ir"), "n"));
    int rc = claim_round(srv, id, n);
    return rc ? rc : tm_store_request_adopt(srv->store, id, TM_TASK_RECORD);
}

/* Store the answers to what is outstanding (others are ignored); when none
 * is left, run the handler again with them. */
static json_t *task_update(tidemark_server_t *srv, const tm_msg *m, const char *id,
                           const char *principal)
{
    json_t *in = json_object_get(m->params, "inputResponses");
    if (!json_is_object(in))
        return tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS,
                                "tasks/update needs params.inputResponses (an object)",
                                "invalid_params", NULL);
    task_view v;
    json_t *e = view_load(srv, m, id, principal, &v);
    if (e)
        return e;
    json_t *q = terminal(&v) ? json_object() : outstanding(v.attrs);
    size_t before = json_object_size(q), took = 0;
    const char *k;
    json_t *a;
    int rc = 0;
    json_object_foreach(in, k, a) {
        if (!json_object_get(q, k) || strlen(k) > 512)
            continue; /* not outstanding: never asked, answered, or superseded */
        char name[600], *txt = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(name, sizeof name, "in.%s", k);
        rc = txt ? tm_store_session_set_attr(srv->store, id, name, txt) : TIDEMARK_ENOMEM;
        free(txt);
        if (rc)
            break;
        took++;
    }
    json_decref(q);
    if (rc == 0 && before > 0 && took == before) {
        rc = take_round(srv, id, &v);
        if (rc == 0)
            rc = tm_task_start(srv, id, v.rec.stream, v.rec.message, 0);
        else if (rc == TIDEMARK_EEXIST) /* another node's update completed the round */
            rc = 0;
    }
    view_clear(&v);
    if (rc && rc != TIDEMARK_EBUSY)
        return tm_jsonrpc_error(m->id, TM_RPC_INTERNAL_ERROR, "The answers could not be recorded",
                                "store_failed", NULL);
    return tm_jsonrpc_result(m->id, json_object());
}

/* A task waiting for input runs nowhere: it ends here, cancelled. Its
 * round is claimed first, as an update that completes it would: won, no
 * update can run the round any more and the record is made this node's;
 * lost, an update on another node runs it now and sees the cancel flag
 * (as may a finish meanwhile: nothing to do). */
static int cancel_waiting(tidemark_server_t *srv, const char *id, const task_view *v)
{
    int rc = take_round(srv, id, v);
    if (rc)
        return rc == TIDEMARK_EBUSY || rc == TIDEMARK_EEXIST ? 0 : rc;
    json_t *msg = json_loads(v->rec.message ? v->rec.message : "", JSON_ALLOW_NUL, NULL);
    rc = tm_task_finish(srv, id, v->rec.stream,
                        tm_jsonrpc_error(json_object_get(msg, "id"), TM_RPC_REQUEST_CANCELLED,
                                         "Task cancelled", "cancelled", NULL));
    json_decref(msg);
    return rc;
}

/* Cooperative: the flag is durable; the run (here, or on another node by its
 * recoverer's next pass) sees it; a task waiting for input ends now. */
static json_t *task_cancel(tidemark_server_t *srv, const tm_msg *m, const char *id,
                           const char *principal)
{
    task_view v;
    json_t *e = view_load(srv, m, id, principal, &v);
    if (e)
        return e;
    int rc = 0;
    if (!terminal(&v)) {
        rc = tm_store_session_set_attr(srv->store, id, "cancel", "true");
        json_t *q = outstanding(v.attrs);
        int here = rc == 0 && tm_task_cancel_local(srv, id);
        if (rc == 0 && !here && json_object_size(q) > 0)
            rc = cancel_waiting(srv, id, &v);
        json_decref(q);
    }
    view_clear(&v);
    if (rc && rc != TIDEMARK_ECLOSED)
        return tm_jsonrpc_error(m->id, TM_RPC_INTERNAL_ERROR, "The cancellation could not be recorded",
                                "store_failed", NULL);
    return tm_jsonrpc_result(m->id, json_object());
}

/* ---- routing -------------------------------------------------------------------- */

typedef struct work {
    tidemark_server_t *srv;
    tm_req *r;
    post_msgs pm;
    int64_t ttl_ms;
    char principal[TM_PRINCIPAL_MAX];
} work;

static void run_method(void *arg)
{
    work *w = arg;
    const tm_msg *m = &w->pm.m[0];
    json_t *resp;
    if (strcmp(m->method, "tools/call") == 0) {
        resp = create(w->srv, m, w->ttl_ms, w->principal);
    } else {
        const char *id = json_string_value(json_object_get(m->params, "taskId"));
        const char *p = w->principal;
        resp = strcmp(m->method, "tasks/get") == 0      ? task_get(w->srv, m, id, p)
               : strcmp(m->method, "tasks/update") == 0 ? task_update(w->srv, m, id, p)
                                                        : task_cancel(w->srv, m, id, p);
    }
    reply(w->srv, w->r, m->method, resp);
    post_msgs_free(&w->pm);
    free(w);
}

static void later(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx, post_msgs *pm,
                  int64_t ttl_ms)
{
    work *w = calloc(1, sizeof *w);
    if (!w)
        return tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory",
                              NULL);
    *w = (work){srv, r, *pm, ttl_ms, {0}};
    snprintf(w->principal, sizeof w->principal, "%s", ctx->principal);
    pm->root = NULL; /* the worker's now */
    pm->m = NULL;
    if (ctx->on_worker) /* already off the I/O thread (the authorization gate) */
        return run_method(w);
    if (tm_pool_submit(srv->pool, run_method, w) != 0) {
        post_msgs_free(&w->pm);
        free(w);
        tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "shutting_down", "Server is stopping", NULL);
    }
}

/* Mcp-Name must carry params.taskId (surrounding whitespace aside). */
static int name_matches(tm_req *r, const char *id)
{
    if (r->flags & TM_REQ_BODY_ONLY) /* no header to mirror the body (stdio) */
        return 1;
    const char *h = r->mcp_name;
    if (!h)
        return 0;
    while (*h == ' ' || *h == '\t')
        h++;
    size_t n = strlen(h);
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t'))
        n--;
    return strlen(id) == n && strncmp(h, id, n) == 0;
}

static int task_method(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx,
                       post_msgs *pm)
{
    const tm_msg *m = &pm->m[0];
    json_t *tid = json_object_get(m->params, "taskId");
    if (!json_is_string(tid) || json_string_length(tid) == 0 ||
        json_string_length(tid) > TASK_ID_MAX ||
        strlen(json_string_value(tid)) != json_string_length(tid)) {
        reply(srv, r, m->method,
              tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS,
                               "params.taskId must be a task id (a string)", "invalid_params",
                               NULL));
        return 1;
    }
    if (!name_matches(r, json_string_value(tid))) {
        reply(srv, r, m->method,
              tm_jsonrpc_error(m->id, TM_RPC_HEADER_MISMATCH,
                               "Bad Request: the Mcp-Name header must carry params.taskId",
                               "header_mismatch", json_pack("{s:s}", "header", "Mcp-Name")));
        return 1;
    }
    if (!declares_tasks(m)) {
        reply(srv, r, m->method, missing_ext(m));
        return 1;
    }
    later(srv, r, ctx, pm, 0);
    return 1;
}

/* A tools/call of a task tool: as a task, a plain call, or -32021. */
static int task_call(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx,
                     post_msgs *pm)
{
    const tm_msg *m = &pm->m[0];
    unsigned task;
    int64_t ttl;
    const char *name = json_string_value(json_object_get(m->params, "name"));
    if (tm_tasks_policy_of(srv, name, &task, &ttl) != 0 || (task & 3u) == TIDEMARK_TASK_NEVER)
        return 0;
    tm_reg_entry e;
    if (tm_registry_get(srv->reg, TM_REG_TOOL, name, &e) != 0)
        return 0;
    json_decref(e.desc);
    if (!declares_tasks(m)) {
        if ((task & 3u) != TIDEMARK_TASK_REQUIRED)
            return 0;
        reply(srv, r, m->method, missing_ext(m));
        return 1;
    }
    /* inputs first: the rounds before the answers are plain multi round-trip */
    if ((task & TIDEMARK_TASK_INPUTS_FIRST) && !json_object_get(m->params, "inputResponses") &&
        !json_object_get(m->params, "requestState"))
        return 0;
    later(srv, r, ctx, pm, ttl);
    return 1;
}

int tm_tasks_route(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx, post_msgs *pm)
{
    const tm_msg *m = &pm->m[0];
    if (strcmp(m->method, "tasks/get") == 0 || strcmp(m->method, "tasks/update") == 0 ||
        strcmp(m->method, "tasks/cancel") == 0)
        return task_method(srv, r, ctx, pm);
    if (strcmp(m->method, "tools/call") == 0)
        return task_call(srv, r, ctx, pm);
    return 0;
}

/* ---- status notifications (subscriptions/listen) ------------------------------- */

json_t *tm_tasks_listen_ids(tidemark_server_t *srv, const tm_msg *m, const char *principal,
                            const json_t *f, json_t **ids)
{
    *ids = NULL;
    json_t *want = json_object_get(f, "taskIds");
    if (!want)
        return NULL;
    if (!declares_tasks(m))
        return missing_ext(m);
    if (!json_is_array(want) || json_array_size(want) > srv->cfg.max_subscriptions)
        return tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS,
                                "notifications.taskIds must be an array of task ids",
                                "invalid_params", NULL);
    *ids = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(want, i, v) {
        const char *id = json_string_value(v);
        task_view tv;
        json_t *e = id && strlen(id) == TM_SESSION_ID_LEN ? view_load(srv, m, id, principal, &tv)
                                                          : not_found(m, "task_not_found");
        if (!e) { /* only the principal's own, live tasks */
            json_array_append(*ids, v);
            view_clear(&tv);
        }
        json_decref(e);
    }
    return NULL;
}

typedef struct notify_ctx {
    tidemark_server_t *srv;
    json_t *params;
    size_t failed;
} notify_ctx;

static int notify_listener(void *ud, const tm_session_rec *rec)
{
    notify_ctx *n = ud;
    if (rec->attrs && !strstr(rec->attrs, "taskIds")) /* cheap: most sessions are not */
        return 0;
    json_t *a = tm_session_rec_attrs(rec); /* its filter decides */
    json_t *msg = NULL;
    if (tm_modern_listener_msg(a, "notifications/tasks", n->params, &msg) &&
        tm_session_append(n->srv, rec->id, "g", msg, 0) != 0)
        n->failed++;
    json_decref(msg);
    json_decref(a);
    return 0;
}

int tm_task_notify(tidemark_server_t *srv, const char *id)
{
    tm_msg m = {0};
    task_view v;
    json_t *e = view_load(srv, &m, id, NULL, &v);
    if (e) {
        json_decref(e);
        return TIDEMARK_ENOTFOUND;
    }
    notify_ctx n = {srv, task_json(id, &v, 1), 0};
    view_clear(&v);
    static const char *const listeners[] = {"listen"};
    int rc = tm_store_sessions_with_attr(srv->store, listeners, 1, notify_listener, &n);
    json_decref(n.params);
    return rc ? rc : n.failed ? TIDEMARK_EIO : 0;
}
