#!/usr/bin/env bash
# Run every test of orioledb_rs; exit non-zero if anything fails.
#
#   1. setup           scripts/setup.sh (packages, cargo-pgrx, pgrx init)
#      layers          scripts/layers.sh: no module imports from a layer above it
#   2. engine          cargo test -p orioledb_engine --release   (no server)
#   3. pg_test         cargo pgrx test pg15 --runas postgres      (#[pg_test]s in a server)
#   4. install         cargo pgrx install --release               (pg_test left a debug build)
#   5. integration     cargo test --release --test '*' against a fresh throwaway
#                      cluster that preloads orioledb_rs (stopped and removed at exit)
#   6. regress         scripts/regress.sh --subset: a fixed subset of PostgreSQL's
#                      regression suite with default_table_access_method = orioledb
#   7. isolation       scripts/isolation.sh --subset: a fixed subset of PostgreSQL's
#                      isolation suite (concurrent sessions) on orioledb
#
# Steps 2-7 all run even if an earlier one fails (except that 5, 6 and 7 need 4).
# Logs: <run dir>/test-logs/. Environment overrides: ORIOLEDB_TEST_PORT (54316),
# ORIOLEDB_RUN_DIR, ORIOLEDB_TEST_KEEP=1 (keep the integration cluster).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root
cd "$PROJECT_DIR"

T0=$(date +%s)
STEP_NAMES=(); STEP_RESULTS=(); STEP_TIMES=(); STEP_COUNTS=()
FAILED=0

record() { # name result seconds counts
    STEP_NAMES+=("$1"); STEP_RESULTS+=("$2"); STEP_TIMES+=("$3"); STEP_COUNTS+=("$4")
    [ "$2" = PASS ] || FAILED=1
}

# Sum libtest's "test result: ok. 3 passed; 0 failed; 1 ignored; ..." lines;
# with $2, only those of test binaries whose "Running ..." line matches it.
count_tests() {
    awk -v only="${2:-}" '
         /^[[:space:]]*(Running (unittests |tests\/|benches\/)|Doc-tests )/ { cur = $0 }
         /^test result:/ {
            if (only != "" && cur !~ only) next
            for (i = 1; i <= NF; i++) {
                if ($(i+1) ~ /^passed/)  p += $i
                if ($(i+1) ~ /^failed/)  f += $i
                if ($(i+1) ~ /^ignored/) g += $i
            }
            n++
         }
         END { if (n) printf "%d passed, %d failed, %d ignored", p, f, g; else printf "no test results" }' "$1"
}

# step NAME TIMEOUT_SECONDS [--count-only REGEX | --no-count] CMD...
# Run CMD with a time limit, tee its output to a log, record the outcome.
step() {
    local name="$1" limit="$2"; shift 2
    local only=""
    local nocount=0
    if [ "$1" = --count-only ]; then only="$2"; shift 2; fi
    if [ "$1" = --no-count ]; then nocount=1; shift; fi
    local log="$LOG_DIR/$name.log" t rc
    say "[$name] $*"
    t=$(date +%s)
    set +e
    # Time limits guard unattended runs (CI). On a terminal, skip them: timeout
    # runs the command in its own process group, out of reach of Ctrl-C.
    local limiter=()
    if [ -n "${CI:-}" ] || [ ! -t 0 ]; then limiter=(timeout -k 60 "$limit"); fi
    "${limiter[@]}" "$@" </dev/null 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    t=$(( $(date +%s) - t ))
    local counts
    counts=""
    [ "$nocount" = 1 ] || counts="$(count_tests "$log" "$only")"
    if [ "$rc" = 0 ]; then
        record "$name" PASS "$t" "$counts"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        record "$name" "FAIL (timeout after ${limit}s)" "$t" "$counts"
    else
        record "$name" "FAIL (exit $rc)" "$t" "$counts"
    fi
    return 0
}

summary() {
    local total=$(( $(date +%s) - T0 ))
    echo
    echo "${_B}================ orioledb_rs test summary ================${_N}"
    local i
    for i in "${!STEP_NAMES[@]}"; do
        printf '  %-12s %-28s %5ss   %s\n' "${STEP_NAMES[$i]}" "${STEP_RESULTS[$i]}" "${STEP_TIMES[$i]}" "${STEP_COUNTS[$i]}"
    done
    printf '  %-12s %-28s %5ss\n' "total" "" "$total"
    echo "  logs: $LOG_DIR"
    if [ "$FAILED" = 0 ]; then
        echo "${_B}${_G}ALL TESTS PASSED${_N}"
    else
        echo "${_B}${_R}SOME TESTS FAILED${_N}"
    fi
}

# ---------------------------------------------------------------- 1. setup
say "[setup] scripts/setup.sh"
t=$(date +%s)
bash "$PROJECT_DIR/scripts/setup.sh"
choose_run_dir
LOG_DIR="$RUN_DIR/test-logs"
mkdir -p "$LOG_DIR"
record setup PASS $(( $(date +%s) - t )) ""

# The integration cluster (step 5); defined here so that an interrupted run
# still stops and removes it.
ITEST_DIR="$RUN_DIR/itest"
ITEST_PGDATA="$ITEST_DIR/pgdata"
ITEST_PORT="${ORIOLEDB_TEST_PORT:-54316}"
ITEST_LOG="$ITEST_DIR/postgres.log"

