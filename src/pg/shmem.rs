//! The shared page pool and its LWLock tranche.
//!
//! Sizes come from the engine (`PoolRegion`), so the engine alone decides the
//! layout of the region; this module only reserves, creates and remembers it.
//! PostgreSQL 15 requires reservations to happen in `shmem_request_hook`.

use orioledb_engine::latch::{LatchMode, LatchSet};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use orioledb_engine::buffer::{Pool, PoolRegion};
use orioledb_engine::meta::MetaRegion;
use std::sync::Arc;

/// Name of the region in `pg_shmem_allocations`.
pub const POOL_REGION_NAME: &std::ffi::CStr = c"orioledb_rs page pool";
/// Name of the LWLock tranche (shown in `pg_stat_activity.wait_event`).
const TRANCHE_NAME: &std::ffi::CStr = c"orioledb_rs";
/// Name of the engine metadata region (tree directory, page tables).
pub const META_REGION_NAME: &std::ffi::CStr = c"orioledb_rs engine metadata";
/// LWLock tranche of the metadata region's latches.
const META_TRANCHE_NAME: &std::ffi::CStr = c"orioledb_rs_meta";
/// Tree slots in the metadata region (each table needs one to three trees).
pub const MAX_TREES: usize = 4096;

/// 8 kB metadata chunks: page tables (409 pages per chunk) and free-unit
/// bitmaps (32 MB of data file per chunk) for data about ten times the pool.
pub fn meta_chunks(nbuffers: usize) -> usize {
    (nbuffers / 4).max(1024)
}

/// The pool start is rounded up to this, so page I/O buffers are OS-page aligned.
const POOL_ALIGN: usize = 4096;

/// Pages in the pool, fixed at `shmem_request_hook` time (0 = no pool).
static NBUFFERS: AtomicUsize = AtomicUsize::new(0);
/// Aligned start of the formatted pool region, or null before shmem startup.
/// Invariant: when non-null it points to `PoolRegion::size(NBUFFERS)` bytes
/// of shared memory that stay mapped for the life of the process.
static POOL_BASE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
/// First LWLock of the tranche, or null before shmem startup.
/// Invariant: when non-null, `latch_count(NBUFFERS)` LWLocks start here.
static LATCH_BASE: AtomicPtr<pg_sys::LWLockPadded> = AtomicPtr::new(std::ptr::null_mut());

/// Start of the formatted metadata region, or null before shmem startup.
/// Invariant: when non-null it points to `MetaRegion::size(MAX_TREES,
/// meta_chunks(NBUFFERS))` bytes of shared memory mapped for the process's life.
static META_BASE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
/// The engine-log replay state word (see `pg::wal::replay_gap_once`).
static REPLAY_STATE: AtomicPtr<std::sync::atomic::AtomicU32> = AtomicPtr::new(std::ptr::null_mut());
const REPLAY_STATE_NAME: &std::ffi::CStr = c"orioledb_rs replay state";
/// The end of the last engine record recovery applied (see
/// `pg::wal::replayed_end`), or null before shmem startup.
static REPLAYED_END: AtomicPtr<std::sync::atomic::AtomicU64> = AtomicPtr::new(std::ptr::null_mut());
const REPLAYED_END_NAME: &std::ffi::CStr = c"orioledb_rs replayed end";
/// First LWLock of the metadata tranche, or null before shmem startup.
static META_LATCH_BASE: AtomicPtr<pg_sys::LWLockPadded> = AtomicPtr::new(std::ptr::null_mut());

/// Previous hooks, called first so other preloaded extensions keep working.
/// Written only in `install_hooks` (single-threaded `_PG_init`).
static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// Bytes requested for the pool, including alignment slack.
fn region_bytes(nbuffers: usize) -> usize {
    PoolRegion::size(nbuffers) + POOL_ALIGN
}

/// Bytes requested for the metadata region, including alignment slack.
fn meta_region_bytes(nbuffers: usize) -> usize {
    MetaRegion::size(MAX_TREES, meta_chunks(nbuffers)) + 64
}

