/*
 * store_sqlite.c - the embedded durable store.
 *
 * The group-commit writer (writer.h) owns the write connection: every
 * operation queued while a commit is in flight rides in the next
 * transaction. This file supplies its hooks (sqlite_writer_hooks: one
 * transaction per batch, the cache update after it, the WAL restart between
 * batches, the probe write after a failure, age retention). Seqs are
 * assigned when an append is queued (so the caller knows its position), made
 * durable by the commit, and only then visible to read() and announced to
 * the commit listener (commit-then-emit). With emit_early, read() also
 * serves queued events.
 *
 * Readers use a small pool of read connections (WAL lets them run beside
 * the writer) plus an in-memory tail of each stream's recent events, so a
 * live stream is served without touching SQLite.
 *
 * Lock order: c_mu before the writer's queue lock (ops whose order must
 * follow the cache's are queued under c_mu) and before its touch lock; the
 * writer's hooks take c_mu with no queue lock held; the commit listener and
 * append callbacks run with no store lock held.
 */
#include "store.h"
#include "writer.h"
#include "../common/sqlite_util.h"
#include "walbuf.h"
#include "../base/lock.h"
#include "../base/clock.h"
#include "../base/crash.h"
#include "../base/log.h"
#include "../base/str.h"
#include "../base/map.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include "../base/random.h"
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAIL_CAP 256      /* recent events kept in memory per stream */
#define READ_CONNS 8      /* read connection pool size */
#define CKPT_EVERY_MS 100 /* checkpointer tick: a checkpoint, and the head file */
/* ... while commits come: a checkpoint only. What it has not copied when the
 * WAL passes WAL_FORCE, the writer copies itself before starting the WAL
 * over, and syncs. Under process durability the commits never sync the WAL,
 * so that was the writer's tail: with a 30 ms tick and a 4 MiB WAL it took
 * 4-5 ms every 13 ms (16 connections, instrumented by hand), so there the
 * checkpointer stays close behind. Under power durability the commits sync
 * the WAL, the catch-up is short, and a 2 ms tick cost ~8 % of calls/s (its
 * writes and syncs beside the commits' fdatasync). */
#define CKPT_BUSY_MS 30
#define CKPT_BUSY_PROCESS_MS 2
#define CKPT_IDLE_MS 500  /* no commit for this long: truncate the WAL */
/* journal_size_limit: a WAL started over shrinks to this when it is above
 * it. Above WAL_FORCE: a WAL the writer starts over under load keeps its
 * size, and its blocks (cut and grown again, every restart cost a commit
 * 6-8 ms and the next commits an fdatasync that also wrote the file's
 * new size). Idle, the checkpointer truncates it to 0. */
#define WAL_LIMIT (32LL << 20)
/* Above this the writer starts the WAL over (sq_between): one short stall per
 * WAL_FORCE bytes, so fewer of them with a larger WAL (the stall itself does
 * not grow: the checkpointer keeps up). */
#define WAL_FORCE (16LL << 20)
#define CKPT_STALL_MS 5000     /* a checkpoint incomplete this long is reported */
#define QUICK_CHECK_ALWAYS (64LL << 20) /* databases up to this size are checked at every open */
#define SYNC_WINDOW_US (5LL * 1000000) /* tm_store_sync: failures this recent count */
#define NEXT_R_BLOCK 64   /* stream numbers a session reserves at once (ssess) */
#define CLOSED_KEEP 256   /* closed streams kept cached (LRU); the rest reload on demand */

/* Request records in the order they were made (rid), found by the small
 * (session, key) index: a batch's records share the table's last leaves,
 * and each call dirties one leaf of its session in the index only. Keyed by
 * (session, key) itself (WITHOUT ROWID, before), each call's whole record
 * went into a leaf of its own session: 3.2 pages a call at 16 connections,
 * against 1.5 now (WAL frames by table). */
#define REQUESTS_DDL                                                                           \
    "(rid INTEGER PRIMARY KEY, session TEXT NOT NULL, key TEXT NOT NULL,"                      \
    " state INTEGER NOT NULL, tool TEXT, stream TEXT, message TEXT, response BLOB,"            \
    " updated_ms INTEGER, UNIQUE(session, key))"

static const char *const schema_sql =
    "CREATE TABLE IF NOT EXISTS tm_meta(k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS tm_epochs(id INTEGER PRIMARY KEY, epoch TEXT UNIQUE NOT NULL,"
    " opened_ms INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS tm_sessions(id TEXT PRIMARY KEY, version TEXT, client TEXT,"
    " created_ms INTEGER, last_seen_ms INTEGER, next_r INTEGER NOT NULL DEFAULT 1, attrs TEXT)"
    " WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS tm_streams(sid INTEGER PRIMARY KEY, session TEXT NOT NULL,"
    " name TEXT NOT NULL, head INTEGER NOT NULL, first_retained INTEGER NOT NULL,"
    " closed INTEGER NOT NULL, trimmed_epoch TEXT NOT NULL DEFAULT '', UNIQUE(session, name));"
    "CREATE TABLE IF NOT EXISTS tm_events(sid INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " epoch INTEGER NOT NULL, created_ms INTEGER NOT NULL, data BLOB NOT NULL,"
    " PRIMARY KEY(sid, seq)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS tm_requests" REQUESTS_DDL ";"
    "CREATE INDEX IF NOT EXISTS tm_requests_state ON tm_requests(state) WHERE state = 1;"
    /* session attributes, one row each (tm_sessions.attrs is only read to migrate) */
    "CREATE TABLE IF NOT EXISTS tm_session_attrs(session TEXT NOT NULL, name TEXT NOT NULL,"
    " value TEXT NOT NULL, PRIMARY KEY(session, name)) WITHOUT ROWID;"
    /* the sessions with an attribute (sub:<uri>, listen): who a fan-out reaches */
    "CREATE INDEX IF NOT EXISTS tm_session_attrs_name ON tm_session_attrs(name, session);"
    TM_SQLITE_ROWS_SCHEMA
    "INSERT OR IGNORE INTO tm_meta(k, v) VALUES('schema', '1');";

/* ---- cache structures ------------------------------------------------------ */

/* Event bytes shared by the queued op and the stream's tail: one copy. */
typedef struct blob {
    atomic_int refs;
    size_t len;
    char data[];
} blob;

typedef struct tevent {
    uint64_t seq;
    blob *b;
} tevent;

typedef struct sstream {
    int64_t sid;
    char session[64];
    char name[TM_STREAM_MAX];
    char key[96];
    uint64_t head;       /* durable head */
    uint64_t next_seq;   /* next seq to assign */
    uint64_t first;      /* first retained (durable) */
    int closed;          /* durably closed */
    int closing;         /* a close is queued or committed */
    char trimmed_epoch[TM_EPOCH_LEN + 1];
    tevent *tail;        /* ring of TAIL_CAP: seqs (next_seq - tail_n) .. next_seq-1;
                            NULL (tail_n 0) until the first append: an idle open
                            stream (every session's) costs no ring */
    size_t tail_n;
    int durable;         /* its row is committed (else its create is queued or failed) */
    int pending;         /* queued ops pointing at it: it is never freed while > 0 */
    struct sstream *lru_prev, *lru_next; /* idle closed streams, oldest first */
    int in_lru;
    int doomed;          /* its session's delete is queued: never back into the LRU (the
                            delete's op frees it) */
    /* writer-side, per batch */
    int touched;
    int batch_new;       /* its row is written by this batch's flush_streams */
    int batch_moved;     /* appended to, closed or reopened in this batch: wake readers */
    uint64_t batch_head;
    int batch_closed;
    struct sstream *next_touched;
} sstream;

/* A session's stream counter. Numbers are reserved in blocks: tm_sessions
 * holds the first number not reserved, written with the stream that
 * reserves a block (in its transaction), not with every stream. Numbers
 * reserved and unused before a restart are skipped. */
typedef struct ssess {
    uint64_t next_r;   /* the next number to use (0: load from tm_sessions) */
    uint64_t reserved; /* tm_sessions.next_r, committed or queued */
} ssess;

/* ---- operations ------------------------------------------------------------ */

enum op_kind {
    OP_APPEND, OP_CLOSE, OP_STREAM_CREATE, OP_STREAM_REOPEN, OP_SESSION_CREATE,
    OP_SESSION_TOUCH, OP_SESSION_ATTRS, OP_SESSION_DELETE, OP_REQ_BEGIN, OP_SCHEMA, OP_EXPIRE,
};

typedef struct op {
    tm_wop w;         /* first: the writer's part (writer.h): status, seq, callback */
    enum op_kind kind;
    sstream *ss;
    blob *b;          /* OP_APPEND: the event bytes */
    unsigned flags;
    char *request_key;
    tm_effect_fn effect;
    void *effect_ud;
    char *fallback;
    size_t fallback_len;
    int64_t ms;
    uint64_t next_r;
    tm_session_rec srec;
    tm_request_rec rrec;
    char *sql;
    sstream **doomed; /* OP_SESSION_DELETE: cache entries to free */
    size_t ndoomed;
    char **expired;   /* OP_EXPIRE: ids deleted */
    size_t nexpired;
    struct op *begun; /* OP_APPEND: the record begun in this batch (pair_records) */
    int deferred;     /* OP_REQ_BEGIN: its row is written, completed, by its append */
} op;

typedef struct sqstore {
    tm_store base;
    tm_store_options opt;
    char *path;
    int64_t epoch_id;
    char (*epochs)[TM_EPOCH_LEN + 1]; /* epoch text by id (index = id) */
    int64_t nepochs;

    /* cache */
    pthread_mutex_t c_mu;
    tm_map *streams;  /* "session/name" -> sstream */
    tm_map *sessions; /* id -> ssess */
    int64_t next_sid;
    uint64_t resets;  /* reset_cache runs: a counter read before one is stale */
    int failed;       /* a commit failed and no probe has succeeded since: refuse writes */
    atomic_int corrupt; /* the database is damaged: refuse writes for good */
    sstream *lru_head, *lru_tail; /* idle closed streams (c_mu) */
    size_t lru_n;

    /* files beside the database, and the durable head */
    int lock_fd;
    tm_head_file head;
    char dbid[17];
    char *wal_path;
    uint64_t commits;            /* writer: batch transactions committed (tm_meta 'commits') */
    atomic_ullong commits_done;  /* the same, published after each COMMIT */
    atomic_int wal_big;          /* the WAL passed WAL_FORCE: the writer should restart it */
    long long page_size;

    /* the writer (writer.h) and what its thread owns */
    tm_writer *writer;
    sqlite3 *wdb;
    sqlite3_stmt *ins_event, *upd_stream, *ins_stream, *upd_commits;
    /* Prepared once too (a per-call prepare cost more than its step):
     * sessions and records made per call, a session's rows deleted. */
    sqlite3_stmt *ins_session, *ins_request, *ins_request_done, *del_rows[5];
    /* ... and what every call's batch runs: its transaction's ends, its
     * record completed, its session's stream count. */
    sqlite3_stmt *begin_tx, *commit_tx, *upd_request, *upd_next_r;
    struct sstream *w_touched;      /* streams the batch being committed touched */
    struct stream_update *w_ups;    /* their new bounds, once written */
    size_t w_nups;

    /* checkpointer: keeps WAL checkpoints out of the writer's commits */
    pthread_t ckpt;
    pthread_mutex_t ck_mu; /* held while a checkpoint runs (one at a time: SQLite's rule) */
    pthread_mutex_t k_mu;
    pthread_cond_t k_cv;
    int k_running;

    /* read pool */
    pthread_mutex_t r_mu;
    pthread_cond_t r_cv;
    sqlite3 *rfree[READ_CONNS];
    int nrfree, nropen;
} sqstore;

static blob *blob_new(const void *p, size_t n)
{
    blob *b = malloc(sizeof *b + n + 1);
    if (b) {
        atomic_init(&b->refs, 1);
        b->len = n;
        if (n)
            memcpy(b->data, p, n);
        b->data[n] = '\0';
    }
    return b;
}

static blob *blob_ref(blob *b)
{
    if (b)
        atomic_fetch_add(&b->refs, 1);
    return b;
}

static void blob_unref(blob *b)
{
    if (b && atomic_fetch_sub(&b->refs, 1) == 1)
        free(b);
}

static void skey(char *out, size_t n, const char *session, const char *name)
{
    tm_strjoin(out, n, session, "/", name, (const char *)NULL);
}

static const char *epoch_text(sqstore *q, int64_t id)
{
    return id >= 0 && id < q->nepochs ? q->epochs[id] : "";
}

/* Every SQLite result of the store passes here: a damaged file
 * (SQLITE_CORRUPT, SQLITE_NOTADB) stops all further writes into it, since
 * appending into a damaged b-tree can only spread the damage. Returns the
 * TIDEMARK_E* code of rc. */
static int note_rc(sqstore *q, int rc)
{
    int p = rc & 0xff;
    if ((p == SQLITE_CORRUPT || p == SQLITE_NOTADB) && !atomic_exchange(&q->corrupt, 1)) {
        TM_ERROR("sqlite: database %s is damaged (%s): the store refuses every further write; "
                 "stop the server and restore the database from a backup",
                 q->path, sqlite3_errstr(rc));
        tm_counter_inc(q->base.m.corrupt);
    }
    return tm_sqlite_err(rc);
}

/* Whether writes are refused now; caller holds c_mu. */
static int refusing(sqstore *q)
{
    TM_ASSERT_HELD(&q->c_mu);
    return q->failed || atomic_load(&q->corrupt);
}

/* ---- idle closed streams: an LRU bound on what finished calls keep cached ---- */

static void lru_unlink(sqstore *q, sstream *s)
{
    if (!s->in_lru)
        return;
    if (s->lru_prev)
        s->lru_prev->lru_next = s->lru_next;
    else
        q->lru_head = s->lru_next;
    if (s->lru_next)
        s->lru_next->lru_prev = s->lru_prev;
    else
        q->lru_tail = s->lru_prev;
    s->lru_prev = s->lru_next = NULL;
    s->in_lru = 0;
    q->lru_n--;
}

static void sstream_free(sstream *s);

/* A stream nobody writes to any more (durably closed, no op queued) goes to
 * the LRU's young end; past CLOSED_KEEP the oldest is dropped from the cache.
 * Nothing outside c_mu holds an entry, and a reader that needs it again
 * reloads it from tm_streams. Caller holds c_mu. */
