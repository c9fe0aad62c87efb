//! Ordered cursors. A cursor copies one leaf's qualifying items at a time
//! and remembers where the next leaf's range starts (the copied leaf's high
//! key going forward, its low key going backward). Re-finding that position
//! by key rather than by page number makes the cursor immune to splits,
//! merges and page reuse between batches; no latch is held between calls.

use crate::btree::Target;
use crate::engine::Tree;
use crate::error::Result;
use crate::latch::LatchMode;
use crate::order::{compare, KeyCmp};
use crate::page::{PageRef, NO_PAGE};
use std::cmp::Ordering;
use std::ops::Bound;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Backward,
}

enum Next {
    Start,
    /// Forward: continue with keys >= this.
    From(Vec<u8>),
    /// Backward: continue with keys < this.
    Below(Vec<u8>),
    Done,
}

/// An iterator over `(key, value)` in a key range. Invariant: every key
/// returned so far lies on one side of `next`'s key, so no key is returned
/// twice and none that stayed in the tree throughout is skipped.
pub struct Cursor {
    tree: Tree,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    dir: Direction,
    /// The leaf [`Iterator::next`] hands items out of, and how many it
    /// handed out (items are copied out one by one, only when asked for:
    /// a point lookup stops after the first visible version).
    batch: Option<(Leaf, usize)>,
    next: Next,
    /// The right sibling of the leaf read last (forward walks), tried
    /// before a descent for the next leaf: a walk of a three-level tree
    /// otherwise reads the root and an inner page again for every leaf
    /// (ANALYZE's block reads spent 60% of their time in descents).
    right: u32,
}

impl Tree {
    /// A copy of the leaf whose range holds `key` (all its items): point
    /// lookups of nearby keys can be answered from it
    /// ([`Leaf::lookup`]) as a cursor's would. `hint` (a page number, or
    /// NO_PAGE), typically the right sibling of the leaf copy read before
    /// ([`Leaf::right`]), is tried first, as a forward cursor's next leaf
    /// (a walk of row ids in key order, such as VACUUM's visibility pass
    /// over a table loaded in key order, otherwise descended from the root
    /// for every leaf); then the thread's leaf hints, then a descent.
    pub fn leaf_at(&self, key: &[u8], hint: u32) -> Result<Leaf> {
        let g = match self.hinted_leaf(hint, key, LatchMode::Shared) {
            Some(g) => g,
            None => self.descend_leaf(key, LatchMode::Shared, &mut Vec::new())?,
        };
        let p = g.page();
        Ok(Leaf {
            body: Body::Page(p.0.to_vec()),
            start: 0,
            end: p.nitems(),
        })
    }

    /// Where the leaves holding keys in `lo..hi` (`hi` None: no end) begin,
    /// strictly inside that range and in key order: the range's leaves are
    /// the runs between them. See [`Tree::for_each_leaf_start`].
    pub fn leaf_starts(&self, lo: &[u8], hi: Option<&[u8]>) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.for_each_leaf_start(lo, hi, |k| out.push(k.to_vec()))?;
        Ok(out)
    }

    /// Calls `f` with each key where a leaf holding keys in `lo..hi` (`hi`
    /// None: no end) begins, strictly inside that range, in ascending
    /// order. Read from the level above the leaves (a descent per page of
    /// it) without reading a leaf; a tree of one leaf has none. Splits and
    /// merges while it runs make it a recent answer, not a snapshot:
    /// ANALYZE divides a table into sample blocks by it. The caller keeps
    /// the tree from being emptied in place (which makes the root a leaf
    /// again): ANALYZE's lock on the table conflicts with TRUNCATE's.
    pub fn for_each_leaf_start(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        mut f: impl FnMut(&[u8]),
    ) -> Result<()> {
        // Merges never lower the root, so a tree above one leaf keeps its
        // level 1 for the descents below.
        if self.fetch(self.root(), LatchMode::Shared)?.page().level() == 0 {
            return Ok(());
        }
        let cmp = self.cmp();
        let below_hi = |k: &[u8]| hi.is_none_or(|h| cmp.cmp(k, h) == Ordering::Less);
        // The last start handed out (or `lo`), and where to descend next.
        let mut after = lo.to_vec();
        let mut from = lo.to_vec();
        loop {
            let g = self.descend(Target::Key(&from), 1, LatchMode::Shared, &mut Vec::new())?;
            let p = g.page();
            // A page's first downlink starts at its low key; its first
            // item's key means nothing.
            let starts = p.low().into_iter().chain((1..p.nitems()).map(|i| p.key(i)));
            for k in starts {
                // Strictly ascending: a merge may have moved keys already
                // passed into the page reached now.
                if cmp.cmp(k, &after) == Ordering::Greater && below_hi(k) {
                    f(k);
                    after = k.to_vec();
                }
            }
            match p.high() {
                Some(h) if below_hi(h) => from = h.to_vec(),
                _ => return Ok(()),
            }
        }
    }

    pub fn range(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, dir: Direction) -> Cursor {
        Cursor {
            tree: self.clone(),
            lo,
            hi,
            dir,
            batch: None,
            next: Next::Start,
            right: NO_PAGE,
        }
    }

    pub fn scan(&self) -> Cursor {
        self.range(Bound::Unbounded, Bound::Unbounded, Direction::Forward)
    }
}

