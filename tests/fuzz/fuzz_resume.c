/*
 * fuzz_resume.c - the resume decision (src/log/resume.c, tm_resume_decide)
 * against a memory store set up once:
 *   s1: r1 with 10 events, retention 5 (first retained 6, trim record for 5)
 *       r2 with 3 events, then closed
 *       g  with no events
 *   s2: r1 with 1 event, g with 2 events
 *   s3: does not exist
 *
 * Input, by its first byte:
 *  '1' '2' '3' <Last-Event-ID text>   the cursor as a header would carry it,
 *                                     for session s1 / s2 / s3
 *  'x' <session> <epoch kind> <stream> <seq: 8 bytes> [<mac kind>]
 *      a cursor built from parts: the epoch this session was sent, another
 *      session's, a forged one or the bare writer epoch; any stream; any seq;
 *      no mac, the real one (a fixed key), another session's, or forged.
 * Invariants: the outcome is the resume table's row, computed here from
 * the setup alone (malformed iff the text is not an event id; unknown
 * stream iff the session has no such stream; ahead iff seq > head; gap
 * iff seq + 1 < first retained, with the exact missing range; epoch
 * mismatch iff the epoch is not the one this session was sent; else ok,
 * replaying after seq), the decision echoes the cursor's stream and seq,
 * and deciding twice gives the same decision. With the mac checked
 * (tm_resume_decide_auth, a fixed-key sealer): a mac that does not verify
 * is malformed, an id without one is malformed where it would be ahead,
 * and every other decision is the same as without the check; ahead only
 * ever for an id whose mac verifies.
 */
#include "fuzz_util.h"
#include "common/event_id.h"
#include "log/resume.h"
#include "log/store.h"
#include "server/seal.h"
#include "tidemark/tidemark.h"

#include <inttypes.h>

typedef struct known {
    const char *session, *stream;
    uint64_t head, first_retained;
} known;

static const known KNOWN[] = {
    {"s1", "r1", 10, 6}, {"s1", "r2", 3, 1}, {"s1", "g", 0, 1},
    {"s2", "r1", 1, 1},  {"s2", "g", 2, 1},
};
static const char *const SESSIONS[] = {"s1", "s2", "s3"};

static tm_store *st;
static tm_sealer *sealer;

static int verify(void *ud, const char *session, const tm_event_id *id)
{
    return tm_seal_event_verify(ud, session, id);
}

/* The decision with the mac checked, against d, the one without. */
static void check_auth(const char *session, const char *cursor, const tm_resume_decision *d)
{
    tm_id_auth auth = {.verify = verify, .ud = sealer};
    tm_resume_decision da;
    FUZZ_CHECK(tm_resume_decide_auth(st, session, cursor, &auth, &da) == 0, "store failed");
    tm_event_id id;
    if (tm_event_id_parse(cursor, &id) != 0)
        return; /* malformed both ways: checked by the caller */
    int authentic = id.mac[0] && tm_seal_event_verify(sealer, session, &id);
    if (id.mac[0] && !authentic)
        FUZZ_CHECK(da.outcome == TM_RESUME_MALFORMED, "forged mac: outcome %d", da.outcome);
    else if (d->outcome == TM_RESUME_AHEAD && !authentic)
        FUZZ_CHECK(da.outcome == TM_RESUME_MALFORMED, "mac-less ahead: outcome %d", da.outcome);
    else
        FUZZ_CHECK(da.outcome == d->outcome, "with the mac checked: %d, without: %d", da.outcome,
                   d->outcome);
    FUZZ_CHECK(da.outcome != TM_RESUME_AHEAD || authentic, "ahead without a verified mac");
}

static void must(int rc, const char *what)
{
    if (rc != 0) {
        fprintf(stderr, "fuzz_resume setup: %s: %d\n", what, rc);
        abort();
    }
}

static void append_n(const char *session, const char *stream, int n)
{
    for (int i = 0; i < n; i++) {
        char msg[32];
        int len = snprintf(msg, sizeof msg, "{\"n\":%d}", i);
        must(tm_store_append(st, session, stream, msg, (size_t)len, 0, NULL, NULL), "append");
    }
}

static void setup(void)
{
    tm_store_options opts = {.retain_events = 5};
    must(tm_store_open("memory", &opts, &st), "open");
    static const unsigned char key[32] = {7};
    must(tm_sealer_open_key(key, &sealer), "sealer");
    char out[TM_STREAM_MAX];
    for (int i = 0; i < 2; i++) {
        tm_session_rec rec = {.id = (char *)SESSIONS[i], .protocol_version = "2025-11-25",
                              .client = "{}"};
        must(tm_store_session_create(st, &rec), "session");
    }
    must(tm_store_stream_open(st, "s1", NULL, out), "s1 r1");
    must(tm_store_stream_open(st, "s1", NULL, out), "s1 r2");
    must(tm_store_stream_open(st, "s1", "g", out), "s1 g");
    must(tm_store_stream_open(st, "s2", NULL, out), "s2 r1");
    must(tm_store_stream_open(st, "s2", "g", out), "s2 g");
    append_n("s1", "r1", 10);
    append_n("s1", "r2", 3);
    must(tm_store_close_stream(st, "s1", "r2"), "close");
    append_n("s2", "r1", 1);
    append_n("s2", "g", 2);
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++) {
        tm_stream_bounds b;
        must(tm_store_bounds(st, KNOWN[i].session, KNOWN[i].stream, &b), "bounds");
        if (b.head != KNOWN[i].head || b.first_retained != KNOWN[i].first_retained) {
            fprintf(stderr, "fuzz_resume setup: %s/%s has head %" PRIu64 " first %" PRIu64 "\n",
                    KNOWN[i].session, KNOWN[i].stream, b.head, b.first_retained);
            abort();
        }
    }
}

