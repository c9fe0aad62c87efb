//! In-process engine tests: model-based, concurrency, checkpoints, crashes
//! and corruption. No server involved.
mod checkpoint;
mod concurrency;
mod corruption;
mod durability;
mod meta;
mod model;
mod recovery;
mod residency;

use crate::io::StdIo;
use crate::{Engine, Tree, TreeOptions};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// SplitMix64: small, seedable, good enough to drive workloads.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn key(i: u64) -> Vec<u8> {
    // Variable-length keys: a fixed big-endian prefix keeps the order numeric.
    let mut k = (i as u32).to_be_bytes().to_vec();
    k.extend(std::iter::repeat_n(b'k', (i % 7) as usize));
    k
}

/// A compressible value whose bytes depend on (i, version).
pub fn value(i: u64, version: u64, len: usize) -> Vec<u8> {
    let mut v = format!("v{i}:{version}:").into_bytes();
    while v.len() < len {
        v.push(b'a' + ((i + version + v.len() as u64) % 4) as u8);
    }
    v.truncate(len);
    v
}

pub fn open(dir: &Path, nbuffers: usize) -> Engine {
    Engine::open(dir, nbuffers, Arc::new(StdIo::new())).unwrap()
}

pub fn tree(e: &Engine, id: u32, compress: i32) -> Tree {
    e.open_tree(
        id,
        TreeOptions {
            compress,
            ..Default::default()
        },
    )
    .unwrap()
}

pub fn contents(t: &Tree) -> BTreeMap<Vec<u8>, Vec<u8>> {
    t.scan().map(|r| r.unwrap()).collect()
}

pub fn assert_valid(t: &Tree) {
    if let Err(e) = t.check() {
        panic!("tree {} fails the checker: {e}", t.id());
    }
}

/// A load's batches (`Tree::insert_run`): ascending keys fill leaves as
/// ordered single inserts do (an append split leaves the left page 90%
/// full), with one log record per leaf rather than per key; a run into
/// the middle of a tree still lands every key; a key that exists stops
/// the run there and reports its index.
#[test]
fn insert_runs_pack_leaves_and_stop_at_a_taken_key() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(crate::wal::MemWal::default());
    let e = Engine::open_logged(dir.path(), 256, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    let t = e
        .open_tree(crate::TreeId::new(1, 1), TreeOptions::default())
        .unwrap();
    let mut model = BTreeMap::new();
    let items: Vec<(Vec<u8>, Vec<u8>)> = (0..20_000u64)
        .filter(|i| i % 3 != 0)
        .map(|i| (key(i), value(i, 0, 90)))
        .collect();
    for chunk in items.chunks(1000) {
        let run: Vec<(&[u8], &[u8])> = chunk.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        let before = wal.insert_position();
        assert_eq!(t.insert_run(&run).unwrap(), None);
        // About a record per leaf (plus the splits' single inserts).
        assert!(wal.insert_position() - before < 2 * 1000 / 40, "one record per key");
    }
    model.extend(items.iter().cloned());
    let pages = t.stats().pages;
    let bytes: usize = items.iter().map(|(k, v)| k.len() + v.len() + 8).sum();
    assert!(
        (pages as usize) * crate::page::PAGE_SIZE < bytes * 100 / 80,
        "leaves under 80% full: {pages} pages for {bytes} bytes"
    );
    // Into the middle of the tree: the keys skipped above.
    let gaps: Vec<(Vec<u8>, Vec<u8>)> = (0..20_000u64)
        .filter(|i| i % 3 == 0)
        .map(|i| (key(i), value(i, 1, 40)))
        .collect();
    let run: Vec<(&[u8], &[u8])> = gaps.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    assert_eq!(t.insert_run(&run).unwrap(), None);
    model.extend(gaps.iter().cloned());
    assert_valid(&t);
    assert!(contents(&t) == model);
    // A taken key: the run stops at it, the keys before it are in.
    let (k30, v30) = (key(30_000), value(30_000, 0, 10));
    let taken = key(100);
    let run: Vec<(&[u8], &[u8])> = vec![(&k30[..], &v30[..])];
    assert_eq!(t.insert_run(&run).unwrap(), None);
    let (k1, v1) = (key(29_999), value(1, 1, 10));
    let run: Vec<(&[u8], &[u8])> = vec![(&taken[..], &v1[..]), (&k1[..], &v1[..])];
    assert_eq!(t.insert_run(&run).unwrap(), Some(0));
    assert_eq!(t.get(&k1).unwrap(), None);
    assert_eq!(t.get(&taken).unwrap(), model.get(&taken).cloned());
    // Keys out of order are refused before any page changes.
    let (ka, kb) = (key(40_001), key(40_000));
    let run: Vec<(&[u8], &[u8])> = vec![(&ka[..], &v1[..]), (&kb[..], &v1[..])];
    assert!(t.insert_run(&run).is_err());
    assert_eq!((t.get(&ka).unwrap(), t.get(&kb).unwrap()), (None, None));
    // Replaying the log into an empty engine gives the same tree.
    let dir2 = tempfile::tempdir().unwrap();
    let e2 = Engine::open_logged(dir2.path(), 256, Arc::new(StdIo::new()), None).unwrap();
    let bytewise = |_| -> Arc<dyn crate::order::KeyCmp> { Arc::new(crate::order::Bytewise) };
    for rec in wal.since(1) {
        e2.replay(&rec, &bytewise).unwrap();
    }
    let t2 = e2.tree(crate::TreeId::new(1, 1)).unwrap();
    assert_valid(&t2);
    assert!(contents(&t2) == contents(&t));
}

