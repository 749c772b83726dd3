/* test_sse.c - unit tests for src/transport/sse.{h,c}: exact bytes on the wire. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/buf.h"
#include "tidemark/tidemark.h"
#include "transport/sse.h"

#include <stdlib.h>
#include <string.h>

#define BIG (1u << 20)

static void expect_bytes(const tm_buf *b, const char *want, size_t wlen)
{
    if (b->len != wlen || memcmp(b->data, want, wlen) != 0) {
        print_error("got %zu bytes: [%.*s]\nwant %zu bytes: [%.*s]\n", b->len, (int)b->len,
                    b->data ? b->data : "", wlen, (int)wlen, want);
        fail();
    }
    /* the buffer stays NUL-terminated */
    assert_int_equal(b->data[b->len], '\0');
}

#define EXPECT(b, lit) expect_bytes((b), (lit), sizeof(lit) - 1)

/* Frame data (with explicit length) and compare the exact output. */
static void frame_eq(const char *event, const char *id, const char *data, size_t len,
                     const char *want, size_t wlen)
{
    tm_buf b;
    tm_buf_init(&b, BIG);
    assert_int_equal(tm_sse_frame(&b, event, id, data, len), 0);
    expect_bytes(&b, want, wlen);
    tm_buf_free(&b);
}

#define FRAME_EQ(ev, id, data, want) \
    frame_eq((ev), (id), (data), sizeof(data) - 1, (want), sizeof(want) - 1)

static void test_id_and_data(void **state)
{
    (void)state;
    FRAME_EQ(NULL, "9f86d081884c7d65-r3-17", "{\"jsonrpc\":\"2.0\"}",
             "id: 9f86d081884c7d65-r3-17\ndata: {\"jsonrpc\":\"2.0\"}\n\n");
    /* data only */
    FRAME_EQ(NULL, NULL, "hello", "data: hello\n\n");
    /* len bounds the data: bytes past it are not framed */
    frame_eq(NULL, "1", "abcdef", 3, "id: 1\ndata: abc\n\n", sizeof("id: 1\ndata: abc\n\n") - 1);
}

static void test_event_name(void **state)
{
    (void)state;
    FRAME_EQ("gap", NULL, "{\"missing\":[3,5]}", "event: gap\ndata: {\"missing\":[3,5]}\n\n");
    FRAME_EQ("message", "e-g-2", "x", "event: message\nid: e-g-2\ndata: x\n\n");
}

static void test_priming_event_empty_data(void **state)
{
    (void)state;
    FRAME_EQ(NULL, "X", "", "id: X\ndata: \n\n");
    FRAME_EQ(NULL, NULL, "", "data: \n\n");
    /* data pointer may be anything when len is 0 */
    frame_eq(NULL, "X", "ignored", 0, "id: X\ndata: \n\n", sizeof("id: X\ndata: \n\n") - 1);
}

static void test_data_line_breaks(void **state)
{
    (void)state;
    FRAME_EQ(NULL, "1", "a\nb", "id: 1\ndata: a\ndata: b\n\n");
    FRAME_EQ(NULL, "1", "a\rb", "id: 1\ndata: a\ndata: b\n\n");
    FRAME_EQ(NULL, "1", "a\r\nb", "id: 1\ndata: a\ndata: b\n\n");
    /* CRLF is one break, LFCR is two */
    FRAME_EQ(NULL, NULL, "a\n\rb", "data: a\ndata: \ndata: b\n\n");
    /* consecutive breaks keep the empty lines */
    FRAME_EQ(NULL, NULL, "a\n\nb", "data: a\ndata: \ndata: b\n\n");
    FRAME_EQ(NULL, NULL, "a\r\rb", "data: a\ndata: \ndata: b\n\n");
    FRAME_EQ(NULL, NULL, "a\r\n\r\nb", "data: a\ndata: \ndata: b\n\n");
    /* leading and trailing breaks: the trailing one yields a final empty line
     * so a client rebuilds the same data (it drops one final LF) */
    FRAME_EQ(NULL, NULL, "\na", "data: \ndata: a\n\n");
    FRAME_EQ(NULL, NULL, "a\n", "data: a\ndata: \n\n");
    FRAME_EQ(NULL, NULL, "a\r", "data: a\ndata: \n\n");
    FRAME_EQ(NULL, NULL, "a\r\n", "data: a\ndata: \n\n");
    FRAME_EQ(NULL, NULL, "\n", "data: \ndata: \n\n");
    FRAME_EQ(NULL, NULL, "\r\n", "data: \ndata: \n\n");
    FRAME_EQ(NULL, NULL, "\r", "data: \ndata: \n\n");
    /* mixed, with the event name and id */
    FRAME_EQ("message", "7", "one\r\ntwo\rthree\nfour",
             "event: message\nid: 7\ndata: one\ndata: two\ndata: three\ndata: four\n\n");
    /* a CR at the very end of len is not joined with a following LF past len */
    frame_eq(NULL, NULL, "a\r\n", 2, "data: a\ndata: \n\n", sizeof("data: a\ndata: \n\n") - 1);
}

