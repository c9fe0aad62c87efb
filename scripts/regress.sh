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
#   --keep                    leave the clusters running afterwards (for debugging;
#                             connect with psql -h <out>/<am> -p <port> -U postgres regression)
#   -h, --help
#
# Each run gets a fresh cluster (port 54330 heap, 54331 orioledb, 54332 vanilla;
# Unix socket in its result directory) that preloads its own copy of the installed
# orioledb_rs.so (so a reinstall during the run changes nothing), with
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
#                              (default: main_buffers 512MB, checkpoint_timeout 1s; see below)
#   REGRESS_TESTS              test names to run with --subset instead of REGRESS_SUBSET
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
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
    prepared_xacts plancache partition_aggregate constraints conversion"
# REGRESS_TESTS="a b c" scripts/regress.sh --subset runs other tests the same way.
REGRESS_SUBSET="${REGRESS_TESTS:-$REGRESS_SUBSET}"

# Extra postgresql.conf lines for the orioledb cluster. Every orioledb table
# takes 4 chunks of engine metadata however small it is, and the metadata has
# main_buffers / 4 chunks: a 128MB pool (the default) holds at most 1024 tables,
# and the suite has more than that at its peak. A dropped table's chunks are
# freed only by the next engine checkpoint (default every 5 min), and the suite
# creates and drops thousands of tables in a minute. With the defaults the
# metadata runs out a third of the way through ("engine metadata is full") and
# every later CREATE TABLE fails, hiding everything else; so: a 512MB pool
# (4096 tables, also the limit of tree slots) and a checkpoint every second.
# REGRESS_ORIOLEDB_CONF="" runs with the defaults.
REGRESS_ORIOLEDB_CONF="${REGRESS_ORIOLEDB_CONF-orioledb.main_buffers = 512MB
orioledb.checkpoint_timeout = 1s}"

PG_SRC_VERSION="${PG_SRC_VERSION:-15.18-0+deb12u1}"
MAX_CONN="${REGRESS_MAX_CONNECTIONS:-4}"
HEAP_PORT="${REGRESS_HEAP_PORT:-54330}"
ORIOLEDB_PORT_R="${REGRESS_ORIOLEDB_PORT:-54331}"
VANILLA_PORT="${REGRESS_VANILLA_PORT:-54332}"
TIMEOUT="${REGRESS_TIMEOUT:-3600}"

SUBSET=no
TEMP_HEAP=no
AMS=""
KEEP=no
while [ $# -gt 0 ]; do
    case "$1" in
        --subset) SUBSET=yes ;;
        --am) shift; AMS="${1:-}" ;;
        --keep) KEEP=yes ;;
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

[ -x "$PG_BINDIR/postgres" ] || die "no PostgreSQL 15 server at $PG_BINDIR (run scripts/setup.sh)"
PGXS_DIR="$(dirname "$(dirname "$(dirname "$("$PG_CONFIG" --pgxs)")")")"   # <pgxs>/src/makefiles/pgxs.mk
PG_REGRESS="$PGXS_DIR/src/test/regress/pg_regress"
[ -x "$PG_REGRESS" ] || die "no pg_regress at $PG_REGRESS (package postgresql-server-dev-15)"
SO="$("$PG_CONFIG" --pkglibdir)/orioledb_rs.so"
# (a reinstall may be under way: give it a minute)
for _ in $(seq 30); do
    [ -e "$SO" ] && [ $(( $(date +%s) - $(stat -c %Y "$SO") )) -ge 5 ] && break
    sleep 2
done
[ -e "$SO" ] || die "orioledb_rs is not installed (run scripts/run.sh)"
SO_CHANGED=no

choose_run_dir
OUT="$RUN_DIR/regress"
[ "$SUBSET" = yes ] && OUT="$OUT/subset"
[ "$TEMP_HEAP" = yes ] && OUT="$OUT/temp-as-heap"
mkdir -p "$OUT"
chmod 755 "$RUN_DIR/regress" "$OUT"

