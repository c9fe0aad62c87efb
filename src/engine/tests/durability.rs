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
/// directory, control file, and the engine directory after the control
/// file's rename (the commit point).
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
