/* test_seal.c - sealed request state (src/server/seal.c) on the memory and
 * SQLite stores, and on Redis when redis-server is installed (the test starts
 * its own, with an append-only file, on a free loopback port; the Redis cases
 * are skipped without one).
 *
 * What is checked: a token opens for exactly the principal and method it was
 * sealed for, before its expiry; every single-bit change of its text or of its
 * bytes is request_state_invalid, also once it has expired (the expiry is
 * read only after the tag verified); malformed, truncated, overlong and
 * foreign tokens are invalid; the key is shared through the store (two
 * stores on one SQLite file, two Redis nodes, concurrent first opens) and
 * survives a restart of the store (SQLite file, redis-server); idle expiry
 * never deletes it; a running node puts a lost key record back; derive_id is deterministic, separates its inputs and
 * depends on the key. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "log/store.h"
#include "server/seal.h"
#include "tidemark/tidemark.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[] = "/tmp/tm-seal-test-XXXXXX";
static int g_next_db = 1;
static int g_redis_port = -1;
static pid_t g_redis = -1;

#define NOW INT64_C(1800000000000) /* a fixed "now" for seal/unseal */
#define P "anon"
#define M "tools/call"

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- stores --------------------------------------------------------------------- */

static tm_store *open_memory(void)
{
    tm_store_options o = {0};
    tm_store *st = NULL;
    assert_int_equal(tm_store_open("memory", &o, &st), 0);
    return st;
}

static tm_store *open_sqlite_path(const char *path)
{
    tm_store_options o = {.durability = TM_DURABILITY_PROCESS};
    tm_store *st = NULL;
    assert_int_equal(tm_store_sqlite_open(path, &o, &st), 0);
    return st;
}

static tm_store *open_sqlite(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/s%d.db", g_dir, g_next_db++);
    return open_sqlite_path(path);
}

static tm_sealer *sealer_of(tm_store *st)
{
    tm_sealer *s = NULL;
    assert_int_equal(tm_sealer_open(st, &s), 0);
    assert_non_null(s);
    return s;
}

static char *seal(tm_sealer *s, const char *p, const char *m, int64_t exp, const char *payload)
{
    char *tok = NULL;
    assert_int_equal(tm_seal(s, p, m, exp, payload, strlen(payload), &tok), 0);
    assert_non_null(tok);
    return tok;
}

/* tm_unseal's outcome: 0 (payload checked), or the code with its reason checked. */
static int unseal_rc(tm_sealer *s, const char *p, const char *m, int64_t now, const char *tok,
                     const char *want)
{
    void *out = (void *)1;
    size_t len = 99;
    const char *reason = "unset";
    int rc = tm_unseal(s, p, m, now, tok, &out, &len, &reason);
    if (rc == 0) {
        assert_null(reason);
        assert_non_null(out);
        assert_int_equal(len, strlen(want));
        assert_memory_equal(out, want, len);
        assert_int_equal(((char *)out)[len], '\0');
        free(out);
    } else {
        assert_null(out);
        assert_int_equal(len, 0);
        if (rc == TIDEMARK_EINVAL)
            assert_string_equal(reason, "request_state_invalid");
        else if (rc == TIDEMARK_ETIMEDOUT)
            assert_string_equal(reason, "request_state_expired");
        else
            fail_msg("unexpected code %d", rc);
    }
    return rc;
}

static void assert_invalid(tm_sealer *s, const char *p, const char *m, int64_t now, const char *t)
{
    assert_int_equal(unseal_rc(s, p, m, now, t, NULL), TIDEMARK_EINVAL);
}

static void derive(tm_sealer *s, const char *a, const char *b, char out[33])
{
    assert_int_equal(tm_seal_derive_id(s, a, strlen(a), b, strlen(b), out), 0);
    assert_int_equal(strlen(out), 32);
    assert_int_equal(strspn(out, "0123456789abcdef"), 32);
}

