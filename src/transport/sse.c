/* sse.c - SSE framing per the HTML event-stream format. */
#include "sse.h"
#include "tidemark/tidemark.h"
#include <string.h>

/* A field value that would end its line early (and could then inject an
 * "id:" or end the event) cannot be framed: tm_sse_frame refuses an event
 * name or id holding CR or LF with TIDEMARK_EINVAL and appends nothing. */
static int one_line(const char *s)
{
    return !s || !s[strcspn(s, "\r\n")];
}

int tm_sse_frame(tm_buf *out, const char *event, const char *id, const char *data, size_t len)
{
    size_t mark = out->len;
    int rc = 0;
    if (!one_line(event) || !one_line(id))
        return TIDEMARK_EINVAL;
    /* Field lines without the format machinery: one per event sent. */
    if (event && ((rc = tm_buf_add(out, "event: ", 7)) || (rc = tm_buf_add(out, event, strlen(event))) ||
                  (rc = tm_buf_add(out, "\n", 1))))
        goto fail;
    if (id && ((rc = tm_buf_add(out, "id: ", 4)) || (rc = tm_buf_add(out, id, strlen(id))) ||
               (rc = tm_buf_add(out, "\n", 1))))
        goto fail;
    size_t i = 0;
    do {
        size_t j = i;
        while (j < len && data[j] != '\n' && data[j] != '\r')
            j++;
        if ((rc = tm_buf_add(out, "data: ", 6)) || (rc = tm_buf_add(out, data + i, j - i)) ||
            (rc = tm_buf_add(out, "\n", 1)))
            goto fail;
        if (j < len && data[j] == '\r' && j + 1 < len && data[j + 1] == '\n')
            j++;
        i = j + 1;
    } while (i <= len && i > 0 && i - 1 < len);
    if ((rc = tm_buf_add(out, "\n", 1)))
        goto fail;
    return 0;
fail:
    out->len = mark;
    if (out->data)
        out->data[mark] = '\0';
    return rc;
}

int tm_sse_frame_retry(tm_buf *out, unsigned ms)
{
    return tm_buf_printf(out, "retry: %u\n\n", ms);
}

int tm_sse_frame_comment(tm_buf *out, const char *text)
{
    return tm_buf_printf(out, ": %s\n\n", text);
}