static void lru_note(sqstore *q, sstream *s)
{
    TM_ASSERT_HELD(&q->c_mu);
    if (s->doomed || !s->durable || !s->closed || s->pending > 0 || s->touched) {
        lru_unlink(q, s);
        return;
    }
    lru_unlink(q, s);
    s->lru_prev = q->lru_tail;
    if (q->lru_tail)
        q->lru_tail->lru_next = s;
    else
        q->lru_head = s;
    q->lru_tail = s;
    s->in_lru = 1;
    q->lru_n++;
    while (q->lru_n > CLOSED_KEEP) {
        sstream *old = q->lru_head;
        lru_unlink(q, old);
        tm_map_del(q->streams, old->key);
        sstream_free(old);
    }
}

/* An op pointing at s was queued; caller holds c_mu. */
static void pending_inc(sqstore *q, sstream *s)
{
    TM_ASSERT_HELD(&q->c_mu);
    s->pending++;
    lru_unlink(q, s);
}

/* ---- read connections ------------------------------------------------------ */

/* vfs: NULL for the default. */
static int open_conn(sqstore *q, int readonly, const char *vfs, sqlite3 **out)
{
    int flags = readonly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    flags |= SQLITE_OPEN_NOMUTEX;
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(q->path, &db, flags, vfs);
    if (rc != SQLITE_OK) {
        TM_ERROR("sqlite: cannot open %s: %s", q->path, db ? sqlite3_errmsg(db) : "?");
        sqlite3_close(db);
        return TIDEMARK_EIO;
    }
    sqlite3_busy_timeout(db, 10000);
    *out = db;
    return 0;
}

static sqlite3 *rconn_get(sqstore *q)
{
    pthread_mutex_lock(&q->r_mu);
    for (;;) {
        if (q->nrfree > 0) {
            sqlite3 *db = q->rfree[--q->nrfree];
            pthread_mutex_unlock(&q->r_mu);
            return db;
        }
        if (q->nropen < READ_CONNS) {
            q->nropen++;
            pthread_mutex_unlock(&q->r_mu);
            sqlite3 *db;
            if (open_conn(q, 1, NULL, &db) == 0)
                return db;
            pthread_mutex_lock(&q->r_mu);
            q->nropen--;
            pthread_mutex_unlock(&q->r_mu);
            return NULL;
        }
        pthread_cond_wait(&q->r_cv, &q->r_mu);
    }
}

/* A read connection's statements every call runs are kept with it
 * (tm_sqlite_kept) and reset (rstmt_done) before the connection goes back,
 * so none holds a read snapshot open. */
static void rstmt_done(sqlite3_stmt *s)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

static void rconn_put(sqstore *q, sqlite3 *db)
{
    pthread_mutex_lock(&q->r_mu);
    q->rfree[q->nrfree++] = db;
    pthread_cond_signal(&q->r_cv);
    pthread_mutex_unlock(&q->r_mu);
}

/* ---- cache ------------------------------------------------------------------ */

static void tail_drop_below(sstream *s, uint64_t first)
{
    /* The ring holds the newest tail_n seqs ending at next_seq-1. */
    while (s->tail_n > 0) {
        uint64_t oldest = s->next_seq - s->tail_n;
        if (oldest >= first)
            break;
        tevent *e = &s->tail[oldest % TAIL_CAP];
        blob_unref(e->b);
        e->b = NULL;
        s->tail_n--;
    }
}

/* An appended effect's event is in the tail without bytes until its commit
 * says which were stored (its result, or the fallback if the effect failed:
 * apply_append swapped o->b): from then on live reads serve them from
 * memory too. Caller holds c_mu; only while the seq is still in the ring. */
static void tail_fill(sstream *s, uint64_t seq, blob *b)
{
    tevent *e = s->tail_n ? &s->tail[seq % TAIL_CAP] : NULL;
    if (e && seq >= s->next_seq - s->tail_n && e->seq == seq && !e->b)
        e->b = blob_ref(b);
}

static void sstream_free(sstream *s)
{
    if (!s)
        return;
    for (size_t i = 0; s->tail && i < TAIL_CAP; i++)
        blob_unref(s->tail[i].b);
    free(s->tail);
    free(s);
}

/* Find a stream in the cache, loading it from the database. Caller holds
 * c_mu (released and retaken around the load). */
static sstream *stream_get(sqstore *q, const char *session, const char *name)
{
    TM_ASSERT_HELD(&q->c_mu);
    char key[96];
    skey(key, sizeof key, session, name);
    sstream *s = tm_map_get(q->streams, key);
    if (s) {
        if (s->in_lru)
            lru_note(q, s); /* used again: to the young end */
        return s;
    }
    pthread_mutex_unlock(&q->c_mu);
    sqlite3 *db = rconn_get(q);
    sstream *n = NULL;
    if (db) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db,
                               "SELECT sid, head, first_retained, closed, trimmed_epoch FROM "
                               "tm_streams WHERE session = ?1 AND name = ?2",
                               -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_text(st, 1, session, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
            int r = sqlite3_step(st);
            if (r != SQLITE_ROW && r != SQLITE_DONE)
                note_rc(q, r);
            if (r == SQLITE_ROW && (n = calloc(1, sizeof *n)) != NULL) {
                n->durable = 1;
                n->sid = sqlite3_column_int64(st, 0);
                n->head = (uint64_t)sqlite3_column_int64(st, 1);
                n->next_seq = n->head + 1;
                n->first = (uint64_t)sqlite3_column_int64(st, 2);
                n->closed = n->closing = sqlite3_column_int(st, 3);
                const unsigned char *te = sqlite3_column_text(st, 4);
                tm_strjoin(n->trimmed_epoch, sizeof n->trimmed_epoch, te ? (const char *)te : "",
                           (const char *)NULL);
                tm_strjoin(n->session, sizeof n->session, session, (const char *)NULL);
                tm_strjoin(n->name, sizeof n->name, name, (const char *)NULL);
                tm_strjoin(n->key, sizeof n->key, key, (const char *)NULL);
            }
            sqlite3_finalize(st);
        }
        rconn_put(q, db);
    }
    pthread_mutex_lock(&q->c_mu);
    s = tm_map_get(q->streams, key);
    if (s) { /* loaded concurrently */
        free(n);
        return s;
    }
    if (n && tm_map_put(q->streams, key, n) != 0) {
        free(n);
        n = NULL;
    }
    if (n)
        lru_note(q, n); /* a finished stream read again: bounded like the others */
    return n;
}

/* ---- queue ------------------------------------------------------------------- */

static void op_free(op *o)
{
    blob_unref(o->b);
    free(o->request_key);
    free(o->fallback);
    free(o->sql);
    tm_session_rec_clear(&o->srec);
    tm_request_rec_clear(&o->rrec);
    for (size_t i = 0; i < o->ndoomed; i++)
        sstream_free(o->doomed[i]);
    free(o->doomed);
    for (size_t i = 0; i < o->nexpired; i++)
        free(o->expired[i]);
    free(o->expired);
    free(o);
}

static op *op_next(const op *o) { return (op *)o->w.q.next; }

static void enqueue(sqstore *q, op *o) { tm_writer_push(q->writer, &o->w); }

/* Queue o and wait until the writer committed it. Returns its status; o is
 * freed unless keep is set. */
static int run_sync(sqstore *q, op *o, int keep)
{
    int rc = tm_writer_run(q->writer, &o->w);
    if (!keep)
        op_free(o);
    return rc;
}

/* ---- the writer ---------------------------------------------------------------- */

static int wexec(sqstore *q, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(q->wdb, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        TM_ERROR("sqlite: %s: %s", sql, err ? err : "?");
        sqlite3_free(err);
    }
    return note_rc(q, rc);
}

static int step_done(sqstore *q, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : note_rc(q, rc);
}

/* step_done for a statement prepared once: reset (and unbound) for its
 * next use instead of finalized. */
static int step_kept(sqstore *q, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? 0 : note_rc(q, rc);
}

/* wexec for a statement prepared once (a batch's BEGIN and COMMIT). */
static int wstep(sqstore *q, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc == SQLITE_DONE)
        return 0;
    TM_ERROR("sqlite: %s: %s", what, sqlite3_errmsg(q->wdb));
    return note_rc(q, rc);
}

/* wexec for a statement every call runs (the effect's savepoint): prepared
 * once per connection (tm_sqlite_kept), not parsed each time. */
static int wexec_kept(sqstore *q, const char *sql)
{
    sqlite3_stmt *st = tm_sqlite_kept(q->wdb, sql);
    return st ? wstep(q, st, sql) : wexec(q, sql);
}

/* A stream this batch writes the row of; moved: its readers are woken
 * after the commit (not so for a stream that was only made). */
static void touch_stream_as(sstream **touched, sstream *s, int moved)
{
    if (!s->touched) {
        s->touched = 1;
        s->batch_head = 0;
        s->batch_closed = -1;
        s->next_touched = *touched;
        *touched = s;
    }
    s->batch_moved |= moved;
}

static void touch_stream(sstream **touched, sstream *s) { touch_stream_as(touched, s, 1); }

static int apply_effect(sqstore *q, op *o)
{
    struct tidemark_txn txn;
    tm_txn_sqlite_init(&txn, q->wdb);
    if (wexec_kept(q, "SAVEPOINT fx") != 0)
        return TIDEMARK_EIO;
    int rc = o->effect(o->effect_ud, &txn);
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "effect_before_commit");
    if (rc)
        wexec_kept(q, "ROLLBACK TO fx");
    wexec_kept(q, "RELEASE fx");
    return rc;
}

/* A record begun and completed in one batch (an inline call: its POST's
 * writes under one hold) is written once, as completed: no row inserted
 * and then updated, no entry in and out of the index of started records.
 * Its begin is left to the append that completes it. Every op's marks are
 * set here (a batch is applied once: a failed one fails whole). */
static void pair_records(op *batch)
{
    enum { PAIR_MAX = 64 };
    op *begins[PAIR_MAX];
    size_t nb = 0;
    for (op *o = batch; o; o = op_next(o)) {
        o->begun = NULL;
        o->deferred = 0;
        if (o->kind == OP_REQ_BEGIN && nb < PAIR_MAX)
            begins[nb++] = o;
        if (o->kind != OP_APPEND || !o->request_key)
            continue;
        for (size_t i = nb; i-- > 0;) {
            op *b = begins[i];
            if (b && strcmp(b->rrec.key, o->request_key) == 0 &&
                strcmp(b->rrec.session, o->ss->session) == 0) {
                b->deferred = 1;
                o->begun = b;
                begins[i] = NULL;
                break;
            }
        }
    }
}

/* The record of o->begun, completed with the bytes o commits. OUT
 * *existed: the row was there already (its begin is then EEXIST, as its
 * own insert would have said, and the row is updated as before). */
static int insert_completed(sqstore *q, op *o, int *existed)
{
    const tm_request_rec *r = &o->begun->rrec;
    sqlite3_stmt *st = q->ins_request_done;
    sqlite3_bind_text(st, 1, r->session, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, r->tool, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, r->stream, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, r->message, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 6, o->b->data, (int)o->b->len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, o->ms);
    int rc = step_kept(q, st);
    *existed = rc == 0 && sqlite3_changes(q->wdb) == 0;
    if (*existed)
        o->begun->w.q.status = TIDEMARK_EEXIST;
    return rc;
}

static int apply_append(sqstore *q, op *o, sstream **touched)
{
    if (o->effect && apply_effect(q, o) != 0) {
        /* The effect failed: its rows are gone, write the fallback. */
        blob *fb = blob_new(o->fallback ? o->fallback : "", o->fallback_len);
        if (!fb)
            return TIDEMARK_ENOMEM;
        blob_unref(o->b);
        o->b = fb;
    }
    sqlite3_stmt *st = q->ins_event;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, o->ss->sid);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)o->w.seq);
    sqlite3_bind_int64(st, 3, q->epoch_id);
    sqlite3_bind_int64(st, 4, o->ms);
    sqlite3_bind_blob(st, 5, o->b->data, (int)o->b->len, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE) {
        TM_ERROR("sqlite: insert event: %s", sqlite3_errmsg(q->wdb));
        return note_rc(q, rc);
    }
    int existed = 1;
    if (o->begun && insert_completed(q, o, &existed) != 0)
        return TIDEMARK_EIO;
    if (o->request_key && existed) {
        sqlite3_stmt *u = q->upd_request;
        sqlite3_bind_blob(u, 1, o->b->data, (int)o->b->len, SQLITE_STATIC);
        sqlite3_bind_int64(u, 2, o->ms);
        sqlite3_bind_text(u, 3, o->ss->session, -1, SQLITE_STATIC);
        sqlite3_bind_text(u, 4, o->request_key, -1, SQLITE_STATIC);
        step_kept(q, u); /* (as before: its outcome is the event's) */
    }
    touch_stream(touched, o->ss);
    if (o->w.seq > o->ss->batch_head)
        o->ss->batch_head = o->w.seq;
    if (o->flags & TM_APPEND_FINAL)
        o->ss->batch_closed = 1;
    return 0;
}

/* A new stream's row is written once, with its bounds at the batch's end
 * (flush_streams): not inserted here and then updated there. */
static int apply_stream_create(sqstore *q, op *o, sstream **touched)
{
    touch_stream_as(touched, o->ss, 0);
    o->ss->batch_new = 1;
    if (o->next_r) {
        sqlite3_stmt *u = q->upd_next_r;
        sqlite3_bind_int64(u, 1, (sqlite3_int64)o->next_r);
        sqlite3_bind_text(u, 2, o->ss->session, -1, SQLITE_STATIC);
        return step_kept(q, u);
    }
    return 0;
}

/* A session's rows, in the order of q->del_rows (the session's own last:
 * sqlite3_changes then says whether it existed). */
static const char *const del_rows_sql[5] = {
    "DELETE FROM tm_events WHERE sid IN (SELECT sid FROM tm_streams WHERE session = ?1)",
    "DELETE FROM tm_streams WHERE session = ?1",
    "DELETE FROM tm_requests WHERE session = ?1",
    "DELETE FROM tm_session_attrs WHERE session = ?1",
    "DELETE FROM tm_sessions WHERE id = ?1",
};