# ---------------------------------------------------------------- the source
obtain_source() {
    if [ -n "${PG_SRC:-}" ]; then
        SRC="$(cd "$PG_SRC" && pwd -P)"
        [ -f "$SRC/src/test/regress/parallel_schedule" ] || die "PG_SRC=$PG_SRC has no src/test/regress"
        return
    fi
    local dl="$RUN_DIR/pgsrc"
    local upstream="${PG_SRC_VERSION%%-*}"
    SRC="$dl/postgresql-15-$upstream"
    if [ -f "$SRC/src/test/regress/parallel_schedule" ]; then
        return
    fi
    say "fetch the PostgreSQL source (Debian source package postgresql-15=$PG_SRC_VERSION)"
    command -v dpkg-source >/dev/null || run apt-get install -y -q dpkg-dev
    if ! apt-cache showsrc postgresql-15 2>/dev/null | grep -q "^Version: $PG_SRC_VERSION\$"; then
        local sources=/etc/apt/sources.list.d/debian.sources
        if [ -f "$sources" ] && grep -q '^Types: deb$' "$sources"; then
            note "enable deb-src in $sources"
            sed -i 's/^Types: deb$/Types: deb deb-src/' "$sources"
        fi
        run apt-get update -q >/dev/null
    fi
    mkdir -p "$dl"
    rm -rf "$SRC"
    (cd "$dl" && run apt-get source -q --download-only "postgresql-15=$PG_SRC_VERSION") \
        || die "could not download the source of postgresql-15=$PG_SRC_VERSION (set PG_SRC_VERSION, or PG_SRC to an unpacked tree)"
    # (the signature cannot be checked without the uploader's key: gpgv says so)
    (cd "$dl" && run dpkg-source -q -x "postgresql-15_$PG_SRC_VERSION.dsc" "$SRC" >/dev/null) \
        || die "dpkg-source -x failed"
    chmod -R a+rX "$SRC"
}

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

# ------------------------------------------------------------------ one run
# run_suite AM PORT: fresh cluster, the suite, results in $OUT/<am>
STARTED=()
cleanup() {
    if [ "$KEEP" = no ]; then
        local d
        for d in "${STARTED[@]}"; do stop_cluster "$d" >/dev/null 2>&1 || true; done
    fi
}
trap cleanup EXIT

