//! Reading rows: sequential scans, fetches by TID (index scans, TID scans,
//! re-fetches by the executor), update-chain following, and index builds.
//! Beside it in the room: the primary scan, a custom scan that reads a
//! keyed table by its key (`pkscan`), and the planner hook that offers it
//! (`planner`).
//!
//! It may call `rekey` (an index build of a primary key), row versions,
//! the keyed layout, the engine and `pg`.
// The `pub unsafe fn`s here implement `TableAmRoutine` callbacks (called from
// `routine.rs`): their safety contract is PostgreSQL's for that callback
// (valid, open relations, slots and snapshots), and their argument lists
// are the callbacks'.
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

pub mod pkscan;
pub mod planner;

use crate::am::layout::hot;
use crate::am::rows::{
    self, decode, from_item_pointer, get_version, satisfies, store_version, table_of,
};
use crate::am::rows::ssi;
use crate::am::layout::table::{IdRange, Table, SMALL_TABLE_PAGES};
use orioledb_engine::version::{self, tid, Header, Hints, VacuumState, Xid};
use orioledb_engine::{Direction, LeafWalk};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgMemoryContexts;
use std::collections::VecDeque;
use std::ffi::c_int;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

/// Rust-side state of a scan. Invariant: a sequential walk that changes
/// direction resumes next to the last row it examined (visible or not):
/// `cursor`'s position, or `last` while a new walk is being opened.
struct ScanState {
    tree: Table,
    cursor: Option<SeqCursor>,
    /// ANALYZE: the versions of the sampled block.
    analyze: Option<AnalyzeBlock>,
    /// ANALYZE of a keyed table: how its leaves are divided into blocks.
    analyze_split: Option<LeafSplit>,
    /// ANALYZE of a table in row-id order: the walk over its blocks.
    analyze_walk: Option<AnalyzeWalk>,
    /// ANALYZE of a keyed table: where the block read last ended, and the
    /// leaf page a read starting there may resume at (blocks without a
    /// leaf of their own lie between, so block numbers do not tell).
    analyze_resume: Option<(Vec<u8>, u32)>,
    /// ANALYZE: its engine page work, charged to the cost-based delay
    /// (`acquire_sample_rows` pauses at every block).
    analyze_cost: Option<crate::pg::vacuum_cost::CostMeter>,
    dir: Direction,
    /// Where a sequential walk resumes when it turns round: set from the
    /// spent walk's position when it is replaced.
    last: Option<Vec<u8>>,
    /// The sequential walk returned its last row in its direction.
    at_end: bool,
    /// SERIALIZABLE: report rw-conflicts out for the versions examined.
    ssi_out: bool,
    /// TID block of the version read last, for block statistics.
    stat_block: u64,
    /// Bitmap heap scans: the visible versions of the current block.
    bitmap: VecDeque<(u64, Vec<u8>)>,
    /// TID range scans: the range and the position in it.
    tids: Option<TidRange>,
    /// TABLESAMPLE: the block being sampled.
    sample: Sample,
    /// Parallel sequential scans: this process's share of the row ids.
    parallel: Option<ParallelIds>,
    /// The key walk's pruning of what it reads ([`PruneSeen`]).
    prune: PruneSeen,
}

/// A sequential scan in key order prunes the leaves it finds full of
/// versions dead to every snapshot, as heap's scans prune the pages they
/// read (`heap_page_prune_opt`): a table that a long transaction let
/// bloat stays bloated otherwise until VACUUM or the sweep reach it, and
/// every scan meanwhile reads all of it (a 100-row table updated while a
/// snapshot was held kept 9,557 pages, 22 scans a second). Invariant:
/// `dead` counts the dead versions met in leaf `leaf` of the walk;
/// `done` once that leaf was pruned.
#[derive(Default)]
struct PruneSeen {
    /// Not on a standby (which never prunes), in a parallel worker, or in
    /// a scan of another kind.
    off: bool,
    horizon: Option<rows::Horizon>,
    leaf: u64,
    dead: usize,
    done: bool,
}

/// Dead versions a leaf must show (and a share of its items) before a
/// scan prunes it.
const PRUNE_SEEN_MIN: usize = 8;

/// Prunes the leaf of `table` holding `key` for a scan ([`PruneSeen`]),
/// best effort as heap's scan-time pruning: an error leaves the leaf as it
/// was. The toast values of pruned versions stay queued until the
/// transaction's pre-commit (`rows::at_pre_commit`), which deletes them
/// with the toast relation locked if that lock is free at once (else at
/// the backend's next change or exit), not in the middle of the scan. The
/// walk reads a copy of the leaf and finds the next one by key: pruning
/// (and merging) under it moves nothing it has still to return.
///
/// # Safety
/// `rel` is the open relation of `table`.
unsafe fn prune_seen(table: &Table, rel: pg_sys::Relation, key: &[u8]) {
    if table.tree.prune_leaf_at(Some(key)).is_err() {
        return;
    }
    // Unlogged deletes of the pruned versions' map entries, in this very
    // tree (whose table the scan has open).
    crate::am::layout::table::delete_doomed_map_entries();
    // SAFETY: per the contract.
    unsafe { rows::report_pruned(rel, table.tree.id()) };
}

impl PruneSeen {
    /// Forgets the counts of the walk before (a rescan, a turn).
    fn restart(&mut self) {
        (self.leaf, self.dead, self.done) = (0, 0, false);
    }

    /// Counts `h`, a version the walk `cursor` just passed over as
    /// invisible, if it is dead to everyone; the key to prune at once the
    /// leaf it came from has shown enough of them (once per leaf).
    ///
    /// # Safety
    /// `rel` is the scan's open relation.
    unsafe fn seen_dead(&mut self, cursor: &SeqCursor, h: &Header, rel: pg_sys::Relation) -> Option<Vec<u8>> {
        if self.off {
            return None;
        }
        let SeqCursor::Keys(w) = cursor else {
            return None;
        };
        let (leaf, len) = w.leaf();
        if leaf != self.leaf {
            self.restart();
            self.leaf = leaf;
        }
        if self.done {
            return None;
        }
        // SAFETY: per the contract.
        let horizon = self.horizon.get_or_insert_with(|| unsafe { rows::Horizon::of(rel) });
        if !rows::dead_to_all(h, horizon) {
            return None;
        }
        self.dead += 1;
        if self.dead < PRUNE_SEEN_MIN.max(len / 4) {
            return None;
        }
        self.done = true;
        w.last_key().map(<[u8]>::to_vec)
    }
}

/// How a sequential scan walks the table: the tree in key order, or —
/// for a small table — in row-id order, which is insertion order, as heap
/// returns a small table's rows (a keyed table's row-id map; a row-id
/// table's HOT chain members, keyed under their roots, are put back in
/// place, see `Table::ids`). A lookup per row costs little at that size,
/// and applications that (wrongly) count on insertion order of small
/// tables, and statements whose outcome depends on row order (an UPDATE
/// shifting unique keys), behave as on heap. Larger tables are read in key
/// order, one leaf after the other.
enum SeqCursor {
    Keys(LeafWalk),
    /// The walk and the version it returned last.
    Ids(IdRange, Option<(u64, Vec<u8>)>),
}

impl SeqCursor {
    /// Opens the walk after (before, going backward) position `from`, a
    /// key or (row-id walk) a row-id key.
    fn open(table: &Table, by_id: bool, dir: Direction, from: Option<Vec<u8>>) -> SeqCursor {
        if by_id {
            let at = from.as_deref().and_then(tid::from_key);
            let (lo, hi) = match (dir, at) {
                (Direction::Forward, Some(id)) => (id + 1, u64::MAX),
                (Direction::Backward, Some(id)) => (0, id),
                (_, None) => (0, u64::MAX),
            };
            return SeqCursor::Ids(table.small_ids(lo, hi, dir, SMALL_TABLE_PAGES), None);
        }
        SeqCursor::Keys(LeafWalk::new(match (dir, from) {
            (Direction::Forward, Some(k)) => {
                table.versions(Bound::Excluded(k), Bound::Unbounded, dir)
            }
            (Direction::Backward, Some(k)) => {
                table.versions(Bound::Unbounded, Bound::Excluded(k), dir)
            }
            (_, None) => table.versions(Bound::Unbounded, Bound::Unbounded, dir),
        }))
    }

    /// The next version: its row id and its value.
    fn next(&mut self, table: &Table) -> Option<(u64, &[u8])> {
        match self {
            SeqCursor::Keys(w) => {
                let (k, v) = w.next()?.unwrap_or_else(|e| crate::pg::engine::report(e));
                table.note_key(k);
                Some((table.id_of(k), v))
            }
            SeqCursor::Ids(r, last) => {
                *last = r.next();
                last.as_ref().map(|(id, v)| (*id, &v[..]))
            }
        }
    }

    /// The position of the version returned last (for [`Self::open`]).
    fn position(&self) -> Option<Vec<u8>> {
        match self {
            SeqCursor::Keys(w) => w.last_key().map(<[u8]>::to_vec),
            SeqCursor::Ids(_, last) => last.as_ref().map(|(id, _)| tid::key(*id).to_vec()),
        }
    }
}

/// The shared state of a parallel scan of a row-id-ordered table, in
/// dynamic shared memory; PostgreSQL serializes the snapshot right after
/// it (`phs_snapshot_off`). Invariant: chunk `c` is the row ids
/// `c * chunk .. min((c + 1) * chunk, end)`; `next` is the first chunk not
/// yet handed out, so each chunk goes to exactly one process between
/// (re)initializations, and together they cover every row id the scan's
/// snapshot can see (`end` is read after that snapshot was taken).
#[repr(C)]
pub struct ParallelScanShared {
    base: pg_sys::ParallelTableScanDescData,
    next: AtomicU64,
    end: u64,
    chunk: u64,
}

/// Size of the shared state (`parallelscan_estimate`).
pub fn parallel_estimate() -> usize {
    size_of::<ParallelScanShared>()
}

