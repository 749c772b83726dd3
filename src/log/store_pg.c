/*
 * store_pg.c - the event log on PostgreSQL, shared by many nodes, with the
 * store node itself replicated (synchronous standbys, a failover manager).
 * URI: any libpq connection URI, "postgresql://" or "postgres://"; every
 * libpq parameter and the PG* environment variables apply. Several hosts
 * with target_session_attrs=read-write let a node find the new primary
 * after a failover by itself.
 *
 * PostgreSQL is the only authority (schema: store_pg_schema.h). A stream's
 * seq is taken by the UPDATE that locks the stream's row in the transaction
 * that writes the event (tm_append), so seqs are dense and a node learns one
 * only from a COMMIT that returned: commit, then emit.
 *
 * Threads. The group-commit writer (writer.h) owns the write connection:
 * every batch is one transaction sent in libpq's pipeline mode (BEGIN, one
 * statement per op, one NOTIFY naming the batch's streams, COMMIT, then one
 * Sync: a round trip per batch). An atomic effect runs its own statements
 * inside a savepoint of that transaction, out of pipeline mode. Readers use
 * a small pool of connections. One thread LISTENs for other nodes' commits
 * and bus messages and renews this node's lease.
 *
 * Commit outcome. A batch whose COMMIT did not answer OK within the store
 * timeout, whose connection dropped, or whose COMMIT drew PostgreSQL's
 * "already committed locally, but might not have been replicated" warning
 * has an unknown outcome: every op of it fails with TIDEMARK_EIO, nothing
 * is emitted, and the connection is closed, never cancelled (a cancelled
 * wait for a standby would make the commit visible unreplicated). The
 * request record decides on a retry.
 *
 * Epochs. A new random epoch at every open and at every reconnect of the
 * writer (a failover among them): an event written under a new primary can
 * never be taken for one an old primary lost. Every event stores its
 * writer's epoch.
 *
 * Local state is a hint, never the truth: per stream this node's appends
 * queued and the highest seq it saw committed (bounds' "assigned"), whether
 * a close is queued, and per session a block of reserved stream numbers.
 *
 * Lock order: c_mu before the writer queue's lock; p_mu and e_mu are leaves.
 * Callbacks and the commit listener run with no store lock held.
 */
#include "store.h"
#include "store_pg_int.h"
#include "store_pg_schema.h"
#include "../common/txn.h"
#include "writer.h"
#include "../base/buf.h"
#include "../base/clock.h"
#include "../base/crash.h"
#include "../base/log.h"
#include "../base/map.h"
#include "../base/random.h"
#include "../base/str.h"
#include "tidemark/tidemark.h"
#include <libpq-fe.h>
#include <inttypes.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- small helpers ---------------------------------------------------------------- */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void tm_pg_epoch(pgstore *p, char out[TM_EPOCH_LEN + 1])
{
    pthread_mutex_lock(&p->e_mu);
    memcpy(out, p->epoch, TM_EPOCH_LEN + 1);
    pthread_mutex_unlock(&p->e_mu);
}

void tm_pg_new_epoch(pgstore *p)
{
    char e[TM_EPOCH_LEN + 1];
    if (tm_random_hex(e, TM_EPOCH_LEN / 2) != 0)
        return;
    pthread_mutex_lock(&p->e_mu);
    memcpy(p->epoch, e, sizeof e);
    pthread_mutex_unlock(&p->e_mu);
}

int64_t tm_pg_i64(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

char *tm_pg_str(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : tm_strdup(PQgetvalue(r, row, col));
}

/* A binary bigint column. */
int64_t tm_pg_bin_i64(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != 8)
        return 0;
    const unsigned char *b = (const unsigned char *)PQgetvalue(r, row, col);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return (int64_t)v;
}

/* A text[] literal {"a","b"} of n strings, quotes and backslashes escaped.
 * A new string (free), NULL when out of memory. */
char *tm_pg_text_array(const char *const *v, size_t n)
{
    tm_buf b;
    tm_buf_init(&b, (size_t)64 << 20);
    int rc = tm_buf_adds(&b, "{");
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = tm_buf_adds(&b, i ? ",\"" : "\"");
        for (const char *c = v[i]; *c && rc == 0; c++)
            rc = *c == '"' || *c == '\\' ? tm_buf_printf(&b, "\\%c", *c) : tm_buf_add(&b, c, 1);
        if (rc == 0)
            rc = tm_buf_adds(&b, "\"");
    }
    if (rc == 0)
        rc = tm_buf_adds(&b, "}");
    if (rc) {
        tm_buf_free(&b);
        return NULL;
    }
    return tm_buf_steal(&b, NULL);
}

/* ---- connections -------------------------------------------------------------------- */

void tm_pg_note_error(pgstore *p, const PGresult *r)
{
    const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (!st || p->last_state[0])
        return;
    snprintf(p->last_state, sizeof p->last_state, "%s", st);
    const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    snprintf(p->last_error, sizeof p->last_error, "%s", m ? m : "");
}

