/*
 * tidemark-bench - how fast is the durable event log, and how fast is a resume?
 *
 * One invocation measures, at both durability levels (power, process):
 *  1. the raw ceiling: batched INSERTs into a table identical to tm_events,
 *     through the bench's own sqlite3 connection with the store's PRAGMAs;
 *  2. durable events/s through the SQLite store (group commit), from 1 and
 *     from T threads (T streams), each with a bounded window of in-flight
 *     appends, compared with (1) at the batch size the store achieved;
 *  3. append -> durable latency (p50/p99), loaded and lightly loaded, with a
 *     raw single-row commit as the baseline;
 *  4. durable events/s through the Redis store from 1 and from 3 node
 *     processes sharing the bench's own redis-server (appendfsync always for
 *     power, everysec for process), each node with the T-stream load of (2),
 *     in the same repetitions as (2) so the SQLite row compares like with like;
 * and, once, 5. resume latency over HTTP against a real tidemark-server for
 * N = 10 .. 10,000 replayed events on SQLite, and N = 100 and 10,000 on Redis;
 * 6. with the same server, tools/call round trips in the two eras: a legacy
 * session's call (answered on its SSE stream) and a 2026-07-28 call without
 * a session (its own store session, answered as JSON), without and with an
 * idempotency key, interleaved so drift hits all three alike.
 *
 * Every measurement runs --reps times and reports medians, because the
 * machine is shared; baselines are measured in the same invocation so the
 * ratios compare like with like. Targets are printed, never enforced: the
 * exit status only says whether every measurement produced a valid result
 * (events counted, all durable, resumes complete and continuous).
 */
#include "base/buf.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/metrics.h"
#include "common/event_id.h"
#include "log/store.h"
#include "transport/sse_parser.h"
#include "tidemark/tidemark.h"
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS 50
#define MAX_THREADS 256
#define PAYLOAD_LEN 200           /* bytes per event: a typical progress notification */
#define RAW_REF_BATCH 256         /* fixed-batch reference for the raw ceiling */
#define TARGET_RATIO 0.70         /* store/raw at T streams (issue target) */
#define TARGET_RESUME_BASE_US 1000.0
#define TARGET_RESUME_PER_EVENT_US 3.0
#define LIGHT_CAP_MS 2000         /* a lightly loaded run stops after this long */
#define SERVER_START_MS 10000
#define SERVER_STOP_MS 10000
#define REDIS_NODES 3             /* the multi-node run */
#define REDIS_NODES_MAX 8
#define REDIS_START_MS 10000      /* redis-server must answer PING by then */
#define REDIS_STOP_MS 10000       /* then SIGKILL */
#define NODE_READY_MS 60000       /* a node opens its store and warms up by then */
#define NODE_RUN_MS 900000        /* a node's run ends by then, or it is killed */

static const uint64_t resume_ns[] = {10, 100, 1000, 10000};
#define NRESUME (sizeof resume_ns / sizeof resume_ns[0])
static const uint64_t redis_resume_ns[] = {100, 10000};
#define NRESUME_REDIS (sizeof redis_resume_ns / sizeof redis_resume_ns[0])

typedef struct bench_opts {
    int quick;
    uint64_t events;    /* durable appends per throughput run */
    unsigned reps;
    unsigned threads;   /* appenders (= streams) in the concurrent run */
    unsigned window;    /* in-flight appends per appender */
    uint64_t light;     /* events in a lightly loaded run (window 1) */
    unsigned resume_reps;
    unsigned calls;     /* timed tools/call round trips per era mode */
    const char *dir;    /* parent of the scratch folder */
    char server[PATH_MAX];
    int skip_resume;
    int skip_redis;
    uint64_t redis_events;       /* durable appends per node in a Redis run */
    char redis_server[PATH_MAX]; /* "" when the Redis section is skipped */
    char redis_skipped[160];     /* why it is skipped */
} bench_opts;

/* ---- small helpers ---------------------------------------------------------- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile (permille: 500 = median) of v[0..n), sorting v. */
static double pct_double(double *v, size_t n, unsigned permille)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t k = (n * permille + 999) / 1000;
    return v[k ? k - 1 : 0];
}

static double median(const double *v, size_t n)
{
    double tmp[MAX_REPS];
    if (n > MAX_REPS)
        n = MAX_REPS;
    memcpy(tmp, v, n * sizeof *v);
    return pct_double(tmp, n, 500);
}

static uint32_t pct_u32_sorted(const uint32_t *v, size_t n, unsigned permille)
{
    if (n == 0)
        return 0;
    size_t k = (n * permille + 999) / 1000;
    return v[k ? k - 1 : 0];
}

/* A progress notification padded to exactly PAYLOAD_LEN bytes, so the store
 * and the raw ceiling write the same bytes. */
static void make_payload(char out[PAYLOAD_LEN + 1])
{
    static const char head[] = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\","
                               "\"params\":{\"progressToken\":\"bench\",\"progress\":123456,"
                               "\"total\":1000000,\"message\":\"";
    static const char tail[] = "\"}}";
    size_t pad = PAYLOAD_LEN - (sizeof head - 1) - (sizeof tail - 1);
    memcpy(out, head, sizeof head - 1);
    memset(out + sizeof head - 1, 'x', pad);
    memcpy(out + sizeof head - 1 + pad, tail, sizeof tail);
}

/* dir/name into out. TIDEMARK_ERANGE when it does not fit. */
static int join_path(char *out, size_t n, const char *dir, const char *name)
{
    int k = snprintf(out, n, "%s/%s", dir, name);
    return k < 0 || (size_t)k >= n ? TIDEMARK_ERANGE : 0;
}

/* A database and every file SQLite and the store keep beside it. */
static void remove_db(const char *path)
{
    static const char *const suffix[] = {"-wal", "-shm", "-journal", ".head", ".lock"};
    char p[PATH_MAX + 16];
    unlink(path);
    for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
        snprintf(p, sizeof p, "%s%s", path, suffix[i]);
        unlink(p);
    }
}

static const char *dur_name(tm_durability d)
{
    return d == TM_DURABILITY_PROCESS ? "process" : "power";
}

/* ---- 1. the raw ceiling ------------------------------------------------------ */

/* Same table and PRAGMAs as store_sqlite.c, so the only difference left is
 * the store's own work (queue, callbacks, stream rows, tail cache). Like the
 * store's writer, the raw loop never checkpoints inside its commits (the
 * store checkpoints on another thread; the raw loop not at all), so the
 * ceiling is an upper bound. */
static const char raw_table_sql[] =
    "CREATE TABLE tm_events(sid INTEGER NOT NULL, seq INTEGER NOT NULL,"
    " epoch INTEGER NOT NULL, created_ms INTEGER NOT NULL, data BLOB NOT NULL,"
    " PRIMARY KEY(sid, seq)) WITHOUT ROWID";

static int raw_exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "tidemark-bench: sqlite: %s: %s\n", sql, err ? err : "?");
        sqlite3_free(err);
        return TIDEMARK_EIO;
    }
    return 0;
}

static int raw_open(const char *path, tm_durability d, sqlite3 **out, sqlite3_stmt **ins)
{
    remove_db(path);
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        fprintf(stderr, "tidemark-bench: cannot open %s\n", path);
        sqlite3_close(db);
        return TIDEMARK_EIO;
    }
    char pragmas[200];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=%s; PRAGMA foreign_keys=OFF;"
             " PRAGMA wal_autocheckpoint=0;",
             d == TM_DURABILITY_PROCESS ? "NORMAL" : "FULL");
    if (raw_exec(db, pragmas) || raw_exec(db, raw_table_sql) ||
        sqlite3_prepare_v2(db,
                           "INSERT INTO tm_events(sid, seq, epoch, created_ms, data) "
                           "VALUES(?1, ?2, ?3, ?4, ?5)",
                           -1, ins, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        remove_db(path);
        return TIDEMARK_EIO;
    }
    *out = db;
    return 0;
}

static void raw_close(const char *path, sqlite3 *db, sqlite3_stmt *ins)
{
    sqlite3_finalize(ins);
    sqlite3_close(db);
    remove_db(path);
}

static int raw_insert(sqlite3 *db, sqlite3_stmt *ins, int64_t sid, int64_t seq, const char *payload)
{
    sqlite3_reset(ins);
    sqlite3_bind_int64(ins, 1, sid);
    sqlite3_bind_int64(ins, 2, seq);
    sqlite3_bind_int64(ins, 3, 1);
    sqlite3_bind_int64(ins, 4, tm_wall_ms());
    sqlite3_bind_blob(ins, 5, payload, PAYLOAD_LEN, SQLITE_STATIC);
    if (sqlite3_step(ins) != SQLITE_DONE) {
        fprintf(stderr, "tidemark-bench: insert: %s\n", sqlite3_errmsg(db));
        return TIDEMARK_EIO;
    }
    return 0;
}

/* n rows, batch rows per transaction, over nstreams sids. OUT eps.
 * Within a transaction each stream's rows are contiguous, as in the store's
 * queue, where every appender's burst lands in one piece; the rotation by
 * transaction spreads rows over all streams when batch < nstreams. */
static int raw_ceiling(const char *path, tm_durability d, unsigned nstreams, unsigned batch,
                       uint64_t n, const char *payload, double *eps)
{
    *eps = 0;
    if (batch == 0)
        batch = 1;
    int64_t *seq = calloc(nstreams, sizeof *seq);
    if (!seq)
        return TIDEMARK_ENOMEM;
    sqlite3 *db;
    sqlite3_stmt *ins;
    int rc = raw_open(path, d, &db, &ins);
    if (rc) {
        free(seq);
        return rc;
    }
    int64_t t0 = now_ns();
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        uint64_t j = i % batch, txn = i / batch;
        unsigned s = (unsigned)((j * nstreams / batch + txn) % nstreams);
        if (j == 0)
            rc = raw_exec(db, "BEGIN IMMEDIATE");
        if (rc == 0)
            rc = raw_insert(db, ins, (int64_t)s + 1, ++seq[s], payload);
        if (rc == 0 && (j + 1 == batch || i + 1 == n))
            rc = raw_exec(db, "COMMIT");
    }
    int64_t t1 = now_ns();
    raw_close(path, db, ins);
    free(seq);
    *eps = rc == 0 && t1 > t0 ? (double)n * 1e9 / (double)(t1 - t0) : 0;
    return rc;
}

/* One-row transactions, each timed: the floor under a lone append's
 * latency. OUT p50/p99 in microseconds. */
