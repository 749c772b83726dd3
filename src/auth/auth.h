/*
 * auth.h - the server as an OAuth 2.1 resource server: the one API the
 * request path calls.
 *
 *   tm_auth_new(cfg)      once, at start (validates the configuration; no
 *                         network yet: the JWKS is fetched on first use)
 *   tm_auth_metadata()    for a GET whose path is a Protected Resource
 *                         Metadata URL (RFC 9728): the JSON document to serve
 *   tm_auth_check()       for every MCP request, once its JSON-RPC method (and,
 *                         for tools/call, the tool's name) is known: the
 *                         decision, the principal, the WWW-Authenticate value
 *   tm_auth_free()        at stop, after the last check returned
 *
 * Every function may be called from any number of threads at once. A check
 * may block while the issuer is asked (a JWKS fetch on an unknown kid, at most
 * one at a time and rate-limited; an introspection on a cache miss), for at
 * most cfg.http_timeout_ms. No token, nor any part of one, is logged or kept
 * (the introspection cache is keyed by the token's SHA-256).
 */
#ifndef TM_AUTH_H
#define TM_AUTH_H
#include <stddef.h>
#include <stdint.h>

typedef struct tm_auth tm_auth;

/* Why a request was refused (or not): stable names for metrics and logs,
 * never sent to the client (every invalid token gets the same 401). */
typedef enum tm_auth_reason {
    TM_AUTH_OK = 0,
    TM_AUTH_MISSING,            /* no Authorization header           -> 401 */
    TM_AUTH_MALFORMED,          /* not "Bearer <token68>", too long  -> 401 */
    TM_AUTH_GARBAGE,            /* not a JWS compact serialization   -> 401 */
    TM_AUTH_ALG_NONE,           /* alg "none"                        -> 401 */
    TM_AUTH_ALG_NOT_ALLOWED,    /* HS256 and any alg not configured  -> 401 */
    TM_AUTH_UNKNOWN_KID,        /* no such key, JWKS freshly fetched -> 401 */
    TM_AUTH_BAD_SIGNATURE,      /* wrong key, key/alg mismatch       -> 401 */
    TM_AUTH_WRONG_ISSUER,       /* iss is not the configured issuer  -> 401 */
    TM_AUTH_WRONG_AUDIENCE,     /* aud does not name this resource   -> 401 */
    TM_AUTH_EXPIRED,            /* exp + leeway is past              -> 401 */
    TM_AUTH_NOT_YET_VALID,      /* nbf - leeway is ahead             -> 401 */
    TM_AUTH_BAD_CLAIMS,         /* no exp, no sub, claims of wrong types -> 401 */
    TM_AUTH_INACTIVE,           /* introspection: "active": false    -> 401 */
    TM_AUTH_INSUFFICIENT_SCOPE, /* valid token lacking a scope       -> 403 */
    TM_AUTH_ISSUER_UNAVAILABLE, /* issuer needed but unreachable     -> 503 */
    TM_AUTH_WRONG_TYPE,         /* require_at_jwt: typ not at+jwt    -> 401 */
    TM_AUTH_REASON_COUNT
} tm_auth_reason;

/* "ok", "missing", "malformed", "garbage", "alg_none", "alg_not_allowed",
 * "unknown_kid", "bad_signature", "wrong_issuer", "wrong_audience",
 * "expired", "not_yet_valid", "bad_claims", "inactive",
 * "insufficient_scope", "issuer_unavailable", "wrong_type"; "?" out of range. */
const char *tm_auth_reason_name(tm_auth_reason r);

