/* test_auth.c - src/auth/ without the network: the scopes an operation needs
 * and the hierarchy, the metadata document and its URLs, the challenges,
 * the Authorization header's grammar and bounds, what is refused before any
 * key is needed (garbage, alg none, HS256), the claim checks with their
 * reasons and the principal's id, JWKS parsing with its bounds, and the
 * configurations tm_auth_new refuses. (Tokens against a real authorization
 * server: auth_oidc, tests/integration/auth_driver.mjs.) */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "auth/auth_int.h"
#include "tidemark/tidemark.h"
#include <orcania.h>
#include <rhonabwy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char RSA_PUB[] = "{\"kty\": \"RSA\", \"n\": \"md2LOYozwySw0ovlLG_viAGbdz8nT9M18xd086M1xFVX9ltki34OQSprQOb9vL4xg6pGf70Ana3ywnet7pRqR14AAjFGt0mdDfAt985yu4VAAKRnw4fft_IgRV606CwW59WQxc_EbwMWuWqjetVEsevt0hhXUHi6mLTkJShuXXLYtpZJUEM6SDOnGBa3lTXke2j3onTYXCj1dqBXX8xVUHpMVCID3DblRNOAYZUjGSbBnVFpRgF8WsZG_NKSpoBCm0Lvq-x_ekzcCHuhJyvutCqvs4DaAxlSNtMCsVPTScyAPSnbGj9APrsemd65PK_jyJbgRxYnFmA80zi6DP1qmw\", \"e\": \"AQAB\", \"kid\": \"r1\", \"use\": \"sig\", \"alg\": \"RS256\"}";
static const char RSA_SMALL[] = "{\"kty\": \"RSA\", \"n\": \"zRbJx6T34uwYhlQWuvhfjzeYkZKQWHfGjfo3CvEJME7HvXK9ao-rd2u8aM4lH0bANGz0YKhGCavUcBM9SmQ2hIPKwkurX-MK39A6HKAe1bticlNZVngnFt4EHZeb-x0z83spMWcXEb28VrjF0CDCUSDBOkSZ-HuHnw0BJbiwTCM\", \"e\": \"AQAB\", \"kid\": \"small\"}";
static const char EC_PRIV[] = "{\"kty\": \"EC\", \"x\": \"fYQMJdIHxvCnjRA1Yh2TxhmwEVnTBhh9QaU66pYie0s\", \"y\": \"iGT4Btfs5Tpaeik4t-wI--yqdh6adM28adotxeJMmD8\", \"crv\": \"P-256\", \"d\": \"AHs5Ua_X2zkXv5CHfyyuDcGAewkIkSHi6r0i35G-85c\", \"kid\": \"e1\"}";
static const char EC_PUB[] = "{\"kty\": \"EC\", \"x\": \"fYQMJdIHxvCnjRA1Yh2TxhmwEVnTBhh9QaU66pYie0s\", \"y\": \"iGT4Btfs5Tpaeik4t-wI--yqdh6adM28adotxeJMmD8\", \"crv\": \"P-256\", \"kid\": \"e1\"}";
static const char ED_PUB[] = "{\"crv\": \"Ed25519\", \"x\": \"jDhPYop5ZgcQPfPakpVZUYgHKBWLSfGvx_p2AnBQbOM\", \"kty\": \"OKP\", \"kid\": \"d1\"}";

static const char *const rules[] = {"tool:admin_reset=mcp:admin", "tool:*=mcp:tools",
                                    "method:resources/read=mcp:read", NULL};
static const char *const implies[] = {"mcp:admin=mcp:write", "mcp:write=mcp:tools mcp:read",
                                      NULL};

static tm_auth_config base_config(void)
{
    return (tm_auth_config){.resource = "https://mcp.example/base/mcp",
                            .issuer = "https://as.example",
                            .jwks_uri = "http://127.0.0.1:1/jwks",
                            .scopes_supported = "mcp:read mcp:tools",
                            .scope_base = "mcp:base",
                            .scope_rules = rules,
                            .scope_implies = implies};
}

