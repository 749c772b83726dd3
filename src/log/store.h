/*
 * store.h - the event log interface. One interface, three backends (memory,
 * SQLite, Redis) selected by a URI; the SQLite and Redis ones commit through
 * the group-commit writer (writer.h).
 *
 * Rules every backend keeps:
 *  - append() assigns the seq inside the commit; an event becomes visible
 *    to read() and to the commit listener only once durable at the
 *    configured level (commit-then-emit).
 *  - seqs are dense per stream, from 1.
 *  - trimming records what was trimmed (first_retained and the epoch of the
 *    last trimmed event), so a gap is known exactly.
 *  - the store is thread-safe.
 */
#ifndef TM_STORE_H
#define TM_STORE_H
#include "../base/metrics.h"
#include "../common/event_id.h"
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tm_store tm_store;

typedef struct tm_event {
    uint64_t seq;
    const char *epoch; /* valid during the callback only */
    const char *data;  /* message bytes as stored; valid during the callback only */
    size_t len;
} tm_event;

typedef struct tm_stream_bounds {
    uint64_t first_retained; /* head+1 when nothing is retained */
    uint64_t head;           /* highest durable seq, 0 if none */
    int closed;              /* no event will follow head */
    char trimmed_epoch[TM_EPOCH_LEN + 1]; /* epoch of seq first_retained-1, "" if none */
    uint64_t assigned;       /* highest seq handed out, durable or not (>= head) */
} tm_stream_bounds;

/* A session as stored. Strings are owned by the record (tm_session_rec_clear). */
typedef struct tm_session_rec {
    char *id;
    char *protocol_version;
    char *client;       /* JSON text: initialize params (clientInfo, capabilities) */
    int64_t created_ms;
    int64_t last_seen_ms;
    char *attrs;        /* JSON text or NULL: state the server keeps per session
                           (log level, subscriptions, standalone stream opened) */
    json_t *attrs_obj;  /* or, in a visit (sessions_each, sessions_with_attr) of a
                           store that keeps them parsed (memory), the same as an
                           object it owns, attrs NULL: read either with
                           tm_session_rec_attrs() */
} tm_session_rec;

/* Called after an append is durable (status 0, seq assigned) or failed. */
typedef void (*tm_append_cb)(void *ud, int status, uint64_t seq);
/* Called after events of a stream became durable (or the stream closed),
 * after the append callbacks, with the durable head; possibly once for
 * several events, possibly again for the same head. A wake-up, not a count. */
typedef void (*tm_commit_listener)(void *ud, const char *session, const char *stream, uint64_t seq);
/* Called with a message published on the store's bus (tm_store_publish),
 * possibly by another node; with no store lock held. */
typedef void (*tm_bus_listener)(void *ud, const char *channel, const void *data, size_t len);
/* Called by read() for each event in order. Return nonzero to stop. */
typedef int (*tm_event_visitor)(void *ud, const tm_event *ev);

typedef enum tm_durability {
    TM_DURABILITY_POWER = 0, /* survives power loss (fsync every commit) */
    TM_DURABILITY_PROCESS,   /* survives a killed process */
    TM_DURABILITY_NONE,      /* memory only */
    TM_DURABILITY_REPLICATED, /* PostgreSQL: power, on a primary with a synchronous standby
                                 (writes refused while it has none) */
} tm_durability;

typedef struct tm_store_options {
    uint64_t retain_events;   /* per-stream count limit, 0 = unlimited */
    int64_t retain_ms;        /* per-stream age limit, 0 = unlimited */
    tm_durability durability; /* for durable backends */
    int emit_early;           /* read() may return events not yet durable (emit early) */
    int64_t touch_every_ms;   /* session_touch writes at most this often (0 = 5000);
                                 keep it well below the session TTL */
    int accept_loss;          /* SQLite: open even when the database holds fewer commits
                                 than its head file recorded (else TIDEMARK_ERANGE) */
    int64_t store_timeout_ms; /* PostgreSQL: a batch's commit waits this long for the primary
                                 (and its standby), then fails as not acknowledged (0 = 5000) */
    int64_t ready_wait_ms;    /* Redis: how long to wait for a server that is still
                                 loading its dataset, at open and on reconnect (0 = 60000) */
    tm_metrics *metrics;      /* the store registers its metrics here (NULL: none);
                                 it must outlive the store */
    /* Told of durable events and bus messages from the moment the store's
     * threads run (set here, they are never read before they are written;
     * tm_store_set_listener after open is for single-threaded tests). */
    void (*listener)(void *ud, const char *session, const char *stream, uint64_t seq);
    void *listener_ud;
    void (*bus)(void *ud, const char *channel, const void *data, size_t len);
    void *bus_ud;
} tm_store_options;

