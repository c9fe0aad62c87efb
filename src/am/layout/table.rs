//! Where a table's row versions live in its primary tree.
//!
//! Two layouts share one tree format:
//! - **row id** (tables without a usable primary key): a version's key is
//!   its row id, 8 bytes big-endian — except a HOT-like chain's later
//!   members (`am::layout::hot`), keyed `root's row id ‖ !row id (6 bytes)` so that
//!   they follow their root, each with a map entry `0x01 ‖ row id` → the
//!   root's 8-byte key (after every version, since row ids stay below
//!   2^48).
//! - **primary key**: the tree holds three key ranges, told apart by their
//!   first byte —
//!   `0x00` the key descriptor (one item, its presence selects this layout);
//!   `0x01 ‖ row id (6 bytes BE)` → key prefix: the row-id map;
//!   `0x02 ‖ key prefix ‖ !row id (6 bytes)` → version: the table body in
//!   primary-key order, a key's versions adjacent and newest first.
//!
//! The map lives in the primary tree rather than a tree of its own: it is
//! created, truncated, dropped, checkpointed and recovered with the versions
//! it describes, by the same WAL records, with no second file to keep in step.
//! A version's key never changes, so a map entry is written once, with its
//! version; the pruner queues the entries of versions it removes and they
//! are deleted right after (an entry left by a crash in between names a
//! version that is gone, which reads as "gone", and row ids are not handed
//! out again; a HOT-like chain takes only its own root's id back, whose
//! entry stays).

