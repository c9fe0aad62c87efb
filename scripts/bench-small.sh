#!/usr/bin/env bash
# Small tables under single-row updates, on the local server that
# scripts/run.sh starts, for each access method given (default: orioledb,
# then heap), alternating, in database bench_small:
#   1. a 100-row table without a key (id, v, pad), updated by a sequential
#      scan per statement (`UPDATE ... WHERE id = :id`, 2 clients,
#      `synchronous_commit = off`): tps of each run and their median;
#   2. the same table while a REPEATABLE READ transaction holds its
#      snapshot for SECS seconds of updates, then released: tps while held,
#      the table's pages after, and the time of two count(*) right after
#      (the first one pays for what the held snapshot left).
# Usage: scripts/bench-small.sh [seconds] [runs] [am,am...]   (defaults 10, 3)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
SECS="${1:-10}" RUNS="${2:-3}" AMS="${3:-orioledb,heap}"
choose_run_dir 2>/dev/null
PSQL=(as_pg env PGOPTIONS="-c client_min_messages=warning" "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$RUN_DIR" -p "$ORIOLEDB_PORT" -U postgres)
PGBENCH=(as_pg env PGOPTIONS="-c synchronous_commit=off" "$PG_BINDIR/pgbench" -n -h "$RUN_DIR" -p "$ORIOLEDB_PORT" -U postgres)
DB=bench_small
SCRIPT="$(as_pg mktemp)"
trap 'rm -f "$SCRIPT"' EXIT
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
"${PSQL[@]}" -d "$DB" -c "CREATE EXTENSION IF NOT EXISTS orioledb_rs"
make_table() { # am name
    "${PSQL[@]}" -d "$DB" -c "DROP TABLE IF EXISTS $2" \
        -c "CREATE TABLE $2 (id int, v int, pad text) USING $1 WITH (autovacuum_enabled = off)" \
        -c "INSERT INTO $2 SELECT g, 0, repeat('x', 50) FROM generate_series(1, 100) g"
}
pages() { # am table
    if [ "$1" = orioledb ]; then
        "${PSQL[@]}" -d "$DB" -c "SELECT pages FROM orioledb_tree_stats() WHERE relnode = (SELECT relfilenode FROM pg_class WHERE relname = '$2')"
    else
        "${PSQL[@]}" -d "$DB" -c "SELECT pg_relation_size('$2') / 8192"
    fi
}
tps() { # table seconds
    printf '\\set id random(1, 100)\nUPDATE %s SET v = v + 1 WHERE id = :id;\n' "$1" | as_pg tee "$SCRIPT" >/dev/null
    "${PGBENCH[@]}" -f "$SCRIPT" -c 2 -j 2 -T "$2" "$DB" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
IFS=, read -ra AM_LIST <<<"$AMS"
echo "== single-row updates of a 100-row table without a key (2 clients, ${SECS} s runs)"
declare -A ALL
for am in "${AM_LIST[@]}"; do make_table "$am" "small_$am"; done
for run in $(seq 1 "$RUNS"); do
    for am in "${AM_LIST[@]}"; do
        t=$(tps "small_$am" "$SECS")
        echo "run $run $am tps $t"
        ALL[$am]="${ALL[$am]:-} $t"
    done
done
for am in "${AM_LIST[@]}"; do
    echo "median $am $(echo "${ALL[$am]}" | median) tps, $(pages "$am" "small_$am") pages"
done
echo "== the same while a snapshot is held for ${SECS} s, then released"
for am in "${AM_LIST[@]}"; do
    make_table "$am" "held_$am"
    "${PSQL[@]}" -d "$DB" -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM held_$am" \
        -c "SELECT pg_sleep($SECS + 1)" -c "COMMIT" >/dev/null &
    sleep 0.5
    t=$(tps "held_$am" "$SECS")
    wait
    p=$(pages "$am" "held_$am")
    times=$("${PSQL[@]}" -d "$DB" -c '\timing on' -c "SELECT count(*) FROM held_$am" -c "SELECT count(*) FROM held_$am" |
        sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | paste -sd' ')
    echo "$am: $t tps while held, $p pages after, count(*) right after: $times ms"
done
