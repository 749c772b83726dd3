/*
 * tidemark.h - common definitions of libtidemark: error codes, versions.
 *
 * Every function of the library returns an int: 0 on success, a negative
 * TIDEMARK_E* code on failure. Results travel through OUT parameters, which
 * come last in the argument list.
 *
 * Who frees what. Each function's comment says it for what it hands over;
 * the rules it applies are these:
 *  - Memory changes hands only through the library's allocator. A string
 *    the library hands out (OUT char **) is freed with tidemark_free(); a
 *    string the application hands the library to keep (a callback's OUT
 *    char **) is made with tidemark_strdup() (or is one the library handed
 *    out). Never free() the one, never pass malloc'd memory as the other.
 *  - JSON values are jansson's (json_t): an OUT json_t ** is a new
 *    reference the caller json_decref()s; a json_t * argument is borrowed
 *    (the library takes its own reference or copy) unless the comment says
 *    it is stolen; a handler's OUT result is handed to the library.
 *  - Objects (tidemark_server_t, tidemark_client_t, tidemark_loopback_t)
 *    are freed by their own *_free / *_close, which accept NULL.
 *  - Strings and structs passed in (configs, tools, names, URIs) are
 *    borrowed for the call and copied where kept; const char * results are
 *    the library's, valid as the function's comment says, never freed.
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
 *
 * That needs every byte of such a struct to be a named field: one a later
 * header adds must never land in a hole or in tail padding, bytes an older
 * program's initializer may have left unset. So these structs have no hole
 * and no tail padding: 4-byte fields go in pairs (a lone one gets a
 * reserved partner that must stay 0), and a zero in any field a later
 * header adds means that field's default. The build asserts where each
 * struct ends (src/base/abi.c) and make test runs pahole over the
 * library's debug information (tests/abi/pahole.sh).
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

/*
 * Error codes, names and messages: one table, X(NAME, value, message), from
 * which the codes (TIDEMARK_<NAME>), tidemark_strerror() and
 * tidemark_err_name() are all made (as libuv's UV_ERRNO_MAP). Codes are
 * negative and dense: TIDEMARK_ELAST is the last (lowest) one; a new code
 * goes at the end, and a code's value never changes.
 */
#define TIDEMARK_ERRNO_MAP(X)                                                                 \
    X(EINVAL, -1, "invalid argument or malformed input")                                     \
    X(ENOMEM, -2, "out of memory")                                                           \
    X(EIO, -3, "I/O or storage failure")                                                     \
    X(ENOTFOUND, -4, "not found")                 /* no such session, stream, tool, ... */ \
    X(EEXIST, -5, "already exists")                                                          \
    X(EBUSY, -6, "resource busy")                 /* in use (a stream attached) */         \
    X(ETIMEDOUT, -7, "timed out")                 /* a deadline passed */                  \
    X(ECANCELED, -8, "cancelled")                 /* by the peer or by shutdown */         \
    X(ENOTSUP, -9, "not supported")               /* by the peer, or this build */         \
    X(ERANGE, -10, "out of range")                /* a value or size out of bounds */      \
    X(EPROTO, -11, "protocol violation")          /* by the peer */                        \
    X(ECLOSED, -12, "closed")                     /* session or stream already closed */   \
    X(EPEER, -13, "peer returned an error")                                                  \
    /* 2026-07-28: the client's input is needed first (tidemark_call_input) */               \
    X(EINPUT, -14, "input from the client is needed first")                                  \
    /* a non-blocking handler would block: run it on a worker (TIDEMARK_TOOL_NONBLOCKING) */ \
    X(EAGAIN, -15, "would block: run on a worker")

typedef enum tidemark_error {
    TIDEMARK_OK = 0,
#define TIDEMARK_ERRNO_ENUM_(name, value, message) TIDEMARK_##name = value,
    TIDEMARK_ERRNO_MAP(TIDEMARK_ERRNO_ENUM_)
#undef TIDEMARK_ERRNO_ENUM_
    TIDEMARK_ELAST = TIDEMARK_EAGAIN /* the lowest code */
} tidemark_error_t;

/* Protocol versions this library speaks, newest first. */
#define TIDEMARK_PROTOCOL_2026_07_28 "2026-07-28"
#define TIDEMARK_PROTOCOL_2025_11_25 "2025-11-25"
#define TIDEMARK_PROTOCOL_2025_06_18 "2025-06-18"
#define TIDEMARK_PROTOCOL_2025_03_26 "2025-03-26"
#define TIDEMARK_PROTOCOL_LATEST TIDEMARK_PROTOCOL_2025_11_25

/* A static, human-readable description of an error code ("unknown error"
 * for a value that is none). */
TIDEMARK_API const char *tidemark_strerror(int err);
/* The code's name as text ("TIDEMARK_EINVAL"; "TIDEMARK_OK" for 0), static;
 * NULL for a value that is no code. */
TIDEMARK_API const char *tidemark_err_name(int err);
/* Free memory the library handed out as a string (an OUT char **); NULL is
 * fine. (As curl_free: the library's allocator may not be the
 * application's.) */
TIDEMARK_API void tidemark_free(void *p);
/* A copy of s made with the library's allocator, for a string the
 * application hands the library to free (on_authorize's *callback_url);
 * NULL when s is NULL or memory ran out. The caller frees it with
 * tidemark_free() if it ends up not handing it over. */
TIDEMARK_API char *tidemark_strdup(const char *s);
/* The library's version as text ("0.2.0"); OUT number (may be NULL): as
 * TIDEMARK_VERSION_NUMBER. */
TIDEMARK_API const char *tidemark_version(int *number);

/* The library's diagnostics go to stderr, one line each; level and format
 * are the process's (every server and client in it). Level: "error",
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
