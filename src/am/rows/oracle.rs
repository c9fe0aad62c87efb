//! The transaction oracle: transaction state from clog and the proc array
//! (`PgXacts`, with this backend's caches of committed and flushed ids),
//! MultiXact members, snapshots (`PgSnapshot`) and the visibility horizon
//! (`Horizon`).

use super::*;

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
pub(super) static COMMITTED: [AtomicU32; 64] = [const { AtomicU32::new(0) }; 64];

/// `ask(xid)`, remembered in `cache` once true (answers that stay true
/// for ever: committed, commit flushed).
pub(super) fn remembered(cache: &[AtomicU32; 64], xid: Xid, ask: impl FnOnce() -> bool) -> bool {
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
            crate::pg::raw::transaction_id_is_current(xid.into())
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
pub struct Horizon(pub(super) *mut pg_sys::GlobalVisState);

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
        unsafe { crate::pg::raw::global_vis_test_is_removable_xid(self.0, xid.into()) }
    }
}

/// Whether committed transaction `xid`'s commit record is flushed: only
/// then may a hint that it committed reach a page (after an asynchronous
/// commit a crash may lose it; heap's `SetHintBits` waits the same way).
pub(super) fn commit_flushed(xid: Xid) -> bool {
    remembered(&FLUSHED, xid, || {
        // SAFETY: clog and WAL position lookups.
        unsafe { !pg_sys::XLogNeedsFlush(pg_sys::TransactionIdGetCommitLSN(xid.into())) }
    })
}

/// Committed transactions whose commit record this backend saw flushed
/// (for ever true once seen): [`commit_flushed`] asks clog for the commit's
/// position once per id, not once per version it hints. Cleared at
/// transaction end with [`COMMITTED`].
pub(super) static FLUSHED: [AtomicU32; 64] = [const { AtomicU32::new(0) }; 64];

pub(super) fn xid_follows(a: Xid, b: Xid) -> bool {
    xid_precedes(b, a)
}

/// Forgets the transaction ids remembered as committed (flushed): a
/// process must not keep them across xid wraparound.
pub fn forget_committed() {
    for slot in COMMITTED.iter().chain(&FLUSHED) {
        slot.store(0, Ordering::Relaxed);
    }
}
