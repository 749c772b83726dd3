/*
 * server.c - the server's configuration and lifecycle: defaults and
 * limits, start (store, workers, HTTP, recovery, background threads), run,
 * stop, free. The request path is in endpoint.c, post.c, get.c and job.c.
 */
#include "server_int.h"
#include "tasks.h"
#include "seal.h"
#include "feed.h"
#include "record.h"
#include "../auth/auth.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "../base/str.h"
#include "../base/clock.h"
#include "../base/abi.h"
#include "tidemark/tidemark.h"
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Every default is TIDEMARK_SERVER_DEFAULTS' (server.h). */
static void config_defaults(tidemark_server_config_t *c)
{
    memset(c, 0, sizeof *c);
#define TM_DEFAULT(field, value) c->field = value;
    TIDEMARK_SERVER_DEFAULTS(TM_DEFAULT)
#undef TM_DEFAULT
}

void tidemark_server_config_init_sized(tidemark_server_config_t *cfg, size_t size)
{
    tidemark_server_config_t def;
    config_defaults(&def);
    if (cfg) /* only the bytes the caller's header declared */
        memcpy(cfg, &def, size < sizeof def ? size : sizeof def);
    if (cfg && size > sizeof def)
        memset((char *)cfg + sizeof def, 0, size - sizeof def);
}

static char *dup_or(const char *s, const char *def)
{
    return strdup(s ? s : def);
}

static char **dup_list(const char *const *l)
{
    if (!l)
        return NULL;
    size_t n = 0;
    while (l[n])
        n++;
    char **o = calloc(n + 1, sizeof *o);
    for (size_t i = 0; o && i < n; i++)
        o[i] = strdup(l[i]);
    return o;
}

static void free_list(char **l)
{
    for (size_t i = 0; l && l[i]; i++)
        free(l[i]);
    free(l);
}

/* A zero (NULL) field is its default, except where zero is a setting of
 * its own: retry_ms (no retry: advertised), session_ttl_seconds (never
 * expire), max_sessions and max_sessions_per_address (no limit). */
static void fill_defaults(tidemark_server_config_t *c, const tidemark_server_config_t *def)
{
    int64_t retry_ms = c->retry_ms;
    uint64_t ttl = c->session_ttl_seconds;
    unsigned sessions = c->max_sessions, per_address = c->max_sessions_per_address;
#define TM_ZERO_IS_DEFAULT(field, value) if (!c->field) c->field = def->field;
    TIDEMARK_SERVER_DEFAULTS(TM_ZERO_IS_DEFAULT)
#undef TM_ZERO_IS_DEFAULT
    c->retry_ms = retry_ms;
    c->session_ttl_seconds = ttl;
    c->max_sessions = sessions;
    c->max_sessions_per_address = per_address;
    if (c->max_uri_length > TM_URI_MAX)
        c->max_uri_length = TM_URI_MAX;
    if (c->max_header_bytes > 65536)
        c->max_header_bytes = 65536;
}

/* Durations in [0, UINT32_MAX] ms (what the layers below take), the port in
 * [0, 65535]; anything else is a caller's mistake, never wrapped. */
static int config_check(const tidemark_server_config_t *c)
{
    const struct {
        const char *name;
        int64_t ms;
    } d[] = {{"retry_ms", c->retry_ms},
             {"keepalive_ms", c->keepalive_ms},
             {"request_deadline_ms", c->request_deadline_ms},
             {"idle_timeout_ms", c->idle_timeout_ms},
             {"cache_ttl_ms", c->cache_ttl_ms},
             {"request_state_ttl_ms", c->request_state_ttl_ms},
             {"auth_timeout_ms", c->auth_timeout_ms},
             {"auth_jwks_min_refresh_ms", c->auth_jwks_min_refresh_ms},
             {"store_timeout_ms", c->store_timeout_ms}};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (d[i].ms < 0 || d[i].ms > (int64_t)UINT32_MAX) {
            TM_ERROR("config: %s = %lld is out of range (0 to %u ms)", d[i].name,
                     (long long)d[i].ms, UINT32_MAX);
            return TIDEMARK_EINVAL;
        }
    if (c->port < 0 || c->port > 65535) {
        TM_ERROR("config: port %d is out of range (0 to 65535)", c->port);
        return TIDEMARK_EINVAL;
    }
    return 0;
}

