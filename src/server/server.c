/*
 * server.c - the MCP server over Streamable HTTP: configuration, lifecycle,
 * and the HTTP rules of POST / GET / DELETE (spec 2025-11-25 "Transports"
 * plus DESIGN.md §5). Everything that may block runs on the worker pool.
 */
#include "server_int.h"
#include "http_policy.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "../base/str.h"
#include "../base/random.h"
#include "../base/clock.h"
#include "../log/resume.h"
#include "../transport/sse.h"
#include "tidemark/tidemark.h"
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


void tidemark_server_config_init(tidemark_server_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->path = "/mcp";
    c->store = "memory";
    c->retry_ms = 1000;
    c->keepalive_ms = 15000;
    c->max_body = 4u << 20;
    c->workers = 64;
    c->io_threads = 2;
    c->max_connections = 16384;
    c->max_connections_per_address = 4096;
    c->request_deadline_ms = 30000;
    c->idle_timeout_ms = 120000;
    c->max_calls_per_session = 8;
    c->max_calls_per_address = 32;
    c->max_queued_per_session = 256;
    c->max_batch = 64;
    c->max_subscriptions = 256;
    c->max_uri_length = 2048;
    c->session_ttl_seconds = 86400;
    c->page_size = 100;
    c->name = "tidemark";
    c->version = TIDEMARK_VERSION;
}

static char *dup_or(const char *s, const char *def)
{
    return strdup(s ? s : def);
}

static char **dup_list(const char *const *l)
{
    if (!l)
        return NULL;
    size_t n = 0;
    while (l[n])
        n++;
    char **o = calloc(n + 1, sizeof *o);
    for (size_t i = 0; o && i < n; i++)
        o[i] = strdup(l[i]);
    return o;
}

static void free_list(char **l)
{
    for (size_t i = 0; l && l[i]; i++)
        free(l[i]);
    free(l);
}

/* Zero means "the default" for every limit. */
static void fill_limits(tidemark_server_config_t *c, const tidemark_server_config_t *def)
{
    unsigned *v[] = {&c->max_connections, &c->max_connections_per_address,
                     &c->request_deadline_ms, &c->idle_timeout_ms, &c->max_calls_per_session,
                     &c->max_calls_per_address, &c->max_queued_per_session, &c->max_batch,
                     &c->max_subscriptions, &c->max_uri_length};
    const unsigned d[] = {def->max_connections, def->max_connections_per_address,
                          def->request_deadline_ms, def->idle_timeout_ms,
                          def->max_calls_per_session, def->max_calls_per_address,
                          def->max_queued_per_session, def->max_batch, def->max_subscriptions,
                          def->max_uri_length};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (*v[i] == 0)
            *v[i] = d[i];
    if (c->max_uri_length > TM_URI_MAX)
        c->max_uri_length = TM_URI_MAX;
}

int tidemark_server_new(const tidemark_server_config_t *cfg, tidemark_server_t **out)
{
    tidemark_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return TIDEMARK_ENOMEM;
    tidemark_server_config_t def;
    tidemark_server_config_init(&def);
    s->cfg = cfg ? *cfg : def;
    s->host = dup_or(s->cfg.host, def.host);
    s->path = dup_or(s->cfg.path, def.path);
    s->store_uri = dup_or(s->cfg.store, def.store);
    s->name = dup_or(s->cfg.name, def.name);
    s->version = dup_or(s->cfg.version, def.version);
    s->instructions = tm_strdup(s->cfg.instructions);
    s->origins = dup_list(s->cfg.allowed_origins);
    s->hosts = dup_list(s->cfg.allowed_hosts);
    s->metrics_addrs = dup_list(s->cfg.metrics_addresses);
    if (!s->cfg.workers)
        s->cfg.workers = def.workers;
    if (!s->cfg.max_body)
        s->cfg.max_body = def.max_body;
    if (!s->cfg.page_size)
        s->cfg.page_size = def.page_size;
    fill_limits(&s->cfg, &def);
    s->reg = tm_registry_new();
    s->sessions = tm_map_new();
    s->failed = tm_map_new();
    pthread_mutex_init(&s->fail_mu, NULL);
    pthread_mutex_init(&s->life_mu, NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->jan_mu, NULL);
    tm_cond_init_monotonic(&s->jan_cv);
    if (!s->host || !s->path || !s->store_uri || !s->name || !s->version || !s->reg ||
        !s->sessions || !s->failed) {
        tidemark_server_free(s);
        return TIDEMARK_ENOMEM;
    }
    *out = s;
    return 0;
}

/* ---- helpers for answers ------------------------------------------------ */

static void reply_json(tm_http_req *r, unsigned status, json_t *body /* stolen */)
{
    size_t len;
    char *txt = tm_jsonrpc_dump(body, &len);
    json_decref(body);
    tm_http_reply(r, status, "application/json", txt, txt ? len : 0);
    free(txt);
}

/* An HTTP-level error with a JSON-RPC error body carrying data.reason. */
static void reply_error(tm_http_req *r, unsigned status, int code, const char *reason,
                        const char *message, json_t *extra)
{
    reply_json(r, status, tm_jsonrpc_error(NULL, code, message, reason, extra));
}

/* The store could not do what a request needs. Refusing writes (a full
 * disk, an I/O error) is temporary: 503 and a hint to retry. */
static void reply_store_error(tm_http_req *r, int rc)
{
    if (rc == TIDEMARK_EIO) {
        tm_http_req_add_header(r, "Retry-After", "1");
        reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "store_unavailable",
                    "Service Unavailable: the store does not take writes now", NULL);
    } else {
        reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "store_error", tidemark_strerror(rc), NULL);
    }
}

/* An MCP-Protocol-Version header naming a version we do not speak: answer
 * 400 unsupported_protocol_version (with the versions we do) and return 1. */
static int refuse_version(tm_http_req *r)
{
    const char *pv = tm_http_req_header(r, "MCP-Protocol-Version");
    if (!pv || tm_protocol_version_supported(pv))
        return 0;
    json_t *supported = json_array();
    for (int i = 0; tm_protocol_versions[i]; i++)
        json_array_append_new(supported, json_string(tm_protocol_versions[i]));
    reply_error(r, 400, TM_RPC_INVALID_REQUEST, "unsupported_protocol_version",
                "Bad Request: unsupported MCP-Protocol-Version",
                json_pack("{s:s,s:o}", "received", pv, "supported", supported));
    return 1;
}

static int host_allowed(tidemark_server_t *s, const char *host)
{
    return tm_policy_host_allowed((const char *const *)s->hosts, host);
}

static int origin_allowed(tidemark_server_t *s, const char *origin)
{
    return tm_policy_origin_allowed((const char *const *)s->origins, origin);
}

/* ---- jobs ---------------------------------------------------------------- */