/* Notices (a "relation already exists, skipping") go to our log, not stderr. */
static void quiet_notice(void *ud, const char *msg)
{
    (void)ud;
    TM_DEBUG("postgresql: %.*s", (int)strcspn(msg, "\n"), msg);
}

/* The listener's only writes are its lease renewals: liveness, not data.
 * They commit locally. Waiting for a standby (none after a failover until
 * one follows the new primary) each became visible only when its wait was
 * cancelled at the store timeout, 2 s late, so a live node's lease looked
 * lapsed between two of them and another node took its running calls
 * over. A renewal lost with a primary costs nothing: a node judges others
 * only after two leases in touch with the new one (may_judge). */
static const char *sync_commit_level(const pgstore *p, const char *role)
{
    if (strcmp(role, "listen") == 0)
        return "local";
    return p->opt.durability == TM_DURABILITY_PROCESS ? "local" : "on";
}

PGconn *tm_pg_connect(pgstore *p, const char *role)
{
    char app[64];
    snprintf(app, sizeof app, PG_APP_PREFIX "%s-%s", role, p->node);
    /* The URI comes after these defaults: what it says wins over them,
     * but for tcp_user_timeout, after it. A peer that stops answering (a
     * partition) breaks the connection within the store timeout instead
     * of TCP's minutes, and what the kernel had sent is retransmitted no
     * longer than that (doubt_gone counts on it). */
    char tcp[24];
    snprintf(tcp, sizeof tcp, "%lld", (long long)p->timeout_ms);
    const char *keys[] = {"connect_timeout", "application_name", "keepalives_idle", "keepalives_interval",
                          "keepalives_count", "dbname", "tcp_user_timeout", NULL};
    const char *vals[] = {"3", app, "5", "1", "3", p->uri, tcp, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (!c || PQstatus(c) != CONNECTION_OK) {
        TM_DEBUG("postgresql: connect (%s): %s", role, c ? PQerrorMessage(c) : "out of memory");
        PQfinish(c);
        return NULL;
    }
    PQsetNoticeProcessor(c, quiet_notice, NULL);
    /* The writer bounds its batches itself (it closes, never cancels, a
     * commit that waits too long); every other connection's statements,
     * small commits included, end with the store timeout. */
    char set[512];
    int writer = strcmp(role, "write") == 0;
    /* The name is set again here: a URI's application_name must not hide
     * a writer from the claims of other nodes (tm_pg_request_claim). The
     * writer plans its prepared statements once (index lookups whatever
     * their parameters: planning each bind again cost more than running
     * them); an effect's own SQL is planned as usual (run_effect). Its
     * backend, once left by a lost connection, ends within about the store
     * timeout unless a COMMIT waits for a standby: a lock, an open
     * transaction or a client gone silent does not keep it (and its doubt,
     * tm_pg_doubts_wait) alive. */
    int n = snprintf(set, sizeof set,
                     "SET application_name = '%s'; SET synchronous_commit = %s; "
                     "SET statement_timeout = %lld",
                     app, sync_commit_level(p, role), writer ? 0LL : (long long)p->timeout_ms);
    if (n < 0 || (size_t)n >= sizeof set) {
        PQfinish(c);
        return NULL;
    }
    if (writer) {
        long long t = (long long)p->timeout_ms;
        snprintf(set + n, sizeof set - (size_t)n,
                 "; SET plan_cache_mode = force_generic_plan"
                 "; SET idle_in_transaction_session_timeout = %lld; SET lock_timeout = %lld"
                 "; SET tcp_user_timeout = %lld; SET tcp_keepalives_idle = %lld"
                 "; SET tcp_keepalives_interval = 1; SET tcp_keepalives_count = 3",
                 t, t, t, t / 1000 > 1 ? t / 1000 : 1);
    }
    PGresult *r = PQexec(c, set);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        TM_WARN("postgresql: setting up a connection (%s) failed: %s", role, PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* Run one statement with text parameters (NULL: SQL NULL). rfmt: 1 for
 * binary results. Returns the result (PQclear it), or NULL on failure (the
 * connection's state is then to be checked with PQstatus). */
PGresult *tm_pg_exec(PGconn *c, const char *sql, int n, const char *const *vals, int rfmt)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, vals, NULL, NULL, rfmt);
    ExecStatusType s = PQresultStatus(r);
    if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK)
        return r;
    TM_DEBUG("postgresql: %.60s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    return NULL;
}

/* The name a statement of tm_pg_hot_sql is prepared under: its text's hash. */
static void hot_name(const char *sql, char name[24])
{
    snprintf(name, 24, "q%016llx", (unsigned long long)tm_str_hash(sql));
}

int tm_pg_prepare(PGconn *c, const char *name, const char *sql)
{
    PGresult *r = PQprepare(c, name, sql, 0, NULL);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        TM_DEBUG("postgresql: prepare %s: %s", name, PQresultErrorMessage(r));
    PQclear(r);
    return ok ? 0 : TIDEMARK_EIO;
}

/* Prepare tm_pg_hot_sql on a new pooled connection. 0, or TIDEMARK_EIO. */
static int prepare_hot(PGconn *c)
{
    int rc = 0;
    for (const char *const *q = tm_pg_hot_sql; *q && rc == 0; q++) {
        char name[24];
        hot_name(*q, name);
        rc = tm_pg_prepare(c, name, *q);
    }
    return rc;
}

/* An idle connection, a new one while fewer than POOL_MAX exist, or the
 * next one given back: a burst of readers never opens connections it
 * closes right after (each a TCP and authentication round). */
PGconn *tm_pg_pool_get(pgstore *p)
{
    pthread_mutex_lock(&p->p_mu);
    while (!p->npool && p->nconn >= POOL_MAX)
        pthread_cond_wait(&p->p_cv, &p->p_mu);
    PGconn *c = p->npool ? p->pool[--p->npool] : NULL;
    if (!c)
        p->nconn++; /* this caller's, made below */
    pthread_mutex_unlock(&p->p_mu);
    if (c)
        return c;
    c = tm_pg_connect(p, "read");
    if (c && prepare_hot(c) != 0) {
        PQfinish(c);
        c = NULL;
    }
    if (!c) {
        pthread_mutex_lock(&p->p_mu);
        p->nconn--;
        pthread_cond_signal(&p->p_cv);
        pthread_mutex_unlock(&p->p_mu);
    }
    return c;
}

/* Close c, a connection of the pool that must not be used again. */
void tm_pg_pool_discard(pgstore *p, PGconn *c)
{
    pthread_mutex_lock(&p->p_mu);
    p->nconn--;
    pthread_cond_signal(&p->p_cv);
    pthread_mutex_unlock(&p->p_mu);
    PQfinish(c);
}

/* Give c back; a broken connection is closed instead. */
void tm_pg_pool_put(pgstore *p, PGconn *c)
{
    if (!c)
        return;
    int broken = PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_IDLE;
    pthread_mutex_lock(&p->p_mu);
    if (broken)
        p->nconn--;
    else
        p->pool[p->npool++] = c; /* room: nconn <= POOL_MAX */
    pthread_cond_signal(&p->p_cv);
    pthread_mutex_unlock(&p->p_mu);
    if (broken)
        PQfinish(c);
}

/* A connection to a server that takes no writes (SQLSTATE 25006: a
 * standby, or a primary being promoted or demoted when a proxy sent the
 * connection there) is as good as broken for a store: closed, not kept. */
static int read_only_server(const PGresult *r)
{
    const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    return st && strcmp(st, "25006") == 0;
}

/* One statement on a pooled connection, tried again once on a fresh
 * connection when the first one was broken (the primary moved). OUT *res.
 * Returns 0, TIDEMARK_EIO (unreachable) or TIDEMARK_EINVAL (refused). */
static PGresult *exec_prepared(PGconn *c, const char *sql, int n, const char *const *vals,
                               const int *lens, const int *fmts, int rfmt)
{
    char name[24];
    hot_name(sql, name);
    return PQexecPrepared(c, name, n, vals, lens, fmts, rfmt);
}

/* Whether sql is one of tm_pg_hot_sql (the same pointer): prepared on
 * every pooled connection, run by name. */
static int hot(const char *sql)
{
    for (const char *const *q = tm_pg_hot_sql; *q; q++)
        if (*q == sql)
            return 1;
    return 0;
}

static int query(pgstore *p, const char *sql, int n, const char *const *vals, const int *lens,
                 const int *fmts, int rfmt, PGresult **res)
{
    int prepare = hot(sql);
    for (int attempt = 0; attempt < 2; attempt++) {
        PGconn *c = tm_pg_pool_get(p);
        if (!c)
            continue;
        *res = prepare ? exec_prepared(c, sql, n, vals, lens, fmts, rfmt)
                       : PQexecParams(c, sql, n, NULL, vals, lens, fmts, rfmt);
        ExecStatusType s = PQresultStatus(*res);
        int stale = 0;
        if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
            TM_DEBUG("postgresql: %.60s: %s", sql, PQresultErrorMessage(*res));
            stale = read_only_server(*res);
            PQclear(*res);
            *res = NULL;
        }
        if (stale) {
            tm_pg_pool_discard(p, c);
            continue;
        }
        int broken = !*res && PQstatus(c) != CONNECTION_OK;
        tm_pg_pool_put(p, c);
        if (*res)
            return 0;
        if (!broken)
            return TIDEMARK_EINVAL;
    }
    *res = NULL;
    return TIDEMARK_EIO;
}

int tm_pg_query_f(pgstore *p, const char *sql, int n, const char *const *vals, const int *lens,
                  const int *fmts, int rfmt, PGresult **res)
{
    return query(p, sql, n, vals, lens, fmts, rfmt, res);
}

int tm_pg_query(pgstore *p, const char *sql, int n, const char *const *vals, int rfmt, PGresult **res)
{
    return query(p, sql, n, vals, NULL, NULL, rfmt, res);
}

static void pool_drain(pgstore *p)
{
    pthread_mutex_lock(&p->p_mu);
    while (p->npool) {
        PQfinish(p->pool[--p->npool]);
        p->nconn--;
    }
    pthread_mutex_unlock(&p->p_mu);
}

/* ---- schema ------------------------------------------------------------------------- */

static int migrate_locked(PGconn *c, int *from)
{
    PGresult *r = tm_pg_exec(c, "SELECT v FROM tm_meta WHERE k = 'schema'", 0, NULL, 0);
    if (!r)
        return TIDEMARK_EIO;
    int have = PQntuples(r) ? atoi(PQgetvalue(r, 0, 0)) : 0;
    PQclear(r);
    *from = have;
    if (have > TM_PG_SCHEMA_VERSION) {
        TM_ERROR("postgresql: the database's schema is version %d, newer than this build's %d",
                 have, TM_PG_SCHEMA_VERSION);
        return TIDEMARK_ERANGE;
    }
    for (int v = have + 1; v <= TM_PG_SCHEMA_VERSION; v++) {
        r = PQexec(c, tm_pg_migrations[v - 1]);
        int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        if (!ok)
            TM_ERROR("postgresql: schema migration to %d failed: %s", v, PQresultErrorMessage(r));
        PQclear(r);
        if (!ok)
            return TIDEMARK_EIO;
    }
    char ver[16];
    snprintf(ver, sizeof ver, "%d", TM_PG_SCHEMA_VERSION);
    const char *a[1] = {ver};
    r = tm_pg_exec(c, "INSERT INTO tm_meta(k, v) VALUES ('schema', $1) "
                      "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", 1, a, 0);
    PQclear(r);
    return r ? 0 : TIDEMARK_EIO;
}

/* Create or migrate the schema in one transaction under an advisory lock:
 * nodes starting at once wait for each other; the first does the work. */
static int schema_ensure(pgstore *p)
{
    PGconn *c = tm_pg_connect(p, "schema");
    if (!c)
        return TIDEMARK_EIO;
    PGresult *r = PQexec(c, "BEGIN; SELECT pg_advisory_xact_lock(" TM_PG_LOCK_KEY ");"
                            "CREATE TABLE IF NOT EXISTS tm_meta(k text PRIMARY KEY, v text)");
    int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : TIDEMARK_EIO;
    if (rc)
        TM_ERROR("postgresql: cannot prepare the schema: %s", PQresultErrorMessage(r));
    PQclear(r);
    int from = 0;
    if (rc == 0)
        rc = migrate_locked(c, &from);
    r = PQexec(c, rc == 0 ? "COMMIT" : "ROLLBACK");
    if (rc == 0 && PQresultStatus(r) != PGRES_COMMAND_OK)
        rc = TIDEMARK_EIO;
    PQclear(r);
    PQfinish(c);
    if (rc == 0 && from < TM_PG_SCHEMA_VERSION)
        TM_INFO("postgresql: schema %d -> %d", from, TM_PG_SCHEMA_VERSION);
    return rc;
}

/* ---- replication check -------------------------------------------------------------- */

/* With durability replicated: whether the primary c is on has a
 * synchronous standby configured (synchronous_commit is ours: on). */
void tm_pg_check_replicated(pgstore *p, PGconn *c)
{
    if (p->opt.durability != TM_DURABILITY_REPLICATED)
        return;
    PGresult *r = tm_pg_exec(c, "SELECT current_setting('synchronous_standby_names')", 0, NULL, 0);
    if (!r)
        return;
    int none = PQntuples(r) != 1 || PQgetvalue(r, 0, 0)[0] == '\0';
    PQclear(r);
    int was = atomic_exchange(&p->not_replicated, none);
    if (none && !was)
        TM_ERROR("postgresql: durability replicated, but the primary has no "
                 "synchronous_standby_names: writes refused (store_not_replicated)");
    else if (!none && was)
        TM_INFO("postgresql: the primary has synchronous standbys again: writes accepted");
}

int tm_store_pg_not_replicated(tm_store *st)
{
    return st->ops == &tm_pg_ops && atomic_load(&((pgstore *)st)->not_replicated);
}

/* ---- the listener: other nodes' commits and bus messages, and the lease -------------- */

typedef struct wake_set {
    char **keys;
    size_t n;
} wake_set;

static void collect_wake(const char *k, void *val, void *ud)
{
    (void)val;
    wake_set *w = ud;
    w->keys[w->n] = strdup(k);
    w->n += w->keys[w->n] != NULL;
}

/* Wake this node's readers of every stream it knows: after the listener
 * reconnected, a notification may have been lost; they catch up by cursor. */
static void wake_all(pgstore *p)
{
    wake_set w = {NULL, 0};
    tm_pg_cache_forget_all(p);
    pthread_mutex_lock(&p->c_mu);
    w.keys = calloc(tm_map_count(p->streams) + 1, sizeof *w.keys);
    if (w.keys)
        tm_map_each(p->streams, collect_wake, &w);
    pthread_mutex_unlock(&p->c_mu);
    for (size_t i = 0; i < w.n; i++) {
        char *sep = strchr(w.keys[i], '\x1f');
        if (sep) {
            *sep = '\0';
            tm_store_notify_commit(&p->base, w.keys[i], sep + 1, 0);
        }
        free(w.keys[i]);
    }
    free(w.keys);
}

/* "<node>\n<session>\t<stream>\t<head>\n..." or "<node>\n*": wake those readers. */
static void on_commits(pgstore *p, char *msg)
{
    char *line = strchr(msg, '\n');
    if (!line)
        return;
    *line++ = '\0';
    if (strcmp(msg, p->node) == 0) /* this node's own: woken by the writer */
        return;
    if (strcmp(line, "*") == 0) {
        wake_all(p);
        return;
    }
    while (*line) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (t2) {
            *t1 = *t2 = '\0';
            tm_pg_cache_foreign(p, line, t1 + 1); /* before its readers wake */
            tm_store_notify_commit(&p->base, line, t1 + 1, strtoull(t2 + 1, NULL, 10));
        }
        if (!end)
            break;
        line = end + 1;
    }
}

