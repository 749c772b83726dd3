/* resume.c - the resume table, rows in the order of docs/design.md, "The contract", item 4. */
#include "resume.h"
#include "tidemark/tidemark.h"
#include <string.h>

const char *tm_resume_reason(tm_resume_outcome o)
{
    switch (o) {
    case TM_RESUME_OK: return "ok";
    case TM_RESUME_MALFORMED: return "malformed_cursor";
    case TM_RESUME_UNKNOWN_STREAM: return "unknown_stream";
    case TM_RESUME_AHEAD: return "cursor_ahead";
    case TM_RESUME_GAP: return "resumption_gap";
    case TM_RESUME_EPOCH: return "epoch_mismatch";
    }
    return "unknown";
}

int tm_resume_decide(tm_store *st, const char *session, const char *cursor,
                     tm_resume_decision *d)
{
    return tm_resume_decide_auth(st, session, cursor, NULL, d);
}

int tm_resume_decide_auth(tm_store *st, const char *session, const char *cursor,
                          const tm_id_auth *auth, tm_resume_decision *d)
{
    memset(d, 0, sizeof *d);
    tm_event_id id;
    if (tm_event_id_parse(cursor, &id) != 0 ||
        (auth && id.mac[0] && !auth->verify(auth->ud, session, &id))) {
        d->outcome = TM_RESUME_MALFORMED;
        return 0;
    }
    d->unmacd = auth && !id.mac[0];
    memcpy(d->stream, id.stream, sizeof d->stream);
    d->cursor_seq = id.seq;

    tm_stream_bounds b;
    int rc = tm_store_bounds(st, session, id.stream, &b);
    if (rc == TIDEMARK_ENOTFOUND) {
        d->outcome = TM_RESUME_UNKNOWN_STREAM;
        return 0;
    }
    if (rc)
        return rc;
    d->head = b.head;
    if (id.seq > b.head) { /* an id without a mac cannot prove it was issued */
        d->outcome = d->unmacd ? TM_RESUME_MALFORMED : TM_RESUME_AHEAD;
        return 0;
    }
    if (id.seq + 1 < b.first_retained) {
        d->outcome = TM_RESUME_GAP;
        d->gap_from = id.seq + 1;
        d->gap_to = b.first_retained - 1;
        d->after_seq = b.first_retained - 1;
        return 0;
    }
    char epoch[TM_EPOCH_LEN + 1], seen[TM_EPOCH_LEN + 1];
    rc = tm_store_event_epoch(st, session, id.stream, id.seq, epoch);
    if (rc && rc != TIDEMARK_ENOTFOUND)
        return rc;
    if (rc == 0)
        tm_epoch_for_session(epoch, session, seen); /* what this session was sent */
    /* Unknown epoch at a retained-or-boundary position cannot be proven
     * equal: fail closed. */
    if (rc == TIDEMARK_ENOTFOUND || strcmp(seen, id.epoch) != 0) {
        d->outcome = TM_RESUME_EPOCH;
        return 0;
    }
    d->outcome = TM_RESUME_OK;
    d->after_seq = id.seq;
    return 0;
}
