/* seal.c - sealed request state (seal.h): AES-256-GCM tokens and keyed ids
 * under one key shared through the store. The cryptography is GnuTLS's. */
#include "seal.h"
#include "../base/random.h"
#include "tidemark/tidemark.h"
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define SEAL_VERSION 1
#define KEY_LEN 32
#define NONCE_LEN 12
#define TAG_LEN 16
#define HDR_LEN (1 + 8 + NONCE_LEN)
#define RAW_MAX ((size_t)HDR_LEN + TM_SEAL_MAX_PAYLOAD + TAG_LEN)
#define B64_MAX ((RAW_MAX * 4 + 2) / 3)
/* The reserved key session never idles out: its last use is in year 9999. */
#define KEY_SESSION_MS INT64_C(253402300799000)
#define KEY_SESSION_VERSION "tidemark-seal-key"

static const char INVALID[] = "request_state_invalid";
static const char EXPIRED[] = "request_state_expired";

struct tm_sealer {
    tm_store *st;                   /* where the key lives (NULL: a fixed key) */
    unsigned char key[KEY_LEN];     /* the shared key, for tm_sealer_reassert */
    unsigned char enc_key[KEY_LEN]; /* AES-256-GCM */
    unsigned char id_key[KEY_LEN];  /* HMAC-SHA256 of tm_seal_derive_id */
    unsigned char ev_key[KEY_LEN];  /* HMAC-SHA256 of tm_seal_event_mac */
};

/* ---- base64url, no padding, strict ------------------------------------------ */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int tm_b64url_encode(const void *data, size_t n, char **out)
{
    if (!out || (!data && n))
        return TIDEMARK_EINVAL;
    *out = NULL;
    if (n > (SIZE_MAX - 4) / 4 * 3)
        return TIDEMARK_ERANGE;
    const unsigned char *p = data;
    char *s = malloc(n / 3 * 4 + 4), *w = s;
    if (!s)
        return TIDEMARK_ENOMEM;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *w++ = B64[v >> 18];
        *w++ = B64[(v >> 12) & 63];
        *w++ = B64[(v >> 6) & 63];
        *w++ = B64[v & 63];
    }
    if (n - i == 1) {
        *w++ = B64[p[i] >> 2];
        *w++ = B64[(p[i] & 3) << 4];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 8 | p[i + 1];
        *w++ = B64[v >> 10];
        *w++ = B64[(v >> 4) & 63];
        *w++ = B64[(v & 15) << 2];
    }
    *w = '\0';
    *out = s;
    return 0;
}

/* The value of each byte in the alphabet above, -1 outside it. */
static const signed char B64_VAL[256] = {
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 62, -1, -1,
    52, 53, 54, 55, 56, 57, 58, 59, 60, 61, -1, -1, -1, -1, -1, -1,
    -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
    15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, -1, -1, -1, -1, 63,
    -1, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
    41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};

/* Only the canonical encoding decodes: the alphabet above, no padding, no
 * length of 1 mod 4, unused low bits of the last character zero. */
int tm_b64url_decode(const char *s, size_t n, void **out, size_t *outlen)
{
    if (!out || !outlen || (!s && n))
        return TIDEMARK_EINVAL;
    *out = NULL;
    *outlen = 0;
    if (n % 4 == 1)
        return TIDEMARK_EINVAL;
    unsigned char *d = malloc(n / 4 * 3 + 3);
    if (!d)
        return TIDEMARK_ENOMEM;
    size_t len = 0, bits = 0;
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        int v = B64_VAL[(unsigned char)s[i]];
        if (v < 0) {
            free(d);
            return TIDEMARK_EINVAL;
        }
        acc = (acc << 6 | (uint32_t)v) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            d[len++] = (unsigned char)(acc >> bits);
        }
    }
    if (bits && (acc & ((1u << bits) - 1))) {
        free(d);
        return TIDEMARK_EINVAL;
    }
    *out = d;
    *outlen = len;
    return 0;
}

