/*
 * test_store_pg.c - the PostgreSQL backend through the store.h API, on a
 * real PostgreSQL 15 cluster this test starts (tests/tools/pg_cluster.sh:
 * a primary and one synchronous standby on loopback ports it picks) and
 * stops; exits 77 (skipped) when PostgreSQL's server binaries are missing.
 *
 * The store contract is the memory backend's (store_contract.h), each case
 * on a fresh database. Then what a shared, replicated store has: two nodes,
 * claims, effects in SQL committed with the result, schema versions and
 * concurrent starts, durability replicated, and a commit that waits for a
 * standby that is gone: it fails as not acknowledged within the timeout.
 * The cluster's directory (about 1 GB of WAL and tables) is removed at the
 * end, whatever the outcome.
 */
#include "log/store.h"
#include "log/store_pg_schema.h"
#include "tidemark/server.h"
#include "tidemark/tidemark.h"
#include "tidemark/txn.h"
#include <libpq-fe.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <ftw.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[64];
static char g_uri[512]; /* the cluster's URI, database "tidemark" */
static int g_next_db = 1;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the test's own cluster --------------------------------------------------------- */

/* Run pg_cluster.sh with ARGS; OUT (if any) its first line of stdout.
 * Returns its exit status. */
static int cluster(const char *args, char *out, size_t n)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "bash %s %s", TM_PG_CLUSTER, args);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    char line[1024] = "";
    if (!fgets(line, sizeof line, f))
        line[0] = '\0';
    while (fgetc(f) != EOF) {
    }
    int st = pclose(f);
    line[strcspn(line, "\n")] = '\0';
    if (out)
        snprintf(out, n, "%s", line);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb;
    (void)flag;
    (void)f;
    return remove(path);
}

/* The cluster stopped and its directory removed (0, or -1 when some entry
 * stayed). */
