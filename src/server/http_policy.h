/*
 * http_policy.h - the header rules of the Streamable HTTP endpoint as pure
 * functions of header text (no connection, no server state), so they can
 * be tested and fuzzed alone. Every function takes NUL-terminated header
 * values as libmicrohttpd hands them over, any of which may be NULL.
 */
#ifndef TM_HTTP_POLICY_H
#define TM_HTTP_POLICY_H

/* 1 if the Accept header admits the media type type ("a/b"), wildcards
 * (any type, or "a/" followed by a star) and parameters included; 0 otherwise
 * (NULL accept: 0). */
int tm_policy_accepts(const char *accept, const char *type);
/* 1 if the Content-Type header names exactly type (parameters allowed). */
int tm_policy_media_type_is(const char *header, const char *type);
/* 1 if the Host header is allowed: by the NULL-terminated list allowed
 * (names with or without port, "*" for any), or, with allowed NULL, when it
 * names a loopback host (localhost, 127.0.0.1, [::1]). */
int tm_policy_host_allowed(const char *const *allowed, const char *host);
/* 1 if the Origin header is allowed: by the list (exact, "*" for any) or,
 * with allowed NULL, an http(s) origin on a loopback host. */
int tm_policy_origin_allowed(const char *const *allowed, const char *origin);

#endif
