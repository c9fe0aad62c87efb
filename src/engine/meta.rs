//! Engine metadata in one memory region, so every process of the server
//! sees the same trees: a directory of tree slots, each tree's page table
//! and free-unit bitmap, and the checkpoint epochs.
//!
//! ```text
//! header (128 B) | slots (max_trees x 1152 B) | chunk arena (nchunks x 8 KB)
//! ```
//! A slot is the `Slot` fields (128 B) and the tree's table of room left in
//! recently closed row-id blocks (`ROOMS` x 8 B, see `TreeFileGuard::alloc_near`).
//! Page tables and bitmaps live in 8 KB chunks from the arena, reached
//! through one directory chunk each (so a tree has up to 2048 x 409 pages
//! and its data file up to 2048 x 65536 units = 64 GB). While a tree's page
//! table (or bitmap) fits one chunk, the slot references that chunk directly
//! (`DIRECT`) and no directory chunk exists, so a small tree costs 2 chunks;
//! the directory is made, with the direct chunk as its entry 0, when a
//! second chunk is needed.
//!
//! Latches (in the region's own `LatchSet`): tree slot `i` has its file latch
//! `2i` (page table, bitmap, counters) and root latch `2i + 1`; then the
//! directory latch, the chunk-allocator latch and the checkpoint latch.
//! Order: file latch before the chunk-allocator latch; nobody holding a file
//! latch waits for any other latch.

use crate::error::{EngineError, Result};
use crate::latch::{LatchMode, LatchSet, SpinLatches};
use crate::store::space::Extent;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

pub const CHUNK: usize = 8192;
const HEADER: usize = 128;
/// Bytes of a slot's `Slot` fields.
const SLOT_FIELDS: usize = 168;
/// Units of a raw page image, the size most writes allocate (`fit_hint`).
const FIT_UNITS: u32 = (crate::page::PAGE_SIZE / crate::store::image::UNIT) as u32;
/// Entries of a slot's room table: block `b`'s entry is `b % ROOMS`.
const ROOMS: usize = 128;
const SLOT: usize = SLOT_FIELDS + ROOMS * 8;
const MAGIC: u64 = u64::from_le_bytes(*b"ORDMETA2");
const NIL: u32 = u32::MAX;
const ENTRY: usize = 20;
const ENTRIES_PER_CHUNK: usize = CHUNK / ENTRY;
const DIR_ENTRIES: usize = CHUNK / 4;
const UNITS_PER_CHUNK: usize = CHUNK * 8;
/// Set in a slot's `pt_dir`/`bm_dir` when the reference names leaf chunk 0
/// itself rather than a directory chunk (references store chunk + 1, so the
/// arena must have fewer than `DIRECT - 1` chunks).
const DIRECT: u32 = 1 << 31;

pub(crate) const SLOT_FREE: u32 = 0;
pub(crate) const SLOT_LIVE: u32 = 1;
pub(crate) const SLOT_DROPPED: u32 = 2;
/// A tree whose files failed validation when the engine loaded them: the
/// slot holds its id and a tree number but no page table, nothing of it is
/// in the pool, its files are never changed, and each checkpoint copies its
/// map file forward unchanged, so the damage (and any repair) survives.
pub(crate) const SLOT_DAMAGED: u32 = 3;
/// Set in a slot's `holders` while its tree is being evicted: no handle
/// can be made on it meanwhile (`residency`).
pub(crate) const EVICTING: u32 = 1 << 31;

const E_FREE: u16 = 1;
const E_FREE_AT_START: u16 = 2;

#[repr(C)]
struct Header {
    magic: u64,
    max_trees: u64,
    nchunks: u64,
    /// Next never-used chunk, then a free list through freed chunks
    /// (both under the chunk latch).
    chunk_next: AtomicU32,
    chunk_free: AtomicU32,
    /// 0 until some process loaded the durable checkpoint from disk.
    loaded: AtomicU32,
    /// Source of tree numbers (the page pool's tag for a tree); never reused
    /// while the server runs, so no stale buffer can match a new tree.
    tree_counter: AtomicU32,
    pub running: AtomicU64,
    pub next_epoch: AtomicU64,
    pub durable: AtomicU64,
    /// Redo point of the durable checkpoint (where replay starts).
    pub redo: AtomicU64,
    /// Counts handle openings, for the slots' `touched`.
    pub clock: AtomicU32,
    /// Bumped before any data file is removed, so processes drop cached
    /// handles that might name a deleted file.
    pub unlinks: AtomicU64,
    /// Nonzero once an fsync of an engine file failed: from then on no
    /// checkpoint and no data-file write succeeds (`EngineError::SyncPoisoned`)
    /// until the region is formatted again (a server restart).
    pub sync_failed: AtomicU64,
}

/// One tree. Invariants: `id`/`state` change only under the directory
/// latch; the plain fields change only under the slot's file latch; a
/// checkpoint's fields (`ck_*`) are set at its start and cleared at its end.
#[repr(C)]
pub(crate) struct Slot {
    pub db: AtomicU32,
    pub num: AtomicU32,
    pub id: AtomicU32,
    pub state: AtomicU32,
    pub root: AtomicU32,
    pub compress: AtomicI32,
    /// Epoch at which a DROPPED tree was dropped.
    pub dropped_at: AtomicU64,
    /// Row versions superseded (updated or deleted) since a background
    /// sweep last pruned the whole tree, the transaction that superseded
    /// one last, and the relation the table AM named then (to lock it):
    /// `Tree::note_superseded`, `Engine::superseded_trees`.
    pub superseded: AtomicU64,
    pub superseded_xid: AtomicU32,
    pub superseded_rel: AtomicU32,
    /// Tree handles on this slot in every process (`Tree`'s hold), or
    /// [`EVICTING`]: a tree with handles is never evicted.
    pub holders: AtomicU32,
    /// When a handle was last made on it (the header's clock): eviction
    /// takes the least recently opened trees first.
    pub touched: AtomicU32,
    npages: u32,
    /// Entries below `npages` that are free (on the free list).
    nfree: u32,
    free_head: u32,
    end_units: u32,
    free_hint: u32,
    /// No free run of [`FIT_UNITS`] or more lies wholly below this unit, and
    /// none straddles it: a whole page's image is looked for from here, so
    /// the small holes lower in the file (left between other sizes of
    /// images) are not walked past again at every page write.
    fit_hint: u32,
    /// Page table and bitmap: 0 = none, else chunk + 1 of a directory, or
    /// (with `DIRECT`) of the only leaf chunk.
    pt_dir: u32,
    bm_dir: u32,
    ck_active: u32,
    ck_npages: u32,
    ck_root: u32,
    /// Units of the current id block taken by ids packed into it (see
    /// [`BlockFill`]); `u32::MAX` when ids were handed out unpacked, so
    /// the next packed id starts a new block.
    block_used: u32,
    ck_number: u64,
    next_id: u64,
    id_limit: u64,
    ck_id_limit: u64,
    /// The tree's durable map file (its page extents are the entries'
    /// `durable`): a checkpoint that would write the same map keeps it.
    map: MapHead,
}

/// What a tree's durable map file says besides its page extents, and which
/// checkpoint wrote it. Invariant: `checkpoint` is 0 while the tree has no
/// durable map (created since the durable checkpoint, or reset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct MapHead {
    pub checkpoint: u64,
    pub id_limit: u64,
    pub npages: u32,
    pub root: u32,
    pub compress: i32,
}

