/* version.c - the version of the library itself (see tidemark.h). */
#include "tidemark/tidemark.h"
#include <stddef.h>

const char *tidemark_version(int *number)
{
    if (number)
        *number = TIDEMARK_VERSION_NUMBER;
    return TIDEMARK_VERSION;
}
