/* cstate.c - durable client state in SQLite; see cstate.h. */
#include "cstate.h"
#include "../common/sqlite_util.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

static const char *const schema_sql =
    "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
    "CREATE TABLE IF NOT EXISTS tmc_meta(k TEXT PRIMARY KEY, v INTEGER) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS tmc_session(k INTEGER PRIMARY KEY CHECK (k = 1), url TEXT,"
    " id TEXT, version TEXT, server TEXT);"
    "CREATE TABLE IF NOT EXISTS tmc_cursor(stream TEXT PRIMARY KEY, event_id TEXT NOT NULL,"
    " seq INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS tmc_dispatch(event_id TEXT PRIMARY KEY, stream TEXT NOT NULL,"
    " seq INTEGER NOT NULL, state INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS tmc_dispatch_stream ON tmc_dispatch(stream, seq);"
    "CREATE TABLE IF NOT EXISTS tmc_outstanding(request_id INTEGER PRIMARY KEY, method TEXT,"
    " params TEXT, sent_ms INTEGER, stream TEXT, idem_key TEXT, tasks INTEGER NOT NULL DEFAULT 0,"
    " task_id TEXT);"
    "CREATE TABLE IF NOT EXISTS tmc_kv(kind TEXT NOT NULL, k TEXT NOT NULL, v TEXT NOT NULL,"
    " PRIMARY KEY(kind, k)) WITHOUT ROWID;"
    "INSERT OR IGNORE INTO tmc_meta(k, v) VALUES('next_request_id', 1);";

/* Columns added after the first release: a state file made by an older
 * client gets them at open (ALTER TABLE refuses a column that is there). */
static const char *const added_columns[] = {
    "ALTER TABLE tmc_outstanding ADD COLUMN tasks INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE tmc_outstanding ADD COLUMN task_id TEXT",
    NULL,
};

static int add_columns(sqlite3 *db)
{
    for (int i = 0; added_columns[i]; i++) {
        char *msg = NULL;
        int rc = sqlite3_exec(db, added_columns[i], NULL, NULL, &msg);
        int there = rc == SQLITE_ERROR && msg && strstr(msg, "duplicate column");
        sqlite3_free(msg);
        if (rc != SQLITE_OK && !there)
            return rc;
    }
    return SQLITE_OK;
}

/* The schema (and an application's), made or brought up to date. Two
 * processes opening one state file at once (a client and `tidemark-client
 * state` beside it) can meet SQLITE_BUSY that the busy handler never sees
 * (the first switch to WAL, a read turning into a write): tried again
 * until the busy timeout's 10 s have passed. */
