/*
 * jwt.c - a JWT access token's signature, through rhonabwy (JWS over
 * GnuTLS; nothing of it is written here).
 *
 * The token is parsed with no header key sources (no jwk, jku, x5c, x5u: a
 * token never brings its own key) and with unsigned tokens allowed only so
 * that alg "none" can be told apart from garbage; then its alg must be one
 * of the configured asymmetric ones (never none, never HS*: an HMAC "signed"
 * with the issuer's public key is refused here, before any key is looked
 * at), the key comes from the issuer's JWKS by kid, its type must fit the alg
 * (and its own "alg", if it has one, must be the token's), and only then is
 * the signature checked.
 */
#include "auth_int.h"
#include "tidemark/tidemark.h"
#include <rhonabwy.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    jwa_alg alg;
} algs[] = {
    {"RS256", R_JWA_ALG_RS256}, {"RS384", R_JWA_ALG_RS384}, {"RS512", R_JWA_ALG_RS512},
    {"PS256", R_JWA_ALG_PS256}, {"PS384", R_JWA_ALG_PS384}, {"PS512", R_JWA_ALG_PS512},
    {"ES256", R_JWA_ALG_ES256}, {"ES384", R_JWA_ALG_ES384}, {"ES512", R_JWA_ALG_ES512},
    {"EdDSA", R_JWA_ALG_EDDSA},
};
#define NALGS (sizeof algs / sizeof algs[0])

int tm_jwt_algs(const char *list, uint64_t *mask)
{
    if (!mask)
        return TIDEMARK_EINVAL;
    *mask = 0;
    if (!list) {
        for (size_t i = 0; i < NALGS; i++)
            *mask |= 1ull << algs[i].alg;
        return 0;
    }
    const char *p = list;
    while (*p) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (!n)
            break;
        size_t i = 0;
        while (i < NALGS && !(strlen(algs[i].name) == n && memcmp(algs[i].name, p, n) == 0))
            i++;
        if (i == NALGS)
            return TIDEMARK_EINVAL; /* none, HS*, or unknown */
        *mask |= 1ull << algs[i].alg;
        p += n;
    }
    return *mask ? 0 : TIDEMARK_EINVAL;
}

/* A compact JWS is three base64url parts: anything else is garbage before
 * the library sees it. */
static int compact_shape(const char *t, size_t len)
{
    size_t dots = 0;
    for (size_t i = 0; i < len; i++) {
        char c = t[i];
        if (c == '.')
            dots++;
        else if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_'))
            return 0;
    }
    return dots == 2;
}

static int parse(jwt_t *jwt, const char *token, size_t len)
{
    if (!compact_shape(token, len))
        return TIDEMARK_EINVAL;
    if (r_jwt_advanced_parsen(jwt, token, len, R_PARSE_UNSIGNED, R_FLAG_IGNORE_REMOTE) != RHN_OK)
        return TIDEMARK_EINVAL;
    return r_jwt_get_type(jwt) == R_JWT_TYPE_SIGN ? 0 : TIDEMARK_EINVAL;
}

int tm_jwt_peek(const char *token, size_t len, int *alg, char *kid, size_t n)
{
    if (!token || !alg || !kid || !n)
        return TIDEMARK_EINVAL;
    jwt_t *jwt = NULL;
    if (r_jwt_init(&jwt) != RHN_OK)
        return TIDEMARK_ENOMEM;
    int rc = parse(jwt, token, len);
    if (!rc) {
        *alg = (int)r_jwt_get_sign_alg(jwt);
        const char *k = r_jwt_get_header_str_value(jwt, "kid");
        size_t kl = k ? strlen(k) : 0;
        if (kl >= n)
            rc = TIDEMARK_ERANGE;
        else {
            memcpy(kid, k ? k : "", kl);
            kid[kl] = '\0';
        }
    }
    r_jwt_free(jwt);
    return rc;
}

static int key_fits(jwk_t *k, jwa_alg alg)
{
    unsigned bits = 0;
    int t = r_jwk_key_type(k, &bits, R_FLAG_IGNORE_REMOTE);
    int want = alg == R_JWA_ALG_EDDSA ? R_KEY_TYPE_EDDSA
               : (alg >= R_JWA_ALG_ES256 && alg <= R_JWA_ALG_ES512) ? R_KEY_TYPE_EC
                                                                     : R_KEY_TYPE_RSA;
    if (!(t & want) || !(t & R_KEY_TYPE_PUBLIC))
        return 0;
    const char *ka = r_jwk_get_property_str(k, "alg");
    return !ka || r_str_to_jwa_alg(ka) == alg;
}

/* With a parsed token: the reason, and the key checked against it. */
static tm_auth_reason verify_parsed(tm_jwks *j, uint64_t mask, jwt_t *jwt)
{
    jwa_alg alg = r_jwt_get_sign_alg(jwt);
    if (alg == R_JWA_ALG_NONE)
        return TM_AUTH_ALG_NONE;
    if ((unsigned)alg >= 64 || !(mask & (1ull << alg)))
        return TM_AUTH_ALG_NOT_ALLOWED;
    const char *kid = r_jwt_get_header_str_value(jwt, "kid");
    if (kid && !*kid)
        kid = NULL; /* "" names no key: rhonabwy finds none by it */
    void *key = NULL;
    int rc = tm_jwks_get(j, kid, (int)alg, &key);
    if (rc == TIDEMARK_EIO)
        return TM_AUTH_ISSUER_UNAVAILABLE;
    if (rc)
        return TM_AUTH_UNKNOWN_KID;
    tm_auth_reason r = TM_AUTH_OK;
    if (!key_fits(key, alg) || r_jwt_verify_signature(jwt, key, R_FLAG_IGNORE_REMOTE) != RHN_OK)
        r = TM_AUTH_BAD_SIGNATURE;
    r_jwk_free(key);
    return r;
}

/* RFC 9068 2.1: "at+jwt", media type rules (case-insensitive, the
 * "application/" prefix optional). */
static int typ_ok(jwt_t *jwt)
{
    const char *t = r_jwt_get_header_str_value(jwt, "typ");
    if (t && strncasecmp(t, "application/", 12) == 0)
        t += 12;
    return t && strcasecmp(t, "at+jwt") == 0;
}

int tm_jwt_verify(tm_jwks *j, uint64_t mask, int require_at_jwt, const char *token, size_t len,
                  tm_auth_reason *reason, json_t **claims)
{
    if (!j || !token || !reason || !claims)
        return TIDEMARK_EINVAL;
    *claims = NULL;
    jwt_t *jwt = NULL;
    if (r_jwt_init(&jwt) != RHN_OK)
        return TIDEMARK_ENOMEM;
    int rc = 0;
    if (parse(jwt, token, len) != 0)
        *reason = TM_AUTH_GARBAGE;
    else if ((*reason = verify_parsed(j, mask, jwt)) == TM_AUTH_OK && require_at_jwt &&
             !typ_ok(jwt))
        *reason = TM_AUTH_WRONG_TYPE;
    else if (*reason == TM_AUTH_OK) {
        *claims = r_jwt_get_full_claims_json_t(jwt);
        if (!*claims)
            *reason = TM_AUTH_BAD_CLAIMS;
    }
    r_jwt_free(jwt);
    return rc;
}