static void job_free(tm_job *j)
{
    if (j->sess)
        tm_sess_unref(j->sess);
    json_decref(j->responses);
    json_decref(j->root);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void call_release(tidemark_call_t *c)
{
    if (c->effect_free)
        c->effect_free(c->effect_ud);
    tm_call_free(c);
}

/* The response of a recorded call settled. A response that could not be
 * made durable leaves the record "started": tell the client, typed, and
 * have it finished once the store takes writes again. */
static void response_done(void *ud, int status, uint64_t seq)
{
    (void)seq;
    tidemark_call_t *c = ud;
    if (status != 0)
        tm_call_write_failed(c, status);
    call_release(c);
}

static int run_effect(void *ud, tm_txn *txn)
{
    tidemark_call_t *c = ud;
    return c->effect(txn, c->effect_ud);
}

/* Append a call's response to its job's stream (caller holds j->mu).
 * Returns 1 when the call now belongs to the append (freed by its callback). */
static int append_response(tm_job *j, json_t *response, tidemark_call_t *c, int last)
{
    tidemark_server_t *srv = j->srv;
    size_t len, flen = 0;
    char *bytes = tm_jsonrpc_dump(response, &len);
    char *fallback = NULL;
    tm_append_req r = {.session = j->sess->id, .stream = j->stream, .data = bytes, .len = len,
                       .flags = last ? TM_APPEND_FINAL : 0};
    if (c && c->recorded) {
        r.request_key = c->reqkey;
        r.cb = response_done;
        r.cb_ud = c;
        snprintf(c->stream, sizeof c->stream, "%s", j->stream);
        if (!c->holds_sess) { /* the callback may outlive the job and its reference */
            tm_sess_ref(c->sess);
            c->holds_sess = 1;
        }
    }
    if (c && c->recorded && c->effect && !json_object_get(response, "error")) {
        json_t *e = tm_jsonrpc_error(c->id, TM_RPC_INTERNAL_ERROR,
                                     "The tool's effect failed and was rolled back", "effect_failed",
                                     NULL);
        fallback = tm_jsonrpc_dump(e, &flen);
        json_decref(e);
        r.effect = run_effect;
        r.effect_ud = c;
        r.fallback = fallback;
        r.fallback_len = flen;
    }
    int rc = bytes ? tm_store_append_ex(srv->store, &r) : TIDEMARK_ENOMEM;
    if (rc) {
        TM_WARN("session %s stream %s: response not appended: %s", j->sess->id, j->stream,
                tidemark_strerror(rc));
        if (r.cb)
            tm_call_write_failed(c, rc); /* the callback never runs on a refused append */
    }
    free(bytes);
    free(fallback);
    return rc == 0 && r.cb;
}

/* The last completion closes the stream (SSE) or answers the POST (JSON).
 * A recorded call's response completes its request record in the same
 * transaction, together with its effect. The call is freed here (or once
 * its response settled). */
void tm_job_complete(tm_job *j, json_t *response, tidemark_call_t *c)
{
    tidemark_server_t *srv = j->srv;
    int keep_call = 0;
    pthread_mutex_lock(&j->mu);
    int last = --j->remaining == 0;
    if (j->sse) {
        if (response)
            keep_call = append_response(j, response, c, last);
        else if (last && !atomic_load(&srv->stopping))
            tm_store_close_stream(srv->store, j->sess->id, j->stream);
        json_decref(response);
    } else if (response) {
        json_array_append_new(j->responses, response);
    }
    pthread_mutex_unlock(&j->mu);
    if (c && !keep_call)
        call_release(c);
    if (!last)
        return;
    if (!j->sse && j->req) {
        size_t n = json_array_size(j->responses);
        if (n == 0)
            tm_http_reply(j->req, 202, NULL, NULL, 0);
        else
            reply_json(j->req, 200, j->batch ? json_incref(j->responses)
                                             : json_incref(json_array_get(j->responses, 0)));
    }
    job_free(j);
}

void tm_call_free(tidemark_call_t *c)
{
    if (c->holds_sess)
        tm_sess_unref(c->sess);
    json_decref(c->id);
    free(c);
}

static void run_call(void *arg)
{
    tidemark_call_t *c = arg;
    json_t *resp = tm_dispatch(c);
    /* A recorded call always ends its stream with one response; but one cut
     * short by a server shutdown stays "started", so the next start finishes
     * it like after a crash (DESIGN §6) instead of telling the client it
     * cancelled something it did not. */
    if (!resp && c->recorded && !atomic_load(&c->srv->stopping))
        resp = tm_jsonrpc_error(c->id, TM_RPC_REQUEST_CANCELLED, "Request cancelled", "cancelled", NULL);
    if (c->registered) {
        pthread_mutex_lock(&c->sess->mu);
        if (tm_map_get(c->sess->calls, c->reqkey) == c)
            tm_map_del(c->sess->calls, c->reqkey);
        pthread_mutex_unlock(&c->sess->mu);
    }
    tm_job_complete(c->job, resp, c);
}

/* Methods that run application handlers, which may block for long: they
 * go through the fair scheduler. The rest are quick and go straight to the
 * pool, so a session at its cap can still ping, list, initialize. */
static int runs_handler(const char *method)
{
    static const char *const m[] = {"tools/call", "resources/read", "prompts/get",
                                    "completion/complete"};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (strcmp(method, m[i]) == 0)
            return 1;
    return 0;
}

int tm_call_submit(tidemark_server_t *srv, tidemark_call_t *c)
{
    if (runs_handler(c->method))
        return tm_sched_submit(srv->sched, c->sess->id, c->addr, run_call, c);
    return tm_pool_submit(srv->pool, run_call, c);
}

#define IDEM_KEY "dev.tidemark/idempotency-key"

static json_t *idem_key_of(const tm_msg *m)
{
    return json_object_get(json_object_get(m->params, "_meta"), IDEM_KEY);
}

int tm_call_meta_check(tm_msg *m)
{
    json_t *k = idem_key_of(m);
    if (!k)
        return 0;
    m->kind = TM_MSG_INVALID;
    m->code = TM_RPC_INVALID_PARAMS;
    if (!json_is_string(k) || json_string_length(k) == 0) {
        m->why = "invalid_idempotency_key";
        m->detail = "_meta[\"" IDEM_KEY "\"] must be a non-empty string";
    } else if (json_string_length(k) > TM_IDEM_KEY_MAX_BYTES) {
        m->why = "idempotency_key_too_long";
        m->detail = "_meta[\"" IDEM_KEY "\"] is longer than " TM_STRINGIFY(TM_IDEM_KEY_MAX_BYTES) " bytes";
    } else {
        m->kind = TM_MSG_REQUEST;
        m->code = 0;
        return 0;
    }
    return 1;
}

int tm_request_key(const tm_msg *m, char out[TM_REQ_KEY_MAX])
{
    json_t *k = idem_key_of(m);
    if (json_is_string(k) && json_string_length(k) > 0)
        return tm_jsonrpc_key_escape("k:", json_string_value(k), json_string_length(k), out,
                                     TM_REQ_KEY_MAX) ? TIDEMARK_EINVAL : 0;
    return tm_jsonrpc_id_key(m->id, out, TM_REQ_KEY_MAX) ? TIDEMARK_EINVAL : 0;
}

typedef struct init_job {
    tidemark_server_t *srv;
    tm_http_req *req;
    json_t *root;
    tm_msg msg;
} init_job;

static void run_initialize(void *arg)
{
    init_job *ij = arg;
    tm_sess *sess = NULL;
    json_t *resp = tm_dispatch_initialize(ij->srv, &ij->msg, &sess);
    if (sess) {
        tm_http_req_add_header(ij->req, "Mcp-Session-Id", sess->id);
        tm_sess_unref(sess);
        reply_json(ij->req, 200, resp);
    } else {
        const char *why = json_string_value(
            json_object_get(json_object_get(json_object_get(resp, "error"), "data"), "reason"));
        int unavailable = why && strcmp(why, "store_unavailable") == 0;
        if (unavailable)
            tm_http_req_add_header(ij->req, "Retry-After", "1");
        reply_json(ij->req, unavailable ? 503 : json_object_get(resp, "error") ? 400 : 200, resp);
    }
    json_decref(ij->root);
    free(ij);
}

/* ---- POST ------------------------------------------------------------------ */

static int invalid_code(const tm_msg *m)
{
    return m->code ? m->code : TM_RPC_INVALID_REQUEST;
}

static int is_call(const tm_msg *m)
{
    return m->kind == TM_MSG_REQUEST && strcmp(m->method, "tools/call") == 0;
}

static void handle_notification(tidemark_server_t *srv, tm_sess *sess, const tm_msg *m)
{
    if (strcmp(m->method, "notifications/cancelled") == 0) {
        tm_sess_cancel(sess, json_object_get(m->params, "requestId"));
    } else {
        TM_DEBUG("session %s: notification %s", sess->id, m->method);
    }
    (void)srv;
}

static tm_sess *require_session(tidemark_server_t *srv, tm_http_req *r)
{
    const char *sid = tm_http_req_header(r, "Mcp-Session-Id");
    if (!sid) {
        reply_error(r, 400, TM_RPC_INVALID_REQUEST, "session_required",
                    "Bad Request: Mcp-Session-Id header is required", NULL);
        return NULL;
    }
    tm_sess *s = tm_sess_find(srv, sid);
    if (!s || atomic_load(&s->closed)) {
        if (s)
            tm_sess_unref(s);
        reply_error(r, 404, TM_RPC_SESSION_NOT_FOUND, "unknown_session", "Session not found", NULL);
        return NULL;
    }
    /* A supported MCP-Protocol-Version other than the negotiated one is
     * tolerated (the official conformance suite sends 2025-03-26 on a
     * 2025-11-25 session); behaviour follows the negotiated version.
     * Unsupported values were rejected before. */
    tm_store_session_touch(srv->store, s->id, tm_wall_ms());
    return s;
}

/* Attach this POST to an existing stream of the session, from its start. */
static void attach_stream(tidemark_server_t *srv, tm_http_req *r, tm_sess *sess, const char *stream)
{
    tm_http_stream_opts o = {.session = sess->id, .stream = stream, .after_seq = 0,
                             .retry_ms = srv->cfg.retry_ms, .announce_durable = srv->cfg.emit_early};
    tm_http_req_add_header(r, "Mcp-Session-Id", sess->id);
    int rc = tm_http_reply_stream(r, &o);
    if (rc == TIDEMARK_EBUSY) {
        json_t *x = json_pack("{s:s}", "stream", stream);
        reply_error(r, 409, TM_RPC_INVALID_REQUEST, "stream_attached",
                    "Conflict: the request is running and its stream is attached to a live connection",
                    x);
    } else if (rc) {
        reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", tidemark_strerror(rc), NULL);
    }
}

/*
 * A tools/call that repeats a request of this session (same request id, or
 * same dev.tidemark/idempotency-key) is a retry (DESIGN §6): completed ->
 * the stored response, without running the tool again; running -> attach
 * to its stream. Returns 1 when the POST was answered here.
 */
static int answer_repeat(tidemark_server_t *srv, tm_http_req *r, tm_sess *sess, const tm_msg *m)
{
    char key[TM_REQ_KEY_MAX], stream[TM_STREAM_MAX] = "";
    if (tm_request_key(m, key) != 0)
        return 0;
    if (tm_call_write_pending(srv, sess->id, key)) {
        /* Its result could not be written; the same reason until the store
         * recovers and the call is settled (then: its record's answer). */
        tm_http_req_add_header(r, "Retry-After", "1");
        reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "store_failed",
                    "The result of this request could not be made durable yet", NULL);
        return 1;
    }
    int same_id = 1;
    pthread_mutex_lock(&sess->mu);
    tidemark_call_t *live = tm_map_get(sess->calls, key);
    if (live && live->job && live->job->sse) {
        snprintf(stream, sizeof stream, "%s", live->job->stream);
        same_id = json_equal(live->id, m->id);
    }
    pthread_mutex_unlock(&sess->mu);
    tm_request_rec rec;
    memset(&rec, 0, sizeof rec);
    if (!stream[0]) {
        if (tm_store_request_get(srv->store, sess->id, key, &rec) != 0)
            return 0;
        if (rec.state == TM_REQ_COMPLETED && rec.response) {
            tm_metric_inc(TM_M_REQUESTS_DEDUPLICATED);
            json_t *resp = json_loadb(rec.response, rec.response_len, JSON_ALLOW_NUL, NULL);
            if (resp && !json_equal(json_object_get(resp, "id"), m->id))
                json_object_set(resp, "id", m->id); /* re-issued under a new request id */
            tm_request_rec_clear(&rec);
            tm_http_req_add_header(r, "Mcp-Session-Id", sess->id);
            if (!resp) {
                reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "store_error", "stored response unreadable",
                            NULL);
                return 1;
            }
            reply_json(r, 200, resp);
            return 1;
        }
        snprintf(stream, sizeof stream, "%s", rec.stream ? rec.stream : "");
        json_t *orig = rec.message ? json_loads(rec.message, JSON_ALLOW_NUL, NULL) : NULL;
        same_id = orig && json_equal(json_object_get(orig, "id"), m->id);
        json_decref(orig);
        tm_request_rec_clear(&rec);
        if (!stream[0])
            return 0;
    }
    tm_metric_inc(TM_M_REQUESTS_DEDUPLICATED);
    if (!same_id) {
        /* Its stream carries the other request id: point the client at it. */
        json_t *x = json_pack("{s:s}", "stream", stream);
        reply_error(r, 409, TM_RPC_INVALID_REQUEST, "request_in_flight",
                    "Conflict: a request with this idempotency key is still running", x);
        return 1;
    }
    attach_stream(srv, r, sess, stream);
    return 1;
}

