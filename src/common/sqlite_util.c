/* sqlite_util.c - SQLite helpers and the SQLite transaction (txn.h). */
#include "sqlite_util.h"
#include "txn.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

int tm_sqlite_err(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW: return 0;
    case SQLITE_NOMEM: return TIDEMARK_ENOMEM;
    case SQLITE_CONSTRAINT: return TIDEMARK_EEXIST;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return TIDEMARK_EBUSY;
    case SQLITE_ERROR:
    case SQLITE_MISUSE:
    case SQLITE_RANGE: return TIDEMARK_EINVAL;
    default: return TIDEMARK_EIO;
    }
}

static int prepare_bind(sqlite3 *db, const char *sql, const char *const *args, size_t nargs,
                        sqlite3_stmt **st)
{
    int rc = sqlite3_prepare_v2(db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        TM_WARN("sqlite: %s: %s", sql, sqlite3_errmsg(db));
        return tm_sqlite_err(rc);
    }
    for (size_t i = 0; i < nargs; i++) {
        rc = args[i] ? sqlite3_bind_text(*st, (int)i + 1, args[i], -1, SQLITE_TRANSIENT)
                     : sqlite3_bind_null(*st, (int)i + 1);
        if (rc != SQLITE_OK) {
            sqlite3_finalize(*st);
            *st = NULL;
            return tm_sqlite_err(rc);
        }
    }
    return 0;
}

int tm_sqlite_exec_args(sqlite3 *db, const char *sql, const char *const *args, size_t nargs)
{
    sqlite3_stmt *st;
    int rc = prepare_bind(db, sql, args, nargs, &st);
    if (rc)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        ;
    if (rc != SQLITE_DONE)
        TM_WARN("sqlite: %s: %s", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : tm_sqlite_err(rc);
}

int tm_sqlite_query_json(sqlite3 *db, const char *sql, const char *const *args, size_t nargs,
                         json_t **rows)
{
    *rows = NULL;
    sqlite3_stmt *st;
    int rc = prepare_bind(db, sql, args, nargs, &st);
    if (rc)
        return rc;
    json_t *out = json_array();
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *row = json_object();
        int n = sqlite3_column_count(st);
        for (int i = 0; i < n; i++) {
            json_t *v;
            switch (sqlite3_column_type(st, i)) {
            case SQLITE_INTEGER: v = json_integer(sqlite3_column_int64(st, i)); break;
            case SQLITE_FLOAT: v = json_real(sqlite3_column_double(st, i)); break;
            case SQLITE_NULL: v = json_null(); break;
            default:
                v = json_stringn((const char *)sqlite3_column_text(st, i),
                                 (size_t)sqlite3_column_bytes(st, i));
                if (!v)
                    v = json_null();
            }
            json_object_set_new(row, sqlite3_column_name(st, i), v);
        }
        json_array_append_new(out, row);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        json_decref(out);
        return tm_sqlite_err(rc);
    }
    *rows = out;
    return 0;
}

int tm_table_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* ---- the SQLite transaction (txn.h) ---------------------------------------------------- */

static sqlite3 *txn_db(struct tidemark_txn *txn) { return txn->impl; }

sqlite3_stmt *tm_sqlite_kept(sqlite3 *db, const char *sql)
{
    for (sqlite3_stmt *s = sqlite3_next_stmt(db, NULL); s; s = sqlite3_next_stmt(db, s))
        if (strcmp(sqlite3_sql(s), sql) == 0)
            return s;
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, NULL) != SQLITE_OK)
        return NULL;
    return s;
}

int tm_sqlite_close(sqlite3 *db)
{
    for (sqlite3_stmt *s; db && (s = sqlite3_next_stmt(db, NULL)) != NULL;)
        sqlite3_finalize(s);
    return sqlite3_close(db);
}

/* One step of a kept statement, reset after. OUT *id: column 0 of its row
 * (id may be NULL: a statement without one). */