/// A pruner for tests: values whose first byte is 0xDD are dead to
/// everyone.
struct DropDead;
impl crate::btree::Pruner for DropDead {
    fn prune(&self, _key: &[u8], value: &[u8]) -> crate::btree::Prune {
        if value.first() == Some(&0xDD) {
            crate::btree::Prune::Remove
        } else {
            crate::btree::Prune::Keep
        }
    }

    fn replaceable(&self, _key: &[u8], value: &[u8]) -> bool {
        value.first() == Some(&0xDD)
    }
}

/// A logged engine in `dir` with tree (1, `n`), pruned by [`DropDead`].
fn pruned_logged_tree(dir: &std::path::Path, n: u32) -> (Engine, Arc<crate::wal::MemWal>, Tree) {
    let wal = Arc::new(crate::wal::MemWal::default());
    let e = Engine::open_logged(dir, 256, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    let opts = TreeOptions {
        pruner: Some(Arc::new(DropDead) as Arc<dyn crate::btree::Pruner>),
        ..Default::default()
    };
    let t = e.open_tree(crate::TreeId::new(1, n), opts).unwrap();
    (e, wal, t)
}

/// Tree `id` as all of `wal` replayed into an empty engine in `dir` makes
/// it (checked valid).
fn replayed(dir: &std::path::Path, wal: &crate::wal::MemWal, id: crate::TreeId) -> (Engine, Tree) {
    let e = Engine::open_logged(dir, 256, Arc::new(StdIo::new()), None).unwrap();
    let bytewise = |_| -> Arc<dyn crate::order::KeyCmp> { Arc::new(crate::order::Bytewise) };
    for rec in wal.since(1) {
        e.replay(&rec, &bytewise).unwrap();
    }
    let t = e.tree(id).unwrap();
    assert_valid(&t);
    (e, t)
}

/// The `v` items of `t` that [`DropDead`] keeps.
fn live_versions(t: &Tree) -> BTreeMap<Vec<u8>, Vec<u8>> {
    contents(t)
        .into_iter()
        .filter(|(k, v)| k[0] == b'v' && v[0] != 0xDD)
        .collect()
}

/// An update whose leaf is full of dead versions prunes the leaf and stays
/// one change and one record (as a put prunes before it splits), instead of
/// a separate change of the old value and a second descent for the new one;
/// the tree keeps its size, and replay gives the same live contents.
#[test]
fn updates_of_a_full_leaf_prune_it_and_stay_one_record() {
    use crate::btree::{Change, Successor};
    let dir = tempfile::tempdir().unwrap();
    let (_e, wal, t) = pruned_logged_tree(dir.path(), 3);
    let vkey = |row: u32, id: u64| [&b"v"[..], &row.to_be_bytes(), &(!id).to_be_bytes()].concat();
    let stable: fn(&[u8]) -> usize = |_| 16;
    // Ten rows and their dead versions share one leaf (about 44 items).
    let rows = 10u32;
    let mut cur: Vec<u64> = (0..rows as u64).collect();
    for row in 0..rows {
        let v = [vec![1u8; 16], value(row as u64, 0, 150)].concat();
        assert!(t.insert(&vkey(row, row as u64), &v).unwrap());
    }
    let mut rng = Rng(11);
    let mut next = rows as u64;
    let before = wal.insert_position();
    let updates = 2000u64;
    for n in 0..updates {
        let row = rng.below(rows as u64) as u32;
        let (old, new) = (cur[row as usize], next);
        next += 1;
        let (ok, nk) = (vkey(row, old), vkey(row, new));
        // No map entries: they would fill the leaf that the test keeps.
        let succ = Successor {
            first: None,
            key: &nk,
            stable,
            reuse: false,
        };
        t.update(&ok, &succ, |v| {
            // The old version dies with its update (its updater commits at
            // once, and nobody else looks).
            let mut nv = v.expect("the old version exists").to_vec();
            nv[0] = 0xDD;
            let mut sv = nv.clone();
            sv[..16].fill(2);
            sv[20] = n as u8;
            (Change::Put(nv), Some(sv), ())
        })
        .unwrap();
        cur[row as usize] = new;
    }
    let records = wal.insert_position() - before;
    assert_eq!(records, updates, "every update is one record");
    assert_valid(&t);
    assert_eq!(t.stats().pages, 1, "the leaf never split");
    let now = live_versions(&t);
    assert_eq!(now.len(), rows as usize);
    for (row, id) in cur.iter().enumerate() {
        assert!(now.contains_key(&vkey(row as u32, *id)));
    }
    // Replay into an empty engine: the same live versions (replay keeps
    // the dead ones: pruning is not logged).
    let dir2 = tempfile::tempdir().unwrap();
    let (_e2, t2) = replayed(dir2.path(), &wal, crate::TreeId::new(1, 3));
    assert!(live_versions(&t2) == now);
}

/// A successor with `reuse` replaces a value the pruner calls replaceable
/// (a HOT chain taking its root row id back) and is refused, changing
/// nothing, over a live one or outside the old value's leaf: rows
/// that alternate between two keys keep exactly two items each, every
/// update stays one record, and replay gives the same live contents.
#[test]
fn reusing_successors_replace_only_dead_values() {
    use crate::btree::{Change, Successor};
    let dir = tempfile::tempdir().unwrap();
    let (_e, wal, t) = pruned_logged_tree(dir.path(), 4);
    let vkey = |row: u32, slot: u64| [&b"v"[..], &row.to_be_bytes(), &(!slot).to_be_bytes()].concat();
    let stable: fn(&[u8]) -> usize = |_| 16;
    let rows = 30u32;
    for row in 0..rows {
        let v = [vec![1u8; 16], value(row as u64, 0, 100)].concat();
        assert!(t.insert(&vkey(row, 0), &v).unwrap());
    }
    let mut cur = vec![0u64; rows as usize];
    let mut rng = Rng(12);
    let before = wal.insert_position();
    let updates = 3000u64;
    let update = |old: &[u8], new: &[u8], n: u64| {
        let succ = Successor {
            first: None,
            key: new,
            stable,
            reuse: true,
        };
        t.update(old, &succ, |v| {
            let mut nv = v.expect("the old version exists").to_vec();
            nv[0] = 0xDD;
            let mut sv = nv.clone();
            sv[..16].fill(2);
            sv[20] = n as u8;
            (Change::Put(nv), Some(sv), ())
        })
    };
    for n in 0..updates {
        let row = rng.below(rows as u64) as u32;
        let old = cur[row as usize];
        update(&vkey(row, old), &vkey(row, 1 - old), n).unwrap();
        cur[row as usize] = 1 - old;
    }
    assert_eq!(wal.insert_position() - before, updates, "every update is one record");
    assert_valid(&t);
    let all = contents(&t);
    assert_eq!(all.len(), 2 * rows as usize, "two keys per row, reused");
    let now = live_versions(&t);
    assert_eq!(now.len(), rows as usize);
    // Over a live value: refused, and nothing changes.
    let row = 0u32;
    let live_key = vkey(row, cur[0]);
    let other = vkey(row, 1 - cur[0]);
    let mut other_live = all.iter().find(|(k, _)| **k == other).unwrap().1.clone();
    other_live[0] = 1;
    assert!(t.replace(&other, &other_live).unwrap());
    let before_refusal = contents(&t);
    assert!(update(&live_key, &other, 0).unwrap().is_none(), "a live successor key is refused");
    assert!(contents(&t) == before_refusal, "a refused update changes nothing");
    // Outside the old value's leaf: refused too, even where the key is free.
    for n in 0..200u64 {
        assert!(t.insert(&[&b"z"[..], &n.to_be_bytes()].concat(), &value(n, 1, 100)).unwrap());
    }
    assert!(t.stats().pages > 2);
    let far = [&b"z"[..], &u64::MAX.to_be_bytes()].concat();
    let before_refusal = contents(&t);
    assert!(update(&live_key, &far, 0).unwrap().is_none(), "a successor on another leaf is refused");
    assert!(contents(&t) == before_refusal, "a refused update changes nothing");
    // Replay into an empty engine: the same live versions.
    let dir2 = tempfile::tempdir().unwrap();
    let (_e2, t2) = replayed(dir2.path(), &wal, crate::TreeId::new(1, 4));
    assert!(live_versions(&t2) == live_versions(&t));
}

/// An engine on `dir` with tree 1, whose pruner drops values marked dead
/// (first byte 0xDD).
fn drop_dead_tree(dir: &std::path::Path) -> (Engine, Tree) {
    let e = Engine::open(dir, 64, Arc::new(StdIo::new())).unwrap();
    let opts = TreeOptions {
        pruner: Some(Arc::new(DropDead) as Arc<dyn crate::btree::Pruner>),
        ..Default::default()
    };
    let t = e.open_tree(1u32, opts).unwrap();
    (e, t)
}

/// A background sweep prunes a tree's only leaf only when it is nearly full
/// (less than a quarter free), as heap prunes pages; VACUUM's
/// `prune_leaf_at` always.
#[test]
fn sweeps_prune_only_nearly_full_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let (_e, t) = drop_dead_tree(dir.path());
    let dead = |n: u8| [vec![0xDD], vec![n; 99]].concat();
    for i in 0..10u64 {
        t.insert(&key(i), &dead(i as u8)).unwrap();
    }
    let count = |t: &Tree| contents(t).len();
    t.sweep_leaf_at(None).unwrap();
    assert_eq!(count(&t), 10, "a leaf with room keeps its dead items");
    t.prune_leaf_at(None).unwrap();
    assert_eq!(count(&t), 0, "VACUUM's pruning removes them");
    // Nearly full: about 55 items of ~115 bytes in an 8 kB leaf.
    for i in 0..55u64 {
        t.insert(&key(i), &dead(i as u8)).unwrap();
    }
    assert_eq!(t.stats().pages, 1);
    t.sweep_leaf_at(None).unwrap();
    assert_eq!(count(&t), 0, "a nearly full leaf is swept");
}

