/*
 * fuzz_util.h - helpers shared by the fuzz targets (tests/fuzz/fuzz_*.c).
 *
 * FUZZ_CHECK(cond, fmt, ...) states an invariant: when it does not hold, it
 * prints where and why and aborts, which libFuzzer reports as a crash (and
 * saves the input). fuzz_field() splits the input at a delimiter, so seed
 * files stay readable text.
 *
 * FUZZ_KNOWN(name, cond, fmt, ...) is an invariant that is known to fail
 * today because of a bug in a file the fuzzing work does not own; the bug is
 * described in tests/fuzz/README.md and its reproducer is kept under
 * tests/fuzz/regressions/<target>/. It aborts only when the environment has
 * TIDEMARK_FUZZ_STRICT=1, so the short runs in make test keep looking for
 * new bugs instead of finding the same one again. Remove the FUZZ_KNOWN once
 * the bug is fixed (make it a FUZZ_CHECK).
 */
#ifndef TM_FUZZ_UTIL_H
#define TM_FUZZ_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                             \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "\n%s:%d: invariant failed: %s\n  ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static inline int fuzz_strict(void)
{
    static int strict = -1;
    if (strict < 0) {
        const char *s = getenv("TIDEMARK_FUZZ_STRICT");
        strict = s && strcmp(s, "1") == 0;
    }
    return strict;
}

#define FUZZ_KNOWN(name, cond, ...)                                                       \
    do {                                                                                  \
        if (!(cond) && fuzz_strict()) {                                                   \
            fprintf(stderr, "\n%s:%d: known finding %s: %s\n  ", __FILE__, __LINE__, name, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

/* A cursor over the input. */
typedef struct fz {
    const uint8_t *p;
    size_t n;
} fz;

static inline int fz_u8(fz *f)
{
    if (!f->n)
        return 0;
    f->n--;
    return *f->p++;
}

/* The bytes up to the next delim (or to the end), consumed with the delim.
 * *len gets their count; returns NULL when the input is exhausted. */
static inline const char *fz_field(fz *f, char delim, size_t *len)
{
    if (!f->n) {
        *len = 0;
        return NULL;
    }
    const uint8_t *s = f->p;
    const uint8_t *e = memchr(s, (unsigned char)delim, f->n);
    size_t l = e ? (size_t)(e - s) : f->n;
    f->p += l + (e ? 1 : 0);
    f->n -= l + (e ? 1 : 0);
    *len = l;
    return (const char *)s;
}

/* A malloc'ed NUL-terminated copy of n bytes (abort on no memory). */
static inline char *fz_dup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d)
        abort();
    if (n)
        memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Printable excerpt of bytes for failure messages (static buffer). */
static inline const char *fz_show(const char *s, size_t n)
{
    static char out[512];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < sizeof out; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, sizeof out - o, "\\x%02x", c);
    }
    out[o] = '\0';
    return out;
}

#endif
