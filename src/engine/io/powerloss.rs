//! A file system in memory that forgets what was never synced: the engine
//! tests' model of a power cut.
//!
//! [`CrashAfter`](super::CrashAfter) stops the "process" between two file
//! operations, but everything it wrote stays, so no test could notice a
//! missing or misordered fsync. [`PowerLoss`] keeps, beside the state that
//! reads see, what a power cut could leave on disk, following POSIX:
//!
//! - a file's data (its writes and size changes, including the creation of
//!   a whole file by `write_file`) is durable once the file is synced
//!   (`sync`, or `sync_dir` of the file's own path);
//! - a directory's entries (a name created — by `create_dir` or by the first
//!   write, `set_len` or `sync` of a new file, as `StdIo` creates files —,
//!   renamed or removed) are durable once that directory is synced
//!   (`sync_dir`). Syncing a file does not make its name durable, and
//!   syncing a directory does not make the directory's own name durable:
//!   that is its parent's entry.
//!
//! [`PowerLoss::power_loss`] then replaces the state by one a power cut
//! could leave: [`PowerCut::DropUnsynced`] keeps only what was made durable;
//! [`PowerCut::Random`] also keeps a random part of the rest, deterministic
//! for a seed, in ways a file system could produce:
//!
//! - of a file's unsynced writes, any subset reaches the disk, and a write
//!   that does may be torn: only some of its 512-byte sectors (aligned in
//!   the file) arrive; unwritten holes read as zeros;
//! - of a file's unsynced size changes (`set_len`, the truncation of
//!   `write_file`), a prefix takes effect (size is metadata, journaled in
//!   order), applied in order among the surviving writes;
//! - of a directory's unsynced entry changes, each either happened or not
//!   (a rename is atomic), and a change survives only if every earlier
//!   change of the same name (either name of a rename) survived — the
//!   POSIX worst case, which allows more than a journaling file system
//!   (that keeps a prefix of them) does;
//! - a directory whose own name is lost takes everything in it along.
//!
//! Each file or directory draws how much of its unsynced state survives
//! (none, a quarter, half, three quarters, all), so both extremes come up
//! often.
//!
//! Files live in memory (contents shared copy-on-write between forks), under
//! one root directory that always exists, durably (so do the directories it
//! is in: creating or syncing them does nothing); other paths outside it
//! are an error. The root may be the engine directory itself, or a
//! directory the engine directory is created in.
//! [`PowerLoss::fork`] copies the whole state (cheaply), so a test can cut
//! the power in several ways at one instant, and
//! [`PowerLoss::capture_at`] forks automatically just before given steps,
//! numbered as `CrashAfter` numbers them (state-changing calls, from 1),
//! so one run of a workload yields the state at every step of a checkpoint.
//!
//! Cross-directory renames are refused (`Unsupported`): the engine renames
//! only within a directory, and POSIX would need both directories synced.

use super::FileIo;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Unit of a torn write: the sectors a write is made of reach the disk
/// independently.
pub const SECTOR: u64 = 512;

/// What a power cut keeps of the state that was never made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerCut {
    /// Nothing: exactly the durable state.
    DropUnsynced,
    /// A random part, chosen by the seed (see the module comment).
    Random(u64),
}

/// What a cut did to the unsynced operations of files and directories that
/// survived it (operations under a lost directory are not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutReport {
    pub kept: usize,
    pub dropped: usize,
    /// Kept writes of which only some sectors arrived (also in `kept`).
    pub torn: usize,
}

type Ino = u64;
const ROOT: Ino = 0;

#[derive(Clone, Debug)]
enum DataOp {
    Write { off: u64, bytes: Arc<[u8]> },
    SetLen(u64),
}

#[derive(Clone, Debug)]
enum EntryOp {
    Create { name: String, ino: Ino },
    Rename { from: String, to: String },
    Remove { name: String },
}

impl EntryOp {
    fn names(&self) -> Vec<&str> {
        match self {
            EntryOp::Create { name, .. } | EntryOp::Remove { name } => vec![name],
            EntryOp::Rename { from, to } => vec![from, to],
        }
    }

