/*
 * get.c - GET: a resume with Last-Event-ID, answered by the resume table
 * (docs/protocol.md, "GET"), or the session's standalone stream.
 */
#include "server_int.h"
#include "feed.h"
#include "http_policy.h"
#include "seal.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/clock.h"
#include "../log/resume.h"
#include "../transport/sse.h"

/* ---- GET ----------------------------------------------------------------- */

static void count_outcome(tidemark_server_t *srv, const tm_resume_decision *d)
{
    static const int by_outcome[] = {
        [TM_RESUME_OK] = TM_RESUMED_OK, [TM_RESUME_MALFORMED] = TM_RESUMED_MALFORMED,
        [TM_RESUME_UNKNOWN_STREAM] = TM_RESUMED_UNKNOWN_STREAM, [TM_RESUME_AHEAD] = TM_RESUMED_AHEAD,
        [TM_RESUME_GAP] = TM_RESUMED_GAP, [TM_RESUME_EPOCH] = TM_RESUMED_EPOCH};
    /* Resumes that go ahead are counted once attached (a 409 is no resume). */
    if (d->outcome != TM_RESUME_OK &&
        !(d->outcome == TM_RESUME_GAP && srv->cfg.on_gap == TIDEMARK_ON_GAP_EVENT))
        tm_counter_inc(srv->m.resumes[by_outcome[d->outcome]]);
}

static int id_verify(void *ud, const char *session, const tm_event_id *id)
{
    return tm_seal_event_verify(ud, session, id);
}

/* One cursor_ahead WARN a second at most, saying how many it stands for:
 * a client resuming with a real lost id in a loop cannot flood the log. */
static void warn_ahead(const tm_sess *sess, const char *cursor, uint64_t head)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int64_t last_s = INT64_MIN;
    static unsigned long quiet;
    int64_t now_s = tm_now_us() / 1000000;
    pthread_mutex_lock(&mu);
    int say = now_s != last_s;
    unsigned long more = say ? quiet : 0;
    if (say) {
        last_s = now_s;
        quiet = 0;
    } else {
        quiet++;
    }
    pthread_mutex_unlock(&mu);
    if (!say)
        return;
    char tag[16];
    if (more)
        TM_WARN("session %s: cursor_ahead %s (durable head %llu); %lu more not logged since",
                tm_sid_tag(sess->id, tag), cursor, (unsigned long long)head, more);
    else
        TM_WARN("session %s: cursor_ahead %s (durable head %llu)", tm_sid_tag(sess->id, tag),
                cursor, (unsigned long long)head);
}

/* The refusals of the resume table, each 400 with its typed reason; a gap
 * under --on-gap=event instead puts an "event: gap" in prelude. 1 when
 * answered. */
static int resume_refused(tidemark_server_t *srv, tm_req *r, const tm_sess *sess,
                          const char *cursor, const tm_resume_decision *d, tm_buf *prelude)
{
    json_t *x;
    switch (d->outcome) {
    case TM_RESUME_OK:
        return 0;
    case TM_RESUME_MALFORMED:
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "malformed_cursor",
                       "Bad Request: Last-Event-ID is not an event id of this server", NULL);
        return 1;
    case TM_RESUME_UNKNOWN_STREAM:
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "unknown_stream",
                       "Bad Request: Last-Event-ID names no stream of this session", NULL);
        return 1;
    case TM_RESUME_AHEAD:
        warn_ahead(sess, cursor, d->head);
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "cursor_ahead",
                       "Bad Request: Last-Event-ID is ahead of the durable head",
                       json_pack("{s:I}", "durable_head", (json_int_t)d->head));
        return 1;
    case TM_RESUME_GAP:
        x = json_pack("{s:[I,I]}", "missing", (json_int_t)d->gap_from, (json_int_t)d->gap_to);
        if (srv->cfg.on_gap == TIDEMARK_ON_GAP_EVENT) {
            char *txt = json_dumps(x, JSON_COMPACT);
            json_decref(x);
            int rc = txt ? tm_sse_frame(prelude, "gap", NULL, txt, strlen(txt)) : TIDEMARK_ENOMEM;
            free(txt);
            if (rc == 0)
                return 0;
            tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory", NULL);
            return 1;
        }
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "resumption_gap",
                       "Bad Request: events after Last-Event-ID were trimmed", x);
        return 1;
    case TM_RESUME_EPOCH:
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "epoch_mismatch",
                       "Bad Request: the event Last-Event-ID names was lost and its seq reused",
                       NULL);
        return 1;
    }
    return 0;
}

