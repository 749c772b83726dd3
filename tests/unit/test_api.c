/*
 * test_api.c - the public API as a program sees it, linked against the
 * shared library: defaults (the table, the headers' comments and --help
 * against each other), the version, errors, memory that changes hands,
 * and structs from older or newer headers (tidemark.h, "Structs a caller
 * fills").
 *
 * Environment: TM_SOURCE_DIR (the headers are read from it) and TM_BIN_DIR
 * (tidemark-server and tidemark-client --help are run from it); set by
 * tests/abi/abi.cmake.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <tidemark/client.h>
#include <tidemark/server.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_(v) #v
#define STR(v) STR_(v)

static int same_str(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static int same_num(int64_t a, int64_t b)
{
    return a == b;
}

/* A config field against its table value, whether a string or a number. */
#define SAME(field, value) \
    _Generic((field), const char *: same_str, default: same_num)((field), (value))

/* One row of a table of defaults: the field, its value as the table writes
 * it (#value) and with macros expanded. */
typedef struct row {
    const char *field, *raw, *expanded;
} row;
#define ROW(field, value) {#field, #value, STR(value)},
static const row server_rows[] = {TIDEMARK_SERVER_DEFAULTS(ROW)};
static const row client_rows[] = {TIDEMARK_CLIENT_DEFAULTS(ROW)};
#define NROWS(t) (sizeof t / sizeof t[0])

static char *slurp(FILE *f)
{
    size_t cap = 1 << 16, n = 0, got;
    char *b = malloc(cap);
    assert_non_null(b);
    while ((got = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 4096) {
            b = realloc(b, cap *= 2);
            assert_non_null(b);
        }
    }
    b[n] = '\0';
    return b;
}

static char *read_source(const char *rel)
{
    const char *dir = getenv("TM_SOURCE_DIR");
    assert_non_null(dir); /* tests/abi/abi.cmake sets it */
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *text = slurp(f);
    fclose(f);
    return text;
}

/* Does text (len bytes, a line break counting as a space) hold "default "
 * + value, not followed by more of a number? */
static int names_default(const char *text, size_t len, const char *value)
{
    char want[256], *flat = malloc(len + 1);
    assert_non_null(flat);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) /* runs of blanks and line breaks: one space */
        if (!(text[i] == ' ' || text[i] == '\n') || (n && flat[n - 1] != ' '))
            flat[n++] = text[i] == '\n' ? ' ' : text[i];
    flat[n] = '\0';
    snprintf(want, sizeof want, "default %s", value);
    size_t wl = strlen(want);
    int found = 0;
    for (const char *p = flat; !found && (p = strstr(p, want)) != NULL; p++)
        found = !(p[wl] >= '0' && p[wl] <= '9');
    free(flat);
    return found;
}

static void test_defaults(void **state)
{
    (void)state;
    tidemark_server_config_t c;
    memset(&c, 0x5a, sizeof c);
    tidemark_server_config_init(&c);
    assert_int_equal(c.session_ttl_seconds, 86400); /* clients that never DELETE */
    assert_int_equal(c.max_connections, 16384);
    assert_int_equal(c.max_connections_per_address, 4096);
    assert_int_equal(c.request_deadline_ms, 30000);
    assert_int_equal(c.max_calls_per_session, 8);
    assert_int_equal(c.max_batch, 64);
    assert_int_equal(c.workers, 64);
    assert_string_equal(c.store, "memory");
    assert_null(c.metrics_addresses);
}

