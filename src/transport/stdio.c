/*
 * stdio.c - newline-delimited JSON-RPC framing (stdio.h).
 *
 * Threading: a reader belongs to one thread at a time and has no lock. A
 * writer has one mutex (w->mu) held for the whole of one line, so lines
 * never interleave; it is a leaf lock: only write(2), poll(2) and the
 * signal-mask calls run under it.
 */
#include "transport/stdio.h"
#include "tidemark/tidemark.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK (64u * 1024u)
/* As src/mcp/jsonrpc.c: jansson has no depth limit of its own. */
#define MAX_DEPTH 64

struct tm_stdio_reader {
    int fd, cancel_fd;
    size_t max;
    char *buf;
    size_t cap, len, pos, scan; /* unconsumed bytes are buf[pos..len); scanned up to scan */
    int discarding;             /* inside an over-long line, already reported */
    int eof;
    const char *why;
    char detail[256];
    unsigned long long lines;
};

struct tm_stdio_writer {
    pthread_mutex_t mu;
    int fd;
    size_t max;
    int timeout_ms;
    int broken;
};

int tm_stdio_reader_new(int fd, size_t max_message, int cancel_fd, tm_stdio_reader **out)
{
    *out = NULL;
    if (fd < 0)
        return TIDEMARK_EINVAL;
    tm_stdio_reader *r = calloc(1, sizeof *r);
    if (!r)
        return TIDEMARK_ENOMEM;
    r->fd = fd;
    r->cancel_fd = cancel_fd;
    r->max = max_message ? max_message : TM_STDIO_DEFAULT_MAX;
    r->why = "";
    *out = r;
    return 0;
}

void tm_stdio_reader_free(tm_stdio_reader *r)
{
    if (!r)
        return;
    free(r->buf);
    free(r);
}

const char *tm_stdio_reader_why(const tm_stdio_reader *r) { return r->why; }
const char *tm_stdio_reader_detail(const tm_stdio_reader *r) { return r->detail; }
int tm_stdio_reader_lines(const tm_stdio_reader *r, unsigned long long *n)
{
    *n = r->lines;
    return 0;
}

static int refuse(tm_stdio_reader *r, int err, const char *why)
{
    r->why = why;
    return err;
}

/* Nesting within MAX_DEPTH (checked before parsing, so hostile input
 * cannot exhaust the stack); strings are skipped exactly. */
static int depth_ok(const char *s, size_t len)
{
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > MAX_DEPTH)
                return 0;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return 1;
}

/* One complete line (without its '\n'): 1 = blank, skip it; else 0 or a
 * per-line error. */
static int parse_line(tm_stdio_reader *r, const char *p, size_t n, json_t **msg)
{
    if (n > 0 && p[n - 1] == '\r')
        n--;
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r'))
        i++;
    if (i == n)
        return 1;
    r->lines++;
    if (n > r->max)
        return refuse(r, TIDEMARK_ERANGE, "line_too_long");
    if (memchr(p, '\0', n))
        return refuse(r, TIDEMARK_EPROTO, "nul_byte");
    if (!depth_ok(p, n)) {
        snprintf(r->detail, sizeof r->detail, "nesting deeper than %d", MAX_DEPTH);
        return refuse(r, TIDEMARK_EPROTO, "invalid_json");
    }
    json_error_t e;
    json_t *v = json_loadb(p, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &e);
    if (!v) {
        snprintf(r->detail, sizeof r->detail, "%s (column %d)", e.text, e.column);
        return refuse(r, TIDEMARK_EPROTO, "invalid_json");
    }
    if (!json_is_object(v) && !json_is_array(v)) {
        json_decref(v);
        return refuse(r, TIDEMARK_EPROTO, "not_a_message");
    }
    *msg = v;
    return 0;
}

