/* buf.c - bounded byte buffer. */
#include "buf.h"
#include "tidemark/tidemark.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void tm_buf_init(tm_buf *b, size_t max)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->max = max;
}

static int grow(tm_buf *b, size_t need)
{
    /* need + 1 (the NUL) and the doubling below must not wrap, whatever
     * max a caller chose (SIZE_MAX included). */
    if (need > b->max || need >= SIZE_MAX / 2)
        return TIDEMARK_ERANGE;
    if (need + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need + 1)
        cap *= 2;
    size_t limit = b->max < SIZE_MAX / 2 ? b->max + 1 : SIZE_MAX / 2;
    if (cap > limit)
        cap = limit;
    char *p = realloc(b->data, cap);
    if (!p)
        return TIDEMARK_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int tm_buf_add(tm_buf *b, const void *p, size_t n)
{
    if (n > b->max - b->len)
        return TIDEMARK_ERANGE;
    int rc = grow(b, b->len + n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int tm_buf_adds(tm_buf *b, const char *s)
{
    return tm_buf_add(b, s, strlen(s));
}

int tm_buf_printf(tm_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return TIDEMARK_EINVAL;
    if ((size_t)n < sizeof small)
        return tm_buf_add(b, small, (size_t)n);
    if ((size_t)n > b->max - b->len)
        return TIDEMARK_ERANGE;
    int rc = grow(b, b->len + (size_t)n);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void tm_buf_consume(tm_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        if (b->data)
            b->data[0] = '\0';
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

void tm_buf_reset(tm_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void tm_buf_free(tm_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *tm_buf_steal(tm_buf *b, size_t *len_out)
{
    char *p = b->data;
    if (len_out)
        *len_out = b->len;
    if (!p) {
        p = calloc(1, 1);
        if (len_out)
            *len_out = 0;
    }
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}