/* The authorization settings of the config (docs/protocol.md,
 * "Authorization"): none set, off; auth_resource and the rest, a resource
 * server (tm_auth validates and copies them); any of them without
 * auth_resource, refused (never an open server by mistake). */
static int auth_open(tidemark_server_t *s)
{
    const tidemark_server_config_t *c = &s->cfg;
    if (!c->auth_resource) {
        const void *set[] = {c->auth_issuer, c->auth_jwks_uri, c->auth_introspection_uri,
                             c->auth_client_id, c->auth_client_secret, c->auth_scope_rules,
                             c->auth_scope_base};
        for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
            if (set[i]) {
                TM_ERROR("authorization: auth_resource is required with the other auth_* settings");
                return TIDEMARK_EINVAL;
            }
        return 0;
    }
    tm_auth_config ac = {.resource = c->auth_resource, .issuer = c->auth_issuer,
                         .jwks_uri = c->auth_jwks_uri,
                         .introspection_uri = c->auth_introspection_uri,
                         .client_id = c->auth_client_id, .client_secret = c->auth_client_secret,
                         .ca_file = c->auth_ca_file, .scopes_supported = c->auth_scopes_supported,
                         .scope_base = c->auth_scope_base, .scope_rules = c->auth_scope_rules,
                         .scope_implies = c->auth_scope_implies, .algorithms = c->auth_algorithms,
                         .resource_name = c->auth_resource_name,
                         .leeway_s = c->auth_leeway_s < UINT32_MAX ? (unsigned)c->auth_leeway_s
                                                                  : UINT32_MAX,
                         .http_timeout_ms = c->auth_timeout_ms,
                         .jwks_min_refresh_ms = c->auth_jwks_min_refresh_ms};
    return tm_auth_new(&ac, &s->auth);
}

/* The config's strings that are not copied elsewhere are not kept: the
 * caller's may go once tidemark_server_new returned. */
static void forget_borrowed(tidemark_server_config_t *c)
{
    c->auth_resource = c->auth_issuer = c->auth_jwks_uri = c->auth_introspection_uri = NULL;
    c->auth_client_id = c->auth_client_secret = c->auth_ca_file = NULL;
    c->auth_scopes_supported = c->auth_scope_base = c->auth_algorithms = NULL;
    c->auth_resource_name = NULL;
    c->auth_scope_rules = c->auth_scope_implies = NULL;
    c->metrics_token = c->tls_cert_file = c->tls_key_file = c->tls_client_ca_file = NULL;
}