/* Wait for input, then read a chunk into the buffer. */
static int fill(tm_stdio_reader *r)
{
    if (r->pos > 0) { /* compact */
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->scan -= r->pos;
        r->pos = 0;
    }
    if (r->cap - r->len < READ_CHUNK) {
        /* Doubled (a long line costs log2 copies, not one per chunk: 256
         * for 16 MiB, seconds under a sanitizer), never past what a line
         * can use before it is refused (max + a '\r', and a chunk). */
        size_t most = r->max + 2 + READ_CHUNK, ncap = r->cap * 2;
        if (ncap > most)
            ncap = most;
        if (ncap < r->len + READ_CHUNK)
            ncap = r->len + READ_CHUNK;
        char *nb = realloc(r->buf, ncap);
        if (!nb)
            return TIDEMARK_ENOMEM;
        r->buf = nb;
        r->cap = ncap;
    }
    for (;;) {
        struct pollfd pf[2] = {{.fd = r->fd, .events = POLLIN}, {.fd = r->cancel_fd, .events = POLLIN}};
        int np = r->cancel_fd >= 0 ? 2 : 1;
        if (poll(pf, (nfds_t)np, -1) < 0) {
            if (errno == EINTR)
                continue;
            return TIDEMARK_EIO;
        }
        if (np == 2 && (pf[1].revents & (POLLIN | POLLHUP | POLLERR)))
            return TIDEMARK_ECANCELED;
        if (!pf[0].revents)
            continue;
        ssize_t got = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (got > 0) {
            r->len += (size_t)got;
            return 0;
        }
        if (got == 0) {
            r->eof = 1;
            return 0;
        }
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
            continue;
        return TIDEMARK_EIO;
    }
}

/* A newline is in buf[scan..len): hand back that line. 1 = skip it. */
static int take_line(tm_stdio_reader *r, char *nl, json_t **msg)
{
    size_t end = (size_t)(nl - r->buf);
    const char *p = r->buf + r->pos;
    size_t n = end - r->pos;
    r->pos = r->scan = end + 1;
    if (r->discarding) { /* the tail of a line already refused */
        r->discarding = 0;
        return 1;
    }
    return parse_line(r, p, n, msg);
}

int tm_stdio_read(tm_stdio_reader *r, json_t **msg)
{
    *msg = NULL;
    r->detail[0] = '\0';
    for (;;) {
        char *nl = r->len > r->scan ? memchr(r->buf + r->scan, '\n', r->len - r->scan) : NULL;
        if (nl) {
            int rc = take_line(r, nl, msg);
            if (rc == 1)
                continue;
            if (rc == 0)
                r->why = "";
            return rc;
        }
        r->scan = r->len;
        size_t pending = r->len - r->pos;
        if (r->discarding || pending > r->max + 1) { /* +1: a '\r' may still end it */
            int first = !r->discarding;
            r->pos = r->scan = r->len = 0;
            r->discarding = 1;
            if (first) {
                r->lines++;
                return refuse(r, TIDEMARK_ERANGE, "line_too_long");
            }
        }
        if (r->eof) {
            if (r->len > r->pos && !r->discarding) { /* a last line without newline */
                int rc = parse_line(r, r->buf + r->pos, r->len - r->pos, msg);
                r->pos = r->scan = r->len;
                if (rc != 1) {
                    if (rc == 0)
                        r->why = "";
                    return rc;
                }
            }
            return TIDEMARK_ECLOSED;
        }
        int rc = fill(r);
        if (rc)
            return rc;
    }
}

/* ---- writer ---------------------------------------------------------------- */

int tm_stdio_writer_new(int fd, size_t max_message, int timeout_ms, tm_stdio_writer **out)
{
    *out = NULL;
    if (fd < 0 || timeout_ms < 0)
        return TIDEMARK_EINVAL;
    tm_stdio_writer *w = calloc(1, sizeof *w);
    if (!w)
        return TIDEMARK_ENOMEM;
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        free(w);
        return TIDEMARK_ENOMEM;
    }
    w->fd = fd;
    w->max = max_message ? max_message : TM_STDIO_DEFAULT_MAX;
    w->timeout_ms = timeout_ms;
    *out = w;
    return 0;
}

