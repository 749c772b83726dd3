/* test_store_sqlite.c - the memory backend's contract tests, all of them, run
 * on the SQLite store: each test opens a fresh database in a scratch folder
 * (removed at the end). Appends, closes and touches wait for durability
 * (store_contract.h), as the contract's synchronous checks expect of the
 * in-memory store; touches are not throttled here (touch_every_ms 1). The
 * SQLite store's durability is tested end to end (durable_sqlite,
 * crash_sqlite) and its holes in test_store_holes.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/sqlite_util.h"
#include "log/store.h"
#include "common/txn.h"
#include "tidemark/tidemark.h"
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[] = "/tmp/tm-store-sqlite-XXXXXX";
static int g_next_db = 1;

static int contract_open(const char *uri, const tm_store_options *opt, tm_store **out)
{
    (void)uri;
    char path[128];
    snprintf(path, sizeof path, "%s/t%d.db", g_dir, g_next_db++);
    tm_store_options o = *opt;
    o.durability = TM_DURABILITY_PROCESS;
    o.touch_every_ms = 1;
    return tm_store_sqlite_open(path, &o, out);
}

#define TM_CONTRACT_LISTS_OWN_STARTED 1 /* asked at start-up: whatever is started */
#include "store_contract.h"

/* ---- what only a file-backed store has ---------------------------------------------- */

static tm_store *open_path(const char *path)
{
    tm_store_options o = {.durability = TM_DURABILITY_PROCESS};
    tm_store *st = NULL;
    assert_int_equal(tm_store_sqlite_open(path, &o, &st), 0);
    return st;
}

/* Session attributes and application rows are in the file: a restart keeps them. */
static void test_attrs_and_rows_survive_reopen(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/reopen.db", g_dir);
    tm_store *st = open_path(path);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    assert_int_equal(tm_store_session_set_attr(st, "a", "log_level", "\"error\""), 0);
    tm_append_req q = {.session = "a", .stream = "r1", .data = "ok", .len = 2, .effect = fx_row,
                       .effect_ud = "kept"};
    assert_int_equal(tm_store_append_ex(st, &q), 0);
    assert_int_equal(tm_store_sync(st), 0);
    tm_store_close(st);

    st = open_path(path);
    tm_session_rec rec;
    assert_int_equal(tm_store_session_get(st, "a", &rec), 0);
    assert_string_equal(rec.attrs, "{\"log_level\":\"error\"}");
    tm_session_rec_clear(&rec);
    json_t *rows = NULL;
    assert_int_equal(tm_store_rows(st, "t.rows", &rows), 0);
    assert_int_equal(json_array_size(rows), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 0), "k")), "kept");
    json_decref(rows);
    tm_store_close(st);
}

/* Stream numbers are reserved in blocks (tm_sessions.next_r is written once
 * per block, not with every stream): after a restart a session's new
 * streams still never take a name it has used. */
static long long next_r_of(tm_store *st, const char *session)
{
    const char *args[1] = {session};
    json_t *rows = NULL;
    assert_int_equal(tm_store_query(st, "SELECT next_r FROM tm_sessions WHERE id = ?1", args, 1,
                                    &rows), 0);
    long long n = json_integer_value(json_object_get(json_array_get(rows, 0), "next_r"));
    json_decref(rows);
    return n;
}

static void test_stream_names_unique_across_reopen(void **state)
{
    (void)state;
    char path[128], name[TM_STREAM_MAX];
    snprintf(path, sizeof path, "%s/names.db", g_dir);
    tm_store *st = open_path(path);
    mk_session(st, "a");
    json_t *seen = json_object();
    for (int round = 0; round < 3; round++) {
        long long before = round ? next_r_of(st, "a") : 1;
        for (int i = 0; i < 100; i++) {
            assert_int_equal(tm_store_stream_open(st, "a", NULL, name), 0);
            assert_null(json_object_get(seen, name)); /* never a name used before */
            json_object_set_new(seen, name, json_true());
        }
        assert_int_equal(tm_store_sync(st), 0);
        long long after = next_r_of(st, "a");
        /* every name used is below it, and it moved a block at a time:
         * ahead of the names used (written per stream, it would be at
         * before + 100) */
        assert_true(after > before + 100);
        assert_true(after <= before + 100 + 64);
        tm_store_close(st);
        st = open_path(path);
    }
    assert_int_equal(json_object_size(seen), 300);
    json_decref(seen);
    tm_store_close(st);
}

