/* log.c - leveled diagnostics to stderr, one write per line. */
#include "log.h"
#include "tidemark/tidemark.h"
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_level = TM_LOG_INFO;

void tm_log_set_level(enum tm_log_level lvl) { atomic_store(&g_level, (int)lvl); }

int tm_log_parse_level(const char *s, enum tm_log_level *out)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (enum tm_log_level)i;
            return 0;
        }
    return TIDEMARK_EINVAL;
}

void tm_log(enum tm_log_level lvl, const char *fmt, ...)
{
    static const char *tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    if ((int)lvl > atomic_load(&g_level))
        return;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tmv;
    gmtime_r(&ts.tv_sec, &tmv);
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %-5s ", tmv.tm_hour, tmv.tm_min,
                     tmv.tm_sec, ts.tv_nsec / 1000000, tags[lvl]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