run_suite() {
    local am="$1" port="$2"
    local dir="$OUT/$am"
    local pgdata="$dir/pgdata" log="$dir/postmaster.log"
    say "[$am] fresh cluster on port $port ($pgdata)"
    stop_cluster "$pgdata" >/dev/null 2>&1 || true
    rm -rf "$dir"
    mkdir -p "$dir"
    chown "$PG_USER": "$dir"
    chmod 755 "$dir"
    local preload=yes tam="$am"
    if [ "$am" = vanilla ]; then preload=no; tam=heap; fi
    init_cluster "$pgdata" "$port" "$dir" "$preload"
    if [ "$preload" = yes ]; then
        # Each cluster loads its own copy of the library, so that reinstalling
        # it (cargo pgrx install, scripts/test.sh) during the run cannot break
        # or change the run: the name "orioledb_rs" is looked up in
        # dynamic_library_path first (preload, background worker), and the
        # extension's functions are pointed at that name (below).
        mkdir -p "$dir/lib"
        cp "$SO" "$dir/lib/orioledb_rs.so" || die "cannot copy $SO"
        chmod -R a+rX "$dir/lib"
        echo "orioledb_rs.so md5 $(md5sum <"$dir/lib/orioledb_rs.so" | cut -c1-12) $(date -u -r "$SO" '+%Y-%m-%d %H:%M:%S UTC')" >"$dir/library.txt"
    fi
    {
        if [ "$preload" = yes ]; then
            echo "dynamic_library_path = '$dir/lib:\$libdir'"
        fi
        if [ "$TEMP_HEAP" = yes ] && [ "$preload" = yes ]; then
            # after orioledb_rs, so that this hook runs before orioledb_rs's
            echo "shared_preload_libraries = 'orioledb_rs, $LIB/temp_heap'"
        fi
        echo "default_table_access_method = '$tam'"
        # what pg_regress --temp-instance would add
        echo "max_prepared_transactions = 2"
        echo "log_line_prefix = '%m [%p] %q%a '"
        echo "log_lock_waits = on"
        if [ "$am" = orioledb ] && [ -n "$REGRESS_ORIOLEDB_CONF" ]; then
            printf '%s\n' "$REGRESS_ORIOLEDB_CONF"
        fi
    } >>"$pgdata/postgresql.conf"
    touch "$log"
    chown "$PG_USER": "$log"
    start_cluster "$pgdata" "$log"
    STARTED+=("$pgdata")

    local psql=("$PG_BINDIR/psql" -X -q -h "$dir" -p "$port" -U postgres -v ON_ERROR_STOP=1)
    local opts=()
    if [ "$am" != vanilla ]; then
        # The extension in template1 (for the databases the tests create) and
        # in "regression" — for heap too, so both runs have the same catalogs
        # (pg_am lists orioledb in both) and differ only in the access method;
        # in "regression", made here from template1 (pg_regress would use
        # template0, then CREATE EXTENSION; the result is the same), with the
        # settings pg_regress gives it; --use-existing keeps it.
        (cd / && "${psql[@]}" -d template1 \
            -c "CREATE EXTENSION orioledb_rs" \
            -c "UPDATE pg_proc SET probin = 'orioledb_rs' WHERE probin = '\$libdir/orioledb_rs'" \
            && "${psql[@]}" -d postgres \
            -c "CREATE DATABASE regression TEMPLATE template1" \
            -c "ALTER DATABASE regression SET lc_messages TO 'C'" \
            -c "ALTER DATABASE regression SET lc_monetary TO 'C'" \
            -c "ALTER DATABASE regression SET lc_numeric TO 'C'" \
            -c "ALTER DATABASE regression SET lc_time TO 'C'" \
            -c "ALTER DATABASE regression SET bytea_output TO 'hex'" \
            -c "ALTER DATABASE regression SET timezone_abbreviations TO 'Default'") \
            || die "[$am] creating the extension and the database failed"
        opts+=(--use-existing)
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
    if grep -q 'could not access file "[^"]*orioledb_rs"' "$log"; then
        SO_CHANGED=yes
        warn "[$am] the server could not load orioledb_rs during the run: these results are not reliable"
    fi
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        warn "[$am] the suite did not finish within $TIMEOUT s (REGRESS_TIMEOUT); results are partial"
    elif [ "$rc" != 0 ] && [ "$rc" != 1 ]; then
        tail -n 20 "$dir/pg_regress.log" >&2 || true
        die "[$am] pg_regress could not run the suite (exit $rc; log $dir/pg_regress.log)"
    fi
    # pg_regress deletes regression.out (and .diffs) when every test passed;
    # its stdout has the same per-test lines.
    [ -s "$dir/regression.out" ] || cp "$dir/pg_regress.log" "$dir/regression.out"
    results_of "$dir/regression.out" >"$dir/results.txt"
    [ -s "$dir/results.txt" ] || die "[$am] pg_regress ran no test (log $dir/pg_regress.log)"

    # Crashes: the postmaster logs every backend that died of a signal, with its query.
    # (Backends that exit with code 1 after a FATAL are not logged; the logical
    # replication launcher's "exited with exit code 1" at shutdown is normal.)
    grep -A3 -E 'terminated by signal|terminated by exception|server process .* exited with exit code|PANIC:' "$log" \
        | grep -E 'terminated by|exited with|PANIC:|Failed process was running' >"$dir/crashes.txt" || true
    # Other signs of trouble worth a look, whichever test caused them.
    grep -E 'orioledb: checkpoint failed|engine metadata is full|Too many open files|while in ABORT state|did not find subXID|could not access file "[^"]*orioledb_rs"' "$log" \
        | sed -E 's/^[0-9-]+ [0-9:.]+ [A-Z]+ \[[0-9]+\] //; s/[0-9]+/N/g' | sort | uniq -c | sort -rn >"$dir/alerts.txt" || true
    if [ "$KEEP" = no ]; then
        stop_cluster "$pgdata"
    fi
}