/// Sweeps a tree of 2,000 items in about half-full leaves (descending
/// inserts split evenly) whose items `dies` marks dead (replaced in place
/// at the same length, so no split pruned them): the tree's pages before
/// and after, once every dead item is checked gone.
fn sweep_half_full_leaves(dies: impl Fn(u64) -> bool) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (_e, t) = drop_dead_tree(dir.path());
    let v = |i: u64, mark: u8| [vec![mark], vec![i as u8; 99]].concat();
    for i in (0..2000u64).rev() {
        t.insert(&key(i), &v(i, 0x11)).unwrap();
    }
    for i in (0..2000u64).filter(|&i| dies(i)) {
        assert!(t.replace(&key(i), &v(i, 0xDD)).unwrap());
    }
    let before = t.stats().pages;
    assert!(before > 40, "{before} pages");
    let mut at: Option<Vec<u8>> = None;
    loop {
        at = t.sweep_leaf_at(at.as_deref()).unwrap();
        if at.is_none() {
            break;
        }
    }
    let live = (0..2000u64).filter(|&i| !dies(i)).count();
    assert_eq!(contents(&t).len(), live, "every dead item is gone");
    assert_valid(&t);
    (before, t.stats().pages)
}

/// In a tree of more than one leaf a sweep prunes every leaf, full or not,
/// and merges the emptied ones away: leaves split while both versions of
/// their rows were live (about half full) and never changed again held
/// their dead versions for ever (seed 004's row-id table kept all three
/// update passes' old versions).
#[test]
fn sweeps_prune_and_merge_every_leaf_of_a_bigger_tree() {
    // Nine in ten die.
    let (before, after) = sweep_half_full_leaves(|i| i % 10 != 0);
    assert!(after * 4 <= before, "emptied leaves merge: {before} -> {after} pages");
}

