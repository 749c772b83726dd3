/*
 * oauth.c - authorization of the client (OAuth 2.1 as MCP profiles it).
 *
 * A request answered 401 (or 403 insufficient_scope) comes here, on its
 * driver. The steps, one authorization at a time per client:
 *  1. Protected Resource Metadata: the challenge's resource_metadata, else
 *     the path-suffixed well-known URL, else the root one. Its resource must
 *     name this server (same origin, a path prefix of ours). Without any
 *     (2025-03-26 servers) the server's origin is the authorization server.
 *  2. The authorization server's metadata (RFC 8414, then OpenID discovery,
 *     path-aware); its issuer must be exactly the one asked for. Without
 *     any (2025-03-26) the default endpoints /authorize, /token, /register.
 *  3. A client: pre-registered, one registered before with this issuer
 *     (never one of another issuer), a Client ID Metadata Document URL, or
 *     dynamic registration (RFC 7591, application_type native).
 *  4. A token: a refresh of the one held, the client credentials grant, or
 *     the authorization code grant with PKCE S256, resource (RFC 8707), the
 *     scope chosen (the challenge's, else scopes_supported, else none; on
 *     step-up the union with what was asked before; offline_access when the
 *     server lists it), and the authorization response's iss (RFC 9207)
 *     compared with the issuer as a string.
 * Tokens and registrations are kept by issuer, in the state file when
 * there is one (tm_cstate kv rows). A token is never logged.
 */
#include "oauth.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../mcp/jsonrpc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OA_TIMEOUT_MS 15000

typedef struct tm_oauth {
    pthread_mutex_t mu; /* one authorization at a time */
    char *client_id, *client_secret, *client_issuer, *cimd_url, *redirect_uri;
    json_t *regs;   /* issuer -> {client_id, client_secret?, method} */
    json_t *tokens; /* issuer -> {access_token, refresh_token?, scope?} */
    char *issuer;   /* the issuer of the token sent */
} tm_oauth;

/* What one authorization found out (freed by flow_free). */
typedef struct flow {
    tidemark_client_t *c;
    tm_oauth *o;
    rq *r;
    oa_challenge ch;
    json_t *prm;       /* protected resource metadata, or NULL */
    char *resource;    /* the resource indicator sent */
    char *issuer;      /* the authorization server */
    json_t *as;        /* its metadata (or the 2025-03-26 defaults) */
    json_t *reg;       /* the client: {client_id, client_secret?, method} (borrowed from regs) */
    char *scope;       /* the scope requested, or NULL */
    const char *step;  /* what failed, for the error */
    char detail[400];
} flow;

static void flow_fail(flow *f, const char *step, const char *fmt, const char *arg)
{
    f->step = step;
    snprintf(f->detail, sizeof f->detail, fmt, arg ? arg : "");
}

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

static int saved_token_for_url(tidemark_client_t *c);

int tm_oauth_new(tidemark_client_t *c)
{
    tm_oauth *o = calloc(1, sizeof *o);
    if (!o)
        return TIDEMARK_ENOMEM;
    c->oauth = o;
    const tidemark_client_config_t *cfg = &c->cfg;
    o->client_id = xstrdup(cfg->client_id);
    o->client_secret = xstrdup(cfg->client_secret);
    o->client_issuer = xstrdup(cfg->client_issuer);
    o->cimd_url = xstrdup(cfg->client_metadata_url);
    o->redirect_uri = xstrdup(cfg->redirect_uri);
    o->regs = json_object();
    o->tokens = json_object();
    if (pthread_mutex_init(&o->mu, NULL) != 0) {
        free(o);
        c->oauth = NULL;
        return TIDEMARK_ENOMEM;
    }
    if (cfg->access_token && !(c->auth_token = strdup(cfg->access_token)))
        return TIDEMARK_ENOMEM;
    if ((cfg->client_id && !o->client_id) || (cfg->client_secret && !o->client_secret) ||
        (cfg->client_issuer && !o->client_issuer) || (cfg->redirect_uri && !o->redirect_uri) ||
        (cfg->client_metadata_url && !o->cimd_url) || !o->regs || !o->tokens)
        return TIDEMARK_ENOMEM;
    c->cfg.client_secret = NULL; /* only the copy is kept */
    c->cfg.access_token = NULL;
    return c->auth_token ? 0 : saved_token_for_url(c);
}

