/*
 * oauth_http.c - synchronous HTTP for the authorization flow (the exchange
 * runs on the client's I/O thread; the caller waits for its end), and the
 * small text helpers of OAuth: percent-encoding, queries, challenges,
 * base64url, PKCE (randomness and SHA-256 from GnuTLS).
 */
#include "oauth.h"
#include "../base/clock.h"
#include <ctype.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OA_MAX_BODY ((size_t)1 << 20)

typedef struct oa_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    oa_resp *out;
    tm_buf body;
} oa_wait;

static void w_header_line(void *ud, const char *line, size_t len)
{
    oa_wait *w = ud;
    static const char loc[] = "location:", www[] = "www-authenticate:";
    char **slot = NULL;
    size_t skip = 0;
    if (len > sizeof loc - 1 && strncasecmp(line, loc, sizeof loc - 1) == 0)
        slot = &w->out->location, skip = sizeof loc - 1;
    else if (len > sizeof www - 1 && strncasecmp(line, www, sizeof www - 1) == 0)
        slot = &w->out->www, skip = sizeof www - 1;
    if (!slot)
        return;
    const char *v = line + skip;
    size_t vl = len - skip;
    while (vl && (*v == ' ' || *v == '\t'))
        v++, vl--;
    pthread_mutex_lock(&w->mu);
    if (!*slot)
        *slot = strndup(v, vl);
    pthread_mutex_unlock(&w->mu);
}