/// A toast tree's key: value id, then chunk number.
fn chunk_key(v: u32, c: u32) -> Vec<u8> {
    [v.to_be_bytes(), c.to_be_bytes()].concat()
}

/// A tree of 600 values of two 2,000-byte chunks each, inserted in
/// ascending order (four chunks a leaf), as a toast tree holds them.
fn toast_like_tree() -> (tempfile::TempDir, Engine, Tree) {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 256);
    let t = tree(&e, 1, -1);
    for v in 0..600u32 {
        for c in 0..2 {
            t.insert(&chunk_key(v, c), &value(v as u64, c as u64, 2000)).unwrap();
        }
    }
    (dir, e, t)
}

/// Deleting whole values of a toast-like tree (two chunks of a third of a
/// page each, deleted a value at a time) merges every leaf it empties,
/// beside full ones too, into a neighbour: before, an emptied leaf merged
/// only with a right sibling that fit three quarters of a page, and a
/// toast tree kept 400 chunks in 2,068 pages.
#[test]
fn deletes_merge_the_leaves_they_empty_beside_full_ones() {
    let (_dir, _e, t) = toast_like_tree();
    let before = t.stats().pages;
    // Nine values in ten go, oldest first, as pruning finds them: each
    // leaf empties while its right sibling is still full.
    for v in (0..600u32).filter(|v| v % 10 != 0) {
        for c in 0..2 {
            assert!(t.delete(&chunk_key(v, c)).unwrap());
        }
    }
    assert_eq!(contents(&t).len(), 120);
    assert_valid(&t);
    let after = t.stats().pages;
    // 120 chunks fill 30 leaves; the full leaves left beside emptied ones
    // count too, and the inner pages.
    assert!(after * 4 <= before && after <= 80, "{before} pages before, {after} after");
}

