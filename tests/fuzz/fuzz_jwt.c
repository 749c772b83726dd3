/*
 * fuzz_jwt.c - a bearer token through src/auth/: tm_jwt_peek (the parse
 * step), tm_jwt_verify against a fixed public key set (r1 RS256, e1 ES256,
 * d1 EdDSA; installed, no network), tm_claims_check at a fixed time, and
 * tm_auth_check on "Bearer <input>" with the same keys.
 *
 * Input: the token's bytes (up to a NUL). The corpus holds tokens signed
 * with the private halves of these keys (not kept) and the refusals of the
 * auth_oidc table. Invariants:
 *  - verify's reason agrees with the parse: garbage iff the token does not
 *    parse; alg none -> alg_none; an alg not accepted (HS*) -> alg_not_allowed;
 *    otherwise only unknown_kid, bad_signature or ok (never issuer_unavailable:
 *    the set is fresh and refetching is off);
 *  - ok only for the key's own alg (r1 RS256, e1 ES256, d1 EdDSA), with an
 *    object of claims;
 *  - the claim check gives one of its reasons, and on ok a principal whose id
 *    is 64 lowercase hex and whose iss is the configured issuer;
 *  - tm_auth_check: the status follows the reason (200 ok, 403
 *    insufficient_scope, 503 issuer_unavailable, else 401); a challenge
 *    exactly when 401/403, starting "Bearer ", without CR or LF; a principal
 *    only with 200/403.
 */
#include "fuzz_util.h"
#include "auth/auth_int.h"
#include "tidemark/tidemark.h"
#include <rhonabwy.h>

static const char JWKS[] = "{\"keys\":[{\"kty\":\"RSA\",\"n\":\"x6S_mHafexORvw5rV53hjDnlyDk6eIGDsOm594c0c049bgkrow3dmaPZ_uH_7-4ezD6w9Oxmk3wttuRpFPssDQScj7tpz4hGl8ntImdkVCdXDHQo5kaNLHucGJqyhB_B3q8VOb_z_nwNFUUL-SL_-ZkjqK1WLm3mF4ozI8MHRTkc67OAIfPFX8tdAD0JBBoFUNnQpsWq_XMUMm8yabBWYUrp1sagz2HsKTEVLqf7VE4zSF5t0e_0X5CrhmMFPSRuectbjPmNV7nqWyuORPSo0WoLWc02dGIzlhH3pyr877ZtHiwiJMop7rbNfyQ1aX7kMSZ5NzFxaV09EGBvTOE9MQ\",\"e\":\"AQAB\",\"kid\":\"r1\",\"use\":\"sig\",\"alg\":\"RS256\"},{\"kty\":\"EC\",\"x\":\"DeuQ0rF9anL6N5qyuQJehIAkT4ligVMt3SOYOLm5pAc\",\"y\":\"H6aTh0wbc3AWFnUuTOPCaRf-no8-oUQ9Q-LQZivIcFY\",\"crv\":\"P-256\",\"kid\":\"e1\",\"use\":\"sig\",\"alg\":\"ES256\"},{\"crv\":\"Ed25519\",\"x\":\"JznMuRY0YSCJS7zTdW3yNnkMLyd25q8Hg--tbLXCAPs\",\"kty\":\"OKP\",\"kid\":\"d1\",\"use\":\"sig\",\"alg\":\"EdDSA\"}]}";

#define ISSUER "https://as.example"
#define RESOURCE "https://mcp.example/mcp"

static tm_auth *auth(void)
{
    static tm_auth *a;
    if (a)
        return a;
    static const char *const rules[] = {"tool:*=mcp:tools", NULL};
    tm_auth_config c = {.resource = RESOURCE, .issuer = ISSUER,
                        .jwks_uri = "http://127.0.0.1:1/jwks", .scope_rules = rules,
                        .jwks_min_refresh_ms = 4000000000u, .jwks_max_age_ms = 4000000000u};
    FUZZ_CHECK(tm_auth_new(&c, &a) == 0, "tm_auth_new");
    FUZZ_CHECK(tm_jwks_install(tm_auth_jwks_of(a), JWKS, sizeof JWKS - 1) == 0, "install");
    return a;
}

