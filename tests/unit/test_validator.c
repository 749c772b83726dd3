/* test_validator.c - every row of the client's resumption validator, and
 * the opaque-id policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "client/validator.h"

/* A structured id on the provable stream being read: the seq rows. The
 * whole validator must agree with the seq rows alone there. */
static tm_verdict v(uint64_t head, uint64_t cursor, int dispatched, uint64_t last, int idem)
{
    tm_validate_in in = {.id_kind = TM_ID_STRUCTURED, .message_ok = 1,
                         .stream = cursor ? TM_STREAM_PROVABLE : TM_STREAM_NEW, .same_stream = 1,
                         .head = head, .cursor = cursor, .dispatched = dispatched,
                         .last_dispatched = last, .idempotent = idem};
    tm_verdict whole = tm_validate(&in);
    assert_int_equal(whole, tm_validate_seq(&in));
    return whole;
}

/* An event of kind k on a stream of kind s, otherwise continuing it exactly. */
static tm_verdict vk(tm_stream_kind s, tm_id_kind k, int same, int message_ok)
{
    tm_validate_in in = {.id_kind = k, .message_ok = message_ok, .stream = s, .same_stream = same,
                         .head = 6, .cursor = 5, .last_dispatched = 5};
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

/* Once provable, always provable: nothing weaker continues the stream. */
static void test_provable_stream_refuses_weaker_ids(void **s)
{
    (void)s;
    assert_int_equal(vk(TM_STREAM_PROVABLE, TM_ID_STRUCTURED, 1, 1), TM_V_DISPATCH);
    assert_int_equal(vk(TM_STREAM_PROVABLE, TM_ID_OPAQUE, 1, 1), TM_V_CONTINUITY_LOST);
    assert_int_equal(vk(TM_STREAM_PROVABLE, TM_ID_EMPTY, 1, 1), TM_V_CONTINUITY_LOST);
    assert_int_equal(vk(TM_STREAM_PROVABLE, TM_ID_NONE, 1, 1), TM_V_CONTINUITY_LOST);
    assert_string_equal(tm_verdict_reason(TM_V_CONTINUITY_LOST), "continuity_lost");
}

/* An event naming another stream than the one being resumed. */
static void test_stream_mismatch(void **s)
{
    (void)s;
    assert_int_equal(vk(TM_STREAM_PROVABLE, TM_ID_STRUCTURED, 0, 1), TM_V_STREAM_MISMATCH);
    /* an opaque stream suddenly naming a Tidemark stream */
    assert_int_equal(vk(TM_STREAM_OPAQUE, TM_ID_STRUCTURED, 0, 1), TM_V_STREAM_MISMATCH);
    assert_string_equal(tm_verdict_reason(TM_V_STREAM_MISMATCH), "stream_mismatch");
}

/* An opaque stream: deduplicated by id; an event without one cannot be. */
static void test_opaque_stream(void **s)
{
    (void)s;
    assert_int_equal(vk(TM_STREAM_OPAQUE, TM_ID_OPAQUE, 0, 1), TM_V_DISPATCH);
    assert_int_equal(vk(TM_STREAM_OPAQUE, TM_ID_EMPTY, 0, 1), TM_V_CONTINUITY_LOST);
    assert_int_equal(vk(TM_STREAM_OPAQUE, TM_ID_NONE, 0, 1), TM_V_CONTINUITY_LOST);
    tm_validate_in in = {.id_kind = TM_ID_OPAQUE, .message_ok = 1, .stream = TM_STREAM_OPAQUE,
                         .dispatched = 1};
    assert_int_equal(tm_validate(&in), TM_V_DUPLICATE);
}

/* A new stream: ids of any kind start it; no id at all is a plain message. */
static void test_new_stream(void **s)
{
    (void)s;
    assert_int_equal(vk(TM_STREAM_NEW, TM_ID_NONE, 0, 1), TM_V_PLAIN);
    assert_int_equal(vk(TM_STREAM_NEW, TM_ID_EMPTY, 0, 1), TM_V_PLAIN);
    assert_int_equal(vk(TM_STREAM_NEW, TM_ID_OPAQUE, 0, 1), TM_V_DISPATCH);
    assert_null(tm_verdict_reason(TM_V_PLAIN));
}

/* The intake rows come first, on every kind of stream: the fault named is the
 * event's own, not a position it seems to have. */
static void test_intake_rows(void **s)
{
    (void)s;
    for (int k = TM_STREAM_NEW; k <= TM_STREAM_OPAQUE; k++) {
        assert_int_equal(vk(k, TM_ID_MALFORMED, 1, 1), TM_V_BAD_ID);
        assert_int_equal(vk(k, TM_ID_MALFORMED, 1, 0), TM_V_BAD_ID);
        assert_int_equal(vk(k, TM_ID_STRUCTURED, 1, 0), TM_V_BAD_MESSAGE);
        assert_int_equal(vk(k, TM_ID_NONE, 1, 0), TM_V_BAD_MESSAGE);
    }
    assert_int_equal(tm_validate_intake(TM_ID_STRUCTURED, 1), TM_V_DISPATCH);
    assert_int_equal(tm_validate_intake(TM_ID_OPAQUE, 0), TM_V_BAD_MESSAGE);
    assert_string_equal(tm_verdict_reason(TM_V_BAD_ID), "malformed_event_id");
    assert_string_equal(tm_verdict_reason(TM_V_BAD_MESSAGE), "malformed_event");
}

/* A saved cursor ahead of the dispatch log: the skip is proven before any
 * event arrives (the skipped one may have been the stream's last). */
static void test_saved_state(void **s)
{
    (void)s;
    assert_int_equal(tm_validate_saved(7, 7), TM_V_DISPATCH);
    assert_int_equal(tm_validate_saved(0, 0), TM_V_DISPATCH);
    assert_int_equal(tm_validate_saved(7, 6), TM_V_LOG_INCONSISTENT);
    assert_int_equal(tm_validate_saved(1, 0), TM_V_LOG_INCONSISTENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_monotonic), cmocka_unit_test(test_gap),
        cmocka_unit_test(test_duplicate),     cmocka_unit_test(test_log_inconsistent),
        cmocka_unit_test(test_dispatch),      cmocka_unit_test(test_opaque),
        cmocka_unit_test(test_provable_stream_refuses_weaker_ids),
        cmocka_unit_test(test_stream_mismatch), cmocka_unit_test(test_opaque_stream),
        cmocka_unit_test(test_new_stream),      cmocka_unit_test(test_intake_rows),
        cmocka_unit_test(test_saved_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
