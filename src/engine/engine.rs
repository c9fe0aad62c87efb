//! The engine: a directory of tree data files, one page pool, and the
//! checkpoint protocol that turns the pool's dirty pages into a durable,
//! point-in-time image of every tree.
//!
//! Files in the directory: `<tree>` (data file, 512-byte units of page
//! images), `<tree>-<checkpoint>.map` (one per tree per durable checkpoint),
//! `control` (the durable checkpoint number), and `*.tmp` while writing.

use crate::buffer::{PageGuard, PageIo, Pool};
use crate::cmp::{Bytewise, KeyCmp};
use crate::error::{EngineError, Result};
use crate::io::FileIo;
use crate::latch::LatchMode;
use crate::meta::{FileGuard, Meta, SLOT_DROPPED, SLOT_FREE, SLOT_LIVE};
use crate::page::{PageMut, F_DELETED, NO_PAGE, PAGE_SIZE};
use crate::store::control::Control;
use crate::store::image::{self, UNIT};
use crate::store::map::TreeMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

/// Trees a private engine (tests, tools) can hold, and its metadata chunks.
pub const PRIVATE_MAX_TREES: usize = 256;
pub const PRIVATE_META_CHUNKS: usize = 4096;

/// Options of one tree.
#[derive(Clone)]
pub struct TreeOptions {
    /// -1 = raw pages, 0..=22 = zstd level (0 = zstd's default).
    pub compress: i32,
    pub cmp: Arc<dyn KeyCmp>,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions {
            compress: -1,
            cmp: Arc::new(Bytewise),
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
/// Invariant: `slots` maps a tree id only to a slot that held that id when
/// cached; users re-check the slot before trusting it.
pub(crate) struct Inner {
    pub dir: PathBuf,
    pub io: Arc<dyn FileIo>,
    pub pool: Pool,
    pub meta: Meta,
    pub slots: RwLock<HashMap<u32, usize>>,
}

/// An open engine directory.
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

/// A handle on one tree (cheap to clone). Invariant: `slot` held tree `id`
/// when the handle was made; the comparator is this handle's.
#[derive(Clone)]
pub struct Tree {
    pub(crate) inner: Arc<Inner>,
    pub(crate) slot: usize,
    pub(crate) id: u32,
    pub(crate) cmp: Arc<dyn KeyCmp>,
}

/// Holds the checkpoint barrier shared for the length of one tree
/// modification, so a checkpoint starts between operations, never inside.
pub(crate) struct Barrier<'a>(&'a Pool);

impl<'a> Barrier<'a> {
    pub fn enter(pool: &'a Pool) -> Self {
        pool.latches()
            .acquire(pool.barrier_latch(), LatchMode::Shared);
        Barrier(pool)
    }
}

impl Drop for Barrier<'_> {
    fn drop(&mut self) {
        self.0
            .latches()
            .release(self.0.barrier_latch(), LatchMode::Shared);
    }
}

/// Holds a latch of the metadata region until dropped.
pub(crate) struct MetaLatch<'a>(&'a Meta, usize, LatchMode);

impl<'a> MetaLatch<'a> {
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

fn map_name(tree: u32, ckpt: u64) -> String {
    format!("{tree}-{ckpt}.map")
}

/// Parses `<tree>-<checkpoint>.map`.
fn parse_map_name(name: &str) -> Option<(u32, u64)> {
    let stem = name.strip_suffix(".map")?;
    let (t, c) = stem.split_once('-')?;
    Some((t.parse().ok()?, c.parse().ok()?))
}

impl Inner {
    /// The slot of live tree `id`.
    pub fn slot_of(&self, id: u32) -> Result<usize> {
        if let Some(&i) = self.slots.read().unwrap().get(&id) {
            let s = self.meta.slot(i);
            if s.state.load(Ordering::Acquire) == SLOT_LIVE && s.id.load(Ordering::Acquire) == id {
                return Ok(i);
            }
        }
        let i = self.meta.find(id).ok_or(EngineError::NoSuchTree(id))?;
        self.slots.write().unwrap().insert(id, i);
        Ok(i)
    }

