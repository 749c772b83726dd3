/*
 * modern_answer.c - how a request of the 2026-07-28 era is answered and how
 * its store session ends (modern.c routes it): a result's resultType, _meta
 * and cache hints and its HTTP status; the store sessions key-less calls
 * share (pooled) and those to delete a second after their end (doomed); a
 * call's or listener's session held while it runs, its stream attached,
 * and its final answer sent once durable; which listener a message reaches.
 * Below the routing: the job, the call and the tasks answer through these.
 */
#include "server_int.h"
#include "era.h"
#include "feed.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "../base/random.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- results ------------------------------------------------------------- */

static int cacheable(const char *method)
{
    static const char *const m[] = {"server/discover", "tools/list", "prompts/list",
                                    "resources/list", "resources/templates/list",
                                    "resources/read"};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (strcmp(method, m[i]) == 0)
            return 1;
    return 0;
}

void tm_modern_decorate(tidemark_server_t *srv, const char *method, json_t *resp)
{
    json_t *res = json_object_get(resp, "result");
    if (!json_is_object(res))
        return;
    if (!json_is_string(json_object_get(res, "resultType")))
        json_object_set_new(res, "resultType", json_string("complete"));
    json_t *meta = json_object_get(res, "_meta");
    if (!json_is_object(meta)) {
        meta = json_object();
        json_object_set_new(res, "_meta", meta);
    }
    json_t *info = json_object(); /* json_pack would parse its format per call */
    json_object_set_new(info, "name", json_string(srv->name));
    json_object_set_new(info, "version", json_string(srv->version));
    json_object_set_new(meta, TM_META_SERVER, info);
    const char *rt = json_string_value(json_object_get(res, "resultType"));
    if (strcmp(rt, "complete") == 0 && cacheable(method)) {
        if (!json_object_get(res, "ttlMs"))
            json_object_set_new(res, "ttlMs", json_integer(srv->cfg.cache_ttl_ms));
        /* A read's contents may depend on who asks (its handler knows the
         * principal's session): with authorization on, never shared. */
        const char *scope = srv->auth && strcmp(method, "resources/read") == 0
                                ? "private" : srv->cfg.cache_scope;
        if (!json_object_get(res, "cacheScope"))
            json_object_set_new(res, "cacheScope", json_string(scope));
    }
}

unsigned tm_modern_status(const json_t *resp)
{
    json_t *e = json_object_get(resp, "error");
    if (!e)
        return 200;
    json_int_t code = json_integer_value(json_object_get(e, "code"));
    const char *why = json_string_value(json_object_get(json_object_get(e, "data"), "reason"));
    if (code == TM_RPC_METHOD_NOT_FOUND)
        return 404;
    if (code == TM_RPC_HEADER_MISMATCH || code == TM_RPC_MISSING_CAPABILITY ||
        code == TM_RPC_UNSUPPORTED_VERSION)
        return 400;
    if (why && (strcmp(why, "invalid_request_meta") == 0 ||
                strcmp(why, "idempotency_key_reused") == 0))
        return 400;
    return 200;
}

/* A store session for a call or a listener (marked modern: a 2025 request
 * naming it gets 404). */
int tm_modern_session_store(tidemark_server_t *srv, const char *id, const json_t *client, int queued)
{
    char *txt = client ? tm_jsonrpc_dump(client, NULL) : NULL; /* json_dumps' bytes, faster */
    int64_t now = tm_wall_ms();
    tm_session_rec rec = {.id = (char *)id, .protocol_version = TM_MODERN_VERSION, .client = txt,
                          .created_ms = now, .last_seen_ms = now};
    int rc = !txt ? TIDEMARK_ENOMEM
             : queued ? tm_store_session_create_queued(srv->store, &rec)
                      : tm_store_session_create(srv->store, &rec);
    free(txt);
    return rc;
}

int tm_modern_sid_new(char id[TM_SESSION_ID_LEN + 1])
{
    return tm_random_hex(id, TM_SESSION_ID_LEN / 2);
}

/* ---- pooled store sessions ------------------------------------------------ */

/* A key-less call needs a store session for its stream and record, but no
 * one else ever names it: the calls of one principal share one, which
 * serves POOL_CALLS calls or POOL_AGE_MS, then is deleted whole once its
 * last call ended. Making and deleting a session per call was five more
 * statements per call than a 2025 call costs on SQLite. Each call's record
 * key there is its own ("e:<n>", post.c): request ids repeat across
 * clients. One principal per session, so a call re-run after a crash runs
 * as the principal that made it. */
#define POOL_CALLS 4096
#define POOL_AGE_MS 10000

