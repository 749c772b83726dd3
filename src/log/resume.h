/*
 * resume.h - the server's resume table (docs/design.md, "The contract", item 4), minus the 409 row,
 * which the transport decides atomically when it attaches the stream.
 */
#ifndef TM_RESUME_H
#define TM_RESUME_H
#include "store.h"

typedef enum tm_resume_outcome {
    TM_RESUME_OK = 0,
    TM_RESUME_MALFORMED,      /* malformed_cursor */
    TM_RESUME_UNKNOWN_STREAM, /* unknown_stream */
    TM_RESUME_AHEAD,          /* cursor_ahead */
    TM_RESUME_GAP,            /* resumption_gap */
    TM_RESUME_EPOCH,          /* epoch_mismatch */
} tm_resume_outcome;

typedef struct tm_resume_decision {
    tm_resume_outcome outcome;
    char stream[TM_STREAM_MAX];
    uint64_t cursor_seq; /* seq the client holds */
    uint64_t after_seq;  /* replay starts after this (gap: first_retained-1) */
    uint64_t head;       /* durable head at decision time */
    uint64_t gap_from, gap_to; /* missing range, inclusive, for GAP */
    int unmacd;          /* with auth: the id had no mac (issued before macs) */
} tm_resume_decision;

/* Who issued an id: verify returns 1 when id->mac is the mac this store's
 * key gives (session, id), else 0 (the server: tm_seal_event_verify). */
typedef struct tm_id_auth {
    int (*verify)(void *ud, const char *session, const tm_event_id *id);
    void *ud;
} tm_id_auth;

/* Decide how to answer a Last-Event-ID for a session. Returns 0 with the
 * outcome in OUT d, or a negative code when the store failed.
 * With auth, first of all an id whose mac does not verify is
 * malformed_cursor; an id without a mac (issued before macs) goes through
 * the table too, but is malformed_cursor where it would be cursor_ahead:
 * cursor_ahead is only ever an id this store issued. auth NULL takes ids
 * on their structure alone (tests of the other rows). */
int tm_resume_decide_auth(tm_store *st, const char *session, const char *cursor,
                          const tm_id_auth *auth, tm_resume_decision *d);
/* tm_resume_decide_auth without auth. */
int tm_resume_decide(tm_store *st, const char *session, const char *cursor,
                     tm_resume_decision *d);
/* The typed reason string for an outcome ("malformed_cursor", ...). */
const char *tm_resume_reason(tm_resume_outcome o);

#endif
