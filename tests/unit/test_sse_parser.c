/* test_sse_parser.c - unit tests for src/transport/sse_parser.{h,c}.
 *
 * Every callback is written to a transcript, one line each:
 *   E type=<t> id=<id>|NULL data=[<data>]   on_event
 *   I [<id>]                                on_id
 *   R <ms>                                  on_retry
 *   C [<text>]                              on_comment
 *   feed <rc>                               first failing feed (input stops)
 *   finish <rc>                             tm_sse_parser_finish()
 *   last [<id>]|NULL                        tm_sse_parser_last_id() at the end
 * Bytes outside printable ASCII are written \n, \r, \\ or \xHH. check_stream()
 * asserts the exact transcript for the input fed whole, one byte at a time,
 * split in two at every position, and in chunks of 2, 3, 5 and 7 bytes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/buf.h"
#include "tidemark/tidemark.h"
#include "transport/sse.h"
#include "transport/sse_parser.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG (1u << 22)

typedef struct rec {
    tm_buf log;
    tm_sse_parser *p;
    int stop_after; /* on_event returns 42 at this event (0: never) */
    int events;
} rec;

static void esc(tm_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int rc;
        if (c == '\n')
            rc = tm_buf_adds(b, "\\n");
        else if (c == '\r')
            rc = tm_buf_adds(b, "\\r");
        else if (c == '\\')
            rc = tm_buf_adds(b, "\\\\");
        else if (c < 0x20 || c >= 0x7f)
            rc = tm_buf_printf(b, "\\x%02X", c);
        else
            rc = tm_buf_add(b, &s[i], 1);
        assert_int_equal(rc, 0);
    }
}

static int on_event(void *ud, const tm_sse_event *ev)
{
    rec *r = ud;
    assert_non_null(ev->type);
    assert_non_null(ev->data);
    assert_int_equal(ev->data[ev->data_len], '\0');
    /* the event's id is the stream's last event id */
    const char *last = tm_sse_parser_last_id(r->p);
    if (ev->id == NULL)
        assert_null(last);
    else
        assert_string_equal(ev->id, last);
    assert_int_equal(tm_buf_adds(&r->log, "E type="), 0);
    esc(&r->log, ev->type, strlen(ev->type));
    if (ev->id) {
        assert_int_equal(tm_buf_adds(&r->log, " id=["), 0);
        esc(&r->log, ev->id, strlen(ev->id));
        assert_int_equal(tm_buf_adds(&r->log, "]"), 0);
    } else {
        assert_int_equal(tm_buf_adds(&r->log, " id=NULL"), 0);
    }
    assert_int_equal(tm_buf_adds(&r->log, " data=["), 0);
    esc(&r->log, ev->data, ev->data_len);
    assert_int_equal(tm_buf_adds(&r->log, "]\n"), 0);
    r->events++;
    return r->stop_after && r->events == r->stop_after ? 42 : 0;
}

static void on_id(void *ud, const char *id)
{
    rec *r = ud;
    assert_non_null(id);
    assert_non_null(tm_sse_parser_last_id(r->p));
    assert_string_equal(id, tm_sse_parser_last_id(r->p));
    assert_int_equal(tm_buf_adds(&r->log, "I ["), 0);
    esc(&r->log, id, strlen(id));
    assert_int_equal(tm_buf_adds(&r->log, "]\n"), 0);
}

static void on_retry(void *ud, unsigned long ms)
{
    rec *r = ud;
    assert_int_equal(tm_buf_printf(&r->log, "R %lu\n", ms), 0);
}

static void on_comment(void *ud, const char *text, size_t len)
{
    rec *r = ud;
    assert_int_equal(tm_buf_adds(&r->log, "C ["), 0);
    esc(&r->log, text, len);
    assert_int_equal(tm_buf_adds(&r->log, "]\n"), 0);
}

static const tm_sse_callbacks CBS = {on_event, on_retry, on_comment, on_id, NULL};

static void rec_open(rec *r, size_t max_line, size_t max_data)
{
    memset(r, 0, sizeof *r);
    tm_buf_init(&r->log, BIG);
    assert_int_equal(tm_sse_parser_new(max_line, max_data, &CBS, r, &r->p), 0);
    assert_non_null(r->p);
}

static void rec_close(rec *r)
{
    tm_sse_parser_free(r->p);
    tm_buf_free(&r->log);
}

static void log_last(rec *r)
{
    const char *last = tm_sse_parser_last_id(r->p);
    if (!last) {
        assert_int_equal(tm_buf_adds(&r->log, "last NULL\n"), 0);
        return;
    }
    assert_int_equal(tm_buf_adds(&r->log, "last ["), 0);
    esc(&r->log, last, strlen(last));
    assert_int_equal(tm_buf_adds(&r->log, "]\n"), 0);
}

/* Feed in chunks: the first of `first` bytes, the rest of `step` bytes. On
 * failure, log it, check the failure is sticky, stop. Then finish. */
