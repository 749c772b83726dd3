/*
 * fuzz_http_policy.c - the endpoint's header rules (src/server/http_policy.c)
 * and the protocol version check (tm_protocol_version_supported,
 * src/mcp/jsonrpc.c): pure functions of header text, so each is compared
 * with a statement of its rule written here independently.
 *
 * Input: <function letter> then fields separated by LF (a header value
 * never holds one); a field ends at a NUL, as a C string does.
 *  'h' HOST [ALLOWED...]     tm_policy_host_allowed (list NULL when empty)
 *  'o' ORIGIN [ALLOWED...]   tm_policy_origin_allowed
 *  'a' ACCEPT [TYPE]         tm_policy_accepts (types: the two the server
 *                            asks for, and TYPE when it holds one '/')
 *  'c' CONTENT-TYPE [TYPE]   tm_policy_media_type_is
 *  'v' VERSION               tm_protocol_version_supported
 *  'f' LINE...               tm_http_framing_check (src/transport/http_server.c):
 *                            header lines as libmicrohttpd records them: the
 *                            name up to the first ':', the value after it
 *                            with leading spaces and tabs dropped; a line
 *                            starting with a space or tab continues the
 *                            field before it (folded); a line without ':'
 *                            is one libmicrohttpd refuses itself (skipped)
 * Every function is also called with NULL header values and must be total:
 * 0 or 1, no crash, the same answer twice.
 *
 * The rules, as the header states them (RFC 9110 where it is silent):
 *  - Host without a list: a loopback name (localhost, 127.0.0.1, [::1],
 *    any case) alone or with ":" and a non-empty run of digits.
 *  - Host with a list: an entry "*", or an entry equal to the header (any
 *    case), or (for entries that are a plain name or a bracketed address)
 *    the header is the entry followed by ":" and digits.
 *  - Origin without a list: "http://" or "https://" then a loopback host
 *    as above. With a list: an entry "*" or equal to the origin (any case).
 *  - Accept: some comma-separated element whose media range (before ';',
 *    optional whitespace trimmed) is the type, "* / *" or "major/ *" (any
 *    case).
 *  - Content-Type: optional whitespace, the type (any case), then nothing,
 *    or optional whitespace and ';' (RFC 9110 media-type).
 *  - Versions: exactly one of the supported version strings.
 *  - Framing (RFC 9112 sections 5 and 6, request smuggling): unambiguous
 *    (NULL) only with no folded line, every name a token (RFC 9110 tchar),
 *    at most one Host, one Content-Length and one Transfer-Encoding (names
 *    in any case), not Content-Length and Transfer-Encoding both, a
 *    Transfer-Encoding of exactly "chunked" (any case) and a Content-Length
 *    of 1 to 19 digits; else the reason for the first rule broken, in that
 *    order. The answer does not depend on the order of the fields.
 */
#include "fuzz_util.h"
#include "server/http_policy.h"
#include "mcp/jsonrpc.h"
#include "transport/http_server.h"

#include <strings.h>

#define MAX_FIELDS 8

static int ows(char c)
{
    return c == ' ' || c == '\t';
}