void tm_oauth_free(tidemark_client_t *c)
{
    tm_oauth *o = c->oauth;
    if (c->auth_token) {
        memset(c->auth_token, 0, strlen(c->auth_token));
        free(c->auth_token);
        c->auth_token = NULL;
    }
    if (!o)
        return;
    free(o->client_id);
    if (o->client_secret)
        memset(o->client_secret, 0, strlen(o->client_secret));
    free(o->client_secret);
    free(o->client_issuer);
    free(o->cimd_url);
    free(o->redirect_uri);
    free(o->issuer);
    json_decref(o->regs);
    json_decref(o->tokens);
    pthread_mutex_destroy(&o->mu);
    free(o);
    c->oauth = NULL;
}

/* ---- the state file: registrations and tokens by issuer ---------------------------------- */

/* Load what the state file holds for issuer into regs and tokens. */
static void saved_load(flow *f)
{
    char *reg = NULL, *tok = NULL;
    if (json_object_get(f->o->regs, f->issuer) || !f->c->st)
        return;
    if (tm_cstate_kv_get(f->c->st, "oauth.reg", f->issuer, &reg) == 0 && reg) {
        json_t *v = json_loads(reg, 0, NULL);
        if (json_is_object(v) && json_object_set(f->o->regs, f->issuer, v) != 0)
            TM_WARN("client: the saved registration cannot be kept in memory");
        json_decref(v);
    }
    if (tm_cstate_kv_get(f->c->st, "oauth.token", f->issuer, &tok) == 0 && tok) {
        json_t *v = json_loads(tok, 0, NULL);
        if (json_is_object(v) && json_object_set(f->o->tokens, f->issuer, v) != 0)
            TM_WARN("client: the saved token cannot be kept in memory");
        json_decref(v);
    }
    free(reg);
    free(tok);
}

static void saved_put(flow *f, const char *kind, json_t *v)
{
    char *txt = v ? json_dumps(v, JSON_COMPACT) : NULL;
    int rc = tm_cstate_kv_set(f->c->st, kind, f->issuer, txt);
    free(txt);
    if (rc)
        TM_WARN("client: %s for %s cannot be saved in the client state (%s)", kind, f->issuer,
                tidemark_strerror(rc));
}

/* The token the state file holds for this server's URL (through the
 * issuer it was last authorized by), sent from the first request on. */
static int saved_token_for_url(tidemark_client_t *c)
{
    char *iss = NULL, *tok = NULL;
    if (tm_cstate_kv_get(c->st, "oauth.resource", c->url, &iss) != 0 || !iss)
        return 0;
    if (tm_cstate_kv_get(c->st, "oauth.token", iss, &tok) == 0 && tok) {
        json_t *v = json_loads(tok, 0, NULL);
        const char *at = json_string_value(json_object_get(v, "access_token"));
        if (at && !(c->auth_token = strdup(at)))
            TM_WARN("client: the saved token cannot be kept in memory");
        json_decref(v);
        memset(tok, 0, strlen(tok));
        free(tok);
    }
    c->oauth->issuer = iss;
    return 0;
}

/* ---- discovery -------------------------------------------------------------------------- */

/* GET url as JSON: 0 with *out, 1 for an answer that is no JSON object
 * (404 and the like), negative when nothing answered. */
static int get_json(flow *f, const char *url, json_t **out)
{
    oa_resp a;
    const char *hdrs[] = {"Accept: application/json", NULL};
    int rc = oa_http(f->c->hc, "GET", url, hdrs, NULL, OA_TIMEOUT_MS, &a);
    *out = !rc && a.status == 200 ? oa_json(&a) : NULL;
    if (rc)
        flow_fail(f, "discovery", "%s", a.error);
    oa_resp_free(&a);
    return rc ? rc : *out ? 0 : 1;
}

/* Whether the metadata's resource names the server at url: same origin,
 * and its path a prefix of url's on a segment boundary. */
static int resource_matches(const char *resource, const char *url)
{
    char *ro = oa_origin(resource), *uo = oa_origin(url);
    int same = ro && uo && strcasecmp(ro, uo) == 0;
    free(ro);
    free(uo);
    if (!same)
        return 0;
    const char *rp = oa_path(resource), *up = oa_path(url);
    size_t n = strlen(rp);
    while (n && rp[n - 1] == '/')
        n--;
    return strncmp(rp, up, n) == 0 && (up[n] == '\0' || up[n] == '/' || up[n] == '?');
}

