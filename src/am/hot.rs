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
//! Tables in row-id order (no primary key) have no chains: their versions
//! are found by row id alone, and every UPDATE inserts index entries.

use crate::am::table::Table;
use orioledb_engine::Direction;
use orioledb_engine::version::{self, bits, Header};
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
/// first: the version itself and, in a keyed table, the heap-only versions
/// of its chain. `first` is the version at `root` when the caller read it
/// already (None: not read yet, or gone).
pub fn chain(table: &Table, root: u64, first: Option<Vec<u8>>) -> Vec<(u64, Vec<u8>)> {
    let first = first.or_else(|| table.get(root));
    let single = |v: Option<Vec<u8>>| v.map(|v| vec![(root, v)]).unwrap_or_default();
    if table.desc().is_none() {
        return single(first);
    }
    if let Some(v) = &first {
        // Not HOT-updated: nothing follows it in a chain (an updater that
        // aborted may have left a heap-only version, dead to everyone).
        if Header::decode(v).is_some_and(|h| !hot_updated(&h)) {
            return single(first);
        }
    }
    // The root's map entry outlives its version (the redirect).
    let Some(key) = table.key_of(root) else {
        return Vec::new();
    };
    let lo = Table::prefix_bound(table.prefix_of(&key));
    let mut out = Vec::new();
    // Newest first, down to the root itself.
    for item in table.versions(Bound::Included(lo), Bound::Included(key), Direction::Forward) {
        let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
        let id = table.id_of(&k);
        let Some(h) = Header::decode(&v) else {
            continue;
        };
        if id == root || (heap_only(&h) && version::hot_root(&h, &v) == Some(root)) {
            out.push((id, v));
        }
    }
    out.reverse();
    // The cursor holds no latch between leaves: an update may have added a
    // member after it passed (members sort newest first). The newest member
    // read names it; without this a VACUUM could judge the chain by a
    // member whose updater committed since and call it dead.
    while let Some((last, v)) = out.last() {
        let Some(h) = Header::decode(v).filter(|h| hot_updated(h) && h.ctid > *last) else {
            break;
        };
        let Some(next) = table.get(h.ctid) else {
            // Not inserted yet: its updater still runs, so the member read
            // is not dead to anyone.
            break;
        };
        match Header::decode(&next) {
            Some(nh) if heap_only(&nh) && version::hot_root(&nh, &next) == Some(root) => {
                out.push((h.ctid, next));
            }
            _ => break,
        }
    }
    out
}

/// The chains with roots in `first..end`, in row-id order: each root with
/// its members (see [`chain`]). Redirects count as roots; heap-only
/// versions in the range are reached through their own roots, wherever
/// those are, so no version comes twice.
pub fn roots_in(
    table: Table,
    first: u64,
    end: u64,
) -> impl Iterator<Item = (u64, Vec<(u64, Vec<u8>)>)> {
    table
        .id_range_with_redirects(first, end)
        .filter_map(move |(id, v)| {
            let present = !v.is_empty();
            if present && Header::decode(&v).is_some_and(|h| heap_only(&h)) {
                return None;
            }
            let members = chain(&table, id, present.then_some(v));
            (!members.is_empty()).then_some((id, members))
        })
}
