/* sqlite_util.h - small helpers over SQLite shared by the store backends:
 * statements with text arguments, rows as JSON, the effect transaction. */
#ifndef TM_SQLITE_UTIL_H
#define TM_SQLITE_UTIL_H
#include <jansson.h>
#include <sqlite3.h>
#include <stddef.h>

/* The handle atomic effects write through (public name tidemark_txn_t). */
struct tidemark_txn {
    sqlite3 *db;
};

/* Map an SQLite result code to a TIDEMARK_E* code. */
int tm_sqlite_err(int rc);
/* Run one statement with text arguments bound to ?1..?n, to completion. */
int tm_sqlite_exec_args(sqlite3 *db, const char *sql, const char *const *args, size_t nargs);
/* Run a query; OUT rows: array of {column: value} (integers, reals, text, null). */
int tm_sqlite_query_json(sqlite3 *db, const char *sql, const char *const *args, size_t nargs,
                         json_t **rows);

#endif
