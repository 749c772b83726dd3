/*
 * scope.c - which scopes a request needs, and whether a token's cover them.
 *
 * Needed = the base scopes, plus the rule of "method:<method>", plus for
 * tools/call the rule of "tool:<name>" (or of "tool:*" when the tool has no
 * rule of its own). A token covers them when its scopes, closed under the
 * "BROAD=NARROW ..." implications (transitively), hold each one.
 */
#include "auth_int.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>

/* One configured list: base + a method's + a tool's always fit in
 * TM_AUTH_SCOPE_MAX with their separators. */
#define TM_SCOPE_LIST_MAX 300

typedef struct rule {
    char *key, *val;
} rule;

struct tm_scopes {
    char *base;
    rule *rules, *implies;
    size_t nrules, nimplies;
};

/* RFC 6749 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ). */
int tm_scope_list_ok(const char *s)
{
    if (!s)
        return 0;
    size_t words = 0;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == ' ') {
            if (p == s || p[1] == ' ' || p[1] == '\0')
                return 0;
            continue;
        }
        if (c < 0x21 || c == 0x22 || c == 0x5c || c > 0x7e)
            return 0;
        if (p == s || p[-1] == ' ')
            words++;
    }
    return words <= TM_AUTH_WORDS_MAX;
}

/* Does the space-separated list hold word w (of length n)? */
static int has(const char *list, const char *w, size_t n)
{
    for (const char *p = list; p && *p;) {
        size_t l = strcspn(p, " ");
        if (l == n && memcmp(p, w, n) == 0)
            return 1;
        p += l;
        while (*p == ' ')
            p++;
    }
    return 0;
}

/* Append the words of add missing from out[n]. */
static int merge(char *out, size_t n, const char *add)
{
    size_t used = strlen(out);
    for (const char *p = add; p && *p;) {
        size_t l = strcspn(p, " ");
        if (l && !has(out, p, l)) {
            if (used + (used ? 1 : 0) + l + 1 > n)
                return TIDEMARK_ERANGE;
            if (used)
                out[used++] = ' ';
            memcpy(out + used, p, l);
            used += l;
            out[used] = '\0';
        }
        p += l;
        while (*p == ' ')
            p++;
    }
    return 0;
}

static int parse_rules(const char *const *in, rule **out, size_t *n, int keyed)
{
    size_t c = 0;
    while (in && in[c])
        c++;
    *out = c ? calloc(c, sizeof **out) : NULL;
    if (c && !*out)
        return TIDEMARK_ENOMEM;
    for (*n = 0; *n < c; (*n)++) {
        const char *eq = strchr(in[*n], '=');
        if (!eq || eq == in[*n] || !tm_scope_list_ok(eq + 1) || strlen(eq + 1) > TM_SCOPE_LIST_MAX)
            return TIDEMARK_EINVAL;
        rule *r = &(*out)[*n];
        r->key = strndup(in[*n], (size_t)(eq - in[*n]));
        r->val = strdup(eq + 1);
        if (!r->key || !r->val) {
            (*n)++;
            return TIDEMARK_ENOMEM;
        }
        if (keyed && strncmp(r->key, "tool:", 5) != 0 && strncmp(r->key, "method:", 7) != 0) {
            (*n)++;
            return TIDEMARK_EINVAL;
        }
        if (!keyed && (!tm_scope_list_ok(r->key) || strchr(r->key, ' '))) {
            (*n)++;
            return TIDEMARK_EINVAL;
        }
    }
    return 0;
}

static void free_rules(rule *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(r[i].key);
        free(r[i].val);
    }
    free(r);
}

void tm_scopes_free(tm_scopes *s)
{
    if (!s)
        return;
    free(s->base);
    free_rules(s->rules, s->nrules);
    free_rules(s->implies, s->nimplies);
    free(s);
}

int tm_scopes_new(const char *base, const char *const *rules, const char *const *implies,
                  tm_scopes **out)
{
    if (!out || (base && (!tm_scope_list_ok(base) || strlen(base) > TM_SCOPE_LIST_MAX)))
        return TIDEMARK_EINVAL;
    tm_scopes *s = calloc(1, sizeof *s);
    if (!s)
        return TIDEMARK_ENOMEM;
    int rc = (s->base = strdup(base ? base : "")) ? 0 : TIDEMARK_ENOMEM;
    if (!rc)
        rc = parse_rules(rules, &s->rules, &s->nrules, 1);
    if (!rc)
        rc = parse_rules(implies, &s->implies, &s->nimplies, 0);
    if (rc) {
        tm_scopes_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

static const char *rule_for(const tm_scopes *s, const char *prefix, const char *name)
{
    size_t pl = strlen(prefix);
    for (size_t i = 0; i < s->nrules; i++)
        if (strncmp(s->rules[i].key, prefix, pl) == 0 && strcmp(s->rules[i].key + pl, name) == 0)
            return s->rules[i].val;
    return NULL;
}

int tm_scopes_required(const tm_scopes *s, const char *method, const char *tool, char *out,
                       size_t n)
{
    if (!s || !out || !n)
        return TIDEMARK_EINVAL;
    out[0] = '\0';
    int rc = merge(out, n, s->base);
    if (!rc && method)
        rc = merge(out, n, rule_for(s, "method:", method));
    if (!rc && method && tool && strcmp(method, "tools/call") == 0) {
        const char *t = rule_for(s, "tool:", tool);
        rc = merge(out, n, t ? t : rule_for(s, "tool:", "*"));
    }
    return rc;
}

int tm_scopes_cover(const tm_scopes *s, const char *required, const char *granted, int *ok)
{
    if (!s || !required || !granted || !ok)
        return TIDEMARK_EINVAL;
    char have[TM_AUTH_SCOPE_MAX * 2];
    have[0] = '\0';
    int rc = merge(have, sizeof have, granted);
    /* Close under the implications: each pass adds at least one rule's
     * words or stops, so nimplies + 1 passes are enough. */
    for (size_t pass = 0, grew = 1; !rc && grew && pass <= s->nimplies; pass++) {
        size_t before = strlen(have);
        for (size_t i = 0; !rc && i < s->nimplies; i++)
            if (has(have, s->implies[i].key, strlen(s->implies[i].key)))
                rc = merge(have, sizeof have, s->implies[i].val);
        grew = strlen(have) != before;
    }
    if (rc)
        return rc;
    *ok = 1;
    for (const char *p = required; *p;) {
        size_t l = strcspn(p, " ");
        if (l && !has(have, p, l))
            *ok = 0;
        p += l;
        while (*p == ' ')
            p++;
    }
    return 0;
}