typedef struct tm_pooled {
    char id[TM_SESSION_ID_LEN + 1];
    char principal[TM_PRINCIPAL_MAX];
    unsigned calls, inflight;
    int64_t born;
    int retiring;
    struct tm_pooled *next;
} tm_pooled;

static int pool_has(tidemark_server_t *srv, const char *id)
{
    pthread_mutex_lock(&srv->pool_mu);
    tm_pooled *p = srv->pooled;
    while (p && strcmp(p->id, id) != 0)
        p = p->next;
    pthread_mutex_unlock(&srv->pool_mu);
    return p != NULL;
}

static int64_t pool_age_ms(const tidemark_server_t *srv)
{
    int64_t ttl = (int64_t)srv->cfg.session_ttl_seconds * 1000 / 4;
    return ttl > 0 && ttl < POOL_AGE_MS ? ttl : POOL_AGE_MS;
}

/* Unlink p (under srv->pool_mu); its id into gone for a delete after the lock. */
static void pool_unlink(tidemark_server_t *srv, tm_pooled *p, char gone[TM_SESSION_ID_LEN + 1])
{
    for (tm_pooled **pp = &srv->pooled; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    snprintf(gone, TM_SESSION_ID_LEN + 1, "%s", p->id);
    free(p);
}

static void pool_delete(tidemark_server_t *srv, const char *gone)
{
    if (gone[0])
        tm_modern_doom(srv, gone); /* no longer in the pool: queued for deletion */
}

/* The principal's current session (made, its creation queued, when there
 * is none or it is spent). OUT sid. 0, or the store's error. */
int tm_modern_pool_take(tidemark_server_t *srv, const char *principal, const json_t *client,
                     char sid[TM_SESSION_ID_LEN + 1])
{
    char gone[TM_SESSION_ID_LEN + 1] = "";
    int64_t now = tm_now_ms();
    int rc = 0;
    pthread_mutex_lock(&srv->pool_mu);
    tm_pooled *p = srv->pooled;
    while (p && (p->retiring || strcmp(p->principal, principal) != 0))
        p = p->next;
    if (p && (p->calls >= POOL_CALLS || now - p->born >= pool_age_ms(srv))) {
        p->retiring = 1;
        if (p->inflight == 0)
            pool_unlink(srv, p, gone);
        p = NULL;
    }
    if (!p && (p = calloc(1, sizeof *p)) != NULL) {
        snprintf(p->principal, sizeof p->principal, "%s", principal);
        p->born = now;
        /* queued under the lock: no call of it is queued before its creation */
        rc = tm_modern_sid_new(p->id) ? TIDEMARK_EIO : tm_modern_session_store(srv, p->id, client, 1);
        if (rc) {
            free(p);
            p = NULL;
        } else {
            p->next = srv->pooled;
            srv->pooled = p;
        }
    }
    if (p) {
        p->calls++;
        p->inflight++;
        snprintf(sid, TM_SESSION_ID_LEN + 1, "%s", p->id);
    }
    pthread_mutex_unlock(&srv->pool_mu);
    pool_delete(srv, gone);
    return p ? 0 : rc ? rc : TIDEMARK_ENOMEM;
}

void tm_modern_pool_done(tidemark_server_t *srv, const char *id)
{
    char gone[TM_SESSION_ID_LEN + 1] = "";
    pthread_mutex_lock(&srv->pool_mu);
    tm_pooled *p = srv->pooled;
    while (p && strcmp(p->id, id) != 0)
        p = p->next;
    if (p && p->inflight > 0 && --p->inflight == 0 &&
        (p->retiring || tm_now_ms() - p->born >= pool_age_ms(srv)))
        pool_unlink(srv, p, gone);
    pthread_mutex_unlock(&srv->pool_mu);
    pool_delete(srv, gone);
}

void tm_modern_pool_touch(tidemark_server_t *srv, int64_t now_ms)
{
    typedef char sid_t[TM_SESSION_ID_LEN + 1];
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&srv->pool_mu);
    for (tm_pooled *p = srv->pooled; p; p = p->next)
        cap += p->inflight > 0;
    sid_t *ids = cap ? malloc(cap * sizeof *ids) : NULL;
    for (tm_pooled *p = srv->pooled; ids && p; p = p->next)
        if (p->inflight)
            snprintf(ids[n++], sizeof *ids, "%s", p->id);
    pthread_mutex_unlock(&srv->pool_mu);
    for (size_t i = 0; i < n; i++)
        if (tm_store_session_touch(srv->store, ids[i], now_ms) != 0)
            TM_DEBUG("a pooled session's touch failed: it may expire early");
    free(ids);
}

