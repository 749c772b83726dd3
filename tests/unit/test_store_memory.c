/* test_store_memory.c - the memory backend through the store.h API. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "log/store.h"
#include "tidemark/server.h"
#include "tidemark/tidemark.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------- */

static tm_store *open_store(uint64_t retain)
{
    tm_store *st = NULL;
    tm_store_options opts = {.retain_events = retain};
    assert_int_equal(tm_store_open("memory", &opts, &st), 0);
    assert_non_null(st);
    assert_true(tm_epoch_valid(tm_store_epoch(st)));
    return st;
}

static void mk_session(tm_store *st, const char *id)
{
    tm_session_rec rec = {.id = (char *)id, .protocol_version = "2025-06-18",
                          .client = "{\"clientInfo\":{\"name\":\"t\"}}", .created_ms = 1000,
                          .last_seen_ms = 1000};
    assert_int_equal(tm_store_session_create(st, &rec), 0);
}

static void open_stream(tm_store *st, const char *session, const char *name, const char *want)
{
    char out[TM_STREAM_MAX];
    memset(out, 'X', sizeof out);
    assert_int_equal(tm_store_stream_open(st, session, name, out), 0);
    assert_string_equal(out, want);
}

/* Records append callbacks and listener calls, in order. */
#define MAX_CALLS 64
typedef struct recorder {
    int n_cb;
    int cb_status[MAX_CALLS];
    uint64_t cb_seq[MAX_CALLS];
    int n_listen;
    char l_session[MAX_CALLS][32];
    char l_stream[MAX_CALLS][TM_STREAM_MAX];
    uint64_t l_seq[MAX_CALLS];
    int l_after_cb[MAX_CALLS]; /* callbacks seen when the listener ran */
} recorder;

static void rec_cb(void *ud, int status, uint64_t seq)
{
    recorder *r = ud;
    if (r->n_cb < MAX_CALLS) {
        r->cb_status[r->n_cb] = status;
        r->cb_seq[r->n_cb] = seq;
    }
    r->n_cb++;
}

static void rec_listener(void *ud, const char *session, const char *stream, uint64_t seq)
{
    recorder *r = ud;
    if (r->n_listen < MAX_CALLS) {
        snprintf(r->l_session[r->n_listen], sizeof r->l_session[0], "%s", session);
        snprintf(r->l_stream[r->n_listen], sizeof r->l_stream[0], "%s", stream);
        r->l_seq[r->n_listen] = seq;
        r->l_after_cb[r->n_listen] = r->n_cb;
    }
    r->n_listen++;
}

static void append_ok(tm_store *st, const char *session, const char *stream, const void *data,
                      size_t len, unsigned flags, recorder *r, uint64_t want_seq)
{
    int before = r->n_cb;
    assert_int_equal(tm_store_append(st, session, stream, data, len, flags, rec_cb, r), 0);
    /* the memory store commits synchronously: the callback has run */
    assert_int_equal(r->n_cb, before + 1);
    assert_int_equal(r->cb_status[before], 0);
    assert_int_equal(r->cb_seq[before], want_seq);
}

static void append_str(tm_store *st, const char *session, const char *stream, const char *s)
{
    assert_int_equal(tm_store_append(st, session, stream, s, strlen(s), 0, NULL, NULL), 0);
}

/* Collects visited events. */
typedef struct collected {
    size_t n;
    uint64_t seq[256];
    char data[256][64];
    size_t len[256];
    char epoch[256][TM_EPOCH_LEN + 1];
    size_t stop_after; /* return nonzero after this many (0 = never) */
} collected;

static int collect(void *ud, const tm_event *ev)
{
    collected *c = ud;
    if (c->n < 256) {
        c->seq[c->n] = ev->seq;
        c->len[c->n] = ev->len;
        memcpy(c->data[c->n], ev->data, ev->len < 64 ? ev->len : 64);
        snprintf(c->epoch[c->n], sizeof c->epoch[0], "%s", ev->epoch);
    }
    c->n++;
    return c->stop_after && c->n >= c->stop_after;
}

static void read_all(tm_store *st, const char *session, const char *stream, uint64_t after,
                     size_t max, collected *c)
{
    size_t stop = c->stop_after;
    memset(c, 0, sizeof *c);
    c->stop_after = stop;
    assert_int_equal(tm_store_read(st, session, stream, after, max, collect, c), 0);
}

/* ---- sessions ------------------------------------------------------------ */

static void test_session_create_get(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    tm_session_rec rec = {.id = "sess-1", .protocol_version = "2025-11-25",
                          .client = "{\"clientInfo\":{\"name\":\"c\",\"version\":\"1\"}}",
                          .created_ms = 1700000000123LL, .last_seen_ms = 1700000000456LL};
    assert_int_equal(tm_store_session_create(st, &rec), 0);

    tm_session_rec got;
    assert_int_equal(tm_store_session_get(st, "sess-1", &got), 0);
    assert_string_equal(got.id, "sess-1");
    assert_string_equal(got.protocol_version, "2025-11-25");
    assert_string_equal(got.client, rec.client);
    assert_true(got.created_ms == 1700000000123LL);
    assert_true(got.last_seen_ms == 1700000000456LL);
    /* the record owns copies */
    assert_ptr_not_equal(got.id, rec.id);
    assert_ptr_not_equal(got.client, rec.client);
    tm_session_rec_clear(&got);
    assert_null(got.id);

    /* duplicate id */
    tm_session_rec dup = {.id = "sess-1", .protocol_version = "2025-03-26"};
    assert_int_equal(tm_store_session_create(st, &dup), TIDEMARK_EEXIST);
    /* and the original is untouched */
    assert_int_equal(tm_store_session_get(st, "sess-1", &got), 0);
    assert_string_equal(got.protocol_version, "2025-11-25");
    tm_session_rec_clear(&got);

    /* unknown id */
    assert_int_equal(tm_store_session_get(st, "nope", &got), TIDEMARK_ENOTFOUND);
    assert_null(got.id);
    tm_session_rec_clear(&got);

    /* optional fields may be NULL */
    tm_session_rec bare = {.id = "bare"};
    assert_int_equal(tm_store_session_create(st, &bare), 0);
    assert_int_equal(tm_store_session_get(st, "bare", &got), 0);
    assert_string_equal(got.id, "bare");
    assert_null(got.protocol_version);
    assert_null(got.client);
    tm_session_rec_clear(&got);
    tm_store_close(st);
}

static void test_session_touch(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    assert_int_equal(tm_store_session_touch(st, "a", 5555), 0);
    tm_session_rec got;
    assert_int_equal(tm_store_session_get(st, "a", &got), 0);
    assert_true(got.last_seen_ms == 5555);
    assert_true(got.created_ms == 1000);
    tm_session_rec_clear(&got);
    assert_int_equal(tm_store_session_touch(st, "b", 5555), TIDEMARK_ENOTFOUND);
    tm_store_close(st);
}

