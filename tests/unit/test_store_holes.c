/* test_store_holes.c - the store-side holes a hostile client found (issue 10),
 * each as it was reported, on the SQLite store (and the memory store where it
 * had the same hole):
 *   the WAL never checkpointed (grew without bound, also when idle);
 *   a damaged WAL or an older copy put back, opened without a word;
 *   a damaged database opened and written into;
 *   two writers on one file;
 *   a full disk that kept failing writes after space came back;
 *   one session attribute change rewriting all of them (quadratic WAL bytes);
 *   a cache entry kept for every call of a session.
 * Linked with the crash-points library for its fault VFS (a full disk on
 * demand, and a count of the bytes written to WAL files). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/sqlite_util.h"
#include "log/store.h"
#include "tidemark/tidemark.h"
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char g_dir[] = "/tmp/tm-store-holes-XXXXXX";

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long long fsize(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : 0;
}

static void db_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", g_dir, name);
}

static int open_opts(const char *path, int accept_loss, tm_store **st)
{
    tm_store_options o = {.durability = TM_DURABILITY_PROCESS, .accept_loss = accept_loss};
    return tm_store_sqlite_open(path, &o, st);
}

static tm_store *open_ok(const char *path)
{
    tm_store *st = NULL;
    assert_int_equal(open_opts(path, 0, &st), 0);
    return st;
}

static void mk_session(tm_store *st, const char *id)
{
    tm_session_rec rec = {.id = (char *)id, .protocol_version = "2025-11-25", .client = "{}",
                          .created_ms = 1, .last_seen_ms = 1};
    assert_int_equal(tm_store_session_create(st, &rec), 0);
}

static void mk_stream(tm_store *st, const char *session, char out[TM_STREAM_MAX])
{
    assert_int_equal(tm_store_stream_open(st, session, NULL, out), 0);
}

static void append_n(tm_store *st, const char *session, const char *stream, int n, size_t size,
                     int sync_every)
{
    char *buf = malloc(size);
    assert_non_null(buf);
    for (int i = 0; i < n; i++) {
        memset(buf, 'a' + i % 26, size);
        assert_int_equal(tm_store_append(st, session, stream, buf, size, 0, NULL, NULL), 0);
        if (sync_every && (i + 1) % sync_every == 0)
            assert_int_equal(tm_store_sync(st), 0);
    }
    assert_int_equal(tm_store_sync(st), 0);
    free(buf);
}

typedef struct counter {
    uint64_t n, last, bad;
} counter;

static int count_ev(void *ud, const tm_event *ev)
{
    counter *c = ud;
    if (ev->seq != c->last + 1)
        c->bad++;
    c->last = ev->seq;
    c->n++;
    return 0;
}

static uint64_t count_events(tm_store *st, const char *session, const char *stream)
{
    counter c = {0};
    for (;;) {
        uint64_t before = c.n;
        assert_int_equal(tm_store_read(st, session, stream, c.last, 1000, count_ev, &c), 0);
        if (c.n == before)
            break;
    }
    assert_int_equal(c.bad, 0);
    return c.n;
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(out);
    if (in) {
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0)
            assert_int_equal(fwrite(buf, 1, n, out), n);
        fclose(in);
    }
    fclose(out);
}

static void garbage_at(const char *path, long long off, size_t n)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    char *g = malloc(n);
    for (size_t i = 0; i < n; i++)
        g[i] = (char)(0x5a ^ (i * 131));
    assert_int_equal(pwrite(fd, g, n, off), (ssize_t)n);
    free(g);
    close(fd);
}

/* ---- A: the WAL is checkpointed, bounded under load, truncated when idle ---------- */

static void test_wal_bounded(void **state)
{
    (void)state;
    char path[128], wal[140];
    db_path(path, sizeof path, "wal.db");
    snprintf(wal, sizeof wal, "%s-wal", path);
    tm_store *st = open_ok(path);
    mk_session(st, "s");
    char r[TM_STREAM_MAX];
    long long max_wal = 0;
    /* 96 MiB of events through the store, with old events read back now and
     * then (readers are what usually keep a checkpoint from completing). */
    for (int round = 0; round < 96; round++) {
        mk_stream(st, "s", r);
        append_n(st, "s", r, 1024, 1024, 64);
        assert_int_equal(count_events(st, "s", r), 1024);
        long long w = fsize(wal);
        if (w > max_wal)
            max_wal = w;
    }
    print_message("WAL at most %lld bytes while 96 MiB of events went through\n", max_wal);
    assert_true(max_wal <= 40LL << 20);
    /* Idle: the WAL shrinks, within a deadline. */
    long long t0 = now_ms();
    while (fsize(wal) > 64 * 1024 && now_ms() - t0 < 5000)
        nap_ms(20);
    print_message("idle: WAL %lld bytes after %lld ms\n", fsize(wal), now_ms() - t0);
    assert_true(fsize(wal) <= 64 * 1024);
    tm_store_close(st);
}

