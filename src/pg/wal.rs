//! The engine's log in PostgreSQL's WAL (design decisions 7 and 8).
//!
//! * A custom resource manager, id [`RM_ID`] (`RegisterCustomRmgr`, at
//!   preload), carries the engine's row-level records (`wal.rs` format) as
//!   the main data of one WAL record each, `info` = record kind << 4.
//!   Records are logged under the leaf latch right after the change, so
//!   they reach WAL before the transaction's commit record and are durable
//!   exactly when heap changes would be (`synchronous_commit` included).
//! * Replay: applied in order on the engine checkpoint's image from its
//!   redo point L on (records before L are skipped: the image has them).
//!   Puts and deletes set final states; a patch or delta rebuilds a value
//!   from the one its key (or base) has then, so a replay cut short is not
//!   run again over the same shared pool: it PANICs, and the restart
//!   loads the image afresh. The first process to use the engine after startup loads
//!   the last engine checkpoint (redo point L) and replays the engine's
//!   records from L up to where PostgreSQL's own redo starts (the startup
//!   process, from `rm_startup`) or up to the end of WAL (normal running,
//!   e.g. after a clean shutdown that PostgreSQL needed no redo for);
//!   during PostgreSQL's redo `rm_redo` applies the rest.
//! * WAL from L on is kept by the physical replication slot
//!   [`SLOT_NAME`], advanced after every engine checkpoint.
//! * An engine checkpoint's redo point L is the start of a marker record
//!   of ours (`REDO_POINT`, see [`PgWal::redo_point`]), and it flushes WAL
//!   up to L before its control file names the new images (they may embody
//!   pruning decided from commits logged before L). Replay skips markers.

use orioledb_engine::order::{Bytewise, KeyCmp};
use orioledb_engine::key_format::DESC_KEY;
use orioledb_engine::wal::{Edit, Lsn, Record, WalSink};
use orioledb_engine::{Engine, EngineError, Replayed, Tree, TreeId};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Our resource manager id: in the custom range 128-255 and not on the
/// PostgreSQL wiki's list of ids taken by known extensions
/// (wiki.postgresql.org/wiki/CustomWALResourceManagers; OrioleDB has 129).
pub const RM_ID: u8 = 201;

/// `info >> 4` of our records that are not engine records (the engine's
/// kinds take the other fifteen values of `info`'s four bits): an engine
/// checkpoint's redo-point marker (8 bytes), a row change for logical
/// decoding (`pg::decode`, first byte 1..3) or a recovery-conflict horizon
/// ([`log_conflict`], first byte 4, 13 bytes). Replay changes nothing for
/// them.
pub(crate) const KIND_MARKER: u8 = 15;

/// The replication slot that keeps WAL from the engine's redo point.
pub const SLOT_NAME: &CStr = c"orioledb_rs";

static RM_NAME: &CStr = c"orioledb_rs";

/// Registers the resource manager (from `_PG_init`, during preload).
pub(crate) fn register() {
    static mut RMGR: pg_sys::RmgrData = pg_sys::RmgrData {
        rm_name: std::ptr::null(),
        rm_redo: Some(redo),
        rm_desc: Some(desc),
        rm_identify: Some(identify),
        rm_startup: Some(startup),
        rm_cleanup: None,
        rm_mask: None,
        rm_decode: Some(crate::pg::decode::decode),
    };
    // SAFETY: _PG_init runs once during preload; RegisterCustomRmgr keeps
    // the pointer, and RMGR is static and never modified after this.
    unsafe {
        RMGR.rm_name = RM_NAME.as_ptr();
        pg_sys::RegisterCustomRmgr(RM_ID, &raw mut RMGR);
    }
}

/// The engine's sink: one WAL record per engine record, and a redo-point
/// marker per engine checkpoint.
pub struct PgWal;

impl WalSink for PgWal {
    fn log(&self, record: &[u8]) -> Lsn {
        let kind = record.first().copied().unwrap_or(0);
        // SAFETY: XLogRegisterData only keeps the pointer until XLogInsert,
        // which copies the data into WAL buffers.
        unsafe {
            pg_sys::XLogBeginInsert();
            pg_sys::XLogRegisterData(record.as_ptr() as *mut c_char, record.len() as i32);
            pg_sys::XLogInsert(RM_ID, kind << 4)
        }
    }

