/*
 * store_pg_read.c - the PostgreSQL store's reads (events, bounds, sessions,
 * request records, rows, the effect database's queries) and the writes that
 * do not ride in the writer's batches (stream-number blocks in store_pg_write.c,
 * expiry, claims, schema). Every read is one statement on a pooled
 * connection: one snapshot, so bounds and events agree.
 */
#include "store_pg_int.h"
#include "../common/sqlite_util.h"
#include "store_pg_schema.h"
#include "../base/lock.h"
#include "../base/buf.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/str.h"
#include "tidemark/tidemark.h"
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hints ------------------------------------------------------------------------------ */

typedef struct drop_ctx {
    const char *prefix;
    size_t n;
    char **keys;
    size_t count, cap;
    int idle_only;
} drop_ctx;

static void collect(const char *k, void *v, void *ud)
{
    drop_ctx *d = ud;
    pstream *s = v;
    if (d->prefix && strncmp(k, d->prefix, d->n) != 0)
        return;
    if (d->idle_only && s->pending)
        return;
    if (d->count == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 16;
        char **keys = realloc(d->keys, cap * sizeof *keys);
        if (!keys)
            return;
        d->keys = keys;
        d->cap = cap;
    }
    if ((d->keys[d->count] = strdup(k)) != NULL)
        d->count++;
}

/* Drop the hints matching d. Caller holds c_mu. */
static void drop_hints(pgstore *p, drop_ctx *d)
{
    TM_ASSERT_HELD(&p->c_mu);
    tm_map_each(p->streams, collect, d);
    for (size_t i = 0; i < d->count; i++) {
        tm_pg_hint_free(p, tm_map_del(p->streams, d->keys[i]));
        free(d->keys[i]);
    }
    free(d->keys);
}

pstream *tm_pg_stream_hint(pgstore *p, const char *session, const char *name)
{
    char *k = tm_pg_cache_key(session, name);
    if (!k)
        return NULL;
    pstream *s = tm_map_get(p->streams, k);
    if (!s && tm_map_count(p->streams) >= CACHE_MAX) {
        drop_ctx d = {.idle_only = 1};
        drop_hints(p, &d);
    }
    if (!s && (s = calloc(1, sizeof *s)) != NULL && tm_map_put(p->streams, k, s) != 0) {
        free(s);
        s = NULL;
    }
    free(k);
    return s;
}

void tm_pg_forget_session(pgstore *p, const char *id)
{
    char *prefix = tm_pg_cache_key(id, "");
    if (!prefix)
        return;
    drop_ctx d = {.prefix = prefix, .n = strlen(prefix)};
    drop_hints(p, &d);
    free(prefix);
    free(tm_map_del(p->resv, id));
}

/* ---- the request path's reads ------------------------------------------------------------- */

#define REQUEST_COLS                                                                             \
    "SELECT session, key, tool, stream, message, response, state::bigint, updated_ms "           \
    "FROM tm_requests "

/* Prepared on each pooled connection when it is made (store_pg.c), run by
 * name when passed to tm_pg_query(_f): parsed and planned once a connection. */
static const char sql_bounds[] = "SELECT first_retained, head, closed, trimmed_epoch FROM tm_streams "
                                 "WHERE session = $1 AND name = $2";
static const char sql_page[] = "SELECT s.first_retained, s.head, e.seq, e.epoch, e.data "
                               "FROM tm_streams s LEFT JOIN LATERAL (SELECT seq, epoch, data "
                               "FROM tm_events WHERE sid = s.sid AND seq > $3 ORDER BY seq LIMIT $4) e "
                               "ON true WHERE s.session = $1 AND s.name = $2";
static const char sql_request[] = REQUEST_COLS "WHERE session = $1 AND key = $2";
static const char sql_session_request[] =
    "SELECT s.id, s.version, s.client, s.created_ms::text, s.last_seen_ms::text, "
    "(SELECT json_object_agg(name, value::json ORDER BY name)::text FROM "
    "tm_session_attrs a WHERE a.session = s.id), q.session, q.key, q.tool, "
    "q.stream, q.message, q.response, q.state::bigint, q.updated_ms FROM "
    "tm_sessions s LEFT JOIN tm_requests q ON q.session = s.id AND q.key = $2 "
    "WHERE s.id = $1";
