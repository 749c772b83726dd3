/*
 * auth.c - tm_auth_new/check/free (auth.h): the header, then the token
 * (JWT against the JWKS, or introspection), then its claims, then the
 * scopes of the operation; the answer's status and challenge.
 */
#include "auth_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct tm_auth {
    char *resource, *issuer, *metadata_url, *doc, *path_root, *path_suffixed;
    int64_t leeway_s;
    size_t max_token;
    uint64_t algs;
    int require_at_jwt;
    tm_jwks *jwks;
    tm_introspect *introspect;
    tm_scopes *scopes;
    atomic_uint_fast64_t counts[TM_AUTH_REASON_COUNT];
};

static const char *const reason_names[TM_AUTH_REASON_COUNT] = {
    "ok", "missing", "malformed", "garbage", "alg_none", "alg_not_allowed", "unknown_kid",
    "bad_signature", "wrong_issuer", "wrong_audience", "expired", "not_yet_valid", "bad_claims",
    "inactive", "insufficient_scope", "issuer_unavailable", "wrong_type",
};

const char *tm_auth_reason_name(tm_auth_reason r)
{
    return (unsigned)r < TM_AUTH_REASON_COUNT ? reason_names[r] : "?";
}

uint64_t tm_auth_count(const tm_auth *a, tm_auth_reason r)
{
    return a && (unsigned)r < TM_AUTH_REASON_COUNT ? atomic_load(&a->counts[r]) : 0;
}

tm_jwks *tm_auth_jwks_of(tm_auth *a) { return a ? a->jwks : NULL; }

void tm_auth_free(tm_auth *a)
{
    if (!a)
        return;
    tm_jwks_free(a->jwks);
    tm_introspect_free(a->introspect);
    tm_scopes_free(a->scopes);
    free(a->resource);
    free(a->issuer);
    free(a->metadata_url);
    free(a->doc);
    free(a->path_root);
    free(a->path_suffixed);
    free(a);
}

static int bad(const char *what)
{
    TM_ERROR("auth: bad configuration: %s", what);
    return TIDEMARK_EINVAL;
}

static int check_config(const tm_auth_config *c)
{
    char *url = NULL;
    int rc = c->resource ? tm_prm_url(c->resource, &url) : TIDEMARK_EINVAL;
    free(url);
    if (rc == TIDEMARK_ENOMEM)
        return rc;
    if (rc)
        return bad("resource must be an http(s) URL without query or fragment");
    if (!c->issuer || !*c->issuer || strlen(c->issuer) >= TM_AUTH_ISS_MAX)
        return bad("an issuer is needed");
    if (!c->jwks_uri == !c->introspection_uri)
        return bad("exactly one of a JWKS URI and an introspection URI is needed");
    if (c->introspection_uri && !c->client_id)
        return bad("introspection needs the resource server's client id");
    const char *lists[] = {c->scopes_supported, c->scope_base};
    for (size_t i = 0; i < 2; i++)
        if (lists[i] && !tm_scope_list_ok(lists[i]))
            return bad("a scope list holds a character RFC 6749 does not allow");
    return 0;
}

static int build_validator(tm_auth *a, const tm_auth_config *c)
{
    unsigned to = c->http_timeout_ms ? c->http_timeout_ms : 3000;
    if (c->jwks_uri) {
        tm_jwks_config jc = {.uri = c->jwks_uri, .ca_file = c->ca_file, .timeout_ms = to,
                             .min_refresh_ms = c->jwks_min_refresh_ms ? c->jwks_min_refresh_ms : 10000,
                             .max_age_ms = c->jwks_max_age_ms ? c->jwks_max_age_ms : 3600000};
        return tm_jwks_new(&jc, &a->jwks);
    }
    tm_introspect_config ic = {.uri = c->introspection_uri, .client_id = c->client_id,
                               .client_secret = c->client_secret, .ca_file = c->ca_file,
                               .timeout_ms = to,
                               .cache_ms = c->introspect_cache_ms ? c->introspect_cache_ms : 30000};
    return tm_introspect_new(&ic, &a->introspect);
}

int tm_auth_new(const tm_auth_config *c, tm_auth **out)
{
    if (!c || !out)
        return TIDEMARK_EINVAL;
    int rc = check_config(c);
    if (rc || (rc = tm_auth_global_init()) != 0)
        return rc;
    tm_auth *a = calloc(1, sizeof *a);
    if (!a)
        return TIDEMARK_ENOMEM;
    a->leeway_s = c->leeway_s == UINT32_MAX ? 0 : c->leeway_s ? c->leeway_s : 30;
    a->max_token = c->max_token ? c->max_token : 8192;
    a->require_at_jwt = c->require_at_jwt != 0;
    a->resource = strdup(c->resource);
    a->issuer = strdup(c->issuer);
    rc = a->resource && a->issuer ? 0 : TIDEMARK_ENOMEM;
    if (!rc && tm_jwt_algs(c->algorithms, &a->algs) != 0)
        rc = bad("algorithms: only RS*, PS*, ES* and EdDSA can be accepted");
    if (!rc)
        rc = c->resource_metadata_url ? ((a->metadata_url = strdup(c->resource_metadata_url))
                                             ? 0 : TIDEMARK_ENOMEM)
                                      : tm_prm_url(c->resource, &a->metadata_url);
    if (!rc)
        rc = tm_prm_paths(c->resource, &a->path_root, &a->path_suffixed);
    if (!rc)
        rc = tm_prm_document(c->resource, c->issuer, c->scopes_supported, c->resource_name, &a->doc);
    if (!rc && (rc = tm_scopes_new(c->scope_base, c->scope_rules, c->scope_implies, &a->scopes)))
        rc = rc == TIDEMARK_EINVAL ? bad("a scope rule is not KEY=SCOPES") : rc;
    if (!rc)
        rc = build_validator(a, c);
    if (rc) {
        tm_auth_free(a);
        return rc;
    }
    *out = a;
    return 0;
}

