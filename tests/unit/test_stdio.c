/* test_stdio.c - the stdio transport's framing (src/transport/stdio.{c,h})
 * over real pipes and socketpairs: split reads, many messages per read, a
 * message across reads, over-long lines, invalid JSON and NUL bytes between
 * good lines, end of input, cancellation, EPIPE without SIGPIPE, timeouts,
 * and concurrent writers whose lines never interleave. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tidemark/tidemark.h"
#include "transport/stdio.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- a feeder thread writing bytes in chunks of a given size --------------- */

typedef struct feeder {
    int fd;
    const char *data;
    size_t len, chunk;
    int close_after;
    pthread_t th;
} feeder;

static void *feed_main(void *arg)
{
    feeder *f = arg;
    for (size_t off = 0; off < f->len;) {
        size_t n = f->len - off < f->chunk ? f->len - off : f->chunk;
        ssize_t k = write(f->fd, f->data + off, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        off += (size_t)k;
        if (f->chunk < 16)
            sched_yield(); /* give the reader a chance to see a partial line */
    }
    if (f->close_after)
        close(f->fd);
    return NULL;
}

static void feed_start(feeder *f, int fd, const char *data, size_t len, size_t chunk)
{
    f->fd = fd;
    f->data = data;
    f->len = len;
    f->chunk = chunk;
    f->close_after = 1;
    assert_int_equal(pthread_create(&f->th, NULL, feed_main, f), 0);
}

static void make_pipe(int p[2]) { assert_int_equal(pipe2(p, O_CLOEXEC), 0); }

/* Read a message and check its "n" member. */
static void expect_n(tm_stdio_reader *r, json_int_t n)
{
    json_t *m = NULL;
    int rc = tm_stdio_read(r, &m);
    if (rc != 0)
        fail_msg("expected message n=%lld, got %d (%s)", (long long)n, rc, tm_stdio_reader_why(r));
    assert_int_equal(json_integer_value(json_object_get(m, "n")), n);
    assert_string_equal(tm_stdio_reader_why(r), "");
    json_decref(m);
}

static void expect_err(tm_stdio_reader *r, int err, const char *why)
{
    json_t *m = NULL;
    assert_int_equal(tm_stdio_read(r, &m), err);
    assert_null(m);
    if (why)
        assert_string_equal(tm_stdio_reader_why(r), why);
}

/* ---- reader ------------------------------------------------------------------ */

/* The same stream of 50 messages fed whole, 1, 2, 3 and 7 bytes per write. */
static void test_split_and_batched_reads(void **state)
{
    (void)state;
    char *s = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&s, &len);
    for (int i = 0; i < 50; i++)
        fprintf(mf, "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{\"t\":\"%*s\"},\"n\":%d}\n", i * 3, "x", i);
    fclose(mf);
    size_t chunks[] = {len, 1, 2, 3, 7, 4096};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        int p[2];
        make_pipe(p);
        feeder f;
        feed_start(&f, p[1], s, len, chunks[c]);
        tm_stdio_reader *r = NULL;
        assert_int_equal(tm_stdio_reader_new(p[0], 0, -1, &r), 0);
        for (int i = 0; i < 50; i++)
            expect_n(r, i);
        expect_err(r, TIDEMARK_ECLOSED, NULL);
        unsigned long long lines = 0;
        assert_int_equal(tm_stdio_reader_lines(r, &lines), 0);
        assert_int_equal(lines, 50);
        pthread_join(f.th, NULL);
        tm_stdio_reader_free(r);
        close(p[0]);
    }
    free(s);
}

/* Messages far larger than one read (64 KiB) and than the pipe: split
 * across many reads, with small ones around them. */
static void test_message_across_reads(void **state)
{
    (void)state;
    size_t big = 3u << 20;
    char *s = malloc(big + 256);
    assert_non_null(s);
    int off = sprintf(s, "{\"n\":1}\n{\"n\":2,\"blob\":\"");
    memset(s + off, 'a', big);
    off += (int)big;
    off += sprintf(s + off, "\"}\n{\"n\":3}\n");
    int p[2];
    make_pipe(p);
    feeder f;
    feed_start(&f, p[1], s, (size_t)off, 100000);
    tm_stdio_reader *r = NULL;
    assert_int_equal(tm_stdio_reader_new(p[0], 4u << 20, -1, &r), 0);
    expect_n(r, 1);
    json_t *m = NULL;
    assert_int_equal(tm_stdio_read(r, &m), 0);
    assert_int_equal(json_integer_value(json_object_get(m, "n")), 2);
    assert_int_equal(json_string_length(json_object_get(m, "blob")), big);
    json_decref(m);
    expect_n(r, 3);
    expect_err(r, TIDEMARK_ECLOSED, NULL);
    pthread_join(f.th, NULL);
    tm_stdio_reader_free(r);
    close(p[0]);
    free(s);
}

