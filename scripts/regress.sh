#!/usr/bin/env bash
# Run PostgreSQL 15's own regression suite (src/test/regress) on heap and on
# orioledb, and report per-test results and how many of the tests that pass on
# heap also pass on orioledb.
#
#   scripts/regress.sh            full suite (parallel_schedule), heap then orioledb;
#                                 a report: exits 0 even when tests fail, non-zero
#                                 only when the suite could not run
#   scripts/regress.sh --subset   only the tests in REGRESS_SUBSET (below), serially,
#                                 on orioledb; exits non-zero if any of them fails
#
# Options:
#   --am LIST                 which runs to do, comma-separated: heap, orioledb,
#                             vanilla (heap on a cluster that does not load
#                             orioledb_rs: shows what the library's mere presence
#                             changes), or both (= heap,orioledb; the default,
#                             orioledb for --subset)
#   --temp-as-heap            preload a small shim (temp_heap.c, built here) that
#                             makes CREATE TEMP/UNLOGGED TABLE without USING use
#                             heap (results in <run dir>/regress/temp-as-heap/);
#                             from when orioledb refused temporary and unlogged
#                             tables: no longer needed, kept for comparisons
#   --standby                 (orioledb) also run a streaming standby of the
#                             cluster (pg_basebackup -R before the tests, port
#                             +10); afterwards, once it has replayed everything,
#                             pg_dump of "regression" on both must be the same
#                             (left out: sequence positions and unlogged
#                             tables' rows, which a standby does not have as
#                             the primary has them, and pg_dump's random
#                             \restrict keys); a difference fails the run
#   --keep                    leave the clusters running afterwards (for debugging;
#                             connect with psql -h <out>/<am> -p <port> -U postgres regression)
#   -h, --help
#
# Each run gets a fresh cluster (port 54330 heap, 54331 orioledb, 54332 vanilla;
# Unix socket in its result directory) that preloads its own copy of the installed
# orioledb_rs.so (taken once at the start, the same for every run: a reinstall
# during the run changes nothing), with
# default_table_access_method set to the access method under test. For heap and
# orioledb (not vanilla), `CREATE EXTENSION orioledb_rs` is run in template1 (for the databases the tests
# create), and the database "regression" is created from it with the settings
# pg_regress gives it (pg_regress --use-existing). The run is `make installcheck`
# (pg_regress --schedule=parallel_schedule) against that server.
#
# The test files come from the Debian source package of postgresql-15, fetched
# once into <run dir>/pgsrc/ (deb-src is enabled in
# /etc/apt/sources.list.d/debian.sources if needed). regress.so, refint.so and
# autoinc.so are built from it with PGXS into <run dir>/regress/lib/. When the
# installed server is newer than the tests (15.20 vs 15.18 today), a few tests
# fail on every access method; the ratio only counts tests that pass on heap.
#
# Results: <run dir>/regress/{heap,orioledb}/ (regression.out, regression.diffs,
# results/, postmaster.log, crashes.txt) and <run dir>/regress/summary.txt;
# --subset and --temp-as-heap use <run dir>/regress/subset/, .../temp-as-heap/.
#
# Environment overrides:
#   PG_SRC                     an unpacked PostgreSQL 15 source tree to use instead
#   PG_SRC_VERSION             Debian source version to fetch (default 15.18-0+deb12u1;
#                              the source of the security updates is not served)
#   REGRESS_MAX_CONNECTIONS    pg_regress --max-connections (default 4)
#   REGRESS_HEAP_PORT          (default 54330)
#   REGRESS_VANILLA_PORT       (default 54332)
#   REGRESS_ORIOLEDB_PORT      (default 54331)
#   REGRESS_TIMEOUT            seconds allowed for one run of the suite (default 3600)
#   REGRESS_ORIOLEDB_CONF      extra postgresql.conf lines for the orioledb cluster
#                              (default: none, the extension's defaults; see below)
#   REGRESS_TESTS              test names to run with --subset instead of REGRESS_SUBSET
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=pgsuite.sh
. "$(dirname "${BASH_SOURCE[0]}")/pgsuite.sh"
require_root