static int cluster_destroy(void)
{
    char args[128];
    snprintf(args, sizeof args, "stop %s", g_dir);
    cluster(args, NULL, 0);
    return nftw(g_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

/* The URI of database name on the cluster. */
static void uri_of(const char *name, char *out, size_t n)
{
    const char *slash = strstr(g_uri, "/tidemark?");
    snprintf(out, n, "%.*s/%s%s", (int)(slash - g_uri), g_uri, name, slash + 9);
}

static void admin_sql(const char *db, const char *sql)
{
    char u[600];
    uri_of(db, u, sizeof u);
    PGconn *c = PQconnectdb(u);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
}

/* A fresh database: "t<n>". */
static int new_db(void)
{
    int db = g_next_db++;
    char sql[64];
    snprintf(sql, sizeof sql, "CREATE DATABASE t%d", db);
    admin_sql("postgres", sql);
    return db;
}

static int open_uri_db(int db, const tm_store_options *opt, tm_store **out)
{
    char name[16], u[600];
    snprintf(name, sizeof name, "t%d", db);
    uri_of(name, u, sizeof u);
    tm_store_options def = {0};
    return tm_store_open(u, opt ? opt : &def, out);
}

/* ---- the memory backend's contract, on PostgreSQL -------------------------------------- */

static int contract_open(const char *uri, const tm_store_options *opt, tm_store **out)
{
    (void)uri;
    tm_store_options o = *opt;
    o.durability = TM_DURABILITY_POWER;
    return open_uri_db(new_db(), &o, out);
}

#include "store_contract.h"

static tm_store *open_db(int db, const tm_store_options *opt)
{
    tm_store *st = NULL;
    assert_int_equal(open_uri_db(db, opt, &st), 0);
    return st;
}

typedef struct told {
    int status;
    uint64_t seq;
} told;

static void told_fn(void *ud, int status, uint64_t seq)
{
    told *t = ud;
    t->status = status;
    t->seq = seq;
}

/* ---- two nodes -------------------------------------------------------------------------- */

typedef struct watch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t seq; /* highest seq heard for the watched stream */
    char key[64];
} watch;

static void watch_fn(void *ud, const char *session, const char *stream, uint64_t seq)
{
    watch *w = ud;
    char k[64];
    snprintf(k, sizeof k, "%s/%s", session, stream);
    pthread_mutex_lock(&w->mu);
    if (strcmp(k, w->key) == 0 && seq > w->seq)
        w->seq = seq;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int watch_wait(watch *w, uint64_t seq, int ms)
{
    long long deadline = now_ms() + ms;
    pthread_mutex_lock(&w->mu);
    while (w->seq < seq && now_ms() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    int ok = w->seq >= seq;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

static void test_two_nodes(void **state)
{
    (void)state;
    int db = new_db();
    watch wb = {.key = "s/r1"};
    pthread_mutex_init(&wb.mu, NULL);
    pthread_cond_init(&wb.cv, NULL);
    tm_store_options ob = {.listener = watch_fn, .listener_ud = &wb};
    tm_store *a = open_db(db, NULL), *b = open_db(db, &ob);
    const char *ea = tm_store_epoch(a), *eb = tm_store_epoch(b);
    assert_string_not_equal(ea, eb);
    mk_session(a, "s");
    open_stream(a, "s", NULL, "r1");
    fill(a, "s", "r1", 3);
    /* B is woken by A's NOTIFY, with the head, and reads A's events */
    assert_true(watch_wait(&wb, 3, 5000));
    collected c = {0};
    read_all(b, "s", "r1", 0, 10, &c);
    expect_run(&c, 1, 3);
    assert_string_equal(c.epoch[2], ea);
    /* B continues the stream: seqs stay dense across nodes */
    assert_int_equal(tm_store_append(b, "s", "r1", "ev-4", 4, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_sync(b), 0);
    assert_int_equal(tm_store_append(a, "s", "r1", "ev-5", 4, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_sync(a), 0);
    read_all(a, "s", "r1", 0, 10, &c);
    expect_run(&c, 1, 5);
    assert_string_equal(c.epoch[3], eb);
    assert_string_equal(c.epoch[4], ea);
    /* stream numbers come in blocks: A holds r1..r32 since it made the
     * session; B's first open takes the next block */
    open_stream(b, "s", NULL, "r33");
    open_stream(a, "s", NULL, "r2");
    assert_int_equal(tm_store_sync(a), 0);
    tm_stream_bounds bb;
    assert_int_equal(tm_store_bounds(b, "s", "r2", &bb), 0);
    assert_int_equal(bb.head, 0);
    tm_session_rec rec = {.id = "s"};
    assert_int_equal(tm_store_session_create(b, &rec), TIDEMARK_EEXIST);
    /* a close on A ends the stream for B */
    assert_int_equal(tm_store_close_stream(a, "s", "r1"), 0);
    assert_int_equal(tm_store_sync(a), 0);
    assert_int_equal(tm_store_bounds(b, "s", "r1", &bb), 0);
    assert_int_equal(bb.closed, 1);
    assert_int_equal(tm_store_append(b, "s", "r1", "x", 1, 0, NULL, NULL), TIDEMARK_ECLOSED);
    tm_store_close(a);
    tm_store_close(b);
}

/* ---- live reads: what this node committed, from memory -------------------------------- */

static void live_read_all(tm_store *st, const char *session, const char *stream, uint64_t after,
                          size_t max, collected *c)
{
    memset(c, 0, sizeof *c);
    assert_int_equal(tm_store_read_live(st, session, stream, after, max, collect, c), 0);
}

/* A's live reads answer from the events A committed (shown by deleting
 * them from the database behind its back: a plain read no longer finds
 * them, a live one still does), up to the head A committed. Once B commits
 * to the stream and A is woken by it, A's live reads ask the database. */
static void test_live_reads(void **state)
{
    (void)state;
    int db = new_db();
    watch wa = {.key = "s/r1"};
    pthread_mutex_init(&wa.mu, NULL);
    pthread_cond_init(&wa.cv, NULL);
    tm_store_options oa = {.listener = watch_fn, .listener_ud = &wa};
    tm_store *a = open_db(db, &oa), *b = open_db(db, NULL);
    mk_session(a, "s");
    open_stream(a, "s", NULL, "r1");
    fill(a, "s", "r1", 3);
    char name[16];
    snprintf(name, sizeof name, "t%d", db);
    admin_sql(name, "DELETE FROM tm_events");
    collected c;
    live_read_all(a, "s", "r1", 0, 10, &c);
    expect_run(&c, 1, 3);
    live_read_all(a, "s", "r1", 1, 1, &c);
    expect_run(&c, 2, 1);
    read_all(a, "s", "r1", 0, 10, &c);
    assert_int_equal(c.n, 0);
    tm_stream_bounds lb;
    assert_int_equal(tm_store_bounds_live(a, "s", "r1", &lb), 0);
    assert_int_equal(lb.head, 3);
    assert_int_equal(lb.first_retained, 1);
    assert_int_equal(lb.closed, 0);
    /* B's commit: A, once woken, reads it from the database */
    assert_int_equal(tm_store_append(b, "s", "r1", "ev-4", 4, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_sync(b), 0);
    assert_true(watch_wait(&wa, 4, 5000));
    live_read_all(a, "s", "r1", 0, 10, &c);
    expect_run(&c, 4, 1);
    assert_int_equal(tm_store_bounds_live(a, "s", "r1", &lb), 0);
    assert_int_equal(lb.head, 4);
    /* A's own final event after it: cached again from there, closed */
    assert_int_equal(tm_store_append(a, "s", "r1", "ev-5", 4, TM_APPEND_FINAL, NULL, NULL), 0);
    assert_int_equal(tm_store_sync(a), 0);
    admin_sql(name, "DELETE FROM tm_events");
    live_read_all(a, "s", "r1", 4, 10, &c);
    expect_run(&c, 5, 1);
    assert_int_equal(tm_store_bounds_live(a, "s", "r1", &lb), 0);
    assert_int_equal(lb.head, 5);
    assert_int_equal(lb.closed, 1);
    tm_store_close(a);
    tm_store_close(b);
}

typedef struct rec_list {
    int n;
} rec_list;

static int count_rec(void *ud, const tm_request_rec *r)
{
    (void)r;
    ((rec_list *)ud)->n++;
    return 0;
}

/* A connection named as the writer of the node that owns record key of
 * session, left inside a transaction. */
static PGconn *owner_writer(int db, const char *session, const char *key)
{
    char name[16], u[600], sql[256];
    snprintf(name, sizeof name, "t%d", db);
    uri_of(name, u, sizeof u);
    PGconn *c = PQconnectdb(u);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    snprintf(sql, sizeof sql, "SELECT node FROM tm_requests WHERE session = '%s' AND key = '%s'",
             session, key);
    PGresult *r = PQexec(c, sql);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    snprintf(sql, sizeof sql, "SET application_name = 'tidemark-write-%s'", PQgetvalue(r, 0, 0));
    PQclear(r);
    r = PQexec(c, sql);
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    r = PQexec(c, "BEGIN");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    return c;
}

static void test_request_claim(void **state)
{
    (void)state;
    int db = new_db();
    tm_store_options quick = {.store_timeout_ms = 1000};
    tm_store *owner = open_db(db, NULL), *a = open_db(db, &quick), *b = open_db(db, NULL);
    mk_session(owner, "s");
    open_stream(owner, "s", NULL, "r1");
    tm_request_rec r = {.session = "s", .key = "i:7", .tool = "t", .stream = "r1", .message = "{}"};
    assert_int_equal(tm_store_request_begin(owner, &r, 1), 0);
    assert_int_equal(tm_store_request_begin(a, &r, 1), TIDEMARK_EEXIST);
    assert_int_equal(tm_store_request_claim(a, "s", "i:7"), TIDEMARK_EBUSY); /* its owner lives */
    assert_int_equal(tm_store_request_mine(owner, "s", "i:7"), 1);
    assert_int_equal(tm_store_request_mine(a, "s", "i:7"), 0);
    assert_int_equal(tm_store_request_mine(a, "s", "i:8"), 0); /* absent */
    rec_list l = {0};
    assert_int_equal(tm_store_requests_unfinished(a, count_rec, &l), 0);
    assert_int_equal(l.n, 0);
    tm_store_close(owner); /* its lease goes with it */
    /* a judges others dead only after two leases in touch with the store
     * (right after an outage every lease has lapsed, live nodes' too) */
    long long t0 = now_ms();
    while (l.n == 0 && now_ms() - t0 < 15000) {
        assert_int_equal(tm_store_requests_unfinished(a, count_rec, &l), 0);
        if (l.n == 0)
            usleep(100 * 1000);
    }
    assert_int_equal(l.n, 1);
    assert_true(now_ms() - t0 >= 3000); /* not at once: a's first 6 s */
    /* A backend of the owner's writer inside a transaction (a COMMIT of a
     * dead node that may still land): not taken over until it ends. */
    PGconn *w = owner_writer(db, "s", "i:7");
    assert_int_equal(tm_store_request_claim(a, "s", "i:7"), TIDEMARK_EBUSY);
    PQclear(PQexec(w, "ROLLBACK"));
    /* idle, and still connected: settled once idle for twice a's store
     * timeout (1 s here), not before */
    long long t1 = now_ms();
    assert_int_equal(tm_store_request_claim(a, "s", "i:7"), TIDEMARK_EBUSY);
    int claimed = TIDEMARK_EBUSY;
    while (claimed == TIDEMARK_EBUSY && now_ms() - t1 < 10000) {
        usleep(100 * 1000);
        claimed = tm_store_request_claim(a, "s", "i:7");
    }
    assert_int_equal(claimed, 0);
    assert_true(now_ms() - t1 >= 1500);
    PQfinish(w);
    assert_int_equal(tm_store_request_claim(b, "s", "i:7"), TIDEMARK_EBUSY); /* a took it */
    assert_int_equal(tm_store_request_mine(a, "s", "i:7"), 1);
    tm_append_req q = {.session = "s", .stream = "r1", .data = "{}", .len = 2,
                       .flags = TM_APPEND_FINAL, .request_key = "i:7"};
    assert_int_equal(tm_store_append_ex(a, &q), 0);
    assert_int_equal(tm_store_sync(a), 0);
    tm_request_rec got;
    assert_int_equal(tm_store_request_get(b, "s", "i:7", &got), 0);
    assert_int_equal(got.state, TM_REQ_COMPLETED);
    assert_int_equal(got.response_len, 2);
    assert_memory_equal(got.response, "{}", 2);
    tm_request_rec_clear(&got);
    assert_int_equal(tm_store_request_mine(a, "s", "i:7"), 0); /* finished */
    /* adopt: a started record, whoever's and however live, becomes this node's */
    tm_request_rec r2 = {.session = "s", .key = "i:8", .tool = "t", .stream = "r1", .message = "{}"};
    assert_int_equal(tm_store_request_begin(a, &r2, 1), 0);
    assert_int_equal(tm_store_request_adopt(b, "s", "i:8"), 0);
    assert_int_equal(tm_store_request_mine(b, "s", "i:8"), 1);
    assert_int_equal(tm_store_request_mine(a, "s", "i:8"), 0);
    assert_int_equal(tm_store_request_adopt(b, "s", "i:7"), TIDEMARK_EBUSY); /* finished */
    assert_int_equal(tm_store_request_adopt(b, "s", "i:9"), TIDEMARK_ENOTFOUND);
    tm_store_close(a);
    tm_store_close(b);
}

/* A node whose call another node took over (its record is another's, or
 * finished) neither writes its effect nor its event: the effect happens
 * once. */
static int fx_owned_row(void *ud, tm_txn *txn)
{
    json_t *row = json_pack("{s:s}", "k", (const char *)ud);
    int rc = tidemark_txn_insert(txn, "owned", row);
    json_decref(row);
    return rc;
}

/* Two nodes on one database: session s, a's stream r1, b's stream r33. */
static void two_nodes(tm_store **a, tm_store **b)
{
    int db = new_db();
    *a = open_db(db, NULL);
    *b = open_db(db, NULL);
    mk_session(*a, "s");
    open_stream(*a, "s", NULL, "r1");
    open_stream(*b, "s", NULL, "r33");
}

/* The rows of table as compact JSON with sorted keys must be want. */
static void expect_rows(tm_store *st, const char *table, const char *want)
{
    json_t *rows = NULL;
    assert_int_equal(tm_store_rows(st, table, &rows), 0);
    char *txt = json_dumps(rows, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(txt, want);
    free(txt);
    json_decref(rows);
}

/* Queue the n appends q under one hold (one batch), each telling t[i];
 * wait until they settled. */
static void append_batch(tm_store *st, tm_append_req *q, told *t, int n)
{
    tm_store_hold(st);
    for (int i = 0; i < n; i++) {
        t[i] = (told){-1, 0};
        q[i].cb = told_fn;
        q[i].cb_ud = &t[i];
        assert_int_equal(tm_store_append_ex(st, &q[i]), 0);
    }
    tm_store_release(st);
    assert_int_equal(tm_store_sync(st), 0);
}

/* Stream s/name holds exactly the one-byte events of want, in order. */
static void expect_bytes(tm_store *st, const char *name, const char *want, collected *c)
{
    read_all(st, "s", name, 0, 10, c);
    assert_int_equal(c->n, strlen(want));
    for (size_t i = 0; i < c->n; i++)
        assert_memory_equal(c->data[i], want + i, 1);
}

static void test_effect_owner(void **state)
{
    (void)state;
    tm_store *a, *b;
    two_nodes(&a, &b);
    tm_request_rec r = {.session = "s", .key = "i:1", .tool = "t", .stream = "r1", .message = "{}"};
    assert_int_equal(tm_store_request_begin(a, &r, 1), 0);
    told tb = {-1, 0}, ta = {-1, 0};
    tm_append_req q = {.session = "s", .stream = "r33", .data = "B", .len = 1, .flags = TM_APPEND_FINAL,
                       .request_key = "i:1", .effect = fx_owned_row, .effect_ud = "b", .cb = told_fn,
                       .cb_ud = &tb};
    assert_int_equal(tm_store_append_ex(b, &q), 0);
    assert_int_equal(tm_store_sync(b), 0);
    assert_int_equal(tb.status, TIDEMARK_EBUSY); /* a's record: b's run is refused whole */
    q.stream = "r1";
    q.data = "A";
    q.effect_ud = "a";
    q.cb_ud = &ta;
    assert_int_equal(tm_store_append_ex(a, &q), 0);
    assert_int_equal(tm_store_sync(a), 0);
    assert_int_equal(ta.status, 0);
    expect_rows(b, "owned", "[{\"id\":1,\"k\":\"a\"}]");
    collected c = {0};
    read_all(b, "s", "r33", 0, 10, &c);
    assert_int_equal(c.n, 0);
    /* a finished record takes no second completion either */
    tm_append_req again = {.session = "s", .stream = "r33", .data = "C", .len = 1,
                           .request_key = "i:1", .cb = told_fn, .cb_ud = &tb};
    assert_int_equal(tm_store_append_ex(b, &again), 0);
    assert_int_equal(tm_store_sync(b), 0);
    assert_int_equal(tb.status, TIDEMARK_EBUSY);
    tm_store_close(a);
    tm_store_close(b);
}

/* An effect's append may end a run of appends to its stream (a priming
 * event, then the response): sent as one statement after the effect. When
 * the effect's record is another node's, the batch is tried again without
 * it: the events before and after it are written, it is refused whole. */
static void test_effect_ends_run(void **state)
{
    (void)state;
    tm_store *a, *b;
    two_nodes(&a, &b);
    tm_request_rec ra = {.session = "s", .key = "i:1", .tool = "t", .stream = "r1", .message = "{}"};
    tm_request_rec rb = {.session = "s", .key = "i:2", .tool = "t", .stream = "r33", .message = "{}"};
    assert_int_equal(tm_store_request_begin(a, &ra, 1), 0);
    told t[4];
    assert_int_equal(tm_store_request_begin(b, &rb, 0), 0); /* queued, not waited for */
    tm_append_req q[4] = {
        {.session = "s", .stream = "r33", .data = "p", .len = 1},
        {.session = "s", .stream = "r33", .data = "A", .len = 1, .request_key = "i:1",
         .effect = fx_owned_row, .effect_ud = "refused"}, /* a's record */
        {.session = "s", .stream = "r33", .data = "q", .len = 1},
        {.session = "s", .stream = "r33", .data = "B", .len = 1, .request_key = "i:2",
         .effect = fx_owned_row, .effect_ud = "mine"}};
    append_batch(b, q, t, 4);
    assert_int_equal(t[0].status, 0);
    assert_int_equal(t[0].seq, 1);
    assert_int_equal(t[1].status, TIDEMARK_EBUSY);
    assert_int_equal(t[2].status, 0);
    assert_int_equal(t[2].seq, 2);
    assert_int_equal(t[3].status, 0);
    assert_int_equal(t[3].seq, 3);
    collected c = {0};
    expect_bytes(b, "r33", "pqB", &c);
    expect_rows(a, "owned", "[{\"id\":1,\"k\":\"mine\"}]");
    tm_request_rec got = {0};
    assert_int_equal(tm_store_request_get(a, "s", "i:2", &got), 0);
    assert_int_equal(got.state, TM_REQ_COMPLETED);
    assert_memory_equal(got.response, "B", 1);
    tm_request_rec_clear(&got);
    tm_store_close(a);
    tm_store_close(b);
}

/* An effect that runs SQL and goes on after its txn_exec failed (its
 * record is another node's, found at the sync inside it): nothing more
 * enters the aborted pipeline, the batch is rolled back on the same
 * connection (the epoch stays) and tried again without it. */
static int fx_exec_then_row(void *ud, tm_txn *txn)
{
    const char *args[1] = {ud};
    (void)tidemark_txn_exec(txn, "INSERT INTO ledger(k) VALUES (?1)", args, 1);
    json_t *row = json_pack("{s:s}", "k", (const char *)ud);
    (void)tidemark_txn_insert(txn, "owned", row);
    json_decref(row);
    return 0;
}

static void test_effect_exec_refused(void **state)
{
    (void)state;
    tm_store *a, *b;
    two_nodes(&a, &b);
    assert_int_equal(tm_store_exec_schema(b, "CREATE TABLE IF NOT EXISTS ledger(k text UNIQUE)"), 0);
    tm_request_rec ra = {.session = "s", .key = "i:1", .tool = "t", .stream = "r1", .message = "{}"};
    assert_int_equal(tm_store_request_begin(a, &ra, 1), 0);
    assert_int_equal(tm_store_append(b, "s", "r33", "z", 1, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_sync(b), 0);
    told t[3];
    tm_append_req q[3] = {
        {.session = "s", .stream = "r33", .data = "p", .len = 1},
        {.session = "s", .stream = "r33", .data = "A", .len = 1, .request_key = "i:1",
         .effect = fx_exec_then_row, .effect_ud = "x"}, /* a's record */
        {.session = "s", .stream = "r33", .data = "q", .len = 1}};
    append_batch(b, q, t, 3);
    assert_int_equal(t[0].status, 0);
    assert_int_equal(t[1].status, TIDEMARK_EBUSY);
    assert_int_equal(t[2].status, 0);
    collected c = {0};
    expect_bytes(b, "r33", "zpq", &c);
    assert_string_equal(c.epoch[1], c.epoch[0]); /* no reconnect */
    expect_rows(b, "owned", "[]");
    json_t *rows = NULL;
    assert_int_equal(tm_store_query(b, "SELECT k FROM ledger", NULL, 0, &rows), 0);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
    tm_store_close(a);
    tm_store_close(b);
}

/* Several effects of one batch, their records checked in the pipeline:
 * each gets its own answer (a record begun in the batch, another node's,
 * a finished one, none at all). */
static void test_effect_owners_batch(void **state)
{
    (void)state;
    int db = new_db();
    tm_store *a = open_db(db, NULL), *b = open_db(db, NULL);
    mk_session(a, "s");
    const char *st[5] = {"r1", "r2", "r3", "r4", "r5"};
    for (int i = 0; i < 5; i++)
        open_stream(a, "s", NULL, st[i]);
    tm_request_rec ra = {.session = "s", .key = "i:1", .tool = "t", .stream = "r1", .message = "{}"};
    tm_request_rec rb = {.session = "s", .key = "i:2", .tool = "t", .stream = "r2", .message = "{}"};
    tm_request_rec rf = {.session = "s", .key = "i:3", .tool = "t", .stream = "r3", .message = "{}"};
    assert_int_equal(tm_store_request_begin(a, &ra, 1), 0);
    assert_int_equal(tm_store_request_begin(b, &rb, 1), 0);
    assert_int_equal(tm_store_request_begin(b, &rf, 1), 0);
    tm_append_req done = {.session = "s", .stream = "r3", .data = "F", .len = 1, .request_key = "i:3"};
    assert_int_equal(tm_store_append_ex(b, &done), 0); /* i:3 finished */
    assert_int_equal(tm_store_sync(b), 0);
    static const char *keys[5] = {"i:1", "i:2", "i:3", "i:4", "i:5"};
    static const char *uds[5] = {"one", "two", "three", "four", "five"};
    told t[5];
    tm_store_hold(b);
    tm_request_rec r5 = {.session = "s", .key = "i:5", .tool = "t", .stream = "r5", .message = "{}"};
    for (int i = 0; i < 5; i++) {
        t[i] = (told){-1, 0};
        if (i == 4) /* its record begun in the same batch */
            assert_int_equal(tm_store_request_begin(b, &r5, 0), 0);
        tm_append_req q = {.session = "s", .stream = st[i], .data = "x", .len = 1, .request_key = keys[i],
                           .effect = fx_owned_row, .effect_ud = (void *)uds[i], .cb = told_fn, .cb_ud = &t[i]};
        assert_int_equal(tm_store_append_ex(b, &q), 0);
    }
    tm_store_release(b);
    assert_int_equal(tm_store_sync(b), 0);
    /* a's; b's; finished; none (test_effect_without_record); b's */
    int want[5] = {TIDEMARK_EBUSY, 0, TIDEMARK_EBUSY, TIDEMARK_EIO, 0};
    for (int i = 0; i < 5; i++)
        assert_int_equal(t[i].status, want[i]);
    expect_rows(a, "owned", "[{\"id\":1,\"k\":\"two\"},{\"id\":2,\"k\":\"five\"}]");
    tm_store_close(a);
    tm_store_close(b);
}

/* An effect whose request record is not there (its begin's batch did not
 * commit; its session is gone) is refused, typed, and writes nothing: run,
 * nothing would say it ran, and a retry would run it again. */
static void test_effect_without_record(void **state)
{
    (void)state;
    tm_store *st = open_db(new_db(), NULL);
    mk_session(st, "s");
    open_stream(st, "s", NULL, "r1");
    told t = {-1, 0};
    tm_append_req q = {.session = "s", .stream = "r1", .data = "A", .len = 1, .request_key = "i:9",
                       .effect = fx_owned_row, .effect_ud = "lost", .cb = told_fn, .cb_ud = &t};
    assert_int_equal(tm_store_append_ex(st, &q), 0);
    (void)tm_store_sync(st);
    assert_int_equal(t.status, TIDEMARK_EIO);
    json_t *rows = NULL;
    assert_int_equal(tm_store_rows(st, "owned", &rows), 0);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
    collected c = {0};
    read_all(st, "s", "r1", 0, 10, &c);
    assert_int_equal(c.n, 0);
    tm_store_close(st);
}

/* ---- effects in SQL, committed with the result ------------------------------------------ */

static int fx_sql(void *ud, tm_txn *txn)
{
    const char *args[1] = {ud};
    int rc = tidemark_txn_exec(txn, "INSERT INTO ledger(k) VALUES (?1)", args, 1);
    if (rc)
        return rc;
    json_t *row = json_pack("{s:s}", "k", (const char *)ud);
    rc = tidemark_txn_insert(txn, "rows", row);
    json_decref(row);
    return rc ? rc : strcmp(ud, "bad") == 0 ? TIDEMARK_EINVAL : 0;
}

static void test_effects_sql(void **state)
{
    (void)state;
    int db = new_db();
    tm_store *st = open_db(db, NULL);
    assert_int_equal(tm_store_exec_schema(st, "CREATE TABLE IF NOT EXISTS ledger(k text UNIQUE)"), 0);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    const char *keys[] = {"good", "bad", "good", "other"}; /* bad fails; the 2nd good breaks UNIQUE */
    told t[4];
    tm_store_hold(st); /* one batch: effects between pipelined statements */
    assert_int_equal(tm_store_append(st, "a", "r1", "plain", 5, 0, NULL, NULL), 0);
    for (int i = 0; i < 4; i++) {
        t[i] = (told){-1, 0};
        tm_append_req q = {.session = "a", .stream = "r1", .data = "done", .len = 4, .effect = fx_sql,
                           .effect_ud = (void *)keys[i], .fallback = "fell", .fallback_len = 4,
                           .cb = told_fn, .cb_ud = &t[i]};
        assert_int_equal(tm_store_append_ex(st, &q), 0);
    }
    tm_store_release(st);
    assert_int_equal(tm_store_sync(st), 0);
    for (int i = 0; i < 4; i++) { /* every append told its own seq */
        assert_int_equal(t[i].status, 0);
        assert_int_equal(t[i].seq, i + 2);
    }
    collected c = {0};
    read_all(st, "a", "r1", 0, 10, &c);
    assert_int_equal(c.n, 5);
    const char *want[] = {"done", "fell", "fell", "done"};
    for (int i = 0; i < 4; i++)
        assert_memory_equal(c.data[i + 1], want[i], 4);
    json_t *rows = NULL;
    assert_int_equal(tm_store_query(st, "SELECT k FROM ledger ORDER BY k", NULL, 0, &rows), 0);
    char *txt = json_dumps(rows, JSON_COMPACT);
    assert_string_equal(txt, "[{\"k\":\"good\"},{\"k\":\"other\"}]");
    free(txt);
    json_decref(rows);
    assert_int_equal(tm_store_rows(st, "rows", &rows), 0);
    txt = json_dumps(rows, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(txt, "[{\"id\":1,\"k\":\"good\"},{\"id\":2,\"k\":\"other\"}]");
    free(txt);
    json_decref(rows);
    const char *arg[1] = {"good"};
    assert_int_equal(tm_store_query(st, "SELECT count(*) AS n FROM ledger WHERE k = ?1;", arg, 1, &rows), 0);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(rows, 0), "n")), 1);
    json_decref(rows);
    tm_store_close(st);
}

static int fx_plan(void *ud, tm_txn *txn)
{
    (void)ud;
    return tidemark_txn_exec(txn, "INSERT INTO plans(mode) SELECT current_setting('plan_cache_mode')",
                             NULL, 0);
}

/* The writer plans its own statements once (force_generic_plan); an
 * effect's SQL runs with PostgreSQL's usual planning, before and after
 * another effect that failed and was rolled back to its savepoint. */
static void test_effect_planning(void **state)
{
    (void)state;
    int db = new_db();
    tm_store *st = open_db(db, NULL);
    assert_int_equal(tm_store_exec_schema(st, "CREATE TABLE IF NOT EXISTS plans(mode text);"
                                              "CREATE TABLE IF NOT EXISTS ledger(k text UNIQUE)"), 0);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    tm_store_hold(st);
    tm_append_req q = {.session = "a", .stream = "r1", .data = "p", .len = 1, .effect = fx_plan};
    assert_int_equal(tm_store_append_ex(st, &q), 0);
    tm_append_req bad = {.session = "a", .stream = "r1", .data = "b", .len = 1, .effect = fx_sql,
                         .effect_ud = (void *)"bad", .fallback = "f", .fallback_len = 1};
    assert_int_equal(tm_store_append_ex(st, &bad), 0);
    assert_int_equal(tm_store_append_ex(st, &q), 0);
    tm_store_release(st);
    assert_int_equal(tm_store_sync(st), 0);
    json_t *rows = NULL;
    assert_int_equal(tm_store_query(st, "SELECT mode FROM plans", NULL, 0, &rows), 0);
    char *txt = json_dumps(rows, JSON_COMPACT);
    assert_string_equal(txt, "[{\"mode\":\"auto\"},{\"mode\":\"auto\"}]");
    free(txt);
    json_decref(rows);
    tm_store_close(st);
}

static int fx_counted(void *ud, tm_txn *txn)
{
    (void)ud;
    json_t *row = json_pack("{s:s}", "k", "v");
    int rc = tidemark_txn_insert(txn, "mx", row);
    json_decref(row);
    return rc;
}

/* Effects of one batch each take the next row id of one table, each in
 * its own savepoint: the counter's old row versions keep plain xids.
 * (With INSERT ... ON CONFLICT DO UPDATE, schema 2, every old version
 * had a MultiXact for xmax, which every later look-up resolved.) */
static void test_row_counter_plain(void **state)
{
    (void)state;
    int db = new_db();
    char name[16];
    snprintf(name, sizeof name, "t%d", db);
    admin_sql(name, "CREATE EXTENSION IF NOT EXISTS pageinspect");
    tm_store *st = open_db(db, NULL);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    assert_int_equal(tm_store_sync(st), 0);
    enum { N = 12 };
    for (int round = 0; round < 2; round++) { /* the table's first row, then later ones */
        tm_store_hold(st);
        for (int i = 0; i < N; i++) {
            tm_append_req q = {.session = "a", .stream = "r1", .data = "d", .len = 1,
                               .effect = fx_counted};
            assert_int_equal(tm_store_append_ex(st, &q), 0);
        }
        tm_store_release(st);
        assert_int_equal(tm_store_sync(st), 0);
    }
    json_t *rows = NULL;
    assert_int_equal(tm_store_query(st, "SELECT count(*) AS n FROM tm_rows WHERE tbl = 'mx'", NULL, 0,
                                    &rows), 0);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(rows, 0), "n")), 2 * N);
    json_decref(rows);
    const char *multi =
        "SELECT count(*) FILTER (WHERE t_infomask & 4096 <> 0) AS multi, count(*) AS versions "
        "FROM generate_series(0, (pg_relation_size('tm_rowids') / 8192)::int - 1) AS b, "
        "heap_page_items(get_raw_page('tm_rowids', b)) WHERE t_xmin IS NOT NULL";
    assert_int_equal(tm_store_query(st, multi, NULL, 0, &rows), 0);
    json_t *r0 = json_array_get(rows, 0);
    assert_true(json_integer_value(json_object_get(r0, "versions")) > 1);
    assert_int_equal(json_integer_value(json_object_get(r0, "multi")), 0);
    json_decref(rows);
    tm_store_close(st);
}

/* One number an admin query on database db answers. */
static long long admin_value(const char *db, const char *sql)
{
    char u[600];
    uri_of(db, u, sizeof u);
    PGconn *c = PQconnectdb(u);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s: %s", sql, PQresultErrorMessage(r));
    long long v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(c);
    return v;
}

/* The writer's NOTIFY and owner statements are planned once, when the
 * tables are empty: their plans must still look rows up by key, never
 * scan a whole table (a plan made then and kept scanned tm_streams and
 * tm_requests from end to end at every batch). Counted by PostgreSQL's
 * seq_scan of each table, once every backend of the store has exited (a
 * backend's counts reach the statistics when it ends; an autovacuum worker
 * in the database is no client and not waited for). */
static void test_writer_plans_probe(void **state)
{
    (void)state;
    int db = new_db();
    char name[16];
    snprintf(name, sizeof name, "t%d", db);
    tm_store *st = open_db(db, NULL);
    mk_session(st, "s");
    open_stream(st, "s", NULL, "r1");
    enum { N = 24 };
    for (int i = 0; i < N; i++) { /* a batch with an effect whose record is older: both statements */
        char key[16];
        snprintf(key, sizeof key, "i:%d", i);
        tm_request_rec r = {.session = "s", .key = key, .tool = "t", .stream = "r1", .message = "{}"};
        assert_int_equal(tm_store_request_begin(st, &r, 1), 0);
        told t = {-1, 0};
        tm_append_req q = {.session = "s", .stream = "r1", .data = "A", .len = 1, .request_key = key,
                           .effect = fx_owned_row, .effect_ud = "x", .cb = told_fn, .cb_ud = &t};
        assert_int_equal(tm_store_append_ex(st, &q), 0);
        assert_int_equal(tm_store_sync(st), 0);
        assert_int_equal(t.status, 0);
    }
    tm_store_close(st);
    const char *others = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                         "AND pid <> pg_backend_pid() AND backend_type = 'client backend'";
    for (int i = 0; i < 200 && admin_value(name, others) > 0; i++) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(admin_value(name, others), 0);
    long long streams = admin_value(name, "SELECT seq_scan FROM pg_stat_user_tables "
                                          "WHERE relname = 'tm_streams'");
    long long requests = admin_value(name, "SELECT seq_scan FROM pg_stat_user_tables "
                                           "WHERE relname = 'tm_requests'");
    print_message("seq_scan: tm_streams %lld, tm_requests %lld in %d batches\n", streams, requests, N);
    assert_true(streams < N / 2);
    assert_true(requests < N / 2);
}

/* ---- schema ------------------------------------------------------------------------------ */

static void *open_close(void *arg)
{
    tm_store *st = NULL;
    int rc = open_uri_db(*(int *)arg, NULL, &st);
    if (rc == 0)
        tm_store_close(st);
    return (void *)(intptr_t)rc;
}

static void test_schema(void **state)
{
    (void)state;
    int db = new_db();
    pthread_t t[4];
    for (int i = 0; i < 4; i++) /* nodes starting at once on an empty database */
        assert_int_equal(pthread_create(&t[i], NULL, open_close, &db), 0);
    for (int i = 0; i < 4; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        assert_int_equal((intptr_t)rc, 0);
    }
    char name[16];
    snprintf(name, sizeof name, "t%d", db);
    admin_sql(name, "UPDATE tm_meta SET v = '99' WHERE k = 'schema'");
    tm_store *st = NULL;
    assert_int_equal(open_uri_db(db, NULL, &st), TIDEMARK_ERANGE); /* a newer build's */
    tm_store_options early = {.emit_early = 1};
    assert_int_equal(open_uri_db(db, &early, &st), TIDEMARK_ENOTSUP);
}

static void test_kv(void **state)
{
    (void)state;
    int db = new_db();
    tm_store *a = open_db(db, NULL), *b = open_db(db, NULL);
    unsigned char v[32], got[64];
    for (int i = 0; i < 32; i++)
        v[i] = (unsigned char)(i * 37); /* NUL and high bytes too */
    size_t len = 0;
    assert_int_equal(tm_store_kv_get(a, "k", got, sizeof got, &len), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_kv_create(a, "k", v, sizeof v), 0);
    assert_int_equal(tm_store_kv_create(b, "k", "other", 5), TIDEMARK_EEXIST); /* the first wins */
    assert_int_equal(tm_store_kv_get(b, "k", got, sizeof got, &len), 0);
    assert_int_equal(len, sizeof v);
    assert_memory_equal(got, v, sizeof v);
    assert_int_equal(tm_store_kv_get(b, "k", got, 8, &len), TIDEMARK_ERANGE);
    tm_store_close(a);
    tm_store_close(b);
}

/* A database made by schema 1 (its tm_append took one event) is migrated
 * at open, and the new tm_append works on it. */
static void test_migrate_from_1(void **state)
{
    (void)state;
    int db = new_db();
    char name[16];
    snprintf(name, sizeof name, "t%d", db);
    admin_sql(name, "CREATE TABLE tm_meta(k text PRIMARY KEY, v text);"
                    "INSERT INTO tm_meta VALUES ('schema', '1')");
    admin_sql(name, tm_pg_migrations[0]);
    tm_store *st = open_db(db, NULL);
    mk_session(st, "s");
    open_stream(st, "s", NULL, "r1");
    fill(st, "s", "r1", 3);
    collected c = {0};
    read_all(st, "s", "r1", 0, 10, &c);
    expect_run(&c, 1, 3);
    json_t *rows = NULL;
    assert_int_equal(tm_store_query(st, "SELECT v FROM tm_meta WHERE k = 'schema'", NULL, 0, &rows), 0);
    char want[12];
    snprintf(want, sizeof want, "%d", TM_PG_SCHEMA_VERSION);
    assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 0), "v")), want);
    json_decref(rows);
    tm_store_close(st);
}

