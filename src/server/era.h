/* era.h - the era of a request and the checks of a 2026-07-28 request's
 * metadata and headers (era.c). */
#ifndef TM_ERA_H
#define TM_ERA_H
#include "../mcp/jsonrpc.h"
#include <jansson.h>

#define TM_MODERN_VERSION "2026-07-28"
#define TM_META_VERSION "io.modelcontextprotocol/protocolVersion"
#define TM_META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define TM_META_INFO "io.modelcontextprotocol/clientInfo"
#define TM_META_LOG "io.modelcontextprotocol/logLevel"
#define TM_META_SERVER "io.modelcontextprotocol/serverInfo"
#define TM_META_SUB "io.modelcontextprotocol/subscriptionId"

#define TM_RPC_HEADER_MISMATCH -32020
#define TM_RPC_MISSING_CAPABILITY -32021
#define TM_RPC_UNSUPPORTED_VERSION -32022

/* Every version the server serves, newest first, NULL-ended. */
extern const char *const tm_era_served[];
json_t *tm_era_served_json(void);

typedef const char *(*tm_hdr_fn)(void *ud, const char *name);

/* The body's _meta protocol version (a single request object), or NULL. */
const char *tm_era_body_version(const json_t *root);
/* 1 when a POST is of the modern era: its MCP-Protocol-Version header says
 * 2026-07-28, or its body carries a _meta version that is not one of the
 * session-based ones. Everything else keeps the 2025 behaviour. */
int tm_era_modern(const char *hdr_pv, const json_t *root);
/* A header value, trimmed, decoded when in the "=?base64?...?=" form (strict
 * standard Base64 with padding). OUT *out (malloc'd, NUL-ended), *len.
 * TIDEMARK_ENOTFOUND when absent, TIDEMARK_EINVAL when malformed. */
int tm_era_header_value(const char *raw, char **out, size_t *len);
/* Check a modern request m: _meta (-32602 invalid_request_meta), the version
 * header against the body (-32020) and the version (-32022 with data
 * {requested, supported}), Mcp-Method, Mcp-Name, and for tools/call the
 * Mcp-Param-* headers input_schema (may be NULL) declares (-32020, reasons
 * header_missing / header_mismatch / header_invalid). NULL when it passes,
 * else the error response; *status is its HTTP status. */
json_t *tm_era_check(const tm_msg *m, tm_hdr_fn hdr, void *ud, const json_t *input_schema,
                     unsigned *status);
/* The same for a request that came without headers (stdio): _meta and the
 * version only (there is no header to mirror the body). */
json_t *tm_era_check_body(const tm_msg *m, unsigned *status);

#endif
