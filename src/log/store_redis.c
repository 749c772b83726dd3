/*
 * store_redis.c - the event log on Redis Streams, shared by many nodes.
 * URI: redis://HOST:PORT[/DB].
 *
 * Redis is the only authority. Every mutation is one Lua script, so a seq is
 * assigned, its entry written (XADD with the explicit id "<seq>-0"), the
 * stream's bounds updated, retention applied with its trim record, a request
 * record completed and a wake-up PUBLISHed in one atomic step inside Redis:
 * the id is the store's on every node, and a node learns it only from the
 * script's reply (commit, then emit).
 *
 * Keys ({session} is a hash tag: all of a session's keys share a slot):
 *   tm:{S}:sess          hash: id, version, client, created_ms, last_seen_ms, next_r,
 *                        and "a:<name>" -> JSON for each session attribute
 *   tm:{S}:streams       set of stream names
 *   tm:{S}:m:<name>      hash: head, first, closed, te (epoch of seq first-1)
 *   tm:{S}:s:<name>      stream: entry "<seq>-0" {d: bytes, e: epoch, t: ms}
 *   tm:{S}:q:<key>       hash: a request record (state, tool, stream, message,
 *                        response, updated_ms, node)
 *   tm:{S}:reqs          set of request keys (to delete them with the session)
 *   tm:sessions          sorted set: session id by last_seen_ms (idle expiry)
 *   tm:rows:<table>      stream: application rows written by atomic effects
 *                        (tidemark_txn_insert), entry "<id>-0" {doc: JSON}
 *   tm:rowid             hash: table -> last row id
 *   tm:started           set of "<len(S)>:<S><key>" for every record still started
 *   tm:w:<writer>        hash: op token -> result, for the writer's current batch
 *   tm:node:<writer>     a node's lease (SET PX LEASE_MS, renewed every
 *                        LEASE_RENEW_MS); a record whose "node" has no lease
 *                        was left by a dead node and may be claimed
 * Channel tm:<db>:commits carries "<writer> <seq> <closed 0|1> <stream> <session>".
 * Channel tm:<db>:bus carries "<writer> <channel> <bytes>" (tm_store_publish).
 *
 * Threads. The group-commit writer (writer.h) owns the write connection:
 * everything queued (at most BATCH_MAX ops) is sent as one MULTI/EXEC of
 * EVALSHA calls (this file's hooks: redis_writer_hooks), then the append
 * callbacks run, then the commit listener. Readers use
 * a small pool of connections. One subscriber thread blocks on the channel
 * (poll(), no busy loop) and wakes this node's readers for other nodes'
 * commits.
 *
 * Lost replies. Each op carries a token (writer id, counter); a script records
 * its result under the token in tm:w:<writer>. After a reconnect the writer
 * resends the unanswered ops flagged as retries, and a retry whose token is
 * recorded returns the recorded result instead of running again: a commit
 * whose reply was lost is never duplicated. Ops that cannot say (expiry)
 * fail with TIDEMARK_EIO. An outage longer than OUTAGE_MS fails the queued
 * ops with TIDEMARK_EIO: nothing waits forever.
 *
 * Atomic effects. An effect writes rows (tidemark_txn_insert); the writer
 * collects them and the append script that commits the result event writes
 * them in the same atomic step, after every check that could refuse the
 * append. A final append to a stream already closed (a node taken for dead
 * that still finished its call after a survivor did) is refused whole, rows
 * included: the effect lands once. SQL effects (tidemark_txn_exec) need a
 * store with SQL and fail here with TIDEMARK_ENOTSUP.
 *
 * Epochs. A new random epoch at every open, and a new one whenever a
 * connection (re)connects to a Redis server whose run_id differs from the one
 * seen before (restart, failover): events under the new server can never be
 * taken for events the old one lost. Every entry stores its writer's epoch.
 *
 * Local state is a hint, never the truth: per stream the highest seq seen,
 * the appends queued here, and whether a close is queued here. It gives
 * append() its synchronous TIDEMARK_ENOTFOUND / TIDEMARK_ECLOSED, bounds()
 * its "assigned", and emit_early its not-yet-durable tail. read(), bounds()
 * and event_epoch() always ask Redis: another node may have written.
 *
 * Known limitations (to resolve; docs/design.md should list them):
 *  - "assigned" and emit_early predict seqs from this node's own appends;
 *    exact when one node writes a stream (a request's POST stream). Under
 *    emit_early the script refuses an append whose seq is not the predicted
 *    one (TIDEMARK_EBUSY) rather than store it under another seq.
 *  - requests_unfinished() lists the started records no live node owns
 *    (not this node's, and not of a node whose lease is still held: one
 *    pipelined EXISTS per owning node per page); request_claim() then moves
 *    one to this node atomically (a script), so one survivor finishes it.
 *    A node cut off from Redis longer than its lease
 *    is taken for dead while it may still run its calls: a re-run tool's
 *    effect may then happen twice (its stream still ends in one response,
 *    the first to close it). Bus messages are fire-and-forget (PUBLISH).
 *  - One Redis (primary); Redis Cluster is not supported (global keys).
 *
 * Lock order: c_mu before the queue's lock; e_mu and p_mu are leaves. Callbacks and the
 * commit listener run with no store lock held.
 */
#include "store.h"
#include "writer.h"
#include "../common/sqlite_util.h"
#include "../base/lock.h"
#include "../base/clock.h"
#include "../base/crash.h"
#include "../base/log.h"
#include "../base/str.h"
#include "../base/map.h"
#include "../base/metrics.h"
#include "../base/random.h"
#include "tidemark/tidemark.h"
#include <hiredis/hiredis.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAX 8
#define CONNECT_TIMEOUT_MS 1000
#define CMD_TIMEOUT_MS 10000
#define OUTAGE_MS 3000       /* a batch waits this long for Redis, then fails */
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 500
#define BATCH_MAX 1024       /* ops per pipeline */
#define READ_CHUNK 256       /* entries per XRANGE */
#define EXPIRE_CHUNK 256     /* sessions per expiry script */
#define CACHE_MAX 4096       /* stream entries kept before idle ones are dropped */
#define SUB_PING_MS 5000     /* subscriber: ping an idle connection */
#define SUB_DEAD_MS 15000    /* subscriber: nothing heard this long: reconnect */
#define WKEY_TTL_MS 86400000 /* a dead writer's token hash goes away */
#define LEASE_MS 3000        /* a node not heard of this long is dead */
#define LEASE_RENEW_MS 750
#define READY_WAIT_MS 60000  /* default wait for a server still loading its dataset */
#define LOADING_LOG_MS 5000  /* while waiting for it: say so this often */
#define OPEN_BLOCK 64        /* POST stream numbers a node takes per session at once */
#define TAIL_MAX 16          /* events of a stream kept after their commit here */
#define TAIL_EVENT_MAX 16384 /* ... each at most this long */
#define TAIL_BUDGET (16u << 20) /* ... all streams' at most this many bytes */

/* ---- Lua -------------------------------------------------------------------- */

/* The scripts are the .lua files of src/log/redis/, embedded at build time
 * (src/log/redis/scripts.cmake): tm_lua_<name>, and tm_lua_errors, the
 * error codes as Lua locals. */
#include "tm_redis_scripts.h"
#define LUA(name) ((const char *)tm_lua_##name)

enum script {
    SC_APPEND, SC_CLOSE, SC_OPEN, SC_SESS_CREATE, SC_SESS_TOUCH, SC_SESS_ATTRS, SC_SESS_DELETE,
    SC_REQ_BEGIN, SC_EXPIRE, SC_SWEEP, SC_COUNT
};

/* Each script as loaded (SCRIPT LOAD, then EVALSHA): the error codes, the
 * helpers, token.lua where its ARGV starts with (token hash, token, retry),
 * then its own text. */
static const struct {
    const char *body;
    int token;
} lua_scripts[SC_COUNT] = {
    [SC_APPEND] = {LUA(append), 1},
    [SC_CLOSE] = {LUA(close), 0},
    [SC_OPEN] = {LUA(open), 1},
    [SC_SESS_CREATE] = {LUA(session_create), 1},
    [SC_SESS_TOUCH] = {LUA(session_touch), 0},
    [SC_SESS_ATTRS] = {LUA(session_attrs), 0},
    [SC_SESS_DELETE] = {LUA(session_delete), 1},
    [SC_REQ_BEGIN] = {LUA(request_begin), 1},
    [SC_EXPIRE] = {LUA(expire), 0},
    [SC_SWEEP] = {LUA(sweep), 0},
};

/* ---- local state ---------------------------------------------------------------- */

/* emit_early: an event queued here, not yet durable. */
typedef struct early {
    uint64_t seq;
    char *data; /* NULL while an effect may still replace the bytes */
    size_t len;
    struct early *next;
} early;

typedef struct rstream {
    char *session, *name;
    uint64_t known;        /* highest seq known to be durable */
    uint64_t pending;      /* appends queued here, not yet answered */
    int closing;           /* closed in Redis or a close/final queued here */
    int close_pending;     /* closes/finals queued here, not yet answered */
    int open_pending;      /* created here by a queued open (a reserved number), not yet
                              answered: Redis may not have it yet, nothing in it is durable */
    early *early_head, *early_tail;
    /* A POST stream this node opened (own) is written by this node alone
     * unless another node takes over its call (its lease lapsed) or closes
     * it: those tell (heard, heard_closed). While they have not, what this
     * node committed is the whole stream: reads and bounds are answered
     * here (tail_usable), Redis is not asked. */
    int own;
    unsigned gen;          /* the server identity it was made under */
    uint64_t heard;        /* highest head another node told of */
    int heard_closed;      /* another node closed it */
    int durable_closed;    /* this node's close / final append of it committed */
    struct tev {
        char *data;
        size_t len;
        char epoch[TM_EPOCH_LEN + 1];
    } tail[TAIL_MAX];      /* the events tail_lo .. tail_lo + tail_n - 1, as committed here */
    uint64_t tail_lo;
    size_t tail_n;
} rstream;

/* POST stream numbers of a session reserved by this node (open.lua): next
 * .. end-1 are opened without waiting for Redis. Valid only while the
 * server's identity is the one they were taken from (gen). */
typedef struct resv {
    uint64_t next, end;
    unsigned gen;
} resv;

enum op_kind {
    OP_APPEND, OP_CLOSE, OP_OPEN, OP_SESS_CREATE, OP_SESS_TOUCH, OP_SESS_ATTRS, OP_SESS_DELETE,
    OP_REQ_BEGIN, OP_EXPIRE,
};

enum op_state { ST_TODO, ST_SENT, ST_DONE, ST_FOLDED /* a close its stream's append carries */ };

typedef struct rop {
    tm_wop w;              /* first: the writer's part (writer.h); w.q.ctr is the
                              op's token counter, w.seq: append: predicted, then
                              durable; open: n; expire: how many */
    enum op_kind kind;
    enum op_state state;
    int retry;             /* resend after a lost reply: the token decides */
    int fx_done;           /* the effect ran (first attempt only) */
    int fresh;             /* open: of a reserved POST stream number (name set) */
    int replayed;          /* answered from its token: committed by an earlier attempt */
    int closes;            /* append: also closes its stream (a close folded into it) */
    struct rop *carrier;   /* close, ST_FOLDED: the append that closes its stream */
    char epoch[TM_EPOCH_LEN + 1]; /* append: the epoch it was sent with */
    int reserve;           /* open of the next POST stream: numbers to take */
    int wake;              /* append: the last of its stream in the batch sent */
    char *session, *name;  /* name: stream, or NULL (next POST stream) */
    uint64_t expect;       /* emit_early: the seq readers may have seen */
    char *data;
    size_t len;
    unsigned flags;
    char *request_key;
    tm_effect_fn effect;
    void *effect_ud;
    json_t *rows;          /* the effect's rows: [[table, doc], ...], or NULL */
    char *fallback;
    size_t fallback_len;
    int64_t ms;
    tm_session_rec srec;
    tm_request_rec rrec;
    char **ids;            /* OP_EXPIRE: sessions deleted */
    size_t nids;
} rop;

typedef struct rstore {
    tm_store base;
    tm_store_options opt;
    char *host;
    int port, db;
    char wid[17];          /* this writer: token namespace, ignores own wake-ups */
    char wkey[32];
    char channel[48];
    char bus[48];          /* tm:<db>:bus */
    char lease[32];        /* tm:node:<wid> */
    redisContext *lease_conn; /* the first lease's connection, handed to the lease thread */
    pthread_t leaser;
    int leaser_started;
    atomic_int sub_ready;  /* subscribed at least once */
    char sha[SC_COUNT][41];
    char *claim_src;       /* claim.lua with the error codes (sent with EVAL) */

    pthread_mutex_t e_mu;  /* server identity and base.epoch */
    char run_id[64];
    atomic_uint ident_gen; /* bumped when the server's identity changes */

    pthread_mutex_t c_mu;  /* local hints */
    tm_map *streams;       /* "<len>:<session>/<name>" -> rstream */
    tm_map *resv;          /* session -> resv */
    size_t tail_bytes;     /* held by the streams' tails */
    int tails;             /* tails are kept (no retention, no emit_early) */

    tm_writer *writer;     /* the group-commit writer (writer.h); its thread owns: */
    redisContext *wc;
    int64_t down_since;    /* monotonic ms the write connection was lost, 0 if up */
    atomic_int loading;    /* the last connection attempt found the server loading its dataset */
    atomic_int w_down;     /* the write connection is down (tm_store_writable) */
    int64_t loading_logged; /* writer: when that was last logged (monotonic ms) */
    int wkey_dirty;        /* tokens recorded by the previous batch */

    pthread_mutex_t p_mu;
    pthread_cond_t p_cv;
    redisContext *pfree[POOL_MAX];
    int npfree, npopen;

    pthread_t sub;
    int sub_started;
    int wake[2];           /* pipe: tells the subscriber to stop */
} rstore;

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, f);
    int n = vasprintf(&s, f, ap);
    va_end(ap);
    return n < 0 ? NULL : s;
}

