/* writer.h - the group-commit writer of the queued stores (SQLite, Redis).
 *
 * Callers push ops onto a queue (opqueue.h); one writer thread takes what
 * is queued as one batch and has the backend commit it as one unit (one
 * transaction, one MULTI/EXEC), then, in this order: folds the outcome into
 * the backend's caches (its settle hook, under its own lock, which names the
 * streams to wake), runs the append callbacks, tells the commit listener
 * with no lock held, and lets waiters go. The policy lives here once:
 *
 *  - batching: everything queued while a commit is in flight rides in the
 *    next one (at most batch_max ops);
 *  - barriers (tm_writer_sync): settled after every op queued before them,
 *    never sent to the backend;
 *  - failure: a batch whose commit fails fails whole, with every op queued
 *    behind it (an append's seq was handed out on top of it); with a probe
 *    hook, writes are then refused until a probe succeeds (backoff
 *    100 ms doubling to 5 s), and the backend resets its caches;
 *  - which failures a barrier reports (tm_writer_sync, _sync_since);
 *  - maintenance (age retention) every maintain_ms while writes are
 *    accepted;
 *  - session touches written at most once per touch_every_ms.
 *
 * A backend's op struct starts with a tm_wop. Hooks run on the writer
 * thread. */
#ifndef TM_WRITER_H
#define TM_WRITER_H
#include "opqueue.h"
#include "store.h"
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* The writer's part of an op: the first member of a backend's op struct. */
typedef struct tm_wop {
    tm_qop q;              /* first: the queue's part (status, ctr, sync) */
    tm_append_cb cb;       /* an append's callback, told once settled */
    void *cb_ud;
    uint64_t seq;          /* an append's seq, told to cb on success; the backend's otherwise */
    int64_t enq_us;        /* monotonic time (us) made or queued (push sets it when 0):
                              the commit latency of appends, the sync window */
    pthread_t thread;      /* with report: the thread whose next sync hears a failure */
    unsigned char append;  /* an append: callback and latency */
    unsigned char report;  /* queued without waiting and without callback: a failure
                              (other than TIDEMARK_EEXIST) is told to thread's next sync */
    unsigned char barrier; /* the writer's own (tm_writer_sync) */
    uint64_t since;        /* a barrier: report ops queued before this queue position
                              (tm_writer_sync_since's mark) are not its concern */
} tm_wop;

typedef struct tm_writer tm_writer;

typedef struct tm_writer_hooks {
    /* Commit the batch (n ops, oldest first, linked through q.next) as one
     * unit, setting each op's q.status (0, or that op's own refusal, which
     * leaves the rest). Return 0 when the batch is durable, or a TIDEMARK_E*
     * code when none of it is. */
    int (*commit)(void *be, tm_wop *batch, size_t n);
    /* After commit (rc 0) or a failure (rc: every op's status): fold the
     * outcome into the backend's state, under its own lock, and name the
     * streams the listener must hear of (tm_writer_wake; best outside that
     * lock). Also called with the ops failed while writes are refused
     * (commit not called). */
    void (*settle)(void *be, tm_wop *batch, int rc);
    /* Optional: after the listener was told, before ops are let go. */
    void (*after)(void *be, tm_wop *batch);
    /* Free an op nobody waits for. */
    void (*release)(tm_wop *o);
    /* Optional: every maintain_ms while writes are accepted (age retention). */
    void (*maintain)(void *be);
    /* Optional: between two commits, right before the next one. */
    void (*between)(void *be);
    /* Optional: a small write after a failed commit; 0 once writes succeed.
     * Without it a failure fails what is queued and the next batch is tried. */
    int (*probe)(void *be);
    /* With probe: refuse (on) or accept (off: reset the caches to the durable
     * state first) writes, under the backend's lock. */
    void (*refuse)(void *be, int on);
    /* Optional: nonzero while the backend refuses writes for its own reason
     * (a damaged database): tm_writer_sync then says TIDEMARK_EIO. */
    int (*refusing)(void *be);
} tm_writer_hooks;

