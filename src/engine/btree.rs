//! B-link tree operations (Lehman–Yao): every page has a right link and a
//! high key, so a reader that lands on a page whose range no longer covers
//! its key moves right instead of blocking. Each page also keeps its low
//! key, so a reader holding a stale page number (the page was merged away
//! and maybe reused) notices and restarts from the root.
//!
//! Latching: readers hold one latch at a time. Writers hold the leaf, and
//! during a split the new right sibling too; the parent is latched only
//! after the children are released. A merge latches parent, then left, then
//! right. So latches are always taken top-down and left-to-right, and no
//! thread waits for a parent while holding a child.

use crate::buffer::PageGuard;
use crate::engine::{CheckpointBarrier, Tree};
use crate::error::{EngineError, Result};
use crate::latch::LatchMode;
use crate::order::compare;
use crate::page::{item_space, PageMut, PageRef, HEADER, MAX_ITEM, MAX_KEY, NO_PAGE, PAGE_SIZE};
use crate::wal::{Delta, Edit, Record};
use std::cmp::Ordering;

/// What [`Tree::modify`] does with a key after looking at its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Keep,
    Put(Vec<u8>),
    Delete,
}

/// What [`Tree::update`] inserts beside the value it changes.
/// Invariant: `key` (and `first`'s key) are absent when the update starts,
/// unless `reuse` says otherwise.
pub struct Successor<'a> {
    /// Written first (a row-id map entry: the new version is never without
    /// it), unlogged until the record that covers both.
    pub first: Option<(&'a [u8], &'a [u8])>,
    pub key: &'a [u8],
    /// Where a value's stable part starts: the successor's bytes before
    /// that offset are logged literally (a version's header, which may
    /// differ from the old value's at replay); past it, as a delta against
    /// the changed old value's bytes past its own such offset.
    pub stable: fn(&[u8]) -> usize,
    /// `key` may hold a value the tree's pruner calls replaceable: the
    /// successor replaces it, as if pruned first (a HOT-like update taking
    /// its chain's root row id back, whose map entry stays). Only on the
    /// old value's leaf: elsewhere, or over a value that is not
    /// replaceable, [`Tree::update`] changes nothing and says so.
    pub reuse: bool,
}

/// How full a sweep leaves the leaves it merges. Loose (a busy tree's):
/// a leaf with less than half a page live takes a neighbour when both fit
/// three quarters of a page, leaving room for the next changes. Tight (a
/// tree nobody writes any more): below seven eighths, into fifteen
/// sixteenths.
#[derive(Clone, Copy)]
enum Fill {
    Loose,
    Tight,
}

impl Fill {
    fn underfull(self) -> usize {
        match self {
            Fill::Loose => PAGE_SIZE / 2,
            Fill::Tight => PAGE_SIZE * 7 / 8,
        }
    }

    fn merged_at_most(self) -> usize {
        match self {
            Fill::Loose => PAGE_SIZE * 3 / 4,
            Fill::Tight => PAGE_SIZE * 15 / 16,
        }
    }

    /// The most a merge of a leaf holding `live` bytes may fill: an empty
    /// leaf goes whatever its neighbour holds. Else it stays for good
    /// beside a full sibling: a toast tree's chunks are deleted a whole
    /// value at a time, each leaving its leaves empty between full ones
    /// (400 chunks were left in 2,068 pages), and no sweep walks it.
    fn limit_for(self, live: usize) -> usize {
        if live == 0 {
            PAGE_SIZE
        } else {
            self.merged_at_most()
        }
    }
}

/// What [`Tree::merge_underfull`] did with an underfull leaf.
enum Underfull {
    /// Nothing: it stays as it is.
    Kept,
    /// Merged with a sibling.
    Merged,
    /// Took items from its right sibling; it now ends at this key.
    Shifted(Vec<u8>),
}

/// Two neighbouring leaves and their parent, latched exclusively
/// ([`Tree::latch_siblings`]). Invariant: `gl`'s right link is `gr`, and
/// item `i` of `gp` is the downlink to `gl`, `i + 1` the one to `gr`.
struct Siblings<'a> {
    gp: PageGuard<'a>,
    i: usize,
    gl: PageGuard<'a>,
    gr: PageGuard<'a>,
}

/// How [`Tree::update`] went on the old value's leaf.
enum InLeaf {
    /// Both changes made and logged.
    Done,
    /// Not here (outside the leaf, no room, no compact record): the leaf
    /// is unchanged but perhaps for a prune.
    No,
    /// A reusing successor's key holds a value that is not replaceable:
    /// the leaf is unchanged.
    Taken,
}

/// A key [`Tree::update`] wrote unlogged, deleted again (unlogged) when
/// this guard is dropped while `key` is still set.
struct Unlogged<'t> {
    tree: &'t Tree,
    key: Option<&'t [u8]>,
}

impl Drop for Unlogged<'_> {
    fn drop(&mut self) {
        if let Some(k) = self.key {
            // A failure leaves an entry that names nothing (read as gone).
            let _ = self.tree.delete_inner(k, false);
        }
    }
}

/// The decision of an insert: put `v` unless the key exists.
fn absent(cur: Option<&[u8]>, v: &[u8]) -> (Change, bool) {
    match cur {
        Some(_) => (Change::Keep, false),
        None => (Change::Put(v.to_vec()), true),
    }
}

/// How a change is logged.
#[derive(Clone, Copy)]
pub(crate) enum Log<'a> {
    /// Not at all (replay, unlogged tidying).
    No,
    /// As a put, a patch or a delete of the key.
    Yes,
    /// A put, logged as this record (which also covers what the caller
    /// wrote unlogged just before under the same barrier entry).
    As(&'a Record),
}

/// A pruner's verdict on one leaf item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prune {
    Keep,
    Remove,
    /// Another value: a shorter one (a version chain without its dead
    /// versions; unlogged trees only, before a split), or one of the same
    /// length with optional bits only (hints), which a later logged change
    /// may carry or drop.
    Replace(Vec<u8>),
}

/// Decides, when a leaf is full, which of its items nobody needs any more.
/// Runs under the leaf's exclusive latch: it must be quick and not block,
/// and never read or change the tree (see [`Tree::descend_leaf`]).
pub trait Pruner: Send + Sync {
    fn prune(&self, key: &[u8], value: &[u8]) -> Prune;

    /// Whether a successor with [`Successor::reuse`] may overwrite this
    /// value: `prune` would remove it, and the removal needs nothing else
    /// (nothing for `prune` to queue; it is then told, for its counts).
    /// Asks only: no side effects.
    fn replaceable(&self, _key: &[u8], _value: &[u8]) -> bool {
        false
    }

    /// For a value [`Pruner::replaceable`] allowed to be overwritten: the
    /// transaction id up to which snapshots could still see it (0: none
    /// could), which the update's record carries so that replay on a hot
    /// standby cancels the queries that still might.
    fn conflict_horizon(&self, _key: &[u8], _value: &[u8]) -> u32 {
        0
    }
}

/// What a descent looks for.
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    /// The page whose range holds this key.
    Key(&'a [u8]),
    /// The page holding the greatest keys below this one.
    Before(&'a [u8]),
    First,
    Last,
}

enum Cover {
    Yes,
    Right,
    Restart,
}

/// A page's items as borrowed key and value slices, in order.
type Items<'a> = [(&'a [u8], &'a [u8])];

/// A copy of a page to split: the split rewrites the page itself, so its
/// items are borrowed from this copy (one 8 kB copy, where an owned key and
/// value per item was a fifth of a re-key's time in the allocator).
fn page_copy(p: PageRef) -> Vec<u8> {
    p.0.to_vec()
}

/// Percent of a page the left half of an append split fills: room is
/// kept for the first new version of each row (a primary-key-ordered
/// table puts it beside the old one, a row-id table's chain member beside
/// its root), which is only prunable afterwards.
const APPEND_FILL: usize = 90;

/// The same for a leaf of a row-id map: its entries are nearly always
/// appended (new row ids grow; a chain taking its root's id back writes
/// none), so less room is kept — yet some, for the entries that come late:
/// an updated row's new version given a spare id in its old block (a
/// fillfactor below 100, rows of varying size), inserts whose ids were
/// handed out in one order and written in another. A full leaf would be
/// split evenly by the first of them.
const MAP_APPEND_FILL: usize = 96;

/// The fill an append split of a page at `level` aims for, given the key
/// that makes it an append.
fn append_fill(level: u16, key: &[u8]) -> usize {
    if level == 0 && crate::key_format::is_map_key(key) {
        MAP_APPEND_FILL
    } else {
        APPEND_FILL
    }
}

/// Where to split `items` (the separator is the right half's first key):
/// among the points where both halves fit with their low and high keys, the
/// one closest to an even split by bytes — or, when `fill` is given (the
/// new item is the last one of its page: ascending keys such as row ids, or
/// a key range filled in order), the one that leaves the left page closest
/// to that percentage of a page, so loading in key order packs pages
/// instead of leaving them half empty. None only if no point fits, which
/// the key and item size limits rule out.
fn split_point(
    items: &Items,
    low: Option<&[u8]>,
    high: Option<&[u8]>,
    fill: Option<usize>,
) -> Option<usize> {
    let sizes: Vec<usize> = items
        .iter()
        .map(|(k, v)| item_space(k.len(), v.len()))
        .collect();
    let total: usize = sizes.iter().sum();
    let cap = PAGE_SIZE - HEADER;
    let (low, high) = (low.map_or(0, <[u8]>::len), high.map_or(0, <[u8]>::len));
    let mut best: Option<(usize, usize)> = None;
    let mut left = 0;
    for s in 1..items.len() {
        left += sizes[s - 1];
        let sep = items[s].0.len();
        if left + low + sep <= cap && total - left + sep + high <= cap {
            let skew = match fill {
                Some(f) => left.abs_diff(cap * f / 100),
                None => (2 * left).abs_diff(total),
            };
            if best.is_none_or(|(b, _)| skew < b) {
                best = Some((skew, s));
            }
        }
    }
    best.map(|(_, s)| s)
}

// A key that fits is no item too large by itself (`apply` relies on it).
const _: () = assert!(MAX_KEY < MAX_ITEM);

/// The size limits every put checks before touching a page.
fn check_sizes(key: &[u8], val: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY {
        return Err(EngineError::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY,
        });
    }
    if key.len() + val.len() > MAX_ITEM {
        return Err(EngineError::ItemTooLarge {
            len: key.len() + val.len(),
            max: MAX_ITEM,
        });
    }
    Ok(())
}

