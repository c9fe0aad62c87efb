# shellcheck shell=bash
# Shared parts of scripts/regress.sh and scripts/isolation.sh, which run one of
# PostgreSQL 15's own test suites (pg_regress, pg_isolation_regress) against a
# fresh cluster per access method and compare heap with orioledb. Sourced after
# lib.sh, not executed.
#
# The caller sets KEEP=yes to leave its clusters running and OUT (its result
# directory, <OUT>/<am>/results.txt ...) for the summary; the functions set
# PGXS_DIR, SO, SO_COPY, SO_STAMP, SO_CHANGED, SRC and STARTED. An EXIT trap
# stops the clusters started here (unless KEEP=yes).
#
# Environment overrides (both scripts):
#   PG_SRC            an unpacked PostgreSQL 15 source tree to use instead
#   PG_SRC_VERSION    Debian source version to fetch (default 15.18-0+deb12u1;
#                     the source of the security updates is not served)

PG_SRC_VERSION="${PG_SRC_VERSION:-15.18-0+deb12u1}"
SO_CHANGED=no
STARTED=()
KEEP=no

# The tools of the server-dev package: sets PGXS_DIR (<pgxs>, the parent of
# src/test/regress/pg_regress and src/test/isolation/pg_isolation_regress).
suite_find_pgxs() {
    [ -x "$PG_BINDIR/postgres" ] || die "no PostgreSQL 15 server at $PG_BINDIR (run scripts/setup.sh)"
    # shellcheck disable=SC2034  # used by the scripts that source this file
    PGXS_DIR="$(dirname "$(dirname "$(dirname "$("$PG_CONFIG" --pgxs)")")")"   # <pgxs>/src/makefiles/pgxs.mk
}

# The installed library: sets SO, waits up to a minute while a reinstall is
# under way (the file missing or younger than 5 s), dies if it is not there.
suite_find_library() {
    SO="$("$PG_CONFIG" --pkglibdir)/orioledb_rs.so"
    local _
    for _ in $(seq 30); do
        [ -e "$SO" ] && [ $(( $(date +%s) - $(stat -c %Y "$SO") )) -ge 5 ] && break
        sleep 2
    done
    [ -e "$SO" ] || die "orioledb_rs is not installed (run scripts/run.sh)"
}

# suite_take_library DIR: copies the installed library to DIR/orioledb_rs.so
# (SO_COPY) once, for every cluster of the run, so that all runs load the same
# build even when it is reinstalled meanwhile; SO_STAMP says which (checksum,
# install time). Retries for a minute while a reinstall is under way.
suite_take_library() {
    SO_COPY="$1/orioledb_rs.so"
    local _ before after
    for _ in $(seq 30); do
        before="$(stat -c '%Y %s' "$SO" 2>/dev/null || true)"
        if [ -n "$before" ] && [ $(( $(date +%s) - ${before%% *} )) -ge 5 ] \
            && cp "$SO" "$SO_COPY.tmp" 2>/dev/null \
            && after="$(stat -c '%Y %s' "$SO" 2>/dev/null)" && [ "$before" = "$after" ]; then
            mv -f "$SO_COPY.tmp" "$SO_COPY"
            chmod 644 "$SO_COPY"
            SO_STAMP="orioledb_rs.so md5 $(md5sum <"$SO_COPY" | cut -c1-12) $(date -u -d "@${before%% *}" '+%Y-%m-%d %H:%M:%S UTC')"
            return 0
        fi
        sleep 2
    done
    rm -f "$SO_COPY.tmp"
    die "cannot copy $SO (being reinstalled?)"
}

# ---------------------------------------------------------------- the source
# suite_obtain_source FILE: sets SRC to an unpacked PostgreSQL 15 source tree
# that has FILE (e.g. src/test/regress/parallel_schedule): $PG_SRC, or the
# Debian source package postgresql-15=$PG_SRC_VERSION fetched once into
# <run dir>/pgsrc/ (deb-src is enabled in /etc/apt/sources.list.d/debian.sources
# if needed).
suite_obtain_source() {
    local need="$1"
    if [ -n "${PG_SRC:-}" ]; then
        SRC="$(cd "$PG_SRC" && pwd -P)"
        [ -f "$SRC/$need" ] || die "PG_SRC=$PG_SRC has no $need"
        return
    fi
    local dl="$RUN_DIR/pgsrc"
    local upstream="${PG_SRC_VERSION%%-*}"
    SRC="$dl/postgresql-15-$upstream"
    if [ -f "$SRC/$need" ]; then
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
    [ -f "$SRC/$need" ] || die "the source of postgresql-15=$PG_SRC_VERSION has no $need"
}

# ---------------------------------------------------------------- clusters
suite_cleanup() {
    if [ "$KEEP" = no ]; then
        local d
        for d in "${STARTED[@]}"; do stop_cluster "$d" >/dev/null 2>&1 || true; done
    fi
}
trap suite_cleanup EXIT

