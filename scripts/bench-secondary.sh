#!/usr/bin/env bash
# A secondary index stored by the engine (orioledb_btree) against a
# PostgreSQL btree on the same orioledb table, on the local server that
# scripts/run.sh starts: one table of ROWS rows with two equal integer
# columns in scattered order, k1 under a btree, k2 under orioledb_btree
# (and k3 under orioledb_btree with compress = 3). Prints the index sizes
# after CHECKPOINT, then point lookups and 100-row ranges through either
# index, alternating, RUNS rounds of SECS seconds (pgbench -M prepared,
# 2 clients), each run's tps and the medians with their ratio.
# Usage: scripts/bench-secondary.sh [rows] [seconds] [runs]
# (defaults 1000000, 5, 5).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
ROWS="${1:-1000000}" SECS="${2:-5}" RUNS="${3:-5}"
choose_run_dir 2>/dev/null
PSQL=(as_pg "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h "$RUN_DIR" -p "$ORIOLEDB_PORT" -U postgres)
PGBENCH=(as_pg "$PG_BINDIR/pgbench" -h "$RUN_DIR" -p "$ORIOLEDB_PORT" -U postgres)
DB=bench_secondary
# A prime above ROWS: g * 7919 mod P is a permutation of the keys.
P=$(awk -v n="$ROWS" 'BEGIN { for (p = n + 1; ; p++) { ok = 1; for (d = 2; d * d <= p; d++) if (p % d == 0) { ok = 0; break } if (ok) { print p; exit } } }')
"${PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
"${PSQL[@]}" -d "$DB" <<SQL
CREATE EXTENSION orioledb_rs;
CREATE TABLE s (id int PRIMARY KEY, k1 int, k2 int, k3 int, abalance int, filler char(84)) USING orioledb;
INSERT INTO s SELECT g, p, p, p, 0, '' FROM (SELECT g, ((g::int8 * 7919) % $P)::int AS p FROM generate_series(1, $ROWS) g) x;
CREATE INDEX s_k1 ON s USING btree (k1);
CREATE INDEX s_k2 ON s USING orioledb_btree (k2);
CREATE INDEX s_k3 ON s USING orioledb_btree (k3) WITH (compress = 3);
VACUUM ANALYZE s;
CHECKPOINT;
SQL
"${PSQL[@]}" -d "$DB" -c "SELECT i AS index, am, bytes, round(bytes::numeric / first_value(bytes) OVER (ORDER BY i), 2) AS of_btree
  FROM (SELECT c.relname AS i, a.amname AS am,
               CASE a.amname WHEN 'btree' THEN pg_relation_size(c.oid) ELSE orioledb_tree_bytes(c.oid) END AS bytes
          FROM pg_class c JOIN pg_am a ON a.oid = c.relam
         WHERE c.relname IN ('s_k1', 's_k2', 's_k3')) x ORDER BY i"
dir=$(mktemp -d)
chmod 755 "$dir"
for k in k1 k2; do
    printf '\\set x random(1, %s)\nSELECT abalance FROM s WHERE %s = :x;\n' "$P" "$k" > "$dir/point_$k.sql"
    printf '\\set x random(1, %s)\nSELECT sum(abalance) FROM s WHERE %s BETWEEN :x AND :x + 100;\n' "$P" "$k" > "$dir/range_$k.sql"
done
chmod 644 "$dir"/*.sql
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for w in point range; do
    declare -A TPS=()
    for run in $(seq 1 "$RUNS"); do
        for k in k1 k2; do
            t=$("${PGBENCH[@]}" -n -c 2 -j 2 -T "$SECS" -M prepared -f "$dir/${w}_$k.sql" "$DB" 2>/dev/null |
                sed -n 's/^tps = \([0-9.]*\).*/\1/p')
            echo "$w run $run $k tps $t"
            TPS[$k]="${TPS[$k]:-} $t"
        done
    done
    m1=$(echo "${TPS[k1]}" | median); m2=$(echo "${TPS[k2]}" | median)
    echo "$w median tps: btree $m1, orioledb_btree $m2, ratio $(awk -v a="$m2" -v b="$m1" 'BEGIN {printf "%.2f", a/b}')"
done
rm -rf "$dir"