/// How [`TreeFileGuard::alloc_packed`] fills blocks of `per_block` row ids:
/// each block has `cap` units; an id takes `take` of them and may join a
/// non-empty block only while `need` (>= `take`) are left. The table AM
/// derives the units from heap's page-fill rules, so rows get the TIDs
/// heap would give them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockFill {
    pub per_block: u64,
    pub cap: u32,
    pub take: u32,
    pub need: u32,
}

/// Where a page's images live. Invariants as in `docs/architecture.md`
/// ("Copy-on-write rules"): an extent named by `durable` or `image` is never
/// released; while `free`, `cur` is None and the page is on the free list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PageEntry {
    pub cur: Option<Extent>,
    pub durable: Option<Extent>,
    pub image: Option<Extent>,
    pub free: bool,
    pub free_at_start: bool,
    /// Free-list link (only meaningful while `free`).
    pub next_free: u32,
}

impl PageEntry {
    /// Whether extent `o` is still this page's (newest, durable or the
    /// running checkpoint's image): if not, nothing needs it any more.
    fn names(&self, o: Extent) -> bool {
        [self.cur, self.durable, self.image].contains(&Some(o))
    }
}

/// How many chunks a tree of `pages` pages whose file ends at unit
/// `end_units` takes when loaded: its page table and free-space bitmap,
/// each one chunk in the direct form, else a directory and its leaves.
pub(crate) fn chunks_for(pages: usize, end_units: usize) -> usize {
    let form = |n: usize, per: usize| if n <= per { 1 } else { 1 + n.div_ceil(per) };
    form(pages, ENTRIES_PER_CHUNK) + form(end_units, UNITS_PER_CHUNK)
}

/// Sizes and formats the metadata region.
pub struct MetaRegion;

impl MetaRegion {
    pub fn size(max_trees: usize, nchunks: usize) -> usize {
        HEADER + max_trees * SLOT + nchunks * CHUNK
    }
    pub fn latch_count(max_trees: usize) -> usize {
        2 * max_trees + 3
    }
    /// # Safety
    /// `base` must be 8-byte aligned, valid for `size(..)` bytes and unused.
    pub unsafe fn format(base: *mut u8, max_trees: usize, nchunks: usize) {
        assert!(
            std::mem::size_of::<Slot>() <= SLOT_FIELDS && std::mem::size_of::<Header>() <= HEADER
        );
        assert!(nchunks < (DIRECT - 1) as usize, "too many metadata chunks");
        // SAFETY: the caller guarantees exclusive access to the region.
        unsafe {
            std::ptr::write_bytes(base, 0, HEADER + max_trees * SLOT);
            let h = base as *mut Header;
            (*h).magic = MAGIC;
            (*h).max_trees = max_trees as u64;
            (*h).nchunks = nchunks as u64;
            (*h).chunk_free = AtomicU32::new(NIL);
        }
    }
}

/// The private backing of a region in tests (freed when the last handle goes).
struct Owned(*mut u8, std::alloc::Layout);
// SAFETY: the memory is only reached through `Meta`, which synchronises.
unsafe impl Send for Owned {}
// SAFETY: as above.
unsafe impl Sync for Owned {}
impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `Meta::private`.
        unsafe { std::alloc::dealloc(self.0, self.1) }
    }
}

/// A process's handle on the metadata region. Invariant: `base` is a region
/// formatted for `max_trees`/`nchunks` that outlives the handle; `latches`
/// are the same for every process.
#[derive(Clone)]
pub(crate) struct Meta {
    base: *mut u8,
    max_trees: usize,
    pub(crate) nchunks: usize,
    latches: Arc<dyn LatchSet>,
    _owned: Option<Arc<Owned>>,
}

// SAFETY: shared state is atomics or guarded by latches.
unsafe impl Send for Meta {}
// SAFETY: as above.
unsafe impl Sync for Meta {}

impl Meta {
    pub fn private(max_trees: usize, nchunks: usize) -> Meta {
        // Alignment 16 lets the allocator hand out lazily zeroed pages (calloc);
        // a larger alignment would memset the whole arena up front.
        let layout =
            std::alloc::Layout::from_size_align(MetaRegion::size(max_trees, nchunks), 16).unwrap();
        // SAFETY: non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!base.is_null(), "out of memory for engine metadata");
        // SAFETY: fresh, aligned, exclusively ours.
        unsafe { MetaRegion::format(base, max_trees, nchunks) };
        let latches = Arc::new(SpinLatches::new(MetaRegion::latch_count(max_trees)));
        // SAFETY: formatted above.
        let mut m = unsafe { Meta::attach(base, max_trees, nchunks, latches) };
        m._owned = Some(Arc::new(Owned(base, layout)));
        m
    }

    /// # Safety
    /// `base` must be formatted by [`MetaRegion::format`] with these sizes and
    /// stay mapped for the handle's life; all processes share `latches`.
    pub unsafe fn attach(
        base: *mut u8,
        max_trees: usize,
        nchunks: usize,
        latches: Arc<dyn LatchSet>,
    ) -> Meta {
        assert!(latches.len() >= MetaRegion::latch_count(max_trees));
        // SAFETY: formatted region (caller).
        let h = unsafe { &*(base as *const Header) };
        assert_eq!(h.magic, MAGIC, "engine metadata region is not formatted");
        Meta {
            base,
            max_trees,
            nchunks,
            latches,
            _owned: None,
        }
    }

    fn header(&self) -> &Header {
        // SAFETY: formatted header at base.
        unsafe { &*(self.base as *const Header) }
    }
    pub fn running(&self) -> &AtomicU64 {
        &self.header().running
    }
    pub fn next_epoch(&self) -> &AtomicU64 {
        &self.header().next_epoch
    }
    pub fn durable(&self) -> &AtomicU64 {
        &self.header().durable
    }
    pub fn redo(&self) -> &AtomicU64 {
        &self.header().redo
    }
    pub fn clock(&self) -> &AtomicU32 {
        &self.header().clock
    }

    pub fn unlinks(&self) -> &AtomicU64 {
        &self.header().unlinks
    }
    pub fn loaded(&self) -> &AtomicU32 {
        &self.header().loaded
    }
    pub fn sync_failed(&self) -> &AtomicU64 {
        &self.header().sync_failed
    }
    pub fn max_trees(&self) -> usize {
        self.max_trees
    }
    pub fn latches(&self) -> &dyn LatchSet {
        &*self.latches
    }

    pub fn slot(&self, i: usize) -> &Slot {
        assert!(i < self.max_trees);
        // SAFETY: i < max_trees; slots follow the header.
        unsafe { &*(self.base.add(HEADER + i * SLOT) as *const Slot) }
    }

    #[allow(clippy::mut_from_ref)]
    fn slot_mut(&self, i: usize) -> &mut Slot {
        // SAFETY: callers hold slot i's file latch exclusively (TreeFileGuard),
        // which is what makes the plain fields exclusively theirs.
        unsafe { &mut *(self.base.add(HEADER + i * SLOT) as *mut Slot) }
    }

    /// Slot `i`'s room table.
    #[allow(clippy::mut_from_ref)]
    fn rooms_mut(&self, i: usize) -> &mut [u64; ROOMS] {
        assert!(i < self.max_trees);
        // SAFETY: the table follows slot i's fields, 8-byte aligned (the
        // region is, and HEADER, SLOT and SLOT_FIELDS are multiples of 8);
        // callers hold slot i's file latch exclusively (TreeFileGuard).
        unsafe { &mut *(self.base.add(HEADER + i * SLOT + SLOT_FIELDS) as *mut [u64; ROOMS]) }
    }

