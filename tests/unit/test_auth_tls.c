/* test_auth_tls.c DIR CORPUS - the HTTP transport over TLS (libmicrohttpd + GnuTLS)
 * and the libcurl client's verification, with the CA and certificates that
 * tests/integration/tls_certs.sh made in DIR:
 *   - a server with ca-signed server.pem: a client verifying against ca.pem
 *     gets the answer; one with the system's CAs, one with another CA and a
 *     plain-HTTP one do not;
 *   - with a client CA: a client presenting client.pem gets the answer, one
 *     without a certificate gets 403;
 *   - half or unreadable TLS configurations are refused by tm_http_new;
 *   - src/auth/ fetching a JWKS from an https issuer (the same TLS server
 *     serving CORPUS/jwks/three_keys, the fuzz corpus's key set): with the CA
 *     a token signed by those keys (CORPUS/jwt/rs256_ok) is accepted, with
 *     the system's CAs the issuer is unavailable.
 * Prints "N passed, N failed"; exit 1 on any failure. */
#include "auth/auth.h"
#include "tidemark/tidemark.h"
#include "transport/http_client.h"
#include "transport/http_server.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int passed, failed;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            passed++;                                                      \
            printf("ok   ");                                               \
        } else {                                                           \
            failed++;                                                      \
            printf("FAIL ");                                               \
        }                                                                  \
        printf(__VA_ARGS__);                                               \
        printf("\n");                                                      \
    } while (0)

/* An SSE stream over TLS: two events, then the end. */
static int pull(void *ud, tm_buf *out)
{
    int *n = ud;
    if (*n >= 2)
        return TM_HTTP_END;
    (*n)++;
    const char *ev = *n == 1 ? "id: 1\ndata: one\n\n" : "id: 2\ndata: two\n\n";
    return tm_buf_add(out, ev, strlen(ev)) == 0 ? TM_HTTP_MORE : TM_HTTP_END;
}

static char *g_jwks; /* served at /jwks */

static void handler(void *ud, tm_http_req *req)
{
    (void)ud;
    if (strcmp(tm_http_req_path(req), "/jwks") == 0 && g_jwks) {
        tm_http_reply(req, 200, "application/json", g_jwks, strlen(g_jwks));
        return;
    }
    if (strcmp(tm_http_req_path(req), "/sse") == 0) {
        int *n = calloc(1, sizeof *n);
        tm_http_source src = {.pull = pull, .free = free, .ud = n};
        if (n && tm_http_reply_source(req, "sse-key", &src) == 0)
            return;
        free(n);
        tm_http_reply(req, 500, "text/plain", "no", 2);
        return;
    }
    const char *body = tm_http_req_tls(req) ? "hello over tls" : "hello in clear";
    tm_http_reply(req, 200, "text/plain", body, strlen(body));
}

typedef struct done {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int finished, rc;
    long status;
    char body[256];
    size_t len;
    char error[256];
} done;

static int on_data(void *ud, const char *buf, size_t len)
{
    done *d = ud;
    pthread_mutex_lock(&d->mu);
    size_t room = sizeof d->body - 1 - d->len;
    size_t n = len < room ? len : room;
    memcpy(d->body + d->len, buf, n);
    d->len += n;
    d->body[d->len] = '\0';
    pthread_mutex_unlock(&d->mu);
    return 0;
}

static void on_done(void *ud, int rc, long status, const char *error)
{
    done *d = ud;
    pthread_mutex_lock(&d->mu);
    d->finished = 1;
    d->rc = rc;
    d->status = status;
    snprintf(d->error, sizeof d->error, "%s", error ? error : "");
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* GET url through a client with tls (NULL: defaults); wait at most 10 s. */
static void get(const tm_hc_tls *tls, const char *url, done *d)
{
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    d->rc = 1;
    tm_hc *hc = NULL;
    if (tm_hc_new_tls(tls, &hc) != 0) {
        d->rc = 99;
        return;
    }
    tm_hx_req req = {.method = "GET", .url = url, .timeout_ms = 10000};
    tm_hx_cb cb = {.on_data = on_data, .on_done = on_done};
    if (tm_hc_start(hc, &req, &cb, d, NULL) == 0) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 10;
        pthread_mutex_lock(&d->mu);
        while (!d->finished && pthread_cond_timedwait(&d->cv, &d->mu, &dl) == 0)
            ;
        pthread_mutex_unlock(&d->mu);
    }
    tm_hc_free(hc);
}