static int digits_after(const char *s)
{
    if (*s == '\0')
        return 1;
    if (*s != ':' || !s[1])
        return 0;
    for (s++; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static int loopback_hostport(const char *h)
{
    static const char *const names[] = {"localhost", "127.0.0.1", "[::1]"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(names[i]);
        if (strncasecmp(h, names[i], n) == 0 && digits_after(h + n))
            return 1;
    }
    return 0;
}

/* An entry whose host:port form is unambiguous: a name without ':' or '[',
 * or "[...]" with no other ']' or '['. */
static int plain_entry(const char *e)
{
    size_t n = strlen(e);
    if (n == 0 || n >= 256)
        return 0;
    if (e[0] == '[')
        return n >= 2 && e[n - 1] == ']' && !memchr(e + 1, ']', n - 2) && !memchr(e + 1, '[', n - 2);
    return !strchr(e, ':') && !strchr(e, '[') && !strchr(e, ']');
}

static int ref_host(const char *const *allowed, const char *host)
{
    if (!host)
        return 0;
    if (!allowed)
        return loopback_hostport(host);
    for (size_t i = 0; allowed[i]; i++) {
        const char *e = allowed[i];
        size_t n = strlen(e);
        if (strcmp(e, "*") == 0 || strcasecmp(e, host) == 0)
            return 1;
        if (plain_entry(e) && strncasecmp(host, e, n) == 0 && host[n] == ':' && digits_after(host + n))
            return 1;
    }
    return 0;
}

/* 1 when the answer is fixed by the rule; entries that are neither plain
 * nor matched exactly are left to the implementation. */
static int host_rule_decides(const char *const *allowed, const char *host)
{
    if (!allowed || !host)
        return 1;
    for (size_t i = 0; allowed[i]; i++) {
        const char *e = allowed[i];
        if (!plain_entry(e) && strcmp(e, "*") != 0 && strcasecmp(e, host) != 0)
            return 0;
    }
    return 1;
}

static int ref_origin(const char *const *allowed, const char *origin)
{
    if (!origin)
        return 0;
    if (allowed) {
        for (size_t i = 0; allowed[i]; i++)
            if (strcmp(allowed[i], "*") == 0 || strcasecmp(allowed[i], origin) == 0)
                return 1;
        return 0;
    }
    if (strncmp(origin, "http://", 7) == 0)
        return loopback_hostport(origin + 7);
    if (strncmp(origin, "https://", 8) == 0)
        return loopback_hostport(origin + 8);
    return 0;
}

static int ref_accepts(const char *accept, const char *type)
{
    if (!accept)
        return 0;
    size_t tl = strlen(type), major = (size_t)(strchr(type, '/') - type);
    const char *p = accept;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t el = end ? (size_t)(end - p) : strlen(p);
        const char *semi = memchr(p, ';', el);
        size_t rl = semi ? (size_t)(semi - p) : el;
        const char *r = p;
        while (rl && ows(*r)) {
            r++;
            rl--;
        }
        while (rl && ows(r[rl - 1]))
            rl--;
        if ((rl == tl && strncasecmp(r, type, tl) == 0) || (rl == 3 && memcmp(r, "*/*", 3) == 0) ||
            (rl == major + 2 && strncasecmp(r, type, major) == 0 && memcmp(r + major, "/*", 2) == 0))
            return 1;
        if (!end)
            return 0;
        p = end + 1;
    }
}

static int ref_media_type(const char *h, const char *type)
{
    if (!h)
        return 0;
    while (ows(*h))
        h++;
    size_t n = strlen(type);
    if (strncasecmp(h, type, n) != 0)
        return 0;
    h += n;
    while (ows(*h))
        h++;
    return *h == '\0' || *h == ';';
}

static int ref_version(const char *v)
{
    return v && (strcmp(v, "2025-11-25") == 0 || strcmp(v, "2025-06-18") == 0 ||
                 strcmp(v, "2025-03-26") == 0);
}

static int ref_token(const char *s)
{
    static const char tchar[] = "!#$%&'*+-.^_`|~0123456789"
                                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    return *s && strspn(s, tchar) == strlen(s);
}

static size_t ref_count(const tm_http_field *f, size_t n, const char *name, const char **value)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(f[i].name, name) == 0) {
            k++;
            *value = f[i].value;
        }
    return k;
}

static const char *ref_framing(const tm_http_field *f, size_t n)
{
    const char *cl = NULL, *te = NULL, *host = NULL;
    for (size_t i = 0; i < n; i++)
        if (f[i].folded)
            return "obs_fold";
    for (size_t i = 0; i < n; i++)
        if (!ref_token(f[i].name))
            return "invalid_field_name";
    size_t hosts = ref_count(f, n, "host", &host), cls = ref_count(f, n, "content-length", &cl),
           tes = ref_count(f, n, "transfer-encoding", &te);
    if (hosts > 1)
        return "repeated_host";
    if (cls > 1)
        return "repeated_content_length";
    if (tes > 1)
        return "repeated_transfer_encoding";
    if (cls && tes)
        return "content_length_with_transfer_encoding";
    if (tes && strcasecmp(te, "chunked") != 0)
        return "invalid_transfer_encoding";
    if (cls && (strlen(cl) < 1 || strlen(cl) > 19 || strspn(cl, "0123456789") != strlen(cl)))
        return "invalid_content_length";
    return NULL;
}

/* Header lines (fields) as libmicrohttpd records them, into f (names and
 * values point into the lines, cut at the first ':'). */
static size_t as_fields(char **lines, size_t nl, tm_http_field *f)
{
    size_t n = 0;
    for (size_t i = 0; i < nl; i++) {
        char *l = lines[i];
        if ((l[0] == ' ' || l[0] == '\t') && n > 0) {
            f[n - 1].folded = 1;
            continue;
        }
        char *colon = strchr(l, ':');
        if (!colon)
            continue;
        *colon = '\0';
        char *v = colon + 1;
        v += strspn(v, " \t");
        f[n++] = (tm_http_field){l, v, 0};
    }
    return n;
}

static void check_framing(char **lines, size_t nl)
{
    tm_http_field f[MAX_FIELDS] = {{0}}, back[MAX_FIELDS] = {{0}};
    size_t n = as_fields(lines, nl, f);
    const char *got = tm_http_framing_check(f, n);
    const char *want = ref_framing(f, n);
    FUZZ_CHECK((got == NULL) == (want == NULL) && (!got || strcmp(got, want) == 0),
               "framing of %zu field(s), first [%s: %s]: %s, want %s", n,
               n ? fz_show(f[0].name, strlen(f[0].name)) : "", n ? f[0].value : "",
               got ? got : "ok", want ? want : "ok");
    for (size_t i = 0; i < n; i++)
        back[i] = f[n - 1 - i];
    const char *rev = tm_http_framing_check(back, n);
    FUZZ_CHECK((rev == NULL) == (got == NULL) && (!rev || strcmp(rev, got) == 0),
               "framing depends on the fields' order: %s, reversed %s", got ? got : "ok",
               rev ? rev : "ok");
    tm_http_field none = {NULL, NULL, 0};
    FUZZ_CHECK(tm_http_framing_check(&none, 1) != NULL, "a field without a name framed");
}