    /// Logs a marker and returns its start as the redo point.
    ///
    /// Why not `GetXLogInsertRecPtr()`: it is where the next record will
    /// start, which just after a WAL page boundary lies past the page header
    /// (e.g. 0/1982018) while nothing is on that page yet. `XLogFlush` only
    /// flushes up to the end of reserved WAL, computed so that such a
    /// position maps to the page's start (0/1982000, `XLogBytePosToEndRecPtr`
    /// in xlog.c), and then refuses: "xlog flush request 0/1982018 is not
    /// satisfied --- flushed only to 0/1982000", failing the checkpoint at
    /// random (always right after `pg_switch_wal()`). The start of a record
    /// we insert ourselves is a position WAL is reserved beyond (the
    /// record's own bytes), so `XLogFlush` of it always succeeds.
    ///
    /// It is a correct redo point: the checkpoint holds the barrier
    /// exclusively, and every engine record is inserted under the barrier
    /// held shared, so each one has either been inserted completely before
    /// the marker (it precedes the marker's start: its change is in the
    /// image) or is inserted after it (it starts after the marker: replay
    /// from the marker applies it). Flushing to the marker's start makes
    /// every record that precedes it durable — the engine records whose
    /// changes are in the image and the commit records pruning there was
    /// decided from — before the control file names the image.
    ///
    /// The marker is marked unimportant (like the running-xacts record),
    /// so an idle server's engine checkpoints do not count as activity for
    /// PostgreSQL's checkpoint skipping or `archive_timeout`.
    fn redo_point(&self, checkpoint: u64) -> Lsn {
        // During recovery nothing is logged and the exact replay position
        // stands in ([`replayed_end`]).
        // SAFETY: a flag read from shared memory.
        if unsafe { pg_sys::RecoveryInProgress() } {
            return replayed_end();
        }
        log_marker(&checkpoint.to_le_bytes(), pg_sys::XLOG_MARK_UNIMPORTANT as u8)
    }

    fn enter_critical(&self) {
        // SAFETY: PostgreSQL's START_CRIT_SECTION: a process-local counter;
        // while it is non-zero every ERROR is promoted to PANIC.
        unsafe { pg_sys::CritSectionCount += 1 };
    }

    fn leave_critical(&self) {
        // SAFETY: END_CRIT_SECTION of the enter above.
        unsafe { pg_sys::CritSectionCount -= 1 };
    }

    fn fatal(&self, what: &str) -> ! {
        crate::pg::error::error(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("orioledb: {what}"))
            .report(PgLogLevel::PANIC);
        unreachable!("PANIC does not return")
    }

    /// Makes WAL up to `upto` durable before the control file names an
    /// image with that redo point. During recovery nothing is written, and
    /// `XLogFlush` moves the minimum recovery point instead: a standby
    /// whose engine image holds changes up to `upto` must not count as
    /// consistent (open for queries, or follow a new timeline that forks)
    /// before replay has passed them again.
    fn flush(&self, upto: Lsn) {
        // SAFETY: flushing WAL written so far (`upto` is the start of the
        // marker `redo_point` inserted), or in recovery a replay position.
        unsafe { pg_sys::XLogFlush(upto) }
    }
}

/// The sink for this process's engine handle.
pub fn sink() -> Arc<dyn WalSink> {
    Arc::new(PgWal)
}

thread_local! {
    /// Per tree, the order replay compares its keys by, read from the tree's
    /// key descriptor item; forgotten when a record may change the
    /// descriptor (a write of its key, create, drop, truncate).
    static ORDERS: std::cell::RefCell<std::collections::HashMap<TreeId, Arc<dyn KeyCmp>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// What replay needs from the table access method, which sits above this
/// layer and registers it when the library loads (`am::install`).
pub struct ReplayHooks {
    /// The key order the descriptor item `desc` of `tree` names (None:
    /// byte order).
    pub key_order: fn(tree: Tree, desc: &[u8]) -> Option<Arc<dyn KeyCmp>>,
    /// Runs in the startup process once the engine is attached, before
    /// PostgreSQL's redo (with the ids of every tree).
    pub at_startup: fn(trees: &[TreeId]),
    /// The transaction that superseded the row version `value` under
    /// `key`, up to which snapshots may still see it (0: none, or not a
    /// row version).
    pub superseded_by: fn(key: &[u8], value: &[u8]) -> u32,
}

static HOOKS: std::sync::OnceLock<ReplayHooks> = std::sync::OnceLock::new();

/// Registers the access method's [`ReplayHooks`] (once, at load).
pub fn set_replay_hooks(h: ReplayHooks) {
    let _ = HOOKS.set(h);
}

fn hooks() -> &'static ReplayHooks {
    HOOKS.get().expect("replay hooks are registered when the library loads")
}

/// The key order of tree `id` for replay: a tree keyed by libc-collated
/// text compares with its locale (`table.rs`), every other tree as bytes.
/// The descriptor item sorts first under either order, so it is read with
/// a plain byte-order handle.
fn replay_order(id: TreeId) -> Arc<dyn KeyCmp> {
    if let Some(c) = ORDERS.with(|o| o.borrow().get(&id).cloned()) {
        return c;
    }
    let cmp = crate::pg::engine::engine()
        .tree(id)
        .ok()
        .and_then(|t| {
            let b = t.get(DESC_KEY).ok().flatten()?;
            (hooks().key_order)(t, &b)
        })
        .unwrap_or_else(|| Arc::new(Bytewise));
    ORDERS.with(|o| o.borrow_mut().insert(id, cmp.clone()));
    cmp
}

/// Replays one WAL record of our resource manager (`info` as logged): an
/// engine record, or a marker (a redo point or a row change: skipped; a
/// conflict horizon: standby queries it conflicts with are cancelled). A
/// marker changes nothing, so replaying it twice, or on a standby, is
/// harmless.
/// `end`: where the record ends, when PostgreSQL's redo replays it (see
/// [`replayed_end`]).
fn replay_wal_record(info: u8, bytes: &[u8], end: Option<Lsn>) {
    if info >> 4 == KIND_MARKER {
        if let Some((xid, tree)) = decode_conflict(bytes) {
            resolve_conflict(xid, tree);
        }
        return;
    }
    replay_one(bytes, end);
}

