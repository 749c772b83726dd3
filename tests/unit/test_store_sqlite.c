/* test_store_sqlite.c - the memory backend's contract tests, run on the SQLite
 * store: each test opens a fresh database in a scratch folder (removed at the
 * end). Appends wait for durability, as the contract's synchronous checks
 * expect of the in-memory store. Left out, because the SQLite store
 * documents other behaviour: session_touch is throttled and asynchronous
 * (touch, delete), close_stream is queued like an append (close), and the
 * commit listener is a wake-up that may repeat a head (concurrent). The
 * SQLite store's durability is tested end to end (durable_sqlite, crash_sqlite). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "log/store.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[] = "/tmp/tm-store-sqlite-XXXXXX";
static int g_next_db = 1;

static int contract_open(const char *uri, const tm_store_options *opt, tm_store **out)
{
    (void)uri;
    char path[128];
    snprintf(path, sizeof path, "%s/t%d.db", g_dir, g_next_db++);
    tm_store_options o = *opt;
    o.durability = TM_DURABILITY_PROCESS;
    return tm_store_sqlite_open(path, &o, out);
}

#include "store_contract.h"

static int remove_dir(void)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd);
}

int main(void)
{
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    (void)memory_contract_main;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_create_get),
        cmocka_unit_test(test_stream_open_numbering),
        cmocka_unit_test(test_stream_g_reopen_keeps_seqs),
        cmocka_unit_test(test_append_seqs_cb_listener),
        cmocka_unit_test(test_append_final_closes),
        cmocka_unit_test(test_read_order_and_limits),
        cmocka_unit_test(test_read_after_max_seq),
        cmocka_unit_test(test_bytes_exact),
        cmocka_unit_test(test_retention_trimming),
        cmocka_unit_test(test_retention_long_run),
        cmocka_unit_test(test_event_epoch_untrimmed),
        cmocka_unit_test(test_effect_rows),
        cmocka_unit_test(test_session_attrs),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    remove_dir();
    return failed;
}
