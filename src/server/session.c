/* session.c - runtime session state: calls in flight, server->client
 * requests waiting for answers, the logging level (a copy of the stored
 * attribute; subscriptions live only in the store). */
#include "server_int.h"
#include "feed.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "../base/random.h"
#include "tidemark/tidemark.h"
#include <gnutls/crypto.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const tm_log_levels[8] = {"debug",    "info",  "notice", "warning",
                                      "error",    "critical", "alert", "emergency"};

int tm_log_level_index(const char *name)
{
    for (int i = 0; i < 8; i++)
        if (name && strcmp(name, tm_log_levels[i]) == 0)
            return i;
    return -1;
}

/* A server->client request waiting for its answer. */
typedef struct tm_waiter {
    int done;
    int is_error;
    json_t *value;
} tm_waiter;

void tm_sess_observe_end(tidemark_server_t *srv, const tm_sess *s)
{
    tm_mcp_labels l = {.version = s->version, .transport = "tcp"};
    tm_mcp_observe(srv->m.mcp.session, &l, (uint64_t)(tm_now_us() - s->born_us));
}

tm_sess *tm_sess_new(const char *id, const char *version, json_t *client)
{
    tm_sess *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    atomic_init(&s->refs, 1);
    atomic_init(&s->used_ms, tm_now_ms());
    s->born_us = tm_now_us();
    snprintf(s->id, sizeof s->id, "%s", id);
    snprintf(s->version, sizeof s->version, "%s", version);
    /* The owner is part of the stored record (created with it, in one
     * write), so every node and a restarted one see the same. */
    const char *p = json_string_value(json_object_get(client, TM_CLIENT_PRINCIPAL));
    snprintf(s->principal, sizeof s->principal, "%s",
             p && strlen(p) < sizeof s->principal ? p : p ? "" : TM_PRINCIPAL_ANON);
    s->client = client ? json_incref(client) : json_object();
    pthread_mutex_init(&s->mu, NULL);
    tm_cond_init_monotonic(&s->cv);
    s->log_level = 0;
    s->calls = tm_map_new();
    s->pending = tm_map_new();
    s->subs = json_object();
    if (!s->calls || !s->pending || !s->subs) {
        tm_sess_unref(s);
        return NULL;
    }
    return s;
}

const char *tm_sid_tag(const char *sid, char out[16])
{
    unsigned char d[32];
    if (!sid || gnutls_hash_fast(GNUTLS_DIG_SHA256, sid, strlen(sid), d) != 0) {
        snprintf(out, 16, "s-?");
        return out;
    }
    snprintf(out, 16, "s-%02x%02x%02x%02x%02x", d[0], d[1], d[2], d[3], d[4]);
    return out;
}

tm_sess *tm_sess_ref(tm_sess *s)
{
    atomic_fetch_add(&s->refs, 1);
    return s;
}

