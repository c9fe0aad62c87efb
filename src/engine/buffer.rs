//! The shared page pool: a fixed number of 8 KB buffers in one memory
//! region, a mapping from (tree, page) to buffer, pins, a latch per buffer and
//! clock-sweep eviction.
//!
//! Region layout (all offsets 64-byte aligned):
//! ```text
//! header (64 B) | descriptors (64 B each) | hash buckets (u32 each) | pages (8 KB each)
//! ```
//! Latch numbering in the [`LatchSet`]: buffer `i` is latch `i`; mapping
//! partition `j` is latch `nbuffers + j`; then the checkpoint gate and the
//! [`BARRIERS`] checkpoint barrier latches (see `engine::CheckpointBarrier`).
//!
//! Lock order: buffer latches (tree order), then mapping partitions, then
//! process-local mutexes of the store. A partition latch is never held while
//! waiting for a buffer latch.

use crate::error::{EngineError, Result};
use crate::latch::{LatchMode, LatchSet, SpinLatches};
use crate::page::{PageMut, PageRef, PAGE_SIZE};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

pub const NPART: usize = 128;
/// Checkpoint barrier latches: a modification takes one of them shared
/// (its thread's, [`Pool::barrier_latch`]), a checkpoint start all of
/// them exclusively, so writers on different cores do not all bump one
/// lock's word.
pub const BARRIERS: usize = 16;
/// The gate and the barriers.
const GLOBAL_LATCHES: usize = 1 + BARRIERS;
const REGION_MAGIC: u64 = u64::from_le_bytes(*b"ORDPOOL1");
const EMPTY: u64 = u64::MAX;
const NONE: u32 = u32::MAX;
const F_VALID: u32 = 1;
const F_DIRTY: u32 = 2;
const MAX_USAGE: u32 = 3;

/// Pool work one thread caused: pages it read from their files and pages
/// it dirtied (clean to dirty). VACUUM and ANALYZE charge them to
/// PostgreSQL's cost-based delay, as its buffer manager charges misses and
/// dirtied buffers. Invariant: both only grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCounts {
    pub read: u64,
    pub dirtied: u64,
}

thread_local! {
    static IO_COUNTS: std::cell::Cell<IoCounts> = const { std::cell::Cell::new(IoCounts { read: 0, dirtied: 0 }) };
}

/// This thread's [`IoCounts`] so far.
pub fn io_counts() -> IoCounts {
    IO_COUNTS.with(|c| c.get())
}

fn count_io(read: u64, dirtied: u64) {
    IO_COUNTS.with(|c| {
        let mut n = c.get();
        n.read += read;
        n.dirtied += dirtied;
        c.set(n);
    });
}

/// Reads and writes pages for the pool on a miss or an eviction.
pub trait PageIo: Sync {
    fn read_page(&self, tree: u32, page: u32, buf: &mut [u8]) -> Result<()>;
    fn write_page(&self, tree: u32, page: u32, buf: &[u8], epoch: u64) -> Result<()>;
}

#[repr(C)]
struct Header {
    magic: u64,
    nbuffers: u64,
    nbuckets: u64,
    clock: AtomicU64,
    /// Non-zero while a checkpoint wants or holds the barrier exclusively
    /// (it holds the gate latch meanwhile): new shared entrants wait on the
    /// gate instead of taking the barrier (see `engine::CheckpointBarrier`).
    ckpt_wants: AtomicU32,
}

/// One buffer's state. Invariants: `tag` is `EMPTY` or the (tree, page) the
/// buffer holds and is then on exactly one hash chain; `pins` counts guards;
/// a buffer with pins = 0 holds no latch; `F_DIRTY` implies `F_VALID`.
#[repr(C, align(64))]
struct Desc {
    tag: AtomicU64,
    dirty_epoch: AtomicU64,
    pins: AtomicU32,
    flags: AtomicU32,
    usage: AtomicU32,
    next: AtomicU32,
}

fn align64(x: usize) -> usize {
    x.div_ceil(64) * 64
}

/// Sizes and formats the pool's memory region (shared memory in the server).
pub struct PoolRegion;

