/* http_client.c - libcurl multi on one I/O thread; see http_client.h. */
#include "http_client.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <ctype.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct tm_hx {
    uint64_t xid;
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    tm_hx_cb cb;
    void *ud;
    char session_id[256];
    char errbuf[CURL_ERROR_SIZE];
    int headers_sent;
    int cancelled;
    /* Asked by other threads, under hc->mu; done by the I/O thread. */
    int cancel_req;
    int unpause_req;
    struct tm_hx *next; /* live list */
};

/* Exchanges handed to the I/O thread, not yet added to the multi handle. */
typedef struct cmd {
    tm_hx *x;
    struct cmd *next;
} cmd;

struct tm_hc {
    CURLM *multi;
    char *ca_file, *cert_file, *key_file; /* TLS (tm_hc_new_tls); NULL: defaults */
    pthread_t thread;
    pthread_mutex_t mu;
    cmd *cmds, *cmds_tail;
    int stopping;
    int requests; /* live exchanges with a cancel or unpause request */
    tm_hx *live;
    uint64_t next_xid;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_OK;
static void global_init(void) { global_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static void hx_headers(tm_hx *x)
{
    if (x->headers_sent)
        return;
    x->headers_sent = 1;
    long status = 0;
    char *ctype = NULL;
    if (curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK)
        status = 0;
    if (curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ctype) != CURLE_OK)
        ctype = NULL;
    if (x->cb.on_headers)
        x->cb.on_headers(x->ud, status, ctype, x->session_id[0] ? x->session_id : NULL);
}

static size_t on_write(char *p, size_t sz, size_t n, void *ud)
{
    tm_hx *x = ud;
    size_t len = sz * n;
    if (x->cancelled)
        return 0;
    hx_headers(x);
    if (x->cb.on_data) {
        int rc = x->cb.on_data(x->ud, p, len);
        if (rc == TM_HX_PAUSE)
            return CURL_WRITEFUNC_PAUSE; /* offered again after tm_hc_unpause */
        if (rc != 0)
            return 0; /* aborts the transfer */
    }
    return len;
}

static int on_prereq(void *ud, char *conn_primary_ip, char *conn_local_ip, int conn_primary_port,
                     int conn_local_port)
{
    (void)conn_primary_ip, (void)conn_local_ip, (void)conn_primary_port, (void)conn_local_port;
    tm_hx *x = ud;
    if (x->cb.on_sent)
        x->cb.on_sent(x->ud);
    return CURL_PREREQFUNC_OK;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    tm_hx *x = ud;
    size_t len = sz * n;
    static const char name[] = "mcp-session-id:";
    if (x->cb.on_header_line && len > 2 && memchr(p, ':', len)) {
        size_t l = len;
        while (l && (p[l - 1] == '\r' || p[l - 1] == '\n'))
            l--;
        x->cb.on_header_line(x->ud, p, l);
    }
    if (len > sizeof name - 1 && strncasecmp(p, name, sizeof name - 1) == 0) {
        const char *v = p + sizeof name - 1;
        size_t vl = len - (sizeof name - 1);
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && isspace((unsigned char)v[vl - 1]))
            vl--;
        if (vl < sizeof x->session_id) {
            memcpy(x->session_id, v, vl);
            x->session_id[vl] = '\0';
        }
    }
    return len;
}

static void hx_free(tm_hx *x)
{
    if (x->easy)
        curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->headers);
    free(x->body);
    free(x);
}

static void live_remove(tm_hc *hc, tm_hx *x)
{
    for (tm_hx **pp = &hc->live; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            return;
        }
}

/* What went wrong with x, for people. A refused or unreachable connection
 * is named by the system's own words ("Connection refused"). */
static void describe(tm_hx *x, int res, char *out, size_t n)
{
    long os = 0;
    if ((res == CURLE_COULDNT_CONNECT || res == CURLE_OPERATION_TIMEDOUT) &&
        curl_easy_getinfo(x->easy, CURLINFO_OS_ERRNO, &os) == CURLE_OK && os > 0) {
        char sys[128];
        const char *s = strerror_r((int)os, sys, sizeof sys);
        snprintf(out, n, "%s", s);
    } else if (x->errbuf[0]) {
        snprintf(out, n, "%s", x->errbuf);
    } else {
        snprintf(out, n, "%s", curl_easy_strerror((CURLcode)res));
    }
}

/* End an exchange on the I/O thread: callbacks, then free. res: curl's
 * result (CURLE_OK, or why it failed), for the error text. */
