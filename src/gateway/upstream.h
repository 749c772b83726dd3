/*
 * upstream.h - the MCP session with one stdio child, kept on behalf of
 * clients (the gateway's side of the child; child.h underneath).
 *
 * What it does:
 *  - the handshake: initialize with the client's recorded params, then
 *    notifications/initialized; tm_upstream_start returns once it is done;
 *  - id mapping: every client request gets a fresh child-side id (an
 *    integer, never reused, not even across restarts); the response comes
 *    back with the client's own id restored, to the tag the gateway gave. A
 *    request's _meta.progressToken is replaced by one of ours
 *    ("tm-p-<child id>"), and the child's notifications/progress for it come
 *    back with the client's token restored and the request's tag, so
 *    clients sharing one child never see each other's progress;
 *  - server->client requests (sampling, elicitation, roots/list, ping):
 *    surfaced with the child's own id and the child's generation; the
 *    answer goes back with tm_upstream_answer (once; a stale or repeated
 *    answer is TIDEMARK_ENOTFOUND);
 *  - in-flight tracking: when the child dies, every request it had is
 *    reported: re-sent to the restarted child when it was marked
 *    TM_UPSTREAM_RESEND (at most max_resends times), otherwise on_lost
 *    (the gateway ends it outcome_unknown). Requests made while a child is
 *    being restarted wait and are sent once it is initialized;
 *  - restart: a dead child is spawned again (backoff restart_delay_ms,
 *    doubling up to 5 s; after max_restarts failed starts in a row the
 *    upstream gives up: everything waiting is on_lost, later requests get
 *    TIDEMARK_ECLOSED), re-initialized with the recorded params, and
 *    on_ready tells the gateway it is back (with the new initialize result).
 *
 * Threads: the child's reader thread calls on_response, on_notification
 * and on_request; a supervisor thread of the upstream calls on_down, on_lost
 * and on_ready (after a restart); tm_upstream_start calls on_ready for the
 * first generation in the caller's thread; tm_upstream_free calls on_lost
 * for what is left. Every tm_upstream_* call except free is thread-safe and
 * may be made from the callbacks. The callbacks are never called with a lock
 * of the upstream held. A callback on the reader thread that writes to the
 * child (tm_upstream_answer from on_request, say) blocks that reader while
 * it writes: fine for small messages, but a large one to a child that is
 * itself blocked writing to us waits for the write timeout (30 s; then the
 * child is killed), so the gateway hands big writes to another thread.
 * Lock order: u->child_lock (rwlock: shared while a message is written to the
 * child, exclusive to swap the child) before u->mu (maps, state); the
 * child's and the writer's locks (child.h, stdio.h) come after both.
 */
#ifndef TM_GATEWAY_UPSTREAM_H
#define TM_GATEWAY_UPSTREAM_H
#include "gateway/child.h"
#include <jansson.h>
#include <stddef.h>

typedef struct tm_upstream tm_upstream;

/* tm_upstream_request flag: the request may be sent again to a restarted
 * child (the operator marked the tool safe, or it has no effect). */
#define TM_UPSTREAM_RESEND 1u

typedef struct tm_upstream_callbacks {
    /* The child is initialized: first start (generation 1) and every restart.
     * init_result borrowed: the child's initialize result. */
    void (*on_ready)(void *ud, unsigned generation, json_t *init_result);
    /* The response to the request sent with tag, its id the client's again.
     * Borrowed. */
    void (*on_response)(void *ud, void *tag, json_t *response);
    /* A notification from the child. tag: the request whose progress token it
     * carries (the client's token restored), else NULL. Borrowed. */
    void (*on_notification)(void *ud, void *tag, json_t *msg);
    /* A request from the child, id as the child sent it. Borrowed. */
    void (*on_request)(void *ud, unsigned generation, json_t *msg);
    /* The request sent with tag will get no response: TIDEMARK_ECLOSED (its
     * child died and it is not re-sent, or the upstream gave up),
     * TIDEMARK_ECANCELED (tm_upstream_free). request: as the client sent it. */
    void (*on_lost)(void *ud, void *tag, const json_t *request, int err);
    /* The child of generation died; restarting 1 if another one is coming.
     * Its server->client requests are void from now on. */
    void (*on_down)(void *ud, unsigned generation, const tm_child_exit *ex, int restarting);
    void *ud;
} tm_upstream_callbacks;