#define TM_APPEND_FINAL 1u /* the stream ends with this event */

/* A transaction handle given to atomic effects (public: tidemark_txn_t,
 * include/tidemark/txn.h; behind it: txn.h). */
typedef struct tidemark_txn tm_txn;
/* An effect run inside the transaction that commits its result event.
 * Returns 0, or a negative code to discard the effect (the fallback bytes
 * are then written instead of the result). */
typedef int (*tm_effect_fn)(void *ud, tm_txn *txn);

/* One append, with what may ride in the same transaction. */
typedef struct tm_append_req {
    const char *session, *stream;
    const void *data;
    size_t len;
    unsigned flags;              /* TM_APPEND_* */
    const char *request_key;     /* NULL, or: this event completes that request record */
    tm_effect_fn effect;         /* NULL, or an atomic effect */
    void *effect_ud;
    const void *fallback;        /* written instead of data when the effect fails */
    size_t fallback_len;
    tm_append_cb cb;             /* told when durable (or failed) */
    void *cb_ud;
} tm_append_req;

typedef enum tm_req_state { TM_REQ_STARTED = 1, TM_REQ_COMPLETED = 2 } tm_req_state;

/* A request record: a call's durable record (exactly-once calls). Strings
 * owned (tm_request_rec_clear). */
typedef struct tm_request_rec {
    char *session;
    char *key;        /* "i:<id>", "s:<id>" or "k:<idempotency key>" */
    char *tool;
    char *stream;
    char *message;    /* the request as received (JSON text) */
    char *response;   /* the final response bytes, when completed */
    size_t response_len;
    int state;        /* tm_req_state */
    int64_t updated_ms;
} tm_request_rec;

typedef int (*tm_request_visitor)(void *ud, const tm_request_rec *rec);