static void handle_post(tidemark_server_t *srv, tm_http_req *r)
{
    const char *ctype = tm_http_req_header(r, "Content-Type");
    if (!tm_policy_media_type_is(ctype, "application/json"))
        return reply_error(r, 415, TM_RPC_INVALID_REQUEST, "unsupported_media_type",
                           "Unsupported Media Type: Content-Type must be application/json", NULL);
    const char *accept = tm_http_req_header(r, "Accept");
    if (!tm_policy_accepts(accept, "application/json") || !tm_policy_accepts(accept, "text/event-stream"))
        return reply_error(r, 406, TM_RPC_INVALID_REQUEST, "not_acceptable",
                           "Not Acceptable: Accept must list application/json and text/event-stream",
                           NULL);
    if (tm_http_req_body_too_large(r)) {
        json_t *x = json_pack("{s:I}", "limit", (json_int_t)srv->cfg.max_body);
        return reply_error(r, 413, TM_RPC_INVALID_REQUEST, "body_too_large",
                           "Payload Too Large", x);
    }
    if (refuse_version(r))
        return;
    size_t len;
    const char *body = tm_http_req_body(r, &len);
    json_t *root;
    char perr[200];
    if (tm_jsonrpc_parse(body, len, &root, perr, sizeof perr) != 0) {
        json_t *x = json_pack("{s:s}", "detail", perr);
        return reply_error(r, 400, TM_RPC_PARSE_ERROR, "parse_error", "Parse error", x);
    }
    int batch = json_is_array(root);
    size_t n = batch ? json_array_size(root) : 1;
    if (batch && n == 0) {
        json_decref(root);
        return reply_error(r, 400, TM_RPC_INVALID_REQUEST, "invalid_request",
                           "Invalid Request: empty batch", NULL);
    }
    if (n > srv->cfg.max_batch) {
        json_decref(root);
        return reply_error(r, 400, TM_RPC_INVALID_REQUEST, "batch_too_large",
                           "Invalid Request: too many messages in one batch",
                           json_pack("{s:I}", "limit", (json_int_t)srv->cfg.max_batch));
    }
    tm_msg *msgs = calloc(n, sizeof *msgs);
    if (!msgs) {
        json_decref(root);
        return reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory", NULL);
    }
    size_t nreq = 0, ninit = 0, ninvalid = 0, ncall = 0, nhandler = 0;
    for (size_t i = 0; i < n; i++) {
        tm_jsonrpc_classify(batch ? json_array_get(root, i) : root, &msgs[i]);
        if (is_call(&msgs[i]))
            tm_call_meta_check(&msgs[i]);
        if (msgs[i].kind == TM_MSG_INVALID)
            ninvalid++;
        if (msgs[i].kind == TM_MSG_REQUEST) {
            nreq++;
            if (strcmp(msgs[i].method, "initialize") == 0)
                ninit++;
            if (is_call(&msgs[i]))
                ncall++;
            if (runs_handler(msgs[i].method))
                nhandler++;
        }
    }

    /* initialize: alone, creates the session. */
    if (ninit) {
        if (batch) {
            reply_error(r, 400, TM_RPC_INVALID_REQUEST, "invalid_request",
                        "Invalid Request: initialize must not be part of a batch", NULL);
            goto done;
        }
        init_job *ij = calloc(1, sizeof *ij);
        if (!ij) {
            reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory", NULL);
            goto done;
        }
        ij->srv = srv;
        ij->req = r;
        ij->root = root;
        ij->msg = msgs[0];
        root = NULL;
        if (tm_pool_submit(srv->pool, run_initialize, ij) != 0) {
            json_decref(ij->root);
            free(ij);
            reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "shutting_down", "Server is stopping", NULL);
        }
        goto done;
    }

    if (!batch && msgs[0].kind == TM_MSG_INVALID) {
        reply_json(r, 400, tm_jsonrpc_error(msgs[0].id, invalid_code(&msgs[0]), msgs[0].detail,
                                            msgs[0].why, NULL));
        goto done;
    }

    tm_sess *sess = require_session(srv, r);
    if (!sess)
        goto done;
    if (batch && strcmp(sess->version, TIDEMARK_PROTOCOL_2025_03_26) != 0) {
        json_t *x = json_pack("{s:s}", "protocolVersion", sess->version);
        reply_error(r, 400, TM_RPC_INVALID_REQUEST, "batch_not_supported",
                    "Invalid Request: JSON-RPC batches are not allowed in this protocol version", x);
        tm_sess_unref(sess);
        goto done;
    }

    /* Notifications and responses take effect now. */
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].kind == TM_MSG_NOTIFICATION)
            handle_notification(srv, sess, &msgs[i]);
        else if (msgs[i].kind == TM_MSG_RESULT || msgs[i].kind == TM_MSG_ERROR)
            tm_sess_deliver_response(srv, sess, &msgs[i]);
    }
    if (nreq == 0 && ninvalid == 0) {
        tm_sess_unref(sess);
        tm_http_reply(r, 202, NULL, NULL, 0);
        goto done;
    }

    if (!batch && is_call(&msgs[0]) && answer_repeat(srv, r, sess, &msgs[0])) {
        tm_sess_unref(sess);
        goto done;
    }
    /* Admission before anything is recorded: a refused call never ran,
     * so the client may send it again under the same id. */
    if (nhandler && tm_sched_would_refuse(srv->sched, sess->id, (unsigned)nhandler)) {
        tm_metric_inc(TM_M_CALLS_REFUSED);
        tm_http_req_add_header(r, "Retry-After", "1");
        reply_error(r, 429, TM_RPC_SERVER_ERROR, "too_many_requests",
                    "Too Many Requests: this session has too many calls waiting",
                    json_pack("{s:I}", "limit", (json_int_t)srv->cfg.max_queued_per_session));
        tm_sess_unref(sess);
        goto done;
    }

    tm_job *j = calloc(1, sizeof *j);
    if (!j) {
        tm_sess_unref(sess);
        reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory", NULL);
        goto done;
    }
    j->srv = srv;
    j->sess = sess;
    j->req = r;
    j->batch = batch;
    j->sse = ncall > 0;
    j->root = root;
    root = NULL;
    j->responses = json_array();
    pthread_mutex_init(&j->mu, NULL);
    j->remaining = (int)(nreq + ninvalid) + 1; /* +1 held while submitting */

    uint64_t mark = tm_store_mark(srv->store); /* before the records: see dispatch.c */
    if (j->sse) {
        int rc = tm_store_stream_open(srv->store, sess->id, NULL, j->stream);
        /* Record every call as started before the stream's first event, so
         * no emitted stream is ever left without an owner after a crash. */
        for (size_t i = 0; rc == 0 && i < n; i++) {
            if (!is_call(&msgs[i]))
                continue;
            char key[TM_REQ_KEY_MAX];
            if ((rc = tm_request_key(&msgs[i], key)) != 0)
                break;
            char *message = tm_jsonrpc_dump(msgs[i].raw, NULL);
            const char *tool = json_string_value(json_object_get(msgs[i].params, "name"));
            tm_request_rec rec = {.session = sess->id, .key = key, .tool = (char *)(tool ? tool : ""),
                                  .stream = j->stream, .message = message};
            rc = message ? tm_store_request_begin(srv->store, &rec, 0) : TIDEMARK_ENOMEM;
            if (rc == TIDEMARK_EEXIST) /* memory store: a racing duplicate */
                rc = 0;
            free(message);
        }
        if (rc == 0 && strcmp(sess->version, TIDEMARK_PROTOCOL_2025_11_25) == 0)
            rc = tm_store_append(srv->store, sess->id, j->stream, "", 0, 0, NULL, NULL);
        tm_http_stream_opts o = {.session = sess->id, .stream = j->stream, .after_seq = 0,
                                 .retry_ms = srv->cfg.retry_ms,
                                 .announce_durable = srv->cfg.emit_early};
        if (rc == 0) {
            tm_http_req_add_header(r, "Mcp-Session-Id", sess->id);
            rc = tm_http_reply_stream(r, &o);
        }
        if (rc) {
            reply_store_error(r, rc);
            j->sse = 0;
            j->req = NULL;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].kind == TM_MSG_INVALID) {
            tm_job_complete(j, tm_jsonrpc_error(msgs[i].id, invalid_code(&msgs[i]), msgs[i].detail,
                                                msgs[i].why, NULL), NULL);
            continue;
        }
        if (msgs[i].kind != TM_MSG_REQUEST)
            continue;
        tidemark_call_t *c = calloc(1, sizeof *c);
        if (!c) {
            tm_job_complete(j, tm_jsonrpc_error(msgs[i].id, TM_RPC_INTERNAL_ERROR, "out of memory",
                                                "internal_error", NULL), NULL);
            continue;
        }
        c->srv = srv;
        c->sess = sess;
        c->job = j;
        c->id = json_incref(msgs[i].id);
        c->method = msgs[i].method;
        c->params = msgs[i].params;
        snprintf(c->addr, sizeof c->addr, "%s", tm_http_req_peer(r));
        json_t *meta = json_object_get(c->params, "_meta");
        c->progress_token = json_object_get(meta, "progressToken");
        /* Both fit: classify and tm_call_meta_check bounded id and key. */
        tm_jsonrpc_id_key(c->id, c->idkey, sizeof c->idkey);
        tm_request_key(&msgs[i], c->reqkey);
        snprintf(c->idem, sizeof c->idem, "%s/%s", sess->id, c->reqkey);
        if (is_call(&msgs[i]) && j->sse)
            c->recorded = 1; /* its record was begun above */
        c->mark = mark;
        pthread_mutex_lock(&sess->mu);
        if (!tm_map_get(sess->calls, c->reqkey) && tm_map_put(sess->calls, c->reqkey, c) == 0)
            c->registered = 1;
        pthread_mutex_unlock(&sess->mu);
        if (tm_call_submit(srv, c) != 0) {
            if (c->registered) {
                pthread_mutex_lock(&sess->mu);
                tm_map_del(sess->calls, c->reqkey);
                pthread_mutex_unlock(&sess->mu);
            }
            json_t *e = tm_jsonrpc_error(c->id, TM_RPC_INTERNAL_ERROR, "Server is stopping",
                                         "shutting_down", NULL);
            tm_call_free(c);
            tm_job_complete(j, e, NULL);
        }
    }
    tm_job_complete(j, NULL, NULL); /* release the submit hold */