static void test_reason_names(void **state)
{
    (void)state;
    for (int i = 0; i < TM_AUTH_REASON_COUNT; i++) {
        const char *n = tm_auth_reason_name((tm_auth_reason)i);
        assert_string_not_equal(n, "?");
        for (int j = 0; j < i; j++)
            assert_string_not_equal(n, tm_auth_reason_name((tm_auth_reason)j));
    }
    assert_string_equal(tm_auth_reason_name(TM_AUTH_REASON_COUNT), "?");
    assert_string_equal(tm_auth_reason_name(TM_AUTH_ISSUER_UNAVAILABLE), "issuer_unavailable");
}

static void test_scopes(void **state)
{
    (void)state;
    tm_scopes *s = NULL;
    assert_int_equal(tm_scopes_new("mcp:base", rules, implies, &s), 0);
    char out[256];
    assert_int_equal(tm_scopes_required(s, NULL, NULL, out, sizeof out), 0);
    assert_string_equal(out, "mcp:base");
    assert_int_equal(tm_scopes_required(s, "tools/call", "echo", out, sizeof out), 0);
    assert_string_equal(out, "mcp:base mcp:tools");
    assert_int_equal(tm_scopes_required(s, "tools/call", "admin_reset", out, sizeof out), 0);
    assert_string_equal(out, "mcp:base mcp:admin");
    assert_int_equal(tm_scopes_required(s, "resources/read", NULL, out, sizeof out), 0);
    assert_string_equal(out, "mcp:base mcp:read");
    assert_int_equal(tm_scopes_required(s, "tools/list", "echo", out, sizeof out), 0);
    assert_string_equal(out, "mcp:base"); /* a tool rule only for tools/call */
    assert_int_equal(tm_scopes_required(s, "tools/call", "echo", out, 10), TIDEMARK_ERANGE);
    int ok = -1;
    assert_int_equal(tm_scopes_cover(s, "mcp:base mcp:tools", "mcp:tools mcp:base", &ok), 0);
    assert_int_equal(ok, 1);
    assert_int_equal(tm_scopes_cover(s, "mcp:base mcp:tools", "mcp:base", &ok), 0);
    assert_int_equal(ok, 0);
    /* transitive: admin -> write -> tools, read */
    assert_int_equal(tm_scopes_cover(s, "mcp:base mcp:read mcp:tools", "mcp:base mcp:admin", &ok), 0);
    assert_int_equal(ok, 1);
    assert_int_equal(tm_scopes_cover(s, "mcp:admin", "mcp:write", &ok), 0);
    assert_int_equal(ok, 0); /* narrower never implies broader */
    assert_int_equal(tm_scopes_cover(s, "mcp:tool", "mcp:tools", &ok), 0);
    assert_int_equal(ok, 0); /* whole words only */
    assert_int_equal(tm_scopes_cover(s, "", "", &ok), 0);
    assert_int_equal(ok, 1);
    tm_scopes_free(s);
    const char *const bad1[] = {"nokey", NULL}, *const bad2[] = {"other:x=a", NULL},
                      *const bad3[] = {"tool:x=a\"b", NULL}, *const bad4[] = {"a b=c", NULL};
    assert_int_equal(tm_scopes_new(NULL, bad1, NULL, &s), TIDEMARK_EINVAL);
    assert_int_equal(tm_scopes_new(NULL, bad2, NULL, &s), TIDEMARK_EINVAL);
    assert_int_equal(tm_scopes_new(NULL, bad3, NULL, &s), TIDEMARK_EINVAL);
    assert_int_equal(tm_scopes_new(NULL, NULL, bad4, &s), TIDEMARK_EINVAL);
    char longlist[400];
    memset(longlist, 'a', sizeof longlist - 1);
    longlist[sizeof longlist - 1] = '\0';
    assert_int_equal(tm_scopes_new(longlist, NULL, NULL, &s), TIDEMARK_EINVAL); /* over 300 */
    assert_int_equal(tm_scope_list_ok("a b"), 1);
    assert_int_equal(tm_scope_list_ok(""), 1);
    assert_int_equal(tm_scope_list_ok("a  b"), 0);
    assert_int_equal(tm_scope_list_ok(" a"), 0);
    assert_int_equal(tm_scope_list_ok("a\\b"), 0);
    assert_int_equal(tm_scope_list_ok("a\tb"), 0);
}