static int raw_commit_latency(const char *path, tm_durability d, uint64_t n, const char *payload,
                              double *p50, double *p99)
{
    sqlite3 *db;
    sqlite3_stmt *ins;
    int rc = raw_open(path, d, &db, &ins);
    if (rc)
        return rc;
    uint32_t *lat = calloc(n ? n : 1, sizeof *lat);
    if (!lat) {
        raw_close(path, db, ins);
        return TIDEMARK_ENOMEM;
    }
    uint64_t done = 0;
    int64_t deadline = now_ns() + (int64_t)LIGHT_CAP_MS * 1000000;
    while (done < n && rc == 0) {
        int64_t t0 = now_ns();
        rc = raw_exec(db, "BEGIN IMMEDIATE");
        if (rc == 0)
            rc = raw_insert(db, ins, 1, (int64_t)done + 1, payload);
        if (rc == 0)
            rc = raw_exec(db, "COMMIT");
        int64_t t1 = now_ns();
        lat[done++] = (uint32_t)((t1 - t0) / 1000);
        if (t1 > deadline && done >= 10)
            break;
    }
    raw_close(path, db, ins);
    qsort(lat, done, sizeof *lat, cmp_u32);
    *p50 = pct_u32_sorted(lat, done, 500);
    *p99 = pct_u32_sorted(lat, done, 990);
    free(lat);
    return rc;
}

/* ---- 2./3. through the store ---------------------------------------------------- */

typedef struct appender appender;

/* One append in flight: ud of its callback, and where its latency lands. */
typedef struct evslot {
    appender *a;
    int64_t t0;
    uint32_t lat_us;
} evslot;

/* Holds the appenders until all exist, so they start together and the
 * clock measures them all. */
typedef struct start_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open, abort;
} start_gate;

struct appender {
    tm_store *st;
    const char *session;
    char stream[TM_STREAM_MAX];
    const char *payload;
    unsigned window;
    uint64_t n;          /* appends to make */
    uint64_t issued;     /* appends made (fewer than n after the deadline) */
    int64_t deadline;    /* 0, or stop issuing after this (monotonic ns) */
    evslot *slots;       /* n of them */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned inflight;
    int waiting;         /* the appender sleeps on cv: signal it */
    uint64_t done, failed;
    int append_rc;       /* first error of tm_store_append itself */
    start_gate *gate;
};

/* Runs on the store's writer thread: keep it short, it delays the next
 * group commit. */
