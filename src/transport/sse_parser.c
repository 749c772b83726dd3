/* sse_parser.c - incremental SSE parser per the HTML "event stream interpretation". */
#include "sse_parser.h"
#include "../base/buf.h"
#include "tidemark/tidemark.h"
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const unsigned char BOM[3] = {0xEF, 0xBB, 0xBF};

struct tm_sse_parser {
    tm_sse_callbacks cb;
    void *ud;
    size_t max_line;
    size_t max_data;
    tm_buf line;      /* the current line while it spans chunks (max_line) */
    tm_buf data;      /* data buffer: value + LF per data: line (max_data + 1) */
    tm_buf type;      /* event type buffer (max_line) */
    tm_buf pend_id;   /* id: value read since the last blank line (max_line) */
    tm_buf last_id;   /* committed last event id (max_line) */
    int id_pending;   /* pend_id holds an id: not yet committed */
    int block_id;     /* the current block had a valid id: field */
    int block_bad_id; /* the current block had an id: field ignored for a NUL */
    int have_last_id; /* last_id was ever committed */
    int bom_done;     /* past the start of the stream */
    unsigned bom;     /* bytes of the BOM matched (and held) so far */
    int skip_lf;      /* previous line ended with CR: an LF next is its pair */
    int err;          /* sticky failure */
};

static const char *str(const tm_buf *b)
{
    return b->data ? b->data : "";
}

static int field_is(const char *f, size_t flen, const char *name)
{
    size_t n = strlen(name);
    return flen == n && memcmp(f, name, n) == 0;
}

/* A blank line: commit the id, then dispatch the event if there is data. */
static int dispatch(tm_sse_parser *p)
{
    int own_id = p->block_id, bad_id = p->block_bad_id;
    p->block_id = p->block_bad_id = 0;
    if (p->id_pending) {
        p->id_pending = 0;
        int same = p->have_last_id && p->pend_id.len == p->last_id.len &&
                   (p->pend_id.len == 0 ||
                    memcmp(p->pend_id.data, p->last_id.data, p->pend_id.len) == 0);
        if (!same) {
            /* Swap rather than copy: committing never allocates or fails. */
            tm_buf t = p->last_id;
            p->last_id = p->pend_id;
            p->pend_id = t;
            p->have_last_id = 1;
            if (p->cb.on_id)
                p->cb.on_id(p->ud, str(&p->last_id));
        }
    }
    if (p->data.len == 0) {
        tm_buf_reset(&p->type);
        if (own_id && p->cb.on_id_only)
            p->cb.on_id_only(p->ud, str(&p->last_id));
        return 0;
    }
    /* A non-empty data buffer always ends with the LF of its last line. */
    p->data.len--;
    p->data.data[p->data.len] = '\0';
    tm_sse_event ev = {
        .type = p->type.len ? p->type.data : "message",
        .id = p->have_last_id ? str(&p->last_id) : NULL,
        .data = p->data.data,
        .data_len = p->data.len,
        .own_id = own_id,
        .bad_id = bad_id,
    };
    int rc = p->cb.on_event ? p->cb.on_event(p->ud, &ev) : 0;
    tm_buf_reset(&p->data);
    tm_buf_reset(&p->type);
    return rc;
}

static int process_line(tm_sse_parser *p, const char *line, size_t n)
{
    if (n == 0)
        return dispatch(p);
    if (line[0] == ':') {
        if (p->cb.on_comment) {
            const char *t = line + 1;
            size_t tl = n - 1;
            if (tl && t[0] == ' ') {
                t++;
                tl--;
            }
            p->cb.on_comment(p->ud, t, tl);
        }
        return 0;
    }
    const char *colon = memchr(line, ':', n);
    size_t flen = colon ? (size_t)(colon - line) : n;
    const char *val = colon ? colon + 1 : line + n;
    size_t vlen = colon ? n - flen - 1 : 0;
    if (vlen && val[0] == ' ') {
        val++;
        vlen--;
    }
    int rc = 0;
    if (field_is(line, flen, "data")) {
        if (!(rc = tm_buf_add(&p->data, val, vlen)))
            rc = tm_buf_add(&p->data, "\n", 1);
    } else if (field_is(line, flen, "event")) {
        tm_buf_reset(&p->type);
        rc = tm_buf_add(&p->type, val, vlen);
    } else if (field_is(line, flen, "id")) {
        if (!memchr(val, '\0', vlen)) {
            tm_buf_reset(&p->pend_id);
            if (!(rc = tm_buf_add(&p->pend_id, val, vlen)))
                p->id_pending = p->block_id = 1;
        } else {
            p->block_bad_id = 1; /* ignored, as the standard says, but not silently */
        }
    } else if (field_is(line, flen, "retry")) {
        size_t i = 0;
        unsigned long ms = 0;
        while (i < vlen && val[i] >= '0' && val[i] <= '9') {
            unsigned long d = (unsigned long)(val[i] - '0');
            ms = ms > (ULONG_MAX - d) / 10 ? ULONG_MAX : ms * 10 + d;
            i++;
        }
        if (vlen && i == vlen && p->cb.on_retry)
            p->cb.on_retry(p->ud, ms);
    }
    return rc;
}

