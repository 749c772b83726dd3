/* error.c - tidemark_strerror(). */
#include "tidemark/tidemark.h"

const char *tidemark_strerror(int err)
{
    switch (err) {
    case TIDEMARK_OK: return "success";
    case TIDEMARK_EINVAL: return "invalid argument or malformed input";
    case TIDEMARK_ENOMEM: return "out of memory";
    case TIDEMARK_EIO: return "I/O or storage failure";
    case TIDEMARK_ENOTFOUND: return "not found";
    case TIDEMARK_EEXIST: return "already exists";
    case TIDEMARK_EBUSY: return "resource busy";
    case TIDEMARK_ETIMEDOUT: return "timed out";
    case TIDEMARK_ECANCELED: return "cancelled";
    case TIDEMARK_ENOTSUP: return "not supported";
    case TIDEMARK_ERANGE: return "out of range";
    case TIDEMARK_EPROTO: return "protocol violation";
    case TIDEMARK_ECLOSED: return "closed";
    case TIDEMARK_EPEER: return "peer returned an error";
    case TIDEMARK_EINPUT: return "input from the client is needed first";
    case TIDEMARK_EAGAIN: return "would block: run on a worker";
    default: return "unknown error";
    }
}
