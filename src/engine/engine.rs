//! The engine: a directory of tree data files, one page pool, and the
//! checkpoint protocol that turns the pool's dirty pages into a durable,
//! point-in-time image of every tree.
//!
//! Files in the directory: `<tree>` (data file, 512-byte units of page
//! images), `<tree>-<checkpoint>.map` (one per tree per durable checkpoint),
//! `control` (the durable checkpoint number and its trees), `*.tmp` while
//! writing, and `<tree>-<checkpoint>.map.quarantined` (maps of another
//! checkpoint than the durable one, kept aside for a quarantined tree).

use crate::btree::Change;
use crate::buffer::{PageGuard, PageIo, Pool, BARRIERS};
use crate::order::{Bytewise, KeyCmp};
use crate::error::{EngineError, Result};
use crate::id::TreeId;
use crate::io::FileIo;
use crate::latch::LatchMode;
use crate::meta::{MapHead, TreeFileGuard, Meta, SLOT_DAMAGED, SLOT_DROPPED, SLOT_FREE, SLOT_LIVE};
use crate::page::{PageMut, F_DELETED, NO_PAGE, PAGE_SIZE};
use crate::store::control::Control;
use crate::store::image::{self, UNIT};
use crate::store::map::TreeMap;
use crate::store::space::Extent;
use crate::wal::{Lsn, Record, WalSink};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Trees a private engine (tests, tools) can hold, and its metadata chunks.
pub const PRIVATE_MAX_TREES: usize = 256;
pub const PRIVATE_META_CHUNKS: usize = 4096;

/// Options of one tree.
#[derive(Clone)]
pub struct TreeOptions {
    /// -1 = raw pages, 0..=22 = zstd level (0 = zstd's default).
    pub compress: i32,
    pub cmp: Arc<dyn KeyCmp>,
    /// Consulted before a leaf splits (see [`crate::btree::Pruner`]).
    pub pruner: Option<Arc<dyn crate::btree::Pruner>>,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions {
            compress: -1,
            cmp: Arc::new(Bytewise),
            pruner: None,
        }
    }
}

fn check_level(level: i32) -> Result<i32> {
    if (-1..=22).contains(&level) {
        Ok(level)
    } else {
        Err(EngineError::BadCompression(level))
    }
}

/// One process's view of the engine. Everything shared between processes
/// lives in `pool` and `meta` (shared memory in the server); what is here is
/// process-local: the directory path, file handles and a cache of tree slots.
/// Invariant: `slots` maps a tree number, and `ids` a tree id, only to a
/// slot that held that tree when cached; users re-check the slot before
/// trusting it (slots are freed and reused by other processes).
pub(crate) struct EngineProcess {
    pub dir: PathBuf,
    pub io: Arc<dyn FileIo>,
    pub pool: Pool,
    pub meta: Meta,
    pub slots: RwLock<HashMap<u32, usize>>,
    /// Tree id -> slot of a live or damaged tree, so that finding a tree
    /// (every replayed record, every open) is O(1) instead of a scan of
    /// the directory; refilled by one scan when it misses.
    pub ids: RwLock<HashMap<TreeId, usize>>,
    /// Directory scans `lookup` made (tests check replay stays O(1)).
    pub dir_scans: AtomicU64,
    /// Where changes are logged; None for an engine without a log (its
    /// changes since the last checkpoint are lost with the process).
    pub wal: Option<Arc<dyn WalSink>>,
    /// The `unlinks` count when this process last dropped its file handles.
    pub seen_unlinks: AtomicU64,
    /// Why trees were quarantined, if this handle loaded the durable
    /// checkpoint (see [`Engine::take_load_damage`]).
    pub load_damage: Mutex<Vec<EngineError>>,
    /// The durable checkpoint's trees as last read (`residency`).
    pub(crate) cold: Mutex<Option<Arc<crate::residency::ColdList>>>,
    /// Holds this process's handles have on each slot, so a process that
    /// exits without unwinding gives them back (`release_local_holds`).
    pub(crate) local_holds: Vec<std::sync::atomic::AtomicU32>,
}

/// Where a process finds the shared metadata region (see
/// [`Engine::attach_shared`]).
pub struct SharedMeta {
    pub base: *mut u8,
    pub max_trees: usize,
    pub nchunks: usize,
    pub latches: Arc<dyn crate::latch::LatchSet>,
}

/// An open engine directory.
pub struct Engine {
    pub(crate) inner: Arc<EngineProcess>,
}

/// A handle on one tree (cheap to clone). Invariant: `slot` holds tree `id`
/// with pool tag number `num` while the handle lives (`hold` keeps the
/// slot from being evicted; only a drop of the tree ends it); the
/// comparator is this handle's.
#[derive(Clone)]
pub struct Tree {
    pub(crate) inner: Arc<EngineProcess>,
    /// Kept for its `Drop`: the slot stays this tree's while any clone lives.
    pub(crate) _hold: Arc<crate::residency::Hold>,
    pub(crate) slot: usize,
    pub(crate) num: u32,
    pub(crate) id: TreeId,
    pub(crate) cmp: Arc<dyn KeyCmp>,
    pub(crate) pruner: Option<Arc<dyn crate::btree::Pruner>>,
}

thread_local! {
    /// Checkpoint barriers (of any pool) this thread holds shared. A nested
    /// entry must not wait at the gate: the checkpoint it would wait for is
    /// itself waiting for the barrier this thread already holds.
    static BARRIERS_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Which of the barrier latches this thread takes: spread over the
    /// processes (and threads) so they do not share one lock word.
    static BARRIER_SLOT: std::cell::Cell<usize> = std::cell::Cell::new({
        use std::hash::{Hash, Hasher};
        // SipHash with fixed keys: the same process and thread always
        // take the same latch.
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new();
        (std::process::id(), std::thread::current().id()).hash(&mut h);
        (h.finish() as usize) % BARRIERS
    });
}

/// Whether this thread holds a checkpoint barrier (it must then not wait
/// for a checkpoint).
pub(crate) fn holds_barrier() -> bool {
    BARRIERS_HELD.get() > 0
}

/// Makes this thread take barrier latch `slot` (tests: cover every one).
#[cfg(test)]
pub(crate) fn set_barrier_slot(slot: usize) {
    assert!(slot < BARRIERS);
    BARRIER_SLOT.set(slot);
}

/// Holds a checkpoint barrier shared for the length of one tree
/// modification, so a checkpoint starts between operations, never inside.
/// There are [`BARRIERS`] barrier latches; an entrant takes its thread's,
/// a checkpoint all of them.
///
/// The barrier must not rely on the latch implementation to favour the
/// checkpoint's exclusive acquisition: PostgreSQL's LWLocks admit a new
/// shared holder whenever nobody holds the lock exclusively, so overlapping
/// statements could keep the checkpoint out forever. So a checkpoint first
/// takes the *gate* latch exclusively and sets the pool's
/// `checkpoint_wants` flag ([`CheckpointStart`]); an entrant that sees the
/// flag waits on the gate (shared, released at once) before taking the
/// barrier, unless it already holds a barrier (a nested entry proceeds).
/// Only operations already inside, or that read the flag just before it
/// was set, are left for the checkpoint to wait for. The fast path is one
/// atomic load of a flag that only checkpoints write, plus a thread-local
/// count.
///
/// An entrant holds no other latch of the engine when it enters (a first,
/// not nested, entry): it may wait for a barrier latch a starting
/// checkpoint holds while that checkpoint waits for another, so it must not
/// hold anything the checkpoint's start needs.
///
/// Not `Send`: the thread that entered counts it and must drop it.
/// Invariant: `latch` is the barrier latch taken, None for a nested entry.
pub(crate) struct CheckpointBarrier<'a> {
    pool: &'a Pool,
    latch: Option<usize>,
    _thread: std::marker::PhantomData<*const ()>,
}

impl<'a> CheckpointBarrier<'a> {
    pub fn enter(pool: &'a Pool) -> Self {
        let held = BARRIERS_HELD.get();
        let mut latch = None;
        if held == 0 {
            if pool.checkpoint_wants().load(Ordering::Acquire) != 0 {
                let gate = pool.gate_latch();
                pool.latches().acquire(gate, LatchMode::Shared);
                pool.latches().release(gate, LatchMode::Shared);
            }
            let l = pool.barrier_latch(BARRIER_SLOT.get());
            pool.latches().acquire(l, LatchMode::Shared);
            latch = Some(l);
        }
        // Nested (one change made of several tree operations): the outer
        // entry holds a barrier; taking one again could queue behind a
        // waiting checkpoint that waits for us.
        BARRIERS_HELD.set(held + 1);
        CheckpointBarrier {
            pool,
            latch,
            _thread: std::marker::PhantomData,
        }
    }
}

impl Drop for CheckpointBarrier<'_> {
    fn drop(&mut self) {
        BARRIERS_HELD.set(BARRIERS_HELD.get().saturating_sub(1));
        if let Some(l) = self.latch {
            self.pool.latches().release(l, LatchMode::Shared);
        }
    }
}

/// Holds every checkpoint barrier exclusively (the start of a checkpoint),
/// with the gate latch and the `checkpoint_wants` flag that keep new
/// shared entrants out meanwhile (see [`CheckpointBarrier`]). Lock order: the gate,
/// then the barriers in index order; the gate is only ever held shared for
/// an instant by entrants that hold nothing else of the engine, so taking
/// it cannot starve, and once the flag is set the barriers' holders drain.
pub(crate) struct CheckpointStart<'a>(&'a Pool);

impl<'a> CheckpointStart<'a> {
    pub fn enter(pool: &'a Pool) -> Self {
        let l = pool.latches();
        l.acquire(pool.gate_latch(), LatchMode::Exclusive);
        pool.checkpoint_wants().store(1, Ordering::Release);
        for i in 0..BARRIERS {
            l.acquire(pool.barrier_latch(i), LatchMode::Exclusive);
        }
        CheckpointStart(pool)
    }
}

