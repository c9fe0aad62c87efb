//! The object-access hook: PostgreSQL names each object a DROP removes
//! before its catalog row goes (dependency.c), which is when the access
//! method learns that a table's tree must go at commit, or that a table's
//! primary key goes and the table returns to row-id order.

use pgrx::pg_sys;
use pgrx::prelude::*;

/// The hook found installed; written once in [`install`] (single-threaded
/// `_PG_init`).
static mut PREV_OBJECT_ACCESS: pg_sys::object_access_hook_type = None;

/// Chains [`object_access`] in front of any previous hook (from `_PG_init`).
pub(crate) fn install() {
    // SAFETY: _PG_init runs once, single-threaded, in the postmaster; the
    // hook is inherited by every backend.
    unsafe {
        PREV_OBJECT_ACCESS = pg_sys::object_access_hook;
        pg_sys::object_access_hook = Some(object_access);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn object_access(
    access: pg_sys::ObjectAccessType::Type,
    class_id: pg_sys::Oid,
    object_id: pg_sys::Oid,
    sub_id: std::ffi::c_int,
    arg: *mut std::ffi::c_void,
) {
    // SAFETY: the saved hook was valid when installed and takes these arguments.
    unsafe {
        if let Some(prev) = PREV_OBJECT_ACCESS {
            prev(access, class_id, object_id, sub_id, arg);
        }
    }
    // DROP of a whole relation (not a column).
    if access == pg_sys::ObjectAccessType::OAT_DROP
        && class_id == pg_sys::RelationRelationId
        && sub_id == 0
    {
        // DROP INDEX CONCURRENTLY names the index before its internal
        // commits, while other sessions still write and read it: its tree
        // is left to the orphan sweep, which drops it once PostgreSQL has
        // removed the index's file.
        // SAFETY: for OAT_DROP, `arg` is null or an ObjectAccessDrop.
        let concurrent = !arg.is_null()
            && unsafe { (*(arg as *const pg_sys::ObjectAccessDrop)).dropflags } as u32
                & pg_sys::PERFORM_DELETION_CONCURRENTLY
                != 0;
        // An orioledb relation is no index; only an index is a primary key.
        if concurrent || crate::am::storage::trees::relation_dropped(object_id) {
            return;
        }
        if let Some(table) = crate::am::storage::trees::primary_key_owner(object_id) {
            // DROP CONSTRAINT, or DROP COLUMN of a key column.
            crate::am::rekey::key_dropped(table);
        }
    }
}
