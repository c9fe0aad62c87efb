//! Checkpoints: durability of the image, point-in-time images under
//! concurrent writers, and a crash injected at every I/O step.

use super::*;
use crate::io::{CrashAfter, CutReport, FileIo, PowerCut, PowerLoss};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// (upsert?, key, value) per operation of one writer thread.
type OpLog = Vec<(bool, Vec<u8>, Vec<u8>)>;
type Contents = BTreeMap<Vec<u8>, Vec<u8>>;

fn digest(k: &[u8], v: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in k.iter().chain(b"=").chain(v) {
        h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

#[test]
fn image_survives_reopen_and_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 16);
    let t = tree(&e, 42, 1);
    for i in 0..5000 {
        t.insert(&key(i), &value(i, 0, 100)).unwrap();
    }
    assert_eq!(e.checkpoint(77).unwrap(), 1);
    // Trees of database 0 live in <dir>/0/; the control file at the top.
    assert_eq!(StdIo::new().list(dir.path()).unwrap(), vec!["0", "control"]);
    assert_eq!(
        StdIo::new().list(&dir.path().join("0")).unwrap(),
        vec!["42", "42-1.map"]
    );
    // Changes after the checkpoint are not in the image.
    for i in 0..100 {
        t.delete(&key(i)).unwrap();
    }
    drop(t);
    drop(e);
    let e = open(dir.path(), 16);
    assert_eq!(e.durable_checkpoint(), 1);
    let t = tree(&e, 42, 1);
    assert_eq!(contents(&t).len(), 5000);
    assert_valid(&t);
    // A second checkpoint replaces the first map; old extents are reused.
    for i in 0..5000 {
        t.replace(&key(i), &value(i, 1, 100)).unwrap();
    }
    let size1 = t.stats().file_bytes;
    assert_eq!(e.checkpoint(0).unwrap(), 2);
    assert_eq!(
        StdIo::new().list(&dir.path().join("0")).unwrap(),
        vec!["42", "42-2.map"]
    );
    for i in 0..5000 {
        t.replace(&key(i), &value(i, 2, 100)).unwrap();
    }
    e.checkpoint(0).unwrap();
    for i in 0..5000 {
        t.replace(&key(i), &value(i, 3, 100)).unwrap();
    }
    e.checkpoint(0).unwrap();
    let size3 = t.stats().file_bytes;
    assert!(
        size3 <= size1 * 3,
        "space of old images must be reused: {size1} -> {size3}"
    );
    // Dropping a tree removes its files at the next checkpoint.
    e.drop_tree(42).unwrap();
    e.checkpoint(0).unwrap();
    assert!(StdIo::new().list(&dir.path().join("0")).unwrap().is_empty());
}

#[test]
fn compression_shrinks_files() {
    let mut sizes = Vec::new();
    for level in [-1, 1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path(), 64);
        let t = tree(&e, 1, level);
        for i in 0..20_000 {
            t.insert(&key(i), &value(i, 0, 120)).unwrap();
        }
        e.checkpoint(0).unwrap();
        sizes.push(
            std::fs::metadata(dir.path().join("0").join("1"))
                .unwrap()
                .len(),
        );
        drop(t);
        drop(e);
        let e = open(dir.path(), 64);
        assert_eq!(contents(&tree(&e, 1, level)).len(), 20_000);
    }
    assert!(
        sizes[1] * 3 < sizes[0],
        "zstd 1 should shrink compressible pages: {sizes:?}"
    );
    assert!(sizes[2] <= sizes[1] * 11 / 10, "{sizes:?}");
}

/// Writers keep running while a checkpoint is taken; the image must hold
/// every operation completed before the checkpoint began and, per thread,
/// exactly a prefix of its operations (it is a point-in-time image).
#[test]
fn checkpoint_under_load_is_point_in_time_small_pool() {
    checkpoint_under_load(40);
}

/// With a large pool most pages are dirty when the checkpoint starts, so
/// writers race the checkpoint for them: this exercises the pre-image path.
#[test]
fn checkpoint_under_load_is_point_in_time_large_pool() {
    checkpoint_under_load(2000);
}