static void test_metadata(void **state)
{
    (void)state;
    tm_auth_config c = base_config();
    c.resource_name = "Example";
    tm_auth *a = NULL;
    assert_int_equal(tm_auth_new(&c, &a), 0);
    const char *doc = NULL;
    assert_int_equal(tm_auth_metadata(a, "/.well-known/oauth-protected-resource", &doc), 0);
    assert_string_equal(doc, "{\"resource\":\"https://mcp.example/base/mcp\",\"authorization_servers\":"
                             "[\"https://as.example\"],\"bearer_methods_supported\":[\"header\"],"
                             "\"scopes_supported\":[\"mcp:read\",\"mcp:tools\"],\"resource_name\":\"Example\"}");
    assert_int_equal(tm_auth_metadata(a, "/.well-known/oauth-protected-resource/base/mcp", &doc), 0);
    assert_int_equal(tm_auth_metadata(a, "/.well-known/oauth-protected-resource/base", &doc),
                     TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_auth_metadata(a, "/base/mcp", &doc), TIDEMARK_ENOTFOUND);
    tm_auth_free(a);
    char *url = NULL, *root = NULL, *suf = NULL;
    assert_int_equal(tm_prm_url("http://127.0.0.1:8080", &url), 0);
    assert_string_equal(url, "http://127.0.0.1:8080/.well-known/oauth-protected-resource");
    free(url);
    assert_int_equal(tm_prm_url("https://h.example:8443/a/mcp/", &url), 0);
    assert_string_equal(url, "https://h.example:8443/.well-known/oauth-protected-resource/a/mcp");
    free(url);
    assert_int_equal(tm_prm_paths("http://h/", &root, &suf), 0);
    assert_string_equal(root, suf);
    free(root);
    free(suf);
    const char *bad[] = {"ftp://h/mcp", "https:///mcp", "https://h/mcp?x=1", "https://h/mcp#f",
                         "https://h/\"x", "https://h/a b", "mcp"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(tm_prm_url(bad[i], &url), TIDEMARK_EINVAL);
}

static void test_challenges(void **state)
{
    (void)state;
    char out[256];
    assert_int_equal(tm_prm_challenge(NULL, "https://h/.well-known/x", "a b", out, sizeof out), 0);
    assert_string_equal(out, "Bearer resource_metadata=\"https://h/.well-known/x\", scope=\"a b\"");
    assert_int_equal(tm_prm_challenge("insufficient_scope", "https://h/m", "a", out, sizeof out), 0);
    assert_string_equal(out, "Bearer error=\"insufficient_scope\", resource_metadata=\"https://h/m\", scope=\"a\"");
    assert_int_equal(tm_prm_challenge("invalid_token", "https://h/m", "", out, sizeof out), 0);
    assert_string_equal(out, "Bearer error=\"invalid_token\", resource_metadata=\"https://h/m\"");
    assert_int_equal(tm_prm_challenge("invalid_token", "https://h/m", "", out, 20), TIDEMARK_ERANGE);
}

/* A JWS-shaped token with this header and payload and a dummy signature. */
static void make_token(const char *header, const char *payload, const char *sig, char *out,
                       size_t n)
{
    char h[512], p[1024];
    size_t hl = 0, pl = 0;
    assert_true(o_base64url_encode((const unsigned char *)header, strlen(header),
                                   (unsigned char *)h, &hl));
    assert_true(o_base64url_encode((const unsigned char *)payload, strlen(payload),
                                   (unsigned char *)p, &pl));
    h[hl] = p[pl] = '\0';
    snprintf(out, n, "Bearer %s.%s.%s", h, p, sig);
}

static void expect(tm_auth *a, const char *hdr, unsigned status, tm_auth_reason reason)
{
    tm_auth_result r;
    assert_int_equal(tm_auth_check(a, hdr, "tools/call", "echo", &r), 0);
    if (r.status != status || r.reason != reason)
        fail_msg("%s: got %u %s, want %u %s", hdr ? hdr : "(none)", r.status,
                 tm_auth_reason_name(r.reason), status, tm_auth_reason_name(reason));
    assert_string_equal(r.principal.id, "");
}

/* Everything refused before a key is needed (the JWKS at port 1 is never
 * reached: these answers come without the network). */
static void test_refused_without_keys(void **state)
{
    (void)state;
    tm_auth_config c = base_config();
    tm_auth *a = NULL;
    assert_int_equal(tm_auth_new(&c, &a), 0);
    tm_auth_result r;
    assert_int_equal(tm_auth_check(a, NULL, "tools/call", "echo", &r), 0);
    assert_int_equal(r.status, 401);
    assert_int_equal(r.reason, TM_AUTH_MISSING);
    assert_string_equal(r.www_authenticate,
                        "Bearer resource_metadata=\"https://mcp.example/.well-known/oauth-protected-resource/base/mcp\", "
                        "scope=\"mcp:base mcp:tools\"");
    expect(a, "", 401, TM_AUTH_MISSING);
    assert_int_equal(tm_auth_check(a, "Basic Zm9vOmJhcg==", NULL, NULL, &r), 0);
    assert_int_equal(r.reason, TM_AUTH_MALFORMED);
    assert_string_equal(r.www_authenticate,
                        "Bearer error=\"invalid_token\", resource_metadata=\"https://mcp.example/.well-known/oauth-protected-resource/base/mcp\", "
                        "scope=\"mcp:base\"");
    const char *malformed[] = {"Bearer", "Bearer ", "Bearer a b", "Bearer a=b", "Bearer a\"",
                               "Bearer\ta.b.c", "Bearerx a.b.c", "Bearer ==="};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++)
        expect(a, malformed[i], 401, TM_AUTH_MALFORMED);
    expect(a, "bearer a.b.c", 401, TM_AUTH_GARBAGE); /* the scheme is case-insensitive */
    expect(a, "Bearer a.b.c", 401, TM_AUTH_GARBAGE);
    expect(a, "Bearer abc", 401, TM_AUTH_GARBAGE);
    expect(a, "Bearer a+b.c.d", 401, TM_AUTH_GARBAGE); /* token68, not base64url */
    char *big = malloc(9000);
    memcpy(big, "Bearer ", 7);
    memset(big + 7, 'a', 8200);
    big[8207] = '\0';
    expect(a, big, 401, TM_AUTH_MALFORMED); /* over max_token */
    free(big);
    char tok[2048];
    const char *claims = "{\"iss\":\"https://as.example\",\"aud\":\"https://mcp.example/base/mcp\","
                         "\"sub\":\"x\",\"exp\":9999999999}";
    make_token("{\"alg\":\"none\"}", claims, "", tok, sizeof tok);
    expect(a, tok, 401, TM_AUTH_ALG_NONE);
    make_token("{\"alg\":\"HS256\",\"kid\":\"k\"}", claims, "c2ln", tok, sizeof tok);
    expect(a, tok, 401, TM_AUTH_ALG_NOT_ALLOWED);
    make_token("{\"alg\":\"HS512\"}", claims, "c2ln", tok, sizeof tok);
    expect(a, tok, 401, TM_AUTH_ALG_NOT_ALLOWED);
    make_token("{\"alg\":\"PS256\"}", claims, "c2ln", tok, sizeof tok);
    c.algorithms = "ES256"; /* not a default: tried below on an ES256-only server */
    make_token("{\"alg\":\"RSA-OAEP\"}", claims, "c2ln", tok, sizeof tok);
    expect(a, tok, 401, TM_AUTH_GARBAGE); /* a key-management alg: not a JWS at all */
    make_token("{\"alg\":\"RS256\"", claims, "c2ln", tok, sizeof tok); /* header not JSON */
    expect(a, tok, 401, TM_AUTH_GARBAGE);
    assert_int_equal(tm_auth_count(a, TM_AUTH_ALG_NOT_ALLOWED), 2);
    assert_int_equal(tm_auth_count(a, TM_AUTH_MISSING), 2);
    tm_auth_free(a);
    tm_auth *es = NULL;
    assert_int_equal(tm_auth_new(&c, &es), 0);
    make_token("{\"alg\":\"RS256\",\"kid\":\"k\"}", claims, "c2ln", tok, sizeof tok);
    expect(es, tok, 401, TM_AUTH_ALG_NOT_ALLOWED); /* valid alg, not configured */
    tm_auth_free(es);
}