impl Drop for CheckpointStart<'_> {
    fn drop(&mut self) {
        let (pool, l) = (self.0, self.0.latches());
        for i in (0..BARRIERS).rev() {
            l.release(pool.barrier_latch(i), LatchMode::Exclusive);
        }
        pool.checkpoint_wants().store(0, Ordering::Release);
        l.release(pool.gate_latch(), LatchMode::Exclusive);
    }
}

/// Holds a latch of the metadata region until dropped.
pub(crate) struct MetaLatch<'a>(&'a Meta, usize, LatchMode);

impl<'a> MetaLatch<'a> {
    /// Owns latch `i`, which the caller has just taken in `mode`.
    pub(crate) fn taken(meta: &'a Meta, i: usize, mode: LatchMode) -> Self {
        MetaLatch(meta, i, mode)
    }

    pub fn new(meta: &'a Meta, i: usize, mode: LatchMode) -> Self {
        meta.latches().acquire(i, mode);
        MetaLatch(meta, i, mode)
    }
}

impl Drop for MetaLatch<'_> {
    fn drop(&mut self) {
        self.0.latches().release(self.1, self.2);
    }
}

fn map_name(rel: u32, ckpt: u64) -> String {
    format!("{rel}-{ckpt}.map")
}

/// The control file at `path`, None if there is none. Only "not found"
/// says so: any other failure to read it is an error, never "no trees"
/// (which would make every tree of it garbage, or let a table's existing
/// tree be created anew).
pub(crate) fn read_control(io: &dyn FileIo, path: &Path) -> Result<Option<Control>> {
    let b = match io.read_file(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EngineError::io("read", path, e)),
    };
    Control::decode(&b)
        .map(Some)
        .map_err(|d| EngineError::corrupt(path, 0, d))
}

/// The trees of the durable checkpoint `control` names, each with the
/// checkpoint of its map. A listed tree whose map is missing is damage, not
/// a leftover: only the control file can tell the two apart.
fn checkpoint_members(control: &Control) -> BTreeMap<TreeId, u64> {
    control.trees.iter().copied().collect()
}

/// Parses `<tree>-<checkpoint>.map`.
fn parse_map_name(name: &str) -> Option<(u32, u64)> {
    let stem = name.strip_suffix(".map")?;
    let (t, c) = stem.split_once('-')?;
    Some((t.parse().ok()?, c.parse().ok()?))
}

/// Suffix of a map set aside for a quarantined tree: no name parses as a
/// map any more, so no later checkpoint takes it for its own, and nothing
/// removes it while the tree exists.
const ASIDE: &str = ".quarantined";

/// Parses `<tree>-<checkpoint>.map.quarantined`.
fn parse_aside_name(name: &str) -> Option<(u32, u64)> {
    parse_map_name(name.strip_suffix(ASIDE)?)
}

impl EngineProcess {
    /// The slot of tree number `num` and whether the tree is live (else
    /// dropped); None once its slot was freed.
    pub fn slot_of_num(&self, num: u32) -> Option<(usize, bool)> {
        let check = |i: usize| {
            let s = self.meta.slot(i);
            let st = s.state.load(Ordering::Acquire);
            (st != SLOT_FREE && s.num.load(Ordering::Acquire) == num)
                .then_some((i, st == SLOT_LIVE))
        };
        if let Some(&i) = self.slots.read().unwrap().get(&num) {
            if let Some(r) = check(i) {
                return Some(r);
            }
        }
        let i = self.meta.find_num(num)?;
        self.slots.write().unwrap().insert(num, i);
        check(i)
    }

    /// The slot of tree `id` if it is live or damaged, with its state,
    /// loading it from the durable checkpoint's files if no slot holds it
    /// (`residency`).
    pub fn lookup(&self, id: TreeId) -> Result<Option<(usize, u32)>> {
        match self.lookup_resident(id) {
            Some(r) => Ok(Some(r)),
            None => self.load_cold(id),
        }
    }

    /// The slot of tree `id` if a slot holds it live or damaged.
    pub(crate) fn lookup_resident(&self, id: TreeId) -> Option<(usize, u32)> {
        let holds = |i: usize| {
            let st = self.meta.slot(i).state.load(Ordering::Acquire);
            // The id is published before the state (claim_slot), so a slot
            // seen live or damaged with this id is this tree's.
            ((st == SLOT_LIVE || st == SLOT_DAMAGED) && self.meta.slot_id(i) == id)
                .then_some((i, st))
        };
        if let Some(&i) = self.ids.read().unwrap().get(&id) {
            if let Some(r) = holds(i) {
                return Some(r);
            }
        }
        // A miss: one pass over the directory refreshes every entry, so a
        // replay touching many trees scans once, not once per tree.
        self.dir_scans.fetch_add(1, Ordering::Relaxed);
        let mut ids = self.ids.write().unwrap();
        ids.clear();
        for i in 0..self.meta.max_trees() {
            let st = self.meta.slot(i).state.load(Ordering::Acquire);
            if st == SLOT_LIVE || st == SLOT_DAMAGED {
                ids.insert(self.meta.slot_id(i), i);
            }
        }
        let i = *ids.get(&id)?;
        drop(ids);
        holds(i)
    }

    /// The slot of live tree `id`; a damaged tree's error names its file.
    pub fn slot_of(&self, id: TreeId) -> Result<usize> {
        self.live_slot(id, self.lookup(id)?)
    }

    /// The slot of live tree `id` from what a lookup `found`.
    pub(crate) fn live_slot(&self, id: TreeId, found: Option<(usize, u32)>) -> Result<usize> {
        match found {
            Some((i, SLOT_LIVE)) => Ok(i),
            Some(_) => Err(self.damage(id)),
            None => Err(EngineError::NoSuchTree(id)),
        }
    }

