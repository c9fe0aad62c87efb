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
use crate::page::{PageMut, F_DELETED, NO_PAGE, PAGE_SIZE};
use crate::store::control::Control;
use crate::store::image::{self, UNIT};
use crate::store::map::TreeMap;
use crate::tree_file::{CkptInfo, TreeFile};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Options of one tree.
#[derive(Clone)]
pub struct TreeOptions {
    /// -1 = raw pages, 0..=22 = zstd level (0 = zstd's default).
    pub compress: i32,
    pub cmp: Arc<dyn KeyCmp>,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions { compress: -1, cmp: Arc::new(Bytewise) }
    }
}

fn check_level(level: i32) -> Result<i32> {
    if (-1..=22).contains(&level) {
        Ok(level)
    } else {
        Err(EngineError::BadCompression(level))
    }
}

/// One tree's shared state. Invariant: `root` names a page of this tree at
/// the highest level; only a root split (under `root_lock`) changes it.
pub(crate) struct TreeMeta {
    pub id: u32,
    pub root: AtomicU32,
    pub compress: AtomicI32,
    pub cmp: RwLock<Arc<dyn KeyCmp>>,
    pub file: Mutex<TreeFile>,
    pub root_lock: Mutex<()>,
}

/// Engine state shared by every handle. Invariants: `next_epoch` is the
/// number the next checkpoint will get, and every page modification is
/// stamped with it; `running` is the checkpoint in progress (0 = none);
/// both only change under the barrier latch held exclusively, while every
/// tree modification holds it shared.
pub(crate) struct Inner {
    pub dir: PathBuf,
    pub io: Arc<dyn FileIo>,
    pub pool: Pool,
    pub trees: RwLock<HashMap<u32, Arc<TreeMeta>>>,
    pub running: AtomicU64,
    pub next_epoch: AtomicU64,
    pub durable: AtomicU64,
    pub ckpt_lock: Mutex<()>,
    pub dropped: Mutex<Vec<u32>>,
}

/// An open engine directory.
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

/// A handle on one tree (cheap to clone).
#[derive(Clone)]
pub struct Tree {
    pub(crate) inner: Arc<Inner>,
    pub(crate) meta: Arc<TreeMeta>,
}

/// Holds the checkpoint barrier shared for the length of one tree
/// modification, so a checkpoint starts between operations, never inside.
pub(crate) struct Barrier<'a>(&'a Pool);

impl<'a> Barrier<'a> {
    pub fn enter(pool: &'a Pool) -> Self {
        pool.latches().acquire(pool.barrier_latch(), LatchMode::Shared);
        Barrier(pool)
    }
}

