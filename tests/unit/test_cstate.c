/* test_cstate.c - the client's durable state (src/client/cstate.c): the
 * session, request ids, cursors, the dispatch log, outstanding requests,
 * and what each function says when the file is damaged (an error, never
 * an answer that looks like "nothing there"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "client/cstate.h"
#include "tidemark/tidemark.h"

static tm_cstate *open_mem(void)
{
    tm_cstate *st = NULL;
    assert_int_equal(tm_cstate_open(NULL, NULL, &st), 0);
    assert_non_null(st);
    return st;
}

/* A state file in a fresh temporary directory; path gets its name. */
static void temp_path(char *path, size_t n)
{
    char dir[] = "/tmp/tm-cstate-XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(path, n, "%s/state.db", dir);
}

static void remove_path(const char *path)
{
    char p[512];
    const char *suffix[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s%s", path, suffix[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s", path);
    char *slash = strrchr(p, '/');
    *slash = '\0';
    rmdir(p);
}

/* Raw SQL on the state's connection (damage, or a look behind its back). */
static void raw(tm_cstate *st, const char *sql)
{
    assert_int_equal(sqlite3_exec(tm_cstate_db(st), sql, NULL, NULL, NULL), SQLITE_OK);
}

static void test_session(void **s)
{
    (void)s;
    tm_cstate *st = open_mem();
    char *url = (char *)1, *id = (char *)1, *version = (char *)1, *server = (char *)1;
    assert_int_equal(tm_cstate_session_get(st, &url, &id, &version, &server), TIDEMARK_ENOTFOUND);
    assert_null(url);
    assert_null(id);
    assert_null(version);
    assert_null(server);
    assert_int_equal(tm_cstate_session_set(st, "http://h/mcp", "s1", "2025-11-25", "{\"a\":1}"), 0);
    assert_int_equal(tm_cstate_session_set(st, "http://h/mcp", "s2", "2025-06-18", NULL), 0);
    assert_int_equal(tm_cstate_session_get(st, &url, &id, &version, &server), 0);
    assert_string_equal(url, "http://h/mcp");
    assert_string_equal(id, "s2"); /* the last one written */
    assert_string_equal(version, "2025-06-18");
    assert_null(server);
    free(url), free(id), free(version), free(server);
    assert_int_equal(tm_cstate_session_clear(st), 0);
    assert_int_equal(tm_cstate_session_get(st, &url, &id, &version, &server), TIDEMARK_ENOTFOUND);
    tm_cstate_close(st);
}

/* Open a fresh state file and take a request id: 0 when both worked. */
static int open_and_take(const char *path)
{
    tm_cstate *st = NULL;
    int64_t id = 0;
    int rc = tm_cstate_open(path, NULL, &st);
    if (rc == 0)
        rc = tm_cstate_next_request_id(st, &id);
    if (st)
        tm_cstate_close(st);
    return rc;
}

/* Two processes opening one new state file at the same moment (a client
 * and `tidemark-client state` beside it) both succeed: the first switch to
 * WAL and the schema's writes met SQLITE_BUSY the busy handler never saw,
 * and one of them failed with "database is locked" (1 of 3 by hand). */
static void test_open_together(void **s)
{
    (void)s;
    for (int round = 0; round < 30; round++) {
        char path[256];
        temp_path(path, sizeof path);
        int go[2];
        assert_int_equal(pipe(go), 0);
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            char b;
            close(go[1]);
            _exit(read(go[0], &b, 1) == 1 && open_and_take(path) == 0 ? 0 : 1);
        }
        close(go[0]);
        assert_int_equal(write(go[1], "x", 1), 1); /* both start now */
        int mine = open_and_take(path);
        close(go[1]);
        int status = 0;
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_int_equal(mine, 0);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        remove_path(path);
    }
}