static char *cache_key(const char *session, const char *name)
{
    return fmt("%zu:%s/%s", strlen(session), session, name);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static struct timeval ms_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* ---- command arguments --------------------------------------------------------- */

#define ARGS_MAX 32

typedef struct args {
    int n, nheap, oom;
    const char *v[ARGS_MAX];
    size_t len[ARGS_MAX];
    char *heap[ARGS_MAX];
} args;

static void arg_bin(args *a, const void *p, size_t n)
{
    if (a->n == ARGS_MAX) {
        a->oom = 1;
        return;
    }
    a->v[a->n] = p ? p : "";
    a->len[a->n++] = p ? n : 0;
}

static void arg_str(args *a, const char *s) { arg_bin(a, s, s ? strlen(s) : 0); }

/* A formatted argument the builder owns. */
static void arg_fmt(args *a, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void arg_fmt(args *a, const char *f, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, f);
    int n = vasprintf(&s, f, ap);
    va_end(ap);
    if (n < 0 || a->nheap == ARGS_MAX) {
        if (n >= 0)
            free(s);
        a->oom = 1;
        return;
    }
    a->heap[a->nheap++] = s;
    arg_bin(a, s, (size_t)n);
}

static void args_free(args *a)
{
    for (int i = 0; i < a->nheap; i++)
        free(a->heap[i]);
    a->nheap = a->n = 0;
}

/* A field of a hash the script writes, when there is a value: an absent
 * field reads back as NULL. */
static void arg_pair(args *a, const char *field, const char *value)
{
    if (value) {
        arg_str(a, field);
        arg_str(a, value);
    }
}

/* EVALSHA <script> <nkeys>, then the keys and arguments follow. */
static void arg_eval(rstore *r, args *a, enum script sc, int nkeys)
{
    arg_str(a, "EVALSHA");
    arg_str(a, r->sha[sc]);
    arg_fmt(a, "%d", nkeys);
}

/* The token arguments of LUA_TOKEN scripts. */
static void arg_token(rstore *r, args *a, const rop *o)
{
    arg_str(a, r->wkey);
    arg_fmt(a, "%" PRIu64, o->w.q.ctr);
    arg_str(a, o->retry ? "1" : "0");
}

/* ---- connections --------------------------------------------------------------- */

static void current_epoch(rstore *r, char out[TM_EPOCH_LEN + 1])
{
    pthread_mutex_lock(&r->e_mu);
    memcpy(out, r->base.epoch, TM_EPOCH_LEN + 1);
    pthread_mutex_unlock(&r->e_mu);
}

/* A connection reached a server: if it is another server than the one seen
 * before, whatever that one held may be lost or older here, so the seqs it
 * assigns from now on need a new writer generation. */
static void note_identity(rstore *r, const char *run_id)
{
    pthread_mutex_lock(&r->e_mu);
    if (r->run_id[0] && strcmp(r->run_id, run_id) != 0) {
        char old[TM_EPOCH_LEN + 1];
        memcpy(old, r->base.epoch, sizeof old);
        if (tm_random_hex(r->base.epoch, TM_EPOCH_LEN / 2) != 0)
            memcpy(r->base.epoch, old, sizeof old);
        TM_WARN("redis: server identity changed (run_id %s -> %s): epoch %s -> %s", r->run_id,
                run_id, old, r->base.epoch);
        atomic_fetch_add(&r->ident_gen, 1); /* stream numbers reserved there may be lost */
    }
    snprintf(r->run_id, sizeof r->run_id, "%s", run_id);
    pthread_mutex_unlock(&r->e_mu);
}

static int reply_ok(redisReply *rep)
{
    int ok = rep && rep->type != REDIS_REPLY_ERROR;
    freeReplyObject(rep);
    return ok;
}

/* Connect, select the database, and check the server's identity. */
static redisContext *conn_open(rstore *r)
{
    redisContext *c = redisConnectWithTimeout(r->host, r->port, ms_tv(CONNECT_TIMEOUT_MS));
    if (!c || c->err) {
        TM_DEBUG("redis: connect %s:%d: %s", r->host, r->port, c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, ms_tv(CMD_TIMEOUT_MS));
    redisEnableKeepAlive(c);
    if (r->db && !reply_ok(redisCommand(c, "SELECT %d", r->db)))
        goto fail;
    redisReply *info = redisCommand(c, "INFO server");
    if (!info || info->type != REDIS_REPLY_STRING) {
        freeReplyObject(info);
        goto fail;
    }
    char run_id[64] = "";
    const char *p = strstr(info->str, "run_id:");
    if (p)
        sscanf(p + 7, "%63[0-9a-zA-Z]", run_id);
    freeReplyObject(info);
    if (!run_id[0])
        goto fail;
    /* A server reading its AOF/RDB answers INFO and SELECT but refuses
     * everything else with -LOADING: not usable yet (callers wait, bounded). */
    redisReply *ping = redisCommand(c, "PING");
    int loading = ping && ping->type == REDIS_REPLY_ERROR && strncmp(ping->str, "LOADING", 7) == 0;
    freeReplyObject(ping);
    atomic_store(&r->loading, loading);
    if (loading) {
        TM_DEBUG("redis: %s:%d is loading its dataset", r->host, r->port);
        redisFree(c);
        return NULL;
    }
    note_identity(r, run_id);
    return c;
fail:
    TM_DEBUG("redis: %s:%d: setup failed: %s", r->host, r->port, c->err ? c->errstr : "error reply");
    redisFree(c);
    return NULL;
}

/* Load every script on c (a restarted server has none). */
static int load_scripts(rstore *r, redisContext *c)
{
    for (int i = 0; i < SC_COUNT; i++) {
        char *src = fmt("%s%s%s%s", tm_lua_errors, LUA(helpers), lua_scripts[i].token ? LUA(token) : "",
                        lua_scripts[i].body);
        if (!src)
            return TIDEMARK_ENOMEM;
        redisReply *rep = redisCommand(c, "SCRIPT LOAD %s", src);
        free(src);
        if (!rep || rep->type != REDIS_REPLY_STRING || rep->len != 40) {
            TM_ERROR("redis: SCRIPT LOAD: %s", rep && rep->type == REDIS_REPLY_ERROR ? rep->str
                                                : c->err ? c->errstr : "unexpected reply");
            freeReplyObject(rep);
            return TIDEMARK_EIO;
        }
        memcpy(r->sha[i], rep->str, 41);
        freeReplyObject(rep);
    }
    return 0;
}

/* Read connections: a small pool, each used by one thread at a time. */
static redisContext *pool_get(rstore *r)
{
    pthread_mutex_lock(&r->p_mu);
    while (r->npfree == 0 && r->npopen >= POOL_MAX)
        pthread_cond_wait(&r->p_cv, &r->p_mu);
    if (r->npfree > 0) {
        redisContext *c = r->pfree[--r->npfree];
        pthread_mutex_unlock(&r->p_mu);
        return c;
    }
    r->npopen++;
    pthread_mutex_unlock(&r->p_mu);
    redisContext *c = conn_open(r);
    if (!c) {
        pthread_mutex_lock(&r->p_mu);
        r->npopen--;
        pthread_cond_signal(&r->p_cv);
        pthread_mutex_unlock(&r->p_mu);
    }
    return c;
}

static void pool_put(rstore *r, redisContext *c)
{
    pthread_mutex_lock(&r->p_mu);
    if (c->err) {
        /* Broken, and the idle ones most likely with it (a restarted or
         * unreachable server): the next users open fresh ones. */
        redisFree(c);
        r->npopen--;
        while (r->npfree > 0) {
            redisFree(r->pfree[--r->npfree]);
            r->npopen--;
        }
    } else {
        r->pfree[r->npfree++] = c;
    }
    pthread_cond_signal(&r->p_cv);
    pthread_mutex_unlock(&r->p_mu);
}

/* Run n read commands as one pipeline on a pooled connection; a connection
 * that broke is replaced once (reads are safe to repeat). OUT rep[0..n) the
 * replies (caller frees). TIDEMARK_EIO when Redis cannot be reached. */
static int pool_run(rstore *r, args *cmds, int n, redisReply **rep)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        redisContext *c = pool_get(r);
        if (!c)
            continue;
        int i = 0, got = 0;
        for (i = 0; i < n; i++)
            if (redisAppendCommandArgv(c, cmds[i].n, cmds[i].v, cmds[i].len) != REDIS_OK)
                break;
        if (i == n) {
            for (got = 0; got < n; got++) {
                void *x = NULL;
                if (redisGetReply(c, &x) != REDIS_OK)
                    break;
                rep[got] = x;
            }
        }
        int broken = got < n;
        if (broken && !c->err)
            c->err = REDIS_ERR_OTHER; /* half-read pipeline: never reuse */
        pool_put(r, c);
        if (!broken)
            return 0;
        for (int k = 0; k < got; k++)
            freeReplyObject(rep[k]);
    }
    return TIDEMARK_EIO;
}

/* One read command; a's strings are released. OUT x (caller frees). */
static int pool_one(rstore *r, args *a, redisReply **x)
{
    int rc = a->oom ? TIDEMARK_ENOMEM : pool_run(r, a, 1, x);
    args_free(a);
    return rc;
}

/* One page of a paged read: "<cmd> <key> <from> [<to>] COUNT READ_CHUNK"
 * (XRANGE, ZSCAN). OUT x (caller frees). */
static int pool_page(rstore *r, redisReply **x, const char *cmd, const char *key, const char *from,
                     const char *to)
{
    args a = {0};
    arg_str(&a, cmd);
    arg_str(&a, key);
    arg_str(&a, from);
    if (to)
        arg_str(&a, to);
    arg_str(&a, "COUNT");
    arg_fmt(&a, "%d", READ_CHUNK);
    *x = NULL;
    return pool_one(r, &a, x);
}

/* What a HGETALL's reply says: 0 (a hash), TIDEMARK_ENOTFOUND (none), or
 * TIDEMARK_EIO; a reply that is not 0 is freed and *x set to NULL. */
static int hash_reply(redisReply **x)
{
    int rc = (*x)->type != REDIS_REPLY_ARRAY ? TIDEMARK_EIO
             : (*x)->elements == 0            ? TIDEMARK_ENOTFOUND
                                              : 0;
    if (rc) {
        freeReplyObject(*x);
        *x = NULL;
    }
    return rc;
}

/* HGETALL of a formatted key. OUT x: the field/value array (caller frees).
 * TIDEMARK_ENOTFOUND when the hash does not exist. */
static int hgetall(rstore *r, redisReply **x, const char *f, ...) __attribute__((format(printf, 3, 4)));
static int hgetall(rstore *r, redisReply **x, const char *f, ...)
{
    args a = {0};
    char *key = NULL;
    va_list ap;
    va_start(ap, f);
    int n = vasprintf(&key, f, ap);
    va_end(ap);
    if (n < 0)
        return TIDEMARK_ENOMEM;
    arg_str(&a, "HGETALL");
    arg_bin(&a, key, (size_t)n);
    *x = NULL;
    int rc = pool_one(r, &a, x);
    free(key);
    return rc ? rc : hash_reply(x);
}

/* ---- reply helpers ------------------------------------------------------------- */

static int64_t int_of(const redisReply *x)
{
    if (!x)
        return 0;
    if (x->type == REDIS_REPLY_INTEGER)
        return x->integer;
    if (x->type == REDIS_REPLY_STRING)
        return strtoll(x->str, NULL, 10);
    return 0;
}

static int is_array(const redisReply *x, size_t min)
{
    return x && x->type == REDIS_REPLY_ARRAY && x->elements >= min;
}

static int is_nil(const redisReply *x) { return !x || x->type == REDIS_REPLY_NIL; }

/* Value of field name in a flat field/value array, or NULL. */
static const redisReply *kv_get(const redisReply *kv, const char *name)
{
    if (!is_array(kv, 0))
        return NULL;
    for (size_t i = 0; i + 1 < kv->elements; i += 2)
        if (kv->element[i]->type == REDIS_REPLY_STRING && strcmp(kv->element[i]->str, name) == 0)
            return kv->element[i + 1];
    return NULL;
}

static char *kv_dup(const redisReply *kv, const char *name)
{
    const redisReply *v = kv_get(kv, name);
    return v && v->type == REDIS_REPLY_STRING ? tm_memdup(v->str, v->len) : NULL;
}

/* ---- local hints -------------------------------------------------------------- */

static void early_free(early *e)
{
    while (e) {
        early *n = e->next;
        free(e->data);
        free(e);
        e = n;
    }
}

static void tail_clear(rstore *r, rstream *s)
{
    for (size_t i = 0; i < s->tail_n; i++) {
        struct tev *e = &s->tail[(s->tail_lo + i) % TAIL_MAX];
        r->tail_bytes -= e->len;
        free(e->data);
        e->data = NULL;
    }
    s->tail_n = 0;
}

/* Keep an event this node committed as seq (its bytes are taken). The
 * tail stays a run of consecutive seqs: one that does not follow starts it
 * over. Caller holds c_mu. */
static void tail_add(rstore *r, rstream *s, uint64_t seq, char **data, size_t len,
                     const char *epoch)
{
    TM_ASSERT_HELD(&r->c_mu);
    if (s->tail_n && seq != s->tail_lo + s->tail_n)
        tail_clear(r, s);
    if (len > TAIL_EVENT_MAX || r->tail_bytes + len > TAIL_BUDGET || !*data) {
        tail_clear(r, s);
        return;
    }
    if (s->tail_n == TAIL_MAX) {
        struct tev *old = &s->tail[s->tail_lo % TAIL_MAX];
        r->tail_bytes -= old->len;
        free(old->data);
        s->tail_lo++;
        s->tail_n--;
    }
    if (!s->tail_n)
        s->tail_lo = seq;
    struct tev *e = &s->tail[seq % TAIL_MAX];
    e->data = *data;
    e->len = len;
    memcpy(e->epoch, epoch, TM_EPOCH_LEN + 1);
    *data = NULL;
    r->tail_bytes += len;
    s->tail_n++;
}

/* Whether this node's knowledge of s is the stream (see rstream.own): not
 * while Redis is out of reach (it may come back another server, with less).
 * Caller holds c_mu. */
static int tail_usable(rstore *r, const rstream *s)
{
    TM_ASSERT_HELD(&r->c_mu);
    return r->tails && s->own && !s->open_pending && s->heard <= s->known && !s->heard_closed &&
           s->gen == atomic_load(&r->ident_gen) && !atomic_load(&r->w_down);
}

static void rstream_free(rstore *r, rstream *s)
{
    tail_clear(r, s);
    early_free(s->early_head);
    free(s->session);
    free(s->name);
    free(s);
}

typedef struct key_list {
    const char *prefix; /* NULL: idle entries */
    size_t plen;
    char **v;
    size_t n, cap;
} key_list;

static void collect_keys(const char *k, void *val, void *ud)
{
    key_list *l = ud;
    rstream *s = val;
    if (l->prefix ? strncmp(k, l->prefix, l->plen) != 0
                  : (s->pending || s->close_pending || s->open_pending || s->early_head))
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return;
        l->v = v;
        l->cap = cap;
    }
    if ((l->v[l->n] = strdup(k)) != NULL)
        l->n++;
}

/* Drop stream entries: a session's (prefix) or the idle ones (NULL). Caller
 * holds c_mu. */
static void drop_streams(rstore *r, const char *prefix)
{
    key_list l = {prefix, prefix ? strlen(prefix) : 0, NULL, 0, 0};
    tm_map_each(r->streams, collect_keys, &l);
    for (size_t i = 0; i < l.n; i++) {
        rstream *s = tm_map_del(r->streams, l.v[i]);
        if (s)
            rstream_free(r, s);
        free(l.v[i]);
    }
    free(l.v);
}

static void forget_session(rstore *r, const char *id)
{
    char *prefix = fmt("%zu:%s/", strlen(id), id);
    pthread_mutex_lock(&r->c_mu);
    if (prefix)
        drop_streams(r, prefix);
    free(tm_map_del(r->resv, id));
    pthread_mutex_unlock(&r->c_mu);
    tm_writer_touch_forget(r->writer, id);
    free(prefix);
}

/* Fold what Redis said about a stream into its hint. The head counts only
 * while nothing of ours is in flight: an unanswered append of ours may
 * already be in it, and "known + pending" would count it twice. Caller
 * holds c_mu. */
static void note_head(rstream *s, uint64_t head, int closed)
{
    if (!s)
        return;
    if (!s->pending && head > s->known)
        s->known = head;
    if (closed)
        s->closing = 1; /* re-checked before an append is refused */
}

