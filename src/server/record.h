/*
 * record.h - the request-record rule: one for the 2025 era, the 2026-07-28
 * era, tasks and stdio (which reaches the server through the same request
 * path). A request that can have an effect is recorded under an identity
 * before it runs; a later request under the same identity is judged here,
 * never in the transport or era code:
 *
 *  - identity: (session, request key): the request id ("i:"/"s:"), or the
 *    idempotency key _meta["dev.tidemark/idempotency-key"] ("k:", and a
 *    hash of the input round's requestState and inputResponses);
 *  - fingerprint: (method, params) with params._meta left out, compared
 *    as JSON values with the record's message (the request as received);
 *  - verdict: no record -> new, run it; the same fingerprint -> completed:
 *    its stored response (under the new request's id), else in flight:
 *    attach to its stream (2025) or wait for its commit (2026-07-28);
 *    another fingerprint -> refused typed (id_reused / 
 *    idempotency_key_reused) and nothing runs, nothing is written;
 *  - after a crash recovery.c finishes what a dead process left started,
 *    re-running it only when tm_record_may_rerun says so (else
 *    outcome_unknown); a retry meanwhile is in flight;
 *  - every retry answered from a record or joined to the running call counts
 *    in tidemark_requests_deduplicated_total, every store read of a record
 *    for it in tidemark_request_lookups_total, in both eras.
 *
 * Why _meta is left out: it describes one transmission, not the call. The
 * TypeScript SDK sets _meta.progressToken to the JSON-RPC id of each send,
 * so a re-issue under a new id changes it; the idempotency key is equal by
 * construction; a 2026-07-28 request's client info, capabilities and log
 * level describe the client. Whatever changes the call's meaning (name,
 * arguments, task, requestState, inputResponses) is outside _meta.
 */
#ifndef TM_RECORD_H
#define TM_RECORD_H
#include "server_int.h"

#define TM_META_IDEM_KEY "dev.tidemark/idempotency-key"

typedef enum tm_rec_verdict {
    TM_REC_NEW = 0,  /* no record under the identity: run it */
    TM_REC_ANSWERED, /* completed: answered with its stored response */
    TM_REC_RUNNING,  /* begun, no outcome yet (here, on another node, or left
                        by a dead process that recovery finishes) */
    TM_REC_REUSED,   /* the identity names another request: refused */
    TM_REC_UNSETTLED, /* its response could not be made durable yet (503) */
    TM_REC_CLAIMED   /* another request of this process holds the identity's
                        claim: it is beginning it (wait: tm_record_await_claim) */
} tm_rec_verdict;

/* What the rule says of one request. answer (new ref, or NULL): the stored
 * response under the new request's id (ANSWERED; NULL when unreadable) or
 * the refusal (REUSED). stream, same_id: RUNNING, the first's stream ("" if
 * none) and whether it carries this request id. */
typedef struct tm_rec_look {
    tm_rec_verdict verdict;
    json_t *answer;
    int same_id;
    int claimed; /* NEW from tm_record_look: this request holds the claim */
    char stream[TM_STREAM_MAX];
} tm_rec_look;

/* 1 when now (a request message) is the request first (the recorded one,
 * a message) names: the same method and the same params, _meta aside. */
int tm_record_same(const json_t *first, const json_t *now);
/* The verdict of rec (NULL: no record) on raw: NEW, ANSWERED, RUNNING or
 * REUSED. A record whose message does not parse proves nothing: REUSED.
 * ANSWERED and RUNNING count as deduplicated on srv (NULL: not counted). */
tm_rec_verdict tm_record_judge(tidemark_server_t *srv, const tm_request_rec *rec,
                               const json_t *raw);
/* The recorded response with its id set to id (new ref); NULL if unreadable. */
json_t *tm_record_answer(const tm_request_rec *rec, json_t *id);
/* The refusal of m, whose identity names another request (new ref):
 * -32602 idempotency_key_reused under a key, else -32600 id_reused. */
json_t *tm_record_refusal(const tm_msg *m);

