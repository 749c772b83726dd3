/* test_walbuf.c - the VFS that writes a commit's WAL frames in few writes
 * (src/log/walbuf.c), on a real database: under it a counting VFS (the
 * default while the test runs) that counts and can fail writes to WAL files.
 *   a commit of ~180 KiB of frames reaches the file in a few writes;
 *   another connection reads every commit at once (frames are in the file
 *   before SQLite publishes them);
 *   a writer killed right after its commits loses none;
 *   a write that fails at the sync fails the commit, and nothing else;
 *   a write that fails when a read needs it keeps what was gathered;
 *   a file that pads commits to a sector is not gathered. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "log/walbuf.h"
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[] = "/tmp/tm-walbuf-XXXXXX";

/* ---- the counting VFS under it ---------------------------------------------------------- */

typedef struct cv_file {
    sqlite3_file base;
    int is_wal;
    sqlite3_file *real;
} cv_file;

static sqlite3_vfs cv_vfs;
static sqlite3_vfs *cv_base;
static atomic_int cv_wal_writes;
static atomic_int cv_fail;
static sqlite3_io_methods cv_methods;

static int cv_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
    cv_file *c = (cv_file *)f;
    if (c->is_wal) {
        if (atomic_load(&cv_fail))
            return SQLITE_FULL;
        atomic_fetch_add(&cv_wal_writes, 1);
    }
    return c->real->pMethods->xWrite(c->real, p, n, off);
}

#define CV_FWD(name, sig, args)                                                               \
    static int cv_##name sig { return ((cv_file *)f)->real->pMethods->name args; }
CV_FWD(xClose, (sqlite3_file * f), (((cv_file *)f)->real))
CV_FWD(xRead, (sqlite3_file * f, void *p, int n, sqlite3_int64 o), (((cv_file *)f)->real, p, n, o))
CV_FWD(xTruncate, (sqlite3_file * f, sqlite3_int64 s), (((cv_file *)f)->real, s))
CV_FWD(xSync, (sqlite3_file * f, int fl), (((cv_file *)f)->real, fl))
CV_FWD(xFileSize, (sqlite3_file * f, sqlite3_int64 *s), (((cv_file *)f)->real, s))
CV_FWD(xLock, (sqlite3_file * f, int l), (((cv_file *)f)->real, l))
CV_FWD(xUnlock, (sqlite3_file * f, int l), (((cv_file *)f)->real, l))
CV_FWD(xCheckReservedLock, (sqlite3_file * f, int *o), (((cv_file *)f)->real, o))
CV_FWD(xFileControl, (sqlite3_file * f, int op, void *a), (((cv_file *)f)->real, op, a))
CV_FWD(xSectorSize, (sqlite3_file * f), (((cv_file *)f)->real))
CV_FWD(xDeviceCharacteristics, (sqlite3_file * f), (((cv_file *)f)->real))
CV_FWD(xShmMap, (sqlite3_file * f, int pg, int sz, int e, void volatile **pp),
       (((cv_file *)f)->real, pg, sz, e, pp))
CV_FWD(xShmLock, (sqlite3_file * f, int o, int n, int fl), (((cv_file *)f)->real, o, n, fl))
CV_FWD(xShmUnmap, (sqlite3_file * f, int d), (((cv_file *)f)->real, d))
CV_FWD(xFetch, (sqlite3_file * f, sqlite3_int64 o, int n, void **pp), (((cv_file *)f)->real, o, n, pp))
CV_FWD(xUnfetch, (sqlite3_file * f, sqlite3_int64 o, void *p), (((cv_file *)f)->real, o, p))
static void cv_xShmBarrier(sqlite3_file *f) { ((cv_file *)f)->real->pMethods->xShmBarrier(((cv_file *)f)->real); }

static int cv_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
    (void)vfs;
    cv_file *c = (cv_file *)f;
    c->real = (sqlite3_file *)(c + 1);
    c->is_wal = (flags & SQLITE_OPEN_WAL) != 0;
    int rc = cv_base->xOpen(cv_base, name, c->real, flags, out);
    c->base.pMethods = rc == SQLITE_OK && c->real->pMethods ? &cv_methods : NULL;
    return rc;
}

static void cv_install(void)
{
    cv_methods = (sqlite3_io_methods){
        3, cv_xClose, cv_xRead, cv_write, cv_xTruncate, cv_xSync, cv_xFileSize, cv_xLock,
        cv_xUnlock, cv_xCheckReservedLock, cv_xFileControl, cv_xSectorSize,
        cv_xDeviceCharacteristics, cv_xShmMap, cv_xShmLock, cv_xShmBarrier, cv_xShmUnmap,
        cv_xFetch, cv_xUnfetch};
    cv_base = sqlite3_vfs_find(NULL);
    cv_vfs = *cv_base;
    cv_vfs.zName = "test-count";
    cv_vfs.szOsFile = (int)sizeof(cv_file) + cv_base->szOsFile;
    cv_vfs.xOpen = cv_open;
    cv_vfs.pNext = NULL;
    sqlite3_vfs_register(&cv_vfs, 1);
}

