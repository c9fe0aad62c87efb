#!/usr/bin/env bash
# pgbench: orioledb vs heap on a throwaway server of its own; CSV, markdown
# summary and SVG plots.
#
# Usage: scripts/bench.sh [options]
#
#   --scale N            pgbench scale factor (default 10)
#   --secs N             seconds per pgbench run (default 30)
#   --rounds R           rounds per workload and client count (default 3)
#   --clients "LIST"     client counts (default "1 2 4 8 16 32"); threads = min(C, 2)
#   --workloads "LIST"   any of tpcb select (default "tpcb select"; select = -S)
#   --protocol P         simple | prepared, passed as pgbench -M (default simple)
#   --sync on|off        synchronous_commit of the server (default off)
#   --load-runs N        load each database N times, report the median (default 1)
#   --size-trace SECS    afterwards, TPC-B with 8 clients for SECS seconds on each
#                        AM (freshly loaded) sampling the table size every 10 s
#   --only-size-trace    load, then only the size trace (needs --size-trace)
#   --trace-checkpoint   CHECKPOINT before each size sample (without it the
#                        orioledb size only moves at engine checkpoints, every
#                        orioledb.checkpoint_timeout = 5min)
#   --out DIR            output directory (default docs/bench)
#   --keep               leave the server running (and its data) at exit
#   -h, --help           this text
#
# The server: a fresh cluster in $RUN_DIR/bench/pgdata (RUN_DIR as chosen by
# lib.sh, normally .run/), port $ORIOLEDB_BENCH_PORT (default 54317), Unix
# socket only, preloading orioledb_rs, default settings except
# synchronous_commit and max_connections. It uses the extension as installed in
# the system PostgreSQL 15 (this script builds nothing). Databases bench_heap and
# bench_orioledb (default_table_access_method = orioledb) are loaded with
# `pgbench -i -s SCALE` (heap first, then orioledb; time of pgbench -i only),
# followed by CHECKPOINT and the size of pgbench_accounts with its indexes
# (pg_total_relation_size / orioledb_relation_size). Then for each workload,
# client count and round: `pgbench -n -c C -j min(C,2) -T SECS`, heap then
# orioledb, recording tps and the WAL written per transaction
# (pg_current_wal_insert_lsn() before and after, whole cluster).
#
# Output in DIR: runs.csv (workload,clients,am,round,tps,wal_bytes,txns,wal_per_txn),
# loads.csv (am,run,seconds,bytes_after_load), summary.md (medians, ratios,
# machine, commit, command line), tps-tpcb.svg, tps-select.svg, wal-tpcb.svg and,
# with --size-trace, size.csv (am,seconds,bytes) and size-tpcb.svg.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

# the command line as typed (quoted so it can be pasted back)
shell_quote() {
    local a out="" q="'" r="'\\''"
    for a in "$@"; do
        if [[ "$a" =~ ^[A-Za-z0-9_./=:,+-]+$ ]]; then out+=" $a"
        else out+=" '${a//$q/$r}'"; fi
    done
    printf '%s' "$out"
}
COMMAND_LINE="scripts/bench.sh$(shell_quote "$@")"

SCALE=10 SECS=30 ROUNDS=3 CLIENTS="1 2 4 8 16 32" WORKLOADS="tpcb select"
PROTOCOL=simple SYNC=off LOAD_RUNS=1 SIZE_TRACE=0 ONLY_SIZE_TRACE=no
TRACE_CHECKPOINT=no OUT="$PROJECT_DIR/docs/bench" KEEP=no
PORT="${ORIOLEDB_BENCH_PORT:-54317}"

need_arg() { [ "$#" -ge 2 ] || die "$1 needs a value (see --help)"; }
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
while [ "$#" -gt 0 ]; do
    case "$1" in
        --scale) need_arg "$@"; SCALE="$2"; shift 2 ;;
        --secs) need_arg "$@"; SECS="$2"; shift 2 ;;
        --rounds) need_arg "$@"; ROUNDS="$2"; shift 2 ;;
        --clients) need_arg "$@"; CLIENTS="$2"; shift 2 ;;
        --workloads) need_arg "$@"; WORKLOADS="$2"; shift 2 ;;
        --protocol) need_arg "$@"; PROTOCOL="$2"; shift 2 ;;
        --sync) need_arg "$@"; SYNC="$2"; shift 2 ;;
        --load-runs) need_arg "$@"; LOAD_RUNS="$2"; shift 2 ;;
        --size-trace) need_arg "$@"; SIZE_TRACE="$2"; shift 2 ;;
        --only-size-trace) ONLY_SIZE_TRACE=yes; shift ;;
        --trace-checkpoint) TRACE_CHECKPOINT=yes; shift ;;
        --out) need_arg "$@"; OUT="$2"; shift 2 ;;
        --keep) KEEP=yes; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done

