//! More trees than the metadata region has slots: idle trees are evicted
//! and loaded again from their files (`residency.rs`), across checkpoints,
//! restarts, power cuts, concurrent readers and drops.

use super::*;
use crate::io::{CrashAfter, FileIo, PowerCut, PowerLoss};
use crate::order::{Bytewise, KeyCmp};
use crate::wal::MemWal;
use crate::{EngineError, TreeId};
use std::collections::BTreeSet;

/// Opens tree `id`, creating it; when the region has no room left (every
/// resident tree changed since the last checkpoint), checkpoints first, as
/// the server does for CREATE TABLE.
fn open_or_checkpoint(e: &Engine, id: u32) -> Tree {
    let opts = || TreeOptions {
        compress: if id % 2 == 0 { -1 } else { 1 },
        ..Default::default()
    };
    match e.open_tree(id, opts()) {
        Err(EngineError::TooManyTrees(_) | EngineError::MetadataFull(_)) => {
            e.checkpoint(0).unwrap();
            e.open_tree(id, opts()).unwrap()
        }
        r => r.unwrap(),
    }
}

/// Tree `id`'s rows: `id % 5 + 1` of them, a second version for some.
fn fill(t: &Tree, id: u32) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let n = id as u64 % 5 + 1;
    for i in 0..n {
        t.insert(&key(i), &value(i, id as u64, 30)).unwrap();
    }
    if id % 3 == 0 {
        t.replace(&key(0), &value(0, id as u64 + 1, 50)).unwrap();
    }
    contents(t)
}

fn resident(e: &Engine) -> usize {
    let (_, free, total) = e.slot_use();
    total - free
}

/// 1,000 trees in a region of 256 slots: each is created, filled and let
/// go; the region never holds more than its slots; every tree reads back
/// (loaded again from its files), before and after a restart; the control
/// file lists them all; a handle held throughout keeps its tree resident
/// and working; a cold tree can be dropped (its files go at the next
/// checkpoint) and its id used again.
#[test]
fn a_thousand_trees_in_256_slots() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 64);
    let held = tree(&e, 5000, -1);
    let mut want = BTreeMap::new();
    for id in 1..=1000u32 {
        let t = open_or_checkpoint(&e, id);
        want.insert(id, fill(&t, id));
        held.upsert(&key(id as u64), b"held").unwrap();
        assert!(resident(&e) <= crate::engine::PRIVATE_MAX_TREES);
    }
    e.checkpoint(0).unwrap();
    assert!(resident(&e) < 256, "a checkpoint leaves room: {}", resident(&e));
    let ids = e.tree_ids().unwrap();
    assert_eq!(ids.len(), 1001);
    let check_all = |e: &Engine| {
        for (&id, rows) in &want {
            let t = e.tree(id).unwrap();
            assert!(contents(&t) == *rows, "tree {id}");
        }
    };
    check_all(&e);
    assert_eq!(contents(&held).len(), 1000);
    assert_valid(&held);
    // Changed while cold trees were loaded and evicted around it.
    drop(held);
    e.checkpoint(0).unwrap();
    drop(e);
    let e = open(dir.path(), 64);
    assert!(e.take_load_damage().is_empty());
    assert!(resident(&e) <= 128, "half the region is loaded at start");
    check_all(&e);
    assert_eq!(contents(&e.tree(5000).unwrap()).len(), 1000);
    // Drop a cold tree (evict first: a checkpoint with everything idle).
    e.checkpoint(0).unwrap();
    e.drop_tree(7).unwrap();
    assert!(matches!(e.tree(7), Err(EngineError::NoSuchTree(_))));
    e.checkpoint(0).unwrap();
    let files = StdIo::new().list(&dir.path().join("0")).unwrap();
    assert!(!files.iter().any(|f| f == "7" || f.starts_with("7-")), "{files:?}");
    let t = open_or_checkpoint(&e, 7);
    assert!(contents(&t).is_empty());
    t.insert(b"again", b"new").unwrap();
    drop(t);
    e.checkpoint(0).unwrap();
    drop(e);
    let e = open(dir.path(), 64);
    assert_eq!(contents(&e.tree(7).unwrap()).len(), 1);
    assert_eq!(e.tree_ids().unwrap().len(), 1001);
}

