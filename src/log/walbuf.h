/* walbuf.h - a SQLite VFS that writes a commit's WAL frames in few writes
 * (walbuf.c says when that is safe). */
#ifndef TM_WALBUF_H
#define TM_WALBUF_H

/* The name of the VFS (for sqlite3_open_v2), registered at the first call on
 * top of the default VFS of that moment. Only for a connection that sets
 * PRAGMA synchronous=FULL and keeps it. */
const char *tm_walbuf_vfs(void);

#endif
