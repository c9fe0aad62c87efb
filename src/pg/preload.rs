//! The "was this library preloaded?" check (`hooks::init` sets it).
//!
//! The page pool lives in shared memory, which can only be reserved while the
//! postmaster loads `shared_preload_libraries`. A library loaded later (by
//! `CREATE EXTENSION`, `LOAD` or the first call of one of its functions) has no
//! pool, so every SQL entry point refuses to run instead of crashing later.

use pgrx::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether `_PG_init` ran during `shared_preload_libraries` processing.
///
/// Invariant: set at most once, by `_PG_init` ([`mark_preloaded`]), before any SQL entry point can
/// run in this process (backends inherit it from the postmaster by fork).
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Whether the library was loaded through `shared_preload_libraries`.
pub fn is_preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// Raises `ERROR` (SQLSTATE 55000) unless the library was preloaded.
///
/// Every SQL-callable function of the extension calls this first: without the
/// shared page pool nothing else can work.
pub fn require_preloaded() {
    if !is_preloaded() {
        crate::pg::error::error(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "orioledb_rs must be loaded via shared_preload_libraries",
        )
        .hint("Add orioledb_rs to shared_preload_libraries in postgresql.conf and restart the server.")
        .raise();
    }
}

/// Records that `_PG_init` runs during `shared_preload_libraries`
/// processing (only `hooks::init` calls it).
pub fn mark_preloaded() {
    PRELOADED.store(true, Ordering::Relaxed);
}