use crate::am::layout::key_desc::KeyDesc;
use orioledb_engine::btree::{Change, Successor};
use orioledb_engine::order::Bytewise;
pub use orioledb_engine::key_format::VERSION_TAG;
use orioledb_engine::key_format::{
    is_member_key, map_id, map_key, member_key, push_version_suffix, version_suffix, MAP_KEY, MAP_TAG,
    SUFFIX,
};
use orioledb_engine::page::NO_PAGE;
use orioledb_engine::version::{self, tid};
use orioledb_engine::{Cursor, Direction, IdHash, Leaf, Tree, TreeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Bound;
use std::rc::Rc;
use std::sync::Arc;

pub use orioledb_engine::key_format::DESC_KEY;

/// How versions are keyed in a tree. Invariant: `Keyed` iff the tree holds
/// the descriptor item.
#[derive(Clone, Debug)]
pub enum Layout {
    RowId,
    Keyed(Arc<KeyDesc>),
}

/// A table's primary tree with its layout: a backend's shared handle.
///
/// Invariant: the parts never change while shared; `set_layout` (which
/// rewrites the tree in place) works on this handle's own copy. Cloning is
/// a count on this backend's heap: a handle is cloned for every
/// statement's scan, change and plan, and the parts' five atomic counts
/// (tree, residency hold, comparator, pruner, key descriptor) cost 1% of
/// a TPC-B profile.
#[derive(Clone)]
pub struct Table(Rc<TableParts>);

/// What a [`Table`] handle shares.
#[derive(Clone)]
pub struct TableParts {
    pub tree: Tree,
    pub layout: Layout,
}

impl std::ops::Deref for Table {
    type Target = TableParts;
    fn deref(&self) -> &TableParts {
        &self.0
    }
}

thread_local! {
    /// Row id → version key of keyed trees, as read from the map (or just
    /// written). Exact for as long as the tree lives (keys never change);
    /// cleared at transaction end and when a tree is emptied in place,
    /// the only ways a tree's row ids can start over.
    static KEYS: RefCell<HashMap<(TreeId, u64), Vec<u8>, IdHash>> = RefCell::new(HashMap::default());
    /// Map entries of removed versions, deleted outside the latch (and
    /// whether that deletion is logged).
    static DOOMED: RefCell<Vec<(TreeId, [u8; MAP_KEY], bool)>> = const { RefCell::new(Vec::new()) };
    /// The version a point read last handed to the executor: an UPDATE of
    /// it compares its columns with the new row's (`modify`) without a
    /// second descent. Exact for the statement that read it: its snapshot
    /// keeps the version from being replaced (a HOT-like chain takes its
    /// root's row id back only from a version dead to everyone), and its
    /// tuple never changes (only its header, which that comparison does
    /// not read); cleared at every executor start and with the keys.
    static LAST_READ: RefCell<Option<(TreeId, u64, Vec<u8>)>> = const { RefCell::new(None) };
}

const KEY_CACHE_MAX: usize = 4096;

/// This module's part of a transaction's end (`pg::xact`): cached keys
/// are forgotten, and an abort drops the queued map-entry deletions (the
/// versions they located are gone with it).
pub fn at_event(e: crate::pg::xact::Event) {
    use crate::pg::xact::Event::*;
    match e {
        Prepare | Commit => forget_keys(),
        Abort => {
            forget_keys();
            forget_doomed_map_entries(None);
        }
        _ => {}
    }
}

/// Forgets cached version keys.
pub fn forget_keys() {
    KEYS.with(|k| k.borrow_mut().clear());
    LAST_READ.with(|r| *r.borrow_mut() = None);
}

/// Forgets the last version read (a statement starts).
pub fn forget_last_read() {
    LAST_READ.with(|r| {
        if let Some((_, id, _)) = r.borrow_mut().as_mut() {
            *id = u64::MAX;
        }
    });
}

/// Remembers version `id` of `tree`, `value`, as the last one read (see
/// `LAST_READ`).
pub fn remember_read(tree: TreeId, id: u64, value: &[u8]) {
    LAST_READ.with(|r| {
        let mut r = r.borrow_mut();
        match &mut *r {
            Some((t, i, v)) => {
                (*t, *i) = (tree, id);
                v.clear();
                v.extend_from_slice(value);
            }
            None => *r = Some((tree, id, value.to_vec())),
        }
    });
}

/// Version `id` of `tree` if it was the last one read: its tuple as stored
/// (its header may have changed since).
pub fn last_read(tree: TreeId, id: u64) -> Option<Vec<u8>> {
    LAST_READ.with(|r| match &*r.borrow() {
        Some((t, i, v)) if (*t, *i) == (tree, id) => Some(v.clone()),
        _ => None,
    })
}

/// Remembers that version `id` of `tree` has key `key` (exact for the
/// tree's life: a version's key never changes).
pub fn remember_key(tree: TreeId, id: u64, key: &[u8]) {
    KEYS.with(|k| {
        let mut k = k.borrow_mut();
        if k.len() >= KEY_CACHE_MAX {
            k.clear();
        }
        k.insert((tree, id), key.to_vec());
    });
}

/// [`remember_key`] unless known already: a small table's scan meets the
/// same chain members scan after scan, and a copy of each key per scan
/// was an eighth of it.
fn remember_key_once(tree: TreeId, id: u64, key: &[u8]) {
    if !KEYS.with(|k| k.borrow().contains_key(&(tree, id))) {
        remember_key(tree, id, key);
    }
}

/// Tables up to this many tree pages are scanned in row-id order
/// (`scan::SeqCursor`), heap's row order.
pub const SMALL_TABLE_PAGES: u64 = 32;

/// Largest version value that fits beside a keyed version key whose
/// prefix is `prefix_len` bytes (the `0x02` tag, the prefix, the 6-byte
/// row id), with room for the HOT root trailer a version may get later.
pub fn keyed_max_value(prefix_len: usize) -> usize {
    orioledb_engine::page::MAX_ITEM - (prefix_len + 7 + version::ROOT_LEN)
}

/// A keyed version's key: its tag, at least two prefix bytes (a column's
/// tag and value; a bool key is exactly that) and the 6-byte suffix.
fn is_keyed_version(key: &[u8]) -> bool {
    key.len() >= 9 && key[0] == VERSION_TAG
}

/// What the pruner may judge: versions only, never the descriptor or the
/// map. Row-id keys are exactly 8 bytes, or 14 starting with a zero byte
/// (chain members; a row-id tree holds nothing else but its map); a keyed
/// tree holds no such key (descriptor 1 byte, map entries 7 bytes tagged
/// 0x01, versions tagged 0x02).
pub fn is_version_key(key: &[u8]) -> bool {
    key.len() == 8 || is_keyed_version(key) || is_member_key(key)
}

/// The root of row-id chain member key `key` (None: not such a key).
pub fn member_root(key: &[u8]) -> Option<u64> {
    is_member_key(key).then(|| root_id(key)).flatten()
}

/// The row id a row-id layout's key sorts under: its own for a root's
/// 8-byte key, the root's for a chain member's (None: a shorter key).
pub fn root_id(key: &[u8]) -> Option<u64> {
    tid::from_key(key.get(..8)?)
}

/// Called by the pruner for a version it removes: a keyed version's or a
/// row-id chain member's map entry is queued for deletion.
pub fn version_pruned(tree: TreeId, key: &[u8]) {
    if is_keyed_version(key) || is_member_key(key) {
        if let Some(id) = version_suffix(key) {
            DOOMED.with(|d| d.borrow_mut().push((tree, map_key(id), false)));
        }
    }
}

/// Drops queued map-entry deletions (of `tree`, or all), without doing
/// them: at transaction end (normally the queue is empty then; after an
/// ERROR between queueing and deleting, the entries of already-pruned
/// versions stay behind, harmless: their row ids are never handed out
/// again) and when a tree is emptied in place (the versions they located
/// are gone; row ids go on after a truncation, so this is belt and braces).
pub fn forget_doomed_map_entries(tree: Option<TreeId>) {
    DOOMED.with(|d| match tree {
        None => d.borrow_mut().clear(),
        Some(t) => d.borrow_mut().retain(|e| e.0 != t),
    });
}

/// Deletes queued map entries. Runs outside every latch; the tree is the
/// one being modified, so its table is locked and the tree exists.
pub fn delete_doomed_map_entries() {
    let work = DOOMED.with(|d| std::mem::take(&mut *d.borrow_mut()));
    if work.is_empty() {
        return;
    }
    let engine = crate::pg::engine::engine();
    for (id, key, logged) in work {
        let Ok(tree) = engine.tree(id) else { continue };
        // Unlogged after pruning, which is unlogged too: a crash brings
        // both back (replay restores the version's record with its entry)
        // and the version is pruned again.
        let r = if logged {
            tree.delete(&key)
        } else {
            tree.delete_unlogged(&key)
        };
        r.unwrap_or_else(|e| crate::pg::engine::report(e));
    }
}

/// `tree` in its layout's key order, or None when that order is not
/// available (a malformed descriptor, a locale this machine lacks): for
/// background work that skips such a tree instead of raising an ERROR.
pub fn ordered_quietly(tree: Tree) -> Option<Tree> {
    let Some(b) = tree.get(DESC_KEY).ok()? else {
        return Some(tree);
    };
    match KeyDesc::decode(&b)?.key_order() {
        Ok(None) => Some(tree),
        Ok(Some(cmp)) => Some(tree.with_cmp(cmp)),
        Err(_) => None,
    }
}

/// `tree` comparing keys in the order of a tree keyed by `desc` (byte
/// order unless it has libc-collated text columns); an ERROR (42704) when
/// this machine lacks the locale such a column was keyed under.
pub fn ordered_by(tree: Tree, desc: &KeyDesc) -> Tree {
    match desc.key_order() {
        Ok(None) => tree,
        Ok(Some(cmp)) => tree.with_cmp(cmp),
        Err(why) => crate::pg::error::raise(
            pgrx::PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            format!("orioledb: tree {} {why}", tree.id()),
        ),
    }
}

impl Table {
    /// Reads the layout of `tree` (the descriptor item, if any).
    pub fn open(tree: Tree) -> Table {
        let layout = match tree
            .get(DESC_KEY)
            .unwrap_or_else(|e| crate::pg::engine::report(e))
        {
            Some(b) => match KeyDesc::decode(&b) {
                Some(d) => {
                    let tree = ordered_by(tree, &d);
                    return Table::new(tree, Layout::Keyed(Arc::new(d)));
                }
                None => crate::pg::error::raise(
                    pgrx::PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                    format!("orioledb: malformed key descriptor in tree {}", tree.id()),
                ),
            },
            None => Layout::RowId,
        };
        Table::new(tree, layout)
    }

    pub fn new(tree: Tree, layout: Layout) -> Table {
        Table(Rc::new(TableParts { tree, layout }))
    }

    pub fn desc(&self) -> Option<&KeyDesc> {
        match &self.layout {
            Layout::RowId => None,
            Layout::Keyed(d) => Some(d),
        }
    }

    /// Makes an empty tree keyed by `desc` (or by row id when None).
    pub fn set_layout(&mut self, desc: Option<KeyDesc>) {
        let r = match &desc {
            Some(d) => self.tree.upsert(DESC_KEY, &d.encode()),
            None => self.tree.delete(DESC_KEY).map(|_| ()),
        };
        r.unwrap_or_else(|e| crate::pg::engine::report(e));
        let parts = Rc::make_mut(&mut self.0);
        parts.layout = match desc {
            Some(d) => {
                parts.tree = ordered_by(parts.tree.with_cmp(Arc::new(Bytewise)), &d);
                Layout::Keyed(Arc::new(d))
            }
            None => {
                parts.tree = parts.tree.with_cmp(Arc::new(Bytewise));
                Layout::RowId
            }
        };
    }

    /// Whether a sequential scan starting now walks this table in row-id
    /// order (heap's row order): at most [`SMALL_TABLE_PAGES`] tree pages.
    pub fn scans_in_row_id_order(&self) -> bool {
        self.tree.approx_pages() <= SMALL_TABLE_PAGES
    }

    /// The tree key of version `id` whose key prefix is `prefix`.
    pub fn version_key(&self, prefix: &[u8], id: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(prefix.len() + 8);
        self.push_version_key(&mut k, prefix, id);
        k
    }

    /// Appends [`Table::version_key`] to `out`. In the row-id layout the
    /// prefix is empty, or a chain member's root key (see the module
    /// documentation).
    pub fn push_version_key(&self, out: &mut Vec<u8>, prefix: &[u8], id: u64) {
        match self.layout {
            Layout::RowId if prefix.is_empty() || prefix == tid::key(id) => {
                out.extend_from_slice(&tid::key(id))
            }
            Layout::RowId => {
                out.extend_from_slice(prefix);
                push_version_suffix(out, id);
            }
            Layout::Keyed(_) => {
                out.push(VERSION_TAG);
                out.extend_from_slice(prefix);
                push_version_suffix(out, id);
            }
        }
    }

    /// The key prefix of versions whose primary key encodes as `prefix`
    /// (what a custom scan bounds its ranges with).
    pub fn prefix_bound(prefix: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(prefix.len() + 1);
        k.push(VERSION_TAG);
        k.extend_from_slice(prefix);
        k
    }

    /// The key prefix (encoded primary key) in version key `key`: the key
    /// less its tag and row-id suffix; empty in the row-id layout.
    pub fn prefix_of<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        match self.layout {
            Layout::RowId => &[],
            Layout::Keyed(_) => &key[1..key.len() - SUFFIX],
        }
    }

    /// The row id of the version with tree key `key`.
    pub fn id_of(&self, key: &[u8]) -> u64 {
        match self.layout {
            Layout::RowId if key.len() == 8 => tid::from_key(key),
            Layout::RowId => version_suffix(key),
            Layout::Keyed(_) => version_suffix(key),
        }
        .unwrap_or(0)
    }

    /// The tree key of version `id` of a keyed table (or of a row-id
    /// chain member), None if no map entry names it.
    pub fn key_of(&self, id: u64) -> Option<Vec<u8>> {
        self.known_key(id).or_else(|| self.mapped_key(id))
    }

    /// The key of version `id` as this backend knows it without reading
    /// the tree (cached: a keyed version's, or a row-id chain member's it
    /// read or wrote).
    fn known_key(&self, id: u64) -> Option<Vec<u8>> {
        KEYS.with(|k| k.borrow().get(&(self.tree.id(), id)).cloned())
    }

    /// The key the row-id map gives version `id` (None: no entry).
    fn mapped_key(&self, id: u64) -> Option<Vec<u8>> {
        let prefix = self.read(&map_key(id))?;
        let k = self.version_key(&prefix, id);
        remember_key(self.tree.id(), id, &k);
        Some(k)
    }

    fn read(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.tree
            .get(key)
            .unwrap_or_else(|e| crate::pg::engine::report(e))
    }

    /// Queues the deletion of version `id`'s map entry (the version is
    /// being removed under a latch; the entry goes right after).
    pub fn forget_map_entry(&self, id: u64) {
        if let Layout::Keyed(_) = self.layout {
            // Logged: the version's removal is (a withdrawn speculative
            // insertion), so after a crash nothing would prune it again.
            DOOMED.with(|d| d.borrow_mut().push((self.tree.id(), map_key(id), true)));
        }
    }

    /// Reads version `id`.
    pub fn get(&self, id: u64) -> Option<Vec<u8>> {
        if let Some(k) = self.known_key(id) {
            return self.read(&k);
        }
        if let Layout::RowId = self.layout {
            // Most versions are under their own row id: one descent.
            if let Some(v) = self.read(&tid::key(id)) {
                return Some(v);
            }
        }
        self.read(&self.mapped_key(id)?)
    }

    /// Decides and changes version `id` under its leaf latch (`decide`
    /// sees None when the version does not exist).
    pub fn modify<R>(&self, id: u64, decide: impl FnOnce(Option<&[u8]>) -> (Change, R)) -> R {
        let mut decide = Some(decide);
        let r = self.with_key(id, |k, probe| {
            self.tree
                .modify(k, |cur| {
                    if cur.is_none() && probe {
                        return (Change::Keep, None);
                    }
                    let (c, r) = (decide.take().expect("decided once"))(cur);
                    (c, Some(r))
                })
                .unwrap_or_else(|e| crate::pg::engine::report(e))
        });
        match r {
            Some(r) => r,
            None => (decide.take().expect("not decided"))(None).1,
        }
    }

    /// Runs `attempt` on the key of version `id`: the key this backend
    /// knows, else (row-id layout) its own row id's with `probe` set — then
    /// `attempt` returns None, having changed nothing, when nothing is
    /// there — else the one its map entry gives. None when the version
    /// does not exist. Spares a change of a row-id version a lookup of
    /// its key first: most are under their own row id.
    fn with_key<R>(&self, id: u64, mut attempt: impl FnMut(&[u8], bool) -> Option<R>) -> Option<R> {
        if let Some(k) = self.known_key(id) {
            return attempt(&k, false);
        }
        if let Layout::RowId = self.layout {
            if let Some(r) = attempt(&tid::key(id), true) {
                return Some(r);
            }
        }
        let k = self.mapped_key(id)?;
        attempt(&k, false)
    }

    /// Remembers the key of a chain member of a row-id tree read by a scan
    /// (`key`): a change of it then finds it without asking the map.
    pub fn note_key(&self, key: &[u8]) {
        if is_member_key(key) && matches!(self.layout, Layout::RowId) {
            remember_key(self.tree.id(), self.id_of(key), key);
        }
    }

    /// Stores a new version `id` with key prefix `prefix` (empty in the
    /// row-id layout, whose chain members only an update stores); false if
    /// the id is taken.
    pub fn insert(&self, id: u64, prefix: &[u8], value: &[u8]) -> bool {
        let k = self.version_key(prefix, id);
        let r = match self.layout {
            // The map entry first (a version is never without it), logged
            // with the version as one record.
            Layout::Keyed(_) => self.tree.insert_pair((&map_key(id), prefix), &k, value),
            Layout::RowId => self.tree.insert(&k, value),
        };
        let fresh = r.unwrap_or_else(|e| crate::pg::engine::report(e));
        if fresh {
            self.remember_version(id, prefix);
        }
        fresh
    }

    /// Decides and changes version `id` as [`Table::modify`] does and, in
    /// the same step, stores the value `decide` returns with its change as
    /// new version `new_id` with key prefix `prefix` (an UPDATE: under one
    /// leaf latch and log record where the two share a leaf, see
    /// [`Tree::update`]). `decide` returns a value exactly when it puts.
    /// With `reuse`, `new_id` is the row id of the chain's root, whose map
    /// entry exists or, in the row-id layout, is its key (see
    /// `am::layout::hot`): only the version goes in, replacing a
    /// dead one there; None when that cannot be done on the old version's
    /// leaf (nothing changed: the caller takes a new id).
    pub fn update<R>(
        &self,
        id: u64,
        new_id: u64,
        reuse: bool,
        prefix: &[u8],
        decide: impl FnOnce(Option<&[u8]>) -> (Change, Option<Vec<u8>>, R),
    ) -> Option<R> {
        let nk = self.version_key(prefix, new_id);
        let map = map_key(new_id);
        let keyed = matches!(self.layout, Layout::Keyed(_));
        // A row-id tree's successor has a prefix (its root's key) exactly
        // when it is a chain member: then it needs a map entry too.
        let mapped = keyed || !prefix.is_empty();
        let first = (mapped && !reuse).then_some((&map[..], prefix));
        let succ = Successor {
            first,
            key: &nk,
            // A version's header may change before replay; its tuple never.
            stable: version::header_len,
            reuse,
        };
        let mut decide = Some(decide);
        // Some(None): taken (see `reuse`).
        let r = self.with_key(id, |k, probe| {
            let r = self
                .tree
                .update(k, &succ, |cur| {
                    if cur.is_none() && probe {
                        return (Change::Keep, None, None);
                    }
                    let (c, v, r) = (decide.take().expect("decided once"))(cur);
                    (c, v, Some(r))
                })
                .unwrap_or_else(|e| crate::pg::engine::report(e));
            match r {
                Some(None) => None,
                Some(Some(r)) => Some(Some(r)),
                None => Some(None),
            }
        });
        match r {
            Some(r) => r,
            None => Some((decide.take().expect("not decided"))(None).2),
        }
    }

    /// Remembers the key of version `id`, just stored with key prefix
    /// `prefix`.
    pub fn remember_version(&self, id: u64, prefix: &[u8]) {
        if matches!(self.layout, Layout::Keyed(_)) || !prefix.is_empty() {
            remember_key(self.tree.id(), id, &self.version_key(prefix, id));
        }
    }

    /// Stores new versions `(row id, key prefix, value)` as a batch (a
    /// load: COPY, a re-key's copy): each key range in key order through
    /// [`Tree::insert_run`], a leaf per descent and log record — map
    /// entries first, so a version is never without its entry. Returns a
    /// row id that is taken already (then part of the batch may be in).
    pub fn insert_many<P: AsRef<[u8]>, V: AsRef<[u8]>>(&self, rows: &[(u64, P, V)]) -> Option<u64> {
        self.insert_map_entries(rows)
            .or_else(|| self.insert_versions(rows))
    }

    /// The map entries of new versions `(row id, key prefix, _)` as a
    /// batch (nothing in the row-id layout); a row id that has one already.
    pub fn insert_map_entries<P: AsRef<[u8]>, V>(&self, rows: &[(u64, P, V)]) -> Option<u64> {
        let Layout::Keyed(_) = self.layout else {
            return None;
        };
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| rows[i].0);
        let maps: Vec<[u8; MAP_KEY]> = order.iter().map(|&i| map_key(rows[i].0)).collect();
        let items: Vec<(&[u8], &[u8])> = order
            .iter()
            .zip(&maps)
            .map(|(&i, m)| (&m[..], rows[i].1.as_ref()))
            .collect();
        self.run(&items).map(|at| rows[order[at]].0)
    }

    /// New versions `(row id, key prefix, value)` whose map entries are in
    /// as a batch; a row id that is taken.
    pub fn insert_versions<P: AsRef<[u8]>, V: AsRef<[u8]>>(&self, rows: &[(u64, P, V)]) -> Option<u64> {
        // The keys back to back in one buffer: a load's batch holds
        // thousands of rows, and a key each was as many allocations.
        let mut buf = Vec::new();
        let mut ends = Vec::with_capacity(rows.len());
        for (id, p, _) in rows {
            self.push_version_key(&mut buf, p.as_ref(), *id);
            ends.push(buf.len());
        }
        let key = |i: usize| &buf[if i == 0 { 0 } else { ends[i - 1] }..ends[i]];
        let mut order: Vec<usize> = (0..rows.len()).collect();
        let cmp = self.tree.cmp();
        order.sort_by(|&a, &b| cmp.cmp(key(a), key(b)));
        let items: Vec<(&[u8], &[u8])> = order
            .iter()
            .map(|&i| (key(i), rows[i].2.as_ref()))
            .collect();
        self.run(&items).map(|at| rows[order[at]].0)
    }

    fn run(&self, items: &[(&[u8], &[u8])]) -> Option<usize> {
        self.tree
            .insert_run(items)
            .unwrap_or_else(|e| crate::pg::engine::report(e))
    }

    /// Largest version value that fits beside a key with `prefix`.
    pub fn max_value(&self, prefix: &[u8]) -> usize {
        match self.layout {
            // Room for the member key and root trailer a HOT-like update
            // gives the next version.
            Layout::RowId => orioledb_engine::page::MAX_ITEM - (8 + SUFFIX + version::ROOT_LEN),
            Layout::Keyed(_) => keyed_max_value(prefix.len()),
        }
    }

    /// Bounds of the whole version range.
    pub fn all_versions(&self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        match self.layout {
            Layout::RowId => (Bound::Unbounded, Bound::Excluded(vec![MAP_TAG])),
            Layout::Keyed(_) => (
                Bound::Included(vec![VERSION_TAG]),
                Bound::Excluded(vec![VERSION_TAG + 1]),
            ),
        }
    }

    /// Versions in key order between `lo` and `hi` (both clamped to the
    /// version range: a bound in the descriptor or map range — a leaf's
    /// bounds, say — stands for that range's end).
    pub fn versions(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, dir: Direction) -> Cursor {
        use std::cmp::Ordering::*;
        let (alo, ahi) = self.all_versions();
        let tag = |b: &Bound<Vec<u8>>| match (b, &self.layout) {
            (Bound::Included(k) | Bound::Excluded(k), Layout::Keyed(_)) => {
                k.first().copied().unwrap_or(0).cmp(&VERSION_TAG)
            }
            // Row-id keys start with a zero byte; the map follows them.
            (Bound::Included(k) | Bound::Excluded(k), Layout::RowId)
                if k.first().is_some_and(|&b| b >= MAP_TAG) =>
            {
                Greater
            }
            _ => Equal,
        };
        let (lo, hi) = match (tag(&lo), tag(&hi)) {
            // Wholly outside the versions: an empty range.
            (Greater, _) | (_, Less) => (ahi.clone(), ahi),
            (lt, ht) => (
                if lt == Less || matches!(lo, Bound::Unbounded) { alo } else { lo },
                if ht == Greater || matches!(hi, Bound::Unbounded) { ahi } else { hi },
            ),
        };
        self.tree.range(lo, hi, dir)
    }

    /// Every version in key order, a leaf at a time (no allocation per
    /// version), while `f` returns true.
    pub fn for_each_version(&self, f: impl FnMut(&[u8], &[u8]) -> bool) {
        self.for_each_version_in(Bound::Unbounded, Bound::Unbounded, f)
    }

    /// [`Table::for_each_version`] between `lo` and `hi` (clamped to the
    /// version range).
    pub fn for_each_version_in(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        f: impl FnMut(&[u8], &[u8]) -> bool,
    ) {
        self.for_each_version_resuming(lo, hi, None, f);
    }

    /// [`Table::for_each_version_in`] starting at leaf page `resume` if
    /// that still holds `lo` (`Cursor::resume_at`). Returns where a walk
    /// of the range right after this one may resume: ANALYZE reads
    /// consecutive blocks without a descent each.
    pub fn for_each_version_resuming(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        resume: Option<u32>,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Option<u32> {
        let mut c = self.versions(lo, hi, Direction::Forward);
        if let Some(pno) = resume {
            c = c.resume_at(pno);
        }
        while let Some(leaf) = c.next_leaf() {
            let leaf = leaf.unwrap_or_else(|e| crate::pg::engine::report(e));
            for (k, v) in leaf.items() {
                if !f(k, v) {
                    return None;
                }
            }
        }
        Some(c.right_hint())
    }

    /// [`Table::for_each_version`] from the last version to the first.
    pub fn for_each_version_backward(&self, mut f: impl FnMut(&[u8], &[u8]) -> bool) {
        let mut c = self.versions(Bound::Unbounded, Bound::Unbounded, Direction::Backward);
        while let Some(leaf) = c.next_leaf() {
            let leaf = leaf.unwrap_or_else(|e| crate::pg::engine::report(e));
            for n in (0..leaf.len()).rev() {
                let (k, v) = leaf.item(n);
                if !f(k, v) {
                    return;
                }
            }
        }
    }

    /// Versions with row ids in `first..end`, in row-id order.
    pub fn id_range(&self, first: u64, end: u64) -> IdRange {
        self.ids(first, end, Direction::Forward)
    }

    /// Versions with row ids in `first..end`, in row-id order (`Forward`)
    /// or its reverse (`Backward`). Empty when `end <= first`.
    pub fn ids(&self, first: u64, end: u64, dir: Direction) -> IdRange {
        let end = end.max(first);
        let source = match self.layout {
            Layout::RowId => {
                let end = end.min(self.tree.next_id()).max(first);
                Source::Windows {
                    lo: first,
                    hi: end,
                    dir,
                    buf: Vec::new().into_iter(),
                }
            }
            Layout::Keyed(_) => Source::Map {
                cursor: self.tree.range(
                    Bound::Included(map_key(first).to_vec()),
                    Bound::Excluded(map_key(end).to_vec()),
                    dir,
                ),
                leaf: None,
                right: NO_PAGE,
            },
        };
        IdRange {
            table: self.clone(),
            redirects: false,
            source,
        }
    }

    /// As [`Table::ids`] for a small table (a sequential scan's walk in
    /// row-id order, [`SMALL_TABLE_PAGES`]): every version read in
    /// key order, a leaf at a time, and sorted by row id. The same versions
    /// as the map-driven walk without a lookup per row, and without a
    /// window per 16 TID blocks of a row-id table whose updates have
    /// spread its few rows' ids over thousands of blocks (pgbench's
    /// tellers without a key: 3,117 blocks for 100 rows, ~200 µs a scan).
    /// Versions are copied at the start, as heap's page-at-a-time scans
    /// judge a page's tuples when they reach it. A table grown past four
    /// times `small` pages since the scan chose this walk is walked lazily.
    pub fn small_ids(&self, first: u64, end: u64, dir: Direction, small: u64) -> IdRange {
        if self.tree.approx_pages() > 4 * small {
            return self.ids(first, end, dir);
        }
        let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
        self.for_each_version(|k, v| {
            if !is_version_key(k) {
                return true;
            }
            let id = self.id_of(k);
            if (first..end).contains(&id) {
                if is_member_key(k) && matches!(self.layout, Layout::RowId) {
                    remember_key_once(self.tree.id(), id, k);
                }
                out.push((id, v.to_vec()));
            }
            true
        });
        // Row ids are unique: no order among equals to keep.
        out.sort_unstable_by_key(|e| e.0);
        if dir == Direction::Backward {
            out.reverse();
        }
        IdRange {
            table: self.clone(),
            redirects: false,
            source: Source::Sorted(out.into_iter()),
        }
    }

    /// As [`Table::id_range`], and also the row ids of chains whose root
    /// is gone while later members live (a HOT chain's redirect,
    /// `am::layout::hot`), with an empty value.
    pub fn id_range_with_redirects(&self, first: u64, end: u64) -> IdRange {
        IdRange {
            redirects: true,
            ..self.ids(first, end, Direction::Forward)
        }
    }

    /// Row-id layout: the versions with row ids in `a..b` in row-id order
    /// (and, with `redirects`, the roots of chains rooted there whose root
    /// is gone). Members sort under their roots, so those of roots in the
    /// window come from the window's key range (members there with row ids
    /// beyond it are left to their own window) and those in the window
    /// whose roots lie before it from the map.
    fn id_window(&self, a: u64, b: u64, redirects: bool) -> Vec<(u64, Vec<u8>)> {
        let report = |e| crate::pg::engine::report(e);
        let mut out = Vec::new();
        let mut root_seen = None;
        let (lo, hi) = (tid::key(a).to_vec(), tid::key(b).to_vec());
        for item in self.tree.range(Bound::Included(lo), Bound::Excluded(hi), Direction::Forward) {
            let (k, v) = item.unwrap_or_else(report);
            if k.len() == 8 {
                let id = self.id_of(&k);
                root_seen = Some(id);
                out.push((id, v));
            } else if is_member_key(&k) {
                let (root, id) = (root_id(&k).unwrap_or(0), self.id_of(&k));
                if redirects && root_seen != Some(root) {
                    root_seen = Some(root);
                    out.push((root, Vec::new()));
                }
                if (a..b).contains(&id) {
                    remember_key(self.tree.id(), id, &k);
                    out.push((id, v));
                }
            }
        }
        if a > 0 {
            let (lo, hi) = (map_key(a).to_vec(), map_key(b).to_vec());
            for item in self.tree.range(Bound::Included(lo), Bound::Excluded(hi), Direction::Forward) {
                let (k, root) = item.unwrap_or_else(report);
                let (Some(id), Some(r)) = (map_id(&k), tid::from_key(&root)) else {
                    continue;
                };
                if r < a {
                    let k = member_key(r, id);
                    // Gone since the entry was read: pruned.
                    if let Some(v) = self.read(&k) {
                        remember_key(self.tree.id(), id, &k);
                        out.push((id, v));
                    }
                }
            }
        }
        out.sort_by_key(|e| e.0);
        out
    }

    /// Row-id layout: at most the smallest row id at or after `b` that has
    /// a version (None: none) — the first root key there, or the first
    /// member whose root lies before `b` (from the map). An empty window
    /// moves on to it, so gaps of row ids spent on updates cost nothing.
    fn next_used_id(&self, b: u64) -> Option<u64> {
        let first = |lo: Vec<u8>, hi: Bound<Vec<u8>>| {
            self.tree
                .range(Bound::Included(lo), hi, Direction::Forward)
                .next()
                .map(|item| item.unwrap_or_else(|e| crate::pg::engine::report(e)).0)
        };
        let root = first(tid::key(b).to_vec(), Bound::Excluded(vec![MAP_TAG]))
            .and_then(|k| root_id(&k));
        let member = first(map_key(b).to_vec(), Bound::Unbounded).and_then(|k| map_id(&k));
        root.into_iter().chain(member).min()
    }

    /// Row-id layout: at least the largest row id before `a` that has a
    /// version, and below `a` (None: none) — the last root before `a` or
    /// the last member before `a` (from the map).
    fn last_used_id(&self, a: u64) -> Option<u64> {
        let last = |lo: Vec<u8>, hi: Vec<u8>| {
            self.tree
                .range(Bound::Included(lo), Bound::Excluded(hi), Direction::Backward)
                .next()
                .map(|item| item.unwrap_or_else(|e| crate::pg::engine::report(e)).0)
        };
        let root = last(tid::key(0).to_vec(), tid::key(a).to_vec()).and_then(|k| root_id(&k));
        let member = last(map_key(0).to_vec(), map_key(a).to_vec()).and_then(|k| map_id(&k));
        root.into_iter().chain(member).max()
    }
}