const char *const tm_pg_hot_sql[] = {sql_bounds, sql_page, sql_request, sql_session_request, NULL};

/* ---- events ----------------------------------------------------------------------------- */

int tm_pg_read_bounds(pgstore *p, const char *session, const char *name, tm_stream_bounds *out)
{
    const char *a[2] = {session, name};
    PGresult *r = NULL;
    int rc = tm_pg_query(p, sql_bounds, 2, a, 0, &r);
    if (rc)
        return TIDEMARK_EIO;
    rc = PQntuples(r) == 1 ? 0 : TIDEMARK_ENOTFOUND;
    if (rc == 0) {
        memset(out, 0, sizeof *out);
        out->first_retained = (uint64_t)tm_pg_i64(r, 0, 0);
        out->head = (uint64_t)tm_pg_i64(r, 0, 1);
        out->closed = PQgetvalue(r, 0, 2)[0] == 't';
        snprintf(out->trimmed_epoch, sizeof out->trimmed_epoch, "%s", PQgetvalue(r, 0, 3));
        out->assigned = out->head;
    }
    PQclear(r);
    return rc;
}

/* Note that this node watches session/name (a reader's wake-up after a
 * reconnect: wake_all) and fold in what it read. */
static uint64_t watch(pgstore *p, const char *session, const char *name, uint64_t head, int closed)
{
    pthread_mutex_lock(&p->c_mu);
    pstream *s = tm_pg_stream_hint(p, session, name);
    uint64_t assigned = head;
    if (s) {
        if (head > s->known)
            s->known = head;
        s->closing |= closed;
        if (s->known + s->pending > assigned)
            assigned = s->known + s->pending;
    }
    pthread_mutex_unlock(&p->c_mu);
    return assigned;
}

/* Bounds of a stream this node opened and has not committed yet: empty. */
static int queued_open(pgstore *p, const char *session, const char *name, tm_stream_bounds *out)
{
    char *k = tm_pg_cache_key(session, name);
    pthread_mutex_lock(&p->c_mu);
    pstream *s = k ? tm_map_get(p->streams, k) : NULL;
    int rc = s && s->opening ? 0 : TIDEMARK_ENOTFOUND;
    if (rc == 0) {
        memset(out, 0, sizeof *out);
        out->first_retained = s->known + 1;
        out->head = s->known;
        out->assigned = s->known + s->pending;
        out->closed = 0; /* a close queued with it is not committed either */
    }
    pthread_mutex_unlock(&p->c_mu);
    free(k);
    return rc;
}

/* A stream opened here and not committed is looked up before the SELECT:
 * looked up after, its open could commit between the two (the SELECT's
 * snapshot without it, the hint already cleared), and a stream that exists
 * would read as missing. */
int tm_pg_bounds(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out)
{
    pgstore *p = (pgstore *)st;
    tm_stream_bounds qb;
    int queued = queued_open(p, session, stream, &qb) == 0;
    int rc = tm_pg_read_bounds(p, session, stream, out);
    if (rc == TIDEMARK_ENOTFOUND && queued) {
        *out = qb;
        rc = 0;
    } else if (rc == 0) {
        out->assigned = watch(p, session, stream, out->head, out->closed);
    }
    return rc;
}

/* One page of events after `after`, with the stream's bounds, in one
 * snapshot. Rows: first_retained, head, seq, epoch, data (binary). */
static int read_page(pgstore *p, const char *session, const char *stream, uint64_t after, size_t max,
                     PGresult **r)
{
    char a2[24], a3[24];
    snprintf(a2, sizeof a2, "%" PRIu64, after);
    snprintf(a3, sizeof a3, "%zu", max);
    const char *a[4] = {session, stream, a2, a3};
    int rc = tm_pg_query(p, sql_page, 4, a, 1, r);
    if (rc)
        return TIDEMARK_EIO;
    if (PQntuples(*r) == 0) {
        PQclear(*r);
        *r = NULL;
        return TIDEMARK_ENOTFOUND;
    }
    return 0;
}

