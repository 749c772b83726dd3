/*
 * upstream.c - the MCP session with one stdio child (upstream.h).
 *
 * Threads: the child's reader (on_message: responses, notifications,
 * requests of the child), the child's monitor (on_exit: marks the death),
 * the upstream's supervisor (a death: resend / lost, restart, handshake),
 * and the callers of tm_upstream_*.
 * Locks, in this order:
 *   u->child_lock  rwlock over u->child: held shared while writing to the
 *                  child (so it is not freed under a writer), exclusive only
 *                  to swap the pointer (never while a child is being freed:
 *                  tm_child_free joins the reader, which may be in a
 *                  callback that writes to the child);
 *   u->mu          state, generation, the maps and the entry list;
 *   then the child's own locks (child.h) inside tm_child_send / signal.
 * No callback is called with either held. A child's callbacks carry a
 * spawn context with its generation: anything from an older generation is
 * dropped.
 */
#include "gateway/upstream.h"
#include "base/log.h"
#include "base/map.h"
#include "mcp/jsonrpc.h"
#include "tidemark/tidemark.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOKEN_PREFIX "tm-p-"

typedef struct entry {
    struct entry *prev, *next;
    void *tag;
    json_t *request;      /* the client's, a private copy */
    json_t *client_token; /* the request's progress token, or NULL */
    json_int_t child_id;  /* 0 while waiting for a child */
    unsigned flags;
    int resends;
    int sent; /* 1: written to the current child */
} entry;

enum ustate { U_STARTING, U_READY, U_DOWN, U_STOPPED };

typedef struct spawn_ctx {
    tm_upstream *u;
    unsigned gen;
} spawn_ctx;

struct tm_upstream {
    tm_upstream_config cfg;
    char **argv, **envp;
    char *cwd, *name;
    json_t *init_params;
    pthread_rwlock_t child_lock;
    tm_child *child;
    spawn_ctx *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Callbacks naming a tag that are due or running outside u->mu (a
     * response, a progress notification, a lost request): u->mu. A cancel
     * waits for them, so no callback for a tag comes after its cancel. */
    unsigned tag_cbs;
    enum ustate state;
    unsigned gen;
    int child_dead, down_pending, stop;
    tm_child_exit last_exit;
    json_int_t next_id, init_id;
    int init_done;
    json_t *init_reply, *init_result;
    entry *head, *tail; /* in the order the requests came */
    size_t count;
    tm_map *by_id, *by_tag, *srv_reqs;
    pthread_t sup;
    int have_sup;
};

/* ---- small helpers --------------------------------------------------------- */

static void id_key(json_int_t id, char *out, size_t n) { snprintf(out, n, "i:%" JSON_INTEGER_FORMAT, id); }
static void tag_key(const void *tag, char *out, size_t n) { snprintf(out, n, "%p", tag); }

static void entry_free(entry *e)
{
    if (!e)
        return;
    json_decref(e->request);
    json_decref(e->client_token);
    free(e);
}

/* u->mu held: take e out of the list and both maps. */
static void entry_unlink(tm_upstream *u, entry *e)
{
    char k[64];
    if (e->child_id) {
        id_key(e->child_id, k, sizeof k);
        (void)tm_map_del(u->by_id, k);
    }
    tag_key(e->tag, k, sizeof k);
    (void)tm_map_del(u->by_tag, k);
    if (e->prev)
        e->prev->next = e->next;
    else
        u->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        u->tail = e->prev;
    e->prev = e->next = NULL;
    u->count--;
}

/* u->mu held: a fresh child id for e, in by_id. */
static int entry_assign_id(tm_upstream *u, entry *e)
{
    char k[64];
    if (e->child_id) {
        id_key(e->child_id, k, sizeof k);
        (void)tm_map_del(u->by_id, k);
    }
    e->child_id = u->next_id++;
    id_key(e->child_id, k, sizeof k);
    return tm_map_put(u->by_id, k, e);
}

/* What the child gets for e: the client's request with our id and, when it
 * has one, our progress token. New reference or NULL. */