/// A leaf a delete empties between two full ones takes its right sibling
/// in, however full (`Fill::limit_for`): folding emptied leaves into each
/// other alone would leave every one of them.
#[test]
fn a_leaf_emptied_between_full_ones_takes_its_right_sibling() {
    let (_dir, _e, t) = toast_like_tree();
    let before = t.stats().pages;
    // Ascending inserts pack four chunks (two values) a leaf: every
    // other leaf's values go.
    for v in (0..600u32).filter(|v| (v / 2) % 2 == 0) {
        for c in 0..2 {
            assert!(t.delete(&chunk_key(v, c)).unwrap());
        }
    }
    assert_eq!(contents(&t).len(), 600);
    assert_valid(&t);
    let after = t.stats().pages;
    assert!(after * 10 <= before * 6, "{before} pages before, {after} after");
}

/// Leaves a sweep leaves less than half full fold into a neighbour when
/// both fit three quarters of a page: into the left one, already pruned,
/// when the right one still holds what its own pruning will remove (leaves
/// split while a transaction held two versions of their rows are half
/// empty once it committed).
#[test]
fn sweeps_fold_half_empty_leaves_into_their_pruned_left_neighbour() {
    // Four in ten die: each leaf keeps about 30% of a page, more than the
    // quarter below which a leaf merged before.
    let (before, after) = sweep_half_full_leaves(|i| i % 10 < 4);
    assert!(after * 10 <= before * 7, "half-empty leaves merge: {before} -> {after} pages");
}

