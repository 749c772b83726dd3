/* test_event_id.c - unit tests for src/common/event_id.{h,c} (docs/design.md, "The contract", item 2). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/event_id.h"
#include "server/seal.h"
#include "tidemark/tidemark.h"

#include <stdio.h>
#include <string.h>

#define EPOCH "9f86d081884c7d65"

static void parses(const char *s, const char *epoch, const char *stream, uint64_t seq)
{
    tm_event_id id;
    memset(&id, 0x5a, sizeof id);
    int rc = tm_event_id_parse(s, &id);
    if (rc != 0)
        print_error("expected \"%s\" to parse\n", s);
    assert_int_equal(rc, 0);
    assert_string_equal(id.epoch, epoch);
    assert_string_equal(id.stream, stream);
    assert_true(id.seq == seq);
}

static void rejects(const char *s)
{
    tm_event_id id;
    int rc = tm_event_id_parse(s, &id);
    if (rc != TIDEMARK_EINVAL)
        print_error("expected \"%s\" to be rejected, rc %d\n", s, rc);
    assert_int_equal(rc, TIDEMARK_EINVAL);
}

static void test_parse_valid(void **state)
{
    (void)state;
    parses(EPOCH "-r3-17", EPOCH, "r3", 17);
    parses(EPOCH "-g-1", EPOCH, "g", 1);
    parses("0000000000000000-g-1", "0000000000000000", "g", 1);
    parses("ffffffffffffffff-r1-1", "ffffffffffffffff", "r1", 1);
    parses("0123456789abcdef-r10-100", "0123456789abcdef", "r10", 100);
    /* 18-digit seq, the largest accepted */
    parses(EPOCH "-g-999999999999999999", EPOCH, "g", 999999999999999999ULL);
    parses(EPOCH "-r999999999999999999-1", EPOCH, "r999999999999999999", 1);
}

static void test_round_trip(void **state)
{
    (void)state;
    const char *streams[] = {"g", "r1", "r2", "r10", "r123456789"};
    const uint64_t seqs[] = {1, 2, 9, 10, 17, 1041, 4294967296ULL, 999999999999999999ULL};
    for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) {
        for (size_t j = 0; j < sizeof seqs / sizeof seqs[0]; j++) {
            char buf[TM_EVENT_ID_MAX];
            int n = tm_event_id_format(buf, sizeof buf, EPOCH, streams[i], seqs[j]);
            assert_true(n > 0);
            assert_int_equal((size_t)n, strlen(buf));
            char want[128];
            snprintf(want, sizeof want, "%s-%s-%llu", EPOCH, streams[i],
                     (unsigned long long)seqs[j]);
            assert_string_equal(buf, want);
            parses(buf, EPOCH, streams[i], seqs[j]);
        }
    }
}

static void test_format(void **state)
{
    (void)state;
    char buf[TM_EVENT_ID_MAX];
    int n = tm_event_id_format(buf, sizeof buf, EPOCH, "r3", 17);
    assert_int_equal(n, 22);
    assert_string_equal(buf, "9f86d081884c7d65-r3-17");
    /* too small a buffer is ERANGE, not truncation */
    assert_int_equal(tm_event_id_format(buf, 22, EPOCH, "r3", 17), TIDEMARK_ERANGE);
    assert_int_equal(tm_event_id_format(buf, 23, EPOCH, "r3", 17), 22);
    assert_string_equal(buf, "9f86d081884c7d65-r3-17");
}

static void test_reject_epoch(void **state)
{
    (void)state;
    rejects("9F86D081884C7D65-r3-17");    /* uppercase hex */
    rejects("9f86d081884c7D65-r3-17");    /* one uppercase digit */
    rejects("9f86d081884c7d6-r3-17");     /* 15 digits */
    rejects("9f86d081884c7d6-r3-1700");   /* 15 digits, long enough overall */
    rejects("9f86d081884c7d655-r3-17");   /* 17 digits */
    rejects("9f86d081884c7d6g-r3-17");    /* not hex */
    rejects("9f86d081884c7d6 -r3-17");    /* space */
    rejects("x9f86d081884c7d65-r3-17");   /* prefix */
    rejects("-r3-17");                    /* no epoch */
    rejects("0x9f86d081884c7d-r3-17");    /* 0x prefix */
}

static void test_reject_stream(void **state)
{
    (void)state;
    rejects(EPOCH "-r0-1");   /* r0 */
    rejects(EPOCH "-r01-1");  /* leading zero */
    rejects(EPOCH "-r-1");    /* r without number */
    rejects(EPOCH "--1");     /* empty stream */
    rejects(EPOCH "-G-1");    /* uppercase */
    rejects(EPOCH "-R1-1");
    rejects(EPOCH "-gg-1");
    rejects(EPOCH "-g1-1");
    rejects(EPOCH "-x-1");
    rejects(EPOCH "-p1-1");
    rejects(EPOCH "-r1a-1");
    rejects(EPOCH "-r+1-1");
    rejects(EPOCH "-r 1-1");
    rejects(EPOCH "-r1000000000000000000-1"); /* 19-digit stream number */
}