    pub fn data_path(&self, id: u32) -> PathBuf {
        self.dir.join(id.to_string())
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

    /// Puts a page (latched exclusively, already pre-imaged) on the free list.
    pub fn free_page(&self, slot: usize, g: &mut PageGuard) {
        g.page_mut().set_flag(F_DELETED, true);
        self.meta.file(slot).page_freed(g.page);
        // The free list is the truth now; the buffer holds a tombstone that
        // readers recognise and that never needs writing.
        g.clear_dirty();
    }

    /// Writes an image of `page` to a new extent of tree `slot`'s file.
    fn write_image(&self, slot: usize, id: u32, page: u32, buf: &[u8], epoch: u64) -> Result<()> {
        let level = self.meta.slot(slot).compress.load(Ordering::Relaxed);
        let img = image::encode(buf, page, epoch, level);
        let f = self.meta.file(slot);
        let e = f.space_alloc((img.len() / UNIT) as u16)?;
        let path = self.data_path(id);
        if let Err(err) = self.io.write_at(&path, e.off as u64 * UNIT as u64, &img) {
            f.space_release(e);
            return Err(EngineError::io("write", path, err));
        }
        f.page_written(page, e, epoch);
        Ok(())
    }
}

impl PageIo for Inner {
    fn read_page(&self, tree: u32, page: u32, buf: &mut [u8]) -> Result<()> {
        let slot = self.slot_of(tree)?;
        let ext = {
            let f = self.meta.file(slot);
            let ent = (page < f.npages()).then(|| f.entry(page));
            match ent {
                Some(e) if !e.free => match e.cur {
                    Some(x) => x,
                    None => {
                        return Err(EngineError::Damaged {
                            tree,
                            detail: format!("page {page} has no stored image"),
                        })
                    }
                },
                _ => {
                    // A stale reference to a freed page: hand out a tombstone
                    // so the reader restarts its descent.
                    let mut p = PageMut(buf);
                    p.init(0, None, None, NO_PAGE);
                    p.set_flag(F_DELETED, true);
                    return Ok(());
                }
            }
        };
        let path = self.data_path(tree);
        let off = ext.off as u64 * UNIT as u64;
        let mut bytes = vec![0u8; ext.len as usize * UNIT];
        self.io
            .read_at(&path, off, &mut bytes)
            .map_err(self.ioerr("read", &path))?;
        image::decode(&bytes, page, buf).map_err(|d| EngineError::corrupt(&path, off, d))?;
        crate::page::validate(buf)
            .map_err(|d| EngineError::corrupt(&path, off, format!("page {page}: {d}")))?;
        Ok(())
    }