int tidemark_server_new_sized(const tidemark_server_config_t *cfg, size_t size,
                              tidemark_server_t **out)
{
    tidemark_server_config_t def;
    config_defaults(&def);
    tidemark_server_config_t mine = def;
    int rc = tm_abi_copy(&mine, sizeof mine, cfg, cfg ? size : 0);
    if (!rc)
        rc = config_check(&mine);
    if (rc)
        return rc;
    fill_defaults(&mine, &def);
    tidemark_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return TIDEMARK_ENOMEM;
    s->cfg = mine;
    s->host = dup_or(s->cfg.host, def.host);
    s->path = dup_or(s->cfg.path, def.path);
    s->store_uri = dup_or(s->cfg.store, def.store);
    s->name = dup_or(s->cfg.name, def.name);
    s->version = dup_or(s->cfg.version, def.version);
    s->instructions = tm_strdup(s->cfg.instructions);
    s->origins = dup_list(s->cfg.allowed_origins);
    s->hosts = dup_list(s->cfg.allowed_hosts);
    s->metrics_addrs = dup_list(s->cfg.metrics_addresses);
    s->metrics_token = tm_strdup(s->cfg.metrics_token);
    s->tls_cert = tm_strdup(s->cfg.tls_cert_file);
    s->tls_key = tm_strdup(s->cfg.tls_key_file);
    s->tls_client_ca = tm_strdup(s->cfg.tls_client_ca_file);
    s->cfg.cache_scope = strcmp(s->cfg.cache_scope, "public") == 0 ? "public" : "private";
    s->reg = tm_registry_new();
    s->metrics = tm_metrics_new();
    tm_server_metrics_register(&s->m, s->metrics);
    s->sessions = tm_map_new();
    s->failed = tm_map_new();
    s->live_feeds = tm_map_new();
    pthread_mutex_init(&s->fail_mu, NULL);
    pthread_mutex_init(&s->task_mu, NULL);
    pthread_mutex_init(&s->live_mu, NULL);
    pthread_mutex_init(&s->pool_mu, NULL);
    pthread_mutex_init(&s->keyed_mu, NULL);
    pthread_mutex_init(&s->life_mu, NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->jan_mu, NULL);
    tm_cond_init_monotonic(&s->jan_cv);
    if (tm_record_waits_new(s) != 0 || !s->host || !s->path || !s->store_uri || !s->name ||
        !s->version || !s->reg || !s->metrics || !s->sessions || !s->failed || !s->live_feeds ||
        (s->cfg.metrics_token && !s->metrics_token) ||
        (s->cfg.tls_cert_file && !s->tls_cert) || (s->cfg.tls_key_file && !s->tls_key) ||
        (s->cfg.tls_client_ca_file && !s->tls_client_ca)) {
        tidemark_server_free(s);
        return TIDEMARK_ENOMEM;
    }
    if ((s->cfg.metrics_token && !s->cfg.metrics_token[0]) ||
        (!s->tls_cert != !s->tls_key) || (s->tls_client_ca && !s->tls_cert)) {
        TM_ERROR("%s", s->cfg.metrics_token && !s->cfg.metrics_token[0]
                           ? "metrics_token: empty"
                           : "TLS: tls_cert_file and tls_key_file go together (and "
                             "tls_client_ca_file needs them)");
        tidemark_server_free(s);
        return TIDEMARK_EINVAL;
    }
    if ((rc = auth_open(s)) != 0) {
        tidemark_server_free(s);
        return rc;
    }
    forget_borrowed(&s->cfg);
    s->otel = tm_otel_from_env(s->name, s->metrics); /* the object's own tracer, from OTEL_* */
    *out = s;
    return 0;
}

static void on_commit(void *ud, const char *session, const char *stream, uint64_t seq)
{
    (void)seq;
    tidemark_server_t *srv = ud;
    if (atomic_load(&srv->hub))
        tm_feed_wake(srv, session, stream);
    tm_record_wake(srv, session); /* a retry waiting for its first call's outcome */
}

/* Workers grow on demand up to cfg.workers; handler calls may take all but
 * QUICK_RESERVE of them, so requests that run no handler always find one. */
#define QUICK_RESERVE 4
static int start_workers(tidemark_server_t *srv)
{
    unsigned w = srv->cfg.workers;
    int rc = tm_pool_new_range(w < QUICK_RESERVE ? w : QUICK_RESERVE, w, &srv->pool);
    if (rc)
        return rc;
    tm_sched_limits lim = {.per_session = srv->cfg.max_calls_per_session,
                           .per_address = srv->cfg.max_calls_per_address,
                           .total = w > 2 * QUICK_RESERVE ? w - QUICK_RESERVE : (w + 1) / 2,
                           .queue = srv->cfg.max_queued_per_session};
    return tm_sched_new(srv->pool, &lim, &srv->sched);
}

/* mkdir -p of the folder holding path (a file name). */
static int make_parent_dirs(const char *path)
{
    char d[4096];
    if (snprintf(d, sizeof d, "%s", path) >= (int)sizeof d)
        return TIDEMARK_ERANGE;
    char *slash = strrchr(d, '/');
    if (!slash || slash == d)
        return 0;
    *slash = '\0';
    for (char *p = d + 1; ; p++) {
        char c = *p;
        if (c == '/' || c == '\0') {
            *p = '\0';
            if (mkdir(d, 0755) != 0 && errno != EEXIST) {
                TM_ERROR("cannot create %s: %s", d, strerror(errno));
                return TIDEMARK_EIO;
            }
            *p = c;
        }
        if (c == '\0')
            return 0;
    }
}

/* Stop the adapter's streams, then (after the store: its writer may still
 * wake them) let the adapter go. */
static void hub_stop(tidemark_server_t *srv)
{
    tm_hub *h = atomic_load(&srv->hub);
    if (h)
        h->ops->stop(h->impl);
}