/* Head and closed flag of a stream, from Redis. */
static int stream_state(rstore *r, const char *session, const char *name, uint64_t *head,
                        int *closed)
{
    args a = {0};
    arg_str(&a, "HMGET");
    arg_fmt(&a, "tm:{%s}:m:%s", session, name);
    arg_str(&a, "head");
    arg_str(&a, "closed");
    redisReply *rep = NULL;
    int rc = pool_one(r, &a, &rep);
    if (rc)
        return rc;
    if (!is_array(rep, 2))
        rc = TIDEMARK_EIO;
    else if (is_nil(rep->element[0]))
        rc = TIDEMARK_ENOTFOUND;
    else {
        *head = (uint64_t)int_of(rep->element[0]);
        *closed = int_of(rep->element[1]) == 1;
    }
    freeReplyObject(rep);
    return rc;
}

/* The entry of a stream, loaded from Redis when absent. Caller holds c_mu,
 * released and retaken around the load. OUT rc on NULL. */
static rstream *stream_ref(rstore *r, const char *session, const char *name, int *rc)
{
    TM_ASSERT_HELD(&r->c_mu);
    char *key = cache_key(session, name);
    if (!key) {
        *rc = TIDEMARK_ENOMEM;
        return NULL;
    }
    rstream *s = tm_map_get(r->streams, key);
    if (s) {
        free(key);
        return s;
    }
    pthread_mutex_unlock(&r->c_mu);
    uint64_t head = 0;
    int closed = 0;
    *rc = stream_state(r, session, name, &head, &closed);
    pthread_mutex_lock(&r->c_mu);
    if (*rc == 0 && (s = tm_map_get(r->streams, key)) == NULL) {
        if (tm_map_count(r->streams) >= CACHE_MAX)
            drop_streams(r, NULL);
        s = calloc(1, sizeof *s);
        if (s) {
            s->session = strdup(session);
            s->name = strdup(name);
        }
        if (!s || !s->session || !s->name || tm_map_put(r->streams, key, s) != 0) {
            if (s)
                rstream_free(r, s);
            s = NULL;
            *rc = TIDEMARK_ENOMEM;
        } else {
            s->known = head;
            s->closing = closed;
        }
    }
    free(key);
    return s;
}

/* ---- the queue ------------------------------------------------------------------ */

static rop *op_new(enum op_kind k)
{
    rop *o = calloc(1, sizeof *o);
    if (o) {
        o->kind = k;
        o->ms = tm_wall_ms();
        o->w.enq_us = tm_now_us();
    }
    return o;
}

static void op_free(rop *o)
{
    free(o->session);
    free(o->name);
    free(o->data);
    free(o->request_key);
    free(o->fallback);
    json_decref(o->rows);
    tm_session_rec_clear(&o->srec);
    tm_request_rec_clear(&o->rrec);
    for (size_t i = 0; i < o->nids; i++)
        free(o->ids[i]);
    free(o->ids);
    free(o);
}

static rop *op_next(const rop *o) { return (rop *)o->w.q.next; }

static void enqueue(rstore *r, rop *o) { tm_writer_push(r->writer, &o->w); }

/* Queue o and wait until the writer finished it. Returns its status; o
 * stays the caller's. */
static int wait_op(rstore *r, rop *o) { return tm_writer_run(r->writer, &o->w); }

/* Queue o, wait for it, free it. */
static int run_sync(rstore *r, rop *o)
{
    int rc = wait_op(r, o);
    op_free(o);
    return rc;
}

/* ---- the writer ------------------------------------------------------------------ */

/* tidemark_txn_insert on Redis: keep the row for the append script. */
static int buffer_row(struct tidemark_txn *txn, const char *table, const char *doc)
{
    rop *o = txn->impl;
    if (!o->rows && !(o->rows = json_array()))
        return TIDEMARK_ENOMEM;
    json_t *row = json_pack("[ss]", table, doc);
    if (!row || json_array_append_new(o->rows, row) != 0)
        return TIDEMARK_ENOMEM;
    return 0;
}

/* A Redis transaction: rows only (no SQL), kept on the op. */
static const struct tm_txn_ops redis_txn_ops = {.name = "redis", .insert = buffer_row};

/* Run o's effect once (the first time o is built): its rows ride in o's
 * script. A failed effect leaves no row; o then carries the fallback. */
static void run_effect(rop *o)
{
    struct tidemark_txn txn = {.ops = &redis_txn_ops, .impl = o};
    o->fx_done = 1;
    int rc = o->effect(o->effect_ud, &txn);
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "effect_before_commit");
    if (rc != 0) {
        json_decref(o->rows);
        o->rows = NULL;
        free(o->data);
        o->data = o->fallback;
        o->len = o->fallback_len;
        o->fallback = NULL;
    }
}

/* The command of an append: its effect runs first (once), its rows ride in
 * the script. */
static void build_append(rstore *r, rop *o, const char *epoch, args *a)
{
    const char *s = o->session;
    if (o->effect && !o->fx_done)
        run_effect(o);
    memcpy(o->epoch, epoch, TM_EPOCH_LEN + 1);
    arg_eval(r, a, SC_APPEND, 3);
    arg_fmt(a, "tm:{%s}:m:%s", s, o->name);
    arg_fmt(a, "tm:{%s}:s:%s", s, o->name);
    arg_str(a, "tm:started");
    arg_token(r, a, o);
    arg_str(a, epoch);
    arg_bin(a, o->data, o->len);
    arg_str(a, (o->flags & TM_APPEND_FINAL) || o->closes ? "1" : "0");
    arg_fmt(a, "%" PRIu64, r->opt.retain_events);
    arg_fmt(a, "%" PRId64, r->opt.retain_ms > 0 ? r->opt.retain_ms : 0);
    arg_fmt(a, "%" PRIu64, o->expect);
    if (o->request_key) {
        arg_fmt(a, "tm:{%s}:q:%s", s, o->request_key);
        arg_fmt(a, "%zu:%s%s", strlen(s), s, o->request_key);
    } else {
        arg_str(a, "");
        arg_str(a, "");
    }
    arg_str(a, r->channel);
    arg_str(a, r->wid);
    arg_str(a, o->name);
    arg_str(a, s);
    if (o->rows && json_array_size(o->rows) > 0) {
        char *rows = json_dumps(o->rows, JSON_COMPACT);
        arg_fmt(a, "%s", rows ? rows : "");
        if (!rows)
            a->oom = 1;
        free(rows);
    } else {
        arg_str(a, "");
    }
    arg_str(a, o->wake ? "1" : "0");
}

static void build_session_create(rstore *r, rop *o, args *a)
{
    const char *s = o->session;
    arg_eval(r, a, SC_SESS_CREATE, 2);
    arg_fmt(a, "tm:{%s}:sess", s);
    arg_str(a, "tm:sessions");
    arg_token(r, a, o);
    arg_str(a, s);
    arg_fmt(a, "%" PRId64, o->srec.last_seen_ms);
    arg_pair(a, "id", s);
    arg_str(a, "created_ms");
    arg_fmt(a, "%" PRId64, o->srec.created_ms);
    arg_str(a, "last_seen_ms");
    arg_fmt(a, "%" PRId64, o->srec.last_seen_ms);
    arg_pair(a, "version", o->srec.protocol_version);
    arg_pair(a, "client", o->srec.client);
}

static void build_request_begin(rstore *r, rop *o, args *a)
{
    const char *s = o->session;
    arg_eval(r, a, SC_REQ_BEGIN, 4);
    arg_fmt(a, "tm:{%s}:sess", s);
    arg_fmt(a, "tm:{%s}:q:%s", s, o->rrec.key);
    arg_str(a, "tm:started");
    arg_fmt(a, "tm:{%s}:reqs", s);
    arg_token(r, a, o);
    arg_fmt(a, "%zu:%s%s", strlen(s), s, o->rrec.key);
    arg_str(a, o->rrec.key);
    arg_fmt(a, "%" PRId64, o->ms);
    arg_pair(a, "node", r->wid);
    arg_pair(a, "tool", o->rrec.tool);
    arg_pair(a, "stream", o->rrec.stream);
    arg_pair(a, "message", o->rrec.message);
}

/* The script call of o (EVALSHA, keys, arguments). */
static void build(rstore *r, rop *o, const char *epoch, args *a)
{
    const char *s = o->session;
    switch (o->kind) {
    case OP_APPEND:
        build_append(r, o, epoch, a);
        return;
    case OP_CLOSE:
        arg_eval(r, a, SC_CLOSE, 1);
        arg_fmt(a, "tm:{%s}:m:%s", s, o->name);
        arg_str(a, r->channel);
        arg_str(a, r->wid);
        arg_str(a, o->name);
        arg_str(a, s);
        return;
    case OP_OPEN:
        arg_eval(r, a, SC_OPEN, 2);
        arg_fmt(a, "tm:{%s}:sess", s);
        arg_fmt(a, "tm:{%s}:streams", s);
        arg_token(r, a, o);
        arg_fmt(a, "tm:{%s}:", s);
        arg_str(a, o->name ? o->name : "");
        arg_fmt(a, "%d", o->reserve > 0 ? o->reserve : 1);
        arg_str(a, o->fresh ? "1" : "0");
        return;
    case OP_SESS_CREATE:
        build_session_create(r, o, a);
        return;
    case OP_SESS_TOUCH:
        arg_eval(r, a, SC_SESS_TOUCH, 2);
        arg_fmt(a, "tm:{%s}:sess", s);
        arg_str(a, "tm:sessions");
        arg_fmt(a, "%" PRId64, o->ms);
        arg_str(a, s);
        return;
    case OP_SESS_ATTRS:
        arg_eval(r, a, SC_SESS_ATTRS, 1);
        arg_fmt(a, "tm:{%s}:sess", s);
        arg_fmt(a, "a:%s", o->srec.client);
        arg_str(a, o->srec.attrs ? o->srec.attrs : "");
        arg_str(a, o->srec.attrs ? "0" : "1");
        return;
    case OP_SESS_DELETE:
        arg_eval(r, a, SC_SESS_DELETE, 2);
        arg_str(a, "tm:sessions");
        arg_str(a, "tm:started");
        arg_token(r, a, o);
        arg_str(a, s);
        return;
    case OP_REQ_BEGIN:
        build_request_begin(r, o, a);
        return;
    case OP_EXPIRE:
        arg_eval(r, a, SC_EXPIRE, 2);
        arg_str(a, "tm:sessions");
        arg_str(a, "tm:started");
        arg_fmt(a, "%" PRId64, o->ms);
        arg_fmt(a, "%d", EXPIRE_CHUNK);
        return;
    }
}

/* Errors after which the script did not run and may simply be sent again
 * once the scripts are loaded. */
static int is_noscript(const redisReply *x)
{
    return x->type == REDIS_REPLY_ERROR && strncmp(x->str, "NOSCRIPT", 8) == 0;
}

/* Returns 1 when a retry found its op already committed (by its token). */
static int take_reply(rop *o, redisReply *x)
{
    o->state = ST_DONE;
    if (x->type == REDIS_REPLY_ERROR) {
        TM_ERROR("redis: script failed: %s", x->str);
        o->w.q.status = TIDEMARK_EIO;
        return 0;
    }
    if (o->kind == OP_EXPIRE) {
        if (!is_array(x, 0)) {
            o->w.q.status = TIDEMARK_EIO;
            return 0;
        }
        o->ids = calloc(x->elements + 1, sizeof *o->ids);
        for (size_t i = 0; o->ids && i < x->elements; i++)
            if (x->element[i]->type == REDIS_REPLY_STRING)
                o->ids[o->nids++] = tm_memdup(x->element[i]->str, x->element[i]->len);
        o->w.seq = x->elements;
        return 0;
    }
    if (!is_array(x, 1) || x->element[0]->type != REDIS_REPLY_INTEGER) {
        o->w.q.status = TIDEMARK_EIO;
        return 0;
    }
    o->w.q.status = (int)x->element[0]->integer;
    if (x->elements >= 2)
        o->w.seq = (uint64_t)int_of(x->element[1]);
    if (o->kind == OP_SESS_DELETE && o->retry && o->w.q.status == TIDEMARK_ENOTFOUND)
        o->w.q.status = 0; /* applied before the reply was lost, token already gone */
    o->replayed = x->elements >= 3 && int_of(x->element[2]) == 1;
    return o->replayed;
}

enum { SENT_OK = 0, SENT_LOST, SENT_RELOAD };

/* Flag, per stream, the last append still to send: its script publishes the
 * stream's head for the other nodes. */
static void mark_wakes(rop *batch)
{
    tm_map *last = tm_map_new();
    for (rop *o = batch; o; o = op_next(o)) {
        if (o->kind != OP_APPEND || o->state != ST_TODO)
            continue;
        o->wake = 1;
        char *k = last ? cache_key(o->session, o->name) : NULL;
        rop *prev = k ? tm_map_get(last, k) : NULL;
        if (prev)
            prev->wake = 0;
        if (!k || tm_map_put(last, k, o) != 0) { /* out of memory: every op publishes */
            if (prev)
                prev->wake = 1;
        }
        free(k);
    }
    tm_map_free(last);
}

/* One round trip of a batch: MULTI, [DEL tokens], the ops, [PEXPIRE tokens], EXEC. */
typedef struct round {
    int pre, post; /* the DEL before the ops, the PEXPIRE after them */
    int nqueued;   /* replies before EXEC's: MULTI's, then one per command */
    int reload;    /* a script was missing (NOSCRIPT): load them, send again */
    int aborted;   /* a command was refused: the EXEC ran nothing */
} round;

/* Queue the round on the write connection (written when replies are read).
 * One MULTI/EXEC per batch: Redis applies it as one unit and, under
 * appendfsync always, fsyncs it once (a bare pipeline is read in 16 KiB
 * pieces, with an fsync after each). */
static void queue_round(rstore *r, rop *batch, int first_attempt, round *t)
{
    redisContext *c = r->wc;
    char epoch[TM_EPOCH_LEN + 1];
    current_epoch(r, epoch);
    mark_wakes(batch);
    redisAppendCommand(c, "MULTI");
    /* The previous batch is settled: its tokens can go. Never on a retry,
     * which may still need them. */
    if (first_attempt && r->wkey_dirty) {
        redisAppendCommand(c, "DEL %s", r->wkey);
        t->pre = 1;
        r->wkey_dirty = 0;
    }
    int nsent = 0;
    for (rop *o = batch; o; o = op_next(o)) {
        if (o->state != ST_TODO)
            continue;
        args a = {0};
        build(r, o, epoch, &a);
        if (a.oom || redisAppendCommandArgv(c, a.n, a.v, a.len) != REDIS_OK) {
            o->state = ST_DONE;
            o->w.q.status = TIDEMARK_ENOMEM;
        } else {
            o->state = ST_SENT;
            nsent++;
        }
        args_free(&a);
    }
    if (nsent) {
        redisAppendCommand(c, "PEXPIRE %s %d", r->wkey, WKEY_TTL_MS);
        t->post = 1;
        r->wkey_dirty = 1;
    }
    redisAppendCommand(c, "EXEC");
    t->nqueued = 1 + t->pre + nsent + t->post;
}

/* MULTI's answer, then one QUEUED (or a refusal, which aborts the EXEC) per
 * command. 0, or -1 when the connection was lost. */
