//! Random operations against a `BTreeMap` model, with a pool much smaller
//! than the data, bounded scans in both directions, checkpoints and
//! reopening from disk.

use super::*;
use crate::cursor::Direction;
use std::ops::Bound;

fn bound(rng: &mut Rng, space: u64) -> Bound<Vec<u8>> {
    match rng.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng.below(space))),
        _ => Bound::Excluded(key(rng.below(space))),
    }
}

fn model_range(
    m: &BTreeMap<Vec<u8>, Vec<u8>>,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    dir: Direction,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    // BTreeMap::range panics on inverted bounds; filter instead.
    let inside = |k: &Vec<u8>| {
        (match lo {
            Bound::Unbounded => true,
            Bound::Included(b) => k >= b,
            Bound::Excluded(b) => k > b,
        }) && (match hi {
            Bound::Unbounded => true,
            Bound::Included(b) => k <= b,
            Bound::Excluded(b) => k < b,
        })
    };
    let mut v: Vec<_> = m
        .iter()
        .filter(|(k, _)| inside(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if dir == Direction::Backward {
        v.reverse();
    }
    v
}

fn run(seed: u64, ops: usize, space: u64, nbuffers: usize, compress: i32) {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = open(dir.path(), nbuffers);
    let mut t = tree(&engine, 7, compress);
    let mut model = BTreeMap::new();
    let mut rng = Rng(seed);
    for step in 0..ops {
        let i = rng.below(space);
        let k = key(i);
        match rng.below(100) {
            0..=39 => {
                let max = if rng.below(10) == 0 { 2000 } else { 200 };
                let v = value(i, step as u64, 1 + rng.below(max) as usize);
                let fresh = !model.contains_key(&k);
                assert_eq!(
                    t.insert(&k, &v).unwrap(),
                    fresh,
                    "insert {i} at step {step}"
                );
                model.entry(k).or_insert(v);
            }
            40..=54 => {
                let v = value(i, step as u64, rng.below(300) as usize);
                assert_eq!(t.replace(&k, &v).unwrap(), model.contains_key(&k));
                if let Some(slot) = model.get_mut(&k) {
                    *slot = v;
                }
            }
            55..=79 => assert_eq!(
                t.delete(&k).unwrap(),
                model.remove(&k).is_some(),
                "delete {i}"
            ),
            80..=94 => assert_eq!(
                t.get(&k).unwrap(),
                model.get(&k).cloned(),
                "get {i} at step {step}"
            ),
            95..=97 => {
                let (lo, hi) = (bound(&mut rng, space), bound(&mut rng, space));
                let dir = if rng.below(2) == 0 {
                    Direction::Forward
                } else {
                    Direction::Backward
                };
                let got: Vec<_> = t
                    .range(lo.clone(), hi.clone(), dir)
                    .map(|r| r.unwrap())
                    .collect();
                assert_eq!(
                    got,
                    model_range(&model, &lo, &hi, dir),
                    "range {lo:?}..{hi:?} {dir:?} at step {step}"
                );
            }
            98 => {
                engine.checkpoint(step as u64).unwrap();
            }
            _ => {
                // Durability of the image: checkpoint, reopen, compare.
                engine.checkpoint(step as u64).unwrap();
                drop(t);
                drop(engine);
                engine = open(dir.path(), nbuffers);
                t = tree(&engine, 7, compress);
                assert_eq!(contents(&t), model, "after reopen at step {step}");
            }
        }
    }
    assert_valid(&t);
    assert_eq!(contents(&t), model);
    let stats = t.stats();
    assert!(
        stats.pages as usize > 4 * nbuffers || model.len() < 1000,
        "data should dwarf the pool: {stats:?}"
    );
}

#[test]
fn model_raw_pages_small_pool() {
    run(1, 60_000, 20_000, 32, -1);
}

#[test]
fn model_zstd1_small_pool() {
    run(2, 40_000, 20_000, 32, 1);
}

#[test]
fn model_zstd_default_level() {
    run(3, 20_000, 3_000, 16, 0);
}

#[test]
fn grows_and_shrinks_back() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 64);
    let t = tree(&e, 1, -1);
    // Scattered order: pages split evenly (an ascending load packs them).
    for j in 0..30_000u64 {
        let i = j * 7919 % 30_000;
        assert!(t.insert(&key(i as _), &value(i as _, 0, 60)).unwrap());
    }
    let big = t.stats().pages;
    assert_valid(&t);
    for i in 0..30_000 {
        if i % 100 != 0 {
            assert!(t.delete(&key(i)).unwrap());
        }
    }
    assert_valid(&t);
    let small = t.stats().pages;
    assert!(
        small * 4 < big,
        "underfull leaves must merge: {big} pages -> {small}"
    );
    assert_eq!(contents(&t).len(), 300);
}

