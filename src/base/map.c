/* map.c - open-addressing hash map with linear probing and tombstones. */
#include "map.h"
#include "tidemark/tidemark.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TOMB ((char *)1)

struct tm_map {
    char **keys;
    void **vals;
    size_t cap;   /* power of two */
    size_t count; /* live entries */
    size_t used;  /* live + tombstones */
};

uint64_t tm_str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 1099511628211ULL;
    }
    return h;
}

tm_map *tm_map_new(void)
{
    tm_map *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->cap = 16;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->vals = calloc(m->cap, sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        free(m);
        return NULL;
    }
    return m;
}

void tm_map_free(tm_map *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] && m->keys[i] != TOMB)
            free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    free(m);
}

static size_t find(const tm_map *m, const char *key, int *found)
{
    size_t mask = m->cap - 1, i = tm_str_hash(key) & mask, tomb = SIZE_MAX;
    for (;;) {
        char *k = m->keys[i];
        if (!k) {
            *found = 0;
            return tomb != SIZE_MAX ? tomb : i;
        }
        if (k == TOMB) {
            if (tomb == SIZE_MAX)
                tomb = i;
        } else if (strcmp(k, key) == 0) {
            *found = 1;
            return i;
        }
        i = (i + 1) & mask;
    }
}

static int rehash(tm_map *m, size_t cap)
{
    char **ok = m->keys;
    void **ov = m->vals;
    size_t ocap = m->cap;
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = calloc(cap, sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        m->keys = ok;
        m->vals = ov;
        return TIDEMARK_ENOMEM;
    }
    m->cap = cap;
    m->used = m->count;
    for (size_t i = 0; i < ocap; i++) {
        if (ok[i] && ok[i] != TOMB) {
            int f;
            size_t j = find(m, ok[i], &f);
            m->keys[j] = ok[i];
            m->vals[j] = ov[i];
        }
    }
    free(ok);
    free(ov);
    return 0;
}

int tm_map_put(tm_map *m, const char *key, void *val)
{
    if ((m->used + 1) * 4 >= m->cap * 3) {
        size_t cap = m->count * 2 >= m->cap / 2 ? m->cap * 2 : m->cap;
        int rc = rehash(m, cap);
        if (rc)
            return rc;
    }
    int f;
    size_t i = find(m, key, &f);
    if (f) {
        m->vals[i] = val;
        return 0;
    }
    char *k = strdup(key);
    if (!k)
        return TIDEMARK_ENOMEM;
    if (!m->keys[i])
        m->used++;
    m->keys[i] = k;
    m->vals[i] = val;
    m->count++;
    return 0;
}

void *tm_map_get(const tm_map *m, const char *key)
{
    int f;
    size_t i = find(m, key, &f);
    return f ? m->vals[i] : NULL;
}

void *tm_map_del(tm_map *m, const char *key)
{
    int f;
    size_t i = find(m, key, &f);
    if (!f)
        return NULL;
    void *v = m->vals[i];
    free(m->keys[i]);
    m->keys[i] = TOMB;
    m->vals[i] = NULL;
    m->count--;
    return v;
}

size_t tm_map_count(const tm_map *m) { return m->count; }

void tm_map_each(const tm_map *m, void (*fn)(const char *, void *, void *), void *ud)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] && m->keys[i] != TOMB)
            fn(m->keys[i], m->vals[i], ud);
}