    fn write_page(&self, tree: u32, page: u32, buf: &[u8], epoch: u64) -> Result<()> {
        match self.slot_of(tree) {
            Ok(slot) => self.write_image(slot, tree, page, buf, epoch),
            // A buffer of a dropped tree: nothing to keep.
            Err(EngineError::NoSuchTree(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Engine {
    /// Opens (or creates) an engine directory with private memory: a page
    /// pool of `nbuffers` buffers and metadata for up to
    /// [`PRIVATE_MAX_TREES`] trees.
    pub fn open(dir: impl AsRef<Path>, nbuffers: usize, io: Arc<dyn FileIo>) -> Result<Engine> {
        Self::open_with(
            dir,
            Pool::private(nbuffers),
            Meta::private(PRIVATE_MAX_TREES, PRIVATE_META_CHUNKS),
            io,
        )
    }

    /// Opens the engine over shared memory, as each server process does.
    ///
    /// # Safety
    /// `meta_base` must point to a region formatted by
    /// [`MetaRegion::format`](crate::meta::MetaRegion::format) for
    /// `max_trees`/`nchunks`, mapped for the life of the process, and every
    /// process must pass the same `latches` (at least
    /// `MetaRegion::latch_count(max_trees)`).
    pub unsafe fn attach_shared(
        dir: impl AsRef<Path>,
        pool: Pool,
        meta_base: *mut u8,
        max_trees: usize,
        nchunks: usize,
        latches: Arc<dyn crate::latch::LatchSet>,
        io: Arc<dyn FileIo>,
    ) -> Result<Engine> {
        // SAFETY: forwarded from the caller's guarantees.
        let meta = unsafe { Meta::attach(meta_base, max_trees, nchunks, latches) };
        Self::open_with(dir, pool, meta, io)
    }

    /// Another handle on the same shared memory, as a second process would
    /// have: its own file handles and caches, nothing else.
    pub fn attach_another(&self, io: Arc<dyn FileIo>) -> Result<Engine> {
        Self::open_with(
            &self.inner.dir,
            self.inner.pool.another_handle(),
            self.inner.meta.clone(),
            io,
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
    ) -> Result<Engine> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| EngineError::io("create directory", &dir, e))?;
        let inner = Arc::new(Inner {
            dir,
            io,
            pool,
            meta,
            slots: RwLock::new(HashMap::new()),
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

    fn load(&self) -> Result<()> {
        let inner = &*self.inner;
        let (dir, io, meta) = (&inner.dir, &inner.io, &inner.meta);
        let control_path = dir.join("control");
        let control = if io.exists(&control_path) {
            let b = io
                .read_file(&control_path)
                .map_err(|e| EngineError::io("read", &control_path, e))?;
            Control::decode(&b).map_err(|d| EngineError::corrupt(&control_path, 0, d))?
        } else {
            Control {
                checkpoint: 0,
                redo: 0,
            }
        };
        let durable = control.checkpoint;
        let names = io.list(dir).map_err(|e| EngineError::io("list", dir, e))?;
        let mut maps = Vec::new();
        for name in &names {
            if let Some((id, c)) = parse_map_name(name) {
                if c == durable {
                    let path = dir.join(name);
                    let b = io
                        .read_file(&path)
                        .map_err(|e| EngineError::io("read", &path, e))?;
                    let map = TreeMap::decode(&b).map_err(|d| EngineError::corrupt(&path, 0, d))?;
                    if map.checkpoint != durable {
                        return Err(EngineError::corrupt(
                            &path,
                            8,
                            format!("map belongs to checkpoint {}", map.checkpoint),
                        ));
                    }
                    maps.push((id, map));
                }
            }
        }
        for (id, map) in &maps {
            let data = inner.data_path(*id);
            let slot = self.claim_slot(*id, map.compress)?;
            let f = meta.file(slot);
            f.load(&map.pages)?;
            let need = f.end_units() as u64 * UNIT as u64;
            drop(f);
            meta.slot(slot).root.store(map.root, Ordering::Release);
            let have = io.len(&data).unwrap_or(0);
            if have < need {
                return Err(EngineError::corrupt(
                    &data,
                    have,
                    format!("data file truncated: {have} bytes, the map needs {need}"),
                ));
            }
            if have > need {
                // Images written after the durable checkpoint: garbage now.
                io.set_len(&data, need)
                    .map_err(|e| EngineError::io("truncate", &data, e))?;
            }
            meta.slot(slot).state.store(SLOT_LIVE, Ordering::Release);
        }
        for name in &names {
            let stale = match parse_map_name(name) {
                Some((_, c)) => c != durable,
                None => match name.parse::<u32>() {
                    Ok(id) => !maps.iter().any(|(m, _)| *m == id),
                    Err(_) => name.ends_with(".tmp"),
                },
            };
            if stale {
                let p = dir.join(name);
                io.remove(&p)
                    .map_err(|e| EngineError::io("remove", &p, e))?;
            }
        }
        meta.durable().store(durable, Ordering::Release);
        meta.next_epoch().store(durable + 1, Ordering::Release);
        meta.running().store(0, Ordering::Release);
        Ok(())
    }

    /// Takes a free slot for tree `id` (state stays FREE until the caller
    /// publishes it as LIVE).
    fn claim_slot(&self, id: u32, compress: i32) -> Result<usize> {
        let meta = &self.inner.meta;
        let _d = MetaLatch::new(meta, meta.dir_latch(), LatchMode::Exclusive);
        let i = (0..meta.max_trees())
            .find(|&i| {
                meta.slot(i).state.load(Ordering::Acquire) == SLOT_FREE
                    && meta.slot(i).id.load(Ordering::Acquire) != u32::MAX
            })
            .ok_or(EngineError::TooManyTrees(meta.max_trees()))?;
        let s = meta.slot(i);
        // Reserve it: a FREE slot with id u32::MAX is taken but not live yet.
        s.id.store(u32::MAX, Ordering::Release);
        meta.file(i).reset();
        s.compress.store(compress, Ordering::Relaxed);
        s.root.store(0, Ordering::Relaxed);
        s.id.store(id, Ordering::Release);
        Ok(i)
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The last durable checkpoint number (0 = none yet).
    pub fn durable_checkpoint(&self) -> u64 {
        self.inner.meta.durable().load(Ordering::Acquire)
    }

    fn live_slots(&self) -> Vec<(usize, u32)> {
        let meta = &self.inner.meta;
        (0..meta.max_trees())
            .filter(|&i| meta.slot(i).state.load(Ordering::Acquire) == SLOT_LIVE)
            .map(|i| (i, meta.slot(i).id.load(Ordering::Acquire)))
            .collect()
    }

    /// Ids of all trees.
    pub fn tree_ids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.live_slots().into_iter().map(|(_, id)| id).collect();
        v.sort();
        v
    }

    fn handle(&self, slot: usize, id: u32, cmp: Arc<dyn KeyCmp>) -> Tree {
        self.inner.slots.write().unwrap().insert(id, slot);
        Tree {
            inner: self.inner.clone(),
            slot,
            id,
            cmp,
        }
    }

    /// Opens tree `id` with `opts`, creating it (one empty leaf) if absent.
    pub fn open_tree(&self, id: u32, opts: TreeOptions) -> Result<Tree> {
        check_level(opts.compress)?;
        assert!(id != u32::MAX, "tree id {id} is reserved");
        let inner = &*self.inner;
        let meta = &inner.meta;
        if let Ok(i) = inner.slot_of(id) {
            meta.slot(i)
                .compress
                .store(opts.compress, Ordering::Relaxed);
            return Ok(self.handle(i, id, opts.cmp));
        }
        let _b = Barrier::enter(&inner.pool);
        if let Some(i) = meta.find(id) {
            return Ok(self.handle(i, id, opts.cmp));
        }
        let dropped = (0..meta.max_trees()).any(|i| {
            meta.slot(i).state.load(Ordering::Acquire) == SLOT_DROPPED
                && meta.slot(i).id.load(Ordering::Acquire) == id
        });
        if dropped {
            return Err(EngineError::TreeExists(id));
        }
        let slot = self.claim_slot(id, opts.compress)?;
        let created = (|| {
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
            inner.write_image(slot, id, root, &page, inner.epoch())?;
            meta.slot(slot).root.store(root, Ordering::Release);
            Ok(())
        })();
        match created {
            Ok(()) => {
                let _d = MetaLatch::new(meta, meta.dir_latch(), LatchMode::Exclusive);
                meta.slot(slot).state.store(SLOT_LIVE, Ordering::Release);
                Ok(self.handle(slot, id, opts.cmp))
            }
            Err(e) => {
                meta.file(slot).reset();
                meta.slot(slot).id.store(0, Ordering::Release);
                Err(e)
            }
        }
    }

    /// A handle with the default comparator.
    pub fn tree(&self, id: u32) -> Result<Tree> {
        let slot = self.inner.slot_of(id)?;
        Ok(self.handle(slot, id, Arc::new(Bytewise)))
    }

    /// Drops a tree. Its files disappear when the next checkpoint is durable
    /// (until then the durable checkpoint still names them).
    pub fn drop_tree(&self, id: u32) -> Result<()> {
        let inner = &*self.inner;
        let meta = &inner.meta;
        let _b = Barrier::enter(&inner.pool);
        let slot = inner.slot_of(id)?;
        {
            let _d = MetaLatch::new(meta, meta.dir_latch(), LatchMode::Exclusive);
            let s = meta.slot(slot);
            s.dropped_at.store(inner.epoch(), Ordering::Release);
            s.state.store(SLOT_DROPPED, Ordering::Release);
        }
        inner.slots.write().unwrap().remove(&id);
        inner.pool.invalidate_tree(id);
        Ok(())
    }

    /// Runs a checkpoint; returns its number once it is durable. `redo` is
    /// stored in the control file for the caller (the server's WAL position).
    /// On error the previous checkpoint stays the durable one.
    pub fn checkpoint(&self, redo: u64) -> Result<u64> {
        self.checkpoint_hooked(redo, || {})
    }

    /// As [`checkpoint`](Self::checkpoint), calling `at_start` at the instant
    /// the image is defined (tests use it to know what must be included).
    pub fn checkpoint_hooked(&self, redo: u64, at_start: impl FnOnce()) -> Result<u64> {
        let inner = &*self.inner;
        let meta = &inner.meta;
        let _one = MetaLatch::new(meta, meta.ckpt_latch(), LatchMode::Exclusive);
        let latches = inner.pool.latches();
        let barrier = inner.pool.barrier_latch();
        latches.acquire(barrier, LatchMode::Exclusive);
        let n = meta.next_epoch().load(Ordering::Acquire);
        meta.running().store(n, Ordering::Release);
        meta.next_epoch().store(n + 1, Ordering::Release);
        let trees = self.live_slots();
        let dropped: Vec<(usize, u32)> = (0..meta.max_trees())
            .filter(|&i| {
                let s = meta.slot(i);
                s.state.load(Ordering::Acquire) == SLOT_DROPPED
                    && s.dropped_at.load(Ordering::Acquire) <= n
            })
            .map(|i| (i, meta.slot(i).id.load(Ordering::Acquire)))
            .collect();
        for &(slot, _) in &trees {
            meta.file(slot)
                .checkpoint_start(n, meta.slot(slot).root.load(Ordering::Acquire));
        }
        at_start();
        latches.release(barrier, LatchMode::Exclusive);

        let result = self.write_checkpoint(n, redo, &trees);
        meta.running().store(0, Ordering::Release);
        match result {
            Ok(()) => {
                meta.durable().store(n, Ordering::Release);
                for &(slot, id) in &trees {
                    let f = meta.file(slot);
                    f.checkpoint_done();
                    if let Some(end) = f.space_trim() {
                        let path = inner.data_path(id);
                        inner
                            .io
                            .set_len(&path, end as u64 * UNIT as u64)
                            .map_err(|e| EngineError::io("truncate", &path, e))?;
                    }
                }
                self.remove_old_files(n, &dropped)?;
                Ok(n)
            }
            Err(e) => {
                for &(slot, _) in &trees {
                    meta.file(slot).checkpoint_failed();
                }
                Err(e)
            }
        }
    }

    fn write_checkpoint(&self, n: u64, redo: u64, trees: &[(usize, u32)]) -> Result<()> {
        let inner = &*self.inner;
        let meta = &inner.meta;
        for &(slot, id) in trees {
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
                if let Some(mut g) = inner.pool.lookup(id, p, LatchMode::Exclusive) {
                    if g.is_dirty() && g.dirty_epoch() <= n {
                        inner.write_image(slot, id, p, g.data(), g.dirty_epoch())?;
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
            let map = {
                let f = meta.file(slot);
                let pages = (0..npages)
                    .map(|p| {
                        if f.entry(p).free_at_start {
                            None
                        } else {
                            f.entry(p).image
                        }
                    })
                    .collect();
                TreeMap {
                    checkpoint: n,
                    root,
                    compress: meta.slot(slot).compress.load(Ordering::Relaxed),
                    pages,
                }
            };
            let path = inner.data_path(id);
            inner.io.sync(&path).map_err(inner.ioerr("sync", &path))?;
            let map_path = inner.path(&map_name(id, n));
            let tmp = map_path.with_extension("map.tmp");
            inner
                .io
                .write_file(&tmp, &map.encode())
                .map_err(inner.ioerr("write", &tmp))?;
            inner.io.sync(&tmp).map_err(inner.ioerr("sync", &tmp))?;
            inner
                .io
                .rename(&tmp, &map_path)
                .map_err(inner.ioerr("rename", &tmp))?;
        }
        inner
            .io
            .sync_dir(&inner.dir)
            .map_err(inner.ioerr("sync", &inner.dir))?;
        let control = inner.path("control");
        let tmp = inner.path("control.tmp");
        inner
            .io
            .write_file(
                &tmp,
                &Control {
                    checkpoint: n,
                    redo,
                }
                .encode(),
            )
            .map_err(inner.ioerr("write", &tmp))?;
        inner.io.sync(&tmp).map_err(inner.ioerr("sync", &tmp))?;
        inner
            .io
            .rename(&tmp, &control)
            .map_err(inner.ioerr("rename", &tmp))?;
        inner
            .io
            .sync_dir(&inner.dir)
            .map_err(inner.ioerr("sync", &inner.dir))?;
        Ok(())
    }

    /// After checkpoint `n` is durable: maps of older checkpoints and the
    /// files of trees dropped before it started are garbage; their slots
    /// return to the directory.
    fn remove_old_files(&self, n: u64, dropped: &[(usize, u32)]) -> Result<()> {
        let inner = &*self.inner;
        let meta = &inner.meta;
        let dropped_ids: Vec<u32> = dropped.iter().map(|&(_, id)| id).collect();
        let live: Vec<u32> = self.tree_ids();
        let gone = |id: u32| dropped_ids.contains(&id) && !live.contains(&id);
        let names = inner
            .io
            .list(&inner.dir)
            .map_err(inner.ioerr("list", &inner.dir))?;
        for name in names {
            let remove = match parse_map_name(&name) {
                Some((id, c)) => c < n || gone(id),
                None => name.parse::<u32>().is_ok_and(gone),
            };
            if remove {
                let p = inner.path(&name);
                inner.io.remove(&p).map_err(inner.ioerr("remove", &p))?;
            }
        }
        for &(slot, _) in dropped {
            let _d = MetaLatch::new(meta, meta.dir_latch(), LatchMode::Exclusive);
            meta.file(slot).reset();
            let s = meta.slot(slot);
            s.id.store(0, Ordering::Release);
            s.state.store(SLOT_FREE, Ordering::Release);
        }
        Ok(())
    }
}

impl Tree {
    pub fn id(&self) -> u32 {
        self.id
    }

    pub(crate) fn cmp(&self) -> Arc<dyn KeyCmp> {
        self.cmp.clone()
    }

    pub(crate) fn file(&self) -> FileGuard<'_> {
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
        let (resident, dirty) = self.inner.pool.resident(self.id);
        let f = self.file();
        TreeStats {
            pages: (0..f.npages()).filter(|&p| !f.entry(p).free).count() as u64,
            resident_pages: resident as u64,
            dirty_pages: dirty as u64,
            file_bytes: f.end_units() as u64 * UNIT as u64,
            free_bytes: f.free_units() * UNIT as u64,
        }
    }

    pub(crate) fn page_count(&self) -> u32 {
        self.file().npages()
    }

    pub(crate) fn is_free(&self, p: u32) -> bool {
        self.file().entry(p).free
    }
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