/* Step 1: the protected resource metadata (f->prm, f->resource). */
static int discover_prm(flow *f)
{
    const char *url = f->c->url;
    char *origin = oa_origin(url), *cand[3] = {NULL, NULL, NULL};
    const char *path = oa_path(url);
    if (!origin)
        return TIDEMARK_EINVAL;
    int n = 0;
    if (f->ch.resource_metadata)
        cand[n++] = strdup(f->ch.resource_metadata);
    if (path[0] && strcmp(path, "/") != 0 &&
        asprintf(&cand[n], "%s/.well-known/oauth-protected-resource%s", origin, path) >= 0)
        n++;
    if (asprintf(&cand[n], "%s/.well-known/oauth-protected-resource", origin) >= 0)
        n++;
    int rc = 1;
    for (int i = 0; i < n && rc == 1; i++)
        rc = cand[i] ? get_json(f, cand[i], &f->prm) : TIDEMARK_ENOMEM;
    for (int i = 0; i < n; i++)
        free(cand[i]);
    if (rc < 0) {
        free(origin);
        return rc;
    }
    const char *res = json_string_value(json_object_get(f->prm, "resource"));
    const char *as = json_string_value(json_array_get(json_object_get(f->prm, "authorization_servers"), 0));
    if (f->prm && res && !resource_matches(res, url)) {
        free(origin);
        flow_fail(f, "resource_mismatch", "the protected resource metadata names %s", res);
        return TIDEMARK_EPROTO;
    }
    f->resource = strdup(res ? res : url);
    f->issuer = as ? strdup(as) : origin; /* none: the 2025-03-26 way, the server's origin */
    if (as)
        free(origin);
    return f->resource && f->issuer ? 0 : TIDEMARK_ENOMEM;
}

/* The 2025-03-26 defaults when the server's origin publishes no metadata. */
static json_t *default_endpoints(const char *base)
{
    char a[600], t[600], g[600];
    snprintf(a, sizeof a, "%s/authorize", base);
    snprintf(t, sizeof t, "%s/token", base);
    snprintf(g, sizeof g, "%s/register", base);
    return json_pack("{s:s,s:s,s:s,s:b}", "authorization_endpoint", a, "token_endpoint", t,
                     "registration_endpoint", g, "tm_defaults", 1);
}

/* Step 2: the authorization server's metadata (f->as), its issuer checked. */
static int discover_as(flow *f)
{
    char *origin = oa_origin(f->issuer), *cand[3] = {NULL, NULL, NULL};
    if (!origin)
        return TIDEMARK_EINVAL;
    const char *path = oa_path(f->issuer);
    if (!strcmp(path, "/"))
        path = "";
    int n = 0;
    n += asprintf(&cand[n], "%s/.well-known/oauth-authorization-server%s", origin, path) >= 0;
    n += asprintf(&cand[n], "%s/.well-known/openid-configuration%s", origin, path) >= 0;
    if (path[0])
        n += asprintf(&cand[n], "%s%s/.well-known/openid-configuration", origin, path) >= 0;
    int rc = 1;
    for (int i = 0; i < n && rc == 1; i++)
        rc = get_json(f, cand[i], &f->as);
    for (int i = 0; i < n; i++)
        free(cand[i]);
    if (rc == 1 && !f->prm) /* a 2025-03-26 server: its origin's default endpoints */
        f->as = default_endpoints(origin);
    free(origin);
    if (rc < 0)
        return rc;
    if (!f->as) {
        flow_fail(f, "as_metadata", "no authorization server metadata for %s", f->issuer);
        return TIDEMARK_ENOTFOUND;
    }
    const char *iss = json_string_value(json_object_get(f->as, "issuer"));
    if (!json_is_true(json_object_get(f->as, "tm_defaults")) && (!iss || strcmp(iss, f->issuer))) {
        flow_fail(f, "issuer_mismatch", "the metadata's issuer is %s", iss ? iss : "(none)");
        return TIDEMARK_EPROTO;
    }
    return 0;
}

/* ---- the client registration -------------------------------------------------------------- */

