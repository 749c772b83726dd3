/*
 * child.c - one supervised stdio child (child.h).
 *
 * Threads: reader (stdout -> on_message), errlog (stderr -> log), monitor
 * (waitid / waitpid -> on_exit). The monitor first waits with WNOWAIT, so
 * the pid stays a zombie, then reaps it under c->mu: every signal we send
 * is sent under c->mu after checking "not reaped", so it can never reach a
 * recycled pid.
 * Locks: c->mu guards reaped / ex / reader_done / exit_reported and is a
 * leaf (no callback, no write runs under it; signals and waitpid do).
 * c->in_lock (rwlock) guards in_fd: senders hold it shared (the writer's own
 * mutex serialises their lines), tm_child_close_stdin and free hold it
 * exclusively. Order: in_lock before the writer's mutex; c->mu never held
 * with either.
 */
#include "gateway/child.h"
#include "base/log.h"
#include "transport/stdio.h"
#include "tidemark/tidemark.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

struct tm_child {
    tm_child_config cfg; /* argv / envp / cwd not kept past spawn */
    char *name;
    pid_t pid;
    int in_fd, out_fd, err_fd;
    int cancel[2]; /* written to stop the reader / errlog threads */
    tm_stdio_writer *w;
    pthread_rwlock_t in_lock;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int reaped, reader_done, exit_reported;
    tm_child_exit ex;
    pthread_t reader, errlog, monitor;
    int have_reader, have_errlog, have_monitor;
};

static void deadline_after(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Wait on c->cv (c->mu held) until *flag or ms pass (ms < 0: forever). */
static int wait_flag(tm_child *c, const int *flag, int ms)
{
    struct timespec dl;
    if (ms >= 0)
        deadline_after(&dl, ms);
    while (!*flag) {
        if (ms < 0)
            pthread_cond_wait(&c->cv, &c->mu);
        else if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) == ETIMEDOUT)
            return *flag ? 0 : TIDEMARK_ETIMEDOUT;
    }
    return 0;
}

static void cancel_threads(tm_child *c)
{
    char b = 'x';
    while (write(c->cancel[1], &b, 1) < 0 && errno == EINTR)
        ;
}

/* c->mu held. */
static int signal_locked(tm_child *c, int sig)
{
    if (c->reaped)
        return TIDEMARK_ECLOSED;
    if (kill(-c->pid, sig) != 0 && kill(c->pid, sig) != 0)
        return errno == ESRCH ? TIDEMARK_ECLOSED : TIDEMARK_EIO;
    return 0;
}