/* Visit a page's events. OUT *last: the last seq visited; *stop: fn said stop. */
static void visit_page(const PGresult *r, uint64_t *last, size_t *left, int *stop, tm_event_visitor fn,
                       void *ud)
{
    int n = PQntuples(r);
    for (int i = 0; i < n && *left && !*stop; i++) {
        if (PQgetisnull(r, i, 2))
            break;
        char epoch[TM_EPOCH_LEN + 1];
        snprintf(epoch, sizeof epoch, "%.*s", PQgetlength(r, i, 3), PQgetvalue(r, i, 3));
        tm_event ev = {.seq = (uint64_t)tm_pg_bin_i64(r, i, 2), .epoch = epoch,
                       .data = PQgetvalue(r, i, 4), .len = (size_t)PQgetlength(r, i, 4)};
        *last = ev.seq;
        (*left)--;
        *stop = fn(ud, &ev) != 0;
    }
}

int tm_pg_read(tm_store *st, const char *session, const char *stream, uint64_t after, size_t max_events,
               tm_event_visitor fn, void *ud)
{
    pgstore *p = (pgstore *)st;
    size_t left = max_events;
    int stop = 0;
    if (after > (uint64_t)INT64_MAX) /* past every head: asks only that the stream exists */
        after = (uint64_t)INT64_MAX;
    while (left && !stop) {
        PGresult *r = NULL;
        size_t page = left < READ_CHUNK ? left : READ_CHUNK;
        tm_stream_bounds qb; /* looked up first: as in tm_pg_bounds */
        int queued = queued_open(p, session, stream, &qb) == 0;
        int rc = read_page(p, session, stream, after, page, &r);
        if (rc == TIDEMARK_ENOTFOUND && queued)
            return 0; /* opened here, not committed yet: nothing to read so far */
        if (rc)
            return rc;
        uint64_t first = (uint64_t)tm_pg_bin_i64(r, 0, 0), head = (uint64_t)tm_pg_bin_i64(r, 0, 1);
        if (after >= head) {
            PQclear(r);
            return 0;
        }
        if (after + 1 < first) { /* trimmed under the reader: never skip silently */
            PQclear(r);
            return TIDEMARK_ERANGE;
        }
        uint64_t last = after;
        visit_page(r, &last, &left, &stop, fn, ud);
        int rows = PQntuples(r);
        PQclear(r);
        if (last == after || (size_t)rows < page)
            return 0;
        after = last;
    }
    return 0;
}

/* The live reads: this node's ring first (store_pg_cache.c), else the database. */
int tm_pg_read_live(tm_store *st, const char *session, const char *stream, uint64_t after,
                    size_t max_events, tm_event_visitor fn, void *ud)
{
    if (tm_pg_cache_read((pgstore *)st, session, stream, after, max_events, fn, ud))
        return 0;
    return tm_pg_read(st, session, stream, after, max_events, fn, ud);
}

int tm_pg_bounds_live(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out)
{
    if (tm_pg_cache_bounds((pgstore *)st, session, stream, out))
        return 0;
    return tm_pg_bounds(st, session, stream, out);
}

