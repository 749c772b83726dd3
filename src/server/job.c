/*
 * job.c - one POST's requests and how they are answered: a call is started
 * on the worker pool (handlers through the fair scheduler), its response is
 * appended to the POST's stream together with its request record and its
 * effect, and the last completion ends the stream or answers the POST.
 */
#include "server_int.h"
#include "record.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/str.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tm_job *tm_job_alloc(void)
{
    tm_job *j = malloc(sizeof *j);
    if (j) {
        memset(j, 0, offsetof(tm_job, final_key));
        j->final_key[0] = '\0';
    }
    return j;
}

tidemark_call_t *tm_call_alloc(void)
{
    tidemark_call_t *c = malloc(sizeof *c);
    if (c) {
        memset(c, 0, offsetof(tidemark_call_t, idkey));
        c->idkey[0] = c->reqkey[0] = c->idem[0] = '\0';
        c->progress_floor = -INFINITY;
    }
    return c;
}

void tm_job_free(tm_job *j)
{
    if (tm_job_is(j, TM_POST_POOLED) && j->sess)
        tm_modern_pool_done(j->srv, j->sess->id);
    if (j->sess)
        tm_sess_unref(j->sess);
    json_decref(j->responses);
    json_decref(j->final);
    free(j->final_bytes);
    json_decref(j->root);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* Out of its session's running calls, if it is still there. */
static void call_unregister(tidemark_call_t *c)
{
    if (!c->registered)
        return;
    pthread_mutex_lock(&c->sess->mu);
    if (tm_map_get(c->sess->calls, c->reqkey) == c)
        tm_sess_calls_del(c->sess, c->reqkey);
    c->registered = 0;
    pthread_mutex_unlock(&c->sess->mu);
}

static void call_release(tidemark_call_t *c)
{
    call_unregister(c); /* an inline call stays registered until its response settled */
    if (c->late) /* before its claim goes (tm_call_free): a retry reads its record again */
        tm_sess_call_settled(c->sess);
    if (c->effect_free)
        c->effect_free(c->effect_ud);
    tm_call_free(c);
}

/* A 2026-07-28 call's held POST, answered with its response's bytes from
 * the append's callback once they are durable: no worker and no barrier
 * between the commit and the answer (a 2025 stream is woken the same way). */
typedef struct tm_durable_answer {
    tm_req *r;
    tm_sess *sess; /* a reference */
    int ephemeral;
    unsigned http_status;
    size_t len;
    char *fallback;  /* what was committed instead when the effect failed */
    size_t fallback_len;
    unsigned fallback_status;
    char body[];
} tm_durable_answer;

static void answer_settled(tidemark_call_t *c, int status)
{
    tm_durable_answer *a = c->answer;
    if (!a)
        return;
    c->answer = NULL;
    int fell = a->fallback && c->effect_rc != 0; /* the effect failed: its fallback was stored */
    tm_modern_answer_durable(c->srv, a->sess, a->r, a->ephemeral, status,
                             fell ? a->fallback_status : a->http_status,
                             fell ? a->fallback : a->body, fell ? a->fallback_len : a->len);
    tm_sess_unref(a->sess);
    free(a->fallback);
    free(a);
}

/* The response of a recorded call settled. A response that could not be
 * made durable leaves the record "started": tell the client, typed, and
 * have it finished once the store takes writes again. */
static void response_done(void *ud, int status, uint64_t seq)
{
    tidemark_call_t *c = ud;
    tm_call_commit_end(c, status, seq);
    if (status != 0)
        tm_call_write_failed(c, status);
    answer_settled(c, status);
    call_release(c);
}

/* The held POST of this job's final response goes with the append (the
 * caller holds j->mu): answered by its callback, not by the job's end.
 * Only on a queued store (elsewhere the job answers at once). With an
 * effect, on one node only: there the effect runs inside the commit, before
 * the callback, which so knows whether the result or the fallback was
 * stored (on Redis it is read back from the record after a barrier). */
static void answer_on_commit(tm_job *j, tidemark_call_t *c, const json_t *response,
                             const char *bytes, size_t len, const char *fallback, size_t flen,
                             unsigned fallback_status)
{
    tm_durable_answer *a = malloc(sizeof *a + len + 1);
    if (!a)
        return; /* the job answers after a barrier, as before */
    *a = (tm_durable_answer){.r = j->lazy, .sess = tm_sess_ref(j->sess),
                             .ephemeral = tm_job_is(j, TM_POST_EPHEMERAL), .http_status = tm_modern_status(response),
                             .len = len};
    memcpy(a->body, bytes, len + 1);
    if (fallback) {
        a->fallback = strndup(fallback, flen);
        a->fallback_len = flen;
        a->fallback_status = fallback_status;
        if (!a->fallback) {
            tm_sess_unref(a->sess);
            free(a);
            return;
        }
    }
    c->answer = a;
    j->lazy = NULL;
}

static int run_effect(void *ud, tm_txn *txn)
{
    tidemark_call_t *c = ud;
    c->effect_rc = c->effect(txn, c->effect_ud); /* the answer from the callback needs it */
    return c->effect_rc;
}

/* Append a call's response to its job's stream (caller holds j->mu).
 * Returns 1 when the call now belongs to the append (freed by its callback). */
/* A modern call's held POST is answered with the bytes its response was
 * stored as (taken from *bytes), or, when an effect rode along, with what
 * the record (key) holds once committed: the fallback if the effect failed.
 * Called before the append: its callback may free the call at once. */
static void keep_final(tm_job *j, const char *key, char **bytes, size_t len, int effect)
{
    if (effect) {
        j->final_effect = 1;
        snprintf(j->final_key, sizeof j->final_key, "%s", key);
        return;
    }
    free(j->final_bytes);
    j->final_bytes = *bytes;
    j->final_len = len;
    *bytes = NULL;
}

/* What an effect's call answers if the effect fails at commit: the JSON-RPC
 * error for its id (-32603, data.reason "effect_failed"). Made for every
 * effect and almost never sent: the fixed text around the id, not a
 * jansson object built and dumped (~20k instructions a call). */
static char *effect_fallback(const json_t *id, size_t *len)
{
    static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":";
    static const char tail[] = ",\"error\":{\"code\":-32603,\"message\":\"The tool's effect failed "
                               "and was rolled back\",\"data\":{\"reason\":\"effect_failed\"}}}";
    size_t ilen = 0;
    char *idt = tm_jsonrpc_dump(id ? id : json_null(), &ilen);
    char *out = idt ? malloc(sizeof head - 1 + ilen + sizeof tail) : NULL;
    if (out) {
        memcpy(out, head, sizeof head - 1);
        memcpy(out + sizeof head - 1, idt, ilen);
        memcpy(out + sizeof head - 1 + ilen, tail, sizeof tail);
        *len = sizeof head - 1 + ilen + sizeof tail - 1;
    }
    free(idt);
    return out;
}

static int append_response(tm_job *j, json_t *response, tidemark_call_t *c, int last)
{
    tidemark_server_t *srv = j->srv;
    size_t len, flen = 0;
    unsigned fstatus = 200;
    if (c && c->recorded && c->unrecorded) {
        /* Stored, this refusal would answer every retry; the record (if it
         * exists, "started") is settled by recovery instead. */
        tm_call_write_failed(c, TIDEMARK_EIO);
        return 0;
    }
    char *bytes = tm_jsonrpc_dump(response, &len);
    char *fallback = NULL;
    tm_append_req r = {.session = j->sess->id, .stream = j->stream, .data = bytes, .len = len,
                       .flags = last ? TM_APPEND_FINAL : 0};
    if (c && c->recorded) {
        r.request_key = c->reqkey;
        r.cb = response_done;
        r.cb_ud = c;
        tm_strjoin(c->stream, sizeof c->stream, j->stream, (const char *)NULL);
        if (!c->holds_sess) { /* the callback may outlive the job and its reference */
            tm_sess_ref(c->sess);
            c->holds_sess = 1;
        }
        if (c->registered) { /* a retry finds it by its stream now: the job may go */
            pthread_mutex_lock(&c->sess->mu);
            c->job = NULL;
            pthread_mutex_unlock(&c->sess->mu);
        }
    }
    if (c && c->recorded && c->effect && !json_object_get(response, "error")) {
        fallback = effect_fallback(c->id, &flen);
        fstatus = 200; /* tm_modern_status of an internal error */
        r.effect = run_effect;
        r.effect_ud = c;
        r.fallback = fallback;
        r.fallback_len = flen;
    }
    char *kept = NULL; /* modern: the POST is answered with what is stored */
    if (bytes && j->lazy && response == j->final && r.cb && tm_store_queued(srv->store) &&
        (!r.effect || !tm_store_shared(srv->store)))
        answer_on_commit(j, c, response, bytes, len, r.effect ? fallback : NULL, flen, fstatus);
    if (bytes && j->lazy && response == j->final) {
        kept = r.effect ? NULL : strdup(bytes);
        if (r.effect || kept)
            keep_final(j, c ? c->reqkey : "", &kept, len, r.effect != NULL);
    }
    int rc = bytes ? tm_store_append_ex(srv->store, &r) : TIDEMARK_ENOMEM;
    j->ended |= rc == 0 && last;
    if (rc) {
        TM_WARN("session %s stream %s: response not appended: %s", TM_SID(j->sess->id), j->stream,
                tidemark_strerror(rc));
        if (r.cb) {
            tm_call_commit_end(c, rc, 0);
            tm_call_write_failed(c, rc); /* the callback never runs on a refused append */
            answer_settled(c, rc);
        }
    }
    free(bytes);
    free(fallback);
    return rc == 0 && r.cb;
}

/* A modern call's POST still waiting for its answer (on a worker). */
static void answer_lazy(void *arg)
{
    tm_job *j = arg;
    tm_modern_answer(j, j->final);
    tm_job_free(j);
}

/* The last completion closes the stream (SSE) or answers the POST (JSON).
 * A recorded call's response completes its request record in the same
 * transaction, together with its effect. The call is freed here (or once
 * its response settled). */
void tm_job_complete(tm_job *j, json_t *response, tidemark_call_t *c)
{
    tidemark_server_t *srv = j->srv;
    int keep_call = 0;
    if (c)
        tm_call_trace_end(c, response);
    pthread_mutex_lock(&j->mu);
    int last = --j->remaining == 0;
    /* Nothing but the submit hold left: this response is the stream's last
     * event, and ends it (no close of its own after it). */
    int ends = last || (j->held && j->remaining == 1);
    if (j->lazy && response && !j->final)
        j->final = json_incref(response);
    if (j->sse) {
        if (response)
            keep_call = append_response(j, response, c, ends);
        else if (last && !j->ended && !atomic_load(&srv->stopping))
            if (tm_store_close_stream(srv->store, j->sess->id, j->stream) != 0)
                TM_WARN("stream %s: not closed (its reader ends it at the next failure)", j->stream);
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
        json_t *one = json_array_get(j->responses, 0);
        if (n == 0)
            tm_req_reply(j->req, 202, NULL, NULL, 0);
        else
            tm_reply_json(j->req, tm_job_is(j, TM_POST_MODERN) ? tm_modern_status(one) : 200,
                          j->batch ? json_incref(j->responses) : json_incref(one));
    }
    /* The answer waits for durability: never on an I/O thread, unless the
     * store has nothing to wait for (memory); on a worker already (the
     * call's own, mostly) it is answered right here. */
    if (j->sse && j->lazy) {
        int here = tm_pool_is_worker(srv->pool) || !tm_store_queued(srv->store);
        if (!here && srv->pool && tm_pool_submit(srv->pool, answer_lazy, j) == 0)
            return;
        tm_modern_answer(j, j->final);
    }
    tm_job_free(j);
}

void tm_call_free(tidemark_call_t *c)
{
    tm_call_trace_end(c, NULL); /* one that never answered */
    tm_call_commit_end(c, TIDEMARK_ECANCELED, 0);
    if (c->claimed) /* its record holds its outcome now, or it recorded nothing */
        tm_record_unclaim_name(c->srv, c->idem);
    json_decref(c->answers);
    json_decref(c->asked);
    if (c->holds_sess)
        tm_sess_unref(c->sess);
    json_decref(c->id);
    json_decref(c->request);
    free(c->progress_text);
    free(c);
}

void tm_call_unrun(tidemark_call_t *c)
{
    if (c->effect_free)
        c->effect_free(c->effect_ud);
    c->effect = NULL;
    c->effect_ud = NULL;
    c->effect_free = NULL;
    json_decref(c->answers);
    json_decref(c->asked);
    c->answers = c->asked = NULL;
    c->nasked = 0;
    c->missing_cap = NULL;
    c->punt = 1;
}

static void run_call(void *arg);

/* An inline call whose handler would block: on a worker, from the start. */
static void punt(tidemark_call_t *c)
{
    c->punt = 0;
    c->inline_run = 0;
    /* A quiet call runs there as a recorded one: its stream first. */
    int rc = c->job->deferred ? c->job->open_deferred(c->job, c) : 0;
    if (rc == 0 && tm_sched_submit(c->srv->sched, c->sess->id, c->addr, run_call, c) == 0)
        return;
    call_unregister(c);
    const char *why = rc ? "store_failed" : "shutting_down";
    tm_job_complete(c->job, tm_jsonrpc_error(c->id, TM_RPC_INTERNAL_ERROR,
                                             rc ? "The call's stream could not be opened"
                                                : "Server is stopping", why, NULL), c);
}

static void run_call(void *arg)
{
    tidemark_call_t *c = arg;
    json_t *resp = tm_dispatch(c);
    if (c->punt)
        return punt(c);
    /* A recorded call always ends its stream with one response; but one cut
     * short by a server shutdown stays "started", so the next start finishes
     * it like after a crash instead of telling the client it
     * cancelled something it did not. */
    if (!resp && c->recorded && !atomic_load(&c->srv->stopping))
        resp = tm_jsonrpc_error(c->id, TM_RPC_REQUEST_CANCELLED, "Request cancelled", "cancelled", NULL);
    if (resp && c->modern)
        tm_modern_decorate(c->srv, c->method, resp);
    /* An inline call stays registered until its response settled (a retry
     * meanwhile attaches to its stream: the record is not stored before
     * that commit); any other, whose record is, leaves now. */
    if (!(c->inline_run && c->recorded && resp))
        call_unregister(c);
    tm_job_complete(c->job, resp, c);
}

/* Methods that run application handlers, which may block for long: they
 * go through the fair scheduler. The rest are quick and go straight to the
 * pool, so a session at its cap can still ping, list, initialize. */
int tm_runs_handler(const char *method)
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
    if (c->inline_run) { /* a non-blocking, idempotent tool: no hand-off */
        run_call(c);
        return 0;
    }
    if (tm_runs_handler(c->method))
        return tm_sched_submit(srv->sched, c->sess->id, c->addr, run_call, c);
    return tm_pool_submit(srv->pool, run_call, c);
}
