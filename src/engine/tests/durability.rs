//! Durability hazards: an fsync that fails once (the kernel may have dropped
//! the dirty pages it was to write, so a later fsync that succeeds proves
//! nothing), and a map file lost while its tree is still part of the
//! durable checkpoint.

use super::*;
use crate::error::EngineError;
use crate::io::FileIo;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Ordinary files whose sync number N (of files or directories, counted
/// from when it was armed) fails once, as Linux reports a writeback error
/// once and then forgets it: every later sync succeeds.
///
/// Invariant: `pass` is how many syncs still succeed before the failing
/// one, `u64::MAX` when none is to fail (disarmed, or already failed).
struct FlakySync {
    inner: StdIo,
    pass: AtomicU64,
    failed: std::sync::Mutex<Vec<PathBuf>>,
}

impl FlakySync {
    fn new() -> Self {
        FlakySync {
            inner: StdIo::new(),
            pass: AtomicU64::new(u64::MAX),
            failed: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Lets `n` syncs succeed, then fails the next one once.
    fn fail_sync_after(&self, n: u64) {
        self.pass.store(n, Ordering::SeqCst);
    }

    fn failed(&self) -> Vec<PathBuf> {
        self.failed.lock().unwrap().clone()
    }

    fn step(&self, path: &Path) -> io::Result<()> {
        let before = self
            .pass
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
                u64::MAX => None,
                0 => Some(u64::MAX),
                n => Some(n - 1),
            });
        if before == Ok(0) {
            self.failed.lock().unwrap().push(path.to_path_buf());
            return Err(io::Error::from_raw_os_error(5)); // EIO
        }
        Ok(())
    }
}

impl FileIo for FlakySync {
    fn read_at(&self, path: &Path, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(path, off, buf)
    }
    fn write_at(&self, path: &Path, off: u64, buf: &[u8]) -> io::Result<()> {
        self.inner.write_at(path, off, buf)
    }
    fn sync(&self, path: &Path) -> io::Result<()> {
        self.step(path)?;
        self.inner.sync(path)
    }
    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        self.inner.set_len(path, len)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        self.inner.len(path)
    }
    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_file(path, bytes)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.step(dir)?;
        self.inner.sync_dir(dir)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir(dir)
    }
    fn forget_handles(&self) {
        self.inner.forget_handles()
    }
}

/// An fsync that fails once poisons the checkpointer: neither that
/// checkpoint nor any later one is reported durable, although every later
/// fsync succeeds (what it was to make durable may be gone), in every
/// handle of the "server"; and nothing more is written to the data files.
/// Each sync of a checkpoint fails in turn: data files, maps, database
/// directory, engine directory, control file, and the engine directory
/// after the control file's rename (the commit point).
#[test]
fn failed_fsync_poisons_every_later_checkpoint() {
    let mut which = 0u64;
    loop {
        let dir = tempfile::tempdir().unwrap();
        let io = Arc::new(FlakySync::new());
        let e = Engine::open(dir.path(), 24, io.clone()).unwrap();
        let a = tree(&e, 1, 1);
        let b = tree(&e, 2, -1);
        for i in 0..2000 {
            a.insert(&key(i), &value(i, 0, 80)).unwrap();
            b.insert(&key(i), &value(i, 0, 30)).unwrap();
        }
        assert_eq!(e.checkpoint(0).unwrap(), 1);
        for i in 0..2000 {
            a.replace(&key(i), &value(i, 1, 90)).unwrap();
        }
        b.upsert(b"more", b"rows").unwrap();
        io.fail_sync_after(which);
        let first = e.checkpoint(0);
        let failed = io.failed();
        if failed.is_empty() {
            // Past the checkpoint's last sync: it had nothing to fail.
            assert_eq!(first.unwrap(), 2);
            break;
        }
        match &first {
            Err(err @ EngineError::SyncFailed { path, .. }) => {
                assert_eq!(path, &failed[0], "{err}");
                assert!(err.is_sync_failure());
                assert!(err.to_string().contains("fsync"), "{err}");
            }
            other => panic!("sync {which}: expected SyncFailed, got {other:?}"),
        }
        // The error is forgotten: fsync "works" again, checkpoints do not.
        for _ in 0..2 {
            match e.checkpoint(0) {
                Err(err) => assert!(err.is_sync_failure(), "sync {which}: {err}"),
                Ok(n) => {
                    panic!("sync {which}: checkpoint {n} reported durable after an fsync failed")
                }
            }
        }
        assert_eq!(io.failed().len(), 1);
        // Every process of the server is poisoned, not just the one that saw it.
        let other = e.attach_another(Arc::new(StdIo::new())).unwrap();
        assert!(other.checkpoint(0).unwrap_err().is_sync_failure());
        // No data file is written any more: an extent that the checkpoint
        // on disk names might be reused. Reads still work.
        assert_eq!(a.get(&key(7)).unwrap().unwrap(), value(7, 1, 90));
        let wrote: Result<(), EngineError> = (0..20_000u64)
            .try_for_each(|i| a.upsert(&key(i + 100_000), &value(i, 2, 200)).map(|_| ()));
        match wrote {
            Err(err) => assert!(err.is_sync_failure(), "sync {which}: {err}"),
            Ok(()) => panic!("sync {which}: a poisoned engine wrote its data files"),
        }
        drop((a, b, other, e));
        // After the server's PANIC and restart: whichever checkpoint is
        // durable on disk loads, and checkpoints work again.
        let e = open(dir.path(), 24);
        let n = e.durable_checkpoint();
        assert!(n == 1 || n == 2, "sync {which}: durable {n}");
        let a = e.tree(1).unwrap();
        assert_valid(&a);
        assert_valid(&e.tree(2).unwrap());
        let want = if n == 1 {
            value(7, 0, 80)
        } else {
            value(7, 1, 90)
        };
        assert_eq!(a.get(&key(7)).unwrap().unwrap(), want);
        assert_eq!(e.checkpoint(0).unwrap(), n + 1);
        which += 1;
    }
    assert!(
        which >= 6,
        "a checkpoint of two trees made only {which} syncs?"
    );
}
/// Trees 5 (4000 rows) and 6 (100 rows), both changed after checkpoint 1
/// and in durable checkpoint 2; returns tree 5's contents.
fn two_checkpoints(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let e = open(dir, 16);
    let t = tree(&e, 5, 1);
    let other = tree(&e, 6, -1);
    for i in 0..4000 {
        t.insert(&key(i), &value(i, 0, 90)).unwrap();
    }
    for i in 0..100 {
        other.insert(&key(i), &value(i, 6, 40)).unwrap();
    }
    assert_eq!(e.checkpoint(0).unwrap(), 1);
    for i in 0..4000 {
        t.replace(&key(i), &value(i, 1, 70)).unwrap();
    }
    // Both trees change, so both get maps of checkpoint 2.
    other.replace(&key(0), &value(0, 7, 40)).unwrap();
    assert_eq!(e.checkpoint(0).unwrap(), 2);
    contents(&t)
}

