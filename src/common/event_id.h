/*
 * event_id.h - the event id codec: "<epoch>-<stream>-<seq>-<mac>" (docs/design.md, "The contract", item 2).
 *   epoch  16 lowercase hex digits (writer generation)
 *   stream "g" (standalone GET stream) or "r<n>", n >= 1, no leading zero
 *   seq    decimal >= 1, no leading zero, dense per stream
 *   mac    12 base64url characters (72 bits of an HMAC the server computes,
 *          src/server/seal.h tm_seal_event_mac); opaque here. Ids issued
 *          before MACs have no "-<mac>" and still parse (mac "").
 * The mac may itself contain '-': it is always the last 12 characters after
 * the seq's dash, so the parse is unambiguous.
 */
#ifndef TM_EVENT_ID_H
#define TM_EVENT_ID_H
#include <stddef.h>
#include <stdint.h>

#define TM_EPOCH_LEN 16
#define TM_STREAM_MAX 24   /* buffer size for a stream name, NUL included */
#define TM_EVENT_MAC_LEN 12
#define TM_EVENT_ID_MAX 80 /* buffer size for a formatted id, NUL included */

typedef struct tm_event_id {
    char epoch[TM_EPOCH_LEN + 1];
    char stream[TM_STREAM_MAX];
    uint64_t seq;
    char mac[TM_EVENT_MAC_LEN + 1]; /* "" when the id has none */
} tm_event_id;

/* Parse an id strictly. Returns 0 or TIDEMARK_EINVAL. */
int tm_event_id_parse(const char *s, tm_event_id *out);
/* Format an id without a mac into out (size n >= TM_EVENT_ID_MAX). Returns
 * length or negative. */
int tm_event_id_format(char *out, size_t n, const char *epoch, const char *stream, uint64_t seq);
/* The same with "-<mac>" appended (mac: TM_EVENT_MAC_LEN base64url
 * characters, or NULL/"" for none). TIDEMARK_EINVAL for any other mac. */
int tm_event_id_format_mac(char *out, size_t n, const char *epoch, const char *stream,
                           uint64_t seq, const char *mac);
/* 1 if s is exactly TM_EVENT_MAC_LEN base64url characters. */
int tm_event_mac_valid(const char *s);
/* 1 if s is a valid stream name ("g" or "r<n>"), else 0. */
int tm_stream_name_valid(const char *s);
/* 1 if s is exactly 16 lowercase hex digits. */
int tm_epoch_valid(const char *s);
/*
 * The epoch a session sees: the writer epoch mixed with the session id
 * (64-bit FNV-1a), so an id from one session never names a position in
 * another session's stream of the same name: a foreign cursor is answered
 * epoch_mismatch (or unknown_stream), never replayed. Still changes at
 * every store open, like the writer epoch. OUT out (TM_EPOCH_LEN + 1).
 */
void tm_epoch_for_session(const char *writer_epoch, const char *session,
                          char out[TM_EPOCH_LEN + 1]);

#endif
