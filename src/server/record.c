/* record.c - the request-record rule of both eras (record.h). */
#include "record.h"
#include "../base/clock.h"
#include "../base/map.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <gnutls/crypto.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- fingerprint ------------------------------------------------------------ */

/* The members of params but _meta (params absent: none). */
static size_t members(const json_t *params)
{
    size_t n = json_object_size(params);
    return n - (json_object_get(params, "_meta") != NULL);
}

static int same_params(const json_t *a, const json_t *b)
{
    if (!a || !b) { /* absent params are no params: as {} (or only _meta) */
        const json_t *p = a ? a : b;
        return !p || (json_is_object(p) && members(p) == 0);
    }
    if (!json_is_object(a) || !json_is_object(b))
        return json_equal(a, b);
    if (members(a) != members(b))
        return 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)a, k, v) {
        if (strcmp(k, "_meta") != 0 && !json_equal(v, json_object_get(b, k)))
            return 0;
    }
    return 1;
}

int tm_record_same(const json_t *first, const json_t *now)
{
    return json_is_object(first) && json_is_object(now) &&
           json_equal(json_object_get(first, "method"), json_object_get(now, "method")) &&
           same_params(json_object_get(first, "params"), json_object_get(now, "params"));
}

/* ---- verdicts --------------------------------------------------------------- */

json_t *tm_record_answer(const tm_request_rec *rec, json_t *id)
{
    json_t *resp = rec->response ? json_loadb(rec->response, rec->response_len, JSON_ALLOW_NUL,
                                              NULL) : NULL;
    if (resp && !json_equal(json_object_get(resp, "id"), id))
        json_object_set(resp, "id", id); /* re-issued under a new request id */
    return resp;
}

json_t *tm_record_refusal(const tm_msg *m)
{
    json_t *k = json_object_get(json_object_get(m->params, "_meta"), TM_META_IDEM_KEY);
    if (json_is_string(k))
        return tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS,
                                "This idempotency key was used for another request",
                                "idempotency_key_reused", NULL);
    return tm_jsonrpc_error(m->id, TM_RPC_INVALID_REQUEST,
                            "Invalid Request: this request id was used for another request in "
                            "this session",
                            "id_reused", NULL);
}

/* The verdict of rec on raw; OUT *orig (new ref): the recorded message. */
static tm_rec_verdict verdict_of(const tm_request_rec *rec, const json_t *raw, json_t **orig)
{
    *orig = rec->message ? json_loads(rec->message, JSON_ALLOW_NUL, NULL) : NULL;
    if (!tm_record_same(*orig, raw))
        return TM_REC_REUSED;
    return rec->state == TM_REQ_COMPLETED && rec->response ? TM_REC_ANSWERED : TM_REC_RUNNING;
}

static void counted(tidemark_server_t *srv, const tm_rec_look *look)
{
    if (srv && (look->verdict == TM_REC_ANSWERED || look->verdict == TM_REC_RUNNING))
        tm_counter_inc(srv->m.deduplicated);
}

tm_rec_verdict tm_record_judge(tidemark_server_t *srv, const tm_request_rec *rec, const json_t *raw)
{
    json_t *orig = NULL;
    tm_rec_look look = {.verdict = rec ? verdict_of(rec, raw, &orig) : TM_REC_NEW};
    json_decref(orig);
    counted(srv, &look);
    return look.verdict;
}

/* The verdict of rec on m into look (not counted). */
static void judge_into(const tm_request_rec *rec, const tm_msg *m, tm_rec_look *look)
{
    json_t *orig;
    look->verdict = verdict_of(rec, m->raw, &orig);
    if (look->verdict == TM_REC_REUSED) {
        look->answer = tm_record_refusal(m);
    } else if (look->verdict == TM_REC_ANSWERED) {
        look->answer = tm_record_answer(rec, m->id);
    } else {
        snprintf(look->stream, sizeof look->stream, "%s", rec->stream ? rec->stream : "");
        look->same_id = json_equal(json_object_get(orig, "id"), m->id);
    }
    json_decref(orig);
}