/* Request ids only grow, across a close and an open of the same file. */
static void test_request_ids(void **s)
{
    (void)s;
    char path[256];
    temp_path(path, sizeof path);
    tm_cstate *st = NULL;
    assert_int_equal(tm_cstate_open(path, NULL, &st), 0);
    int64_t a = 0, b = 0, c = 0;
    assert_int_equal(tm_cstate_next_request_id(st, &a), 0);
    assert_int_equal(tm_cstate_next_request_id(st, &b), 0);
    assert_true(a >= 1 && b > a);
    assert_int_equal(tm_cstate_session_clear(st), 0); /* a new session does not reuse ids */
    tm_cstate_close(st);
    assert_int_equal(tm_cstate_open(path, NULL, &st), 0);
    assert_int_equal(tm_cstate_next_request_id(st, &c), 0);
    assert_true(c > b);
    tm_cstate_close(st);
    remove_path(path);
}

static void test_proven(void **s)
{
    (void)s;
    tm_cstate *st = open_mem();
    int proven = -1;
    assert_int_equal(tm_cstate_session_proven(st, &proven), 0);
    assert_int_equal(proven, 0);
    assert_int_equal(tm_cstate_begin(st), 0);
    assert_int_equal(tm_cstate_session_prove(st), 0);
    assert_int_equal(tm_cstate_commit(st), 0);
    assert_int_equal(tm_cstate_session_proven(st, &proven), 0);
    assert_int_equal(proven, 1);
    assert_int_equal(tm_cstate_session_clear(st), 0); /* proven is the session's */
    assert_int_equal(tm_cstate_session_proven(st, &proven), 0);
    assert_int_equal(proven, 0);
    tm_cstate_close(st);
}

static void test_cursors(void **s)
{
    (void)s;
    tm_cstate *st = open_mem();
    tm_cursor cur;
    assert_int_equal(tm_cstate_begin(st), 0);
    assert_int_equal(tm_cstate_cursor_get(st, "r1", &cur), 0);
    assert_int_equal(cur.known, 0);
    assert_int_equal(tm_cstate_cursor_set(st, "r1", "e-r1-4", 4), 0);
    assert_int_equal(tm_cstate_cursor_set(st, "r1", "e-r1-5", 5), 0); /* replaced */
    assert_int_equal(tm_cstate_cursor_set(st, "req:9", "opaque-id", 0), 0);
    assert_int_equal(tm_cstate_commit(st), 0);

    assert_int_equal(tm_cstate_begin(st), 0);
    assert_int_equal(tm_cstate_cursor_get(st, "r1", &cur), 0);
    assert_true(cur.known && cur.seq == 5);
    assert_string_equal(cur.event_id, "e-r1-5");
    assert_int_equal(tm_cstate_cursor_get(st, "req:9", &cur), 0);
    assert_true(cur.known && cur.seq == 0);
    /* Kept whole or refused: 255 bytes fit, 256 do not, and the cursor
     * saved before stays. */
    char id[257];
    memset(id, 'x', 255);
    id[255] = '\0';
    assert_int_equal(tm_cstate_cursor_set(st, "r2", id, 9), 0);
    id[255] = 'x';
    id[256] = '\0';
    assert_int_equal(tm_cstate_cursor_set(st, "r1", id, 6), TIDEMARK_ERANGE);
    assert_int_equal(tm_cstate_cursor_get(st, "r1", &cur), 0);
    assert_string_equal(cur.event_id, "e-r1-5");
    assert_int_equal(tm_cstate_cursor_get(st, "r2", &cur), 0);
    assert_int_equal(strlen(cur.event_id), 255);
    /* A rollback undoes what the transaction wrote. */
    assert_int_equal(tm_cstate_cursor_set(st, "r1", "e-r1-6", 6), 0);
    tm_cstate_rollback(st);
    assert_int_equal(tm_cstate_begin(st), 0);
    assert_int_equal(tm_cstate_cursor_get(st, "r1", &cur), 0);
    assert_true(cur.seq == 5);
    assert_int_equal(tm_cstate_cursor_get(st, "r2", &cur), 0);
    assert_int_equal(cur.known, 0);
    tm_cstate_rollback(st);
    tm_cstate_close(st);
}