static int delete_session_rows(sqstore *q, const char *id)
{
    for (size_t i = 0; i < sizeof q->del_rows / sizeof *q->del_rows; i++) {
        sqlite3_bind_text(q->del_rows[i], 1, id, -1, SQLITE_STATIC);
        int rc = step_kept(q, q->del_rows[i]);
        if (rc)
            return rc;
    }
    return 0;
}

static int apply_expire(sqstore *q, op *o)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->wdb, "SELECT id FROM tm_sessions WHERE last_seen_ms < ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return TIDEMARK_EIO;
    sqlite3_bind_int64(st, 1, o->ms);
    size_t cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (o->nexpired == cap) {
            cap = cap ? cap * 2 : 16;
            char **v = realloc(o->expired, cap * sizeof *v);
            if (!v)
                break;
            o->expired = v;
        }
        o->expired[o->nexpired++] = strdup((const char *)sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    for (size_t i = 0; i < o->nexpired; i++)
        if (o->expired[i] && delete_session_rows(q, o->expired[i]) != 0)
            return TIDEMARK_EIO;
    return 0;
}

/* One attribute is one row of tm_session_attrs: a change writes that row
 * only (one JSON column rewritten whole made N changes cost O(N^2) bytes).
 * o->srec: id, client = attribute name, attrs = value (JSON text, checked
 * by the caller; NULL: remove). */
static int apply_set_attr(sqstore *q, op *o)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->wdb, "SELECT 1 FROM tm_sessions WHERE id = ?1", -1, &st, NULL) !=
        SQLITE_OK)
        return TIDEMARK_EIO;
    sqlite3_bind_text(st, 1, o->srec.id, -1, SQLITE_STATIC);
    int r = sqlite3_step(st);
    sqlite3_finalize(st);
    if (r == SQLITE_DONE)
        return TIDEMARK_ENOTFOUND;
    if (r != SQLITE_ROW)
        return note_rc(q, r);
    const char *sql = o->srec.attrs
                          ? "INSERT OR REPLACE INTO tm_session_attrs(session, name, value) "
                            "VALUES(?1, ?2, ?3)"
                          : "DELETE FROM tm_session_attrs WHERE session = ?1 AND name = ?2";
    if (sqlite3_prepare_v2(q->wdb, sql, -1, &st, NULL) != SQLITE_OK)
        return TIDEMARK_EIO;
    sqlite3_bind_text(st, 1, o->srec.id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, o->srec.client, -1, SQLITE_STATIC);
    if (o->srec.attrs)
        sqlite3_bind_text(st, 3, o->srec.attrs, -1, SQLITE_STATIC);
    return step_done(q, st);
}

/* A stream's row with these bounds: inserted if this batch made it, else
 * updated. */
static int write_stream(sqstore *q, sstream *s, uint64_t head, uint64_t first, int closed,
                        const char *te)
{
    sqlite3_stmt *st = s->batch_new ? q->ins_stream : q->upd_stream;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, (sqlite3_int64)head);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)first);
    sqlite3_bind_int(st, 3, closed);
    sqlite3_bind_text(st, 4, te, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, s->sid);
    if (s->batch_new) {
        sqlite3_bind_text(st, 6, s->session, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 7, s->name, -1, SQLITE_STATIC);
    }
    int rc = sqlite3_step(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE) /* still new: flush_streams tries again, or the batch fails */
        return note_rc(q, rc);
    s->batch_new = 0;
    return 0;
}

/* Before rows are deleted by session (OP_SESSION_DELETE of session,
 * OP_EXPIRE: NULL, any): the streams this batch made get their rows now,
 * as they were made, so the delete finds them and their events. */
static int write_new_streams(sqstore *q, sstream *touched, const char *session)
{
    for (sstream *s = touched; s; s = s->next_touched)
        if (s->batch_new && (!session || strcmp(s->session, session) == 0)) {
            int rc = write_stream(q, s, 0, 1, 0, "");
            if (rc)
                return rc;
        }
    return 0;
}

static int apply_op(sqstore *q, op *o, sstream **touched)
{
    sqlite3_stmt *st;
    switch (o->kind) {
    case OP_APPEND:
        return apply_append(q, o, touched);
    case OP_CLOSE:
        touch_stream(touched, o->ss);
        o->ss->batch_closed = 1;
        return 0;
    case OP_STREAM_CREATE:
        return apply_stream_create(q, o, touched);
    case OP_STREAM_REOPEN:
        touch_stream(touched, o->ss);
        o->ss->batch_closed = 0;
        return 0;
    case OP_SESSION_CREATE:
        st = q->ins_session;
        sqlite3_bind_text(st, 1, o->srec.id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, o->srec.protocol_version, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, o->srec.client, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, o->srec.created_ms);
        sqlite3_bind_int64(st, 5, o->srec.last_seen_ms);
        return step_kept(q, st);
    case OP_SESSION_TOUCH:
        if (sqlite3_prepare_v2(q->wdb, "UPDATE tm_sessions SET last_seen_ms = ?1 WHERE id = ?2", -1,
                               &st, NULL) != SQLITE_OK)
            return TIDEMARK_EIO;
        sqlite3_bind_int64(st, 1, o->ms);
        sqlite3_bind_text(st, 2, o->srec.id, -1, SQLITE_STATIC);
        return step_done(q, st);
    case OP_SESSION_ATTRS:
        return apply_set_attr(q, o);
    case OP_SESSION_DELETE: { /* ENOTFOUND from the write itself: no read first */
        int rc = write_new_streams(q, *touched, o->srec.id);
        if (rc == 0)
            rc = delete_session_rows(q, o->srec.id);
        return rc ? rc : sqlite3_changes(q->wdb) == 0 ? TIDEMARK_ENOTFOUND : 0;
    }
    case OP_REQ_BEGIN:
        if (o->deferred) /* written by its append, later in this batch */
            return 0;
        st = q->ins_request;
        sqlite3_bind_text(st, 1, o->rrec.session, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, o->rrec.key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, o->rrec.tool, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, o->rrec.stream, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, o->rrec.message, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 6, o->ms);
        if (step_kept(q, st) != 0)
            return TIDEMARK_EIO;
        return sqlite3_changes(q->wdb) == 0 ? TIDEMARK_EEXIST : 0;
    case OP_SCHEMA:
        return wexec(q, o->sql);
    case OP_EXPIRE: {
        int rc = write_new_streams(q, *touched, NULL);
        return rc ? rc : apply_expire(q, o);
    }
    }
    return TIDEMARK_EINVAL;
}

/* Trim one stream by count; runs inside the batch transaction. Sets the
 * stream's new first and trimmed epoch in OUT first/te. */
static int trim_count(sqstore *q, sstream *s, uint64_t head, uint64_t *first, char *te)
{
    uint64_t nf = tm_retain_first_by_count(&q->opt, *first, head);
    if (nf <= *first)
        return 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->wdb, "SELECT epoch FROM tm_events WHERE sid = ?1 AND seq = ?2", -1,
                           &st, NULL) != SQLITE_OK)
        return TIDEMARK_EIO;
    sqlite3_bind_int64(st, 1, s->sid);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)(nf - 1));
    if (sqlite3_step(st) == SQLITE_ROW)
        tm_strjoin(te, TM_EPOCH_LEN + 1, epoch_text(q, sqlite3_column_int64(st, 0)),
                   (const char *)NULL);
    sqlite3_finalize(st);
    if (sqlite3_prepare_v2(q->wdb, "DELETE FROM tm_events WHERE sid = ?1 AND seq < ?2", -1, &st,
                           NULL) != SQLITE_OK)
        return TIDEMARK_EIO;
    sqlite3_bind_int64(st, 1, s->sid);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)nf);
    int rc = step_done(q, st);
    if (rc == 0)
        *first = nf;
    return rc;
}

typedef struct stream_update {
    sstream *s;
    uint64_t head, first;
    int closed;
    int wake;
    char te[TM_EPOCH_LEN + 1];
} stream_update;

/* Write the new bounds of every touched stream. OUT ups (caller frees). */
static int flush_streams(sqstore *q, sstream *touched, stream_update **ups, size_t *nups)
{
    size_t n = 0;
    for (sstream *s = touched; s; s = s->next_touched)
        n++;
    *ups = calloc(n ? n : 1, sizeof **ups);
    *nups = 0;
    if (!*ups)
        return TIDEMARK_ENOMEM;
    pthread_mutex_lock(&q->c_mu);
    for (sstream *s = touched; s; s = s->next_touched) {
        stream_update *u = &(*ups)[(*nups)++];
        u->s = s;
        u->head = s->batch_head > s->head ? s->batch_head : s->head;
        u->first = s->first;
        u->closed = s->batch_closed >= 0 ? s->batch_closed : s->closed;
        u->wake = s->batch_moved;
        memcpy(u->te, s->trimmed_epoch, sizeof u->te);
    }
    pthread_mutex_unlock(&q->c_mu);
    for (size_t i = 0; i < *nups; i++) {
        stream_update *u = &(*ups)[i];
        int rc = trim_count(q, u->s, u->head, &u->first, u->te);
        if (rc)
            return rc;
        rc = write_stream(q, u->s, u->head, u->first, u->closed, u->te);
        if (rc)
            return rc;
    }
    return 0;
}

/* Age retention: trim, per stream, the events older than retain_ms. */
static void age_trim(sqstore *q)
{
    int64_t cutoff = tm_retain_cutoff_ms(&q->opt, tm_wall_ms());
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->wdb,
                           "SELECT s.sid, s.session, s.name, MAX(e.seq) FROM tm_streams s JOIN "
                           "tm_events e ON e.sid = s.sid AND e.seq >= s.first_retained AND "
                           "e.created_ms < ?1 GROUP BY s.sid",
                           -1, &st, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_int64(st, 1, cutoff);
    typedef struct { int64_t sid; uint64_t last; char key[96]; } cut;
    cut *cuts = NULL;
    size_t n = 0, cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            cut *v = realloc(cuts, cap * sizeof *v);
            if (!v)
                break;
            cuts = v;
        }
        cuts[n].sid = sqlite3_column_int64(st, 0);
        skey(cuts[n].key, sizeof cuts[n].key, (const char *)sqlite3_column_text(st, 1),
             (const char *)sqlite3_column_text(st, 2));
        cuts[n].last = (uint64_t)sqlite3_column_int64(st, 3);
        n++;
    }
    sqlite3_finalize(st);
    if (n == 0) {
        free(cuts);
        return;
    }
    if (wexec(q, "BEGIN IMMEDIATE") != 0) {
        free(cuts);
        return;
    }
    int ok = 1;
    char (*tes)[TM_EPOCH_LEN + 1] = calloc(n, sizeof *tes);
    for (size_t i = 0; ok && tes && i < n; i++) {
        char sid[32], last[32], nf[32];
        snprintf(sid, sizeof sid, "%lld", (long long)cuts[i].sid);
        snprintf(last, sizeof last, "%llu", (unsigned long long)cuts[i].last);
        snprintf(nf, sizeof nf, "%llu", (unsigned long long)cuts[i].last + 1);
        json_t *rows = NULL;
        const char *a2[2] = {sid, last};
        if (tm_sqlite_query_json(q->wdb, "SELECT epoch FROM tm_events WHERE sid = ?1 AND seq = ?2",
                                 a2, 2, &rows) == 0) {
            json_t *e = json_object_get(json_array_get(rows, 0), "epoch");
            tm_strjoin(tes[i], TM_EPOCH_LEN + 1, epoch_text(q, json_integer_value(e)),
                       (const char *)NULL);
        }
        json_decref(rows);
        const char *a3[3] = {sid, nf, tes[i]};
        ok = tm_sqlite_exec_args(q->wdb, "DELETE FROM tm_events WHERE sid = ?1 AND seq < ?2", a3, 2) == 0 &&
             tm_sqlite_exec_args(q->wdb,
                                 "UPDATE tm_streams SET first_retained = ?2, trimmed_epoch = ?3 "
                                 "WHERE sid = ?1",
                                 a3, 3) == 0;
    }
    if (ok && tes && wexec(q, "COMMIT") == 0) {
        pthread_mutex_lock(&q->c_mu);
        for (size_t i = 0; i < n; i++) {
            sstream *s = tm_map_get(q->streams, cuts[i].key);
            if (s && s->sid == cuts[i].sid && cuts[i].last + 1 > s->first) {
                s->first = cuts[i].last + 1;
                memcpy(s->trimmed_epoch, tes[i], TM_EPOCH_LEN + 1);
                tail_drop_below(s, s->first);
            }
        }
        pthread_mutex_unlock(&q->c_mu);
    } else {
        wexec(q, "ROLLBACK");
    }
    free(tes);
    free(cuts);
}

/* Clear the per-batch marks of the streams a batch touched. Caller holds c_mu. */
static void untouch(sstream *touched)
{
    for (sstream *s = touched; s;) {
        sstream *n = s->next_touched;
        s->touched = 0;
        s->batch_new = 0;
        s->batch_moved = 0;
        s->next_touched = NULL;
        s = n;
    }
}

/* settle hook. Committed (rc 0): publish the new bounds, name the streams
 * to wake. Failed (rc): nothing of the batch is in the database; every op
 * of it lets go of its stream. */
static void sq_settle(void *be, tm_wop *batch, int rc)
{
    sqstore *q = be;
    pthread_mutex_lock(&q->c_mu);
    for (op *o = (op *)batch; rc == 0 && o; o = op_next(o))
        if (o->kind == OP_APPEND && o->effect)
            tail_fill(o->ss, o->w.seq, o->b);
    for (size_t i = 0; rc == 0 && i < q->w_nups; i++) {
        stream_update *u = &q->w_ups[i];
        sstream *s = u->s;
        s->head = u->head;
        s->closed = u->closed;
        s->first = u->first;
        memcpy(s->trimmed_epoch, u->te, sizeof s->trimmed_epoch);
        tail_drop_below(s, s->first);
    }
    untouch(q->w_touched);
    q->w_touched = NULL;
    for (op *o = (op *)batch; o; o = op_next(o)) {
        if (rc == 0 && o->kind == OP_STREAM_CREATE)
            o->ss->durable = 1;
        if (rc == 0 && o->kind == OP_SESSION_DELETE) {
            free(tm_map_del(q->sessions, o->srec.id));
            tm_writer_touch_forget(q->writer, o->srec.id);
        }
        if (o->ss)
            o->ss->pending--;
    }
    pthread_mutex_unlock(&q->c_mu);
    /* Named without c_mu (appenders wait for it): the entries stay until
     * sq_after, the names with them. */
    for (size_t i = 0; rc == 0 && i < q->w_nups; i++)
        if (q->w_ups[i].wake)
            tm_writer_wake(q->writer, q->w_ups[i].s->session, q->w_ups[i].s->name, q->w_ups[i].head);
}