static const known *lookup(const char *session, const char *stream)
{
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
        if (strcmp(KNOWN[i].session, session) == 0 && strcmp(KNOWN[i].stream, stream) == 0)
            return &KNOWN[i];
    return NULL;
}

static void check(const char *session, const char *cursor)
{
    tm_resume_decision d, d2;
    memset(&d, 0x5a, sizeof d);
    FUZZ_CHECK(tm_resume_decide(st, session, cursor, &d) == 0, "store failed");
    memset(&d2, 0xa5, sizeof d2);
    FUZZ_CHECK(tm_resume_decide(st, session, cursor, &d2) == 0, "store failed");
    FUZZ_CHECK(memcmp(&d, &d2, sizeof d) == 0, "two decisions differ");
    check_auth(session, cursor, &d);
    FUZZ_CHECK(tm_resume_reason(d.outcome) && strcmp(tm_resume_reason(d.outcome), "unknown") != 0,
               "outcome %d has no reason", d.outcome);

    tm_event_id id;
    if (tm_event_id_parse(cursor, &id) != 0) {
        FUZZ_CHECK(d.outcome == TM_RESUME_MALFORMED, "[%s]: outcome %d, want malformed",
                   fz_show(cursor, strlen(cursor)), d.outcome);
        return;
    }
    FUZZ_CHECK(strcmp(d.stream, id.stream) == 0 && d.cursor_seq == id.seq, "echo of the cursor");
    const known *k = lookup(session, id.stream);
    const char *c = cursor;
    if (!k) {
        FUZZ_CHECK(d.outcome == TM_RESUME_UNKNOWN_STREAM, "[%s] on %s: outcome %d, want unknown",
                   c, session, d.outcome);
        return;
    }
    FUZZ_CHECK(d.head == k->head, "[%s]: head %" PRIu64, c, d.head);
    if (id.seq > k->head) {
        FUZZ_CHECK(d.outcome == TM_RESUME_AHEAD, "[%s]: outcome %d, want ahead", c, d.outcome);
        return;
    }
    if (id.seq + 1 < k->first_retained) {
        FUZZ_CHECK(d.outcome == TM_RESUME_GAP && d.gap_from == id.seq + 1 &&
                       d.gap_to == k->first_retained - 1 && d.after_seq == k->first_retained - 1,
                   "[%s]: outcome %d gap %" PRIu64 "..%" PRIu64 ", want the gap", c, d.outcome,
                   d.gap_from, d.gap_to);
        return;
    }
    char seen[TM_EPOCH_LEN + 1];
    tm_epoch_for_session(tm_store_epoch(st), session, seen);
    if (strcmp(seen, id.epoch) != 0) {
        FUZZ_CHECK(d.outcome == TM_RESUME_EPOCH, "[%s]: outcome %d, want epoch mismatch", c,
                   d.outcome);
        return;
    }
    FUZZ_CHECK(d.outcome == TM_RESUME_OK && d.after_seq == id.seq, "[%s]: outcome %d after %" PRIu64
               ", want ok", c, d.outcome, d.after_seq);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!st)
        setup();
    fz f = {data, size};
    int mode = fz_u8(&f);
    if (mode >= '1' && mode <= '3') {
        char *cursor = fz_dup((const char *)f.p, f.n);
        check(SESSIONS[mode - '1'], cursor);
        free(cursor);
        return 0;
    }
    if (mode != 'x')
        return 0;
    const char *session = SESSIONS[fz_u8(&f) % 3];
    int ek = fz_u8(&f) % 4;
    const char *streams[] = {"g", "r1", "r2", "r3", "r999999999999999999"};
    const char *stream = streams[fz_u8(&f) % 5];
    uint64_t seq = 0;
    for (int i = 0; i < 8; i++)
        seq = seq << 8 | (uint64_t)fz_u8(&f);
    seq = 1 + seq % 999999999999999999ULL;
    if (seq > 64 && (seq & 1)) /* most cursors near the heads */
        seq = seq % 13 + 1;
    char epoch[TM_EPOCH_LEN + 1];
    if (ek == 0)
        tm_epoch_for_session(tm_store_epoch(st), session, epoch);
    else if (ek == 1)
        tm_epoch_for_session(tm_store_epoch(st), strcmp(session, "s1") ? "s1" : "s2", epoch);
    else if (ek == 2)
        snprintf(epoch, sizeof epoch, "%s", tm_store_epoch(st));
    else
        snprintf(epoch, sizeof epoch, "%016" PRIx64, (uint64_t)(seq * 0x9E3779B97F4A7C15ULL));
    int mk = fz_u8(&f) % 4;
    char mac[TM_EVENT_MAC_LEN + 1] = "";
    if (mk == 1 || mk == 2) /* the real mac, or the one another session was sent */
        FUZZ_CHECK(tm_seal_event_mac(sealer, mk == 1 ? session : "s9", epoch, stream, seq, mac) == 0,
                   "mac");
    else if (mk == 3)
        snprintf(mac, sizeof mac, "%012" PRIu64, (uint64_t)(seq % 1000000000000ULL));
    char cur[TM_EVENT_ID_MAX];
    FUZZ_CHECK(tm_event_id_format_mac(cur, sizeof cur, epoch, stream, seq, mac) > 0, "format");
    check(session, cur);
    return 0;
}