/// Fills the shared state of a new parallel scan; returns where the
/// snapshot goes.
pub unsafe fn parallel_initialize(
    rel: pg_sys::Relation,
    pscan: pg_sys::ParallelTableScanDesc,
) -> usize {
    // SAFETY: PostgreSQL allocated parallel_estimate() bytes (plus the
    // snapshot) at `pscan`, suitably aligned; nothing reads it yet.
    unsafe {
        let table = table_of(rel);
        let end = table.tree.next_id();
        // Small chunks keep workers evenly busy at the end; at least a TID
        // block, and at most 64 blocks so big tables do not pay a shared
        // counter increment per block.
        let chunk = (end / 1024).clamp(tid::PER_BLOCK, 64 * tid::PER_BLOCK);
        let p = pscan.cast::<ParallelScanShared>();
        (*p).base.phs_relid = (*rel).rd_id;
        (*p).base.phs_syncscan = false;
        std::ptr::write(&raw mut (*p).next, AtomicU64::new(0));
        (*p).end = end;
        (*p).chunk = chunk;
        size_of::<ParallelScanShared>()
    }
}

/// Hands the chunks out again (a rescan of the parallel plan).
pub unsafe fn parallel_reinitialize(pscan: pg_sys::ParallelTableScanDesc) {
    // SAFETY: `pscan` was set up by parallel_initialize.
    unsafe { (*pscan.cast::<ParallelScanShared>()).next.store(0, Ordering::Relaxed) };
}

/// The versions of the chunks this process takes from a parallel scan,
/// one chunk after another (row-id order within each).
struct ParallelIds {
    shared: *const ParallelScanShared,
    tree: Table,
    current: Option<IdRange>,
}

impl ParallelIds {
    /// This process's share of the parallel scan `pscan` of `tree`.
    fn new(pscan: pg_sys::ParallelTableScanDesc, tree: Table) -> ParallelIds {
        ParallelIds {
            shared: pscan.cast::<ParallelScanShared>(),
            tree,
            current: None,
        }
    }
}

impl Iterator for ParallelIds {
    type Item = (u64, Vec<u8>);

    fn next(&mut self) -> Option<(u64, Vec<u8>)> {
        loop {
            if let Some(item) = self.current.as_mut().and_then(|r| r.next()) {
                return Some(item);
            }
            // SAFETY: the shared state lives in the parallel query's
            // dynamic shared memory, which outlives every scan of it.
            let p = unsafe { &*self.shared };
            let c = p.next.fetch_add(1, Ordering::Relaxed);
            let first = c.saturating_mul(p.chunk);
            if first >= p.end {
                self.current = None;
                return None;
            }
            self.current = Some(self.tree.id_range(first, first.saturating_add(p.chunk).min(p.end)));
        }
    }
}

/// A TID range scan's row ids and position. Invariant: `first <= end`;
/// `last`, when set, is the row id of the last version returned or passed
/// over (so a direction change resumes next to it) and lies in
/// `first..end`; `iter` reads in direction `dir`.
struct TidRange {
    first: u64,
    end: u64,
    last: Option<u64>,
    dir: Direction,
    iter: Option<IdRange>,
}

/// A TABLESAMPLE scan's block. Invariant: `rows` are the versions of block
/// `block` (row ids `block * 291 ..` — blocks are TID blocks), in row-id
/// order, and `maxoffset` is the largest TID offset among them (0: none);
/// `nblocks` is fixed when the scan (re)starts, as heap's is.
#[derive(Default)]
struct Sample {
    nblocks: u32,
    block: Option<u32>,
    rows: Vec<(u64, Vec<u8>)>,
    maxoffset: u16,
}

/// The scan descriptor: PostgreSQL's part first, then ours.
#[repr(C)]
struct OScan {
    base: pg_sys::TableScanDescData,
    /// Allocated in the scan's memory context, dropped with it.
    state: *mut ScanState,
}

pub unsafe fn scan_begin(
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    nkeys: c_int,
    key: *mut pg_sys::ScanKeyData,
    pscan: pg_sys::ParallelTableScanDesc,
    flags: u32,
) -> pg_sys::TableScanDesc {
    // SAFETY: an open relation has its pg_class row.
    if unsafe { crate::pg::is_toast(rel) } {
        // Toast trees hold chunks, read only through detoasting.
        // SAFETY: PostgreSQL passes an open relation.
        let name = unsafe { crate::pg::rel_name(rel) };
        crate::pg::error::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("orioledb: scanning toast relation \"{name}\" is not supported"),
        );
    }
    if nkeys > 0 {
        // Only catalog scans pass scan keys, and catalogs are heap.
        // SAFETY: PostgreSQL passes an open relation.
        let name = unsafe { crate::pg::rel_name(rel) };
        crate::pg::error::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("orioledb: scan keys on table \"{name}\" are not supported"),
        );
    }
    // SAFETY: palloc0 returns zeroed memory of the requested size or ERRORs;
    // the state is owned by the current memory context (dropped with it).
    unsafe {
        let tree = table_of(rel);
        // Scans that read the table as a whole lock it now, as heap does
        // for sequential and sample scans; bitmap scans lock the versions
        // they return (`bitmap_next_block`).
        let whole = pg_sys::ScanOptions::SO_TYPE_SEQSCAN
            | pg_sys::ScanOptions::SO_TYPE_SAMPLESCAN
            | pg_sys::ScanOptions::SO_TYPE_TIDRANGESCAN;
        if flags & whole != 0 {
            ssi::lock_relation(rel, snapshot);
        }
        if flags & pg_sys::ScanOptions::SO_TYPE_SEQSCAN != 0 {
            rows::count_scan_stat(rel, rows::ScanStat::Scan);
        }
        let sample = Sample {
            nblocks: if flags & pg_sys::ScanOptions::SO_TYPE_SAMPLESCAN != 0 {
                tid_blocks(&tree)
            } else {
                0
            },
            ..Sample::default()
        };
        let state = PgMemoryContexts::CurrentMemoryContext.leak_and_drop_on_delete(ScanState {
            tree,
            cursor: None,
            analyze: None,
            analyze_split: None,
            analyze_walk: None,
            analyze_resume: None,
            analyze_cost: None,
            dir: Direction::Forward,
            last: None,
            at_end: false,
            ssi_out: ssi::out_needed(rel, snapshot),
            stat_block: u64::MAX,
            bitmap: VecDeque::new(),
            tids: None,
            sample,
            parallel: None,
            prune: PruneSeen {
                // Nor in a parallel worker, where this access method
                // writes nothing (`modify::refuse_in_parallel_worker`).
                off: flags & pg_sys::ScanOptions::SO_TYPE_SEQSCAN == 0
                    || pg_sys::RecoveryInProgress()
                    || pg_sys::ParallelWorkerNumber >= 0,
                ..PruneSeen::default()
            },
        });
        let scan = pg_sys::palloc0(size_of::<OScan>()) as *mut OScan;
        (*scan).base.rs_rd = rel;
        (*scan).base.rs_snapshot = snapshot;
        (*scan).base.rs_nkeys = nkeys;
        (*scan).base.rs_key = key;
        (*scan).base.rs_flags = flags;
        (*scan).base.rs_parallel = pscan;
        (*scan).state = state;
        scan.cast()
    }
}

pub unsafe fn scan_end(scan: pg_sys::TableScanDesc) {
    // SAFETY: only scan_begin creates scans.
    unsafe {
        let s = scan.cast::<OScan>();
        let st = &mut *(*s).state;
        st.cursor = None;
        st.analyze = None;
        st.analyze_split = None;
        st.analyze_walk = None;
        st.bitmap = VecDeque::new();
        st.tids = None;
        st.sample = Sample::default();
        st.parallel = None;
        if (*scan).rs_flags & pg_sys::ScanOptions::SO_TEMP_SNAPSHOT != 0 {
            pg_sys::UnregisterSnapshot((*scan).rs_snapshot);
        }
        pg_sys::pfree(scan.cast());
    }
}

pub unsafe fn scan_rescan(scan: pg_sys::TableScanDesc) {
    // SAFETY: only scan_begin creates scans.
    unsafe {
        let st = &mut *(*scan.cast::<OScan>()).state;
        st.cursor = None;
        st.last = None;
        st.bitmap.clear();
        st.parallel = None;
        // A TID range scan gets its (new) range from scan_set_tidrange
        // right after this.
        st.tids = None;
        // Each rescan is another scan in the statistics, as heap's initscan
        // counts it.
        if (*scan).rs_flags & pg_sys::ScanOptions::SO_TYPE_SEQSCAN != 0 {
            rows::count_scan_stat((*scan).rs_rd, rows::ScanStat::Scan);
        }
        // Heap recounts its blocks at a rescan; so does a sample scan here.
        if (*scan).rs_flags & pg_sys::ScanOptions::SO_TYPE_SAMPLESCAN != 0 {
            st.sample = Sample {
                nblocks: tid_blocks(&st.tree),
                ..Sample::default()
            };
        }
    }
}

/// The engine direction for an executor scan direction (no movement reads
/// forward, as heap does).
fn direction_of(d: pg_sys::ScanDirection::Type) -> Direction {
    if d == pg_sys::ScanDirection::BackwardScanDirection {
        Direction::Backward
    } else {
        Direction::Forward
    }
}

pub unsafe fn scan_getnextslot(
    scan: pg_sys::TableScanDesc,
    direction: pg_sys::ScanDirection::Type,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: only scan_begin creates scans; the relation and snapshot stay
    // valid for the scan's life.
    unsafe {
        let rel = (*scan).rs_rd;
        let snapshot = (*scan).rs_snapshot;
        let st = &mut *(*scan.cast::<OScan>()).state;
        let pscan = (*scan).rs_parallel;
        if !pscan.is_null() {
            return next_parallel(st, rel, snapshot, pscan, slot);
        }
        open_cursor(st, direction_of(direction));
        let ScanState {
            cursor,
            tree,
            stat_block,
            ssi_out,
            at_end,
            prune,
            ..
        } = st;
        let cursor = cursor.as_mut().expect("just set");
        while let Some((id, v)) = cursor.next(tree) {
            let h = decode(rel, id, v);
            count_block(stat_block, rel, id);
            let visible = satisfies(&h, snapshot, rel);
            if *ssi_out {
                ssi::check_out(rel, &h, visible, snapshot);
            }
            if visible {
                store_version(rel, slot, id, v);
                rows::count_scan_stat(rel, rows::ScanStat::Returned);
                return true;
            }
            if let Some(k) = prune.seen_dead(cursor, &h, rel) {
                prune_seen(tree, rel, &k);
            }
        }
        // At the end in this direction: a scroll cursor turning round
        // starts again from this end (heap's behaviour), while asking again
        // in the same direction still finds nothing (the spent cursor stays).
        *at_end = true;
        pg_sys::ExecClearTuple(slot);
        false
    }
}