struct tm_store_ops {
    const char *name;
    void (*close)(tm_store *st);
    int (*session_create)(tm_store *st, const tm_session_rec *rec);
    int (*session_get)(tm_store *st, const char *id, tm_session_rec *out);
    int (*session_touch)(tm_store *st, const char *id, int64_t now_ms);
    int (*session_delete)(tm_store *st, const char *id);
    int (*session_set_attr)(tm_store *st, const char *id, const char *name, const char *value);
    int (*sessions_each)(tm_store *st, int (*fn)(void *ud, const tm_session_rec *rec), void *ud);
    /* Optional (NULL: tm_store_sessions_with_attr filters sessions_each). */
    int (*sessions_with_attr)(tm_store *st, const char *const *names, size_t n,
                              int (*fn)(void *ud, const tm_session_rec *rec), void *ud);
    int (*stream_open)(tm_store *st, const char *session, const char *name, char out[TM_STREAM_MAX]);
    int (*close_stream)(tm_store *st, const char *session, const char *stream);
    int (*read)(tm_store *st, const char *session, const char *stream, uint64_t after_seq,
                size_t max_events, tm_event_visitor fn, void *ud);
    int (*bounds)(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out);
    int (*event_epoch)(tm_store *st, const char *session, const char *stream, uint64_t seq,
                       char out[TM_EPOCH_LEN + 1]);
    int (*append_ex)(tm_store *st, const tm_append_req *req);
    int (*request_get)(tm_store *st, const char *session, const char *key, tm_request_rec *out);
    /* Optional (NULL: tm_store_session_request_get makes the two reads). */
    int (*session_request_get)(tm_store *st, const char *id, const char *key, tm_session_rec *sess,
                               tm_request_rec *req, int *req_rc);
    int (*request_begin)(tm_store *st, const tm_request_rec *rec, int wait_durable);
    int (*requests_unfinished)(tm_store *st, tm_request_visitor fn, void *ud);
    int (*exec_schema)(tm_store *st, const char *sql);
    int (*query)(tm_store *st, const char *sql, const char *const *args, size_t nargs,
                 json_t **rows);
    int (*rows)(tm_store *st, const char *table, json_t **rows);
    int (*sessions_expire)(tm_store *st, int64_t idle_before_ms, void (*fn)(void *, const char *),
                           void *ud);
    int (*sync)(tm_store *st);
    /* Optional (NULL: single-process backends). publish: hand a bus message
     * to every other node (this one is told by store.c). request_claim:
     * take over a started record whose owning node's lease lapsed; 0 when
     * this node now owns it, TIDEMARK_EBUSY when it is live or taken. */
    int (*publish)(tm_store *st, const char *channel, const void *data, size_t len);
    int (*request_claim)(tm_store *st, const char *session, const char *key);
    /* With request_claim: 1 when the record is started and this node's, 0
     * when it is not (absent, finished, another node's), or an error. */
    int (*request_mine)(tm_store *st, const char *session, const char *key);
    /* With request_claim: make a started record this node's, whoever's it
     * was (the caller won the right to run it another way); 0, or
     * TIDEMARK_EBUSY (finished), TIDEMARK_ENOTFOUND, an error. */
    int (*request_adopt)(tm_store *st, const char *session, const char *key);
    /* Optional (NULL: always writable, a mark of 0, sync_since = sync). */
    int (*writable)(tm_store *st);
    uint64_t (*mark)(tm_store *st);
    int (*sync_since)(tm_store *st, uint64_t mark);
    /* Optional (NULL: nothing to wait for). */
    void (*wait_settled)(tm_store *st, uint64_t mark);
    /* Optional (NULL: tm_store_session_create_queued is TIDEMARK_ENOTSUP). */
    int (*session_create_queued)(tm_store *st, const tm_session_rec *rec);
    /* Optional (NULL: tm_store_session_delete_queued waits, as session_delete). */
    int (*session_delete_queued)(tm_store *st, const char *id);
    /* Optional (NULL: nothing to hold): tm_store_hold / tm_store_release. */
    void (*hold)(tm_store *st, int on);
    /* Optional (NULL: tm_store_kv_get / _create return TIDEMARK_ENOTSUP). */
    int (*kv_get)(tm_store *st, const char *key, void *out, size_t cap, size_t *len);
    int (*kv_create)(tm_store *st, const char *key, const void *val, size_t len);
    /* Optional (NULL: never in doubt): tm_store_in_doubt. */
    int (*in_doubt)(tm_store *st);
    /* Optional (NULL: read, bounds): tm_store_read_live, tm_store_bounds_live. */
    int (*read_live)(tm_store *st, const char *session, const char *stream, uint64_t after_seq,
                     size_t max_events, tm_event_visitor fn, void *ud);
    int (*bounds_live)(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out);
    /* Optional (NULL: tm_store_request_begin_later is TIDEMARK_ENOTSUP). */
    int (*request_begin_later)(tm_store *st, const tm_request_rec *rec, void **ticket);
    int (*request_begin_await)(tm_store *st, void *ticket);
};

/* Common header of every backend object. */
/* The store's metrics (tidemark_events_appended_total, commits, damage
 * found, ...), registered by tm_store_init_base on the options' registry. */
typedef struct tm_store_metrics {
    tm_counter *appended, *commits, *commit_failures, *recoveries, *corrupt, *checkpoint_stalls,
        *loss;
    tm_hist *commit_batch, *commit_latency_us;
} tm_store_metrics;

struct tm_store {
    const struct tm_store_ops *ops;
    tm_store_metrics m;
    char epoch[TM_EPOCH_LEN + 1];
    tm_commit_listener listener;
    void *listener_ud;
    tm_bus_listener bus;
    void *bus_ud;
};

/* Open a store by URI: "memory", "sqlite:PATH", "redis://HOST[:PORT][/DB]" or a
 * PostgreSQL connection URI ("postgresql://..." or "postgres://...").
 * Returns 0 or a negative code. */