static void on_durable(void *ud, int status, uint64_t seq)
{
    (void)seq;
    evslot *e = ud;
    appender *a = e->a;
    int64_t dt = now_ns() - e->t0;
    e->lat_us = dt > 0 ? (uint32_t)(dt / 1000) : 0;
    pthread_mutex_lock(&a->mu);
    if (status == 0)
        a->done++;
    else
        a->failed++;
    a->inflight--;
    if (a->waiting)
        pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static void *appender_main(void *arg)
{
    appender *a = arg;
    start_gate *g = a->gate;
    pthread_mutex_lock(&g->mu);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    int abort_run = g->abort;
    pthread_mutex_unlock(&g->mu);
    for (uint64_t i = 0; i < a->n && !abort_run; i++) {
        pthread_mutex_lock(&a->mu);
        while (a->inflight >= a->window) {
            a->waiting = 1;
            pthread_cond_wait(&a->cv, &a->mu);
            a->waiting = 0;
        }
        a->inflight++;
        pthread_mutex_unlock(&a->mu);
        evslot *e = &a->slots[i];
        e->a = a;
        e->t0 = now_ns(); /* before the call: the callback may run before it returns */
        if (a->deadline && i >= 10 && e->t0 > a->deadline) {
            pthread_mutex_lock(&a->mu);
            a->inflight--;
            pthread_mutex_unlock(&a->mu);
            break;
        }
        int rc = tm_store_append(a->st, a->session, a->stream, a->payload, PAYLOAD_LEN, 0,
                                 on_durable, e);
        if (rc) {
            pthread_mutex_lock(&a->mu);
            a->inflight--;
            a->append_rc = rc;
            pthread_mutex_unlock(&a->mu);
            break;
        }
        a->issued = i + 1;
    }
    pthread_mutex_lock(&a->mu);
    while (a->inflight > 0) {
        a->waiting = 1;
        pthread_cond_wait(&a->cv, &a->mu);
        a->waiting = 0;
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

typedef struct store_result {
    double eps;        /* durable events/s */
    double batch;      /* mean operations per group commit */
    double p50, p99;   /* append -> durable, microseconds */
    uint64_t durable;  /* events confirmed durable (status 0) */
} store_result;

/* The store exposes its group-commit sizes only as a metric: read the running
 * sum and count of tidemark_commit_batch_size from the Prometheus text. */
static int commit_batch_totals(tm_metrics *reg, double *sum, double *count)
{
    tm_buf b;
    tm_buf_init(&b, 1u << 20);
    int rc = tm_metrics_render(reg, &b);
    const char *s = rc == 0 ? strstr(b.data, "\ntidemark_commit_batch_size_sum ") : NULL;
    const char *c = rc == 0 ? strstr(b.data, "\ntidemark_commit_batch_size_count ") : NULL;
    if (s && c) {
        *sum = strtod(strchr(s + 1, ' ') + 1, NULL);
        *count = strtod(strchr(c + 1, ' ') + 1, NULL);
    } else {
        fprintf(stderr, "tidemark-bench: commit batch metric not found\n");
        rc = TIDEMARK_EIO;
    }
    tm_buf_free(&b);
    return rc;
}

static void warm_cb(void *ud, int status, uint64_t seq)
{
    (void)seq;
    appender *a = ud;
    pthread_mutex_lock(&a->mu);
    a->failed += status != 0;
    a->inflight = 0;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* Append one event to every stream and wait until all are durable: a
 * barrier behind session and stream creation (queued asynchronously), so
 * the measured interval and the batch metric see appends only. */
static int warm_up(appender *as, unsigned nthreads)
{
    int rc = 0;
    unsigned queued = 0;
    for (; queued < nthreads; queued++) {
        appender *a = &as[queued];
        pthread_mutex_lock(&a->mu);
        a->inflight = 1;
        pthread_mutex_unlock(&a->mu);
        rc = tm_store_append(a->st, a->session, a->stream, a->payload, PAYLOAD_LEN, 0, warm_cb, a);
        if (rc) {
            a->inflight = 0;
            break;
        }
    }
    for (unsigned t = 0; t < queued; t++) {
        pthread_mutex_lock(&as[t].mu);
        while (as[t].inflight)
            pthread_cond_wait(&as[t].cv, &as[t].mu);
        if (as[t].failed && !rc)
            rc = TIDEMARK_EIO;
        as[t].failed = 0;
        pthread_mutex_unlock(&as[t].mu);
    }
    return rc;
}

/* Start the appenders, open the gate, wait for all of them. OUT t_start
 * (the gate opened: the first append) and t_end (all joined: the last
 * durable callback ran), CLOCK_MONOTONIC ns, comparable across processes. */
static int run_appenders(appender *as, unsigned nthreads, int64_t *t_start, int64_t *t_end)
{
    start_gate g = {.open = 0, .abort = 0};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    pthread_t *th = calloc(nthreads, sizeof *th);
    unsigned started = 0;
    if (th)
        for (; started < nthreads; started++) {
            as[started].gate = &g;
            if (pthread_create(&th[started], NULL, appender_main, &as[started]) != 0)
                break;
        }
    *t_start = now_ns();
    pthread_mutex_lock(&g.mu);
    g.open = 1;
    g.abort = started < nthreads; /* a partial run would measure something else */
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    for (unsigned t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    *t_end = now_ns();
    free(th);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
    if (started < nthreads) {
        fprintf(stderr, "tidemark-bench: cannot start %u appender threads\n", nthreads);
        return TIDEMARK_ENOMEM;
    }
    return 0;
}

/* Check the run and fill res: every issued append durable, every stream's
 * durable head where it should be, then rate and latency percentiles. */
static int collect(tm_store *st, const char *sid, appender *as, unsigned nthreads,
                   int64_t elapsed_ns, store_result *res)
{
    int rc = 0;
    uint64_t issued = 0, failed = 0;
    for (unsigned t = 0; t < nthreads; t++) {
        appender *a = &as[t];
        res->durable += a->done;
        failed += a->failed;
        issued += a->issued;
        if (a->append_rc && !rc) {
            fprintf(stderr, "tidemark-bench: append: %s\n", tidemark_strerror(a->append_rc));
            rc = a->append_rc;
        }
        /* Seqs are dense from 1 and the warm-up took seq 1. */
        tm_stream_bounds b;
        memset(&b, 0, sizeof b);
        if (tm_store_bounds(st, sid, a->stream, &b) != 0 || b.head != a->issued + 1) {
            fprintf(stderr, "tidemark-bench: stream %s: durable head %llu, expected %llu\n",
                    a->stream, (unsigned long long)b.head, (unsigned long long)a->issued + 1);
            if (!rc)
                rc = TIDEMARK_EIO;
        }
    }
    if ((failed || res->durable != issued || issued == 0) && !rc) {
        fprintf(stderr, "tidemark-bench: %llu of %llu appends durable, %llu failed\n",
                (unsigned long long)res->durable, (unsigned long long)issued,
                (unsigned long long)failed);
        rc = TIDEMARK_EIO;
    }
    res->eps = elapsed_ns > 0 ? (double)res->durable * 1e9 / (double)elapsed_ns : 0;
    uint32_t *lat = malloc((issued ? issued : 1) * sizeof *lat);
    if (!lat)
        return rc ? rc : TIDEMARK_ENOMEM;
    size_t k = 0;
    for (unsigned t = 0; t < nthreads; t++)
        for (uint64_t i = 0; i < as[t].issued; i++)
            lat[k++] = as[t].slots[i].lat_us;
    qsort(lat, k, sizeof *lat, cmp_u32);
    res->p50 = pct_u32_sorted(lat, k, 500);
    res->p99 = pct_u32_sorted(lat, k, 990);
    free(lat);
    return rc;
}

/* One node's load: a session with nthreads streams on st, n appends spread
 * over them, at most window in flight per stream. */
typedef struct node_load {
    tm_store *st;
    tm_metrics *reg; /* the store's (commit batch sizes) */
    char sid[64];
    appender *as;
    evslot *slots;
    unsigned nthreads;
    double bsum0, bcnt0;
} node_load;

/* Create the session and streams and warm each stream up (one durable
 * event), so the measured interval sees appends only. Call load_free()
 * whatever it returns, after tm_store_close(). */
static int load_prepare(node_load *l, tm_store *st, tm_metrics *reg, unsigned nthreads,
                        unsigned window, uint64_t n, const char *payload)
{
    memset(l, 0, sizeof *l);
    l->st = st;
    l->reg = reg;
    /* Unique across the node processes sharing one Redis. */
    snprintf(l->sid, sizeof l->sid, "bench-%ld-%lld", (long)getpid(), (long long)tm_wall_ms());
    tm_session_rec rec = {.id = l->sid, .protocol_version = TIDEMARK_PROTOCOL_LATEST,
                          .client = "{}", .created_ms = tm_wall_ms(), .last_seen_ms = tm_wall_ms()};
    l->as = calloc(nthreads, sizeof *l->as);
    l->slots = calloc(n, sizeof *l->slots);
    if (!l->as || !l->slots)
        return TIDEMARK_ENOMEM;
    l->nthreads = nthreads;
    for (unsigned t = 0; t < nthreads; t++) {
        pthread_mutex_init(&l->as[t].mu, NULL);
        pthread_cond_init(&l->as[t].cv, NULL);
    }
    int rc = tm_store_session_create(st, &rec);
    if (rc) {
        fprintf(stderr, "tidemark-bench: session_create: %s\n", tidemark_strerror(rc));
        return rc;
    }
    uint64_t off = 0;
    for (unsigned t = 0; t < nthreads; t++) {
        appender *a = &l->as[t];
        a->st = st;
        a->session = l->sid;
        a->payload = payload;
        a->window = window;
        a->n = n / nthreads + (t < n % nthreads);
        a->slots = l->slots + off;
        off += a->n;
        if ((rc = tm_store_stream_open(st, l->sid, NULL, a->stream)) != 0) {
            fprintf(stderr, "tidemark-bench: stream_open: %s\n", tidemark_strerror(rc));
            return rc;
        }
    }
    if ((rc = warm_up(l->as, nthreads)) != 0) {
        fprintf(stderr, "tidemark-bench: warm-up append failed: %s\n", tidemark_strerror(rc));
        return rc;
    }
    return commit_batch_totals(l->reg, &l->bsum0, &l->bcnt0);
}

/* Run the appenders and check the result. With cap_ms, they stop issuing
 * after that long. OUT t_start, t_end (see run_appenders), res. */
static int load_run(node_load *l, int64_t cap_ms, int64_t *t_start, int64_t *t_end,
                    store_result *res)
{
    memset(res, 0, sizeof *res);
    *t_start = *t_end = 0;
    if (cap_ms > 0)
        for (unsigned t = 0; t < l->nthreads; t++)
            l->as[t].deadline = now_ns() + cap_ms * 1000000;
    int rc = run_appenders(l->as, l->nthreads, t_start, t_end);
    double bsum1 = 0, bcnt1 = 0;
    if (rc == 0)
        rc = commit_batch_totals(l->reg, &bsum1, &bcnt1);
    if (rc)
        return rc;
    res->batch = bcnt1 > l->bcnt0 ? (bsum1 - l->bsum0) / (bcnt1 - l->bcnt0) : 0;
    return collect(l->st, l->sid, l->as, l->nthreads, *t_end - *t_start, res);
}

/* After tm_store_close(): every callback has run. */
static void load_free(node_load *l)
{
    if (l->as)
        for (unsigned t = 0; t < l->nthreads; t++) {
            pthread_mutex_destroy(&l->as[t].mu);
            pthread_cond_destroy(&l->as[t].cv);
        }
    free(l->slots);
    free(l->as);
    memset(l, 0, sizeof *l);
}

/* n durable appends from nthreads appenders, one stream each, window
 * in-flight appends per appender, into a fresh SQLite database at path.
 * With cap_ms, the appenders stop issuing after that long. */
static int store_run(const char *path, tm_durability d, unsigned nthreads, unsigned window,
                     uint64_t n, int64_t cap_ms, const char *payload, store_result *res)
{
    memset(res, 0, sizeof *res);
    remove_db(path);
    char uri[PATH_MAX + 8];
    snprintf(uri, sizeof uri, "sqlite:%s", path);
    tm_metrics *reg = tm_metrics_new();
    tm_store_options opts = {.durability = d, .metrics = reg};
    tm_store *st = NULL;
    int rc = reg ? tm_store_open(uri, &opts, &st) : TIDEMARK_ENOMEM;
    if (rc) {
        fprintf(stderr, "tidemark-bench: cannot open store %s: %s\n", uri, tidemark_strerror(rc));
        tm_metrics_free(reg);
        return rc;
    }
    node_load l;
    int64_t t0, t1;
    rc = load_prepare(&l, st, reg, nthreads, window, n, payload);
    if (rc == 0)
        rc = load_run(&l, cap_ms, &t0, &t1, res);
    tm_store_close(st); /* after every callback: close drains the writer */
    load_free(&l);
    tm_metrics_free(reg);
    remove_db(path);
    return rc;
}

/* ---- 5. resume over HTTP ---------------------------------------------------------- */

typedef struct server_proc {
    pid_t pid;
    int out_fd;
    char url[256];
    char log[PATH_MAX];
} server_proc;

static void show_log_tail(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[512];
    fprintf(stderr, "---- server log (%s) ----\n", path);
    int n = 0;
    while (fgets(line, sizeof line, f) && n++ < 40)
        fputs(line, stderr);
    fclose(f);
}

/* Reap the server: SIGTERM, then SIGKILL after SERVER_STOP_MS. Returns its
 * exit status (0 for a clean shutdown) or -1. */
static int server_stop(server_proc *s)
{
    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    int status = 0;
    pid_t r = 0;
    for (int waited = 0; waited < SERVER_STOP_MS; waited += 10) {
        r = waitpid(s->pid, &status, WNOHANG);
        if (r != 0)
            break;
        sleep_ms(10);
    }
    if (r == 0) {
        fprintf(stderr, "tidemark-bench: server ignored SIGTERM; killing it\n");
        kill(s->pid, SIGKILL);
        r = waitpid(s->pid, &status, 0);
    }
    s->pid = -1;
    if (s->out_fd >= 0)
        close(s->out_fd);
    s->out_fd = -1;
    if (r < 0 || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* Start tidemark-server on store (a URI) and a free loopback port; its URL
 * is the line it prints on stdout. */
static int server_start(const char *bin, const char *dir, const char *store, server_proc *s)
{
    memset(s, 0, sizeof *s);
    s->pid = -1;
    s->out_fd = -1;
    if (join_path(s->log, sizeof s->log, dir, "server.log"))
        return TIDEMARK_ERANGE;
    char *argv[] = {(char *)bin, "--store", (char *)store, "--durability", "process", "--listen",
                    "127.0.0.1:0", "--log-level", "warn", NULL};
    int p[2];
    if (pipe(p) != 0)
        return TIDEMARK_EIO;
    int logfd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (logfd < 0) {
        close(p[0]);
        close(p[1]);
        return TIDEMARK_EIO;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        close(logfd);
        return TIDEMARK_EIO;
    }
    if (pid == 0) { /* only async-signal-safe calls until exec */
        /* A bench killed mid-run must not leave a server behind. */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
            _exit(127);
        dup2(p[1], STDOUT_FILENO);
        dup2(logfd, STDERR_FILENO);
        close(p[0]);
        close(p[1]);
        execv(bin, argv);
        _exit(127);
    }
    close(p[1]);
    close(logfd);
    s->pid = pid;
    s->out_fd = p[0];
    char line[512];
    size_t len = 0;
    int64_t deadline = now_ns() + (int64_t)SERVER_START_MS * 1000000;
    for (;;) {
        char *nl = memchr(line, '\n', len);
        if (nl) {
            *nl = '\0';
            if (sscanf(line, "listening on %255s", s->url) == 1)
                return 0;
            /* Not the line we want: drop it and keep reading. */
            len -= (size_t)(nl + 1 - line);
            memmove(line, nl + 1, len);
            continue;
        }
        int64_t left = (deadline - now_ns()) / 1000000;
        struct pollfd pf = {s->out_fd, POLLIN, 0};
        if (left <= 0 || len == sizeof line - 1 || poll(&pf, 1, (int)left) <= 0)
            break;
        ssize_t r = read(s->out_fd, line + len, sizeof line - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    fprintf(stderr, "tidemark-bench: %s did not report its port\n", bin);
    server_stop(s);
    show_log_tail(s->log);
    return TIDEMARK_EIO;
}

/* Counts the events (blocks with their own id) of an SSE body as it
 * arrives, read with the library's parser, and checks their continuity:
 * seqs consecutive, the last one the response. */
typedef struct sse_count {
    tm_sse_parser *parser;
    uint64_t events;
    char first_id[TM_EVENT_ID_MAX];
    uint64_t first_seq, last_seq;
    int discontinuous;
    int last_is_result;
} sse_count;

static void sse_block(sse_count *c, const char *id, const char *data, size_t len)
{
    tm_event_id eid;
    uint64_t seq = tm_event_id_parse(id, &eid) == 0 ? eid.seq : 0;
    if (c->events == 0) {
        snprintf(c->first_id, sizeof c->first_id, "%s", id);
        c->first_seq = seq;
    } else if (seq != c->last_seq + 1) {
        c->discontinuous = 1;
    }
    c->last_seq = seq;
    c->events++;
    /* The final response is the only event with a JSON-RPC result. */
    c->last_is_result = data && memmem(data, len, "\"result\"", 8) != NULL;
}

static int sse_on_event(void *ud, const tm_sse_event *ev)
{
    if (ev->own_id)
        sse_block(ud, ev->id, ev->data, ev->data_len);
    return 0;
}

static void sse_on_id_only(void *ud, const char *id) { sse_block(ud, id, NULL, 0); }

static void sse_reset(sse_count *c)
{
    tm_sse_parser_reset(c->parser);
    c->first_id[0] = '\0';
    c->events = c->first_seq = c->last_seq = 0;
    c->discontinuous = c->last_is_result = 0;
}

typedef struct http {
    CURL *h;
    char url[256];
    char session[128];
    char version[32];
    char errbuf[CURL_ERROR_SIZE];
    int is_sse;
    tm_buf body;     /* a JSON response */
    sse_count sse;   /* an SSE response */
    int overflow;
    long status;
    long next_id;
    char extra[2][192]; /* more request headers ("Name: value"), "" for none */
} http;

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    http *c = ud;
    size_t n = size * nmemb;
    static const char sid[] = "mcp-session-id:", ct[] = "content-type:";
    if (n > sizeof sid - 1 && strncasecmp(p, sid, sizeof sid - 1) == 0) {
        size_t o = sizeof sid - 1;
        while (o < n && p[o] == ' ')
            o++;
        size_t k = 0;
        while (o + k < n && p[o + k] != '\r' && p[o + k] != '\n' && k < sizeof c->session - 1)
            k++;
        memcpy(c->session, p + o, k);
        c->session[k] = '\0';
    } else if (n > sizeof ct - 1 && strncasecmp(p, ct, sizeof ct - 1) == 0) {
        c->is_sse = memmem(p, n, "text/event-stream", 17) != NULL;
    }
    return n;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    http *c = ud;
    size_t n = size * nmemb;
    int rc = c->is_sse ? tm_sse_parser_feed(c->sse.parser, p, n) : tm_buf_add(&c->body, p, n);
    if (rc)
        c->overflow = 1;
    return n;
}

/* One request on the reused handle. body NULL means GET; last_id adds
 * Last-Event-ID. OUT c->status, c->body or c->sse. */
static int http_do(http *c, const char *body, const char *last_id)
{
    struct curl_slist *hs = NULL;
    char line[256];
    hs = curl_slist_append(hs, body ? "Accept: application/json, text/event-stream"
                                    : "Accept: text/event-stream");
    if (body)
        hs = curl_slist_append(hs, "Content-Type: application/json");
    if (c->session[0]) {
        snprintf(line, sizeof line, "Mcp-Session-Id: %s", c->session);
        hs = curl_slist_append(hs, line);
    }
    if (c->version[0]) {
        snprintf(line, sizeof line, "MCP-Protocol-Version: %s", c->version);
        hs = curl_slist_append(hs, line);
    }
    if (last_id) {
        snprintf(line, sizeof line, "Last-Event-ID: %s", last_id);
        hs = curl_slist_append(hs, line);
    }
    for (size_t i = 0; i < sizeof c->extra / sizeof c->extra[0]; i++)
        if (c->extra[i][0])
            hs = curl_slist_append(hs, c->extra[i]);
    tm_buf_reset(&c->body);
    sse_reset(&c->sse);
    c->is_sse = 0;
    c->overflow = 0;
    c->status = 0;
    curl_easy_setopt(c->h, CURLOPT_URL, c->url);
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, hs);
    if (body) {
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body);
    } else {
        curl_easy_setopt(c->h, CURLOPT_HTTPGET, 1L);
    }
    CURLcode cc = curl_easy_perform(c->h);
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &c->status);
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hs);
    if (cc != CURLE_OK) {
        fprintf(stderr, "tidemark-bench: HTTP %s: %s\n", body ? "POST" : "GET",
                c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc));
        return TIDEMARK_EIO;
    }
    if (c->overflow) {
        fprintf(stderr, "tidemark-bench: response too large\n");
        return TIDEMARK_ERANGE;
    }
    return 0;
}

static int http_init(http *c, const char *url)
{
    memset(c, 0, sizeof *c);
    snprintf(c->url, sizeof c->url, "%s", url);
    tm_buf_init(&c->body, 1u << 20);
    c->next_id = 1;
    const tm_sse_callbacks cb = {.on_event = sse_on_event, .on_id_only = sse_on_id_only};
    c->h = curl_easy_init();
    if (!c->h || tm_sse_parser_new(0, 0, &cb, &c->sse, &c->sse.parser) != 0)
        return TIDEMARK_ENOMEM;
    curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->h, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(c->h, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(c->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c->h, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, c);
    return 0;
}

static void http_free(http *c)
{
    if (c->h)
        curl_easy_cleanup(c->h);
    tm_buf_free(&c->body);
    tm_sse_parser_free(c->sse.parser);
}

/* initialize + notifications/initialized. */
static int mcp_connect(http *c)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"initialize\",\"params\":{"
             "\"protocolVersion\":\"%s\",\"capabilities\":{},"
             "\"clientInfo\":{\"name\":\"tidemark-bench\",\"version\":\"%s\"}}}",
             c->next_id++, TIDEMARK_PROTOCOL_LATEST, TIDEMARK_VERSION);
    int rc = http_do(c, body, NULL);
    if (rc)
        return rc;
    if (c->status != 200 || c->is_sse || !c->session[0] || !c->body.data) {
        fprintf(stderr, "tidemark-bench: initialize: HTTP %ld%s%s\n", c->status,
                c->session[0] ? "" : ", no Mcp-Session-Id",
                c->is_sse ? ", SSE answer (the bench reads JSON only)" : "");
        return TIDEMARK_EPROTO;
    }
    json_t *j = json_loads(c->body.data, 0, NULL);
    const char *v = json_string_value(json_object_get(json_object_get(j, "result"), "protocolVersion"));
    snprintf(c->version, sizeof c->version, "%s", v ? v : "");
    json_decref(j);
    if (!c->version[0]) {
        fprintf(stderr, "tidemark-bench: initialize: no protocolVersion in %.200s\n", c->body.data);
        return TIDEMARK_EPROTO;
    }
    rc = http_do(c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", NULL);
    if (rc == 0 && c->status != 202) {
        fprintf(stderr, "tidemark-bench: notifications/initialized: HTTP %ld\n", c->status);
        rc = TIDEMARK_EPROTO;
    }
    return rc;
}

/* Call tool stream {n}; its POST stream holds priming + n progress + result.
 * OUT first: the priming event's id. */
static int make_stream(http *c, uint64_t n, char first[TM_EVENT_ID_MAX])
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"tools/call\",\"params\":{\"name\":"
             "\"stream\",\"arguments\":{\"n\":%llu},\"_meta\":{\"progressToken\":\"b\"}}}",
             c->next_id++, (unsigned long long)n);
    int rc = http_do(c, body, NULL);
    if (rc)
        return rc;
    if (c->status != 200 || !c->is_sse || c->sse.events != n + 2 || c->sse.first_seq != 1 ||
        c->sse.discontinuous || !c->sse.last_is_result) {
        fprintf(stderr,
                "tidemark-bench: tools/call stream n=%llu: HTTP %ld, %llu events (want %llu), "
                "first seq %llu, %s, %s\n",
                (unsigned long long)n, c->status, (unsigned long long)c->sse.events,
                (unsigned long long)n + 2, (unsigned long long)c->sse.first_seq,
                c->sse.discontinuous ? "seq gap" : "dense", c->sse.last_is_result ? "ends with result" : "no result");
        return TIDEMARK_EPROTO;
    }
    memcpy(first, c->sse.first_id, TM_EVENT_ID_MAX);
    return 0;
}

/* One timed resume from the priming id: exactly n+1 events (n progress +
 * the response), seqs 2..n+2. OUT ms. */
static int resume_once(http *c, const char *first, uint64_t n, double *ms)
{
    int64_t t0 = now_ns();
    int rc = http_do(c, NULL, first);
    int64_t t1 = now_ns();
    if (rc)
        return rc;
    *ms = (double)(t1 - t0) / 1e6;
    if (c->status != 200 || !c->is_sse || c->sse.events != n + 1 || c->sse.first_seq != 2 ||
        c->sse.discontinuous || !c->sse.last_is_result) {
        fprintf(stderr,
                "tidemark-bench: resume n=%llu: HTTP %ld, %llu events (want %llu), first seq %llu, "
                "%s, %s\n",
                (unsigned long long)n, c->status, (unsigned long long)c->sse.events,
                (unsigned long long)n + 1, (unsigned long long)c->sse.first_seq,
                c->sse.discontinuous ? "seq gap" : "dense",
                c->sse.last_is_result ? "ends with result" : "no result");
        return TIDEMARK_EPROTO;
    }
    return 0;
}

typedef struct resume_result {
    double median_ms, p90_ms, target_ms;
    unsigned runs;
} resume_result;

/* ---- 6. tools/call in the two eras ------------------------------------------ */

enum { CALL_LEGACY, CALL_MODERN, CALL_MODERN_KEY, CALL_MODES };
static const char *const call_mode_name[CALL_MODES] = {
    "legacy (session, SSE)", "modern", "modern + idempotency key"};

typedef struct call_result {
    double median_ms, p90_ms, per_s;
    unsigned runs;
} call_result;

/* The answer of echo {"text": text}: as JSON (modern), or the SSE stream of
 * a legacy call ending with its result. */
static int call_answer_ok(http *c, int mode, const char *text)
{
    if (c->status != 200)
        return 0;
    if (c->is_sse)
        return mode == CALL_LEGACY && c->sse.last_is_result && !c->sse.discontinuous;
    json_t *j = c->body.data ? json_loads(c->body.data, 0, NULL) : NULL;
    json_t *res = json_object_get(j, "result");
    const char *got =
        json_string_value(json_object_get(json_array_get(json_object_get(res, "content"), 0), "text"));
    const char *rt = json_string_value(json_object_get(res, "resultType"));
    int ok = got && strcmp(got, text) == 0 &&
             (mode == CALL_LEGACY || (rt && strcmp(rt, "complete") == 0));
    json_decref(j);
    return ok;
}

/* One tools/call of echo in mode; OUT ms. key_no numbers idempotency keys. */
static int call_once(http *c, int mode, unsigned key_no, double *ms)
{
    char body[768], text[64], meta[512] = "";
    snprintf(text, sizeof text, "bench-%u-%u", (unsigned)getpid(), key_no);
    if (mode != CALL_LEGACY)
        snprintf(meta, sizeof meta,
                 ",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                 "\"io.modelcontextprotocol/clientInfo\":{\"name\":\"tidemark-bench\","
                 "\"version\":\"%s\"},\"io.modelcontextprotocol/clientCapabilities\":{}%s%s%s}",
                 TIDEMARK_VERSION, mode == CALL_MODERN_KEY ? ",\"dev.tidemark/idempotency-key\":\"" : "",
                 mode == CALL_MODERN_KEY ? text : "", mode == CALL_MODERN_KEY ? "\"" : "");
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"tools/call\",\"params\":{"
             "\"name\":\"echo\",\"arguments\":{\"text\":\"%s\"}%s}}",
             c->next_id++, text, meta);
    int64_t t0 = now_ns();
    int rc = http_do(c, body, NULL);
    *ms = (double)(now_ns() - t0) / 1e6;
    if (rc)
        return rc;
    if (!call_answer_ok(c, mode, text)) {
        fprintf(stderr, "tidemark-bench: tools/call (%s): HTTP %ld, %s: %.200s\n",
                call_mode_name[mode], c->status, c->is_sse ? "SSE" : "JSON",
                c->is_sse ? "" : c->body.data ? c->body.data : "");
        return TIDEMARK_EPROTO;
    }
    return 0;
}