void tm_sess_unref(tm_sess *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    json_decref(s->client);
    json_decref(s->subs);
    tm_map_free(s->calls);
    tm_map_free(s->pending);
    tm_map_free(s->recorded);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* A retry is told from a new request by its record; a session whose
 * records were all begun here knows its keys without asking the store
 * (a quiet call, which has none, needs no lookup). Bounded: past
 * TM_SESS_RECORDED_MAX keys only the highest integer id is kept, which
 * still answers for a client whose ids rise; any other key asks the store. */
void tm_sess_know_records(tm_sess *s)
{
    pthread_mutex_lock(&s->mu);
    if (!s->records_known) {
        s->records_known = 1;
        s->max_int_key = INT64_MIN;
        s->recorded = tm_map_new(); /* NULL: only the integer ids are known */
    }
    pthread_mutex_unlock(&s->mu);
}

/* key names an integer request id ("i:N", as tm_jsonrpc_id_key writes it).
 * OUT v: N. */
static int int_key(const char *key, int64_t *v)
{
    if (strncmp(key, "i:", 2) != 0 || !key[2])
        return 0;
    errno = 0;
    char *end;
    long long n = strtoll(key + 2, &end, 10);
    if (*end || errno)
        return 0;
    *v = n;
    return 1;
}

void tm_sess_note_record(tm_sess *s, const char *key)
{
    int64_t n;
    int is_int = int_key(key, &n);
    pthread_mutex_lock(&s->mu);
    if (s->records_known && is_int && n > s->max_int_key)
        s->max_int_key = n;
    if (s->recorded && (tm_map_count(s->recorded) >= TM_SESS_RECORDED_MAX ||
                        tm_map_put(s->recorded, key, s) != 0)) {
        tm_map_free(s->recorded);
        s->recorded = NULL;
    }
    pthread_mutex_unlock(&s->mu);
}

int tm_sess_surely_unrecorded(tm_sess *s, const char *key)
{
    int64_t n;
    int is_int = int_key(key, &n);
    pthread_mutex_lock(&s->mu);
    int absent = s->records_known &&
                 (s->recorded ? !tm_map_get(s->recorded, key)
                              : is_int && n > s->max_int_key);
    pthread_mutex_unlock(&s->mu);
    return absent;
}

void tm_sess_calls_del(tm_sess *s, const char *key)
{
    if (tm_map_del(s->calls, key))
        s->calls_gone++;
}

void tm_sess_call_settled(tm_sess *s)
{
    pthread_mutex_lock(&s->mu);
    s->calls_gone++;
    pthread_mutex_unlock(&s->mu);
}

void tm_req_prefetch_clear(tm_req_prefetch *pf)
{
    if (pf && pf->rc == 0)
        tm_request_rec_clear(&pf->rec);
    if (pf)
        pf->rc = 1;
}

/* The store's word on s, a session nodes share: another node may have
 * deleted it (or Redis lost it, FLUSHALL) or changed an attribute. With
 * key: its request record read in the same round trip. */
static int shared_check(tidemark_server_t *srv, tm_sess *s, const char *key, tm_req_prefetch *pf)
{
    tm_session_rec chk;
    int rc;
    if (key && pf) {
        pthread_mutex_lock(&s->mu);
        pf->gone = s->calls_gone;
        pthread_mutex_unlock(&s->mu);
        tm_counter_inc(srv->m.lookups); /* with the session's read */
        rc = tm_store_session_request_get(srv->store, s->id, key, &chk, &pf->rec, &pf->rc);
    } else {
        rc = tm_store_session_get(srv->store, s->id, &chk);
    }
    if (rc == 0) {
        tm_sess_apply_attrs(s, chk.attrs);
        tm_session_rec_clear(&chk);
    }
    return rc;
}

tm_sess *tm_sess_find(tidemark_server_t *srv, const char *id)
{
    return tm_sess_find_prefetch(srv, id, NULL, NULL);
}

tm_sess *tm_sess_find_prefetch(tidemark_server_t *srv, const char *id, const char *key,
                               tm_req_prefetch *pf)
{
    if (!id || strlen(id) != TM_SESSION_ID_LEN)
        return NULL;
    pthread_mutex_lock(&srv->mu);
    tm_sess *s = tm_map_get(srv->sessions, id);
    if (s)
        tm_sess_ref(s);
    pthread_mutex_unlock(&srv->mu);
    if (s && tm_store_shared(srv->store) && shared_check(srv, s, key, pf) == TIDEMARK_ENOTFOUND) {
        pthread_mutex_lock(&srv->mu);
        tm_sess *m = tm_map_get(srv->sessions, id);
        if (m == s && tm_map_del(srv->sessions, id) == s) {
            tm_gauge_add(srv->m.sessions_open, -1);
            tm_sess_unref(s); /* the map's reference */
        }
        pthread_mutex_unlock(&srv->mu);
        tm_sess_bound_drop(srv, id); /* deleted through another node, or lost */
        tm_sess_close(s);
        tm_sess_unref(s);
        return NULL;
    }
    if (s) {
        atomic_store(&s->used_ms, tm_now_ms());
        return s;
    }
    /* Not in memory: a session created before a restart lives in the store. */
    tm_session_rec rec;
    if (tm_store_session_get(srv->store, id, &rec) != 0)
        return NULL;
    json_t *client = rec.client ? json_loads(rec.client, JSON_ALLOW_NUL, NULL) : NULL;
    tm_sess *n = tm_sess_new(rec.id, rec.protocol_version ? rec.protocol_version : "", client);
    json_decref(client);
    if (n)
        tm_sess_apply_attrs(n, rec.attrs);
    tm_session_rec_clear(&rec);
    if (!n)
        return NULL;
    pthread_mutex_lock(&srv->mu);
    s = tm_map_get(srv->sessions, id);
    if (s) {
        tm_sess_ref(s);
        tm_sess_unref(n);
    } else if (tm_map_put(srv->sessions, n->id, n) == 0) {
        tm_gauge_add(srv->m.sessions_open, 1);
        s = tm_sess_ref(n);
    } else {
        tm_sess_unref(n);
    }
    pthread_mutex_unlock(&srv->mu);
    return s;
}

int tm_sess_client_has(const tm_sess *s, const char *capability)
{
    json_t *caps = json_object_get(s->client, "capabilities");
    return json_object_get(caps, capability) != NULL;
}

int tm_session_append(tidemark_server_t *srv, const char *id, const char *stream, json_t *msg,
                      unsigned flags)
{
    size_t len;
    char *bytes = tm_jsonrpc_dump(msg, &len);
    if (!bytes)
        return TIDEMARK_ENOMEM;
    int rc = tm_session_append_bytes(srv, id, stream, bytes, len, flags);
    free(bytes);
    return rc;
}

int tm_session_append_bytes(tidemark_server_t *srv, const char *id, const char *stream,
                            const char *bytes, size_t len, unsigned flags)
{
    int rc = tm_store_append(srv->store, id, stream, bytes, len, flags, NULL, NULL);
    if (rc)
        TM_WARN("append to %s/%s failed: %s", TM_SID(id), stream, tidemark_strerror(rc));
    return rc;
}

int tm_sess_append(tidemark_server_t *srv, tm_sess *s, const char *stream, json_t *msg,
                   unsigned flags)
{
    return tm_session_append(srv, s->id, stream, msg, flags);
}

int tm_sess_set_attr(tidemark_server_t *srv, tm_sess *s, const char *name, const char *value)
{
    int rc = tm_store_session_set_attr(srv->store, s->id, name, value);
    if (rc)
        TM_WARN("session %s: storing attribute %s failed: %s", TM_SID(s->id), name, tidemark_strerror(rc));
    return rc;
}

void tm_sess_apply_attrs(tm_sess *s, const char *attrs)
{
    json_t *o = attrs ? json_loads(attrs, JSON_ALLOW_NUL, NULL) : NULL;
    int lvl = tm_log_level_index(json_string_value(json_object_get(o, "log_level")));
    json_t *subs = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (strncmp(k, "sub:", 4) == 0 && json_is_true(v))
            json_object_set(subs, k + 4, json_true());
    }
    json_decref(o);
    pthread_mutex_lock(&s->mu);
    s->log_level = lvl < 0 ? 0 : lvl;
    if (subs) {
        json_decref(s->subs);
        s->subs = subs;
    }
    pthread_mutex_unlock(&s->mu);
}

