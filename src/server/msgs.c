/*
 * msgs.c - a POST's messages as both eras and the tasks extension see them:
 * the error code of an invalid one, whether one is a tools/call and the
 * hints of its tool, and freeing the parsed set (unclaiming the records no
 * call took).
 */
#include "server_int.h"
#include "record.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>

int tm_invalid_code(const tm_msg *m)
{
    return m->code ? m->code : TM_RPC_INVALID_REQUEST;
}

int tm_is_call(const tm_msg *m)
{
    return m->kind == TM_MSG_REQUEST && strcmp(m->method, "tools/call") == 0;
}

void post_msgs_free(post_msgs *pm)
{
    json_decref(pm->root);
    free(pm->m);
    for (size_t i = 0; pm->answered && i < pm->n; i++)
        json_decref(pm->answered[i]);
    free(pm->answered);
    for (size_t i = 0; pm->claimed && i < pm->n; i++) {
        if (pm->claimed[i]) /* no call took it: nothing of it runs */
            tm_record_unclaim_name(pm->srv, pm->claimed[i]);
        free(pm->claimed[i]);
    }
    free(pm->claimed);
}

unsigned tm_call_tool_hints(tidemark_server_t *srv, const tm_msg *m)
{
    const char *name = json_string_value(json_object_get(m->params, "name"));
    tm_reg_entry e;
    if (!name || tm_registry_get(srv->reg, TM_REG_TOOL, name, &e) != 0)
        return 0;
    json_decref(e.desc);
    return e.hints;
}