static int bit(int v)
{
    FUZZ_CHECK(v == 0 || v == 1, "returned %d, not 0 or 1", v);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size};
    int fn = fz_u8(&f);
    char *fields[MAX_FIELDS + 1];
    size_t nf = 0, fl;
    const char *s;
    while (nf < MAX_FIELDS && (s = fz_field(&f, '\n', &fl)) != NULL)
        fields[nf++] = fz_dup(s, strnlen(s, fl));
    fields[nf] = NULL;
    const char *hdr = nf ? fields[0] : "";
    const char *const *list = nf > 1 ? (const char *const *)fields + 1 : NULL;
    const char *star[] = {"*", NULL};

    switch (fn) {
    case 'h': {
        int got = bit(tm_policy_host_allowed(list, hdr));
        FUZZ_CHECK(got == bit(tm_policy_host_allowed(list, hdr)), "not deterministic");
        if (host_rule_decides(list, hdr))
            FUZZ_CHECK(got == ref_host(list, hdr), "host [%s] (%s list): %d", fz_show(hdr, strlen(hdr)),
                       list ? "with" : "no", got);
        FUZZ_CHECK(bit(tm_policy_host_allowed(star, hdr)) == 1, "'*' refused [%s]", hdr);
        FUZZ_CHECK(bit(tm_policy_host_allowed(list, NULL)) == 0, "NULL host allowed");
        /* An entry equal to the header always admits it. */
        const char *self[] = {hdr, NULL};
        FUZZ_CHECK(bit(tm_policy_host_allowed(self, hdr)) == 1, "host [%s] not its own entry", hdr);
        break;
    }
    case 'o': {
        int got = bit(tm_policy_origin_allowed(list, hdr));
        FUZZ_CHECK(got == ref_origin(list, hdr), "origin [%s] (%s list): %d",
                   fz_show(hdr, strlen(hdr)), list ? "with" : "no", got);
        FUZZ_CHECK(bit(tm_policy_origin_allowed(star, hdr)) == 1, "'*' refused");
        FUZZ_CHECK(bit(tm_policy_origin_allowed(list, NULL)) == 0, "NULL origin allowed");
        break;
    }
    case 'a':
    case 'c': {
        const char *types[] = {"application/json", "text/event-stream", NULL};
        /* The server asks with fixed "type/subtype" tokens: a custom type
         * is one when it has one '/' and no separator or whitespace. */
        if (nf > 1 && strchr(fields[1], '/') && strchr(fields[1], '/') == strrchr(fields[1], '/') &&
            fields[1][0] != '/' && fields[1][strlen(fields[1]) - 1] != '/' &&
            !fields[1][strcspn(fields[1], " \t,;\"*")])
            types[2] = fields[1];
        for (size_t i = 0; i < 3 && types[i]; i++) {
            if (fn == 'a') {
                int got = bit(tm_policy_accepts(hdr, types[i]));
                FUZZ_CHECK(got == ref_accepts(hdr, types[i]), "Accept [%s] for %s: %d",
                           fz_show(hdr, strlen(hdr)), types[i], got);
                FUZZ_CHECK(bit(tm_policy_accepts(NULL, types[i])) == 0, "NULL accepts");
                FUZZ_CHECK(bit(tm_policy_accepts(types[i], types[i])) == 1, "type refused itself");
            } else {
                int got = bit(tm_policy_media_type_is(hdr, types[i]));
                FUZZ_CHECK(got == ref_media_type(hdr, types[i]), "Content-Type [%s] as %s: %d",
                           fz_show(hdr, strlen(hdr)), types[i], got);
                FUZZ_CHECK(bit(tm_policy_media_type_is(NULL, types[i])) == 0, "NULL media type");
            }
        }
        break;
    }
    case 'v':
        FUZZ_CHECK(bit(tm_protocol_version_supported(hdr)) == ref_version(hdr), "version [%s]",
                   fz_show(hdr, strlen(hdr)));
        FUZZ_CHECK(bit(tm_protocol_version_supported(NULL)) == 0, "NULL version");
        for (size_t i = 0; tm_protocol_versions[i]; i++)
            FUZZ_CHECK(ref_version(tm_protocol_versions[i]), "listed version %s unknown",
                       tm_protocol_versions[i]);
        break;
    case 'f':
        check_framing(fields, nf);
        break;
    default:
        break;
    }
    for (size_t i = 0; i < nf; i++)
        free(fields[i]);
    return 0;
}