/* ---- helpers ---------------------------------------------------------------------------- */

/* A connection to name in g_dir: through walbuf (writer) or the counting VFS. */
static sqlite3 *open_db(const char *name, int walbuf, const char *uri_extra)
{
    char path[256];
    snprintf(path, sizeof path, "file:%s/%s%s", g_dir, name, uri_extra ? uri_extra : "");
    sqlite3 *db = NULL;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI;
    assert_int_equal(sqlite3_open_v2(path, &db, flags, walbuf ? tm_walbuf_vfs() : NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                                      " PRAGMA wal_autocheckpoint=0;"
                                      " CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    return db;
}

static int insert(sqlite3 *db, int id, int len)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?, ?)", -1, &st, NULL), SQLITE_OK);
    unsigned char *v = malloc((size_t)len);
    for (int i = 0; i < len; i++)
        v[i] = (unsigned char)(id * 31 + i);
    sqlite3_bind_int(st, 1, id);
    sqlite3_bind_blob(st, 2, v, len, free);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* 1 if row id is there with the bytes insert() wrote. */
static int row_ok(sqlite3 *db, int id, int len)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT v FROM t WHERE id = ?", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_int(st, 1, id);
    int ok = 0;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_bytes(st, 0) == len) {
        const unsigned char *v = sqlite3_column_blob(st, 0);
        ok = 1;
        for (int i = 0; i < len && ok; i++)
            ok = v[i] == (unsigned char)(id * 31 + i);
    }
    sqlite3_finalize(st);
    return ok;
}

static int count_rows(sqlite3 *db)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return n;
}

static void integrity_ok(sqlite3 *db)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
}