/// Row ids a row-id layout's [`IdRange`] reads at a time (16 TID blocks).
const ID_WINDOW: u64 = 16 * tid::PER_BLOCK;

/// Where an [`IdRange`] reads.
enum Source {
    /// Primary-key layout: the row-id map, in row-id order, and the leaf
    /// the last version was read from, a copy as a cursor's (rows loaded in
    /// key order have the next row id's version beside it: no descent per
    /// row).
    /// `right`: the page to try first for the first leaf (NO_PAGE: none).
    Map {
        cursor: Cursor,
        leaf: Option<Leaf>,
        right: u32,
    },
    /// Versions read at the start, in the walk's order
    /// ([`Table::small_ids`]).
    Sorted(std::vec::IntoIter<(u64, Vec<u8>)>),
    /// Row-id layout: the row ids `lo..hi` not read yet, a window at a time
    /// from the end `dir` starts at; `buf` the rest of the current window,
    /// in `dir` order.
    Windows {
        lo: u64,
        hi: u64,
        dir: Direction,
        buf: std::vec::IntoIter<(u64, Vec<u8>)>,
    },
}

/// Versions with row ids in a range, in row-id order or its reverse:
/// `(id, value)`. Invariant: a `Map` source's cursor covers only row-id map
/// keys; a `Windows` source yields each row id of its range once.
pub struct IdRange {
    table: Table,
    /// Also yield chains whose root is gone (empty values).
    redirects: bool,
    source: Source,
}