/* Two sealers share a key: each opens the other's tokens and ids agree. */
static void assert_same_key(tm_sealer *a, tm_sealer *b)
{
    char *ta = seal(a, P, M, NOW + 1000, "from a"), *tb = seal(b, P, M, NOW + 1000, "from b");
    assert_int_equal(unseal_rc(b, P, M, NOW, ta, "from a"), 0);
    assert_int_equal(unseal_rc(a, P, M, NOW, tb, "from b"), 0);
    free(ta);
    free(tb);
    char ia[33], ib[33];
    derive(a, "anon", "key-1", ia);
    derive(b, "anon", "key-1", ib);
    assert_string_equal(ia, ib);
}

/* ---- the token ------------------------------------------------------------------ */

static void roundtrip_on(tm_store *st)
{
    tm_sealer *s = sealer_of(st);
    char *tok = seal(s, P, M, NOW + 60000, "{\"round\":1}");
    assert_int_equal(strspn(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
                     strlen(tok));
    assert_int_equal(unseal_rc(s, P, M, NOW, tok, "{\"round\":1}"), 0);
    char *again = seal(s, P, M, NOW + 60000, "{\"round\":1}");
    assert_string_not_equal(tok, again); /* a fresh nonce each time */
    free(again);
    free(tok);
    /* empty payload, empty principal and method */
    tok = seal(s, "", "", NOW + 1, "");
    assert_int_equal(unseal_rc(s, "", "", NOW, tok, ""), 0);
    free(tok);
    /* bytes with NUL inside, at the size limit; one more is refused */
    size_t n = TM_SEAL_MAX_PAYLOAD;
    unsigned char *big = malloc(n + 1);
    assert_non_null(big);
    for (size_t i = 0; i < n + 1; i++)
        big[i] = (unsigned char)(i * 7);
    assert_int_equal(tm_seal(s, P, M, NOW + 1, big, n, &tok), 0);
    void *out = NULL;
    size_t len = 0;
    assert_int_equal(tm_unseal(s, P, M, NOW, tok, &out, &len, NULL), 0);
    assert_int_equal(len, n);
    assert_memory_equal(out, big, n);
    free(out);
    free(tok);
    char *none = (char *)1;
    assert_int_equal(tm_seal(s, P, M, NOW + 1, big, n + 1, &none), TIDEMARK_ERANGE);
    assert_null(none);
    free(big);
    tm_sealer_free(s);
}

static void test_roundtrip_memory(void **state)
{
    (void)state;
    tm_store *st = open_memory();
    roundtrip_on(st);
    tm_store_close(st);
}

static void test_roundtrip_sqlite(void **state)
{
    (void)state;
    tm_store *st = open_sqlite();
    roundtrip_on(st);
    tm_store_close(st);
}

/* Every single-bit change of the text, and of the bytes under it, is
 * invalid, before the expiry and after it (never "expired": no oracle). */
static void test_every_bit_flip(void **state)
{
    (void)state;
    tm_store *st = open_memory();
    tm_sealer *s = sealer_of(st);
    char *tok = seal(s, P, M, NOW + 1000, "state of round 2");
    size_t n = strlen(tok), tried = 0;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++) {
            tok[i] ^= (char)(1 << b);
            assert_invalid(s, P, M, NOW, tok);
            assert_invalid(s, P, M, NOW + 5000, tok);
            tok[i] ^= (char)(1 << b);
            tried++;
        }
    assert_int_equal(tried, 8 * n);
    void *raw = NULL;
    size_t rawlen = 0;
    assert_int_equal(tm_b64url_decode(tok, n, &raw, &rawlen), 0);
    assert_int_equal(rawlen, 1 + 8 + 12 + strlen("state of round 2") + 16);
    for (size_t i = 0; i < rawlen; i++)
        for (int b = 0; b < 8; b++) {
            ((unsigned char *)raw)[i] ^= (unsigned char)(1 << b);
            char *t = NULL;
            assert_int_equal(tm_b64url_encode(raw, rawlen, &t), 0);
            assert_invalid(s, P, M, NOW, t);
            assert_invalid(s, P, M, NOW + 5000, t);
            free(t);
            ((unsigned char *)raw)[i] ^= (unsigned char)(1 << b);
        }
    free(raw);
    assert_int_equal(unseal_rc(s, P, M, NOW, tok, "state of round 2"), 0); /* restored */
    free(tok);
    tm_sealer_free(s);
    tm_store_close(st);
}