fn checkpoint_under_load(nbuffers: usize) {
    const THREADS: u64 = 6;
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), nbuffers);
    let t = tree(&e, 9, 1);
    for i in 0..3000 {
        t.insert(&key(i * 1000), &value(i, 0, 50)).unwrap();
    }
    e.checkpoint(0).unwrap();
    for i in 0..3000 {
        t.replace(&key(i * 1000), &value(i, 1, 60)).unwrap();
    }
    let done: Vec<AtomicU64> = (0..THREADS).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let mut at_start = vec![0u64; THREADS as usize];
    let logs: Vec<OpLog> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|th| {
                let (t, done, stop) = (t.clone(), &done, &stop);
                s.spawn(move || {
                    let mut rng = Rng(th + 50);
                    let mut log = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) || n < 3000 {
                        // Own keys: 1000*i + th + 1 (never collide with the preload).
                        let i = rng.below(3000) * 1000 + th + 1;
                        let k = key(i);
                        if rng.below(3) == 0 {
                            t.delete(&k).unwrap();
                            log.push((false, k, Vec::new()));
                        } else {
                            let v = value(i, n, 30 + rng.below(200) as usize);
                            t.upsert(&k, &v).unwrap();
                            log.push((true, k, v));
                        }
                        n += 1;
                        done[th as usize].store(n, Ordering::Release);
                        if n > 200_000 {
                            break;
                        }
                    }
                    log
                })
            })
            .collect();
        while done.iter().any(|d| d.load(Ordering::Acquire) < 1000) {
            std::thread::yield_now();
        }
        e.checkpoint_hooked(0, || {
            for (th, d) in done.iter().enumerate() {
                at_start[th] = d.load(Ordering::Acquire);
            }
        })
        .unwrap();
        stop.store(true, Ordering::Relaxed);
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(t);
    drop(e);
    let e = open(dir.path(), nbuffers);
    let t = tree(&e, 9, 1);
    assert_valid(&t);
    let img = contents(&t);
    for th in 0..THREADS {
        let mine: u64 = img
            .iter()
            .filter(|(k, _)| u32::from_be_bytes(k[..4].try_into().unwrap()) as u64 % 1000 == th + 1)
            .fold(0, |acc, (k, v)| acc ^ digest(k, v));
        // Replay the log, tracking the digest of the model after each prefix.
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut d = 0u64;
        let mut matches = Vec::new();
        for (n, (put, k, v)) in logs[th as usize].iter().enumerate() {
            if n as u64 >= at_start[th as usize] && d == mine {
                matches.push(n);
            }
            if let Some(old) = model.remove(k) {
                d ^= digest(k, &old);
            }
            if *put {
                d ^= digest(k, v);
                model.insert(k.clone(), v.clone());
            }
        }
        if d == mine {
            matches.push(logs[th as usize].len());
        }
        assert!(
            !matches.is_empty(),
            "thread {th}: the image is not a prefix of its operations including the first {}",
            at_start[th as usize]
        );
    }
    let preload = img
        .keys()
        .filter(|k| u32::from_be_bytes(k[..4].try_into().unwrap()) % 1000 == 0)
        .count();
    assert_eq!(preload, 3000);
}

/// Builds the same state in a fresh directory: a durable checkpoint 1 with
/// `before`, then changes giving `after`, all still in memory.
fn crash_fixture<I: FileIo + 'static>(
    dir: &std::path::Path,
    io: Arc<CrashAfter<I>>,
) -> (Engine, Contents, Contents) {
    let e = Engine::open(dir, 24, io).unwrap();
    let a = tree(&e, 1, 1);
    let b = tree(&e, 2, -1);
    for i in 0..3000 {
        a.insert(&key(i), &value(i, 0, 80)).unwrap();
        if i % 3 == 0 {
            b.insert(&key(i), &value(i, 0, 300)).unwrap();
        }
    }
    e.checkpoint(1).unwrap();
    let before = both(&a, &b);
    for i in 0..3000 {
        if i % 2 == 0 {
            a.delete(&key(i)).unwrap();
        } else {
            a.replace(&key(i), &value(i, 1, 40)).unwrap();
        }
        if i % 5 == 0 {
            b.upsert(&key(i + 5000), &value(i, 1, 500)).unwrap();
        }
    }
    let after = both(&a, &b);
    (e, before, after)
}

