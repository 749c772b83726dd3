/* ledger_db.c - see ledger_db.h. */
#include "ledger_db.h"
#include <stdio.h>
#include <unistd.h>

void bench_ledger_remove(const char *path)
{
    static const char *const ext[] = {"", "-wal", "-shm"};
    char p[4096];
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        snprintf(p, sizeof p, "%s%s", path, ext[i]);
        unlink(p);
    }
}

int bench_ledger_open(const char *path, sqlite3 **db, sqlite3_stmt **ins)
{
    bench_ledger_remove(path);
    int rc = sqlite3_open(path, db);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(*db,
                          "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                          "CREATE TABLE ledger(id INTEGER PRIMARY KEY, entry TEXT NOT NULL,"
                          " created_ms INTEGER NOT NULL)",
                          NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(*db, "INSERT INTO ledger(entry, created_ms) VALUES(?, ?)", -1, ins,
                                NULL);
    return rc;
}

int bench_ledger_put(sqlite3_stmt *ins, const char *entry, sqlite3_int64 created_ms)
{
    sqlite3_bind_text(ins, 1, entry, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins, 2, created_ms);
    int rc = sqlite3_step(ins);
    sqlite3_reset(ins);
    return rc;
}
