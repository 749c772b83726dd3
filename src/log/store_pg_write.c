/*
 * store_pg_write.c - the PostgreSQL store's writes: the ops callers queue,
 * and the writer hooks that commit a batch of them as one transaction in
 * libpq's pipeline mode (store_pg.c says why and what an unknown outcome
 * means). Hooks run on the writer thread, the only user of p->wc.
 */
#include "store_pg_int.h"
#include "txn.h"
#include "../base/buf.h"
#include "../base/clock.h"
#include "../base/crash.h"
#include "../base/log.h"
#include "../base/str.h"
#include "tidemark/tidemark.h"
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prepared on every writer connection; indexed by op kind. */
static const char *const op_sql[] = {
    [OP_APPEND] = "SELECT tm_append($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    [OP_CLOSE] = "UPDATE tm_streams SET closed = true WHERE session = $1 AND name = $2 "
                 "RETURNING head",
    [OP_OPEN] = "INSERT INTO tm_streams(session, name) SELECT $1, $2 "
                "WHERE EXISTS (SELECT 1 FROM tm_sessions WHERE id = $1) "
                "ON CONFLICT (session, name) DO UPDATE SET closed = false RETURNING head",
    [OP_SESS_CREATE] = "INSERT INTO tm_sessions(id, version, client, created_ms, last_seen_ms, "
                       "next_r) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    [OP_SESS_TOUCH] = "UPDATE tm_sessions SET last_seen_ms = GREATEST(last_seen_ms, $2) WHERE id = $1",
    [OP_SESS_DELETE] = "SELECT tm_session_delete($1)",
    [OP_SET_ATTR] = "SELECT tm_set_attr($1, $2, $3)",
    [OP_REQ_BEGIN] = "SELECT tm_req_begin($1, $2, $3, $4, $5, $6, $7)",
};
static const char *const op_name[] = {"a", "c", "o", "sc", "st", "sd", "sa", "rb"};
#define NKINDS ((int)(sizeof op_sql / sizeof op_sql[0]))

pop *tm_pg_op_new(enum op_kind k)
{
    pop *o = calloc(1, sizeof *o);
    if (o) {
        o->kind = k;
        o->ms = tm_wall_ms();
        o->w.enq_us = tm_now_us();
    }
    return o;
}

void tm_pg_op_free(pop *o)
{
    if (!o)
        return;
    free(o->session);
    free(o->name);
    free(o->data);
    free(o->alt);
    free(o->extra);
    free(o);
}

static pop *op_next(const pop *o) { return (pop *)o->w.q.next; }

/* ---- the writer's connection ---------------------------------------------------------- */

static void on_notice(void *ud, const PGresult *r)
{
    pgstore *p = ud;
    const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    const char *det = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
    /* pg: "canceling the wait for synchronous replication ...", detail "The
     * transaction has already committed locally, but might not have been
     * replicated to the standby." */
    if ((msg && strstr(msg, "synchronous replication")) || (det && strstr(det, "committed locally")))
        p->doubt = 1;
}

int tm_pg_writer_connect(pgstore *p)
{
    PGconn *c = tm_pg_connect(p, "write");
    if (!c) {
        atomic_store(&p->w_down, 1);
        return TIDEMARK_EIO;
    }
    for (int k = 0; k < NKINDS; k++) {
        PGresult *r = PQprepare(c, op_name[k], op_sql[k], 0, NULL);
        int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        if (!ok)
            TM_ERROR("postgresql: prepare %s: %s", op_name[k], PQresultErrorMessage(r));
        PQclear(r);
        if (!ok) {
            PQfinish(c);
            atomic_store(&p->w_down, 1);
            return TIDEMARK_EIO;
        }
    }
    PQsetNoticeReceiver(c, on_notice, p);
    tm_pg_check_replicated(p, c);
    p->wc = c;
    if (atomic_exchange(&p->w_down, 0))
        TM_INFO("postgresql: writer connected again (%s:%s)", PQhost(c), PQport(c));
    return 0;
}

/* The connection is closed, never cancelled: a cancelled wait for a standby
 * would make an unreplicated commit visible. A new epoch for what follows. */
void tm_pg_writer_lost(pgstore *p)
{
    PQfinish(p->wc);
    p->wc = NULL;
    atomic_store(&p->w_down, 1);
    tm_pg_new_epoch(p);
}