impl Cursor {
    /// Where a forward walk would look first for its next leaf: hand it
    /// to [`Cursor::resume_at`] of a cursor that starts where this one
    /// ended (ANALYZE reads consecutive blocks with one cursor each).
    pub fn right_hint(&self) -> u32 {
        self.right
    }

    /// Starts this (forward) cursor at page `pno` if that is still the
    /// leaf its first key lies in; else it descends as usual.
    pub fn resume_at(mut self, pno: u32) -> Cursor {
        self.right = pno;
        self
    }

    fn above_lo(&self, k: &[u8]) -> bool {
        let cmp = self.tree.cmp();
        match &self.lo {
            Bound::Unbounded => true,
            Bound::Included(b) => compare(cmp, k, b) != Ordering::Less,
            Bound::Excluded(b) => compare(cmp, k, b) == Ordering::Greater,
        }
    }

    fn below_hi(&self, k: &[u8]) -> bool {
        let cmp = self.tree.cmp();
        match &self.hi {
            Bound::Unbounded => true,
            Bound::Included(b) => compare(cmp, k, b) != Ordering::Greater,
            Bound::Excluded(b) => compare(cmp, k, b) == Ordering::Less,
        }
    }

    /// The next leaf's items in the cursor's range as one copy of the page
    /// (no allocation per item: loads and copies walk whole trees this
    /// way); None at the end. Do not mix with [`Iterator::next`].
    pub fn next_leaf(&mut self) -> Option<Result<Leaf>> {
        loop {
            if matches!(self.next, Next::Done) {
                return None;
            }
            match self.read_leaf() {
                Ok(Some(leaf)) => return Some(Ok(leaf)),
                Ok(None) => {}
                Err(e) => {
                    self.next = Next::Done;
                    return Some(Err(e));
                }
            }
        }
    }