static int as_lists(json_t *as, const char *field, const char *v)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(as, field), i, e) if (json_is_string(e) &&
                                                             !strcmp(json_string_value(e), v))
        return 1;
    return 0;
}

/* The token endpoint method for a client with (or without) a secret. */
static const char *auth_method(json_t *as, int has_secret)
{
    json_t *l = json_object_get(as, "token_endpoint_auth_methods_supported");
    if (!has_secret)
        return "none";
    if (!json_is_array(l) || as_lists(as, "token_endpoint_auth_methods_supported", "client_secret_basic"))
        return "client_secret_basic";
    return as_lists(as, "token_endpoint_auth_methods_supported", "client_secret_post")
               ? "client_secret_post"
               : "client_secret_basic";
}

/* Dynamic client registration (RFC 7591). */
static int register_dynamic(flow *f, json_t **reg)
{
    const char *ep = json_string_value(json_object_get(f->as, "registration_endpoint"));
    if (!ep) {
        flow_fail(f, "registration", "%s", "no client: none pre-registered, no metadata document "
                                           "supported, no registration endpoint");
        return TIDEMARK_ENOTSUP;
    }
    json_t *l = json_object_get(f->as, "token_endpoint_auth_methods_supported");
    const char *want = !json_is_array(l) || as_lists(f->as, "token_endpoint_auth_methods_supported",
                                                     "none")
                           ? "none"
                           : auth_method(f->as, 1);
    int cc = f->c->cfg.client_credentials;
    /* refresh_token only where the server has that grant (or does not say) */
    int refresh = !json_is_array(json_object_get(f->as, "grant_types_supported")) ||
                  as_lists(f->as, "grant_types_supported", "refresh_token");
    json_t *body = json_pack("{s:s,s:s,s:s,s:[s],s:[s]}", "client_name", f->c->name,
                             "token_endpoint_auth_method", want, "application_type", "native",
                             "response_types", "code", "grant_types",
                             cc ? "client_credentials" : "authorization_code");
    if (body && refresh &&
        json_array_append_new(json_object_get(body, "grant_types"), json_string("refresh_token")))
        TM_WARN("client: registering without refresh_token (out of memory)");
    if (body && f->o->redirect_uri &&
        json_object_set_new(body, "redirect_uris", json_pack("[s]", f->o->redirect_uri)) != 0) {
        json_decref(body); /* without its redirect URI the registration would be useless */
        body = NULL;
    }
    char *txt = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!txt)
        return TIDEMARK_ENOMEM;
    const char *hdrs[] = {"Content-Type: application/json", "Accept: application/json", NULL};
    oa_resp a;
    int rc = oa_http(f->c->hc, "POST", ep, hdrs, txt, OA_TIMEOUT_MS, &a);
    free(txt);
    json_t *v = !rc && (a.status == 200 || a.status == 201) ? oa_json(&a) : NULL;
    const char *id = json_string_value(json_object_get(v, "client_id"));
    const char *secret = json_string_value(json_object_get(v, "client_secret"));
    const char *m = json_string_value(json_object_get(v, "token_endpoint_auth_method"));
    if (id)
        *reg = json_pack("{s:s,s:s*,s:s}", "client_id", id, "client_secret", secret, "method",
                         m ? m : secret ? auth_method(f->as, 1) : "none");
    else
        flow_fail(f, "registration", "the registration endpoint answered %s",
                  rc ? a.error : a.body ? a.body : "no client_id");
    json_decref(v);
    oa_resp_free(&a);
    return !id ? (rc ? rc : TIDEMARK_EPEER) : *reg ? 0 : TIDEMARK_ENOMEM;
}

/* Step 3: which client to be with this issuer (f->reg). */
static int choose_client(flow *f)
{
    tm_oauth *o = f->o;
    json_t *reg = NULL;
    int rc = 0;
    if (o->client_id && (!o->client_issuer || !strcmp(o->client_issuer, f->issuer))) {
        reg = json_pack("{s:s,s:s*,s:s}", "client_id", o->client_id, "client_secret",
                        o->client_secret, "method", auth_method(f->as, o->client_secret != NULL));
    } else if ((reg = json_incref(json_object_get(o->regs, f->issuer))) != NULL) {
        /* registered with this issuer before */
    } else if (o->cimd_url &&
               json_is_true(json_object_get(f->as, "client_id_metadata_document_supported"))) {
        reg = json_pack("{s:s,s:s}", "client_id", o->cimd_url, "method", "none");
        if (reg)
            saved_put(f, "oauth.reg", reg); /* its refresh token belongs to this client id */
    } else {
        rc = register_dynamic(f, &reg);
        if (!rc)
            saved_put(f, "oauth.reg", reg);
    }
    if (!rc && !reg)
        rc = TIDEMARK_ENOMEM;
    if (!rc && json_object_set(o->regs, f->issuer, reg) != 0)
        rc = TIDEMARK_ENOMEM;
    json_decref(reg);
    f->reg = json_object_get(o->regs, f->issuer);
    return rc;
}

