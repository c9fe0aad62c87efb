//! The orioledb checkpointer: a background worker that checkpoints the
//! engine every `orioledb.checkpoint_timeout` and once more at shutdown.
//!
//! PostgreSQL 15 has no checkpoint hook, so the engine keeps its own
//! schedule; it also checkpoints when the checkpointer asks at the end of a
//! checkpoint someone waits for (a backup's start, `CHECKPOINT`), and
//! holds its checkpoints off while a base backup runs (`pg::backup`). At a clean
//! shutdown the postmaster stops background workers before its own shutdown
//! checkpoint, and this worker's last checkpoint makes every tree durable.
//! When the postmaster dies instead, the worker exits without one. On a hot
//! standby it starts once recovery is consistent and only checkpoints the
//! engine on its schedule (the standby's restartpoints of the engine) until
//! it is promoted.

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
        .set_start_time(BgWorkerStartTime::ConsistentState)
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

/// Runs an engine checkpoint; whether it completed.
fn checkpoint() -> bool {
    match crate::pg::engine::checkpoint() {
        Ok(_) => true,
        Err(e) => {
            pgrx::warning!("orioledb: checkpoint failed: {e}");
            false
        }
    }
}

/// Answers the checkpointer's request (`pg::backup`): an engine checkpoint
/// inside the PostgreSQL checkpoint that just completed, unless a backup
/// is copying files, which no engine checkpoint may complete under.
fn serve_request(seq: u64) {
    use crate::pg::backup;
    if backup::copying() {
        pgrx::log!("orioledb: engine checkpoint skipped: a base backup is copying files");
        backup::answer(seq, false);
        return;
    }
    let since = Instant::now();
    let ran = checkpoint();
    if since.elapsed() >= backup::WAIT_LIMIT {
        pgrx::warning!(
            "orioledb: an engine checkpoint PostgreSQL's checkpoint asked for took longer than the checkpointer waits ({} s); a base backup started then may be refused when restored",
            backup::WAIT_LIMIT.as_secs()
        );
    }
    backup::answer(seq, ran);
}

/// Says once per change that base backups cannot be restored with the
/// current settings (they need the checkpointer's messages and the
/// walsenders' progress reports, see `pg::backup`).
fn warn_unsafe_backup_settings(warned: &mut bool) {
    // SAFETY: plain reads of settings this process has loaded.
    let (logged, tracked, min) =
        unsafe { (pg_sys::log_checkpoints, pg_sys::pgstat_track_activities, pg_sys::log_min_messages) };
    let unsafe_now = !logged || !tracked || min >= pg_sys::FATAL as i32;
    if unsafe_now && !*warned {
        pgrx::warning!(
            "orioledb: with log_checkpoints or track_activities off, or log_min_messages above LOG, base backups of this server cannot be restored: its orioledb tables would be missing changes"
        );
    }
    *warned = unsafe_now;
}

/// Whether three quarters of the engine's tree slots or metadata chunks
/// are taken, and the last checkpoint was long enough ago to try another:
/// a dropped tree's slot is only released by a checkpoint, and only trees
/// exactly as a checkpoint wrote them can be evicted to make room (one
/// ends by evicting idle trees when the region is that full), so a
/// workload that creates (and drops) many tables — a test suite, a schema
/// per customer, temporary work tables — would otherwise run out between
/// two scheduled checkpoints with the default settings.
fn metadata_short(last: Instant) -> bool {
    const AT_MOST_EVERY: Duration = Duration::from_secs(5);
    if last.elapsed() < AT_MOST_EVERY {
        return false;
    }
    let engine = crate::pg::engine::engine();
    let (_, free, total) = engine.slot_use();
    let (chunks, nchunks) = engine.metadata_use();
    free * 4 <= total || chunks * 4 >= nchunks * 3
}

/// Points this process's proc-array index at a slot the dense arrays
/// never use. The worker connects to no database, so it is in no slot,
/// but PostgreSQL code it runs reads `MyProc->pgxactoff` all the same:
/// `ReplicationSlotRelease` (every engine checkpoint releases the WAL
/// slot) stores this process's status flags at that index, clearing
/// another backend's (`PROC_IS_AUTOVACUUM`, `PROC_IN_VACUUM`, a standby
/// feedback walsender's `PROC_AFFECTS_ALL_HORIZONS`), and
/// `TransactionIdIsInProgress` skips that index as its own. The arrays
/// hold `allProcCount + max_prepared_transactions` entries (every PGPROC,
/// prepared transactions' included), the dense part at most `MaxBackends +
/// max_prepared_transactions` of them — fewer by the auxiliary processes'
/// five: the last entry is never a backend's or a prepared transaction's.
fn park_outside_proc_array() {
    // SAFETY: MyProc and ProcGlobal are set before a background worker's
    // main runs; this process owns its PGPROC, and no other process reads
    // the `pgxactoff` of a PGPROC that is not in the proc array. The
    // setting is read as text (GetConfigOption), fixed at server start.
    unsafe {
        let prepared = pg_sys::GetConfigOption(c"max_prepared_transactions".as_ptr(), false, false);
        let prepared: i32 = if prepared.is_null() {
            0
        } else {
            std::ffi::CStr::from_ptr(prepared).to_str().ok().and_then(|s| s.parse().ok()).unwrap_or(0)
        };
        (*pg_sys::MyProc).pgxactoff = (*pg_sys::ProcGlobal).allProcCount as i32 + prepared - 1;
    }
}