/* config_init gives exactly the table's values. */
static void test_defaults_table(void **state)
{
    (void)state;
    tidemark_server_config_t s;
    memset(&s, 0x5a, sizeof s);
    tidemark_server_config_init(&s);
    int n = 0;
#define CHECK_SERVER(field, value)                                                          \
    if (!SAME(s.field, value))                                                              \
        fail_msg("server config_init: %s is not the table's %s", #field, #value);           \
    n++;
    TIDEMARK_SERVER_DEFAULTS(CHECK_SERVER)
#undef CHECK_SERVER
    tidemark_client_config_t c;
    memset(&c, 0x5a, sizeof c);
    assert_int_equal(tidemark_client_config_init(&c), 0);
#define CHECK_CLIENT(field, value)                                                          \
    if (!SAME(c.field, value))                                                              \
        fail_msg("client config_init: %s is not the table's %s", #field, #value);           \
    n++;
    TIDEMARK_CLIENT_DEFAULTS(CHECK_CLIENT)
#undef CHECK_CLIENT
    assert_int_equal(n, NROWS(server_rows) + NROWS(client_rows));
    assert_null(s.allowed_origins); /* fields outside the table are zero */
    assert_int_equal(s.retain_events, 0);
    assert_null(c.url);
}

/* The struct's text in the header, from its opening line to its typedef name. */
static const char *struct_body(const char *hdr, const char *open, const char *close, size_t *len)
{
    const char *a = strstr(hdr, open), *b = a ? strstr(a, close) : NULL;
    assert_non_null(a);
    assert_non_null(b);
    *len = (size_t)(b - a);
    return a;
}

/* The trailing comment of field's declaration in body (from the ';' to the
 * end of the comment that opens on that line), or NULL. */
static const char *trailing_comment(const char *body, size_t len, const char *field, size_t *clen)
{
    char decl[128];
    for (const char *lead = " *"; *lead; lead++) {
        snprintf(decl, sizeof decl, "%c%s;", *lead, field);
        const char *d = strstr(body, decl);
        if (!d || d >= body + len)
            continue;
        const char *semi = d + strlen(decl) - 1, *eol = strchr(semi, '\n');
        const char *open = strstr(semi, "/*");
        if (!open || !eol || open > eol)
            return NULL;
        const char *end = strstr(open, "*/");
        *clen = end ? (size_t)(end - semi) : 0;
        return end ? semi : NULL;
    }
    fail_msg("%s: no declaration in the struct", field);
    return NULL;
}

/* Every declaration whose trailing comment names a numeric default other
 * than 0 is a row of the table (a default written only in a comment
 * drifts). */
static void no_default_outside(const char *body, size_t len, const row *rows, size_t nrows)
{
    for (const char *semi = memchr(body, ';', len); semi && semi < body + len;
         semi = memchr(semi + 1, ';', (size_t)(body + len - semi - 1))) {
        const char *bol = semi;
        while (bol > body && bol[-1] != '\n')
            bol--;
        while (*bol == ' ')
            bol++;
        const char *before = strstr(bol, "/*");
        if (*bol == '/' || *bol == '*' || (before && before < semi))
            continue; /* a ';' inside a comment */
        const char *f = semi;
        while (f > bol && (f[-1] == '_' || (f[-1] >= 'a' && f[-1] <= 'z') ||
                           (f[-1] >= '0' && f[-1] <= '9')))
            f--;
        const char *eol = strchr(semi, '\n'), *open = strstr(semi, "/*");
        if (!open || open > eol)
            continue;
        const char *end = strstr(open, "*/");
        const char *d = strstr(open, "default ");
        if (!d || d > end || !(d[8] >= '0' && d[8] <= '9'))
            continue;
        if (d[8] == '0' && !(d[9] >= '0' && d[9] <= '9'))
            continue; /* zero: the table lists only defaults that are not */
        int found = 0;
        for (size_t i = 0; i < nrows; i++)
            found |= strlen(rows[i].field) == (size_t)(semi - f) &&
                     memcmp(rows[i].field, f, (size_t)(semi - f)) == 0;
        if (!found)
            fail_msg("%.*s: its comment names a default the table does not have",
                     (int)(semi - f), f);
    }
}

static void check_comments(const char *rel, const char *open, const char *close, const row *rows,
                           size_t nrows)
{
    char *hdr = read_source(rel);
    size_t len;
    const char *body = struct_body(hdr, open, close, &len);
    int wrong = 0; /* every mismatch is printed before the test fails */
    for (size_t i = 0; i < nrows; i++) {
        size_t clen = 0;
        const char *c = trailing_comment(body, len, rows[i].field, &clen);
        if (!c || !(names_default(c, clen, rows[i].raw) || names_default(c, clen, rows[i].expanded))) {
            print_error("%s: the comment of %s does not say \"default %s\"\n", rel,
                        rows[i].field, rows[i].raw);
            wrong++;
        }
    }
    if (wrong)
        fail_msg("%s: %d comments do not name the table's default", rel, wrong);
    no_default_outside(body, len, rows, nrows);
    free(hdr);
}

/* The headers' comments name the table's defaults, and no other. */
static void test_defaults_comments(void **state)
{
    (void)state;
    check_comments("include/tidemark/server.h", "typedef struct tidemark_server_config {",
                   "} tidemark_server_config_t;", server_rows, NROWS(server_rows));
    check_comments("include/tidemark/client.h", "typedef struct tidemark_client_config {",
                   "} tidemark_client_config_t;", client_rows, NROWS(client_rows));
}

/* Is field one of skip (NULL-terminated)? */
static int skipped(const char *const *skip, const char *field)
{
    for (; *skip; skip++)
        if (strcmp(*skip, field) == 0)
            return 1;
    return 0;
}

/* prog --help: the text of each flag named after a table field ("--" and
 * the field with '-' for '_') says the table's default. Returns how many
 * flags were checked. skip: fields whose flag of that name is not theirs,
 * or has the program's own default. */
static size_t check_help(const char *prog, const row *rows, size_t nrows, const char *const *skip)
{
    const char *dir = getenv("TM_BIN_DIR");
    assert_non_null(dir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s/%s' --help", dir, prog);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *help = slurp(p);
    assert_int_equal(pclose(p), 0);
    size_t checked = 0;
    for (size_t i = 0; i < nrows; i++) {
        char flag[128], value[256];
        snprintf(flag, sizeof flag, "\n  --%s ", rows[i].field);
        for (char *q = flag + 5; *q; q++)
            if (*q == '_')
                *q = '-';
        const char *at = strstr(help, flag);
        if (!at || skipped(skip, rows[i].field))
            continue;
        const char *next = strstr(at + 1, "\n  --");
        size_t len = next ? (size_t)(next - at) : strlen(at);
        const char *v = rows[i].expanded;
        size_t vl = strlen(v);
        if (vl >= 2 && v[0] == '"')
            snprintf(value, sizeof value, "%.*s", (int)(vl - 2), v + 1);
        else
            snprintf(value, sizeof value, "%s", v);
        if (!names_default(at, len, value))
            fail_msg("%s --help: %.*s does not say \"default %s\"", prog, (int)len, at, value);
        checked++;
    }
    free(help);
    return checked;
}

static void test_defaults_help(void **state)
{
    (void)state;
    /* --version prints the program's version (not a serverInfo/clientInfo
     * setting); tidemark-server's store is its own: a SQLite file */
    static const char *const server_skip[] = {"version", "store", NULL};
    static const char *const client_skip[] = {"version", NULL};
    assert_true(check_help("tidemark-server", server_rows, NROWS(server_rows), server_skip) >= 20);
    assert_true(check_help("tidemark-client", client_rows, NROWS(client_rows), client_skip) >= 4);
}

static void test_version(void **state)
{
    (void)state;
    int n = 0;
    assert_string_equal(tidemark_version(&n), TIDEMARK_VERSION);
    assert_int_equal(n, TIDEMARK_VERSION_NUMBER);
    char text[32];
    snprintf(text, sizeof text, "%d.%d.%d", TIDEMARK_VERSION_MAJOR, TIDEMARK_VERSION_MINOR,
             TIDEMARK_VERSION_PATCH);
    assert_string_equal(text, TIDEMARK_VERSION);
}

/* Every code of the table: its value, message and name; codes dense from
 * -1 down to TIDEMARK_ELAST, each message its own; nothing past them. */
static void test_errors(void **state)
{
    (void)state;
    int n = 0;
#define CHECK_CODE(name, value, message)                                                    \
    assert_int_equal(TIDEMARK_##name, value);                                               \
    assert_string_equal(tidemark_strerror(value), message);                                 \
    assert_string_equal(tidemark_err_name(value), "TIDEMARK_" #name);                       \
    n++;
    TIDEMARK_ERRNO_MAP(CHECK_CODE)
#undef CHECK_CODE
    assert_int_equal(n, -TIDEMARK_ELAST);
    for (int e = TIDEMARK_ELAST; e <= 0; e++) {
        assert_non_null(tidemark_err_name(e));
        assert_string_not_equal(tidemark_strerror(e), "unknown error");
        for (int f = e + 1; f <= 0; f++)
            assert_string_not_equal(tidemark_strerror(e), tidemark_strerror(f));
    }
    assert_string_equal(tidemark_err_name(TIDEMARK_OK), "TIDEMARK_OK");
    assert_string_equal(tidemark_strerror(TIDEMARK_ELAST - 1), "unknown error");
    assert_null(tidemark_err_name(TIDEMARK_ELAST - 1));
    assert_null(tidemark_err_name(1));
}

/* Memory that changes hands: tidemark_strdup's copy is freed by
 * tidemark_free (under ASan a mismatch would be reported), NULL is fine. */
static void test_memory_handover(void **state)
{
    (void)state;
    char *s = tidemark_strdup("http://127.0.0.1/cb?code=x");
    assert_string_equal(s, "http://127.0.0.1/cb?code=x");
    tidemark_free(s);
    assert_null(tidemark_strdup(NULL));
    tidemark_free(NULL);
}

/* Durations are int64_t ms in [0, UINT32_MAX], the port an int in
 * [0, 65535]: anything else is refused, never wrapped. */
static void test_config_ranges(void **state)
{
    (void)state;
    tidemark_server_config_t c;
    tidemark_server_t *srv = NULL;
    const int bad_ports[] = {-1, 65536};
    for (size_t i = 0; i < 2; i++) {
        tidemark_server_config_init(&c);
        c.port = bad_ports[i];
        assert_int_equal(tidemark_server_new(&c, &srv), TIDEMARK_EINVAL);
    }
    tidemark_server_config_init(&c);
    c.keepalive_ms = -1;
    assert_int_equal(tidemark_server_new(&c, &srv), TIDEMARK_EINVAL);
    tidemark_server_config_init(&c);
    c.request_state_ttl_ms = (int64_t)UINT32_MAX + 1;
    assert_int_equal(tidemark_server_new(&c, &srv), TIDEMARK_EINVAL);
    assert_null(srv);
    tidemark_server_config_init(&c);
    c.port = 65535;
    c.request_deadline_ms = 0; /* zero: the default */
    assert_int_equal(tidemark_server_new(&c, &srv), 0);
    tidemark_server_free(srv);

    tidemark_client_config_t cc;
    tidemark_client_t *cl = NULL;
    tidemark_client_config_init(&cc);
    cc.url = "http://127.0.0.1:9/mcp";
    cc.backoff_ms = -1;
    assert_int_equal(tidemark_client_new(&cc, &cl), TIDEMARK_EINVAL);
    cc.backoff_ms = 0;
    cc.reserved0 = 1; /* a setting of a later header this library does not know */
    assert_int_equal(tidemark_client_new(&cc, &cl), TIDEMARK_ENOTSUP);
    assert_null(cl);
    cc.reserved0 = 0;
    cc.timeout_ms = -1; /* timeout_ms: below zero is the default */
    assert_int_equal(tidemark_client_new(&cc, &cl), 0);
    tidemark_client_free(cl);
}

/* A program built against an older header passes a smaller struct: the
 * library reads only that many bytes (garbage after them is never seen) and
 * gives the rest their defaults. */
static void test_older_header(void **state)
{
    (void)state;
    union {
        tidemark_server_config_t cfg;
        unsigned char bytes[sizeof(tidemark_server_config_t)];
    } u;
    size_t old = offsetof(tidemark_server_config_t, max_connections);
    memset(u.bytes, 0xff, sizeof u.bytes); /* a newer field read would be absurd */
    tidemark_server_config_init_sized(&u.cfg, old);
    tidemark_server_t *srv = NULL;
    assert_int_equal(tidemark_server_new_sized(&u.cfg, old, &srv), 0);
    tidemark_server_free(srv);
    tidemark_tool_t t;
    memset(&t, 0xff, sizeof t);
    memset(&t, 0, offsetof(tidemark_tool_t, hints));
    t.name = "x";
    /* an older tidemark_tool_t without hints, fn, ud: no fn is EINVAL, not a crash */
    assert_int_equal(tidemark_server_new_sized(&u.cfg, old, &srv), TIDEMARK_OK);
    assert_int_equal(tidemark_server_add_tool_sized(srv, &t, offsetof(tidemark_tool_t, hints)),
                     TIDEMARK_EINVAL);
    tidemark_server_free(srv);
}

/* A newer header's struct: fields this library does not know must be zero,
 * else the setting would be silently ignored. */
static void test_newer_header(void **state)
{
    (void)state;
    struct {
        tidemark_server_config_t cfg;
        uint64_t unknown;
    } newer;
    memset(&newer, 0, sizeof newer);
    tidemark_server_config_init_sized(&newer.cfg, sizeof newer);
    assert_int_equal(newer.unknown, 0);
    tidemark_server_t *srv = NULL;
    assert_int_equal(tidemark_server_new_sized(&newer.cfg, sizeof newer, &srv), 0);
    tidemark_server_free(srv);
    newer.unknown = 7;
    srv = NULL;
    assert_int_equal(tidemark_server_new_sized(&newer.cfg, sizeof newer, &srv), TIDEMARK_ENOTSUP);
    assert_null(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_defaults_table),
        cmocka_unit_test(test_defaults_comments),
        cmocka_unit_test(test_defaults_help),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_memory_handover),
        cmocka_unit_test(test_config_ranges),
        cmocka_unit_test(test_older_header),
        cmocka_unit_test(test_newer_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