static int step_reset(sqlite3_stmt *st, sqlite3_int64 *id)
{
    int rc = sqlite3_step(st);
    if (id)
        *id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

/* The row, numbered after the table's last: the number read first, then
 * the row inserted (one INSERT ... SELECT from the table it writes made
 * SQLite copy the SELECT into a temporary table at every call). Both kept
 * per connection: every effect runs them. SQLITE_ERROR when tm_rows is
 * missing, or gone since they were prepared (they are then dropped). */
static int rows_insert(sqlite3 *db, const char *table, const char *doc)
{
    static const char next_sql[] = "SELECT COALESCE(MAX(id), 0) + 1 FROM tm_rows WHERE tbl = ?1";
    static const char ins_sql[] = "INSERT INTO tm_rows(tbl, id, doc) VALUES(?1, ?2, ?3)";
    sqlite3_stmt *next = tm_sqlite_kept(db, next_sql);
    sqlite3_stmt *ins = next ? tm_sqlite_kept(db, ins_sql) : NULL;
    if (!ins)
        return SQLITE_ERROR;
    sqlite3_int64 id;
    sqlite3_bind_text(next, 1, table, -1, SQLITE_STATIC);
    int rc = step_reset(next, &id);
    if (rc == SQLITE_ROW) {
        sqlite3_bind_text(ins, 1, table, -1, SQLITE_STATIC);
        sqlite3_bind_int64(ins, 2, id);
        sqlite3_bind_text(ins, 3, doc, -1, SQLITE_STATIC);
        rc = step_reset(ins, NULL);
    }
    if (rc == SQLITE_ERROR) {
        sqlite3_finalize(next);
        sqlite3_finalize(ins);
    }
    return rc;
}

/* A row into tm_rows. A database without tm_rows (the client's state)
 * gets it, in the same transaction. */
static int sqlite_txn_insert(struct tidemark_txn *txn, const char *table, const char *doc)
{
    sqlite3 *db = txn_db(txn);
    int rc = rows_insert(db, table, doc);
    if (rc == SQLITE_ERROR && sqlite3_exec(db, TM_SQLITE_ROWS_SCHEMA, NULL, NULL, NULL) == SQLITE_OK)
        rc = rows_insert(db, table, doc);
    if (rc != SQLITE_DONE)
        TM_WARN("sqlite: insert into tm_rows: %s", sqlite3_errmsg(db));
    return rc == SQLITE_DONE ? 0 : tm_sqlite_err(rc);
}

static int sqlite_txn_exec(struct tidemark_txn *txn, const char *sql, const char *const *args,
                           size_t nargs)
{
    return tm_sqlite_exec_args(txn_db(txn), sql, args, nargs);
}

static const struct tm_txn_ops sqlite_txn_ops = {
    .name = "sqlite",
    .insert = sqlite_txn_insert,
    .exec = sqlite_txn_exec,
};

void tm_txn_sqlite_init(struct tidemark_txn *txn, sqlite3 *db)
{
    *txn = (struct tidemark_txn){.ops = &sqlite_txn_ops, .impl = db};
}

int tm_sqlite_rows(sqlite3 *db, const char *table, json_t **rows)
{
    const char *args[1] = {table};
    json_t *raw = NULL;
    int rc = tm_sqlite_query_json(db, "SELECT id, doc FROM tm_rows WHERE tbl = ?1 ORDER BY id", args,
                                  1, &raw);
    if (rc)
        return rc;
    size_t i;
    json_t *r;
    json_array_foreach(raw, i, r) { /* {"id": n, "doc": "<json>"} -> {"id": n, <doc's fields>} */
        json_t *row = json_loads(json_string_value(json_object_get(r, "doc")), 0, NULL);
        if (!json_is_object(row)) {
            json_decref(row);
            row = json_object();
        }
        json_object_set(row, "id", json_object_get(r, "id"));
        json_array_set_new(raw, i, row);
    }
    *rows = raw;
    return 0;
}

/* ---- the one-writer lock ------------------------------------------------------------ */

int tm_db_lock(const char *db_path, int *fd, long *holder)
{
    char path[4096];
    *fd = -1;
    *holder = 0;
    if (snprintf(path, sizeof path, "%s.lock", db_path) >= (int)sizeof path)
        return TIDEMARK_EINVAL;
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0) {
        TM_ERROR("sqlite: cannot open lock file %s: %s", path, strerror(errno));
        return TIDEMARK_EIO;
    }
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int busy = errno == EWOULDBLOCK;
        char buf[32] = "";
        ssize_t n = pread(f, buf, sizeof buf - 1, 0);
        if (n > 0) {
            buf[n] = '\0';
            *holder = strtol(buf, NULL, 10);
        }
        if (!busy)
            TM_ERROR("sqlite: cannot lock %s: %s", path, strerror(errno));
        close(f);
        return busy ? TIDEMARK_EBUSY : TIDEMARK_EIO;
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)len, 0) != len)
        TM_WARN("sqlite: cannot write pid into %s: %s", path, strerror(errno));
    *fd = f;
    return 0;
}