/* max 100: a line of exactly 100 bytes passes, 101 is refused, a 300 KB one
 * (across many reads, never buffered whole) is refused once, and the lines
 * after each are read. */
static void test_over_long_lines(void **state)
{
    (void)state;
    char exact[101], over[102];
    int e = snprintf(exact, sizeof exact, "{\"n\":2,\"p\":\"");
    memset(exact + e, 'b', 100 - e - 2);
    memcpy(exact + 98, "\"}", 2);
    exact[100] = '\0';
    memcpy(over, exact, 98);
    memcpy(over + 98, "c\"}", 3);
    over[101] = '\0';
    size_t huge = 300000;
    char *s = malloc(huge + 1024);
    assert_non_null(s);
    int off = sprintf(s, "{\"n\":1}\n%s\n%s\n{\"n\":3}\n[", exact, over);
    memset(s + off, '1', huge);
    off += (int)huge;
    off += sprintf(s + off, "]\r\n{\"n\":4}\n");
    int p[2];
    make_pipe(p);
    feeder f;
    feed_start(&f, p[1], s, (size_t)off, 8192);
    tm_stdio_reader *r = NULL;
    assert_int_equal(tm_stdio_reader_new(p[0], 100, -1, &r), 0);
    expect_n(r, 1);
    expect_n(r, 2);
    expect_err(r, TIDEMARK_ERANGE, "line_too_long");
    expect_n(r, 3);
    expect_err(r, TIDEMARK_ERANGE, "line_too_long");
    expect_n(r, 4);
    expect_err(r, TIDEMARK_ECLOSED, NULL);
    unsigned long long lines = 0;
    assert_int_equal(tm_stdio_reader_lines(r, &lines), 0);
    assert_int_equal(lines, 6);
    pthread_join(f.th, NULL);
    tm_stdio_reader_free(r);
    close(p[0]);
    free(s);
}

/* Invalid JSON, a raw NUL, a scalar, blank lines and CRLF between good lines;
 * an escaped \u0000 inside a string is valid JSON and passes. */
static void test_bad_lines_between_good(void **state)
{
    (void)state;
    static const char s[] = "{\"n\":1}\n"
                            "{\"n\":\n"
                            "\n   \n"
                            "{\"n\":2}\r\n"
                            "{\"n\":9,\0\"x\":1}\n"
                            "not json at all\n"
                            "42\n"
                            "{\"n\":3,\"s\":\"a\\u0000b\"}\n"
                            "{\"n\":4,\"n\":5}\n"
                            "{\"n\":6}"; /* no newline at the end */
    int p[2];
    make_pipe(p);
    feeder f;
    feed_start(&f, p[1], s, sizeof s - 1, 5);
    tm_stdio_reader *r = NULL;
    assert_int_equal(tm_stdio_reader_new(p[0], 0, -1, &r), 0);
    expect_n(r, 1);
    expect_err(r, TIDEMARK_EPROTO, "invalid_json");
    assert_true(strlen(tm_stdio_reader_detail(r)) > 0);
    expect_n(r, 2);
    expect_err(r, TIDEMARK_EPROTO, "nul_byte");
    expect_err(r, TIDEMARK_EPROTO, "invalid_json");
    expect_err(r, TIDEMARK_EPROTO, "not_a_message");
    json_t *m = NULL;
    assert_int_equal(tm_stdio_read(r, &m), 0);
    assert_int_equal(json_string_length(json_object_get(m, "s")), 3);
    json_decref(m);
    expect_err(r, TIDEMARK_EPROTO, "invalid_json"); /* duplicate key */
    expect_n(r, 6);
    expect_err(r, TIDEMARK_ECLOSED, NULL);
    expect_err(r, TIDEMARK_ECLOSED, NULL);
    pthread_join(f.th, NULL);
    tm_stdio_reader_free(r);
    close(p[0]);
}

/* Nesting deeper than 64 is refused before jansson sees it; 64 passes. */
static void test_deep_nesting(void **state)
{
    (void)state;
    char s[1024];
    size_t n = 0;
    for (int i = 0; i < 64; i++)
        s[n++] = '[';
    for (int i = 0; i < 64; i++)
        s[n++] = ']';
    s[n++] = '\n';
    for (int i = 0; i < 65; i++)
        s[n++] = '[';
    for (int i = 0; i < 65; i++)
        s[n++] = ']';
    n += (size_t)sprintf(s + n, "\n{\"n\":1}\n");
    int p[2];
    make_pipe(p);
    assert_int_equal(write(p[1], s, n), (ssize_t)n);
    close(p[1]);
    tm_stdio_reader *r = NULL;
    assert_int_equal(tm_stdio_reader_new(p[0], 0, -1, &r), 0);
    json_t *m = NULL;
    assert_int_equal(tm_stdio_read(r, &m), 0);
    assert_true(json_is_array(m));
    json_decref(m);
    expect_err(r, TIDEMARK_EPROTO, "invalid_json");
    assert_non_null(strstr(tm_stdio_reader_detail(r), "nesting"));
    expect_n(r, 1);
    expect_err(r, TIDEMARK_ECLOSED, NULL);
    tm_stdio_reader_free(r);
    close(p[0]);
}