void tm_stdio_writer_free(tm_stdio_writer *w)
{
    if (!w)
        return;
    pthread_mutex_destroy(&w->mu);
    free(w);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait until fd takes more bytes. 0, TIDEMARK_ETIMEDOUT or TIDEMARK_EIO. */
static int wait_writable(const tm_stdio_writer *w, long long deadline)
{
    for (;;) {
        int t = -1;
        if (w->timeout_ms > 0) {
            long long left = deadline - now_ms();
            if (left <= 0)
                return TIDEMARK_ETIMEDOUT;
            t = (int)left;
        }
        struct pollfd pf = {.fd = w->fd, .events = POLLOUT};
        int n = poll(&pf, 1, t);
        if (n > 0)
            return 0; /* POLLERR/POLLHUP: the write says which */
        if (n == 0)
            return TIDEMARK_ETIMEDOUT;
        if (errno != EINTR)
            return TIDEMARK_EIO;
    }
}

/* Write all n bytes; SIGPIPE must be blocked by the caller. */
static int write_all(const tm_stdio_writer *w, const char *p, size_t n)
{
    long long deadline = now_ms() + w->timeout_ms;
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_writable(w, deadline);
            if (rc)
                return rc;
            continue;
        }
        if (k < 0 && (errno == EPIPE || errno == ECONNRESET))
            return TIDEMARK_ECLOSED;
        return TIDEMARK_EIO;
    }
    return 0;
}

/* write_all with SIGPIPE blocked in this thread; a SIGPIPE our write raised
 * is consumed, one that was already pending is left alone. */
static int write_nosigpipe(const tm_stdio_writer *w, const char *p, size_t n)
{
    sigset_t pipe_set, old, pend;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigemptyset(&pend);
    if (pthread_sigmask(SIG_BLOCK, &pipe_set, &old) != 0)
        return TIDEMARK_EIO;
    int was_pending = sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE);
    int rc = write_all(w, p, n);
    if (rc == TIDEMARK_ECLOSED && !was_pending) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    if (pthread_sigmask(SIG_SETMASK, &old, NULL) != 0 && rc == 0)
        rc = TIDEMARK_EIO;
    return rc;
}

/* p[0..n) is the line and p[n] the room for its newline. */
static int write_framed(tm_stdio_writer *w, char *p, size_t n)
{
    if (n > w->max)
        return TIDEMARK_ERANGE;
    p[n] = '\n';
    pthread_mutex_lock(&w->mu);
    int rc = w->broken ? TIDEMARK_ECLOSED : write_nosigpipe(w, p, n + 1);
    if (rc)
        w->broken = 1;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int tm_stdio_write(tm_stdio_writer *w, const json_t *msg)
{
    if (!msg)
        return TIDEMARK_EINVAL;
    char *s = json_dumps(msg, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return TIDEMARK_EINVAL;
    size_t n = strlen(s);
    if (memchr(s, '\n', n) || memchr(s, '\r', n)) { /* never: compact JSON escapes them */
        free(s);
        return TIDEMARK_EINVAL;
    }
    char *line = realloc(s, n + 1);
    if (!line) {
        free(s);
        return TIDEMARK_ENOMEM;
    }
    int rc = write_framed(w, line, n);
    free(line);
    return rc;
}

int tm_stdio_write_line(tm_stdio_writer *w, const char *line, size_t len)
{
    if (!line || memchr(line, '\n', len) || memchr(line, '\r', len) || memchr(line, '\0', len))
        return TIDEMARK_EINVAL;
    if (len > w->max)
        return TIDEMARK_ERANGE;
    char *p = malloc(len + 1);
    if (!p)
        return TIDEMARK_ENOMEM;
    memcpy(p, line, len);
    int rc = write_framed(w, p, len);
    free(p);
    return rc;
}
