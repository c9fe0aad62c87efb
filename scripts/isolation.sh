#!/usr/bin/env bash
# Run PostgreSQL 15's isolation test suite (src/test/isolation: specs of
# concurrent sessions driven by isolationtester: row locks, EvalPlanQual, FKs,
# upserts, deadlocks, serializable) on heap and on orioledb, and report per-spec
# results and how many of the specs that pass on heap also pass on orioledb.
#
#   scripts/isolation.sh            full suite (isolation_schedule), heap then orioledb;
#                                   a report: exits 0 even when specs fail, non-zero
#                                   only when the suite could not run
#   scripts/isolation.sh --subset   only the specs in ISOLATION_SUBSET (below), serially,
#                                   on orioledb; exits non-zero if any of them fails
#
# Options:
#   --am LIST                 which runs to do, comma-separated: heap, orioledb or
#                             both (the default; orioledb for --subset)
#   --keep                    leave the clusters running afterwards (for debugging;
#                             connect with psql -h <out>/<am> -p <port> -U postgres isolation_regression)
#   -h, --help
#
# Each run gets a fresh cluster (port 54340 heap, 54341 orioledb; Unix socket in
# its result directory) that preloads its own copy of the installed
# orioledb_rs.so (taken once at the start, the same for every run: a reinstall
# during the run changes nothing), with default_table_access_method set to the
# access method under test, `CREATE EXTENSION orioledb_rs` in template1, and the database
# "isolation_regression" created from it with the settings pg_regress gives it
# (pg_isolation_regress --use-existing) — all as scripts/regress.sh does (the
# shared parts are in scripts/pgsuite.sh). Unlike regress.sh's, the orioledb
# cluster runs with the extension's default settings (ISOLATION_ORIOLEDB_CONF
# is empty): the suite creates far fewer tables than the regression suite, and
# no spec needs more engine metadata or checkpoints (docs/isolation.md). The
# run is `make installcheck` in src/test/isolation (pg_isolation_regress
# --schedule=isolation_schedule: every spec runs alone) against that server.
#
# pg_isolation_regress (package postgresql-server-dev-15) and isolationtester
# (package postgresql-client-15) are both installed in <pgxs>/src/test/isolation/,
# where pg_isolation_regress looks for isolationtester (next to itself, same
# version); nothing is built. The spec files come from the Debian source package
# of postgresql-15, fetched once into <run dir>/pgsrc/ as regress.sh does.
#
# Time limits: isolationtester cancels a step still running after
# ISOLATION_STEP_TIMEOUT seconds (its PGISOLATIONTIMEOUT; the default there is
# 300) and gives up at twice that; a spec is killed after ISOLATION_SPEC_TIMEOUT
# seconds (each isolationtester runs under timeout(1), through
# pg_isolation_regress --launcher); one run of the suite is killed after
# ISOLATION_TIMEOUT seconds. When isolationtester does not exit cleanly (killed,
# or its setup failed) the spec's teardown has not run, so the database is
# dropped (WITH (FORCE)) and made again before the next spec; <am>/launcher.log
# says when. Specs killed are "timeout" in the summary; specs with a canceled
# step are listed as stalled.
#
# Results: <run dir>/isolation/{heap,orioledb}/ (regression.out, regression.diffs,
# results/, postmaster.log, crashes.txt, launcher.log) and
# <run dir>/isolation/summary.txt; --subset uses <run dir>/isolation/subset/.
#
# Environment overrides:
#   PG_SRC                     an unpacked PostgreSQL 15 source tree to use instead
#   PG_SRC_VERSION             Debian source version to fetch (default 15.18-0+deb12u1)
#   ISOLATION_HEAP_PORT        (default 54340)
#   ISOLATION_ORIOLEDB_PORT    (default 54341)
#   ISOLATION_STEP_TIMEOUT     seconds before isolationtester cancels a step (default 60)
#   ISOLATION_SPEC_TIMEOUT     seconds allowed for one spec (default 300)
#   ISOLATION_TIMEOUT          seconds allowed for one run of the suite (default 3600)
#   ISOLATION_ORIOLEDB_CONF    extra postgresql.conf lines for the orioledb cluster
#                              (default: none)
#   ISOLATION_TESTS            spec names to run with --subset instead of ISOLATION_SUBSET
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=pgsuite.sh
. "$(dirname "${BASH_SOURCE[0]}")/pgsuite.sh"
require_root