static void pool_free(tidemark_server_t *srv)
{
    pthread_mutex_lock(&srv->pool_mu);
    while (srv->pooled) {
        tm_pooled *p = srv->pooled;
        srv->pooled = p->next;
        free(p);
    }
    pthread_mutex_unlock(&srv->pool_mu);
}

/* ---- the ends of a call's stream ------------------------------------------ */

typedef struct stream_end {
    tidemark_server_t *srv;
    tm_sess *sess;
    int ephemeral;
    int listener;
} stream_end;

/* ---- store sessions that go ---------------------------------------------- */

/* Deleted a second after their end, not at once: the store's writer may
 * still be finishing the commit that ended them (a delete in that very
 * batch frees the stream while the writer's after-commit step reads it),
 * and nothing writes to them any more. */
#define DOOM_DELAY_MS 1000

typedef struct tm_doomed {
    char id[TM_SESSION_ID_LEN + 1];
    int64_t due;
    struct tm_doomed *next;
} tm_doomed;

static int pool_has(tidemark_server_t *srv, const char *id);

void tm_modern_doom(tidemark_server_t *srv, const char *id)
{
    if (pool_has(srv, id)) /* shared by other calls: deleted once the pool lets it go */
        return;
    tm_doomed *d = calloc(1, sizeof *d);
    if (!d) {
        TM_WARN("session %s: not deleted (out of memory; its TTL will)", TM_SID(id));
        return;
    }
    snprintf(d->id, sizeof d->id, "%s", id);
    d->due = tm_now_ms() + DOOM_DELAY_MS;
    pthread_mutex_lock(&srv->fail_mu);
    d->next = srv->doomed;
    srv->doomed = d;
    pthread_mutex_unlock(&srv->fail_mu);
}

static void pool_free(tidemark_server_t *srv);

void tm_modern_reap(tidemark_server_t *srv, int all)
{
    if (all)
        pool_free(srv); /* its sessions are left to the TTL, as the doomed ones */
    int64_t now = tm_now_ms();
    tm_doomed *due = NULL;
    pthread_mutex_lock(&srv->fail_mu);
    for (tm_doomed **pp = &srv->doomed; *pp;) {
        tm_doomed *d = *pp;
        if (all || d->due <= now) {
            *pp = d->next;
            d->next = due;
            due = d;
        } else {
            pp = &d->next;
        }
    }
    pthread_mutex_unlock(&srv->fail_mu);
    while (due) { /* queued, not waited for one by one: they commit in a batch */
        tm_doomed *d = due;
        due = d->next;
        int rc = all ? 0 : tm_store_session_delete_queued(srv->store, d->id);
        if (rc && rc != TIDEMARK_ENOTFOUND)
            TM_WARN("session %s: not deleted (its TTL will): %s", TM_SID(d->id), tidemark_strerror(rc));
        free(d);
    }
}

/* While it lives, a call's or listener's store session is in srv->sessions,
 * so the janitor sees it busy (a call running, a stream attached) and never
 * expires it under it; released when it ends. */
void tm_modern_hold(tidemark_server_t *srv, tm_sess *s)
{
    pthread_mutex_lock(&srv->mu);
    if (!tm_map_get(srv->sessions, s->id)) {
        if (tm_map_put(srv->sessions, s->id, tm_sess_ref(s)) == 0)
            tm_gauge_add(srv->m.sessions_open, 1);
        else
            tm_sess_unref(s);
    }
    pthread_mutex_unlock(&srv->mu);
}

void tm_modern_release(tidemark_server_t *srv, tm_sess *s)
{
    tm_sess *held = NULL;
    pthread_mutex_lock(&srv->mu);
    if (tm_map_get(srv->sessions, s->id) == s) {
        held = tm_map_del(srv->sessions, s->id);
        tm_gauge_add(srv->m.sessions_open, -1);
    }
    pthread_mutex_unlock(&srv->mu);
    if (held)
        tm_sess_unref(held);
}

/* The connection of a call or listener ended: a call cut short is
 * cancelled (what it committed stays committed); an answered ephemeral
 * call's session and a listener's are deleted. */
static void on_stream_end(void *ud, int completed)
{
    stream_end *e = ud;
    if (!completed && !e->listener)
        tm_sess_close(e->sess);
    if (e->listener || (completed && e->ephemeral))
        tm_modern_doom(e->srv, e->sess->id);
    tm_modern_release(e->srv, e->sess);
    tm_sess_unref(e->sess);
    free(e);
}