done:
    json_decref(root);
    free(msgs);
}

/* ---- GET ----------------------------------------------------------------- */

static void handle_get(tidemark_server_t *srv, tm_http_req *r)
{
    const char *accept = tm_http_req_header(r, "Accept");
    if (!tm_policy_accepts(accept, "text/event-stream"))
        return reply_error(r, 406, TM_RPC_INVALID_REQUEST, "not_acceptable",
                           "Not Acceptable: Accept must list text/event-stream", NULL);
    if (refuse_version(r))
        return;
    tm_sess *sess = require_session(srv, r);
    if (!sess)
        return;
    int64_t t0 = tm_now_us();
    const char *cursor = tm_http_req_header(r, "Last-Event-ID");
    tm_http_stream_opts o = {.session = sess->id, .retry_ms = srv->cfg.retry_ms,
                             .announce_durable = srv->cfg.emit_early};
    tm_buf prelude;
    tm_buf_init(&prelude, 4096);
    tm_resume_decision d;
    if (cursor) {
        int rc = tm_resume_decide(srv->store, sess->id, cursor, &d);
        if (rc) {
            reply_store_error(r, rc);
            goto out;
        }
        json_t *x = NULL;
        static const tm_counter by_outcome[] = {
            [TM_RESUME_OK] = TM_M_RESUME_OK, [TM_RESUME_MALFORMED] = TM_M_RESUME_MALFORMED,
            [TM_RESUME_UNKNOWN_STREAM] = TM_M_RESUME_UNKNOWN_STREAM, [TM_RESUME_AHEAD] = TM_M_RESUME_AHEAD,
            [TM_RESUME_GAP] = TM_M_RESUME_GAP, [TM_RESUME_EPOCH] = TM_M_RESUME_EPOCH};
        if (d.outcome != TM_RESUME_OK &&
            !(d.outcome == TM_RESUME_GAP && srv->cfg.on_gap == TIDEMARK_ON_GAP_EVENT))
            tm_metric_inc(by_outcome[d.outcome]);
        switch (d.outcome) {
        case TM_RESUME_OK:
            break;
        case TM_RESUME_MALFORMED:
            reply_error(r, 400, TM_RPC_INVALID_REQUEST, "malformed_cursor",
                        "Bad Request: Last-Event-ID is not an event id of this server", NULL);
            goto out;
        case TM_RESUME_UNKNOWN_STREAM:
            reply_error(r, 400, TM_RPC_INVALID_REQUEST, "unknown_stream",
                        "Bad Request: Last-Event-ID names no stream of this session", NULL);
            goto out;
        case TM_RESUME_AHEAD:
            TM_WARN("session %s: cursor_ahead %s (durable head %llu)", sess->id, cursor,
                    (unsigned long long)d.head);
            x = json_pack("{s:I}", "durable_head", (json_int_t)d.head);
            reply_error(r, 400, TM_RPC_INVALID_REQUEST, "cursor_ahead",
                        "Bad Request: Last-Event-ID is ahead of the durable head", x);
            goto out;
        case TM_RESUME_GAP:
            x = json_pack("{s:[I,I]}", "missing", (json_int_t)d.gap_from, (json_int_t)d.gap_to);
            if (srv->cfg.on_gap == TIDEMARK_ON_GAP_EVENT) {
                char *txt = json_dumps(x, JSON_COMPACT);
                json_decref(x);
                if (txt)
                    tm_sse_frame(&prelude, "gap", NULL, txt, strlen(txt));
                free(txt);
                break;
            }
            reply_error(r, 400, TM_RPC_INVALID_REQUEST, "resumption_gap",
                        "Bad Request: events after Last-Event-ID were trimmed", x);
            goto out;
        case TM_RESUME_EPOCH:
            reply_error(r, 400, TM_RPC_INVALID_REQUEST, "epoch_mismatch",
                        "Bad Request: the event Last-Event-ID names was lost and its seq reused",
                        NULL);
            goto out;
        }
        o.stream = d.stream;
        o.after_seq = d.after_seq;
        o.replay_until = d.head;
        o.prelude = prelude.data;
        o.prelude_len = prelude.len;
    } else {
        tm_stream_bounds b;
        char g[TM_STREAM_MAX];
        int rc = tm_store_stream_open(srv->store, sess->id, "g", g);
        if (rc == 0)
            rc = tm_store_bounds(srv->store, sess->id, "g", &b);
        if (rc) {
            reply_store_error(r, rc);
            goto out;
        }
        o.stream = "g";
        o.after_seq = b.head;
    }
    tm_http_req_add_header(r, "Mcp-Session-Id", sess->id);
    int rc = tm_http_reply_stream(r, &o);
    if (rc == TIDEMARK_EBUSY) {
        tm_metric_inc(TM_M_RESUME_CONFLICT);
        reply_error(r, 409, TM_RPC_INVALID_REQUEST, "stream_attached",
                    "Conflict: the stream is already attached to a live connection", NULL);
    } else if (rc) {
        reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", tidemark_strerror(rc), NULL);
    } else if (cursor) {
        tm_metric_inc(d.outcome == TM_RESUME_GAP ? TM_M_RESUME_GAP : TM_M_RESUME_OK);
        tm_histogram_observe(TM_H_RESUME_LATENCY_US, (uint64_t)(tm_now_us() - t0));
    } else {
        tm_sess_set_attr(srv, sess, "get", "true"); /* notifications may now go to "g" */
        if (strcmp(sess->version, TIDEMARK_PROTOCOL_2025_11_25) == 0)
            tm_store_append(srv->store, sess->id, "g", "", 0, 0, NULL, NULL);
    }
out:
    tm_buf_free(&prelude);
    tm_sess_unref(sess);
}

