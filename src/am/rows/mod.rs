//! Row versions on the PostgreSQL side: turning a slot into a version
//! (`orioledb_engine::version` format), a version back into a `HeapTuple`
//! in a slot, visibility under every snapshot type, TIDs, and this
//! backend's handles on tables' trees (with their pruner). Beside it in
//! the room: predicate locks for SERIALIZABLE (`ssi`) and the visibility
//! map index-only scans read (`vismap`).
//!
//! It may call `toast`, `storage`, the keyed layout, the engine and `pg`.

pub mod ssi;
pub mod vismap;

use orioledb_engine::btree::{Prune, Pruner};
use crate::am::layout::table::Table;
use orioledb_engine::version::{self, bits, tid, DirtyInfo, Header, Hints, VacuumState, Xid};
use orioledb_engine::{IdHash, Tree, TreeId};
use crate::pg::error::raise;
use crate::pg::{is_toast, rel_name};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Transaction state from clog and the proc array.
pub struct PgXacts;

/// Transaction ids clog said committed in this transaction, one per slot
/// (`xid % 64`; 0: none). Committed is final, so asking again for the same
/// id — the inserter of every row of a load, read row after row — needs no
/// call into PostgreSQL (each costs a `sigsetjmp` guard and a clog page
/// lookup). Several slots, because scans of updated tables alternate
/// between the loader's id and the updaters' (one slot made ANALYZE of
/// pgbench's accounts spend three quarters of its time in clog). Cleared
/// at transaction end, so an id reused after wraparound is never confused.
static COMMITTED: [AtomicU32; 64] = [const { AtomicU32::new(0) }; 64];

/// `ask(xid)`, remembered in `cache` once true (answers that stay true
/// for ever: committed, commit flushed).
fn remembered(cache: &[AtomicU32; 64], xid: Xid, ask: impl FnOnce() -> bool) -> bool {
    let slot = &cache[xid as usize % cache.len()];
    if xid != 0 && slot.load(Ordering::Relaxed) == xid {
        return true;
    }
    let yes = ask();
    if yes {
        slot.store(xid, Ordering::Relaxed);
    }
    yes
}

/// `TransactionIdPrecedes`: modulo-2^32 order of normal ids, plain order
/// when either is a permanent id (below `FirstNormalTransactionId`).
pub fn xid_precedes(a: Xid, b: Xid) -> bool {
    const FIRST_NORMAL: Xid = 3;
    if a < FIRST_NORMAL || b < FIRST_NORMAL {
        return a < b;
    }
    (a.wrapping_sub(b) as i32) < 0
}

impl version::Xacts for PgXacts {
    fn is_current(&self, xid: Xid) -> bool {
        // SAFETY: MyProc is this backend's PGPROC (set before any query
        // runs); its xid is the top-level transaction id once assigned, and
        // every subtransaction id is assigned after its parent's, so an id
        // older than it (or any id while none is assigned) is not ours. A
        // parallel worker has no xid of its own (its leader's are in
        // ParallelCurrentXids): it always asks PostgreSQL.
        unsafe {
            if pg_sys::ParallelWorkerNumber < 0 && !pg_sys::MyProc.is_null() {
                let top = (*pg_sys::MyProc).xid.into_inner();
                if top == 0 || xid_precedes(xid, top) {
                    return false;
                }
            }
            pg_sys::TransactionIdIsCurrentTransactionId(xid.into())
        }
    }
    fn in_progress(&self, xid: Xid) -> bool {
        // SAFETY: plain lookups of transaction state.
        unsafe { pg_sys::TransactionIdIsInProgress(xid.into()) }
    }
    fn did_commit(&self, xid: Xid) -> bool {
        // SAFETY: as above.
        remembered(&COMMITTED, xid, || unsafe { pg_sys::TransactionIdDidCommit(xid.into()) })
    }
    fn multi_running(&self, multi: Xid) -> bool {
        // SAFETY: reads the multixact SLRU. A multi left in a version is
        // never older than the table's relminmxid: VACUUM advances that
        // only past multis it cleared, after an engine checkpoint made the
        // clearing and its pruning durable (am::maintenance::vacuum).
        unsafe { pg_sys::MultiXactIdIsRunning(multi.into(), false) }
    }
    fn multi_update_xid(&self, multi: Xid) -> Xid {
        multi_members(multi)
            .into_iter()
            .find(|m| m.2)
            .map_or(0, |m| m.0)
    }
}

/// Members of a MultiXactId: (xid, lock mode held, is the updater).
pub fn multi_members(multi: Xid) -> Vec<(Xid, version::LockMode, bool)> {
    use version::LockMode::*;
    let mut ptr: *mut pg_sys::MultiXactMember = std::ptr::null_mut();
    // SAFETY: GetMultiXactIdMembers pallocs the array (or returns -1).
    unsafe {
        let n = pg_sys::GetMultiXactIdMembers(multi.into(), &mut ptr, false, false);
        if n <= 0 || ptr.is_null() {
            return Vec::new();
        }
        let out = std::slice::from_raw_parts(ptr, n as usize)
            .iter()
            .map(|m| {
                let (mode, updater) = match m.status {
                    0 => (KeyShare, false),
                    1 => (Share, false),
                    2 => (NoKeyExclusive, false),
                    3 => (Exclusive, false),
                    4 => (NoKeyExclusive, true),
                    _ => (Exclusive, true),
                };
                (m.xid.into_inner(), mode, updater)
            })
            .collect();
        pg_sys::pfree(ptr.cast());
        out
    }
}

/// MultiXactStatus of a row lock.
pub fn lock_status(mode: version::LockMode) -> pg_sys::MultiXactStatus::Type {
    mode as pg_sys::MultiXactStatus::Type
}

/// An MVCC snapshot. Invariant: the pointer is a live MVCC snapshot.
pub struct PgSnapshot(pub pg_sys::Snapshot);

impl version::Snapshot for PgSnapshot {
    fn in_snapshot(&self, xid: Xid) -> bool {
        // SAFETY: self.0 is a live MVCC snapshot (type invariant). Ids
        // below its xmin finished before it, ids from its xmax on had not
        // started: `XidInMVCCSnapshot`'s own first two tests, answered
        // here without a guarded call; only the ids between need its lists.
        unsafe {
            let (xmin, xmax) = ((*self.0).xmin.into_inner(), (*self.0).xmax.into_inner());
            if xid_precedes(xid, xmin) {
                return false;
            }
            if !xid_precedes(xid, xmax) {
                return true;
            }
            pg_sys::XidInMVCCSnapshot(xid.into(), self.0)
        }
    }
    fn curcid(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.0).curcid }
    }
}