/* A batch's appends to one stream go as runs: every callback its own seq,
 * every event its own bytes, another stream between them. */
static void test_runs(void **state)
{
    (void)state;
    tm_store *st = open_db(new_db(), NULL);
    mk_session(st, "s");
    open_stream(st, "s", NULL, "r1");
    open_stream(st, "s", NULL, "r2");
    assert_int_equal(tm_store_sync(st), 0);
    enum { N = 120 };
    static told t[N];
    char data[N][16];
    tm_store_hold(st);
    for (int i = 0; i < N; i++) {
        t[i] = (told){-1, 0};
        int len = snprintf(data[i], sizeof data[i], "ev-%d", i + 1);
        if (i == 60)
            assert_int_equal(tm_store_append(st, "s", "r2", "", 0, 0, NULL, NULL), 0);
        assert_int_equal(tm_store_append(st, "s", "r1", data[i], (size_t)len,
                                         i == N - 1 ? TM_APPEND_FINAL : 0, told_fn, &t[i]),
                         0);
    }
    tm_store_release(st);
    assert_int_equal(tm_store_sync(st), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(t[i].status, 0);
        assert_int_equal(t[i].seq, i + 1);
    }
    collected c = {0};
    read_all(st, "s", "r1", 0, N + 10, &c);
    assert_int_equal(c.n, N);
    for (int i = 0; i < N; i++)
        assert_memory_equal(c.data[i], data[i], strlen(data[i]));
    tm_stream_bounds b;
    assert_int_equal(tm_store_bounds(st, "s", "r1", &b), 0);
    assert_int_equal(b.closed, 1);
    assert_int_equal(tm_store_bounds(st, "s", "r2", &b), 0);
    assert_int_equal(b.head, 1);
    assert_int_equal(tm_store_append(st, "s", "r1", "x", 1, 0, NULL, NULL), TIDEMARK_ECLOSED);
    tm_store_close(st);
}

