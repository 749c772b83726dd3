/* buf.h - bounded, growable byte buffer (curl's dynbuf habit). */
#ifndef TM_BUF_H
#define TM_BUF_H
#include <stddef.h>

typedef struct tm_buf {
    char *data;   /* always NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
    size_t max;   /* hard limit on len; append past it fails with ERANGE */
} tm_buf;

/* Initialise an empty buffer that may grow to at most max bytes. */
void tm_buf_init(tm_buf *b, size_t max);
/* Append n bytes. Returns 0, TIDEMARK_ERANGE past max, TIDEMARK_ENOMEM. */
int tm_buf_add(tm_buf *b, const void *p, size_t n);
/* Append a NUL-terminated string. */
int tm_buf_adds(tm_buf *b, const char *s);
/* Append printf-formatted text. */
int tm_buf_printf(tm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drop the first n bytes (consumed output). */
void tm_buf_consume(tm_buf *b, size_t n);
/* Empty the buffer, keeping its memory. */
void tm_buf_reset(tm_buf *b);
/* Release the memory; the buffer is empty and reusable afterwards. */
void tm_buf_free(tm_buf *b);
/* Hand the bytes to the caller (free() them); the buffer becomes empty. */
char *tm_buf_steal(tm_buf *b, size_t *len_out);

#endif