static json_t *entry_wire(const entry *e)
{
    json_t *w = json_copy(e->request);
    if (!w || json_object_set_new(w, "id", json_integer(e->child_id)) != 0) {
        json_decref(w);
        return NULL;
    }
    if (!e->client_token)
        return w;
    char tok[64];
    snprintf(tok, sizeof tok, TOKEN_PREFIX "%" JSON_INTEGER_FORMAT, e->child_id);
    json_t *params = json_copy(json_object_get(w, "params"));
    json_t *meta = json_copy(json_object_get(params, "_meta"));
    int bad = !params || !meta || json_object_set_new(meta, "progressToken", json_string(tok)) != 0 ||
              json_object_set_new(params, "_meta", meta) != 0;
    meta = NULL; /* owned by params from here, or freed below */
    bad = bad || json_object_set_new(w, "params", params) != 0;
    if (bad) {
        json_decref(w);
        return NULL;
    }
    return w;
}

/* Write msg to the current child; caller holds u->child_lock shared. A
 * failed write kills the child: its death then settles what was in flight. */
static int send_locked(tm_upstream *u, const json_t *msg)
{
    if (!u->child)
        return TIDEMARK_ECLOSED;
    int rc = tm_child_send(u->child, msg);
    if (rc != 0) {
        TM_WARN("upstream %s: write to the child failed (%s), killing it", u->name, tidemark_strerror(rc));
        (void)tm_child_signal(u->child, SIGKILL); /* ECLOSED: already gone */
    }
    return rc;
}

static int send_msg(tm_upstream *u, const json_t *msg)
{
    pthread_rwlock_rdlock(&u->child_lock);
    int rc = send_locked(u, msg);
    pthread_rwlock_unlock(&u->child_lock);
    return rc;
}

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

/* ---- messages from the child (its reader thread) --------------------------- */

