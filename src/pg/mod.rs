//! PostgreSQL plumbing: shared memory, latches, GUCs, the engine handle,
//! the WAL sink and replay driver. Above the engine, below the access
//! method (`am`): nothing here imports from `am` or `hooks`.
//!
//! Everything that talks to `pg_sys` about server-wide state lives here; the
//! engine (`orioledb_engine`) only ever sees the traits this layer implements.
pub mod backup;
pub mod decode;
pub mod engine;
pub mod guc;
pub mod injection;
pub mod lock;
pub mod preload;
pub mod shmem;
pub mod wal;

pub use preload::{is_preloaded, require_preloaded};

use pgrx::pg_sys;

/// The message of an ERROR (or panic) caught by `PgTryBuilder`.
pub fn caught(e: &pg_sys::panic::CaughtError) -> String {
    use pg_sys::panic::CaughtError::*;
    match e {
        PostgresError(r) | ErrorReport(r) | RustPanic { ereport: r, .. } => r.message().to_string(),
    }
}

/// Runs `f` on the syscache tuple of `key` in `cache` while it is pinned,
/// releasing it afterwards; None when there is no such tuple.
///
/// # Safety
/// Inside a transaction; `f` copies out whatever it keeps (the tuple is
/// released when it returns).
pub unsafe fn with_syscache<T>(
    cache: pg_sys::SysCacheIdentifier::Type,
    key: pg_sys::Datum,
    f: impl FnOnce(pg_sys::HeapTuple) -> T,
) -> Option<T> {
    // SAFETY: per the contract; the tuple is released exactly once.
    unsafe {
        let tup = pg_sys::SearchSysCache1(cache as i32, key);
        if tup.is_null() {
            return None;
        }
        let r = f(tup);
        pg_sys::ReleaseSysCache(tup);
        Some(r)
    }
}
