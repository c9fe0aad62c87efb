//! Unguarded calls of the few PostgreSQL functions on the hottest paths
//! that cannot raise an ERROR where we call them.
//!
//! Every `pg_sys` function goes through pgrx's FFI guard: a thread check
//! (a thread-local read), a `sigsetjmp` and the save and restore of
//! PostgreSQL's error state, so that an ERROR's `longjmp` becomes a Rust
//! panic that unwinds our frames. That costs more than a page latch
//! itself: in a TPC-B profile the guards were 5% of the backends' CPU, and
//! page latches (two calls per page a descent visits) the largest user.
//! The functions here raise nothing on the paths that call them, so
//! they are declared again without the guard:
//!
//! - `LWLockAcquire`, `LWLockConditionalAcquire`: only "too many LWLocks
//!   taken" (more than 200 held), which the engine's latch order never
//!   comes near (a descent holds two page latches at a time); a wait
//!   holds interrupts off and a failing semaphore is FATAL (no return).
//! - `LWLockRelease`: only "lock is not held", which the `LatchSet`
//!   contract rules out.
//! - `get_backup_status`: returns a static of xlog.c.
//! - `TransactionIdIsCurrentTransactionId`: reads this backend's
//!   transaction state.
//! - `GlobalVisTestIsRemovableXid`: compares with the proc array's
//!   horizons, recomputing them under `ProcArrayLock` at most.
//!
//! Should one of them raise after all, PostgreSQL's `longjmp` would pass
//! over our frames without running their destructors; so nothing else
//! belongs here.
use pgrx::pg_sys;

unsafe extern "C" {
    #[link_name = "LWLockAcquire"]
    pub fn lwlock_acquire(lock: *mut pg_sys::LWLock, mode: pg_sys::LWLockMode::Type) -> bool;
    #[link_name = "LWLockConditionalAcquire"]
    pub fn lwlock_conditional_acquire(lock: *mut pg_sys::LWLock, mode: pg_sys::LWLockMode::Type) -> bool;
    #[link_name = "LWLockRelease"]
    pub fn lwlock_release(lock: *mut pg_sys::LWLock);
    #[link_name = "get_backup_status"]
    pub fn get_backup_status() -> pg_sys::SessionBackupState::Type;
    #[link_name = "TransactionIdIsCurrentTransactionId"]
    pub fn transaction_id_is_current(xid: pg_sys::TransactionId) -> bool;
    #[link_name = "GlobalVisTestIsRemovableXid"]
    pub fn global_vis_test_is_removable_xid(
        state: *mut pg_sys::GlobalVisState,
        xid: pg_sys::TransactionId,
    ) -> bool;
}