static void hx_finish(tm_hc *hc, tm_hx *x, int rc, int res)
{
    long status = 0;
    if (curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK)
        status = 0;
    if (rc == 0)
        hx_headers(x);
    CURLMcode mrc = curl_multi_remove_handle(hc->multi, x->easy);
    if (mrc != CURLM_OK)
        TM_WARN("http client: removing a transfer failed: %s", curl_multi_strerror(mrc));
    pthread_mutex_lock(&hc->mu);
    live_remove(hc, x);
    if (x->cancel_req || x->unpause_req)
        hc->requests--;
    pthread_mutex_unlock(&hc->mu);
    char why[CURL_ERROR_SIZE + 64] = "";
    if (rc == TIDEMARK_ECANCELED)
        snprintf(why, sizeof why, "cancelled");
    else if (rc != 0)
        describe(x, res, why, sizeof why);
    if (x->cb.on_done)
        x->cb.on_done(x->ud, rc, status, rc ? why : NULL);
    hx_free(x);
}

static void run_cmds(tm_hc *hc)
{
    pthread_mutex_lock(&hc->mu);
    cmd *c = hc->cmds;
    hc->cmds = hc->cmds_tail = NULL;
    pthread_mutex_unlock(&hc->mu);
    while (c) {
        cmd *next = c->next;
        CURLMcode mrc = curl_multi_add_handle(hc->multi, c->x->easy);
        if (mrc != CURLM_OK) {
            pthread_mutex_lock(&hc->mu);
            live_remove(hc, c->x);
            if (c->x->cancel_req || c->x->unpause_req)
                hc->requests--;
            pthread_mutex_unlock(&hc->mu);
            if (c->x->cb.on_done)
                c->x->cb.on_done(c->x->ud, TIDEMARK_EIO, 0, curl_multi_strerror(mrc));
            hx_free(c->x);
        }
        free(c);
        c = next;
    }
}

/* The next live exchange with a request, its flags taken; NULL when none. */
static tm_hx *take_request(tm_hc *hc, int *cancel, int *unpause)
{
    pthread_mutex_lock(&hc->mu);
    tm_hx *x = NULL;
    if (hc->requests > 0)
        for (x = hc->live; x && !x->cancel_req && !x->unpause_req; x = x->next)
            ;
    if (x) {
        *cancel = x->cancel_req;
        *unpause = x->unpause_req;
        x->cancel_req = x->unpause_req = 0;
        hc->requests--;
    }
    pthread_mutex_unlock(&hc->mu);
    return x;
}

/* Cancels and unpauses other threads asked for. */
static void run_requests(tm_hc *hc)
{
    int cancel, unpause;
    tm_hx *x;
    while ((x = take_request(hc, &cancel, &unpause)) != NULL) {
        if (cancel) {
            x->cancelled = 1;
            hx_finish(hc, x, TIDEMARK_ECANCELED, CURLE_OK);
        } else if (unpause) {
            /* May offer the held bytes at once (on_write, on this thread). */
            CURLcode rc = curl_easy_pause(x->easy, CURLPAUSE_CONT);
            if (rc != CURLE_OK) {
                x->cancelled = 1;
                hx_finish(hc, x, TIDEMARK_EIO, rc);
            }
        }
    }
}

/* Exchanges curl finished. */
static void run_finished(tm_hc *hc)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(hc->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        tm_hx *x = NULL;
        if (curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x) != CURLE_OK || !x)
            continue;
        CURLcode res = m->data.result;
        int rc = res == CURLE_OK ? 0 : res == CURLE_OPERATION_TIMEDOUT ? TIDEMARK_ETIMEDOUT
                                                                        : TIDEMARK_EIO;
        if (x->cancelled)
            rc = TIDEMARK_ECANCELED;
        hx_finish(hc, x, rc, res);
    }
}

static void *io_main(void *arg)
{
    tm_hc *hc = arg;
    for (;;) {
        run_cmds(hc);
        run_requests(hc);
        pthread_mutex_lock(&hc->mu);
        int stop = hc->stopping;
        pthread_mutex_unlock(&hc->mu);
        if (stop)
            break;
        int running = 0;
        CURLMcode mrc = curl_multi_perform(hc->multi, &running);
        if (mrc != CURLM_OK)
            TM_WARN("http client: %s", curl_multi_strerror(mrc));
        run_finished(hc);
        mrc = curl_multi_poll(hc->multi, NULL, 0, 1000, NULL);
        if (mrc != CURLM_OK)
            TM_WARN("http client: %s", curl_multi_strerror(mrc));
    }
    /* Abort what is left. */
    pthread_mutex_lock(&hc->mu);
    tm_hx *x = hc->live;
    pthread_mutex_unlock(&hc->mu);
    while (x) {
        x->cancelled = 1;
        hx_finish(hc, x, TIDEMARK_ECANCELED, CURLE_OK);
        pthread_mutex_lock(&hc->mu);
        x = hc->live;
        pthread_mutex_unlock(&hc->mu);
    }
    return NULL;
}