/// Two "processes" (engine handles over one region): one creates trees and
/// checkpoints, evicting idle trees, while the other reads and updates
/// trees made earlier through handles it opens and drops as it goes. Every
/// read sees what was written.
#[test]
fn readers_meanwhile_see_their_trees() {
    let dir = tempfile::tempdir().unwrap();
    let a = open(dir.path(), 64);
    let b = a.attach_another(Arc::new(StdIo::new())).unwrap();
    for id in 1..=100u32 {
        let t = open_or_checkpoint(&a, id);
        t.insert(b"n", &0u64.to_be_bytes()).unwrap();
    }
    a.checkpoint(0).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for id in 101..=700u32 {
                let t = open_or_checkpoint(&a, id);
                fill(&t, id);
            }
            stop.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut rng = Rng(7);
        let mut counts = [0u64; 101];
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            let id = 1 + rng.below(100) as u32;
            let t = b.tree(id).unwrap();
            let n = u64::from_be_bytes(t.get(b"n").unwrap().unwrap().try_into().unwrap());
            assert_eq!(n, counts[id as usize], "tree {id}");
            counts[id as usize] += 1;
            t.replace(b"n", &counts[id as usize].to_be_bytes()).unwrap();
        }
    });
    for id in 101..=700u32 {
        let t = b.tree(id).unwrap();
        assert_eq!(contents(&t).len() as u32, id % 5 + 1, "tree {id}");
    }
}

/// Cold trees ride through checkpoints that do not touch them (each
/// carries them into its control file), a power cut at every step of one
/// such checkpoint, and crash recovery by the log: every tree comes back
/// with every change, whether it was resident, cold or loaded again.
#[test]
fn cold_trees_survive_power_cuts_and_replay() {
    fn bytewise(_: TreeId) -> Arc<dyn KeyCmp> {
        Arc::new(Bytewise)
    }
    let mut steps = 0u64;
    loop {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(PowerLoss::new(dir.path()));
        let io = Arc::new(CrashAfter::new(fs.clone(), u64::MAX));
        let wal = Arc::new(MemWal::default());
        let e = Engine::open_logged(dir.path(), 32, io.clone(), Some(wal.clone())).unwrap();
        let mut want = BTreeMap::new();
        for id in 1..=300u32 {
            let t = open_or_checkpoint(&e, id);
            want.insert(id, fill(&t, id));
        }
        e.checkpoint(0).unwrap();
        // Some cold trees change (loaded again), after the checkpoint.
        for id in (1..=300u32).step_by(37) {
            let t = e.tree(id).unwrap();
            t.upsert(b"late", &id.to_be_bytes()).unwrap();
            want.get_mut(&id).unwrap().insert(b"late".to_vec(), id.to_be_bytes().to_vec());
        }
        io.arm(steps);
        let res = e.checkpoint(0);
        drop(e);
        for cut in [PowerCut::DropUnsynced, PowerCut::Random(steps)] {
            let f = Arc::new(fs.fork());
            f.power_loss(cut);
            let io: Arc<dyn FileIo> = f;
            let e = Engine::open_logged(dir.path(), 32, io, Some(wal.clone())).unwrap();
            for rec in wal.since(e.redo_position()) {
                e.replay(&rec, &bytewise).unwrap();
            }
            assert!(e.take_load_damage().is_empty(), "{cut:?} after {steps} steps");
            let got: BTreeSet<TreeId> = e.tree_ids().unwrap().into_iter().collect();
            assert_eq!(got.len(), 300, "{cut:?} after {steps} steps");
            for (&id, rows) in &want {
                let t = e.tree(id).unwrap();
                assert!(contents(&t) == *rows, "tree {id}, {cut:?} after {steps} steps");
            }
        }
        if res.is_ok() {
            assert!(steps > 5, "the checkpoint took only {steps} I/O steps?");
            break;
        }
        steps += 1;
    }
}
