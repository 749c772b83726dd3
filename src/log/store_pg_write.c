/*
 * store_pg_write.c - the PostgreSQL store's writes: the ops callers queue,
 * and the writer hooks that commit a batch of them as one transaction in
 * libpq's pipeline mode (store_pg.c says why and what an unknown outcome
 * means). Hooks run on the writer thread, the only user of p->wc.
 */
#include "store_pg_int.h"
#include "../common/txn.h"
#include "../base/lock.h"
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
    [OP_APPEND] = "SELECT tm_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
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

/* The batch's NOTIFY (notify_arrays). Prepared once per connection with a
 * generic plan (tm_pg_writer_connect), made while the tables may still be
 * empty: each row is looked up by its key in a LATERAL subquery with
 * LIMIT 1, which the planner cannot turn into a join, so the plan is one
 * index probe a row and never a hash join over a sequential scan of a
 * whole table. */
static const char notify_sql[] =
    "SELECT pg_notify('tm_commits', CASE WHEN length(p) > 7900 THEN $1 || E'\\n*' ELSE p END) "
    "FROM (SELECT $1 || E'\\n' || coalesce(string_agg(u.se || E'\\t' || u.na || E'\\t' || "
    "s.head, E'\\n'), '') AS p FROM unnest($2::text[], $3::text[]) AS u(se, na) CROSS JOIN "
    "LATERAL (SELECT head FROM tm_streams WHERE session = u.se AND name = u.na LIMIT 1) s) q";

/* Prepared on every writer connection besides the ops': the batch's own
 * statements, then those around and in an effect (run_effect, txn_insert). */
static const struct {
    const char *name, *sql;
} batch_sql[] = {{"tb", "BEGIN"},
                 {"tc", "COMMIT"},
                 {"n", notify_sql},
                 {"fm", "SELECT tm_req_mine($1, $2, $3)"},
                 {"fs", "SAVEPOINT fx"},
                 {"fa", "SET LOCAL plan_cache_mode = auto"},
                 {"fg", "SET LOCAL plan_cache_mode = force_generic_plan"},
                 {"fb", "ROLLBACK TO SAVEPOINT fx"},
                 {"fr", "RELEASE SAVEPOINT fx"},
                 {"fi", "SELECT tm_row_insert($1, $2)"}};

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

/* When c's backend started (pg_doubt), or 0 when it cannot be said. */
static long long backend_start_us(PGconn *c)
{
    PGresult *r = tm_pg_exec(c, "SELECT (extract(epoch FROM backend_start) * 1000000)::bigint "
                                "FROM pg_stat_activity WHERE pid = pg_backend_pid()", 0, NULL, 0);
    long long v = r && PQntuples(r) == 1 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    PQclear(r);
    return v;
}

int tm_pg_writer_connect(pgstore *p)
{
    PGconn *c = tm_pg_connect(p, "write");
    if (!c) {
        atomic_store(&p->w_down, 1);
        return TIDEMARK_EIO;
    }
    int rc = 0;
    for (int k = 0; k < NKINDS && rc == 0; k++)
        rc = tm_pg_prepare(c, op_name[k], op_sql[k]);
    for (size_t k = 0; k < sizeof batch_sql / sizeof batch_sql[0] && rc == 0; k++)
        rc = tm_pg_prepare(c, batch_sql[k].name, batch_sql[k].sql);
    if (rc) {
        TM_ERROR("postgresql: the writer's statements could not be prepared: %s", PQerrorMessage(c));
        PQfinish(c);
        atomic_store(&p->w_down, 1);
        return TIDEMARK_EIO;
    }
    PQsetNoticeReceiver(c, on_notice, p);
    tm_pg_check_replicated(p, c);
    p->wc_start_us = backend_start_us(c);
    p->wc = c;
    if (atomic_exchange(&p->w_down, 0))
        TM_INFO("postgresql: writer connected again (%s:%s)", PQhost(c), PQport(c));
    return 0;
}

