/*
 * reconnect.c - what a request does after its exchange was cut: within its
 * attempt budget and deadline, wait the server's retry (clamped) or a
 * jittered backoff, then resume its stream with Last-Event-ID, re-send it
 * where that cannot repeat it, or refuse with a typed reason.
 */
#include "client_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/random.h"
#include <stdio.h>
#include <string.h>

/* Sleep ms, but never past the deadline, and not at all once the client
 * stops. Returns 0 when the whole delay passed, 1 when cut short. */
static int nap(tidemark_client_t *c, long ms, int64_t deadline)
{
    pthread_mutex_lock(&c->mu);
    int64_t end = tm_now_ms() + ms;
    int cut = end >= deadline;
    if (cut)
        end = deadline;
    while (!c->stopping && tm_now_ms() < end) {
        struct timespec ts = tm_deadline_ms(end - tm_now_ms());
        (void)pthread_cond_timedwait(&c->cv, &c->mu, &ts); /* the clock is checked again */
    }
    cut |= c->stopping;
    pthread_mutex_unlock(&c->mu);
    return cut;
}

/* The delay before reconnect attempt n (n = attempts since the last
 * progress). The first is the server's retry exactly, clamped to
 * [retry_min_ms, retry_max_ms], else backoff_ms with jitter; each later one
 * doubles, with full jitter, up to max(backoff_max_ms, the retry). */
static long reconnect_delay(tidemark_client_t *c, rq *r)
{
    /* The config's durations are in [0, UINT32_MAX] (client.c, config_check). */
    unsigned long base = (unsigned long)c->cfg.backoff_ms;
    unsigned long lo = (unsigned long)c->cfg.retry_min_ms, hi = (unsigned long)c->cfg.retry_max_ms;
    if (r->retry_set) {
        base = r->retry_ms;
        if (base < lo)
            base = lo;
        if (base > hi)
            base = hi;
        if (r->attempts <= 1)
            return (long)base;
    }
    unsigned long most = (unsigned long)c->cfg.backoff_max_ms;
    unsigned long cap = most > base ? most : base;
    unsigned long d = base;
    for (unsigned i = 1; i < r->attempts && d < cap; i++)
        d *= 2;
    if (d > cap)
        d = cap;
    uint32_t rnd = 0;
    if (tm_random_bytes(&rnd, sizeof rnd) != 0)
        rnd = (uint32_t)tm_now_us(); /* jitter only: any value will do */
    return (long)(d / 2 + rnd % (d / 2 + 1));
}

/* The tools' annotations, learned once: name -> idempotent or read-only.
 * 0 when known; -1 when tools/list did not get through (ask again later);
 * 1 when the server answered with an error (nothing is safe). */
static int learn_tools(tidemark_client_t *c)
{
    json_t *tools = NULL;
    int rc = c->list(c, "tools/list", "tools", &tools);
    if (rc) {
        json_decref(tools);
        return rc == TIDEMARK_EPEER ? 1 : -1;
    }
    json_t *safe = json_object();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *a = json_object_get(t, "annotations");
        int ok = json_is_true(json_object_get(a, "idempotentHint")) ||
                 json_is_true(json_object_get(a, "readOnlyHint"));
        const char *name = json_string_value(json_object_get(t, "name"));
        if (safe && name && json_object_set_new(safe, name, json_boolean(ok)) != 0) {
            json_decref(safe);
            safe = NULL;
        }
    }
    json_decref(tools);
    if (!safe)
        return -1;
    pthread_mutex_lock(&c->mu);
    json_decref(c->tool_safe);
    c->tool_safe = safe;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* Whether the tool is annotated idempotent or read-only: 1 yes, 0 no (or
 * not listed), -1 unknown for now (tools/list did not get through). */
static int tool_safe(tidemark_client_t *c, const char *tool)
{
    pthread_mutex_lock(&c->mu);
    int known = c->tool_safe != NULL;
    pthread_mutex_unlock(&c->mu);
    if (!known) {
        int rc = learn_tools(c);
        if (rc)
            return rc > 0 ? 0 : -1;
    }
    pthread_mutex_lock(&c->mu);
    int ok = tool && json_is_true(json_object_get(c->tool_safe, tool));
    pthread_mutex_unlock(&c->mu);
    return ok;
}

static const char *tool_of(json_t *msg)
{
    return json_string_value(json_object_get(json_object_get(msg, "params"), "name"));
}

/*
 * With ids we cannot interpret (a foreign server), continuity across a
 * reconnect cannot be proven; only the dispatch log deduplicates. Resuming
 * is then allowed for requests that are safe to see twice: anything but
 * tools/call, and tools annotated idempotent or read-only. 1 / 0 / -1 unknown.
 */
static int opaque_resume_allowed(tidemark_client_t *c, rq *r)
{
    if (!r->msg || r->listen || c->cfg.opaque_policy == TIDEMARK_OPAQUE_RESUME ||
        !tm_is_tools_call(r->msg))
        return 1;
    return tool_safe(c, tool_of(r->msg));
}