static void test_bound_to_principal_and_method(void **state)
{
    (void)state;
    tm_store *st = open_memory();
    tm_sealer *s = sealer_of(st);
    char *tok = seal(s, "alice", "tools/call", NOW + 1000, "x");
    assert_int_equal(unseal_rc(s, "alice", "tools/call", NOW, tok, "x"), 0);
    assert_invalid(s, "bob", "tools/call", NOW, tok);
    assert_invalid(s, "alice", "prompts/get", NOW, tok);
    assert_invalid(s, "alic", "tools/call", NOW, tok);
    assert_invalid(s, "alice ", "tools/call", NOW, tok);
    assert_invalid(s, "", "", NOW, tok);
    free(tok);
    /* the lengths are bound too: ("ab", "c") is not ("a", "bc") */
    tok = seal(s, "ab", "c", NOW + 1000, "y");
    assert_int_equal(unseal_rc(s, "ab", "c", NOW, tok, "y"), 0);
    assert_invalid(s, "a", "bc", NOW, tok);
    assert_invalid(s, "abc", "", NOW, tok);
    /* the principal of an expired token for someone else: invalid, not expired */
    assert_invalid(s, "a", "bc", NOW + 5000, tok);
    free(tok);
    tm_sealer_free(s);
    tm_store_close(st);
}

static void test_expiry(void **state)
{
    (void)state;
    tm_store *st = open_memory();
    tm_sealer *s = sealer_of(st);
    char *tok = seal(s, P, M, NOW + 1000, "soon");
    assert_int_equal(unseal_rc(s, P, M, NOW + 999, tok, "soon"), 0);
    assert_int_equal(unseal_rc(s, P, M, NOW + 1000, tok, NULL), TIDEMARK_ETIMEDOUT);
    assert_int_equal(unseal_rc(s, P, M, INT64_MAX, tok, NULL), TIDEMARK_ETIMEDOUT);
    /* expired and for another method: invalid */
    assert_invalid(s, P, "tools/list", NOW + 2000, tok);
    /* expired and damaged (last character): invalid */
    size_t n = strlen(tok);
    tok[n - 1] = tok[n - 1] == 'A' ? 'Q' : 'A';
    assert_invalid(s, P, M, NOW + 2000, tok);
    free(tok);
    /* an expiry in the past at sealing time, and a negative one */
    tok = seal(s, P, M, NOW - 1, "late");
    assert_int_equal(unseal_rc(s, P, M, NOW, tok, NULL), TIDEMARK_ETIMEDOUT);
    free(tok);
    tok = seal(s, P, M, -5, "neg");
    assert_int_equal(unseal_rc(s, P, M, -6, tok, "neg"), 0);
    assert_int_equal(unseal_rc(s, P, M, -5, tok, NULL), TIDEMARK_ETIMEDOUT);
    free(tok);
    tm_sealer_free(s);
    tm_store_close(st);
}

