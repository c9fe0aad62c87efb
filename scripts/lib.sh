# shellcheck shell=bash
# Shared helpers for scripts/*.sh. Sourced, not executed.
#
# Everything is derived from this file's location, so the scripts work from a
# fresh clone in any directory. Environment overrides:
#   ORIOLEDB_PORT      port of the local demo cluster (default 54315)
#   ORIOLEDB_RUN_DIR   where clusters, sockets and logs live (default <project>/.run)
#   PG_CONFIG          pg_config of the PostgreSQL 15 to use
#                      (default /usr/lib/postgresql/15/bin/pg_config)

PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
export PROJECT_DIR

PG_CONFIG="${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}"
PG_BINDIR="$(dirname "$PG_CONFIG")"
PG_USER="${ORIOLEDB_PG_USER:-postgres}"
ORIOLEDB_PORT="${ORIOLEDB_PORT:-54315}"

# Make cargo reachable when the caller's PATH lacks it (fresh root shells, CI).
if ! command -v cargo >/dev/null 2>&1 && [ -f "${CARGO_HOME:-$HOME/.cargo}/env" ]; then
    # shellcheck disable=SC1091
    . "${CARGO_HOME:-$HOME/.cargo}/env"
fi

if [ -t 1 ]; then
    _B=$'\e[1m'; _G=$'\e[32m'; _R=$'\e[31m'; _Y=$'\e[33m'; _N=$'\e[0m'
else
    _B=''; _G=''; _R=''; _Y=''; _N=''
fi

say()  { printf '%s==>%s %s\n' "$_B$_G" "$_N" "$*"; }
note() { printf '    %s\n' "$*"; }
warn() { printf '%swarning:%s %s\n' "$_B$_Y" "$_N" "$*" >&2; }
die()  { printf '%serror:%s %s\n' "$_B$_R" "$_N" "$*" >&2; exit 1; }

# Print a command, then run it.
run() { printf '    $ %s\n' "$*"; "$@"; }

# Run a command as the PostgreSQL OS user (we are root).
as_pg() { runuser -u "$PG_USER" -- "$@"; }

require_root() {
    [ "$(id -u)" = 0 ] || die "this script must run as root (it installs into the system PostgreSQL and runs the server as '$PG_USER')"
}

# Can the postgres user reach (traverse + write) directory $1?
pg_can_use_dir() {
    as_pg test -d "$1" -a -x "$1" -a -w "$1" 2>/dev/null
}

# Choose RUN_DIR: <project>/.run unless overridden, or unless the postgres
# user cannot traverse the project path (e.g. a clone under /root, mode 700)
# or the Unix socket path would be too long (limit: 107 bytes). In that case
# fall back to a per-project directory under /var/tmp and say so.
choose_run_dir() {
    local want="${ORIOLEDB_RUN_DIR:-$PROJECT_DIR/.run}"
    mkdir -p "$want"
    chmod 755 "$want"
    # longest socket path we create: <run>/pgrx-test-data/.s.PGSQL.NNNNN
    local longest="$want/pgrx-test-data/.s.PGSQL.54315"
    if [ -n "${ORIOLEDB_RUN_DIR:-}" ] || { as_pg test -x "$want" 2>/dev/null && [ "${#longest}" -le 100 ]; }; then
        RUN_DIR="$(cd "$want" && pwd -P)"
    else
        local h
        h="$(printf '%s' "$PROJECT_DIR" | cksum | cut -d' ' -f1)"
        RUN_DIR="/var/tmp/orioledb_rs-$h"
        warn "user '$PG_USER' cannot use $want (not traversable or path too long);"
        warn "using $RUN_DIR for clusters, sockets and logs instead (set ORIOLEDB_RUN_DIR to choose)"
        mkdir -p "$RUN_DIR"
        chmod 755 "$RUN_DIR"
        # leave a pointer in the project so it can be found
        ln -sfn "$RUN_DIR" "$want/elsewhere" 2>/dev/null || true
    fi
    # The postgres user creates Unix sockets here.
    chown "$PG_USER": "$RUN_DIR"
    export RUN_DIR
}