static void test_session_delete(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    mk_session(st, "b");
    open_stream(st, "a", NULL, "r1");
    open_stream(st, "a", "g", "g");
    open_stream(st, "b", NULL, "r1");
    append_str(st, "a", "r1", "x");
    append_str(st, "a", "g", "y");
    append_str(st, "b", "r1", "z");

    assert_int_equal(tm_store_session_delete(st, "a"), 0);
    tm_session_rec got;
    assert_int_equal(tm_store_session_get(st, "a", &got), TIDEMARK_ENOTFOUND);
    tm_session_rec_clear(&got);
    assert_int_equal(tm_store_session_touch(st, "a", 1), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_session_delete(st, "a"), TIDEMARK_ENOTFOUND);

    /* its streams are gone */
    tm_stream_bounds b;
    char ep[TM_EPOCH_LEN + 1];
    collected c = {0};
    assert_int_equal(tm_store_bounds(st, "a", "r1", &b), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_bounds(st, "a", "g", &b), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_read(st, "a", "r1", 0, 10, collect, &c), TIDEMARK_ENOTFOUND);
    assert_int_equal(c.n, 0);
    assert_int_equal(tm_store_append(st, "a", "r1", "q", 1, 0, NULL, NULL), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 1, ep), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_close_stream(st, "a", "r1"), TIDEMARK_ENOTFOUND);
    char out[TM_STREAM_MAX];
    assert_int_equal(tm_store_stream_open(st, "a", NULL, out), TIDEMARK_ENOTFOUND);

    /* a new session under the same id starts empty, numbering from r1 */
    mk_session(st, "a");
    assert_int_equal(tm_store_bounds(st, "a", "r1", &b), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_bounds(st, "a", "g", &b), TIDEMARK_ENOTFOUND);
    open_stream(st, "a", NULL, "r1");
    assert_int_equal(tm_store_bounds(st, "a", "r1", &b), 0);
    assert_int_equal(b.head, 0);

    /* the other session is untouched */
    read_all(st, "b", "r1", 0, 10, &c);
    assert_int_equal(c.n, 1);
    assert_memory_equal(c.data[0], "z", 1);
    assert_int_equal(tm_store_session_get(st, "b", &got), 0);
    tm_session_rec_clear(&got);
    tm_store_close(st);
}

/* ---- streams ------------------------------------------------------------- */

static void test_stream_open_numbering(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    mk_session(st, "b");
    open_stream(st, "a", NULL, "r1");
    open_stream(st, "a", NULL, "r2");
    open_stream(st, "b", NULL, "r1"); /* per session */
    open_stream(st, "a", "g", "g");   /* does not consume a number */
    open_stream(st, "a", NULL, "r3");
    open_stream(st, "b", NULL, "r2");
    for (int i = 4; i <= 12; i++) {
        char want[TM_STREAM_MAX];
        snprintf(want, sizeof want, "r%d", i);
        open_stream(st, "a", NULL, want);
    }
    /* a new stream is empty, not closed, nothing trimmed */
    tm_stream_bounds b;
    memset(&b, 0x5a, sizeof b);
    assert_int_equal(tm_store_bounds(st, "a", "r12", &b), 0);
    assert_int_equal(b.head, 0);
    assert_int_equal(b.first_retained, 1);
    assert_int_equal(b.closed, 0);
    assert_string_equal(b.trimmed_epoch, "");
    /* unknown session */
    char out[TM_STREAM_MAX];
    assert_int_equal(tm_store_stream_open(st, "zz", NULL, out), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_stream_open(st, "zz", "g", out), TIDEMARK_ENOTFOUND);
    /* unknown stream of a known session */
    assert_int_equal(tm_store_bounds(st, "b", "r3", &b), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_bounds(st, "b", "g", &b), TIDEMARK_ENOTFOUND);
    tm_store_close(st);
}

static void test_stream_g_reopen_keeps_seqs(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    recorder r = {0};
    mk_session(st, "a");
    open_stream(st, "a", "g", "g");
    append_ok(st, "a", "g", "1", 1, 0, &r, 1);
    append_ok(st, "a", "g", "2", 1, 0, &r, 2);
    append_ok(st, "a", "g", "3", 1, 0, &r, 3);
    /* reopening while open keeps everything */
    open_stream(st, "a", "g", "g");
    append_ok(st, "a", "g", "4", 1, 0, &r, 4);
    /* closed, then reopened: seqs continue and appends work again */
    assert_int_equal(tm_store_close_stream(st, "a", "g"), 0);
    assert_int_equal(tm_store_append(st, "a", "g", "x", 1, 0, NULL, NULL), TIDEMARK_ECLOSED);
    open_stream(st, "a", "g", "g");
    tm_stream_bounds b;
    assert_int_equal(tm_store_bounds(st, "a", "g", &b), 0);
    assert_int_equal(b.head, 4);
    assert_int_equal(b.closed, 0);
    append_ok(st, "a", "g", "5", 1, 0, &r, 5);
    collected c = {0};
    read_all(st, "a", "g", 0, 100, &c);
    assert_int_equal(c.n, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(c.seq[i], i + 1);
        assert_int_equal(c.data[i][0], (char)('1' + i));
    }
    tm_store_close(st);
}

static void test_append_seqs_cb_listener(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    recorder r = {0};
    tm_store_set_listener(st, rec_listener, &r);
    mk_session(st, "a");
    mk_session(st, "b");
    open_stream(st, "a", NULL, "r1");
    open_stream(st, "a", NULL, "r2");
    open_stream(st, "b", NULL, "r1");

    append_ok(st, "a", "r1", "a1", 2, 0, &r, 1);
    append_ok(st, "a", "r1", "a2", 2, 0, &r, 2);
    append_ok(st, "a", "r2", "b1", 2, 0, &r, 1); /* per stream */
    append_ok(st, "b", "r1", "c1", 2, 0, &r, 1); /* per session */
    append_ok(st, "a", "r1", "a3", 2, 0, &r, 3);
    assert_int_equal(r.n_cb, 5);
    assert_int_equal(r.n_listen, 5);
    const char *ws[] = {"a", "a", "a", "b", "a"};
    const char *wn[] = {"r1", "r1", "r2", "r1", "r1"};
    const uint64_t wq[] = {1, 2, 1, 1, 3};
    for (int i = 0; i < 5; i++) {
        assert_string_equal(r.l_session[i], ws[i]);
        assert_string_equal(r.l_stream[i], wn[i]);
        assert_int_equal(r.l_seq[i], wq[i]);
        /* the listener runs after that append's callback */
        assert_int_equal(r.l_after_cb[i], i + 1);
    }

    /* append without a callback still notifies the listener */
    assert_int_equal(tm_store_append(st, "a", "r2", "b2", 2, 0, NULL, NULL), 0);
    assert_int_equal(r.n_listen, 6);
    assert_int_equal(r.l_seq[5], 2);
    assert_string_equal(r.l_stream[5], "r2");

    /* failed appends: no callback, no listener, no seq consumed */
    int cbs = r.n_cb, ls = r.n_listen;
    assert_int_equal(tm_store_append(st, "a", "r9", "x", 1, 0, rec_cb, &r), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_append(st, "zz", "r1", "x", 1, 0, rec_cb, &r), TIDEMARK_ENOTFOUND);
    assert_int_equal(r.n_cb, cbs);
    assert_int_equal(r.n_listen, ls);
    append_ok(st, "a", "r1", "a4", 2, 0, &r, 4);

    tm_stream_bounds b;
    assert_int_equal(tm_store_bounds(st, "a", "r1", &b), 0);
    assert_int_equal(b.head, 4);
    assert_int_equal(b.first_retained, 1);
    tm_store_close(st);
}