static int w_data(void *ud, const char *buf, size_t len)
{
    oa_wait *w = ud;
    pthread_mutex_lock(&w->mu);
    int rc = tm_buf_add(&w->body, buf, len) != 0;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static void w_done(void *ud, int rc, long status, const char *error)
{
    oa_wait *w = ud;
    pthread_mutex_lock(&w->mu);
    w->out->rc = rc;
    w->out->status = status;
    snprintf(w->out->error, sizeof w->out->error, "%s", error ? error : "");
    w->done = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static const tm_hx_cb oa_cb = {
    .on_data = w_data, .on_done = w_done, .on_header_line = w_header_line};

int oa_http(tm_hc *hc, const char *method, const char *url, const char *const *headers,
            const char *body, int timeout_ms, oa_resp *out)
{
    memset(out, 0, sizeof *out);
    oa_wait w = {.out = out};
    if (pthread_mutex_init(&w.mu, NULL) != 0)
        return TIDEMARK_ENOMEM;
    if (tm_cond_init_monotonic(&w.cv) != 0) {
        pthread_mutex_destroy(&w.mu);
        return TIDEMARK_ENOMEM;
    }
    tm_buf_init(&w.body, OA_MAX_BODY);
    tm_hx_req req = {.method = method, .url = url, .headers = headers, .body = body,
                     .body_len = body ? strlen(body) : 0, .timeout_ms = timeout_ms};
    int rc = tm_hc_start(hc, &req, &oa_cb, &w, NULL);
    pthread_mutex_lock(&w.mu);
    while (!rc && !w.done) {
        struct timespec ts = tm_deadline_ms(1000);
        (void)pthread_cond_timedwait(&w.cv, &w.mu, &ts); /* the transport's timeout ends it */
    }
    pthread_mutex_unlock(&w.mu);
    if (!rc)
        rc = out->rc;
    if (tm_buf_add(&w.body, "", 1) == 0) { /* NUL-terminated */
        size_t n = 0;
        out->body = tm_buf_steal(&w.body, &n);
        out->len = n ? n - 1 : 0;
    }
    tm_buf_free(&w.body);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    if (rc && !out->error[0])
        snprintf(out->error, sizeof out->error, "%s", tidemark_strerror(rc));
    return rc;
}

void oa_resp_free(oa_resp *r)
{
    free(r->body);
    free(r->location);
    free(r->www);
    memset(r, 0, sizeof *r);
}

json_t *oa_json(const oa_resp *r)
{
    json_t *v = r->body ? json_loadb(r->body, r->len, 0, NULL) : NULL;
    if (v && !json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

/* ---- WWW-Authenticate ----------------------------------------------------------------- */

/* One auth-param at *p: name into name (lower case), its value (quoted or
 * a token) malloc'd into *value. Returns 0, or -1 at the end. */
static int next_param(const char **pp, char *name, size_t nsz, char **value)
{
    const char *p = *pp;
    while (*p == ' ' || *p == '\t' || *p == ',')
        p++;
    size_t n = 0;
    while (*p && (isalnum((unsigned char)*p) || *p == '_' || *p == '-'))
        name[n < nsz - 1 ? n++ : n] = (char)tolower((unsigned char)*p), p++;
    name[n] = '\0';
    const char *q = p;
    while (*q == ' ')
        q++;
    if (!n || *q != '=') { /* a scheme name (or junk: a word skipped) */
        while (!n && *p && *p != ',' && *p != ' ')
            p++;
        *pp = p;
        *value = NULL;
        return *p || n ? 0 : -1;
    }
    p = q + 1;
    while (*p == ' ')
        p++;
    tm_buf b;
    tm_buf_init(&b, 8192);
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++) {
            if (*p == '\\' && p[1])
                p++;
            if (tm_buf_add(&b, p, 1) != 0)
                break;
        }
        if (*p == '"')
            p++;
    } else {
        const char *s = p;
        while (*p && *p != ',' && *p != ' ')
            p++;
        if (tm_buf_add(&b, s, (size_t)(p - s)) != 0)
            tm_buf_reset(&b);
    }
    int ok = tm_buf_add(&b, "", 1) == 0;
    *value = ok ? tm_buf_steal(&b, NULL) : NULL;
    tm_buf_free(&b);
    *pp = p;
    return 0;
}

void oa_challenge_parse(const char *header, oa_challenge *ch)
{
    memset(ch, 0, sizeof *ch);
    const char *p = header ? header : "";
    char name[64];
    char *v = NULL;
    while (next_param(&p, name, sizeof name, &v) == 0) {
        char **slot = !strcmp(name, "scope")               ? &ch->scope
                      : !strcmp(name, "resource_metadata") ? &ch->resource_metadata
                      : !strcmp(name, "error")             ? &ch->error
                                                           : NULL;
        if (v && slot && !*slot) {
            *slot = v;
            v = NULL;
        }
        free(v);
        v = NULL;
    }
}

void oa_challenge_free(oa_challenge *ch)
{
    free(ch->scope);
    free(ch->resource_metadata);
    free(ch->error);
    memset(ch, 0, sizeof *ch);
}

/* ---- URLs and forms ------------------------------------------------------------------- */

char *oa_urlencode(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(n * 3 + 1), *o = out;
    if (!out)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~')
            *o++ = (char)*p;
        else
            o += sprintf(o, "%%%02X", *p);
    }
    *o = '\0';
    return out;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = tolower(ch);
    return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

static char *urldecode(const char *s, size_t n)
{
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int h, l;
        if (s[i] == '+')
            *o++ = ' ';
        else if (s[i] == '%' && i + 2 < n && (h = hexval(s[i + 1])) >= 0 &&
                 (l = hexval(s[i + 2])) >= 0)
            *o++ = (char)(h * 16 + l), i += 2;
        else
            *o++ = s[i];
    }
    *o = '\0';
    return out;
}

char *oa_query_get(const char *url, const char *name, int *present)
{
    if (present)
        *present = 0;
    const char *q = strchr(url, '?');
    q = q ? q + 1 : url;
    size_t nl = strlen(name);
    while (*q && *q != '#') {
        const char *end = q + strcspn(q, "&#");
        const char *eq = memchr(q, '=', (size_t)(end - q));
        size_t kl = (size_t)((eq ? eq : end) - q);
        if (kl == nl && strncmp(q, name, nl) == 0) {
            if (present)
                *present = 1;
            return eq ? urldecode(eq + 1, (size_t)(end - eq - 1)) : strdup("");
        }
        q = *end == '&' ? end + 1 : end;
    }
    return NULL;
}

static char *b64(const unsigned char *p, size_t n, const char *t, int pad);

char *oa_b64url(const unsigned char *p, size_t n)
{
    return b64(p, n, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", 0);
}

char *oa_b64(const unsigned char *p, size_t n)
{
    return b64(p, n, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", 1);
}

static char *b64(const unsigned char *p, size_t n, const char *t, int pad)
{
    char *out = malloc(n * 4 / 3 + 4), *o = out;
    if (!out)
        return NULL;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        *o++ = t[v >> 18], *o++ = t[(v >> 12) & 63], *o++ = t[(v >> 6) & 63], *o++ = t[v & 63];
    }
    if (i < n) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0);
        *o++ = t[v >> 18], *o++ = t[(v >> 12) & 63];
        if (i + 1 < n)
            *o++ = t[(v >> 6) & 63];
        else if (pad)
            *o++ = '=';
        if (pad)
            *o++ = '=';
    }
    *o = '\0';
    return out;
}

char *oa_random(size_t n)
{
    unsigned char raw[64];
    if (n > sizeof raw || gnutls_rnd(GNUTLS_RND_KEY, raw, n) != 0)
        return NULL;
    return oa_b64url(raw, n);
}

char *oa_s256(const char *verifier)
{
    unsigned char d[32];
    if (gnutls_hash_fast(GNUTLS_DIG_SHA256, verifier, strlen(verifier), d) != 0)
        return NULL;
    return oa_b64url(d, sizeof d);
}

char *oa_origin(const char *url)
{
    const char *s = strstr(url, "://");
    if (!s)
        return NULL;
    s += 3;
    size_t n = (size_t)(s - url) + strcspn(s, "/?#");
    return strndup(url, n);
}

const char *oa_path(const char *url)
{
    const char *s = strstr(url, "://");
    if (!s)
        return "";
    s += 3;
    s += strcspn(s, "/?#");
    return *s == '/' ? s : "";
}
