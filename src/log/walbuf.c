/* walbuf.c - a SQLite VFS that gathers a commit's WAL writes into few writes.
 *
 * SQLite writes each WAL frame with two pwrite calls (its 24-byte header,
 * then the page), so a commit of 38 frames made 76 system calls, each one
 * dirtying parts of two page-cache pages. Here writes that continue one
 * another are kept in a buffer and written in one pwrite when SQLite syncs
 * the WAL, reads what is still buffered, asks its size, truncates it, sends
 * it a file control, closes it, writes elsewhere, or the buffer is full.
 *
 * The one rule that makes it safe: a frame must be in the file before
 * another connection can read it. Another connection reads only frames that
 * the WAL index publishes, and with synchronous=FULL SQLite syncs the WAL
 * (here: writes the buffer) before it publishes a commit. So: only for a
 * connection with synchronous=FULL, and not when the file pads commits to a
 * sector boundary (no SQLITE_IOCAP_POWERSAFE_OVERWRITE): SQLite then writes
 * the part of the padding past the boundary after the sync. */
#include "walbuf.h"

#include <sqlite3.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Bytes gathered at most before a write. The unix VFS writes at most
 * 128 KiB - 1 bytes in one pwrite (seekAndWriteFd masks the length with
 * 0x1ffff: a write of a multiple of 128 KiB writes nothing and fails as a
 * full disk), so stay below that. */
#define WB_CAP (64 << 10)

typedef struct wb_file {
    sqlite3_file base;
    sqlite3_file *real; /* the underlying VFS's file, allocated right after this struct */
    int is_wal;         /* a WAL whose writes are gathered */
    unsigned char *buf; /* WB_CAP bytes, allocated at the first gathered write */
    sqlite3_int64 at;   /* file offset of buf[0] */
    int len;            /* bytes gathered */
} wb_file;

static sqlite3_vfs wb_vfs;
static sqlite3_vfs *wb_base;

#define WB(f) ((wb_file *)(f))
#define REAL(f) (WB(f)->real)

/* Writes what is gathered. On failure it stays gathered, for the next
 * flush: a read that needed it fails, and SQLite may roll back only that
 * statement and then commit, whose sync must still write it (or fail). */
static int wb_flush(sqlite3_file *f)
{
    wb_file *w = WB(f);
    if (w->len == 0)
        return SQLITE_OK;
    int rc = REAL(f)->pMethods->xWrite(REAL(f), w->buf, w->len, w->at);
    if (rc == SQLITE_OK)
        w->len = 0;
    return rc;
}

static int wb_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
    wb_file *w = WB(f);
    if (!w->is_wal)
        return REAL(f)->pMethods->xWrite(REAL(f), p, n, off);
    if (w->len > 0 && off == w->at + w->len && w->len + n <= WB_CAP) {
        memcpy(w->buf + w->len, p, (size_t)n);
        w->len += n;
        return SQLITE_OK;
    }
    int rc = wb_flush(f);
    if (rc != SQLITE_OK)
        return rc;
    if (n >= WB_CAP / 2)
        return REAL(f)->pMethods->xWrite(REAL(f), p, n, off);
    if (!w->buf && !(w->buf = malloc(WB_CAP)))
        return REAL(f)->pMethods->xWrite(REAL(f), p, n, off);
    memcpy(w->buf, p, (size_t)n);
    w->at = off;
    w->len = n;
    return SQLITE_OK;
}

static int wb_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{
    wb_file *w = WB(f);
    if (w->len > 0 && off < w->at + w->len && off + n > w->at) {
        int rc = wb_flush(f);
        if (rc != SQLITE_OK)
            return rc;
    }
    return REAL(f)->pMethods->xRead(REAL(f), p, n, off);
}

static int wb_close(sqlite3_file *f)
{
    int rc = wb_flush(f);
    free(WB(f)->buf);
    WB(f)->buf = NULL;
    int rc2 = REAL(f)->pMethods->xClose(REAL(f)); /* set: wb_open gave f methods */
    return rc != SQLITE_OK ? rc : rc2;
}

static int wb_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    int rc = wb_flush(f);
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int wb_sync(sqlite3_file *f, int flags)
{
    int rc = wb_flush(f);
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int wb_size(sqlite3_file *f, sqlite3_int64 *size)
{
    int rc = wb_flush(f);
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int wb_fctl(sqlite3_file *f, int op, void *arg)
{
    int rc = wb_flush(f);
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

/* The rest go straight to the underlying file. */
static int wb_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int wb_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int wb_reserved(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}
static int wb_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int wb_dev(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int wb_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **pp)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, pp);
}
static int wb_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}
static void wb_shm_barrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int wb_shm_unmap(sqlite3_file *f, int del)
{
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int wb_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp)
{
    return REAL(f)->pMethods->xFetch(REAL(f), off, n, pp);
}
static int wb_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

static const sqlite3_io_methods wb_methods = {
    3, wb_close, wb_read, wb_write, wb_truncate, wb_sync, wb_size, wb_lock, wb_unlock,
    wb_reserved, wb_fctl, wb_sector, wb_dev, wb_shm_map, wb_shm_lock, wb_shm_barrier,
    wb_shm_unmap, wb_fetch, wb_unfetch,
};

/* 1 if SQLite may pad this WAL's commits to a sector boundary. SQLite asks
 * the database file, not the WAL: both say powersafe overwrite unless the
 * build says otherwise (then neither does) or the database was opened with
 * the URI parameter psow=0, which the WAL's name carries. */
static int pads(sqlite3_file *wal, const char *name)
{
    int dc = wal->pMethods->xDeviceCharacteristics(wal);
    return !(dc & SQLITE_IOCAP_POWERSAFE_OVERWRITE) || !sqlite3_uri_boolean(name, "psow", 1);
}

static int wb_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags)
{
    (void)vfs;
    wb_file *w = WB(f);
    memset(w, 0, sizeof *w);
    w->real = (sqlite3_file *)(w + 1);
    int rc = wb_base->xOpen(wb_base, name, w->real, flags, out_flags);
    if (rc != SQLITE_OK || !w->real->pMethods)
        return rc;
    w->base.pMethods = &wb_methods;
    w->is_wal = (flags & SQLITE_OPEN_WAL) && !pads(w->real, name);
    return rc;
}

static void wb_setup(void)
{
    wb_base = sqlite3_vfs_find(NULL);
    wb_vfs = *wb_base;
    wb_vfs.zName = "tidemark-walbuf";
    wb_vfs.szOsFile = (int)sizeof(wb_file) + wb_base->szOsFile;
    wb_vfs.xOpen = wb_open;
    wb_vfs.pNext = NULL;
    sqlite3_vfs_register(&wb_vfs, 0);
}

const char *tm_walbuf_vfs(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, wb_setup);
    return wb_vfs.zName;
}
