//! Crash recovery through the log: whatever the durable checkpoint holds,
//! replaying the log from its redo point gives back every change made
//! before the crash, including trees created and dropped since.

use super::*;
use crate::order::{Bytewise, KeyCmp};
use crate::io::{CrashAfter, CutReport, FileIo, PowerCut, PowerLoss};
use crate::wal::MemWal;
use crate::TreeId;

type Model = BTreeMap<TreeId, BTreeMap<Vec<u8>, Vec<u8>>>;

fn bytewise(_: TreeId) -> Arc<dyn KeyCmp> {
    Arc::new(Bytewise)
}

fn recover(dir: &std::path::Path, wal: &Arc<MemWal>) -> Engine {
    recover_on(dir, wal, Arc::new(StdIo::new()))
}

/// As `recover`, over the files `io` holds.
fn recover_on(dir: &std::path::Path, wal: &Arc<MemWal>, io: Arc<dyn FileIo>) -> Engine {
    let e = Engine::open_logged(dir, 32, io, Some(wal.clone())).unwrap();
    for rec in wal.since(e.redo_position()) {
        e.replay(&rec, &bytewise).unwrap();
    }
    e
}

/// A random upsert (`upsert`) or delete in tree `id` (opened or created),
/// mirrored in `model`; nothing while the tree is dropped and awaits a
/// checkpoint. `(step, seed)` make the value.
fn random_change(
    e: &Engine,
    id: TreeId,
    model: &mut Model,
    rng: &mut Rng,
    upsert: bool,
    (step, seed): (u64, u64),
) {
    let t = match e.tree(id) {
        Ok(t) => t,
        Err(_) => match e.open_tree(
            id,
            TreeOptions {
                compress: 1,
                ..Default::default()
            },
        ) {
            Ok(t) => t,
            Err(crate::EngineError::TreeExists(_)) => return,
            Err(err) => panic!("{err}"),
        },
    };
    let m = model.entry(id).or_default();
    let k = key(rng.below(600));
    if upsert {
        let mut v = value(step, seed, 10 + rng.below(300) as usize);
        let pair = key(1000 + rng.below(600));
        match (rng.below(4), m.get(&k)) {
            // A few bytes of an existing value: logged as a patch.
            (0, Some(old)) => {
                v = old.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(v.len() as u64) as usize;
                    v[at] = v[at].wrapping_add(1 + rng.below(250) as u8);
                }
                t.upsert(&k, &v).unwrap();
            }
            // Two new keys as one record, the second sometimes as a delta
            // of an existing value (a replaced row version).
            (1, None) if !m.contains_key(&pair) => {
                let pv = value(step + 1, seed, 9);
                let base = m.iter().nth(rng.below(m.len().max(1) as u64) as usize);
                let base = base.filter(|_| rng.below(2) == 0).map(|(bk, bv)| (bk.clone(), bv.clone()));
                if let Some((_, bv)) = &base {
                    v = bv.clone();
                    let at = rng.below(v.len() as u64) as usize;
                    v[at] = v[at].wrapping_add(1);
                    v.extend_from_slice(&[7, 7]);
                }
                let stable: fn(&[u8]) -> usize = |_| 8;
                let based = base.as_ref().map(|(bk, bv)| (&bk[..], &bv[..], stable));
                assert!(t.insert_pair_based((&pair, &pv), &k, &v, based).unwrap());
                m.insert(pair, pv);
            }
            // A row version replaced (`Tree::update`): its value patched
            // and a successor with a first key put beside it, one record
            // when they share a leaf.
            (2, Some(old)) if !m.contains_key(&pair) => {
                let mut sk = k.clone();
                sk.extend_from_slice(&[0xF0, rng.below(256) as u8]);
                if m.contains_key(&sk) {
                    t.upsert(&k, &v).unwrap();
                } else {
                    v = old.clone();
                    let at = rng.below(v.len() as u64) as usize;
                    v[at] = v[at].wrapping_add(1);
                    let mut sv = v.clone();
                    let at = rng.below(sv.len() as u64) as usize;
                    sv[at] ^= 0x21;
                    sv.extend_from_slice(&[5; 3]);
                    let pv = value(step + 1, seed, 9);
                    let succ = crate::btree::Successor {
                        first: Some((&pair, &pv)),
                        key: &sk,
                        stable: |_| 8,
                        reuse: false,
                    };
                    let put = (crate::btree::Change::Put(v.clone()), Some(sv.clone()), ());
                    t.update(&k, &succ, |_| put).unwrap();
                    m.insert(pair, pv);
                    m.insert(sk, sv);
                }
            }
            // A load's batch: new ascending keys, a leaf per record.
            (3, None) => {
                let first = 2000 + rng.below(3000);
                let run: Vec<(Vec<u8>, Vec<u8>)> = (first..first + 1 + rng.below(60))
                    .map(key)
                    .filter(|rk| !m.contains_key(rk))
                    .map(|rk| (rk, value(step, seed, 10 + rng.below(200) as usize)))
                    .collect();
                let items: Vec<(&[u8], &[u8])> = run.iter().map(|(a, b)| (&a[..], &b[..])).collect();
                assert_eq!(t.insert_run(&items).unwrap(), None);
                m.extend(run);
                t.upsert(&k, &v).unwrap();
            }
            _ => t.upsert(&k, &v).unwrap(),
        }
        m.insert(k, v);
    } else {
        assert_eq!(t.delete(&k).unwrap(), m.remove(&k).is_some());
    }
}

