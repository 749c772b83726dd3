/* net.h - what the bench's C programs (rps.c, streams.c, floor.c, redis_call.c) share:
 * a clock, an http:// URL or a HOST:PORT taken apart, a connection, a whole send. */
#ifndef TM_BENCH_NET_H
#define TM_BENCH_NET_H
#include <stddef.h>

typedef struct bench_url {
    char host[256], port[16], path[512];
} bench_url;

/* Seconds on the monotonic clock. */
double bench_now(void);
/* "HOST:PORT", the first len bytes of s, into u's host and port; 0 or -1. */
int bench_parse_hostport(const char *s, size_t len, bench_url *u);
/* "http://HOST:PORT[/PATH]" into u (path "/" when absent); 0 or -1. */
int bench_parse_url(const char *url, bench_url *u);
/* A TCP connection to u (TCP_NODELAY), or -1. */
int bench_dial(const bench_url *u);
/* All n bytes of p to fd (no SIGPIPE); 0 or -1. */
int bench_send_all(int fd, const char *p, size_t n);

#endif
