/* mem.c - the allocator memory that changes hands between the library and
 * the application goes through (tidemark.h, "Who frees what"). Internally
 * the library frees such memory with free(): these two are its allocator. */
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>

void tidemark_free(void *p)
{
    free(p);
}

char *tidemark_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}