static void adapter_free(tidemark_server_t *srv)
{
    tm_http_adapter_free(srv);
    atomic_store(&srv->hub, NULL);
}

int tidemark_server_start(tidemark_server_t *srv)
{
    return tm_server_start(srv, 1);
}

int tm_server_start(tidemark_server_t *srv, int with_http)
{
    if (atomic_load(&srv->running))
        return TIDEMARK_EBUSY;
    if (strncmp(srv->store_uri, "sqlite:", 7) == 0) {
        int drc = make_parent_dirs(srv->store_uri + 7);
        if (drc)
            return drc;
    }
    tm_store_options so = {
        .retain_events = srv->cfg.retain_events,
        .retain_ms = (int64_t)srv->cfg.retain_seconds * 1000,
        .durability = srv->cfg.durability == TIDEMARK_DURABILITY_PROCESS      ? TM_DURABILITY_PROCESS
                      : srv->cfg.durability == TIDEMARK_DURABILITY_REPLICATED ? TM_DURABILITY_REPLICATED
                                                                              : TM_DURABILITY_POWER,
        .store_timeout_ms = srv->cfg.store_timeout_ms,
        .emit_early = srv->cfg.emit_early,
        .accept_loss = srv->cfg.accept_loss,
        /* last-seen must be written several times per TTL */
        .touch_every_ms = srv->cfg.session_ttl_seconds
                              ? (int64_t)srv->cfg.session_ttl_seconds * 1000 / 4 < 5000
                                    ? (int64_t)srv->cfg.session_ttl_seconds * 1000 / 4
                                    : 5000
                              : 5000,
    };
    so.listener = on_commit;
    so.listener_ud = srv;
    so.bus = tm_sess_on_bus;
    so.bus_ud = srv;
    so.metrics = srv->metrics;
    int rc = tm_store_open(srv->store_uri, &so, &srv->store);
    if (rc) {
        TM_ERROR("cannot open store %s: %s", srv->store_uri, tidemark_strerror(rc));
        return rc;
    }
    if ((rc = tm_sealer_open(srv->store, &srv->sealer)) != 0) {
        TM_ERROR("cannot open the request-state key: %s", tidemark_strerror(rc));
        goto fail;
    }
    for (size_t i = 0; i < srv->nschemas; i++) {
        if ((rc = tm_store_exec_schema(srv->store, srv->schemas[i])) != 0) {
            TM_ERROR("application schema failed: %s", tidemark_strerror(rc));
            goto fail;
        }
    }
    /* The sessions in the store count against the limits from the start. */
    if ((rc = tm_sess_bound_new(srv)) != 0 || (rc = tm_sess_bound_load(srv)) != 0) {
        TM_ERROR("cannot count the stored sessions: %s", tidemark_strerror(rc));
        goto fail;
    }
    if ((rc = start_workers(srv)) != 0)
        goto fail;
    atomic_store(&srv->stopping, 0);
    if (with_http && (rc = tm_http_adapter_start(srv)) != 0)
        goto fail;
    atomic_store(&srv->running, 1);
    /* Finish what a dead process left started, before anyone can retry it:
     * the recovered calls are registered before this returns. */
    if ((rc = tm_recover(srv)) != 0)
        TM_ERROR("recovery of unfinished requests failed: %s", tidemark_strerror(rc));
    tm_background_start(srv);
    if (with_http)
        TM_INFO("listening on %s://%s:%u%s (store %s, epoch %s%s)",
                srv->tls_cert ? "https" : "http", srv->host, tm_http_adapter_port(srv), srv->path,
                srv->store_uri, tm_store_epoch(srv->store), srv->auth ? ", authorization on" : "");
    else
        TM_INFO("serving without HTTP (store %s, epoch %s)", srv->store_uri,
                tm_store_epoch(srv->store));
    return 0;
fail:
    tm_pool_free(srv->pool);
    srv->pool = NULL;
    tm_sched_free(srv->sched);
    srv->sched = NULL;
    hub_stop(srv);
    tm_sealer_free(srv->sealer);
    srv->sealer = NULL;
    tm_store_close(srv->store);
    srv->store = NULL;
    adapter_free(srv); /* after the store: its writer may still wake streams */
    tm_sess_bound_free(srv);
    return rc;
}