static void test_append_final_closes(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    recorder r = {0};
    tm_store_set_listener(st, rec_listener, &r);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    append_ok(st, "a", "r1", "p", 1, 0, &r, 1);
    append_ok(st, "a", "r1", "result", 6, TM_APPEND_FINAL, &r, 2);
    assert_int_equal(r.n_listen, 2);
    assert_int_equal(r.l_seq[1], 2);

    tm_stream_bounds b;
    assert_int_equal(tm_store_bounds(st, "a", "r1", &b), 0);
    assert_int_equal(b.closed, 1);
    assert_int_equal(b.head, 2);

    int cbs = r.n_cb, ls = r.n_listen;
    assert_int_equal(tm_store_append(st, "a", "r1", "late", 4, 0, rec_cb, &r), TIDEMARK_ECLOSED);
    assert_int_equal(tm_store_append(st, "a", "r1", "late", 4, TM_APPEND_FINAL, rec_cb, &r),
                     TIDEMARK_ECLOSED);
    assert_int_equal(r.n_cb, cbs);
    assert_int_equal(r.n_listen, ls);
    assert_int_equal(tm_store_bounds(st, "a", "r1", &b), 0);
    assert_int_equal(b.head, 2);
    /* the final event is still readable */
    collected c = {0};
    read_all(st, "a", "r1", 1, 10, &c);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.seq[0], 2);
    assert_int_equal(c.len[0], 6);
    assert_memory_equal(c.data[0], "result", 6);
    /* the next POST stream is independent */
    open_stream(st, "a", NULL, "r2");
    append_ok(st, "a", "r2", "q", 1, 0, &r, 1);
    tm_store_close(st);
}

static void test_close_stream(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    append_str(st, "a", "r1", "one");
    append_str(st, "a", "r1", "two");
    assert_int_equal(tm_store_close_stream(st, "a", "r1"), 0);
    tm_stream_bounds b;
    assert_int_equal(tm_store_bounds(st, "a", "r1", &b), 0);
    assert_int_equal(b.closed, 1);
    assert_int_equal(b.head, 2);
    assert_int_equal(tm_store_append(st, "a", "r1", "x", 1, 0, NULL, NULL), TIDEMARK_ECLOSED);
    /* closing twice is harmless; events stay readable */
    assert_int_equal(tm_store_close_stream(st, "a", "r1"), 0);
    collected c = {0};
    read_all(st, "a", "r1", 0, 10, &c);
    assert_int_equal(c.n, 2);
    /* unknown stream / session */
    assert_int_equal(tm_store_close_stream(st, "a", "r2"), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_close_stream(st, "b", "r1"), TIDEMARK_ENOTFOUND);
    /* an empty stream can be closed */
    open_stream(st, "a", NULL, "r2");
    assert_int_equal(tm_store_close_stream(st, "a", "r2"), 0);
    assert_int_equal(tm_store_bounds(st, "a", "r2", &b), 0);
    assert_int_equal(b.closed, 1);
    assert_int_equal(b.head, 0);
    tm_store_close(st);
}

/* ---- read ---------------------------------------------------------------- */

static void fill(tm_store *st, const char *s, const char *stream, int n)
{
    for (int i = 1; i <= n; i++) {
        char m[32];
        snprintf(m, sizeof m, "ev-%d", i);
        append_str(st, s, stream, m);
    }
}

static void expect_run(const collected *c, uint64_t first, size_t n)
{
    assert_int_equal(c->n, n);
    for (size_t i = 0; i < n; i++) {
        char m[32];
        uint64_t seq = first + i;
        snprintf(m, sizeof m, "ev-%llu", (unsigned long long)seq);
        assert_int_equal(c->seq[i], seq);
        assert_int_equal(c->len[i], strlen(m));
        assert_memory_equal(c->data[i], m, strlen(m));
    }
}

static void test_read_order_and_limits(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    open_stream(st, "a", NULL, "r2");
    fill(st, "a", "r1", 10);
    fill(st, "a", "r2", 3);
    collected c = {0};

    read_all(st, "a", "r1", 0, 100, &c);
    expect_run(&c, 1, 10);
    for (size_t i = 0; i < c.n; i++)
        assert_string_equal(c.epoch[i], tm_store_epoch(st));
    read_all(st, "a", "r1", 4, 100, &c);
    expect_run(&c, 5, 6);
    read_all(st, "a", "r1", 9, 100, &c);
    expect_run(&c, 10, 1);
    read_all(st, "a", "r1", 10, 100, &c); /* at head */
    expect_run(&c, 11, 0);
    read_all(st, "a", "r1", 50, 100, &c); /* past head */
    expect_run(&c, 51, 0);

    /* max_events */
    read_all(st, "a", "r1", 2, 3, &c);
    expect_run(&c, 3, 3);
    read_all(st, "a", "r1", 0, 1, &c);
    expect_run(&c, 1, 1);
    read_all(st, "a", "r1", 0, 0, &c);
    expect_run(&c, 1, 0);
    read_all(st, "a", "r1", 8, 5, &c); /* limit past head */
    expect_run(&c, 9, 2);

    /* visitor stops */
    c.stop_after = 4;
    read_all(st, "a", "r1", 0, 100, &c);
    expect_run(&c, 1, 4);
    c.stop_after = 1;
    read_all(st, "a", "r1", 6, 100, &c);
    expect_run(&c, 7, 1);
    c.stop_after = 0;

    /* only the named stream */
    read_all(st, "a", "r2", 0, 100, &c);
    expect_run(&c, 1, 3);

    /* unknown */
    assert_int_equal(tm_store_read(st, "a", "r3", 0, 10, collect, &c), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_read(st, "b", "r1", 0, 10, collect, &c), TIDEMARK_ENOTFOUND);
    tm_store_close(st);
}

/* Contract: visit events with seq > after_seq. No seq exceeds UINT64_MAX, so
 * this is "past head" like any other after_seq >= head: no events, no error. */
