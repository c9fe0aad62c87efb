//! SERIALIZABLE on orioledb tables: PostgreSQL's predicate locking
//! (`predicate.c`) with heap's granularity where heap has it. Versions read
//! by TID (index fetches, bitmap and TID scans) take tuple locks on their
//! row id, as `heap_fetch`/`heap_hot_search_buffer` do (the index AM's page
//! locks cover the key range); scans that read ranges of the table itself
//! (sequential, primary-key, TID-range) lock the whole relation.
//! UPDATE and DELETE check the old version's tuple, its TID block (an
//! index-only scan that skips the table locks that block) and the relation;
//! INSERT checks the relation. Versions a reader skips or sees deleted are
//! reported as rw-conflicts exactly as heap's
//! `HeapCheckForSerializableConflictOut` does. Outside SERIALIZABLE each
//! call returns at once.

use orioledb_engine::version::{self, Header, Hints, VacuumState};
use pgrx::pg_sys;
use pgrx::pg_sys::ffi::pg_guard_ffi_boundary;

extern "C-unwind" {
    fn PredicateLockRelation(relation: pg_sys::Relation, snapshot: pg_sys::Snapshot);
    fn PredicateLockTID(
        relation: pg_sys::Relation,
        tid: pg_sys::ItemPointer,
        snapshot: pg_sys::Snapshot,
        tuple_xid: pg_sys::TransactionId,
    );
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

/// After reading version `id` (inserted by `xmin`) of `rel` by its TID and
/// finding it visible.
///
/// # Safety
/// Valid open relation; snapshot may be NULL.
pub unsafe fn lock_tid(rel: pg_sys::Relation, id: u64, xmin: version::Xid, snapshot: pg_sys::Snapshot) {
    if snapshot.is_null() {
        return;
    }
    let mut tid = pg_sys::ItemPointerData::default();
    crate::am::rows::to_item_pointer(id, &mut tid);
    // SAFETY: exported PostgreSQL function; it returns at once outside
    // SERIALIZABLE and for rows of the own transaction.
    unsafe { pg_guard_ffi_boundary(|| PredicateLockTID(rel, &mut tid, snapshot, xmin.into())) }
}

/// Before writing `rel`: `old` is the row id an UPDATE or DELETE replaces
/// (None for INSERT).
///
/// # Safety
/// Valid open relation.
pub unsafe fn check_in(rel: pg_sys::Relation, old: Option<u64>) {
    let mut tid = pg_sys::ItemPointerData::default();
    let (tidp, block) = match old {
        Some(id) => {
            crate::am::rows::to_item_pointer(id, &mut tid);
            let block = (u32::from(tid.ip_blkid.bi_hi) << 16) | u32::from(tid.ip_blkid.bi_lo);
            (&mut tid as pg_sys::ItemPointer, block)
        }
        None => (std::ptr::null_mut(), pg_sys::InvalidBlockNumber),
    };
    // SAFETY: as above; a NULL tid and InvalidBlockNumber mean "the relation".
    unsafe { pg_guard_ffi_boundary(|| CheckForSerializableConflictIn(rel, tidp, block)) }
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