/// The sequential scan's cursor for direction `dir`, opened when there is
/// none yet or the direction changed: chosen per walk, from the start (a
/// rescan may choose anew; a scroll cursor turning round keeps its order
/// and goes on from the row it returned last).
fn open_cursor(st: &mut ScanState, dir: Direction) {
    if st.cursor.is_some() && st.dir == dir {
        return;
    }
    let by_id = match &st.cursor {
        Some(SeqCursor::Ids(..)) => true,
        Some(SeqCursor::Keys(_)) => false,
        None => st.tree.scans_in_row_id_order(),
    };
    if let Some(c) = &st.cursor {
        st.last = if st.at_end { None } else { c.position() };
    }
    st.cursor = Some(SeqCursor::open(&st.tree, by_id, dir, st.last.take()));
    st.prune.restart();
    st.at_end = false;
    st.dir = dir;
}

/// [`scan_getnextslot`] of a parallel scan (which only moves forward): the
/// next visible version of the blocks this worker takes.
///
/// # Safety
/// As `scan_getnextslot`; `pscan` is the scan's parallel descriptor.
unsafe fn next_parallel(
    st: &mut ScanState,
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    pscan: pg_sys::ParallelTableScanDesc,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: per the contract.
    unsafe {
        let mut ids = st
            .parallel
            .take()
            .unwrap_or_else(|| ParallelIds::new(pscan, st.tree.clone()));
        let mut found = false;
        for (id, v) in ids.by_ref() {
            count_block(&mut st.stat_block, rel, id);
            if examine(st, rel, snapshot, id, &v) {
                store_version(rel, slot, id, &v);
                found = true;
                break;
            }
        }
        st.parallel = Some(ids);
        if found {
            rows::count_scan_stat(rel, rows::ScanStat::Returned);
        } else {
            pg_sys::ExecClearTuple(slot);
        }
        found
    }
}

/// One version read by a bitmap, TID range or sample scan: decoded, tested
/// against the scan's snapshot, and (SERIALIZABLE) reported as a conflict
/// out as the sequential scan does. Returns whether the scan sees it.
///
/// # Safety
/// Valid open relation and snapshot; `st` is that scan's state.
/// Counts a block read when `id` is in another TID block than the
/// version read before it (`last`).
///
/// # Safety
/// `rel` is the scan's open relation.
unsafe fn count_block(last: &mut u64, rel: pg_sys::Relation, id: u64) {
    let block = tid::to_pointer(id).0 as u64;
    if block != *last {
        *last = block;
        // SAFETY: per the contract.
        unsafe { rows::count_scan_stat(rel, rows::ScanStat::Block) };
    }
}

unsafe fn examine(
    st: &ScanState,
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    id: u64,
    v: &[u8],
) -> bool {
    // SAFETY: caller guarantees valid pointers.
    unsafe {
        let h = decode(rel, id, v);
        let visible = satisfies(&h, snapshot, rel);
        if st.ssi_out {
            ssi::check_out(rel, &h, visible, snapshot);
        }
        visible
    }
}

/// Bitmap heap scan: reads the versions of one TID block that the bitmap
/// names (`heapam_scan_bitmap_next_block`). An exact page lists offsets:
/// each is one row id, read by a point lookup. A lossy page (`ntuples <
/// 0`) stands for the whole block: every version with a row id in it.
/// Only versions visible to the scan's snapshot are kept; false when there
/// are none (the executor then skips the block).
pub unsafe fn bitmap_next_block(
    scan: pg_sys::TableScanDesc,
    tbmres: *mut pg_sys::TBMIterateResult,
) -> bool {
    // SAFETY: only scan_begin creates scans; the executor passes the
    // bitmap's current page, with `ntuples` offsets when it is exact.
    unsafe {
        let rel = (*scan).rs_rd;
        let snapshot = (*scan).rs_snapshot;
        let st = &mut *(*scan.cast::<OScan>()).state;
        st.bitmap.clear();
        let block = (*tbmres).blockno;
        let ntuples = (*tbmres).ntuples;
        let mut found = VecDeque::new();
        let ssi_out = st.ssi_out;
        // Each entry names a chain root (`am::layout::hot`), whose members may lie
        // in other blocks and come with it; a lossy page stands for every
        // chain rooted in the block.
        let tree = st.tree.clone();
        let mut visit = |members: Vec<(u64, Vec<u8>)>| {
            for (id, v) in members {
                // SERIALIZABLE: the index AM locked the key range it
                // read; the versions found are locked by row id, as heap's
                // bitmap scan locks the tuples it returns
                // (`heap_hot_search_buffer`), so inserts elsewhere in the
                // table do not conflict with this read.
                let h = decode(rel, id, &v);
                let visible = if ssi_out {
                    read_checked(rel, id, &h, snapshot)
                } else {
                    satisfies(&h, snapshot, rel)
                };
                if visible {
                    found.push_back((id, v));
                }
            }
        };
        if ntuples >= 0 {
            for &offset in (*tbmres).offsets.as_slice(ntuples as usize) {
                if let Some(id) = tid::from_pointer(block, offset) {
                    visit(hot::chain(&tree, id, None));
                }
            }
        } else {
            let first = block as u64 * tid::PER_BLOCK;
            for (_, members) in hot::roots_in(tree.clone(), first, first + tid::PER_BLOCK) {
                visit(members);
            }
        }
        st.bitmap = found;
        !st.bitmap.is_empty()
    }
}

/// Bitmap heap scan: the next visible version of the current block.
pub unsafe fn bitmap_next_tuple(
    scan: pg_sys::TableScanDesc,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: only scan_begin creates scans; the slot is the scan's.
    unsafe {
        let rel = (*scan).rs_rd;
        let st = &mut *(*scan.cast::<OScan>()).state;
        match st.bitmap.pop_front() {
            Some((id, v)) => {
                store_version(rel, slot, id, &v);
                true
            }
            None => false,
        }
    }
}

/// TID range scan: the row ids of TIDs `mintid..=maxtid` (any values,
/// also beyond the table or reversed: `tableam.h`'s contract).
pub unsafe fn set_tidrange(
    scan: pg_sys::TableScanDesc,
    mintid: pg_sys::ItemPointer,
    maxtid: pg_sys::ItemPointer,
) {
    // SAFETY: only scan_begin creates scans; the executor passes two
    // valid ItemPointers.
    unsafe {
        let st = &mut *(*scan.cast::<OScan>()).state;
        let (first, end) = rows::id_range_of_tids(&*mintid, &*maxtid);
        st.tids = Some(TidRange {
            first,
            end,
            last: None,
            dir: Direction::Forward,
            iter: None,
        });
    }
}

/// TID range scan: the next visible version in row-id order (forward) or
/// its reverse, turning round next to the last version like the
/// sequential scan.
pub unsafe fn getnextslot_tidrange(
    scan: pg_sys::TableScanDesc,
    direction: pg_sys::ScanDirection::Type,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: only scan_begin creates scans; the relation and snapshot stay
    // valid for the scan's life.
    unsafe {
        let rel = (*scan).rs_rd;
        let snapshot = (*scan).rs_snapshot;
        let st = &mut *(*scan.cast::<OScan>()).state;
        let dir = direction_of(direction);
        let Some(mut r) = st.tids.take() else {
            pg_sys::ExecClearTuple(slot);
            return false;
        };
        if r.iter.is_none() || r.dir != dir {
            let (lo, hi) = match (dir, r.last) {
                (Direction::Forward, Some(l)) => (l + 1, r.end),
                (Direction::Backward, Some(l)) => (r.first, l),
                (_, None) => (r.first, r.end),
            };
            r.iter = Some(st.tree.ids(lo, hi, dir));
            r.dir = dir;
        }
        let mut found = None;
        for (id, v) in r.iter.as_mut().expect("just set").by_ref() {
            r.last = Some(id);
            if examine(st, rel, snapshot, id, &v) {
                found = Some((id, v));
                break;
            }
        }
        if found.is_none() {
            // At the end in this direction (see scan_getnextslot).
            r.last = None;
        }
        st.tids = Some(r);
        match found {
            Some((id, v)) => {
                store_version(rel, slot, id, &v);
                true
            }
            None => {
                pg_sys::ExecClearTuple(slot);
                false
            }
        }
    }
}

/// `InvalidOffsetNumber` (a macro in `off.h`).
const INVALID_OFFSET: pg_sys::OffsetNumber = 0;

/// TABLESAMPLE: moves to the next block to sample
/// (`heapam_scan_sample_next_block`). Blocks are TID blocks: the method's
/// `NextSampleBlock` picks among them, or, without one (BERNOULLI), every
/// block is visited in order. The block's versions are read here; false
/// when there are no more blocks.
pub unsafe fn sample_next_block(
    scan: pg_sys::TableScanDesc,
    scanstate: *mut pg_sys::SampleScanState,
) -> bool {
    // SAFETY: only scan_begin creates scans; the executor passes its
    // sample scan state with the method's routine.
    unsafe {
        let st = &mut *(*scan.cast::<OScan>()).state;
        let sample = &mut st.sample;
        sample.rows.clear();
        sample.maxoffset = 0;
        if sample.nblocks == 0 {
            return false;
        }
        let tsm = (*scanstate).tsmroutine;
        let next = match (*tsm).NextSampleBlock {
            Some(f) => f(scanstate, sample.nblocks),
            None => match sample.block {
                None => 0,
                Some(b) if b + 1 < sample.nblocks => b + 1,
                Some(_) => pg_sys::InvalidBlockNumber,
            },
        };
        if next == pg_sys::InvalidBlockNumber || next >= sample.nblocks {
            sample.block = None;
            return false;
        }
        let first = next as u64 * tid::PER_BLOCK;
        sample.rows = st.tree.id_range(first, first + tid::PER_BLOCK).collect();
        sample.maxoffset = sample.rows.last().map_or(0, |(id, _)| tid::to_pointer(*id).1);
        sample.block = Some(next);
        true
    }
}