/* ---- DELETE ---------------------------------------------------------------- */

static void handle_delete(tidemark_server_t *srv, tm_http_req *r)
{
    tm_sess *sess = require_session(srv, r);
    if (!sess)
        return;
    tm_sess_close(sess);
    pthread_mutex_lock(&srv->mu);
    if (tm_map_get(srv->sessions, sess->id) == sess) {
        tm_map_del(srv->sessions, sess->id);
        tm_gauge_add(TM_G_SESSIONS_OPEN, -1);
        tm_sess_unref(sess);
    }
    pthread_mutex_unlock(&srv->mu);
    tm_http_close_session(srv->http, sess->id);
    tm_store_session_delete(srv->store, sess->id);
    TM_INFO("session %s deleted", sess->id);
    tm_sess_unref(sess);
    tm_http_reply(r, 200, NULL, NULL, 0);
}

/* ---- entry ---------------------------------------------------------------- */

static int listed(char **l, const char *v)
{
    for (size_t i = 0; l && v && l[i]; i++)
        if (strcmp(l[i], v) == 0)
            return 1;
    return 0;
}

/* GET only, or 405. */
static int only_get(tm_http_req *r, const char *method)
{
    if (strcmp(method, "GET") == 0)
        return 1;
    tm_http_req_add_header(r, "Allow", "GET");
    reply_error(r, 405, TM_RPC_INVALID_REQUEST, "method_not_allowed", "Method Not Allowed", NULL);
    return 0;
}