int tm_store_open(const char *uri, const tm_store_options *opt, tm_store **out);
/* Set the listener told of every durable event. Call before any write, and
 * only where no store thread can call it yet (tests); servers pass it in
 * tm_store_options instead. */
void tm_store_set_listener(tm_store *st, tm_commit_listener fn, void *ud);
/* Publish a small message to every node sharing the store, this one
 * included (best effort: a node that is disconnected at that moment misses
 * it). channel: a short name without spaces. */
int tm_store_publish(tm_store *st, const char *channel, const void *data, size_t len);
/* Whether nodes share this store and hold leases (Redis): unfinished
 * requests must then be claimed (tm_store_request_claim) before recovery,
 * and recovery runs periodically, not only at start-up. */
int tm_store_shared(const tm_store *st);
/* Whether tm_store_request_begin_later is there (PostgreSQL, Redis). */
int tm_store_begins_later(const tm_store *st);
/* Claim a started request record left by a node whose lease lapsed.
 * 0: this node owns it now; TIDEMARK_EBUSY: live elsewhere or claimed.
 * Always 0 on single-process backends. */
int tm_store_request_claim(tm_store *st, const char *session, const char *key);
/* Whether a started record is this node's to finish: 1 yes, 0 no (absent,
 * finished, or another node's), or an error code. Always 1 on
 * single-process backends. */
int tm_store_request_mine(tm_store *st, const char *session, const char *key);
/* Make a started record this node's although another node began or holds
 * it: for a caller that won the right to run it another way (a task's
 * input round, claimed once across nodes; the cancel of a task waiting for
 * input), so that this node's effect and response pass the store's check
 * that the record is this node's. 0, TIDEMARK_EBUSY when it is finished,
 * TIDEMARK_ENOTFOUND. Always 0 on single-process backends. */
int tm_store_request_adopt(tm_store *st, const char *session, const char *key);
/* Close and free. */
void tm_store_close(tm_store *st);
/* Current writer epoch (16 hex digits). */
const char *tm_store_epoch(const tm_store *st);

/* Create a session. TIDEMARK_EEXIST if the id is taken. */
int tm_store_session_create(tm_store *st, const tm_session_rec *rec);
/* Create a session without waiting for it to be durable (for a fresh
 * random id: a taken id is not detected). Writes queued after it (its
 * streams, records, appends) commit with it or after it, so none is durable
 * without it; a later tm_store_sync or sync_since reports its failure.
 * Never blocks on I/O. TIDEMARK_ENOTSUP where the backend cannot (Redis):
 * use tm_store_session_create there. */
int tm_store_session_create_queued(tm_store *st, const tm_session_rec *rec);
/* 1 when tm_store_session_create_queued works on this store. */
int tm_store_can_queue_session_create(const tm_store *st);
/* 1 when writes go through a queue (SQLite, Redis), so tm_store_sync may
 * block; 0 when every write is done by the time its call returns (memory),
 * and tm_store_sync returns at once. */
int tm_store_queued(const tm_store *st);
/* Load a session; OUT rec must be released with tm_session_rec_clear(). */
int tm_store_session_get(tm_store *st, const char *id, tm_session_rec *out);
/* A session and one request record of it, read together: one round trip
 * where the store is remote (Redis). Returns what tm_store_session_get
 * returns. OUT sess (as tm_store_session_get); OUT *req_rc: what
 * tm_store_request_get returns for key, 0 meaning req is filled (release it
 * with tm_request_rec_clear()); 1 when the session read failed and the
 * record's result is not known. */
int tm_store_session_request_get(tm_store *st, const char *id, const char *key, tm_session_rec *sess,
                                 tm_request_rec *req, int *req_rc);
int tm_store_session_touch(tm_store *st, const char *id, int64_t now_ms);
/* Delete a session with all its streams. */
int tm_store_session_delete(tm_store *st, const char *id);
/* The same without waiting where writes are queued (SQLite): the delete
 * commits after every write queued before it; its failure is not reported
 * (for sessions nobody names any more, whose TTL would expire them too).
 * Elsewhere it is tm_store_session_delete. */