static tm_http *serve(const char *dir, int client_ca, char *url, size_t n)
{
    char cert[512], key[512], ca[512];
    snprintf(cert, sizeof cert, "%s/server.pem", dir);
    snprintf(key, sizeof key, "%s/server.key", dir);
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    tm_http_config cfg = {.host = "127.0.0.1", .max_body = 65536, .tls_cert_file = cert,
                          .tls_key_file = key, .tls_client_ca_file = client_ca ? ca : NULL};
    tm_http *h = NULL;
    if (tm_http_new(&cfg, handler, NULL, &h) != 0 || tm_http_listen(h) != 0) {
        tm_http_free(h);
        return NULL;
    }
    snprintf(url, n, "https://127.0.0.1:%u/mcp", tm_http_port(h));
    return h;
}

static void server_only(const char *dir)
{
    char url[128], plain[128], ca[512], other[512];
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    snprintf(other, sizeof other, "%s/other-ca.pem", dir);
    tm_http *h = serve(dir, 0, url, sizeof url);
    CHECK(h != NULL, "a TLS server starts");
    if (!h)
        return;
    done d;
    get(&(tm_hc_tls){.ca_file = ca}, url, &d);
    CHECK(d.rc == 0 && d.status == 200 && strcmp(d.body, "hello over tls") == 0,
          "a client verifying against the test CA gets the answer (rc %d, %ld, '%s', %s)", d.rc,
          d.status, d.body, d.error);
    get(NULL, url, &d);
    CHECK(d.rc == TIDEMARK_EIO && d.status == 0 && d.len == 0,
          "a client with the system's CAs fails to verify (rc %d: %s)", d.rc, d.error);
    get(&(tm_hc_tls){.ca_file = other}, url, &d);
    CHECK(d.rc == TIDEMARK_EIO && d.len == 0, "a client with another CA fails (rc %d: %s)", d.rc,
          d.error);
    snprintf(plain, sizeof plain, "http://127.0.0.1:%u/mcp", tm_http_port(h));
    get(NULL, plain, &d);
    CHECK(d.rc != 0 || d.status != 200, "plain HTTP to the TLS port gets no answer (rc %d, %ld)",
          d.rc, d.status);
    char sse[128];
    snprintf(sse, sizeof sse, "https://127.0.0.1:%u/sse", tm_http_port(h));
    get(&(tm_hc_tls){.ca_file = ca}, sse, &d);
    CHECK(d.rc == 0 && d.status == 200 && strstr(d.body, "data: one") &&
              strstr(d.body, "data: two"),
          "an SSE stream over TLS, to its end (rc %d, '%s')", d.rc, d.body);
    char lh[128];
    snprintf(lh, sizeof lh, "https://localhost:%u/mcp", tm_http_port(h));
    get(&(tm_hc_tls){.ca_file = ca}, lh, &d);
    CHECK(d.rc == 0 && d.status == 200, "the name localhost verifies too (rc %d: %s)", d.rc, d.error);
    tm_http_free(h);
}