/* ---- waiting with the batch's deadline ------------------------------------------------ */

/* The next result of the pipeline, NULL between queries. OUT *lost: the
 * connection broke or the deadline passed. */
static PGresult *next_result(pgstore *p, int *lost)
{
    PGconn *c = p->wc;
    while (PQisBusy(c)) {
        int64_t left = p->deadline - tm_now_ms();
        struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
        int n = left > 0 ? poll(&pfd, 1, (int)(left > 1000 ? 1000 : left)) : 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (left <= 0 || n < 0 || (n > 0 && !PQconsumeInput(c))) {
            *lost = 1;
            return NULL;
        }
    }
    return PQgetResult(c);
}

/* One query's result: status ok, then the NULL that ends it. */
static PGresult *query_result(pgstore *p, int *lost)
{
    PGresult *r = next_result(p, lost);
    if (!r) {
        *lost = 1;
        return NULL;
    }
    PGresult *end = next_result(p, lost);
    if (end) { /* (a query of the batch never returns more than one result) */
        PQclear(end);
        *lost = 1;
    }
    return r;
}

/* ---- one op --------------------------------------------------------------------------- */

static int send_op(pgstore *p, pop *o, const char *epoch)
{
    char a[4][24];
    const char *v[9] = {o->session, o->name};
    int len[9] = {0}, fmt[9] = {0}, n = 2;
    switch (o->kind) {
    case OP_APPEND: {
        int fx_failed = o->flags & PG_FX_FAILED;
        v[2] = epoch;
        v[3] = fx_failed ? o->alt : o->data;
        len[3] = (int)(fx_failed ? o->alt_len : o->len);
        fmt[3] = 1;
        v[4] = (o->flags & TM_APPEND_FINAL) ? "t" : "f";
        v[5] = o->extra; /* the request key: bytes */
        len[5] = o->extra ? (int)strlen(o->extra) : 0;
        fmt[5] = 1;
        snprintf(a[0], sizeof a[0], "%" PRId64, o->ms);
        snprintf(a[1], sizeof a[1], "%" PRIu64, p->opt.retain_events);
        int64_t cut = tm_retain_cutoff_ms(&p->opt, o->ms);
        snprintf(a[2], sizeof a[2], "%" PRId64, cut);
        v[6] = a[0];
        v[7] = a[1];
        v[8] = cut == INT64_MIN ? NULL : a[2];
        n = 9;
        break;
    }
    case OP_SESS_CREATE:
        v[1] = o->alt; /* version */
        v[2] = o->data;
        snprintf(a[0], sizeof a[0], "%" PRId64, o->ms);
        snprintf(a[1], sizeof a[1], "%" PRId64, o->ms2);
        snprintf(a[2], sizeof a[2], "%d", RESERVE_R);
        v[3] = a[0];
        v[4] = a[1];
        v[5] = a[2];
        n = 6;
        break;
    case OP_SESS_TOUCH:
        snprintf(a[0], sizeof a[0], "%" PRId64, o->ms);
        v[1] = a[0];
        break;
    case OP_SESS_DELETE:
        n = 1;
        break;
    case OP_SET_ATTR:
        v[2] = o->data;
        n = 3;
        break;
    case OP_REQ_BEGIN:
        len[1] = (int)strlen(o->name); /* the key: bytes */
        fmt[1] = 1;
        v[2] = o->alt;   /* tool */
        v[3] = o->extra; /* stream */
        v[4] = o->data;  /* message */
        snprintf(a[0], sizeof a[0], "%" PRId64, o->ms);
        v[5] = a[0];
        v[6] = p->node;
        n = 7;
        break;
    default:
        break;
    }
    return PQsendQueryPrepared(p->wc, op_name[o->kind], n, v, len, fmt, 0) ? 0 : TIDEMARK_EIO;
}