fn snapshot(e: &Engine) -> Model {
    e.tree_ids().unwrap()
        .into_iter()
        .map(|id| {
            let t = e.tree(id).unwrap();
            assert_valid(&t);
            (id, contents(&t))
        })
        .collect()
}

#[test]
fn replay_after_crash_restores_every_change() {
    for seed in 0..12u64 {
        let dir = tempfile::tempdir().unwrap();
        let wal = Arc::new(MemWal::default());
        let io = Arc::new(CrashAfter::new(StdIo::new(), u64::MAX));
        let mut e = Engine::open_logged(dir.path(), 24, io.clone(), Some(wal.clone())).unwrap();
        let mut rng = Rng(seed);
        let mut model: Model = BTreeMap::new();
        for step in 0..4000u64 {
            let id = TreeId::new(1 + rng.below(2) as u32, 10 + rng.below(3) as u32);
            match rng.below(100) {
                0 => {
                    if model.remove(&id).is_some() {
                        e.drop_tree(id).unwrap();
                    }
                }
                1..=2 => {
                    // A checkpoint, sometimes dying part-way.
                    if rng.below(3) == 0 {
                        io.arm(rng.below(40));
                    }
                    let r = e.checkpoint(0);
                    io.arm(u64::MAX);
                    if r.is_err_and(|err| err.is_sync_failure()) {
                        // A failed fsync poisons the engine: the server
                        // restarts, loading and replaying from disk.
                        drop(e);
                        e = Engine::open_logged(dir.path(), 24, io.clone(), Some(wal.clone()))
                            .unwrap();
                        for rec in wal.since(e.redo_position()) {
                            e.replay(&rec, &bytewise).unwrap();
                        }
                    }
                }
                n => {
                    random_change(&e, id, &mut model, &mut rng, n < 70, (step, seed));
                }
            }
        }
        let durable = e.durable_checkpoint();
        drop(e); // crash: the pool and everything not checkpointed is gone
        // The workload logs every kind of change, patches and pairs too.
        let kinds: std::collections::BTreeSet<u8> = wal.since(1).iter().map(|r| r[0]).collect();
        assert!(kinds.is_superset(&[2, 3, 4, 7, 8, 10, 11, 12].into()), "seed {seed}: kinds {kinds:?}");
        let e = recover(dir.path(), &wal);
        assert_eq!(e.durable_checkpoint(), durable);
        assert!(
            snapshot(&e) == model,
            "seed {seed}: recovered state differs"
        );
        // A crash during or right after recovery: recover again from disk.
        drop(e);
        let e = recover(dir.path(), &wal);
        let again = snapshot(&e);
        assert!(again == model, "seed {seed}: second recovery differs");
        // A checkpoint after recovery moves the redo point past the log.
        e.checkpoint(0).unwrap();
        assert_eq!(e.redo_position(), wal.insert_position());
        drop(e);
        let e = recover(dir.path(), &wal);
        assert!(
            snapshot(&e) == model,
            "seed {seed}: state after post-recovery checkpoint differs"
        );
    }
}

