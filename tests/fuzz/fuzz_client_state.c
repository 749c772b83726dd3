/*
 * fuzz_client_state.c - the client's state file (src/client/cstate.c):
 * what is written into it and what is decoded from it after a restart -
 * the session row and the server info JSON, cursors, the dispatch log, the
 * outstanding requests and their params JSON.
 *
 * Input: one operation per line, fields separated by TAB:
 *   c STREAM EVENT_ID SEQ          cursor_set (in a transaction)
 *   o ID METHOD PARAMS [IDEM_KEY]  outstanding_add; PARAMS is JSON text (a
 *                                  value with NUL in strings is allowed, as
 *                                  an application may pass one)
 *   s ID STREAM                    outstanding_stream
 *   d ID                           outstanding_done
 *   D EVENT_ID STREAM SEQ STATE    dispatch_set (in a transaction)
 *   S URL ID VERSION SERVER_JSON   session_set (as after initialize)
 *   X                              session_clear
 *   N                              next_request_id
 *   R TABLE COLUMN TYPE VALUE      a damaged file: UPDATE TABLE SET COLUMN
 *                                  to VALUE of TYPE i, r, t (bytes), b or n
 * Then everything is read back with the loading functions and decoded the
 * way the client (src/client/) decodes it (connect_inner: the server info;
 * tidemark_client_resume: params, method, stream, cursor).
 *
 * Invariants, while no R line damaged the file: every value reads back
 * exactly as written (last write wins per key; session_clear forgets
 * session, cursors, dispatch log and outstanding requests); params and
 * server info decode to the JSON that was written; a resumed request is a
 * valid JSON-RPC request with its own id and method; request ids only
 * grow. With damage: nothing crashes, every
 * call returns a code, every string returned is a C string.
 */
#include "fuzz_util.h"
#include "client/cstate.h"
#include "mcp/jsonrpc.h"
#include "tidemark/tidemark.h"
#include "base/log.h"

#include <inttypes.h>

#define MAXK 64

typedef struct cur_s {
    char *stream, *event_id;
    uint64_t seq;
} cur_s;
typedef struct out_s {
    int64_t id;
    char *method, *params, *idem, *stream;
    json_t *pjson; /* the params value written */
} out_s;
typedef struct dis_s {
    char *event_id, *stream;
    uint64_t seq;
    int state;
} dis_s;

typedef struct model {
    cur_s cur[MAXK];
    size_t ncur;
    out_s out[MAXK];
    size_t nout;
    dis_s dis[MAXK];
    size_t ndis;
    int have_session;
    char *url, *sid, *version, *server;
    json_t *server_json;
    int damaged;
    int64_t last_req_id;
} model;

static char *dupz(const char *s)
{
    return s ? fz_dup(s, strlen(s)) : NULL;
}

static int streq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void clear_cur(model *m)
{
    for (size_t i = 0; i < m->ncur; i++) {
        free(m->cur[i].stream);
        free(m->cur[i].event_id);
    }
    m->ncur = 0;
}

static void free_out(out_s *o)
{
    free(o->method);
    free(o->params);
    free(o->idem);
    free(o->stream);
    json_decref(o->pjson);
}

static void clear_out(model *m)
{
    for (size_t i = 0; i < m->nout; i++)
        free_out(&m->out[i]);
    m->nout = 0;
}

static void clear_dis(model *m)
{
    for (size_t i = 0; i < m->ndis; i++) {
        free(m->dis[i].event_id);
        free(m->dis[i].stream);
    }
    m->ndis = 0;
}

static void clear_session(model *m)
{
    free(m->url);
    free(m->sid);
    free(m->version);
    free(m->server);
    json_decref(m->server_json);
    m->url = m->sid = m->version = m->server = NULL;
    m->server_json = NULL;
    m->have_session = 0;
}

/* What tm_sqlite_query_json gives for a text column: the string, or null
 * when the bytes are not UTF-8. */