/// First byte of a conflict marker (a row change's is 1..3).
const CONFLICT_MARKER: u8 = 4;
/// Bytes of a conflict marker: the byte, the horizon, the tree.
const CONFLICT_BYTES: usize = 13;

/// Logs that the changes of tree `tree` logged next (VACUUM's freezing)
/// make versions visible to standby snapshots that still count
/// transactions up to `horizon` as running: replay on a hot standby cancels
/// those queries first, as heap's freeze records do (an `info` kind 15
/// marker: replay changes nothing for it).
fn log_conflict(horizon: u32, tree: TreeId) {
    let mut b = Vec::with_capacity(CONFLICT_BYTES);
    b.push(CONFLICT_MARKER);
    for n in [horizon, tree.db, tree.rel] {
        b.extend_from_slice(&n.to_le_bytes());
    }
    // SAFETY: a read of a setting fixed at server start.
    if unsafe { pg_sys::wal_level } >= pg_sys::WalLevel::WAL_LEVEL_REPLICA as i32 {
        log_marker(&b, 0);
    }
}

/// Logs `data` as a record of kind [`KIND_MARKER`] with `flags`
/// (`XLogSetRecordFlags`); returns the record's start.
pub(crate) fn log_marker(data: &[u8], flags: u8) -> Lsn {
    // SAFETY: XLogRegisterData keeps the pointer only until XLogInsert,
    // which copies the data; ProcLastRecPtr is this process's start of the
    // record it inserted last.
    unsafe {
        pg_sys::XLogBeginInsert();
        if flags != 0 {
            pg_sys::XLogSetRecordFlags(flags);
        }
        pg_sys::XLogRegisterData(data.as_ptr() as *mut c_char, data.len() as i32);
        pg_sys::XLogInsert(RM_ID, KIND_MARKER << 4);
        pg_sys::ProcLastRecPtr
    }
}

/// [`log_conflict`] for tree `tree` of relation `rel`, when standbys can
/// have queries on it at all (a permanent relation: a standby refuses to
/// read unlogged ones, and temporary ones are their session's).
///
/// # Safety
/// `rel` is an open relation.
pub unsafe fn log_conflict_for(rel: pg_sys::Relation, horizon: u32, tree: TreeId) {
    // SAFETY: per the contract.
    if unsafe { (*(*rel).rd_rel).relpersistence } == pg_sys::RELPERSISTENCE_PERMANENT as c_char {
        log_conflict(horizon, tree);
    }
}

/// The horizon and tree of a conflict marker ([`log_conflict`]).
fn decode_conflict(b: &[u8]) -> Option<(u32, TreeId)> {
    if b.len() != CONFLICT_BYTES || b[0] != CONFLICT_MARKER {
        return None;
    }
    let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    Some((u32at(1), TreeId::new(u32at(5), u32at(9))))
}

/// The redo point of an engine checkpoint taken during recovery (a
/// standby's restartpoint of the engine), read while the checkpoint holds
/// the barrier: every engine record that lies wholly before it is in the
/// image, and none that starts at or after it.
///
/// PostgreSQL's replay position alone (`GetXLogReplayRecPtr`, the end of
/// the last record whose redo returned) is not exact: between our redo
/// releasing the barrier and the startup process moving that position on,
/// a checkpoint would see the record applied but the position still at its
/// start, and replay would apply it twice (a delta over its own result).
/// So redo also notes the end of each engine record it applied, under the
/// barrier ([`replay_one`]). And while redo skips the records before the
/// engine's last redo point (the image it loaded has them: a standby
/// consistent again soon after a restart), the pool is ahead of both: the
/// durable redo point is a floor. The latest of the three is the point;
/// the record the startup process waits to apply (blocked on the barrier)
/// starts at or after each.
fn replayed_end() -> Lsn {
    // SAFETY: reads of recovery's shared replay position.
    let replayed = unsafe { pg_sys::GetXLogReplayRecPtr(std::ptr::null_mut()) };
    let noted = crate::pg::shmem::replayed_end().map_or(0, |e| e.load(Ordering::Acquire));
    let durable = crate::pg::engine::engine().redo_position();
    replayed.max(noted).max(durable)
}

/// A tree created before the engine's redo point is in the engine's image,
/// yet its relation's visibility map is emptied here too: redo may have
/// written page images of that map since recovery's start, and clears made
/// after the creation were never logged, so bits in such an image would
/// claim all-visible for blocks that are not (index-only scans would
/// return deleted rows). Today's one source, a database copy with
/// `STRATEGY WAL_LOG`, logs map pages as standard pages, whose bits lie in
/// the "hole" the image leaves out, so replay restores them empty (seen in
/// `pg_waldump`: 24 bytes of image per map page); this keeps the rule from
/// resting on that.
fn forget_map_of_created(info: u8, bytes: &[u8]) {
    // By the record's kind in `info`: a redo-point marker's bytes are a
    // checkpoint number, whose first byte may look like a CREATE's kind.
    if info >> 4 != orioledb_engine::wal::KIND_CREATE {
        return;
    }
    let rec = Engine::decode_record(bytes).unwrap_or_else(|e| crate::pg::engine::report(e));
    if let Record::Create { tree, .. } = rec {
        (hooks().at_startup)(&[tree]);
    }
}