impl IdRange {
    /// Starts a keyed walk at page `hint` (NO_PAGE: none), where another
    /// walk of this table left off ([`IdRange::resume_hint`]): a pass over
    /// consecutive blocks, one walk each, continues along right links
    /// instead of descending again. Only a hint: the walk reads the page
    /// anew, never an earlier walk's copy (its versions may have changed
    /// since).
    pub fn resuming(mut self, hint: u32) -> IdRange {
        if let Source::Map { right, .. } = &mut self.source {
            *right = hint;
        }
        self
    }

    /// Where a keyed walk would read its next leaf: the right sibling of
    /// the last it read (NO_PAGE otherwise), for [`IdRange::resuming`].
    pub fn resume_hint(&self) -> u32 {
        match &self.source {
            Source::Map { leaf: Some(l), .. } => l.right(),
            Source::Map { right, .. } => *right,
            _ => NO_PAGE,
        }
    }

    /// The value of version key `key`, from the cached leaf when it holds
    /// the key's range (else from its right sibling, `right` before the
    /// first leaf, when that does).
    fn version(table: &Table, leaf: &mut Option<Leaf>, right: u32, key: &[u8]) -> Option<Vec<u8>> {
        let cmp = table.tree.cmp();
        if let Some(found) = leaf.as_ref().and_then(|l| l.lookup(&*cmp, key)) {
            return found.map(<[u8]>::to_vec);
        }
        let hint = leaf.as_ref().map_or(right, Leaf::right);
        let l = table
            .tree
            .leaf_at(key, hint)
            .unwrap_or_else(|e| crate::pg::engine::report(e));
        let found = l.lookup(&*cmp, key).flatten().map(<[u8]>::to_vec);
        *leaf = Some(l);
        found
    }
}