/// An update prunes the dead versions of its own row beside the old one
/// (`key_format::same_row`: a row-id root and its chain members' keys), though
/// the leaf has room. A tree's only leaf with room is left alone, as
/// sweeps leave it.
#[test]
fn updates_prune_their_rows_dead_versions() {
    use crate::btree::{Change, Successor};
    use crate::key_format::{map_key, member_key};
    let dir = tempfile::tempdir().unwrap();
    let (_e, t) = drop_dead_tree(dir.path());
    let live = |n: u8| [vec![0x11], vec![n; 40]].concat();
    let dead = |n: u8| [vec![0xDD], vec![n; 40]].concat();
    // Rows 10 and 20: a dead root, a dead member and a live member each.
    for root in [10u64, 20] {
        t.insert(&root.to_be_bytes(), &dead(1)).unwrap();
        t.insert(&member_key(root, root + 1), &dead(2)).unwrap();
        t.insert(&member_key(root, root + 2), &live(3)).unwrap();
    }
    let update = |root: u64| {
        let (old, new) = (member_key(root, root + 2), member_key(root, root + 3));
        let (m, r) = (map_key(root + 3), root.to_be_bytes());
        let succ = Successor {
            first: Some((&m, &r)),
            key: &new,
            stable: |_| 1,
            reuse: false,
        };
        t.update(&old, &succ, |v| {
            let mut nv = v.expect("the old version").to_vec();
            nv[1] = 0x22;
            (Change::Put(nv), Some(live(4)), ())
        })
        .unwrap()
        .expect("no reuse");
    };
    let has = |k: &[u8]| contents(&t).contains_key(k);
    update(20);
    assert!(has(&20u64.to_be_bytes()) && has(&member_key(20, 21)), "the only leaf keeps them");
    // Other rows after them: more than one leaf.
    for r in 1000..1300u64 {
        t.insert(&r.to_be_bytes(), &live(5)).unwrap();
    }
    assert!(t.stats().pages > 2);
    update(10);
    assert!(!has(&10u64.to_be_bytes()) && !has(&member_key(10, 11)), "row 10's dead versions went");
    for k in [member_key(10, 12), member_key(10, 13), map_key(13).to_vec()] {
        assert!(has(&k), "{k:?} stays");
    }
    assert_valid(&t);
}

/// A pruner that removes dead items but never lets a successor take a
/// slot back (as the table AM refuses a dead version owning toast values).
struct NoTakeBack;
impl crate::btree::Pruner for NoTakeBack {
    fn prune(&self, key: &[u8], value: &[u8]) -> crate::btree::Prune {
        DropDead.prune(key, value)
    }

    fn replaceable(&self, _key: &[u8], _value: &[u8]) -> bool {
        false
    }
}

/// An update taking its chain's root slot back leaves the slot's dead
/// occupant to the pruner's `replaceable`: the chain pruning beside the
/// old version does not remove it first.
#[test]
fn chain_pruning_leaves_a_slot_being_taken_back_alone() {
    use crate::btree::{Change, Successor};
    use crate::key_format::{push_version_suffix, VERSION_TAG};
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(dir.path(), 64, Arc::new(StdIo::new())).unwrap();
    let opts = TreeOptions {
        pruner: Some(Arc::new(NoTakeBack) as Arc<dyn crate::btree::Pruner>),
        ..Default::default()
    };
    let t = e.open_tree(1u32, opts).unwrap();
    let vkey = |row: u8, id: u64| {
        let mut k = vec![VERSION_TAG, row, row];
        push_version_suffix(&mut k, id);
        k
    };
    // Other rows first, so that the leaf is not the tree's only one.
    for r in 0..600u64 {
        t.insert(&vkey(b'z', r), &[0x11; 40]).unwrap();
    }
    assert!(t.stats().pages > 2);
    let (root, old) = (vkey(b'a', 1), vkey(b'a', 5));
    t.insert(&root, &[0xDD; 40]).unwrap();
    t.insert(&old, &[0x11; 40]).unwrap();
    let succ = Successor {
        first: None,
        key: &root,
        stable: |_| 1,
        reuse: true,
    };
    let r = t
        .update(&old, &succ, |v| {
            let mut nv = v.expect("the old version").to_vec();
            nv[1] = 0x22;
            (Change::Put(nv), Some(vec![0x11; 40]), ())
        })
        .unwrap();
    assert!(r.is_none(), "the slot is not replaceable: taken");
    assert_eq!(t.get(&root).unwrap(), Some(vec![0xDD; 40]), "its occupant stays");
    assert_valid(&t);
}