static void multi_cleanup(CURLM *m)
{
    CURLMcode mrc = curl_multi_cleanup(m);
    if (mrc != CURLM_OK)
        TM_WARN("http client: cleanup: %s", curl_multi_strerror(mrc));
}

static void hc_tls_free(tm_hc *hc)
{
    free(hc->ca_file);
    free(hc->cert_file);
    free(hc->key_file);
}

static int hc_tls_copy(tm_hc *hc, const tm_hc_tls *tls)
{
    if (!tls)
        return 0;
    if (!tls->cert_file != !tls->key_file)
        return TIDEMARK_EINVAL;
    const char *in[] = {tls->ca_file, tls->cert_file, tls->key_file};
    char **out[] = {&hc->ca_file, &hc->cert_file, &hc->key_file};
    for (size_t i = 0; i < 3; i++)
        if (in[i] && !(*out[i] = strdup(in[i])))
            return TIDEMARK_ENOMEM;
    return 0;
}

int tm_hc_new(tm_hc **out) { return tm_hc_new_tls(NULL, out); }

int tm_hc_new_tls(const tm_hc_tls *tls, tm_hc **out)
{
    if (pthread_once(&global_once, global_init) != 0 || global_rc != CURLE_OK)
        return TIDEMARK_EIO;
    tm_hc *hc = calloc(1, sizeof *hc);
    if (!hc)
        return TIDEMARK_ENOMEM;
    int trc = hc_tls_copy(hc, tls);
    if (trc) {
        hc_tls_free(hc);
        free(hc);
        return trc;
    }
    hc->multi = curl_multi_init();
    if (!hc->multi || pthread_mutex_init(&hc->mu, NULL) != 0) {
        if (hc->multi)
            multi_cleanup(hc->multi);
        hc_tls_free(hc);
        free(hc);
        return TIDEMARK_EIO;
    }
    if (pthread_create(&hc->thread, NULL, io_main, hc) != 0) {
        multi_cleanup(hc->multi);
        pthread_mutex_destroy(&hc->mu);
        hc_tls_free(hc);
        free(hc);
        return TIDEMARK_EIO;
    }
    *out = hc;
    return 0;
}

static void post_cmd(tm_hc *hc, cmd *c)
{
    pthread_mutex_lock(&hc->mu);
    if (hc->cmds_tail)
        hc->cmds_tail->next = c;
    else
        hc->cmds = c;
    hc->cmds_tail = c;
    pthread_mutex_unlock(&hc->mu);
    CURLMcode mrc = curl_multi_wakeup(hc->multi);
    if (mrc != CURLM_OK) /* the I/O thread still polls every second */
        TM_WARN("http client: wakeup: %s", curl_multi_strerror(mrc));
}

/* The header lines of req, with "Expect:" (no 100-continue). NULL when
 * memory is short. */
static struct curl_slist *header_list(const tm_hx_req *req)
{
    struct curl_slist *l = NULL, *n;
    for (const char *const *h = req->headers; h && *h; h++) {
        if (!(n = curl_slist_append(l, *h)))
            goto fail;
        l = n;
    }
    if ((n = curl_slist_append(l, "Expect:")) != NULL)
        return n;
fail:
    curl_slist_free_all(l);
    return NULL;
}

/* Servers are always verified (peer and host name), against ca_file when
 * one is set, else the system's CAs; a client certificate when one is set. */
static CURLcode set_tls(const tm_hc *hc, CURL *e)
{
    CURLcode rc = curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    if (rc == CURLE_OK && hc->ca_file)
        rc = curl_easy_setopt(e, CURLOPT_CAINFO, hc->ca_file);
    if (rc == CURLE_OK && hc->cert_file)
        rc = curl_easy_setopt(e, CURLOPT_SSLCERT, hc->cert_file);
    if (rc == CURLE_OK && hc->key_file)
        rc = curl_easy_setopt(e, CURLOPT_SSLKEY, hc->key_file);
    return rc;
}