static int read_queued(rstore *r, rop *batch, round *t)
{
    rop *o = batch;
    for (int i = 0; i < t->nqueued; i++) {
        void *x = NULL;
        if (redisGetReply(r->wc, &x) != REDIS_OK)
            return -1;
        redisReply *rep = x;
        int is_op = i >= 1 + t->pre && i < t->nqueued - t->post;
        if (is_op)
            while (o->state != ST_SENT)
                o = op_next(o);
        if (rep->type == REDIS_REPLY_ERROR) {
            t->aborted = 1;
            if (is_noscript(rep)) {
                t->reload = 1;
            } else {
                TM_ERROR("redis: command refused: %s", rep->str);
                if (is_op) {
                    o->state = ST_DONE;
                    o->w.q.status = TIDEMARK_EIO;
                }
            }
        }
        if (is_op && o->state == ST_SENT)
            o = op_next(o);
        freeReplyObject(x);
    }
    return 0;
}

/* EXEC's reply: each sent op's result. -1 when the connection was lost. */
static int read_exec(rstore *r, rop *batch, round *t, int *recovered)
{
    void *x = NULL;
    if (redisGetReply(r->wc, &x) != REDIS_OK)
        return -1;
    redisReply *rep = x;
    if (t->aborted || rep->type != REDIS_REPLY_ARRAY || rep->elements != (size_t)(t->nqueued - 1)) {
        /* Nothing ran: send the rest again. */
        if (!t->aborted)
            TM_ERROR("redis: EXEC failed (%s)", rep->type == REDIS_REPLY_ERROR ? rep->str : "no result");
        freeReplyObject(x);
        for (rop *q = batch; q; q = op_next(q))
            if (q->state == ST_SENT)
                q->state = ST_TODO;
        if (t->pre)
            r->wkey_dirty = 1;
        return t->reload ? SENT_RELOAD : t->aborted ? SENT_OK : SENT_LOST;
    }
    size_t k = (size_t)t->pre;
    for (rop *q = batch; q; q = op_next(q)) {
        if (q->state != ST_SENT)
            continue;
        redisReply *e = rep->element[k++];
        if (is_noscript(e)) { /* flushed: not run */
            q->state = ST_TODO;
            t->reload = 1;
        } else {
            *recovered += take_reply(q, e);
        }
    }
    freeReplyObject(x);
    return t->reload ? SENT_RELOAD : SENT_OK;
}

/* The connection broke with ops sent: each is resent as a retry (its token
 * decides), but for an expiry, whose list of deleted ids would be lost. */
static int round_lost(rstore *r, rop *batch)
{
    TM_WARN("redis: connection lost during a commit (%s); retrying", r->wc->errstr);
    for (rop *o = batch; o; o = op_next(o)) {
        if (o->state != ST_SENT)
            continue;
        if (o->kind == OP_EXPIRE) {
            o->state = ST_DONE;
            o->w.q.status = TIDEMARK_EIO;
        } else {
            o->state = ST_TODO;
            o->retry = 1;
        }
    }
    return SENT_LOST;
}

/* Send every op still to do as one MULTI/EXEC and read the replies. */
static int send_batch(rstore *r, rop *batch, int first_attempt, int *recovered)
{
    round t = {0};
    queue_round(r, batch, first_attempt, &t);
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "append_before_commit"); /* nothing sent yet */
    if (read_queued(r, batch, &t) != 0)
        return round_lost(r, batch);
    int rc = read_exec(r, batch, &t, recovered);
    return rc < 0 ? round_lost(r, batch) : rc;
}

static int writer_connect(rstore *r)
{
    redisContext *c = conn_open(r);
    if (!c)
        return TIDEMARK_EIO;
    if (load_scripts(r, c) != 0) {
        redisFree(c);
        return TIDEMARK_EIO;
    }
    r->wc = c;
    atomic_store(&r->w_down, 0);
    if (r->down_since)
        TM_INFO("redis: write connection to %s:%d restored", r->host, r->port);
    r->down_since = 0;
    r->loading_logged = 0;
    return 0;
}

static int64_t ready_wait(const rstore *r)
{
    return r->opt.ready_wait_ms > 0 ? r->opt.ready_wait_ms : READY_WAIT_MS;
}

/* While the server loads its dataset: say so once, then every LOADING_LOG_MS. */
static void log_loading(rstore *r, int64_t since)
{
    int64_t now = tm_now_ms();
    if (r->loading_logged && now - r->loading_logged < LOADING_LOG_MS)
        return;
    r->loading_logged = now;
    TM_WARN("redis: %s:%d is loading its dataset into memory; waiting for it (%lld ms so far, "
            "at most %lld ms)", r->host, r->port, (long long)(now - since), (long long)ready_wait(r));
}

/* At open: connect, waiting up to ready_wait for a server that is still
 * loading its dataset (a node started beside a Redis that restarts).
 * TIDEMARK_EIO when unreachable, TIDEMARK_ETIMEDOUT when still loading. */
static int writer_connect_ready(rstore *r)
{
    int64_t t0 = tm_now_ms();
    for (;;) {
        if (writer_connect(r) == 0) {
            if (r->loading_logged)
                TM_INFO("redis: %s:%d has loaded its dataset (waited %lld ms)", r->host, r->port,
                        (long long)(tm_now_ms() - t0));
            r->loading_logged = 0;
            return 0;
        }
        if (!atomic_load(&r->loading))
            return TIDEMARK_EIO;
        if (tm_now_ms() - t0 >= ready_wait(r)) {
            TM_ERROR("redis: %s:%d is still loading its dataset after %lld ms: giving up (a longer "
                     "wait: ready_wait_ms)", r->host, r->port, (long long)(tm_now_ms() - t0));
            return TIDEMARK_ETIMEDOUT;
        }
        log_loading(r, t0);
        sleep_ms(100);
    }
}

static void writer_lost(rstore *r)
{
    redisFree(r->wc);
    r->wc = NULL;
    atomic_store(&r->w_down, 1);
    if (!r->down_since)
        r->down_since = tm_now_ms();
}

/* One SCAN page of meta keys: trim each stream by age, in one script. */
static void sweep_keys(rstore *r, const redisReply *keys)
{
    size_t n = keys->elements;
    const char **argv = calloc(2 * n + 4, sizeof *argv);
    size_t *lens = calloc(2 * n + 4, sizeof *lens);
    char **streams = calloc(n + 1, sizeof *streams);
    char nk[24], age[24];
    snprintf(nk, sizeof nk, "%zu", 2 * n);
    snprintf(age, sizeof age, "%" PRId64, r->opt.retain_ms);
    int ok = argv && lens && streams && n > 0;
    if (ok) {
        size_t k = 0;
        argv[k++] = "EVALSHA";
        argv[k++] = r->sha[SC_SWEEP];
        argv[k++] = nk;
        for (size_t i = 0; ok && i < n; i++) {
            const char *m = keys->element[i]->str;
            const char *at = strstr(m, "}:m:");
            streams[i] = at ? fmt("%.*s}:s:%s", (int)(at - m), m, at + 4) : NULL;
            ok = streams[i] != NULL;
            argv[k++] = m;
            argv[k++] = streams[i];
        }
        argv[k++] = age;
        for (size_t i = 0; i < k; i++)
            lens[i] = strlen(argv[i]);
        if (ok) {
            redisReply *y = redisCommandArgv(r->wc, (int)k, argv, lens);
            if (y && y->type == REDIS_REPLY_ERROR)
                TM_WARN("redis: age retention: %s", y->str);
            freeReplyObject(y);
        }
    }
    for (size_t i = 0; streams && i < n; i++)
        free(streams[i]);
    free(streams);
    free(argv);
    free(lens);
}

/* A close right behind an append to the same stream in one batch (a call's
 * response, then the end of its POST) rides in that append's script: the
 * append closes the stream, as a final append does. One script less per
 * call. Not under emit_early, whose appends may be refused (EBUSY). */
static void fold_closes(rstore *r, rop *batch)
{
    if (r->opt.emit_early)
        return;
    tm_map *last = tm_map_new(); /* stream -> the last op of the batch on it */
    if (!last)
        return;
    for (rop *o = batch; o; o = op_next(o)) {
        if ((o->kind != OP_APPEND && o->kind != OP_CLOSE && o->kind != OP_OPEN) || !o->name ||
            o->state != ST_TODO)
            continue;
        char *k = cache_key(o->session, o->name);
        if (!k)
            continue;
        rop *p = tm_map_get(last, k);
        if (o->kind == OP_CLOSE && p && p->kind == OP_APPEND && !p->closes &&
            !(p->flags & TM_APPEND_FINAL)) {
            p->closes = 1;
            o->carrier = p;
            o->state = ST_FOLDED;
        }
        if (tm_map_put(last, k, o) != 0)
            tm_map_del(last, k);
        free(k);
    }
    tm_map_free(last);
}

/* The folded closes take their carrier's answer: closed with it, or already
 * closed (ECLOSED: a close is idempotent), or its failure. */
static void settle_folded(rop *batch)
{
    for (rop *o = batch; o; o = op_next(o)) {
        if (o->state != ST_FOLDED)
            continue;
        int st = o->carrier->w.q.status;
        o->state = ST_DONE;
        o->w.q.status = st == TIDEMARK_ECLOSED ? 0 : st;
        o->w.seq = st == 0 ? o->carrier->w.seq : 0;
    }
}

/* commit hook: send the batch until every op has an answer, reconnecting
 * with backoff; past the outage deadline the rest fail with TIDEMARK_EIO.
 * Each op's status is its own: the batch as a whole always settles (0). */
static int r_commit(void *be, tm_wop *wbatch, size_t n)
{
    (void)n;
    rstore *r = be;
    rop *batch = (rop *)wbatch;
    int64_t now = tm_now_ms();
    int64_t deadline = now + OUTAGE_MS;
    if (r->down_since && r->down_since + OUTAGE_MS < deadline) /* known outage: don't wait again */
        deadline = r->down_since + OUTAGE_MS > now ? r->down_since + OUTAGE_MS : now;
    int first = 1, reloads = 0, recovered = 0, backoff = BACKOFF_MIN_MS;
    fold_closes(r, batch);
    for (;;) {
        int todo = 0;
        for (rop *o = batch; o; o = op_next(o))
            todo += o->state == ST_TODO;
        if (!todo) {
            if (recovered)
                TM_INFO("redis: %d op(s) had committed before their reply was lost; "
                        "answered from their tokens, not repeated", recovered);
            settle_folded(batch);
            TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "commit_before_emit");
            return 0;
        }
        if (!r->wc && writer_connect(r) != 0) {
            if (!r->down_since)
                r->down_since = tm_now_ms();
            /* A restarted server still reading its dataset is coming back:
             * wait for it up to ready_wait, not just the outage deadline. */
            if (atomic_load(&r->loading)) {
                log_loading(r, r->down_since);
                if (deadline < r->down_since + ready_wait(r))
                    deadline = r->down_since + ready_wait(r);
            }
            if (tm_now_ms() >= deadline)
                break;
            sleep_ms(backoff);
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
            continue;
        }
        int rc = send_batch(r, batch, first, &recovered);
        first = 0;
        if (rc == SENT_LOST) {
            writer_lost(r);
            if (tm_now_ms() >= deadline) /* a connection that keeps dying counts as down */
                break;
        } else if (rc == SENT_RELOAD && (++reloads > 3 || load_scripts(r, r->wc) != 0)) {
            writer_lost(r);
            break;
        }
    }
    TM_ERROR("redis: %s:%d unreachable for %lld ms: failing queued operations", r->host, r->port,
             (long long)(tm_now_ms() - (r->down_since ? r->down_since : now)));
    for (rop *o = batch; o; o = op_next(o)) {
        if (o->state == ST_TODO) {
            o->state = ST_DONE;
            o->w.q.status = TIDEMARK_EIO;
        }
    }
    settle_folded(batch);
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "commit_before_emit");
    return 0;
}

/* The hint of one append or close that was answered. Caller holds c_mu. */
static void settle_hint(rstore *r, rop *o)
{
    TM_ASSERT_HELD(&r->c_mu);
    char *k = cache_key(o->session, o->name);
    rstream *s = k ? tm_map_get(r->streams, k) : NULL;
    free(k);
    uint64_t seq = o->w.seq;
    int st = o->w.q.status;
    /* (a guard: the session may have been deleted and made again) */
    if (s && o->kind == OP_APPEND && s->pending) {
        s->pending--;
        if ((st == 0 || st == TIDEMARK_EBUSY) && seq > s->known)
            s->known = seq; /* EBUSY: the script said where the head is */
        if (st == 0 && r->tails && s->own && !o->replayed) /* (a replay may carry another epoch) */
            tail_add(r, s, seq, &o->data, o->len, o->epoch);
        else if (st != 0 || o->replayed)
            tail_clear(r, s);
        if (st != 0) /* refused (closed, gone, another head): not this node's alone */
            s->own = 0;
        if (st == 0 && (o->flags & TM_APPEND_FINAL))
            s->durable_closed = 1;
        early *e = s->early_head;
        if (e && e->seq == o->expect) {
            s->early_head = e->next;
            if (!s->early_head)
                s->early_tail = NULL;
            e->next = NULL;
            early_free(e);
        }
    }
    if (s && s->close_pending && (o->kind == OP_CLOSE || (o->flags & TM_APPEND_FINAL)))
        s->close_pending--;
    if (s && o->kind == OP_CLOSE && st == 0) {
        if (seq > s->known) /* close.lua answers the head: more than this node wrote */
            s->heard = seq;
        s->durable_closed = 1;
    }
}

/* A queued open of a reserved number was answered: Redis has the stream,
 * or (the session went meanwhile) never will: forget it here, so reads,
 * bounds and appends ask Redis, which says TIDEMARK_ENOTFOUND. Caller
 * holds c_mu. */
static void settle_open(rstore *r, rop *o)
{
    char *k = cache_key(o->session, o->name);
    rstream *s = k ? tm_map_get(r->streams, k) : NULL;
    if (s && s->open_pending) {
        s->open_pending--;
        if (o->w.q.status != 0) {
            TM_DEBUG("redis: open of %s/%s: %s", o->session, o->name,
                     tidemark_strerror(o->w.q.status));
            if (tm_map_del(r->streams, k) == s)
                rstream_free(r, s);
        }
    }
    free(k);
}

/* settle hook: fold the answers into the local hints; wake this node's
 * readers of every stream that moved (other nodes hear the script's
 * PUBLISH). */
static void r_settle(void *be, tm_wop *batch, int rc)
{
    (void)rc; /* r_commit always settles */
    rstore *r = be;
    pthread_mutex_lock(&r->c_mu);
    for (rop *o = (rop *)batch; o; o = op_next(o))
        if (o->kind == OP_APPEND || o->kind == OP_CLOSE)
            settle_hint(r, o);
        else if (o->kind == OP_OPEN && o->fresh)
            settle_open(r, o);
    pthread_mutex_unlock(&r->c_mu);
    for (rop *o = (rop *)batch; o; o = op_next(o))
        if ((o->kind == OP_APPEND || o->kind == OP_CLOSE) && o->w.q.status == 0)
            tm_writer_wake(r->writer, o->session, o->name, o->w.seq);
        else if (o->kind == OP_OPEN && o->fresh && o->w.q.status != 0)
            tm_writer_wake(r->writer, o->session, o->name, 0); /* its readers now hear ENOTFOUND */
}

static void r_release(tm_wop *o) { op_free((rop *)o); }

/* maintain hook: age retention for streams nobody appends to, by every
 * stream's meta key. */
