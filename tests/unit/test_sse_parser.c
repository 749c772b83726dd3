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

static const tm_sse_callbacks CBS = {on_event, on_retry, on_comment, on_id};

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

