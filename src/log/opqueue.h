/* opqueue.h - the queue between a store's callers and its writer thread
 * (writer.h: group commit, shared by the SQLite and Redis stores). Callers
 * push ops; the writer takes what is queued as one batch, commits it, then
 * settles the batch: an op a caller waits for is marked done (the caller
 * frees it), the others are released. */
#ifndef TM_OPQUEUE_H
#define TM_OPQUEUE_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* The queue's part of an op: the first member of a store's op struct. */
typedef struct tm_qop {
    struct tm_qop *next;
    int sync;      /* a caller waits for it (tm_opqueue_wait) and frees it */
    int done;      /* settled */
    int status;    /* 0 or a TIDEMARK_E* code, set by the writer */
    uint64_t ctr;  /* queue order, from 1 */
} tm_qop;

/* The most ops one hold keeps back from the writer (tm_opqueue_hold). */
#define TM_HOLD_MAX_OPS 256

/* A thread's hold (tm_opqueue_hold): ops pushed at or after from wait. */
typedef struct tm_ophold {
    uint64_t from;
    struct tm_ophold *next;
} tm_ophold;

typedef struct tm_opqueue {
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* the writer waits for work (monotonic clock) */
    pthread_cond_t done_cv; /* callers wait for their op */
    tm_qop *head, *tail;
    uint64_t next_ctr;
    uint64_t settled;  /* every op numbered up to here is settled (batches go in order) */
    int stopping;
    tm_ophold *holds; /* the threads' holds (tm_opqueue_hold) */
} tm_opqueue;

/* Initialise an empty queue. Returns 0 or TIDEMARK_ENOMEM. */
int tm_opqueue_init(tm_opqueue *q);
/* Release the queue's locks (the queue must be empty and unused). */
void tm_opqueue_destroy(tm_opqueue *q);
/* Append o (numbered in o->ctr) and wake the writer. */
void tm_opqueue_push(tm_opqueue *q, tm_qop *o);
/* Wait until the writer settled o (pushed with o->sync set). Returns its status. */
int tm_opqueue_wait(tm_opqueue *q, tm_qop *o);
/* Writer: wait until ops are queued, the queue is stopped, or (wake_ms > 0)
 * the monotonic clock (tm_now_ms) reaches wake_ms; then take up to max
 * queued ops (0: all), oldest first. OUT n: how many; OUT stop: 1 once
 * stopped with nothing left. Returns the batch, or NULL. */
tm_qop *tm_opqueue_take(tm_opqueue *q, size_t max, int64_t wake_ms, size_t *n, int *stop);
/* Writer: settle a batch taken with tm_opqueue_take: ops a caller waits for
 * are marked done and their callers woken; release(o, ud) gets the others. */
void tm_opqueue_settle(tm_opqueue *q, tm_qop *batch, void (*release)(tm_qop *o, void *ud),
                       void *ud);
/* The position the next op pushed will get (every later push is at or after it). */
uint64_t tm_opqueue_mark(tm_opqueue *q);
/* Wait until every op numbered below mark (tm_opqueue_mark) is settled, or
 * the queue is stopping. Ends this thread's hold first, as tm_opqueue_wait. */
void tm_opqueue_wait_settled(tm_opqueue *q, uint64_t mark);
/* Hold the writer back while this thread pushes several ops, so that they
 * commit in one batch (one transaction, one fsync); tm_opqueue_release
 * lets it go. The writer still takes what was queued before the hold
 * began; from there on it waits, for every thread's ops (queue order is
 * kept), so a hold is for a few microseconds of pushing. A hold keeps back
 * at most TM_HOLD_MAX_OPS ops: when this thread has pushed that many, they
 * go to the writer and the hold goes on from its next op, so a long run of
 * pushes (an inline call's thousands of events) commits while it is still
 * pushing, and other threads' ops wait at most that long. Nested holds of
 * one thread count as one. A wait of this thread on the queue
 * (tm_opqueue_wait) ends its hold first, so a hold can never deadlock on
 * its own op. */
void tm_opqueue_hold(tm_opqueue *q);
void tm_opqueue_release(tm_opqueue *q);
/* Tell the writer to stop once the queue is empty. */
void tm_opqueue_stop(tm_opqueue *q);

#endif