impl PoolRegion {
    fn buckets(n: usize) -> usize {
        (n * 2).next_power_of_two()
    }
    fn offsets(n: usize) -> (usize, usize, usize, usize) {
        let desc = align64(std::mem::size_of::<Header>());
        let buckets = desc + n * std::mem::size_of::<Desc>();
        let pages = align64(buckets + Self::buckets(n) * 4);
        (desc, buckets, pages, pages + n * PAGE_SIZE)
    }
    /// Bytes of memory a pool of `nbuffers` needs (64-byte aligned base).
    pub fn size(nbuffers: usize) -> usize {
        Self::offsets(nbuffers).3
    }
    /// Latches a pool of `nbuffers` needs.
    pub fn latch_count(nbuffers: usize) -> usize {
        nbuffers + NPART + GLOBAL_LATCHES
    }
    /// Formats a fresh region.
    ///
    /// # Safety
    /// `base` must be 64-byte aligned, valid for writes of `size(nbuffers)`
    /// bytes, and not in use by any other process or thread.
    pub unsafe fn format(base: *mut u8, nbuffers: usize) {
        let (d, b, _, _) = Self::offsets(nbuffers);
        // SAFETY: the caller guarantees exclusive access to the whole region.
        unsafe {
            std::ptr::write_bytes(base, 0, d);
            let h = base as *mut Header;
            (*h).magic = REGION_MAGIC;
            (*h).nbuffers = nbuffers as u64;
            (*h).nbuckets = Self::buckets(nbuffers) as u64;
            for i in 0..nbuffers {
                let desc = base.add(d + i * std::mem::size_of::<Desc>()) as *mut Desc;
                desc.write(Desc {
                    tag: AtomicU64::new(EMPTY),
                    dirty_epoch: AtomicU64::new(0),
                    pins: AtomicU32::new(0),
                    flags: AtomicU32::new(0),
                    usage: AtomicU32::new(0),
                    next: AtomicU32::new(NONE),
                });
            }
            std::ptr::write_bytes(base.add(b), 0xFF, Self::buckets(nbuffers) * 4);
        }
    }
}

/// A process's handle on a pool region. Invariant: `base` points to a
/// region formatted for `n` buffers that outlives this handle, and `latches`
/// has at least `PoolRegion::latch_count(n)` latches shared by every user.
pub struct Pool {
    base: *mut u8,
    n: usize,
    nbuckets: usize,
    desc_off: usize,
    bucket_off: usize,
    page_off: usize,
    latches: Arc<dyn LatchSet>,
    owned: Option<Arc<OwnedRegion>>,
    /// Pins held through this handle's guards, per buffer (process-local),
    /// so a process that exits without unwinding can give them back.
    local_pins: Arc<[AtomicU32]>,
}

/// Private (non-shared-memory) backing of a pool; freed with the last handle.
struct OwnedRegion(*mut u8, std::alloc::Layout);

// SAFETY: the memory is only reached through `Pool`, which synchronises.
unsafe impl Send for OwnedRegion {}
// SAFETY: as above.
unsafe impl Sync for OwnedRegion {}

impl Drop for OwnedRegion {
    fn drop(&mut self) {
        // SAFETY: allocated in `Pool::private` with this layout; every handle
        // (and so every guard) that used it is gone.
        unsafe { std::alloc::dealloc(self.0, self.1) }
    }
}

// SAFETY: all shared state in the region is accessed through atomics or
// under latches from the shared LatchSet.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

fn tag_of(tree: u32, page: u32) -> u64 {
    ((tree as u64) << 32) | page as u64
}

impl Pool {
    /// A pool in ordinary process memory with spin latches (tests, tools).
    pub fn private(nbuffers: usize) -> Pool {
        let latches = Arc::new(SpinLatches::new(PoolRegion::latch_count(nbuffers)));
        Self::private_with(nbuffers, latches)
    }

    /// A pool in ordinary process memory with the given latches (at least
    /// `PoolRegion::latch_count(nbuffers)`), e.g. reader-preferring ones
    /// that behave like the server's LWLocks.
    pub fn private_with(nbuffers: usize, latches: Arc<dyn LatchSet>) -> Pool {
        assert!(nbuffers >= 8, "a pool needs at least 8 buffers");
        let layout = std::alloc::Layout::from_size_align(PoolRegion::size(nbuffers), 4096).unwrap();
        // SAFETY: layout has non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!base.is_null(), "out of memory for the page pool");
        // SAFETY: freshly allocated, aligned, exclusively ours.
        unsafe { PoolRegion::format(base, nbuffers) };
        // SAFETY: formatted above for nbuffers; latches sized for it.
        let mut pool = unsafe { Pool::attach(base, nbuffers, latches) };
        pool.owned = Some(Arc::new(OwnedRegion(base, layout)));
        pool
    }