/// Updates of row versions (`Tree::update`): the old value's header change
/// and the successor (with its map entry) are one log record when the
/// successor shares the old one's leaf and fits there, two otherwise (a
/// full leaf splits through the ordinary path); a kept value leaves no
/// successor and no map entry behind. The tree matches a model, and
/// replaying the log into an empty engine gives the same tree.
#[test]
fn updates_share_a_leaf_and_a_record() {
    use crate::btree::{Change, Successor};
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(crate::wal::MemWal::default());
    let e = Engine::open_logged(dir.path(), 256, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    let t = e
        .open_tree(crate::TreeId::new(1, 2), TreeOptions::default())
        .unwrap();
    // Versions: 'v' ‖ row ‖ !id (newest first); map entries: 'm' ‖ id → row.
    let vkey = |row: u32, id: u64| {
        let mut k = vec![b'v'];
        k.extend_from_slice(&row.to_be_bytes());
        k.extend_from_slice(&(!id).to_be_bytes());
        k
    };
    let mkey = |id: u64| [&b"m"[..], &id.to_be_bytes()].concat();
    // A header of 32 or 49 bytes (its length at byte 16), as row versions
    // have a short and a full one: an update may change the old value's
    // length, and deltas line the tuples up past each value's own header.
    let header = |id: u64, mark: u8| {
        let mut h = vec![mark; 32];
        h[..8].copy_from_slice(&id.to_le_bytes());
        h[16] = 32;
        h
    };
    let stable: fn(&[u8]) -> usize = |v| v[16] as usize;
    let mut model = BTreeMap::new();
    let rows = 300u32;
    let mut cur: Vec<u64> = (0..rows as u64).collect();
    for row in 0..rows {
        let v = [header(row as u64, 0), value(row as u64, 0, 90)].concat();
        let (m, r) = (mkey(row as u64), row.to_be_bytes());
        assert!(t.insert_pair((&m, &r), &vkey(row, row as u64), &v).unwrap());
        model.insert(m, r.to_vec());
        model.insert(vkey(row, row as u64), v);
    }
    let mut rng = Rng(7);
    let mut next = rows as u64;
    let (mut updates, before) = (0u64, wal.insert_position());
    for n in 0..3000u64 {
        let row = rng.below(rows as u64) as u32;
        let (old, new) = (cur[row as usize], next);
        next += 1;
        let (ok, nk, m, r) = (vkey(row, old), vkey(row, new), mkey(new), row.to_be_bytes());
        let keep = n % 10 == 9;
        let succ = Successor {
            first: Some((&m, &r)),
            key: &nk,
            stable,
            reuse: false,
        };
        let mut stored = None;
        t.update(&ok, &succ, |v| {
            let v = v.expect("the old version exists");
            if keep {
                return (Change::Keep, None, ());
            }
            let mut nv = v.to_vec();
            nv[8..16].copy_from_slice(&new.to_le_bytes());
            // Every third update widens a 32-byte header to 49 bytes, as a
            // deleter widens a short row header; every third narrows it.
            match (n % 3, stable(&nv)) {
                (0, 32) => {
                    nv[16] = 49;
                    nv.splice(32..32, [0xAB; 17]);
                }
                (1, 49) => {
                    nv[16] = 32;
                    nv.drain(32..49);
                }
                _ => {}
            }
            let mut succ_v = header(new, 1);
            succ_v.extend_from_slice(&nv[stable(&nv)..]);
            succ_v[40] ^= n as u8 | 1;
            stored = Some((nv.clone(), succ_v.clone()));
            (Change::Put(nv), Some(succ_v), ())
        })
        .unwrap();
        match stored {
            None => {
                assert_eq!(t.get(&m).unwrap(), None, "a kept update leaves no map entry");
                assert_eq!(t.get(&nk).unwrap(), None);
            }
            Some((nv, sv)) => {
                model.insert(ok, nv);
                model.insert(nk, sv);
                model.insert(m, r.to_vec());
                cur[row as usize] = new;
                updates += 1;
            }
        }
    }
    // A decision that raises (an ERROR unwinding through the tree) leaves
    // no first key behind either, and the tree usable.
    let (ok, nk, m) = (vkey(0, cur[0]), vkey(0, next), mkey(next));
    let succ = Successor {
        first: Some((&m, b"x")),
        key: &nk,
        stable,
        reuse: false,
    };
    let raised = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        t.update(&ok, &succ, |_| -> (Change, Option<Vec<u8>>, ()) { panic!("an ERROR in decide") })
    }));
    assert!(raised.is_err());
    assert_eq!(t.get(&m).unwrap(), None, "the unlogged first key went with the ERROR");
    let records = wal.insert_position() - before;
    assert!(
        records < updates * 12 / 10,
        "{records} records for {updates} updates: most should be one"
    );
    assert!(records > updates, "some successors took the split path");
    assert_valid(&t);
    assert!(contents(&t) == model);
    let dir2 = tempfile::tempdir().unwrap();
    let e2 = Engine::open_logged(dir2.path(), 256, Arc::new(StdIo::new()), None).unwrap();
    let bytewise = |_| -> Arc<dyn crate::order::KeyCmp> { Arc::new(crate::order::Bytewise) };
    for rec in wal.since(1) {
        e2.replay(&rec, &bytewise).unwrap();
    }
    // Twice: each record sets a final state.
    for rec in wal.since(before) {
        e2.replay(&rec, &bytewise).unwrap();
    }
    let t2 = e2.tree(crate::TreeId::new(1, 2)).unwrap();
    assert_valid(&t2);
    assert!(contents(&t2) == model);
}