/// Cuts the power of `fs` (taken at `when`), recovers from what is left and
/// the log, and checks the trees against `model`. With `then_checkpoint`,
/// the recovered engine also takes a checkpoint and loses power once more:
/// that checkpoint must hold everything on its own.
fn cut_and_recover(
    dir: &std::path::Path,
    wal: &MemWal,
    model: &Model,
    fs: PowerLoss,
    cut: PowerCut,
    then_checkpoint: bool,
    when: &str,
) -> CutReport {
    let report = fs.power_loss(cut);
    let fs = Arc::new(fs);
    // Another "server" recovering from the same log: its checkpoint must
    // not extend the log of the run being cut.
    let log = Arc::new(wal.copy());
    let e = recover_on(dir, &log, fs.clone());
    assert!(
        snapshot(&e) == *model,
        "{when}, {cut:?}: recovered state differs"
    );
    if then_checkpoint {
        e.checkpoint(0).unwrap();
        drop(e);
        let again = PowerCut::Random(!log.insert_position());
        fs.power_loss(again);
        let e = recover_on(dir, &log, fs);
        assert_eq!(
            e.redo_position(),
            log.insert_position(),
            "{when}, {cut:?}, recovered, checkpointed, {again:?}: the checkpoint was lost"
        );
        assert!(
            snapshot(&e) == *model,
            "{when}, {cut:?}, recovered, checkpointed, {again:?}: state differs"
        );
    }
    report
}

/// Power cuts anywhere (`io::powerloss`): before every step of every
/// checkpoint of a random workload over trees created and dropped on the
/// way, right after each checkpoint, and every few hundred changes between
/// them, the files are cut to what a power failure could leave (nothing
/// unsynced, or a random part of it), and recovery from them and the log
/// gives back every change, in trees that pass the checker. Sometimes the
/// recovered engine checkpoints and loses power again.
///
/// Checked to notice a missing fsync: without the database directories'
/// sync before the control file is written (`commit_checkpoint`), a cut
/// loses the new maps' names and recovery fails with `Corrupt` "map file is
/// missing" for a tree the control file lists; without the data file's
/// sync before its map (`write_images`), "data file truncated"; without
/// the engine directory's sync after the control file's rename, a
/// checkpoint the recovered engine completed is lost to the next cut: the
/// redo point comes back older than the log's end (this log keeps every
/// record, but the server's recycles what lies before a durable redo
/// point).
#[test]
fn power_loss_anywhere_recovers_every_change() {
    let mut total = CutReport::default();
    let mut cuts = 0u64;
    for seed in 0..3u64 {
        let dir = tempfile::tempdir().unwrap();
        let wal = Arc::new(MemWal::default());
        let fs = Arc::new(PowerLoss::new(dir.path()));
        let e = Engine::open_logged(dir.path(), 24, fs.clone(), Some(wal.clone())).unwrap();
        let mut rng = Rng(seed + 1000);
        let mut model: Model = BTreeMap::new();
        let mut check = |fs: PowerLoss, model: &Model, when: &str| {
            cuts += 1;
            let cut = if cuts % 3 == 0 {
                PowerCut::DropUnsynced
            } else {
                PowerCut::Random(cuts * 31 + seed)
            };
            let r = cut_and_recover(dir.path(), &wal, model, fs, cut, cuts % 16 == 0, when);
            total.kept += r.kept;
            total.dropped += r.dropped;
            total.torn += r.torn;
        };
        for step in 0..3000u64 {
            let id = TreeId::new(1 + rng.below(2) as u32, 10 + rng.below(3) as u32);
            match rng.below(200) {
                0 => {
                    if model.remove(&id).is_some() {
                        e.drop_tree(id).unwrap();
                    }
                }
                1..=3 => {
                    // The power may go before any step of the checkpoint.
                    let first = fs.steps() + 1;
                    fs.capture_at(first..first + 1000);
                    let n = e.checkpoint(0).unwrap();
                    fs.capture_at([]);
                    let caps = fs.take_captures();
                    let k = caps.len();
                    assert!(k < 1000, "checkpoint of {k} steps");
                    // The last 16 steps (the commit: directory syncs, the
                    // control file, removals, truncations) and every third
                    // step before them (page writes, maps; which third
                    // changes from one checkpoint to the next).
                    for (i, (at, f)) in caps.into_iter().enumerate() {
                        if i + 16 < k && (i + n as usize) % 3 != 0 {
                            continue;
                        }
                        check(
                            f,
                            &model,
                            &format!("seed {seed}, checkpoint {n}, step {}", at - first + 1),
                        );
                    }
                    check(
                        fs.fork(),
                        &model,
                        &format!("seed {seed}, after checkpoint {n}"),
                    );
                }
                n => {
                    random_change(&e, id, &mut model, &mut rng, n < 150, (step, seed));
                }
            }
            if step % 250 == 249 {
                check(fs.fork(), &model, &format!("seed {seed}, change {step}"));
            }
        }
    }
    eprintln!("{cuts} power cuts: {total:?}");
    assert!(total.dropped > 1000 && total.kept > 1000, "{total:?}");
}

