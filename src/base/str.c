/* str.c - see str.h. */
#include "str.h"
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
