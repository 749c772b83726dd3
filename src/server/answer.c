/*
 * answer.c - what every handler of a request shares, whatever carries it
 * (request.h): the typed error answers (JSON-RPC error bodies with
 * data.reason), the version refusal, the MCP headers a request carried, and
 * the session a request names (found, owned by its principal, touched).
 */
#include "server_int.h"
#include "era.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- answers -------------------------------------------------------------- */

void tm_reply_json(tm_req *r, unsigned status, json_t *body /* stolen */)
{
    size_t len;
    char *txt = tm_jsonrpc_dump(body, &len);
    json_decref(body);
    tm_req_reply(r, status, "application/json", txt, txt ? len : 0);
    free(txt);
}

/* An HTTP-level error with a JSON-RPC error body carrying data.reason. */
void tm_reply_error(tm_req *r, unsigned status, int code, const char *reason,
                        const char *message, json_t *extra)
{
    tm_reply_json(r, status, tm_jsonrpc_error(NULL, code, message, reason, extra));
}

/* The store could not do what a request needs. Refusing writes (a full
 * disk, an I/O error) is temporary: 503 and a hint to retry. */
void tm_reply_store_error(tm_req *r, int rc)
{
    if (rc == TIDEMARK_EIO) {
        tm_req_add_header(r, "Retry-After", "1");
        tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "store_unavailable",
                    "Service Unavailable: the store does not take writes now", NULL);
    } else {
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "store_error", tidemark_strerror(rc), NULL);
    }
}

/* An MCP-Protocol-Version header naming a version we do not speak: answer
 * 400 unsupported_protocol_version (with the versions we do) and return 1. */
int tm_refuse_version(tm_req *r)
{
    const char *pv = r->protocol_version;
    if (!pv || tm_protocol_version_supported(pv))
        return 0;
    /* Code -32600 as before 2026-07-28 (a request of that era gets -32022,
     * era.c); the data names every version served, 2026-07-28 included. */
    tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "unsupported_protocol_version",
                "Bad Request: unsupported MCP-Protocol-Version",
                json_pack("{s:s,s:s,s:o}", "received", pv, "requested", pv, "supported",
                          tm_era_served_json()));
    return 1;
}

/* ---- checks --------------------------------------------------------------- */

tm_sess *tm_require_session(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx)
{
    return tm_require_session_prefetch(srv, r, ctx, NULL, NULL);
}

tm_sess *tm_require_session_prefetch(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx,
                                     const char *key, tm_req_prefetch *pf)
{
    const char *sid = ctx->sid;
    if (!sid) {
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "session_required",
                    "Bad Request: Mcp-Session-Id header is required", NULL);
        return NULL;
    }
    tm_sess *s = tm_sess_find_prefetch(srv, sid, key, pf);
    if (s && (strcmp(s->version, TIDEMARK_PROTOCOL_2026_07_28) == 0 ||
              strcmp(s->principal, ctx->principal) != 0)) {
        /* A 2026-07-28 call's or listener's store session is not a 2025
         * session; another principal's session is answered as one that
         * does not exist (no oracle), and is not touched. */
        tm_sess_unref(s);
        s = NULL;
    }
    if (!s || atomic_load(&s->closed)) {
        if (s)
            tm_sess_unref(s);
        tm_reply_error(r, 404, TM_RPC_SESSION_NOT_FOUND, "unknown_session", "Session not found", NULL);
        return NULL;
    }
    /* A supported MCP-Protocol-Version other than the negotiated one is
     * tolerated (the official conformance suite sends 2025-03-26 on a
     * 2025-11-25 session); behaviour follows the negotiated version.
     * Unsupported values were rejected before. */
    int trc = tm_store_session_touch(srv->store, s->id, tm_wall_ms());
    if (trc) /* last-seen only feeds idle expiry; the request goes on */
        TM_DEBUG("session %s: touch: %s", s->id, tidemark_strerror(trc));
    return s;
}

const char *tm_req_header(const tm_req *r, const char *name)
{
    if (strncasecmp(name, "Mcp-Param-", 10) == 0) {
        for (size_t i = 0; i < r->nparams; i++)
            if (strcasecmp(r->params[i].suffix, name + 10) == 0)
                return r->params[i].value;
        return NULL;
    }
    return strcasecmp(name, "MCP-Protocol-Version") == 0 ? r->protocol_version
           : strcasecmp(name, "Mcp-Method") == 0         ? r->mcp_method
           : strcasecmp(name, "Mcp-Name") == 0           ? r->mcp_name
                                                         : NULL;
}