static char *run(const char *in, size_t len, size_t max_line, size_t max_data, int stop_after,
                 size_t first, size_t step)
{
    rec r;
    rec_open(&r, max_line, max_data);
    r.stop_after = stop_after;
    size_t off = 0, chunk = first;
    while (off < len) {
        size_t n = chunk < len - off ? chunk : len - off;
        int rc = tm_sse_parser_feed(r.p, in + off, n);
        off += n;
        chunk = step;
        if (rc) {
            assert_int_equal(tm_buf_printf(&r.log, "feed %d\n", rc), 0);
            /* sticky: no input is read, no callback runs */
            size_t mark = r.log.len;
            assert_int_equal(tm_sse_parser_feed(r.p, "data: z\n\n", 9), rc);
            assert_int_equal(r.log.len, mark);
            break;
        }
    }
    assert_int_equal(tm_buf_printf(&r.log, "finish %d\n", tm_sse_parser_finish(r.p)), 0);
    log_last(&r);
    char *out = tm_buf_steal(&r.log, NULL);
    rec_close(&r);
    return out;
}

static void same(const char *got, const char *want, const char *how, size_t a, size_t b)
{
    if (strcmp(got, want) != 0) {
        print_error("feeding %s (%zu, %zu):\n--- got\n%s--- want\n%s---\n", how, a, b, got, want);
        fail();
    }
}

static void check_stream_lim(const char *in, size_t len, size_t max_line, size_t max_data,
                             int stop_after, const char *want)
{
    char *got = run(in, len, max_line, max_data, stop_after, len ? len : 1, len ? len : 1);
    same(got, want, "whole", len, len);
    free(got);
    got = run(in, len, max_line, max_data, stop_after, 1, 1);
    same(got, want, "byte by byte", 1, 1);
    free(got);
    for (size_t k = 1; k < len; k++) {
        got = run(in, len, max_line, max_data, stop_after, k, len);
        same(got, want, "split in two", k, len - k);
        free(got);
    }
    static const size_t steps[] = {2, 3, 5, 7};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        got = run(in, len, max_line, max_data, stop_after, steps[i], steps[i]);
        same(got, want, "in chunks", steps[i], steps[i]);
        free(got);
    }
}

/* Literal input (may contain NUL), default limits. */
#define CHECK(in, want) check_stream_lim((in), sizeof(in) - 1, 0, 0, 0, (want))
#define CHECK_LIM(in, ml, md, want) check_stream_lim((in), sizeof(in) - 1, (ml), (md), 0, (want))

#define END0 "finish 0\nlast NULL\n"

/* ---- line endings ------------------------------------------------------- */

static void test_line_endings(void **state)
{
    (void)state;
    CHECK("data: a\n\ndata: b\n\n",
          "E type=message id=NULL data=[a]\nE type=message id=NULL data=[b]\n" END0);
    CHECK("data: a\r\rdata: b\r\r",
          "E type=message id=NULL data=[a]\nE type=message id=NULL data=[b]\n" END0);
    CHECK("data: a\r\n\r\ndata: b\r\n\r\n",
          "E type=message id=NULL data=[a]\nE type=message id=NULL data=[b]\n" END0);
    /* mixed inside one event and across events */
    CHECK("data: a\rdata: b\ndata: c\r\n\r\nevent: x\r\ndata: d\n\r",
          "E type=message id=NULL data=[a\\nb\\nc]\nE type=x id=NULL data=[d]\n" END0);
    /* LF CR is two line ends (the CR is a blank line); CR LF is one */
    CHECK("data: a\n\rdata: b\n\n",
          "E type=message id=NULL data=[a]\nE type=message id=NULL data=[b]\n" END0);
    CHECK("data: a\r\ndata: b\r\n\r\n", "E type=message id=NULL data=[a\\nb]\n" END0);
    /* CR CR LF: line end, then a blank line ended by CRLF */
    CHECK("data: a\r\r\ndata: b\n\n",
          "E type=message id=NULL data=[a]\nE type=message id=NULL data=[b]\n" END0);
    /* extra blank lines dispatch nothing */
    CHECK("\n\r\n\r\ndata: a\n\n\n\n\r\r",
          "E type=message id=NULL data=[a]\n" END0);
}


/* Manual feeding, for what check_stream() cannot express. */
#define FEED(r, lit, want_rc) \
    assert_int_equal(tm_sse_parser_feed((r)->p, (lit), sizeof(lit) - 1), (want_rc))

static void log_is(rec *r, const char *want)
{
    const char *got = r->log.data ? r->log.data : "";
    if (strcmp(got, want) != 0) {
        print_error("--- got\n%s--- want\n%s---\n", got, want);
        fail();
    }
}