static void test_dispatch_log(void **s)
{
    (void)s;
    tm_cstate *st = open_mem();
    int state = -1;
    uint64_t last = 99;
    assert_int_equal(tm_cstate_begin(st), 0);
    assert_int_equal(tm_cstate_dispatch_state(st, "e-r1-1", &state), 0);
    assert_int_equal(state, TM_DISPATCH_NONE);
    assert_int_equal(tm_cstate_last_dispatched(st, "r1", &last), 0);
    assert_int_equal(last, 0);
    assert_int_equal(tm_cstate_dispatch_set(st, "e-r1-1", "r1", 1, TM_DISPATCH_COMMITTED), 0);
    assert_int_equal(tm_cstate_dispatch_set(st, "e-r1-3", "r1", 3, TM_DISPATCH_PROCESSED), 0);
    assert_int_equal(tm_cstate_dispatch_set(st, "e-r2-7", "r2", 7, TM_DISPATCH_COMMITTED), 0);
    assert_int_equal(tm_cstate_commit(st), 0);
    assert_int_equal(tm_cstate_begin(st), 0);
    assert_int_equal(tm_cstate_dispatch_state(st, "e-r1-3", &state), 0);
    assert_int_equal(state, TM_DISPATCH_PROCESSED);
    assert_int_equal(tm_cstate_dispatch_set(st, "e-r1-3", "r1", 3, TM_DISPATCH_COMMITTED), 0);
    assert_int_equal(tm_cstate_dispatch_state(st, "e-r1-3", &state), 0);
    assert_int_equal(state, TM_DISPATCH_COMMITTED);
    assert_int_equal(tm_cstate_last_dispatched(st, "r1", &last), 0);
    assert_int_equal(last, 3);
    assert_int_equal(tm_cstate_last_dispatched(st, "r2", &last), 0);
    assert_int_equal(last, 7);
    assert_int_equal(tm_cstate_last_dispatched(st, "r3", &last), 0);
    assert_int_equal(last, 0);
    assert_int_equal(tm_cstate_commit(st), 0);
    tm_cstate_close(st);
}

/* The outstanding row of request id in rows, or NULL. */
static json_t *row_of(json_t *rows, int64_t id)
{
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) if (json_integer_value(json_object_get(r, "request_id")) == id) return r;
    return NULL;
}

static void test_outstanding(void **s)
{
    (void)s;
    tm_cstate *st = open_mem();
    assert_int_equal(tm_cstate_outstanding_add(st, 7, "tools/call", "{\"name\":\"a\"}", NULL, 0), 0);
    assert_int_equal(tm_cstate_outstanding_add(st, 3, "tools/call", "{\"name\":\"b\"}", "k-1", 1), 0);
    assert_int_equal(tm_cstate_outstanding_stream(st, 7, "r4"), 0);
    json_t *rows = NULL;
    assert_int_equal(tm_cstate_outstanding_list(st, &rows), 0);
    assert_int_equal(json_array_size(rows), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(rows, 0), "request_id")), 3);
    json_t *r7 = row_of(rows, 7), *r3 = row_of(rows, 3);
    assert_string_equal(json_string_value(json_object_get(r7, "stream")), "r4");
    assert_string_equal(json_string_value(json_object_get(r7, "params")), "{\"name\":\"a\"}");
    assert_true(json_is_null(json_object_get(r3, "stream")));
    assert_string_equal(json_string_value(json_object_get(r3, "idem_key")), "k-1");
    json_decref(rows);
    /* In the transaction of an event: the stream, then the end. */
    assert_int_equal(tm_cstate_begin(st), 0);
    assert_int_equal(tm_cstate_outstanding_stream_txn(st, 3, "r5"), 0);
    assert_int_equal(tm_cstate_outstanding_done_txn(st, 7), 0);
    assert_int_equal(tm_cstate_commit(st), 0);
    assert_int_equal(tm_cstate_outstanding_list(st, &rows), 0);
    assert_int_equal(json_array_size(rows), 1);
    assert_string_equal(json_string_value(json_object_get(row_of(rows, 3), "stream")), "r5");
    json_decref(rows);
    assert_int_equal(tm_cstate_outstanding_done(st, 3), 0);
    assert_int_equal(tm_cstate_outstanding_done(st, 3), 0); /* gone already: fine */
    assert_int_equal(tm_cstate_outstanding_list(st, &rows), 0);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
    /* A new session forgets what the old one had outstanding. */
    assert_int_equal(tm_cstate_outstanding_add(st, 9, "tools/call", "{}", NULL, 0), 0);
    assert_int_equal(tm_cstate_session_clear(st), 0);
    assert_int_equal(tm_cstate_outstanding_list(st, &rows), 0);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
    tm_cstate_close(st);
}