/* after hook: only now may a finished stream leave the cache (the listener
 * used its names). */
static void sq_after(void *be, tm_wop *batch)
{
    (void)batch;
    sqstore *q = be;
    pthread_mutex_lock(&q->c_mu);
    for (size_t i = 0; i < q->w_nups; i++)
        lru_note(q, q->w_ups[i].s);
    pthread_mutex_unlock(&q->c_mu);
    free(q->w_ups);
    q->w_ups = NULL;
    q->w_nups = 0;
}

static void sq_release(tm_wop *o) { op_free((op *)o); }

/* A statement error that leaves the transaction unusable (the disk, the
 * file, memory), as opposed to one op's own refusal (a duplicate request
 * record, a bad application schema), which undoes only that statement. */
static int hard_error(sqstore *q)
{
    if (sqlite3_get_autocommit(q->wdb)) /* SQLite rolled the transaction back */
        return 1;
    switch (sqlite3_errcode(q->wdb) & 0xff) {
    case SQLITE_FULL: case SQLITE_IOERR: case SQLITE_CORRUPT: case SQLITE_NOTADB:
    case SQLITE_NOMEM: case SQLITE_CANTOPEN: case SQLITE_READONLY: case SQLITE_PROTOCOL:
        return 1;
    default:
        return 0;
    }
}

static void rollback_quietly(sqstore *q)
{
    if (!sqlite3_get_autocommit(q->wdb))
        sqlite3_exec(q->wdb, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_reset(q->ins_event);
    sqlite3_reset(q->upd_stream);
    sqlite3_reset(q->ins_stream);
    sqlite3_reset(q->upd_commits);
}

/* commit hook: the batch as one transaction. The commit counter (tm_meta
 * 'commits') rides in it: the head file records it, and an open that finds
 * less than the head file says was committed knows acknowledged writes are
 * missing. */
static int sq_commit(void *be, tm_wop *batch, size_t n)
{
    (void)n;
    sqstore *q = be;
    if (atomic_load(&q->corrupt))
        return TIDEMARK_EIO;
    int rc = wstep(q, q->begin_tx, "BEGIN IMMEDIATE");
    if (rc)
        return rc;
    pair_records((op *)batch);
    for (op *o = (op *)batch; o && rc == 0; o = op_next(o)) {
        o->w.q.status = apply_op(q, o, &q->w_touched);
        /* An append never fails alone: its seq was handed out. */
        if (o->w.q.status && (o->kind == OP_APPEND || hard_error(q)))
            rc = o->w.q.status;
    }
    if (rc == 0)
        rc = flush_streams(q, q->w_touched, &q->w_ups, &q->w_nups);
    if (rc == 0) {
        sqlite3_reset(q->upd_commits);
        sqlite3_bind_int64(q->upd_commits, 1, (sqlite3_int64)(q->commits + 1));
        int r = sqlite3_step(q->upd_commits);
        rc = r == SQLITE_DONE ? 0 : note_rc(q, r);
    }
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "append_before_commit");
    TM_TEST_DELAY("TIDEMARK_COMMIT_DELAY_MS");
    if (rc == 0)
        rc = wstep(q, q->commit_tx, "COMMIT");
    if (rc) {
        rollback_quietly(q);
        free(q->w_ups); /* nothing of it is published */
        q->w_ups = NULL;
        q->w_nups = 0;
        return rc;
    }
    q->commits++;
    atomic_store(&q->commits_done, q->commits);
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "commit_before_emit");
    return 0;
}

typedef struct recover_ctx {
    sstream **v;
    size_t n;
} recover_ctx;

static void collect_stream(const char *k, void *v, void *ud)
{
    (void)k;
    recover_ctx *c = ud;
    c->v[c->n++] = v;
}

static void reset_next_r(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    ((ssess *)v)->next_r = ((ssess *)v)->reserved = 0; /* reloaded by the next stream_open */
}

/* Back to the durable state after a failure, with no op queued that
 * points at a stream (all were failed; writes were refused since). Seqs
 * handed out above a stream's durable head are handed out again: their
 * events were never committed and so, commit then emit, never sent (under
 * emit_early they may have been: docs/design.md, known limitations).
 * Caller holds c_mu. */
static void reset_cache(sqstore *q)
{
    TM_ASSERT_HELD(&q->c_mu);
    recover_ctx c = {calloc(tm_map_count(q->streams) + 1, sizeof(sstream *)), 0};
    if (c.v)
        tm_map_each(q->streams, collect_stream, &c);
    for (size_t i = 0; i < c.n; i++) {
        sstream *s = c.v[i];
        if (!s->durable) { /* its create failed: it does not exist */
            if (s->pending == 0) {
                lru_unlink(q, s);
                tm_map_del(q->streams, s->key);
                sstream_free(s);
            }
            continue;
        }
        while (s->tail_n > 0 && s->next_seq - 1 > s->head) {
            tevent *e = &s->tail[(s->next_seq - 1) % TAIL_CAP];
            blob_unref(e->b);
            e->b = NULL;
            s->tail_n--;
            s->next_seq--;
        }
        s->next_seq = s->head + 1;
        s->closing = s->closed;
    }
    free(c.v);
    tm_map_each(q->sessions, reset_next_r, NULL);
    q->resets++;
}

/* refuse hook: a commit failed (on), or a probe succeeded (off: the caches
 * go back to the durable state first). Under c_mu, where callers check it
 * before they hand out a seq. */
static void sq_refuse(void *be, int on)
{
    sqstore *q = be;
    pthread_mutex_lock(&q->c_mu);
    if (!on)
        reset_cache(q);
    q->failed = on;
    pthread_mutex_unlock(&q->c_mu);
}

static int sq_refusing(void *be)
{
    sqstore *q = be;
    pthread_mutex_lock(&q->c_mu);
    int r = refusing(q);
    pthread_mutex_unlock(&q->c_mu);
    return r;
}

/* probe hook: a small write; a damaged database is never retried. */
static int sq_probe(void *be)
{
    sqstore *q = be;
    if (atomic_load(&q->corrupt))
        return TIDEMARK_EIO;
    rollback_quietly(q);
    char sql[160];
    snprintf(sql, sizeof sql,
             "BEGIN IMMEDIATE; INSERT OR REPLACE INTO tm_meta(k, v) VALUES('probe', '%lld'); COMMIT;",
             (long long)tm_wall_ms());
    int rc = sqlite3_exec(q->wdb, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        note_rc(q, rc);
        rollback_quietly(q);
        return TIDEMARK_EIO;
    }
    return 0;
}

/* After each commit of the writer: how many frames the WAL holds (no I/O). */
static int on_wal(void *ud, sqlite3 *db, const char *name, int frames)
{
    (void)db;
    (void)name;
    sqstore *q = ud;
    if ((long long)frames * q->page_size > WAL_FORCE)
        atomic_store(&q->wal_big, 1);
    return SQLITE_OK;
}

/* between hook, when the WAL grew past WAL_FORCE: a passive checkpoint on
 * the writer's own connection copies the few frames the checkpointer has
 * not (it did the rest), so at the next BEGIN the writer finds the WAL fully
 * copied and starts it over, in place (WAL_LIMIT is above WAL_FORCE). Once
 * per WAL_FORCE bytes, and short: the checkpointer copies behind the writer
 * (CKPT_BUSY_MS). */
static void sq_between(void *be)
{
    sqstore *q = be;
    if (!atomic_exchange(&q->wal_big, 0))
        return;
    int log = -1, done = -1;
    pthread_mutex_lock(&q->ck_mu); /* the checkpointer's pass, if one runs, ends first */
    int rc = sqlite3_wal_checkpoint_v2(q->wdb, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    pthread_mutex_unlock(&q->ck_mu);
    TM_DEBUG("sqlite: writer checkpoint of %s: %s, %d of %d frames", q->path, sqlite3_errstr(rc),
             done, log);
}

static void sq_maintain(void *be) { age_trim(be); }

static const tm_writer_hooks sqlite_writer_hooks = {
    .commit = sq_commit,
    .settle = sq_settle,
    .after = sq_after,
    .release = sq_release,
    .maintain = sq_maintain,
    .between = sq_between,
    .probe = sq_probe,
    .refuse = sq_refuse,
    .refusing = sq_refusing,
};

/* ---- operations (callers) --------------------------------------------------------- */

static op *op_new(enum op_kind k)
{
    op *o = calloc(1, sizeof *o);
    if (o) {
        o->kind = k;
        o->ms = tm_wall_ms();
        o->w.enq_us = tm_now_us();
    }
    return o;
}

static op *session_create_op(const tm_session_rec *rec)
{
    op *o = op_new(OP_SESSION_CREATE);
    if (!o)
        return NULL;
    o->srec.id = tm_strdup(rec->id);
    o->srec.protocol_version = tm_strdup(rec->protocol_version);
    o->srec.client = tm_strdup(rec->client);
    o->srec.created_ms = rec->created_ms;
    o->srec.last_seen_ms = rec->last_seen_ms;
    return o;
}

/* The cache's view of a new session (its stream counter). */
static void session_created(sqstore *q, const tm_session_rec *rec)
{
    tm_writer_touch_note(q->writer, rec->id, rec->last_seen_ms);
    ssess *ss = calloc(1, sizeof *ss);
    if (ss) {
        ss->next_r = ss->reserved = 1;
        pthread_mutex_lock(&q->c_mu);
        free(tm_map_get(q->sessions, rec->id));
        if (tm_map_put(q->sessions, rec->id, ss) != 0)
            free(ss);
        pthread_mutex_unlock(&q->c_mu);
    }
}

static int q_session_create(tm_store *st, const tm_session_rec *rec)
{
    sqstore *q = (sqstore *)st;
    op *o = session_create_op(rec);
    if (!o)
        return TIDEMARK_ENOMEM;
    int rc = run_sync(q, o, 0);
    if (rc == 0)
        session_created(q, rec);
    return rc;
}

/* Queued behind nothing it must wait for: the ops queued after it (its
 * streams and records) are in its batch or a later one. */
static int q_session_create_queued(tm_store *st, const tm_session_rec *rec)
{
    sqstore *q = (sqstore *)st;
    pthread_mutex_lock(&q->c_mu);
    int refused = refusing(q);
    pthread_mutex_unlock(&q->c_mu);
    if (refused)
        return TIDEMARK_EIO;
    op *o = session_create_op(rec);
    if (!o)
        return TIDEMARK_ENOMEM;
    session_created(q, rec);
    enqueue(q, o);
    return 0;
}

/* The attributes of a session as one JSON object (text, keys sorted), or
 * NULL when it has none. */
static int load_attrs(sqstore *q, sqlite3 *db, const char *id, char **out)
{
    *out = NULL;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, "SELECT name, value FROM tm_session_attrs WHERE session = ?1", -1, &s,
                           NULL) != SQLITE_OK)
        return TIDEMARK_EIO;
    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    json_t *o = NULL;
    int r;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        json_t *v = json_loads((const char *)sqlite3_column_text(s, 1), JSON_DECODE_ANY, NULL);
        if (!o)
            o = json_object();
        if (v && o)
            json_object_set_new(o, (const char *)sqlite3_column_text(s, 0), v);
    }
    sqlite3_finalize(s);
    int rc = r == SQLITE_DONE ? 0 : note_rc(q, r);
    if (rc == 0 && o && !(*out = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS)))
        rc = TIDEMARK_ENOMEM;
    json_decref(o);
    return rc;
}

static int q_session_get(tm_store *st, const char *id, tm_session_rec *out)
{
    sqstore *q = (sqstore *)st;
    memset(out, 0, sizeof *out);
    sqlite3 *db = rconn_get(q);
    if (!db)
        return TIDEMARK_EIO;
    sqlite3_stmt *s;
    int rc = TIDEMARK_EIO;
    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL); /* the record and its attributes: one snapshot */
    if (sqlite3_prepare_v2(db,
                           "SELECT id, version, client, created_ms, last_seen_ms "
                           "FROM tm_sessions WHERE id = ?1",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
        int r = sqlite3_step(s);
        if (r == SQLITE_ROW) {
            out->id = tm_strdup((const char *)sqlite3_column_text(s, 0));
            out->protocol_version = tm_strdup((const char *)sqlite3_column_text(s, 1));
            out->client = tm_strdup((const char *)sqlite3_column_text(s, 2));
            out->created_ms = sqlite3_column_int64(s, 3);
            out->last_seen_ms = sqlite3_column_int64(s, 4);
            rc = out->id ? 0 : TIDEMARK_ENOMEM;
        } else if (r == SQLITE_DONE) {
            rc = TIDEMARK_ENOTFOUND;
        } else {
            note_rc(q, r);
        }
        sqlite3_finalize(s);
    }
    if (rc == 0)
        rc = load_attrs(q, db, id, &out->attrs);
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    rconn_put(q, db);
    if (rc)
        tm_session_rec_clear(out);
    return rc;
}

static int q_session_touch(tm_store *st, const char *id, int64_t now_ms)
{
    sqstore *q = (sqstore *)st;
    /* Throttled and asynchronous: last-seen only feeds idle expiry. A
     * session the writer does not know yet is looked up once
     * (TIDEMARK_ENOTFOUND). */
    int first = 0;
    if (!tm_writer_touch_due(q->writer, id, now_ms, &first))
        return 0;
    if (first) {
        sqlite3 *db = rconn_get(q);
        json_t *rows = NULL;
        const char *args[1] = {id};
        int rc = db ? tm_sqlite_query_json(db, "SELECT 1 AS x FROM tm_sessions WHERE id = ?1", args,
                                           1, &rows)
                    : TIDEMARK_EIO;
        if (db)
            rconn_put(q, db);
        size_t n = json_array_size(rows);
        json_decref(rows);
        if (rc || n == 0) {
            tm_writer_touch_forget(q->writer, id);
            return rc ? rc : TIDEMARK_ENOTFOUND;
        }
    }
    op *o = op_new(OP_SESSION_TOUCH);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->srec.id = tm_strdup(id);
    o->ms = now_ms;
    enqueue(q, o);
    return 0;
}