int tidemark_server_port(const tidemark_server_t *srv)
{
    return (int)tm_http_adapter_port(srv);
}

static void close_each(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    tm_sess_close(v);
}

static void unref_each(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    tm_sess_unref(v);
}

int tidemark_server_run(tidemark_server_t *srv)
{
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old); /* the server's threads inherit it */
    int rc = tidemark_server_start(srv);
    /* Wait for a signal, or for a stop from another thread (running drops). */
    while (rc == 0 && atomic_load(&srv->running)) {
        struct timespec ts = {0, 100 * 1000000L};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            TM_INFO("signal %d: stopping", sig);
            break;
        }
    }
    tidemark_server_stop(srv);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static void server_stop_locked(tidemark_server_t *srv);

/* Thread-safe, and safe to call twice (tidemark_server_run stops too). */
void tidemark_server_stop(tidemark_server_t *srv)
{
    pthread_mutex_lock(&srv->life_mu);
    server_stop_locked(srv);
    pthread_mutex_unlock(&srv->life_mu);
}

static void server_stop_locked(tidemark_server_t *srv)
{
    if (!atomic_load(&srv->running))
        return;
    atomic_store(&srv->stopping, 1);
    tm_record_wake_all(srv); /* waiting retries answer now: their workers are joined below */
    tm_background_stop(srv);
    pthread_mutex_lock(&srv->mu);
    tm_map_each(srv->sessions, close_each, NULL);
    pthread_mutex_unlock(&srv->mu);
    tm_pool_free(srv->pool); /* runs what is queued; blocked calls see cancellation */
    srv->pool = NULL;
    tm_sched_free(srv->sched); /* empty: the pool ran everything it admitted */
    srv->sched = NULL;
    hub_stop(srv);
    tm_sealer_free(srv->sealer);
    srv->sealer = NULL;
    tm_store_close(srv->store);
    srv->store = NULL;
    adapter_free(srv); /* after the store: its writer may still wake streams */
    tm_modern_reap(srv, 1); /* what was still to be deleted is left to the session TTL */
    pthread_mutex_lock(&srv->mu);
    tm_map_each(srv->sessions, unref_each, NULL);
    tm_gauge_add(srv->m.sessions_open, -(int64_t)tm_map_count(srv->sessions));
    tm_map_free(srv->sessions);
    srv->sessions = tm_map_new();
    pthread_mutex_unlock(&srv->mu);
    tm_sess_bound_free(srv); /* counted again from the store at the next start */
    atomic_store(&srv->running, 0);
}

void tidemark_server_free(tidemark_server_t *srv)
{
    if (!srv)
        return;
    tidemark_server_stop(srv);
    tm_registry_free(srv->reg);
    if (srv->sessions)
        tm_map_free(srv->sessions);
    free_list(srv->origins);
    free_list(srv->hosts);
    free_list(srv->metrics_addrs);
    tm_auth_free(srv->auth); /* after the HTTP transport stopped: no check runs now */
    tm_otel_free(srv->otel); /* after the last call ended its span */
    free(srv->metrics_token);
    free(srv->tls_cert);
    free(srv->tls_key);
    free(srv->tls_client_ca);
    free(srv->host);
    free(srv->path);
    free(srv->store_uri);
    free(srv->name);
    free(srv->version);
    free(srv->instructions);
    for (size_t i = 0; i < srv->nschemas; i++)
        free(srv->schemas[i]);
    free(srv->schemas);
    if (srv->failed)
        tm_map_free(srv->failed);
    if (srv->live_feeds)
        tm_map_free(srv->live_feeds);
    tm_tasks_forget(srv);
    tm_record_waits_free(srv);
    pthread_mutex_destroy(&srv->fail_mu);
    pthread_mutex_destroy(&srv->task_mu);
    pthread_mutex_destroy(&srv->live_mu);
    pthread_mutex_destroy(&srv->pool_mu);
    pthread_mutex_destroy(&srv->keyed_mu);
    pthread_mutex_destroy(&srv->life_mu);
    pthread_mutex_destroy(&srv->mu);
    pthread_mutex_destroy(&srv->jan_mu);
    pthread_cond_destroy(&srv->jan_cv);
    tm_metrics_free(srv->metrics); /* after every layer that counts on it */
    free(srv);
}