impl Drop for Barrier<'_> {
    fn drop(&mut self) {
        self.0.latches().release(self.0.barrier_latch(), LatchMode::Shared);
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
    pub fn tree(&self, id: u32) -> Result<Arc<TreeMeta>> {
        self.trees.read().unwrap().get(&id).cloned().ok_or(EngineError::NoSuchTree(id))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn ioerr(&self, op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
        let path = path.to_path_buf();
        move |e| EngineError::io(op, path, e)
    }

    /// The checkpoint pre-image hook: before a page is modified, content
    /// that belongs to the running checkpoint is written out first.
    pub fn before_modify(&self, g: &mut PageGuard) -> Result<()> {
        let running = self.running.load(Ordering::Acquire);
        if running != 0 && g.is_dirty() && g.dirty_epoch() <= running {
            self.write_page(g.tree, g.page, g.data(), g.dirty_epoch())?;
            g.clear_dirty();
        }
        Ok(())
    }

    pub fn epoch(&self) -> u64 {
        self.next_epoch.load(Ordering::Acquire)
    }

    pub fn alloc_page(&self, meta: &TreeMeta) -> u32 {
        meta.file.lock().unwrap().alloc_page()
    }

    /// Puts a page (latched exclusively, already pre-imaged) on the free list.
    pub fn free_page(&self, meta: &TreeMeta, g: &mut PageGuard) {
        g.page_mut().set_flag(F_DELETED, true);
        meta.file.lock().unwrap().page_freed(g.page, self.epoch());
        // The free list is the truth now; the buffer holds a tombstone that
        // readers recognise and that never needs writing.
        g.clear_dirty();
    }
}

impl PageIo for Inner {
    fn read_page(&self, tree: u32, page: u32, buf: &mut [u8]) -> Result<()> {
        let meta = self.tree(tree)?;
        let (path, ext) = {
            let f = meta.file.lock().unwrap();
            let ent = f.pages.get(page as usize).cloned().unwrap_or_default();
            if ent.free || page as usize >= f.pages.len() {
                // A stale reference to a freed page: hand out a tombstone so
                // the reader restarts its descent.
                let mut p = PageMut(buf);
                p.init(0, None, None, NO_PAGE);
                p.set_flag(F_DELETED, true);
                return Ok(());
            }
            match ent.cur {
                Some(e) => (f.path.clone(), e),
                None => {
                    return Err(EngineError::Damaged { tree, detail: format!("page {page} has no stored image") })
                }
            }
        };
        let off = ext.off as u64 * UNIT as u64;
        let mut bytes = vec![0u8; ext.len as usize * UNIT];
        self.io.read_at(&path, off, &mut bytes).map_err(self.ioerr("read", &path))?;
        image::decode(&bytes, page, buf).map_err(|d| EngineError::corrupt(&path, off, d))?;
        crate::page::validate(buf).map_err(|d| EngineError::corrupt(&path, off, format!("page {page}: {d}")))?;
        Ok(())
    }

    fn write_page(&self, tree: u32, page: u32, buf: &[u8], epoch: u64) -> Result<()> {
        let meta = self.tree(tree)?;
        let img = image::encode(buf, page, epoch, meta.compress.load(Ordering::Relaxed));
        let mut f = meta.file.lock().unwrap();
        let e = f.space.alloc((img.len() / UNIT) as u16);
        let path = f.path.clone();
        if let Err(err) = self.io.write_at(&path, e.off as u64 * UNIT as u64, &img) {
            f.space.release(e);
            return Err(EngineError::io("write", path, err));
        }
        f.page_written(page, e, epoch, self.epoch());
        Ok(())
    }
}

impl Engine {
    /// Opens (or creates) an engine directory with a private page pool of
    /// `nbuffers` buffers.
    pub fn open(dir: impl AsRef<Path>, nbuffers: usize, io: Arc<dyn FileIo>) -> Result<Engine> {
        Self::open_with_pool(dir, Pool::private(nbuffers), io)
    }

    /// Opens a directory: loads the durable checkpoint's maps, removes files
    /// that no durable checkpoint names (written after it, or left over).
    pub fn open_with_pool(dir: impl AsRef<Path>, pool: Pool, io: Arc<dyn FileIo>) -> Result<Engine> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| EngineError::io("create directory", &dir, e))?;
        let control_path = dir.join("control");
        let control = if io.exists(&control_path) {
            let b = io.read_file(&control_path).map_err(|e| EngineError::io("read", &control_path, e))?;
            Control::decode(&b).map_err(|d| EngineError::corrupt(&control_path, 0, d))?
        } else {
            Control { checkpoint: 0, redo: 0 }
        };
        let durable = control.checkpoint;
        let names = io.list(&dir).map_err(|e| EngineError::io("list", &dir, e))?;
        let mut trees = HashMap::new();
        for name in &names {
            if let Some((id, c)) = parse_map_name(name) {
                if c == durable {
                    let path = dir.join(name);
                    let b = io.read_file(&path).map_err(|e| EngineError::io("read", &path, e))?;
                    let map = TreeMap::decode(&b).map_err(|d| EngineError::corrupt(&path, 0, d))?;
                    if map.checkpoint != durable {
                        return Err(EngineError::corrupt(&path, 8, format!("map belongs to checkpoint {}", map.checkpoint)));
                    }
                    let data = dir.join(id.to_string());
                    let f = TreeFile::from_map(data.clone(), &map);
                    let need = f.space.end as u64 * UNIT as u64;
                    let have = io.len(&data).unwrap_or(0);
                    if have < need {
                        return Err(EngineError::corrupt(&data, have, format!("data file truncated: {have} bytes, the map needs {need}")));
                    }
                    if have > need {
                        // Images written after the durable checkpoint: garbage now.
                        io.set_len(&data, need).map_err(|e| EngineError::io("truncate", &data, e))?;
                    }
                    trees.insert(
                        id,
                        Arc::new(TreeMeta {
                            id,
                            root: AtomicU32::new(map.root),
                            compress: AtomicI32::new(map.compress),
                            cmp: RwLock::new(Arc::new(Bytewise)),
                            file: Mutex::new(f),
                            root_lock: Mutex::new(()),
                        }),
                    );
                }
            }
        }
        for name in &names {
            let stale = match parse_map_name(name) {
                Some((_, c)) => c != durable,
                None => match name.parse::<u32>() {
                    Ok(id) => !trees.contains_key(&id),
                    Err(_) => name.ends_with(".tmp"),
                },
            };
            if stale {
                let p = dir.join(name);
                io.remove(&p).map_err(|e| EngineError::io("remove", &p, e))?;
            }
        }
        let inner = Arc::new(Inner {
            dir,
            io,
            pool,
            trees: RwLock::new(trees),
            running: AtomicU64::new(0),
            next_epoch: AtomicU64::new(durable + 1),
            durable: AtomicU64::new(durable),
            ckpt_lock: Mutex::new(()),
            dropped: Mutex::new(Vec::new()),
        });
        Ok(Engine { inner })
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The last durable checkpoint number (0 = none yet).
    pub fn durable_checkpoint(&self) -> u64 {
        self.inner.durable.load(Ordering::Acquire)
    }

    /// Ids of all trees.
    pub fn tree_ids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.inner.trees.read().unwrap().keys().copied().collect();
        v.sort();
        v
    }

    /// Opens tree `id` with `opts`, creating it (one empty leaf) if absent.
    pub fn open_tree(&self, id: u32, opts: TreeOptions) -> Result<Tree> {
        check_level(opts.compress)?;
        assert!(id != u32::MAX, "tree id {id} is reserved");
        let inner = &self.inner;
        if let Some(meta) = inner.trees.read().unwrap().get(&id).cloned() {
            meta.compress.store(opts.compress, Ordering::Relaxed);
            *meta.cmp.write().unwrap() = opts.cmp;
            return Ok(Tree { inner: inner.clone(), meta });
        }
        let _b = Barrier::enter(&inner.pool);
        let mut trees = inner.trees.write().unwrap();
        if let Some(meta) = trees.get(&id).cloned() {
            return Ok(Tree { inner: inner.clone(), meta });
        }
        let path = inner.path(&id.to_string());
        inner.io.set_len(&path, 0).map_err(|e| EngineError::io("create", &path, e))?;
        let meta = Arc::new(TreeMeta {
            id,
            root: AtomicU32::new(0),
            compress: AtomicI32::new(opts.compress),
            cmp: RwLock::new(opts.cmp),
            file: Mutex::new(TreeFile::empty(path)),
            root_lock: Mutex::new(()),
        });
        trees.insert(id, meta.clone());
        drop(trees);
        let root = inner.alloc_page(&meta);
        let mut g = inner.pool.fetch_new(&**inner, id, root)?;
        g.page_mut().init(0, None, None, NO_PAGE);
        g.mark_dirty(inner.epoch());
        meta.root.store(root, Ordering::Release);
        drop(g);
        Ok(Tree { inner: inner.clone(), meta })
    }

    pub fn tree(&self, id: u32) -> Result<Tree> {
        Ok(Tree { inner: self.inner.clone(), meta: self.inner.tree(id)? })
    }

    /// Drops a tree. Its files disappear when the next checkpoint is durable
    /// (until then the durable checkpoint still names them).
    pub fn drop_tree(&self, id: u32) -> Result<()> {
        let inner = &self.inner;
        let _b = Barrier::enter(&inner.pool);
        inner.trees.write().unwrap().remove(&id).ok_or(EngineError::NoSuchTree(id))?;
        inner.pool.invalidate_tree(id);
        inner.dropped.lock().unwrap().push(id);
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
        let _one = inner.ckpt_lock.lock().unwrap();
        let latches = inner.pool.latches();
        let barrier = inner.pool.barrier_latch();
        latches.acquire(barrier, LatchMode::Exclusive);
        let n = inner.next_epoch.load(Ordering::Acquire);
        inner.running.store(n, Ordering::Release);
        inner.next_epoch.store(n + 1, Ordering::Release);
        let trees: Vec<Arc<TreeMeta>> = inner.trees.read().unwrap().values().cloned().collect();
        let dropped: Vec<u32> = inner.dropped.lock().unwrap().clone();
        for t in &trees {
            let mut f = t.file.lock().unwrap();
            let free_at_start = f.pages.iter().map(|e| e.free).collect();
            let npages = f.pages.len() as u32;
            f.ckpt = Some(CkptInfo { number: n, npages, root: t.root.load(Ordering::Acquire), free_at_start });
            for e in &mut f.pages {
                e.image = None;
            }
        }
        at_start();
        latches.release(barrier, LatchMode::Exclusive);

        let result = self.write_checkpoint(n, redo, &trees);
        inner.running.store(0, Ordering::Release);
        match result {
            Ok(()) => {
                inner.durable.store(n, Ordering::Release);
                for t in &trees {
                    let mut f = t.file.lock().unwrap();
                    f.checkpoint_done(n);
                    if let Some(end) = f.space.trim() {
                        let path = f.path.clone();
                        inner.io.set_len(&path, end as u64 * UNIT as u64).map_err(|e| EngineError::io("truncate", &path, e))?;
                    }
                }
                self.remove_old_files(n, &dropped)?;
                Ok(n)
            }
            Err(e) => {
                for t in &trees {
                    t.file.lock().unwrap().checkpoint_failed();
                }
                Err(e)
            }
        }
    }

    fn write_checkpoint(&self, n: u64, redo: u64, trees: &[Arc<TreeMeta>]) -> Result<()> {
        let inner = &*self.inner;
        for t in trees {
            let (npages, free_at_start, root) = {
                let f = t.file.lock().unwrap();
                let c = f.ckpt.as_ref().unwrap();
                (c.npages, c.free_at_start.clone(), c.root)
            };
            for p in 0..npages {
                if free_at_start[p as usize] || t.file.lock().unwrap().pages[p as usize].image.is_some() {
                    continue;
                }
                if let Some(mut g) = inner.pool.lookup(t.id, p, LatchMode::Exclusive) {
                    if g.is_dirty() && g.dirty_epoch() <= n {
                        inner.write_page(t.id, p, g.data(), g.dirty_epoch())?;
                        g.clear_dirty();
                    }
                }
                let mut f = t.file.lock().unwrap();
                let ent = &mut f.pages[p as usize];
                if ent.image.is_none() {
                    ent.image = ent.cur;
                }
                if ent.image.is_none() {
                    return Err(EngineError::Damaged { tree: t.id, detail: format!("page {p} has no image for checkpoint {n}") });
                }
            }
            let (path, map) = {
                let f = t.file.lock().unwrap();
                let pages = (0..npages as usize).map(|p| if free_at_start[p] { None } else { f.pages[p].image }).collect();
                (f.path.clone(), TreeMap { checkpoint: n, root, compress: t.compress.load(Ordering::Relaxed), pages })
            };
            inner.io.sync(&path).map_err(inner.ioerr("sync", &path))?;
            let map_path = inner.path(&map_name(t.id, n));
            let tmp = map_path.with_extension("map.tmp");
            inner.io.write_file(&tmp, &map.encode()).map_err(inner.ioerr("write", &tmp))?;
            inner.io.sync(&tmp).map_err(inner.ioerr("sync", &tmp))?;
            inner.io.rename(&tmp, &map_path).map_err(inner.ioerr("rename", &tmp))?;
        }
        inner.io.sync_dir(&inner.dir).map_err(inner.ioerr("sync", &inner.dir))?;
        let control = inner.path("control");
        let tmp = inner.path("control.tmp");
        inner.io.write_file(&tmp, &Control { checkpoint: n, redo }.encode()).map_err(inner.ioerr("write", &tmp))?;
        inner.io.sync(&tmp).map_err(inner.ioerr("sync", &tmp))?;
        inner.io.rename(&tmp, &control).map_err(inner.ioerr("rename", &tmp))?;
        inner.io.sync_dir(&inner.dir).map_err(inner.ioerr("sync", &inner.dir))?;
        Ok(())
    }

    /// After checkpoint `n` is durable: maps of older checkpoints and the
    /// files of trees dropped before it started are garbage.
    fn remove_old_files(&self, n: u64, dropped: &[u32]) -> Result<()> {
        let inner = &*self.inner;
        let live = inner.trees.read().unwrap();
        let names = inner.io.list(&inner.dir).map_err(inner.ioerr("list", &inner.dir))?;
        for name in names {
            let remove = match parse_map_name(&name) {
                Some((id, c)) => c < n || (dropped.contains(&id) && !live.contains_key(&id)),
                None => name.parse::<u32>().is_ok_and(|id| dropped.contains(&id) && !live.contains_key(&id)),
            };
            if remove {
                let p = inner.path(&name);
                inner.io.remove(&p).map_err(inner.ioerr("remove", &p))?;
            }
        }
        inner.dropped.lock().unwrap().retain(|id| !dropped.contains(id));
        Ok(())
    }
}