static int setup_schema(sqlite3 *db, const char *schema)
{
    int64_t deadline = tm_now_ms() + 10000;
    for (;;) {
        int rc = sqlite3_exec(db, schema_sql, NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = add_columns(db);
        if (rc == SQLITE_OK && schema)
            rc = sqlite3_exec(db, schema, NULL, NULL, NULL);
        if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || tm_now_ms() >= deadline)
            return rc;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* The state holds tokens and client secrets: only its owner reads it. */
static void owner_only(const char *path)
{
    static const char *const sfx[] = {"", "-wal", "-shm"};
    char p[4096];
    for (size_t i = 0; i < sizeof sfx / sizeof *sfx; i++) {
        snprintf(p, sizeof p, "%s%s", path, sfx[i]);
        if (chmod(p, 0600) != 0 && i == 0)
            TM_WARN("client state %s: cannot make it owner-only: %s", path, strerror(errno));
    }
}

struct tm_cstate {
    sqlite3 *db;
    pthread_mutex_t mu; /* held for a whole transaction */
};

int tm_cstate_open(const char *path, const char *schema, tm_cstate **out)
{
    tm_cstate *st = calloc(1, sizeof *st);
    if (!st)
        return TIDEMARK_ENOMEM;
    if (pthread_mutex_init(&st->mu, NULL) != 0) {
        free(st);
        return TIDEMARK_ENOMEM;
    }
    int rc = sqlite3_open_v2(path ? path : ":memory:", &st->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc == SQLITE_OK && path && strcmp(path, ":memory:") != 0)
        owner_only(path);
    if (rc == SQLITE_OK)
        rc = sqlite3_busy_timeout(st->db, 10000);
    if (rc == SQLITE_OK)
        rc = setup_schema(st->db, schema);
    if (rc != SQLITE_OK) {
        TM_ERROR("client state %s: %s", path ? path : "(memory)",
                 st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
        tm_cstate_close(st);
        return TIDEMARK_EIO;
    }
    *out = st;
    return 0;
}

void tm_cstate_close(tm_cstate *st)
{
    if (!st)
        return;
    if (st->db && tm_sqlite_close(st->db) != SQLITE_OK)
        TM_ERROR("client state: close: %s", sqlite3_errmsg(st->db));
    pthread_mutex_destroy(&st->mu);
    free(st);
}

sqlite3 *tm_cstate_db(tm_cstate *st) { return st->db; }

int tm_cstate_begin(tm_cstate *st)
{
    pthread_mutex_lock(&st->mu);
    if (sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        pthread_mutex_unlock(&st->mu);
        return TIDEMARK_EIO;
    }
    return 0;
}

/* ROLLBACK; SQLite may already have rolled back (a failed COMMIT). */
static void rollback_locked(tm_cstate *st)
{
    if (sqlite3_get_autocommit(st->db))
        return;
    if (sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK)
        TM_ERROR("client state: rollback: %s", sqlite3_errmsg(st->db));
}

int tm_cstate_commit(tm_cstate *st)
{
    int rc = sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        TM_WARN("client state: commit: %s", sqlite3_errmsg(st->db));
        rollback_locked(st);
    }
    pthread_mutex_unlock(&st->mu);
    return tm_sqlite_err(rc);
}

void tm_cstate_rollback(tm_cstate *st)
{
    rollback_locked(st);
    pthread_mutex_unlock(&st->mu);
}

/* One statement outside a transaction, under the mutex. */
static int exec1(tm_cstate *st, const char *sql, const char *const *args, size_t n)
{
    pthread_mutex_lock(&st->mu);
    int rc = tm_sqlite_exec_args(st->db, sql, args, n);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static char *col_dup(sqlite3_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? strdup((const char *)t) : NULL;
}

int tm_cstate_session_get(tm_cstate *st, char **url, char **id, char **version, char **server)
{
    *url = *id = *version = *server = NULL;
    pthread_mutex_lock(&st->mu);
    sqlite3_stmt *s;
    int rc = TIDEMARK_EIO;
    if (sqlite3_prepare_v2(st->db, "SELECT url, id, version, server FROM tmc_session WHERE k = 1", -1,
                           &s, NULL) == SQLITE_OK) {
        int step = sqlite3_step(s);
        if (step == SQLITE_ROW) {
            *url = col_dup(s, 0);
            *id = col_dup(s, 1);
            *version = col_dup(s, 2);
            *server = col_dup(s, 3);
            rc = 0;
        } else if (step == SQLITE_DONE) {
            rc = TIDEMARK_ENOTFOUND;
        }
        sqlite3_finalize(s);
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int tm_cstate_session_set(tm_cstate *st, const char *url, const char *id, const char *version,
                          const char *server)
{
    const char *a[4] = {url, id, version, server};
    return exec1(st, "INSERT OR REPLACE INTO tmc_session(k, url, id, version, server) "
                     "VALUES(1, ?1, ?2, ?3, ?4)", a, 4);
}

int tm_cstate_session_clear(tm_cstate *st)
{
    pthread_mutex_lock(&st->mu);
    int rc = sqlite3_exec(st->db,
                          "BEGIN; DELETE FROM tmc_session; DELETE FROM tmc_cursor;"
                          " DELETE FROM tmc_dispatch; DELETE FROM tmc_outstanding;"
                          " DELETE FROM tmc_meta WHERE k = 'session_proven'; COMMIT;",
                          NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        rollback_locked(st); /* a statement failed inside: the rest is undone */
    pthread_mutex_unlock(&st->mu);
    return tm_sqlite_err(rc);
}

int tm_cstate_next_request_id(tm_cstate *st, int64_t *id)
{
    pthread_mutex_lock(&st->mu);
    int rc = TIDEMARK_EIO;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db,
                           "UPDATE tmc_meta SET v = v + 1 WHERE k = 'next_request_id' RETURNING v - 1",
                           -1, &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) == SQLITE_INTEGER) {
            *id = sqlite3_column_int64(s, 0);
            rc = 0;
        }
        if (sqlite3_finalize(s) != SQLITE_OK) /* the UPDATE itself failed */
            rc = TIDEMARK_EIO;
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* One integer of a one-row query (0 when there is no row), under the mutex
 * already held; text bound to ?1 when arg is set. */
static int query_int(tm_cstate *st, const char *sql, const char *arg, int64_t *out)
{
    sqlite3_stmt *s;
    *out = 0;
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
        return TIDEMARK_EIO;
    int rc = arg ? sqlite3_bind_text(s, 1, arg, -1, SQLITE_STATIC) : SQLITE_OK;
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
            *out = sqlite3_column_int64(s, 0);
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(s);
    return rc == SQLITE_OK ? 0 : TIDEMARK_EIO;
}

int tm_cstate_session_proven(tm_cstate *st, int *proven)
{
    int64_t v;
    pthread_mutex_lock(&st->mu);
    int rc = query_int(st, "SELECT v FROM tmc_meta WHERE k = 'session_proven'", NULL, &v);
    pthread_mutex_unlock(&st->mu);
    *proven = rc == 0 && v != 0;
    return rc;
}

int tm_cstate_session_prove(tm_cstate *st)
{
    return tm_sqlite_exec_args(st->db,
                               "INSERT OR REPLACE INTO tmc_meta(k, v) VALUES('session_proven', 1)",
                               NULL, 0);
}

int tm_cstate_cursor_get(tm_cstate *st, const char *stream, tm_cursor *out)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db, "SELECT event_id, seq FROM tmc_cursor WHERE stream = ?1", -1, &s,
                           NULL) != SQLITE_OK)
        return TIDEMARK_EIO;
    if (sqlite3_bind_text(s, 1, stream, -1, SQLITE_STATIC) != SQLITE_OK) {
        sqlite3_finalize(s);
        return TIDEMARK_EIO;
    }
    int rc = 0, step = sqlite3_step(s);
    if (step != SQLITE_ROW && step != SQLITE_DONE)
        rc = TIDEMARK_EIO;
    if (step == SQLITE_ROW) {
        /* A cursor is kept whole or not at all: a cut one would name
         * another event. */
        const unsigned char *id = sqlite3_column_text(s, 0);
        if (!id || (size_t)sqlite3_column_bytes(s, 0) >= sizeof out->event_id) {
            rc = TIDEMARK_ERANGE;
        } else {
            memcpy(out->event_id, id, (size_t)sqlite3_column_bytes(s, 0) + 1);
            out->seq = (uint64_t)sqlite3_column_int64(s, 1);
            out->known = 1;
        }
    }
    sqlite3_finalize(s);
    return rc;
}

int tm_cstate_cursor_set(tm_cstate *st, const char *stream, const char *event_id, uint64_t seq)
{
    if (strlen(event_id) >= sizeof ((tm_cursor *)0)->event_id)
        return TIDEMARK_ERANGE;
    char q[32];
    snprintf(q, sizeof q, "%llu", (unsigned long long)seq);
    const char *a[3] = {stream, event_id, q};
    return tm_sqlite_exec_args(st->db,
                               "INSERT OR REPLACE INTO tmc_cursor(stream, event_id, seq) "
                               "VALUES(?1, ?2, ?3)", a, 3);
}

int tm_cstate_dispatch_state(tm_cstate *st, const char *event_id, int *state)
{
    int64_t v;
    int rc = query_int(st, "SELECT state FROM tmc_dispatch WHERE event_id = ?1", event_id, &v);
    *state = rc == 0 ? (int)v : TM_DISPATCH_NONE;
    return rc;
}

int tm_cstate_last_dispatched(tm_cstate *st, const char *stream, uint64_t *seq)
{
    int64_t v;
    int rc = query_int(st, "SELECT MAX(seq) FROM tmc_dispatch WHERE stream = ?1", stream, &v);
    *seq = rc == 0 ? (uint64_t)v : 0;
    return rc;
}

int tm_cstate_dispatch_set(tm_cstate *st, const char *event_id, const char *stream, uint64_t seq,
                           int state)
{
    char q[32], z[8];
    snprintf(q, sizeof q, "%llu", (unsigned long long)seq);
    snprintf(z, sizeof z, "%d", state);
    const char *a[4] = {event_id, stream, q, z};
    return tm_sqlite_exec_args(st->db,
                               "INSERT OR REPLACE INTO tmc_dispatch(event_id, stream, seq, state) "
                               "VALUES(?1, ?2, ?3, ?4)", a, 4);
}

int tm_cstate_outstanding_add(tm_cstate *st, int64_t id, const char *method, const char *params,
                              const char *idem_key, int tasks)
{
    char i[32], t[32];
    snprintf(i, sizeof i, "%lld", (long long)id);
    snprintf(t, sizeof t, "%lld", (long long)tm_wall_ms());
    const char *a[6] = {i, method, params, t, idem_key, tasks ? "1" : "0"};
    return exec1(st, "INSERT OR REPLACE INTO tmc_outstanding(request_id, method, params, sent_ms, "
                     "idem_key, tasks) VALUES(?1, ?2, ?3, ?4, ?5, ?6)", a, 6);
}

static const char *const task_sql =
    "UPDATE tmc_outstanding SET task_id = ?2 WHERE request_id = ?1";

int tm_cstate_outstanding_task(tm_cstate *st, int64_t id, const char *task_id)
{
    char i[32];
    snprintf(i, sizeof i, "%lld", (long long)id);
    const char *a[2] = {i, task_id};
    return exec1(st, task_sql, a, 2);
}

int tm_cstate_outstanding_task_txn(tm_cstate *st, int64_t id, const char *task_id)
{
    char i[32];
    snprintf(i, sizeof i, "%lld", (long long)id);
    const char *a[2] = {i, task_id};
    return tm_sqlite_exec_args(st->db, task_sql, a, 2);
}

/* A task's answered input keys are kv rows of kind "task_input", keyed
 * "<task id>\x1f<key>" (a task id holds no control character). */
int tm_cstate_task_input_answered(tm_cstate *st, const char *task_id, const char *key, int *answered)
{
    size_t n = strlen(task_id) + strlen(key) + 2;
    char *k = malloc(n);
    if (!k)
        return TIDEMARK_ENOMEM;
    snprintf(k, n, "%s\x1f%s", task_id, key);
    char *v = NULL;
    int rc = tm_cstate_kv_get(st, "task_input", k, &v);
    *answered = rc == 0 && v != NULL;
    free(v);
    free(k);
    return rc;
}

int tm_cstate_task_input_set(tm_cstate *st, const char *task_id, const char *key)
{
    size_t n = strlen(task_id) + strlen(key) + 2;
    char *k = malloc(n);
    if (!k)
        return TIDEMARK_ENOMEM;
    snprintf(k, n, "%s\x1f%s", task_id, key);
    int rc = tm_cstate_kv_set(st, "task_input", k, "1");
    free(k);
    return rc;
}

int tm_cstate_task_forget_txn(tm_cstate *st, const char *task_id)
{
    const char *a[1] = {task_id};
    return tm_sqlite_exec_args(st->db,
                               "DELETE FROM tmc_kv WHERE kind = 'task_input' AND "
                               "substr(k, 1, length(?1) + 1) = ?1 || char(31)", a, 1);
}

int tm_cstate_outstanding_stream(tm_cstate *st, int64_t id, const char *stream)
{
    char i[32];
    snprintf(i, sizeof i, "%lld", (long long)id);
    const char *a[2] = {i, stream};
    return exec1(st, "UPDATE tmc_outstanding SET stream = ?2 WHERE request_id = ?1", a, 2);
}

int tm_cstate_outstanding_stream_txn(tm_cstate *st, int64_t id, const char *stream)
{
    char i[32];
    snprintf(i, sizeof i, "%lld", (long long)id);
    const char *a[2] = {i, stream};
    return tm_sqlite_exec_args(st->db, "UPDATE tmc_outstanding SET stream = ?2 WHERE request_id = ?1",
                               a, 2);
}

int tm_cstate_outstanding_done_txn(tm_cstate *st, int64_t id)
{
    char i[32];
    snprintf(i, sizeof i, "%lld", (long long)id);
    const char *a[1] = {i};
    return tm_sqlite_exec_args(st->db, "DELETE FROM tmc_outstanding WHERE request_id = ?1", a, 1);
}

int tm_cstate_outstanding_done(tm_cstate *st, int64_t id)
{
    char i[32];
    snprintf(i, sizeof i, "%lld", (long long)id);
    const char *a[1] = {i};
    return exec1(st, "DELETE FROM tmc_outstanding WHERE request_id = ?1", a, 1);
}

int tm_cstate_outstanding_list(tm_cstate *st, json_t **rows)
{
    pthread_mutex_lock(&st->mu);
    int rc = tm_sqlite_query_json(st->db,
                                  "SELECT request_id, method, params, stream, idem_key, tasks, "
                                  "task_id FROM tmc_outstanding ORDER BY request_id",
                                  NULL, 0, rows);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int tm_cstate_query(tm_cstate *st, const char *sql, const char *const *args, size_t nargs,
                    json_t **rows)
{
    pthread_mutex_lock(&st->mu);
    int rc = tm_sqlite_query_json(st->db, sql, args, nargs, rows);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* One query into field name of out, under the mutex already held. */
static int dump_part(tm_cstate *st, json_t *out, const char *name, const char *sql)
{
    json_t *rows = NULL;
    int rc = tm_sqlite_query_json(st->db, sql, NULL, 0, &rows);
    if (rc == 0)
        return json_object_set_new(out, name, rows) == 0 ? 0 : TIDEMARK_ENOMEM;
    json_decref(rows);
    return rc;
}

int tm_cstate_dump(tm_cstate *st, json_t **out)
{
    int proven = 0;
    int rc = tm_cstate_session_proven(st, &proven);
    json_t *o = rc ? NULL : json_pack("{s:b}", "proven", proven);
    if (!o)
        return rc ? rc : TIDEMARK_ENOMEM;
    pthread_mutex_lock(&st->mu);
    rc = dump_part(st, o, "session", "SELECT url, id, version FROM tmc_session");
    if (!rc)
        rc = dump_part(st, o, "cursors", "SELECT stream, event_id, seq FROM tmc_cursor ORDER BY stream");
    if (!rc)
        rc = dump_part(st, o, "dispatch",
                       "SELECT event_id, stream, seq, state FROM tmc_dispatch ORDER BY stream, seq");
    if (!rc)
        rc = dump_part(st, o, "outstanding",
                       "SELECT request_id, method, stream, idem_key, task_id FROM tmc_outstanding "
                       "ORDER BY request_id");
    pthread_mutex_unlock(&st->mu);
    if (rc) {
        json_decref(o);
        return rc;
    }
    *out = o;
    return 0;
}

int tm_cstate_kv_get(tm_cstate *st, const char *kind, const char *key, char **value)
{
    *value = NULL;
    pthread_mutex_lock(&st->mu);
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, "SELECT v FROM tmc_kv WHERE kind = ?1 AND k = ?2", -1, &s,
                                NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(s, 1, kind, -1, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(s, 2, key, -1, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW && !(*value = col_dup(s, 0)))
            rc = SQLITE_NOMEM;
        else if (rc == SQLITE_ROW || rc == SQLITE_DONE)
            rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->mu);
    return tm_sqlite_err(rc);
}

int tm_cstate_kv_set(tm_cstate *st, const char *kind, const char *key, const char *value)
{
    if (!value) {
        const char *args[] = {kind, key};
        return exec1(st, "DELETE FROM tmc_kv WHERE kind = ?1 AND k = ?2", args, 2);
    }
    const char *args[] = {kind, key, value};
    return exec1(st, "INSERT OR REPLACE INTO tmc_kv(kind, k, v) VALUES(?1, ?2, ?3)", args, 3);
}