    pub fn file_latch(i: usize) -> usize {
        2 * i
    }
    pub fn root_latch(i: usize) -> usize {
        2 * i + 1
    }
    pub fn dir_latch(&self) -> usize {
        2 * self.max_trees
    }
    fn chunk_latch(&self) -> usize {
        2 * self.max_trees + 1
    }
    pub fn ckpt_latch(&self) -> usize {
        2 * self.max_trees + 2
    }

    fn chunk(&self, c: u32) -> *mut u8 {
        assert!((c as usize) < self.nchunks);
        // SAFETY: c < nchunks; the arena follows the slots.
        unsafe {
            self.base
                .add(HEADER + self.max_trees * SLOT + c as usize * CHUNK)
        }
    }

    fn alloc_chunk(&self) -> Result<u32> {
        let h = self.header();
        self.latches
            .acquire(self.chunk_latch(), LatchMode::Exclusive);
        let free = h.chunk_free.load(Ordering::Relaxed);
        let c = if free != NIL {
            // SAFETY: a freed chunk's first 4 bytes hold the next free chunk.
            let next = unsafe { (self.chunk(free) as *const u32).read() };
            h.chunk_free.store(next, Ordering::Relaxed);
            Some(free)
        } else {
            let n = h.chunk_next.load(Ordering::Relaxed);
            ((n as usize) < self.nchunks).then(|| {
                h.chunk_next.store(n + 1, Ordering::Relaxed);
                n
            })
        };
        self.latches
            .release(self.chunk_latch(), LatchMode::Exclusive);
        let c = c.ok_or(EngineError::MetadataFull(self.nchunks))?;
        // SAFETY: the chunk is ours now.
        unsafe { std::ptr::write_bytes(self.chunk(c), 0, CHUNK) };
        Ok(c)
    }

    fn free_chunk(&self, c: u32) {
        let h = self.header();
        self.latches
            .acquire(self.chunk_latch(), LatchMode::Exclusive);
        // SAFETY: the chunk is no longer referenced; its first word links it.
        unsafe { (self.chunk(c) as *mut u32).write(h.chunk_free.load(Ordering::Relaxed)) };
        h.chunk_free.store(c, Ordering::Relaxed);
        self.latches
            .release(self.chunk_latch(), LatchMode::Exclusive);
    }

    /// Chunks of the arena in use (never-used ones and the free list aside).
    pub(crate) fn chunks_in_use(&self) -> usize {
        let h = self.header();
        self.latches
            .acquire(self.chunk_latch(), LatchMode::Exclusive);
        let mut free = 0;
        let mut c = h.chunk_free.load(Ordering::Relaxed);
        while c != NIL {
            free += 1;
            // SAFETY: a freed chunk's first 4 bytes hold the next free chunk.
            c = unsafe { (self.chunk(c) as *const u32).read() };
        }
        let used = h.chunk_next.load(Ordering::Relaxed) as usize - free;
        self.latches
            .release(self.chunk_latch(), LatchMode::Exclusive);
        used
    }

    /// Locks tree slot `i`'s file state.
    pub fn file(&self, i: usize) -> TreeFileGuard<'_> {
        self.latches
            .acquire(Self::file_latch(i), LatchMode::Exclusive);
        TreeFileGuard { meta: self, i }
    }

    /// Finds the slot holding tree `id` in `state`.
    pub fn find(&self, id: crate::TreeId, state: u32) -> Option<usize> {
        (0..self.max_trees).find(|&i| {
            let s = self.slot(i);
            s.state.load(Ordering::Acquire) == state
                && s.id.load(Ordering::Acquire) == id.rel
                && s.db.load(Ordering::Acquire) == id.db
        })
    }

    /// Finds the slot of tree number `num` (live or dropped).
    pub fn find_num(&self, num: u32) -> Option<usize> {
        (0..self.max_trees).find(|&i| {
            let s = self.slot(i);
            s.state.load(Ordering::Acquire) != SLOT_FREE && s.num.load(Ordering::Acquire) == num
        })
    }

    /// A fresh tree number.
    pub fn next_tree_number(&self) -> u32 {
        loop {
            let n = self.header().tree_counter.fetch_add(1, Ordering::AcqRel);
            if n != u32::MAX {
                return n;
            }
        }
    }

    pub fn slot_id(&self, i: usize) -> crate::TreeId {
        let s = self.slot(i);
        crate::TreeId::new(s.db.load(Ordering::Acquire), s.id.load(Ordering::Acquire))
    }
}

fn read_ext(b: &[u8], o: usize, lo: usize) -> Option<Extent> {
    let off = u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let len = u16::from_le_bytes(b[lo..lo + 2].try_into().unwrap());
    (len != 0).then_some(Extent { off, len })
}

/// Exclusive access to one tree's file state (its slot's file latch).
pub(crate) struct TreeFileGuard<'a> {
    meta: &'a Meta,
    i: usize,
}

impl Drop for TreeFileGuard<'_> {
    fn drop(&mut self) {
        self.meta
            .latches
            .release(Meta::file_latch(self.i), LatchMode::Exclusive);
    }
}