static int utf8_ok(const char *s)
{
    json_t *j = json_string(s);
    int ok = j != NULL;
    json_decref(j);
    return ok;
}

static uint64_t num(const char *s)
{
    return s ? strtoull(s, NULL, 10) : 0;
}

static void op_raw(tm_cstate *st, char **f, size_t nf, const size_t *fl)
{
    static const char *const tables[] = {"tmc_session", "tmc_cursor", "tmc_outstanding",
                                         "tmc_dispatch", "tmc_meta"};
    static const char *const cols[5][5] = {
        {"url", "id", "version", "server", "url"},
        {"event_id", "seq", "stream", "event_id", "seq"},
        {"method", "params", "stream", "idem_key", "request_id"},
        {"seq", "state", "stream", "event_id", "seq"},
        {"v", "v", "v", "v", "v"},
    };
    if (nf < 4)
        return;
    size_t t = num(f[0]) % 5, c = num(f[1]) % 5;
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE %s SET %s = ?1", tables[t], cols[t][c]);
    sqlite3 *db = tm_cstate_db(st);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
        return;
    const char *v = nf > 3 ? f[3] : "";
    size_t vl = nf > 3 ? fl[3] : 0;
    switch (f[2][0]) {
    case 'i': sqlite3_bind_int64(s, 1, (sqlite3_int64)strtoll(v, NULL, 10)); break;
    case 'r': sqlite3_bind_double(s, 1, strtod(v, NULL)); break;
    case 'b': sqlite3_bind_blob(s, 1, v, (int)vl, SQLITE_TRANSIENT); break;
    case 'n': sqlite3_bind_null(s, 1); break;
    default: sqlite3_bind_text(s, 1, v, (int)vl, SQLITE_TRANSIENT); break;
    }
    sqlite3_step(s); /* may fail on a constraint: fine */
    sqlite3_finalize(s);
}