static void test_malformed_tokens(void **state)
{
    (void)state;
    tm_store *st = open_memory();
    tm_sealer *s = sealer_of(st);
    char *tok = seal(s, P, M, NOW + 1000, "payload");
    size_t n = strlen(tok);
    /* every truncation */
    for (size_t k = 0; k < n; k++) {
        char *t = strndup(tok, k);
        assert_invalid(s, P, M, NOW, t);
        free(t);
    }
    /* one character more, padding, other alphabets, blanks */
    const char *tails[] = {"A", "AA", "=", "==", " ", "\n", "+", "/", ".", "\xc3\xa9"};
    for (size_t k = 0; k < sizeof tails / sizeof *tails; k++) {
        char *t = malloc(n + 8);
        snprintf(t, n + 8, "%s%s", tok, tails[k]);
        assert_invalid(s, P, M, NOW, t);
        snprintf(t, n + 8, "%s%s", tails[k], tok);
        assert_invalid(s, P, M, NOW, t);
        free(t);
    }
    /* standard base64's characters in place of base64url's */
    char *std = strdup(tok);
    for (size_t k = 0; k < n; k++)
        std[k] = std[k] == '-' ? '+' : std[k] == '_' ? '/' : std[k];
    if (strcmp(std, tok) != 0)
        assert_invalid(s, P, M, NOW, std);
    free(std);
    assert_invalid(s, P, M, NOW, "");
    assert_invalid(s, P, M, NOW, NULL);
    assert_invalid(s, P, M, NOW, "not a token at all");
    /* well-formed base64url of the right shape, not sealed by us */
    unsigned char raw[64] = {1};
    char *fake = NULL;
    assert_int_equal(tm_b64url_encode(raw, sizeof raw, &fake), 0);
    assert_invalid(s, P, M, NOW, fake);
    free(fake);
    free(tok);
    tm_sealer_free(s);
    tm_store_close(st);
}

/* Far longer than any sealed payload: refused before it is decoded, fast. */
static void test_overlong_refused(void **state)
{
    (void)state;
    tm_store *st = open_memory();
    tm_sealer *s = sealer_of(st);
    size_t n = (size_t)64 << 20;
    char *t = malloc(n + 1);
    assert_non_null(t);
    memset(t, 'A', n);
    t[n] = '\0';
    long long t0 = mono_ms();
    for (int i = 0; i < 20; i++)
        assert_invalid(s, P, M, NOW, t);
    assert_true(mono_ms() - t0 < 2000); /* decoding 64 MiB 20 times would not be */
    /* just over the largest token: refused too */
    size_t max = ((1 + 8 + 12 + TM_SEAL_MAX_PAYLOAD + 16) * 4 + 2) / 3;
    t[max + 1] = '\0';
    assert_invalid(s, P, M, NOW, t);
    free(t);
    tm_sealer_free(s);
    tm_store_close(st);
}

static void test_foreign_key(void **state)
{
    (void)state;
    tm_store *a = open_memory(), *b = open_memory();
    tm_sealer *sa = sealer_of(a), *sb = sealer_of(b);
    char *tok = seal(sa, P, M, NOW + 1000, "mine");
    assert_invalid(sb, P, M, NOW, tok);
    assert_invalid(sb, P, M, NOW + 5000, tok); /* not "expired" either */
    free(tok);
    char ia[33], ib[33];
    derive(sa, "p", "k", ia);
    derive(sb, "p", "k", ib);
    assert_string_not_equal(ia, ib);
    /* fixed keys: the same key, the same ids; one bit of key apart, not */
    unsigned char k1[32] = {0}, k2[32] = {0};
    k2[31] = 1;
    tm_sealer *f1 = NULL, *f1b = NULL, *f2 = NULL;
    assert_int_equal(tm_sealer_open_key(k1, &f1), 0);
    assert_int_equal(tm_sealer_open_key(k1, &f1b), 0);
    assert_int_equal(tm_sealer_open_key(k2, &f2), 0);
    assert_same_key(f1, f1b);
    tok = seal(f1, P, M, NOW + 1000, "k1");
    assert_invalid(f2, P, M, NOW, tok);
    free(tok);
    tm_sealer_free(f1);
    tm_sealer_free(f1b);
    tm_sealer_free(f2);
    tm_sealer_free(sa);
    tm_sealer_free(sb);
    tm_store_close(a);
    tm_store_close(b);
}

/* ---- derive_id ------------------------------------------------------------------ */

