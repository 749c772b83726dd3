/*
 * fuzz_jwks.c - a JWKS document through tm_jwks_parse and tm_jwks_install /
 * tm_jwks_get (src/auth/jwks.c), as it comes from an issuer.
 *
 * Input: the document's bytes. Invariants:
 *  - the answer is 0, TIDEMARK_EINVAL or TIDEMARK_ERANGE; over
 *    TM_AUTH_JWKS_MAX_BYTES it is TIDEMARK_ERANGE;
 *  - a parsed set holds at most TM_AUTH_JWKS_MAX_KEYS keys, the count said,
 *    and only public RSA (2048 bits or more), EC and EdDSA keys, none with a
 *    private half, none for encryption;
 *  - parsing is deterministic (same answer, same count);
 *  - installed, every key with a non-empty kid is found by it; a kid the set does not
 *    have is TIDEMARK_ENOTFOUND (never a fetch: refetching is off).
 */
#include "fuzz_util.h"
#include "auth/auth_int.h"
#include "tidemark/tidemark.h"
#include <rhonabwy.h>

static tm_jwks *jwks(void)
{
    static tm_jwks *j;
    if (!j) {
        tm_jwks_config c = {.uri = "http://127.0.0.1:1/jwks", .timeout_ms = 100,
                            .min_refresh_ms = 4000000000u, .max_age_ms = 4000000000u};
        FUZZ_CHECK(tm_jwks_new(&c, &j) == 0, "tm_jwks_new");
    }
    return j;
}

static void check_key(jwk_t *k)
{
    unsigned bits = 0;
    int t = r_jwk_key_type(k, &bits, R_FLAG_IGNORE_REMOTE);
    FUZZ_CHECK((t & R_KEY_TYPE_PUBLIC) && !(t & R_KEY_TYPE_PRIVATE), "type %x", t);
    FUZZ_CHECK(t & (R_KEY_TYPE_RSA | R_KEY_TYPE_EC | R_KEY_TYPE_EDDSA), "type %x", t);
    FUZZ_CHECK(!(t & R_KEY_TYPE_RSA) || bits >= 2048, "RSA of %u bits", bits);
    const char *use = r_jwk_get_property_str(k, "use");
    FUZZ_CHECK(!use || strcmp(use, "sig") == 0, "use %s", use);
    const char *kid = r_jwk_get_property_str(k, "kid");
    if (kid && *kid) { /* "" counts as no kid (a token's too) */
        void *got = NULL;
        FUZZ_CHECK(tm_jwks_get(jwks(), kid, 0, &got) == 0, "kid %s not found", kid);
        r_jwk_free(got);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void *set = NULL, *again = NULL;
    size_t n = 0, n2 = 0;
    int rc = tm_jwks_parse((const char *)data, size, &set, &n);
    FUZZ_CHECK(rc == 0 || rc == TIDEMARK_EINVAL || rc == TIDEMARK_ERANGE, "rc %d", rc);
    if (size > TM_AUTH_JWKS_MAX_BYTES)
        FUZZ_CHECK(rc == TIDEMARK_ERANGE, "over the bound: rc %d", rc);
    int rc2 = tm_jwks_parse((const char *)data, size, &again, &n2);
    FUZZ_CHECK(rc2 == rc && n2 == n, "not deterministic: %d/%zu then %d/%zu", rc, n, rc2, n2);
    r_jwks_free(again);
    if (rc)
        return 0;
    FUZZ_CHECK(n <= TM_AUTH_JWKS_MAX_KEYS && r_jwks_size(set) == n, "%zu keys", n);
    FUZZ_CHECK(tm_jwks_install(jwks(), (const char *)data, size) == 0, "install");
    for (size_t i = 0; i < n; i++) {
        jwk_t *k = r_jwks_get_at(set, i);
        FUZZ_CHECK(k != NULL, "key %zu", i);
        check_key(k);
        r_jwk_free(k);
    }
    void *none = NULL;
    int grc = tm_jwks_get(jwks(), "\x01no such kid", 0, &none);
    FUZZ_CHECK(grc == TIDEMARK_ENOTFOUND, "unknown kid: %d", grc);
    r_jwks_free(set);
    return 0;
}
