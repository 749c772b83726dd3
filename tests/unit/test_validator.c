/* test_validator.c - every row of the client's resumption validator
 * (DESIGN.md §7), and the opaque-id policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "mcp/validator.h"

static tm_verdict v(uint64_t head, uint64_t cursor, int dispatched, uint64_t last, int idem)
{
    tm_validate_in in = {head, cursor, dispatched, last, idem};
    return tm_validate(&in);
}

/* head <= cursor: abort, replay_not_monotonic */
static void test_not_monotonic(void **s)
{
    (void)s;
    assert_int_equal(v(5, 5, 1, 5, 0), TM_V_NOT_MONOTONIC);
    assert_int_equal(v(3, 5, 1, 5, 1), TM_V_NOT_MONOTONIC);
    assert_string_equal(tm_verdict_reason(TM_V_NOT_MONOTONIC), "replay_not_monotonic");
}

/* head > cursor + 1: resumption_gap */
static void test_gap(void **s)
{
    (void)s;
    assert_int_equal(v(7, 5, 0, 5, 0), TM_V_GAP);
    assert_int_equal(v(2, 0, 0, 0, 1), TM_V_GAP);
    assert_string_equal(tm_verdict_reason(TM_V_GAP), "resumption_gap");
}

/* head already dispatched: duplicate_effect, or suppressed when idempotent */
static void test_duplicate(void **s)
{
    (void)s;
    assert_int_equal(v(6, 5, 1, 6, 0), TM_V_DUPLICATE);
    assert_string_equal(tm_verdict_reason(TM_V_DUPLICATE), "duplicate_effect");
    assert_int_equal(v(6, 5, 1, 6, 1), TM_V_SUPPRESS);
    assert_null(tm_verdict_reason(TM_V_SUPPRESS));
}

/* head not dispatched, but the dispatch log stops before the cursor:
 * an event was skipped (cursor saved before dispatch, then a crash). */
static void test_log_inconsistent(void **s)
{
    (void)s;
    assert_int_equal(v(6, 5, 0, 4, 0), TM_V_LOG_INCONSISTENT);
    assert_int_equal(v(6, 5, 0, 4, 1), TM_V_LOG_INCONSISTENT);
    /* the very first event of a stream was the one skipped */
    assert_int_equal(v(2, 1, 0, 0, 0), TM_V_LOG_INCONSISTENT);
    assert_string_equal(tm_verdict_reason(TM_V_LOG_INCONSISTENT), "dispatch_log_inconsistent");
}

/* head = cursor + 1, unprocessed, log consistent: resume */
static void test_dispatch(void **s)
{
    (void)s;
    assert_int_equal(v(6, 5, 0, 5, 0), TM_V_DISPATCH);
    assert_int_equal(v(1, 0, 0, 0, 0), TM_V_DISPATCH);
    assert_null(tm_verdict_reason(TM_V_DISPATCH));
}

static void test_opaque(void **s)
{
    (void)s;
    assert_int_equal(tm_validate_opaque(0, 0), TM_V_DISPATCH);
    assert_int_equal(tm_validate_opaque(1, 0), TM_V_DUPLICATE);
    assert_int_equal(tm_validate_opaque(1, 1), TM_V_SUPPRESS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_monotonic), cmocka_unit_test(test_gap),
        cmocka_unit_test(test_duplicate),     cmocka_unit_test(test_log_inconsistent),
        cmocka_unit_test(test_dispatch),      cmocka_unit_test(test_opaque),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
