/* sqlite_util.c - SQLite helpers and tidemark_txn_exec(). */
#include "sqlite_util.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>

int tm_sqlite_err(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW: return 0;
    case SQLITE_NOMEM: return TIDEMARK_ENOMEM;
    case SQLITE_CONSTRAINT: return TIDEMARK_EEXIST;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return TIDEMARK_EBUSY;
    case SQLITE_ERROR:
    case SQLITE_MISUSE:
    case SQLITE_RANGE: return TIDEMARK_EINVAL;
    default: return TIDEMARK_EIO;
    }
}

static int prepare_bind(sqlite3 *db, const char *sql, const char *const *args, size_t nargs,
                        sqlite3_stmt **st)
{
    int rc = sqlite3_prepare_v2(db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        TM_WARN("sqlite: %s: %s", sql, sqlite3_errmsg(db));
        return tm_sqlite_err(rc);
    }
    for (size_t i = 0; i < nargs; i++) {
        rc = args[i] ? sqlite3_bind_text(*st, (int)i + 1, args[i], -1, SQLITE_TRANSIENT)
                     : sqlite3_bind_null(*st, (int)i + 1);
        if (rc != SQLITE_OK) {
            sqlite3_finalize(*st);
            *st = NULL;
            return tm_sqlite_err(rc);
        }
    }
    return 0;
}

int tm_sqlite_exec_args(sqlite3 *db, const char *sql, const char *const *args, size_t nargs)
{
    sqlite3_stmt *st;
    int rc = prepare_bind(db, sql, args, nargs, &st);
    if (rc)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        ;
    if (rc != SQLITE_DONE)
        TM_WARN("sqlite: %s: %s", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : tm_sqlite_err(rc);
}

int tm_sqlite_query_json(sqlite3 *db, const char *sql, const char *const *args, size_t nargs,
                         json_t **rows)
{
    *rows = NULL;
    sqlite3_stmt *st;
    int rc = prepare_bind(db, sql, args, nargs, &st);
    if (rc)
        return rc;
    json_t *out = json_array();
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *row = json_object();
        int n = sqlite3_column_count(st);
        for (int i = 0; i < n; i++) {
            json_t *v;
            switch (sqlite3_column_type(st, i)) {
            case SQLITE_INTEGER: v = json_integer(sqlite3_column_int64(st, i)); break;
            case SQLITE_FLOAT: v = json_real(sqlite3_column_double(st, i)); break;
            case SQLITE_NULL: v = json_null(); break;
            default:
                v = json_stringn((const char *)sqlite3_column_text(st, i),
                                 (size_t)sqlite3_column_bytes(st, i));
                if (!v)
                    v = json_null();
            }
            json_object_set_new(row, sqlite3_column_name(st, i), v);
        }
        json_array_append_new(out, row);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        json_decref(out);
        return tm_sqlite_err(rc);
    }
    *rows = out;
    return 0;
}

int tidemark_txn_exec(struct tidemark_txn *txn, const char *sql, const char *const *args,
                      size_t nargs)
{
    if (!txn || !sql)
        return TIDEMARK_EINVAL;
    if (!txn->db) {
        TM_WARN("tidemark_txn_exec: this store has no SQL (use tidemark_txn_insert)");
        return TIDEMARK_ENOTSUP;
    }
    return tm_sqlite_exec_args(txn->db, sql, args, nargs);
}

int tm_table_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

int tidemark_txn_insert(struct tidemark_txn *txn, const char *table, json_t *row)
{
    if (!txn || !tm_table_name_ok(table) || !json_is_object(row) || json_object_get(row, "id"))
        return TIDEMARK_EINVAL;
    char *doc = json_dumps(row, JSON_COMPACT | JSON_SORT_KEYS);
    if (!doc)
        return TIDEMARK_ENOMEM;
    int rc;
    if (txn->insert) {
        rc = txn->insert(txn, table, doc);
    } else if (txn->db) {
        const char *args[2] = {table, doc};
        rc = tm_sqlite_exec_args(txn->db,
                                 "INSERT INTO tm_rows(tbl, id, doc) SELECT ?1, COALESCE(MAX(id), 0) + 1, ?2"
                                 " FROM tm_rows WHERE tbl = ?1",
                                 args, 2);
    } else {
        rc = TIDEMARK_ENOTSUP;
    }
    free(doc);
    return rc;
}

int tm_sqlite_rows(sqlite3 *db, const char *table, json_t **rows)
{
    const char *args[1] = {table};
    json_t *raw = NULL;
    int rc = tm_sqlite_query_json(db, "SELECT id, doc FROM tm_rows WHERE tbl = ?1 ORDER BY id", args,
                                  1, &raw);
    if (rc)
        return rc;
    size_t i;
    json_t *r;
    json_array_foreach(raw, i, r) { /* {"id": n, "doc": "<json>"} -> {"id": n, <doc's fields>} */
        json_t *row = json_loads(json_string_value(json_object_get(r, "doc")), 0, NULL);
        if (!json_is_object(row)) {
            json_decref(row);
            row = json_object();
        }
        json_object_set(row, "id", json_object_get(r, "id"));
        json_array_set_new(raw, i, row);
    }
    *rows = raw;
    return 0;
}