/// Chains our shared-memory hooks in front of any previous ones.
pub(crate) fn install_hooks() {
    // SAFETY: _PG_init runs single-threaded in the postmaster before any hook
    // can fire; reading and replacing the hook globals is the documented API.
    unsafe {
        PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(shmem_request);
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    // SAFETY: the previous hook was valid when we saved it and expects to be
    // called exactly here.
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST_HOOK {
            prev();
        }
    }
    let nbuffers = crate::pg::guc::main_buffers();
    NBUFFERS.store(nbuffers, Ordering::Relaxed);
    let latches = i32::try_from(PoolRegion::latch_count(nbuffers))
        .expect("orioledb.main_buffers is bounded so the latch count fits in int");
    let meta_latches = i32::try_from(MetaRegion::latch_count(MAX_TREES)).expect("fits in int");
    // SAFETY: we are inside shmem_request_hook, the only place PostgreSQL 15
    // accepts these requests; the tranche names are static strings.
    unsafe {
        pg_sys::RequestAddinShmemSpace(region_bytes(nbuffers));
        pg_sys::RequestNamedLWLockTranche(TRANCHE_NAME.as_ptr(), latches);
        pg_sys::RequestAddinShmemSpace(meta_region_bytes(nbuffers));
        pg_sys::RequestAddinShmemSpace(STATE_BYTES);
        pg_sys::RequestAddinShmemSpace(8);
        pg_sys::RequestAddinShmemSpace(crate::pg::backup::SHARED_BYTES);
        pg_sys::RequestNamedLWLockTranche(META_TRANCHE_NAME.as_ptr(), meta_latches);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    // SAFETY: see shmem_request.
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
    }
    let nbuffers = NBUFFERS.load(Ordering::Relaxed);
    let mut found = false;
    // SAFETY: AddinShmemInitLock (MainLWLockArray[21]) serialises creation of
    // add-in structures; ShmemInitStruct returns `region_bytes` bytes that we
    // reserved in shmem_request (or ERRORs, which releases the lock).
    // GetNamedLWLockTranche is valid after the tranche was requested.
    unsafe {
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let raw = pg_sys::ShmemInitStruct(
            POOL_REGION_NAME.as_ptr(),
            region_bytes(nbuffers),
            &mut found,
        ) as *mut u8;
        // Every process computes the same aligned address from the same `raw`.
        let base = raw.add(raw.align_offset(POOL_ALIGN));
        if !found {
            PoolRegion::format(base, nbuffers);
        }
        POOL_BASE.store(base, Ordering::Release);
        LATCH_BASE.store(
            pg_sys::GetNamedLWLockTranche(TRANCHE_NAME.as_ptr()),
            Ordering::Release,
        );
        let mut meta_found = false;
        let raw = pg_sys::ShmemInitStruct(
            META_REGION_NAME.as_ptr(),
            meta_region_bytes(nbuffers),
            &mut meta_found,
        ) as *mut u8;
        let meta = raw.add(raw.align_offset(64));
        if !meta_found {
            MetaRegion::format(meta, MAX_TREES, meta_chunks(nbuffers));
        }
        META_BASE.store(meta, Ordering::Release);
        let mut state_found = false;
        let state = pg_sys::ShmemInitStruct(REPLAY_STATE_NAME.as_ptr(), STATE_BYTES, &mut state_found)
            as *mut std::sync::atomic::AtomicU32;
        if !state_found {
            // Word 0: replay state; words 2.. : the visibility-map words
            // (see vm_words).
            for i in 0..STATE_BYTES / 4 {
                state.add(i).write(std::sync::atomic::AtomicU32::new(0));
            }
        }
        REPLAY_STATE.store(state, Ordering::Release);
        let mut end_found = false;
        let end = pg_sys::ShmemInitStruct(REPLAYED_END_NAME.as_ptr(), 8, &mut end_found)
            as *mut std::sync::atomic::AtomicU64;
        if !end_found {
            end.write(std::sync::atomic::AtomicU64::new(0));
        }
        REPLAYED_END.store(end, Ordering::Release);
        crate::pg::backup::attach_shared();
        META_LATCH_BASE.store(
            pg_sys::GetNamedLWLockTranche(META_TRANCHE_NAME.as_ptr()),
            Ordering::Release,
        );
        pg_sys::LWLockRelease(init_lock);
    }
}

/// Facts about the pool as seen by this process.
#[derive(Clone, Copy, Debug)]
pub struct PoolInfo {
    /// Pages in the pool.
    pub buffers: usize,
    /// Bytes of the region the engine formatted.
    pub bytes: usize,
    /// LWLocks available to the engine.
    pub latches: usize,
    /// Start of the region (null if shared memory was never set up).
    pub base: *mut u8,
}

/// Attaches this process to the shared pool, or `None` when shared memory
/// was not set up (library not preloaded).
pub fn attach_pool() -> Option<Pool> {
    let info = pool_info()?;
    let latches = Arc::new(PgLatches::get()?);
    // SAFETY: `info.base` is the region formatted by PoolRegion::format for
    // `info.buffers` in shmem_startup; shared memory stays mapped for the life
    // of the process, and every process uses the same LWLock tranche.
    Some(unsafe { Pool::attach(info.base, info.buffers, latches) })
}

/// The metadata region's start and chunk count, or `None` without preload.
pub fn meta_region() -> Option<(*mut u8, usize)> {
    let base = META_BASE.load(Ordering::Acquire);
    (!base.is_null()).then(|| (base, meta_chunks(NBUFFERS.load(Ordering::Relaxed))))
}

/// Returns the pool description, or `None` when the library was not preloaded.
pub fn pool_info() -> Option<PoolInfo> {
    let base = POOL_BASE.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    let buffers = NBUFFERS.load(Ordering::Relaxed);
    Some(PoolInfo {
        buffers,
        bytes: PoolRegion::size(buffers),
        latches: PoolRegion::latch_count(buffers),
        base,
    })
}

