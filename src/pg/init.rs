//! `_PG_init` and the "was this library preloaded?" check.
//!
//! The page pool lives in shared memory, which can only be reserved while the
//! postmaster loads `shared_preload_libraries`. A library loaded later (by
//! `CREATE EXTENSION`, `LOAD` or the first call of one of its functions) has no
//! pool, so every SQL entry point refuses to run instead of crashing later.

use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether `_PG_init` ran during `shared_preload_libraries` processing.
///
/// Invariant: set at most once, in `_PG_init`, before any SQL entry point can
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
        ErrorReport::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "orioledb_rs must be loaded via shared_preload_libraries",
            "orioledb_rs",
        )
        .set_hint(
            "Add orioledb_rs to shared_preload_libraries in postgresql.conf and restart the server.",
        )
        .report(PgLogLevel::ERROR);
    }
}

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // SAFETY: a plain read of a server global that is only written by the
    // postmaster while it loads libraries, in this same (main) thread.
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    if !preloading {
        // Defining PGC_POSTMASTER GUCs or requesting shared memory now would
        // either fail or silently do nothing; the entry points report it instead.
        return;
    }
    PRELOADED.store(true, Ordering::Relaxed);
    // Before anything is registered: a damaged control file stops the
    // postmaster here, so `pg_ctl start` fails and the log names the file.
    crate::pg::engine::check_control_at_start();
    crate::pg::guc::register();
    crate::pg::shmem::install_hooks();
    crate::pg::options::install_hook();
    crate::am::storage::install();
    crate::pg::checkpointer::register();
    crate::pg::wal::register();
}