static void claims_expect(const char *json, tm_auth_reason want, int need_exp)
{
    json_t *c = json_loads(json, 0, NULL);
    assert_non_null(c);
    tm_claims_rules r = {.issuer = "https://as.example", .resource = "https://mcp.example/mcp",
                         .now_s = 1000000, .leeway_s = 30, .need_exp = need_exp,
                         .need_iss = need_exp};
    tm_auth_reason got;
    tm_auth_principal p;
    assert_int_equal(tm_claims_check(c, &r, &got, &p), 0);
    if (got != want)
        fail_msg("%s: got %s, want %s", json, tm_auth_reason_name(got), tm_auth_reason_name(want));
    json_decref(c);
}

#define ISS "\"iss\":\"https://as.example\""
#define AUD "\"aud\":\"https://mcp.example/mcp\""
static void test_claims(void **state)
{
    (void)state;
    claims_expect("{" ISS "," AUD ",\"sub\":\"alice\",\"exp\":1000100}", TM_AUTH_OK, 1);
    claims_expect("{" ISS "," AUD ",\"sub\":\"alice\",\"exp\":999980}", TM_AUTH_OK, 1); /* leeway */
    claims_expect("{" ISS "," AUD ",\"sub\":\"alice\",\"exp\":999970}", TM_AUTH_EXPIRED, 1);
    claims_expect("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1000100,\"nbf\":1000020}", TM_AUTH_OK, 1);
    claims_expect("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1000100,\"nbf\":1000031}",
                  TM_AUTH_NOT_YET_VALID, 1);
    claims_expect("{\"iss\":\"https://as.example/\"," AUD ",\"sub\":\"a\",\"exp\":1000100}",
                  TM_AUTH_WRONG_ISSUER, 1);
    claims_expect("{" AUD ",\"sub\":\"a\",\"exp\":1000100}", TM_AUTH_WRONG_ISSUER, 1);
    claims_expect("{" ISS ",\"aud\":\"https://mcp.example/mcp/\",\"sub\":\"a\",\"exp\":1000100}",
                  TM_AUTH_WRONG_AUDIENCE, 1); /* exact, no normalization */
    claims_expect("{" ISS ",\"aud\":[\"x\",\"https://mcp.example/mcp\"],\"sub\":\"a\",\"exp\":1000100}",
                  TM_AUTH_OK, 1);
    claims_expect("{" ISS ",\"sub\":\"a\",\"exp\":1000100}", TM_AUTH_WRONG_AUDIENCE, 1);
    claims_expect("{" ISS "," AUD ",\"sub\":\"a\"}", TM_AUTH_BAD_CLAIMS, 1);
    claims_expect("{" ISS "," AUD ",\"sub\":\"a\"}", TM_AUTH_OK, 0); /* introspection: exp optional */
    claims_expect("{" AUD ",\"sub\":\"a\"}", TM_AUTH_OK, 0);
    claims_expect("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":\"1000100\"}", TM_AUTH_BAD_CLAIMS, 1);
    claims_expect("{" ISS "," AUD ",\"exp\":1000100}", TM_AUTH_BAD_CLAIMS, 1);
    claims_expect("{" ISS "," AUD ",\"sub\":\"\",\"exp\":1000100}", TM_AUTH_BAD_CLAIMS, 1);
    claims_expect("{" ISS "," AUD ",\"sub\":7,\"exp\":1000100}", TM_AUTH_BAD_CLAIMS, 1);
    claims_expect("{" ISS "," AUD ",\"sub\":\"a\",\"exp\":1000100,\"scope\":\"a\\\"b\"}",
                  TM_AUTH_BAD_CLAIMS, 1);
    claims_expect("[1]", TM_AUTH_BAD_CLAIMS, 1);
    /* the principal */
    json_t *c = json_loads("{" ISS "," AUD ",\"sub\":\"alice\",\"exp\":1000100,\"scp\":[\"a\",\"b\"]}",
                           0, NULL);
    tm_claims_rules r = {.issuer = "https://as.example", .resource = "https://mcp.example/mcp",
                         .now_s = 1000000, .leeway_s = 30, .need_exp = 1, .need_iss = 1};
    tm_auth_reason got;
    tm_auth_principal p;
    assert_int_equal(tm_claims_check(c, &r, &got, &p), 0);
    assert_int_equal(got, TM_AUTH_OK);
    assert_string_equal(p.id, "0f15419aa56ed5e6fb861914558dc1f8cfd43de2b0528c58fb95118d63d08536");
    assert_string_equal(p.sub, "alice");
    assert_string_equal(p.scope, "a b");
    assert_int_equal(p.exp, 1000100);
    json_decref(c);
    /* a NUL in sub is refused (the id's separator) */
    c = json_loads("{" ISS "," AUD ",\"sub\":\"al\\u0000ice\",\"exp\":1000100}", JSON_ALLOW_NUL, NULL);
    assert_int_equal(tm_claims_check(c, &r, &got, &p), 0);
    assert_int_equal(got, TM_AUTH_BAD_CLAIMS);
    json_decref(c);
}

