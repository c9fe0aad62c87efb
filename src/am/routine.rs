//! The `TableAmRoutine` of the `orioledb` access method.
//!
//! Every callback is filled: PostgreSQL calls them without NULL checks, so a
//! missing one is a backend crash. Rows are read in `scan` (sequential,
//! parallel, index, bitmap, TID range and sample scans) and `pkscan` (the
//! primary scan), written in `modify` (format and visibility in `rows`,
//! large values in `toast`); VACUUM is in `vacuum`, VACUUM FULL / CLUSTER
//! and re-keying in `rekey`, tree lifetimes in `storage`. What is refused on
//! purpose (tables outside the default tablespace, moving them to another
//! one; in `rekey`, among others, CLUSTER of a keyed table on an index
//! other than its primary key) raises `orioledb: <operation> is not
//! supported yet` with SQLSTATE 0A000.
//!
//! Rows live in the engine's files under `orioledb_data/`; under `base/` a
//! relation has the empty main fork PostgreSQL creates (its presence tells
//! the orphan sweep that the relation exists, see `storage::sweep_orphans`)
//! and, once VACUUM marked blocks, a visibility-map fork (`vismap`). Sizes
//! reported to PostgreSQL come from `relation_size` (blocks of row ids),
//! not from `base/`.

// Callback signatures are fixed by PostgreSQL's tableam.h.
#![allow(clippy::too_many_arguments)]

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::{c_int, CStr};

/// The callback table returned by `orioledb_tableam_handler`.
///
/// Invariant: every callback is `Some` (checked by a test), including the
/// optional TID-range and bitmap ones: with them the planner offers those
/// plans (`plancat.c` sets `amhasgetbitmap` and `AMFLAG_HAS_TID_RANGE` from
/// them). The value is never modified, so handing out `*const` pointers to
/// it is sound.
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

/// Raises `pg::error::not_supported` with `{}` in `what` replaced by `table "name"`.
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
    crate::pg::error::not_supported(what.replace("{}", &format!("table \"{}\"", name.to_string_lossy())))
}

// ---------------------------------------------------------------------------
// Slots

#[pg_guard]
unsafe extern "C-unwind" fn slot_callbacks(
    _rel: pg_sys::Relation,
) -> *const pg_sys::TupleTableSlotOps {
    &raw const pg_sys::TTSOpsHeapTuple
}

// ---------------------------------------------------------------------------
// Scans: one descriptor (`scan::scan_begin`) serves sequential, bitmap,
// TID range, sample and ANALYZE scans.

#[pg_guard]
unsafe extern "C-unwind" fn scan_begin(
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    nkeys: c_int,
    key: *mut pg_sys::ScanKeyData,
    pscan: pg_sys::ParallelTableScanDesc,
    flags: u32,
) -> pg_sys::TableScanDesc {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::scan_begin(rel, snapshot, nkeys, key, pscan, flags) }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_end(scan: pg_sys::TableScanDesc) {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::scan_end(scan) }
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
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::scan_rescan(scan) }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_getnextslot(
    scan: pg_sys::TableScanDesc,
    direction: pg_sys::ScanDirection::Type,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::scan_getnextslot(scan, direction, slot) }
}

// ---------------------------------------------------------------------------
// TID range scans (`WHERE ctid >= ... AND ctid < ...`)

#[pg_guard]
unsafe extern "C-unwind" fn scan_set_tidrange(
    scan: pg_sys::TableScanDesc,
    mintid: pg_sys::ItemPointer,
    maxtid: pg_sys::ItemPointer,
) {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::set_tidrange(scan, mintid, maxtid) }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_getnextslot_tidrange(
    scan: pg_sys::TableScanDesc,
    direction: pg_sys::ScanDirection::Type,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::getnextslot_tidrange(scan, direction, slot) }
}

// ---------------------------------------------------------------------------
// Parallel scans

#[pg_guard]
unsafe extern "C-unwind" fn parallelscan_estimate(_rel: pg_sys::Relation) -> pg_sys::Size {
    crate::am::scan::parallel_estimate()
}

#[pg_guard]
unsafe extern "C-unwind" fn parallelscan_initialize(
    rel: pg_sys::Relation,
    pscan: pg_sys::ParallelTableScanDesc,
) -> pg_sys::Size {
    // SAFETY: PostgreSQL passes an open relation and the shared memory it
    // sized with parallelscan_estimate.
    unsafe { crate::am::scan::parallel_initialize(rel, pscan) }
}

