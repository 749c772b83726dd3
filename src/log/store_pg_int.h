/*
 * store_pg_int.h - what the PostgreSQL store's files share (store_pg.c:
 * connections, schema, listener, open; store_pg_write.c: the writer's ops
 * and batches; store_pg_read.c: reads, sessions, records, rows). Private to
 * src/log.
 */
#ifndef TM_STORE_PG_INT_H
#define TM_STORE_PG_INT_H
#include "store.h"
#include "writer.h"
#include "../base/map.h"
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define POOL_MAX 16       /* reader connections at most; more callers wait for one */
#define RESERVE_R 32          /* stream numbers a node reserves at a time */
#define LEASE_MS 3000         /* a node not heard of this long is dead */
#define LEASE_RENEW_MS 750
#define CACHE_MAX 4096        /* stream hints kept before idle ones are dropped */
#define READ_CHUNK 512        /* events per read query */
#define PAGE 500              /* sessions per visit query */
#define BATCH_MAX 512
#define TIMEOUT_DEFAULT_MS 5000
#define NOTIFY_MAX 7900       /* NOTIFY payloads stay under PostgreSQL's 8000 bytes */
#define BUSMSG_KEEP_MS 60000
#define RING_EVENTS 64        /* a stream's committed events kept for this node's readers */
#define RING_EVENT_MAX (64u << 10)  /* larger events are read from the database */
#define RING_BYTES_MAX ((size_t)32 << 20) /* all streams' rings together */

enum op_kind { OP_APPEND, OP_CLOSE, OP_OPEN, OP_SESS_CREATE, OP_SESS_TOUCH, OP_SESS_DELETE,
               OP_SET_ATTR, OP_REQ_BEGIN };

typedef struct pop {
    tm_wop w;                 /* first */
    enum op_kind kind;
    char *session;
    char *name;               /* stream, attribute or request key */
    char *data;               /* append bytes, attribute value, request message, client */
    size_t len;
    char *alt;                /* append: fallback bytes; session: version; request: tool */
    size_t alt_len;
    char *extra;              /* append: request key completed; request: stream */
    unsigned flags;
    tm_effect_fn effect;
    void *effect_ud;
    int64_t ms, ms2;
    int fresh;                /* open: a stream this node made (a cache entry to drop on failure) */
    unsigned run;             /* append leading a run of appends to its stream sent as one
                                 statement: the run's length; 0: a follower in a run */
    unsigned pre;             /* results owed before its own (its effect's statements) */
    char epoch[TM_EPOCH_LEN + 1]; /* append: the epoch it was written with */
} pop;

/* An event this node committed, kept in its stream's ring (store_pg_cache.c). */
typedef struct pg_cev {
    uint64_t seq;
    size_t len;
    char *data;
    char epoch[TM_EPOCH_LEN + 1];
} pg_cev;

typedef struct pstream {
    uint64_t known;    /* highest seq this node saw committed */
    unsigned pending;  /* appends queued here, not settled */
    int closing;       /* a final append or close is queued or committed */
    unsigned opening;  /* this node's open of it is queued, not settled */
    /* The tail this node committed (store_pg_cache.c): */
    int cached;        /* ring_last is this node's last commit to it, none since by others */
    int closed;        /* this node committed its end */
    uint64_t ring_last;
    pg_cev *ring;      /* RING_EVENTS slots, ring_n used from ring_at (oldest first) */
    unsigned ring_n, ring_at;
} pstream;

typedef struct resv {
    uint64_t next, end; /* stream numbers next..end are this node's to use */
} resv;

typedef struct pgstore pgstore;

/* A writer's backend left behind with a COMMIT whose outcome is unknown
 * (the connection closed, never cancelled, while it waited for a standby):
 * it may still commit once a standby answers. Known by its pid and start
 * (microseconds since 1970 on the server's clock; 0: not known): no other
 * backend of any server has both. */