/// Opening tree 5 fails with `Corrupt` naming `map` as missing and naming
/// the kept data file, however it is asked for; tree 6 works.
fn expect_missing_map(e: &Engine, map: &Path, data: &Path) {
    let opened = [
        e.tree(5).map(|_| ()),
        e.open_tree(5, TreeOptions::default()).map(|_| ()),
    ];
    for r in opened {
        match r {
            Err(EngineError::Corrupt { path, detail, .. }) => {
                assert_eq!(path, map, "{detail}");
                assert!(detail.contains("missing"), "{detail}");
                assert!(detail.contains(&data.display().to_string()), "{detail}");
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(()) => panic!("a tree without its map was opened"),
        }
    }
    let t = e.tree(6).unwrap();
    assert_valid(&t);
    assert!(contents(&t).len() >= 100);
}

/// A live tree's map file lost between checkpoints (deleted, or absent
/// from a file-level copy taken mid-checkpoint): its data file is kept
/// untouched, the tree is quarantined with an error naming the map, the
/// load reports it once, other trees work and checkpoint; restoring the
/// map under its name (which the control file keeps naming) repairs the
/// tree.
#[test]
fn missing_map_quarantines_the_tree_and_keeps_its_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = two_checkpoints(dir.path());
    let db = dir.path().join("0");
    let data = db.join("5");
    let map = db.join("5-2.map");
    let saved = std::fs::read(&map).unwrap();
    let data_bytes = std::fs::read(&data).unwrap();
    std::fs::remove_file(&map).unwrap();
    {
        let e = open(dir.path(), 16);
        assert_eq!(
            std::fs::read(&data).unwrap(),
            data_bytes,
            "data file changed"
        );
        let damage = e.take_load_damage();
        assert_eq!(damage.len(), 1, "{damage:?}");
        assert!(damage[0].to_string().contains("missing"), "{}", damage[0]);
        assert!(e.take_load_damage().is_empty(), "reported once");
        assert!(e.has_tree(5));
        expect_missing_map(&e, &map, &data);
        // Other trees checkpoint as usual; the data file stays as it is.
        e.tree(6).unwrap().insert(b"new", b"row").unwrap();
        assert_eq!(e.checkpoint(0).unwrap(), 3);
        assert_eq!(e.checkpoint(0).unwrap(), 4);
        expect_missing_map(&e, &map, &data);
    }
    assert_eq!(
        std::fs::read(&data).unwrap(),
        data_bytes,
        "data file changed"
    );
    // Tree 6 changed before checkpoint 3 only.
    assert_eq!(StdIo::new().list(&db).unwrap(), vec!["5", "6", "6-3.map"]);
    {
        // Still quarantined after a restart: the durable checkpoint still
        // names the tree.
        let e = open(dir.path(), 16);
        assert_eq!(e.take_load_damage().len(), 1);
        expect_missing_map(&e, &map, &data);
    }
    assert_eq!(
        std::fs::read(&data).unwrap(),
        data_bytes,
        "data file changed"
    );
    // Restored under its name, the tree loads.
    std::fs::write(&map, &saved).unwrap();
    let e = open(dir.path(), 16);
    assert!(e.take_load_damage().is_empty());
    let t = e.tree(5).unwrap();
    assert_valid(&t);
    assert!(contents(&t) == good);
    t.upsert(b"after", b"repair").unwrap();
    e.checkpoint(0).unwrap();
    drop(t);
    drop(e);
    let e = open(dir.path(), 16);
    assert_eq!(contents(&e.tree(5).unwrap()).len(), good.len() + 1);
}

