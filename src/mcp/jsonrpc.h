/*
 * jsonrpc.h - JSON-RPC 2.0 message layer: strict validation, exact ids.
 * Ids: integers keep all 64 bits (jansson json_int_t), strings keep their
 * bytes (NUL included), anything else is invalid.
 */
#ifndef TM_JSONRPC_H
#define TM_JSONRPC_H
#include <jansson.h>
#include <stddef.h>

/* JSON-RPC and MCP error codes. */
#define TM_RPC_PARSE_ERROR      -32700
#define TM_RPC_INVALID_REQUEST  -32600
#define TM_RPC_METHOD_NOT_FOUND -32601
#define TM_RPC_INVALID_PARAMS   -32602
#define TM_RPC_INTERNAL_ERROR   -32603
#define TM_RPC_RESOURCE_NOT_FOUND -32002
#define TM_RPC_SERVER_ERROR     -32000
#define TM_RPC_SESSION_NOT_FOUND -32001
#define TM_RPC_OUTCOME_UNKNOWN  -32010
#define TM_RPC_REQUEST_CANCELLED -32800

typedef enum tm_msg_kind {
    TM_MSG_INVALID = 0,
    TM_MSG_REQUEST,
    TM_MSG_NOTIFICATION,
    TM_MSG_RESULT,
    TM_MSG_ERROR,
} tm_msg_kind;

typedef struct tm_msg {
    tm_msg_kind kind;
    json_t *raw;        /* borrowed: the message object */
    json_t *id;         /* borrowed; NULL for notifications / unknown */
    const char *method; /* requests and notifications */
    json_t *params;     /* borrowed or NULL */
    json_t *result;     /* TM_MSG_RESULT */
    json_t *error;      /* TM_MSG_ERROR */
    const char *why;    /* TM_MSG_INVALID: typed reason */
    const char *detail; /* TM_MSG_INVALID: human text */
    int code;           /* TM_MSG_INVALID: JSON-RPC code (0: invalid request) */
} tm_msg;

/* Request ids are keyed exactly (every byte counts), so a retry is found by
 * its id whatever the id's length; to bound what one request can make us
 * store, a string id longer than this is refused (invalid_request,
 * data.reason "id_too_long") before anything runs. */
#define TM_ID_MAX_BYTES 1024
/* The same bound for _meta["dev.tidemark/idempotency-key"]. */
#define TM_IDEM_KEY_MAX_BYTES 512
/* Room for the key of any id within the limit: "s:" and every byte escaped
 * as %xx in the worst case, NUL ended. */
#define TM_ID_KEY_MAX (2 + 3 * TM_ID_MAX_BYTES + 1)
#define TM_STRINGIFY_(x) #x
#define TM_STRINGIFY(x) TM_STRINGIFY_(x)

/* Parse a body. OUT *root: the parsed value (caller decrefs). On a syntax
 * error returns TIDEMARK_EINVAL and writes jansson's text into err. */
int tm_jsonrpc_parse(const char *body, size_t len, json_t **root, char *err, size_t errlen);
/* Classify and validate one message. Never fails; invalid -> kind INVALID. */
void tm_jsonrpc_classify(json_t *v, tm_msg *out);
/* 1 if v is a valid id: integer or string. */
int tm_jsonrpc_id_valid(const json_t *id);
/* Canonical key for an id, for maps and request records: "i:<n>" or
 * "s:<bytes>" with NUL and '%' written as %00 / %25, so different ids never
 * share a key. TIDEMARK_ERANGE when it does not fit in n (never truncates):
 * TM_ID_KEY_MAX always fits a valid id (tm_jsonrpc_classify refuses longer). */
int tm_jsonrpc_id_key(const json_t *id, char *out, size_t n);
/* prefix followed by len bytes of s escaped as in tm_jsonrpc_id_key, into
 * out (n bytes). TIDEMARK_ERANGE when it does not fit. */
int tm_jsonrpc_key_escape(const char *prefix, const char *s, size_t len, char *out, size_t n);

/* New response objects (new references). id may be NULL (-> null). */
json_t *tm_jsonrpc_result(json_t *id, json_t *result /* stolen */);
/* Error with data.reason; extra (stolen, may be NULL) is merged into data. */
json_t *tm_jsonrpc_error(json_t *id, int code, const char *message, const char *reason,
                         json_t *extra);
json_t *tm_jsonrpc_notification(const char *method, json_t *params /* stolen, may be NULL */);
json_t *tm_jsonrpc_request(json_t *id /* stolen */, const char *method, json_t *params /* stolen */);
/* Serialise compactly. OUT len. Caller frees. */
char *tm_jsonrpc_dump(const json_t *v, size_t *len);

/* The MCP protocol versions this library speaks, newest first, NULL-ended. */
extern const char *const tm_protocol_versions[];
/* 1 if v is one of them. */
int tm_protocol_version_supported(const char *v);

#endif
