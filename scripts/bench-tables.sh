#!/usr/bin/env bash
# Many tables with the default settings, on the local server that
# scripts/run.sh starts: TABLES tables (default 100000), each with a
# primary key, a text column, an integer column under a secondary index
# and 3 rows, created 500 per transaction in database bench_tables for
# each access method given (default: orioledb, then heap). Prints progress
# (tables, seconds, tables per second), then per access method: the time
# to create them all, the time of a CHECKPOINT after that, the time to read
# every table once (count(*), 500 per transaction), the same after a
# restart of the server, and the database's size on disk
# (pg_database_size plus orioledb_data/<oid>/).
# Usage: scripts/bench-tables.sh [tables] [am,am...]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
TABLES="${1:-100000}" AMS="${2:-orioledb,heap}"
choose_run_dir 2>/dev/null
PSQL=(as_pg "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$RUN_DIR" -p "$ORIOLEDB_PORT" -U postgres)
DB=bench_tables
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# Runs one DO block per 500 tables, each statement $1 with %s the table number.
per_table() {
    local what="$1" lo hi
    for ((lo = 0; lo < TABLES; lo += 500)); do
        hi=$((lo + 499 < TABLES - 1 ? lo + 499 : TABLES - 1))
        "${PSQL[@]}" -d "$DB" -c "DO \$\$ DECLARE n bigint; BEGIN FOR i IN $lo..$hi LOOP $what END LOOP; END \$\$"
        if (((hi + 1) % 5000 == 0 || hi + 1 == TABLES)); then
            printf '  %s: %d tables, %s s\n' "$2" $((hi + 1)) "$(secs "$3" "$(now)")"
        fi
    done
}
restart() {
    as_pg "$PG_BINDIR/pg_ctl" -D "$RUN_DIR/pgdata" -w -m fast stop >/dev/null
    as_pg env -u RUST_BACKTRACE "$PG_BINDIR/pg_ctl" -D "$RUN_DIR/pgdata" -l "$RUN_DIR/postgres.log" -w -t 300 start >/dev/null
}
IFS=, read -ra AM_LIST <<<"$AMS"
for am in "${AM_LIST[@]}"; do
    echo "== $am: $TABLES tables"
    "${PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
    "${PSQL[@]}" -d "$DB" -c "CREATE EXTENSION orioledb_rs"
    t0=$(now)
    per_table "EXECUTE format('CREATE TABLE t_%s (id int PRIMARY KEY, v text, w int) USING $am', i);
               EXECUTE format('CREATE INDEX ON t_%s (w)', i);
               EXECUTE format('INSERT INTO t_%s SELECT g, md5(g::text), g FROM generate_series(1, 3) g', i);" create "$t0"
    t1=$(now)
    "${PSQL[@]}" -d "$DB" -c CHECKPOINT
    t2=$(now)
    per_table "EXECUTE format('SELECT count(*) FROM t_%s', i) INTO n;" read "$t2"
    t3=$(now)
    restart
    t4=$(now)
    per_table "EXECUTE format('SELECT count(*) FROM t_%s', i) INTO n;" "read after restart" "$t4"
    t5=$(now)
    oid=$("${PSQL[@]}" -d "$DB" -c "SELECT oid FROM pg_database WHERE datname = '$DB'")
    bytes=$("${PSQL[@]}" -d "$DB" -c "SELECT pg_database_size('$DB')")
    engine=$(du -sb "$RUN_DIR/pgdata/orioledb_data/$oid" 2>/dev/null | cut -f1 || echo 0)
    echo "$am: create $(secs "$t0" "$t1") s, checkpoint $(secs "$t1" "$t2") s, read all $(secs "$t2" "$t3") s, read all after restart $(secs "$t4" "$t5") s, size $((bytes + ${engine:-0})) bytes"
done
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB"