/* ---- B: the durable head: a store that comes back shorter is refused -------------- */

static void wait_head(const char *path, unsigned long long commits)
{
    tm_head_rec h = {0};
    long long t0 = now_ms();
    while ((tm_head_read(path, &h) != 0 || h.commits < commits) && now_ms() - t0 < 5000)
        nap_ms(10);
    assert_true(h.commits >= commits);
}

/* 300 acknowledged commits, all still in the WAL (a reader's snapshot keeps
 * the checkpointer out), then the files as a crash leaves them, with 4 KiB
 * of garbage in the middle of the WAL. */
static void test_damaged_wal_refused(void **state)
{
    (void)state;
    char path[128], img[128], from[160], to[160];
    db_path(path, sizeof path, "head.db");
    db_path(img, sizeof img, "head-img.db");
    tm_store *st = open_ok(path);
    mk_session(st, "s");
    char r[TM_STREAM_MAX];
    mk_stream(st, "s", r);
    assert_int_equal(tm_store_sync(st), 0);
    sqlite3 *reader;
    assert_int_equal(sqlite3_open(path, &reader), SQLITE_OK);
    assert_int_equal(sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM tm_events;", NULL, NULL, NULL),
                     SQLITE_OK);
    tm_head_rec before;
    assert_int_equal(tm_head_read(path, &before), 0);
    append_n(st, "s", r, 300, 200, 1);
    wait_head(path, before.commits + 300);
    const char *ext[] = {"", "-wal", ".head"};
    for (int i = 0; i < 3; i++) {
        snprintf(from, sizeof from, "%s%s", path, ext[i]);
        snprintf(to, sizeof to, "%s%s", img, ext[i]);
        copy_file(from, to);
    }
    sqlite3_exec(reader, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(reader);
    tm_store_close(st);

    snprintf(to, sizeof to, "%s-wal", img);
    long long wal = fsize(to);
    assert_true(wal > 300 * 4096);
    garbage_at(to, wal / 2 / 4096 * 4096, 4096);
    tm_store *bad = NULL;
    assert_int_equal(open_opts(img, 0, &bad), TIDEMARK_ERANGE);
    assert_null(bad);
    /* Accepting the loss opens it, and the loss is real. */
    assert_int_equal(open_opts(img, 1, &bad), 0);
    uint64_t n = count_events(bad, "s", r);
    print_message("after the damaged WAL: %llu of 300 events\n", (unsigned long long)n);
    assert_true(n < 300);
    tm_store_close(bad);
    /* Accepted once: the head file now says what the database holds. */
    assert_int_equal(open_opts(img, 0, &bad), 0);
    tm_store_close(bad);
}

/* An older copy of the database put back (the head file stays). */
static void test_older_copy_refused(void **state)
{
    (void)state;
    char path[128], old[128], from[160], to[160];
    db_path(path, sizeof path, "older.db");
    db_path(old, sizeof old, "older-copy.db");
    tm_store *st = open_ok(path);
    mk_session(st, "s");
    char r[TM_STREAM_MAX];
    mk_stream(st, "s", r);
    append_n(st, "s", r, 10, 100, 1);
    tm_store_close(st);
    copy_file(path, old);
    st = open_ok(path);
    append_n(st, "s", r, 10, 100, 1);
    tm_store_close(st);
    copy_file(old, path);
    snprintf(from, sizeof from, "%s-wal", path);
    unlink(from);
    assert_int_equal(open_opts(path, 0, &st), TIDEMARK_ERANGE);
    assert_int_equal(open_opts(path, 1, &st), 0);
    assert_int_equal(count_events(st, "s", r), 10);
    tm_store_close(st);
    (void)to;
}

/* ---- C: a damaged database is refused, and never written into ----------------------- */

static void fill_db(const char *path, char r[TM_STREAM_MAX])
{
    tm_store *st = open_ok(path);
    mk_session(st, "s");
    mk_stream(st, "s", r);
    append_n(st, "s", r, 2000, 1000, 100);
    tm_store_close(st);
}

static void test_damaged_db_refused(void **state)
{
    (void)state;
    char path[128], r[TM_STREAM_MAX];
    db_path(path, sizeof path, "damaged.db");
    fill_db(path, r);
    long long size = fsize(path);
    assert_true(size > 1 << 20);
    garbage_at(path, size / 2 / 4096 * 4096, 8192);
    tm_store *st = NULL;
    assert_int_equal(open_opts(path, 0, &st), TIDEMARK_EIO);
    assert_int_equal(open_opts(path, 1, &st), TIDEMARK_EIO); /* accept_loss is not for damage */
}

/* The file offset of the middle one of tm_events' b-tree leaves: damage
 * there is met by any full read (damage on an overflow page holding only
 * the end of an event's bytes is not: SQLite keeps no checksums). */
static long long events_leaf_offset(const char *path)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    json_t *rows = NULL;
    assert_int_equal(tm_sqlite_query_json(db, "SELECT pageno FROM dbstat WHERE name = 'tm_events'"
                                          " AND pagetype = 'leaf' ORDER BY pageno", NULL, 0, &rows), 0);
    assert_true(json_array_size(rows) > 2);
    json_t *mid = json_array_get(rows, json_array_size(rows) / 2);
    long long pageno = json_integer_value(json_object_get(mid, "pageno"));
    json_decref(rows);
    sqlite3_close(db);
    return (pageno - 1) * 4096;
}

