/* txn.c - the public transaction functions (include/tidemark/txn.h): the
 * arguments are checked here, once, for every backend; the backend's
 * operations (txn.h) do the writing. */
#include "txn.h"
#include "sqlite_util.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>

int tidemark_txn_insert(tidemark_txn_t *txn, const char *table, json_t *row)
{
    if (!txn || !txn->ops || !tm_table_name_ok(table) || !json_is_object(row) ||
        json_object_get(row, "id"))
        return TIDEMARK_EINVAL;
    if (!txn->ops->insert)
        return TIDEMARK_ENOTSUP;
    char *doc = json_dumps(row, JSON_COMPACT | JSON_SORT_KEYS);
    if (!doc)
        return TIDEMARK_ENOMEM;
    int rc = txn->ops->insert(txn, table, doc);
    free(doc);
    return rc;
}

int tidemark_txn_exec(tidemark_txn_t *txn, const char *sql, const char *const *args, size_t nargs)
{
    if (!txn || !txn->ops || !sql || (nargs && !args))
        return TIDEMARK_EINVAL;
    if (!txn->ops->exec) {
        TM_WARN("tidemark_txn_exec: a %s transaction has no SQL (use tidemark_txn_insert)",
                txn->ops->name);
        return TIDEMARK_ENOTSUP;
    }
    return txn->ops->exec(txn, sql, args, nargs);
}