/* Split bytes into lines; a line spanning chunks is gathered in p->line. */
static int parse(tm_sse_parser *p, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (p->skip_lf) {
            p->skip_lf = 0;
            if (s[i] == '\n') {
                i++;
                continue;
            }
        }
        size_t j = i;
        while (j < n && s[j] != '\n' && s[j] != '\r')
            j++;
        if (j == n)
            return tm_buf_add(&p->line, s + i, n - i); /* ERANGE past max_line */
        const char *line;
        size_t len;
        int rc;
        if (p->line.len == 0) {
            /* The whole line is in this chunk: no copy. */
            if (j - i > p->max_line)
                return TIDEMARK_ERANGE;
            line = s + i;
            len = j - i;
        } else {
            if ((rc = tm_buf_add(&p->line, s + i, j - i)))
                return rc;
            line = p->line.data;
            len = p->line.len;
        }
        p->skip_lf = s[j] == '\r';
        i = j + 1;
        rc = process_line(p, line, len);
        tm_buf_reset(&p->line);
        if (rc)
            return rc;
    }
    return 0;
}

static size_t clamp_limit(size_t v, size_t dflt)
{
    if (v == 0)
        return dflt;
    return v > SIZE_MAX / 4 ? SIZE_MAX / 4 : v;
}

int tm_sse_parser_new(size_t max_line, size_t max_data, const tm_sse_callbacks *cb, void *ud,
                      tm_sse_parser **out)
{
    if (!out)
        return TIDEMARK_EINVAL;
    *out = NULL;
    tm_sse_parser *p = calloc(1, sizeof *p);
    if (!p)
        return TIDEMARK_ENOMEM;
    if (cb)
        p->cb = *cb;
    p->ud = ud;
    p->max_line = clamp_limit(max_line, TM_SSE_DEFAULT_MAX_LINE);
    p->max_data = clamp_limit(max_data, TM_SSE_DEFAULT_MAX_DATA);
    tm_buf_init(&p->line, p->max_line);
    /* +1: the data buffer holds the LF that dispatch removes. */
    tm_buf_init(&p->data, p->max_data + 1);
    tm_buf_init(&p->type, p->max_line);
    tm_buf_init(&p->pend_id, p->max_line);
    tm_buf_init(&p->last_id, p->max_line);
    *out = p;
    return 0;
}

int tm_sse_parser_feed(tm_sse_parser *p, const char *buf, size_t len)
{
    if (!p || (!buf && len))
        return TIDEMARK_EINVAL;
    if (p->err)
        return p->err;
    size_t i = 0;
    int rc = 0;
    /* One BOM at the very start of the stream is dropped, even when split
     * across chunks; a partial match is held and replayed as content. */
    while (!p->bom_done && i < len) {
        if ((unsigned char)buf[i] == BOM[p->bom]) {
            i++;
            if (++p->bom == sizeof BOM)
                p->bom_done = 1;
            continue;
        }
        p->bom_done = 1;
        if (p->bom && (rc = parse(p, (const char *)BOM, p->bom)))
            return p->err = rc;
    }
    if ((rc = parse(p, buf + i, len - i)))
        p->err = rc;
    return rc;
}

void tm_sse_parser_reset(tm_sse_parser *p)
{
    if (!p)
        return;
    /* Free rather than empty: a long line or event of the old stream does
     * not keep its memory. The committed last event id survives. */
    tm_buf_free(&p->line);
    tm_buf_free(&p->data);
    tm_buf_free(&p->type);
    tm_buf_free(&p->pend_id);
    p->id_pending = p->block_id = p->block_bad_id = 0;
    p->bom_done = 0;
    p->bom = 0;
    p->skip_lf = 0;
    p->err = 0;
}

int tm_sse_parser_finish(tm_sse_parser *p)
{
    if (!p)
        return TIDEMARK_EINVAL;
    int rc = p->err;
    tm_sse_parser_reset(p);
    return rc;
}

const char *tm_sse_parser_last_id(const tm_sse_parser *p)
{
    return p && p->have_last_id ? str(&p->last_id) : NULL;
}

void tm_sse_parser_free(tm_sse_parser *p)
{
    if (!p)
        return;
    tm_sse_parser_reset(p); /* frees every buffer but the last event id */
    tm_buf_free(&p->last_id);
    free(p);
}
