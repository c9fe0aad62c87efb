//! The `TableAmRoutine` of the `orioledb` access method.
//!
//! Every callback is filled: PostgreSQL calls them without NULL checks, so a
//! missing one is a backend crash. Until the engine is wired in:
//!
//! * DDL works: `CREATE TABLE ... USING orioledb`, `DROP TABLE`, `TRUNCATE`
//!   (which only assigns a new relfilenode), `ANALYZE` and `VACUUM` (tables
//!   are necessarily empty, so there is nothing to sample or clean).
//! * Anything that reads or writes rows raises
//!   `orioledb: <operation> is not supported yet` with SQLSTATE 0A000.
//!
//! No storage is created under `base/`: engine files will live in
//! `orioledb_data/`, and PostgreSQL tolerates a missing main fork when it
//! drops a relation (it ignores ENOENT when unlinking). Sizes reported to
//! PostgreSQL come from `relation_size`, not from `base/`.

// Callback signatures are fixed by PostgreSQL's tableam.h.
#![allow(clippy::too_many_arguments)]

use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use std::ffi::{c_int, CStr};

/// The callback table returned by `orioledb_tableam_handler`.
///
/// Invariant: every callback is `Some` (checked by a test), and the value is
/// never modified, so handing out `*const` pointers to it is sound.
pub static ROUTINE: pg_sys::TableAmRoutine = pg_sys::TableAmRoutine {
    type_: pg_sys::NodeTag::T_TableAmRoutine,
    slot_callbacks: Some(slot_callbacks),
    scan_begin: Some(scan_begin),
    scan_end: Some(scan_end),
    scan_rescan: Some(scan_rescan),
    scan_getnextslot: Some(scan_getnextslot),
    scan_set_tidrange: Some(scan_set_tidrange),
    scan_getnextslot_tidrange: Some(scan_getnextslot_tidrange),
    parallelscan_estimate: Some(parallelscan_estimate),
    parallelscan_initialize: Some(parallelscan_initialize),
    parallelscan_reinitialize: Some(parallelscan_reinitialize),
    index_fetch_begin: Some(index_fetch_begin),
    index_fetch_reset: Some(index_fetch_reset),
    index_fetch_end: Some(index_fetch_end),
    index_fetch_tuple: Some(index_fetch_tuple),
    tuple_fetch_row_version: Some(tuple_fetch_row_version),
    tuple_tid_valid: Some(tuple_tid_valid),
    tuple_get_latest_tid: Some(tuple_get_latest_tid),
    tuple_satisfies_snapshot: Some(tuple_satisfies_snapshot),
    index_delete_tuples: Some(index_delete_tuples),
    tuple_insert: Some(tuple_insert),
    tuple_insert_speculative: Some(tuple_insert_speculative),
    tuple_complete_speculative: Some(tuple_complete_speculative),
    multi_insert: Some(multi_insert),
    tuple_delete: Some(tuple_delete),
    tuple_update: Some(tuple_update),
    tuple_lock: Some(tuple_lock),
    finish_bulk_insert: Some(finish_bulk_insert),
    relation_set_new_filenode: Some(relation_set_new_filenode),
    relation_nontransactional_truncate: Some(relation_nontransactional_truncate),
    relation_copy_data: Some(relation_copy_data),
    relation_copy_for_cluster: Some(relation_copy_for_cluster),
    relation_vacuum: Some(relation_vacuum),
    scan_analyze_next_block: Some(scan_analyze_next_block),
    scan_analyze_next_tuple: Some(scan_analyze_next_tuple),
    index_build_range_scan: Some(index_build_range_scan),
    index_validate_scan: Some(index_validate_scan),
    relation_size: Some(relation_size),
    relation_needs_toast_table: Some(relation_needs_toast_table),
    relation_toast_am: Some(relation_toast_am),
    relation_fetch_toast_slice: Some(relation_fetch_toast_slice),
    relation_estimate_size: Some(relation_estimate_size),
    scan_bitmap_next_block: Some(scan_bitmap_next_block),
    scan_bitmap_next_tuple: Some(scan_bitmap_next_tuple),
    scan_sample_next_block: Some(scan_sample_next_block),
    scan_sample_next_tuple: Some(scan_sample_next_tuple),
};

/// Raises `orioledb: <what> is not supported yet` (SQLSTATE 0A000).
fn unsupported(what: String) -> ! {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!("orioledb: {what} is not supported yet"),
        "orioledb_rs",
    )
    .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Raises [`unsupported`] with `{}` in `what` replaced by `table "name"`.
