//! This process's handle on the storage engine.
//!
//! The pool and the engine metadata live in shared memory (see `shmem`);
//! each backend attaches on first use. The first process ever to attach
//! loads the durable checkpoint from `$PGDATA/orioledb_data/`.

use orioledb_engine::io::{CrashAfter, StdIo};
use orioledb_engine::{Engine, EngineError, SharedMeta, TreeId};
use pgrx::pg_sys;
use crate::pg::error::{error, internal};
use pgrx::prelude::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// The engine directory, relative to the data directory (PostgreSQL runs
/// with the data directory as its working directory).
pub const DATA_DIR: &str = "orioledb_data";

/// Invariant: set once per process, after a successful attach.
static ENGINE: OnceLock<Engine> = OnceLock::new();

/// This process's file I/O: ordinary files behind the fault injector that
/// the `orioledb.debug_checkpoint_*` settings arm for one checkpoint.
/// Invariant: disarmed (`u64::MAX` steps) outside [`checkpoint`].
static IO: OnceLock<Arc<CrashAfter<StdIo>>> = OnceLock::new();

fn io() -> &'static Arc<CrashAfter<StdIo>> {
    IO.get_or_init(|| Arc::new(CrashAfter::new(StdIo::new(), u64::MAX)))
}

/// Invariant: true in this process only once the engine's records since
/// its last checkpoint have been replayed for the whole server (by this
/// process or another); until then [`engine`] hands the engine to nobody
/// but that replay.
static READY: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This process is replaying the gap (the replay reads and writes trees
    /// through [`engine`]).
    static REPLAYING: Cell<bool> = const { Cell::new(false) };
}

/// The engine, attached on first use, with its log replayed: a process
/// whose replay fails (an ERROR, e.g. a missing locale) does not use the
/// engine unreplayed — every later use retries the replay, and no other
/// process gets past it either (its rows would be overwritten by the older
/// records a later replay applies). Raises an ERROR if the library was not
/// preloaded or the engine directory cannot be opened.
pub fn engine() -> &'static Engine {
    if READY.load(Ordering::Acquire) {
        return ENGINE.get().expect("set before READY");
    }
    let e = attach();
    if REPLAYING.with(Cell::get) {
        return e;
    }
    /// Clears REPLAYING however the replay ends (an ERROR unwinds here).
    struct Replaying;
    impl Drop for Replaying {
        fn drop(&mut self) {
            REPLAYING.with(|r| r.set(false));
        }
    }
    // The engine's records since its last checkpoint, once per start.
    if let Some(state) = crate::pg::shmem::replay_state() {
        REPLAYING.with(|r| r.set(true));
        let _replaying = Replaying;
        crate::pg::wal::replay_gap_once(state);
    }
    READY.store(true, Ordering::Release);
    e
}

/// Attaches this process to the engine (once) without replaying.
fn attach() -> &'static Engine {
    if let Some(e) = ENGINE.get() {
        return e;
    }
    crate::pg::require_preloaded();
    let pool = crate::pg::shmem::attach_pool()
        .unwrap_or_else(|| internal("orioledb_rs: the shared page pool was not created"));
    let (base, nchunks) = crate::pg::shmem::meta_region()
        .unwrap_or_else(|| internal("orioledb_rs: the engine metadata region was not created"));
    let latches = crate::pg::shmem::PgLatches::meta()
        .unwrap_or_else(|| internal("orioledb_rs: the engine latches were not created"));
    let region = SharedMeta {
        base,
        max_trees: crate::pg::shmem::MAX_TREES,
        nchunks,
        latches: Arc::new(latches),
    };
    // SAFETY: `base` is the metadata region formatted at shmem startup for
    // MAX_TREES/nchunks, mapped for the life of the process, and every
    // process uses the same LWLock tranche for it.
    let attached = unsafe {
        Engine::attach_shared(
            DATA_DIR,
            pool,
            region,
            io().clone(),
            Some(crate::pg::wal::sink()),
        )
    };
    let engine = attached.unwrap_or_else(|e| report(e));
    let first = ENGINE.set(engine).is_ok();
    if first {
        // SAFETY: registering an exit callback with a plain function pointer.
        unsafe {
            pg_sys::before_shmem_exit(Some(release_pins_at_exit), pg_sys::Datum::from(0usize))
        };
        // After every before_shmem_exit callback (the transaction's abort
        // among them, which may still open and cache tree handles).
        // SAFETY: as above; shared memory is still attached then.
        unsafe { pg_sys::on_shmem_exit(Some(release_holds_at_exit), pg_sys::Datum::from(0usize)) };
    }
    if first {
        // Only the process that loaded the durable checkpoint has these:
        // each quarantined tree is reported once per start, in the log.
        for e in ENGINE.get().expect("just set").take_load_damage() {
            error(PgSqlErrorCode::ERRCODE_DATA_CORRUPTED, format!("orioledb: {e}"))
            .detail("The tree is quarantined: queries on its table fail until its files are repaired and the server restarted; other tables are unaffected.")
            .report(PgLogLevel::WARNING);
        }
    }
    ENGINE.get().expect("just set")
}