/// The contents of trees 1 and 2 in one map (tree 2's keys prefixed "b").
fn both(a: &Tree, b: &Tree) -> Contents {
    let tagged = contents(b)
        .into_iter()
        .map(|(k, v)| ([b"b".to_vec(), k].concat(), v));
    contents(a).into_iter().chain(tagged).collect()
}

fn reopened_contents(dir: &std::path::Path) -> (u64, BTreeMap<Vec<u8>, Vec<u8>>) {
    reopened_on(dir, Arc::new(StdIo::new()))
}

/// As `reopened_contents`, over the files `io` holds.
fn reopened_on(dir: &std::path::Path, io: Arc<dyn FileIo>) -> (u64, Contents) {
    let e = Engine::open(dir, 24, io).unwrap();
    let a = tree(&e, 1, 1);
    let b = tree(&e, 2, -1);
    assert_valid(&a);
    assert_valid(&b);
    (e.durable_checkpoint(), both(&a, &b))
}

#[test]
fn crash_at_every_step_of_a_checkpoint() {
    let mut steps = 0;
    loop {
        let dir = tempfile::tempdir().unwrap();
        let io = Arc::new(CrashAfter::new(StdIo::new(), u64::MAX));
        let (e, before, after) = crash_fixture(dir.path(), io.clone());
        io.arm(steps);
        let res = e.checkpoint(2);
        drop(e); // the "process" dies here
        let (n, got) = reopened_contents(dir.path());
        match n {
            1 => assert!(
                got == before,
                "crash after {steps} steps: previous image damaged"
            ),
            2 => assert!(
                got == after,
                "crash after {steps} steps: new image incomplete"
            ),
            _ => panic!("unexpected checkpoint {n}"),
        }
        if res.is_ok() {
            assert_eq!(n, 2);
            assert!(steps > 10, "the checkpoint took only {steps} I/O steps?");
            break;
        }
        steps += 1;
    }
}

/// Crash at every step of a checkpoint, then cut the power: the files are
/// what a power cut could leave of them (`io::powerloss`: unsynced writes,
/// creations, renames and removals lost, all or in part, writes torn),
/// and a checkpoint that reported success must survive any cut. Each crash
/// point gets the cut that drops everything unsynced and several random
/// ones, and recovery itself is cut short again by another power cut
/// (loading removes and truncates files without syncing).
///
/// Checked to notice a missing fsync, removing each from the engine in
/// turn (and restoring it): the data file's sync before its map is written
/// (`write_images`) makes reopening fail with `Corrupt` "data file
/// truncated: 0 bytes, the map needs 39936" (the map names extents whose
/// writes were lost); the map's sync before its rename, "map file too short
/// (0 bytes)"; the database directories' sync (`commit_checkpoint`), "map
/// file is missing"; the control file's sync before its rename, "control
/// file has 0 bytes"; the engine directory's sync after that rename, "came
/// back as checkpoint 0". Each is hit at the first crash point already, by
/// the fixture's own checkpoint 1. `crash_at_every_step_of_a_checkpoint`
/// (the process dies, the files stay) passes without them.
#[test]
fn power_loss_at_every_step_of_a_checkpoint() {
    let mut steps = 0u64;
    let mut total = CutReport::default();
    let mut outcomes = [0usize; 2];
    loop {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(PowerLoss::new(dir.path()));
        let io = Arc::new(CrashAfter::new(fs.clone(), u64::MAX));
        let (e, before, after) = crash_fixture(dir.path(), io.clone());
        io.arm(steps);
        let res = e.checkpoint(2);
        drop(e); // the process dies, then the power goes
        let cuts = [PowerCut::DropUnsynced]
            .into_iter()
            .chain((0..8).map(|i| PowerCut::Random(steps * 16 + i)));
        for cut in cuts {
            let f = Arc::new(fs.fork());
            let r = f.power_loss(cut);
            total.kept += r.kept;
            total.dropped += r.dropped;
            total.torn += r.torn;
            let (n, got) = reopened_on(dir.path(), f.clone());
            if res.is_ok() {
                assert_eq!(
                    n, 2,
                    "checkpoint 2 reported durable, but a power cut ({cut:?}) left checkpoint {n}"
                );
            }
            match n {
                1 => assert!(
                    got == before,
                    "crash after {steps} steps, {cut:?}: previous image damaged"
                ),
                2 => assert!(
                    got == after,
                    "crash after {steps} steps, {cut:?}: new image incomplete"
                ),
                _ => panic!("crash after {steps} steps, {cut:?}: came back as checkpoint {n}"),
            }
            outcomes[n as usize - 1] += 1;
            // The power goes again right after loading.
            f.power_loss(PowerCut::Random(steps ^ 0x5555));
            assert_eq!(reopened_on(dir.path(), f), (n, got), "{cut:?}, cut again");
        }
        if res.is_ok() {
            assert!(steps > 10, "the checkpoint took only {steps} I/O steps?");
            break;
        }
        steps += 1;
    }
    eprintln!("{steps} steps, cuts {total:?}, came back as checkpoint 1/2: {outcomes:?}");
    // The cuts did lose something, and both checkpoints came back.
    assert!(total.dropped > 100 && total.kept > 100, "{total:?}");
    assert!(total.torn > 0, "{total:?}");
    assert!(outcomes.iter().all(|&n| n > 0), "{outcomes:?}");
}