static void test_crlf_split_across_feeds(void **state)
{
    (void)state;
    rec r;
    rec_open(&r, 0, 0);
    /* the LF opening a chunk pairs with the CR closing the previous one */
    FEED(&r, "data: a\r", 0);
    FEED(&r, "\ndata: b\r", 0);
    log_is(&r, "");
    /* LF pairs with CR, then a CR: a blank line, dispatched at once */
    FEED(&r, "\n\r", 0);
    log_is(&r, "E type=message id=NULL data=[a\\nb]\n");
    /* this LF pairs with that CR: no second (empty) line, no effect */
    FEED(&r, "\n", 0);
    FEED(&r, "data: c\r", 0);
    /* a CR after a chunk-final CR is a blank line of its own */
    FEED(&r, "\r", 0);
    log_is(&r, "E type=message id=NULL data=[a\\nb]\nE type=message id=NULL data=[c]\n");
    /* only one LF is swallowed: CR | LF LF is line end + blank line */
    FEED(&r, "data: d\r", 0);
    FEED(&r, "\n\n", 0);
    log_is(&r, "E type=message id=NULL data=[a\\nb]\nE type=message id=NULL data=[c]\n"
               "E type=message id=NULL data=[d]\n");
    /* empty feeds change nothing, also between CR and LF */
    FEED(&r, "data: e\r", 0);
    assert_int_equal(tm_sse_parser_feed(r.p, NULL, 0), 0);
    FEED(&r, "", 0);
    FEED(&r, "\n", 0);
    FEED(&r, "\n", 0);
    log_is(&r, "E type=message id=NULL data=[a\\nb]\nE type=message id=NULL data=[c]\n"
               "E type=message id=NULL data=[d]\nE type=message id=NULL data=[e]\n");
    assert_int_equal(tm_sse_parser_finish(r.p), 0);
    rec_close(&r);
    /* the same through the helper (every split point, byte by byte) */
    CHECK("data: a\r\ndata: b\r\n\r\ndata: c\r\rdata: d\r\n\n",
          "E type=message id=NULL data=[a\\nb]\nE type=message id=NULL data=[c]\n"
          "E type=message id=NULL data=[d]\n" END0);
}

/* ---- byte order mark ---------------------------------------------------- */

static void test_bom(void **state)
{
    (void)state;
    CHECK("\xEF\xBB\xBF" "data: a\n\ndata: b\n\n",
          "E type=message id=NULL data=[a]\nE type=message id=NULL data=[b]\n" END0);
    CHECK("\xEF\xBB\xBF\r\ndata: a\n\n", "E type=message id=NULL data=[a]\n" END0);
    CHECK("\xEF\xBB\xBF:hi\n", "C [hi]\n" END0);
    /* only one BOM is stripped: a second one starts the field name */
    CHECK("\xEF\xBB\xBF\xEF\xBB\xBF" "data: a\n\ndata: b\n\n",
          "E type=message id=NULL data=[b]\n" END0);
    /* a BOM later in the stream is content */
    CHECK("data: a\n\n\xEF\xBB\xBF" "data: b\n\ndata: \xEF\xBB\xBF" "c\xEF\xBB\xBF\n\n",
          "E type=message id=NULL data=[a]\n"
          "E type=message id=NULL data=[\\xEF\\xBB\\xBFc\\xEF\\xBB\\xBF]\n" END0);
    /* a partial BOM is not stripped: its bytes are part of the line */
    CHECK("\xEF" "data: a\n\ndata: b\n\n", "E type=message id=NULL data=[b]\n" END0);
    CHECK("\xEF\xBB" "data: a\n\ndata: b\n\n", "E type=message id=NULL data=[b]\n" END0);
    CHECK("\xEF\xBB:x\n\n", END0); /* not a comment either */
    CHECK("\xEF\xBB\n\xBF" "data: a\n\n", END0);
    /* a stream of just a (partial) BOM */
    CHECK("\xEF\xBB\xBF", END0);
    CHECK("\xEF\xBB", END0);
}

static void test_bom_split(void **state)
{
    (void)state;
    rec r;
    rec_open(&r, 0, 0);
    FEED(&r, "\xEF", 0);
    FEED(&r, "\xBB", 0);
    FEED(&r, "\xBF", 0);
    FEED(&r, "data: a\n\n", 0);
    log_is(&r, "E type=message id=NULL data=[a]\n");
    assert_int_equal(tm_sse_parser_finish(r.p), 0);
    /* the held bytes of a partial BOM are replayed into the line */
    FEED(&r, "\xEF\xBB", 0);
    FEED(&r, "data: x\n\n", 0);
    log_is(&r, "E type=message id=NULL data=[a]\n");
    assert_int_equal(tm_sse_parser_finish(r.p), 0);
    FEED(&r, "\xEF\xBB", 0);
    FEED(&r, "\n", 0); /* line "\xEF\xBB": unknown field, not a blank line */
    FEED(&r, "data: y\n\n", 0);
    log_is(&r, "E type=message id=NULL data=[a]\nE type=message id=NULL data=[y]\n");
    rec_close(&r);
}

/* ---- comments ----------------------------------------------------------- */

static void test_comments(void **state)
{
    (void)state;
    CHECK(": ping\n:\n:  two\n:no-space\n: \n",
          "C [ping]\nC []\nC [ two]\nC [no-space]\nC []\n" END0);
    /* comments neither end nor change an event; a colon later is text */
    CHECK("data: a\n: mid: x\ndata: b\n\n:keep-alive\n\n",
          "C [mid: x]\nE type=message id=NULL data=[a\\nb]\nC [keep-alive]\n" END0);
    /* comments with CR line ends and NUL bytes */
    CHECK(": a\0b\r: c\r\n", "C [a\\x00b]\nC [c]\n" END0);
    /* without on_comment, comments are just ignored */
    tm_sse_callbacks cb = CBS;
    cb.on_comment = NULL;
    rec r;
    memset(&r, 0, sizeof r);
    tm_buf_init(&r.log, BIG);
    assert_int_equal(tm_sse_parser_new(0, 0, &cb, &r, &r.p), 0);
    FEED(&r, ": ping\ndata: a\n\n", 0);
    log_is(&r, "E type=message id=NULL data=[a]\n");
    rec_close(&r);
}