static int unhex(const char *h, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char c = h[2 * i + k];
            v = v * 16 + (unsigned)(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 99);
        }
        if (v > 255)
            return -1;
        out[i] = (unsigned char)v;
    }
    return 0;
}

/* A large bus message waits in tm_busmsg: "#<id>". */
static unsigned char *bus_fetch(pgstore *p, const char *id, size_t *len)
{
    const char *a[1] = {id};
    PGresult *r = NULL;
    if (tm_pg_query(p, "SELECT data FROM tm_busmsg WHERE id = $1", 1, a, 1, &r) != 0)
        return NULL;
    unsigned char *d = NULL;
    if (PQntuples(r) == 1) {
        *len = (size_t)PQgetlength(r, 0, 0);
        d = (unsigned char *)tm_memdup(PQgetvalue(r, 0, 0), *len);
    }
    PQclear(r);
    return d;
}

/* "<node>\t<channel>\t<hex bytes>" or "<node>\t<channel>\t#<id>". */
static void on_bus(pgstore *p, const char *msg)
{
    const char *t1 = strchr(msg, '\t');
    const char *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
    if (!t2)
        return;
    if ((size_t)(t1 - msg) == strlen(p->node) && strncmp(msg, p->node, strlen(p->node)) == 0)
        return; /* this node's own: told by store.c */
    char channel[64];
    snprintf(channel, sizeof channel, "%.*s", (int)(t2 - t1 - 1), t1 + 1);
    const char *body = t2 + 1;
    size_t len = 0;
    unsigned char *data = NULL;
    if (body[0] == '#') {
        data = bus_fetch(p, body + 1, &len);
    } else {
        len = strlen(body) / 2;
        data = malloc(len + 1);
        if (data && unhex(body, len, data) != 0) {
            free(data);
            data = NULL;
        }
    }
    if (data)
        tm_store_notify_bus(&p->base, channel, data, len);
    free(data);
}

