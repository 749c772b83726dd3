/* str.h - owned copies of strings and byte ranges. */
#ifndef TM_STR_H
#define TM_STR_H
#include <stddef.h>
#include <stdint.h>

/* A copy of s (free it), or NULL when s is NULL or memory is short. */
char *tm_strdup(const char *s);
/* A NUL-terminated copy of n bytes at p (free it; p may be NULL when n is
 * 0), or NULL when memory is short. */
char *tm_memdup(const void *p, size_t n);
/* The strings up to a NULL, one after the other, into out (n bytes), cut
 * to fit and always NUL-terminated (n > 0): snprintf("%s%s...") without
 * the format machinery, on paths every call takes. Returns the joined
 * length, or n when it had to be cut. */
size_t tm_strjoin(char *out, size_t n, ...);
/* v in decimal into out (at least 21 bytes), NUL-terminated; its length. */
size_t tm_u64_dec(char *out, uint64_t v);

#endif
