/*
 * oauth.h - what the authorization files of the client share (not
 * installed): oauth.c the flow (discovery, registration, grants),
 * oauth_http.c synchronous HTTP on the client's I/O thread and the small
 * text helpers (URLs, forms, challenges, PKCE), oauth_loopback.c the
 * loopback redirect and tidemark_authorize_follow.
 */
#ifndef TM_CLIENT_OAUTH_H
#define TM_CLIENT_OAUTH_H
#include "client_int.h"

/* One HTTP answer, read whole. */
typedef struct oa_resp {
    int rc;          /* transport result: 0 or a negative code */
    long status;
    char *body;      /* NUL-terminated (may hold NULs before); NULL when empty */
    size_t len;
    char *location;  /* Location header, or NULL */
    char *www;       /* WWW-Authenticate header, or NULL */
    char error[160];
} oa_resp;

/* A request on hc (headers NULL-terminated "Name: value", may be NULL;
 * body may be NULL), waited for at most timeout_ms. 0 with *out filled
 * (oa_resp_free) whatever the status; a negative code when it could not
 * be sent or got no answer (out->error says why). */
TM_MUST_CHECK int oa_http(tm_hc *hc, const char *method, const char *url,
                          const char *const *headers, const char *body, int timeout_ms,
                          oa_resp *out);
void oa_resp_free(oa_resp *r);
/* The answer's body as a JSON object (new reference) or NULL. */
json_t *oa_json(const oa_resp *r);

/* A challenge's parameters (scheme Bearer or DPoP): NULL when absent. */
typedef struct oa_challenge {
    char *scope, *resource_metadata, *error;
} oa_challenge;
void oa_challenge_parse(const char *header, oa_challenge *ch);
void oa_challenge_free(oa_challenge *ch);

/* Percent-encoding of s for a query or a form (malloc'd). */
char *oa_urlencode(const char *s);
/* The value of name in the query of url (or a form body when url holds no
 * '?'), decoded (malloc'd), or NULL. *present (may be NULL): whether name
 * appears at all. */
char *oa_query_get(const char *url, const char *name, int *present);
/* base64url without padding of n bytes (malloc'd). */
char *oa_b64url(const unsigned char *p, size_t n);
/* base64 with padding (malloc'd). */
char *oa_b64(const unsigned char *p, size_t n);
/* Random base64url text of n random bytes (malloc'd) or NULL. */
char *oa_random(size_t n);
/* The S256 challenge of verifier (malloc'd) or NULL. */
char *oa_s256(const char *verifier);
/* scheme://host[:port] of url (malloc'd), and its path ("" for none). */
char *oa_origin(const char *url);
const char *oa_path(const char *url);

#endif