void tm_rec_look_clear(tm_rec_look *look)
{
    json_decref(look->answer);
    memset(look, 0, sizeof *look);
}

/* A call of sess running under key that a retry can join (its stream
 * known): its verdict into look, 1. 0 when there is none. OUT *fresh: pf
 * was read after the last call of the session settled. */
static int look_live(tm_sess *sess, const char *key, const tm_msg *m, tm_req_prefetch *pf,
                     tm_rec_look *look, int *fresh)
{
    pthread_mutex_lock(&sess->mu);
    *fresh = pf && pf->rc != 1 && pf->gone == sess->calls_gone; /* no call settled since */
    tidemark_call_t *live = tm_map_get(sess->calls, key);
    const char *stream = NULL;
    if (live && live->job && live->job->sse)
        stream = live->job->stream;
    else if (live && !live->job && live->stream[0]) /* inline, its response committing */
        stream = live->stream;
    if (stream && live->request && !tm_record_same(live->request, m->raw)) {
        look->verdict = TM_REC_REUSED;
    } else if (stream) {
        look->verdict = TM_REC_RUNNING;
        snprintf(look->stream, sizeof look->stream, "%s", stream);
        look->same_id = json_equal(live->id, m->id);
    }
    pthread_mutex_unlock(&sess->mu);
    if (look->verdict == TM_REC_REUSED)
        look->answer = tm_record_refusal(m);
    return stream != NULL;
}

/* The record of (sess, key) judged into look, under the claim this request
 * holds (so no other request of this process begins it meanwhile). */
static void look_recorded(tidemark_server_t *srv, tm_sess *sess, const char *key, const tm_msg *m,
                          tm_req_prefetch *pf, int fresh, tm_rec_look *look)
{
    tm_request_rec rec;
    if (fresh && pf->rc == 0) { /* read with the session: taken over */
        rec = pf->rec;
        pf->rc = 1;
    } else if (fresh || tm_sess_surely_unrecorded(sess, key)) {
        return;
    } else {
        tm_counter_inc(srv->m.lookups);
        if (tm_store_request_get(srv->store, sess->id, key, &rec) != 0)
            return;
    }
    judge_into(&rec, m, look);
    tm_request_rec_clear(&rec);
}

void tm_record_look(tidemark_server_t *srv, tm_sess *sess, const tm_msg *m, tm_req_prefetch *pf,
                    tm_rec_look *look)
{
    char key[TM_REQ_KEY_MAX];
    int fresh;
    memset(look, 0, sizeof *look);
    if (tm_request_key(m, key) != 0)
        return;
    if (tm_call_write_pending(srv, sess->id, key)) {
        look->verdict = TM_REC_UNSETTLED; /* until the store recovers and it is finished */
        return;
    }
    if (!look_live(sess, key, m, pf, look, &fresh)) {
        /* Claimed before the record is read: a request that claims after
         * the holder let go reads what the holder's call left there. */
        int claim = tm_record_claim(srv, sess->id, key);
        if (claim == 0) {
            look->verdict = TM_REC_CLAIMED;
            return;
        }
        look_recorded(srv, sess, key, m, pf, fresh, look);
        if (claim == 1 && look->verdict == TM_REC_NEW)
            look->claimed = 1;
        else if (claim == 1)
            tm_record_unclaim(srv, sess->id, key);
    }
    counted(srv, look);
}

void tm_record_look_store(tidemark_server_t *srv, const char *sid, const char *key,
                          const tm_msg *m, tm_rec_look *look)
{
    tm_request_rec rec;
    memset(look, 0, sizeof *look);
    tm_counter_inc(srv->m.lookups);
    if (tm_store_request_get(srv->store, sid, key, &rec) != 0)
        return;
    judge_into(&rec, m, look);
    tm_request_rec_clear(&rec);
    counted(srv, look);
}