int tm_store_session_delete_queued(tm_store *st, const char *id);
void tm_session_rec_clear(tm_session_rec *rec);
/* The record's attributes as an object (new reference), or NULL when it has
 * none or they are not JSON. */
json_t *tm_session_rec_attrs(const tm_session_rec *rec);

/* Open a stream of a session. name "g" opens (or reopens) the standalone
 * stream; NULL creates the next POST stream "r<n>". OUT out: its name. */
int tm_store_stream_open(tm_store *st, const char *session, const char *name,
                         char out[TM_STREAM_MAX]);
/* Append one event (message bytes, stored and replayed as is). cb may run on
 * another thread, possibly before append() returns. */
int tm_store_append(tm_store *st, const char *session, const char *stream, const void *data,
                    size_t len, unsigned flags, tm_append_cb cb, void *ud);
/* Mark a stream ended without a further event. */
int tm_store_close_stream(tm_store *st, const char *session, const char *stream);
/* Visit up to max_events durable events with seq > after_seq, in order.
 * TIDEMARK_ERANGE when events after after_seq were trimmed (never skips). */
int tm_store_read(tm_store *st, const char *session, const char *stream, uint64_t after_seq,
                  size_t max_events, tm_event_visitor fn, void *ud);
/* Durable bounds of a stream. TIDEMARK_ENOTFOUND if the session has no such stream. */
int tm_store_bounds(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out);
/* tm_store_read and tm_store_bounds for a reader that is woken by every
 * commit to the stream (tm_store_notify_commit) and reads again then: a
 * store shared by nodes may answer from what this node committed itself,
 * so another node's commit shows once its wake-up has been delivered (not
 * for a cursor's check, which must see every node's commits at once). */
int tm_store_read_live(tm_store *st, const char *session, const char *stream, uint64_t after_seq,
                       size_t max_events, tm_event_visitor fn, void *ud);
int tm_store_bounds_live(tm_store *st, const char *session, const char *stream,
                         tm_stream_bounds *out);
/* Epoch under which seq was written (from the event or the trim record).
 * TIDEMARK_ENOTFOUND when neither is known. */
int tm_store_event_epoch(tm_store *st, const char *session, const char *stream, uint64_t seq,
                         char out[TM_EPOCH_LEN + 1]);

/* Append with a request completion and/or atomic effect riding along. The
 * seq is assigned before return for a live stream; TIDEMARK_ECLOSED if the
 * stream is closed or closing. */
int tm_store_append_ex(tm_store *st, const tm_append_req *req);

/* Load a request record. OUT out (tm_request_rec_clear). TIDEMARK_ENOTFOUND. */
int tm_store_request_get(tm_store *st, const char *session, const char *key, tm_request_rec *out);
/* Record rec (state started). With wait_durable, return only once durable.
 * TIDEMARK_EEXIST if a record with that key exists. */
int tm_store_request_begin(tm_store *st, const tm_request_rec *rec, int wait_durable);
/* Queue rec's begin now and learn its answer later, from
 * tm_store_request_begin_await (called exactly once per ticket, after the
 * caller's hold ended): ops queued in between by this thread under its
 * hold commit with the begin, and a write that needs the record to be this
 * node's (an effect, a response completing it) finds out in that same
 * transaction. Only where the store checks that in the transaction: 0 with
 * *ticket set, else TIDEMARK_ENOTSUP (nothing queued) or another error. */
int tm_store_request_begin_later(tm_store *st, const tm_request_rec *rec, void **ticket);
/* Wait for a ticket's begin: 0, TIDEMARK_EEXIST (the key was recorded
 * first, by another node), or the failure of its commit. Frees the ticket. */
int tm_store_request_begin_await(tm_store *st, void *ticket);
/* Visit every record still "started" that no live process owns (work a dead
 * process left behind; on a shared store, records of nodes whose lease
 * lapsed). */
int tm_store_requests_unfinished(tm_store *st, tm_request_visitor fn, void *ud);
void tm_request_rec_clear(tm_request_rec *rec);