/* ---- durability replicated, and a standby that is gone ------------------------------------ */

static int session_visible(tm_store *st, const char *id)
{
    tm_session_rec rec;
    int rc = tm_store_session_get(st, id, &rec);
    if (rc == 0)
        tm_session_rec_clear(&rec);
    return rc == 0;
}

static void test_standby_lost(void **state)
{
    (void)state;
    int db = new_db();
    tm_store_options o = {.durability = TM_DURABILITY_REPLICATED, .store_timeout_ms = 1000};
    tm_store *st = open_db(db, &o);
    assert_int_equal(tm_store_writable(st), 0);
    assert_int_equal(tm_store_pg_not_replicated(st), 0);
    mk_session(st, "before");
    char args[128];
    snprintf(args, sizeof args, "stop-node %s 1", g_dir);
    assert_int_equal(cluster(args, NULL, 0), 0);
    /* the commit waits for a standby that is gone: not acknowledged, in time */
    long long t0 = now_ms();
    tm_session_rec rec = {.id = "during", .created_ms = 1, .last_seen_ms = 1};
    assert_int_equal(tm_store_session_create(st, &rec), TIDEMARK_EIO);
    long long took = now_ms() - t0;
    assert_true(took >= 900 && took < 4000);
    assert_false(session_visible(st, "during")); /* no reader sees it either */
    /* ... yet its backend still waits for a standby: absent now is no proof */
    assert_int_equal(tm_store_in_doubt(st), 1);
    snprintf(args, sizeof args, "start-node %s 1", g_dir);
    assert_int_equal(cluster(args, NULL, 0), 0);
    /* service back once the standby is */
    int ok = 0;
    for (long long deadline = now_ms() + 15000; !ok && now_ms() < deadline;) {
        tm_session_rec r2 = {.id = "after", .created_ms = 1, .last_seen_ms = 1};
        ok = tm_store_session_create(st, &r2) == 0;
    }
    assert_true(ok);
    assert_true(session_visible(st, "after"));
    /* the COMMIT left waiting lands once the standby is back, and only then
     * is the store out of doubt (recovery.c forgot such a record as absent
     * while it waited, and the call it began was never finished) */
    int landed = 0, doubt = 1;
    for (long long deadline = now_ms() + 15000; (!landed || doubt) && now_ms() < deadline;
         usleep(20000)) {
        landed = session_visible(st, "during");
        doubt = tm_store_in_doubt(st);
    }
    assert_true(landed);
    assert_int_equal(doubt, 0);
    tm_store_close(st);
}