/* ---- field / value split ------------------------------------------------ */

static void test_field_value_split(void **state)
{
    (void)state;
    CHECK("data:a\n\n", "E type=message id=NULL data=[a]\n" END0);
    /* only one space is removed, and only a space */
    CHECK("data:  a \n\n", "E type=message id=NULL data=[ a ]\n" END0);
    CHECK("data:\ta\n\n", "E type=message id=NULL data=[\\x09a]\n" END0);
    /* split at the first colon */
    CHECK("data: a:b: c\n\n", "E type=message id=NULL data=[a:b: c]\n" END0);
    CHECK("event:x:y\ndata::\n\n", "E type=x:y id=NULL data=[:]\n" END0);
    /* a line without colon is the field with an empty value */
    CHECK("data\n\n", "E type=message id=NULL data=[]\n" END0);
    CHECK("data\ndata\n\n", "E type=message id=NULL data=[\\n]\n" END0);
    CHECK("event\ndata: a\n\n", "E type=message id=NULL data=[a]\n" END0);
    /* names are exact and case-sensitive */
    CHECK("data : x\n\n Data: x\n\nDATA: x\n\n data: x\n\ndat: x\n\ndatas: x\n\n", END0);
    /* NUL bytes in data are kept */
    CHECK("data: a\0b\n\n", "E type=message id=NULL data=[a\\x00b]\n" END0);
}

/* ---- data ------------------------------------------------------------------ */

static void test_multiline_data(void **state)
{
    (void)state;
    CHECK("data: first\ndata:\ndata: third\n\n",
          "E type=message id=NULL data=[first\\n\\nthird]\n" END0);
    /* only one trailing LF is removed */
    CHECK("data: a\ndata:\n\n", "E type=message id=NULL data=[a\\n]\n" END0);
    CHECK("data:\ndata:\n\n", "E type=message id=NULL data=[\\n]\n" END0);
    /* data split by other fields and comments is still one event */
    CHECK("data: 1\nevent: t\ndata: 2\nid: 9\n:c\ndata: 3\n\n",
          "C [c]\nI [9]\nE type=t id=[9] data=[1\\n2\\n3]\nfinish 0\nlast [9]\n");
}

static void test_empty_data_dispatched(void **state)
{
    (void)state;
    /* "data:" makes the buffer "\n" (not empty): dispatched with empty data */
    CHECK("data:\n\n", "E type=message id=NULL data=[]\n" END0);
    CHECK("data: \n\n", "E type=message id=NULL data=[]\n" END0);
    /* the MCP priming event: an id and an empty data line */
    CHECK("id: 0-1\ndata:\n\n",
          "I [0-1]\nE type=message id=[0-1] data=[]\nfinish 0\nlast [0-1]\n");
    CHECK("id: s1-0\ndata\n\ndata: {}\n\n",
          "I [s1-0]\nE type=message id=[s1-0] data=[]\nE type=message id=[s1-0] data=[{}]\n"
          "finish 0\nlast [s1-0]\n");
}

/* ---- id ------------------------------------------------------------------ */

static void test_id_without_data(void **state)
{
    (void)state;
    /* no dispatch, but the last event id is committed by the blank line */
    CHECK("id: 5\n\n", "I [5]\nfinish 0\nlast [5]\n");
    CHECK("id: 5\n\ndata: a\n\n",
          "I [5]\nE type=message id=[5] data=[a]\nfinish 0\nlast [5]\n");
    /* the event type is reset by a blank line that dispatches nothing */
    CHECK("id: 6\nevent: x\n\ndata: b\n\n",
          "I [6]\nE type=message id=[6] data=[b]\nfinish 0\nlast [6]\n");
    /* an id not followed by a blank line before the end is never committed */
    CHECK("id: 1\ndata: a\n\nid: 2\ndata: b\n",
          "I [1]\nE type=message id=[1] data=[a]\nfinish 0\nlast [1]\n");
    CHECK("id: 7\n", END0);
    CHECK("id: 7", END0);
}

static void test_id_rules(void **state)
{
    (void)state;
    /* the id persists across events; on_id fires only on a change */
    CHECK("id: 1\ndata: a\n\ndata: b\n\nid: 1\ndata: c\n\nid: 2\ndata: d\n\n",
          "I [1]\nE type=message id=[1] data=[a]\nE type=message id=[1] data=[b]\n"
          "E type=message id=[1] data=[c]\nI [2]\nE type=message id=[2] data=[d]\n"
          "finish 0\nlast [2]\n");
    /* the last id: of a block wins; the id is committed before on_event */
    CHECK("id: 1\ndata: a\nid: 2\n\n",
          "I [2]\nE type=message id=[2] data=[a]\nfinish 0\nlast [2]\n");
    /* an empty id: (with or without colon) sets the id to "" */
    CHECK("id: 1\ndata: a\n\nid\ndata: b\n\nid:\ndata: c\n\nid: 3\n\nid: \n\n",
          "I [1]\nE type=message id=[1] data=[a]\nI []\nE type=message id=[] data=[b]\n"
          "E type=message id=[] data=[c]\nI [3]\nI []\nfinish 0\nlast []\n");
    /* the value is taken as is (after one space) */
    CHECK("id:  x y \ndata: a\n\n",
          "I [ x y ]\nE type=message id=[ x y ] data=[a]\nfinish 0\nlast [ x y ]\n");
}

