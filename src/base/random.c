/* random.c - getrandom(2) wrapper. */
#include "random.h"
#include "tidemark/tidemark.h"
#include <errno.h>
#include <sys/random.h>

int tm_random_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return TIDEMARK_EIO;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int tm_random_hex(char *out, size_t nbytes)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[64];
    if (nbytes > sizeof raw)
        return TIDEMARK_ERANGE;
    int rc = tm_random_bytes(raw, nbytes);
    if (rc)
        return rc;
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * nbytes] = '\0';
    return 0;
}