static void cancel_call(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    tidemark_call_t *c = v;
    atomic_store(&c->cancelled, 1);
}

void tm_sess_close(tm_sess *s)
{
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->closed, 1);
    tm_map_each(s->calls, cancel_call, NULL);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Hand m to a server->client request of s waiting on this node. Returns 1
 * when one was waiting. */
static int deliver_local(tm_sess *s, const tm_msg *m)
{
    char key[TM_ID_KEY_MAX];
    if (tm_jsonrpc_id_key(m->id, key, sizeof key) != 0)
        return 0;
    pthread_mutex_lock(&s->mu);
    tm_waiter *w = tm_map_get(s->pending, key);
    if (w && !w->done) {
        w->done = 1;
        w->is_error = m->kind == TM_MSG_ERROR;
        w->value = json_incref(m->kind == TM_MSG_ERROR ? m->error : m->result);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return w != NULL;
}

#define BUS_RESPONSE "resp"

void tm_sess_deliver_response(tidemark_server_t *srv, tm_sess *s, const tm_msg *m)
{
    if (deliver_local(s, m))
        return;
    /* No waiter here: with nodes sharing the store, the request may wait on
     * another node (the load balancer sent its answer here). The bus carries
     * "<session> <message>"; the node holding the waiter takes it. */
    if (!tm_store_shared(srv->store)) {
        TM_DEBUG("session %s: response to an unknown request ignored", s->id);
        return;
    }
    size_t len;
    char *bytes = tm_jsonrpc_dump(m->raw, &len);
    char *msg = bytes ? malloc(TM_SESSION_ID_LEN + 1 + len) : NULL;
    if (msg) {
        memcpy(msg, s->id, TM_SESSION_ID_LEN);
        msg[TM_SESSION_ID_LEN] = ' ';
        memcpy(msg + TM_SESSION_ID_LEN + 1, bytes, len);
        int rc = tm_store_publish(srv->store, BUS_RESPONSE, msg, TM_SESSION_ID_LEN + 1 + len);
        if (rc)
            TM_WARN("session %s: cannot forward a response: %s", TM_SID(s->id), tidemark_strerror(rc));
    }
    free(msg);
    free(bytes);
}

void tm_sess_on_bus(void *ud, const char *channel, const void *data, size_t len)
{
    tidemark_server_t *srv = ud;
    const char *p = data;
    if (strcmp(channel, BUS_RESPONSE) != 0 || len <= TM_SESSION_ID_LEN + 1 ||
        p[TM_SESSION_ID_LEN] != ' ')
        return;
    char id[TM_SESSION_ID_LEN + 1];
    memcpy(id, p, TM_SESSION_ID_LEN);
    id[TM_SESSION_ID_LEN] = '\0';
    /* Only a session loaded here can have a waiter here. */
    pthread_mutex_lock(&srv->mu);
    tm_sess *s = tm_map_get(srv->sessions, id);
    if (s)
        tm_sess_ref(s);
    pthread_mutex_unlock(&srv->mu);
    if (!s)
        return;
    json_t *v = json_loadb(p + TM_SESSION_ID_LEN + 1, len - TM_SESSION_ID_LEN - 1, JSON_ALLOW_NUL,
                           NULL);
    tm_msg m;
    tm_jsonrpc_classify(v, &m);
    if (m.kind == TM_MSG_RESULT || m.kind == TM_MSG_ERROR)
        deliver_local(s, &m);
    json_decref(v);
    tm_sess_unref(s);
}

void tm_sess_cancel(tm_sess *s, json_t *request_id)
{
    char key[TM_ID_KEY_MAX];
    if (!tm_jsonrpc_id_valid(request_id) || tm_jsonrpc_id_key(request_id, key, sizeof key) != 0)
        return;
    pthread_mutex_lock(&s->mu);
    tidemark_call_t *c = tm_map_get(s->calls, key);
    if (c)
        atomic_store(&c->cancelled, 1);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Used by call.c: register a waiter, send, wait. */
int tm_sess_request(tidemark_server_t *srv, tidemark_call_t *call, const char *stream,
                    const char *method, json_t *params, int timeout_ms, json_t **result);

static int sess_request(tidemark_server_t *srv, tidemark_call_t *call, const char *stream,
                        const char *method, json_t *params, int timeout_ms, json_t **result)
{
    tm_sess *s = call->sess;
    *result = NULL;
    tm_waiter w = {0};
    char idtxt[48], key[TM_ID_KEY_MAX];
    pthread_mutex_lock(&s->mu);
    unsigned long long n = ++s->next_req;
    pthread_mutex_unlock(&s->mu);
    /* Unique across nodes and restarts, not only per process: the answer may
     * reach another node, whose own waiters must never take it. */
    char nonce[17];
    if (tm_random_hex(nonce, 8) != 0)
        snprintf(nonce, sizeof nonce, "0");
    snprintf(idtxt, sizeof idtxt, "tm-%s-%llu", nonce, n);
    json_t *id = json_string(idtxt);
    tm_jsonrpc_id_key(id, key, sizeof key);
    pthread_mutex_lock(&s->mu);
    int rc = tm_map_put(s->pending, key, &w);
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        json_decref(id);
        return rc;
    }
    json_t *msg = tm_jsonrpc_request(id, method, params ? json_incref(params) : json_object());
    rc = tm_sess_append(srv, s, stream, msg, 0);
    json_decref(msg);
    struct timespec dl = tm_deadline_ms(timeout_ms > 0 ? timeout_ms : 60000);
    pthread_mutex_lock(&s->mu);
    while (!rc && !w.done && !atomic_load(&s->closed) && !atomic_load(&call->cancelled)) {
        if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) != 0) {
            rc = TIDEMARK_ETIMEDOUT;
            break;
        }
    }
    tm_map_del(s->pending, key);
    pthread_mutex_unlock(&s->mu);
    if (w.done) {
        *result = w.value;
        return w.is_error ? TIDEMARK_EPEER : 0;
    }
    if (!rc)
        rc = TIDEMARK_ECANCELED;
    return rc;
}

