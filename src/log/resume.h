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
} tm_resume_decision;

/* Decide how to answer a Last-Event-ID for a session. Returns 0 with the
 * outcome in OUT d, or a negative code when the store failed. */
int tm_resume_decide(tm_store *st, const char *session, const char *cursor,
                     tm_resume_decision *d);
/* The typed reason string for an outcome ("malformed_cursor", ...). */
const char *tm_resume_reason(tm_resume_outcome o);

#endif
