//! `orioledb_tableam_handler(internal) RETURNS table_am_handler`.
//!
//! Written by hand instead of with `#[pg_extern]`: the return type
//! `table_am_handler` is a pseudo-type pgrx cannot map, and the function must
//! return a pointer to a routine that outlives every relcache entry.

use pgrx::pg_sys;
use pgrx::prelude::*;

pgrx::extension_sql_file!("../../sql/orioledb_tableam.sql", name = "orioledb_tableam");

crate::pg::fmgr_v1!(pg_finfo_orioledb_tableam_handler);

/// Returns the static `TableAmRoutine` of the `orioledb` access method.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn orioledb_tableam_handler(
    _fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    crate::pg::require_preloaded();
    // PostgreSQL only reads the routine and keeps the pointer in relcache
    // entries; a `static` never moves and is never freed.
    pg_sys::Datum::from(&raw const super::ROUTINE)
}