/// Whether `xid` committed long enough ago that no snapshot that matters
/// can see what it deleted. Invariant: the state is one of the proc array's
/// static `GlobalVisState`s.
pub struct Horizon(*mut pg_sys::GlobalVisState);

impl Horizon {
    /// Snapshots of `rel`'s database.
    ///
    /// # Safety
    /// `rel` must be a valid, open relation.
    pub unsafe fn of(rel: pg_sys::Relation) -> Horizon {
        // SAFETY: GlobalVisTestFor only reads the relation's kind.
        Horizon(unsafe { pg_sys::GlobalVisTestFor(rel) })
    }

    /// A non-vacuumable snapshot's own test.
    ///
    /// # Safety
    /// `snapshot` must be a valid `SNAPSHOT_NON_VACUUMABLE` snapshot.
    pub unsafe fn of_snapshot(snapshot: pg_sys::Snapshot) -> Horizon {
        // SAFETY: such a snapshot carries a static proc-array state.
        Horizon(unsafe { (*snapshot).vistest })
    }

    pub fn removable(&self, xid: Xid) -> bool {
        // SAFETY: the state is one of the proc array's static ones.
        unsafe { pg_sys::GlobalVisTestIsRemovableXid(self.0, xid.into()) }
    }
}

/// Drops versions no snapshot can see (aborted inserts, deletes that
/// committed before every running snapshot). Runs under a leaf latch: only
/// clog/proc-array lookups, which never wait for a heavyweight lock.
struct VersionPruner {
    tree: TreeId,
    /// The proc array's visibility state for the table's kind (the
    /// `GlobalVisState` of data, catalog or temporary relations), as an
    /// address: a static of this process, valid for its life.
    horizon: usize,
}

impl VersionPruner {
    /// The visibility state `horizon` holds the address of.
    fn horizon(&self) -> Horizon {
        Horizon(self.horizon as *mut pg_sys::GlobalVisState)
    }
}

impl Pruner for VersionPruner {
    fn replaceable(&self, key: &[u8], value: &[u8]) -> bool {
        replaceable_version(key, value, &self.horizon())
    }

    /// The replaced version's updater: snapshots that do not see it
    /// committed still see the version (heap's prune records carry the
    /// same horizon). 0 for a version no snapshot ever saw.
    fn conflict_horizon(&self, key: &[u8], value: &[u8]) -> u32 {
        let Some(h) = Header::decode(value, orioledb_engine::key_format::own_id(key)) else {
            return 0;
        };
        let updater: u32 = version::update_xid(&h, &PgXacts).into();
        if updater >= pg_sys::FirstNormalTransactionId.into() {
            updater
        } else {
            0
        }
    }

    fn prune(&self, key: &[u8], value: &[u8]) -> Prune {
        if !crate::am::layout::table::is_version_key(key) {
            return Prune::Keep;
        }
        let Some(h) = Header::decode(value, orioledb_engine::key_format::own_id(key)) else {
            return Prune::Keep;
        };
        // Snapshots that can see this table: of its database only (other
        // databases' long transactions, an autoanalyze elsewhere, must not
        // keep its dead versions).
        let horizon = self.horizon();
        let removable = |x: Xid| horizon.removable(x);
        let mut hints = Hints::default();
        match version::vacuum_state(&h, &PgXacts, &removable, &mut hints) {
            VacuumState::Dead => {
                let (_, owned) = version::tail_and_toast(&h, value);
                if !owned.is_empty() {
                    crate::am::toast::queue_deletion(owned, self.conflict_horizon(key, value));
                }
                // A chain's redirect stays: index entries name the chain by
                // it (am::layout::hot).
                let id = orioledb_engine::key_format::version_suffix(key);
                if !id.is_some_and(|id| crate::am::layout::hot::redirect_stays(&h, value, id)) {
                    crate::am::layout::table::version_pruned(self.tree, key);
                }
                PRUNED.with(|p| *p.borrow_mut().entry(self.tree).or_insert(0) += 1);
                Prune::Remove
            }
            _ => {
                // Remember aborted deleters/lockers (always safe to store)
                // and committed inserters whose commit is flushed: readers
                // then skip clog, as heap's hint bits let them (ANALYZE of
                // a table whose every row an update rewrote spent three
                // quarters of its time asking clog).
                let mut learned = hints.0 & bits::XMAX_INVALID;
                if hints.0 & bits::XMIN_COMMITTED != 0 && commit_flushed(h.xmin) {
                    learned |= bits::XMIN_COMMITTED;
                }
                if learned & !h.infomask == 0 {
                    return Prune::Keep;
                }
                let mut h2 = h;
                h2.infomask |= learned;
                let mut v = value.to_vec();
                version::set_header(&mut v, &h2);
                Prune::Replace(v)
            }
        }
    }
}

/// Whether a keyed version (`key`, `value`) may be overwritten by a
/// HOT-like update taking its root's row id back (`am::layout::hot`): dead to
/// every snapshot `horizon` covers, owning no toast values and keeping its
/// map entry when pruned, so that removing it needs nothing else.
fn replaceable_version(key: &[u8], value: &[u8], horizon: &Horizon) -> bool {
    let Some(id) = orioledb_engine::key_format::version_suffix(key) else {
        return false;
    };
    let Some(h) = Header::decode(value, id) else {
        return false;
    };
    let removable = |x: Xid| horizon.removable(x);
    version::vacuum_state(&h, &PgXacts, &removable, &mut Hints::default()) == VacuumState::Dead
        && version::tail_and_toast(&h, value).1.is_empty()
        && crate::am::layout::hot::redirect_stays(&h, value, id)
}

/// Whether committed transaction `xid`'s commit record is flushed: only
/// then may a hint that it committed reach a page (after an asynchronous
/// commit a crash may lose it; heap's `SetHintBits` waits the same way).
fn commit_flushed(xid: Xid) -> bool {
    remembered(&FLUSHED, xid, || {
        // SAFETY: clog and WAL position lookups.
        unsafe { !pg_sys::XLogNeedsFlush(pg_sys::TransactionIdGetCommitLSN(xid.into())) }
    })
}

