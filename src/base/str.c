/* str.c - see str.h. */
#include "str.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

char *tm_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

char *tm_memdup(const void *p, size_t n)
{
    char *o = malloc(n + 1);
    if (o) {
        if (n)
            memcpy(o, p, n);
        o[n] = '\0';
    }
    return o;
}

size_t tm_strjoin(char *out, size_t n, ...)
{
    size_t o = 0;
    int cut = 0;
    va_list ap;
    va_start(ap, n);
    for (const char *s; (s = va_arg(ap, const char *)) != NULL && !cut;) {
        size_t k = strlen(s);
        if (o + k >= n) {
            k = n - 1 - o;
            cut = 1;
        }
        memcpy(out + o, s, k);
        o += k;
    }
    va_end(ap);
    out[o] = '\0';
    return cut ? n : o;
}

size_t tm_u64_dec(char *out, uint64_t v)
{
    char tmp[21];
    size_t k = 0;
    do {
        tmp[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < k; i++)
        out[i] = tmp[k - 1 - i];
    out[k] = '\0';
    return k;
}
