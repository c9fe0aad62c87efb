//! HOT-like updates of primary-key-ordered tables: an UPDATE that changes
//! no indexed column (and so keeps the primary key) inserts no index
//! entries. Its new version is *heap-only* (`bits::HEAP_ONLY`, ending with
//! its chain root's row id, `version::HOT_ROOT`); the old one is
//! `bits::HOT_UPDATED`. Index entries name the chain's *root* — the first
//! version, the only one that got entries — and a fetch through one
//! returns the member the snapshot sees.
//!
//! A chain's members all share the root's key prefix (the key is indexed by
//! the primary key, so a HOT update keeps it; `modify::update` also
//! compares the prefixes), so they are the versions of that prefix whose
//! root trailer names the root: one short range of the tree, found from the
//! root's row-id map entry. Pruning may remove any member once it is dead
//! to everyone — also the root — but a HOT-updated root keeps its map entry
//! (it stays as the chain's *redirect*, heap's redirect line pointer), so
//! index entries keep finding the chain. A chain whose members are all gone
//! reads as dead, so index entries pointing at it are removed as before.
//!
//! Tables in row-id order (no primary key) have chains too: a member's key
//! is its root's row id followed by its own as a version suffix
//! (`key_format::member_key`), so a chain is the key range from its root's row
//! id to the next one, whether the root is still there or not (no
//! redirect entry is needed), and a member's map entry names its root.
//! Such a chain takes its root's row id back as a keyed one does (once
//! the table is past the small tables scanned in heap's row order): the
//! new version then goes under the root's own 8-byte key, with no map entry.

use crate::am::layout::table::Table;
use orioledb_engine::Direction;
use orioledb_engine::version::{self, bits, tid, Header};
use std::ops::Bound;

/// Whether `h` is a heap-only version (no index entry names it).
pub fn heap_only(h: &Header) -> bool {
    h.infomask2 & bits::HEAP_ONLY != 0
}

/// Whether `h` was HOT-updated (its successor is in its chain).
pub fn hot_updated(h: &Header) -> bool {
    h.infomask2 & bits::HOT_UPDATED != 0
}

/// The row id index entries use for version `id` (value `v`): its chain's
/// root.
pub fn root_of(h: &Header, v: &[u8], id: u64) -> u64 {
    if heap_only(h) {
        version::hot_root(h, v).unwrap_or(id)
    } else {
        id
    }
}

/// The versions an index entry naming row id `root` stands for, oldest
/// first: the version itself and the heap-only versions of its chain.
/// `first` is the version at `root` when the caller read it already (None:
/// not read yet, or gone).
pub fn chain(table: &Table, root: u64, first: Option<Vec<u8>>) -> Vec<(u64, Vec<u8>)> {
    let first = first.or_else(|| table.get(root));
    chain_of(table, root, first)
}

/// [`chain`] given the version at `root` (None: gone).
fn chain_of(table: &Table, root: u64, first: Option<Vec<u8>>) -> Vec<(u64, Vec<u8>)> {
    let single = |v: Option<Vec<u8>>| v.map(|v| vec![(root, v)]).unwrap_or_default();
    if let Some(v) = &first {
        // The chain's first version, not HOT-updated: nothing follows it
        // (an updater that aborted may have left a heap-only version, dead
        // to everyone). A heap-only version in the root's slot is a later
        // member that took the row id back; others may be older.
        if Header::decode(v, root).is_some_and(|h| !hot_updated(&h) && !heap_only(&h)) {
            return single(first);
        }
    }
    let mut out = if table.desc().is_none() {
        row_id_members(table, root)
    } else {
        keyed_members(table, root)
    };
    in_update_order(&mut out, root);
    // The cursor holds no latch between leaves: an update may have added a
    // member after it passed. The newest member read names it; without
    // this a VACUUM could judge the chain by a member whose updater
    // committed since and call it dead.
    while let Some((last, v)) = out.last() {
        let Some(h) = Header::decode(v, *last).filter(|h| hot_updated(h) && h.ctid != *last) else {
            break;
        };
        let next_id = h.ctid;
        let Some(next) = table.get(next_id) else {
            // Not inserted yet: its updater still runs, so the member read
            // is not dead to anyone.
            break;
        };
        match Header::decode(&next, next_id) {
            Some(nh) if heap_only(&nh) && version::hot_root(&nh, &next) == Some(root) => {
                if out.iter().any(|(i, w)| *i == next_id && *w == next) {
                    break;
                }
                // A version taken back replaces the dead one read there.
                out.retain(|(i, _)| *i != next_id);
                out.push((next_id, next));
            }
            _ => break,
        }
    }
    out
}

