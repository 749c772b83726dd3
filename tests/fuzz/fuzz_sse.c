/*
 * fuzz_sse.c - SSE framing (src/transport/sse.c) and the client's SSE
 * parser (src/transport/sse_parser.c).
 *
 * Input, by its first byte:
 *  'P' <chunk seed> <limits> <stream bytes>
 *      The bytes go to the parser whole, in chunks of pseudo-random sizes and
 *      (when short) one byte at a time: the callbacks, the first failure and
 *      the last event id must be identical (the header promises that input
 *      may be split anywhere). Every event is well-formed: data NUL-ended,
 *      within max_data, its id the parser's last id, a type.
 *  'F' <chunk seed> <records separated by 0x1e>
 *      Each record is framed with tm_sse_frame / _comment / _retry, the
 *      frames are concatenated and parsed: the parser must give back exactly
 *      the events, ids, comments and retry values framed (data with CRLF and
 *      CR read as LF). A record:
 *        'E' <flags '0'..'3'> 0x1f <event> 0x1f <id> 0x1f <data...>
 *            (flags bit 0: the event name is given, bit 1: the id is given)
 *        'C' <comment text>    'R' <decimal milliseconds>
 *      A frame that fails leaves the output buffer as it was; framing into a
 *      bounded buffer fails only for lack of room.
 */
#include "fuzz_util.h"
#include "base/buf.h"
#include "tidemark/tidemark.h"
#include "transport/sse.h"
#include "transport/sse_parser.h"

#include <limits.h>

/* Large enough for any transcript. Not SIZE_MAX: tm_buf computes its
 * capacity as max + 1 (see README.md, findings). */
#define UNBOUNDED ((size_t)1 << 30)

/* ---- a transcript of callbacks, binary-safe ------------------------------------ */

typedef struct rec {
    tm_buf log;
    tm_sse_parser *p;
    size_t max_data;
} rec;

static void put(tm_buf *b, const char *s, size_t n)
{
    char len[24];
    int l = snprintf(len, sizeof len, "%zu:", n);
    if (tm_buf_add(b, len, (size_t)l) || tm_buf_add(b, s, n))
        abort();
}

static void puts_(tm_buf *b, const char *s)
{
    put(b, s, strlen(s));
}

static int on_event(void *ud, const tm_sse_event *ev)
{
    rec *r = ud;
    /* The type may hold a NUL ("event: \0x"): C readers then see less of it. */
    FUZZ_CHECK(ev->type != NULL, "event without a type");
    FUZZ_CHECK(ev->data && ev->data[ev->data_len] == '\0', "data not NUL-terminated");
    FUZZ_CHECK(ev->data_len <= r->max_data, "data %zu over max %zu", ev->data_len, r->max_data);
    FUZZ_CHECK(ev->own_id == 0 || ev->own_id == 1, "own_id %d", ev->own_id);
    const char *last = tm_sse_parser_last_id(r->p);
    FUZZ_CHECK((ev->id == NULL) == (last == NULL) && (!ev->id || strcmp(ev->id, last) == 0),
               "event id is not the stream's last id");
    FUZZ_CHECK(!ev->own_id || ev->id, "own id without an id");
    puts_(&r->log, "E");
    puts_(&r->log, ev->type);
    puts_(&r->log, ev->id ? ev->id : "\x01-");
    puts_(&r->log, ev->own_id ? "1" : "0");
    FUZZ_CHECK(ev->bad_id == 0 || ev->bad_id == 1, "bad_id %d", ev->bad_id);
    puts_(&r->log, ev->bad_id ? "1" : "0");
    put(&r->log, ev->data, ev->data_len);
    return 0;
}

static void on_retry(void *ud, unsigned long ms)
{
    rec *r = ud;
    char t[32];
    snprintf(t, sizeof t, "%lu", ms);
    puts_(&r->log, "R");
    puts_(&r->log, t);
}

static void on_comment(void *ud, const char *text, size_t len)
{
    rec *r = ud;
    puts_(&r->log, "C");
    put(&r->log, text, len);
}

static void on_id(void *ud, const char *id)
{
    rec *r = ud;
    FUZZ_CHECK(id && strcmp(id, tm_sse_parser_last_id(r->p)) == 0, "on_id is not the last id");
    puts_(&r->log, "I");
    puts_(&r->log, id);
}

static void on_id_only(void *ud, const char *id)
{
    rec *r = ud;
    puts_(&r->log, "O");
    puts_(&r->log, id);
}

static const tm_sse_callbacks CB = {on_event, on_retry, on_comment, on_id, on_id_only};

static uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Parse the whole stream in chunks: chunk 0 = all at once, 1 = one byte at
 * a time, else pseudo-random sizes 1..chunk. The transcript goes to out
 * (caller frees). */