    fn apply(&self, entries: &mut BTreeMap<String, Ino>) {
        match self {
            EntryOp::Create { name, ino } => {
                entries.insert(name.clone(), *ino);
            }
            EntryOp::Rename { from, to } => {
                if let Some(ino) = entries.remove(from) {
                    entries.insert(to.clone(), ino);
                }
            }
            EntryOp::Remove { name } => {
                entries.remove(name);
            }
        }
    }
}

/// A file or directory. Invariant: applying `pending` in order to `durable`
/// gives `cur` (what reads see); a sync makes `durable` equal `cur` and
/// empties `pending`.
#[derive(Clone, Debug)]
enum Node {
    File {
        cur: Arc<Vec<u8>>,
        durable: Arc<Vec<u8>>,
        pending: Vec<DataOp>,
    },
    Dir {
        cur: BTreeMap<String, Ino>,
        durable: BTreeMap<String, Ino>,
        pending: Vec<EntryOp>,
    },
}

impl Node {
    fn new_file() -> Node {
        Node::File {
            cur: Arc::default(),
            durable: Arc::default(),
            pending: Vec::new(),
        }
    }

    fn new_dir() -> Node {
        Node::Dir {
            cur: BTreeMap::new(),
            durable: BTreeMap::new(),
            pending: Vec::new(),
        }
    }

    fn sync(&mut self) {
        match self {
            Node::File {
                cur,
                durable,
                pending,
            } => {
                *durable = cur.clone();
                pending.clear();
            }
            Node::Dir {
                cur,
                durable,
                pending,
            } => {
                *durable = cur.clone();
                pending.clear();
            }
        }
    }

    fn pending(&self) -> usize {
        match self {
            Node::File { pending, .. } => pending.len(),
            Node::Dir { pending, .. } => pending.len(),
        }
    }
}

/// The whole state. Invariant: every inode an entry (current, durable or
/// pending) names is in `nodes`; `ROOT` is a directory.
#[derive(Clone, Debug)]
struct Fs {
    nodes: BTreeMap<Ino, Node>,
    next: Ino,
    /// State-changing calls so far (as `CrashAfter` counts them).
    steps: u64,
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

fn is_dir(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::IsADirectory,
        format!("{}: is a directory", path.display()),
    )
}

fn not_dir(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotADirectory,
        format!("{}: not a directory", path.display()),
    )
}

impl Fs {
    fn new() -> Fs {
        Fs {
            nodes: BTreeMap::from([(ROOT, Node::new_dir())]),
            next: ROOT + 1,
            steps: 0,
        }
    }

    fn node(&mut self, ino: Ino) -> &mut Node {
        self.nodes
            .get_mut(&ino)
            .expect("entries name existing inodes")
    }

    fn lookup(&self, comps: &[String]) -> Option<Ino> {
        let mut ino = ROOT;
        for c in comps {
            match &self.nodes[&ino] {
                Node::Dir { cur, .. } => ino = *cur.get(c)?,
                Node::File { .. } => return None,
            }
        }
        Some(ino)
    }

    /// The directory that holds the last component.
    fn parent(&self, comps: &[String], path: &Path) -> io::Result<Ino> {
        let (_, dir) = comps.split_last().ok_or_else(|| is_dir(path))?;
        let ino = self.lookup(dir).ok_or_else(|| not_found(path))?;
        match self.nodes[&ino] {
            Node::Dir { .. } => Ok(ino),
            Node::File { .. } => Err(not_dir(path)),
        }
    }

    /// Adds `node` as the last component of `comps` (which must not exist).
    fn create(&mut self, comps: &[String], path: &Path, node: Node) -> io::Result<Ino> {
        let dir = self.parent(comps, path)?;
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(ino, node);
        let name = comps.last().unwrap().clone();
        let Node::Dir { cur, pending, .. } = self.node(dir) else {
            unreachable!("parent is a directory")
        };
        cur.insert(name.clone(), ino);
        pending.push(EntryOp::Create { name, ino });
        Ok(ino)
    }