/// TABLESAMPLE: the next visible version of the current block among the
/// offsets the method's `NextSampleTuple` picks; false (slot cleared) once
/// it has no more for this block.
pub unsafe fn sample_next_tuple(
    scan: pg_sys::TableScanDesc,
    scanstate: *mut pg_sys::SampleScanState,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: only scan_begin creates scans; as above.
    unsafe {
        let rel = (*scan).rs_rd;
        let snapshot = (*scan).rs_snapshot;
        let st = &*(*scan.cast::<OScan>()).state;
        let tsm = (*scanstate).tsmroutine;
        let next_tuple = (*tsm).NextSampleTuple.expect("tablesample method without NextSampleTuple");
        let Some(block) = st.sample.block else {
            pg_sys::ExecClearTuple(slot);
            return false;
        };
        loop {
            pgrx::check_for_interrupts!();
            let offset = next_tuple(scanstate, block, st.sample.maxoffset);
            if offset == INVALID_OFFSET {
                // This block is done.
                pg_sys::ExecClearTuple(slot);
                return false;
            }
            let Some(id) = tid::from_pointer(block, offset) else {
                continue;
            };
            let rows = &st.sample.rows;
            let Ok(i) = rows.binary_search_by_key(&id, |(id, _)| *id) else {
                continue;
            };
            let (id, v) = &rows[i];
            if examine(st, rel, snapshot, *id, v) {
                store_version(rel, slot, *id, v);
                return true;
            }
        }
    }
}

/// Index fetch state: PostgreSQL's part first.
#[repr(C)]
struct OFetch {
    base: pg_sys::IndexFetchTableData,
}

pub unsafe fn index_fetch_begin(rel: pg_sys::Relation) -> *mut pg_sys::IndexFetchTableData {
    // SAFETY: zeroed plain data.
    unsafe {
        let f = pg_sys::palloc0(size_of::<OFetch>()) as *mut OFetch;
        (*f).base.rel = rel;
        f.cast()
    }
}

pub unsafe fn index_fetch_end(data: *mut pg_sys::IndexFetchTableData) {
    // SAFETY: created by index_fetch_begin.
    unsafe { pg_sys::pfree(data.cast()) }
}

/// Fetches the version an index entry points at: the member of the chain
/// its row id roots (`am::layout::hot`; without HOT updates, the version itself)
/// that the snapshot sees. `*tidp` is left naming that member, as heap
/// does; a snapshot that may see several members (not MVCC) gets them one
/// per call, `call_again` asking for the next after `*tidp`. An entry whose
/// chain is gone or dead to everyone reports `all_dead`, letting the index
/// forget it.
pub unsafe fn index_fetch_tuple(
    data: *mut pg_sys::IndexFetchTableData,
    tidp: pg_sys::ItemPointer,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    call_again: *mut bool,
    all_dead: *mut bool,
) -> bool {
    // SAFETY: PostgreSQL passes the state it began and valid pointers.
    unsafe {
        let rel = (*data).rel;
        let first_call = !*call_again;
        *call_again = false;
        if !all_dead.is_null() {
            *all_dead = false;
        }
        let Some(id) = from_item_pointer(&*tidp) else {
            return false;
        };
        let tree = table_of(rel);
        let (root, after) = if first_call {
            (id, None)
        } else {
            // Continuing after member `id`, which the last call returned.
            let Some(v) = get_version(&tree, id) else {
                return false;
            };
            (hot::root_of(&decode(rel, id, &v), &v, id), Some(id))
        };
        let mut dead = first_call;
        let members = hot::chain(&tree, root, None);
        // The members after the one returned, in update order (a member
        // that took the root's id back is not last by id, see am::layout::hot);
        // if it is gone since, those with larger ids.
        let skip = match after {
            None => 0,
            Some(a) => match members.iter().position(|(mid, _)| *mid == a) {
                Some(i) => i + 1,
                None => members.iter().take_while(|(mid, _)| *mid <= a).count(),
            },
        };
        for (mid, v) in members.into_iter().skip(skip) {
            let h = decode(rel, mid, &v);
            if read_checked(rel, mid, &h, snapshot) {
                store_version(rel, slot, mid, &v);
                rows::to_item_pointer(mid, &mut *tidp);
                *call_again = !is_mvcc(snapshot);
                return true;
            }
            if dead && !rows::surely_dead(&h, rel) {
                dead = false;
            }
        }
        if first_call && !all_dead.is_null() {
            *all_dead = dead;
        }
        false
    }
}

/// Whether at most one version of a chain can satisfy `snapshot`.
///
/// # Safety
/// A valid snapshot.
pub(crate) unsafe fn is_mvcc(snapshot: pg_sys::Snapshot) -> bool {
    // SAFETY: per the contract.
    let t = unsafe { (*snapshot).snapshot_type };
    t == pg_sys::SnapshotType::SNAPSHOT_MVCC || t == pg_sys::SnapshotType::SNAPSHOT_HISTORIC_MVCC
}

/// Whether the index entries naming row id `id` are useless: every
/// version of its chain is gone or dead to every snapshot.
///
/// # Safety
/// `rel` is the open relation of `tree`.
pub unsafe fn chain_dead(rel: pg_sys::Relation, tree: &Table, id: u64) -> bool {
    hot::chain(tree, id, None)
        .iter()
        // SAFETY: per the contract.
        .all(|(mid, v)| unsafe { rows::surely_dead(&decode(rel, *mid, v), rel) })
}

pub unsafe fn tuple_fetch_row_version(
    rel: pg_sys::Relation,
    tidp: pg_sys::ItemPointer,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: PostgreSQL passes valid pointers.
    unsafe {
        let Some(id) = from_item_pointer(&*tidp) else {
            return false;
        };
        let Some(v) = get_version(&table_of(rel), id) else {
            return false;
        };
        let h = decode(rel, id, &v);
        if read_checked(rel, id, &h, snapshot) {
            store_version(rel, slot, id, &v);
            true
        } else {
            false
        }
    }
}

/// Visibility of one version read by TID, with SERIALIZABLE's predicate
/// lock and rw-conflict check (no-ops at other isolation levels).
///
/// # Safety
/// Valid open relation and snapshot.
unsafe fn read_checked(rel: pg_sys::Relation, id: u64, h: &Header, snapshot: pg_sys::Snapshot) -> bool {
    // SAFETY: caller guarantees valid pointers.
    unsafe {
        let visible = satisfies(h, snapshot, rel);
        if ssi::out_needed(rel, snapshot) {
            if visible {
                ssi::lock_tid(rel, id, h.xmin, snapshot);
                // A writer checks for conflicts after its write: reading
                // again after locking finds any xmax that slipped in
                // between (no buffer lock orders the two here).
                if let Some(v) = get_version(&table_of(rel), id) {
                    ssi::check_out(rel, &decode(rel, id, &v), true, snapshot);
                    return true;
                }
            }
            ssi::check_out(rel, h, visible, snapshot);
        }
        visible
    }
}

/// Whether `*tidp` could name a version of the scan's table: a row id
/// already handed out (heap: a block below the table's length).
pub unsafe fn tuple_tid_valid(scan: pg_sys::TableScanDesc, tidp: pg_sys::ItemPointer) -> bool {
    // SAFETY: PostgreSQL passes its scan and a valid pointer.
    unsafe {
        from_item_pointer(&*tidp).is_some_and(|id| id < table_of((*scan).rs_rd).tree.next_id())
    }
}

/// Follows the update chain from `*tidp` and leaves there the newest
/// version visible to the scan's snapshot (`heap_get_latest_tid`).
pub unsafe fn tuple_get_latest_tid(scan: pg_sys::TableScanDesc, tidp: pg_sys::ItemPointer) {
    // SAFETY: PostgreSQL passes its scan and a valid pointer.
    unsafe {
        let rel = (*scan).rs_rd;
        let snapshot = (*scan).rs_snapshot;
        let tree = table_of(rel);
        let Some(mut id) = from_item_pointer(&*tidp) else {
            return;
        };
        let mut prior: Option<Xid> = None;
        loop {
            let Some(v) = get_version(&tree, id) else {
                return;
            };
            let h = decode(rel, id, &v);
            if prior.is_some_and(|p| p != h.xmin) {
                return;
            }
            if satisfies(&h, snapshot, rel) {
                rows::to_item_pointer(id, &mut *tidp);
            }
            if h.xmax_invalid() || h.lock_only() || h.ctid == id || h.ctid == rows::MOVED {
                return;
            }
            prior = Some(version::update_xid(&h, &rows::PgXacts));
            id = h.ctid;
        }
    }
}

pub unsafe fn tuple_satisfies_snapshot(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    snapshot: pg_sys::Snapshot,
) -> bool {
    // SAFETY: the slot holds a row of rel with its tts_tid set.
    unsafe {
        let Some(id) = from_item_pointer(&(*slot).tts_tid) else {
            return false;
        };
        let Some(v) = get_version(&table_of(rel), id) else {
            return false;
        };
        satisfies(&decode(rel, id, &v), snapshot, rel)
    }
}

/// Tells the index which of its entries point at versions nobody can see.
pub unsafe fn index_delete_tuples(
    rel: pg_sys::Relation,
    delstate: *mut pg_sys::TM_IndexDeleteOp,
) -> pg_sys::TransactionId {
    // SAFETY: PostgreSQL passes ndeltids entries in deltids and status.
    unsafe {
        let d = &mut *delstate;
        let tree = table_of(rel);
        let deltids = std::slice::from_raw_parts_mut(d.deltids, d.ndeltids as usize);
        for del in deltids.iter() {
            let status = &mut *d.status.add(del.id as usize);
            status.knowndeletable = match from_item_pointer(&del.tid) {
                None => true,
                Some(id) => chain_dead(rel, &tree, id),
            };
        }
        pg_sys::InvalidTransactionId
    }
}

/// Which versions an index build gives entries.
///
/// Invariant: a `Snapshot` rule's snapshot is a live MVCC snapshot that
/// stays registered (by the build or by the scan handed to it) until the
/// build's scan is over.
#[derive(Clone, Copy)]
enum BuildRule {
    /// An ordinary build, under a lock that keeps other writers out: every
    /// version some snapshot may still see gets an entry, judged against
    /// this horizon (heap's SnapshotAny pass). Without HOT there is no
    /// chain to index under its root, so a recently dead version simply
    /// gets its own entry.
    Horizon(pg_sys::TransactionId),
    /// A concurrent build (`ii_Concurrent`: the first pass of CREATE INDEX
    /// CONCURRENTLY or REINDEX CONCURRENTLY, amcheck's heapallindexed):
    /// exactly the versions this snapshot sees, each alive. Writers run
    /// meanwhile; what they add after the snapshot is left to the
    /// validation pass ([`index_validate_scan`]), and snapshots older than
    /// this one are waited out before the index is marked valid.
    Snapshot(pg_sys::Snapshot),
}