# "name status" lines of one regression.out (status: ok, FAILED, ignored)
results_of() {
    sed -n -E 's/^(test |     )([^ ]+) +\.\.\. (ok|FAILED|failed \(ignored\)).*/\2 \3/p' "$1" \
        | sed 's/failed (ignored)/ignored/'
}

# ------------------------------------------------------------------ main
obtain_source
note "source: $SRC"
build_modules

for am in $AMS; do
    run_suite "$am" "$(port_of "$am")"
done

SUMMARY="$OUT/summary.txt"
{
    echo "PostgreSQL regression suite ($SRC, $("$PG_CONFIG" --version)) on $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "repository: $(git -C "$PROJECT_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)$( [ -n "$(git -C "$PROJECT_DIR" status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (with uncommitted changes)')"
    for am in $AMS; do
        [ -f "$OUT/$am/library.txt" ] && echo "$am: $(cat "$OUT/$am/library.txt")"
    done
    if [ "$SO_CHANGED" = yes ]; then
        echo "WARNING: a server could not load orioledb_rs during the run; the results are not reliable"
    fi
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
    first="${AMS%% *}"
    printf '%-30s' "test"
    for am in $AMS; do printf ' %-9s' "$am"; done
    echo
    while read -r name _; do
        printf '%-30s' "$name"
        for am in $AMS; do
            st="$(awk -v n="$name" '$1 == n { print $2; exit }' "$OUT/$am/results.txt")"
            printf ' %-9s' "${st:-missing}"
        done
        echo
    done <"$OUT/$first/results.txt"
    echo
    for am in $AMS; do
        total=$(wc -l <"$OUT/$am/results.txt")
        ok=$(grep -c ' ok$' "$OUT/$am/results.txt" || true)
        echo "$am: $ok of $total tests pass"
        if [ -s "$OUT/$am/crashes.txt" ]; then
            echo "$am: SERVER CRASHES (from $OUT/$am/postmaster.log):"
            sed 's/^/    /' "$OUT/$am/crashes.txt"
        fi
        if [ -s "$OUT/$am/alerts.txt" ]; then
            echo "$am: server log alerts (count, message):"
            head -n 10 "$OUT/$am/alerts.txt" | sed 's/^/    /'
        fi
    done
    if [[ " $AMS " == *" heap "* && " $AMS " == *" orioledb "* ]]; then
        both=$(awk 'NR == FNR { if ($2 == "ok") h[$1] = 1; next } ($2 == "ok" && ($1 in h)) { n++ } END { print n + 0 }' \
            "$OUT/heap/results.txt" "$OUT/orioledb/results.txt")
        heap_ok=$(grep -c ' ok$' "$OUT/heap/results.txt" || true)
        pct=$(awk -v a="$both" -v b="$heap_ok" 'BEGIN { if (b) printf "%.1f", 100 * a / b; else print "0" }')
        echo
        echo "$both of $heap_ok tests that pass on heap also pass on orioledb ($pct%)"
        echo
        echo "pass on heap, fail on orioledb:"
        awk 'NR == FNR { if ($2 == "ok") h[$1] = 1; next } ($2 != "ok" && ($1 in h)) { printf "    %s\n", $1 }' \
            "$OUT/heap/results.txt" "$OUT/orioledb/results.txt"
    fi
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
    failed=0
    for am in $AMS; do
        [ "$am" = orioledb ] || continue
        if grep -qv ' ok$' "$OUT/$am/results.txt" || [ -s "$OUT/$am/crashes.txt" ] \
            || [ "$(wc -l <"$OUT/$am/results.txt")" -ne "$(echo $REGRESS_SUBSET | wc -w)" ]; then
            failed=1
        fi
    done
    if [ "$failed" = 1 ]; then
        die "--subset: tests failed (see $SUMMARY)"
    fi
    say "--subset: all $(echo $REGRESS_SUBSET | wc -w) tests pass"
fi
exit 0