static void check_verify(const char *tok, size_t len)
{
    tm_jwks *j = tm_auth_jwks_of(auth());
    uint64_t mask = 0;
    FUZZ_CHECK(tm_jwt_algs(NULL, &mask) == 0, "algs");
    int alg = 0;
    char kid[256];
    int prc = tm_jwt_peek(tok, len, &alg, kid, sizeof kid);
    tm_auth_reason why = TM_AUTH_REASON_COUNT;
    json_t *claims = NULL;
    FUZZ_CHECK(tm_jwt_verify(j, mask, 0, tok, len, &why, &claims) == 0, "verify failed");
    FUZZ_CHECK((prc == TIDEMARK_EINVAL) == (why == TM_AUTH_GARBAGE), "peek %d, reason %s", prc,
               tm_auth_reason_name(why));
    if (prc == 0) {
        if (alg == R_JWA_ALG_NONE)
            FUZZ_CHECK(why == TM_AUTH_ALG_NONE, "alg none gave %s", tm_auth_reason_name(why));
        else if (!(alg < 64 && (mask & (1ull << alg))))
            FUZZ_CHECK(why == TM_AUTH_ALG_NOT_ALLOWED, "alg %d gave %s", alg,
                       tm_auth_reason_name(why));
        else
            FUZZ_CHECK(why == TM_AUTH_UNKNOWN_KID || why == TM_AUTH_BAD_SIGNATURE ||
                           why == TM_AUTH_OK || why == TM_AUTH_BAD_CLAIMS,
                       "reason %s", tm_auth_reason_name(why));
    }
    FUZZ_CHECK((why == TM_AUTH_OK) == (claims != NULL), "claims iff ok");
    if (why == TM_AUTH_OK) {
        FUZZ_CHECK((strcmp(kid, "r1") == 0 && alg == R_JWA_ALG_RS256) ||
                       (strcmp(kid, "e1") == 0 && alg == R_JWA_ALG_ES256) ||
                       (strcmp(kid, "d1") == 0 && alg == R_JWA_ALG_EDDSA) ||
                       (!*kid && alg == R_JWA_ALG_ES256) || (!*kid && alg == R_JWA_ALG_EDDSA) ||
                       (!*kid && alg == R_JWA_ALG_RS256),
                   "accepted kid '%s' with alg %d", kid, alg);
        tm_claims_rules r = {.issuer = ISSUER, .resource = RESOURCE, .now_s = 1800000000,
                             .leeway_s = 30, .need_exp = 1, .need_iss = 1};
        tm_auth_principal p;
        FUZZ_CHECK(tm_claims_check(claims, &r, &why, &p) == 0, "claims check failed");
        FUZZ_CHECK(why == TM_AUTH_OK || why == TM_AUTH_WRONG_ISSUER ||
                       why == TM_AUTH_WRONG_AUDIENCE || why == TM_AUTH_EXPIRED ||
                       why == TM_AUTH_NOT_YET_VALID || why == TM_AUTH_BAD_CLAIMS,
                   "claims reason %s", tm_auth_reason_name(why));
        if (why == TM_AUTH_OK) {
            FUZZ_CHECK(strlen(p.id) == 64 && strspn(p.id, "0123456789abcdef") == 64, "id %s", p.id);
            FUZZ_CHECK(strcmp(p.iss, ISSUER) == 0, "iss %s", p.iss);
        }
    }
    json_decref(claims);
}

static void check_header(const char *tok)
{
    size_t n = strlen(tok);
    char *h = malloc(n + 8);
    FUZZ_CHECK(h != NULL, "malloc");
    memcpy(h, "Bearer ", 7);
    memcpy(h + 7, tok, n + 1);
    tm_auth_result r;
    FUZZ_CHECK(tm_auth_check(auth(), h, "tools/call", "echo", &r) == 0, "check failed");
    free(h);
    unsigned want = r.reason == TM_AUTH_OK ? 200 : r.reason == TM_AUTH_INSUFFICIENT_SCOPE ? 403
                    : r.reason == TM_AUTH_ISSUER_UNAVAILABLE ? 503 : 401;
    FUZZ_CHECK(r.status == want, "status %u for %s", r.status, tm_auth_reason_name(r.reason));
    int challenged = r.status == 401 || r.status == 403;
    FUZZ_CHECK(challenged == (r.www_authenticate[0] != '\0'), "challenge with %u", r.status);
    if (challenged)
        FUZZ_CHECK(strncmp(r.www_authenticate, "Bearer ", 7) == 0 &&
                       !strpbrk(r.www_authenticate, "\r\n"),
                   "challenge '%s'", r.www_authenticate);
    int principal = r.status == 200 || r.status == 403;
    FUZZ_CHECK(principal == (r.principal.id[0] != '\0'), "principal with %u", r.status);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *tok = malloc(size + 1);
    if (!tok)
        return 0;
    memcpy(tok, data, size);
    tok[size] = '\0';
    size_t len = strlen(tok);
    check_verify(tok, len);
    check_header(tok);
    free(tok);
    return 0;
}