/* A call the server made a task: its id on the row, its answered input
 * keys, both gone with its outcome. */
static void test_tasks(void **s)
{
    (void)s;
    tm_cstate *st = open_mem();
    assert_int_equal(tm_cstate_outstanding_add(st, 4, "tools/call", "{}", "k", 1), 0);
    assert_int_equal(tm_cstate_outstanding_task(st, 4, "t-1"), 0);
    json_t *rows = NULL;
    assert_int_equal(tm_cstate_outstanding_list(st, &rows), 0);
    assert_string_equal(json_string_value(json_object_get(row_of(rows, 4), "task_id")), "t-1");
    assert_int_equal(json_integer_value(json_object_get(row_of(rows, 4), "tasks")), 1);
    json_decref(rows);
    int answered = 1;
    assert_int_equal(tm_cstate_task_input_answered(st, "t-1", "q1", &answered), 0);
    assert_false(answered);
    assert_int_equal(tm_cstate_task_input_set(st, "t-1", "q1"), 0);
    assert_int_equal(tm_cstate_task_input_set(st, "t-10", "q1"), 0); /* another task */
    assert_int_equal(tm_cstate_task_input_answered(st, "t-1", "q1", &answered), 0);
    assert_true(answered);
    assert_int_equal(tm_cstate_begin(st), 0);
    assert_int_equal(tm_cstate_task_forget_txn(st, "t-1"), 0);
    assert_int_equal(tm_cstate_outstanding_done_txn(st, 4), 0);
    assert_int_equal(tm_cstate_commit(st), 0);
    assert_int_equal(tm_cstate_task_input_answered(st, "t-1", "q1", &answered), 0);
    assert_false(answered);
    assert_int_equal(tm_cstate_task_input_answered(st, "t-10", "q1", &answered), 0);
    assert_true(answered); /* a prefix of the other task's id is not it */
    tm_cstate_close(st);
}

/* A state file of an older client (no task columns) opens, and gets them. */
static void test_old_file_migrates(void **s)
{
    (void)s;
    char path[256];
    temp_path(path, sizeof path);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE tmc_outstanding(request_id INTEGER PRIMARY KEY,"
                                      " method TEXT, params TEXT, sent_ms INTEGER, stream TEXT,"
                                      " idem_key TEXT); INSERT INTO tmc_outstanding(request_id,"
                                      " method, params) VALUES(2, 'tools/call', '{}')",
                                  NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    tm_cstate *st = NULL;
    assert_int_equal(tm_cstate_open(path, NULL, &st), 0);
    assert_int_equal(tm_cstate_outstanding_task(st, 2, "t-2"), 0);
    json_t *rows = NULL;
    assert_int_equal(tm_cstate_outstanding_list(st, &rows), 0);
    assert_string_equal(json_string_value(json_object_get(row_of(rows, 2), "task_id")), "t-2");
    json_decref(rows);
    tm_cstate_close(st);
    assert_int_equal(tm_cstate_open(path, NULL, &st), 0); /* and again: the columns are there */
    tm_cstate_close(st);
    remove_path(path);
}

static void test_dump_and_query(void **s)
{
    (void)s;
    tm_cstate *st = NULL;
    assert_int_equal(tm_cstate_open(NULL, "CREATE TABLE effects(x TEXT)", &st), 0);
    assert_int_equal(tm_cstate_session_set(st, "http://h/mcp", "s1", "2025-11-25", "{}"), 0);
    assert_int_equal(tm_cstate_begin(st), 0);
    assert_int_equal(tm_cstate_cursor_set(st, "r1", "e-r1-2", 2), 0);
    assert_int_equal(tm_cstate_dispatch_set(st, "e-r1-2", "r1", 2, TM_DISPATCH_COMMITTED), 0);
    assert_int_equal(sqlite3_exec(tm_cstate_db(st), "INSERT INTO effects VALUES('a')", NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(tm_cstate_commit(st), 0);
    json_t *d = NULL;
    assert_int_equal(tm_cstate_dump(st, &d), 0);
    assert_true(json_is_false(json_object_get(d, "proven")));
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(d, "session"), 0), "id")),
                        "s1");
    assert_int_equal(json_array_size(json_object_get(d, "cursors")), 1);
    assert_int_equal(json_array_size(json_object_get(d, "dispatch")), 1);
    assert_int_equal(json_array_size(json_object_get(d, "outstanding")), 0);
    json_decref(d);
    json_t *rows = NULL;
    const char *args[] = {"a"};
    assert_int_equal(tm_cstate_query(st, "SELECT x FROM effects WHERE x = ?1", args, 1, &rows), 0);
    assert_int_equal(json_array_size(rows), 1);
    json_decref(rows);
    tm_cstate_close(st);
}

