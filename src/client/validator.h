/*
 * validator.h - the client's resumption validator: decides, for an event
 * arriving on a stream, whether it continues the stream exactly (dispatch
 * it), repeats what was already dispatched, or proves a fault.
 *
 * The rule it holds: once a stream is provable (its events carried
 * structured ids), every later event of it must name that same stream and be
 * seq = cursor + 1, or the stream is refused with a typed reason. There is no
 * fallback to a weaker policy: an opaque, empty or missing id on a provable
 * stream is a refusal, not an opaque event.
 */
#ifndef TM_VALIDATOR_H
#define TM_VALIDATOR_H
#include <stdint.h>

/* The longest event id the client keeps as a cursor (and sends back as
 * Last-Event-ID), in bytes. A longer id is malformed, never truncated. */
#define TM_CLIENT_ID_MAX 255

typedef enum tm_verdict {
    TM_V_DISPATCH = 0,            /* head = cursor + 1, never dispatched: resume */
    TM_V_SUPPRESS,                /* already dispatched, handlers idempotent: skip it */
    TM_V_PLAIN,                   /* no id on a stream that never had one: the message is
                                     handled, nothing is logged (nothing can be resumed) */
    TM_V_NOT_MONOTONIC,           /* head <= cursor: replay_not_monotonic */
    TM_V_GAP,                     /* head > cursor + 1: resumption_gap */
    TM_V_DUPLICATE,               /* already dispatched, handlers not idempotent: duplicate_effect */
    TM_V_LOG_INCONSISTENT,        /* never dispatched but not next after the dispatch log:
                                     dispatch_log_inconsistent (an event was skipped) */
    TM_V_BAD_ID,                  /* the id: field cannot be used (NUL byte, too long):
                                     malformed_event_id */
    TM_V_BAD_MESSAGE,             /* data that is not one JSON-RPC message (not UTF-8, not
                                     JSON, not JSON-RPC): malformed_event */
    TM_V_CONTINUITY_LOST,         /* a stream with ids continued by an event whose id proves
                                     nothing (opaque after structured, empty, missing):
                                     continuity_lost */
    TM_V_STREAM_MISMATCH,         /* the event names another stream than the one being
                                     read: stream_mismatch */
} tm_verdict;

/* What the arriving event's id is. */
typedef enum tm_id_kind {
    TM_ID_NONE = 0,   /* its block had no id: field of its own (SSE would inherit one) */
    TM_ID_EMPTY,      /* an empty id: (the server cleared the last event id) */
    TM_ID_STRUCTURED, /* <epoch>-<stream>-<seq> (a Tidemark server) */
    TM_ID_OPAQUE,     /* any other id (a foreign server) */
    TM_ID_MALFORMED,  /* unusable: a NUL byte, or longer than TM_CLIENT_ID_MAX */
} tm_id_kind;

/* What the stream being read has been so far. */
typedef enum tm_stream_kind {
    TM_STREAM_NEW = 0,  /* no event of it accepted yet, no cursor */
    TM_STREAM_PROVABLE, /* its events carry structured ids: seqs prove continuity */
    TM_STREAM_OPAQUE,   /* its events carry opaque ids: only the dispatch log deduplicates */
} tm_stream_kind;

typedef struct tm_validate_in {
    tm_id_kind id_kind;
    int message_ok;           /* data empty, or one valid JSON-RPC message (or a batch of them) */
    tm_stream_kind stream;
    int same_stream;          /* structured id: it names the stream being read (or that
                                 stream is new) */
    uint64_t head;            /* seq of the arriving event (structured ids) */
    uint64_t cursor;          /* seq of the saved cursor, 0 if none */
    int dispatched;           /* the event's id is in the dispatch log (processed or committed) */
    uint64_t last_dispatched; /* highest seq in the dispatch log for the stream, 0 if none */
    int idempotent;           /* handlers are idempotent keyed on the event id */
} tm_validate_in;

/* The verdict for one arriving event; rows in order, first match wins. */
tm_verdict tm_validate(const tm_validate_in *in);
/* The rows that need nothing but the event itself (its id kind and data):
 * checked on arrival, before an event is held back. TM_V_DISPATCH = pass. */
tm_verdict tm_validate_intake(tm_id_kind id_kind, int message_ok);
/* The seq rows alone, for a structured id on its own stream. */
tm_verdict tm_validate_seq(const tm_validate_in *in);
/* Before resuming from a saved cursor: a cursor ahead of the stream's
 * dispatch log proves a skipped event by itself (cursor saved, effect lost),
 * even when the stream has nothing left to send: dispatch_log_inconsistent.
 * TM_V_DISPATCH = consistent. */
tm_verdict tm_validate_saved(uint64_t cursor, uint64_t last_dispatched);
/* For opaque (foreign) ids only the dispatch log can be asked. */
tm_verdict tm_validate_opaque(int dispatched, int idempotent);
/* The typed reason of a verdict ("resumption_gap", ...), NULL for dispatch/suppress/plain. */
const char *tm_verdict_reason(tm_verdict v);

#endif
