/*
 * fuzz_event_id.c - event ids and Last-Event-ID text (src/common/event_id.c):
 * tm_event_id_parse, tm_event_id_format, tm_stream_name_valid,
 * tm_epoch_valid, tm_epoch_for_session.
 *
 * Input: a Last-Event-ID value (the bytes up to a NUL, as a header value
 * is a C string). Invariants:
 *  - parse accepts exactly the grammar of event_id.h, stated here on its
 *    own: 16 lowercase hex, '-', "g" or 'r' and a number, '-', a number,
 *    numbers without sign or leading zero, >= 1, at most 18 digits, then
 *    optionally '-' and a mac of exactly 12 base64url characters (which may
 *    hold '-' itself).
 *  - a parsed id re-formats to the same text, and its parts are valid
 *    (tm_epoch_valid, tm_stream_name_valid, seq >= 1).
 *  - format then parse gives back epoch, stream and seq for any valid parts
 *    built from the input; format never writes past a small buffer and
 *    never returns a truncated id.
 *  - tm_stream_name_valid and tm_epoch_valid agree with the grammar.
 *  - tm_epoch_for_session always yields a valid epoch, the same one for the
 *    same arguments.
 */
#include "fuzz_util.h"
#include "common/event_id.h"
#include "tidemark/tidemark.h"

#include <inttypes.h>

/* [1-9][0-9]{0,17} exactly. */
static int number_ok(const char *s, size_t n)
{
    if (n < 1 || n > 18 || s[0] < '1' || s[0] > '9')
        return 0;
    for (size_t i = 1; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

static int stream_ok(const char *s, size_t n)
{
    return (n == 1 && s[0] == 'g') || (n >= 2 && s[0] == 'r' && number_ok(s + 1, n - 1));
}

static int epoch_ok(const char *s, size_t n)
{
    if (n != TM_EPOCH_LEN)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static int mac_ok(const char *s, size_t n)
{
    if (n != TM_EVENT_MAC_LEN)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", s[i]) ||
            !s[i])
            return 0;
    return 1;
}

/* The grammar, splitting at the first three dashes (only the mac may hold
 * one). */
static int grammar_ok(const char *s)
{
    const char *d1 = strchr(s, '-');
    if (!d1)
        return 0;
    const char *d2 = strchr(d1 + 1, '-');
    if (!d2)
        return 0;
    const char *d3 = strchr(d2 + 1, '-');
    size_t qn = d3 ? (size_t)(d3 - d2 - 1) : strlen(d2 + 1);
    return epoch_ok(s, (size_t)(d1 - s)) && stream_ok(d1 + 1, (size_t)(d2 - d1 - 1)) &&
           number_ok(d2 + 1, qn) && (!d3 || mac_ok(d3 + 1, strlen(d3 + 1)));
}

static void roundtrip(const char *epoch, const char *stream, uint64_t seq)
{
    char buf[TM_EVENT_ID_MAX];
    int w = tm_event_id_format(buf, sizeof buf, epoch, stream, seq);
    FUZZ_CHECK(w > 0 && (size_t)w == strlen(buf), "format: %d", w);
    tm_event_id id;
    FUZZ_CHECK(tm_event_id_parse(buf, &id) == 0, "formatted id [%s] does not parse", buf);
    FUZZ_CHECK(strcmp(id.epoch, epoch) == 0 && strcmp(id.stream, stream) == 0 && id.seq == seq,
               "[%s] parsed to other parts", buf);
    /* Too small a buffer: an error, never a shorter id. */
    for (size_t n = 1; n <= (size_t)w; n += 1 + (size_t)w / 5) {
        char small[TM_EVENT_ID_MAX];
        memset(small, 'Z', sizeof small);
        int r = tm_event_id_format(small, n, epoch, stream, seq);
        FUZZ_CHECK(r < 0, "format into %zu bytes returned %d", n, r);
        FUZZ_CHECK(small[n] == 'Z', "format wrote past %zu bytes", n);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fz_dup((const char *)data, size);
    size_t len = strlen(s);

    tm_event_id id;
    memset(&id, 0x5a, sizeof id);
    int rc = tm_event_id_parse(s, &id);
    int want = grammar_ok(s);
    FUZZ_CHECK((rc == 0) == want, "[%s]: parse %d, grammar says %s", fz_show(s, len), rc,
               want ? "valid" : "invalid");
    if (rc == 0) {
        char buf[TM_EVENT_ID_MAX];
        int w = tm_event_id_format_mac(buf, sizeof buf, id.epoch, id.stream, id.seq, id.mac);
        FUZZ_CHECK(w > 0 && strcmp(buf, s) == 0, "[%s] re-formats as [%s]", s, buf);
        FUZZ_CHECK(!id.mac[0] || tm_event_mac_valid(id.mac), "mac of [%s]", s);
        FUZZ_CHECK(tm_epoch_valid(id.epoch) && tm_stream_name_valid(id.stream) && id.seq >= 1,
                   "parts of [%s] are not valid", s);
    } else {
        FUZZ_CHECK(rc == TIDEMARK_EINVAL, "parse rc %d", rc);
    }
    FUZZ_CHECK(tm_stream_name_valid(s) == stream_ok(s, len), "stream name [%s]", fz_show(s, len));
    FUZZ_CHECK(tm_epoch_valid(s) == epoch_ok(s, len), "epoch [%s]", fz_show(s, len));

    /* Valid parts from the input bytes: parse(format(parts)) == parts. */
    char epoch[TM_EPOCH_LEN + 1];
    for (size_t i = 0; i < TM_EPOCH_LEN; i++)
        epoch[i] = "0123456789abcdef"[(i < size ? data[i] : i) & 15];
    epoch[TM_EPOCH_LEN] = '\0';
    uint64_t v = 0;
    for (size_t i = 0; i < 8 && i < size; i++)
        v = v << 8 | data[size - 1 - i];
    uint64_t seq = 1 + v % 999999999999999999ULL;
    char stream[TM_STREAM_MAX];
    if (size && (data[0] & 1))
        snprintf(stream, sizeof stream, "g");
    else
        snprintf(stream, sizeof stream, "r%" PRIu64, (uint64_t)(1 + (v >> 7) % 999999999999999999ULL));
    roundtrip(epoch, stream, seq);
    roundtrip(epoch, stream, 999999999999999999ULL);
    roundtrip(epoch, "r999999999999999999", 1);

    /* The epoch a session sees. */
    char e1[TM_EPOCH_LEN + 1], e2[TM_EPOCH_LEN + 1];
    tm_epoch_for_session(epoch, s, e1);
    tm_epoch_for_session(epoch, s, e2);
    FUZZ_CHECK(tm_epoch_valid(e1) && strcmp(e1, e2) == 0, "session epoch [%s]", e1);
    free(s);
    return 0;
}