/// An index entry an ordinary build makes: whether unique checks count
/// the version (`alive`) and whether it counts toward `reltuples`
/// (`counted`, the rows ANALYZE would count live).
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    alive: bool,
    counted: bool,
}

/// What an ordinary build does with a version in vacuum state `state`
/// (None: no entry). `anyvisible` (BRIN's summarization, under a lock that
/// lets writers in) takes in-progress inserts and deletes as visible. Only
/// in-progress states ask whether this transaction is the inserter or the
/// deleter (the closures may look up a MultiXactId).
///
/// Heap waits for another transaction's in-progress insert or delete when
/// checking uniqueness; here an ordinary build runs under ShareLock, which
/// no other writer of the table holds beside it, so such versions are this
/// transaction's own.
fn ordinary_entry(
    state: VacuumState,
    anyvisible: bool,
    inserted_by_me: impl FnOnce() -> bool,
    deleted_by_me: impl FnOnce() -> bool,
) -> Option<Entry> {
    match state {
        VacuumState::Dead => None,
        VacuumState::Live => Some(Entry {
            alive: true,
            counted: true,
        }),
        // Older snapshots may still read it through the new index; unique
        // checks must not see it.
        VacuumState::RecentlyDead => Some(Entry {
            alive: false,
            counted: false,
        }),
        // Counted as ANALYZE counts: only an insert that has happened from
        // this transaction's point of view.
        VacuumState::InsertInProgress => Some(Entry {
            alive: true,
            counted: anyvisible || inserted_by_me(),
        }),
        VacuumState::DeleteInProgress => Some(Entry {
            alive: false,
            counted: anyvisible || !deleted_by_me(),
        }),
    }
}

/// A version to index: (the row id its entries use, its own row id, the
/// version). A heap-only version is indexed under its chain's root
/// (`am::layout::hot`).
type BuildItem = (u64, u64, Vec<u8>);

/// Which versions an index build gives entries to: a handed-in scan's
/// snapshot decides (amcheck passes an MVCC one exactly when it sets
/// ii_Concurrent); otherwise ii_Concurrent does, and the build takes its
/// own snapshot as heap does. The snapshot registered here, if any, is
/// returned for the caller to unregister.
///
/// # Safety
/// As for [`index_build_range_scan`].
unsafe fn build_rule(
    table_rel: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    scan: pg_sys::TableScanDesc,
) -> (BuildRule, pg_sys::Snapshot) {
    // SAFETY: per the contract.
    unsafe {
        let given = (!scan.is_null()).then(|| (*scan).rs_snapshot);
        match given {
            Some(s) if (*s).snapshot_type == pg_sys::SnapshotType::SNAPSHOT_MVCC => {
                (BuildRule::Snapshot(s), std::ptr::null_mut())
            }
            None if (*index_info).ii_Concurrent => {
                let registered = pg_sys::RegisterSnapshot(pg_sys::GetTransactionSnapshot());
                (BuildRule::Snapshot(registered), registered)
            }
            _ => (
                BuildRule::Horizon(pg_sys::GetOldestNonRemovableTransactionId(table_rel)),
                std::ptr::null_mut(),
            ),
        }
    }
}

/// The versions an index build reads. Whole-table builds read in key
/// order, except BRIN's: it summarizes ranges of blocks and expects rows
/// in TID order (as a heap scan delivers them), which a keyed table's key
/// order is not. Block ranges (BRIN summaries) read the row ids those
/// blocks cover. In row-id order the chains come with their roots, so the
/// entries' TIDs ascend as BRIN needs.
///
/// `parallel` is NULL or the parallel scan of `tree`'s table.
fn build_versions(
    tree: &Table,
    brin: bool,
    blocks: Option<(pg_sys::BlockNumber, pg_sys::BlockNumber)>,
    parallel: pg_sys::ParallelTableScanDesc,
) -> Box<dyn Iterator<Item = BuildItem>> {
    let chains = |t: &Table, first: u64, end: u64| -> Box<dyn Iterator<Item = BuildItem>> {
        Box::new(
            hot::roots_in(t.clone(), first, end).flat_map(|(root, members)| {
                members.into_iter().map(move |(id, v)| (root, id, v))
            }),
        )
    };
    let with_root = |id: u64, v: Vec<u8>| {
        let root = Header::decode(&v, id).map_or(id, |h| hot::root_of(&h, &v, id));
        (root, id, v)
    };
    if !parallel.is_null() {
        // A parallel build (row-id order): this process indexes the
        // chunks it takes, a member under its root wherever that is.
        return Box::new(ParallelIds::new(parallel, tree.clone()).map(move |(id, v)| with_root(id, v)));
    }
    match blocks {
        None if brin => chains(tree, 0, u64::MAX),
        None => {
            let t = tree.clone();
            Box::new(
                tree.versions(Bound::Unbounded, Bound::Unbounded, Direction::Forward)
                    .map(move |item| {
                        let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
                        with_root(t.id_of(&k), v)
                    }),
            )
        }
        Some((start, n)) => {
            let first = start as u64 * tid::PER_BLOCK;
            let end = (start as u64 + n as u64) * tid::PER_BLOCK;
            chains(tree, first, end)
        }
    }
}

/// The entry (if any) an index build gives version header `h` under
/// `rule`.
///
/// # Safety
/// `index_info` is the build's.
unsafe fn build_entry(
    rule: BuildRule,
    h: &Header,
    anyvisible: bool,
    table_rel: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
) -> Option<Entry> {
    let oldest = match rule {
        // SAFETY: a registered or handed-in MVCC snapshot.
        BuildRule::Snapshot(s) => {
            return unsafe { satisfies(h, s, table_rel) }.then_some(Entry {
                alive: true,
                counted: true,
            })
        }
        BuildRule::Horizon(oldest) => oldest,
    };
    // SAFETY: a pure comparison of transaction ids.
    let removable = |x: Xid| unsafe { pg_sys::TransactionIdPrecedes(x.into(), oldest) };
    let state = version::vacuum_state(h, &rows::PgXacts, &removable, &mut Hints::default());
    if hot::hot_updated(h) && matches!(state, VacuumState::RecentlyDead | VacuumState::DeleteInProgress) {
        // Its chain's entry is made from the newest member; old snapshots,
        // which may see this one with other values in the new index's
        // columns, must not use the index (heap's broken HOT chain:
        // indcheckxmin).
        // SAFETY: per the contract.
        unsafe { (*index_info).ii_BrokenHotChain = true };
        return None;
    }
    let mine = |x: Xid| version::Xacts::is_current(&rows::PgXacts, x);
    ordinary_entry(
        state,
        anyvisible,
        || mine(h.xmin),
        || mine(version::update_xid(h, &rows::PgXacts)),
    )
}

/// Scans every version for an index build (`heapam_index_build_range_scan`
/// without HOT): an ordinary build gives an entry to each version some
/// snapshot may still see, a concurrent one to each version its MVCC
/// snapshot sees (see [`BuildRule`]); `tupleIsAlive` tells unique checks
/// which ones count. A `scan` handed in (amcheck's) supplies the snapshot
/// and is ended here, as `table_index_build_scan` promises its callers.
// Long because it is heapam_index_build_range_scan's one loop, with the
// executor state (`IndexRows`), snapshot and scan it set up released at
// its end, in one place.
pub unsafe fn index_build_range_scan(
    table_rel: pg_sys::Relation,
    index_rel: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    anyvisible: bool,
    progress: bool,
    start_blockno: pg_sys::BlockNumber,
    numblocks: pg_sys::BlockNumber,
    callback: pg_sys::IndexBuildCallback,
    callback_state: *mut std::ffi::c_void,
    scan: pg_sys::TableScanDesc,
) -> f64 {
    // SAFETY: PostgreSQL passes open relations, a valid IndexInfo and, if
    // any, a scan of table_rel begun by scan_begin; the executor state,
    // slot and any snapshot registered here are released here.
    unsafe {
        if crate::pg::is_toast(table_rel) {
            // The toast relation's index is never used: chunks are found
            // by key in the toast tree. (No scan is handed in: scan_begin
            // refuses toast relations.)
            return 0.0;
        }
        if (*(*index_rel).rd_index).indisprimary {
            crate::am::rekey::primary_index_built(table_rel, index_rel);
        }
        let tree = table_of(table_rel);
        let mut rows = IndexRows::new(table_rel, index_info);
        let (rule, registered) = build_rule(table_rel, index_info, scan);
        let brin = (*(*index_rel).rd_rel).relam == pg_sys::BRIN_AM_OID;
        let whole = numblocks == pg_sys::InvalidBlockNumber;
        let parallel = if scan.is_null() {
            std::ptr::null_mut()
        } else {
            (*scan).rs_parallel
        };
        let blocks = (!whole).then_some((start_blockno, numblocks));
        let versions = build_versions(&tree, brin, blocks, parallel);
        // Blocks done are only meaningful when rows come in TID order; a
        // keyed table's key order reports its blocks at the end.
        let in_tid_order = !whole || brin || tree.desc().is_none();
        let mut progress_report = progress.then(|| BlockProgress::start(&tree, start_blockno));
        let mut live = 0.0;
        let cb = callback.expect("index build callback");
        for (root, id, v) in versions {
            pgrx::check_for_interrupts!();
            if in_tid_order {
                if let Some(p) = progress_report.as_mut() {
                    p.at(root);
                }
            }
            let h: Header = decode(table_rel, id, &v);
            let Some(entry) = build_entry(rule, &h, anyvisible, table_rel, index_info) else {
                continue;
            };
            if entry.counted {
                live += 1.0;
            }
            if !rows.form(table_rel, id, &v) {
                continue;
            }
            let mut t = pg_sys::ItemPointerData::default();
            rows::to_item_pointer(root, &mut t);
            cb(
                index_rel,
                &mut t,
                rows.values.as_mut_ptr(),
                rows.isnull.as_mut_ptr(),
                entry.alive,
                callback_state,
            );
        }
        if let Some(p) = progress_report {
            p.finish();
        }
        if !scan.is_null() {
            scan_end(scan);
        }
        if !registered.is_null() {
            pg_sys::UnregisterSnapshot(registered);
        }
        rows.finish();
        live
    }
}

