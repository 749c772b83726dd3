/*
 * jwks.c - the issuer's signing keys.
 *
 * The set is fetched on first use, again when a token names a kid the set
 * does not have, and again once it is older than max_age_ms; never more
 * often than once per min_refresh_ms, and by one thread at a time (the
 * others wait for that fetch when they need its result, i.e. for an unknown
 * kid, and keep using the cached key otherwise). A failed fetch keeps the
 * keys held: a known kid validates while the issuer is down; an unknown one
 * is then TIDEMARK_EIO (the issuer is unavailable).
 */
#include "auth_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <pthread.h>
#include <rhonabwy.h>
#include <stdlib.h>
#include <string.h>

struct tm_jwks {
    tm_jwks_config cfg;
    char *uri, *ca_file;
    pthread_mutex_t mu;       /* keys and the times below */
    pthread_mutex_t fetch_mu; /* one fetch at a time; taken before mu */
    jwks_t *keys;
    int64_t fetched_ms;       /* last successful fetch (0: never) */
    int64_t attempt_ms;       /* last fetch, successful or not (0: never) */
    int last_ok;              /* the last fetch succeeded */
    uint64_t generation;      /* fetches done */
};

/* ---- parsing ------------------------------------------------------------- */

/* A key we verify with: public, RSA, EC or EdDSA, for signatures. */
static int usable(jwk_t *k)
{
    unsigned bits = 0;
    int t = r_jwk_key_type(k, &bits, R_FLAG_IGNORE_REMOTE);
    if (!(t & R_KEY_TYPE_PUBLIC) || (t & R_KEY_TYPE_PRIVATE))
        return 0;
    if (!(t & (R_KEY_TYPE_RSA | R_KEY_TYPE_EC | R_KEY_TYPE_EDDSA)))
        return 0;
    if ((t & R_KEY_TYPE_RSA) && bits < 2048)
        return 0;
    const char *use = r_jwk_get_property_str(k, "use");
    return !use || strcmp(use, "sig") == 0;
}

static int add_key(jwks_t *set, json_t *jk, size_t *n)
{
    if (!json_is_object(jk) || json_object_get(jk, "d") || json_object_get(jk, "x5u"))
        return 0; /* private halves and remote certificates: skipped */
    jwk_t *k = NULL;
    if (r_jwk_init(&k) != RHN_OK)
        return TIDEMARK_ENOMEM;
    int rc = 0;
    if (r_jwk_import_from_json_t(k, jk) == RHN_OK && r_jwk_is_valid(k) == RHN_OK && usable(k)) {
        if (*n >= TM_AUTH_JWKS_MAX_KEYS)
            rc = TIDEMARK_ERANGE;
        else if (r_jwks_append_jwk(set, k) != RHN_OK)
            rc = TIDEMARK_ENOMEM;
        else
            (*n)++;
    }
    r_jwk_free(k);
    return rc;
}

int tm_jwks_parse(const char *json, size_t len, void **out, size_t *nkeys)
{
    if (!json || !out || !nkeys)
        return TIDEMARK_EINVAL;
    if (len > TM_AUTH_JWKS_MAX_BYTES)
        return TIDEMARK_ERANGE;
    json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL);
    json_t *arr = json_object_get(doc, "keys");
    if (!json_is_array(arr)) {
        json_decref(doc);
        return TIDEMARK_EINVAL;
    }
    if (json_array_size(arr) > 4 * TM_AUTH_JWKS_MAX_KEYS) {
        json_decref(doc);
        return TIDEMARK_ERANGE;
    }
    jwks_t *set = NULL;
    int rc = r_jwks_init(&set) == RHN_OK ? 0 : TIDEMARK_ENOMEM;
    size_t n = 0, i;
    json_t *jk;
    json_array_foreach(arr, i, jk) {
        if (!rc)
            rc = add_key(set, jk, &n);
    }
    json_decref(doc);
    if (rc) {
        r_jwks_free(set);
        return rc;
    }
    *out = set;
    *nkeys = n;
    return 0;
}

/* ---- the cache ------------------------------------------------------------ */