/// Refuses to let the server start (FATAL in the postmaster, from
/// `_PG_init`) when the engine's control file is damaged or missing beside
/// data files. Every orioledb table depends on it, and at first use it
/// would only be an ERROR repeated by every query while the cluster looks
/// healthy; a missing one on a new cluster is fine.
pub(crate) fn check_control_at_start() {
    // The postmaster loads preload libraries after moving into the data
    // directory, so the relative path is the one every process uses.
    if let Err(e) = Engine::check_control(DATA_DIR, &StdIo::new()) {
        let code = match &e {
            EngineError::Io { .. } => PgSqlErrorCode::ERRCODE_IO_ERROR,
            _ => PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        };
        error(code, format!("orioledb: {e}"))
            .detail(format!(
                "{DATA_DIR}/control names the engine's durable checkpoint; without it no orioledb table can be read."
            ))
            .hint(format!(
                "Restore {DATA_DIR}/control from a backup taken with the rest of {DATA_DIR}, \
                 or remove orioledb_rs from shared_preload_libraries to start without orioledb tables."
            ))
            .report(PgLogLevel::FATAL);
    }
}

/// Whether tree `id` exists: an ERROR for anything but "no such tree"
/// (loading a cold tree can fail for want of room or on its files, and
/// such a tree must not be taken for absent and made anew).
pub fn tree_exists(id: TreeId) -> bool {
    match engine().tree(id) {
        Ok(_) => true,
        Err(EngineError::NoSuchTree(_)) => false,
        Err(e) => report(e),
    }
}

/// Every engine tree (resident or cold); an ERROR if the durable
/// checkpoint's tree list cannot be read.
pub fn tree_ids() -> Vec<orioledb_engine::TreeId> {
    engine().tree_ids().unwrap_or_else(|e| report(e))
}

/// Runs an engine checkpoint and moves the WAL-retaining slot to its redo
/// point. A failed fsync does not return: it PANICs (see [`sync_panic`]).
pub fn checkpoint() -> Result<u64, EngineError> {
    let engine = engine();
    // Before the redo point is chosen, so the WAL after it is kept from then on.
    crate::pg::wal::reserve_slot();
    let done = {
        let _armed = arm_checkpoint_faults();
        engine.checkpoint(0)
    };
    let n = match done {
        Err(e) if e.is_sync_failure() => sync_panic(e),
        r => r?,
    };
    crate::pg::wal::advance_slot();
    Ok(n)
}

/// Ends the server for a failed fsync of an engine file, as PostgreSQL
/// does for its own data files (`data_sync_elevel`): the kernel may have
/// dropped the pages it could not write and will let the next fsync
/// succeed without them, so no later checkpoint could be trusted. The
/// engine has already poisoned itself (no further checkpoint or data-file
/// write succeeds in any process); PANIC makes the postmaster restart the
/// server, and crash recovery rebuilds from the last durable engine
/// checkpoint and WAL, which the slot has kept. `data_sync_retry` is not
/// consulted: the engine never retries.
fn sync_panic(e: EngineError) -> ! {
    let code = match &e {
        EngineError::SyncFailed { source, .. }
            if source.kind() == std::io::ErrorKind::StorageFull =>
        {
            PgSqlErrorCode::ERRCODE_DISK_FULL
        }
        _ => PgSqlErrorCode::ERRCODE_IO_ERROR,
    };
    error(code, format!("orioledb: {e}"))
        .detail(
            "A failed fsync may have lost data the engine wrote; the server restarts and \
             recovers from the last durable engine checkpoint and WAL.",
        )
        .report(PgLogLevel::PANIC);
    unreachable!("PANIC does not return")
}

/// Disarms the fault injector when dropped, however the checkpoint ends.
struct Armed;

impl Drop for Armed {
    fn drop(&mut self) {
        io().arm(u64::MAX);
    }
}

extern "C" {
    /// libc's `_exit`: ends the process without exit callbacks.
    fn _exit(status: std::ffi::c_int) -> !;
}

