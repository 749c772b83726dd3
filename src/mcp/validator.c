/* validator.c - DESIGN.md §7's table, rows in its order. */
#include "validator.h"
#include <stddef.h>

tm_verdict tm_validate(const tm_validate_in *in)
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

tm_verdict tm_validate_opaque(int dispatched, int idempotent)
{
    if (!dispatched)
        return TM_V_DISPATCH;
    return idempotent ? TM_V_SUPPRESS : TM_V_DUPLICATE;
}

const char *tm_verdict_reason(tm_verdict v)
{
    switch (v) {
    case TM_V_NOT_MONOTONIC: return "replay_not_monotonic";
    case TM_V_GAP: return "resumption_gap";
    case TM_V_DUPLICATE: return "duplicate_effect";
    case TM_V_LOG_INCONSISTENT: return "dispatch_log_inconsistent";
    default: return NULL;
    }
}