is_uint "$PORT" || die "ORIOLEDB_BENCH_PORT must be a port number, not '$PORT'"
for v in SCALE SECS ROUNDS LOAD_RUNS SIZE_TRACE; do
    is_uint "${!v}" || die "--$(echo "$v" | tr 'A-Z_' 'a-z-') must be a non-negative integer, not '${!v}'"
done
[ "$SCALE" -ge 1 ] && [ "$SECS" -ge 1 ] && [ "$ROUNDS" -ge 1 ] && [ "$LOAD_RUNS" -ge 1 ] \
    || die "--scale, --secs, --rounds and --load-runs must be at least 1"
for c in $CLIENTS; do
    is_uint "$c" && [ "$c" -ge 1 ] || die "--clients: '$c' is not a positive integer"
done
[ -n "${CLIENTS// /}" ] || die "--clients: empty list"
for w in $WORKLOADS; do
    case "$w" in tpcb|select) ;; *) die "--workloads: unknown workload '$w' (tpcb, select)" ;; esac
done
case "$PROTOCOL" in simple|prepared) ;; *) die "--protocol must be simple or prepared" ;; esac
case "$SYNC" in on|off) ;; *) die "--sync must be on or off" ;; esac
if [ "$ONLY_SIZE_TRACE" = yes ] && [ "$SIZE_TRACE" -eq 0 ]; then
    die "--only-size-trace needs --size-trace SECS"
fi
max_clients=8
for c in $CLIENTS; do [ "$c" -gt "$max_clients" ] && max_clients=$c; done
MAX_CONNECTIONS=$((max_clients + 20))
[ "$MAX_CONNECTIONS" -ge 100 ] || MAX_CONNECTIONS=100

require_root
command -v "$PG_BINDIR/pgbench" >/dev/null || die "pgbench not found in $PG_BINDIR"
SO="$("$PG_CONFIG" --pkglibdir)/orioledb_rs.so"
# lib.sh's install moves the library aside (.prev) while cargo builds: wait for it
waited=0
while [ ! -e "$SO" ] && [ -e "$SO.prev" ] && [ "$waited" -lt 1800 ]; do
    [ "$waited" = 0 ] && note "orioledb_rs.so is being reinstalled; waiting (up to 30 min)"
    sleep 5; waited=$((waited + 5))
done
[ -e "$SO" ] || die "orioledb_rs is not installed in $(dirname "$SO") (scripts/run.sh installs it)"

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd -P)"
choose_run_dir
BENCH_DIR="$RUN_DIR/bench"
PGDATA_DIR="$BENCH_DIR/pgdata"
LOG="$BENCH_DIR/postgres.log"
SOCK="$BENCH_DIR"
TMP="$(mktemp -d /tmp/orioledb-bench.XXXXXX)"
chmod 755 "$TMP"
cd /   # the postgres user runs the clients; give them a readable cwd

PSQL=(as_pg "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SOCK" -p "$PORT" -U postgres)
PGBENCH=(as_pg "$PG_BINDIR/pgbench" -h "$SOCK" -p "$PORT" -U postgres)
AMS="heap orioledb"
BG_PID=""

