/*
 * test_store_redis.c - the Redis Streams backend through the store.h API.
 *
 * Starts its own redis-server on a free loopback port (no persistence) and
 * kills it at the end; exits 77 (skipped) when redis-server is not installed.
 *
 * The store contract is the memory backend's: its cases are compiled here
 * unchanged by including test_store_memory.c, with tm_store_open() pointed
 * at a fresh Redis database and tm_store_append() waiting until the event is
 * durable (those cases assume a store that commits before append returns).
 * Its concurrency case asks for one listener call per event, which a group
 * commit does not promise; the asynchronous version below replaces it.
 * Then what only a shared, remote store has: request records that outlive
 * the process, other nodes, server restarts, lost connections.
 */
#include "log/store.h"
#include "tidemark/server.h"
#include "tidemark/tidemark.h"
#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <strings.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int g_port;
static atomic_llong g_front_ready_at; /* test_waits_while_loading: -LOADING until then */
static pid_t g_redis = -1;
static int g_next_db = 1;
static char g_dir[64];

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the test's own redis-server ---------------------------------------------- */

static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char dir[4096];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(dir, sizeof dir, "%.*s/%s", (int)n, path, prog);
        if (access(dir, X_OK) == 0)
            return 1;
        path += n + (path[n] == ':');
    }
    return 0;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static redisContext *admin(void)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", g_port, tv);
    if (c && c->err) {
        redisFree(c);
        c = NULL;
    }
    if (c)
        redisSetTimeout(c, tv);
    return c;
}

static int start_redis(void)
{
    char port[16];
    snprintf(port, sizeof port, "%d", g_port);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--databases", "1000", "--dir", g_dir, (char *)NULL);
        _exit(127);
    }
    g_redis = pid;
    for (long long deadline = now_ms() + 10000; now_ms() < deadline; nap_ms(20)) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            g_redis = -1;
            return -1;
        }
        redisContext *c = admin();
        redisReply *r = c ? redisCommand(c, "PING") : NULL;
        int up = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
        freeReplyObject(r);
        redisFree(c);
        if (up)
            return 0;
    }
    return -1;
}

static void stop_redis(void)
{
    if (g_redis > 0) {
        kill(g_redis, SIGKILL);
        waitpid(g_redis, NULL, 0);
        g_redis = -1;
    }
}

/* ---- the memory backend's contract, on Redis ------------------------------------ */

static int contract_open(const char *uri, const tm_store_options *opt, tm_store **out)
{
    (void)uri;
    char u[64];
    snprintf(u, sizeof u, "redis://127.0.0.1:%d/%d", g_port, g_next_db++);
    tm_store_options o = *opt;
    o.durability = TM_DURABILITY_NONE; /* the test server keeps nothing: no warning */
    return tm_store_open(u, &o, out);
}

#include "store_contract.h"

/* ---- helpers -------------------------------------------------------------------- */

static tm_store *open_db(int db, const tm_store_options *opt)
{
    char u[64];
    snprintf(u, sizeof u, "redis://127.0.0.1:%d/%d", g_port, db);
    tm_store_options def = {.durability = TM_DURABILITY_NONE};
    tm_store *st = NULL;
    assert_int_equal(tm_store_open(u, opt ? opt : &def, &st), 0);
    return st;
}

/* A thread-safe listener: the last seq seen per (session, stream). */
#define WATCH_MAX 8
typedef struct watch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, calls;
    char key[WATCH_MAX][64];
    uint64_t seq[WATCH_MAX];
} watch;

static void watch_init(watch *w)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

