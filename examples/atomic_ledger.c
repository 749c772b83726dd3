/*
 * atomic_ledger.c - an effect that happens exactly once: the tool writes its
 * ledger row on the atomic path, so the row commits in the same store
 * transaction as the tool's result. A crash, a lost node or a retried
 * request leaves both or neither; a retry is answered from the record and
 * the tool does not run again.
 *
 *   cc atomic_ledger.c $(pkg-config --cflags --libs tidemark) -o atomic_ledger
 *   ./atomic_ledger [PORT] [STORE]   (defaults: 8080, sqlite:./var/ledger.db)
 *
 * Tools: append {entry} (atomic, not idempotent), count {entry} (rows with
 * that entry).
 */
#include <tidemark/server.h>
#include <stdio.h>
#include <stdlib.h>

static int insert_row(tidemark_txn_t *txn, void *row)
{
    return tidemark_txn_insert(txn, "ledger", row);
}

static void free_row(void *row)
{
    json_decref(row);
}

static int append(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)ud;
    const char *entry = json_string_value(json_object_get(args, "entry"));
    if (!entry) {
        *result = tidemark_result_error("argument 'entry' (string) is required");
        return 0;
    }
    json_t *row = json_pack("{s:s,s:s}", "entry", entry, "key", tidemark_call_idempotency_key(call));
    if (!row)
        return TIDEMARK_ENOMEM;
    int rc = tidemark_call_set_effect(call, insert_row, row, free_row);
    if (rc) {
        json_decref(row);
        return rc;
    }
    *result = tidemark_result_text("appended");
    return *result ? 0 : TIDEMARK_ENOMEM;
}

static int count(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)call;
    tidemark_server_t *srv = ud;
    json_t *match = json_pack("{s:O}", "entry", json_object_get(args, "entry"));
    json_t *rows = NULL;
    int rc = match ? tidemark_server_rows(srv, "ledger", match, &rows) : TIDEMARK_EINVAL;
    json_decref(match);
    if (rc)
        return rc;
    char text[32];
    snprintf(text, sizeof text, "%zu", json_array_size(rows));
    json_decref(rows);
    *result = tidemark_result_text(text);
    return *result ? 0 : TIDEMARK_ENOMEM;
}

int main(int argc, char **argv)
{
    tidemark_server_config_t cfg;
    tidemark_server_config_init(&cfg);
    cfg.port = argc > 1 ? (unsigned)atoi(argv[1]) : 8080;
    cfg.store = argc > 2 ? argv[2] : "sqlite:./var/ledger.db";
    tidemark_server_t *srv;
    int rc = tidemark_server_new(&cfg, &srv);
    if (rc) {
        fprintf(stderr, "atomic_ledger: %s\n", tidemark_strerror(rc));
        return 1;
    }
    tidemark_tool_t tools[] = {
        {.name = "append", .description = "Appends one ledger row, exactly once.",
         .hints = TIDEMARK_TOOL_ATOMIC, .fn = append},
        {.name = "count", .description = "How many rows carry an entry.",
         .hints = TIDEMARK_TOOL_READ_ONLY | TIDEMARK_TOOL_IDEMPOTENT, .fn = count, .ud = srv},
    };
    for (size_t i = 0; rc == 0 && i < sizeof tools / sizeof tools[0]; i++)
        rc = tidemark_server_add_tool(srv, &tools[i]);
    if (rc == 0)
        rc = tidemark_server_run(srv);
    if (rc)
        fprintf(stderr, "atomic_ledger: %s\n", tidemark_strerror(rc));
    tidemark_server_free(srv);
    return rc ? 1 : 0;
}