/*
 * A request with no event through may be POSTed again only when that cannot
 * repeat it: it is not a call (the other requests are reads), no POST of it
 * ever reached a connection, it carries an idempotency key, the session's
 * server proved itself a Tidemark server (its call records are keyed by
 * request id, so the same id is answered from the record), or the tool is
 * annotated idempotent or read-only. 1 / 0 / -1 unknown.
 */
static int resend_allowed(tidemark_client_t *c, rq *r)
{
    if (!tm_is_tools_call(r->msg))
        return 1;
    pthread_mutex_lock(&c->mu);
    int sent = r->sent;
    pthread_mutex_unlock(&c->mu);
    if (!sent)
        return 1;
    json_t *meta = json_object_get(json_object_get(r->msg, "params"), "_meta");
    if (json_is_string(json_object_get(meta, "dev.tidemark/idempotency-key")))
        return 1;
    if (r->modern) /* a re-issue is a new request: no record of the old id answers it */
        return tool_safe(c, tool_of(r->msg));
    int proven = 0;
    if (tm_cstate_session_proven(c->st, &proven) != 0)
        return -1; /* the state cannot say now: decide again */
    if (proven)
        return 1;
    return tool_safe(c, tool_of(r->msg));
}

enum { X_NONE = 0, X_GET, X_POST, X_WAIT };

/* A stream of foreign ids cut mid-way, for a request not safe to see twice. */
static int refuse_opaque_resume(tidemark_client_t *c, rq *r)
{
    tm_rq_fail_final(r, TIDEMARK_EPROTO, "continuity_unprovable",
                     "a non-idempotent request was cut mid-stream on a server whose event ids "
                     "cannot prove continuity; the session is not resumed",
                     json_pack("{s:s}", "last_event_id", r->last_id));
    pthread_mutex_lock(&c->mu);
    c->session_lost = 1; /* session-terminating, reported as such */
    pthread_mutex_unlock(&c->mu);
    return X_NONE;
}

/* What r's next exchange is after a cut; X_NONE after failing r. */
static int next_exchange(tidemark_client_t *c, rq *r)
{
    if (r->listen)
        return X_GET;
    if (r->sub)
        return X_POST; /* a listen stream is opened again: it repeats nothing */
    if (r->have_id) {
        int ok = r->ours ? 1 : opaque_resume_allowed(c, r);
        if (ok)
            return ok > 0 ? X_GET : X_WAIT;
        return refuse_opaque_resume(c, r);
    }
    int ok = resend_allowed(c, r);
    if (ok)
        return ok > 0 ? X_POST : X_WAIT;
    /* Its outcome can never be learned. */
    tm_rq_fail_final(r, TIDEMARK_EPROTO, "continuity_unprovable",
                     "the call was cut before any event and may have reached the server; nothing "
                     "proves that re-sending it would not repeat it, so it was not re-sent", NULL);
    return X_NONE;
}

/* The attempt budget is spent. When the last attempt never reached the
 * server, that is what the caller hears. */
static void exhausted(tidemark_client_t *c, rq *r)
{
    if (r->unreachable) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot connect to %s: %s", c->url, r->unreachable_why);
        tm_rq_fail(r, TIDEMARK_EIO, "cannot_connect", msg,
                   json_pack("{s:s,s:s,s:i}", "url", c->url, "error", r->unreachable_why,
                             "attempts", (int)c->cfg.max_attempts));
        return;
    }
    tm_rq_fail(r, TIDEMARK_EIO, "reconnect_exhausted", "the stream could not be resumed",
               json_pack("{s:i}", "attempts", (int)c->cfg.max_attempts));
}

void tm_reconnect(tidemark_client_t *c, rq *r, int64_t deadline)
{
    if (r->probe) { /* the era probe got no answer: a legacy server, most likely */
        tm_end_exchange(c, r);
        tm_rq_fail_final(r, TIDEMARK_EIO, "probe_unanswered",
                         "server/discover got no answer before its stream ended", NULL);
        return;
    }
    if (r->progressed)
        r->attempts = 0; /* the stream moved forward: a fresh budget */
    r->progressed = 0;
    if (++r->attempts > c->cfg.max_attempts) {
        exhausted(c, r);
        return;
    }
    tm_end_exchange(c, r);
    int how = next_exchange(c, r);
    if (how == X_NONE)
        return;
    long delay = r->skip_nap ? 0 : reconnect_delay(c, r);
    r->skip_nap = 0;
    if (nap(c, delay, deadline) || how == X_WAIT)
        return; /* stopped or out of time (settled next), or decide again */
    pthread_mutex_lock(&c->mu);
    r->phase = RQ_RUNNING;
    pthread_mutex_unlock(&c->mu);
    int rc = 0;
    if (how == X_POST && r->modern)
        rc = tm_modern_new_id(c, r); /* a re-issue: the same key, a new JSON-RPC id */
    if (!rc)
        rc = how == X_POST ? tm_start_post(c, r) : tm_start_get(c, r);
    if (rc)
        tm_rq_fail(r, rc, "transport_error", "cannot start the HTTP exchange", NULL);
}
