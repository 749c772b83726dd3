/* test_server_state.c - state belongs to the server, not the process: two
 * servers in one process are independent, and a freed server leaves
 * nothing behind for one made after it (even at the same address). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "server/tasks.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>

static int tool_fn(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)call;
    (void)args;
    (void)ud;
    *result = json_object();
    return 0;
}

static tidemark_server_t *make(void)
{
    tidemark_server_config_t cfg;
    tidemark_server_config_init(&cfg);
    cfg.store = "memory:";
    tidemark_server_t *srv = NULL;
    assert_int_equal(tidemark_server_new(&cfg, &srv), 0);
    return srv;
}

static unsigned policy(tidemark_server_t *srv, const char *tool)
{
    unsigned task;
    int64_t ttl;
    assert_int_equal(tm_tasks_policy_of(srv, tool, &task, &ttl), 0);
    return task;
}

static void add_task_tool(tidemark_server_t *srv, const char *name)
{
    tidemark_tool_t t = {.name = name, .fn = tool_fn, .task = TIDEMARK_TASK_REQUIRED};
    assert_int_equal(tidemark_server_add_tool(srv, &t), 0);
}

static void test_two_servers_independent(void **state)
{
    (void)state;
    tidemark_server_t *a = make(), *b = make();
    add_task_tool(a, "slow");
    assert_int_equal(policy(a, "slow"), TIDEMARK_TASK_REQUIRED);
    assert_int_equal(policy(b, "slow"), TIDEMARK_TASK_NEVER);
    tidemark_server_free(a);
    assert_int_equal(policy(b, "slow"), TIDEMARK_TASK_NEVER);
    tidemark_server_free(b);
}

/* Made, freed, made again (malloc hands the same block back more often than
 * not): the new server has no policy of the old one's. */
static void test_free_leaves_nothing(void **state)
{
    (void)state;
    int same = 0;
    for (int i = 0; i < 20; i++) {
        tidemark_server_t *a = make();
        add_task_tool(a, "slow");
        void *was = a;
        tidemark_server_free(a);
        tidemark_server_t *c = make();
        same += (void *)c == was;
        assert_int_equal(policy(c, "slow"), TIDEMARK_TASK_NEVER);
        tidemark_server_free(c);
    }
    print_message("made at a freed server's address %d of 20 times\n", same);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_servers_independent),
        cmocka_unit_test(test_free_leaves_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