static void jwks_expect(const char *json, int rc, size_t keys)
{
    void *set = NULL;
    size_t n = 99;
    int got = tm_jwks_parse(json, strlen(json), &set, &n);
    if (got != rc)
        fail_msg("%.80s: rc %d, want %d", json, got, rc);
    if (!got) {
        assert_int_equal(n, keys);
        assert_int_equal(r_jwks_size(set), keys);
        r_jwks_free(set);
    }
}

static void test_jwks_parse(void **state)
{
    (void)state;
    char doc[70000];
    snprintf(doc, sizeof doc, "{\"keys\":[%s,%s,%s]}", RSA_PUB, EC_PUB, ED_PUB);
    jwks_expect(doc, 0, 3);
    /* private halves, small RSA, symmetric keys, encryption keys: skipped */
    snprintf(doc, sizeof doc,
             "{\"keys\":[%s,%s,{\"kty\":\"oct\",\"k\":\"c2VjcmV0\",\"kid\":\"h\"},"
             "{\"kty\":\"RSA\",\"use\":\"enc\",\"n\":\"x\",\"e\":\"AQAB\"},{\"kty\":\"zzz\"},7,%s]}",
             EC_PRIV, RSA_SMALL, RSA_PUB);
    jwks_expect(doc, 0, 1);
    jwks_expect("{\"keys\":[]}", 0, 0);
    jwks_expect("{\"keys\":{}}", TIDEMARK_EINVAL, 0);
    jwks_expect("[]", TIDEMARK_EINVAL, 0);
    jwks_expect("not json", TIDEMARK_EINVAL, 0);
    jwks_expect("{\"keys\":[],\"keys\":[]}", TIDEMARK_EINVAL, 0);
    size_t used = (size_t)snprintf(doc, sizeof doc, "{\"keys\":[");
    for (int i = 0; i < TM_AUTH_JWKS_MAX_KEYS + 1; i++)
        used += (size_t)snprintf(doc + used, sizeof doc - used, "%s%s", i ? "," : "", EC_PUB);
    snprintf(doc + used, sizeof doc - used, "]}");
    jwks_expect(doc, TIDEMARK_ERANGE, 0); /* one key over the bound */
    char *big = malloc(TM_AUTH_JWKS_MAX_BYTES + 100);
    memset(big, ' ', TM_AUTH_JWKS_MAX_BYTES + 99);
    memcpy(big, "{\"keys\":[]}", 11);
    big[TM_AUTH_JWKS_MAX_BYTES + 99] = '\0';
    jwks_expect(big, TIDEMARK_ERANGE, 0);
    free(big);
}