/// Committed transactions whose commit record this backend saw flushed
/// (for ever true once seen): [`commit_flushed`] asks clog for the commit's
/// position once per id, not once per version it hints. Cleared at
/// transaction end with [`COMMITTED`].
static FLUSHED: [AtomicU32; 64] = [const { AtomicU32::new(0) }; 64];

/// A tree's sweep: modifications counted, and the key where the next
/// leaf to prune starts (None: the first leaf).
type SweepPosition = (u32, Option<Vec<u8>>);

thread_local! {
    /// This backend's tree handles, by tree id, each with the generation a
    /// relcache entry must name to use it ([`AmCache`]). Kept across
    /// transactions: opening a table per transaction read its key
    /// descriptor from the tree again (a descent, a decode, a comparator).
    static TREES: RefCell<HashMap<TreeId, (u64, Table), IdHash>> = RefCell::new(HashMap::default());
    /// The last generation handed out.
    static GENERATION: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Per tree: where the background sweep of dead versions continues.
    static SWEEP: RefCell<HashMap<TreeId, SweepPosition, IdHash>> = RefCell::new(HashMap::default());
    /// Per tree: versions this backend's pruning removed and has not yet
    /// reported to the table's statistics ([`report_pruned`]).
    static PRUNED: RefCell<HashMap<TreeId, u32, IdHash>> = RefCell::new(HashMap::default());
    /// Per tree: versions this transaction superseded and has not yet
    /// counted in the tree's shared tally ([`note_superseded`]).
    static SUPERSEDED: RefCell<HashMap<TreeId, Superseding, IdHash>> = RefCell::new(HashMap::default());
}

/// Versions a backend superseded in one tree, not yet in its shared tally.
struct Superseding {
    tree: Tree,
    rel: u32,
    xid: Xid,
    n: u64,
}

/// Counts a version of `tree` (of relation `rel`) superseded by `xid`
/// towards the sweep of quiet trees (`am::maintenance::quiet`): in this backend, and in
/// the tree's shared tally at transaction end or every 64 versions, so a
/// busy table's updaters do not all write one shared line per row.
pub fn note_superseded(tree: &Tree, rel: u32, xid: Xid) {
    const EVERY: u64 = 64;
    let full = SUPERSEDED.with(|m| {
        let mut m = m.borrow_mut();
        let e = m.entry(tree.id()).or_insert_with(|| Superseding {
            tree: tree.clone(),
            rel,
            xid,
            n: 0,
        });
        e.n += 1;
        if xid_precedes(e.xid, xid) {
            e.xid = xid;
        }
        (e.n >= EVERY).then(|| m.remove(&tree.id())).flatten()
    });
    if let Some(e) = full {
        e.tree.note_superseded(e.rel, e.xid, e.n, xid_follows);
    }
}

/// Adds what [`note_superseded`] gathered to the trees' shared tallies.
fn flush_superseded() {
    let all = SUPERSEDED.with(|m| std::mem::take(&mut *m.borrow_mut()));
    for e in all.into_values() {
        e.tree.note_superseded(e.rel, e.xid, e.n, xid_follows);
    }
}

fn xid_follows(a: Xid, b: Xid) -> bool {
    xid_precedes(b, a)
}

/// Subtracts the versions pruning removed from `rel`'s tree since the last
/// report from the table's dead-row count, as heap's page pruning does
/// (`pgstat_update_heap_dead_tuples`): UPDATE and DELETE count each old
/// version as dead, and without this autovacuum would VACUUM a table whose
/// dead versions are long gone (pgbench's accounts, every few minutes).
///
/// # Safety
/// `rel` is the open relation whose tree is `tree`.
pub unsafe fn report_pruned(rel: pg_sys::Relation, tree: TreeId) {
    let n = take_pruned(tree);
    if n > 0 {
        // SAFETY: per the contract.
        unsafe { pg_sys::pgstat_update_heap_dead_tuples(rel, n.min(i32::MAX as u32) as i32) };
    }
}

/// The versions pruned from `tree` since the last report, forgotten (VACUUM
/// reports its own count).
pub fn take_pruned(tree: TreeId) -> u32 {
    PRUNED.with(|p| p.borrow_mut().remove(&tree)).unwrap_or(0)
}

/// Forgets the transaction ids remembered as committed (flushed): a
/// process must not keep them across xid wraparound.
pub fn forget_committed() {
    for slot in COMMITTED.iter().chain(&FLUSHED) {
        slot.store(0, Ordering::Relaxed);
    }
}

/// This module's part of a transaction's end (`pg::xact`): the work left
/// queued outside latches is done at pre-commit ([`after_change`]), while
/// the transaction can still run statements; at its end (commit, abort,
/// prepare) the oracle's commit cache is forgotten and the superseded
/// counts go to the engine. (The queues of `table` and `toast` settle
/// themselves, registered after this one.)
pub fn at_event(e: crate::pg::xact::Event) {
    use crate::pg::xact::Event::*;
    match e {
        PreCommit => after_change(),
        Prepare | Commit | Abort => {
            forget_committed();
            flush_superseded();
        }
        _ => {}
    }
}

/// Forgets what is cached about tree `id` (its layout changed, or it was
/// emptied in place): map entries queued for deletion are not deleted from
/// it any more (the versions they located are gone with the rest).
pub fn forget_tree(id: TreeId) {
    TREES.with(|t| t.borrow_mut().remove(&id));
    crate::am::layout::table::forget_keys();
    crate::am::layout::table::forget_doomed_map_entries(Some(id));
}

/// The primary tree of `rel`.
///
/// # Safety
/// `rel` must be a valid, open orioledb relation.
pub unsafe fn tree_of(rel: pg_sys::Relation) -> Tree {
    // SAFETY: per the contract.
    unsafe { table_of(rel) }.tree
}