#define PG_DOUBTS_MAX 64
typedef struct pg_doubt {
    int pid;
    long long start_us;
    int64_t at;        /* monotonic ms it was left */
} pg_doubt;
struct pgstore {
    tm_store base;
    tm_store_options opt;
    char *uri;
    char node[17];             /* this node's name: leases, records, NOTIFY senders */
    int64_t timeout_ms;
    tm_writer *writer;
    PGconn *wc;                /* the writer's connection (writer thread only) */
    long long wc_start_us;     /* its backend's start (pg_doubt), writer thread only */
    int64_t deadline;          /* the writer's current batch (writer thread only) */
    int doubt;                 /* the last COMMIT drew a replication warning (writer thread) */
    /* The batch in the pipeline (writer thread): BEGIN's result not read yet,
     * the first op whose results are not read yet, the op whose effect runs. */
    int pipe_begin;
    pop *pipe_from;
    pop *fx_op;                /* the op whose effect runs */
    pop *fx_lead;              /* the run it ends (its first op; fx_op when alone) */
    pop *refused;              /* the effect whose record check aborted the batch, or NULL */
    int fx_broken;             /* a sync inside the effect failed: the batch is lost */
    int fx_planned;            /* the running effect set plan_cache_mode = auto (txn_exec) */
    char last_state[6];        /* SQLSTATE of the batch's first failed statement, or "" */
    char last_error[160];      /* its message */
    pthread_mutex_t e_mu;      /* epoch */
    char epoch[TM_EPOCH_LEN + 1];
    pthread_mutex_t c_mu;      /* streams, resv */
    tm_map *streams;           /* "session\x1fname" -> pstream */
    tm_map *resv;              /* session -> resv */
    size_t ring_bytes;         /* the streams' rings together (c_mu) */
    pthread_mutex_t p_mu;      /* pool: idle connections, and how many exist */
    pthread_cond_t p_cv;       /* one was given back */
    PGconn *pool[POOL_MAX];
    int npool, nconn;
    pthread_t lthread;
    int lstarted;
    atomic_int stopping;
    atomic_int listening;      /* the listener is subscribed */
    _Atomic int64_t listen_since; /* monotonic ms it has been (0: not now) */
    atomic_int w_down;         /* the writer's last attempt failed */
    atomic_int not_replicated; /* durability replicated, and the primary has no sync standby */
    pthread_mutex_t d_mu;      /* doubts */
    pg_doubt doubts[PG_DOUBTS_MAX]; /* backends left with a COMMIT not confirmed */
    int ndoubts;
};

extern const struct tm_store_ops tm_pg_ops;
extern const tm_writer_hooks tm_pg_writer_hooks;

/* Connections (store_pg.c). role names the connection in application_name
 * ("tidemark-<role>-<node>"); PG_WRITER_APP and a node's name make its
 * writer's. */
#define PG_APP_PREFIX "tidemark-"
#define PG_WRITER_APP PG_APP_PREFIX "write-"
PGconn *tm_pg_connect(pgstore *p, const char *role);
PGresult *tm_pg_exec(PGconn *c, const char *sql, int n, const char *const *vals, int rfmt);
PGconn *tm_pg_pool_get(pgstore *p);
void tm_pg_pool_put(pgstore *p, PGconn *c);
void tm_pg_pool_discard(pgstore *p, PGconn *c);
/* PQprepare of sql as name on c: 0, or TIDEMARK_EIO (said at debug level). */
int tm_pg_prepare(PGconn *c, const char *name, const char *sql);
int tm_pg_query(pgstore *p, const char *sql, int n, const char *const *vals, int rfmt,
                PGresult **res);
/* The same with parameter formats: lens[i] and fmts[i] (1: binary) as libpq's. */
int tm_pg_query_f(pgstore *p, const char *sql, int n, const char *const *vals, const int *lens,
                  const int *fmts, int rfmt, PGresult **res);
/* The request path's reads (store_pg_read.c), NULL-terminated: prepared on
 * every pooled connection when it is made; tm_pg_query and tm_pg_query_f
 * run one of them (the same pointer) by name. */
extern const char *const tm_pg_hot_sql[];
void tm_pg_epoch(pgstore *p, char out[TM_EPOCH_LEN + 1]);
char *tm_pg_text_array(const char *const *v, size_t n);
int64_t tm_pg_i64(const PGresult *r, int row, int col);
int64_t tm_pg_bin_i64(const PGresult *r, int row, int col);
char *tm_pg_str(const PGresult *r, int row, int col);

void tm_pg_new_epoch(pgstore *p);
/* Keep the first failed statement's SQLSTATE and message of a batch (writer thread). */
void tm_pg_note_error(pgstore *p, const PGresult *r);
/* With durability replicated: note whether the primary c is on has a
 * synchronous standby configured. */
void tm_pg_check_replicated(pgstore *p, PGconn *c);

/* Ops (store_pg_write.c). */
#define PG_FX_FAILED 0x100u /* an append's effect failed: its fallback is written */
#define PG_FX_NORECORD 0x200u /* an append's effect has no request record: refused */
#define PG_FX_REFUSED 0x400u  /* an append's effect refused (its record not this node's
                                 started one, or none): neither it nor its event is sent */
pop *tm_pg_op_new(enum op_kind k);
void tm_pg_op_free(pop *o);
char *tm_pg_placeholders(const char *sql);

