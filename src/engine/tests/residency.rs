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

/// Files as `StdIo` has them, except that reading the control file fails
/// (as a stat or read error of the file system would) while `broken`.
#[derive(Default)]
struct UnreadableControl {
    io: StdIo,
    broken: std::sync::atomic::AtomicBool,
}

impl FileIo for UnreadableControl {
    fn read_at(&self, p: &std::path::Path, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.io.read_at(p, off, buf)
    }
    fn write_at(&self, p: &std::path::Path, off: u64, buf: &[u8]) -> std::io::Result<()> {
        self.io.write_at(p, off, buf)
    }
    fn sync(&self, p: &std::path::Path) -> std::io::Result<()> {
        self.io.sync(p)
    }
    fn set_len(&self, p: &std::path::Path, len: u64) -> std::io::Result<()> {
        self.io.set_len(p, len)
    }
    fn len(&self, p: &std::path::Path) -> std::io::Result<u64> {
        self.io.len(p)
    }
    fn write_file(&self, p: &std::path::Path, b: &[u8]) -> std::io::Result<()> {
        self.io.write_file(p, b)
    }
    fn read_file(&self, p: &std::path::Path) -> std::io::Result<Vec<u8>> {
        if p.ends_with("control") && self.broken.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(std::io::Error::other("injected: control file unreadable"));
        }
        self.io.read_file(p)
    }
    fn rename(&self, a: &std::path::Path, b: &std::path::Path) -> std::io::Result<()> {
        self.io.rename(a, b)
    }
    fn sync_dir(&self, d: &std::path::Path) -> std::io::Result<()> {
        self.io.sync_dir(d)
    }
    fn remove(&self, p: &std::path::Path) -> std::io::Result<()> {
        self.io.remove(p)
    }
    fn exists(&self, p: &std::path::Path) -> bool {
        // `Path::exists` answers false when the stat fails.
        !(p.ends_with("control") && self.broken.load(std::sync::atomic::Ordering::Relaxed))
            && self.io.exists(p)
    }
    fn list(&self, d: &std::path::Path) -> std::io::Result<Vec<String>> {
        self.io.list(d)
    }
    fn create_dir(&self, d: &std::path::Path) -> std::io::Result<()> {
        self.io.create_dir(d)
    }
}

/// A control file that cannot be read is an error, never "no trees": a
/// cold tree is not taken for absent (opening it does not make a new,
/// empty tree over it), and a checkpoint fails rather than write a control
/// file without the cold trees. Once it reads again, nothing was lost.
/// And a process's handles that are never dropped (an exit without
/// unwinding) keep no tree resident once it gives their holds back.
#[test]
fn an_unreadable_control_file_loses_no_tree() {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(UnreadableControl::default());
    let e = Engine::open(dir.path(), 64, io.clone()).unwrap();
    let mut want = BTreeMap::new();
    for id in 1..=400u32 {
        let t = open_or_checkpoint(&e, id);
        want.insert(id, fill(&t, id));
    }
    e.checkpoint(0).unwrap();
    let cold: Vec<u32> = (1..=400u32)
        .filter(|&id| e.inner.lookup_resident_for_tests(TreeId::from(id)).is_none())
        .collect();
    assert!(cold.len() > 100, "{} cold trees", cold.len());
    // A checkpoint since this process last read the list makes it read again.
    tree(&e, 999, -1).insert(b"k", b"v").unwrap();
    e.checkpoint(0).unwrap();
    io.broken.store(true, std::sync::atomic::Ordering::Relaxed);
    let c = cold[0];
    assert!(matches!(e.tree(c), Err(EngineError::Io { .. })), "{:?}", e.tree(c).err());
    assert!(e.open_tree(c, TreeOptions::default()).is_err());
    tree(&e, 999, -1).insert(b"k2", b"v").unwrap();
    assert!(e.checkpoint(0).is_err());
    io.broken.store(false, std::sync::atomic::Ordering::Relaxed);
    e.checkpoint(0).unwrap();
    for (&id, rows) in &want {
        assert!(contents(&e.tree(id).unwrap()) == *rows, "tree {id}");
    }
    // Handles never dropped, then their holds given back.
    let kept: Vec<Tree> = (1..=50u32).map(|id| e.tree(id).unwrap()).collect();
    assert_eq!(e.release_local_holds(), 50);
    e.checkpoint(0).unwrap();
    let _room = e.with_room(|| -> crate::Result<()> { Err(EngineError::TooManyTrees(0)) });
    assert!(
        (1..=50u32).any(|id| e.inner.lookup_resident_for_tests(TreeId::from(id)).is_none()),
        "released holds keep trees resident"
    );
    drop(kept);
    let (_, free, total) = e.slot_use();
    assert!(free > 0 && free <= total);
    for id in 1..=50u32 {
        assert!(contents(&e.tree(id).unwrap()) == want[&id], "tree {id}");
    }
}

/// Crash recovery that touches more trees than the region has room for
/// beside what the load put there: 231 trees changed since the durable
/// checkpoint (80 created) are replayed, each record inside a checkpoint
/// barrier as the server replays them, into a region of 256 slots of
/// which the load filled half with others; idle trees are evicted for
/// room as replay goes, and every tree comes back.
/// The same again after a drop of cold trees that the log replays.
#[test]
fn replay_evicts_for_room() {
    fn bytewise(_: TreeId) -> Arc<dyn KeyCmp> {
        Arc::new(Bytewise)
    }
    let recover = |dir: &std::path::Path, wal: &Arc<MemWal>| {
        let e = Engine::open_logged(dir, 32, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
        for rec in wal.since(e.redo_position()) {
            e.atomically(|| e.replay(&rec, &bytewise)).unwrap();
        }
        e
    };
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(MemWal::default());
    let e = Engine::open_logged(dir.path(), 32, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    let mut want = BTreeMap::new();
    for id in 1..=300u32 {
        let t = open_or_checkpoint(&e, id);
        want.insert(id, fill(&t, id));
    }
    e.checkpoint(0).unwrap();
    e.checkpoint(0).unwrap();
    // Changes to 231 trees with no checkpoint since: 151 loaded again, 80
    // new. The load at recovery fills half the region with trees 1..128,
    // which replay must evict to make room for these.
    for id in 150..=380u32 {
        let t = match e.tree(id) {
            Ok(t) => t,
            Err(EngineError::NoSuchTree(_)) => e.open_tree(id, TreeOptions::default()).unwrap(),
            Err(err) => panic!("{err}"),
        };
        t.upsert(b"after", &id.to_be_bytes()).unwrap();
        want.entry(id).or_default().insert(b"after".to_vec(), id.to_be_bytes().to_vec());
    }
    let changed = want.values().filter(|rows| rows.contains_key(&b"after"[..])).count();
    drop(e);
    let e = recover(dir.path(), &wal);
    for (&id, rows) in &want {
        assert!(contents(&e.tree(id).unwrap()) == *rows, "tree {id} ({changed} changed)");
    }
    e.checkpoint(0).unwrap();
    for id in 1..=100u32 {
        e.drop_tree(id).unwrap();
        want.remove(&id);
    }
    drop(e);
    let e = recover(dir.path(), &wal);
    assert_eq!(e.tree_ids().unwrap().len(), want.len());
    for (&id, rows) in &want {
        assert!(contents(&e.tree(id).unwrap()) == *rows, "tree {id}");
    }
}
