#!/usr/bin/env bash
# Fails when a module imports from a layer above its own (docs/architecture.md,
# "Layers"). From the bottom:
#   src/engine/  the storage engine: no PostgreSQL (pgrx), nothing of the crate
#   src/pg/      PostgreSQL plumbing: may use the engine
#   src/am/      the table access method: may use pg and the engine; inside
#                it, rooms from the bottom: layout, storage, toast, rows,
#                rekey, scan, modify, maintenance, secondary (then routine.rs
#                on top)
#   src/hooks/   _PG_init, the utility hook, the checkpointer worker, and
#   src/lib.rs   the SQL-callable functions: may use everything
# Comments are ignored (they may name any module); every other mention of a
# higher layer's path counts, `use` or not.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

status=0
# check DIR PATTERN WHAT: report lines of DIR's Rust files matching PATTERN
# outside comments.
check() {
    local dir="$1" pattern="$2" what="$3" hits
    hits=$(find "$dir" -name '*.rs' -print0 | sort -z |
        xargs -0 perl -ne 'my $l = $_; $l =~ s{//.*}{}; print "$ARGV:$.: $_" if $l =~ /'"$pattern"'/; close ARGV if eof')
    if [ -n "$hits" ]; then
        echo "layers: $dir must not use $what:" >&2
        echo "$hits" >&2
        status=1
    fi
}

check src/engine 'pgrx|pg_sys|crate::(pg|am|hooks)\b' "pgrx or the extension's modules"
check src/pg 'crate::(am|hooks)\b|use crate::\{[^}]*\b(am|hooks)\b|super::super::' "the access method or hooks"
check src/am 'crate::hooks\b|use crate::\{[^}]*\bhooks\b' "hooks"

# The access method's rooms, from the bottom (docs/architecture.md, "The
# access method's rooms"); routine.rs, handler.rs and mod.rs sit on top.
ROOMS=(layout storage toast rows rekey scan modify maintenance secondary)
for i in "${!ROOMS[@]}"; do
    room=${ROOMS[$i]}
    above=$(IFS='|'; echo "${ROOMS[*]:$((i + 1))}")
    path=src/am/$room
    [ -d "$path" ] || path=$path.rs
    [ -n "$above" ] && check "$path" "am::($above|routine|handler)\\b|am::\\{" "the access method's rooms above it ($above)"
done

if [ "$status" = 0 ]; then
    echo "layers: no module imports from a layer above it"
fi
exit "$status"
