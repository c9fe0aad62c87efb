//! The orioledb checkpointer: a background worker that checkpoints the
//! engine every `orioledb.checkpoint_timeout` and once more at shutdown.
//!
//! PostgreSQL 15 has no checkpoint hook, so the engine keeps its own
//! schedule; `CHECKPOINT` also runs one (see `pg::options`). At a clean
//! shutdown the postmaster stops background workers before its own shutdown
//! checkpoint, and this worker's last checkpoint makes every tree durable.

use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::time::{Duration, Instant};

/// Registers the worker (from `_PG_init`, during preload).
pub(crate) fn register() {
    BackgroundWorkerBuilder::new("orioledb checkpointer")
        .set_type("orioledb checkpointer")
        .set_function("orioledb_checkpointer_main")
        .set_library("orioledb_rs")
        .enable_shmem_access(None)
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

fn checkpoint() {
    if let Err(e) = crate::pg::engine::checkpoint() {
        pgrx::warning!("orioledb: checkpoint failed: {e}");
    }
}

/// The worker's main loop.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn orioledb_checkpointer_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    // Recovery is over when this worker starts: trees a crash orphaned
    // (their relation's file is gone) can go now.
    crate::am::storage::sweep_orphans();
    let mut last = Instant::now();
    loop {
        let due = last + crate::pg::guc::checkpoint_timeout();
        let wait = due
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10));
        let alive = BackgroundWorker::wait_latch(Some(wait));
        if BackgroundWorker::sighup_received() {
            // SAFETY: the documented way for a background worker to reload
            // its configuration after SIGHUP.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        if !alive {
            checkpoint();
            break;
        }
        if Instant::now() >= last + crate::pg::guc::checkpoint_timeout() {
            checkpoint();
            crate::am::storage::sweep_orphans();
            last = Instant::now();
        }
    }
}