# Specs run by --subset, in this order (one at a time): specs that pass on
# orioledb and exercise row locks (FOR KEY SHARE .. FOR UPDATE, NOWAIT, SKIP
# LOCKED, multixacts), UPDATE/DELETE of rows other sessions hold or changed
# (EvalPlanQual, partition key updates, savepoints), foreign keys, INSERT ...
# ON CONFLICT and MERGE, deadlock detection, and two serializable basics;
# none of them is slow. docs/isolation.md says why the others are not in it.
ISOLATION_SUBSET="tuplelock-conflict tuplelock-update tuplelock-partition tuplelock-upgrade-no-deadlock
    lock-update-delete lock-update-traversal lock-committed-update
    lock-committed-keyupdate update-locked-tuple propagate-lock-delete
    multixact-no-deadlock multixact-no-forget aborted-keyrevoke
    nowait nowait-2 nowait-3 nowait-4 nowait-5
    skip-locked skip-locked-2 skip-locked-3 skip-locked-4
    delete-abort-savept delete-abort-savept-2 freeze-the-dead
    partition-key-update-1 partition-key-update-2 partition-key-update-3 partition-key-update-4
    eval-plan-qual eval-plan-qual-trigger
    fk-contention fk-deadlock fk-deadlock2 fk-partitioned-1 fk-partitioned-2 fk-snapshot ri-trigger
    insert-conflict-do-nothing insert-conflict-do-nothing-2 insert-conflict-do-update
    insert-conflict-do-update-2 insert-conflict-do-update-3 insert-conflict-do-update-4
    insert-conflict-specconflict
    merge-insert-update merge-delete merge-update merge-match-recheck
    deadlock-simple deadlock-hard deadlock-soft deadlock-soft-2 deadlock-parallel
    read-write-unique simple-write-skew predicate-gin predicate-gist predicate-hash
    reindex-concurrently-toast stats"
# ISOLATION_TESTS="a b c" scripts/isolation.sh --subset runs other specs the same way.
ISOLATION_SUBSET="${ISOLATION_TESTS:-$ISOLATION_SUBSET}"

ISOLATION_ORIOLEDB_CONF="${ISOLATION_ORIOLEDB_CONF-}"
HEAP_PORT="${ISOLATION_HEAP_PORT:-54340}"
ORIOLEDB_PORT_I="${ISOLATION_ORIOLEDB_PORT:-54341}"
STEP_TIMEOUT="${ISOLATION_STEP_TIMEOUT:-60}"
SPEC_TIMEOUT="${ISOLATION_SPEC_TIMEOUT:-300}"
TIMEOUT="${ISOLATION_TIMEOUT:-3600}"
DBNAME=isolation_regression

SUBSET=no
AMS=""
KEEP=no
while [ $# -gt 0 ]; do
    case "$1" in
        --subset) SUBSET=yes ;;
        --am) shift; AMS="${1:-}" ;;
        --keep) KEEP=yes ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
if [ -z "$AMS" ]; then
    if [ "$SUBSET" = yes ]; then AMS="orioledb"; else AMS="both"; fi
fi
AMS="$(echo "${AMS//,/ }" | sed 's/\bboth\b/heap orioledb/')"
for am in $AMS; do
    case "$am" in heap|orioledb) ;; *) die "--am takes heap, orioledb or both (comma-separated)" ;; esac
done
port_of() {
    case "$1" in heap) echo "$HEAP_PORT" ;; orioledb) echo "$ORIOLEDB_PORT_I" ;; esac
}
if [ "$SUBSET" = yes ] && [ -z "$(echo $ISOLATION_SUBSET)" ]; then
    die "ISOLATION_SUBSET is empty: set it at the top of $0"
fi

suite_find_pgxs
PG_ISOLATION_REGRESS="$PGXS_DIR/src/test/isolation/pg_isolation_regress"
[ -x "$PG_ISOLATION_REGRESS" ] || die "no pg_isolation_regress at $PG_ISOLATION_REGRESS (package postgresql-server-dev-15)"
[ -x "$PGXS_DIR/src/test/isolation/isolationtester" ] \
    || die "no isolationtester next to $PG_ISOLATION_REGRESS (package postgresql-client-15)"
