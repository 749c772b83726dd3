/*
 * oauth_loopback.c - the person's side of the authorization code grant:
 * a loopback redirect listener (RFC 8252: 127.0.0.1, a port of the
 * caller's or a free one) and tidemark_authorize_follow for authorization
 * servers that redirect at once.
 */
#include "oauth.h"
#include "../base/clock.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct tidemark_loopback {
    int fd;
    int port;
};

int tidemark_loopback_open(int port, tidemark_loopback_t **out, char *uri, size_t size)
{
    if (!out || !uri || port < 0 || port > 65535)
        return TIDEMARK_EINVAL;
    *out = NULL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return TIDEMARK_EIO;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        close(fd);
        return TIDEMARK_EIO;
    }
    tidemark_loopback_t *lb = calloc(1, sizeof *lb);
    if (!lb) {
        close(fd);
        return TIDEMARK_ENOMEM;
    }
    lb->fd = fd;
    lb->port = ntohs(a.sin_port);
    if ((size_t)snprintf(uri, size, "http://127.0.0.1:%d/callback", lb->port) >= size) {
        tidemark_loopback_close(lb);
        return TIDEMARK_ERANGE;
    }
    *out = lb;
    return 0;
}

void tidemark_loopback_close(tidemark_loopback_t *lb)
{
    if (!lb)
        return;
    close(lb->fd);
    free(lb);
}

/* Read one request's head from fd before deadline: OUT its target. */
static int read_target(int fd, int64_t deadline, char **target)
{
    char buf[8192];
    size_t n = 0;
    while (n < sizeof buf - 1 && !memmem(buf, n, "\r\n\r\n", 4) && !memchr(buf, '\n', n)) {
        int64_t left = deadline - tm_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return TIDEMARK_ETIMEDOUT;
        ssize_t k = read(fd, buf + n, sizeof buf - 1 - n);
        if (k <= 0)
            return TIDEMARK_EIO;
        n += (size_t)k;
    }
    buf[n] = '\0';
    char *sp = strchr(buf, ' '), *sp2 = sp ? strchr(sp + 1, ' ') : NULL;
    if (!sp || !sp2 || strncmp(buf, "GET ", 4) != 0)
        return TIDEMARK_EPROTO;
    *target = strndup(sp + 1, (size_t)(sp2 - sp - 1));
    return *target ? 0 : TIDEMARK_ENOMEM;
}

static void answer(int fd, int ok)
{
    const char *body = ok ? "Authorization received: you can close this window.\n"
                          : "Not the authorization callback.\n";
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      ok ? "200 OK" : "404 Not Found", strlen(body));
    if (write(fd, head, (size_t)hl) < 0 || write(fd, body, strlen(body)) < 0)
        return; /* the browser went away: the code is what counts */
}

int tidemark_loopback_wait(tidemark_loopback_t *lb, int timeout_ms, char **callback_url)
{
    if (!lb || !callback_url)
        return TIDEMARK_EINVAL;
    *callback_url = NULL;
    int64_t deadline = tm_now_ms() + (timeout_ms > 0 ? timeout_ms : 300000);
    for (;;) {
        int64_t left = deadline - tm_now_ms();
        struct pollfd p = {.fd = lb->fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return TIDEMARK_ETIMEDOUT;
        int fd = accept4(lb->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        char *target = NULL;
        int rc = read_target(fd, deadline, &target);
        int ours = !rc && strncmp(target, "/callback", 9) == 0 &&
                   (target[9] == '?' || target[9] == '\0');
        answer(fd, ours);
        close(fd);
        if (ours) {
            int n = asprintf(callback_url, "http://127.0.0.1:%d%s", lb->port, target);
            free(target);
            if (n < 0) {
                *callback_url = NULL;
                return TIDEMARK_ENOMEM;
            }
            return 0;
        }
        free(target); /* a favicon or the like: wait on */
    }
}

int tidemark_authorize_follow(const char *authorization_url, const char *redirect_uri,
                              char **callback_url, void *ud)
{
    (void)ud;
    if (!authorization_url || !redirect_uri || !callback_url)
        return TIDEMARK_EINVAL;
    *callback_url = NULL;
    tm_hc *hc = NULL;
    int rc = tm_hc_new(&hc);
    oa_resp a = {0};
    if (!rc)
        rc = oa_http(hc, "GET", authorization_url, NULL, NULL, 15000, &a);
    tm_hc_free(hc);
    if (!rc && (a.status < 300 || a.status >= 400 || !a.location))
        rc = TIDEMARK_EPROTO; /* no redirect: a person would be needed */
    if (!rc && strncmp(a.location, redirect_uri, strcspn(redirect_uri, "?")) != 0)
        rc = TIDEMARK_EPROTO; /* redirected elsewhere (a login page) */
    if (!rc && !(*callback_url = strdup(a.location)))
        rc = TIDEMARK_ENOMEM;
    oa_resp_free(&a);
    return rc;
}