static void no_expiry(void *ud, const char *id)
{
    (void)ud;
    (void)id;
}

/* A pooled connection to a server that takes no writes (SQLSTATE 25006: a
 * proxy sent it to a standby, or to a primary mid-promotion) is closed,
 * never given back: once writes are possible again, a pooled write works. */
static void test_pool_drops_read_only(void **state)
{
    (void)state;
    int db = new_db();
    char name[16], sql[160];
    snprintf(name, sizeof name, "t%d", db);
    /* as through a proxy: without target_session_attrs=read-write, which
     * would refuse a read-only server at connect */
    char u[600], *at;
    uri_of(name, u, sizeof u);
    if ((at = strstr(u, "target_session_attrs=read-write&")) != NULL)
        memmove(at, at + 32, strlen(at + 32) + 1);
    assert_null(strstr(u, "target_session_attrs"));
    tm_store *st = NULL;
    tm_store_options def = {0};
    assert_int_equal(tm_store_open(u, &def, &st), 0);
    assert_int_equal(tm_store_sessions_expire(st, 0, no_expiry, NULL), 0);
    snprintf(sql, sizeof sql, "ALTER DATABASE %s SET default_transaction_read_only = on", name);
    admin_sql("postgres", sql);
    /* the pool's connections end; the next ones open read-only */
    admin_sql("postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE application_name LIKE 'tidemark-read-%'");
    for (int i = 0; i < 12; i++) /* past every ended connection: read-only ones */
        assert_int_not_equal(tm_store_sessions_expire(st, 0, no_expiry, NULL), 0);
    snprintf(sql, sizeof sql, "ALTER DATABASE %s RESET default_transaction_read_only", name);
    admin_sql("postgres", sql);
    assert_int_equal(tm_store_sessions_expire(st, 0, no_expiry, NULL), 0);
    tm_store_close(st);
}