# Tests run by --subset, in this order (pg_regress runs them one at a time):
# tests of the suite that pass on orioledb, exercise tables (COPY, INSERT/UPDATE/
# DELETE, SELECT forms, views, cursors, row locks, RETURNING, window functions,
# hash/GIN/GiST/SP-GiST indexes, TID access, TRUNCATE, partitions, inheritance,
# TOAST, temporary tables) and pass when run alone after test_setup (which
# creates and loads the shared tables onek, tenk1, ...). See docs/regression.md
# for why insert, update, join, aggregates, copy, constraints, triggers, ... are
# not (yet) in it.
REGRESS_SUBSET="test_setup boolean char varchar enum uuid money numeric rangetypes
    multirangetypes mvcc copydml create_misc create_view typed_table drop_if_exists
    create_index_spgist select_into select_distinct_on select_implicit select_having
    case delete random arrays hash_index gin gist lock tid tsrf portals_p2 returning
    window rangefuncs tsearch jsonb xmlmap bitmapops indirect_toast vacuum_parallel
    truncate hash_part partition_info compression_pglz create_table transactions
    update replica_identity stats_ext explain write_parallel timestamptz expressions
    insert_conflict index_including index_including_gist spgist btree_index domain
    publication matview tidscan tuplesort tidrangescan tablesample combocid
    prepared_xacts plancache partition_aggregate constraints conversion insert join_hash"
# REGRESS_TESTS="a b c" scripts/regress.sh --subset runs other tests the same way.
REGRESS_SUBSET="${REGRESS_TESTS:-$REGRESS_SUBSET}"

# The orioledb cluster runs with the extension's defaults. (Earlier builds
# needed a 512MB pool and a checkpoint every second: the suite creates and
# drops thousands of tables, and a dropped table's metadata comes back only at
# an engine checkpoint; now CREATE TABLE takes one when the metadata is full,
# and the checkpointer takes one early when it is three quarters used.)
# REGRESS_ORIOLEDB_CONF can add lines for experiments.
REGRESS_ORIOLEDB_CONF="${REGRESS_ORIOLEDB_CONF-}"

MAX_CONN="${REGRESS_MAX_CONNECTIONS:-4}"
HEAP_PORT="${REGRESS_HEAP_PORT:-54330}"
ORIOLEDB_PORT_R="${REGRESS_ORIOLEDB_PORT:-54331}"
VANILLA_PORT="${REGRESS_VANILLA_PORT:-54332}"
TIMEOUT="${REGRESS_TIMEOUT:-3600}"

SUBSET=no
TEMP_HEAP=no
AMS=""
KEEP=no
STANDBY=no
while [ $# -gt 0 ]; do
    case "$1" in
        --subset) SUBSET=yes ;;
        --am) shift; AMS="${1:-}" ;;
        --keep) KEEP=yes ;;
        --standby) STANDBY=yes ;;
        --temp-as-heap) TEMP_HEAP=yes ;;
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
    case "$am" in heap|orioledb|vanilla) ;; *) die "--am takes heap, orioledb, vanilla or both (comma-separated)" ;; esac
done
port_of() {
    case "$1" in heap) echo "$HEAP_PORT" ;; orioledb) echo "$ORIOLEDB_PORT_R" ;; vanilla) echo "$VANILLA_PORT" ;; esac
}
if [ "$SUBSET" = yes ] && [ -z "$(echo $REGRESS_SUBSET)" ]; then
    die "REGRESS_SUBSET is empty: set it at the top of $0"
fi

suite_find_pgxs
PG_REGRESS="$PGXS_DIR/src/test/regress/pg_regress"
[ -x "$PG_REGRESS" ] || die "no pg_regress at $PG_REGRESS (package postgresql-server-dev-15)"
suite_find_library