/* Fold one op's result into its status and seq. */
static void take_result(pop *o, const PGresult *r)
{
    int rows = PQntuples(r);
    const char *tuples = PQcmdTuples((PGresult *)r);
    int64_t v = rows ? tm_pg_i64(r, 0, 0) : 0;
    int yes = rows && PQgetvalue(r, 0, 0)[0] == 't';
    int st = 0;
    switch (o->kind) {
    case OP_APPEND:
        st = v > 0 ? 0 : v == -2 ? TIDEMARK_ECLOSED : TIDEMARK_ENOTFOUND;
        o->w.seq = v > 0 ? (uint64_t)v : 0;
        break;
    case OP_CLOSE:
    case OP_OPEN:
        st = rows ? 0 : TIDEMARK_ENOTFOUND;
        o->w.seq = (uint64_t)v;
        break;
    case OP_SESS_CREATE:
        st = strcmp(tuples, "1") == 0 ? 0 : TIDEMARK_EEXIST;
        break;
    case OP_SESS_TOUCH:
        st = strcmp(tuples, "0") == 0 ? TIDEMARK_ENOTFOUND : 0;
        break;
    case OP_SESS_DELETE:
    case OP_SET_ATTR:
        st = yes ? 0 : TIDEMARK_ENOTFOUND;
        break;
    case OP_REQ_BEGIN:
        st = v == 0 ? 0 : v == -1 ? TIDEMARK_ENOTFOUND : TIDEMARK_EEXIST;
        break;
    }
    o->w.q.status = st;
}

/* ---- atomic effects ------------------------------------------------------------------- */

/* "?N" and "?" placeholders (SQLite's, the public API's) as PostgreSQL's "$N",
 * outside quotes. A new string (free). */
char *tm_pg_placeholders(const char *sql)
{
    size_t n = strlen(sql);
    char *out = malloc(n * 4 + 1);
    if (!out)
        return NULL;
    char quote = 0;
    int next = 1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = sql[i];
        if (quote) {
            quote = ch == quote ? 0 : quote;
        } else if (ch == '\'' || ch == '"') {
            quote = ch;
        } else if (ch == '?') {
            if (sql[i + 1] >= '0' && sql[i + 1] <= '9') {
                out[k++] = '$';
                continue;
            }
            k += (size_t)sprintf(out + k, "$%d", next++);
            continue;
        }
        out[k++] = ch;
    }
    out[k] = '\0';
    return out;
}

static int pg_err(const PGresult *r)
{
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    return state && strncmp(state, "23", 2) == 0 ? TIDEMARK_EEXIST : TIDEMARK_EIO;
}

static int txn_insert(struct tidemark_txn *txn, const char *table, const char *doc)
{
    pgstore *p = txn->impl;
    const char *v[2] = {table, doc};
    PGresult *r = PQexecParams(p->wc, "SELECT tm_row_insert($1, $2)", 2, NULL, v, NULL, NULL, 0);
    int rc = PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : pg_err(r);
    PQclear(r);
    return rc;
}

static int txn_exec(struct tidemark_txn *txn, const char *sql, const char *const *args, size_t nargs)
{
    pgstore *p = txn->impl;
    char *q = tm_pg_placeholders(sql);
    if (!q)
        return TIDEMARK_ENOMEM;
    PGresult *r = PQexecParams(p->wc, q, (int)nargs, NULL, args, NULL, NULL, 0);
    ExecStatusType s = PQresultStatus(r);
    int rc = s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK ? 0 : pg_err(r);
    if (rc)
        TM_DEBUG("postgresql: effect statement: %s", PQresultErrorMessage(r));
    PQclear(r);
    free(q);
    return rc;
}

static const struct tm_txn_ops pg_txn_ops = {.name = "postgresql", .insert = txn_insert,
                                             .exec = txn_exec};

static int simple(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok ? 0 : TIDEMARK_EIO;
}

/* Run o's effect in a savepoint of the open transaction (out of pipeline
 * mode): its statements commit with the result, or leave no trace and the
 * fallback bytes are written instead. TIDEMARK_EIO: the connection failed. */
static int run_effect(pgstore *p, pop *o)
{
    if (simple(p->wc, "SAVEPOINT fx") != 0)
        return TIDEMARK_EIO;
    struct tidemark_txn txn = {.ops = &pg_txn_ops, .impl = p};
    int rc = o->effect(o->effect_ud, &txn);
    if (rc) {
        o->flags |= PG_FX_FAILED;
        if (simple(p->wc, "ROLLBACK TO SAVEPOINT fx") != 0)
            return TIDEMARK_EIO;
    }
    return simple(p->wc, "RELEASE SAVEPOINT fx");
}

/* ---- a batch -------------------------------------------------------------------------- */

