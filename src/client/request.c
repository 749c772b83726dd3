/*
 * request.c - the request API: tidemark_client_request (with the 2026-07-28
 * era's cache, tool checks and input rounds around one round of drive.c),
 * call_tool and list.
 */
#include "client_int.h"
#include "../base/log.h"
#include "../mcp/jsonrpc.h"
#include <stdlib.h>
#include <string.h>

/* Modern, a tools/call: its tool's x-mcp-header annotations are needed
 * for the headers (tools/list once), and a tool whose annotations are
 * invalid is never called. */
static int modern_call_check(tidemark_client_t *c, json_t *params, json_t **result)
{
    const char *tool = json_string_value(json_object_get(params, "name"));
    if (!tm_modern_tool_known(c, tool)) {
        json_t *tools = NULL;
        int rc = tidemark_client_list(c, "tools/list", "tools", &tools);
        json_decref(tools);
        if (rc)
            TM_DEBUG("client: tools/list before a call failed (%s)", tidemark_strerror(rc));
    }
    if (!tm_modern_tool_refused(c, tool))
        return 0;
    tm_client_error(result, TM_RPC_INVALID_PARAMS, "invalid_tool_definition",
                    "the tool's x-mcp-header annotations are invalid: it is not called",
                    json_pack("{s:s}", "tool", tool));
    return TIDEMARK_EPROTO;
}

/* A tools/call the server refused for its Mcp-Param-* headers (-32020). */
static int header_mismatch(const char *method, int rc, json_t *err)
{
    return rc == TIDEMARK_EPEER && strcmp(method, "tools/call") == 0 &&
           json_integer_value(json_object_get(err, "code")) == TM_RPC_HEADER_MISMATCH;
}

int tidemark_client_request(tidemark_client_t *c, const char *method, json_t *params,
                            tidemark_progress_fn progress, void *progress_ud, json_t **result)
{
    if (!c || !method || !result)
        return TIDEMARK_EINVAL;
    *result = NULL;
    pthread_mutex_lock(&c->mu);
    int modern = c->modern;
    pthread_mutex_unlock(&c->mu);
    if (!modern)
        return tm_request_once(c, method, params, progress, progress_ud, result);
    if ((*result = tm_cache_get(c, method, params)) != NULL)
        return 0;
    int rc = strcmp(method, "tools/call") == 0 ? modern_call_check(c, params, result) : 0;
    if (rc)
        return rc;
    rc = tm_request_once(c, method, params, progress, progress_ud, result);
    if (header_mismatch(method, rc, *result)) {
        /* The tool's schema may have changed: its headers learned again,
         * then once more (a request refused at its headers never ran). */
        tm_modern_tools_forget(c);
        json_decref(*result);
        *result = NULL;
        if ((rc = modern_call_check(c, params, result)) != 0)
            return rc;
        rc = tm_request_once(c, method, params, progress, progress_ud, result);
    }
    rc = tm_mrtr_rounds(c, method, params, rc, progress, progress_ud, result);
    if (rc == 0 && strcmp(method, "tools/list") == 0)
        tm_modern_tools_seen(c, json_object_get(*result, "tools"));
    if (rc == 0)
        tm_cache_put(c, method, params, *result);
    return rc;
}

int tidemark_client_call_tool(tidemark_client_t *c, const char *name, json_t *args,
                              tidemark_progress_fn progress, void *ud, json_t **result)
{
    if (!c || !name || !result)
        return TIDEMARK_EINVAL;
    *result = NULL;
    json_t *params = json_pack("{s:s,s:o}", "name", name, "arguments",
                               args ? json_incref(args) : json_object());
    if (!params)
        return TIDEMARK_ENOMEM;
    int rc = tidemark_client_request(c, "tools/call", params, progress, ud, result);
    json_decref(params);
    return rc;
}

/* One page of a list: its items appended to items; OUT next (NULL at the end). */
static int list_page(tidemark_client_t *c, const char *method, const char *field, json_t *cursor,
                     json_t *items, json_t **next, json_t **err)
{
    json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : NULL;
    if (cursor && !params)
        return TIDEMARK_ENOMEM;
    json_t *res = NULL;
    int rc = tidemark_client_request(c, method, params, NULL, NULL, &res);
    json_decref(params);
    if (rc) {
        *err = res;
        return rc;
    }
    json_t *page = json_object_get(res, field);
    if (page && json_array_extend(items, page) != 0)
        rc = TIDEMARK_ENOMEM;
    json_t *nc = json_object_get(res, "nextCursor");
    *next = json_is_string(nc) ? json_incref(nc) : NULL;
    json_decref(res);
    return rc;
}

int tidemark_client_list(tidemark_client_t *c, const char *method, const char *field, json_t **items)
{
    if (!c || !method || !field || !items)
        return TIDEMARK_EINVAL;
    json_t *all = json_array(), *cursor = NULL, *err = NULL;
    if (!all)
        return TIDEMARK_ENOMEM;
    int rc = 0;
    for (int page = 0; page < 10000; page++) {
        json_t *next = NULL;
        rc = list_page(c, method, field, cursor, all, &next, &err);
        json_decref(cursor);
        cursor = next;
        if (rc || !cursor)
            break;
    }
    json_decref(cursor);
    if (rc) {
        json_decref(all);
        *items = err;
        return rc;
    }
    *items = all;
    return 0;
}