/// Index entries formed from versions, one at a time (index builds and the
/// validation pass). Invariant: `slot` is `estate`'s per-tuple scan tuple
/// and holds the last version formed; `predicate` is the index's prepared
/// predicate (NULL: none); everything is released by [`IndexRows::finish`].
struct IndexRows {
    index_info: *mut pg_sys::IndexInfo,
    estate: *mut pg_sys::EState,
    econtext: *mut pg_sys::ExprContext,
    slot: *mut pg_sys::TupleTableSlot,
    predicate: *mut pg_sys::ExprState,
    values: [pg_sys::Datum; pg_sys::INDEX_MAX_KEYS as usize],
    isnull: [bool; pg_sys::INDEX_MAX_KEYS as usize],
}

impl IndexRows {
    /// # Safety
    /// `table_rel` is open; `index_info` is the index's, valid until finish.
    unsafe fn new(table_rel: pg_sys::Relation, index_info: *mut pg_sys::IndexInfo) -> IndexRows {
        // SAFETY: per the contract; the executor state and slot are ours.
        unsafe {
            let estate = pg_sys::CreateExecutorState();
            let econtext = pg_sys::MakePerTupleExprContext(estate);
            let slot = pg_sys::table_slot_create(table_rel, std::ptr::null_mut());
            (*econtext).ecxt_scantuple = slot;
            let predicate = pg_sys::ExecPrepareQual((*index_info).ii_Predicate, estate);
            IndexRows {
                index_info,
                estate,
                econtext,
                slot,
                predicate,
                values: [pg_sys::Datum::from(0usize); pg_sys::INDEX_MAX_KEYS as usize],
                isnull: [false; pg_sys::INDEX_MAX_KEYS as usize],
            }
        }
    }

    /// Puts version `v` (row id `id`) in the slot and forms its index
    /// datums into `values`/`isnull`; false when the index's predicate
    /// rejects the row.
    ///
    /// # Safety
    /// `table_rel` is the relation `new` was given.
    unsafe fn form(&mut self, table_rel: pg_sys::Relation, id: u64, v: &[u8]) -> bool {
        // SAFETY: type invariant; the per-tuple context is reset before
        // each row, so a row's datums live until the next call.
        unsafe {
            pg_sys::MemoryContextReset((*self.econtext).ecxt_per_tuple_memory);
            store_version(table_rel, self.slot, id, v);
            if !self.predicate.is_null() && !exec_qual(self.predicate, self.econtext) {
                return false;
            }
            pg_sys::FormIndexDatum(
                self.index_info,
                self.slot,
                self.estate,
                self.values.as_mut_ptr(),
                self.isnull.as_mut_ptr(),
            );
            true
        }
    }

    /// Releases the slot and the executor state.
    ///
    /// # Safety
    /// No datum formed here is used afterwards.
    unsafe fn finish(self) {
        // SAFETY: type invariant.
        unsafe {
            pg_sys::ExecDropSingleTupleTableSlot(self.slot);
            pg_sys::FreeExecutorState(self.estate);
            // They pointed into the executor state just freed.
            (*self.index_info).ii_ExpressionsState = std::ptr::null_mut();
            (*self.index_info).ii_PredicateState = std::ptr::null_mut();
        }
    }
}

/// Progress of a scan over TID blocks for `pg_stat_progress_create_index`
/// (`blocks_total` / `blocks_done`). Invariant: `total` was published when
/// the scan started; `done` is the last value published since.
struct BlockProgress {
    total: u32,
    start: u32,
    done: Option<u64>,
}

impl BlockProgress {
    /// Publishes the table's TID blocks as the total; the scan starts at
    /// block `start`.
    fn start(table: &Table, start: u32) -> BlockProgress {
        let total = tid_blocks(table);
        // SAFETY: updates this backend's own progress entry (a no-op when
        // no command is being reported).
        unsafe {
            pg_sys::pgstat_progress_update_param(
                pg_sys::PROGRESS_SCAN_BLOCKS_TOTAL as c_int,
                total as i64,
            )
        };
        BlockProgress {
            total,
            start,
            done: None,
        }
    }

    /// The scan reached row id `id` (row ids arrive in ascending order).
    fn at(&mut self, id: u64) {
        let done = (id / tid::PER_BLOCK).saturating_sub(self.start as u64);
        if self.done != Some(done) {
            // SAFETY: as in `start`.
            unsafe {
                pg_sys::pgstat_progress_update_param(
                    pg_sys::PROGRESS_SCAN_BLOCKS_DONE as c_int,
                    done as i64,
                )
            };
            self.done = Some(done);
        }
    }

    /// The scan is over: every block is done (heap's last report).
    fn finish(self) {
        // SAFETY: as in `start`.
        unsafe {
            pg_sys::pgstat_progress_update_param(
                pg_sys::PROGRESS_SCAN_BLOCKS_DONE as c_int,
                self.total as i64,
            )
        };
    }
}

// `validate_index` sorts TIDs as int8 datums; with int8 passed by value
// a sorted datum is the number itself and owns no memory. PostgreSQL 15
// on 64-bit platforms (all pgrx supports) passes it by value.
const _: () = assert!(pg_sys::USE_FLOAT8_BYVAL == 1);

/// The row id of a TID as `validate_index` encodes it for its sort
/// (block number above the low 16 bits, offset in them); None for a TID
/// no row id maps to. Row ids ascend with the encoded values.
fn row_id_of_sorted_tid(encoded: i64) -> Option<u64> {
    let encoded = encoded as u64;
    tid::from_pointer((encoded >> 16) as u32, (encoded & 0xFFFF) as u16)
}

/// The row ids an index holds, in ascending order, read from the TID sort
/// `validate_index` filled from the index. Invariant: `sort` is that
/// performed datum sort, read forward only, and never read again once it
/// has reported its end (`spent`).
struct SortedTids {
    sort: *mut pg_sys::Tuplesortstate,
    spent: bool,
}

impl Iterator for SortedTids {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        while !self.spent {
            let mut d = pg_sys::Datum::from(0usize);
            let mut null = false;
            // SAFETY: type invariant; the datum is an int8 by value (checked
            // above), so nothing is handed to us to free.
            let more = unsafe {
                pg_sys::tuplesort_getdatum(self.sort, true, &mut d, &mut null, std::ptr::null_mut())
            };
            if !more {
                self.spent = true;
            } else if !null {
                if let Some(id) = row_id_of_sorted_tid(d.value() as i64) {
                    return Some(id);
                }
            }
        }
        None
    }
}

/// A merge of ascending row ids from `source` against ascending queries.
/// Invariant: `head` is the smallest id of the source not yet passed over
/// (None: the source is spent), and every id of the source below the last
/// one asked about has been passed over.
struct Merge<I: Iterator<Item = u64>> {
    source: I,
    head: Option<u64>,
}

impl<I: Iterator<Item = u64>> Merge<I> {
    fn new(mut source: I) -> Merge<I> {
        let head = source.next();
        Merge { source, head }
    }

    /// Whether the source holds `id`. Ids must be asked about in
    /// ascending order (repeats allowed); duplicates in the source are
    /// fine (GIN reports a TID once per key).
    fn holds(&mut self, id: u64) -> bool {
        while let Some(h) = self.head {
            if h >= id {
                return h == id;
            }
            self.head = self.source.next();
        }
        false
    }
}

/// The validation pass of CREATE INDEX CONCURRENTLY and REINDEX
/// CONCURRENTLY (`heapam_index_validate_scan` without HOT): every version
/// visible to `snapshot` whose row id the index does not hold yet gets its
/// entry, with a unique check for a unique index. Without HOT each version
/// is indexed under its own row id, so there are no chain roots to map.
///
/// `validate_index` has sorted the TIDs the index holds. The table is read
/// in row-id order and merged with that sort, so nothing is collected in
/// memory here (the sort itself spills to disk past
/// `maintenance_work_mem`). For the primary-key layout, row-id order walks
/// the row-id map, a point lookup per version; the alternative, a key-order
/// scan probing a sorted array of the index's row ids, would hold 8 bytes
/// per index entry in backend memory, unbounded (a failed Rust allocation
/// aborts the process rather than raising an ERROR).
pub unsafe fn index_validate_scan(
    table_rel: pg_sys::Relation,
    index_rel: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    snapshot: pg_sys::Snapshot,
    state: *mut pg_sys::ValidateIndexState,
) {
    // SAFETY: PostgreSQL passes open relations, a valid IndexInfo, a
    // registered MVCC snapshot and the state whose sort holds the index's
    // TIDs; the executor state and slot are created and released here.
    unsafe {
        if crate::pg::is_toast(table_rel) {
            // REINDEX TABLE CONCURRENTLY reaches the toast relation's
            // index too; it stays empty (see index_build_range_scan).
            return;
        }
        let tree = table_of(table_rel);
        let mut rows = IndexRows::new(table_rel, index_info);
        let check = if (*index_info).ii_Unique {
            pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES
        } else {
            pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO
        };
        let mut progress = BlockProgress::start(&tree, 0);
        let mut indexed = Merge::new(SortedTids {
            sort: (*state).tuplesort,
            spent: false,
        });
        // By chain (`am::layout::hot`): the index holds roots' row ids, and a chain
        // needs an entry when the snapshot sees one of its members.
        for (root, members) in hot::roots_in(tree.clone(), 0, u64::MAX) {
            pgrx::check_for_interrupts!();
            progress.at(root);
            let Some((id, v)) = members
                .into_iter()
                .find(|(id, v)| satisfies(&decode(table_rel, *id, v), snapshot, table_rel))
            else {
                continue;
            };
            (*state).htups += 1.0;
            if indexed.holds(root) {
                continue;
            }
            if !rows.form(table_rel, id, &v) {
                continue;
            }
            // A version deleted since the snapshot still gets its unique
            // check: btree then re-checks the version itself (SnapshotSelf
            // through index_fetch_tuple) and lets a dead one pass.
            let mut t = pg_sys::ItemPointerData::default();
            rows::to_item_pointer(root, &mut t);
            pg_sys::index_insert(
                index_rel,
                rows.values.as_mut_ptr(),
                rows.isnull.as_mut_ptr(),
                &mut t,
                table_rel,
                check,
                false,
                index_info,
            );
            (*state).tups_inserted += 1.0;
        }
        progress.finish();
        rows.finish();
    }
}