suite_find_library

choose_run_dir
OUT="$RUN_DIR/isolation"
[ "$SUBSET" = yes ] && OUT="$OUT/subset"
mkdir -p "$OUT"
chmod 755 "$RUN_DIR/isolation" "$OUT"
suite_take_library "$OUT"

# ------------------------------------------------------------------ one run
# write_launcher DIR PORT: DIR/launcher.sh, which pg_isolation_regress puts in
# front of every isolationtester command (--launcher): the time limit of one
# spec, and a fresh database after a spec that did not finish cleanly.
write_launcher() {
    local dir="$1" port="$2"
    {
        cat <<EOF
#!/bin/sh
# Written by scripts/isolation.sh. pg_isolation_regress runs
#   $dir/launcher.sh isolationtester "dbname=$DBNAME" <spec >result 2>&1
# (PGAPPNAME=isolation/<spec>).
# --foreground: stay in pg_isolation_regress's process group, which the time
# limit of the whole run kills
timeout --foreground -k 10 $SPEC_TIMEOUT "\$@"
rc=\$?
[ "\$rc" = 0 ] && exit 0
if [ "\$rc" = 124 ] || [ "\$rc" = 137 ]; then
    echo "isolation.sh: killed after $SPEC_TIMEOUT s (ISOLATION_SPEC_TIMEOUT)"
fi
# The spec's teardown did not run: start the next spec from a fresh database.
{
    echo "\$(date -u '+%H:%M:%S') \${PGAPPNAME#isolation/}: isolationtester exited with \$rc; recreating $DBNAME"
    cd /
    $PG_BINDIR/psql -X -q -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 <<'SQL'
DROP DATABASE IF EXISTS "$DBNAME" WITH (FORCE);
$(suite_create_database_sql "$DBNAME")
SQL
} >>"$dir/launcher.log" 2>&1
exit \$rc
EOF
    } >"$dir/launcher.sh"
    chmod 755 "$dir/launcher.sh"
    touch "$dir/launcher.log"
    chown "$PG_USER": "$dir/launcher.log"
}

# run_suite AM PORT: fresh cluster, the suite, results in $OUT/<am>
run_suite() {
    local am="$1" port="$2"
    local dir="$OUT/$am"
    local pgdata="$dir/pgdata"
    local extra=""
    [ "$am" = orioledb ] && extra="$ISOLATION_ORIOLEDB_CONF"
    suite_start_cluster "$am" "$port" "$dir" yes "$am" "$extra"
    # The extension in template1 and in the test database — for heap too, so
    # both runs have the same catalogs and differ only in the access method.
    { suite_create_extension "$dir" "$port" && suite_create_database "$dir" "$port" "$DBNAME"; } \
        || die "[$am] creating the extension and the database failed"
    write_launcher "$dir" "$port"

    local tests=() opts=()
    if [ "$SUBSET" = yes ]; then
        # shellcheck disable=SC2206
        tests=($ISOLATION_SUBSET)
    else
        opts+=(--schedule="$SRC/src/test/isolation/isolation_schedule")
    fi
    local what="isolation_schedule"
    [ "$SUBSET" = yes ] && what="${#tests[@]} specs"
    say "[$am] pg_isolation_regress ($what, serially; $dir/regression.out)"
    local t0 rc=0
    t0=$(date +%s)
    # As `make installcheck` in src/test/isolation runs it (src/Makefile.global:
    # pg_isolation_regress_installcheck), against our own server.
    (cd "$dir" && timeout -k 30 "$TIMEOUT" runuser -u "$PG_USER" -- \
        env PGISOLATIONTIMEOUT="$STEP_TIMEOUT" "$PG_ISOLATION_REGRESS" \
        --inputdir="$SRC/src/test/isolation" \
        --outputdir="$dir" \
        --bindir="$PG_BINDIR" \
        --launcher="$dir/launcher.sh" \
        --host="$dir" --port="$port" \
        --use-existing --dbname="$DBNAME" \
        "${opts[@]}" "${tests[@]}" >"$dir/pg_isolation_regress.log" 2>&1) || rc=$?
    note "[$am] pg_isolation_regress exited with $rc after $(( $(date +%s) - t0 )) s"
    suite_scan_log "$am" "$dir"
    suite_check_exit "$am" "$rc" "$TIMEOUT" ISOLATION_TIMEOUT "$dir/pg_isolation_regress.log"
    suite_results "$am" "$dir" "$dir/pg_isolation_regress.log"
    # A spec killed by its time limit is "timeout", not FAILED; note the specs
    # in which isolationtester had to cancel a step, and every spec's time.
    local killed
    killed="$(sed -n -E 's/^(test |     )([^ ]+) +\.\.\. .*test process exited with exit code (124|137).*/\2/p' "$dir/regression.out")"
    if [ -n "$killed" ]; then
        awk -v k="$killed" 'BEGIN { n = split(k, a, "\n"); for (i = 1; i <= n; i++) t[a[i]] = 1 }
            { if ($1 in t) $2 = "timeout"; print }' "$dir/results.txt" >"$dir/results.tmp"
        mv "$dir/results.tmp" "$dir/results.txt"
    fi
    (cd "$dir/results" 2>/dev/null && grep -l -E '^isolationtester: canceling step|timed out after' -- *.out 2>/dev/null) \
        | sed 's/\.out$//' >"$dir/stalled.txt" || true
    sed -n -E 's/^(test |     )([^ ]+) +\.\.\. .* ([0-9]+) ms$/\2 \3/p' "$dir/regression.out" >"$dir/times.txt"

    if [ "$KEEP" = no ]; then
        stop_cluster "$pgdata"
    fi
}

