/* test_resume.c - the resume table (docs/design.md, "The contract", item 4) over the memory store. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "log/resume.h"
#include "log/store.h"
#include "tidemark/tidemark.h"

#include <stdio.h>
#include <string.h>

typedef struct fixture {
    tm_store *st;
    char epoch[TM_EPOCH_LEN + 1];
    char forged[TM_EPOCH_LEN + 1]; /* a valid epoch that is not the store's */
} fixture;

static void mk_session(tm_store *st, const char *id)
{
    tm_session_rec rec = {.id = (char *)id, .protocol_version = "2025-11-25", .client = "{}"};
    assert_int_equal(tm_store_session_create(st, &rec), 0);
}

static void open_stream(tm_store *st, const char *session, const char *name, const char *want)
{
    char out[TM_STREAM_MAX];
    assert_int_equal(tm_store_stream_open(st, session, name, out), 0);
    assert_string_equal(out, want);
}

static void append_n(tm_store *st, const char *session, const char *stream, int n)
{
    for (int i = 0; i < n; i++) {
        char msg[32];
        int len = snprintf(msg, sizeof msg, "{\"n\":%d}", i);
        assert_int_equal(tm_store_append(st, session, stream, msg, (size_t)len, 0, NULL, NULL), 0);
    }
}

/*
 * Store retaining 5 events per stream.
 *   s1: r1 with 10 events (first_retained 6, head 10, trim record for 5)
 *       r2 with 3 events (nothing trimmed)
 *       g  with no events
 *   s2: r1, r2, r3 (r3 exists only in s2), g with 1 event
 */
static int setup(void **state)
{
    static fixture f;
    memset(&f, 0, sizeof f);
    tm_store_options opts = {.retain_events = 5};
    if (tm_store_open("memory", &opts, &f.st) != 0)
        return -1;
    snprintf(f.epoch, sizeof f.epoch, "%s", tm_store_epoch(f.st));
    snprintf(f.forged, sizeof f.forged, "%s", f.epoch);
    f.forged[TM_EPOCH_LEN - 1] = f.forged[TM_EPOCH_LEN - 1] == '0' ? '1' : '0';

    mk_session(f.st, "s1");
    mk_session(f.st, "s2");
    open_stream(f.st, "s1", NULL, "r1");
    open_stream(f.st, "s1", NULL, "r2");
    open_stream(f.st, "s1", "g", "g");
    open_stream(f.st, "s2", NULL, "r1");
    open_stream(f.st, "s2", NULL, "r2");
    open_stream(f.st, "s2", NULL, "r3");
    open_stream(f.st, "s2", "g", "g");
    append_n(f.st, "s1", "r1", 10);
    append_n(f.st, "s1", "r2", 3);
    append_n(f.st, "s2", "r3", 4);
    append_n(f.st, "s2", "g", 1);

    tm_stream_bounds b;
    if (tm_store_bounds(f.st, "s1", "r1", &b) != 0 || b.first_retained != 6 || b.head != 10)
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    tm_store_close(f->st);
    return 0;
}

/* A cursor as the server would have sent it to session: ids carry the
 * writer epoch mixed with the session (tm_epoch_for_session). */
static void decide(fixture *f, const char *session, const char *epoch, const char *stream,
                   uint64_t seq, tm_resume_decision *d)
{
    char cur[TM_EVENT_ID_MAX], seen[TM_EPOCH_LEN + 1];
    tm_epoch_for_session(epoch, session, seen);
    assert_true(tm_event_id_format(cur, sizeof cur, seen, stream, seq) > 0);
    memset(d, 0x5a, sizeof *d);
    assert_int_equal(tm_resume_decide(f->st, session, cur, d), 0);
}

static void test_reason_strings(void **state)
{
    (void)state;
    assert_string_equal(tm_resume_reason(TM_RESUME_MALFORMED), "malformed_cursor");
    assert_string_equal(tm_resume_reason(TM_RESUME_UNKNOWN_STREAM), "unknown_stream");
    assert_string_equal(tm_resume_reason(TM_RESUME_AHEAD), "cursor_ahead");
    assert_string_equal(tm_resume_reason(TM_RESUME_GAP), "resumption_gap");
    assert_string_equal(tm_resume_reason(TM_RESUME_EPOCH), "epoch_mismatch");
}