int tm_pg_event_epoch(tm_store *st, const char *session, const char *stream, uint64_t seq,
                      char out[TM_EPOCH_LEN + 1])
{
    pgstore *p = (pgstore *)st;
    char a2[24];
    snprintf(a2, sizeof a2, "%" PRIu64, seq);
    const char *a[3] = {session, stream, a2};
    PGresult *r = NULL;
    int rc = tm_pg_query(p, "SELECT e.epoch FROM tm_streams s JOIN tm_events e ON e.sid = s.sid "
                            "WHERE s.session = $1 AND s.name = $2 AND e.seq = $3 "
                            "UNION ALL SELECT trimmed_epoch FROM tm_streams WHERE session = $1 "
                            "AND name = $2 AND first_retained = $3 + 1 AND trimmed_epoch <> '' LIMIT 1",
                         3, a, 0, &r);
    if (rc)
        return TIDEMARK_EIO;
    rc = PQntuples(r) ? 0 : TIDEMARK_ENOTFOUND;
    if (rc == 0)
        snprintf(out, TM_EPOCH_LEN + 1, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return rc;
}

/* ---- sessions ---------------------------------------------------------------------------- */

#define SESSION_COLS                                                                             \
    "SELECT id, version, client, created_ms, last_seen_ms, (SELECT json_object_agg(name, "     \
    "value::json ORDER BY name)::text FROM tm_session_attrs a WHERE a.session = s.id) "         \
    "FROM tm_sessions s "

static int session_of_row(const PGresult *r, int i, tm_session_rec *out)
{
    memset(out, 0, sizeof *out);
    out->id = tm_pg_str(r, i, 0);
    out->protocol_version = tm_pg_str(r, i, 1);
    out->client = tm_pg_str(r, i, 2);
    out->created_ms = tm_pg_i64(r, i, 3);
    out->last_seen_ms = tm_pg_i64(r, i, 4);
    out->attrs = tm_pg_str(r, i, 5);
    if (!out->id) {
        tm_session_rec_clear(out);
        return TIDEMARK_ENOMEM;
    }
    return 0;
}

int tm_pg_session_get(tm_store *st, const char *id, tm_session_rec *out)
{
    pgstore *p = (pgstore *)st;
    const char *a[1] = {id};
    PGresult *r = NULL;
    memset(out, 0, sizeof *out);
    if (tm_pg_query(p, SESSION_COLS "WHERE id = $1", 1, a, 0, &r) != 0)
        return TIDEMARK_EIO;
    int rc = PQntuples(r) == 1 ? session_of_row(r, 0, out) : TIDEMARK_ENOTFOUND;
    PQclear(r);
    return rc;
}

/* Visit sessions page by page (by id), those with one of names' attributes
 * when n > 0. */
static int visit_sessions(pgstore *p, const char *const *names, size_t n,
                          int (*fn)(void *, const tm_session_rec *), void *ud)
{
    char *arr = n ? tm_pg_text_array(names, n) : NULL;
    if (n && !arr)
        return TIDEMARK_ENOMEM;
    char *last = strdup("");
    int rc = last ? 0 : TIDEMARK_ENOMEM, stop = 0;
    while (rc == 0 && !stop) {
        const char *a[2] = {last, arr};
        PGresult *r = NULL;
        rc = tm_pg_query(p, n ? SESSION_COLS "WHERE id > $1 AND id IN (SELECT session FROM "
                                "tm_session_attrs WHERE name = ANY($2::text[])) ORDER BY id LIMIT 500"
                              : SESSION_COLS "WHERE id > $1 ORDER BY id LIMIT 500",
                         n ? 2 : 1, a, 0, &r) ? TIDEMARK_EIO : 0;
        int rows = rc ? 0 : PQntuples(r);
        for (int i = 0; i < rows && !stop && rc == 0; i++) {
            tm_session_rec rec;
            if ((rc = session_of_row(r, i, &rec)) != 0)
                break;
            stop = fn(ud, &rec) != 0;
            free(last);
            last = rec.id;
            rec.id = NULL;
            tm_session_rec_clear(&rec);
        }
        PQclear(r);
        stop |= rows < PAGE;
    }
    free(last);
    free(arr);
    return rc;
}

int tm_pg_sessions_each(tm_store *st, int (*fn)(void *, const tm_session_rec *), void *ud)
{
    return visit_sessions((pgstore *)st, NULL, 0, fn, ud);
}

int tm_pg_sessions_with_attr(tm_store *st, const char *const *names, size_t n,
                             int (*fn)(void *, const tm_session_rec *), void *ud)
{
    return n ? visit_sessions((pgstore *)st, names, n, fn, ud) : 0;
}

int tm_pg_sessions_expire(tm_store *st, int64_t before, void (*fn)(void *, const char *), void *ud)
{
    pgstore *p = (pgstore *)st;
    char b[24];
    snprintf(b, sizeof b, "%" PRId64, before);
    const char *a[1] = {b};
    PGresult *r = NULL;
    if (tm_pg_query(p, "SELECT tm_expire($1)", 1, a, 0, &r) != 0)
        return TIDEMARK_EIO;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *id = PQgetvalue(r, i, 0);
        pthread_mutex_lock(&p->c_mu);
        tm_pg_forget_session(p, id);
        pthread_mutex_unlock(&p->c_mu);
        tm_writer_touch_forget(p->writer, id);
        if (fn)
            fn(ud, id);
    }
    PQclear(r);
    return 0;
}

/* ---- request records ----------------------------------------------------------------------- */

/* Row i of a REQUEST_COLS result (binary: response is bytea). */
static int request_of_row_at(const PGresult *r, int i, int base, tm_request_rec *out);
static int request_of_row(const PGresult *r, int i, tm_request_rec *out)
{
    return request_of_row_at(r, i, 0, out);
}

