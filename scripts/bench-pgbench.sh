#!/usr/bin/env bash
# pgbench on orioledb vs heap in the same run, against the local server that
# scripts/run.sh starts. Prints each run's tps, the medians and their ratio,
# and the table sizes. Usage: scripts/bench-pgbench.sh [scale] [seconds] [runs]
# (defaults 10, 20, 3; clients 8, threads 2).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
SCALE="${1:-10}" SECS="${2:-20}" RUNS="${3:-3}"
choose_run_dir 2>/dev/null
PSQL=(as_pg "$PG_BINDIR/psql" -X -q -h "$RUN_DIR" -p "$ORIOLEDB_PORT" -U postgres)
PGBENCH=(as_pg "$PG_BINDIR/pgbench" -h "$RUN_DIR" -p "$ORIOLEDB_PORT" -U postgres)
for am in heap orioledb; do
    db="bench_$am"
    "${PSQL[@]}" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
    "${PSQL[@]}" -d "$db" -c "CREATE EXTENSION IF NOT EXISTS orioledb_rs" \
        -c "ALTER DATABASE $db SET default_table_access_method = $am"
    "${PGBENCH[@]}" -i -q -s "$SCALE" "$db" >/dev/null 2>&1
    "${PSQL[@]}" -d "$db" -c "CHECKPOINT"
done
declare -A TPS
for run in $(seq 1 "$RUNS"); do
    for am in heap orioledb; do
        t=$("${PGBENCH[@]}" -n -c 8 -j 2 -T "$SECS" "bench_$am" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        echo "run $run $am tps $t"
        TPS[$am]="${TPS[$am]:-} $t"
    done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mh=$(echo "${TPS[heap]}" | median); mo=$(echo "${TPS[orioledb]}" | median)
echo "median tps: heap $mh, orioledb $mo, ratio orioledb/heap $(awk -v a="$mo" -v b="$mh" 'BEGIN {printf "%.2f", a/b}')"
"${PSQL[@]}" -d bench_heap -c "CHECKPOINT" -At \
    -c "SELECT 'heap pgbench_accounts bytes ' || pg_total_relation_size('pgbench_accounts')"
"${PSQL[@]}" -d bench_orioledb -c "CHECKPOINT" -At \
    -c "SELECT 'orioledb pgbench_accounts bytes ' || orioledb_relation_size('pgbench_accounts'::regclass)"
