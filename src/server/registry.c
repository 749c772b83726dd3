/* registry.c - ordered registries with copy-out lookups and pagination. */
#include "registry.h"
#include "tidemark/tidemark.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct item {
    char *key;
    json_t *desc;
    void *fn, *ud;
    unsigned hints;
} item;

typedef struct list {
    item *v;
    size_t n, cap;
} list;

struct tm_registry {
    pthread_mutex_t mu;
    list l[4];
};

tm_registry *tm_registry_new(void)
{
    tm_registry *r = calloc(1, sizeof *r);
    if (r)
        pthread_mutex_init(&r->mu, NULL);
    return r;
}

void tm_registry_free(tm_registry *r)
{
    if (!r)
        return;
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < r->l[k].n; i++) {
            free(r->l[k].v[i].key);
            json_decref(r->l[k].v[i].desc);
        }
        free(r->l[k].v);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static long find(list *l, const char *key)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].key, key) == 0)
            return (long)i;
    return -1;
}

int tm_registry_put(tm_registry *r, tm_reg_kind k, const char *key, json_t *desc, void *fn,
                    void *ud, unsigned hints)
{
    char *kc = strdup(key);
    if (!kc || !desc) {
        free(kc);
        json_decref(desc);
        return TIDEMARK_ENOMEM;
    }
    pthread_mutex_lock(&r->mu);
    list *l = &r->l[k];
    long i = find(l, key);
    if (i >= 0) {
        free(l->v[i].key);
        json_decref(l->v[i].desc);
    } else {
        if (l->n == l->cap) {
            size_t cap = l->cap ? l->cap * 2 : 8;
            item *v = realloc(l->v, cap * sizeof *v);
            if (!v) {
                pthread_mutex_unlock(&r->mu);
                free(kc);
                json_decref(desc);
                return TIDEMARK_ENOMEM;
            }
            l->v = v;
            l->cap = cap;
        }
        i = (long)l->n++;
    }
    l->v[i] = (item){kc, desc, fn, ud, hints};
    pthread_mutex_unlock(&r->mu);
    return 0;
}

int tm_registry_remove(tm_registry *r, tm_reg_kind k, const char *key)
{
    pthread_mutex_lock(&r->mu);
    list *l = &r->l[k];
    long i = find(l, key);
    if (i >= 0) {
        free(l->v[i].key);
        json_decref(l->v[i].desc);
        memmove(&l->v[i], &l->v[i + 1], (l->n - (size_t)i - 1) * sizeof *l->v);
        l->n--;
    }
    pthread_mutex_unlock(&r->mu);
    return i >= 0 ? 0 : TIDEMARK_ENOTFOUND;
}

static void copy_out(const item *it, tm_reg_entry *out)
{
    out->desc = json_incref(it->desc);
    out->fn = it->fn;
    out->ud = it->ud;
    out->hints = it->hints;
}

int tm_registry_get(tm_registry *r, tm_reg_kind k, const char *key, tm_reg_entry *out)
{
    pthread_mutex_lock(&r->mu);
    long i = find(&r->l[k], key);
    if (i >= 0)
        copy_out(&r->l[k].v[i], out);
    pthread_mutex_unlock(&r->mu);
    return i >= 0 ? 0 : TIDEMARK_ENOTFOUND;
}

int tm_uri_template_match(const char *t, const char *u)
{
    while (*t) {
        if (*t == '{') {
            const char *end = strchr(t, '}');
            if (!end)
                return 0;
            int any = (t[1] == '+' || t[1] == '#' || t[1] == '/');
            t = end + 1;
            /* Match one or more characters, stopping where the rest of the
             * template can match (backtracking over the candidates). */
            for (const char *p = u + 1; ; p++) {
                if (p > u + strlen(u))
                    return 0;
                int ok = 1;
                for (const char *q = u; q < p; q++)
                    if (!any && (*q == '/' || *q == '?' || *q == '#'))
                        ok = 0;
                if (!ok)
                    return 0;
                if (tm_uri_template_match(t, p))
                    return 1;
                if (!*p)
                    return 0;
            }
        }
        if (*t != *u)
            return 0;
        t++;
        u++;
    }
    return *u == '\0';
}

int tm_registry_match_template(tm_registry *r, const char *uri, tm_reg_entry *out)
{
    int rc = TIDEMARK_ENOTFOUND;
    pthread_mutex_lock(&r->mu);
    list *l = &r->l[TM_REG_TEMPLATE];
    for (size_t i = 0; i < l->n; i++)
        if (tm_uri_template_match(l->v[i].key, uri)) {
            copy_out(&l->v[i], out);
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int tm_registry_page(tm_registry *r, tm_reg_kind k, const char *field, const char *cursor,
                     unsigned page_size, json_t **page)
{
    size_t start = 0;
    if (cursor) {
        char *end;
        unsigned long long v = strncmp(cursor, "o:", 2) == 0 ? strtoull(cursor + 2, &end, 10) : 0;
        if (strncmp(cursor, "o:", 2) != 0 || *end || end == cursor + 2)
            return TIDEMARK_EINVAL;
        start = (size_t)v;
    }
    if (!page_size)
        page_size = 100;
    json_t *arr = json_array();
    json_t *res = json_object();
    pthread_mutex_lock(&r->mu);
    list *l = &r->l[k];
    if (start > l->n) {
        pthread_mutex_unlock(&r->mu);
        json_decref(arr);
        json_decref(res);
        return TIDEMARK_EINVAL;
    }
    size_t end = start + page_size < l->n ? start + page_size : l->n;
    for (size_t i = start; i < end; i++)
        json_array_append(arr, l->v[i].desc);
    int more = end < l->n;
    pthread_mutex_unlock(&r->mu);
    json_object_set_new(res, field, arr);
    if (more) {
        char c[32];
        snprintf(c, sizeof c, "o:%zu", end);
        json_object_set_new(res, "nextCursor", json_string(c));
    }
    *page = res;
    return 0;
}