/* o->calls round trips per mode, the modes interleaved call by call; the
 * legacy one on the session of legacy, the modern ones on a handle of their
 * own without a session (MCP-Protocol-Version, Mcp-Method, Mcp-Name). */
static int call_bench(const bench_opts *o, const char *url, http *legacy, call_result *cr)
{
    http modern;
    int rc = http_init(&modern, url);
    snprintf(modern.version, sizeof modern.version, "2026-07-28");
    snprintf(modern.extra[0], sizeof modern.extra[0], "Mcp-Method: tools/call");
    snprintf(modern.extra[1], sizeof modern.extra[1], "Mcp-Name: echo");
    double *ms[CALL_MODES] = {0};
    for (int m = 0; m < CALL_MODES && rc == 0; m++)
        if (!(ms[m] = calloc(o->calls + 1, sizeof *ms[m])))
            rc = TIDEMARK_ENOMEM;
    fprintf(stderr, "  tools/call x %u per era mode\n", o->calls);
    /* call 0 of each mode warms it up (connection, first session) */
    for (unsigned i = 0; i <= o->calls && rc == 0; i++)
        for (int m = 0; m < CALL_MODES && rc == 0; m++)
            rc = call_once(m == CALL_LEGACY ? legacy : &modern, m, i * CALL_MODES + (unsigned)m,
                           &ms[m][i]);
    for (int m = 0; m < CALL_MODES && rc == 0; m++) {
        double sum = 0;
        for (unsigned i = 1; i <= o->calls; i++)
            sum += ms[m][i];
        cr[m].runs = o->calls;
        cr[m].median_ms = pct_double(ms[m] + 1, o->calls, 500);
        cr[m].p90_ms = pct_double(ms[m] + 1, o->calls, 900);
        cr[m].per_s = sum > 0 ? 1000.0 * o->calls / sum : 0;
    }
    for (int m = 0; m < CALL_MODES; m++)
        free(ms[m]);
    http_free(&modern);
    return rc;
}