static void test_data_no_line_ends_early(void **state)
{
    (void)state;
    /* whatever the data, the frame has exactly one blank line, at the end */
    const char *datas[] = {"x\n\ny", "\r\n\r\n", "\n\n\n", "a\r\r\n\nb", "line\n\nid: 9\n\n"};
    for (size_t i = 0; i < sizeof datas / sizeof datas[0]; i++) {
        tm_buf b;
        tm_buf_init(&b, BIG);
        assert_int_equal(tm_sse_frame(&b, NULL, "1", datas[i], strlen(datas[i])), 0);
        assert_true(b.len >= 2);
        assert_memory_equal(b.data + b.len - 2, "\n\n", 2);
        assert_ptr_equal(strstr(b.data, "\n\n"), b.data + b.len - 2);
        assert_null(memchr(b.data, '\r', b.len));
        tm_buf_free(&b);
    }
}

static void test_binary_data_bytes_kept(void **state)
{
    (void)state;
    /* bytes other than CR and LF pass through untouched, NUL included */
    static const char data[] = {'a', '\0', 'b', '\t', (char)0xff, 'c'};
    static const char want[] = "data: a\0b\t\xff" "c\n\n";
    frame_eq(NULL, NULL, data, sizeof data, want, sizeof want - 1);
}

static void test_long_fields(void **state)
{
    (void)state;
    /* names and data past the 256-byte formatting fast path */
    char name[400], data[5000];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    memset(data, 'd', sizeof data);
    tm_buf b;
    tm_buf_init(&b, BIG);
    assert_int_equal(tm_sse_frame(&b, name, "id-1", data, sizeof data), 0);
    size_t want = 7 + 399 + 1 + 9 + 6 + 5000 + 1 + 1;
    assert_int_equal(b.len, want);
    assert_memory_equal(b.data, "event: nnn", 10);
    assert_memory_equal(b.data + 7 + 399, "\nid: id-1\ndata: ddd", 19);
    assert_memory_equal(b.data + b.len - 4, "dd\n\n", 4);
    tm_buf_free(&b);
}

static void test_appends_to_existing(void **state)
{
    (void)state;
    tm_buf b;
    tm_buf_init(&b, BIG);
    assert_int_equal(tm_sse_frame_retry(&b, 3000), 0);
    assert_int_equal(tm_sse_frame(&b, NULL, "e-r1-1", "", 0), 0);
    assert_int_equal(tm_sse_frame(&b, NULL, "e-r1-2", "{}", 2), 0);
    EXPECT(&b, "retry: 3000\n\nid: e-r1-1\ndata: \n\nid: e-r1-2\ndata: {}\n\n");
    tm_buf_free(&b);
}

static void test_retry_and_comment(void **state)
{
    (void)state;
    tm_buf b;
    tm_buf_init(&b, BIG);
    assert_int_equal(tm_sse_frame_retry(&b, 1000), 0);
    EXPECT(&b, "retry: 1000\n\n");
    tm_buf_reset(&b);
    assert_int_equal(tm_sse_frame_retry(&b, 0), 0);
    EXPECT(&b, "retry: 0\n\n");
    tm_buf_reset(&b);
    assert_int_equal(tm_sse_frame_retry(&b, 4294967295u), 0);
    EXPECT(&b, "retry: 4294967295\n\n");
    tm_buf_reset(&b);
    assert_int_equal(tm_sse_frame_comment(&b, "keep-alive"), 0);
    EXPECT(&b, ": keep-alive\n\n");
    tm_buf_reset(&b);
    assert_int_equal(tm_sse_frame_comment(&b, ""), 0);
    EXPECT(&b, ": \n\n");
    tm_buf_free(&b);
}

/* ---- bounded buffer ------------------------------------------------------ */