static void test_read_after_max_seq(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    fill(st, "a", "r1", 3);
    collected c = {0};
    int rc = tm_store_read(st, "a", "r1", UINT64_MAX, 100, collect, &c);
    tm_store_close(st);
    assert_int_equal(c.n, 0);
    assert_int_equal(rc, 0);
}

typedef struct fullcheck {
    const void *want[4];
    size_t want_len[4];
    int n, bad;
} fullcheck;

static int full_visit(void *ud, const tm_event *ev)
{
    fullcheck *f = ud;
    if (f->n >= 4 || ev->seq != (uint64_t)f->n + 1 || ev->len != f->want_len[f->n] ||
        (ev->len && memcmp(ev->data, f->want[f->n], ev->len) != 0))
        f->bad++;
    f->n++;
    return 0;
}

static void test_bytes_exact(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    static unsigned char bin[256];
    for (int i = 0; i < 256; i++)
        bin[i] = (unsigned char)(255 - i);
    static const char nul3[] = {'\0', 'a', '\0'};
    static char big[100000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)(i * 31 + 7);
    static char scratch[256];
    memcpy(scratch, bin, sizeof bin);
    assert_int_equal(tm_store_append(st, "a", "r1", scratch, sizeof scratch, 0, NULL, NULL), 0);
    memset(scratch, 'Z', sizeof scratch); /* the store kept its own copy */
    assert_int_equal(tm_store_append(st, "a", "r1", nul3, 3, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_append(st, "a", "r1", "", 0, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_append(st, "a", "r1", big, sizeof big, 0, NULL, NULL), 0);
    fullcheck f = {.want = {bin, nul3, "", big}, .want_len = {256, 3, 0, sizeof big}};
    assert_int_equal(tm_store_read(st, "a", "r1", 0, 100, full_visit, &f), 0);
    assert_int_equal(f.n, 4);
    assert_int_equal(f.bad, 0);
    tm_store_close(st);
}

/* ---- bounds, retention, epochs ------------------------------------------ */

static void test_retention_trimming(void **state)
{
    (void)state;
    tm_store *st = open_store(3);
    const char *ep = tm_store_epoch(st);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    tm_stream_bounds b;

    fill(st, "a", "r1", 3);
    assert_int_equal(tm_store_bounds(st, "a", "r1", &b), 0);
    assert_int_equal(b.first_retained, 1);
    assert_int_equal(b.head, 3);
    assert_string_equal(b.trimmed_epoch, "");

    fill(st, "a", "r1", 2); /* events 4, 5 carry "ev-1", "ev-2" */
    assert_int_equal(tm_store_bounds(st, "a", "r1", &b), 0);
    assert_int_equal(b.first_retained, 3);
    assert_int_equal(b.head, 5);
    assert_int_equal(b.closed, 0);
    assert_string_equal(b.trimmed_epoch, ep);

    /* reading from before the retained range would skip trimmed events:
     * refused with ERANGE, nothing visited */
    collected c = {0};
    for (uint64_t after = 0; after < 2; after++) {
        memset(&c, 0, sizeof c);
        assert_int_equal(tm_store_read(st, "a", "r1", after, 100, collect, &c), TIDEMARK_ERANGE);
        assert_int_equal(c.n, 0);
    }
    /* from first_retained-1 (the trim boundary) every retained event comes back */
    read_all(st, "a", "r1", 2, 100, &c);
    assert_int_equal(c.n, 3);
    assert_int_equal(c.seq[0], 3);
    assert_int_equal(c.seq[1], 4);
    assert_int_equal(c.seq[2], 5);
    assert_memory_equal(c.data[0], "ev-3", 4);
    assert_memory_equal(c.data[1], "ev-1", 4);
    assert_memory_equal(c.data[2], "ev-2", 4);
    read_all(st, "a", "r1", 3, 100, &c);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.seq[0], 4);

    /* event_epoch: retained seqs, the trim record, and nothing else */
    char out[TM_EPOCH_LEN + 1];
    for (uint64_t s = 3; s <= 5; s++) {
        memset(out, 0, sizeof out);
        assert_int_equal(tm_store_event_epoch(st, "a", "r1", s, out), 0);
        assert_string_equal(out, ep);
    }
    memset(out, 0, sizeof out);
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 2, out), 0); /* trim record */
    assert_string_equal(out, ep);
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 1, out), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 6, out), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 0, out), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_event_epoch(st, "a", "r2", 3, out), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_event_epoch(st, "b", "r1", 3, out), TIDEMARK_ENOTFOUND);

    /* a final append still trims, and closed is reported */
    assert_int_equal(tm_store_append(st, "a", "r1", "fin", 3, TM_APPEND_FINAL, NULL, NULL), 0);
    assert_int_equal(tm_store_bounds(st, "a", "r1", &b), 0);
    assert_int_equal(b.first_retained, 4);
    assert_int_equal(b.head, 6);
    assert_int_equal(b.closed, 1);
    tm_store_close(st);
}

static void test_retention_long_run(void **state)
{
    (void)state;
    /* many appends past the retention limit: storage compaction must keep
     * seq -> bytes exact */
    tm_store *st = open_store(5);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    open_stream(st, "a", NULL, "r2");
    for (int i = 1; i <= 1000; i++) {
        char m[32];
        snprintf(m, sizeof m, "ev-%d", i);
        append_str(st, "a", "r1", m);
        if (i % 10 == 0)
            append_str(st, "a", "r2", m);
        tm_stream_bounds b;
        assert_int_equal(tm_store_bounds(st, "a", "r1", &b), 0);
        assert_int_equal(b.head, (uint64_t)i);
        assert_int_equal(b.first_retained, i > 5 ? (uint64_t)i - 4 : 1);
        if (i % 97 == 0 || i > 990) {
            collected c = {0};
            read_all(st, "a", "r1", b.first_retained - 1, 100, &c);
            expect_run(&c, b.first_retained, i > 5 ? 5 : (size_t)i);
            if (b.first_retained > 1) {
                assert_int_equal(tm_store_read(st, "a", "r1", b.first_retained - 2, 100, collect, &c),
                                 TIDEMARK_ERANGE);
            }
        }
    }
    tm_stream_bounds b;
    assert_int_equal(tm_store_bounds(st, "a", "r2", &b), 0);
    assert_int_equal(b.head, 100);
    assert_int_equal(b.first_retained, 96);
    tm_store_close(st);
}

static void test_event_epoch_untrimmed(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    tm_store *st2 = open_store(0);
    /* every open is a new writer generation */
    assert_string_not_equal(tm_store_epoch(st), tm_store_epoch(st2));
    tm_store_close(st2);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    char out[TM_EPOCH_LEN + 1];
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 1, out), TIDEMARK_ENOTFOUND);
    fill(st, "a", "r1", 2);
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 1, out), 0);
    assert_string_equal(out, tm_store_epoch(st));
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 2, out), 0);
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 3, out), TIDEMARK_ENOTFOUND);
    /* nothing trimmed: seq 0 has no trim record */
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 0, out), TIDEMARK_ENOTFOUND);
    tm_store_close(st);
}