static void r_sweep(void *be)
{
    rstore *r = be;
    if (!r->wc && writer_connect(r) != 0)
        return;
    char cursor[32] = "0";
    do {
        redisReply *x = redisCommand(r->wc, "SCAN %s MATCH tm:{*}:m:* COUNT 500", cursor);
        if (!is_array(x, 2) || !is_array(x->element[1], 0)) {
            freeReplyObject(x);
            if (r->wc->err)
                writer_lost(r);
            return;
        }
        snprintf(cursor, sizeof cursor, "%s", x->element[0]->str);
        sweep_keys(r, x->element[1]);
        freeReplyObject(x);
        if (r->wc->err) {
            writer_lost(r);
            return;
        }
    } while (strcmp(cursor, "0") != 0);
}

static const tm_writer_hooks redis_writer_hooks = {
    .commit = r_commit,
    .settle = r_settle,
    .release = r_release,
    .maintain = r_sweep,
};

/* ---- the subscriber ------------------------------------------------------------ */

/* "<writer> <seq> <closed> <stream> <session>" from another node: wake our
 * readers. */
static void on_message(rstore *r, const char *msg, size_t len)
{
    char *m = tm_memdup(msg, len), *f[5] = {m};
    if (!m)
        return;
    int n = 1;
    for (char *p = m; n < 5 && (p = strchr(p, ' ')) != NULL; n++) {
        *p++ = '\0';
        f[n] = p;
    }
    if (n == 5 && strcmp(f[0], r->wid) != 0) { /* ours: the writer tells after the callbacks */
        uint64_t seq = strtoull(f[1], NULL, 10);
        const char *name = f[3], *session = f[4];
        char *k = cache_key(session, name);
        pthread_mutex_lock(&r->c_mu);
        rstream *s = k ? tm_map_get(r->streams, k) : NULL;
        note_head(s, seq, f[2][0] == '1');
        if (s && seq > s->heard)
            s->heard = seq; /* another node wrote it: ask Redis from now on */
        if (s && f[2][0] == '1')
            s->heard_closed = 1;
        pthread_mutex_unlock(&r->c_mu);
        free(k);
        tm_store_notify_commit(&r->base, session, name, seq);
    }
    free(m);
}

/* "<writer> <channel> <bytes>" from another node: the bus listener. */
static void on_bus(rstore *r, const char *msg, size_t len)
{
    const char *sp1 = memchr(msg, ' ', len);
    if (!sp1)
        return;
    const char *rest = sp1 + 1;
    const char *sp2 = memchr(rest, ' ', len - (size_t)(rest - msg));
    if (!sp2)
        return;
    size_t wl = (size_t)(sp1 - msg);
    if (wl == strlen(r->wid) && memcmp(msg, r->wid, wl) == 0)
        return; /* ours: store.c told this node already */
    char *channel = tm_memdup(rest, (size_t)(sp2 - rest));
    if (channel)
        tm_store_notify_bus(&r->base, channel, sp2 + 1, len - (size_t)(sp2 + 1 - msg));
    free(channel);
}

/* Streams to wake (wake_all). */
typedef struct wake_item {
    char *session, *name;
    uint64_t seq;
} wake_item;

typedef struct wake_set {
    wake_item *v;
    size_t n;
} wake_set;

static void collect_wake(const char *k, void *val, void *ud)
{
    (void)k;
    rstream *s = val;
    wake_set *w = ud;
    s->own = 0; /* another node may have written it unheard: Redis answers for it now */
    w->v[w->n++] = (wake_item){strdup(s->session), strdup(s->name), s->known};
}

/* After a gap in the subscription, wake every stream this node knows: a
 * wake-up may have been missed. */
static void wake_all(rstore *r)
{
    wake_set w = {NULL, 0};
    pthread_mutex_lock(&r->c_mu);
    w.v = calloc(tm_map_count(r->streams) + 1, sizeof *w.v);
    if (w.v)
        tm_map_each(r->streams, collect_wake, &w);
    pthread_mutex_unlock(&r->c_mu);
    for (size_t i = 0; i < w.n; i++) {
        if (w.v[i].session && w.v[i].name)
            tm_store_notify_commit(&r->base, w.v[i].session, w.v[i].name, w.v[i].seq);
        free(w.v[i].session);
        free(w.v[i].name);
    }
    free(w.v);
}

/* Wait ms or until told to stop. Returns nonzero when stopping. */
static int sub_pause(rstore *r, int ms)
{
    struct pollfd p = {r->wake[0], POLLIN, 0};
    return poll(&p, 1, ms) > 0;
}

/* Serve one subscribed connection until it fails. Returns nonzero to stop. */
static int sub_serve(rstore *r, redisContext *c)
{
    int64_t heard = tm_now_ms();
    int pinged = 0;
    for (;;) {
        void *x = NULL;
        while (redisGetReplyFromReader(c, &x) == REDIS_OK && x) {
            redisReply *rep = x;
            heard = tm_now_ms();
            pinged = 0;
            if (is_array(rep, 3) && rep->element[0]->type == REDIS_REPLY_STRING &&
                strcmp(rep->element[0]->str, "message") == 0 &&
                rep->element[1]->type == REDIS_REPLY_STRING &&
                rep->element[2]->type == REDIS_REPLY_STRING) {
                if (strcmp(rep->element[1]->str, r->bus) == 0)
                    on_bus(r, rep->element[2]->str, rep->element[2]->len);
                else
                    on_message(r, rep->element[2]->str, rep->element[2]->len);
            }
            freeReplyObject(rep);
            x = NULL;
        }
        if (c->err)
            return 0;
        struct pollfd p[2] = {{c->fd, POLLIN, 0}, {r->wake[0], POLLIN, 0}};
        int n = poll(p, 2, 1000);
        if (n < 0 && errno != EINTR)
            return 0;
        if (p[1].revents)
            return 1;
        if (p[0].revents) {
            if (redisBufferRead(c) != REDIS_OK)
                return 0;
            continue;
        }
        int64_t quiet = tm_now_ms() - heard;
        if (quiet >= SUB_DEAD_MS)
            return 0; /* the server is gone without a word: reconnect */
        if (quiet >= SUB_PING_MS && !pinged) {
            int done = 0;
            redisAppendCommand(c, "PING");
            while (!done)
                if (redisBufferWrite(c, &done) != REDIS_OK)
                    return 0;
            pinged = 1;
        }
    }
}

static void *sub_main(void *arg)
{
    rstore *r = arg;
    int backoff = BACKOFF_MIN_MS, gap = 0;
    for (;;) {
        redisContext *c = conn_open(r);
        redisReply *x = c ? redisCommand(c, "SUBSCRIBE %s %s", r->channel, r->bus) : NULL;
        if (!is_array(x, 3)) {
            freeReplyObject(x);
            redisFree(c);
            gap = 1;
            if (sub_pause(r, backoff))
                return NULL;
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
            continue;
        }
        freeReplyObject(x);
        backoff = BACKOFF_MIN_MS;
        atomic_store(&r->sub_ready, 1);
        if (gap)
            wake_all(r);
        int stop = sub_serve(r, c);
        redisFree(c);
        if (stop)
            return NULL;
        gap = 1;
    }
}

/* ---- operations ----------------------------------------------------------------- */

static int r_session_create(tm_store *st, const tm_session_rec *rec)
{
    rstore *r = (rstore *)st;
    rop *o = op_new(OP_SESS_CREATE);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->session = tm_strdup(rec->id);
    o->srec.protocol_version = tm_strdup(rec->protocol_version);
    o->srec.client = tm_strdup(rec->client);
    o->srec.created_ms = rec->created_ms;
    o->srec.last_seen_ms = rec->last_seen_ms;
    if (!o->session) {
        op_free(o);
        return TIDEMARK_ENOMEM;
    }
    return run_sync(r, o);
}

/* The "a:<name>" fields of a session hash as one JSON object text. */
static char *attrs_of(const redisReply *kv)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i + 1 < kv->elements; i += 2) {
        const redisReply *k = kv->element[i], *v = kv->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || k->len < 3 || strncmp(k->str, "a:", 2) != 0 ||
            v->type != REDIS_REPLY_STRING)
            continue;
        json_t *val = json_loadb(v->str, v->len, JSON_DECODE_ANY, NULL);
        char *name = tm_memdup(k->str + 2, k->len - 2);
        if (val && name)
            json_object_set_new(o, name, val);
        else
            json_decref(val);
        free(name);
    }
    char *out = o && json_object_size(o) ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    return out;
}

/* A session record from its HGETALL (x is freed). */
static int session_of_hash(redisReply *x, tm_session_rec *out)
{
    out->id = kv_dup(x, "id");
    out->protocol_version = kv_dup(x, "version");
    out->client = kv_dup(x, "client");
    out->created_ms = int_of(kv_get(x, "created_ms"));
    out->last_seen_ms = int_of(kv_get(x, "last_seen_ms"));
    out->attrs = attrs_of(x);
    freeReplyObject(x);
    if (!out->id) {
        tm_session_rec_clear(out);
        return TIDEMARK_ENOMEM;
    }
    return 0;
}

static int r_session_get(tm_store *st, const char *id, tm_session_rec *out)
{
    rstore *r = (rstore *)st;
    memset(out, 0, sizeof *out);
    redisReply *x;
    int rc = hgetall(r, &x, "tm:{%s}:sess", id);
    return rc ? rc : session_of_hash(x, out);
}

static void rec_from_hash(const redisReply *x, const char *session, const char *key,
                          tm_request_rec *o);

/* The session's hash and the record's, one pipeline: one round trip. */
static int r_session_request_get(tm_store *st, const char *id, const char *key, tm_session_rec *sess,
                                 tm_request_rec *req, int *req_rc)
{
    rstore *r = (rstore *)st;
    memset(sess, 0, sizeof *sess);
    args a[2] = {{0}, {0}};
    arg_str(&a[0], "HGETALL");
    arg_fmt(&a[0], "tm:{%s}:sess", id);
    arg_str(&a[1], "HGETALL");
    arg_fmt(&a[1], "tm:{%s}:q:%s", id, key);
    redisReply *x[2] = {NULL, NULL};
    int rc = a[0].oom || a[1].oom ? TIDEMARK_ENOMEM : pool_run(r, a, 2, x);
    args_free(&a[0]);
    args_free(&a[1]);
    if (rc)
        return rc;
    *req_rc = hash_reply(&x[1]);
    if (*req_rc == 0) {
        rec_from_hash(x[1], id, key, req);
        freeReplyObject(x[1]);
    }
    rc = hash_reply(&x[0]);
    return rc ? rc : session_of_hash(x[0], sess);
}

static int r_session_set_attr(tm_store *st, const char *id, const char *name, const char *value)
{
    rstore *r = (rstore *)st;
    json_t *check = value ? json_loads(value, JSON_DECODE_ANY, NULL) : NULL;
    if (value && !check)
        return TIDEMARK_EINVAL;
    json_decref(check);
    rop *o = op_new(OP_SESS_ATTRS);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->session = tm_strdup(id);
    o->srec.client = tm_strdup(name);
    o->srec.attrs = tm_strdup(value);
    if (!o->session || !o->srec.client || (value && !o->srec.attrs)) {
        op_free(o);
        return TIDEMARK_ENOMEM;
    }
    return run_sync(r, o);
}

/* Every session of the shared store (tm:sessions), by ZSCAN: a session that
 * exists for the whole visit is visited (SCAN's guarantee, whatever is added
 * or removed meanwhile), and exactly once (SCAN may repeat ids: a set drops
 * the repeats). Each record is read as fn needs it. */