static void parse_all(const char *s, size_t n, size_t max_line, size_t max_data, unsigned chunk,
                      uint32_t seed, tm_buf *out)
{
    rec r;
    memset(&r, 0, sizeof r);
    tm_buf_init(&r.log, UNBOUNDED);
    r.max_data = max_data ? max_data : TM_SSE_DEFAULT_MAX_DATA;
    FUZZ_CHECK(tm_sse_parser_new(max_line, max_data, &CB, &r, &r.p) == 0, "parser_new");
    uint32_t st = seed | 1;
    size_t i = 0;
    int rc = 0;
    while (i < n) {
        size_t k = chunk == 0 ? n - i : chunk == 1 ? 1 : 1 + next_rand(&st) % chunk;
        if (k > n - i)
            k = n - i;
        rc = tm_sse_parser_feed(r.p, s + i, k);
        i += k;
        if (rc) {
            char t[16];
            snprintf(t, sizeof t, "%d", rc);
            puts_(&r.log, "F");
            puts_(&r.log, t);
            /* sticky */
            FUZZ_CHECK(tm_sse_parser_feed(r.p, "\n\n", 2) == rc, "failure not sticky");
            break;
        }
    }
    int frc = tm_sse_parser_finish(r.p);
    FUZZ_CHECK(frc == rc, "finish %d after feed %d", frc, rc);
    const char *last = tm_sse_parser_last_id(r.p);
    puts_(&r.log, "L");
    puts_(&r.log, last ? last : "\x01-");
    *out = r.log;
    /* After finish the parser takes a new stream and keeps the last id
     * (this probe is not part of the transcript). */
    tm_buf_init(&r.log, UNBOUNDED);
    FUZZ_CHECK(tm_sse_parser_feed(r.p, "data: x\n\n", 9) == 0, "parser unusable after finish");
    FUZZ_CHECK((last == NULL) == (tm_sse_parser_last_id(r.p) == NULL), "last id lost at finish");
    tm_buf_free(&r.log);
    tm_sse_parser_free(r.p);
}

static void same_transcript(const tm_buf *a, const tm_buf *b, const char *what)
{
    FUZZ_CHECK(a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0),
               "%s: transcripts differ\n  want: %s", what, fz_show(a->data, a->len));
}

static void same_transcript2(const tm_buf *a, const tm_buf *b, const char *what)
{
    if (!(a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0)))
        fprintf(stderr, "  got:  %s\n", fz_show(b->data, b->len));
    same_transcript(a, b, what);
}

static void fuzz_parse(fz *f)
{
    uint32_t seed = (uint32_t)fz_u8(f) * 2654435761u;
    int lim = fz_u8(f);
    size_t max_line = (size_t)(lim & 0x0f) * 16, max_data = (size_t)(lim >> 4) * 32;
    const char *s = (const char *)f->p;
    size_t n = f->n;
    tm_buf whole, chunked, bytes;
    parse_all(s, n, max_line, max_data, 0, seed, &whole);
    parse_all(s, n, max_line, max_data, 2 + seed % 31, seed, &chunked);
    same_transcript2(&whole, &chunked, "random chunks");
    if (n <= 2048) {
        parse_all(s, n, max_line, max_data, 1, seed, &bytes);
        same_transcript2(&whole, &bytes, "one byte at a time");
        tm_buf_free(&bytes);
    }
    tm_buf_free(&whole);
    tm_buf_free(&chunked);
}

/* ---- framing round trip ---------------------------------------------------------- */

static int has_crlf(const char *s, size_t n)
{
    return memchr(s, '\r', n) || memchr(s, '\n', n);
}

/* Data as the parser gives it back: every CRLF, CR and LF is one LF. */
static void put_normalized(tm_buf *b, const char *s, size_t n)
{
    char *t = malloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r') {
            t[o++] = '\n';
            if (i + 1 < n && s[i + 1] == '\n')
                i++;
        } else {
            t[o++] = s[i];
        }
    }
    put(b, t, o);
    free(t);
}