/// The first checkpoint after a tree of a new database appeared creates
/// that database's directory: a power cut at any step of it, in many
/// random ways, leaves either the previous checkpoint or the new one,
/// complete, with the new database's tree in it. (Before the checkpoint
/// synced the engine directory ahead of writing the control file, a cut
/// before its last step — the engine directory's sync after the rename —
/// could keep the rename and lose the new directory: the tree came back
/// quarantined, "map file is missing".)
#[test]
fn power_loss_while_a_new_database_is_checkpointed() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(PowerLoss::new(dir.path()));
    let e = Engine::open(dir.path(), 24, fs.clone()).unwrap();
    let a = tree(&e, 1, 1);
    for i in 0..500 {
        a.insert(&key(i), &value(i, 0, 80)).unwrap();
    }
    assert_eq!(e.checkpoint(0).unwrap(), 1);
    let before = contents(&a);
    let b = e
        .open_tree(crate::TreeId::new(7, 3), TreeOptions::default())
        .unwrap();
    for i in 0..500 {
        b.insert(&key(i), &value(i, 7, 80)).unwrap();
    }
    let want_b = contents(&b);
    let first = fs.steps() + 1;
    fs.capture_at(first..first + 1000);
    assert_eq!(e.checkpoint(0).unwrap(), 2);
    let mut caps = fs.take_captures();
    caps.push((fs.steps() + 1, fs.fork()));
    let mut outcomes = [0usize; 2];
    for (at, f) in &caps {
        for cut in [PowerCut::DropUnsynced]
            .into_iter()
            .chain((0..40).map(|i| PowerCut::Random(at * 100 + i)))
        {
            let f = Arc::new(f.fork());
            f.power_loss(cut);
            let e = Engine::open(dir.path(), 24, f).unwrap();
            let n = e.durable_checkpoint();
            let when = format!("before step {} of checkpoint 2, {cut:?}", at - first + 1);
            let damage = e.take_load_damage();
            assert!(damage.is_empty(), "{when}: damage at load: {damage:?}");
            assert!(contents(&tree(&e, 1, 1)) == before, "{when}");
            let b = e.tree(crate::TreeId::new(7, 3));
            match n {
                1 => assert!(b.is_err(), "{when}: tree of checkpoint 2 in checkpoint 1"),
                2 => {
                    let b = b.unwrap_or_else(|err| panic!("{when}: {err}"));
                    assert_valid(&b);
                    assert!(contents(&b) == want_b, "{when}");
                }
                _ => panic!("{when}: checkpoint {n}"),
            }
            outcomes[n as usize - 1] += 1;
        }
    }
    assert!(outcomes.iter().all(|&n| n > 0), "{outcomes:?}");
}

/// The engine creates its own directory (in the server `orioledb_data` in
/// the data directory): after the first checkpoint, a power cut must not
/// take the directory, and with it the checkpoint, away. (Before the first
/// checkpoint synced the directory's parent, this came back as an empty
/// engine, checkpoint 0.)
#[test]
fn power_loss_after_the_first_checkpoint_keeps_the_engine_directory() {
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("orioledb_data");
    let fs = Arc::new(PowerLoss::new(top.path()));
    let e = Engine::open(&dir, 16, fs.clone()).unwrap();
    let t = tree(&e, 1, 1);
    for i in 0..300 {
        t.insert(&key(i), &value(i, 0, 50)).unwrap();
    }
    let want = contents(&t);
    assert_eq!(e.checkpoint(0).unwrap(), 1);
    drop(t);
    drop(e);
    fs.power_loss(PowerCut::DropUnsynced);
    let e = Engine::open(&dir, 16, fs.clone()).unwrap();
    assert_eq!(e.durable_checkpoint(), 1, "the first checkpoint was lost");
    let t = tree(&e, 1, 1);
    assert_valid(&t);
    assert!(contents(&t) == want);
}