/// A checkpoint in progress when a copy of the directory was taken: the
/// copy has the old control file and only the new checkpoint's maps. The
/// trees are quarantined, not emptied, and the new maps are kept aside
/// under a name no later checkpoint can mistake for its own.
#[test]
fn maps_only_of_an_unfinished_checkpoint_are_kept_aside() {
    let dir = tempfile::tempdir().unwrap();
    two_checkpoints(dir.path());
    let db = dir.path().join("0");
    // The copy: control of checkpoint 2, maps named for checkpoint 3.
    for t in ["5", "6"] {
        std::fs::rename(db.join(format!("{t}-2.map")), db.join(format!("{t}-3.map"))).unwrap();
    }
    let data: Vec<Vec<u8>> = ["5", "6"]
        .iter()
        .map(|t| std::fs::read(db.join(t)).unwrap())
        .collect();
    let e = open(dir.path(), 16);
    assert_eq!(e.take_load_damage().len(), 2);
    assert!(matches!(e.tree(5), Err(EngineError::Corrupt { .. })));
    assert!(matches!(e.tree(6), Err(EngineError::Corrupt { .. })));
    assert_eq!(e.checkpoint(0).unwrap(), 3);
    drop(e);
    assert_eq!(
        StdIo::new().list(&db).unwrap(),
        vec!["5", "5-3.map.quarantined", "6", "6-3.map.quarantined"]
    );
    for (t, bytes) in ["5", "6"].iter().zip(&data) {
        assert_eq!(&std::fs::read(db.join(t)).unwrap(), bytes);
    }
    // Dropping a quarantined tree removes all its files, the aside ones too.
    let e = open(dir.path(), 16);
    e.drop_tree(5).unwrap();
    assert_eq!(e.checkpoint(0).unwrap(), 4);
    assert_eq!(
        StdIo::new().list(&db).unwrap(),
        vec!["6", "6-3.map.quarantined"]
    );
}

/// Control files of earlier formats (1: no tree list; 2: the long row
/// header) are refused with an error that names the reason: their trees
/// hold row versions this build would misread.
#[test]
fn control_files_of_earlier_builds_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    two_checkpoints(dir.path());
    let control = dir.path().join("control");
    let c = crate::store::control::Control::decode(&std::fs::read(&control).unwrap()).unwrap();
    assert_eq!(
        c.trees,
        vec![(crate::TreeId::new(0, 5), 2), (crate::TreeId::new(0, 6), 2)]
    );
    let mut v1 = Vec::new();
    v1.extend_from_slice(b"ORDC");
    v1.extend_from_slice(&1u32.to_le_bytes());
    v1.extend_from_slice(&c.checkpoint.to_le_bytes());
    v1.extend_from_slice(&c.redo.to_le_bytes());
    let crc = crc32c::crc32c(&v1);
    v1.extend_from_slice(&crc.to_le_bytes());
    std::fs::write(&control, &v1).unwrap();
    let e = crate::Engine::check_control(dir.path(), &StdIo::new()).unwrap_err();
    assert!(e.to_string().contains("earlier build"), "{e}");
}