/* The rule for a tools/call m of a 2025 session (lone or in a batch): its
 * running call in sess's map, else pf's record read with the session (may
 * be NULL), else the store's (unless sess surely has none). Before the
 * record is read the identity is claimed (tm_record_claim): CLAIMED when
 * another request holds it; a NEW verdict keeps the claim (look->claimed),
 * which its call lets go when it is freed (tidemark_call.claimed), or the
 * caller if no call is made. OUT look (tm_rec_look_clear). */
void tm_record_look(tidemark_server_t *srv, tm_sess *sess, const tm_msg *m, tm_req_prefetch *pf,
                    tm_rec_look *look);
/* The same for the record (sid, key) of the store alone (2026-07-28 keys). */
void tm_record_look_store(tidemark_server_t *srv, const char *sid, const char *key,
                          const tm_msg *m, tm_rec_look *look);
void tm_rec_look_clear(tm_rec_look *look);

/* Wait, up to wait_ms, for the record (sid, key) to settle, and judge raw
 * against it at each commit of session sid (the store's commit listener
 * wakes the wait: tm_record_wake; nothing polls). OUT *answer as in
 * tm_rec_look. ANSWERED or REUSED; RUNNING when the wait ended first
 * (deadline, stop, a failed read). counted: the request was counted as
 * deduplicated already (else it is when answered). Blocks: a worker's. */
tm_rec_verdict tm_record_wait(tidemark_server_t *srv, const char *sid, const char *key,
                              const json_t *raw, int64_t wait_ms, int counted, json_t **answer);
/* The same for a 2025 call m of sess that a retry found running here
 * (counted already): its record may not be stored yet (an inline call's is
 * begun in the commit that completes it), which is waited for too. */
tm_rec_verdict tm_record_wait_outcome(tidemark_server_t *srv, tm_sess *sess, const tm_msg *m,
                                      int64_t wait_ms, json_t **answer);
/* The commit listener: events of session became durable. Cheap when
 * nothing waits (one atomic load). */
void tm_record_wake(tidemark_server_t *srv, const char *session);
/* The server stops (srv->stopping set): every wait ends now. */
void tm_record_wake_all(tidemark_server_t *srv);
/* The waits' state, made with the server, freed with it. */
int tm_record_waits_new(tidemark_server_t *srv);
void tm_record_waits_free(tidemark_server_t *srv);

/* The claim of the identity (sid, key) in this process, held by the one
 * request that found it new, from before its record is read until its
 * call is freed (by then the record is durable and holds the response, or
 * the call recorded nothing): two requests under one identity that arrive
 * at once never both run (both would find no record and no running call).
 * 1 taken, 0 held by another request, TIDEMARK_ENOMEM / _EINVAL. */
int tm_record_claim(tidemark_server_t *srv, const char *sid, const char *key);
void tm_record_unclaim(tidemark_server_t *srv, const char *sid, const char *key);
/* The same by its name "sid/key" (tidemark_call.idem). */
void tm_record_unclaim_name(tidemark_server_t *srv, const char *name);
/* Wait until m's identity in session sid is not claimed, or the deadline
 * (monotonic ms) or the stop. 1 when it is free. Blocks: a worker's. */
int tm_record_await_claim(tidemark_server_t *srv, const char *sid, const tm_msg *m,
                          int64_t deadline);

/* Whether recovery may run a dead process's call again (hints: its tool's
 * TIDEMARK_TOOL_*; key: its record key; modern: a 2026-07-28 call). */
int tm_record_may_rerun(int modern, const char *key, unsigned hints);

/* Build the request key of a tools/call into out (TM_REQ_KEY_MAX bytes):
 * "k:<idempotency key, escaped>" (then "#<32 hex>" for an input round: a
 * call carrying requestState or inputResponses) or its id key; exact, never
 * truncated. TIDEMARK_EINVAL when the message's id or key is not one (see
 * tm_call_meta_check). */
int tm_request_key(const tm_msg *m, char out[TM_REQ_KEY_MAX]);
/* Check what a tools/call carries in _meta that the server keys on: the
 * idempotency key must be a non-empty string of at most
 * TM_IDEM_KEY_MAX_BYTES. Marks m invalid (code -32602, typed reason) and
 * returns nonzero when not. */
int tm_call_meta_check(tm_msg *m);

#endif
