/*
 * test_fuzz_findings.c - regression tests for what the fuzz targets found
 * (tests/fuzz/README.md, "Findings"). Each test names the target and the
 * input kept in its corpus.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/buf.h"
#include "client/cstate.h"
#include "server/http_policy.h"
#include "tidemark/tidemark.h"
#include "transport/sse.h"
#include "transport/sse_parser.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- fuzz_sse: corpus/sse/frame_crlf_name ------------------------------------------ */

typedef struct seen {
    int events;
    char id[64];
    char type[64];
} seen;

static int on_event(void *ud, const tm_sse_event *ev)
{
    seen *s = ud;
    s->events++;
    snprintf(s->id, sizeof s->id, "%s", ev->id ? ev->id : "(none)");
    snprintf(s->type, sizeof s->type, "%s", ev->type);
    return 0;
}

/* An event name or id with CR or LF used to be framed as is: the parser
 * then read a forged "id:" line (or an early end of the event). */
static void test_frame_refuses_line_breaks_in_name_and_id(void **state)
{
    (void)state;
    const char *bad_names[] = {"a\nid: 9", "x\r", "\n", "gap\r\ndata: forged"};
    const char *bad_ids[] = {"1\nevent: gap", "1\r", "\r\n"};
    tm_buf b;
    tm_buf_init(&b, 1 << 16);
    assert_int_equal(tm_buf_adds(&b, "keep"), 0);
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        assert_int_equal(tm_sse_frame(&b, bad_names[i], NULL, "x", 1), TIDEMARK_EINVAL);
        assert_int_equal(b.len, 4); /* nothing appended */
        assert_string_equal(b.data, "keep");
    }
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        assert_int_equal(tm_sse_frame(&b, "message", bad_ids[i], "x", 1), TIDEMARK_EINVAL);
        assert_int_equal(b.len, 4);
    }
    tm_buf_free(&b);

    /* What is framed parses back to the same name and id. */
    tm_buf_init(&b, 1 << 16);
    assert_int_equal(tm_sse_frame(&b, " spaced name", " id 1", "line\r\nnext", 10), 0);
    seen s = {0};
    tm_sse_callbacks cb = {.on_event = on_event};
    tm_sse_parser *p;
    assert_int_equal(tm_sse_parser_new(0, 0, &cb, &s, &p), 0);
    assert_int_equal(tm_sse_parser_feed(p, b.data, b.len), 0);
    assert_int_equal(tm_sse_parser_finish(p), 0);
    assert_int_equal(s.events, 1);
    assert_string_equal(s.type, " spaced name");
    assert_string_equal(s.id, " id 1");
    tm_sse_parser_free(p);
    tm_buf_free(&b);
}

/* ---- fuzz_http_policy: corpus/http_policy/ctype_garbage, accept_tab ------------------- */

/* "application/json x" used to pass as application/json: after the type,
 * RFC 9110 allows only whitespace and then ';' or the end. */
static void test_media_type_rejects_trailing_garbage(void **state)
{
    (void)state;
    assert_false(tm_policy_media_type_is("application/json x", "application/json"));
    assert_false(tm_policy_media_type_is("application/json\tjunk;charset=utf-8", "application/json"));
    assert_false(tm_policy_media_type_is("application/json , text/plain", "application/json"));
    assert_true(tm_policy_media_type_is("application/json", "application/json"));
    assert_true(tm_policy_media_type_is(" application/json ; charset=utf-8", "application/json"));
    assert_true(tm_policy_media_type_is("application/json\t", "application/json"));
    assert_true(tm_policy_media_type_is("APPLICATION/JSON;charset=UTF-8", "application/json"));
}

/* A tab around a list element (RFC 9110 OWS) used to hide it. */
static void test_accept_tab_is_whitespace(void **state)
{
    (void)state;
    assert_true(tm_policy_accepts("application/json,\ttext/event-stream", "text/event-stream"));
    assert_true(tm_policy_accepts("\tapplication/json\t;q=1", "application/json"));
    assert_true(tm_policy_accepts("text/html , */*\t", "application/json"));
    assert_false(tm_policy_accepts("application/json\tx", "application/json"));
}

/* ---- fuzz_client_state: corpus/client_state/cursor_256 ------------------------------- */

static void test_cursor_is_kept_whole_or_refused(void **state)
{
    (void)state;
    char path[] = "/tmp/tm-findings-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    tm_cstate *st;
    assert_int_equal(tm_cstate_open(path, NULL, &st), 0);
    char id[300];
    memset(id, 'x', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    assert_int_equal(tm_cstate_begin(st), 0);
    assert_int_equal(tm_cstate_cursor_set(st, "r1", id, 7), TIDEMARK_ERANGE);
    id[255] = '\0'; /* the longest that fits */
    assert_int_equal(tm_cstate_cursor_set(st, "r2", id, 8), 0);
    tm_cursor c;
    assert_int_equal(tm_cstate_cursor_get(st, "r2", &c), 0);
    assert_true(c.known && c.seq == 8 && strcmp(c.event_id, id) == 0);
    assert_int_equal(tm_cstate_cursor_get(st, "r1", &c), 0);
    assert_false(c.known);
    tm_cstate_rollback(st);
    tm_cstate_close(st);
    unlink(path);
}

/* ---- found while writing the harnesses: tm_buf_init(b, SIZE_MAX) ---------------------- */

static void test_buf_without_bound_does_not_wrap(void **state)
{
    (void)state;
    tm_buf b;
    tm_buf_init(&b, SIZE_MAX);
    assert_int_equal(tm_buf_add(&b, "abc", 3), 0);
    assert_int_equal(b.len, 3);
    assert_string_equal(b.data, "abc");
    assert_true(b.cap >= 4);
    tm_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_refuses_line_breaks_in_name_and_id),
        cmocka_unit_test(test_media_type_rejects_trailing_garbage),
        cmocka_unit_test(test_accept_tab_is_whitespace),
        cmocka_unit_test(test_cursor_is_kept_whole_or_refused),
        cmocka_unit_test(test_buf_without_bound_does_not_wrap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
