/*
 * cache.c - results of the 2026-07-28 era's cacheable reads (discover, the
 * lists, resources/read), kept until their ttlMs, keyed by method and
 * params without _meta; cleared when a list changes (messages.c) or the
 * tools are learned again (modern.c).
 */
#include "client_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cacheable(const char *method)
{
    static const char *const m[] = {"server/discover", "tools/list", "prompts/list",
                                    "resources/list", "resources/templates/list",
                                    "resources/read", NULL};
    for (int i = 0; m[i]; i++)
        if (!strcmp(method, m[i]))
            return 1;
    return 0;
}

/* method and params without their _meta, as one string (malloc'd). */
static char *cache_key(const char *method, json_t *params)
{
    json_t *p = params ? json_deep_copy(params) : json_object();
    if (!p)
        return NULL;
    (void)json_object_del(p, "_meta"); /* -1 only when it was not there */
    char *t = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(p);
    size_t n = strlen(method) + (t ? strlen(t) : 0) + 2;
    char *k = t ? malloc(n) : NULL;
    if (k)
        snprintf(k, n, "%s %s", method, t);
    free(t);
    return k;
}

json_t *tm_cache_get(tidemark_client_t *c, const char *method, json_t *params)
{
    if (c->cfg.no_cache || !cacheable(method))
        return NULL;
    char *k = cache_key(method, params);
    if (!k)
        return NULL;
    json_t *hit = NULL;
    pthread_mutex_lock(&c->mu);
    json_t *e = json_object_get(c->cache, k);
    if (e && json_integer_value(json_object_get(e, "until")) > tm_now_ms())
        hit = json_deep_copy(json_object_get(e, "result"));
    else if (e)
        (void)json_object_del(c->cache, k); /* expired: it was there */
    pthread_mutex_unlock(&c->mu);
    free(k);
    return hit;
}

void tm_cache_put(tidemark_client_t *c, const char *method, json_t *params, json_t *result)
{
    json_t *ttl = json_object_get(result, "ttlMs");
    if (c->cfg.no_cache || !cacheable(method) || !json_is_integer(ttl) ||
        json_integer_value(ttl) <= 0)
        return;
    char *k = cache_key(method, params);
    json_t *e = json_pack("{s:I,s:O,s:O?}", "until",
                          (json_int_t)(tm_now_ms() + json_integer_value(ttl)), "result", result,
                          "scope", json_object_get(result, "cacheScope"));
    pthread_mutex_lock(&c->mu);
    if (!c->cache)
        c->cache = json_object();
    int rc = k && e && c->cache ? json_object_set(c->cache, k, e) : TIDEMARK_ENOMEM;
    pthread_mutex_unlock(&c->mu);
    if (rc)
        TM_DEBUG("client: a %s result could not be cached", method);
    json_decref(e);
    free(k);
}

void tm_cache_clear(tidemark_client_t *c)
{
    pthread_mutex_lock(&c->mu);
    if (c->cache)
        (void)json_object_clear(c->cache); /* fails only for a non-object */
    pthread_mutex_unlock(&c->mu);
}