/* ---- scope ---------------------------------------------------------------------------------- */

/* Append the words of add not in *scope to it. */
static int scope_union(char **scope, const char *add)
{
    if (!add || !*add)
        return 0;
    char *copy = strdup(add), *save = NULL;
    if (!copy)
        return TIDEMARK_ENOMEM;
    int rc = 0;
    for (char *w = strtok_r(copy, " ", &save); w && !rc; w = strtok_r(NULL, " ", &save)) {
        char *have = *scope ? *scope : "";
        size_t wl = strlen(w);
        int found = 0;
        for (const char *p = strstr(have, w); p && !found; p = strstr(p + 1, w))
            found = (p == have || p[-1] == ' ') && (p[wl] == ' ' || p[wl] == '\0');
        char *n = NULL;
        if (!found && asprintf(&n, "%s%s%s", have, *have ? " " : "", w) < 0)
            rc = TIDEMARK_ENOMEM;
        if (n) {
            free(*scope);
            *scope = n;
        }
    }
    free(copy);
    return rc;
}

/* The scope to ask for: the challenge's, else every scopes_supported of
 * the resource; on step-up also what was asked before; offline_access
 * when the authorization server lists it. */
static int choose_scope(flow *f, const char *before)
{
    int rc = 0;
    if (f->ch.scope && *f->ch.scope) {
        rc = scope_union(&f->scope, f->ch.scope);
    } else {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(f->prm, "scopes_supported"), i, e) if (!rc)
            rc = scope_union(&f->scope, json_string_value(e));
    }
    if (!rc && f->r->auth_status == 403)
        rc = scope_union(&f->scope, before);
    if (!rc && f->scope && as_lists(f->as, "scopes_supported", "offline_access"))
        rc = scope_union(&f->scope, "offline_access");
    return rc;
}

/* ---- the token endpoint ----------------------------------------------------------------------- */

/* POST form (client authentication added) to the token endpoint: 0 with
 * the token object kept by issuer, else the failure in f. */
static int token_request(flow *f, const char *form)
{
    const char *ep = json_string_value(json_object_get(f->as, "token_endpoint"));
    const char *id = json_string_value(json_object_get(f->reg, "client_id"));
    const char *secret = json_string_value(json_object_get(f->reg, "client_secret"));
    const char *m = json_string_value(json_object_get(f->reg, "method"));
    if (!ep || !id) {
        flow_fail(f, "token", "%s", "no token endpoint");
        return TIDEMARK_ENOTSUP;
    }
    int basic = m && !strcmp(m, "client_secret_basic") && secret;
    char *eid = oa_urlencode(id), *esec = secret ? oa_urlencode(secret) : NULL;
    char *body = NULL, *cred = NULL, *hdr = NULL, *b64 = NULL;
    int ok = eid && (!secret || esec) &&
             asprintf(&body, "%s&client_id=%s%s%s", form, eid,
                      !basic && secret ? "&client_secret=" : "", !basic && secret ? esec : "") >= 0;
    if (ok && basic)
        ok = asprintf(&cred, "%s:%s", eid, esec) >= 0 &&
             (b64 = oa_b64((const unsigned char *)cred, strlen(cred))) != NULL &&
             asprintf(&hdr, "Authorization: Basic %s", b64) >= 0;
    const char *hdrs[] = {"Content-Type: application/x-www-form-urlencoded",
                          "Accept: application/json", hdr, NULL};
    oa_resp a = {0};
    int rc = ok ? oa_http(f->c->hc, "POST", ep, hdrs, body, OA_TIMEOUT_MS, &a) : TIDEMARK_ENOMEM;
    json_t *v = !rc && a.status == 200 ? oa_json(&a) : NULL;
    const char *tok = json_string_value(json_object_get(v, "access_token"));
    if (tok && json_object_set(f->o->tokens, f->issuer, v) == 0)
        saved_put(f, "oauth.token", v);
    else if (!tok)
        flow_fail(f, "token", "the token endpoint answered %s",
                  rc ? a.error : a.body && a.len ? a.body : "no access_token");
    json_decref(v);
    oa_resp_free(&a);
    free(eid), free(esec), free(body), free(cred), free(b64), free(hdr);
    return tok ? 0 : rc ? rc : TIDEMARK_EPEER;
}