/* Damage that appears while the store runs: the first statement that meets
 * it stops every further write. */
static void test_damage_at_run_time(void **state)
{
    (void)state;
    char path[128], r[TM_STREAM_MAX];
    db_path(path, sizeof path, "rtdamage.db");
    fill_db(path, r);
    long long leaf = events_leaf_offset(path);
    tm_store *st = open_ok(path);
    garbage_at(path, leaf, 4096);
    counter c = {0};
    int rc = 0;
    for (uint64_t after = 0; rc == 0 && after < 2000; after += 100)
        rc = tm_store_read(st, "s", r, after, 100, count_ev, &c);
    assert_int_not_equal(rc, 0);
    assert_int_equal(tm_store_writable(st), TIDEMARK_EIO);
    char r2[TM_STREAM_MAX];
    assert_int_equal(tm_store_stream_open(st, "s", NULL, r2), TIDEMARK_EIO);
    tm_store_close(st);
    assert_int_equal(open_opts(path, 0, &st), TIDEMARK_EIO);
}

/* ---- D: one writer per database file --------------------------------------------------- */

static void test_one_writer(void **state)
{
    (void)state;
    char path[128];
    db_path(path, sizeof path, "two.db");
    tm_store *a = open_ok(path), *b = NULL;
    assert_int_equal(open_opts(path, 0, &b), TIDEMARK_EBUSY);
    assert_null(b);
    mk_session(a, "s"); /* the first is unharmed */
    tm_store_close(a);
    b = open_ok(path);
    tm_session_rec rec;
    assert_int_equal(tm_store_session_get(b, "s", &rec), 0);
    tm_session_rec_clear(&rec);
    tm_store_close(b);
}

/* ---- E: a full disk: writes fail closed, then recover without a restart ----------------- */

typedef struct cbrec {
    int n, failed;
    uint64_t last_ok;
} cbrec;

static void on_cb(void *ud, int status, uint64_t seq)
{
    cbrec *c = ud;
    c->n++;
    if (status)
        c->failed++;
    else
        c->last_ok = seq;
}