    /// Reads the next leaf: a copy of it with the items in range (None
    /// when none are), and where to go on from.
    fn read_leaf(&mut self) -> Result<Option<Leaf>> {
        let cmp = self.tree.cmp();
        let next = std::mem::replace(&mut self.next, Next::Done);
        let target = match (&next, self.dir) {
            (Next::Done, _) => return Ok(None),
            (Next::Start, Direction::Forward) => match &self.lo {
                Bound::Unbounded => Target::First,
                Bound::Included(k) | Bound::Excluded(k) => Target::Key(k),
            },
            (Next::Start, Direction::Backward) => match &self.hi {
                Bound::Unbounded => Target::Last,
                Bound::Included(k) => Target::Key(k),
                Bound::Excluded(k) => Target::Before(k),
            },
            (Next::From(k), _) => Target::Key(k),
            (Next::Below(k), _) => Target::Before(k),
        };
        let hinted = match (target, self.dir) {
            (Target::Key(k), Direction::Forward) => self.tree.hinted_leaf(self.right, k, LatchMode::Shared),
            _ => None,
        };
        let g = match hinted {
            Some(g) => g,
            None => self.tree.descend(target, 0, LatchMode::Shared, &mut Vec::new())?,
        };
        let p = g.page();
        self.right = p.right();
        // The qualifying items are one run of the sorted page: bound it by
        // binary search instead of comparing every item with the bounds.
        let first_at_least = |b: &[u8]| p.search(&*cmp, b).unwrap_or_else(|i| i);
        let first_above = |b: &[u8]| p.search(&*cmp, b).map_or_else(|i| i, |i| i + 1);
        let mut start = match &self.lo {
            Bound::Unbounded => 0,
            Bound::Included(b) => first_at_least(b),
            Bound::Excluded(b) => first_above(b),
        };
        let mut end = match &self.hi {
            Bound::Unbounded => p.nitems(),
            Bound::Included(b) => first_above(b),
            Bound::Excluded(b) => first_at_least(b),
        };
        match &next {
            Next::From(b) => start = start.max(first_at_least(b)),
            Next::Below(b) => end = end.min(first_at_least(b)),
            _ => {}
        }
        let leaf = (start < end).then(|| Leaf::copy(p, start, end));
        self.next = match self.dir {
            Direction::Forward => match p.high() {
                Some(h) if self.below_hi(h) => Next::From(h.to_vec()),
                _ => Next::Done,
            },
            Direction::Backward => match p.low() {
                // Keys below `l` exist only if something >= lo is below it.
                Some(l)
                    if self.above_lo(l)
                        && !matches!(&self.lo, Bound::Included(b) if compare(cmp, l, b) == Ordering::Equal) =>
                {
                    Next::Below(l.to_vec())
                }
                _ => Next::Done,
            },
        };
        drop(g);
        Ok(leaf)
    }
}

/// A copy of a leaf's items `start..end` (the ones a cursor returns from
/// it). Invariant: `start <= end`; with [`Body::Page`] `end <=` the page's
/// item count, with [`Body::Items`] the copy holds exactly `end - start`
/// items.
pub struct Leaf {
    body: Body,
    start: usize,
    end: usize,
}

/// How a [`Leaf`] holds its items.
enum Body {
    /// The whole page (a long run, or a leaf asked for by key).
    Page(Vec<u8>),
    /// Only the run's items: key and value bytes back to back, and where
    /// each item's key and value end. A point lookup copies the few
    /// versions of one key instead of the page (and the allocator's large
    /// block path an 8 kB copy takes).
    Items { bytes: Vec<u8>, ends: Vec<(u32, u32)> },
}

/// Runs up to this many bytes of keys and values are copied item by item.
const ITEMS_COPY_MAX: usize = 2048;

impl Leaf {
    /// Copies items `start..end` of leaf `p`.
    fn copy(p: PageRef, start: usize, end: usize) -> Leaf {
        // Stops counting at the limit: a sequential scan's runs are whole
        // leaves.
        let mut size = 0;
        let long = (start..end).any(|i| {
            size += p.key(i).len() + p.value(i).len();
            size > ITEMS_COPY_MAX
        });
        if long {
            return Leaf {
                body: Body::Page(p.0.to_vec()),
                start,
                end,
            };
        }
        let mut bytes = Vec::with_capacity(size);
        let mut ends = Vec::with_capacity(end - start);
        for i in start..end {
            bytes.extend_from_slice(p.key(i));
            let k = bytes.len() as u32;
            bytes.extend_from_slice(p.value(i));
            ends.push((k, bytes.len() as u32));
        }
        Leaf {
            body: Body::Items { bytes, ends },
            start: 0,
            end: end - start,
        }
    }

    /// The right sibling of a whole-page copy when it was read (NO_PAGE
    /// for item copies, which know no page): a hint for [`Tree::leaf_at`].
    pub fn right(&self) -> u32 {
        match &self.body {
            Body::Page(page) => PageRef(page).right(),
            Body::Items { .. } => NO_PAGE,
        }
    }

