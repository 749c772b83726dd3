#!/usr/bin/env bash
# Remove a test's SQLite database (and its -wal/-shm) so every run starts
# fresh, then run the rest of the command line.
#   with_fresh_db.sh DB_PATH COMMAND [args...]
db="$1"; shift
rm -f "$db" "$db-wal" "$db-shm"
exec "$@"