/* WAL writes of one transaction inserting rows [from, from + n) of len bytes. */
static int commit_rows(sqlite3 *db, int from, int n, int len)
{
    assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    int w0 = atomic_load(&cv_wal_writes);
    for (int i = 0; i < n; i++)
        assert_int_equal(insert(db, from + i, len), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    return atomic_load(&cv_wal_writes) - w0;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_commit_in_few_writes(void **state)
{
    (void)state;
    sqlite3 *w = open_db("few.db", 1, NULL), *r = open_db("few.db", 0, NULL);
    commit_rows(w, 0, 1, 10); /* the WAL's header */
    int writes = commit_rows(w, 1, 40, 3000); /* ~45 frames, ~180 KiB */
    print_message("a commit of 40 rows of 3000 bytes: %d writes to the WAL\n", writes);
    assert_true(writes >= 3 && writes <= 6); /* 64 KiB at a time; without it ~90 */
    for (int i = 1; i <= 40; i++)
        assert_true(row_ok(r, i, 3000));
    int big = commit_rows(w, 100, 1, 1 << 20); /* 1 MiB: 257 frames, 16 full buffers */
    print_message("a commit of one 1 MiB row: %d writes\n", big);
    assert_true(big >= 16 && big <= 20);
    assert_true(row_ok(r, 100, 1 << 20));
    integrity_ok(r);
    sqlite3_close(w);
    sqlite3_close(r);
}

static void test_reader_sees_each_commit(void **state)
{
    (void)state;
    sqlite3 *w = open_db("each.db", 1, NULL), *r = open_db("each.db", 0, NULL);
    for (int i = 0; i < 300; i++) {
        assert_int_equal(insert(w, i, 100 + i * 13), SQLITE_OK);
        assert_true(row_ok(r, i, 100 + i * 13));
    }
    assert_int_equal(count_rows(r), 300);
    sqlite3_close(w);
    sqlite3_close(r);
}

static void test_killed_writer_keeps_commits(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sqlite3 *w = open_db("killed.db", 1, NULL);
        for (int i = 0; i < 50; i++)
            if (insert(w, i, 700) != SQLITE_OK)
                _exit(1);
        _exit(0); /* no close: what is gathered and not written is lost */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sqlite3 *r = open_db("killed.db", 0, NULL);
    assert_int_equal(count_rows(r), 50);
    for (int i = 0; i < 50; i++)
        assert_true(row_ok(r, i, 700));
    integrity_ok(r);
    sqlite3_close(r);
}

static void test_failed_write_fails_the_commit(void **state)
{
    (void)state;
    sqlite3 *w = open_db("full.db", 1, NULL), *r = open_db("full.db", 0, NULL);
    assert_int_equal(insert(w, 1, 500), SQLITE_OK);
    atomic_store(&cv_fail, 1);
    int rc = insert(w, 2, 500); /* gathered; the write fails at the sync */
    atomic_store(&cv_fail, 0);
    print_message("a commit whose write failed: %s\n", sqlite3_errstr(rc));
    assert_int_not_equal(rc, SQLITE_OK);
    assert_false(row_ok(r, 2, 500));
    /* Writable again once the disk is (SQLite may first need the connection reopened). */
    if (insert(w, 3, 500) != SQLITE_OK) {
        sqlite3_close(w);
        w = open_db("full.db", 1, NULL);
        assert_int_equal(insert(w, 3, 500), SQLITE_OK);
    }
    assert_true(row_ok(r, 1, 500));
    assert_false(row_ok(r, 2, 500));
    assert_true(row_ok(r, 3, 500));
    integrity_ok(r);
    sqlite3_close(w);
    sqlite3_close(r);
}

/* A read of gathered bytes needs them written first; that write fails (a
 * full disk), the read fails, and SQLite may roll back only the statement
 * and go on to commit. So the gathered bytes must stay gathered, and go out
 * at the next flush: dropped, the commit would publish frames never
 * written. Through the VFS's methods directly, on a file opened as a WAL. */
static void test_failed_flush_keeps_bytes(void **state)
{
    (void)state;
    sqlite3_vfs *vfs = sqlite3_vfs_find(tm_walbuf_vfs());
    assert_non_null(vfs);
    char db[200], jr[256], wal[256];
    snprintf(db, sizeof db, "%s/direct.db", g_dir);
    snprintf(jr, sizeof jr, "%s-journal", db);
    snprintf(wal, sizeof wal, "%s-wal", db);
    FILE *dbf = fopen(db, "w"); /* the unix VFS looks at the database beside a WAL */
    assert_non_null(dbf);
    fclose(dbf);
    /* A filename as SQLite makes them (the VFS reads its URI parameters). */
    sqlite3_filename names = sqlite3_create_filename(db, jr, wal, 0, NULL);
    sqlite3_file *f = calloc(1, (size_t)vfs->szOsFile);
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_WAL;
    assert_int_equal(vfs->xOpen(vfs, sqlite3_filename_wal(names), f, flags, &flags), SQLITE_OK);
    unsigned char frame[4120], back[4120];
    for (size_t i = 0; i < sizeof frame; i++)
        frame[i] = (unsigned char)(i * 7 + 1);
    assert_int_equal(f->pMethods->xWrite(f, frame, 24, 0), SQLITE_OK); /* gathered */
    assert_int_equal(f->pMethods->xWrite(f, frame + 24, 4096, 24), SQLITE_OK);
    atomic_store(&cv_fail, 1);
    assert_int_not_equal(f->pMethods->xRead(f, back, 4096, 24), SQLITE_OK);
    atomic_store(&cv_fail, 0);
    assert_int_equal(f->pMethods->xSync(f, SQLITE_SYNC_NORMAL), SQLITE_OK);
    sqlite3_int64 size = 0;
    assert_int_equal(f->pMethods->xFileSize(f, &size), SQLITE_OK);
    assert_int_equal(size, (sqlite3_int64)sizeof frame);
    assert_int_equal(f->pMethods->xRead(f, back, (int)sizeof back, 0), SQLITE_OK);
    assert_memory_equal(back, frame, sizeof frame);
    assert_int_equal(f->pMethods->xClose(f), SQLITE_OK);
    free(f);
    sqlite3_free_filename(names);
}

static void test_padded_wal_not_gathered(void **state)
{
    (void)state;
    /* psow=0: the file does not say writes are powersafe, so SQLite pads
     * commits to a sector and writes the padding's tail after the sync. */
    sqlite3 *w = open_db("psow.db", 1, "?psow=0"), *r = open_db("psow.db", 0, "?psow=0");
    commit_rows(w, 0, 1, 10);
    int writes = commit_rows(w, 1, 10, 3000);
    print_message("psow=0, a commit of 10 rows of 3000 bytes: %d writes\n", writes);
    assert_true(writes >= 20); /* each frame's header and page, as SQLite wrote them */
    for (int i = 1; i <= 10; i++)
        assert_true(row_ok(r, i, 3000));
    sqlite3_close(w);
    sqlite3_close(r);
}

int main(void)
{
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    cv_install(); /* before tm_walbuf_vfs(), which stacks on the default */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_in_few_writes),
        cmocka_unit_test(test_reader_sees_each_commit),
        cmocka_unit_test(test_killed_writer_keeps_commits),
        cmocka_unit_test(test_failed_write_fails_the_commit),
        cmocka_unit_test(test_failed_flush_keeps_bytes),
        cmocka_unit_test(test_padded_wal_not_gathered),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", g_dir);
    return failed;
}