/// Loading in ascending key order fills pages almost completely.
#[test]
fn ascending_load_packs_pages() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 64);
    let t = tree(&e, 1, -1);
    let n = 20_000;
    for i in 0..n {
        assert!(t.insert(&key(i), &value(i, 0, 60)).unwrap());
    }
    assert_valid(&t);
    let item = crate::page::item_space(key(0).len(), value(0, 0, 60).len());
    let ideal = (n as usize * item).div_ceil(crate::page::PAGE_SIZE - crate::page::HEADER);
    let pages = t.stats().pages as usize;
    assert!(
        pages * 10 < ideal * 12,
        "{pages} pages for {ideal} pages of data"
    );
}

/// A keyed tree's row-id map is nearly only appended to, so its leaves are
/// filled further (other appends leave a tenth of the page for new
/// versions, the map 4%).
#[test]
fn map_entries_fill_their_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 64);
    let t = tree(&e, 1, -1);
    let n = 20_000u64;
    for i in 0..n {
        assert!(t.insert(&crate::key_format::map_key(i), &[1, 0x80, 0, 0, 7]).unwrap());
    }
    assert_valid(&t);
    let item = crate::page::item_space(crate::key_format::MAP_KEY, 5);
    let ideal = (n as usize * item).div_ceil(crate::page::PAGE_SIZE - crate::page::HEADER);
    let leaves = t.stats().pages as usize - 1;
    assert!(
        leaves * 100 <= ideal * 105,
        "{leaves} leaves for {ideal} pages of map entries"
    );
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u16),
        Delete(u16),
        Scan(u16, u16, bool),
        Checkpoint,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u16..2000, 0u16..600).prop_map(|(k, l)| Op::Insert(k, l)),
            3 => (0u16..2000).prop_map(Op::Delete),
            1 => (0u16..2000, 0u16..2000, any::<bool>()).prop_map(|(a, b, f)| Op::Scan(a, b, f)),
            1 => Just(Op::Checkpoint),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn ops_match_model(ops in proptest::collection::vec(op(), 1..400)) {
            let dir = tempfile::tempdir().unwrap();
            let e = open(dir.path(), 8);
            let t = tree(&e, 3, 1);
            let mut model = BTreeMap::new();
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(k, l) => {
                        let v = value(k as u64, n as u64, l as usize);
                        t.upsert(&key(k as u64), &v).unwrap();
                        model.insert(key(k as u64), v);
                    }
                    Op::Delete(k) => { prop_assert_eq!(t.delete(&key(k as u64)).unwrap(), model.remove(&key(k as u64)).is_some()); }
                    Op::Scan(a, b, fwd) => {
                        let (lo, hi) = (Bound::Included(key(a as u64)), Bound::Excluded(key(b as u64)));
                        let dir = if fwd { Direction::Forward } else { Direction::Backward };
                        let got: Vec<_> = t.range(lo.clone(), hi.clone(), dir).map(|r| r.unwrap()).collect();
                        prop_assert_eq!(got, model_range(&model, &lo, &hi, dir));
                    }
                    Op::Checkpoint => { e.checkpoint(0).unwrap(); }
                }
            }
            prop_assert!(t.check().is_ok(), "{:?}", t.check());
            prop_assert_eq!(contents(&t), model);
        }
    }
}

/// Keys at the 1024-byte limit and items at the 2600-byte limit: pages
/// then carry 1 KB low and high keys, and every split must still find a
/// point where both halves fit.
#[test]
fn maximal_keys_and_items_always_split() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 16);
    let t = tree(&e, 1, -1);
    let mut model = BTreeMap::new();
    let mut rng = Rng(5);
    for i in 0..3000u64 {
        let mut k = vec![b'k'; 1000 + rng.below(25) as usize];
        k[..8].copy_from_slice(&rng.next().to_be_bytes());
        let vlen = match rng.below(3) {
            0 => 2600 - k.len(),
            1 => 300 + rng.below(1200) as usize,
            _ => rng.below(40) as usize,
        };
        let v = value(i, 0, vlen);
        t.upsert(&k, &v).unwrap();
        model.insert(k, v);
        if i % 5 == 0 {
            let victim = model
                .keys()
                .nth(rng.below(model.len() as u64) as usize)
                .cloned()
                .unwrap();
            assert!(t.delete(&victim).unwrap());
            model.remove(&victim);
        }
    }
    assert_valid(&t);
    assert_eq!(contents(&t), model);
}

