//! PostgreSQL plumbing: shared memory, latches, GUCs, the engine handle,
//! the WAL sink and replay driver. Above the engine, below the access
//! method (`am`): nothing here imports from `am` or `hooks`.
//!
//! Everything that talks to `pg_sys` about server-wide state lives here; the
//! engine (`orioledb_engine`) only ever sees the traits this layer implements.
pub mod backup;
pub mod decode;
pub mod engine;
pub mod error;
pub mod guc;
pub mod injection;
pub mod lock;
pub mod preload;
pub mod raw;
pub mod shmem;
pub mod vacuum_cost;
pub mod wal;
pub mod xact;

pub use preload::{is_preloaded, require_preloaded};

use pgrx::pg_sys;

/// Defines `$finfo`, fmgr's version-1 calling-convention record that a C
/// function written by hand (not through `#[pg_extern]`) needs beside it:
/// `pg_finfo_<symbol>`.
macro_rules! fmgr_v1 {
    ($finfo:ident) => {
        /// fmgr's version-1 calling convention record.
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static pgrx::pg_sys::Pg_finfo_record {
            const V1_API: pgrx::pg_sys::Pg_finfo_record = pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &V1_API
        }
    };
}
pub(crate) use fmgr_v1;

/// The toast relation of relation `rel`, if it has one (a syscache read).
pub fn toast_relation_of(rel: pg_sys::Oid) -> Option<pg_sys::Oid> {
    // SAFETY: a syscache lookup; the fixed-size field is read while held.
    unsafe {
        with_syscache(pg_sys::SysCacheIdentifier::RELOID, rel.into(), |tup| {
            (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tup)).reltoastrelid
        })
    }
    .filter(|t| *t != pg_sys::InvalidOid)
}

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

/// The relation's name, read leniently (never fails).
///
/// # Safety
/// `rel` must be a valid, open relation.
pub unsafe fn rel_name(rel: pg_sys::Relation) -> String {
    // SAFETY: an open relation has its pg_class row; relname is NUL-terminated.
    unsafe { std::ffi::CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Whether `rel` is a toast relation: its tree holds chunks, not row
/// versions, and exists only once a value was stored
/// (`storage::create_toast_tree`).
///
/// # Safety
/// `rel` must be a valid, open relation.
pub unsafe fn is_toast(rel: pg_sys::Relation) -> bool {
    // SAFETY: an open relation has its pg_class row.
    unsafe { (*(*rel).rd_rel).relkind as u8 == pg_sys::RELKIND_TOASTVALUE }
}

/// The OID of the `orioledb` access method in this database (InvalidOid if
/// the extension is not installed). Not cached: the extension may be dropped
/// and created again, and the lookup is one syscache probe.
fn am_oid() -> pg_sys::Oid {
    // SAFETY: catalog lookup by a static NUL-terminated name.
    unsafe { pg_sys::get_table_am_oid(c"orioledb".as_ptr(), true) }
}

/// The OID of the `orioledb_btree` index access method in this database
/// (InvalidOid if the extension is not installed); not cached, as
/// [`am_oid`].
pub fn index_am_oid() -> pg_sys::Oid {
    // SAFETY: catalog lookup by a static NUL-terminated name.
    unsafe { pg_sys::get_index_am_oid(c"orioledb_btree".as_ptr(), true) }
}

/// (database, relfilenode) of `reloid` if it is a relation of our table AM.
pub fn orioledb_relfile(reloid: pg_sys::Oid) -> Option<(pg_sys::Oid, pg_sys::Oid)> {
    relfile_of(reloid, am_oid(), pg_sys::InvalidOid)
}

/// (database, relfilenode) of `reloid` if it has an engine tree: an
/// orioledb table (or its toast relation) or an `orioledb_btree` index.
pub fn engine_relfile(reloid: pg_sys::Oid) -> Option<(pg_sys::Oid, pg_sys::Oid)> {
    relfile_of(reloid, am_oid(), index_am_oid())
}

/// (database, relfilenode) of `reloid` if its access method is `am` or
/// `other` (either InvalidOid: none).
fn relfile_of(reloid: pg_sys::Oid, am: pg_sys::Oid, other: pg_sys::Oid) -> Option<(pg_sys::Oid, pg_sys::Oid)> {
    if am == pg_sys::InvalidOid && other == pg_sys::InvalidOid {
        return None;
    }
    // SAFETY: syscache lookup; the tuple is released before returning and
    // its fixed-size pg_class fields are read while it is held.
    unsafe {
        crate::pg::with_syscache(pg_sys::SysCacheIdentifier::RELOID, reloid.into(), |tup| {
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tup);
            let ours = (*form).relam != pg_sys::InvalidOid && ((*form).relam == am || (*form).relam == other);
            (ours && (*form).relfilenode != pg_sys::InvalidOid)
                .then(|| (pg_sys::MyDatabaseId, (*form).relfilenode))
        })
        .flatten()
    }
}