/// The primary tree of `rel` with its layout.
///
/// # Safety
/// `rel` must be a valid, open orioledb relation.
pub unsafe fn table_of(rel: pg_sys::Relation) -> Table {
    // SAFETY: an open relation has a valid rd_node.
    let node = unsafe { (*rel).rd_node };
    let id = crate::pg::engine::tree_id(node.dbNode, node.relNode);
    // SAFETY: rd_amcache of our relations is null or an AmCache of ours.
    let cache = unsafe { (*rel).rd_amcache } as *mut AmCache;
    // SAFETY: as above.
    if let Some(c) = unsafe { cache.as_ref() }.filter(|c| (c.db, c.rel) == (id.db, id.rel)) {
        let hit = TREES.with(|t| {
            t.borrow()
                .get(&id)
                .filter(|(g, _)| *g == c.generation)
                .map(|(_, t)| t.clone())
        });
        if let Some(t) = hit {
            return t;
        }
    }
    // SAFETY: per the contract.
    let t = unsafe { open_table(rel, id) };
    let generation = GENERATION.get() + 1;
    GENERATION.set(generation);
    TREES.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= TREES_MAX {
            // Handles of dropped tables are never looked up again.
            m.clear();
        }
        m.insert(id, (generation, t.clone()));
    });
    // SAFETY: an open relation's relcache entry lives in CacheMemoryContext,
    // where its rd_amcache belongs (PostgreSQL pfrees it with the entry's
    // other parts on every invalidation). Read again: opening the table may
    // have processed invalidations (`am::storage::unlogged` opens relations), which
    // free the one read above.
    unsafe {
        let cache = (*rel).rd_amcache as *mut AmCache;
        let cache = if cache.is_null() {
            let c = pg_sys::MemoryContextAlloc(pg_sys::CacheMemoryContext, size_of::<AmCache>())
                as *mut AmCache;
            (*rel).rd_amcache = c.cast();
            c
        } else {
            cache
        };
        cache.write(AmCache {
            db: id.db,
            rel: id.rel,
            generation,
            pk_known: false,
            pk: 0,
        });
    }
    t
}

/// What an orioledb relation's relcache entry keeps in `rd_amcache`: the
/// generation of this backend's tree handle it may use. PostgreSQL frees
/// `rd_amcache` whenever the entry is invalidated (RelationClearRelation:
/// any catalog change of the table, a new relfilenode, a cache reset), so
/// a handle found through it was built after the table's last change —
/// a key added or dropped (re-key), a rewrite. Changes this backend makes
/// in place (a re-key, an emptied tree) drop the handle ([`forget_tree`]).
#[repr(C)]
struct AmCache {
    db: u32,
    rel: u32,
    generation: u64,
    /// [`served_primary_key`]'s answer, once known (0: none).
    pk_known: bool,
    pk: u32,
}

/// The table's primary key index when its tree is keyed by exactly that
/// key (what the primary scan serves), with the table; None otherwise.
/// Asked when every query on the table is planned, so the answer is kept
/// with the tree handle: a change of the table's indexes invalidates its
/// relcache entry, and with it the answer.
///
/// # Safety
/// `rel` must be a valid, open orioledb relation.
pub unsafe fn served_primary_key(rel: pg_sys::Relation) -> Option<(Table, pg_sys::Oid)> {
    // SAFETY: per the contract; table_of leaves an AmCache in rd_amcache.
    unsafe {
        let t = table_of(rel);
        let cache = (*rel).rd_amcache as *mut AmCache;
        let generation = cache.as_ref().map(|c| c.generation);
        if let Some(c) = cache.as_ref().filter(|c| c.pk_known) {
            return (c.pk != 0).then(|| (t, pg_sys::Oid::from(c.pk)));
        }
        let served = t
            .desc()
            .is_some_and(|d| crate::am::layout::key_desc::KeyDesc::for_table(rel).as_ref() == Some(d));
        let pk = if served {
            pg_sys::RelationGetPrimaryKeyIndex(rel)
        } else {
            pg_sys::InvalidOid
        };
        // Opening the index may have processed invalidations: keep the
        // answer only in the entry it was computed for.
        let cache = (*rel).rd_amcache as *mut AmCache;
        if let Some(c) = cache.as_mut().filter(|c| Some(c.generation) == generation) {
            c.pk_known = true;
            c.pk = pk.to_u32();
        }
        (pk != pg_sys::InvalidOid).then_some((t, pk))
    }
}

/// Tree handles kept before they are all dropped (and rebuilt on use).
const TREES_MAX: usize = 4096;

/// A new handle on `rel`'s tree `id` with its layout.
///
/// # Safety
/// `rel` must be a valid, open orioledb relation.
unsafe fn open_table(rel: pg_sys::Relation, id: TreeId) -> Table {
    // SAFETY: per the contract. What the emptying removed was cached
    // nowhere yet but in handles on the toast tree, and keys.
    for emptied in unsafe { crate::am::storage::unlogged::empty_after_crash(rel, id) } {
        forget_tree(emptied);
    }
    let engine = crate::pg::engine::engine();
    // SAFETY: per the contract.
    let is_toast = unsafe { is_toast(rel) };
    // Toast trees hold chunks, not versions: never let the pruner near them.
    let t = if is_toast {
        engine.tree(id)
    } else {
        // SAFETY: an open relation; GlobalVisTestFor only reads its kind.
        let horizon = unsafe { pg_sys::GlobalVisTestFor(rel) } as usize;
        engine.tree_pruned(id, Arc::new(VersionPruner { tree: id, horizon }))
    }
    .unwrap_or_else(|e| crate::pg::engine::report(e));
    if is_toast {
        // Chunk keys (value id ‖ chunk number) are no row ids: nothing
        // walks this Table's versions or row ids (scans refuse toast
        // relations; `am::toast` reads the tree directly).
        Table {
            tree: t,
            layout: crate::am::layout::table::Layout::RowId,
        }
    } else {
        Table::open(t)
    }
}


/// Work queued under latches, done right after a change: toast values and
/// row-id map entries of pruned versions.
pub fn after_change() {
    crate::am::toast::delete_doomed();
    crate::am::layout::table::delete_doomed_map_entries();
}

/// [`after_change`] of a change of `rel`, then the versions its pruning
/// removed reported to the table's statistics ([`report_pruned`]).
///
/// # Safety
/// `rel` is the open relation whose tree is `tree`.
pub unsafe fn after_change_of(rel: pg_sys::Relation, tree: TreeId) {
    after_change();
    // SAFETY: per the contract.
    unsafe { report_pruned(rel, tree) };
}

