/* log.h - leveled diagnostics to stderr. */
#ifndef TM_LOG_H
#define TM_LOG_H

enum tm_log_level { TM_LOG_ERROR = 0, TM_LOG_WARN, TM_LOG_INFO, TM_LOG_DEBUG };
/* TEXT: "HH:MM:SS.mmm LEVEL message"; JSON: one object per line,
 * {"ts":"<ISO-8601 UTC, ms>","level":"info","msg":"..."}. */
enum tm_log_format { TM_LOG_TEXT = 0, TM_LOG_JSON };

/* Set the most verbose level printed. Thread-safe. */
void tm_log_set_level(enum tm_log_level lvl);
/* Choose the line format. Thread-safe. */
void tm_log_set_format(enum tm_log_format f);
/* Parse "text|json". Returns 0 or TIDEMARK_EINVAL. */
int tm_log_parse_format(const char *s, enum tm_log_format *out);
/* Parse "error|warn|info|debug". Returns 0 or TIDEMARK_EINVAL. */
int tm_log_parse_level(const char *s, enum tm_log_level *out);
void tm_log(enum tm_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define TM_ERROR(...) tm_log(TM_LOG_ERROR, __VA_ARGS__)
#define TM_WARN(...) tm_log(TM_LOG_WARN, __VA_ARGS__)
#define TM_INFO(...) tm_log(TM_LOG_INFO, __VA_ARGS__)
#define TM_DEBUG(...) tm_log(TM_LOG_DEBUG, __VA_ARGS__)

#endif
