//! Which trees have their metadata — a slot, its page table and free-space
//! bitmap — in the shared region. A tree need not: one that is exactly its
//! durable map ([`TreeFileGuard::is_durable`]) and on which no process holds
//! a handle can be *evicted* (its slot and chunks freed), and it is loaded
//! again from its map when next looked up. The control file lists every
//! tree of the durable checkpoint with its map, so an evicted (*cold*) tree
//! is found there, and each checkpoint carries the cold trees of the one
//! before into its own list. The number of trees is thus bounded by the
//! files on disk, not by the region, which holds the trees in use.
//!
//! A [`Tree`] handle holds its slot ([`Hold`]): eviction claims a slot only
//! while nobody holds it, and a handle is only made on a slot that is not
//! being evicted, so a tree operation never sees its slot change under it.
//! Eviction runs under the checkpoint latch (a running checkpoint captured
//! the trees it walks by slot), either at the end of a checkpoint, when
//! the region is three quarters full, or when a tree cannot be created or
//! loaded for want of room.

use crate::engine::{read_control, Engine, EngineProcess, MetaLatch};
use crate::error::{EngineError, Result};
use crate::id::TreeId;
use crate::latch::LatchMode;
use crate::meta::{MapHead, EVICTING, SLOT_DAMAGED, SLOT_DROPPED, SLOT_FREE, SLOT_LIVE};
use crate::store::control::Control;
use crate::store::image::UNIT;
use crate::store::map::TreeMap;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A tree handle's claim on its slot. Invariant: while it lives, the slot's
/// `holders` counts it, so the slot is not evicted (and holds this tree
/// until the tree is dropped).
pub(crate) struct Hold {
    inner: Arc<EngineProcess>,
    slot: usize,
}