static int q_session_set_attr(tm_store *st, const char *id, const char *name, const char *value)
{
    sqstore *q = (sqstore *)st;
    op *o = op_new(OP_SESSION_ATTRS);
    if (!o)
        return TIDEMARK_ENOMEM;
    if (value) { /* stored as given, so it must be JSON */
        json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
        if (!v) {
            op_free(o);
            return TIDEMARK_EINVAL;
        }
        json_decref(v);
    }
    o->srec.id = tm_strdup(id);
    o->srec.client = tm_strdup(name);
    o->srec.attrs = tm_strdup(value);
    if (!o->srec.id || !o->srec.client || (value && !o->srec.attrs)) {
        op_free(o);
        return TIDEMARK_ENOMEM;
    }
    return run_sync(q, o, 0);
}

/* Session records to fn, by id, until fn says stop (q_sessions_each,
 * q_sessions_with_attr: the ids are read first, so fn may use the store). */
typedef struct with_ids {
    tm_store *st;
    int (*fn)(void *, const tm_session_rec *);
    void *ud;
    int stop;
} with_ids;

static void visit(with_ids *w, const char *id)
{
    tm_session_rec rec;
    if (w->stop || !id || q_session_get(w->st, id, &rec) != 0) /* gone since: skipped */
        return;
    w->stop = w->fn(w->ud, &rec);
    tm_session_rec_clear(&rec);
}

static void visit_id(const char *id, void *val, void *ud)
{
    (void)val;
    visit(ud, id);
}

/* The ids of the sessions with any of names (tm_session_attrs_name), each
 * once, then their records (so fn may use the store). */
static int q_sessions_with_attr(tm_store *st, const char *const *names, size_t n,
                                int (*fn)(void *, const tm_session_rec *), void *ud)
{
    sqstore *q = (sqstore *)st;
    sqlite3 *db = rconn_get(q);
    if (!db)
        return TIDEMARK_EIO;
    tm_map *ids = tm_map_new();
    int rc = ids ? 0 : TIDEMARK_ENOMEM;
    sqlite3_stmt *s = NULL;
    if (rc == 0 && sqlite3_prepare_v2(db, "SELECT session FROM tm_session_attrs WHERE name = ?1", -1,
                                      &s, NULL) != SQLITE_OK)
        rc = TIDEMARK_EIO;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        sqlite3_bind_text(s, 1, names[i], -1, SQLITE_STATIC);
        int r;
        while (rc == 0 && (r = sqlite3_step(s)) == SQLITE_ROW)
            rc = tm_map_put(ids, (const char *)sqlite3_column_text(s, 0), (void *)1);
        if (rc == 0 && r != SQLITE_DONE)
            rc = note_rc(q, r);
        sqlite3_reset(s);
    }
    sqlite3_finalize(s);
    rconn_put(q, db);
    with_ids w = {st, fn, ud, 0};
    if (rc == 0)
        tm_map_each(ids, visit_id, &w);
    tm_map_free(ids);
    return rc;
}

/* Reads the ids first, then each record, so fn may use the store. */
static int q_sessions_each(tm_store *st, int (*fn)(void *, const tm_session_rec *), void *ud)
{
    sqstore *q = (sqstore *)st;
    sqlite3 *db = rconn_get(q);
    if (!db)
        return TIDEMARK_EIO;
    json_t *ids = NULL;
    int rc = tm_sqlite_query_json(db, "SELECT id FROM tm_sessions", NULL, 0, &ids);
    rconn_put(q, db);
    if (rc)
        return rc;
    with_ids w = {st, fn, ud, 0};
    size_t i;
    json_t *row;
    json_array_foreach(ids, i, row)
        visit(&w, json_string_value(json_object_get(row, "id")));
    json_decref(ids);
    return 0;
}

typedef struct doom_ctx {
    const char *prefix;
    size_t len;
    sstream **v;
    size_t n, cap;
} doom_ctx;

static void collect_doomed(const char *k, void *val, void *ud)
{
    doom_ctx *d = ud;
    if (strncmp(k, d->prefix, d->len) != 0)
        return;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        sstream **v = realloc(d->v, cap * sizeof *v);
        if (!v)
            return;
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n++] = val;
}

/* Take a session's streams out of the cache; the writer frees them after the
 * delete commits (earlier queued ops may still point at them). Holds c_mu. */
static void doom_session_streams(sqstore *q, const char *id, op *o)
{
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s/", id);
    doom_ctx d = {prefix, strlen(prefix), NULL, 0, 0};
    tm_map_each(q->streams, collect_doomed, &d);
    for (size_t i = 0; i < d.n; i++) {
        lru_unlink(q, d.v[i]);
        d.v[i]->doomed = 1; /* a batch still settling its appends must not relink it */
        tm_map_del(q->streams, d.v[i]->key);
    }
    o->doomed = d.v;
    o->ndoomed = d.n;
}

/* The delete's op, its session's streams out of the cache; NULL, or *rc. */
static op *session_delete_op(sqstore *q, const char *id, int *rc)
{
    op *o = op_new(OP_SESSION_DELETE);
    if (o && !(o->srec.id = tm_strdup(id))) {
        op_free(o);
        o = NULL;
    }
    *rc = o ? 0 : TIDEMARK_ENOMEM;
    if (!o)
        return NULL;
    pthread_mutex_lock(&q->c_mu);
    if (refusing(q))
        *rc = TIDEMARK_EIO;
    else
        doom_session_streams(q, id, o);
    pthread_mutex_unlock(&q->c_mu);
    if (*rc) {
        op_free(o);
        return NULL;
    }
    return o;
}

/* TIDEMARK_ENOTFOUND comes from the delete itself (no session row went),
 * not from a read first: a read on another connection cost more than the
 * write, and missed a session whose creation was still queued. */
static int q_session_delete(tm_store *st, const char *id)
{
    sqstore *q = (sqstore *)st;
    int rc;
    op *o = session_delete_op(q, id, &rc);
    return o ? run_sync(q, o, 0) : rc;
}

/* Queued behind what is queued for the session (FIFO), waited for by no
 * one: deletes of sessions nobody names any more commit in the batches of
 * other writes instead of a transaction each. */
static int q_session_delete_queued(tm_store *st, const char *id)
{
    sqstore *q = (sqstore *)st;
    int rc;
    op *o = session_delete_op(q, id, &rc);
    if (o)
        enqueue(q, o);
    return rc;
}

/* A session's stream counter from tm_sessions, into the cache. Called and
 * returns with c_mu held, unless it fails (then c_mu is let go). Read with
 * c_mu let go: if the cache was reset meanwhile (reset_cache), what was read
 * may be older than what has been committed since, so it is read again.
 * OUT *out: the cache's entry. */
static int load_next_r(sqstore *q, const char *session, ssess **out)
{
    uint64_t resets = q->resets;
    pthread_mutex_unlock(&q->c_mu);
    json_t *rows = NULL;
    sqlite3 *db = rconn_get(q);
    const char *args[1] = {session};
    int rc = db ? tm_sqlite_query_json(db, "SELECT next_r FROM tm_sessions WHERE id = ?1", args, 1,
                                       &rows)
                : TIDEMARK_EIO;
    if (db)
        rconn_put(q, db);
    json_t *row = json_array_get(rows, 0);
    uint64_t nr = row ? (uint64_t)json_integer_value(json_object_get(row, "next_r")) : 0;
    json_decref(rows);
    if (rc)
        return rc;
    if (!nr)
        return TIDEMARK_ENOTFOUND;
    pthread_mutex_lock(&q->c_mu);
    if (q->resets != resets)
        return load_next_r(q, session, out);
    ssess *ss = tm_map_get(q->sessions, session);
    if (!ss) {
        ss = calloc(1, sizeof *ss);
        if (!ss || tm_map_put(q->sessions, session, ss) != 0) {
            free(ss);
            pthread_mutex_unlock(&q->c_mu);
            return TIDEMARK_ENOMEM;
        }
    }
    if (ss->next_r < nr)
        ss->next_r = nr;
    if (ss->reserved < nr)
        ss->reserved = nr;
    *out = ss;
    return 0;
}

static int q_stream_open(tm_store *st, const char *session, const char *name,
                         char out[TM_STREAM_MAX])
{
    sqstore *q = (sqstore *)st;
    pthread_mutex_lock(&q->c_mu);
    if (refusing(q)) {
        pthread_mutex_unlock(&q->c_mu);
        return TIDEMARK_EIO;
    }
    ssess *ss = tm_map_get(q->sessions, session);
    if (!ss || ss->next_r == 0) {
        int rc = load_next_r(q, session, &ss);
        if (rc)
            return rc;
    }
    char nm[TM_STREAM_MAX];
    if (name) {
        tm_strjoin(nm, sizeof nm, name, (const char *)NULL);
        sstream *s = stream_get(q, session, nm);
        if (s && refusing(q)) { /* failed while the lock was let go */
            pthread_mutex_unlock(&q->c_mu);
            return TIDEMARK_EIO;
        }
        if (s) {
            op *o = NULL;
            if (s->closing) {
                o = op_new(OP_STREAM_REOPEN);
                if (o) {
                    o->ss = s;
                    s->closing = 0;
                    pending_inc(q, s);
                }
            }
            pthread_mutex_unlock(&q->c_mu);
            /* Wait for the reopen: until it commits, bounds() still says
             * closed, and a reader would end the stream it just opened. */
            int rc = o ? run_sync(q, o, 0) : 0;
            if (rc == 0)
                tm_strjoin(out, TM_STREAM_MAX, nm, (const char *)NULL);
            return rc;
        }
    } else {
        char num[21];
        tm_u64_dec(num, ss->next_r++);
        tm_strjoin(nm, sizeof nm, "r", num, (const char *)NULL);
    }
    if (refusing(q)) {
        pthread_mutex_unlock(&q->c_mu);
        return TIDEMARK_EIO;
    }
    sstream *s = calloc(1, sizeof *s);
    op *o = op_new(OP_STREAM_CREATE);
    if (!s || !o) {
        pthread_mutex_unlock(&q->c_mu);
        free(s);
        free(o);
        return TIDEMARK_ENOMEM;
    }
    s->sid = q->next_sid++;
    s->next_seq = 1;
    s->first = 1;
    tm_strjoin(s->session, sizeof s->session, session, (const char *)NULL);
    tm_strjoin(s->name, sizeof s->name, nm, (const char *)NULL);
    skey(s->key, sizeof s->key, session, nm);
    if (tm_map_put(q->streams, s->key, s) != 0) {
        pthread_mutex_unlock(&q->c_mu);
        free(s);
        free(o);
        return TIDEMARK_ENOMEM;
    }
    o->ss = s;
    o->next_r = 0;
    if (!name && ss->next_r > ss->reserved) /* the block is used up: the next one */
        o->next_r = ss->reserved = ss->next_r - 1 + NEXT_R_BLOCK;
    s->pending = 1;
    /* Queued under c_mu: a session delete or a failed batch that comes next
     * finds the op in the queue, behind or with everything before it. */
    enqueue(q, o);
    pthread_mutex_unlock(&q->c_mu);
    tm_strjoin(out, TM_STREAM_MAX, nm, (const char *)NULL);
    return 0;
}

static int q_append_ex(tm_store *st, const tm_append_req *r)
{
    sqstore *q = (sqstore *)st;
    op *o = op_new(OP_APPEND);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->b = blob_new(r->data, r->len);
    o->flags = r->flags;
    o->request_key = tm_strdup(r->request_key);
    o->effect = r->effect;
    o->effect_ud = r->effect_ud;
    if (r->effect) {
        o->fallback = r->fallback ? tm_memdup(r->fallback, r->fallback_len) : tm_memdup("", 0);
        o->fallback_len = r->fallback ? r->fallback_len : 0;
    }
    o->w.cb = r->cb;
    o->w.cb_ud = r->cb_ud;
    o->w.append = 1;
    if (!o->b || (r->effect && !o->fallback) || (r->request_key && !o->request_key)) {
        op_free(o);
        return TIDEMARK_ENOMEM;
    }
    pthread_mutex_lock(&q->c_mu);
    sstream *s = refusing(q) ? NULL : stream_get(q, r->session, r->stream);
    int rc = refusing(q) ? TIDEMARK_EIO : !s ? TIDEMARK_ENOTFOUND : s->closing ? TIDEMARK_ECLOSED : 0;
    if (rc) {
        pthread_mutex_unlock(&q->c_mu);
        op_free(o);
        return rc;
    }
    o->ss = s;
    pending_inc(q, s);
    o->w.seq = s->next_seq++;
    if (r->flags & TM_APPEND_FINAL)
        s->closing = 1;
    /* Keep a copy in the stream's tail for fast live reads (without memory
     * for the ring, none: reads go to the database). */
    if (!s->tail)
        s->tail = calloc(TAIL_CAP, sizeof *s->tail);
    if (s->tail && s->tail_n == TAIL_CAP) {
        tevent *old = &s->tail[(o->w.seq - TAIL_CAP) % TAIL_CAP];
        blob_unref(old->b);
        old->b = NULL;
        s->tail_n--;
    }
    if (s->tail) {
        tevent *e = &s->tail[o->w.seq % TAIL_CAP];
        /* The effect may replace data by the fallback: then the tail must not
         * serve the optimistic bytes. */
        e->b = o->effect ? NULL : blob_ref(o->b);
        e->seq = o->w.seq;
        s->tail_n++;
    }
    /* Enqueue under c_mu so queue order equals seq order per stream. */
    enqueue(q, o);
    char session[64], stream[TM_STREAM_MAX];
    uint64_t seq = o->w.seq;
    tm_strjoin(session, sizeof session, s->session, (const char *)NULL);
    tm_strjoin(stream, sizeof stream, s->name, (const char *)NULL);
    pthread_mutex_unlock(&q->c_mu);
    if (q->opt.emit_early) /* readers may send it now: wake them */
        tm_store_notify_commit(&q->base, session, stream, seq);
    return 0;
}

