/* random.h - CSPRNG bytes from the kernel. */
#ifndef TM_RANDOM_H
#define TM_RANDOM_H
#include <stddef.h>

/* Fill buf with n cryptographically random bytes. Returns 0 or TIDEMARK_EIO. */
int tm_random_bytes(void *buf, size_t n);
/* Write 2*nbytes lowercase hex digits plus NUL into out (size >= 2*nbytes+1). */
int tm_random_hex(char *out, size_t nbytes);

#endif