cleanup_itest() {
    if [ -f "$ITEST_PGDATA/PG_VERSION" ]; then
        stop_cluster "$ITEST_PGDATA" || true
    fi
    # scratch clusters the tests may have left running
    local d
    for d in "$ITEST_DIR"/scratch/*/; do
        if [ -f "${d}postmaster.pid" ]; then stop_cluster "${d%/}"; fi
    done
    if [ -f "$ITEST_LOG" ] && [ -n "${LOG_DIR:-}" ]; then
        cp "$ITEST_LOG" "$LOG_DIR/integration-server.log" 2>/dev/null || true
    fi
    if [ "${ORIOLEDB_TEST_KEEP:-0}" != 1 ]; then
        rm -rf "$ITEST_DIR"
    fi
}

trap 'cleanup_itest; summary' EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- layers
step layers 60 --no-count bash scripts/layers.sh

# ---------------------------------------------------------------- 2. engine
step engine 2400 cargo test -p orioledb_engine --release

# ---------------------------------------------------------------- 3. pg_test
PGRX_DATA="$RUN_DIR/pgrx-test-data"
# Stop postmasters a killed earlier run may have left behind, then start clean.
if [ -d "$PGRX_DATA" ]; then
    for d in "$PGRX_DATA"/*/; do
        if [ -f "${d}postmaster.pid" ]; then stop_cluster "${d%/}"; fi
    done
    rm -rf "$PGRX_DATA"
fi
make_pg_dir "$PGRX_DATA"
unlink_installed_library   # see lib.sh: keeps running servers alive
# Integration tests are part of the package too; without ORIOLEDB_TEST_* they
# skip here and run for real in step 5.
step pg_test 3000 --count-only 'unittests' env -u ORIOLEDB_TEST_HOST -u ORIOLEDB_TEST_PORT \
    cargo pgrx test pg15 --runas "$PG_USER" --pgdata "$PGRX_DATA"
restore_installed_library

# ---------------------------------------------------------------- 4. install
unlink_installed_library
step install 1800 --no-count cargo pgrx install --release --pg-config "$PG_CONFIG"
restore_installed_library

# ---------------------------------------------------------------- 5. integration
run_integration() {
    cleanup_itest
    mkdir -p "$ITEST_DIR"
    chown "$PG_USER": "$ITEST_DIR"
    chmod 755 "$ITEST_DIR"
    mkdir -p "$ITEST_DIR/scratch"
    chown "$PG_USER": "$ITEST_DIR/scratch"
    say "[integration] fresh cluster $ITEST_PGDATA (port $ITEST_PORT, preloads orioledb_rs)"
    if ! (
        init_cluster "$ITEST_PGDATA" "$ITEST_PORT" "$ITEST_DIR" yes
        echo "max_prepared_transactions = 4" >>"$ITEST_PGDATA/postgresql.conf"
        touch "$ITEST_LOG"; chown "$PG_USER": "$ITEST_LOG"
        start_cluster "$ITEST_PGDATA" "$ITEST_LOG"
    ); then
        record integration "FAIL (server did not start)" 0 ""
        return 0
    fi

    export ORIOLEDB_TEST_HOST="$ITEST_DIR"
    export ORIOLEDB_TEST_PORT="$ITEST_PORT"
    export ORIOLEDB_TEST_PGDATA="$ITEST_PGDATA"
    export ORIOLEDB_TEST_BINDIR="$PG_BINDIR"
    export ORIOLEDB_TEST_LOG="$ITEST_LOG"
    export ORIOLEDB_TEST_SCRATCH="$ITEST_DIR/scratch"
    export ORIOLEDB_TEST_OS_USER="$PG_USER"
    step integration 2400 cargo test --release --test '*'
    if [ "${STEP_RESULTS[-1]}" != PASS ]; then
        note "server log (last 40 lines of $ITEST_LOG):"
        tail -n 40 "$ITEST_LOG" 2>/dev/null | sed 's/^/    | /' || true
    fi
}

INSTALL_RESULT="${STEP_RESULTS[-1]}"
if [ "$INSTALL_RESULT" = PASS ]; then
    run_integration
else
    record integration "SKIPPED (install failed)" 0 ""
fi

# ---------------------------------------------------------------- 6. regress
# A fixed subset of PostgreSQL 15's own regression suite on a cluster whose
# default table access method is orioledb (docs/regression.md). The first run
# downloads the Debian source package of postgresql-15 for the test files.
# A streaming standby replays the run; its pg_dump must equal the primary's.
if [ "$INSTALL_RESULT" = PASS ]; then
    step regress 1200 --no-count scripts/regress.sh --subset --standby
else
    record regress "SKIPPED (install failed)" 0 ""
fi

# ---------------------------------------------------------------- 7. isolation
# A fixed subset of PostgreSQL 15's isolation suite (row locks, EvalPlanQual,
# foreign keys, ON CONFLICT, MERGE, deadlocks; docs/isolation.md) on a cluster
# whose default table access method is orioledb, with the extension's default
# settings. Uses the source regress.sh fetched (or fetches it).
if [ "$INSTALL_RESULT" = PASS ]; then
    step isolation 600 --no-count scripts/isolation.sh --subset
else
    record isolation "SKIPPED (install failed)" 0 ""
fi

[ "$FAILED" = 0 ]