static void test_disk_full_recovers(void **state)
{
    (void)state;
    char path[128], r[TM_STREAM_MAX], r2[TM_STREAM_MAX];
    db_path(path, sizeof path, "full.db");
    tm_store *st = open_ok(path);
    mk_session(st, "s");
    mk_stream(st, "s", r);
    append_n(st, "s", r, 5, 10, 1);

    tm_faultvfs_arm(1);
    uint64_t mark = tm_store_mark(st);
    tm_request_rec rq = {.session = "s", .key = "i:1", .tool = "t", .stream = r, .message = "{}"};
    assert_int_equal(tm_store_request_begin(st, &rq, 0), 0); /* queued, not waited for */
    cbrec cb = {0};
    int refused = 0;
    for (int i = 0; i < 20; i++) /* accepted until the failure is known, then refused */
        refused += tm_store_append(st, "s", r, "lost", 4, 0, on_cb, &cb) != 0;
    assert_int_equal(tm_store_sync(st), TIDEMARK_EIO);
    assert_int_equal(cb.n, 20 - refused); /* every accepted append heard it failed */
    assert_int_equal(cb.failed, cb.n);
    assert_int_equal(tm_store_writable(st), TIDEMARK_EIO);
    assert_int_equal(tm_store_stream_open(st, "s", NULL, r2), TIDEMARK_EIO);
    assert_int_equal(tm_store_append(st, "s", r, "x", 1, 0, NULL, NULL), TIDEMARK_EIO);

    tm_faultvfs_arm(0); /* space is back */
    long long t0 = now_ms();
    while (tm_store_writable(st) != 0 && now_ms() - t0 < 5000)
        nap_ms(10);
    print_message("writable again %lld ms after space came back\n", now_ms() - t0);
    assert_int_equal(tm_store_writable(st), 0);
    cbrec ok = {0};
    assert_int_equal(tm_store_append(st, "s", r, "after", 5, 0, on_cb, &ok), 0);
    assert_int_equal(tm_store_sync_since(st, tm_store_mark(st)), 0);
    assert_int_equal(ok.failed, 0);
    assert_int_equal(ok.last_ok, 6); /* no hole: right after the durable head */
    /* The record queued without waiting was lost, and a sync that covers it says so. */
    assert_int_equal(tm_store_sync_since(st, mark), TIDEMARK_EIO);
    tm_request_rec got;
    assert_int_equal(tm_store_request_get(st, "s", "i:1", &got), TIDEMARK_ENOTFOUND);
    assert_int_equal(count_events(st, "s", r), 6);
    mk_stream(st, "s", r2); /* new streams again */
    tm_store_close(st);
    /* Nothing committed was lost across the episode. */
    st = open_ok(path);
    assert_int_equal(count_events(st, "s", r), 6);
    tm_store_close(st);
}

/* ---- F: one attribute change writes one row ------------------------------------------------ */

static void test_attr_writes_linear(void **state)
{
    (void)state;
    char path[128];
    db_path(path, sizeof path, "attrs.db");
    tm_store *st = open_ok(path);
    mk_session(st, "s");
    mk_session(st, "other");
    char *name = malloc(2100);
    unsigned long long w0 = tm_faultvfs_wal_bytes();
    for (int i = 0; i < 800; i++) {
        snprintf(name, 2100, "sub:test://%04d/", i);
        memset(name + strlen(name), 'u', 2040 - strlen(name));
        name[2040] = '\0';
        assert_int_equal(tm_store_session_set_attr(st, "s", name, "true"), 0);
    }
    unsigned long long bytes = tm_faultvfs_wal_bytes() - w0;
    print_message("800 subscriptions of 2 KB: %llu bytes written to the WAL\n", bytes);
    assert_true(bytes < 50ULL << 20);
    assert_int_equal(tm_store_session_set_attr(st, "s", "log_level", "\"info\""), 0);
    assert_int_equal(tm_store_session_set_attr(st, "s", name, NULL), 0);
    tm_session_rec rec;
    assert_int_equal(tm_store_session_get(st, "s", &rec), 0);
    json_t *a = json_loads(rec.attrs, 0, NULL);
    tm_session_rec_clear(&rec);
    assert_int_equal(json_object_size(a), 800); /* 799 subscriptions and the level */
    assert_string_equal(json_string_value(json_object_get(a, "log_level")), "info");
    json_decref(a);
    free(name);
    assert_int_equal(tm_store_session_delete(st, "s"), 0);
    tm_store_close(st);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    json_t *rows = NULL;
    assert_int_equal(tm_sqlite_query_json(db, "SELECT count(*) AS n FROM tm_session_attrs", NULL, 0,
                                          &rows), 0);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(rows, 0), "n")), 0);
    json_decref(rows);
    sqlite3_close(db);
}