/* ---- keys ---------------------------------------------------------------------- */

static int hmac(const unsigned char key[KEY_LEN], const void *msg, size_t len,
                unsigned char out[32])
{
    return gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, KEY_LEN, msg, len, out) == 0 ? 0
                                                                              : TIDEMARK_EIO;
}

/* One subkey per use of the shared key. */
int tm_sealer_open_key(const unsigned char key[KEY_LEN], tm_sealer **out)
{
    if (!key || !out)
        return TIDEMARK_EINVAL;
    *out = NULL;
    tm_sealer *s = calloc(1, sizeof *s);
    if (!s)
        return TIDEMARK_ENOMEM;
    static const char enc[] = "tidemark seal v1 aes-256-gcm";
    static const char ids[] = "tidemark seal v1 derive-id";
    static const char evs[] = "tidemark seal v1 event-id";
    memcpy(s->key, key, KEY_LEN);
    int rc = hmac(key, enc, sizeof enc - 1, s->enc_key);
    if (rc == 0)
        rc = hmac(key, ids, sizeof ids - 1, s->id_key);
    if (rc == 0)
        rc = hmac(key, evs, sizeof evs - 1, s->ev_key);
    if (rc) {
        tm_sealer_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void tm_sealer_free(tm_sealer *s)
{
    if (!s)
        return;
    gnutls_memset(s, 0, sizeof *s);
    free(s);
}

static int hex_decode(const char *hex, unsigned char *out, size_t n)
{
    if (!hex || strlen(hex) != 2 * n)
        return TIDEMARK_EINVAL;
    for (size_t i = 0; i < 2 * n; i++) {
        char c = hex[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return TIDEMARK_EINVAL;
        out[i / 2] = (unsigned char)(i % 2 ? out[i / 2] | v : v << 4);
    }
    return 0;
}

static void hex_encode(const unsigned char *p, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[p[i] >> 4];
        out[2 * i + 1] = hex[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/* The key of the reserved session: its client field {"seal_key": "<64 hex>"}. */
static int key_of(const tm_session_rec *rec, unsigned char key[KEY_LEN])
{
    json_t *o = rec->client ? json_loads(rec->client, 0, NULL) : NULL;
    int rc = hex_decode(json_string_value(json_object_get(o, "seal_key")), key, KEY_LEN);
    json_decref(o);
    return rc ? TIDEMARK_EIO : 0; /* a damaged key record: nothing to seal with */
}

/* Create the key record with use (NULL: a new random key), into key. */
static int key_create(tm_store *st, const unsigned char *use, unsigned char key[KEY_LEN])
{
    char hex[2 * KEY_LEN + 1], client[2 * KEY_LEN + 32];
    int rc = use ? 0 : tm_random_bytes(key, KEY_LEN);
    if (rc)
        return rc;
    if (use)
        memcpy(key, use, KEY_LEN);
    hex_encode(key, KEY_LEN, hex);
    snprintf(client, sizeof client, "{\"seal_key\":\"%s\"}", hex);
    gnutls_memset(hex, 0, sizeof hex);
    tm_session_rec rec = {.id = TM_SEAL_KEY_SESSION,
                          .protocol_version = KEY_SESSION_VERSION,
                          .client = client,
                          .created_ms = KEY_SESSION_MS,
                          .last_seen_ms = KEY_SESSION_MS};
    rc = tm_store_session_create(st, &rec);
    gnutls_memset(client, 0, sizeof client);
    return rc;
}

/* The key a store with shared values (tm_store_kv_get) keeps as one, in
 * raw bytes; whichever node creates it first wins, the others (EEXIST)
 * read the winner's back. A key kept in the reserved session (an older
 * version's) is carried over, so nodes of both versions seal alike.
 * Written outside the store's writer, it is taken while writes are
 * refused (durability replicated without a synchronous standby): no
 * acknowledged write depends on it until one is replicated, and
 * replication carries the key before that write. TIDEMARK_ENOTSUP: no
 * shared values. */
static int kv_key_load_as(tm_store *st, const unsigned char *use, unsigned char key[KEY_LEN])
{
    for (int attempt = 0; attempt < 3; attempt++) {
        size_t len = 0;
        int rc = tm_store_kv_get(st, TM_SEAL_KEY_SESSION, key, KEY_LEN, &len);
        if (rc == 0)
            return len == KEY_LEN ? 0 : TIDEMARK_EIO;
        if (rc != TIDEMARK_ENOTFOUND)
            return rc;
        tm_session_rec rec;
        rc = use ? TIDEMARK_ENOTFOUND : tm_store_session_get(st, TM_SEAL_KEY_SESSION, &rec);
        if (rc == 0) {
            rc = key_of(&rec, key);
            tm_session_rec_clear(&rec);
        } else if (rc == TIDEMARK_ENOTFOUND && use) {
            memcpy(key, use, KEY_LEN);
            rc = 0;
        } else if (rc == TIDEMARK_ENOTFOUND) {
            rc = tm_random_bytes(key, KEY_LEN);
        }
        if (rc == 0)
            rc = tm_store_kv_create(st, TM_SEAL_KEY_SESSION, key, KEY_LEN);
        if (rc != TIDEMARK_EEXIST)
            return rc;
    }
    return TIDEMARK_EIO;
}

/* Read the shared key, or make it (from use, or at random): whichever node
 * creates the record first wins, the others (EEXIST) read the winner's back. */
static int key_load_as(tm_store *st, const unsigned char *use, unsigned char key[KEY_LEN])
{
    int krc = kv_key_load_as(st, use, key);
    if (krc != TIDEMARK_ENOTSUP)
        return krc;
    for (int attempt = 0; attempt < 3; attempt++) {
        tm_session_rec rec;
        int rc = tm_store_session_get(st, TM_SEAL_KEY_SESSION, &rec);
        if (rc == 0) {
            rc = key_of(&rec, key);
            tm_session_rec_clear(&rec);
            return rc;
        }
        if (rc != TIDEMARK_ENOTFOUND)
            return rc;
        rc = key_create(st, use, key);
        if (rc != TIDEMARK_EEXIST)
            return rc;
    }
    return TIDEMARK_EIO;
}

int tm_sealer_open(tm_store *st, tm_sealer **out)
{
    if (!st || !out)
        return TIDEMARK_EINVAL;
    *out = NULL;
    unsigned char key[KEY_LEN];
    int rc = key_load_as(st, NULL, key);
    if (rc == 0)
        rc = tm_sealer_open_key(key, out);
    if (rc == 0)
        (*out)->st = st;
    gnutls_memset(key, 0, sizeof key);
    return rc;
}

int tm_sealer_reassert(tm_sealer *s)
{
    if (!s)
        return TIDEMARK_EINVAL;
    if (!s->st)
        return 0;
    unsigned char key[KEY_LEN];
    int rc = key_load_as(s->st, s->key, key);
    if (rc == 0 && memcmp(key, s->key, KEY_LEN) != 0)
        rc = TIDEMARK_EPROTO; /* another key won while ours was gone */
    gnutls_memset(key, 0, sizeof key);
    return rc;
}

/* ---- sealing ------------------------------------------------------------------- */

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* version | expiry | len(principal) | principal | len(method) | method */
static unsigned char *aad_new(const unsigned char hdr[9], const char *principal,
                              const char *method, size_t *len)
{
    size_t pl = strlen(principal), ml = strlen(method);
    if (pl > SIZE_MAX / 2 - 32 || ml > SIZE_MAX / 2 - 32)
        return NULL;
    unsigned char *a = malloc(9 + 8 + pl + 8 + ml), *w = a;
    if (!a)
        return NULL;
    memcpy(w, hdr, 9);
    w += 9;
    put_u64(w, pl);
    memcpy(w + 8, principal, pl);
    w += 8 + pl;
    put_u64(w, ml);
    memcpy(w + 8, method, ml);
    *len = 9 + 8 + pl + 8 + ml;
    return a;
}

/* enc: plaintext in, ciphertext||tag out (out has len + TAG_LEN); else the
 * reverse (len counts the tag). */
static int aead(const tm_sealer *s, int enc, const unsigned char *nonce, const void *aad,
                size_t aadlen, const void *in, size_t len, void *out, size_t *outlen)
{
    gnutls_aead_cipher_hd_t h;
    gnutls_datum_t k = {(unsigned char *)s->enc_key, KEY_LEN};
    if (gnutls_aead_cipher_init(&h, GNUTLS_CIPHER_AES_256_GCM, &k) < 0)
        return TIDEMARK_EIO;
    static const unsigned char none[1];
    int g = enc ? gnutls_aead_cipher_encrypt(h, nonce, NONCE_LEN, aad, aadlen, TAG_LEN,
                                             len ? in : none, len, out, outlen)
                : gnutls_aead_cipher_decrypt(h, nonce, NONCE_LEN, aad, aadlen, TAG_LEN, in, len,
                                             out, outlen);
    gnutls_aead_cipher_deinit(h);
    if (g < 0)
        return enc ? TIDEMARK_EIO : TIDEMARK_EINVAL;
    return 0;
}

int tm_seal(tm_sealer *s, const char *principal, const char *method, int64_t expires_ms,
            const void *payload, size_t len, char **token)
{
    if (token)
        *token = NULL;
    if (!s || !principal || !method || !token || (!payload && len))
        return TIDEMARK_EINVAL;
    if (len > TM_SEAL_MAX_PAYLOAD)
        return TIDEMARK_ERANGE;
    size_t rawlen = HDR_LEN + len + TAG_LEN, aadlen = 0, ctlen = len + TAG_LEN;
    unsigned char *raw = malloc(rawlen), *aad = NULL;
    if (!raw)
        return TIDEMARK_ENOMEM;
    raw[0] = SEAL_VERSION;
    put_u64(raw + 1, (uint64_t)expires_ms);
    int rc = gnutls_rnd(GNUTLS_RND_NONCE, raw + 9, NONCE_LEN) == 0 ? 0 : TIDEMARK_EIO;
    if (rc == 0)
        rc = (aad = aad_new(raw, principal, method, &aadlen)) ? 0 : TIDEMARK_ENOMEM;
    if (rc == 0)
        rc = aead(s, 1, raw + 9, aad, aadlen, payload, len, raw + HDR_LEN, &ctlen);
    if (rc == 0 && ctlen != len + TAG_LEN)
        rc = TIDEMARK_EIO;
    if (rc == 0)
        rc = tm_b64url_encode(raw, rawlen, token);
    free(aad);
    free(raw);
    return rc;
}

static int refuse(const char **reason, const char *why, int rc)
{
    if (reason)
        *reason = why;
    return rc;
}

/* Decode and authenticate; OUT the plaintext and the sealed expiry. */
static int open_token(tm_sealer *s, const char *principal, const char *method, const char *token,
                      unsigned char **pt, size_t *ptlen, int64_t *expires)
{
    size_t n = strnlen(token, B64_MAX + 1), rawlen = 0, aadlen = 0;
    if (n > B64_MAX) /* refused before decoding */
        return TIDEMARK_EINVAL;
    void *rawv = NULL;
    int rc = tm_b64url_decode(token, n, &rawv, &rawlen);
    if (rc)
        return rc;
    unsigned char *raw = rawv, *aad = NULL;
    if (rawlen < HDR_LEN + TAG_LEN || raw[0] != SEAL_VERSION)
        rc = TIDEMARK_EINVAL;
    if (rc == 0)
        rc = (aad = aad_new(raw, principal, method, &aadlen)) ? 0 : TIDEMARK_ENOMEM;
    size_t cap = rc == 0 ? rawlen - HDR_LEN - TAG_LEN : 0;
    *pt = rc == 0 ? malloc(cap + 1) : NULL;
    if (rc == 0 && !*pt)
        rc = TIDEMARK_ENOMEM;
    *ptlen = cap + 1;
    if (rc == 0)
        rc = aead(s, 0, raw + 9, aad, aadlen, raw + HDR_LEN, rawlen - HDR_LEN, *pt, ptlen);
    if (rc == 0 && *ptlen != cap)
        rc = TIDEMARK_EINVAL;
    if (rc == 0)
        *expires = (int64_t)get_u64(raw + 1);
    if (rc) {
        free(*pt);
        *pt = NULL;
    }
    free(aad);
    free(raw);
    return rc;
}

int tm_unseal(tm_sealer *s, const char *principal, const char *method, int64_t now_ms,
              const char *token, void **payload, size_t *len, const char **reason)
{
    if (reason)
        *reason = NULL;
    if (payload)
        *payload = NULL;
    if (len)
        *len = 0;
    if (!s || !principal || !method || !payload || !len)
        return TIDEMARK_EINVAL;
    if (!token)
        return refuse(reason, INVALID, TIDEMARK_EINVAL);
    unsigned char *pt = NULL;
    size_t ptlen = 0;
    int64_t expires = 0;
    int rc = open_token(s, principal, method, token, &pt, &ptlen, &expires);
    if (rc == TIDEMARK_ENOMEM || rc == TIDEMARK_EIO)
        return rc;
    if (rc)
        return refuse(reason, INVALID, TIDEMARK_EINVAL);
    /* Authentic: only now does the expiry mean anything. */
    if (now_ms >= expires) {
        gnutls_memset(pt, 0, ptlen);
        free(pt);
        return refuse(reason, EXPIRED, TIDEMARK_ETIMEDOUT);
    }
    pt[ptlen] = '\0';
    *payload = pt;
    *len = ptlen;
    return 0;
}

int tm_seal_derive_id(tm_sealer *s, const char *a, size_t alen, const char *b, size_t blen,
                      char out[33])
{
    if (!s || !out || (!a && alen) || (!b && blen))
        return TIDEMARK_EINVAL;
    out[0] = '\0';
    if (alen > SIZE_MAX / 4 || blen > SIZE_MAX / 4)
        return TIDEMARK_ERANGE;
    size_t n = 8 + alen + 8 + blen;
    unsigned char *m = malloc(n), mac[32];
    if (!m)
        return TIDEMARK_ENOMEM;
    put_u64(m, alen);
    if (alen)
        memcpy(m + 8, a, alen);
    put_u64(m + 8 + alen, blen);
    if (blen)
        memcpy(m + 16 + alen, b, blen);
    int rc = hmac(s->id_key, m, n, mac);
    free(m);
    if (rc == 0)
        hex_encode(mac, 16, out);
    return rc;
}

/* ---- event id macs -------------------------------------------------------------- */

#define EV_MAC_BYTES (TM_EVENT_MAC_LEN / 4 * 3)

static int ev_hmac_part(gnutls_hmac_hd_t h, const char *p)
{
    size_t n = strlen(p);
    unsigned char len[8];
    put_u64(len, n);
    return gnutls_hmac(h, len, sizeof len) == 0 && gnutls_hmac(h, p, n) == 0 ? 0 : TIDEMARK_EIO;
}

/* The first 9 bytes of mac in base64url: whole groups, no padding. */
static void ev_mac_encode(const unsigned char *mac, char out[TM_EVENT_MAC_LEN + 1])
{
    char *w = out;
    for (size_t i = 0; i < EV_MAC_BYTES; i += 3) {
        uint32_t v = (uint32_t)mac[i] << 16 | (uint32_t)mac[i + 1] << 8 | mac[i + 2];
        *w++ = B64[v >> 18];
        *w++ = B64[(v >> 12) & 63];
        *w++ = B64[(v >> 6) & 63];
        *w++ = B64[v & 63];
    }
    *w = '\0';
}

/* An HMAC under the event key fed with session, epoch and stream. */
static int ev_hmac_prefix(tm_sealer *s, const char *session, const char *epoch, const char *stream,
                          gnutls_hmac_hd_t *h)
{
    if (gnutls_hmac_init(h, GNUTLS_MAC_SHA256, s->ev_key, KEY_LEN) != 0)
        return TIDEMARK_EIO;
    int rc = ev_hmac_part(*h, session);
    if (rc == 0)
        rc = ev_hmac_part(*h, epoch);
    if (rc == 0)
        rc = ev_hmac_part(*h, stream);
    if (rc) {
        unsigned char drop[32];
        gnutls_hmac_deinit(*h, drop);
    }
    return rc;
}

/* Finish h (consumed) with seq into out. */
static int ev_hmac_seq(gnutls_hmac_hd_t h, uint64_t seq, char out[TM_EVENT_MAC_LEN + 1])
{
    unsigned char num[8], mac[32];
    put_u64(num, seq);
    int rc = gnutls_hmac(h, num, sizeof num) == 0 ? 0 : TIDEMARK_EIO;
    gnutls_hmac_deinit(h, mac);
    if (rc == 0)
        ev_mac_encode(mac, out);
    return rc;
}

int tm_seal_event_mac(tm_sealer *s, const char *session, const char *epoch, const char *stream,
                      uint64_t seq, char out[TM_EVENT_MAC_LEN + 1])
{
    if (!s || !session || !epoch || !stream || !out)
        return TIDEMARK_EINVAL;
    out[0] = '\0';
    gnutls_hmac_hd_t h;
    int rc = ev_hmac_prefix(s, session, epoch, stream, &h);
    return rc ? rc : ev_hmac_seq(h, seq, out);
}

struct tm_seal_mac_prefix {
    gnutls_hmac_hd_t h;
    char epoch[TM_EPOCH_LEN + 1];
};

int tm_seal_mac_prefix_new(tm_sealer *s, const char *session, const char *epoch, const char *stream,
                           tm_seal_mac_prefix **out)
{
    *out = NULL;
    if (!s || !session || !epoch || !stream || strlen(epoch) > TM_EPOCH_LEN)
        return TIDEMARK_EINVAL;
    tm_seal_mac_prefix *p = calloc(1, sizeof *p);
    if (!p)
        return TIDEMARK_ENOMEM;
    int rc = ev_hmac_prefix(s, session, epoch, stream, &p->h);
    if (rc) {
        free(p);
        return rc;
    }
    memcpy(p->epoch, epoch, strlen(epoch) + 1);
    *out = p;
    return 0;
}

int tm_seal_mac_prefix_seq(const tm_seal_mac_prefix *p, uint64_t seq, char out[TM_EVENT_MAC_LEN + 1])
{
    gnutls_hmac_hd_t h = gnutls_hmac_copy(p->h);
    return h ? ev_hmac_seq(h, seq, out) : TIDEMARK_ENOMEM;
}

const char *tm_seal_mac_prefix_epoch(const tm_seal_mac_prefix *p) { return p->epoch; }

void tm_seal_mac_prefix_free(tm_seal_mac_prefix *p)
{
    if (!p)
        return;
    unsigned char drop[32];
    gnutls_hmac_deinit(p->h, drop);
    free(p);
}

int tm_seal_event_verify(tm_sealer *s, const char *session, const tm_event_id *id)
{
    char want[TM_EVENT_MAC_LEN + 1];
    if (!id || strlen(id->mac) != TM_EVENT_MAC_LEN ||
        tm_seal_event_mac(s, session, id->epoch, id->stream, id->seq, want) != 0)
        return 0;
    unsigned diff = 0;
    for (size_t i = 0; i < TM_EVENT_MAC_LEN; i++)
        diff |= (unsigned)(unsigned char)(want[i] ^ id->mac[i]);
    return diff == 0;
}