/* The same, its columns from base on. */
static int request_of_row_at(const PGresult *r, int i, int base, tm_request_rec *out)
{
    memset(out, 0, sizeof *out);
    out->session = tm_pg_str(r, i, base + 0);
    out->key = tm_pg_str(r, i, base + 1);
    out->tool = tm_pg_str(r, i, base + 2);
    out->stream = tm_pg_str(r, i, base + 3);
    out->message = tm_pg_str(r, i, base + 4);
    if (!PQgetisnull(r, i, base + 5)) {
        out->response_len = (size_t)PQgetlength(r, i, base + 5);
        out->response = tm_memdup(PQgetvalue(r, i, base + 5), out->response_len);
    }
    out->state = (int)tm_pg_bin_i64(r, i, base + 6);
    out->updated_ms = tm_pg_bin_i64(r, i, base + 7);
    if (!out->session || !out->key || (!PQgetisnull(r, i, base + 5) && !out->response)) {
        tm_request_rec_clear(out);
        return TIDEMARK_ENOMEM;
    }
    return 0;
}

/* Binary results (text columns as their bytes, the response as is); the
 * second parameter, when there is one, is a key: bytes. */
static int request_query(pgstore *p, const char *sql, int n, const char *const *a, PGresult **r)
{
    int lens[5] = {0, n > 1 ? (int)strlen(a[1]) : 0, 0, 0, 0}, fmts[5] = {0, n > 1, 0, 0, 0};
    assert(n >= 1 && n <= 5); /* every parameter has a length and a format here */
    return tm_pg_query_f(p, sql, n, a, lens, fmts, 1, r);
}

int tm_pg_request_get(tm_store *st, const char *session, const char *key, tm_request_rec *out)
{
    pgstore *p = (pgstore *)st;
    const char *a[2] = {session, key};
    PGresult *r = NULL;
    memset(out, 0, sizeof *out);
    if (request_query(p, sql_request, 2, a, &r) != 0)
        return TIDEMARK_EIO;
    int rc = PQntuples(r) == 1 ? request_of_row(r, 0, out) : TIDEMARK_ENOTFOUND;
    PQclear(r);
    return rc;
}

/* A session and one record of it in one statement (one round trip on
 * the request path of a store shared by nodes). */
int tm_pg_session_request_get(tm_store *st, const char *id, const char *key, tm_session_rec *sess,
                              tm_request_rec *req, int *req_rc)
{
    pgstore *p = (pgstore *)st;
    const char *a[2] = {id, key};
    PGresult *r = NULL;
    memset(sess, 0, sizeof *sess);
    *req_rc = 1;
    if (request_query(p, sql_session_request, 2, a, &r) != 0)
        return TIDEMARK_EIO;
    int rc = PQntuples(r) == 1 ? session_of_row(r, 0, sess) : TIDEMARK_ENOTFOUND;
    if (rc == 0)
        *req_rc = PQgetisnull(r, 0, 6) ? TIDEMARK_ENOTFOUND : request_of_row_at(r, 0, 6, req);
    PQclear(r);
    return rc;
}

/* Started records no live node owns: not this node's, and whose node's
 * lease lapsed (on the database's clock). */
/* Whether this node may judge other nodes dead: it has been in touch with
 * the store, without a break, for two leases. Right after a failover (or
 * any outage) every lease has lapsed, live nodes' too: they renew theirs
 * within LEASE_RENEW_MS of reconnecting, and nobody takes their calls. */
static int may_judge(pgstore *p)
{
    int64_t since = atomic_load(&p->listen_since);
    return since > 0 && tm_now_ms() - since >= 2 * LEASE_MS;
}

int tm_pg_requests_unfinished(tm_store *st, tm_request_visitor fn, void *ud)
{
    pgstore *p = (pgstore *)st;
    if (!may_judge(p))
        return 0;
    const char *a[1] = {p->node};
    PGresult *r = NULL;
    if (request_query(p, REQUEST_COLS "r WHERE state = 1 AND node <> $1 AND NOT EXISTS (SELECT 1 "
                                      "FROM tm_nodes n WHERE n.node = r.node AND n.until_ms > tm_now()) "
                                      "ORDER BY updated_ms", 1, a, &r) != 0)
        return TIDEMARK_EIO;
    int rc = 0;
    for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
        tm_request_rec rec;
        if ((rc = request_of_row(r, i, &rec)) != 0)
            break;
        int stop = fn(ud, &rec);
        tm_request_rec_clear(&rec);
        if (stop)
            break;
    }
    PQclear(r);
    return rc;
}