/* The NOTIFY that wakes other nodes' readers of the batch's streams: one a
 * batch. Its two parameters: the streams' sessions and names as text[]
 * literals; the statement reads their heads inside the transaction (rows
 * it holds locked) and sends "<node>\n<session>\t<stream>\t<head>\n...",
 * or "<node>\n*" when that would be too long. 0, or 1 when the batch moves
 * no stream (no NOTIFY), or TIDEMARK_ENOMEM. */
static int notify_arrays(pop *batch, char **sessions, char **names)
{
    tm_map *seen = tm_map_new();
    const char **se = NULL, **na = NULL;
    size_t n = 0, cap = 0;
    int rc = seen ? 0 : TIDEMARK_ENOMEM;
    for (pop *o = batch; o && rc == 0; o = op_next(o)) {
        if (o->kind != OP_APPEND && o->kind != OP_CLOSE)
            continue;
        char *k = tm_pg_cache_key(o->session, o->name);
        if (!k || tm_map_get(seen, k) || tm_map_put(seen, k, seen) != 0) {
            rc = k ? 0 : TIDEMARK_ENOMEM;
            free(k);
            continue;
        }
        free(k);
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            const char **a = realloc(se, cap * sizeof *a), **b = a ? realloc(na, cap * sizeof *b) : NULL;
            se = a ? a : se;
            na = b ? b : na;
            if (!a || !b) {
                rc = TIDEMARK_ENOMEM;
                break;
            }
        }
        se[n] = o->session;
        na[n++] = o->name;
    }
    tm_map_free(seen);
    if (rc == 0 && n) {
        *sessions = tm_pg_text_array(se, n);
        *names = tm_pg_text_array(na, n);
        rc = *sessions && *names ? 0 : TIDEMARK_ENOMEM;
    }
    free(se);
    free(na);
    return rc ? rc : !n;
}

static const char notify_sql[] =
    "SELECT pg_notify('tm_commits', CASE WHEN length(p) > 7900 THEN $1 || E'\\n*' ELSE p END) "
    "FROM (SELECT $1 || E'\\n' || coalesce(string_agg(s.session || E'\\t' || s.name || E'\\t' || "
    "s.head, E'\\n'), '') AS p FROM tm_streams s JOIN unnest($2::text[], $3::text[]) AS u(se, na) "
    "ON s.session = u.se AND s.name = u.na) q";

/* One query's result that must be ok, cleared. 0, or nonzero when bad. */
static int expect_ok(pgstore *p, int *lost)
{
    PGresult *r = query_result(p, lost);
    int bad = !r || (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK);
    PQclear(r);
    return bad;
}

/* Sync the pipeline and read what it owes, in order: BEGIN (begin), the ops
 * from..to (to exclusive), NOTIFY (notify), COMMIT (commit). Returns 0, or
 * TIDEMARK_EIO when anything failed (the transaction is then lost). */
static int read_segment(pgstore *p, int begin, pop *from, pop *to, int notify, int commit)
{
    int lost = !PQpipelineSync(p->wc), bad = 0;
    PGresult *r;
    if (!lost && begin)
        bad |= expect_ok(p, &lost);
    for (pop *o = from; !lost && o != to; o = op_next(o)) {
        r = query_result(p, &lost);
        if (r && (PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK))
            take_result(o, r);
        else
            bad = 1;
        PQclear(r);
    }
    if (!lost && notify)
        bad |= expect_ok(p, &lost);
    if (!lost && commit) {
        p->doubt = 0;
        r = query_result(p, &lost);
        /* an aborted transaction's COMMIT answers "ROLLBACK" */
        bad |= !r || PQresultStatus(r) != PGRES_COMMAND_OK || strcmp(PQcmdStatus(r), "COMMIT") != 0;
        bad |= p->doubt;
        PQclear(r);
    }
    if (!lost) {
        r = next_result(p, &lost);
        bad |= !r || PQresultStatus(r) != PGRES_PIPELINE_SYNC;
        PQclear(r);
    }
    return lost || bad ? TIDEMARK_EIO : 0;
}

/* Send and commit the batch as one transaction. 0: committed (each op's
 * own status set); TIDEMARK_EIO: the outcome is unknown or it failed. */