static void test_reject_seq(void **state)
{
    (void)state;
    rejects(EPOCH "-r3-0");                    /* seq 0 */
    rejects(EPOCH "-r3-00");
    rejects(EPOCH "-r3-017");                  /* leading zero */
    rejects(EPOCH "-r3--17");                  /* negative */
    rejects(EPOCH "-r3-+17");
    rejects(EPOCH "-r3-1000000000000000000");  /* 19 digits */
    rejects(EPOCH "-r3-18446744073709551615"); /* UINT64_MAX */
    rejects(EPOCH "-r3-18446744073709551616"); /* overflow */
    rejects(EPOCH "-r3-17x");                  /* trailing garbage */
    rejects(EPOCH "-r3-17-1");
    rejects(EPOCH "-r3-17 ");                  /* trailing space */
    rejects(EPOCH "-r3- 17");
    rejects(EPOCH "-r3-1.5");
    rejects(EPOCH "-r3-0x1");
    rejects(EPOCH "-r3-1e3");
}

static void test_reject_shape(void **state)
{
    (void)state;
    rejects("");
    rejects(EPOCH);
    rejects(EPOCH "-");
    rejects(EPOCH "-r3");      /* missing seq */
    rejects(EPOCH "r3-17");    /* missing separator */
    rejects(EPOCH "_r3_17");
    rejects(" " EPOCH "-r3-17"); /* leading space */
    rejects(EPOCH " -r3-17");
    rejects(EPOCH "-r3-17\n");
    rejects(EPOCH "-r3-17\r");
    rejects(EPOCH "-r3-1\t");
    /* non-ASCII: a fullwidth digit, a Latin-1 byte, a UTF-8 lookalike of 'g' */
    rejects(EPOCH "-r3-\xef\xbc\x91");
    rejects(EPOCH "-r3-1\xff");
    rejects(EPOCH "-\xc9\xa1-1");
    rejects("9f86d081884c7d6\xc3\xa5-r3-17");
    /* too long: over TM_EVENT_ID_MAX - 1 characters */
    char buf[200];
    snprintf(buf, sizeof buf, "%s-r1-%s", EPOCH,
             "123456789012345678123456789012345678901234567890123456789012345678");
    assert_true(strlen(buf) >= TM_EVENT_ID_MAX);
    rejects(buf);
    memset(buf, 'a', sizeof buf - 1);
    buf[sizeof buf - 1] = '\0';
    rejects(buf);
    /* NULL */
    tm_event_id id;
    assert_int_equal(tm_event_id_parse(NULL, &id), TIDEMARK_EINVAL);
}

/* An empty seq must not parse as seq 0. */
static void test_reject_empty_seq(void **state)
{
    (void)state;
    rejects(EPOCH "-r3-");
    rejects(EPOCH "-g-");
    rejects(EPOCH "-r12345-");
}

static void test_stream_name_valid(void **state)
{
    (void)state;
    assert_true(tm_stream_name_valid("g"));
    assert_true(tm_stream_name_valid("r1"));
    assert_true(tm_stream_name_valid("r9"));
    assert_true(tm_stream_name_valid("r10"));
    assert_true(tm_stream_name_valid("r123456789"));
    assert_true(tm_stream_name_valid("r999999999999999999"));
    assert_false(tm_stream_name_valid(""));
    assert_false(tm_stream_name_valid("r"));
    assert_false(tm_stream_name_valid("r0"));
    assert_false(tm_stream_name_valid("r01"));
    assert_false(tm_stream_name_valid("r-1"));
    assert_false(tm_stream_name_valid("r1x"));
    assert_false(tm_stream_name_valid("r 1"));
    assert_false(tm_stream_name_valid(" g"));
    assert_false(tm_stream_name_valid("g "));
    assert_false(tm_stream_name_valid("G"));
    assert_false(tm_stream_name_valid("R1"));
    assert_false(tm_stream_name_valid("gg"));
    assert_false(tm_stream_name_valid("g1"));
    assert_false(tm_stream_name_valid("s1"));
    assert_false(tm_stream_name_valid("r1000000000000000000"));
    assert_false(tm_stream_name_valid("r12345678901234567890123456789"));
    assert_false(tm_stream_name_valid("r\xd9\xa1")); /* Arabic-Indic one */
}