///
/// The name is read leniently: relation names may be in a non-UTF-8 server
/// encoding, and an error message must never itself fail.
///
/// # Safety
/// `rel` must be a valid, open relation.
unsafe fn unsupported_on(rel: pg_sys::Relation, what: &str) -> ! {
    // SAFETY: an open relation always has its pg_class row in rd_rel, and
    // relname is NUL-terminated within its NAMEDATALEN bytes.
    let name = unsafe { CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr()) };
    unsupported(what.replace("{}", &format!("table \"{}\"", name.to_string_lossy())))
}

// ---------------------------------------------------------------------------
// Slots

#[pg_guard]
unsafe extern "C-unwind" fn slot_callbacks(
    _rel: pg_sys::Relation,
) -> *const pg_sys::TupleTableSlotOps {
    // Virtual slots until rows carry system columns (xmin, ...) of their own.
    &raw const pg_sys::TTSOpsVirtual
}

// ---------------------------------------------------------------------------
// Sequential scans. ANALYZE is the only scan that can start: the table is
// necessarily empty and `relation_size` says 0 blocks, so it reads nothing.

#[pg_guard]
unsafe extern "C-unwind" fn scan_begin(
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    nkeys: c_int,
    key: *mut pg_sys::ScanKeyData,
    pscan: pg_sys::ParallelTableScanDesc,
    flags: u32,
) -> pg_sys::TableScanDesc {
    if flags & pg_sys::ScanOptions::SO_TYPE_ANALYZE == 0 {
        // SAFETY: PostgreSQL passes an open relation.
        unsafe { unsupported_on(rel, "scanning {}") }
    }
    // SAFETY: palloc0 returns zeroed memory of the requested size in the
    // current memory context or ERRORs; all fields are plain data.
    unsafe {
        let scan = pg_sys::palloc0(size_of::<pg_sys::TableScanDescData>()) as pg_sys::TableScanDesc;
        (*scan).rs_rd = rel;
        (*scan).rs_snapshot = snapshot;
        (*scan).rs_nkeys = nkeys;
        (*scan).rs_key = key;
        (*scan).rs_flags = flags;
        (*scan).rs_parallel = pscan;
        scan
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_end(scan: pg_sys::TableScanDesc) {
    // SAFETY: only scan_begin creates scans, with palloc0.
    unsafe { pg_sys::pfree(scan.cast()) }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_rescan(
    scan: pg_sys::TableScanDesc,
    _key: *mut pg_sys::ScanKeyData,
    _set_params: bool,
    _allow_strat: bool,
    _allow_sync: bool,
    _allow_pagemode: bool,
) {
    // SAFETY: PostgreSQL passes the scan it began, over an open relation.
    unsafe { unsupported_on((*scan).rs_rd, "rescanning {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_getnextslot(
    scan: pg_sys::TableScanDesc,
    _direction: pg_sys::ScanDirection::Type,
    _slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: PostgreSQL passes the scan it began, over an open relation.
    unsafe { unsupported_on((*scan).rs_rd, "scanning {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_set_tidrange(
    scan: pg_sys::TableScanDesc,
    _mintid: pg_sys::ItemPointer,
    _maxtid: pg_sys::ItemPointer,
) {
    // SAFETY: PostgreSQL passes the scan it began, over an open relation.
    unsafe { unsupported_on((*scan).rs_rd, "TID range scans of {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_getnextslot_tidrange(
    scan: pg_sys::TableScanDesc,
    _direction: pg_sys::ScanDirection::Type,
    _slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: PostgreSQL passes the scan it began, over an open relation.
    unsafe { unsupported_on((*scan).rs_rd, "TID range scans of {}") }
}

// ---------------------------------------------------------------------------
// Parallel scans

#[pg_guard]
unsafe extern "C-unwind" fn parallelscan_estimate(rel: pg_sys::Relation) -> pg_sys::Size {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "parallel scans of {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn parallelscan_initialize(
    rel: pg_sys::Relation,
    _pscan: pg_sys::ParallelTableScanDesc,
) -> pg_sys::Size {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "parallel scans of {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn parallelscan_reinitialize(
    rel: pg_sys::Relation,
    _pscan: pg_sys::ParallelTableScanDesc,
) {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "parallel scans of {}") }
}

// ---------------------------------------------------------------------------
// Index scans: fetching rows by TID

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_begin(
    rel: pg_sys::Relation,
) -> *mut pg_sys::IndexFetchTableData {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "index scans of {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_reset(_data: *mut pg_sys::IndexFetchTableData) {
    // Unreachable while index_fetch_begin refuses; no relation to name here.
    unsupported("index scans of orioledb tables".into());
}

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_end(_data: *mut pg_sys::IndexFetchTableData) {
    unsupported("index scans of orioledb tables".into());
}

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_tuple(
    _scan: *mut pg_sys::IndexFetchTableData,
    _tid: pg_sys::ItemPointer,
    _snapshot: pg_sys::Snapshot,
    _slot: *mut pg_sys::TupleTableSlot,
    _call_again: *mut bool,
    _all_dead: *mut bool,
) -> bool {
    unsupported("index scans of orioledb tables".into());
}

// ---------------------------------------------------------------------------
// Non-modifying operations on individual rows

#[pg_guard]
unsafe extern "C-unwind" fn tuple_fetch_row_version(
    rel: pg_sys::Relation,
    _tid: pg_sys::ItemPointer,
    _snapshot: pg_sys::Snapshot,
    _slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "fetching rows of {} by TID") }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_tid_valid(
    scan: pg_sys::TableScanDesc,
    _tid: pg_sys::ItemPointer,
) -> bool {
    // SAFETY: PostgreSQL passes the scan it began, over an open relation.
    unsafe { unsupported_on((*scan).rs_rd, "TID scans of {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_get_latest_tid(
    scan: pg_sys::TableScanDesc,
    _tid: pg_sys::ItemPointer,
) {
    // SAFETY: PostgreSQL passes the scan it began, over an open relation.
    unsafe { unsupported_on((*scan).rs_rd, "following update chains of {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_satisfies_snapshot(
    rel: pg_sys::Relation,
    _slot: *mut pg_sys::TupleTableSlot,
    _snapshot: pg_sys::Snapshot,
) -> bool {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "visibility checks on {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn index_delete_tuples(
    rel: pg_sys::Relation,
    _delstate: *mut pg_sys::TM_IndexDeleteOp,
) -> pg_sys::TransactionId {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "index entry deletion for {}") }
}

// ---------------------------------------------------------------------------
// Modifications

#[pg_guard]
unsafe extern "C-unwind" fn tuple_insert(
    rel: pg_sys::Relation,
    _slot: *mut pg_sys::TupleTableSlot,
    _cid: pg_sys::CommandId,
    _options: c_int,
    _bistate: *mut pg_sys::BulkInsertStateData,
) {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "inserting into {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_insert_speculative(
    rel: pg_sys::Relation,
    _slot: *mut pg_sys::TupleTableSlot,
    _cid: pg_sys::CommandId,
    _options: c_int,
    _bistate: *mut pg_sys::BulkInsertStateData,
    _spec_token: u32,
) {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "INSERT ... ON CONFLICT into {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_complete_speculative(
    rel: pg_sys::Relation,
    _slot: *mut pg_sys::TupleTableSlot,
    _spec_token: u32,
    _succeeded: bool,
) {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "INSERT ... ON CONFLICT into {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn multi_insert(
    rel: pg_sys::Relation,
    _slots: *mut *mut pg_sys::TupleTableSlot,
    _nslots: c_int,
    _cid: pg_sys::CommandId,
    _options: c_int,
    _bistate: *mut pg_sys::BulkInsertStateData,
) {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "inserting into {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_delete(
    rel: pg_sys::Relation,
    _tid: pg_sys::ItemPointer,
    _cid: pg_sys::CommandId,
    _snapshot: pg_sys::Snapshot,
    _crosscheck: pg_sys::Snapshot,
    _wait: bool,
    _tmfd: *mut pg_sys::TM_FailureData,
    _changing_part: bool,
) -> pg_sys::TM_Result::Type {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "deleting from {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_update(
    rel: pg_sys::Relation,
    _otid: pg_sys::ItemPointer,
    _slot: *mut pg_sys::TupleTableSlot,
    _cid: pg_sys::CommandId,
    _snapshot: pg_sys::Snapshot,
    _crosscheck: pg_sys::Snapshot,
    _wait: bool,
    _tmfd: *mut pg_sys::TM_FailureData,
    _lockmode: *mut pg_sys::LockTupleMode::Type,
    _update_indexes: *mut bool,
) -> pg_sys::TM_Result::Type {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "updating {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_lock(
    rel: pg_sys::Relation,
    _tid: pg_sys::ItemPointer,
    _snapshot: pg_sys::Snapshot,
    _slot: *mut pg_sys::TupleTableSlot,
    _cid: pg_sys::CommandId,
    _mode: pg_sys::LockTupleMode::Type,
    _wait_policy: pg_sys::LockWaitPolicy::Type,
    _flags: u8,
    _tmfd: *mut pg_sys::TM_FailureData,
) -> pg_sys::TM_Result::Type {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "locking rows of {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn finish_bulk_insert(_rel: pg_sys::Relation, _options: c_int) {
    // Nothing is buffered between inserts, so there is nothing to flush.
}

// ---------------------------------------------------------------------------
// DDL

#[pg_guard]
unsafe extern "C-unwind" fn relation_set_new_filenode(
    rel: pg_sys::Relation,
    newrnode: *const pg_sys::RelFileNode,
    persistence: std::ffi::c_char,
    freeze_xid: *mut pg_sys::TransactionId,
    minmulti: *mut pg_sys::MultiXactId,
) {
    // SAFETY: PostgreSQL passes an open relation and a valid file node.
    unsafe {
        if persistence as u8 == pg_sys::RELPERSISTENCE_TEMP {
            unsupported_on(rel, "temporary {} (CREATE TEMP TABLE ... USING orioledb)");
        }
        if persistence as u8 == pg_sys::RELPERSISTENCE_UNLOGGED {
            unsupported_on(
                rel,
                "unlogged {} (CREATE UNLOGGED TABLE ... USING orioledb)",
            );
        }
        if (*newrnode).spcNode != pg_sys::DEFAULTTABLESPACE_OID {
            unsupported_on(rel, "{} outside the default tablespace");
        }
        // Like heap: the new (empty) relation holds no xid older than
        // RecentXmin and no multixact older than the oldest one still running.
        // RecentXmin is set because DDL runs in a transaction with a snapshot.
        *freeze_xid = pg_sys::RecentXmin;
        *minmulti = pg_sys::GetOldestMultiXactId();
        // The table body is an engine tree, not a file under base/.
        crate::am::storage::new_relation_file(rel, newrnode);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_nontransactional_truncate(rel: pg_sys::Relation) {
    // TRUNCATE in the transaction that created the table: empty it in place.
    // SAFETY: PostgreSQL passes an open relation.
    let node = unsafe { (*rel).rd_node };
    let engine = crate::pg::engine::engine();
    engine
        .truncate_tree(crate::pg::engine::tree_id(node.dbNode, node.relNode))
        .unwrap_or_else(|e| crate::pg::engine::report(e));
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_copy_data(
    rel: pg_sys::Relation,
    _newrnode: *const pg_sys::RelFileNode,
) {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(rel, "moving {} to another tablespace") }
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_copy_for_cluster(
    old_table: pg_sys::Relation,
    _new_table: pg_sys::Relation,
    _old_index: pg_sys::Relation,
    _use_sort: bool,
    _oldest_xmin: pg_sys::TransactionId,
    _xid_cutoff: *mut pg_sys::TransactionId,
    _multi_cutoff: *mut pg_sys::MultiXactId,
    _num_tuples: *mut f64,
    _tups_vacuumed: *mut f64,
    _tups_recently_dead: *mut f64,
) {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(old_table, "CLUSTER and VACUUM FULL of {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_vacuum(
    _rel: pg_sys::Relation,
    _params: *mut pg_sys::VacuumParams,
    _bstrategy: pg_sys::BufferAccessStrategy,
) {
    // The engine prunes old versions during normal page modification, so
    // VACUUM has nothing to do; succeeding keeps database-wide VACUUM working.
}

// ---------------------------------------------------------------------------
// ANALYZE: no blocks (relation_size is 0), hence no rows to sample.

#[pg_guard]
unsafe extern "C-unwind" fn scan_analyze_next_block(
    _scan: pg_sys::TableScanDesc,
    _blockno: pg_sys::BlockNumber,
    _bstrategy: pg_sys::BufferAccessStrategy,
) -> bool {
    false
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_analyze_next_tuple(
    _scan: pg_sys::TableScanDesc,
    _oldest_xmin: pg_sys::TransactionId,
    _liverows: *mut f64,
    _deadrows: *mut f64,
    _slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    false
}

// ---------------------------------------------------------------------------
// Index builds

#[pg_guard]
unsafe extern "C-unwind" fn index_build_range_scan(
    table_rel: pg_sys::Relation,
    _index_rel: pg_sys::Relation,
    _index_info: *mut pg_sys::IndexInfo,
    _allow_sync: bool,
    _anyvisible: bool,
    _progress: bool,
    _start_blockno: pg_sys::BlockNumber,
    _numblocks: pg_sys::BlockNumber,
    _callback: pg_sys::IndexBuildCallback,
    _callback_state: *mut std::ffi::c_void,
    _scan: pg_sys::TableScanDesc,
) -> f64 {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(table_rel, "building indexes on {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn index_validate_scan(
    table_rel: pg_sys::Relation,
    _index_rel: pg_sys::Relation,
    _index_info: *mut pg_sys::IndexInfo,
    _snapshot: pg_sys::Snapshot,
    _state: *mut pg_sys::ValidateIndexState,
) {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(table_rel, "CREATE INDEX CONCURRENTLY on {}") }
}

// ---------------------------------------------------------------------------
// Sizes and TOAST

#[pg_guard]
unsafe extern "C-unwind" fn relation_size(
    _rel: pg_sys::Relation,
    _fork: pg_sys::ForkNumber::Type,
) -> u64 {
    // Nothing is stored yet; RelationGetNumberOfBlocks goes through here.
    0
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_needs_toast_table(_rel: pg_sys::Relation) -> bool {
    // No toast tree until rows can be stored (design decision 9).
    false
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_toast_am(rel: pg_sys::Relation) -> pg_sys::Oid {
    // The toast relation of an orioledb table is itself orioledb (decision 9).
    // SAFETY: an open relation always has its pg_class row in rd_rel.
    unsafe { (*(*rel).rd_rel).relam }
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_fetch_toast_slice(
    toastrel: pg_sys::Relation,
    _valueid: pg_sys::Oid,
    _attrsize: i32,
    _sliceoffset: i32,
    _slicelength: i32,
    _result: *mut pg_sys::varlena,
) {
    // SAFETY: PostgreSQL passes an open relation.
    unsafe { unsupported_on(toastrel, "reading toasted values of {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_estimate_size(
    _rel: pg_sys::Relation,
    _attr_widths: *mut i32,
    pages: *mut pg_sys::BlockNumber,
    tuples: *mut f64,
    allvisfrac: *mut f64,
) {
    // The planner must be able to plan statements (which then fail at
    // execution with a clear error); an empty table is the truth today.
    // SAFETY: the planner passes valid out-pointers.
    unsafe {
        *pages = 0;
        *tuples = 0.0;
        *allvisfrac = 0.0;
    }
}

// ---------------------------------------------------------------------------
// Bitmap and sample scans

#[pg_guard]
unsafe extern "C-unwind" fn scan_bitmap_next_block(
    scan: pg_sys::TableScanDesc,
    _tbmres: *mut pg_sys::TBMIterateResult,
) -> bool {
    // SAFETY: PostgreSQL passes the scan it began, over an open relation.
    unsafe { unsupported_on((*scan).rs_rd, "bitmap scans of {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_bitmap_next_tuple(
    scan: pg_sys::TableScanDesc,
    _tbmres: *mut pg_sys::TBMIterateResult,
    _slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: PostgreSQL passes the scan it began, over an open relation.
    unsafe { unsupported_on((*scan).rs_rd, "bitmap scans of {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_sample_next_block(
    scan: pg_sys::TableScanDesc,
    _scanstate: *mut pg_sys::SampleScanState,
) -> bool {
    // SAFETY: PostgreSQL passes the scan it began, over an open relation.
    unsafe { unsupported_on((*scan).rs_rd, "TABLESAMPLE on {}") }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_sample_next_tuple(
    scan: pg_sys::TableScanDesc,
    _scanstate: *mut pg_sys::SampleScanState,
    _slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: PostgreSQL passes the scan it began, over an open relation.
    unsafe { unsupported_on((*scan).rs_rd, "TABLESAMPLE on {}") }
}

/// Whether every callback slot of [`ROUTINE`] is filled (used by tests).
pub fn all_callbacks_set() -> bool {
    const WORDS: usize = size_of::<pg_sys::TableAmRoutine>() / size_of::<usize>();
    // SAFETY: TableAmRoutine is repr(C): a NodeTag (padded to one word) then
    // only Option<fn> fields, each one word with None == 0. Reading it as
    // words is reading initialised plain data.
    let words: &[usize; WORDS] = unsafe { &*(&raw const ROUTINE).cast::<[usize; WORDS]>() };
    words[1..].iter().all(|&w| w != 0)
}
