//! VACUUM of an orioledb table (`relation_vacuum`).
//!
//! Dead row versions leave the table without VACUUM (the pruner and the
//! per-backend sweep, `rows.rs`), but their index entries stay until an
//! index scan happens to mark them dead or a btree page fills up with
//! entries of unchanged keys (bottom-up deletion). An index on a column
//! that every UPDATE changes gets neither, so VACUUM cleans indexes the way
//! `vacuumlazy.c` does after its heap pass:
//!
//! 1. every leaf of the table's tree is pruned (the sweep's step, over the
//!    whole tree at once);
//! 2. the versions left are counted (live, and dead but still visible to
//!    someone) for the statistics;
//! 3. unless `INDEX_CLEANUP off`, every index gets `index_bulk_delete` with a
//!    callback that calls an entry dead when its row id has no version any
//!    more (pruned; row ids are never reused) or its version is dead to
//!    every snapshot, then `index_vacuum_cleanup`;
//! 4. `pg_class` (`relpages` in TID blocks, `reltuples`) and the cumulative
//!    statistics (`n_live_tup`, `n_dead_tup`, last vacuum time) are updated,
//!    so autovacuum, which triggers on dead rows counted by UPDATE and
//!    DELETE, comes back only after more of them.
//!
//! 5. freezing (step 2's pass): a version whose inserter committed before
//!    VACUUM's freeze limit is marked frozen, and an xmax that means
//!    nothing any more is removed (`version::freeze`); in an aggressive
//!    VACUUM, after an engine checkpoint (pruning is not logged),
//!    `relfrozenxid` becomes the oldest transaction id still named (or the
//!    horizon), `relminmxid` the oldest MultiXactId left. A MultiXactId
//!    still in use keeps `relfrozenxid` where it was.
//!
//! In a table in row-id order, a VACUUM that is not aggressive skips runs
//! of at least 32 TID blocks that the visibility map has all-visible
//! (`am::rows::vismap`; as heap skips all-visible pages): nothing there is
//! removable, their index entries stay, and `reltuples` is extrapolated
//! from the blocks read. COPY FREEZE sets the bits of the blocks it
//! fills, so the VACUUM after such a load (pgbench's) reads nothing.
//!
//! Nothing is truncated. Toast relations hold chunks without transaction
//! ids: their VACUUM only advances their horizons; their index stays empty.
// The `pub unsafe fn` here implements a `TableAmRoutine` callback: its
// safety contract is PostgreSQL's for that callback.
#![allow(clippy::missing_safety_doc)]

use crate::am::rows::{self, decode, from_item_pointer, table_of, Horizon};
use crate::am::layout::table::Table;
use crate::am::rows::vismap::BlockCounts;
use orioledb_engine::btree::Change;
use orioledb_engine::version::{self, tid, Header, Hints, VacuumState, Xid};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;
use std::ops::Bound;

/// What `index_bulk_delete`'s callback needs. Invariant: `rel` is the open
/// (VACUUM-locked) table whose primary tree `table` is, for the whole
/// bulk deletion.
struct DeadCheck {
    rel: pg_sys::Relation,
    table: Table,
    /// Row ids the counting pass found alive (see [`Alive`]).
    alive: Alive,
}

/// Row ids whose index entries must stay: the counting pass saw a version
/// there (or a member of the HOT chain rooted there) that is not dead to
/// everyone. A bit set is final for this VACUUM — such an entry is kept
/// without looking (at worst one that just died waits for the next
/// VACUUM); an id without its bit is looked up (`scan::chain_dead`), so
/// versions inserted after the pass are never taken for dead. Invariant:
/// bit `id` is word `id / 64`; ids from `limit` on are not recorded (the
/// bitmap stays within `maintenance_work_mem`).
#[derive(Default)]
struct Alive {
    words: Vec<u64>,
    limit: u64,
}

impl Alive {
    fn with_budget(bytes: usize) -> Alive {
        Alive {
            words: Vec::new(),
            limit: bytes as u64 * 8,
        }
    }