/* ---- concurrency --------------------------------------------------------- */

#define N_THREADS 4
#define N_STREAMS 4
#define PER_THREAD 2000
#define PER_STREAM (N_THREADS * PER_THREAD / N_STREAMS)

static const char *const c_sess[N_STREAMS] = {"sa", "sa", "sb", "sb"};
static const char *const c_strm[N_STREAMS] = {"r1", "r2", "r1", "g"};

typedef struct conc {
    tm_store *st;
    pthread_mutex_t mu;
    int seen[N_STREAMS][PER_STREAM + 2]; /* listener hits per (stream, seq) */
    uint64_t covered[N_STREAMS];         /* TM_CONTRACT_WAKEUPS: highest head heard */
    pthread_barrier_t go;                /* start all writers at once */
    int stray;                           /* listener calls for unknown (session, stream) */
    int out_of_range;
} conc;

typedef struct worker {
    conc *c;
    int t;
    int errors;
    uint64_t seq[PER_THREAD]; /* seq the callback reported for event i */
} worker;

static void conc_listener(void *ud, const char *session, const char *stream, uint64_t seq)
{
    conc *c = ud;
    int k = -1;
    for (int i = 0; i < N_STREAMS; i++)
        if (strcmp(session, c_sess[i]) == 0 && strcmp(stream, c_strm[i]) == 0)
            k = i;
    pthread_mutex_lock(&c->mu);
    if (k < 0)
        c->stray++;
    else if (seq < 1 || seq > PER_STREAM)
        c->out_of_range++;
#ifdef TM_CONTRACT_WAKEUPS
    /* A store whose listener is a wake-up ("durable up to seq", possibly
     * once for several events, possibly again for a head): a head covers
     * every seq up to it, and each seq must be covered exactly once. */
    else
        for (; c->covered[k] < seq; c->covered[k]++)
            c->seen[k][c->covered[k] + 1]++;
#else
    else
        c->seen[k][seq]++;
#endif
    pthread_mutex_unlock(&c->mu);
}

typedef struct cbslot {
    worker *w;
    int i;
} cbslot;

static void conc_cb(void *ud, int status, uint64_t seq)
{
    cbslot *s = ud;
    if (status != 0 || s->w->seq[s->i] != 0)
        s->w->errors++;
    s->w->seq[s->i] = seq;
}

static void *conc_worker(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(&w->c->go);
    for (int i = 0; i < PER_THREAD; i++) {
        int k = i % N_STREAMS; /* every thread writes every stream, in step, to collide */
        char m[48];
        int len = snprintf(m, sizeof m, "t%d-i%d", w->t, i);
        cbslot slot = {w, i};
        if (tm_store_append(w->c->st, c_sess[k], c_strm[k], m, (size_t)len, 0, conc_cb, &slot) != 0)
            w->errors++;
    }
    return NULL;
}

typedef struct verify {
    uint64_t next;      /* expected next seq */
    int bad;
    int last_i[N_THREADS]; /* per writer, the last i seen on this stream */
    worker *ws;
    int k;
} verify;

static int conc_visit(void *ud, const tm_event *ev)
{
    verify *v = ud;
    if (ev->seq != v->next)
        v->bad++;
    v->next = ev->seq + 1;
    char m[48];
    if (ev->len >= sizeof m) {
        v->bad++;
        return 0;
    }
    memcpy(m, ev->data, ev->len);
    m[ev->len] = '\0';
    int t, i;
    if (sscanf(m, "t%d-i%d", &t, &i) != 2 || t < 0 || t >= N_THREADS || i < 0 || i >= PER_THREAD) {
        v->bad++;
        return 0;
    }
    /* each writer's events reach the stream in its order */
    if (i <= v->last_i[t])
        v->bad++;
    v->last_i[t] = i;
    /* right stream, and the callback told the writer this very seq */
    if (i % N_STREAMS != v->k || v->ws[t].seq[i] != ev->seq)
        v->bad++;
    return 0;
}

