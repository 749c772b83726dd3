/*
 * fuzz_seal.c - sealed request state (src/server/seal.c) under a key of the
 * process, made at random at start (tm_sealer_open_key: no store).
 *
 * Input: a mode byte, then
 *  't' TOKEN             arbitrary text (to a NUL) given to tm_unseal as a
 *                        token, for "anon"/"tools/call", before and after
 *                        any expiry. Unless tm_seal made exactly that text in
 *                        this process (mode 'm' below; libFuzzer does learn
 *                        those tokens from the harness's own comparisons),
 *                        it must be refused: request_state_invalid with
 *                        TIDEMARK_EINVAL, never 0, never "expired" (that
 *                        would be a forgery, or an expiry read before the
 *                        tag). The tokens made are remembered by a 64-bit
 *                        hash of their text.
 *  'm' FLAGS PRINCIPAL LF METHOD LF PAYLOAD LF EDITS
 *                        seal PAYLOAD for (PRINCIPAL, METHOD) under the
 *                        fixed key, expiring at NOW + 1000: it opens before
 *                        the expiry with the same bytes (NUL-terminated), is
 *                        "expired" at and after it; then EDITS (pairs of
 *                        position, xor byte) are applied to the token's text
 *                        (FLAGS bit 0 clear) or to its decoded bytes (set):
 *                        when the result differs from the token it is
 *                        invalid before and after the expiry; and the token
 *                        is invalid for a principal or method one byte
 *                        longer, and cut at any EDITS position.
 *  'L' DELTA FILL...     a token of the largest accepted length + DELTA - 128
 *                        characters, FILL repeated: invalid, and refused
 *                        before decoding (no 64 KiB work per input).
 * Everything also must not leak (libFuzzer's leak check).
 */
#include "fuzz_util.h"
#include "base/random.h"
#include "server/seal.h"
#include "tidemark/tidemark.h"

#define NOW INT64_C(1800000000000)
#define B64_LIMIT (((1 + 8 + 12 + TM_SEAL_MAX_PAYLOAD + 16) * 4 + 2) / 3)

static tm_sealer *sealer(void)
{
    static tm_sealer *s;
    if (!s) {
        /* A key of this process only: a token some earlier run made (and
         * libFuzzer kept in its work corpus) must not open here. */
        unsigned char key[32];
        FUZZ_CHECK(tm_random_bytes(key, sizeof key) == 0, "random key");
        FUZZ_CHECK(tm_sealer_open_key(key, &s) == 0, "sealer");
    }
    return s;
}

/* ---- the tokens tm_seal made in this process ------------------------------------ */

static uint64_t *g_made;
static size_t g_cap, g_count;

static uint64_t text_hash(const char *t)
{
    uint64_t h = 1469598103934665603ull;
    for (; *t; t++)
        h = (h ^ (unsigned char)*t) * 1099511628211ull;
    return h ? h : 1;
}

static int made_has(uint64_t h)
{
    for (size_t i = g_cap ? h % g_cap : 0; g_cap && g_made[i]; i = (i + 1) % g_cap)
        if (g_made[i] == h)
            return 1;
    return 0;
}

static void made_add(const char *tok)
{
    uint64_t h = text_hash(tok);
    if (made_has(h))
        return;
    if ((g_count + 1) * 2 > g_cap) {
        size_t cap = g_cap ? g_cap * 2 : 1024;
        uint64_t *old = g_made, *n = calloc(cap, sizeof *n);
        FUZZ_CHECK(n != NULL, "oom");
        size_t oldcap = g_cap;
        g_made = n;
        g_cap = cap;
        g_count = 0;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i]) {
                size_t j = old[i] % cap;
                while (g_made[j])
                    j = (j + 1) % cap;
                g_made[j] = old[i];
                g_count++;
            }
        free(old);
    }
    size_t j = h % g_cap;
    while (g_made[j])
        j = (j + 1) % g_cap;
    g_made[j] = h;
    g_count++;
}

/* Must be refused as invalid, for (p, m), before and long after NOW (at
 * the first ntimes of these times). */
static void refused_at(const char *p, const char *m, const char *tok, const char *what,
                       size_t ntimes)
{
    int64_t times[] = {NOW, NOW + 1000, NOW + 86400000, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof times / sizeof *times && i < ntimes; i++) {
        void *out = NULL;
        size_t len = 7;
        const char *reason = NULL;
        int rc = tm_unseal(sealer(), p, m, times[i], tok, &out, &len, &reason);
        FUZZ_CHECK(rc == TIDEMARK_EINVAL, "%s: rc %d at t[%zu] for %s", what, rc, i,
                   fz_show(tok, strlen(tok)));
        FUZZ_CHECK(reason && strcmp(reason, "request_state_invalid") == 0, "%s: reason", what);
        FUZZ_CHECK(!out && len == 0, "%s: output on refusal", what);
    }
}

static void refused(const char *p, const char *m, const char *tok, const char *what)
{
    refused_at(p, m, tok, what, 5);
}