/* A request to the client is a CLIENT span under its call's SERVER span,
 * its traceparent in the request's params._meta (a copy: the handler's
 * params are its own). */
int tm_sess_request(tidemark_server_t *srv, tidemark_call_t *call, const char *stream,
                    const char *method, json_t *params, int timeout_ms, json_t **result)
{
    if (!call->span)
        return sess_request(srv, call, stream, method, params, timeout_ms, result);
    json_t *p = params ? json_deep_copy(params) : json_object();
    if (!p)
        return TIDEMARK_ENOMEM;
    tm_span *sp = tm_mcp_span_start(srv->otel, TM_SPAN_CLIENT, method, p, NULL,
                                    tm_span_ctx(call->span), tm_span_tracestate(call->span));
    tm_span_set_str(sp, "mcp.session.id", call->sess->id);
    tm_span_set_str(sp, "mcp.protocol.version", call->sess->version);
    int rc = tm_mcp_inject(sp, p);
    if (!rc)
        rc = sess_request(srv, call, stream, method, p, timeout_ms, result);
    tm_mcp_span_finish(sp, rc, *result);
    json_decref(p);
    return rc;
}

/* ---- sessions counted per address and in all; idle ones let go ---------- */

/* The sessions made from one address that are still in the store. */
typedef struct addr_count {
    size_t n;
    char addr[64];
} addr_count;

