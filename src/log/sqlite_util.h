/* sqlite_util.h - small helpers over SQLite shared by the store backends:
 * statements with text arguments, rows as JSON, the effect transaction. */
#ifndef TM_SQLITE_UTIL_H
#define TM_SQLITE_UTIL_H
#include <jansson.h>
#include <sqlite3.h>
#include <stddef.h>

/* The handle atomic effects write through (public name tidemark_txn_t).
 * SQLite-backed stores set db: SQL effects and rows go into the open
 * transaction. A store without SQL (Redis) leaves db NULL and sets insert,
 * which buffers each row for the script that commits the result. */
struct tidemark_txn {
    sqlite3 *db;
    int (*insert)(struct tidemark_txn *txn, const char *table, const char *doc);
    void *ud; /* insert's */
};

/* The application-rows table (tidemark_txn_insert), in every SQLite store. */
#define TM_SQLITE_ROWS_SCHEMA                                                          \
    "CREATE TABLE IF NOT EXISTS tm_rows(tbl TEXT NOT NULL, id INTEGER NOT NULL,"      \
    " doc TEXT NOT NULL, PRIMARY KEY(tbl, id)) WITHOUT ROWID;"

/* 1 if name is a valid application table name: [A-Za-z0-9_.-]{1,64}. */
int tm_table_name_ok(const char *name);
/* Rows of table, in id order, from a database holding tm_rows.
 * OUT rows: array of {"id": n, <the row's fields>} (caller decrefs). */
int tm_sqlite_rows(sqlite3 *db, const char *table, json_t **rows);

/* Map an SQLite result code to a TIDEMARK_E* code. */
int tm_sqlite_err(int rc);
/* Run one statement with text arguments bound to ?1..?n, to completion. */
int tm_sqlite_exec_args(sqlite3 *db, const char *sql, const char *const *args, size_t nargs);
/* Run a query; OUT rows: array of {column: value} (integers, reals, text, null). */
int tm_sqlite_query_json(sqlite3 *db, const char *sql, const char *const *args, size_t nargs,
                         json_t **rows);

#endif