/// The versions of the keyed chain rooted at `root`, in row-id order.
fn keyed_members(table: &Table, root: u64) -> Vec<(u64, Vec<u8>)> {
    // The root's map entry outlives its version (the redirect).
    let Some(key) = table.key_of(root) else {
        return Vec::new();
    };
    let lo = Table::prefix_bound(table.prefix_of(&key));
    let mut out = Vec::new();
    // Members have row ids from the root's on (only the root's is taken
    // back), and sort newest first: down to the root itself.
    for item in table.versions(Bound::Included(lo), Bound::Included(key), Direction::Forward) {
        let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
        let id = table.id_of(&k);
        if is_member(id, &v, root) {
            out.push((id, v));
        }
    }
    out.reverse();
    out
}

/// The versions of the row-id chain rooted at `root`, in row-id order:
/// the root's key, then its members' keys, newest first.
fn row_id_members(table: &Table, root: u64) -> Vec<(u64, Vec<u8>)> {
    let (lo, hi) = (tid::key(root).to_vec(), tid::key(root + 1).to_vec());
    let mut first = None;
    let mut members = Vec::new();
    for item in table.versions(Bound::Included(lo), Bound::Excluded(hi), Direction::Forward) {
        let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
        let id = table.id_of(&k);
        if id == root {
            first = Some((id, v));
        } else if is_member(id, &v, root) {
            crate::am::layout::table::remember_key(table.tree.id(), id, &k);
            members.push((id, v));
        }
    }
    members.reverse();
    first.into_iter().chain(members).collect()
}

/// Whether version `id` (value `v`) belongs to the chain rooted at `root`.
fn is_member(id: u64, v: &[u8], root: u64) -> bool {
    id == root
        || Header::decode(v, id).is_some_and(|h| heap_only(&h) && version::hot_root(&h, v) == Some(root))
}

/// Puts `members` (in row-id order) in update order. Row ids grow with
/// each update, except that a HOT-like update may take the root's id back
/// (see [`reusable_root`]): a heap-only version in the root's slot follows
/// the member whose update made it (ctid naming the root), or comes first
/// when that one is gone.
fn in_update_order(members: &mut Vec<(u64, Vec<u8>)>, root: u64) {
    let Some(at) = members.iter().position(|(id, v)| {
        *id == root && Header::decode(v, *id).is_some_and(|h| heap_only(&h))
    }) else {
        return;
    };
    let taken = members.remove(at);
    // The newest such member (ids grow): older ones named earlier
    // versions in that slot, which were dead before it was taken back.
    let after = members.iter().rposition(|(id, v)| {
        *id != root && Header::decode(v, *id).is_some_and(|h| hot_updated(&h) && h.ctid == root)
    });
    members.insert(after.map_or(0, |i| i + 1), taken);
}

/// The row id a HOT-like update of version `old` tries to take back
/// instead of a new one: its chain's root's, when `old` is a later member.
/// The root's map entry stays while its chain lives (the redirect; a
/// row-id table's root needs none, its key is its id), so the new version
/// needs no map entry and leaves none to delete: a row updated again and
/// again alternates between two row ids. Whether the root's slot
/// is free — empty, or holding a version dead to everyone — is decided
/// under the leaf latch (`Successor::reuse`, `rows::replaceable_version`),
/// not looked up first (that lookup was a descent per update, 5 µs of
/// TPC-B's): should it not be free, or not on the old version's leaf, the
/// update goes again with a new id. A version that owns toast values is
/// never replaced (removing it would have to queue them, and a crash after
/// the update would lose that). Like pruning, this asks only this server's
/// snapshots: the update's record carries the replaced version's updater
/// (`Pruner::conflict_horizon`) for replay on a hot standby to cancel the
/// queries that may still see it.
pub fn reusable_root(table: &Table, old: u64) -> Option<u64> {
    // A small table without a key is scanned in row-id order, which is
    // heap's order only while an updated row's ids grow (heap puts the new
    // version after its page's other tuples): one back under its root's
    // id would come first again (PostgreSQL's regression tests print such
    // tables unordered). Larger ones are read in key order, members
    // beside their roots, either way.
    if table.desc().is_none() && table.scans_in_row_id_order() {
        return None;
    }
    let root = root_of_id(table, old)?;
    (root != old).then_some(root)
}