choose_run_dir
OUT="$RUN_DIR/regress"
[ "$SUBSET" = yes ] && OUT="$OUT/subset"
[ "$TEMP_HEAP" = yes ] && OUT="$OUT/temp-as-heap"
mkdir -p "$OUT"
chmod 755 "$RUN_DIR/regress" "$OUT"
suite_take_library "$OUT"

# --------------------------------------- regress.so, refint.so, autoinc.so (PGXS)
build_modules() {
    LIB="$RUN_DIR/regress/lib"
    mkdir -p "$LIB"
    cp -p "$SRC/src/test/regress/regress.c" "$SRC/contrib/spi/refint.c" "$SRC/contrib/spi/autoinc.c" "$LIB/"
    cat >"$LIB/temp_heap.c" <<'EOF'
/*
 * Written by scripts/regress.sh (--temp-as-heap): CREATE TEMP/UNLOGGED TABLE
 * (also AS, SELECT INTO, pg_temp.x) without USING gets USING heap, so that
 * default_table_access_method = orioledb does not refuse them. Test aid only.
 */
#include "postgres.h"
#include "fmgr.h"
#include "catalog/pg_class.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static ProcessUtility_hook_type prev_hook = NULL;

static bool
wants_heap(const RangeVar *rv)
{
	return rv->relpersistence == RELPERSISTENCE_TEMP ||
		rv->relpersistence == RELPERSISTENCE_UNLOGGED ||
		(rv->schemaname && strcmp(rv->schemaname, "pg_temp") == 0);
}

static void
temp_heap_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				  ProcessUtilityContext context, ParamListInfo params,
				  QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *node = pstmt->utilityStmt;
	bool		change = false;

	if (IsA(node, CreateStmt))
	{
		CreateStmt *cs = (CreateStmt *) node;

		change = cs->accessMethod == NULL && cs->partspec == NULL && wants_heap(cs->relation);
	}
	else if (IsA(node, CreateTableAsStmt))
	{
		CreateTableAsStmt *ct = (CreateTableAsStmt *) node;

		change = ct->objtype == OBJECT_TABLE && ct->into->accessMethod == NULL &&
			wants_heap(ct->into->rel);
	}
	if (change)
	{
		if (readOnlyTree)
		{
			pstmt = copyObject(pstmt);
			node = pstmt->utilityStmt;
			readOnlyTree = false;
		}
		if (IsA(node, CreateStmt))
			((CreateStmt *) node)->accessMethod = pstrdup("heap");
		else
			((CreateTableAsStmt *) node)->into->accessMethod = pstrdup("heap");
	}
	if (prev_hook)
		prev_hook(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
}

void
_PG_init(void)
{
	prev_hook = ProcessUtility_hook;
	ProcessUtility_hook = temp_heap_utility;
}
EOF
    cat >"$LIB/Makefile" <<'EOF'
# Written by scripts/regress.sh: the C modules PostgreSQL's regression tests
# load, and the --temp-as-heap shim.
MODULES = regress refint autoinc temp_heap
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
EOF
    say "build regress.so, refint.so, autoinc.so, temp_heap.so with PGXS ($LIB)"
    make -s -C "$LIB" PG_CONFIG="$PG_CONFIG" with_llvm=no >"$LIB/build.log" 2>&1 \
        || { tail -n 30 "$LIB/build.log" >&2; die "building the regression test modules failed (log: $LIB/build.log)"; }
    chmod -R a+rX "$LIB"
}

# ------------------------------------------------------------------ the standby
# start_standby DIR PORT: a streaming standby of the cluster in DIR (made by
# pg_basebackup -R while the cluster is idle), in DIR/standby on PORT+10.
start_standby() {
    local dir="$1" port="$2" sdir="$1/standby"
    local spg="$sdir/pgdata"
    mkdir -p "$sdir"
    chown "$PG_USER": "$sdir"
    chmod 755 "$sdir"
    say "[standby] pg_basebackup -R of the cluster on port $port ($spg)"
    (cd / && as_pg "$PG_BINDIR/pg_basebackup" -h "$dir" -p "$port" -U postgres -D "$spg" -R -X stream -c fast) \
        || die "[standby] pg_basebackup failed"
    {
        echo "port = $((port + 10))"
        echo "unix_socket_directories = '$sdir'"
    } >>"$spg/postgresql.conf"
    touch "$sdir/postmaster.log"
    chown "$PG_USER": "$sdir/postmaster.log"
    start_cluster "$spg" "$sdir/postmaster.log"
    STARTED+=("$spg")
}