int tm_pg_request_claim(tm_store *st, const char *session, const char *key)
{
    pgstore *p = (pgstore *)st;
    char settle[24];
    snprintf(settle, sizeof settle, "%lld", 2 * (long long)p->timeout_ms);
    const char *a[5] = {session, key, p->node, may_judge(p) ? "t" : "f", settle};
    PGresult *r = NULL;
    /* claimed (1 or 0: live elsewhere, taken, finished), and whether it
     * exists. Not while a backend of the owner's writer here may still
     * commit (doubt_gone's rule, judged by the backend's own state_change:
     * anything but idle, or idle for less than twice the store timeout; a
     * state hidden from this role is a doubt): a dead node's batch waiting
     * for a standby may still land, and a re-run reading the stream before
     * it would send its events again. */
    if (request_query(p, "WITH c AS (UPDATE tm_requests r SET node = $3 WHERE session = $1 AND "
                         "key = $2 AND state = 1 AND node <> $3 AND $4::boolean AND NOT EXISTS "
                         "(SELECT 1 FROM tm_nodes n WHERE n.node = r.node AND n.until_ms > tm_now()) "
                         "AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE "
                         "a.application_name = '" PG_WRITER_APP "' || r.node AND "
                         "(a.state IS NULL OR a.state NOT IN ('idle', 'idle in transaction "
                         "(aborted)') OR a.state_change > clock_timestamp() - $5::bigint * "
                         "interval '1 millisecond')) "
                         "RETURNING 1) SELECT (SELECT count(*) FROM c), EXISTS (SELECT 1 FROM "
                         "tm_requests WHERE session = $1 AND key = $2)", 5, a, &r) != 0)
        return TIDEMARK_EIO;
    int exists = PQgetlength(r, 0, 1) == 1 && PQgetvalue(r, 0, 1)[0] == 1;
    int rc = !exists ? TIDEMARK_ENOTFOUND : tm_pg_bin_i64(r, 0, 0) == 1 ? 0 : TIDEMARK_EBUSY;
    PQclear(r);
    return rc;
}

int tm_pg_request_adopt(tm_store *st, const char *session, const char *key)
{
    pgstore *p = (pgstore *)st;
    const char *a[3] = {session, key, p->node};
    PGresult *r = NULL;
    if (request_query(p, "WITH c AS (UPDATE tm_requests SET node = $3 WHERE session = $1 AND "
                         "key = $2 AND state = 1 RETURNING 1) SELECT (SELECT count(*) FROM c), "
                         "EXISTS (SELECT 1 FROM tm_requests WHERE session = $1 AND key = $2)",
                      3, a, &r) != 0)
        return TIDEMARK_EIO;
    int exists = PQgetlength(r, 0, 1) == 1 && PQgetvalue(r, 0, 1)[0] == 1;
    int rc = !exists ? TIDEMARK_ENOTFOUND : tm_pg_bin_i64(r, 0, 0) == 1 ? 0 : TIDEMARK_EBUSY;
    PQclear(r);
    return rc;
}

int tm_pg_request_mine(tm_store *st, const char *session, const char *key)
{
    pgstore *p = (pgstore *)st;
    const char *a[3] = {session, key, p->node};
    PGresult *r = NULL;
    if (request_query(p, "SELECT EXISTS (SELECT 1 FROM tm_requests WHERE session = $1 AND "
                         "key = $2 AND state = 1 AND node = $3)", 3, a, &r) != 0)
        return TIDEMARK_EIO;
    int mine = PQgetlength(r, 0, 0) == 1 && PQgetvalue(r, 0, 0)[0] == 1;
    PQclear(r);
    return mine;
}

/* ---- the effect database: the application's SQL and rows ---------------------------------- */