static void test_id_with_nul_ignored(void **state)
{
    (void)state;
    CHECK("id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\n",
          "I [1]\nE type=message id=[1] data=[a]\nE type=message id=[1] data=[b]\n"
          "finish 0\nlast [1]\n");
    /* ignoring it leaves an earlier id: of the same block in place */
    CHECK("id: 3\nid: \0\ndata: c\n\n",
          "I [3]\nE type=message id=[3] data=[c]\nfinish 0\nlast [3]\n");
    CHECK("id: \0\n\nid\0\n\ndata: a\n\n", "E type=message id=NULL data=[a]\n" END0);
    CHECK("id: \0" "5\n\n", END0);
}

/* ---- retry --------------------------------------------------------------- */

static void test_retry(void **state)
{
    (void)state;
    char want[512];
    snprintf(want, sizeof want, "R 3000\nR 7\nR 0\nR %lu\n" END0, ULONG_MAX);
    /* digits only: reported; anything else (empty, sign, space, dot,
     * letters) is ignored; nothing is dispatched */
    CHECK("retry: 3000\nretry: 007\nretry: 10x\nretry:\nretry\nretry: -1\nretry: +1\n"
          "retry:  5\nretry: 5 \nretry: 1.5\nretry: 0\nretry: 0x10\n"
          "retry: 99999999999999999999999999999999\nretry: 5\0\n\n",
          want);
    /* retry is acted on when read, not at dispatch, and not in a later event */
    CHECK("data: a\nretry: 5\n\ndata: b\n\n",
          "R 5\nE type=message id=NULL data=[a]\nE type=message id=NULL data=[b]\n" END0);
    CHECK("retry: 5\n", "R 5\n" END0);
    /* case-sensitive */
    CHECK("Retry: 5\nRETRY: 5\n\n", END0);
}

/* ---- other fields, event type ------------------------------------------- */

static void test_unknown_fields(void **state)
{
    (void)state;
    CHECK("foo: bar\ndata: a\nevent2: x\nretry2: 5\nid2: 3\nEvent: y\nID: 4\n\nfoo\n\n",
          "E type=message id=NULL data=[a]\n" END0);
    CHECK("foo: bar\n\n", END0);
}

static void test_event_type(void **state)
{
    (void)state;
    CHECK("event: add\ndata: 1\n\ndata: 2\n\nevent: x\n\ndata: 3\n\nevent:\ndata: 4\n\n"
          "event: a\nevent: b\ndata: 5\n\ndata: 6\nevent: late\n\n",
          "E type=add id=NULL data=[1]\nE type=message id=NULL data=[2]\n"
          "E type=message id=NULL data=[3]\nE type=message id=NULL data=[4]\n"
          "E type=b id=NULL data=[5]\nE type=late id=NULL data=[6]\n" END0);
}

/* ---- end of stream ------------------------------------------------------- */

static void test_incomplete_event_discarded(void **state)
{
    (void)state;
    CHECK("data: a\n\ndata: b\n", "E type=message id=NULL data=[a]\n" END0);
    CHECK("data: a\n\ndata: b", "E type=message id=NULL data=[a]\n" END0);
    CHECK("data: a\n\nevent: x\ndata: b\r", "E type=message id=NULL data=[a]\n" END0);
    CHECK("data: a\n\nretr", "E type=message id=NULL data=[a]\n" END0);

    /* finish ends the stream; the parser then starts a new one */
    rec r;
    rec_open(&r, 0, 0);
    FEED(&r, "id: 1\n\nevent: x\nid: 2\ndata: b\ndata: c", 0);
    log_is(&r, "I [1]\n");
    assert_int_equal(tm_sse_parser_finish(r.p), 0);
    assert_string_equal(tm_sse_parser_last_id(r.p), "1");
    /* nothing of the discarded event leaks into the next stream; the
     * committed id stays; a BOM is stripped again */
    FEED(&r, "\xEF\xBB\xBF" "data: d\n\n", 0);
    log_is(&r, "I [1]\nE type=message id=[1] data=[d]\n");
    /* a CR ending the old stream does not pair with an LF of the new one */
    FEED(&r, "data: e\r", 0);
    assert_int_equal(tm_sse_parser_finish(r.p), 0);
    FEED(&r, "\ndata: f\n\n", 0);
    log_is(&r, "I [1]\nE type=message id=[1] data=[d]\nE type=message id=[1] data=[f]\n");
    rec_close(&r);
}

/* ---- limits ---------------------------------------------------------------- */

