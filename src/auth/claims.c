/*
 * claims.c - what a verified token (or an active introspection answer)
 * says, checked against this resource server: iss is the issuer, aud names
 * this resource (RFC 8707: exactly, as a string or in an array), exp and nbf
 * with a small leeway, a subject; then the principal.
 *
 * Check order (so each token gets one reason): iss, aud, exp, nbf, sub.
 */
#include "auth_int.h"
#include "tidemark/tidemark.h"
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <string.h>

/* A JSON string without NUL, shorter than max. */
static const char *str_of(const json_t *v, size_t max)
{
    if (!json_is_string(v))
        return NULL;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    return strlen(s) == n && n < max ? s : NULL;
}

static int aud_names(const json_t *aud, const char *resource)
{
    if (json_is_string(aud))
        return strcmp(json_string_value(aud), resource) == 0;
    if (!json_is_array(aud))
        return 0;
    size_t i;
    const json_t *v;
    json_array_foreach(aud, i, v) {
        if (json_is_string(v) && strcmp(json_string_value(v), resource) == 0)
            return 1;
    }
    return 0;
}

/* NumericDate: a JSON number (integer or real) within sane bounds. */
static int date_of(const json_t *v, int64_t *out)
{
    if (!json_is_number(v))
        return 0;
    double d = json_number_value(v);
    if (!(d >= 0 && d < 1e11))
        return 0;
    *out = (int64_t)d;
    return 1;
}

/* scope (RFC 8693/9068: space-separated string) or scp (an array). */
static int scope_of(const json_t *claims, char *out, size_t n)
{
    const json_t *s = json_object_get(claims, "scope");
    const json_t *scp = json_object_get(claims, "scp");
    out[0] = '\0';
    if (s) {
        const char *v = str_of(s, n);
        if (!v || !tm_scope_list_ok(v))
            return 0;
        memcpy(out, v, strlen(v) + 1);
        return 1;
    }
    if (!scp)
        return 1;
    if (!json_is_array(scp))
        return 0;
    size_t i, used = 0;
    const json_t *v;
    json_array_foreach(scp, i, v) {
        const char *w = str_of(v, n);
        size_t wl = w ? strlen(w) : 0;
        if (!w || !wl || strchr(w, ' ') || !tm_scope_list_ok(w) || used + wl + 2 > n)
            return 0;
        used += (size_t)snprintf(out + used, n - used, "%s%s", used ? " " : "", w);
    }
    return 1;
}

int tm_claims_principal_id(tm_auth_principal *p)
{
    size_t il = strlen(p->iss), sl = strlen(p->sub);
    unsigned char in[TM_AUTH_ISS_MAX + TM_AUTH_SUB_MAX + 1], d[32];
    memcpy(in, p->iss, il);
    in[il] = 0;
    memcpy(in + il + 1, p->sub, sl);
    if (gnutls_hash_fast(GNUTLS_DIG_SHA256, in, il + 1 + sl, d) != 0)
        return TIDEMARK_EIO;
    for (size_t i = 0; i < 32; i++)
        snprintf(p->id + 2 * i, 3, "%02x", d[i]);
    return 0;
}

static tm_auth_reason times_ok(const json_t *c, const tm_claims_rules *r, int64_t *exp)
{
    const json_t *e = json_object_get(c, "exp"), *nb = json_object_get(c, "nbf");
    int64_t nbf = 0;
    *exp = 0;
    if (e && !date_of(e, exp))
        return TM_AUTH_BAD_CLAIMS;
    if (!e && r->need_exp)
        return TM_AUTH_BAD_CLAIMS;
    if (nb && !date_of(nb, &nbf))
        return TM_AUTH_BAD_CLAIMS;
    if (e && r->now_s >= *exp + r->leeway_s)
        return TM_AUTH_EXPIRED;
    if (nb && r->now_s + r->leeway_s < nbf)
        return TM_AUTH_NOT_YET_VALID;
    return TM_AUTH_OK;
}

int tm_claims_check(const json_t *c, const tm_claims_rules *r, tm_auth_reason *reason,
                    tm_auth_principal *p)
{
    if (!c || !r || !reason || !p)
        return TIDEMARK_EINVAL;
    memset(p, 0, sizeof *p);
    *reason = TM_AUTH_BAD_CLAIMS;
    if (!json_is_object(c))
        return 0;
    const json_t *iss = json_object_get(c, "iss");
    if (iss || r->need_iss) {
        const char *v = str_of(iss, TM_AUTH_ISS_MAX);
        if (!v || strcmp(v, r->issuer) != 0) {
            *reason = TM_AUTH_WRONG_ISSUER;
            return 0;
        }
    }
    if (!aud_names(json_object_get(c, "aud"), r->resource)) {
        *reason = TM_AUTH_WRONG_AUDIENCE;
        return 0;
    }
    if ((*reason = times_ok(c, r, &p->exp)) != TM_AUTH_OK)
        return 0;
    *reason = TM_AUTH_BAD_CLAIMS;
    const json_t *sub = json_object_get(c, "sub");
    const char *s = str_of(sub ? sub : json_object_get(c, "client_id"), TM_AUTH_SUB_MAX);
    if (!s || !*s || !scope_of(c, p->scope, sizeof p->scope))
        return 0;
    snprintf(p->iss, sizeof p->iss, "%s", r->issuer);
    snprintf(p->sub, sizeof p->sub, "%s", s);
    int rc = tm_claims_principal_id(p);
    if (!rc)
        *reason = TM_AUTH_OK;
    return rc;
}