/// How much a modification counts towards the next sweep step: a delete,
/// a lock or an update whose new version went elsewhere leaves a version
/// nobody may touch again, every fourth prunes one more leaf; a HOT-like
/// update leaves its old version beside the new one, where the next
/// change of that leaf prunes it when the leaf fills, so it counts a
/// sixteenth of that (measured: sweeping at every fourth HOT update of
/// pgbench TPC-B read and dirtied a cold leaf for a quarter of the
/// updates, ~10% of throughput, while the tree's pages did not grow).
#[derive(Clone, Copy)]
pub enum SweepWeight {
    Leaves,
    Beside,
}

/// After enough modifications of a tree (see [`SweepWeight`]), prunes one
/// more leaf of it, walking the whole tree over time: versions that are
/// never touched again (their row was updated elsewhere) still go away
/// without VACUUM.
pub fn sweep_step(tree: &Tree, weight: SweepWeight) {
    const EVERY: u32 = 64;
    let id = tree.id();
    let add = match weight {
        SweepWeight::Leaves => 16,
        SweepWeight::Beside => 1,
    };
    let pos = SWEEP.with(|s| {
        let mut s = s.borrow_mut();
        let e = s.entry(id).or_insert((0, None));
        let before = e.0;
        e.0 = e.0.wrapping_add(add);
        (e.0 / EVERY != before / EVERY).then(|| e.1.clone())
    });
    let Some(pos) = pos else {
        after_change();
        return;
    };
    let next = tree
        .sweep_leaf_at(pos.as_deref())
        .unwrap_or_else(|e| crate::pg::engine::report(e));
    SWEEP.with(|s| {
        if let Some(e) = s.borrow_mut().get_mut(&id) {
            e.1 = next;
        }
    });
    after_change();
}

/// What a scan adds to a relation's statistics, as heap's and the index
/// AMs' `pgstat_count_*` macros (not callable) do: a scan started, a row
/// returned, a row fetched through an index, a block of the row-id space
/// read (`pg_statio_*_tables.heap_blks_hit`; the engine's buffers are not
/// PostgreSQL's, so every block counts as a hit).
#[derive(Clone, Copy)]
pub enum ScanStat {
    Scan,
    Returned,
    Fetched,
    Block,
}

/// Adds one to `rel`'s pending counter for `what` (nothing when statistics
/// are off for the relation).
///
/// # Safety
/// `rel` is an open relation.
pub unsafe fn count_scan_stat(rel: pg_sys::Relation, what: ScanStat) {
    // SAFETY: per the contract; pgstat_assoc_relation attaches the pending
    // entry the counters live in, as pgstat_should_count_relation does.
    unsafe {
        if !(*rel).pgstat_enabled {
            return;
        }
        if (*rel).pgstat_info.is_null() {
            pg_sys::pgstat_assoc_relation(rel);
        }
        let info = (*rel).pgstat_info;
        if info.is_null() {
            return;
        }
        let c = &mut (*info).t_counts;
        match what {
            ScanStat::Scan => c.t_numscans += 1,
            ScanStat::Returned => c.t_tuples_returned += 1,
            ScanStat::Fetched => c.t_tuples_fetched += 1,
            ScanStat::Block => {
                c.t_blocks_fetched += 1;
                c.t_blocks_hit += 1;
            }
        }
    }
}

/// Row id → ItemPointer.
pub fn to_item_pointer(id: u64, out: &mut pg_sys::ItemPointerData) {
    let (block, offset) = if id == MOVED {
        (pg_sys::InvalidBlockNumber, 0xFFFD)
    } else {
        tid::to_pointer(id)
    };
    out.ip_blkid.bi_hi = (block >> 16) as u16;
    out.ip_blkid.bi_lo = block as u16;
    out.ip_posid = offset;
}

/// Block number and offset of an ItemPointer.
fn pointer_parts(p: &pg_sys::ItemPointerData) -> (u32, u16) {
    (
        ((p.ip_blkid.bi_hi as u32) << 16) | p.ip_blkid.bi_lo as u32,
        p.ip_posid,
    )
}

/// ItemPointer → row id; None if it names no possible row.
pub fn from_item_pointer(p: &pg_sys::ItemPointerData) -> Option<u64> {
    let (block, offset) = pointer_parts(p);
    if block == pg_sys::InvalidBlockNumber {
        return None;
    }
    tid::from_pointer(block, offset)
}

/// First row id at or after TID `(block, offset)`: the start of a TID
/// range whose inclusive lower bound is that TID. Bounds may be TIDs no row
/// has (offset 0, offsets above 291, block `InvalidBlockNumber`): offset 0
/// is before the block's first row, an offset above 291 after its last.
pub fn first_id_at_or_after(block: u32, offset: u16) -> u64 {
    let base = block as u64 * tid::PER_BLOCK;
    base + (offset as u64).saturating_sub(1).min(tid::PER_BLOCK)
}

/// One past the last row id at or before TID `(block, offset)`: the
/// (exclusive) end of a TID range whose inclusive upper bound is that TID.
pub fn end_id_through(block: u32, offset: u16) -> u64 {
    block as u64 * tid::PER_BLOCK + (offset as u64).min(tid::PER_BLOCK)
}

/// Row ids `first..end` of the TIDs from `min` to `max`, both inclusive
/// (`table_beginscan_tidrange`'s bounds); empty (`first == end`) when
/// `max < min`.
pub fn id_range_of_tids(
    min: &pg_sys::ItemPointerData,
    max: &pg_sys::ItemPointerData,
) -> (u64, u64) {
    let (b, o) = pointer_parts(min);
    let first = first_id_at_or_after(b, o);
    let (b, o) = pointer_parts(max);
    let end = end_id_through(b, o);
    (first, end.max(first))
}

/// `ctid` of a version moved to another partition by an UPDATE
/// (heap's MovedPartitions marker).
pub const MOVED: u64 = (1 << 48) - 1;

/// Reads the version with row id `id`.
pub fn get_version(table: &Table, id: u64) -> Option<Vec<u8>> {
    table.get(id)
}