static void test_line_limit(void **state)
{
    (void)state;
    /* 8-byte lines fit (terminators not counted), 9-byte lines do not */
    CHECK_LIM("data: 12\n\ndata: 34\r\n\r\n: 345678\n",
              8, 0, "E type=message id=NULL data=[12]\nE type=message id=NULL data=[34]\n"
              "C [345678]\n" END0);
    CHECK_LIM("data: 12\n\ndata: 123\n\ndata: z\n\n", 8, 0,
              "E type=message id=NULL data=[12]\nfeed -10\nfinish -10\nlast NULL\n");
    /* also when the line is never terminated */
    CHECK_LIM("data: 12\n\ndata: 123", 8, 0,
              "E type=message id=NULL data=[12]\nfeed -10\nfinish -10\nlast NULL\n");
    CHECK_LIM(": 3456789\n", 8, 0, "feed -10\nfinish -10\nlast NULL\n");
    CHECK_LIM("id: 12345\n", 8, 0, "feed -10\nfinish -10\nlast NULL\n");
    /* the BOM does not count; held bytes of a partial BOM do */
    CHECK_LIM("\xEF\xBB\xBF" "data: 12\n\n", 8, 0, "E type=message id=NULL data=[12]\n" END0);
    CHECK_LIM("\xEF\xBB" "abcdef\n", 8, 0, END0);
    CHECK_LIM("\xEF\xBB" "abcdefg\n", 8, 0, "feed -10\nfinish -10\nlast NULL\n");
    /* replaying held partial-BOM bytes can itself overflow (and is sticky) */
    CHECK_LIM("\xEF\xBB" "x\n\n", 1, 0, "feed -10\nfinish -10\nlast NULL\n");
    CHECK_LIM("\xEF" "\n\n", 1, 0, END0);
    rec r;
    rec_open(&r, 1, 0);
    FEED(&r, ":\n", 0);
    tm_sse_parser_reset(r.p);
    FEED(&r, "\xEF\xBB", 0);
    FEED(&r, "x", TIDEMARK_ERANGE);
    FEED(&r, ":\n", TIDEMARK_ERANGE); /* would fit, but input is refused */
    log_is(&r, "C []\n");
    rec_close(&r);
    /* the committed id survives the failure */
    CHECK_LIM("id: 1\n\ndata: 123\n", 8, 0,
              "I [1]\nfeed -10\nfinish -10\nlast [1]\n");
}

static void test_data_limit(void **state)
{
    (void)state;
    /* at most 4 bytes of (dispatched) data per event */
    CHECK_LIM("data: abcd\n\ndata: a\ndata: bc\n\ndata: wxyz\n\n", 64, 4,
              "E type=message id=NULL data=[abcd]\nE type=message id=NULL data=[a\\nbc]\n"
              "E type=message id=NULL data=[wxyz]\n" END0);
    CHECK_LIM("data: a\n\ndata: abcde\n\n", 64, 4,
              "E type=message id=NULL data=[a]\nfeed -10\nfinish -10\nlast NULL\n");
    CHECK_LIM("data: ab\ndata: cd\n\n", 64, 4, "feed -10\nfinish -10\nlast NULL\n");
    CHECK_LIM("data\ndata\ndata\ndata\ndata\n\n", 64, 4,
              "E type=message id=NULL data=[\\n\\n\\n\\n]\n" END0);
    CHECK_LIM("data\ndata\ndata\ndata\ndata\ndata\n\n", 64, 4,
              "feed -10\nfinish -10\nlast NULL\n");
}

static void test_refuses_until_reset(void **state)
{
    (void)state;
    rec r;
    rec_open(&r, 16, 8);
    FEED(&r, "id: a1\ndata: 1\n\ndata: 123456789\n\n", TIDEMARK_ERANGE);
    log_is(&r, "I [a1]\nE type=message id=[a1] data=[1]\n");
    /* input is refused, no callback runs */
    FEED(&r, "data: 2\n\n", TIDEMARK_ERANGE);
    FEED(&r, "\n", TIDEMARK_ERANGE);
    log_is(&r, "I [a1]\nE type=message id=[a1] data=[1]\n");
    /* reset: a new stream, the committed id kept, the BOM stripped again */
    tm_sse_parser_reset(r.p);
    assert_string_equal(tm_sse_parser_last_id(r.p), "a1");
    FEED(&r, "\xEF\xBB\xBF" "data: 3\n\n", 0);
    log_is(&r, "I [a1]\nE type=message id=[a1] data=[1]\nE type=message id=[a1] data=[3]\n");
    /* a line too long */
    FEED(&r, "data: ", 0);
    FEED(&r, "0123456789", 0);
    FEED(&r, "x", TIDEMARK_ERANGE);
    FEED(&r, "\n\n", TIDEMARK_ERANGE);
    /* finish reports the failure and readies the parser too */
    assert_int_equal(tm_sse_parser_finish(r.p), TIDEMARK_ERANGE);
    assert_int_equal(tm_sse_parser_finish(r.p), 0);
    FEED(&r, "data: 4\n\n", 0);
    log_is(&r, "I [a1]\nE type=message id=[a1] data=[1]\nE type=message id=[a1] data=[3]\n"
               "E type=message id=[a1] data=[4]\n");
    rec_close(&r);
}