/* A tag's callback is over (see tag_cbs). */
static void tag_cb_done(tm_upstream *u)
{
    pthread_mutex_lock(&u->mu);
    u->tag_cbs--;
    pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

/* u->mu held on entry, released on return. */
static void on_child_response(tm_upstream *u, const tm_msg *m)
{
    json_t *id = m->id;
    if (json_is_integer(id) && json_integer_value(id) == u->init_id && !u->init_done) {
        u->init_reply = json_incref(m->raw);
        u->init_done = 1;
        pthread_cond_broadcast(&u->cv);
        pthread_mutex_unlock(&u->mu);
        return;
    }
    char k[TM_ID_KEY_MAX];
    entry *e = NULL;
    if (tm_jsonrpc_id_key(id, k, sizeof k) == 0)
        e = tm_map_get(u->by_id, k);
    if (!e || !e->sent) {
        pthread_mutex_unlock(&u->mu);
        TM_DEBUG("upstream %s: response to no request in flight (%s), dropped", u->name, k);
        return;
    }
    entry_unlink(u, e);
    u->tag_cbs++;
    pthread_mutex_unlock(&u->mu);
    json_t *resp = json_copy(m->raw);
    if (!resp || json_object_set(resp, "id", json_object_get(e->request, "id")) != 0) {
        TM_ERROR("upstream %s: out of memory for a response", u->name);
        if (u->cfg.cb.on_lost)
            u->cfg.cb.on_lost(u->cfg.cb.ud, e->tag, e->request, TIDEMARK_ENOMEM);
    } else if (u->cfg.cb.on_response) {
        u->cfg.cb.on_response(u->cfg.cb.ud, e->tag, resp);
    }
    json_decref(resp);
    entry_free(e);
    tag_cb_done(u);
}

/* A notifications/progress with one of our tokens: the client's token back.
 * u->mu held. OUT *tag. New reference or NULL (not ours / not in flight). */
static json_t *progress_for_client(tm_upstream *u, const tm_msg *m, void **tag)
{
    const char *tok = json_string_value(json_object_get(m->params, "progressToken"));
    if (!tok || strncmp(tok, TOKEN_PREFIX, strlen(TOKEN_PREFIX)) != 0)
        return NULL;
    char k[64];
    snprintf(k, sizeof k, "i:%s", tok + strlen(TOKEN_PREFIX));
    entry *e = tm_map_get(u->by_id, k);
    if (!e || !e->client_token)
        return NULL;
    json_t *out = json_copy(m->raw);
    json_t *params = json_copy(m->params);
    if (!out || !params || json_object_set(params, "progressToken", e->client_token) != 0 ||
        json_object_set_new(out, "params", params) != 0) {
        json_decref(out);
        return NULL;
    }
    *tag = e->tag;
    u->tag_cbs++; /* on_child_notification calls for it */
    return out;
}

/* u->mu held on entry, released on return. */
static void on_child_notification(tm_upstream *u, const tm_msg *m)
{
    void *tag = NULL;
    json_t *out = NULL;
    if (strcmp(m->method, "notifications/progress") == 0) {
        out = progress_for_client(u, m, &tag);
        if (!out) {
            pthread_mutex_unlock(&u->mu);
            TM_DEBUG("upstream %s: progress for no request in flight, dropped", u->name);
            return;
        }
    } else if (strcmp(m->method, "notifications/cancelled") == 0) {
        char k[TM_ID_KEY_MAX]; /* the child gave up a request of its own */
        if (tm_jsonrpc_id_key(json_object_get(m->params, "requestId"), k, sizeof k) == 0)
            (void)tm_map_del(u->srv_reqs, k);
    }
    pthread_mutex_unlock(&u->mu);
    if (u->cfg.cb.on_notification)
        u->cfg.cb.on_notification(u->cfg.cb.ud, tag, out ? out : m->raw);
    json_decref(out);
    if (tag)
        tag_cb_done(u);
}

/* u->mu held on entry, released on return. */
static void on_child_request(tm_upstream *u, const tm_msg *m)
{
    char k[TM_ID_KEY_MAX];
    unsigned gen = u->gen;
    int rc = tm_jsonrpc_id_key(m->id, k, sizeof k);
    if (rc == 0)
        rc = tm_map_put(u->srv_reqs, k, u);
    pthread_mutex_unlock(&u->mu);
    if (rc != 0) {
        TM_ERROR("upstream %s: cannot track the child's %s request: %s", u->name, m->method,
                 tidemark_strerror(rc));
        return;
    }
    if (u->cfg.cb.on_request)
        u->cfg.cb.on_request(u->cfg.cb.ud, gen, m->raw);
}

static void child_message(void *ud, tm_child *c, json_t *msg)
{
    (void)c;
    spawn_ctx *ctx = ud;
    tm_upstream *u = ctx->u;
    if (json_is_array(msg)) { /* a 2025-03-26 batch: its messages one by one, in order */
        size_t i;
        json_t *one;
        json_array_foreach(msg, i, one)
            if (!json_is_array(one)) /* no batch inside a batch */
                child_message(ud, c, one);
        return;
    }
    tm_msg m;
    tm_jsonrpc_classify(msg, &m);
    pthread_mutex_lock(&u->mu);
    if (ctx->gen != u->gen) {
        pthread_mutex_unlock(&u->mu);
        return;
    }
    switch (m.kind) {
    case TM_MSG_RESULT:
    case TM_MSG_ERROR:
        on_child_response(u, &m);
        return;
    case TM_MSG_NOTIFICATION:
        on_child_notification(u, &m);
        return;
    case TM_MSG_REQUEST:
        on_child_request(u, &m);
        return;
    default:
        pthread_mutex_unlock(&u->mu);
        TM_WARN("upstream %s: the child sent an invalid message (%s: %s), dropped", u->name,
                m.why ? m.why : "?", m.detail ? m.detail : "");
        return;
    }
}

static void child_exit(void *ud, tm_child *c, const tm_child_exit *ex)
{
    (void)c;
    spawn_ctx *ctx = ud;
    tm_upstream *u = ctx->u;
    pthread_mutex_lock(&u->mu);
    if (ctx->gen == u->gen && !u->child_dead) {
        u->child_dead = 1;
        u->last_exit = *ex;
        if (u->state == U_READY) {
            u->state = U_DOWN;
            u->down_pending = 1;
        }
        pthread_cond_broadcast(&u->cv);
    }
    pthread_mutex_unlock(&u->mu);
}

/* ---- starting a child: spawn, initialize, initialized ------------------------ */

/* Swap the child out and free it (kills it if it runs; on_exit has run when
 * this returns). Not with any lock held. */
static void drop_child(tm_upstream *u)
{
    pthread_rwlock_wrlock(&u->child_lock);
    tm_child *c = u->child;
    u->child = NULL;
    pthread_rwlock_unlock(&u->child_lock);
    tm_child_free(c);
    pthread_mutex_lock(&u->mu);
    spawn_ctx *ctx = u->ctx;
    u->ctx = NULL;
    pthread_mutex_unlock(&u->mu);
    free(ctx);
}

static int spawn_child(tm_upstream *u)
{
    spawn_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return TIDEMARK_ENOMEM;
    pthread_mutex_lock(&u->mu);
    ctx->u = u;
    ctx->gen = ++u->gen;
    u->ctx = ctx;
    u->state = U_STARTING;
    u->child_dead = 0;
    u->init_done = 0;
    json_decref(u->init_reply);
    u->init_reply = NULL;
    u->init_id = u->next_id++;
    pthread_mutex_unlock(&u->mu);
    tm_child_config cc = {
        .argv = (const char *const *)u->argv, .envp = (const char *const *)u->envp, .cwd = u->cwd,
        .name = u->name, .max_message = u->cfg.max_message, .kill_grace_ms = u->cfg.kill_grace_ms,
        .on_message = child_message, .on_exit = child_exit, .ud = ctx,
    };
    tm_child *c = NULL;
    int rc = tm_child_spawn(&cc, &c);
    pthread_rwlock_wrlock(&u->child_lock);
    u->child = c;
    pthread_rwlock_unlock(&u->child_lock);
    if (rc != 0) {
        pthread_mutex_lock(&u->mu);
        u->ctx = NULL;
        u->child_dead = 1;
        pthread_mutex_unlock(&u->mu);
        free(ctx);
    }
    return rc;
}

/* initialize and its answer. OUT *result (new reference). */
static int initialize(tm_upstream *u, json_t **result)
{
    *result = NULL;
    pthread_mutex_lock(&u->mu);
    json_int_t id = u->init_id;
    pthread_mutex_unlock(&u->mu);
    json_t *req = tm_jsonrpc_request(json_integer(id), "initialize", json_incref(u->init_params));
    int rc = req ? send_msg(u, req) : TIDEMARK_ENOMEM;
    json_decref(req);
    if (rc)
        return rc;
    struct timespec dl;
    deadline_after(&dl, u->cfg.init_timeout_ms);
    pthread_mutex_lock(&u->mu);
    while (!u->init_done && !u->child_dead && !u->stop && rc == 0)
        if (pthread_cond_timedwait(&u->cv, &u->mu, &dl) == ETIMEDOUT)
            rc = TIDEMARK_ETIMEDOUT;
    if (u->init_done) {
        json_t *res = json_object_get(u->init_reply, "result");
        rc = json_is_object(res) ? 0 : TIDEMARK_EPEER;
        *result = rc == 0 ? json_incref(res) : NULL;
        if (rc)
            TM_ERROR("upstream %s: the child refused initialize", u->name);
    } else if (rc == 0) {
        rc = u->stop ? TIDEMARK_ECANCELED : TIDEMARK_ECLOSED;
    }
    pthread_mutex_unlock(&u->mu);
    return rc;
}

/* u->mu held: the child is ready; hand back the requests waiting for it, in
 * the order they came, each with a fresh id and marked sent. */
static json_t *take_waiting(tm_upstream *u)
{
    json_t *wires = json_array();
    for (entry *e = u->head; e && wires; e = e->next) {
        if (e->sent)
            continue;
        json_t *w = entry_assign_id(u, e) == 0 ? entry_wire(e) : NULL;
        if (!w || json_array_append_new(wires, w) != 0) {
            TM_ERROR("upstream %s: out of memory re-sending a request", u->name);
            continue; /* stays waiting: lost at the next death or at free */
        }
        e->sent = 1;
    }
    return wires;
}

/* Spawn, handshake, then send what waited. 0 or the reason it failed (the
 * child is then gone). */
static int start_child(tm_upstream *u)
{
    int rc = spawn_child(u);
    json_t *result = NULL;
    if (rc == 0)
        rc = initialize(u, &result);
    if (rc == 0) {
        json_t *n = tm_jsonrpc_notification("notifications/initialized", NULL);
        rc = n ? send_msg(u, n) : TIDEMARK_ENOMEM;
        json_decref(n);
    }
    json_t *wires = NULL;
    pthread_mutex_lock(&u->mu);
    unsigned gen = u->gen;
    if (rc == 0 && (u->child_dead || u->stop))
        rc = u->stop ? TIDEMARK_ECANCELED : TIDEMARK_ECLOSED;
    if (rc == 0) {
        u->state = U_READY;
        json_decref(u->init_result);
        u->init_result = json_incref(result);
        wires = take_waiting(u);
    } else if (u->state != U_STOPPED) {
        u->state = U_DOWN;
    }
    pthread_mutex_unlock(&u->mu);
    if (rc != 0) {
        TM_WARN("upstream %s: generation %u did not start: %s", u->name, gen, tidemark_strerror(rc));
        json_decref(result);
        drop_child(u);
        return rc;
    }
    size_t i;
    json_t *w;
    pthread_rwlock_rdlock(&u->child_lock);
    json_array_foreach(wires, i, w)
        (void)send_locked(u, w); /* a failure kills the child: the death re-settles them */
    pthread_rwlock_unlock(&u->child_lock);
    TM_INFO("upstream %s: generation %u ready (%zu request(s) re-sent)", u->name, gen, json_array_size(wires));
    json_decref(wires);
    if (u->cfg.cb.on_ready)
        u->cfg.cb.on_ready(u->cfg.cb.ud, gen, result);
    json_decref(result);
    return 0;
}

/* ---- a death: settle what was in flight, restart ---------------------------- */

static void report_lost(tm_upstream *u, entry *lost, int err)
{
    while (lost) {
        entry *next = lost->next;
        if (u->cfg.cb.on_lost)
            u->cfg.cb.on_lost(u->cfg.cb.ud, lost->tag, lost->request, err);
        entry_free(lost);
        tag_cb_done(u);
        lost = next;
    }
}

/* u->mu held: unlink every entry (all = 1) or every sent one that may not be
 * re-sent; the others wait for the next child. Returns the unlinked list. */
static entry *settle(tm_upstream *u, int all, int restarting)
{
    entry *lost = NULL, **end = &lost, *e = u->head;
    while (e) {
        entry *next = e->next;
        int resend = restarting && (e->flags & TM_UPSTREAM_RESEND) && e->resends < u->cfg.max_resends;
        if (all || (e->sent && !resend)) {
            entry_unlink(u, e); /* the lost list keeps the order of the requests */
            *end = e;
            end = &e->next;
            u->tag_cbs++; /* its on_lost is due (report_lost) */
        } else if (e->sent) {
            e->sent = 0;
            e->resends++;
        }
        e = next;
    }
    return lost;
}

/* u->mu held: the child's requests die with it. */
static void forget_child_requests(tm_upstream *u)
{
    tm_map *fresh = tm_map_new();
    if (!fresh)
        return; /* keep the old keys: answers to them are refused by generation anyway */
    tm_map_free(u->srv_reqs);
    u->srv_reqs = fresh;
}

/* The current child died (its on_exit has run). Returns 1 to restart. */
static int process_down(tm_upstream *u)
{
    drop_child(u);
    pthread_mutex_lock(&u->mu);
    unsigned gen = u->gen;
    tm_child_exit ex = u->last_exit;
    int restarting = !u->cfg.no_restart && !u->stop;
    int err = u->stop ? TIDEMARK_ECANCELED : TIDEMARK_ECLOSED;
    entry *lost = settle(u, !restarting, restarting);
    forget_child_requests(u);
    size_t waiting = u->count;
    if (!restarting && !u->stop)
        u->state = U_STOPPED;
    pthread_mutex_unlock(&u->mu);
    TM_WARN("upstream %s: generation %u died (%s %d); %zu request(s) wait for %s", u->name, gen,
            ex.signaled ? "signal" : "status", ex.signaled ? ex.signal : ex.status, waiting,
            restarting ? "the restart" : "nothing: no restart");
    if (u->cfg.cb.on_down)
        u->cfg.cb.on_down(u->cfg.cb.ud, gen, &ex, restarting);
    report_lost(u, lost, err);
    return restarting;
}

static void give_up(tm_upstream *u, int failures)
{
    pthread_mutex_lock(&u->mu);
    if (u->state != U_STOPPED)
        u->state = U_STOPPED;
    entry *lost = settle(u, 1, 0);
    pthread_mutex_unlock(&u->mu);
    TM_ERROR("upstream %s: giving up after %d failed start(s) in a row", u->name, failures);
    report_lost(u, lost, TIDEMARK_ECLOSED);
}

/* Wait delay_ms or until stop. Returns 1 when stopping. */
static int backoff(tm_upstream *u, int delay_ms)
{
    struct timespec dl;
    deadline_after(&dl, delay_ms);
    pthread_mutex_lock(&u->mu);
    while (!u->stop && pthread_cond_timedwait(&u->cv, &u->mu, &dl) != ETIMEDOUT)
        ;
    int stop = u->stop;
    pthread_mutex_unlock(&u->mu);
    return stop;
}

static void restart_loop(tm_upstream *u)
{
    int delay = u->cfg.restart_delay_ms;
    for (int failures = 0;;) {
        if (backoff(u, delay))
            return;
        int rc = start_child(u);
        if (rc == 0 || rc == TIDEMARK_ECANCELED)
            return;
        if (++failures >= u->cfg.max_restarts) {
            give_up(u, failures);
            return;
        }
        delay = delay * 2 > 5000 ? 5000 : delay * 2;
    }
}

static void *supervisor_main(void *arg)
{
    tm_upstream *u = arg;
    pthread_mutex_lock(&u->mu);
    for (;;) {
        while (!u->stop && !u->down_pending)
            pthread_cond_wait(&u->cv, &u->mu);
        if (u->stop)
            break;
        u->down_pending = 0;
        pthread_mutex_unlock(&u->mu);
        if (process_down(u))
            restart_loop(u);
        pthread_mutex_lock(&u->mu);
    }
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

/* ---- the API ------------------------------------------------------------------ */

static void strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* A private copy of a NULL-ended list. *out stays NULL for NULL. */
static int strv_dup(const char *const *v, char ***out)
{
    *out = NULL;
    if (!v)
        return 0;
    size_t n = 0;
    while (v[n])
        n++;
    char **c = calloc(n + 1, sizeof *c);
    if (!c)
        return TIDEMARK_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (!(c[i] = strdup(v[i]))) {
            strv_free(c);
            return TIDEMARK_ENOMEM;
        }
    *out = c;
    return 0;
}

static void upstream_release(tm_upstream *u)
{
    strv_free(u->argv);
    strv_free(u->envp);
    free(u->cwd);
    free(u->name);
    json_decref(u->init_params);
    json_decref(u->init_reply);
    json_decref(u->init_result);
    tm_map_free(u->by_id);
    tm_map_free(u->by_tag);
    tm_map_free(u->srv_reqs);
    pthread_rwlock_destroy(&u->child_lock);
    pthread_cond_destroy(&u->cv);
    pthread_mutex_destroy(&u->mu);
    free(u);
}

static void apply_defaults(tm_upstream_config *c)
{
    if (c->init_timeout_ms <= 0)
        c->init_timeout_ms = 10000;
    if (c->kill_grace_ms <= 0)
        c->kill_grace_ms = 2000;
    if (c->max_restarts <= 0)
        c->max_restarts = 5;
    if (c->restart_delay_ms <= 0)
        c->restart_delay_ms = 100;
    if (c->max_resends <= 0)
        c->max_resends = 1;
}

static int upstream_alloc(const tm_upstream_config *cfg, tm_upstream **out)
{
    tm_upstream *u = calloc(1, sizeof *u);
    if (!u)
        return TIDEMARK_ENOMEM;
    u->cfg = *cfg;
    apply_defaults(&u->cfg);
    u->cfg.argv = u->cfg.envp = NULL;
    u->cfg.cwd = u->cfg.name = NULL;
    u->cfg.init_params = NULL;
    u->next_id = 1;
    pthread_mutex_init(&u->mu, NULL);
    pthread_rwlock_init(&u->child_lock, NULL);
    pthread_condattr_t ca;
    int ok = pthread_condattr_init(&ca) == 0;
    ok = ok && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&u->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!ok) {
        pthread_rwlock_destroy(&u->child_lock);
        pthread_mutex_destroy(&u->mu);
        free(u);
        return TIDEMARK_ENOMEM;
    }
    const char *nm = cfg->name ? cfg->name : cfg->argv[0];
    const char *slash = cfg->name ? NULL : strrchr(nm, '/');
    u->name = strdup(slash ? slash + 1 : nm);
    u->cwd = cfg->cwd ? strdup(cfg->cwd) : NULL;
    u->init_params = json_deep_copy(cfg->init_params);
    u->by_id = tm_map_new();
    u->by_tag = tm_map_new();
    u->srv_reqs = tm_map_new();
    int rc = strv_dup(cfg->argv, &u->argv);
    rc = rc ? rc : strv_dup(cfg->envp, &u->envp);
    if (rc || !u->name || (cfg->cwd && !u->cwd) || !u->init_params || !u->by_id || !u->by_tag || !u->srv_reqs) {
        upstream_release(u);
        return TIDEMARK_ENOMEM;
    }
    *out = u;
    return 0;
}

int tm_upstream_start(const tm_upstream_config *cfg, tm_upstream **out)
{
    *out = NULL;
    if (!cfg || !cfg->argv || !cfg->argv[0] || !json_is_object(cfg->init_params))
        return TIDEMARK_EINVAL;
    tm_upstream *u = NULL;
    int rc = upstream_alloc(cfg, &u);
    if (rc)
        return rc;
    rc = start_child(u);
    if (rc == 0) {
        u->have_sup = pthread_create(&u->sup, NULL, supervisor_main, u) == 0;
        if (!u->have_sup)
            rc = TIDEMARK_ENOMEM;
    }
    if (rc) {
        drop_child(u); /* no request can be in flight: nobody has u yet */
        upstream_release(u);
        return rc;
    }
    *out = u;
    return 0;
}

static int entry_new(const json_t *request, unsigned flags, void *tag, entry **out)
{
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return TIDEMARK_ENOMEM;
    e->tag = tag;
    e->flags = flags;
    e->request = json_deep_copy(request);
    json_t *meta = json_object_get(json_object_get(e->request, "params"), "_meta");
    json_t *tok = json_object_get(meta, "progressToken");
    if (tok && (json_is_string(tok) || json_is_integer(tok)))
        e->client_token = json_incref(tok);
    if (!e->request) {
        entry_free(e);
        return TIDEMARK_ENOMEM;
    }
    *out = e;
    return 0;
}

/* u->mu held: e into the list and by_tag; an id and its wire form when a
 * child is ready. OUT *wire (NULL: it waits). */
static int entry_insert(tm_upstream *u, entry *e, json_t **wire)
{
    char k[64];
    *wire = NULL;
    tag_key(e->tag, k, sizeof k);
    if (tm_map_get(u->by_tag, k))
        return TIDEMARK_EEXIST;
    if (u->state == U_READY) {
        int rc = entry_assign_id(u, e);
        *wire = rc == 0 ? entry_wire(e) : NULL;
        if (!*wire) {
            id_key(e->child_id, k, sizeof k);
            (void)tm_map_del(u->by_id, k);
            return TIDEMARK_ENOMEM;
        }
        e->sent = 1;
    }
    if (tm_map_put(u->by_tag, k, e) != 0) {
        json_decref(*wire);
        *wire = NULL;
        if (e->child_id) {
            id_key(e->child_id, k, sizeof k);
            (void)tm_map_del(u->by_id, k);
        }
        return TIDEMARK_ENOMEM;
    }
    e->prev = u->tail;
    if (u->tail)
        u->tail->next = e;
    else
        u->head = e;
    u->tail = e;
    u->count++;
    return 0;
}

int tm_upstream_request(tm_upstream *u, const json_t *request, unsigned flags, void *tag)
{
    tm_msg m;
    tm_jsonrpc_classify((json_t *)request, &m);
    if (!tag || m.kind != TM_MSG_REQUEST || strcmp(m.method, "initialize") == 0)
        return TIDEMARK_EINVAL;
    entry *e = NULL;
    int rc = entry_new(request, flags, tag, &e);
    if (rc)
        return rc;
    json_t *wire = NULL;
    pthread_rwlock_rdlock(&u->child_lock);
    pthread_mutex_lock(&u->mu);
    rc = (u->state == U_STOPPED || u->stop) ? TIDEMARK_ECLOSED : entry_insert(u, e, &wire);
    pthread_mutex_unlock(&u->mu);
    if (rc == 0 && wire)
        (void)send_locked(u, wire); /* a failure kills the child: the death settles e */
    pthread_rwlock_unlock(&u->child_lock);
    json_decref(wire);
    if (rc)
        entry_free(e);
    return rc;
}

int tm_upstream_cancel(tm_upstream *u, void *tag, const char *reason)
{
    char k[64];
    tag_key(tag, k, sizeof k);
    pthread_rwlock_rdlock(&u->child_lock);
    pthread_mutex_lock(&u->mu);
    entry *e = tm_map_get(u->by_tag, k);
    if (e)
        entry_unlink(u, e);
    pthread_mutex_unlock(&u->mu);
    int rc = e ? 0 : TIDEMARK_ENOTFOUND;
    if (e && e->sent) {
        json_t *p = json_pack("{s:I}", "requestId", (json_int_t)e->child_id);
        if (p && reason)
            (void)json_object_set_new(p, "reason", json_string(reason)); /* optional field */
        json_t *n = p ? tm_jsonrpc_notification("notifications/cancelled", p) : NULL;
        rc = n ? send_locked(u, n) : TIDEMARK_ENOMEM;
        json_decref(n);
        if (rc == TIDEMARK_ECLOSED)
            rc = 0; /* the child is gone: nothing left to cancel */
    }
    pthread_rwlock_unlock(&u->child_lock);
    entry_free(e);
    pthread_mutex_lock(&u->mu);
    while (u->tag_cbs > 0) /* one may be for tag: it ends before we return */
        pthread_cond_wait(&u->cv, &u->mu);
    pthread_mutex_unlock(&u->mu);
    return rc;
}

int tm_upstream_notify(tm_upstream *u, const json_t *notification)
{
    tm_msg m;
    tm_jsonrpc_classify((json_t *)notification, &m);
    if (m.kind != TM_MSG_NOTIFICATION)
        return TIDEMARK_EINVAL;
    pthread_rwlock_rdlock(&u->child_lock);
    pthread_mutex_lock(&u->mu);
    int ready = u->state == U_READY;
    pthread_mutex_unlock(&u->mu);
    int rc = ready ? send_locked(u, notification) : TIDEMARK_ECLOSED;
    pthread_rwlock_unlock(&u->child_lock);
    return rc;
}

int tm_upstream_answer(tm_upstream *u, unsigned generation, const json_t *response)
{
    tm_msg m;
    tm_jsonrpc_classify((json_t *)response, &m);
    char k[TM_ID_KEY_MAX];
    if ((m.kind != TM_MSG_RESULT && m.kind != TM_MSG_ERROR) || tm_jsonrpc_id_key(m.id, k, sizeof k) != 0)
        return TIDEMARK_EINVAL;
    pthread_rwlock_rdlock(&u->child_lock);
    pthread_mutex_lock(&u->mu);
    int rc = (generation == u->gen && !u->child_dead && tm_map_del(u->srv_reqs, k)) ? 0 : TIDEMARK_ENOTFOUND;
    pthread_mutex_unlock(&u->mu);
    if (rc == 0)
        rc = send_locked(u, response);
    pthread_rwlock_unlock(&u->child_lock);
    return rc;
}

int tm_upstream_generation(tm_upstream *u, unsigned *gen)
{
    pthread_mutex_lock(&u->mu);
    *gen = u->gen;
    pthread_mutex_unlock(&u->mu);
    return 0;
}

int tm_upstream_pid(tm_upstream *u, pid_t *pid)
{
    pthread_rwlock_rdlock(&u->child_lock);
    int running = 0;
    *pid = 0;
    if (u->child && tm_child_running(u->child, &running) == 0 && running)
        (void)tm_child_pid(u->child, pid); /* cannot fail */
    pthread_rwlock_unlock(&u->child_lock);
    return 0;
}

int tm_upstream_init_result(tm_upstream *u, json_t **result)
{
    pthread_mutex_lock(&u->mu);
    *result = json_incref(u->init_result);
    pthread_mutex_unlock(&u->mu);
    return 0;
}

int tm_upstream_in_flight(tm_upstream *u, size_t *n)
{
    pthread_mutex_lock(&u->mu);
    *n = u->count;
    pthread_mutex_unlock(&u->mu);
    return 0;
}

void tm_upstream_free(tm_upstream *u)
{
    if (!u)
        return;
    pthread_mutex_lock(&u->mu);
    u->stop = 1;
    pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
    if (u->have_sup)
        pthread_join(u->sup, NULL);
    drop_child(u);
    pthread_mutex_lock(&u->mu);
    u->state = U_STOPPED;
    entry *lost = settle(u, 1, 0);
    pthread_mutex_unlock(&u->mu);
    report_lost(u, lost, TIDEMARK_ECANCELED);
    upstream_release(u);
}