    fn set(&mut self, id: u64) {
        if id >= self.limit {
            return;
        }
        let w = (id / 64) as usize;
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << (id % 64);
    }

    /// Sets the bits of ids `first..end` (a skipped run of blocks).
    fn set_range(&mut self, first: u64, end: u64) {
        let end = end.min(self.limit);
        let mut id = first;
        while id < end && !id.is_multiple_of(64) {
            self.set(id);
            id += 1;
        }
        while id + 64 <= end {
            let w = (id / 64) as usize;
            if self.words.len() <= w {
                self.words.resize(w + 1, 0);
            }
            self.words[w] = u64::MAX;
            id += 64;
        }
        while id < end {
            self.set(id);
            id += 1;
        }
    }

    fn get(&self, id: u64) -> bool {
        self.words
            .get((id / 64) as usize)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }
}

/// `IndexBulkDeleteCallback`: whether the index entry pointing at `tid` may
/// go — its chain's versions (`am::layout::hot`) are gone or dead to every snapshot. TIDs that name no
/// possible row id are kept (no orioledb index holds one).
#[pg_guard]
unsafe extern "C-unwind" fn entry_is_dead(
    tid: pg_sys::ItemPointer,
    state: *mut std::ffi::c_void,
) -> bool {
    // SAFETY: `state` is the DeadCheck that `vacuum` passed to
    // index_bulk_delete, alive for the call; the index AM passes a valid
    // ItemPointer.
    unsafe {
        let check = &*state.cast::<DeadCheck>();
        let Some(id) = from_item_pointer(&*tid) else {
            return false;
        };
        !check.alive.get(id) && crate::am::scan::chain_dead(check.rel, &check.table, id)
    }
}

/// Version counts of a table after pruning, and what freezing left.
#[derive(Default)]
struct Counts {
    /// Live versions and versions whose deleter is still running (heap
    /// counts both as live).
    live: f64,
    /// Dead versions some snapshot may still see.
    recently_dead: f64,
    /// Versions whose header freezing changed.
    frozen: u64,
    /// The oldest transaction id a version still names (None: none older
    /// than the starting horizon), and whether a MultiXactId was left in
    /// some xmax (then relfrozenxid is not advanced).
    oldest_xid: Option<pg_sys::TransactionId>,
    multi_left: bool,
    /// The oldest MultiXactId left in an xmax.
    oldest_multi: Option<pg_sys::MultiXactId>,
    /// Versions per TID block when the counting pass saw them, before the
    /// index cleanup, and whether they were all visible to everyone (see
    /// am::rows::vismap).
    per_block: BlockCounts,
    /// The row ids whose index entries stay without a lookup.
    alive: Alive,
    /// TID blocks the pass skipped (all-visible in the map when it began).
    skipped_blocks: u64,
}

/// VACUUM's transaction horizons (`vacuum_set_xid_limits`).
#[derive(Clone, Copy)]
struct Cutoffs {
    oldest_xmin: pg_sys::TransactionId,
    oldest_mxact: pg_sys::MultiXactId,
    freeze_limit: pg_sys::TransactionId,
}

impl Counts {
    /// Folds one version's freezing result into the table's horizons.
    fn fold(&mut self, f: &version::Freeze) {
        if let Some(x) = f.oldest_xid {
            let x = pg_sys::TransactionId::from(x);
            // SAFETY: a pure comparison of transaction ids.
            let older = self
                .oldest_xid
                .is_none_or(|o| unsafe { pg_sys::TransactionIdPrecedes(x, o) });
            if older {
                self.oldest_xid = Some(x);
            }
        }
        if let Some(m) = f.multi {
            self.multi_left = true;
            let m = pg_sys::MultiXactId::from(m);
            // SAFETY: a pure comparison of MultiXactIds.
            let older = self
                .oldest_multi
                .is_none_or(|o| unsafe { pg_sys::MultiXactIdPrecedes(m, o) });
            if older {
                self.oldest_multi = Some(m);
            }
        }
    }
}

