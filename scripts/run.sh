#!/usr/bin/env bash
# Build and install orioledb_rs into the system PostgreSQL 15, start a local
# cluster that preloads it, create the extension and run sql/demo.sql.
#
# Re-running reuses the cluster (and restarts it so the fresh build is loaded).
# Port: $ORIOLEDB_PORT (default 54315). Stop with scripts/stop.sh.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root

bash "$PROJECT_DIR/scripts/setup.sh"

say "build + install the extension (release)"
cargo_pgrx_install_release

choose_run_dir
PGDATA_DIR="$RUN_DIR/pgdata"
LOG="$RUN_DIR/postgres.log"
SOCK="$RUN_DIR"

if [ -f "$PGDATA_DIR/PG_VERSION" ]; then
    say "reuse cluster $PGDATA_DIR"
else
    say "create cluster $PGDATA_DIR (port $ORIOLEDB_PORT, socket dir $SOCK)"
    init_cluster "$PGDATA_DIR" "$ORIOLEDB_PORT" "$SOCK" yes
fi
touch "$LOG"
chown "$PG_USER": "$LOG"

# The port is fixed at creation; honour a changed ORIOLEDB_PORT on reuse.
CONF_PORT="$(sed -n "s/^port = \([0-9]*\).*/\1/p" "$PGDATA_DIR/postgresql.conf" | tail -n1)"
if [ "$CONF_PORT" != "$ORIOLEDB_PORT" ]; then
    note "switching port $CONF_PORT -> $ORIOLEDB_PORT"
    echo "port = $ORIOLEDB_PORT" >>"$PGDATA_DIR/postgresql.conf"
fi

if pg_is_running "$PGDATA_DIR"; then
    say "restart PostgreSQL so the freshly installed library is loaded"
    restart_cluster "$PGDATA_DIR" "$LOG"
else
    say "start PostgreSQL"
    start_cluster "$PGDATA_DIR" "$LOG"
fi

PSQL=("$PG_BINDIR/psql" -X -h "$SOCK" -p "$ORIOLEDB_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1)

# There are no upgrade scripts while the version stays 0.1.0: when the
# installed extension SQL changed since this cluster created the extension
# (its checksum is kept as the extension's comment), recreate the extension.
# That only works while no table uses the access method; otherwise say so.
EXT_SQL="$("$PG_CONFIG" --sharedir)/extension/orioledb_rs--$(sed -n 's/^version = "\(.*\)"/\1/p' "$PROJECT_DIR/Cargo.toml" | head -n1).sql"
SQL_SUM="sql $(md5sum "$EXT_SQL" | cut -c1-32)"
HAVE="$("${PSQL[@]}" -Atq -c "SELECT coalesce(obj_description(oid, 'pg_extension'), 'none') FROM pg_extension WHERE extname = 'orioledb_rs'")"
STALE=no
if [ -n "$HAVE" ] && [ "$HAVE" != "$SQL_SUM" ]; then
    say "the extension's SQL changed: recreate the extension"
    if ! "${PSQL[@]}" -q -c "DROP EXTENSION orioledb_rs" 2>/dev/null; then
        STALE=yes
        warn "orioledb tables exist, so the extension cannot be recreated; new SQL objects are missing (drop those tables, or scripts/stop.sh --clean to start over)"
    fi
fi
say "CREATE EXTENSION IF NOT EXISTS orioledb_rs"
"${PSQL[@]}" -q -c "CREATE EXTENSION IF NOT EXISTS orioledb_rs"
if [ "$STALE" = no ]; then
    "${PSQL[@]}" -q -c "COMMENT ON EXTENSION orioledb_rs IS '$SQL_SUM'"
fi

say "run sql/demo.sql"
"${PSQL[@]}" -e -f "$PROJECT_DIR/sql/demo.sql"

cat <<EOF

${_B}orioledb_rs is running${_N} (PostgreSQL 15, port $ORIOLEDB_PORT, log $LOG)

  connect:  psql -h $SOCK -p $ORIOLEDB_PORT -U postgres
            (or: $PG_BINDIR/psql -h $SOCK -p $ORIOLEDB_PORT -U postgres)
  stop:     scripts/stop.sh
            (or: runuser -u $PG_USER -- $PG_BINDIR/pg_ctl -D $PGDATA_DIR stop)
EOF
