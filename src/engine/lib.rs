//! The storage engine: pages, B-link trees, the page pool, data files and
//! checkpoints. No pgrx and no `pg_sys` here: the server supplies latches,
//! comparators and file I/O through small traits (`latch::LatchSet`,
//! `order::KeyCmp`, `io::FileIo`), so everything is tested in-process.

pub mod btree;
pub mod buffer;
pub mod check;
pub mod collated_order;
pub mod cursor;
#[allow(clippy::module_inception)]
pub mod edit;
pub mod engine;
pub mod error;
pub mod id;
pub mod io;
pub mod key_format;
pub mod latch;
pub mod meta;
pub(crate) mod residency;
pub mod order;
pub mod page;
pub mod store;
pub mod version;
pub mod wal;
pub mod zstd_ctx;

pub use check::CheckReport;
pub use cursor::{Cursor, Direction, Leaf, LeafWalk};
pub use engine::{Engine, Replayed, SharedMeta, Superseded, Tree, TreeOptions, TreeStats};
pub use error::{EngineError, Result};
pub use id::{IdHash, IdHasher, TreeId};

#[cfg(test)]
mod tests;
