/* net.c - see net.h. */
#include "net.h"
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int bench_parse_hostport(const char *s, size_t len, bench_url *u)
{
    const char *colon = NULL;
    for (const char *q = s; q < s + len; q++)
        if (*q == ':')
            colon = q; /* the last one */
    if (!colon || colon == s || colon + 1 == s + len)
        return -1;
    snprintf(u->host, sizeof u->host, "%.*s", (int)(colon - s), s);
    snprintf(u->port, sizeof u->port, "%.*s", (int)(s + len - colon - 1), colon + 1);
    return 0;
}

int bench_parse_url(const char *url, bench_url *u)
{
    if (strncmp(url, "http://", 7) != 0)
        return -1;
    const char *h = url + 7, *slash = strchr(h, '/');
    if (!slash)
        slash = h + strlen(h);
    if (bench_parse_hostport(h, (size_t)(slash - h), u) != 0)
        return -1;
    snprintf(u->path, sizeof u->path, "%s", *slash ? slash : "/");
    return 0;
}

int bench_dial(const bench_url *u)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(u->host, u->port, &hints, &ai) != 0)
        return -1;
    int fd = socket(ai->ai_family, ai->ai_socktype, 0), one = 1;
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int bench_send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}