int tm_pg_exec_schema(tm_store *st, const char *sql)
{
    pgstore *p = (pgstore *)st;
    PGconn *c = tm_pg_pool_get(p);
    if (!c)
        return TIDEMARK_EIO;
    /* nodes starting at once: one runs the DDL, the others then find it done */
    PGresult *r = PQexec(c, "BEGIN; SELECT pg_advisory_xact_lock(" TM_PG_LOCK_KEY "1)");
    int rc = PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : TIDEMARK_EIO;
    PQclear(r);
    if (rc == 0) {
        r = PQexec(c, sql);
        rc = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : TIDEMARK_EINVAL;
        if (rc)
            TM_ERROR("postgresql: schema: %s", PQresultErrorMessage(r));
        PQclear(r);
    }
    r = PQexec(c, rc == 0 ? "COMMIT" : "ROLLBACK");
    if (rc == 0 && PQresultStatus(r) != PGRES_COMMAND_OK)
        rc = TIDEMARK_EIO;
    PQclear(r);
    tm_pg_pool_put(p, c);
    return rc;
}

/* Rows as JSON objects, typed by PostgreSQL (json_agg). */
int tm_pg_query_json(tm_store *st, const char *sql, const char *const *args, size_t nargs, json_t **rows)
{
    pgstore *p = (pgstore *)st;
    char *q = tm_pg_placeholders(sql);
    if (!q)
        return TIDEMARK_ENOMEM;
    size_t n = strlen(q);
    while (n && (q[n - 1] == ';' || q[n - 1] == ' ' || q[n - 1] == '\n'))
        q[--n] = '\0';
    char *wrapped = malloc(n + 96);
    if (!wrapped) {
        free(q);
        return TIDEMARK_ENOMEM;
    }
    snprintf(wrapped, n + 96, "SELECT coalesce(json_agg(t), '[]')::text FROM (%s) t", q);
    free(q);
    PGresult *r = NULL;
    int rc = tm_pg_query(p, wrapped, (int)nargs, args, 0, &r);
    free(wrapped);
    if (rc)
        return rc;
    json_error_t err;
    *rows = PQntuples(r) == 1 ? json_loads(PQgetvalue(r, 0, 0), 0, &err) : NULL;
    PQclear(r);
    return *rows ? 0 : TIDEMARK_EIO;
}

int tm_pg_rows(tm_store *st, const char *table, json_t **rows)
{
    pgstore *p = (pgstore *)st;
    if (!tm_table_name_ok(table))
        return TIDEMARK_EINVAL;
    const char *a[1] = {table};
    PGresult *r = NULL;
    if (tm_pg_query(p, "SELECT id, doc FROM tm_rows WHERE tbl = $1 ORDER BY id", 1, a, 0, &r) != 0)
        return TIDEMARK_EIO;
    json_t *out = json_array();
    for (int i = 0; out && i < PQntuples(r); i++) {
        json_t *row = json_loads(PQgetvalue(r, i, 1), 0, NULL);
        if (!json_is_object(row)) {
            json_decref(row);
            row = json_object();
        }
        json_object_set_new(row, "id", json_integer(tm_pg_i64(r, i, 0)));
        json_array_append_new(out, row);
    }
    PQclear(r);
    *rows = out;
    return out ? 0 : TIDEMARK_ENOMEM;
}

/* ---- shared values ------------------------------------------------------------------------- */

int tm_pg_kv_get(tm_store *st, const char *key, void *out, size_t cap, size_t *len)
{
    const char *a[1] = {key};
    PGresult *r = NULL;
    if (tm_pg_query((pgstore *)st, "SELECT v FROM tm_kv WHERE k = $1", 1, a, 1, &r) != 0)
        return TIDEMARK_EIO;
    int rc = PQntuples(r) == 1 ? 0 : TIDEMARK_ENOTFOUND;
    if (rc == 0) {
        *len = (size_t)PQgetlength(r, 0, 0);
        if (*len > cap)
            rc = TIDEMARK_ERANGE;
        else
            memcpy(out, PQgetvalue(r, 0, 0), *len);
    }
    PQclear(r);
    return rc;
}

/* One autocommit INSERT: durable as the writer's commits are (the
 * connection's synchronous_commit), bounded by the statement timeout. */
int tm_pg_kv_create(tm_store *st, const char *key, const void *val, size_t len)
{
    const char *a[2] = {key, val};
    int lens[2] = {0, (int)len}, fmts[2] = {0, 1};
    PGresult *r = NULL;
    if (tm_pg_query_f((pgstore *)st, "INSERT INTO tm_kv(k, v) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                      2, a, lens, fmts, 0, &r) != 0)
        return TIDEMARK_EIO;
    int rc = strcmp(PQcmdTuples(r), "1") == 0 ? 0 : TIDEMARK_EEXIST;
    PQclear(r);
    return rc;
}
