#!/usr/bin/env bash
# Seed 004 (heap fillfactor, HOT updates and bloat) on heap and orioledb:
# table and index size after the insert and after each of three update
# passes (scripts/seed004.sql), as a markdown table.
#
# Usage: scripts/seed004.sh [ROWS]   (default 240000)
#
# Runs against the demo server that scripts/run.sh starts (.run/, port
# 54315; ORIOLEDB_PORT overrides), in a database seed004 it creates. Heap
# with fillfactor 100 and 50 (autovacuum off on the table, as in the seed)
# and orioledb with default settings; orioledb's table bytes are
# orioledb_tree_bytes (the space its files hold), heap's pg_relation_size.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root
cd "$PROJECT_DIR"
ROWS="${1:-240000}"
PORT="${ORIOLEDB_PORT:-54315}"
HOST="$PROJECT_DIR/.run"
PSQL=(runuser -u postgres -- /usr/lib/postgresql/15/bin/psql -h "$HOST" -p "$PORT" -X -q)
"${PSQL[@]}" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'seed004'" | grep -q 1 ||
    "${PSQL[@]}" -d postgres -c "CREATE DATABASE seed004"
"${PSQL[@]}" -d seed004 -c "CREATE EXTENSION IF NOT EXISTS orioledb_rs"
run_one() { # label am opts size keys
    local t0 t1 out
    t0=$(date +%s.%N)
    out=$("${PSQL[@]}" -d seed004 -v n="$ROWS" -v am="$2" -v opts="$3" -v size="$4" \
        -v keys="$5" -f scripts/seed004.sql)
    t1=$(date +%s.%N)
    echo "$out" | awk -F'|' -v l="$1" -v t0="$t0" -v t1="$t1" '
        { printf "| %s | %s | %.1f | %.1f | %.1f | %s |\n", l, $1, $2/1048576, $3/1048576, ($2+$3)/1048576, $4 }
        END { printf "| %s | (total time) | | | | %.0f s |\n", l, t1 - t0 }'
}
echo "Seed 004 at $ROWS rows ($(git rev-parse --short HEAD), $(nproc) cores)"
echo
echo "| table | phase | table MB | index MB | total MB | detail |"
echo "|---|---|---|---|---|---|"
run_one "heap ff100" heap "fillfactor=100" "pg_relation_size('t4')" "''"
run_one "heap ff50" heap "fillfactor=50" "pg_relation_size('t4')" "''"
run_one "orioledb" orioledb "compress=-1" "orioledb_tree_bytes('t4'::regclass)" "orioledb_check('t4'::regclass)"