/// Writers on several threads while checkpoints run: the log's order per
/// key matches the pages', and the redo point splits it exactly.
#[test]
fn concurrent_writers_and_checkpoints_recover() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(MemWal::default());
    let e = Engine::open_logged(dir.path(), 32, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    let t = e.open_tree(7u32, TreeOptions::default()).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let models: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4u64)
            .map(|th| {
                let t = t.clone();
                s.spawn(move || {
                    let mut rng = Rng(th + 100);
                    let mut m = BTreeMap::new();
                    for step in 0..5000u64 {
                        // Keys interleave across threads, so they share leaves.
                        let k = key(rng.below(1500) * 4 + th);
                        if rng.below(4) == 0 {
                            t.delete(&k).unwrap();
                            m.remove(&k);
                        } else {
                            let v = value(step, th, 20 + rng.below(150) as usize);
                            t.upsert(&k, &v).unwrap();
                            m.insert(k, v);
                        }
                    }
                    m
                })
            })
            .collect();
        let ck = s.spawn(|| {
            // At least two checkpoints, however the threads are scheduled.
            let mut n = 0;
            while n < 2 || !stop.load(std::sync::atomic::Ordering::Relaxed) {
                e.checkpoint(0).unwrap();
                n += 1;
            }
        });
        let ms = hs.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        ck.join().unwrap();
        ms
    });
    assert!(
        e.durable_checkpoint() >= 2,
        "checkpoints should have run meanwhile"
    );
    drop(t);
    drop(e);
    let e = recover(dir.path(), &wal);
    let want: BTreeMap<_, _> = models.into_iter().flatten().collect();
    let t = e.tree(7u32).unwrap();
    assert_valid(&t);
    assert!(
        contents(&t) == want,
        "recovered tree differs from what the writers did"
    );
}

/// Row ids are never handed out twice, also across crashes and recovery.
#[test]
fn row_ids_stay_unique_across_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(MemWal::default());
    let mut seen_max = 0u64;
    let mut seen = std::collections::HashSet::new();
    let mut rng = Rng(3);
    for round in 0..6 {
        let e = recover(dir.path(), &wal);
        let t = match e.tree(9u32) {
            Ok(t) => t,
            Err(_) => e.open_tree(9u32, TreeOptions::default()).unwrap(),
        };
        for _ in 0..2000 {
            // Consecutive runs, or single ids packed into blocks (which
            // skip the rest of a block that has no room).
            let (first, n) = if rng.below(2) == 0 {
                let n = 1 + rng.below(50);
                (t.alloc_ids(n).unwrap(), n)
            } else {
                let take = 1 + rng.below(3000) as u32;
                let fill = crate::meta::BlockFill {
                    per_block: 291,
                    cap: 8168,
                    take,
                    need: take + rng.below(100) as u32,
                };
                // Half of them replace an earlier id (possibly in a block
                // closed before the crash).
                let id = if seen_max > 0 && rng.below(2) == 0 {
                    t.alloc_near_id(rng.below(seen_max + 1), take, fill)
                        .unwrap()
                } else {
                    t.alloc_packed_id(fill).unwrap()
                };
                (id, 1)
            };
            for id in first..first + n {
                assert!(seen.insert(id), "round {round}: id {id} handed out twice");
            }
            // Ids from the counter grow; ids near an earlier one may not.
            seen_max = seen_max.max(first + n - 1);
            if rng.below(500) == 0 {
                e.checkpoint(0).unwrap();
            }
        }
        // crash: dropped without a final checkpoint
    }
}