# suite_start_cluster AM PORT DIR PRELOAD(yes|no) TABLE_AM EXTRA_CONF
# A fresh cluster in DIR/pgdata (DIR is emptied first) on PORT, its Unix socket
# in DIR, server log DIR/postmaster.log, default_table_access_method TABLE_AM,
# EXTRA_CONF (lines) appended to postgresql.conf last. With PRELOAD=yes it
# preloads its own copy (DIR/lib/orioledb_rs.so) of the library
# suite_take_library took (which one: DIR/library.txt).
suite_start_cluster() {
    local am="$1" port="$2" dir="$3" preload="$4" tam="$5" extra="$6"
    local pgdata="$dir/pgdata" log="$dir/postmaster.log"
    say "[$am] fresh cluster on port $port ($pgdata)"
    stop_cluster "$pgdata" >/dev/null 2>&1 || true
    rm -rf "$dir"
    mkdir -p "$dir"
    chown "$PG_USER": "$dir"
    chmod 755 "$dir"
    init_cluster "$pgdata" "$port" "$dir" "$preload"
    if [ "$preload" = yes ]; then
        # Each cluster loads its own copy of the library, so that reinstalling
        # it (cargo pgrx install, scripts/test.sh) during the run cannot break
        # or change the run: the name "orioledb_rs" is looked up in
        # dynamic_library_path first (preload, background worker), and the
        # extension's functions are pointed at that name (suite_create_extension).
        mkdir -p "$dir/lib"
        cp "$SO_COPY" "$dir/lib/orioledb_rs.so" || die "cannot copy $SO_COPY"
        chmod -R a+rX "$dir/lib"
        echo "$SO_STAMP" >"$dir/library.txt"
    fi
    {
        if [ "$preload" = yes ]; then
            echo "dynamic_library_path = '$dir/lib:\$libdir'"
        fi
        echo "default_table_access_method = '$tam'"
        # what pg_regress --temp-instance would add
        echo "max_prepared_transactions = 2"
        echo "log_line_prefix = '%m [%p] %q%a '"
        echo "log_lock_waits = on"
        if [ -n "$extra" ]; then
            printf '%s\n' "$extra"
        fi
    } >>"$pgdata/postgresql.conf"
    touch "$log"
    chown "$PG_USER": "$log"
    start_cluster "$pgdata" "$log"
    STARTED+=("$pgdata")
}

# suite_psql DIR PORT: sets the array SUITE_PSQL to a psql command line for the
# cluster (as postgres, no psqlrc, stop at the first error).
suite_psql() {
    SUITE_PSQL=("$PG_BINDIR/psql" -X -q -h "$1" -p "$2" -U postgres -v ON_ERROR_STOP=1)
}

# suite_create_extension DIR PORT: CREATE EXTENSION orioledb_rs in template1
# (for the databases the tests create), its functions pointed at the cluster's
# own copy of the library.
suite_create_extension() {
    suite_psql "$1" "$2"
    (cd / && "${SUITE_PSQL[@]}" -d template1 \
        -c "CREATE EXTENSION orioledb_rs" \
        -c "UPDATE pg_proc SET probin = 'orioledb_rs' WHERE probin = '\$libdir/orioledb_rs'")
}

# The SQL that makes database $1 from template1 with the settings pg_regress
# gives the databases it creates (pg_regress would use template0, then CREATE
# EXTENSION; the result is the same); run with --use-existing, which keeps it.
suite_create_database_sql() {
    cat <<EOF
CREATE DATABASE "$1" TEMPLATE template1;
ALTER DATABASE "$1" SET lc_messages TO 'C';
ALTER DATABASE "$1" SET lc_monetary TO 'C';
ALTER DATABASE "$1" SET lc_numeric TO 'C';
ALTER DATABASE "$1" SET lc_time TO 'C';
ALTER DATABASE "$1" SET bytea_output TO 'hex';
ALTER DATABASE "$1" SET timezone_abbreviations TO 'Default';
EOF
}

# suite_create_database DIR PORT DBNAME
suite_create_database() {
    suite_psql "$1" "$2"
    suite_create_database_sql "$3" | (cd / && "${SUITE_PSQL[@]}" -d postgres -f -)
}

# suite_check_exit AM RC TIMEOUT TIMEOUT_VAR LOG: what the runner's exit status
# means (0: all passed, 1: some failed, 124/137: the time limit).
suite_check_exit() {
    local am="$1" rc="$2" limit="$3" var="$4" log="$5"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        warn "[$am] the suite did not finish within $limit s ($var); results are partial"
    elif [ "$rc" != 0 ] && [ "$rc" != 1 ]; then
        tail -n 20 "$log" >&2 || true
        die "[$am] the suite could not run (exit $rc; log $log)"
    fi
}

