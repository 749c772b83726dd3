/* validator.c - the client's resumption validator; rows in the order of
 * validator.h and docs/design.md ("The client"). */
#include "validator.h"
#include <stddef.h>

tm_verdict tm_validate_intake(tm_id_kind id_kind, int message_ok)
{
    if (id_kind == TM_ID_MALFORMED)
        return TM_V_BAD_ID;
    /* An event whose data cannot be handed to a handler must not be logged
     * as dispatched: that would count it applied although nothing ran. */
    if (!message_ok)
        return TM_V_BAD_MESSAGE;
    return TM_V_DISPATCH;
}

tm_verdict tm_validate_seq(const tm_validate_in *in)
{
    if (in->head <= in->cursor) {
        /* A replay of what we hold is fine only if it is a dispatched event
         * of an idempotent application being re-sent; never go backwards. */
        return TM_V_NOT_MONOTONIC;
    }
    if (in->head > in->cursor + 1)
        return TM_V_GAP;
    if (in->dispatched)
        return in->idempotent ? TM_V_SUPPRESS : TM_V_DUPLICATE;
    /* The cursor may have been saved ahead of the dispatch log
     * (cursor_before_dispatch and a crash): the event after the cursor is
     * then not the event after the last dispatched one. */
    if (in->head != in->last_dispatched + 1 && in->last_dispatched != 0)
        return TM_V_LOG_INCONSISTENT;
    if (in->last_dispatched == 0 && in->cursor > 0 && in->head != 1)
        return TM_V_LOG_INCONSISTENT;
    return TM_V_DISPATCH;
}

tm_verdict tm_validate_saved(uint64_t cursor, uint64_t last_dispatched)
{
    /* Every accepted event gets its dispatch row with (or before) its
     * cursor, save in cursor_before_dispatch, which a crash then betrays. */
    return cursor > last_dispatched ? TM_V_LOG_INCONSISTENT : TM_V_DISPATCH;
}

tm_verdict tm_validate_opaque(int dispatched, int idempotent)
{
    if (!dispatched)
        return TM_V_DISPATCH;
    return idempotent ? TM_V_SUPPRESS : TM_V_DUPLICATE;
}

tm_verdict tm_validate(const tm_validate_in *in)
{
    tm_verdict v = tm_validate_intake(in->id_kind, in->message_ok);
    if (v != TM_V_DISPATCH)
        return v;
    switch (in->stream) {
    case TM_STREAM_PROVABLE:
        /* Proven once, proven always: nothing weaker continues it. */
        if (in->id_kind != TM_ID_STRUCTURED)
            return TM_V_CONTINUITY_LOST;
        if (!in->same_stream)
            return TM_V_STREAM_MISMATCH;
        return tm_validate_seq(in);
    case TM_STREAM_OPAQUE:
        if (in->id_kind == TM_ID_STRUCTURED)
            return TM_V_STREAM_MISMATCH; /* another kind of stream altogether */
        if (in->id_kind != TM_ID_OPAQUE)
            return TM_V_CONTINUITY_LOST; /* cannot even be deduplicated */
        return tm_validate_opaque(in->dispatched, in->idempotent);
    case TM_STREAM_NEW:
    default:
        if (in->id_kind == TM_ID_NONE || in->id_kind == TM_ID_EMPTY)
            return TM_V_PLAIN;
        if (in->id_kind == TM_ID_OPAQUE)
            return tm_validate_opaque(in->dispatched, in->idempotent);
        return tm_validate_seq(in);
    }
}

const char *tm_verdict_reason(tm_verdict v)
{
    switch (v) {
    case TM_V_NOT_MONOTONIC: return "replay_not_monotonic";
    case TM_V_GAP: return "resumption_gap";
    case TM_V_DUPLICATE: return "duplicate_effect";
    case TM_V_LOG_INCONSISTENT: return "dispatch_log_inconsistent";
    case TM_V_BAD_ID: return "malformed_event_id";
    case TM_V_BAD_MESSAGE: return "malformed_event";
    case TM_V_CONTINUITY_LOST: return "continuity_lost";
    case TM_V_STREAM_MISMATCH: return "stream_mismatch";
    default: return NULL;
    }
}
