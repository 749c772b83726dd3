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
 * and, once, 4. resume latency over HTTP against a real tidemark-server for
 * N = 10 .. 10,000 replayed events.
 *
 * Every measurement runs --reps times and reports medians, because the
 * machine is shared; baselines are measured in the same invocation so the
 * ratios compare like with like. Targets are printed, never enforced: the
 * exit status only says whether every measurement produced a valid result
 * (events counted, all durable, resumes complete and continuous).
 */
#include "base/buf.h"
#include "base/log.h"
#include "base/metrics.h"
#include "log/event_id.h"
#include "log/store.h"
#include "tidemark/tidemark.h"
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
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

static const uint64_t resume_ns[] = {10, 100, 1000, 10000};
#define NRESUME (sizeof resume_ns / sizeof resume_ns[0])

typedef struct bench_opts {
    int quick;
    uint64_t events;    /* durable appends per throughput run */
    unsigned reps;
    unsigned threads;   /* appenders (= streams) in the concurrent run */
    unsigned window;    /* in-flight appends per appender */
    uint64_t light;     /* events in a lightly loaded run (window 1) */
    unsigned resume_reps;
    const char *dir;    /* parent of the scratch folder */
    char server[PATH_MAX];
    int skip_resume;
} bench_opts;

/* ---- small helpers ---------------------------------------------------------- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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

static void remove_db(const char *path)
{
    char p[PATH_MAX + 8];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-journal", path);
    unlink(p);
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
    sqlite3_bind_int64(ins, 4, wall_ms());
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
static int commit_batch_totals(double *sum, double *count)
{
    tm_buf b;
    tm_buf_init(&b, 1u << 20);
    int rc = tm_metrics_render(&b);
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

/* Start the appenders, open the gate, wait for all of them. OUT elapsed_ns. */
static int run_appenders(appender *as, unsigned nthreads, int64_t *elapsed_ns)
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
    int64_t t0 = now_ns();
    pthread_mutex_lock(&g.mu);
    g.open = 1;
    g.abort = started < nthreads; /* a partial run would measure something else */
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    for (unsigned t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    *elapsed_ns = now_ns() - t0;
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

/* n durable appends from nthreads appenders, one stream each, window
 * in-flight appends per appender, into a fresh database at path. With
 * cap_ms, the appenders stop issuing after that long. */
static int store_run(const char *path, tm_durability d, unsigned nthreads, unsigned window,
                     uint64_t n, int64_t cap_ms, const char *payload, store_result *res)
{
    memset(res, 0, sizeof *res);
    remove_db(path);
    char uri[PATH_MAX + 8];
    snprintf(uri, sizeof uri, "sqlite:%s", path);
    tm_store_options opts = {.durability = d};
    tm_store *st = NULL;
    int rc = tm_store_open(uri, &opts, &st);
    if (rc) {
        fprintf(stderr, "tidemark-bench: cannot open store %s: %s\n", uri, tidemark_strerror(rc));
        return rc;
    }
    char sid[64];
    snprintf(sid, sizeof sid, "bench-%lld", (long long)wall_ms());
    tm_session_rec rec = {.id = sid, .protocol_version = TIDEMARK_PROTOCOL_LATEST,
                          .client = "{}", .created_ms = wall_ms(), .last_seen_ms = wall_ms()};
    appender *as = calloc(nthreads, sizeof *as);
    evslot *slots = calloc(n, sizeof *slots);
    double bsum0 = 0, bcnt0 = 0, bsum1 = 0, bcnt1 = 0;
    int64_t elapsed = 0;
    if (!as || !slots) {
        rc = TIDEMARK_ENOMEM;
        goto out;
    }
    for (unsigned t = 0; t < nthreads; t++) {
        pthread_mutex_init(&as[t].mu, NULL);
        pthread_cond_init(&as[t].cv, NULL);
    }
    if ((rc = tm_store_session_create(st, &rec)) != 0) {
        fprintf(stderr, "tidemark-bench: session_create: %s\n", tidemark_strerror(rc));
        goto out;
    }
    uint64_t off = 0;
    for (unsigned t = 0; t < nthreads; t++) {
        appender *a = &as[t];
        a->st = st;
        a->session = sid;
        a->payload = payload;
        a->window = window;
        a->n = n / nthreads + (t < n % nthreads);
        a->slots = slots + off;
        off += a->n;
        if ((rc = tm_store_stream_open(st, sid, NULL, a->stream)) != 0) {
            fprintf(stderr, "tidemark-bench: stream_open: %s\n", tidemark_strerror(rc));
            goto out;
        }
    }
    if ((rc = warm_up(as, nthreads)) != 0) {
        fprintf(stderr, "tidemark-bench: warm-up append failed: %s\n", tidemark_strerror(rc));
        goto out;
    }
    if ((rc = commit_batch_totals(&bsum0, &bcnt0)) != 0)
        goto out;
    if (cap_ms > 0)
        for (unsigned t = 0; t < nthreads; t++)
            as[t].deadline = now_ns() + cap_ms * 1000000;
    if ((rc = run_appenders(as, nthreads, &elapsed)) != 0)
        goto out;
    if ((rc = commit_batch_totals(&bsum1, &bcnt1)) != 0)
        goto out;
    res->batch = bcnt1 > bcnt0 ? (bsum1 - bsum0) / (bcnt1 - bcnt0) : 0;
    rc = collect(st, sid, as, nthreads, elapsed, res);
out:
    tm_store_close(st); /* after every callback: close drains the writer */
    if (as)
        for (unsigned t = 0; t < nthreads; t++) {
            pthread_mutex_destroy(&as[t].mu);
            pthread_cond_destroy(&as[t].cv);
        }
    remove_db(path);
    free(slots);
    free(as);
    return rc;
}

/* ---- 4. resume over HTTP ---------------------------------------------------------- */

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

/* Start tidemark-server on a free loopback port; its URL is the line it
 * prints on stdout. */
static int server_start(const char *bin, const char *dir, server_proc *s)
{
    memset(s, 0, sizeof *s);
    s->pid = -1;
    s->out_fd = -1;
    char db[PATH_MAX], store[PATH_MAX + 8];
    if (join_path(db, sizeof db, dir, "server.db") || join_path(s->log, sizeof s->log, dir, "server.log"))
        return TIDEMARK_ERANGE;
    snprintf(store, sizeof store, "sqlite:%s", db);
    char *argv[] = {(char *)bin, "--store", store, "--durability", "process", "--listen",
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

/* Counts the events (blocks with an id) of an SSE body as it arrives and
 * checks their continuity: seqs consecutive, the last one the response. */
typedef struct sse_count {
    tm_buf line;                  /* a line split across write callbacks */
    int has_id, has_result;       /* the block being read */
    char id[TM_EVENT_ID_MAX];
    uint64_t events;
    char first_id[TM_EVENT_ID_MAX];
    uint64_t first_seq, last_seq;
    int discontinuous;
    int last_is_result;
} sse_count;

static void sse_reset(sse_count *c)
{
    tm_buf_reset(&c->line);
    c->has_id = c->has_result = 0;
    c->id[0] = c->first_id[0] = '\0';
    c->events = c->first_seq = c->last_seq = 0;
    c->discontinuous = c->last_is_result = 0;
}

static void sse_line(sse_count *c, const char *l, size_t n)
{
    if (n && l[n - 1] == '\r')
        n--;
    if (n == 0) { /* end of block: an event if it had an id */
        if (c->has_id) {
            const char *dash = strrchr(c->id, '-');
            uint64_t seq = dash ? strtoull(dash + 1, NULL, 10) : 0;
            if (c->events == 0) {
                memcpy(c->first_id, c->id, sizeof c->id);
                c->first_seq = seq;
            } else if (seq != c->last_seq + 1) {
                c->discontinuous = 1;
            }
            c->last_seq = seq;
            c->events++;
            c->last_is_result = c->has_result;
        }
        c->has_id = c->has_result = 0;
        return;
    }
    if (n >= 3 && memcmp(l, "id:", 3) == 0) {
        size_t o = n > 3 && l[3] == ' ' ? 4 : 3;
        size_t k = n - o < TM_EVENT_ID_MAX - 1 ? n - o : TM_EVENT_ID_MAX - 1;
        memcpy(c->id, l + o, k);
        c->id[k] = '\0';
        c->has_id = 1;
    } else if (n >= 5 && memcmp(l, "data:", 5) == 0) {
        /* The final response is the only event with a JSON-RPC result. */
        static const char key[] = "\"result\"";
        for (size_t i = 5; i + sizeof key - 1 <= n; i++)
            if (memcmp(l + i, key, sizeof key - 1) == 0) {
                c->has_result = 1;
                break;
            }
    }
}

static int sse_feed(sse_count *c, const char *p, size_t n)
{
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) : n;
        if (!nl)
            return tm_buf_add(&c->line, p, k);
        if (c->line.len) {
            if (tm_buf_add(&c->line, p, k) != 0)
                return TIDEMARK_ERANGE;
            sse_line(c, c->line.data, c->line.len);
            tm_buf_reset(&c->line);
        } else {
            sse_line(c, p, k);
        }
        p += k + 1;
        n -= k + 1;
    }
    return 0;
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
    int rc = c->is_sse ? sse_feed(&c->sse, p, n) : tm_buf_add(&c->body, p, n);
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
    tm_buf_init(&c->sse.line, 1u << 20);
    c->next_id = 1;
    c->h = curl_easy_init();
    if (!c->h)
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
    tm_buf_free(&c->sse.line);
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

static int resume_bench(const bench_opts *o, const char *dir, resume_result res[NRESUME])
{
    server_proc s = {.pid = -1, .out_fd = -1};
    char db[PATH_MAX];
    int rc = join_path(db, sizeof db, dir, "server.db");
    if (rc == 0)
        rc = server_start(o->server, dir, &s);
    if (rc) {
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
    for (size_t i = 0; i < NRESUME && rc == 0; i++) {
        uint64_t n = resume_ns[i];
        char first[TM_EVENT_ID_MAX];
        fprintf(stderr, "  resume N=%llu\n", (unsigned long long)n);
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
    remove_db(db);
    unlink(s.log);
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
    }
    return 0;
}

static void print_report(FILE *f, const bench_opts *o, const char *dir, const dur_results *dr,
                         size_t ndr, const resume_result *rr, int resumed)
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

    if (!resumed) {
        fprintf(f, "resume over HTTP: skipped\n");
        return;
    }
    fprintf(f, "resume over HTTP (tidemark-server --durability process; GET with Last-Event-ID\n"
               "= priming id until the final response; %u runs each; target 1 ms + 3 us/event)\n",
            rr[0].runs);
    fprintf(f, "%-8s %10s %8s %10s  %s\n", "resume N", "median_ms", "p90_ms", "target_ms",
            "met (median / p90)");
    for (size_t i = 0; i < NRESUME; i++)
        fprintf(f, "%-8llu %10.2f %8.2f %10.2f  %s / %s\n", (unsigned long long)resume_ns[i],
                rr[i].median_ms, rr[i].p90_ms, rr[i].target_ms,
                rr[i].median_ms <= rr[i].target_ms ? "yes" : "NO",
                rr[i].p90_ms <= rr[i].target_ms ? "yes" : "NO");
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: tidemark-bench [options]\n"
            "Benchmarks the SQLite event log (throughput, commit latency, against raw\n"
            "SQLite in the same run) and resume latency over HTTP (tidemark-server).\n\n"
            "Options:\n"
            "  --quick          smoke run: few events, one repetition (numbers not meaningful)\n"
            "  --events N       durable appends per throughput run (default 200000)\n"
            "  --reps R         repetitions of each measurement; medians reported (default 5)\n"
            "  --threads T      appenders/streams in the concurrent run (default 16)\n"
            "  --window W       in-flight appends per appender (default 64)\n"
            "  --light N        events in the lightly loaded run (default 500, capped at 2 s)\n"
            "  --resume-reps R  timed resumes per N (default 4 x reps)\n"
            "  --dir DIR        where scratch databases go (default $TMPDIR or /tmp)\n"
            "  --server PATH    tidemark-server binary (default: next to tidemark-bench)\n"
            "  --no-resume      skip the HTTP resume measurement\n"
            "  --help           show this help\n\n"
            "Exit status: 0 when every measurement produced a valid result (targets are\n"
            "reported, not enforced), 1 when one failed, 2 on a usage error.\n");
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
    o->dir = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    int events_set = 0, reps_set = 0, light_set = 0;
    uint64_t rreps = 0;
    static const struct option opts[] = {
        {"quick", no_argument, 0, 'q'},       {"events", required_argument, 0, 'e'},
        {"reps", required_argument, 0, 'r'},  {"threads", required_argument, 0, 't'},
        {"window", required_argument, 0, 'w'}, {"light", required_argument, 0, 'l'},
        {"resume-reps", required_argument, 0, 'R'}, {"dir", required_argument, 0, 'd'},
        {"server", required_argument, 0, 's'}, {"no-resume", no_argument, 0, 'n'},
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
        case 'h': usage(stdout); return 1;
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
    }
    o->resume_reps = rreps ? (unsigned)rreps : o->quick ? 1 : 4 * o->reps;
    if (o->events < o->threads) {
        fprintf(stderr, "tidemark-bench: --events must be at least --threads\n");
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
    resume_result rr[NRESUME];
    memset(rr, 0, sizeof rr);
    int64_t t0 = now_ns();
    for (size_t i = 0; i < 2 && rc == 0; i++)
        rc = measure_durability(&o, dir, payload, &dr[i]);
    if (rc == 0 && !o.skip_resume)
        rc = resume_bench(&o, dir, rr);
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
                  dr[i].rawT[r] > 0 && dr[i].epsL[r] > 0))
                valid = 0;
    print_report(stdout, &o, dir, dr, 2, rr, !o.skip_resume);
    printf("\nwall time %.1f s\n", secs);
    if (!valid) {
        fprintf(stderr, "tidemark-bench: FAILED: a measurement produced zero events/s\n");
        return 1;
    }
    return 0;
}