/// The worker's main loop.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn orioledb_checkpointer_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    park_outside_proc_array();
    if !standby_restartpoints() {
        return;
    }
    // Recovery is over: trees a crash orphaned (their relation's file is
    // gone) can go now.
    crate::am::storage::trees::sweep_orphans();
    crate::pg::backup::worker_started();
    let mut warned = false;
    warn_unsafe_backup_settings(&mut warned);
    let mut last = Instant::now();
    loop {
        let due = last + crate::pg::guc::checkpoint_timeout();
        // Awake every second to look at the metadata (below).
        let wait = due
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        let alive = BackgroundWorker::wait_latch(Some(wait));
        if BackgroundWorker::sighup_received() {
            // SAFETY: the documented way for a background worker to reload
            // its configuration after SIGHUP.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            warn_unsafe_backup_settings(&mut warned);
        }
        if !alive {
            // SIGTERM is the postmaster's clean shutdown: make every tree
            // durable. A dead postmaster is a crash (kill -9, the OOM
            // killer): exit without writing, as PostgreSQL's own
            // checkpointer does, so recovery starts from the last engine
            // checkpoint and WAL — a checkpoint here made every crash test
            // a clean stop for the engine, and its redo replay went
            // untested.
            // `wait_latch` has consumed pgrx's SIGTERM flag (asking
            // `sigterm_received` here was always false: no clean shutdown
            // ever checkpointed the engine); its handler also sets
            // PostgreSQL's `ShutdownRequestPending`, which stays set.
            // SAFETY: a sig_atomic_t set only by our signal handler.
            let shutdown = unsafe { std::ptr::read_volatile(&raw const pg_sys::ShutdownRequestPending) } != 0;
            if shutdown {
                use crate::pg::injection::{take, SKIP_SHUTDOWN_CHECKPOINT};
                if take(SKIP_SHUTDOWN_CHECKPOINT).is_some() {
                    pgrx::log!("orioledb: shutdown checkpoint skipped ({SKIP_SHUTDOWN_CHECKPOINT})");
                } else {
                    let pending = crate::pg::backup::pending_request();
                    let ran = checkpoint();
                    if let Some(seq) = pending {
                        crate::pg::backup::answer(seq, ran);
                    }
                }
            }
            crate::pg::backup::worker_stopping();
            break;
        }
        if let Some(seq) = crate::pg::backup::pending_request() {
            serve_request(seq);
            crate::am::storage::trees::sweep_orphans();
            last = Instant::now();
        } else if Instant::now() >= last + crate::pg::guc::checkpoint_timeout() || metadata_short(last) {
            // A backup that is starting or copying keeps the engine's
            // durable checkpoint where its start put it.
            if !crate::pg::backup::running() {
                checkpoint();
                crate::am::storage::trees::sweep_orphans();
            }
            last = Instant::now();
        }
        sweep_quiet_trees();
    }
}

/// On a hot standby (the worker starts once recovery is consistent):
/// engine checkpoints every `orioledb.checkpoint_timeout`, the first at
/// once, so that the WAL the engine replays from at a restart is recent and
/// kept by the slot, while PostgreSQL's restartpoints remove what is older
/// (without them a standby could not restart once they had removed the WAL
/// since its base backup). Nothing else: the standby's trees change only
/// by replay. Returns when recovery ends (promotion: true) or the server
/// stops (false; replay from the last engine checkpoint covers the rest).
fn standby_restartpoints() -> bool {
    // SAFETY: a flag read from shared memory.
    let in_recovery = || unsafe { pg_sys::RecoveryInProgress() };
    let mut last: Option<Instant> = None;
    while in_recovery() {
        // Backups of a standby are not supported; one that runs anyway
        // is not made to restore silently wrong by a checkpoint under it.
        // Early too when the region fills: trees replay changed can be
        // evicted only once a checkpoint wrote them, and dropped ones free
        // their slots only then (a primary creating or dropping thousands
        // of tables would otherwise fill the standby's region).
        let due = last.is_none_or(|l| {
            l.elapsed() >= crate::pg::guc::checkpoint_timeout() || metadata_short(l)
        });
        if due && !crate::pg::backup::running() {
            checkpoint();
            last = Some(Instant::now());
        }
        if !BackgroundWorker::wait_latch(Some(Duration::from_secs(1))) {
            return false;
        }
        if BackgroundWorker::sighup_received() {
            // SAFETY: as in the main loop.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
    }
    true
}

/// A round of sweeping tables nobody writes any more (`am::maintenance::quiet`), at
/// most a fifth of a second. An ERROR there (a damaged tree, say) is
/// logged and the worker goes on: checkpoints must not stop for it
/// (`am::maintenance::quiet` catches a tree's own and backs off from that tree).
fn sweep_quiet_trees() {
    const ROUND: Duration = Duration::from_millis(200);
    pgrx::PgTryBuilder::new(|| crate::am::maintenance::quiet::sweep_quiet_trees(Instant::now() + ROUND))
        .catch_others(|e| {
            // SAFETY: as in `am::maintenance::quiet`: no LWLock is meant to be held here.
            unsafe { pg_sys::LWLockReleaseAll() };
            pgrx::warning!("orioledb: background sweep stopped: {}", crate::pg::caught(&e));
        })
        .execute();
}