static int r_sessions_each(tm_store *st, int (*fn)(void *, const tm_session_rec *), void *ud)
{
    rstore *r = (rstore *)st;
    tm_map *seen = tm_map_new();
    if (!seen)
        return TIDEMARK_ENOMEM;
    char cursor[32] = "0";
    int rc = 0, stop = 0;
    do {
        redisReply *x;
        rc = pool_page(r, &x, "ZSCAN", "tm:sessions", cursor, NULL);
        if (rc)
            break;
        if (!is_array(x, 2) || x->element[0]->type != REDIS_REPLY_STRING ||
            x->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(x);
            rc = TIDEMARK_EIO;
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", x->element[0]->str);
        const redisReply *items = x->element[1];
        for (size_t i = 0; i + 1 < items->elements && !stop; i += 2) { /* member, score */
            const redisReply *id = items->element[i];
            if (id->type != REDIS_REPLY_STRING || tm_map_get(seen, id->str) ||
                tm_map_put(seen, id->str, (void *)1) != 0)
                continue;
            tm_session_rec rec;
            if (r_session_get(st, id->str, &rec) != 0)
                continue; /* deleted meanwhile */
            stop = fn(ud, &rec);
            tm_session_rec_clear(&rec);
        }
        freeReplyObject(x);
    } while (!stop && strcmp(cursor, "0") != 0);
    tm_map_free(seen);
    return rc;
}

static int r_session_touch(tm_store *st, const char *id, int64_t now_ms)
{
    rstore *r = (rstore *)st;
    /* Last-seen only feeds idle expiry. This node's first touch of a session
     * waits (it reports an unknown session); later ones write at most once
     * per touch_every_ms and do not wait. */
    int first = 0;
    if (!tm_writer_touch_due(r->writer, id, now_ms, &first))
        return 0;
    rop *o = op_new(OP_SESS_TOUCH);
    if (!o || !(o->session = strdup(id))) {
        free(o);
        return TIDEMARK_ENOMEM;
    }
    o->ms = now_ms;
    if (!first) {
        enqueue(r, o);
        return 0;
    }
    int rc = run_sync(r, o);
    if (rc)
        tm_writer_touch_forget(r->writer, id);
    return rc;
}

static int r_session_delete(tm_store *st, const char *id)
{
    rstore *r = (rstore *)st;
    rop *o = op_new(OP_SESS_DELETE);
    if (!o || !(o->session = strdup(id))) {
        free(o);
        return TIDEMARK_ENOMEM;
    }
    int rc = run_sync(r, o);
    if (rc == 0)
        forget_session(r, id);
    return rc;
}

static void free_val(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    free(v);
}

/* Forget every reservation (they are only a shortcut). Caller holds c_mu. */
static void resv_clear(rstore *r)
{
    TM_ASSERT_HELD(&r->c_mu);
    tm_map *m = tm_map_new();
    if (!m)
        return;
    tm_map_each(r->resv, free_val, NULL);
    tm_map_free(r->resv);
    r->resv = m;
}

/* A new, empty stream entry for a POST stream this node just created (or
 * is creating: open_pending). Caller holds c_mu. NULL when out of memory. */
static rstream *new_entry(rstore *r, const char *session, const char *name, int pending)
{
    TM_ASSERT_HELD(&r->c_mu);
    char *key = cache_key(session, name);
    if (!key)
        return NULL;
    rstream *s = tm_map_get(r->streams, key);
    if (!s) {
        if (tm_map_count(r->streams) >= CACHE_MAX)
            drop_streams(r, NULL);
        s = calloc(1, sizeof *s);
        if (s && (!(s->session = strdup(session)) || !(s->name = strdup(name)) ||
                  tm_map_put(r->streams, key, s) != 0)) {
            rstream_free(r, s);
            s = NULL;
        }
    }
    if (s) {
        s->known = 0;
        s->closing = 0;
        s->open_pending += pending;
        s->own = 1;
        s->gen = atomic_load(&r->ident_gen);
    }
    free(key);
    return s;
}

/* The next POST stream from this node's reserved numbers, queued (not
 * waited for): 1 with its name in out, 0 when none is left. */
static int open_reserved(rstore *r, const char *session, char out[TM_STREAM_MAX], int *rc)
{
    pthread_mutex_lock(&r->c_mu);
    resv *v = tm_map_get(r->resv, session);
    if (!v || v->next >= v->end || v->gen != atomic_load(&r->ident_gen)) {
        pthread_mutex_unlock(&r->c_mu);
        return 0;
    }
    uint64_t n = v->next++;
    char nm[TM_STREAM_MAX];
    snprintf(nm, sizeof nm, "r%" PRIu64, n);
    rop *o = op_new(OP_OPEN);
    rstream *s = NULL;
    if (!o || !(o->session = strdup(session)) || !(o->name = strdup(nm)) ||
        !(s = new_entry(r, session, nm, 1))) {
        pthread_mutex_unlock(&r->c_mu);
        if (o)
            op_free(o);
        *rc = TIDEMARK_ENOMEM;
        return 1;
    }
    o->fresh = 1;
    enqueue(r, o); /* under c_mu: before any append to it */
    pthread_mutex_unlock(&r->c_mu);
    snprintf(out, TM_STREAM_MAX, "%s", nm);
    *rc = 0;
    return 1;
}

/* A POST stream (name NULL) is opened from this node's reserved numbers
 * without a round trip: the open is queued ahead of the stream's first
 * record and event, so it commits with them or before them; until it is
 * answered, bounds() and read() answer for the new stream here (empty,
 * open). The first open of a session on this node waits and reserves the
 * next OPEN_BLOCK - 1 numbers. */
static int r_stream_open(tm_store *st, const char *session, const char *name,
                         char out[TM_STREAM_MAX])
{
    rstore *r = (rstore *)st;
    int rc = 0;
    if (!name && open_reserved(r, session, out, &rc))
        return rc;
    rop *o = op_new(OP_OPEN);
    if (!o || !(o->session = strdup(session)) || (name && !(o->name = strdup(name)))) {
        if (o)
            op_free(o);
        return TIDEMARK_ENOMEM;
    }
    o->reserve = name ? 0 : OPEN_BLOCK;
    unsigned gen = atomic_load(&r->ident_gen);
    rc = wait_op(r, o);
    char nm[TM_STREAM_MAX];
    uint64_t n = o->w.seq;
    if (name)
        snprintf(nm, sizeof nm, "%s", name);
    else
        snprintf(nm, sizeof nm, "r%" PRIu64, n);
    op_free(o);
    if (rc)
        return rc;
    /* Redis now has it open; a reopened stream takes appends again. */
    char *k = cache_key(session, nm);
    pthread_mutex_lock(&r->c_mu);
    rstream *s = k ? tm_map_get(r->streams, k) : NULL;
    if (s && !s->close_pending)
        s->closing = 0;
    if (!name) {
        new_entry(r, session, nm, 0); /* new and empty: the first append needs no read */
        resv *v = tm_map_get(r->resv, session);
        if (!v && tm_map_count(r->resv) >= CACHE_MAX)
            resv_clear(r);
        if (!v && (v = calloc(1, sizeof *v)) != NULL && tm_map_put(r->resv, session, v) != 0) {
            free(v);
            v = NULL;
        }
        if (v)
            *v = (resv){n + 1, n + OPEN_BLOCK, gen};
    }
    pthread_mutex_unlock(&r->c_mu);
    free(k);
    snprintf(out, TM_STREAM_MAX, "%s", nm);
    return 0;
}

/* Caller holds c_mu. Whether s takes appends: a close queued here refuses
 * them; a close only seen in Redis is checked again (another node may have
 * reopened the stream). */
static int stream_accepts(rstore *r, rstream **sp, const char *session, const char *name)
{
    TM_ASSERT_HELD(&r->c_mu);
    rstream *s = *sp;
    if (!s->closing)
        return 0;
    if (s->close_pending)
        return TIDEMARK_ECLOSED;
    pthread_mutex_unlock(&r->c_mu);
    uint64_t head = 0;
    int closed = 1;
    int rc = stream_state(r, session, name, &head, &closed);
    pthread_mutex_lock(&r->c_mu);
    int rc2 = 0;
    s = stream_ref(r, session, name, &rc2); /* may have been dropped meanwhile */
    *sp = s;
    if (rc || rc2)
        return rc ? rc : rc2;
    note_head(s, head, 0);
    if (closed || s->close_pending)
        return TIDEMARK_ECLOSED;
    s->closing = 0;
    return 0;
}

static int r_append_ex(tm_store *st, const tm_append_req *q)
{
    rstore *r = (rstore *)st;
    rop *o = op_new(OP_APPEND);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->session = tm_strdup(q->session);
    o->name = tm_strdup(q->stream);
    o->data = tm_memdup(q->data, q->len);
    o->len = q->len;
    o->flags = q->flags;
    o->request_key = tm_strdup(q->request_key);
    o->effect = q->effect;
    o->effect_ud = q->effect_ud;
    o->fallback = q->fallback ? tm_memdup(q->fallback, q->fallback_len) : tm_memdup("", 0);
    o->fallback_len = q->fallback ? q->fallback_len : 0;
    o->w.cb = q->cb;
    o->w.cb_ud = q->cb_ud;
    o->w.append = 1;
    early *e = r->opt.emit_early ? calloc(1, sizeof *e) : NULL;
    if (!o->session || !o->name || !o->data || !o->fallback ||
        (q->request_key && !o->request_key) || (r->opt.emit_early && !e)) {
        op_free(o);
        free(e);
        return TIDEMARK_ENOMEM;
    }
    int rc = 0;
    pthread_mutex_lock(&r->c_mu);
    rstream *s = stream_ref(r, q->session, q->stream, &rc);
    if (s)
        rc = stream_accepts(r, &s, q->session, q->stream);
    if (rc) {
        pthread_mutex_unlock(&r->c_mu);
        op_free(o);
        free(e);
        return rc;
    }
    s->pending++;
    o->w.seq = s->known + s->pending; /* this node's prediction; Redis decides */
    if (q->flags & TM_APPEND_FINAL) {
        s->closing = 1;
        s->close_pending++;
    }
    if (e) {
        /* Readers may see it before it is durable, under the predicted seq,
         * which the script then insists on. */
        o->expect = o->w.seq;
        e->seq = o->w.seq;
        e->len = q->len;
        e->data = q->effect ? NULL : tm_memdup(q->data, q->len); /* an effect may swap the bytes */
        if (s->early_tail)
            s->early_tail->next = e;
        else
            s->early_head = e;
        s->early_tail = e;
    }
    uint64_t seq = o->w.seq;
    enqueue(r, o); /* under c_mu: queue order is prediction order per stream */
    pthread_mutex_unlock(&r->c_mu);
    if (r->opt.emit_early)
        tm_store_notify_commit(&r->base, q->session, q->stream, seq);
    return 0;
}

static int r_close_stream(tm_store *st, const char *session, const char *stream)
{
    rstore *r = (rstore *)st;
    rop *o = op_new(OP_CLOSE);
    if (!o || !(o->session = strdup(session)) || !(o->name = strdup(stream))) {
        if (o)
            op_free(o);
        return TIDEMARK_ENOMEM;
    }
    int rc = 0;
    pthread_mutex_lock(&r->c_mu);
    rstream *s = stream_ref(r, session, stream, &rc);
    if (s) {
        s->closing = 1;
        s->close_pending++;
    }
    pthread_mutex_unlock(&r->c_mu);
    if (!s) {
        op_free(o);
        return rc;
    }
    /* Queued, as on SQLite: appends here are refused at once (closing),
     * bounds() says closed once it is durable (tm_store_sync to wait), and
     * readers are woken then. Waiting here cost the thread that ends a call
     * a round trip (an I/O thread, for a call run where its POST arrived). */
    enqueue(r, o);
    return 0;
}

/* Bounds from an HMGET of head, first, closed, te. */
static int parse_bounds(const redisReply *x, tm_stream_bounds *b)
{
    if (!is_array(x, 3))
        return TIDEMARK_EIO;
    if (is_nil(x->element[0]))
        return TIDEMARK_ENOTFOUND;
    memset(b, 0, sizeof *b);
    b->head = (uint64_t)int_of(x->element[0]);
    b->first_retained = (uint64_t)int_of(x->element[1]);
    b->closed = int_of(x->element[2]) == 1;
    b->assigned = b->head;
    if (x->elements > 3 && x->element[3]->type == REDIS_REPLY_STRING)
        snprintf(b->trimmed_epoch, sizeof b->trimmed_epoch, "%s", x->element[3]->str);
    return 0;
}

static void arg_hmget_meta(args *a, const char *session, const char *stream)
{
    arg_str(a, "HMGET");
    arg_fmt(a, "tm:{%s}:m:%s", session, stream);
    arg_str(a, "head");
    arg_str(a, "first");
    arg_str(a, "closed");
    arg_str(a, "te");
}

/* One snapshot: the stream's bounds and up to count entries from seq from,
 * in a MULTI so a trim cannot fall between them. OUT b, OUT entries (the
 * EXEC reply, caller frees; its element[1] is the XRANGE). */
static int snapshot(rstore *r, const char *session, const char *stream, uint64_t from,
                    uint64_t to, size_t count, tm_stream_bounds *b, redisReply **entries)
{
    args c[4] = {{0}};
    arg_str(&c[0], "MULTI");
    arg_hmget_meta(&c[1], session, stream);
    arg_str(&c[2], "XRANGE");
    arg_fmt(&c[2], "tm:{%s}:s:%s", session, stream);
    arg_fmt(&c[2], "%" PRIu64 "-0", from);
    arg_fmt(&c[2], "%" PRIu64 "-0", to);
    arg_str(&c[2], "COUNT");
    arg_fmt(&c[2], "%zu", count);
    arg_str(&c[3], "EXEC");
    redisReply *rep[4] = {0};
    int oom = c[1].oom || c[2].oom;
    int rc = oom ? TIDEMARK_ENOMEM : pool_run(r, c, 4, rep);
    for (int i = 0; i < 4; i++)
        args_free(&c[i]);
    if (rc)
        return rc;
    for (int i = 0; i < 3; i++)
        freeReplyObject(rep[i]);
    redisReply *x = rep[3];
    rc = is_array(x, 2) && is_array(x->element[1], 0) ? parse_bounds(x->element[0], b) : TIDEMARK_EIO;
    if (rc) {
        freeReplyObject(x);
        return rc;
    }
    *entries = x;
    return 0;
}

static uint64_t entry_seq(const redisReply *e)
{
    return is_array(e, 2) && e->element[0]->type == REDIS_REPLY_STRING
               ? strtoull(e->element[0]->str, NULL, 10)
               : 0;
}

/* emit_early: a copy of the events queued here and not yet answered. Taken
 * before Redis is asked, so an event that becomes durable meanwhile is in
 * one of the two. */
static early *early_copy(rstore *r, const char *session, const char *stream)
{
    early *head = NULL, **tail = &head;
    char *k = cache_key(session, stream);
    pthread_mutex_lock(&r->c_mu);
    rstream *s = k ? tm_map_get(r->streams, k) : NULL;
    for (early *e = s ? s->early_head : NULL; e; e = e->next) {
        early *c = calloc(1, sizeof *c);
        if (!c || (e->data && !(c->data = tm_memdup(e->data, e->len)))) {
            free(c);
            break;
        }
        c->seq = e->seq;
        c->len = e->len;
        *tail = c;
        tail = &c->next;
    }
    pthread_mutex_unlock(&r->c_mu);
    free(k);
    return head;
}

/* Visit the copied events that continue at *next. */
static void serve_early(rstore *r, const early *list, uint64_t *next, size_t *left,
                        tm_event_visitor fn, void *ud)
{
    char epoch[TM_EPOCH_LEN + 1];
    current_epoch(r, epoch);
    for (const early *e = list; e && *left > 0; e = e->next) {
        if (e->seq < *next)
            continue;
        if (e->seq != *next || !e->data)
            return;
        tm_event ev = {.seq = e->seq, .epoch = epoch, .data = e->data, .len = e->len};
        (*next)++;
        (*left)--;
        if (fn(ud, &ev))
            return;
    }
}

/* A stream whose open is still queued here: empty and open, as far as
 * anyone may know (nothing of it can be durable before its open). Its
 * "assigned" counts this node's queued appends. */
static int opening(rstore *r, const char *session, const char *stream, tm_stream_bounds *b)
{
    char *k = cache_key(session, stream);
    int yes = 0;
    pthread_mutex_lock(&r->c_mu);
    rstream *s = k ? tm_map_get(r->streams, k) : NULL;
    if (s && (s->open_pending || (b && tail_usable(r, s)))) {
        /* Or a stream this node alone wrote (no retention): the head is what
         * it committed, closed once its close did. */
        yes = 1;
        if (b) {
            memset(b, 0, sizeof *b);
            b->first_retained = 1;
            b->head = s->open_pending ? 0 : s->known;
            b->closed = !s->open_pending && s->durable_closed;
            b->assigned = s->known + s->pending;
        }
    }
    pthread_mutex_unlock(&r->c_mu);
    free(k);
    return yes;
}

/* An event copied out of a tail (read() calls its visitor with no lock held). */
typedef struct tcopy {
    char *data;
    size_t len;
    char epoch[TM_EPOCH_LEN + 1];
} tcopy;

/* The events from next on (at most max) that this node's tail of the
 * stream holds, copied. OUT *complete: they are all the stream holds from
 * next on (Redis need not be asked). */
static size_t tail_copy(rstore *r, const char *session, const char *stream, uint64_t next,
                        size_t max, tcopy *out, int *complete)
{
    size_t n = 0;
    *complete = 0;
    char *k = cache_key(session, stream);
    pthread_mutex_lock(&r->c_mu);
    rstream *s = k ? tm_map_get(r->streams, k) : NULL;
    if (s && tail_usable(r, s)) {
        uint64_t seq = next;
        while (n < max && seq <= s->known && seq >= s->tail_lo && seq < s->tail_lo + s->tail_n) {
            const struct tev *e = &s->tail[seq % TAIL_MAX];
            if (!(out[n].data = tm_memdup(e->data, e->len)))
                break;
            out[n].len = e->len;
            memcpy(out[n].epoch, e->epoch, sizeof out[n].epoch);
            n++;
            seq++;
        }
        *complete = seq > s->known;
    }
    pthread_mutex_unlock(&r->c_mu);
    free(k);
    return n;
}

static int r_read(tm_store *st, const char *session, const char *stream, uint64_t after,
                  size_t max_events, tm_event_visitor fn, void *ud)
{
    rstore *r = (rstore *)st;
    uint64_t next = after + 1;
    size_t left = max_events;
    int rc = 0;
    if (after >= (uint64_t)INT64_MAX) { /* past any head: only say whether it exists */
        tm_stream_bounds b;
        redisReply *x = NULL;
        rc = snapshot(r, session, stream, 1, 0, 1, &b, &x);
        freeReplyObject(x);
        return rc;
    }
    early *pending = r->opt.emit_early ? early_copy(r, session, stream) : NULL;
    if (opening(r, session, stream, NULL)) { /* nothing durable yet */
        serve_early(r, pending, &next, &left, fn, ud);
        early_free(pending);
        return 0;
    }
    if (r->tails && left > 0) { /* what this node committed, without a round trip */
        tcopy cp[TAIL_MAX];
        int complete = 0, stop = 0;
        size_t want = left < TAIL_MAX ? left : TAIL_MAX;
        size_t n = tail_copy(r, session, stream, next, want, cp, &complete);
        for (size_t i = 0; i < n; i++) {
            if (!stop) {
                tm_event ev = {.seq = next, .epoch = cp[i].epoch, .data = cp[i].data, .len = cp[i].len};
                stop = fn(ud, &ev);
                next++;
                left--;
            }
            free(cp[i].data);
        }
        if (stop || left == 0 || complete) {
            early_free(pending);
            return 0;
        }
    }
    for (;;) {
        size_t count = left < READ_CHUNK ? left : READ_CHUNK;
        tm_stream_bounds b;
        redisReply *x = NULL;
        rc = snapshot(r, session, stream, next, UINT64_MAX >> 1, count ? count : 1, &b, &x);
        if (rc)
            break;
        if (next <= b.head && next < b.first_retained) {
            freeReplyObject(x); /* trimmed under the reader: never skip silently */
            rc = TIDEMARK_ERANGE;
            break;
        }
        redisReply *es = x->element[1];
        int stop = 0;
        for (size_t i = 0; i < es->elements && left > 0 && !stop; i++) {
            redisReply *e = es->element[i];
            if (entry_seq(e) != next) { /* only possible if the data is damaged */
                rc = TIDEMARK_ERANGE;
                break;
            }
            const redisReply *d = kv_get(e->element[1], "d");
            const redisReply *ep = kv_get(e->element[1], "e");
            tm_event ev = {.seq = next,
                           .epoch = ep && ep->type == REDIS_REPLY_STRING ? ep->str : "",
                           .data = d && d->type == REDIS_REPLY_STRING ? d->str : "",
                           .len = d && d->type == REDIS_REPLY_STRING ? d->len : 0};
            stop = fn(ud, &ev);
            next++;
            left--;
        }
        size_t got = es->elements;
        freeReplyObject(x);
        if (rc || stop || left == 0)
            break;
        if (got < count || next > b.head) {
            serve_early(r, pending, &next, &left, fn, ud);
            break;
        }
    }
    early_free(pending);
    return rc;
}

static int r_bounds(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out)
{
    rstore *r = (rstore *)st;
    if (opening(r, session, stream, out))
        return 0;
    args a = {0};
    arg_hmget_meta(&a, session, stream);
    redisReply *x = NULL;
    int rc = pool_one(r, &a, &x);
    if (rc)
        return rc;
    tm_stream_bounds b;
    rc = parse_bounds(x, &b);
    freeReplyObject(x);
    if (rc)
        return rc;
    /* "assigned" covers what this node queued and Redis has not answered. */
    char *k = cache_key(session, stream);
    pthread_mutex_lock(&r->c_mu);
    rstream *s = k ? tm_map_get(r->streams, k) : NULL;
    note_head(s, b.head, b.closed);
    if (s && s->known + s->pending > b.assigned)
        b.assigned = s->known + s->pending;
    pthread_mutex_unlock(&r->c_mu);
    free(k);
    *out = b;
    return 0;
}

static int r_event_epoch(tm_store *st, const char *session, const char *stream, uint64_t seq,
                         char out[TM_EPOCH_LEN + 1])
{
    rstore *r = (rstore *)st;
    if (seq >= (uint64_t)INT64_MAX)
        return TIDEMARK_ENOTFOUND;
    tm_stream_bounds b;
    redisReply *x = NULL;
    int rc = snapshot(r, session, stream, seq, seq, 1, &b, &x);
    if (rc)
        return rc;
    rc = TIDEMARK_ENOTFOUND;
    redisReply *es = x->element[1];
    if (seq + 1 == b.first_retained && b.trimmed_epoch[0]) {
        memcpy(out, b.trimmed_epoch, TM_EPOCH_LEN + 1);
        rc = 0;
    } else if (seq >= b.first_retained && seq <= b.head && es->elements == 1 &&
               entry_seq(es->element[0]) == seq) {
        const redisReply *ep = kv_get(es->element[0]->element[1], "e");
        if (ep && ep->type == REDIS_REPLY_STRING && ep->len == TM_EPOCH_LEN) {
            memcpy(out, ep->str, TM_EPOCH_LEN + 1);
            rc = 0;
        }
    }
    freeReplyObject(x);
    return rc;
}

/* A record from its HGETALL. */
static void rec_from_hash(const redisReply *x, const char *session, const char *key,
                          tm_request_rec *o)
{
    o->session = tm_strdup(session);
    o->key = tm_strdup(key);
    o->state = (int)int_of(kv_get(x, "state"));
    o->tool = kv_dup(x, "tool");
    o->stream = kv_dup(x, "stream");
    o->message = kv_dup(x, "message");
    const redisReply *resp = kv_get(x, "response");
    if (resp && resp->type == REDIS_REPLY_STRING) {
        o->response = tm_memdup(resp->str, resp->len);
        o->response_len = resp->len;
    }
    o->updated_ms = int_of(kv_get(x, "updated_ms"));
}

static int r_request_get(tm_store *st, const char *session, const char *key, tm_request_rec *out)
{
    rstore *r = (rstore *)st;
    memset(out, 0, sizeof *out);
    redisReply *x;
    int rc = hgetall(r, &x, "tm:{%s}:q:%s", session, key);
    if (rc)
        return rc;
    rec_from_hash(x, session, key, out);
    freeReplyObject(x);
    return 0;
}

static rop *begin_op(const tm_request_rec *rec)
{
    rop *o = op_new(OP_REQ_BEGIN);
    if (!o)
        return NULL;
    o->session = tm_strdup(rec->session);
    o->rrec.key = tm_strdup(rec->key);
    o->rrec.tool = tm_strdup(rec->tool);
    o->rrec.stream = tm_strdup(rec->stream);
    o->rrec.message = tm_strdup(rec->message);
    if (!o->session || !o->rrec.key) {
        op_free(o);
        return NULL;
    }
    return o;
}

static int r_request_begin(tm_store *st, const tm_request_rec *rec, int wait_durable)
{
    rstore *r = (rstore *)st;
    rop *o = begin_op(rec);
    if (!o)
        return TIDEMARK_ENOMEM;
    if (!wait_durable) {
        o->w.thread = pthread_self(); /* its failure is told to this thread's sync() */
        o->w.report = 1;
        enqueue(r, o);
        return 0;
    }
    return run_sync(r, o);
}

/* Queued as a waited op, not waited for here (store.h). The response that
 * completes the record, queued after it, carries the effect's rows, and
 * append.lua refuses it whole when the record is another node's or
 * finished: a begin that lost (EEXIST) leaves neither row nor response. */
static int r_request_begin_later(tm_store *st, const tm_request_rec *rec, void **ticket)
{
    rstore *r = (rstore *)st;
    rop *o = begin_op(rec);
    if (!o)
        return TIDEMARK_ENOMEM;
    o->w.q.sync = 1;
    enqueue(r, o);
    *ticket = o;
    return 0;
}

static int r_request_begin_await(tm_store *st, void *ticket)
{
    rstore *r = (rstore *)st;
    rop *o = ticket;
    int rc = tm_writer_await(r->writer, &o->w);
    op_free(o);
    return rc;
}

typedef struct rec_vec {
    tm_request_rec *v;
    size_t n, cap;
} rec_vec;

static int rec_cmp(const void *a, const void *b)
{
    const tm_request_rec *x = a, *y = b;
    int c = strcmp(x->session, y->session);
    if (!c)
        c = strcmp(x->stream ? x->stream : "", y->stream ? y->stream : "");
    if (!c)
        c = (x->updated_ms > y->updated_ms) - (x->updated_ms < y->updated_ms);
    return c;
}

/* Load the records named by started-set members; keep those still started. */
/* For the records of one page (HGETALL replies), which owning nodes still
 * hold their lease: one pipelined EXISTS per distinct node. OUT live: node
 * id -> (void *)1 when its lease is held, (void *)2 when not. */
static int live_nodes(rstore *r, redisReply **rep, size_t n, tm_map **live)
{
    tm_map *m = tm_map_new();
    args *c = calloc(n + 1, sizeof *c);
    const char **ids = calloc(n + 1, sizeof *ids);
    redisReply **x = calloc(n + 1, sizeof *x);
    int rc = m && c && ids && x ? 0 : TIDEMARK_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const redisReply *node = is_array(rep[i], 2) ? kv_get(rep[i], "node") : NULL;
        if (!node || node->type != REDIS_REPLY_STRING || strcmp(node->str, r->wid) == 0 ||
            tm_map_get(m, node->str))
            continue;
        if (tm_map_put(m, node->str, (void *)2) != 0) {
            rc = TIDEMARK_ENOMEM;
            break;
        }
        ids[k] = node->str;
        arg_str(&c[k], "EXISTS");
        arg_fmt(&c[k], "tm:node:%s", node->str);
        k++;
    }
    if (rc == 0 && k)
        rc = pool_run(r, c, (int)k, x);
    for (size_t i = 0; i < k; i++) {
        if (rc == 0) {
            if (x[i]->type == REDIS_REPLY_INTEGER && x[i]->integer == 1)
                tm_map_put(m, ids[i], (void *)1);
            freeReplyObject(x[i]);
        }
        args_free(&c[i]);
    }
    free(c);
    free(ids);
    free(x);
    if (rc) {
        tm_map_free(m);
        m = NULL;
    }
    *live = m;
    return rc;
}