static void test_derive_id(void **state)
{
    (void)state;
    tm_store *st = open_memory();
    tm_sealer *s = sealer_of(st);
    const char *pairs[][2] = {{"anon", "k1"}, {"anon", "k2"}, {"anon2", "k1"}, {"ab", "c"},
                              {"a", "bc"},    {"abc", ""},    {"", "abc"},    {"", ""},
                              {"k1", "anon"}};
    size_t np = sizeof pairs / sizeof *pairs;
    char ids[16][33];
    for (size_t i = 0; i < np; i++) {
        derive(s, pairs[i][0], pairs[i][1], ids[i]);
        char again[33];
        derive(s, pairs[i][0], pairs[i][1], again);
        assert_string_equal(ids[i], again);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(ids[i], ids[j]);
    }
    /* bytes, not strings: a NUL inside counts */
    char x[33], y[33];
    assert_int_equal(tm_seal_derive_id(s, "a\0b", 3, "c", 1, x), 0);
    assert_int_equal(tm_seal_derive_id(s, "a", 1, "c", 1, y), 0);
    assert_string_not_equal(x, y);
    assert_int_equal(tm_seal_derive_id(s, NULL, 0, NULL, 0, x), 0);
    assert_string_equal(x, ids[7]);
    assert_int_equal(tm_seal_derive_id(s, NULL, 1, "c", 1, x), TIDEMARK_EINVAL);
    tm_sealer_free(s);
    tm_store_close(st);
}

/* ---- the key in the store --------------------------------------------------------- */

static tm_store *open_redis_db(int db);

/* Two sealers of one SQLite store, then a restart (one process owns a SQLite
 * file at a time: a second store on it is refused, so the restart is how a
 * later node meets the key). */
static void test_sqlite_shared_and_restart(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/shared.db", g_dir);
    tm_store *a = open_sqlite_path(path);
    tm_sealer *sa = sealer_of(a), *sb = sealer_of(a);
    assert_same_key(sa, sb);
    char *tok = seal(sa, P, M, NOW + 1000, "before restart");
    char id1[33];
    derive(sa, "anon", "idem", id1);
    tm_sealer_free(sa);
    tm_sealer_free(sb);
    tm_store_close(a);

    a = open_sqlite_path(path);
    sa = sealer_of(a);
    assert_int_equal(unseal_rc(sa, P, M, NOW, tok, "before restart"), 0);
    char id2[33];
    derive(sa, "anon", "idem", id2);
    assert_string_equal(id1, id2);
    free(tok);
    tm_sealer_free(sa);
    tm_store_close(a);
}

/* The key session lives until year 9999: idle expiry, however late, keeps it;
 * it is no real session id (those are 32 hex characters). */
static void expiry_keeps_key(tm_store *st)
{
    tm_sealer *s = sealer_of(st);
    char *tok = seal(s, P, M, NOW + 1000, "kept");
    tm_session_rec rec = {.id = "0123456789abcdef0123456789abcdef", .protocol_version = "x",
                          .created_ms = NOW, .last_seen_ms = NOW};
    assert_int_equal(tm_store_session_create(st, &rec), 0);
    int64_t century = INT64_C(100) * 366 * 24 * 3600 * 1000;
    assert_int_equal(tm_store_sessions_expire(st, NOW + century, NULL, NULL), 0);
    tm_session_rec got;
    assert_int_equal(tm_store_session_get(st, rec.id, &got), TIDEMARK_ENOTFOUND); /* it ran */
    assert_int_equal(tm_store_session_get(st, TM_SEAL_KEY_SESSION, &got), 0);
    assert_true(strlen(got.id) != 32);
    assert_null(got.attrs); /* nothing a sessions_each visitor acts on */
    tm_session_rec_clear(&got);
    tm_sealer *again = sealer_of(st);
    assert_int_equal(unseal_rc(again, P, M, NOW, tok, "kept"), 0);
    free(tok);
    tm_sealer_free(again);
    tm_sealer_free(s);
}

static void test_expiry_keeps_key_memory(void **state)
{
    (void)state;
    tm_store *st = open_memory();
    expiry_keeps_key(st);
    tm_store_close(st);
}