/* /healthz: the process answers. /readyz: and its store takes writes. No
 * Host check (probes come from outside: load balancers, kubelets). */
static void health(tidemark_server_t *srv, tm_http_req *r, int ready)
{
    int rc = ready && !atomic_load(&srv->stopping) ? tm_store_writable(srv->store) : 0;
    if (ready && atomic_load(&srv->stopping))
        rc = TIDEMARK_ECLOSED;
    const char *why = rc == 0 ? NULL : rc == TIDEMARK_ECLOSED ? "shutting_down" : "store_unavailable";
    json_t *b = why ? json_pack("{s:s,s:s}", "status", "unavailable", "reason", why)
                    : json_pack("{s:s}", "status", ready ? "ready" : "ok");
    reply_json(r, why ? 503 : 200, b);
}

static void metrics(tm_http_req *r)
{
    tm_buf b;
    tm_buf_init(&b, 1u << 20);
    tm_metrics_render(&b);
    tm_http_reply(r, 200, "text/plain; version=0.0.4", b.data, b.len);
    tm_buf_free(&b);
}

/* Host and Origin (DNS rebinding), else 403. */
static int host_and_origin_ok(tidemark_server_t *srv, tm_http_req *r)
{
    const char *host = tm_http_req_header(r, "Host");
    if (!host_allowed(srv, host)) {
        json_t *x = host ? json_pack("{s:s}", "host", host) : NULL;
        reply_error(r, 403, TM_RPC_INVALID_REQUEST, "forbidden_host",
                    "Forbidden: Host header not allowed", x);
        return 0;
    }
    const char *origin = tm_http_req_header(r, "Origin");
    if (origin && !origin_allowed(srv, origin)) {
        json_t *x = json_pack("{s:s}", "origin", origin);
        reply_error(r, 403, TM_RPC_INVALID_REQUEST, "forbidden_origin",
                    "Forbidden: Origin not allowed", x);
        return 0;
    }
    return 1;
}

static void on_http(void *ud, tm_http_req *r)
{
    tidemark_server_t *srv = ud;
    const char *method = tm_http_req_method(r);
    const char *path = tm_http_req_path(r);
    tm_metric_inc(TM_M_HTTP_REQUESTS);
    const char *framing = tm_http_req_framing_error(r);
    if (framing)
        return reply_error(r, 400, TM_RPC_INVALID_REQUEST, framing,
                           "Bad Request: ambiguous message length (Content-Length / Transfer-Encoding)",
                           NULL);
    int mcp = strcmp(path, srv->path) == 0;
    if (!mcp && (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0)) {
        if (only_get(r, method))
            health(srv, r, path[1] == 'r');
        return;
    }
    if (!mcp && strcmp(path, "/metrics") == 0) {
        if ((listed(srv->metrics_addrs, tm_http_req_peer(r)) || host_and_origin_ok(srv, r)) &&
            only_get(r, method))
            metrics(r);
        return;
    }
    if (!mcp)
        return reply_error(r, 404, TM_RPC_INVALID_REQUEST, "not_found", "Not Found", NULL);
    if (!host_and_origin_ok(srv, r))
        return;
    if (atomic_load(&srv->stopping))
        return reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "shutting_down", "Server is stopping", NULL);
    if (strcmp(method, "POST") == 0)
        return handle_post(srv, r);
    if (strcmp(method, "GET") == 0)
        return handle_get(srv, r);
    if (strcmp(method, "DELETE") == 0)
        return handle_delete(srv, r);
    tm_http_req_add_header(r, "Allow", "GET, POST, DELETE");
    reply_error(r, 405, TM_RPC_INVALID_REQUEST, "method_not_allowed", "Method Not Allowed", NULL);
}

