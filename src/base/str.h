/* str.h - owned copies of strings and byte ranges. */
#ifndef TM_STR_H
#define TM_STR_H
#include <stddef.h>

/* A copy of s (free it), or NULL when s is NULL or memory is short. */
char *tm_strdup(const char *s);
/* A NUL-terminated copy of n bytes at p (free it; p may be NULL when n is
 * 0), or NULL when memory is short. */
char *tm_memdup(const void *p, size_t n);

#endif