static void opens(const char *p, const char *m, const char *tok, const char *pl, size_t n)
{
    void *out = NULL;
    size_t len = 0;
    const char *reason = "x";
    int rc = tm_unseal(sealer(), p, m, NOW + 999, tok, &out, &len, &reason);
    FUZZ_CHECK(rc == 0 && !reason, "own token refused: %d", rc);
    FUZZ_CHECK(len == n && (!n || memcmp(out, pl, n) == 0), "payload changed");
    FUZZ_CHECK(((char *)out)[len] == '\0', "payload not NUL-terminated");
    free(out);
    for (int k = 0; k < 2; k++) {
        rc = tm_unseal(sealer(), p, m, k ? INT64_MAX : NOW + 1000, tok, &out, &len, &reason);
        FUZZ_CHECK(rc == TIDEMARK_ETIMEDOUT && reason &&
                       strcmp(reason, "request_state_expired") == 0 && !out,
                   "own token after expiry: %d", rc);
    }
}

/* A token tm_seal made here (for some principal and method): whatever the
 * answer, it is one of the three, consistent with its reason. */
static void known_token(const char *tok)
{
    void *out = NULL;
    size_t len = 0;
    const char *reason = NULL;
    int rc = tm_unseal(sealer(), "anon", "tools/call", NOW, tok, &out, &len, &reason);
    FUZZ_CHECK(rc == 0 ? !reason && out && ((char *)out)[len] == '\0'
               : rc == TIDEMARK_ETIMEDOUT ? strcmp(reason, "request_state_expired") == 0
               : rc == TIDEMARK_EINVAL && strcmp(reason, "request_state_invalid") == 0,
               "known token: rc %d", rc);
    free(out);
}

static char *edit_text(const char *tok, const uint8_t *e, size_t ne)
{
    size_t n = strlen(tok);
    char *t = fz_dup(tok, n);
    for (size_t i = 0; i + 1 < ne && n; i += 2)
        t[e[i] % n] ^= (char)e[i + 1];
    /* an edit to NUL cuts the text there, as a C string is */
    return t;
}

static char *edit_bytes(const char *tok, const uint8_t *e, size_t ne)
{
    void *raw = NULL;
    size_t n = 0;
    FUZZ_CHECK(tm_b64url_decode(tok, strlen(tok), &raw, &n) == 0, "own token does not decode");
    for (size_t i = 0; i + 1 < ne && n; i += 2)
        ((uint8_t *)raw)[((size_t)e[i] << 8 | e[i + 1]) % n] ^= (uint8_t)(i + 2 < ne ? e[i + 2] : 1);
    char *t = NULL;
    FUZZ_CHECK(tm_b64url_encode(raw, n, &t) == 0, "encode");
    free(raw);
    return t;
}

static void mode_mutate(fz *f)
{
    int flags = fz_u8(f);
    size_t pn, mn, ln;
    const char *p = fz_field(f, '\n', &pn), *m = fz_field(f, '\n', &mn);
    const char *pl = fz_field(f, '\n', &ln);
    char *ps = fz_dup(p ? p : "", pn), *ms = fz_dup(m ? m : "", mn);
    char *tok = NULL;
    FUZZ_CHECK(tm_seal(sealer(), ps, ms, NOW + 1000, pl, ln, &tok) == 0, "seal failed");
    made_add(tok);
    opens(ps, ms, tok, pl, ln);
    char *t = flags & 1 ? edit_bytes(tok, f->p, f->n) : edit_text(tok, f->p, f->n);
    if (strcmp(t, tok) != 0)
        refused(ps, ms, t, "edited token");
    free(t);
    /* one byte more of principal or method */
    char *p2 = malloc(strlen(ps) + 2), *m2 = malloc(strlen(ms) + 2);
    FUZZ_CHECK(p2 && m2, "oom");
    sprintf(p2, "%s%c", ps, 'a' + (flags >> 1) % 26);
    sprintf(m2, "%s%c", ms, 'a' + (flags >> 1) % 26);
    refused(p2, ms, tok, "other principal");
    refused(ps, m2, tok, "other method");
    free(p2);
    free(m2);
    /* cut */
    size_t n = strlen(tok);
    for (size_t i = 0; i < f->n && i < 8; i++) {
        char *c = fz_dup(tok, f->p[i] % n);
        refused(ps, ms, c, "cut token");
        free(c);
    }
    free(tok);
    free(ps);
    free(ms);
}

static void mode_long(fz *f)
{
    int delta = fz_u8(f) - 128;
    size_t n = (size_t)((long)B64_LIMIT + delta);
    char *t = malloc(n + 1);
    FUZZ_CHECK(t != NULL, "oom");
    /* FILL repeated, a chunk at a time (a loop per byte would be most of the
     * time of this target, its comparisons traced by the coverage pass) */
    if (!f->n)
        memset(t, 'A', n);
    for (size_t i = 0; f->n && i < n; i += f->n)
        memcpy(t + i, f->p, n - i < f->n ? n - i : f->n);
    /* A NUL would end the token early: a fill that starts with a whole
     * valid token (the dictionary has one) then a NUL was that token. */
    for (size_t i = 0; i < n; i++)
        if (t[i] == '\0')
            t[i] = 'A';
    t[n] = '\0';
    refused_at("anon", "tools/call", t, "long token", 1); /* 87 KB: once is enough */
    free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size};
    int mode = fz_u8(&f);
    if (mode == 'm') {
        mode_mutate(&f);
    } else if (mode == 'L') {
        mode_long(&f);
    } else {
        char *tok = fz_dup((const char *)f.p, f.n);
        if (!made_has(text_hash(tok)))
            refused("anon", "tools/call", tok, "arbitrary token");
        else
            known_token(tok);
        free(tok);
    }
    return 0;
}
