#!/usr/bin/env bash
# Prepare a Debian 12 machine (run as root) to build and test orioledb_rs.
# Idempotent: every step checks first and is skipped when already done.
#
#   1. Debian packages: PostgreSQL 15 server + headers, clang/libclang (bindgen), sudo,
#      locales (and the en_US.UTF-8 locale the tests use)
#   2. cargo-pgrx 0.18.1
#   3. cargo pgrx init pointing at the system PostgreSQL 15 (downloads nothing)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PGRX_VERSION=0.18.1
# What the brief asks for, plus what building cargo-pgrx (openssl-sys) and
# pgrx (a C compiler, pkg-config) need on a minimal image.
# locales: the tests key tables by text under a libc language collation
# (en_US.UTF-8, generated below). postgresql-15-wal2json: the logical
# decoding tests check the output plugin change-data-capture tools use.
PACKAGES=(postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo
          build-essential pkg-config libssl-dev ca-certificates locales
          postgresql-15-wal2json)

say "setup: checking Debian packages"
missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ "${#missing[@]}" -eq 0 ]; then
    note "all present: ${PACKAGES[*]}"
else
    note "missing: ${missing[*]}"
    require_root
    export DEBIAN_FRONTEND=noninteractive
    run apt-get update
    run apt-get install -y --no-install-recommends "${missing[@]}"
fi

say "setup: checking the en_US.UTF-8 locale"
if locale -a 2>/dev/null | grep -qix 'en_US.utf8'; then
    note "present"
else
    require_root
    run localedef -i en_US -c -f UTF-8 en_US.UTF-8
fi

# Debian's postgresql-common creates a default cluster "15/main" on port 5432
# and starts it when a service manager is present. We do not use it; leave it be.

command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust with rustup first (https://rustup.rs)"

say "setup: checking cargo-pgrx $PGRX_VERSION"
have="$(cargo pgrx --version 2>/dev/null || true)"
if printf '%s' "$have" | grep -q "$PGRX_VERSION"; then
    note "present: $have"
else
    note "found: ${have:-none}; installing (takes a few minutes)"
    run cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
    have="$(cargo pgrx --version)"
    printf '%s' "$have" | grep -q "$PGRX_VERSION" || die "cargo pgrx --version reports '$have', expected $PGRX_VERSION"
fi

say "setup: checking pgrx configuration for PostgreSQL 15"
[ -x "$PG_CONFIG" ] || die "$PG_CONFIG not found (is postgresql-server-dev-15 installed?)"
PGRX_CONF="${PGRX_HOME:-$HOME/.pgrx}/config.toml"
if [ -f "$PGRX_CONF" ] && grep -q '^pg15' "$PGRX_CONF"; then
    note "present: $(grep '^pg15' "$PGRX_CONF")  ($PGRX_CONF)"
else
    run cargo pgrx init --pg15 "$PG_CONFIG"
fi

say "setup: done ($("$PG_CONFIG" --version), $(cargo pgrx --version), $(rustc --version))"