/* Tokens signed by node with the private halves of the fuzz corpus's key set
 * (tests/fuzz/corpus/jwt, corpus/jwks/three_keys): the verdicts, with no
 * network (the set is installed as if fetched). */
static char *slurp(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", TM_FUZZ_CORPUS, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

static void test_signed_tokens(void **state)
{
    (void)state;
    tm_jwks_config jc = {.uri = "http://127.0.0.1:1/jwks", .timeout_ms = 100,
                         .min_refresh_ms = 3600000, .max_age_ms = 3600000};
    tm_jwks *j = NULL;
    assert_int_equal(tm_jwks_new(&jc, &j), 0);
    char *set = slurp("jwks/three_keys");
    assert_int_equal(tm_jwks_install(j, set, strlen(set)), 0);
    free(set);
    uint64_t mask = 0;
    assert_int_equal(tm_jwt_algs(NULL, &mask), 0);
    const struct {
        const char *file;
        tm_auth_reason sig, claims;
    } cases[] = {
        {"rs256_ok", TM_AUTH_OK, TM_AUTH_OK},          {"es256_ok", TM_AUTH_OK, TM_AUTH_OK},
        {"eddsa_ok", TM_AUTH_OK, TM_AUTH_OK},          {"aud_array", TM_AUTH_OK, TM_AUTH_OK},
        {"scp_array", TM_AUTH_OK, TM_AUTH_OK},         {"no_kid", TM_AUTH_OK, TM_AUTH_OK},
        {"expired", TM_AUTH_OK, TM_AUTH_EXPIRED},      {"nbf_ahead", TM_AUTH_OK, TM_AUTH_NOT_YET_VALID},
        {"wrong_iss", TM_AUTH_OK, TM_AUTH_WRONG_ISSUER}, {"unknown_kid", TM_AUTH_UNKNOWN_KID, 0},
        {"alg_none", TM_AUTH_ALG_NONE, 0},             {"hs256", TM_AUTH_ALG_NOT_ALLOWED, 0},
        {"garbage", TM_AUTH_GARBAGE, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "jwt/%s", cases[i].file);
        char *tok = slurp(name);
        tm_auth_reason why;
        json_t *claims = NULL;
        assert_int_equal(tm_jwt_verify(j, mask, 0, tok, strlen(tok), &why, &claims), 0);
        if (why != cases[i].sig)
            fail_msg("%s: signature %s", cases[i].file, tm_auth_reason_name(why));
        if (why == TM_AUTH_OK) {
            tm_claims_rules r = {.issuer = "https://as.example", .resource = "https://mcp.example/mcp",
                                 .now_s = 1800000000, .leeway_s = 30, .need_exp = 1, .need_iss = 1};
            tm_auth_principal p;
            assert_int_equal(tm_claims_check(claims, &r, &why, &p), 0);
            if (why != cases[i].claims)
                fail_msg("%s: claims %s", cases[i].file, tm_auth_reason_name(why));
            if (why == TM_AUTH_OK)
                assert_string_equal(p.id, "0f15419aa56ed5e6fb861914558dc1f8cfd43de2b0528c58fb95118d63d08536");
        }
        json_decref(claims);
        /* one flipped signature byte: never accepted */
        size_t n = strlen(tok);
        if (cases[i].sig == TM_AUTH_OK) {
            tok[n - 2] = tok[n - 2] == 'A' ? 'B' : 'A';
            assert_int_equal(tm_jwt_verify(j, mask, 0, tok, n, &why, &claims), 0);
            if (why != TM_AUTH_BAD_SIGNATURE)
                fail_msg("%s with a flipped byte: %s", cases[i].file, tm_auth_reason_name(why));
        }
        free(tok);
    }
    /* typ: the corpus tokens say at+jwt; alg_none's says nothing */
    char *typed = slurp("jwt/es256_ok");
    json_t *cl = NULL;
    assert_int_equal(tm_jwt_verify(j, mask, 1, typed, strlen(typed), &(tm_auth_reason){0}, &cl), 0);
    assert_non_null(cl);
    json_decref(cl);
    free(typed);
    /* only ES256 accepted: the RS256 token is refused before its key */
    assert_int_equal(tm_jwt_algs("ES256", &mask), 0);
    char *tok = slurp("jwt/rs256_ok");
    tm_auth_reason why;
    json_t *claims = NULL;
    assert_int_equal(tm_jwt_verify(j, mask, 0, tok, strlen(tok), &why, &claims), 0);
    assert_int_equal(why, TM_AUTH_ALG_NOT_ALLOWED);
    free(tok);
    tm_jwks_free(j);
}

/* Two keys of different types sharing a kid: the one of the token's alg's
 * type; without a kid, the only key of that type. */
static void test_shared_kid(void **state)
{
    (void)state;
    json_t *r = json_loads(RSA_PUB, 0, NULL), *e = json_loads(EC_PUB, 0, NULL);
    json_object_set_new(r, "kid", json_string("same"));
    json_object_set_new(e, "kid", json_string("same"));
    json_t *set = json_pack("{s[oo]}", "keys", r, e);
    char *doc = json_dumps(set, 0);
    json_decref(set);
    tm_jwks_config jc = {.uri = "http://127.0.0.1:1/jwks", .timeout_ms = 100,
                         .min_refresh_ms = 3600000, .max_age_ms = 3600000};
    tm_jwks *j = NULL;
    assert_int_equal(tm_jwks_new(&jc, &j), 0);
    assert_int_equal(tm_jwks_install(j, doc, strlen(doc)), 0);
    free(doc);
    const struct {
        const char *kid;
        int alg, type;
    } cases[] = {{"same", R_JWA_ALG_ES256, R_KEY_TYPE_EC}, {"same", R_JWA_ALG_RS256, R_KEY_TYPE_RSA},
                 {"same", R_JWA_ALG_EDDSA, R_KEY_TYPE_RSA}, /* none fits: the first named */
                 {NULL, R_JWA_ALG_ES256, R_KEY_TYPE_EC},    {NULL, R_JWA_ALG_PS256, R_KEY_TYPE_RSA}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *k = NULL;
        assert_int_equal(tm_jwks_get(j, cases[i].kid, cases[i].alg, &k), 0);
        unsigned bits = 0;
        assert_true(r_jwk_key_type(k, &bits, R_FLAG_IGNORE_REMOTE) & cases[i].type);
        r_jwk_free(k);
    }
    void *k = NULL;
    assert_int_equal(tm_jwks_get(j, NULL, R_JWA_ALG_EDDSA, &k), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_jwks_get(j, "other", R_JWA_ALG_ES256, &k), TIDEMARK_ENOTFOUND);
    tm_jwks_free(j);
}

static void test_config(void **state)
{
    (void)state;
    tm_auth *a = NULL;
    tm_auth_config c = base_config();
    c.resource = NULL;
    assert_int_equal(tm_auth_new(&c, &a), TIDEMARK_EINVAL);
    c = base_config();
    c.resource = "https://h/mcp?q";
    assert_int_equal(tm_auth_new(&c, &a), TIDEMARK_EINVAL);
    c = base_config();
    c.issuer = NULL;
    assert_int_equal(tm_auth_new(&c, &a), TIDEMARK_EINVAL);
    c = base_config();
    c.introspection_uri = "http://127.0.0.1:1/i";
    assert_int_equal(tm_auth_new(&c, &a), TIDEMARK_EINVAL); /* both */
    c.jwks_uri = NULL;
    assert_int_equal(tm_auth_new(&c, &a), TIDEMARK_EINVAL); /* no client id */
    c.client_id = "rs";
    assert_int_equal(tm_auth_new(&c, &a), 0);
    tm_auth_free(a);
    c = base_config();
    c.jwks_uri = NULL;
    assert_int_equal(tm_auth_new(&c, &a), TIDEMARK_EINVAL); /* neither */
    c = base_config();
    c.algorithms = "RS256 HS256";
    assert_int_equal(tm_auth_new(&c, &a), TIDEMARK_EINVAL);
    c.algorithms = "none";
    assert_int_equal(tm_auth_new(&c, &a), TIDEMARK_EINVAL);
    c.algorithms = "ES256 EdDSA";
    assert_int_equal(tm_auth_new(&c, &a), 0);
    tm_auth_free(a);
    c = base_config();
    c.scope_base = "bad\"scope";
    assert_int_equal(tm_auth_new(&c, &a), TIDEMARK_EINVAL);
    assert_int_equal(tm_auth_check(NULL, NULL, NULL, NULL, &(tm_auth_result){0}), TIDEMARK_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reason_names), cmocka_unit_test(test_scopes),
        cmocka_unit_test(test_metadata),     cmocka_unit_test(test_challenges),
        cmocka_unit_test(test_refused_without_keys), cmocka_unit_test(test_claims),
        cmocka_unit_test(test_jwks_parse),   cmocka_unit_test(test_signed_tokens),
        cmocka_unit_test(test_shared_kid),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