/* Where the connection starts: after the cursor (a resume) or at the
 * standalone stream's head. 0, or 1 when answered. */
static int stream_start(tidemark_server_t *srv, tm_req *r, tm_sess *sess, const char *cursor,
                        tm_resume_decision *d, tm_buf *prelude, tm_feed_opts *o)
{
    if (cursor) {
        tm_id_auth auth = {.verify = id_verify, .ud = srv->sealer};
        int rc = tm_resume_decide_auth(srv->store, sess->id, cursor, &auth, d);
        if (rc) {
            tm_reply_store_error(r, rc);
            return 1;
        }
        count_outcome(srv, d);
        if (resume_refused(srv, r, sess, cursor, d, prelude)) {
            static const char *const why[] = {
                [TM_RESUME_MALFORMED] = "malformed_cursor", [TM_RESUME_UNKNOWN_STREAM] = "unknown_stream",
                [TM_RESUME_AHEAD] = "cursor_ahead", [TM_RESUME_GAP] = "resumption_gap",
                [TM_RESUME_EPOCH] = "epoch_mismatch", [TM_RESUME_OK] = "internal_error"};
            tm_resume_refused_trace(srv, r, why[d->outcome]);
            return 1;
        }
        o->stream = d->stream;
        o->after_seq = d->after_seq;
        o->replay_until = d->head;
        o->prelude = prelude->data;
        o->prelude_len = prelude->len;
        return 0;
    }
    tm_stream_bounds b;
    char g[TM_STREAM_MAX];
    int rc = tm_store_stream_open(srv->store, sess->id, "g", g);
    if (rc == 0)
        rc = tm_store_bounds(srv->store, sess->id, "g", &b);
    if (rc) {
        tm_reply_store_error(r, rc);
        return 1;
    }
    o->stream = "g";
    o->after_seq = b.head;
    return 0;
}

/* Past the authorization gate (ctx: the principal, the headers needed). */
static void get_cont(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx, void *ud)
{
    (void)ud;
    tm_sess *sess = tm_require_session(srv, r, ctx);
    if (!sess)
        return;
    int64_t t0 = tm_now_us();
    const char *cursor = ctx->last_event_id;
    tm_feed_opts o = {.session = sess->id, .retry_ms = srv->cfg.retry_ms,
                             .announce_durable = srv->cfg.emit_early};
    tm_buf prelude;
    tm_buf_init(&prelude, 4096);
    tm_resume_decision d = {0};
    if (stream_start(srv, r, sess, cursor, &d, &prelude, &o) == 0) {
        tm_req_add_header(r, "Mcp-Session-Id", sess->id);
        int rc = tm_feed_attach(srv, r, &o);
        if (rc == TIDEMARK_EBUSY) {
            tm_counter_inc(srv->m.resumes[TM_RESUMED_CONFLICT]);
            tm_reply_error(r, 409, TM_RPC_INVALID_REQUEST, "stream_attached",
                           "Conflict: the stream is already attached to a live connection", NULL);
        } else if (rc) {
            tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", tidemark_strerror(rc),
                           NULL);
        } else if (cursor) {
            tm_counter_inc(srv->m.resumes[d.outcome == TM_RESUME_GAP ? TM_RESUMED_GAP : TM_RESUMED_OK]);
            tm_hist_observe(srv->m.resume_replayed, d.head > d.after_seq ? d.head - d.after_seq : 0);
            tm_resume_trace(srv, r, sess->id, &d, t0);
            tm_hist_observe(srv->m.resume_latency_us, (uint64_t)(tm_now_us() - t0));
        } else if (tm_sess_set_attr(srv, sess, "get", "true") == 0 && /* notifications may go to "g" */
                   strcmp(sess->version, TIDEMARK_PROTOCOL_2025_11_25) == 0) {
            /* priming: without it the client just has no cursor yet */
            if (tm_store_append(srv->store, sess->id, "g", "", 0, 0, NULL, NULL) != 0)
                TM_WARN("standalone stream: priming event not appended");
        }
    }
    tm_buf_free(&prelude);
    tm_sess_unref(sess);
}

void tm_handle_get(tidemark_server_t *srv, tm_req *r)
{
    const char *accept = r->accept;
    if (!tm_policy_accepts(accept, "text/event-stream"))
        return tm_reply_error(r, 406, TM_RPC_INVALID_REQUEST, "not_acceptable",
                              "Not Acceptable: Accept must list text/event-stream", NULL);
    if (tm_refuse_version(r))
        return;
    tm_gate(srv, r, NULL, 0, get_cont, NULL, NULL);
}