static void test_default_limits(void **state)
{
    (void)state;
    size_t n = TM_SSE_DEFAULT_MAX_LINE;
    char *in = malloc(n + 3);
    assert_non_null(in);
    memcpy(in, "data: ", 6);
    memset(in + 6, 'x', n - 6);
    in[n] = '\n';
    in[n + 1] = '\n';
    rec r;
    rec_open(&r, 0, 0);
    assert_int_equal(tm_sse_parser_feed(r.p, in, n + 2), 0);
    assert_int_equal(r.events, 1);
    /* one byte more: too long, whole or in pieces */
    in[n] = 'x';
    in[n + 1] = '\n';
    in[n + 2] = '\n';
    assert_int_equal(tm_sse_parser_feed(r.p, in, n + 3), TIDEMARK_ERANGE);
    tm_sse_parser_reset(r.p);
    assert_int_equal(tm_sse_parser_feed(r.p, in, 4096), 0);
    assert_int_equal(tm_sse_parser_feed(r.p, in + 4096, n + 3 - 4096), TIDEMARK_ERANGE);
    assert_int_equal(r.events, 1);
    rec_close(&r);
    free(in);
}

/* ---- callbacks ----------------------------------------------------------- */

static void test_callback_stop(void **state)
{
    (void)state;
    static const char in[] = "data: 1\n\nretry: 9\ndata: 2\n\n: c\ndata: 3\n\n";
    check_stream_lim(in, sizeof in - 1, 0, 0, 2,
                     "E type=message id=NULL data=[1]\nR 9\nE type=message id=NULL data=[2]\n"
                     "feed 42\nfinish 42\nlast NULL\n");
    /* the rest of the chunk is not read; after reset parsing goes on */
    rec r;
    rec_open(&r, 0, 0);
    r.stop_after = 1;
    FEED(&r, "id: 1\ndata: a\n\nid: 2\ndata: b\n\n", 42);
    assert_string_equal(tm_sse_parser_last_id(r.p), "1");
    FEED(&r, "data: c\n\n", 42);
    tm_sse_parser_reset(r.p);
    FEED(&r, "data: d\n\n", 0);
    log_is(&r, "I [1]\nE type=message id=[1] data=[a]\nE type=message id=[1] data=[d]\n");
    rec_close(&r);
}

static void test_no_callbacks(void **state)
{
    (void)state;
    tm_sse_parser *p = NULL;
    assert_int_equal(tm_sse_parser_new(0, 0, NULL, NULL, &p), 0);
    assert_null(tm_sse_parser_last_id(p));
    const char in[] = "\xEF\xBB\xBF: c\nretry: 5\nid: 9\nevent: e\ndata: x\n\n";
    assert_int_equal(tm_sse_parser_feed(p, in, sizeof in - 1), 0);
    assert_string_equal(tm_sse_parser_last_id(p), "9");
    assert_int_equal(tm_sse_parser_finish(p), 0);
    tm_sse_parser_free(p);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    assert_int_equal(tm_sse_parser_new(0, 0, NULL, NULL, NULL), TIDEMARK_EINVAL);
    tm_sse_parser *p = NULL;
    assert_int_equal(tm_sse_parser_new(0, 0, NULL, NULL, &p), 0);
    assert_int_equal(tm_sse_parser_feed(p, NULL, 1), TIDEMARK_EINVAL);
    assert_int_equal(tm_sse_parser_feed(NULL, "x", 1), TIDEMARK_EINVAL);
    assert_int_equal(tm_sse_parser_feed(p, NULL, 0), 0);
    /* a bad argument is not a stream failure */
    assert_int_equal(tm_sse_parser_feed(p, "data: a\n\n", 9), 0);
    assert_int_equal(tm_sse_parser_finish(p), 0);
    assert_int_equal(tm_sse_parser_finish(NULL), TIDEMARK_EINVAL);
    assert_null(tm_sse_parser_last_id(NULL));
    tm_sse_parser_reset(NULL);
    tm_sse_parser_free(p);
    tm_sse_parser_free(NULL);
}

/* ---- round trip with the server-side framing ------------------------------ */

static void test_round_trip_with_framer(void **state)
{
    (void)state;
    tm_buf w;
    tm_buf_init(&w, BIG);
    assert_int_equal(tm_sse_frame_retry(&w, 1500), 0);
    assert_int_equal(tm_sse_frame(&w, NULL, "s-0", "", 0), 0);
    assert_int_equal(tm_sse_frame_comment(&w, "keep-alive"), 0);
    assert_int_equal(tm_sse_frame(&w, NULL, "s-1", "{\"jsonrpc\":\"2.0\"}", 17), 0);
    assert_int_equal(tm_sse_frame(&w, "gap", NULL, "l1\nl2\r\nl3\rl4\n", 13), 0);
    assert_int_equal(tm_sse_frame(&w, NULL, "s-2", "a:b\0c", 5), 0);
    check_stream_lim(w.data, w.len, 0, 0, 0,
                     "R 1500\nI [s-0]\nE type=message id=[s-0] data=[]\nC [keep-alive]\n"
                     "I [s-1]\nE type=message id=[s-1] data=[{\"jsonrpc\":\"2.0\"}]\n"
                     "E type=gap id=[s-1] data=[l1\\nl2\\nl3\\nl4\\n]\n"
                     "I [s-2]\nE type=message id=[s-2] data=[a:b\\x00c]\n"
                     "finish 0\nlast [s-2]\n");
    tm_buf_free(&w);
}

