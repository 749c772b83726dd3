/*
 * auth_int.h - the modules behind auth.h, one job each:
 *   fetch.c       one bounded HTTP(S) exchange with the issuer (libcurl)
 *   jwks.c        the issuer's keys: fetch, cache, refresh on an unknown kid
 *                 (rate-limited, one fetch at a time), parse with bounds
 *   jwt.c         a JWT access token: parse and verify its JWS (rhonabwy)
 *   claims.c      iss, aud, exp, nbf, sub, scope of a token's claims -> principal
 *   introspect.c  RFC 7662 client with a short positive cache
 *   scope.c       tool/method -> the scopes needed; the scope hierarchy
 *   prm.c         the metadata document and the WWW-Authenticate values
 *   auth.c        tm_auth_new/check/free: the above put together
 */
#ifndef TM_AUTH_INT_H
#define TM_AUTH_INT_H
#include "auth.h"
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* ---- bounds ---------------------------------------------------------- */
#define TM_AUTH_JWKS_MAX_BYTES (64 * 1024)
#define TM_AUTH_JWKS_MAX_KEYS 32
#define TM_AUTH_INTROSPECT_MAX_BYTES (16 * 1024)
#define TM_AUTH_CACHE_MAX 4096
#define TM_AUTH_HEADER_MAX (16 * 1024)
#define TM_AUTH_WORDS_MAX 64 /* scopes in one list */

/* ---- fetch.c ---------------------------------------------------------- */
typedef struct tm_fetch_req {
    const char *url;
    const char *ca_file;    /* NULL: the system's CAs */
    unsigned timeout_ms;
    size_t max_bytes;       /* a longer answer is TIDEMARK_ERANGE */
    const char *form;       /* NULL: GET; else POSTed as x-www-form-urlencoded */
    const char *user, *pass; /* HTTP Basic (form-urlencoded first, RFC 6749 2.3.1) */
} tm_fetch_req;
/* 0 with *body (malloc'd, NUL-terminated), *len and *status when an HTTP
 * answer came; TIDEMARK_EIO when none did (refused, timed out, TLS),
 * TIDEMARK_ERANGE when it was too long. */
int tm_fetch(const tm_fetch_req *req, char **body, size_t *len, long *status);
/* Once per process (libcurl and rhonabwy global state). */
int tm_auth_global_init(void);

/* ---- jwks.c ------------------------------------------------------------ */
typedef struct tm_jwks tm_jwks;
typedef struct tm_jwks_config {
    const char *uri;
    const char *ca_file;
    unsigned timeout_ms;
    unsigned min_refresh_ms;
    unsigned max_age_ms;
} tm_jwks_config;
int tm_jwks_new(const tm_jwks_config *cfg, tm_jwks **out);
void tm_jwks_free(tm_jwks *j);
/* The public key for kid (NULL: the only key the set has for alg's key
 * type) as a copy the caller frees with r_jwk_free (void * to keep
 * rhonabwy.h out of this header). 0; TIDEMARK_ENOTFOUND: the set, fetched
 * fine, has no such key; TIDEMARK_EIO: not known and the issuer could not
 * be asked. */
int tm_jwks_get(tm_jwks *j, const char *kid, int alg, void **jwk);
/* Install a key set as if just fetched (tests and fuzzing: no network). */
int tm_jwks_install(tm_jwks *j, const char *json, size_t len);
/* Parse a JWKS document: public RSA, EC and OKP (Ed25519) signing keys are
 * kept, every other key skipped; at most TM_AUTH_JWKS_MAX_KEYS keys, at most
 * TM_AUTH_JWKS_MAX_BYTES bytes. OUT *jwks (a jwks_t *, r_jwks_free), *nkeys.
 * TIDEMARK_EINVAL: not a JWKS; TIDEMARK_ERANGE: over a bound. */
int tm_jwks_parse(const char *json, size_t len, void **jwks, size_t *nkeys);

/* ---- jwt.c --------------------------------------------------------------- */
/* The accepted algorithms as a bit set of rhonabwy's jwa_alg values. */
int tm_jwt_algs(const char *list, uint64_t *mask);
/* Parse token and verify its signature with a key from j (require_at_jwt:
 * the typ header must be at+jwt, checked after the signature). OUT *claims
 * (a new reference) when *reason is TM_AUTH_OK. Returns 0 or ENOMEM. */
