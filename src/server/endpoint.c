/*
 * endpoint.c - the MCP endpoint, whatever carries it (request.h): which
 * handler a parsed request goes to, and DELETE. The answers handlers share
 * are answer.c's, the authorization gate gate.c's; what only HTTP has
 * (framing, Host, Origin, health, metrics) is http.c's.
 */
#include "server_int.h"
#include "feed.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"

static void delete_cont(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx, void *ud)
{
    (void)ud;
    tm_sess *sess = tm_require_session(srv, r, ctx);
    if (!sess)
        return;
    tm_sess_close(sess);
    tm_sess_observe_end(srv, sess);
    pthread_mutex_lock(&srv->mu);
    if (tm_map_get(srv->sessions, sess->id) == sess) {
        tm_map_del(srv->sessions, sess->id);
        tm_gauge_add(srv->m.sessions_open, -1);
        tm_sess_unref(sess);
    }
    pthread_mutex_unlock(&srv->mu);
    tm_feed_end_session(srv, sess->id);
    int rc = tm_store_session_delete(srv->store, sess->id);
    if (rc == 0 || rc == TIDEMARK_ENOTFOUND)
        tm_sess_bound_drop(srv, sess->id);
    tm_sess_unref(sess);
    if (rc && rc != TIDEMARK_ENOTFOUND) /* still stored: say so, a retry deletes it */
        return tm_reply_store_error(r, rc);
    TM_DEBUG("session deleted");
    tm_req_reply(r, 200, NULL, NULL, 0);
}

void tm_handle_delete(tidemark_server_t *srv, tm_req *r)
{
    tm_gate(srv, r, NULL, 0, delete_cont, NULL, NULL);
}

void tm_handle_request(tidemark_server_t *srv, tm_req *r)
{
    if (r->method == TM_REQ_POST)
        return tm_handle_post(srv, r);
    if (tm_modern_refuse_method(r))
        return;
    if (r->method == TM_REQ_GET)
        return tm_handle_get(srv, r);
    tm_handle_delete(srv, r);
}