/// Whether version `h` is visible under `snapshot` (any type); a dirty
/// snapshot learns the running transactions, as heap's does.
///
/// # Safety
/// `snapshot` must be a valid snapshot; `rel` a valid open relation.
pub unsafe fn satisfies(h: &Header, snapshot: pg_sys::Snapshot, rel: pg_sys::Relation) -> bool {
    let mut hints = Hints::default();
    // SAFETY: caller guarantees a valid snapshot.
    let kind = unsafe { (*snapshot).snapshot_type };
    match kind {
        pg_sys::SnapshotType::SNAPSHOT_MVCC => {
            version::visible_mvcc(h, &PgXacts, &PgSnapshot(snapshot), &mut hints)
        }
        pg_sys::SnapshotType::SNAPSHOT_SELF => version::visible_self(h, &PgXacts, &mut hints),
        pg_sys::SnapshotType::SNAPSHOT_ANY => true,
        pg_sys::SnapshotType::SNAPSHOT_DIRTY => {
            let mut info = DirtyInfo::default();
            let v = version::visible_dirty(h, &PgXacts, &mut info, &mut hints);
            // SAFETY: a dirty snapshot is caller-owned and writable.
            unsafe {
                (*snapshot).xmin = info.xmin.into();
                (*snapshot).xmax = info.xmax.into();
                (*snapshot).speculativeToken = info.spec;
            }
            v
        }
        pg_sys::SnapshotType::SNAPSHOT_NON_VACUUMABLE => {
            // SAFETY: the snapshot type was just checked.
            let horizon = unsafe { Horizon::of_snapshot(snapshot) };
            let removable = |x: Xid| horizon.removable(x);
            version::vacuum_state(h, &PgXacts, &removable, &mut hints) != VacuumState::Dead
        }
        _ => {
            // SAFETY: caller guarantees an open relation.
            let name = unsafe { rel_name(rel) };
            raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("orioledb: snapshot type {kind} on table \"{name}\" is not supported"),
            )
        }
    }
}

/// Whether the version can be seen by nobody any more.
///
/// # Safety
/// `rel` must be a valid open relation.
pub unsafe fn surely_dead(h: &Header, rel: pg_sys::Relation) -> bool {
    // SAFETY: caller guarantees an open relation.
    let horizon = unsafe { Horizon::of(rel) };
    let removable = |x: Xid| horizon.removable(x);
    version::vacuum_state(h, &PgXacts, &removable, &mut Hints::default()) == VacuumState::Dead
}

/// Encodes the slot's row as a version of `table`: `hdr` supplies the
/// transaction fields, the tuple's data bits are added. External (toasted
/// elsewhere) values are fetched and stored inline, so a version never
/// points into another relation's toast table. Returns the version and its
/// key prefix (primary-key layout; empty otherwise).
///
/// # Safety
/// `rel` must be a valid open relation, `slot` a valid slot of its row type.
pub unsafe fn form_version(
    rel: pg_sys::Relation,
    table: &Table,
    slot: *mut pg_sys::TupleTableSlot,
    mut hdr: Header,
) -> (Vec<u8>, Vec<u8>) {
    // SAFETY: caller guarantees valid pointers; the slot's values arrays
    // have natts entries after slot_getallattrs.
    unsafe {
        pg_sys::slot_getallattrs(slot);
        let desc = (*rel).rd_att;
        let natts = (*desc).natts as usize;
        let values = std::slice::from_raw_parts_mut((*slot).tts_values, natts);
        let isnull = std::slice::from_raw_parts_mut((*slot).tts_isnull, natts);
        let mut vals: Vec<pg_sys::Datum> = values.to_vec();
        let attrs = (*desc).attrs.as_slice(natts);
        for i in 0..natts {
            if isnull[i] || attrs[i].attlen != -1 || attrs[i].attisdropped {
                continue;
            }
            let p = vals[i].cast_mut_ptr::<u8>();
            // VARATT_IS_EXTERNAL: a 1-byte header of exactly 0x01.
            if *p == 0x01 {
                vals[i] = pg_sys::Datum::from(pg_sys::detoast_external_attr(p.cast()));
            }
        }
        let mut nulls = isnull.to_vec();
        let prefix = match table.desc() {
            Some(d) => d.prefix(&vals, &nulls, || rel_name(rel)),
            None => Vec::new(),
        };
        let max_value = table.max_value(&prefix);
        let (owned, size) = crate::am::toast::toast_row(rel, &mut vals, &mut nulls, max_value);
        let mut v = fill_version(desc, &mut vals, &mut nulls, &mut hdr, size);
        if !owned.is_empty() {
            version::push_toast_list(&mut v, &owned);
        }
        // Counted with the full header: any version may get it later (a
        // deleter, a lock) and must still fit then.
        let full = version::full_len(&v);
        if full > max_value {
            // Heap's tuple length, with the padding the version leaves out.
            let size = full - version::HEADER + version::HEAP_FIXED + version::elided_pad(&hdr);
            // Too big for heap as well: heap's own message. Otherwise the
            // limit is ours (a third of a page), and the message says so.
            let message = if size > crate::am::toast::MAX_HEAP_TUPLE_SIZE {
                format!(
                    "row is too big: size {size}, maximum size {}",
                    crate::am::toast::MAX_HEAP_TUPLE_SIZE
                )
            } else {
                format!(
                    "row is too big: size {size}, maximum size {} (table \"{}\")",
                    max_value - version::HEADER + version::HEAP_FIXED,
                    rel_name(rel)
                )
            };
            raise(PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED, message);
        }
        (v, prefix)
    }
}

/// The most [`FILL`] keeps between rows (64 kB; rows are at most 2.6 kB
/// when stored).
const FILL_KEPT_WORDS: usize = 8192;

