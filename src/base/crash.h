/*
 * crash.h - crash points for fault tests, compiled into test builds only
 * (-DTIDEMARK_CRASH_POINTS). Armed at run time by an environment variable
 * "<point>:<n>": the process kills itself with SIGKILL the n-th time it
 * reaches <point>, as a real crash would (no cleanup, no flush).
 * TM_TEST_DELAY(env) sleeps the milliseconds that variable names (a slow
 * disk, to widen a window a test must hit).
 */
#ifndef TM_CRASH_H
#define TM_CRASH_H

#ifdef TIDEMARK_CRASH_POINTS
void tm_crash_point(const char *env, const char *point);
void tm_test_delay(const char *env);
#define TM_CRASH_POINT(env, point) tm_crash_point(env, point)
#define TM_TEST_DELAY(env) tm_test_delay(env)
#else
#define TM_CRASH_POINT(env, point) ((void)0)
#define TM_TEST_DELAY(env) ((void)0)
#endif

#endif