/* Every session this node counts, by id, and the count per address. On a
 * store of one node that is every session in the store (read at start,
 * then kept by initialize, DELETE, expiry); on a shared store, those in it
 * at start plus those made here, less those this node sees go. */
struct tm_sess_bound {
    pthread_mutex_t mu;
    tm_map *owner; /* session id -> its addr_count */
    tm_map *addrs; /* address ("" unknown) -> addr_count, freed at 0 */
    size_t total;
};

int tm_sess_bound_new(tidemark_server_t *srv)
{
    struct tm_sess_bound *b = calloc(1, sizeof *b);
    if (!b)
        return TIDEMARK_ENOMEM;
    pthread_mutex_init(&b->mu, NULL);
    b->owner = tm_map_new();
    b->addrs = tm_map_new();
    srv->bound = b;
    if (!b->owner || !b->addrs) {
        tm_sess_bound_free(srv);
        return TIDEMARK_ENOMEM;
    }
    return 0;
}

static void free_count(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    free(v);
}

void tm_sess_bound_free(tidemark_server_t *srv)
{
    struct tm_sess_bound *b = srv->bound;
    if (!b)
        return;
    if (b->addrs)
        tm_map_each(b->addrs, free_count, NULL);
    tm_map_free(b->addrs);
    tm_map_free(b->owner);
    pthread_mutex_destroy(&b->mu);
    free(b);
    srv->bound = NULL;
}

/* Count session id under address a (b->mu held); 0 when already counted. */
static int count_locked(struct tm_sess_bound *b, const char *a, const char *id)
{
    if (tm_map_get(b->owner, id))
        return 0;
    addr_count *ac = tm_map_get(b->addrs, a);
    if (!ac) {
        if (!(ac = calloc(1, sizeof *ac)))
            return TIDEMARK_ENOMEM;
        snprintf(ac->addr, sizeof ac->addr, "%s", a);
        if (tm_map_put(b->addrs, ac->addr, ac) != 0) {
            free(ac);
            return TIDEMARK_ENOMEM;
        }
    }
    if (tm_map_put(b->owner, id, ac) != 0) {
        if (ac->n == 0)
            free(tm_map_del(b->addrs, ac->addr));
        return TIDEMARK_ENOMEM;
    }
    ac->n++;
    b->total++;
    return 0;
}