typedef struct tm_upstream_config {
    const char *const *argv; /* the command (child.h) */
    const char *const *envp; /* NULL: ours */
    const char *cwd;         /* NULL: ours */
    const char *name;        /* for the log; NULL: argv[0]'s base name */
    const json_t *init_params; /* the client's initialize params (copied); required */
    size_t max_message;      /* 0: TM_STDIO_DEFAULT_MAX */
    int init_timeout_ms;     /* the child's initialize answer; 0: 10000 */
    int kill_grace_ms;       /* SIGTERM to SIGKILL; 0: 2000 */
    int no_restart;          /* 1: a dead child is not restarted */
    int max_restarts;        /* failed starts in a row before giving up; 0: 5 */
    int restart_delay_ms;    /* first backoff; 0: 100 */
    int max_resends;         /* per TM_UPSTREAM_RESEND request; 0: 1 */
    tm_upstream_callbacks cb;
} tm_upstream_config;

/* Spawn the child and initialize it. OUT *out. Returns 0, TIDEMARK_EINVAL,
 * TIDEMARK_ENOTFOUND (no such program), TIDEMARK_EPEER (the child answered
 * initialize with an error), TIDEMARK_ETIMEDOUT, TIDEMARK_ECLOSED (it died
 * during the handshake), TIDEMARK_ENOMEM, TIDEMARK_EIO. */
int tm_upstream_start(const tm_upstream_config *cfg, tm_upstream **out);
/* Send a client request (its id the client's; copied, never modified).
 * tag: the gateway's handle for it (unique among in-flight requests, not
 * NULL). Returns 0 (the answer comes through on_response or on_lost),
 * TIDEMARK_EINVAL (not a request), TIDEMARK_EEXIST (tag in flight),
 * TIDEMARK_ECLOSED (the upstream gave up or is stopping), TIDEMARK_ENOMEM.
 * A write that fails after 0 was returned is reported like a death: the
 * child is killed and the request is resent or lost. */
int tm_upstream_request(tm_upstream *u, const json_t *request, unsigned flags, void *tag);
/* The client cancelled tag: notifications/cancelled goes to the child with
 * its id; no callback for tag comes after this returns (it waits for one
 * already under way, so it must not be called from a callback).
 * TIDEMARK_ENOTFOUND if not in flight (its response or loss may have been
 * reported already). reason may be NULL. */
int tm_upstream_cancel(tm_upstream *u, void *tag, const char *reason);
/* A client notification for the child (roots/list_changed, ...), as is.
 * TIDEMARK_ECLOSED when no child is ready (it is not queued). */
int tm_upstream_notify(tm_upstream *u, const json_t *notification);
/* The client's answer (result or error, id the child's) to a request the
 * child of generation made. TIDEMARK_ENOTFOUND: no such pending request
 * (already answered, or from a dead child). */
int tm_upstream_answer(tm_upstream *u, unsigned generation, const json_t *response);
/* OUT *gen: the current generation (1 for the first child). Returns 0. */
int tm_upstream_generation(tm_upstream *u, unsigned *gen);
/* OUT *pid: the current child's, 0 when there is none. */
int tm_upstream_pid(tm_upstream *u, pid_t *pid);
/* OUT *result: the last initialize result (new reference), NULL before. */
int tm_upstream_init_result(tm_upstream *u, json_t **result);
/* OUT *n: requests in flight or waiting for a child. Returns 0. */
int tm_upstream_in_flight(tm_upstream *u, size_t *n);
/* Stop: the child is killed and reaped, the threads joined, whatever is in
 * flight is on_lost(TIDEMARK_ECANCELED). Not from a callback. */
void tm_upstream_free(tm_upstream *u);

#endif
