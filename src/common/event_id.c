/* event_id.c - strict parse/format of event ids. */
#include "event_id.h"
#include "tidemark/tidemark.h"
#include "../base/str.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int is_hex_lower(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

int tm_epoch_valid(const char *s)
{
    for (int i = 0; i < TM_EPOCH_LEN; i++)
        if (!is_hex_lower(s[i]))
            return 0;
    return s[TM_EPOCH_LEN] == '\0';
}

/* Decimal without sign or leading zero, value >= 1, at most 18 digits so it
 * cannot overflow. Returns digits consumed, 0 if invalid. */
static size_t parse_pos_dec(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 18 || s[0] == '0')
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return len;
}

static int stream_valid_n(const char *s, size_t len)
{
    if (len == 1 && s[0] == 'g')
        return 1;
    uint64_t n = 0;
    return len >= 2 && s[0] == 'r' && parse_pos_dec(s + 1, len - 1, &n) == len - 1;
}

int tm_stream_name_valid(const char *s)
{
    size_t len = strlen(s);
    return len < TM_STREAM_MAX && stream_valid_n(s, len);
}

static int is_b64url(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

static int mac_valid_n(const char *s, size_t len)
{
    if (len != TM_EVENT_MAC_LEN)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!is_b64url(s[i]))
            return 0;
    return 1;
}

int tm_event_mac_valid(const char *s) { return s && mac_valid_n(s, strlen(s)); }

int tm_event_id_parse(const char *s, tm_event_id *out)
{
    if (!s)
        return TIDEMARK_EINVAL;
    size_t len = strlen(s);
    if (len >= TM_EVENT_ID_MAX || len < TM_EPOCH_LEN + 4)
        return TIDEMARK_EINVAL;
    for (size_t i = 0; i < TM_EPOCH_LEN; i++)
        if (!is_hex_lower(s[i]))
            return TIDEMARK_EINVAL;
    if (s[TM_EPOCH_LEN] != '-')
        return TIDEMARK_EINVAL;
    const char *st = s + TM_EPOCH_LEN + 1;
    const char *dash = strchr(st, '-');
    if (!dash)
        return TIDEMARK_EINVAL;
    size_t slen = (size_t)(dash - st);
    if (slen >= TM_STREAM_MAX || !stream_valid_n(st, slen))
        return TIDEMARK_EINVAL;
    const char *sq = dash + 1;
    const char *mdash = strchr(sq, '-');
    uint64_t seq = 0;
    size_t qlen = mdash ? (size_t)(mdash - sq) : strlen(sq);
    if (qlen == 0 || parse_pos_dec(sq, qlen, &seq) != qlen)
        return TIDEMARK_EINVAL;
    if (mdash && !mac_valid_n(mdash + 1, strlen(mdash + 1)))
        return TIDEMARK_EINVAL;
    memcpy(out->epoch, s, TM_EPOCH_LEN);
    out->epoch[TM_EPOCH_LEN] = '\0';
    memcpy(out->stream, st, slen);
    out->stream[slen] = '\0';
    out->seq = seq;
    if (mdash)
        memcpy(out->mac, mdash + 1, TM_EVENT_MAC_LEN + 1);
    else
        out->mac[0] = '\0';
    return 0;
}

int tm_event_id_format(char *out, size_t n, const char *epoch, const char *stream, uint64_t seq)
{
    return tm_event_id_format_mac(out, n, epoch, stream, seq, NULL);
}

int tm_event_id_format_mac(char *out, size_t n, const char *epoch, const char *stream,
                           uint64_t seq, const char *mac)
{
    char num[21];
    int has_mac = mac && *mac;
    if (has_mac && !tm_event_mac_valid(mac))
        return TIDEMARK_EINVAL;
    tm_u64_dec(num, seq);
    size_t w = tm_strjoin(out, n, epoch, "-", stream, "-", num, has_mac ? "-" : "",
                          has_mac ? mac : "", (const char *)NULL);
    if (w >= n)
        return TIDEMARK_ERANGE;
    return (int)w;
}

void tm_epoch_for_session(const char *writer_epoch, const char *session,
                          char out[TM_EPOCH_LEN + 1])
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = writer_epoch; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    h = (h ^ '/') * 1099511628211ULL;
    for (const char *p = session; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    static const char hex[] = "0123456789abcdef";
    for (int i = TM_EPOCH_LEN - 1; i >= 0; i--, h >>= 4) /* "%016" PRIx64, on every event */
        out[i] = hex[h & 15];
    out[TM_EPOCH_LEN] = '\0';
}