fn replay_one(bytes: &[u8], end: Option<Lsn>) {
    let rec = Engine::decode_record(bytes).unwrap_or_else(|e| crate::pg::engine::report(e));
    if let Record::Update {
        tree,
        conflict,
        new_key,
        ..
    } = &rec
    {
        if *conflict != 0 {
            resolve_conflict(*conflict, *tree);
        }
        resolve_overwrite_conflict(*tree, new_key);
    }
    let changes_order = match &rec {
        Record::Put { tree, key, .. }
        | Record::Delete { tree, key, .. }
        | Record::Patch { tree, key, .. } => (key == DESC_KEY).then_some(*tree),
        Record::PutPair {
            tree, first, key, ..
        }
        | Record::PutPairDelta {
            tree, first, key, ..
        } => (key == DESC_KEY || first.0 == DESC_KEY)
            .then_some(*tree),
        Record::PutRun { tree, items } => items
            .iter()
            .any(|(k, _)| k == DESC_KEY)
            .then_some(*tree),
        // A version's header and its successor: never the descriptor.
        Record::IdLimit { .. } | Record::Update { .. } => None,
        r => Some(r.tree()),
    };
    let forget = || {
        if let Some(t) = changes_order {
            ORDERS.with(|o| o.borrow_mut().remove(&t));
        }
    };
    forget();
    if let Record::Create { tree, .. } = &rec {
        // A relation file made after recovery's start (whose map fork the
        // startup hook did not know) starts without a map too: a map page
        // written out before the crash may hold bits whose clears were
        // lost. Its buffers may exist already (a WAL_LOG database copy
        // logs the template's map pages before the copy's trees are
        // created): the hook drops them with the fork. Only in recovery,
        // where no backend has read it.
        // SAFETY: a flag read.
        if unsafe { pg_sys::RecoveryInProgress() } {
            (hooks().at_startup)(&[*tree]);
        }
    }
    // Applied and noted as one step for a checkpoint taken meanwhile
    // ([`replayed_end`]); the recovery conflict above was resolved first,
    // outside the barrier, since it waits for standby queries. A drop or
    // truncate takes the checkpoint latch and then the barrier itself (as
    // a checkpoint does): holding the barrier first would invert that
    // order against a checkpoint waiting for the barrier under the latch.
    // They hold the latch throughout, so no checkpoint starts inside them,
    // and applying one again over its own result changes nothing: noted
    // after.
    let engine = crate::pg::engine::engine();
    let note = || {
        if let (Some(end), Some(noted)) = (end, crate::pg::shmem::replayed_end()) {
            noted.fetch_max(end, Ordering::AcqRel);
        }
    };
    let replay = |rec: Record| {
        if matches!(rec, Record::Drop { .. } | Record::Truncate { .. }) {
            let r = engine.replay_record(rec, &replay_order);
            note();
            r
        } else {
            engine.atomically(|| {
                let r = engine.replay_record(rec, &replay_order);
                note();
                r
            })
        }
    };
    let done = match replay(rec) {
        // Inside the barrier, room is made only if no checkpoint runs: out
        // of it, wait for one and evict, then apply the record (records
        // are idempotent; this one stopped before changing anything).
        Err(EngineError::TooManyTrees(_) | EngineError::MetadataFull(_)) => {
            engine.make_room();
            replay(Engine::decode_record(bytes).unwrap_or_else(|e| crate::pg::engine::report(e)))
        }
        r => r,
    }
    .unwrap_or_else(|e| crate::pg::engine::report(e));
    forget();
    if let Replayed::SkippedDamaged(id) = done {
        warn_skipped(id);
    }
}

/// On a hot standby, before replay of an update puts its new version under
/// `key`: what this standby holds there may be a version its queries still
/// see, which the primary pruned without logging (so the update's record
/// says there was nothing to replace, `conflict` 0). Cancels the queries
/// whose snapshots may see it, as for a logged conflict. (Seen as a standby
/// query that lost a pgbench branch row: its version was overwritten by
/// the row's update that took its row id back.)
fn resolve_overwrite_conflict(tree: TreeId, key: &[u8]) {
    if !in_hot_standby() {
        return;
    }
    let held = crate::pg::engine::engine()
        .tree_with(tree, replay_order(tree))
        .and_then(|t| t.get(key));
    // Nothing there (or a tree replay will report on itself next).
    if let Ok(Some(value)) = held {
        let xid = (hooks().superseded_by)(key, &value);
        if xid != 0 {
            resolve_conflict(xid, tree);
        }
    }
}

/// Whether this is a standby that may run queries (whose snapshots replay
/// must not pull rows from under).
fn in_hot_standby() -> bool {
    // SAFETY: a state word of the startup process.
    unsafe { pg_sys::standbyState >= pg_sys::HotStandbyState::STANDBY_SNAPSHOT_PENDING }
}

