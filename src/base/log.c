/* log.c - leveled diagnostics to stderr, one write per line. */
#include "log.h"
#include "tidemark/tidemark.h"
#include <stdarg.h>
#include <stdatomic.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_level = TM_LOG_INFO;
static atomic_int g_format = TM_LOG_TEXT;

void tm_log_set_level(enum tm_log_level lvl) { atomic_store(&g_level, (int)lvl); }
void tm_log_set_format(enum tm_log_format f) { atomic_store(&g_format, (int)f); }

int tm_log_parse_format(const char *s, enum tm_log_format *out)
{
    if (strcmp(s, "text") == 0)
        *out = TM_LOG_TEXT;
    else if (strcmp(s, "json") == 0)
        *out = TM_LOG_JSON;
    else
        return TIDEMARK_EINVAL;
    return 0;
}

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

/* One JSON line: the message goes through jansson, so any byte is escaped. */
static size_t json_line(char *out, size_t n, const struct timespec *ts, const struct tm *tmv,
                        enum tm_log_level lvl, const char *msg)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    char stamp[64];
    snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tmv->tm_year + 1900,
             tmv->tm_mon + 1, tmv->tm_mday, tmv->tm_hour, tmv->tm_min, tmv->tm_sec,
             ts->tv_nsec / 1000000);
    json_t *o = json_pack("{s:s,s:s,s:s}", "ts", stamp, "level", names[lvl], "msg", msg);
    char *txt = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    size_t len = txt ? strlen(txt) : 0;
    if (!txt || len + 2 > n) { /* too long or not UTF-8: say so rather than lose the line */
        free(txt);
        return (size_t)snprintf(out, n, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"(unprintable)\"}\n",
                                stamp, names[lvl]);
    }
    memcpy(out, txt, len);
    out[len++] = '\n';
    free(txt);
    return len;
}

void tm_log(enum tm_log_level lvl, const char *fmt, ...)
{
    static const char *tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    if ((int)lvl > atomic_load(&g_level))
        return;
    char msg[2048], line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tmv;
    gmtime_r(&ts.tv_sec, &tmv);
    size_t len;
    if (atomic_load(&g_format) == TM_LOG_JSON) {
        len = json_line(line, sizeof line, &ts, &tmv, lvl, msg);
    } else {
        int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %-5s %s\n", tmv.tm_hour,
                         tmv.tm_min, tmv.tm_sec, ts.tv_nsec / 1000000, tags[lvl], msg);
        len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
        if (len)
            line[len - 1] = '\n';
    }
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

int tidemark_log_set_level(const char *level)
{
    enum tm_log_level l;
    int rc = level ? tm_log_parse_level(level, &l) : TIDEMARK_EINVAL;
    if (rc == 0)
        tm_log_set_level(l);
    return rc;
}

int tidemark_log_set_format(const char *format)
{
    enum tm_log_format f;
    int rc = format ? tm_log_parse_format(format, &f) : TIDEMARK_EINVAL;
    if (rc == 0)
        tm_log_set_format(f);
    return rc;
}

void tidemark_log(const char *level, const char *fmt, ...)
{
    enum tm_log_level l;
    if (!level || tm_log_parse_level(level, &l) != 0)
        l = TM_LOG_INFO;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tm_log(l, "%s", msg);
}