sql() { "${PSQL[@]}" -d "$1" -c "$2"; }
size_sql() {
    if [ "$1" = heap ]; then echo "SELECT pg_total_relation_size('pgbench_accounts')"
    else echo "SELECT orioledb_relation_size('pgbench_accounts'::regclass)"; fi
}
now() { echo "$EPOCHREALTIME"; }
secs_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
hms() { local s=${1%.*}; printf '%d:%02d:%02d' $((s / 3600)) $((s % 3600 / 60)) $((s % 60)); }
# median of the numbers on stdin (mean of the middle two for an even count)
median() {
    sort -g | awk 'NF { a[++n] = $1 } END {
        if (n == 0) print ""; else if (n % 2) print a[(n + 1) / 2]; else print (a[n / 2] + a[n / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
mb() { awk -v b="$1" 'BEGIN { if (b == "") print "-"; else printf "%.1f", b / 1048576 }'; }
fmt0() { awk -v v="$1" 'BEGIN { if (v == "") print "-"; else printf "%.0f", v }'; }

cleanup() {
    local rc=$?
    set +e
    if [ -n "$BG_PID" ]; then kill "$BG_PID" 2>/dev/null; wait "$BG_PID" 2>/dev/null; fi
    if [ "$KEEP" = yes ]; then
        note "--keep: server left running: psql -h $SOCK -p $PORT -U postgres -d bench_orioledb"
        note "stop it with: runuser -u $PG_USER -- $PG_BINDIR/pg_ctl -D $PGDATA_DIR stop"
    else
        stop_cluster "$PGDATA_DIR"
        rm -rf "$PGDATA_DIR"
    fi
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- server -----------------------------------------------------------------
if [ -d "$PGDATA_DIR" ]; then
    say "remove the previous benchmark cluster $PGDATA_DIR"
    stop_cluster "$PGDATA_DIR"
    rm -rf "$PGDATA_DIR"
fi
make_pg_dir "$BENCH_DIR"
chmod 755 "$BENCH_DIR"
say "create cluster $PGDATA_DIR (port $PORT, synchronous_commit = $SYNC, max_connections = $MAX_CONNECTIONS)"
init_cluster "$PGDATA_DIR" "$PORT" "$SOCK" yes
{
    echo "synchronous_commit = $SYNC"
    echo "max_connections = $MAX_CONNECTIONS"
} >>"$PGDATA_DIR/postgresql.conf"
: >"$LOG"
chown "$PG_USER": "$LOG"
start_cluster "$PGDATA_DIR" "$LOG"
SERVER_VERSION="$(sql postgres "SHOW server_version")"

# ---- load -------------------------------------------------------------------
# load_db AM: recreate bench_AM and load it; prints the seconds pgbench -i took
load_db() {
    local am="$1" db="bench_$1" t0 secs
    "${PSQL[@]}" -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" >/dev/null
    sql postgres "CREATE DATABASE $db" >/dev/null
    sql "$db" "CREATE EXTENSION orioledb_rs" >/dev/null
    if [ "$am" = orioledb ]; then
        sql "$db" "ALTER DATABASE $db SET default_table_access_method = orioledb" >/dev/null
    fi
    t0="$(now)"
    if ! "${PGBENCH[@]}" -i -q -s "$SCALE" "$db" >"$TMP/load.out" 2>"$TMP/load.err"; then
        cat "$TMP/load.out" "$TMP/load.err" >&2
        die "pgbench -i failed for $db"
    fi
    secs="$(secs_since "$t0")"
    sql "$db" "CHECKPOINT" >/dev/null
    echo "$secs"
}

echo "am,run,seconds,bytes_after_load" >"$OUT/loads.csv"
for run in $(seq 1 "$LOAD_RUNS"); do
    for am in $AMS; do
        say "load $am (pgbench -i -s $SCALE), run $run/$LOAD_RUNS"
        secs="$(load_db "$am")"
        bytes="$(sql "bench_$am" "$(size_sql "$am")")"
        note "$secs s, pgbench_accounts $(mb "$bytes") MB"
        echo "$am,$run,$secs,$bytes" >>"$OUT/loads.csv"
    done
done

# ---- runs -------------------------------------------------------------------
# pgbench_run AM WORKLOAD CLIENTS SECS: runs pgbench, leaves its output in $TMP/run.out
pgbench_run() {
    local am="$1" workload="$2" c="$3" secs="$4" j=$(( $3 < 2 ? $3 : 2 )) flags=()
    [ "$workload" = select ] && flags=(-S)
    if ! "${PGBENCH[@]}" -n -M "$PROTOCOL" "${flags[@]}" -c "$c" -j "$j" -T "$secs" "bench_$am" \
        >"$TMP/run.out" 2>"$TMP/run.err"; then
        cat "$TMP/run.out" "$TMP/run.err" >&2
        die "pgbench failed: $workload, $c clients, $am"
    fi
}
parse_tps() { sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$1" | head -n1; }
parse_txns() { sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1" | head -n1; }

if [ "$ONLY_SIZE_TRACE" = no ]; then
    echo "workload,clients,am,round,tps,wal_bytes,txns,wal_per_txn" >"$OUT/runs.csv"
    nclients=$(echo "$CLIENTS" | wc -w) nworkloads=$(echo "$WORKLOADS" | wc -w)
    total=$((nworkloads * nclients * ROUNDS * 2))
    say "$total pgbench runs of $SECS s (about $(hms $((total * SECS))) plus connection set-up)"
    done_runs=0 t_start="$(now)"
    for workload in $WORKLOADS; do
        for c in $CLIENTS; do
            for round in $(seq 1 "$ROUNDS"); do
                for am in $AMS; do
                    lsn0="$(sql "bench_$am" "SELECT pg_current_wal_insert_lsn()")"
                    pgbench_run "$am" "$workload" "$c" "$SECS"
                    wal="$(sql "bench_$am" "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$lsn0')::bigint")"
                    tps="$(parse_tps "$TMP/run.out")"
                    txns="$(parse_txns "$TMP/run.out")"
                    if [ -z "$tps" ] || [ -z "$txns" ]; then
                        cat "$TMP/run.out" "$TMP/run.err" >&2
                        die "could not read tps / transactions from pgbench's output"
                    fi
                    per="$(awk -v w="$wal" -v n="$txns" 'BEGIN { if (n > 0) printf "%.1f", w / n; else print "" }')"
                    echo "$workload,$c,$am,$round,$tps,$wal,$txns,$per" >>"$OUT/runs.csv"
                    done_runs=$((done_runs + 1))
                    elapsed="$(secs_since "$t_start")"
                    eta="$(awk -v e="$elapsed" -v d="$done_runs" -v t="$total" 'BEGIN { printf "%d", e / d * (t - d) }')"
                    printf '[%d/%d] %s c=%d %s round %d: %.0f tps, %.0f B/txn  (elapsed %s, ETA %s)\n' \
                        "$done_runs" "$total" "$workload" "$c" "$am" "$round" "$tps" "${per:-0}" \
                        "$(hms "$elapsed")" "$(hms "$eta")"
                done
            done
        done
    done
fi

# ---- size trace -------------------------------------------------------------
if [ "$SIZE_TRACE" -gt 0 ]; then
    echo "am,seconds,bytes" >"$OUT/size.csv"
    declare -A TRACE_TPS
    # sample AM SECONDS: append the table's size to size.csv
    sample() {
        local b
        if [ "$TRACE_CHECKPOINT" = yes ]; then sql "bench_$1" "CHECKPOINT" >/dev/null; fi
        b="$(sql "bench_$1" "$(size_sql "$1")")"
        echo "$1,$2,$b" >>"$OUT/size.csv"
        note "$(printf '%4d s  %8s MB' "$2" "$(mb "$b")")"
    }
    for am in $AMS; do
        if [ "$ONLY_SIZE_TRACE" = no ]; then
            say "reload $am for the size trace"
            load_db "$am" >/dev/null
        fi
        say "size trace $am: TPC-B, 8 clients, $SIZE_TRACE s, sampling every 10 s"
        sample "$am" 0
        "${PGBENCH[@]}" -n -M "$PROTOCOL" -c 8 -j 2 -T "$SIZE_TRACE" "bench_$am" \
            >"$TMP/trace.out" 2>"$TMP/trace.err" &
        BG_PID=$!
        t0="$(now)" next=10
        while [ "$next" -lt "$SIZE_TRACE" ]; do
            # sleep until t0 + next (or until pgbench ends)
            while kill -0 "$BG_PID" 2>/dev/null; do
                left="$(awk -v t0="$t0" -v n="$next" -v now="$(now)" 'BEGIN { d = t0 + n - now; if (d <= 0.01) print 0; else printf "%.3f", (d > 0.5 ? 0.5 : d) }')"
                [ "$left" = 0 ] && break
                sleep "$left"
            done
            kill -0 "$BG_PID" 2>/dev/null || break
            sample "$am" "$next"
            next=$((next + 10))
        done
        rc=0
        wait "$BG_PID" || rc=$?
        BG_PID=""
        if [ "$rc" -ne 0 ]; then
            cat "$TMP/trace.out" "$TMP/trace.err" >&2
            die "pgbench failed during the size trace of $am"
        fi
        sample "$am" "$SIZE_TRACE"
        TRACE_TPS[$am]="$(parse_tps "$TMP/trace.out")"
        note "$(fmt0 "${TRACE_TPS[$am]}") tps"
    done
fi

# ---- summary and plots ------------------------------------------------------
say "write $OUT"
PLOT="$PROJECT_DIR/scripts/svgplot.awk"
SUB="scale $SCALE, $SECS s runs, median of $ROUNDS, synchronous_commit=$SYNC, -M $PROTOCOL"

# med_runs WORKLOAD CLIENTS AM COL: median of column COL of those rows of runs.csv
# med_loads AM COL: median of column COL of loads.csv for AM
med_runs() { awk -F, -v w="$1" -v c="$2" -v a="$3" -v col="$4" 'NR > 1 && $1 == w && $2 == c && $3 == a { print $col }' "$OUT/runs.csv" | median; }
med_loads() { awk -F, -v a="$1" -v col="$2" 'NR > 1 && $1 == a { print $col }' "$OUT/loads.csv" | median; }

wl_title() { if [ "$1" = select ]; then echo "select-only (-S)"; else echo "TPC-B"; fi; }

if [ "$ONLY_SIZE_TRACE" = no ]; then
    for workload in $WORKLOADS; do
        for col_name in tps wal; do
            [ "$col_name" = wal ] && [ "$workload" != tpcb ] && continue
            col=5; ylabel="tps"; title="pgbench $(wl_title "$workload"): median tps"
            if [ "$col_name" = wal ]; then
                col=8; ylabel="WAL bytes per transaction"; title="pgbench $(wl_title "$workload"): WAL per transaction"
            fi
            for am in $AMS; do
                for c in $CLIENTS; do
                    printf '%s\t%s\t%s\n' "$am" "$c" "$(med_runs "$workload" "$c" "$am" "$col")"
                done
            done | awk -f "$PLOT" -v title="$title" -v subtitle="$SUB" -v xlabel="clients" \
                -v ylabel="$ylabel" -v xscale=log2 >"$OUT/$col_name-$workload.svg"
        done
    done
fi
if [ "$SIZE_TRACE" -gt 0 ]; then
    awk -F, 'NR > 1 { printf "%s\t%s\t%.3f\n", $1, $2, $3 / 1048576 }' "$OUT/size.csv" \
        | awk -f "$PLOT" -v title="pgbench_accounts size during TPC-B (8 clients)" \
            -v subtitle="scale $SCALE, synchronous_commit=$SYNC, -M $PROTOCOL$([ "$TRACE_CHECKPOINT" = yes ] && echo ', CHECKPOINT before each sample')" \
            -v xlabel="seconds" -v ylabel="MB (with indexes)" -v xscale=linear >"$OUT/size-tpcb.svg"
fi

cpu_model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
ram_gb="$(awk '/^MemTotal:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)"
commit="$(git -C "$PROJECT_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)"
# Changes under the output directory are this run's own results, not code.
out_rel="$(realpath --relative-to="$PROJECT_DIR" "$OUT" 2>/dev/null || echo "$OUT")"
if [ "$commit" != unknown ] && [ -n "$(git -C "$PROJECT_DIR" status --porcelain --untracked-files=no -- . ":(exclude)$out_rel" 2>/dev/null)" ]; then
    commit="$commit (with uncommitted changes)"
fi
lib_when="$(date -r "$SO" '+%Y-%m-%d %H:%M' 2>/dev/null || echo '?')"

{
    echo "# pgbench: orioledb vs heap"
    echo
    echo "Generated by \`scripts/bench.sh\` on $(date '+%Y-%m-%d %H:%M %Z'), commit $commit"
    echo "(library: the installed \`orioledb_rs.so\` of $lib_when; PostgreSQL $SERVER_VERSION)."
    echo
    echo "Command: \`$COMMAND_LINE\`"
    echo
    echo "Machine: $(nproc) CPUs ($cpu_model), $ram_gb GB RAM."
    echo
    echo "Server: a fresh cluster preloading orioledb_rs, default settings except"
    echo "\`synchronous_commit = $SYNC\` and \`max_connections = $MAX_CONNECTIONS\`; scale $SCALE."
    if [ "$ONLY_SIZE_TRACE" = no ]; then
        echo "Runs: \`pgbench -n -M $PROTOCOL -c C -j min(C,2) -T $SECS\`, heap and orioledb alternately,"
        echo "$ROUNDS round(s); figures are medians. WAL per transaction: the cluster's WAL"
        echo "insert position before and after a run over the transactions pgbench processed;"
        echo "heap's includes the full-page images written after each checkpoint (the one after"
        echo "the load, then every \`checkpoint_timeout\`), so it varies with where checkpoints fall."
    fi
    echo
    echo "## Load (\`pgbench -i -s $SCALE\`, median of $LOAD_RUNS)"
    echo
    echo "| | heap | orioledb | orioledb/heap |"
    echo "|---|---|---|---|"
    lh="$(med_loads heap 3)" lo="$(med_loads orioledb 3)"
    sh="$(med_loads heap 4)" so_="$(med_loads orioledb 4)"
    echo "| load seconds | $lh | $lo | $(ratio "$lo" "$lh") |"
    echo "| pgbench_accounts MB after load + CHECKPOINT (with indexes) | $(mb "$sh") | $(mb "$so_") | $(ratio "$so_" "$sh") |"
    if [ "$ONLY_SIZE_TRACE" = no ]; then
        echo
        echo "## Throughput and WAL"
        echo
        echo "| workload | clients | heap tps | orioledb tps | tps orioledb/heap | heap WAL B/txn | orioledb WAL B/txn | WAL orioledb/heap |"
        echo "|---|---|---|---|---|---|---|---|"
        for workload in $WORKLOADS; do
            for c in $CLIENTS; do
                th="$(med_runs "$workload" "$c" heap 5)" to="$(med_runs "$workload" "$c" orioledb 5)"
                wh="$(med_runs "$workload" "$c" heap 8)" wo="$(med_runs "$workload" "$c" orioledb 8)"
                echo "| $workload | $c | $(fmt0 "$th") | $(fmt0 "$to") | $(ratio "$to" "$th") | $(fmt0 "$wh") | $(fmt0 "$wo") | $(ratio "$wo" "$wh") |"
            done
        done
        echo
        for workload in $WORKLOADS; do
            echo "![tps $workload](tps-$workload.svg)"
        done
        [[ " $WORKLOADS " == *" tpcb "* ]] && echo "![WAL per transaction, tpcb](wal-tpcb.svg)"
        echo
        echo "Raw figures: [runs.csv](runs.csv), [loads.csv](loads.csv)."
    fi
    if [ "$SIZE_TRACE" -gt 0 ]; then
        echo
        echo "## Size during TPC-B (8 clients, $SIZE_TRACE s, freshly loaded)"
        echo
        if [ "$TRACE_CHECKPOINT" = yes ]; then
            echo "A CHECKPOINT before each sample."
        else
            echo "No CHECKPOINT between samples: the orioledb figure counts the engine's files,"
            echo "which change at engine checkpoints (\`orioledb.checkpoint_timeout\`, 5 min by default)."
        fi
        echo
        echo "| | start MB | end MB | growth | tps |"
        echo "|---|---|---|---|---|"
        for am in $AMS; do
            b0="$(awk -F, -v a="$am" 'NR > 1 && $1 == a && $2 == 0 { print $3; exit }' "$OUT/size.csv")"
            b1="$(awk -F, -v a="$am" 'NR > 1 && $1 == a { b = $3 } END { print b }' "$OUT/size.csv")"
            echo "| $am | $(mb "$b0") | $(mb "$b1") | $(ratio "$b1" "$b0")× | $(fmt0 "${TRACE_TPS[$am]:-}") |"
        done
        echo
        echo "![size during TPC-B](size-tpcb.svg)"
        echo
        echo "Raw figures: [size.csv](size.csv)."
    fi
} >"$OUT/summary.md"

cat "$OUT/summary.md"
say "done: $OUT"