fn child_value(c: u32) -> [u8; 4] {
    c.to_le_bytes()
}

const MAX_RESTARTS: u32 = 100_000;

/// How many recent leaves a thread remembers ([`LEAF_HINTS`]).
const LEAF_HINTS_N: usize = 6;

/// How many of a tree's remembered leaves a change tries before it
/// descends.
const LEAF_PROBES: usize = 2;

thread_local! {
    /// The leaves this thread's last descents to level 0 ended on, most
    /// recent first, as (pool identity, tree number, page): a change right
    /// after a read of the same row (UPDATE's scan, its fetch of the old
    /// row, the update itself) latches that leaf again instead of
    /// descending. More than one, because an UPDATE touches two leaves of
    /// one tree in turn (its new row-id map entry's, at the map's end, then
    /// its version's), and with one hint each evicted the other: a full
    /// descent per update. Only hints: [`Tree::descend_leaf`] checks the
    /// page's level and key range under its latch before it trusts one.
    static LEAF_HINTS: std::cell::Cell<[(usize, u32, u32); LEAF_HINTS_N]> =
        const { std::cell::Cell::new([(0, u32::MAX, NO_PAGE); LEAF_HINTS_N]) };
}

/// Row ids whose allocation is logged at once (one WAL record per batch).
const ID_BATCH: u64 = 4096;

impl Tree {
    fn covers(&self, p: PageRef, t: Target) -> Cover {
        if p.is_deleted() {
            return Cover::Restart;
        }
        let cmp = self.cmp();
        let (low, high) = (p.low(), p.high());
        match t {
            Target::Key(k) => {
                if low.is_some_and(|l| compare(cmp, k, l) == Ordering::Less) {
                    Cover::Restart
                } else if high.is_some_and(|h| compare(cmp, k, h) != Ordering::Less) {
                    Cover::Right
                } else {
                    Cover::Yes
                }
            }
            Target::Before(k) => {
                if low.is_some_and(|l| compare(cmp, l, k) != Ordering::Less) {
                    Cover::Restart
                } else if high.is_some_and(|h| compare(cmp, h, k) == Ordering::Less) {
                    Cover::Right
                } else {
                    Cover::Yes
                }
            }
            Target::First => {
                if low.is_some() {
                    Cover::Restart
                } else {
                    Cover::Yes
                }
            }
            Target::Last => {
                if high.is_some() {
                    Cover::Right
                } else {
                    Cover::Yes
                }
            }
        }
    }

    fn child_for(&self, p: PageRef, t: Target) -> u32 {
        let cmp = self.cmp();
        let i = match t {
            Target::Key(k) => p.child_index(&*cmp, k, false),
            Target::Before(k) => p.child_index(&*cmp, k, true),
            Target::First => 0,
            Target::Last => p.nitems() - 1,
        };
        p.child(i)
    }

    fn damaged(&self, detail: impl Into<String>) -> EngineError {
        EngineError::Damaged {
            tree: self.id,
            detail: detail.into(),
        }
    }