static void test_expiry_keeps_key_sqlite(void **state)
{
    (void)state;
    tm_store *st = open_sqlite();
    expiry_keeps_key(st);
    tm_store_close(st);
}

/* The store loses the key record (Redis FLUSHALL, an older dataset restored):
 * a running node puts its key back, so a node started later joins it; a
 * node that started while the record was gone made another key, which the
 * running one is told of. */
static void lost_key_on(tm_store *st)
{
    tm_sealer *a = sealer_of(st);
    assert_int_equal(tm_sealer_reassert(a), 0); /* nothing lost: nothing to do */
    assert_int_equal(tm_store_session_delete(st, TM_SEAL_KEY_SESSION), 0);
    assert_int_equal(tm_sealer_reassert(a), 0);
    tm_sealer *later = sealer_of(st);
    assert_same_key(a, later);
    tm_sealer_free(later);
    assert_int_equal(tm_store_session_delete(st, TM_SEAL_KEY_SESSION), 0);
    tm_sealer *early = sealer_of(st); /* came up in the gap: a new key */
    char *tok = seal(a, P, M, NOW + 1000, "old key");
    assert_invalid(early, P, M, NOW, tok);
    free(tok);
    assert_int_equal(tm_sealer_reassert(a), TIDEMARK_EPROTO);
    assert_int_equal(tm_sealer_reassert(early), 0);
    tm_sealer_free(early);
    tm_sealer_free(a);
    unsigned char k[32] = {0};
    tm_sealer *fixed = NULL;
    assert_int_equal(tm_sealer_open_key(k, &fixed), 0);
    assert_int_equal(tm_sealer_reassert(fixed), 0);
    tm_sealer_free(fixed);
}

static void test_lost_key_memory(void **state)
{
    (void)state;
    tm_store *st = open_memory();
    lost_key_on(st);
    tm_store_close(st);
}

static void test_lost_key_sqlite(void **state)
{
    (void)state;
    tm_store *st = open_sqlite();
    lost_key_on(st);
    tm_store_close(st);
}

/* Nodes coming up at once: one key wins, everyone reads it. */
#define RACERS 8
typedef struct racer {
    tm_store *st;
    tm_sealer *s;
    int rc;
    pthread_barrier_t *go;
} racer;

static void *race_open(void *arg)
{
    racer *r = arg;
    pthread_barrier_wait(r->go);
    r->rc = tm_sealer_open(r->st, &r->s);
    return NULL;
}

static void race_on(tm_store **stores)
{
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, RACERS);
    racer r[RACERS];
    pthread_t th[RACERS];
    for (int i = 0; i < RACERS; i++) {
        r[i] = (racer){stores[i], NULL, -100, &go};
        assert_int_equal(pthread_create(&th[i], NULL, race_open, &r[i]), 0);
    }
    for (int i = 0; i < RACERS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < RACERS; i++)
        assert_int_equal(r[i].rc, 0);
    for (int i = 1; i < RACERS; i++)
        assert_same_key(r[0].s, r[i].s);
    for (int i = 0; i < RACERS; i++)
        tm_sealer_free(r[i].s);
}

static void test_first_open_race(void **state)
{
    (void)state;
    tm_store *mem = open_memory(), *stores[RACERS];
    for (int i = 0; i < RACERS; i++)
        stores[i] = mem;
    race_on(stores);
    tm_store_close(mem);
    tm_store *sq = open_sqlite();
    for (int i = 0; i < RACERS; i++)
        stores[i] = sq;
    race_on(stores);
    tm_store_close(sq);
    if (g_redis <= 0)
        return;
    for (int i = 0; i < RACERS; i++) /* eight nodes on one Redis */
        stores[i] = open_redis_db(1);
    race_on(stores);
    for (int i = 0; i < RACERS; i++)
        tm_store_close(stores[i]);
}

