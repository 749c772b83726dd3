/* abi.c - see abi.h. */
#include "abi.h"
#include "tidemark/client.h"
#include "tidemark/server.h"
#include "tidemark/tidemark.h"
#include <stddef.h>
#include <string.h>

/* Every growable public struct ends where its last field ends: a field a
 * later header adds never lands in tail padding, bytes an older caller's
 * initializer may have left unset (tidemark.h, "Structs a caller fills").
 * A new last field is named here; holes inside are found by pahole in make
 * test (tests/abi/pahole.sh, the same list). */
#define TM_ENDS_AT_LAST_FIELD(type, last)                                                   \
    _Static_assert(sizeof(type) == offsetof(type, last) + sizeof(((type *)0)->last),        \
                   #type ": not ending at " #last ": name its last field here, and give a "  \
                   "lone 4-byte field a reserved partner")
TM_ENDS_AT_LAST_FIELD(tidemark_server_config_t, max_sessions_per_address);
TM_ENDS_AT_LAST_FIELD(tidemark_client_config_t, ca_file);
TM_ENDS_AT_LAST_FIELD(tidemark_tool_t, task_ttl_ms);
TM_ENDS_AT_LAST_FIELD(tidemark_resource_t, ud);
TM_ENDS_AT_LAST_FIELD(tidemark_prompt_t, ud);
TM_ENDS_AT_LAST_FIELD(tidemark_event_t, message);

int tm_abi_copy(void *dst, size_t our_size, const void *src, size_t caller_size)
{
    if (!src)
        return caller_size ? TIDEMARK_EINVAL : 0;
    const unsigned char *s = src;
    for (size_t i = our_size; i < caller_size; i++)
        if (s[i] != 0)
            return TIDEMARK_ENOTSUP; /* a setting this library does not know */
    memcpy(dst, src, caller_size < our_size ? caller_size : our_size);
    return 0;
}
