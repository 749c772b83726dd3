/* sse.h - Server-Sent Events framing (server side). */
#ifndef TM_SSE_H
#define TM_SSE_H
#include "../base/buf.h"
#include <stddef.h>

/* Append one event: optional "event:" name, "id:" and the data, split into
 * one "data:" line per line of data so CR/LF inside data cannot end the
 * event early. An empty data still yields "data:" (priming event). An event
 * name or id holding CR or LF (which would forge a line) is refused with
 * TIDEMARK_EINVAL and nothing is appended. */
int tm_sse_frame(tm_buf *out, const char *event, const char *id, const char *data, size_t len);
/* Append "retry: ms". */
int tm_sse_frame_retry(tm_buf *out, unsigned ms);
/* Append a comment line (keep-alive). text must not contain CR or LF. */
int tm_sse_frame_comment(tm_buf *out, const char *text);

#endif