    /// Reads tree `id`'s map of checkpoint `ckpt` and validates it against
    /// itself and the data file: everything loading relies on.
    pub(crate) fn check_tree_files(&self, id: TreeId, ckpt: u64) -> Result<TreeMap> {
        let path = self.map_path(id, ckpt);
        let b = self.io.read_file(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                // The control file names the tree, so this is a lost map
                // (deleted, or a copy taken mid-checkpoint), not a leftover.
                EngineError::corrupt(
                    &path,
                    0,
                    format!(
                        "map file is missing; the tree's data file \"{}\" is kept as it is \
                         (quarantined) until the map is restored under this name",
                        self.data_path(id).display()
                    ),
                )
            } else {
                EngineError::io("read", &path, e)
            }
        })?;
        let map = TreeMap::decode(&b).map_err(|d| EngineError::corrupt(&path, 0, d))?;
        // Not `!=`: a damaged tree's map is carried forward unchanged, and
        // once repaired it describes the older checkpoint it was written at.
        if map.checkpoint > ckpt {
            return Err(EngineError::corrupt(
                &path,
                8,
                format!("map belongs to checkpoint {}, after {ckpt}", map.checkpoint),
            ));
        }
        let mut exts: Vec<(Extent, usize)> = map
            .pages
            .iter()
            .enumerate()
            .filter_map(|(p, e)| e.map(|e| (e, p)))
            .collect();
        exts.sort_by_key(|(e, _)| e.off);
        for w in exts.windows(2) {
            if w[0].0.end() > w[1].0.off {
                return Err(EngineError::corrupt(
                    &path,
                    TreeMap::entry_offset(w[1].1),
                    format!("page {} shares units with page {}", w[1].1, w[0].1),
                ));
            }
        }
        let need = exts
            .iter()
            .map(|(e, _)| e.end() as u64 * UNIT as u64)
            .max()
            .unwrap_or(0);
        let data = self.data_path(id);
        let have = self.io.len(&data).unwrap_or(0);
        if have < need {
            return Err(EngineError::corrupt(
                &data,
                have,
                format!("data file truncated: {have} bytes, the map needs {need}"),
            ));
        }
        Ok(map)
    }

    /// The error for a use of damaged tree `id`. Validating its files again
    /// names the same file and problem in every process (the one that
    /// loaded them may be gone).
    fn damage(&self, id: TreeId) -> EngineError {
        let durable = self.meta.durable().load(Ordering::Acquire);
        let ckpt = match self.lookup_resident(id) {
            Some((i, _)) => self.meta.file(i).map_head().checkpoint,
            None => durable,
        };
        match self.check_tree_files(id, ckpt) {
            Err(e @ EngineError::Corrupt { .. }) => e,
            _ => EngineError::corrupt(
                self.map_path(id, ckpt),
                0,
                "the tree's files failed validation when the engine loaded them; \
                 restart the server to load them again",
            ),
        }
    }

    /// Takes a free slot for tree `id` with a fresh tree number. The caller
    /// holds the directory latch (`_dir`) from before this call until it
    /// publishes the slot as LIVE or frees it, so no other claimer can pick
    /// the same slot or create the same tree meanwhile.
    pub(crate) fn claim_slot(&self, _dir: &MetaLatch, id: TreeId, compress: i32) -> Result<usize> {
        let meta = &self.meta;
        let i = (0..meta.max_trees())
            .find(|&i| meta.slot(i).state.load(Ordering::Acquire) == SLOT_FREE)
            .ok_or(EngineError::TooManyTrees(meta.max_trees()))?;
        let s = meta.slot(i);
        meta.file(i).reset();
        s.compress.store(compress, Ordering::Relaxed);
        s.superseded.store(0, Ordering::Relaxed);
        s.superseded_xid.store(0, Ordering::Relaxed);
        s.superseded_rel.store(0, Ordering::Relaxed);
        s.root.store(0, Ordering::Relaxed);
        // A tree just loaded or created is the most recently used: not the
        // first an eviction picks before its caller gets to hold it.
        s.touched
            .store(meta.clock().fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        s.db.store(id.db, Ordering::Release);
        s.id.store(id.rel, Ordering::Release);
        s.num.store(meta.next_tree_number(), Ordering::Release);
        Ok(i)
    }

    /// Returns a slot to the directory (caller holds the directory latch).
    pub(crate) fn release_slot(&self, _dir: &MetaLatch, slot: usize) {
        let meta = &self.meta;
        meta.file(slot).reset();
        let s = meta.slot(slot);
        s.num.store(0, Ordering::Release);
        s.state.store(SLOT_FREE, Ordering::Release);
    }

    /// Drops this process's cached file handles if any data file was removed
    /// since it last looked.
    fn refresh_handles(&self) {
        let now = self.meta.unlinks().load(Ordering::Acquire);
        if self.seen_unlinks.swap(now, Ordering::AcqRel) != now {
            self.io.forget_handles();
        }
    }

    pub fn db_dir(&self, db: u32) -> PathBuf {
        self.dir.join(db.to_string())
    }

    pub fn data_path(&self, id: TreeId) -> PathBuf {
        self.db_dir(id.db).join(id.rel.to_string())
    }

    /// Punches `exts` (extents no checkpoint names any more, still marked
    /// used so nobody writes there meanwhile) out of `id`'s data file, so
    /// that the file's allocated space follows its live pages although
    /// copy-on-write leaves the freed extents scattered through it.
    /// Neighbouring extents are punched together; a part of a file-system
    /// block that an extent shares with another is left.
    fn punch(&self, id: TreeId, exts: &[Extent]) -> Result<()> {
        const BLOCK: u64 = 4096;
        let mut runs: Vec<(u64, u64)> = exts
            .iter()
            .map(|e| (e.off as u64 * UNIT as u64, e.end() as u64 * UNIT as u64))
            .collect();
        runs.sort_unstable();
        let path = self.data_path(id);
        let mut i = 0;
        while i < runs.len() {
            let (start, mut end) = runs[i];
            i += 1;
            while i < runs.len() && runs[i].0 == end {
                end = runs[i].1;
                i += 1;
            }
            let (lo, hi) = (start.next_multiple_of(BLOCK), end / BLOCK * BLOCK);
            if hi > lo {
                self.io
                    .punch(&path, lo, hi - lo)
                    .map_err(|e| EngineError::io("punch", &path, e))?;
            }
        }
        Ok(())
    }

    pub(crate) fn map_path(&self, id: TreeId, ckpt: u64) -> PathBuf {
        self.db_dir(id.db).join(map_name(id.rel, ckpt))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn ioerr(
        &self,
        op: &'static str,
        path: &Path,
    ) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
        let path = path.to_path_buf();
        move |e| EngineError::io(op, path, e)
    }

    /// The error for a failed fsync of `path`, poisoning the engine first.
    /// Linux reports a writeback error to one fsync and then forgets it
    /// (the dirty pages may be dropped), so a retry that succeeds would
    /// let a checkpoint name extents that never reached disk: after this,
    /// nothing the engine writes can be trusted to be durable, in any
    /// process, until the server restarts.
    fn sync_failed(&self, path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
        let path = path.to_path_buf();
        move |source| {
            self.meta.sync_failed().store(1, Ordering::SeqCst);
            EngineError::SyncFailed { path, source }
        }
    }

    /// Refuses once an fsync failed (see `sync_failed`).
    fn check_poison(&self) -> Result<()> {
        if self.meta.sync_failed().load(Ordering::SeqCst) != 0 {
            return Err(EngineError::SyncPoisoned);
        }
        Ok(())
    }

    /// The checkpoint pre-image hook: before a page is modified, content
    /// that belongs to the running checkpoint is written out first.
    pub fn before_modify(&self, g: &mut PageGuard) -> Result<()> {
        let running = self.meta.running().load(Ordering::Acquire);
        if running != 0 && g.is_dirty() && g.dirty_epoch() <= running {
            self.write_page(g.tree, g.page, g.data(), g.dirty_epoch())?;
            g.clear_dirty();
        }
        Ok(())
    }

    pub fn epoch(&self) -> u64 {
        self.meta.next_epoch().load(Ordering::Acquire)
    }

    /// Logs a change if this engine has a log. Callers hold the checkpoint
    /// barrier (and, for row changes, the leaf's exclusive latch).
    pub fn log(&self, rec: &Record) {
        if let Some(w) = &self.wal {
            w.log(&rec.encode());
        }
    }

    /// Logs the record of a change already made to a page still latched:
    /// inside the sink's critical section, so a failure to log is fatal too
    /// (PostgreSQL's order: change the page, XLogInsert, under the lock).
    pub fn log_changed(&self, rec: &Record) {
        if self.wal.is_some() {
            self.log_changed_encoded(&rec.encode());
        }
    }

    /// [`EngineProcess::log_changed`] of a record encoded already.
    pub fn log_changed_encoded(&self, rec: &[u8]) {
        if let Some(w) = &self.wal {
            w.enter_critical();
            w.log(rec);
            w.leave_critical();
        }
    }

    /// Runs `apply`, the change of a record just logged (`logged`), as
    /// one step with the log: an error from it is fatal, as in PostgreSQL,
    /// where a failure after `XLogInsert` and before the page change is
    /// complete is a PANIC — else the log would hold a change the tree
    /// lacks (or, for a truncation, a root pointing at freed pages).
    pub fn logged<T>(&self, logged: bool, apply: impl FnOnce() -> Result<T>) -> Result<T> {
        let Some(w) = self.wal.as_ref().filter(|_| logged) else {
            return apply();
        };
        w.enter_critical();
        let r = apply();
        w.leave_critical();
        r.or_else(|e| w.fatal(&format!("a logged change could not be applied: {e}")))
    }

    /// Puts a page (latched exclusively, already pre-imaged) on the free list.
    pub fn free_page(&self, slot: usize, g: &mut PageGuard) {
        g.page_mut().set_flag(F_DELETED, true);
        self.meta.file(slot).page_freed(g.page);
        // The free list is the truth now; the buffer holds a tombstone that
        // readers recognise and that never needs writing.
        g.clear_dirty();
    }

    /// Writes an image of `page` to a new extent of tree `slot`'s file.
    fn write_image(&self, slot: usize, page: u32, buf: &[u8], epoch: u64) -> Result<()> {
        let num = self.meta.slot(slot).num.load(Ordering::Acquire);
        self.write_image_checked(slot, num, page, buf, epoch)
    }

    /// As `write_image`, discarding the write if the slot no longer holds
    /// tree number `num` (dropped and reused since the caller looked).
    pub(crate) fn write_image_checked(
        &self,
        slot: usize,
        num: u32,
        page: u32,
        buf: &[u8],
        epoch: u64,
    ) -> Result<()> {
        self.refresh_handles();
        let id = self.meta.slot_id(slot);
        let level = self.meta.slot(slot).compress.load(Ordering::Relaxed);
        let mut img = image::encode(buf, page, epoch, level);
        let f = self.meta.file(slot);
        // A buffer of a tree dropped since `write_page` looked: its page
        // table and bitmap are gone (`drop_tree`), and its file still
        // holds the durable checkpoint's images, which must stay intact.
        let s = self.meta.slot(slot);
        if s.num.load(Ordering::Acquire) != num || s.state.load(Ordering::Acquire) == SLOT_DROPPED {
            return Ok(());
        }
        // Under the file latch: a checkpoint whose commit fsync failed sets
        // the poison before it releases the previous checkpoint's extents
        // (under this latch), so no write can reuse one of them.
        self.check_poison()?;
        let e = f.space_alloc((img.len() / UNIT) as u16)?;
        // The extent may be a unit longer (`TreeFileGuard::space_alloc`): its
        // every byte is written, so a read of it never ends past the file.
        img.resize(e.len as usize * UNIT, 0);
        let path = self.data_path(id);
        if let Err(err) = self.io.write_at(&path, e.off as u64 * UNIT as u64, &img) {
            f.space_release(e);
            return Err(EngineError::io("write", path, err));
        }
        f.page_written(page, e, epoch);
        Ok(())
    }
}

impl PageIo for EngineProcess {
    fn read_page(&self, tree: u32, page: u32, buf: &mut [u8]) -> Result<()> {
        let (slot, _) = self.slot_of_num(tree).ok_or(EngineError::Damaged {
            tree: TreeId::new(u32::MAX, tree),
            detail: format!("page {page} of a tree that no longer exists"),
        })?;
        let id = self.meta.slot_id(slot);
        let ext = {
            let f = self.meta.file(slot);
            let ent = (page < f.npages()).then(|| f.entry(page));
            match ent {
                // A page allocated but never written is being formatted by
                // its allocator right now: to a stale reader it is a tombstone.
                Some(e) if !e.free && e.cur.is_some() => e.cur.unwrap(),
                _ => {
                    // A stale reference to a freed (or not yet written) page:
                    // hand out a tombstone so the reader restarts its descent.
                    let mut p = PageMut(buf);
                    p.init(0, None, None, NO_PAGE);
                    p.set_flag(F_DELETED, true);
                    return Ok(());
                }
            }
        };
        self.refresh_handles();
        let path = self.data_path(id);
        let off = ext.off as u64 * UNIT as u64;
        let len = ext.len as usize * UNIT;
        // A page-sized extent is read straight into the page: usually a
        // raw image, checked in place (no buffer, no copy).
        let direct = len == buf.len();
        let mut bytes = if direct { Vec::new() } else { vec![0u8; len] };
        let target: &mut [u8] = if direct { &mut *buf } else { &mut bytes };
        self.io.read_at(&path, off, target).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                // The map names this extent: a shorter file lost data.
                EngineError::corrupt(
                    &path,
                    off,
                    format!("page {page}: data file ends inside its image (truncated?)"),
                )
            } else {
                EngineError::io("read", &path, e)
            }
        })?;
        let decoded = if !direct {
            image::decode(&bytes, page, buf)
        } else if image::is_raw(buf) {
            image::decode_raw_in_place(buf, page)
        } else {
            // A compressed image that happens to fill 16 units.
            let img = buf.to_vec();
            image::decode(&img, page, buf)
        };
        decoded.map_err(|d| EngineError::corrupt(&path, off, d))?;
        crate::page::validate(buf)
            .map_err(|d| EngineError::corrupt(&path, off, format!("page {page}: {d}")))?;
        Ok(())
    }

    fn write_page(&self, tree: u32, page: u32, buf: &[u8], epoch: u64) -> Result<()> {
        match self.slot_of_num(tree) {
            Some((slot, true)) => self.write_image_checked(slot, tree, page, buf, epoch),
            // A buffer of a dropped tree: nothing to keep.
            _ => Ok(()),
        }
    }
}

