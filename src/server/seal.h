/*
 * seal.h - sealed request state for the 2026-07-28 wire (multi-round-trip
 * requests): state the server hands to the client and gets back later,
 * opaque and tamper-proof, so any node can continue the request without
 * having kept it.
 *
 * A token is base64url (no padding) of
 *     version (1 byte, 1) | expiry ms (8 bytes, big-endian) | nonce (12)
 *     | AES-256-GCM ciphertext of the payload | tag (16)
 * The additional data binds the version byte, the expiry, the principal and
 * the method, each string length-prefixed. The expiry is checked only after
 * the tag verified, so a forged or altered token is always
 * "request_state_invalid", never "request_state_expired".
 *
 * The key is 32 random bytes shared by every node through the store (a
 * reserved session record, created once by whichever node comes first), so
 * a token sealed on one node opens on another and after a restart.
 *
 * Error codes: TIDEMARK_ETIMEDOUT exists in tidemark.h and is the code of an
 * expired token. All functions return 0 or a negative TIDEMARK_E*.
 *
 * Threading: a sealer is immutable once open; every function may be called
 * from any thread at once.
 */
#ifndef TM_SEAL_H
#define TM_SEAL_H
#include <stddef.h>
#include <stdint.h>
#include "../log/store.h"

/* Largest payload tm_seal accepts; tm_unseal refuses a longer token before
 * decoding it. */
#define TM_SEAL_MAX_PAYLOAD (64u * 1024u)

/* The reserved session id under which the key lives in the store. It can
 * never be a real session id (those are 32 hex characters). */
#define TM_SEAL_KEY_SESSION "tidemark:seal-key"

typedef struct tm_sealer tm_sealer;

/* Open a sealer whose key is shared by all nodes through the store: read it,
 * or create it if no node has (race-safe: a node that loses the race reads
 * the winner's key). */
int tm_sealer_open(tm_store *st, tm_sealer **out);
/* Put the key back if the store lost it (Redis FLUSHALL, a restored older
 * dataset): re-create the record with this sealer's key, so nodes started
 * later read the key the running nodes use rather than make a new one. Call
 * it now and then (the janitor's period); it reads the store once. 0 when
 * the store holds this key (now), TIDEMARK_EPROTO when it holds another (a
 * node made a new key while the record was gone: tokens and derived ids of
 * the two keys do not mix; restart the nodes to agree on the store's), or
 * a store error. 0 at once for a fixed-key sealer. */
int tm_sealer_reassert(tm_sealer *s);
/* A sealer with a fixed key (tests and fuzz targets only). */
int tm_sealer_open_key(const unsigned char key[32], tm_sealer **out);
void tm_sealer_free(tm_sealer *s);

/* Seal payload (len <= TM_SEAL_MAX_PAYLOAD) for principal and method until
 * expires_ms (Unix ms). principal and method are NUL-terminated; "" is
 * allowed. OUT *token: malloc'd NUL-terminated base64url text. */
int tm_seal(tm_sealer *s, const char *principal, const char *method, int64_t expires_ms,
            const void *payload, size_t len, char **token);

/* Open a token sealed for principal and method. OUT *payload (malloc'd and
 * NUL-terminated too), *len. TIDEMARK_EINVAL with *reason
 * "request_state_invalid" (tampered, foreign, malformed, too long), or
 * TIDEMARK_ETIMEDOUT with *reason "request_state_expired" (now_ms >= the
 * expiry of an authentic token). *reason is a static string, or NULL on
 * success; reason may be NULL. */
int tm_unseal(tm_sealer *s, const char *principal, const char *method, int64_t now_ms,
              const char *token, void **payload, size_t *len, const char **reason);

/* 32 lowercase hex chars (+NUL) derived from (a, b) under the shared key
 * (HMAC-SHA256, length-prefixed inputs, truncated to 128 bits): the same on
 * every node, unguessable without the key. */
int tm_seal_derive_id(tm_sealer *s, const char *a, size_t alen, const char *b, size_t blen,
                      char out[33]);

/* The mac of an event id (src/common/event_id.h): HMAC-SHA256 under a subkey
 * of the shared key over the session and the id's epoch, stream and seq
 * (each length-prefixed), its first 9 bytes in base64url: 12 characters,
 * 72 bits. The same on every node sharing the store; unguessable without
 * the key, so an id whose mac verifies was issued by this store. */
int tm_seal_event_mac(tm_sealer *s, const char *session, const char *epoch, const char *stream,
                      uint64_t seq, char out[TM_EVENT_MAC_LEN + 1]);
/* The same macs for one stream's events, its constant part (session,
 * epoch, stream) hashed once: each seq then costs a copy of that state and
 * two SHA-256 blocks instead of a new HMAC. One thread at a time. */
typedef struct tm_seal_mac_prefix tm_seal_mac_prefix;
int tm_seal_mac_prefix_new(tm_sealer *s, const char *session, const char *epoch, const char *stream,
                           tm_seal_mac_prefix **out);
int tm_seal_mac_prefix_seq(const tm_seal_mac_prefix *p, uint64_t seq, char out[TM_EVENT_MAC_LEN + 1]);
/* The epoch it was made for. */
const char *tm_seal_mac_prefix_epoch(const tm_seal_mac_prefix *p);
void tm_seal_mac_prefix_free(tm_seal_mac_prefix *p);
/* 1 if id->mac is the mac of (session, id): compared in constant time;
 * 0 for any other mac, none included. */
int tm_seal_event_verify(tm_sealer *s, const char *session, const tm_event_id *id);

/* base64url without padding (RFC 4648 section 5), as the tokens use it.
 * encode: OUT *out malloc'd NUL-terminated text. decode: OUT *out malloc'd
 * bytes, *outlen; only the canonical form decodes (no '=', no other
 * alphabet, no length of 1 mod 4, the last character's unused bits zero),
 * else TIDEMARK_EINVAL. */
int tm_b64url_encode(const void *data, size_t n, char **out);
int tm_b64url_decode(const char *s, size_t n, void **out, size_t *outlen);

#endif
