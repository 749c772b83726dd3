/*
 * tidemark-sqlite-floor - the raw one-row commit loop for bench/http.sh: a
 * fresh database in WAL mode with synchronous=FULL (every commit fsync'd, as
 * tidemark's `power` durability), one INSERT per transaction back to back
 * for S seconds; the ceiling for a serial non-idempotent call on SQLite.
 *
 *   tidemark-sqlite-floor PATH [SECONDS]
 *
 * Prints one line: commits=N seconds=S commits_per_s=R p50_us=.. p99_us=..
 * PATH (and its -wal/-shm) is removed first and at the end.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LAT (1u << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void remove_db(const char *path)
{
    char p[4096];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int setup(sqlite3 *db)
{
    return sqlite3_exec(db,
                        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                        "CREATE TABLE ledger(id INTEGER PRIMARY KEY, entry TEXT NOT NULL,"
                        " created_ms INTEGER NOT NULL)",
                        NULL, NULL, NULL);
}

/* One transaction holding one row; 0 when it committed. */
static int commit_one(sqlite3 *db, sqlite3_stmt *ins, long i)
{
    char entry[64];
    snprintf(entry, sizeof entry, "floor-%ld", i);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(ins, 1, entry, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins, 2, (sqlite3_int64)(now_s() * 1e3));
    int rc = sqlite3_step(ins);
    sqlite3_reset(ins);
    if (rc != SQLITE_DONE) {
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    return sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

static int run(sqlite3 *db, double secs, double *lat, size_t *nlat, long *commits)
{
    sqlite3_stmt *ins = NULL;
    if (setup(db) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO ledger(entry, created_ms) VALUES(?, ?)", -1, &ins, NULL))
        return -1;
    int rc = 0;
    double end = now_s() + secs;
    for (long i = 0; rc == 0 && now_s() < end; i++) {
        double t0 = now_s();
        rc = commit_one(db, ins, i);
        if (rc == 0 && *nlat < MAX_LAT)
            lat[(*nlat)++] = (now_s() - t0) * 1e6;
        *commits += rc == 0;
    }
    sqlite3_finalize(ins);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tidemark-sqlite-floor PATH [SECONDS]\n");
        return 2;
    }
    double secs = argc > 2 ? atof(argv[2]) : 3;
    double *lat = malloc(MAX_LAT * sizeof *lat);
    sqlite3 *db = NULL;
    size_t n = 0;
    long commits = 0;
    remove_db(argv[1]);
    int rc = !lat || secs <= 0 || sqlite3_open(argv[1], &db) != SQLITE_OK;
    if (!rc)
        rc = run(db, secs, lat, &n, &commits) != 0;
    if (rc)
        fprintf(stderr, "tidemark-sqlite-floor: %s\n", db ? sqlite3_errmsg(db) : "cannot start");
    sqlite3_close(db);
    remove_db(argv[1]);
    if (!rc) {
        qsort(lat, n, sizeof *lat, cmp_d);
        printf("commits=%ld seconds=%g commits_per_s=%.0f p50_us=%.0f p99_us=%.0f\n", commits, secs,
               (double)commits / secs, n ? lat[n / 2] : 0, n ? lat[n * 99 / 100] : 0);
    }
    free(lat);
    return rc;
}