void tm_db_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* releases the flock; the file stays (removing it would race a new owner) */
}

/* ---- the head file ------------------------------------------------------------------ */

#define HEAD_SLOT 512 /* one slot per sector: a torn write damages one slot only */
#define HEAD_LINE 160

static unsigned crc32_of(const char *p, size_t n)
{
    unsigned c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= (unsigned char)p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static int head_path(const char *db_path, char *out, size_t n)
{
    return snprintf(out, n, "%s.head", db_path) < (int)n ? 0 : TIDEMARK_EINVAL;
}

/* Parse one slot: "tidemark-head 1 gen=G db=D epoch=E commits=C clean=K crc=X". */
static int head_parse(const char *slot, unsigned long long *gen, tm_head_rec *out)
{
    char line[HEAD_LINE + 1];
    memcpy(line, slot, HEAD_LINE);
    line[HEAD_LINE] = '\0';
    char *crc = strstr(line, " crc=");
    if (!crc || strncmp(line, "tidemark-head 1 ", 16) != 0)
        return -1;
    unsigned want = (unsigned)strtoul(crc + 5, NULL, 16);
    if (crc32_of(line, (size_t)(crc - line)) != want)
        return -1;
    *crc = '\0';
    tm_head_rec r = {0};
    if (sscanf(line, "tidemark-head 1 gen=%llu db=%16s epoch=%16s commits=%llu clean=%d", gen,
               r.dbid, r.epoch, &r.commits, &r.clean) != 5)
        return -1;
    *out = r;
    return 0;
}

/* The newest valid slot of an open head file. OUT gen, rec. */
static int head_scan(int fd, unsigned long long *gen, tm_head_rec *rec)
{
    char buf[2 * HEAD_SLOT];
    memset(buf, 0, sizeof buf);
    ssize_t n = pread(fd, buf, sizeof buf, 0);
    if (n < 0)
        return TIDEMARK_EIO;
    int found = 0;
    for (int i = 0; i < 2; i++) {
        unsigned long long g;
        tm_head_rec r;
        if (head_parse(buf + i * HEAD_SLOT, &g, &r) == 0 && (!found || g > *gen)) {
            *gen = g;
            *rec = r;
            found = 1;
        }
    }
    return found ? 0 : TIDEMARK_ENOTFOUND;
}

int tm_head_read(const char *db_path, tm_head_rec *out)
{
    char path[4096];
    if (head_path(db_path, path, sizeof path))
        return TIDEMARK_EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? TIDEMARK_ENOTFOUND : TIDEMARK_EIO;
    unsigned long long gen = 0;
    int rc = head_scan(fd, &gen, out);
    close(fd);
    return rc;
}

int tm_head_open(const char *db_path, tm_head_file *hf)
{
    char path[4096];
    hf->fd = -1;
    hf->gen = 0;
    if (head_path(db_path, path, sizeof path))
        return TIDEMARK_EINVAL;
    hf->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (hf->fd < 0) {
        TM_ERROR("sqlite: cannot open %s: %s", path, strerror(errno));
        return TIDEMARK_EIO;
    }
    tm_head_rec r;
    if (head_scan(hf->fd, &hf->gen, &r) != 0)
        hf->gen = 0;
    return 0;
}

int tm_head_write(tm_head_file *hf, const tm_head_rec *rec)
{
    if (hf->fd < 0)
        return TIDEMARK_EIO;
    char slot[HEAD_SLOT];
    memset(slot, ' ', sizeof slot);
    unsigned long long gen = hf->gen + 1;
    int n = snprintf(slot, HEAD_LINE, "tidemark-head 1 gen=%llu db=%s epoch=%s commits=%llu clean=%d",
                     gen, rec->dbid, rec->epoch, rec->commits, rec->clean ? 1 : 0);
    if (n < 0 || n + 15 > HEAD_LINE)
        return TIDEMARK_EINVAL;
    n += snprintf(slot + n, (size_t)(HEAD_LINE - n), " crc=%08x", crc32_of(slot, (size_t)n));
    slot[n] = '\n';
    off_t at = (off_t)(gen % 2) * HEAD_SLOT;
    if (pwrite(hf->fd, slot, sizeof slot, at) != (ssize_t)sizeof slot || fdatasync(hf->fd) != 0) {
        TM_WARN("sqlite: cannot write the head file: %s", strerror(errno));
        return TIDEMARK_EIO;
    }
    hf->gen = gen;
    return 0;
}

void tm_head_close(tm_head_file *hf)
{
    if (hf->fd >= 0)
        close(hf->fd);
    hf->fd = -1;
}

/* ---- test builds: a full disk on demand ---------------------------------------------- */
#ifdef TIDEMARK_CRASH_POINTS
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

typedef struct fv_file {
    sqlite3_file base;
    int is_wal;
    sqlite3_file *real; /* the default VFS's file, allocated right after this struct */
} fv_file;

static sqlite3_vfs fv_vfs;
static sqlite3_vfs *fv_base;
static atomic_int fv_full;
static atomic_ullong fv_wal_bytes;
static const char *fv_ctl;       /* TIDEMARK_SQLITE_FULL_FILE */
static atomic_llong fv_ctl_next; /* when to look at it again (ms) */

static int fv_armed(void)
{
    if (fv_ctl) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long long now = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        if (now >= atomic_load(&fv_ctl_next)) {
            atomic_store(&fv_full, access(fv_ctl, F_OK) == 0);
            atomic_store(&fv_ctl_next, now + 20);
        }
    }
    return atomic_load(&fv_full);
}