/* Run application DDL (CREATE TABLE IF NOT EXISTS ...) in the effect database. */
int tm_store_exec_schema(tm_store *st, const char *sql);
/* Read from the effect database: rows as an array of objects (new ref). */
int tm_store_query(tm_store *st, const char *sql, const char *const *args, size_t nargs,
                   json_t **rows);
/* The rows atomic effects inserted into table (tidemark_txn_insert), in
 * commit order. OUT rows: array of {"id": n, <fields>} (new ref). Works on
 * every backend; on Redis every node sees the same rows. */
int tm_store_rows(tm_store *st, const char *table, json_t **rows);
/* Set one attribute of the session's attrs object to value (JSON text), or
 * remove it (value NULL), durably: returns once written. One attribute at a
 * time, so nodes changing different attributes never undo each other.
 * TIDEMARK_ENOTFOUND if there is no such session. */
int tm_store_session_set_attr(tm_store *st, const char *id, const char *name, const char *value);
/* Visit every session record (any order); fn returns nonzero to stop. */
int tm_store_sessions_each(tm_store *st, int (*fn)(void *ud, const tm_session_rec *rec), void *ud);
/* Visit every session record that has at least one of the n attributes
 * names (any order, each once); fn returns nonzero to stop. The SQLite
 * store finds them by an index of attribute names (a fan-out to the few
 * sessions subscribed to a uri reads those, not every session); the others
 * filter every session. */
int tm_store_sessions_with_attr(tm_store *st, const char *const *names, size_t n,
                                int (*fn)(void *ud, const tm_session_rec *rec), void *ud);
/* Delete sessions idle since before idle_before_ms; fn is told each id. */
int tm_store_sessions_expire(tm_store *st, int64_t idle_before_ms,
                             void (*fn)(void *, const char *), void *ud);

/* Wait until everything queued before this call is durable. TIDEMARK_EIO
 * when the store refuses writes, or (SQLite) when any write queued in the
 * 5 s before this call failed, even if the store recovered since: a record
 * queued without waiting (request_begin) may be among them. That is a
 * guess about which writes the caller cares for: tm_store_sync_since is
 * exact. */
int tm_store_sync(tm_store *st);
/* A position in the writer queue: every write queued after this call is at
 * or after it. Pair with tm_store_sync_since. 0 on stores without a queue. */
uint64_t tm_store_mark(tm_store *st);
/* Like tm_store_sync, but exact: TIDEMARK_EIO when any write queued at or
 * after mark failed (say a request record queued without waiting), even if
 * the store accepts writes again by now. Take the mark before the writes
 * whose durability matters (before request_begin). */
int tm_store_sync_since(tm_store *st, uint64_t mark);
/* Wait until every write queued before mark (tm_store_mark) is settled,
 * committed or failed; no status: to pace a writer that queues faster than
 * the store commits, while the writes after mark go on committing. At
 * once on stores without a queue. */
void tm_store_wait_settled(tm_store *st, uint64_t mark);
/* Hold the store's writer back while this thread queues the few writes of
 * one request (a call's stream, record, events and response), so that they
 * commit in one transaction; tm_store_release lets it go. Nested holds of a
 * thread count once; a wait of the holding thread on the store (sync, a
 * waited write) ends the hold first, so it cannot deadlock. For
 * microseconds of queueing only. No-op on stores without a queue. */
void tm_store_hold(tm_store *st);
void tm_store_release(tm_store *st);
/* A small value every node of the store shares (a secret: the sealing
 * key), kept as a row of its own (PostgreSQL: tm_kv). kv_create writes
 * it durably unless the key exists (TIDEMARK_EEXIST: read the winner's);
 * kv_get copies at most cap bytes into out, OUT *len its length
 * (TIDEMARK_ENOTFOUND, TIDEMARK_ERANGE when longer than cap).
 * TIDEMARK_ENOTSUP on stores without it (memory, SQLite, Redis keep such
 * values as they did: seal.c). */
int tm_store_kv_get(tm_store *st, const char *key, void *out, size_t cap, size_t *len);
int tm_store_kv_create(tm_store *st, const char *key, const void *val, size_t len);
/* Whether the store accepts writes now: 0, or TIDEMARK_EIO while it refuses
 * them: after a failed write (disk full, I/O error) until a probe write
 * succeeds — the SQLite store probes with backoff (100 ms doubling to 5 s)
 * and then accepts writes again without a restart — or for good once the
 * database is found damaged. For /readyz and typed errors; cheap (no I/O). */