/// The first state-changing step at or after `from` of the fixture's
/// checkpoint that is not an fsync. A failed fsync poisons the engine for
/// good (`durability.rs`), so tests of a checkpoint that fails and a later
/// one that works fail some other step.
fn first_non_sync_step(from: u64) -> u64 {
    (from..)
        .find(|&step| {
            let dir = tempfile::tempdir().unwrap();
            let io = Arc::new(CrashAfter::new(StdIo::new(), u64::MAX));
            let (e, _, _) = crash_fixture(dir.path(), io.clone());
            let first = Arc::new(std::sync::Mutex::new(None));
            let seen = first.clone();
            io.arm_with(
                step,
                Arc::new(move |op, _| {
                    seen.lock().unwrap().get_or_insert(op);
                    std::io::Error::other("probe")
                }),
            );
            let _ = e.checkpoint(2);
            let op = *first.lock().unwrap();
            op.is_some_and(|op| op != "sync")
        })
        .unwrap()
}

#[test]
fn failed_checkpoint_then_successful_one() {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(CrashAfter::new(StdIo::new(), u64::MAX));
    let (e, _before, after) = crash_fixture(dir.path(), io.clone());
    io.arm(first_non_sync_step(5));
    assert!(e.checkpoint(2).is_err());
    io.arm(u64::MAX);
    // More writes after the failure, then a checkpoint that works.
    let a = e.tree(1).unwrap();
    a.upsert(b"zz-late", b"late").unwrap();
    let n = e.checkpoint(3).unwrap();
    assert!(n > 2);
    drop(a);
    drop(e);
    let (m, got) = reopened_contents(dir.path());
    assert_eq!(m, n);
    let mut want = after;
    want.insert(b"zz-late".to_vec(), b"late".to_vec());
    assert!(got == want);
}

#[test]
fn trees_of_several_databases() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 16);
    // The same relation number in two databases: two distinct trees.
    let a = e
        .open_tree(crate::TreeId::new(5, 100), TreeOptions::default())
        .unwrap();
    let b = e
        .open_tree(crate::TreeId::new(6, 100), TreeOptions::default())
        .unwrap();
    a.insert(b"k", b"in 5").unwrap();
    b.insert(b"k", b"in 6").unwrap();
    e.checkpoint(0).unwrap();
    assert_eq!(
        StdIo::new().list(dir.path()).unwrap(),
        vec!["5", "6", "control"]
    );
    assert_eq!(
        StdIo::new().list(&dir.path().join("6")).unwrap(),
        vec!["100", "100-1.map"]
    );
    drop((a, b));
    drop(e);
    let e = open(dir.path(), 16);
    assert_eq!(
        e.tree_ids().unwrap(),
        vec![crate::TreeId::new(5, 100), crate::TreeId::new(6, 100)]
    );
    assert_eq!(
        e.tree(crate::TreeId::new(6, 100))
            .unwrap()
            .get(b"k")
            .unwrap()
            .unwrap(),
        b"in 6"
    );
    assert_eq!(
        e.tree(crate::TreeId::new(5, 100))
            .unwrap()
            .get(b"k")
            .unwrap()
            .unwrap(),
        b"in 5"
    );
}