typedef struct canceller {
    int fd;
    pthread_t th;
} canceller;

static void *cancel_main(void *arg)
{
    canceller *c = arg;
    char b = 'x';
    ssize_t k = write(c->fd, &b, 1);
    assert_int_equal(k, 1);
    return NULL;
}

/* A read blocked on a silent peer returns ECANCELED once the cancel fd is
 * written from another thread; buffered lines still come first. */
static void test_cancel(void **state)
{
    (void)state;
    int p[2], cp[2];
    make_pipe(p);
    make_pipe(cp);
    assert_int_equal(write(p[1], "{\"n\":1}\n{\"n\":2}\n", 16), 16);
    tm_stdio_reader *r = NULL;
    assert_int_equal(tm_stdio_reader_new(p[0], 0, cp[0], &r), 0);
    expect_n(r, 1);
    canceller c = {.fd = cp[1]};
    assert_int_equal(pthread_create(&c.th, NULL, cancel_main, &c), 0);
    expect_n(r, 2);
    expect_err(r, TIDEMARK_ECANCELED, NULL);
    pthread_join(c.th, NULL);
    tm_stdio_reader_free(r);
    close(p[0]);
    close(p[1]);
    close(cp[0]);
    close(cp[1]);
}

/* ---- writer ------------------------------------------------------------------ */

/* One line per message whatever the strings hold (newlines, CR, NUL, U+2028),
 * and the reader gets the same values back. */
static void test_write_one_line(void **state)
{
    (void)state;
    int p[2];
    make_pipe(p);
    tm_stdio_writer *w = NULL;
    assert_int_equal(tm_stdio_writer_new(p[1], 0, 0, &w), 0);
    json_t *m = json_pack("{s:s,s:I,s:s%}", "text", "line1\nline2\r\n\xe2\x80\xa8", "n", (json_int_t)7,
                          "nul", "a\0b", (size_t)3);
    assert_int_equal(tm_stdio_write(w, m), 0);
    assert_int_equal(tm_stdio_write_line(w, "{\"n\":8}", 7), 0);
    assert_int_equal(tm_stdio_write_line(w, "{\"n\":\n9}", 8), TIDEMARK_EINVAL);
    assert_int_equal(tm_stdio_write_line(w, "{\"n\":\r9}", 8), TIDEMARK_EINVAL);
    close(p[1]);
    char buf[4096];
    ssize_t n = read(p[0], buf, sizeof buf);
    assert_true(n > 0);
    int newlines = 0;
    for (ssize_t i = 0; i < n; i++)
        newlines += buf[i] == '\n';
    assert_int_equal(newlines, 2);
    assert_int_equal(buf[n - 1], '\n');
    int q[2];
    make_pipe(q);
    assert_int_equal(write(q[1], buf, (size_t)n), n);
    close(q[1]);
    tm_stdio_reader *r = NULL;
    assert_int_equal(tm_stdio_reader_new(q[0], 0, -1, &r), 0);
    json_t *back = NULL;
    assert_int_equal(tm_stdio_read(r, &back), 0);
    assert_true(json_equal(back, m));
    json_decref(back);
    expect_n(r, 8);
    expect_err(r, TIDEMARK_ECLOSED, NULL);
    tm_stdio_reader_free(r);
    tm_stdio_writer_free(w);
    json_decref(m);
    close(p[0]);
    close(q[0]);
}

/* Over the writer's max: refused, nothing written, the writer goes on. */
static void test_write_too_big(void **state)
{
    (void)state;
    int p[2];
    make_pipe(p);
    tm_stdio_writer *w = NULL;
    assert_int_equal(tm_stdio_writer_new(p[1], 16, 0, &w), 0);
    json_t *big = json_pack("{s:s}", "text", "0123456789abcdef");
    json_t *small = json_pack("{s:i}", "n", 1);
    assert_int_equal(tm_stdio_write(w, big), TIDEMARK_ERANGE);
    assert_int_equal(tm_stdio_write(w, small), 0);
    close(p[1]);
    char buf[64];
    ssize_t n = read(p[0], buf, sizeof buf);
    assert_int_equal(n, 8);
    assert_memory_equal(buf, "{\"n\":1}\n", 8);
    json_decref(big);
    json_decref(small);
    tm_stdio_writer_free(w);
    close(p[0]);
}

