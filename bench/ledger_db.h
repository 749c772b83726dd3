/* ledger_db.h - the raw one-row commit loop's database, shared by
 * tidemark-sqlite-floor and tidemark-floor --commit, so that both commit
 * the same row the same way: a fresh SQLite file in WAL mode with
 * synchronous=FULL (every commit fsync'd, as tidemark's `power`) and one
 * table, ledger(id, entry, created_ms). */
#ifndef TM_BENCH_LEDGER_DB_H
#define TM_BENCH_LEDGER_DB_H
#include <sqlite3.h>

/* PATH and its -wal and -shm files, gone. */
void bench_ledger_remove(const char *path);
/* PATH made anew (removed first), its table created and the row's INSERT
 * prepared: SQLITE_OK, or an error with *db to read it from (close it). */
int bench_ledger_open(const char *path, sqlite3 **db, sqlite3_stmt **ins);
/* One ledger row (inside the caller's transaction): SQLITE_DONE when put. */
int bench_ledger_put(sqlite3_stmt *ins, const char *entry, sqlite3_int64 created_ms);

#endif
