/* http_client.c - libcurl multi on one I/O thread; see http_client.h. */
#include "http_client.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <ctype.h>
#include <curl/curl.h>
#include <pthread.h>
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
    int headers_sent;
    int cancelled;
    struct tm_hx *next; /* live list */
};

typedef struct cmd {
    int kind; /* 0 add, 1 cancel */
    tm_hx *x;       /* add */
    uint64_t xid;   /* cancel */
    struct cmd *next;
} cmd;

struct tm_hc {
    CURLM *multi;
    pthread_t thread;
    pthread_mutex_t mu;
    cmd *cmds, *cmds_tail;
    int stopping;
    tm_hx *live;
    uint64_t next_xid;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static void hx_headers(tm_hx *x)
{
    if (x->headers_sent)
        return;
    x->headers_sent = 1;
    long status = 0;
    char *ctype = NULL;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ctype);
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
    if (x->cb.on_data && x->cb.on_data(x->ud, p, len) != 0)
        return 0; /* aborts the transfer */
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

static tm_hx *find_live(tm_hc *hc, uint64_t xid)
{
    for (tm_hx *y = hc->live; y; y = y->next)
        if (y->xid == xid)
            return y;
    return NULL;
}

/* End an exchange on the I/O thread: callbacks, then free. */
static void hx_finish(tm_hc *hc, tm_hx *x, int rc)
{
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    if (rc == 0)
        hx_headers(x);
    curl_multi_remove_handle(hc->multi, x->easy);
    pthread_mutex_lock(&hc->mu);
    live_remove(hc, x);
    pthread_mutex_unlock(&hc->mu);
    if (x->cb.on_done)
        x->cb.on_done(x->ud, rc, status);
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
        if (c->kind == 0) {
            if (curl_multi_add_handle(hc->multi, c->x->easy) != CURLM_OK) {
                pthread_mutex_lock(&hc->mu);
                live_remove(hc, c->x);
                pthread_mutex_unlock(&hc->mu);
                if (c->x->cb.on_done)
                    c->x->cb.on_done(c->x->ud, TIDEMARK_EIO, 0);
                hx_free(c->x);
            }
        } else {
            pthread_mutex_lock(&hc->mu);
            tm_hx *x = find_live(hc, c->xid);
            pthread_mutex_unlock(&hc->mu);
            if (x) {
                x->cancelled = 1;
                hx_finish(hc, x, TIDEMARK_ECANCELED);
            }
        }
        free(c);
        c = next;
    }
}

static void *io_main(void *arg)
{
    tm_hc *hc = arg;
    for (;;) {
        run_cmds(hc);
        pthread_mutex_lock(&hc->mu);
        int stop = hc->stopping;
        pthread_mutex_unlock(&hc->mu);
        if (stop)
            break;
        int running = 0;
        curl_multi_perform(hc->multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(hc->multi, &left)) != NULL) {
            if (m->msg != CURLMSG_DONE)
                continue;
            tm_hx *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode res = m->data.result;
            int rc = res == CURLE_OK ? 0 : res == CURLE_OPERATION_TIMEDOUT ? TIDEMARK_ETIMEDOUT
                                                                            : TIDEMARK_EIO;
            if (x->cancelled)
                rc = TIDEMARK_ECANCELED;
            hx_finish(hc, x, rc);
        }
        curl_multi_poll(hc->multi, NULL, 0, 1000, NULL);
    }
    /* Abort what is left. */
    pthread_mutex_lock(&hc->mu);
    tm_hx *x = hc->live;
    pthread_mutex_unlock(&hc->mu);
    while (x) {
        x->cancelled = 1;
        hx_finish(hc, x, TIDEMARK_ECANCELED);
        pthread_mutex_lock(&hc->mu);
        x = hc->live;
        pthread_mutex_unlock(&hc->mu);
    }
    return NULL;
}

int tm_hc_new(tm_hc **out)
{
    pthread_once(&global_once, global_init);
    tm_hc *hc = calloc(1, sizeof *hc);
    if (!hc)
        return TIDEMARK_ENOMEM;
    hc->multi = curl_multi_init();
    pthread_mutex_init(&hc->mu, NULL);
    if (!hc->multi || pthread_create(&hc->thread, NULL, io_main, hc) != 0) {
        if (hc->multi)
            curl_multi_cleanup(hc->multi);
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
    curl_multi_wakeup(hc->multi);
}

int tm_hc_start(tm_hc *hc, const tm_hx_req *req, const tm_hx_cb *cb, void *ud, uint64_t *out)
{
    tm_hx *x = calloc(1, sizeof *x);
    cmd *c = calloc(1, sizeof *c);
    if (!x || !c) {
        free(x);
        free(c);
        return TIDEMARK_ENOMEM;
    }
    x->cb = *cb;
    x->ud = ud;
    x->easy = curl_easy_init();
    if (!x->easy)
        goto fail;
    for (const char *const *h = req->headers; h && *h; h++)
        x->headers = curl_slist_append(x->headers, *h);
    x->headers = curl_slist_append(x->headers, "Expect:");
    CURL *e = x->easy;
    curl_easy_setopt(e, CURLOPT_URL, req->url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, x);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    if (req->timeout_ms > 0)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, req->timeout_ms);
    if (req->fresh_connection)
        curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
    if (strcmp(req->method, "POST") == 0) {
        x->body = malloc(req->body_len + 1);
        if (!x->body)
            goto fail;
        if (req->body_len)
            memcpy(x->body, req->body, req->body_len);
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)req->body_len);
    } else if (strcmp(req->method, "GET") != 0) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method);
    }
    pthread_mutex_lock(&hc->mu);
    x->xid = ++hc->next_xid;
    x->next = hc->live;
    hc->live = x;
    pthread_mutex_unlock(&hc->mu);
    if (out)
        *out = x->xid;
    c->kind = 0;
    c->x = x;
    post_cmd(hc, c);
    return 0;
fail:
    free(c);
    hx_free(x);
    return TIDEMARK_ENOMEM;
}

void tm_hc_cancel(tm_hc *hc, uint64_t xid)
{
    cmd *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->kind = 1;
    c->xid = xid;
    post_cmd(hc, c);
}

void tm_hc_free(tm_hc *hc)
{
    if (!hc)
        return;
    pthread_mutex_lock(&hc->mu);
    hc->stopping = 1;
    pthread_mutex_unlock(&hc->mu);
    curl_multi_wakeup(hc->multi);
    pthread_join(hc->thread, NULL);
    run_cmds(hc); /* free queued commands (adds left are aborted below) */
    curl_multi_cleanup(hc->multi);
    pthread_mutex_destroy(&hc->mu);
    free(hc);
}