static int q_close_stream(tm_store *st, const char *session, const char *stream)
{
    sqstore *q = (sqstore *)st;
    op *o = op_new(OP_CLOSE);
    if (!o)
        return TIDEMARK_ENOMEM;
    pthread_mutex_lock(&q->c_mu);
    sstream *s = stream_get(q, session, stream);
    if (!s || refusing(q)) {
        pthread_mutex_unlock(&q->c_mu);
        free(o);
        return s ? TIDEMARK_EIO : TIDEMARK_ENOTFOUND;
    }
    s->closing = 1;
    o->ss = s;
    pending_inc(q, s);
    enqueue(q, o);
    pthread_mutex_unlock(&q->c_mu);
    return 0;
}

static int q_read(tm_store *st, const char *session, const char *stream, uint64_t after,
                  size_t max_events, tm_event_visitor fn, void *ud)
{
    sqstore *q = (sqstore *)st;
    pthread_mutex_lock(&q->c_mu);
    sstream *s = stream_get(q, session, stream);
    if (!s) {
        pthread_mutex_unlock(&q->c_mu);
        return TIDEMARK_ENOTFOUND;
    }
    if (after < s->first - 1) {
        pthread_mutex_unlock(&q->c_mu);
        return TIDEMARK_ERANGE; /* trimmed under the reader: never skip silently */
    }
    uint64_t limit = q->opt.emit_early ? s->next_seq - 1 : s->head;
    uint64_t tail_lo = s->next_seq - s->tail_n;
    if (after >= limit) {
        pthread_mutex_unlock(&q->c_mu);
        return 0;
    }
    if (after + 1 >= tail_lo) {
        int served = 0;
        for (uint64_t seq = after + 1; seq <= limit && max_events > 0; seq++, max_events--) {
            tevent *e = &s->tail[seq % TAIL_CAP];
            if (!e->b || e->seq != seq)
                break; /* an effect's bytes: read them from the database */
            tm_event ev = {.seq = seq, .epoch = q->base.epoch, .data = e->b->data, .len = e->b->len};
            served = 1;
            if (fn(ud, &ev))
                break;
        }
        if (served) {
            pthread_mutex_unlock(&q->c_mu);
            return 0;
        }
    }
    int64_t sid = s->sid;
    pthread_mutex_unlock(&q->c_mu);

    sqlite3 *db = rconn_get(q);
    if (!db)
        return TIDEMARK_EIO;
    int rc = TIDEMARK_EIO;
    sqlite3_stmt *ps = tm_sqlite_kept(db, "SELECT seq, epoch, data FROM tm_events WHERE sid = ?1 AND "
                                 "seq > ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4");
    if (ps) {
        sqlite3_bind_int64(ps, 1, sid);
        sqlite3_bind_int64(ps, 2, (sqlite3_int64)after);
        sqlite3_bind_int64(ps, 3, (sqlite3_int64)limit);
        sqlite3_bind_int64(ps, 4, (sqlite3_int64)max_events);
        uint64_t expect = after + 1;
        int r;
        rc = 0;
        while ((r = sqlite3_step(ps)) == SQLITE_ROW) {
            uint64_t seq = (uint64_t)sqlite3_column_int64(ps, 0);
            if (seq != expect) { /* trimmed between our check and the query */
                rc = TIDEMARK_ERANGE;
                break;
            }
            expect++;
            tm_event ev = {.seq = seq,
                           .epoch = epoch_text(q, sqlite3_column_int64(ps, 1)),
                           .data = sqlite3_column_blob(ps, 2),
                           .len = (size_t)sqlite3_column_bytes(ps, 2)};
            if (!ev.data)
                ev.data = "";
            if (fn(ud, &ev))
                break;
        }
        if (r != SQLITE_ROW && r != SQLITE_DONE)
            rc = note_rc(q, r);
        rstmt_done(ps);
    }
    rconn_put(q, db);
    return rc;
}

static int q_bounds(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out)
{
    sqstore *q = (sqstore *)st;
    pthread_mutex_lock(&q->c_mu);
    sstream *s = stream_get(q, session, stream);
    if (s) {
        out->first_retained = s->first;
        out->head = s->head;
        out->closed = s->closed;
        out->assigned = s->next_seq - 1;
        memcpy(out->trimmed_epoch, s->trimmed_epoch, sizeof out->trimmed_epoch);
    }
    pthread_mutex_unlock(&q->c_mu);
    return s ? 0 : TIDEMARK_ENOTFOUND;
}

static int q_event_epoch(tm_store *st, const char *session, const char *stream, uint64_t seq,
                         char out[TM_EPOCH_LEN + 1])
{
    sqstore *q = (sqstore *)st;
    pthread_mutex_lock(&q->c_mu);
    sstream *s = stream_get(q, session, stream);
    if (!s) {
        pthread_mutex_unlock(&q->c_mu);
        return TIDEMARK_ENOTFOUND;
    }
    int64_t sid = s->sid;
    if (seq + 1 == s->first && s->trimmed_epoch[0]) {
        memcpy(out, s->trimmed_epoch, TM_EPOCH_LEN + 1);
        pthread_mutex_unlock(&q->c_mu);
        return 0;
    }
    uint64_t tail_lo = s->next_seq - s->tail_n;
    if (seq >= tail_lo && seq <= s->head) {
        memcpy(out, q->base.epoch, TM_EPOCH_LEN + 1);
        pthread_mutex_unlock(&q->c_mu);
        return 0;
    }
    pthread_mutex_unlock(&q->c_mu);
    sqlite3 *db = rconn_get(q);
    if (!db)
        return TIDEMARK_EIO;
    int rc = TIDEMARK_ENOTFOUND;
    sqlite3_stmt *ps;
    if (sqlite3_prepare_v2(db, "SELECT epoch FROM tm_events WHERE sid = ?1 AND seq = ?2", -1, &ps,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_int64(ps, 1, sid);
        sqlite3_bind_int64(ps, 2, (sqlite3_int64)seq);
        if (sqlite3_step(ps) == SQLITE_ROW) {
            tm_strjoin(out, TM_EPOCH_LEN + 1, epoch_text(q, sqlite3_column_int64(ps, 0)),
                       (const char *)NULL);
            rc = 0;
        }
        sqlite3_finalize(ps);
    }
    rconn_put(q, db);
    return rc;
}

static void rec_from_row(sqlite3_stmt *ps, tm_request_rec *o)
{
    o->session = tm_strdup((const char *)sqlite3_column_text(ps, 0));
    o->key = tm_strdup((const char *)sqlite3_column_text(ps, 1));
    o->state = sqlite3_column_int(ps, 2);
    o->tool = tm_strdup((const char *)sqlite3_column_text(ps, 3));
    o->stream = tm_strdup((const char *)sqlite3_column_text(ps, 4));
    o->message = tm_strdup((const char *)sqlite3_column_text(ps, 5));
    if (sqlite3_column_type(ps, 6) != SQLITE_NULL) {
        o->response_len = (size_t)sqlite3_column_bytes(ps, 6);
        o->response = tm_memdup(sqlite3_column_blob(ps, 6), o->response_len);
    }
    o->updated_ms = sqlite3_column_int64(ps, 7);
}

#define REQ_COLS "session, key, state, tool, stream, message, response, updated_ms"

static int q_request_get(tm_store *st, const char *session, const char *key, tm_request_rec *out)
{
    sqstore *q = (sqstore *)st;
    memset(out, 0, sizeof *out);
    sqlite3 *db = rconn_get(q);
    if (!db)
        return TIDEMARK_EIO;
    int rc = TIDEMARK_EIO;
    sqlite3_stmt *ps = tm_sqlite_kept(db, "SELECT " REQ_COLS " FROM tm_requests WHERE session = ?1 AND key = ?2");
    if (ps) {
        sqlite3_bind_text(ps, 1, session, -1, SQLITE_STATIC);
        sqlite3_bind_text(ps, 2, key, -1, SQLITE_STATIC);
        int r = sqlite3_step(ps);
        if (r == SQLITE_ROW) {
            rec_from_row(ps, out);
            rc = 0;
        } else if (r == SQLITE_DONE) {
            rc = TIDEMARK_ENOTFOUND;
        }
        rstmt_done(ps);
    }
    rconn_put(q, db);
    return rc;
}

static int q_request_begin(tm_store *st, const tm_request_rec *rec, int wait_durable)
{
    sqstore *q = (sqstore *)st;
    op *o = op_new(OP_REQ_BEGIN);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->rrec.session = tm_strdup(rec->session);
    o->rrec.key = tm_strdup(rec->key);
    o->rrec.tool = tm_strdup(rec->tool);
    o->rrec.stream = tm_strdup(rec->stream);
    o->rrec.message = tm_strdup(rec->message);
    if (!wait_durable) {
        enqueue(q, o);
        return 0;
    }
    return run_sync(q, o, 0);
}

static int q_requests_unfinished(tm_store *st, tm_request_visitor fn, void *ud)
{
    sqstore *q = (sqstore *)st;
    sqlite3 *db = rconn_get(q);
    if (!db)
        return TIDEMARK_EIO;
    int rc = TIDEMARK_EIO;
    sqlite3_stmt *ps;
    if (sqlite3_prepare_v2(db,
                           "SELECT " REQ_COLS " FROM tm_requests WHERE state = 1 "
                           "ORDER BY session, stream, updated_ms",
                           -1, &ps, NULL) == SQLITE_OK) {
        rc = 0;
        while (sqlite3_step(ps) == SQLITE_ROW) {
            tm_request_rec r;
            memset(&r, 0, sizeof r);
            rec_from_row(ps, &r);
            int stop = fn(ud, &r);
            tm_request_rec_clear(&r);
            if (stop)
                break;
        }
        sqlite3_finalize(ps);
    }
    rconn_put(q, db);
    return rc;
}

static int q_exec_schema(tm_store *st, const char *sql)
{
    sqstore *q = (sqstore *)st;
    op *o = op_new(OP_SCHEMA);
    if (!o || !(o->sql = strdup(sql))) {
        free(o);
        return TIDEMARK_ENOMEM;
    }
    return run_sync(q, o, 0);
}

static int q_query(tm_store *st, const char *sql, const char *const *args, size_t nargs,
                   json_t **rows)
{
    sqstore *q = (sqstore *)st;
    sqlite3 *db = rconn_get(q);
    if (!db)
        return TIDEMARK_EIO;
    int rc = tm_sqlite_query_json(db, sql, args, nargs, rows);
    rconn_put(q, db);
    return rc;
}

static int q_rows(tm_store *st, const char *table, json_t **rows)
{
    sqstore *q = (sqstore *)st;
    sqlite3 *db = rconn_get(q);
    if (!db)
        return TIDEMARK_EIO;
    int rc = tm_sqlite_rows(db, table, rows);
    rconn_put(q, db);
    return rc;
}

static int q_sessions_expire(tm_store *st, int64_t before, void (*fn)(void *, const char *),
                             void *ud)
{
    sqstore *q = (sqstore *)st;
    op *o = op_new(OP_EXPIRE);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->ms = before;
    int rc = run_sync(q, o, 1);
    if (rc == 0) {
        pthread_mutex_lock(&q->c_mu);
        for (size_t i = 0; i < o->nexpired; i++) {
            if (!o->expired[i])
                continue;
            free(tm_map_del(q->sessions, o->expired[i]));
            tm_writer_touch_forget(q->writer, o->expired[i]);
            /* Their cache entries are freed with this op. */
            op tmp = {0};
            doom_session_streams(q, o->expired[i], &tmp);
            for (size_t j = 0; j < tmp.ndoomed; j++) {
                sstream **v = realloc(o->doomed, (o->ndoomed + 1) * sizeof *v);
                if (!v)
                    break;
                o->doomed = v;
                o->doomed[o->ndoomed++] = tmp.doomed[j];
            }
            free(tmp.doomed);
        }
        pthread_mutex_unlock(&q->c_mu);
        for (size_t i = 0; i < o->nexpired; i++)
            if (o->expired[i] && fn)
                fn(ud, o->expired[i]);
    }
    op_free(o);
    return rc;
}

/* Barriers (writer.h): a failed batch fails everything queued with it,
 * records written without waiting included, and the store may have
 * recovered by the time the barrier is settled. With a mark, a failure of
 * any op queued at or after it is reported; without one, any failure of an
 * op queued in the SYNC_WINDOW_US before the barrier (the caller's record
 * among them, unless it waited longer than that to ask). */
static int q_sync(tm_store *st) { return tm_writer_sync(((sqstore *)st)->writer); }

static int q_sync_since(tm_store *st, uint64_t mark)
{
    return tm_writer_sync_since(((sqstore *)st)->writer, mark);
}

static uint64_t q_mark(tm_store *st) { return tm_writer_mark(((sqstore *)st)->writer); }

static void q_wait_settled(tm_store *st, uint64_t mark)
{
    tm_writer_wait_settled(((sqstore *)st)->writer, mark);
}

static void q_hold(tm_store *st, int on)
{
    if (on)
        tm_writer_hold(((sqstore *)st)->writer);
    else
        tm_writer_release(((sqstore *)st)->writer);
}

static int q_writable(tm_store *st)
{
    sqstore *q = (sqstore *)st;
    pthread_mutex_lock(&q->c_mu);
    int rc = refusing(q) ? TIDEMARK_EIO : 0;
    pthread_mutex_unlock(&q->c_mu);
    return rc;
}

size_t tm_store_sqlite_cached_streams(tm_store *st)
{
    sqstore *q = (sqstore *)st;
    pthread_mutex_lock(&q->c_mu);
    size_t n = tm_map_count(q->streams);
    pthread_mutex_unlock(&q->c_mu);
    return n;
}

static long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : 0;
}

typedef struct ckpt_state {
    uint64_t seen;          /* commits_done at the last tick */
    int64_t changed_ms;     /* when it last moved */
    int truncated;          /* the WAL was truncated since the last commit */
    int64_t stalled_since;  /* first incomplete checkpoint of a run, 0 if none */
    int64_t reported_ms;
    uint64_t head_written;  /* commits the head file holds */
    int misconfigured;      /* told once: the checkpoint says "not WAL" */
} ckpt_state;