impl TreeFileGuard<'_> {
    fn s(&self) -> &mut Slot {
        self.meta.slot_mut(self.i)
    }

    /// Leaf chunk `d` of the page table or bitmap referenced by `*dir`,
    /// allocating it when `create`. Leaf 0 alone is referenced directly;
    /// a second leaf makes a directory whose entry 0 is the direct chunk
    /// (only the reference changes: the chunk and its contents stay). All
    /// of this is under the file latch, which every reader holds too, so no
    /// one sees a half-made directory. On `MetadataFull` nothing changed.
    fn leaf_chunk(
        &self,
        dir: fn(&mut Slot) -> &mut u32,
        d: usize,
        create: bool,
    ) -> Result<Option<*mut u8>> {
        if d >= DIR_ENTRIES {
            return Err(EngineError::MetadataFull(self.meta.nchunks));
        }
        let s = self.s();
        // References store chunk + 1, so 0 means "none".
        let r = *dir(s);
        if r == 0 || r & DIRECT != 0 {
            // No directory: at most leaf 0, referenced directly.
            let only = r & !DIRECT;
            if d == 0 && only != 0 {
                return Ok(Some(self.meta.chunk(only - 1)));
            }
            if !create {
                return Ok(None);
            }
            let c = self.meta.alloc_chunk()?;
            if d == 0 {
                *dir(s) = (c + 1) | DIRECT;
                return Ok(Some(self.meta.chunk(c)));
            }
            let dc = match self.meta.alloc_chunk() {
                Ok(dc) => dc,
                Err(e) => {
                    self.meta.free_chunk(c);
                    return Err(e);
                }
            };
            let dirp = self.meta.chunk(dc) as *mut u32;
            // SAFETY: 0, d < DIR_ENTRIES u32 entries of the (zeroed) new
            // directory chunk, which is ours until published below.
            unsafe {
                dirp.write(only);
                dirp.add(d).write(c + 1);
            }
            *dir(s) = dc + 1;
            return Ok(Some(self.meta.chunk(c)));
        }
        let dirp = self.meta.chunk(r - 1) as *mut u32;
        // SAFETY: d < DIR_ENTRIES entries of u32 in an 8 KB chunk.
        let slot = unsafe { dirp.add(d) };
        // SAFETY: as above.
        let mut c = unsafe { slot.read() };
        if c == 0 {
            if !create {
                return Ok(None);
            }
            c = self.meta.alloc_chunk()? + 1;
            // SAFETY: as above.
            unsafe { slot.write(c) };
        }
        Ok(Some(self.meta.chunk(c - 1)))
    }

    /// The chunks (leaves and directory) a slot reference holds.
    fn chunks_of(&self, r: u32) -> Vec<u32> {
        if r == 0 {
            return Vec::new();
        }
        if r & DIRECT != 0 {
            return vec![(r & !DIRECT) - 1];
        }
        let d = self.meta.chunk(r - 1) as *const u32;
        let mut v: Vec<u32> = (0..DIR_ENTRIES)
            // SAFETY: k < DIR_ENTRIES u32 entries in the directory chunk.
            .map(|k| unsafe { d.add(k).read() })
            .filter(|&c| c != 0)
            .map(|c| c - 1)
            .collect();
        v.push(r - 1);
        v
    }

    /// Chunks of the arena this tree holds (page table and bitmap).
    #[cfg(test)]
    pub(crate) fn chunk_count(&self) -> usize {
        let s = self.s();
        self.chunks_of(s.pt_dir).len() + self.chunks_of(s.bm_dir).len()
    }

    // The file latch (held for this guard's life) makes the bytes ours.
    #[allow(clippy::mut_from_ref)]
    fn entry_bytes(&self, p: u32, create: bool) -> Result<Option<&mut [u8]>> {
        let (d, o) = (
            p as usize / ENTRIES_PER_CHUNK,
            p as usize % ENTRIES_PER_CHUNK,
        );
        Ok(self.leaf_chunk(|s| &mut s.pt_dir, d, create)?.map(|c| {
            // SAFETY: o < ENTRIES_PER_CHUNK, so the entry lies inside the chunk;
            // the file latch makes it exclusively ours.
            unsafe { std::slice::from_raw_parts_mut(c.add(o * ENTRY), ENTRY) }
        }))
    }

    pub fn npages(&self) -> u32 {
        self.s().npages
    }

    /// Pages in use: `npages` counts every entry ever pushed, and a tree
    /// that once grew (a burst of dead versions) keeps its entries.
    pub fn live_pages(&self) -> u32 {
        self.s().npages - self.s().nfree
    }

    pub fn entry(&self, p: u32) -> PageEntry {
        assert!(p < self.npages(), "page {p} beyond the tree");
        let b = self
            .entry_bytes(p, false)
            .ok()
            .flatten()
            .expect("page table chunk");
        let flags = u16::from_le_bytes([b[18], b[19]]);
        PageEntry {
            cur: read_ext(b, 0, 12),
            durable: read_ext(b, 4, 14),
            image: read_ext(b, 8, 16),
            free: flags & E_FREE != 0,
            free_at_start: flags & E_FREE_AT_START != 0,
            next_free: if flags & E_FREE != 0 {
                u32::from_le_bytes(b[0..4].try_into().unwrap())
            } else {
                NIL
            },
        }
    }

    pub fn set_entry(&self, p: u32, e: &PageEntry) {
        let b = self
            .entry_bytes(p, false)
            .ok()
            .flatten()
            .expect("page table chunk");
        let put = |b: &mut [u8], o: usize, lo: usize, x: Option<Extent>| {
            let (off, len) = x.map_or((0, 0), |x| (x.off, x.len));
            b[o..o + 4].copy_from_slice(&off.to_le_bytes());
            b[lo..lo + 2].copy_from_slice(&len.to_le_bytes());
        };
        debug_assert!(!(e.free && e.cur.is_some()));
        put(b, 0, 12, e.cur);
        if e.free {
            b[0..4].copy_from_slice(&e.next_free.to_le_bytes());
        }
        put(b, 4, 14, e.durable);
        put(b, 8, 16, e.image);
        let flags =
            if e.free { E_FREE } else { 0 } | if e.free_at_start { E_FREE_AT_START } else { 0 };
        b[18..20].copy_from_slice(&flags.to_le_bytes());
    }

    fn update(&self, p: u32, f: impl FnOnce(&mut PageEntry)) {
        let mut e = self.entry(p);
        f(&mut e);
        self.set_entry(p, &e);
    }

    /// Appends a page entry (not free).
    fn push_page(&self) -> Result<u32> {
        let p = self.s().npages;
        if p == u32::MAX - 1 {
            return Err(EngineError::MetadataFull(self.meta.nchunks));
        }
        self.entry_bytes(p, true)?.unwrap().fill(0);
        self.s().npages = p + 1;
        Ok(p)
    }

    pub fn alloc_page(&self) -> Result<u32> {
        let head = self.s().free_head;
        if head != NIL && self.s().npages > 0 && head < self.s().npages {
            let e = self.entry(head);
            if e.free {
                self.s().free_head = e.next_free;
                self.s().nfree -= 1;
                self.update(head, |e| {
                    e.free = false;
                    e.next_free = NIL;
                });
                return Ok(head);
            }
        }
        self.push_page()
    }

    // ---- free-unit bitmap -------------------------------------------------

    fn bit_word(&self, unit: u32, create: bool) -> Result<Option<*mut u64>> {
        let (d, o) = (
            unit as usize / UNITS_PER_CHUNK,
            unit as usize % UNITS_PER_CHUNK,
        );
        Ok(self.leaf_chunk(|s| &mut s.bm_dir, d, create)?.map(|c| {
            // SAFETY: o / 64 < CHUNK / 8 words in the chunk.
            unsafe { (c as *mut u64).add(o / 64) }
        }))
    }

    fn is_used(&self, unit: u32) -> bool {
        match self.bit_word(unit, false).ok().flatten() {
            // SAFETY: pointer into our latched chunk.
            Some(w) => (unsafe { w.read() } & (1 << (unit % 64))) != 0,
            None => false,
        }
    }

    fn set_used(&self, e: Extent, used: bool) -> Result<()> {
        for u in e.off..e.end() {
            let w = self.bit_word(u, true)?.unwrap();
            // SAFETY: pointer into our latched chunk.
            unsafe {
                let v = w.read();
                w.write(if used {
                    v | (1 << (u % 64))
                } else {
                    v & !(1 << (u % 64))
                });
            }
        }
        Ok(())
    }

    pub fn end_units(&self) -> u32 {
        self.s().end_units
    }

    /// First fit from the lowest possibly-free unit (for a whole page's
    /// image, from `fit_hint`: the same place, found without walking the
    /// holes too small for it); grows the file if needed (a free run
    /// reaching the end of the file is extended).
    pub fn space_alloc(&self, len: u16) -> Result<Extent> {
        let end = self.s().end_units;
        let low = self.s().free_hint.min(end);
        let want = len as u32;
        let big = want >= FIT_UNITS;
        let hint = if big { low.max(self.s().fit_hint.min(end)) } else { low };
        let Fit {
            found,
            run_start,
            run,
            first_free,
        } = self.first_fit(hint, want, end)?;
        let off = match found {
            Some(off) => off,
            // A free run up to the end of the file is extended, else append.
            None if run > 0 => run_start,
            None => end,
        };
        let e = Extent {
            off,
            len: len + u16::from(want == FIT_UNITS && found.is_some() && self.lone_unit_after(off + want, end)),
        };
        if e.end() > end {
            self.s().end_units = e.end();
        }
        if hint == low {
            self.s().free_hint = first_free.unwrap_or(end).min(end);
        }
        self.set_used(e, true)?;
        if self.s().free_hint == e.off {
            self.s().free_hint = e.end();
        }
        if want == FIT_UNITS {
            // Every hole below was shorter (or this is the lowest fit); a
            // longer request may have passed holes of exactly this size.
            self.s().fit_hint = e.end();
        }
        Ok(e)
    }

    /// The bitmap walk of [`TreeFileGuard::space_alloc`] from `hint` (below
    /// which every unit is used) to `end`, a word at a time: runs of used
    /// and free units are skipped with bit counts, whole used words in a
    /// tight loop over one chunk's words (resolving the chunk per word was
    /// most of a long walk past used space).
    fn first_fit(&self, hint: u32, want: u32, end: u32) -> Result<Fit> {
        let mut fit = Fit {
            found: None,
            run_start: hint,
            run: 0,
            first_free: None,
        };
        let last_word = end.div_ceil(64);
        let words_per_chunk = (UNITS_PER_CHUNK / 64) as u32;
        let mut wi = hint / 64;
        while wi < last_word {
            let d = (wi / words_per_chunk) as usize;
            let first = d as u32 * words_per_chunk;
            let stop = (first + words_per_chunk).min(last_word);
            // SAFETY: a leaf chunk of our latched bitmap: CHUNK / 8 words.
            let words = self
                .leaf_chunk(|s| &mut s.bm_dir, d, false)?
                .map(|c| unsafe { std::slice::from_raw_parts(c as *const u64, CHUNK / 8) });
            while wi < stop {
                if let (0, Some(ws)) = (fit.run, words) {
                    // A word of used units ends any run: skip them.
                    while wi < stop && wi * 64 >= hint && ws[(wi - first) as usize] == u64::MAX {
                        wi += 1;
                    }
                    if wi == stop {
                        break;
                    }
                }
                let base = wi * 64;
                let mut w = words.map_or(0, |ws| ws[(wi - first) as usize]);
                wi += 1;
                if base < hint {
                    // Below the hint everything is in use (the hint's invariant).
                    w |= (1u64 << (hint - base)) - 1;
                }
                if fit.word(w, base, want) {
                    return Ok(fit);
                }
            }
        }
        Ok(fit)
    }

    /// Whether `unit` is a free unit on its own, inside the file, after a
    /// page-sized fit: the extent then takes it too (the image is padded),
    /// so a hole of 17 units — a raw image as earlier builds wrote it —
    /// leaves no 1-unit fragment that no image fits and every later
    /// search walks past.
    fn lone_unit_after(&self, unit: u32, end: u32) -> bool {
        unit + 1 < end
            && !self.is_used(unit)
            && self.is_used(unit + 1)
    }

    pub fn space_release(&self, e: Extent) {
        // Bits of an extent we allocated exist, so this cannot fail.
        self.set_used(e, false)
            .expect("bitmap chunk of a used extent");
        if e.off < self.s().free_hint {
            self.s().free_hint = e.off;
        }
        if e.off <= self.s().fit_hint {
            // The freed run may join free units just below it; a run wholly
            // below the hint is shorter than FIT_UNITS, so the walk back is
            // short.
            let mut start = e.off;
            while start > 0 && e.off - start < FIT_UNITS && !self.is_used(start - 1) {
                start -= 1;
            }
            self.s().fit_hint = start;
        }
    }

    /// Drops trailing free units; returns the new end if it shrank.
    pub fn space_trim(&self) -> Option<u32> {
        let old = self.s().end_units;
        let mut end = old;
        while end > 0 && !self.is_used(end - 1) {
            end -= 1;
        }
        self.s().end_units = end;
        self.s().free_hint = self.s().free_hint.min(end);
        self.s().fit_hint = self.s().fit_hint.min(end);
        (end < old).then_some(end)
    }

    pub fn free_units(&self) -> u64 {
        (0..self.s().end_units)
            .filter(|&u| !self.is_used(u))
            .count() as u64
    }

    // ---- copy-on-write rules ---------------------------------------------

    fn in_image(&self, p: u32) -> bool {
        let s = self.s();
        s.ck_active != 0 && p < s.ck_npages && !self.entry(p).free_at_start
    }

    /// Records that page `p` now lives at `e`, written from content of
    /// checkpoint epoch `epoch`.
    pub fn page_written(&self, p: u32, e: Extent, epoch: u64) {
        let in_image = self.in_image(p);
        let number = self.s().ck_number;
        let mut ent = self.entry(p);
        let old = ent.cur;
        if in_image && ent.image.is_none() {
            // Content from before the checkpoint started is its image;
            // otherwise the page was clean at the start and `old` is.
            ent.image = if epoch <= number { Some(e) } else { old };
        }
        ent.cur = Some(e);
        self.set_entry(p, &ent);
        if let Some(o) = old {
            self.release_unless_named(&ent, o);
        }
    }

    /// Frees `o` unless the durable or the running checkpoint names it;
    /// named extents are released when that checkpoint is superseded.
    fn release_unless_named(&self, ent: &PageEntry, o: Extent) {
        if !ent.names(o) {
            self.space_release(o);
        }
    }

    pub fn page_freed(&self, p: u32) {
        let in_image = self.in_image(p);
        let mut ent = self.entry(p);
        if in_image && ent.image.is_none() {
            ent.image = ent.cur;
        }
        let old = ent.cur.take();
        ent.free = true;
        ent.next_free = self.s().free_head;
        self.set_entry(p, &ent);
        self.s().free_head = p;
        self.s().nfree += 1;
        if let Some(o) = old {
            self.release_unless_named(&ent, o);
        }
    }

    /// Captures the tree for checkpoint `n`.
    pub fn checkpoint_start(&self, n: u64, root: u32) {
        let np = self.npages();
        for p in 0..np {
            self.update(p, |e| {
                e.free_at_start = e.free;
                if let Some(i) = e.image.take() {
                    debug_assert!(
                        e.cur == Some(i) || e.durable == Some(i),
                        "stale image decision"
                    );
                }
            });
        }
        let s = self.s();
        s.ck_active = 1;
        s.ck_id_limit = s.id_limit;
        s.ck_number = n;
        s.ck_npages = np;
        s.ck_root = root;
    }

    /// The tree's durable map (see [`MapHead`]).
    pub fn map_head(&self) -> MapHead {
        self.s().map
    }

    pub fn set_map_head(&self, head: MapHead) {
        self.s().map = head;
    }

    /// Whether the tree is exactly its durable map: no checkpoint running,
    /// every page's newest image the durable one, the same page count and
    /// row-id limit (the caller compares the root and level, kept outside
    /// the file state). Such a tree's metadata can be dropped and loaded
    /// again from its files.
    pub fn is_durable(&self) -> bool {
        let s = self.s();
        s.map.checkpoint != 0
            && s.ck_active == 0
            && s.npages == s.map.npages
            && s.id_limit == s.map.id_limit
            && (0..s.npages).all(|p| {
                let e = self.entry(p);
                e.cur == e.durable && e.image.is_none()
            })
    }

    /// Whether `pages` are the extents of the durable map: each page's
    /// `durable` extent, for as many pages as that map has.
    pub fn pages_are_durable(&self, pages: &[Option<Extent>]) -> bool {
        let s = self.s();
        s.map.checkpoint != 0
            && pages.len() == s.map.npages as usize
            && pages
                .iter()
                .enumerate()
                .all(|(p, e)| self.entry(p as u32).durable == *e)
    }

    pub fn checkpoint_info(&self) -> Option<(u64, u32, u32)> {
        let s = self.s();
        (s.ck_active != 0).then_some((s.ck_number, s.ck_npages, s.ck_root))
    }

    /// The row-id limit captured by the running checkpoint.
    pub fn checkpoint_id_limit(&self) -> u64 {
        self.s().ck_id_limit
    }

    /// Hands out `n` consecutive row ids. Returns (first id, new limit to
    /// log) — the limit is Some when the ids reach past the logged limit,
    /// and must be logged before any of them is used.
    pub fn alloc_ids(&self, n: u64, batch: u64) -> (u64, Option<u64>) {
        let s = self.s();
        let first = s.next_id;
        s.next_id += n;
        s.block_used = u32::MAX;
        self.limit_after(first, batch)
    }

    /// Hands out one row id packed into blocks of ids as `fill` says: it
    /// goes into the current block when that block is empty or still has
    /// `fill.need` units of room, else the next block starts with it (the
    /// ids skipped are never used). Returns as [`Self::alloc_ids`].
    pub fn alloc_packed(&self, fill: BlockFill, batch: u64) -> (u64, Option<u64>) {
        let s = self.s();
        let per = fill.per_block.max(1);
        let off = s.next_id % per;
        if off == 0 {
            s.block_used = 0;
        } else if fill.cap.saturating_sub(s.block_used) < fill.need {
            if s.block_used != u32::MAX {
                self.put_room(s.next_id / per, off, s.block_used);
            }
            s.next_id += per - off;
            s.block_used = 0;
        }
        let first = s.next_id;
        s.next_id += 1;
        s.block_used = s.block_used.saturating_add(fill.take);
        self.limit_after(first, batch)
    }

    /// Hands out one row id for a version of `take` units replacing the
    /// one with row id `near`: in `near`'s block if it still has an id and
    /// `take` units of room (the block being filled, or a block closed
    /// since this region was made whose entry in the room table survives),
    /// else as [`Self::alloc_packed`] would. The room table forgets a block
    /// when another block takes its entry, and is empty after a restart:
    /// a block it does not know is full, so no id is handed out twice.
    pub fn alloc_near(&self, near: u64, take: u32, fill: BlockFill, batch: u64) -> (u64, Option<u64>) {
        let s = self.s();
        let per = fill.per_block.max(1);
        let block = near / per;
        if block == s.next_id / per && !s.next_id.is_multiple_of(per) {
            if s.block_used != u32::MAX && fill.cap.saturating_sub(s.block_used) >= take {
                let first = s.next_id;
                s.next_id += 1;
                s.block_used += take;
                return self.limit_after(first, batch);
            }
        } else if let Some((next, used)) = self.room(block) {
            if next < per && fill.cap.saturating_sub(used) >= take {
                self.put_room(block, next + 1, used + take);
                // Below next_id, so below the logged limit.
                return (block * per + next, None);
            }
        }
        self.alloc_packed(fill, batch)
    }

    /// The room table's entry for `block`: (next unused offset, units used).
    fn room(&self, block: u64) -> Option<(u64, u32)> {
        let e = self.meta.rooms_mut(self.i)[(block % ROOMS as u64) as usize];
        (e >> 32 == block + 1).then_some(((e >> 16) & 0xFFFF, (e & 0xFFFF) as u32))
    }

    /// Records `block`'s room (replacing whatever block had its entry):
    /// entries are (block + 1) u32 | next offset u16 | units used u16, 0
    /// when empty.
    fn put_room(&self, block: u64, next: u64, used: u32) {
        let rooms = self.meta.rooms_mut(self.i);
        rooms[(block % ROOMS as u64) as usize] = if block + 1 > u32::MAX as u64 || next > 0xFFFF {
            0
        } else {
            ((block + 1) << 32) | (next << 16) | used.min(0xFFFF) as u64
        };
    }

    fn limit_after(&self, first: u64, batch: u64) -> (u64, Option<u64>) {
        let s = self.s();
        if s.next_id > s.id_limit {
            s.id_limit = s.next_id + batch;
            return (first, Some(s.id_limit));
        }
        (first, None)
    }

    /// The next row id to be handed out (every id below it may be in use).
    pub fn next_id(&self) -> u64 {
        self.s().next_id
    }

    /// Row ids below `limit` may be in use (replay, load).
    pub fn raise_id_limit(&self, limit: u64) {
        let s = self.s();
        s.id_limit = s.id_limit.max(limit);
        s.next_id = s.next_id.max(limit);
        s.block_used = u32::MAX;
    }

    pub fn is_captured(&self, p: u32) -> bool {
        self.in_image(p)
    }

    /// Sets the image of a captured page to its current image if undecided.
    pub fn decide_image(&self, p: u32) -> Option<Extent> {
        let mut e = self.entry(p);
        if e.image.is_none() {
            e.image = e.cur;
            self.set_entry(p, &e);
        }
        e.image
    }

    /// Checkpoint became durable: its images are the durable ones. Returns
    /// the extents only the superseded checkpoint named, still marked used
    /// (nobody can allocate them) so that the caller can punch them out of
    /// the file before it hands them to [`TreeFileGuard::space_release`].
    pub fn checkpoint_done(&self) -> Vec<Extent> {
        let np = self.npages();
        let mut superseded = Vec::new();
        for p in 0..np {
            let captured = self.in_image(p);
            let mut e = self.entry(p);
            let old = e.durable;
            e.durable = if captured { e.image } else { None };
            e.image = None;
            self.set_entry(p, &e);
            if let Some(o) = old.filter(|&o| !e.names(o)) {
                superseded.push(o);
            }
        }
        self.s().ck_active = 0;
        superseded
    }

    /// A running checkpoint failed: forget its image decisions, releasing
    /// extents only it named.
    pub fn checkpoint_failed(&self) {
        let np = self.npages();
        for p in 0..np {
            let mut e = self.entry(p);
            if let Some(i) = e.image.take() {
                self.set_entry(p, &e);
                self.release_unless_named(&e, i);
            }
        }
        self.s().ck_active = 0;
    }

    /// Loads a tree's durable map.
    pub fn load(&self, pages: &[Option<Extent>]) -> Result<()> {
        for ext in pages {
            let p = self.push_page()?;
            let free = ext.is_none();
            self.set_entry(
                p,
                &PageEntry {
                    cur: *ext,
                    durable: *ext,
                    image: None,
                    free,
                    free_at_start: false,
                    next_free: NIL,
                },
            );
            if let Some(e) = ext {
                if (0..e.len as u32).any(|k| self.is_used(e.off + k)) {
                    return Err(EngineError::Damaged {
                        tree: crate::TreeId::new(0, 0),
                        detail: format!("page {p} shares units with another page"),
                    });
                }
                if self.s().end_units < e.end() {
                    self.s().end_units = e.end();
                }
                self.set_used(*e, true)?;
            }
        }
        // Free list in ascending order of page number.
        let mut head = NIL;
        for p in (0..pages.len() as u32).rev() {
            if pages[p as usize].is_none() {
                self.update(p, |e| e.next_free = head);
                head = p;
                self.s().nfree += 1;
            }
        }
        self.s().free_head = head;
        Ok(())
    }

    /// Resets the slot's file state and returns its chunks to the arena.
    pub fn reset(&self) {
        let s = self.s();
        for r in [s.pt_dir, s.bm_dir] {
            for c in self.chunks_of(r) {
                self.meta.free_chunk(c);
            }
        }
        let s = self.s();
        s.npages = 0;
        s.nfree = 0;
        s.free_head = NIL;
        s.end_units = 0;
        s.free_hint = 0;
        s.fit_hint = 0;
        s.pt_dir = 0;
        s.bm_dir = 0;
        s.ck_active = 0;
        s.next_id = 0;
        s.id_limit = 0;
        s.ck_id_limit = 0;
        s.block_used = 0;
        s.map = MapHead::default();
        *self.meta.rooms_mut(self.i) = [0; ROOMS];
    }
}