typedef struct tm_writer_config {
    const char *name;       /* for log lines, e.g. "sqlite: PATH" */
    tm_store *store;        /* whose commit listener tm_writer_wake tells */
    void *be;               /* the hooks' first argument */
    const tm_writer_hooks *hooks;
    size_t batch_max;       /* ops per batch (0: everything queued) */
    int64_t maintain_ms;    /* 0: no maintenance */
    int64_t sync_window_us; /* plain sync reports failures of ops queued this long
                               before it (0: none) */
    int64_t touch_every_ms; /* 0: 5000 */
} tm_writer_config;

/* A stopped writer with an empty queue. Returns 0 or TIDEMARK_ENOMEM. */
int tm_writer_new(const tm_writer_config *cfg, tm_writer **out);
/* Start the thread. TIDEMARK_EIO when it cannot be made. */
int tm_writer_start(tm_writer *w);
/* Commit what is queued, then end the thread (no-op when not started). */
void tm_writer_stop(tm_writer *w);
/* Stop, then free (the queue must be empty: stop drained it). NULL is fine. */
void tm_writer_free(tm_writer *w);

/* Queue o (its q.sync says whether a caller waits). The backend calls it
 * under its own lock where queue order must follow its state. */
void tm_writer_push(tm_writer *w, tm_wop *o);
/* Queue o with q.sync set and wait until it is settled: its status (the
 * caller frees o). */
int tm_writer_run(tm_writer *w, tm_wop *o);
/* Wait until o, pushed with q.sync set, is settled: its status (the
 * caller frees o). Ends this thread's hold first. */
int tm_writer_await(tm_writer *w, tm_wop *o);
/* Hold the writer back while this thread queues a few ops that should
 * commit together / let it go (tm_opqueue_hold). */
void tm_writer_hold(tm_writer *w);
void tm_writer_release(tm_writer *w);
/* A position in the queue: every op pushed after this call is at or after it. */
uint64_t tm_writer_mark(tm_writer *w);
/* Wait until every op queued before mark is settled (committed or failed:
 * no status; for pacing, not for durability's answer). */
void tm_writer_wait_settled(tm_writer *w, uint64_t mark);
/* Wait until everything queued before this call is settled. TIDEMARK_EIO
 * when writes are refused, when an op this thread queued with report failed
 * since its last sync (told once), or when an op queued in the sync window
 * before this call failed. */
int tm_writer_sync(tm_writer *w);
/* The same, exact instead of the window: TIDEMARK_EIO when any op queued at
 * or after mark failed (mark 0: from the first). A failed report op of this
 * thread queued before mark is forgotten here, not told: it belongs to what
 * the thread did before (another call on the same worker). */
int tm_writer_sync_since(tm_writer *w, uint64_t mark);
/* Whether writes are refused now (after a failed commit, until a probe
 * succeeded). Cheap. */
int tm_writer_refusing(tm_writer *w);

/* From the settle hook: tell the listener that session/stream is durable up
 * to seq, once per stream per batch (the highest seq named wins), after the
 * callbacks, with no lock held. The strings are copied. */
void tm_writer_wake(tm_writer *w, const char *session, const char *stream, uint64_t seq);

/* Session touches: 1 when a touch of session id at now_ms is to be written
 * (at most one per touch_every_ms per session; the time is noted), 0 when
 * not. OUT first: the writer did not know the session (the caller checks
 * that it exists, and forgets it when it does not). */
int tm_writer_touch_due(tm_writer *w, const char *id, int64_t now_ms, int *first);
/* The session was written at ms (made): touches within touch_every_ms skip. */
void tm_writer_touch_note(tm_writer *w, const char *id, int64_t ms);
/* The session is gone (deleted, expired, never there). */
void tm_writer_touch_forget(tm_writer *w, const char *id);

#endif
