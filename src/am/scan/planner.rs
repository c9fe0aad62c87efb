//! Planner and executor hooks.
//!
//! - `get_relation_info_hook` keeps parallel plans away from orioledb
//!   tables stored in primary-key order (parallel scans hand out chunks of
//!   row ids, which such a table reads through its row-id map). Non-partial
//!   plans still run inside parallel queries; only partial scans (and
//!   parallel index builds, planned through the same hook) are avoided.
//! - `ExecutorStart_hook` turns off the block prefetching of bitmap heap
//!   scans of orioledb tables. The executor prefetches the table blocks a
//!   bitmap names through md.c (`PrefetchBuffer`), which for our empty main
//!   fork is a wasted system call per block — and an ERROR ("previous
//!   segment is only 0 blocks") for blocks past the first 1 GB segment,
//!   which TIDs reach once a table has handed out 38 million row ids.

use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREV: pg_sys::get_relation_info_hook_type = None;
static mut PREV_EXECUTOR_START: pg_sys::ExecutorStart_hook_type = None;

/// Installs the hooks (from `_PG_init`, once).
pub(crate) fn install() {
    // SAFETY: called once from _PG_init, single-threaded.
    unsafe {
        PREV = pg_sys::get_relation_info_hook;
        pg_sys::get_relation_info_hook = Some(relation_info);
        PREV_EXECUTOR_START = pg_sys::ExecutorStart_hook;
        pg_sys::ExecutorStart_hook = Some(executor_start);
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
        // Parallel scans split the row-id space into chunks; a table kept
        // in primary-key order would read each chunk through its row-id
        // map (a lookup per row), so it stays serial. A toast relation
        // holds chunks, not versions: its (unused) index is built serially.
        if std::ptr::eq((*r).rd_tableam, &raw const crate::am::ROUTINE)
            && (crate::pg::is_toast(r)
                || crate::am::rows::table_of(r).desc().is_some())
        {
            (*rel).rel_parallel_workers = 0;
        }
        pg_sys::RelationClose(r);
    }
}

// The executor's entry point itself, not pgrx's wrapper of it.
extern "C-unwind" {
    #[link_name = "standard_ExecutorStart"]
    fn raw_standard_executor_start(query: *mut pg_sys::QueryDesc, eflags: std::ffi::c_int);
}

/// Not a `#[pg_guard]` function, and the executor is called directly: an
/// ERROR raised while a query starts (permissions, initial partition
/// pruning running user functions) would otherwise cross a Rust error
/// boundary, which pgrx 0.18.1 re-raises without its CONTEXT and fields.
/// PostgreSQL's longjmp passes over this frame, which holds nothing to
/// drop; our own work before and after is guarded on its own.
unsafe extern "C-unwind" fn executor_start(query: *mut pg_sys::QueryDesc, eflags: std::ffi::c_int) {
    // SAFETY: the executor passes a valid QueryDesc to the hook chain.
    unsafe {
        before_start();
        match PREV_EXECUTOR_START {
            Some(prev) => prev(query, eflags),
            None => raw_standard_executor_start(query, eflags),
        }
        after_start(query);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn before_start() {
    // The last version read is exact within one statement only: once its
    // snapshot is gone, a HOT-like chain may take its row id back.
    crate::am::layout::table::forget_last_read();
}

#[pg_guard]
unsafe extern "C-unwind" fn after_start(query: *mut pg_sys::QueryDesc) {
    // SAFETY: after ExecutorStart the query's plan state tree and the
    // subplans' trees are built and ours to adjust until the first
    // ExecProcNode.
    unsafe {
        no_prefetch((*query).planstate);
        let estate = (*query).estate;
        if !estate.is_null() {
            for sub in crate::am::scan::pkscan::ptrs::<pg_sys::PlanState>((*estate).es_subplanstates) {
                no_prefetch(sub);
            }
        }
    }
}

/// Sets `prefetch_maximum` to 0 in every bitmap heap scan of an orioledb
/// table under `ps` (the nodes `planstate_tree_walker` visits, except
/// initPlans and subPlans: their trees are in `es_subplanstates`).
///
/// # Safety
/// `ps` is NULL or a valid plan state tree.
unsafe fn no_prefetch(ps: *mut pg_sys::PlanState) {
    if ps.is_null() {
        return;
    }
    // SAFETY: every PlanState starts with its node tag; each tag's state
    // type is the struct cast to, and child pointers are NULL or valid.
    unsafe {
        pg_sys::check_stack_depth();
        let members = |plans: *mut *mut pg_sys::PlanState, n: std::ffi::c_int| {
            if !plans.is_null() {
                for i in 0..n.max(0) as usize {
                    no_prefetch(*plans.add(i));
                }
            }
        };
        match (*ps).type_ {
            pg_sys::NodeTag::T_BitmapHeapScanState => {
                let bs = ps.cast::<pg_sys::BitmapHeapScanState>();
                let rel = (*bs).ss.ss_currentRelation;
                if !rel.is_null() && std::ptr::eq((*rel).rd_tableam, &raw const crate::am::ROUTINE)
                {
                    (*bs).prefetch_maximum = 0;
                }
            }
            pg_sys::NodeTag::T_AppendState => {
                let a = ps.cast::<pg_sys::AppendState>();
                members((*a).appendplans, (*a).as_nplans);
            }
            pg_sys::NodeTag::T_MergeAppendState => {
                let m = ps.cast::<pg_sys::MergeAppendState>();
                members((*m).mergeplans, (*m).ms_nplans);
            }
            pg_sys::NodeTag::T_BitmapAndState => {
                let b = ps.cast::<pg_sys::BitmapAndState>();
                members((*b).bitmapplans, (*b).nplans);
            }
            pg_sys::NodeTag::T_BitmapOrState => {
                let b = ps.cast::<pg_sys::BitmapOrState>();
                members((*b).bitmapplans, (*b).nplans);
            }
            pg_sys::NodeTag::T_SubqueryScanState => {
                no_prefetch((*ps.cast::<pg_sys::SubqueryScanState>()).subplan);
            }
            pg_sys::NodeTag::T_CustomScanState => {
                let c = ps.cast::<pg_sys::CustomScanState>();
                for child in crate::am::scan::pkscan::ptrs::<pg_sys::PlanState>((*c).custom_ps) {
                    no_prefetch(child);
                }
            }
            _ => {}
        }
        no_prefetch((*ps).lefttree);
        no_prefetch((*ps).righttree);
    }
}