    /// A second handle on the same region and latches (what another process
    /// attaching to the shared memory would get).
    pub fn another_handle(&self) -> Pool {
        Pool {
            latches: self.latches.clone(),
            owned: self.owned.clone(),
            local_pins: (0..self.n).map(|_| AtomicU32::new(0)).collect(),
            ..*self
        }
    }

    /// Gives back every pin this handle's guards still hold — for a process
    /// that is exiting without unwinding (PostgreSQL FATAL/proc_exit), whose
    /// guards will never be dropped. Latches are not touched (LWLocks are
    /// released by PostgreSQL itself).
    ///
    /// # Safety
    /// No guard of this handle may be used (or dropped) afterwards.
    pub unsafe fn release_local_pins(&self) -> usize {
        let mut released = 0;
        for (i, l) in self.local_pins.iter().enumerate() {
            let k = l.swap(0, Ordering::AcqRel);
            if k > 0 {
                self.desc(i).pins.fetch_sub(k, Ordering::AcqRel);
                released += k as usize;
            }
        }
        released
    }

    /// Attaches to a formatted region.
    ///
    /// # Safety
    /// `base` must point to a region formatted by [`PoolRegion::format`] for
    /// `nbuffers` that stays mapped for the life of the returned pool, and
    /// every process must use the same latches for it.
    pub unsafe fn attach(base: *mut u8, nbuffers: usize, latches: Arc<dyn LatchSet>) -> Pool {
        assert!(latches.len() >= PoolRegion::latch_count(nbuffers));
        // SAFETY: the caller guarantees a formatted region.
        let h = unsafe { &*(base as *const Header) };
        assert_eq!(h.magic, REGION_MAGIC, "page pool region is not formatted");
        assert_eq!(h.nbuffers as usize, nbuffers);
        let (d, b, p, _) = PoolRegion::offsets(nbuffers);
        Pool {
            base,
            n: nbuffers,
            nbuckets: h.nbuckets as usize,
            desc_off: d,
            bucket_off: b,
            page_off: p,
            latches,
            owned: None,
            local_pins: (0..nbuffers).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    pub fn nbuffers(&self) -> usize {
        self.n
    }

    pub fn latches(&self) -> &dyn LatchSet {
        &*self.latches
    }

    /// CheckpointBarrier latch `i` (below [`BARRIERS`]): together they order tree
    /// modifications against checkpoint start.
    pub fn barrier_latch(&self, i: usize) -> usize {
        debug_assert!(i < BARRIERS);
        self.n + NPART + 1 + i
    }

    /// The latch a checkpoint holds exclusively while it wants or holds the
    /// barriers; entrants that see [`Self::checkpoint_wants`] wait on it.
    pub fn gate_latch(&self) -> usize {
        self.n + NPART
    }

    /// The "a checkpoint wants the barrier" flag (shared by every process).
    pub fn checkpoint_wants(&self) -> &AtomicU32 {
        &self.header().ckpt_wants
    }

    fn header(&self) -> &Header {
        // SAFETY: the region starts with a formatted header (attach checked).
        unsafe { &*(self.base as *const Header) }
    }

    fn desc(&self, i: usize) -> &Desc {
        debug_assert!(i < self.n);
        // SAFETY: i < n and descriptors were written by format().
        unsafe {
            &*(self
                .base
                .add(self.desc_off + i * std::mem::size_of::<Desc>()) as *const Desc)
        }
    }

    fn bucket(&self, b: usize) -> &AtomicU32 {
        // SAFETY: b < nbuckets; the bucket array lies inside the region.
        unsafe { &*(self.base.add(self.bucket_off + b * 4) as *const AtomicU32) }
    }

    fn page_ptr(&self, i: usize) -> *mut u8 {
        // SAFETY: i < n; page i lies inside the region.
        unsafe { self.base.add(self.page_off + i * PAGE_SIZE) }
    }

    fn bucket_of(&self, tag: u64) -> usize {
        ((tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize) & (self.nbuckets - 1)
    }

    fn partition_latch(&self, tag: u64) -> usize {
        self.n + self.bucket_of(tag) % NPART
    }

    /// Walks a chain; the caller holds the chain's partition latch.
    fn chain_find(&self, tag: u64) -> Option<usize> {
        let mut i = self.bucket(self.bucket_of(tag)).load(Ordering::Acquire);
        while i != NONE {
            let d = self.desc(i as usize);
            if d.tag.load(Ordering::Acquire) == tag {
                return Some(i as usize);
            }
            i = d.next.load(Ordering::Acquire);
        }
        None
    }

    /// Caller holds the partition latch exclusively.
    fn chain_remove(&self, tag: u64, idx: usize) {
        let head = self.bucket(self.bucket_of(tag));
        let mut prev: Option<usize> = None;
        let mut i = head.load(Ordering::Acquire);
        while i != NONE {
            if i as usize == idx {
                let next = self.desc(idx).next.load(Ordering::Acquire);
                match prev {
                    None => head.store(next, Ordering::Release),
                    Some(p) => self.desc(p).next.store(next, Ordering::Release),
                }
                return;
            }
            prev = Some(i as usize);
            i = self.desc(i as usize).next.load(Ordering::Acquire);
        }
        debug_assert!(false, "buffer {idx} not on its chain");
    }

    /// Caller holds the partition latch exclusively.
    fn chain_push(&self, tag: u64, idx: usize) {
        let head = self.bucket(self.bucket_of(tag));
        self.desc(idx)
            .next
            .store(head.load(Ordering::Acquire), Ordering::Release);
        head.store(idx as u32, Ordering::Release);
    }

    /// Pins the buffer holding `tag`, if it is mapped.
    fn pin_mapped(&self, tag: u64) -> Option<usize> {
        let part = self.partition_latch(tag);
        self.latches.acquire(part, LatchMode::Shared);
        let found = self.chain_find(tag);
        if let Some(i) = found {
            self.desc(i).pins.fetch_add(1, Ordering::AcqRel);
        }
        self.latches.release(part, LatchMode::Shared);
        found
    }

    fn touch(&self, i: usize) {
        let d = self.desc(i);
        if d.usage.load(Ordering::Relaxed) < MAX_USAGE {
            d.usage.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn guard(&self, i: usize, tag: u64, mode: LatchMode) -> PageGuard<'_> {
        self.local_pins[i].fetch_add(1, Ordering::Relaxed);
        PageGuard {
            pool: self,
            idx: i,
            mode,
            tree: (tag >> 32) as u32,
            page: tag as u32,
        }
    }

    /// Latches a pinned buffer and checks it still holds a valid `tag`;
    /// otherwise drops the pin and returns None.
    fn latch_pinned(&self, i: usize, tag: u64, mode: LatchMode) -> Option<PageGuard<'_>> {
        self.latches.acquire(i, mode);
        let d = self.desc(i);
        if d.tag.load(Ordering::Acquire) == tag && d.flags.load(Ordering::Acquire) & F_VALID != 0 {
            self.touch(i);
            return Some(self.guard(i, tag, mode));
        }
        self.latches.release(i, mode);
        d.pins.fetch_sub(1, Ordering::AcqRel);
        None
    }

    /// The page latched in `mode`, read in through `io` on a miss.
    pub fn fetch(
        &self,
        io: &dyn PageIo,
        tree: u32,
        page: u32,
        mode: LatchMode,
    ) -> Result<PageGuard<'_>> {
        self.fetch_inner(io, tree, page, mode, false)
    }

    /// A page that is about to be formatted by the caller: latched
    /// exclusively, not read from disk.
    pub fn fetch_new(&self, io: &dyn PageIo, tree: u32, page: u32) -> Result<PageGuard<'_>> {
        self.fetch_inner(io, tree, page, LatchMode::Exclusive, true)
    }

    /// The page if it is resident, latched in `mode`; never reads or evicts.
    pub fn lookup(&self, tree: u32, page: u32, mode: LatchMode) -> Option<PageGuard<'_>> {
        let tag = tag_of(tree, page);
        let i = self.pin_mapped(tag)?;
        self.latch_pinned(i, tag, mode)
    }