    /// The file at `comps`, created empty if missing (as `StdIo` opens
    /// files for writing, syncing and resizing).
    fn file(&mut self, comps: &[String], path: &Path) -> io::Result<Ino> {
        match self.lookup(comps) {
            Some(ino) => match self.nodes[&ino] {
                Node::File { .. } => Ok(ino),
                Node::Dir { .. } => Err(is_dir(path)),
            },
            None => self.create(comps, path, Node::new_file()),
        }
    }

    fn data_op(&mut self, ino: Ino, op: DataOp) {
        let Node::File { cur, pending, .. } = self.node(ino) else {
            unreachable!("data operations are on files")
        };
        apply_data(Arc::make_mut(cur), &op, None);
        pending.push(op);
    }
}

/// Applies `op` to `data`; for a write, only the sectors `keep` accepts
/// (all when None).
fn apply_data(data: &mut Vec<u8>, op: &DataOp, mut keep: Option<&mut dyn FnMut() -> bool>) {
    match op {
        DataOp::SetLen(n) => data.resize(*n as usize, 0),
        DataOp::Write { off, bytes } => {
            let (off, end) = (*off, *off + bytes.len() as u64);
            let mut at = off;
            while at < end {
                let next = ((at / SECTOR + 1) * SECTOR).min(end);
                if keep.as_mut().is_none_or(|k| k()) {
                    if data.len() < next as usize {
                        data.resize(next as usize, 0);
                    }
                    data[at as usize..next as usize]
                        .copy_from_slice(&bytes[(at - off) as usize..(next - off) as usize]);
                }
                at = next;
            }
        }
    }
}

/// SplitMix64, deterministic per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Decides which unsynced operations a cut keeps.
struct Chooser {
    rng: Option<Rng>,
    report: CutReport,
}

impl Chooser {
    /// How many quarters of one node's unsynced operations tend to survive.
    fn share(&mut self) -> u64 {
        self.rng.as_mut().map_or(0, |r| r.below(5))
    }

    fn keep(&mut self, quarters: u64) -> bool {
        let keep = self.rng.as_mut().is_some_and(|r| r.below(4) < quarters);
        if keep {
            self.report.kept += 1;
        } else {
            self.report.dropped += 1;
        }
        keep
    }

    /// What survives of a file.
    fn file(&mut self, durable: &Arc<Vec<u8>>, pending: &[DataOp]) -> Arc<Vec<u8>> {
        if pending.is_empty() {
            return durable.clone();
        }
        let quarters = self.share();
        let mut data = durable.as_ref().clone();
        let mut sizes_ok = true;
        for op in pending {
            let keep = match op {
                DataOp::SetLen(_) if sizes_ok => {
                    sizes_ok = self.keep(quarters);
                    sizes_ok
                }
                DataOp::SetLen(_) => {
                    self.report.dropped += 1;
                    false
                }
                DataOp::Write { .. } => self.keep(quarters),
            };
            if !keep {
                continue;
            }
            let rng = self.rng.as_mut().expect("only a random cut keeps anything");
            match op {
                DataOp::Write { off, bytes }
                    if rng.below(8) == 0
                        && (off + bytes.len() as u64).div_ceil(SECTOR) - off / SECTOR > 1 =>
                {
                    self.report.torn += 1;
                    let mut half = || rng.below(2) == 0;
                    apply_data(&mut data, op, Some(&mut half));
                }
                _ => apply_data(&mut data, op, None),
            }
        }
        Arc::new(data)
    }

    /// What survives of a directory's entries.
    fn dir(
        &mut self,
        durable: &BTreeMap<String, Ino>,
        pending: &[EntryOp],
    ) -> BTreeMap<String, Ino> {
        let quarters = self.share();
        let mut entries = durable.clone();
        // Names whose change was lost: later changes of them are lost too.
        let mut lost: HashSet<&str> = HashSet::new();
        for op in pending {
            let names = op.names();
            if names.iter().any(|n| lost.contains(n)) {
                self.report.dropped += 1;
                lost.extend(names);
            } else if self.keep(quarters) {
                op.apply(&mut entries);
            } else {
                lost.extend(names);
            }
        }
        entries
    }
}

/// Captures requested by [`PowerLoss::capture_at`] and taken so far.
#[derive(Default)]
struct Captures {
    at: BTreeSet<u64>,
    taken: Vec<(u64, PowerLoss)>,
}