/// The host's hook decides what the failing call does (the server turns it
/// into a "disk full" error or a process exit): the checkpoint reports the
/// hook's error for the step it armed, and disarming makes the next one work
/// (the step is not an fsync, whose failure would poison the engine).
#[test]
fn fault_hook_decides_the_failing_step() {
    let step = first_non_sync_step(1);
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(CrashAfter::new(StdIo::new(), u64::MAX));
    let (e, _before, after) = crash_fixture(dir.path(), io.clone());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    io.arm_with(
        step,
        Arc::new(move |op, path| {
            log.lock().unwrap().push((op, path.to_path_buf()));
            std::io::Error::new(std::io::ErrorKind::StorageFull, "injected: disk full")
        }),
    );
    match e.checkpoint(2) {
        Err(crate::EngineError::Io { source, path, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::StorageFull);
            assert_eq!(seen.lock().unwrap()[0].1, path);
        }
        other => panic!("expected the hook's error, got {other:?}"),
    }
    // That state-changing call failed first; each later one asks again.
    assert_eq!(seen.lock().unwrap().len(), 1);
    io.arm(u64::MAX);
    assert_eq!(e.checkpoint(3).unwrap(), 3);
    drop(e);
    let (n, got) = reopened_contents(dir.path());
    assert_eq!(n, 3);
    assert!(got == after);
}

/// A pruner that counts the versions it removes (the work a pruner queues
/// for them: map entries, toast values); 0xDD values are dead.
struct CountingPruner(Arc<AtomicU64>);
impl crate::btree::Pruner for CountingPruner {
    fn prune(&self, _key: &[u8], value: &[u8]) -> crate::btree::Prune {
        if value.first() == Some(&0xDD) {
            self.0.fetch_add(1, Ordering::SeqCst);
            crate::btree::Prune::Remove
        } else {
            crate::btree::Prune::Keep
        }
    }
}

/// While a checkpoint runs, a sweep that must first write the leaf's
/// pre-image (the checkpoint has not written it yet) and fails to leaves the
/// leaf as it was and has the pruner remove nothing: the pruner queues work
/// for what it removes (map-entry deletions, toast values), which must not
/// happen for versions that stay.
#[test]
fn a_sweep_whose_pre_image_write_fails_prunes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(CrashAfter::new(StdIo::new(), u64::MAX));
    let e = Engine::open(dir.path(), 64, io.clone()).unwrap();
    let removed = Arc::new(AtomicU64::new(0));
    let opts = TreeOptions {
        pruner: Some(Arc::new(CountingPruner(removed.clone())) as Arc<dyn crate::btree::Pruner>),
        ..Default::default()
    };
    // How many items of this size one leaf holds: the first that splits.
    let probe = e.open_tree(crate::TreeId::new(1, 9), opts.clone()).unwrap();
    let mut n = 0u64;
    while probe.stats().pages == 1 {
        assert!(probe.insert(&key(n), &value(n, 0, 100)).unwrap());
        n += 1;
    }
    // One nearly full leaf (less than a quarter free), every other value
    // dead (same length: no room needed).
    let t = e.open_tree(crate::TreeId::new(1, 10), opts).unwrap();
    for i in 0..n - 1 {
        assert!(t.insert(&key(i), &value(i, 0, 100)).unwrap());
    }
    for i in (0..n - 1).step_by(2) {
        let mut v = value(i, 0, 100);
        v[0] = 0xDD;
        assert!(t.replace(&key(i), &v).unwrap());
    }
    assert_eq!(t.stats().pages, 1);
    let before = contents(&t);
    // A checkpoint has started (its epoch covers the leaf's changes) and
    // not written the leaf yet; every write fails from here on.
    let meta = &e.inner.meta;
    let epoch = meta.next_epoch().load(Ordering::Acquire);
    meta.running().store(epoch, Ordering::Release);
    meta.next_epoch().store(epoch + 1, Ordering::Release);
    io.arm(0);
    assert!(t.sweep_leaf_at(None).is_err(), "the pre-image write failed");
    assert_eq!(removed.load(Ordering::SeqCst), 0, "the pruner removed versions that stay");
    meta.running().store(0, Ordering::Release);
    io.arm(u64::MAX);
    assert!(contents(&t) == before, "the leaf is as it was");
    // Without the checkpoint the same sweep prunes the dead half.
    assert!(t.sweep_leaf_at(None).is_ok());
    assert_eq!(removed.load(Ordering::SeqCst), (n - 1).div_ceil(2));
}

/// 4 kB blocks of the data file of tree `id` (database 0) holding a
/// non-zero byte: the space a file system that punches holes keeps
/// allocated for it.
fn nonzero_blocks(io: &dyn FileIo, dir: &std::path::Path, id: u32) -> u64 {
    let path = dir.join("0").join(id.to_string());
    let len = io.len(&path).unwrap();
    let mut buf = vec![0u8; 4096];
    (0..len / 4096)
        .filter(|b| {
            io.read_at(&path, b * 4096, &mut buf).unwrap();
            buf.iter().any(|&x| x != 0)
        })
        .count() as u64
}

