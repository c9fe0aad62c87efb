//! File I/O behind a trait, so tests can inject a crash at any write
//! ([`CrashAfter`]: the process dies, what it wrote stays) or cut the power
//! ([`powerloss::PowerLoss`]: what was never synced may be lost too).

pub mod powerloss;

pub use powerloss::{CutReport, PowerCut, PowerLoss};

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
    /// Gives bytes `off..off + len` back to the file system: they read as
    /// zeros from then on and the file keeps its length. Only extents no
    /// checkpoint names are punched, so a punch that is lost (a crash, a
    /// file system that cannot punch: `Ok` without effect) only keeps space
    /// allocated. Not a step of a [`CrashAfter`]: it changes nothing a
    /// restart reads.
    fn punch(&self, _path: &Path, _off: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
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

/// A shared handle is as good as the file system it points to (tests keep
/// one to a [`PowerLoss`] while a [`CrashAfter`] wraps another).
impl<T: FileIo + ?Sized> FileIo for Arc<T> {
    fn read_at(&self, path: &Path, off: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(path, off, buf)
    }
    fn write_at(&self, path: &Path, off: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_at(path, off, buf)
    }
    fn sync(&self, path: &Path) -> io::Result<()> {
        (**self).sync(path)
    }
    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        (**self).set_len(path, len)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        (**self).len(path)
    }
    fn punch(&self, path: &Path, off: u64, len: u64) -> io::Result<()> {
        (**self).punch(path, off, len)
    }
    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        (**self).write_file(path, bytes)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        (**self).read_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        (**self).rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        (**self).sync_dir(dir)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        (**self).remove(path)
    }
    fn exists(&self, path: &Path) -> bool {
        (**self).exists(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        (**self).list(dir)
    }
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        (**self).create_dir(dir)
    }
    fn forget_handles(&self) {
        (**self).forget_handles()
    }
}

/// Ordinary files through `std::fs`, with open handles cached per path.
///
/// Invariant: a cached handle always refers to the file currently at its
/// path (removal and rename drop the cache entry first), and at most
/// [`MAX_CACHED_HANDLES`] handles are cached: every server process has one
/// of these, beside PostgreSQL's own descriptors, which PostgreSQL budgets
/// without knowing about ours (a process that had touched a thousand tables
/// ran out of descriptors).
#[derive(Default)]
pub struct StdIo {
    handles: Mutex<HashMap<PathBuf, Arc<File>>>,
}