static void on_commit(void *ud, const char *session, const char *stream, uint64_t seq)
{
    (void)seq;
    tidemark_server_t *srv = ud;
    if (srv->http)
        tm_http_wake(srv->http, session, stream);
}

static void expired(void *ud, const char *id)
{
    tidemark_server_t *srv = ud;
    pthread_mutex_lock(&srv->mu);
    tm_sess *s = tm_map_del(srv->sessions, id);
    if (s)
        tm_gauge_add(TM_G_SESSIONS_OPEN, -1);
    pthread_mutex_unlock(&srv->mu);
    if (s) {
        tm_sess_close(s);
        tm_sess_unref(s);
    }
    tm_http_close_session(srv->http, id);
    TM_INFO("session %s expired (idle)", id);
}

typedef struct busy_ctx {
    tidemark_server_t *srv;
    int64_t now;
} busy_ctx;

static void touch_busy(const char *k, void *v, void *ud)
{
    (void)k;
    busy_ctx *b = ud;
    tm_sess *s = v;
    pthread_mutex_lock(&s->mu);
    int busy = tm_map_count(s->calls) > 0;
    pthread_mutex_unlock(&s->mu);
    /* A session with a call running or a stream attached is not idle. */
    if (busy || tm_http_session_attached(b->srv->http, s->id))
        tm_store_session_touch(b->srv->store, s->id, b->now);
}

/* Expire idle sessions (--session-ttl). */
static void *janitor_main(void *arg)
{
    tidemark_server_t *srv = arg;
    int64_t ttl_ms = (int64_t)srv->cfg.session_ttl_seconds * 1000;
    int64_t period = ttl_ms / 4 < 1000 ? (ttl_ms / 4 > 50 ? ttl_ms / 4 : 50) : 1000;
    pthread_mutex_lock(&srv->jan_mu);
    while (srv->jan_running) {
        struct timespec ts = tm_deadline_ms(period);
        pthread_cond_timedwait(&srv->jan_cv, &srv->jan_mu, &ts);
        if (!srv->jan_running)
            break;
        pthread_mutex_unlock(&srv->jan_mu);
        busy_ctx b = {srv, tm_wall_ms()};
        pthread_mutex_lock(&srv->mu);
        tm_map_each(srv->sessions, touch_busy, &b);
        pthread_mutex_unlock(&srv->mu);
        tm_store_sessions_expire(srv->store, tm_wall_ms() - ttl_ms, expired, srv);
        pthread_mutex_lock(&srv->jan_mu);
    }
    pthread_mutex_unlock(&srv->jan_mu);
    return NULL;
}

/* Finish, again and again, not only at start-up: the requests of nodes
 * whose lease lapsed (stores shared by nodes), and calls whose response
 * could not be written (once the store takes writes again). */
#define RECOVER_EVERY_MS 500
static void *recoverer_main(void *arg)
{
    tidemark_server_t *srv = arg;
    pthread_mutex_lock(&srv->jan_mu);
    while (srv->rec_running) {
        struct timespec ts = tm_deadline_ms(RECOVER_EVERY_MS);
        pthread_cond_timedwait(&srv->jan_cv, &srv->jan_mu, &ts);
        if (!srv->rec_running)
            break;
        pthread_mutex_unlock(&srv->jan_mu);
        int rc = tm_store_shared(srv->store) ? tm_recover(srv) : 0;
        if (rc)
            TM_DEBUG("periodic recovery: %s", tidemark_strerror(rc));
        tm_recover_failed(srv);
        pthread_mutex_lock(&srv->jan_mu);
    }
    pthread_mutex_unlock(&srv->jan_mu);
    return NULL;
}

/* Workers grow on demand up to cfg.workers; handler calls may take all but
 * QUICK_RESERVE of them, so requests that run no handler always find one. */
#define QUICK_RESERVE 4
static int start_workers(tidemark_server_t *srv)
{
    unsigned w = srv->cfg.workers;
    int rc = tm_pool_new_range(w < QUICK_RESERVE ? w : QUICK_RESERVE, w, &srv->pool);
    if (rc)
        return rc;
    tm_sched_limits lim = {.per_session = srv->cfg.max_calls_per_session,
                           .per_address = srv->cfg.max_calls_per_address,
                           .total = w > 2 * QUICK_RESERVE ? w - QUICK_RESERVE : (w + 1) / 2,
                           .queue = srv->cfg.max_queued_per_session};
    return tm_sched_new(srv->pool, &lim, &srv->sched);
}

/* mkdir -p of the folder holding path (a file name). */
static int make_parent_dirs(const char *path)
{
    char d[4096];
    if (snprintf(d, sizeof d, "%s", path) >= (int)sizeof d)
        return TIDEMARK_ERANGE;
    char *slash = strrchr(d, '/');
    if (!slash || slash == d)
        return 0;
    *slash = '\0';
    for (char *p = d + 1; ; p++) {
        char c = *p;
        if (c == '/' || c == '\0') {
            *p = '\0';
            if (mkdir(d, 0755) != 0 && errno != EEXIST) {
                TM_ERROR("cannot create %s: %s", d, strerror(errno));
                return TIDEMARK_EIO;
            }
            *p = c;
        }
        if (c == '\0')
            return 0;
    }
}