int tm_store_writable(tm_store *st);
/* 1 while a commit whose outcome was not confirmed may still land (what it
 * wrote reads as absent now and may be there later), 0 when every such
 * commit has landed or never will. A reader that finds a record of such a
 * write absent cannot conclude it is absent while this is 1, and must ask
 * before its read (a 0 asked after it may follow a commit that landed in
 * between). */
int tm_store_in_doubt(tm_store *st);
/* Inside an append callback (tm_append_cb) that a store's writer runs: how
 * many writes committed with this one in one transaction; 0 anywhere else
 * (the memory store, a caller's own thread). For traces. */
size_t tm_store_callback_batch(void);
/* For backends: set around the append callbacks of a commit of n writes
 * (0 after them). */
void tm_store_callback_batch_set(size_t n);

/* The typed reason of a 503 while the store refuses writes:
 * "store_not_replicated" (a PostgreSQL primary without its synchronous
 * standby, durability replicated) or "store_unavailable". */
const char *tm_store_unavailable_reason(tm_store *st);

/* Backend constructors. */
int tm_store_memory_open(const tm_store_options *opt, tm_store **out);
/* Besides the database (WAL mode) it keeps PATH.lock (one writer per file:
 * a second open, from any process, fails with TIDEMARK_EBUSY) and PATH.head
 * (the durable head). Open fails with TIDEMARK_ERANGE when the database holds
 * fewer commits than PATH.head recorded (a damaged WAL, a restored older
 * copy) unless opt->accept_loss, and with TIDEMARK_EIO when PRAGMA
 * quick_check finds it damaged (run after an unclean shutdown, and at every
 * open of a database up to 64 MiB). Each refusal is logged at error. */
int tm_store_sqlite_open(const char *path, const tm_store_options *opt, tm_store **out);
/* Tests: cache entries of streams the SQLite store holds. */
size_t tm_store_sqlite_cached_streams(tm_store *st);
/* uri: "redis://HOST[:PORT][/DB]". TIDEMARK_EIO if the server cannot be reached;
 * a server still loading its dataset (-LOADING) is waited for, up to
 * opt->ready_wait_ms (default 60 s, logged every 5 s), then TIDEMARK_ETIMEDOUT.
 * A restarted server found loading on reconnect is waited for as long before
 * queued writes fail. */
int tm_store_redis_open(const char *uri, const tm_store_options *opt, tm_store **out);

/* uri: a libpq connection URI. TIDEMARK_EIO when no writable primary answers;
 * TIDEMARK_ENOTSUP with emit_early; TIDEMARK_ERANGE when the database's schema
 * is newer than this build's. */
int tm_store_pg_open(const char *uri, const tm_store_options *opt, tm_store **out);
/* 1 while a PostgreSQL store opened with durability replicated refuses
 * writes because its primary has no synchronous standby; 0 otherwise and on
 * every other store. */
int tm_store_pg_not_replicated(tm_store *st);

/* For backends: deliver the commit notification. */
void tm_store_notify_commit(tm_store *st, const char *session, const char *stream, uint64_t seq);
/* For backends: deliver a bus message to this node's bus listener. */
void tm_store_notify_bus(tm_store *st, const char *channel, const void *data, size_t len);
/* For backends, retention (one rule for every store; Redis applies it in its
 * scripts): the first seq a stream holding first..head keeps under opt's
 * count limit (first itself when nothing goes), and the wall-clock time
 * before which events go under its age limit (INT64_MIN: no limit). */
uint64_t tm_retain_first_by_count(const tm_store_options *opt, uint64_t first, uint64_t head);
int64_t tm_retain_cutoff_ms(const tm_store_options *opt, int64_t now_ms);
/* For backends: initialise the common header with a fresh random epoch and
 * opt's listeners (opt may be NULL). Before the backend starts a thread. */
int tm_store_init_base(tm_store *st, const struct tm_store_ops *ops, const tm_store_options *opt);

#endif