static void apply(model *m, tm_cstate *st, char *line, size_t len)
{
    /* Split at TAB; fields keep their bytes up to the first NUL only where
     * the API takes C strings. */
    char *f[8];
    size_t fl[8], nf = 0;
    fz g = {(const uint8_t *)line + 1, len ? len - 1 : 0};
    const char *s;
    size_t l;
    while (nf < 8 && (s = fz_field(&g, '\t', &l)) != NULL) {
        f[nf] = (char *)s;
        fl[nf] = l;
        nf++;
    }
    for (size_t i = 0; i < nf; i++)
        f[i][fl[i]] = '\0'; /* line is a private copy with room */
    switch (line[0]) {
    case 'c': {
        if (nf < 3)
            return;
        uint64_t seq = num(f[2]) & INT64_MAX;
        FUZZ_CHECK(tm_cstate_begin(st) == 0, "begin");
        int rc = tm_cstate_cursor_set(st, f[0], f[1], seq);
        FUZZ_CHECK(tm_cstate_commit(st) == 0, "commit");
        if (rc)
            return;
        size_t i;
        for (i = 0; i < m->ncur && strcmp(m->cur[i].stream, f[0]) != 0; i++)
            ;
        if (i == m->ncur) {
            if (m->ncur == MAXK)
                return;
            m->cur[m->ncur++].stream = dupz(f[0]);
        } else {
            free(m->cur[i].event_id);
        }
        m->cur[i].event_id = dupz(f[1]);
        m->cur[i].seq = seq;
        return;
    }
    case 'o': {
        if (nf < 3)
            return;
        int64_t id = (int64_t)(num(f[0]) & INT64_MAX);
        json_error_t e;
        json_t *p = json_loadb(f[2], fl[2], JSON_ALLOW_NUL, &e);
        char *ptxt = p ? json_dumps(p, JSON_COMPACT) : dupz(f[2]);
        const char *idem = nf > 3 && fl[3] ? f[3] : NULL;
        int rc = tm_cstate_outstanding_add(st, id, f[1], ptxt, idem, (int)(id & 1));
        if (rc) {
            json_decref(p);
            free(ptxt);
            return;
        }
        size_t i;
        for (i = 0; i < m->nout && m->out[i].id != id; i++)
            ;
        if (i == m->nout) {
            if (m->nout == MAXK) {
                json_decref(p);
                free(ptxt);
                m->damaged = 1; /* the model cannot follow any more */
                return;
            }
            m->nout++;
        } else {
            free_out(&m->out[i]);
        }
        m->out[i] = (out_s){.id = id, .method = dupz(f[1]), .params = ptxt, .idem = dupz(idem),
                            .stream = NULL, .pjson = p};
        return;
    }
    case 's': {
        if (nf < 2)
            return;
        int64_t id = (int64_t)(num(f[0]) & INT64_MAX);
        if (tm_cstate_outstanding_stream(st, id, f[1]) != 0)
            return;
        for (size_t i = 0; i < m->nout; i++)
            if (m->out[i].id == id) {
                free(m->out[i].stream);
                m->out[i].stream = dupz(f[1]);
            }
        return;
    }
    case 'd': {
        if (nf < 1)
            return;
        int64_t id = (int64_t)(num(f[0]) & INT64_MAX);
        if (tm_cstate_outstanding_done(st, id) != 0)
            return;
        for (size_t i = 0; i < m->nout; i++)
            if (m->out[i].id == id) {
                free_out(&m->out[i]);
                m->out[i] = m->out[--m->nout];
                break;
            }
        return;
    }
    case 'D': {
        if (nf < 4)
            return;
        uint64_t seq = num(f[2]) & INT64_MAX;
        int state = num(f[3]) & 1 ? TM_DISPATCH_PROCESSED : TM_DISPATCH_COMMITTED;
        FUZZ_CHECK(tm_cstate_begin(st) == 0, "begin");
        int rc = tm_cstate_dispatch_set(st, f[0], f[1], seq, state);
        FUZZ_CHECK(tm_cstate_commit(st) == 0, "commit");
        if (rc)
            return;
        size_t i;
        for (i = 0; i < m->ndis && strcmp(m->dis[i].event_id, f[0]) != 0; i++)
            ;
        if (i == m->ndis) {
            if (m->ndis == MAXK) {
                m->damaged = 1;
                return;
            }
            m->dis[m->ndis++].event_id = dupz(f[0]);
        } else {
            free(m->dis[i].stream);
        }
        m->dis[i].stream = dupz(f[1]);
        m->dis[i].seq = seq;
        m->dis[i].state = state;
        return;
    }
    case 'S': {
        if (nf < 4)
            return;
        /* The client writes the initialize result it parsed (flags 0). */
        json_t *info = json_loadb(f[3], fl[3], 0, NULL);
        char *txt = info ? json_dumps(info, JSON_COMPACT) : NULL;
        const char *version = fl[2] ? f[2] : NULL;
        if (tm_cstate_session_set(st, f[0], f[1], version, txt) != 0) {
            json_decref(info);
            free(txt);
            return;
        }
        clear_session(m);
        m->have_session = 1;
        m->url = dupz(f[0]);
        m->sid = dupz(f[1]);
        m->version = dupz(version);
        m->server = txt;
        m->server_json = info;
        return;
    }
    case 'X':
        FUZZ_CHECK(tm_cstate_session_clear(st) == 0, "session_clear");
        clear_session(m);
        clear_cur(m);
        clear_out(m);
        clear_dis(m);
        return;
    case 'N': {
        int64_t id = -1;
        int rc = tm_cstate_next_request_id(st, &id);
        if (!m->damaged)
            FUZZ_CHECK(rc == 0, "next_request_id %d", rc);
        if (!m->damaged)
            FUZZ_CHECK(id > m->last_req_id, "request id %" PRId64 " after %" PRId64, id,
                       m->last_req_id);
        if (id > m->last_req_id)
            m->last_req_id = id;
        return;
    }
    case 'R':
        op_raw(st, f, nf, fl);
        m->damaged = 1;
        return;
    default:
        return;
    }
}