static int load_started(rstore *r, const redisReply *members, rec_vec *out)
{
    size_t n = members->elements;
    if (n == 0)
        return 0;
    args *c = calloc(n, sizeof *c);
    redisReply **rep = calloc(n, sizeof *rep);
    char **sess = calloc(n, sizeof *sess);
    const char **keys = calloc(n, sizeof *keys);
    int rc = c && rep && sess && keys ? 0 : TIDEMARK_ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        /* "<len>:<session><key>" */
        const redisReply *m = members->element[i];
        char *colon = m->type == REDIS_REPLY_STRING ? memchr(m->str, ':', m->len) : NULL;
        size_t slen = colon ? strtoull(m->str, NULL, 10) : 0;
        size_t off = colon ? (size_t)(colon - m->str) + 1 : 0;
        if (!colon || off + slen > m->len) {
            sess[i] = NULL;
            keys[i] = NULL;
            arg_str(&c[i], "PING"); /* keeps replies aligned */
            continue;
        }
        sess[i] = tm_memdup(m->str + off, slen);
        keys[i] = m->str + off + slen;
        arg_str(&c[i], "HGETALL");
        if (sess[i])
            arg_fmt(&c[i], "tm:{%s}:q:%s", sess[i], keys[i]);
        if (!sess[i] || c[i].oom)
            rc = TIDEMARK_ENOMEM;
    }
    if (rc == 0)
        rc = pool_run(r, c, (int)n, rep);
    tm_map *live = NULL; /* node -> lease held (1) or not (2), for this page */
    if (rc == 0)
        rc = live_nodes(r, rep, n, &live);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!sess[i] || !is_array(rep[i], 2) || int_of(kv_get(rep[i], "state")) != TM_REQ_STARTED)
            continue; /* gone or completed since the scan */
        const redisReply *node = kv_get(rep[i], "node");
        if (node && node->type == REDIS_REPLY_STRING &&
            (strcmp(node->str, r->wid) == 0 || tm_map_get(live, node->str) == (void *)1))
            continue; /* running here, or on a node that holds its lease */
        if (out->n == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 16;
            tm_request_rec *v = realloc(out->v, cap * sizeof *v);
            if (!v) {
                rc = TIDEMARK_ENOMEM;
                break;
            }
            out->v = v;
            out->cap = cap;
        }
        memset(&out->v[out->n], 0, sizeof out->v[0]);
        rec_from_hash(rep[i], sess[i], keys[i], &out->v[out->n++]);
    }
    for (size_t i = 0; i < n; i++) {
        if (c)
            args_free(&c[i]);
        if (rep && rc == 0)
            freeReplyObject(rep[i]);
        if (sess)
            free(sess[i]);
    }
    tm_map_free(live);
    free(c);
    free(rep);
    free(sess);
    free(keys);
    return rc;
}

