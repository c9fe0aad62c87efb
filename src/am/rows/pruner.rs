//! Pruning: the pruner each primary tree is opened with (`VersionPruner`:
//! which versions no snapshot needs, and the work their removal leaves —
//! map entries and toast values, done after the change), the per-backend
//! sweep of dead versions, and the counts pruning reports to statistics and
//! to the sweep of quiet trees.

use super::*;

/// Drops versions no snapshot can see (aborted inserts, deletes that
/// committed before every running snapshot). Runs under a leaf latch: only
/// clog/proc-array lookups, which never wait for a heavyweight lock.
pub(super) struct VersionPruner {
    pub(super) tree: TreeId,
    /// The proc array's visibility state for the table's kind (the
    /// `GlobalVisState` of data, catalog or temporary relations), as an
    /// address: a static of this process, valid for its life.
    pub(super) horizon: usize,
}

impl VersionPruner {
    /// The visibility state `horizon` holds the address of.
    fn horizon(&self) -> Horizon {
        Horizon(self.horizon as *mut pg_sys::GlobalVisState)
    }
}

/// The transaction that updated or deleted the row version `value` under
/// `key` (snapshots that do not see it committed still see the version),
/// 0 for what is no row version or was never superseded by a normal
/// transaction. Replay on a hot standby asks it of a version it is about
/// to overwrite (`pg::wal::ReplayHooks::superseded_by`).
pub fn superseded_by(key: &[u8], value: &[u8]) -> u32 {
    if !crate::am::layout::table::is_version_key(key) {
        return 0;
    }
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

impl Pruner for VersionPruner {
    fn replaceable(&self, key: &[u8], value: &[u8]) -> bool {
        replaceable_version(key, value, &self.horizon())
    }

    /// The replaced version's updater: snapshots that do not see it
    /// committed still see the version (heap's prune records carry the
    /// same horizon). 0 for a version no snapshot ever saw.
    fn conflict_horizon(&self, key: &[u8], value: &[u8]) -> u32 {
        superseded_by(key, value)
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
                crate::am::layout::hot::version_pruned(self.tree, key, &h, value);
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

/// Whether a version in a chain root's slot (`key`, `value`) may be
/// overwritten by a HOT-like update taking the root's row id back
/// (`am::layout::hot`): dead to every snapshot `horizon` covers, owning no
/// toast values and keeping its map entry when pruned (a row-id root has
/// none), so that removing it needs nothing else.
pub(super) fn replaceable_version(key: &[u8], value: &[u8], horizon: &Horizon) -> bool {
    if !crate::am::layout::table::is_version_key(key) {
        return false;
    }
    // A keyed version's suffix, or a row-id root's 8-byte key.
    let id = orioledb_engine::key_format::own_id(key);
    let Some(h) = Header::decode(value, id) else {
        return false;
    };
    dead_to_all(&h, horizon)
        && version::tail_and_toast(&h, value).1.is_empty()
        && crate::am::layout::hot::redirect_stays(&h, value, id)
}

/// Whether version `h` is dead to every snapshot `horizon` covers (what
/// pruning removes).
pub fn dead_to_all(h: &Header, horizon: &Horizon) -> bool {
    let removable = |x: Xid| horizon.removable(x);
    version::vacuum_state(h, &PgXacts, &removable, &mut Hints::default()) == VacuumState::Dead
}

/// A tree's sweep: modifications counted, and the key where the next
/// leaf to prune starts (None: the first leaf).
pub(super) type SweepPosition = (u32, Option<Vec<u8>>);

thread_local! {
    /// This backend's tree handles, by tree id, each with the generation a
    /// relcache entry must name to use it ([`AmCache`]). Kept across
    /// transactions: opening a table per transaction read its key
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
pub(super) struct Superseding {
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
pub(super) fn flush_superseded() {
    let all = SUPERSEDED.with(|m| std::mem::take(&mut *m.borrow_mut()));
    for e in all.into_values() {
        e.tree.note_superseded(e.rel, e.xid, e.n, xid_follows);
    }
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

/// Work queued under latches, done right after a change: toast values and
/// row-id map entries of pruned versions (never waiting for a busy toast
/// relation: `toast::delete_doomed`).
pub fn after_change() {
    crate::am::toast::delete_doomed();
    crate::am::layout::table::delete_doomed_map_entries();
}

/// [`after_change`] at a transaction's pre-commit, where the toast queue is
/// walked even after a busy relation held it off (`toast::delete_doomed_now`).
pub fn at_pre_commit() {
    crate::am::toast::delete_doomed_now();
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