typedef struct tm_auth_config {
    /* This server's canonical resource identifier (RFC 8707), exactly as the
     * authorization server puts it in aud: "https://mcp.example.com/mcp". */
    const char *resource;
    const char *issuer;            /* exact iss, and the metadata's authorization server */
    /* Exactly one of: */
    const char *jwks_uri;          /* JWT access tokens checked against this JWKS */
    const char *introspection_uri; /* opaque tokens checked by RFC 7662 */
    const char *client_id;         /* introspection: this server's client (Basic auth) */
    const char *client_secret;
    const char *ca_file;           /* PEM CAs for https issuers (NULL: the system's) */
    /* Scopes (space-separated lists of RFC 6749 scope tokens). */
    const char *scopes_supported;  /* in the metadata document; may be NULL */
    const char *scope_base;        /* needed for any request; may be NULL */
    /* NULL-terminated "KEY=SCOPES" rules: KEY "tool:NAME" (tools/call of NAME),
     * "tool:*" (tools/call of a tool without its own rule), "method:NAME". */
    const char *const *scope_rules;
    /* NULL-terminated "BROAD=NARROW ..." (a token with BROAD also has each
     * NARROW, transitively): the scope hierarchy. */
    const char *const *scope_implies;
    /* Algorithms accepted (space-separated; NULL: "RS256 RS384 RS512 PS256
     * PS384 PS512 ES256 ES384 ES512 EdDSA"). HS* and none are never accepted. */
    const char *algorithms;
    /* The metadata URL put in WWW-Authenticate (NULL: derived from resource:
     * scheme://authority/.well-known/oauth-protected-resource/<path>). */
    const char *resource_metadata_url;
    const char *resource_name;     /* optional, in the metadata document */
    unsigned leeway_s;             /* exp/nbf leeway (0: 30 s; UINT32_MAX: none) */
    unsigned http_timeout_ms;      /* one fetch or introspection (0: 3000) */
    unsigned jwks_min_refresh_ms;  /* between two JWKS fetches (0: 10000) */
    unsigned jwks_max_age_ms;      /* refetch a JWKS older than this (0: 3600000) */
    unsigned introspect_cache_ms;  /* positive answers kept (0: 30000; capped by exp) */
    size_t max_token;              /* longest token accepted (0: 8192 bytes) */
    /* JWT header typ must be "at+jwt" (RFC 9068 2.1, case-insensitive, with
     * or without "application/"). Off by default: many issuers send "JWT". */
    int require_at_jwt;
} tm_auth_config;

/* Who presented the token. id is what the store keys on: 64 lowercase hex
 * digits, the SHA-256 of iss, one NUL byte, then sub (neither may hold NUL),
 * so equal (iss, sub) pairs and only they share an id. */
#define TM_AUTH_ID_LEN 64
#define TM_AUTH_ISS_MAX 512
#define TM_AUTH_SUB_MAX 256
#define TM_AUTH_SCOPE_MAX 1024
typedef struct tm_auth_principal {
    char id[TM_AUTH_ID_LEN + 1];
    char iss[TM_AUTH_ISS_MAX];
    char sub[TM_AUTH_SUB_MAX];     /* sub; a token without one: its client_id */
    char scope[TM_AUTH_SCOPE_MAX]; /* the token's scopes, space-separated */
    int64_t exp;                   /* Unix seconds; 0 when the token has none */
} tm_auth_principal;

#define TM_AUTH_CHALLENGE_MAX 2048
typedef struct tm_auth_result {
    unsigned status;      /* 200 (go on), 401, 403 or 503 (answer it, body up to you) */
    tm_auth_reason reason;
    /* The WWW-Authenticate value to send with a 401 or 403 ("" otherwise). */
    char www_authenticate[TM_AUTH_CHALLENGE_MAX];
    tm_auth_principal principal; /* set when status is 200 or 403 */
} tm_auth_result;

/* Validate cfg (copied) and build. TIDEMARK_EINVAL (logged: which field)
 * for a bad configuration. OUT *a. */
int tm_auth_new(const tm_auth_config *cfg, tm_auth **a);
void tm_auth_free(tm_auth *a);

/* Decide on one request. authorization: the Authorization header or NULL;
 * method: the JSON-RPC method, NULL when there is none (GET, DELETE); tool:
 * the tool's name for tools/call, else NULL. Returns 0 with *out filled
 * whatever the decision; TIDEMARK_EINVAL for NULL a/out, TIDEMARK_ENOMEM. */
int tm_auth_check(tm_auth *a, const char *authorization, const char *method, const char *tool,
                  tm_auth_result *out);

/* The Protected Resource Metadata document if path is one of its URLs
 * ("/.well-known/oauth-protected-resource" and that followed by the resource's
 * path), else TIDEMARK_ENOTFOUND. *json stays valid until tm_auth_free. */
int tm_auth_metadata(const tm_auth *a, const char *path, const char **json);

/* How many checks ended with reason r since tm_auth_new (for metrics). */
uint64_t tm_auth_count(const tm_auth *a, tm_auth_reason r);

#endif