/// Arms this process's fault injector for the checkpoint about to run, as
/// the session's `orioledb.debug_checkpoint_crash_at` / `_fail_at` ask.
/// Steps count the checkpoint's state-changing file operations from 1,
/// the numbering of the engine's crash tests (`CrashAfter`); other
/// processes' I/O is not counted, and nothing else of this backend does
/// I/O while it runs the checkpoint.
fn arm_checkpoint_faults() -> Armed {
    let crash = crate::pg::guc::debug_checkpoint_crash_at();
    let fail = crate::pg::guc::debug_checkpoint_fail_at();
    if crash > 0 {
        io().arm_with(
            crash - 1,
            Arc::new(move |op, path| {
                pgrx::log!(
                    "orioledb: orioledb.debug_checkpoint_crash_at = {crash}: exiting at checkpoint I/O step {crash} ({op} \"{}\")",
                    path.display()
                );
                // SAFETY: ends the process on the spot, like a kill: no exit
                // callbacks, so the postmaster sees a child that did not
                // clean up (exit code 2) and runs crash recovery, which is
                // what the setting asks for.
                unsafe { _exit(2) }
            }),
        );
    } else if fail > 0 {
        io().arm_with(
            fail - 1,
            Arc::new(move |_, _| {
                std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    format!(
                        "no space left on device (injected by orioledb.debug_checkpoint_fail_at = {fail})"
                    ),
                )
            }),
        );
    }
    Armed
}

/// Before the first tree exists: make sure a durable checkpoint (and so a
/// redo point and the slot) exists, so every tree record is replayable.
pub fn ensure_redo_point() {
    if engine().durable_checkpoint() == 0 {
        checkpoint().unwrap_or_else(|e| report(e));
    }
}

/// A process that exits while Rust frames still hold page guards (FATAL,
/// `proc_exit`) never drops them: give their pins back.
#[pg_guard]
unsafe extern "C-unwind" fn release_pins_at_exit(_code: std::ffi::c_int, _arg: pg_sys::Datum) {
    if let Some(e) = ENGINE.get() {
        // SAFETY: at process exit no guard of this process will be used again.
        unsafe { e.pool().release_local_pins() };
    }
}

/// A process that exits without dropping its tree handles (FATAL,
/// `proc_exit`): give their holds back, or the trees could never be
/// evicted again.
#[pg_guard]
unsafe extern "C-unwind" fn release_holds_at_exit(_code: std::ffi::c_int, _arg: pg_sys::Datum) {
    if let Some(e) = ENGINE.get() {
        e.release_local_holds();
    }
}

/// The tree of relation file `relnode` in database `db`.
pub fn tree_id(db: pg_sys::Oid, relnode: pg_sys::Oid) -> TreeId {
    TreeId::new(db.to_u32(), relnode.to_u32())
}

/// Raises an engine failure as an ERROR with a fitting SQLSTATE (a failed
/// fsync, or a write refused after one, as PANIC).
pub fn report(e: EngineError) -> ! {
    if e.is_sync_failure() {
        sync_panic(e);
    }
    let code = match &e {
        EngineError::Corrupt { .. } | EngineError::Damaged { .. } => {
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED
        }
        EngineError::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull => {
            PgSqlErrorCode::ERRCODE_DISK_FULL
        }
        EngineError::Io { .. } => PgSqlErrorCode::ERRCODE_IO_ERROR,
        EngineError::PoolExhausted(_)
        | EngineError::MetadataFull(_)
        | EngineError::TooManyTrees(_) => PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES,
        EngineError::KeyTooLarge { .. } | EngineError::ItemTooLarge { .. } => {
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED
        }
        EngineError::BadCompression(_) => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        _ => PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
    };
    let hint = match &e {
        EngineError::MetadataFull(_) => Some(
            "The metadata region holds the trees sessions have open or changed since the \
             last engine checkpoint (two chunks for a small tree); run CHECKPOINT, close idle \
             sessions, or raise orioledb.main_buffers (one chunk per four pool pages, at \
             least 1024).",
        ),
        EngineError::TooManyTrees(_) => Some(
            "The tree slots hold the trees sessions have open or changed since the last \
             engine checkpoint, and dropped ones until the next; run CHECKPOINT or close \
             idle sessions.",
        ),
        EngineError::PoolExhausted(_) => Some("Raise orioledb.main_buffers."),
        _ => None,
    };
    let report = error(code, format!("orioledb: {e}"));
    match hint {
        Some(h) => report.hint(h).raise(),
        None => report.raise(),
    }
}