/// The chain root of version `id` (None: gone). Its root never changes,
/// so the copy the last read kept will do.
pub fn root_of_id(table: &Table, id: u64) -> Option<u64> {
    let v = crate::am::layout::table::last_read(table.tree.id(), id).or_else(|| table.get(id))?;
    let h = Header::decode(&v, id)?;
    Some(root_of(&h, &v, id))
}

/// Whether the map entry of version `id` (header `h`, value `v`), being
/// pruned, stays as its chain's redirect: a HOT-updated first version, or
/// any version in its root's slot (one that took the id back: the chain's
/// later members may still come back to it).
pub fn redirect_stays(h: &Header, v: &[u8], id: u64) -> bool {
    if heap_only(h) {
        version::hot_root(h, v) == Some(id)
    } else {
        hot_updated(h)
    }
}

/// A pruner's step for dead version `key` (header `h`, value `v`) of
/// tree `tree`: its map entry is queued for deletion unless it stays as its
/// chain's redirect ([`redirect_stays`]; its own id read from either key
/// form, since a row-id root's 8-byte key may hold a heap-only version that
/// took the root's id back).
pub fn version_pruned(tree: orioledb_engine::TreeId, key: &[u8], h: &Header, v: &[u8]) {
    if !redirect_stays(h, v, orioledb_engine::key_format::own_id(key)) {
        crate::am::layout::table::version_pruned(tree, key);
    }
}

/// The chains with roots in `first..end`, in row-id order: each root with
/// its members (see [`chain`]). Redirects count as roots; heap-only
/// versions in the range are reached through their own roots, wherever
/// those are, so no version comes twice.
pub fn roots_in(
    table: Table,
    first: u64,
    end: u64,
) -> Box<dyn Iterator<Item = (u64, Vec<(u64, Vec<u8>)>)>> {
    if table.desc().is_none() {
        return Box::new(row_id_roots_in(table, first, end));
    }
    Box::new(table
        .id_range_with_redirects(first, end)
        .filter_map(move |(id, v)| {
            let present = !v.is_empty();
            // A heap-only version is reached through its root, unless it
            // is in the root's slot (it took the id back).
            if present
                && Header::decode(&v, id)
                    .is_some_and(|h| heap_only(&h) && version::hot_root(&h, &v) != Some(id))
            {
                return None;
            }
            let members = chain(&table, id, present.then_some(v));
            (!members.is_empty()).then_some((id, members))
        }))
}

/// [`roots_in`] of a row-id table: its chains are the key ranges of the
/// row ids, a root's key followed by its members' (the root may be gone).
fn row_id_roots_in(
    table: Table,
    first: u64,
    end: u64,
) -> impl Iterator<Item = (u64, Vec<(u64, Vec<u8>)>)> {
    let end = end.min(tid::LIMIT).max(first);
    let (lo, hi) = (tid::key(first).to_vec(), tid::key(end).to_vec());
    let mut last = None;
    table
        .versions(Bound::Included(lo), Bound::Excluded(hi), Direction::Forward)
        .filter_map(move |item| {
            let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
            let root = crate::am::layout::table::root_id(&k)?;
            if last == Some(root) {
                return None;
            }
            last = Some(root);
            let members = chain_of(&table, root, (k.len() == 8).then_some(v));
            (!members.is_empty()).then_some((root, members))
        })
}