/// Where [`TreeFileGuard::first_fit`] stands. Invariant: `run` free units end
/// at the walk's position and start at `run_start`; `first_free` is the
/// lowest free unit walked; `found` is set once `run` reached the request.
struct Fit {
    found: Option<u32>,
    run_start: u32,
    run: u32,
    first_free: Option<u32>,
}

impl Fit {
    /// Walks bitmap word `w` of units `base..base + 64`; true once a run
    /// of `want` free units is found.
    fn word(&mut self, w: u64, base: u32, want: u32) -> bool {
        let mut bit = 0u32;
        while bit < 64 {
            let rest = w >> bit;
            let zeros = if rest == 0 {
                64 - bit
            } else {
                rest.trailing_zeros()
            };
            if zeros > 0 {
                if self.run == 0 {
                    self.run_start = base + bit;
                }
                self.first_free.get_or_insert(base + bit);
                self.run += zeros;
                if self.run >= want {
                    self.found = Some(self.run_start);
                    return true;
                }
                bit += zeros;
                if bit >= 64 {
                    break;
                }
            }
            // A used unit at `bit`: skip the used run.
            bit += (!(w >> bit)).trailing_zeros();
            self.run = 0;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Heap-page-like blocks: 291 ids, 8168 units.
    fn fill(take: u32, need: u32) -> BlockFill {
        BlockFill {
            per_block: 291,
            cap: 8168,
            take,
            need,
        }
    }

    /// Packed ids fill a block while it has room, an empty block takes any
    /// id, a full block (or 291 ids) moves on to the next block, and ids
    /// handed out unpacked end the block being filled.
    #[test]
    fn packed_ids_fill_blocks_by_room() {
        let m = Meta::private(1, 8);
        let f = m.file(0);
        f.reset();
        // 140 units per id (heap: a 136-byte row and its line pointer): 58
        // ids per block, as heap puts 58 such rows on a page.
        let ids: Vec<u64> = (0..120).map(|_| f.alloc_packed(fill(140, 140), 1000).0).collect();
        assert_eq!(ids[57], 57);
        assert_eq!(ids[58], 291, "the 59th id starts block 1");
        assert_eq!(ids[116], 291 * 2, "and the 117th block 2");
        // An id larger than a block still gets an empty block of its own.
        let big = f.alloc_packed(fill(9000, 9000), 1000).0;
        assert_eq!(big, 291 * 3);
        assert_eq!(f.alloc_packed(fill(4, 4), 1000).0, 291 * 4);
        // Tiny ids: no more than 291 per block.
        let tiny: Vec<u64> = (0..400).map(|_| f.alloc_packed(fill(1, 1), 1000).0).collect();
        assert_eq!(tiny[289], 291 * 4 + 290);
        assert_eq!(tiny[290], 291 * 5);
        // Unpacked ids close the block: the next packed id starts a new one.
        let run = f.alloc_ids(3, 1000).0;
        assert_eq!(f.alloc_packed(fill(1, 1), 1000).0, (run + 3).next_multiple_of(291));
        // Every id handed out is below the limit, which is logged when it
        // moves (a whole block per id here).
        let mut limit = f.s().id_limit;
        for _ in 0..20 {
            let (id, new) = f.alloc_packed(fill(8000, 8000), 100);
            limit = new.unwrap_or(limit);
            assert!(id < limit);
        }
    }

    /// A replacing version stays in its predecessor's block while that has
    /// ids and room: the block being filled, or a closed block the room
    /// table remembers; else it is placed like a new row. A block whose
    /// entry another block took counts as full.
    #[test]
    fn near_ids_stay_in_their_block_while_it_has_room() {
        let m = Meta::private(1, 8);
        let f = m.file(0);
        f.reset();
        // One 1000-unit row per block (a fillfactor reserve of 7000).
        let rows: Vec<u64> = (0..3).map(|_| f.alloc_packed(fill(1000, 8000), 1000).0).collect();
        assert_eq!(rows, vec![0, 291, 582]);
        // Replacing the row of closed block 0 and of the current block 2:
        // next offsets of their blocks (reserve does not apply).
        assert_eq!(f.alloc_near(0, 1000, fill(1000, 8000), 1000).0, 1);
        assert_eq!(f.alloc_near(582, 1000, fill(1000, 8000), 1000).0, 583);
        // Block 0 fills up: 8168 units hold 8 such versions, the 9th moves
        // to a new block like a new row.
        for i in 2..8 {
            assert_eq!(f.alloc_near(i - 1, 1000, fill(1000, 8000), 1000).0, i);
        }
        assert_eq!(f.alloc_near(7, 1000, fill(1000, 8000), 1000).0, 873);
        // Block 0 + 128 takes block 0's entry when it closes: block 0 is
        // then full for good; block 1's entry is untouched.
        while f.next_id() < 128 * 291 {
            f.alloc_packed(fill(1000, 8000), 1000);
        }
        // Block 128 is being filled; the next row closes it.
        f.alloc_packed(fill(1000, 8000), 1000);
        assert!(f.alloc_near(3, 10, fill(10, 10), 1000).0 >= 129 * 291);
        assert_eq!(f.alloc_near(291, 10, fill(10, 10), 1000).0, 292);
        // A reset region (a restart) knows no closed block.
        f.reset();
        f.raise_id_limit(5000);
        assert!(f.alloc_near(291, 10, fill(10, 10), 1000).0 >= 5000);
    }

    #[test]
    fn space_first_fit_release_merge_trim() {
        let m = Meta::private(4, 64);
        let f = m.file(0);
        f.reset();
        let a = f.space_alloc(4).unwrap();
        let b = f.space_alloc(2).unwrap();
        let c = f.space_alloc(3).unwrap();
        assert_eq!((a.off, b.off, c.off, f.end_units()), (0, 4, 6, 9));
        f.space_release(a);
        f.space_release(b);
        assert_eq!(f.free_units(), 6);
        assert_eq!(
            f.space_alloc(5).unwrap().off,
            0,
            "adjacent free runs are one run"
        );
        f.space_release(c);
        assert_eq!(
            f.space_trim(),
            Some(5),
            "the leftover unit joins the released tail"
        );
        // A run that reaches the end is extended rather than skipped.
        let d = f.space_alloc(17).unwrap();
        assert_eq!((d.off, f.end_units()), (5, 22));
    }

    /// A file three bitmap chunks long whose only page-sized hole is in the
    /// last chunk, past a shorter hole in the first: the walk crosses the
    /// chunks (and the used words) and takes the hole, not the end.
    #[test]
    fn space_alloc_finds_a_hole_chunks_away() {
        let m = Meta::private(1, 64);
        let f = m.file(0);
        f.reset();
        let per_chunk = UNITS_PER_CHUNK as u32 / FIT_UNITS;
        let all: Vec<Extent> = (0..per_chunk * 3)
            .map(|_| f.space_alloc(FIT_UNITS as u16).unwrap())
            .collect();
        assert_eq!(all.last().unwrap().end(), 3 * UNITS_PER_CHUNK as u32);
        let small = Extent { off: 64 * 5, len: 8 };
        f.space_release(small);
        let hole = all[(per_chunk * 2 + 100) as usize];
        f.space_release(hole);
        assert_eq!(f.space_alloc(FIT_UNITS as u16).unwrap(), hole);
        assert_eq!(f.space_alloc(8).unwrap(), small);
        assert_eq!(f.space_alloc(FIT_UNITS as u16).unwrap().off, 3 * UNITS_PER_CHUNK as u32);
    }

    /// The word-wise first fit against a unit-by-unit model, with random
    /// allocations and releases (including runs across words and chunks).
    #[test]
    fn space_alloc_matches_a_simple_first_fit() {
        let m = Meta::private(1, 64);
        let f = m.file(0);
        f.reset();
        let mut used: Vec<bool> = Vec::new();
        let mut live: Vec<Extent> = Vec::new();
        let mut seed = 7u64;
        let mut rnd = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut lones = 0usize;
        for step in 0..20_000 {
            if live.is_empty() || rnd(5) < 3 {
                let len = 1 + rnd(17) as u16;
                // Model: first run of `len` free units, extending past the end.
                let mut off = 0usize;
                loop {
                    if (off..off + len as usize).all(|u| !used.get(u).copied().unwrap_or(false)) {
                        break;
                    }
                    off += 1;
                }
                // A page-sized fit takes a lone free unit after it too.
                let free = |u: usize| !used.get(u).copied().unwrap_or(false);
                let inside = off + (len as usize) + 1 < used.len();
                let lone = len == 16 && inside && free(off + 16) && !free(off + 17);
                lones += usize::from(lone);
                let len = len + u16::from(lone);
                let e = f.space_alloc(len - u16::from(lone)).unwrap();
                assert_eq!((e.off as usize, e.len), (off, len), "step {step}: first fit");
                if used.len() < off + len as usize {
                    used.resize(off + len as usize, false);
                }
                used[off..off + len as usize].fill(true);
                live.push(e);
            } else {
                let e = live.swap_remove(rnd(live.len() as u64) as usize);
                f.space_release(e);
                used[e.off as usize..e.end() as usize].fill(false);
            }
            if rnd(200) == 0 {
                let trimmed = f.space_trim();
                while used.last() == Some(&false) {
                    used.pop();
                }
                assert_eq!(f.end_units() as usize, used.len(), "trim {trimmed:?}");
            }
        }
        assert!(lones > 0, "no page-sized fit took a lone unit");
    }

    #[test]
    fn page_table_spans_chunks_and_chunks_are_reused() {
        let m = Meta::private(2, 16);
        let f = m.file(0);
        f.reset();
        let n = (ENTRIES_PER_CHUNK * 3) as u32;
        for p in 0..n {
            assert_eq!(f.alloc_page().unwrap(), p);
            f.page_written(p, Extent { off: p, len: 1 }, 1);
        }
        for p in (0..n).step_by(7) {
            f.page_freed(p);
        }
        assert_eq!(f.entry(7).cur, None);
        assert_eq!(f.entry(8).cur, Some(Extent { off: 8, len: 1 }));
        // Freed pages come back before the table grows.
        let again = f.alloc_page().unwrap();
        assert!(again.is_multiple_of(7) && again < n);
        f.reset();
        drop(f);
        // All chunks returned: the same amount fits again, in another slot.
        let g = m.file(1);
        g.reset();
        for p in 0..n {
            g.alloc_page().unwrap();
            g.page_written(p, Extent { off: p, len: 1 }, 1);
        }
    }

    /// Appends page `p` at a fresh 16-unit extent, which must be `16 p`.
    fn append(f: &TreeFileGuard, p: u32) {
        assert_eq!(f.alloc_page().unwrap(), p);
        let e = f.space_alloc(16).unwrap();
        assert_eq!(
            e,
            Extent {
                off: 16 * p,
                len: 16
            }
        );
        f.page_written(p, e, 1);
    }

    #[test]
    fn small_tree_takes_two_chunks_and_directories_come_with_a_second_chunk() {
        let m = Meta::private(2, 64);
        let f = m.file(0);
        f.reset();
        append(&f, 0);
        assert_eq!((f.chunk_count(), m.chunks_in_use()), (2, 2));
        assert!(f.s().pt_dir & DIRECT != 0 && f.s().bm_dir & DIRECT != 0);
        // A full page-table chunk is still referenced directly.
        let per = ENTRIES_PER_CHUNK as u32;
        for p in 1..per {
            append(&f, p);
        }
        assert_eq!(f.chunk_count(), 2);
        let only = f.s().pt_dir & !DIRECT;
        // The second chunk brings a directory whose entry 0 is the old chunk.
        append(&f, per);
        assert_eq!(f.s().pt_dir & DIRECT, 0);
        // SAFETY: the directory chunk's first entry, under the file latch.
        let entry0 = unsafe { (m.chunk(f.s().pt_dir - 1) as *const u32).read() };
        assert_eq!(entry0, only);
        assert_eq!((f.chunk_count(), m.chunks_in_use()), (4, 4));
        // Past one bitmap chunk (65,536 units = 4096 pages of 16 units).
        let n = (UNITS_PER_CHUNK / 16) as u32 + 100;
        for p in per + 1..n {
            append(&f, p);
        }
        assert_eq!(f.s().bm_dir & DIRECT, 0);
        let pt = (n as usize).div_ceil(ENTRIES_PER_CHUNK) + 1;
        assert_eq!(f.chunk_count(), pt + 3);
        assert_eq!(m.chunks_in_use(), pt + 3);
        for p in 0..n {
            assert_eq!(
                f.entry(p).cur,
                Some(Extent {
                    off: 16 * p,
                    len: 16
                }),
                "page {p}"
            );
        }
        assert_eq!((f.end_units(), f.free_units()), (16 * n, 0));
        // Releases cross the converted bitmap's chunks.
        f.page_freed(4095);
        f.page_freed(4096);
        assert_eq!(f.free_units(), 32);
        assert_eq!(f.space_alloc(32).unwrap().off, 16 * 4095);
        f.reset();
        assert_eq!((f.chunk_count(), m.chunks_in_use()), (0, 0));
    }

    /// A conversion that runs out of chunks leaves the direct form intact
    /// and frees the leaf it had taken.
    #[test]
    fn failed_conversion_changes_nothing() {
        let m = Meta::private(1, 3);
        let f = m.file(0);
        f.reset();
        let per = ENTRIES_PER_CHUNK as u32;
        for p in 0..per {
            append(&f, p);
        }
        assert!(matches!(f.alloc_page(), Err(EngineError::MetadataFull(3))));
        assert_eq!(
            (f.npages(), f.chunk_count(), m.chunks_in_use()),
            (per, 2, 2)
        );
        assert!(f.s().pt_dir & DIRECT != 0);
        for p in 0..per {
            assert_eq!(
                f.entry(p).cur,
                Some(Extent {
                    off: 16 * p,
                    len: 16
                })
            );
        }
        f.reset();
        assert_eq!(m.chunks_in_use(), 0);
    }

    /// Loading a map whose first extent lies beyond the first bitmap chunk
    /// makes a directory with no entry 0; a later low unit fills it in.
    #[test]
    fn bitmap_can_start_beyond_its_first_chunk() {
        let m = Meta::private(1, 16);
        let f = m.file(0);
        f.reset();
        let high = Extent {
            off: 70_000,
            len: 16,
        };
        f.load(&[Some(high), None]).unwrap();
        assert_eq!(f.s().bm_dir & DIRECT, 0);
        assert_eq!(
            f.chunk_count(),
            3,
            "page table direct, bitmap directory + leaf 1"
        );
        assert_eq!(f.space_alloc(4).unwrap().off, 0);
        assert_eq!((f.chunk_count(), m.chunks_in_use()), (4, 4));
        assert!(f.is_used(70_000) && f.is_used(3) && !f.is_used(4));
        f.reset();
        assert_eq!(m.chunks_in_use(), 0);
    }

    #[test]
    fn running_out_of_chunks_is_an_error() {
        let m = Meta::private(1, 3);
        let f = m.file(0);
        f.reset();
        let mut err = None;
        for _ in 0..(ENTRIES_PER_CHUNK * 4) {
            if let Err(e) = f.alloc_page() {
                err = Some(e);
                break;
            }
        }
        assert!(matches!(err, Some(EngineError::MetadataFull(3))), "{err:?}");
    }
}
