/*
 * test_api.c - the public API as a program sees it, linked against the
 * shared library: defaults, the version, errors, and structs from older or
 * newer headers (tidemark.h, "Structs a caller fills").
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <tidemark/server.h>
#include <stdio.h>
#include <string.h>

static void test_defaults(void **state)
{
    (void)state;
    tidemark_server_config_t c;
    memset(&c, 0x5a, sizeof c);
    tidemark_server_config_init(&c);
    assert_int_equal(c.session_ttl_seconds, 86400); /* clients that never DELETE */
    assert_int_equal(c.max_connections, 16384);
    assert_int_equal(c.max_connections_per_address, 4096);
    assert_int_equal(c.request_deadline_ms, 30000);
    assert_int_equal(c.max_calls_per_session, 8);
    assert_int_equal(c.max_batch, 64);
    assert_int_equal(c.workers, 64);
    assert_string_equal(c.store, "memory");
    assert_null(c.metrics_addresses);
}

static void test_version(void **state)
{
    (void)state;
    int n = 0;
    assert_string_equal(tidemark_version(&n), TIDEMARK_VERSION);
    assert_int_equal(n, TIDEMARK_VERSION_NUMBER);
    char text[32];
    snprintf(text, sizeof text, "%d.%d.%d", TIDEMARK_VERSION_MAJOR, TIDEMARK_VERSION_MINOR,
             TIDEMARK_VERSION_PATCH);
    assert_string_equal(text, TIDEMARK_VERSION);
}

static void test_strerror(void **state)
{
    (void)state;
    for (int e = TIDEMARK_EPEER; e <= 0; e++)
        assert_true(tidemark_strerror(e)[0] != '\0');
}

/* A program built against an older header passes a smaller struct: the
 * library reads only that many bytes (garbage after them is never seen) and
 * gives the rest their defaults. */
static void test_older_header(void **state)
{
    (void)state;
    union {
        tidemark_server_config_t cfg;
        unsigned char bytes[sizeof(tidemark_server_config_t)];
    } u;
    size_t old = offsetof(tidemark_server_config_t, max_connections);
    memset(u.bytes, 0xff, sizeof u.bytes); /* a newer field read would be absurd */
    tidemark_server_config_init_sized(&u.cfg, old);
    tidemark_server_t *srv = NULL;
    assert_int_equal(tidemark_server_new_sized(&u.cfg, old, &srv), 0);
    tidemark_server_free(srv);
    tidemark_tool_t t;
    memset(&t, 0xff, sizeof t);
    memset(&t, 0, offsetof(tidemark_tool_t, hints));
    t.name = "x";
    /* an older tidemark_tool_t without hints, fn, ud: no fn is EINVAL, not a crash */
    assert_int_equal(tidemark_server_new_sized(&u.cfg, old, &srv), TIDEMARK_OK);
    assert_int_equal(tidemark_server_add_tool_sized(srv, &t, offsetof(tidemark_tool_t, hints)),
                     TIDEMARK_EINVAL);
    tidemark_server_free(srv);
}

/* A newer header's struct: fields this library does not know must be zero,
 * else the setting would be silently ignored. */
static void test_newer_header(void **state)
{
    (void)state;
    struct {
        tidemark_server_config_t cfg;
        uint64_t unknown;
    } newer;
    memset(&newer, 0, sizeof newer);
    tidemark_server_config_init_sized(&newer.cfg, sizeof newer);
    assert_int_equal(newer.unknown, 0);
    tidemark_server_t *srv = NULL;
    assert_int_equal(tidemark_server_new_sized(&newer.cfg, sizeof newer, &srv), 0);
    tidemark_server_free(srv);
    newer.unknown = 7;
    srv = NULL;
    assert_int_equal(tidemark_server_new_sized(&newer.cfg, sizeof newer, &srv), TIDEMARK_ENOTSUP);
    assert_null(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_older_header),
        cmocka_unit_test(test_newer_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
