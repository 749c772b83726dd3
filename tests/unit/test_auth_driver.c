/* test_auth_driver.c - src/auth/ driven line by line by
 * tests/integration/auth_driver.mjs, which runs a real authorization server
 * (authz_server.mjs) and makes the tokens. One command a line on stdin, one
 * JSON answer a line on stdout:
 *
 *   jwks ISSUER JWKS_URI RESOURCE MIN_REFRESH_MS [typ]   (typ: require_at_jwt)
 *   introspect ISSUER URI RESOURCE CLIENT_ID SECRET CACHE_MS
 *        -> {"rc":0}              (a new tm_auth replaces the old one)
 *   check TOKEN|- METHOD|- TOOL|-  (TOKEN "-": no header; "raw:VALUE": the
 *        header is VALUE with '_' as space)
 *        -> {"status":401,"reason":"expired","www":"...","id":"...","sub":"...","scope":"..."}
 *   meta PATH -> {"rc":0,"doc":{...}} or {"rc":-4}
 *   counts    -> {"expired":1,...}
 *   par THREADS N TOKEN... -> {"status":{"200":n,...},"reason":{"ok":n,...}}: THREADS
 *        threads at once, each checking every TOKEN (tools/call of echo) N times
 *
 * The scope configuration is fixed: tools/call needs mcp:tools, its tool
 * admin_reset mcp:admin, resources/read mcp:read; mcp:admin implies the two
 * others. */
#include "auth/auth.h"
#include "tidemark/tidemark.h"
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const rules[] = {"tool:admin_reset=mcp:admin", "tool:*=mcp:tools",
                                    "method:resources/read=mcp:read", NULL};
static const char *const implies[] = {"mcp:admin=mcp:tools mcp:read", NULL};

static tm_auth *g_auth;

static void answer(json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    printf("%s\n", s ? s : "{\"rc\":-2}");
    fflush(stdout);
    free(s);
    json_decref(o);
}

static void cmd_new(char **w, int n)
{
    tm_auth_config c = {.scopes_supported = "mcp:read mcp:tools mcp:admin",
                        .scope_rules = rules, .scope_implies = implies,
                        .resource_name = "tidemark test", .http_timeout_ms = 2000};
    int rc = TIDEMARK_EINVAL;
    if (strcmp(w[0], "jwks") == 0 && (n == 5 || (n == 6 && strcmp(w[5], "typ") == 0))) {
        c.require_at_jwt = n == 6;
        c.issuer = w[1];
        c.jwks_uri = w[2];
        c.resource = w[3];
        c.jwks_min_refresh_ms = (unsigned)atoi(w[4]);
        rc = 0;
    } else if (strcmp(w[0], "introspect") == 0 && n == 7) {
        c.issuer = w[1];
        c.introspection_uri = w[2];
        c.resource = w[3];
        c.client_id = w[4];
        c.client_secret = w[5];
        c.introspect_cache_ms = (unsigned)atoi(w[6]);
        rc = 0;
    }
    tm_auth *a = NULL;
    if (!rc)
        rc = tm_auth_new(&c, &a);
    if (!rc) {
        tm_auth_free(g_auth);
        g_auth = a;
    }
    answer(json_pack("{si}", "rc", rc));
}

static void cmd_check(char **w, int n)
{
    if (n != 4 || !g_auth)
        return answer(json_pack("{si}", "rc", TIDEMARK_EINVAL));
    char hdr[20000];
    const char *h = NULL;
    if (strncmp(w[1], "raw:", 4) == 0) {
        snprintf(hdr, sizeof hdr, "%s", w[1] + 4);
        for (char *p = hdr; *p; p++)
            if (*p == '_')
                *p = ' ';
        h = hdr;
    } else if (strcmp(w[1], "-") != 0) {
        snprintf(hdr, sizeof hdr, "Bearer %s", w[1]);
        h = hdr;
    }
    const char *method = strcmp(w[2], "-") ? w[2] : NULL, *tool = strcmp(w[3], "-") ? w[3] : NULL;
    tm_auth_result r;
    int rc = tm_auth_check(g_auth, h, method, tool, &r);
    if (rc)
        return answer(json_pack("{si}", "rc", rc));
    answer(json_pack("{si,si,ss,ss,ss,ss,ss,sI}", "rc", 0, "status", (int)r.status, "reason",
                     tm_auth_reason_name(r.reason), "www", r.www_authenticate, "id",
                     r.principal.id, "sub", r.principal.sub, "scope", r.principal.scope, "exp",
                     (json_int_t)r.principal.exp));
}