impl Tree {
    pub fn id(&self) -> u32 {
        self.meta.id
    }

    pub(crate) fn cmp(&self) -> Arc<dyn KeyCmp> {
        self.meta.cmp.read().unwrap().clone()
    }

    /// Changes the compression level for pages written from now on.
    pub fn set_compress(&self, level: i32) -> Result<()> {
        self.meta.compress.store(check_level(level)?, Ordering::Relaxed);
        Ok(())
    }

    pub fn compress(&self) -> i32 {
        self.meta.compress.load(Ordering::Relaxed)
    }

    /// Statistics for monitoring: pages, resident/dirty buffers, file bytes.
    pub fn stats(&self) -> TreeStats {
        let (resident, dirty) = self.inner.pool.resident(self.meta.id);
        let f = self.meta.file.lock().unwrap();
        TreeStats {
            pages: f.pages.iter().filter(|e| !e.free).count() as u64,
            resident_pages: resident as u64,
            dirty_pages: dirty as u64,
            file_bytes: f.space.end as u64 * UNIT as u64,
            free_bytes: f.space.free_units() * UNIT as u64,
        }
    }

    pub(crate) fn page_count(&self) -> u32 {
        self.meta.file.lock().unwrap().pages.len() as u32
    }

    pub(crate) fn is_free(&self, p: u32) -> bool {
        self.meta.file.lock().unwrap().pages[p as usize].free
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
const _: () = assert!(PAGE_SIZE % UNIT == 0);
