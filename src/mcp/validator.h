/*
 * validator.h - the client's resumption validator (DESIGN.md §7): decides,
 * for an event arriving on a stream, whether it continues the stream exactly
 * (dispatch it), repeats what was already dispatched, or proves a fault.
 */
#ifndef TM_VALIDATOR_H
#define TM_VALIDATOR_H
#include <stdint.h>

typedef enum tm_verdict {
    TM_V_DISPATCH = 0,            /* head = cursor + 1, never dispatched: resume */
    TM_V_SUPPRESS,                /* already dispatched, handlers idempotent: skip it */
    TM_V_NOT_MONOTONIC,           /* head <= cursor: replay_not_monotonic */
    TM_V_GAP,                     /* head > cursor + 1: resumption_gap */
    TM_V_DUPLICATE,               /* already dispatched, handlers not idempotent: duplicate_effect */
    TM_V_LOG_INCONSISTENT,        /* never dispatched but not next after the dispatch log:
                                     dispatch_log_inconsistent (an event was skipped) */
} tm_verdict;

typedef struct tm_validate_in {
    uint64_t head;            /* seq of the arriving event */
    uint64_t cursor;          /* seq of the saved cursor, 0 if none */
    int dispatched;           /* the event is in the dispatch log (processed or committed) */
    uint64_t last_dispatched; /* highest seq in the dispatch log for the stream, 0 if none */
    int idempotent;           /* handlers are idempotent keyed on the event id */
} tm_validate_in;

/* The verdict for one arriving event with a structured (Tidemark) id. */
tm_verdict tm_validate(const tm_validate_in *in);
/* For opaque (foreign) ids only the dispatch log can be asked. */
tm_verdict tm_validate_opaque(int dispatched, int idempotent);
/* The typed reason of a verdict ("resumption_gap", ...), NULL for dispatch/suppress. */
const char *tm_verdict_reason(tm_verdict v);

#endif