/// Many threads and handles opening the same and different trees at once:
/// each id gets exactly one tree.
#[test]
fn concurrent_tree_creation_is_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 32);
    std::thread::scope(|s| {
        for th in 0..8u32 {
            let h = e.attach_another(Arc::new(StdIo::new())).unwrap();
            s.spawn(move || {
                for round in 0..20u32 {
                    let id = 100 + (th + round) % 5;
                    let t = tree(&h, id, -1);
                    t.upsert(&key((th * 1000 + round) as u64), &id.to_le_bytes())
                        .unwrap();
                }
            });
        }
    });
    assert_eq!(e.tree_ids().unwrap().len(), 5);
    let mut total = 0;
    for id in 100..105u32 {
        let t = e.tree(id).unwrap();
        assert_valid(&t);
        let c = contents(&t);
        assert!(
            c.values().all(|v| v == &id.to_le_bytes()),
            "tree {id} holds another tree's rows"
        );
        total += c.len();
    }
    assert_eq!(total, 8 * 20);
}

/// `modify` decides and changes under one latch: concurrent read-modify-
/// write increments never lose an update.
#[test]
fn modify_is_atomic_read_modify_write() {
    use crate::btree::Change;
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 16);
    let t = tree(&e, 1, -1);
    // Neighbours so that splits happen around the counters meanwhile.
    std::thread::scope(|s| {
        for th in 0..8u64 {
            let t = t.clone();
            s.spawn(move || {
                for i in 0..2000u64 {
                    let k = format!("counter{}", i % 4).into_bytes();
                    t.modify(&k, |cur| {
                        let n = cur.map_or(0, |c| u64::from_le_bytes(c.try_into().unwrap()));
                        (Change::Put((n + 1).to_le_bytes().to_vec()), ())
                    })
                    .unwrap();
                    t.upsert(&key(th * 100_000 + i), &value(i, th, 50)).unwrap();
                }
            });
        }
    });
    let total: u64 = (0..4)
        .map(|c| {
            u64::from_le_bytes(
                t.get(format!("counter{c}").as_bytes())
                    .unwrap()
                    .unwrap()
                    .try_into()
                    .unwrap(),
            )
        })
        .sum();
    assert_eq!(total, 8 * 2000);
    // Keep and Delete decisions.
    let seen = t
        .modify(b"counter0", |cur| (Change::Keep, cur.map(<[u8]>::to_vec)))
        .unwrap();
    assert!(seen.is_some());
    let removed = t
        .modify(b"counter0", |cur| (Change::Delete, cur.is_some()))
        .unwrap();
    assert!(removed);
    assert_eq!(t.get(b"counter0").unwrap(), None);
    assert_valid(&t);
}

/// A pruner gets to drop dead items before a leaf splits: a tree that keeps
/// replacing dead items with live ones does not grow.
#[test]
fn pruner_spares_splits() {
    use crate::btree::{Prune, Pruner};
    struct DropDead;
    impl Pruner for DropDead {
        fn prune(&self, _key: &[u8], value: &[u8]) -> Prune {
            if value.starts_with(b"dead") {
                Prune::Remove
            } else {
                Prune::Keep
            }
        }
    }
    let mut pages = Vec::new();
    for with_pruner in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path(), 64);
        let opts = TreeOptions {
            pruner: with_pruner.then(|| Arc::new(DropDead) as Arc<dyn Pruner>),
            ..Default::default()
        };
        let t = e.open_tree(1u32, opts).unwrap();
        let mut live = BTreeMap::new();
        for round in 0..20u64 {
            // Each round's keys interleave with all earlier rounds' (dead) ones,
            // so inserts land in leaves full of dead items.
            for i in 0..500u64 {
                let k = key(i * 100 + round);
                let v = value(i, round, 100);
                t.upsert(&k, &v).unwrap();
                live.insert(k, v);
            }
            for i in 0..500u64 {
                let k = key(i * 100 + round);
                let mut dead = b"dead".to_vec();
                dead.extend_from_slice(&[0; 96]);
                t.replace(&k, &dead).unwrap();
                live.remove(&k);
            }
        }
        assert_valid(&t);
        let c = contents(&t);
        assert!(live.iter().all(|(k, v)| c.get(k) == Some(v)));
        pages.push(t.stats().pages);
    }
    assert!(
        pages[1] * 3 < pages[0],
        "pruning should keep the tree small: {pages:?}"
    );
}

