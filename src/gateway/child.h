/*
 * child.h - one supervised stdio child process (the MCP stdio transport's
 * client side: we launch the server and speak JSON lines to it).
 *
 * tm_child_spawn starts argv (looked up in our PATH, not envp's, when
 * argv[0] has no '/')
 * with the given environment and working directory, its stdin and stdout
 * on pipes and its stderr on a third pipe whose lines go to the project's
 * log as "child <name>[<pid>] stderr: <line>" (info level). The child gets
 * exactly fds 0, 1 and 2 (every fd of ours is O_CLOEXEC, and every fd from 3
 * up is closed in the child before exec, whoever opened it), the default
 * disposition of SIGPIPE, an empty signal mask, and its own process group
 * (so a signal reaches a wrapper's children too: npx, sh -c).
 *
 * Threads, three per child:
 *   reader   reads stdout (stdio.h), calls on_message for each message and
 *            on_bad_line for each refused line, in order;
 *   stderr   forwards stderr lines to the log;
 *   monitor  waitpid()s the child (so no zombie is ever left), then waits for
 *            the reader to drain stdout (at most drain_ms; then it is
 *            cancelled and the child's process group, which a descendant
 *            holding stdout open must still be in, gets SIGKILL) and calls on_exit
 *            exactly once, after the last on_message.
 * The callbacks run on those threads and may call tm_child_send,
 * tm_child_signal, tm_child_pid, tm_child_running; not tm_child_kill (from
 * on_message / on_exit) nor tm_child_free. If stdout reaches its end and
 * the process is still there kill_grace_ms later, the reader sends it
 * SIGTERM (and SIGKILL after another kill_grace_ms): a server without its
 * stdout cannot serve.
 *
 * Lock order: c->mu (exit state) is a leaf; the writer's own lock
 * (stdio.h) is taken without c->mu held.
 */
#ifndef TM_GATEWAY_CHILD_H
#define TM_GATEWAY_CHILD_H
#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct tm_child tm_child;

typedef struct tm_child_exit {
    pid_t pid;
    int exited;   /* 1: exited with status */
    int status;   /* exit status when exited */
    int signaled; /* 1: killed by signal */
    int signal;   /* the signal when signaled */
} tm_child_exit;

typedef struct tm_child_config {
    const char *const *argv; /* NULL-ended, argv[0] the program */
    const char *const *envp; /* NULL-ended; NULL: our environment */
    const char *cwd;         /* NULL: ours */
    const char *name;        /* for the log; NULL: argv[0] */
    size_t max_message;      /* 0: TM_STDIO_DEFAULT_MAX */
    int write_timeout_ms;    /* a send waiting on a full stdin pipe; 0: 30000 */
    int kill_grace_ms;       /* SIGTERM to SIGKILL; 0: 2000 */
    int drain_ms;            /* stdout drain after exit; 0: 1000 */
    /* msg is borrowed for the call (incref to keep it). */
    void (*on_message)(void *ud, tm_child *c, json_t *msg);
    /* err TIDEMARK_ERANGE / TIDEMARK_EPROTO, why as tm_stdio_reader_why. May be NULL. */
    void (*on_bad_line)(void *ud, tm_child *c, int err, const char *why);
    void (*on_exit)(void *ud, tm_child *c, const tm_child_exit *ex);
    void *ud;
} tm_child_config;

/* Start the child. OUT *out. Returns 0, TIDEMARK_EINVAL (no argv),
 * TIDEMARK_ENOTFOUND (no such program / not executable), TIDEMARK_EIO,
 * TIDEMARK_ENOMEM. On failure no process and no thread is left. */
int tm_child_spawn(const tm_child_config *cfg, tm_child **out);
/* One message on the child's stdin (tm_stdio_write). Thread-safe.
 * TIDEMARK_ECLOSED once the child's stdin is gone. */
int tm_child_send(tm_child *c, const json_t *msg);
/* Close the child's stdin (the polite way to ask a stdio server to stop). */
int tm_child_close_stdin(tm_child *c);
/* OUT *pid: the child's pid (also after it was reaped). Returns 0. */
int tm_child_pid(const tm_child *c, pid_t *pid);
/* OUT *running: 1 while the process has not been reaped. Returns 0. */
int tm_child_running(tm_child *c, int *running);
/* Send sig to the child's process group. TIDEMARK_ECLOSED if reaped. */
int tm_child_signal(tm_child *c, int sig);
/* Wait until the process has been reaped (timeout_ms < 0: forever). OUT *ex
 * (may be NULL). Returns 0 or TIDEMARK_ETIMEDOUT. */
int tm_child_wait(tm_child *c, int timeout_ms, tm_child_exit *ex);
/* SIGTERM, then SIGKILL after grace_ms (< 0: kill_grace_ms) if it still
 * runs; returns once it is reaped (0), TIDEMARK_ETIMEDOUT if even SIGKILL
 * was not enough within 10 s. Not from the child's own callbacks. */
int tm_child_kill(tm_child *c, int grace_ms);
/* Kill (if running), join every thread, close every fd, free. on_exit has
 * been called when this returns. Not from the child's own callbacks. */
void tm_child_free(tm_child *c);

#endif
