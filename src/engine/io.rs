//! File I/O behind a trait, so tests can inject a crash at any write.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The file operations the engine performs. Invariant: every operation that
/// changes durable state is a separate call, so a fault injector can stop
/// the "process" between any two of them.
pub trait FileIo: Send + Sync {
    fn read_at(&self, path: &Path, off: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write_at(&self, path: &Path, off: u64, buf: &[u8]) -> io::Result<()>;
    fn sync(&self, path: &Path) -> io::Result<()>;
    fn set_len(&self, path: &Path, len: u64) -> io::Result<()>;
    fn len(&self, path: &Path) -> io::Result<u64>;
    /// Create or replace a whole small file (maps, control) without syncing.
    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> bool;
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    /// Drops cached file handles (another process removed files: a cached
    /// handle could name a deleted file whose path now names a new one).
    fn forget_handles(&self) {}
}

/// Ordinary files through `std::fs`, with open handles cached per path.
///
/// Invariant: a cached handle always refers to the file currently at its
/// path (removal and rename drop the cache entry first).
#[derive(Default)]
pub struct StdIo {
    handles: Mutex<HashMap<PathBuf, Arc<File>>>,
}

impl StdIo {
    pub fn new() -> Self {
        Self::default()
    }

    fn handle(&self, path: &Path) -> io::Result<Arc<File>> {
        let mut map = self.handles.lock().unwrap();
        if let Some(f) = map.get(path) {
            return Ok(f.clone());
        }
        let f = Arc::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)?,
        );
        map.insert(path.to_path_buf(), f.clone());
        Ok(f)
    }

    fn forget(&self, path: &Path) {
        self.handles.lock().unwrap().remove(path);
    }
}

impl FileIo for StdIo {
    fn read_at(&self, path: &Path, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.handle(path)?.read_exact_at(buf, off)
    }
    fn write_at(&self, path: &Path, off: u64, buf: &[u8]) -> io::Result<()> {
        self.handle(path)?.write_all_at(buf, off)
    }
    fn sync(&self, path: &Path) -> io::Result<()> {
        self.handle(path)?.sync_data()
    }
    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        self.handle(path)?.set_len(len)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }
    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.forget(path);
        std::fs::write(path, bytes)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.forget(from);
        self.forget(to);
        std::fs::rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.forget(path);
        match std::fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            out.push(e?.file_name().to_string_lossy().into_owned());
        }
        out.sort();
        Ok(out)
    }
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn forget_handles(&self) {
        self.handles.lock().unwrap().clear();
    }
}

/// Wraps another [`FileIo`] and "kills the process" after a given number of
/// state-changing calls: that call and every later one fails, as if the
/// process had died there. Reads keep working (a dead process reads nothing,
/// and nothing it reads matters).
pub struct CrashAfter<I: FileIo> {
    inner: I,
    remaining: AtomicU64,
}

impl<I: FileIo> CrashAfter<I> {
    /// `steps`: how many state-changing calls succeed; `u64::MAX` never crashes.
    pub fn new(inner: I, steps: u64) -> Self {
        CrashAfter {
            inner,
            remaining: AtomicU64::new(steps),
        }
    }

    pub fn arm(&self, steps: u64) {
        self.remaining.store(steps, Ordering::SeqCst);
    }

    pub fn crashed(&self) -> bool {
        self.remaining.load(Ordering::SeqCst) == 0
    }

    fn step(&self) -> io::Result<()> {
        let mut cur = self.remaining.load(Ordering::SeqCst);
        loop {
            if cur == 0 {
                return Err(io::Error::other("injected crash"));
            }
            if cur == u64::MAX {
                return Ok(());
            }
            match self
                .remaining
                .compare_exchange(cur, cur - 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Ok(()),
                Err(v) => cur = v,
            }
        }
    }
}

impl<I: FileIo> FileIo for CrashAfter<I> {
    fn read_at(&self, path: &Path, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(path, off, buf)
    }
    fn write_at(&self, path: &Path, off: u64, buf: &[u8]) -> io::Result<()> {
        self.step()?;
        self.inner.write_at(path, off, buf)
    }
    fn sync(&self, path: &Path) -> io::Result<()> {
        self.step()?;
        self.inner.sync(path)
    }
    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        self.step()?;
        self.inner.set_len(path, len)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        self.inner.len(path)
    }
    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.step()?;
        self.inner.write_file(path, bytes)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.step()?;
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.step()?;
        self.inner.sync_dir(dir)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.step()?;
        self.inner.remove(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        self.step()?;
        self.inner.create_dir(dir)
    }
    fn forget_handles(&self) {
        self.inner.forget_handles()
    }
}
