/* demo_tools.h - the demo tools of tidemark-server (echo, stream). */
#ifndef TM_DEMO_TOOLS_H
#define TM_DEMO_TOOLS_H
#include "tidemark/server.h"

/* Register echo and stream on srv. Returns 0 or a negative code. */
int demo_tools_register(tidemark_server_t *srv);

#endif
