/*
 * client.c - the client's lifecycle: its config (read through
 * tm_abi_copy, so programs built against an older header get the
 * defaults of the fields they do not know), new and free, what it knows
 * of its session, stop, the state file, the end of the session. The rest
 * of the API lives beside it (client_int.h says which file does what).
 */
#include "client_int.h"
#include "../base/abi.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/str.h"
#include "../mcp/jsonrpc.h"
#include <stdlib.h>
#include <string.h>

/* ---- config ---------------------------------------------------------------------- */

/* Every default is TIDEMARK_CLIENT_DEFAULTS' (client.h). */
static void config_defaults(tidemark_client_config_t *c)
{
    memset(c, 0, sizeof *c);
#define TM_DEFAULT(field, value) c->field = value;
    TIDEMARK_CLIENT_DEFAULTS(TM_DEFAULT)
#undef TM_DEFAULT
}

int tidemark_client_config_init_sized(tidemark_client_config_t *cfg, size_t size)
{
    if (!cfg || size == 0)
        return TIDEMARK_EINVAL;
    tidemark_client_config_t d;
    config_defaults(&d);
    /* The caller's struct may be shorter (older header: only what it has)
     * or longer (newer header: the fields we do not know are zero). */
    memcpy(cfg, &d, size < sizeof d ? size : sizeof d);
    if (size > sizeof d)
        memset((char *)cfg + sizeof d, 0, size - sizeof d);
    return 0;
}

/* Durations in [0, UINT32_MAX] ms (timeout_ms: at most that; 0 or less is
 * the default); reserved0 zero, as a field this library does not know. */
static int config_check(const tidemark_client_config_t *c)
{
    const int64_t ms[] = {c->backoff_ms, c->backoff_max_ms, c->retry_min_ms, c->retry_max_ms};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        if (ms[i] < 0 || ms[i] > (int64_t)UINT32_MAX)
            return TIDEMARK_EINVAL;
    if (c->timeout_ms > (int64_t)UINT32_MAX)
        return TIDEMARK_EINVAL;
    return c->reserved0 ? TIDEMARK_ENOTSUP : 0;
}

/* A zero (NULL) field is its default, except max_step_up (0: never
 * re-authorize for more scope); timeout_ms below zero too; a range given
 * upside down is put right. */
static void config_settle(tidemark_client_config_t *c)
{
    tidemark_client_config_t d;
    config_defaults(&d);
    unsigned step_up = c->max_step_up;
    if (c->timeout_ms < 0)
        c->timeout_ms = 0;
#define TM_ZERO_IS_DEFAULT(field, value) if (!c->field) c->field = d.field;
    TIDEMARK_CLIENT_DEFAULTS(TM_ZERO_IS_DEFAULT)
#undef TM_ZERO_IS_DEFAULT
    c->max_step_up = step_up;
    if (c->retry_max_ms < c->retry_min_ms)
        c->retry_max_ms = c->retry_min_ms;
}

/* ---- new and free -------------------------------------------------------------------- */

/* The copies a client keeps of what its config points to. */
static int keep_copies(tidemark_client_t *c)
{
    const tidemark_client_config_t *cfg = &c->cfg;
    c->url = tm_strdup(cfg->url);
    c->state_path = tm_strdup(cfg->state_path);
    c->name = tm_strdup(cfg->name ? cfg->name : "tidemark-client");
    c->version = tm_strdup(cfg->version ? cfg->version : TIDEMARK_VERSION);
    c->offer = tm_strdup(cfg->protocol_version ? cfg->protocol_version : TIDEMARK_PROTOCOL_LATEST);
    c->caps = cfg->capabilities ? json_deep_copy(cfg->capabilities) : NULL;
    c->roots = cfg->roots ? json_deep_copy(cfg->roots) : NULL;
    c->log_level = cfg->log_level ? tm_strdup(cfg->log_level) : NULL;
    if (cfg->log_level && !c->log_level)
        return TIDEMARK_ENOMEM;
    c->cfg.log_level = c->log_level;
    if (!c->url || (cfg->state_path && !c->state_path) || !c->name || !c->version || !c->offer ||
        (cfg->capabilities && !c->caps) || (cfg->roots && !c->roots))
        return TIDEMARK_ENOMEM;
    /* The copies are what the client uses; the caller's strings may go. */
    c->cfg.url = c->url;
    c->cfg.state_path = c->state_path;
    c->cfg.name = c->name;
    c->cfg.version = c->version;
    c->cfg.protocol_version = c->offer;
    c->cfg.capabilities = c->caps;
    c->cfg.roots = c->roots;
    c->cfg.schema = NULL; /* used once, at open */
    return 0;
}

