/*
 * unsettled.c - calls whose outcome is not settled yet: their record's
 * begin or their final write failed, so the record stays "started". Each
 * is noted in srv->failed (under fail_mu) for the recoverer
 * (tm_recover_failed, recovery.c), a retry of it is told so
 * (tm_call_write_pending), and a connection waiting on its stream gets the
 * typed store_failed error.
 */
#include "server_int.h"
#include "feed.h"
#include "../base/log.h"
#include "../base/str.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>

/* srv->failed maps "<session>\n<request key>" of calls whose final write
 * failed (their record stays "started") to 1, until they are finished. */
static void failed_key(char *out, size_t n, const char *sid, const char *key)
{
    tm_strjoin(out, n, sid, "\n", key, (const char *)NULL);
}

static void note_failed(tidemark_server_t *srv, const char *sid, const char *key)
{
    char k[TM_SESSION_ID_LEN + 2 + TM_REQ_KEY_MAX];
    failed_key(k, sizeof k, sid, key);
    pthread_mutex_lock(&srv->fail_mu);
    if (tm_map_put(srv->failed, k, (void *)1) != 0) /* then only a restart settles it */
        TM_ERROR("request %s: out of memory noting it for recovery", key);
    pthread_mutex_unlock(&srv->fail_mu);
}

void tm_call_begin_failed(tidemark_server_t *srv, const char *sid, const char *key)
{
    TM_WARN("session %s: the record of request %s was not confirmed; it is settled once the "
            "store takes writes again", TM_SID(sid), key);
    note_failed(srv, sid, key);
}

/* The typed error of a request whose outcome is not settled yet (data.reason
 * store_failed): the client re-sends it under its id. New reference. */
static json_t *unsettled_error(json_t *id)
{
    return tm_jsonrpc_error(id, TM_RPC_INTERNAL_ERROR,
                            "The result could not be made durable; the request's outcome "
                            "is settled once the store recovers: retry it then",
                            "store_failed", NULL);
}

void tm_call_write_failed(tidemark_call_t *c, int status)
{
    tidemark_server_t *srv = c->srv;
    if (status == TIDEMARK_EBUSY) {
        /* Its record is another node's: this node's lease lapsed and a
         * survivor took the call over (that node writes the rest of the
         * same stream in the shared store, and a connection here follows
         * it there: ended here with nothing, a POST left its client no
         * cursor to resume from), or the request began there first (a
         * late begin, post.c: its POST is answered from that record). */
        TM_WARN("session %s: request %s is another node's (begun there first, or taken over): "
                "this run wrote nothing more", TM_SID(c->sess->id), c->reqkey);
        return;
    }
    TM_ERROR("session %s: the response of request %s could not be made durable (%s); it is "
             "settled once the store takes writes again", TM_SID(c->sess->id), c->reqkey,
             tidemark_strerror(status));
    note_failed(srv, c->sess->id, c->reqkey);
    /* No SSE id: nothing of it was committed, so it is no event of the stream. */
    json_t *e = unsettled_error(c->id);
    size_t len;
    char *bytes = tm_jsonrpc_dump(e, &len);
    json_decref(e);
    if (bytes && atomic_load(&srv->hub))
        tm_feed_fail(srv, c->sess->id, c->stream, bytes, len);
    free(bytes);
}

int tm_call_write_pending(tidemark_server_t *srv, const char *sid, const char *key)
{
    char k[TM_SESSION_ID_LEN + 2 + TM_REQ_KEY_MAX];
    failed_key(k, sizeof k, sid, key);
    pthread_mutex_lock(&srv->fail_mu);
    int r = tm_map_get(srv->failed, k) != NULL;
    pthread_mutex_unlock(&srv->fail_mu);
    return r;
}