static void fuzz_frame(fz *f)
{
    uint32_t seed = (uint32_t)fz_u8(f) * 2246822519u;
    tm_buf out, want, bounded;
    tm_buf_init(&out, UNBOUNDED);
    tm_buf_init(&want, UNBOUNDED);
    /* The bounded buffer holds about half of what the input could frame. */
    tm_buf_init(&bounded, f->n / 2 + 16);
    int have_last = 0;
    char *last = fz_dup("", 0);
    size_t rl;
    const char *r;
    int records = 0;
    while ((r = fz_field(f, '\x1e', &rl)) != NULL && records++ < 64) {
        if (rl == 0)
            continue;
        size_t before = out.len;
        int rc;
        if (r[0] == 'E') {
            fz g = {(const uint8_t *)r + 1, rl - 1};
            size_t fl, el, il;
            const char *flags = fz_field(&g, '\x1f', &fl);
            const char *ev = fz_field(&g, '\x1f', &el);
            const char *id = fz_field(&g, '\x1f', &il);
            int fb = flags && fl ? (flags[0] - '0') & 3 : 0;
            /* Names and ids are C strings: they end at a NUL. */
            char *evs = fb & 1 ? fz_dup(ev ? ev : "", ev ? strnlen(ev, el) : 0) : NULL;
            char *ids = fb & 2 ? fz_dup(id ? id : "", id ? strnlen(id, il) : 0) : NULL;
            const char *data = (const char *)g.p;
            size_t dl = g.n;
            rc = tm_sse_frame(&out, evs, ids, data, dl);
            int bad = (evs && has_crlf(evs, strlen(evs))) || (ids && has_crlf(ids, strlen(ids)));
            if (rc == 0) {
                FUZZ_CHECK(!bad, "framed an event name or id holding CR/LF: [%s] [%s]",
                           evs ? evs : "-", ids ? ids : "-");
                if (ids && (!have_last || strcmp(ids, last) != 0)) {
                    puts_(&want, "I");
                    puts_(&want, ids);
                    free(last);
                    last = fz_dup(ids, strlen(ids));
                    have_last = 1;
                }
                puts_(&want, "E");
                puts_(&want, evs && evs[0] ? evs : "message");
                puts_(&want, have_last ? last : "\x01-");
                puts_(&want, ids ? "1" : "0");
                puts_(&want, "0"); /* bad_id: a framed id never holds a NUL */
                put_normalized(&want, data, dl);
            } else {
                FUZZ_CHECK(bad && rc == TIDEMARK_EINVAL, "tm_sse_frame failed: %d", rc);
            }
            /* The same frame into the bounded buffer: all or nothing. */
            size_t bl = bounded.len;
            int brc = tm_sse_frame(&bounded, evs, ids, data, dl);
            if (brc == 0)
                FUZZ_CHECK(rc == 0 && bounded.len - bl == out.len - before &&
                               memcmp(bounded.data + bl, out.data + before, out.len - before) == 0,
                           "bounded frame differs");
            else
                FUZZ_CHECK(bounded.len == bl && (!bounded.data || bounded.data[bl] == '\0') &&
                               (brc == rc || brc == TIDEMARK_ERANGE),
                           "a failed frame changed the buffer (rc %d)", brc);
            free(evs);
            free(ids);
        } else if (r[0] == 'C') {
            char *t = fz_dup(r + 1, strnlen(r + 1, rl - 1));
            if (has_crlf(t, strlen(t))) { /* documented as not allowed */
                free(t);
                continue;
            }
            rc = tm_sse_frame_comment(&out, t);
            FUZZ_CHECK(rc == 0, "comment: %d", rc);
            puts_(&want, "C");
            puts_(&want, t);
            free(t);
        } else if (r[0] == 'R') {
            unsigned ms = 0;
            for (size_t i = 1; i < rl && r[i] >= '0' && r[i] <= '9'; i++)
                ms = ms > (UINT_MAX - 9) / 10 ? UINT_MAX : ms * 10 + (unsigned)(r[i] - '0');
            rc = tm_sse_frame_retry(&out, ms);
            FUZZ_CHECK(rc == 0, "retry: %d", rc);
            char t[16];
            snprintf(t, sizeof t, "%u", ms);
            puts_(&want, "R");
            puts_(&want, t);
        } else {
            continue;
        }
        if (rc)
            FUZZ_CHECK(out.len == before, "a failed frame left bytes behind");
    }
    puts_(&want, "L");
    puts_(&want, have_last ? last : "\x01-");
    tm_buf got;
    parse_all(out.data ? out.data : "", out.len, 0, 0, 0, seed, &got);
    /* The framed bytes carry no leftover: the parser's own "data: x" probe
     * after finish is outside the transcript. */
    same_transcript2(&want, &got, "frame -> parse");
    tm_buf got2;
    parse_all(out.data ? out.data : "", out.len, 0, 0, 2 + seed % 13, seed, &got2);
    same_transcript2(&want, &got2, "frame -> parse in chunks");
    tm_buf_free(&got);
    tm_buf_free(&got2);
    tm_buf_free(&out);
    tm_buf_free(&want);
    tm_buf_free(&bounded);
    free(last);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size};
    int mode = fz_u8(&f);
    if (mode == 'P')
        fuzz_parse(&f);
    else if (mode == 'F')
        fuzz_frame(&f);
    return 0;
}