/* The grant's form with the resource (and scope when there is one). */
static char *grant_form(flow *f, const char *grant, const char *more)
{
    char *res = oa_urlencode(f->resource), *sc = f->scope ? oa_urlencode(f->scope) : NULL;
    char *form = NULL;
    if (res && (!f->scope || sc) &&
        asprintf(&form, "grant_type=%s&resource=%s%s%s%s", grant, res, sc ? "&scope=" : "",
                 sc ? sc : "", more ? more : "") < 0)
        form = NULL;
    free(res);
    free(sc);
    return form;
}

static int refresh_grant(flow *f, const char *refresh)
{
    char *rt = oa_urlencode(refresh), *more = NULL;
    if (!rt || asprintf(&more, "&refresh_token=%s", rt) < 0)
        more = NULL;
    free(rt);
    char *form = more ? grant_form(f, "refresh_token", more) : NULL;
    free(more);
    int rc = form ? token_request(f, form) : TIDEMARK_ENOMEM;
    free(form);
    return rc;
}

static int client_credentials_grant(flow *f)
{
    char *form = grant_form(f, "client_credentials", NULL);
    int rc = form ? token_request(f, form) : TIDEMARK_ENOMEM;
    free(form);
    return rc;
}

/* ---- the authorization code grant ----------------------------------------------------------- */

/* The authorization request's URL (malloc'd). */
static char *authorization_url(flow *f, const char *state, const char *challenge)
{
    const char *ep = json_string_value(json_object_get(f->as, "authorization_endpoint"));
    const char *id = json_string_value(json_object_get(f->reg, "client_id"));
    char *eid = id ? oa_urlencode(id) : NULL, *eru = oa_urlencode(f->o->redirect_uri);
    char *eres = oa_urlencode(f->resource), *esc = f->scope ? oa_urlencode(f->scope) : NULL;
    char *url = NULL;
    if (ep && eid && eru && eres && (!f->scope || esc) &&
        asprintf(&url,
                 "%s%sresponse_type=code&client_id=%s&redirect_uri=%s&state=%s"
                 "&code_challenge=%s&code_challenge_method=S256&resource=%s%s%s",
                 ep, strchr(ep, '?') ? "&" : "?", eid, eru, state, challenge, eres,
                 esc ? "&scope=" : "", esc ? esc : "") < 0)
        url = NULL;
    free(eid), free(eru), free(eres), free(esc);
    return url;
}

/* The authorization response (the redirect's URL): state, error and iss
 * checked; OUT code. */
static int authorization_response(flow *f, const char *cb, const char *state, char **code)
{
    int iss_present = 0;
    char *got_state = oa_query_get(cb, "state", NULL), *err = oa_query_get(cb, "error", NULL);
    char *iss = oa_query_get(cb, "iss", &iss_present);
    *code = oa_query_get(cb, "code", NULL);
    int rc = 0;
    if (err) {
        flow_fail(f, "authorization", "the authorization server answered error=%s", err);
        rc = TIDEMARK_EPEER;
    } else if (!got_state || strcmp(got_state, state) != 0) {
        flow_fail(f, "authorization", "%s", "the authorization response's state is not ours");
        rc = TIDEMARK_EPROTO;
    } else if (iss_present && (!iss || strcmp(iss, f->issuer) != 0)) {
        flow_fail(f, "iss_mismatch", "the authorization response's iss is %s", iss);
        rc = TIDEMARK_EPROTO;
    } else if (!iss_present &&
               json_is_true(json_object_get(f->as, "authorization_response_iss_parameter_supported"))) {
        flow_fail(f, "iss_missing", "%s", "the authorization response carries no iss, which "
                                          "the authorization server said it sends");
        rc = TIDEMARK_EPROTO;
    } else if (!*code) {
        flow_fail(f, "authorization", "%s", "the authorization response carries no code");
        rc = TIDEMARK_EPROTO;
    }
    free(got_state), free(err), free(iss);
    return rc;
}