#[pg_guard]
unsafe extern "C-unwind" fn parallelscan_reinitialize(
    _rel: pg_sys::Relation,
    pscan: pg_sys::ParallelTableScanDesc,
) {
    // SAFETY: `pscan` was set up by parallelscan_initialize.
    unsafe { crate::am::scan::parallel_reinitialize(pscan) }
}

// ---------------------------------------------------------------------------
// Index scans: fetching rows by TID

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_begin(
    rel: pg_sys::Relation,
) -> *mut pg_sys::IndexFetchTableData {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::index_fetch_begin(rel) }
}

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_reset(_data: *mut pg_sys::IndexFetchTableData) {
    // No state is kept between fetches.
}

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_end(data: *mut pg_sys::IndexFetchTableData) {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::index_fetch_end(data) }
}

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_tuple(
    scan: *mut pg_sys::IndexFetchTableData,
    tid: pg_sys::ItemPointer,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    call_again: *mut bool,
    all_dead: *mut bool,
) -> bool {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::index_fetch_tuple(scan, tid, snapshot, slot, call_again, all_dead) }
}

// ---------------------------------------------------------------------------
// Non-modifying operations on individual rows

#[pg_guard]
unsafe extern "C-unwind" fn tuple_fetch_row_version(
    rel: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::tuple_fetch_row_version(rel, tid, snapshot, slot) }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_tid_valid(
    scan: pg_sys::TableScanDesc,
    tid: pg_sys::ItemPointer,
) -> bool {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::tuple_tid_valid(scan, tid) }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_get_latest_tid(
    scan: pg_sys::TableScanDesc,
    tid: pg_sys::ItemPointer,
) {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::tuple_get_latest_tid(scan, tid) }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_satisfies_snapshot(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    snapshot: pg_sys::Snapshot,
) -> bool {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::tuple_satisfies_snapshot(rel, slot, snapshot) }
}

#[pg_guard]
unsafe extern "C-unwind" fn index_delete_tuples(
    rel: pg_sys::Relation,
    delstate: *mut pg_sys::TM_IndexDeleteOp,
) -> pg_sys::TransactionId {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::index_delete_tuples(rel, delstate) }
}

// ---------------------------------------------------------------------------
// Modifications

#[pg_guard]
unsafe extern "C-unwind" fn tuple_insert(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    _options: c_int,
    _bistate: *mut pg_sys::BulkInsertStateData,
) {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::modify::insert(rel, slot, cid, None) }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_insert_speculative(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    _options: c_int,
    _bistate: *mut pg_sys::BulkInsertStateData,
    spec_token: u32,
) {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::modify::insert(rel, slot, cid, Some(spec_token)) }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_complete_speculative(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    _spec_token: u32,
    succeeded: bool,
) {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::modify::complete_speculative(rel, slot, succeeded) }
}