int tm_child_signal(tm_child *c, int sig)
{
    pthread_mutex_lock(&c->mu);
    int rc = signal_locked(c, sig);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* SIGTERM, SIGKILL after grace_ms, wait for the reaping. */
static int terminate(tm_child *c, int grace_ms)
{
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    if (!c->reaped) {
        TM_DEBUG("child %s[%d]: SIGTERM", c->name, (int)c->pid);
        (void)signal_locked(c, SIGTERM); /* ECLOSED: it is going anyway */
        if (wait_flag(c, &c->reaped, grace_ms) != 0) {
            TM_WARN("child %s[%d]: still running %d ms after SIGTERM, SIGKILL", c->name, (int)c->pid,
                    grace_ms);
            (void)signal_locked(c, SIGKILL);
            rc = wait_flag(c, &c->reaped, 10000);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void *reader_main(void *arg)
{
    tm_child *c = arg;
    tm_stdio_reader *r = NULL;
    int rc = tm_stdio_reader_new(c->out_fd, c->cfg.max_message, c->cancel[0], &r);
    while (rc == 0 || rc == TIDEMARK_ERANGE || rc == TIDEMARK_EPROTO) {
        json_t *msg = NULL;
        rc = tm_stdio_read(r, &msg);
        if (rc == 0) {
            c->cfg.on_message(c->cfg.ud, c, msg);
            json_decref(msg);
        } else if (rc == TIDEMARK_ERANGE || rc == TIDEMARK_EPROTO) {
            unsigned long long line = 0;
            (void)tm_stdio_reader_lines(r, &line); /* cannot fail */
            TM_WARN("child %s[%d]: stdout line %llu refused: %s %s", c->name, (int)c->pid, line,
                    tm_stdio_reader_why(r), tm_stdio_reader_detail(r));
            if (c->cfg.on_bad_line)
                c->cfg.on_bad_line(c->cfg.ud, c, rc, tm_stdio_reader_why(r));
        }
    }
    tm_stdio_reader_free(r);
    pthread_mutex_lock(&c->mu);
    c->reader_done = 1;
    pthread_cond_broadcast(&c->cv);
    int alive = rc == TIDEMARK_ECLOSED && wait_flag(c, &c->reaped, c->cfg.kill_grace_ms) != 0;
    pthread_mutex_unlock(&c->mu);
    if (alive) {
        TM_WARN("child %s[%d]: closed its stdout, stopping it", c->name, (int)c->pid);
        (void)terminate(c, c->cfg.kill_grace_ms); /* the monitor reports the exit */
    }
    return NULL;
}

/* One stderr line into the log, control bytes shown as '?'. */
static void log_stderr_line(const tm_child *c, char *line, size_t n)
{
    if (n > 0 && line[n - 1] == '\r')
        n--;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)line[i] < 0x20 && line[i] != '\t')
            line[i] = '?';
    line[n] = '\0';
    TM_INFO("child %s[%d] stderr: %s", c->name, (int)c->pid, line);
}

static void *errlog_main(void *arg)
{
    tm_child *c = arg;
    char line[1025]; /* longer lines are logged in pieces */
    size_t n = 0;
    int after_cancel = 0;
    for (;;) {
        struct pollfd pf[2] = {{.fd = c->err_fd, .events = POLLIN}, {.fd = c->cancel[0], .events = POLLIN}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[1].revents && (!pf[0].revents || ++after_cancel > 64))
            break;
        if (!pf[0].revents)
            continue;
        char chunk[4096];
        ssize_t k = read(c->err_fd, chunk, sizeof chunk);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            break;
        for (ssize_t i = 0; i < k; i++) {
            if (chunk[i] == '\n' || n == sizeof line - 1) {
                log_stderr_line(c, line, n);
                n = 0;
                if (chunk[i] == '\n')
                    continue;
            }
            line[n++] = chunk[i];
        }
    }
    if (n > 0)
        log_stderr_line(c, line, n);
    return NULL;
}

static void *monitor_main(void *arg)
{
    tm_child *c = arg;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    while (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOWAIT) != 0 && errno == EINTR)
        ;
    int st = 0;
    pthread_mutex_lock(&c->mu);
    while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
        ;
    c->ex.pid = c->pid;
    c->ex.exited = WIFEXITED(st);
    c->ex.status = WIFEXITED(st) ? WEXITSTATUS(st) : 0;
    c->ex.signaled = WIFSIGNALED(st);
    c->ex.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    c->reaped = 1;
    pthread_cond_broadcast(&c->cv);
    int drained = wait_flag(c, &c->reader_done, c->cfg.drain_ms) == 0;
    pthread_mutex_unlock(&c->mu);
    if (!drained) {
        TM_WARN("child %s[%d]: stdout still open %d ms after exit (a descendant holds it?), "
                "no longer read", c->name, (int)c->pid, c->cfg.drain_ms);
        cancel_threads(c);
        /* The group outlives its leader and holds our pipe: stop it. The
         * group exists (a member holds stdout), so its id is not reused. */
        if (kill(-c->pid, SIGKILL) != 0 && errno != ESRCH)
            TM_WARN("child %s[%d]: cannot kill its process group: %s", c->name, (int)c->pid, strerror(errno));
    }
    pthread_join(c->reader, NULL);
    if (c->ex.exited)
        TM_INFO("child %s[%d]: exited with status %d", c->name, (int)c->pid, c->ex.status);
    else
        TM_INFO("child %s[%d]: killed by signal %d", c->name, (int)c->pid, c->ex.signal);
    if (c->cfg.on_exit)
        c->cfg.on_exit(c->cfg.ud, c, &c->ex);
    pthread_mutex_lock(&c->mu);
    c->exit_reported = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* The file actions and attributes of the child: its three fds, nothing
 * else, its own process group, default signals. */
static int spawn_setup(posix_spawn_file_actions_t *fa, posix_spawnattr_t *at, const int in[2],
                       const int out[2], const int err[2], const char *cwd)
{
    int e = posix_spawn_file_actions_adddup2(fa, in[0], 0);
    e = e ? e : posix_spawn_file_actions_adddup2(fa, out[1], 1);
    e = e ? e : posix_spawn_file_actions_adddup2(fa, err[1], 2);
    e = e ? e : posix_spawn_file_actions_addclosefrom_np(fa, 3);
    if (!e && cwd)
        e = posix_spawn_file_actions_addchdir_np(fa, cwd);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    int defaults[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        sigaddset(&dfl, defaults[i]);
    e = e ? e : posix_spawnattr_setflags(at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                 POSIX_SPAWN_SETSIGDEF);
    e = e ? e : posix_spawnattr_setpgroup(at, 0);
    e = e ? e : posix_spawnattr_setsigmask(at, &none);
    e = e ? e : posix_spawnattr_setsigdefault(at, &dfl);
    return e ? TIDEMARK_EIO : 0;
}

/* Pipes (all O_CLOEXEC), the process. On success the parent's ends are in c. */
static int spawn_process(tm_child *c, const tm_child_config *cfg)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
        int fds[] = {in[0], in[1], out[0], out[1], err[0], err[1]};
        for (int i = 0; i < 6; i++)
            close_fd(&fds[i]);
        return TIDEMARK_EIO;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int rc = TIDEMARK_EIO;
    if (posix_spawn_file_actions_init(&fa) == 0) {
        if (posix_spawnattr_init(&at) == 0) {
            rc = spawn_setup(&fa, &at, in, out, err, cfg->cwd);
            char *const *envp = cfg->envp ? (char *const *)cfg->envp : environ;
            int e = rc ? 0 : posix_spawnp(&c->pid, cfg->argv[0], &fa, &at, (char *const *)cfg->argv, envp);
            if (e) {
                TM_ERROR("child %s: cannot start: %s", c->name, strerror(e));
                rc = (e == ENOENT || e == EACCES || e == ENOEXEC || e == ENOTDIR) ? TIDEMARK_ENOTFOUND
                     : e == ENOMEM ? TIDEMARK_ENOMEM : TIDEMARK_EIO;
            }
            posix_spawnattr_destroy(&at);
        }
        posix_spawn_file_actions_destroy(&fa);
    }
    close_fd(&in[0]);
    close_fd(&out[1]);
    close_fd(&err[1]);
    c->in_fd = in[1];
    c->out_fd = out[0];
    c->err_fd = err[0];
    if (rc == 0 && fcntl(c->in_fd, F_SETFL, fcntl(c->in_fd, F_GETFL) | O_NONBLOCK) != 0)
        rc = TIDEMARK_EIO; /* the writer's timeout needs it; the child's end stays blocking */
    return rc;
}

static int child_alloc(const tm_child_config *cfg, tm_child **out)
{
    tm_child *c = calloc(1, sizeof *c);
    if (!c)
        return TIDEMARK_ENOMEM;
    c->cfg = *cfg;
    c->cfg.argv = NULL;
    c->cfg.envp = NULL;
    c->cfg.cwd = NULL;
    if (!c->cfg.write_timeout_ms)
        c->cfg.write_timeout_ms = 30000;
    if (!c->cfg.kill_grace_ms)
        c->cfg.kill_grace_ms = 2000;
    if (!c->cfg.drain_ms)
        c->cfg.drain_ms = 1000;
    c->in_fd = c->out_fd = c->err_fd = c->cancel[0] = c->cancel[1] = -1;
    const char *nm = cfg->name ? cfg->name : cfg->argv[0];
    const char *slash = cfg->name ? NULL : strrchr(nm, '/');
    c->name = strdup(slash ? slash + 1 : nm);
    pthread_condattr_t ca;
    int ok = c->name && pthread_condattr_init(&ca) == 0;
    if (ok) {
        ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&c->cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (!ok) {
        free(c->name);
        free(c);
        return TIDEMARK_ENOMEM;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_rwlock_init(&c->in_lock, NULL);
    *out = c;
    return 0;
}

static void child_release(tm_child *c)
{
    close_fd(&c->in_fd);
    close_fd(&c->out_fd);
    close_fd(&c->err_fd);
    close_fd(&c->cancel[0]);
    close_fd(&c->cancel[1]);
    tm_stdio_writer_free(c->w);
    pthread_rwlock_destroy(&c->in_lock);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->name);
    free(c);
}

/* No monitor runs: SIGKILL the group and reap the child here. The pid is
 * still ours (not reaped), so the signal cannot reach anyone else. */
static void reap_now(tm_child *c)
{
    if (kill(-c->pid, SIGKILL) != 0)
        (void)kill(c->pid, SIGKILL); /* ESRCH: it is already a zombie */
    while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* The process started but a thread did not: stop and reap it ourselves. */
static void abort_started(tm_child *c)
{
    if (c->have_monitor) {
        (void)terminate(c, 200);
        pthread_join(c->monitor, NULL);
    } else {
        reap_now(c);
        if (c->have_reader) {
            cancel_threads(c);
            pthread_join(c->reader, NULL);
        }
    }
    if (c->have_errlog) {
        cancel_threads(c);
        pthread_join(c->errlog, NULL);
    }
}

int tm_child_spawn(const tm_child_config *cfg, tm_child **out)
{
    *out = NULL;
    if (!cfg || !cfg->argv || !cfg->argv[0] || !cfg->on_message)
        return TIDEMARK_EINVAL;
    tm_child *c = NULL;
    int rc = child_alloc(cfg, &c);
    if (rc)
        return rc;
    if (pipe2(c->cancel, O_CLOEXEC) != 0) {
        child_release(c);
        return TIDEMARK_EIO;
    }
    rc = spawn_process(c, cfg);
    if (rc) {
        if (c->pid > 0)
            reap_now(c);
        child_release(c);
        return rc;
    }
    rc = tm_stdio_writer_new(c->in_fd, c->cfg.max_message, c->cfg.write_timeout_ms, &c->w);
    if (rc == 0)
        c->have_errlog = pthread_create(&c->errlog, NULL, errlog_main, c) == 0;
    if (rc == 0 && c->have_errlog)
        c->have_reader = pthread_create(&c->reader, NULL, reader_main, c) == 0;
    if (rc == 0 && c->have_reader)
        c->have_monitor = pthread_create(&c->monitor, NULL, monitor_main, c) == 0;
    if (rc == 0 && !c->have_monitor)
        rc = TIDEMARK_ENOMEM;
    if (rc) {
        abort_started(c);
        child_release(c);
        return rc;
    }
    TM_INFO("child %s[%d]: started", c->name, (int)c->pid);
    *out = c;
    return 0;
}

int tm_child_send(tm_child *c, const json_t *msg)
{
    pthread_rwlock_rdlock(&c->in_lock);
    int rc = c->in_fd < 0 ? TIDEMARK_ECLOSED : tm_stdio_write(c->w, msg);
    pthread_rwlock_unlock(&c->in_lock);
    return rc;
}

int tm_child_close_stdin(tm_child *c)
{
    pthread_rwlock_wrlock(&c->in_lock);
    close_fd(&c->in_fd);
    pthread_rwlock_unlock(&c->in_lock);
    return 0;
}

int tm_child_pid(const tm_child *c, pid_t *pid)
{
    *pid = c->pid;
    return 0;
}

int tm_child_running(tm_child *c, int *running)
{
    pthread_mutex_lock(&c->mu);
    *running = !c->reaped;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int tm_child_wait(tm_child *c, int timeout_ms, tm_child_exit *ex)
{
    pthread_mutex_lock(&c->mu);
    int rc = wait_flag(c, &c->reaped, timeout_ms);
    if (rc == 0 && ex)
        *ex = c->ex;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tm_child_kill(tm_child *c, int grace_ms)
{
    return terminate(c, grace_ms < 0 ? c->cfg.kill_grace_ms : grace_ms);
}

void tm_child_free(tm_child *c)
{
    if (!c)
        return;
    int running = 0;
    if (tm_child_running(c, &running) == 0 && running && tm_child_kill(c, -1) != 0)
        TM_ERROR("child %s[%d]: not reaped after SIGKILL", c->name, (int)c->pid);
    pthread_join(c->monitor, NULL); /* on_exit has run */
    cancel_threads(c);
    pthread_join(c->errlog, NULL);
    pthread_rwlock_wrlock(&c->in_lock);
    close_fd(&c->in_fd);
    pthread_rwlock_unlock(&c->in_lock);
    child_release(c);
}