static int run_batch(pgstore *p, pop *batch)
{
    char epoch[TM_EPOCH_LEN + 1];
    tm_pg_epoch(p, epoch);
    char *sessions = NULL, *names = NULL;
    int note = notify_arrays(batch, &sessions, &names);
    int rc = note < 0 ? note : 0;
    if (rc == 0 && !(PQenterPipelineMode(p->wc) &&
                     PQsendQueryParams(p->wc, "BEGIN", 0, NULL, NULL, NULL, NULL, 0)))
        rc = TIDEMARK_EIO;
    int begin = 1;
    pop *from = batch;
    for (pop *o = batch; o && rc == 0; o = op_next(o)) {
        if (o->kind == OP_APPEND && o->effect) {
            rc = read_segment(p, begin, from, o, 0, 0);
            begin = 0;
            from = o;
            if (rc == 0)
                rc = PQexitPipelineMode(p->wc) ? run_effect(p, o) : TIDEMARK_EIO;
            if (rc == 0 && !PQenterPipelineMode(p->wc))
                rc = TIDEMARK_EIO;
        }
        if (rc == 0)
            rc = send_op(p, o, epoch);
    }
    const char *nv[3] = {p->node, sessions, names};
    if (rc == 0 && note == 0 && !PQsendQueryParams(p->wc, notify_sql, 3, NULL, nv, NULL, NULL, 0))
        rc = TIDEMARK_EIO;
    if (rc == 0 && !PQsendQueryParams(p->wc, "COMMIT", 0, NULL, NULL, NULL, NULL, 0))
        rc = TIDEMARK_EIO;
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "pg_before_commit");
    if (rc == 0)
        rc = read_segment(p, begin, from, NULL, note == 0, 1);
    if (rc == 0 && !PQexitPipelineMode(p->wc))
        rc = TIDEMARK_EIO;
    free(sessions);
    free(names);
    return rc;
}

static int fail_all(pop *batch, int rc)
{
    for (pop *o = batch; o; o = op_next(o))
        o->w.q.status = rc;
    return 0;
}

/* commit hook. Always settles every op (the writer's failure path, which
 * fails the queue behind a batch, is for stores that hand out seqs before
 * they commit). */
static int w_commit(void *be, tm_wop *wbatch, size_t n)
{
    (void)n;
    pgstore *p = be;
    pop *batch = (pop *)wbatch;
    p->deadline = tm_now_ms() + p->timeout_ms;
    while (!p->wc && tm_pg_writer_connect(p) != 0) {
        if (tm_now_ms() >= p->deadline) {
            TM_ERROR("postgresql: no writable primary for %lld ms: failing %zu queued write(s)",
                     (long long)p->timeout_ms, n);
            return fail_all(batch, TIDEMARK_EIO);
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&p->not_replicated))
        return fail_all(batch, TIDEMARK_EIO);
    int rc = run_batch(p, batch);
    if (rc) {
        TM_WARN("postgresql: a batch of %zu write(s) failed or its commit was not confirmed "
                "(%s): treated as not acknowledged", n, PQerrorMessage(p->wc));
        tm_pg_writer_lost(p);
        fail_all(batch, TIDEMARK_EIO);
    }
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "commit_before_emit");
    return 0;
}

/* ---- settling: the hints and the wake-ups --------------------------------------------- */

/* Fold one settled op into the hints. Caller holds c_mu. */
static void settle_hint(pgstore *p, pop *o)
{
    int st = o->w.q.status;
    if (o->kind == OP_SESS_DELETE && st == 0) {
        tm_pg_forget_session(p, o->session);
        return;
    }
    if (o->kind == OP_SESS_CREATE && st == 0) {
        resv *v = calloc(1, sizeof *v);
        if (v) {
            *v = (resv){1, RESERVE_R};
            free(tm_map_get(p->resv, o->session));
            if (tm_map_put(p->resv, o->session, v) != 0)
                free(v);
        }
        return;
    }
    if (o->kind != OP_APPEND && o->kind != OP_CLOSE && o->kind != OP_OPEN)
        return;
    char *k = tm_pg_cache_key(o->session, o->name);
    pstream *s = k ? tm_map_get(p->streams, k) : NULL;
    if (s && o->kind == OP_APPEND && s->pending)
        s->pending--;
    if (s && o->kind == OP_OPEN && o->fresh && s->opening)
        s->opening--;
    if (s && st == 0 && o->w.seq > s->known)
        s->known = o->w.seq;
    if (s && st == 0 && o->kind == OP_CLOSE)
        s->closing = 1;
    if (s && st == TIDEMARK_ECLOSED)
        s->closing = 1;
    /* unknown outcome, or refused: the database answers for it from now on */
    if (s && st != 0 && st != TIDEMARK_ECLOSED && !s->pending && !s->opening) {
        tm_map_del(p->streams, k);
        free(s);
    }
    free(k);
}