/* The store's operations (store_pg_write.c: queued writes; store_pg_read.c). */
int tm_pg_append_ex(tm_store *st, const tm_append_req *q);
int tm_pg_close_stream(tm_store *st, const char *session, const char *stream);
int tm_pg_stream_open(tm_store *st, const char *session, const char *name, char out[TM_STREAM_MAX]);
int tm_pg_session_create(tm_store *st, const tm_session_rec *rec);
int tm_pg_session_touch(tm_store *st, const char *id, int64_t now_ms);
int tm_pg_session_delete(tm_store *st, const char *id);
int tm_pg_session_set_attr(tm_store *st, const char *id, const char *name, const char *value);
int tm_pg_request_begin(tm_store *st, const tm_request_rec *rec, int wait_durable);
int tm_pg_request_begin_later(tm_store *st, const tm_request_rec *rec, void **ticket);
int tm_pg_request_begin_await(tm_store *st, void *ticket);
int tm_pg_session_get(tm_store *st, const char *id, tm_session_rec *out);
int tm_pg_sessions_each(tm_store *st, int (*fn)(void *, const tm_session_rec *), void *ud);
int tm_pg_sessions_with_attr(tm_store *st, const char *const *names, size_t n,
                             int (*fn)(void *, const tm_session_rec *), void *ud);
int tm_pg_sessions_expire(tm_store *st, int64_t before, void (*fn)(void *, const char *), void *ud);
int tm_pg_read(tm_store *st, const char *session, const char *stream, uint64_t after, size_t max_events,
               tm_event_visitor fn, void *ud);
int tm_pg_bounds(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out);
int tm_pg_read_live(tm_store *st, const char *session, const char *stream, uint64_t after,
                    size_t max_events, tm_event_visitor fn, void *ud);
int tm_pg_bounds_live(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out);
int tm_pg_read_bounds(pgstore *p, const char *session, const char *name, tm_stream_bounds *out);
int tm_pg_event_epoch(tm_store *st, const char *session, const char *stream, uint64_t seq,
                      char out[TM_EPOCH_LEN + 1]);
int tm_pg_request_get(tm_store *st, const char *session, const char *key, tm_request_rec *out);
int tm_pg_session_request_get(tm_store *st, const char *id, const char *key, tm_session_rec *sess,
                              tm_request_rec *req, int *req_rc);
int tm_pg_requests_unfinished(tm_store *st, tm_request_visitor fn, void *ud);
int tm_pg_request_claim(tm_store *st, const char *session, const char *key);
int tm_pg_request_mine(tm_store *st, const char *session, const char *key);
int tm_pg_request_adopt(tm_store *st, const char *session, const char *key);
int tm_pg_exec_schema(tm_store *st, const char *sql);
int tm_pg_query_json(tm_store *st, const char *sql, const char *const *args, size_t nargs,
                     json_t **rows);
int tm_pg_rows(tm_store *st, const char *table, json_t **rows);
int tm_pg_kv_get(tm_store *st, const char *key, void *out, size_t cap, size_t *len);
int tm_pg_kv_create(tm_store *st, const char *key, const void *val, size_t len);

/* The writer's connection (store_pg_write.c): connect, lost. */
int tm_pg_writer_connect(pgstore *p);
/* The writer's connection is gone (closed here). may_commit: a batch was
 * sent on it that PostgreSQL did not answer, so its COMMIT may still land
 * (noted as a doubt). */
void tm_pg_writer_lost(pgstore *p, int may_commit);
/* tm_store_in_doubt: whether a backend left by tm_pg_writer_lost still runs
 * on the server this node writes to now (its COMMIT may still land). */
int tm_pg_in_doubt(tm_store *st);
/* Writer thread, connected: wait until no backend it left is in doubt on
 * its server, so nothing it sends lands before writes still in doubt. 0
 * (after a wait, only with half the store timeout left for the batch);
 * TIDEMARK_EBUSY at the batch's deadline, or cleared too late;
 * TIDEMARK_EIO when the connection could not say. */
int tm_pg_doubts_wait(pgstore *p);
/* Forget the hints of session id (deleted or expired). */
void tm_pg_forget_session(pgstore *p, const char *id);
/* A stream's hint, made when missing (c_mu held). NULL when out of memory. */
pstream *tm_pg_stream_hint(pgstore *p, const char *session, const char *name);

/* The tail of the streams this node writes (store_pg_cache.c). Functions
 * taking a pstream need c_mu held; the others take it. */
/* The streams map's key of session/name: "session\x1fname" (free). */
char *tm_pg_cache_key(const char *session, const char *name);
void tm_pg_hint_free(pgstore *p, pstream *s);
void tm_pg_cache_put(pgstore *p, pstream *s, uint64_t seq, const char *epoch, const void *data,
                     size_t len);
void tm_pg_cache_drop(pgstore *p, pstream *s);
/* Another node committed to session/stream: its ring no longer answers. */
void tm_pg_cache_foreign(pgstore *p, const char *session, const char *stream);
/* A wake-up may have been lost, or the writer's connection was: no ring answers. */
void tm_pg_cache_forget_all(pgstore *p);
/* Answered from the ring: 1 (events after `after` visited, up to max), or 0:
 * ask the database. */
int tm_pg_cache_read(pgstore *p, const char *session, const char *stream, uint64_t after,
                     size_t max, tm_event_visitor fn, void *ud);
int tm_pg_cache_bounds(pgstore *p, const char *session, const char *stream, tm_stream_bounds *out);

#endif
