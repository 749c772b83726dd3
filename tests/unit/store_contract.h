/* store_contract.h - the memory backend's contract cases (test_store_memory.c)
 * compiled for another backend. The includer first defines
 *   static int contract_open(const char *uri, const tm_store_options *opt, tm_store **out);
 * which opens a fresh store of the backend under test. tm_store_append(),
 * tm_store_close_stream() and tm_store_session_touch() in the cases then
 * wait until the write is durable: they assume a store that commits before
 * they return. The commit listener is taken for a wake-up ("durable up to
 * seq", TM_CONTRACT_WAKEUPS), as store.h defines it. The cases' own main()
 * is renamed memory_contract_main; the includer lists the cases it runs. */
#ifndef TM_STORE_CONTRACT_H
#define TM_STORE_CONTRACT_H

static int append_durable(tm_store *st, const char *session, const char *stream, const void *data,
                          size_t len, unsigned flags, tm_append_cb cb, void *ud)
{
    int rc = tm_store_append(st, session, stream, data, len, flags, cb, ud);
    if (rc == 0 && tm_store_sync(st) != 0)
        return TIDEMARK_EIO;
    return rc;
}

static int close_durable(tm_store *st, const char *session, const char *stream)
{
    int rc = tm_store_close_stream(st, session, stream);
    if (rc == 0 && tm_store_sync(st) != 0)
        return TIDEMARK_EIO;
    return rc;
}

static int touch_durable(tm_store *st, const char *id, int64_t now_ms)
{
    int rc = tm_store_session_touch(st, id, now_ms);
    if (rc == 0 && tm_store_sync(st) != 0)
        return TIDEMARK_EIO;
    return rc;
}

#define TM_CONTRACT_WAKEUPS 1
#define tm_store_open(uri, opt, out) contract_open(uri, opt, out)
#define tm_store_append(st, se, sm, d, l, f, cb, ud) append_durable(st, se, sm, d, l, f, cb, ud)
#define tm_store_close_stream(st, se, sm) close_durable(st, se, sm)
#define tm_store_session_touch(st, id, ms) touch_durable(st, id, ms)
#define main memory_contract_main
#include "test_store_memory.c"
#undef main
#undef tm_store_session_touch
#undef tm_store_close_stream
#undef tm_store_append
#undef tm_store_open

#endif