static void test_concurrent_appends(void **state)
{
    (void)state;
    static conc c;
    static worker ws[N_THREADS];
    memset(&c, 0, sizeof c);
    memset(ws, 0, sizeof ws);
    pthread_mutex_init(&c.mu, NULL);
    assert_int_equal(pthread_barrier_init(&c.go, NULL, N_THREADS), 0);
    c.st = open_store(0);
    tm_store_set_listener(c.st, conc_listener, &c);
    mk_session(c.st, "sa");
    mk_session(c.st, "sb");
    open_stream(c.st, "sa", NULL, "r1");
    open_stream(c.st, "sa", NULL, "r2");
    open_stream(c.st, "sb", NULL, "r1");
    open_stream(c.st, "sb", "g", "g");

    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        ws[t].c = &c;
        ws[t].t = t;
        assert_int_equal(pthread_create(&th[t], NULL, conc_worker, &ws[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++)
        assert_int_equal(pthread_join(th[t], NULL), 0);

    for (int t = 0; t < N_THREADS; t++) {
        assert_int_equal(ws[t].errors, 0);
        for (int i = 0; i < PER_THREAD; i++)
            assert_true(ws[t].seq[i] >= 1 && ws[t].seq[i] <= PER_STREAM);
    }
    assert_int_equal(c.stray, 0);
    assert_int_equal(c.out_of_range, 0);
    for (int k = 0; k < N_STREAMS; k++) {
        tm_stream_bounds b;
        assert_int_equal(tm_store_bounds(c.st, c_sess[k], c_strm[k], &b), 0);
        assert_int_equal(b.head, PER_STREAM);
        assert_int_equal(b.first_retained, 1);
        /* the listener saw every (session, stream, seq) exactly once */
        for (int s = 1; s <= PER_STREAM; s++) {
            if (c.seen[k][s] != 1)
                print_error("%s/%s seq %d seen %d times\n", c_sess[k], c_strm[k], s, c.seen[k][s]);
            assert_int_equal(c.seen[k][s], 1);
        }
        /* dense seqs 1..PER_STREAM, each writer in order, callback seqs match */
        verify v = {.next = 1, .ws = ws, .k = k};
        for (int t = 0; t < N_THREADS; t++)
            v.last_i[t] = -1;
        assert_int_equal(tm_store_read(c.st, c_sess[k], c_strm[k], 0, PER_STREAM + 10, conc_visit, &v),
                         0);
        assert_int_equal(v.bad, 0);
        assert_int_equal(v.next, PER_STREAM + 1);
    }
    /* every callback seq is distinct within its stream */
    for (int k = 0; k < N_STREAMS; k++) {
        static int hit[PER_STREAM + 1];
        memset(hit, 0, sizeof hit);
        for (int t = 0; t < N_THREADS; t++)
            for (int i = 0; i < PER_THREAD; i++)
                if (i % N_STREAMS == k)
                    hit[ws[t].seq[i]]++;
        for (int s = 1; s <= PER_STREAM; s++)
            assert_int_equal(hit[s], 1);
    }
    tm_store_close(c.st);
    pthread_barrier_destroy(&c.go);
    pthread_mutex_destroy(&c.mu);
}

/* ---- application rows (atomic effects) -------------------------------------------- */

static int fx_row(void *ud, tm_txn *txn)
{
    json_t *row = json_pack("{s:s,s:i}", "k", (const char *)ud, "n", 7);
    int rc = tidemark_txn_insert(txn, "t.rows", row);
    json_decref(row);
    if (rc)
        return rc;
    return strcmp(ud, "bad") == 0 ? TIDEMARK_EINVAL : 0; /* fails after inserting */
}

static void test_effect_rows(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    const char *keys[] = {"x", "bad", "y"};
    for (int i = 0; i < 3; i++) {
        tm_append_req q = {.session = "a", .stream = "r1", .data = "ok", .len = 2,
                           .effect = fx_row, .effect_ud = (void *)keys[i],
                           .fallback = "no", .fallback_len = 2};
        assert_int_equal(tm_store_append_ex(st, &q), 0);
    }
    assert_int_equal(tm_store_sync(st), 0);
    json_t *rows = NULL;
    assert_int_equal(tm_store_rows(st, "t.rows", &rows), 0);
    assert_int_equal(json_array_size(rows), 2); /* the failed effect left no row */
    for (size_t i = 0; i < 2; i++) {
        json_t *row = json_array_get(rows, i);
        assert_int_equal(json_integer_value(json_object_get(row, "id")), (json_int_t)i + 1);
        assert_string_equal(json_string_value(json_object_get(row, "k")), i ? "y" : "x");
        assert_int_equal(json_integer_value(json_object_get(row, "n")), 7);
    }
    json_decref(rows);
    collected c = {0};
    read_all(st, "a", "r1", 0, 10, &c);
    assert_int_equal(c.n, 3);
    assert_memory_equal(c.data[1], "no", 2); /* ...and its fallback was written */
    json_t *bad = json_pack("{s:i}", "id", 1); /* "id" is the store's */
    tidemark_txn_t *none = NULL;
    assert_int_equal(tidemark_txn_insert(none, "t", bad), TIDEMARK_EINVAL);
    json_decref(bad);
    assert_int_equal(tm_store_rows(st, "", &rows), TIDEMARK_EINVAL);
    tm_store_close(st);
}

/* ---- session attributes ------------------------------------------------------------ */

static int count_sessions(void *ud, const tm_session_rec *rec)
{
    int *n = ud;
    if (rec->id && (strcmp(rec->id, "a") == 0 || strcmp(rec->id, "b") == 0))
        (*n)++;
    return 0;
}

static void test_session_attrs(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    mk_session(st, "b");
    tm_session_rec rec;
    assert_int_equal(tm_store_session_get(st, "a", &rec), 0);
    assert_null(rec.attrs); /* none yet */
    tm_session_rec_clear(&rec);
    assert_int_equal(tm_store_session_set_attr(st, "a", "log_level", "\"warning\""), 0);
    assert_int_equal(tm_store_session_set_attr(st, "a", "sub:test://x", "true"), 0);
    assert_int_equal(tm_store_session_set_attr(st, "a", "get", "true"), 0);
    assert_int_equal(tm_store_session_set_attr(st, "a", "get", NULL), 0); /* removed */
    assert_int_equal(tm_store_session_set_attr(st, "a", "log_level", "\"error\""), 0);
    assert_int_equal(tm_store_session_set_attr(st, "nope", "get", "true"), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_session_set_attr(st, "a", "bad", "{not json"), TIDEMARK_EINVAL);
    assert_int_equal(tm_store_session_get(st, "a", &rec), 0);
    json_t *attrs = json_loads(rec.attrs, 0, NULL);
    tm_session_rec_clear(&rec);
    json_t *want = json_pack("{s:s,s:b}", "log_level", "error", "sub:test://x", 1);
    assert_true(json_equal(attrs, want));
    json_decref(want);
    json_decref(attrs);
    int n = 0;
    assert_int_equal(tm_store_sessions_each(st, count_sessions, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(tm_store_session_delete(st, "a"), 0);
    n = 0;
    assert_int_equal(tm_store_sessions_each(st, count_sessions, &n), 0);
    assert_int_equal(n, 1);
    tm_store_close(st);
}

/* The sessions with an attribute: exactly those, each once (one with both
 * names too), and none once its attribute is removed or it is deleted. */
static int collect_ids(void *ud, const tm_session_rec *rec)
{
    json_t *seen = ud;
    json_object_set_new(seen, rec->id, json_integer(json_integer_value(json_object_get(seen, rec->id)) + 1));
    return 0;
}

/* Each visited session's attributes, as tm_session_rec_attrs reads them. */
static int collect_attrs(void *ud, const tm_session_rec *rec)
{
    json_object_set_new(ud, rec->id, tm_session_rec_attrs(rec));
    return 0;
}

static void test_sessions_with_attr(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    const char *ids[] = {"a", "b", "c", "d", "e"};
    for (size_t i = 0; i < 5; i++)
        mk_session(st, ids[i]);
    assert_int_equal(tm_store_session_set_attr(st, "a", "sub:test://x", "true"), 0);
    assert_int_equal(tm_store_session_set_attr(st, "b", "sub:test://y", "true"), 0);
    assert_int_equal(tm_store_session_set_attr(st, "c", "listen", "{\"f\":{}}"), 0);
    assert_int_equal(tm_store_session_set_attr(st, "d", "sub:test://x", "true"), 0);
    assert_int_equal(tm_store_session_set_attr(st, "d", "listen", "{\"f\":{}}"), 0);
    assert_int_equal(tm_store_session_set_attr(st, "e", "get", "true"), 0);
    const char *const names[] = {"sub:test://x", "listen"};
    json_t *seen = json_object();
    assert_int_equal(tm_store_sessions_with_attr(st, names, 2, collect_ids, seen), 0);
    json_t *want = json_pack("{s:i,s:i,s:i}", "a", 1, "c", 1, "d", 1);
    assert_true(json_equal(seen, want));
    json_decref(want);
    json_decref(seen);
    assert_int_equal(tm_store_session_set_attr(st, "a", "sub:test://x", NULL), 0);
    assert_int_equal(tm_store_session_delete(st, "c"), 0);
    seen = json_object();
    assert_int_equal(tm_store_sessions_with_attr(st, names, 2, collect_ids, seen), 0);
    want = json_pack("{s:i}", "d", 1);
    assert_true(json_equal(seen, want));
    json_decref(want);
    json_decref(seen);
    /* the visitor reads the attributes, whichever form the store gives */
    seen = json_object();
    assert_int_equal(tm_store_sessions_with_attr(st, names, 2, collect_attrs, seen), 0);
    want = json_pack("{s:{s:b,s:{s:{}}}}", "d", "sub:test://x", 1, "listen", "f");
    assert_true(json_equal(seen, want));
    json_decref(want);
    json_decref(seen);
    tm_store_close(st);
}

/* ---- request records ----------------------------------------------------------------- */

/* What requests_unfinished lists of the records this store's own process
 * left started: the SQLite store all of them (it is asked at start-up, when
 * the process that began them is gone); memory nothing (it never outlives
 * its process); Redis none while their node holds its lease. */
#ifndef TM_CONTRACT_LISTS_OWN_STARTED
#define TM_CONTRACT_LISTS_OWN_STARTED 0
#endif

static void begin_rec(tm_store *st, const char *session, const char *key, const char *stream,
                      int wait)
{
    tm_request_rec r = {.session = (char *)session, .key = (char *)key, .tool = "slow",
                        .stream = (char *)stream, .message = "{\"id\":1}"};
    assert_int_equal(tm_store_request_begin(st, &r, wait), 0);
}

/* The result event completes the record through its request_key. */
static void complete_rec(tm_store *st, const char *session, const char *stream, const char *key,
                         const void *resp, size_t len)
{
    tm_append_req q = {.session = session, .stream = stream, .data = resp, .len = len,
                       .flags = TM_APPEND_FINAL, .request_key = key};
    assert_int_equal(tm_store_append_ex(st, &q), 0);
    assert_int_equal(tm_store_sync(st), 0);
}

static void expect_rec(tm_store *st, const char *session, const char *key, int state,
                       const void *resp, size_t len)
{
    tm_request_rec got;
    assert_int_equal(tm_store_request_get(st, session, key, &got), 0);
    assert_string_equal(got.session, session);
    assert_string_equal(got.key, key);
    assert_int_equal(got.state, state);
    assert_string_equal(got.tool, "slow");
    assert_string_equal(got.message, "{\"id\":1}");
    assert_true(got.updated_ms > 0);
    if (resp) {
        assert_int_equal(got.response_len, len);
        assert_memory_equal(got.response, resp, len);
    } else {
        assert_null(got.response);
    }
    tm_request_rec_clear(&got);
}

static void test_request_begin_get(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    mk_session(st, "b");
    open_stream(st, "a", NULL, "r1");
    begin_rec(st, "a", "i:1", "r1", 1);
    expect_rec(st, "a", "i:1", TM_REQ_STARTED, NULL, 0);
    tm_request_rec got;
    assert_int_equal(tm_store_request_get(st, "a", "i:1", &got), 0);
    assert_string_equal(got.stream, "r1");
    tm_request_rec_clear(&got);
    /* a second begin of the key is refused and changes nothing */
    tm_request_rec dup = {.session = "a", .key = "i:1", .tool = "other", .stream = "r9"};
    assert_int_equal(tm_store_request_begin(st, &dup, 1), TIDEMARK_EEXIST);
    int rc = tm_store_request_begin(st, &dup, 0); /* not waited for: refused now or dropped */
    assert_true(rc == 0 || rc == TIDEMARK_EEXIST);
    assert_int_equal(tm_store_sync(st), 0); /* a duplicate is no failure of the store */
    expect_rec(st, "a", "i:1", TM_REQ_STARTED, NULL, 0);
    /* not waited for: there once a barrier passed */
    begin_rec(st, "a", "s:x", "r1", 0);
    assert_int_equal(tm_store_sync(st), 0);
    expect_rec(st, "a", "s:x", TM_REQ_STARTED, NULL, 0);
    /* keys are per session */
    assert_int_equal(tm_store_request_get(st, "a", "i:2", &got), TIDEMARK_ENOTFOUND);
    assert_null(got.key);
    assert_int_equal(tm_store_request_get(st, "b", "i:1", &got), TIDEMARK_ENOTFOUND);
    begin_rec(st, "b", "i:1", "r1", 1);
    expect_rec(st, "b", "i:1", TM_REQ_STARTED, NULL, 0);
    tm_store_close(st);
}

static void test_request_complete(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    open_stream(st, "a", NULL, "r2");
    begin_rec(st, "a", "i:7", "r1", 1);
    static const char resp[] = {'{', '"', 'r', '"', ':', '\0', '1', '}'}; /* bytes as they are */
    complete_rec(st, "a", "r1", "i:7", resp, sizeof resp);
    expect_rec(st, "a", "i:7", TM_REQ_COMPLETED, resp, sizeof resp);
    tm_request_rec again = {.session = "a", .key = "i:7", .stream = "r1"};
    assert_int_equal(tm_store_request_begin(st, &again, 1), TIDEMARK_EEXIST);
    expect_rec(st, "a", "i:7", TM_REQ_COMPLETED, resp, sizeof resp);
    /* a request_key naming no record makes none */
    complete_rec(st, "a", "r2", "i:8", "{}", 2);
    tm_request_rec got;
    assert_int_equal(tm_store_request_get(st, "a", "i:8", &got), TIDEMARK_ENOTFOUND);
    tm_store_close(st);
}

/* A session and one of its records read together: the same as the two
 * reads alone (Redis makes them one round trip). */
static void test_session_request_get(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    begin_rec(st, "a", "i:7", "r1", 1);
    static const char resp[] = {'{', '"', 'r', '"', ':', '\0', '1', '}'};
    complete_rec(st, "a", "r1", "i:7", resp, sizeof resp);
    tm_session_rec s;
    tm_request_rec q;
    int qrc = -1;
    assert_int_equal(tm_store_session_request_get(st, "a", "i:7", &s, &q, &qrc), 0);
    assert_string_equal(s.id, "a");
    assert_string_equal(s.protocol_version, "2025-06-18");
    assert_string_equal(s.client, "{\"clientInfo\":{\"name\":\"t\"}}");
    assert_int_equal(qrc, 0);
    assert_string_equal(q.session, "a");
    assert_string_equal(q.key, "i:7");
    assert_int_equal(q.state, TM_REQ_COMPLETED);
    assert_string_equal(q.stream, "r1");
    assert_int_equal(q.response_len, sizeof resp);
    assert_memory_equal(q.response, resp, sizeof resp);
    tm_session_rec_clear(&s);
    tm_request_rec_clear(&q);
    /* no record under the key: the session all the same */
    assert_int_equal(tm_store_session_request_get(st, "a", "i:8", &s, &q, &qrc), 0);
    assert_string_equal(s.id, "a");
    assert_int_equal(qrc, TIDEMARK_ENOTFOUND);
    assert_null(q.key);
    tm_session_rec_clear(&s);
    /* no session: its record is not known */
    assert_int_equal(tm_store_session_request_get(st, "zz", "i:7", &s, &q, &qrc), TIDEMARK_ENOTFOUND);
    assert_int_equal(qrc, 1);
    assert_null(q.key);
    tm_store_close(st);
}

typedef struct rec_seen {
    int n, stop_at;
    char what[8][64]; /* "session key stream" */
} rec_seen;

static int see_rec(void *ud, const tm_request_rec *r)
{
    rec_seen *l = ud;
    if (l->n < 8)
        snprintf(l->what[l->n], sizeof l->what[0], "%s %s %s", r->session, r->key,
                 r->stream ? r->stream : "-");
    l->n++;
    return l->stop_at && l->n >= l->stop_at;
}

static void test_requests_unfinished(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    mk_session(st, "b");
    open_stream(st, "a", NULL, "r1");
    open_stream(st, "a", NULL, "r2");
    open_stream(st, "b", NULL, "r1");
    begin_rec(st, "a", "i:1", "r2", 1);
    begin_rec(st, "a", "s:x", "r1", 0);
    begin_rec(st, "b", "k:b%2F7", "r1", 1);
    complete_rec(st, "a", "r2", "i:1", "{}", 2); /* completed: never listed */
    rec_seen l = {0};
    assert_int_equal(tm_store_requests_unfinished(st, see_rec, &l), 0);
#if TM_CONTRACT_LISTS_OWN_STARTED
    assert_int_equal(l.n, 2); /* ordered by session, then stream */
    assert_string_equal(l.what[0], "a s:x r1");
    assert_string_equal(l.what[1], "b k:b%2F7 r1");
    rec_seen one = {.stop_at = 1};
    assert_int_equal(tm_store_requests_unfinished(st, see_rec, &one), 0);
    assert_int_equal(one.n, 1); /* the visitor stops it */
#else
    assert_int_equal(l.n, 0);
#endif
    /* a started record of a live process: claimed by nobody else; a store
     * without other nodes has nothing to claim from */
    int shared = tm_store_shared(st);
    assert_int_equal(tm_store_request_claim(st, "a", "s:x"), shared ? TIDEMARK_EBUSY : 0);
    if (shared) {
        assert_int_equal(tm_store_request_claim(st, "a", "i:1"), TIDEMARK_EBUSY); /* completed */
        assert_int_equal(tm_store_request_claim(st, "a", "i:404"), TIDEMARK_ENOTFOUND);
    }
    /* a record dies with its session */
    assert_int_equal(tm_store_session_delete(st, "b"), 0);
    tm_request_rec got;
    assert_int_equal(tm_store_request_get(st, "b", "k:b%2F7", &got), TIDEMARK_ENOTFOUND);
    memset(&l, 0, sizeof l);
    assert_int_equal(tm_store_requests_unfinished(st, see_rec, &l), 0);
    assert_int_equal(l.n, TM_CONTRACT_LISTS_OWN_STARTED ? 1 : 0);
    tm_store_close(st);
}

/* Keys are exact whatever their bytes (ids are escaped into keys, "%00" for
 * a NUL, so a key is text; any other byte may appear) and whatever their
 * length up to an escaped 1024-byte id (3 KB). */
static void test_request_keys_any_bytes(void **state)
{
    (void)state;
    enum { NKEYS = 9, LONG = 3074 };
    static char keys[NKEYS][LONG + 1];
    snprintf(keys[0], LONG + 1, "s:a%%00b");
    snprintf(keys[1], LONG + 1, "s:a%%00c");
    snprintf(keys[2], LONG + 1, "s:a");
    snprintf(keys[3], LONG + 1, "s:%%25%%00%%25");
    snprintf(keys[4], LONG + 1, "k:{x}:y/z \t\"'\\*?[]");
    snprintf(keys[5], LONG + 1, "s:\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    for (int i = 1; i < 256; i++) /* every byte but NUL */
        keys[6][i - 1] = (char)i;
    for (int k = 7; k < NKEYS; k++) { /* two 3 KB keys differing in their last byte only */
        memcpy(keys[k], "s:", 2);
        for (int i = 2; i < LONG; i++)
            keys[k][i] = "%00ab{}/:"[i % 9];
        keys[k][LONG - 1] = (char)('x' + k);
        keys[k][LONG] = '\0';
    }
    tm_store *st = open_store(0);
    mk_session(st, "a");
    char name[NKEYS][TM_STREAM_MAX];
    for (int k = 0; k < NKEYS; k++) {
        assert_int_equal(tm_store_stream_open(st, "a", NULL, name[k]), 0);
        begin_rec(st, "a", keys[k], name[k], 1);
    }
    for (int k = 0; k < NKEYS; k++) {
        tm_request_rec dup = {.session = "a", .key = keys[k]};
        assert_int_equal(tm_store_request_begin(st, &dup, 1), TIDEMARK_EEXIST);
        expect_rec(st, "a", keys[k], TM_REQ_STARTED, NULL, 0);
    }
    for (int k = 0; k < NKEYS; k += 2) { /* every other one completes */
        char resp[16];
        int n = snprintf(resp, sizeof resp, "{\"k\":%d}", k);
        complete_rec(st, "a", name[k], keys[k], resp, (size_t)n);
    }
    for (int k = 0; k < NKEYS; k++) {
        char resp[16];
        int n = snprintf(resp, sizeof resp, "{\"k\":%d}", k);
        if (k % 2 == 0)
            expect_rec(st, "a", keys[k], TM_REQ_COMPLETED, resp, (size_t)n);
        else
            expect_rec(st, "a", keys[k], TM_REQ_STARTED, NULL, 0);
    }
    tm_store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_create_get),
        cmocka_unit_test(test_session_touch),
        cmocka_unit_test(test_session_delete),
        cmocka_unit_test(test_stream_open_numbering),
        cmocka_unit_test(test_stream_g_reopen_keeps_seqs),
        cmocka_unit_test(test_append_seqs_cb_listener),
        cmocka_unit_test(test_append_final_closes),
        cmocka_unit_test(test_close_stream),
        cmocka_unit_test(test_read_order_and_limits),
        cmocka_unit_test(test_read_after_max_seq),
        cmocka_unit_test(test_bytes_exact),
        cmocka_unit_test(test_retention_trimming),
        cmocka_unit_test(test_retention_long_run),
        cmocka_unit_test(test_event_epoch_untrimmed),
        cmocka_unit_test(test_concurrent_appends),
        cmocka_unit_test(test_effect_rows),
        cmocka_unit_test(test_session_attrs),
        cmocka_unit_test(test_sessions_with_attr),
        cmocka_unit_test(test_request_begin_get),
        cmocka_unit_test(test_request_complete),
        cmocka_unit_test(test_session_request_get),
        cmocka_unit_test(test_requests_unfinished),
        cmocka_unit_test(test_request_keys_any_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