/* A database file named name in the scratch folder, made by sql (an
 * older layout). OUT path. */
static void old_db(char *path, size_t n, const char *name, const char *sql)
{
    snprintf(path, n, "%s/%s", g_dir, name);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

/* A database made before sessions had attributes gets the column at open. */
static void test_old_database_gains_attrs(void **state)
{
    (void)state;
    char path[128];
    old_db(path, sizeof path, "old.db",
           "CREATE TABLE tm_sessions(id TEXT PRIMARY KEY, version TEXT, client TEXT,"
           " created_ms INTEGER, last_seen_ms INTEGER, next_r INTEGER NOT NULL"
           " DEFAULT 1) WITHOUT ROWID;"
           "INSERT INTO tm_sessions VALUES('old', '2025-06-18', '{}', 1, 1, 1);");
    tm_store *st = open_path(path);
    tm_session_rec rec;
    assert_int_equal(tm_store_session_get(st, "old", &rec), 0);
    assert_null(rec.attrs);
    tm_session_rec_clear(&rec);
    assert_int_equal(tm_store_session_set_attr(st, "old", "get", "true"), 0);
    assert_int_equal(tm_store_session_get(st, "old", &rec), 0);
    assert_string_equal(rec.attrs, "{\"get\":true}");
    tm_session_rec_clear(&rec);
    tm_store_close(st);
}

static int count_unfinished(void *ud, const tm_request_rec *rec)
{
    assert_string_equal(rec->key, "i:2");
    assert_int_equal(rec->state, TM_REQ_STARTED);
    (*(int *)ud)++;
    return 0;
}

/* A database whose records are keyed by (session, key) (WITHOUT ROWID, the
 * layout before) has them moved at open into the table kept in the order
 * records are made: a finished record still answers, an unfinished one is
 * still found to finish, one more key is still refused once, and the file
 * has the new layout (rid) and the unfinished-record index. */
static void test_old_database_moves_requests(void **state)
{
    (void)state;
    char path[128];
    old_db(path, sizeof path, "oldreq.db",
           "CREATE TABLE tm_requests(session TEXT NOT NULL, key TEXT NOT NULL,"
           " state INTEGER NOT NULL, tool TEXT, stream TEXT, message TEXT,"
           " response BLOB, updated_ms INTEGER, PRIMARY KEY(session, key))"
           " WITHOUT ROWID;"
           "CREATE INDEX tm_requests_state ON tm_requests(state) WHERE state = 1;"
           "INSERT INTO tm_requests VALUES('s1', 'i:1', 2, 'add', 'r1', '{}',"
           " CAST('answer-1' AS BLOB), 5);"
           "INSERT INTO tm_requests VALUES('s1', 'i:2', 1, 'add', 'r2', '{\"m\":2}',"
           " NULL, 6);");
    tm_store *st = open_path(path);
    tm_request_rec r;
    assert_int_equal(tm_store_request_get(st, "s1", "i:1", &r), 0);
    assert_int_equal(r.state, TM_REQ_COMPLETED);
    assert_int_equal(r.response_len, 8);
    assert_memory_equal(r.response, "answer-1", 8);
    tm_request_rec_clear(&r);
    assert_int_equal(tm_store_request_get(st, "s1", "i:2", &r), 0);
    assert_string_equal(r.message, "{\"m\":2}");
    tm_request_rec_clear(&r);
    int unfinished = 0;
    assert_int_equal(tm_store_requests_unfinished(st, count_unfinished, &unfinished), 0);
    assert_int_equal(unfinished, 1);
    tm_request_rec again = {.session = "s1", .key = "i:1", .tool = "add", .stream = "r9",
                            .message = "{}", .state = TM_REQ_STARTED};
    assert_int_equal(tm_store_request_begin(st, &again, 1), TIDEMARK_EEXIST);
    tm_request_rec fresh = {.session = "s1", .key = "i:3", .tool = "add", .stream = "r3",
                            .message = "{}", .state = TM_REQ_STARTED};
    assert_int_equal(tm_store_request_begin(st, &fresh, 1), 0);
    tm_store_close(st);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    json_t *rows = NULL;
    assert_int_equal(tm_sqlite_query_json(db, "SELECT rid, key FROM tm_requests ORDER BY rid", NULL, 0,
                                          &rows), 0);
    assert_int_equal(json_array_size(rows), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 2), "key")), "i:3");
    json_decref(rows);
    assert_int_equal(tm_sqlite_query_json(db, "SELECT name FROM sqlite_schema WHERE name ="
                                          " 'tm_requests_state'", NULL, 0, &rows), 0);
    assert_int_equal(json_array_size(rows), 1);
    json_decref(rows);
    sqlite3_close(db);
}