static void check_all(model *m, tm_cstate *st)
{
    /* Session and server info, decoded as connect_inner does. */
    char *url, *id, *version, *server;
    int rc = tm_cstate_session_get(st, &url, &id, &version, &server);
    json_t *info = server ? json_loads(server, 0, NULL) : NULL;
    if (!m->damaged) {
        FUZZ_CHECK((rc == 0) == m->have_session, "session_get %d", rc);
        if (m->have_session) {
            FUZZ_CHECK(streq(url, m->url) && streq(id, m->sid) && streq(version, m->version) &&
                           streq(server, m->server),
                       "session row changed");
            FUZZ_CHECK((info == NULL) == (m->server_json == NULL) &&
                           (!info || json_equal(info, m->server_json)),
                       "server info decodes to another value");
        } else {
            FUZZ_CHECK(!url && !id && !version && !server, "strings without a session");
        }
    }
    json_decref(info);
    free(url);
    free(id);
    free(version);
    free(server);

    /* Cursors and the dispatch log, as accept_event and resume read them. */
    FUZZ_CHECK(tm_cstate_begin(st) == 0, "begin");
    for (size_t i = 0; i < m->ncur && !m->damaged; i++) {
        tm_cursor c;
        memset(&c, 0x5a, sizeof c);
        FUZZ_CHECK(tm_cstate_cursor_get(st, m->cur[i].stream, &c) == 0, "cursor_get");
        FUZZ_CHECK(c.known == 1 && c.seq == m->cur[i].seq, "cursor of [%s]",
                   fz_show(m->cur[i].stream, strlen(m->cur[i].stream)));
        FUZZ_CHECK(memchr(c.event_id, 0, sizeof c.event_id), "cursor id not NUL-terminated");
        /* Kept whole or refused at cursor_set (never modelled then): a
         * cursor read back is exactly the one saved. */
        FUZZ_CHECK(strcmp(c.event_id, m->cur[i].event_id) == 0, "cursor id changed (%zu -> %zu bytes)",
                   strlen(m->cur[i].event_id), strlen(c.event_id));
        uint64_t last = 0;
        FUZZ_CHECK(tm_cstate_last_dispatched(st, m->cur[i].stream, &last) == 0, "last_dispatched");
        uint64_t want_last = 0;
        for (size_t k = 0; k < m->ndis; k++)
            if (strcmp(m->dis[k].stream, m->cur[i].stream) == 0 && m->dis[k].seq > want_last)
                want_last = m->dis[k].seq;
        FUZZ_CHECK(last == want_last, "last dispatched %" PRIu64 ", want %" PRIu64, last, want_last);
    }
    {
        tm_cursor c;
        FUZZ_CHECK(tm_cstate_cursor_get(st, "\x01no such stream", &c) == 0 && (m->damaged || !c.known),
                   "cursor of a stream never saved");
        for (size_t k = 0; k < m->ncur; k++) /* damaged: still a C string */
            if (tm_cstate_cursor_get(st, m->cur[k].stream, &c) == 0)
                FUZZ_CHECK(memchr(c.event_id, 0, sizeof c.event_id), "cursor id not NUL-terminated");
    }
    for (size_t i = 0; i < m->ndis && !m->damaged; i++) {
        int state = -1;
        FUZZ_CHECK(tm_cstate_dispatch_state(st, m->dis[i].event_id, &state) == 0 &&
                       state == m->dis[i].state, "dispatch state");
    }
    tm_cstate_rollback(st);

    /* Outstanding requests, decoded as tidemark_client_resume does. */
    json_t *rows = NULL;
    rc = tm_cstate_outstanding_list(st, &rows);
    FUZZ_CHECK(rc == 0 && json_is_array(rows), "outstanding_list %d", rc);
    if (!m->damaged)
        FUZZ_CHECK(json_array_size(rows) == m->nout, "%zu outstanding, want %zu",
                   json_array_size(rows), m->nout);
    size_t i;
    json_t *row;
    int64_t prev = INT64_MIN;
    json_array_foreach(rows, i, row) {
        FUZZ_CHECK(json_is_object(row), "row");
        int64_t rid = json_integer_value(json_object_get(row, "request_id"));
        const char *method = json_string_value(json_object_get(row, "method"));
        json_t *pv = json_object_get(row, "params");
        const char *stream = json_string_value(json_object_get(row, "stream"));
        json_t *params =
            json_loads(json_is_string(pv) ? json_string_value(pv) : "{}", JSON_ALLOW_NUL, NULL);
        json_t *req = tm_jsonrpc_request(json_integer(rid), method, params);
        if (!m->damaged) {
            FUZZ_CHECK(rid > prev, "rows not in request id order");
            const out_s *o = NULL;
            for (size_t k = 0; k < m->nout; k++)
                if (m->out[k].id == rid)
                    o = &m->out[k];
            FUZZ_CHECK(o != NULL, "row %" PRId64 " was never added", rid);
            FUZZ_CHECK(utf8_ok(o->method) ? streq(method, o->method) : method == NULL, "method");
            FUZZ_CHECK(!o->stream || !utf8_ok(o->stream) ? stream == NULL : streq(stream, o->stream),
                       "stream");
            const char *idem = json_string_value(json_object_get(row, "idem_key"));
            FUZZ_CHECK(!o->idem || !utf8_ok(o->idem) ? idem == NULL : streq(idem, o->idem),
                       "idempotency key");
            if (o->pjson && (json_is_object(o->pjson) || json_is_array(o->pjson)))
                FUZZ_CHECK(params && json_equal(params, o->pjson), "params decode to another value");
            /* The resumed request is a request with its own id and method. */
            if (method && method[0] && !memchr(method, 0, strlen(method)) &&
                (!params || json_is_object(params) || json_is_array(params))) {
                tm_msg msg;
                tm_jsonrpc_classify(req, &msg);
                FUZZ_CHECK(msg.kind == TM_MSG_REQUEST && json_integer_value(msg.id) == rid &&
                               strcmp(msg.method, method) == 0,
                           "resumed request classifies as %d", msg.kind);
            }
        }
        prev = rid;
        if (stream) {
            tm_cursor c;
            if (tm_cstate_begin(st) == 0) {
                tm_cstate_cursor_get(st, stream, &c);
                tm_cstate_rollback(st);
                FUZZ_CHECK(memchr(c.event_id, 0, sizeof c.event_id), "cursor id not NUL-terminated");
            }
        }
        json_decref(req);
    }
    json_decref(rows);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        tm_log_set_level(TM_LOG_ERROR); /* damaged rows make sqlite warnings */
        quiet = 1;
    }
    /* One in-memory state, emptied before each input (opening one costs
     * more than the whole input); the first input opens it. */
    static tm_cstate *st;
    if (!st)
        FUZZ_CHECK(tm_cstate_open(NULL, NULL, &st) == 0, "open");
    FUZZ_CHECK(sqlite3_exec(tm_cstate_db(st),
                            "DELETE FROM tmc_session; DELETE FROM tmc_cursor; DELETE FROM tmc_dispatch;"
                            " DELETE FROM tmc_outstanding; DELETE FROM tmc_meta;"
                            " INSERT INTO tmc_meta(k, v) VALUES('next_request_id', 1);",
                            NULL, NULL, NULL) == SQLITE_OK,
               "reset");
    model m;
    memset(&m, 0, sizeof m);
    fz f = {data, size};
    size_t len;
    const char *line;
    int ops = 0;
    while ((line = fz_field(&f, '\n', &len)) != NULL && ops++ < 256) {
        if (len == 0)
            continue;
        char *copy = fz_dup(line, len);
        apply(&m, st, copy, len);
        free(copy);
    }
    check_all(&m, st);
    clear_session(&m);
    clear_cur(&m);
    clear_out(&m);
    clear_dis(&m);
    return 0;
}
