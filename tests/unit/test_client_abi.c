/* test_client_abi.c - tidemark_client_config_t as programs built against
 * another header fill it (tidemark.h, "Structs a caller fills"): an older,
 * shorter struct gets the defaults of the fields it does not have; a newer,
 * longer one is accepted when what this library does not know is zero,
 * and refused (TIDEMARK_ENOTSUP) otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "client/client_int.h" /* to see the config the client took */
#include "tidemark/client.h"

/* A program whose header ended the struct before timeout_ms. */
#define OLD_SIZE offsetof(tidemark_client_config_t, timeout_ms)

static void test_init_fills_defaults(void **s)
{
    (void)s;
    tidemark_client_config_t cfg;
    memset(&cfg, 0xab, sizeof cfg);
    assert_int_equal(tidemark_client_config_init(&cfg), 0);
    assert_null(cfg.url);
    assert_int_equal(cfg.timeout_ms, 60000);
    assert_int_equal(cfg.max_attempts, 8);
    assert_int_equal(cfg.retry_min_ms, TIDEMARK_CLIENT_RETRY_MIN_MS);
    assert_int_equal(cfg.max_held_bytes, TIDEMARK_CLIENT_MAX_HELD_BYTES);
    assert_null(cfg.on_event);
    assert_int_equal(tidemark_client_config_init_sized(NULL, sizeof cfg), TIDEMARK_EINVAL);
}

/* init of an older struct writes only its own bytes. */
static void test_init_older_struct(void **s)
{
    (void)s;
    unsigned char raw[sizeof(tidemark_client_config_t)];
    memset(raw, 0xab, sizeof raw);
    assert_int_equal(tidemark_client_config_init_sized((tidemark_client_config_t *)raw, OLD_SIZE), 0);
    for (size_t i = OLD_SIZE; i < sizeof raw; i++)
        assert_int_equal(raw[i], 0xab);
    tidemark_client_config_t cfg;
    memcpy(&cfg, raw, OLD_SIZE);
    assert_int_equal(cfg.max_attempts, 8);
}

/* new of an older struct: the fields beyond it are the defaults, whatever
 * the bytes after it hold. */
static void test_new_older_struct(void **s)
{
    (void)s;
    tidemark_client_config_t cfg;
    memset(&cfg, 0xab, sizeof cfg);
    assert_int_equal(tidemark_client_config_init_sized(&cfg, OLD_SIZE), 0);
    cfg.url = "http://127.0.0.1:9/mcp";
    cfg.max_attempts = 3;
    tidemark_client_t *c = NULL;
    assert_int_equal(tidemark_client_new_sized(&cfg, OLD_SIZE, &c), 0);
    assert_int_equal(c->cfg.max_attempts, 3);
    assert_int_equal(c->cfg.timeout_ms, 60000);
    assert_null(c->cfg.on_event);
    assert_null(c->cfg.on_request);
    assert_null(c->cfg.ud);
    tidemark_client_free(c);
}

/* A newer header's struct: zeros beyond ours are fine, anything else is a
 * setting we would silently ignore. */
static void test_new_newer_struct(void **s)
{
    (void)s;
    struct newer {
        tidemark_client_config_t cfg;
        uint64_t added_later;
    } n;
    memset(&n, 0, sizeof n);
    assert_int_equal(tidemark_client_config_init_sized(&n.cfg, sizeof n), 0);
    assert_int_equal(n.added_later, 0);
    n.cfg.url = "http://127.0.0.1:9/mcp";
    tidemark_client_t *c = NULL;
    assert_int_equal(tidemark_client_new_sized(&n.cfg, sizeof n, &c), 0);
    tidemark_client_free(c);
    n.added_later = 1;
    c = NULL;
    assert_int_equal(tidemark_client_new_sized(&n.cfg, sizeof n, &c), TIDEMARK_ENOTSUP);
    assert_null(c);
}

static void test_new_refuses(void **s)
{
    (void)s;
    tidemark_client_config_t cfg;
    assert_int_equal(tidemark_client_config_init(&cfg), 0);
    tidemark_client_t *c = NULL;
    assert_int_equal(tidemark_client_new(&cfg, &c), TIDEMARK_EINVAL); /* no url */
    assert_int_equal(tidemark_client_new_sized(NULL, sizeof cfg, &c), TIDEMARK_EINVAL);
    cfg.url = "http://127.0.0.1:9/mcp";
    cfg.state_path = "/nonexistent-dir-of-tidemark/state.db";
    assert_int_equal(tidemark_client_new(&cfg, &c), TIDEMARK_EIO);
    assert_null(c);
}

/* The client keeps copies: the caller's strings may go right after new. */
static void test_new_copies(void **s)
{
    (void)s;
    char url[64] = "http://127.0.0.1:9/mcp", name[16] = "me";
    tidemark_client_config_t cfg;
    assert_int_equal(tidemark_client_config_init(&cfg), 0);
    cfg.url = url;
    cfg.name = name;
    tidemark_client_t *c = NULL;
    assert_int_equal(tidemark_client_new(&cfg, &c), 0);
    memset(url, 'x', sizeof url - 1);
    memset(name, 'y', sizeof name - 1);
    assert_string_equal(c->cfg.url, "http://127.0.0.1:9/mcp");
    assert_string_equal(c->cfg.name, "me");
    tidemark_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_fills_defaults), cmocka_unit_test(test_init_older_struct),
        cmocka_unit_test(test_new_older_struct),    cmocka_unit_test(test_new_newer_struct),
        cmocka_unit_test(test_new_refuses),         cmocka_unit_test(test_new_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