    fn fetch_inner(
        &self,
        io: &dyn PageIo,
        tree: u32,
        page: u32,
        mode: LatchMode,
        fresh: bool,
    ) -> Result<PageGuard<'_>> {
        let tag = tag_of(tree, page);
        loop {
            if let Some(i) = self.pin_mapped(tag) {
                match self.latch_pinned(i, tag, mode) {
                    Some(g) => return Ok(g),
                    None => {
                        std::thread::yield_now();
                        continue;
                    }
                }
            }
            let v = self.claim_victim(io)?;
            let d = self.desc(v);
            // Nobody else can reach an unmapped, claimed buffer: this never waits.
            self.latches.acquire(v, LatchMode::Exclusive);
            let part = self.partition_latch(tag);
            self.latches.acquire(part, LatchMode::Exclusive);
            if self.chain_find(tag).is_some() {
                // Someone mapped the page meanwhile: give the buffer back.
                self.latches.release(part, LatchMode::Exclusive);
                self.latches.release(v, LatchMode::Exclusive);
                d.pins.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            d.flags.store(0, Ordering::Release);
            d.usage.store(1, Ordering::Relaxed);
            d.tag.store(tag, Ordering::Release);
            self.chain_push(tag, v);
            self.latches.release(part, LatchMode::Exclusive);
            let loaded = if fresh {
                Ok(())
            } else {
                // SAFETY: we hold the buffer's exclusive latch.
                let buf = unsafe { std::slice::from_raw_parts_mut(self.page_ptr(v), PAGE_SIZE) };
                io.read_page(tree, page, buf)
            };
            if let Err(e) = loaded {
                self.latches.acquire(part, LatchMode::Exclusive);
                self.chain_remove(tag, v);
                d.tag.store(EMPTY, Ordering::Release);
                self.latches.release(part, LatchMode::Exclusive);
                self.latches.release(v, LatchMode::Exclusive);
                // Others may have pinned it meanwhile and wait on the latch:
                // drop only our pin; they see the empty tag and retry.
                d.pins.fetch_sub(1, Ordering::AcqRel);
                return Err(e);
            }
            if !fresh {
                count_io(1, 0);
            }
            d.flags.store(F_VALID, Ordering::Release);
            if mode == LatchMode::Shared {
                // Downgrade; our pin keeps the buffer ours meanwhile.
                self.latches.release(v, LatchMode::Exclusive);
                self.latches.acquire(v, LatchMode::Shared);
            }
            return Ok(self.guard(v, tag, mode));
        }
    }