/* Locks, the state, the workers and the I/O thread. */
static int open_parts(tidemark_client_t *c, const char *schema)
{
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        return TIDEMARK_ENOMEM;
    if (tm_cond_init_monotonic(&c->cv) != 0) {
        pthread_mutex_destroy(&c->mu);
        return TIDEMARK_ENOMEM;
    }
    if (pthread_mutex_init(&c->init_mu, NULL) != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        return TIDEMARK_ENOMEM;
    }
    c->locks = 1;
    if (!(c->pending = tm_map_new()))
        return TIDEMARK_ENOMEM;
    int rc = tm_cstate_open(c->state_path, schema, &c->st);
    if (!rc)
        rc = tm_pool_new(2, &c->workers);
    tm_hc_tls tls = {.ca_file = c->cfg.ca_file};
    if (!rc)
        rc = tm_hc_new_tls(c->cfg.ca_file ? &tls : NULL, &c->hc);
    return rc;
}

int tidemark_client_new_sized(const tidemark_client_config_t *cfg, size_t size,
                              tidemark_client_t **out)
{
    if (!cfg || !out)
        return TIDEMARK_EINVAL;
    *out = NULL;
    tidemark_client_t *c = calloc(1, sizeof *c);
    if (!c)
        return TIDEMARK_ENOMEM;
    config_defaults(&c->cfg);
    int rc = tm_abi_copy(&c->cfg, sizeof c->cfg, cfg, size);
    if (!rc)
        rc = config_check(&c->cfg);
    if (!rc && !c->cfg.url)
        rc = TIDEMARK_EINVAL;
    const char *schema = c->cfg.schema;
    if (!rc)
        rc = keep_copies(c);
    if (!rc)
        rc = open_parts(c, schema);
    if (!rc)
        rc = tm_oauth_new(c);
    if (rc) {
        tidemark_client_free(c);
        return rc;
    }
    config_settle(&c->cfg);
    c->otel = tm_otel_from_env(c->name, NULL); /* its own tracer; counts once tm_client_count_on */
    c->list = tidemark_client_list;
    *out = c;
    return 0;
}

void tidemark_client_free(tidemark_client_t *c)
{
    if (!c)
        return;
    if (c->locks)
        tidemark_client_stop(c);
    if (c->listening) {
        int rc = pthread_join(c->listener, NULL);
        if (rc)
            TM_ERROR("client: joining the listener thread failed (%d)", rc);
    }
    tm_pool_free(c->workers);
    tm_hc_free(c->hc);
    tm_otel_free(c->otel); /* every request ended its span */
    tm_oauth_free(c);
    tm_cstate_close(c->st);
    tm_map_free(c->pending);
    json_decref(c->caps);
    json_decref(c->roots);
    json_decref(c->server_info);
    json_decref(c->tool_safe);
    json_decref(c->tool_headers);
    json_decref(c->cache);
    free(c->log_level);
    free(c->url);
    free(c->state_path);
    free(c->name);
    free(c->version);
    free(c->offer);
    if (c->locks)
        tm_client_session_ended_locked(c); /* no thread is left to race */
    free(c->session);
    free(c->proto);
    if (c->locks) {
        pthread_mutex_destroy(&c->init_mu);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
    }
    free(c);
}

/* ---- what the client knows of its session ------------------------------------------------ */

/* A copy of s into buf (size bytes): 0, ENOTFOUND without s, ERANGE when
 * it does not fit (buf then holds ""). Holds c->mu. */
static int copy_out(const char *s, char *buf, size_t size)
{
    if (!s)
        return TIDEMARK_ENOTFOUND;
    size_t n = strlen(s);
    if (n >= size) {
        buf[0] = '\0';
        return TIDEMARK_ERANGE;
    }
    memcpy(buf, s, n + 1);
    return 0;
}