/// Copy-on-write scatters the extents a checkpoint supersedes through the
/// data file, where trailing-space truncation cannot reach them: after
/// three rounds of rewriting every page the file was 2-3 times the tree.
/// Each checkpoint punches them out, so the space the file holds follows
/// its live pages, and nothing a checkpoint names is punched: the tree
/// reopens whole after every round, and after a power cut at any step.
#[test]
fn superseded_images_are_punched_out_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(PowerLoss::new(dir.path()));
    let e = Engine::open(dir.path(), 64, fs.clone()).unwrap();
    let t = tree(&e, 1, -1);
    for i in 0..6000 {
        t.insert(&key(i), &value(i, 0, 120)).unwrap();
    }
    e.checkpoint(0).unwrap();
    for round in 1..=3 {
        for i in 0..6000 {
            t.replace(&key(i), &value(i, round, 120)).unwrap();
        }
        e.checkpoint(0).unwrap();
        let s = t.stats();
        let held = nonzero_blocks(&*fs, dir.path(), 1) * 4096;
        assert!(
            held * 4 <= s.pages * 8192 * 5,
            "round {round}: the file holds {held} bytes for {} pages ({} bytes long)",
            s.pages,
            s.file_bytes
        );
        let want = contents(&t);
        let copy = Arc::new(fs.fork());
        copy.power_loss(PowerCut::DropUnsynced);
        let r = Engine::open(dir.path(), 24, copy).unwrap();
        let back = tree(&r, 1, -1);
        assert_valid(&back);
        assert!(contents(&back) == want, "round {round}: reopened contents differ");
    }
    // Without punching, the superseded extents stay: the file is longer
    // than the tree needs, so the test above measures the punching.
    assert!(t.stats().file_bytes > t.stats().pages * 8192 * 5 / 4);
}

/// Keys by their first byte, then the rest in reverse byte order: an order
/// a tree learns from its descriptor item (`key_format::DESC_KEY`, least under
/// it), as a language-collated primary key is.
struct TagThenReversed;
impl crate::order::KeyCmp for TagThenReversed {
    fn cmp(&self, a: &[u8], b: &[u8]) -> std::cmp::Ordering {
        a.first().cmp(&b.first()).then_with(|| b[1.min(b.len())..].cmp(&a[1.min(a.len())..]))
    }
}