int tm_modern_attach_stream(tidemark_server_t *srv, tm_req *r, tm_sess *sess, const char *stream,
                  int ephemeral, int listener)
{
    stream_end *e = calloc(1, sizeof *e);
    if (!e)
        return TIDEMARK_ENOMEM;
    *e = (stream_end){srv, tm_sess_ref(sess), ephemeral, listener};
    tm_feed_opts o = {.session = sess->id, .stream = stream, .after_seq = 0,
                      .announce_durable = srv->cfg.emit_early, .on_end = on_stream_end,
                      .end_ud = e};
    tm_req_add_header(r, "X-Accel-Buffering", "no");
    int rc = tm_feed_attach(srv, r, &o);
    if (rc) {
        tm_sess_unref(e->sess);
        free(e);
    }
    return rc;
}

void tm_modern_attach(tm_job *j)
{
    pthread_mutex_lock(&j->mu);
    tm_req *r = j->lazy;
    j->lazy = NULL;
    pthread_mutex_unlock(&j->mu);
    if (!r)
        return;
    int rc = tm_modern_attach_stream(j->srv, r, j->sess, j->stream, tm_job_is(j, TM_POST_EPHEMERAL), 0);
    if (rc)
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", tidemark_strerror(rc),
                       NULL);
}

/* The committed answer of a call whose response rode with an effect: the
 * record's (the result, or the fallback when the effect failed). */
static void answer_committed(tm_job *j, tm_req *r)
{
    tm_request_rec rec;
    int rc = tm_store_request_get(j->srv->store, j->sess->id, j->final_key, &rec);
    json_t *resp = rc == 0 && rec.state == TM_REQ_COMPLETED && rec.response
                       ? json_loadb(rec.response, rec.response_len, JSON_ALLOW_NUL, NULL)
                       : NULL;
    if (resp)
        tm_req_reply(r, tm_modern_status(resp), "application/json", rec.response,
                      rec.response_len);
    else
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "store_error",
                       "the committed answer could not be read back", NULL);
    json_decref(resp);
    if (rc == 0)
        tm_request_rec_clear(&rec);
}

void tm_modern_answer_durable(tidemark_server_t *srv, tm_sess *sess, tm_req *r,
                              int ephemeral, int status, unsigned http_status, const char *body,
                              size_t len)
{
    if (status)
        tm_reply_store_error(r, status);
    else
        tm_req_reply(r, http_status, "application/json", body, len);
    if (ephemeral && status == 0)
        tm_modern_doom(srv, sess->id);
    tm_modern_release(srv, sess);
}

void tm_modern_answer(tm_job *j, const json_t *resp)
{
    tm_req *r = j->lazy;
    j->lazy = NULL;
    int rc = tm_store_sync(j->srv->store); /* the answer is durable before it is sent */
    if (!resp)
        tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "shutting_down", "Server is stopping", NULL);
    else if (rc)
        tm_reply_store_error(r, rc);
    else if (j->final_effect)
        answer_committed(j, r);
    else if (j->final_bytes)
        tm_req_reply(r, tm_modern_status(resp), "application/json", j->final_bytes, j->final_len);
    else
        tm_reply_json(r, tm_modern_status(resp), json_deep_copy(resp));
    if (tm_job_is(j, TM_POST_EPHEMERAL) && rc == 0)
        tm_modern_doom(j->srv, j->sess->id);
    tm_modern_release(j->srv, j->sess);
}

/* Whether the listener's filter f lists, in its array named list, the
 * string params carries as field (a resource's uri, a task's id). */
static int listed(const json_t *f, const char *list, const json_t *params, const char *field)
{
    const char *want = json_string_value(json_object_get(params, field));
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(f, list), i, v)
        if (want && json_is_string(v) && strcmp(json_string_value(v), want) == 0)
            return 1;
    return 0;
}

int tm_modern_listener_msg(const json_t *attrs, const char *method, const json_t *params,
                           json_t **msg)
{
    *msg = NULL;
    json_t *l = json_object_get(attrs, "listen");
    json_t *f = json_object_get(l, "f");
    const char *flag = strcmp(method, "notifications/tools/list_changed") == 0 ? "toolsListChanged"
                       : strcmp(method, "notifications/prompts/list_changed") == 0
                           ? "promptsListChanged"
                       : strcmp(method, "notifications/resources/list_changed") == 0
                           ? "resourcesListChanged"
                           : NULL;
    int want = flag ? json_is_true(json_object_get(f, flag)) : 0;
    if (strcmp(method, "notifications/resources/updated") == 0)
        want = listed(f, "resourceSubscriptions", params, "uri");
    if (strcmp(method, "notifications/tasks") == 0)
        want = listed(f, "taskIds", params, "taskId");
    if (!want)
        return 0;
    json_t *p = params ? json_deep_copy(params) : json_object();
    json_object_set_new(p, "_meta", json_pack("{s:O}", TM_META_SUB, json_object_get(l, "id")));
    *msg = tm_jsonrpc_notification(method, p);
    return *msg != NULL;
}