static void test_malformed_cursor(void **state)
{
    fixture *f = *state;
    char buf[80];
    const char *bad[] = {"", "garbage", "1041", "9F86D081884C7D65-r1-1", "-r1-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tm_resume_decision d;
        memset(&d, 0x5a, sizeof d);
        assert_int_equal(tm_resume_decide(f->st, "s1", bad[i], &d), 0);
        assert_int_equal(d.outcome, TM_RESUME_MALFORMED);
        assert_string_equal(tm_resume_reason(d.outcome), "malformed_cursor");
    }
    /* the store's own epoch does not rescue a malformed stream or seq */
    snprintf(buf, sizeof buf, "%s-r01-3", f->epoch);
    tm_resume_decision d;
    assert_int_equal(tm_resume_decide(f->st, "s1", buf, &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_MALFORMED);
    snprintf(buf, sizeof buf, "%s-r1-0", f->epoch);
    assert_int_equal(tm_resume_decide(f->st, "s1", buf, &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_MALFORMED);
    snprintf(buf, sizeof buf, "%s-r1-7 ", f->epoch);
    assert_int_equal(tm_resume_decide(f->st, "s1", buf, &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_MALFORMED);
    /* NULL cursor */
    assert_int_equal(tm_resume_decide(f->st, "s1", NULL, &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_MALFORMED);
}

/* A cursor with an empty seq ("<epoch>-r1-") is malformed, not seq 0. */
static void test_malformed_cursor_empty_seq(void **state)
{
    fixture *f = *state;
    char buf[80];
    tm_resume_decision d;
    snprintf(buf, sizeof buf, "%s-r1-", f->epoch);
    assert_int_equal(tm_resume_decide(f->st, "s1", buf, &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_MALFORMED);
    snprintf(buf, sizeof buf, "%s-g-", f->epoch);
    assert_int_equal(tm_resume_decide(f->st, "s1", buf, &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_MALFORMED);
}

static void test_unknown_stream(void **state)
{
    fixture *f = *state;
    tm_resume_decision d;
    /* r3 exists, with events, but only in s2: no oracle */
    decide(f, "s1", f->epoch, "r3", 1, &d);
    assert_int_equal(d.outcome, TM_RESUME_UNKNOWN_STREAM);
    assert_string_equal(tm_resume_reason(d.outcome), "unknown_stream");
    assert_string_equal(d.stream, "r3");
    /* same answer for a stream that exists nowhere */
    decide(f, "s1", f->epoch, "r9", 1, &d);
    assert_int_equal(d.outcome, TM_RESUME_UNKNOWN_STREAM);
    /* same answer whatever the epoch and seq, so nothing leaks about s2's r3 */
    decide(f, "s1", f->forged, "r3", 4, &d);
    assert_int_equal(d.outcome, TM_RESUME_UNKNOWN_STREAM);
    decide(f, "s1", f->epoch, "r3", 999, &d);
    assert_int_equal(d.outcome, TM_RESUME_UNKNOWN_STREAM);
    /* an unknown session has no streams */
    decide(f, "nope", f->epoch, "r1", 1, &d);
    assert_int_equal(d.outcome, TM_RESUME_UNKNOWN_STREAM);
    /* s2's r3 itself is fine from s2 */
    decide(f, "s2", f->epoch, "r3", 4, &d);
    assert_int_equal(d.outcome, TM_RESUME_OK);
}

/* A verifier that knows one mac per session: "<session padded with A>". */
static int fake_verify(void *ud, const char *session, const tm_event_id *id)
{
    int *calls = ud;
    ++*calls;
    char want[TM_EVENT_MAC_LEN + 1];
    snprintf(want, sizeof want, "%sAAAAAAAAAAAA", session);
    return strcmp(id->mac, want) == 0;
}

static tm_resume_outcome decide_auth(fixture *f, const char *session, const char *stream,
                                     uint64_t seq, const char *mac, int *calls)
{
    char cur[TM_EVENT_ID_MAX], seen[TM_EPOCH_LEN + 1];
    tm_epoch_for_session(f->epoch, session, seen);
    assert_true(tm_event_id_format_mac(cur, sizeof cur, seen, stream, seq, mac) > 0);
    tm_id_auth auth = {.verify = fake_verify, .ud = calls};
    tm_resume_decision d;
    assert_int_equal(tm_resume_decide_auth(f->st, session, cur, &auth, &d), 0);
    return d.outcome;
}

/* With auth: a mac that does not verify is malformed before any other row;
 * cursor_ahead only for an id whose mac verifies; an id without a mac
 * still resumes at or below the head but is never cursor_ahead. */
static void test_auth(void **state)
{
    fixture *f = *state;
    int calls = 0;
    const char *good = "s1AAAAAAAAAA", *bad = "s2AAAAAAAAAA";
    assert_int_equal(decide_auth(f, "s1", "r1", 11, good, &calls), TM_RESUME_AHEAD);
    assert_int_equal(decide_auth(f, "s1", "r1", 11, bad, &calls), TM_RESUME_MALFORMED);
    assert_int_equal(decide_auth(f, "s1", "r1", 11, "", &calls), TM_RESUME_MALFORMED);
    assert_int_equal(decide_auth(f, "s1", "g", 1, "", &calls), TM_RESUME_MALFORMED);
    assert_int_equal(decide_auth(f, "s1", "r1", 999999999999999999ULL, bad, &calls),
                     TM_RESUME_MALFORMED);
    /* a bad mac is malformed even where the stream is unknown */
    assert_int_equal(decide_auth(f, "s1", "r3", 1, bad, &calls), TM_RESUME_MALFORMED);
    assert_int_equal(decide_auth(f, "s1", "r3", 1, good, &calls), TM_RESUME_UNKNOWN_STREAM);
    assert_int_equal(decide_auth(f, "s1", "r3", 1, "", &calls), TM_RESUME_UNKNOWN_STREAM);
    /* at or below the head the other rows answer, with or without a mac */
    assert_int_equal(decide_auth(f, "s1", "r1", 8, good, &calls), TM_RESUME_OK);
    assert_int_equal(decide_auth(f, "s1", "r1", 8, "", &calls), TM_RESUME_OK);
    assert_int_equal(decide_auth(f, "s1", "r1", 2, "", &calls), TM_RESUME_GAP);
    assert_int_equal(calls, 6); /* asked only for ids that carry a mac */
}

static void test_cursor_ahead(void **state)
{
    fixture *f = *state;
    tm_resume_decision d;
    decide(f, "s1", f->epoch, "r1", 11, &d);
    assert_int_equal(d.outcome, TM_RESUME_AHEAD);
    assert_string_equal(tm_resume_reason(d.outcome), "cursor_ahead");
    assert_int_equal(d.head, 10);
    assert_int_equal(d.cursor_seq, 11);
    assert_string_equal(d.stream, "r1");
    decide(f, "s1", f->epoch, "r1", 999999999999999999ULL, &d);
    assert_int_equal(d.outcome, TM_RESUME_AHEAD);
    /* ahead wins over a forged epoch (row order) */
    decide(f, "s1", f->forged, "r1", 11, &d);
    assert_int_equal(d.outcome, TM_RESUME_AHEAD);
    /* a stream with no events: any seq is ahead */
    decide(f, "s1", f->epoch, "g", 1, &d);
    assert_int_equal(d.outcome, TM_RESUME_AHEAD);
    assert_int_equal(d.head, 0);
    /* an empty POST stream of s2 too */
    decide(f, "s2", f->epoch, "r1", 1, &d);
    assert_int_equal(d.outcome, TM_RESUME_AHEAD);
}

static void test_resumption_gap(void **state)
{
    fixture *f = *state;
    tm_resume_decision d;
    /* retained 6..10, trim record at 5: seqs 1..4 cannot be resumed */
    decide(f, "s1", f->epoch, "r1", 4, &d);
    assert_int_equal(d.outcome, TM_RESUME_GAP);
    assert_string_equal(tm_resume_reason(d.outcome), "resumption_gap");
    assert_int_equal(d.gap_from, 5);
    assert_int_equal(d.gap_to, 5);
    assert_int_equal(d.after_seq, 5);
    assert_int_equal(d.head, 10);
    assert_int_equal(d.cursor_seq, 4);
    assert_string_equal(d.stream, "r1");

    decide(f, "s1", f->epoch, "r1", 1, &d);
    assert_int_equal(d.outcome, TM_RESUME_GAP);
    assert_int_equal(d.gap_from, 2);
    assert_int_equal(d.gap_to, 5);
    assert_int_equal(d.after_seq, 5);
    assert_int_equal(d.head, 10);
    assert_int_equal(d.cursor_seq, 1);

    decide(f, "s1", f->epoch, "r1", 3, &d);
    assert_int_equal(d.outcome, TM_RESUME_GAP);
    assert_int_equal(d.gap_from, 4);
    assert_int_equal(d.gap_to, 5);
    assert_int_equal(d.after_seq, 5);

    /* gap is decided before the epoch (row order) */
    decide(f, "s1", f->forged, "r1", 2, &d);
    assert_int_equal(d.outcome, TM_RESUME_GAP);
    assert_int_equal(d.gap_from, 3);
    assert_int_equal(d.gap_to, 5);
}

static void test_gap_moves_with_trimming(void **state)
{
    fixture *f = *state;
    /* a fresh stream so other tests keep their layout */
    char name[TM_STREAM_MAX];
    assert_int_equal(tm_store_stream_open(f->st, "s1", NULL, name), 0);
    append_n(f->st, "s1", name, 100);
    tm_resume_decision d;
    decide(f, "s1", f->epoch, name, 7, &d);
    assert_int_equal(d.outcome, TM_RESUME_GAP);
    assert_int_equal(d.gap_from, 8);
    assert_int_equal(d.gap_to, 95);
    assert_int_equal(d.after_seq, 95);
    assert_int_equal(d.head, 100);
    decide(f, "s1", f->epoch, name, 94, &d);
    assert_int_equal(d.outcome, TM_RESUME_GAP);
    assert_int_equal(d.gap_from, 95);
    assert_int_equal(d.gap_to, 95);
    decide(f, "s1", f->epoch, name, 95, &d);
    assert_int_equal(d.outcome, TM_RESUME_OK);
    assert_int_equal(d.after_seq, 95);
    decide(f, "s1", f->epoch, name, 96, &d);
    assert_int_equal(d.outcome, TM_RESUME_OK);
    assert_int_equal(d.after_seq, 96);
}

static void test_epoch_mismatch(void **state)
{
    fixture *f = *state;
    tm_resume_decision d;
    /* retained seqs */
    for (uint64_t seq = 6; seq <= 10; seq++) {
        decide(f, "s1", f->forged, "r1", seq, &d);
        assert_int_equal(d.outcome, TM_RESUME_EPOCH);
        assert_string_equal(tm_resume_reason(d.outcome), "epoch_mismatch");
        assert_int_equal(d.cursor_seq, seq);
        assert_string_equal(d.stream, "r1");
    }
    /* the boundary seq first_retained-1, whose epoch comes from the trim record */
    tm_stream_bounds b;
    assert_int_equal(tm_store_bounds(f->st, "s1", "r1", &b), 0);
    assert_string_equal(b.trimmed_epoch, f->epoch);
    decide(f, "s1", f->forged, "r1", 5, &d);
    assert_int_equal(d.outcome, TM_RESUME_EPOCH);
    /* a stream that never trimmed */
    decide(f, "s1", f->forged, "r2", 1, &d);
    assert_int_equal(d.outcome, TM_RESUME_EPOCH);
    decide(f, "s1", f->forged, "r2", 3, &d);
    assert_int_equal(d.outcome, TM_RESUME_EPOCH);
    /* all-zero and all-f epochs are valid syntax but not ours */
    const char *zeros = "0000000000000000", *effs = "ffffffffffffffff";
    if (strcmp(f->epoch, zeros) != 0) {
        decide(f, "s1", zeros, "r1", 8, &d);
        assert_int_equal(d.outcome, TM_RESUME_EPOCH);
    }
    if (strcmp(f->epoch, effs) != 0) {
        decide(f, "s1", effs, "r1", 8, &d);
        assert_int_equal(d.outcome, TM_RESUME_EPOCH);
    }
}

static void test_ok(void **state)
{
    fixture *f = *state;
    tm_resume_decision d;
    for (uint64_t seq = 6; seq <= 9; seq++) {
        decide(f, "s1", f->epoch, "r1", seq, &d);
        assert_int_equal(d.outcome, TM_RESUME_OK);
        assert_string_equal(tm_resume_reason(d.outcome), "ok");
        assert_int_equal(d.after_seq, seq);
        assert_int_equal(d.cursor_seq, seq);
        assert_int_equal(d.head, 10);
        assert_string_equal(d.stream, "r1");
    }
    /* untrimmed stream: every seq from 1 */
    for (uint64_t seq = 1; seq <= 3; seq++) {
        decide(f, "s1", f->epoch, "r2", seq, &d);
        assert_int_equal(d.outcome, TM_RESUME_OK);
        assert_int_equal(d.after_seq, seq);
        assert_int_equal(d.head, 3);
    }
    /* the GET stream */
    decide(f, "s2", f->epoch, "g", 1, &d);
    assert_int_equal(d.outcome, TM_RESUME_OK);
    assert_int_equal(d.after_seq, 1);
    assert_string_equal(d.stream, "g");
}

static int count_visit(void *ud, const tm_event *ev)
{
    (void)ev;
    (*(int *)ud)++;
    return 0;
}

static void test_boundary_cursor_at_head(void **state)
{
    fixture *f = *state;
    tm_resume_decision d;
    decide(f, "s1", f->epoch, "r1", 10, &d);
    assert_int_equal(d.outcome, TM_RESUME_OK);
    assert_int_equal(d.after_seq, 10);
    assert_int_equal(d.head, 10);
    /* nothing to replay */
    int n = 0;
    assert_int_equal(tm_store_read(f->st, "s1", "r1", d.after_seq, 100, count_visit, &n), 0);
    assert_int_equal(n, 0);
}

static void test_boundary_first_retained_minus_one(void **state)
{
    fixture *f = *state;
    tm_resume_decision d;
    /* seq 5 is trimmed, but its trim record proves the epoch: OK, not a gap */
    decide(f, "s1", f->epoch, "r1", 5, &d);
    assert_int_equal(d.outcome, TM_RESUME_OK);
    assert_int_equal(d.after_seq, 5);
    assert_int_equal(d.cursor_seq, 5);
    assert_int_equal(d.head, 10);
    assert_int_equal(d.gap_from, 0);
    assert_int_equal(d.gap_to, 0);
    /* replay is exactly 6..10 */
    int n = 0;
    assert_int_equal(tm_store_read(f->st, "s1", "r1", d.after_seq, 100, count_visit, &n), 0);
    assert_int_equal(n, 5);
}

static void test_no_retention_store(void **state)
{
    (void)state;
    tm_store *st;
    tm_store_options opts = {.retain_events = 0};
    assert_int_equal(tm_store_open("memory", &opts, &st), 0);
    mk_session(st, "s");
    open_stream(st, "s", NULL, "r1");
    append_n(st, "s", "r1", 50);
    fixture f = {.st = st};
    snprintf(f.epoch, sizeof f.epoch, "%s", tm_store_epoch(st));
    tm_resume_decision d;
    decide(&f, "s", f.epoch, "r1", 1, &d);
    assert_int_equal(d.outcome, TM_RESUME_OK);
    assert_int_equal(d.after_seq, 1);
    decide(&f, "s", f.epoch, "r1", 50, &d);
    assert_int_equal(d.outcome, TM_RESUME_OK);
    decide(&f, "s", f.epoch, "r1", 51, &d);
    assert_int_equal(d.outcome, TM_RESUME_AHEAD);

    /* an id from another store (another writer generation) is a mismatch */
    tm_store *other;
    assert_int_equal(tm_store_open("memory", &opts, &other), 0);
    decide(&f, "s", tm_store_epoch(other), "r1", 10, &d);
    assert_int_equal(d.outcome, TM_RESUME_EPOCH);
    tm_store_close(other);
    tm_store_close(st);
}

/* ---- a scripted backend, for rows the memory store cannot reach ---------- */

typedef struct fake_store {
    tm_store base;
    int bounds_rc;
    tm_stream_bounds b;
    int epoch_rc;
    char epoch[TM_EPOCH_LEN + 1];
    int epoch_calls;
} fake_store;

static int fake_bounds(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out)
{
    (void)session;
    (void)stream;
    fake_store *f = (fake_store *)st;
    if (f->bounds_rc == 0)
        *out = f->b;
    return f->bounds_rc;
}

static int fake_event_epoch(tm_store *st, const char *session, const char *stream, uint64_t seq,
                            char out[TM_EPOCH_LEN + 1])
{
    (void)session;
    (void)stream;
    (void)seq;
    fake_store *f = (fake_store *)st;
    f->epoch_calls++;
    if (f->epoch_rc == 0)
        memcpy(out, f->epoch, sizeof f->epoch);
    return f->epoch_rc;
}

static const struct tm_store_ops fake_ops = {
    .name = "fake",
    .bounds = fake_bounds,
    .event_epoch = fake_event_epoch,
};

#define FAKE_EPOCH "0123456789abcdef"

static void fake_init(fake_store *f)
{
    memset(f, 0, sizeof *f);
    f->base.ops = &fake_ops;
    snprintf(f->base.epoch, sizeof f->base.epoch, "%s", FAKE_EPOCH);
    f->b.first_retained = 6;
    f->b.head = 10;
    snprintf(f->epoch, sizeof f->epoch, "%s", FAKE_EPOCH);
}

/* No trim record for first_retained-1: the epoch cannot be proven, so the
 * answer fails closed (epoch_mismatch), never OK. */
static void test_unknown_epoch_fails_closed(void **state)
{
    (void)state;
    fake_store f;
    fake_init(&f);
    f.epoch_rc = TIDEMARK_ENOTFOUND;
    tm_resume_decision d;
    assert_int_equal(tm_resume_decide(&f.base, "s", FAKE_EPOCH "-r1-5", &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_EPOCH);
    assert_int_equal(tm_resume_decide(&f.base, "s", FAKE_EPOCH "-r1-8", &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_EPOCH);
    /* with the epoch known, the cursor this session was sent resumes (ids
     * carry the writer epoch mixed with the session) */
    f.epoch_rc = 0;
    char seen[TM_EPOCH_LEN + 1], cur[TM_EVENT_ID_MAX];
    tm_epoch_for_session(FAKE_EPOCH, "s", seen);
    assert_true(tm_event_id_format(cur, sizeof cur, seen, "r1", 5) > 0);
    assert_int_equal(tm_resume_decide(&f.base, "s", cur, &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_OK);
    assert_int_equal(d.after_seq, 5);
}

/* Store failures are returned, not turned into an outcome. */
static void test_store_errors_propagate(void **state)
{
    (void)state;
    fake_store f;
    fake_init(&f);
    tm_resume_decision d;
    f.bounds_rc = TIDEMARK_EIO;
    assert_int_equal(tm_resume_decide(&f.base, "s", FAKE_EPOCH "-r1-8", &d), TIDEMARK_EIO);
    f.bounds_rc = 0;
    f.epoch_rc = TIDEMARK_EIO;
    assert_int_equal(tm_resume_decide(&f.base, "s", FAKE_EPOCH "-r1-8", &d), TIDEMARK_EIO);
    /* rows decided before the epoch lookup do not touch it */
    f.epoch_calls = 0;
    assert_int_equal(tm_resume_decide(&f.base, "s", FAKE_EPOCH "-r1-11", &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_AHEAD);
    assert_int_equal(tm_resume_decide(&f.base, "s", FAKE_EPOCH "-r1-2", &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_GAP);
    assert_int_equal(f.epoch_calls, 0);
}

/* A cursor sent to one session names nothing in another session, even when
 * that session has a stream of the same name at that seq. */
static void test_foreign_session_cursor(void **state)
{
    fixture *f = *state;
    char cur[TM_EVENT_ID_MAX], seen[TM_EPOCH_LEN + 1];
    tm_resume_decision d;
    /* s1 has r2 with seq 1; s2 has a stream named r2 too */
    tm_epoch_for_session(f->epoch, "s2", seen);
    assert_true(tm_event_id_format(cur, sizeof cur, seen, "r2", 1) > 0);
    assert_int_equal(tm_resume_decide(f->st, "s1", cur, &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_EPOCH);
    tm_epoch_for_session(f->epoch, "s1", seen);
    assert_true(tm_event_id_format(cur, sizeof cur, seen, "r2", 1) > 0);
    assert_int_equal(tm_resume_decide(f->st, "s1", cur, &d), 0);
    assert_int_equal(d.outcome, TM_RESUME_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reason_strings),
        cmocka_unit_test_setup_teardown(test_malformed_cursor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_cursor_empty_seq, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_session_cursor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cursor_ahead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resumption_gap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gap_moves_with_trimming, setup, teardown),
        cmocka_unit_test_setup_teardown(test_epoch_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(test_boundary_cursor_at_head, setup, teardown),
        cmocka_unit_test_setup_teardown(test_boundary_first_retained_minus_one, setup, teardown),
        cmocka_unit_test(test_no_retention_store),
        cmocka_unit_test(test_unknown_epoch_fails_closed),
        cmocka_unit_test(test_store_errors_propagate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
