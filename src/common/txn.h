/* txn.h - what is behind the public tidemark_txn_t (include/tidemark/txn.h):
 * a handle with one set of operations per backend. The public functions
 * check their arguments once (txn.c) and call the backend's operation.
 *
 * Backends: SQLite (tm_txn_sqlite_init: the open transaction of a
 * connection; used by the SQLite and memory stores and by the client's
 * state) and Redis (store_redis.c: rows are kept for the script that
 * commits the result; no SQL). */
#ifndef TM_TXN_H
#define TM_TXN_H
#include "tidemark/txn.h"
#include <sqlite3.h>

struct tidemark_txn;

struct tm_txn_ops {
    const char *name; /* for messages: "sqlite", "redis" */
    /* One row, doc its JSON text (compact, keys sorted, no "id"); table checked. */
    int (*insert)(struct tidemark_txn *txn, const char *table, const char *doc);
    /* One SQL statement; NULL when the backend has no SQL (TIDEMARK_ENOTSUP). */
    int (*exec)(struct tidemark_txn *txn, const char *sql, const char *const *args, size_t nargs);
};

struct tidemark_txn {
    const struct tm_txn_ops *ops;
    void *impl; /* the backend's: SQLite, the sqlite3 connection */
};

/* A handle on the transaction open on db (BEGIN or SAVEPOINT is the
 * caller's, and so are COMMIT and ROLLBACK): rows go into tm_rows (made on
 * first use when db lacks it), SQL runs on db. */
void tm_txn_sqlite_init(struct tidemark_txn *txn, sqlite3 *db);

#endif
