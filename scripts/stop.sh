#!/usr/bin/env bash
# Stop the local cluster started by scripts/run.sh (keeps its data).
# To throw the cluster away as well:  scripts/stop.sh --clean
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root
choose_run_dir
PGDATA_DIR="$RUN_DIR/pgdata"

if [ ! -f "$PGDATA_DIR/PG_VERSION" ]; then
    say "no cluster at $PGDATA_DIR; nothing to stop"
elif pg_is_running "$PGDATA_DIR"; then
    say "stop PostgreSQL ($PGDATA_DIR)"
    stop_cluster "$PGDATA_DIR"
else
    say "PostgreSQL ($PGDATA_DIR) is not running"
fi

if [ "${1:-}" = "--clean" ]; then
    say "remove $PGDATA_DIR"
    rm -rf "$PGDATA_DIR" "$RUN_DIR/postgres.log"
fi