# ------------------------------------------------------------------ main
suite_obtain_source src/test/isolation/isolation_schedule
note "source: $SRC"

for am in $AMS; do
    run_suite "$am" "$(port_of "$am")"
done

SUMMARY="$OUT/summary.txt"
{
    suite_summary_head "PostgreSQL isolation suite"
    if [ "$SUBSET" = yes ]; then
        echo "specs: ISOLATION_SUBSET (serial)"
    else
        echo "specs: isolation_schedule (serial)"
    fi
    echo "time limits: step $STEP_TIMEOUT s (PGISOLATIONTIMEOUT), spec $SPEC_TIMEOUT s, run $TIMEOUT s"
    case " $AMS " in *" orioledb "*)
        echo "orioledb cluster extra settings: $(echo "${ISOLATION_ORIOLEDB_CONF:-(none)}" | paste -sd';' | sed 's/;/; /g')" ;;
    esac
    echo
    # one row per spec, in schedule order
    suite_summary_body specs
    echo
    for am in $AMS; do
        if grep -q ' timeout$' "$OUT/$am/results.txt"; then
            echo "$am: killed after $SPEC_TIMEOUT s: $(awk '$2 == "timeout" { print $1 }' "$OUT/$am/results.txt" | paste -sd' ')"
        fi
        if [ -s "$OUT/$am/stalled.txt" ]; then
            echo "$am: a step canceled after $STEP_TIMEOUT s: $(paste -sd' ' "$OUT/$am/stalled.txt")"
        fi
        if [ -s "$OUT/$am/launcher.log" ]; then
            echo "$am: database recreated after: $(sed -n -E 's/^[0-9:]+ ([^ :]+): isolationtester exited.*/\1/p' "$OUT/$am/launcher.log" | paste -sd' ')"
        fi
        echo "$am: slowest specs (ms): $(sort -k2,2nr "$OUT/$am/times.txt" | head -n 5 | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }')"
    done
    echo
    for am in $AMS; do
        echo "$am: diffs in $OUT/$am/regression.diffs, server log $OUT/$am/postmaster.log"
    done
} >"$SUMMARY"
cat "$SUMMARY"
note "summary written to $SUMMARY"

if [ "$KEEP" = yes ]; then
    for am in $AMS; do
        note "$am cluster left running: $PG_BINDIR/psql -h $OUT/$am -p $(port_of "$am") -U postgres $DBNAME"
    done
fi

if [ "$SUBSET" = yes ]; then
    suite_subset_verdict "$ISOLATION_SUBSET" specs
fi
exit 0