/* The options every exchange has. Returns curl's first failure. */
static CURLcode set_common(tm_hx *x, const tm_hx_req *req)
{
    CURL *e = x->easy;
    CURLcode rc = curl_easy_setopt(e, CURLOPT_URL, req->url);
#define SET(opt, v) \
    if (rc == CURLE_OK) \
    rc = curl_easy_setopt(e, opt, v)
    SET(CURLOPT_HTTPHEADER, x->headers);
    SET(CURLOPT_WRITEFUNCTION, on_write);
    SET(CURLOPT_WRITEDATA, x);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, x);
    SET(CURLOPT_PRIVATE, x);
    SET(CURLOPT_PREREQFUNCTION, on_prereq);
    SET(CURLOPT_PREREQDATA, x);
    SET(CURLOPT_ERRORBUFFER, x->errbuf);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    SET(CURLOPT_TCP_NODELAY, 1L);
    if (req->timeout_ms > 0)
        SET(CURLOPT_TIMEOUT_MS, req->timeout_ms);
    if (req->fresh_connection)
        SET(CURLOPT_FRESH_CONNECT, 1L);
    return rc;
}

/* The method and body. */
static int set_method(tm_hx *x, const tm_hx_req *req)
{
    CURL *e = x->easy;
    CURLcode rc = CURLE_OK;
    if (strcmp(req->method, "POST") == 0) {
        x->body = malloc(req->body_len + 1);
        if (!x->body)
            return TIDEMARK_ENOMEM;
        if (req->body_len)
            memcpy(x->body, req->body, req->body_len);
        SET(CURLOPT_POST, 1L);
        SET(CURLOPT_POSTFIELDS, x->body);
        SET(CURLOPT_POSTFIELDSIZE, (long)req->body_len);
    } else if (strcmp(req->method, "GET") != 0) {
        SET(CURLOPT_CUSTOMREQUEST, req->method);
    }
#undef SET
    return rc == CURLE_OK ? 0 : TIDEMARK_EINVAL;
}

int tm_hc_start(tm_hc *hc, const tm_hx_req *req, const tm_hx_cb *cb, void *ud, uint64_t *out)
{
    tm_hx *x = calloc(1, sizeof *x);
    cmd *c = calloc(1, sizeof *c);
    int rc = TIDEMARK_ENOMEM;
    if (!x || !c)
        goto fail;
    x->cb = *cb;
    x->ud = ud;
    if (!(x->easy = curl_easy_init()) || !(x->headers = header_list(req)))
        goto fail;
    rc = TIDEMARK_EINVAL;
    if (set_common(x, req) != CURLE_OK || set_tls(hc, x->easy) != CURLE_OK)
        goto fail;
    if ((rc = set_method(x, req)) != 0)
        goto fail;
    pthread_mutex_lock(&hc->mu);
    x->xid = ++hc->next_xid;
    x->next = hc->live;
    hc->live = x;
    pthread_mutex_unlock(&hc->mu);
    if (out)
        *out = x->xid;
    c->x = x;
    post_cmd(hc, c);
    return 0;
fail:
    free(c);
    if (x)
        hx_free(x);
    return rc;
}

/* Flag exchange xid for the I/O thread; nothing when it already ended. */
static void request(tm_hc *hc, uint64_t xid, int cancel)
{
    int found = 0;
    pthread_mutex_lock(&hc->mu);
    for (tm_hx *x = hc->live; x; x = x->next)
        if (x->xid == xid) {
            if (!x->cancel_req && !x->unpause_req)
                hc->requests++;
            if (cancel)
                x->cancel_req = 1;
            else
                x->unpause_req = 1;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&hc->mu);
    if (found) {
        CURLMcode mrc = curl_multi_wakeup(hc->multi);
        if (mrc != CURLM_OK) /* the I/O thread still polls every second */
            TM_WARN("http client: wakeup: %s", curl_multi_strerror(mrc));
    }
}

void tm_hc_cancel(tm_hc *hc, uint64_t xid) { request(hc, xid, 1); }

void tm_hc_unpause(tm_hc *hc, uint64_t xid) { request(hc, xid, 0); }

void tm_hc_free(tm_hc *hc)
{
    if (!hc)
        return;
    pthread_mutex_lock(&hc->mu);
    hc->stopping = 1;
    pthread_mutex_unlock(&hc->mu);
    CURLMcode mrc = curl_multi_wakeup(hc->multi);
    if (mrc != CURLM_OK)
        TM_WARN("http client: wakeup: %s", curl_multi_strerror(mrc));
    int rc = pthread_join(hc->thread, NULL);
    if (rc != 0)
        TM_ERROR("http client: joining the I/O thread failed (%d)", rc);
    run_cmds(hc); /* adds still queued: added, then aborted below */
    for (tm_hx *x = hc->live, *n; x; x = n) {
        n = x->next;
        x->cancelled = 1;
        hx_finish(hc, x, TIDEMARK_ECANCELED, CURLE_OK);
    }
    multi_cleanup(hc->multi);
    pthread_mutex_destroy(&hc->mu);
    hc_tls_free(hc);
    free(hc);
}