/// Writes into leaves that a pruner thins out on the way: it removes dead
/// items and shrinks padded ones, so the written key's position moves
/// (items before it go) between the first attempt and the retry or split.
/// Values grow and shrink, so replacements go in place, into free space,
/// through a rebuild, or split the leaf. What the tree holds must stay
/// what the model says, as the pruner's view of it.
#[test]
fn writes_into_leaves_being_pruned_match_the_model() {
    use crate::btree::{Prune, Pruner};
    /// "D...": dead, removable. "F" + 16 bytes + padding: the padding may
    /// go. Anything else: live as is.
    struct Thin;
    impl Pruner for Thin {
        fn prune(&self, _key: &[u8], value: &[u8]) -> Prune {
            match value.first() {
                Some(b'D') => Prune::Remove,
                Some(b'F') if value.len() > 17 => Prune::Replace(value[..17].to_vec()),
                _ => Prune::Keep,
            }
        }
    }
    /// The value as the model sees it (None: dead).
    fn logical(v: &[u8]) -> Option<Vec<u8>> {
        match v.first() {
            Some(b'D') => None,
            Some(b'F') => Some(v[..17].to_vec()),
            _ => Some(v.to_vec()),
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 64);
    let t = e
        .open_tree(
            3u32,
            TreeOptions {
                pruner: Some(Arc::new(Thin)),
                ..Default::default()
            },
        )
        .unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = Rng(4242);
    for step in 0..40_000u64 {
        let i = rng.below(3000);
        let k = key(i);
        let v = match rng.below(10) {
            0..=3 => {
                let mut v = format!("F{:016}", step).into_bytes();
                v.resize(17 + rng.below(600) as usize, b'.');
                v
            }
            4..=6 => {
                let max = if rng.below(8) == 0 { 2000 } else { 150 };
                value(i, step, 1 + rng.below(max) as usize)
            }
            7..=8 => vec![b'D'; 1 + rng.below(300) as usize],
            _ => {
                // Dead items are still in the tree: delete may find one.
                t.delete(&k).unwrap();
                model.remove(&k);
                continue;
            }
        };
        t.upsert(&k, &v).unwrap();
        match logical(&v) {
            Some(l) => model.insert(k.clone(), l),
            None => model.remove(&k),
        };
        if step % 5000 == 0 {
            assert_valid(&t);
        }
    }
    assert_valid(&t);
    let got: BTreeMap<_, _> = contents(&t)
        .into_iter()
        .filter_map(|(k, v)| logical(&v).map(|l| (k, l)))
        .collect();
    assert!(got == model, "the tree differs from the model");
    // Sweep every leaf: dead items go, the rest stay.
    let mut at: Option<Vec<u8>> = None;
    loop {
        match t.prune_leaf_at(at.as_deref()).unwrap() {
            Some(h) => at = Some(h),
            None => break,
        }
    }
    assert_valid(&t);
    let all = contents(&t);
    assert!(
        all.values().all(|v| v[0] != b'D'),
        "a dead item survived the sweep"
    );
    let got: BTreeMap<_, _> = all
        .into_iter()
        .filter_map(|(k, v)| logical(&v).map(|l| (k, l)))
        .collect();
    assert!(got == model, "the sweep changed live items");
}

/// `leaf_starts` divides a key range at its leaves' boundaries: each run
/// between two starts is read from one leaf, and the runs cover the range.
#[test]
fn leaf_starts_are_leaf_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 256);
    let t = tree(&e, 1, -1);
    assert!(t.leaf_starts(&key(0), None).unwrap().is_empty());
    for j in 0..20_000u64 {
        let i = j * 7919 % 20_000;
        assert!(t.insert(&key(i as _), &value(i as _, 0, 40)).unwrap());
    }
    for (lo, hi) in [(0u64, None), (3_000, Some(17_000)), (5_000, Some(5_001))] {
        let (lo, hi) = (key(lo as _), hi.map(|h: u64| key(h as _)));
        let starts = t.leaf_starts(&lo, hi.as_deref()).unwrap();
        assert!(starts.windows(2).all(|w| w[0] < w[1]), "ascending");
        let mut bounds = vec![Bound::Included(lo.clone())];
        bounds.extend(starts.iter().cloned().map(Bound::Included));
        let ends = starts
            .iter()
            .cloned()
            .map(Bound::Excluded)
            .chain([hi.clone().map_or(Bound::Unbounded, Bound::Excluded)]);
        let mut total = 0;
        for (b, e) in bounds.into_iter().zip(ends) {
            let mut c = t.range(b, e, Direction::Forward);
            let leaf = c.next_leaf().expect("a run holds keys").unwrap();
            assert!(c.next_leaf().is_none(), "a run is one leaf");
            total += leaf.len();
        }
        let whole = t
            .range(Bound::Included(lo), hi.map_or(Bound::Unbounded, Bound::Excluded), Direction::Forward)
            .count();
        assert_eq!(total, whole);
        if whole > 1000 {
            assert!(starts.len() > 10, "{} starts for {whole} keys", starts.len());
        }
    }
}
