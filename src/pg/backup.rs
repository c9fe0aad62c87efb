//! Base backups of a server with orioledb tables (`pg_basebackup`, or
//! `pg_backup_start()` / `pg_backup_stop()` with a file copy).
//!
//! A copy restores only if its `orioledb_data` belongs to one engine
//! checkpoint that (a) began after the backup's start (the redo point R of
//! the PostgreSQL checkpoint the backup asked for: the copy holds WAL from
//! R only, and replay starts at the engine's redo point L >= R), and (b)
//! stayed the durable one while files were copied (a later one would free
//! extents of the copied control file's images, and writes would reuse
//! them under the copy). This module owns both rules:
//!
//! * **The checkpoint inside PostgreSQL's.** PostgreSQL 15 has no
//!   checkpoint hook, but the checkpointer logs "checkpoint complete"
//!   (`log_checkpoints`, on by default) before it releases a requester
//!   that waits, such as a backup's start. [`log_hook`] sees that message
//!   in the checkpointer, asks the orioledb worker for an engine checkpoint
//!   and waits until it is answered. Only checkpoints someone waits for
//!   (`wait` among the flags logged when they start) ask: a backup's, a
//!   `CHECKPOINT` statement's; timed ones do not.
//! * **No engine checkpoint while a backup copies.** A backup is *copying*
//!   from its start checkpoint's end to its stop: a `pg_basebackup`
//!   walsender past `waiting for checkpoint to finish` in its progress
//!   report, or a session whose low-level backup is running (published
//!   after each query, utility statement and transaction end,
//!   [`note_session_backup`]). While
//!   any backup runs, the worker's scheduled checkpoints wait; a request
//!   from the checkpointer is answered without a checkpoint while one is
//!   copying. WAL from the kept checkpoint is retained by the engine's slot
//!   meanwhile.
//!
//! Two backups at once are not supported: the second one's start finds
//! the first copying, gets no checkpoint of its own, and its copy is
//! refused when restored (`pg::wal`: a copy that lacks the WAL from the
//! engine's redo point stops with FATAL instead of starting without it).

use pgrx::pg_sys;
use std::cell::Cell;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Walsenders remembered as served (see [`Shared::served_pids`]).
const SERVED_PIDS: usize = 8;

/// The coordination words, in shared memory. Invariant: `served <=
/// requested`; `worker_pid` is the orioledb worker's pid while it serves
/// requests (0 otherwise), `worker_latch` its latch then.
#[repr(C)]
struct Shared {
    /// Engine checkpoints asked for by the checkpointer, counted.
    requested: AtomicU64,
    /// Requests answered, with a checkpoint or without.
    served: AtomicU64,
    /// Requests answered with a checkpoint that completed.
    ran: AtomicU64,
    worker_pid: AtomicI32,
    worker_latch: AtomicUsize,
    /// Sessions whose low-level backup is running.
    low_level: AtomicU32,
    /// `pg_basebackup` walsenders still waiting for their start checkpoint
    /// when a request was served: the checkpoint served was theirs or a
    /// later one, so they count as copying from then on.
    served_pids: [AtomicI32; SERVED_PIDS],
}

const SHARED_NAME: &std::ffi::CStr = c"orioledb_rs backups";

/// Bytes to reserve in `shmem_request_hook`.
pub const SHARED_BYTES: usize = std::mem::size_of::<Shared>();

static SHARED: std::sync::atomic::AtomicPtr<Shared> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// Creates or attaches the shared words (from `shmem_startup_hook`, under
/// `AddinShmemInitLock`).
///
/// # Safety
/// Called in `shmem_startup_hook` after [`SHARED_BYTES`] were requested.
pub unsafe fn attach_shared() {
    let mut found = false;
    // SAFETY: per the contract; a fresh struct is zeroed (all counters 0,
    // no worker), which is a valid `Shared`.
    unsafe {
        let p = pg_sys::ShmemInitStruct(SHARED_NAME.as_ptr(), SHARED_BYTES, &mut found) as *mut Shared;
        if !found {
            std::ptr::write_bytes(p as *mut u8, 0, SHARED_BYTES);
        }
        SHARED.store(p, Ordering::Release);
    }
}

fn shared() -> Option<&'static Shared> {
    let p = SHARED.load(Ordering::Acquire);
    // SAFETY: set once at shmem startup to memory that lives as long as the
    // process; every field is atomic.
    (!p.is_null()).then(|| unsafe { &*p })
}

// ------------------------------------------------------------ the checkpointer

static mut PREV_EMIT_LOG_HOOK: pg_sys::emit_log_hook_type = None;