#[pg_guard]
unsafe extern "C-unwind" fn multi_insert(
    rel: pg_sys::Relation,
    slots: *mut *mut pg_sys::TupleTableSlot,
    nslots: c_int,
    cid: pg_sys::CommandId,
    options: c_int,
    _bistate: *mut pg_sys::BulkInsertStateData,
) {
    // SAFETY: PostgreSQL passes nslots valid slots.
    unsafe {
        let slots = std::slice::from_raw_parts(slots, nslots.max(0) as usize);
        let frozen = options as u32 & pg_sys::TABLE_INSERT_FROZEN != 0;
        crate::am::modify::insert_many(rel, slots, cid, frozen);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_delete(
    rel: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    cid: pg_sys::CommandId,
    _snapshot: pg_sys::Snapshot,
    crosscheck: pg_sys::Snapshot,
    wait: bool,
    tmfd: *mut pg_sys::TM_FailureData,
    changing_part: bool,
) -> pg_sys::TM_Result::Type {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::modify::delete(rel, tid, cid, crosscheck, wait, tmfd, changing_part) }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_update(
    rel: pg_sys::Relation,
    otid: pg_sys::ItemPointer,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    _snapshot: pg_sys::Snapshot,
    crosscheck: pg_sys::Snapshot,
    wait: bool,
    tmfd: *mut pg_sys::TM_FailureData,
    lockmode: *mut pg_sys::LockTupleMode::Type,
    update_indexes: *mut bool,
) -> pg_sys::TM_Result::Type {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe {
        crate::am::modify::update(
            rel,
            otid,
            slot,
            cid,
            crosscheck,
            wait,
            tmfd,
            lockmode,
            update_indexes,
        )
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_lock(
    rel: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    _snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    mode: pg_sys::LockTupleMode::Type,
    wait_policy: pg_sys::LockWaitPolicy::Type,
    flags: u8,
    tmfd: *mut pg_sys::TM_FailureData,
) -> pg_sys::TM_Result::Type {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::modify::lock(rel, tid, slot, cid, mode, wait_policy, flags, tmfd) }
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
        // Temporary and unlogged tables get trees like any other: shared,
        // WAL-logged and checkpointed; an unlogged table is emptied after a
        // crash as heap's are (`am::storage::unlogged`). A temporary table's tree goes with the table when
        // its session ends; one a crash leaves behind has no file under
        // base/<db>/<relfilenode> (temporary files are named t<backend>_…)
        // and is dropped by the post-recovery sweep.
        if (*newrnode).spcNode != pg_sys::DEFAULTTABLESPACE_OID {
            unsupported_on(rel, "{} outside the default tablespace");
        }
        // Like heap: the new (empty) relation holds no xid older than
        // RecentXmin and no multixact older than the oldest one still running.
        // RecentXmin is set because DDL runs in a transaction with a snapshot.
        *freeze_xid = pg_sys::RecentXmin;
        *minmulti = pg_sys::GetOldestMultiXactId();
        // A re-key copies the old versions, xids and all, into the new
        // file: the table keeps the horizons it had.
        if let Some((x, m)) = crate::am::rekey::kept_horizons() {
            *freeze_xid = x;
            *minmulti = m;
        }
        // The table body is an engine tree, not a file under base/; its
        // records must be replayable from a durable engine redo point.
        crate::pg::engine::ensure_redo_point();
        // An empty main fork, as heap has: PostgreSQL's own storage
        // management then creates and drops it with the relation (also in
        // WAL replay), code that prefetches table blocks (ANALYZE) finds a
        // file to advise on, and a tree without its file is an orphan
        // (`storage::sweep_orphans`). Created before the tree, so a live
        // tree always has its file.
        let srel = pg_sys::RelationCreateStorage(*newrnode, persistence, true);
        crate::am::storage::unlogged::create_forks(srel, newrnode, persistence);
        pg_sys::smgrclose(srel);
        crate::am::storage::trees::new_relation_file(rel, newrnode);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_nontransactional_truncate(rel: pg_sys::Relation) {
    // TRUNCATE in the transaction that created the table: empty it in place.
    // SAFETY: PostgreSQL passes an open relation.
    let node = unsafe { (*rel).rd_node };
    let engine = crate::pg::engine::engine();
    let id = crate::pg::engine::tree_id(node.dbNode, node.relNode);
    // A toast relation may have no tree yet: nothing to empty.
    // SAFETY: PostgreSQL passes an open relation.
    if unsafe { crate::pg::is_toast(rel) } && !engine.has_tree(id) {
        return;
    }
    engine
        .truncate_tree(id)
        .unwrap_or_else(|e| crate::pg::engine::report(e));
    // The descriptor went with the rest: the index rebuild sets it again.
    crate::am::rows::forget_tree(id);
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
    new_table: pg_sys::Relation,
    old_index: pg_sys::Relation,
    use_sort: bool,
    oldest_xmin: pg_sys::TransactionId,
    xid_cutoff: *mut pg_sys::TransactionId,
    multi_cutoff: *mut pg_sys::MultiXactId,
    num_tuples: *mut f64,
    tups_vacuumed: *mut f64,
    tups_recently_dead: *mut f64,
) {
    // SAFETY: CLUSTER / VACUUM FULL pass open, exclusively locked relations
    // and valid out-pointers.
    unsafe {
        // PostgreSQL makes the cutoffs the new relfrozenxid / relminmxid.
        // Versions are copied unfrozen (as VACUUM leaves them), so the
        // table keeps the horizons it had: older xids stay in use.
        *xid_cutoff = (*(*old_table).rd_rel).relfrozenxid;
        *multi_cutoff = (*(*old_table).rd_rel).relminmxid;
        crate::am::rekey::copy_for_cluster(
            old_table,
            new_table,
            old_index,
            use_sort,
            oldest_xmin,
            (&mut *num_tuples, &mut *tups_vacuumed, &mut *tups_recently_dead),
        )
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_vacuum(
    rel: pg_sys::Relation,
    params: *mut pg_sys::VacuumParams,
    bstrategy: pg_sys::BufferAccessStrategy,
) {
    // SAFETY: VACUUM passes an open, locked relation and its parameters.
    unsafe { crate::am::maintenance::vacuum::vacuum(rel, params, bstrategy) }
}

// ---------------------------------------------------------------------------
// ANALYZE: samples blocks of the row-id space (see scan::reported_blocks).

#[pg_guard]
unsafe extern "C-unwind" fn scan_analyze_next_block(
    scan: pg_sys::TableScanDesc,
    blockno: pg_sys::BlockNumber,
    _bstrategy: pg_sys::BufferAccessStrategy,
) -> bool {
    // SAFETY: ANALYZE passes the scan it began.
    unsafe { crate::am::scan::analyze_next_block(scan, blockno) }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_analyze_next_tuple(
    scan: pg_sys::TableScanDesc,
    oldest_xmin: pg_sys::TransactionId,
    liverows: *mut f64,
    deadrows: *mut f64,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: ANALYZE passes the scan it began and valid counters and slot.
    unsafe { crate::am::scan::analyze_next_tuple(scan, oldest_xmin, liverows, deadrows, slot) }
}

// ---------------------------------------------------------------------------
// Index builds

#[pg_guard]
unsafe extern "C-unwind" fn index_build_range_scan(
    table_rel: pg_sys::Relation,
    index_rel: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    _allow_sync: bool,
    anyvisible: bool,
    progress: bool,
    start_blockno: pg_sys::BlockNumber,
    numblocks: pg_sys::BlockNumber,
    callback: pg_sys::IndexBuildCallback,
    callback_state: *mut std::ffi::c_void,
    scan: pg_sys::TableScanDesc,
) -> f64 {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe {
        crate::am::scan::index_build_range_scan(
            table_rel,
            index_rel,
            index_info,
            anyvisible,
            progress,
            start_blockno,
            numblocks,
            callback,
            callback_state,
            scan,
        )
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn index_validate_scan(
    table_rel: pg_sys::Relation,
    index_rel: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    snapshot: pg_sys::Snapshot,
    state: *mut pg_sys::ValidateIndexState,
) {
    // SAFETY: validate_index passes open relations, the index's IndexInfo,
    // its registered MVCC snapshot and the state holding the sorted TIDs.
    unsafe {
        crate::am::scan::index_validate_scan(table_rel, index_rel, index_info, snapshot, state)
    }
}

// ---------------------------------------------------------------------------
// Sizes and TOAST

#[pg_guard]
unsafe extern "C-unwind" fn relation_size(
    rel: pg_sys::Relation,
    fork: pg_sys::ForkNumber::Type,
) -> u64 {
    // Blocks of the row-id space: TID blocks of 291 ids (fewer, larger
    // blocks while ANALYZE samples a very large table); other forks are
    // empty.
    if fork != pg_sys::ForkNumber::MAIN_FORKNUM && fork != pg_sys::ForkNumber::InvalidForkNumber {
        return 0;
    }
    // SAFETY: PostgreSQL passes an open relation.
    let blocks = unsafe { crate::am::scan::reported_blocks(rel) };
    blocks * pg_sys::BLCKSZ as u64
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_needs_toast_table(rel: pg_sys::Relation) -> bool {
    // Any column whose values may be moved out of line (decision 9).
    // SAFETY: an open relation has a tuple descriptor with natts attributes.
    unsafe {
        let desc = (*rel).rd_att;
        let attrs = (*desc).attrs.as_slice((*desc).natts as usize);
        attrs
            .iter()
            .any(|a| !a.attisdropped && a.attlen == -1 && a.attstorage as u8 != b'p')
    }
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
    valueid: pg_sys::Oid,
    attrsize: i32,
    sliceoffset: i32,
    slicelength: i32,
    result: *mut pg_sys::varlena,
) {
    // SAFETY: detoasting passes the toast relation and a result buffer
    // with room for slicelength bytes of data.
    unsafe {
        crate::am::toast::fetch_slice(
            toastrel,
            valueid,
            attrsize,
            sliceoffset,
            slicelength,
            result,
        )
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_estimate_size(
    rel: pg_sys::Relation,
    attr_widths: *mut i32,
    pages: *mut pg_sys::BlockNumber,
    tuples: *mut f64,
    allvisfrac: *mut f64,
) {
    // Heap's estimate (`table_block_relation_estimate_size`) over the
    // table's heap-equivalent pages: its blocks of row ids, which fill as
    // heap's pages would (am::layout::fill), so an ordinary table gets the
    // estimates — and the plans — it would get on heap. Updates spend new
    // row ids; where the row-id space has outgrown the tree (pruned
    // versions leave their ids unused), the tree's own pages count.
    // SAFETY: the planner passes an open relation and valid out-pointers.
    unsafe {
        if crate::pg::is_toast(rel) {
            // Chunks, read only by detoasting (and maybe no tree yet).
            (*pages, *tuples, *allvisfrac) = (0, 0.0, 0.0);
            return;
        }
        let tree_pages = crate::am::rows::tree_of(rel).approx_pages() as f64;
        let mut blocks = crate::am::scan::current_blocks(rel) as f64;
        let class = (*rel).rd_rel;
        let (reltuples, relpages) = ((*class).reltuples as f64, (*class).relpages as f64);
        // Never vacuumed or analysed and small: like heap, assume ten pages,
        // since a table tiny at planning time may well have grown by
        // execution (and an index is the safer bet).
        let assumed = blocks < 10.0 && reltuples < 0.0 && !(*class).relhassubclass;
        if assumed {
            blocks = 10.0;
        }
        *pages = if assumed {
            blocks
        } else {
            blocks.min(tree_pages.max(1.0))
        } as pg_sys::BlockNumber;
        if blocks == 0.0 {
            *tuples = 0.0;
            *allvisfrac = 0.0;
            return;
        }
        let density = if reltuples >= 0.0 && relpages > 0.0 {
            reltuples / relpages
        } else {
            // Heap's row: its data, a tuple header and a line pointer.
            let width = pg_sys::get_rel_data_width(rel, attr_widths) + 24 + 4;
            (pg_sys::BLCKSZ as f64 - 24.0) / width.max(1) as f64
        };
        // Rows per block of row ids (ANALYZE's relpages are such blocks).
        *tuples = (density * blocks).round();
        // As heap: the all-visible share of the blocks (am::rows::vismap), which
        // prices index-only scans.
        let relallvisible = (*class).relallvisible as f64;
        *allvisfrac = if relallvisible <= 0.0 {
            0.0
        } else {
            (relallvisible / blocks).min(1.0)
        };
    }
}

// ---------------------------------------------------------------------------
// Bitmap and sample scans

#[pg_guard]
unsafe extern "C-unwind" fn scan_bitmap_next_block(
    scan: pg_sys::TableScanDesc,
    tbmres: *mut pg_sys::TBMIterateResult,
) -> bool {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::bitmap_next_block(scan, tbmres) }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_bitmap_next_tuple(
    scan: pg_sys::TableScanDesc,
    _tbmres: *mut pg_sys::TBMIterateResult,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::bitmap_next_tuple(scan, slot) }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_sample_next_block(
    scan: pg_sys::TableScanDesc,
    scanstate: *mut pg_sys::SampleScanState,
) -> bool {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::sample_next_block(scan, scanstate) }
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_sample_next_tuple(
    scan: pg_sys::TableScanDesc,
    scanstate: *mut pg_sys::SampleScanState,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: PostgreSQL passes valid pointers, as the callback contract says.
    unsafe { crate::am::scan::sample_next_tuple(scan, scanstate, slot) }
}

/// Whether every callback slot of [`ROUTINE`] is filled (used by tests).
pub fn all_callbacks_set() -> bool {
    const WORDS: usize = size_of::<pg_sys::TableAmRoutine>() / size_of::<usize>();
    // SAFETY: TableAmRoutine is repr(C): a NodeTag (padded to one word) then
    // only Option<fn> fields, each one word with None == 0. Reading it as
    // words is reading initialised plain data.
    let words: &[usize; WORDS] = unsafe { &*(&raw const ROUTINE).cast::<[usize; WORDS]>() };
    words.iter().skip(1).all(|&w| w != 0)
}