/// Prunes every leaf of the table's tree and counts what is left, leaf by
/// leaf: each leaf's versions are counted right after it was pruned, while
/// it is still in the pool (a table larger than the pool is read once).
///
/// # Safety
/// `rel` must be a valid open orioledb relation (not a toast relation).
///
/// `skip` are runs of TID blocks `[first, end)` (ascending) to pass over:
/// in the row-id layout a run is one key range, from its first row id's
/// key to its end's (a chain member's key starts with its root's id).
unsafe fn prune_and_count(
    rel: pg_sys::Relation,
    table: &Table,
    cutoffs: Cutoffs,
    skip: &[(u64, u64)],
) -> Counts {
    // SAFETY: per the contract.
    let mut count = unsafe { Counter::new(rel, table, cutoffs) };
    let mut runs = skip.iter().copied().peekable();
    let mut at: Option<Vec<u8>> = None;
    let mut cost = crate::pg::vacuum_cost::CostMeter::default();
    let mut leaves = 0u64;
    loop {
        // A leaf pruned, and read again for counting.
        cost.charge_and_pause(2);
        leaves += 1;
        if leaves % crate::pg::vacuum_cost::FAILSAFE_EVERY_PAGES == 0 {
            // SAFETY: per the contract.
            unsafe { crate::pg::vacuum_cost::failsafe(rel) };
        }
        let next = table
            .tree
            .prune_leaf_at(at.as_deref())
            .unwrap_or_else(|e| crate::pg::engine::report(e));
        rows::after_change();
        // Counting stops where the next run to skip begins.
        let run = runs.peek().copied();
        let run_key = run.map(|(first, _)| tid::key(first * tid::PER_BLOCK).to_vec());
        let stop = match (&next, &run_key) {
            (Some(n), Some(r)) if r < n => Some(r.clone()),
            (None, Some(r)) => Some(r.clone()),
            _ => next.clone(),
        };
        let lo = at.map_or(Bound::Unbounded, Bound::Included);
        let hi = stop.clone().map_or(Bound::Unbounded, Bound::Excluded);
        table.for_each_version_in(lo, hi, |k, v| {
            // SAFETY: per the contract.
            unsafe { count.version(k, v) };
            true
        });
        match (run, stop) {
            (Some((first, end)), Some(k)) if Some(&k) == run_key.as_ref() => {
                runs.next();
                count.skip(first, end);
                at = Some(tid::key(end * tid::PER_BLOCK).to_vec());
            }
            (_, Some(k)) => at = Some(k),
            (_, None) => break,
        }
    }
    // The last leaf's reads and dirtied pages.
    cost.charge(0);
    count.counts
}

/// The memory VACUUM may use for row ids, in kB: `autovacuum_work_mem` in
/// autovacuum workers when it is set, else `maintenance_work_mem`, as heap's
/// dead-TID store.
fn work_mem_kb() -> usize {
    extern "C" {
        // postmaster/autovacuum.h; neither raises an ERROR.
        fn IsAutoVacuumWorkerProcess() -> bool;
        static autovacuum_work_mem: std::ffi::c_int;
    }
    // SAFETY: GUC reads and a process-type check on the backend's thread.
    unsafe {
        if IsAutoVacuumWorkerProcess() && autovacuum_work_mem != -1 {
            autovacuum_work_mem as usize
        } else {
            pg_sys::maintenance_work_mem as usize
        }
    }
}

/// What VACUUM's count needs while it walks the versions.
struct Counter<'a> {
    rel: pg_sys::Relation,
    table: &'a Table,
    horizon: Horizon,
    freeze_limit: Xid,
    /// The visibility map's horizon (`vismap::header_all_visible`).
    oldest_xmin: pg_sys::TransactionId,
    /// The last version met that is its own chain's root (see
    /// [`Counter::note_root`]).
    last_root: Option<u64>,
    counts: Counts,
    /// The row-id chain root whose versions the walk is in (key order:
    /// a root's own key comes before its members').
    root: Option<u64>,
    /// Whether the recovery-conflict horizon of this VACUUM's freezing is
    /// logged (once, before its first freeze).
    conflict_logged: bool,
}