/* The SQLite transaction (txn.h) on its own, as the client's state uses it:
 * a database without tm_rows gets it with its first row, in the caller's
 * transaction; SQL runs there; the public functions check their arguments. */
static void test_txn_sqlite(void **state)
{
    (void)state;
    sqlite3 *db;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE app(k TEXT)", NULL, NULL, NULL), SQLITE_OK);
    struct tidemark_txn txn;
    tm_txn_sqlite_init(&txn, db);
    assert_int_equal(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
    json_t *row = json_pack("{s:s}", "entry", "a");
    assert_int_equal(tidemark_txn_insert(&txn, "ledger", row), 0);
    assert_int_equal(tidemark_txn_insert(&txn, "ledger", row), 0);
    const char *args[1] = {"x"};
    assert_int_equal(tidemark_txn_exec(&txn, "INSERT INTO app(k) VALUES(?1)", args, 1), 0);
    assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    json_t *rows = NULL; /* rolled back: the rows and the table they made */
    assert_int_not_equal(tm_sqlite_rows(db, "ledger", &rows), 0);
    assert_int_equal(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(tidemark_txn_insert(&txn, "ledger", row), 0);
    assert_int_equal(tidemark_txn_exec(&txn, "INSERT INTO app(k) VALUES(?1)", args, 1), 0);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(tm_sqlite_rows(db, "ledger", &rows), 0);
    assert_int_equal(json_array_size(rows), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(rows, 0), "id")), 1);
    json_decref(rows);
    /* checked once for every backend */
    json_t *with_id = json_pack("{s:i}", "id", 3);
    assert_int_equal(tidemark_txn_insert(&txn, "ledger", with_id), TIDEMARK_EINVAL);
    assert_int_equal(tidemark_txn_insert(&txn, "no spaces", row), TIDEMARK_EINVAL);
    assert_int_equal(tidemark_txn_insert(NULL, "ledger", row), TIDEMARK_EINVAL);
    assert_int_equal(tidemark_txn_exec(&txn, NULL, NULL, 0), TIDEMARK_EINVAL);
    assert_int_equal(tidemark_txn_exec(&txn, "SELECT 1", NULL, 1), TIDEMARK_EINVAL);
    assert_int_equal(tidemark_txn_exec(&txn, "NOT SQL", NULL, 0), TIDEMARK_EINVAL);
    /* a backend without SQL (nor rows) */
    static const struct tm_txn_ops nothing = {.name = "test"};
    struct tidemark_txn none = {.ops = &nothing};
    assert_int_equal(tidemark_txn_exec(&none, "SELECT 1", NULL, 0), TIDEMARK_ENOTSUP);
    assert_int_equal(tidemark_txn_insert(&none, "ledger", row), TIDEMARK_ENOTSUP);
    json_decref(with_id);
    json_decref(row);
    /* the insert is kept with the connection: closed with it, nothing left */
    assert_int_equal(tm_sqlite_close(db), SQLITE_OK);
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
        cmocka_unit_test(test_concurrent_appends),
        cmocka_unit_test(test_effect_rows),
        cmocka_unit_test(test_session_attrs),
        cmocka_unit_test(test_sessions_with_attr),
        cmocka_unit_test(test_request_begin_get),
        cmocka_unit_test(test_request_complete),
        cmocka_unit_test(test_session_request_get),
        cmocka_unit_test(test_requests_unfinished),
        cmocka_unit_test(test_request_keys_any_bytes),
        cmocka_unit_test(test_attrs_and_rows_survive_reopen),
        cmocka_unit_test(test_stream_names_unique_across_reopen),
        cmocka_unit_test(test_old_database_gains_attrs),
        cmocka_unit_test(test_old_database_moves_requests),
        cmocka_unit_test(test_txn_sqlite),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    remove_dir();
    return failed;
}