int tm_jwks_new(const tm_jwks_config *cfg, tm_jwks **out)
{
    if (!cfg || !cfg->uri || !out)
        return TIDEMARK_EINVAL;
    tm_jwks *j = calloc(1, sizeof *j);
    if (!j)
        return TIDEMARK_ENOMEM;
    j->cfg = *cfg;
    j->uri = strdup(cfg->uri);
    j->ca_file = cfg->ca_file ? strdup(cfg->ca_file) : NULL;
    if (!j->uri || (cfg->ca_file && !j->ca_file)) {
        free(j->uri);
        free(j->ca_file);
        free(j);
        return TIDEMARK_ENOMEM;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_mutex_init(&j->fetch_mu, NULL);
    *out = j;
    return 0;
}

void tm_jwks_free(tm_jwks *j)
{
    if (!j)
        return;
    r_jwks_free(j->keys);
    pthread_mutex_destroy(&j->mu);
    pthread_mutex_destroy(&j->fetch_mu);
    free(j->uri);
    free(j->ca_file);
    free(j);
}

/* Fetch and parse the set (no lock held). OUT *set. */
static int fetch_set(tm_jwks *j, jwks_t **set)
{
    tm_fetch_req req = {.url = j->uri, .ca_file = j->ca_file, .timeout_ms = j->cfg.timeout_ms,
                        .max_bytes = TM_AUTH_JWKS_MAX_BYTES};
    char *body = NULL;
    size_t len = 0, n = 0;
    long status = 0;
    int rc = tm_fetch(&req, &body, &len, &status);
    if (!rc && status != 200) {
        TM_WARN("auth: the JWKS at %s answered HTTP %ld", j->uri, status);
        rc = TIDEMARK_EIO;
    }
    void *parsed = NULL;
    if (!rc && (rc = tm_jwks_parse(body, len, &parsed, &n)) != 0)
        TM_WARN("auth: the JWKS at %s is not a usable key set (%s)", j->uri, tidemark_strerror(rc));
    free(body);
    if (rc)
        return rc == TIDEMARK_ENOMEM ? rc : TIDEMARK_EIO;
    TM_INFO("auth: fetched the JWKS at %s: %zu keys", j->uri, n);
    *set = parsed;
    return 0;
}

int tm_jwks_install(tm_jwks *j, const char *json, size_t len)
{
    if (!j || !json)
        return TIDEMARK_EINVAL;
    void *set = NULL;
    size_t n = 0;
    int rc = tm_jwks_parse(json, len, &set, &n);
    if (rc)
        return rc;
    pthread_mutex_lock(&j->mu);
    r_jwks_free(j->keys);
    j->keys = set;
    j->fetched_ms = j->attempt_ms = tm_now_ms();
    j->last_ok = 1;
    j->generation++;
    pthread_mutex_unlock(&j->mu);
    return 0;
}

/* Fetch unless another thread did since gen0 or the rate limit says no.
 * Called with fetch_mu held, mu not. */
static void refresh(tm_jwks *j, uint64_t gen0)
{
    pthread_mutex_lock(&j->mu);
    int64_t now = tm_now_ms();
    int skip = j->generation != gen0 ||
               (j->attempt_ms && now - j->attempt_ms < (int64_t)j->cfg.min_refresh_ms);
    pthread_mutex_unlock(&j->mu);
    if (skip)
        return;
    jwks_t *set = NULL;
    int rc = fetch_set(j, &set);
    pthread_mutex_lock(&j->mu);
    j->attempt_ms = tm_now_ms();
    j->last_ok = rc == 0;
    if (!rc) {
        r_jwks_free(j->keys);
        j->keys = set;
        j->fetched_ms = j->attempt_ms;
    }
    j->generation++;
    pthread_mutex_unlock(&j->mu);
}

static int key_type_for(int alg)
{
    switch (alg) {
    case R_JWA_ALG_RS256: case R_JWA_ALG_RS384: case R_JWA_ALG_RS512:
    case R_JWA_ALG_PS256: case R_JWA_ALG_PS384: case R_JWA_ALG_PS512:
        return R_KEY_TYPE_RSA;
    case R_JWA_ALG_ES256: case R_JWA_ALG_ES384: case R_JWA_ALG_ES512:
        return R_KEY_TYPE_EC;
    case R_JWA_ALG_EDDSA:
        return R_KEY_TYPE_EDDSA;
    default:
        return 0;
    }
}

/* With mu held: a copy of the key for kid (of alg's type first, as two
 * keys of different types may share a kid), or of the only key of alg's
 * type when the token names none. */
static jwk_t *lookup(tm_jwks *j, const char *kid, int alg)
{
    if (!j->keys)
        return NULL;
    jwk_t *found = NULL, *named = NULL;
    size_t n = r_jwks_size(j->keys);
    for (size_t i = 0; i < n; i++) {
        jwk_t *k = r_jwks_get_at(j->keys, i);
        unsigned bits = 0;
        const char *kk = k ? r_jwk_get_property_str(k, "kid") : NULL;
        int fits = k && (r_jwk_key_type(k, &bits, R_FLAG_IGNORE_REMOTE) & key_type_for(alg));
        if (kid && kk && strcmp(kk, kid) == 0 && fits && !found) {
            found = k;
            continue;
        }
        if (kid && kk && strcmp(kk, kid) == 0 && !named) {
            named = k; /* its type is wrong: bad_signature, not unknown_kid */
            continue;
        }
        if (!kid && fits) {
            if (found) { /* two candidates: the token must say which */
                r_jwk_free(k);
                r_jwk_free(found);
                return NULL;
            }
            found = k;
            continue;
        }
        r_jwk_free(k);
    }
    if (found) {
        r_jwk_free(named);
        return found;
    }
    return named;
}

int tm_jwks_get(tm_jwks *j, const char *kid, int alg, void **out)
{
    if (!j || !out)
        return TIDEMARK_EINVAL;
    pthread_mutex_lock(&j->mu);
    jwk_t *k = lookup(j, kid, alg);
    int stale = !j->fetched_ms || tm_now_ms() - j->fetched_ms > (int64_t)j->cfg.max_age_ms;
    uint64_t gen0 = j->generation;
    pthread_mutex_unlock(&j->mu);
    if (k && !stale) {
        *out = k;
        return 0;
    }
    if (k) { /* known but old: refresh if nobody is, use it either way */
        if (pthread_mutex_trylock(&j->fetch_mu) == 0) {
            refresh(j, gen0);
            pthread_mutex_unlock(&j->fetch_mu);
        }
        *out = k;
        return 0;
    }
    pthread_mutex_lock(&j->fetch_mu);
    refresh(j, gen0);
    pthread_mutex_unlock(&j->fetch_mu);
    pthread_mutex_lock(&j->mu);
    k = lookup(j, kid, alg);
    int ok = j->last_ok;
    pthread_mutex_unlock(&j->mu);
    if (k) {
        *out = k;
        return 0;
    }
    return ok ? TIDEMARK_ENOTFOUND : TIDEMARK_EIO;
}