thread_local! {
    /// Where [`fill_version`] has `heap_fill_tuple` write a row.
    static FILL: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The version of a row: `hdr` with the row's data bits, natts and hoff,
/// then the tuple tail `heap_fill_tuple` writes straight into the value
/// (no heap tuple formed and copied).
///
/// # Safety
/// `vals`/`nulls` hold `desc`'s natts entries, of which `size` is the
/// size (`toast::tuple_size`).
unsafe fn fill_version(
    desc: pg_sys::TupleDesc,
    vals: &mut [pg_sys::Datum],
    nulls: &mut [bool],
    hdr: &mut Header,
    size: crate::am::toast::TupleSize,
) -> Vec<u8> {
    let natts = vals.len() as u16;
    let hoff = size.hoff();
    hdr.hoff = hoff as u8;
    hdr.infomask2 = (hdr.infomask2 & !bits::NATTS_MASK) | (natts & bits::NATTS_MASK);
    hdr.infomask &= !bits::DATA_MASK;
    if size.has_null() {
        hdr.infomask |= bits::HASNULL;
    }
    // The header's form does not depend on the bits the fill sets (only
    // on HASNULL, set above), so its length is known before.
    let (_, n) = hdr.encode();
    let mut infomask: u16 = 0;
    // heap_fill_tuple pads each value to its alignment by address: the
    // row is filled as a whole tuple at a MAXALIGNed start (as palloc'd
    // ones are), zeroed first, in a buffer kept for the purpose; the
    // version takes the tuple's bitmap and data (the hoff is natural, so
    // the padding between them is not stored: `version::elided_pad`).
    let mut v = FILL.with(|f| {
        let mut f = f.borrow_mut();
        f.clear();
        f.resize((hoff + size.data).div_ceil(8), 0);
        let td = f.as_mut_ptr().cast::<u8>();
        // SAFETY: per the contract; `td` is 8-byte aligned and holds the
        // fixed header, the bitmap (when there are nulls), the padding to
        // `hoff` and exactly the data size from there.
        unsafe {
            pg_sys::heap_fill_tuple(
                desc,
                vals.as_mut_ptr(),
                nulls.as_mut_ptr(),
                td.add(hoff).cast(),
                size.data,
                &mut infomask,
                if size.has_null() {
                    td.add(version::HEAP_FIXED)
                } else {
                    std::ptr::null_mut()
                },
            );
            let stored = size.bitmap + size.data;
            let mut v = Vec::with_capacity(n + stored + crate::am::toast::TRAILER);
            v.resize(n, 0);
            v.extend_from_slice(std::slice::from_raw_parts(td.add(version::HEAP_FIXED), size.bitmap));
            v.extend_from_slice(std::slice::from_raw_parts(td.add(hoff), size.data));
            // A huge row (too big to store, or a PLAIN column) must not
            // keep its buffer for the rest of the backend's life.
            if f.capacity() > FILL_KEPT_WORDS {
                *f = Vec::new();
            }
            v
        }
    });
    hdr.infomask = (hdr.infomask & !bits::DATA_MASK) | (infomask & bits::DATA_MASK);
    let (b, m) = hdr.encode();
    debug_assert_eq!(m, n, "the fill changed the header's form");
    if m == n {
        v[..n].copy_from_slice(&b[..n]);
    } else {
        v.splice(0..n, b[..m].iter().copied());
    }
    v
}

/// Records the command id heap's tuple header would carry once `h` has
/// just been given a deleter or updater (`cmax`): a combo command id
/// standing for `cmin` and `cmax` when the deleting transaction also
/// inserted it (heap's `HeapTupleHeaderAdjustCmax`), else `cmax`.
///
/// # Safety
/// Called in a transaction, outside parallel mode (as every write is).
pub unsafe fn set_raw_cid(h: &mut Header) {
    if h.flags & version::SPECULATIVE != 0 {
        // The token is still needed; heap's would be overwritten, but a
        // speculative insertion is confirmed or withdrawn at once.
        return;
    }
    // SAFETY: a zeroed header with xmin, cmin and the xmin hint bits is
    // all HeapTupleHeaderAdjustCmax reads; it allocates the combo id in
    // the transaction's combo table.
    unsafe {
        let mut data: pg_sys::HeapTupleHeaderData = std::mem::zeroed();
        data.t_choice.t_heap.t_xmin = h.xmin.into();
        data.t_choice.t_heap.t_field3.t_cid = h.cmin;
        data.t_infomask = h.infomask & (bits::XMIN_COMMITTED | bits::XMIN_INVALID);
        let (mut cid, mut combo) = (h.cmax, false);
        pg_sys::HeapTupleHeaderAdjustCmax(&mut data, &mut cid, &mut combo);
        h.flags = (h.flags & !version::COMBO) | version::RAW_CID;
        if combo {
            h.flags |= version::COMBO;
        }
        h.spec = cid;
    }
}

/// Bytes of the `HeapTupleData` in front of a built tuple (MAXALIGNed).
const TUPLE_STRUCT: usize = size_of::<pg_sys::HeapTupleData>().next_multiple_of(8);

/// Builds a `HeapTuple` from version bytes, allocated in `cxt`.
///
/// # Safety
/// `value` must be a version that `Header::decode` accepts.
pub unsafe fn build_tuple(
    value: &[u8],
    id: u64,
    relid: pg_sys::Oid,
    cxt: pg_sys::MemoryContext,
) -> pg_sys::HeapTuple {
    let h = Header::decode(value, id).expect("caller decoded it");
    let (tail, _) = version::tail_and_toast(&h, value);
    // SAFETY: the allocation holds the struct and the tuple.
    unsafe {
        let mem = pg_sys::MemoryContextAlloc(cxt, TUPLE_STRUCT + version::tuple_len(&h, tail));
        fill_tuple(&h, tail, id, relid, mem.cast())
    }
}

/// Builds the `HeapTuple` of version `value` (header `h`) in `buf`, which
/// it owns: valid until `buf` changes. For a slot that only borrows the
/// tuple (ANALYZE's, which copies the rows it keeps), without an
/// allocation per row.
///
/// # Safety
/// `h` is `value`'s decoded header.
pub unsafe fn build_tuple_in(
    h: &Header,
    value: &[u8],
    id: u64,
    relid: pg_sys::Oid,
    buf: &mut Vec<u64>,
) -> pg_sys::HeapTuple {
    let (tail, _) = version::tail_and_toast(h, value);
    let words = (TUPLE_STRUCT + version::tuple_len(h, tail)).div_ceil(8);
    if buf.len() < words {
        buf.resize(words, 0);
    }
    // SAFETY: `buf` holds the struct and the tuple, 8-byte aligned.
    unsafe { fill_tuple(h, tail, id, relid, buf.as_mut_ptr().cast()) }
}

/// Writes the `HeapTupleData` and the tuple of a version (header `h`,
/// tuple tail `tail`) at `mem`.
///
/// # Safety
/// `mem` is MAXALIGNed and holds `TUPLE_STRUCT + version::tuple_len(h,
/// tail)` bytes.
unsafe fn fill_tuple(
    h: &Header,
    tail: &[u8],
    id: u64,
    relid: pg_sys::Oid,
    mem: *mut u8,
) -> pg_sys::HeapTuple {
    let len = version::tuple_len(h, tail);
    // SAFETY: per the contract; every byte of the struct and the tuple
    // header is zeroed or written below, the tail copied.
    unsafe {
        std::ptr::write_bytes(mem, 0, TUPLE_STRUCT + version::HEAP_FIXED);
        let tup = mem.cast::<pg_sys::HeapTupleData>();
        let data = mem.add(TUPLE_STRUCT).cast::<pg_sys::HeapTupleHeaderData>();
        (*tup).t_len = len as u32;
        to_item_pointer(id, &mut (*tup).t_self);
        (*tup).t_tableOid = relid;
        (*tup).t_data = data;
        (*data).t_choice.t_heap.t_xmin = h.xmin.into();
        (*data).t_choice.t_heap.t_xmax = h.xmax.into();
        // Heap keeps one command id: cmax once deleted, else cmin; a row
        // this transaction inserted and deleted (or updated) gets a combo
        // command id standing for both, as heap_delete gives it, so the
        // cmin/cmax system columns read as on heap.
        (*data).t_choice.t_heap.t_field3.t_cid = h.cmin;
        (*data).t_infomask = h.infomask & !(pg_sys::HEAP_COMBOCID as u16);
        (*data).t_infomask2 = h.infomask2;
        (*data).t_hoff = h.hoff;
        if h.flags & version::RAW_CID != 0 {
            (*data).t_choice.t_heap.t_field3.t_cid = h.spec;
            if h.flags & version::COMBO != 0 {
                (*data).t_infomask |= pg_sys::HEAP_COMBOCID as u16;
            }
        } else if !(h.xmax_invalid() || h.lock_only()) {
            let mut cid = h.cmax;
            let mut combo = false;
            // New combo ids cannot be made in parallel mode: cmax there.
            if !pg_sys::IsInParallelMode() {
                pg_sys::HeapTupleHeaderAdjustCmax(data, &mut cid, &mut combo);
            }
            (*data).t_choice.t_heap.t_field3.t_cid = cid;
            if combo {
                (*data).t_infomask |= pg_sys::HEAP_COMBOCID as u16;
            }
        }
        to_item_pointer(h.ctid, &mut (*data).t_ctid);
        // The bitmap, heap's zero padding the version leaves out, the data.
        let (before, pad, after) = version::tail_parts(h, tail);
        let at = mem.add(TUPLE_STRUCT + version::HEAP_FIXED);
        std::ptr::copy_nonoverlapping(before.as_ptr(), at, before.len());
        std::ptr::write_bytes(at.add(before.len()), 0, pad);
        std::ptr::copy_nonoverlapping(after.as_ptr(), at.add(before.len() + pad), after.len());
        tup
    }
}

/// Puts version `value` (row id `id`) of `rel` into `slot`.
///
/// # Safety
/// `slot` must be a valid slot of `rel`'s row type; `value` decodable.
pub unsafe fn store_version(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    id: u64,
    value: &[u8],
) {
    // SAFETY: caller guarantees valid pointers; the tuple lives in the
    // slot's memory context and the slot frees it when cleared.
    unsafe {
        let relid = (*rel).rd_id;
        let tup = build_tuple(value, id, relid, (*slot).tts_mcxt);
        pg_sys::ExecForceStoreHeapTuple(tup, slot, true);
        (*slot).tts_tableOid = relid;
        to_item_pointer(id, &mut (*slot).tts_tid);
    }
}

/// Decodes a version or raises a corruption error naming the table.
///
/// # Safety
/// `rel` must be a valid open relation.
pub unsafe fn decode(rel: pg_sys::Relation, id: u64, value: &[u8]) -> Header {
    Header::decode(value, id).unwrap_or_else(|| {
        // SAFETY: caller guarantees an open relation.
        let name = unsafe { rel_name(rel) };
        raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("orioledb: malformed row version {id} in table \"{name}\""),
        )
    })
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn xid_order_is_transaction_id_precedes() {
        assert!(xid_precedes(3, 4) && !xid_precedes(4, 3) && !xid_precedes(5, 5));
        // Modulo 2^32 for normal ids: just past the wrap still follows.
        assert!(xid_precedes(u32::MAX - 5, 10));
        assert!(!xid_precedes(10, u32::MAX - 5));
        // Permanent ids (bootstrap 1, frozen 2) precede every normal id.
        assert!(xid_precedes(2, u32::MAX) && xid_precedes(1, 3) && !xid_precedes(3, 2));
        assert!(xid_precedes(0, 2) && !xid_precedes(2, 0));
    }

    #[test]
    fn tid_range_bounds_map_to_row_ids() {
        // A row's own TID is included at either end.
        for id in [0u64, 1, 290, 291, 292, 1000, 12345] {
            let (b, o) = tid::to_pointer(id);
            assert_eq!(first_id_at_or_after(b, o), id);
            assert_eq!(end_id_through(b, o), id + 1);
        }
        // ctid >= '(1,0)' starts at block 1's first row; ctid < '(5,0)' is
        // normalized by the executor to ctid <= '(4,65535)'.
        assert_eq!(first_id_at_or_after(1, 0), 291);
        assert_eq!(end_id_through(4, u16::MAX), 5 * 291);
        // Offsets past 291 are after the block's last row.
        assert_eq!(first_id_at_or_after(2, 292), 3 * 291);
        assert_eq!(first_id_at_or_after(2, 2048), 3 * 291);
        assert_eq!(end_id_through(2, 292), 3 * 291);
        // Offset 0 as an upper bound is before the block's first row.
        assert_eq!(end_id_through(3, 0), 3 * 291);
        assert_eq!(end_id_through(0, 0), 0);
        // The executor's unbounded ends.
        assert_eq!(first_id_at_or_after(0, 0), 0);
        assert_eq!(
            end_id_through(pg_sys::InvalidBlockNumber, u16::MAX),
            (pg_sys::InvalidBlockNumber as u64 + 1) * 291
        );
    }
}