static int code_grant(flow *f)
{
    tidemark_authorize_fn ask = f->c->cfg.on_authorize;
    if (!ask || !f->o->redirect_uri) {
        flow_fail(f, "authorization", "%s", "the server needs a person's authorization and the "
                                            "client has no way to ask for it (login first, or a "
                                            "token, or client credentials)");
        return TIDEMARK_ENOTSUP;
    }
    char *verifier = oa_random(32), *state = oa_random(16);
    char *challenge = verifier ? oa_s256(verifier) : NULL;
    char *url = state && challenge ? authorization_url(f, state, challenge) : NULL;
    char *cb = NULL, *code = NULL, *form = NULL, *ec = NULL, *ev = NULL, *er = NULL;
    int rc = url ? 0 : TIDEMARK_ENOMEM;
    if (!rc && (rc = ask(url, f->o->redirect_uri, &cb, f->c->cfg.authorize_ud)) != 0)
        flow_fail(f, "authorization", "%s", "the authorization was not completed");
    if (!rc)
        rc = cb ? authorization_response(f, cb, state, &code) : TIDEMARK_EPROTO;
    if (!rc) {
        ec = oa_urlencode(code), ev = oa_urlencode(verifier), er = oa_urlencode(f->o->redirect_uri);
        char *more = NULL;
        if (ec && ev && er &&
            asprintf(&more, "&code=%s&redirect_uri=%s&code_verifier=%s", ec, er, ev) >= 0) {
            char *keep = f->scope; /* the scope went with the authorization request */
            f->scope = NULL;
            form = grant_form(f, "authorization_code", more);
            f->scope = keep;
        }
        free(more);
        rc = form ? token_request(f, form) : TIDEMARK_ENOMEM;
    }
    free(verifier), free(state), free(challenge), free(url), free(cb), free(code);
    free(form), free(ec), free(ev), free(er);
    return rc;
}

/* ---- the challenge -------------------------------------------------------------------------- */

static void flow_free(flow *f)
{
    oa_challenge_free(&f->ch);
    json_decref(f->prm);
    json_decref(f->as);
    free(f->resource);
    free(f->issuer);
    free(f->scope);
}

/* Put the token held for f's issuer in use. */
static int use_token(flow *f)
{
    const char *tok = json_string_value(json_object_get(json_object_get(f->o->tokens, f->issuer),
                                                        "access_token"));
    char *t = tok ? strdup(tok) : NULL;
    char *iss = strdup(f->issuer);
    if (!t || !iss) {
        free(t);
        free(iss);
        return TIDEMARK_ENOMEM;
    }
    pthread_mutex_lock(&f->c->mu);
    char *old = f->c->auth_token;
    f->c->auth_token = t;
    pthread_mutex_unlock(&f->c->mu);
    free(old);
    free(f->o->issuer);
    f->o->issuer = iss;
    int rc = f->c->st ? tm_cstate_kv_set(f->c->st, "oauth.resource", f->c->url, f->issuer) : 0;
    if (rc)
        TM_WARN("client: which issuer authorizes %s cannot be saved (%s)", f->c->url,
                tidemark_strerror(rc));
    return 0;
}

/* The token: one held and not yet refused, a refresh, or a new grant. */
static int obtain(flow *f, const char *sent)
{
    json_t *held = json_object_get(f->o->tokens, f->issuer);
    const char *tok = json_string_value(json_object_get(held, "access_token"));
    const char *refresh = json_string_value(json_object_get(held, "refresh_token"));
    const char *before = json_string_value(json_object_get(held, "tm_scope"));
    char *prev = before ? strdup(before) : NULL;
    int rc = choose_scope(f, prev);
    free(prev);
    if (rc)
        return rc;
    if (tok && (!sent || strcmp(tok, sent) != 0) && f->r->auth_status == 401)
        return 0; /* a token of this issuer that was not the one refused */
    if (refresh && f->r->auth_status == 401 && refresh_grant(f, refresh) == 0)
        return 0;
    rc = f->c->cfg.client_credentials ? client_credentials_grant(f) : code_grant(f);
    held = json_object_get(f->o->tokens, f->issuer);
    if (!rc && f->scope && json_object_set_new(held, "tm_scope", json_string(f->scope)) != 0)
        rc = TIDEMARK_ENOMEM;
    return rc;
}