    pub(crate) fn fetch(&self, page: u32, mode: LatchMode) -> Result<PageGuard<'_>> {
        self.inner.pool.fetch(&*self.inner, self.num, page, mode)
    }

    /// Latches the page at `level` whose range covers `t`, in `mode`
    /// (pages above it are only latched shared, one at a time). `path`
    /// receives the internal pages passed through, root first.
    pub(crate) fn descend(
        &self,
        t: Target,
        level: u16,
        mode: LatchMode,
        path: &mut Vec<u32>,
    ) -> Result<PageGuard<'_>> {
        let mut restarts = 0;
        'restart: loop {
            restarts += 1;
            if restarts > MAX_RESTARTS {
                return Err(self.damaged("descent does not terminate"));
            }
            path.clear();
            let mut pno = self.root();
            let mut moves = 0u32;
            let mut expect: Option<u16> = None;
            let mut want = LatchMode::Shared;
            loop {
                let g = self.fetch(pno, if expect == Some(level) { mode } else { want })?;
                let p = g.page();
                if expect.is_none() && p.level() < level {
                    // The tree is growing a root above our target level right
                    // now: wait for that (it holds the root lock), not a spin.
                    drop(g);
                    drop(self.root_lock());
                    restarts -= 1;
                    continue 'restart;
                }
                if expect.is_some_and(|e| e != p.level()) || p.level() < level {
                    drop(g);
                    std::thread::yield_now();
                    continue 'restart;
                }
                match self.covers(p, t) {
                    Cover::Restart => {
                        drop(g);
                        std::thread::yield_now();
                        continue 'restart;
                    }
                    Cover::Right => {
                        moves += 1;
                        if moves > MAX_RESTARTS * 10 {
                            return Err(self.damaged(format!("right links loop at page {pno}")));
                        }
                        let r = p.right();
                        if r == NO_PAGE {
                            return Err(self
                                .damaged(format!("page {pno} has a high key but no right link")));
                        }
                        expect = Some(p.level());
                        pno = r;
                    }
                    Cover::Yes if p.level() == level => {
                        if g.mode() == mode {
                            if level == 0 {
                                self.note_leaf(pno);
                            }
                            return Ok(g);
                        }
                        // Reached the target level at the root with a shared latch.
                        expect = Some(level);
                        want = mode;
                    }
                    Cover::Yes => {
                        path.push(pno);
                        expect = Some(p.level() - 1);
                        pno = self.child_for(p, t);
                    }
                }
            }
        }
    }

    fn note_leaf(&self, pno: u32) {
        let e = (std::sync::Arc::as_ptr(&self.inner) as usize, self.num, pno);
        LEAF_HINTS.with(|h| {
            let mut a = h.get();
            let at = a.iter().position(|x| *x == e).unwrap_or(LEAF_HINTS_N - 1);
            a.copy_within(0..at, 1);
            a[0] = e;
            h.set(a);
        });
    }

    /// Latches the leaf covering `key` in `mode`: the leaf this thread
    /// last descended to when it still covers the key (then `path` is
    /// empty: a split finds the parent level from the root, as does a
    /// delete that leaves the leaf underfull), else by a descent.
    ///
    /// The hinted leaf is latched before its range is checked, so no tree
    /// operation may run while this thread holds a leaf latch of the same
    /// tree (a `decide` closure or a [`Pruner`] that read the tree would
    /// wait for its own latch): they only look at the value given and
    /// queue work for later, as a descent's latch order requires anyway.
    pub(crate) fn descend_leaf(
        &self,
        key: &[u8],
        mode: LatchMode,
        path: &mut Vec<u32>,
    ) -> Result<PageGuard<'_>> {
        let me = std::sync::Arc::as_ptr(&self.inner) as usize;
        let hints = LEAF_HINTS.with(|h| h.get());
        let mine = hints
            .iter()
            .filter(|&&(pool, num, pno)| pool == me && num == self.num && pno != NO_PAGE);
        for &(_, _, pno) in mine.take(LEAF_PROBES) {
            if let Some(g) = self.hinted_leaf(pno, key, mode) {
                path.clear();
                return Ok(g);
            }
        }
        self.descend(Target::Key(key), 0, mode, path)
    }

    /// Page `pno` latched in `mode` if it is a leaf covering `key`, else
    /// None. A stale number reads as a tombstone or another page, which
    /// the checks turn away; a read error is the caller's descent's to
    /// meet again. A leaf that covers the key is the one a descent would
    /// reach, whatever else happened to the page since it was noted; it
    /// becomes this thread's most recent leaf hint, as a descent's leaf
    /// does (an UPDATE driven by a walk finds its leaf from it).
    pub(crate) fn hinted_leaf(&self, pno: u32, key: &[u8], mode: LatchMode) -> Option<PageGuard<'_>> {
        if pno == NO_PAGE {
            return None;
        }
        let g = self.fetch(pno, mode).ok()?;
        let p = g.page();
        if p.level() != 0 || !matches!(self.covers(p, Target::Key(key)), Cover::Yes) {
            return None;
        }
        self.note_leaf(pno);
        Some(g)
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let g = self.descend_leaf(key, LatchMode::Shared, &mut Vec::new())?;
        let p = g.page();
        Ok(p.search(&*self.cmp(), key)
            .ok()
            .map(|i| p.value(i).to_vec()))
    }

    /// Inserts a new key; false (and no change) if it exists.
    pub fn insert(&self, key: &[u8], val: &[u8]) -> Result<bool> {
        self.write(key, val, Some(false))
    }

    /// Replaces the value of an existing key; false if it does not exist.
    pub fn replace(&self, key: &[u8], val: &[u8]) -> Result<bool> {
        self.write(key, val, Some(true))
    }

    /// Inserts or replaces.
    pub fn upsert(&self, key: &[u8], val: &[u8]) -> Result<()> {
        self.write(key, val, None).map(|_| ())
    }

    fn write(&self, key: &[u8], val: &[u8], must_exist: Option<bool>) -> Result<bool> {
        self.write_inner(key, val, must_exist, true)
    }

    /// Writes a key; logs the change (write-ahead, under the leaf latch)
    /// when `log` and the engine has a log.
    pub(crate) fn write_inner(
        &self,
        key: &[u8],
        val: &[u8],
        must_exist: Option<bool>,
        log: bool,
    ) -> Result<bool> {
        let log = if log { Log::Yes } else { Log::No };
        self.apply(key, log, |cur| match (must_exist, cur.is_some()) {
            (Some(true), false) | (Some(false), true) => (Change::Keep, false),
            _ => (Change::Put(val.to_vec()), true),
        })
    }

    /// Hands out `n` consecutive row ids of this tree (never handed out
    /// before, also across crashes: the allocation limit is logged in
    /// batches before ids beyond it are used, and checkpointed in the map).
    pub fn alloc_ids(&self, n: u64) -> Result<u64> {
        self.alloc_with(|f| f.alloc_ids(n, ID_BATCH))
    }

    /// Hands out one row id placed into a block of ids as `fill` says
    /// (never handed out before, like [`Self::alloc_ids`]).
    pub fn alloc_packed_id(&self, fill: crate::meta::BlockFill) -> Result<u64> {
        self.alloc_with(|f| f.alloc_packed(fill, ID_BATCH))
    }

    /// Hands out one row id for each of `fills`, in order, as
    /// [`Self::alloc_packed_id`] would one by one, under one latch and
    /// with at most one logged limit (a load's batch: a latch and the
    /// barrier per row were a twentieth of a COPY).
    pub fn alloc_packed_ids(&self, fills: &[crate::meta::BlockFill]) -> Result<Vec<u64>> {
        let mut ids = Vec::with_capacity(fills.len());
        self.alloc_with(|f| {
            let mut limit = None;
            for &fill in fills {
                let (id, l) = f.alloc_packed(fill, ID_BATCH);
                ids.push(id);
                limit = l.or(limit);
            }
            (0, limit)
        })?;
        Ok(ids)
    }

    /// Hands out one row id for a new version of the row whose version has
    /// row id `near`: in `near`'s block when it has room for `take` units
    /// (see `TreeFileGuard::alloc_near`), else as [`Self::alloc_packed_id`].
    pub fn alloc_near_id(&self, near: u64, take: u32, fill: crate::meta::BlockFill) -> Result<u64> {
        self.alloc_with(|f| f.alloc_near(near, take, fill, ID_BATCH))
    }

    fn alloc_with(
        &self,
        take: impl FnOnce(&crate::meta::TreeFileGuard<'_>) -> (u64, Option<u64>),
    ) -> Result<u64> {
        let _b = CheckpointBarrier::enter(&self.inner.pool);
        // The file latch stays held until the new limit is logged: no id
        // beyond the logged limit can be used before the record exists.
        let f = self.file();
        let (first, new_limit) = take(&f);
        if let Some(limit) = new_limit {
            self.inner.log(&Record::IdLimit {
                tree: self.id,
                limit,
            });
        }
        Ok(first)
    }

    /// Looks at `key`'s current value and changes it in one step: `decide`
    /// runs while the leaf is latched exclusively, so nobody can change the
    /// key between the look and the change. `decide` must not block (no
    /// waiting on other transactions: return, wait, and call again).
    pub fn modify<R>(
        &self,
        key: &[u8],
        decide: impl FnOnce(Option<&[u8]>) -> (Change, R),
    ) -> Result<R> {
        self.apply(key, Log::Yes, decide)
    }

    /// Inserts `first` and then `key`, both new, as one logged change (a
    /// row-id map entry and its version: one record instead of two).
    /// False, with nothing written, if `first` exists; false if `key`
    /// exists (then `first` stays, unlogged: gone after a crash).
    pub fn insert_pair(&self, first: (&[u8], &[u8]), key: &[u8], val: &[u8]) -> Result<bool> {
        self.insert_pair_based(first, key, val, None)
    }

    /// [`Tree::insert_pair`], the second value logged as a delta against
    /// `base`: (key, its value now, offset from which that value never
    /// changes while `base` exists). The caller guarantees that `base`
    /// exists until this record is logged and keeps its length and its
    /// bytes from that offset on (a row version being replaced: its
    /// header changes, its tuple never); replay rebuilds the value from
    /// the base's value then.
    pub fn insert_pair_based(
        &self,
        first: (&[u8], &[u8]),
        key: &[u8],
        val: &[u8],
        base: Option<(&[u8], &[u8], fn(&[u8]) -> usize)>,
    ) -> Result<bool> {
        // One barrier entry around both: a checkpoint cannot start between
        // the unlogged first write and the record that covers it.
        let _b = CheckpointBarrier::enter(&self.inner.pool);
        if !self.apply(first.0, Log::No, |cur| absent(cur, first.1))? {
            return Ok(false);
        }
        self.put_second(Some(first), key, val, base)
    }

    /// Inserts `key` (absent) as the second half of a change whose `first`
    /// key is written already, unlogged, under the caller's barrier entry:
    /// one record covers both, the value a delta against `base` where that
    /// is smaller (see [`Tree::insert_pair_based`]).
    fn put_second(
        &self,
        first: Option<(&[u8], &[u8])>,
        key: &[u8],
        val: &[u8],
        base: Option<(&[u8], &[u8], fn(&[u8]) -> usize)>,
    ) -> Result<bool> {
        let Some(first) = first else {
            return self.apply(key, Log::Yes, |cur| absent(cur, val));
        };
        let first = (first.0.to_vec(), first.1.to_vec());
        let delta = base.and_then(|(bk, bv, stable)| {
            Some((bk, Delta::between(val, stable(val), bv, stable(bv))?))
        });
        let rec = match delta {
            Some((base, delta)) => Record::PutPairDelta {
                tree: self.id,
                first,
                key: key.to_vec(),
                base: base.to_vec(),
                delta,
            },
            None => Record::PutPair {
                tree: self.id,
                first,
                key: key.to_vec(),
                value: val.to_vec(),
            },
        };
        self.apply(key, Log::As(&rec), |cur| absent(cur, val))
    }

    /// Replaces a value by a successor in one step (an UPDATE of a row
    /// version): `decide` looks at `key`'s value under its leaf latch and
    /// returns its change — a put of the same key — with the successor's
    /// value, which goes in under `succ.key` (absent), after `succ.first`
    /// (absent; a row-id map entry, so the successor is never without it).
    ///
    /// When the successor belongs to the latched leaf and fits there, both
    /// changes are made under that one latch and logged as one
    /// [`Record::Update`] (a header patch and a delta): one descent and one
    /// record instead of three and two. Otherwise the old value is changed
    /// and logged as by [`Tree::modify`] and the successor inserted as by
    /// [`Tree::insert_pair_based`]. When `decide` keeps the value, nothing
    /// stays written. None (with `succ.reuse` only): the successor's key
    /// could not be taken back on that leaf, and nothing changed.
    pub fn update<R>(
        &self,
        key: &[u8],
        succ: &Successor<'_>,
        decide: impl FnOnce(Option<&[u8]>) -> (Change, Option<Vec<u8>>, R),
    ) -> Result<Option<R>> {
        check_sizes(key, &[])?;
        check_sizes(succ.key, &[])?;
        // One barrier entry: no checkpoint between the unlogged first key
        // and the record that covers it.
        let _b = CheckpointBarrier::enter(&self.inner.pool);
        if let Some((fk, fv)) = succ.first {
            if !self.apply(fk, Log::No, |cur| absent(cur, fv))? {
                return Err(self.damaged("update: the successor's first key exists already"));
            }
        }
        // Until a record covers it, the first key goes again on every way
        // out — a kept decision, an error, or an ERROR raised inside
        // `decide` (unwinding) — before the barrier is left.
        let mut first = Unlogged {
            tree: self,
            key: succ.first.map(|f| f.0),
        };
        self.update_latched(key, succ, decide, &mut first)
    }

    /// [`Tree::update`] once the first key is in. `first` is disarmed once
    /// a record covers the first key or is about to.
    fn update_latched<R>(
        &self,
        key: &[u8],
        succ: &Successor<'_>,
        decide: impl FnOnce(Option<&[u8]>) -> (Change, Option<Vec<u8>>, R),
        first: &mut Unlogged<'_>,
    ) -> Result<Option<R>> {
        let epoch = self.inner.epoch();
        let mut path = Vec::new();
        let mut g = self.descend_leaf(key, LatchMode::Exclusive, &mut path)?;
        let pos = g.page().search(&*self.cmp(), key);
        let (change, new, out) = decide(pos.ok().map(|i| g.page().value(i)));
        let (val, new) = match (change, new, pos) {
            (Change::Keep, ..) => return Ok(Some(out)),
            (Change::Put(val), Some(new), Ok(_)) => (val, new),
            _ => return Err(self.damaged("update: the change is not a put with a successor")),
        };
        check_sizes(key, &val)?;
        check_sizes(succ.key, &new)?;
        let mut pos = pos;
        // A slot being taken back is the pruner's `replaceable` to judge
        // (in `update_in_leaf`), not pruning's.
        let keep = succ.reuse.then_some(succ.key);
        if self.prune_chain(&mut g, key, keep, epoch)? {
            pos = self.position(&g, key, true)?;
        }
        let mut pruned = false;
        loop {
            match self.update_in_leaf(&mut g, key, pos, &val, succ, &new, epoch)? {
                InLeaf::Done => {
                    first.key = None;
                    return Ok(Some(out));
                }
                InLeaf::Taken => return Ok(None),
                InLeaf::No => {}
            }
            // The successor's leaf is full: prune it, as a put does, and
            // try again, so that the update stays one change and one record
            // (the way below costs a second descent and two records).
            let covered = matches!(self.covers(g.page(), Target::Key(succ.key)), Cover::Yes);
            if pruned
                || !covered
                || !pos.is_ok_and(|i| self.lacks_room(g.page(), (succ.key, &new), val.len(), i, 0))
            {
                break;
            }
            pruned = true;
            self.inner.before_modify(&mut g)?;
            if !self.prune_leaf(&mut g, key)? {
                break;
            }
            g.mark_dirty(epoch);
            pos = self.position(&g, key, true)?;
        }
        if succ.reuse {
            // Taking a key back is for the old value's leaf only: the way
            // below changes the old value before it looks at the key.
            return Ok(None);
        }
        self.put_latched(g, path, key, pos, val.clone(), Log::Yes, epoch, true)?;
        // The successor's record covers the first key once logged; should
        // it fail before that, the entry stays unlogged and names nothing
        // (read as gone), never deleted behind a record that has it.
        first.key = None;
        let base = Some((key, &val[..], succ.stable));
        if !self.put_second(succ.first, succ.key, &new, base)? {
            return Err(self.damaged("update: the successor's key exists already"));
        }
        Ok(Some(out))
    }

    /// Both changes of [`Tree::update`] on the latched leaf, logged as one
    /// record; `No`, with the leaf unchanged, when the successor's key lies
    /// outside the leaf, it has no room, or the record would not be
    /// compact; `Taken` when a reusing successor's key holds a value that
    /// is not replaceable (the leaf unchanged too).
    #[allow(clippy::too_many_arguments)]
    fn update_in_leaf(
        &self,
        g: &mut PageGuard<'_>,
        key: &[u8],
        pos: std::result::Result<usize, usize>,
        val: &[u8],
        succ: &Successor<'_>,
        new: &[u8],
        epoch: u64,
    ) -> Result<InLeaf> {
        let Ok(i) = pos else { return Ok(InLeaf::No) };
        let p = g.page();
        let old = p.value(i);
        if !matches!(self.covers(p, Target::Key(succ.key)), Cover::Yes) {
            return Ok(InLeaf::No);
        }
        let Some((j, replaced)) = self.successor_slot(p, succ)? else {
            return Ok(InLeaf::Taken);
        };
        let freed = replaced
            .as_ref()
            .map_or(0, |d| item_space(succ.key.len(), d.len()));
        if self.lacks_room(p, (succ.key, new), val.len(), i, freed) {
            return Ok(InLeaf::No);
        }
        let conflict = match (&replaced, self.pruner.as_ref()) {
            (Some(dead), Some(pr)) => pr.conflict_horizon(succ.key, dead),
            _ => 0,
        };
        let rec = match self.inner.wal {
            None => None,
            Some(_) => match self.update_record(key, old, val, succ, new, conflict) {
                Some(rec) => Some(rec),
                None => return Ok(InLeaf::No),
            },
        };
        self.inner.before_modify(g)?;
        let mut i = i;
        if replaced.is_some() {
            // Pruned (unlogged, as pruning is; replay overwrites the key,
            // first cancelling standby queries up to `conflict`).
            g.page_mut().remove_at(j);
            g.mark_dirty(epoch);
            if j < i {
                i -= 1;
            }
        }
        // The insert first: it is the step that may be refused (the page
        // then as it was, but for a replaced value's removal: a prune of
        // its own). The replace cannot be then: the room checked above
        // covers the old value's growth (compacting if need be).
        if !g.page_mut().insert_at(j, succ.key, new) {
            return Ok(InLeaf::No);
        }
        let i = if j <= i { i + 1 } else { i };
        if !g.page_mut().replace_value(i, val) {
            return Err(self.half_done());
        }
        g.mark_dirty(epoch);
        if let Some(rec) = rec {
            self.inner.log_changed_encoded(&rec);
        }
        if let (Some(dead), Some(pr)) = (replaced, self.pruner.as_ref()) {
            // For its counts: replaceable means nothing else is to be done.
            pr.prune(succ.key, &dead);
        }
        Ok(InLeaf::Done)
    }

    /// Where the successor's key goes on leaf `p`, and the value there it
    /// replaces (a reusing successor's key taken back from a dead version);
    /// None when that value is not replaceable. The key present without
    /// `succ.reuse` is damage.
    fn successor_slot(
        &self,
        p: PageRef,
        succ: &Successor<'_>,
    ) -> Result<Option<(usize, Option<Vec<u8>>)>> {
        match p.search(&*self.cmp(), succ.key) {
            Err(j) => Ok(Some((j, None))),
            Ok(_) if !succ.reuse => Err(self.damaged("update: the successor's key exists already")),
            Ok(j) => {
                let dead = p.value(j);
                if !self.pruner.as_ref().is_some_and(|pr| pr.replaceable(succ.key, dead)) {
                    return Ok(None);
                }
                Ok(Some((j, Some(dead.to_vec()))))
            }
        }
    }

    /// The encoded [`Record::Update`] of `key`'s value going from `old` to
    /// `val` and the successor `new` going in under `succ.key`; None when
    /// it would not be compact (an edit of more ranges than the record
    /// counts, or no delta between the two versions).
    fn update_record(
        &self,
        key: &[u8],
        old: &[u8],
        val: &[u8],
        succ: &Successor<'_>,
        new: &[u8],
        conflict: u32,
    ) -> Option<Vec<u8>> {
        let edit = Edit::between(old, val, crate::key_format::own_id(key))
            .filter(|e| !matches!(e, Edit::Ranges(r) if r.len() > u8::MAX as usize));
        let delta = Delta::between(new, (succ.stable)(new), val, (succ.stable)(val));
        let (Some(edit), Some(delta)) = (edit, delta) else {
            return None;
        };
        let rec = Record::Update {
            tree: self.id,
            key: key.to_vec(),
            len: old.len() as u16,
            edit,
            first: succ.first.map(|(k, v)| (k.to_vec(), v.to_vec())),
            new_key: succ.key.to_vec(),
            delta,
            conflict,
        };
        Some(rec.encode())
    }

    /// Whether leaf `p` has no room for the successor (`succ_key`, `new`)
    /// beside the old value at `i` grown to `val_len` bytes (a version
    /// getting its full header), once `freed` bytes (a value the successor
    /// replaces) are given back: with room, both steps of
    /// [`Tree::update_in_leaf`] fit.
    fn lacks_room(&self, p: PageRef, succ: (&[u8], &[u8]), val_len: usize, i: usize, freed: usize) -> bool {
        let growth = val_len.saturating_sub(p.value(i).len());
        p.total_free() + freed < item_space(succ.0.len(), succ.1.len()) + growth
    }

    /// A change that cannot be refused was: the leaf holds half of an
    /// update. Fatal with a log (the leaf may differ from what replay
    /// makes), else reported as damage.
    fn half_done(&self) -> EngineError {
        let what = "update: a value the leaf had room for was refused";
        if let Some(w) = &self.inner.wal {
            w.fatal(what);
        }
        self.damaged(what)
    }

    /// Inserts `items`, new keys in strictly ascending order, as a load
    /// does: the items that fall into one leaf and fit there go in under
    /// one descent and one latch, logged as one record; an item its leaf
    /// has no room for takes the ordinary path (pruning, a split), and the
    /// run goes on from there. Returns the index of the first item whose
    /// key exists (the items before it are written, none from it on), or
    /// None when all are in.
    pub fn insert_run(&self, items: &[(&[u8], &[u8])]) -> Result<Option<usize>> {
        let cmp = self.cmp();
        for (n, (k, v)) in items.iter().enumerate() {
            check_sizes(k, v)?;
            // Only the first item of a leaf's share is placed by a descent:
            // out of order, a later one could land outside its leaf's range
            // (and replay would put it elsewhere). Equal keys are allowed:
            // the second is reported as taken.
            if n > 0 && cmp.cmp(items[n - 1].0, k) == Ordering::Greater {
                return Err(self.damaged("insert_run: keys not in ascending order"));
            }
        }
        let _b = CheckpointBarrier::enter(&self.inner.pool);
        let mut i = 0;
        while i < items.len() {
            let epoch = self.inner.epoch();
            let mut path = Vec::new();
            let mut g =
                self.descend(Target::Key(items[i].0), 0, LatchMode::Exclusive, &mut path)?;
            let high = g.page().high().map(<[u8]>::to_vec);
            let mut j = i;
            let mut exists = false;
            let mut full_at = None;
            while let Some(&(k, v)) = items.get(j) {
                if high
                    .as_deref()
                    .is_some_and(|h| cmp.cmp(k, h) != Ordering::Less)
                {
                    break;
                }
                let Err(at) = append_or_search(g.page(), &*cmp, k) else {
                    exists = true;
                    break;
                };
                if j == i {
                    self.inner.before_modify(&mut g)?;
                }
                if !g.page_mut().insert_at(at, k, v) {
                    full_at = Some(at);
                    break;
                }
                j += 1;
            }
            if j > i {
                g.mark_dirty(epoch);
                if self.inner.wal.is_some() {
                    let items = items[i..j].iter().copied();
                    self.inner
                        .log_changed_encoded(&crate::wal::encode_put_run(self.id, items));
                }
                if let Some(at) = full_at {
                    // This run filled the leaf: split it at once, under the
                    // latch held. No pruning first: what the run just wrote
                    // is nobody's to prune (a load's own rows), and pruning
                    // every leaf a load fills was a tenth of a re-key.
                    let (k, v) = items[j];
                    self.put_latched(g, path, k, Err(at), v.to_vec(), Log::Yes, epoch, false)?;
                    i = j + 1;
                    continue;
                }
            }
            drop(g);
            if exists {
                return Ok(Some(j));
            }
            if j == i {
                // No room for it in its leaf: prune or split as any insert.
                if !self.insert(items[i].0, items[i].1)? {
                    return Ok(Some(i));
                }
                j += 1;
            }
            i = j;
        }
        Ok(None)
    }

    pub(crate) fn apply<R>(
        &self,
        key: &[u8],
        log: Log<'_>,
        decide: impl FnOnce(Option<&[u8]>) -> (Change, R),
    ) -> Result<R> {
        // The key alone now (MAX_KEY < MAX_ITEM), the item once decided.
        check_sizes(key, &[])?;
        let _b = CheckpointBarrier::enter(&self.inner.pool);
        let epoch = self.inner.epoch();
        let mut path = Vec::new();
        let mut g = self.descend_leaf(key, LatchMode::Exclusive, &mut path)?;
        let pos = g.page().search(&*self.cmp(), key);
        let (change, out) = decide(pos.ok().map(|i| g.page().value(i)));
        let val = match change {
            Change::Keep => return Ok(out),
            Change::Delete => {
                let Ok(i) = pos else { return Ok(out) };
                self.inner.before_modify(&mut g)?;
                g.page_mut().remove_at(i);
                g.mark_dirty(epoch);
                if !matches!(log, Log::No) {
                    self.inner.log_changed(&Record::Delete {
                        tree: self.id,
                        key: key.to_vec(),
                    });
                }
                let live = g.page().live_bytes();
                let has_right = g.page().right() != NO_PAGE;
                // (Not the tree's last leaf: a queue's tail would merge
                // and split again at every emptying.)
                let underfull = live < PAGE_SIZE / 4 && has_right;
                let leaf = g.page;
                drop(g);
                // Optional tidying of a change that is complete and logged:
                // its failure is an ordinary error.
                if underfull && path.is_empty() {
                    // Latched through the hint: find the parent now.
                    drop(self.descend(Target::Key(key), 0, LatchMode::Shared, &mut path)?);
                }
                if let (true, Some(&parent)) = (underfull, path.last()) {
                    if live == 0 {
                        // Into the right sibling however full, else (it hangs
                        // off another parent) into the left one.
                        self.merge_underfull(parent, leaf, (live, has_right), Fill::Loose, epoch)?;
                    } else {
                        self.try_merge(parent, leaf, epoch, Fill::Loose.merged_at_most())?;
                    }
                }
                return Ok(out);
            }
            Change::Put(v) => v,
        };
        self.put_latched(g, path, key, pos, val, log, epoch, true)?;
        Ok(out)
    }

    /// The put of `val` at `key` on its latched leaf `g` (reached through
    /// `path`; `key` at or for `pos`), logged as `log` says.
    #[allow(clippy::too_many_arguments)]
    fn put_latched(
        &self,
        mut g: PageGuard<'_>,
        path: Vec<u32>,
        key: &[u8],
        pos: std::result::Result<usize, usize>,
        val: Vec<u8>,
        log: Log<'_>,
        epoch: u64,
        prune: bool,
    ) -> Result<()> {
        check_sizes(key, &val)?;
        // As PostgreSQL does: the leaf is changed first (everything that can
        // fail — the pre-image write, pruning, a split's new page — fails
        // with the leaf unchanged and nothing logged), then the record is
        // logged under the same latch.
        let rec = self.inner.wal.as_ref().and(match log {
            Log::No => None,
            Log::As(r) => Some(std::borrow::Cow::Borrowed(r)),
            Log::Yes => Some(std::borrow::Cow::Owned(self.put_record(g.page(), pos, key, &val))),
        });
        self.inner.before_modify(&mut g)?;
        let split = self.put_leaf(&mut g, key, val, pos, epoch, prune)?;
        if let Some(rec) = rec {
            self.inner.log_changed(&rec);
        }
        let left = g.page;
        drop(g);
        // The new right half is reachable through the left's right link
        // already (B-link), so a failure to post its downlink is an
        // ordinary error: the logged change is complete.
        if let Some((sep, right)) = split {
            self.insert_into_parent(path, 1, sep, right, left, epoch)?;
        }
        Ok(())
    }

    /// The record of putting `val` at `key` (found at `pos` of the leaf): an
    /// edit of the bytes that change (ranges, or a splice where the length
    /// changes), else the whole value.
    fn put_record(
        &self,
        p: PageRef,
        pos: std::result::Result<usize, usize>,
        key: &[u8],
        val: &[u8],
    ) -> Record {
        let old = pos.ok().map(|i| p.value(i));
        let own = crate::key_format::own_id(key);
        if let Some((old, edit)) = old.and_then(|o| Some((o, Edit::between(o, val, own)?))) {
            return Record::Patch {
                tree: self.id,
                key: key.to_vec(),
                len: old.len() as u16,
                edit,
            };
        }
        Record::Put {
            tree: self.id,
            key: key.to_vec(),
            value: val.to_vec(),
        }
    }

    /// The leaf change of a put (logged, or replayed): in place, after
    /// pruning the leaf (unless `prune` is false), or by splitting it (then the separator and the new
    /// right page, whose downlink the caller posts). `pos` is where `key`
    /// was found (or belongs) when the leaf was latched. On error the leaf
    /// holds no trace of the put.
    ///
    /// A refused replace or insert changes nothing (`PageMut`'s contract),
    /// but pruning removes and shrinks items, so after it every position is
    /// looked up again, and the split takes the items and the position from
    /// the leaf as it is then; pruning never touches `key` itself, so a key
    /// that appeared or vanished meanwhile is reported as damage.
    fn put_leaf(
        &self,
        g: &mut PageGuard<'_>,
        key: &[u8],
        val: Vec<u8>,
        pos: std::result::Result<usize, usize>,
        epoch: u64,
        prune: bool,
    ) -> Result<Option<(Vec<u8>, u32)>> {
        let present = pos.is_ok();
        let put = |g: &mut PageGuard, pos: std::result::Result<usize, usize>| match pos {
            Ok(i) => g.page_mut().replace_value(i, &val),
            Err(i) => g.page_mut().insert_at(i, key, &val),
        };
        let mut fits = put(g, pos);
        if !fits && prune && self.prune_leaf(g, key)? {
            let pos = self.position(g, key, present)?;
            fits = put(g, pos);
        }
        if fits {
            g.mark_dirty(epoch);
            return Ok(None);
        }
        let pos = self.position(g, key, present)?;
        let copy = page_copy(g.page());
        let mut items: Vec<(&[u8], &[u8])> = PageRef(&copy).items().collect();
        let at = match pos {
            Ok(i) => {
                items[i].1 = &val;
                i
            }
            Err(i) => {
                items.insert(i, (key, &val));
                i
            }
        };
        self.split(g, &items, at, epoch).map(Some)
    }

    /// Where `key` is (Ok) or belongs (Err) on the latched leaf now;
    /// `present` says whether it was there when the leaf was latched.
    fn position(
        &self,
        g: &PageGuard,
        key: &[u8],
        present: bool,
    ) -> Result<std::result::Result<usize, usize>> {
        let pos = g.page().search(&*self.cmp(), key);
        if pos.is_ok() != present {
            return Err(self.damaged(format!(
                "key {} leaf {} while it was latched exclusively",
                if present {
                    "vanished from"
                } else {
                    "appeared on"
                },
                g.page
            )));
        }
        Ok(pos)
    }

    /// Runs the tree's pruner over the whole leaf that covers `key` (or the
    /// first leaf if `key` is None) and merges it with its right sibling if
    /// it became underfull. Returns the leaf's high key (where the next
    /// leaf starts), None at the right end: callers sweep a tree leaf by
    /// leaf this way so that versions nobody modifies again still go away.
    pub fn prune_leaf_at(&self, key: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        self.prune_and_merge(key, true, Fill::Loose)
    }

    /// Counts `n` versions of this tree superseded (updated or deleted) by
    /// transaction `xid` of relation `rel` (the table AM's numbers; `newer`
    /// orders its xids, which wrap): a tree nobody changes any more is
    /// swept whole once the newest such transaction is older than every
    /// snapshot (`Engine::superseded_trees`), since nothing else would
    /// prune what its last changes left. Backends add up their counts and
    /// come here once per transaction and tree: the slot's line is the one
    /// every descent reads.
    pub fn note_superseded(&self, rel: u32, xid: u32, n: u64, newer: fn(u32, u32) -> bool) {
        use std::sync::atomic::Ordering::Relaxed;
        let s = self.inner.meta.slot(self.slot);
        s.superseded.fetch_add(n, Relaxed);
        let _ = s
            .superseded_xid
            .fetch_update(Relaxed, Relaxed, |old| (old == 0 || newer(xid, old)).then_some(xid));
        if s.superseded_rel.load(Relaxed) != rel {
            s.superseded_rel.store(rel, Relaxed);
        }
    }

    /// [`Tree::prune_leaf_at`] for a background sweep, which leaves a
    /// tree's only leaf alone unless it is nearly full (less than a quarter
    /// free), as heap prunes only pages that are nearly full
    /// (`heap_page_prune_opt`): a small table's dead versions stay counted
    /// as dead until VACUUM or a change needs the room (PostgreSQL's
    /// `stats` isolation spec counts them). Every leaf of a bigger tree is
    /// pruned: leaves whose rows were all updated elsewhere (a row-id
    /// table's old versions) or split while a long transaction held both
    /// versions of their rows are never changed again, and only pruning
    /// lets them merge away (seed 004: before, a 240,000-row table kept
    /// all three passes' old versions, 5.5 times its pages).
    pub fn sweep_leaf_at(&self, key: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        self.prune_and_merge(key, false, Fill::Loose)
    }

    /// [`Tree::prune_leaf_at`] packing leaves tight ([`Fill::Tight`]): for
    /// a tree nobody writes any more, which need not keep room for the
    /// changes of a busy one. A leaf that stays below seven eighths takes
    /// items from its right sibling, so call it left to right over leaves
    /// already pruned (a second pass): what it moves is not pruned again.
    pub fn pack_leaf_at(&self, key: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        self.prune_and_merge(key, true, Fill::Tight)
    }

    /// Prunes the leaf covering `key` (see [`Tree::prune_leaf_once`]);
    /// while it is underfull, merges its right sibling into it and prunes
    /// again, so a run of emptied leaves collapses in one call (up to
    /// `MERGES` of them). Returns the leaf's high key: where the next leaf
    /// starts.
    fn prune_and_merge(&self, key: Option<&[u8]>, always: bool, fill: Fill) -> Result<Option<Vec<u8>>> {
        const MERGES: usize = 16;
        let mut merges = 0;
        loop {
            let (high, merged) = self.prune_leaf_once(key, always, (merges < MERGES).then_some(fill))?;
            if !merged {
                return Ok(high);
            }
            merges += 1;
        }
    }

    /// Prunes the leaf covering `key` unless `always` is false and it is
    /// the tree's only leaf with a quarter of a page free; then, if `merge`
    /// and it is underfull, merges its right sibling into it — under the
    /// same checkpoint barrier and epoch as the pruning, so no checkpoint
    /// starts between them. Returns its high key (before a merge) and
    /// whether it merged.
    fn prune_leaf_once(
        &self,
        key: Option<&[u8]>,
        always: bool,
        merge: Option<Fill>,
    ) -> Result<(Option<Vec<u8>>, bool)> {
        let _b = CheckpointBarrier::enter(&self.inner.pool);
        let epoch = self.inner.epoch();
        let mut path = Vec::new();
        let target = key.map_or(Target::First, Target::Key);
        let mut g = self.descend(target, 0, LatchMode::Exclusive, &mut path)?;
        let high = g.page().high().map(<[u8]>::to_vec);
        let Some(pruner) = self.pruner.clone() else {
            return Ok((high, false));
        };
        let only_leaf = g.page().low().is_none() && g.page().right() == NO_PAGE;
        if always || !only_leaf || g.page().total_free() < PAGE_SIZE / 4 {
            self.prune_items(&mut g, &*pruner, epoch)?;
        }
        // Also when nothing was pruned now: an earlier merge attempt may
        // have failed because the right sibling was full at the time.
        // A sweep's leaves are pruned left to right: the right sibling may
        // still hold what its pruning would remove, the left one not, so
        // a leaf the right sibling does not fit into folds into its left
        // one. (Half full, not a quarter as for deletes: leaves split while
        // a transaction held two versions of their rows stay half empty
        // once it committed, and nothing else merges them.)
        let live = g.page().live_bytes();
        let has_right = g.page().right() != NO_PAGE;
        let leaf = g.page;
        drop(g);
        let underfull = merge.filter(|f| live < f.underfull());
        let (Some(fill), Some(&parent)) = (underfull, path.last()) else {
            return Ok((high, false));
        };
        match self.merge_underfull(parent, leaf, (live, has_right), fill, epoch)? {
            Underfull::Merged => Ok((high, true)),
            Underfull::Kept => Ok((high, false)),
            // The leaf now ends there: the next starts at it.
            Underfull::Shifted(sep) => Ok((Some(sep), false)),
        }
    }

    /// Runs `pruner` over every item of the latched leaf `g` and applies
    /// its verdicts (removals, same-length replacements) as one unlogged
    /// change in `epoch`. The caller holds the checkpoint barrier.
    fn prune_items(&self, g: &mut PageGuard, pruner: &dyn Pruner, epoch: u64) -> Result<()> {
        // Before the pruner runs: it queues work (map entries and toast
        // values of the versions it removes) that must not happen if
        // the pre-image write fails and the leaf stays as it is.
        self.inner.before_modify(g)?;
        let mut drop_at = Vec::new();
        let mut replace = Vec::new();
        for (i, (k, v)) in g.page().items().enumerate() {
            match pruner.prune(k, v) {
                Prune::Keep => {}
                Prune::Remove => drop_at.push(i),
                Prune::Replace(nv) if nv.len() == v.len() => replace.push((i, nv)),
                Prune::Replace(_) => {}
            }
        }
        if drop_at.is_empty() && replace.is_empty() {
            return Ok(());
        }
        // Same-length replacements are written in place and never
        // refused (a refused one would have changed nothing).
        let refused = replace
            .into_iter()
            .filter(|(i, nv)| !g.page_mut().replace_value(*i, nv))
            .count();
        for &i in drop_at.iter().rev() {
            g.page_mut().remove_at(i);
        }
        g.mark_dirty(epoch);
        if refused > 0 {
            return Err(self.damaged(format!(
                "leaf {} refused {refused} same-length replacements",
                g.page
            )));
        }
        Ok(())
    }

    /// Merges the underfull `leaf` (unlatched now; `parent` its parent on
    /// the descent; `live` its bytes) as `fill` asks, in `epoch`: into it
    /// its right sibling (if `has_right`), else, packing, items shifted
    /// from that sibling, else, not packing, the leaf into its left sibling.
    fn merge_underfull(
        &self,
        parent: u32,
        leaf: u32,
        (live, has_right): (usize, bool),
        fill: Fill,
        epoch: u64,
    ) -> Result<Underfull> {
        let at_most = fill.limit_for(live);
        if has_right && self.try_merge(parent, leaf, epoch, at_most)? {
            return Ok(Underfull::Merged);
        }
        if matches!(fill, Fill::Tight) {
            // Packing goes left to right over pruned leaves: what does not
            // merge whole fills this leaf from its right sibling instead
            // (two leaves half full merge into none), and the left one is
            // full already. A shift is no merge: the sweep goes on right.
            if has_right {
                if let Some(sep) = self.try_shift(parent, leaf, epoch, at_most)? {
                    return Ok(Underfull::Shifted(sep));
                }
            }
            return Ok(Underfull::Kept);
        }
        if let Some(left) = self.left_sibling(parent, leaf)? {
            if self.try_merge(parent, left, epoch, at_most)? {
                return Ok(Underfull::Merged);
            }
        }
        Ok(Underfull::Kept)
    }

    /// Before an update of `key`, lets the tree's pruner drop the items
    /// beside it on the latched leaf that are versions of the same row
    /// (`key_format::same_row`): its older versions, dead once the transactions
    /// that replaced them are older than every snapshot. They are the
    /// ones a row updated again and again leaves behind, and a leaf that
    /// still has room would keep them until it fills: a pass over a table
    /// grew it by the last pass's versions. Unlogged, as all pruning; the
    /// key itself and `keep` are left alone. Returns whether anything was
    /// removed.
    fn prune_chain(
        &self,
        g: &mut PageGuard,
        key: &[u8],
        keep: Option<&[u8]>,
        epoch: u64,
    ) -> Result<bool> {
        let Some(pruner) = self.pruner.clone() else {
            return Ok(false);
        };
        let p = g.page();
        // A tree's only leaf with room is left alone, as sweeps leave it
        // (`prune_leaf_once`): heap prunes only nearly full pages, and a
        // small table's dead versions stay counted as dead until VACUUM
        // (PostgreSQL's `stats` isolation spec counts them).
        if p.low().is_none() && p.right() == NO_PAGE && p.total_free() >= PAGE_SIZE / 4 {
            return Ok(false);
        }
        let Ok(at) = p.search(&*self.cmp(), key) else {
            return Ok(false);
        };
        let n = p.nitems();
        let mut lo = at;
        while lo > 0 && crate::key_format::same_row(p.key(lo - 1), key) {
            lo -= 1;
        }
        let mut hi = at + 1;
        while hi < n && crate::key_format::same_row(p.key(hi), key) {
            hi += 1;
        }
        if hi - lo == 1 {
            return Ok(false);
        }
        // Before the pruner runs: it queues work (map entries and toast
        // values of what it removes) that must not happen if the
        // pre-image write fails.
        self.inner.before_modify(g)?;
        let p = g.page();
        let dead: Vec<usize> = (lo..hi)
            .filter(|&i| i != at && keep != Some(p.key(i)))
            .filter(|&i| matches!(pruner.prune(p.key(i), p.value(i)), Prune::Remove))
            .collect();
        for &i in dead.iter().rev() {
            g.page_mut().remove_at(i);
        }
        if !dead.is_empty() {
            g.mark_dirty(epoch);
        }
        Ok(!dead.is_empty())
    }

    /// Before a leaf splits, lets the tree's pruner drop or shrink items that
    /// nobody needs any more (dead row versions), sparing the split. The
    /// key being written is left alone. Returns whether anything changed.
    /// Pruning is not logged: it only removes what no reader can see.
    fn prune_leaf(&self, g: &mut PageGuard, writing: &[u8]) -> Result<bool> {
        let Some(pruner) = self.pruner.clone() else {
            return Ok(false);
        };
        let cmp = self.cmp();
        let mut changed = false;
        let mut i = 0;
        while i < g.page().nitems() {
            let p = g.page();
            if cmp.cmp(p.key(i), writing) == Ordering::Equal {
                i += 1;
                continue;
            }
            match pruner.prune(p.key(i), p.value(i)) {
                Prune::Keep => i += 1,
                Prune::Remove => {
                    g.page_mut().remove_at(i);
                    changed = true;
                }
                Prune::Replace(v) => {
                    let len = g.page().value(i).len();
                    if v.len() == len {
                        // Hint bits, in place as `prune_leaf_at` writes
                        // them (never refused); they free no room.
                        g.page_mut().replace_value(i, &v);
                    } else if self.inner.wal.is_none()
                        // Shrinking an item is for unlogged trees only: a
                        // later patch or delta of a logged one is replayed
                        // against the value as logged, whose length must
                        // not change.
                        && v.len() < len
                        && g.page_mut().replace_value(i, &v)
                    {
                        changed = true;
                    }
                    i += 1;
                }
            }
        }
        Ok(changed)
    }

    /// Splits the latched page `g` whose new contents are `items`: the upper
    /// half moves to a new right sibling. Returns (separator, new page).
    fn split(
        &self,
        g: &mut PageGuard,
        items: &Items,
        pos: usize,
        epoch: u64,
    ) -> Result<(Vec<u8>, u32)> {
        let p = g.page();
        let (level, low, high, right) = (
            p.level(),
            p.low().map(<[u8]>::to_vec),
            p.high().map(<[u8]>::to_vec),
            p.right(),
        );
        let fill = (pos + 1 == items.len()).then(|| append_fill(level, &items[pos].0));
        let s = split_point(&items, low.as_deref(), high.as_deref(), fill)
            .ok_or_else(|| self.damaged("split: no split point fits both halves"))?;
        let sep = items[s].0.to_vec();
        // Both halves are built aside first, so nothing on the page changes
        // unless the whole split succeeds.
        let mut rbuf = vec![0u8; PAGE_SIZE];
        if !PageMut(&mut rbuf).build(
            level,
            Some(&sep),
            high.as_deref(),
            right,
            items[s..].iter().copied(),
        ) {
            return Err(self.damaged("split: right half does not fit"));
        }
        let q = self.alloc_page()?;
        let mut lbuf = vec![0u8; PAGE_SIZE];
        let new_page = (|| {
            if !PageMut(&mut lbuf).build(
                level,
                low.as_deref(),
                Some(&sep),
                q,
                items[..s].iter().copied(),
            ) {
                return Err(self.damaged("split: left half does not fit"));
            }
            let mut gq = self.inner.pool.fetch_new(&*self.inner, self.num, q)?;
            self.inner.before_modify(&mut gq)?;
            Ok(gq)
        })();
        let mut gq = match new_page {
            Ok(gq) => gq,
            Err(e) => {
                self.file().page_freed(q);
                return Err(e);
            }
        };
        gq.page_mut().0.copy_from_slice(&rbuf);
        g.page_mut().0.copy_from_slice(&lbuf);
        gq.mark_dirty(epoch);
        g.mark_dirty(epoch);
        Ok((sep, q))
    }

    /// Adds the downlink (`sep` -> `child`) for a split of page `left` at
    /// `level - 1`, splitting upwards as needed. `path` holds the pages the
    /// descent passed through.
    fn insert_into_parent(
        &self,
        mut path: Vec<u32>,
        mut level: u16,
        mut sep: Vec<u8>,
        mut child: u32,
        mut left: u32,
        epoch: u64,
    ) -> Result<()> {
        loop {
            let mut g = match path.pop() {
                Some(pno) => self.relocate(pno, level, &sep, &mut path)?,
                None => {
                    let root_lock = self.root_lock();
                    if self.root() == left {
                        // Built aside before a page is even allocated.
                        let items = [
                            (&b""[..], &child_value(left)[..]),
                            (&sep[..], &child_value(child)[..]),
                        ];
                        let mut rbuf = vec![0u8; PAGE_SIZE];
                        if !PageMut(&mut rbuf).build(level, None, None, NO_PAGE, items.into_iter())
                        {
                            return Err(self.damaged("new root does not fit"));
                        }
                        let r = self.alloc_page()?;
                        let fetched = self.inner.pool.fetch_new(&*self.inner, self.num, r);
                        let mut gr = match fetched {
                            Ok(gr) => gr,
                            Err(e) => {
                                self.file().page_freed(r);
                                return Err(e);
                            }
                        };
                        // A new page holds nothing the checkpoint needs.
                        self.inner.before_modify(&mut gr)?;
                        gr.page_mut().0.copy_from_slice(&rbuf);
                        gr.mark_dirty(epoch);
                        self.set_root(r);
                        return Ok(());
                    }
                    drop(root_lock);
                    // The tree grew since our descent: find the parent level from the new root.
                    self.descend(Target::Key(&sep), level, LatchMode::Exclusive, &mut path)?
                }
            };
            // Position by downlink ranges, never comparing with item 0's
            // placeholder key (a custom comparator may not accept it).
            let cmp = self.cmp();
            let idx = g.page().child_index(&*cmp, &sep, false);
            if idx > 0 && cmp.cmp(g.page().key(idx), &sep) == Ordering::Equal {
                return Err(self.damaged(format!("separator already present at level {level}")));
            }
            let pos = idx + 1;
            self.inner.before_modify(&mut g)?;
            let cv = child_value(child);
            if g.page_mut().insert_at(pos, &sep, &cv) {
                g.mark_dirty(epoch);
                return Ok(());
            }
            let copy = page_copy(g.page());
            let mut items: Vec<(&[u8], &[u8])> = PageRef(&copy).items().collect();
            items.insert(pos, (&sep, &cv));
            let (sep2, right2) = self.split(&mut g, &items, pos, epoch)?;
            left = g.page;
            drop(g);
            sep = sep2;
            child = right2;
            level += 1;
        }
    }

    /// Latches `pno` exclusively and moves right until the page at `level`
    /// covers `key`; falls back to a fresh descent if `pno` is no longer there.
    fn relocate(
        &self,
        mut pno: u32,
        level: u16,
        key: &[u8],
        path: &mut Vec<u32>,
    ) -> Result<PageGuard<'_>> {
        loop {
            let g = self.fetch(pno, LatchMode::Exclusive)?;
            if g.page().level() != level {
                break;
            }
            match self.covers(g.page(), Target::Key(key)) {
                Cover::Yes => return Ok(g),
                Cover::Right if g.page().right() != NO_PAGE => pno = g.page().right(),
                _ => break,
            }
        }
        let mut fresh = Vec::new();
        let g = self.descend(Target::Key(key), level, LatchMode::Exclusive, &mut fresh)?;
        *path = fresh;
        Ok(g)
    }

    /// Deletes a key; false if it does not exist. An underfull leaf is
    /// merged with its right sibling when both hang off the same parent.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.delete_inner(key, true)
    }

    /// Deletes a key without logging it: for items whose removal may be
    /// undone by a crash without harm (a row-id map entry of a version that
    /// pruning — itself unlogged — removed: replay brings both back, and
    /// the version is pruned again).
    pub fn delete_unlogged(&self, key: &[u8]) -> Result<bool> {
        self.delete_inner(key, false)
    }

    pub(crate) fn delete_inner(&self, key: &[u8], log: bool) -> Result<bool> {
        let log = if log { Log::Yes } else { Log::No };
        self.apply(key, log, |cur| {
            if cur.is_some() {
                (Change::Delete, true)
            } else {
                (Change::Keep, false)
            }
        })
    }

    /// The leaf left of `leaf` under the same `parent` (None: it is the
    /// first child, or the parent changed meanwhile).
    fn left_sibling(&self, parent: u32, leaf: u32) -> Result<Option<u32>> {
        let gp = self.fetch(parent, LatchMode::Shared)?;
        let pp = gp.page();
        if pp.is_deleted() || pp.level() != 1 {
            return Ok(None);
        }
        Ok((1..pp.nitems()).find(|&i| pp.child(i) == leaf).map(|i| pp.child(i - 1)))
    }

    /// Level-1 page `parent`, its leaf `left` and that leaf's right
    /// sibling under the same parent, latched exclusively in that order
    /// (as every merge latches); None when the neighbourhood is not (or no
    /// longer) that.
    fn latch_siblings(&self, parent: u32, left: u32) -> Result<Option<Siblings<'_>>> {
        let gp = self.fetch(parent, LatchMode::Exclusive)?;
        let pp = gp.page();
        if pp.is_deleted() || pp.level() != 1 {
            return Ok(None);
        }
        let Some(i) = (0..pp.nitems()).find(|&i| pp.child(i) == left) else {
            return Ok(None);
        };
        if i + 1 >= pp.nitems() {
            return Ok(None);
        }
        let right = pp.child(i + 1);
        let gl = self.fetch(left, LatchMode::Exclusive)?;
        let lp = gl.page();
        if lp.is_deleted() || lp.level() != 0 || lp.right() != right {
            return Ok(None);
        }
        let gr = self.fetch(right, LatchMode::Exclusive)?;
        let rp = gr.page();
        if rp.is_deleted() || rp.level() != 0 {
            return Ok(None);
        }
        Ok(Some(Siblings { gp, i, gl, gr }))
    }

    /// Best effort: moves the first items of `left`'s right sibling into
    /// it until it holds about `at_most` bytes, leaving the sibling at
    /// least one; the new separator if it moved any. The separator becomes the first
    /// key left in the sibling: its low key, `left`'s high key and its
    /// downlink in the parent, all three pages rebuilt aside and written
    /// only when all three fit (else nothing changes). Readers stay right:
    /// a descent that reaches the sibling for a moved key finds it below
    /// the sibling's low key and restarts; cursors re-descend by key.
    fn try_shift(&self, parent: u32, left: u32, epoch: u64, at_most: usize) -> Result<Option<Vec<u8>>> {
        let Some(Siblings { mut gp, i, mut gl, mut gr }) = self.latch_siblings(parent, left)? else {
            return Ok(None);
        };
        let (pp, lp, rp) = (gp.page(), gl.page(), gr.page());
        let right = gr.page;
        if rp.nitems() < 2 {
            return Ok(None);
        }
        // How many of the sibling's items fit, with the new high key.
        let mut have = HEADER + lp.live_bytes() + lp.low().map_or(0, <[u8]>::len);
        let mut k = 0;
        while k + 1 < rp.nitems() {
            let add = item_space(rp.key(k).len(), rp.value(k).len());
            if have + add + rp.key(k + 1).len() > at_most {
                break;
            }
            have += add;
            k += 1;
        }
        if k == 0 {
            return Ok(None);
        }
        let sep = rp.key(k).to_vec();
        let mut new_left = vec![0u8; PAGE_SIZE];
        let mut new_right = vec![0u8; PAGE_SIZE];
        let mut new_parent = vec![0u8; PAGE_SIZE];
        let built = PageMut(&mut new_parent).build(
            pp.level(),
            pp.low(),
            pp.high(),
            pp.right(),
            pp.items()
                .enumerate()
                .map(|(j, (key, v))| if j == i + 1 { (&sep[..], v) } else { (key, v) }),
        ) && PageMut(&mut new_left).build(0, lp.low(), Some(&sep), right, lp.items().chain(rp.items().take(k)))
            && PageMut(&mut new_right).build(0, Some(&sep), rp.high(), rp.right(), rp.items().skip(k));
        if !built {
            return Ok(None);
        }
        self.inner.before_modify(&mut gp)?;
        self.inner.before_modify(&mut gl)?;
        self.inner.before_modify(&mut gr)?;
        gl.page_mut().0.copy_from_slice(&new_left);
        gr.page_mut().0.copy_from_slice(&new_right);
        gp.page_mut().0.copy_from_slice(&new_parent);
        gl.mark_dirty(epoch);
        gr.mark_dirty(epoch);
        gp.mark_dirty(epoch);
        Ok(Some(sep))
    }

    /// Best effort: folds `left`'s right sibling into it; whether it did.
    /// Gives up quietly whenever the neighbourhood changed meanwhile.
    fn try_merge(&self, parent: u32, left: u32, epoch: u64, at_most: usize) -> Result<bool> {
        let Some(Siblings { mut gp, i, mut gl, mut gr }) = self.latch_siblings(parent, left)? else {
            return Ok(false);
        };
        let (lp, rp) = (gl.page(), gr.page());
        let right = gr.page;
        let need = HEADER
            + lp.live_bytes()
            + rp.live_bytes()
            + lp.low().map_or(0, <[u8]>::len)
            + rp.high().map_or(0, <[u8]>::len);
        if need > at_most {
            return Ok(false);
        }
        // The merged leaf is built aside and replaces the live left page
        // only once it is complete: if it did not fit after all (the pages'
        // sizes lied), all three pages are left as they were.
        let mut merged = vec![0u8; PAGE_SIZE];
        if !PageMut(&mut merged).build(
            0,
            lp.low(),
            rp.high(),
            rp.right(),
            lp.items().chain(rp.items()),
        ) {
            return Err(self.damaged(format!(
                "leaves {left} and {right} do not fit one page although their sizes say so"
            )));
        }
        self.inner.before_modify(&mut gp)?;
        self.inner.before_modify(&mut gl)?;
        self.inner.before_modify(&mut gr)?;
        gl.page_mut().0.copy_from_slice(&merged);
        gp.page_mut().remove_at(i + 1);
        gl.mark_dirty(epoch);
        gp.mark_dirty(epoch);
        self.inner.free_page(self.slot, &mut gr);
        Ok(true)
    }
}

/// Where `k` is (Ok) or belongs (Err) on page `p`, asking first whether it
/// goes after the last item: a load's runs append, and a binary search per
/// row was most of the key comparisons of a COPY or a re-key.
fn append_or_search(
    p: PageRef<'_>,
    cmp: &dyn crate::order::KeyCmp,
    k: &[u8],
) -> std::result::Result<usize, usize> {
    let n = p.nitems();
    if n > 0 && cmp.cmp(p.key(n - 1), k) == Ordering::Less {
        return Err(n);
    }
    p.search(cmp, k)
}
