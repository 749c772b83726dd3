/* test_stdio_child.c - one supervised stdio child (src/gateway/child.{c,h})
 * with sh and cat as children: messages both ways, stderr into the log with
 * the pid, exit status and signal reported once, SIGTERM then SIGKILL, only
 * fds 0/1/2 in the child, argv / environment / working directory, a child
 * that closes stdout, a descendant holding stdout after its parent exited,
 * a program that does not exist, and no zombie left behind. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "gateway/child.h"
#include "tidemark/tidemark.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    json_t *msgs; /* every message, in order */
    int bad;
    int exits;
    tm_child_exit ex;
} rec;

static void rec_init(rec *r)
{
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->msgs = json_array();
    r->bad = r->exits = 0;
}

static void rec_free(rec *r)
{
    json_decref(r->msgs);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

static void on_message(void *ud, tm_child *c, json_t *msg)
{
    (void)c;
    rec *r = ud;
    pthread_mutex_lock(&r->mu);
    json_array_append(r->msgs, msg);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void on_bad_line(void *ud, tm_child *c, int err, const char *why)
{
    (void)c;
    (void)err;
    (void)why;
    rec *r = ud;
    pthread_mutex_lock(&r->mu);
    r->bad++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void on_exit_cb(void *ud, tm_child *c, const tm_child_exit *ex)
{
    (void)c;
    rec *r = ud;
    pthread_mutex_lock(&r->mu);
    r->exits++;
    r->ex = *ex;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Wait (10 s at most) until at least n messages arrived. */
static void wait_msgs(rec *r, size_t n)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    pthread_mutex_lock(&r->mu);
    while (json_array_size(r->msgs) < n)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT)
            break;
    size_t got = json_array_size(r->msgs);
    pthread_mutex_unlock(&r->mu);
    if (got < n)
        fail_msg("%zu message(s) within 10 s, expected %zu", got, n);
}

static tm_child *spawn_sh(rec *r, const char *script)
{
    const char *argv[] = {"sh", "-c", script, NULL};
    tm_child_config cfg = {.argv = argv, .on_message = on_message, .on_bad_line = on_bad_line,
                           .on_exit = on_exit_cb, .ud = r, .kill_grace_ms = 300, .drain_ms = 300};
    tm_child *c = NULL;
    assert_int_equal(tm_child_spawn(&cfg, &c), 0);
    return c;
}

static pid_t pid_of(const tm_child *c)
{
    pid_t pid = 0;
    assert_int_equal(tm_child_pid(c, &pid), 0);
    return pid;
}

/* The pid was ours and is reaped: not a child of ours any more. */
static void assert_reaped(pid_t pid)
{
    assert_int_equal(waitpid(pid, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

/* cat echoes what we send; closing its stdin ends it with status 0. */
static void test_cat_round_trip(void **state)
{
    (void)state;
    rec r;
    rec_init(&r);
    const char *argv[] = {"cat", NULL};
    tm_child_config cfg = {.argv = argv, .on_message = on_message, .on_exit = on_exit_cb, .ud = &r};
    tm_child *c = NULL;
    assert_int_equal(tm_child_spawn(&cfg, &c), 0);
    pid_t pid = pid_of(c);
    assert_true(pid > 0);
    for (int i = 0; i < 3; i++) {
        json_t *m = json_pack("{s:s,s:i,s:s}", "jsonrpc", "2.0", "id", i, "method", "x\ny");
        assert_int_equal(tm_child_send(c, m), 0);
        json_decref(m);
    }
    wait_msgs(&r, 3);
    for (int i = 0; i < 3; i++) {
        json_t *m = json_array_get(r.msgs, (size_t)i);
        assert_int_equal(json_integer_value(json_object_get(m, "id")), i);
        assert_string_equal(json_string_value(json_object_get(m, "method")), "x\ny");
    }
    assert_int_equal(tm_child_close_stdin(c), 0);
    tm_child_exit ex;
    assert_int_equal(tm_child_wait(c, 10000, &ex), 0);
    assert_int_equal(ex.exited, 1);
    assert_int_equal(ex.status, 0);
    assert_int_equal(tm_child_send(c, json_array_get(r.msgs, 0)), TIDEMARK_ECLOSED);
    tm_child_free(c);
    assert_int_equal(r.exits, 1);
    assert_int_equal(r.ex.pid, pid);
    assert_reaped(pid);
    rec_free(&r);
}

/* Read what fd 2 received while fn ran. */
static char *capture_stderr(void (*fn)(void *), void *arg)
{
    char path[] = "/tmp/tm-child-stderr-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fd, 2), 2);
    fn(arg);
    fflush(stderr);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_END);
    char *s = calloc(1, (size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(pread(fd, s, (size_t)n, 0), n);
    close(fd);
    return s;
}

typedef struct stderr_run {
    rec r;
    pid_t pid;
} stderr_run;

static void run_stderr_child(void *arg)
{
    stderr_run *s = arg;
    tm_child *c = spawn_sh(&s->r, "echo 'hello from stderr' >&2; printf 'second\\tline\\033x\\n' >&2; "
                                  "echo 'not json'; printf '{\"n\":1}\\n'; exit 3");
    s->pid = pid_of(c);
    assert_int_equal(tm_child_wait(c, 10000, NULL), 0);
    tm_child_free(c);
}

/* stderr lines in the log with the pid; a non-JSON stdout line refused and
 * the stream goes on; exit status 3 reported once. */
static void test_stderr_and_status(void **state)
{
    (void)state;
    stderr_run s;
    rec_init(&s.r);
    char *log = capture_stderr(run_stderr_child, &s);
    char want[128];
    snprintf(want, sizeof want, "child sh[%d] stderr: hello from stderr", (int)s.pid);
    if (!strstr(log, want))
        fail_msg("no \"%s\" in the log:\n%s", want, log);
    snprintf(want, sizeof want, "child sh[%d] stderr: second\tline?x", (int)s.pid);
    if (!strstr(log, want))
        fail_msg("no \"%s\" in the log:\n%s", want, log);
    assert_int_equal(json_array_size(s.r.msgs), 1);
    assert_int_equal(s.r.bad, 1);
    assert_int_equal(s.r.exits, 1);
    assert_int_equal(s.r.ex.exited, 1);
    assert_int_equal(s.r.ex.status, 3);
    assert_reaped(s.pid);
    free(log);
    rec_free(&s.r);
}

/* SIGTERM ends a plain child; one that ignores SIGTERM gets SIGKILL after
 * the grace period. */
static void test_kill_escalation(void **state)
{
    (void)state;
    rec r;
    rec_init(&r);
    tm_child *c = spawn_sh(&r, "printf '{\"ready\":1}\\n'; exec sleep 30");
    wait_msgs(&r, 1);
    assert_int_equal(tm_child_kill(c, 2000), 0);
    tm_child_free(c);
    assert_int_equal(r.ex.signaled, 1);
    assert_int_equal(r.ex.signal, SIGTERM);
    rec_free(&r);

    rec_init(&r);
    c = spawn_sh(&r, "trap '' TERM; printf '{\"ready\":1}\\n'; while :; do sleep 1; done");
    pid_t pid = pid_of(c);
    wait_msgs(&r, 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(tm_child_kill(c, 300), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    assert_true(ms >= 250);
    tm_child_free(c);
    assert_int_equal(r.exits, 1);
    assert_int_equal(r.ex.signaled, 1);
    assert_int_equal(r.ex.signal, SIGKILL);
    assert_reaped(pid);
    rec_free(&r);
}

/* Only 0, 1 and 2 in the child, even with fds of ours open without
 * O_CLOEXEC. */
static void test_no_fd_leak(void **state)
{
    (void)state;
    int leaky = open("/dev/null", O_RDONLY); /* no O_CLOEXEC on purpose */
    assert_true(leaky >= 0);
    int leaky2 = dup(leaky);
    assert_true(leaky2 >= 0);
    rec r;
    rec_init(&r);
    /* [ -e ] and printf are dash builtins: nothing opens an fd in the loop */
    tm_child *c = spawn_sh(&r, "for i in $(seq 0 200); do [ -e /proc/$$/fd/$i ] && "
                               "printf '{\"fd\":\"%s\"}\\n' $i; done; true");
    assert_int_equal(tm_child_wait(c, 10000, NULL), 0);
    tm_child_free(c);
    char seen[64] = "";
    for (size_t i = 0; i < json_array_size(r.msgs); i++) {
        strcat(seen, json_string_value(json_object_get(json_array_get(r.msgs, i), "fd")));
        strcat(seen, " ");
    }
    assert_string_equal(seen, "0 1 2 ");
    close(leaky);
    close(leaky2);
    rec_free(&r);
}

/* argv reaches the program as given; envp replaces the environment; cwd. */
static void test_argv_env_cwd(void **state)
{
    (void)state;
    rec r;
    rec_init(&r);
    const char *argv[] = {"sh", "-c", "printf '{\"a\":\"%s\",\"cwd\":\"%s\",\"v\":\"%s\",\"home\":\"%s\"}\\n' "
                          "\"$1\" \"$(pwd -P)\" \"$TM_V\" \"${HOME:-none}\"",
                          "sh", "one arg with spaces", NULL};
    const char *envp[] = {"TM_V=hello", "PATH=/usr/bin:/bin", NULL};
    tm_child_config cfg = {.argv = argv, .envp = envp, .cwd = "/", .on_message = on_message,
                           .on_exit = on_exit_cb, .ud = &r};
    tm_child *c = NULL;
    assert_int_equal(tm_child_spawn(&cfg, &c), 0);
    wait_msgs(&r, 1);
    tm_child_free(c);
    json_t *m = json_array_get(r.msgs, 0);
    assert_string_equal(json_string_value(json_object_get(m, "a")), "one arg with spaces");
    assert_string_equal(json_string_value(json_object_get(m, "cwd")), "/");
    assert_string_equal(json_string_value(json_object_get(m, "v")), "hello");
    assert_string_equal(json_string_value(json_object_get(m, "home")), "none");
    rec_free(&r);
}

/* A child that closes its stdout but lives on is stopped (SIGTERM). */
static void test_stdout_closed(void **state)
{
    (void)state;
    rec r;
    rec_init(&r);
    tm_child *c = spawn_sh(&r, "exec 1>&-; exec sleep 30");
    pid_t pid = pid_of(c);
    tm_child_exit ex;
    assert_int_equal(tm_child_wait(c, 10000, &ex), 0);
    assert_int_equal(ex.signaled, 1);
    assert_int_equal(ex.signal, SIGTERM);
    tm_child_free(c);
    assert_int_equal(r.exits, 1);
    assert_reaped(pid);
    rec_free(&r);
}

static int process_gone(pid_t pid)
{
    char path[64], st[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = '\0';
    const char *p = strrchr(st, ')');
    return p && p[1] == ' ' && p[2] == 'Z'; /* a zombie of someone else's */
}

/* The child exits while a background descendant holds its stdout: on_exit
 * still comes (after drain_ms) and the descendant is killed with the group. */
static void test_descendant_holds_stdout(void **state)
{
    (void)state;
    rec r;
    rec_init(&r);
    tm_child *c = spawn_sh(&r, "sleep 20 & printf '{\"bg\":%d}\\n' $!; exit 0");
    wait_msgs(&r, 1);
    pid_t bg = (pid_t)json_integer_value(json_object_get(json_array_get(r.msgs, 0), "bg"));
    assert_true(bg > 0);
    assert_int_equal(tm_child_wait(c, 10000, NULL), 0); /* sh exits by itself */
    tm_child_free(c); /* returns once on_exit ran */
    assert_int_equal(r.exits, 1);
    assert_int_equal(r.ex.exited, 1);
    struct timespec dl, now;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += 5;
    while (!process_gone(bg)) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > dl.tv_sec) {
            kill(bg, SIGKILL);
            fail_msg("the descendant %d still runs", (int)bg);
        }
        usleep(10000);
    }
    rec_free(&r);
}

static void test_not_found(void **state)
{
    (void)state;
    rec r;
    rec_init(&r);
    const char *argv[] = {"/nonexistent/tm-no-such-program", NULL};
    tm_child_config cfg = {.argv = argv, .on_message = on_message, .ud = &r};
    tm_child *c = NULL;
    assert_int_equal(tm_child_spawn(&cfg, &c), TIDEMARK_ENOTFOUND);
    assert_null(c);
    const char *argv2[] = {"tm-no-such-program-in-path", NULL};
    cfg.argv = argv2;
    assert_int_equal(tm_child_spawn(&cfg, &c), TIDEMARK_ENOTFOUND);
    const char *argv3[] = {"sh", NULL};
    cfg.argv = argv3;
    cfg.cwd = "/nonexistent-dir";
    assert_int_equal(tm_child_spawn(&cfg, &c), TIDEMARK_ENOTFOUND);
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1); /* no child of ours at all */
    assert_int_equal(errno, ECHILD);
    rec_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cat_round_trip),
        cmocka_unit_test(test_stderr_and_status),
        cmocka_unit_test(test_kill_escalation),
        cmocka_unit_test(test_no_fd_leak),
        cmocka_unit_test(test_argv_env_cwd),
        cmocka_unit_test(test_stdout_closed),
        cmocka_unit_test(test_descendant_holds_stdout),
        cmocka_unit_test(test_not_found),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