# compare_standby DIR PORT: waits until the standby has replayed all of the
# cluster's WAL, then compares pg_dump of "regression" on both.
compare_standby() {
    local dir="$1" port="$2" sdir="$1/standby" sport=$(( $2 + 10 ))
    local lsn behind=1 i
    suite_psql "$dir" "$port"
    lsn="$(cd / && "${SUITE_PSQL[@]}" -Atc "SELECT pg_current_wal_lsn()")"
    for i in $(seq 1 600); do
        behind="$(cd / && "$PG_BINDIR/psql" -X -h "$sdir" -p "$sport" -U postgres -Atc \
            "SELECT pg_last_wal_replay_lsn() < '$lsn'::pg_lsn" 2>/dev/null || echo t)"
        [ "$behind" = f ] && break
        sleep 0.2
    done
    [ "$behind" = f ] || die "[standby] did not replay up to $lsn in two minutes (log: $sdir/postmaster.log)"
    local opts=(-U postgres -d regression --no-unlogged-table-data)
    (cd / && as_pg "$PG_BINDIR/pg_dump" -h "$dir" -p "$port" "${opts[@]}") | grep -v -e 'pg_catalog.setval' -e '^.restrict ' -e '^.unrestrict ' >"$sdir/primary.sql" \
        || die "[standby] pg_dump of the primary failed"
    (cd / && as_pg "$PG_BINDIR/pg_dump" -h "$sdir" -p "$sport" "${opts[@]}") | grep -v -e 'pg_catalog.setval' -e '^.restrict ' -e '^.unrestrict ' >"$sdir/standby.sql" \
        || die "[standby] pg_dump of the standby failed"
    if ! diff -u "$sdir/primary.sql" "$sdir/standby.sql" >"$sdir/dump.diff"; then
        head -n 40 "$sdir/dump.diff" >&2
        die "[standby] its dump differs from the primary's ($sdir/dump.diff)"
    fi
    if grep -E 'PANIC|FATAL:  orioledb' "$sdir/postmaster.log" >&2; then
        die "[standby] its log has errors ($sdir/postmaster.log)"
    fi
    say "[standby] replayed everything; its dump of \"regression\" ($(wc -l <"$sdir/primary.sql") lines) is the primary's"
}

