/*
 * tidemark-redis-call - the ceiling of a durable call on Redis, with no
 * server: what the Redis store's own scripts allow when everything a
 * tools/call ledger_append commits is sent as one script call.
 *
 * The store commits such a call as four script calls in one MULTI/EXEC
 * (src/log/store_redis.c: the stream's open, the request record's begin,
 * the priming event's append, and the response's append, which carries the
 * effect's ledger row and closes the stream). This program runs the same
 * four scripts, byte for byte as the store loads them (the generated
 * tm_redis_scripts.h: error codes, helpers, fencing token, body), each
 * wrapped as a Lua function of one script, with the store's arguments, so a
 * call costs one script call and no read: no session or record read before
 * it, no HTTP, no JSON-RPC. Each of --conns connections (a thread each)
 * has its own session and sends one call at a time; under appendfsync
 * always Redis writes and fsyncs once for every call that arrived in the
 * same turn of its event loop, as one MULTI/EXEC of the store's writer is.
 *
 *   tidemark-redis-call --redis HOST:PORT [--db N] [--conns N] [--seconds S] [--warmup W]
 *
 * Its keys go to database --db (0): bench/http.sh gives it one of its own
 * and empties it after each run.
 * Prints one line: "calls/s N conns N aof_bytes/call N": the calls that
 * committed during the S seconds after the warm-up, and what one call adds
 * to the append-only file (200 more calls from one connection afterwards,
 * between two sizes with no rewrite of the file in between; -1 when each
 * of three tries met one, or when the AOF is off). Exits 1 on any script
 * error or refused call. Its session ids, writer id, ledger row and
 * response are shorter than the server's, so if anything a call writes a
 * little less here than through tidemark-server.
 */