static void test_epoch_valid(void **state)
{
    (void)state;
    assert_true(tm_epoch_valid("9f86d081884c7d65"));
    assert_true(tm_epoch_valid("0000000000000000"));
    assert_true(tm_epoch_valid("abcdefabcdef0123"));
    assert_false(tm_epoch_valid("9F86D081884C7D65"));
    assert_false(tm_epoch_valid("9f86d081884c7d6"));
    assert_false(tm_epoch_valid("9f86d081884c7d655"));
    assert_false(tm_epoch_valid("9f86d081884c7d6g"));
    assert_false(tm_epoch_valid(""));
}

/* The session's epoch: FNV-1a of "<writer epoch>/<session>", 16 lowercase
 * hex digits, zero-padded (the formatter is hand-rolled: snprintf is the
 * reference). */
static void test_epoch_for_session(void **state)
{
    (void)state;
    const char *sessions[] = {"", "a", "0123456789abcdef0123456789abcdef", "x/y"};
    for (size_t i = 0; i < sizeof sessions / sizeof *sessions; i++) {
        char got[TM_EPOCH_LEN + 1];
        tm_epoch_for_session(EPOCH, sessions[i], got);
        uint64_t h = 1469598103934665603ULL;
        for (const char *p = EPOCH; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        h = (h ^ '/') * 1099511628211ULL;
        for (const char *p = sessions[i]; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        char want[TM_EPOCH_LEN + 1];
        snprintf(want, sizeof want, "%016llx", (unsigned long long)h);
        assert_string_equal(got, want);
    }
}

#define SID "0123456789abcdef0123456789abcdef"

/* "-<mac>" is optional and exactly 12 base64url characters, '-' and '_'
 * included; the parse gives it back, "" when absent. */
static void test_parse_mac(void **state)
{
    (void)state;
    tm_event_id id;
    assert_int_equal(tm_event_id_parse(EPOCH "-r3-17-ZOf03o-d0HzB", &id), 0);
    assert_string_equal(id.epoch, EPOCH);
    assert_string_equal(id.stream, "r3");
    assert_true(id.seq == 17);
    assert_string_equal(id.mac, "ZOf03o-d0HzB");
    assert_int_equal(tm_event_id_parse(EPOCH "-g-1-------------", &id), 0);
    assert_string_equal(id.mac, "------------");
    assert_int_equal(tm_event_id_parse(EPOCH "-g-1-____________", &id), 0);
    assert_int_equal(tm_event_id_parse(EPOCH "-r3-17", &id), 0);
    assert_string_equal(id.mac, "");
    rejects(EPOCH "-r3-17-");              /* empty mac */
    rejects(EPOCH "-r3-17-ZOf03o-d0Hz");   /* 11 characters */
    rejects(EPOCH "-r3-17-ZOf03o-d0HzBB"); /* 13 */
    rejects(EPOCH "-r3-17-ZOf03o+d0HzB");  /* '+' is not base64url */
    rejects(EPOCH "-r3-17-ZOf03o=d0HzB");
    rejects(EPOCH "-r3-17-ZOf03o d0HzB");
    rejects(EPOCH "-r3-17-ZOf03o-d0HzB\n");
    rejects(EPOCH "-r3-017-ZOf03o-d0HzB"); /* the seq's rules still hold */
    rejects(EPOCH "-r3-ZOf03o-d0HzB");     /* no seq */
    char buf[TM_EVENT_ID_MAX];
    assert_int_equal(tm_event_id_format_mac(buf, sizeof buf, EPOCH, "r3", 17, "ZOf03o-d0HzB"),
                     (int)strlen(EPOCH "-r3-17-ZOf03o-d0HzB"));
    assert_string_equal(buf, EPOCH "-r3-17-ZOf03o-d0HzB");
    assert_int_equal(tm_event_id_format_mac(buf, 35, EPOCH, "r3", 17, "ZOf03o-d0HzB"),
                     TIDEMARK_ERANGE);
    assert_int_equal(tm_event_id_format_mac(buf, sizeof buf, EPOCH, "r3", 17, "short"),
                     TIDEMARK_EINVAL);
    assert_int_equal(tm_event_id_format_mac(buf, sizeof buf, EPOCH, "r3", 17, ""), 22);
    /* the longest id fits the buffer */
    assert_true(tm_event_id_format_mac(buf, sizeof buf, EPOCH, "r999999999999999999",
                                       999999999999999999ULL, "ZOf03o-d0HzB") > 0);
    assert_int_equal(tm_event_id_parse(buf, &id), 0);
}

static tm_sealer *sealer_of(unsigned char first)
{
    unsigned char key[32];
    for (int i = 0; i < 32; i++)
        key[i] = (unsigned char)(first + i);
    tm_sealer *s = NULL;
    assert_int_equal(tm_sealer_open_key(key, &s), 0);
    return s;
}

static int verifies(tm_sealer *s, const char *session, const char *text)
{
    tm_event_id id;
    assert_int_equal(tm_event_id_parse(text, &id), 0);
    return tm_seal_event_verify(s, session, &id);
}

/* The mac pins its construction (a known answer computed apart, with
 * Python's hmac: HMAC-SHA256 under HMAC(key, "tidemark seal v1 event-id")
 * of the length-prefixed session, epoch, stream and the seq, 9 bytes in
 * base64url), and verifies only the id it was made for. */
static void test_event_mac(void **state)
{
    (void)state;
    tm_sealer *s = sealer_of(0), *other = sealer_of(1);
    char mac[TM_EVENT_MAC_LEN + 1], buf[TM_EVENT_ID_MAX];
    assert_int_equal(tm_seal_event_mac(s, SID, EPOCH, "r3", 17, mac), 0);
    assert_string_equal(mac, "ZOf03o-d0HzB");
    assert_true(tm_event_mac_valid(mac));
    assert_true(verifies(s, SID, EPOCH "-r3-17-ZOf03o-d0HzB"));
    assert_false(verifies(other, SID, EPOCH "-r3-17-ZOf03o-d0HzB")); /* another key */
    assert_false(verifies(s, SID "0", EPOCH "-r3-17-ZOf03o-d0HzB")); /* another session */
    assert_false(verifies(s, SID, EPOCH "-r3-18-ZOf03o-d0HzB"));     /* seq changed */
    assert_false(verifies(s, SID, EPOCH "-r4-17-ZOf03o-d0HzB"));     /* stream changed */
    assert_false(verifies(s, SID, "9f86d081884c7d66-r3-17-ZOf03o-d0HzB")); /* epoch */
    assert_false(verifies(s, SID, EPOCH "-r3-17-ZOf03o-d0HzC"));     /* one bit of the mac */
    assert_false(verifies(s, SID, EPOCH "-r3-17"));                  /* stripped */
    /* every part moves the mac; a round trip through format and parse verifies */
    const char *streams[] = {"g", "r1", "r10"};
    char seen[8][TM_EVENT_MAC_LEN + 1];
    int k = 0;
    for (size_t i = 0; i < 3; i++)
        for (uint64_t q = 1; q <= 2; q++, k++) {
            assert_int_equal(tm_seal_event_mac(s, SID, EPOCH, streams[i], q, seen[k]), 0);
            for (int j = 0; j < k; j++)
                assert_string_not_equal(seen[j], seen[k]);
            assert_true(tm_event_id_format_mac(buf, sizeof buf, EPOCH, streams[i], q, seen[k]) > 0);
            assert_true(verifies(s, SID, buf));
        }
    assert_int_equal(tm_seal_event_mac(s, "", EPOCH, "g", 1, seen[6]), 0);
    assert_int_equal(tm_seal_event_mac(s, "a", EPOCH, "g", 1, seen[7]), 0);
    assert_string_not_equal(seen[6], seen[7]);
    assert_int_equal(tm_seal_event_mac(NULL, SID, EPOCH, "g", 1, mac), TIDEMARK_EINVAL);
    assert_false(tm_seal_event_verify(s, SID, NULL));
    /* a stream's prefix hashed once gives the same macs, seq after seq */
    tm_seal_mac_prefix *pre = NULL;
    assert_int_equal(tm_seal_mac_prefix_new(s, SID, EPOCH, "r3", &pre), 0);
    assert_string_equal(tm_seal_mac_prefix_epoch(pre), EPOCH);
    for (uint64_t q = 15; q <= 19; q++) {
        char a[TM_EVENT_MAC_LEN + 1], b[TM_EVENT_MAC_LEN + 1];
        assert_int_equal(tm_seal_mac_prefix_seq(pre, q, a), 0);
        assert_int_equal(tm_seal_event_mac(s, SID, EPOCH, "r3", q, b), 0);
        assert_string_equal(a, b);
        if (q == 17)
            assert_string_equal(a, "ZOf03o-d0HzB");
    }
    tm_seal_mac_prefix_free(pre);
    tm_sealer_free(s);
    tm_sealer_free(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_epoch_for_session),
        cmocka_unit_test(test_reject_epoch),
        cmocka_unit_test(test_reject_stream),
        cmocka_unit_test(test_reject_seq),
        cmocka_unit_test(test_reject_shape),
        cmocka_unit_test(test_reject_empty_seq),
        cmocka_unit_test(test_stream_name_valid),
        cmocka_unit_test(test_epoch_valid),
        cmocka_unit_test(test_parse_mac),
        cmocka_unit_test(test_event_mac),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