impl Counter<'_> {
    /// # Safety
    /// `rel` is a valid open orioledb relation whose tree is `table`.
    unsafe fn new(rel: pg_sys::Relation, table: &Table, cutoffs: Cutoffs) -> Counter<'_> {
        Counter {
            rel,
            table,
            // SAFETY: per the contract.
            horizon: unsafe { Horizon::of(rel) },
            freeze_limit: cutoffs.freeze_limit.into_inner(),
            oldest_xmin: cutoffs.oldest_xmin,
            last_root: None,
            counts: Counts {
                alive: Alive::with_budget(work_mem_kb() * 1024),
                ..Counts::default()
            },
            root: None,
            conflict_logged: false,
        }
    }

    /// Freezes version `k` (value `v`) if it is old enough and counts it.
    ///
    /// # Safety
    /// As for [`Counter::new`].
    unsafe fn version(&mut self, k: &[u8], v: &[u8]) {
        let id = self.table.id_of(k);
        self.note_redirect(k, id);
        // SAFETY: per the contract.
        let h = unsafe { decode(self.rel, id, v) };
        // Pruned meanwhile: names nothing any more. (A root pruned so: its
        // members come without it, as if it had been pruned before.)
        let Some((h, f)) = self.freeze(k, h) else {
            if self.root == Some(id) {
                self.root = None;
            }
            return;
        };
        self.note_root(&h, v, id);
        let counts = &mut self.counts;
        counts.fold(&f);
        let block = (id / version::tid::PER_BLOCK) as usize;
        let oldest_xmin = self.oldest_xmin;
        counts
            .per_block
            .version(block, || crate::am::rows::vismap::header_all_visible(&h, oldest_xmin));
        let horizon = &self.horizon;
        let removable = |x: Xid| horizon.removable(x);
        let state = version::vacuum_state(&h, &rows::PgXacts, &removable, &mut Hints::default());
        match state {
            VacuumState::Live | VacuumState::DeleteInProgress => counts.live += 1.0,
            VacuumState::RecentlyDead => counts.recently_dead += 1.0,
            // Dead versions a concurrent pruner has not reached yet, and
            // inserts that will count themselves when they commit.
            VacuumState::Dead | VacuumState::InsertInProgress => {}
        }
        if state != VacuumState::Dead {
            // Index entries name a chain's root: a live member keeps it.
            counts.alive.set(crate::am::layout::hot::root_of(&h, v, id));
        }
    }

    /// Passes over TID blocks `first..end`, which the visibility map had
    /// all-visible when VACUUM began: nothing there is removable by this
    /// VACUUM (a change since then is newer than its horizon), their index
    /// entries stay, and the map keeps their bits as writers leave them.
    fn skip(&mut self, first: u64, end: u64) {
        let c = &mut self.counts;
        c.alive.set_range(first * tid::PER_BLOCK, end * tid::PER_BLOCK);
        c.per_block.skip(first as usize, end as usize);
        c.skipped_blocks += end - first;
        self.root = None;
        self.last_root = None;
    }

    /// Marks the block of a row-id chain's root [`BlockCounts::REDIRECT`] when the
    /// chain's member `k` comes without its root (pruned).
    fn note_redirect(&mut self, k: &[u8], id: u64) {
        let root = crate::am::layout::table::member_root(k);
        if let Some(r) = root.filter(|&r| Some(r) != self.root) {
            let block = (r / version::tid::PER_BLOCK) as usize;
            self.counts.per_block.redirect(block);
        }
        self.root = Some(root.unwrap_or(id));
    }

    /// Marks the block of a chain's root [`BlockCounts::REDIRECT`] when
    /// heap-only version `id` comes without the root's own version (pruned:
    /// its row-id map entry stays as the chain's redirect, which this walk
    /// of the versions does not see). A root comes before its members in
    /// either layout: in a keyed table they share the key prefix and the
    /// root has the lowest row id.
    fn note_root(&mut self, h: &Header, v: &[u8], id: u64) {
        let root = crate::am::layout::hot::root_of(h, v, id);
        if root == id {
            self.last_root = Some(id);
        } else if self.last_root != Some(root) {
            self.counts
                .per_block
                .redirect((root / version::tid::PER_BLOCK) as usize);
        }
    }

    /// Freezes version `k` (header `h` as read) if it is old enough: its
    /// header and what freezing left, None if it was pruned meanwhile.
    fn freeze(&mut self, k: &[u8], h: Header) -> Option<(Header, version::Freeze)> {
        let freeze_limit = self.freeze_limit;
        let old = |x: Xid| rows::xid_precedes(x, freeze_limit);
        let f = version::freeze(&h, &rows::PgXacts, &old);
        if f.header.is_none() {
            return Some((h, f));
        }
        // Before the first freeze of this VACUUM reaches WAL: a hot standby
        // cancels the queries whose snapshots still count an xid below the
        // freeze limit as running (a frozen version is visible to every
        // snapshot), as heap's freeze records make it do.
        if !self.conflict_logged {
            self.conflict_logged = true;
            // TransactionIdRetreat: the normal xid before the limit.
            let horizon = match freeze_limit.wrapping_sub(1) {
                x if x < 3 => u32::MAX,
                x => x,
            };
            // SAFETY: `rel` is the open relation VACUUM works on.
            unsafe { crate::pg::wal::log_conflict_for(self.rel, horizon, self.table.tree.id()) };
        }
        // Decided again on the current value under its leaf latch: a
        // concurrent change may have come in between.
        let now = self
            .table
            .tree
            .modify(k, |cur| {
                let Some(cur) = cur else {
                    return (Change::Keep, None);
                };
                let Some(ch) = Header::decode(cur, orioledb_engine::key_format::own_id(k)) else {
                    return (Change::Keep, None);
                };
                let f = version::freeze(&ch, &rows::PgXacts, &old);
                match f.header {
                    Some(nh) => {
                        let mut nv = cur.to_vec();
                        version::set_header(&mut nv, &nh);
                        (Change::Put(nv), Some((nh, f)))
                    }
                    None => (Change::Keep, Some((ch, f))),
                }
            })
            .unwrap_or_else(|e| crate::pg::engine::report(e));
        rows::after_change();
        let (nh, nf) = now?;
        if nf.header.is_some() {
            self.counts.frozen += 1;
        }
        Some((nh, nf))
    }
}