int tidemark_server_start(tidemark_server_t *srv)
{
    if (atomic_load(&srv->running))
        return TIDEMARK_EBUSY;
    if (strncmp(srv->store_uri, "sqlite:", 7) == 0) {
        int drc = make_parent_dirs(srv->store_uri + 7);
        if (drc)
            return drc;
    }
    tm_store_options so = {
        .retain_events = srv->cfg.retain_events,
        .retain_ms = (int64_t)srv->cfg.retain_seconds * 1000,
        .durability = srv->cfg.durability == TIDEMARK_DURABILITY_PROCESS ? TM_DURABILITY_PROCESS
                                                                         : TM_DURABILITY_POWER,
        .emit_early = srv->cfg.emit_early,
        .accept_loss = srv->cfg.accept_loss,
        /* last-seen must be written several times per TTL */
        .touch_every_ms = srv->cfg.session_ttl_seconds
                              ? (int64_t)srv->cfg.session_ttl_seconds * 1000 / 4 < 5000
                                    ? (int64_t)srv->cfg.session_ttl_seconds * 1000 / 4
                                    : 5000
                              : 5000,
    };
    so.listener = on_commit;
    so.listener_ud = srv;
    so.bus = tm_sess_on_bus;
    so.bus_ud = srv;
    int rc = tm_store_open(srv->store_uri, &so, &srv->store);
    if (rc) {
        TM_ERROR("cannot open store %s: %s", srv->store_uri, tidemark_strerror(rc));
        return rc;
    }
    for (size_t i = 0; i < srv->nschemas; i++) {
        if ((rc = tm_store_exec_schema(srv->store, srv->schemas[i])) != 0) {
            TM_ERROR("application schema failed: %s", tidemark_strerror(rc));
            goto fail;
        }
    }
    if ((rc = start_workers(srv)) != 0)
        goto fail;
    json_t *busy = tm_jsonrpc_error(NULL, TM_RPC_SERVER_ERROR,
                                    "Service Unavailable: too many connections",
                                    "too_many_connections", NULL);
    char *busy_body = tm_jsonrpc_dump(busy, NULL);
    json_decref(busy);
    tm_http_config hc = {.host = srv->host, .port = srv->cfg.port, .max_body = srv->cfg.max_body,
                         .io_threads = srv->cfg.io_threads, .keepalive_ms = srv->cfg.keepalive_ms,
                         .max_connections = srv->cfg.max_connections,
                         .max_per_address = srv->cfg.max_connections_per_address,
                         .request_deadline_ms = srv->cfg.request_deadline_ms,
                         .idle_timeout_ms = srv->cfg.idle_timeout_ms, .busy_body = busy_body};
    atomic_store(&srv->stopping, 0);
    tm_http *h = NULL;
    rc = tm_http_new(&hc, srv->store, on_http, srv, &h);
    free(busy_body);
    if (rc)
        goto fail;
    srv->http = h; /* before any thread of it can call back */
    if ((rc = tm_http_listen(h)) != 0)
        goto fail;
    atomic_store(&srv->running, 1);
    /* Finish what a dead process left started, before anyone can retry it:
     * the recovered calls are registered before this returns. */
    if ((rc = tm_recover(srv)) != 0)
        TM_ERROR("recovery of unfinished requests failed: %s", tidemark_strerror(rc));
    srv->rec_running = 1;
    if (pthread_create(&srv->recoverer, NULL, recoverer_main, srv) != 0)
        srv->rec_running = 0;
    if (srv->cfg.session_ttl_seconds > 0) {
        srv->jan_running = 1;
        if (pthread_create(&srv->janitor, NULL, janitor_main, srv) != 0)
            srv->jan_running = 0;
    }
    TM_INFO("listening on http://%s:%u%s (store %s, epoch %s)", srv->host, tm_http_port(srv->http),
            srv->path, srv->store_uri, tm_store_epoch(srv->store));
    return 0;
fail:
    tm_pool_free(srv->pool);
    srv->pool = NULL;
    tm_sched_free(srv->sched);
    srv->sched = NULL;
    tm_http_stop(srv->http);
    tm_store_close(srv->store);
    srv->store = NULL;
    tm_http_free(srv->http); /* after the store: its writer may still wake streams */
    srv->http = NULL;
    return rc;
}

unsigned tidemark_server_port(const tidemark_server_t *srv)
{
    return srv->http ? tm_http_port(srv->http) : 0;
}

static void close_each(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    tm_sess_close(v);
}

static void unref_each(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    tm_sess_unref(v);
}

int tidemark_server_run(tidemark_server_t *srv)
{
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old); /* the server's threads inherit it */
    int rc = tidemark_server_start(srv);
    /* Wait for a signal, or for a stop from another thread (running drops). */
    while (rc == 0 && atomic_load(&srv->running)) {
        struct timespec ts = {0, 100 * 1000000L};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            TM_INFO("signal %d: stopping", sig);
            break;
        }
    }
    tidemark_server_stop(srv);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static void server_stop_locked(tidemark_server_t *srv);

/* Thread-safe, and safe to call twice (tidemark_server_run stops too). */
void tidemark_server_stop(tidemark_server_t *srv)
{
    pthread_mutex_lock(&srv->life_mu);
    server_stop_locked(srv);
    pthread_mutex_unlock(&srv->life_mu);
}

static void server_stop_locked(tidemark_server_t *srv)
{
    if (!atomic_load(&srv->running))
        return;
    atomic_store(&srv->stopping, 1);
    if (srv->rec_running) {
        pthread_mutex_lock(&srv->jan_mu);
        srv->rec_running = 0;
        pthread_cond_broadcast(&srv->jan_cv);
        pthread_mutex_unlock(&srv->jan_mu);
        pthread_join(srv->recoverer, NULL);
    }
    if (srv->jan_running) {
        pthread_mutex_lock(&srv->jan_mu);
        srv->jan_running = 0;
        pthread_cond_broadcast(&srv->jan_cv);
        pthread_mutex_unlock(&srv->jan_mu);
        pthread_join(srv->janitor, NULL);
    }
    pthread_mutex_lock(&srv->mu);
    tm_map_each(srv->sessions, close_each, NULL);
    pthread_mutex_unlock(&srv->mu);
    tm_pool_free(srv->pool); /* runs what is queued; blocked calls see cancellation */
    srv->pool = NULL;
    tm_sched_free(srv->sched); /* empty: the pool ran everything it admitted */
    srv->sched = NULL;
    tm_http_stop(srv->http);
    tm_store_close(srv->store);
    srv->store = NULL;
    tm_http_free(srv->http); /* after the store: its writer may still wake streams */
    srv->http = NULL;
    pthread_mutex_lock(&srv->mu);
    tm_map_each(srv->sessions, unref_each, NULL);
    tm_gauge_add(TM_G_SESSIONS_OPEN, -(int64_t)tm_map_count(srv->sessions));
    tm_map_free(srv->sessions);
    srv->sessions = tm_map_new();
    pthread_mutex_unlock(&srv->mu);
    atomic_store(&srv->running, 0);
}

void tidemark_server_free(tidemark_server_t *srv)
{
    if (!srv)
        return;
    tidemark_server_stop(srv);
    tm_registry_free(srv->reg);
    if (srv->sessions)
        tm_map_free(srv->sessions);
    free_list(srv->origins);
    free_list(srv->hosts);
    free_list(srv->metrics_addrs);
    free(srv->host);
    free(srv->path);
    free(srv->store_uri);
    free(srv->name);
    free(srv->version);
    free(srv->instructions);
    for (size_t i = 0; i < srv->nschemas; i++)
        free(srv->schemas[i]);
    free(srv->schemas);
    if (srv->failed)
        tm_map_free(srv->failed);
    pthread_mutex_destroy(&srv->fail_mu);
    pthread_mutex_destroy(&srv->life_mu);
    pthread_mutex_destroy(&srv->mu);
    pthread_mutex_destroy(&srv->jan_mu);
    pthread_cond_destroy(&srv->jan_cv);
    free(srv);
}
