/* sqlite_util.h - small helpers over SQLite shared by the store backends
 * and the client's state: statements with text arguments, rows as JSON, the
 * files beside a database. The SQLite transaction is in txn.h. */
#ifndef TM_SQLITE_UTIL_H
#define TM_SQLITE_UTIL_H
#include <jansson.h>
#include <sqlite3.h>
#include <stddef.h>
#include "txn.h"

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
/* A statement prepared on its first use on db and kept with it, found again
 * by its text (a connection is one thread's at a time): for statements every
 * call runs. The caller resets it after use, so none holds a read snapshot
 * or a write open. NULL when it cannot be prepared. */
sqlite3_stmt *tm_sqlite_kept(sqlite3 *db, const char *sql);
/* Finalize every statement of db (kept ones too), then close it: the
 * sqlite3_close result (NULL: nothing, SQLITE_OK). */
int tm_sqlite_close(sqlite3 *db);
/* Run one statement with text arguments bound to ?1..?n, to completion. */
int tm_sqlite_exec_args(sqlite3 *db, const char *sql, const char *const *args, size_t nargs);
/* Run a query; OUT rows: array of {column: value} (integers, reals, text, null). */
int tm_sqlite_query_json(sqlite3 *db, const char *sql, const char *const *args, size_t nargs,
                         json_t **rows);

/* ---- files beside a durable database --------------------------------------------- */

/* One writer per database file: an exclusive flock on "<db>.lock", which
 * holds the owner's pid for the message of whoever is refused. flock (not
 * fcntl) so that a second open in the same process is refused too. OUT fd.
 * TIDEMARK_EBUSY when another open holds it (OUT holder: its pid, 0 if
 * unknown); TIDEMARK_EIO when the lock file cannot be made. */
int tm_db_lock(const char *db_path, int *fd, long *holder);
void tm_db_unlock(int fd);

/* The durable head of a database, kept in "<db>.head" (two slots, each a
 * checksummed line, written alternately and fsync'd: a torn write leaves the
 * other slot). dbid names the database (random, in tm_meta), so a head file
 * next to another database is not taken for its own. */
typedef struct tm_head_rec {
    char dbid[17];
    char epoch[17];
    unsigned long long commits; /* batch transactions committed */
    int clean;                  /* the store was closed cleanly */
} tm_head_rec;

typedef struct tm_head_file {
    int fd;
    unsigned long long gen; /* slot generation last written */
} tm_head_file;

/* Read the newest valid slot. TIDEMARK_ENOTFOUND: no file, or no valid slot. */
int tm_head_read(const char *db_path, tm_head_rec *out);
/* Open (creating) the head file for writing. */
int tm_head_open(const char *db_path, tm_head_file *hf);
/* Write rec into the older slot and fdatasync it. */
int tm_head_write(tm_head_file *hf, const tm_head_rec *rec);
void tm_head_close(tm_head_file *hf);

#ifdef TIDEMARK_CRASH_POINTS
/* Test builds only: a VFS over the default one that counts the bytes
 * written to WAL files and, while armed, fails every write with SQLITE_FULL
 * (a full disk). Installed as the default VFS by tm_faultvfs_install(), or at
 * the first SQLite store open when TIDEMARK_SQLITE_FULL_FILE names a file:
 * then writes fail while that file exists (checked at most every 20 ms). */
void tm_faultvfs_install(void);
void tm_faultvfs_arm(int full);
unsigned long long tm_faultvfs_wal_bytes(void);
#endif

#endif
