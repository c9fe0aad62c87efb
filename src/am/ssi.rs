//! SERIALIZABLE on orioledb tables: PostgreSQL's predicate locking
//! (`predicate.c`) at relation granularity. Every read path locks the whole
//! relation, every write checks for conflicts on it, and versions a reader
//! skips or sees deleted are reported as rw-conflicts exactly as heap's
//! `HeapCheckForSerializableConflictOut` does. Coarser than heap (more
//! 40001s), never weaker. Outside SERIALIZABLE each call returns at once.

use orioledb_engine::version::{self, Header, Hints, VacuumState};
use pgrx::pg_sys;
use pgrx::pg_sys::ffi::pg_guard_ffi_boundary;

extern "C-unwind" {
    fn PredicateLockRelation(relation: pg_sys::Relation, snapshot: pg_sys::Snapshot);
    fn CheckForSerializableConflictIn(
        relation: pg_sys::Relation,
        tid: pg_sys::ItemPointer,
        blkno: pg_sys::BlockNumber,
    );
    fn CheckForSerializableConflictOutNeeded(
        relation: pg_sys::Relation,
        snapshot: pg_sys::Snapshot,
    ) -> bool;
    fn CheckForSerializableConflictOut(
        relation: pg_sys::Relation,
        xid: pg_sys::TransactionId,
        snapshot: pg_sys::Snapshot,
    );
}

/// Before reading `rel` under `snapshot`.
///
/// # Safety
/// Valid open relation and snapshot (NULL snapshots are skipped).
pub unsafe fn lock_relation(rel: pg_sys::Relation, snapshot: pg_sys::Snapshot) {
    if snapshot.is_null() {
        return;
    }
    // SAFETY: exported PostgreSQL function; ERRORs become Rust panics.
    unsafe { pg_guard_ffi_boundary(|| PredicateLockRelation(rel, snapshot)) }
}

/// Before writing `rel`.
///
/// # Safety
/// Valid open relation.
pub unsafe fn check_in(rel: pg_sys::Relation) {
    // SAFETY: as above; a NULL tid and InvalidBlockNumber mean "the relation".
    unsafe {
        pg_guard_ffi_boundary(|| {
            CheckForSerializableConflictIn(rel, std::ptr::null_mut(), pg_sys::InvalidBlockNumber)
        })
    }
}

/// Whether reads of `rel` under `snapshot` must report conflicts out.
///
/// # Safety
/// Valid open relation; snapshot may be NULL.
pub unsafe fn out_needed(rel: pg_sys::Relation, snapshot: pg_sys::Snapshot) -> bool {
    if snapshot.is_null() {
        return false;
    }
    // SAFETY: as above.
    unsafe { pg_guard_ffi_boundary(|| CheckForSerializableConflictOutNeeded(rel, snapshot)) }
}

/// Reports the rw-conflict a reader has with the writer of version `h`
/// (`visible`: whether the reader sees it). Call only if [`out_needed`].
///
/// # Safety
/// Valid open relation and MVCC snapshot.
pub unsafe fn check_out(
    rel: pg_sys::Relation,
    h: &Header,
    visible: bool,
    snapshot: pg_sys::Snapshot,
) {
    // SAFETY: plain reads of transaction state and an exported function.
    unsafe {
        let xmin_limit = pg_sys::TransactionXmin;
        let removable = |x: version::Xid| pg_sys::TransactionIdPrecedes(x.into(), xmin_limit);
        let state = version::vacuum_state(
            h,
            &crate::am::rows::PgXacts,
            &removable,
            &mut Hints::default(),
        );
        let xid = match state {
            VacuumState::Live if visible => return,
            VacuumState::Live | VacuumState::InsertInProgress => h.xmin,
            VacuumState::RecentlyDead | VacuumState::DeleteInProgress => {
                let x = if visible && !h.lock_only() {
                    h.xmax
                } else {
                    h.xmin
                };
                if removable(x) {
                    return;
                }
                x
            }
            VacuumState::Dead => return,
        };
        if xid == 0 || xid == pg_sys::GetTopTransactionIdIfAny().into_inner() {
            return;
        }
        let top = pg_sys::SubTransGetTopmostTransaction(xid.into());
        if pg_sys::TransactionIdPrecedes(top, xmin_limit) {
            return;
        }
        pg_guard_ffi_boundary(|| CheckForSerializableConflictOut(rel, top, snapshot));
    }
}