/// An in-memory [`FileIo`] that remembers what is durable and can cut the
/// power (see the module comment for the model).
///
/// Invariant: reads see every operation done (the current state); what
/// [`power_loss`](Self::power_loss) may drop is exactly what no sync
/// covered yet.
pub struct PowerLoss {
    root: PathBuf,
    fs: Mutex<Fs>,
    captures: Mutex<Captures>,
}

impl PowerLoss {
    /// An empty file system whose root directory (which always exists, and
    /// durably) is `root`.
    pub fn new(root: impl AsRef<Path>) -> PowerLoss {
        PowerLoss {
            root: root.as_ref().to_path_buf(),
            fs: Mutex::new(Fs::new()),
            captures: Mutex::default(),
        }
    }

    /// An independent copy of the whole state (durable and current), with
    /// no captures requested.
    pub fn fork(&self) -> PowerLoss {
        let fs = self.fs.lock().unwrap().clone();
        PowerLoss {
            root: self.root.clone(),
            fs: Mutex::new(fs),
            captures: Mutex::default(),
        }
    }

    /// State-changing calls made so far.
    pub fn steps(&self) -> u64 {
        self.fs.lock().unwrap().steps
    }

    /// Unsynced operations (file data and directory entries) right now.
    pub fn unsynced(&self) -> usize {
        let fs = self.fs.lock().unwrap();
        fs.nodes.values().map(Node::pending).sum()
    }

    /// Forks the state just before each state-changing call whose number
    /// (counted from 1 over this file system's life) is in `steps`, i.e.
    /// after `step - 1` calls; [`take_captures`](Self::take_captures) hands
    /// them out. Replaces earlier requests.
    pub fn capture_at(&self, steps: impl IntoIterator<Item = u64>) {
        self.captures.lock().unwrap().at = steps.into_iter().collect();
    }

    /// The forks taken so far, with the step each was taken before; the
    /// pending requests stay.
    pub fn take_captures(&self) -> Vec<(u64, PowerLoss)> {
        std::mem::take(&mut self.captures.lock().unwrap().taken)
    }

    /// Cuts the power: afterwards the state (current and durable alike) is
    /// one the cut could leave on disk, and nothing is unsynced.
    pub fn power_loss(&self, cut: PowerCut) -> CutReport {
        let mut fs = self.fs.lock().unwrap();
        let mut chooser = Chooser {
            rng: match cut {
                PowerCut::DropUnsynced => None,
                PowerCut::Random(seed) => Some(Rng(seed)),
            },
            report: CutReport::default(),
        };
        let mut nodes = BTreeMap::new();
        // Depth first from the root, entries in name order: deterministic.
        let mut todo = vec![ROOT];
        while let Some(ino) = todo.pop() {
            let node = match &fs.nodes[&ino] {
                Node::File {
                    durable, pending, ..
                } => {
                    let data = chooser.file(durable, pending);
                    Node::File {
                        cur: data.clone(),
                        durable: data,
                        pending: Vec::new(),
                    }
                }
                Node::Dir {
                    durable, pending, ..
                } => {
                    let entries = chooser.dir(durable, pending);
                    todo.extend(entries.values().rev());
                    Node::Dir {
                        cur: entries.clone(),
                        durable: entries,
                        pending: Vec::new(),
                    }
                }
            };
            let fresh = nodes.insert(ino, node).is_none();
            assert!(fresh, "inode {ino} reachable by two names");
        }
        fs.nodes = nodes;
        chooser.report
    }

    /// Whether `path` is a directory the root is in (it exists, durably:
    /// creating or syncing it does nothing).
    fn above_root(&self, path: &Path) -> bool {
        path != self.root && self.root.starts_with(path)
    }