/// On a hot standby, before replay overwrites a version that snapshots up
/// to transaction `xid` could still see (a row id an update took back on
/// the primary, whose horizon knew nothing of this standby's queries):
/// cancels the queries of the tree's database whose snapshots might, as
/// heap's prune records do (after `max_standby_streaming_delay`).
fn resolve_conflict(xid: u32, tree: TreeId) {
    // SAFETY: a state word of the startup process; the conflict resolution
    // signals and waits for backends as heap's redo does.
    if !in_hot_standby() {
        return;
    }
    unsafe {
        pg_sys::ResolveRecoveryConflictWithSnapshot(
            xid.into(),
            pg_sys::RelFileNode {
                spcNode: pg_sys::DEFAULTTABLESPACE_OID,
                dbNode: tree.db.into(),
                relNode: tree.rel.into(),
            },
        );
    }
}

/// Says once per process and tree that replay passes over a damaged tree's
/// records: failing recovery instead would keep the whole server down for
/// one table's files, which the table's queries report anyway.
fn warn_skipped(id: TreeId) {
    thread_local! {
        static WARNED: std::cell::RefCell<std::collections::HashSet<TreeId>> =
            std::cell::RefCell::new(std::collections::HashSet::new());
    }
    if WARNED.with(|w| w.borrow_mut().insert(id)) {
        pgrx::warning!(
            "orioledb: skipping WAL records of damaged tree {}/{}: its changes since its last checkpoint are not applied",
            id.db,
            id.rel
        );
    }
}

