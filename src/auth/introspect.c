/*
 * introspect.c - OAuth 2.0 Token Introspection (RFC 7662), client side.
 *
 * The token is POSTed (form-urlencoded, token_type_hint=access_token) with
 * this server's client credentials in HTTP Basic. An active answer is kept
 * for cache_ms (never past the token's exp), keyed by the SHA-256 of the
 * token, so the token itself is never stored; inactive answers are not kept
 * (a token may become active only by being a new token). At most
 * TM_AUTH_CACHE_MAX entries: when full, expired entries go, and when none
 * has expired the new answer is not cached.
 */
#include "auth_int.h"
#include "../base/log.h"
#include "../base/map.h"
#include "tidemark/tidemark.h"
#include <curl/curl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    json_t *claims;
    int64_t until_ms;
} entry;

struct tm_introspect {
    tm_introspect_config cfg;
    char *uri, *client_id, *client_secret, *ca_file;
    pthread_mutex_t mu;
    tm_map *cache; /* hex SHA-256 of the token -> entry */
};

static void entry_free(entry *e)
{
    if (e) {
        json_decref(e->claims);
        free(e);
    }
}

static char *dup_or_null(const char *s, int *bad)
{
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        *bad = 1;
    return d;
}

int tm_introspect_new(const tm_introspect_config *cfg, tm_introspect **out)
{
    if (!cfg || !cfg->uri || !cfg->client_id || !out)
        return TIDEMARK_EINVAL;
    tm_introspect *it = calloc(1, sizeof *it);
    if (!it)
        return TIDEMARK_ENOMEM;
    int bad = 0;
    it->cfg = *cfg;
    it->uri = dup_or_null(cfg->uri, &bad);
    it->client_id = dup_or_null(cfg->client_id, &bad);
    it->client_secret = dup_or_null(cfg->client_secret, &bad);
    it->ca_file = dup_or_null(cfg->ca_file, &bad);
    it->cache = tm_map_new();
    pthread_mutex_init(&it->mu, NULL);
    if (bad || !it->cache) {
        tm_introspect_free(it);
        return TIDEMARK_ENOMEM;
    }
    *out = it;
    return 0;
}

static void drop_entry(const char *key, void *val, void *ud)
{
    (void)key;
    (void)ud;
    entry_free(val);
}

void tm_introspect_free(tm_introspect *it)
{
    if (!it)
        return;
    if (it->cache)
        tm_map_each(it->cache, drop_entry, NULL);
    tm_map_free(it->cache);
    pthread_mutex_destroy(&it->mu);
    free(it->uri);
    free(it->client_id);
    free(it->client_secret);
    free(it->ca_file);
    free(it);
}

static int token_key(const char *token, size_t len, char out[65])
{
    unsigned char d[32];
    if (gnutls_hash_fast(GNUTLS_DIG_SHA256, token, len, d) != 0)
        return TIDEMARK_EIO;
    for (size_t i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
    return 0;
}

/* ---- the cache (mu held) --------------------------------------------------- */

typedef struct sweep {
    int64_t now;
    char keys[64][65];
    size_t n;
} sweep;

static void find_expired(const char *key, void *val, void *ud)
{
    sweep *s = ud;
    if (s->n < 64 && ((entry *)val)->until_ms <= s->now)
        snprintf(s->keys[s->n++], 65, "%s", key);
}

static void cache_put(tm_introspect *it, const char *key, json_t *claims, int64_t now,
                      int64_t until)
{
    if (tm_map_count(it->cache) >= TM_AUTH_CACHE_MAX) {
        sweep s = {.now = now};
        tm_map_each(it->cache, find_expired, &s);
        for (size_t i = 0; i < s.n; i++)
            entry_free(tm_map_del(it->cache, s.keys[i]));
        if (tm_map_count(it->cache) >= TM_AUTH_CACHE_MAX)
            return;
    }
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return; /* not cached: the next check asks again */
    e->claims = json_incref(claims);
    e->until_ms = until;
    entry_free(tm_map_del(it->cache, key));
    if (tm_map_put(it->cache, key, e) != 0)
        entry_free(e);
}

static json_t *cache_get(tm_introspect *it, const char *key, int64_t now)
{
    entry *e = tm_map_get(it->cache, key);
    if (!e)
        return NULL;
    if (e->until_ms > now)
        return json_incref(e->claims);
    entry_free(tm_map_del(it->cache, key));
    return NULL;
}

/* ---- asking ----------------------------------------------------------------- */

/* OUT *answer (the parsed JSON object). TIDEMARK_EIO: no usable answer. */
static int ask(tm_introspect *it, const char *token, size_t len, json_t **answer)
{
    CURL *e = curl_easy_init();
    char *esc = e ? curl_easy_escape(e, token, (int)len) : NULL;
    char *form = esc ? malloc(strlen(esc) + 48) : NULL;
    if (e)
        curl_easy_cleanup(e);
    if (!form) {
        curl_free(esc);
        return TIDEMARK_ENOMEM;
    }
    sprintf(form, "token=%s&token_type_hint=access_token", esc);
    curl_free(esc);
    tm_fetch_req req = {.url = it->uri, .ca_file = it->ca_file, .timeout_ms = it->cfg.timeout_ms,
                        .max_bytes = TM_AUTH_INTROSPECT_MAX_BYTES, .form = form,
                        .user = it->client_id, .pass = it->client_secret};
    char *body = NULL;
    size_t blen = 0;
    long status = 0;
    int rc = tm_fetch(&req, &body, &blen, &status);
    memset(form, 0, strlen(form)); /* the token */
    free(form);
    if (rc)
        return rc == TIDEMARK_ENOMEM ? rc : TIDEMARK_EIO;
    *answer = status == 200 ? json_loadb(body, blen, JSON_REJECT_DUPLICATES, NULL) : NULL;
    free(body);
    if (!json_is_object(*answer)) {
        TM_WARN("auth: the introspection endpoint %s gave no usable answer (HTTP %ld)", it->uri,
                status);
        json_decref(*answer);
        return TIDEMARK_EIO;
    }
    return 0;
}

int tm_introspect_check(tm_introspect *it, const char *token, size_t len, int64_t now_ms,
                        json_t **claims)
{
    if (!it || !token || !claims)
        return TIDEMARK_EINVAL;
    char key[65];
    int rc = token_key(token, len, key);
    if (rc)
        return rc;
    pthread_mutex_lock(&it->mu);
    *claims = cache_get(it, key, now_ms);
    pthread_mutex_unlock(&it->mu);
    if (*claims)
        return 0;
    json_t *a = NULL;
    if ((rc = ask(it, token, len, &a)) != 0)
        return rc;
    if (!json_is_true(json_object_get(a, "active"))) {
        json_decref(a);
        return TIDEMARK_ENOTFOUND;
    }
    int64_t until = now_ms + it->cfg.cache_ms;
    const json_t *exp = json_object_get(a, "exp");
    if (json_is_number(exp) && json_number_value(exp) * 1000.0 < (double)until)
        until = (int64_t)(json_number_value(exp) * 1000.0);
    pthread_mutex_lock(&it->mu);
    if (until > now_ms)
        cache_put(it, key, a, now_ms, until);
    pthread_mutex_unlock(&it->mu);
    *claims = a;
    return 0;
}