/* Resumes of streams of ns[i] events against tidemark-server on store (a
 * URI). db: the SQLite file to remove afterwards, or NULL. */
static int resume_bench(const bench_opts *o, const char *dir, const char *store, const char *db,
                        const uint64_t *ns, size_t nn, resume_result *res, call_result *cr)
{
    server_proc s = {.pid = -1, .out_fd = -1};
    int rc = server_start(o->server, dir, store, &s);
    if (rc) {
        if (db)
            remove_db(db);
        unlink(s.log);
        return rc;
    }
    http c;
    rc = http_init(&c, s.url);
    if (rc == 0)
        rc = mcp_connect(&c);
    double *ms = calloc(o->resume_reps, sizeof *ms);
    if (!ms && rc == 0)
        rc = TIDEMARK_ENOMEM;
    for (size_t i = 0; i < nn && rc == 0; i++) {
        uint64_t n = ns[i];
        char first[TM_EVENT_ID_MAX];
        fprintf(stderr, "  resume N=%llu (%s)\n", (unsigned long long)n,
                strncmp(store, "redis", 5) == 0 ? "redis" : "sqlite");
        if ((rc = make_stream(&c, n, first)) != 0)
            break;
        double warm;
        /* The first resume of a stream pulls its rows into the page cache;
         * a reconnecting client meets a warm server, not a cold disk. */
        if (!o->quick && (rc = resume_once(&c, first, n, &warm)) != 0)
            break;
        for (unsigned r = 0; r < o->resume_reps && rc == 0; r++)
            rc = resume_once(&c, first, n, &ms[r]);
        if (rc)
            break;
        res[i].runs = o->resume_reps;
        res[i].median_ms = pct_double(ms, o->resume_reps, 500);
        res[i].p90_ms = pct_double(ms, o->resume_reps, 900);
        res[i].target_ms = (TARGET_RESUME_BASE_US + TARGET_RESUME_PER_EVENT_US * (double)n) / 1000.0;
    }
    if (rc == 0 && o->calls)
        rc = call_bench(o, s.url, &c, cr);
    free(ms);
    http_free(&c);
    int st = server_stop(&s);
    if (st != 0) {
        fprintf(stderr, "tidemark-bench: server exited with status %d on SIGTERM\n", st);
        show_log_tail(s.log);
        if (rc == 0)
            rc = TIDEMARK_EIO;
    } else if (rc) {
        show_log_tail(s.log);
    }
    if (db)
        remove_db(db);
    unlink(s.log);
    return rc;
}

/* ---- 4. Redis: the bench's own redis-server, node processes ----------------- */

/* A redis-server started by the bench on a free loopback port, persisting
 * to an append-only file in its own scratch folder, nothing else (no RDB
 * snapshots). */
typedef struct redis_proc {
    pid_t pid;
    int port;
    char dir[PATH_MAX];  /* its --dir; removed when it stops */
    char log[PATH_MAX];
    char version[32];
} redis_proc;

/* The appendfsync policy that gives a durability level its meaning on
 * Redis (store_redis.c's check_durability: power needs "always"). */