/// The main data of a decoded record (empty when it has none: a NULL
/// pointer must not become a slice).
///
/// # Safety
/// `rec` is a valid decoded record.
pub(crate) unsafe fn main_data<'a>(rec: *const pg_sys::DecodedXLogRecord) -> &'a [u8] {
    // SAFETY: per the contract; main_data holds main_data_len bytes.
    unsafe {
        if (*rec).main_data.is_null() || (*rec).main_data_len == 0 {
            return &[];
        }
        std::slice::from_raw_parts((*rec).main_data as *const u8, (*rec).main_data_len as usize)
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL passes the decoded record being replayed.
    unsafe {
        // PostgreSQL's redo may start before the engine's redo point: what
        // lies before it is in the engine's checkpoint image already, and
        // must not be applied again (a patch of a version pruned before
        // that checkpoint would find nothing to patch).
        let rec = (*record).record;
        let data = main_data(rec);
        if (*record).ReadRecPtr < crate::pg::engine::engine().redo_position() {
            forget_map_of_created((*rec).header.xl_info, data);
            return;
        }
        replay_wal_record((*rec).header.xl_info, data, Some((*record).EndRecPtr));
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn startup() {
    // The startup process attaches here: loading the checkpoint and
    // replaying the gap up to PostgreSQL's redo start happen in engine().
    (hooks().at_startup)(&crate::pg::engine::tree_ids());
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const c_char {
    let name: &'static CStr = match info >> 4 {
        1 => c"CREATE",
        2 => c"DROP",
        10 => c"PUT",
        11 => c"DELETE",
        5 => c"ROW_ID_LIMIT",
        6 => c"TRUNCATE",
        7 => c"PATCH",
        8 => c"PUT_PAIR",
        0 => c"HEADER",
        3 => c"UPDATE",
        4 => c"PUT_PAIR_DELTA",
        12 => c"PUT_RUN",
        14 => c"SPLICE",
        KIND_MARKER => c"MARKER",
        _ => c"UNKNOWN",
    };
    name.as_ptr()
}

#[pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL passes a decoded record and a valid StringInfo.
    unsafe {
        let rec = (*record).record;
        let data = main_data(rec);
        let text = if (*rec).header.xl_info >> 4 == KIND_MARKER {
            match (<[u8; 8]>::try_from(data), crate::pg::decode::RowChange::decode(data), decode_conflict(data)) {
                (Ok(n), ..) => format!("engine checkpoint {}", u64::from_le_bytes(n)),
                (_, Some(c), _) => c.describe(),
                (.., Some((xid, t))) => format!("recovery conflict horizon {xid} tree {}/{}", t.db, t.rel),
                _ => format!("undecodable: {} bytes", data.len()),
            }
        } else {
            match Record::decode(data) {
                Ok(r) => describe(&r),
                Err(e) => format!("undecodable: {e}"),
            }
        };
        let c = CString::new(text).unwrap_or_default();
        pg_sys::appendStringInfoString(buf, c.as_ptr());
    }
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .take(16)
        .map(|x| format!("{x:02x}"))
        .collect::<String>()
        + if b.len() > 16 { "..." } else { "" }
}

/// What an edit writes, for [`describe`].
fn edited(edit: &Edit) -> String {
    match edit {
        Edit::Ranges(r) => format!("{} bytes patched", r.iter().map(|r| r.1.len()).sum::<usize>()),
        Edit::Splice { middle, .. } => format!("{} bytes spliced in", middle.len()),
        Edit::Header(h) => format!("header fields {:#x} set", h.mask),
    }
}

/// One line per record for `pg_waldump`.
pub fn describe(r: &Record) -> String {
    let t = r.tree();
    let tree = format!("tree {}/{}", t.db, t.rel);
    match r {
        Record::Create { compress, .. } => format!("{tree} compress {compress}"),
        Record::Drop { .. } | Record::Truncate { .. } => tree,
        Record::Put { key, value, .. } => {
            format!("{tree} key {} value {} bytes", hex(key), value.len())
        }
        Record::Delete { key, .. } => format!("{tree} key {}", hex(key)),
        Record::IdLimit { limit, .. } => format!("{tree} limit {limit}"),
        Record::Patch { key, len, edit, .. } => {
            format!("{tree} key {} value {len} bytes, {}", hex(key), edited(edit))
        }
        Record::PutPair {
            first, key, value, ..
        } => format!(
            "{tree} key {} value {} bytes, key {} value {} bytes",
            hex(&first.0),
            first.1.len(),
            hex(key),
            value.len()
        ),
        Record::PutPairDelta {
            first,
            key,
            base,
            delta,
            ..
        } => format!(
            "{tree} key {} value {} bytes, key {} as a delta of {} ({} bytes new)",
            hex(&first.0),
            first.1.len(),
            hex(key),
            hex(base),
            delta.head.len() + delta.middle.len() + delta.tail.len()
        ),
        Record::Update {
            key,
            len,
            edit,
            first,
            new_key,
            delta,
            ..
        } => format!(
            "{tree} key {} value {len} bytes, {}{}; key {} as a delta of it ({} bytes new)",
            hex(key),
            edited(edit),
            first
                .as_ref()
                .map_or_else(String::new, |(k, v)| format!("; key {} value {} bytes", hex(k), v.len())),
            hex(new_key),
            delta.head.len() + delta.middle.len() + delta.tail.len()
        ),
        Record::PutRun { items, .. } => format!(
            "{tree} {} keys from {} to {}, {} bytes",
            items.len(),
            items.first().map_or_else(String::new, |i| hex(&i.0)),
            items.last().map_or_else(String::new, |i| hex(&i.0)),
            items.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
        ),
    }
}

/// Replays the engine's records from its redo point once per server start
/// (whichever process attaches first); others wait for it. `state` is a
/// shared word: 0 = not replayed, 1 = a process is replaying, 2 = done.
pub fn replay_gap_once(state: &AtomicU32) {
    loop {
        match state.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(2) => return,
            Err(_) => {
                pgrx::check_for_interrupts!();
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
    struct Reset<'a>(&'a AtomicU32, bool);
    impl Drop for Reset<'_> {
        fn drop(&mut self) {
            self.0.store(if self.1 { 2 } else { 0 }, Ordering::Release);
        }
    }
    let mut guard = Reset(state, false);
    let from = crate::pg::engine::engine().redo_position();
    // A replay cut short cannot be run again over the shared pool it
    // changed (a patch whose key a later record deleted would find nothing
    // to patch): restart from the files, as PostgreSQL does when redo
    // fails.
    let unreadable = pgrx::PgTryBuilder::new(|| {
        // SAFETY: reading WAL with PostgreSQL's local page reader.
        unsafe { replay_range(from) }
    })
    .catch_others(|e| -> Result<(), String> {
        crate::pg::error::error(
            pgrx::PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("orioledb: replaying the engine's WAL from its redo point failed: {e:?}"),
        )
        .report(pgrx::PgLogLevel::PANIC);
        unreachable!("PANIC does not return")
    })
    .execute();
    if let Err(why) = unreadable {
        // Outside the catch above, which would make the FATAL a PANIC.
        if crate::pg::backup::restoring_a_backup() {
            refuse_backup(from, &why);
        }
        // WAL was removed (no slot: wal_level = minimal or
        // max_replication_slots = 0; pg_resetwal). Loud, but the server
        // must start: after a clean shutdown (the engine checkpoints
        // then) nothing is lost.
        pgrx::warning!(
            "orioledb: cannot read WAL from the engine's redo point {:X}/{:X}{}: changes to orioledb tables since the last engine checkpoint are lost",
            from >> 32,
            from as u32,
            if why.is_empty() { String::new() } else { format!(" ({why})") }
        );
    }
    guard.1 = true;
    drop(guard);
}

/// PostgreSQL's WAL page reader callbacks as plain C symbols (pgrx wraps
/// its bindings in Rust functions, which cannot be callbacks). They run
/// inside `XLogReadRecord`, which pgrx guards.
mod raw {
    use pgrx::pg_sys::{TimeLineID, XLogReaderState, XLogRecPtr, XLogSegNo};
    use std::ffi::{c_char, c_int};
    extern "C-unwind" {
        pub fn read_local_xlog_page_no_wait(
            state: *mut XLogReaderState,
            target_page_ptr: XLogRecPtr,
            req_len: c_int,
            target_rec_ptr: XLogRecPtr,
            cur_page: *mut c_char,
        ) -> c_int;
        pub fn wal_segment_open(
            state: *mut XLogReaderState,
            next_seg_no: XLogSegNo,
            tli_p: *mut TimeLineID,
        );
        pub fn wal_segment_close(state: *mut XLogReaderState);
    }
}

/// Replays engine records from `from` to the end of what may be read now:
/// PostgreSQL's redo start during recovery, the flushed end otherwise.
/// Err (with the reader's message, if any) when the WAL at `from` is gone.
// Long because it drives PostgreSQL's WAL reader, whose allocation,
// positioning and free must stay paired on every way out of one body.
unsafe fn replay_range(from: Lsn) -> Result<(), String> {
    // SAFETY: the XLogReader is allocated, used and freed here; records are
    // only read up to positions the page reader allows.
    unsafe {
        let upto = if pg_sys::RecoveryInProgress() {
            pg_sys::GetXLogReplayRecPtr(std::ptr::null_mut())
        } else {
            pg_sys::GetFlushRecPtr(std::ptr::null_mut())
        };
        if from == 0 || from >= upto {
            return Ok(());
        }
        let mut routine = pg_sys::XLogReaderRoutine {
            // Never waits for WAL that is not there yet: in the startup
            // process nothing else would ever write or replay it.
            page_read: Some(raw::read_local_xlog_page_no_wait),
            segment_open: Some(raw::wal_segment_open),
            segment_close: Some(raw::wal_segment_close),
        };
        // read_local_xlog_page_no_wait reports the end of WAL through the
        // reader's private data (it writes `end_of_wal` there): it must point
        // at that struct, or asking for a page past the flushed end — a
        // record still being flushed when we looked — writes through NULL.
        // It lives in this frame, and the reader is freed before we return.
        let mut private = pg_sys::ReadLocalXLogPageNoWaitPrivate { end_of_wal: false };
        let reader = pg_sys::XLogReaderAllocate(
            pg_sys::wal_segment_size,
            std::ptr::null(),
            &mut routine,
            (&raw mut private).cast(),
        );
        if reader.is_null() {
            crate::pg::error::internal("orioledb: out of memory allocating a WAL reader");
        }
        // Opening a segment that is gone is an ERROR, not "no record".
        let found = pgrx::PgTryBuilder::new(|| Ok(pg_sys::XLogFindNextRecord(reader, from)))
            .catch_others(|e| Err(crate::pg::caught(&e)))
            .execute();
        let (start, gone) = match found {
            Ok(start) => (start, None),
            Err(why) => (0, Some(why)),
        };
        if start == 0 {
            pg_sys::XLogReaderFree(reader);
            if private.end_of_wal && gone.is_none() {
                // Nothing complete to read from there yet.
                return Ok(());
            }
            return Err(gone.unwrap_or_default());
        }
        pg_sys::XLogBeginRead(reader, start);
        let fail_at = injected_replay_failure();
        let mut n = 0u64;
        loop {
            if (*reader).EndRecPtr >= upto {
                break;
            }
            let mut err: *mut c_char = std::ptr::null_mut();
            let rec = pg_sys::XLogReadRecord(reader, &mut err);
            if rec.is_null() {
                break;
            }
            if (*reader).ReadRecPtr >= upto {
                break;
            }
            let d = (*reader).record;
            if (*d).header.xl_rmid == RM_ID {
                let info = (*d).header.xl_info;
                if fail_at == Some(n + 1) {
                    pg_sys::XLogReaderFree(reader);
                    crate::pg::error::internal(format!(
                        "orioledb: replay of engine WAL record {} failed (injected by {})",
                        n + 1,
                        crate::pg::injection::REPLAY_FAIL_AT
                    ));
                }
                replay_wal_record(info, main_data(d), None);
                if info >> 4 != KIND_MARKER {
                    n += 1;
                }
            }
        }
        pg_sys::XLogReaderFree(reader);
        if n > 0 {
            pgrx::log!(
                "orioledb: replayed {n} engine WAL records from {:X}/{:X}",
                from >> 32,
                from as u32
            );
        }
    }
    Ok(())
}

/// Stops a recovery that cannot replay the engine's WAL from its redo
/// point (`pg::backup::restoring_a_backup`): starting would lose changes to
/// orioledb tables without a word.
fn refuse_backup(from: Lsn, why: &str) -> ! {
    crate::pg::error::error(
        pgrx::PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "orioledb: cannot recover orioledb tables: the WAL from the engine's redo point {:X}/{:X} is missing{}",
            from >> 32,
            from as u32,
            if why.is_empty() { String::new() } else { format!(" ({why})") }
        ),
    )
    .detail(
        "In a restored base backup: the engine's files belong to an engine checkpoint older than the \
         backup's start (a second backup taken while another ran, log_checkpoints or track_activities \
         off, or a backup of a standby). On a standby that checkpoints no engine (hot_standby off): its \
         engine files are those of the copy it was made from, and its restartpoints have removed the \
         WAL since.",
    )
    .hint("Take a new base backup of the primary (one at a time, with the default settings).")
    .report(pgrx::PgLogLevel::FATAL);
    unreachable!("FATAL does not return")
}

/// The record number `pg::injection::REPLAY_FAIL_AT` names, consuming
/// the file: the replay fails before it (a PANIC then, see
/// [`replay_gap_once`]).
fn injected_replay_failure() -> Option<u64> {
    crate::pg::injection::take(crate::pg::injection::REPLAY_FAIL_AT)?
        .trim()
        .parse()
        .ok()
}

/// Whether this server can keep WAL through a slot at all (`wal_level =
/// minimal` or `max_replication_slots = 0` cannot; a WARNING at startup
/// says that changes since the last engine checkpoint may then be lost).
fn slot_possible() -> bool {
    // SAFETY: reads of settings fixed at server start.
    unsafe {
        pg_sys::max_replication_slots > 0
            && pg_sys::wal_level >= pg_sys::WalLevel::WAL_LEVEL_REPLICA as i32
    }
}

/// The number of the extension's lock ([`crate::pg::lock::SessionLock::ours`])
/// that creators of the slot hold.
const SLOT_CREATION_LOCK: u32 = 1;

/// Acquires the slot, creating it first if it does not exist.
///
/// # Safety
/// Called in a process with a PGPROC that holds no slot; the caller
/// releases it (`ReplicationSlotRelease`).
unsafe fn acquire_slot() {
    // SAFETY: per the contract.
    unsafe {
        if !pg_sys::SearchNamedReplicationSlot(SLOT_NAME.as_ptr(), true).is_null() {
            pg_sys::ReplicationSlotAcquire(SLOT_NAME.as_ptr(), false);
            return;
        }
        // Two processes creating it at once made the second's statement
        // fail ("already exists": a backend's CHECKPOINT beside the
        // worker's first one, on a new cluster): creators take turns, and
        // the later one acquires what the first made.
        let _turn = crate::pg::lock::SessionLock::ours(SLOT_CREATION_LOCK);
        if pg_sys::SearchNamedReplicationSlot(SLOT_NAME.as_ptr(), true).is_null() {
            pg_sys::ReplicationSlotCreate(
                SLOT_NAME.as_ptr(),
                false,
                pg_sys::ReplicationSlotPersistency::RS_PERSISTENT,
                false,
            );
        } else {
            pg_sys::ReplicationSlotAcquire(SLOT_NAME.as_ptr(), false);
        }
    }
}

/// Before an engine checkpoint: makes sure the slot exists and holds WAL,
/// so the WAL from the redo point the checkpoint is about to choose is kept
/// from the moment it is chosen. A new slot (or one invalidated by
/// `max_slot_wal_keep_size`) reserves WAL with PostgreSQL's own
/// `ReplicationSlotReserveWal`: it starts at PostgreSQL's last redo point
/// (never after any position the engine can choose later) and holds
/// `ReplicationSlotAllocationLock` so that a concurrent checkpoint cannot
/// remove that WAL before the slot counts (it ERRORs if it was removed
/// anyway, before anything of the engine checkpoint happened).
pub fn reserve_slot() {
    if !slot_possible() {
        return;
    }
    // SAFETY: slot functions in a process with a PGPROC; the slot is
    // acquired here and released before returning. While this process
    // holds the slot nobody else changes its restart_lsn, so reading it
    // without the slot's spinlock is safe (PostgreSQL's own code reads
    // MyReplicationSlot->data.restart_lsn the same way).
    unsafe {
        acquire_slot();
        let slot = pg_sys::MyReplicationSlot;
        if (*slot).data.restart_lsn == 0 {
            pg_sys::ReplicationSlotReserveWal();
            pg_sys::ReplicationSlotMarkDirty();
            pg_sys::ReplicationSlotSave();
        }
        pg_sys::ReplicationSlotRelease();
    }
}

/// After an engine checkpoint: moves the slot's restart point forward to
/// the engine's durable redo point, so PostgreSQL keeps exactly the WAL the
/// engine may replay. As `pg_physical_replication_slot_advance` does, the
/// new restart_lsn is stored under the slot's spinlock (other processes —
/// the checkpointer computing the oldest WAL to keep, `pg_replication_slots`
/// — read it under that lock), the slot is saved, and the required LSN is
/// recomputed so WAL before it can be recycled.
pub fn advance_slot() {
    let redo = crate::pg::engine::engine().redo_position();
    if redo == 0 || !slot_possible() {
        return;
    }
    // SAFETY: as in `reserve_slot`; `mutex` is the slot's spinlock in shared
    // memory, held only for the store (nothing in between can fail).
    unsafe {
        acquire_slot();
        let slot = pg_sys::MyReplicationSlot;
        let cur = (*slot).data.restart_lsn;
        if cur == 0 {
            // Invalidated since `reserve_slot`: setting it here would skip
            // the reservation protocol; the next checkpoint reserves anew.
            pgrx::warning!(
                "orioledb: replication slot \"{}\" lost its WAL reservation; WAL since the engine's redo point may be removed before the next engine checkpoint",
                SLOT_NAME.to_string_lossy()
            );
        } else if cur < redo {
            let mutex = &raw mut (*slot).mutex;
            pg_sys::SpinLockAcquire(mutex);
            (*slot).data.restart_lsn = redo;
            pg_sys::SpinLockRelease(mutex);
            pg_sys::ReplicationSlotMarkDirty();
            pg_sys::ReplicationSlotSave();
        }
        pg_sys::ReplicationSlotRelease();
        pg_sys::ReplicationSlotsComputeRequiredLSN();
    }
}
