/*
 * cstate.h - the client's durable state, in SQLite:
 * the session, a cursor per stream, the dispatch log (event id -> processed
 * | committed) and the outstanding requests. Thread-safe (one connection,
 * one mutex); transactions are explicit so an application's effect, its
 * dispatch row and the cursor can share one. Every function but close, db
 * and rollback returns 0 or a negative TIDEMARK_E* code.
 */
#ifndef TM_CLIENT_CSTATE_H
#define TM_CLIENT_CSTATE_H
#include <jansson.h>
#include <sqlite3.h>
#include <stdint.h>

typedef struct tm_cstate tm_cstate;

enum { TM_DISPATCH_NONE = 0, TM_DISPATCH_PROCESSED = 1, TM_DISPATCH_COMMITTED = 2 };

typedef struct tm_cursor {
    char event_id[256];
    uint64_t seq;     /* 0 for foreign ids */
    int known;        /* a cursor is stored */
} tm_cursor;

/* Open (create) the state at path; NULL path = in memory. schema: optional
 * application DDL. OUT st. */
int tm_cstate_open(const char *path, const char *schema, tm_cstate **st);
void tm_cstate_close(tm_cstate *st);
/* The connection, for effects written through tidemark_txn_exec. Use only
 * between tm_cstate_begin and commit/rollback. */
sqlite3 *tm_cstate_db(tm_cstate *st);

/* Session: OUT strings are copies (free()); NULL when none stored.
 * TIDEMARK_ENOTFOUND when no session is stored, TIDEMARK_EIO when the
 * state cannot be read. */
int tm_cstate_session_get(tm_cstate *st, char **url, char **id, char **version, char **server);
int tm_cstate_session_set(tm_cstate *st, const char *url, const char *id, const char *version,
                          const char *server);
/* Forget the session with its cursors, dispatch log and outstanding requests. */
int tm_cstate_session_clear(tm_cstate *st);
/* OUT id: a request id never used before in this state (survives restarts). */
int tm_cstate_next_request_id(tm_cstate *st, int64_t *id);
/* OUT proven: 1 once an event with a structured (Tidemark) id arrived in
 * this session: the server keys its call records by request id, so
 * re-sending a call under the same request id is answered from the record.
 * Cleared with the session. */
int tm_cstate_session_proven(tm_cstate *st, int *proven);

/* Transactions (a mutex that is not recursive is held from begin to end:
 * nothing else of the state may be called by the thread in between but
 * the "inside a transaction" functions). A rollback cannot be refused; one
 * SQLite fails to run is logged. */
int tm_cstate_begin(tm_cstate *st);
int tm_cstate_commit(tm_cstate *st);
void tm_cstate_rollback(tm_cstate *st);

/* Inside a transaction. */
int tm_cstate_cursor_get(tm_cstate *st, const char *stream, tm_cursor *out);
int tm_cstate_cursor_set(tm_cstate *st, const char *stream, const char *event_id, uint64_t seq);
/* OUT state: the event's state in the dispatch log (TM_DISPATCH_*). */
int tm_cstate_dispatch_state(tm_cstate *st, const char *event_id, int *state);
/* OUT seq: the highest seq dispatched (processed or committed) on a
 * stream, 0 if none. */
int tm_cstate_last_dispatched(tm_cstate *st, const char *stream, uint64_t *seq);
int tm_cstate_dispatch_set(tm_cstate *st, const char *event_id, const char *stream, uint64_t seq,
                           int state);
/* Record that this session is proven (see tm_cstate_session_proven). */
int tm_cstate_session_prove(tm_cstate *st);
/* The stream an outstanding request's events arrive on, in the transaction
 * of its first event: a crash can never leave that event's cursor without
 * the request knowing its stream. */
int tm_cstate_outstanding_stream_txn(tm_cstate *st, int64_t id, const char *stream);
/* The request is over, in the transaction that applies its response: a
 * crash right after cannot leave it outstanding with nothing left to read. */
int tm_cstate_outstanding_done_txn(tm_cstate *st, int64_t id);

/* The same inside a transaction (a CreateTaskResult that came as an event). */
int tm_cstate_outstanding_task_txn(tm_cstate *st, int64_t id, const char *task_id);
/* A task's answered inputRequests keys are forgotten with its outcome. */
int tm_cstate_task_forget_txn(tm_cstate *st, const char *task_id);

/* A task's inputRequests keys already answered (outside a transaction):
 * one key is never put to the application twice, across restarts too.
 * OUT answered. */
int tm_cstate_task_input_answered(tm_cstate *st, const char *task_id, const char *key, int *answered);
int tm_cstate_task_input_set(tm_cstate *st, const char *task_id, const char *key);

/* Read application tables (outside a transaction). OUT rows. */
int tm_cstate_query(tm_cstate *st, const char *sql, const char *const *args, size_t nargs,
                    json_t **rows);

/* Outstanding requests (outside or inside a transaction). */
/* tasks: the request declared the tasks extension (a resume declares it
 * again). */
int tm_cstate_outstanding_add(tm_cstate *st, int64_t id, const char *method, const char *params,
                              const char *idem_key, int tasks);
/* The server made the request a task: its id, before anything else is
 * done with it (a resume then polls the task instead of re-sending). */
int tm_cstate_outstanding_task(tm_cstate *st, int64_t id, const char *task_id);
int tm_cstate_outstanding_stream(tm_cstate *st, int64_t id, const char *stream);
int tm_cstate_outstanding_done(tm_cstate *st, int64_t id);
/* OUT rows: array of {request_id, method, params, stream, idem_key, tasks,
 * task_id}. */
int tm_cstate_outstanding_list(tm_cstate *st, json_t **rows);

/* The whole state as JSON (outside a transaction): OUT {session, proven,
 * cursors: [{stream, event_id, seq}], dispatch: [{event_id, stream, seq,
 * state}], outstanding: [...]}. */
int tm_cstate_dump(tm_cstate *st, json_t **out);
/* Small records by kind and key (authorization: registrations and tokens
 * by issuer). get: OUT value (malloc'd) or NULL when absent; set: NULL
 * value deletes. */
int tm_cstate_kv_get(tm_cstate *st, const char *kind, const char *key, char **value);
int tm_cstate_kv_set(tm_cstate *st, const char *kind, const char *key, const char *value);

#endif
