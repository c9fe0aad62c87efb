//! Typed engine errors. Every failure a caller can see names the object:
//! a file and offset for damaged data, a tree for logical misuse.

use crate::id::TreeId;
use std::path::PathBuf;

/// An engine failure. Invariant: `Corrupt` is only produced by validation of
/// bytes read from disk (or handed in by a test), never by a logic error in
/// the engine itself, which is `Internal`; `SyncFailed` and `SyncPoisoned`
/// only by a failed fsync of an engine file and are fatal to the host
/// process (see [`EngineError::is_sync_failure`]).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("could not {op} file \"{path}\": {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("corrupted data in file \"{path}\" at offset {offset}: {detail}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        detail: String,
    },
    #[error("key of {len} bytes exceeds the maximum of {max} bytes")]
    KeyTooLarge { len: usize, max: usize },
    #[error("item of {len} bytes exceeds the maximum of {max} bytes")]
    ItemTooLarge { len: usize, max: usize },
    #[error("tree {0} does not exist")]
    NoSuchTree(TreeId),
    #[error("tree {0} already exists or awaits removal")]
    TreeExists(TreeId),
    #[error("compression level {0} is out of range (-1 = off, 0..22)")]
    BadCompression(i32),
    #[error("all {0} buffers of the page pool are pinned")]
    PoolExhausted(usize),
    #[error("engine metadata is full ({0} chunks of 8 kB in use)")]
    MetadataFull(usize),
    #[error("no free tree slot (all {0} in use)")]
    TooManyTrees(usize),
    #[error("tree {tree} is damaged: {detail}")]
    Damaged { tree: TreeId, detail: String },
    /// An fsync of a data file, map, control file or engine directory
    /// failed. The kernel may have dropped the dirty pages it could not
    /// write and will report success for the next fsync, so nothing that
    /// fsync was to make durable can be trusted: the engine is poisoned
    /// from here on (every later checkpoint and data-file write fails with
    /// `SyncPoisoned`), and the server PANICs, as PostgreSQL does for its
    /// own data files, so that crash recovery rebuilds from the last
    /// durable checkpoint and WAL.
    #[error("could not fsync \"{path}\": {source}")]
    SyncFailed {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Refused because an fsync of an engine file failed earlier in this
    /// server's life (`SyncFailed`): until a restart nothing the engine
    /// writes can be made durable.
    #[error("an earlier fsync of an engine file failed; the engine writes and checkpoints nothing until the server restarts")]
    SyncPoisoned,
}

pub type Result<T> = std::result::Result<T, EngineError>;

impl EngineError {
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EngineError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// A failed fsync, or a refusal after one: the host must not carry on
    /// (the server PANICs).
    pub fn is_sync_failure(&self) -> bool {
        matches!(
            self,
            EngineError::SyncFailed { .. } | EngineError::SyncPoisoned
        )
    }

    pub fn corrupt(path: impl Into<PathBuf>, offset: u64, detail: impl Into<String>) -> Self {
        EngineError::Corrupt {
            path: path.into(),
            offset,
            detail: detail.into(),
        }
    }
}