    /// The items, in key order.
    pub fn items(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        (0..self.len()).map(move |n| self.item(n))
    }

    /// How many items.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether there are none (never for a cursor's leaves).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What this copy says about `key`: None if the leaf's range does not
    /// hold it, else its value then (Some(None): absent).
    pub fn lookup(&self, cmp: &dyn KeyCmp, key: &[u8]) -> Option<Option<&[u8]>> {
        // Item copies know no bounds: only a page copy answers.
        let Body::Page(page) = &self.body else {
            return None;
        };
        let p = PageRef(page);
        if p.low().is_some_and(|l| compare(cmp, key, l) == Ordering::Less)
            || p.high().is_some_and(|h| compare(cmp, key, h) != Ordering::Less)
        {
            return None;
        }
        Some(p.search(cmp, key).ok().map(|i| p.value(i)))
    }

    /// The `n`-th item in key order (`n < len()`).
    pub fn item(&self, n: usize) -> (&[u8], &[u8]) {
        match &self.body {
            Body::Page(page) => {
                let p = PageRef(page);
                (p.key(self.start + n), p.value(self.start + n))
            }
            Body::Items { bytes, ends } => {
                let from = if n == 0 { 0 } else { ends[n - 1].1 as usize };
                let (k, v) = (ends[n].0 as usize, ends[n].1 as usize);
                (&bytes[from..k], &bytes[k..v])
            }
        }
    }
}

/// A cursor read a leaf copy at a time, its items handed out borrowed (a
/// sequential scan without an allocation per row). Invariant: `taken`
/// items of `leaf` were handed out, in the cursor's direction.
pub struct LeafWalk {
    cursor: Cursor,
    leaf: Option<Leaf>,
    taken: usize,
    /// How many leaves were read so far.
    leaves: u64,
}

impl LeafWalk {
    pub fn new(cursor: Cursor) -> LeafWalk {
        LeafWalk {
            cursor,
            leaf: None,
            taken: 0,
            leaves: 0,
        }
    }

    /// The leaf items come from now: its number in the walk (1 for the
    /// first) and how many of its items the walk hands out.
    pub fn leaf(&self) -> (u64, usize) {
        (self.leaves, self.leaf.as_ref().map_or(0, Leaf::len))
    }

    /// The next item; None at the end (and on every call after it).
    pub fn next(&mut self) -> Option<Result<(&[u8], &[u8])>> {
        while self.leaf.as_ref().is_none_or(|l| self.taken >= l.len()) {
            match self.cursor.next_leaf()? {
                Ok(l) => {
                    self.leaf = Some(l);
                    self.taken = 0;
                    self.leaves += 1;
                }
                Err(e) => return Some(Err(e)),
            }
        }
        let l = self.leaf.as_ref().expect("filled above");
        let n = match self.cursor.dir {
            Direction::Forward => self.taken,
            Direction::Backward => l.len() - 1 - self.taken,
        };
        self.taken += 1;
        Some(Ok(l.item(n)))
    }

    /// The key of the item handed out last (None before the first).
    pub fn last_key(&self) -> Option<&[u8]> {
        let l = self.leaf.as_ref().filter(|_| self.taken > 0)?;
        let n = match self.cursor.dir {
            Direction::Forward => self.taken - 1,
            Direction::Backward => l.len() - self.taken,
        };
        Some(l.item(n).0)
    }
}

impl Iterator for Cursor {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((leaf, taken)) = &mut self.batch {
                if *taken < leaf.len() {
                    let n = match self.dir {
                        Direction::Forward => *taken,
                        Direction::Backward => leaf.len() - 1 - *taken,
                    };
                    *taken += 1;
                    let (k, v) = leaf.item(n);
                    return Some(Ok((k.to_vec(), v.to_vec())));
                }
            }
            self.batch = None;
            match self.next_leaf()? {
                Ok(leaf) => self.batch = Some((leaf, 0)),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