static void w_settle(void *be, tm_wop *batch, int rc)
{
    (void)rc; /* w_commit always settles */
    pgstore *p = be;
    pthread_mutex_lock(&p->c_mu);
    for (pop *o = (pop *)batch; o; o = op_next(o))
        settle_hint(p, o);
    pthread_mutex_unlock(&p->c_mu);
    for (pop *o = (pop *)batch; o; o = op_next(o)) {
        int moved = (o->kind == OP_APPEND || o->kind == OP_CLOSE) && o->w.q.status == 0;
        if (moved || (o->kind == OP_OPEN && o->fresh && o->w.q.status != 0))
            tm_writer_wake(p->writer, o->session, o->name, moved ? o->w.seq : 0);
    }
}

static void w_release(tm_wop *o) { tm_pg_op_free((pop *)o); }

/* maintain hook: age retention of streams nobody appends to; old bus rows.
 * On a pooled connection: its statement timeout bounds the commits, so a
 * primary without its standby never holds the writer here. */
static void w_maintain(void *be)
{
    pgstore *p = be;
    char cut[24], keep[24];
    snprintf(cut, sizeof cut, "%" PRId64, tm_retain_cutoff_ms(&p->opt, tm_wall_ms()));
    snprintf(keep, sizeof keep, "%d", BUSMSG_KEEP_MS);
    const char *a[1] = {cut}, *b[1] = {keep};
    PGresult *r = NULL;
    if (p->opt.retain_ms > 0 && tm_pg_query(p, "SELECT tm_retain_age($1)", 1, a, 0, &r) == 0)
        PQclear(r);
    if (tm_pg_query(p, "DELETE FROM tm_busmsg WHERE ms < tm_now() - $1", 1, b, 0, &r) == 0)
        PQclear(r);
}

const tm_writer_hooks tm_pg_writer_hooks = {
    .commit = w_commit,
    .settle = w_settle,
    .release = w_release,
    .maintain = w_maintain,
};

/* ---- what callers queue --------------------------------------------------------------- */

/* Queue o without waiting: its failure is told to this thread's next sync. */
static void push_reported(pgstore *p, pop *o)
{
    o->w.thread = pthread_self();
    o->w.report = 1;
    tm_writer_push(p->writer, &o->w);
}

int tm_pg_run(pgstore *p, pop *o)
{
    int rc = tm_writer_run(p->writer, &o->w);
    tm_pg_op_free(o);
    return rc;
}

/* Whether session/name exists and takes appends: the hint, or the database
 * (a hint is then made). Caller holds c_mu; it is let go for the read. */
static int stream_accepts(pgstore *p, const char *session, const char *name, pstream **out)
{
    char *k = tm_pg_cache_key(session, name);
    if (!k)
        return TIDEMARK_ENOMEM;
    pstream *s = tm_map_get(p->streams, k);
    free(k);
    if (!s) {
        tm_stream_bounds b;
        pthread_mutex_unlock(&p->c_mu);
        int rc = tm_pg_read_bounds(p, session, name, &b);
        pthread_mutex_lock(&p->c_mu);
        if (rc)
            return rc;
        if (!(s = tm_pg_stream_hint(p, session, name)))
            return TIDEMARK_ENOMEM;
        if (b.head > s->known)
            s->known = b.head;
        s->closing |= b.closed;
    }
    *out = s;
    return s->closing ? TIDEMARK_ECLOSED : 0;
}

