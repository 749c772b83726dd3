/*
 * fuzz_traceparent.c - the W3C traceparent parser (src/otel/trace.c):
 * tm_traceparent_parse, tm_traceparent_format.
 *
 * Input: a traceparent value (all bytes; a header value or a _meta string
 * may hold any). Invariants:
 *  - parse accepts exactly the grammar stated here on its own: 2 lowercase
 *    hex (not "ff"), '-', 32 lowercase hex not all '0', '-', 16 lowercase
 *    hex not all '0', '-', 2 lowercase hex; version "00" ends there; another
 *    version may go on only with '-'.
 *  - a refused value leaves the context invalid;
 *  - an accepted one formats to "00-" and the same ids and flags (so a
 *    version-00 value formats to itself).
 */
#include "fuzz_util.h"
#include "otel/trace.h"
#include "tidemark/tidemark.h"

static int lhex(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static int zeros(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != '0')
            return 0;
    return 1;
}

static int grammar_ok(const uint8_t *s, size_t n)
{
    if (n < 55 || !lhex(s, 2) || (s[0] == 'f' && s[1] == 'f'))
        return 0;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-')
        return 0;
    if (!lhex(s + 3, 32) || !lhex(s + 36, 16) || !lhex(s + 53, 2) || zeros(s + 3, 32) || zeros(s + 36, 16))
        return 0;
    if (s[0] == '0' && s[1] == '0')
        return n == 55;
    return n == 55 || s[55] == '-';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tm_trace_ctx c;
    int rc = tm_traceparent_parse((const char *)data, size, &c);
    int want = grammar_ok(data, size);
    FUZZ_CHECK((rc == 0) == want, "parse %d, grammar %d, %zu bytes", rc, want, size);
    if (rc) {
        FUZZ_CHECK(!c.valid, "a refused value left a valid context");
        return 0;
    }
    char out[TM_TRACEPARENT_LEN + 1];
    tm_traceparent_format(&c, out);
    FUZZ_CHECK(memcmp(out, "00-", 3) == 0 && memcmp(out + 3, data + 3, 52) == 0 && out[55] == '\0',
               "format differs: %s", out);
    tm_trace_ctx again;
    FUZZ_CHECK(tm_traceparent_parse(out, strlen(out), &again) == 0 &&
                   memcmp(&again, &c, sizeof c) == 0,
               "formatted value does not parse back");
    return 0;
}