#define REAL(f) (((fv_file *)(f))->real)
static int fv_close(sqlite3_file *f)
{
    int rc = REAL(f)->pMethods ? REAL(f)->pMethods->xClose(REAL(f)) : SQLITE_OK;
    return rc;
}
static int fv_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{
    return REAL(f)->pMethods->xRead(REAL(f), p, n, off);
}
static int fv_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
    if (fv_armed())
        return SQLITE_FULL;
    int rc = REAL(f)->pMethods->xWrite(REAL(f), p, n, off);
    if (rc == SQLITE_OK && ((fv_file *)f)->is_wal)
        atomic_fetch_add(&fv_wal_bytes, (unsigned long long)n);
    return rc;
}
static int fv_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int fv_sync(sqlite3_file *f, int flags) { return REAL(f)->pMethods->xSync(REAL(f), flags); }
static int fv_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return REAL(f)->pMethods->xFileSize(REAL(f), size);
}
static int fv_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int fv_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int fv_reserved(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}
static int fv_fctl(sqlite3_file *f, int op, void *arg)
{
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int fv_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int fv_dev(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int fv_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **pp)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, pp);
}
static int fv_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}
static void fv_shm_barrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int fv_shm_unmap(sqlite3_file *f, int del)
{
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int fv_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp)
{
    *pp = NULL; /* no memory-mapped reads: every read goes through xRead */
    (void)f;
    (void)off;
    (void)n;
    return SQLITE_OK;
}
static int fv_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    (void)f;
    (void)off;
    (void)p;
    return SQLITE_OK;
}

static const sqlite3_io_methods fv_methods = {
    3, fv_close, fv_read, fv_write, fv_truncate, fv_sync, fv_size, fv_lock, fv_unlock,
    fv_reserved, fv_fctl, fv_sector, fv_dev, fv_shm_map, fv_shm_lock, fv_shm_barrier,
    fv_shm_unmap, fv_fetch, fv_unfetch,
};

static int fv_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags)
{
    (void)vfs;
    fv_file *ff = (fv_file *)f;
    ff->real = (sqlite3_file *)(ff + 1);
    ff->is_wal = (flags & SQLITE_OPEN_WAL) != 0;
    int rc = fv_base->xOpen(fv_base, name, ff->real, flags, out_flags);
    ff->base.pMethods = rc == SQLITE_OK ? &fv_methods : NULL;
    return rc;
}

static void fv_setup(void)
{
    fv_base = sqlite3_vfs_find(NULL);
    fv_vfs = *fv_base;
    fv_vfs.zName = "tidemark-fault";
    fv_vfs.szOsFile = (int)sizeof(fv_file) + fv_base->szOsFile;
    fv_vfs.xOpen = fv_open;
    fv_vfs.pNext = NULL;
    fv_ctl = getenv("TIDEMARK_SQLITE_FULL_FILE");
    if (fv_ctl && !*fv_ctl)
        fv_ctl = NULL;
    sqlite3_vfs_register(&fv_vfs, 1);
}

void tm_faultvfs_install(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fv_setup);
}

void tm_faultvfs_arm(int full) { atomic_store(&fv_full, full); }

unsigned long long tm_faultvfs_wal_bytes(void) { return atomic_load(&fv_wal_bytes); }
#endif