    /// The path's components below the root.
    fn comps(&self, path: &Path) -> io::Result<Vec<String>> {
        let rel = path.strip_prefix(&self.root).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is outside the power-loss root {}",
                    path.display(),
                    self.root.display()
                ),
            )
        })?;
        rel.components()
            .map(|c| match c {
                Component::Normal(s) => Ok(s.to_string_lossy().into_owned()),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{}: only plain names below the root", path.display()),
                )),
            })
            .collect()
    }

    /// Counts a state-changing call (forking first if asked to) and runs it.
    fn step<T>(
        &self,
        path: &Path,
        f: impl FnOnce(&mut Fs, Vec<String>) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut fs = self.fs.lock().unwrap();
        let next = fs.steps + 1;
        {
            let mut c = self.captures.lock().unwrap();
            if c.at.remove(&next) {
                let copy = PowerLoss {
                    root: self.root.clone(),
                    fs: Mutex::new(fs.clone()),
                    captures: Mutex::default(),
                };
                c.taken.push((next, copy));
            }
        }
        fs.steps = next;
        let comps = self.comps(path)?;
        f(&mut fs, comps)
    }

    /// Runs a read-only call.
    fn read<T>(
        &self,
        path: &Path,
        f: impl FnOnce(&Fs, Vec<String>) -> io::Result<T>,
    ) -> io::Result<T> {
        let fs = self.fs.lock().unwrap();
        f(&fs, self.comps(path)?)
    }
}

