/*
 * tidemark-sqlite-floor - the raw one-row commit loop for bench/http.sh: a
 * fresh database in WAL mode with synchronous=FULL (every commit fsync'd, as
 * tidemark's `power` durability), one INSERT per transaction back to back
 * for S seconds; the ceiling for a serial non-idempotent call on SQLite.
 * With TABLES > 1, each transaction also puts one row into each of TABLES-1
 * other tables of 20,000 rows, at a random place: about TABLES pages a
 * commit, as many as a call that writes rows of several tables and indexes
 * (a tidemark ledger_append commit writes about 10).
 *
 *   tidemark-sqlite-floor PATH [SECONDS] [TABLES]
 *
 * Prints one line: commits=N seconds=S tables=T commits_per_s=R p50_us=.. p99_us=..
 * PATH (and its -wal/-shm) is removed first and at the end.
 */
#include "ledger_db.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_LAT (1u << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define SPREAD_ROWS 20000
#define MAX_TABLES 64

/* The other tables (s1 ..), each SPREAD_ROWS rows of 100 bytes, keys 1000 apart. */
static int spread_tables(sqlite3 *db, int tables)
{
    char sql[320];
    int rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    for (int t = 1; rc == SQLITE_OK && t < tables; t++) {
        snprintf(sql, sizeof sql,
                 "CREATE TABLE s%d(k INTEGER PRIMARY KEY, v BLOB);"
                 "WITH RECURSIVE n(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM n WHERE j + 1 < %d)"
                 " INSERT INTO s%d SELECT j * 1000, zeroblob(100) FROM n",
                 t, SPREAD_ROWS, t);
        rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    }
    return rc == SQLITE_OK ? sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) : rc;
}

/* One row into each other table, each on a random leaf. */
static int spread_rows(sqlite3_stmt *const *put, int tables, long i)
{
    for (int t = 1; t < tables; t++) {
        sqlite3_bind_int64(put[t], 1, (sqlite3_int64)(rand() % SPREAD_ROWS) * 1000 + 1 + i % 999);
        int rc = sqlite3_step(put[t]);
        sqlite3_reset(put[t]);
        if (rc != SQLITE_DONE)
            return rc;
    }
    return SQLITE_DONE;
}

/* One transaction holding one row (and one in each other table); 0 when it committed. */
static int commit_one(sqlite3 *db, sqlite3_stmt *ins, sqlite3_stmt *const *put, int tables, long i)
{
    char entry[64];
    snprintf(entry, sizeof entry, "floor-%ld", i);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return -1;
    int rc = bench_ledger_put(ins, entry, (sqlite3_int64)(now_s() * 1e3));
    if (rc == SQLITE_DONE)
        rc = spread_rows(put, tables, i);
    if (rc != SQLITE_DONE) {
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    return sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

static int run(sqlite3 *db, sqlite3_stmt *ins, double secs, int tables, double *lat, size_t *nlat,
               long *commits)
{
    sqlite3_stmt *put[MAX_TABLES] = {NULL};
    int rc = spread_tables(db, tables) != SQLITE_OK;
    for (int t = 1; rc == 0 && t < tables; t++) {
        char sql[80];
        snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO s%d VALUES(?, zeroblob(100))", t);
        rc = sqlite3_prepare_v2(db, sql, -1, &put[t], NULL) != SQLITE_OK;
    }
    srand(1);
    double end = now_s() + secs;
    for (long i = 0; rc == 0 && now_s() < end; i++) {
        double t0 = now_s();
        rc = commit_one(db, ins, put, tables, i);
        if (rc == 0 && *nlat < MAX_LAT)
            lat[(*nlat)++] = (now_s() - t0) * 1e6;
        *commits += rc == 0;
    }
    for (int t = 1; t < tables; t++)
        sqlite3_finalize(put[t]);
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tidemark-sqlite-floor PATH [SECONDS] [TABLES]\n");
        return 2;
    }
    double secs = argc > 2 ? atof(argv[2]) : 3;
    int tables = argc > 3 ? atoi(argv[3]) : 1;
    if (tables < 1 || tables > MAX_TABLES) {
        fprintf(stderr, "tidemark-sqlite-floor: TABLES is 1 to %d\n", MAX_TABLES);
        return 2;
    }
    double *lat = malloc(MAX_LAT * sizeof *lat);
    sqlite3 *db = NULL;
    sqlite3_stmt *ins = NULL;
    size_t n = 0;
    long commits = 0;
    int rc = !lat || secs <= 0 || bench_ledger_open(argv[1], &db, &ins) != SQLITE_OK;
    if (!rc)
        rc = run(db, ins, secs, tables, lat, &n, &commits) != 0;
    if (rc)
        fprintf(stderr, "tidemark-sqlite-floor: %s\n", db ? sqlite3_errmsg(db) : "cannot start");
    sqlite3_finalize(ins);
    sqlite3_close(db);
    bench_ledger_remove(argv[1]);
    if (!rc) {
        qsort(lat, n, sizeof *lat, cmp_d);
        printf("commits=%ld seconds=%g tables=%d commits_per_s=%.0f p50_us=%.0f p99_us=%.0f\n", commits, secs,
               tables, (double)commits / secs, n ? lat[n / 2] : 0, n ? lat[n * 99 / 100] : 0);
    }
    free(lat);
    return rc;
}
