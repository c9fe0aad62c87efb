//! The `orioledb.*` configuration parameters.
//!
//! Only defined when the library is preloaded (see `hooks::init`), because
//! `orioledb.main_buffers` sizes shared memory and must be known before the
//! postmaster creates it.

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Default `orioledb.main_buffers`: 16384 pages of 8 kB = 128 MB.
pub const DEFAULT_MAIN_BUFFERS: i32 = 16384;
/// Smallest pool: enough pages for a few concurrent tree descents per backend.
pub const MIN_MAIN_BUFFERS: i32 = 128;
/// Same ceiling as `shared_buffers` (INT_MAX / 2 pages), so byte sizes fit.
pub const MAX_MAIN_BUFFERS: i32 = i32::MAX / 2;

/// Compression level meaning "store pages uncompressed".
pub const COMPRESS_OFF: i32 = -1;
/// Highest zstd level accepted.
pub const COMPRESS_MAX: i32 = 22;

/// Number of 8 kB pages in the shared page pool. PGC_POSTMASTER: constant
/// for the life of the server once `_PG_init` has run.
static MAIN_BUFFERS: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAIN_BUFFERS);
/// Default for the `compress` table option; always within -1..=22 (the GUC
/// machinery rejects anything else).
static DEFAULT_COMPRESS: GucSetting<i32> = GucSetting::<i32>::new(COMPRESS_OFF);
/// Default for `primary_compress`; always within -1..=22.
static DEFAULT_PRIMARY_COMPRESS: GucSetting<i32> = GucSetting::<i32>::new(COMPRESS_OFF);
/// Default for `toast_compress`; always within -1..=22.
static DEFAULT_TOAST_COMPRESS: GucSetting<i32> = GucSetting::<i32>::new(COMPRESS_OFF);

/// Seconds between the checkpointer's engine checkpoints (1 s .. 1 day).
static CHECKPOINT_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(300);

/// Testing aid: the state-changing file operation (1-based) of a session's
/// engine checkpoint at which the process exits as if killed; 0 = off.
static DEBUG_CHECKPOINT_CRASH_AT: GucSetting<i32> = GucSetting::<i32>::new(0);
/// Testing aid: the state-changing file operation (1-based) of a session's
/// engine checkpoint from which on file operations fail with "no space
/// left on device"; 0 = off.
static DEBUG_CHECKPOINT_FAIL_AT: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Defines all `orioledb.*` GUCs and reserves the prefix.
///
/// Must be called once, from `_PG_init` during preload.
// Long because it is the list of the extension's GUC definitions, one call
// each.
pub(crate) fn register() {
    GucRegistry::define_int_guc(
        c"orioledb.main_buffers",
        c"Size of the orioledb shared page pool.",
        c"Pages of orioledb tables are cached in this pool (8 kB each); tables may be \
          larger than the pool. Accepts memory units, e.g. '1GB'. Requires a restart.",
        &MAIN_BUFFERS,
        MIN_MAIN_BUFFERS,
        MAX_MAIN_BUFFERS,
        GucContext::Postmaster,
        GucFlags::UNIT_BLOCKS,
    );
    let compress_long = c"-1 stores pages uncompressed, 0 uses zstd's default level, \
        1..22 is the zstd level (higher is smaller and slower). Applies to tables \
        created afterwards that do not set the option themselves.";
    GucRegistry::define_int_guc(
        c"orioledb.default_compress",
        c"Default zstd level for the compress option of orioledb tables.",
        compress_long,
        &DEFAULT_COMPRESS,
        COMPRESS_OFF,
        COMPRESS_MAX,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"orioledb.default_primary_compress",
        c"Default zstd level for the primary tree of orioledb tables.",
        compress_long,
        &DEFAULT_PRIMARY_COMPRESS,
        COMPRESS_OFF,
        COMPRESS_MAX,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"orioledb.default_toast_compress",
        c"Default zstd level for the toast tree of orioledb tables.",
        compress_long,
        &DEFAULT_TOAST_COMPRESS,
        COMPRESS_OFF,
        COMPRESS_MAX,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"orioledb.checkpoint_timeout",
        c"Time between automatic checkpoints of the orioledb engine.",
        c"The orioledb checkpointer writes every modified page of orioledb tables \
          to their data files this often (and at shutdown). CHECKPOINT also runs one.",
        &CHECKPOINT_TIMEOUT,
        1,
        86400,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"orioledb.debug_checkpoint_crash_at",
        c"Testing aid: stop the process at this I/O step of the engine checkpoint.",
        c"A CHECKPOINT run by this session exits the server process abruptly (the \
          postmaster then restarts the server and runs crash recovery) at its N-th file \
          write, sync, truncation, rename or removal, counted from 1. 0 turns it off. \
          For crash tests only.",
        &DEBUG_CHECKPOINT_CRASH_AT,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"orioledb.debug_checkpoint_fail_at",
        c"Testing aid: fail the engine checkpoint with a disk-full error at this I/O step.",
        c"A CHECKPOINT run by this session fails with SQLSTATE 53100 from its N-th file \
          write, sync, truncation, rename or removal on, counted from 1, as on a full \
          disk; the previous checkpoint stays the durable one. 0 turns it off. \
          For tests only.",
        &DEBUG_CHECKPOINT_FAIL_AT,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
    // SAFETY: called from _PG_init in the postmaster's main thread with a
    // NUL-terminated static string; PostgreSQL keeps its own copy.
    unsafe { pgrx::pg_sys::MarkGUCPrefixReserved(c"orioledb".as_ptr()) };
}

/// Pages in the shared pool (`orioledb.main_buffers`), always >= 128.
pub fn main_buffers() -> usize {
    // The GUC's minimum keeps this positive, so the cast cannot wrap.
    MAIN_BUFFERS.get() as usize
}

/// `orioledb.default_compress`: -1 = off, 0 = zstd default, 1..=22 = level.
pub fn default_compress() -> i32 {
    DEFAULT_COMPRESS.get()
}

/// `orioledb.default_primary_compress`: -1 = off, 0 = zstd default, 1..=22 = level.
pub fn default_primary_compress() -> i32 {
    DEFAULT_PRIMARY_COMPRESS.get()
}

/// `orioledb.default_toast_compress`: -1 = off, 0 = zstd default, 1..=22 = level.
pub fn default_toast_compress() -> i32 {
    DEFAULT_TOAST_COMPRESS.get()
}

/// `orioledb.checkpoint_timeout`.
pub fn checkpoint_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(CHECKPOINT_TIMEOUT.get().max(1) as u64)
}

/// `orioledb.debug_checkpoint_crash_at`: 0 = off, else a 1-based I/O step.
pub fn debug_checkpoint_crash_at() -> u64 {
    DEBUG_CHECKPOINT_CRASH_AT.get().max(0) as u64
}

/// `orioledb.debug_checkpoint_fail_at`: 0 = off, else a 1-based I/O step.
pub fn debug_checkpoint_fail_at() -> u64 {
    DEBUG_CHECKPOINT_FAIL_AT.get().max(0) as u64
}