/* Whether a token can be had at all before registering for one: a token
 * held (not the one refused), a refresh token, client credentials, or a
 * way to ask a person. */
static int can_obtain(flow *f, const char *sent)
{
    json_t *held = json_object_get(f->o->tokens, f->issuer);
    const char *tok = json_string_value(json_object_get(held, "access_token"));
    if ((tok && (!sent || strcmp(tok, sent) != 0)) || json_object_get(held, "refresh_token") ||
        f->c->cfg.client_credentials || (f->c->cfg.on_authorize && f->o->redirect_uri))
        return 0;
    flow_fail(f, "login_required", "%s", "the server needs a person's authorization and the "
                                        "client has no way to ask for it (log in first, or give "
                                        "a token, or client credentials)");
    return TIDEMARK_ENOTSUP;
}

/* r keeps its refusal, now saying why authorization did not help. */
static void refuse(flow *f, int rc)
{
    rq *r = f->r;
    json_t *e = NULL;
    char msg[600];
    snprintf(msg, sizeof msg, "authorization failed (%s): %s", f->step ? f->step : "error",
             f->detail[0] ? f->detail : tidemark_strerror(rc));
    tm_client_error(&e, TM_RPC_INTERNAL_ERROR, "unauthorized", msg,
                    json_pack("{s:i,s:s,s:s*}", "status", (int)r->auth_status, "step",
                              f->step ? f->step : "error", "issuer", f->issuer));
    TM_WARN("client: %s", msg);
    pthread_mutex_lock(&f->c->mu);
    json_decref(r->result);
    r->result = e;
    pthread_mutex_unlock(&f->c->mu);
}

/* r again from the start of its exchange, with the new token. */
static int resend(tidemark_client_t *c, rq *r)
{
    pthread_mutex_lock(&c->mu);
    r->phase = RQ_RUNNING;
    r->rc = 0;
    json_decref(r->result);
    r->result = NULL;
    pthread_mutex_unlock(&c->mu);
    r->final = 0;
    r->got_response = 0;
    int rc = r->is_get ? tm_start_get(c, r) : tm_start_post(c, r);
    if (rc)
        tm_rq_fail(r, rc, "transport_error", "cannot start the HTTP exchange", NULL);
    return 0;
}

int tm_oauth_challenge(tidemark_client_t *c, rq *r)
{
    tm_oauth *o = c->oauth;
    flow f = {.c = c, .o = o, .r = r};
    oa_challenge_parse(r->auth_challenge, &f.ch);
    int rc = 0;
    if (r->auth_status == 403 && (!f.ch.error || strcmp(f.ch.error, "insufficient_scope") != 0)) {
        oa_challenge_free(&f.ch);
        return TIDEMARK_EPEER; /* forbidden, and more scope would not help */
    }
    if (r->auth_status == 403 && r->auth_step_ups++ >= c->cfg.max_step_up) {
        flow_fail(&f, "step_up", "%s", "still insufficient scope after the re-authorizations allowed");
        rc = TIDEMARK_EPEER;
    } else if (r->auth_tries++ >= c->cfg.max_step_up + 2) {
        flow_fail(&f, "retry", "%s", "the server refused every token obtained");
        rc = TIDEMARK_EPEER;
    }
    pthread_mutex_lock(&c->mu);
    char *sent = c->auth_token ? strdup(c->auth_token) : NULL;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_lock(&o->mu);
    if (!rc)
        rc = discover_prm(&f);
    if (!rc && o->issuer && strcmp(o->issuer, f.issuer) != 0)
        TM_INFO("client: the server's authorization server is now %s", f.issuer);
    if (!rc)
        rc = discover_as(&f);
    if (!rc)
        saved_load(&f);
    if (!rc)
        rc = can_obtain(&f, sent);
    if (!rc)
        rc = choose_client(&f);
    if (!rc)
        rc = obtain(&f, sent);
    if (!rc)
        rc = use_token(&f);
    pthread_mutex_unlock(&o->mu);
    free(sent);
    if (rc)
        refuse(&f, rc);
    flow_free(&f);
    return rc ? rc : resend(c, r);
}