thread_local! {
    /// Whether the checkpoint the checkpointer is running was logged with
    /// `wait` among its flags.
    static WAITED_FOR: Cell<bool> = const { Cell::new(false) };
}

/// Chains [`log_hook`] in front of any previous `emit_log_hook`, and the
/// places that publish a session's low-level backup (from `_PG_init`,
/// during preload).
pub(crate) fn install_hooks() {
    // SAFETY: single-threaded `_PG_init`; the documented way to chain hooks.
    unsafe {
        PREV_EMIT_LOG_HOOK = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(log_hook);
        PREV_EXECUTOR_RUN = pg_sys::ExecutorRun_hook;
        pg_sys::ExecutorRun_hook = Some(executor_run);
        PREV_EXECUTOR_END = pg_sys::ExecutorEnd_hook;
        pg_sys::ExecutorEnd_hook = Some(executor_end);
    }
    crate::pg::xact::on_event(at_event);
}

/// Sees every message a process emits; acts only on the checkpointer's
/// "checkpoint starting" and "checkpoint complete". Runs inside
/// `EmitErrorReport` (the first one inside the checkpoint's critical
/// section): nothing here may raise an error or allocate, so it only reads
/// the message, touches atomics, sets a latch and sleeps.
unsafe extern "C-unwind" fn log_hook(edata: *mut pg_sys::ErrorData) {
    // SAFETY: the previous hook was valid when saved; `edata` is the report
    // being emitted, its strings NUL-terminated or NULL.
    unsafe {
        if let Some(prev) = PREV_EMIT_LOG_HOOK {
            prev(edata);
        }
        if pg_sys::MyBackendType != pg_sys::BackendType::B_CHECKPOINTER || edata.is_null() {
            return;
        }
        let Some(id) = c_str((*edata).message_id) else { return };
        if id.starts_with(b"checkpoint starting:") {
            let waited = c_str((*edata).message)
                .is_some_and(|m| m.split(|&b| b == b' ').any(|w| w == b"wait"));
            WAITED_FOR.with(|w| w.set(waited));
        } else if id.starts_with(b"checkpoint complete:") && WAITED_FOR.with(|w| w.replace(false)) {
            request_and_wait();
        }
    }
}

/// The bytes of a C string, None for NULL.
///
/// # Safety
/// `p` is NULL or NUL-terminated and outlives the result.
unsafe fn c_str<'a>(p: *const std::ffi::c_char) -> Option<&'a [u8]> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes())
}

