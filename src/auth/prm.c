/*
 * prm.c - OAuth 2.0 Protected Resource Metadata (RFC 9728) and the
 * WWW-Authenticate challenges (RFC 6750 3, RFC 9728 5.1).
 *
 * For resource https://host:port/base/mcp the document is served at
 * /.well-known/oauth-protected-resource/base/mcp (the path-suffixed form,
 * which the challenges name) and at /.well-known/oauth-protected-resource.
 */
#include "auth_int.h"
#include "tidemark/tidemark.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WELL_KNOWN "/.well-known/oauth-protected-resource"

/* Only characters a quoted-string can hold as is, nothing a header could
 * be split on. */
static int header_safe(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x21 || *p > 0x7e || *p == '"' || *p == '\\')
            return 0;
    return 1;
}

/* Split an http(s) URL: OUT *authority_end (offset of the path). */
static int split(const char *url, size_t *path_at)
{
    if (!url || !header_safe(url) || strchr(url, '?') || strchr(url, '#'))
        return TIDEMARK_EINVAL;
    size_t s = strncmp(url, "https://", 8) == 0 ? 8 : strncmp(url, "http://", 7) == 0 ? 7 : 0;
    if (!s || !url[s] || url[s] == '/')
        return TIDEMARK_EINVAL;
    *path_at = s + strcspn(url + s, "/");
    return 0;
}

/* The resource's path without a trailing slash ("" for none). */
static size_t path_len(const char *url, size_t at)
{
    size_t n = strlen(url + at);
    while (n && url[at + n - 1] == '/')
        n--;
    return n;
}

int tm_prm_url(const char *resource, char **url)
{
    size_t at;
    if (!url || split(resource, &at) != 0)
        return TIDEMARK_EINVAL;
    size_t pl = path_len(resource, at), n = at + sizeof WELL_KNOWN + pl;
    if (!(*url = malloc(n)))
        return TIDEMARK_ENOMEM;
    snprintf(*url, n, "%.*s%s%.*s", (int)at, resource, WELL_KNOWN, (int)pl, resource + at);
    return 0;
}

int tm_prm_paths(const char *resource, char **root, char **suffixed)
{
    size_t at;
    if (!root || !suffixed || split(resource, &at) != 0)
        return TIDEMARK_EINVAL;
    size_t pl = path_len(resource, at);
    *root = strdup(WELL_KNOWN);
    *suffixed = malloc(sizeof WELL_KNOWN + pl);
    if (!*root || !*suffixed) {
        free(*root);
        free(*suffixed);
        return TIDEMARK_ENOMEM;
    }
    snprintf(*suffixed, sizeof WELL_KNOWN + pl, "%s%.*s", WELL_KNOWN, (int)pl, resource + at);
    return 0;
}

static int add_words(json_t *arr, const char *list)
{
    for (const char *p = list; p && *p;) {
        size_t l = strcspn(p, " ");
        if (l && json_array_append_new(arr, json_stringn(p, l)) != 0)
            return TIDEMARK_ENOMEM;
        p += l;
        while (*p == ' ')
            p++;
    }
    return 0;
}

int tm_prm_document(const char *resource, const char *issuer, const char *scopes_supported,
                    const char *resource_name, char **json)
{
    if (!resource || !issuer || !json)
        return TIDEMARK_EINVAL;
    json_t *doc = json_object(), *as = json_array(), *bm = json_array(), *sc = json_array();
    int rc = doc && as && bm && sc ? 0 : TIDEMARK_ENOMEM;
    rc = rc ? rc : json_object_set_new(doc, "resource", json_string(resource)) ? TIDEMARK_ENOMEM : 0;
    rc = rc ? rc : json_array_append_new(as, json_string(issuer)) ? TIDEMARK_ENOMEM : 0;
    rc = rc ? rc : json_array_append_new(bm, json_string("header")) ? TIDEMARK_ENOMEM : 0;
    rc = rc ? rc : add_words(sc, scopes_supported);
    rc = rc ? rc : json_object_set(doc, "authorization_servers", as) ? TIDEMARK_ENOMEM : 0;
    rc = rc ? rc : json_object_set(doc, "bearer_methods_supported", bm) ? TIDEMARK_ENOMEM : 0;
    if (!rc && json_array_size(sc))
        rc = json_object_set(doc, "scopes_supported", sc) ? TIDEMARK_ENOMEM : 0;
    if (!rc && resource_name)
        rc = json_object_set_new(doc, "resource_name", json_string(resource_name)) ? TIDEMARK_ENOMEM
                                                                                   : 0;
    if (!rc && !(*json = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER)))
        rc = TIDEMARK_ENOMEM;
    json_decref(as);
    json_decref(bm);
    json_decref(sc);
    json_decref(doc);
    return rc;
}

int tm_prm_challenge(const char *error, const char *metadata_url, const char *scope, char *out,
                     size_t n)
{
    if (!metadata_url || !out || !n)
        return TIDEMARK_EINVAL;
    int w = snprintf(out, n, "Bearer %s%s%sresource_metadata=\"%s\"%s%s%s", error ? "error=\"" : "",
                     error ? error : "", error ? "\", " : "", metadata_url,
                     scope && *scope ? ", scope=\"" : "", scope && *scope ? scope : "",
                     scope && *scope ? "\"" : "");
    return w < 0 || (size_t)w >= n ? TIDEMARK_ERANGE : 0;
}