int tm_sess_bound_admit(tidemark_server_t *srv, const char *addr, const char *id)
{
    struct tm_sess_bound *b = srv->bound;
    const char *a = addr && strlen(addr) < sizeof ((addr_count *)0)->addr ? addr : "";
    unsigned all = srv->cfg.max_sessions, per = srv->cfg.max_sessions_per_address;
    if (!b)
        return 0;
    pthread_mutex_lock(&b->mu);
    addr_count *ac = tm_map_get(b->addrs, a);
    int rc = all && b->total >= all                    ? 503
             : per && a[0] && ac && ac->n >= per       ? 429
                                                        : count_locked(b, a, id);
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void tm_sess_bound_drop(tidemark_server_t *srv, const char *id)
{
    struct tm_sess_bound *b = srv->bound;
    if (!b || !id)
        return;
    pthread_mutex_lock(&b->mu);
    addr_count *ac = tm_map_del(b->owner, id);
    if (ac) {
        b->total--;
        if (--ac->n == 0)
            free(tm_map_del(b->addrs, ac->addr));
    }
    pthread_mutex_unlock(&b->mu);
}

static int load_one(void *ud, const tm_session_rec *rec)
{
    struct tm_sess_bound *b = ud;
    json_t *c = rec->client ? json_loads(rec->client, JSON_ALLOW_NUL, NULL) : NULL;
    /* Only sessions initialize made over HTTP carry their address: not the
     * store sessions of 2026-07-28 calls, tasks or keys. */
    const char *a = json_string_value(json_object_get(c, TM_CLIENT_ADDRESS));
    int rc = rec->id && a && strlen(a) < sizeof ((addr_count *)0)->addr
                 ? count_locked(b, a, rec->id) : 0;
    json_decref(c);
    return rc;
}

int tm_sess_bound_load(tidemark_server_t *srv)
{
    struct tm_sess_bound *b = srv->bound;
    pthread_mutex_lock(&b->mu);
    int rc = tm_store_sessions_each(srv->store, load_one, b);
    pthread_mutex_unlock(&b->mu);
    if (rc == 0 && b->total)
        TM_INFO("%zu sessions in the store, from %zu addresses", b->total,
                tm_map_count(b->addrs));
    return rc;
}

int tm_session_limit_status(const json_t *resp)
{
    json_t *data = json_object_get(json_object_get(resp, "error"), "data");
    const char *why = json_string_value(json_object_get(data, "reason"));
    if (!why || strcmp(why, "too_many_sessions") != 0)
        return 0;
    const char *scope = json_string_value(json_object_get(data, "scope"));
    return scope && strcmp(scope, "address") == 0 ? 429 : 503;
}

/* A loaded session nothing holds: only the map's reference, no call, no
 * server->client request waiting, no GET stream attached (the janitor
 * touches only loaded sessions: one with a stream stays loaded so that it
 * does not expire). srv->mu held, so nobody can take a new reference from
 * the map meanwhile. */
static int evictable(tidemark_server_t *srv, tm_sess *s)
{
    if (atomic_load(&s->refs) != 1 || tm_feed_session_attached(srv, s->id))
        return 0;
    pthread_mutex_lock(&s->mu);
    int idle = tm_map_count(s->calls) == 0 && tm_map_count(s->pending) == 0;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

typedef struct evict_list {
    tidemark_server_t *srv;
    tm_sess **v;
    size_t n, cap;
} evict_list;

static void collect_idle(const char *k, void *v, void *ud)
{
    (void)k;
    evict_list *l = ud;
    if (l->n < l->cap && evictable(l->srv, v))
        l->v[l->n++] = v;
}

static int older_first(const void *a, const void *b)
{
    int64_t x = atomic_load(&(*(tm_sess *const *)a)->used_ms);
    int64_t y = atomic_load(&(*(tm_sess *const *)b)->used_ms);
    return x < y ? -1 : x > y;
}

void tm_sess_evict_idle(tidemark_server_t *srv)
{
    pthread_mutex_lock(&srv->mu);
    size_t count = tm_map_count(srv->sessions);
    evict_list l = {srv, NULL, 0, count};
    if (count > TM_SESS_CACHE_MAX && (l.v = malloc(count * sizeof *l.v)) != NULL)
        tm_map_each(srv->sessions, collect_idle, &l);
    /* Down to 3/4 of the cap, the least recently used first. */
    size_t want = count > TM_SESS_CACHE_MAX ? count - TM_SESS_CACHE_MAX * 3 / 4 : 0;
    if (l.n > want)
        qsort(l.v, l.n, sizeof *l.v, older_first);
    size_t gone = 0;
    for (size_t i = 0; i < l.n && gone < want; i++) {
        if (tm_map_del(srv->sessions, l.v[i]->id) != l.v[i])
            continue;
        tm_sess_unref(l.v[i]); /* the last reference (evictable) */
        gone++;
    }
    if (gone)
        tm_gauge_add(srv->m.sessions_open, -(int64_t)gone);
    pthread_mutex_unlock(&srv->mu);
    free(l.v);
    if (gone)
        TM_DEBUG("%zu idle sessions let go from memory (the store keeps them)", gone);
}
