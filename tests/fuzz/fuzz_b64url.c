/*
 * fuzz_b64url.c - base64url without padding (tm_b64url_encode / _decode,
 * src/server/seal.c), the text form of sealed tokens.
 *
 * Input: arbitrary bytes, used twice.
 *  - As text: tm_b64url_decode accepts it exactly when a statement of the
 *    canonical form written here does (every byte one of A-Z a-z 0-9 - _,
 *    length not 1 mod 4, the bits of the last character that fall past the
 *    last whole byte zero), and then yields the bytes that statement computes
 *    (each character's 6 bits, most significant first, whole bytes kept);
 *    encoding them gives back the text exactly (one text per byte string).
 *  - As bytes: the encoding has length ceil(4n/3), only that alphabet, no
 *    NUL before its end, and decodes back to the bytes.
 */
#include "fuzz_util.h"
#include "server/seal.h"
#include "tidemark/tidemark.h"

static int six(unsigned char c)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    if (c == '\0')
        return -1;
    const char *p = strchr(a, c);
    return p ? (int)(p - a) : -1;
}

/* The reference decoder: bit by bit. Returns 1 and the bytes when canonical. */
static int reference(const uint8_t *s, size_t n, uint8_t *out, size_t *outlen)
{
    if (n % 4 == 1)
        return 0;
    size_t bit = 0, whole = n * 6 / 8;
    memset(out, 0, whole + 1);
    for (size_t i = 0; i < n; i++) {
        int v = six(s[i]);
        if (v < 0)
            return 0;
        for (int b = 5; b >= 0; b--, bit++) {
            int on = (v >> b) & 1;
            if (bit / 8 < whole)
                out[bit / 8] |= (uint8_t)(on << (7 - bit % 8));
            else if (on)
                return 0; /* a set bit past the last byte */
        }
    }
    *outlen = whole;
    return 1;
}

static void as_text(const uint8_t *data, size_t size)
{
    uint8_t *want = malloc(size + 1);
    FUZZ_CHECK(want != NULL, "oom");
    size_t wantlen = 0;
    int ok = reference(data, size, want, &wantlen);
    void *got = NULL;
    size_t gotlen = 0;
    int rc = tm_b64url_decode((const char *)data, size, &got, &gotlen);
    FUZZ_CHECK((rc == 0) == ok, "decode says %d, the rule %d: %s", rc, ok,
               fz_show((const char *)data, size));
    if (rc == 0) {
        FUZZ_CHECK(gotlen == wantlen && (!gotlen || memcmp(got, want, gotlen) == 0),
                   "decoded bytes differ");
        char *again = NULL;
        FUZZ_CHECK(tm_b64url_encode(got, gotlen, &again) == 0, "re-encode");
        FUZZ_CHECK(strlen(again) == size && memcmp(again, data, size) == 0,
                   "not the one text of its bytes");
        free(again);
    } else {
        FUZZ_CHECK(rc == TIDEMARK_EINVAL && !got && gotlen == 0, "refusal %d", rc);
    }
    free(got);
    free(want);
}

static void as_bytes(const uint8_t *data, size_t size)
{
    char *t = NULL;
    FUZZ_CHECK(tm_b64url_encode(data, size, &t) == 0, "encode");
    size_t n = strlen(t);
    FUZZ_CHECK(n == (size * 4 + 2) / 3, "length %zu for %zu bytes", n, size);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(six((unsigned char)t[i]) >= 0, "outside the alphabet");
    void *back = NULL;
    size_t len = 0;
    FUZZ_CHECK(tm_b64url_decode(t, n, &back, &len) == 0, "own encoding refused");
    FUZZ_CHECK(len == size && (!size || memcmp(back, data, size) == 0), "round trip");
    free(back);
    free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    as_text(data, size);
    as_bytes(data, size);
    return 0;
}