/* The durable head, off the commit path: at most once per tick, only when
 * it moved. Under durability "process" commits are not fsync'd, so the WAL
 * is first (one fdatasync per tick): the head file never claims a commit a
 * power cut could still take away. */
static void head_tick(sqstore *q, ckpt_state *k)
{
    uint64_t c = atomic_load(&q->commits_done);
    if (c == k->head_written)
        return;
    if (q->opt.durability == TM_DURABILITY_PROCESS) {
        int fd = open(q->wal_path, O_RDONLY | O_CLOEXEC);
        int ok = fd < 0 || fdatasync(fd) == 0; /* no WAL: everything is in the (synced) file */
        if (fd >= 0)
            close(fd);
        if (!ok)
            return;
    }
    tm_head_rec r = {.commits = c, .clean = 0};
    memcpy(r.dbid, q->dbid, sizeof r.dbid);
    memcpy(r.epoch, q->base.epoch, TM_EPOCH_LEN + 1);
    if (tm_head_write(&q->head, &r) == 0)
        k->head_written = c;
}

/* One checkpoint: PASSIVE while commits come (never blocks the writer),
 * TRUNCATE when idle (the WAL shrinks to 0). Under sustained writes a
 * passive checkpoint never catches up with the last frame, so the writer
 * never starts the WAL over and it grows without bound: past WAL_FORCE the
 * writer finishes the job itself between two batches (on_wal, sq_between).
 * A checkpoint that keeps failing to complete is logged and counted.
 * Returns 1 while commits come: the next tick is sooner (CKPT_BUSY_MS), so
 * what the writer is left to copy before it starts the WAL over is little. */
static int ckpt_tick(sqstore *q, sqlite3 *db, ckpt_state *k)
{
    int64_t now = tm_now_ms();
    uint64_t c = atomic_load(&q->commits_done);
    int busy = c != k->seen;
    if (busy) {
        k->seen = c;
        k->changed_ms = now;
        k->truncated = 0;
    }
    if (k->truncated)
        return 0;
    long long wal = file_size(q->wal_path);
    int idle = now - k->changed_ms >= CKPT_IDLE_MS;
    int mode = idle ? SQLITE_CHECKPOINT_TRUNCATE : SQLITE_CHECKPOINT_PASSIVE;
    int log = -1, done = -1;
    pthread_mutex_lock(&q->ck_mu);
    int rc = sqlite3_wal_checkpoint_v2(db, NULL, mode, &log, &done);
    pthread_mutex_unlock(&q->ck_mu);
    if (rc == SQLITE_OK && log < 0 && !k->misconfigured) {
        k->misconfigured = 1;
        TM_ERROR("sqlite: checkpoints of %s do nothing: the connection is not in WAL mode", q->path);
    }
    if (rc == SQLITE_OK && log >= 0 && done == log) {
        k->stalled_since = 0;
        k->truncated = mode == SQLITE_CHECKPOINT_TRUNCATE;
        return busy;
    }
    if (rc != SQLITE_OK && rc != SQLITE_BUSY && rc != SQLITE_LOCKED)
        note_rc(q, rc);
    if (!k->stalled_since)
        k->stalled_since = now;
    if (now - k->stalled_since >= CKPT_STALL_MS && now - k->reported_ms >= 2 * CKPT_STALL_MS) {
        k->reported_ms = now;
        tm_counter_inc(q->base.m.checkpoint_stalls);
        TM_WARN("sqlite: WAL checkpoint of %s incomplete for %lld ms (%s; %d of %d frames; WAL %lld "
                "bytes): a reader holds an old snapshot, or the disk fails", q->path,
                (long long)(now - k->stalled_since), sqlite3_errstr(rc), done, log, wal);
    }
    return busy;
}

/* WAL checkpoints on their own connection and thread: SQLite's automatic
 * checkpoint would run inside the writer's COMMIT and stall every append
 * queued behind it (measured: p99 commit latency ~19 ms under load). The
 * same thread writes the head file. */