static void test_bounded_fails_unchanged(void **state)
{
    (void)state;
    tm_buf b;
    /* empty buffer, data far larger than max */
    tm_buf_init(&b, 16);
    char data[64];
    memset(data, 'x', sizeof data);
    assert_int_equal(tm_sse_frame(&b, NULL, "1", data, sizeof data), TIDEMARK_ERANGE);
    assert_int_equal(b.len, 0);
    assert_true(b.data == NULL || b.data[0] == '\0');
    tm_buf_free(&b);

    /* buffer with prior content: a failed frame leaves exactly that content */
    tm_buf_init(&b, 40);
    assert_int_equal(tm_buf_adds(&b, "keep\n"), 0);
    assert_int_equal(tm_sse_frame(&b, "message", "e-r1-1", "a\nb\nc\nd\ne\nf", 11),
                     TIDEMARK_ERANGE);
    EXPECT(&b, "keep\n");
    /* a frame that fits still goes in afterwards */
    assert_int_equal(tm_sse_frame(&b, NULL, "2", "z", 1), 0);
    EXPECT(&b, "keep\nid: 2\ndata: z\n\n");
    tm_buf_free(&b);
}

static void test_bounded_exact_fit(void **state)
{
    (void)state;
    static const char want[] = "event: m\nid: 5\ndata: a\ndata: b\n\n";
    const size_t wlen = sizeof want - 1;
    /* fails at every max below the exact size, wherever the frame runs out
     * (event line, id line, data prefix, data bytes, line ends, final blank
     * line), always leaving the prior bytes */
    for (size_t max = 3; max < 3 + wlen; max++) {
        tm_buf b;
        tm_buf_init(&b, max);
        assert_int_equal(tm_buf_adds(&b, "pre"), 0);
        int rc = tm_sse_frame(&b, "m", "5", "a\r\nb", 4);
        if (rc != TIDEMARK_ERANGE)
            print_error("max %zu: rc %d\n", max, rc);
        assert_int_equal(rc, TIDEMARK_ERANGE);
        EXPECT(&b, "pre");
        tm_buf_free(&b);
    }
    /* and fits exactly at the exact size */
    tm_buf b;
    tm_buf_init(&b, 3 + wlen);
    assert_int_equal(tm_buf_adds(&b, "pre"), 0);
    assert_int_equal(tm_sse_frame(&b, "m", "5", "a\r\nb", 4), 0);
    expect_bytes(&b, "preevent: m\nid: 5\ndata: a\ndata: b\n\n", 3 + wlen);
    tm_buf_free(&b);
}

static void test_bounded_long_event_name(void **state)
{
    (void)state;
    /* the printf slow path (> 255 bytes) is bounded too */
    char name[300];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    tm_buf b;
    tm_buf_init(&b, 200);
    assert_int_equal(tm_buf_adds(&b, "x"), 0);
    assert_int_equal(tm_sse_frame(&b, name, NULL, "d", 1), TIDEMARK_ERANGE);
    EXPECT(&b, "x");
    tm_buf_free(&b);
}

static void test_bounded_retry_comment(void **state)
{
    (void)state;
    tm_buf b;
    tm_buf_init(&b, 10);
    assert_int_equal(tm_buf_adds(&b, "ab"), 0);
    assert_int_equal(tm_sse_frame_retry(&b, 123456), TIDEMARK_ERANGE); /* 15 bytes */
    EXPECT(&b, "ab");
    assert_int_equal(tm_sse_frame_comment(&b, "keep-alive"), TIDEMARK_ERANGE);
    EXPECT(&b, "ab");
    /* exact fit: "ab" + "retry: 1\n\n" (10) does not fit in 10; "retry: 1\n\n" alone does */
    assert_int_equal(tm_sse_frame_retry(&b, 1), TIDEMARK_ERANGE);
    EXPECT(&b, "ab");
    tm_buf_reset(&b);
    assert_int_equal(tm_sse_frame_retry(&b, 1), 0);
    EXPECT(&b, "retry: 1\n\n");
    tm_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_and_data),
        cmocka_unit_test(test_event_name),
        cmocka_unit_test(test_priming_event_empty_data),
        cmocka_unit_test(test_data_line_breaks),
        cmocka_unit_test(test_data_no_line_ends_early),
        cmocka_unit_test(test_binary_data_bytes_kept),
        cmocka_unit_test(test_long_fields),
        cmocka_unit_test(test_appends_to_existing),
        cmocka_unit_test(test_retry_and_comment),
        cmocka_unit_test(test_bounded_fails_unchanged),
        cmocka_unit_test(test_bounded_exact_fit),
        cmocka_unit_test(test_bounded_long_event_name),
        cmocka_unit_test(test_bounded_retry_comment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