int tidemark_client_session(tidemark_client_t *c, char *buf, size_t size)
{
    if (!c || !buf || !size)
        return TIDEMARK_EINVAL;
    pthread_mutex_lock(&c->mu);
    int rc = copy_out(c->session, buf, size);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tidemark_client_protocol_version(tidemark_client_t *c, char *buf, size_t size)
{
    if (!c || !buf || !size)
        return TIDEMARK_EINVAL;
    pthread_mutex_lock(&c->mu);
    int rc = copy_out(c->proto, buf, size);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tidemark_client_server_info(tidemark_client_t *c, json_t **info)
{
    if (!c || !info)
        return TIDEMARK_EINVAL;
    pthread_mutex_lock(&c->mu);
    *info = c->server_info ? json_deep_copy(c->server_info) : NULL;
    int rc = !c->server_info ? TIDEMARK_ENOTFOUND : !*info ? TIDEMARK_ENOMEM : 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- stop, state, the end ----------------------------------------------------------------- */

void tidemark_client_stop(tidemark_client_t *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    pthread_cond_broadcast(&c->cv);
    for (rq *r = c->live; r; r = r->live_next)
        pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&c->mu);
}

int tidemark_client_state(tidemark_client_t *c, json_t **state)
{
    if (!c || !state)
        return TIDEMARK_EINVAL;
    return tm_cstate_dump(c->st, state);
}

int tidemark_client_query(tidemark_client_t *c, const char *sql, const char *const *args,
                          size_t nargs, json_t **rows)
{
    if (!c || !sql || !rows || (nargs && !args))
        return TIDEMARK_EINVAL;
    return tm_cstate_query(c->st, sql, args, nargs, rows);
}

int tidemark_client_wait_standalone(tidemark_client_t *c, int timeout_ms)
{
    if (!c)
        return TIDEMARK_EINVAL;
    int64_t end = tm_now_ms() + timeout_ms;
    pthread_mutex_lock(&c->mu);
    while (!c->standalone_open && !c->stopping && tm_now_ms() < end) {
        struct timespec ts = tm_deadline_ms(end - tm_now_ms());
        (void)pthread_cond_timedwait(&c->cv, &c->mu, &ts); /* the clock is checked again */
    }
    int ok = c->standalone_open;
    pthread_mutex_unlock(&c->mu);
    return ok ? 0 : TIDEMARK_ETIMEDOUT;
}

typedef struct del_ctx {
    long status;
    int done;
    tidemark_client_t *c;
} del_ctx;

static void d_done(void *ud, int rc, long status, const char *error)
{
    (void)rc, (void)error;
    del_ctx *d = ud;
    pthread_mutex_lock(&d->c->mu);
    d->status = status;
    d->done = 1;
    pthread_cond_broadcast(&d->c->cv);
    pthread_mutex_unlock(&d->c->mu);
}

/* DELETE of the session; OUT status (0 when no answer came). */
static int send_delete(tidemark_client_t *c, const char *sid, long *status)
{
    char sh[512], ph[512];
    snprintf(sh, sizeof sh, "Mcp-Session-Id: %s", sid);
    pthread_mutex_lock(&c->mu);
    int with_version = c->proto != NULL;
    if (with_version)
        snprintf(ph, sizeof ph, "MCP-Protocol-Version: %s", c->proto);
    char *auth = NULL; /* the bearer token, as on every request */
    if (c->auth_token && asprintf(&auth, "Authorization: Bearer %s", c->auth_token) < 0)
        auth = NULL;
    pthread_mutex_unlock(&c->mu);
    const char *h[] = {"Accept: application/json, text/event-stream", sh,
                       with_version ? ph : auth, with_version ? auth : NULL, NULL};
    tm_hx_req req = {.method = "DELETE", .url = c->url, .headers = h, .timeout_ms = c->cfg.timeout_ms};
    del_ctx d = {0, 0, c};
    static const tm_hx_cb cb = {.on_done = d_done};
    int rc = tm_hc_start(c->hc, &req, &cb, &d, NULL);
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    if (rc)
        return rc;
    pthread_mutex_lock(&c->mu);
    while (!d.done) /* ends: the exchange has a timeout */
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    *status = d.status;
    return 0;
}

int tidemark_client_end_session(tidemark_client_t *c)
{
    if (!c)
        return TIDEMARK_EINVAL;
    pthread_mutex_lock(&c->mu);
    char *sid = c->session ? strdup(c->session) : NULL;
    int had = c->session != NULL;
    pthread_mutex_unlock(&c->mu);
    if (!had)
        return TIDEMARK_ENOTFOUND;
    if (!sid)
        return TIDEMARK_ENOMEM;
    long status = 0;
    int rc = send_delete(c, sid, &status);
    free(sid);
    if (rc)
        return rc;
    /* Forgotten here too: the next request starts a new session. */
    pthread_mutex_lock(&c->mu);
    tm_client_session_ended_locked(c);
    free(c->session);
    c->session = NULL;
    c->session_lost = 1;
    pthread_mutex_unlock(&c->mu);
    rc = tm_cstate_session_clear(c->st);
    if (rc)
        return rc;
    return status >= 200 && status < 300 ? 0 : TIDEMARK_EPEER;
}