/// `ExecQual` (a static inline in PostgreSQL): NULL counts as false.
///
/// # Safety
/// `state` must be a qual prepared with `ExecPrepareQual`.
unsafe fn exec_qual(state: *mut pg_sys::ExprState, econtext: *mut pg_sys::ExprContext) -> bool {
    // SAFETY: evalfunc is set by ExecPrepareQual; evaluation runs in the
    // per-tuple memory context, as ExecEvalExprSwitchContext does.
    unsafe {
        let old = pg_sys::MemoryContextSwitchTo((*econtext).ecxt_per_tuple_memory);
        let mut null = false;
        let f = (*state).evalfunc.expect("prepared qual");
        let d = f(state, econtext, &mut null);
        pg_sys::MemoryContextSwitchTo(old);
        !null && d.value() != 0
    }
}

/// Largest block count ANALYZE may be told of: it prefetches the blocks it
/// samples through md.c, which refuses blocks beyond the first 1 GB segment
/// of our (empty) main fork.
const MAX_BLOCKS: u64 = pg_sys::RELSEG_SIZE as u64 - 1;

/// Row ids per block ANALYZE samples: 291 (the TID layout) unless the table
/// has more ids than [`MAX_BLOCKS`] blocks of 291 cover.
fn ids_per_block(next_id: u64) -> u64 {
    let blocks = next_id.div_ceil(tid::PER_BLOCK);
    tid::PER_BLOCK * blocks.div_ceil(MAX_BLOCKS).max(1)
}

/// TID blocks (291 row ids each) holding every row id handed out so far,
/// as a block number (at most `InvalidBlockNumber - 1`).
fn tid_blocks(table: &Table) -> u32 {
    table
        .tree
        .next_id()
        .div_ceil(tid::PER_BLOCK)
        .min(pg_sys::InvalidBlockNumber as u64 - 1) as u32
}

/// Whether this backend is running ANALYZE (of any table: inherited
/// statistics sample the children under the parent's progress entry).
/// ANALYZE reports progress from before it asks for the table's size
/// until it has sampled it; with `track_activities` off it reports none.
fn analyzing() -> bool {
    // SAFETY: MyBEEntry is this backend's own status entry (or NULL in
    // processes without one); only this backend writes its progress fields.
    unsafe {
        let be = pg_sys::MyBEEntry;
        !be.is_null()
            && (*be).st_progress_command
                == pg_sys::ProgressCommandType::PROGRESS_COMMAND_ANALYZE
    }
}

/// The table's size in blocks, for `relation_size`: TID blocks (291 row
/// ids each), which is what BRIN and bitmap scans need — they walk the
/// blocks a size reports and expect each row at its TID's block. While
/// ANALYZE runs it gets the blocks it samples instead: at most
/// [`MAX_BLOCKS`], more row ids each for very large tables.
///
/// # Safety
/// `rel` must be a valid open orioledb relation.
pub unsafe fn reported_blocks(rel: pg_sys::Relation) -> u64 {
    // SAFETY: caller guarantees an open relation.
    if unsafe { crate::pg::is_toast(rel) } {
        // Chunks are no rows (and the tree may not exist yet).
        return 0;
    }
    // SAFETY: caller guarantees an open relation.
    let table = unsafe { table_of(rel) };
    if analyzing() {
        let next = table.tree.next_id();
        let per = ids_per_block(next);
        let blocks = next.div_ceil(per);
        // SAFETY: an open relation.
        let oid = unsafe { (*rel).rd_id }.to_u32();
        ANALYZE_BLOCKS.with(|a| a.set(Some((oid, blocks, per))));
        blocks
    } else {
        tid_blocks(&table) as u64
    }
}

thread_local! {
    /// What [`reported_blocks`] told the running ANALYZE last: the table's
    /// OID, its block count and row ids per block. Sampling divides the
    /// table by these, not by the row ids handed out since.
    static ANALYZE_BLOCKS: std::cell::Cell<Option<(u32, u64, u64)>> =
        const { std::cell::Cell::new(None) };
}

/// The block count and row ids per block ANALYZE was told for `rel`.
///
/// # Safety
/// `rel` must be a valid open relation.
unsafe fn analyze_blocks(rel: pg_sys::Relation, table: &Table) -> (u64, u64) {
    // SAFETY: per the contract.
    let oid = unsafe { (*rel).rd_id }.to_u32();
    match ANALYZE_BLOCKS.with(|a| a.get()) {
        Some((o, blocks, per)) if o == oid => (blocks, per),
        _ => {
            let next = table.tree.next_id();
            let per = ids_per_block(next);
            (next.div_ceil(per), per)
        }
    }
}

/// TID blocks of the table (291 row ids each), for size estimates.
///
/// # Safety
/// `rel` must be a valid open orioledb relation.
pub unsafe fn current_blocks(rel: pg_sys::Relation) -> u64 {
    // SAFETY: caller guarantees an open relation.
    if unsafe { crate::pg::is_toast(rel) } {
        return 0;
    }
    // SAFETY: caller guarantees an open relation.
    tid_blocks(&unsafe { table_of(rel) }) as u64
}

/// ANALYZE's sample block: its versions, read when the block is chosen
/// (as heap reads the page), handed out one by one. One buffer for the
/// block's values instead of a vector, a boxed iterator and a table handle
/// per row (those were a third of ANALYZE's time on pgbench's accounts).
/// Invariant: every range in `rows` lies within `bytes`; rows before
/// `next` were handed out.
#[derive(Default)]
struct AnalyzeBlock {
    bytes: Vec<u8>,
    rows: Vec<(u64, std::ops::Range<usize>)>,
    next: usize,
    /// The tuple the slot was last given (`rows::build_tuple_in`): ANALYZE
    /// copies the rows it keeps before it asks for the next.
    tuple: Vec<u64>,
}

impl AnalyzeBlock {
    fn push(&mut self, id: u64, v: &[u8]) {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(v);
        self.rows.push((id, at..self.bytes.len()));
    }

    /// Empties the block for the next one, keeping its buffers.
    fn clear(&mut self) {
        self.bytes.clear();
        self.rows.clear();
        self.next = 0;
    }
}

/// A keyed table's leaves divided among the blocks ANALYZE was told of:
/// leaf `l` of `L` falls to block `l * N / L` of `N`, and a block's leaves
/// are read in key order. Sampling by row-id block instead looked up every
/// version by its row id, a descent each once updates had scattered the
/// ids over the leaves (pgbench's accounts: 3 s against heap's 0.13 s).
/// Every leaf belongs to one block, so the sampled blocks' rows are a
/// uniform sample and their counts scale to the table's as heap's do.
/// Only the key where each block's first leaf begins is kept (at most
/// `N`, which ANALYZE caps). Invariant: `firsts` ascends in both block and
/// key and starts with block 0 at the range's start (`None`).
struct LeafSplit {
    firsts: Vec<(u64, Option<Vec<u8>>)>,
    leaves: u64,
    blocks: u64,
    /// Leaf starts pushed so far.
    seen: u64,
}

impl LeafSplit {
    /// A split of `leaves` leaves among `blocks` blocks, before the starts
    /// of the leaves after the first are pushed in order.
    fn new(leaves: u64, blocks: u64) -> LeafSplit {
        LeafSplit {
            firsts: vec![(0, None)],
            leaves: leaves.max(1),
            blocks: blocks.max(1),
            seen: 0,
        }
    }

    /// The next leaf's start. Leaves beyond the count (split since it was
    /// taken) fall to the last block.
    fn push(&mut self, start: &[u8]) {
        self.seen += 1;
        let b = (self.seen as u128 * self.blocks as u128 / self.leaves as u128)
            .min(self.blocks as u128 - 1) as u64;
        if self.firsts.last().is_some_and(|(last, _)| *last != b) {
            self.firsts.push((b, Some(start.to_vec())));
        }
    }

    /// The key range of block `b` (None: no leaf fell to it).
    fn range(&self, b: u64) -> Option<(Bound<Vec<u8>>, Bound<Vec<u8>>)> {
        let i = self.firsts.binary_search_by_key(&b, |(block, _)| *block).ok()?;
        let lo = match &self.firsts[i].1 {
            Some(k) => Bound::Included(k.clone()),
            None => Bound::Unbounded,
        };
        let hi = match self.firsts.get(i + 1) {
            Some((_, Some(k))) => Bound::Excluded(k.clone()),
            _ => Bound::Unbounded,
        };
        Some((lo, hi))
    }

    /// Divides `table`'s versions among `blocks` blocks: the level above
    /// the leaves is read twice, to count the leaves and to keep the
    /// blocks' first keys.
    fn of(table: &Table, blocks: u64) -> LeafSplit {
        let (lo, hi) = table.all_versions();
        let key = |b: Bound<Vec<u8>>| match b {
            Bound::Included(k) | Bound::Excluded(k) => Some(k),
            Bound::Unbounded => None,
        };
        let (lo, hi) = (key(lo).unwrap_or_default(), key(hi));
        let mut starts = 0u64;
        let tree = &table.tree;
        tree.for_each_leaf_start(&lo, hi.as_deref(), |_| starts += 1)
            .unwrap_or_else(|e| crate::pg::engine::report(e));
        let mut split = LeafSplit::new(starts + 1, blocks);
        tree.for_each_leaf_start(&lo, hi.as_deref(), |k| split.push(k))
            .unwrap_or_else(|e| crate::pg::engine::report(e));
        split
    }
}