static const char *redis_fsync(tm_durability d)
{
    return d == TM_DURABILITY_PROCESS ? "everysec" : "always";
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* rm -r path (Redis keeps its append-only files in a subfolder). */
static void remove_tree(const char *path)
{
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        fprintf(stderr, "tidemark-bench: cannot remove %s: %s\n", path, strerror(errno));
}

/* PING answered PONG. OUT version (INFO server's redis_version). */
static int redis_ping(int port, char *version, size_t vlen)
{
    struct timeval tv = {0, 500000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        redisFree(c);
        return TIDEMARK_EIO;
    }
    redisSetTimeout(c, tv);
    redisReply *x = redisCommand(c, "PING");
    int up = x && x->type == REDIS_REPLY_STATUS && strcmp(x->str, "PONG") == 0;
    freeReplyObject(x);
    if (up && (x = redisCommand(c, "INFO server")) != NULL) {
        const char *v = x->type == REDIS_REPLY_STRING ? strstr(x->str, "redis_version:") : NULL;
        if (v)
            snprintf(version, vlen, "%.*s", (int)strcspn(v + 14, "\r\n"), v + 14);
        freeReplyObject(x);
    }
    redisFree(c);
    return up ? 0 : TIDEMARK_EIO;
}

/* Stop it by its pid: SIGTERM (it finishes its AOF and exits), SIGKILL
 * after REDIS_STOP_MS; then remove its folder. Returns its exit status, or
 * -1 (killed, or never started). */
static int redis_stop(redis_proc *rp)
{
    int ret = -1;
    if (rp->pid > 0) {
        kill(rp->pid, SIGTERM);
        int status = 0;
        pid_t r = 0;
        for (int waited = 0; waited < REDIS_STOP_MS; waited += 10) {
            if ((r = waitpid(rp->pid, &status, WNOHANG)) != 0)
                break;
            sleep_ms(10);
        }
        if (r == 0) {
            fprintf(stderr, "tidemark-bench: redis-server (pid %ld) ignored SIGTERM; killing it\n",
                    (long)rp->pid);
            kill(rp->pid, SIGKILL);
            r = waitpid(rp->pid, &status, 0);
        }
        if (r == rp->pid && WIFEXITED(status))
            ret = WEXITSTATUS(status);
    }
    rp->pid = -1;
    if (rp->dir[0])
        remove_tree(rp->dir);
    if (rp->log[0])
        unlink(rp->log);
    return ret;
}

/* Start redis-server (bin) with its folder under dir and the given
 * appendfsync, and wait until it answers PING (REDIS_START_MS). A port
 * taken between free_port() and the bind is tried again with another. */
static int redis_start(const char *bin, const char *dir, const char *fsync, redis_proc *rp)
{
    memset(rp, 0, sizeof *rp);
    rp->pid = -1;
    if (join_path(rp->dir, sizeof rp->dir, dir, "redis") ||
        join_path(rp->log, sizeof rp->log, dir, "redis.log"))
        return TIDEMARK_ERANGE;
    for (int attempt = 0; attempt < 3; attempt++) {
        remove_tree(rp->dir);
        if (mkdir(rp->dir, 0700) != 0) {
            fprintf(stderr, "tidemark-bench: mkdir %s: %s\n", rp->dir, strerror(errno));
            return TIDEMARK_EIO;
        }
        char port[16];
        rp->port = free_port();
        if (rp->port <= 0)
            return TIDEMARK_EIO;
        snprintf(port, sizeof port, "%d", rp->port);
        char *argv[] = {(char *)bin, "--port", port, "--bind", "127.0.0.1", "--dir", rp->dir,
                        "--save", "", "--appendonly", "yes", "--appendfsync", (char *)fsync,
                        "--daemonize", "no", NULL};
        int logfd = open(rp->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (logfd < 0)
            return TIDEMARK_EIO;
        pid_t parent = getpid();
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            close(logfd);
            return TIDEMARK_EIO;
        }
        if (pid == 0) { /* only async-signal-safe calls until exec */
            if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
                _exit(127);
            dup2(logfd, STDOUT_FILENO);
            dup2(logfd, STDERR_FILENO);
            execv(bin, argv);
            _exit(127);
        }
        close(logfd);
        rp->pid = pid;
        int64_t deadline = now_ns() + (int64_t)REDIS_START_MS * 1000000;
        int exited = 0;
        while (now_ns() < deadline) {
            int status;
            if (waitpid(pid, &status, WNOHANG) == pid) {
                exited = 1;
                rp->pid = -1;
                break;
            }
            if (redis_ping(rp->port, rp->version, sizeof rp->version) == 0)
                return 0;
            sleep_ms(20);
        }
        if (!exited) {
            fprintf(stderr, "tidemark-bench: redis-server did not answer PING within %d ms\n",
                    REDIS_START_MS);
            show_log_tail(rp->log);
            redis_stop(rp);
            return TIDEMARK_EIO;
        }
        /* Exited: a port someone took meanwhile is worth another try. */
        char line[512];
        int in_use = 0;
        FILE *f = fopen(rp->log, "r");
        while (f && fgets(line, sizeof line, f))
            in_use |= strstr(line, "Address already in use") != NULL;
        if (f)
            fclose(f);
        if (!in_use)
            break;
    }
    fprintf(stderr, "tidemark-bench: %s exited at start-up\n", bin);
    show_log_tail(rp->log);
    redis_stop(rp);
    return TIDEMARK_EIO;
}

/* What a node process tells the bench: ready (after its warm-up), then done. */
typedef struct node_msg {
    int kind; /* NODE_READY, NODE_DONE */
    int rc;
    int64_t t_start, t_end; /* CLOCK_MONOTONIC ns */
    uint64_t durable;
    double batch, p50, p99;
} node_msg;

enum { NODE_READY = 1, NODE_DONE = 2 };

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return TIDEMARK_EIO;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* One message, before deadline (monotonic ns). EOF or timeout: EIO. */
static int read_msg(int fd, node_msg *m, int64_t deadline)
{
    char *c = (char *)m;
    size_t got = 0;
    while (got < sizeof *m) {
        int64_t left = (deadline - now_ns()) / 1000000;
        struct pollfd pf = {fd, POLLIN, 0};
        if (left <= 0)
            return TIDEMARK_ETIMEDOUT;
        int pr = poll(&pf, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return TIDEMARK_ETIMEDOUT;
        ssize_t k = read(fd, c + got, sizeof *m - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return TIDEMARK_EIO;
        got += (size_t)k;
    }
    return 0;
}

/* A node: its own store (writer thread, connections, subscriber) on uri and
 * the same load as the SQLite run, in this (forked) process. Says ready,
 * waits for the bench's go (one byte 'g'; anything else: give up), runs,
 * says done. Never returns. */
static void node_main(const bench_opts *o, const char *uri, tm_durability d, const char *payload,
                      int go_fd, int out_fd)
{
    node_msg m = {.kind = NODE_READY};
    tm_metrics *reg = tm_metrics_new(); /* freed by the exit */
    tm_store_options opts = {.durability = d, .metrics = reg};
    tm_store *st = NULL;
    node_load l;
    memset(&l, 0, sizeof l);
    m.rc = reg ? tm_store_open(uri, &opts, &st) : TIDEMARK_ENOMEM;
    if (m.rc)
        fprintf(stderr, "tidemark-bench: node %ld: cannot open %s: %s\n", (long)getpid(), uri,
                tidemark_strerror(m.rc));
    else
        m.rc = load_prepare(&l, st, reg, o->threads, o->window, o->redis_events, payload);
    int wrc = write_all(out_fd, &m, sizeof m);
    char go = 0;
    if (m.rc == 0 && wrc == 0) {
        ssize_t k;
        while ((k = read(go_fd, &go, 1)) < 0 && errno == EINTR)
            ;
        if (k != 1)
            go = 0;
    }
    if (go == 'g') {
        store_result res;
        m.kind = NODE_DONE;
        m.rc = load_run(&l, 0, &m.t_start, &m.t_end, &res);
        m.durable = res.durable;
        m.batch = res.batch;
        m.p50 = res.p50;
        m.p99 = res.p99;
        wrc = write_all(out_fd, &m, sizeof m);
    }
    if (st)
        tm_store_close(st);
    load_free(&l);
    _exit(m.rc || wrc ? 1 : 0);
}

/* nnodes node processes on one Redis, each T streams x window W and
 * o->redis_events appends, started together. events/s = all durable appends
 * over the time from the first node's first append to the last node's last
 * durable callback. batch: mean over nodes; p50/p99: the worst node's. */
static int redis_nodes_run(const bench_opts *o, const char *uri, tm_durability d, unsigned nnodes,
                           const char *payload, store_result *res)
{
    memset(res, 0, sizeof *res);
    pid_t pid[REDIS_NODES_MAX];
    int out[REDIS_NODES_MAX], go[2];
    unsigned started = 0;
    int rc = 0;
    if (nnodes > REDIS_NODES_MAX || pipe(go) != 0)
        return TIDEMARK_EINVAL;
    /* The bench is single-threaded here (every store it opened is closed,
     * their threads joined), so a forked child may use threads and malloc. */
    pid_t parent = getpid();
    fflush(NULL);
    for (; started < nnodes; started++) {
        int p[2];
        if (pipe(p) != 0) {
            rc = TIDEMARK_EIO;
            break;
        }
        pid_t k = fork();
        if (k < 0) {
            close(p[0]);
            close(p[1]);
            rc = TIDEMARK_EIO;
            break;
        }
        if (k == 0) {
            /* A bench killed mid-run must not leave nodes behind. */
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
                _exit(127);
            close(go[1]);
            close(p[0]);
            for (unsigned j = 0; j < started; j++)
                close(out[j]);
            node_main(o, uri, d, payload, go[0], p[1]);
        }
        close(p[1]);
        pid[started] = k;
        out[started] = p[0];
    }
    close(go[0]);
    /* Opening a store and warming T streams takes well under a second;
     * a run of o->events appends per node gets minutes. */
    node_msg m[REDIS_NODES_MAX];
    int64_t deadline = now_ns() + (int64_t)NODE_READY_MS * 1000000;
    for (unsigned i = 0; i < started && rc == 0; i++) {
        int r = read_msg(out[i], &m[i], deadline);
        if (r || m[i].kind != NODE_READY || m[i].rc) {
            fprintf(stderr, "tidemark-bench: Redis node %u of %u not ready: %s\n", i + 1, nnodes,
                    tidemark_strerror(r ? r : m[i].rc ? m[i].rc : TIDEMARK_EPROTO));
            rc = r ? r : m[i].rc ? m[i].rc : TIDEMARK_EPROTO;
        }
    }
    /* One byte each: 'g' starts every node at once, 'x' sends them home. */
    char bytes[REDIS_NODES_MAX];
    memset(bytes, rc == 0 ? 'g' : 'x', sizeof bytes);
    if (write_all(go[1], bytes, started) != 0 && rc == 0)
        rc = TIDEMARK_EIO;
    close(go[1]);
    deadline = now_ns() + (int64_t)NODE_RUN_MS * 1000000;
    int64_t t_start = INT64_MAX, t_end = 0;
    double bsum = 0;
    for (unsigned i = 0; i < started && rc == 0; i++) {
        int r = read_msg(out[i], &m[i], deadline);
        if (r || m[i].kind != NODE_DONE || m[i].rc) {
            fprintf(stderr, "tidemark-bench: Redis node %u of %u failed: %s\n", i + 1, nnodes,
                    tidemark_strerror(r ? r : m[i].rc ? m[i].rc : TIDEMARK_EPROTO));
            rc = r ? r : m[i].rc ? m[i].rc : TIDEMARK_EPROTO;
            break;
        }
        t_start = m[i].t_start < t_start ? m[i].t_start : t_start;
        t_end = m[i].t_end > t_end ? m[i].t_end : t_end;
        res->durable += m[i].durable;
        bsum += m[i].batch;
        res->p50 = m[i].p50 > res->p50 ? m[i].p50 : res->p50;
        res->p99 = m[i].p99 > res->p99 ? m[i].p99 : res->p99;
    }
    for (unsigned i = 0; i < started; i++) {
        if (rc)
            kill(pid[i], SIGKILL); /* a node that went silent must not outlive the run */
        int status = 0;
        pid_t r;
        while ((r = waitpid(pid[i], &status, 0)) < 0 && errno == EINTR)
            ;
        if (rc == 0 && (r != pid[i] || !WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
            fprintf(stderr, "tidemark-bench: Redis node %u exited abnormally\n", i + 1);
            rc = TIDEMARK_EIO;
        }
        close(out[i]);
    }
    if (rc == 0 && started) {
        res->batch = bsum / started;
        res->eps = t_end > t_start ? (double)res->durable * 1e9 / (double)(t_end - t_start) : 0;
    }
    return rc;
}

/* One measurement on a fresh redis-server: it starts empty, with an empty
 * append-only file, as the SQLite runs start with an empty database. */
static int redis_run(const bench_opts *o, const char *dir, tm_durability d, unsigned nnodes,
                     const char *payload, store_result *res, char *version, size_t vlen)
{
    redis_proc rp;
    int rc = redis_start(o->redis_server, dir, redis_fsync(d), &rp);
    if (rc)
        return rc;
    snprintf(version, vlen, "%s", rp.version);
    char uri[64];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", rp.port);
    rc = redis_nodes_run(o, uri, d, nnodes, payload, res);
    if (rc)
        show_log_tail(rp.log);
    int st = redis_stop(&rp);
    if (st != 0 && rc == 0) {
        fprintf(stderr, "tidemark-bench: redis-server exited with status %d on SIGTERM\n", st);
        rc = TIDEMARK_EIO;
    }
    return rc;
}

/* ---- driver ------------------------------------------------------------------------- */

typedef struct dur_results {
    tm_durability d;
    double eps1[MAX_REPS], raw1[MAX_REPS], batch1[MAX_REPS];
    double epsT[MAX_REPS], rawT[MAX_REPS], batchT[MAX_REPS], ref[MAX_REPS];
    double p50T[MAX_REPS], p99T[MAX_REPS];
    double p50L[MAX_REPS], p99L[MAX_REPS], epsL[MAX_REPS];
    double p50R[MAX_REPS], p99R[MAX_REPS];
    /* Redis: [0] one node, [1] REDIS_NODES nodes */
    double reps[2][MAX_REPS], rbatch[2][MAX_REPS], rp50[2][MAX_REPS], rp99[2][MAX_REPS];
    char redis_version[32];
} dur_results;

static int measure_durability(const bench_opts *o, const char *dir, const char *payload,
                              dur_results *r)
{
    char db[PATH_MAX], raw[PATH_MAX];
    if (join_path(db, sizeof db, dir, "store.db") || join_path(raw, sizeof raw, dir, "raw.db"))
        return TIDEMARK_ERANGE;
    for (unsigned rep = 0; rep < o->reps; rep++) {
        store_result s;
        int rc;
        fprintf(stderr, "  %s: repetition %u/%u\n", dur_name(r->d), rep + 1, o->reps);
        /* Each store run is followed by its raw twin at the batch size the
         * store just achieved, so drift on the shared machine hits both. */
        if ((rc = store_run(db, r->d, 1, o->window, o->events, 0, payload, &s)) != 0)
            return rc;
        r->eps1[rep] = s.eps;
        r->batch1[rep] = s.batch;
        if ((rc = raw_ceiling(raw, r->d, 1, (unsigned)(s.batch + 0.5), o->events, payload,
                              &r->raw1[rep])) != 0)
            return rc;
        if ((rc = store_run(db, r->d, o->threads, o->window, o->events, 0, payload, &s)) != 0)
            return rc;
        r->epsT[rep] = s.eps;
        r->batchT[rep] = s.batch;
        r->p50T[rep] = s.p50;
        r->p99T[rep] = s.p99;
        if ((rc = raw_ceiling(raw, r->d, o->threads, (unsigned)(s.batch + 0.5), o->events, payload,
                              &r->rawT[rep])) != 0)
            return rc;
        if ((rc = raw_ceiling(raw, r->d, o->threads, RAW_REF_BATCH, o->events, payload,
                              &r->ref[rep])) != 0)
            return rc;
        /* Lightly loaded: one append at a time, each waits for its own
         * commit. Capped in time: at power every event costs an fsync. */
        if ((rc = store_run(db, r->d, 1, 1, o->light, LIGHT_CAP_MS, payload, &s)) != 0)
            return rc;
        r->p50L[rep] = s.p50;
        r->p99L[rep] = s.p99;
        r->epsL[rep] = s.eps;
        if ((rc = raw_commit_latency(raw, r->d, o->light, payload, &r->p50R[rep], &r->p99R[rep])) != 0)
            return rc;
        /* Redis in the same repetition, with the same per-node load as the
         * T-stream store run above: one node, then REDIS_NODES. */
        for (int k = 0; k < 2 && o->redis_server[0]; k++) {
            unsigned nodes = k ? REDIS_NODES : 1;
            fprintf(stderr, "  %s: redis, %u node%s\n", dur_name(r->d), nodes, k ? "s" : "");
            if ((rc = redis_run(o, dir, r->d, nodes, payload, &s, r->redis_version,
                                sizeof r->redis_version)) != 0)
                return rc;
            r->reps[k][rep] = s.eps;
            r->rbatch[k][rep] = s.batch;
            r->rp50[k][rep] = s.p50;
            r->rp99[k][rep] = s.p99;
        }
    }
    return 0;
}

static void print_resume_table(FILE *f, const uint64_t *ns, size_t nn, const resume_result *rr)
{
    fprintf(f, "%-8s %10s %8s %10s  %s\n", "resume N", "median_ms", "p90_ms", "target_ms",
            "met (median / p90)");
    for (size_t i = 0; i < nn; i++)
        fprintf(f, "%-8llu %10.2f %8.2f %10.2f  %s / %s\n", (unsigned long long)ns[i],
                rr[i].median_ms, rr[i].p90_ms, rr[i].target_ms,
                rr[i].median_ms <= rr[i].target_ms ? "yes" : "NO",
                rr[i].p90_ms <= rr[i].target_ms ? "yes" : "NO");
}

static void print_redis(FILE *f, const bench_opts *o, const dur_results *dr, size_t ndr)
{
    unsigned n = o->reps;
    if (!o->redis_server[0]) {
        fprintf(f, "Redis: skipped (%s)\n\n", o->redis_skipped);
        return;
    }
    fprintf(f, "durable events/s on Redis vs the SQLite store (redis-server %s on loopback,\n"
               "appendonly yes, a fresh server per run; a node = one process with its own store;\n"
               "per node %u streams x window %u, %llu events; the sqlite row is the %u-stream run\n"
               "above; redis batch = mean of the nodes', p50/p99 = the worst node's)\n",
            dr[0].redis_version, o->threads, o->window, (unsigned long long)o->redis_events,
            o->threads);
    fprintf(f, "%-11s %-12s %-15s %10s %8s %8s %8s\n", "durability", "appendfsync", "store",
            "events/s", "batch", "p50_us", "p99_us");
    for (size_t i = 0; i < ndr; i++) {
        const dur_results *r = &dr[i];
        fprintf(f, "%-11s %-12s %-15s %10.0f %8.1f %8.0f %8.0f\n", dur_name(r->d), "-",
                "sqlite, 1 node", median(r->epsT, n), median(r->batchT, n), median(r->p50T, n),
                median(r->p99T, n));
        for (int k = 0; k < 2; k++) {
            char what[32];
            snprintf(what, sizeof what, "redis, %u node%s", k ? REDIS_NODES : 1, k ? "s" : "");
            fprintf(f, "%-11s %-12s %-15s %10.0f %8.1f %8.0f %8.0f\n", dur_name(r->d),
                    redis_fsync(r->d), what, median(r->reps[k], n), median(r->rbatch[k], n),
                    median(r->rp50[k], n), median(r->rp99[k], n));
        }
    }
    fprintf(f, "ratios of medians:");
    for (size_t i = 0; i < ndr; i++) {
        const dur_results *r = &dr[i];
        double sq = median(r->epsT, n), r1 = median(r->reps[0], n), r3 = median(r->reps[1], n);
        fprintf(f, "%s %s: redis 1 node / sqlite 1 node = %.2f, redis %u nodes / redis 1 node = %.2f",
                i ? ";" : "", dur_name(r->d), sq > 0 ? r1 / sq : 0, REDIS_NODES,
                r1 > 0 ? r3 / r1 : 0);
    }
    fprintf(f, "\n\n");
}

/* tools/call in the two eras, on SQLite and (when it ran) Redis. */
static void print_calls(FILE *f, const bench_opts *o, call_result cr[2][CALL_MODES])
{
    fprintf(f, "\ntools/call over HTTP, legacy vs modern (tool echo, one call at a time on one\n"
               "connection, %u calls per mode, the modes interleaved; legacy: in a session,\n"
               "answered on its SSE stream; modern: 2026-07-28 without a session, a store\n"
               "session per call or derived from the idempotency key, answered as JSON)\n",
            o->calls);
    fprintf(f, "%-7s %-26s %10s %8s %9s\n", "store", "mode", "median_ms", "p90_ms", "calls/s");
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !o->redis_server[0])
            break;
        for (int m = 0; m < CALL_MODES; m++)
            fprintf(f, "%-7s %-26s %10.2f %8.2f %9.0f\n", k ? "redis" : "sqlite",
                    call_mode_name[m], cr[k][m].median_ms, cr[k][m].p90_ms, cr[k][m].per_s);
    }
    double l = cr[0][CALL_LEGACY].median_ms, mo = cr[0][CALL_MODERN].median_ms;
    fprintf(f, "modern / legacy median on sqlite: %.2f\n", l > 0 ? mo / l : 0);
}

static void print_report(FILE *f, const bench_opts *o, const char *dir, const dur_results *dr,
                         size_t ndr, const resume_result *rr, const resume_result *rrr,
                         int resumed)
{
    unsigned n = o->reps;
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %z", localtime(&now));
    fprintf(f, "tidemark-bench  (%ld cores, median of %u%s)\n", sysconf(_SC_NPROCESSORS_ONLN), n,
            o->quick ? ", QUICK smoke run: numbers not meaningful" : "");
    fprintf(f, "date %s; sqlite %s; %d-byte events; %llu events per run; window %u per appender\n",
            when, sqlite3_libversion(), PAYLOAD_LEN, (unsigned long long)o->events, o->window);
    fprintf(f, "databases in %s\n", dir);
    /* On tmpfs fsync costs nothing: power would measure process. */
    struct statfs sf;
    if (statfs(o->dir, &sf) == 0 && sf.f_type == 0x01021994)
        fprintf(f, "WARNING: %s is tmpfs, fsync is free: 'power' numbers are not power-safe ones\n",
                o->dir);
    fprintf(f, "\n");

    fprintf(f, "durable events/s through the store vs raw SQLite inserts (same durability, same\n"
               "rows per transaction as the store's mean group commit)\n");
    fprintf(f, "%-11s %-8s %10s %8s %12s %6s  %s\n", "durability", "streams", "events/s", "batch",
            "raw ceiling", "ratio", "target>=0.70");
    for (size_t i = 0; i < ndr; i++) {
        const dur_results *r = &dr[i];
        double e1 = median(r->eps1, n), r1 = median(r->raw1, n);
        double eT = median(r->epsT, n), rT = median(r->rawT, n);
        fprintf(f, "%-11s %-8u %10.0f %8.1f %12.0f %6.2f  %s\n", dur_name(r->d), 1u, e1,
                median(r->batch1, n), r1, r1 > 0 ? e1 / r1 : 0, "-");
        double ratio = rT > 0 ? eT / rT : 0;
        fprintf(f, "%-11s %-8u %10.0f %8.1f %12.0f %6.2f  %s\n", dur_name(r->d), o->threads, eT,
                median(r->batchT, n), rT, ratio, ratio >= TARGET_RATIO ? "met" : "NOT met");
    }
    fprintf(f, "reference: raw at %d rows/txn, %u streams:", RAW_REF_BATCH, o->threads);
    for (size_t i = 0; i < ndr; i++) {
        double ref = median(dr[i].ref, n), eT = median(dr[i].epsT, n);
        fprintf(f, "%s %s %.0f/s (store %u streams = %.2f of it)", i ? ";" : "", dur_name(dr[i].d),
                ref, o->threads, ref > 0 ? eT / ref : 0);
    }
    fprintf(f, "\n\n");

    fprintf(f, "commit latency (us), append -> durable callback\n");
    fprintf(f, "%-11s %-34s %8s %8s\n", "durability", "load", "p50", "p99");
    for (size_t i = 0; i < ndr; i++) {
        const dur_results *r = &dr[i];
        char load[64];
        snprintf(load, sizeof load, "%u streams x window %u", o->threads, o->window);
        fprintf(f, "%-11s %-34s %8.0f %8.0f\n", dur_name(r->d), load, median(r->p50T, n),
                median(r->p99T, n));
        snprintf(load, sizeof load, "1 appender x window 1 (%.0f ev/s)", median(r->epsL, n));
        fprintf(f, "%-11s %-34s %8.0f %8.0f\n", dur_name(r->d), load, median(r->p50L, n),
                median(r->p99L, n));
        double p50R = median(r->p50R, n), p99R = median(r->p99R, n);
        fprintf(f, "%-11s %-34s %8.0f %8.0f   (store light p50 = %.2fx raw)\n", dur_name(r->d),
                "raw 1-row commit (baseline)", p50R, p99R,
                p50R > 0 ? median(r->p50L, n) / p50R : 0);
    }
    fprintf(f, "\n");

    print_redis(f, o, dr, ndr);

    if (!resumed) {
        fprintf(f, "resume over HTTP: skipped\n");
        return;
    }
    fprintf(f, "resume over HTTP (tidemark-server --durability process; GET with Last-Event-ID\n"
               "= priming id until the final response; %u runs each; target 1 ms + 3 us/event)\n",
            rr[0].runs);
    print_resume_table(f, resume_ns, NRESUME, rr);
    if (!o->redis_server[0])
        return;
    fprintf(f, "\nresume over HTTP on Redis (the same, with --store redis://127.0.0.1:PORT/0 on a\n"
               "redis-server with appendfsync everysec; %u runs each)\n",
            rrr[0].runs);
    print_resume_table(f, redis_resume_ns, NRESUME_REDIS, rrr);
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: tidemark-bench [options]\n"
            "Benchmarks the SQLite event log (throughput, commit latency, against raw\n"
            "SQLite in the same run), the Redis event log from 1 and 3 node processes on\n"
            "its own redis-server, and resume latency over HTTP (tidemark-server).\n\n"
            "Options:\n"
            "  --quick          smoke run: few events, one repetition (numbers not meaningful)\n"
            "  --events N       durable appends per throughput run (default 200000)\n"
            "  --reps R         repetitions of each measurement; medians reported (default 5)\n"
            "  --threads T      appenders/streams in the concurrent run (default 16)\n"
            "  --window W       in-flight appends per appender (default 64)\n"
            "  --light N        events in the lightly loaded run (default 500, capped at 2 s)\n"
            "  --resume-reps R  timed resumes per N (default 4 x reps)\n"
            "  --calls N        timed tools/call round trips per era mode, legacy and modern\n"
            "                   (default 200; 0 skips them)\n"
            "  --dir DIR        where scratch databases go (default $TMPDIR or /tmp)\n"
            "  --server PATH    tidemark-server binary (default: next to tidemark-bench)\n"
            "  --no-resume      skip the HTTP resume measurement\n"
            "  --skip-redis     skip the Redis measurements\n"
            "  --redis-events N durable appends per node in a Redis run (default: --events)\n"
            "  --redis-server PATH  redis-server binary (default: redis-server on PATH;\n"
            "                   the Redis section is skipped, not failed, when there is none)\n"
            "  --version        print the version and exit\n"
            "  --help           show this help\n\n"
            "Exit status: 0 when every measurement produced a valid result (targets are\n"
            "reported, not enforced), 1 when one failed, 2 on a usage error.\n");
}

/* The first executable prog in $PATH, into out. TIDEMARK_ENOTFOUND. */
static int find_on_path(const char *prog, char *out, size_t n)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t k = strcspn(path, ":");
        int w = snprintf(out, n, "%.*s/%s", (int)k, k ? path : ".", prog);
        if (w > 0 && (size_t)w < n && access(out, X_OK) == 0)
            return 0;
        path += k + (path[k] == ':');
    }
    out[0] = '\0';
    return TIDEMARK_ENOTFOUND;
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || end == s || s[0] == '-' || v < lo || v > hi)
        return TIDEMARK_EINVAL;
    *out = v;
    return 0;
}