impl FileIo for PowerLoss {
    fn read_at(&self, path: &Path, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read(path, |fs, comps| {
            let ino = fs.lookup(&comps).ok_or_else(|| not_found(path))?;
            let Node::File { cur, .. } = &fs.nodes[&ino] else {
                return Err(is_dir(path));
            };
            let end = off as usize + buf.len();
            if end > cur.len() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{}: read past the end", path.display()),
                ));
            }
            buf.copy_from_slice(&cur[off as usize..end]);
            Ok(())
        })
    }

    fn write_at(&self, path: &Path, off: u64, buf: &[u8]) -> io::Result<()> {
        self.step(path, |fs, comps| {
            let ino = fs.file(&comps, path)?;
            fs.data_op(
                ino,
                DataOp::Write {
                    off,
                    bytes: buf.into(),
                },
            );
            Ok(())
        })
    }

    fn sync(&self, path: &Path) -> io::Result<()> {
        self.step(path, |fs, comps| {
            let ino = fs.file(&comps, path)?;
            fs.node(ino).sync();
            Ok(())
        })
    }

    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        self.step(path, |fs, comps| {
            let ino = fs.file(&comps, path)?;
            fs.data_op(ino, DataOp::SetLen(len));
            Ok(())
        })
    }

    /// A punch is modelled as a write of zeros that a power cut may lose
    /// like any unsynced write: a punched extent some checkpoint still
    /// needed reads as a damaged page.
    fn punch(&self, path: &Path, off: u64, len: u64) -> io::Result<()> {
        self.step(path, |fs, comps| {
            let ino = fs.file(&comps, path)?;
            let Node::File { cur, .. } = fs.node(ino) else {
                return Err(is_dir(path));
            };
            let end = (off + len).min(cur.len() as u64);
            if end > off {
                let bytes = vec![0u8; (end - off) as usize];
                fs.data_op(ino, DataOp::Write { off, bytes: bytes.into() });
            }
            Ok(())
        })
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        self.read(path, |fs, comps| {
            let ino = fs.lookup(&comps).ok_or_else(|| not_found(path))?;
            match &fs.nodes[&ino] {
                Node::File { cur, .. } => Ok(cur.len() as u64),
                Node::Dir { .. } => Err(is_dir(path)),
            }
        })
    }

    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.step(path, |fs, comps| {
            // Like std::fs::write: an existing file is truncated and
            // rewritten in place (same inode), a missing one created.
            let ino = fs.file(&comps, path)?;
            fs.data_op(ino, DataOp::SetLen(0));
            fs.data_op(
                ino,
                DataOp::Write {
                    off: 0,
                    bytes: bytes.into(),
                },
            );
            Ok(())
        })
    }

    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.read(path, |fs, comps| {
            let ino = fs.lookup(&comps).ok_or_else(|| not_found(path))?;
            match &fs.nodes[&ino] {
                Node::File { cur, .. } => Ok(cur.as_ref().clone()),
                Node::Dir { .. } => Err(is_dir(path)),
            }
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let to_comps = self.comps(to)?;
        self.step(from, |fs, comps| {
            let dir = fs.parent(&comps, from)?;
            if fs.parent(&to_comps, to)? != dir {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "rename {} to {}: only within a directory",
                        from.display(),
                        to.display()
                    ),
                ));
            }
            let (a, b) = (
                comps.last().unwrap().clone(),
                to_comps.last().unwrap().clone(),
            );
            let src = fs.lookup(&comps).ok_or_else(|| not_found(from))?;
            if let Some(dst) = fs.lookup(&to_comps) {
                if matches!(fs.nodes[&dst], Node::Dir { .. }) {
                    return Err(is_dir(to));
                }
            }
            if a == b {
                return Ok(());
            }
            let Node::Dir { cur, pending, .. } = fs.node(dir) else {
                unreachable!("parent is a directory")
            };
            cur.remove(&a);
            cur.insert(b.clone(), src);
            pending.push(EntryOp::Rename { from: a, to: b });
            Ok(())
        })
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if self.above_root(dir) {
            // The root's name is durable already.
            return self.step(&self.root, |_, _| Ok(()));
        }
        self.step(dir, |fs, comps| {
            // fsync of an open directory (or, as StdIo would, of a file).
            let ino = fs.lookup(&comps).ok_or_else(|| not_found(dir))?;
            fs.node(ino).sync();
            Ok(())
        })
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.step(path, |fs, comps| {
            let Some(ino) = fs.lookup(&comps) else {
                return Ok(()); // as StdIo: removing a missing file is fine
            };
            if matches!(fs.nodes[&ino], Node::Dir { .. }) {
                return Err(is_dir(path));
            }
            let dir = fs.parent(&comps, path)?;
            let name = comps.last().unwrap().clone();
            let Node::Dir { cur, pending, .. } = fs.node(dir) else {
                unreachable!("parent is a directory")
            };
            cur.remove(&name);
            pending.push(EntryOp::Remove { name });
            Ok(())
        })
    }

    fn exists(&self, path: &Path) -> bool {
        self.above_root(path)
            || self
                .read(path, |fs, comps| Ok(fs.lookup(&comps).is_some()))
                .unwrap_or(false)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.read(dir, |fs, comps| {
            let ino = fs.lookup(&comps).ok_or_else(|| not_found(dir))?;
            match &fs.nodes[&ino] {
                Node::Dir { cur, .. } => Ok(cur.keys().cloned().collect()),
                Node::File { .. } => Err(not_dir(dir)),
            }
        })
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        if self.above_root(dir) {
            return self.step(&self.root, |_, _| Ok(()));
        }
        self.step(dir, |fs, comps| {
            // Like create_dir_all: every missing level.
            for n in 1..=comps.len() {
                match fs.lookup(&comps[..n]) {
                    Some(ino) if matches!(fs.nodes[&ino], Node::Dir { .. }) => {}
                    Some(_) => {
                        return Err(io::Error::new(
                            io::ErrorKind::AlreadyExists,
                            format!("{}: a file is in the way", dir.display()),
                        ))
                    }
                    None => {
                        fs.create(&comps[..n], dir, Node::new_dir())?;
                    }
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::CrashAfter;

    fn root() -> PathBuf {
        PathBuf::from("/nonexistent/powerloss")
    }

    fn p(name: &str) -> PathBuf {
        root().join(name)
    }

    /// Data needs the file synced, a new name the directory synced; each
    /// alone is not enough.
    #[test]
    fn data_needs_file_sync_and_names_need_directory_sync() {
        for (sync_file, sync_dir) in [(false, false), (true, false), (false, true), (true, true)] {
            let fs = PowerLoss::new(root());
            fs.write_at(&p("f"), 0, b"hello").unwrap();
            if sync_file {
                fs.sync(&p("f")).unwrap();
            }
            if sync_dir {
                fs.sync_dir(&root()).unwrap();
            }
            assert_eq!(fs.read_file(&p("f")).unwrap(), b"hello");
            fs.power_loss(PowerCut::DropUnsynced);
            match (sync_file, sync_dir) {
                (_, false) => assert!(!fs.exists(&p("f"))),
                (false, true) => assert_eq!(fs.read_file(&p("f")).unwrap(), b""),
                (true, true) => assert_eq!(fs.read_file(&p("f")).unwrap(), b"hello"),
            }
            assert_eq!(fs.unsynced(), 0);
        }
    }

    /// Overwrites of a durable file: a random cut keeps any subset of the
    /// unsynced writes, some of them torn at sector boundaries, and the
    /// same seed always gives the same result.
    #[test]
    fn random_cut_keeps_any_subset_of_writes_deterministically() {
        let build = || {
            let fs = PowerLoss::new(root());
            fs.write_at(&p("f"), 0, &vec![0u8; 16 * 1024]).unwrap();
            fs.sync(&p("f")).unwrap();
            fs.sync_dir(&root()).unwrap();
            for i in 0..16u64 {
                fs.write_at(&p("f"), i * 1024, &vec![1 + i as u8; 1024])
                    .unwrap();
            }
            fs
        };
        let mut outcomes = BTreeSet::new();
        let mut torn = 0;
        for seed in 0..200 {
            let fs = build();
            let report = fs.power_loss(PowerCut::Random(seed));
            assert_eq!(report.kept + report.dropped, 16);
            torn += report.torn;
            let got = fs.read_file(&p("f")).unwrap();
            assert_eq!(got.len(), 16 * 1024);
            // Every sector holds either the old or the new bytes.
            for (s, sector) in got.chunks(SECTOR as usize).enumerate() {
                let new = 1 + (s / 2) as u8;
                assert!(sector.iter().all(|&b| b == 0) || sector.iter().all(|&b| b == new));
            }
            let again = build();
            assert_eq!(again.power_loss(PowerCut::Random(seed)), report);
            assert_eq!(again.read_file(&p("f")).unwrap(), got);
            outcomes.insert(got);
        }
        assert!(outcomes.len() > 100, "{} distinct outcomes", outcomes.len());
        assert!(torn > 0, "no torn write in 200 cuts");
    }

    /// The write-sync-rename protocol: after the rename, until the directory
    /// is synced, a cut leaves the old name or the new one, each complete.
    #[test]
    fn rename_is_atomic_and_needs_the_directory_synced() {
        let mut seen = BTreeSet::new();
        for seed in 0..50 {
            let fs = PowerLoss::new(root());
            fs.write_file(&p("control"), b"old").unwrap();
            fs.sync(&p("control")).unwrap();
            fs.sync_dir(&root()).unwrap();
            fs.write_file(&p("control.tmp"), b"new").unwrap();
            fs.sync(&p("control.tmp")).unwrap();
            fs.rename(&p("control.tmp"), &p("control")).unwrap();
            assert_eq!(fs.list(&root()).unwrap(), vec!["control"]);
            let cut = if seed == 0 {
                PowerCut::DropUnsynced
            } else {
                PowerCut::Random(seed)
            };
            fs.power_loss(cut);
            let control = fs.read_file(&p("control")).unwrap();
            let tmp = fs.read_file(&p("control.tmp")).ok();
            if seed == 0 {
                assert_eq!(control, b"old");
            }
            // The rename depends on the creation of the temporary name.
            match (control.as_slice(), tmp.as_deref()) {
                (b"new", None) | (b"old", None) | (b"old", Some(b"new")) => {}
                other => panic!("seed {seed}: impossible outcome {other:?}"),
            }
            seen.insert((control, tmp));
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
        // Synced directory: the rename stays.
        let fs = PowerLoss::new(root());
        fs.write_file(&p("a"), b"x").unwrap();
        fs.sync(&p("a")).unwrap();
        fs.rename(&p("a"), &p("b")).unwrap();
        fs.sync_dir(&root()).unwrap();
        fs.power_loss(PowerCut::Random(7));
        assert_eq!(fs.list(&root()).unwrap(), vec!["b"]);
    }

    /// A directory whose own name was never made durable is lost with
    /// everything in it, synced or not; removals come back if unsynced.
    #[test]
    fn directories_and_removals() {
        let fs = PowerLoss::new(root());
        fs.create_dir(&p("5/6")).unwrap();
        fs.write_file(&p("5/6/f"), b"data").unwrap();
        fs.sync(&p("5/6/f")).unwrap();
        fs.sync_dir(&p("5/6")).unwrap();
        fs.sync_dir(&p("5")).unwrap();
        let lost = fs.fork();
        lost.power_loss(PowerCut::DropUnsynced);
        assert!(lost.list(&root()).unwrap().is_empty());
        fs.sync_dir(&root()).unwrap();
        fs.remove(&p("5/6/f")).unwrap();
        assert!(!fs.exists(&p("5/6/f")));
        fs.power_loss(PowerCut::DropUnsynced);
        assert_eq!(fs.read_file(&p("5/6/f")).unwrap(), b"data");
        fs.remove(&p("5/6/f")).unwrap();
        fs.sync_dir(&p("5/6")).unwrap();
        fs.power_loss(PowerCut::DropUnsynced);
        assert!(!fs.exists(&p("5/6/f")));
        assert!(fs.exists(&p("5/6")));
    }

    /// Truncations: a prefix of them takes effect; reads see all of them.
    #[test]
    fn truncations_and_rewrites() {
        let fs = PowerLoss::new(root());
        fs.write_at(&p("f"), 0, &[7u8; 4096]).unwrap();
        fs.sync(&p("f")).unwrap();
        fs.sync_dir(&root()).unwrap();
        fs.set_len(&p("f"), 1024).unwrap();
        fs.write_file(&p("f"), b"short").unwrap();
        assert_eq!(fs.read_file(&p("f")).unwrap(), b"short");
        let mut lens = BTreeSet::new();
        for seed in 0..100 {
            let f = fs.fork();
            f.power_loss(PowerCut::Random(seed));
            let got = f.read_file(&p("f")).unwrap();
            lens.insert(got.len());
            // Never a later truncation without the earlier one.
            assert!(
                got.len() == 4096
                    || got.len() == 1024
                    || got.starts_with(b"short")
                    || got.len() == 0,
                "seed {seed}: {} bytes",
                got.len()
            );
        }
        assert!(lens.contains(&4096) && lens.contains(&5), "{lens:?}");
        fs.power_loss(PowerCut::DropUnsynced);
        assert_eq!(fs.read_file(&p("f")).unwrap(), vec![7u8; 4096]);
    }

    /// Forks taken before the requested steps, numbered as `CrashAfter`
    /// numbers them; a `CrashAfter` in front stops the calls that reach it.
    #[test]
    fn captures_and_crash_after_compose() {
        let fs = Arc::new(PowerLoss::new(root()));
        let io = CrashAfter::new(fs.clone(), u64::MAX);
        fs.capture_at([2, 3]);
        io.write_at(&p("f"), 0, b"a").unwrap();
        io.sync(&p("f")).unwrap();
        io.sync_dir(&root()).unwrap();
        io.arm(1);
        io.write_at(&p("f"), 0, b"b").unwrap();
        assert!(io.write_at(&p("f"), 0, b"c").is_err());
        assert_eq!(fs.steps(), 4);
        assert_eq!(fs.read_file(&p("f")).unwrap(), b"b");
        let caps = fs.take_captures();
        assert_eq!(caps.iter().map(|c| c.0).collect::<Vec<_>>(), vec![2, 3]);
        // Before step 3 (the directory sync) the name was not durable.
        caps[1].1.power_loss(PowerCut::DropUnsynced);
        assert!(!caps[1].1.exists(&p("f")));
        fs.power_loss(PowerCut::DropUnsynced);
        assert_eq!(fs.read_file(&p("f")).unwrap(), b"a");
        assert!(fs.read_at(&p("f"), 0, &mut [0u8; 2]).is_err());
        assert!(fs.write_at(Path::new("/elsewhere"), 0, b"x").is_err());
        // The directories the root is in exist, durably.
        assert!(fs.exists(Path::new("/nonexistent")));
        fs.sync_dir(Path::new("/nonexistent")).unwrap();
        fs.create_dir(&root()).unwrap();
        assert!(fs.sync_dir(Path::new("/elsewhere")).is_err());
    }
}