/* ---- Redis ------------------------------------------------------------------------ */

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* redis-server with an append-only file fsynced on every write, in g_dir. */
static int start_redis(void)
{
    char port[16];
    snprintf(port, sizeof port, "%d", g_redis_port);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "yes", "--appendfsync", "always", "--dir", g_dir, (char *)NULL);
        _exit(127);
    }
    g_redis = pid;
    for (long long deadline = mono_ms() + 10000; mono_ms() < deadline;) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            g_redis = -1;
            return -1;
        }
        if (port_open(g_redis_port))
            return 0;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static void stop_redis(int sig)
{
    if (g_redis > 0) {
        kill(g_redis, sig);
        waitpid(g_redis, NULL, 0);
        g_redis = -1;
    }
}

static tm_store *open_redis_db(int db)
{
    char u[64];
    snprintf(u, sizeof u, "redis://127.0.0.1:%d/%d", g_redis_port, db);
    tm_store_options o = {.durability = TM_DURABILITY_PROCESS};
    tm_store *st = NULL;
    assert_int_equal(tm_store_open(u, &o, &st), 0);
    return st;
}

static tm_store *open_redis(void) { return open_redis_db(0); }

/* Two nodes on one Redis share the key; it survives redis-server being
 * killed (-9) and restarted from its append-only file. */
static void test_redis_shared_and_restart(void **state)
{
    (void)state;
    if (g_redis <= 0)
        skip();
    tm_store *a = open_redis(), *b = open_redis();
    tm_sealer *sa = sealer_of(a), *sb = sealer_of(b);
    assert_same_key(sa, sb);
    roundtrip_on(a);
    char *tok = seal(sb, P, M, NOW + 1000, "across a redis restart");
    char id1[33];
    derive(sb, "anon", "idem", id1);
    tm_sealer_free(sa);
    tm_sealer_free(sb);
    tm_store_close(a);
    tm_store_close(b);

    stop_redis(SIGKILL);
    assert_int_equal(start_redis(), 0);
    a = open_redis();
    sa = sealer_of(a);
    assert_int_equal(unseal_rc(sa, P, M, NOW, tok, "across a redis restart"), 0);
    char id2[33];
    derive(sa, "anon", "idem", id2);
    assert_string_equal(id1, id2);
    free(tok);
    tm_sealer_free(sa);
    expiry_keeps_key(a);
    lost_key_on(a);
    tm_store_close(a);
}

static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char f[4096];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(f, sizeof f, "%.*s/%s", (int)n, path, prog);
        if (access(f, X_OK) == 0)
            return 1;
        path += n + (path[n] == ':');
    }
    return 0;
}

int main(void)
{
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    if (on_path("redis-server")) {
        g_redis_port = free_port();
        if (g_redis_port <= 0 || start_redis() != 0) {
            fprintf(stderr, "test_seal: cannot start redis-server\n");
            stop_redis(SIGKILL);
            return 1;
        }
    } else {
        fprintf(stderr, "test_seal: redis-server is not installed: its cases are skipped\n");
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_memory),
        cmocka_unit_test(test_roundtrip_sqlite),
        cmocka_unit_test(test_every_bit_flip),
        cmocka_unit_test(test_bound_to_principal_and_method),
        cmocka_unit_test(test_expiry),
        cmocka_unit_test(test_malformed_tokens),
        cmocka_unit_test(test_overlong_refused),
        cmocka_unit_test(test_foreign_key),
        cmocka_unit_test(test_derive_id),
        cmocka_unit_test(test_sqlite_shared_and_restart),
        cmocka_unit_test(test_expiry_keeps_key_memory),
        cmocka_unit_test(test_expiry_keeps_key_sqlite),
        cmocka_unit_test(test_lost_key_memory),
        cmocka_unit_test(test_lost_key_sqlite),
        cmocka_unit_test(test_first_open_race),
        cmocka_unit_test(test_redis_shared_and_restart),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    stop_redis(SIGKILL);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_seal: could not remove %s\n", g_dir);
    return failed;
}