int tm_jwt_verify(tm_jwks *j, uint64_t algs, int require_at_jwt, const char *token, size_t len,
                  tm_auth_reason *reason, json_t **claims);
/* The parse step alone (for fuzzing): header alg and kid of token, no key.
 * 0, or TIDEMARK_EINVAL for no JWS. OUT *alg, kid (copied, NUL-terminated,
 * "" when absent; TIDEMARK_ERANGE if longer than n - 1). */
int tm_jwt_peek(const char *token, size_t len, int *alg, char *kid, size_t n);

/* The JWKS of a in JWT mode, else NULL (tests and fuzzing). */
tm_jwks *tm_auth_jwks_of(tm_auth *a);

/* ---- claims.c ---------------------------------------------------------- */
typedef struct tm_claims_rules {
    const char *issuer;
    const char *resource;
    int64_t now_s;
    int64_t leeway_s;
    int need_exp;        /* JWT: exp required; introspection: optional */
    int need_iss;        /* JWT: iss required; introspection: checked if present */
} tm_claims_rules;
/* Check claims; fill p when *reason is TM_AUTH_OK. Returns 0 or EINVAL. */
int tm_claims_check(const json_t *claims, const tm_claims_rules *r, tm_auth_reason *reason,
                    tm_auth_principal *p);
/* p->id from p->iss, p->sub. */
int tm_claims_principal_id(tm_auth_principal *p);

/* ---- introspect.c -------------------------------------------------------- */
typedef struct tm_introspect tm_introspect;
typedef struct tm_introspect_config {
    const char *uri, *client_id, *client_secret, *ca_file;
    unsigned timeout_ms;
    unsigned cache_ms;
} tm_introspect_config;
int tm_introspect_new(const tm_introspect_config *cfg, tm_introspect **out);
void tm_introspect_free(tm_introspect *it);
/* Ask (or remember) whether token is active. 0 with *claims (a new
 * reference to the answer) when active; TIDEMARK_ENOTFOUND inactive;
 * TIDEMARK_EIO when the issuer could not say. now_ms: wall-clock Unix ms (the
 * cache's times are capped by the token's exp). */
int tm_introspect_check(tm_introspect *it, const char *token, size_t len, int64_t now_ms,
                        json_t **claims);

/* ---- scope.c ------------------------------------------------------------ */
typedef struct tm_scopes tm_scopes;
/* 1 if s is a space-separated list of RFC 6749 scope tokens (or empty). */
int tm_scope_list_ok(const char *s);
int tm_scopes_new(const char *base, const char *const *rules, const char *const *implies,
                  tm_scopes **out);
void tm_scopes_free(tm_scopes *s);
/* The scopes needed for method/tool, space-separated, into out[n].
 * TIDEMARK_ERANGE if they do not fit. */
int tm_scopes_required(const tm_scopes *s, const char *method, const char *tool, char *out,
                       size_t n);
/* *ok = 1 if granted (with what it implies) covers every scope of required. */
int tm_scopes_cover(const tm_scopes *s, const char *required, const char *granted, int *ok);

/* ---- prm.c ---------------------------------------------------------------- */
/* The metadata URL for resource (scheme://authority/.well-known/
 * oauth-protected-resource + its path), malloc'd. TIDEMARK_EINVAL: not an
 * http(s) URL without query or fragment. */
int tm_prm_url(const char *resource, char **url);
/* The path part of the metadata URLs to serve: "/.well-known/oauth-protected-resource"
 * and the path-suffixed one (malloc'd; equal when resource has no path). */
int tm_prm_paths(const char *resource, char **root, char **suffixed);
/* The document (malloc'd JSON text). */
int tm_prm_document(const char *resource, const char *issuer, const char *scopes_supported,
                    const char *resource_name, char **json);
/* A WWW-Authenticate value for status (401 or 403) into out[n]:
 *   Bearer [error="invalid_token"|"insufficient_scope", ]resource_metadata="URL"[, scope="..."]
 * error is NULL for a request with no token at all (RFC 6750 3.1). */
int tm_prm_challenge(const char *error, const char *metadata_url, const char *scope, char *out,
                     size_t n);

#endif