/* The reader is gone: ECLOSED, the process (SIGPIPE at its default, fatal)
 * lives, and the writer stays closed. On a pipe and on a socketpair. */
static void test_epipe(void **state)
{
    (void)state;
    void (*old)(int) = signal(SIGPIPE, SIG_DFL);
    for (int kind = 0; kind < 2; kind++) {
        int p[2];
        if (kind == 0)
            make_pipe(p);
        else
            assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
        close(p[0]);
        tm_stdio_writer *w = NULL;
        assert_int_equal(tm_stdio_writer_new(p[1], 0, 0, &w), 0);
        json_t *m = json_pack("{s:i}", "n", 1);
        assert_int_equal(tm_stdio_write(w, m), TIDEMARK_ECLOSED);
        assert_int_equal(tm_stdio_write(w, m), TIDEMARK_ECLOSED);
        sigset_t pend;
        sigemptyset(&pend);
        assert_int_equal(sigpending(&pend), 0);
        assert_false(sigismember(&pend, SIGPIPE));
        json_decref(m);
        tm_stdio_writer_free(w);
        close(p[1]);
    }
    signal(SIGPIPE, old);
}

/* Nobody reads a non-blocking pipe: the write gives up after its timeout
 * and the writer is broken from then on. */
static void test_write_timeout(void **state)
{
    (void)state;
    int p[2];
    make_pipe(p);
    assert_int_equal(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
    tm_stdio_writer *w = NULL;
    assert_int_equal(tm_stdio_writer_new(p[1], 0, 200, &w), 0);
    size_t big = 1u << 20;
    char *s = malloc(big + 16);
    assert_non_null(s);
    memset(s, 'z', big + 16);
    memcpy(s, "{\"s\":\"", 6);
    memcpy(s + big + 14, "\"}", 2);
    assert_int_equal(tm_stdio_write_line(w, s, big + 16), TIDEMARK_ETIMEDOUT);
    assert_int_equal(tm_stdio_write_line(w, "{}", 2), TIDEMARK_ECLOSED);
    free(s);
    tm_stdio_writer_free(w);
    close(p[0]);
    close(p[1]);
}

typedef struct writer_arg {
    tm_stdio_writer *w;
    int who;
    pthread_t th;
} writer_arg;

#define PER_WRITER 500

static void *writer_main(void *arg)
{
    writer_arg *a = arg;
    for (int i = 0; i < PER_WRITER; i++) {
        json_t *m = json_pack("{s:i,s:i,s:s}", "who", a->who, "n", i, "pad",
                              "padding padding padding padding padding padding padding padding");
        int rc = tm_stdio_write(a->w, m);
        json_decref(m);
        if (rc != 0)
            return (void *)1;
    }
    return NULL;
}

/* Four threads writing at once into a socketpair: every line parses and each
 * writer's messages arrive in its order. */
static void test_concurrent_writers(void **state)
{
    (void)state;
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    tm_stdio_writer *w = NULL;
    assert_int_equal(tm_stdio_writer_new(sp[0], 0, 0, &w), 0);
    writer_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i].w = w;
        a[i].who = i;
        assert_int_equal(pthread_create(&a[i].th, NULL, writer_main, &a[i]), 0);
    }
    tm_stdio_reader *r = NULL;
    assert_int_equal(tm_stdio_reader_new(sp[1], 0, -1, &r), 0);
    int next[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4 * PER_WRITER; k++) {
        json_t *m = NULL;
        assert_int_equal(tm_stdio_read(r, &m), 0);
        int who = (int)json_integer_value(json_object_get(m, "who"));
        assert_in_range(who, 0, 3);
        assert_int_equal(json_integer_value(json_object_get(m, "n")), next[who]);
        next[who]++;
        json_decref(m);
    }
    for (int i = 0; i < 4; i++) {
        void *res = NULL;
        pthread_join(a[i].th, &res);
        assert_null(res);
    }
    tm_stdio_writer_free(w);
    close(sp[0]);
    expect_err(r, TIDEMARK_ECLOSED, NULL);
    tm_stdio_reader_free(r);
    close(sp[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_and_batched_reads),
        cmocka_unit_test(test_message_across_reads),
        cmocka_unit_test(test_over_long_lines),
        cmocka_unit_test(test_bad_lines_between_good),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_write_one_line),
        cmocka_unit_test(test_write_too_big),
        cmocka_unit_test(test_epipe),
        cmocka_unit_test(test_write_timeout),
        cmocka_unit_test(test_concurrent_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