/// The engine's latches, backed by the `orioledb_rs` LWLock tranche.
///
/// Invariant: `base` points to `len` LWLocks in shared memory that live as
/// long as the process. LWLocks are released by PostgreSQL on ERROR
/// (`LWLockReleaseAll` in abort), so a latch never outlives a failed
/// transaction. At most ~200 LWLocks may be held at once by one backend
/// (`MAX_SIMUL_LWLOCKS`); the engine's lock order keeps it far below that.
pub struct PgLatches {
    base: *mut pg_sys::LWLockPadded,
    len: usize,
}

// SAFETY: LWLocks are designed for concurrent use from many processes; the
// pointer is to shared memory that never moves or goes away.
unsafe impl Send for PgLatches {}
// SAFETY: as above; every method only passes the pointer to LWLock functions.
unsafe impl Sync for PgLatches {}

impl PgLatches {
    /// The metadata region's tranche, or `None` before shared memory exists.
    pub fn meta() -> Option<PgLatches> {
        let base = META_LATCH_BASE.load(Ordering::Acquire);
        (!base.is_null()).then(|| PgLatches {
            base,
            len: MetaRegion::latch_count(MAX_TREES),
        })
    }

    /// The page pool's tranche, or `None` before shared memory exists.
    pub fn get() -> Option<PgLatches> {
        let base = LATCH_BASE.load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        Some(PgLatches {
            base,
            len: PoolRegion::latch_count(NBUFFERS.load(Ordering::Relaxed)),
        })
    }

    fn lock(&self, i: usize) -> *mut pg_sys::LWLock {
        assert!(
            i < self.len,
            "orioledb: latch {i} out of range (have {})",
            self.len
        );
        // SAFETY: i < len, and len LWLocks start at base (type invariant).
        unsafe { &raw mut (*self.base.add(i)).lock }
    }
}

fn lw_mode(mode: LatchMode) -> pg_sys::LWLockMode::Type {
    match mode {
        LatchMode::Shared => pg_sys::LWLockMode::LW_SHARED,
        LatchMode::Exclusive => pg_sys::LWLockMode::LW_EXCLUSIVE,
    }
}

impl LatchSet for PgLatches {
    fn len(&self) -> usize {
        self.len
    }

    fn acquire(&self, i: usize, mode: LatchMode) {
        // SAFETY: `lock` returns a valid, initialised LWLock; unguarded
        // (`pg::raw`): it raises nothing with the few latches we hold.
        unsafe {
            super::raw::lwlock_acquire(self.lock(i), lw_mode(mode));
        }
    }

    fn try_acquire(&self, i: usize, mode: LatchMode) -> bool {
        // SAFETY: as in acquire.
        unsafe { super::raw::lwlock_conditional_acquire(self.lock(i), lw_mode(mode)) }
    }

    fn release(&self, i: usize, _mode: LatchMode) {
        // SAFETY: as in acquire; the LatchSet contract says the caller holds it.
        unsafe { super::raw::lwlock_release(self.lock(i)) }
    }
}

/// The shared replay-state word, if shared memory was set up.
pub fn replay_state() -> Option<&'static std::sync::atomic::AtomicU32> {
    let p = REPLAY_STATE.load(Ordering::Acquire);
    // SAFETY: set once at shmem startup to a word in shared memory that
    // lives as long as the process.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// The shared word holding the end of the last engine record recovery
/// applied, if shared memory was set up.
pub fn replayed_end() -> Option<&'static std::sync::atomic::AtomicU64> {
    let p = REPLAYED_END.load(Ordering::Acquire);
    // SAFETY: set once at shmem startup to an 8-byte-aligned word in shared
    // memory (ShmemInitStruct MAXALIGNs) that lives as long as the process.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Bytes of the shared state struct: the replay word and the
/// visibility-map words.
const STATE_BYTES: usize = 4 * (2 + VM_WORDS);

/// Visibility-map words (see `am::rows::vismap`): [0] VACUUMs setting bits that
/// found no free slot, [1] a generation raised by every VACUUM that sets
/// bits, [2..34] slots holding the relfilenode each such VACUUM works on,
/// [34] changes made while [0] was non-zero, [35..67] changes made to the
/// table of each slot while it was taken, then per slot
/// [`VM_CHANGED_WORDS`] words: a bit per block changed while it was taken.
pub const VM_WORDS: usize = 2 + 2 * VM_SLOTS + 1 + VM_SLOTS * VM_CHANGED_WORDS;

/// Words of a slot's changed-block set: 65,536 bits (8 kB a slot).
pub const VM_CHANGED_WORDS: usize = 2048;

/// Slots for VACUUMs announcing the table whose map they set.
pub const VM_SLOTS: usize = 32;

/// The shared visibility-map words, if shared memory was set up.
pub fn vm_words() -> Option<&'static [std::sync::atomic::AtomicU32]> {
    let p = REPLAY_STATE.load(Ordering::Acquire);
    // SAFETY: the state struct holds VM_WORDS words from index 2,
    // initialised at shmem startup; it lives as long as the process.
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p.add(2), VM_WORDS) })
}