    /// Finds an unused buffer, writing out a dirty one if that is what the
    /// clock hand finds. Returns it pinned once, unmapped, tag EMPTY.
    fn claim_victim(&self, io: &dyn PageIo) -> Result<usize> {
        let mut scanned = 0usize;
        loop {
            scanned += 1;
            if scanned.is_multiple_of(4 * self.n) {
                if scanned > 256 * self.n {
                    return Err(EngineError::PoolExhausted(self.n));
                }
                std::thread::yield_now();
            }
            let i = (self.header().clock.fetch_add(1, Ordering::Relaxed) % self.n as u64) as usize;
            let d = self.desc(i);
            if d.pins.load(Ordering::Acquire) != 0 {
                continue;
            }
            let u = d.usage.load(Ordering::Relaxed);
            if u > 0 {
                let _ = d
                    .usage
                    .compare_exchange(u, u - 1, Ordering::Relaxed, Ordering::Relaxed);
                continue;
            }
            let tag = d.tag.load(Ordering::Acquire);
            if tag == EMPTY {
                if d.pins
                    .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    if d.tag.load(Ordering::Acquire) == EMPTY {
                        return Ok(i);
                    }
                    d.pins.fetch_sub(1, Ordering::AcqRel);
                }
                continue;
            }
            if d.flags.load(Ordering::Acquire) & F_DIRTY != 0 {
                self.flush(io, i, tag)?;
                continue;
            }
            if self.unmap(i, tag, true) {
                return Ok(i);
            }
        }
    }

    /// Unmaps buffer `i` if it still holds `tag`, is unpinned and (when
    /// `clean_only`) not dirty. On success the buffer is left pinned once
    /// by the caller, tag EMPTY, on no chain.
    fn unmap(&self, i: usize, tag: u64, clean_only: bool) -> bool {
        let d = self.desc(i);
        let part = self.partition_latch(tag);
        self.latches.acquire(part, LatchMode::Exclusive);
        // Pin first, then look at the dirty flag: a modifier marks the page
        // dirty before it unpins, so once our pin is in, the flag is final
        // (new pins need the partition latch we hold).
        let mut done = d.tag.load(Ordering::Acquire) == tag
            && d.pins
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
        if done && clean_only && d.flags.load(Ordering::Acquire) & F_DIRTY != 0 {
            d.pins.fetch_sub(1, Ordering::AcqRel);
            done = false;
        }
        if done {
            self.chain_remove(tag, i);
            d.tag.store(EMPTY, Ordering::Release);
            d.flags.store(0, Ordering::Release);
            d.usage.store(0, Ordering::Relaxed);
        }
        self.latches.release(part, LatchMode::Exclusive);
        done
    }

    /// Writes a dirty buffer out if nobody is using it right now.
    fn flush(&self, io: &dyn PageIo, i: usize, tag: u64) -> Result<()> {
        match self.pin_mapped(tag) {
            Some(j) if j == i => {}
            Some(j) => {
                // The page moved to another buffer meanwhile; not ours to flush.
                self.desc(j).pins.fetch_sub(1, Ordering::AcqRel);
                return Ok(());
            }
            None => return Ok(()),
        }
        let d = self.desc(i);
        let mut res = Ok(());
        if self.latches.try_acquire(i, LatchMode::Exclusive) {
            let f = d.flags.load(Ordering::Acquire);
            if d.tag.load(Ordering::Acquire) == tag && f & F_DIRTY != 0 {
                // SAFETY: exclusive latch held; the page cannot change.
                let buf = unsafe { std::slice::from_raw_parts(self.page_ptr(i), PAGE_SIZE) };
                res = io.write_page(
                    (tag >> 32) as u32,
                    tag as u32,
                    buf,
                    d.dirty_epoch.load(Ordering::Acquire),
                );
                if res.is_ok() {
                    d.flags.fetch_and(!F_DIRTY, Ordering::AcqRel);
                }
            }
            self.latches.release(i, LatchMode::Exclusive);
        }
        d.pins.fetch_sub(1, Ordering::AcqRel);
        res
    }

    /// Forgets every unpinned buffer of `tree` (after the tree is dropped).
    pub fn invalidate_tree(&self, tree: u32) {
        for i in 0..self.n {
            let d = self.desc(i);
            let tag = d.tag.load(Ordering::Acquire);
            if tag == EMPTY || (tag >> 32) as u32 != tree {
                continue;
            }
            if self.unmap(i, tag, false) {
                d.pins.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Those of `trees` with a dirty (or pinned) buffer: one pass over the
    /// pool for many trees.
    pub fn busy_among(&self, trees: &std::collections::HashSet<u32>) -> std::collections::HashSet<u32> {
        let mut busy = std::collections::HashSet::new();
        for i in 0..self.n {
            let d = self.desc(i);
            let tag = d.tag.load(Ordering::Acquire);
            let tree = (tag >> 32) as u32;
            if tag != EMPTY
                && trees.contains(&tree)
                && (d.flags.load(Ordering::Acquire) & F_DIRTY != 0
                    || d.pins.load(Ordering::Acquire) != 0)
            {
                busy.insert(tree);
            }
        }
        busy
    }

    /// Forgets every unpinned buffer of `trees` in one pass (their trees'
    /// metadata was evicted: the numbers are never used again).
    pub fn invalidate_trees(&self, trees: &std::collections::HashSet<u32>) {
        for i in 0..self.n {
            let d = self.desc(i);
            let tag = d.tag.load(Ordering::Acquire);
            if tag == EMPTY || !trees.contains(&((tag >> 32) as u32)) {
                continue;
            }
            if self.unmap(i, tag, true) {
                d.pins.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Number of buffers holding pages of `tree`, and how many are dirty.
    pub fn resident(&self, tree: u32) -> (usize, usize) {
        let (mut n, mut dirty) = (0, 0);
        for i in 0..self.n {
            let d = self.desc(i);
            let tag = d.tag.load(Ordering::Acquire);
            if tag != EMPTY && (tag >> 32) as u32 == tree {
                n += 1;
                if d.flags.load(Ordering::Acquire) & F_DIRTY != 0 {
                    dirty += 1;
                }
            }
        }
        (n, dirty)
    }
}

/// A pinned, latched buffer. Invariant: while it lives, the buffer holds
/// page (`tree`, `page`) and is latched in `mode`; dropping it unlatches and
/// unpins.
pub struct PageGuard<'a> {
    pool: &'a Pool,
    idx: usize,
    mode: LatchMode,
    pub tree: u32,
    pub page: u32,
}

impl<'a> PageGuard<'a> {
    pub fn mode(&self) -> LatchMode {
        self.mode
    }
    pub fn data(&self) -> &[u8] {
        // SAFETY: we hold a latch; writers need the exclusive latch.
        unsafe { std::slice::from_raw_parts(self.pool.page_ptr(self.idx), PAGE_SIZE) }
    }
    pub fn page(&self) -> PageRef<'_> {
        PageRef(self.data())
    }
    /// Mutable page bytes; the caller must have run the checkpoint's
    /// pre-image hook first (see `EngineProcess::before_modify`).
    pub fn page_mut(&mut self) -> PageMut<'_> {
        assert_eq!(
            self.mode,
            LatchMode::Exclusive,
            "modifying a page needs the exclusive latch"
        );
        // SAFETY: exclusive latch held, so no other reference to the bytes exists.
        PageMut(unsafe { std::slice::from_raw_parts_mut(self.pool.page_ptr(self.idx), PAGE_SIZE) })
    }
    pub fn is_dirty(&self) -> bool {
        self.pool.desc(self.idx).flags.load(Ordering::Acquire) & F_DIRTY != 0
    }
    pub fn dirty_epoch(&self) -> u64 {
        self.pool.desc(self.idx).dirty_epoch.load(Ordering::Acquire)
    }
    pub fn mark_dirty(&mut self, epoch: u64) {
        let d = self.pool.desc(self.idx);
        d.dirty_epoch.store(epoch, Ordering::Release);
        if d.flags.fetch_or(F_DIRTY, Ordering::AcqRel) & F_DIRTY == 0 {
            count_io(0, 1);
        }
    }
    pub fn clear_dirty(&mut self) {
        self.pool
            .desc(self.idx)
            .flags
            .fetch_and(!F_DIRTY, Ordering::AcqRel);
    }
}

impl Drop for PageGuard<'_> {
    fn drop(&mut self) {
        self.pool.local_pins[self.idx].fetch_sub(1, Ordering::Relaxed);
        self.pool.latches.release(self.idx, self.mode);
        self.pool.desc(self.idx).pins.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Pages are "stored" in a map; each page's first 8 bytes hold a counter.
    #[derive(Default)]
    struct MemIo {
        pages: Mutex<HashMap<(u32, u32), Vec<u8>>>,
    }
    impl PageIo for MemIo {
        fn read_page(&self, tree: u32, page: u32, buf: &mut [u8]) -> Result<()> {
            match self.pages.lock().unwrap().get(&(tree, page)) {
                Some(p) => buf.copy_from_slice(p),
                None => buf.fill(0),
            }
            Ok(())
        }
        fn write_page(&self, tree: u32, page: u32, buf: &[u8], _: u64) -> Result<()> {
            self.pages
                .lock()
                .unwrap()
                .insert((tree, page), buf.to_vec());
            Ok(())
        }
    }

    fn bump(g: &mut PageGuard) {
        let p = g.page_mut();
        let v = u64::from_le_bytes(p.0[0..8].try_into().unwrap()) + 1;
        p.0[0..8].copy_from_slice(&v.to_le_bytes());
        g.mark_dirty(1);
    }

    #[test]
    fn pages_survive_eviction_under_concurrency() {
        let pool = Pool::private(16);
        let io = MemIo::default();
        std::thread::scope(|s| {
            for t in 0..8u32 {
                let (pool, io) = (&pool, &io);
                s.spawn(move || {
                    for i in 0..3000u32 {
                        let page = (i * 7 + t) % 64;
                        let mut g = pool.fetch(io, 1, page, LatchMode::Exclusive).unwrap();
                        bump(&mut g);
                    }
                });
            }
        });
        let mut total = 0;
        for page in 0..64 {
            let g = pool.fetch(&io, 1, page, LatchMode::Shared).unwrap();
            total += u64::from_le_bytes(g.data()[0..8].try_into().unwrap());
        }
        assert_eq!(total, 8 * 3000, "an increment was lost across eviction");
    }

    #[test]
    fn reads_and_dirtied_pages_are_counted_per_thread() {
        let pool = Pool::private(8);
        let io = MemIo::default();
        let start = io_counts();
        for p in 0..4 {
            let mut g = pool.fetch(&io, 1, p, LatchMode::Exclusive).unwrap();
            bump(&mut g);
            // Dirtying a dirty page again is no new work.
            bump(&mut g);
        }
        // Resident: no read.
        drop(pool.fetch(&io, 1, 0, LatchMode::Shared).unwrap());
        // A new page is not read.
        drop(pool.fetch_new(&io, 1, 50).unwrap());
        let now = io_counts();
        assert_eq!((now.read - start.read, now.dirtied - start.dirtied), (4, 4));
        // Evicting all eight (four written back) and reading two again.
        for p in 10..20 {
            drop(pool.fetch(&io, 1, p, LatchMode::Shared).unwrap());
        }
        let mid = io_counts();
        drop(pool.fetch(&io, 1, 1, LatchMode::Shared).unwrap());
        drop(pool.fetch(&io, 1, 2, LatchMode::Shared).unwrap());
        let end = io_counts();
        assert_eq!((end.read - mid.read, end.dirtied - mid.dirtied), (2, 0));
        // Another thread's work is its own.
        std::thread::scope(|s| {
            s.spawn(|| drop(pool.fetch(&io, 1, 30, LatchMode::Shared).unwrap()));
        });
        assert_eq!(io_counts(), end);
    }

    #[test]
    fn exhausted_pool_is_an_error() {
        let pool = Pool::private(8);
        let io = MemIo::default();
        let guards: Vec<_> = (0..8)
            .map(|p| pool.fetch(&io, 1, p, LatchMode::Shared).unwrap())
            .collect();
        assert!(matches!(
            pool.fetch(&io, 1, 99, LatchMode::Shared),
            Err(EngineError::PoolExhausted(8))
        ));
        drop(guards);
        assert!(pool.fetch(&io, 1, 99, LatchMode::Shared).is_ok());
    }

    #[test]
    fn abandoned_guards_pins_can_be_given_back() {
        let pool = Pool::private(8);
        let io = MemIo::default();
        for p in 0..8 {
            let g = pool.fetch(&io, 1, p, LatchMode::Shared).unwrap();
            // What a process dying mid-operation leaves behind: a pin (the
            // latch is PostgreSQL's to release; here we release it by hand).
            pool.latches().release(g.idx, LatchMode::Shared);
            std::mem::forget(g);
        }
        assert!(matches!(
            pool.fetch(&io, 1, 99, LatchMode::Shared),
            Err(EngineError::PoolExhausted(8))
        ));
        // SAFETY: the forgotten guards are never used again.
        assert_eq!(unsafe { pool.release_local_pins() }, 8);
        assert!(pool.fetch(&io, 1, 99, LatchMode::Shared).is_ok());
        // Another handle's pins are its own.
        let other = pool.another_handle();
        let _g = other.fetch(&io, 1, 5, LatchMode::Shared).unwrap();
        // SAFETY: this handle holds no guards.
        assert_eq!(unsafe { pool.release_local_pins() }, 0);
    }

    #[test]
    fn read_errors_leave_no_mapping() {
        struct Failing;
        impl PageIo for Failing {
            fn read_page(&self, _: u32, _: u32, _: &mut [u8]) -> Result<()> {
                Err(EngineError::corrupt("x", 0, "boom"))
            }
            fn write_page(&self, _: u32, _: u32, _: &[u8], _: u64) -> Result<()> {
                Ok(())
            }
        }
        let pool = Pool::private(8);
        assert!(pool.fetch(&Failing, 1, 1, LatchMode::Shared).is_err());
        assert!(pool.lookup(1, 1, LatchMode::Shared).is_none());
        assert!(pool
            .fetch(&MemIo::default(), 1, 1, LatchMode::Shared)
            .is_ok());
    }
}