# Make directory $1 (and parents) owned by the postgres user, mode 700.
make_pg_dir() {
    mkdir -p "$1"
    chown "$PG_USER": "$1"
    chmod 700 "$1"
}

# init_cluster PGDATA PORT SOCKDIR PRELOAD(yes|no)
# Creates a cluster owned by postgres listening only on a Unix socket in SOCKDIR.
init_cluster() {
    local pgdata="$1" port="$2" sockdir="$3" preload="$4"
    make_pg_dir "$pgdata"
    # initdb needs a cwd the postgres user can read.
    (cd / && as_pg "$PG_BINDIR/initdb" -D "$pgdata" -U postgres -A trust -E UTF8 --locale=C >/dev/null) \
        || die "initdb failed for $pgdata"
    {
        echo ""
        echo "# ---- added by orioledb_rs scripts ----"
        echo "port = $port"
        echo "listen_addresses = ''"
        echo "unix_socket_directories = '$sockdir'"
        if [ "$preload" = yes ]; then
            echo "shared_preload_libraries = 'orioledb_rs'"
        fi
    } >>"$pgdata/postgresql.conf"
}

pg_is_running() {
    [ -f "$1/postmaster.pid" ] && (cd / && as_pg "$PG_BINDIR/pg_ctl" -D "$1" status >/dev/null 2>&1)
}

# start_cluster PGDATA LOGFILE
start_cluster() {
    (cd / && run env -u RUST_BACKTRACE runuser -u "$PG_USER" -- "$PG_BINDIR/pg_ctl" -D "$1" -l "$2" -w -t 60 start >/dev/null) \
        || { tail -n 30 "$2" >&2 || true; die "PostgreSQL failed to start (log: $2)"; }
}

# restart_cluster PGDATA LOGFILE
restart_cluster() {
    (cd / && run env -u RUST_BACKTRACE runuser -u "$PG_USER" -- "$PG_BINDIR/pg_ctl" -D "$1" -l "$2" -w -t 60 -m fast restart >/dev/null) \
        || { tail -n 30 "$2" >&2 || true; die "PostgreSQL failed to restart (log: $2)"; }
}

# stop_cluster PGDATA  (no-op if not running)
stop_cluster() {
    if pg_is_running "$1"; then
        (cd / && run runuser -u "$PG_USER" -- "$PG_BINDIR/pg_ctl" -D "$1" -w -t 60 -m fast stop >/dev/null) || {
            warn "fast stop failed for $1; trying immediate"
            (cd / && as_pg "$PG_BINDIR/pg_ctl" -D "$1" -w -m immediate stop >/dev/null) || true
        }
    fi
}

# `cargo pgrx install` copies the library over the installed file in place
# (same inode): every running server that has it mapped then executes the new
# bytes and crashes (SIGSEGV). Removing the file first makes the copy a new
# file; running servers keep the old one until they restart.
unlink_installed_library() {
    local so
    so="$("$PG_CONFIG" --pkglibdir)/orioledb_rs.so"
    if [ -e "$so" ]; then
        # keep a copy to put back if the build fails
        mv -f "$so" "$so.prev"
    fi
}

# Undo unlink_installed_library when no new library was installed.
restore_installed_library() {
    local so
    so="$("$PG_CONFIG" --pkglibdir)/orioledb_rs.so"
    if [ ! -e "$so" ] && [ -e "$so.prev" ]; then
        mv -f "$so.prev" "$so"
    fi
    rm -f "$so.prev"
}

cargo_pgrx_install_release() {
    unlink_installed_library
    local rc=0
    (cd "$PROJECT_DIR" && run cargo pgrx install --release --pg-config "$PG_CONFIG") || rc=$?
    restore_installed_library
    return "$rc"
}