static PGconn *listen_connect(pgstore *p)
{
    PGconn *c = tm_pg_connect(p, "listen");
    if (!c)
        return NULL;
    PGresult *r = PQexec(c, "LISTEN tm_commits; LISTEN tm_bus");
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* This node's lease, on the database's clock; also the moment to check the
 * primary's replication settings and drop old bus messages. */
static int lease_renew(pgstore *p, PGconn *c)
{
    char ms[24];
    snprintf(ms, sizeof ms, "%d", LEASE_MS);
    const char *a[2] = {p->node, ms};
    PGresult *r = tm_pg_exec(c, "INSERT INTO tm_nodes(node, until_ms) VALUES ($1, tm_now() + $2) "
                                "ON CONFLICT (node) DO UPDATE SET until_ms = EXCLUDED.until_ms",
                             2, a, 0);
    PQclear(r);
    if (!r)
        return TIDEMARK_EIO;
    tm_pg_check_replicated(p, c);
    return 0;
}

static void drain_notifies(pgstore *p, PGconn *c)
{
    PGnotify *n;
    while ((n = PQnotifies(c)) != NULL) {
        if (strcmp(n->relname, "tm_commits") == 0)
            on_commits(p, n->extra);
        else if (strcmp(n->relname, "tm_bus") == 0)
            on_bus(p, n->extra);
        PQfreemem(n);
    }
}

/* Serve one connection until it breaks or the store stops. */
static void listen_serve(pgstore *p, PGconn *c)
{
    int64_t renew_at = 0;
    while (!atomic_load(&p->stopping)) {
        if (tm_now_ms() >= renew_at) {
            if (lease_renew(p, c) != 0 && PQstatus(c) != CONNECTION_OK)
                return;
            renew_at = tm_now_ms() + LEASE_RENEW_MS;
        }
        struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
        if (pfd.fd < 0 || (poll(&pfd, 1, 200) < 0 && errno != EINTR))
            return;
        if (!PQconsumeInput(c))
            return;
        drain_notifies(p, c);
    }
}

static void *listen_main(void *arg)
{
    pgstore *p = arg;
    int backoff = 20, first = 1;
    while (!atomic_load(&p->stopping)) {
        PGconn *c = listen_connect(p);
        if (!c) {
            sleep_ms(backoff);
            backoff = backoff * 2 > 500 ? 500 : backoff * 2;
            continue;
        }
        backoff = 20;
        tm_pg_cache_forget_all(p); /* a wake-up may have been lost while not listening */
        atomic_store(&p->listening, 1);
        atomic_store(&p->listen_since, tm_now_ms());
        if (!first) /* a notification may have been lost meanwhile */
            wake_all(p);
        first = 0;
        listen_serve(p, c);
        atomic_store(&p->listening, 0);
        atomic_store(&p->listen_since, 0);
        PQfinish(c);
    }
    return NULL;
}

/* ---- bus ------------------------------------------------------------------------------ */

static int pg_publish(tm_store *st, const char *channel, const void *data, size_t len)
{
    pgstore *p = (pgstore *)st;
    size_t head = strlen(p->node) + strlen(channel) + 2;
    char *msg = malloc(head + 2 * len + 24);
    if (!msg)
        return TIDEMARK_ENOMEM;
    int n = snprintf(msg, head + 1, "%s\t%s\t", p->node, channel);
    int rc;
    PGresult *r = NULL;
    if (head + 2 * len <= NOTIFY_MAX) {
        static const char hx[] = "0123456789abcdef";
        for (size_t i = 0; i < len; i++) {
            msg[n++] = hx[((const unsigned char *)data)[i] >> 4];
            msg[n++] = hx[((const unsigned char *)data)[i] & 15];
        }
        msg[n] = '\0';
        const char *a[1] = {msg};
        rc = tm_pg_query(p, "SELECT pg_notify('tm_bus', $1)", 1, a, 0, &r);
    } else { /* too long for a NOTIFY: the message waits in a row */
        const char *vals[2] = {data, msg};
        int lens[2] = {(int)len, 0}, fmts[2] = {1, 0};
        PGconn *c = tm_pg_pool_get(p);
        r = c ? PQexecParams(c, "WITH m AS (INSERT INTO tm_busmsg(ms, data) VALUES (tm_now(), $1) "
                                "RETURNING id) SELECT pg_notify('tm_bus', $2 || '#' || id) FROM m",
                             2, NULL, vals, lens, fmts, 0)
              : NULL;
        rc = PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : TIDEMARK_EIO;
        tm_pg_pool_put(p, c);
    }
    PQclear(r);
    free(msg);
    return rc;
}

/* ---- the writer's queue ---------------------------------------------------------------- */

static int pg_sync(tm_store *st) { return tm_writer_sync(((pgstore *)st)->writer); }
static int pg_sync_since(tm_store *st, uint64_t mark)
{
    return tm_writer_sync_since(((pgstore *)st)->writer, mark);
}
static uint64_t pg_mark(tm_store *st) { return tm_writer_mark(((pgstore *)st)->writer); }

static void pg_wait_settled(tm_store *st, uint64_t mark)
{
    tm_writer_wait_settled(((pgstore *)st)->writer, mark);
}
static void pg_hold(tm_store *st, int on)
{
    pgstore *p = (pgstore *)st;
    if (on)
        tm_writer_hold(p->writer);
    else
        tm_writer_release(p->writer);
}

/* Whether doubt d has resolved, asked on connection c (to the server this
 * node writes to now): 1 when its backend is not there (gone, or on another
 * server: a former primary's COMMIT can land here no more), or idle (its
 * batch committed or rolled back) and left more than twice the store
 * timeout ago (the writer's kernel retransmits what it had sent no longer
 * than the timeout: tcp_user_timeout); 0 while it may still commit; -1
 * when c could not say. A state not known to be settled (NULL, "disabled")
 * is a doubt. */
static int doubt_gone(pgstore *p, PGconn *c, const pg_doubt *d)
{
    char pid[16], start[24];
    snprintf(pid, sizeof pid, "%d", d->pid);
    snprintf(start, sizeof start, "%lld", d->start_us);
    const char *a[2] = {pid, start};
    PGresult *r = tm_pg_exec(c, "SELECT coalesce(state, '') FROM pg_stat_activity WHERE pid = $1 "
                                "AND pid <> pg_backend_pid() AND ($2::bigint = 0 OR "
                                "(extract(epoch FROM backend_start) * 1000000)::bigint = "
                                "$2::bigint)", 2, a, 0);
    if (!r)
        return -1;
    int gone = PQntuples(r) == 0;
    if (!gone) {
        const char *st = PQgetvalue(r, 0, 0);
        int settled = strcmp(st, "idle") == 0 || strcmp(st, "idle in transaction (aborted)") == 0;
        gone = settled && tm_now_ms() - d->at > 2 * p->timeout_ms;
    }
    PQclear(r);
    return gone;
}

static int same_doubt(const pg_doubt *a, const pg_doubt *b)
{
    return a->pid == b->pid && a->start_us == b->start_us;
}

/* Ask c about every doubt, forget those resolved: how many are left (0
 * without a question when there are none), or -1 when c could not say. */
static int doubts_left(pgstore *p, PGconn *c)
{
    pg_doubt d[PG_DOUBTS_MAX];
    pthread_mutex_lock(&p->d_mu);
    int n = p->ndoubts;
    memcpy(d, p->doubts, (size_t)n * sizeof *d);
    pthread_mutex_unlock(&p->d_mu);
    if (n == 0)
        return 0;
    int gone[PG_DOUBTS_MAX], failed = 0;
    for (int i = 0; i < n; i++) {
        int g = failed ? -1 : doubt_gone(p, c, &d[i]);
        failed |= g < 0;
        gone[i] = g == 1;
    }
    pthread_mutex_lock(&p->d_mu); /* the writer may have added doubts meanwhile */
    int k = 0;
    for (int j = 0; j < p->ndoubts; j++) {
        int drop = 0;
        for (int i = 0; i < n && !drop; i++)
            drop = gone[i] && same_doubt(&p->doubts[j], &d[i]);
        if (!drop)
            p->doubts[k++] = p->doubts[j];
    }
    p->ndoubts = k;
    pthread_mutex_unlock(&p->d_mu);
    return failed ? -1 : k;
}

int tm_pg_in_doubt(tm_store *st)
{
    pgstore *p = (pgstore *)st;
    pthread_mutex_lock(&p->d_mu);
    int n = p->ndoubts;
    pthread_mutex_unlock(&p->d_mu);
    if (n == 0)
        return 0;
    PGconn *c = tm_pg_pool_get(p);
    if (!c)
        return 1;
    int left = doubts_left(p, c);
    tm_pg_pool_put(p, c);
    return left != 0;
}

int tm_pg_doubts_wait(pgstore *p)
{
    for (int waited = 0;; waited = 1) {
        int left = doubts_left(p, p->wc);
        if (left < 0)
            return TIDEMARK_EIO;
        int64_t rest = p->deadline - tm_now_ms();
        if (left == 0 && (!waited || rest >= p->timeout_ms / 2))
            return 0;
        if (rest <= 0 || left == 0) /* (too late to send: it would be in doubt itself) */
            return TIDEMARK_EBUSY;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int pg_writable(tm_store *st)
{
    pgstore *p = (pgstore *)st;
    return atomic_load(&p->w_down) || atomic_load(&p->not_replicated) ? TIDEMARK_EIO : 0;
}

/* ---- open and close ------------------------------------------------------------------- */

static void free_hint(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    free(v);
}

static void free_stream_hint(const char *k, void *v, void *ud)
{
    (void)k;
    tm_pg_hint_free(ud, v);
}

static void pg_free(pgstore *p)
{
    tm_writer_free(p->writer);
    PQfinish(p->wc);
    pool_drain(p);
    pthread_mutex_lock(&p->c_mu);
    if (p->streams)
        tm_map_each(p->streams, free_stream_hint, p);
    pthread_mutex_unlock(&p->c_mu);
    if (p->resv)
        tm_map_each(p->resv, free_hint, NULL);
    tm_map_free(p->streams);
    tm_map_free(p->resv);
    pthread_mutex_destroy(&p->e_mu);
    pthread_mutex_destroy(&p->c_mu);
    pthread_mutex_destroy(&p->d_mu);
    pthread_mutex_destroy(&p->p_mu);
    pthread_cond_destroy(&p->p_cv);
    free(p->uri);
    free(p);
}

static void pg_close(tm_store *st)
{
    pgstore *p = (pgstore *)st;
    if (p->writer)
        tm_writer_stop(p->writer); /* commits what is queued */
    atomic_store(&p->stopping, 1);
    if (p->lstarted)
        pthread_join(p->lthread, NULL);
    if (p->wc) { /* the lease goes with the node: its records may be claimed at once */
        const char *a[1] = {p->node};
        PQclear(tm_pg_exec(p->wc, "DELETE FROM tm_nodes WHERE node = $1", 1, a, 0));
    }
    TM_INFO("postgresql store closed (writer %s)", p->node);
    pg_free(p);
}

const struct tm_store_ops tm_pg_ops = {
    .name = "postgresql",
    .close = pg_close,
    .session_create = tm_pg_session_create,
    .session_get = tm_pg_session_get,
    .session_touch = tm_pg_session_touch,
    .session_delete = tm_pg_session_delete,
    .session_set_attr = tm_pg_session_set_attr,
    .sessions_each = tm_pg_sessions_each,
    .sessions_with_attr = tm_pg_sessions_with_attr,
    .stream_open = tm_pg_stream_open,
    .close_stream = tm_pg_close_stream,
    .read = tm_pg_read,
    .bounds = tm_pg_bounds,
    .event_epoch = tm_pg_event_epoch,
    .append_ex = tm_pg_append_ex,
    .request_get = tm_pg_request_get,
    .session_request_get = tm_pg_session_request_get,
    .request_begin = tm_pg_request_begin,
    .request_begin_later = tm_pg_request_begin_later,
    .request_begin_await = tm_pg_request_begin_await,
    .requests_unfinished = tm_pg_requests_unfinished,
    .exec_schema = tm_pg_exec_schema,
    .query = tm_pg_query_json,
    .rows = tm_pg_rows,
    .sessions_expire = tm_pg_sessions_expire,
    .sync = pg_sync,
    .sync_since = pg_sync_since,
    .mark = pg_mark,
    .wait_settled = pg_wait_settled,
    .writable = pg_writable,
    .publish = pg_publish,
    .request_claim = tm_pg_request_claim,
    .request_mine = tm_pg_request_mine,
    .request_adopt = tm_pg_request_adopt,
    .hold = pg_hold,
    .kv_get = tm_pg_kv_get,
    .kv_create = tm_pg_kv_create,
    .in_doubt = tm_pg_in_doubt,
    .read_live = tm_pg_read_live,
    .bounds_live = tm_pg_bounds_live,
};

static int check_options(const tm_store_options *opt)
{
    if (opt->emit_early) {
        TM_ERROR("postgresql: emit-early is not offered on this store (commit, then emit)");
        return TIDEMARK_ENOTSUP;
    }
    if (opt->durability == TM_DURABILITY_NONE)
        return TIDEMARK_EINVAL;
    return 0;
}

/* Threads start once the schema is there and this node holds its lease
 * (nothing is recorded under its name before). */
static int start(pgstore *p)
{
    int rc = schema_ensure(p);
    if (rc)
        return rc;
    if (tm_pg_writer_connect(p) != 0) {
        TM_ERROR("postgresql: no writable primary at open");
        return TIDEMARK_EIO;
    }
    if (lease_renew(p, p->wc) != 0)
        return TIDEMARK_EIO;
    TM_INFO("postgresql store opened on %s:%s (epoch %s, writer %s, synchronous_commit %s%s)",
            PQhost(p->wc), PQport(p->wc), p->base.epoch, p->node, sync_commit_level(p, "write"),
            p->opt.durability == TM_DURABILITY_REPLICATED ? ", replicated required" : "");
    if (tm_writer_start(p->writer) != 0)
        return TIDEMARK_EIO;
    if (pthread_create(&p->lthread, NULL, listen_main, p) != 0)
        return TIDEMARK_EIO;
    p->lstarted = 1;
    /* Subscribed before the first caller can miss another node's wake-up
     * (bounded: the listener keeps trying on its own). */
    for (int i = 0; i < 400 && !atomic_load(&p->listening); i++)
        sleep_ms(5);
    return 0;
}

int tm_store_pg_open(const char *uri, const tm_store_options *opt, tm_store **out)
{
    int rc = check_options(opt);
    if (rc)
        return rc;
    pgstore *p = calloc(1, sizeof *p);
    if (!p)
        return TIDEMARK_ENOMEM;
    pthread_mutex_init(&p->e_mu, NULL);
    pthread_mutex_init(&p->c_mu, NULL);
    pthread_mutex_init(&p->d_mu, NULL);
    pthread_mutex_init(&p->p_mu, NULL);
    pthread_cond_init(&p->p_cv, NULL);
    p->opt = *opt;
    p->timeout_ms = opt->store_timeout_ms > 0 ? opt->store_timeout_ms : TIMEOUT_DEFAULT_MS;
    p->uri = strdup(uri);
    p->streams = tm_map_new();
    p->resv = tm_map_new();
    rc = tm_store_init_base(&p->base, &tm_pg_ops, opt);
    if (rc == 0)
        rc = tm_random_hex(p->node, sizeof p->node / 2);
    memcpy(p->epoch, p->base.epoch, sizeof p->epoch);
    tm_writer_config wc = {.name = "postgresql", .store = &p->base, .be = p,
                           .hooks = &tm_pg_writer_hooks, .batch_max = BATCH_MAX,
                           .maintain_ms = 1000, .touch_every_ms = opt->touch_every_ms};
    if (rc == 0 && (!p->uri || !p->streams || !p->resv || tm_writer_new(&wc, &p->writer) != 0))
        rc = TIDEMARK_ENOMEM;
    if (rc == 0)
        rc = start(p);
    if (rc) {
        pg_close(&p->base);
        return rc;
    }
    *out = &p->base;
    return 0;
}