/// What no durable checkpoint names is still garbage and goes at load: the
/// files of a tree created after the durable checkpoint (a crash before the
/// next one; WAL replay recreates it), and those of a tree dropped before
/// it whose removal a crash interrupted.
#[test]
fn leftovers_of_trees_outside_the_durable_checkpoint_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("0");
    {
        let e = open(dir.path(), 16);
        let a = tree(&e, 1, -1);
        let b = tree(&e, 2, -1);
        for i in 0..500 {
            a.insert(&key(i), &value(i, 0, 50)).unwrap();
            b.insert(&key(i), &value(i, 0, 50)).unwrap();
        }
        assert_eq!(e.checkpoint(0).unwrap(), 1);
        let saved: Vec<(PathBuf, Vec<u8>)> = ["2", "2-1.map"]
            .iter()
            .map(|n| (db.join(n), std::fs::read(db.join(n)).unwrap()))
            .collect();
        drop(b);
        e.drop_tree(2).unwrap();
        assert_eq!(e.checkpoint(0).unwrap(), 2);
        // As if the process died before removing tree 2's files.
        for (p, bytes) in &saved {
            std::fs::write(p, bytes).unwrap();
        }
        // Created after checkpoint 2, never in a checkpoint.
        let c = tree(&e, 3, -1);
        for i in 0..500 {
            c.insert(&key(i), &value(i, 3, 50)).unwrap();
        }
        c.check().unwrap();
        assert!(db.join("3").exists());
    }
    let e = open(dir.path(), 16);
    assert!(e.take_load_damage().is_empty());
    assert_eq!(e.tree_ids().unwrap(), vec![crate::TreeId::new(0, 1)]);
    // Tree 1 did not change after checkpoint 1, so it kept that map.
    assert_eq!(StdIo::new().list(&db).unwrap(), vec!["1", "1-1.map"]);
    assert_eq!(contents(&e.tree(1).unwrap()).len(), 500);
}

/// An engine with a log over files whose writes can be made to fail, and
/// tree 1 of 2,000 rows, larger than the 16-page pool: new buffers are
/// had by writing dirty pages out.
fn logged_tree_larger_than_its_pool() -> (
    tempfile::TempDir,
    Arc<crate::io::CrashAfter<StdIo>>,
    Arc<crate::wal::MemWal>,
    Engine,
) {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(crate::io::CrashAfter::new(StdIo::new(), u64::MAX));
    let wal = Arc::new(crate::wal::MemWal::default());
    let e = Engine::open_logged(dir.path(), 16, io.clone(), Some(wal.clone())).unwrap();
    let t = tree(&e, 1, -1);
    for i in 0..2000 {
        t.insert(&key(i), &value(i, 0, 300)).unwrap();
    }
    (dir, io, wal, e)
}

/// A change whose record is logged must be in the tree: the leaf is changed
/// first, and everything that can fail (here: a split needs a buffer and
/// writing out the victim fails) fails before the record exists, leaving
/// the leaf unchanged; after it only posting a new page's downlink can
/// fail, which leaves the change complete (reachable by the right link).
/// Otherwise recovery would bring back what the caller was told failed.
/// (With the record logged first, as before, an error here left a logged
/// key out of the tree.)
#[test]
fn a_change_that_fails_leaves_no_record_or_is_complete() {
    let (_dir, io, wal, e) = logged_tree_larger_than_its_pool();
    let t = e.tree(1u32).unwrap();
    io.arm(0);
    let mut errors = 0;
    for i in 2000..6000 {
        let before = wal.insert_position();
        if t.insert(&key(i), &value(i, 0, 300)).is_err() {
            errors += 1;
            if wal.insert_position() != before {
                assert_eq!(
                    t.get(&key(i)).ok().flatten(),
                    Some(value(i, 0, 300)),
                    "insert {i} failed after its record was logged, and the key is not in the tree"
                );
            }
        }
    }
    assert!(errors > 0, "no failure was provoked");
}

/// A truncation is logged before its pages are freed, and what follows the
/// record can still fail (a freed page needs a buffer, and writing out the
/// victim fails). Such a failure is fatal (the log's `fatal`: a PANIC in a
/// server), never an error the caller could go on from: the log would
/// empty the tree at recovery while this process kept its rows, or keep a
/// root pointing at freed pages. Recovery then completes the truncation.
#[test]
fn a_truncation_that_fails_after_its_record_is_fatal() {
    let (dir, io, wal, e) = logged_tree_larger_than_its_pool();
    io.arm(0);
    let before = wal.insert_position();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.truncate_tree(1u32)));
    match r {
        Ok(r) => panic!("a truncation failing after its record returned {r:?}"),
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            assert!(what.contains("a logged change could not be applied"), "{what}");
        }
    }
    assert!(wal.insert_position() > before, "the truncation was logged first");
    // The process is gone; a new one recovers from the log alone.
    std::mem::forget(e);
    let e = Engine::open_logged(dir.path(), 32, Arc::new(StdIo::new()), Some(wal.clone())).unwrap();
    for rec in wal.since(e.redo_position()) {
        e.replay(&rec, &|_| Arc::new(crate::order::Bytewise) as Arc<dyn crate::order::KeyCmp>)
            .unwrap();
    }
    let t = e.tree(1u32).unwrap();
    assert!(contents(&t).is_empty(), "recovery completes the truncation");
}