impl Engine {
    /// Opens (or creates) an engine directory with private memory: a page
    /// pool of `nbuffers` buffers and metadata for up to
    /// [`PRIVATE_MAX_TREES`] trees.
    pub fn open(dir: impl AsRef<Path>, nbuffers: usize, io: Arc<dyn FileIo>) -> Result<Engine> {
        Self::open_logged(dir, nbuffers, io, None)
    }

    /// As [`open`](Self::open), logging every change to `wal`.
    pub fn open_logged(
        dir: impl AsRef<Path>,
        nbuffers: usize,
        io: Arc<dyn FileIo>,
        wal: Option<Arc<dyn WalSink>>,
    ) -> Result<Engine> {
        let meta = Meta::private(PRIVATE_MAX_TREES, PRIVATE_META_CHUNKS);
        Self::open_with(dir, Pool::private(nbuffers), meta, io, wal)
    }

    /// Opens the engine over shared memory, as each server process does.
    ///
    /// # Safety
    /// `region.base` must point to a region formatted by
    /// [`MetaRegion::format`](crate::meta::MetaRegion::format) for
    /// `max_trees`/`nchunks`, mapped for the life of the process, and every
    /// process must pass the same `latches` (at least
    /// `MetaRegion::latch_count(max_trees)`).
    pub unsafe fn attach_shared(
        dir: impl AsRef<Path>,
        pool: Pool,
        region: SharedMeta,
        io: Arc<dyn FileIo>,
        wal: Option<Arc<dyn WalSink>>,
    ) -> Result<Engine> {
        let SharedMeta {
            base,
            max_trees,
            nchunks,
            latches,
        } = region;
        // SAFETY: forwarded from the caller's guarantees.
        let meta = unsafe { Meta::attach(base, max_trees, nchunks, latches) };
        Self::open_with(dir, pool, meta, io, wal)
    }

    /// Another handle on the same shared memory, as a second process would
    /// have: its own file handles and caches, nothing else.
    pub fn attach_another(&self, io: Arc<dyn FileIo>) -> Result<Engine> {
        Self::open_with(
            &self.inner.dir,
            self.inner.pool.another_handle(),
            self.inner.meta.clone(),
            io,
            self.inner.wal.clone(),
        )
    }

    /// Opens a directory over the given shared memory. The first process to
    /// do so loads the durable checkpoint's maps and removes files that no
    /// durable checkpoint names; later ones just attach.
    pub(crate) fn open_with(
        dir: impl AsRef<Path>,
        pool: Pool,
        meta: Meta,
        io: Arc<dyn FileIo>,
        wal: Option<Arc<dyn WalSink>>,
    ) -> Result<Engine> {
        let dir = dir.as_ref().to_path_buf();
        // Through `io` like every other change: its name becomes durable at
        // the first checkpoint (`commit_checkpoint`).
        io.create_dir(&dir)
            .map_err(|e| EngineError::io("create directory", &dir, e))?;
        let meta_trees = meta.max_trees();
        let inner = Arc::new(EngineProcess {
            dir,
            io,
            pool,
            meta,
            slots: RwLock::new(HashMap::new()),
            ids: RwLock::new(HashMap::new()),
            dir_scans: AtomicU64::new(0),
            wal,
            seen_unlinks: AtomicU64::new(0),
            load_damage: Mutex::new(Vec::new()),
            cold: Mutex::new(None),
            local_holds: (0..meta_trees)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
        });
        let engine = Engine { inner };
        if engine.inner.meta.loaded().load(Ordering::Acquire) == 0 {
            let _l = MetaLatch::new(
                &engine.inner.meta,
                engine.inner.meta.ckpt_latch(),
                LatchMode::Exclusive,
            );
            if engine.inner.meta.loaded().load(Ordering::Acquire) == 0 {
                engine.load()?;
                engine.inner.meta.loaded().store(1, Ordering::Release);
            }
        }
        Ok(engine)
    }

    /// Checks the control file of engine directory `dir` before a server
    /// starts using it, so that damage stops the server at start instead of
    /// failing every query later. `Ok(None)`: no checkpoint was ever taken
    /// (a new cluster). A missing control file beside data files is damage
    /// too: loading would take every file for a leftover from before the
    /// first checkpoint and remove it.
    pub fn check_control(dir: impl AsRef<Path>, io: &dyn FileIo) -> Result<Option<Control>> {
        let dir = dir.as_ref();
        let path = dir.join("control");
        if let Some(c) = read_control(io, &path)? {
            return Ok(Some(c));
        }
        if !io.exists(dir) {
            return Ok(None);
        }
        for name in io.list(dir).map_err(|e| EngineError::io("list", dir, e))? {
            if name.parse::<u32>().is_err() {
                continue;
            }
            let d = dir.join(&name);
            let files = io.list(&d).map_err(|e| EngineError::io("list", &d, e))?;
            if let Some(f) = files.iter().find(|f| !f.ends_with(".tmp")) {
                return Err(EngineError::corrupt(
                    &path,
                    0,
                    format!(
                        "control file is missing, but data file \"{}\" exists",
                        d.join(f).display()
                    ),
                ));
            }
        }
        Ok(None)
    }

    /// Loads the durable checkpoint: every tree the control file lists (or,
    /// for a version 1 control file, every tree with a map of it) is loaded
    /// or quarantined; files that checkpoint does not name are removed,
    /// except those of quarantined trees, which are kept (maps of other
    /// checkpoints renamed aside).
    fn load(&self) -> Result<()> {
        let inner = &*self.inner;
        let (dir, io, meta) = (&inner.dir, &inner.io, &inner.meta);
        let control_path = dir.join("control");
        let control = read_control(&**io, &control_path)?.unwrap_or_else(Control::empty);
        let durable = control.checkpoint;
        let files = self.list_files()?;
        let members = checkpoint_members(&control);
        // A tree whose files fail validation is quarantined, not fatal:
        // the other trees load, and only its own table reports the damage.
        let mut maps = Vec::new();
        let mut damaged = Vec::new();
        // As many as fit in half of the region are loaded now; the rest
        // stay cold until first used (`residency`), validated then.
        let mut chunks = 0usize;
        for (&id, &ckpt) in &members {
            if (maps.len() + damaged.len() + 1) * 2 > meta.max_trees() {
                break;
            }
            match inner.check_tree_files(id, ckpt) {
                Ok(map) => {
                    let end = map.pages.iter().flatten().map(|e| e.end() as usize).max();
                    let need = crate::meta::chunks_for(map.pages.len(), end.unwrap_or(0));
                    if (chunks + need) * 2 > meta.nchunks {
                        break;
                    }
                    chunks += need;
                    maps.push((id, ckpt, map))
                }
                Err(e @ EngineError::Corrupt { .. }) => damaged.push((id, ckpt, e)),
                Err(e) => return Err(e),
            }
        }
        self.install_trees(&maps, &damaged)?;
        self.remove_unheld_files(&files, &members, &damaged)?;
        meta.durable().store(durable, Ordering::Release);
        meta.redo().store(control.redo, Ordering::Release);
        meta.next_epoch().store(durable + 1, Ordering::Release);
        meta.running().store(0, Ordering::Release);
        *inner.load_damage.lock().unwrap() = damaged.into_iter().map(|(_, _, e)| e).collect();
        Ok(())
    }

    /// Every file in a database directory, as (database, name); `.tmp`
    /// files beside the database directories are removed on the way.
    fn list_files(&self) -> Result<Vec<(u32, String)>> {
        let inner = &*self.inner;
        let (dir, io) = (&inner.dir, &inner.io);
        let mut files: Vec<(u32, String)> = Vec::new();
        for name in io.list(dir).map_err(|e| EngineError::io("list", dir, e))? {
            match name.parse::<u32>() {
                Ok(db) => {
                    let d = inner.db_dir(db);
                    for f in io.list(&d).map_err(|e| EngineError::io("list", &d, e))? {
                        files.push((db, f));
                    }
                }
                Err(_) if name.ends_with(".tmp") => {
                    let p = dir.join(&name);
                    io.remove(&p)
                        .map_err(|e| EngineError::io("remove", &p, e))?;
                }
                Err(_) => {}
            }
        }
        Ok(files)
    }

