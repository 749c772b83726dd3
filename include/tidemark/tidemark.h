/*
 * tidemark.h - common definitions of libtidemark: error codes, versions.
 *
 * Every function of the library returns an int: 0 on success, a negative
 * TIDEMARK_E* code on failure. Results travel through OUT parameters, which
 * come last in the argument list.
 */
#ifndef TIDEMARK_TIDEMARK_H
#define TIDEMARK_TIDEMARK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every public function is marked TIDEMARK_API: the library is built with
 * -fvisibility=hidden, so only these are exported (nm -D lists tidemark_*
 * and nothing else). */
#if defined(TIDEMARK_BUILDING) && defined(__GNUC__)
#define TIDEMARK_API __attribute__((visibility("default")))
#else
#define TIDEMARK_API
#endif

/*
 * Structs a caller fills (configs, tools, resources, prompts) can grow
 * without breaking programs built against an older header. New fields are
 * only ever added at the end, and every function that takes such a struct
 * is a macro that also passes sizeof the struct as the caller's header
 * declared it (a *_sized function): the library reads that many bytes and
 * gives every field beyond them its default. A struct larger than the
 * library knows (a program built against a newer header) is accepted when
 * the bytes it does not know are zero, and refused with TIDEMARK_ENOTSUP
 * otherwise, so a setting is never silently ignored.
 */

/* The version of these headers. tidemark_version() tells the library's:
 * a program built against one version and run against another can compare. */
#define TIDEMARK_VERSION_MAJOR 0
#define TIDEMARK_VERSION_MINOR 2
#define TIDEMARK_VERSION_PATCH 0
#define TIDEMARK_VERSION "0.2.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons. */
#define TIDEMARK_VERSION_NUMBER \
    (TIDEMARK_VERSION_MAJOR * 10000 + TIDEMARK_VERSION_MINOR * 100 + TIDEMARK_VERSION_PATCH)

/* Error codes (negative). */
#define TIDEMARK_OK          0
#define TIDEMARK_EINVAL     -1   /* bad argument or malformed input */
#define TIDEMARK_ENOMEM     -2   /* allocation failed */
#define TIDEMARK_EIO        -3   /* I/O or storage failure */
#define TIDEMARK_ENOTFOUND  -4   /* no such session, stream, tool, ... */
#define TIDEMARK_EEXIST     -5   /* already exists */
#define TIDEMARK_EBUSY      -6   /* resource in use (stream attached) */
#define TIDEMARK_ETIMEDOUT  -7   /* deadline passed */
#define TIDEMARK_ECANCELED  -8   /* cancelled by the peer or by shutdown */
#define TIDEMARK_ENOTSUP    -9   /* not supported (by the peer or build) */
#define TIDEMARK_ERANGE    -10   /* value or size out of bounds */
#define TIDEMARK_EPROTO    -11   /* protocol violation by the peer */
#define TIDEMARK_ECLOSED   -12   /* session or stream already closed */
#define TIDEMARK_EPEER     -13   /* the peer answered with an error */
#define TIDEMARK_EINPUT    -14   /* 2026-07-28: the client's input is needed first
                                    (tidemark_call_input) */
#define TIDEMARK_EAGAIN    -15   /* a non-blocking handler would block: run it on a
                                    worker (TIDEMARK_TOOL_NONBLOCKING) */

/* Protocol versions this library speaks, newest first. */
#define TIDEMARK_PROTOCOL_2026_07_28 "2026-07-28"
#define TIDEMARK_PROTOCOL_2025_11_25 "2025-11-25"
#define TIDEMARK_PROTOCOL_2025_06_18 "2025-06-18"
#define TIDEMARK_PROTOCOL_2025_03_26 "2025-03-26"
#define TIDEMARK_PROTOCOL_LATEST TIDEMARK_PROTOCOL_2025_11_25

/* Returns a static, human-readable description of an error code. */
TIDEMARK_API const char *tidemark_strerror(int err);
/* The library's version as text ("0.2.0"); OUT number (may be NULL): as
 * TIDEMARK_VERSION_NUMBER. */
TIDEMARK_API const char *tidemark_version(int *number);

/* The library's diagnostics go to stderr, one line each. Level: "error",
 * "warn", "info" (default) or "debug"; format: "text" (default) or "json"
 * (one object per line: ts in ISO-8601 UTC, level, msg). Both thread-safe;
 * TIDEMARK_EINVAL for an unknown name. tidemark_log writes one line of the
 * application's own through the same logger (dropped below the level). */
TIDEMARK_API int tidemark_log_set_level(const char *level);
TIDEMARK_API int tidemark_log_set_format(const char *format);
TIDEMARK_API void tidemark_log(const char *level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