/// Truncation in place: the tree is empty at once, stays empty after a
/// checkpoint and after replay, its space is reused, and row ids go on.
#[test]
fn truncate_in_place_survives_checkpoints_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(MemWal::default());
    let e = Engine::open_logged(dir.path(), 16, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    let t = e.open_tree(4u32, TreeOptions::default()).unwrap();
    for i in 0..5000 {
        t.insert(&key(i), &value(i, 0, 100)).unwrap();
    }
    let id_before = t.alloc_ids(1).unwrap();
    e.checkpoint(0).unwrap();
    let pages_full = t.stats().pages;
    e.truncate_tree(4u32).unwrap();
    assert!(contents(&t).is_empty());
    assert_eq!(t.stats().pages, 1);
    assert_valid(&t);
    for i in 0..100 {
        t.insert(&key(i), &value(i, 1, 100)).unwrap();
    }
    assert!(t.alloc_ids(1).unwrap() > id_before);
    let want = contents(&t);
    // Replay across the truncation (the durable image still has 5000 rows).
    drop(t);
    drop(e);
    let e = recover(dir.path(), &wal);
    let t = e.tree(4u32).unwrap();
    assert_valid(&t);
    assert!(contents(&t) == want);
    e.checkpoint(0).unwrap();
    assert!(t.stats().pages < pages_full / 10);
    drop(t);
    drop(e);
    let e = recover(dir.path(), &wal);
    assert!(contents(&e.tree(4u32).unwrap()) == want);
}