static void client_certs(const char *dir)
{
    char url[128], ca[512], cert[512], key[512];
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    snprintf(cert, sizeof cert, "%s/client.pem", dir);
    snprintf(key, sizeof key, "%s/client.key", dir);
    tm_http *h = serve(dir, 1, url, sizeof url);
    CHECK(h != NULL, "a TLS server with a client CA starts");
    if (!h)
        return;
    done d;
    get(&(tm_hc_tls){.ca_file = ca, .cert_file = cert, .key_file = key}, url, &d);
    CHECK(d.rc == 0 && d.status == 200 && strcmp(d.body, "hello over tls") == 0,
          "a client with a certificate the CA signed gets the answer (rc %d, %ld: %s)", d.rc,
          d.status, d.error);
    get(&(tm_hc_tls){.ca_file = ca}, url, &d);
    CHECK((d.rc == 0 && d.status == 403) || d.rc == TIDEMARK_EIO,
          "a client without a certificate is refused (rc %d, %ld)", d.rc, d.status);
    CHECK(strstr(d.body, "hello") == NULL, "and gets nothing of the answer");
    tm_http_free(h);
}

static void bad_configs(const char *dir)
{
    char cert[512], missing[512];
    snprintf(cert, sizeof cert, "%s/server.pem", dir);
    snprintf(missing, sizeof missing, "%s/no-such.key", dir);
    tm_http_config half = {.host = "127.0.0.1", .tls_cert_file = cert};
    tm_http *h = NULL;
    CHECK(tm_http_new(&half, handler, NULL, &h) == TIDEMARK_EINVAL, "a certificate without a key");
    tm_http_config gone = {.host = "127.0.0.1", .tls_cert_file = cert, .tls_key_file = missing};
    CHECK(tm_http_new(&gone, handler, NULL, &h) == TIDEMARK_EINVAL, "an unreadable key file");
    tm_http_config ca_only = {.host = "127.0.0.1", .tls_client_ca_file = cert};
    CHECK(tm_http_new(&ca_only, handler, NULL, &h) == TIDEMARK_EINVAL, "a client CA without TLS");
    CHECK(tm_hc_new_tls(&(tm_hc_tls){.cert_file = cert}, &(tm_hc *){NULL}) == TIDEMARK_EINVAL,
          "a client certificate without its key");
}

static char *slurp(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    char *buf = f ? calloc(1, 65536) : NULL;
    if (buf && fread(buf, 1, 65535, f) == 0) {
        free(buf);
        buf = NULL;
    }
    if (f)
        fclose(f);
    return buf;
}

static unsigned check_with(const char *jwks_uri, const char *ca, const char *tok)
{
    tm_auth_config c = {.resource = "https://mcp.example/mcp", .issuer = "https://as.example",
                        .jwks_uri = jwks_uri, .ca_file = ca, .http_timeout_ms = 3000};
    tm_auth *a = NULL;
    if (tm_auth_new(&c, &a) != 0)
        return 0;
    char hdr[4096];
    snprintf(hdr, sizeof hdr, "Bearer %s", tok);
    tm_auth_result r;
    unsigned status = tm_auth_check(a, hdr, NULL, NULL, &r) == 0 ? r.status : 0;
    tm_auth_free(a);
    return status;
}

static void https_issuer(const char *dir, const char *corpus)
{
    char url[128], ca[512], jwks_uri[160];
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    g_jwks = slurp(corpus, "jwks/three_keys");
    char *tok = slurp(corpus, "jwt/rs256_ok");
    tm_http *h = serve(dir, 0, url, sizeof url);
    CHECK(h && g_jwks && tok, "an https issuer serving a JWKS");
    if (h && g_jwks && tok) {
        snprintf(jwks_uri, sizeof jwks_uri, "https://127.0.0.1:%u/jwks", tm_http_port(h));
        unsigned s = check_with(jwks_uri, ca, tok);
        CHECK(s == 200, "the JWKS fetched over verified TLS: the token is accepted (%u)", s);
        s = check_with(jwks_uri, NULL, tok);
        CHECK(s == 503, "an issuer the system's CAs do not vouch for is unavailable (%u)", s);
    }
    tm_http_free(h);
    free(tok);
    free(g_jwks);
    g_jwks = NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_auth_tls DIR CORPUS (DIR made by tls_certs.sh)\n");
        return 2;
    }
    server_only(argv[1]);
    https_issuer(argv[1], argv[2]);
    client_certs(argv[1]);
    bad_configs(argv[1]);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