/// Asks the worker for an engine checkpoint and waits until it answers, or
/// until there is no worker to answer (not started yet after recovery,
/// stopped at shutdown after its own final checkpoint).
fn request_and_wait() {
    let Some(s) = shared() else { return };
    // No worker, no request: one left pending would be answered later by a
    // checkpoint that is nobody's, as if it were a waiting backup's.
    if s.worker_pid.load(Ordering::Acquire) == 0 {
        return;
    }
    let seq = s.requested.fetch_add(1, Ordering::AcqRel) + 1;
    let since = std::time::Instant::now();
    let latch = s.worker_latch.load(Ordering::Acquire);
    if latch != 0 {
        // SAFETY: the worker's PGPROC latch, in shared memory for the life
        // of the server; setting a latch is safe from any process.
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
    while s.served.load(Ordering::Acquire) < seq {
        let pid = s.worker_pid.load(Ordering::Acquire);
        // SAFETY: kill with signal 0 only asks whether the process exists.
        if pid == 0 || unsafe { libc_kill(pid, 0) } != 0 {
            return;
        }
        // A hung worker must not hang the checkpointer (which also absorbs
        // fsync requests and signal barriers): the worker warns when it
        // answers this late.
        if since.elapsed() >= WAIT_LIMIT {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: std::ffi::c_int) -> std::ffi::c_int;
}

/// How long the checkpointer waits for an answer at most.
pub const WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

// ------------------------------------------------------------ the worker

/// The worker announces itself: requests wake it from now on.
pub fn worker_started() {
    let Some(s) = shared() else { return };
    // SAFETY: MyProc is this process's PGPROC, in shared memory.
    let latch = unsafe { &raw mut (*pg_sys::MyProc).procLatch } as usize;
    s.worker_latch.store(latch, Ordering::Release);
    // SAFETY: a plain read of this process's pid.
    s.worker_pid.store(unsafe { pg_sys::MyProcPid }, Ordering::Release);
}

/// The worker stops serving (at its exit): the checkpointer stops waiting.
pub fn worker_stopping() {
    if let Some(s) = shared() {
        s.worker_pid.store(0, Ordering::Release);
        s.worker_latch.store(0, Ordering::Release);
    }
}

/// The newest request not yet answered, if any.
pub fn pending_request() -> Option<u64> {
    let s = shared()?;
    let r = s.requested.load(Ordering::Acquire);
    (r > s.served.load(Ordering::Acquire)).then_some(r)
}

/// Answers every request up to `seq`; `ran` says whether an engine
/// checkpoint begun after them completed.
pub fn answer(seq: u64, ran: bool) {
    let Some(s) = shared() else { return };
    if ran {
        for (slot, pid) in s.served_pids.iter().zip(served_walsenders().into_iter().chain(std::iter::repeat(0))) {
            slot.store(pid, Ordering::Release);
        }
        s.ran.fetch_add(1, Ordering::AcqRel);
    }
    s.served.fetch_max(seq, Ordering::AcqRel);
}

/// How many requests were answered with a completed engine checkpoint
/// (a `CHECKPOINT` statement that saw it grow needs no checkpoint of its own).
pub fn checkpoints_ran() -> u64 {
    shared().map_or(0, |s| s.ran.load(Ordering::Acquire))
}

// ------------------------------------------------------------ who is backing up

/// `PROGRESS_BASEBACKUP_PHASE_WAIT_CHECKPOINT`: phases up to it come
/// before `do_pg_backup_start` returns, so nothing is copied yet.
const PHASE_WAIT_CHECKPOINT: i64 = 1;

/// `(pid, phase)` of every walsender running a base backup.
fn basebackups() -> Vec<(i32, i64)> {
    let mut out = Vec::new();
    // SAFETY: the backend status functions read the shared status array
    // into this process's snapshot (cleared first so it is current); entries
    // are valid until the next clear.
    unsafe {
        pg_sys::pgstat_clear_backend_activity_snapshot();
        let n = pg_sys::pgstat_fetch_stat_numbackends();
        for i in 1..=n {
            let e = pg_sys::pgstat_fetch_stat_local_beentry(i);
            if e.is_null() {
                continue;
            }
            let st = &(*e).backendStatus;
            if st.st_progress_command == pg_sys::ProgressCommandType::PROGRESS_COMMAND_BASEBACKUP {
                out.push((st.st_procpid, st.st_progress_param[0]));
            }
        }
        pg_sys::pgstat_clear_backend_activity_snapshot();
    }
    out
}

/// The base-backup walsenders whose start checkpoint is the one the
/// checkpointer is finishing now (it waits for our answer): still before
/// their copy, and waiting for that checkpoint to be done. One waiting for
/// a checkpoint to *start* asked while this one ran: the next is theirs.
fn served_walsenders() -> Vec<i32> {
    basebackups()
        .into_iter()
        .filter(|&(pid, phase)| {
            // SAFETY: BackendPidGetProc takes ProcArrayLock and returns the
            // live PGPROC of `pid` or NULL; the wait event is one word the
            // process itself writes.
            phase <= PHASE_WAIT_CHECKPOINT
                && unsafe {
                    let proc_ = pg_sys::BackendPidGetProc(pid);
                    !proc_.is_null()
                        && std::ptr::read_volatile(&raw const (*proc_).wait_event_info)
                            == pg_sys::WaitEventIPC::WAIT_EVENT_CHECKPOINT_DONE
                }
        })
        .map(|(pid, _)| pid)
        .collect()
}

/// Whether some backup is copying files now (no engine checkpoint may
/// complete until it stops).
pub fn copying() -> bool {
    let Some(s) = shared() else { return false };
    if s.low_level.load(Ordering::Acquire) > 0 {
        return true;
    }
    let served: Vec<i32> = s.served_pids.iter().map(|p| p.load(Ordering::Acquire)).collect();
    basebackups()
        .iter()
        .any(|&(pid, phase)| phase > PHASE_WAIT_CHECKPOINT || served.contains(&pid))
}

/// Whether any backup is running, copying or still starting (scheduled
/// engine checkpoints wait for it: one completing between a backup's start
/// checkpoint and its first copied file would be as bad as one during it).
pub fn running() -> bool {
    let Some(s) = shared() else { return false };
    s.low_level.load(Ordering::Acquire) > 0 || !basebackups().is_empty()
}

// ------------------------------------------------------------ low-level backups

static mut PREV_EXECUTOR_RUN: pg_sys::ExecutorRun_hook_type = None;
static mut PREV_EXECUTOR_END: pg_sys::ExecutorEnd_hook_type = None;

thread_local! {
    /// Whether this session counts in `Shared::low_level`.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
    /// Whether the exit callback is registered.
    static EXIT_HOOKED: Cell<bool> = const { Cell::new(false) };
}

// The executor's entry point itself, not pgrx's wrapper of it (see
// `executor_run`).
extern "C-unwind" {
    #[link_name = "standard_ExecutorRun"]
    fn raw_standard_executor_run(
        query: *mut pg_sys::QueryDesc,
        direction: pg_sys::ScanDirection::Type,
        count: u64,
        execute_once: bool,
    );
    #[link_name = "standard_ExecutorEnd"]
    fn raw_standard_executor_end(query: *mut pg_sys::QueryDesc);
}

/// After a query's rows are produced: with the extended protocol the
/// client may have them (and copy files) before `ExecutorEnd`, which can
/// wait for the portal's cleanup.
///
/// Not a `#[pg_guard]` function, and the executor is called directly: an
/// ERROR raised by any query would otherwise cross a Rust error boundary,
/// and pgrx 0.18.1 re-raises it without its CONTEXT, table, schema and
/// constraint fields (a unique violation inside a DO block lost
/// `ef_pkey`: test `extension::errors_keep_their_context_and_fields`).
/// PostgreSQL's longjmp passes over this frame, which holds nothing to
/// drop; the note after the run is guarded on its own.
unsafe extern "C-unwind" fn executor_run(
    query: *mut pg_sys::QueryDesc,
    direction: pg_sys::ScanDirection::Type,
    count: u64,
    execute_once: bool,
) {
    // SAFETY: the executor passes valid arguments to the hook chain.
    unsafe {
        match PREV_EXECUTOR_RUN {
            Some(prev) => prev(query, direction, count, execute_once),
            None => raw_standard_executor_run(query, direction, count, execute_once),
        }
        note_session_backup_guarded();
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn note_session_backup_guarded() {
    note_session_backup();
}

/// Unguarded for the same reason as [`executor_run`].
unsafe extern "C-unwind" fn executor_end(query: *mut pg_sys::QueryDesc) {
    // SAFETY: the executor passes a valid QueryDesc to the hook chain.
    unsafe {
        match PREV_EXECUTOR_END {
            Some(prev) => prev(query),
            None => raw_standard_executor_end(query),
        }
        note_session_backup_guarded();
    }
}

/// At every transaction and subtransaction event (`pg::xact`): a
/// `pg_backup_stop()` that failed after it ended the backup (its wait for
/// archiving cancelled, say) never reaches `ExecutorEnd`, and a PL/pgSQL
/// expression never reaches the executor.
fn at_event(_: crate::pg::xact::Event) {
    note_session_backup();
}

/// Publishes whether this session's low-level backup runs: after every
/// query's execution, utility statement (`hooks::utility`) and transaction
/// or subtransaction end, so before the client that called
/// `pg_backup_start()` hears back and copies a file.
pub fn note_session_backup() {
    // SAFETY: reads this session's backup state (a plain static of xlog.c).
    let running = unsafe { super::raw::get_backup_status() } == pg_sys::SessionBackupState::SESSION_BACKUP_RUNNING;
    if running == COUNTED.with(Cell::get) {
        return;
    }
    let Some(s) = shared() else { return };
    if running {
        if !EXIT_HOOKED.with(|h| h.replace(true)) {
            // SAFETY: registers a plain callback run at backend exit, while
            // shared memory is still attached.
            unsafe { pg_sys::before_shmem_exit(Some(uncount_at_exit), pg_sys::Datum::from(0)) };
        }
        s.low_level.fetch_add(1, Ordering::AcqRel);
    } else {
        s.low_level.fetch_sub(1, Ordering::AcqRel);
    }
    COUNTED.with(|c| c.set(running));
}

/// A session that exits with its backup running has it aborted by
/// PostgreSQL: it stops counting.
unsafe extern "C-unwind" fn uncount_at_exit(_code: std::ffi::c_int, _arg: pg_sys::Datum) {
    if COUNTED.with(|c| c.replace(false)) {
        if let Some(s) = shared() {
            s.low_level.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Whether this process recovers from a base backup that has not yet
/// reached its end (pg_control's backup start point is set), or runs an
/// archive recovery or a standby (`recovery.signal`, `standby.signal`):
/// then WAL the engine needs and cannot read is not coming back, and
/// starting without it would lose changes silently.
pub fn restoring_a_backup() -> bool {
    let mut crc_ok = false;
    // SAFETY: the flag is set by the startup process before redo; reading
    // pg_control from the data directory into palloc'd memory.
    unsafe {
        if pg_sys::ArchiveRecoveryRequested {
            return true;
        }
        let c = pg_sys::get_controlfile(pg_sys::DataDir, &mut crc_ok);
        !c.is_null() && crc_ok && ((*c).backupStartPoint != 0 || (*c).backupEndRequired)
    }
}
