/* net.h - what the bench's C programs (rps.c, streams.c, floor.c) share:
 * a clock, an http:// URL taken apart, a connection, a whole send. */
#ifndef TM_BENCH_NET_H
#define TM_BENCH_NET_H
#include <stddef.h>

typedef struct bench_url {
    char host[256], port[16], path[512];
} bench_url;

/* Seconds on the monotonic clock. */
double bench_now(void);
/* "http://HOST:PORT[/PATH]" into u (path "/" when absent); 0 or -1. */
int bench_parse_url(const char *url, bench_url *u);
/* A TCP connection to u (TCP_NODELAY), or -1. */
int bench_dial(const bench_url *u);
/* All n bytes of p to fd (no SIGPIPE); 0 or -1. */
int bench_send_all(int fd, const char *p, size_t n);

#endif