int tm_pg_append_ex(tm_store *st, const tm_append_req *q)
{
    pgstore *p = (pgstore *)st;
    pop *o = tm_pg_op_new(OP_APPEND);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->session = tm_strdup(q->session);
    o->name = tm_strdup(q->stream);
    o->data = tm_memdup(q->data, q->len);
    o->len = q->len;
    o->alt = q->fallback ? tm_memdup(q->fallback, q->fallback_len) : tm_memdup("", 0);
    o->alt_len = q->fallback ? q->fallback_len : 0;
    o->extra = tm_strdup(q->request_key);
    o->flags = q->flags & TM_APPEND_FINAL;
    o->effect = q->effect;
    o->effect_ud = q->effect_ud;
    o->w.cb = q->cb;
    o->w.cb_ud = q->cb_ud;
    o->w.append = 1;
    if (!o->session || !o->name || !o->data || !o->alt || (q->request_key && !o->extra)) {
        tm_pg_op_free(o);
        return TIDEMARK_ENOMEM;
    }
    pstream *s = NULL;
    pthread_mutex_lock(&p->c_mu);
    int rc = stream_accepts(p, q->session, q->stream, &s);
    if (rc == 0) {
        s->pending++;
        s->closing |= (q->flags & TM_APPEND_FINAL) != 0;
        tm_writer_push(p->writer, &o->w); /* under c_mu: queue order follows the hints */
    }
    pthread_mutex_unlock(&p->c_mu);
    if (rc)
        tm_pg_op_free(o);
    return rc;
}

int tm_pg_close_stream(tm_store *st, const char *session, const char *stream)
{
    pgstore *p = (pgstore *)st;
    pop *o = tm_pg_op_new(OP_CLOSE);
    if (!o || !(o->session = strdup(session)) || !(o->name = strdup(stream))) {
        tm_pg_op_free(o);
        return TIDEMARK_ENOMEM;
    }
    pstream *s = NULL;
    pthread_mutex_lock(&p->c_mu);
    int rc = stream_accepts(p, session, stream, &s);
    if (rc == TIDEMARK_ECLOSED)
        rc = 0; /* closing twice is closing */
    if (rc == 0) {
        s->closing = 1;
        push_reported(p, o);
    }
    pthread_mutex_unlock(&p->c_mu);
    if (rc)
        tm_pg_op_free(o);
    return rc;
}

/* The next stream number of session: from this node's reserved block, or a
 * new block taken from the session's row (one small commit per RESERVE_R). */
static int next_stream_number(pgstore *p, const char *session, uint64_t *out)
{
    pthread_mutex_lock(&p->c_mu);
    resv *v = tm_map_get(p->resv, session);
    int have = v && v->next <= v->end;
    if (have)
        *out = v->next++;
    pthread_mutex_unlock(&p->c_mu);
    if (have)
        return 0;
    char n[16];
    snprintf(n, sizeof n, "%d", RESERVE_R);
    const char *a[2] = {session, n};
    PGresult *r = NULL;
    int rc = tm_pg_query(p, "UPDATE tm_sessions SET next_r = next_r + $2 WHERE id = $1 "
                            "RETURNING next_r", 2, a, 0, &r);
    if (rc)
        return TIDEMARK_EIO;
    rc = PQntuples(r) == 1 ? 0 : TIDEMARK_ENOTFOUND;
    uint64_t end = rc ? 0 : (uint64_t)tm_pg_i64(r, 0, 0);
    PQclear(r);
    if (rc)
        return rc;
    pthread_mutex_lock(&p->c_mu);
    if (!(v = tm_map_get(p->resv, session)) && (v = calloc(1, sizeof *v)) &&
        tm_map_put(p->resv, session, v) != 0) {
        free(v);
        v = NULL;
    }
    if (v)
        *v = (resv){end - RESERVE_R + 2, end};
    pthread_mutex_unlock(&p->c_mu);
    *out = end - RESERVE_R + 1;
    return 0;
}

static int open_named(pgstore *p, const char *session, const char *name)
{
    pop *o = tm_pg_op_new(OP_OPEN);
    if (!o || !(o->session = strdup(session)) || !(o->name = strdup(name))) {
        tm_pg_op_free(o);
        return TIDEMARK_ENOMEM;
    }
    int rc = tm_writer_run(p->writer, &o->w);
    uint64_t head = o->w.seq;
    tm_pg_op_free(o);
    if (rc)
        return rc;
    pthread_mutex_lock(&p->c_mu);
    pstream *s = tm_pg_stream_hint(p, session, name);
    if (s) {
        s->closing = 0; /* a reopened standalone stream continues its seqs */
        if (head > s->known)
            s->known = head;
    }
    pthread_mutex_unlock(&p->c_mu);
    return s ? 0 : TIDEMARK_ENOMEM;
}

