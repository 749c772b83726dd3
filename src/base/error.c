/* error.c - tidemark_strerror() and tidemark_err_name(), from the one
 * table of codes (TIDEMARK_ERRNO_MAP, tidemark.h). */
#include "tidemark/tidemark.h"

const char *tidemark_strerror(int err)
{
    switch (err) {
    case TIDEMARK_OK: return "success";
#define TM_MESSAGE(name, value, message) case TIDEMARK_##name: return message;
    TIDEMARK_ERRNO_MAP(TM_MESSAGE)
#undef TM_MESSAGE
    default: return "unknown error";
    }
}

const char *tidemark_err_name(int err)
{
    switch (err) {
    case TIDEMARK_OK: return "TIDEMARK_OK";
#define TM_NAME(name, value, message) case TIDEMARK_##name: return "TIDEMARK_" #name;
    TIDEMARK_ERRNO_MAP(TM_NAME)
#undef TM_NAME
    default: return NULL;
    }
}