# ------------------------------------------------------------------ one run
# run_suite AM PORT: fresh cluster, the suite, results in $OUT/<am>
run_suite() {
    local am="$1" port="$2"
    local dir="$OUT/$am"
    local pgdata="$dir/pgdata"
    local preload=yes tam="$am" extra=""
    if [ "$am" = vanilla ]; then preload=no; tam=heap; fi
    if [ "$TEMP_HEAP" = yes ] && [ "$preload" = yes ]; then
        # after orioledb_rs, so that this hook runs before orioledb_rs's
        extra="shared_preload_libraries = 'orioledb_rs, $LIB/temp_heap'"
    fi
    if [ "$am" = orioledb ] && [ -n "$REGRESS_ORIOLEDB_CONF" ]; then
        extra="${extra:+$extra
}$REGRESS_ORIOLEDB_CONF"
    fi
    suite_start_cluster "$am" "$port" "$dir" "$preload" "$tam" "$extra"

    local opts=()
    if [ "$am" != vanilla ]; then
        # The extension in template1 (for the databases the tests create) and
        # in "regression" — for heap too, so both runs have the same catalogs
        # (pg_am lists orioledb in both) and differ only in the access method.
        { suite_create_extension "$dir" "$port" && suite_create_database "$dir" "$port" regression; } \
            || die "[$am] creating the extension and the database failed"
        opts+=(--use-existing)
    fi
    if [ "$STANDBY" = yes ] && [ "$am" = orioledb ]; then
        start_standby "$dir" "$port"
    fi

    local tests=()
    if [ "$SUBSET" = yes ]; then
        # shellcheck disable=SC2206
        tests=($REGRESS_SUBSET)
    else
        opts+=(--schedule="$SRC/src/test/regress/parallel_schedule" --max-connections="$MAX_CONN")
    fi

    local what="parallel_schedule, --max-connections=$MAX_CONN"
    [ "$SUBSET" = yes ] && what="${#tests[@]} tests, serially"
    say "[$am] pg_regress ($what; $dir/regression.out)"
    local t0 rc=0
    t0=$(date +%s)
    # As `make installcheck` runs it (src/test/regress/GNUmakefile, src/Makefile.global),
    # against our own server; pg_regress exports PG_ABS_SRCDIR (= inputdir),
    # PG_ABS_BUILDDIR (= outputdir), PG_LIBDIR (= dlpath) for the tests' \getenv.
    (cd "$dir" && timeout -k 30 "$TIMEOUT" runuser -u "$PG_USER" -- "$PG_REGRESS" \
        --inputdir="$SRC/src/test/regress" \
        --outputdir="$dir" \
        --bindir="$PG_BINDIR" \
        --dlpath="$LIB" \
        --max-concurrent-tests=20 \
        --host="$dir" --port="$port" \
        "${opts[@]}" "${tests[@]}" >"$dir/pg_regress.log" 2>&1) || rc=$?
    note "[$am] pg_regress exited with $rc after $(( $(date +%s) - t0 )) s"
    suite_scan_log "$am" "$dir"
    suite_check_exit "$am" "$rc" "$TIMEOUT" REGRESS_TIMEOUT "$dir/pg_regress.log"
    suite_results "$am" "$dir" "$dir/pg_regress.log"
    if [ "$STANDBY" = yes ] && [ "$am" = orioledb ]; then
        compare_standby "$dir" "$port"
    fi

    if [ "$KEEP" = no ]; then
        stop_cluster "$pgdata"
        if [ "$STANDBY" = yes ] && [ "$am" = orioledb ]; then
            stop_cluster "$dir/standby/pgdata"
        fi
    fi
}

# ------------------------------------------------------------------ main
suite_obtain_source src/test/regress/parallel_schedule
note "source: $SRC"
build_modules

for am in $AMS; do
    run_suite "$am" "$(port_of "$am")"
done

SUMMARY="$OUT/summary.txt"
{
    suite_summary_head "PostgreSQL regression suite"
    if [ "$SUBSET" = yes ]; then
        echo "tests: REGRESS_SUBSET (serial)"
    else
        echo "tests: parallel_schedule, --max-connections=$MAX_CONN"
    fi
    case " $AMS " in *" orioledb "*)
        echo "orioledb cluster extra settings: $(echo "${REGRESS_ORIOLEDB_CONF:-(none)}" | paste -sd';' | sed 's/;/; /g')" ;;
    esac
    if [ "$TEMP_HEAP" = yes ]; then
        echo "--temp-as-heap: CREATE TEMP/UNLOGGED TABLE without USING makes heap tables"
    fi
    echo
    # one row per test, in schedule order
    suite_summary_body tests
    echo
    for am in $AMS; do
        echo "$am: diffs in $OUT/$am/regression.diffs, server log $OUT/$am/postmaster.log"
    done
} >"$SUMMARY"
cat "$SUMMARY"
note "summary written to $SUMMARY"

if [ "$KEEP" = yes ]; then
    for am in $AMS; do
        port="$(port_of "$am")"
        note "$am cluster left running: $PG_BINDIR/psql -h $OUT/$am -p $port -U postgres regression"
    done
fi

if [ "$SUBSET" = yes ]; then
    suite_subset_verdict "$REGRESS_SUBSET" tests
fi
exit 0