/// Starts sampling one block: the versions whose row ids it covers, or in
/// a keyed table its share of the leaves ([`LeafSplit`]).
pub unsafe fn analyze_next_block(
    scan: pg_sys::TableScanDesc,
    blockno: pg_sys::BlockNumber,
) -> bool {
    // SAFETY: only scan_begin creates scans.
    unsafe {
        let st = &mut *(*scan.cast::<OScan>()).state;
        let analyzing = analyzing();
        // The blocks relation_size reported to this ANALYZE.
        let (blocks, per) = if analyzing {
            analyze_blocks((*scan).rs_rd, &st.tree)
        } else {
            (0, tid::PER_BLOCK)
        };
        // The block before this one was read by now (a block is about a
        // leaf: ANALYZE's blocks are leaves or TID blocks).
        let visited = u64::from(st.analyze_cost.is_some());
        st.analyze_cost.get_or_insert_with(Default::default).charge(visited);
        let block = st.analyze.get_or_insert_with(AnalyzeBlock::default);
        block.clear();
        if analyzing && st.tree.desc().is_some() {
            let split = st
                .analyze_split
                .get_or_insert_with(|| LeafSplit::of(&st.tree, blocks));
            if let Some((lo, hi)) = split.range(blockno as u64) {
                let tree = &st.tree;
                let resume = match (st.analyze_resume.take(), &lo) {
                    (Some((end, pno)), Bound::Included(start)) if end == *start => Some(pno),
                    _ => None,
                };
                let end = match &hi {
                    Bound::Excluded(k) => Some(k.clone()),
                    _ => None,
                };
                let next = tree.for_each_version_resuming(lo, hi, resume, |k, v| {
                    block.push(tree.id_of(k), v);
                    true
                });
                st.analyze_resume = end.zip(next);
            }
            return true;
        }
        let first = blockno as u64 * per;
        let (walk, adjacent) = match st.analyze_walk.take() {
            Some(w) if w.at == first => (w.ids, w.adjacent + 1),
            _ => (None, 0),
        };
        st.analyze_walk = Some(match walk {
            Some(ids) => AnalyzeWalk { ids: Some(ids), at: first, adjacent },
            // Sampling block after block (every block, as in a table of
            // fewer blocks than the sample has rows): a walk from here.
            None if adjacent >= WALK_AFTER => AnalyzeWalk {
                ids: Some(st.tree.id_range(first, tid::LIMIT).peekable()),
                at: first,
                adjacent,
            },
            // A block alone (the sample skips blocks): its range only, as
            // a walk reads a window of blocks ahead.
            None => AnalyzeWalk { ids: None, at: first, adjacent },
        }
        .take_block(&st.tree, block, first + per));
        true
    }
}

/// After how many sampled blocks in a row ANALYZE starts a walk.
const WALK_AFTER: u32 = 2;

/// ANALYZE's walk over a table in row-id order. When it samples block
/// after block (every block of a table with fewer blocks than its sample
/// has rows), one range from there on, read a window of blocks at a time,
/// gives the sampled blocks (ascending, as ANALYZE's block sampler gives
/// them) their versions in turn: a range per block cost a descent for its
/// first leaf, another for the leaf it ended in, and one into the row-id
/// map — a third of ANALYZE's time on a freshly loaded `pgbench_accounts`.
/// A walk starts once [`WALK_AFTER`] blocks in a row were sampled and ends
/// at the first gap; a block sampled alone reads its own range only (`ids`
/// None), since a walk reads a window of blocks ahead. Invariant: `ids`
/// holds no version with a row id below `at`, where the block being
/// sampled begins (then, once it is read, where it ended).
struct AnalyzeWalk {
    ids: Option<std::iter::Peekable<IdRange>>,
    at: u64,
    /// How many blocks in a row ANALYZE sampled before this one.
    adjacent: u32,
}

impl AnalyzeWalk {
    /// Puts the versions with row ids in `self.at..end` into `block`, from
    /// the walk or from the block's own range; `at` becomes `end`.
    fn take_block(mut self, table: &Table, block: &mut AnalyzeBlock, end: u64) -> AnalyzeWalk {
        match self.ids.as_mut() {
            Some(ids) => {
                while let Some((id, v)) = ids.next_if(|(id, _)| *id < end) {
                    block.push(id, &v);
                }
            }
            None => {
                for (id, v) in table.id_range(self.at, end) {
                    block.push(id, &v);
                }
            }
        }
        self.at = end;
        self
    }
}

/// Next sample row of the current block (`heapam_scan_analyze_next_tuple`):
/// live rows and our own in-progress inserts are returned and counted live;
/// dead ones are counted dead; others' in-progress inserts are skipped and
/// others' in-progress deletes sampled as live, as heap does.
pub unsafe fn analyze_next_tuple(
    scan: pg_sys::TableScanDesc,
    oldest_xmin: pg_sys::TransactionId,
    liverows: *mut f64,
    deadrows: *mut f64,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: only scan_begin creates scans; ANALYZE passes valid pointers.
    unsafe {
        let rel = (*scan).rs_rd;
        let st = &mut *(*scan.cast::<OScan>()).state;
        let removable = |x: Xid| pg_sys::TransactionIdPrecedes(x.into(), oldest_xmin);
        let Some(block) = st.analyze.as_mut() else {
            return false;
        };
        while let Some((id, range)) = block.rows.get(block.next).cloned() {
            block.next += 1;
            let v = &block.bytes[range];
            let h = decode(rel, id, v);
            let mine = |x: Xid| version::Xacts::is_current(&rows::PgXacts, x);
            let take = match version::vacuum_state(
                &h,
                &rows::PgXacts,
                &removable,
                &mut Hints::default(),
            ) {
                VacuumState::Live => {
                    *liverows += 1.0;
                    true
                }
                VacuumState::Dead | VacuumState::RecentlyDead => {
                    *deadrows += 1.0;
                    false
                }
                VacuumState::InsertInProgress => {
                    if mine(h.xmin) {
                        *liverows += 1.0;
                    }
                    mine(h.xmin)
                }
                VacuumState::DeleteInProgress => {
                    if mine(version::update_xid(&h, &rows::PgXacts)) {
                        *deadrows += 1.0;
                        false
                    } else {
                        *liverows += 1.0;
                        true
                    }
                }
            };
            if take {
                let relid = (*rel).rd_id;
                let tup = rows::build_tuple_in(&h, v, id, relid, &mut block.tuple);
                // The slot borrows the tuple (see `AnalyzeBlock::tuple`).
                pg_sys::ExecStoreHeapTuple(tup, slot, false);
                (*slot).tts_tableOid = relid;
                rows::to_item_pointer(id, &mut (*slot).tts_tid);
                return true;
            }
        }
        block.clear();
        pg_sys::ExecClearTuple(slot);
        false
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn sorted_tids_decode_to_ascending_row_ids() {
        let enc = |id: u64| {
            let (b, o) = tid::to_pointer(id);
            ((b as i64) << 16) | o as i64
        };
        for id in [0u64, 1, 290, 291, 292, 5000, 38_141_952, tid::LIMIT - 1] {
            assert_eq!(row_id_of_sorted_tid(enc(id)), Some(id));
        }
        // Encoded order is row-id order across a block boundary.
        assert!(enc(290) < enc(291) && enc(291) < enc(292));
        // Offsets no row id maps to.
        assert_eq!(row_id_of_sorted_tid(3 << 16), None);
        assert_eq!(row_id_of_sorted_tid((3 << 16) | 292), None);
    }

    #[test]
    fn merge_finds_exactly_the_source_ids() {
        let source = [2u64, 3, 3, 7, 10, 11];
        let mut m = Merge::new(source.iter().copied());
        let asked = [0u64, 2, 3, 4, 7, 7, 8, 11, 12];
        let got: Vec<bool> = asked.iter().map(|&id| m.holds(id)).collect();
        assert_eq!(
            got,
            [false, true, true, false, true, true, false, true, false]
        );
        let mut empty = Merge::new(std::iter::empty());
        assert!(!empty.holds(0));
    }

    #[test]
    fn ordinary_builds_index_what_old_snapshots_may_see() {
        let yes = || true;
        let no = || false;
        assert_eq!(ordinary_entry(VacuumState::Dead, false, yes, yes), None);
        let e = |alive, counted| Some(Entry { alive, counted });
        assert_eq!(ordinary_entry(VacuumState::Live, false, no, no), e(true, true));
        assert_eq!(
            ordinary_entry(VacuumState::RecentlyDead, true, yes, yes),
            e(false, false)
        );
        // In-progress inserts count only when ours (or anyvisible).
        assert_eq!(
            ordinary_entry(VacuumState::InsertInProgress, false, yes, no),
            e(true, true)
        );
        assert_eq!(
            ordinary_entry(VacuumState::InsertInProgress, false, no, no),
            e(true, false)
        );
        assert_eq!(
            ordinary_entry(VacuumState::InsertInProgress, true, no, no),
            e(true, true)
        );
        // In-progress deletes count unless ours (or anyvisible).
        assert_eq!(
            ordinary_entry(VacuumState::DeleteInProgress, false, no, yes),
            e(false, false)
        );
        assert_eq!(
            ordinary_entry(VacuumState::DeleteInProgress, false, no, no),
            e(false, true)
        );
        assert_eq!(
            ordinary_entry(VacuumState::DeleteInProgress, true, no, yes),
            e(false, true)
        );
    }

    #[test]
    fn leaf_split_gives_every_leaf_to_one_block() {
        use Bound::*;
        let k = |n: u16| n.to_be_bytes().to_vec();
        let split = |leaves: u64, blocks: u64| {
            let mut s = LeafSplit::new(leaves, blocks);
            for n in 1..leaves {
                s.push(&k(n as u16 * 10));
            }
            s
        };
        // Five leaves (starts 10, 20, 30, 40) in three blocks: leaf l to
        // block l * 3 / 5, so 0 1 | 2 3 | 4.
        let s = split(5, 3);
        assert_eq!(s.range(0), Some((Unbounded, Excluded(k(20)))));
        assert_eq!(s.range(1), Some((Included(k(20)), Excluded(k(40)))));
        assert_eq!(s.range(2), Some((Included(k(40)), Unbounded)));
        assert_eq!(s.range(3), None);
        // More blocks than leaves: some blocks have none, each leaf one.
        let wide = split(2, 5);
        let got: Vec<_> = (0..5).filter_map(|b| wide.range(b)).collect();
        assert_eq!(got, vec![(Unbounded, Excluded(k(10))), (Included(k(10)), Unbounded)]);
        let one = split(1, 2);
        assert_eq!(one.range(0), Some((Unbounded, Unbounded)));
        assert_eq!(one.range(1), None);
        // Leaves that appeared after counting go to the last block.
        let mut grown = LeafSplit::new(2, 2);
        for n in 1..4u16 {
            grown.push(&k(n * 10));
        }
        assert_eq!(grown.range(1), Some((Included(k(10)), Unbounded)));
        // At most one key kept per block.
        let many = split(200, 3);
        assert_eq!(many.firsts.len(), 3);
    }
}