/* Nodes of database db whose lease holds now, on the database's clock. */
static int leases_held(const char *db)
{
    return (int)admin_value(db, "SELECT count(*) FROM tm_nodes WHERE until_ms > tm_now()");
}

/* With its synchronous standby gone (as after a failover, until a standby
 * follows the new primary), a live node's lease still holds: its renewals
 * do not wait for a standby. (They did: each became visible only when the
 * store timeout cancelled its wait, and the lease lapsed between two, so
 * another node would take this node's running calls over.) */
static void test_lease_without_standby(void **state)
{
    (void)state;
    int db = new_db();
    char name[16], args[128];
    snprintf(name, sizeof name, "t%d", db);
    tm_store_options o = {.durability = TM_DURABILITY_REPLICATED, .store_timeout_ms = 2000};
    tm_store *st = open_db(db, &o);
    assert_int_equal(leases_held(name), 1);
    snprintf(args, sizeof args, "stop-node %s 1", g_dir);
    assert_int_equal(cluster(args, NULL, 0), 0);
    int lapsed = 0;
    for (long long end = now_ms() + 7000; now_ms() < end; usleep(100000))
        lapsed += leases_held(name) == 0;
    snprintf(args, sizeof args, "start-node %s 1", g_dir);
    assert_int_equal(cluster(args, NULL, 0), 0);
    assert_int_equal(lapsed, 0);
    tm_store_close(st);
}