int tm_pg_stream_open(tm_store *st, const char *session, const char *name, char out[TM_STREAM_MAX])
{
    pgstore *p = (pgstore *)st;
    if (name) {
        int rc = open_named(p, session, name);
        if (rc == 0)
            snprintf(out, TM_STREAM_MAX, "%s", name);
        return rc;
    }
    uint64_t n = 0;
    int rc = next_stream_number(p, session, &n);
    if (rc)
        return rc;
    char nm[TM_STREAM_MAX];
    snprintf(nm, sizeof nm, "r%" PRIu64, n);
    pop *o = tm_pg_op_new(OP_OPEN);
    if (!o || !(o->session = strdup(session)) || !(o->name = strdup(nm))) {
        tm_pg_op_free(o);
        return TIDEMARK_ENOMEM;
    }
    o->fresh = 1;
    pthread_mutex_lock(&p->c_mu);
    pstream *s = tm_pg_stream_hint(p, session, nm);
    if (s) { /* appends queued after it find it here, and commit after it */
        s->opening++;
        push_reported(p, o);
    }
    pthread_mutex_unlock(&p->c_mu);
    if (!s) {
        tm_pg_op_free(o);
        return TIDEMARK_ENOMEM;
    }
    snprintf(out, TM_STREAM_MAX, "%s", nm);
    return 0;
}

int tm_pg_session_create(tm_store *st, const tm_session_rec *rec)
{
    pgstore *p = (pgstore *)st;
    pop *o = tm_pg_op_new(OP_SESS_CREATE);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->session = tm_strdup(rec->id);
    o->alt = tm_strdup(rec->protocol_version);
    o->data = tm_strdup(rec->client);
    o->ms = rec->created_ms;
    o->ms2 = rec->last_seen_ms;
    if (!o->session || (rec->protocol_version && !o->alt) || (rec->client && !o->data)) {
        tm_pg_op_free(o);
        return TIDEMARK_ENOMEM;
    }
    return tm_pg_run(p, o);
}

int tm_pg_session_touch(tm_store *st, const char *id, int64_t now_ms)
{
    pgstore *p = (pgstore *)st;
    /* This node's first touch of a session waits (it reports an unknown
     * session); later ones write at most once per touch_every_ms. */
    int first = 0;
    if (!tm_writer_touch_due(p->writer, id, now_ms, &first))
        return 0;
    pop *o = tm_pg_op_new(OP_SESS_TOUCH);
    if (!o || !(o->session = strdup(id))) {
        tm_pg_op_free(o);
        return TIDEMARK_ENOMEM;
    }
    o->ms = now_ms;
    if (!first) {
        tm_writer_push(p->writer, &o->w);
        return 0;
    }
    int rc = tm_pg_run(p, o);
    if (rc)
        tm_writer_touch_forget(p->writer, id);
    return rc;
}

int tm_pg_session_delete(tm_store *st, const char *id)
{
    pgstore *p = (pgstore *)st;
    pop *o = tm_pg_op_new(OP_SESS_DELETE);
    if (!o || !(o->session = strdup(id))) {
        tm_pg_op_free(o);
        return TIDEMARK_ENOMEM;
    }
    tm_writer_touch_forget(p->writer, id);
    return tm_pg_run(p, o);
}

int tm_pg_session_set_attr(tm_store *st, const char *id, const char *name, const char *value)
{
    pgstore *p = (pgstore *)st;
    json_t *v = value ? json_loads(value, JSON_DECODE_ANY, NULL) : NULL;
    if (value && !v)
        return TIDEMARK_EINVAL;
    json_decref(v);
    pop *o = tm_pg_op_new(OP_SET_ATTR);
    if (!o || !(o->session = strdup(id)) || !(o->name = strdup(name)) ||
        (value && !(o->data = strdup(value)))) {
        tm_pg_op_free(o);
        return TIDEMARK_ENOMEM;
    }
    return tm_pg_run(p, o);
}

int tm_pg_request_begin(tm_store *st, const tm_request_rec *rec, int wait_durable)
{
    pgstore *p = (pgstore *)st;
    pop *o = tm_pg_op_new(OP_REQ_BEGIN);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->session = tm_strdup(rec->session);
    o->name = tm_strdup(rec->key);
    o->alt = tm_strdup(rec->tool);
    o->extra = tm_strdup(rec->stream);
    o->data = tm_strdup(rec->message);
    if (!o->session || !o->name) {
        tm_pg_op_free(o);
        return TIDEMARK_ENOMEM;
    }
    if (!wait_durable) {
        push_reported(p, o);
        return 0;
    }
    return tm_pg_run(p, o);
}