impl Drop for Hold {
    fn drop(&mut self) {
        // Nothing to give back if the process already gave back all its
        // holds (`release_local_holds`, at an exit without unwinding).
        let mine = self.inner.local_holds[self.slot]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |k| k.checked_sub(1));
        if mine.is_ok() {
            self.inner
                .meta
                .slot(self.slot)
                .holders
                .fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The durable checkpoint's trees (with their map checkpoints) as this
/// process last read them from the control file. Invariant: `checkpoint`
/// is the number of the control file they came from.
pub(crate) struct ColdList {
    checkpoint: u64,
    trees: HashMap<TreeId, u64>,
}

impl EngineProcess {
    /// A hold on `slot` if it holds live tree `id` and is not being
    /// evicted; None means: look the tree up again.
    pub(crate) fn hold(self: &Arc<Self>, slot: usize, id: TreeId) -> Option<Arc<Hold>> {
        let s = self.meta.slot(slot);
        let mut h = s.holders.load(Ordering::Acquire);
        loop {
            if h & EVICTING != 0 {
                return None;
            }
            match s
                .holders
                .compare_exchange_weak(h, h + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => h = now,
            }
        }
        self.local_holds[slot].fetch_add(1, Ordering::AcqRel);
        let hold = Arc::new(Hold {
            inner: self.clone(),
            slot,
        });
        // Checked once held: from here on the slot cannot be evicted, so
        // what it holds now it keeps.
        if s.state.load(Ordering::Acquire) != SLOT_LIVE || self.meta.slot_id(slot) != id {
            return None;
        }
        let now = self.meta.clock().fetch_add(1, Ordering::Relaxed);
        s.touched.store(now, Ordering::Relaxed);
        Some(hold)
    }

    /// Gives back every hold this process's handles have — for a process
    /// exiting without unwinding (PostgreSQL FATAL, `proc_exit`), whose
    /// handles are never dropped; those dropped later give back nothing.
    pub(crate) fn release_local_holds(&self) -> usize {
        let mut released = 0;
        for (i, l) in self.local_holds.iter().enumerate() {
            let k = l.swap(0, Ordering::AcqRel);
            if k > 0 {
                self.meta.slot(i).holders.fetch_sub(k, Ordering::AcqRel);
                released += k as usize;
            }
        }
        released
    }

    /// Whether a slot holds tree `id` (tests: is it cold?).
    #[cfg(test)]
    pub(crate) fn lookup_resident_for_tests(&self, id: TreeId) -> Option<(usize, u32)> {
        self.lookup_resident(id)
    }

    /// The durable checkpoint's tree list, read again when a checkpoint
    /// became durable since this process last read it.
    pub(crate) fn cold_list(&self) -> Result<Arc<ColdList>> {
        let durable = self.meta.durable().load(Ordering::Acquire);
        if let Some(c) = &*self.cold.lock().unwrap() {
            if c.checkpoint == durable {
                return Ok(c.clone());
            }
        }
        let path = self.dir.join("control");
        let control = match read_control(&*self.io, &path)? {
            Some(c) => c,
            None if durable == 0 => Control::empty(),
            None => {
                return Err(EngineError::corrupt(
                    &path,
                    0,
                    "control file is missing, but a checkpoint is durable",
                ))
            }
        };
        let list = Arc::new(ColdList {
            checkpoint: control.checkpoint,
            trees: control.trees.into_iter().collect(),
        });
        *self.cold.lock().unwrap() = Some(list.clone());
        Ok(list)
    }

    /// Tree `id`'s map checkpoint if the durable checkpoint holds it.
    pub(crate) fn durable_map_of(&self, id: TreeId) -> Result<Option<u64>> {
        Ok(self.cold_list()?.trees.get(&id).copied())
    }

    /// Loads tree `id` from the durable checkpoint's files into a free
    /// slot, if that checkpoint holds it and no slot does: its slot and
    /// state (live, or damaged when its files fail validation), None if it
    /// does not exist (never checkpointed, or dropped).
    pub(crate) fn load_cold(&self, id: TreeId) -> Result<Option<(usize, u32)>> {
        let mut last = None;
        // A checkpoint's control file is in place a moment (a directory
        // sync) before the checkpoint is durable in memory: a list read
        // meanwhile is newer than `durable`; wait for it to catch up.
        for _ in 0..10_000 {
            let cold = self.cold_list()?;
            let Some(&ckpt) = cold.trees.get(&id) else {
                return Ok(None);
            };
            let dir = MetaLatch::new(&self.meta, self.meta.dir_latch(), LatchMode::Exclusive);
            // Read before a checkpoint that may have given the tree another
            // map (and evicted it again): read the list again. Once this is
            // checked under the directory latch, no eviction can follow a
            // later checkpoint until the latch is let go.
            if self.meta.durable().load(Ordering::Acquire) != cold.checkpoint {
                drop(dir);
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
            for st in [SLOT_LIVE, SLOT_DAMAGED] {
                if let Some(i) = self.meta.find(id, st) {
                    return Ok(Some((i, st)));
                }
            }
            if self.meta.find(id, SLOT_DROPPED).is_some() {
                return Ok(None);
            }
            match self.check_tree_files(id, ckpt) {
                Ok(map) => return Ok(Some((self.install_tree(&dir, id, ckpt, &map)?, SLOT_LIVE))),
                // A checkpoint since the list was read may have replaced
                // the map (the tree was loaded, changed and evicted again).
                Err(e @ EngineError::Corrupt { .. })
                    if self.meta.durable().load(Ordering::Acquire) != cold.checkpoint =>
                {
                    last = Some(e);
                    drop(dir);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(EngineError::Corrupt { .. }) => {
                    let slot = self.install_damaged(&dir, id, ckpt)?;
                    return Ok(Some((slot, SLOT_DAMAGED)));
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| EngineError::Damaged {
            tree: id,
            detail: "checkpoints kept replacing the tree list while it was loaded".into(),
        }))
    }

    /// Installs tree `id` from its durable map `map` (of checkpoint `ckpt`)
    /// in a free slot, its data file trimmed to what the map holds (images
    /// written after that checkpoint are garbage), and publishes it live.
    /// The caller holds the directory latch (`dir`). On an error the slot
    /// is released.
    pub(crate) fn install_tree(
        &self,
        dir: &MetaLatch,
        id: TreeId,
        ckpt: u64,
        map: &TreeMap,
    ) -> Result<usize> {
        let meta = &self.meta;
        let slot = self.claim_slot(dir, id, map.compress)?;
        let installed = (|| {
            let f = meta.file(slot);
            f.raise_id_limit(map.id_limit);
            f.load(&map.pages).map_err(|e| match e {
                EngineError::Damaged { detail, .. } => {
                    EngineError::corrupt(self.map_path(id, ckpt), 0, detail)
                }
                e => e,
            })?;
            f.set_map_head(MapHead {
                checkpoint: ckpt,
                id_limit: map.id_limit,
                npages: map.pages.len() as u32,
                root: map.root,
                compress: map.compress,
            });
            let need = f.end_units() as u64 * UNIT as u64;
            drop(f);
            meta.slot(slot).root.store(map.root, Ordering::Release);
            let data = self.data_path(id);
            if self.io.len(&data).unwrap_or(0) > need {
                self.io
                    .set_len(&data, need)
                    .map_err(|e| EngineError::io("truncate", &data, e))?;
            }
            Ok(())
        })();
        match installed {
            Ok(()) => {
                meta.slot(slot).state.store(SLOT_LIVE, Ordering::Release);
                Ok(slot)
            }
            Err(e) => {
                self.release_slot(dir, slot);
                Err(e)
            }
        }
    }

    /// Installs tree `id`, whose files failed validation, as damaged: its
    /// slot names the map of checkpoint `ckpt` that errors report.
    pub(crate) fn install_damaged(&self, dir: &MetaLatch, id: TreeId, ckpt: u64) -> Result<usize> {
        let slot = self.claim_slot(dir, id, -1)?;
        self.meta.file(slot).set_map_head(MapHead {
            checkpoint: ckpt,
            ..MapHead::default()
        });
        self.meta.slot(slot).state.store(SLOT_DAMAGED, Ordering::Release);
        Ok(slot)
    }
}

/// Gives back, when dropped, the claims of the slots an eviction still
/// holds claimed (only an unwinding eviction leaves any).
struct Unclaim<'a>(&'a crate::meta::Meta, &'a [usize]);

impl Drop for Unclaim<'_> {
    fn drop(&mut self) {
        for &i in self.1 {
            let _ = self.0.slot(i).holders.compare_exchange(
                EVICTING,
                0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }
}

/// Whether `r` failed for want of a tree slot or metadata chunks.
fn wants_room<T>(r: &Result<T>) -> bool {
    matches!(r, Err(EngineError::TooManyTrees(_) | EngineError::MetadataFull(_)))
}

impl Engine {
    /// Runs `open`; while it fails for want of a tree slot or metadata
    /// chunks, evicts idle trees — an eighth of the region, then half,
    /// then every idle tree — and runs it again. Only for entry points
    /// whose thread does not hold the checkpoint latch; one that holds a
    /// checkpoint barrier (a replayed record, a tree creation) evicts
    /// only if the checkpoint latch is free right now (a checkpoint that
    /// is starting waits for that barrier).
    pub(crate) fn with_room<T>(&self, open: impl Fn() -> Result<T>) -> Result<T> {
        let meta = &self.inner.meta;
        self.escalate(open, |part| {
            let latch = meta.ckpt_latch();
            let _ck = if crate::engine::holds_barrier() {
                if !meta.latches().try_acquire(latch, LatchMode::Exclusive) {
                    return false;
                }
                MetaLatch::taken(meta, latch, LatchMode::Exclusive)
            } else {
                MetaLatch::new(meta, latch, LatchMode::Exclusive)
            };
            self.evict_idle(meta.max_trees() / part, meta.nchunks / part);
            true
        })
    }

    /// Runs `open`; while it fails for want of room, has `evict` free an
    /// eighth of the region, then half, then every idle tree (`evict`
    /// returns false when it cannot), and runs it again.
    fn escalate<T>(&self, open: impl Fn() -> Result<T>, evict: impl Fn(usize) -> bool) -> Result<T> {
        let mut r = open();
        for part in [8, 2, 1] {
            if !wants_room(&r) || !evict(part) {
                break;
            }
            r = open();
        }
        r
    }

    /// Evicts idle trees until half the region is free (or none is left
    /// to evict), waiting for a running checkpoint: for a caller that
    /// holds no checkpoint barrier and found no room (replay retries its
    /// record after this).
    pub fn make_room(&self) {
        let meta = &self.inner.meta;
        let _ck = MetaLatch::new(meta, meta.ckpt_latch(), LatchMode::Exclusive);
        self.evict_idle(meta.max_trees(), meta.nchunks);
    }

    /// [`EngineProcess::lookup`] for a thread that holds the checkpoint
    /// latch (dropping or emptying a tree, or replaying that): idle trees
    /// are evicted for room if loading the tree needs it.
    pub(crate) fn lookup_locked(&self, id: TreeId) -> Result<Option<(usize, u32)>> {
        let meta = &self.inner.meta;
        self.escalate(
            || self.inner.lookup(id),
            |part| {
                self.evict_idle(meta.max_trees() / part, meta.nchunks / part);
                true
            },
        )
    }

    /// After a checkpoint (the caller holds the checkpoint latch): when a
    /// quarter or less of the slots or chunks is free, evicts idle trees
    /// until half of each is.
    pub(crate) fn evict_after_checkpoint(&self) {
        let meta = &self.inner.meta;
        let free_slots = self.free_slots();
        let free_chunks = meta.nchunks - meta.chunks_in_use();
        if free_slots * 4 <= meta.max_trees() || free_chunks * 4 <= meta.nchunks {
            self.evict_idle(meta.max_trees() / 2, meta.nchunks / 2);
        }
    }

    fn free_slots(&self) -> usize {
        let meta = &self.inner.meta;
        (0..meta.max_trees())
            .filter(|&i| meta.slot(i).state.load(Ordering::Acquire) == SLOT_FREE)
            .count()
    }

    /// Evicts idle trees — live, held by no handle, exactly their durable
    /// map, no buffer of theirs dirty or pinned — least recently opened
    /// first (trees whose dead versions wait for a sweep last), until
    /// `slots` slots and `chunks` chunks are free or none is left (the
    /// region's size: every idle tree). The caller holds the checkpoint
    /// latch. Returns how many were evicted.
    pub(crate) fn evict_idle(&self, slots: usize, chunks: usize) -> usize {
        let inner = &*self.inner;
        let meta = &inner.meta;
        let dir = MetaLatch::new(meta, meta.dir_latch(), LatchMode::Exclusive);
        let mut free_slots = self.free_slots();
        let mut free_chunks = meta.nchunks - meta.chunks_in_use();
        if free_slots >= slots && free_chunks >= chunks {
            return 0;
        }
        let mut order: Vec<(bool, u32, usize)> = (0..meta.max_trees())
            .filter(|&i| {
                let s = meta.slot(i);
                s.state.load(Ordering::Acquire) == SLOT_LIVE
                    && s.holders.load(Ordering::Acquire) == 0
            })
            .map(|i| {
                let s = meta.slot(i);
                let waits = s.superseded.load(Ordering::Relaxed) != 0;
                (waits, s.touched.load(Ordering::Relaxed), i)
            })
            .collect();
        order.sort_unstable();
        // Claimed first, all of them: from then on no handle can be made on
        // them, so nothing dirties their pages after the pool is looked at.
        let claimed: Vec<usize> = order
            .into_iter()
            .map(|(_, _, i)| i)
            .filter(|&i| {
                meta.slot(i)
                    .holders
                    .compare_exchange(0, EVICTING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            })
            .collect();
        if claimed.is_empty() {
            return 0;
        }
        // Should anything below unwind, no slot stays claimed for good.
        let _unclaim = Unclaim(meta, &claimed);
        let nums: HashSet<u32> = claimed
            .iter()
            .map(|&i| meta.slot(i).num.load(Ordering::Acquire))
            .collect();
        let busy = inner.pool.busy_among(&nums);
        let mut evicted = HashSet::new();
        for &i in &claimed {
            let s = meta.slot(i);
            let num = s.num.load(Ordering::Acquire);
            let wanted = free_slots < slots || free_chunks < chunks;
            if wanted && !busy.contains(&num) && self.is_durable(i) {
                inner.release_slot(&dir, i);
                evicted.insert(num);
                free_slots += 1;
                free_chunks = meta.nchunks - meta.chunks_in_use();
            }
            s.holders.store(0, Ordering::Release);
        }
        drop(_unclaim);
        drop(dir);
        inner.pool.invalidate_trees(&evicted);
        evicted.len()
    }

    /// Whether the tree in slot `i` is exactly its durable map.
    fn is_durable(&self, i: usize) -> bool {
        let meta = &self.inner.meta;
        let s = meta.slot(i);
        let f = meta.file(i);
        let head = f.map_head();
        f.is_durable()
            && head.root == s.root.load(Ordering::Acquire)
            && head.compress == s.compress.load(Ordering::Relaxed)
    }

    /// The durable checkpoint's trees that a running checkpoint did not
    /// capture (its live `trees` and `damaged` ones) and that are not
    /// dropped, with their map checkpoints: cold trees, and trees loaded
    /// since it started, which it lists with the maps they were loaded
    /// from. The caller holds the checkpoint latch, so the durable list is
    /// this process's cached one or the control file on disk.
    pub(crate) fn carried(
        &self,
        trees: &[(usize, u32, TreeId)],
        damaged: &[(usize, u32, TreeId)],
    ) -> Result<Vec<(TreeId, u64)>> {
        let captured: HashSet<TreeId> = trees.iter().chain(damaged).map(|t| t.2).collect();
        let dropped: HashSet<TreeId> = self.slots_in(SLOT_DROPPED).into_iter().map(|t| t.2).collect();
        Ok(self
            .inner
            .cold_list()?
            .trees
            .iter()
            .filter(|(id, _)| !captured.contains(id) && !dropped.contains(id))
            .map(|(&id, &ckpt)| (id, ckpt))
            .collect())
    }

    /// Gives back every tree hold of this process's handles — for a
    /// process that exits without unwinding (PostgreSQL FATAL,
    /// `proc_exit`), whose handles are never dropped. Returns how many.
    pub fn release_local_holds(&self) -> usize {
        self.inner.release_local_holds()
    }

    /// Every tree: those in slots (live or damaged) and the cold ones.
    pub fn tree_ids(&self) -> Result<Vec<TreeId>> {
        let meta = &self.inner.meta;
        let mut dropped = HashSet::new();
        let mut ids = HashSet::new();
        for i in 0..meta.max_trees() {
            match meta.slot(i).state.load(Ordering::Acquire) {
                SLOT_LIVE | SLOT_DAMAGED => {
                    ids.insert(meta.slot_id(i));
                }
                SLOT_DROPPED => {
                    dropped.insert(meta.slot_id(i));
                }
                _ => {}
            }
        }
        let cold = self.inner.cold_list()?;
        ids.extend(cold.trees.keys().filter(|id| !dropped.contains(id)));
        let mut v: Vec<TreeId> = ids.into_iter().collect();
        v.sort();
        Ok(v)
    }
}
