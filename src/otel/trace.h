/*
 * trace.h - W3C Trace Context: ids, and the traceparent header's one
 * version-00 form "00-<32 hex trace id>-<16 hex span id>-<2 hex flags>".
 * Pure functions; no state, no allocation (fuzzed: tests/fuzz).
 */
#ifndef TM_OTEL_TRACE_H
#define TM_OTEL_TRACE_H
#include <stddef.h>
#include <stdint.h>

/* "00-" 32 "-" 16 "-" 2: 55 characters, plus NUL. */
#define TM_TRACEPARENT_LEN 55
#define TM_TRACE_FLAG_SAMPLED 0x01

typedef struct tm_trace_ctx {
    uint8_t trace_id[16]; /* never all zero when valid */
    uint8_t span_id[8];   /* never all zero when valid */
    uint8_t flags;        /* bit 0: sampled */
    uint8_t valid;        /* 1 once parsed or made; 0: no context */
} tm_trace_ctx;

/* Parse s[0..n) strictly: lowercase hex only, version 00 exactly 55
 * characters; a later version (not ff) may carry more after a '-', as the
 * W3C text says. Zero ids, version ff, upper case, any other length or
 * separator: TIDEMARK_EINVAL and *out invalid. Returns 0 on success. */
int tm_traceparent_parse(const char *s, size_t n, tm_trace_ctx *out);
/* out: TM_TRACEPARENT_LEN + 1 bytes; always version 00. */
void tm_traceparent_format(const tm_trace_ctx *c, char out[TM_TRACEPARENT_LEN + 1]);
/* Lowercase hex of n bytes into out (2n + 1 bytes). */
void tm_trace_hex(const uint8_t *b, size_t n, char *out);
/* New random ids from the CSPRNG, never all zero. 0 or TIDEMARK_EIO. */
int tm_trace_new_trace_id(uint8_t id[16]);
int tm_trace_new_span_id(uint8_t id[8]);

#endif
