//! Per-tree bookkeeping of where each page's images live in the data file,
//! and the copy-on-write rules that keep the durable checkpoint intact.

use crate::store::map::TreeMap;
use crate::store::space::{Extent, FreeSpace};
use std::path::PathBuf;

/// Where one page lives. Invariants: `cur` is the newest written image (None
/// for a free page or a page not written yet); `durable` is the image the
/// last durable checkpoint's map names; `image` is the image the running
/// checkpoint will name, once decided. An extent named by `durable` or
/// `image` is never released or overwritten.
#[derive(Clone, Debug, Default)]
pub(crate) struct PageEntry {
    pub cur: Option<Extent>,
    pub durable: Option<Extent>,
    pub image: Option<Extent>,
    pub free: bool,
}

/// The part of a tree a running checkpoint captures: the tree as it was at
/// the checkpoint's start.
#[derive(Clone, Debug)]
pub(crate) struct CkptInfo {
    pub number: u64,
    pub npages: u32,
    pub root: u32,
    pub free_at_start: Vec<bool>,
}

/// A tree's data file state. Invariant: every extent below `space.end` is
/// exactly one of: free in `space`, some page's `cur`/`durable`/`image`, or
/// in `retired` waiting for a checkpoint.
#[derive(Debug)]
pub(crate) struct TreeFile {
    pub path: PathBuf,
    pub pages: Vec<PageEntry>,
    pub free_pages: Vec<u32>,
    pub space: FreeSpace,
    /// (first checkpoint whose durability frees it, extent)
    pub retired: Vec<(u64, Extent)>,
    pub ckpt: Option<CkptInfo>,
}

impl TreeFile {
    pub fn empty(path: PathBuf) -> TreeFile {
        TreeFile { path, pages: Vec::new(), free_pages: Vec::new(), space: FreeSpace::default(), retired: Vec::new(), ckpt: None }
    }

    pub fn from_map(path: PathBuf, map: &TreeMap) -> TreeFile {
        let mut f = TreeFile::empty(path);
        for (p, e) in map.pages.iter().enumerate() {
            f.pages.push(PageEntry { cur: *e, durable: *e, image: None, free: e.is_none() });
            if e.is_none() {
                f.free_pages.push(p as u32);
            }
        }
        f.free_pages.reverse();
        f.space = FreeSpace::from_used(map.pages.iter().flatten().copied().collect());
        f
    }

    /// Is page `p` part of the running checkpoint's image?
    pub fn in_image(&self, p: u32) -> bool {
        self.ckpt.as_ref().is_some_and(|c| p < c.npages && !c.free_at_start[p as usize])
    }

    pub fn alloc_page(&mut self) -> u32 {
        if let Some(p) = self.free_pages.pop() {
            self.pages[p as usize].free = false;
            return p;
        }
        self.pages.push(PageEntry::default());
        (self.pages.len() - 1) as u32
    }

    /// Records that page `p` now lives at `e`, written from content that
    /// belongs to checkpoint epoch `epoch`.
    pub fn page_written(&mut self, p: u32, e: Extent, epoch: u64, next_ckpt: u64) {
        let old = self.pages[p as usize].cur;
        if self.in_image(p) && self.pages[p as usize].image.is_none() {
            let number = self.ckpt.as_ref().unwrap().number;
            // Content from before the checkpoint started is its image;
            // otherwise the page was clean at the start and `old` is.
            self.pages[p as usize].image = if epoch <= number { Some(e) } else { old };
        }
        self.pages[p as usize].cur = Some(e);
        if let Some(o) = old {
            self.retire(p, o, next_ckpt);
        }
    }

    /// Page `p` goes on the free list.
    pub fn page_freed(&mut self, p: u32, next_ckpt: u64) {
        if self.in_image(p) && self.pages[p as usize].image.is_none() {
            self.pages[p as usize].image = self.pages[p as usize].cur;
        }
        let ent = &mut self.pages[p as usize];
        ent.free = true;
        if let Some(o) = ent.cur.take() {
            self.retire(p, o, next_ckpt);
        }
        self.free_pages.push(p);
    }

    /// An extent page `p` no longer uses: free now unless a checkpoint
    /// (durable or running) still names it.
    fn retire(&mut self, p: u32, o: Extent, next_ckpt: u64) {
        let ent = &self.pages[p as usize];
        let in_durable = ent.durable == Some(o);
        let in_image = ent.image == Some(o);
        if !in_durable && !in_image {
            self.space.release(o);
            return;
        }
        let tag = match &self.ckpt {
            Some(c) if in_image => c.number + 1,
            Some(c) => c.number,
            None => next_ckpt,
        };
        self.retired.push((tag, o));
    }

    /// Checkpoint `number` became durable.
    pub fn checkpoint_done(&mut self, number: u64) {
        let Some(c) = self.ckpt.take() else { return };
        debug_assert_eq!(c.number, number);
        for (p, ent) in self.pages.iter_mut().enumerate() {
            let in_image = p < c.npages as usize && !c.free_at_start[p];
            ent.durable = if in_image { ent.image } else { None };
            ent.image = None;
        }
        let mut keep = Vec::new();
        for (tag, e) in std::mem::take(&mut self.retired) {
            if tag <= number {
                self.space.release(e);
            } else {
                keep.push((tag, e));
            }
        }
        self.retired = keep;
    }

    /// A running checkpoint failed: forget its decisions (extents it
    /// protected stay retired until a later checkpoint, which is safe).
    pub fn checkpoint_failed(&mut self) {
        self.ckpt = None;
        for ent in &mut self.pages {
            ent.image = None;
        }
    }
}
