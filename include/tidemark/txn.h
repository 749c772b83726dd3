/*
 * txn.h - the transaction an atomic effect writes in, on the server (the
 * store transaction that commits a tool's result) and on the client (the
 * client-state transaction that saves an event's cursor).
 *
 * A tidemark_txn_t is opaque: a handle with a backend behind it. It is valid
 * only during the callback it is handed to; what is written through it
 * commits with that transaction or not at all.
 */
#ifndef TIDEMARK_TXN_H
#define TIDEMARK_TXN_H

#include <jansson.h>
#include <stddef.h>
#include "tidemark/tidemark.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tidemark_txn tidemark_txn_t;

/* Insert one row into the application table `table` ([A-Za-z0-9_.-]{1,64})
 * inside txn. row: a JSON object (not stolen) without an "id" field; a
 * table's rows are numbered 1, 2, ... in commit order. Works on every
 * backend: the server's memory, SQLite and Redis stores (on Redis the row is
 * written by the same script that commits the result, so every node sees it)
 * and the client's state. Read them back with tidemark_server_rows (server)
 * or tidemark_client_query on table tm_rows (client). TIDEMARK_EINVAL for a
 * bad table name, a row that is not an object or has an "id". */
TIDEMARK_API int tidemark_txn_insert(tidemark_txn_t *txn, const char *table, json_t *row);

/* Run one SQL statement with text arguments bound to ?1..?n (NULL args are
 * NULL) inside txn. Only on SQLite-backed transactions: the server's SQLite
 * and memory stores and the client's state; TIDEMARK_ENOTSUP elsewhere
 * (Redis: use tidemark_txn_insert). */
TIDEMARK_API int tidemark_txn_exec(tidemark_txn_t *txn, const char *sql, const char *const *args,
                                   size_t nargs);

#ifdef __cplusplus
}
#endif
#endif