/// The name of an open relation, for messages.
///
/// # Safety
/// `rel` must be a valid open relation.
unsafe fn name(rel: pg_sys::Relation) -> String {
    // SAFETY: an open relation has its pg_class row; relname is NUL-terminated.
    unsafe { CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// How VACUUM of table `relname` reports its progress: at INFO with
/// VERBOSE, else DEBUG2.
struct Reporter {
    level: PgLogLevel,
    relname: String,
}

impl Reporter {
    fn report(&self, msg: String) {
        crate::pg::error::error(PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION, msg).report(self.level)
    }
}

/// VACUUM's cutoffs for `rel` (`vacuum_set_xid_limits`), and whether this
/// VACUUM is aggressive.
///
/// # Safety
/// `rel` is an open relation, `params` VACUUM's parameters.
unsafe fn cutoffs_of(rel: pg_sys::Relation, params: *mut pg_sys::VacuumParams) -> (Cutoffs, bool) {
    let mut cutoffs = Cutoffs {
        oldest_xmin: pg_sys::InvalidTransactionId,
        oldest_mxact: pg_sys::MultiXactId::from(0u32),
        freeze_limit: pg_sys::InvalidTransactionId,
    };
    let mut multi_cutoff = pg_sys::MultiXactId::from(0u32);
    // SAFETY: per the contract.
    let aggressive = unsafe {
        pg_sys::vacuum_set_xid_limits(
            rel,
            (*params).freeze_min_age,
            (*params).freeze_table_age,
            (*params).multixact_freeze_min_age,
            (*params).multixact_freeze_table_age,
            &mut cutoffs.oldest_xmin,
            &mut cutoffs.oldest_mxact,
            &mut cutoffs.freeze_limit,
            &mut multi_cutoff,
        )
    };
    (cutoffs, aggressive)
}

/// A toast relation's VACUUM: chunks carry no transaction ids, so nothing
/// holds its horizons back; only they move.
///
/// # Safety
/// `rel` is an open toast relation VACUUM holds.
unsafe fn vacuum_toast(rel: pg_sys::Relation, cutoffs: Cutoffs) {
    // SAFETY: per the contract.
    unsafe {
        pg_sys::vac_update_relstats(
            rel,
            (*(*rel).rd_rel).relpages as pg_sys::BlockNumber,
            (*(*rel).rd_rel).reltuples as f64,
            (*(*rel).rd_rel).relallvisible as pg_sys::BlockNumber,
            (*(*rel).rd_rel).relhasindex,
            cutoffs.oldest_xmin,
            cutoffs.oldest_mxact,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            false,
        );
    }
}

/// The table's new `relfrozenxid` and `relminmxid` after the counting pass
/// (invalid: unchanged).
///
/// Every xid older than the freeze limit was frozen or removed, so the
/// oldest one left (or the horizon, when none is older) can be the new
/// relfrozenxid — unless a MultiXactId in use is left, whose lockers were
/// not looked at. Pruning is not logged: versions pruned since the last
/// engine checkpoint come back if the server crashes, with xids this pass
/// no longer saw. So the horizons move only in aggressive VACUUMs (VACUUM
/// FREEZE, or relfrozenxid past vacuum_freeze_table_age), after an engine
/// checkpoint has made the pruned tree durable.
fn new_horizons(
    counts: &Counts,
    cutoffs: Cutoffs,
    aggressive: bool,
) -> (pg_sys::TransactionId, pg_sys::MultiXactId) {
    let advance = aggressive && crate::pg::preload::is_preloaded();
    if !advance {
        return (pg_sys::InvalidTransactionId, pg_sys::MultiXactId::from(0u32));
    }
    crate::pg::engine::checkpoint().unwrap_or_else(|e| crate::pg::engine::report(e));
    // SAFETY (both blocks): pure comparisons of transaction ids.
    let frozenxid = if counts.multi_left {
        pg_sys::InvalidTransactionId
    } else {
        match counts.oldest_xid {
            Some(x) if unsafe { pg_sys::TransactionIdPrecedes(x, cutoffs.oldest_xmin) } => x,
            _ => cutoffs.oldest_xmin,
        }
    };
    let minmulti = match counts.oldest_multi {
        Some(m) if unsafe { pg_sys::MultiXactIdPrecedes(m, cutoffs.oldest_mxact) } => m,
        _ => cutoffs.oldest_mxact,
    };
    (frozenxid, minmulti)
}

/// Index cleanup: `index_bulk_delete` with [`entry_is_dead`], then
/// `index_vacuum_cleanup`, on every index of `rel` (unless `INDEX_CLEANUP
/// off`). Returns how many indexes the table has and whether their entries
/// of versions removed before the counting pass are gone (no index, or
/// cleaned).
///
/// # Safety
/// `rel` is the open table VACUUM holds, `table` its tree; `params` and
/// `bstrategy` VACUUM's.
unsafe fn clean_indexes(
    rel: pg_sys::Relation,
    table: &Table,
    counts: &mut Counts,
    params: *mut pg_sys::VacuumParams,
    bstrategy: pg_sys::BufferAccessStrategy,
    out: &Reporter,
) -> (std::ffi::c_int, bool) {
    // SAFETY: per the contract; indexes are opened and closed here (their
    // locks held to the end of the transaction, as vacuumlazy.c does).
    unsafe {
        let mut nindexes: std::ffi::c_int = 0;
        let mut indexes: *mut pg_sys::Relation = std::ptr::null_mut();
        pg_sys::vac_open_indexes(
            rel,
            pg_sys::RowExclusiveLock as pg_sys::LOCKMODE,
            &mut nindexes,
            &mut indexes,
        );
        let cleanup = (*params).index_cleanup != pg_sys::VacOptValue::VACOPTVALUE_DISABLED;
        if cleanup && nindexes > 0 {
            let mut check = DeadCheck {
                rel,
                table: table.clone(),
                alive: std::mem::take(&mut counts.alive),
            };
            let old_tuples = ((*(*rel).rd_rel).reltuples as f64).max(0.0);
            for i in 0..nindexes as usize {
                clean_index(*indexes.add(i), old_tuples, &mut check, counts, bstrategy, out);
            }
        }
        pg_sys::vac_close_indexes(nindexes, indexes, pg_sys::NoLock as pg_sys::LOCKMODE);
        (nindexes, nindexes == 0 || cleanup)
    }
}

/// [`clean_indexes`] of one index.
///
/// # Safety
/// As for [`clean_indexes`]; `index` is an open index of the table,
/// `old_tuples` its `reltuples` before this VACUUM.
unsafe fn clean_index(
    index: pg_sys::Relation,
    old_tuples: f64,
    check: &mut DeadCheck,
    counts: &Counts,
    bstrategy: pg_sys::BufferAccessStrategy,
    out: &Reporter,
) {
    // SAFETY: per the contract; `check` outlives the bulk deletion.
    unsafe {
        let mut info = pg_sys::IndexVacuumInfo {
            index,
            analyze_only: false,
            report_progress: false,
            estimated_count: true,
            message_level: pg_sys::DEBUG2 as std::ffi::c_int,
            num_heap_tuples: old_tuples,
            strategy: bstrategy,
        };
        let mut stats = pg_sys::index_bulk_delete(
            &mut info,
            std::ptr::null_mut(),
            Some(entry_is_dead),
            (check as *mut DeadCheck).cast(),
        );
        info.num_heap_tuples = counts.live + counts.recently_dead;
        stats = pg_sys::index_vacuum_cleanup(&mut info, stats);
        if !stats.is_null() {
            out.report(format!(
                "orioledb: index \"{}\" of table \"{}\": removed {:.0} entries of \
                 dead row versions, {:.0} entries remain in {} pages",
                name(index),
                out.relname,
                (*stats).tuples_removed,
                (*stats).num_index_tuples,
                (*stats).num_pages
            ));
            pg_sys::pfree(stats.cast());
        }
    }
}

/// The runs of TID blocks this VACUUM may pass over: those the visibility
/// map has all-visible, in a table in row-id order (in key order a block's
/// versions are spread over the tree), unless the VACUUM is aggressive
/// (it freezes everything), DISABLE_PAGE_SKIPPING was asked for, or the
/// map is not kept (no announcement: without shared memory writers never
/// clear it).
///
/// # Safety
/// `rel` is the open table VACUUM holds, `table` its tree, `params`
/// VACUUM's.
unsafe fn skippable_runs(
    rel: pg_sys::Relation,
    table: &Table,
    params: *mut pg_sys::VacuumParams,
    aggressive: bool,
    announced: bool,
) -> Vec<(u64, u64)> {
    // SAFETY: per the contract.
    unsafe {
        let asked_not = (*params).options & pg_sys::VACOPT_DISABLE_PAGE_SKIPPING != 0;
        if aggressive || asked_not || !announced || table.desc().is_some() {
            return Vec::new();
        }
        crate::am::rows::vismap::all_visible_runs(rel, crate::am::scan::current_blocks(rel))
    }
}

/// The table's live row versions: counted, or, when the pass skipped
/// blocks, extrapolated from the blocks it read (`vac_estimate_reltuples`,
/// as heap's VACUUM does for the pages it skips).
///
/// # Safety
/// `rel` is the open table VACUUM holds.
unsafe fn live_estimate(rel: pg_sys::Relation, blocks: u64, counts: &Counts) -> f64 {
    if counts.skipped_blocks == 0 {
        return counts.live;
    }
    let scanned = blocks.saturating_sub(counts.skipped_blocks);
    // SAFETY: per the contract.
    unsafe {
        pg_sys::vac_estimate_reltuples(
            rel,
            blocks as pg_sys::BlockNumber,
            scanned as pg_sys::BlockNumber,
            counts.live,
        )
    }
}

/// `relation_vacuum`: see the module documentation.
///
/// # Safety
/// VACUUM passes an open relation locked ShareUpdateExclusive, its
/// parameters and strategy, with a transaction snapshot pushed.
pub unsafe fn vacuum(
    rel: pg_sys::Relation,
    params: *mut pg_sys::VacuumParams,
    bstrategy: pg_sys::BufferAccessStrategy,
) {
    // SAFETY: per the contract.
    unsafe {
        let (cutoffs, aggressive) = cutoffs_of(rel, params);
        if crate::pg::is_toast(rel) {
            vacuum_toast(rel, cutoffs);
            return;
        }
        let verbose = (*params).options & pg_sys::VACOPT_VERBOSE != 0;
        let out = Reporter {
            level: if verbose { PgLogLevel::INFO } else { PgLogLevel::DEBUG2 },
            relname: name(rel),
        };
        let relname = &out.relname;
        out.report(format!("orioledb: vacuuming table \"{relname}\""));
        crate::pg::vacuum_cost::failsafe(rel);
        let table = table_of(rel);
        // Before the counting pass, so that its findings hold unless a
        // writer announces a change (am::rows::vismap).
        let announced = crate::am::rows::vismap::Announcement::of(rel);
        let skip = skippable_runs(rel, &table, params, aggressive, announced.is_some());
        let mut counts = prune_and_count(rel, &table, cutoffs, &skip);
        let (frozenxid, minmulti) = new_horizons(&counts, cutoffs, aggressive);
        let (nindexes, cleaned) = clean_indexes(rel, &table, &mut counts, params, bstrategy, &out);
        // relpages in TID blocks, as ANALYZE stores them (analyze.c asks
        // for the table's size before it starts sampling).
        let blocks = crate::am::scan::current_blocks(rel);
        // Without the cleanup no block may be marked: an index entry could
        // outlive its version.
        let all_visible = match &announced {
            Some(a) => crate::am::rows::vismap::update(
                rel,
                a,
                &table,
                blocks,
                cutoffs.oldest_xmin,
                cleaned.then_some(&counts.per_block),
            ),
            None => 0,
        };
        drop(announced);
        let live = live_estimate(rel, blocks, &counts);
        pg_sys::vac_update_relstats(
            rel,
            blocks as pg_sys::BlockNumber,
            live,
            all_visible,
            nindexes > 0,
            frozenxid,
            minmulti,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            false,
        );
        // VACUUM's own pruning is in its count of dead versions left.
        rows::take_pruned(table.tree.id());
        pg_sys::pgstat_report_vacuum(
            (*rel).rd_id,
            (*(*rel).rd_rel).relisshared,
            live.max(0.0) as i64,
            counts.recently_dead as i64,
        );
        out.report(format!(
            "orioledb: table \"{relname}\": {:.0} live row versions, {:.0} dead row versions \
             not yet removable, {} frozen now, {} of {blocks} blocks skipped (all-visible)",
            counts.live, counts.recently_dead, counts.frozen, counts.skipped_blocks
        ));
    }
}