# suite_scan_log AM DIR: after a run, from DIR/postmaster.log: DIR/crashes.txt,
# DIR/alerts.txt, and SO_CHANGED=yes if the server could not load the library.
suite_scan_log() {
    local am="$1" dir="$2"
    local log="$dir/postmaster.log"
    if grep -q 'could not access file "[^"]*orioledb_rs"' "$log"; then
        SO_CHANGED=yes
        warn "[$am] the server could not load orioledb_rs during the run: these results are not reliable"
    fi
    # Crashes: the postmaster logs every backend that died of a signal, with its query.
    # (Backends that exit with code 1 after a FATAL are not logged; the logical
    # replication launcher's "exited with exit code 1" at shutdown is normal.)
    grep -A3 -E 'terminated by signal|terminated by exception|server process .* exited with exit code|PANIC:' "$log" \
        | grep -E 'terminated by|exited with|PANIC:|Failed process was running' >"$dir/crashes.txt" || true
    # Other signs of trouble worth a look, whichever test caused them.
    grep -E 'orioledb: checkpoint failed|engine metadata is full|Too many open files|while in ABORT state|did not find subXID|could not access file "[^"]*orioledb_rs"' "$log" \
        | sed -E 's/^[0-9-]+ [0-9:.]+ [A-Z]+ \[[0-9]+\] //; s/[0-9]+/N/g' | sort | uniq -c | sort -rn >"$dir/alerts.txt" || true
}

# "name status" lines of one regression.out (status: ok, FAILED, ignored)
results_of() {
    sed -n -E 's/^(test |     )([^ ]+) +\.\.\. (ok|FAILED|failed \(ignored\)).*/\2 \3/p' "$1" \
        | sed 's/failed (ignored)/ignored/'
}

# suite_results AM DIR RUNNER_LOG: DIR/results.txt from DIR/regression.out.
suite_results() {
    local am="$1" dir="$2" runlog="$3"
    # pg_regress deletes regression.out (and .diffs) when every test passed;
    # its stdout has the same per-test lines.
    [ -s "$dir/regression.out" ] || cp "$runlog" "$dir/regression.out"
    results_of "$dir/regression.out" >"$dir/results.txt"
    [ -s "$dir/results.txt" ] || die "[$am] the suite ran no test (log $runlog)"
}

# ---------------------------------------------------------------- the summary
# suite_summary_head TITLE: the first lines of a summary (suite, source,
# server, date, repository, library of each run). Uses AMS, SRC.
suite_summary_head() {
    echo "$1 ($SRC, $("$PG_CONFIG" --version)) on $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "repository: $(git -C "$PROJECT_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)$( [ -n "$(git -C "$PROJECT_DIR" status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (with uncommitted changes)')"
    local am
    for am in $AMS; do
        [ -f "$OUT/$am/library.txt" ] && echo "$am: $(cat "$OUT/$am/library.txt")"
    done
    if [ "$SO_CHANGED" = yes ]; then
        echo "WARNING: a server could not load orioledb_rs during the run; the results are not reliable"
    fi
    return 0
}

# suite_summary_body NOUN: one row per test (in the order of the first run),
# the counts per run, crashes and log alerts, and — when heap and orioledb both
# ran — "N of M NOUN that pass on heap also pass on orioledb" and the list of
# those that pass on heap only. Reads $OUT/<am>/results.txt, crashes.txt, alerts.txt.
suite_summary_body() {
    local noun="$1" am first name st total ok width
    first="${AMS%% *}"
    width=$(awk 'BEGIN { w = 30 } length($1) + 2 > w { w = length($1) + 2 } END { print w }' "$OUT/$first/results.txt")
    printf '%-*s' "$width" "${noun%s}"
    for am in $AMS; do printf ' %-9s' "$am"; done
    echo
    while read -r name _; do
        printf '%-*s' "$width" "$name"
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
        echo "$am: $ok of $total $noun pass"
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
        local both heap_ok pct
        both=$(awk 'NR == FNR { if ($2 == "ok") h[$1] = 1; next } ($2 == "ok" && ($1 in h)) { n++ } END { print n + 0 }' \
            "$OUT/heap/results.txt" "$OUT/orioledb/results.txt")
        heap_ok=$(grep -c ' ok$' "$OUT/heap/results.txt" || true)
        pct=$(awk -v a="$both" -v b="$heap_ok" 'BEGIN { if (b) printf "%.1f", 100 * a / b; else print "0" }')
        echo
        echo "$both of $heap_ok $noun that pass on heap also pass on orioledb ($pct%)"
        echo
        echo "pass on heap, fail on orioledb:"
        awk 'NR == FNR { if ($2 == "ok") h[$1] = 1; next } ($2 != "ok" && ($1 in h)) { printf "    %s\n", $1 }' \
            "$OUT/heap/results.txt" "$OUT/orioledb/results.txt"
    fi
    return 0
}

# suite_subset_verdict LIST NOUN: for --subset: die unless every name in LIST
# passed in every run and no server crashed.
suite_subset_verdict() {
    local list="$1" noun="$2" am failed=0 n
    # shellcheck disable=SC2086  # a word count of the list
    n=$(echo $list | wc -w)
    for am in $AMS; do
        if grep -qv ' ok$' "$OUT/$am/results.txt" || [ -s "$OUT/$am/crashes.txt" ] \
            || [ "$(wc -l <"$OUT/$am/results.txt")" -ne "$n" ]; then
            failed=1
        fi
    done
    if [ "$failed" = 1 ]; then
        die "--subset: $noun failed (see $SUMMARY)"
    fi
    say "--subset: all $n $noun pass"
}