impl Iterator for IdRange {
    type Item = (u64, Vec<u8>);

    fn next(&mut self) -> Option<(u64, Vec<u8>)> {
        let table = &self.table;
        match &mut self.source {
            Source::Map {
                cursor,
                leaf,
                right,
            } => loop {
                let (k, v) = cursor
                    .next()?
                    .unwrap_or_else(|e| crate::pg::engine::report(e));
                let id = map_id(&k).expect("a map key");
                let key = table.version_key(&v, id);
                if let Some(value) = Self::version(table, leaf, *right, &key) {
                    return Some((id, value));
                }
                if self.redirects {
                    return Some((id, Vec::new()));
                }
            },
            Source::Sorted(items) => items.next(),
            Source::Windows { lo, hi, dir, buf } => loop {
                if let Some(item) = buf.next() {
                    return Some(item);
                }
                if *lo >= *hi {
                    return None;
                }
                let (a, b) = match dir {
                    Direction::Forward => (*lo, (*hi).min(lo.saturating_add(ID_WINDOW))),
                    Direction::Backward => ((*lo).max(hi.saturating_sub(ID_WINDOW)), *hi),
                };
                let mut w = table.id_window(a, b, self.redirects);
                let empty = w.is_empty();
                match dir {
                    Direction::Forward if empty => {
                        *lo = table.next_used_id(b).unwrap_or(*hi).clamp(b, *hi);
                    }
                    Direction::Forward => *lo = b,
                    Direction::Backward if empty => {
                        *hi = table.last_used_id(a).map_or(*lo, |x| x + 1).clamp(*lo, a);
                    }
                    Direction::Backward => {
                        *hi = a;
                        w.reverse();
                    }
                }
                *buf = w.into_iter();
            },
        }
    }
}