static int r_requests_unfinished(tm_store *st, tm_request_visitor fn, void *ud)
{
    rstore *r = (rstore *)st;
    rec_vec recs = {0};
    char cursor[32] = "0";
    int rc = 0;
    do {
        redisReply *x;
        rc = pool_page(r, &x, "SSCAN", "tm:started", cursor, NULL);
        if (rc)
            break;
        if (!is_array(x, 2) || x->element[0]->type != REDIS_REPLY_STRING ||
            !is_array(x->element[1], 0)) {
            freeReplyObject(x);
            rc = TIDEMARK_EIO;
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", x->element[0]->str);
        rc = load_started(r, x->element[1], &recs);
        freeReplyObject(x);
    } while (rc == 0 && strcmp(cursor, "0") != 0);
    if (rc == 0 && recs.n > 1)
        qsort(recs.v, recs.n, sizeof *recs.v, rec_cmp);
    size_t i = 0;
    for (; rc == 0 && i < recs.n; i++) {
        int stop = fn(ud, &recs.v[i]);
        tm_request_rec_clear(&recs.v[i]);
        if (stop) {
            i++;
            break;
        }
    }
    for (; i < recs.n; i++)
        tm_request_rec_clear(&recs.v[i]);
    free(recs.v);
    return rc;
}

static int r_publish(tm_store *st, const char *channel, const void *data, size_t len)
{
    rstore *r = (rstore *)st;
    size_t cl = strlen(channel), wl = strlen(r->wid);
    char *m = malloc(wl + 1 + cl + 1 + len);
    if (!m)
        return TIDEMARK_ENOMEM;
    memcpy(m, r->wid, wl);
    m[wl] = ' ';
    memcpy(m + wl + 1, channel, cl);
    m[wl + 1 + cl] = ' ';
    if (len)
        memcpy(m + wl + cl + 2, data, len);
    args a = {0};
    arg_str(&a, "PUBLISH");
    arg_str(&a, r->bus);
    arg_bin(&a, m, wl + cl + 2 + len);
    redisReply *x = NULL;
    int rc = pool_one(r, &a, &x);
    free(m);
    if (rc == 0 && x->type == REDIS_REPLY_ERROR)
        rc = TIDEMARK_EIO;
    freeReplyObject(x);
    return rc;
}

/* claim.lua: take a started record whose node's lease lapsed, or (adopt)
 * whoever's it is. */
static int claim_eval(rstore *r, const char *session, const char *key, int adopt)
{
    args a = {0};
    arg_str(&a, "EVAL");
    arg_str(&a, r->claim_src);
    arg_str(&a, "1");
    arg_fmt(&a, "tm:{%s}:q:%s", session, key);
    arg_str(&a, r->wid);
    arg_str(&a, "tm:node:");
    arg_str(&a, adopt ? "1" : "0");
    redisReply *x = NULL;
    int rc = pool_one(r, &a, &x);
    if (rc)
        return rc;
    if (x->type != REDIS_REPLY_INTEGER)
        rc = TIDEMARK_EIO;
    else
        rc = (int)x->integer;
    freeReplyObject(x);
    return rc;
}

static int r_request_claim(tm_store *st, const char *session, const char *key)
{
    return claim_eval((rstore *)st, session, key, 0);
}

static int r_request_adopt(tm_store *st, const char *session, const char *key)
{
    return claim_eval((rstore *)st, session, key, 1);
}

static int r_request_mine(tm_store *st, const char *session, const char *key)
{
    rstore *r = (rstore *)st;
    args a = {0};
    arg_str(&a, "HMGET");
    arg_fmt(&a, "tm:{%s}:q:%s", session, key);
    arg_str(&a, "state");
    arg_str(&a, "node");
    redisReply *x = NULL;
    int rc = pool_one(r, &a, &x);
    if (rc)
        return rc;
    int ok = x->type == REDIS_REPLY_ARRAY && x->elements == 2;
    const redisReply *s = ok ? x->element[0] : NULL, *n = ok ? x->element[1] : NULL;
    rc = !ok ? TIDEMARK_EIO
         : s->type == REDIS_REPLY_STRING && strcmp(s->str, "1") == 0 &&
                   n->type == REDIS_REPLY_STRING && strcmp(n->str, r->wid) == 0;
    freeReplyObject(x);
    return rc;
}

/* SET this node's lease on *c, its own connection (not the pool: lease
 * renewals must not compete with readers), reconnecting when needed. */
static int lease_renew(rstore *r, redisContext **c)
{
    if (*c && (*c)->err) {
        redisFree(*c);
        *c = NULL;
    }
    if (!*c && !(*c = conn_open(r)))
        return TIDEMARK_EIO;
    char epoch[TM_EPOCH_LEN + 1];
    current_epoch(r, epoch);
    redisReply *x = redisCommand(*c, "SET %s %s PX %d", r->lease, epoch, LEASE_MS);
    int rc = x && x->type != REDIS_REPLY_ERROR ? 0 : TIDEMARK_EIO;
    freeReplyObject(x);
    return rc;
}

/* Keep this node's lease while the store is open. */
static void *lease_main(void *arg)
{
    rstore *r = arg;
    redisContext *c = r->lease_conn; /* the thread's from now on */
    r->lease_conn = NULL;
    int64_t ok_at = tm_now_ms();
    int warned = 0;
    while (!sub_pause(r, LEASE_RENEW_MS)) {
        if (lease_renew(r, &c) == 0) {
            ok_at = tm_now_ms();
            warned = 0;
        } else if (!warned && tm_now_ms() - ok_at >= LEASE_MS) {
            TM_WARN("redis: lease %s lapsed (Redis unreachable): other nodes may take over this "
                    "node's unfinished requests", r->lease);
            warned = 1;
        }
    }
    /* Stopped: what this node left started is for the others now. */
    if (c && !c->err)
        freeReplyObject(redisCommand(c, "DEL %s", r->lease));
    redisFree(c);
    return NULL;
}

static int r_exec_schema(tm_store *st, const char *sql)
{
    (void)st;
    (void)sql;
    TM_ERROR("redis: the Redis store has no SQL for application tables; "
             "effects on Redis use tidemark_txn_insert / tidemark_server_rows");
    return TIDEMARK_ENOTSUP;
}

static int r_query(tm_store *st, const char *sql, const char *const *args_, size_t nargs,
                   json_t **rows)
{
    (void)st;
    (void)sql;
    (void)args_;
    (void)nargs;
    (void)rows;
    return TIDEMARK_ENOTSUP;
}

/* Every row of an application table, READ_CHUNK entries per XRANGE. */
static int r_rows(tm_store *st, const char *table, json_t **rows)
{
    rstore *r = (rstore *)st;
    json_t *out = json_array();
    if (!out)
        return TIDEMARK_ENOMEM;
    char *key = fmt("tm:rows:%s", table);
    uint64_t after = 0;
    int rc = key ? 0 : TIDEMARK_ENOMEM;
    while (rc == 0) {
        char from[32];
        snprintf(from, sizeof from, "(%" PRIu64 "-0", after);
        redisReply *x;
        rc = pool_page(r, &x, "XRANGE", key, from, "+");
        if (rc)
            break;
        if (x->type != REDIS_REPLY_ARRAY) {
            rc = TIDEMARK_EIO;
        } else {
            for (size_t i = 0; i < x->elements; i++) {
                const redisReply *e = x->element[i];
                if (!is_array(e, 2))
                    continue;
                after = entry_seq(e);
                const redisReply *doc = kv_get(e->element[1], "doc");
                json_t *row = doc ? json_loadb(doc->str, doc->len, 0, NULL) : NULL;
                if (!json_is_object(row)) {
                    json_decref(row);
                    row = json_object();
                }
                json_object_set_new(row, "id", json_integer((json_int_t)after));
                json_array_append_new(out, row);
            }
        }
        size_t got = x->type == REDIS_REPLY_ARRAY ? x->elements : 0;
        freeReplyObject(x);
        if (got < READ_CHUNK)
            break;
    }
    free(key);
    if (rc) {
        json_decref(out);
        return rc;
    }
    *rows = out;
    return 0;
}

static int r_sessions_expire(tm_store *st, int64_t before, void (*fn)(void *, const char *),
                             void *ud)
{
    rstore *r = (rstore *)st;
    for (;;) {
        rop *o = op_new(OP_EXPIRE);
        if (!o)
            return TIDEMARK_ENOMEM;
        o->ms = before;
        int rc = wait_op(r, o);
        for (size_t i = 0; rc == 0 && i < o->nids; i++) {
            if (!o->ids[i])
                continue;
            forget_session(r, o->ids[i]);
            if (fn)
                fn(ud, o->ids[i]);
        }
        int more = rc == 0 && o->w.seq >= EXPIRE_CHUNK;
        op_free(o);
        if (!more)
            return rc;
    }
}

/* Barriers (writer.h): a plain sync reports this thread's failed request
 * records queued without waiting (told once); sync_since also any op queued
 * at or after mark that failed (exact where the per-thread rule is not: a
 * record queued on one thread, the barrier on another). */
static int r_sync(tm_store *st) { return tm_writer_sync(((rstore *)st)->writer); }

static int r_sync_since(tm_store *st, uint64_t mark)
{
    return tm_writer_sync_since(((rstore *)st)->writer, mark);
}

static uint64_t r_mark(tm_store *st) { return tm_writer_mark(((rstore *)st)->writer); }

static void r_wait_settled(tm_store *st, uint64_t mark)
{
    tm_writer_wait_settled(((rstore *)st)->writer, mark);
}

/* A request's few writes (stream, record, events) queued under one hold go
 * in one MULTI/EXEC (store.h, tm_store_hold). */
static void r_hold(tm_store *st, int on)
{
    if (on)
        tm_writer_hold(((rstore *)st)->writer);
    else
        tm_writer_release(((rstore *)st)->writer);
}

/* Down while the write connection is lost (queued writes wait, then fail). */
static int r_writable(tm_store *st)
{
    return atomic_load(&((rstore *)st)->w_down) ? TIDEMARK_EIO : 0;
}

static void free_stream_cb(const char *k, void *v, void *ud)
{
    (void)k;
    rstream_free(ud, v);
}

static void r_free(rstore *r)
{
    redisFree(r->wc);
    for (int i = 0; i < r->npfree; i++)
        redisFree(r->pfree[i]);
    if (r->streams)
        tm_map_each(r->streams, free_stream_cb, r);
    tm_map_free(r->streams);
    if (r->resv)
        tm_map_each(r->resv, free_val, NULL);
    tm_map_free(r->resv);
    if (r->wake[0] >= 0)
        close(r->wake[0]);
    if (r->wake[1] >= 0)
        close(r->wake[1]);
    pthread_mutex_destroy(&r->e_mu);
    pthread_mutex_destroy(&r->c_mu);
    tm_writer_free(r->writer);
    pthread_mutex_destroy(&r->p_mu);
    pthread_cond_destroy(&r->p_cv);
    free(r->claim_src);
    free(r->host);
    free(r);
}

static void r_close(tm_store *st)
{
    rstore *r = (rstore *)st;
    /* The writer finishes what is queued (bounded by OUTAGE_MS if Redis is
     * gone), then the subscriber is told to stop. */
    tm_writer_stop(r->writer);
    if (r->sub_started || r->leaser_started) {
        ssize_t n;
        do
            n = write(r->wake[1], "x", 1);
        while (n < 0 && errno == EINTR);
    }
    if (r->sub_started)
        pthread_join(r->sub, NULL);
    if (r->leaser_started)
        pthread_join(r->leaser, NULL);
    r_free(r);
}

static const struct tm_store_ops redis_ops = {
    .name = "redis",
    .close = r_close,
    .session_create = r_session_create,
    .session_get = r_session_get,
    .session_touch = r_session_touch,
    .session_delete = r_session_delete,
    .stream_open = r_stream_open,
    .close_stream = r_close_stream,
    .read = r_read,
    .bounds = r_bounds,
    .event_epoch = r_event_epoch,
    .append_ex = r_append_ex,
    .request_get = r_request_get,
    .session_request_get = r_session_request_get,
    .request_begin = r_request_begin,
    .request_begin_later = r_request_begin_later,
    .request_begin_await = r_request_begin_await,
    .requests_unfinished = r_requests_unfinished,
    .exec_schema = r_exec_schema,
    .query = r_query,
    .session_set_attr = r_session_set_attr,
    .sessions_each = r_sessions_each,
    .rows = r_rows,
    .sessions_expire = r_sessions_expire,
    .sync = r_sync,
    .sync_since = r_sync_since,
    .mark = r_mark,
    .wait_settled = r_wait_settled,
    .writable = r_writable,
    .publish = r_publish,
    .request_claim = r_request_claim,
    .request_mine = r_request_mine,
    .request_adopt = r_request_adopt,
    .hold = r_hold,
};

/* "redis://HOST[:PORT][/DB]"; HOST may be "[v6 address]". */
static int parse_uri(const char *uri, char **host, int *port, int *db)
{
    static const char scheme[] = "redis://";
    if (strncmp(uri, scheme, sizeof scheme - 1) != 0)
        return TIDEMARK_EINVAL;
    const char *p = uri + sizeof scheme - 1, *hs = p, *he;
    if (*p == '[') {
        hs = p + 1;
        he = strchr(hs, ']');
        if (!he)
            return TIDEMARK_EINVAL;
        p = he + 1;
    } else {
        he = p + strcspn(p, ":/");
        p = he;
    }
    if (he == hs)
        return TIDEMARK_EINVAL;
    *port = 6379;
    *db = 0;
    char *end;
    if (*p == ':') {
        long v = strtol(p + 1, &end, 10);
        if (end == p + 1 || v < 1 || v > 65535)
            return TIDEMARK_EINVAL;
        *port = (int)v;
        p = end;
    }
    if (*p == '/' && p[1]) {
        long v = strtol(p + 1, &end, 10);
        if (end == p + 1 || v < 0 || v > 1000000)
            return TIDEMARK_EINVAL;
        *db = (int)v;
        p = end;
    } else if (*p == '/') {
        p++;
    }
    if (*p)
        return TIDEMARK_EINVAL;
    *host = tm_memdup(hs, (size_t)(he - hs));
    return *host ? 0 : TIDEMARK_ENOMEM;
}

/* Say when the server's persistence is weaker than the durability asked for:
 * Redis acknowledges before its disk does unless appendfsync is "always". */
static void check_durability(rstore *r)
{
    if (r->opt.durability == TM_DURABILITY_NONE)
        return;
    redisReply *x = redisCommand(r->wc, "CONFIG GET append*");
    if (!is_array(x, 0)) { /* CONFIG may be disabled on managed servers */
        freeReplyObject(x);
        return;
    }
    const redisReply *aof = kv_get(x, "appendonly"), *fs = kv_get(x, "appendfsync");
    int on = aof && aof->type == REDIS_REPLY_STRING && strcmp(aof->str, "yes") == 0;
    int always = fs && fs->type == REDIS_REPLY_STRING && strcmp(fs->str, "always") == 0;
    if (r->opt.durability == TM_DURABILITY_POWER && !(on && always))
        TM_WARN("redis: durability 'power' needs appendonly yes + appendfsync always; this server "
                "(appendonly %s, appendfsync %s) can lose acknowledged events on a crash",
                aof ? aof->str : "?", fs ? fs->str : "?");
    else if (r->opt.durability == TM_DURABILITY_PROCESS && !on)
        TM_WARN("redis: appendonly is off: a Redis restart loses every event");
    freeReplyObject(x);
}

int tm_store_redis_open(const char *uri, const tm_store_options *opt, tm_store **out)
{
    rstore *r = calloc(1, sizeof *r);
    if (!r)
        return TIDEMARK_ENOMEM;
    r->wake[0] = r->wake[1] = -1;
    pthread_mutex_init(&r->e_mu, NULL);
    pthread_mutex_init(&r->c_mu, NULL);
    pthread_mutex_init(&r->p_mu, NULL);
    pthread_cond_init(&r->p_cv, NULL);
    int rc = tm_store_init_base(&r->base, &redis_ops, opt);
    if (rc == 0)
        rc = parse_uri(uri, &r->host, &r->port, &r->db);
    if (rc == 0)
        rc = tm_random_hex(r->wid, sizeof r->wid / 2);
    if (rc) {
        r_free(r);
        return rc;
    }
    r->opt = *opt;
    r->tails = !opt->emit_early && opt->retain_events == 0 && opt->retain_ms <= 0;
    snprintf(r->wkey, sizeof r->wkey, "tm:w:%s", r->wid);
    snprintf(r->channel, sizeof r->channel, "tm:%d:commits", r->db);
    snprintf(r->bus, sizeof r->bus, "tm:%d:bus", r->db);
    snprintf(r->lease, sizeof r->lease, "tm:node:%s", r->wid);
    r->streams = tm_map_new();
    r->resv = tm_map_new();
    r->claim_src = fmt("%s%s", tm_lua_errors, LUA(claim));
    char name[300];
    snprintf(name, sizeof name, "redis: %s:%d/%d", r->host, r->port, r->db);
    tm_writer_config wc = {.name = name, .store = &r->base, .be = r, .hooks = &redis_writer_hooks,
                           .batch_max = BATCH_MAX, .maintain_ms = opt->retain_ms > 0 ? 1000 : 0,
                           .touch_every_ms = opt->touch_every_ms};
    if (!r->streams || !r->resv || !r->claim_src || tm_writer_new(&wc, &r->writer) != 0 || pipe(r->wake) != 0) {
        r_free(r);
        return TIDEMARK_ENOMEM;
    }
    /* Fail the open, not the first append, when Redis is not there. */
    if ((rc = writer_connect_ready(r)) != 0) {
        if (rc == TIDEMARK_EIO)
            TM_ERROR("redis: cannot reach %s:%d (or load scripts)", r->host, r->port);
        r_free(r);
        return rc;
    }
    check_durability(r);
    if (tm_writer_start(r->writer) != 0) {
        r_free(r);
        return TIDEMARK_EIO;
    }
    if (pthread_create(&r->sub, NULL, sub_main, r) == 0) {
        r->sub_started = 1;
    } else {
        r_close(&r->base);
        return TIDEMARK_EIO;
    }
    /* Subscribed before the first caller can miss another node's wake-up or
     * bus message (bounded: the subscriber keeps trying on its own). */
    for (int i = 0; i < 400 && !atomic_load(&r->sub_ready); i++)
        sleep_ms(5);
    /* The lease before anything is recorded under this node's name; its
     * connection goes on to the lease thread. */
    int lrc = lease_renew(r, &r->lease_conn);
    if (lrc != 0 || pthread_create(&r->leaser, NULL, lease_main, r) != 0) {
        redisFree(r->lease_conn);
        r->lease_conn = NULL;
        r_close(&r->base);
        return TIDEMARK_EIO;
    }
    r->leaser_started = 1;
    TM_INFO("redis store %s:%d/%d opened (epoch %s, writer %s)", r->host, r->port, r->db,
            r->base.epoch, r->wid);
    *out = &r->base;
    return 0;
}