static void watch_fn(void *ud, const char *session, const char *stream, uint64_t seq)
{
    watch *w = ud;
    char k[64];
    snprintf(k, sizeof k, "%s/%s", session, stream);
    pthread_mutex_lock(&w->mu);
    w->calls++;
    int i = 0;
    while (i < w->n && strcmp(w->key[i], k) != 0)
        i++;
    if (i == w->n && w->n < WATCH_MAX)
        snprintf(w->key[w->n++], sizeof w->key[0], "%s", k);
    if (i < WATCH_MAX && seq > w->seq[i])
        w->seq[i] = seq;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Wait until the listener saw seq (or more) for session/stream. */
static int watch_wait(watch *w, const char *session, const char *stream, uint64_t seq, int ms)
{
    char k[64];
    snprintf(k, sizeof k, "%s/%s", session, stream);
    long long deadline = now_ms() + ms;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        for (int i = 0; i < w->n; i++)
            if (strcmp(w->key[i], k) == 0 && w->seq[i] >= seq) {
                pthread_mutex_unlock(&w->mu);
                return 1;
            }
        if (now_ms() >= deadline)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static void watch_destroy(watch *w)
{
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

/* Request records visited, in order. */
typedef struct rec_list {
    int n;
    char what[16][48]; /* "session key stream" */
} rec_list;

static int list_rec(void *ud, const tm_request_rec *r)
{
    rec_list *l = ud;
    if (l->n < 16)
        snprintf(l->what[l->n], sizeof l->what[0], "%s %s %s", r->session, r->key,
                 r->stream ? r->stream : "-");
    l->n++;
    return 0;
}

/* ---- request records -------------------------------------------------------------- */

static void test_request_records(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    mk_session(st, "b");
    open_stream(st, "a", NULL, "r1");
    open_stream(st, "a", NULL, "r2");
    open_stream(st, "b", NULL, "r1");
    tm_request_rec r1 = {.session = "a", .key = "i:1", .tool = "slow", .stream = "r2",
                         .message = "{\"id\":1}"};
    tm_request_rec r2 = {.session = "a", .key = "s:x", .tool = "slow", .stream = "r1"};
    tm_request_rec r3 = {.session = "b", .key = "k:b/7", .stream = "r1"};
    assert_int_equal(tm_store_request_begin(st, &r1, 1), 0);
    assert_int_equal(tm_store_request_begin(st, &r1, 1), TIDEMARK_EEXIST);
    assert_int_equal(tm_store_request_begin(st, &r2, 0), 0); /* not waited for */
    assert_int_equal(tm_store_request_begin(st, &r3, 1), 0);
    assert_int_equal(tm_store_request_begin(st, &r2, 1), TIDEMARK_EEXIST);
    tm_request_rec nos = {.session = "zz", .key = "i:1"};
    assert_int_equal(tm_store_request_begin(st, &nos, 1), TIDEMARK_ENOTFOUND);

    tm_request_rec got;
    assert_int_equal(tm_store_request_get(st, "a", "i:1", &got), 0);
    assert_int_equal(got.state, TM_REQ_STARTED);
    assert_string_equal(got.session, "a");
    assert_string_equal(got.key, "i:1");
    assert_string_equal(got.tool, "slow");
    assert_string_equal(got.stream, "r2");
    assert_string_equal(got.message, "{\"id\":1}");
    assert_null(got.response);
    assert_true(got.updated_ms > 0);
    tm_request_rec_clear(&got);
    assert_int_equal(tm_store_request_get(st, "a", "i:2", &got), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_request_get(st, "b", "i:1", &got), TIDEMARK_ENOTFOUND);

    /* records a live node owns are not left over: not for their node, nor
     * for another node while the owner holds its lease */
    rec_list l = {0};
    assert_int_equal(tm_store_requests_unfinished(st, list_rec, &l), 0);
    assert_int_equal(l.n, 0);
    tm_store *st2 = open_db(g_next_db - 1, NULL);
    assert_int_equal(tm_store_requests_unfinished(st2, list_rec, &l), 0);
    assert_int_equal(l.n, 0);

    /* the result event completes the record in the same script */
    static const char resp[] = {'{', '\0', '}'};
    tm_append_req q = {.session = "a", .stream = "r2", .data = resp, .len = sizeof resp,
                       .flags = TM_APPEND_FINAL, .request_key = "i:1"};
    assert_int_equal(tm_store_append_ex(st, &q), 0);
    assert_int_equal(tm_store_sync(st), 0);
    assert_int_equal(tm_store_request_get(st, "a", "i:1", &got), 0);
    assert_int_equal(got.state, TM_REQ_COMPLETED);
    assert_int_equal(got.response_len, sizeof resp);
    assert_memory_equal(got.response, resp, sizeof resp);
    tm_request_rec_clear(&got);

    /* its node gone (its lease with it), another node finds what is left,
     * ordered by session, stream */
    tm_store_close(st);
    memset(&l, 0, sizeof l);
    assert_int_equal(tm_store_requests_unfinished(st2, list_rec, &l), 0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.what[0], "a s:x r1");
    assert_string_equal(l.what[1], "b k:b/7 r1");
    /* and a record dies with its session */
    assert_int_equal(tm_store_session_delete(st2, "b"), 0);
    memset(&l, 0, sizeof l);
    assert_int_equal(tm_store_requests_unfinished(st2, list_rec, &l), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(tm_store_request_get(st2, "b", "k:b/7", &got), TIDEMARK_ENOTFOUND);
    tm_store_close(st2);
}

/* Claims: one survivor takes a record whose node's lease is gone, once. */
static void test_request_claim(void **state)
{
    (void)state;
    int db = g_next_db++;
    tm_store *owner = open_db(db, NULL), *a = open_db(db, NULL), *b = open_db(db, NULL);
    mk_session(owner, "s");
    open_stream(owner, "s", NULL, "r1");
    static char key[3075];
    memcpy(key, "s:", 2);
    for (int i = 2; i < 3074; i++)
        key[i] = "%00{}:/x"[i % 8];
    tm_request_rec r = {.session = "s", .key = key, .tool = "t", .stream = "r1"};
    assert_int_equal(tm_store_request_begin(owner, &r, 1), 0);
    assert_int_equal(tm_store_request_claim(a, "s", key), TIDEMARK_EBUSY); /* its owner lives */
    assert_int_equal(tm_store_request_claim(owner, "s", key), TIDEMARK_EBUSY); /* its own */
    assert_int_equal(tm_store_request_mine(owner, "s", key), 1);
    assert_int_equal(tm_store_request_mine(a, "s", key), 0);
    assert_int_equal(tm_store_request_mine(a, "s", "s:absent"), 0);
    tm_store_close(owner); /* its lease goes with it */
    rec_list l = {0};
    assert_int_equal(tm_store_requests_unfinished(a, list_rec, &l), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(tm_store_request_claim(a, "s", key), 0);
    assert_int_equal(tm_store_request_claim(b, "s", key), TIDEMARK_EBUSY); /* a took it */
    assert_int_equal(tm_store_request_claim(a, "s", key), TIDEMARK_EBUSY); /* running here now */
    assert_int_equal(tm_store_request_mine(a, "s", key), 1);
    assert_int_equal(tm_store_request_mine(b, "s", key), 0);
    memset(&l, 0, sizeof l);
    assert_int_equal(tm_store_requests_unfinished(b, list_rec, &l), 0);
    assert_int_equal(l.n, 0); /* a's, and a holds its lease */
    tm_append_req q = {.session = "s", .stream = "r1", .data = "{}", .len = 2,
                       .flags = TM_APPEND_FINAL, .request_key = key};
    assert_int_equal(tm_store_append_ex(a, &q), 0);
    assert_int_equal(tm_store_sync(a), 0);
    tm_request_rec got;
    assert_int_equal(tm_store_request_get(b, "s", key, &got), 0);
    assert_int_equal(got.state, TM_REQ_COMPLETED);
    tm_request_rec_clear(&got);
    assert_int_equal(tm_store_request_claim(b, "s", key), TIDEMARK_EBUSY); /* finished */
    assert_int_equal(tm_store_request_mine(a, "s", key), 0);
    /* adopt: a started record, whoever's and however live, becomes this node's */
    tm_request_rec r2 = {.session = "s", .key = "s:2", .tool = "t", .stream = "r1"};
    assert_int_equal(tm_store_request_begin(a, &r2, 1), 0);
    assert_int_equal(tm_store_request_claim(b, "s", "s:2"), TIDEMARK_EBUSY); /* a lives */
    assert_int_equal(tm_store_request_adopt(b, "s", "s:2"), 0);
    assert_int_equal(tm_store_request_mine(b, "s", "s:2"), 1);
    assert_int_equal(tm_store_request_mine(a, "s", "s:2"), 0);
    assert_int_equal(tm_store_request_adopt(b, "s", key), TIDEMARK_EBUSY); /* finished */
    assert_int_equal(tm_store_request_adopt(b, "s", "s:absent"), TIDEMARK_ENOTFOUND);
    tm_store_close(a);
    tm_store_close(b);
}

/* ---- effects ----------------------------------------------------------------------- */

/* Inserts one ledger row {k: ud}; "bad" fails after its row was buffered. */
static int fx_insert(void *ud, tm_txn *txn)
{
    json_t *row = json_pack("{s:s}", "k", (const char *)ud);
    int rc = tidemark_txn_insert(txn, "ledger", row);
    json_decref(row);
    if (rc)
        return rc;
    return strcmp(ud, "bad") == 0 ? TIDEMARK_EINVAL : 0;
}

static int fx_sql(void *ud, tm_txn *txn)
{
    const char *args[1] = {ud};
    return tidemark_txn_exec(txn, "INSERT INTO ledger(k) VALUES(?1)", args, 1);
}

/* The ledger's "k" values, in row order, joined with ','. */
static void ledger_keys(tm_store *st, char *out, size_t cap)
{
    json_t *rows = NULL;
    assert_int_equal(tm_store_rows(st, "ledger", &rows), 0);
    out[0] = '\0';
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        assert_int_equal(json_integer_value(json_object_get(row, "id")), (json_int_t)i + 1);
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%s%s", i ? "," : "", json_string_value(json_object_get(row, "k")));
    }
    json_decref(rows);
}

static void test_effects(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    /* SQL needs a store with SQL: refused loudly, never run on a private copy. */
    assert_int_equal(tm_store_exec_schema(st, "CREATE TABLE IF NOT EXISTS ledger(k TEXT)"),
                     TIDEMARK_ENOTSUP);
    tm_append_req ok = {.session = "a", .stream = "r1", .data = "done", .len = 4,
                        .effect = fx_insert, .effect_ud = "good", .fallback = "fell", .fallback_len = 4};
    tm_append_req bad = ok, sql = ok;
    bad.effect_ud = "bad";
    sql.effect = fx_sql;
    sql.effect_ud = "sql";
    assert_int_equal(tm_store_append_ex(st, &ok), 0);
    assert_int_equal(tm_store_append_ex(st, &bad), 0);
    assert_int_equal(tm_store_append_ex(st, &sql), 0);
    assert_int_equal(tm_store_sync(st), 0);
    char keys[256];
    ledger_keys(st, keys, sizeof keys);
    assert_string_equal(keys, "good"); /* the failed effects left no row */
    collected c = {0};
    read_all(st, "a", "r1", 0, 10, &c);
    assert_int_equal(c.n, 3);
    assert_memory_equal(c.data[0], "done", 4);
    assert_memory_equal(c.data[1], "fell", 4); /* a failed effect leaves its fallback */
    assert_memory_equal(c.data[2], "fell", 4);
    /* Another node sees the same rows. */
    tm_store *st2 = open_db(g_next_db - 1, NULL);
    char keys2[256];
    ledger_keys(st2, keys2, sizeof keys2);
    assert_string_equal(keys2, "good");
    json_t *none = NULL;
    assert_int_equal(tm_store_rows(st2, "no-such-table", &none), 0);
    assert_int_equal(json_array_size(none), 0);
    json_decref(none);
    assert_int_equal(tm_store_rows(st2, "bad table", &none), TIDEMARK_EINVAL);
    tm_store_close(st2);
    tm_store_close(st);
}

/* Two nodes finish the same call (one was taken for dead but still ran):
 * each appends the final result with its effect. Whichever lands first closes
 * the stream; the other append is refused whole, its row included. */
static void test_effect_once_across_nodes(void **state)
{
    (void)state;
    int db = g_next_db++;
    for (int round = 0; round < 20; round++) {
        tm_store *n1 = open_db(db, NULL), *n2 = open_db(db, NULL);
        char sid[16], e1[16], e2[16];
        snprintf(sid, sizeof sid, "z%d", round);
        snprintf(e1, sizeof e1, "n1-%d", round);
        snprintf(e2, sizeof e2, "n2-%d", round);
        mk_session(n1, sid);
        open_stream(n1, sid, NULL, "r1");
        /* both nodes hold the stream open (n2 learns it by writing to it) */
        assert_int_equal(append_durable(n2, sid, "r1", "p", 1, 0, NULL, NULL), 0);
        tm_append_req f1 = {.session = sid, .stream = "r1", .data = "R1", .len = 2,
                            .flags = TM_APPEND_FINAL, .effect = fx_insert, .effect_ud = e1};
        tm_append_req f2 = f1;
        f2.data = "R2";
        f2.effect_ud = e2;
        int rc1 = tm_store_append_ex(n1, &f1);
        int rc2 = tm_store_append_ex(n2, &f2);
        assert_int_equal(tm_store_sync(n1), 0);
        assert_int_equal(tm_store_sync(n2), 0);
        assert_true(rc1 == 0 || rc1 == TIDEMARK_ECLOSED);
        assert_true(rc2 == 0 || rc2 == TIDEMARK_ECLOSED);
        collected c = {0};
        read_all(n1, sid, "r1", 0, 10, &c);
        assert_int_equal(c.n, 2); /* "p", then exactly one final */
        int first_won = memcmp(c.data[1], "R1", 2) == 0;
        json_t *rows = NULL;
        assert_int_equal(tm_store_rows(n2, "ledger", &rows), 0);
        int n_e1 = 0, n_e2 = 0;
        size_t i;
        json_t *row;
        json_array_foreach(rows, i, row) {
            const char *k = json_string_value(json_object_get(row, "k"));
            n_e1 += strcmp(k, e1) == 0;
            n_e2 += strcmp(k, e2) == 0;
        }
        json_decref(rows);
        assert_int_equal(n_e1 + n_e2, 1);
        assert_int_equal(n_e1, first_won);
        tm_store_close(n2);
        tm_store_close(n1);
    }
}

/* A late begin (begin_later): the begin, the effect's rows and the response
 * that completes the record go in one MULTI/EXEC, and append.lua writes
 * the response and its rows only when the record is this node's started
 * one. A begin another node won first answers EEXIST and leaves neither;
 * a response to a finished record is refused too, and rows under a record
 * that is not there. */
static void keep_status(void *ud, int status, uint64_t seq)
{
    (void)seq;
    *(int *)ud = status;
}

static void test_late_begin(void **state)
{
    (void)state;
    int db = g_next_db++;
    tm_store *n1 = open_db(db, NULL), *n2 = open_db(db, NULL);
    assert_true(tm_store_begins_later(n2));
    mk_session(n1, "s");
    open_stream(n1, "s", NULL, "r1");
    open_stream(n1, "s", NULL, "r2");
    open_stream(n1, "s", NULL, "r3");
    tm_request_rec r = {.session = "s", .key = "s:k1", .tool = "t", .stream = "r1"};
    assert_int_equal(tm_store_request_begin(n1, &r, 1), 0);
    /* n2 begins s:k1 late and completes it with an effect: n1 had it first */
    void *ticket = NULL;
    tm_request_rec r2 = {.session = "s", .key = "s:k1", .tool = "t", .stream = "r2"};
    tm_append_req lost = {.session = "s", .stream = "r2", .data = "L", .len = 1,
                          .flags = TM_APPEND_FINAL, .request_key = "s:k1",
                          .effect = fx_insert, .effect_ud = "lost"};
    int st_lost = 1, st_won = 1, st_again = 1;
    lost.cb = keep_status;
    lost.cb_ud = &st_lost;
    tm_store_hold(n2);
    assert_int_equal(tm_store_request_begin_later(n2, &r2, &ticket), 0);
    assert_int_equal(tm_store_append_ex(n2, &lost), 0);
    tm_store_release(n2);
    assert_int_equal(tm_store_request_begin_await(n2, ticket), TIDEMARK_EEXIST);
    assert_int_equal(tm_store_sync(n2), 0);
    assert_int_equal(st_lost, TIDEMARK_EBUSY); /* the response was refused */
    collected c = {0};
    read_all(n1, "s", "r2", 0, 10, &c);
    assert_int_equal(c.n, 0);
    assert_int_equal(tm_store_request_mine(n1, "s", "s:k1"), 1); /* still n1's, started */
    /* a late begin that wins: begin, row and response together */
    tm_request_rec r3 = {.session = "s", .key = "s:k2", .tool = "t", .stream = "r3"};
    tm_append_req won = {.session = "s", .stream = "r3", .data = "W", .len = 1,
                         .flags = TM_APPEND_FINAL, .request_key = "s:k2",
                         .effect = fx_insert, .effect_ud = "won", .cb = keep_status,
                         .cb_ud = &st_won};
    tm_store_hold(n2);
    assert_int_equal(tm_store_request_begin_later(n2, &r3, &ticket), 0);
    assert_int_equal(tm_store_append_ex(n2, &won), 0);
    tm_store_release(n2);
    assert_int_equal(tm_store_request_begin_await(n2, ticket), 0);
    assert_int_equal(tm_store_sync(n2), 0);
    assert_int_equal(st_won, 0);
    tm_request_rec got;
    assert_int_equal(tm_store_request_get(n1, "s", "s:k2", &got), 0);
    assert_int_equal(got.state, TM_REQ_COMPLETED);
    assert_memory_equal(got.response, "W", 1);
    tm_request_rec_clear(&got);
    /* n1 answering the record n2 finished: refused, no row */
    tm_append_req late = {.session = "s", .stream = "r1", .data = "X", .len = 1,
                          .flags = TM_APPEND_FINAL, .request_key = "s:k2",
                          .effect = fx_insert, .effect_ud = "again", .cb = keep_status,
                          .cb_ud = &st_again};
    assert_int_equal(tm_store_append_ex(n1, &late), 0);
    assert_int_equal(tm_store_sync(n1), 0);
    assert_int_equal(st_again, TIDEMARK_EBUSY);
    read_all(n1, "s", "r1", 0, 10, &c);
    assert_int_equal(c.n, 0);
    /* rows under a record that is not there: nothing would say they ran */
    int st_ghost = 1;
    tm_append_req ghost = {.session = "s", .stream = "r1", .data = "G", .len = 1,
                           .request_key = "s:none", .effect = fx_insert, .effect_ud = "ghost",
                           .cb = keep_status, .cb_ud = &st_ghost};
    assert_int_equal(tm_store_append_ex(n1, &ghost), 0);
    assert_int_equal(tm_store_sync(n1), 0);
    assert_int_equal(st_ghost, TIDEMARK_EIO);
    read_all(n1, "s", "r1", 0, 10, &c);
    assert_int_equal(c.n, 0);
    char keys[64];
    ledger_keys(n1, keys, sizeof keys);
    assert_string_equal(keys, "won");
    tm_store_close(n2);
    tm_store_close(n1);
}

/* sessions_each pages through tm:sessions: every session once, whatever the
 * page size, while sessions are being deleted meanwhile. */
typedef struct visit {
    tm_store *st;
    int n, deleted;
    char seen[700];
} visit;

static int visit_one(void *ud, const tm_session_rec *rec)
{
    visit *v = ud;
    int k = atoi(rec->id + 1);
    assert_true(k >= 0 && k < 700);
    assert_int_equal(v->seen[k], 0); /* never twice */
    v->seen[k] = 1;
    v->n++;
    if (v->n % 50 == 0) { /* delete another session mid-visit (visited or not) */
        char id[16];
        snprintf(id, sizeof id, "s%d", (k * 7 + 3) % 700);
        if (tm_store_session_delete(v->st, id) == 0)
            v->deleted++;
    }
    return 0;
}

static void test_sessions_each_pages(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    for (int k = 0; k < 700; k++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", k);
        mk_session(st, id);
    }
    visit v = {.st = st};
    assert_int_equal(tm_store_sessions_each(st, visit_one, &v), 0);
    assert_true(v.deleted > 0);
    int left = 0;
    for (int k = 0; k < 700; k++) { /* every session that outlived the visit was visited */
        char id[16];
        snprintf(id, sizeof id, "s%d", k);
        tm_session_rec rec;
        if (tm_store_session_get(st, id, &rec) == 0) {
            left++;
            assert_int_equal(v.seen[k], 1);
            tm_session_rec_clear(&rec);
        }
    }
    assert_int_equal(left, 700 - v.deleted);
    tm_store_close(st);
}

/* ---- expiry ------------------------------------------------------------------------ */

typedef struct id_list {
    int n;
    char id[8][16];
} id_list;

static void got_id(void *ud, const char *id)
{
    id_list *l = ud;
    if (l->n < 8)
        snprintf(l->id[l->n], sizeof l->id[0], "%s", id);
    l->n++;
}

static void test_sessions_expire(void **state)
{
    (void)state;
    tm_store *st = open_store(0);
    mk_session(st, "x"); /* last seen 1000 */
    mk_session(st, "y");
    mk_session(st, "z");
    open_stream(st, "x", NULL, "r1");
    append_str(st, "x", "r1", "ev");
    assert_int_equal(tm_store_session_touch(st, "y", 7000), 0);
    assert_int_equal(tm_store_session_touch(st, "z", 9000), 0);
    id_list l = {0};
    assert_int_equal(tm_store_sessions_expire(st, 8000, got_id, &l), 0);
    assert_int_equal(l.n, 2);
    assert_true((strcmp(l.id[0], "x") == 0 && strcmp(l.id[1], "y") == 0) ||
                (strcmp(l.id[0], "y") == 0 && strcmp(l.id[1], "x") == 0));
    tm_session_rec got;
    assert_int_equal(tm_store_session_get(st, "x", &got), TIDEMARK_ENOTFOUND);
    tm_stream_bounds b;
    assert_int_equal(tm_store_bounds(st, "x", "r1", &b), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_session_get(st, "z", &got), 0);
    tm_session_rec_clear(&got);
    memset(&l, 0, sizeof l);
    assert_int_equal(tm_store_sessions_expire(st, 8000, got_id, &l), 0);
    assert_int_equal(l.n, 0);
    tm_store_close(st);
}

/* ---- concurrency: pipelined appends --------------------------------------------- */

#define P_THREADS 4
#define P_STREAMS 4
#define P_PER_THREAD 2000
#define P_PER_STREAM (P_THREADS * P_PER_THREAD / P_STREAMS)

typedef struct p_slot {
    int status;
    uint64_t seq;
    int calls;
} p_slot;

typedef struct p_worker {
    tm_store *st;
    pthread_barrier_t *go;
    int t, errors;
    p_slot slot[P_PER_THREAD]; /* outlive the append: callbacks come later */
} p_worker;

static const char *const p_sess[P_STREAMS] = {"sa", "sa", "sb", "sb"};
static const char *const p_strm[P_STREAMS] = {"r1", "r2", "r1", "g"};

static void p_cb(void *ud, int status, uint64_t seq)
{
    p_slot *s = ud;
    s->status = status;
    s->seq = seq;
    s->calls++;
}

static void *p_run(void *arg)
{
    p_worker *w = arg;
    pthread_barrier_wait(w->go);
    for (int i = 0; i < P_PER_THREAD; i++) {
        int k = i % P_STREAMS;
        char m[32];
        int len = snprintf(m, sizeof m, "t%d-i%d", w->t, i);
        /* During what the store takes for an outage it refuses new ops at
         * once (fail fast, nothing sent): an application retries those. */
        int rc, tries = 0;
        while ((rc = tm_store_append(w->st, p_sess[k], p_strm[k], m, (size_t)len, 0, p_cb,
                                     &w->slot[i])) == TIDEMARK_EIO && tries++ < 500)
            nap_ms(10);
        if (rc != 0)
            w->errors++;
    }
    return NULL;
}

typedef struct p_check {
    uint64_t next;
    int bad;
    int last_i[P_THREADS];
    p_worker *ws;
} p_check;

static int p_visit(void *ud, const tm_event *ev)
{
    p_check *c = ud;
    char m[32];
    int t, i;
    if (ev->seq != c->next++ || ev->len >= sizeof m) {
        c->bad++;
        return 0;
    }
    memcpy(m, ev->data, ev->len);
    m[ev->len] = '\0';
    if (sscanf(m, "t%d-i%d", &t, &i) != 2 || t < 0 || t >= P_THREADS || i < 0 ||
        i >= P_PER_THREAD || i <= c->last_i[t] || c->ws[t].slot[i].seq != ev->seq)
        c->bad++;
    else
        c->last_i[t] = i;
    return 0;
}

/* Append from threads, maybe while connections are killed; then every event
 * is in its stream exactly once, at the seq its callback reported. */
static void run_appenders(tm_store *st, p_worker *ws, int kill_clients)
{
    static const char *const sess[] = {"sa", "sb"};
    for (int i = 0; i < 2; i++)
        mk_session(st, sess[i]);
    open_stream(st, "sa", NULL, "r1");
    open_stream(st, "sa", NULL, "r2");
    open_stream(st, "sb", NULL, "r1");
    open_stream(st, "sb", "g", "g");
    pthread_barrier_t go;
    assert_int_equal(pthread_barrier_init(&go, NULL, P_THREADS), 0);
    pthread_t th[P_THREADS];
    for (int t = 0; t < P_THREADS; t++) {
        memset(&ws[t], 0, sizeof ws[t]);
        ws[t].st = st;
        ws[t].go = &go;
        ws[t].t = t;
        assert_int_equal(pthread_create(&th[t], NULL, p_run, &ws[t]), 0);
    }
    long long killed = 0;
    if (kill_clients) {
        /* Drop the writer's and the readers' connections again and again:
         * replies get lost after Redis ran the script. */
        redisContext *a = admin();
        assert_non_null(a);
        for (int n = 0; n < 80; n++) {
            redisReply *r = redisCommand(a, "CLIENT KILL TYPE normal SKIPME yes");
            if (r && r->type == REDIS_REPLY_INTEGER)
                killed += r->integer;
            freeReplyObject(r);
            /* Leave each reconnect time to finish (slow under sanitizers):
             * the point is lost replies, not an outage, which fails ops
             * with EIO by design. */
            nap_ms(30);
        }
        redisFree(a);
        assert_true(killed > 0);
    }
    for (int t = 0; t < P_THREADS; t++)
        assert_int_equal(pthread_join(th[t], NULL), 0);
    pthread_barrier_destroy(&go);
    assert_int_equal(tm_store_sync(st), 0);
}

static void check_appends(tm_store *st, p_worker *ws)
{
    for (int t = 0; t < P_THREADS; t++) {
        assert_int_equal(ws[t].errors, 0);
        for (int i = 0; i < P_PER_THREAD; i++) {
            assert_int_equal(ws[t].slot[i].calls, 1);
            assert_int_equal(ws[t].slot[i].status, 0);
        }
    }
    for (int k = 0; k < P_STREAMS; k++) {
        tm_stream_bounds b;
        assert_int_equal(tm_store_bounds(st, p_sess[k], p_strm[k], &b), 0);
        assert_int_equal(b.head, P_PER_STREAM);
        assert_int_equal(b.assigned, P_PER_STREAM);
        p_check c = {.next = 1, .ws = ws};
        for (int t = 0; t < P_THREADS; t++)
            c.last_i[t] = -1;
        assert_int_equal(tm_store_read(st, p_sess[k], p_strm[k], 0, P_PER_STREAM + 10, p_visit, &c), 0);
        assert_int_equal(c.bad, 0);
        assert_int_equal(c.next, P_PER_STREAM + 1); /* dense, nothing twice */
    }
}

static void test_concurrent_pipelined(void **state)
{
    (void)state;
    static p_worker ws[P_THREADS];
    static watch w;
    watch_init(&w);
    tm_store *st = open_store(0);
    tm_store_set_listener(st, watch_fn, &w);
    run_appenders(st, ws, 0);
    check_appends(st, ws);
    /* the listener reached every stream's head, after fewer calls than
     * events when commits were grouped */
    for (int k = 0; k < P_STREAMS; k++)
        assert_true(watch_wait(&w, p_sess[k], p_strm[k], P_PER_STREAM, 0));
    print_message("pipelined: %d appends, %d listener calls\n", P_THREADS * P_PER_THREAD, w.calls);
    tm_store_close(st);
    watch_destroy(&w);
}

static void test_lost_replies_no_duplicates(void **state)
{
    (void)state;
    static p_worker ws[P_THREADS];
    tm_store *st = open_store(0);
    char epoch[TM_EPOCH_LEN + 1];
    snprintf(epoch, sizeof epoch, "%s", tm_store_epoch(st));
    run_appenders(st, ws, 1);
    check_appends(st, ws);
    assert_string_equal(tm_store_epoch(st), epoch); /* same server: same generation */
    tm_store_close(st);
}

/* ---- many nodes ------------------------------------------------------------------- */

static void test_two_nodes(void **state)
{
    (void)state;
    int db = g_next_db++;
    tm_store *a = open_db(db, NULL), *b = open_db(db, NULL);
    const char *ea = tm_store_epoch(a), *eb = tm_store_epoch(b);
    assert_string_not_equal(ea, eb);
    watch wa, wb;
    watch_init(&wa);
    watch_init(&wb);
    tm_store_set_listener(a, watch_fn, &wa);
    tm_store_set_listener(b, watch_fn, &wb);

    mk_session(a, "s");
    open_stream(a, "s", NULL, "r1");
    fill(a, "s", "r1", 3);
    /* B is woken for A's commits and reads them, under A's epoch */
    assert_true(watch_wait(&wb, "s", "r1", 3, 5000));
    collected c = {0};
    read_all(b, "s", "r1", 0, 10, &c);
    expect_run(&c, 1, 3);
    assert_string_equal(c.epoch[2], ea);

    /* B continues the same stream: seqs stay dense across nodes */
    assert_int_equal(tm_store_append(b, "s", "r1", "ev-4", 4, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_sync(b), 0);
    assert_true(watch_wait(&wa, "s", "r1", 4, 5000));
    read_all(a, "s", "r1", 0, 10, &c);
    expect_run(&c, 1, 4);
    assert_string_equal(c.epoch[0], ea);
    assert_string_equal(c.epoch[3], eb);
    char ep[TM_EPOCH_LEN + 1];
    assert_int_equal(tm_store_event_epoch(a, "s", "r1", 4, ep), 0);
    assert_string_equal(ep, eb);
    /* A's own next append learns the real head from Redis */
    assert_int_equal(tm_store_append(a, "s", "r1", "ev-5", 4, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_sync(a), 0);
    tm_stream_bounds bb;
    assert_int_equal(tm_store_bounds(b, "s", "r1", &bb), 0);
    assert_int_equal(bb.head, 5);

    /* POST stream numbers and sessions are shared: a node takes its numbers
     * from Redis in blocks (A took r1..r64 with its first open), so no two
     * nodes ever open the same one, and A's next opens need no round trip */
    open_stream(b, "s", NULL, "r65");
    open_stream(a, "s", NULL, "r2");
    open_stream(b, "s", NULL, "r66");
    assert_int_equal(tm_store_bounds(b, "s", "r66", &bb), 0);
    assert_int_equal(bb.head, 0);
    assert_int_equal(tm_store_sync(a), 0);
    assert_int_equal(tm_store_bounds(b, "s", "r2", &bb), 0); /* B sees A's queued open once durable */
    assert_int_equal(bb.head, 0);
    tm_session_rec rec = {.id = "s"};
    assert_int_equal(tm_store_session_create(b, &rec), TIDEMARK_EEXIST);

    /* a close on A ends the stream for B's readers too */
    assert_int_equal(tm_store_close_stream(a, "s", "r1"), 0);
    assert_int_equal(tm_store_sync(a), 0); /* a close is queued, as an append */
    assert_int_equal(tm_store_bounds(b, "s", "r1", &bb), 0);
    assert_int_equal(bb.closed, 1);
    assert_int_equal(tm_store_append(b, "s", "r1", "x", 1, 0, NULL, NULL), TIDEMARK_ECLOSED);
    tm_store_close(a);
    tm_store_close(b);
    watch_destroy(&wa);
    watch_destroy(&wb);
}

/* A node opens the POST streams it reserved without a round trip, queues
 * closes, folds a close into the append before it, and answers reads and
 * bounds of its own streams from what it committed: what another node sees
 * in Redis is the same, and a session gone meanwhile still reads as gone. */
/* reader sees q/name closed at head 2, events 1 and 2 of writer's epoch
 * (collected into c, whose slot k is checked) */
static void expect_closed_pair(tm_store *reader, tm_store *writer, const char *name, collected *c,
                               size_t k)
{
    tm_stream_bounds bb;
    assert_int_equal(tm_store_bounds(reader, "q", name, &bb), 0);
    assert_int_equal(bb.head, 2);
    assert_int_equal(bb.closed, 1);
    read_all(reader, "q", name, 0, 10, c);
    expect_run(c, 1, 2);
    assert_string_equal(c->epoch[k], tm_store_epoch(writer));
}

static void test_queued_open_close(void **state)
{
    (void)state;
    int db = g_next_db++;
    tm_store *a = open_db(db, NULL), *b = open_db(db, NULL);
    mk_session(a, "q");
    open_stream(a, "q", NULL, "r1"); /* waited: reserves r2..r64 */
    open_stream(a, "q", NULL, "r2"); /* queued */
    tm_stream_bounds bb;
    memset(&bb, 0x5a, sizeof bb);
    assert_int_equal(tm_store_bounds(a, "q", "r2", &bb), 0); /* before its open is durable */
    assert_int_equal(bb.head, 0);
    assert_int_equal(bb.closed, 0);
    assert_int_equal(bb.first_retained, 1);
    collected c = {0};
    read_all(a, "q", "r2", 0, 10, &c);
    assert_int_equal(c.n, 0);
    assert_int_equal(tm_store_append(a, "q", "r2", "ev-1", 4, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_append(a, "q", "r2", "ev-2", 4, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_close_stream(a, "q", "r2"), 0); /* queued */
    assert_int_equal(tm_store_append(a, "q", "r2", "x", 1, 0, NULL, NULL), TIDEMARK_ECLOSED);
    assert_int_equal(tm_store_sync(a), 0);
    expect_closed_pair(a, a, "r2", &c, 0);
    /* Redis holds the same: another node reads it there */
    expect_closed_pair(b, a, "r2", &c, 1);

    /* an append and a close queued together: the close rides in the append */
    open_stream(a, "q", NULL, "r3");
    tm_store_hold(a);
    assert_int_equal(tm_store_append(a, "q", "r3", "ev-1", 4, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_close_stream(a, "q", "r3"), 0);
    tm_store_release(a);
    assert_int_equal(tm_store_sync(a), 0);
    assert_int_equal(tm_store_bounds(b, "q", "r3", &bb), 0);
    assert_int_equal(bb.head, 1);
    assert_int_equal(bb.closed, 1);
    assert_int_equal(tm_store_append(b, "q", "r3", "late", 4, 0, NULL, NULL), TIDEMARK_ECLOSED);
    read_all(b, "q", "r3", 0, 10, &c);
    expect_run(&c, 1, 1);

    /* the session deleted through another node: a queued open fails there,
     * and this node's reads of it say so once that is known */
    assert_int_equal(tm_store_session_delete(b, "q"), 0);
    char out[TM_STREAM_MAX];
    assert_int_equal(tm_store_stream_open(a, "q", NULL, out), 0); /* queued: not known yet */
    assert_string_equal(out, "r4");
    assert_int_equal(tm_store_sync(a), 0);
    assert_int_equal(tm_store_bounds(a, "q", "r4", &bb), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_read(a, "q", "r4", 0, 10, collect, &c), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_store_append(a, "q", "r4", "x", 1, 0, NULL, NULL), TIDEMARK_ENOTFOUND);
    tm_store_close(a);
    tm_store_close(b);
}

/* ---- retention by age -------------------------------------------------------------- */

static void test_age_retention(void **state)
{
    (void)state;
    tm_store_options o = {.retain_ms = 300, .durability = TM_DURABILITY_NONE};
    tm_store *st = open_db(g_next_db++, &o);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    fill(st, "a", "r1", 3);
    tm_stream_bounds b;
    /* nobody appends: the writer's sweep trims the stream */
    long long deadline = now_ms() + 5000;
    do {
        nap_ms(100);
        assert_int_equal(tm_store_bounds(st, "a", "r1", &b), 0);
    } while (b.first_retained != 4 && now_ms() < deadline);
    assert_int_equal(b.first_retained, 4);
    assert_int_equal(b.head, 3);
    assert_string_equal(b.trimmed_epoch, tm_store_epoch(st));
    collected c = {0};
    assert_int_equal(tm_store_read(st, "a", "r1", 0, 10, collect, &c), TIDEMARK_ERANGE);
    assert_int_equal(c.n, 0);
    read_all(st, "a", "r1", 3, 10, &c);
    assert_int_equal(c.n, 0);
    char ep[TM_EPOCH_LEN + 1];
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 3, ep), 0); /* the trim record */
    assert_string_equal(ep, tm_store_epoch(st));
    assert_int_equal(tm_store_event_epoch(st, "a", "r1", 2, ep), TIDEMARK_ENOTFOUND);
    append_str(st, "a", "r1", "ev-4");
    read_all(st, "a", "r1", 3, 10, &c);
    expect_run(&c, 4, 1);
    tm_store_close(st);
}

/* ---- emit early -------------------------------------------------------------------- */

static void test_emit_early(void **state)
{
    (void)state;
    tm_store_options o = {.emit_early = 1, .durability = TM_DURABILITY_NONE};
    tm_store *st = open_db(g_next_db++, &o);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    for (int i = 1; i <= 50; i++) {
        char m[16];
        int n = snprintf(m, sizeof m, "ev-%d", i);
        assert_int_equal(tm_store_append(st, "a", "r1", m, (size_t)n, 0, NULL, NULL), 0);
        /* visible at once, durable or not, under the seq it will get */
        tm_stream_bounds b;
        assert_int_equal(tm_store_bounds(st, "a", "r1", &b), 0);
        assert_int_equal(b.assigned, (uint64_t)i);
        collected c = {0};
        read_all(st, "a", "r1", (uint64_t)i - 1, 10, &c);
        expect_run(&c, (uint64_t)i, 1);
    }
    assert_int_equal(tm_store_sync(st), 0);
    collected c = {0};
    read_all(st, "a", "r1", 0, 100, &c);
    expect_run(&c, 1, 50);
    tm_store_close(st);
}

/* ---- the server goes away ---------------------------------------------------------- */

static void note_status(void *ud, int status, uint64_t seq)
{
    (void)seq;
    *(int *)ud = status;
}

static void test_outage_and_restart(void **state)
{
    (void)state;
    int db = g_next_db++;
    tm_store *st = open_db(db, NULL);
    mk_session(st, "a");
    open_stream(st, "a", NULL, "r1");
    fill(st, "a", "r1", 2);
    char e1[TM_EPOCH_LEN + 1];
    snprintf(e1, sizeof e1, "%s", tm_store_epoch(st));

    stop_redis();
    /* during the outage every operation fails, and in bounded time */
    long long t0 = now_ms();
    int status = 1;
    assert_int_equal(tm_store_append(st, "a", "r1", "lost", 4, 0, note_status, &status), 0);
    assert_int_equal(tm_store_sync(st), 0); /* the append reports its own failure */
    assert_int_equal(status, TIDEMARK_EIO);
    /* a request record not waited for has only sync() to report through:
     * the dispatcher must not run a tool without it */
    tm_request_rec q = {.session = "a", .key = "i:9", .stream = "r1"};
    assert_int_equal(tm_store_request_begin(st, &q, 0), 0);
    assert_int_equal(tm_store_sync(st), TIDEMARK_EIO);
    assert_int_equal(tm_store_sync(st), 0); /* told once */
    tm_session_rec rec = {.id = "n"};
    assert_int_equal(tm_store_session_create(st, &rec), TIDEMARK_EIO);
    collected c = {0};
    assert_int_equal(tm_store_read(st, "a", "r1", 0, 10, collect, &c), TIDEMARK_EIO);
    tm_stream_bounds b;
    assert_int_equal(tm_store_bounds(st, "a", "r1", &b), TIDEMARK_EIO);
    assert_true(now_ms() - t0 < 15000);

    /* the same address, another server (nothing persisted) */
    assert_int_equal(start_redis(), 0);
    int rc = TIDEMARK_EIO;
    for (long long deadline = now_ms() + 10000; rc == TIDEMARK_EIO && now_ms() < deadline;) {
        rc = tm_store_session_create(st, &rec);
        if (rc == TIDEMARK_EIO)
            nap_ms(50);
    }
    assert_int_equal(rc, 0);
    /* a new server identity is a new writer generation */
    assert_string_not_equal(tm_store_epoch(st), e1);
    tm_session_rec got;
    assert_int_equal(tm_store_session_get(st, "a", &got), TIDEMARK_ENOTFOUND);
    open_stream(st, "n", NULL, "r1");
    append_str(st, "n", "r1", "ev-1");
    read_all(st, "n", "r1", 0, 10, &c);
    expect_run(&c, 1, 1);
    assert_string_equal(c.epoch[0], tm_store_epoch(st));
    assert_string_not_equal(c.epoch[0], e1);
    tm_store_close(st);
}

/* ---- a server still loading its dataset (issue 10, item 13) ---------------------- */

/* A front for the test's redis-server that, until `ready_at`, answers like a
 * Redis reading a large AOF: INFO and SELECT work, everything else gets
 * -LOADING. Then it proxies each new connection to the real server. */
typedef struct loading_front {
    int lfd, port;
    long long ready_at;
    atomic_int stop;
    pthread_t th;
} loading_front;

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* Answer one connection while "loading"; returns when the client hangs up. */
static void front_loading(int fd)
{
    redisReader *rd = redisReaderCreate();
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
        redisReaderFeed(rd, buf, (size_t)n);
        void *cmd = NULL;
        while (redisReaderGetReply(rd, &cmd) == REDIS_OK && cmd) {
            redisReply *c = cmd;
            const char *name = c->type == REDIS_REPLY_ARRAY && c->elements ? c->element[0]->str : "";
            if (strcasecmp(name, "INFO") == 0) {
                const char *info = "# Server\r\nrun_id:0123456789abcdef0123456789abcdef01234567\r\n";
                char hdr[32];
                int h = snprintf(hdr, sizeof hdr, "$%zu\r\n", strlen(info));
                send_all(fd, hdr, (size_t)h);
                send_all(fd, info, strlen(info));
                send_all(fd, "\r\n", 2);
            } else if (strcasecmp(name, "SELECT") == 0) {
                send_all(fd, "+OK\r\n", 5);
            } else {
                const char *e = "-LOADING Redis is loading the dataset in memory\r\n";
                send_all(fd, e, strlen(e));
            }
            freeReplyObject(cmd);
            cmd = NULL;
        }
    }
    redisReaderFree(rd);
}

/* Copy bytes both ways between a client and the real server. */
static void front_proxy(int fd)
{
    int up = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (up < 0 || connect(up, (struct sockaddr *)&a, sizeof a) != 0) {
        if (up >= 0)
            close(up);
        return;
    }
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = up, .events = POLLIN}};
    char buf[65536];
    for (;;) {
        if (poll(p, 2, 1000) < 0)
            break;
        int done = 0;
        for (int i = 0; i < 2 && !done; i++) {
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = recv(p[i].fd, buf, sizeof buf, 0);
            if (n <= 0)
                done = 1;
            else
                send_all(p[1 - i].fd, buf, (size_t)n);
        }
        if (done)
            break;
    }
    close(up);
}

static void *front_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    if (now_ms() < g_front_ready_at)
        front_loading(fd);
    else
        front_proxy(fd);
    close(fd);
    return NULL;
}

static void *front_main(void *arg)
{
    loading_front *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_t t;
        if (pthread_create(&t, NULL, front_conn, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
    return NULL;
}

static void front_start(loading_front *f, int loading_ms)
{
    memset(f, 0, sizeof *f);
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(f->lfd, 64), 0);
    assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &len), 0);
    f->port = ntohs(a.sin_port);
    g_front_ready_at = now_ms() + loading_ms;
    assert_int_equal(pthread_create(&f->th, NULL, front_main, f), 0);
}

static void front_stop(loading_front *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->th, NULL);
    close(f->lfd);
}

/* A node started while Redis loads its dataset waits for it, then works. */
static void test_waits_while_loading(void **state)
{
    (void)state;
    loading_front f;
    front_start(&f, 1500);
    char u[96];
    snprintf(u, sizeof u, "redis://127.0.0.1:%d/%d", f.port, g_next_db++);
    tm_store_options o = {.durability = TM_DURABILITY_PROCESS};
    tm_store *st = NULL;
    long long t0 = now_ms();
    assert_int_equal(tm_store_redis_open(u, &o, &st), 0);
    long long waited = now_ms() - t0;
    print_message("opened after %lld ms of -LOADING\n", waited);
    assert_true(waited >= 1000);
    tm_session_rec rec = {.id = "L", .protocol_version = "2025-11-25", .client = "{}",
                          .created_ms = 1, .last_seen_ms = 1};
    assert_int_equal(tm_store_session_create(st, &rec), 0);
    char r[TM_STREAM_MAX];
    assert_int_equal(tm_store_stream_open(st, "L", NULL, r), 0);
    assert_int_equal(tm_store_append(st, "L", r, "x", 1, 0, NULL, NULL), 0);
    assert_int_equal(tm_store_sync(st), 0);
    tm_store_close(st);
    /* Bounded: past ready_wait_ms the open fails, with a code of its own. */
    g_front_ready_at = now_ms() + 60000;
    o.ready_wait_ms = 500;
    t0 = now_ms();
    assert_int_equal(tm_store_redis_open(u, &o, &st), TIDEMARK_ETIMEDOUT);
    assert_true(now_ms() - t0 < 5000);
    front_stop(&f);
}

static void test_uris(void **state)
{
    (void)state;
    tm_store_options o = {.durability = TM_DURABILITY_NONE};
    tm_store *st = NULL;
    static const char *const bad[] = {"redis://", "redis://:6379", "redis://h:0", "redis://h:70000",
                                      "redis://h:1/x", "redis://[::1", "redis://h:12ab"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(tm_store_open(bad[i], &o, &st), TIDEMARK_EINVAL);
    char u[64];
    int closed = free_port();
    snprintf(u, sizeof u, "redis://127.0.0.1:%d", closed);
    long long t0 = now_ms();
    assert_int_equal(tm_store_open(u, &o, &st), TIDEMARK_EIO);
    assert_true(now_ms() - t0 < 5000);
    snprintf(u, sizeof u, "redis://127.0.0.1:%d/%d", g_port, g_next_db++);
    assert_int_equal(tm_store_open(u, &o, &st), 0);
    tm_store_close(st);
}

int main(void)
{
    if (!on_path("redis-server")) {
        fprintf(stderr, "test_store_redis: redis-server is not installed: skipped\n");
        return 77;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/tm-redis-test-XXXXXX");
    g_port = free_port();
    if (!mkdtemp(g_dir) || g_port <= 0 || start_redis() != 0) {
        fprintf(stderr, "test_store_redis: cannot start redis-server on port %d\n", g_port);
        stop_redis();
        return 1;
    }
    (void)memory_contract_main; /* its concurrency case is replaced below */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_create_get),
        cmocka_unit_test(test_session_touch),
        cmocka_unit_test(test_session_delete),
        cmocka_unit_test(test_stream_open_numbering),
        cmocka_unit_test(test_stream_g_reopen_keeps_seqs),
        cmocka_unit_test(test_append_seqs_cb_listener),
        cmocka_unit_test(test_append_final_closes),
        cmocka_unit_test(test_close_stream),
        cmocka_unit_test(test_read_order_and_limits),
        cmocka_unit_test(test_read_after_max_seq),
        cmocka_unit_test(test_bytes_exact),
        cmocka_unit_test(test_retention_trimming),
        cmocka_unit_test(test_retention_long_run),
        cmocka_unit_test(test_event_epoch_untrimmed),
        cmocka_unit_test(test_request_records),
        cmocka_unit_test(test_request_begin_get),
        cmocka_unit_test(test_request_complete),
        cmocka_unit_test(test_session_request_get),
        cmocka_unit_test(test_requests_unfinished),
        cmocka_unit_test(test_request_keys_any_bytes),
        cmocka_unit_test(test_request_claim),
        cmocka_unit_test(test_effect_rows),
        cmocka_unit_test(test_session_attrs),
        cmocka_unit_test(test_sessions_with_attr),
        cmocka_unit_test(test_effects),
        cmocka_unit_test(test_effect_once_across_nodes),
        cmocka_unit_test(test_late_begin),
        cmocka_unit_test(test_sessions_each_pages),
        cmocka_unit_test(test_sessions_expire),
        cmocka_unit_test(test_concurrent_pipelined),
        cmocka_unit_test(test_lost_replies_no_duplicates),
        cmocka_unit_test(test_two_nodes),
        cmocka_unit_test(test_queued_open_close),
        cmocka_unit_test(test_age_retention),
        cmocka_unit_test(test_emit_early),
        cmocka_unit_test(test_uris),
        cmocka_unit_test(test_waits_while_loading),
        cmocka_unit_test(test_outage_and_restart), /* last: restarts the server */
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    stop_redis();
    rmdir(g_dir);
    return failed;
}