/// Packing (`pack_leaf_at`, a quiet tree's second sweep pass) fills leaves
/// that splits and deletes left half full from their right siblings: two
/// half-full leaves never merge, so before it a sweep left them so. The
/// tree stays valid and whole while readers look up every key meanwhile.
#[test]
fn packing_fills_half_full_leaves_while_readers_read() {
    let dir = tempfile::tempdir().unwrap();
    let (_e, t) = drop_dead_tree(dir.path());
    let live = |n: u64| [vec![1u8], vec![n as u8; 99]].concat();
    // Descending inserts split leaves evenly: each about half full.
    for i in (0..3000u64).rev() {
        t.insert(&key(i), &live(i)).unwrap();
    }
    let want = contents(&t);
    let before = t.stats().pages;
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..2u64)
            .map(|r| {
                let (t, stop) = (t.clone(), &stop);
                s.spawn(move || {
                    let mut n = r;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let i = n % 3000;
                        assert_eq!(t.get(&key(i)).unwrap(), Some(live(i)), "key {i} lost");
                        n += 7;
                    }
                    let all = contents(&t);
                    assert!(all == contents(&t));
                })
            })
            .collect();
        let mut at = None;
        loop {
            at = t.pack_leaf_at(at.as_deref()).unwrap();
            if at.is_none() {
                break;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    });
    assert_valid(&t);
    assert!(contents(&t) == want, "packing changed the contents");
    let after = t.stats().pages;
    // ~117 bytes an item: 3000 items are ~44 leaves at 15/16 full.
    assert!(after * 10 <= before * 6, "pages {before} -> {after}");
    assert!(after <= 52, "pages {before} -> {after}");
}
