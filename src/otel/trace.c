/* trace.c - traceparent parse/format and ids; see trace.h. */
#include "trace.h"
#include "../base/random.h"
#include "tidemark/tidemark.h"
#include <string.h>

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1; /* upper case is refused: the W3C text says lowercase */
}

/* n bytes from 2n lowercase hex digits; -1 on any other character. */
static int unhex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static int all_zero(const uint8_t *b, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= b[i];
    return acc == 0;
}

int tm_traceparent_parse(const char *s, size_t n, tm_trace_ctx *out)
{
    memset(out, 0, sizeof *out);
    if (!s || n < TM_TRACEPARENT_LEN)
        return TIDEMARK_EINVAL;
    uint8_t ver;
    if (unhex(s, &ver, 1) || ver == 0xff)
        return TIDEMARK_EINVAL;
    /* Version 00 is exactly 55 characters; a later one may go on after '-'. */
    if (ver == 0 ? n != TM_TRACEPARENT_LEN : n > TM_TRACEPARENT_LEN && s[TM_TRACEPARENT_LEN] != '-')
        return TIDEMARK_EINVAL;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-')
        return TIDEMARK_EINVAL;
    tm_trace_ctx c = {0};
    if (unhex(s + 3, c.trace_id, 16) || unhex(s + 36, c.span_id, 8) || unhex(s + 53, &c.flags, 1))
        return TIDEMARK_EINVAL;
    if (all_zero(c.trace_id, 16) || all_zero(c.span_id, 8))
        return TIDEMARK_EINVAL;
    c.valid = 1;
    *out = c;
    return 0;
}

void tm_trace_hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = '\0';
}

void tm_traceparent_format(const tm_trace_ctx *c, char out[TM_TRACEPARENT_LEN + 1])
{
    memcpy(out, "00-", 3);
    tm_trace_hex(c->trace_id, 16, out + 3);
    out[35] = '-';
    tm_trace_hex(c->span_id, 8, out + 36);
    out[52] = '-';
    tm_trace_hex(&c->flags, 1, out + 53);
}

/* Ids are drawn from the CSPRNG 512 bytes at a time per thread (a
 * getrandom call per span cost more than the rest of its start); bytes
 * handed out are never handed out again. */
static _Thread_local struct {
    uint8_t b[512];
    size_t used; /* bytes of b handed out since it was filled */
    int filled;  /* b holds random bytes (0: a new thread's) */
} pool;

static int pool_take(uint8_t *out, size_t n)
{
    if (!pool.filled || pool.used + n > sizeof pool.b) {
        if (tm_random_bytes(pool.b, sizeof pool.b) != 0)
            return TIDEMARK_EIO;
        pool.used = 0;
        pool.filled = 1;
    }
    memcpy(out, pool.b + pool.used, n);
    pool.used += n;
    return 0;
}

static int new_id(uint8_t *id, size_t n)
{
    do {
        if (pool_take(id, n) != 0)
            return TIDEMARK_EIO;
    } while (all_zero(id, n));
    return 0;
}

int tm_trace_new_trace_id(uint8_t id[16]) { return new_id(id, 16); }
int tm_trace_new_span_id(uint8_t id[8]) { return new_id(id, 8); }
