/* abi.c - see abi.h. */
#include "abi.h"
#include "tidemark/tidemark.h"
#include <string.h>

int tm_abi_copy(void *dst, size_t our_size, const void *src, size_t caller_size)
{
    if (!src)
        return caller_size ? TIDEMARK_EINVAL : 0;
    const unsigned char *s = src;
    for (size_t i = our_size; i < caller_size; i++)
        if (s[i] != 0)
            return TIDEMARK_ENOTSUP; /* a setting this library does not know */
    memcpy(dst, src, caller_size < our_size ? caller_size : our_size);
    return 0;
}