/* ---- waiting for a record's commit -------------------------------------------- */

typedef struct rec_waiter {
    const char *sid;
    int woken;                /* a commit of sid since the last read (under mu) */
    struct rec_waiter *next;
} rec_waiter;

struct tm_rec_waits {
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* CLOCK_MONOTONIC; also told of every claim let go */
    atomic_int n;             /* waiters in the list: the listener's fast path */
    rec_waiter *head;
    tm_map *claims;           /* "session/key" of the identities claimed (under mu) */
};

int tm_record_waits_new(tidemark_server_t *srv)
{
    struct tm_rec_waits *w = calloc(1, sizeof *w);
    pthread_condattr_t ca;
    int ok = w && pthread_condattr_init(&ca) == 0;
    if (ok) {
        ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
             pthread_cond_init(&w->cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (!ok) {
        free(w);
        return TIDEMARK_ENOMEM;
    }
    if (!(w->claims = tm_map_new())) {
        pthread_cond_destroy(&w->cv);
        free(w);
        return TIDEMARK_ENOMEM;
    }
    pthread_mutex_init(&w->mu, NULL);
    atomic_init(&w->n, 0);
    srv->rec_waits = w;
    return 0;
}

void tm_record_waits_free(tidemark_server_t *srv)
{
    struct tm_rec_waits *w = srv->rec_waits;
    if (!w)
        return;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    tm_map_free(w->claims);
    free(w);
    srv->rec_waits = NULL;
}

void tm_record_wake(tidemark_server_t *srv, const char *session)
{
    struct tm_rec_waits *w = srv->rec_waits;
    if (!w || atomic_load(&w->n) == 0)
        return;
    int any = 0;
    pthread_mutex_lock(&w->mu);
    for (rec_waiter *x = w->head; x; x = x->next)
        if (strcmp(x->sid, session) == 0)
            any = x->woken = 1;
    if (any)
        pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void tm_record_wake_all(tidemark_server_t *srv)
{
    struct tm_rec_waits *w = srv->rec_waits;
    if (!w)
        return;
    pthread_mutex_lock(&w->mu); /* a waiter reads srv->stopping under mu */
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void waiter_add(struct tm_rec_waits *w, rec_waiter *x)
{
    pthread_mutex_lock(&w->mu);
    x->next = w->head;
    w->head = x;
    atomic_fetch_add(&w->n, 1);
    pthread_mutex_unlock(&w->mu);
}

static void waiter_del(struct tm_rec_waits *w, rec_waiter *x)
{
    pthread_mutex_lock(&w->mu);
    for (rec_waiter **pp = &w->head; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    atomic_fetch_sub(&w->n, 1);
    pthread_mutex_unlock(&w->mu);
}

/* Sleep until a commit of x's session, the deadline (monotonic ms) or the
 * stop; clear the wake-up. 1 when woken by a commit. */
static int await_commit(tidemark_server_t *srv, struct tm_rec_waits *w, rec_waiter *x,
                        int64_t deadline)
{
    struct timespec ts = {(time_t)(deadline / 1000), (long)(deadline % 1000) * 1000000L};
    pthread_mutex_lock(&w->mu);
    while (!x->woken && !atomic_load(&srv->stopping) && tm_now_ms() < deadline)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) == ETIMEDOUT)
            break;
    int woken = x->woken && !atomic_load(&srv->stopping);
    x->woken = 0; /* a commit from now on wakes the next wait: read after this */
    pthread_mutex_unlock(&w->mu);
    return woken;
}

/* tm_record_wait; absent: no record yet is waited for too (an inline call
 * begins its record in the commit that completes it). */
static tm_rec_verdict wait_record(tidemark_server_t *srv, const char *sid, const char *key,
                                  const json_t *raw, int64_t wait_ms, int counted_before,
                                  int absent, json_t **answer)
{
    struct tm_rec_waits *w = srv->rec_waits;
    rec_waiter x = {.sid = sid};
    tm_msg m;
    tm_jsonrpc_classify((json_t *)raw, &m); /* read only: its id, method, params */
    tm_rec_look look = {.verdict = TM_REC_RUNNING};
    int64_t deadline = tm_now_ms() + wait_ms;
    *answer = NULL;
    waiter_add(w, &x); /* before the first read: no commit after it goes unseen */
    for (;;) {
        tm_request_rec rec;
        tm_counter_inc(srv->m.lookups);
        int rc = tm_store_request_get(srv->store, sid, key, &rec);
        if (rc == TIDEMARK_ENOTFOUND && absent && await_commit(srv, w, &x, deadline))
            continue;
        if (rc != 0)
            break;
        judge_into(&rec, &m, &look);
        tm_request_rec_clear(&rec);
        if (look.verdict != TM_REC_RUNNING || !await_commit(srv, w, &x, deadline))
            break;
    }
    waiter_del(w, &x);
    if (look.verdict != TM_REC_ANSWERED && look.verdict != TM_REC_REUSED)
        look.verdict = TM_REC_RUNNING;
    if (!counted_before && look.verdict == TM_REC_ANSWERED)
        counted(srv, &look);
    *answer = look.answer;
    return look.verdict;
}

tm_rec_verdict tm_record_wait(tidemark_server_t *srv, const char *sid, const char *key,
                              const json_t *raw, int64_t wait_ms, int counted_before,
                              json_t **answer)
{
    return wait_record(srv, sid, key, raw, wait_ms, counted_before, 0, answer);
}

tm_rec_verdict tm_record_wait_outcome(tidemark_server_t *srv, tm_sess *sess, const tm_msg *m,
                                      int64_t wait_ms, json_t **answer)
{
    char key[TM_REQ_KEY_MAX];
    *answer = NULL;
    if (tm_request_key(m, key) != 0)
        return TM_REC_RUNNING;
    return wait_record(srv, sess->id, key, m->raw, wait_ms, 1, 1, answer);
}

/* ---- claims: one request at a time begins an identity ------------------------- */

/* "session/key" into out (sizeof tidemark_call.idem). 0, or nonzero when it
 * does not fit. */
static int claim_name(char *out, size_t n, const char *sid, const char *key)
{
    return snprintf(out, n, "%s/%s", sid, key) >= (int)n;
}

int tm_record_claim(tidemark_server_t *srv, const char *sid, const char *key)
{
    struct tm_rec_waits *w = srv->rec_waits;
    char name[TM_SESSION_ID_LEN + 1 + TM_REQ_KEY_MAX];
    if (claim_name(name, sizeof name, sid, key))
        return TIDEMARK_EINVAL;
    pthread_mutex_lock(&w->mu);
    int rc = tm_map_get(w->claims, name) ? 0
             : tm_map_put(w->claims, name, w) == 0 ? 1 : TIDEMARK_ENOMEM;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void tm_record_unclaim_name(tidemark_server_t *srv, const char *name)
{
    struct tm_rec_waits *w = srv->rec_waits;
    pthread_mutex_lock(&w->mu);
    if (tm_map_del(w->claims, name))
        pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void tm_record_unclaim(tidemark_server_t *srv, const char *sid, const char *key)
{
    char name[TM_SESSION_ID_LEN + 1 + TM_REQ_KEY_MAX];
    if (!claim_name(name, sizeof name, sid, key))
        tm_record_unclaim_name(srv, name);
}

int tm_record_await_claim(tidemark_server_t *srv, const char *sid, const tm_msg *m,
                          int64_t deadline)
{
    struct tm_rec_waits *w = srv->rec_waits;
    char key[TM_REQ_KEY_MAX], name[TM_SESSION_ID_LEN + 1 + TM_REQ_KEY_MAX];
    if (tm_request_key(m, key) != 0 || claim_name(name, sizeof name, sid, key))
        return 1; /* nothing can claim it */
    struct timespec ts = {(time_t)(deadline / 1000), (long)(deadline % 1000) * 1000000L};
    pthread_mutex_lock(&w->mu);
    while (tm_map_get(w->claims, name) && !atomic_load(&srv->stopping) && tm_now_ms() < deadline)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) == ETIMEDOUT)
            break;
    int free_now = !tm_map_get(w->claims, name) && !atomic_load(&srv->stopping);
    pthread_mutex_unlock(&w->mu);
    return free_now;
}

/* ---- recovery ------------------------------------------------------------------ */

/* An idempotent tool always; an atomic one unless it is a 2026-07-28 call
 * without an idempotency key (its record is keyed by its request id,
 * "i:"/"s:", or its own key in a pooled session, "e:"). Such a call's
 * answer can never reach anyone (that era has no resumption), and its
 * client re-issues it under a new id as a new call: running the orphan too
 * would make the effect twice. It ends outcome_unknown instead. */
int tm_record_may_rerun(int modern, const char *key, unsigned hints)
{
    if (hints & TIDEMARK_TOOL_IDEMPOTENT)
        return 1;
    if (!(hints & TIDEMARK_TOOL_ATOMIC))
        return 0;
    return !(modern && (strncmp(key, "i:", 2) == 0 || strncmp(key, "s:", 2) == 0 ||
                        strncmp(key, "e:", 2) == 0));
}

/* ---- identity ------------------------------------------------------------------ */

static json_t *idem_key_of(const tm_msg *m)
{
    return json_object_get(json_object_get(m->params, "_meta"), TM_META_IDEM_KEY);
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
        m->detail = "_meta[\"" TM_META_IDEM_KEY "\"] must be a non-empty string";
    } else if (json_string_length(k) > TM_IDEM_KEY_MAX_BYTES) {
        m->why = "idempotency_key_too_long";
        m->detail = "_meta[\"" TM_META_IDEM_KEY "\"] is longer than " TM_STRINGIFY(
            TM_IDEM_KEY_MAX_BYTES) " bytes";
    } else {
        m->kind = TM_MSG_REQUEST;
        m->code = 0;
        return 0;
    }
    return 1;
}

/* A round of a multi round-trip call (its requestState and inputResponses)
 * is a request of its own under the same idempotency key: "#" and 32 hex of
 * their SHA-256 follow the key. 0 when there is nothing to add. */
static int round_suffix(const tm_msg *m, char *out, size_t n)
{
    json_t *st = json_object_get(m->params, "requestState");
    json_t *in = json_object_get(m->params, "inputResponses");
    if (!st && !in)
        return 0;
    json_t *both = json_pack("{s:O?,s:O?}", "s", st, "i", in);
    char *txt = both ? json_dumps(both, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(both);
    unsigned char d[32];
    int rc = txt && gnutls_hash_fast(GNUTLS_DIG_SHA256, txt, strlen(txt), d) == 0 ? 0
                                                                                 : TIDEMARK_ENOMEM;
    free(txt);
    size_t len = strlen(out);
    if (rc || len + 34 > n)
        return rc ? rc : TIDEMARK_EINVAL;
    out[len++] = '#';
    for (int i = 0; i < 16; i++)
        snprintf(out + len + 2 * i, 3, "%02x", d[i]);
    return 0;
}

int tm_request_key(const tm_msg *m, char out[TM_REQ_KEY_MAX])
{
    json_t *k = idem_key_of(m);
    if (json_is_string(k) && json_string_length(k) > 0) {
        if (tm_jsonrpc_key_escape("k:", json_string_value(k), json_string_length(k), out,
                                  TM_REQ_KEY_MAX))
            return TIDEMARK_EINVAL;
        return round_suffix(m, out, TM_REQ_KEY_MAX);
    }
    return tm_jsonrpc_id_key(m->id, out, TM_REQ_KEY_MAX) ? TIDEMARK_EINVAL : 0;
}