static int parse_opts(int argc, char **argv, bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->events = 200000;
    o->reps = 5;
    o->threads = 16;
    o->window = 64;
    o->light = 500;
    o->calls = 200;
    o->dir = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    int events_set = 0, reps_set = 0, light_set = 0, calls_set = 0;
    uint64_t rreps = 0;
    static const struct option opts[] = {
        {"quick", no_argument, 0, 'q'},       {"events", required_argument, 0, 'e'},
        {"reps", required_argument, 0, 'r'},  {"threads", required_argument, 0, 't'},
        {"window", required_argument, 0, 'w'}, {"light", required_argument, 0, 'l'},
        {"resume-reps", required_argument, 0, 'R'}, {"dir", required_argument, 0, 'd'},
        {"server", required_argument, 0, 's'}, {"no-resume", no_argument, 0, 'n'},
        {"skip-redis", no_argument, 0, 'S'},  {"redis-server", required_argument, 0, 'D'},
        {"redis-events", required_argument, 0, 'E'},
        {"calls", required_argument, 0, 'C'},
        {"version", no_argument, 0, 'V'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    int c;
    uint64_t v;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'q': o->quick = 1; break;
        case 'e':
            if (parse_u64(optarg, 1, 100000000, &v)) goto bad;
            o->events = v;
            events_set = 1;
            break;
        case 'r':
            if (parse_u64(optarg, 1, MAX_REPS, &v)) goto bad;
            o->reps = (unsigned)v;
            reps_set = 1;
            break;
        case 't':
            if (parse_u64(optarg, 1, MAX_THREADS, &v)) goto bad;
            o->threads = (unsigned)v;
            break;
        case 'w':
            if (parse_u64(optarg, 1, 1u << 20, &v)) goto bad;
            o->window = (unsigned)v;
            break;
        case 'l':
            if (parse_u64(optarg, 1, 1000000, &v)) goto bad;
            o->light = v;
            light_set = 1;
            break;
        case 'R':
            if (parse_u64(optarg, 1, 10000, &v)) goto bad;
            rreps = v;
            break;
        case 'd': o->dir = optarg; break;
        case 's': snprintf(o->server, sizeof o->server, "%s", optarg); break;
        case 'n': o->skip_resume = 1; break;
        case 'S': o->skip_redis = 1; break;
        case 'E':
            if (parse_u64(optarg, 1, 100000000, &v)) goto bad;
            o->redis_events = v;
            break;
        case 'D': snprintf(o->redis_server, sizeof o->redis_server, "%s", optarg); break;
        case 'C':
            if (parse_u64(optarg, 0, 100000, &v)) goto bad;
            o->calls = (unsigned)v;
            calls_set = 1;
            break;
        case 'h': usage(stdout); return 1;
        case 'V': printf("tidemark-bench %s\n", tidemark_version(NULL)); return 1;
        default: usage(stderr); return TIDEMARK_EINVAL;
        }
        continue;
    bad:
        fprintf(stderr, "tidemark-bench: bad option value '%s' (see --help)\n", optarg);
        return TIDEMARK_EINVAL;
    }
    if (optind < argc) {
        fprintf(stderr, "tidemark-bench: unexpected argument '%s'\n", argv[optind]);
        return TIDEMARK_EINVAL;
    }
    if (o->quick) {
        if (!events_set)
            o->events = 4000;
        if (!reps_set)
            o->reps = 1;
        if (!light_set)
            o->light = 30;
        if (!calls_set)
            o->calls = 5;
    }
    o->resume_reps = rreps ? (unsigned)rreps : o->quick ? 1 : 4 * o->reps;
    if (!o->redis_events)
        o->redis_events = o->events;
    if (o->events < o->threads || o->redis_events < o->threads) {
        fprintf(stderr, "tidemark-bench: --events and --redis-events must be at least --threads\n");
        return TIDEMARK_EINVAL;
    }
    if (!o->server[0]) {
        /* The server is built next to the bench (build/bin). */
        char self[PATH_MAX];
        ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        if (k <= 0) {
            fprintf(stderr, "tidemark-bench: cannot locate myself; use --server\n");
            return TIDEMARK_EINVAL;
        }
        self[k] = '\0';
        char *slash = strrchr(self, '/');
        *slash = '\0';
        if (join_path(o->server, sizeof o->server, self, "tidemark-server")) {
            fprintf(stderr, "tidemark-bench: path too long; use --server\n");
            return TIDEMARK_EINVAL;
        }
    }
    if (!o->skip_resume && access(o->server, X_OK) != 0) {
        fprintf(stderr, "tidemark-bench: %s: not executable (use --server or --no-resume)\n",
                o->server);
        return TIDEMARK_EINVAL;
    }
    if (o->skip_redis) {
        o->redis_server[0] = '\0';
        snprintf(o->redis_skipped, sizeof o->redis_skipped, "--skip-redis");
    } else if (o->redis_server[0]) {
        if (access(o->redis_server, X_OK) != 0) { /* asked for by name: a usage error */
            fprintf(stderr, "tidemark-bench: %s: not executable (use --skip-redis)\n",
                    o->redis_server);
            return TIDEMARK_EINVAL;
        }
    } else if (find_on_path("redis-server", o->redis_server, sizeof o->redis_server) != 0) {
        snprintf(o->redis_skipped, sizeof o->redis_skipped,
                 "redis-server not found on PATH; apt-get install redis-server, or --redis-server");
    }
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    tm_log_set_level(TM_LOG_WARN); /* the store's INFO lines would interleave with the table */
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "tidemark-bench: curl_global_init failed\n");
        return 1;
    }
    /* Leave room below PATH_MAX for the file names joined to it. */
    char dir[PATH_MAX - 64];
    if (join_path(dir, sizeof dir, o.dir, "tidemark-bench.XXXXXX") || !mkdtemp(dir)) {
        fprintf(stderr, "tidemark-bench: cannot create a folder in %s: %s\n", o.dir, strerror(errno));
        curl_global_cleanup();
        return 1;
    }
    char payload[PAYLOAD_LEN + 1];
    make_payload(payload);

    static dur_results dr[2];
    dr[0].d = TM_DURABILITY_POWER;
    dr[1].d = TM_DURABILITY_PROCESS;
    resume_result rr[NRESUME], rrr[NRESUME_REDIS];
    memset(rr, 0, sizeof rr);
    memset(rrr, 0, sizeof rrr);
    static call_result cr[2][CALL_MODES]; /* sqlite, redis */
    if (!o.redis_server[0])
        fprintf(stderr, "tidemark-bench: Redis section skipped: %s\n", o.redis_skipped);
    int64_t t0 = now_ns();
    for (size_t i = 0; i < 2 && rc == 0; i++)
        rc = measure_durability(&o, dir, payload, &dr[i]);
    if (rc == 0 && !o.skip_resume) {
        char db[PATH_MAX], store[PATH_MAX + 8];
        rc = join_path(db, sizeof db, dir, "server.db");
        snprintf(store, sizeof store, "sqlite:%s", db);
        if (rc == 0)
            rc = resume_bench(&o, dir, store, db, resume_ns, NRESUME, rr, cr[0]);
    }
    if (rc == 0 && !o.skip_resume && o.redis_server[0]) {
        redis_proc rp;
        rc = redis_start(o.redis_server, dir, redis_fsync(TM_DURABILITY_PROCESS), &rp);
        if (rc == 0) {
            char store[64];
            snprintf(store, sizeof store, "redis://127.0.0.1:%d/0", rp.port);
            rc = resume_bench(&o, dir, store, NULL, redis_resume_ns, NRESUME_REDIS, rrr, cr[1]);
            int st = redis_stop(&rp);
            if (st != 0 && rc == 0) {
                fprintf(stderr, "tidemark-bench: redis-server exited with status %d on SIGTERM\n", st);
                rc = TIDEMARK_EIO;
            }
        }
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    if (rmdir(dir) != 0)
        fprintf(stderr, "tidemark-bench: %s left behind: %s\n", dir, strerror(errno));
    curl_global_cleanup();
    if (rc) {
        fprintf(stderr, "tidemark-bench: FAILED (%s)\n", tidemark_strerror(rc));
        return 1;
    }

    /* Valid means: something was measured. Any failed append, short head or
     * incomplete resume already failed above. */
    int valid = 1;
    for (size_t i = 0; i < 2; i++)
        for (unsigned r = 0; r < o.reps; r++)
            if (!(dr[i].eps1[r] > 0 && dr[i].epsT[r] > 0 && dr[i].raw1[r] > 0 &&
                  dr[i].rawT[r] > 0 && dr[i].epsL[r] > 0) ||
                (o.redis_server[0] && !(dr[i].reps[0][r] > 0 && dr[i].reps[1][r] > 0)))
                valid = 0;
    print_report(stdout, &o, dir, dr, 2, rr, rrr, !o.skip_resume);
    if (!o.skip_resume && o.calls)
        print_calls(stdout, &o, cr);
    printf("\nwall time %.1f s\n", secs);
    if (!valid) {
        fprintf(stderr, "tidemark-bench: FAILED: a measurement produced zero events/s\n");
        return 1;
    }
    return 0;
}