/* own_id and on_id_only: what tidemark-check needs to see of each block. */
typedef struct blocks {
    tm_buf log;
} blocks;

static int own_event(void *ud, const tm_sse_event *ev)
{
    blocks *b = ud;
    return tm_buf_printf(&b->log, "E own=%d id=%s data=%s\n", ev->own_id, ev->id ? ev->id : "NULL",
                         ev->data);
}

static void own_id_only(void *ud, const char *id)
{
    blocks *b = ud;
    assert_int_equal(tm_buf_printf(&b->log, "O id=%s\n", id), 0);
}

static void test_own_id_and_id_only(void **state)
{
    (void)state;
    static const char in[] = "id: 1\ndata: a\n\n"  /* own id */
                             "data: b\n\n"           /* inherits 1 */
                             "id: 2\n\n"             /* id only: committed, not dispatched */
                             "id: 2\ndata: c\n\n"   /* own id, same value */
                             "id\n\n"                /* empty id only */
                             "event: x\n\n";         /* nothing */
    static const char want[] = "E own=1 id=1 data=a\n"
                               "E own=0 id=1 data=b\n"
                               "O id=2\n"
                               "E own=1 id=2 data=c\n"
                               "O id=\n";
    const tm_sse_callbacks cb = {.on_event = own_event, .on_id_only = own_id_only};
    for (size_t chunk = 1; chunk <= sizeof in; chunk++) {
        blocks b;
        tm_buf_init(&b.log, 4096);
        tm_sse_parser *p;
        assert_int_equal(tm_sse_parser_new(0, 0, &cb, &b, &p), 0);
        for (size_t off = 0; off < sizeof in - 1; off += chunk)
            assert_int_equal(tm_sse_parser_feed(p, in + off, off + chunk > sizeof in - 1
                                                                ? sizeof in - 1 - off : chunk), 0);
        assert_int_equal(tm_sse_parser_finish(p), 0);
        assert_string_equal(b.log.data, want);
        tm_sse_parser_free(p);
        tm_buf_free(&b.log);
    }
}

/* bad_id: a block whose id: was ignored for a NUL byte says so, so a client
 * does not take its event for the continuation of the inherited id. */
static int bad_event(void *ud, const tm_sse_event *ev)
{
    blocks *b = ud;
    return tm_buf_printf(&b->log, "E own=%d bad=%d id=%s data=%s\n", ev->own_id, ev->bad_id,
                         ev->id ? ev->id : "NULL", ev->data);
}

static void test_bad_id_flagged(void **state)
{
    (void)state;
    static const char in[] = "id: 1\ndata: a\n\n"       /* good */
                             "id: 2\0x\ndata: b\n\n"   /* NUL: ignored, flagged, inherits 1 */
                             "data: c\n\n"              /* no id: not flagged */
                             "id: 3\0\n\n"             /* no data: nothing dispatched */
                             "data: d\n\n";             /* the flag does not leak */
    static const char want[] = "E own=1 bad=0 id=1 data=a\n"
                               "E own=0 bad=1 id=1 data=b\n"
                               "E own=0 bad=0 id=1 data=c\n"
                               "E own=0 bad=0 id=1 data=d\n";
    const tm_sse_callbacks cb = {.on_event = bad_event};
    for (size_t chunk = 1; chunk <= sizeof in; chunk++) {
        blocks b;
        tm_buf_init(&b.log, 4096);
        tm_sse_parser *p;
        assert_int_equal(tm_sse_parser_new(0, 0, &cb, &b, &p), 0);
        for (size_t off = 0; off < sizeof in - 1; off += chunk)
            assert_int_equal(tm_sse_parser_feed(p, in + off, off + chunk > sizeof in - 1
                                                                ? sizeof in - 1 - off : chunk), 0);
        assert_int_equal(tm_sse_parser_finish(p), 0);
        assert_string_equal(b.log.data, want);
        tm_sse_parser_free(p);
        tm_buf_free(&b.log);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_line_endings),
        cmocka_unit_test(test_crlf_split_across_feeds),
        cmocka_unit_test(test_bom),
        cmocka_unit_test(test_bom_split),
        cmocka_unit_test(test_comments),
        cmocka_unit_test(test_field_value_split),
        cmocka_unit_test(test_multiline_data),
        cmocka_unit_test(test_empty_data_dispatched),
        cmocka_unit_test(test_id_without_data),
        cmocka_unit_test(test_id_rules),
        cmocka_unit_test(test_id_with_nul_ignored),
        cmocka_unit_test(test_retry),
        cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_event_type),
        cmocka_unit_test(test_incomplete_event_discarded),
        cmocka_unit_test(test_line_limit),
        cmocka_unit_test(test_data_limit),
        cmocka_unit_test(test_refuses_until_reset),
        cmocka_unit_test(test_default_limits),
        cmocka_unit_test(test_callback_stop),
        cmocka_unit_test(test_no_callbacks),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_round_trip_with_framer),
        cmocka_unit_test(test_own_id_and_id_only),
        cmocka_unit_test(test_bad_id_flagged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
