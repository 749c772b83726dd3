/* abi.h - reading structs a caller filled with another header's layout
 * (tidemark.h, "Structs a caller fills"). */
#ifndef TM_ABI_H
#define TM_ABI_H
#include <stddef.h>

/* Copy a caller's struct of caller_size bytes into dst (ours, our_size
 * bytes), which already holds every default: fields beyond caller_size keep
 * them. TIDEMARK_ENOTSUP when the caller's struct is larger than ours and a
 * byte we do not know is not zero; TIDEMARK_EINVAL when src is NULL with a
 * size. */
int tm_abi_copy(void *dst, size_t our_size, const void *src, size_t caller_size);

#endif