/* A damaged file: every read says it failed; none answers as if there
 * were nothing (an unreadable dispatch log taken for "never dispatched"
 * would apply an event twice). */
static void test_damaged_reads_fail(void **s)
{
    (void)s;
    tm_cstate *st = open_mem();
    raw(st, "DROP TABLE tmc_dispatch");
    int state = 99;
    uint64_t last = 99;
    assert_int_equal(tm_cstate_begin(st), 0);
    assert_int_equal(tm_cstate_dispatch_state(st, "e-r1-1", &state), TIDEMARK_EIO);
    assert_int_equal(tm_cstate_last_dispatched(st, "r1", &last), TIDEMARK_EIO);
    tm_cstate_rollback(st);
    raw(st, "DROP TABLE tmc_meta");
    int64_t id = 0;
    int proven = 5;
    assert_int_equal(tm_cstate_next_request_id(st, &id), TIDEMARK_EIO);
    assert_int_equal(tm_cstate_session_proven(st, &proven), TIDEMARK_EIO);
    assert_int_equal(proven, 0);
    json_t *d = NULL;
    assert_int_not_equal(tm_cstate_dump(st, &d), 0);
    raw(st, "DROP TABLE tmc_session");
    char *url, *sid, *version, *server;
    assert_int_equal(tm_cstate_session_get(st, &url, &sid, &version, &server), TIDEMARK_EIO);
    tm_cstate_close(st);
}

/* A session_clear that fails half-way undoes itself and leaves the state
 * usable: the next transaction begins. */
static void test_failed_clear_rolls_back(void **s)
{
    (void)s;
    tm_cstate *st = open_mem();
    assert_int_equal(tm_cstate_session_set(st, "http://h/mcp", "s1", "2025-11-25", "{}"), 0);
    raw(st, "DROP TABLE tmc_outstanding");
    assert_int_not_equal(tm_cstate_session_clear(st), 0);
    char *url, *sid, *version, *server;
    assert_int_equal(tm_cstate_session_get(st, &url, &sid, &version, &server), 0);
    assert_string_equal(sid, "s1"); /* the session row's DELETE was undone */
    free(url), free(sid), free(version), free(server);
    assert_int_equal(tm_cstate_begin(st), 0);
    tm_cstate_rollback(st);
    tm_cstate_close(st);
}

static void test_open_failures(void **s)
{
    (void)s;
    tm_cstate *st = NULL;
    assert_int_equal(tm_cstate_open("/nonexistent-dir-of-tidemark/x.db", NULL, &st), TIDEMARK_EIO);
    assert_null(st);
    assert_int_equal(tm_cstate_open(NULL, "THIS IS NOT SQL", &st), TIDEMARK_EIO);
    assert_null(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session),          cmocka_unit_test(test_request_ids),
        cmocka_unit_test(test_proven),           cmocka_unit_test(test_cursors),
        cmocka_unit_test(test_dispatch_log),     cmocka_unit_test(test_outstanding),
        cmocka_unit_test(test_tasks),            cmocka_unit_test(test_old_file_migrates),
        cmocka_unit_test(test_dump_and_query),   cmocka_unit_test(test_damaged_reads_fail),
        cmocka_unit_test(test_failed_clear_rolls_back), cmocka_unit_test(test_open_failures),
        cmocka_unit_test(test_open_together),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