static void *ckpt_main(void *arg)
{
    sqstore *q = arg;
    sqlite3 *db = NULL;
    if (open_conn(q, 0, NULL, &db) != 0)
        return NULL;
    /* RESTART and TRUNCATE wait for the writer and readers: briefly. */
    sqlite3_busy_timeout(db, 50);
    /* A connection that has not read the database does not know it is in
     * WAL mode, and its checkpoints silently do nothing (log = done = -1). */
    char *mode = NULL;
    sqlite3_stmt *st;
    sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL);
    if (sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            mode = tm_strdup((const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    if (!mode || strcmp(mode, "wal") != 0)
        TM_ERROR("sqlite: %s is in journal mode %s, not wal", q->path, mode ? mode : "?");
    free(mode);
    char limit[64];
    snprintf(limit, sizeof limit, "PRAGMA journal_size_limit=%lld", WAL_LIMIT);
    sqlite3_exec(db, limit, NULL, NULL, NULL);
    ckpt_state k = {.seen = atomic_load(&q->commits_done), .changed_ms = tm_now_ms(),
                    .head_written = atomic_load(&q->commits_done)};
    int busy_ms = q->opt.durability == TM_DURABILITY_PROCESS ? CKPT_BUSY_PROCESS_MS : CKPT_BUSY_MS;
    pthread_mutex_lock(&q->k_mu);
    int busy = 0;
    int64_t head_ms = tm_now_ms();
    while (q->k_running) {
        struct timespec ts = tm_deadline_ms(busy ? busy_ms : CKPT_EVERY_MS);
        pthread_cond_timedwait(&q->k_cv, &q->k_mu, &ts);
        if (!q->k_running)
            break;
        pthread_mutex_unlock(&q->k_mu);
        if (tm_now_ms() - head_ms >= CKPT_EVERY_MS) {
            head_tick(q, &k);
            head_ms = tm_now_ms();
        }
        busy = ckpt_tick(q, db, &k);
        pthread_mutex_lock(&q->k_mu);
    }
    pthread_mutex_unlock(&q->k_mu);
    sqlite3_close(db);
    return NULL;
}

static void free_cached(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    sstream_free(v);
}

static void free_plain(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    free(v);
}

static void kept_finalize(sqstore *q)
{
    sqlite3_finalize(q->ins_session);
    sqlite3_finalize(q->ins_request);
    sqlite3_finalize(q->ins_request_done);
    q->ins_session = q->ins_request = q->ins_request_done = NULL;
    sqlite3_stmt **kept[] = {&q->begin_tx, &q->commit_tx, &q->upd_request, &q->upd_next_r};
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
        sqlite3_finalize(*kept[i]);
        *kept[i] = NULL;
    }
    for (size_t i = 0; i < sizeof q->del_rows / sizeof *q->del_rows; i++) {
        sqlite3_finalize(q->del_rows[i]);
        q->del_rows[i] = NULL;
    }
}

/* The writer's statements for sessions and records (q->ins_session ...). */
static int prepare_kept(sqstore *q)
{
    if (sqlite3_prepare_v3(q->wdb,
                           "INSERT INTO tm_sessions(id, version, client, created_ms, "
                           "last_seen_ms, next_r) VALUES(?1, ?2, ?3, ?4, ?5, 1)",
                           -1, SQLITE_PREPARE_PERSISTENT, &q->ins_session, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(q->wdb,
                           "INSERT OR IGNORE INTO tm_requests(session, key, state, tool, stream, "
                           "message, updated_ms) VALUES(?1, ?2, 1, ?3, ?4, ?5, ?6)",
                           -1, SQLITE_PREPARE_PERSISTENT, &q->ins_request, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(q->wdb,
                           "INSERT OR IGNORE INTO tm_requests(session, key, state, tool, stream, "
                           "message, response, updated_ms) VALUES(?1, ?2, 2, ?3, ?4, ?5, ?6, ?7)",
                           -1, SQLITE_PREPARE_PERSISTENT, &q->ins_request_done, NULL) != SQLITE_OK)
        return TIDEMARK_EIO;
    for (size_t i = 0; i < sizeof q->del_rows / sizeof *q->del_rows; i++)
        if (sqlite3_prepare_v3(q->wdb, del_rows_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                               &q->del_rows[i], NULL) != SQLITE_OK)
            return TIDEMARK_EIO;
    const struct { sqlite3_stmt **st; const char *sql; } per_call[] = {
        {&q->begin_tx, "BEGIN IMMEDIATE"},
        {&q->commit_tx, "COMMIT"},
        {&q->upd_request, "UPDATE tm_requests SET state = 2, response = ?1, updated_ms = ?2 "
                          "WHERE session = ?3 AND key = ?4"},
        {&q->upd_next_r, "UPDATE tm_sessions SET next_r = MAX(next_r, ?1) WHERE id = ?2"},
    };
    for (size_t i = 0; i < sizeof per_call / sizeof *per_call; i++)
        if (sqlite3_prepare_v3(q->wdb, per_call[i].sql, -1, SQLITE_PREPARE_PERSISTENT,
                               per_call[i].st, NULL) != SQLITE_OK)
            return TIDEMARK_EIO;
    return 0;
}

/* Everything q holds; safe on a half-made store. */
static void q_free(sqstore *q)
{
    sqlite3_finalize(q->ins_event);
    sqlite3_finalize(q->upd_stream);
    sqlite3_finalize(q->ins_stream);
    sqlite3_finalize(q->upd_commits);
    kept_finalize(q);
    tm_sqlite_close(q->wdb);
    for (int i = 0; i < q->nrfree; i++)
        tm_sqlite_close(q->rfree[i]);
    if (q->streams)
        tm_map_each(q->streams, free_cached, NULL);
    tm_map_free(q->streams);
    if (q->sessions)
        tm_map_each(q->sessions, free_plain, NULL);
    tm_map_free(q->sessions);
    tm_writer_free(q->writer);
    pthread_mutex_destroy(&q->c_mu);
    pthread_mutex_destroy(&q->r_mu);
    pthread_cond_destroy(&q->r_cv);
    pthread_mutex_destroy(&q->k_mu);
    pthread_mutex_destroy(&q->ck_mu);
    pthread_cond_destroy(&q->k_cv);
    tm_head_close(&q->head);
    tm_db_unlock(q->lock_fd);
    free(q->epochs);
    free(q->wal_path);
    free(q->path);
    free(q);
}

static void q_close(tm_store *st)
{
    sqstore *q = (sqstore *)st;
    tm_writer_stop(q->writer); /* after it committed what is queued */
    pthread_mutex_lock(&q->k_mu);
    q->k_running = 0;
    pthread_cond_signal(&q->k_cv);
    pthread_mutex_unlock(&q->k_mu);
    if (q->ckpt)
        pthread_join(q->ckpt, NULL);
    /* A final full checkpoint keeps the WAL small across restarts. */
    sqlite3_wal_checkpoint_v2(q->wdb, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    for (int i = 0; i < q->nrfree; i++)
        tm_sqlite_close(q->rfree[i]);
    q->nrfree = 0;
    sqlite3_finalize(q->ins_event);
    sqlite3_finalize(q->upd_stream);
    sqlite3_finalize(q->ins_stream);
    sqlite3_finalize(q->upd_commits);
    q->ins_event = q->upd_stream = q->ins_stream = q->upd_commits = NULL;
    kept_finalize(q);
    int closed = tm_sqlite_close(q->wdb) == SQLITE_OK;
    q->wdb = NULL;
    /* Clean: the next open need not check the file. A damaged one stays
     * marked unclean, so the next open checks it and refuses it. */
    tm_head_rec r = {.commits = q->commits, .clean = closed && !atomic_load(&q->corrupt)};
    memcpy(r.dbid, q->dbid, sizeof r.dbid);
    memcpy(r.epoch, q->base.epoch, TM_EPOCH_LEN + 1);
    tm_head_write(&q->head, &r);
    q_free(q);
}

static const struct tm_store_ops sqlite_ops = {
    .name = "sqlite",
    .close = q_close,
    .session_create = q_session_create,
    .session_get = q_session_get,
    .session_touch = q_session_touch,
    .session_delete = q_session_delete,
    .session_create_queued = q_session_create_queued,
    .session_delete_queued = q_session_delete_queued,
    .stream_open = q_stream_open,
    .close_stream = q_close_stream,
    .read = q_read,
    .bounds = q_bounds,
    .event_epoch = q_event_epoch,
    .append_ex = q_append_ex,
    .request_get = q_request_get,
    .request_begin = q_request_begin,
    .requests_unfinished = q_requests_unfinished,
    .exec_schema = q_exec_schema,
    .query = q_query,
    .session_set_attr = q_session_set_attr,
    .sessions_each = q_sessions_each,
    .sessions_with_attr = q_sessions_with_attr,
    .rows = q_rows,
    .sessions_expire = q_sessions_expire,
    .sync = q_sync,
    .writable = q_writable,
    .mark = q_mark,
    .wait_settled = q_wait_settled,
    .hold = q_hold,
    .sync_since = q_sync_since,
};

/* Open the write connection and create (or upgrade) the schema. */
static int setup_schema(sqstore *q)
{
    /* power: every commit syncs the WAL, so the writer's frames may be
     * gathered into few writes until then (walbuf.c). */
    int power = q->opt.durability != TM_DURABILITY_PROCESS;
    int rc = open_conn(q, 0, power ? tm_walbuf_vfs() : NULL, &q->wdb);
    if (rc)
        return rc;
    const char *sync = power ? "FULL" : "NORMAL";
    char pragmas[256];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=%s; PRAGMA foreign_keys=OFF;"
             " PRAGMA wal_autocheckpoint=0; PRAGMA journal_size_limit=%lld;", sync, WAL_LIMIT);
    if ((rc = wexec(q, pragmas)) || (rc = wexec(q, schema_sql)))
        return rc;
    q->page_size = 4096;
    json_t *ps = NULL;
    if (tm_sqlite_query_json(q->wdb, "PRAGMA page_size", NULL, 0, &ps) == 0)
        q->page_size = json_integer_value(json_object_get(json_array_get(ps, 0), "page_size"));
    json_decref(ps);
    sqlite3_wal_hook(q->wdb, on_wal, q);
    sqlite3_stmt *probe; /* a database from before tm_sessions.attrs: add the column */
    if (sqlite3_prepare_v2(q->wdb, "SELECT attrs FROM tm_sessions LIMIT 0", -1, &probe, NULL) ==
        SQLITE_OK)
        sqlite3_finalize(probe);
    else if ((rc = wexec(q, "ALTER TABLE tm_sessions ADD COLUMN attrs TEXT")))
        return rc;
    return 0;
}

/* A database from before attributes were rows keeps them as one JSON
 * object in tm_sessions.attrs: move them into tm_session_attrs, once. */
static int migrate_attrs(sqstore *q)
{
    json_t *rows = NULL;
    int rc = tm_sqlite_query_json(q->wdb, "SELECT id, attrs FROM tm_sessions WHERE attrs IS NOT NULL",
                                  NULL, 0, &rows);
    if (rc || json_array_size(rows) == 0) {
        json_decref(rows);
        return rc;
    }
    rc = wexec(q, "BEGIN IMMEDIATE");
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *id = json_string_value(json_object_get(row, "id"));
        json_t *a = json_loads(json_string_value(json_object_get(row, "attrs")), 0, NULL);
        const char *name;
        json_t *v;
        json_object_foreach(a, name, v) {
            char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            const char *args[3] = {id, name, text};
            if (rc == 0 && text)
                rc = tm_sqlite_exec_args(q->wdb,
                                         "INSERT OR IGNORE INTO tm_session_attrs(session, name, "
                                         "value) VALUES(?1, ?2, ?3)", args, 3);
            free(text);
        }
        json_decref(a);
        const char *args[1] = {id};
        if (rc == 0)
            rc = tm_sqlite_exec_args(q->wdb, "UPDATE tm_sessions SET attrs = NULL WHERE id = ?1",
                                     args, 1);
    }
    if (rc == 0)
        rc = wexec(q, "COMMIT");
    else
        rollback_quietly(q);
    if (rc == 0)
        TM_INFO("sqlite: attributes of %zu session(s) of %s moved to tm_session_attrs",
                json_array_size(rows), q->path);
    json_decref(rows);
    return rc;
}

/* A database from before records were kept in the order they were made
 * (tm_requests keyed by (session, key), WITHOUT ROWID): copy them, once,
 * into the table of REQUESTS_DDL, in one transaction. */
static int migrate_requests(sqstore *q)
{
    sqlite3_stmt *probe;
    if (sqlite3_prepare_v2(q->wdb, "SELECT rid FROM tm_requests LIMIT 0", -1, &probe, NULL) ==
        SQLITE_OK) {
        sqlite3_finalize(probe);
        return 0;
    }
    int rc = wexec(q, "BEGIN IMMEDIATE");
    if (rc)
        return rc;
    rc = wexec(q, "CREATE TABLE tm_requests_new" REQUESTS_DDL ";"
                  "INSERT INTO tm_requests_new(" REQ_COLS ") SELECT " REQ_COLS " FROM tm_requests"
                  " ORDER BY updated_ms;"
                  "DROP TABLE tm_requests;"
                  "ALTER TABLE tm_requests_new RENAME TO tm_requests;"
                  "CREATE INDEX tm_requests_state ON tm_requests(state) WHERE state = 1;");
    if (rc == 0)
        rc = wexec(q, "COMMIT");
    if (rc) {
        rollback_quietly(q);
        TM_ERROR("sqlite: cannot move the request records of %s to the new table", q->path);
        return rc;
    }
    TM_INFO("sqlite: request records of %s moved to a table in the order they were made", q->path);
    return 0;
}

/* The database's name (made at its first open) and commit counter. */
static int setup_identity(sqstore *q)
{
    json_t *rows = NULL;
    int rc = tm_sqlite_query_json(q->wdb, "SELECT k, v FROM tm_meta WHERE k IN ('dbid', 'commits')",
                                  NULL, 0, &rows);
    if (rc)
        return rc;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *k = json_string_value(json_object_get(row, "k"));
        json_t *v = json_object_get(row, "v");
        const char *t = json_string_value(v);
        if (k && strcmp(k, "dbid") == 0 && t)
            tm_strjoin(q->dbid, sizeof q->dbid, t, (const char *)NULL);
        if (k && strcmp(k, "commits") == 0)
            q->commits = t ? strtoull(t, NULL, 10) : (uint64_t)json_integer_value(v);
    }
    json_decref(rows);
    if (!q->dbid[0]) {
        if ((rc = tm_random_hex(q->dbid, 8)) != 0)
            return rc;
        const char *args[1] = {q->dbid};
        rc = tm_sqlite_exec_args(q->wdb, "INSERT INTO tm_meta(k, v) VALUES('dbid', ?1)", args, 1);
        if (rc == 0)
            rc = wexec(q, "INSERT OR IGNORE INTO tm_meta(k, v) VALUES('commits', '0')");
        if (rc)
            return rc;
    }
    atomic_store(&q->commits_done, q->commits);
    return 0;
}

/* PRAGMA quick_check: 0 when the file is sound; TIDEMARK_EIO (logged) when not. */
static int check_integrity(sqstore *q, const char *why)
{
    int64_t t0 = tm_now_ms();
    sqlite3_stmt *st;
    char first[256] = "";
    int rc = sqlite3_prepare_v2(q->wdb, "PRAGMA quick_check(1)", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            tm_strjoin(first, sizeof first, (const char *)sqlite3_column_text(st, 0),
                       (const char *)NULL);
        sqlite3_finalize(st);
    }
    if ((rc == SQLITE_ROW || rc == SQLITE_DONE) && strcmp(first, "ok") == 0) {
        TM_DEBUG("sqlite: quick_check of %s (%s): ok in %lld ms", q->path, why,
                 (long long)(tm_now_ms() - t0));
        return 0;
    }
    note_rc(q, rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_CORRUPT : rc);
    TM_ERROR("sqlite: database %s is damaged (quick_check after %s: %s): refusing to start; "
             "restore it from a backup", q->path, why, first[0] ? first : sqlite3_errstr(rc));
    return TIDEMARK_EIO;
}

/* Compare what the database holds with what its head file says was
 * committed. A head file of another database (one made anew, or copied in)
 * is replaced with a warning. */
static int check_head(sqstore *q, int existed, const tm_head_rec *h)
{
    if (strcmp(h->dbid, q->dbid) != 0) {
        /* A database made anew where one was removed is the usual case (a
         * fresh start, a test); another one copied into its place is not. */
        tm_log(existed ? TM_LOG_WARN : TM_LOG_INFO,
               "sqlite: %s.head names database %s (%llu commits), not %s (%s): replacing it",
               q->path, h->dbid, h->commits, q->dbid,
               existed ? "another database is in its place" : "the database was made anew");
        return 0;
    }
    if (q->commits >= h->commits)
        return 0;
    tm_counter_inc(q->base.m.loss);
    TM_ERROR("sqlite: database %s holds %llu commits, but %s.head recorded %llu as durable "
             "(epoch %s): acknowledged writes are missing (a damaged WAL, or an older copy put "
             "back)%s", q->path, (unsigned long long)q->commits, q->path, h->commits, h->epoch,
             q->opt.accept_loss ? "" : "; refusing to start (accept the loss with --accept-loss)");
    if (!q->opt.accept_loss)
        return TIDEMARK_ERANGE;
    TM_WARN("sqlite: accepting the loss (accept_loss): starting on what %s holds", q->path);
    return 0;
}

/* Record a new epoch, load the epochs and prepare the writer's statements. */
static int setup_epoch(sqstore *q)
{
    const char *args[2] = {q->base.epoch, NULL};
    char now[32];
    snprintf(now, sizeof now, "%lld", (long long)tm_wall_ms());
    args[1] = now;
    int rc;
    if ((rc = tm_sqlite_exec_args(q->wdb, "INSERT INTO tm_epochs(epoch, opened_ms) VALUES(?1, ?2)",
                                  args, 2)))
        return rc;
    q->epoch_id = sqlite3_last_insert_rowid(q->wdb);
    json_t *rows = NULL;
    if ((rc = tm_sqlite_query_json(q->wdb, "SELECT id, epoch FROM tm_epochs", NULL, 0, &rows)))
        return rc;
    int64_t maxid = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        int64_t id = json_integer_value(json_object_get(row, "id"));
        if (id > maxid)
            maxid = id;
    }
    q->nepochs = maxid + 1;
    q->epochs = calloc((size_t)q->nepochs, sizeof *q->epochs);
    if (!q->epochs) {
        json_decref(rows);
        return TIDEMARK_ENOMEM;
    }
    json_array_foreach(rows, i, row) {
        int64_t id = json_integer_value(json_object_get(row, "id"));
        snprintf(q->epochs[id], TM_EPOCH_LEN + 1, "%s",
                 json_string_value(json_object_get(row, "epoch")));
    }
    json_decref(rows);
    if ((rc = tm_sqlite_query_json(q->wdb, "SELECT COALESCE(MAX(sid), 0) + 1 AS n FROM tm_streams",
                                   NULL, 0, &rows)))
        return rc;
    q->next_sid = json_integer_value(json_object_get(json_array_get(rows, 0), "n"));
    json_decref(rows);
    if (sqlite3_prepare_v3(q->wdb,
                           "INSERT INTO tm_events(sid, seq, epoch, created_ms, data) "
                           "VALUES(?1, ?2, ?3, ?4, ?5)",
                           -1, SQLITE_PREPARE_PERSISTENT, &q->ins_event, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(q->wdb,
                           "UPDATE tm_streams SET head = ?1, first_retained = ?2, closed = ?3, "
                           "trimmed_epoch = ?4 WHERE sid = ?5",
                           -1, SQLITE_PREPARE_PERSISTENT, &q->upd_stream, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(q->wdb,
                           "INSERT INTO tm_streams(head, first_retained, closed, trimmed_epoch, "
                           "sid, session, name) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                           -1, SQLITE_PREPARE_PERSISTENT, &q->ins_stream, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(q->wdb, "UPDATE tm_meta SET v = ?1 WHERE k = 'commits'", -1,
                           SQLITE_PREPARE_PERSISTENT, &q->upd_commits, NULL) != SQLITE_OK)
        return TIDEMARK_EIO;
    return prepare_kept(q);
}

/* Open the files beside and the database itself, check it, and record a
 * new epoch. Order: the lock first (nobody else writes while we look), the
 * head file as the last run left it, the schema, then the checks — nothing
 * is written into a database that is refused beyond what opening it takes. */
static int setup(sqstore *q)
{
    long holder = 0;
    int rc = tm_db_lock(q->path, &q->lock_fd, &holder);
    if (rc == TIDEMARK_EBUSY) {
        TM_ERROR("database %s is in use by another process (pid %ld)", q->path, holder);
        return rc;
    }
    if (rc)
        return rc;
    struct stat sb;
    int existed = stat(q->path, &sb) == 0 && sb.st_size > 0;
    tm_head_rec h;
    int have_head = tm_head_read(q->path, &h) == 0;
    if ((rc = setup_schema(q)) || (rc = setup_identity(q)))
        return rc;
    int same = have_head && strcmp(h.dbid, q->dbid) == 0;
    /* After an unclean stop (or with no head file to say) the file is
     * checked; small ones always, since that costs milliseconds. */
    if (existed && (!same || !h.clean || (long long)sb.st_size <= QUICK_CHECK_ALWAYS) &&
        (rc = check_integrity(q, !have_head ? "an open without a head file"
                                 : !same     ? "an open with another database's head file"
                                 : !h.clean  ? "an unclean shutdown"
                                             : "a clean shutdown")))
        return rc;
    if (have_head && (rc = check_head(q, existed, &h)))
        return rc;
    if ((rc = migrate_attrs(q)) || (rc = migrate_requests(q)) || (rc = setup_epoch(q)) ||
        (rc = tm_head_open(q->path, &q->head)))
        return rc;
    tm_head_rec now = {.commits = q->commits, .clean = 0};
    memcpy(now.dbid, q->dbid, sizeof now.dbid);
    memcpy(now.epoch, q->base.epoch, TM_EPOCH_LEN + 1);
    return tm_head_write(&q->head, &now);
}

int tm_store_sqlite_open(const char *path, const tm_store_options *opt, tm_store **out)
{
    sqstore *q = calloc(1, sizeof *q);
    if (!q)
        return TIDEMARK_ENOMEM;
    q->lock_fd = -1;
    q->head.fd = -1;
    int rc = tm_store_init_base(&q->base, &sqlite_ops, opt);
    if (rc) {
        free(q);
        return rc;
    }
#ifdef TIDEMARK_CRASH_POINTS
    if (getenv("TIDEMARK_SQLITE_FULL_FILE"))
        tm_faultvfs_install();
#endif
    q->opt = *opt;
    q->path = strdup(path);
    q->wal_path = malloc(strlen(path) + 5);
    if (q->wal_path)
        sprintf(q->wal_path, "%s-wal", path);
    q->streams = tm_map_new();
    q->sessions = tm_map_new();
    pthread_mutex_init(&q->c_mu, NULL);
    char name[4200];
    snprintf(name, sizeof name, "sqlite: %s", path);
    tm_writer_config wc = {.name = name, .store = &q->base, .be = q, .hooks = &sqlite_writer_hooks,
                           .maintain_ms = opt->retain_ms > 0 ? 1000 : 0,
                           .sync_window_us = SYNC_WINDOW_US, .touch_every_ms = opt->touch_every_ms};
    int qrc = tm_writer_new(&wc, &q->writer);
    pthread_mutex_init(&q->r_mu, NULL);
    pthread_cond_init(&q->r_cv, NULL);
    pthread_mutex_init(&q->k_mu, NULL);
    pthread_mutex_init(&q->ck_mu, NULL);
    tm_cond_init_monotonic(&q->k_cv);
    if (qrc || !q->path || !q->wal_path || !q->streams || !q->sessions)
        rc = TIDEMARK_ENOMEM;
    else
        rc = setup(q);
    if (rc == 0)
        rc = tm_writer_start(q->writer);
    if (rc) {
        q_free(q);
        return rc;
    }
    q->k_running = 1;
    if (pthread_create(&q->ckpt, NULL, ckpt_main, q) != 0) {
        q->k_running = 0;
        q->ckpt = 0;
    }
    TM_INFO("sqlite store %s opened (epoch %s, durability %s, %llu commits)", path, q->base.epoch,
            q->opt.durability == TM_DURABILITY_PROCESS ? "process" : "power",
            (unsigned long long)q->commits);
    *out = &q->base;
    return 0;
}