/* A database whose attributes are one JSON column gets them as rows. */
static void test_attrs_migrated(void **state)
{
    (void)state;
    char path[128];
    db_path(path, sizeof path, "oldattrs.db");
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE tm_sessions(id TEXT PRIMARY KEY, version TEXT, client TEXT,"
                                  " created_ms INTEGER, last_seen_ms INTEGER, next_r INTEGER NOT NULL"
                                  " DEFAULT 1, attrs TEXT) WITHOUT ROWID;"
                                  "INSERT INTO tm_sessions VALUES('old', '2025-06-18', '{}', 1, 1, 1,"
                                  " '{\"get\":true,\"log_level\":\"debug\",\"sub:x\":true}');",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    tm_store *st = open_ok(path);
    assert_int_equal(tm_store_session_set_attr(st, "old", "sub:x", NULL), 0);
    tm_session_rec rec;
    assert_int_equal(tm_store_session_get(st, "old", &rec), 0);
    assert_string_equal(rec.attrs, "{\"get\":true,\"log_level\":\"debug\"}");
    tm_session_rec_clear(&rec);
    tm_store_close(st);
}

/* The memory store: set_attr must not re-serialise every attribute. */
static void test_memory_attrs_linear(void **state)
{
    (void)state;
    tm_store *st = NULL;
    tm_store_options o = {0};
    assert_int_equal(tm_store_memory_open(&o, &st), 0);
    mk_session(st, "s");
    char *name = malloc(2100);
    long long t0 = now_ms();
    for (int i = 0; i < 2000; i++) {
        snprintf(name, 2100, "sub:test://%04d/", i);
        memset(name + strlen(name), 'u', 2040 - strlen(name));
        name[2040] = '\0';
        assert_int_equal(tm_store_session_set_attr(st, "s", name, "true"), 0);
    }
    long long ms = now_ms() - t0;
    print_message("memory store: 2000 subscriptions of 2 KB in %lld ms\n", ms);
    assert_true(ms < 2000);
    tm_session_rec rec;
    assert_int_equal(tm_store_session_get(st, "s", &rec), 0);
    json_t *a = json_loads(rec.attrs, 0, NULL);
    assert_int_equal(json_object_size(a), 2000);
    json_decref(a);
    tm_session_rec_clear(&rec);
    free(name);
    tm_store_close(st);
}

/* ---- G: what a finished call keeps ----------------------------------------------------------- */

static void one_call(tm_store *st, int i)
{
    char r[TM_STREAM_MAX], key[32], resp[64];
    mk_stream(st, "s", r);
    snprintf(key, sizeof key, "i:%d", i);
    tm_request_rec rq = {.session = "s", .key = key, .tool = "echo", .stream = r,
                         .message = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\"}"};
    assert_int_equal(tm_store_request_begin(st, &rq, 0), 0);
    assert_int_equal(tm_store_append(st, "s", r, "", 0, 0, NULL, NULL), 0);
    int n = snprintf(resp, sizeof resp, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{}}", i);
    tm_append_req q = {.session = "s", .stream = r, .data = resp, .len = (size_t)n,
                       .flags = TM_APPEND_FINAL, .request_key = key};
    assert_int_equal(tm_store_append_ex(st, &q), 0);
}

static void test_cache_flat_over_calls(void **state)
{
    (void)state;
    char path[128];
    db_path(path, sizeof path, "calls.db");
    tm_store *st = open_ok(path);
    mk_session(st, "s");
    size_t at1k = 0;
    for (int i = 1; i <= 10000; i++) {
        one_call(st, i);
        if (i % 100 == 0)
            assert_int_equal(tm_store_sync(st), 0);
        if (i == 1000)
            at1k = tm_store_sqlite_cached_streams(st);
    }
    assert_int_equal(tm_store_sync(st), 0);
    size_t at10k = tm_store_sqlite_cached_streams(st);
    print_message("cached streams after 1k calls: %zu, after 10k: %zu\n", at1k, at10k);
    assert_true(at10k <= 300);
    assert_true(at10k <= at1k + 8);
    /* An evicted stream is still there: loaded again on demand. */
    tm_stream_bounds b;
    assert_int_equal(tm_store_bounds(st, "s", "r1", &b), 0);
    assert_int_equal(b.head, 2);
    assert_int_equal(b.closed, 1);
    assert_int_equal(count_events(st, "s", "r1"), 2);
    tm_request_rec got;
    assert_int_equal(tm_store_request_get(st, "s", "i:1", &got), 0);
    assert_int_equal(got.state, TM_REQ_COMPLETED);
    tm_request_rec_clear(&got);
    tm_store_close(st);
}

/* A session deleted while its stream's final append was still queued: the
 * append's batch used to put the stream back into the cache's LRU after the
 * delete had taken it out, and the delete then freed it there (found by
 * ASan in the 2026-07-28 era, which deletes a call's session right after its
 * answer). Every round leaves a freed stream in the LRU on the code before;
 * the closed streams after it walk the list and evict from it. */
static void test_delete_racing_final_append(void **state)
{
    (void)state;
    char path[128];
    db_path(path, sizeof path, "delete-race.db");
    tm_store *st = open_ok(path);
    for (int i = 0; i < 400; i++) {
        char id[32], r[TM_STREAM_MAX];
        snprintf(id, sizeof id, "d%d", i);
        mk_session(st, id);
        mk_stream(st, id, r);
        assert_int_equal(tm_store_append(st, id, r, "x", 1, TM_APPEND_FINAL, NULL, NULL), 0);
        assert_int_equal(tm_store_session_delete(st, id), 0);
    }
    mk_session(st, "s");
    for (int i = 1; i <= 600; i++)
        one_call(st, i);
    assert_int_equal(tm_store_sync(st), 0);
    assert_true(tm_store_sqlite_cached_streams(st) <= 300);
    tm_session_rec rec;
    assert_int_equal(tm_store_session_get(st, "d7", &rec), TIDEMARK_ENOTFOUND);
    tm_store_close(st);
}

/* A stream's row is written once, at the end of the batch that made it: a
 * session deleted in that same batch must still find it (and its events),
 * or both outlive their session. The stream, its event and the delete are
 * queued under one hold, so they commit in one transaction. */
#define COMMITS_SQL "SELECT CAST(v AS INTEGER) AS n FROM tm_meta WHERE k = 'commits'"

static long long count_rows(tm_store *st, const char *sql)
{
    json_t *rows = NULL;
    assert_int_equal(tm_store_query(st, sql, NULL, 0, &rows), 0);
    long long n = json_integer_value(json_object_get(json_array_get(rows, 0), "n"));
    json_decref(rows);
    return n;
}

static void test_delete_in_the_making_batch(void **state)
{
    (void)state;
    char path[128];
    db_path(path, sizeof path, "made-deleted.db");
    tm_store *st = open_ok(path);
    mk_session(st, "keep");
    char r[TM_STREAM_MAX];
    mk_stream(st, "keep", r);
    for (int i = 0; i < 20; i++) {
        char id[32];
        snprintf(id, sizeof id, "gone%d", i);
        mk_session(st, id);
        long long before = count_rows(st, COMMITS_SQL);
        tm_store_hold(st);
        char s[TM_STREAM_MAX];
        assert_int_equal(tm_store_stream_open(st, id, NULL, s), 0);
        assert_int_equal(tm_store_append(st, id, s, "x", 1, TM_APPEND_FINAL, NULL, NULL), 0);
        assert_int_equal(tm_store_session_delete_queued(st, id), 0);
        tm_store_release(st);
        assert_int_equal(tm_store_sync(st), 0);
        assert_int_equal(count_rows(st, COMMITS_SQL), before + 1); /* one batch */
    }
    assert_int_equal(count_rows(st, "SELECT count(*) AS n FROM tm_streams WHERE session != 'keep'"), 0);
    assert_int_equal(count_rows(st, "SELECT count(*) AS n FROM tm_events WHERE sid NOT IN "
                                    "(SELECT sid FROM tm_streams)"), 0);
    assert_int_equal(count_rows(st, "SELECT count(*) AS n FROM tm_streams WHERE session = 'keep'"), 1);
    tm_store_close(st);
}

static int remove_dir(void)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd);
}

int main(void)
{
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    tm_faultvfs_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wal_bounded),
        cmocka_unit_test(test_delete_in_the_making_batch),
        cmocka_unit_test(test_damaged_wal_refused),
        cmocka_unit_test(test_older_copy_refused),
        cmocka_unit_test(test_damaged_db_refused),
        cmocka_unit_test(test_damage_at_run_time),
        cmocka_unit_test(test_one_writer),
        cmocka_unit_test(test_disk_full_recovers),
        cmocka_unit_test(test_attr_writes_linear),
        cmocka_unit_test(test_attrs_migrated),
        cmocka_unit_test(test_memory_attrs_linear),
        cmocka_unit_test(test_cache_flat_over_calls),
        cmocka_unit_test(test_delete_racing_final_append),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    remove_dir();
    return failed;
}