/// `Engine::copy_tree` (CREATE DATABASE ... TEMPLATE) logs the copy so that
/// replay rebuilds it, in the copy's own key order: the descriptor item is
/// logged by itself before any record with other keys, because replay
/// takes a record's order from the descriptor the tree has when the record
/// comes. (With the descriptor in the first leaf's record, that leaf's keys
/// were replayed in byte order.)
#[test]
fn copied_trees_replay_in_the_order_their_descriptor_names() {
    use crate::key_format::DESC_KEY;
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(crate::wal::MemWal::default());
    let e = Engine::open_logged(dir.path(), 256, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    let order = || -> Arc<dyn crate::order::KeyCmp> { Arc::new(TagThenReversed) };
    let opts = TreeOptions {
        cmp: order(),
        ..Default::default()
    };
    let from = crate::TreeId::new(1, 7);
    let src = e.open_tree(from, opts).unwrap();
    src.insert(DESC_KEY, b"reversed").unwrap();
    for i in 0..3000u32 {
        let k = [&[2u8][..], &i.to_be_bytes()].concat();
        src.insert(&k, &value(i as u64, 0, 90)).unwrap();
    }
    let to = crate::TreeId::new(2, 7);
    e.copy_tree(from, to, order()).unwrap();
    let want = contents(&src);
    assert!(contents(&e.tree(to).unwrap().with_cmp(order())) == want);

    let dir2 = tempfile::tempdir().unwrap();
    let r = Engine::open_logged(dir2.path(), 256, Arc::new(StdIo::new()), None).unwrap();
    // As the server's replay does: the order a tree's descriptor names now.
    let order_of = |id: crate::TreeId| -> Arc<dyn crate::order::KeyCmp> {
        match r.tree(id).ok().and_then(|t| t.get(DESC_KEY).ok().flatten()) {
            Some(_) => order(),
            None => Arc::new(crate::order::Bytewise),
        }
    };
    for rec in wal.since(1) {
        r.replay(&rec, &order_of).unwrap();
    }
    let copy = r.tree(to).unwrap().with_cmp(order());
    if let Err(err) = copy.check() {
        panic!("the replayed copy: {err}");
    }
    assert!(contents(&copy) == want, "the replayed copy's contents");
}

/// The names of the files in database 0's directory under `dir`.
fn db0_files(io: &dyn FileIo, dir: &std::path::Path) -> Vec<String> {
    io.list(&dir.join("0")).unwrap()
}

/// A tree that did not change since its map was written keeps that map: a
/// checkpoint writes no map for it (nor syncs its data file), the control
/// file keeps naming the old map, and a power cut at any step of the next
/// two checkpoints leaves the idle tree whole beside a tree that changed.
/// A change of the level alone, or of the row-id limit alone, is a change.
#[test]
fn an_idle_tree_keeps_its_map_through_power_cuts() {
    let mut steps = 0u64;
    loop {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(PowerLoss::new(dir.path()));
        let io = Arc::new(CrashAfter::new(fs.clone(), u64::MAX));
        let e = Engine::open(dir.path(), 24, io.clone()).unwrap();
        let busy = tree(&e, 1, -1);
        let idle = tree(&e, 3, 1);
        for i in 0..2000 {
            idle.insert(&key(i), &value(i, 0, 80)).unwrap();
            if i % 4 == 0 {
                busy.insert(&key(i), &value(i, 0, 80)).unwrap();
            }
        }
        e.checkpoint(1).unwrap();
        let idle_rows = contents(&idle);
        for i in (0..2000).step_by(4) {
            busy.replace(&key(i), &value(i, 1, 60)).unwrap();
        }
        let busy_rows = contents(&busy);
        io.arm(steps);
        let res = e.checkpoint(2).and_then(|_| e.checkpoint(3));
        drop((busy, idle, e));
        if res.is_ok() {
            assert_eq!(
                db0_files(&*fs, dir.path()),
                vec!["1", "1-2.map", "3", "3-1.map"]
            );
        }
        for cut in [PowerCut::DropUnsynced, PowerCut::Random(steps)] {
            let f = Arc::new(fs.fork());
            f.power_loss(cut);
            let e = Engine::open(dir.path(), 24, f.clone()).unwrap();
            assert!(e.take_load_damage().is_empty(), "{cut:?} after {steps} steps");
            let idle = tree(&e, 3, 1);
            assert_valid(&idle);
            assert!(contents(&idle) == idle_rows, "{cut:?} after {steps} steps");
            let busy = e.tree(1).unwrap();
            assert_valid(&busy);
            if e.durable_checkpoint() >= 2 {
                assert!(contents(&busy) == busy_rows, "{cut:?} after {steps} steps");
            }
        }
        if res.is_ok() {
            assert!(steps > 5, "the checkpoints took only {steps} I/O steps?");
            break;
        }
        steps += 1;
    }
    // Only the level changes, then only the row-id limit: new maps each time.
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 16);
    let t = tree(&e, 3, 1);
    t.insert(b"k", b"v").unwrap();
    assert_eq!(e.checkpoint(0).unwrap(), 1);
    assert_eq!(e.checkpoint(0).unwrap(), 2);
    assert_eq!(db0_files(&StdIo::new(), dir.path()), vec!["3", "3-1.map"]);
    t.set_compress(5).unwrap();
    assert_eq!(e.checkpoint(0).unwrap(), 3);
    assert_eq!(db0_files(&StdIo::new(), dir.path()), vec!["3", "3-3.map"]);
    t.alloc_ids(10).unwrap();
    assert_eq!(e.checkpoint(0).unwrap(), 4);
    assert_eq!(db0_files(&StdIo::new(), dir.path()), vec!["3", "3-4.map"]);
    drop(t);
    drop(e);
    let e = open(dir.path(), 16);
    let t = e.tree(3).unwrap();
    assert_eq!(t.compress(), 5);
    assert!(t.next_id() >= 10);
    assert_eq!(contents(&t).len(), 1);
}