int tm_auth_metadata(const tm_auth *a, const char *path, const char **json)
{
    if (!a || !path || !json)
        return TIDEMARK_EINVAL;
    if (strcmp(path, a->path_root) != 0 && strcmp(path, a->path_suffixed) != 0)
        return TIDEMARK_ENOTFOUND;
    *json = a->doc;
    return 0;
}

/* "Bearer" 1*SP token68 (RFC 6750 2.1). OUT *tok, *len into h. */
static int bearer_token(const char *h, size_t max, const char **tok, size_t *len)
{
    if (strncasecmp(h, "Bearer ", 7) != 0)
        return TIDEMARK_EINVAL;
    const char *t = h + 7;
    while (*t == ' ')
        t++;
    size_t n = 0;
    while (t[n] && n <= max) {
        char c = t[n];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              strchr("-._~+/", c)))
            break;
        n++;
    }
    size_t eq = 0;
    while (t[n + eq] == '=')
        eq++;
    const char *rest = t + n + eq;
    while (*rest == ' ')
        rest++;
    if (!n || n + eq > max || *rest)
        return TIDEMARK_EINVAL;
    *tok = t;
    *len = n + eq;
    return 0;
}

/* The token -> claims. OUT *claims when *reason is TM_AUTH_OK. */
static int validate(tm_auth *a, const char *tok, size_t len, tm_auth_reason *reason,
                    json_t **claims)
{
    if (a->jwks)
        return tm_jwt_verify(a->jwks, a->algs, a->require_at_jwt, tok, len, reason, claims);
    int rc = tm_introspect_check(a->introspect, tok, len, tm_wall_ms(), claims);
    *reason = rc == 0 ? TM_AUTH_OK : rc == TIDEMARK_ENOTFOUND ? TM_AUTH_INACTIVE
                                   : TM_AUTH_ISSUER_UNAVAILABLE;
    return rc == TIDEMARK_ENOMEM ? rc : 0;
}

static int decide(tm_auth *a, const char *authorization, const char *required, tm_auth_result *out)
{
    const char *tok = NULL;
    size_t len = 0;
    if (!authorization || !*authorization) {
        out->reason = TM_AUTH_MISSING;
        return 0;
    }
    if (strlen(authorization) > TM_AUTH_HEADER_MAX ||
        bearer_token(authorization, a->max_token, &tok, &len) != 0) {
        out->reason = TM_AUTH_MALFORMED;
        return 0;
    }
    json_t *claims = NULL;
    int rc = validate(a, tok, len, &out->reason, &claims);
    if (rc || out->reason != TM_AUTH_OK)
        return rc;
    tm_claims_rules r = {.issuer = a->issuer, .resource = a->resource, .now_s = tm_wall_ms() / 1000,
                         .leeway_s = a->leeway_s, .need_exp = a->jwks != NULL,
                         .need_iss = a->jwks != NULL};
    rc = tm_claims_check(claims, &r, &out->reason, &out->principal);
    json_decref(claims);
    if (rc || out->reason != TM_AUTH_OK)
        return rc;
    int ok = 0;
    if (tm_scopes_cover(a->scopes, required, out->principal.scope, &ok) != 0 || !ok)
        out->reason = TM_AUTH_INSUFFICIENT_SCOPE;
    return 0;
}

int tm_auth_check(tm_auth *a, const char *authorization, const char *method, const char *tool,
                  tm_auth_result *out)
{
    if (!a || !out)
        return TIDEMARK_EINVAL;
    memset(out, 0, sizeof *out);
    char required[TM_AUTH_SCOPE_MAX];
    /* Cannot happen with the bounds tm_scopes_new keeps; closed if it did. */
    int unsure = tm_scopes_required(a->scopes, method, tool, required, sizeof required) != 0;
    if (unsure)
        required[0] = '\0';
    int rc = decide(a, authorization, required, out);
    if (rc)
        return rc;
    if (unsure && out->reason == TM_AUTH_OK)
        out->reason = TM_AUTH_INSUFFICIENT_SCOPE;
    atomic_fetch_add(&a->counts[out->reason], 1);
    if (out->reason != TM_AUTH_OK && out->reason != TM_AUTH_INSUFFICIENT_SCOPE)
        memset(&out->principal, 0, sizeof out->principal);
    const char *err = NULL;
    switch (out->reason) {
    case TM_AUTH_OK:
        out->status = 200;
        return 0;
    case TM_AUTH_ISSUER_UNAVAILABLE:
        out->status = 503;
        return 0;
    case TM_AUTH_MISSING:
        out->status = 401;
        break;
    case TM_AUTH_INSUFFICIENT_SCOPE:
        out->status = 403;
        err = "insufficient_scope";
        break;
    default:
        out->status = 401;
        err = "invalid_token";
    }
    return tm_prm_challenge(err, a->metadata_url, required, out->www_authenticate,
                            sizeof out->www_authenticate);
}