/* The connection is closed, never cancelled: a cancelled wait for a standby
 * would make an unreplicated commit visible. With may_commit its backend may
 * still be waiting for one, and commit when it answers: noted as a doubt
 * until it is gone (tm_pg_in_doubt). A new epoch for what follows. */
void tm_pg_writer_lost(pgstore *p, int may_commit)
{
    int pid = p->wc && may_commit ? PQbackendPID(p->wc) : 0;
    if (pid) {
        pthread_mutex_lock(&p->d_mu);
        pg_doubt *d = &p->doubts[p->ndoubts < PG_DOUBTS_MAX ? p->ndoubts++ : PG_DOUBTS_MAX - 1];
        *d = (pg_doubt){pid, p->wc_start_us, tm_now_ms()};
        pthread_mutex_unlock(&p->d_mu);
    }
    PQfinish(p->wc);
    p->wc = NULL;
    atomic_store(&p->w_down, 1);
    tm_pg_new_epoch(p);
    tm_pg_cache_forget_all(p); /* what was committed is the new primary's to say */
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

/* The bytes an append writes: its own, or its fallback after its effect failed. */
static const char *append_bytes(const pop *o, size_t *len)
{
    int failed = (o->flags & PG_FX_FAILED) != 0;
    *len = failed ? o->alt_len : o->len;
    return failed ? o->alt : o->data;
}

/* Whether o may follow prev in one run: the same stream, prev neither
 * ends the stream nor completes a record (so only a run's last op can
 * have an effect: it runs before the run is sent), and o is not refused. */
static int joins_run(const pop *prev, const pop *o)
{
    return o->kind == OP_APPEND && !(o->flags & PG_FX_REFUSED) && !prev->effect && !prev->extra &&
           !(prev->flags & TM_APPEND_FINAL) && strcmp(prev->session, o->session) == 0 &&
           strcmp(prev->name, o->name) == 0;
}

/* Mark the run of appends that o leads (its length in o->run, 0 in its
 * followers'); returns its last op. */
static pop *run_mark(pop *o)
{
    pop *last = o;
    unsigned n = 1;
    while (last->w.q.next && n < BATCH_MAX && joins_run(last, op_next(last))) {
        last = op_next(last);
        last->run = 0;
        n++;
    }
    o->run = n;
    return last;
}

/* Send the run of appends from o to last (run_mark) as one tm_append.
 * 0 or TIDEMARK_EIO. */
static int send_run(pgstore *p, pop *o, pop *last, const char *epoch)
{
    tm_buf blob, lens;
    tm_buf_init(&blob, (size_t)1 << 31);
    tm_buf_init(&lens, (size_t)1 << 24);
    int rc = tm_buf_adds(&lens, "{");
    for (pop *x = o; rc == 0; x = (pop *)x->w.q.next) {
        size_t len;
        const char *b = append_bytes(x, &len);
        memcpy(x->epoch, epoch, sizeof x->epoch);
        rc = tm_buf_add(&blob, b, len);
        if (rc == 0)
            rc = tm_buf_printf(&lens, x == o ? "%zu" : ",%zu", len);
        if (x == last)
            break;
    }
    if (rc == 0)
        rc = tm_buf_adds(&lens, "}");
    char a[3][24];
    snprintf(a[0], sizeof a[0], "%" PRId64, last->ms);
    snprintf(a[1], sizeof a[1], "%" PRIu64, p->opt.retain_events);
    int64_t cut = tm_retain_cutoff_ms(&p->opt, last->ms);
    snprintf(a[2], sizeof a[2], "%" PRId64, cut);
    const char *v[11] = {o->session, o->name, epoch, blob.data ? blob.data : "", lens.data,
                         (last->flags & TM_APPEND_FINAL) ? "t" : "f", last->extra, a[0], a[1],
                         cut == INT64_MIN ? NULL : a[2], p->node};
    int len[11] = {0, 0, 0, (int)blob.len, 0, 0, last->extra ? (int)strlen(last->extra) : 0};
    int fmt[11] = {0, 0, 0, 1, 0, 0, 1};
    if (rc == 0 && blob.len > INT32_MAX)
        rc = TIDEMARK_ERANGE;
    if (rc == 0 && !PQsendQueryPrepared(p->wc, op_name[OP_APPEND], 11, v, len, fmt, 0))
        rc = TIDEMARK_EIO;
    tm_buf_free(&blob);
    tm_buf_free(&lens);
    return rc ? TIDEMARK_EIO : 0;
}

static int send_op(pgstore *p, pop *o, const char *epoch)
{
    (void)epoch;
    char a[4][24];
    const char *v[9] = {o->session, o->name};
    int len[9] = {0}, fmt[9] = {0}, n = 2;
    switch (o->kind) {
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
    case OP_APPEND: /* v: the run's first seq */
        st = v > 0     ? 0
             : v == -3 ? TIDEMARK_EBUSY
             : v == -2 ? TIDEMARK_ECLOSED
                       : TIDEMARK_ENOTFOUND;
        for (unsigned i = 0, n = o->run; i < n; i++, o = op_next(o)) {
            o->w.seq = v > 0 ? (uint64_t)v + i : 0;
            o->w.q.status = st;
        }
        return;
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

/* ---- statements of effects ---------------------------------------------------------------- */

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

/* ---- the batch in the pipeline ---------------------------------------------------------- */

/* One query's result that must be ok, cleared. 0, or nonzero when bad. */
static int expect_ok(pgstore *p, int *lost)
{
    PGresult *r = query_result(p, lost);
    int bad = !r || (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK);
    if (bad)
        tm_pg_note_error(p, r);
    PQclear(r);
    return bad;
}

/* Read the results o's effect owes so far (its record's check, then its
 * statements). A check that raised names o as refused (p->refused): the
 * first error of a pipeline is the only one, the rest are skipped. */
static int read_pre(pgstore *p, pop *o, int *lost)
{
    int bad = 0;
    for (; o->pre && !*lost; o->pre--) {
        if (!expect_ok(p, lost))
            continue;
        bad = 1;
        if (!p->refused && strncmp(p->last_state, "TM00", 4) == 0)
            p->refused = o;
    }
    return bad;
}

/* Read what op o owes: its effect's statements, then its own result. A
 * run's leader reads what its followers' effect statements owe (sent
 * before the run) and then the run's result; a follower owes nothing. */
static int read_op(pgstore *p, pop *o, int *lost)
{
    int bad = read_pre(p, o, lost);
    if (o->kind == OP_APPEND && o->run == 0)
        return bad;
    pop *x = o;
    for (unsigned i = 1; i < o->run; i++) /* run: appends only */
        bad |= read_pre(p, x = op_next(x), lost);
    PGresult *r = *lost ? NULL : query_result(p, lost);
    if (r && (PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK))
        take_result(o, r);
    else
        bad = 1;
    if (bad)
        tm_pg_note_error(p, r);
    PQclear(r);
    return bad;
}

/* Sync the pipeline and read what it owes, in order: BEGIN (if not read
 * yet), the ops from p->pipe_from up to `upto` (exclusive; with pre_of,
 * also the effect statements so far of the ops from upto to pre_of: the
 * running effect's, whose op may end a run upto leads), NOTIFY (notify),
 * COMMIT (commit). Returns 0, or TIDEMARK_EIO when anything failed (the
 * transaction is then lost). */
static int pipe_sync(pgstore *p, pop *upto, pop *pre_of, int notify, int commit)
{
    int lost = !PQpipelineSync(p->wc), bad = 0;
    PGresult *r;
    if (!lost && p->pipe_begin)
        bad |= expect_ok(p, &lost);
    p->pipe_begin = 0;
    for (pop *o = p->pipe_from; !lost && o != upto; o = op_next(o))
        bad |= read_op(p, o, &lost);
    p->pipe_from = upto;
    for (pop *x = pre_of ? upto : NULL; x; x = x == pre_of ? NULL : op_next(x))
        bad |= read_pre(p, x, &lost);
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

/* A statement of the running effect, prepared as name (batch_sql), sent
 * without waiting (its result is read with the op's); len and fmt as
 * libpq's (NULL: all text). */
static int fx_send_f(pgstore *p, const char *name, int n, const char *const *v, const int *len,
                     const int *fmt)
{
    if (p->fx_broken) /* after a failed sync nothing more goes in the pipeline */
        return TIDEMARK_EIO;
    if (!PQsendQueryPrepared(p->wc, name, n, v, len, fmt, 0)) {
        p->fx_broken = 1;
        return TIDEMARK_EIO;
    }
    p->fx_op->pre++;
    return 0;
}

static int fx_send(pgstore *p, const char *name, int n, const char *const *v)
{
    return fx_send_f(p, name, n, v, NULL, NULL);
}

/* ---- atomic effects ------------------------------------------------------------------- */

/* The check that o's record is started and this node's (tm_req_mine),
 * sent before its effect: if not, PostgreSQL aborts the batch there and
 * nothing after it runs (read_pre names o). The record's row stays locked
 * until the commit, so a node whose call another took over never writes
 * its effect. In the transaction's own scope, not the effect's savepoint:
 * a row locked by a subtransaction and updated by its parent (the
 * response's tm_append) would take a MultiXact. */
static int mine_send(pgstore *p, pop *o)
{
    const char *v[3] = {o->session, o->extra, p->node};
    int len[3] = {0, (int)strlen(o->extra), 0}, fmt[3] = {0, 1, 0};
    return fx_send_f(p, "fm", 3, v, len, fmt); /* p->fx_op is o */
}

/* tidemark_txn_insert: pipelined, no wait. A row that fails to insert fails
 * the whole batch (an SQL error aborts the transaction), never silently. */
static int txn_insert(struct tidemark_txn *txn, const char *table, const char *doc)
{
    pgstore *p = txn->impl;
    const char *v[2] = {table, doc};
    return fx_send(p, "fi", 2, v);
}

/* tidemark_txn_exec: the effect needs its answer, so what is in the
 * pipeline is read first, then the statement runs on its own. */
static int txn_exec(struct tidemark_txn *txn, const char *sql, const char *const *args, size_t nargs)
{
    pgstore *p = txn->impl;
    if (p->fx_broken)
        return TIDEMARK_EIO;
    /* the application's statements get PostgreSQL's usual planning, not
     * the writer's generic plans (tm_pg_connect), until the effect ends;
     * a rollback to the savepoint undoes the SET LOCAL too */
    if (!p->fx_planned && fx_send(p, "fa", 0, NULL) != 0)
        return TIDEMARK_EIO;
    p->fx_planned = 1;
    if (pipe_sync(p, p->fx_lead, p->fx_op, 0, 0) != 0 || !PQexitPipelineMode(p->wc)) {
        p->fx_broken = 1;
        return TIDEMARK_EIO;
    }
    char *q = tm_pg_placeholders(sql);
    PGresult *r = q ? PQexecParams(p->wc, q, (int)nargs, NULL, args, NULL, NULL, 0) : NULL;
    ExecStatusType s = PQresultStatus(r);
    int rc = !q ? TIDEMARK_ENOMEM : s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK ? 0 : pg_err(r);
    if (rc)
        TM_DEBUG("postgresql: effect statement: %s", PQresultErrorMessage(r));
    PQclear(r);
    free(q);
    if (!PQenterPipelineMode(p->wc))
        p->fx_broken = 1;
    return p->fx_broken ? TIDEMARK_EIO : rc;
}

static const struct tm_txn_ops pg_txn_ops = {.name = "postgresql", .insert = txn_insert,
                                             .exec = txn_exec};

/* Run o's effect in a savepoint of the open transaction, before the run
 * lead leads and o ends is sent: its statements commit with the result,
 * or leave no trace and the fallback bytes are written instead.
 * TIDEMARK_EIO: the batch is lost. */
static int run_effect(pgstore *p, pop *lead, pop *o)
{
    p->fx_lead = lead;
    p->fx_op = o;
    p->fx_broken = 0;
    p->fx_planned = 0;
    if (o->extra && mine_send(p, o) != 0)
        return TIDEMARK_EIO;
    if (fx_send(p, "fs", 0, NULL) != 0)
        return TIDEMARK_EIO;
    struct tidemark_txn txn = {.ops = &pg_txn_ops, .impl = p};
    int rc = o->effect(o->effect_ud, &txn);
    if (rc && !p->fx_broken) {
        o->flags |= PG_FX_FAILED;
        fx_send(p, "fb", 0, NULL);
    } else if (!p->fx_broken && p->fx_planned) {
        fx_send(p, "fg", 0, NULL);
    }
    if (!p->fx_broken)
        fx_send(p, "fr", 0, NULL);
    p->fx_op = NULL;
    return p->fx_broken ? TIDEMARK_EIO : 0;
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
                     PQsendQueryPrepared(p->wc, "tb", 0, NULL, NULL, NULL, 0)))
        rc = TIDEMARK_EIO;
    p->pipe_begin = 1;
    p->pipe_from = batch;
    p->refused = NULL;
    for (pop *o = batch, *next; o && rc == 0; o = next) {
        next = op_next(o);
        if (o->flags & PG_FX_REFUSED) { /* neither its effect nor its event is sent */
            o->run = 0;
            o->w.q.status = (o->flags & PG_FX_NORECORD) ? TIDEMARK_EIO : TIDEMARK_EBUSY;
            continue;
        }
        if (o->kind != OP_APPEND) {
            rc = send_op(p, o, epoch);
            continue;
        }
        pop *last = run_mark(o);
        next = op_next(last);
        if (last->effect)
            rc = run_effect(p, o, last);
        if (rc == 0)
            rc = send_run(p, o, last, epoch);
    }
    const char *nv[3] = {p->node, sessions, names};
    if (rc == 0 && note == 0 && !PQsendQueryPrepared(p->wc, "n", 3, nv, NULL, NULL, 0))
        rc = TIDEMARK_EIO;
    if (rc == 0 && !PQsendQueryPrepared(p->wc, "tc", 0, NULL, NULL, NULL, 0))
        rc = TIDEMARK_EIO;
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "pg_before_commit");
    if (rc == 0)
        rc = pipe_sync(p, NULL, NULL, note == 0, 1);
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

/* Back to what the ops were before a try that PostgreSQL rolled back; an
 * effect found refused stays refused (a record never becomes this node's
 * started one again). */
static void reset_ops(pop *batch)
{
    for (pop *o = batch; o; o = op_next(o)) {
        o->w.q.status = 0;
        o->w.seq = 0;
        o->run = o->pre = 0;
        o->flags &= ~PG_FX_FAILED;
    }
}

/* After a batch PostgreSQL aborted at an effect's record check: mark that
 * effect refused and end the transaction, keeping the connection when the
 * ROLLBACK goes through. 1 when the batch is to be tried again without it,
 * 0 when no check failed. */
static int refusal_taken(pgstore *p)
{
    pop *o = p->refused;
    if (!o)
        return 0;
    o->flags |= PG_FX_REFUSED | (strcmp(p->last_state, "TM001") == 0 ? PG_FX_NORECORD : 0);
    TM_DEBUG("postgresql: record %s: %s; the batch is tried again without its effect", o->extra,
             p->last_error);
    PGresult *r = PQexitPipelineMode(p->wc) ? PQexec(p->wc, "ROLLBACK") : NULL;
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        tm_pg_writer_lost(p, 0); /* PostgreSQL's error: rolled back */
    PQclear(r);
    return 1;
}

/* Connect (until the batch's deadline). 0, or TIDEMARK_EIO. */
static int writer_ready(pgstore *p, size_t n)
{
    while (!p->wc && tm_pg_writer_connect(p) != 0) {
        if (tm_now_ms() >= p->deadline) {
            TM_ERROR("postgresql: no writable primary for %lld ms: failing %zu queued write(s)",
                     (long long)p->timeout_ms, n);
            return TIDEMARK_EIO;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Wait, until the batch's deadline, for the backends an earlier lost
 * connection left with a COMMIT in doubt (tm_pg_doubts_wait): a batch sent
 * beside them could take its seqs before theirs (they hold the streams'
 * rows until a standby answers, then race for them). A batch refused here
 * is sent nowhere: not committed, definitely. */
static int doubts_cleared(pgstore *p, size_t n)
{
    int64_t t0 = tm_now_ms();
    int rc = tm_pg_doubts_wait(p);
    if (rc == TIDEMARK_EBUSY) {
        TM_WARN("postgresql: a COMMIT of this node was still in doubt after %lld ms (waiting for "
                "a standby): failing %zu queued write(s), none sent",
                (long long)(tm_now_ms() - t0), n);
    } else if (rc && PQstatus(p->wc) == CONNECTION_OK) {
        TM_ERROR("postgresql: could not ask about a COMMIT in doubt (%s): failing %zu queued "
                 "write(s), none sent", PQerrorMessage(p->wc), n);
    } else if (rc) {
        tm_pg_writer_lost(p, 0); /* nothing sent on it */
    }
    return rc;
}

/* commit hook. Always settles every op (the writer's failure path, which
 * fails the queue behind a batch, is for stores that hand out seqs before
 * they commit). A batch PostgreSQL rolled back for a deadlock or a
 * serialization failure (another node's writer held what it needed) is
 * known not to have committed: it is tried again, effects included. */
static int w_commit(void *be, tm_wop *wbatch, size_t n)
{
    pgstore *p = be;
    pop *batch = (pop *)wbatch;
    TM_TEST_DELAY("TIDEMARK_COMMIT_DELAY_MS"); /* a slow store: nothing of the batch sent yet */
    p->deadline = tm_now_ms() + p->timeout_ms;
    for (int attempt = 0;;) {
        if (writer_ready(p, n) != 0)
            return fail_all(batch, TIDEMARK_EIO);
        if (atomic_load(&p->not_replicated))
            return fail_all(batch, TIDEMARK_EIO);
        if (doubts_cleared(p, n) != 0)
            return fail_all(batch, TIDEMARK_EIO);
        p->last_state[0] = p->last_error[0] = '\0';
        if (run_batch(p, batch) == 0)
            break;
        if (refusal_taken(p)) { /* one effect fewer each time: ends */
            reset_ops(batch);
            continue;
        }
        int retry = attempt++ < 5 && (strcmp(p->last_state, "40P01") == 0 ||
                                      strcmp(p->last_state, "40001") == 0);
        TM_WARN("postgresql: a batch of %zu write(s) %s (%s%s%s)%s", n,
                p->last_state[0] ? "failed" : "failed or its commit was not confirmed",
                p->last_state, p->last_state[0] ? ": " : "",
                p->last_error[0] ? p->last_error : PQerrorMessage(p->wc),
                retry ? ": rolled back, tried again" : ": treated as not acknowledged");
        tm_pg_writer_lost(p, !p->last_state[0]); /* PostgreSQL's error: rolled back */
        if (!retry) {
            fail_all(batch, TIDEMARK_EIO);
            break;
        }
        reset_ops(batch);
    }
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "commit_before_emit");
    return 0;
}

/* ---- settling: the hints and the wake-ups --------------------------------------------- */

/* Fold one settled op into the hints. Caller holds c_mu. */
static void settle_hint(pgstore *p, pop *o)
{
    TM_ASSERT_HELD(&p->c_mu);
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
    /* "g" takes every node's notifications: only POST streams are cached */
    if (s && st == 0 && o->kind == OP_APPEND && strcmp(o->name, "g") != 0) {
        size_t len;
        const char *b = append_bytes(o, &len);
        tm_pg_cache_put(p, s, o->w.seq, o->epoch, b, len);
    }
    if (s && st == 0 && o->w.seq > s->known)
        s->known = o->w.seq;
    if (s && st == 0 && (o->kind == OP_CLOSE || (o->flags & TM_APPEND_FINAL))) {
        s->closing = 1;
        s->closed = 1;
    }
    if (s && st == 0 && o->kind == OP_OPEN)
        s->closed = 0; /* a closed stream opened again */
    if (s && st == TIDEMARK_ECLOSED)
        s->closing = 1;
    /* unknown outcome, or refused: the database answers for it from now on */
    if (s && st != 0 && st != TIDEMARK_ECLOSED && !s->pending && !s->opening) {
        tm_map_del(p->streams, k);
        tm_pg_hint_free(p, s);
    } else if (s && st != 0) {
        tm_pg_cache_drop(p, s);
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

/* maintain hook: a writer that lost its connection connects again, so
 * the store says it takes writes (tm_store_writable) without waiting for a
 * write: the recoverer settles unsettled calls only then, and their
 * retries, answered from that state, write nothing. Then age retention of
 * streams nobody appends to, and old bus rows, on a pooled connection: its
 * statement timeout bounds the commits, so a primary without its standby
 * never holds the writer here. */
static void w_maintain(void *be)
{
    pgstore *p = be;
    if (!p->wc && tm_pg_writer_connect(p) != 0)
        return;
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
    TM_ASSERT_HELD(&p->c_mu);
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
    /* The number is taken (a new block committed), the stream not yet. */
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "pg_stream_reserved");
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

/* A begin op for rec (NULL when out of memory). */
static pop *begin_op(const tm_request_rec *rec)
{
    pop *o = tm_pg_op_new(OP_REQ_BEGIN);
    if (!o)
        return NULL;
    o->session = tm_strdup(rec->session);
    o->name = tm_strdup(rec->key);
    o->alt = tm_strdup(rec->tool);
    o->extra = tm_strdup(rec->stream);
    o->data = tm_strdup(rec->message);
    if (!o->session || !o->name) {
        tm_pg_op_free(o);
        return NULL;
    }
    return o;
}

int tm_pg_request_begin(tm_store *st, const tm_request_rec *rec, int wait_durable)
{
    pgstore *p = (pgstore *)st;
    pop *o = begin_op(rec);
    if (!o)
        return TIDEMARK_ENOMEM;
    if (!wait_durable) {
        push_reported(p, o);
        return 0;
    }
    return tm_pg_run(p, o);
}

/* Queued as a waited op, but not waited for here: a hold this thread has
 * keeps it (and what the thread queues next) back until released. An
 * effect or a response that completes the record, queued after it in the
 * same batch, has PostgreSQL check whose the record is after the begin
 * ran (mine_send, tm_append's p_req check): if the key was another
 * node's first, they write nothing. */
int tm_pg_request_begin_later(tm_store *st, const tm_request_rec *rec, void **ticket)
{
    pgstore *p = (pgstore *)st;
    pop *o = begin_op(rec);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->w.q.sync = 1;
    tm_writer_push(p->writer, &o->w);
    *ticket = o;
    return 0;
}

int tm_pg_request_begin_await(tm_store *st, void *ticket)
{
    pgstore *p = (pgstore *)st;
    pop *o = ticket;
    int rc = tm_writer_await(p->writer, &o->w);
    tm_pg_op_free(o);
    return rc;
}