static void test_not_replicated(void **state)
{
    (void)state;
    int db = new_db();
    char name[16];
    snprintf(name, sizeof name, "t%d", db);
    tm_store_options o = {.durability = TM_DURABILITY_REPLICATED, .store_timeout_ms = 2000};
    tm_store *st = open_db(db, &o);
    admin_sql("postgres", "ALTER SYSTEM SET synchronous_standby_names = ''");
    admin_sql("postgres", "SELECT pg_reload_conf()");
    int refused = 0;
    for (long long deadline = now_ms() + 5000; !refused && now_ms() < deadline; usleep(20000))
        refused = tm_store_pg_not_replicated(st);
    assert_true(refused);
    assert_int_equal(tm_store_writable(st), TIDEMARK_EIO);
    assert_string_equal(tm_store_unavailable_reason(st), "store_not_replicated");
    tm_session_rec rec = {.id = "x", .created_ms = 1, .last_seen_ms = 1};
    assert_int_equal(tm_store_session_create(st, &rec), TIDEMARK_EIO);
    assert_false(session_visible(st, "x"));
    admin_sql("postgres", "ALTER SYSTEM RESET synchronous_standby_names");
    admin_sql("postgres", "SELECT pg_reload_conf()");
    for (long long deadline = now_ms() + 5000; refused && now_ms() < deadline; usleep(20000))
        refused = tm_store_pg_not_replicated(st);
    assert_false(refused);
    assert_int_equal(tm_store_session_create(st, &rec), 0);
    assert_string_equal(tm_store_unavailable_reason(st), "store_unavailable");
    tm_store_close(st);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/tm-pg-test-XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    char args[128];
    snprintf(args, sizeof args, "start %s 1", g_dir);
    int rc = cluster(args, g_uri, sizeof g_uri);
    if (rc == 77) {
        fprintf(stderr, "test_store_pg: PostgreSQL is not installed: skipped\n");
        rmdir(g_dir);
        return 77;
    }
    if (rc != 0 || !strstr(g_uri, "/tidemark?")) {
        fprintf(stderr, "test_store_pg: cannot start a PostgreSQL cluster (%d)\n", rc);
        cluster_destroy();
        return 1;
    }
    (void)memory_contract_main;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_create_get),
        cmocka_unit_test(test_session_touch),
        cmocka_unit_test(test_session_delete),
        cmocka_unit_test(test_stream_open_numbering),
        cmocka_unit_test(test_stream_g_reopen_keeps_seqs),
        cmocka_unit_test(test_append_seqs_cb_listener),
        cmocka_unit_test(test_append_final_closes),
        cmocka_unit_test(test_close_stream),
        cmocka_unit_test(test_read_order_and_limits),
        cmocka_unit_test(test_read_after_max_seq),
        cmocka_unit_test(test_bytes_exact),
        cmocka_unit_test(test_retention_trimming),
        cmocka_unit_test(test_retention_long_run),
        cmocka_unit_test(test_event_epoch_untrimmed),
        cmocka_unit_test(test_effect_rows),
        cmocka_unit_test(test_session_attrs),
        cmocka_unit_test(test_sessions_with_attr),
        cmocka_unit_test(test_request_begin_get),
        cmocka_unit_test(test_request_complete),
        cmocka_unit_test(test_session_request_get),
        cmocka_unit_test(test_requests_unfinished),
        cmocka_unit_test(test_request_keys_any_bytes),
        cmocka_unit_test(test_two_nodes),
        cmocka_unit_test(test_live_reads),
        cmocka_unit_test(test_request_claim),
        cmocka_unit_test(test_effect_owner),
        cmocka_unit_test(test_effect_owners_batch),
        cmocka_unit_test(test_effect_ends_run),
        cmocka_unit_test(test_effect_exec_refused),
        cmocka_unit_test(test_effects_sql),
        cmocka_unit_test(test_effect_planning),
        cmocka_unit_test(test_row_counter_plain),
        cmocka_unit_test(test_effect_without_record),
        cmocka_unit_test(test_writer_plans_probe),
        cmocka_unit_test(test_schema),
        cmocka_unit_test(test_kv),
        cmocka_unit_test(test_migrate_from_1),
        cmocka_unit_test(test_pool_drops_read_only),
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_not_replicated),
        cmocka_unit_test(test_standby_lost),
        cmocka_unit_test(test_lease_without_standby),
    };
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (cluster_destroy() != 0) {
        fprintf(stderr, "test_store_pg: %s not removed\n", g_dir);
        return rc ? rc : 1;
    }
    return rc;
}
