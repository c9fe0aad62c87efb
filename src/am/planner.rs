//! Planner hook: keeps parallel plans away from orioledb tables, whose
//! scans cannot be shared between processes yet. Non-partial plans still
//! run inside parallel queries; only partial scans (and parallel index
//! builds, planned through the same hook) are avoided.

use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREV: pg_sys::get_relation_info_hook_type = None;

/// Installs the hook (from `_PG_init`, once).
pub(crate) fn install() {
    // SAFETY: called once from _PG_init, single-threaded.
    unsafe {
        PREV = pg_sys::get_relation_info_hook;
        pg_sys::get_relation_info_hook = Some(relation_info);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_info(
    root: *mut pg_sys::PlannerInfo,
    relid: pg_sys::Oid,
    inhparent: bool,
    rel: *mut pg_sys::RelOptInfo,
) {
    // SAFETY: the planner passes a valid RelOptInfo of a locked relation;
    // the relcache entry is opened and closed here without a new lock.
    unsafe {
        if let Some(prev) = PREV {
            prev(root, relid, inhparent, rel);
        }
        let r = pg_sys::RelationIdGetRelation(relid);
        if r.is_null() {
            return;
        }
        if std::ptr::eq((*r).rd_tableam, &raw const crate::am::ROUTINE) {
            (*rel).rel_parallel_workers = 0;
        }
        pg_sys::RelationClose(r);
    }
}