/// Replay passes over the records of a tree quarantined at load (its map is
/// damaged) and applies everything else, including that tree's drop.
#[test]
fn replay_skips_a_damaged_tree_but_applies_its_drop() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(MemWal::default());
    let e = Engine::open_logged(dir.path(), 16, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    let (a, b) = (tree(&e, 1, -1), tree(&e, 2, -1));
    for i in 0..500 {
        a.insert(&key(i), &value(i, 0, 60)).unwrap();
        b.insert(&key(i), &value(i, 1, 60)).unwrap();
    }
    e.checkpoint(0).unwrap();
    for i in 500..700 {
        a.insert(&key(i), &value(i, 0, 60)).unwrap();
        b.insert(&key(i), &value(i, 1, 60)).unwrap();
    }
    let want_b = contents(&b);
    drop((a, b));
    drop(e);
    let map = dir.path().join("0").join("1-1.map");
    let mut bytes = std::fs::read(&map).unwrap();
    bytes[20] ^= 1;
    std::fs::write(&map, &bytes).unwrap();
    let e = Engine::open_logged(dir.path(), 16, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    let mut skipped = 0;
    for rec in wal.since(e.redo_position()) {
        match e.replay(&rec, &bytewise).unwrap() {
            crate::Replayed::Applied => {}
            crate::Replayed::SkippedDamaged(id) => {
                assert_eq!(id, TreeId::new(0, 1));
                skipped += 1;
            }
        }
    }
    assert_eq!(skipped, 200);
    assert!(contents(&e.tree(2u32).unwrap()) == want_b);
    assert!(matches!(
        e.tree(1u32),
        Err(crate::EngineError::Corrupt { .. })
    ));
    let drop_rec = crate::wal::Record::Drop {
        tree: TreeId::new(0, 1),
    }
    .encode();
    assert_eq!(
        e.replay(&drop_rec, &bytewise).unwrap(),
        crate::Replayed::Applied
    );
    assert!(!e.has_tree(1u32));
    e.checkpoint(0).unwrap();
    assert_eq!(
        StdIo::new().list(&dir.path().join("0")).unwrap(),
        vec!["2", "2-2.map"]
    );
}

/// Replay finds each record's tree without scanning the tree directory:
/// thousands of records across 200 trees (created, written, some dropped
/// and created again) cost one scan per tree creation, not one per record,
/// and come back exactly.
#[test]
fn replay_across_many_trees_finds_trees_in_constant_time() {
    const TREES: u32 = 200;
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(MemWal::default());
    let e = Engine::open_logged(dir.path(), 64, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    e.checkpoint(0).unwrap();
    let mut rng = Rng(11);
    let mut model: Model = BTreeMap::new();
    for t in 0..TREES {
        model.insert(TreeId::new(1, 100 + t), BTreeMap::new());
        e.open_tree(TreeId::new(1, 100 + t), TreeOptions::default())
            .unwrap();
    }
    for step in 0..20_000u64 {
        let id = TreeId::new(1, 100 + rng.below(TREES as u64) as u32);
        if rng.below(2000) == 0 {
            // Dropped and at once replaced by a tree of another number.
            e.drop_tree(id).unwrap();
            model.remove(&id);
            let new = TreeId::new(2, id.rel);
            if let std::collections::btree_map::Entry::Vacant(slot) = model.entry(new) {
                e.open_tree(new, TreeOptions::default()).unwrap();
                slot.insert(BTreeMap::new());
            }
            continue;
        }
        let Ok(t) = e.tree(id) else { continue };
        let m = model.get_mut(&id).unwrap();
        let k = key(rng.below(300));
        if rng.below(5) == 0 {
            t.delete(&k).unwrap();
            m.remove(&k);
        } else {
            let v = value(step, 0, 20 + rng.below(60) as usize);
            t.upsert(&k, &v).unwrap();
            m.insert(k, v);
        }
    }
    drop(e);
    let e = Engine::open_logged(dir.path(), 64, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    let records = wal.since(e.redo_position());
    let creates = records
        .iter()
        .filter(|r| {
            matches!(
                crate::wal::Record::decode(r),
                Ok(crate::wal::Record::Create { .. })
            )
        })
        .count() as u64;
    let scans = e.inner.dir_scans.load(std::sync::atomic::Ordering::Relaxed);
    let start = std::time::Instant::now();
    for rec in &records {
        e.replay(rec, &bytewise).unwrap();
    }
    let took = start.elapsed();
    let scans = e.inner.dir_scans.load(std::sync::atomic::Ordering::Relaxed) - scans;
    assert!(records.len() > 15_000, "{} records", records.len());
    assert!(
        scans <= creates + 1,
        "{scans} directory scans replaying {} records with {creates} tree creations",
        records.len()
    );
    eprintln!(
        "replayed {} records across {} trees in {took:?} ({scans} directory scans)",
        records.len(),
        model.len()
    );
    assert!(snapshot(&e) == model, "replayed trees differ");
}

/// Row versions updated as the table AM updates them (`Tree::update`):
/// the old version gets an updater (its short header becomes the full one,
/// or fields of a full one change) and the new one, beside it, is a delta
/// of it — sometimes with a HOT root trailer the old one lacks, or without
/// the one it has. Their records hold the header fields and the tuple's
/// changed bytes only, and a crash replays them to the same values, twice.
#[test]
fn version_updates_replay_from_header_fields_and_trailer_deltas() {
    use crate::version::{self, Header};
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(MemWal::default());
    let e = Engine::open_logged(dir.path(), 24, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    let id = TreeId::new(1, 10);
    let t = e.open_tree(id, TreeOptions::default()).unwrap();
    let mut rng = Rng(7);
    let mut m: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let tuple = |r: u64| -> Vec<u8> { (0..90u64).map(|i| (i * 7 + r) as u8).collect() };
    let mut next_id = 1u64;
    // Rows: the newest version's key per row.
    let mut rows: Vec<Vec<u8>> = Vec::new();
    for r in 0..300u64 {
        let h = Header {
            hoff: 24,
            ..Header::new(100 + r as u32, (r % 3) as u32, next_id)
        };
        // Six bytes more, as a version key's row-id suffix.
        let mut k = key(next_id * 4);
        k.extend([9u8; 6]);
        next_id += 1;
        let v = h.with_tail(&tuple(r));
        t.upsert(&k, &v).unwrap();
        m.insert(k.clone(), v);
        rows.push(k);
    }
    e.checkpoint(0).unwrap();
    let from = wal.insert_position();
    let (mut header_edits, mut trailer_deltas, mut implied) = (0, 0, 0);
    for step in 0..3000u64 {
        let row = rng.below(rows.len() as u64) as usize;
        let k = rows[row].clone();
        let old = m[&k].clone();
        // The successor sorts right before its old version, as a keyed
        // table's newer versions do.
        let mut sk = k.clone();
        *sk.last_mut().unwrap() -= 1;
        if m.contains_key(&sk) {
            continue;
        }
        // Most successors are what an UPDATE makes (`edit::successor_header`:
        // the updater's xid and command, its own row id, heap-only when
        // the old version became HOT-updated); the rest differ somewhere.
        let (xid, cid, hot) = (5000 + step as u32, rng.below(3) as u32, rng.below(3) > 0);
        let own = crate::key_format::version_suffix(&sk).unwrap();
        let odd = rng.below(4) == 0;
        let mut h = Header::decode(&old, crate::key_format::own_id(&k)).unwrap();
        h.set_deleter(xid, cid, if odd { next_id } else { own }, false);
        h.infomask2 &= !version::bits::HOT_UPDATED;
        if hot {
            h.infomask2 |= version::bits::HOT_UPDATED;
        }
        let mut edited = old.clone();
        version::set_header(&mut edited, &h);
        let mut body = old[version::header_len(&old)..].to_vec();
        if version::hot_root(&Header::decode(&old, 0).unwrap(), &old).is_some() {
            body.truncate(body.len() - version::ROOT_LEN);
        }
        let at = rng.below(60) as usize;
        body[at] = body[at].wrapping_add(1);
        let mut fresh = Header {
            hoff: 24,
            ..Header::new(xid, if odd { cid + 1 } else { cid }, own)
        };
        fresh.infomask |= version::bits::UPDATED;
        let mut new = fresh.with_tail(&body);
        if hot {
            version::make_heap_only(&mut new, 1 + rng.below(1000));
        }
        next_id += 1;
        let succ = crate::btree::Successor {
            first: None,
            key: &sk,
            stable: version::header_len,
            reuse: false,
        };
        let put = (crate::btree::Change::Put(edited.clone()), Some(new.clone()), ());
        let before = wal.insert_position();
        t.update(&k, &succ, |_| put).unwrap();
        for rec in wal.since(before) {
            if let Ok(crate::wal::Record::Update { edit, delta, new_key, .. }) = crate::wal::Record::decode(&rec) {
                if let crate::wal::Edit::Header(h) = &edit {
                    header_edits += 1;
                    implied += (crate::edit::successor_header(h, &new_key) == Some(delta.head.clone())) as u32;
                }
                trailer_deltas += (!delta.tail.is_empty() || delta.skip > 0) as u32;
                // Header fields and a few tuple bytes, never the tuple.
                assert!(rec.len() < 80, "{} bytes: {edit:?} {delta:?}", rec.len());
            }
        }
        m.insert(k, edited);
        m.insert(sk.clone(), new);
        rows[row] = sk;
    }
    assert!(
        header_edits > 1000 && trailer_deltas > 500 && implied > 1000 && implied + 300 < header_edits,
        "{header_edits} {trailer_deltas} {implied}"
    );
    assert!(wal.since(from).len() >= 2000);
    let want = m.clone();
    drop(t);
    drop(e);
    for _ in 0..2 {
        let e = recover(dir.path(), &wal);
        let got = contents(&e.tree(id).unwrap());
        assert!(got == want, "recovered versions differ");
    }
}