    /// [`Engine::load`]'s slots: one LIVE slot per tree of `maps` (the
    /// durable checkpoint's, with the checkpoint of its map), one DAMAGED
    /// slot per tree of `damaged`. All under the directory latch: on an
    /// error every slot claimed here is released before it is let go, so
    /// a retry starts from an empty directory.
    fn install_trees(
        &self,
        maps: &[(TreeId, u64, TreeMap)],
        damaged: &[(TreeId, u64, EngineError)],
    ) -> Result<()> {
        let inner = &*self.inner;
        let meta = &inner.meta;
        let dir = MetaLatch::new(meta, meta.dir_latch(), LatchMode::Exclusive);
        let mut claimed = Vec::new();
        let loaded: Result<()> = maps.iter().try_for_each(|(id, ckpt, map)| {
            claimed.push(inner.install_tree(&dir, *id, *ckpt, map)?);
            Ok(())
        });
        let loaded = loaded.and_then(|()| {
            damaged.iter().try_for_each(|(id, ckpt, _)| {
                claimed.push(inner.install_damaged(&dir, *id, *ckpt)?);
                Ok(())
            })
        });
        if let Err(e) = loaded {
            // Leave the directory as empty as we found it, so a retry starts clean.
            for slot in claimed {
                inner.release_slot(&dir, slot);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Removes the files of `files` that the durable checkpoint does not
    /// hold: maps other than its `members`' own, and data files of trees
    /// that are not its members. A `damaged` tree's other maps are renamed
    /// aside instead.
    fn remove_unheld_files(
        &self,
        files: &[(u32, String)],
        members: &BTreeMap<TreeId, u64>,
        damaged: &[(TreeId, u64, EngineError)],
    ) -> Result<()> {
        let inner = &*self.inner;
        let io = &inner.io;
        let quarantined = |id: TreeId| damaged.iter().any(|(d, _, _)| *d == id);
        for (db, name) in files {
            let p = inner.db_dir(*db).join(name);
            match parse_map_name(name) {
                Some((rel, c)) if members.get(&TreeId::new(*db, rel)) != Some(&c) => {
                    if quarantined(TreeId::new(*db, rel)) {
                        // Possibly the very map that is missing (a copy
                        // taken mid-checkpoint): kept for whoever repairs
                        // the tree, under a name no checkpoint will use.
                        let aside = inner.db_dir(*db).join(format!("{name}{ASIDE}"));
                        io.rename(&p, &aside)
                            .map_err(|e| EngineError::io("rename", &p, e))?;
                    } else {
                        io.remove(&p)
                            .map_err(|e| EngineError::io("remove", &p, e))?;
                    }
                }
                Some(_) => {}
                None => {
                    // A data file the durable checkpoint does not hold was
                    // created after it (replay recreates the tree) or
                    // dropped before it: garbage.
                    let stale = match name.parse::<u32>() {
                        Ok(rel) => !members.contains_key(&TreeId::new(*db, rel)),
                        Err(_) => name.ends_with(".tmp"),
                    };
                    if stale {
                        io.remove(&p)
                            .map_err(|e| EngineError::io("remove", &p, e))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Returns a dropped slot to the directory.
    fn free_slot(&self, slot: usize) {
        let meta = &self.inner.meta;
        let dir = MetaLatch::new(meta, meta.dir_latch(), LatchMode::Exclusive);
        self.inner.release_slot(&dir, slot);
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// Where replay must start: the redo point of the durable checkpoint.
    pub fn redo_position(&self) -> Lsn {
        self.inner.meta.redo().load(Ordering::Acquire)
    }

    /// Runs `f` inside one checkpoint barrier entry (the tree operations it
    /// makes enter nested): a checkpoint's image holds all of what `f`
    /// changes or none of it, and whatever `f` records beside its changes
    /// (recovery's position: the last record replayed) is exact for the
    /// image. `f` must not wait for other processes.
    pub fn atomically<T>(&self, f: impl FnOnce() -> T) -> T {
        let _b = CheckpointBarrier::enter(&self.inner.pool);
        f()
    }

    /// Re-applies one logged change (recovery). Idempotent: every record sets
    /// a final state. `cmp` gives the key order of a tree it creates or
    /// opens. Nothing is logged while replaying. Records of a damaged tree
    /// are skipped (its files are left for repair), except its drop.
    pub fn replay(
        &self,
        bytes: &[u8],
        cmp: &dyn Fn(TreeId) -> Arc<dyn KeyCmp>,
    ) -> Result<Replayed> {
        self.replay_record(Self::decode_record(bytes)?, cmp)
    }

    /// A logged change as [`Engine::replay_record`] takes it; a record that
    /// does not decode is damage.
    pub fn decode_record(bytes: &[u8]) -> Result<Record> {
        Record::decode(bytes).map_err(|d| EngineError::Damaged {
            tree: TreeId::new(0, 0),
            detail: d,
        })
    }

    /// [`Engine::replay`] of a record the caller has decoded (to look at it
    /// first).
    pub fn replay_record(
        &self,
        rec: Record,
        cmp: &dyn Fn(TreeId) -> Arc<dyn KeyCmp>,
    ) -> Result<Replayed> {
        let id = rec.tree();
        // Replay holds a checkpoint barrier (the server replays each record
        // atomically): eviction for room happens only if no checkpoint runs.
        let state = self.with_room(|| self.inner.lookup(id))?.map(|(_, st)| st);
        if state == Some(SLOT_DAMAGED) && !matches!(rec, Record::Drop { .. }) {
            return Ok(Replayed::SkippedDamaged(id));
        }
        match rec {
            Record::Create { compress, .. } => {
                if state.is_none() {
                    self.with_room(|| {
                        let opts = TreeOptions {
                            compress,
                            cmp: cmp(id),
                            pruner: None,
                        };
                        self.create_tree(id, opts, false)
                    })?;
                }
            }
            Record::Drop { .. } => {
                if state.is_some() {
                    self.drop_tree_inner(id, false)?;
                }
            }
            Record::IdLimit { limit, .. } => {
                self.tree(id)?.file().raise_id_limit(limit);
            }
            Record::Truncate { .. } => self.truncate_tree_inner(id, false)?,
            rec => replay_write(&self.tree_with(id, cmp(id))?, rec)?,
        }
        Ok(Replayed::Applied)
    }

    /// Why trees were quarantined when this handle loaded the durable
    /// checkpoint (empty in every other handle), for the host to report
    /// once; taking them leaves none.
    pub fn take_load_damage(&self) -> Vec<EngineError> {
        std::mem::take(&mut *self.inner.load_damage.lock().unwrap())
    }

    /// Whether tree `id` exists, live or damaged: what deciding to drop it
    /// needs (a damaged tree's table must still be droppable).
    ///
    /// A cold tree is loaded to answer. An error on the way (reading the
    /// durable checkpoint's tree list) counts as "exists": whatever the
    /// caller does with the tree next reports it.
    pub fn has_tree(&self, id: impl Into<TreeId>) -> bool {
        !matches!(self.inner.lookup(id.into()), Ok(None))
    }

    /// A handle on an existing tree with the given comparator.
    pub fn tree_with(&self, id: TreeId, cmp: Arc<dyn KeyCmp>) -> Result<Tree> {
        self.handle_of(id, cmp, None)
    }

    /// Live trees with superseded versions not swept yet
    /// (`Tree::note_superseded`), with their pages.
    pub fn superseded_trees(&self) -> Vec<Superseded> {
        let meta = &self.inner.meta;
        (0..meta.max_trees())
            .filter_map(|i| {
                let s = meta.slot(i);
                let count = s.superseded.load(Ordering::Relaxed);
                if count == 0 || s.state.load(Ordering::Acquire) != SLOT_LIVE {
                    return None;
                }
                Some(Superseded {
                    id: meta.slot_id(i),
                    rel: s.superseded_rel.load(Ordering::Relaxed),
                    xid: s.superseded_xid.load(Ordering::Relaxed),
                    count,
                    pages: meta.file(i).live_pages(),
                })
            })
            .collect()
    }

    /// Takes `count` superseded versions of tree `id` off its tally: a
    /// sweep of the whole tree pruned what they left (those noted since
    /// stay for the next one).
    pub fn swept(&self, id: TreeId, count: u64) {
        if let Ok(i) = self.inner.slot_of(id) {
            let s = &self.inner.meta.slot(i).superseded;
            let _ = s.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| Some(c.saturating_sub(count)));
        }
    }

    /// Metadata chunks in use and in all (a dropped tree's come back at
    /// once; its slot only at the next checkpoint), so a server short of
    /// them checkpoints early (`hooks::checkpointer`).
    pub fn metadata_use(&self) -> (usize, usize) {
        (self.inner.meta.chunks_in_use(), self.inner.meta.nchunks)
    }

    /// Tree slots of dropped trees (a checkpoint frees them), free slots,
    /// and slots in all.
    pub fn slot_use(&self) -> (usize, usize, usize) {
        let meta = &self.inner.meta;
        let (mut dropped, mut free) = (0, 0);
        for i in 0..meta.max_trees() {
            match meta.slot(i).state.load(Ordering::Acquire) {
                SLOT_DROPPED => dropped += 1,
                SLOT_FREE => free += 1,
                _ => {}
            }
        }
        (dropped, free, meta.max_trees())
    }

    /// The last durable checkpoint number (0 = none yet).
    pub fn durable_checkpoint(&self) -> u64 {
        self.inner.meta.durable().load(Ordering::Acquire)
    }

    pub(crate) fn slots_in(&self, state: u32) -> Vec<(usize, u32, TreeId)> {
        let meta = &self.inner.meta;
        (0..meta.max_trees())
            .filter(|&i| meta.slot(i).state.load(Ordering::Acquire) == state)
            .map(|i| (i, meta.slot(i).num.load(Ordering::Acquire), meta.slot_id(i)))
            .collect()
    }

    /// A handle on the tree in `slot` if it (still) holds live tree `id`.
    fn pin(
        &self,
        slot: usize,
        id: TreeId,
        cmp: Arc<dyn KeyCmp>,
        pruner: Option<Arc<dyn crate::btree::Pruner>>,
    ) -> Option<Tree> {
        let hold = self.inner.hold(slot, id)?;
        let num = self.inner.meta.slot(slot).num.load(Ordering::Acquire);
        self.inner.slots.write().unwrap().insert(num, slot);
        // A tree created here is found without a scan from now on.
        self.inner.ids.write().unwrap().insert(id, slot);
        Some(Tree {
            inner: self.inner.clone(),
            _hold: hold,
            slot,
            num,
            id,
            cmp,
            pruner,
        })
    }

    /// A handle on existing tree `id`, loaded from its files if no slot
    /// holds it (idle trees are evicted for room if need be).
    fn handle_of(
        &self,
        id: TreeId,
        cmp: Arc<dyn KeyCmp>,
        pruner: Option<Arc<dyn crate::btree::Pruner>>,
    ) -> Result<Tree> {
        self.with_room(|| {
            for _ in 0..1000 {
                let slot = self.inner.slot_of(id)?;
                if let Some(t) = self.pin(slot, id, cmp.clone(), pruner.clone()) {
                    return Ok(t);
                }
                // Evicted meanwhile, or being evicted: the eviction holds
                // the directory latch until it is done.
                let meta = &self.inner.meta;
                drop(MetaLatch::new(meta, meta.dir_latch(), LatchMode::Shared));
            }
            Err(EngineError::Damaged {
                tree: id,
                detail: "its slot stayed busy".into(),
            })
        })
    }

    /// Opens tree `id` with `opts`, creating it (one empty leaf) if absent.
    pub fn open_tree(&self, id: impl Into<TreeId>, opts: TreeOptions) -> Result<Tree> {
        let id = id.into();
        check_level(opts.compress)?;
        let opened = match self.handle_of(id, opts.cmp.clone(), opts.pruner.clone()) {
            Err(EngineError::NoSuchTree(_)) => {
                self.with_room(|| self.create_tree(id, opts.clone(), true))
            }
            r => r,
        }?;
        self.inner
            .meta
            .slot(opened.slot)
            .compress
            .store(opts.compress, Ordering::Relaxed);
        Ok(opened)
    }

    /// Creates tree `id` unless another process just did; logs the creation
    /// when `log`.
    fn create_tree(&self, id: TreeId, opts: TreeOptions, log: bool) -> Result<Tree> {
        let inner = &*self.inner;
        let meta = &inner.meta;
        let _b = CheckpointBarrier::enter(&inner.pool);
        // Held across the creation (a directory and one page write): tree
        // creation is rare, and this makes "find or create" atomic.
        let dir = MetaLatch::new(meta, meta.dir_latch(), LatchMode::Exclusive);
        if let Some(i) = meta.find(id, SLOT_LIVE) {
            // Under the directory latch nothing is being evicted.
            let t = self.pin(i, id, opts.cmp, opts.pruner);
            return t.ok_or(EngineError::NoSuchTree(id));
        }
        if meta.find(id, SLOT_DROPPED).is_some() {
            return Err(EngineError::TreeExists(id));
        }
        if meta.find(id, SLOT_DAMAGED).is_some() {
            drop(dir);
            return Err(inner.damage(id));
        }
        if inner.durable_map_of(id)?.is_some() {
            // Cold: it exists, in the durable checkpoint's files.
            drop(dir);
            return self.handle_of(id, opts.cmp, opts.pruner);
        }
        let slot = inner.claim_slot(&dir, id, opts.compress)?;
        let created = (|| {
            let d = inner.db_dir(id.db);
            inner
                .io
                .create_dir(&d)
                .map_err(|e| EngineError::io("create directory", &d, e))?;
            let path = inner.data_path(id);
            inner
                .io
                .set_len(&path, 0)
                .map_err(|e| EngineError::io("create", &path, e))?;
            // The root leaf is written straight to the file, so the tree is
            // complete the moment it becomes visible to other processes.
            let root = meta.file(slot).alloc_page()?;
            let mut page = vec![0u8; PAGE_SIZE];
            PageMut(&mut page).init(0, None, None, NO_PAGE);
            inner.write_image(slot, root, &page, inner.epoch())?;
            meta.slot(slot).root.store(root, Ordering::Release);
            if log {
                inner.log(&Record::Create {
                    tree: id,
                    compress: opts.compress,
                });
            }
            Ok(())
        })();
        match created {
            Ok(()) => {
                meta.slot(slot).state.store(SLOT_LIVE, Ordering::Release);
                let t = self.pin(slot, id, opts.cmp, opts.pruner);
                drop(dir);
                Ok(t.expect("a slot just published under the directory latch"))
            }
            Err(e) => {
                inner.release_slot(&dir, slot);
                Err(e)
            }
        }
    }

    /// A handle with the default comparator and `pruner`.
    pub fn tree_pruned(
        &self,
        id: impl Into<TreeId>,
        pruner: Arc<dyn crate::btree::Pruner>,
    ) -> Result<Tree> {
        self.handle_of(id.into(), Arc::new(Bytewise), Some(pruner))
    }

    /// Creates tree `to` holding every item of tree `from` in the order
    /// `cmp` (the one `from` is kept in), with `from`'s compression level
    /// and row ids below `from`'s counter reserved, so that row ids (the
    /// TIDs PostgreSQL's index copies hold) stay valid. Logged as a load
    /// is (the tree's creation, its id limit, one PUT_RUN per leaf), so
    /// replay and standbys build the same copy. For `CREATE DATABASE ...
    /// TEMPLATE`: the copy is independent of its source from then on.
    pub fn copy_tree(&self, from: TreeId, to: TreeId, cmp: Arc<dyn KeyCmp>) -> Result<Tree> {
        const BATCH_BYTES: usize = 1 << 20;
        let src = self.tree(from)?.with_cmp(cmp.clone());
        let dst = self.open_tree(
            to,
            TreeOptions {
                compress: src.compress(),
                cmp,
                pruner: None,
            },
        )?;
        let next = src.next_id();
        if next > 0 {
            dst.alloc_ids(next)?;
        }
        let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut bytes = 0;
        let mut first = true;
        let flush = |batch: &mut Vec<(Vec<u8>, Vec<u8>)>| -> Result<()> {
            let items: Vec<(&[u8], &[u8])> =
                batch.iter().map(|(k, v)| (&k[..], &v[..])).collect();
            if let Some(n) = dst.insert_run(&items)? {
                return Err(EngineError::Damaged {
                    tree: to,
                    detail: format!("copied key {n} of a batch was already there"),
                });
            }
            batch.clear();
            Ok(())
        };
        for item in src.scan() {
            let (k, v) = item?;
            bytes += k.len() + v.len();
            batch.push((k, v));
            // The first item alone: a keyed tree's descriptor
            // (`key_format::DESC_KEY`, its least key) names the order replay
            // must place the rest in, so it must be in before a record
            // that holds other keys is replayed.
            if first || bytes >= BATCH_BYTES {
                flush(&mut batch)?;
                bytes = 0;
                first = false;
            }
        }
        flush(&mut batch)?;
        Ok(dst)
    }

    /// A handle with the default comparator.
    pub fn tree(&self, id: impl Into<TreeId>) -> Result<Tree> {
        self.handle_of(id.into(), Arc::new(Bytewise), None)
    }

    /// Empties a tree in place (its id, file and row-id counter stay): every
    /// page but the root goes on the free list and the root becomes an empty
    /// leaf. Waits for a running checkpoint, like dropping. The caller keeps
    /// other writers of this tree away meanwhile (PostgreSQL's TRUNCATE holds
    /// an exclusive lock); readers just restart on the freed pages.
    pub fn truncate_tree(&self, id: impl Into<TreeId>) -> Result<()> {
        self.truncate_tree_inner(id.into(), true)
    }

    fn truncate_tree_inner(&self, id: TreeId, log: bool) -> Result<()> {
        let inner = &*self.inner;
        let meta = &inner.meta;
        let _ck = MetaLatch::new(meta, meta.ckpt_latch(), LatchMode::Exclusive);
        let _b = CheckpointBarrier::enter(&inner.pool);
        // The checkpoint latch keeps every slot where it is (no eviction).
        let slot = inner.live_slot(id, self.lookup_locked(id)?)?;
        let t = self
            .pin(slot, id, Arc::new(Bytewise), None)
            .ok_or(EngineError::NoSuchTree(id))?;
        let _r = t.root_lock();
        if log {
            inner.log(&Record::Truncate { tree: id });
        }
        inner.logged(log, || {
            let root = t.root();
            let npages = t.file().npages();
            for p in (0..npages).filter(|&p| p != root && !t.is_free(p)) {
                // A resident copy would otherwise be written back later.
                let mut g = inner.pool.fetch_new(inner, t.num, p)?;
                inner.free_page(slot, &mut g);
            }
            let mut g = t.fetch(root, LatchMode::Exclusive)?;
            inner.before_modify(&mut g)?;
            g.page_mut().init(0, None, None, NO_PAGE);
            g.mark_dirty(inner.epoch());
            Ok(())
        })
    }

    /// Drops a tree. Its files disappear when the next checkpoint is durable
    /// (until then the durable checkpoint still names them).
    pub fn drop_tree(&self, id: impl Into<TreeId>) -> Result<()> {
        self.drop_tree_inner(id.into(), true)
    }

    fn drop_tree_inner(&self, id: TreeId, log: bool) -> Result<()> {
        let inner = &*self.inner;
        let meta = &inner.meta;
        // A running checkpoint may have captured this tree and still need its
        // dirty pages, which dropping discards: wait for it to finish.
        let _ck = MetaLatch::new(meta, meta.ckpt_latch(), LatchMode::Exclusive);
        let _b = CheckpointBarrier::enter(&inner.pool);
        // A damaged tree is dropped like a live one: its table must go.
        let (slot, _) = self.lookup_locked(id)?.ok_or(EngineError::NoSuchTree(id))?;
        if log {
            inner.log(&Record::Drop { tree: id });
        }
        {
            let _d = MetaLatch::new(meta, meta.dir_latch(), LatchMode::Exclusive);
            let s = meta.slot(slot);
            s.dropped_at.store(inner.epoch(), Ordering::Release);
            s.state.store(SLOT_DROPPED, Ordering::Release);
        }
        inner
            .pool
            .invalidate_tree(meta.slot(slot).num.load(Ordering::Acquire));
        // Its page table and bitmap go back to the arena now: only its id is
        // needed until a checkpoint removes its files (`remove_old_files`),
        // and no page of it is written any more (`write_image_checked`
        // looks at the state under the file latch this takes).
        meta.file(slot).reset();
        Ok(())
    }

    /// Runs a checkpoint; returns its number once it is durable. `redo` is
    /// stored in the control file for the caller (the server's WAL position).
    /// On error the previous checkpoint stays the durable one (unless the
    /// error came after the control file's rename, the commit point). A
    /// failed fsync (`SyncFailed`) poisons the engine: this checkpoint and
    /// every later one fail, and data files are no longer written
    /// (`SyncPoisoned`), until the server restarts; the host must stop.
    pub fn checkpoint(&self, redo: u64) -> Result<u64> {
        self.checkpoint_hooked(redo, || {})
    }

    /// As [`checkpoint`](Self::checkpoint), calling `at_start` at the instant
    /// the image is defined (tests use it to know what must be included).
    pub fn checkpoint_hooked(&self, redo: u64, at_start: impl FnOnce()) -> Result<u64> {
        let inner = &*self.inner;
        let meta = &inner.meta;
        let _one = MetaLatch::new(meta, meta.ckpt_latch(), LatchMode::Exclusive);
        // After a failed fsync no checkpoint may be reported durable: the
        // retry's fsync would "succeed" over pages the kernel dropped.
        inner.check_poison()?;
        let start = CheckpointStart::enter(&inner.pool);
        let n = meta.next_epoch().load(Ordering::Acquire);
        // With a log, the redo point is its position now: every change before
        // it is in this image, none after it (changes log under the barrier).
        let redo = inner.wal.as_ref().map_or(redo, |w| w.redo_point(n));
        meta.running().store(n, Ordering::Release);
        meta.next_epoch().store(n + 1, Ordering::Release);
        let trees = self.slots_in(SLOT_LIVE);
        let damaged = self.slots_in(SLOT_DAMAGED);
        let dropped: Vec<(usize, u32, TreeId)> = self
            .slots_in(SLOT_DROPPED)
            .into_iter()
            .filter(|&(i, _, _)| meta.slot(i).dropped_at.load(Ordering::Acquire) <= n)
            .collect();
        for &(slot, _, _) in &trees {
            meta.file(slot)
                .checkpoint_start(n, meta.slot(slot).root.load(Ordering::Acquire));
        }
        at_start();
        drop(start);

        let result = self.carried(&trees, &damaged).and_then(|cold| {
            let heads = self.write_images(n, &trees)?;
            let listed = self.checkpoint_list(&trees, &heads, &damaged, cold);
            self.commit_checkpoint(n, redo, &listed)?;
            Ok((heads, listed))
        });
        meta.running().store(0, Ordering::Release);
        match result {
            Ok((heads, listed)) => {
                let done = self.finish_checkpoint(n, redo, &trees, &heads, &listed, &dropped);
                if done.is_ok() {
                    self.evict_after_checkpoint();
                }
                done
            }
            Err(e) => {
                for &(slot, _, _) in &trees {
                    meta.file(slot).checkpoint_failed();
                }
                Err(e)
            }
        }
    }

    /// [`Engine::checkpoint_hooked`] once checkpoint `n`'s control file
    /// (listing `listed`) is renamed into place (the commit point), the
    /// checkpoint latch still held: syncs the directory, makes `n` the
    /// durable checkpoint in every tree of `trees` whatever fails (those
    /// with a new map take its head from `heads`), then gives back the
    /// extents it superseded (punched, files trimmed) and removes what `n`
    /// made garbage (maps `listed` does not name, the files of the trees
    /// `dropped`). Returns `n`, or the first error.
    fn finish_checkpoint(
        &self,
        n: u64,
        redo: u64,
        trees: &[(usize, u32, TreeId)],
        heads: &[Option<MapHead>],
        listed: &[(TreeId, u64)],
        dropped: &[(usize, u32, TreeId)],
    ) -> Result<u64> {
        let inner = &*self.inner;
        let meta = &inner.meta;
        // The rename is durable once the directory is synced. If
        // that fails the engine is poisoned (no more writes) before
        // the bookkeeping below releases the previous checkpoint's
        // extents, and nothing is truncated or removed: on disk the
        // previous control file may still be the one that counts.
        let synced = inner
            .io
            .sync_dir(&inner.dir)
            .map_err(inner.sync_failed(&inner.dir));
        // The control file's rename was the commit point: from here on
        // checkpoint N is the durable one whatever fails, so every tree
        // takes it over before any error is reported.
        meta.durable().store(n, Ordering::Release);
        meta.redo().store(redo, Ordering::Release);
        let superseded: Vec<Vec<Extent>> = trees
            .iter()
            .zip(heads)
            .map(|(&(slot, _, _), head)| {
                let f = meta.file(slot);
                if let Some(h) = head {
                    f.set_map_head(*h);
                }
                f.checkpoint_done()
            })
            .collect();
        if let Err(e) = synced {
            // Poisoned: nothing is written any more, so the extents
            // can be free in memory, but on disk the superseded
            // checkpoint may still be the one that counts.
            for (&(slot, _, _), exts) in trees.iter().zip(&superseded) {
                let f = meta.file(slot);
                exts.iter().for_each(|&x| f.space_release(x));
            }
            return Err(e);
        }
        let mut first_err = None;
        for (&(slot, _, id), exts) in trees.iter().zip(superseded) {
            if let Err(e) = inner.punch(id, &exts) {
                first_err.get_or_insert(e);
            }
            // Truncate under the file latch, so no write lands beyond
            // the new end meanwhile.
            let f = meta.file(slot);
            exts.into_iter().for_each(|x| f.space_release(x));
            if let Some(end) = f.space_trim() {
                let path = inner.data_path(id);
                if let Err(e) = inner.io.set_len(&path, end as u64 * UNIT as u64) {
                    first_err.get_or_insert(EngineError::io("truncate", &path, e));
                }
            }
        }
        if let Err(e) = self.remove_old_files(n, listed, dropped) {
            first_err.get_or_insert(e);
        }
        match first_err {
            None => Ok(n),
            Some(e) => Err(e),
        }
    }

    /// Writes checkpoint `n`'s image of every tree in `trees`, and the map
    /// of each whose image differs from its durable map. Returns, per tree,
    /// the head of the map written (None: its durable map stays, so an
    /// idle tree costs neither a map nor a sync of its data file).
    fn write_images(&self, n: u64, trees: &[(usize, u32, TreeId)]) -> Result<Vec<Option<MapHead>>> {
        let inner = &*self.inner;
        let meta = &inner.meta;
        let mut heads = Vec::with_capacity(trees.len());
        for &(slot, num, id) in trees {
            let (_, npages, root) = meta
                .file(slot)
                .checkpoint_info()
                .expect("checkpoint captured this tree");
            for p in 0..npages {
                {
                    let f = meta.file(slot);
                    if !f.is_captured(p) || f.entry(p).image.is_some() {
                        continue;
                    }
                }
                if let Some(mut g) = inner.pool.lookup(num, p, LatchMode::Exclusive) {
                    if g.is_dirty() && g.dirty_epoch() <= n {
                        inner.write_image(slot, p, g.data(), g.dirty_epoch())?;
                        g.clear_dirty();
                    }
                }
                if meta.file(slot).decide_image(p).is_none() {
                    return Err(EngineError::Damaged {
                        tree: id,
                        detail: format!("page {p} has no image for checkpoint {n}"),
                    });
                }
            }
            let (map, same_pages, durable) = {
                let f = meta.file(slot);
                let pages: Vec<Option<Extent>> = (0..npages)
                    .map(|p| {
                        if f.entry(p).free_at_start {
                            None
                        } else {
                            f.entry(p).image
                        }
                    })
                    .collect();
                let same_pages = f.pages_are_durable(&pages);
                let map = TreeMap {
                    checkpoint: n,
                    root,
                    compress: meta.slot(slot).compress.load(Ordering::Relaxed),
                    id_limit: f.checkpoint_id_limit(),
                    pages,
                };
                (map, same_pages, f.map_head())
            };
            let head = MapHead {
                checkpoint: n,
                id_limit: map.id_limit,
                npages: map.pages.len() as u32,
                root: map.root,
                compress: map.compress,
            };
            if same_pages && (MapHead { checkpoint: n, ..durable }) == head {
                heads.push(None);
                continue;
            }
            if !same_pages {
                // The map names images written since the durable one.
                let path = inner.data_path(id);
                inner.io.sync(&path).map_err(inner.sync_failed(&path))?;
            }
            let map_path = inner.map_path(id, n);
            let tmp = map_path.with_extension("map.tmp");
            inner
                .io
                .write_file(&tmp, &map.encode())
                .map_err(inner.ioerr("write", &tmp))?;
            inner.io.sync(&tmp).map_err(inner.sync_failed(&tmp))?;
            inner
                .io
                .rename(&tmp, &map_path)
                .map_err(inner.ioerr("rename", &tmp))?;
            heads.push(Some(head));
        }
        Ok(heads)
    }

    /// The control file's list for checkpoint `n`: each tree of `trees`
    /// with its new map's checkpoint (`heads`) or its durable map's, and
    /// each `damaged` tree with its durable map's (kept unchanged, so the
    /// damage stays reported and a repair, restoring the files, still
    /// loads).
    fn checkpoint_list(
        &self,
        trees: &[(usize, u32, TreeId)],
        heads: &[Option<MapHead>],
        damaged: &[(usize, u32, TreeId)],
        cold: Vec<(TreeId, u64)>,
    ) -> Vec<(TreeId, u64)> {
        let meta = &self.inner.meta;
        let mut listed: Vec<(TreeId, u64)> = trees
            .iter()
            .zip(heads)
            .map(|(&(slot, _, id), head)| {
                let ckpt = match head {
                    Some(h) => h.checkpoint,
                    None => meta.file(slot).map_head().checkpoint,
                };
                (id, ckpt)
            })
            .chain(
                damaged
                    .iter()
                    .map(|&(slot, _, id)| (id, meta.file(slot).map_head().checkpoint)),
            )
            .chain(cold)
            .collect();
        listed.sort();
        listed
    }

    /// Makes checkpoint `n` durable once every map is written: directory
    /// syncs (database directories, then the engine directory that names
    /// them, and at the first checkpoint the engine directory's parent),
    /// the log up to `redo`, then the control file's rename.
    fn commit_checkpoint(&self, n: u64, redo: u64, listed: &[(TreeId, u64)]) -> Result<()> {
        let inner = &*self.inner;
        let mut dbs: Vec<u32> = listed.iter().map(|t| t.0.db).collect();
        dbs.sort();
        dbs.dedup();
        for db in dbs {
            let d = inner.db_dir(db);
            inner.io.sync_dir(&d).map_err(inner.sync_failed(&d))?;
        }
        // The engine directory too: it holds the names of the database
        // directories, and one created since the last checkpoint is not
        // durable yet. Synced only after the control file's rename, a power
        // cut could keep that rename (the control file naming the new
        // database's trees) and lose the directory with their maps and data.
        inner
            .io
            .sync_dir(&inner.dir)
            .map_err(inner.sync_failed(&inner.dir))?;
        // The first checkpoint also makes the engine directory's own name
        // durable (an entry of its parent, e.g. `$PGDATA`): it was created
        // without syncing the parent, and a power cut that takes the
        // directory away would leave no control file, i.e. a new, empty
        // engine. (Checkpoints are serialized, so `durable` is still the
        // previous checkpoint's number here.)
        if inner.meta.durable().load(Ordering::Acquire) == 0 {
            let parent = match inner.dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            inner
                .io
                .sync_dir(&parent)
                .map_err(inner.sync_failed(&parent))?;
        }
        // The images may embody decisions (pruning, hint bits) taken from
        // commits logged before the redo point: make that log durable before
        // the images become the checkpoint.
        if let Some(w) = &inner.wal {
            w.flush(redo);
        }
        let control = inner.path("control");
        let tmp = inner.path("control.tmp");
        inner
            .io
            .write_file(
                &tmp,
                &Control {
                    checkpoint: n,
                    redo,
                    trees: listed.to_vec(),
                }
                .encode(),
            )
            .map_err(inner.ioerr("write", &tmp))?;
        inner.io.sync(&tmp).map_err(inner.sync_failed(&tmp))?;
        inner
            .io
            .rename(&tmp, &control)
            .map_err(inner.ioerr("rename", &tmp))?;
        Ok(())
    }

    /// After checkpoint `n` (whose trees and maps are `listed`) is durable:
    /// the maps it does not name, and the files of trees dropped before it
    /// started, are garbage; the dropped trees' slots return to the
    /// directory.
    fn remove_old_files(
        &self,
        n: u64,
        listed: &[(TreeId, u64)],
        dropped: &[(usize, u32, TreeId)],
    ) -> Result<()> {
        let inner = &*self.inner;
        let live: Vec<TreeId> = self
            .slots_in(SLOT_LIVE)
            .into_iter()
            .chain(self.slots_in(SLOT_DAMAGED))
            .map(|t| t.2)
            .collect();
        let gone = |id: TreeId| dropped.iter().any(|d| d.2 == id) && !live.contains(&id);
        // A listed tree keeps only its map; any other tree (created since
        // the checkpoint started: no map yet) has none that `n` needs.
        let stale_map = |id: TreeId, c: u64| match listed.binary_search_by_key(&id, |t| t.0) {
            Ok(i) => c != listed[i].1,
            Err(_) => c < n,
        };
        for entry in inner
            .io
            .list(&inner.dir)
            .map_err(inner.ioerr("list", &inner.dir))?
        {
            let Ok(db) = entry.parse::<u32>() else {
                continue;
            };
            let d = inner.db_dir(db);
            for name in inner.io.list(&d).map_err(inner.ioerr("list", &d))? {
                let remove = match parse_map_name(&name) {
                    Some((rel, c)) => stale_map(TreeId::new(db, rel), c) || gone(TreeId::new(db, rel)),
                    // Maps set aside for a quarantined tree go with its drop.
                    None => match parse_aside_name(&name) {
                        Some((rel, _)) => gone(TreeId::new(db, rel)),
                        None => name
                            .parse::<u32>()
                            .is_ok_and(|rel| gone(TreeId::new(db, rel))),
                    },
                };
                if remove {
                    inner.meta.unlinks().fetch_add(1, Ordering::AcqRel);
                    let p = d.join(&name);
                    inner.io.remove(&p).map_err(inner.ioerr("remove", &p))?;
                }
            }
        }
        for &(slot, _, _) in dropped {
            self.free_slot(slot);
        }
        Ok(())
    }
}

impl Tree {
    pub fn id(&self) -> TreeId {
        self.id
    }

    /// The order this handle compares keys by (borrowed: a descent
    /// compares at every level, and a clone of the `Arc` per call was two
    /// atomic operations each time).
    pub fn cmp(&self) -> &dyn KeyCmp {
        &*self.cmp
    }

    /// [`Tree::cmp`] as a shared handle, for keeping beyond this handle.
    pub fn cmp_arc(&self) -> Arc<dyn KeyCmp> {
        self.cmp.clone()
    }

    /// This handle comparing keys by `cmp` instead: for a tree whose order
    /// its host learns from the tree's own contents (a key descriptor item
    /// that sorts first under either order).
    pub fn with_cmp(&self, cmp: Arc<dyn KeyCmp>) -> Tree {
        Tree {
            cmp,
            ..self.clone()
        }
    }

    pub(crate) fn file(&self) -> TreeFileGuard<'_> {
        self.inner.meta.file(self.slot)
    }

    pub(crate) fn root(&self) -> u32 {
        self.inner.meta.slot(self.slot).root.load(Ordering::Acquire)
    }

    pub(crate) fn set_root(&self, r: u32) {
        self.inner
            .meta
            .slot(self.slot)
            .root
            .store(r, Ordering::Release);
    }

    /// Serialises root splits of this tree.
    pub(crate) fn root_lock(&self) -> MetaLatch<'_> {
        MetaLatch::new(
            &self.inner.meta,
            Meta::root_latch(self.slot),
            LatchMode::Exclusive,
        )
    }

    pub(crate) fn alloc_page(&self) -> Result<u32> {
        self.file().alloc_page()
    }

    /// Changes the compression level for pages written from now on.
    pub fn set_compress(&self, level: i32) -> Result<()> {
        self.inner
            .meta
            .slot(self.slot)
            .compress
            .store(check_level(level)?, Ordering::Relaxed);
        Ok(())
    }

    pub fn compress(&self) -> i32 {
        self.inner
            .meta
            .slot(self.slot)
            .compress
            .load(Ordering::Relaxed)
    }

    /// Statistics for monitoring: pages, resident/dirty buffers, file bytes.
    pub fn stats(&self) -> TreeStats {
        let (resident, dirty) = self.inner.pool.resident(self.num);
        let f = self.file();
        TreeStats {
            pages: f.live_pages() as u64,
            resident_pages: resident as u64,
            dirty_pages: dirty as u64,
            file_bytes: f.end_units() as u64 * UNIT as u64,
            free_bytes: f.free_units() * UNIT as u64,
        }
    }

    /// Row ids handed out so far are all below this.
    pub fn next_id(&self) -> u64 {
        self.file().next_id()
    }

    /// The tree's pages in use (free page-table entries left out): O(1),
    /// for planner estimates.
    pub fn approx_pages(&self) -> u64 {
        self.file().live_pages() as u64
    }

    pub(crate) fn page_count(&self) -> u32 {
        self.file().npages()
    }

    pub(crate) fn is_free(&self, p: u32) -> bool {
        self.file().entry(p).free
    }
}

/// What [`Engine::replay`] did with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replayed {
    Applied,
    /// Not applied: the record's tree is damaged (its files failed
    /// validation at load), so its changes since its map are lost unless
    /// the files are repaired and the record replayed again.
    SkippedDamaged(TreeId),
}

/// A tree's tally of superseded versions (`Engine::superseded_trees`).
/// `rel` and `xid` are the table AM's numbers, opaque to the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superseded {
    pub id: TreeId,
    pub rel: u32,
    pub xid: u32,
    pub count: u64,
    pub pages: u32,
}

/// A tree's size figures. `file_bytes` is the data file's length after the
/// last write (it shrinks at checkpoints when trailing space is free).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TreeStats {
    pub pages: u64,
    pub resident_pages: u64,
    pub dirty_pages: u64,
    pub file_bytes: u64,
    pub free_bytes: u64,
}

#[allow(dead_code)]
const _: () = assert!(PAGE_SIZE.is_multiple_of(UNIT));

/// Replays a record that writes into tree `t` (puts, patches, updates, a
/// delete), unlogged; the records of the tree itself (create, drop, id
/// limit, truncate) are [`Engine::replay_record`]'s.
fn replay_write(t: &Tree, rec: Record) -> Result<()> {
    let id = rec.tree();
    match rec {
        Record::Put { key, value, .. } => {
            t.write_inner(&key, &value, None, false)?;
        }
        Record::PutPair {
            first, key, value, ..
        } => {
            t.write_inner(&first.0, &first.1, None, false)?;
            t.write_inner(&key, &value, None, false)?;
        }
        Record::PutRun { items, .. } => {
            for (k, v) in &items {
                t.write_inner(k, v, None, false)?;
            }
        }
        Record::PutPairDelta {
            first,
            key,
            base,
            delta,
            ..
        } => {
            let value = t.get(&base)?.and_then(|b| delta.apply(&b)).ok_or_else(|| {
                EngineError::Damaged {
                    tree: id,
                    detail: format!(
                        "a logged delta of key {key:02x?} finds no base value under key {base:02x?}"
                    ),
                }
            })?;
            t.write_inner(&first.0, &first.1, None, false)?;
            t.write_inner(&key, &value, None, false)?;
        }
        Record::Patch { key, len, edit, .. } => {
            replay_edit(t, &key, len, &edit)?;
        }
        Record::Update {
            key,
            len,
            edit,
            first,
            new_key,
            delta,
            ..
        } => {
            let base = replay_edit(t, &key, len, &edit)?;
            let value = delta.apply(&base).ok_or_else(|| EngineError::Damaged {
                tree: id,
                detail: format!(
                    "a logged update of key {key:02x?} has a delta longer than its base"
                ),
            })?;
            if let Some((fk, fv)) = first {
                t.write_inner(&fk, &fv, None, false)?;
            }
            t.write_inner(&new_key, &value, None, false)?;
        }
        Record::Delete { key, .. } => {
            t.delete_inner(&key, false)?;
        }
        Record::Create { .. }
        | Record::Drop { .. }
        | Record::IdLimit { .. }
        | Record::Truncate { .. } => unreachable!("replayed by Engine::replay_record"),
    }
    Ok(())
}

/// Applies a logged edit to `key`'s value, which must be `len` bytes long
/// (the value it was made from) or already the edit's result; the edited
/// value.
fn replay_edit(t: &Tree, key: &[u8], len: u16, edit: &crate::wal::Edit) -> Result<Vec<u8>> {
    let own = crate::key_format::own_id(key);
    let edited = t.apply(key, crate::btree::Log::No, |cur| {
        match cur {
            Some(v) if v.len() == len as usize => match edit.apply(v, own) {
                Some(nv) => (Change::Put(nv.clone()), Some(nv)),
                None => (Change::Keep, None),
            },
            // Replayed again over its own result (a splice changes the
            // length, so this value is not the one it was made from).
            Some(v) if edit.applied(v, len, own) => (Change::Keep, Some(v.to_vec())),
            _ => (Change::Keep, None),
        }
    })?;
    edited.ok_or_else(|| EngineError::Damaged {
        tree: t.id(),
        detail: format!("a logged edit of key {key:02x?} finds no value of {len} bytes to edit"),
    })
}
