/*
 * stdio.h - the MCP stdio transport's framing: newline-delimited JSON-RPC
 * over a pair of file descriptors (a pipe, a socketpair, stdin/stdout).
 *
 * One message is one line: UTF-8 JSON without an embedded newline, ended by
 * '\n' (a '\r' before it is tolerated on input). Used by both sides: a
 * Tidemark server speaking stdio, and the gateway speaking to a child.
 *
 * Read side (tm_stdio_reader): a bounded line buffer. A line over the
 * message limit, a line that is not JSON, one holding a NUL byte or one
 * whose value is not an object or an array is a typed error for that line
 * only; the next call reads the next line. Blank lines are skipped. JSON
 * is read as the JSON-RPC layer reads it (duplicate keys refused, nesting
 * at most 64 deep, an escaped NUL inside a string allowed), but this layer
 * knows nothing of JSON-RPC: any object or array is a message.
 * Threading: a reader is used by one thread at a time (no lock); a cancel
 * fd (any fd that becomes readable: the read end of a pipe) may be written
 * from any thread to make a blocked tm_stdio_read return.
 *
 * Write side (tm_stdio_writer): one message per line, serialised compactly
 * (JSON escapes every newline inside strings, so none is ever embedded),
 * written whole under the writer's mutex (thread-safe: lines of concurrent
 * writers never interleave). EINTR and short writes are retried; a
 * non-blocking fd is waited on with poll. A closed peer is TIDEMARK_ECLOSED,
 * never a SIGPIPE: the write happens with SIGPIPE blocked in the calling
 * thread, and a SIGPIPE it raised is consumed before the mask is restored.
 * After a failed write the stream may hold half a line, so the writer is
 * broken and every later write returns TIDEMARK_ECLOSED.
 * Lock order: the writer's mutex is a leaf (nothing is called under it but
 * write/poll).
 */
#ifndef TM_STDIO_H
#define TM_STDIO_H
#include <jansson.h>
#include <stddef.h>

/* Default bound on one message (one line, newline excluded). */
#define TM_STDIO_DEFAULT_MAX (16u * 1024u * 1024u)

typedef struct tm_stdio_reader tm_stdio_reader;
typedef struct tm_stdio_writer tm_stdio_writer;

/* A reader of fd (not owned: the caller closes it after the free).
 * max_message 0: TM_STDIO_DEFAULT_MAX. cancel_fd -1: none. OUT *out.
 * Returns 0, TIDEMARK_EINVAL or TIDEMARK_ENOMEM. */
int tm_stdio_reader_new(int fd, size_t max_message, int cancel_fd, tm_stdio_reader **out);
void tm_stdio_reader_free(tm_stdio_reader *r);
/* Blocks for the next message. OUT *msg: a new reference (object or array).
 * Returns 0, or for that one line (the stream goes on):
 *   TIDEMARK_ERANGE  longer than max_message (the rest of it is skipped),
 *   TIDEMARK_EPROTO  not JSON, a NUL byte, or neither object nor array;
 * or for the stream: TIDEMARK_ECLOSED at end of input (a last line without
 * its newline is still delivered first), TIDEMARK_ECANCELED when the cancel
 * fd became readable, TIDEMARK_EIO on a read error. */
int tm_stdio_read(tm_stdio_reader *r, json_t **msg);
/* Why the last line was refused: "line_too_long", "invalid_json",
 * "nul_byte", "not_a_message" ("" after a good line). Static text. */
const char *tm_stdio_reader_why(const tm_stdio_reader *r);
/* The parser's text for the last invalid_json line (or ""); valid until the
 * next tm_stdio_read. */
const char *tm_stdio_reader_detail(const tm_stdio_reader *r);
/* OUT *n: lines read so far (good and bad, blank ones excluded). Returns 0. */
int tm_stdio_reader_lines(const tm_stdio_reader *r, unsigned long long *n);

/* A writer of fd (not owned). max_message 0: TM_STDIO_DEFAULT_MAX.
 * timeout_ms: how long one write may wait for a non-blocking fd to drain
 * (0: forever; a blocking fd always blocks). OUT *out. */
int tm_stdio_writer_new(int fd, size_t max_message, int timeout_ms, tm_stdio_writer **out);
void tm_stdio_writer_free(tm_stdio_writer *w);
/* Serialise msg compactly and write it as one line. Returns 0,
 * TIDEMARK_EINVAL (not serialisable, e.g. invalid UTF-8), TIDEMARK_ERANGE
 * (over max_message; nothing written, the writer stays usable),
 * TIDEMARK_ECLOSED (peer gone, or the writer broken by an earlier failure),
 * TIDEMARK_ETIMEDOUT (the peer did not drain in time; the writer is broken),
 * TIDEMARK_EIO, TIDEMARK_ENOMEM. Thread-safe. */
int tm_stdio_write(tm_stdio_writer *w, const json_t *msg);
/* Write len bytes of already-serialised JSON as one line (the newline is
 * added). TIDEMARK_EINVAL if they hold '\n', '\r' or NUL. Thread-safe. */
int tm_stdio_write_line(tm_stdio_writer *w, const char *line, size_t len);

#endif