/// Most file handles a process keeps open between operations.
pub const MAX_CACHED_HANDLES: usize = 32;

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
        if map.len() >= MAX_CACHED_HANDLES {
            // Any one will do: handles in use stay open through their Arc.
            if let Some(k) = map.keys().next().cloned() {
                map.remove(&k);
            }
        }
        map.insert(path.to_path_buf(), f.clone());
        Ok(f)
    }

    /// Handles cached now (tests).
    pub fn cached_handles(&self) -> usize {
        self.handles.lock().unwrap().len()
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
    fn punch(&self, path: &Path, off: u64, len: u64) -> io::Result<()> {
        punch_hole(&*self.handle(path)?, off, len)
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

/// `fallocate(PUNCH_HOLE | KEEP_SIZE)` on Linux; elsewhere, and where the
/// file system cannot punch, nothing (see [`FileIo::punch`]).
fn punch_hole(f: &File, off: u64, len: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        use std::os::raw::c_int;
        extern "C" {
            // glibc, fcntl.h; off_t is 64 bits on the 64-bit targets we build.
            fn fallocate(fd: c_int, mode: c_int, offset: i64, len: i64) -> c_int;
        }
        const FALLOC_FL_KEEP_SIZE: c_int = 0x01;
        const FALLOC_FL_PUNCH_HOLE: c_int = 0x02;
        let (Ok(o), Ok(l)) = (i64::try_from(off), i64::try_from(len)) else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        // SAFETY: a plain system call on a descriptor `f` keeps open.
        let rc = unsafe {
            fallocate(f.as_raw_fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, o, l)
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            // EOPNOTSUPP (= ENOTSUP on Linux) and ENOSYS: cannot punch here.
            if !matches!(e.raw_os_error(), Some(95) | Some(38)) {
                return Err(e);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (f, off, len);
    Ok(())
}

/// Decides what the call at which a [`CrashAfter`] "dies" does: it gets the
/// operation and its path and returns the error that call (and every later
/// one) fails with, or never returns, which stops a real process at exactly
/// that step (the server's `orioledb.debug_checkpoint_crash_at`).
pub type FaultHook = Arc<dyn Fn(&'static str, &Path) -> io::Error + Send + Sync>;

/// Wraps another [`FileIo`] and "kills the process" after a given number of
/// state-changing calls: that call and every later one fails, as if the
/// process had died there. Reads keep working (a dead process reads nothing,
/// and nothing it reads matters). Steps are numbered the same way in the
/// engine's tests and in the server's fault-injection settings.
///
/// Invariant: `hook` is only consulted once `remaining` reached 0; `arm`
/// and `arm_with` set both together.
pub struct CrashAfter<I: FileIo> {
    inner: I,
    remaining: AtomicU64,
    hook: Mutex<Option<FaultHook>>,
}

impl<I: FileIo> CrashAfter<I> {
    /// `steps`: how many state-changing calls succeed; `u64::MAX` never crashes.
    pub fn new(inner: I, steps: u64) -> Self {
        CrashAfter {
            inner,
            remaining: AtomicU64::new(steps),
            hook: Mutex::new(None),
        }
    }

    /// Let `steps` more state-changing calls succeed, then fail every call
    /// with an "injected crash" error (`u64::MAX`: disarmed).
    pub fn arm(&self, steps: u64) {
        *self.hook.lock().unwrap() = None;
        self.remaining.store(steps, Ordering::SeqCst);
    }

    /// As [`arm`](Self::arm), with `hook` deciding what the failing calls do.
    pub fn arm_with(&self, steps: u64, hook: FaultHook) {
        *self.hook.lock().unwrap() = Some(hook);
        self.remaining.store(steps, Ordering::SeqCst);
    }

    pub fn crashed(&self) -> bool {
        self.remaining.load(Ordering::SeqCst) == 0
    }

    /// The error of a call after the "death": the hook's, else a plain one.
    fn fault(&self, op: &'static str, path: &Path) -> io::Error {
        // Cloned out so a hook that never returns holds no lock.
        let hook = self.hook.lock().unwrap().clone();
        match hook {
            Some(h) => h(op, path),
            None => io::Error::other("injected crash"),
        }
    }

    fn step(&self, op: &'static str, path: &Path) -> io::Result<()> {
        let mut cur = self.remaining.load(Ordering::SeqCst);
        loop {
            if cur == 0 {
                return Err(self.fault(op, path));
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
        self.step("write", path)?;
        self.inner.write_at(path, off, buf)
    }
    fn sync(&self, path: &Path) -> io::Result<()> {
        self.step("sync", path)?;
        self.inner.sync(path)
    }
    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        self.step("truncate", path)?;
        self.inner.set_len(path, len)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        self.inner.len(path)
    }
    fn punch(&self, path: &Path, off: u64, len: u64) -> io::Result<()> {
        // A dead process punches nothing; a live one's punch is no step.
        if self.crashed() {
            return Err(self.fault("punch", path));
        }
        self.inner.punch(path, off, len)
    }
    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.step("write", path)?;
        self.inner.write_file(path, bytes)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.step("rename", from)?;
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.step("sync", dir)?;
        self.inner.sync_dir(dir)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.step("remove", path)?;
        self.inner.remove(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        self.step("create directory", dir)?;
        self.inner.create_dir(dir)
    }
    fn forget_handles(&self) {
        self.inner.forget_handles()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Touching many files keeps only a bounded number of handles open, and
    /// a file whose handle was dropped is reopened with its contents.
    #[test]
    fn cached_handles_are_bounded() {
        let dir = std::env::temp_dir().join(format!("orioledb_io_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let io = StdIo::new();
        for i in 0..200u64 {
            io.write_at(&dir.join(i.to_string()), 0, &i.to_le_bytes())
                .unwrap();
            assert!(io.cached_handles() <= MAX_CACHED_HANDLES);
        }
        for i in 0..200u64 {
            let mut b = [0u8; 8];
            io.read_at(&dir.join(i.to_string()), 0, &mut b).unwrap();
            assert_eq!(u64::from_le_bytes(b), i);
        }
        assert_eq!(io.cached_handles(), MAX_CACHED_HANDLES);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