#include "net.h"
#include "tm_redis_scripts.h"
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LUA(name) ((const char *)tm_lua_##name)
#define CONNS_MAX 256

/* One ledger_append: ARGV 1 session, 2 request key, 3 stream number,
 * 4 epoch, 5 node, 6 ms, 7 message, 8 response, 9 rows, 10 token prefix,
 * 11 the commit channel (the store's for that database: nobody listens to
 * it here, so a PUBLISH costs less than it does among nodes). The
 * arguments of each script are those of store_redis.c's build(). */
static const char call_tail[] =
    "local s, key, name = ARGV[1], ARGV[2], 'r' .. ARGV[3]\n"
    "local p = 'tm:{' .. s .. '}:'\n"
    "local member = string.len(s) .. ':' .. s .. key\n"
    "local w, t = 'tm:w:' .. ARGV[5], ARGV[10]\n"
    "redis.call('DEL', w)\n" /* the writer's DEL of its tokens, once a batch there */
    "local r = sc_open({p .. 'sess', p .. 'streams'}, {w, t .. '1', '0', p, name, '1', '1'})\n"
    "if r[1] ~= 0 then return {r[1], 'open'} end\n"
    "r = sc_begin({p .. 'sess', p .. 'q:' .. key, 'tm:started', p .. 'reqs'},\n"
    "  {w, t .. '2', '0', member, key, ARGV[6], 'node', ARGV[5], 'tool', 'ledger_append',\n"
    "   'stream', name, 'message', ARGV[7]})\n"
    "if r[1] ~= 0 then return {r[1], 'begin'} end\n"
    "local m, sk, ch = p .. 'm:' .. name, p .. 's:' .. name, ARGV[11]\n"
    "r = sc_append({m, sk, 'tm:started'}, {w, t .. '3', '0', ARGV[4], '', '0', '0', '0', '0',\n"
    "  '', '', ch, ARGV[5], name, s, '', '0'})\n"
    "if r[1] ~= 0 then return {r[1], 'priming'} end\n"
    "r = sc_append({m, sk, 'tm:started'}, {w, t .. '4', '0', ARGV[4], ARGV[8], '1', '0', '0', '0',\n"
    "  p .. 'q:' .. key, member, ch, ARGV[5], name, s, ARGV[9], '1'})\n"
    "if r[1] ~= 0 then return {r[1], 'response'} end\n"
    "return r\n";

static bench_url g_addr; /* --redis: host and port */
static int g_port, g_db;
static char g_sha[41];
static atomic_uint_fast64_t g_calls;
static atomic_int g_stop, g_failed;

static char *fused_script(void)
{
    const char *parts[] = {
        tm_lua_errors, LUA(helpers),
        "local function sc_open(KEYS, ARGV)\n", LUA(token), LUA(open), "\nend\n",
        "local function sc_begin(KEYS, ARGV)\n", LUA(token), LUA(request_begin), "\nend\n",
        "local function sc_append(KEYS, ARGV)\n", LUA(token), LUA(append), "\nend\n",
        call_tail};
    size_t n = 1;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        n += strlen(parts[i]);
    char *s = malloc(n);
    if (!s)
        return NULL;
    s[0] = '\0';
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        strcat(s, parts[i]);
    return s;
}

static redisContext *connect_redis(void)
{
    redisContext *c = redisConnect(g_addr.host, g_port);
    if (!c || c->err) {
        fprintf(stderr, "tidemark-redis-call: %s:%d: %s\n", g_addr.host, g_port,
                c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisReply *x = g_db ? redisCommand(c, "SELECT %d", g_db) : NULL;
    int bad = g_db && (!x || x->type == REDIS_REPLY_ERROR);
    freeReplyObject(x);
    if (bad) {
        fprintf(stderr, "tidemark-redis-call: SELECT %d failed\n", g_db);
        redisFree(c);
        return NULL;
    }
    return c;
}

/* The run has failed (what, when given, printed with x's error first). */
static void fail(const char *what, const redisReply *x)
{
    if (atomic_exchange(&g_failed, 1) == 0 && what)
        fprintf(stderr, "tidemark-redis-call: %s: %s\n", what,
                !x ? "no reply" : x->type == REDIS_REPLY_ERROR ? x->str : "unexpected reply");
    atomic_store(&g_stop, 1);
}

/* One connection and its session. */
typedef struct caller {
    redisContext *c;
    char sess[64], node[32], ms[24], rows[160];
    uint64_t n; /* calls made */
} caller;

static const char call_msg[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                               "{\"name\":\"ledger_append\",\"arguments\":{\"entry\":\"e\"}}}";
static const char call_resp[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":"
                                "\"text\",\"text\":\"appended e\"}],\"structuredContent\":{\"entry\":"
                                "\"e\",\"n\":1}}}";

/* Connect and make the session of caller number id. 0 or -1. */
static int caller_open(caller *k, int id)
{
    *k = (caller){.c = connect_redis()};
    if (!k->c) { /* said by connect_redis */
        fail(NULL, NULL);
        return -1;
    }
    snprintf(k->sess, sizeof k->sess, "bench-%d-%ld", id, (long)time(NULL));
    snprintf(k->node, sizeof k->node, "bench%d", id);
    snprintf(k->ms, sizeof k->ms, "%" PRId64, (int64_t)time(NULL) * 1000);
    snprintf(k->rows, sizeof k->rows, "[[\"ledger\",\"{\\\"session\\\":\\\"%s\\\",\\\"entry\\\":\\\"e\\\"}\"]]",
             k->sess);
    redisReply *x = redisCommand(k->c, "HSET tm:{%s}:sess id %s next_r 1 created_ms %s last_seen_ms %s "
                                       "version 2025-11-25 client bench", k->sess, k->sess, k->ms, k->ms);
    int bad = !x || x->type == REDIS_REPLY_ERROR;
    if (bad)
        fail("session", x);
    freeReplyObject(x);
    return bad ? -1 : 0;
}

/* One ledger_append's writes, a new request each time. 0 or -1. */
static int caller_call(caller *k)
{
    char key[32], num[24], tok[32], chan[32];
    uint64_t n = ++k->n;
    snprintf(key, sizeof key, "i:%" PRIu64, n);
    snprintf(num, sizeof num, "%" PRIu64, n);
    snprintf(tok, sizeof tok, "%" PRIu64 ".", n);
    snprintf(chan, sizeof chan, "tm:%d:commits", g_db);
    redisReply *x = redisCommand(k->c, "EVALSHA %s 0 %s %s %s %s %s %s %s %s %s %s %s", g_sha,
                                 k->sess, key, num, "AAAAAAAAAAAAAAAA", k->node, k->ms, call_msg,
                                 call_resp, k->rows, tok, chan);
    int ok = x && x->type == REDIS_REPLY_ARRAY && x->elements >= 1 &&
             x->element[0]->type == REDIS_REPLY_INTEGER && x->element[0]->integer == 0;
    if (!ok) {
        if (x && x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
            x->element[0]->type == REDIS_REPLY_INTEGER && x->element[1]->type == REDIS_REPLY_STRING)
            fprintf(stderr, "tidemark-redis-call: %s refused: %lld\n", x->element[1]->str,
                    x->element[0]->integer);
        fail("call", x);
    }
    freeReplyObject(x);
    return ok ? 0 : -1;
}

/* One connection: its session, then calls until stopped. */
static void *conn_run(void *arg)
{
    caller k;
    if (caller_open(&k, (int)(intptr_t)arg) == 0) /* else failed and said */
        while (!atomic_load(&g_stop) && caller_call(&k) == 0)
            atomic_fetch_add(&g_calls, 1);
    redisFree(k.c);
    return NULL;
}

static long long info_field(const char *info, const char *name)
{
    const char *p = info ? strstr(info, name) : NULL;
    return p ? atoll(p + strlen(name)) : -1;
}

/* The append-only file's size, or -1 while (or when) it is being rewritten:
 * sizes are compared only when *rewrites, the count of rewrites done, is the
 * same at both ends. */
static long long aof_size(redisContext *c, long long *rewrites)
{
    redisReply *x = redisCommand(c, "INFO persistence");
    const char *info = x && x->type == REDIS_REPLY_STRING ? x->str : NULL;
    long long v = info_field(info, "aof_current_size:");
    *rewrites = info_field(info, "aof_rewrites:");
    if (info_field(info, "aof_rewrite_in_progress:") != 0)
        v = -1;
    freeReplyObject(x);
    return v;
}

/* What one call adds to the append-only file: CAL_CALLS calls from one
 * connection, between two sizes with no rewrite between them (up to three
 * tries; -1 when each met a rewrite, -2 on a failed call). */
#define CAL_CALLS 200
static long long aof_per_call(redisContext *c, int id)
{
    caller k;
    long long bytes = -1;
    if (caller_open(&k, id) != 0) {
        redisFree(k.c);
        return -2;
    }
    for (int t = 0; t < 3 && bytes < 0; t++) {
        long long w0, w1, a0 = aof_size(c, &w0);
        for (int i = 0; i < CAL_CALLS; i++)
            if (caller_call(&k) != 0) {
                redisFree(k.c);
                return -2;
            }
        long long a1 = aof_size(c, &w1);
        if (a0 >= 0 && a1 >= a0 && w0 == w1)
            bytes = (a1 - a0) / CAL_CALLS;
    }
    redisFree(k.c);
    return bytes;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int usage(void)
{
    fprintf(stderr, "usage: tidemark-redis-call --redis HOST:PORT [--db N] [--conns N] [--seconds S] [--warmup W]\n");
    return 2;
}

int main(int argc, char **argv)
{
    int conns = 16;
    double secs = 3, warm = 0.5;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            return usage();
        if (strcmp(argv[i], "--redis") == 0) {
            i++;
            if (bench_parse_hostport(argv[i], strlen(argv[i]), &g_addr) != 0)
                return usage();
            g_port = atoi(g_addr.port);
        } else if (strcmp(argv[i], "--db") == 0) {
            g_db = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--conns") == 0) {
            conns = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--seconds") == 0) {
            secs = atof(argv[++i]);
        } else if (strcmp(argv[i], "--warmup") == 0) {
            warm = atof(argv[++i]);
        } else {
            return usage();
        }
    }
    if (g_port <= 0 || g_db < 0 || conns < 1 || conns > CONNS_MAX || secs <= 0 || warm < 0)
        return usage();
    redisContext *c = connect_redis();
    char *src = fused_script();
    if (!c || !src)
        return 1;
    redisReply *x = redisCommand(c, "SCRIPT LOAD %s", src);
    free(src);
    if (!x || x->type != REDIS_REPLY_STRING || x->len != 40) {
        fprintf(stderr, "tidemark-redis-call: SCRIPT LOAD: %s\n",
                x && x->type == REDIS_REPLY_ERROR ? x->str : "unexpected reply");
        return 1;
    }
    memcpy(g_sha, x->str, 41);
    freeReplyObject(x);
    pthread_t th[CONNS_MAX];
    for (int i = 0; i < conns; i++)
        if (pthread_create(&th[i], NULL, conn_run, (void *)(intptr_t)i) != 0)
            return 1;
    sleep_s(warm);
    uint64_t c0 = atomic_load(&g_calls);
    sleep_s(secs);
    uint64_t c1 = atomic_load(&g_calls);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < conns; i++)
        pthread_join(th[i], NULL);
    if (atomic_load(&g_failed))
        return 1;
    if (c1 == c0) {
        fprintf(stderr, "tidemark-redis-call: no call committed in %.1f s\n", secs);
        return 1;
    }
    long long bytes = aof_per_call(c, conns);
    redisFree(c);
    if (bytes == -2)
        return 1;
    printf("calls/s %.0f conns %d aof_bytes/call %lld\n", (double)(c1 - c0) / secs, conns, bytes);
    return 0;
}
