/*
 * fetch.c - one bounded exchange with the issuer over libcurl (easy
 * interface, on the calling thread): no redirects, http and https only,
 * servers verified (the system's CAs or ca_file), a deadline, a size bound.
 * Nothing of the request (the token in an introspection form, the client
 * secret) is logged.
 */
#include "auth_int.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <curl/curl.h>
#include <pthread.h>
#include <rhonabwy.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int global_rc = 0;

static void global_init(void)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || r_global_init() != RHN_OK)
        global_rc = TIDEMARK_EIO;
}

int tm_auth_global_init(void)
{
    if (pthread_once(&once, global_init) != 0)
        return TIDEMARK_EIO;
    return global_rc;
}

typedef struct sink {
    char *buf;
    size_t len, max;
    int over;
} sink;

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    sink *s = ud;
    size_t add = size * n;
    if (add > s->max - s->len) {
        s->over = 1;
        return 0; /* aborts the transfer */
    }
    char *nb = realloc(s->buf, s->len + add + 1);
    if (!nb)
        return 0;
    s->buf = nb;
    memcpy(s->buf + s->len, p, add);
    s->len += add;
    s->buf[s->len] = '\0';
    return add;
}

/* RFC 6749 2.3.1: client_id and secret are form-urlencoded before Basic. */
static int set_basic(CURL *e, const char *user, const char *pass)
{
    char *u = curl_easy_escape(e, user, 0), *p = curl_easy_escape(e, pass ? pass : "", 0);
    int rc = u && p ? 0 : TIDEMARK_ENOMEM;
    if (!rc && (curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC) != CURLE_OK ||
                curl_easy_setopt(e, CURLOPT_USERNAME, u) != CURLE_OK ||
                curl_easy_setopt(e, CURLOPT_PASSWORD, p) != CURLE_OK))
        rc = TIDEMARK_EIO;
    curl_free(u);
    curl_free(p);
    return rc;
}

static int setup(CURL *e, const tm_fetch_req *req, sink *s, struct curl_slist *hdrs)
{
    int bad = 0;
    bad |= curl_easy_setopt(e, CURLOPT_URL, req->url) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)req->timeout_ms) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)req->timeout_ms) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, s) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs) != CURLE_OK;
    if (req->ca_file)
        bad |= curl_easy_setopt(e, CURLOPT_CAINFO, req->ca_file) != CURLE_OK;
    if (req->form) {
        bad |= curl_easy_setopt(e, CURLOPT_POST, 1L) != CURLE_OK;
        bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->form) != CURLE_OK;
    }
    if (bad)
        return TIDEMARK_EIO;
    return req->user ? set_basic(e, req->user, req->pass) : 0;
}

int tm_fetch(const tm_fetch_req *req, char **body, size_t *len, long *status)
{
    if (!req || !req->url || !body || !len || !status)
        return TIDEMARK_EINVAL;
    int rc = tm_auth_global_init();
    if (rc)
        return rc;
    CURL *e = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");
    sink s = {.max = req->max_bytes};
    rc = e && h ? setup(e, req, &s, h) : TIDEMARK_ENOMEM;
    if (!rc) {
        CURLcode cc = curl_easy_perform(e);
        if (s.over)
            rc = TIDEMARK_ERANGE;
        else if (cc != CURLE_OK) {
            TM_WARN("auth: cannot reach the issuer at %s: %s", req->url, curl_easy_strerror(cc));
            rc = TIDEMARK_EIO;
        } else if (curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status) != CURLE_OK)
            rc = TIDEMARK_EIO;
    }
    if (!rc && !s.buf && !(s.buf = calloc(1, 1)))
        rc = TIDEMARK_ENOMEM;
    if (rc)
        free(s.buf);
    else {
        *body = s.buf;
        *len = s.len;
    }
    curl_slist_free_all(h);
    if (e)
        curl_easy_cleanup(e);
    return rc;
}