static void cmd_meta(char **w, int n)
{
    const char *doc = NULL;
    int rc = n == 2 && g_auth ? tm_auth_metadata(g_auth, w[1], &doc) : TIDEMARK_EINVAL;
    json_t *o = json_pack("{si}", "rc", rc);
    if (!rc)
        json_object_set_new(o, "doc", json_loads(doc, 0, NULL));
    answer(o);
}

static void cmd_counts(void)
{
    json_t *o = json_object();
    for (int r = 0; r < TM_AUTH_REASON_COUNT; r++)
        json_object_set_new(o, tm_auth_reason_name((tm_auth_reason)r),
                            json_integer((json_int_t)tm_auth_count(g_auth, (tm_auth_reason)r)));
    answer(o);
}

typedef struct par_arg {
    char **toks;
    int ntoks, iters;
    unsigned counts[TM_AUTH_REASON_COUNT], status[600];
    int errors;
} par_arg;

static void *par_main(void *ud)
{
    par_arg *p = ud;
    for (int i = 0; i < p->iters; i++)
        for (int t = 0; t < p->ntoks; t++) {
            char h[9000];
            snprintf(h, sizeof h, "Bearer %s", p->toks[t]);
            tm_auth_result r;
            if (tm_auth_check(g_auth, h, "tools/call", "echo", &r) != 0 || r.status >= 600) {
                p->errors++;
                continue;
            }
            p->counts[r.reason]++;
            p->status[r.status]++;
        }
    return NULL;
}

static void cmd_par(char **w, int n)
{
    int threads = n >= 4 ? atoi(w[1]) : 0;
    if (threads < 1 || threads > 64 || !g_auth)
        return answer(json_pack("{si}", "rc", TIDEMARK_EINVAL));
    par_arg args[64];
    pthread_t th[64];
    for (int i = 0; i < threads; i++) {
        args[i] = (par_arg){.toks = w + 3, .ntoks = n - 3, .iters = atoi(w[2])};
        if (pthread_create(&th[i], NULL, par_main, &args[i]) != 0)
            return answer(json_pack("{si}", "rc", TIDEMARK_EIO));
    }
    json_t *st = json_object(), *re = json_object();
    int errors = 0;
    unsigned status[600] = {0}, counts[TM_AUTH_REASON_COUNT] = {0};
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        errors += args[i].errors;
        for (int s = 0; s < 600; s++)
            status[s] += args[i].status[s];
        for (int r = 0; r < TM_AUTH_REASON_COUNT; r++)
            counts[r] += args[i].counts[r];
    }
    for (int s = 0; s < 600; s++)
        if (status[s]) {
            char k[8];
            snprintf(k, sizeof k, "%d", s);
            json_object_set_new(st, k, json_integer(status[s]));
        }
    for (int r = 0; r < TM_AUTH_REASON_COUNT; r++)
        if (counts[r])
            json_object_set_new(re, tm_auth_reason_name((tm_auth_reason)r), json_integer(counts[r]));
    answer(json_pack("{si,si,so,so}", "rc", 0, "errors", errors, "status", st, "reason", re));
}

int main(void)
{
    static char line[120000];
    while (fgets(line, sizeof line, stdin)) {
        char *w[16];
        int n = 0;
        for (char *t = strtok(line, " \r\n"); t && n < 16; t = strtok(NULL, " \r\n"))
            w[n++] = t;
        if (!n)
            continue;
        if (strcmp(w[0], "jwks") == 0 || strcmp(w[0], "introspect") == 0)
            cmd_new(w, n);
        else if (strcmp(w[0], "check") == 0)
            cmd_check(w, n);
        else if (strcmp(w[0], "meta") == 0)
            cmd_meta(w, n);
        else if (strcmp(w[0], "counts") == 0)
            cmd_counts();
        else if (strcmp(w[0], "par") == 0)
            cmd_par(w, n);
        else if (strcmp(w[0], "quit") == 0)
            break;
        else
            answer(json_pack("{si}", "rc", TIDEMARK_EINVAL));
    }
    tm_auth_free(g_auth);
    return 0;
}
